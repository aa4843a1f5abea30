/*
 * pd_llm.c - a decoder-only language model as a text encoder (transformers
 * v4.43.4 modeling_qwen2.py: Qwen2RMSNorm 62-77, Qwen2RotaryEmbedding
 * 81-123, rotate_half and apply_rotary_pos_emb 127-161, Qwen2MLP 165-177,
 * repeat_kv 181-190, Qwen2Attention 193-300, Qwen2DecoderLayer 624-690,
 * Qwen2Model.forward's final norm 935).
 */
#include "pd_config.h"
#include "pd_llm.h"
#include "pd_loader.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_llm_layer {
	float *ln_in, *ln_post;         /* input_layernorm, post_attention_layernorm */
	struct pd_linear *q, *k, *v;    /* with biases */
	struct pd_linear *o;            /* no bias */
	struct pd_linear *gate, *up, *down; /* the MLP, no biases */
};

struct pd_llm {
	struct pd_llm_config cfg;
	struct pd_backend *be;          /* compute (borrowed) */
	struct pd_st *st;               /* the weights, open for token rows */
	char pre[128];                  /* what stands before embed_tokens.weight ("model.", ...) */
	struct pd_llm_layer *layer;     /* [layers] */
	float *norm;                    /* the final norm's weight */
	int cap;                        /* tokens the activations hold */
	/* activations: x the residual stream, h its normed copy, q k v a
	 * attention (k and v widened to every head), t the rotation's
	 * scratch, g u the MLP; cos sin [n, heads x head_dim] the rotation */
	float *x, *h, *q, *k, *v, *kq, *vq, *a, *t, *g, *u, *cos, *sin;
};

const struct pd_llm_config *pd_llm_get_config(const struct pd_llm *m)
{
	return &m->cfg;
}

/* Sizes a forward pass can run with, whichever way they were read (a
 * config, a file's shapes, GGUF metadata). */
static int pd_llm_config_check(const struct pd_llm_config *c, const char *path)
{
	if (c->hidden < 1 || c->layers < 0 || c->layers > 1024 || c->intermediate < 1 || c->heads < 1 || c->kv_heads < 1 ||
	    c->head_dim < 2 || c->head_dim % 2 || c->heads % c->kv_heads || c->vocab < 1 || !(c->theta > 1) || !(c->eps > 0))
		return pd_errorf("%s: its sizes do not make a language model (%d wide, %d heads of %d over %d key/value "
				 "heads, %d layers, %d tokens)", path, c->hidden, c->heads, c->head_dim, c->kv_heads, c->layers,
				 c->vocab);
	return 0;
}

/* The sizes from a config.json: Qwen2's own keys, or Qwen2.5-VL's, whose
 * newer files keep the language model's under text_config. */
static int pd_llm_config_parse(struct pd_llm_config *c, const struct pd_config *root)
{
	struct pd_config tc = *root;
	int64_t v;
	double d;

	if (!pd_config_has(root, "hidden_size") && pd_config_has(root, "text_config") &&
	    pd_config_object(root, "text_config", &tc))
		return -1;
#define GETI(key, req, def, lo, hi, field) \
	do { \
		if (pd_config_int(&tc, key, req, def, lo, hi, &v)) \
			return -1; \
		c->field = (int)v; \
	} while (0)
	GETI("hidden_size", 1, 0, 1, 1 << 16, hidden);
	GETI("intermediate_size", 1, 0, 1, 1 << 18, intermediate);
	GETI("num_hidden_layers", 1, 0, 0, 1 << 10, layers);
	GETI("num_attention_heads", 1, 0, 1, 1 << 10, heads);
	GETI("num_key_value_heads", 0, c->heads, 1, 1 << 10, kv_heads);
	GETI("head_dim", 0, c->hidden / c->heads, 2, 1 << 12, head_dim);
	GETI("vocab_size", 1, 0, 1, 1 << 24, vocab);
#undef GETI
	if (c->heads % c->kv_heads || c->head_dim % 2)
		return pd_errorf("%s: %d heads over %d key/value heads of width %d do not group", root->path, c->heads,
				 c->kv_heads, c->head_dim);
	if (pd_config_double(&tc, "rms_norm_eps", 0, 1e-6, &d))
		return -1;
	c->eps = (float)d;
	if (pd_config_double(&tc, "rope_theta", 0, 10000.0, &c->theta))
		return -1;
	if (!(c->theta > 1))
		return pd_errorf("%s: rope_theta must be above 1", root->path);
	return 0;
}

