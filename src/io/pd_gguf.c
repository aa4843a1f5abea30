/*
 * pd_gguf.c - the GGUF reader (see pd_gguf.h). The checks follow the
 * order of ggml's gguf_init_from_file_impl (ggml src/gguf.cpp), so a file
 * ggml refuses is refused here for the same defect.
 */
#include "pd_gguf.h"
#include "pd_quant.h"
#include "pd_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ggml caps strings at 1 GiB */
#define PD_GGUF_MAX_STRING (1ull << 30)

static const char *const pd_vtype_names[PD_GGUF_VTYPE_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};
static const int pd_vtype_size[PD_GGUF_VTYPE_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

const char *pd_gguf_vtype_name(enum pd_gguf_vtype t)
{
	return (unsigned)t < PD_GGUF_VTYPE_COUNT ? pd_vtype_names[t] : "?";
}

/* A cursor over the mapping; every read checks the bytes left. */
struct pd_cur {
	const unsigned char *p;
	size_t left;
	const char *path;
	const char *what;               /* what is being read, for messages */
};

static int pd_cur_need(struct pd_cur *c, uint64_t n)
{
	if (n > c->left)
		return pd_errorf("%s: truncated: %s needs %llu bytes, %zu are left", c->path, c->what,
				 (unsigned long long)n, c->left);
	return 0;
}

static int pd_cur_bytes(struct pd_cur *c, void *out, size_t n)
{
	if (pd_cur_need(c, n))
		return -1;
	memcpy(out, c->p, n);
	c->p += n;
	c->left -= n;
	return 0;
}

static uint64_t pd_le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int pd_cur_u32(struct pd_cur *c, uint32_t *v)
{
	unsigned char b[4];

	if (pd_cur_bytes(c, b, 4))
		return -1;
	*v = (uint32_t)pd_le(b, 4);
	return 0;
}

static int pd_cur_u64(struct pd_cur *c, uint64_t *v)
{
	unsigned char b[8];

	if (pd_cur_bytes(c, b, 8))
		return -1;
	*v = pd_le(b, 8);
	return 0;
}

/* A string: u64 length + bytes; a NUL-terminated copy in *OUT. */
static int pd_cur_string(struct pd_cur *c, char **out, uint64_t max)
{
	uint64_t n;

	*out = NULL;
	if (pd_cur_u64(c, &n))
		return -1;
	if (n > max || n > PD_GGUF_MAX_STRING)
		return pd_errorf("%s: %s of %llu bytes (at most %llu)", c->path, c->what, (unsigned long long)n,
				 (unsigned long long)(max < PD_GGUF_MAX_STRING ? max : PD_GGUF_MAX_STRING));
	if (pd_cur_need(c, n))
		return -1;
	*out = pd_malloc((size_t)n + 1, "GGUF string");
	if (!*out)
		return -1;
	memcpy(*out, c->p, (size_t)n);
	(*out)[n] = 0;
	c->p += n;
	c->left -= (size_t)n;
	return 0;
}

/* One value of scalar type T into KV. */
static int pd_cur_scalar(struct pd_cur *c, enum pd_gguf_vtype t, struct pd_gguf_kv *kv)
{
	unsigned char b[8];
	int n = pd_vtype_size[t];
	uint64_t u;

	if (pd_cur_bytes(c, b, (size_t)n))
		return -1;
	u = pd_le(b, n);
	switch (t) {
	case PD_GGUF_I8:
		kv->i = (int8_t)u;
		break;
	case PD_GGUF_I16:
		kv->i = (int16_t)u;
		break;
	case PD_GGUF_I32:
		kv->i = (int32_t)u;
		break;
	case PD_GGUF_I64:
		kv->i = (int64_t)u;
		break;
	case PD_GGUF_F32: {
		float f;
		uint32_t u32 = (uint32_t)u;

		memcpy(&f, &u32, sizeof(f));
		kv->f = f;
		break;
	}
	case PD_GGUF_F64:
		memcpy(&kv->f, &u, sizeof(double));
		break;
	default:	/* u8, u16, u32, u64, bool */
		kv->u = u;
		kv->i = (int64_t)u;
		break;
	}
	return 0;
}

static int pd_gguf_read_kv(struct pd_cur *c, struct pd_gguf_kv *kv)
{
	uint32_t t;

	c->what = "a key";
	if (pd_cur_string(c, &kv->key, PD_GGUF_MAX_STRING))
		return -1;
	if (!kv->key[0])
		return pd_errorf("%s: a key-value pair has an empty key", c->path);
	c->what = "a value type";
	if (pd_cur_u32(c, &t))
		return -1;
	if (t >= PD_GGUF_VTYPE_COUNT)
		return pd_errorf("%s: key '%s' has value type %u (known: 0 to 12)", c->path, kv->key, t);
	kv->type = (enum pd_gguf_vtype)t;
	c->what = kv->key;
	if (t == PD_GGUF_STRING)
		return pd_cur_string(c, &kv->str, PD_GGUF_MAX_STRING);
	if (t != PD_GGUF_ARRAY)
		return pd_cur_scalar(c, kv->type, kv);
	if (pd_cur_u32(c, &t) || pd_cur_u64(c, &kv->count))
		return -1;
	if (t >= PD_GGUF_VTYPE_COUNT || t == PD_GGUF_ARRAY)
		return pd_errorf("%s: key '%s' is an array of value type %u", c->path, kv->key, t);
	kv->elem = (enum pd_gguf_vtype)t;
	kv->raw = c->p;
	if (t != PD_GGUF_STRING) {
		/* the count against the bytes left, before anything is skipped */
		if (kv->count > c->left / (uint64_t)pd_vtype_size[t])
			return pd_errorf("%s: key '%s': an array of %llu %s values does not fit in the %zu bytes left",
					 c->path, kv->key, (unsigned long long)kv->count, pd_vtype_names[t], c->left);
		c->p += kv->count * (uint64_t)pd_vtype_size[t];
		c->left -= (size_t)(kv->count * (uint64_t)pd_vtype_size[t]);
		return 0;
	}
	if (kv->count > c->left / 8)
		return pd_errorf("%s: key '%s': an array of %llu strings does not fit in the %zu bytes left", c->path,
				 kv->key, (unsigned long long)kv->count, c->left);
	for (uint64_t k = 0; k < kv->count; k++) {
		uint64_t n;

		if (pd_cur_u64(c, &n))
			return -1;
		if (n > PD_GGUF_MAX_STRING || pd_cur_need(c, n))
			return pd_errorf("%s: key '%s': string %llu of the array runs past the end", c->path, kv->key,
					 (unsigned long long)k);
		c->p += n;
		c->left -= (size_t)n;
	}
	return 0;
}

static int pd_gguf_read_tensor(struct pd_gguf *g, struct pd_cur *c, struct pd_gguf_tensor *t, int64_t index)
{
	uint32_t nd;
	uint32_t type;
	const struct pd_qtype_info *q;

	c->what = "a tensor name";
	if (pd_cur_string(c, &t->name, PD_GGUF_MAX_NAME))
		return -1;
	c->what = t->name;
	if (pd_cur_u32(c, &nd))
		return -1;
	if (nd < 1 || nd > PD_GGUF_MAX_DIMS)
		return pd_errorf("%s: tensor '%s' has %u dimensions (1 to %d)", g->path, t->name, nd, PD_GGUF_MAX_DIMS);
	t->ndim = (int)nd;
	for (int d = 0; d < t->ndim; d++) {
		uint64_t v;

		if (pd_cur_u64(c, &v))
			return -1;
		t->ne[d] = (int64_t)v;
		if (t->ne[d] < 0)
			return pd_errorf("%s: tensor '%s' has a negative dimension (%lld)", g->path, t->name,
					 (long long)t->ne[d]);
	}
	/* the element count by division first: a product that overflows (or
	 * wraps to exactly 0) is refused here */
	t->numel = 1;
	for (int d = 0; d < t->ndim; d++) {
		if (t->ne[d] != 0 && t->numel > INT64_MAX / t->ne[d])
			return pd_errorf("%s: tensor '%s': its element count overflows", g->path, t->name);
		t->numel *= t->ne[d];
	}
	for (int d = 0; d < t->ndim; d++)
		t->shape[d] = t->ne[t->ndim - 1 - d];
	if (pd_cur_u32(c, &type))
		return -1;
	q = pd_qtype_get((int)type);
	if (!q)
		return pd_errorf("%s: tensor '%s' has ggml type %u, which pdit does not know (retired or newer)",
				 g->path, t->name, type);
	t->type = (int)type;
	if (t->ne[0] % q->block_size)
		return pd_errorf("%s: tensor '%s': rows of %lld %s elements are not whole blocks of %d", g->path,
				 t->name, (long long)t->ne[0], q->name, q->block_size);
	if ((uint64_t)(t->numel / q->block_size) > SIZE_MAX / (uint64_t)q->block_bytes)
		return pd_errorf("%s: tensor '%s' is too large", g->path, t->name);
	t->nbytes = (size_t)(t->numel / q->block_size) * (size_t)q->block_bytes;
	if (pd_cur_u64(c, &t->offset))
		return -1;
	(void)index;
	return 0;
}

static int pd_gguf_parse(struct pd_gguf *g)
{
	struct pd_cur c = { g->map, g->size, g->path, "the header" };
	unsigned char magic[4];
	uint64_t n_tensors, n_kv, expect = 0;
	const struct pd_gguf_kv *al;

	if (g->size < 24 || pd_cur_bytes(&c, magic, 4) || memcmp(magic, "GGUF", 4))
		return pd_errorf("%s: not a GGUF file (%s)", g->path,
				 g->size < 24 ? "shorter than a GGUF header" : "no GGUF magic");
	if (pd_cur_u32(&c, &g->version))
		return -1;
	if (g->version == 1)
		return pd_errorf("%s: GGUF version 1 (32-bit counts) is not supported", g->path);
	if (g->version != 2 && g->version != 3)
		return pd_errorf("%s: GGUF version %u%s (pdit reads 2 and 3)", g->path, g->version,
				 (g->version & 0xffff) == 0 && g->version >> 16 ? ", a big-endian file?" : "");
	if (pd_cur_u64(&c, &n_tensors) || pd_cur_u64(&c, &n_kv))
		return -1;
	/* signed counts, each against the smallest entry the bytes left could hold */
	if ((int64_t)n_tensors < 0 || n_tensors > c.left / (8 + 4 + 8 + 4 + 8))
		return pd_errorf("%s: %lld tensors cannot fit in the file", g->path, (long long)(int64_t)n_tensors);
	if ((int64_t)n_kv < 0 || n_kv > c.left / (8 + 4 + 1))
		return pd_errorf("%s: %lld key-value pairs cannot fit in the file", g->path, (long long)(int64_t)n_kv);
	g->kv = pd_calloc((size_t)n_kv + 1, sizeof(*g->kv), "GGUF pairs");
	if (!g->kv)
		return -1;
	for (g->n_kv = 0; g->n_kv < (int64_t)n_kv; g->n_kv++) {
		struct pd_gguf_kv *kv = &g->kv[g->n_kv];

		if (pd_gguf_read_kv(&c, kv)) {
			g->n_kv++;
			return -1;
		}
		for (int64_t j = 0; j < g->n_kv; j++)
			if (strcmp(g->kv[j].key, kv->key) == 0) {
				g->n_kv++;
				return pd_errorf("%s: key '%s' appears twice", g->path, kv->key);
			}
	}
	g->alignment = 32;
	al = pd_gguf_kv_find(g, "general.alignment");
	if (al) {
		if (al->type != PD_GGUF_U32)
			return pd_errorf("%s: general.alignment is a %s, not a u32", g->path, pd_vtype_names[al->type]);
		if (al->u == 0 || (al->u & (al->u - 1)))
			return pd_errorf("%s: general.alignment %llu is not a power of 2", g->path,
					 (unsigned long long)al->u);
		g->alignment = al->u;
	}
	g->tensors = pd_calloc((size_t)n_tensors + 1, sizeof(*g->tensors), "GGUF tensors");
	if (!g->tensors)
		return -1;
	for (g->n_tensors = 0; g->n_tensors < (int64_t)n_tensors; g->n_tensors++) {
		struct pd_gguf_tensor *t = &g->tensors[g->n_tensors];

		if (pd_gguf_read_tensor(g, &c, t, g->n_tensors)) {
			g->n_tensors++;
			return -1;
		}
		for (int64_t j = 0; j < g->n_tensors; j++)
			if (strcmp(g->tensors[j].name, t->name) == 0) {
				g->n_tensors++;
				return pd_errorf("%s: tensor '%s' appears twice", g->path, t->name);
			}
	}
	/* the data section: the first multiple of the alignment after the infos */
	g->data_start = (size_t)(c.p - g->map);
	g->data_start = (g->data_start + g->alignment - 1) / g->alignment * g->alignment;
	if (g->n_tensors > 0 && g->data_start > g->size)
		return pd_errorf("%s: truncated before its data section", g->path);
	for (int64_t i = 0; i < g->n_tensors; i++) {
		struct pd_gguf_tensor *t = &g->tensors[i];
		uint64_t avail = g->size - g->data_start;

		if (t->offset % g->alignment)
			return pd_errorf("%s: tensor '%s' starts at offset %llu, not a multiple of the alignment %llu",
					 g->path, t->name, (unsigned long long)t->offset, (unsigned long long)g->alignment);
		/* writers lay tensors out in order, each padded: ggml requires it */
		if (t->offset != expect)
			return pd_errorf("%s: tensor '%s' starts at offset %llu, where %llu was expected (tensors out "
					 "of order or overlapping)", g->path, t->name, (unsigned long long)t->offset,
					 (unsigned long long)expect);
		if (t->offset > avail || t->nbytes > avail - t->offset)
			return pd_errorf("%s: tensor '%s' (bytes %llu to %llu of the data) runs past the end of the file "
					 "(%llu data bytes; truncated?)", g->path, t->name, (unsigned long long)t->offset,
					 (unsigned long long)(t->offset + t->nbytes), (unsigned long long)avail);
		t->data = g->map + g->data_start + t->offset;
		expect = t->offset + (t->nbytes + g->alignment - 1) / g->alignment * g->alignment;
	}
	return 0;
}

int pd_gguf_open(struct pd_gguf **out, const char *path)
{
	struct pd_gguf *g = pd_calloc(1, sizeof(*g), "GGUF file");
	struct stat sb;
	int fd = -1;

	*out = NULL;
	if (!g || !(g->path = pd_strdup(path)))
		goto fail;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb)) {
		pd_errorf("%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(sb.st_mode)) {
		pd_errorf("%s: not a regular file", path);
		goto fail;
	}
	g->size = (size_t)sb.st_size;
	if (g->size > 0) {
		g->map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (g->map == MAP_FAILED) {
			g->map = NULL;
			pd_errorf("%s: cannot map: %s", path, strerror(errno));
			goto fail;
		}
	}
	close(fd);
	fd = -1;
	if (pd_gguf_parse(g))
		goto fail;
	*out = g;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	pd_gguf_close(g);
	return -1;
}

