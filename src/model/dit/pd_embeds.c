/*
 * pd_embeds.c - prompt embeddings read, checked, repeated.
 */
#include "pd_embeds.h"
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_util.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct pd_st_tensor *pd_embeds_find(const struct pd_st *st, const char *name)
{
	char golden[96];
	const struct pd_st_tensor *t = pd_st_get(st, name);

	if (t)
		return t;
	snprintf(golden, sizeof(golden), "in.%s", name);
	return pd_st_get(st, golden);
}

static int pd_embeds_read(const struct pd_st_tensor *t, float **out)
{
	*out = pd_malloc((size_t)t->numel * sizeof(float), t->name);
	if (!*out)
		return -1;
	return pd_st_read_f32(t, 0, (size_t)t->numel, *out);
}

int64_t pd_embeds_len(const struct pd_embeds *e, int64_t b)
{
	return e->lens ? e->lens[b] : e->txt_len;
}

int pd_embeds_set_lens(struct pd_embeds *e, const int64_t *lens)
{
	int64_t b = 0;

	free(e->lens);
	e->lens = NULL;
	while (lens && b < e->batch && lens[b] == e->txt_len)
		b++;
	if (!lens || b == e->batch)
		return 0;
	e->lens = pd_malloc((size_t)e->batch * sizeof(int64_t), "text lengths");
	if (!e->lens)
		return -1;
	memcpy(e->lens, lens, (size_t)e->batch * sizeof(int64_t));
	return 0;
}

int pd_embeds_mask_lens(const struct pd_st *st, const char *name, int64_t B, int64_t T, int64_t *lens)
{
	const struct pd_st_tensor *t = pd_embeds_find(st, name);
	float *m = NULL;

	for (int64_t b = 0; b < B; b++)
		lens[b] = T;
	if (!t)
		return 0;
	if (t->ndim != 2 || t->shape[0] != B || t->shape[1] != T)
		return pd_errorf("%s: %s must be [%lld, %lld] as its embeddings", st->path, t->name, (long long)B,
				 (long long)T);
	if (!pd_dtype_is_float(t->dtype)) {
		/* integers or booleans, as the pipelines and torch save masks */
		m = pd_malloc((size_t)(B * T) * sizeof(float), t->name);
		for (int64_t i = 0; m && i < B * T; i++)
			m[i] = pd_st_int_at(t, i) != 0;
	} else if (pd_embeds_read(t, &m)) {
		free(m);
		return -1;
	}
	if (!m)
		return -1;
	for (int64_t b = 0; b < B; b++) {
		int64_t k = 0;

		while (k < T && m[b * T + k] != 0)
			k++;
		for (int64_t j = k; j < T; j++)
			if (m[b * T + j] != 0) {
				free(m);
				return pd_errorf("%s: %s has a gap in prompt %lld: only padding at the end is read", st->path,
						 t->name, (long long)b);
			}
		if (k < 1) {
			free(m);
			return pd_errorf("%s: %s leaves prompt %lld no text token", st->path, t->name, (long long)b);
		}
		lens[b] = k;
	}
	free(m);
	return 0;
}