/* The sizes of a single file without a config, from its tensors' shapes
 * (eps 1e-6 and theta 1e6, Qwen2.5's). */
static int pd_llm_config_infer(struct pd_llm_config *c, const struct pd_st *st, const char *pre)
{
	const struct pd_st_tensor *t;
	char name[300];

	snprintf(name, sizeof(name), "%sembed_tokens.weight", pre);
	t = pd_st_get(st, name);
	c->vocab = (int)t->shape[0];
	c->hidden = (int)t->shape[1];
	snprintf(name, sizeof(name), "%slayers.0.mlp.gate_proj.weight", pre);
	if (!(t = pd_st_get(st, name)) || t->ndim != 2)
		return pd_errorf("%s: no %s", st->path, name);
	c->intermediate = (int)t->shape[0];
	/* Qwen2's head width is 128 at every size; the heads follow from it */
	c->head_dim = 128;
	while (c->head_dim > 2 && c->hidden % c->head_dim)
		c->head_dim /= 2;
	c->heads = c->hidden / c->head_dim;
	snprintf(name, sizeof(name), "%slayers.0.self_attn.k_proj.weight", pre);
	if (!(t = pd_st_get(st, name)) || t->ndim != 2 || t->shape[0] % c->head_dim)
		return pd_errorf("%s: no usable %s", st->path, name);
	c->kv_heads = (int)(t->shape[0] / c->head_dim);
	for (c->layers = 0;; c->layers++) {
		snprintf(name, sizeof(name), "%slayers.%d.self_attn.q_proj.weight", pre, c->layers);
		if (!pd_st_get(st, name))
			break;
	}
	c->eps = 1e-6f;
	c->theta = 1e6;
	return 0;
}

/* llama.cpp's names of a language model's tensors (its GGUF files:
 * convert_hf_to_gguf.py's Qwen2 mapping; q and k are not permuted for
 * Qwen2's rotate-half RoPE) and transformers' */
static const char *const pd_llm_gguf_names[][2] = {
	{ "attn_norm.weight", "input_layernorm.weight" },
	{ "attn_q.weight", "self_attn.q_proj.weight" },
	{ "attn_q.bias", "self_attn.q_proj.bias" },
	{ "attn_k.weight", "self_attn.k_proj.weight" },
	{ "attn_k.bias", "self_attn.k_proj.bias" },
	{ "attn_v.weight", "self_attn.v_proj.weight" },
	{ "attn_v.bias", "self_attn.v_proj.bias" },
	{ "attn_output.weight", "self_attn.o_proj.weight" },
	{ "ffn_norm.weight", "post_attention_layernorm.weight" },
	{ "ffn_gate.weight", "mlp.gate_proj.weight" },
	{ "ffn_up.weight", "mlp.up_proj.weight" },
	{ "ffn_down.weight", "mlp.down_proj.weight" },
};

/* A GGUF file in llama.cpp's names (token_embd, blk.N.attn_q, ...,
 * output_norm) as a view under transformers' (model.embed_tokens, ...), and
 * its sizes from its metadata (ARCH.embedding_length, ...). */
