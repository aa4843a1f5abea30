/*
 * pd_safetensors.c - the weights store: files (pd_st_file.c, pd_st_gguf.c)
 * gathered into one set (a file, or the shards an index names), views that
 * rename and cut tensors in place, lookups, and reads converted to float32
 * or handed over in their block formats.
 */
#include "pd_st_int.h"
#include "pd_config.h"
#include "pd_gguf.h"
#include "pd_quant.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int pd_tensor_cmp_name(const void *a, const void *b)
{
	const struct pd_st_tensor *x = *(struct pd_st_tensor *const *)a;
	const struct pd_st_tensor *y = *(struct pd_st_tensor *const *)b;

	return strcmp(x->name, y->name);
}

/* ----------------------------------------------------------------------- */
/* Sets of files                                                           */
/* ----------------------------------------------------------------------- */

void pd_st_close(struct pd_st *st)
{
	if (!st)
		return;
	for (int i = 0; i < st->n_own; i++)
		free(st->own[i].name);
	free(st->own);
	pd_st_close(st->base);
	for (int i = 0; i < st->n_files; i++)
		pd_st_file_free(st->files[i]);
	for (int i = 0; i < st->n_meta; i++) {
		free(st->meta_keys[i]);
		free(st->meta_vals[i]);
	}
	free(st->meta_keys);
	free(st->meta_vals);
	free(st->files);
	free(st->sorted);
	free(st->path);
	free(st);
}

static int pd_st_add_file(struct pd_st *st, const char *path)
{
	struct pd_st_file *f, **nf;

	if (pd_gguf_is(path) ? pd_st_file_gguf(&f, path) : pd_st_file_open(&f, path))
		return -1;
	nf = realloc(st->files, sizeof(*nf) * (size_t)(st->n_files + 1));
	if (!nf) {
		pd_st_file_free(f);
		return pd_errorf("out of memory");
	}
	st->files = nf;
	st->files[st->n_files++] = f;
	return 0;
}

static int pd_st_build_index(struct pd_st *st)
{
	int k = 0;

	st->n_tensors = 0;
	for (int i = 0; i < st->n_files; i++)
		st->n_tensors += st->files[i]->n_tensors;
	st->sorted = pd_calloc((size_t)st->n_tensors + 1, sizeof(*st->sorted), "tensor index");
	if (!st->sorted)
		return -1;
	for (int i = 0; i < st->n_files; i++)
		for (int j = 0; j < st->files[i]->n_tensors; j++)
			st->sorted[k++] = &st->files[i]->tensors[j];
	qsort(st->sorted, (size_t)st->n_tensors, sizeof(*st->sorted), pd_tensor_cmp_name);
	for (int i = 1; i < st->n_tensors; i++)
		if (strcmp(st->sorted[i - 1]->name, st->sorted[i]->name) == 0)
			return pd_errorf("%s: tensor '%s' appears twice (in %s and %s)", st->path,
					 st->sorted[i]->name, st->sorted[i - 1]->file->path,
					 st->sorted[i]->file->path);
	return 0;
}

static int pd_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Shards named by an index must be plain file names next to the index: a
 * downloaded index must not make pdit open arbitrary paths. */
