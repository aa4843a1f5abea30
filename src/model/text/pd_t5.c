/*
 * pd_t5.c - the T5 v1.1 encoder (transformers v4.43.4 modeling_t5.py; line
 * numbers in tests/golden/text-encoders-tiny/README.md).
 */
#include "pd_config.h"
#include "pd_loader.h"
#include "pd_t5.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_t5_block {
	float *ln0, *ln1;               /* the two RMSNorm weights */
	struct pd_linear *q, *k, *v, *o; /* self-attention, no bias */
	struct pd_linear *wi0, *wi1, *wo; /* gated feed-forward, no bias */
};

struct pd_t5 {
	struct pd_t5_config cfg;
	struct pd_backend *be;          /* compute (borrowed) */
	struct pd_st *st;               /* the weights, open for token rows */
	char emb_name[256];             /* shared.weight or encoder.embed_tokens.weight */
	float *rel;                     /* host [n_rel][buckets, heads] relative_attention_bias tables */
	int n_rel;                      /* 1: block 0's, shared (T5); layers: one per block (UMT5) */
	struct pd_t5_block *block;      /* [layers] */
	float *fln;                     /* final_layer_norm */
	int cap;                        /* tokens the activations hold */
	float *x, *h, *q, *k, *v, *a, *g, *u, *bias; /* activations; bias [heads, n, n] */
};

const struct pd_t5_config *pd_t5_get_config(const struct pd_t5 *m)
{
	return &m->cfg;
}

int pd_t5_bucket(int r, int buckets, int max_distance)
{
	/* _relative_position_bucket (381-426), bidirectional: half the
	 * buckets for keys after the query; distances below half of a half
	 * exactly, the rest logarithmically up to max_distance, in float32 */
	int nb = buckets / 2, exact = nb / 2, b = r > 0 ? nb : 0, n = r < 0 ? -r : r;

	if (n < exact)
		return b + n;
	{
		float t = logf((float)n / (float)exact) / (float)log((double)max_distance / exact) * (float)(nb - exact);
		int large = exact + (int)t;

		return b + (large < nb - 1 ? large : nb - 1);
	}
}

static int pd_t5_config_parse(struct pd_t5_config *c, const struct pd_config *jp)
{
	struct pd_config j = *jp;
	const char *ff = NULL;
	int64_t v;
	double d;
	int rc = -1;

#define GETI(key, def, lo, hi, field) \
	do { \
		if (pd_config_int(&j, key, def < 0, def, lo, hi, &v)) \
			goto out; \
		c->field = (int)v; \
	} while (0)
	GETI("d_model", -1, 1, 1 << 16, d_model);
	GETI("d_kv", -1, 1, 1 << 12, d_kv);
	GETI("d_ff", -1, 1, 1 << 18, d_ff);
	GETI("num_heads", -1, 1, 1 << 10, heads);
	GETI("num_layers", -1, 0, 1 << 10, layers);
	GETI("vocab_size", -1, 1, 1 << 24, vocab);
	GETI("relative_attention_num_buckets", 32, 2, 1 << 12, buckets);
	GETI("relative_attention_max_distance", 128, 2, 1 << 20, max_distance);
#undef GETI
	if (pd_config_double(&j, "layer_norm_epsilon", 0, 1e-6, &d) ||
	    pd_config_string(&j, "feed_forward_proj", 0, "gated-gelu", &ff))
		goto out;
	c->eps = (float)d;
	if (strcmp(ff, "gated-gelu") != 0) {
		pd_errorf("%s: feed_forward_proj \"%s\" is not supported (T5 v1.1, FLUX.1's, uses gated-gelu)", j.path, ff);
		goto out;
	}
	rc = 0;
out:
	return rc;
}

/* DIR/config.json, or the "config" metadata of a single file ST. */
static int pd_t5_config_read(struct pd_t5_config *c, const char *dir, const struct pd_st *st)
{
	struct pd_config j;
	int rc;

	if (dir ? pd_config_load_in(&j, dir, "config.json", "T5 encoder")
		: pd_config_parse(&j, pd_st_meta(st, "config"), st->path))
		return -1;
	rc = pd_t5_config_parse(c, &j);
	pd_config_free(&j);
	return rc;
}

/* Sizes from the tensors of a single file (relative positions up to 128
 * and eps 1e-6, as T5 v1.1 sets them). */
