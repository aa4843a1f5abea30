/*
 * pd_gguf_writer.c - writes GGUF files (pdit quantize) as ggml's
 * gguf_write_to_file lays them out: header, key-value pairs, tensor infos,
 * zero padding to the alignment, tensor data each padded to it.
 */
#include "pd_gguf.h"
#include "pd_quant.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

#define PD_GGUF_ALIGN 32

struct pd_gguf_wkv {
	char *key;                      /* the key */
	enum pd_gguf_vtype type;        /* PD_GGUF_STRING, PD_GGUF_U32 or PD_GGUF_F32 */
	char *str;                      /* string value */
	uint32_t u32;                   /* u32 value, or an f32's bits */
};

struct pd_gguf_wtensor {
	char *name;                     /* the name */
	int type;                       /* ggml type id */
	int ndim;                       /* dimensions */
	int64_t shape[PD_GGUF_MAX_DIMS]; /* torch order */
	size_t nbytes;                  /* its data */
	uint64_t offset;                /* from the data section's start */
	pd_gguf_fill_fn fill;           /* produces the data */
	void *ctx;                      /* its context */
};

struct pd_gguf_writer {
	struct pd_gguf_wkv *kv;         /* pairs in order */
	int n_kv, cap_kv;
	struct pd_gguf_wtensor *t;      /* tensors in order */
	int n_t, cap_t;
};

struct pd_gguf_writer *pd_gguf_writer_new(void)
{
	return pd_calloc(1, sizeof(struct pd_gguf_writer), "GGUF writer");
}

void pd_gguf_writer_free(struct pd_gguf_writer *w)
{
	if (!w)
		return;
	for (int i = 0; i < w->n_kv; i++) {
		free(w->kv[i].key);
		free(w->kv[i].str);
	}
	for (int i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->kv);
	free(w->t);
	free(w);
}

static struct pd_gguf_wkv *pd_gguf_writer_kv(struct pd_gguf_writer *w, const char *key)
{
	struct pd_gguf_wkv *kv;

	if (w->n_kv == w->cap_kv) {
		int cap = w->cap_kv ? 2 * w->cap_kv : 8;
		void *p = realloc(w->kv, (size_t)cap * sizeof(*w->kv));

		if (!p) {
			pd_errorf("out of memory");
			return NULL;
		}
		w->kv = p;
		w->cap_kv = cap;
	}
	kv = &w->kv[w->n_kv];
	memset(kv, 0, sizeof(*kv));
	kv->key = pd_strdup(key);
	if (!kv->key)
		return NULL;
	w->n_kv++;
	return kv;
}

int pd_gguf_writer_str(struct pd_gguf_writer *w, const char *key, const char *value)
{
	struct pd_gguf_wkv *kv = pd_gguf_writer_kv(w, key);

	if (!kv)
		return -1;
	kv->type = PD_GGUF_STRING;
	kv->str = pd_strdup(value);
	return kv->str ? 0 : -1;
}

int pd_gguf_writer_u32(struct pd_gguf_writer *w, const char *key, uint32_t value)
{
	struct pd_gguf_wkv *kv = pd_gguf_writer_kv(w, key);

	if (!kv)
		return -1;
	kv->type = PD_GGUF_U32;
	kv->u32 = value;
	return 0;
}

int pd_gguf_writer_f32(struct pd_gguf_writer *w, const char *key, float value)
{
	struct pd_gguf_wkv *kv = pd_gguf_writer_kv(w, key);

	if (!kv)
		return -1;
	/* (written as its four bytes, as a u32's) */
	kv->type = PD_GGUF_F32;
	memcpy(&kv->u32, &value, sizeof(value));
	return 0;
}

int pd_gguf_writer_add(struct pd_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
		       pd_gguf_fill_fn fill, void *ctx)
{
	const struct pd_qtype_info *q = pd_qtype_get(type);
	struct pd_gguf_wtensor *t;
	size_t numel = 1;

	if (!q)
		return pd_errorf("GGUF tensor '%s': unknown type %d", name, type);
	if (ndim < 1 || ndim > PD_GGUF_MAX_DIMS)
		return pd_errorf("GGUF tensor '%s': %d dimensions (1 to %d)", name, ndim, PD_GGUF_MAX_DIMS);
	if (shape[ndim - 1] % q->block_size)
		return pd_errorf("GGUF tensor '%s': rows of %lld are not whole %s blocks of %d", name,
				 (long long)shape[ndim - 1], q->name, q->block_size);
	for (int d = 0; d < ndim; d++)
		if (shape[d] < 0 || pd_mul_size(numel, (size_t)shape[d], &numel))
			return pd_errorf("GGUF tensor '%s': bad shape", name);
	if (w->n_t == w->cap_t) {
		int cap = w->cap_t ? 2 * w->cap_t : 64;
		void *p = realloc(w->t, (size_t)cap * sizeof(*w->t));

		if (!p)
			return pd_errorf("out of memory");
		w->t = p;
		w->cap_t = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof(*t));
	t->name = pd_strdup(name);
	if (!t->name)
		return -1;
	t->type = type;
	t->ndim = ndim;
	memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
	t->nbytes = numel / (size_t)q->block_size * (size_t)q->block_bytes;
	t->fill = fill;
	t->ctx = ctx;
	w->n_t++;
	return 0;
}

