/*
 * pd_st_writer.c - the safetensors writer, apart from the reader so that
 * code which only reads weights does not carry it.
 */

#include "pd_st_writer.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_st_entry {
	char *name;                     /* tensor name */
	enum pd_dtype dtype;            /* element type */
	int ndim;                       /* dimensions */
	int64_t shape[PD_ST_MAX_DIMS];  /* shape */
	size_t nbytes;                  /* data size */
	const void *data;               /* borrowed bytes, or NULL when fill is used */
	pd_st_fill_fn fill;             /* producer of the bytes at save time */
	void *fill_ctx;                 /* its argument */
};

struct pd_st_writer {
	int n;                          /* entries */
	struct pd_st_entry *e;          /* entries in insertion order */
	cJSON *meta;                    /* __metadata__ object */
	int fills_apart;                /* fills may run at once (pd_st_writer_fills_apart) */
};

/* What fills running at once hold, about: their outputs' bytes */
#define PD_ST_BATCH_BYTES ((size_t)1 << 30)

void pd_st_writer_fills_apart(struct pd_st_writer *w)
{
	w->fills_apart = 1;
}

struct pd_st_writer *pd_st_writer_new(void)
{
	struct pd_st_writer *w = pd_calloc(1, sizeof(*w), "writer");

	if (!w)
		return NULL;
	w->meta = cJSON_CreateObject();
	if (!w->meta) {
		free(w);
		pd_errorf("out of memory");
		return NULL;
	}
	return w;
}

void pd_st_writer_free(struct pd_st_writer *w)
{
	if (!w)
		return;
	for (int i = 0; i < w->n; i++)
		free(w->e[i].name);
	free(w->e);
	cJSON_Delete(w->meta);
	free(w);
}

static int pd_st_writer_push(struct pd_st_writer *w, const char *name, enum pd_dtype dt, int ndim,
			     const int64_t *shape, const void *data, pd_st_fill_fn fill, void *ctx)
{
	struct pd_st_entry *ne, *x;
	size_t numel = 1;

	if (ndim < 0 || ndim > PD_ST_MAX_DIMS)
		return pd_errorf("writer: tensor '%s' has %d dimensions", name, ndim);
	for (int i = 0; i < ndim; i++)
		if (shape[i] < 0 || pd_mul_size(numel, (size_t)shape[i], &numel))
			return pd_errorf("writer: bad shape for tensor '%s'", name);
	ne = realloc(w->e, sizeof(*ne) * (size_t)(w->n + 1));
	if (!ne)
		return pd_errorf("out of memory");
	w->e = ne;
	x = &w->e[w->n];
	memset(x, 0, sizeof(*x));
	x->name = pd_strdup(name);
	if (!x->name)
		return -1;
	x->dtype = dt;
	x->ndim = ndim;
	memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
	if (pd_mul_size(numel, pd_dtype_size(dt), &x->nbytes)) {
		free(x->name);
		return -1;
	}
	x->data = data;
	x->fill = fill;
	x->fill_ctx = ctx;
	w->n++;
	return 0;
}

int pd_st_writer_add(struct pd_st_writer *w, const char *name, enum pd_dtype dt, int ndim,
		     const int64_t *shape, const void *data)
{
	return pd_st_writer_push(w, name, dt, ndim, shape, data, NULL, NULL);
}

int pd_st_writer_add_fill(struct pd_st_writer *w, const char *name, enum pd_dtype dt, int ndim,
			  const int64_t *shape, pd_st_fill_fn fill, void *ctx)
{
	return pd_st_writer_push(w, name, dt, ndim, shape, NULL, fill, ctx);
}

int pd_st_writer_meta(struct pd_st_writer *w, const char *key, const char *value)
{
	cJSON_DeleteItemFromObjectCaseSensitive(w->meta, key);
	if (!cJSON_AddStringToObject(w->meta, key, value))
		return pd_errorf("out of memory");
	return 0;
}

