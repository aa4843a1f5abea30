/*
 * pd_wan.c - the Wan2.1 transformer forward pass (pd_wan.h). TW:n are the
 * diffusers v0.40 transformer_wan.py lines the golden README cites.
 */
#include "pd_config.h"
#include "pd_loader.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_wan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_wan_block {
	float *table;                   /* [6, D] scale_shift_table (backend) */
	struct pd_linear *q, *k, *v, *o; /* attn1: self-attention */
	float *norm_q, *norm_k;         /* attn1's RMSNorm across heads: this shard's part [W] */
	struct pd_linear *cq, *ck, *cv, *co; /* attn2: cross-attention to the text */
	float *cnorm_q, *cnorm_k;       /* attn2's RMSNorm: this shard's part [W] */
	float *norm2_w, *norm2_b;       /* norm2: affine LayerNorm before attn2 */
	struct pd_linear *ff1, *ff2;    /* ffn.net.0.proj (GELU tanh), ffn.net.2 */
};

struct pd_wan {
	struct pd_dit dit;              /* the interface; must stay first */
	struct pd_wan_config cfg;       /* sizes */
	struct pd_backend *be;          /* compute backend (borrowed) */
	/* Tensor parallel (Megatron's split): q, k, v and the FFN's first
	 * layer keep this shard's output rows, the output projections its
	 * input columns (summed over the shards); embedders, modulation tables
	 * and final layers are whole on every shard that runs them. */
	int64_t W;                      /* attention width held here: heads / shards x head_dim */
	int64_t F;                      /* FFN columns held here: ffn_dim / shards */
	int64_t H;                      /* heads held here */
	struct pd_linear *patch;        /* patch_embedding as a linear layer: C pt ph pw -> D */
	struct pd_linear *time1, *time2, *time_proj; /* time_embedder MLP, time_proj D -> 6D */
	struct pd_linear *text1, *text2; /* text_embedder MLP (GELU tanh) */
	float *out_table;               /* [2, D] final scale_shift_table (backend) */
	struct pd_linear *proj_out;     /* D -> out_channels pt ph pw */
	struct pd_wan_block *blk;       /* [layers] */
	/* activations for cap_img image and cap_txt text rows (backend) */
	int64_t cap_img, cap_txt;
	float *x, *nx, *q, *k, *v, *attn, *proj, *wide, *ctx, *cos, *sin, *vec, *io;
	float *sq;                      /* [2 max(L, T)] row sums of squares of a split RMSNorm */
	float *host;                    /* host staging for dumps and RoPE tables */
};

static int pd_wan_int3(const struct pd_config *c, const char *key, int *out)
{
	int64_t v[3];
	int n = 0;

	if (!pd_config_has(c, key)) {
		out[0] = 1;
		out[1] = out[2] = 2;
		return 0;
	}
	if (pd_config_int_array(c, key, 3, 1, 64, v, &n))
		return -1;
	if (n != 3)
		return pd_errorf("%s: %s must have 3 entries", c->path, key);
	for (int i = 0; i < 3; i++)
		out[i] = (int)v[i];
	return 0;
}

/* An integer key of CFG into C's FIELD (V: the parser's scratch). */
#define GETI(key, def, lo, hi, field) \
	do { \
		if (pd_config_int(cfg, key, def < 0, def, lo, hi, &v)) \
			return -1; \
		c->field = (int)v; \
	} while (0)

/* WanModel's config.json (the original layout of Wan-AI's repositories):
 * other keys for the same sizes, heads of 128 implied by dim / num_heads. */
static int pd_wan_config_original(struct pd_wan_config *c, const struct pd_config *cfg)
{
	int64_t v;
	double d;
	const char *s = NULL;

	memset(c, 0, sizeof(*c));
	GETI("dim", 2048, 6, 1 << 20, dim);
	GETI("num_heads", 16, 1, 1024, heads);
	GETI("in_dim", 16, 1, 4096, in_channels);
	GETI("out_dim", 16, 1, 4096, out_channels);
	GETI("ffn_dim", 8192, 1, 1 << 20, ffn_dim);
	GETI("num_layers", 32, 0, PD_DIT_MAX_BLOCKS, layers);
	GETI("text_dim", 4096, 1, 1 << 16, text_dim);
	GETI("freq_dim", 256, 2, 1 << 16, freq_dim);
	if (pd_config_string(cfg, "model_type", 0, "t2v", &s) || strcmp(s, "t2v") != 0)
		return pd_errorf("%s: model_type \"%s\"; pdit runs Wan2.1 text-to-video (t2v)", cfg->path, s ? s : "?");
	if (pd_config_double(cfg, "eps", 0, 1e-6, &d))
		return -1;
	c->eps = (float)d;
	if (pd_wan_int3(cfg, "patch_size", c->patch))
		return -1;
	if (c->dim % c->heads)
		return pd_errorf("%s: dim %d is not a multiple of num_heads %d", cfg->path, c->dim, c->heads);
	c->head_dim = c->dim / c->heads;
	c->rope_max = 1024;
	return 0;
}