void pd_gguf_close(struct pd_gguf *g)
{
	if (!g)
		return;
	for (int64_t i = 0; g->kv && i < g->n_kv; i++) {
		free(g->kv[i].key);
		free(g->kv[i].str);
	}
	for (int64_t i = 0; g->tensors && i < g->n_tensors; i++)
		free(g->tensors[i].name);
	free(g->kv);
	free(g->tensors);
	if (g->map)
		munmap(g->map, g->size);
	free(g->path);
	free(g);
}

const struct pd_gguf_tensor *pd_gguf_get(const struct pd_gguf *g, const char *name)
{
	for (int64_t i = 0; i < g->n_tensors; i++)
		if (strcmp(g->tensors[i].name, name) == 0)
			return &g->tensors[i];
	return NULL;
}

const struct pd_gguf_kv *pd_gguf_kv_find(const struct pd_gguf *g, const char *key)
{
	for (int64_t i = 0; i < g->n_kv; i++)
		if (g->kv[i].key && strcmp(g->kv[i].key, key) == 0)
			return &g->kv[i];
	return NULL;
}

int pd_gguf_is(const char *path)
{
	unsigned char magic[4];
	FILE *f = fopen(path, "rb");
	int is = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;

	if (f)
		fclose(f);
	return is;
}