static int pd_llm_gguf_view(struct pd_llm *m)
{
	struct pd_st *view = NULL, *base = m->st;
	const char *arch = pd_st_meta(base, "general.architecture");
	struct pd_llm_config *c = &m->cfg;
	char key[128];
	int rc = 0;

	/* llama.cpp's converter permutes q and k for llama's interleaved
	 * RoPE; Qwen2's files keep transformers' order, which is what this
	 * model computes */
	if (arch && strcmp(arch, "qwen2") != 0 && strcmp(arch, "qwen2vl") != 0)
		return pd_errorf("%s: a GGUF language model of architecture %s; pdit reads Qwen2's (qwen2, qwen2vl)",
				 base->path, arch);
	c->vl = arch && !strcmp(arch, "qwen2vl");
#define PD_META(suffix) (snprintf(key, sizeof(key), "%s.%s", arch, suffix), pd_st_meta(base, key))
	if (!arch || !PD_META("embedding_length") || !PD_META("block_count") || !PD_META("feed_forward_length") ||
	    !PD_META("attention.head_count"))
		return pd_errorf("%s: a GGUF file in llama.cpp's names without its sizes (general.architecture and its "
				 "embedding_length, block_count, feed_forward_length, attention.head_count)", base->path);
	c->hidden = atoi(PD_META("embedding_length"));
	c->layers = atoi(PD_META("block_count"));
	c->intermediate = atoi(PD_META("feed_forward_length"));
	c->heads = atoi(PD_META("attention.head_count"));
	c->kv_heads = PD_META("attention.head_count_kv") ? atoi(PD_META("attention.head_count_kv")) : c->heads;
	c->eps = PD_META("attention.layer_norm_rms_epsilon") ? (float)atof(PD_META("attention.layer_norm_rms_epsilon")) : 1e-6f;
	c->theta = PD_META("rope.freq_base") ? atof(PD_META("rope.freq_base")) : 1e6;
#undef PD_META
	if (c->hidden < 1 || c->layers < 0 || c->layers > 1024 || c->intermediate < 1 || c->heads < 1 || c->kv_heads < 1 ||
	    c->hidden % c->heads || c->heads % c->kv_heads || (c->hidden / c->heads) % 2 || !(c->theta > 1) || !(c->eps > 0))
		return pd_errorf("%s: its sizes do not make a language model (%d wide, %d heads over %d, %d layers)", base->path,
				 c->hidden, c->heads, c->kv_heads, c->layers);
	c->head_dim = c->hidden / c->heads;
	if (pd_st_view_new(&view, base))
		return -1;
	m->st = view;
	for (int i = 0; i < base->n_tensors && !rc; i++) {
		const struct pd_st_tensor *t = base->sorted[i];
		char name[160] = "";
		int layer, off = 0;

		if (!strcmp(t->name, "token_embd.weight"))
			snprintf(name, sizeof(name), "model.embed_tokens.weight");
		else if (!strcmp(t->name, "output_norm.weight"))
			snprintf(name, sizeof(name), "model.norm.weight");
		else if (sscanf(t->name, "blk.%d.%n", &layer, &off) == 1 && off > 0)
			for (size_t k = 0; k < sizeof(pd_llm_gguf_names) / sizeof(pd_llm_gguf_names[0]); k++)
				if (!strcmp(t->name + off, pd_llm_gguf_names[k][0]))
					snprintf(name, sizeof(name), "model.layers.%d.%s", layer, pd_llm_gguf_names[k][1]);
		/* (output.weight, the head, is never read) */
		if (name[0] && t->ndim)
			rc = pd_st_view_add(view, name, t, 0, t->shape[0], 0, t->ndim, NULL);
	}
	if (!rc && pd_st_view_done(view))
		rc = -1;
	if (!rc && pd_st_get(view, "model.embed_tokens.weight"))
		c->vocab = (int)pd_st_get(view, "model.embed_tokens.weight")->shape[0];
	return rc;
}