/* A diffusers WanTransformer3DModel config. */
static int pd_wan_config_diffusers(struct pd_wan_config *c, const struct pd_config *cfg)
{
	int64_t v;
	double d;
	const char *s = NULL;

	memset(c, 0, sizeof(*c));
	GETI("in_channels", 16, 1, 4096, in_channels);
	GETI("out_channels", 16, 1, 4096, out_channels);
	GETI("num_attention_heads", 40, 1, 1024, heads);
	GETI("attention_head_dim", 128, 6, 4096, head_dim);
	GETI("ffn_dim", 13824, 1, 1 << 20, ffn_dim);
	GETI("num_layers", 40, 0, PD_DIT_MAX_BLOCKS, layers);
	GETI("text_dim", 4096, 1, 1 << 16, text_dim);
	GETI("freq_dim", 256, 2, 1 << 16, freq_dim);
	GETI("rope_max_seq_len", 1024, 1, 1 << 20, rope_max);
	if (pd_config_double(cfg, "eps", 0, 1e-6, &d))
		return -1;
	c->eps = (float)d;
	if (pd_wan_int3(cfg, "patch_size", c->patch))
		return -1;
	/* image-to-video and Wan2.2's variants are not this model */
	if (pd_config_has(cfg, "image_dim") || pd_config_has(cfg, "added_kv_proj_dim"))
		return pd_errorf("%s: image_dim is set (image-to-video); pdit runs Wan2.1 text-to-video", cfg->path);
	if (pd_config_string(cfg, "qk_norm", 0, "rms_norm_across_heads", &s) || strcmp(s, "rms_norm_across_heads") != 0)
		return pd_errorf("%s: qk_norm \"%s\" is not supported (Wan2.1 uses rms_norm_across_heads)", cfg->path,
				 s ? s : "?");
	c->dim = c->heads * c->head_dim;
	return 0;
}

#undef GETI

int pd_wan_config_check(struct pd_wan_config *c, const char *path)
{
	/* the pipeline side packs (1, 2, 2) patches and steps predictions in
	 * the latents' shape */
	if (c->patch[0] != 1 || c->patch[1] != 2 || c->patch[2] != 2)
		return pd_errorf("%s: patch_size [%d, %d, %d] is not Wan2.1's [1, 2, 2]", path, c->patch[0], c->patch[1],
				 c->patch[2]);
	if (c->out_channels != c->in_channels)
		return pd_errorf("%s: out_channels %d differs from in_channels %d (a prediction has the latents' shape)",
				 path, c->out_channels, c->in_channels);
	if (c->freq_dim % 2)
		return pd_errorf("%s: freq_dim %d is odd", path, c->freq_dim);
	/* TW:360-365: h and w take 2 (Dh / 6) channels each, t the rest */
	c->axes[1] = c->axes[2] = 2 * (c->head_dim / 6);
	c->axes[0] = c->head_dim - 2 * c->axes[1];
	if (c->head_dim < 6 || c->head_dim % 2 || c->axes[0] % 2)
		return pd_errorf("%s: attention_head_dim %d cannot be split into three even RoPE axes", path, c->head_dim);
	return 0;
}

int pd_wan_config_json(struct pd_wan_config *c, const struct pd_config *cfg)
{
	const char *cls = NULL;

	/* every transformer config would parse (all keys have defaults): the
	 * class must say Wan */
	if (pd_config_string(cfg, "_class_name", 0, "", &cls))
		return -1;
	if (strcmp(cls, "WanModel") == 0) {
		if (pd_wan_config_original(c, cfg))
			return -1;
	} else if (strcmp(cls, "WanTransformer3DModel") == 0) {
		if (pd_wan_config_diffusers(c, cfg))
			return -1;
	} else {
		return pd_errorf("%s: _class_name \"%s\" is neither WanTransformer3DModel (diffusers) nor WanModel "
				 "(Wan-AI's layout)", cfg->path, cls);
	}
	return pd_wan_config_check(c, cfg->path);
}

int pd_wan_dit_info(const struct pd_wan_config *c, struct pd_dit_info *info)
{
	double D = c->dim, F = c->ffn_dim, E = c->text_dim, P = c->patch[0] * c->patch[1] * c->patch[2];

	memset(info, 0, sizeof(*info));
	info->in_channels = (int)(c->in_channels * P);
	info->out_channels = (int)(c->out_channels * P);
	info->txt_width = c->text_dim;
	info->txt_context = 1;
	info->n_axes = 3;
	info->dim = c->dim;
	info->heads = c->heads;
	info->head_dim = c->head_dim;
	info->mlp_width = c->ffn_dim;
	info->blocks = c->layers;
	for (int i = 0; i < c->layers; i++) {
		/* per image token: q, k, v, o, the cross q and o, the FFN */
		info->block_cost[i] = 2 * (6 * D * D + 2 * D * F);
		info->block_params[i] = 8 * D * D + 2 * D * F;
		info->block_reduces[i] = 3;
		/* the self- and cross-attention's outputs, the FFN's middle */
		info->block_row_inputs[i] = 2 * D + F;
		info->block_row_gathers[i] = 3;
		info->block_passes[i] = 12;
	}
	/* self-attention's q and k, cross-attention's q and the text's k */
	info->tp_norm_reduces = 2;
	info->tp_norm_img = 3;
	info->tp_norm_txt = 1;
	info->fixed_params = D * (c->in_channels * P) + c->freq_dim * D + D * D + 6 * D * D + E * D + D * D +
			     D * c->out_channels * P;
	info->img_flops = 2 * D * (c->in_channels * P + c->out_channels * P);
	/* the text embedder, and each block's cross keys and values */
	info->txt_flops = 2 * (E * D + D * D) + c->layers * 2 * (2 * D * D);
	info->call_flops = 2 * (c->freq_dim * D + D * D + 6 * D * D);
	return 0;
}

