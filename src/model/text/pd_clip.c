/*
 * pd_clip.c - the CLIP text model (transformers v4.43.4 modeling_clip.py;
 * line numbers in tests/golden/text-encoders-tiny/README.md).
 */
#include "pd_config.h"
#include "pd_loader.h"
#include "pd_clip.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_clip_layer {
	struct pd_linear *q, *k, *v, *o; /* self-attention projections, with bias */
	struct pd_linear *fc1, *fc2;    /* MLP */
	float *ln1_w, *ln1_b;           /* layer_norm1 */
	float *ln2_w, *ln2_b;           /* layer_norm2 */
};

struct pd_clip {
	struct pd_clip_config cfg;
	struct pd_backend *be;          /* compute (borrowed) */
	struct pd_st *st;               /* the weights, open for token rows */
	char tok_name[256];             /* the token embedding's tensor name */
	float *pos;                     /* host [max_pos, hidden] position embeddings */
	struct pd_clip_layer *layer;    /* [layers] */
	float *fln_w, *fln_b;           /* final_layer_norm */
	float *x, *h, *q, *k, *v, *a, *f; /* activations for max_pos tokens */
};

const struct pd_clip_config *pd_clip_get_config(const struct pd_clip *m)
{
	return &m->cfg;
}

static int pd_clip_config_parse(struct pd_clip_config *c, const struct pd_config *jp)
{
	struct pd_config j = *jp;
	const char *act = NULL;
	int64_t v;
	double d;
	int rc = -1;

#define GETI(key, def, lo, hi, field) \
	do { \
		if (pd_config_int(&j, key, def < 0, def, lo, hi, &v)) \
			goto out; \
		c->field = (int)v; \
	} while (0)
	GETI("hidden_size", -1, 1, 1 << 16, hidden);
	GETI("intermediate_size", -1, 1, 1 << 18, intermediate);
	GETI("num_attention_heads", -1, 1, 1 << 10, heads);
	GETI("num_hidden_layers", -1, 0, 1 << 10, layers);
	GETI("max_position_embeddings", 77, 1, 1 << 16, max_pos);
	GETI("vocab_size", -1, 1, 1 << 24, vocab);
	GETI("eos_token_id", 2, 0, 1 << 24, eos_token_id);
#undef GETI
	if (pd_config_double(&j, "layer_norm_eps", 0, 1e-5, &d) || pd_config_string(&j, "hidden_act", 0, "quick_gelu", &act))
		goto out;
	c->eps = (float)d;
	if (strcmp(act, "quick_gelu") != 0) {
		pd_errorf("%s: hidden_act \"%s\" is not supported (FLUX.1's CLIP uses quick_gelu)", j.path, act);
		goto out;
	}
	if (c->hidden % c->heads) {
		pd_errorf("%s: hidden_size %d does not divide into %d heads", j.path, c->hidden, c->heads);
		goto out;
	}
	rc = 0;
out:
	return rc;
}

/* DIR/config.json, or the "config" metadata of a single file ST. */
static int pd_clip_config_read(struct pd_clip_config *c, const char *dir, const struct pd_st *st)
{
	struct pd_config j;
	int rc;

	if (dir ? pd_config_load_in(&j, dir, "config.json", "CLIP text encoder")
		: pd_config_parse(&j, pd_st_meta(st, "config"), st->path))
		return -1;
	rc = pd_clip_config_parse(c, &j);
	pd_config_free(&j);
	return rc;
}

/* Sizes from the tensors of a single file (CLIP ViT-L/14's text model:
 * heads of 64, eps 1e-5, legacy EOS pooling). */
static int pd_clip_config_infer(struct pd_clip_config *c, const struct pd_st *st, const char *pre)
{
	char name[300];
	const struct pd_st_tensor *t;

	snprintf(name, sizeof(name), "%sembeddings.token_embedding.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no %s", st->path, name);
	c->vocab = (int)t->shape[0];
	c->hidden = (int)t->shape[1];
	snprintf(name, sizeof(name), "%sembeddings.position_embedding.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no %s", st->path, name);
	c->max_pos = (int)t->shape[0];
	for (c->layers = 0;; c->layers++) {
		snprintf(name, sizeof(name), "%sencoder.layers.%d.self_attn.q_proj.weight", pre, c->layers);
		if (!pd_st_get(st, name))
			break;
	}
	snprintf(name, sizeof(name), "%sencoder.layers.0.mlp.fc1.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no %s", st->path, name);
	c->intermediate = (int)t->shape[0];
	if (c->hidden % 64)
		return pd_errorf("%s: a CLIP text model of width %d: its head count is not known without a config.json "
				 "(give the text_encoder folder)", st->path, c->hidden);
	c->heads = c->hidden / 64;
	c->eps = 1e-5f;
	c->eos_token_id = 2;
	return 0;
}