static int pd_t5_config_infer(struct pd_t5_config *c, const struct pd_st *st, const char *pre, const char *emb)
{
	const struct pd_st_tensor *t = pd_st_get(st, emb);
	char name[300];

	c->vocab = (int)t->shape[0];
	c->d_model = (int)t->shape[1];
	snprintf(name, sizeof(name), "%sencoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no %s", st->path, name);
	c->buckets = (int)t->shape[0];
	c->heads = (int)t->shape[1];
	snprintf(name, sizeof(name), "%sencoder.block.0.layer.0.SelfAttention.q.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2 || t->shape[0] % c->heads)
		return pd_errorf("%s: no usable %s", st->path, name);
	c->d_kv = (int)(t->shape[0] / c->heads);
	snprintf(name, sizeof(name), "%sencoder.block.0.layer.1.DenseReluDense.wi_0.weight", pre);
	t = pd_st_get(st, name);
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no %s (a gated-GELU T5 v1.1 encoder is expected)", st->path, name);
	c->d_ff = (int)t->shape[0];
	for (c->layers = 0;; c->layers++) {
		snprintf(name, sizeof(name), "%sencoder.block.%d.layer.0.SelfAttention.q.weight", pre, c->layers);
		if (!pd_st_get(st, name))
			break;
	}
	c->max_distance = 128;
	c->eps = 1e-6f;
	return 0;
}

int pd_t5_load(struct pd_t5 **out, const char *path, struct pd_backend *be)
{
	struct pd_t5 *m = pd_calloc(1, sizeof(*m), "the T5 encoder");
	struct pd_loader ld;
	const struct pd_st_tensor *t;
	char pre[200];
	int64_t D, A, F;

	*out = NULL;
	if (!m)
		return -1;
	m->be = be;
	if (pd_st_open_path(&m->st, path, "model"))
		goto fail;
	/* the prefix is whatever stands before "encoder.final_layer_norm.weight" */
	t = pd_st_find_suffix(m->st, "encoder.final_layer_norm.weight");
	if (!t) {
		pd_errorf("%s: no T5 encoder in it (no encoder.final_layer_norm.weight)", m->st->path);
		goto fail;
	}
	snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("encoder.final_layer_norm.weight")), t->name);
	/* the embedding is saved once, under either name */
	snprintf(m->emb_name, sizeof(m->emb_name), "%sshared.weight", pre);
	if (!pd_st_get(m->st, m->emb_name))
		snprintf(m->emb_name, sizeof(m->emb_name), "%sencoder.embed_tokens.weight", pre);
	t = pd_st_get(m->st, m->emb_name);
	if (!t || t->ndim != 2) {
		pd_errorf("%s: no %sshared.weight or %sencoder.embed_tokens.weight", m->st->path, pre, pre);
		goto fail;
	}
	if (pd_is_dir(path) ? pd_t5_config_read(&m->cfg, path, NULL)
	    : pd_st_meta(m->st, "config") ? pd_t5_config_read(&m->cfg, NULL, m->st)
					  : pd_t5_config_infer(&m->cfg, m->st, pre, m->emb_name))
		goto fail;
	D = m->cfg.d_model;
	A = (int64_t)m->cfg.heads * m->cfg.d_kv;
	F = m->cfg.d_ff;
	ld = (struct pd_loader){ .st = m->st, .be = be };
	m->block = pd_calloc((size_t)m->cfg.layers + 1, sizeof(*m->block), "the T5 encoder");
	/* UMT5 gives every block its own table (modeling_umt5.py:322), T5
	 * block 0 only */
	{
		char name[300];

		snprintf(name, sizeof(name), "%sencoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight", pre);
		m->n_rel = m->cfg.layers > 1 && pd_st_get(m->st, name) ? m->cfg.layers : 1;
	}
	m->rel = pd_malloc((size_t)m->n_rel * (size_t)m->cfg.buckets * (size_t)m->cfg.heads * sizeof(float),
			   "T5 position bias");
	if (!m->block || !m->rel)
		goto fail;
	for (int i = 0; i < m->n_rel && i < m->cfg.layers; i++) {
		int64_t shape[2] = { m->cfg.buckets, m->cfg.heads };
		char name[300];

		snprintf(name, sizeof(name), "%sencoder.block.%d.layer.0.SelfAttention.relative_attention_bias.weight", pre, i);
		if (pd_st_require(m->st, name, 2, shape, &t) ||
		    pd_st_read_f32(t, 0, (size_t)(shape[0] * shape[1]), m->rel + (size_t)i * (size_t)(shape[0] * shape[1])))
			goto fail;
	}
	for (int i = 0; i < m->cfg.layers; i++) {
		struct pd_t5_block *B = &m->block[i];
		const char *f = "%sencoder.block.%d.layer.%s";

		B->ln0 = pd_loader_vector(&ld, D, "%sencoder.block.%d.layer.0.layer_norm.weight", pre, i);
		B->q = pd_loader_linear_nobias(&ld, A, D, f, pre, i, "0.SelfAttention.q");
		B->k = pd_loader_linear_nobias(&ld, A, D, f, pre, i, "0.SelfAttention.k");
		B->v = pd_loader_linear_nobias(&ld, A, D, f, pre, i, "0.SelfAttention.v");
		B->o = pd_loader_linear_nobias(&ld, D, A, f, pre, i, "0.SelfAttention.o");
		B->ln1 = pd_loader_vector(&ld, D, "%sencoder.block.%d.layer.1.layer_norm.weight", pre, i);
		B->wi0 = pd_loader_linear_nobias(&ld, F, D, f, pre, i, "1.DenseReluDense.wi_0");
		B->wi1 = pd_loader_linear_nobias(&ld, F, D, f, pre, i, "1.DenseReluDense.wi_1");
		B->wo = pd_loader_linear_nobias(&ld, D, F, f, pre, i, "1.DenseReluDense.wo");
	}
	m->fln = pd_loader_vector(&ld, D, "%sencoder.final_layer_norm.weight", pre);
	if (ld.failed)
		goto fail;
	*out = m;
	return 0;