static const struct pd_dit_ops pd_wan_dit_ops;

static void pd_wan_free_buffers(struct pd_wan *m)
{
	struct pd_backend *be = m->be;
	float **bufs[] = { &m->x, &m->nx, &m->q, &m->k, &m->v, &m->attn, &m->proj, &m->wide,
			   &m->ctx, &m->cos, &m->sin, &m->vec, &m->io, &m->sq };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		if (*bufs[i])
			be->ops->free(be, *bufs[i]);
		*bufs[i] = NULL;
	}
	free(m->host);
	m->host = NULL;
	m->cap_img = m->cap_txt = 0;
}

static void pd_wan_free(struct pd_wan *m)
{
	struct pd_backend *be;

	if (!m)
		return;
	be = m->be;
#define LF(l) be->ops->linear_free(be, (l))
#define VF(p) do { if (p) be->ops->free(be, (p)); } while (0)
	LF(m->patch);
	LF(m->time1);
	LF(m->time2);
	LF(m->time_proj);
	LF(m->text1);
	LF(m->text2);
	LF(m->proj_out);
	for (int i = m->dit.shard.block_first; m->blk && i < m->dit.shard.block_first + m->dit.shard.block_count; i++) {
		struct pd_wan_block *b = &m->blk[i];

		LF(b->q); LF(b->k); LF(b->v); LF(b->o);
		LF(b->cq); LF(b->ck); LF(b->cv); LF(b->co);
		LF(b->ff1); LF(b->ff2);
		VF(b->norm_q); VF(b->norm_k); VF(b->cnorm_q); VF(b->cnorm_k); VF(b->norm2_w); VF(b->norm2_b);
		VF(b->table);
	}
	VF(m->out_table);
#undef LF
#undef VF
	pd_wan_free_buffers(m);
	pd_dit_release(&m->dit);
	free(m->blk);
	free(m);
}

/* A scale_shift_table [1, ROWS, D] into backend memory. */
static float *pd_wan_table(struct pd_loader *ld, const char *name, int64_t rows, int64_t D)
{
	int64_t shape[3] = { 1, rows, D };
	float *h = pd_loader_host_tensor(ld, name, 3, shape), *d = NULL;

	if (h && (d = pd_backend_alloc(ld->be, (size_t)(rows * D), name)))
		ld->be->ops->upload(ld->be, d, h, (size_t)(rows * D));
	if (h && !d)
		ld->failed = 1;
	free(h);
	return d;
}

/* The config: CONFIG when given, else the folder's config.json, else a
 * single file's metadata or shapes. */
static int pd_wan_config_at(const char *path, const char *config, struct pd_wan_config *c)
{
	struct pd_config j;
	struct pd_st *st = NULL;
	int rc;

	if (!config && !pd_is_dir(path)) {
		if (pd_st_open(&st, path))
			return -1;
		rc = pd_wan_file_config(c, st);
		pd_st_close(st);
		return rc;
	}
	if (config ? pd_config_load(&j, config) : pd_config_load_in(&j, path, "config.json", "Wan transformer"))
		return -1;
	rc = pd_wan_config_json(c, &j);
	pd_config_free(&j);
	return rc;
}

int pd_wan_probe(const char *path, const char *config, struct pd_wan_config *c)
{
	return pd_wan_config_at(path, config, c);
}