/* PATH's weights, the decoder's prefix in them and its sizes into M. */
static int pd_llm_find(struct pd_llm *m, const char *path)
{
	const struct pd_st_tensor *t = NULL;
	static const char *const pres[] = { "model.language_model.", "language_model.model.", "model.", "" };

	if (pd_st_open_path(&m->st, path, "model"))
		return -1;
	if (pd_st_get(m->st, "token_embd.weight") && pd_llm_gguf_view(m))
		return -1;
	/* the decoder's prefix: where its first layer and token table are */
	for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]) && !t; i++) {
		char name[256];

		snprintf(name, sizeof(name), "%slayers.0.self_attn.q_proj.weight", pres[i]);
		if (pd_st_get(m->st, name)) {
			snprintf(m->pre, sizeof(m->pre), "%s", pres[i]);
			snprintf(name, sizeof(name), "%sembed_tokens.weight", pres[i]);
			t = pd_st_get(m->st, name);
		}
	}
	if (!t || t->ndim != 2)
		return pd_errorf("%s: no decoder-only language model in it (no model.embed_tokens.weight beside "
				 "model.layers.0.self_attn.q_proj.weight)", m->st->path);
	m->cfg.vl |= strcmp(m->pre, "model.") != 0 && m->pre[0];
	if (m->cfg.hidden) {
		/* (a GGUF file's metadata gave the sizes) */
	} else if (pd_is_dir(path)) {
		struct pd_config j;
		const char *type = "";
		int rc;

		if (pd_config_load_in(&j, path, "config.json", "language model"))
			return -1;
		rc = pd_llm_config_parse(&m->cfg, &j) || pd_config_string(&j, "model_type", 0, "", &type);
		m->cfg.vl |= !rc && strstr(type, "_vl") != NULL;
		pd_config_free(&j);
		if (rc)
			return -1;
	} else {
		/* one file: its "config" metadata entry, else its shapes */
		struct pd_config j;
		int has = pd_st_meta_config(m->st, &j), rc;

		rc = has < 0 ? -1 : has ? pd_llm_config_parse(&m->cfg, &j) : pd_llm_config_infer(&m->cfg, m->st, m->pre);
		if (has > 0)
			pd_config_free(&j);
		if (rc)
			return -1;
	}
	for (int i = 0; i < m->st->n_tensors && !m->cfg.vl; i++)
		m->cfg.vl = strncmp(m->st->sorted[i]->name, "visual.", 7) == 0;
	if (pd_llm_config_check(&m->cfg, m->st->path))
		return -1;
	if (t->shape[0] != m->cfg.vocab || t->shape[1] != m->cfg.hidden)
		return pd_errorf("%s: %sembed_tokens.weight is [%lld, %lld], the config says [%d, %d]", m->st->path,
				 m->pre, (long long)t->shape[0], (long long)t->shape[1], m->cfg.vocab, m->cfg.hidden);
	return 0;
}

int pd_llm_open_weights(struct pd_llm **out, const char *path)
{
	struct pd_llm *m = pd_calloc(1, sizeof(*m), "the language model");

	*out = NULL;
	if (!m)
		return -1;
	if (pd_llm_find(m, path)) {
		pd_llm_free(m);
		return -1;
	}
	*out = m;
	return 0;
}

int pd_llm_is(const char *path)
{
	struct pd_st *st = NULL;
	static const char *const pres[] = { "model.language_model.", "language_model.model.", "model.", "" };
	int found = 0;

	/* (its message, when it is not one, is replaced by the caller's next) */
	if (pd_st_open_path(&st, path, "model"))
		return 0;
	found = pd_st_get(st, "token_embd.weight") && pd_st_get(st, "blk.0.attn_q.weight");
	for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]) && !found; i++) {
		char name[256];

		snprintf(name, sizeof(name), "%slayers.0.self_attn.q_proj.weight", pres[i]);
		found = pd_st_get(st, name) != NULL;
	}
	pd_st_close(st);
	return found;
}

const struct pd_st *pd_llm_weights(const struct pd_llm *m, const char **pre)
{
	*pre = m->pre;
	return m->st;
}