fail:
	pd_t5_free(m);
	return -1;
}

static void pd_t5_free_acts(struct pd_t5 *m)
{
	float **bufs[9] = { &m->x, &m->h, &m->q, &m->k, &m->v, &m->a, &m->g, &m->u, &m->bias };

	for (int i = 0; i < 9; i++) {
		m->be->ops->free(m->be, *bufs[i]);
		*bufs[i] = NULL;
	}
	m->cap = 0;
}

void pd_t5_free(struct pd_t5 *m)
{
	struct pd_backend *be;

	if (!m)
		return;
	be = m->be;
	for (int i = 0; m->block && i < m->cfg.layers; i++) {
		struct pd_t5_block *B = &m->block[i];
		struct pd_linear *lin[7] = { B->q, B->k, B->v, B->o, B->wi0, B->wi1, B->wo };

		for (int j = 0; j < 7; j++)
			if (lin[j])
				be->ops->linear_free(be, lin[j]);
		be->ops->free(be, B->ln0);
		be->ops->free(be, B->ln1);
	}
	free(m->block);
	be->ops->free(be, m->fln);
	pd_t5_free_acts(m);
	free(m->rel);
	if (m->st)
		pd_st_close(m->st);
	free(m);
}

static int pd_t5_reserve(struct pd_t5 *m, int n)
{
	struct pd_backend *be = m->be;
	size_t D = (size_t)m->cfg.d_model, A = (size_t)m->cfg.heads * (size_t)m->cfg.d_kv, F = (size_t)m->cfg.d_ff;

	if (n <= m->cap)
		return 0;
	pd_t5_free_acts(m);
	m->x = pd_backend_alloc(be, (size_t)n * D, "T5 activations");
	m->h = pd_backend_alloc(be, (size_t)n * D, "T5 activations");
	m->q = pd_backend_alloc(be, (size_t)n * A, "T5 activations");
	m->k = pd_backend_alloc(be, (size_t)n * A, "T5 activations");
	m->v = pd_backend_alloc(be, (size_t)n * A, "T5 activations");
	m->a = pd_backend_alloc(be, (size_t)n * A, "T5 activations");
	m->g = pd_backend_alloc(be, (size_t)n * F, "T5 activations");
	m->u = pd_backend_alloc(be, (size_t)n * F, "T5 activations");
	m->bias = pd_backend_alloc(be, (size_t)n * (size_t)n * (size_t)m->cfg.heads, "T5 position bias");
	if (pd_backend_check(be))
		return -1;
	m->cap = n;
	return 0;
}

static void pd_t5_dump(struct pd_t5 *m, const struct pd_dump *dump, const char *name, const float *dev, int ndim,
		       const int64_t *shape, int64_t count)
{
	float *host = malloc((size_t)(count + 1) * sizeof(float));

	if (!host)
		return;
	m->be->ops->download(m->be, host, dev, (size_t)count);
	if (!pd_backend_check(m->be))
		dump->fn(dump->ctx, name, -1, host, ndim, shape);
	free(host);
}