int pd_wan_load_dit(struct pd_dit **out, const char *path, const char *config, struct pd_backend *be,
		    const struct pd_dit_shard *shard)
{
	struct pd_wan *m = pd_calloc(1, sizeof(*m), "the Wan transformer");
	struct pd_st *st = NULL;
	struct pd_loader ld;
	struct pd_dit_shard *sh;
	int64_t D, F, E, P, PO, TC, W, r;
	int first_stage, last_stage, whole;

	*out = NULL;
	if (!m)
		return -1;
	m->be = be;
	if (pd_wan_config_at(path, config, &m->cfg))
		goto fail;
	m->dit.ops = &pd_wan_dit_ops;
	pd_wan_dit_info(&m->cfg, &m->dit.info);
	m->dit.shard = (struct pd_dit_shard){ .rank = 0, .count = 1, .block_first = 0, .block_count = 0 };
	if (shard)
		m->dit.shard = *shard;
	if (m->dit.shard.block_count == 0)
		m->dit.shard.block_count = m->cfg.layers - m->dit.shard.block_first;
	sh = &m->dit.shard;
	if (sh->block_first < 0 || sh->block_count < 0 || sh->block_first + sh->block_count > m->cfg.layers) {
		pd_errorf("%s: blocks %d..%d of %d", path, sh->block_first, sh->block_first + sh->block_count,
			  m->cfg.layers);
		sh->block_first = sh->block_count = 0;
		goto fail;
	}
	if (sh->count < 1 || sh->rank < 0 || sh->rank >= sh->count || m->cfg.heads % sh->count ||
	    m->cfg.ffn_dim % sh->count) {
		pd_errorf("%s: tensor parallel degree %d does not divide the %d heads and the FFN's %d columns", path,
			  sh->count, m->cfg.heads, m->cfg.ffn_dim);
		sh->block_first = sh->block_count = 0;
		goto fail;
	}
	m->H = m->cfg.heads / sh->count;
	m->W = m->H * m->cfg.head_dim;
	m->F = m->cfg.ffn_dim / sh->count;
	m->dit.local_width = m->W;
	m->dit.be = be;
	if (pd_wan_file_open(&st, path))
		goto fail;
	D = m->cfg.dim;
	F = m->cfg.ffn_dim;
	E = m->cfg.text_dim;
	P = (int64_t)m->cfg.in_channels * m->cfg.patch[0] * m->cfg.patch[1] * m->cfg.patch[2];
	PO = (int64_t)m->cfg.out_channels * m->cfg.patch[0] * m->cfg.patch[1] * m->cfg.patch[2];
	TC = m->cfg.freq_dim;
	W = m->W;
	r = sh->rank;
	whole = sh->whole_inputs = sh->count > 1 && sh->whole_inputs;
	first_stage = sh->block_first == 0;
	last_stage = sh->block_first + sh->block_count == m->cfg.layers;
	ld = (struct pd_loader){ .st = st, .be = be, .quantize = sh->quantize, .each_linear = pd_dit_hold_linear,
				 .each_ctx = &m->dit };
	/* the layers as adapters find them (pd_lora_set) */
	if (pd_wan_linears(&m->cfg, &m->dit.layers, &m->dit.n_layers))
		ld.failed = 1;
	/* a pipeline stage reads what it runs: the patch and text embedders
	 * for the first, the final layers for the last, the time embedding
	 * (every block's modulation) for all */
	if (first_stage) {
		/* TW:670-674: the Conv3d with kernel = stride is a linear layer on
		 * the patch's (channel, dt, dy, dx) vector */
		int64_t ws[5] = { D, m->cfg.in_channels, m->cfg.patch[0], m->cfg.patch[1], m->cfg.patch[2] };
		float *w = pd_loader_host_tensor(&ld, "patch_embedding.weight", 5, ws), *b = pd_loader_host_tensor(&ld, "patch_embedding.bias", 1, &D);

		if (w && b && !(m->patch = be->ops->linear_new(be, D, P, w, PD_F32, P, b))) {
			pd_errorf("patch_embedding: %s", be->error);
			ld.failed = 1;
		}
		free(w);
		free(b);
	}
	m->time1 = pd_loader_linear(&ld, D, TC, "condition_embedder.time_embedder.linear_1");
	m->time2 = pd_loader_linear(&ld, D, D, "condition_embedder.time_embedder.linear_2");
	m->time_proj = pd_loader_linear(&ld, 6 * D, D, "condition_embedder.time_proj");
	if (first_stage) {
		m->text1 = pd_loader_linear(&ld, D, E, "condition_embedder.text_embedder.linear_1");
		m->text2 = pd_loader_linear(&ld, D, D, "condition_embedder.text_embedder.linear_2");
	}
	if (last_stage)
		m->out_table = pd_wan_table(&ld, "scale_shift_table", 2, D);
	if (last_stage) {
		/* proj_out's rows come in the unpatchify's order (dt, dy, dx,
		 * channel, TW:722-730); taken in the patch embedding's order
		 * (channel, dt, dy, dx) instead, a prediction is packed as the
		 * latents are and the pipeline steps them value by value */
		int64_t ws[2] = { PO, D }, pv = PO / m->cfg.out_channels;
		float *w = pd_loader_host_tensor(&ld, "proj_out.weight", 2, ws), *b = pd_loader_host_tensor(&ld, "proj_out.bias", 1, &PO);
		float *wp = pd_malloc((size_t)(PO * D + 1) * sizeof(float), "proj_out"), *bp = pd_malloc((size_t)PO * sizeof(float), "proj_out");

		if (w && b && wp && bp) {
			for (int64_t c = 0; c < m->cfg.out_channels; c++)
				for (int64_t q = 0; q < pv; q++) {
					int64_t from = q * m->cfg.out_channels + c, to = c * pv + q;

					memcpy(wp + to * D, w + from * D, (size_t)D * sizeof(float));
					bp[to] = b[from];
				}
			if (!(m->proj_out = be->ops->linear_new(be, PO, D, wp, PD_F32, D, bp))) {
				pd_errorf("proj_out: %s", be->error);
				ld.failed = 1;
			}
		} else {
			ld.failed = 1;
		}
		free(w);
		free(b);
		free(wp);
		free(bp);
	}
	m->blk = pd_calloc((size_t)m->cfg.layers + 1, sizeof(*m->blk), "the Wan transformer");
	if (!m->blk)
		goto fail;
	for (int i = sh->block_first; i < sh->block_first + sh->block_count && !ld.failed; i++) {
		struct pd_wan_block *b = &m->blk[i];
		/* column-parallel: this shard's heads (rows) with their bias;
		 * row-parallel: the matching input columns, the bias once, or
		 * with whole inputs (pd_dit_shard.whole_inputs) this shard's
		 * share of the output rows over every column, with their bias
		 * (and the RMSNorms across heads whole: each shard normalises
		 * the gathered rows as one process does) */
		int64_t Dp = D / sh->count;
		struct pd_slice col = { r * W, W, 0, D, 1 }, row = { 0, D, r * W, W, r == 0 };
		struct pd_slice ff1 = { r * m->F, m->F, 0, D, 1 }, ff2 = { 0, D, r * m->F, m->F, r == 0 };
		struct pd_slice row_w = { r * Dp, Dp, 0, D, 1 }, ff2_w = { r * Dp, Dp, 0, m->cfg.ffn_dim, 1 };
		int64_t nw0 = whole ? 0 : r * W, nw = whole ? D : W;
		char name[96];

		if (whole) {
			row = row_w;
			ff2 = ff2_w;
		}

		snprintf(name, sizeof(name), "blocks.%d.scale_shift_table", i);
		b->table = pd_wan_table(&ld, name, 6, D);
		b->q = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn1.to_q", i);
		b->k = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn1.to_k", i);
		b->v = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn1.to_v", i);
		b->o = pd_loader_linear_slice(&ld, D, D, &row, "blocks.%d.attn1.to_out.0", i);
		b->norm_q = pd_loader_vector_part(&ld, D, nw0, nw, "blocks.%d.attn1.norm_q.weight", i);
		b->norm_k = pd_loader_vector_part(&ld, D, nw0, nw, "blocks.%d.attn1.norm_k.weight", i);
		b->cq = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn2.to_q", i);
		b->ck = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn2.to_k", i);
		b->cv = pd_loader_linear_slice(&ld, D, D, &col, "blocks.%d.attn2.to_v", i);
		b->co = pd_loader_linear_slice(&ld, D, D, &row, "blocks.%d.attn2.to_out.0", i);
		b->cnorm_q = pd_loader_vector_part(&ld, D, nw0, nw, "blocks.%d.attn2.norm_q.weight", i);
		b->cnorm_k = pd_loader_vector_part(&ld, D, nw0, nw, "blocks.%d.attn2.norm_k.weight", i);
		b->norm2_w = pd_loader_vector(&ld, D, "blocks.%d.norm2.weight", i);
		b->norm2_b = pd_loader_vector(&ld, D, "blocks.%d.norm2.bias", i);
		b->ff1 = pd_loader_linear_slice(&ld, F, D, &ff1, "blocks.%d.ffn.net.0.proj", i);
		b->ff2 = pd_loader_linear_slice(&ld, D, F, &ff2, "blocks.%d.ffn.net.2", i);
	}
	if (ld.failed)
		goto fail;
	pd_st_close(st);
	*out = &m->dit;
	return 0;
fail:
	pd_st_close(st);
	pd_wan_free(m);
	return -1;
}