int pd_llm_gguf_name(const char *name, const char *pre, char *out, size_t len)
{
	size_t n = strlen(pre);
	int layer, off = 0;

	if (strncmp(name, pre, n) != 0)
		return 0;
	name += n;
	if (!strcmp(name, "embed_tokens.weight"))
		return snprintf(out, len, "token_embd.weight") > 0;
	if (!strcmp(name, "norm.weight"))
		return snprintf(out, len, "output_norm.weight") > 0;
	if (sscanf(name, "layers.%d.%n", &layer, &off) != 1 || off == 0)
		return 0;
	for (size_t k = 0; k < sizeof(pd_llm_gguf_names) / sizeof(pd_llm_gguf_names[0]); k++)
		if (!strcmp(name + off, pd_llm_gguf_names[k][1]))
			return snprintf(out, len, "blk.%d.%s", layer, pd_llm_gguf_names[k][0]) > 0;
	return 0;
}

int pd_llm_load(struct pd_llm **out, const char *path, struct pd_backend *be)
{
	struct pd_llm *m;
	struct pd_loader ld;
	int64_t D, A, K, F;

	*out = NULL;
	if (pd_llm_open_weights(&m, path))
		return -1;
	m->be = be;
	D = m->cfg.hidden;
	A = (int64_t)m->cfg.heads * m->cfg.head_dim;
	K = (int64_t)m->cfg.kv_heads * m->cfg.head_dim;
	F = m->cfg.intermediate;
	ld = (struct pd_loader){ .st = m->st, .be = be };
	m->layer = pd_calloc((size_t)m->cfg.layers + 1, sizeof(*m->layer), "the language model");
	if (!m->layer)
		goto fail;
	for (int i = 0; i < m->cfg.layers && !ld.failed; i++) {
		struct pd_llm_layer *L = &m->layer[i];
		const char *f = "%slayers.%d.%s";

		L->ln_in = pd_loader_vector(&ld, D, "%slayers.%d.input_layernorm.weight", m->pre, i);
		L->q = pd_loader_linear(&ld, A, D, f, m->pre, i, "self_attn.q_proj");
		L->k = pd_loader_linear(&ld, K, D, f, m->pre, i, "self_attn.k_proj");
		L->v = pd_loader_linear(&ld, K, D, f, m->pre, i, "self_attn.v_proj");
		L->o = pd_loader_linear_nobias(&ld, D, A, f, m->pre, i, "self_attn.o_proj");
		L->ln_post = pd_loader_vector(&ld, D, "%slayers.%d.post_attention_layernorm.weight", m->pre, i);
		L->gate = pd_loader_linear_nobias(&ld, F, D, f, m->pre, i, "mlp.gate_proj");
		L->up = pd_loader_linear_nobias(&ld, F, D, f, m->pre, i, "mlp.up_proj");
		L->down = pd_loader_linear_nobias(&ld, D, F, f, m->pre, i, "mlp.down_proj");
	}
	m->norm = pd_loader_vector(&ld, D, "%snorm.weight", m->pre);
	if (ld.failed)
		goto fail;
	*out = m;
	return 0;
fail:
	pd_llm_free(m);
	return -1;
}

static void pd_llm_free_acts(struct pd_llm *m)
{
	float **bufs[] = { &m->x, &m->h, &m->q, &m->k, &m->v, &m->kq, &m->vq, &m->a, &m->t, &m->g, &m->u, &m->cos, &m->sin };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		m->be->ops->free(m->be, *bufs[i]);
		*bufs[i] = NULL;
	}
	m->cap = 0;
}

void pd_llm_free(struct pd_llm *m)
{
	struct pd_backend *be;

	if (!m)
		return;
	be = m->be;
	/* (pd_llm_open_weights: no backend, nothing on one) */
	for (int i = 0; be && m->layer && i < m->cfg.layers; i++) {
		struct pd_llm_layer *L = &m->layer[i];
		struct pd_linear *lin[7] = { L->q, L->k, L->v, L->o, L->gate, L->up, L->down };

		for (int j = 0; j < 7; j++)
			if (lin[j])
				be->ops->linear_free(be, lin[j]);
		be->ops->free(be, L->ln_in);
		be->ops->free(be, L->ln_post);
	}
	free(m->layer);
	if (be) {
		be->ops->free(be, m->norm);
		pd_llm_free_acts(m);
	}
	if (m->st)
		pd_st_close(m->st);
	free(m);
}