static int pd_shard_name_ok(const char *s)
{
	return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int pd_st_open_index(struct pd_st *st, const char *path)
{
	char *text = NULL, *dir = NULL, *slash;
	cJSON *root = NULL;
	const cJSON *map, *e;
	int rc = -1;

	if (pd_read_file(path, 64u << 20, &text, NULL))
		return -1;
	root = cJSON_Parse(text);
	map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
	if (!cJSON_IsObject(map)) {
		pd_errorf("%s: not a safetensors index (no weight_map object)", path);
		goto out;
	}
	dir = pd_strdup(path);
	if (!dir)
		goto out;
	slash = strrchr(dir, '/');
	if (slash)
		slash[1] = 0;
	else
		dir[0] = 0;
	cJSON_ArrayForEach(e, map) {
		int seen = 0;
		char *shard;

		if (!cJSON_IsString(e) || !pd_shard_name_ok(e->valuestring)) {
			pd_errorf("%s: weight_map entry '%s' does not name a shard file in this directory", path,
				  e->string);
			goto out;
		}
		shard = pd_strfmt("%s%s", dir, e->valuestring);
		if (!shard)
			goto out;
		for (int i = 0; i < st->n_files; i++)
			seen |= strcmp(st->files[i]->path, shard) == 0;
		if (!seen && pd_st_add_file(st, shard)) {
			free(shard);
			goto out;
		}
		free(shard);
	}
	if (st->n_files == 0) {
		pd_errorf("%s: weight_map is empty", path);
		goto out;
	}
	if (pd_st_build_index(st))
		goto out;
	/* Every name the index promises must be in the shard it names. */
	cJSON_ArrayForEach(e, map) {
		const struct pd_st_tensor *t = pd_st_get(st, e->string);

		if (!t || !pd_ends_with(t->file->path, e->valuestring)) {
			pd_errorf("%s: tensor '%s' is not in shard %s", path, e->string, e->valuestring);
			goto out;
		}
	}
	rc = 0;
out:
	cJSON_Delete(root);
	free(text);
	free(dir);
	return rc;
}

int pd_st_open(struct pd_st **out, const char *path)
{
	struct pd_st *st = pd_calloc(1, sizeof(*st), "safetensors set");
	int rc;

	if (!st)
		return -1;
	st->path = pd_strdup(path);
	if (!st->path) {
		free(st);
		return -1;
	}
	if (pd_ends_with(path, ".json"))
		rc = pd_st_open_index(st, path);
	else
		rc = pd_st_add_file(st, path) || pd_st_build_index(st) ? -1 : 0;
	if (!rc)
		rc = pd_st_load_meta(st, st->files[0]);
	if (rc) {
		pd_st_close(st);
		return -1;
	}
	*out = st;
	return 0;
}

/* DIR's weights under STEM: the single file's name, else the index's (both
 * made; *HAS which exists: 1, 2, or 0). */
static int pd_st_component_names(const char *dir, const char *stem, char **single, char **index, int *has)
{
	*single = pd_strfmt("%s/%s.safetensors", dir, stem);
	*index = pd_strfmt("%s/%s.safetensors.index.json", dir, stem);
	if (!*single || !*index) {
		free(*single);
		free(*index);
		return -1;
	}
	*has = pd_file_exists(*single) ? 1 : pd_file_exists(*index) ? 2 : 0;
	return 0;
}

int pd_st_open_component(struct pd_st **out, const char *dir, const char *stem)
{
	char *single, *index;
	int has, rc;

	if (pd_st_component_names(dir, stem, &single, &index, &has))
		return -1;
	rc = has ? pd_st_open(out, has == 1 ? single : index)
		 : pd_errorf("%s: no %s.safetensors (or its .index.json) in this directory", dir, stem);
	free(single);
	free(index);
	return rc;
}

int pd_st_has_component(const char *dir, const char *stem)
{
	char *single, *index;
	int has = 0;

	if (pd_st_component_names(dir, stem, &single, &index, &has) == 0) {
		free(single);
		free(index);
	}
	return has != 0;
}

int pd_st_view_new(struct pd_st **out, struct pd_st *base)
{
	struct pd_st *v = pd_calloc(1, sizeof(*v), "a tensor view");

	*out = NULL;
	if (!v)
		return -1;
	/* (v->base is set last: a view that fails is closed without closing
	 * BASE, which the caller still holds) */
	v->path = pd_strdup(base->path);
	if (!v->path) {
		pd_st_close(v);
		return -1;
	}
	/* the metadata stays readable through the view */
	v->meta_keys = pd_calloc((size_t)base->n_meta + 1, sizeof(char *), "metadata");
	v->meta_vals = pd_calloc((size_t)base->n_meta + 1, sizeof(char *), "metadata");
	if (!v->meta_keys || !v->meta_vals) {
		pd_st_close(v);
		return -1;
	}
	for (; v->n_meta < base->n_meta; v->n_meta++) {
		v->meta_keys[v->n_meta] = pd_strdup(base->meta_keys[v->n_meta]);
		v->meta_vals[v->n_meta] = pd_strdup(base->meta_vals[v->n_meta]);
		if (!v->meta_keys[v->n_meta] || !v->meta_vals[v->n_meta]) {
			v->n_meta++;
			pd_st_close(v);
			return -1;
		}
	}
	v->base = base;
	*out = v;
	return 0;
}

int pd_st_view_add(struct pd_st *v, const char *name, const struct pd_st_tensor *src, int64_t r0, int64_t nr,
		   int64_t roll, int ndim, const int64_t *shape)
{
	struct pd_st_tensor *t;
	int64_t rows = src->ndim ? src->shape[0] : 1, per_row = rows ? src->numel / rows : 0, numel = 1;
	size_t es = pd_dtype_size(src->dtype);

	if (r0 < 0 || nr < 1 || r0 + nr > rows || ndim < 1 || ndim > PD_ST_MAX_DIMS)
		return pd_errorf("%s: rows %lld..%lld of '%s' (%lld rows) for '%s'", v->path, (long long)r0,
				 (long long)(r0 + nr), src->name, (long long)rows, name);
	if (v->n_own == v->cap_own) {
		int cap = v->cap_own ? 2 * v->cap_own : 256;
		struct pd_st_tensor *g = realloc(v->own, sizeof(*g) * (size_t)cap);

		if (!g)
			return pd_errorf("out of memory");
		v->own = g;
		v->cap_own = cap;
	}
	t = &v->own[v->n_own];
	memset(t, 0, sizeof(*t));
	t->dtype = src->dtype;
	t->ndim = ndim;
	for (int i = 0; i < ndim; i++) {
		t->shape[i] = shape ? shape[i] : i == 0 ? nr : src->shape[i];
		numel *= t->shape[i];
	}
	if (numel != nr * per_row || (roll && (roll < 0 || roll >= t->shape[0])))
		return pd_errorf("%s: '%s' cannot be %s as '%s'", v->path, src->name, roll ? "rolled" : "reshaped", name);
	t->numel = numel;
	t->data = src->data + (size_t)r0 * pd_st_row_bytes(src);
	t->qtype = src->qtype;
	t->q = src->q;
	t->fp8_scale = src->fp8_scale;
	t->nbytes = (size_t)numel * es;
	if (t->q) {
		/* a block format's view keeps whole blocks a row */
		if ((numel / t->shape[0]) % t->q->block_size)
			return pd_errorf("%s: '%s' (%s) cannot be reshaped as '%s': rows would split blocks", v->path,
					 src->name, t->q->name, name);
		t->nbytes = (size_t)nr * pd_st_row_bytes(src);
	}
	t->file = src->file;
	t->roll = roll;
	t->name = pd_strdup(name);
	if (!t->name)
		return -1;
	v->n_own++;
	return 0;
}

int pd_st_view_done(struct pd_st *v)
{
	free(v->sorted);
	v->sorted = pd_calloc((size_t)v->n_own + 1, sizeof(*v->sorted), "a tensor view");
	if (!v->sorted)
		return -1;
	for (int i = 0; i < v->n_own; i++)
		v->sorted[i] = &v->own[i];
	v->n_tensors = v->n_own;
	qsort(v->sorted, (size_t)v->n_tensors, sizeof(*v->sorted), pd_tensor_cmp_name);
	for (int i = 1; i < v->n_tensors; i++)
		if (strcmp(v->sorted[i - 1]->name, v->sorted[i]->name) == 0)
			return pd_errorf("%s: two tensors named '%s' in the view", v->path, v->sorted[i]->name);
	return 0;
}

int pd_st_open_path(struct pd_st **out, const char *path, const char *stem)
{
	return pd_is_dir(path) ? pd_st_open_component(out, path, stem) : pd_st_open(out, path);
}

const struct pd_st_tensor *pd_st_find_suffix(const struct pd_st *st, const char *suffix)
{
	size_t ls = strlen(suffix);

	for (int i = 0; i < st->n_tensors; i++) {
		size_t ln = strlen(st->sorted[i]->name);

		if (ln >= ls && strcmp(st->sorted[i]->name + ln - ls, suffix) == 0)
			return st->sorted[i];
	}
	return NULL;
}

const struct pd_st_tensor *pd_st_get(const struct pd_st *st, const char *name)
{
	int lo = 0, hi = st->n_tensors - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		int c = strcmp(st->sorted[mid]->name, name);

		if (c == 0)
			return st->sorted[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static void pd_shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
	size_t k = 0;

	k += (size_t)snprintf(buf + k, len - k, "[");
	for (int i = 0; i < ndim && k < len; i++)
		k += shape[i] < 0 ? (size_t)snprintf(buf + k, len - k, i ? ", ?" : "?") :
				    (size_t)snprintf(buf + k, len - k, i ? ", %lld" : "%lld", (long long)shape[i]);
	if (k < len)
		snprintf(buf + k, len - k, "]");
}

int pd_st_require(const struct pd_st *st, const char *name, int ndim, const int64_t *shape,
		  const struct pd_st_tensor **out)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	int ok;

	if (!t)
		return pd_errorf("%s: tensor '%s' is missing", st->path, name);
	ok = t->ndim == ndim;
	for (int i = 0; ok && i < ndim; i++)
		ok = shape[i] < 0 || shape[i] == t->shape[i];
	if (!ok) {
		char want[128], have[128];

		pd_shape_str(want, sizeof(want), ndim, shape);
		pd_shape_str(have, sizeof(have), t->ndim, t->shape);
		return pd_errorf("%s: tensor '%s' has shape %s, expected %s", t->file->path, name, have, want);
	}
	if (out)
		*out = t;
	return 0;
}

const char *pd_st_meta(const struct pd_st *st, const char *key)
{
	for (int i = 0; i < st->n_meta; i++)
		if (strcmp(st->meta_keys[i], key) == 0)
			return st->meta_vals[i];
	return NULL;
}

void pd_convert_f32(enum pd_dtype dt, const unsigned char *src, size_t count, float *dst)
{
	switch (dt) {
	case PD_F32:
		memcpy(dst, src, count * 4);
		break;
	case PD_BF16:
		for (size_t i = 0; i < count; i++) {
			uint16_t h;

			memcpy(&h, src + 2 * i, 2);
			dst[i] = pd_bf16_to_f32(h);
		}
		break;
	case PD_F16:
		for (size_t i = 0; i < count; i++) {
			uint16_t h;

			memcpy(&h, src + 2 * i, 2);
			dst[i] = pd_f16_to_f32(h);
		}
		break;
	case PD_F64:
		for (size_t i = 0; i < count; i++) {
			double d;

			memcpy(&d, src + 8 * i, 8);
			dst[i] = (float)d;
		}
		break;
	case PD_F8_E4M3:
	case PD_F8_E5M2:
		/* plain fp8 (a scaled file's scale is its loader's) */
		pd_fp8_decode(dt == PD_F8_E5M2, src, dst, (int64_t)count, 1.0f);
		break;
	default:
		PD_ASSERT(0);
	}
}

/* Bytes of one stored row (shape[0] rows; a block format's rows are
 * whole blocks). */
size_t pd_st_row_bytes(const struct pd_st_tensor *t)
{
	int64_t rows = t->ndim ? t->shape[0] : 1;
	size_t cols = rows ? (size_t)(t->numel / rows) : 0;

	return t->q ? cols / (size_t)t->q->block_size * (size_t)t->q->block_bytes : cols * pd_dtype_size(t->dtype);
}

/* Elements [e0, e0 + n) of the row-major run at BASE (a row's first byte)
 * as float32: block formats decode the blocks that cover them, scaled fp8
 * is multiplied by its scale. -1 only when memory is short. */
static int pd_st_elems(const struct pd_st_tensor *t, const unsigned char *base, size_t e0, size_t n, float *dst)
{
	if (!t->q) {
		pd_convert_f32(t->dtype, base + e0 * pd_dtype_size(t->dtype), n, dst);
		if (t->fp8_scale != 0)
			for (size_t i = 0; i < n; i++)
				dst[i] = dst[i] * t->fp8_scale;
		return 0;
	}
	{
		size_t bs = (size_t)t->q->block_size, b0 = e0 / bs, b1 = (e0 + n + bs - 1) / bs;
		const unsigned char *src = base + b0 * (size_t)t->q->block_bytes;
		float *tmp;

		if (e0 % bs == 0 && n % bs == 0) {
			pd_quant_decode((enum pd_qtype)t->qtype, src, dst, (int64_t)n);
			return 0;
		}
		tmp = pd_malloc((b1 - b0) * bs * sizeof(float), "decoded blocks");
		if (!tmp)
			return -1;
		pd_quant_decode((enum pd_qtype)t->qtype, src, tmp, (int64_t)((b1 - b0) * bs));
		memcpy(dst, tmp + (e0 - b0 * bs), n * sizeof(float));
		free(tmp);
		return 0;
	}
}

int64_t pd_st_int_at(const struct pd_st_tensor *t, int64_t i)
{
	const char *p = (const char *)t->data + i * (int64_t)pd_dtype_size(t->dtype);
	int64_t v64;
	int32_t v32;
	int16_t v16;

	switch (t->dtype) {
	case PD_I64:
	case PD_U64:
		memcpy(&v64, p, 8);
		return v64;
	case PD_I32:
		memcpy(&v32, p, 4);
		return v32;
	case PD_U32:
		memcpy(&v32, p, 4);
		return (uint32_t)v32;
	case PD_I16:
		memcpy(&v16, p, 2);
		return v16;
	case PD_U16:
		memcpy(&v16, p, 2);
		return (uint16_t)v16;
	case PD_I8:
		return (int8_t)*p;
	default:
		/* U8, BOOL */
		return (uint8_t)*p;
	}
}

int pd_st_read_f32(const struct pd_st_tensor *t, size_t start, size_t count, float *dst)
{
	size_t rows, cols, rb;

	if (!pd_dtype_is_float(t->dtype))
		return pd_errorf("%s: tensor '%s' has dtype %s, expected a floating type", t->file->path, t->name,
				 pd_dtype_name(t->dtype));
	if (start > (size_t)t->numel || count > (size_t)t->numel - start)
		return pd_errorf("%s: read past the end of tensor '%s'", t->file->path, t->name);
	/* blocks run on across rows (a 1-D tensor is one long row): elements
	 * are addressed from the first */
	if (!t->roll)
		return pd_st_elems(t, t->data, start, count, dst);
	/* row by row: a rolled view reads stored row (r + roll) mod rows */
	rows = t->ndim ? (size_t)t->shape[0] : 1;
	cols = rows ? (size_t)t->numel / rows : 0;
	rb = pd_st_row_bytes(t);
	while (count > 0) {
		size_t r = start / cols, c = start % cols, n = cols - c < count ? cols - c : count;
		size_t sr = (r + (size_t)t->roll) % rows;

		if (pd_st_elems(t, t->data + sr * rb, c, n, dst))
			return -1;
		dst += n;
		start += n;
		count -= n;
	}
	return 0;
}

int pd_st_read_block_f32(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
			 float *dst, int64_t ldd)
{
	int64_t rows = t->ndim ? t->shape[0] : 1;
	int64_t cols = rows ? t->numel / rows : 0;

	if (!pd_dtype_is_float(t->dtype))
		return pd_errorf("%s: tensor '%s' has dtype %s, expected a floating type", t->file->path, t->name,
				 pd_dtype_name(t->dtype));
	if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 + nr > rows || c0 + nc > cols)
		return pd_errorf("%s: block [%lld:%lld, %lld:%lld] outside tensor '%s'", t->file->path,
				 (long long)r0, (long long)(r0 + nr), (long long)c0, (long long)(c0 + nc), t->name);
	for (int64_t r = 0; r < nr; r++) {
		int64_t sr = (r0 + r + t->roll) % rows;

		if (pd_st_elems(t, t->data, (size_t)sr * (size_t)cols + (size_t)c0, (size_t)nc, dst + r * ldd))
			return -1;
	}
	return 0;
}