static int pd_wan_reserve(struct pd_wan *m, int64_t L, int64_t T)
{
	struct pd_backend *be = m->be;
	const struct pd_wan_config *c = &m->cfg;
	int64_t D = c->dim, Dh = c->head_dim, S = L > T ? L : T, io;

	L = L < 1 ? 1 : L;
	T = T < 1 ? 1 : T;
	S = S < 1 ? 1 : S;
	if (L <= m->cap_img && T <= m->cap_txt)
		return 0;
	L = L > m->cap_img ? L : m->cap_img;
	T = T > m->cap_txt ? T : m->cap_txt;
	S = L > T ? L : T;
	pd_wan_free_buffers(m);
	io = (int64_t)m->dit.info.in_channels;
	io = io > m->dit.info.out_channels ? io : m->dit.info.out_channels;
	io = io > c->text_dim ? io : c->text_dim;
	m->x = pd_backend_alloc(be, (size_t)(L * D), "hidden states");
	m->nx = pd_backend_alloc(be, (size_t)(L * D), "normalised states");
	m->q = pd_backend_alloc(be, (size_t)(L * D), "queries");
	m->k = pd_backend_alloc(be, (size_t)(S * D), "keys");
	m->v = pd_backend_alloc(be, (size_t)(S * D), "values");
	m->attn = pd_backend_alloc(be, (size_t)(L * D), "attention output");
	m->proj = pd_backend_alloc(be, (size_t)(L * D), "projections");
	m->wide = pd_backend_alloc(be, (size_t)(S * (c->ffn_dim > D ? c->ffn_dim : D)), "feed-forward activations");
	m->ctx = pd_backend_alloc(be, (size_t)(T * D), "text embedding");
	m->cos = pd_backend_alloc(be, (size_t)(L * Dh), "RoPE table");
	m->sin = pd_backend_alloc(be, (size_t)(L * Dh), "RoPE table");
	m->vec = pd_backend_alloc(be, (size_t)(16 * D + c->freq_dim), "embeddings");
	m->io = pd_backend_alloc(be, (size_t)(S * io), "inputs");
	m->sq = pd_backend_alloc(be, (size_t)(2 * S), "RMSNorm sums");
	m->host = pd_malloc((size_t)(S * (c->ffn_dim > D ? c->ffn_dim : D) + 2 * L * Dh + 16 * D + c->freq_dim) *
				    sizeof(float),
			    "host staging");
	if (!m->host || pd_backend_check(be))
		return -1;
	m->cap_img = L;
	m->cap_txt = T;
	return 0;
}