int pd_embeds_load(struct pd_embeds *e, const char *path)
{
	struct pd_st *st;
	const struct pd_st_tensor *p, *q, *np, *nq;
	int64_t *lens = NULL;
	int rc = -1;

	memset(e, 0, sizeof(*e));
	if (pd_st_open(&st, path))
		return -1;
	p = pd_embeds_find(st, "prompt_embeds");
	q = pd_embeds_find(st, "pooled_prompt_embeds");
	np = pd_embeds_find(st, "negative_prompt_embeds");
	nq = pd_embeds_find(st, "negative_pooled_prompt_embeds");
	if (!p || !q) {
		pd_errorf("%s: needs prompt_embeds [B, T, J] and pooled_prompt_embeds [B, P]", path);
		goto out;
	}
	if (p->ndim != 3 || q->ndim != 2 || p->shape[0] != q->shape[0] || p->shape[0] < 1 || p->shape[1] < 1) {
		pd_errorf("%s: prompt_embeds must be [B, T, J] and pooled_prompt_embeds [B, P] with the same B >= 1",
			  path);
		goto out;
	}
	if (!np != !nq) {
		pd_errorf("%s: negative_prompt_embeds and negative_pooled_prompt_embeds must come together "
			  "(diffusers raises on one alone)", path);
		goto out;
	}
	e->batch = p->shape[0];
	e->txt_len = p->shape[1];
	e->joint_dim = p->shape[2];
	e->pooled_dim = q->shape[1];
	if (pd_embeds_read(p, &e->prompt) || pd_embeds_read(q, &e->pooled))
		goto out;
	/* the prompts' lengths, then the negative's (its batch is B or 1) */
	lens = pd_malloc((size_t)e->batch * sizeof(int64_t), "text lengths");
	if (!lens || pd_embeds_mask_lens(st, "prompt_embeds_mask", e->batch, e->txt_len, lens) ||
	    pd_embeds_set_lens(e, lens))
		goto out;
	if (np) {
		int64_t nb = np->shape[0];

		if (np->ndim != 3 || nq->ndim != 2 || np->shape[2] != e->joint_dim || nq->shape[1] != e->pooled_dim ||
		    nq->shape[0] != nb || (nb != e->batch && nb != 1) || np->shape[1] < 1) {
			pd_errorf("%s: negative embeddings must be [B or 1, T, %lld] and [B or 1, %lld]", path,
				  (long long)e->joint_dim, (long long)e->pooled_dim);
			goto out;
		}
		/* one negative length for every image: its rows before padding */
		if (pd_embeds_mask_lens(st, "negative_prompt_embeds_mask", nb, np->shape[1], lens))
			goto out;
		for (int64_t b = 1; b < nb; b++)
			if (lens[b] != lens[0]) {
				pd_errorf("%s: the negative prompts of negative_prompt_embeds_mask have %lld and %lld "
					  "tokens: one negative length a batch", path, (long long)lens[0], (long long)lens[b]);
				goto out;
			}
		e->neg_txt_len = lens[0];
		e->neg_prompt = pd_malloc((size_t)(e->batch * e->neg_txt_len * e->joint_dim) * sizeof(float), "embeds");
		e->neg_pooled = pd_malloc((size_t)(e->batch * e->pooled_dim) * sizeof(float), "embeds");
		if (!e->neg_prompt || !e->neg_pooled)
			goto out;
		/* One negative prompt serves every image of the batch. */
		for (int64_t b = 0; b < e->batch; b++) {
			int64_t src = nb == 1 ? 0 : b;

			if (pd_st_read_f32(np, (size_t)(src * np->shape[1] * e->joint_dim),
					   (size_t)(e->neg_txt_len * e->joint_dim),
					   e->neg_prompt + b * e->neg_txt_len * e->joint_dim) ||
			    pd_st_read_f32(nq, (size_t)(src * e->pooled_dim), (size_t)e->pooled_dim,
					   e->neg_pooled + b * e->pooled_dim))
				goto out;
		}
	}
	rc = 0;
out:
	free(lens);
	pd_st_close(st);
	if (rc)
		pd_embeds_free(e);
	return rc;
}

int pd_embeds_check(const struct pd_embeds *e, const struct pd_dit_info *info, const char *path)
{
	/* named as the diffusers configs name the widths */
	if (e->joint_dim != info->txt_width)
		return pd_errorf("%s: prompt_embeds width %lld does not match the transformer's text width %d "
				 "(joint_attention_dim in FLUX's and Qwen-Image's config, text_dim in Wan's)",
				 path, (long long)e->joint_dim, info->txt_width);
	if (e->pooled_dim != info->pooled_width)
		return pd_errorf("%s: pooled_prompt_embeds width %lld does not match the transformer's "
				 "pooled_projection_dim %d", path, (long long)e->pooled_dim, info->pooled_width);
	return 0;
}

void pd_embeds_free(struct pd_embeds *e)
{
	free(e->prompt);
	free(e->lens);
	free(e->pooled);
	free(e->neg_prompt);
	free(e->neg_pooled);
	for (int i = 0; i < e->n_extra; i++)
		if (!e->extra[i].borrowed)
			free(e->extra[i].data);
	memset(e, 0, sizeof(*e));
}

void *pd_embeds_add_extra(struct pd_embeds *e, const char *name, enum pd_dtype dtype, int ndim, const int64_t *shape,
			  void *data)
{
	struct pd_embeds_extra *x;
	size_t n = 1;

	if (e->n_extra == PD_EMBEDS_MAX_EXTRA || ndim < 1 || ndim > 3 || strlen(name) >= sizeof(x->name)) {
		pd_errorf("prompt embeddings: no room for %s", name);
		return NULL;
	}
	x = &e->extra[e->n_extra];
	for (int d = 0; d < ndim; d++) {
		x->shape[d] = shape[d];
		n *= (size_t)shape[d];
	}
	x->borrowed = data != NULL;
	x->data = data ? data : pd_calloc(n + 1, pd_dtype_size(dtype), name);
	if (!x->data)
		return NULL;
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->dtype = dtype;
	x->ndim = ndim;
	e->n_extra++;
	return x->data;
}