/* Little-endian fields into a growing header buffer. */
struct pd_gbuf {
	unsigned char *p;               /* the bytes */
	size_t n, cap;                  /* used and allocated */
	int failed;                     /* out of memory */
};

static void pd_gbuf_put(struct pd_gbuf *b, const void *data, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 4096;
		void *p;

		while (cap < b->n + n)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void pd_gbuf_uint(struct pd_gbuf *b, uint64_t v, int bytes)
{
	unsigned char le[8];

	for (int i = 0; i < bytes; i++)
		le[i] = (unsigned char)(v >> (8 * i));
	pd_gbuf_put(b, le, (size_t)bytes);
}

static void pd_gbuf_str(struct pd_gbuf *b, const char *s)
{
	size_t n = strlen(s);

	pd_gbuf_uint(b, n, 8);
	pd_gbuf_put(b, s, n);
}

int pd_gguf_writer_save(struct pd_gguf_writer *w, const char *path)
{
	static const unsigned char zeros[PD_GGUF_ALIGN];
	struct pd_gbuf b = { 0 };
	struct pd_out_file o;
	uint64_t off = 0;
	int rc = -1;

	pd_gbuf_put(&b, "GGUF", 4);
	pd_gbuf_uint(&b, 3, 4);
	pd_gbuf_uint(&b, (uint64_t)w->n_t, 8);
	pd_gbuf_uint(&b, (uint64_t)w->n_kv, 8);
	for (int i = 0; i < w->n_kv; i++) {
		pd_gbuf_str(&b, w->kv[i].key);
		pd_gbuf_uint(&b, (uint64_t)w->kv[i].type, 4);
		if (w->kv[i].type == PD_GGUF_STRING)
			pd_gbuf_str(&b, w->kv[i].str);
		else
			pd_gbuf_uint(&b, w->kv[i].u32, 4);
	}
	for (int i = 0; i < w->n_t; i++) {
		struct pd_gguf_wtensor *t = &w->t[i];

		pd_gbuf_str(&b, t->name);
		pd_gbuf_uint(&b, (uint64_t)t->ndim, 4);
		/* ne: the torch shape reversed */
		for (int d = t->ndim - 1; d >= 0; d--)
			pd_gbuf_uint(&b, (uint64_t)t->shape[d], 8);
		pd_gbuf_uint(&b, (uint64_t)t->type, 4);
		t->offset = off;
		pd_gbuf_uint(&b, off, 8);
		off += (t->nbytes + PD_GGUF_ALIGN - 1) / PD_GGUF_ALIGN * PD_GGUF_ALIGN;
	}
	pd_gbuf_put(&b, zeros, (PD_GGUF_ALIGN - b.n % PD_GGUF_ALIGN) % PD_GGUF_ALIGN);
	if (b.failed) {
		free(b.p);
		return pd_errorf("out of memory writing %s", path);
	}
	if (pd_out_open(&o, path)) {
		free(b.p);
		return -1;
	}
	if (pd_out_write(&o, b.p, b.n))
		goto fail;
	for (int i = 0; i < w->n_t; i++) {
		struct pd_gguf_wtensor *t = &w->t[i];
		void *buf = pd_malloc(t->nbytes ? t->nbytes : 1, t->name);
		int frc;

		if (!buf)
			goto fail;
		frc = t->fill(t->ctx, buf, t->nbytes);
		if (!frc)
			frc = pd_out_write(&o, buf, t->nbytes);
		free(buf);
		if (frc || pd_out_write(&o, zeros, (PD_GGUF_ALIGN - t->nbytes % PD_GGUF_ALIGN) % PD_GGUF_ALIGN))
			goto fail;
	}
	free(b.p);
	return pd_out_commit(&o);
fail:
	free(b.p);
	pd_out_abort(&o);
	return rc;
}