/* Downloads ROWS x COLS of P (row stride LD) and hands them to the dump as
 * NAME with shape [1, rows, cols]. */
static void pd_wan_dump(struct pd_wan *m, const struct pd_dump *dump, const char *name, const float *p, int64_t ld,
			int64_t rows, int64_t cols)
{
	int64_t shape[3] = { 1, rows, cols };

	if (!dump || m->be->failed)
		return;
	for (int64_t r = 0; r < rows; r++)
		m->be->ops->download(m->be, m->host + r * cols, p + r * ld, (size_t)cols);
	dump->fn(dump->ctx, name, dump->index, m->host, 3, shape);
}

/* temb and timestep_proj of the call's timestep (TW:331-351): VEC gets
 * temb [D] at 0 and the six modulation rows' timestep part [6D] at 2D. */
static void pd_wan_time(struct pd_wan *m, const struct pd_dit_call *in, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	int64_t D = m->cfg.dim, TC = m->cfg.freq_dim;
	float *temb = m->vec, *h = m->vec + D, *tproj = m->vec + 2 * D, *sin_in = m->vec + 16 * D;
	float *proj = m->host, *freqs = m->host + TC;

	/* the integer timestep as float32, [cos | sin] */
	pd_timestep_embedding(in->timestep, (int)(TC / 2), proj, freqs);
	be->ops->upload(be, sin_in, proj, (size_t)TC);
	be->ops->linear(be, m->time1, sin_in, TC, 1, h, D, 0);
	be->ops->silu(be, h, h, (size_t)D);
	be->ops->linear(be, m->time2, h, D, 1, temb, D, 0);
	be->ops->silu(be, h, temb, (size_t)D);
	be->ops->linear(be, m->time_proj, h, D, 1, tproj, 6 * D, 0);
	pd_wan_dump(m, dump, "emb.temb", temb, D, 1, D);
	pd_wan_dump(m, dump, "emb.timestep_proj", tproj, 6 * D, 1, 6 * D);
}

/* With whole inputs: the shards' columns of A [n, W] gathered, normalised
 * over the whole row as one process does (WF: the norm's weights, whole),
 * this shard's columns taken back. */
static void pd_wan_norm_whole(struct pd_wan *m, float *a, int64_t n, const float *wf)
{
	struct pd_backend *be = m->be;
	int64_t W = m->W, D = m->cfg.dim;
	float *full = pd_dit_gather_cols(&m->dit, 0, a, W, n, W);

	if (!full)
		return;
	be->ops->rmsnorm_heads(be, full, D, n, 1, (int)D, wf, m->cfg.eps);
	be->ops->copy2d(be, a, W, full + m->dit.shard.rank * W, D, n, W);
}

/* RMSNorm across heads (TW:113-116) of A [na, W] with WA and, when NB > 0,
 * of B [nb, W] with WB, in place. Split over shards, each row's sum of
 * squares is added over them first (one all-reduce for both), or with
 * whole inputs the rows are gathered and normalised whole. */
static void pd_wan_norm_heads(struct pd_wan *m, float *a, int64_t na, const float *wa, float *b, int64_t nb,
			      const float *wb)
{
	struct pd_backend *be = m->be;
	int64_t W = m->W, D = m->cfg.dim;

	if (m->dit.shard.count == 1) {
		be->ops->rmsnorm_heads(be, a, W, na, 1, (int)W, wa, m->cfg.eps);
		if (nb > 0)
			be->ops->rmsnorm_heads(be, b, W, nb, 1, (int)W, wb, m->cfg.eps);
		return;
	}
	if (m->dit.shard.whole_inputs) {
		pd_wan_norm_whole(m, a, na, wa);
		if (nb > 0)
			pd_wan_norm_whole(m, b, nb, wb);
		return;
	}
	be->ops->row_sumsq(be, m->sq, a, W, na, W);
	if (nb > 0)
		be->ops->row_sumsq(be, m->sq + na, b, W, nb, W);
	pd_dit_shard_reduce(&m->dit, m->sq, (size_t)(na + (nb > 0 ? nb : 0)));
	be->ops->rms_apply(be, a, W, na, W, m->sq, D, wa, m->cfg.eps);
	if (nb > 0)
		be->ops->rms_apply(be, b, W, nb, W, m->sq + na, D, wb, m->cfg.eps);
}