static char *pd_st_writer_header(struct pd_st_writer *w, size_t *len)
{
	cJSON *root = cJSON_CreateObject();
	size_t off = 0, n;
	char *text, *padded;

	if (!root)
		return NULL;
	if (cJSON_GetArraySize(w->meta) > 0)
		cJSON_AddItemReferenceToObject(root, "__metadata__", w->meta);
	for (int i = 0; i < w->n; i++) {
		struct pd_st_entry *x = &w->e[i];
		cJSON *t = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();

		if (!t || !shape || !offs) {
			cJSON_Delete(t);
			cJSON_Delete(shape);
			cJSON_Delete(offs);
			cJSON_Delete(root);
			return NULL;
		}
		cJSON_AddStringToObject(t, "dtype", pd_dtype_name(x->dtype));
		for (int d = 0; d < x->ndim; d++)
			cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)x->shape[d]));
		cJSON_AddItemToObject(t, "shape", shape);
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + x->nbytes)));
		cJSON_AddItemToObject(t, "data_offsets", offs);
		cJSON_AddItemToObject(root, x->name, t);
		off += x->nbytes;
	}
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!text)
		return NULL;
	/* Pad with spaces to a multiple of 8 so the data that follows is
	 * aligned, as the reference writer does. */
	n = strlen(text);
	*len = (n + 7) & ~(size_t)7;
	padded = malloc(*len);
	if (padded) {
		memcpy(padded, text, n);
		memset(padded + n, ' ', *len - n);
	}
	free(text);
	return padded;
}

/* Where the entries saved together from I end: I alone, or when fills run
 * apart, the fills from I on, as many large ones (a MiB or more) as there
 * are threads, the small ones between them (biases, norms) not counted,
 * PD_ST_BATCH_BYTES at most (the first whatever its size): a batch of one
 * large fill and its small neighbours would leave it one thread. */
static int pd_st_batch_end(const struct pd_st_writer *w, int i)
{
	int j = i + 1, cap = omp_get_max_threads(), large = w->e[i].nbytes >= ((size_t)1 << 20);
	size_t held = w->e[i].nbytes;

	if (!w->fills_apart || !w->e[i].fill)
		return j;
	while (j < w->n && w->e[j].fill && held + w->e[j].nbytes <= PD_ST_BATCH_BYTES) {
		if (w->e[j].nbytes >= ((size_t)1 << 20) && ++large > cap)
			break;
		held += w->e[j++].nbytes;
	}
	return j;
}

/* Entries I to END (fills, or one of borrowed bytes) into O in order, the
 * fills on a thread each. */
static int pd_st_save_batch(struct pd_st_writer *w, struct pd_out_file *o, int i, int end)
{
	void **buf;
	char why[1024] = "";
	int rc = 0;

	if (!w->e[i].fill)
		return pd_out_write(o, w->e[i].data, w->e[i].nbytes);
	buf = pd_calloc((size_t)(end - i), sizeof(*buf), "tensor list");
	if (!buf)
		return -1;
	for (int k = i; k < end && !rc; k++)
		if (!(buf[k - i] = pd_malloc(w->e[k].nbytes, w->e[k].name)))
			rc = -1;
	if (!rc) {
#pragma omp parallel for schedule(dynamic, 1) if (end - i > 1)
		for (int k = i; k < end; k++)
			if (w->e[k].fill(w->e[k].fill_ctx, buf[k - i], w->e[k].nbytes)) {
				/* a worker's message is its thread's: kept for this one */
#pragma omp critical
				if (!rc) {
					rc = -1;
					snprintf(why, sizeof(why), "%s", pd_last_error());
				}
			}
		if (rc && end - i > 1)
			pd_errorf("%s", why);
	}
	for (int k = i; k < end && !rc; k++)
		rc = pd_out_write(o, buf[k - i], w->e[k].nbytes);
	for (int k = i; k < end; k++)
		free(buf[k - i]);
	free(buf);
	return rc;
}