static int pd_llm_reserve(struct pd_llm *m, int n)
{
	struct pd_backend *be = m->be;
	size_t N = (size_t)n, D = (size_t)m->cfg.hidden, A = (size_t)m->cfg.heads * (size_t)m->cfg.head_dim;
	size_t K = (size_t)m->cfg.kv_heads * (size_t)m->cfg.head_dim, F = (size_t)m->cfg.intermediate;
	size_t sizes[] = { N * D, N * D, N * A, N * K, N * K, N * A, N * A, N * A, N * A, N * F, N * F, N * A, N * A };
	float **bufs[] = { &m->x, &m->h, &m->q, &m->k, &m->v, &m->kq, &m->vq, &m->a, &m->t, &m->g, &m->u, &m->cos, &m->sin };

	if (n <= m->cap)
		return 0;
	pd_llm_free_acts(m);
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		*bufs[i] = pd_backend_alloc(be, sizes[i], "language model activations");
	if (pd_backend_check(be))
		return -1;
	m->cap = n;
	return 0;
}

/* The rotation of positions 0..n-1 as Qwen2RotaryEmbedding computes it in
 * float32 (inv_freq = 1 / theta^(2i/d), angle = position x inv_freq), laid
 * out for every head: COS [n, A] and SIN [n, A], SIN's first half of each
 * head negated, so that x cos + rotate_half(x) sin is x * COS + swap(x) * SIN
 * with swap exchanging a head's halves. */
static void pd_llm_rotation(const struct pd_llm_config *c, int n, float *cos_h, float *sin_h)
{
	int hd = c->head_dim, half = hd / 2;
	int64_t A = (int64_t)c->heads * hd;

	for (int p = 0; p < n; p++)
		for (int i = 0; i < half; i++) {
			float inv = 1.0f / powf((float)c->theta, (float)(2 * i) / (float)hd);
			float ang = (float)p * inv, co = cosf(ang), si = sinf(ang);

			for (int h = 0; h < c->heads; h++) {
				int64_t o = (int64_t)p * A + (int64_t)h * hd;

				cos_h[o + i] = cos_h[o + half + i] = co;
				sin_h[o + i] = -si;
				sin_h[o + half + i] = si;
			}
		}
}

/* X [n, heads x hd] rotated in place (apply_rotary_pos_emb), T scratch. */
static void pd_llm_rotate(struct pd_llm *m, float *x, int n)
{
	struct pd_backend *be = m->be;
	int hd = m->cfg.head_dim, half = hd / 2;
	int64_t A = (int64_t)m->cfg.heads * hd;

	for (int h = 0; h < m->cfg.heads; h++) {
		be->ops->copy2d(be, m->t + (int64_t)h * hd, A, x + (int64_t)h * hd + half, A, n, half);
		be->ops->copy2d(be, m->t + (int64_t)h * hd + half, A, x + (int64_t)h * hd, A, n, half);
	}
	be->ops->mul(be, x, x, m->cos, (size_t)(n * A));
	be->ops->mul(be, m->t, m->t, m->sin, (size_t)(n * A));
	be->ops->add(be, x, x, m->t, (size_t)(n * A));
}

static void pd_llm_dump(struct pd_llm *m, const struct pd_dump *dump, const char *name, int n)
{
	int64_t D = m->cfg.hidden, shape[3] = { 1, n, D };
	float *host = malloc((size_t)(n * D + 1) * sizeof(float));

	if (!host)
		return;
	m->be->ops->download(m->be, host, m->x, (size_t)(n * D));
	if (!pd_backend_check(m->be))
		dump->fn(dump->ctx, name, -1, host, 3, shape);
	free(host);
}