static void pd_wan_block(struct pd_wan *m, const struct pd_dit_call *call, int i, int64_t L, int64_t T,
			 const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_wan_block *b = &m->blk[i];
	int64_t D = m->cfg.dim, F = m->F, H = m->H, W = m->W, Dh = m->cfg.head_dim;
	int64_t ld, ldp = pd_dit_rows_width(&m->dit, D);
	const float *in;
	float *mod = m->vec + 8 * D;
	const float *shift, *scale, *gate, *c_shift, *c_scale, *c_gate;
	float sc = 1.0f / sqrtf((float)Dh);
	char name[96];

	/* (shift, scale, gate, c_shift, c_scale, c_gate) = table + timestep_proj (TW:483-485) */
	be->ops->add(be, mod, b->table, m->vec + 2 * D, (size_t)(6 * D));
	shift = mod;
	scale = mod + D;
	gate = mod + 2 * D;
	c_shift = mod + 3 * D;
	c_scale = mod + 4 * D;
	c_gate = mod + 5 * D;
	/* self-attention: RMSNorm across heads, RoPE, no mask (TW:462-477);
	 * q, k, v hold this shard's heads */
	be->ops->layernorm_mod(be, m->nx, D, m->x, D, L, D, scale, shift, m->cfg.eps);
	be->ops->linear(be, b->q, m->nx, D, L, m->q, W, 0);
	be->ops->linear(be, b->k, m->nx, D, L, m->k, W, PD_LIN_SAME_INPUT);
	be->ops->linear(be, b->v, m->nx, D, L, m->v, W, PD_LIN_SAME_INPUT);
	pd_wan_norm_heads(m, m->q, L, b->norm_q, m->k, L, b->norm_k);
	be->ops->rope(be, m->q, W, L, (int)H, (int)Dh, m->cos, m->sin);
	be->ops->rope(be, m->k, W, L, (int)H, (int)Dh, m->cos, m->sin);
	if (m->dit.hooks.attention) {
		/* this rank's image rows against the whole video (sequence parallel) */
		if (!be->failed)
			pd_dit_hook_result(&m->dit, m->dit.hooks.attention(m->dit.hooks.attention_ctx, be, call, i, m->attn, W,
								     m->q, m->k, m->v, W, L, (int)H, (int)Dh));
	} else {
		be->ops->attention(be, m->attn, W, NULL, m->q, W, m->k, W, m->v, W, L, L, (int)H, (int)Dh, sc);
	}
	in = pd_dit_rows_in(&m->dit, 0, m->attn, W, L, W, &ld);
	be->ops->linear(be, b->o, in, ld, L, m->proj, ldp, 0);
	pd_dit_rows_out(&m->dit, m->proj, L, D);
	be->ops->gated_add(be, m->x, D, m->proj, D, L, D, gate);
	/* cross-attention to every text row, the zero-padded ones too (TW:487-492) */
	be->ops->layernorm(be, m->nx, D, m->x, D, L, D, b->norm2_w, b->norm2_b, m->cfg.eps);
	be->ops->linear(be, b->cq, m->nx, D, L, m->q, W, 0);
	if (T > 0) {
		be->ops->linear(be, b->ck, m->ctx, D, T, m->k, W, 0);
		be->ops->linear(be, b->cv, m->ctx, D, T, m->v, W, PD_LIN_SAME_INPUT);
	}
	pd_wan_norm_heads(m, m->q, L, b->cnorm_q, m->k, T, b->cnorm_k);
	if (T > 0) {
		be->ops->attention(be, m->attn, W, NULL, m->q, W, m->k, W, m->v, W, L, T, (int)H, (int)Dh, sc);
		if (m->dit.shard.count == 1) {
			be->ops->linear(be, b->co, m->attn, W, L, m->x, D, PD_LIN_ACCUMULATE);
		} else {
			in = pd_dit_rows_in(&m->dit, 0, m->attn, W, L, W, &ld);
			be->ops->linear(be, b->co, in, ld, L, m->proj, ldp, 0);
			pd_dit_rows_out(&m->dit, m->proj, L, D);
			be->ops->add(be, m->x, m->x, m->proj, (size_t)(L * D));
		}
	}
	/* feed-forward (TW:494-500) */
	be->ops->layernorm_mod(be, m->nx, D, m->x, D, L, D, c_scale, c_shift, m->cfg.eps);
	be->ops->linear(be, b->ff1, m->nx, D, L, m->wide, F, PD_LIN_GELU_TANH);
	in = pd_dit_rows_in(&m->dit, 0, m->wide, F, L, F, &ld);
	be->ops->linear(be, b->ff2, in, ld, L, m->proj, ldp, 0);
	pd_dit_rows_out(&m->dit, m->proj, L, D);
	be->ops->gated_add(be, m->x, D, m->proj, D, L, D, c_gate);
	/* the name pdit check compares blocks by (diffusers': block.i.out) */
	snprintf(name, sizeof(name), "block.%d.out.hidden_states", i);
	pd_wan_dump(m, dump, name, m->x, D, L, D);
}

