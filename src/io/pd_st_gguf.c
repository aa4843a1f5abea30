/*
 * pd_st_gguf.c - a GGUF file (io/pd_gguf.c reads it) as one file of the
 * weights store: its tensors under their names, in their block formats,
 * its strings and numbers as metadata.
 */
#include "pd_st_int.h"
#include "pd_gguf.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* A GGUF file as one file of the set: its tensors in torch order. */
int pd_st_file_gguf(struct pd_st_file **out, const char *path)
{
	struct pd_st_file *f = pd_calloc(1, sizeof(*f), "GGUF file");

	*out = NULL;
	if (!f || !(f->path = pd_strdup(path)) || pd_gguf_open(&f->gguf, path))
		goto fail;
	f->map = f->gguf->map;
	f->size = f->gguf->size;
	f->data_start = f->gguf->data_start;
	if (f->gguf->n_tensors > PD_ST_MAX_TENSORS) {
		pd_errorf("%s: %lld tensors (at most %d)", path, (long long)f->gguf->n_tensors, PD_ST_MAX_TENSORS);
		goto fail;
	}
	f->tensors = pd_calloc((size_t)f->gguf->n_tensors + 1, sizeof(*f->tensors), "GGUF tensors");
	if (!f->tensors)
		goto fail;
	for (; f->n_tensors < f->gguf->n_tensors; f->n_tensors++) {
		const struct pd_gguf_tensor *g = &f->gguf->tensors[f->n_tensors];
		struct pd_st_tensor *t = &f->tensors[f->n_tensors];
		const struct pd_qtype_info *q = pd_qtype_get(g->type);

		if (!(t->name = pd_strdup(g->name)))
			goto fail;
		switch (g->type) {
		case PD_Q_F32:
			t->dtype = PD_F32;
			break;
		case PD_Q_F16:
			t->dtype = PD_F16;
			break;
		case PD_Q_BF16:
			t->dtype = PD_BF16;
			break;
		case PD_Q_F64:
			t->dtype = PD_F64;
			break;
		default:
			if (!q->decodes) {
				pd_errorf("%s: tensor '%s' is %s, which pdit cannot decode", path, g->name, q->name);
				free(t->name);
				t->name = NULL;
				goto fail;
			}
			t->dtype = PD_F32;
			t->qtype = g->type;
			t->q = q;
		}
		t->ndim = g->ndim;
		memcpy(t->shape, g->shape, sizeof(g->shape));
		t->numel = g->numel;
		t->data = g->data;
		t->nbytes = g->nbytes;
		t->file = f;
	}
	*out = f;
	return 0;
fail:
	pd_st_file_free(f);
	return -1;
}

/* A GGUF file's strings and numbers as metadata (arrays left out). */
int pd_st_load_meta_gguf(struct pd_st *st, const struct pd_gguf *g)
{
	st->meta_keys = pd_calloc((size_t)g->n_kv + 1, sizeof(char *), "metadata");
	st->meta_vals = pd_calloc((size_t)g->n_kv + 1, sizeof(char *), "metadata");
	if (!st->meta_keys || !st->meta_vals)
		return -1;
	for (int64_t i = 0; i < g->n_kv; i++) {
		const struct pd_gguf_kv *kv = &g->kv[i];
		char *v;

		if (kv->type == PD_GGUF_ARRAY)
			continue;
		if (kv->type == PD_GGUF_STRING)
			v = pd_strdup(kv->str);
		else if (kv->type == PD_GGUF_F32 || kv->type == PD_GGUF_F64)
			v = pd_strfmt("%.17g", kv->f);
		else if (kv->type == PD_GGUF_U64)
			v = pd_strfmt("%llu", (unsigned long long)kv->u);
		else
			v = pd_strfmt("%lld", (long long)kv->i);
		st->meta_keys[st->n_meta] = pd_strdup(kv->key);
		st->meta_vals[st->n_meta] = v;
		if (!st->meta_keys[st->n_meta] || !v) {
			st->n_meta++;
			return -1;
		}
		st->n_meta++;
	}
	return 0;
}