int pd_st_block_format(const struct pd_st_tensor *t, enum pd_qtype *type, float *scale)
{
	if (t->q)
		*type = (enum pd_qtype)t->qtype;
	else if (t->dtype == PD_F8_E4M3 || t->dtype == PD_F8_E5M2)
		*type = t->dtype == PD_F8_E4M3 ? PD_Q_F8_E4M3 : PD_Q_F8_E5M2;
	else
		return 0;
	*scale = t->fp8_scale != 0 ? t->fp8_scale : 1.0f;
	return 1;
}

int pd_st_read_blocks(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc, void *dst)
{
	int64_t rows = t->ndim ? t->shape[0] : 1;
	int64_t cols = rows ? t->numel / rows : 0;
	enum pd_qtype type;
	const struct pd_qtype_info *q;
	float scale;
	size_t rb = pd_st_row_bytes(t), out, skip;

	if (!pd_st_block_format(t, &type, &scale) || !(q = pd_quant_info(type)))
		return pd_errorf("%s: tensor '%s' is not in a block format", t->file->path, t->name);
	if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 + nr > rows || c0 + nc > cols || c0 % q->block_size ||
	    nc % q->block_size)
		return pd_errorf("%s: block [%lld:%lld, %lld:%lld] outside tensor '%s' or across its %s blocks",
				 t->file->path, (long long)r0, (long long)(r0 + nr), (long long)c0,
				 (long long)(c0 + nc), t->name, q->name);
	out = pd_quant_row_bytes(q, nc);
	skip = pd_quant_row_bytes(q, c0);
	for (int64_t r = 0; r < nr; r++) {
		int64_t sr = (r0 + r + t->roll) % rows;

		memcpy((unsigned char *)dst + (size_t)r * out, t->data + (size_t)sr * rb + skip, out);
	}
	return 0;
}

