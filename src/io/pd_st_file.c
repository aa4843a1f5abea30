/*
 * pd_st_file.c - one safetensors file: mapped, its JSON header parsed and
 * every field checked (dtypes, shapes, byte ranges inside the file, no
 * overlaps), ComfyUI's fp8 scales found, its metadata kept.
 */
#include "pd_st_int.h"
#include "pd_gguf.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------------------- */
/* Reading one file                                                        */
/* ----------------------------------------------------------------------- */

/* A JSON number that is an exact non-negative integer not above MAX. */
static int pd_json_uint(const cJSON *j, int64_t max, int64_t *out)
{
	double v;

	if (!cJSON_IsNumber(j))
		return -1;
	v = j->valuedouble;
	if (!(v >= 0) || v > (double)max || v != floor(v))
		return -1;
	*out = (int64_t)v;
	return 0;
}

static int pd_tensor_cmp_offset(const void *a, const void *b)
{
	const struct pd_st_tensor *x = *(struct pd_st_tensor *const *)a;
	const struct pd_st_tensor *y = *(struct pd_st_tensor *const *)b;

	if (x->data != y->data)
		return x->data < y->data ? -1 : 1;
	return 0;
}

void pd_st_file_free(struct pd_st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->n_tensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	if (f->gguf)
		pd_gguf_close(f->gguf);
	else if (f->map && f->size)
		munmap(f->map, f->size);
	free(f->path);
	free(f);
}

/* ComfyUI's scaled fp8: each fp8 X.weight is decode(X.weight) times the
 * float32 scalar X.scale_weight (none: 1). */
static int pd_st_fp8_scales(struct pd_st_file *f)
{
	for (int i = 0; i < f->n_tensors; i++) {
		struct pd_st_tensor *t = &f->tensors[i];
		size_t n = strlen(t->name);
		char name[600];

		if ((t->dtype != PD_F8_E4M3 && t->dtype != PD_F8_E5M2) || n < 7 || strcmp(t->name + n - 7, ".weight") ||
		    n + 6 >= sizeof(name))
			continue;
		snprintf(name, sizeof(name), "%.*s.scale_weight", (int)(n - 7), t->name);
		for (int j = 0; j < f->n_tensors; j++) {
			const struct pd_st_tensor *s = &f->tensors[j];

			if (strcmp(s->name, name))
				continue;
			if (s->numel != 1 || !pd_dtype_is_float(s->dtype) || s->dtype == PD_F8_E4M3 ||
			    s->dtype == PD_F8_E5M2)
				return pd_errorf("%s: '%s' must be one float (it has %lld %s values)", f->path, name,
						 (long long)s->numel, pd_dtype_name(s->dtype));
			pd_convert_f32(s->dtype, s->data, 1, &t->fp8_scale);
		}
	}
	return 0;
}