static int pd_wan_forward_blocks(struct pd_dit *d, const struct pd_dit_call *in, int first, int count,
				 const float *x_in, float *x_out, float *out, const struct pd_dump *dump)
{
	struct pd_wan *m = (struct pd_wan *)d;
	struct pd_backend *be = m->be;
	const struct pd_wan_config *c = &m->cfg;
	int64_t T = in->txt_len, L = in->img_len, D = c->dim, Dh = c->head_dim;
	int64_t PI = d->info.in_channels, PO = d->info.out_channels;

	if (T < 0 || L < 0)
		return pd_errorf("forward: negative token count");
	if (first < 0 || count < 0 || first + count > c->layers || (!x_in && first != 0) ||
	    (count > 0 && (first < d->shard.block_first || first + count > d->shard.block_first + d->shard.block_count)))
		return pd_errorf("forward: blocks %d..%d are not all held here", first, first + count);
	if ((!x_in && !m->patch) || (out && !m->proj_out))
		return pd_errorf("forward: the %s layers are another pipeline stage's", out ? "final" : "embedding");
	if (pd_wan_reserve(m, L, T))
		return -1;
	pd_wan_time(m, in, dump);
	if (x_in) {
		be->ops->upload(be, m->ctx, x_in, (size_t)(T * D));
		be->ops->upload(be, m->x, x_in + T * D, (size_t)(L * D));
	} else {
		/* patches (TW:670-674) and the text embedder on all T rows (TW:324, 347) */
		be->ops->upload(be, m->io, in->img, (size_t)(L * PI));
		be->ops->linear(be, m->patch, m->io, PI, L, m->x, D, 0);
		if (T > 0) {
			be->ops->upload(be, m->io, in->txt, (size_t)(T * c->text_dim));
			be->ops->linear(be, m->text1, m->io, c->text_dim, T, m->wide, D, PD_LIN_GELU_TANH);
			be->ops->linear(be, m->text2, m->wide, D, T, m->ctx, D, 0);
		}
		pd_wan_dump(m, dump, "emb.patch_tokens", m->x, D, L, D);
		pd_wan_dump(m, dump, "emb.text_embedder", m->ctx, D, T, D);
	}
	/* 3-D RoPE of the (frame, row, column) positions (TW:354-417) */
	{
		float *hc = m->host, *hs = m->host + L * Dh;

		for (int64_t r = 0; r < L; r++)
			for (int a = 0; a < 3; a++)
				if (in->img_ids[r * 3 + a] < 0 || in->img_ids[r * 3 + a] >= c->rope_max)
					return pd_errorf("Wan: position %g on axis %d is outside the model's %d",
							 in->img_ids[r * 3 + a], a, c->rope_max);
		pd_dit_rope_tables(3, c->axes, (int)Dh, in->img_ids, L, hc, hs);
		be->ops->upload(be, m->cos, hc, (size_t)(L * Dh));
		be->ops->upload(be, m->sin, hs, (size_t)(L * Dh));
	}
	for (int i = first; i < first + count; i++) {
		pd_wan_block(m, in, i, L, T, dump);
		if (pd_backend_check(be))
			return -1;
	}
	if (x_out) {
		be->ops->download(be, x_out, m->ctx, (size_t)(T * D));
		be->ops->download(be, x_out + T * D, m->x, (size_t)(L * D));
	}
	if (out) {
		/* (shift, scale) = table + temb, not timestep_proj (TW:707-730) */
		float *mod = m->vec + 8 * D;

		be->ops->add(be, mod, m->out_table, m->vec, (size_t)D);
		be->ops->add(be, mod + D, m->out_table + D, m->vec, (size_t)D);
		be->ops->layernorm_mod(be, m->nx, D, m->x, D, L, D, mod + D, mod, c->eps);
		be->ops->linear(be, m->proj_out, m->nx, D, L, m->io, PO, 0);
		be->ops->download(be, out, m->io, (size_t)(L * PO));
	}
	return pd_backend_check(be);
}

static void pd_wan_dit_free(struct pd_dit *d)
{
	pd_wan_free((struct pd_wan *)d);
}

static const struct pd_dit_ops pd_wan_dit_ops = {
	.forward_blocks = pd_wan_forward_blocks,
	.free = pd_wan_dit_free,
};

void pd_wan_patchify(const int *patch, int C, int F, int h, int w, const float *lat, float *tokens, float *ids)
{
	int pt = patch[0], ph = patch[1], pw = patch[2], nf = F / pt, nh = h / ph, nw = w / pw;
	int64_t P = (int64_t)C * pt * ph * pw, n = 0;

	for (int f = 0; f < nf; f++)
		for (int i = 0; i < nh; i++)
			for (int j = 0; j < nw; j++, n++) {
				float *t = tokens + n * P;

				for (int c = 0; c < C; c++)
					for (int dt = 0; dt < pt; dt++)
						for (int dy = 0; dy < ph; dy++)
							for (int dx = 0; dx < pw; dx++)
								*t++ = lat[(((int64_t)c * F + f * pt + dt) * h + i * ph + dy) * w +
									   j * pw + dx];
				if (ids) {
					ids[n * 3] = (float)f;
					ids[n * 3 + 1] = (float)i;
					ids[n * 3 + 2] = (float)j;
				}
			}
}

void pd_wan_unpatchify(const int *patch, int C, int F, int h, int w, const float *tokens, float *lat)
{
	int pt = patch[0], ph = patch[1], pw = patch[2], nf = F / pt, nh = h / ph, nw = w / pw;
	int64_t P = (int64_t)C * pt * ph * pw, n = 0;

	for (int f = 0; f < nf; f++)
		for (int i = 0; i < nh; i++)
			for (int j = 0; j < nw; j++, n++) {
				const float *t = tokens + n * P;

				for (int c = 0; c < C; c++)
					for (int dt = 0; dt < pt; dt++)
						for (int dy = 0; dy < ph; dy++)
							for (int dx = 0; dx < pw; dx++)
								lat[(((int64_t)c * F + f * pt + dt) * h + i * ph + dy) * w + j * pw +
								    dx] = *t++;
			}
}