int pd_clip_load(struct pd_clip **out, const char *path, struct pd_backend *be)
{
	struct pd_clip *m = pd_calloc(1, sizeof(*m), "the CLIP text model");
	struct pd_loader ld;
	const struct pd_st_tensor *t;
	char pre[200];
	int64_t D, I, n;

	*out = NULL;
	if (!m)
		return -1;
	m->be = be;
	if (pd_st_open_path(&m->st, path, "model"))
		goto fail;
	/* "text_model." in transformers' files; single files add their own prefix */
	t = pd_st_find_suffix(m->st, "text_model.embeddings.token_embedding.weight");
	if (!t)
		t = pd_st_find_suffix(m->st, "embeddings.token_embedding.weight");
	if (!t) {
		pd_errorf("%s: no CLIP text model in it (no embeddings.token_embedding.weight)", m->st->path);
		goto fail;
	}
	snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("embeddings.token_embedding.weight")),
		 t->name);
	snprintf(m->tok_name, sizeof(m->tok_name), "%s", t->name);
	if (pd_is_dir(path) ? pd_clip_config_read(&m->cfg, path, NULL)
	    : pd_st_meta(m->st, "config") ? pd_clip_config_read(&m->cfg, NULL, m->st)
					  : pd_clip_config_infer(&m->cfg, m->st, pre))
		goto fail;
	D = m->cfg.hidden;
	I = m->cfg.intermediate;
	n = m->cfg.max_pos;
	ld = (struct pd_loader){ .st = m->st, .be = be };
	m->layer = pd_calloc((size_t)m->cfg.layers + 1, sizeof(*m->layer), "the CLIP text model");
	m->pos = pd_malloc((size_t)(n * D) * sizeof(float), "CLIP position embeddings");
	if (!m->layer || !m->pos)
		goto fail;
	{
		const struct pd_st_tensor *p;
		int64_t shape[2] = { n, D };
		char name[300];

		snprintf(name, sizeof(name), "%sembeddings.position_embedding.weight", pre);
		if (pd_st_require(m->st, name, 2, shape, &p) || pd_st_read_f32(p, 0, (size_t)(n * D), m->pos))
			goto fail;
	}
	for (int i = 0; i < m->cfg.layers; i++) {
		struct pd_clip_layer *L = &m->layer[i];
		const char *f = "%sencoder.layers.%d.%s";

		L->q = pd_loader_linear(&ld, D, D, f, pre, i, "self_attn.q_proj");
		L->k = pd_loader_linear(&ld, D, D, f, pre, i, "self_attn.k_proj");
		L->v = pd_loader_linear(&ld, D, D, f, pre, i, "self_attn.v_proj");
		L->o = pd_loader_linear(&ld, D, D, f, pre, i, "self_attn.out_proj");
		L->fc1 = pd_loader_linear(&ld, I, D, f, pre, i, "mlp.fc1");
		L->fc2 = pd_loader_linear(&ld, D, I, f, pre, i, "mlp.fc2");
		L->ln1_w = pd_loader_vector(&ld, D, "%sencoder.layers.%d.layer_norm1.weight", pre, i);
		L->ln1_b = pd_loader_vector(&ld, D, "%sencoder.layers.%d.layer_norm1.bias", pre, i);
		L->ln2_w = pd_loader_vector(&ld, D, "%sencoder.layers.%d.layer_norm2.weight", pre, i);
		L->ln2_b = pd_loader_vector(&ld, D, "%sencoder.layers.%d.layer_norm2.bias", pre, i);
	}
	m->fln_w = pd_loader_vector(&ld, D, "%sfinal_layer_norm.weight", pre);
	m->fln_b = pd_loader_vector(&ld, D, "%sfinal_layer_norm.bias", pre);
	if (ld.failed)
		goto fail;
	m->x = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->h = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->q = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->k = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->v = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->a = pd_backend_alloc(be, (size_t)(n * D), "CLIP activations");
	m->f = pd_backend_alloc(be, (size_t)(n * I), "CLIP activations");
	if (pd_backend_check(be))
		goto fail;
	*out = m;
	return 0;
fail:
	pd_clip_free(m);
	return -1;
}

void pd_clip_free(struct pd_clip *m)
{
	struct pd_backend *be;

	if (!m)
		return;
	be = m->be;
	for (int i = 0; m->layer && i < m->cfg.layers; i++) {
		struct pd_clip_layer *L = &m->layer[i];
		struct pd_linear *lin[6] = { L->q, L->k, L->v, L->o, L->fc1, L->fc2 };
		float *vec[4] = { L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b };

		for (int j = 0; j < 6; j++)
			if (lin[j])
				be->ops->linear_free(be, lin[j]);
		for (int j = 0; j < 4; j++)
			be->ops->free(be, vec[j]);
	}
	free(m->layer);
	be->ops->free(be, m->fln_w);
	be->ops->free(be, m->fln_b);
	be->ops->free(be, m->x);
	be->ops->free(be, m->h);
	be->ops->free(be, m->q);
	be->ops->free(be, m->k);
	be->ops->free(be, m->v);
	be->ops->free(be, m->a);
	be->ops->free(be, m->f);
	free(m->pos);
	if (m->st)
		pd_st_close(m->st);
	free(m);
}