int pd_st_writer_save(struct pd_st_writer *w, const char *path)
{
	struct pd_out_file o;
	unsigned char lenbuf[8];
	size_t hlen = 0;
	char *header = pd_st_writer_header(w, &hlen);
	int rc = -1;

	if (!header)
		return pd_errorf("out of memory writing %s", path);
	if (pd_out_open(&o, path)) {
		free(header);
		return -1;
	}
	for (int i = 0; i < 8; i++)
		lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	if (pd_out_write(&o, lenbuf, 8) || pd_out_write(&o, header, hlen))
		goto fail;
	for (int i = 0, end; i < w->n; i = end) {
		end = pd_st_batch_end(w, i);
		if (pd_st_save_batch(w, &o, i, end))
			goto fail;
	}
	free(header);
	return pd_out_commit(&o);
fail:
	free(header);
	pd_out_abort(&o);
	return rc;
}

int pd_write_file_atomic(const char *path, const void *data, size_t len)
{
	struct pd_out_file o;

	if (pd_out_open(&o, path))
		return -1;
	if (pd_out_write(&o, data, len)) {
		pd_out_abort(&o);
		return -1;
	}
	return pd_out_commit(&o);
}

int pd_st_write_shards(const char *src, const char *dir, const char *stem, int shards)
{
	struct pd_st *st = NULL;
	cJSON *idx = cJSON_CreateObject(), *map, *meta;
	size_t total = 0, done = 0;
	int rc = -1, t = 0;
	char *text = NULL, *path = NULL;

	if (!idx || pd_st_open(&st, src))
		goto out;
	meta = cJSON_AddObjectToObject(idx, "metadata");
	map = cJSON_AddObjectToObject(idx, "weight_map");
	/* raw bytes only: a GGUF block tensor or scaled fp8 is not what its dtype says */
	for (int i = 0; i < st->n_tensors; i++)
		if (st->sorted[i]->q || st->sorted[i]->fp8_scale != 0) {
			pd_errorf("%s: '%s' is quantized: write it with pdit quantize first", src, st->sorted[i]->name);
			goto out;
		}
	for (int i = 0; i < st->n_tensors; i++)
		total += st->sorted[i]->nbytes;
	cJSON_AddNumberToObject(meta, "total_size", (double)total);
	for (int k = 0; k < shards; k++) {
		struct pd_st_writer *w = pd_st_writer_new();
		char name[256];
		int wrc;

		snprintf(name, sizeof(name), "%s-%05d-of-%05d.safetensors", stem, k + 1, shards);
		/* this shard takes tensors until its share of the bytes */
		while (w && t < st->n_tensors && (k == shards - 1 || done < total * (size_t)(k + 1) / (size_t)shards ||
						  t == 0)) {
			const struct pd_st_tensor *x = st->sorted[t++];

			if (pd_st_writer_add(w, x->name, x->dtype, x->ndim, x->shape, x->data)) {
				pd_st_writer_free(w);
				goto out;
			}
			cJSON_AddStringToObject(map, x->name, name);
			done += x->nbytes;
		}
		free(path);
		path = pd_strfmt("%s/%s", dir, name);
		wrc = !w || !path || pd_st_writer_save(w, path);
		pd_st_writer_free(w);
		if (wrc)
			goto out;
	}
	free(path);
	path = pd_strfmt("%s/%s.safetensors.index.json", dir, stem);
	text = cJSON_Print(idx);
	if (!path || !text || pd_write_file_atomic(path, text, strlen(text)))
		goto out;
	rc = 0;
out:
	if (st)
		pd_st_close(st);
	if (rc == 0 && remove(src) != 0)
		rc = pd_errorf("%s: cannot remove after sharding", src);
	cJSON_Delete(idx);
	free(text);
	free(path);
	return rc;
}