int pd_embeds_save(const struct pd_embeds *e, const char *path, char *const *prompts, int n, const char *negative)
{
	int64_t s_e[3] = { e->batch, e->txt_len, e->joint_dim }, s_p[2] = { e->batch, e->pooled_dim };
	int64_t s_n[3] = { e->batch, e->neg_txt_len, e->joint_dim };
	struct pd_st_writer *w = pd_st_writer_new();
	cJSON *list = cJSON_CreateArray();
	char *meta = NULL;
	int64_t *mask = NULL, s_m[2] = { e->batch, e->txt_len };
	int rc = -1, has_mask = 0;

	if (!w || !list) {
		pd_errorf("out of memory writing %s", path);
		goto out;
	}
	for (int b = 0; prompts && b < n; b++)
		cJSON_AddItemToArray(list, cJSON_CreateString(prompts[b]));
	meta = cJSON_PrintUnformatted(list);
	if (!meta) {
		pd_errorf("out of memory writing %s", path);
		goto out;
	}
	for (int i = 0; i < e->n_extra; i++) {
		has_mask |= !strcmp(e->extra[i].name, "prompt_embeds_mask");
		if (pd_st_writer_add(w, e->extra[i].name, e->extra[i].dtype, e->extra[i].ndim, e->extra[i].shape,
				     e->extra[i].data))
			goto out;
	}
	/* padded prompts: the mask that pd_embeds_load reads their lengths from */
	if (e->lens && !has_mask) {
		mask = pd_malloc((size_t)(e->batch * e->txt_len) * sizeof(int64_t), "the text mask");
		if (!mask)
			goto out;
		for (int64_t i = 0; i < e->batch * e->txt_len; i++)
			mask[i] = i % e->txt_len < e->lens[i / e->txt_len];
		if (pd_st_writer_add(w, "prompt_embeds_mask", PD_I64, 2, s_m, mask))
			goto out;
	}
	if (pd_st_writer_add(w, "prompt_embeds", PD_F32, 3, s_e, e->prompt) ||
	    pd_st_writer_add(w, "pooled_prompt_embeds", PD_F32, 2, s_p, e->pooled) ||
	    (e->neg_prompt && (pd_st_writer_add(w, "negative_prompt_embeds", PD_F32, 3, s_n, e->neg_prompt) ||
			       pd_st_writer_add(w, "negative_pooled_prompt_embeds", PD_F32, 2, s_p, e->neg_pooled))) ||
	    (prompts && pd_st_writer_meta(w, "prompts", meta)) ||
	    (negative && pd_st_writer_meta(w, "negative_prompt", negative)) || pd_st_writer_save(w, path))
		goto out;
	rc = 0;
out:
	free(mask);
	free(meta);
	cJSON_Delete(list);
	pd_st_writer_free(w);
	return rc;
}

/* A [B, per] buffer becomes [n, per] copies of its first row. */
static int pd_repeat_rows(float **buf, int64_t per, int64_t n)
{
	float *nb;

	if (!*buf)
		return 0;
	nb = pd_malloc((size_t)(n * per) * sizeof(float), "embeds");
	if (!nb)
		return -1;
	for (int64_t b = 0; b < n; b++)
		memcpy(nb + b * per, *buf, (size_t)per * sizeof(float));
	free(*buf);
	*buf = nb;
	return 0;
}

int pd_embeds_repeat(struct pd_embeds *e, int64_t n)
{
	if (n < 1)
		return pd_errorf("a batch needs at least one image");
	/* every copy is the first prompt: its length */
	if (e->lens) {
		int64_t t = e->lens[0];

		free(e->lens);
		e->lens = pd_malloc((size_t)n * sizeof(int64_t), "text lengths");
		if (!e->lens)
			return -1;
		for (int64_t b = 0; b < n; b++)
			e->lens[b] = t;
	}
	if (pd_repeat_rows(&e->prompt, e->txt_len * e->joint_dim, n) ||
	    pd_repeat_rows(&e->pooled, e->pooled_dim, n) ||
	    pd_repeat_rows(&e->neg_prompt, e->neg_txt_len * e->joint_dim, n) ||
	    pd_repeat_rows(&e->neg_pooled, e->pooled_dim, n))
		return -1;
	e->batch = n;
	return 0;
}

int pd_dit_encode(const struct pd_dit_family *fam, struct pd_embeds *e, void **held, const struct pd_model_paths *mp,
		  struct pd_backend *be, char *const *prompts, int n, const char *negative, int max_seq, int64_t first,
		  int64_t count, int keep_extra)
{
	const struct pd_prompt_encoder_kind *k = fam->prompt_encoder;
	void *pe = held ? *held : NULL;
	int rc;

	if (!k)
		return pd_errorf("the %s family has no prompt encoder: give --embeds FILE", fam->name);
	if (!pe) {
		pe = pd_calloc(1, k->size, "the text encoders");
		if (!pe || k->load(pe, mp, be)) {
			free(pe);
			return -1;
		}
	}
	rc = k->embeds(e, pe, prompts, n, negative, max_seq, first, count, keep_extra);
	if (held) {
		*held = pe;
	} else {
		k->free(pe);
		free(pe);
	}
	return rc;
}

void pd_dit_encoders_free(const struct pd_dit_family *fam, void *held)
{
	if (held && fam->prompt_encoder) {
		fam->prompt_encoder->free(held);
		free(held);
	}
}