static int pd_parse_tensor(struct pd_st_file *f, const cJSON *e, struct pd_st_tensor *t)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	const char *name = e->string;
	size_t data_size = f->size - f->data_start;
	int64_t begin, end, numel = 1;
	size_t nbytes;
	int code, n;

	if (!cJSON_IsObject(e))
		return pd_errorf("%s: entry '%s' is not an object", f->path, name);
	if (!cJSON_IsString(dt))
		return pd_errorf("%s: tensor '%s' has no dtype", f->path, name);
	code = pd_dtype_from_name(dt->valuestring);
	if (code < 0)
		return pd_errorf("%s: tensor '%s' has unknown dtype '%s'", f->path, name, dt->valuestring);
	if (!cJSON_IsArray(shape))
		return pd_errorf("%s: tensor '%s' has no shape", f->path, name);
	n = cJSON_GetArraySize(shape);
	if (n > PD_ST_MAX_DIMS)
		return pd_errorf("%s: tensor '%s' has %d dimensions (at most %d)", f->path, name, n,
				 PD_ST_MAX_DIMS);
	t->ndim = n;
	for (int i = 0; i < n; i++) {
		int64_t d;

		if (pd_json_uint(cJSON_GetArrayItem(shape, i), PD_ST_MAX_DIM, &d))
			return pd_errorf("%s: tensor '%s' has an invalid dimension", f->path, name);
		t->shape[i] = d;
		if (d != 0 && numel > INT64_MAX / d)
			return pd_errorf("%s: tensor '%s' shape overflows", f->path, name);
		numel *= d;
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
	    pd_json_uint(cJSON_GetArrayItem(offs, 0), INT64_MAX / 2, &begin) ||
	    pd_json_uint(cJSON_GetArrayItem(offs, 1), INT64_MAX / 2, &end))
		return pd_errorf("%s: tensor '%s' has invalid data_offsets", f->path, name);
	if (end < begin)
		return pd_errorf("%s: tensor '%s' data_offsets end before they begin", f->path, name);
	if ((uint64_t)end > data_size)
		return pd_errorf("%s: tensor '%s' bytes [%lld, %lld) lie outside the file's %zu data bytes "
				 "(truncated file?)", f->path, name, (long long)begin, (long long)end, data_size);
	if (pd_mul_size((size_t)numel, pd_dtype_size((enum pd_dtype)code), &nbytes))
		return pd_errorf("%s: tensor '%s': its shape x %s overflows", f->path, name, dt->valuestring);
	if (nbytes != (size_t)(end - begin))
		return pd_errorf("%s: tensor '%s' has %lld bytes but shape x %s needs %zu", f->path, name,
				 (long long)(end - begin), dt->valuestring, nbytes);
	t->name = pd_strdup(name);
	if (!t->name)
		return -1;
	t->dtype = (enum pd_dtype)code;
	t->numel = numel;
	t->nbytes = nbytes;
	t->data = f->map + f->data_start + begin;
	t->file = f;
	{
		size_t n = strlen(name);

		if (n >= 10 && strcmp(name + n - 10, "scaled_fp8") == 0 && (n == 10 || name[n - 11] == '.'))
			f->scaled_fp8 = 1;
	}
	return 0;
}