void pd_st_weight_stats(const struct pd_st *st, double *params, double *kept, double *kept_bytes)
{
	*params = *kept = *kept_bytes = 0;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		enum pd_qtype type;
		float scale;

		if (t->ndim != 2 || !pd_dtype_is_float(t->dtype))
			continue;
		*params += (double)t->numel;
		if (pd_st_block_format(t, &type, &scale)) {
			*kept += (double)t->numel;
			*kept_bytes += (double)pd_st_row_bytes(t) * (double)t->shape[0];
		}
	}
}

const void *pd_st_blocks_at(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc)
{
	int64_t rows = t->ndim ? t->shape[0] : 1;
	int64_t cols = rows ? t->numel / rows : 0;
	enum pd_qtype type;
	float scale;

	if (!pd_st_block_format(t, &type, &scale) || t->roll || c0 != 0 || nc != cols || r0 < 0 || nr < 0 ||
	    r0 + nr > rows)
		return NULL;
	return t->data + (size_t)r0 * pd_st_row_bytes(t);
}

const void *pd_st_plain_at(const struct pd_st_tensor *t, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
			   int64_t *ld)
{
	int64_t rows = t->ndim ? t->shape[0] : 1;
	int64_t cols = rows ? t->numel / rows : 0;

	if (t->q || (t->dtype != PD_F32 && t->dtype != PD_BF16) || t->roll || r0 < 0 || nr < 0 || r0 + nr > rows ||
	    c0 < 0 || nc < 0 || c0 + nc > cols)
		return NULL;
	*ld = cols;
	return t->data + ((size_t)r0 * (size_t)cols + (size_t)c0) * pd_dtype_size(t->dtype);
}

void pd_st_release(const struct pd_st_tensor *t)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t b = ((uintptr_t)t->data + page - 1) & ~(page - 1);
	uintptr_t e = ((uintptr_t)t->data + t->nbytes) & ~(page - 1);

	if (e > b)
		madvise((void *)b, e - b, MADV_DONTNEED);
}

int pd_st_meta_config(const struct pd_st *st, struct pd_config *j)
{
	const char *meta = pd_st_meta(st, "config");
	char label[600];

	if (!meta)
		return 0;
	snprintf(label, sizeof(label), "%s (metadata \"config\")", st->path);
	return pd_config_parse(j, meta, label) ? -1 : 1;
}