static void pd_clip_dump(struct pd_clip *m, const struct pd_dump *dump, const char *name, const float *dev,
			 int64_t rows, int64_t cols)
{
	float *host = malloc((size_t)(rows * cols + 1) * sizeof(float));
	int64_t shape[3] = { 1, rows, cols };

	if (!host)
		return;
	m->be->ops->download(m->be, host, dev, (size_t)(rows * cols));
	if (!pd_backend_check(m->be))
		dump->fn(dump->ctx, name, -1, host, rows > 0 ? 3 : 2, rows > 0 ? shape : shape + 1);
	free(host);
}

int pd_clip_forward(struct pd_clip *m, const int64_t *ids, int n, float *last, float *pooled,
		    const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_loader ld = { .st = m->st, .be = be };
	int64_t D = m->cfg.hidden, I = m->cfg.intermediate, hd = D / m->cfg.heads;
	float *host = NULL;
	int eos = 0, rc = -1;
	char name[64];

	if (n < 1 || n > m->cfg.max_pos)
		return pd_errorf("CLIP: %d tokens (1 to %d)", n, m->cfg.max_pos);
	host = pd_malloc((size_t)(n * D) * sizeof(float), "CLIP embeddings");
	if (!host)
		return -1;
	/* embeddings (213-230): token rows + positions 0 .. n-1 */
	if (pd_loader_rows(&ld, m->tok_name, m->cfg.vocab, D, ids, n, host))
		goto out;
	for (int64_t i = 0; i < n * D; i++)
		host[i] += m->pos[i];
	be->ops->upload(be, m->x, host, (size_t)(n * D));
	if (dump)
		pd_clip_dump(m, dump, "clip.hidden_states.0", m->x, n, D);
	for (int l = 0; l < m->cfg.layers; l++) {
		struct pd_clip_layer *L = &m->layer[l];

		/* pre-norm layer (545-559): x += out_proj(Attn(LN1 x)); x += fc2(quick_gelu(fc1(LN2 x))) */
		be->ops->layernorm(be, m->h, D, m->x, D, n, D, L->ln1_w, L->ln1_b, m->cfg.eps);
		be->ops->linear(be, L->q, m->h, D, n, m->q, D, 0);
		be->ops->linear(be, L->k, m->h, D, n, m->k, D, PD_LIN_SAME_INPUT);
		be->ops->linear(be, L->v, m->h, D, n, m->v, D, PD_LIN_SAME_INPUT);
		be->ops->attention_masked(be, m->a, D, m->q, D, m->k, D, m->v, D, n, m->cfg.heads, (int)hd,
					  1.0f / sqrtf((float)hd), NULL, 1);
		be->ops->linear(be, L->o, m->a, D, n, m->x, D, PD_LIN_ACCUMULATE);
		be->ops->layernorm(be, m->h, D, m->x, D, n, D, L->ln2_w, L->ln2_b, m->cfg.eps);
		be->ops->linear(be, L->fc1, m->h, D, n, m->f, I, 0);
		be->ops->quick_gelu(be, m->f, m->f, (size_t)(n * I));
		be->ops->linear(be, L->fc2, m->f, I, n, m->x, D, PD_LIN_ACCUMULATE);
		if (pd_backend_check(be))
			goto out;
		if (dump) {
			snprintf(name, sizeof(name), "clip.hidden_states.%d", l + 1);
			pd_clip_dump(m, dump, name, m->x, n, D);
		}
	}
	be->ops->layernorm(be, m->h, D, m->x, D, n, D, m->fln_w, m->fln_b, m->cfg.eps);
	if (dump)
		pd_clip_dump(m, dump, "clip.last_hidden_state", m->h, n, D);
	/* pooling (902-922): with the config's eos_token_id 2 the first
	 * largest id, otherwise the first eos_token_id */
	for (int i = 0; i < n; i++) {
		if (m->cfg.eos_token_id == 2 ? ids[i] > ids[eos] : ids[i] == m->cfg.eos_token_id) {
			eos = i;
			if (m->cfg.eos_token_id != 2)
				break;
		}
	}
	be->ops->download(be, host, m->h, (size_t)(n * D));
	if (pd_backend_check(be))
		goto out;
	if (last)
		memcpy(last, host, (size_t)(n * D) * sizeof(float));
	if (pooled)
		memcpy(pooled, host + (int64_t)eos * D, (size_t)D * sizeof(float));
	if (dump) {
		int64_t shape[2] = { 1, D }, one = 1;
		float e = (float)eos;

		dump->fn(dump->ctx, "clip.pooler_output", -1, host + (int64_t)eos * D, 2, shape);
		dump->fn(dump->ctx, "clip.eos_index", -1, &e, 1, &one);
	}
	rc = 0;
out:
	free(host);
	return rc;
}