int pd_st_file_open(struct pd_st_file **out, const char *path)
{
	struct pd_st_file *f = pd_calloc(1, sizeof(*f), "safetensors file");
	struct pd_st_tensor **by_off = NULL;
	cJSON *root = NULL, *e;
	struct stat sb;
	uint64_t hlen = 0;
	int fd = -1, rc = -1, n;

	if (!f)
		return -1;
	f->path = pd_strdup(path);
	if (!f->path)
		goto out;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		pd_errorf("%s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		pd_errorf("%s: not a regular file", path);
		goto out;
	}
	f->size = (size_t)sb.st_size;
	if (f->size < 8) {
		/* a GGUF's magic is 4 bytes: an empty .gguf is as likely */
		pd_errorf("%s: %zu bytes: too short for a safetensors or GGUF file (empty or cut short)", path, f->size);
		goto out;
	}
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		pd_errorf("%s: cannot map: %s", path, strerror(errno));
		goto out;
	}
	for (int i = 0; i < 8; i++)
		hlen |= (uint64_t)f->map[i] << (8 * i);
	/* a length past the end and no JSON object after it: another kind of
	 * file (a GGUF is read elsewhere), not a broken one */
	if (hlen > f->size - 8 && f->size > 8 && f->map[8] != '{') {
		pd_errorf("%s: not a safetensors or GGUF file (neither a safetensors header nor GGUF's magic)", path);
		goto out;
	}
	if (hlen > f->size - 8) {
		pd_errorf("%s: header length %llu exceeds the file size %zu (truncated or not safetensors)",
			  path, (unsigned long long)hlen, f->size);
		goto out;
	}
	if (hlen > PD_ST_MAX_HEADER) {
		pd_errorf("%s: header of %llu bytes is larger than the %u allowed", path,
			  (unsigned long long)hlen, PD_ST_MAX_HEADER);
		goto out;
	}
	f->data_start = 8 + (size_t)hlen;
	root = cJSON_ParseWithLength((const char *)f->map + 8, (size_t)hlen);
	if (!root || !cJSON_IsObject(root)) {
		pd_errorf("%s: header is not a JSON object", path);
		goto out;
	}
	n = 0;
	cJSON_ArrayForEach(e, root) {
		if (!e->string) {
			pd_errorf("%s: malformed header", path);
			goto out;
		}
		if (strcmp(e->string, "__metadata__") != 0)
			n++;
	}
	if (n > PD_ST_MAX_TENSORS) {
		pd_errorf("%s: %d tensors (at most %d)", path, n, PD_ST_MAX_TENSORS);
		goto out;
	}
	f->tensors = pd_calloc((size_t)n + 1, sizeof(*f->tensors), "tensor table");
	by_off = pd_calloc((size_t)n + 1, sizeof(*by_off), "tensor table");
	if (!f->tensors || !by_off)
		goto out;
	cJSON_ArrayForEach(e, root) {
		if (strcmp(e->string, "__metadata__") == 0) {
			const cJSON *m;

			if (!cJSON_IsObject(e)) {
				pd_errorf("%s: __metadata__ is not an object", path);
				goto out;
			}
			cJSON_ArrayForEach(m, e) {
				if (!cJSON_IsString(m)) {
					pd_errorf("%s: __metadata__ value '%s' is not a string", path,
						  m->string ? m->string : "?");
					goto out;
				}
			}
			continue;
		}
		if (pd_parse_tensor(f, e, &f->tensors[f->n_tensors]))
			goto out;
		by_off[f->n_tensors] = &f->tensors[f->n_tensors];
		f->n_tensors++;
	}
	/* Overlapping byte ranges would let one tensor alias another. */
	qsort(by_off, (size_t)f->n_tensors, sizeof(*by_off), pd_tensor_cmp_offset);
	for (int i = 1; i < f->n_tensors; i++) {
		const struct pd_st_tensor *a = by_off[i - 1], *b = by_off[i];

		if (a->data + a->nbytes > b->data) {
			pd_errorf("%s: tensors '%s' and '%s' overlap", path, a->name, b->name);
			goto out;
		}
	}
	if (f->scaled_fp8 && pd_st_fp8_scales(f))
		goto out;
	rc = 0;
	*out = f;
out:
	if (root)
		cJSON_Delete(root);
	free(by_off);
	if (fd >= 0)
		close(fd);
	if (rc)
		pd_st_file_free(f);
	return rc;
}

/* Keeps the __metadata__ of the file at PATH's mapping (re-parsed, small). */
int pd_st_load_meta(struct pd_st *st, const struct pd_st_file *f)
{
	uint64_t hlen = f->data_start - 8;
	cJSON *root;
	const cJSON *md, *m;
	int n, rc = -1;

	if (f->gguf)
		return pd_st_load_meta_gguf(st, f->gguf);
	root = cJSON_ParseWithLength((const char *)f->map + 8, (size_t)hlen);

	if (!root)
		return pd_errorf("%s: header is not JSON", f->path);
	md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
	n = md ? cJSON_GetArraySize(md) : 0;
	st->meta_keys = pd_calloc((size_t)n + 1, sizeof(char *), "metadata");
	st->meta_vals = pd_calloc((size_t)n + 1, sizeof(char *), "metadata");
	if (!st->meta_keys || !st->meta_vals)
		goto out;
	if (md) {
		cJSON_ArrayForEach(m, md) {
			st->meta_keys[st->n_meta] = pd_strdup(m->string);
			st->meta_vals[st->n_meta] = pd_strdup(m->valuestring);
			if (!st->meta_keys[st->n_meta] || !st->meta_vals[st->n_meta])
				goto out;
			st->n_meta++;
		}
	}
	rc = 0;
out:
	cJSON_Delete(root);
	return rc;
}