int pd_t5_forward(struct pd_t5 *m, const int64_t *ids, int n, float *out, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_loader ld = { .st = m->st, .be = be };
	int64_t D = m->cfg.d_model, A = (int64_t)m->cfg.heads * m->cfg.d_kv, F = m->cfg.d_ff, H = m->cfg.heads;
	int64_t act_shape[3] = { 1, n, D };
	float *host = NULL;
	int rc = -1;
	char name[64];

	if (n < 1)
		return pd_errorf("T5: no tokens");
	if (pd_t5_reserve(m, n))
		return -1;
	host = pd_malloc((size_t)(n * D > H * n * n ? n * D : H * n * n) * sizeof(float), "T5 inputs");
	if (!host)
		return -1;
	/* embeddings, unscaled (1012) */
	if (pd_loader_rows(&ld, m->emb_name, m->cfg.vocab, D, ids, n, host))
		goto out;
	be->ops->upload(be, m->x, host, (size_t)(n * D));
	if (dump)
		pd_t5_dump(m, dump, "t5.embeddings", m->x, 3, act_shape, n * D);
	for (int l = 0; l < m->cfg.layers; l++) {
		struct pd_t5_block *B = &m->block[l];

		/* the relative position bias bias[h, i, j] = table[bucket(j -
		 * i), h]: block 0's for every block (T5, 1130), or each
		 * block's own (UMT5) */
		if (l == 0 || m->n_rel > 1) {
			const float *rel = m->rel + (size_t)l * (size_t)m->cfg.buckets * (size_t)H;

			for (int i = 0; i < n; i++)
				for (int j = 0; j < n; j++) {
					int b = pd_t5_bucket(j - i, m->cfg.buckets, m->cfg.max_distance);

					for (int64_t h = 0; h < H; h++)
						host[(h * n + i) * n + j] = rel[(int64_t)b * H + h];
				}
			be->ops->upload(be, m->bias, host, (size_t)(H * n * n));
			if (dump && l == 0) {
				int64_t shape[4] = { 1, H, n, n };

				pd_t5_dump(m, dump, "t5.position_bias", m->bias, 4, shape, H * n * n);
			}
		}

		/* x += o(Attn(RMS x)) with no 1/sqrt(d) (523) and the bias (552) */
		be->ops->copy2d(be, m->h, D, m->x, D, n, D);
		be->ops->rmsnorm_heads(be, m->h, D, n, 1, (int)D, B->ln0, m->cfg.eps);
		be->ops->linear(be, B->q, m->h, D, n, m->q, A, 0);
		be->ops->linear(be, B->k, m->h, D, n, m->k, A, PD_LIN_SAME_INPUT);
		be->ops->linear(be, B->v, m->h, D, n, m->v, A, PD_LIN_SAME_INPUT);
		be->ops->attention_masked(be, m->a, A, m->q, A, m->k, A, m->v, A, n, (int)H, m->cfg.d_kv, 1.0f, m->bias, 0);
		be->ops->linear(be, B->o, m->a, A, n, m->x, D, PD_LIN_ACCUMULATE);
		/* x += wo(gelu_new(wi_0 RMS x) * wi_1 RMS x) (293-318) */
		be->ops->copy2d(be, m->h, D, m->x, D, n, D);
		be->ops->rmsnorm_heads(be, m->h, D, n, 1, (int)D, B->ln1, m->cfg.eps);
		be->ops->linear(be, B->wi0, m->h, D, n, m->g, F, PD_LIN_GELU_TANH);
		be->ops->linear(be, B->wi1, m->h, D, n, m->u, F, PD_LIN_SAME_INPUT);
		be->ops->mul(be, m->g, m->g, m->u, (size_t)(n * F));
		be->ops->linear(be, B->wo, m->g, F, n, m->x, D, PD_LIN_ACCUMULATE);
		if (pd_backend_check(be))
			goto out;
		if (dump) {
			snprintf(name, sizeof(name), "t5.block.%d", l);
			pd_t5_dump(m, dump, name, m->x, 3, act_shape, n * D);
		}
	}
	be->ops->rmsnorm_heads(be, m->x, D, n, 1, (int)D, m->fln, m->cfg.eps);
	if (dump)
		pd_t5_dump(m, dump, "t5.last_hidden_state", m->x, 3, act_shape, n * D);
	be->ops->download(be, out, m->x, (size_t)(n * D));
	rc = pd_backend_check(be);
out:
	free(host);
	return rc;
}