int pd_llm_forward(struct pd_llm *m, const int64_t *ids, int n, float *out, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_loader ld = { .st = m->st, .be = be };
	int64_t D = m->cfg.hidden, hd = m->cfg.head_dim, A = m->cfg.heads * hd, K = m->cfg.kv_heads * hd;
	int64_t F = m->cfg.intermediate, group = m->cfg.heads / m->cfg.kv_heads;
	float *host = NULL, *host2 = NULL;
	char name[200];
	int rc = -1;

	if (n < 1)
		return pd_errorf("language model: no tokens");
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
			return pd_errorf("language model: token id %lld is not below its vocabulary's %d", (long long)ids[i],
					 m->cfg.vocab);
	if (pd_llm_reserve(m, n))
		return -1;
	host = pd_malloc((size_t)n * (size_t)(A > D ? A : D) * sizeof(float), "language model inputs");
	host2 = pd_malloc((size_t)n * (size_t)A * sizeof(float), "language model inputs");
	if (!host || !host2)
		goto out;
	pd_llm_rotation(&m->cfg, n, host, host2);
	be->ops->upload(be, m->cos, host, (size_t)(n * A));
	be->ops->upload(be, m->sin, host2, (size_t)(n * A));
	snprintf(name, sizeof(name), "%sembed_tokens.weight", m->pre);
	if (pd_loader_rows(&ld, name, m->cfg.vocab, D, ids, n, host))
		goto out;
	be->ops->upload(be, m->x, host, (size_t)(n * D));
	if (dump)
		pd_llm_dump(m, dump, "llm.embeddings", n);
	for (int l = 0; l < m->cfg.layers; l++) {
		struct pd_llm_layer *L = &m->layer[l];

		/* x += o(Attn(RMS x)): causal, 1/sqrt(head_dim), the key/value
		 * heads shared by groups of query heads (repeat_kv) */
		be->ops->copy2d(be, m->h, D, m->x, D, n, D);
		be->ops->rmsnorm_heads(be, m->h, D, n, 1, (int)D, L->ln_in, m->cfg.eps);
		be->ops->linear(be, L->q, m->h, D, n, m->q, A, 0);
		be->ops->linear(be, L->k, m->h, D, n, m->k, K, PD_LIN_SAME_INPUT);
		be->ops->linear(be, L->v, m->h, D, n, m->v, K, PD_LIN_SAME_INPUT);
		pd_llm_rotate(m, m->q, n);
		for (int64_t h = 0; h < m->cfg.heads; h++) {
			be->ops->copy2d(be, m->kq + h * hd, A, m->k + (h / group) * hd, K, n, hd);
			be->ops->copy2d(be, m->vq + h * hd, A, m->v + (h / group) * hd, K, n, hd);
		}
		pd_llm_rotate(m, m->kq, n);
		be->ops->attention_masked(be, m->a, A, m->q, A, m->kq, A, m->vq, A, n, m->cfg.heads, (int)hd,
					  1.0f / sqrtf((float)hd), NULL, 1);
		be->ops->linear(be, L->o, m->a, A, n, m->x, D, PD_LIN_ACCUMULATE);
		/* x += down(silu(gate RMS x) * up RMS x) */
		be->ops->copy2d(be, m->h, D, m->x, D, n, D);
		be->ops->rmsnorm_heads(be, m->h, D, n, 1, (int)D, L->ln_post, m->cfg.eps);
		be->ops->linear(be, L->gate, m->h, D, n, m->g, F, 0);
		be->ops->silu(be, m->g, m->g, (size_t)(n * F));
		be->ops->linear(be, L->up, m->h, D, n, m->u, F, PD_LIN_SAME_INPUT);
		be->ops->mul(be, m->g, m->g, m->u, (size_t)(n * F));
		be->ops->linear(be, L->down, m->g, F, n, m->x, D, PD_LIN_ACCUMULATE);
		if (pd_backend_check(be))
			goto out;
		if (dump) {
			snprintf(name, sizeof(name), "llm.layer.%d", l);
			pd_llm_dump(m, dump, name, n);
		}
	}
	be->ops->rmsnorm_heads(be, m->x, D, n, 1, (int)D, m->norm, m->cfg.eps);
	be->ops->download(be, out, m->x, (size_t)(n * D));
	rc = pd_backend_check(be);
out:
	free(host);
	free(host2);
	return rc;
}
