/*
 * pd_flux.c - the FLUX.1 transformer forward pass.
 *
 * References in comments (TF:n, EMB:n, NORM:n) are the diffusers v0.40 line
 * numbers the golden README cites.
 */
#include "pd_flux.h"
#include "pd_config.h"
#include "pd_loader.h"
#include "pd_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_FLUX_EPS 1e-6f
/* Width of the sinusoidal time embedding (Timesteps(num_channels=256)). */
#define PD_TIME_CHANNELS 256

struct pd_flux_double {
	struct pd_linear *norm1;        /* AdaLayerNormZero of the image stream, D -> 6D */
	struct pd_linear *norm1_ctx;    /* same for the text stream */
	struct pd_linear *q, *k, *v;    /* image projections */
	struct pd_linear *add_q, *add_k, *add_v; /* text projections */
	float *norm_q, *norm_k;         /* image q/k RMSNorm weights [head_dim] */
	float *norm_added_q, *norm_added_k; /* text q/k RMSNorm weights */
	struct pd_linear *out;          /* to_out.0 (image) */
	struct pd_linear *add_out;      /* to_add_out (text) */
	struct pd_linear *ff1, *ff2;    /* image feed-forward */
	struct pd_linear *ff_ctx1, *ff_ctx2; /* text feed-forward */
};

struct pd_flux_single {
	struct pd_linear *norm;         /* AdaLayerNormZeroSingle, D -> 3D */
	struct pd_linear *q, *k, *v;    /* projections of the joint sequence */
	float *norm_q, *norm_k;         /* q/k RMSNorm weights [head_dim] */
	struct pd_linear *mlp;          /* proj_mlp, D -> M */
	/* proj_out reads cat([attention D | MLP M]); its two column blocks are
	 * two products, the second accumulating, so neither input is copied
	 * into a concatenation and tensor parallelism slices each block */
	struct pd_linear *proj_attn;    /* proj_out columns [0, D): D -> D */
	struct pd_linear *proj_mlp;     /* proj_out columns [D, D + M): M -> D, no bias */
};

struct pd_flux {
	struct pd_dit dit;              /* the interface; must stay first (shard, hooks) */
	struct pd_flux_config cfg;      /* sizes of the whole model */
	struct pd_backend *be;          /* compute backend (borrowed) */
	const struct pd_dit_call *call; /* the call being run, for the attention seam */
	int heads;                      /* heads held here: cfg.heads / shard.count */
	int64_t dim;                    /* their width: heads x head_dim */
	int64_t mlp;                    /* MLP columns held here: cfg.mlp_dim / shard.count */
	struct pd_linear *x_embedder;   /* in_channels -> D */
	struct pd_linear *context_embedder; /* joint_attention_dim -> D */
	float *txt_norm;                /* Qwen-Image: the text's RMSNorm weight [joint_attention_dim], or NULL */
	struct pd_linear *time1, *time2; /* timestep_embedder MLP */
	struct pd_linear *guid1, *guid2; /* guidance_embedder MLP (dev only) */
	struct pd_linear *text1, *text2; /* text_embedder (pooled) MLP */
	struct pd_linear *norm_out;     /* final AdaLayerNormContinuous, D -> 2D (scale, shift) */
	struct pd_linear *proj_out;     /* D -> out_channels */
	struct pd_flux_double *dbl;     /* num_layers double blocks */
	struct pd_flux_single *sgl;     /* num_single_layers single blocks */

	/* Work buffers, sized for cap_seq tokens and reused across calls. */
	int64_t cap_seq;                /* tokens the buffers hold */
	float *x;                       /* [S, D] hidden states, text rows first */
	float *nx;                      /* [S, D] normalised and modulated */
	float *q, *k, *v;               /* [S, dim] local heads */
	float *attn;                    /* [S, dim] attention output (double blocks) */
	float *proj;                    /* [S, D] projection outputs (partial sums under TP) */
	float *wide;                    /* [S, mlp] MLP hidden */
	float *modpart;                 /* [6 D / shards] this shard's modulation outputs */
	float *cos, *sin;               /* [S, head_dim] RoPE tables */
	float *vec;                     /* small vectors: temb, modulation, embeddings */
	float *io;                      /* [S, max(in, joint, out channels)] inputs and output */
	float *host;                    /* host staging for dumps, [S, D + M] */
};

/* ----------------------------------------------------------------------- */
/* Config                                                                  */
/* ----------------------------------------------------------------------- */

int pd_flux_config_load(struct pd_flux_config *cfg, const char *dir)
{
	struct pd_config c;
	int rc;

	/* a single file carries no config.json: its sizes come with it */
	if (!pd_is_dir(dir)) {
		struct pd_st *st;

		if (pd_flux_open_file(&st, dir, cfg, NULL))
			return -1;
		pd_st_close(st);
		return 0;
	}
	const char *cls = NULL;

	if (pd_config_load_in(&c, dir, "config.json", "FLUX transformer"))
		return -1;
	rc = pd_config_string(&c, "_class_name", 0, "", &cls) ? -1
	     : !strcmp(cls, "QwenImageTransformer2DModel") ? pd_flux_config_parse_qwen(cfg, &c)
							   : pd_flux_config_parse(cfg, &c);
	pd_config_free(&c);
	return rc;
}

static int pd_flux_config_axes(struct pd_flux_config *cfg, const struct pd_config *cp);

int pd_flux_config_parse(struct pd_flux_config *cfg, const struct pd_config *cp)
{
	struct pd_config c = *cp;
	int64_t v;
	int rc = -1;

	memset(cfg, 0, sizeof(*cfg));
#define GETI(key, req, def, lo, hi, field) \
	do { \
		if (pd_config_int(&c, key, req, def, lo, hi, &v)) \
			goto out; \
		cfg->field = (int)v; \
	} while (0)
	GETI("in_channels", 1, 0, 1, 1 << 16, in_channels);
	GETI("out_channels", 0, cfg->in_channels, 1, 1 << 16, out_channels);
	GETI("num_layers", 1, 0, 0, 1 << 12, num_layers);
	GETI("num_single_layers", 1, 0, 0, 1 << 12, num_single_layers);
	GETI("num_attention_heads", 1, 0, 1, 1 << 12, heads);
	GETI("attention_head_dim", 1, 0, 2, 1 << 14, head_dim);
	GETI("joint_attention_dim", 1, 0, 1, 1 << 16, joint_attention_dim);
	GETI("pooled_projection_dim", 1, 0, 1, 1 << 16, pooled_projection_dim);
#undef GETI
	if (pd_config_int(&c, "patch_size", 0, 1, 1, 64, &v))
		goto out;
	if (v != 1) {
		pd_errorf("%s: patch_size %lld is not supported (FLUX.1 uses 1)", c.path, (long long)v);
		goto out;
	}
	if (pd_config_bool(&c, "guidance_embeds", 0, 0, &cfg->guidance_embeds))
		goto out;
	rc = pd_flux_config_axes(cfg, &c);
out:
	return rc;
}

int pd_flux_config_parse_qwen(struct pd_flux_config *cfg, const struct pd_config *cp)
{
	static const char *const unsupported[] = { "guidance_embeds", "use_additional_t_cond", "use_layer3d_rope",
						   "zero_cond_t" };
	struct pd_config c = *cp;
	int64_t v;
	int on;

	memset(cfg, 0, sizeof(*cfg));
	cfg->qwen = 1;
#define GETI(key, req, def, lo, hi, field) \
	do { \
		if (pd_config_int(&c, key, req, def, lo, hi, &v)) \
			return -1; \
		cfg->field = (int)v; \
	} while (0)
	GETI("in_channels", 1, 0, 1, 1 << 16, in_channels);
	GETI("out_channels", 0, cfg->in_channels / 4, 1, 1 << 16, out_channels);
	GETI("num_layers", 1, 0, 0, 1 << 12, num_layers);
	GETI("num_attention_heads", 1, 0, 1, 1 << 12, heads);
	GETI("attention_head_dim", 1, 0, 2, 1 << 14, head_dim);
	GETI("joint_attention_dim", 1, 0, 1, 1 << 16, joint_attention_dim);
#undef GETI
	if (pd_config_int(&c, "patch_size", 0, 2, 1, 8, &v))
		return -1;
	/* proj_out writes a token's patch of every channel */
	cfg->out_channels *= (int)(v * v);
	/* the variants of later Qwen-Image models (Edit 2511's zero_cond_t,
	 * ...) change the arithmetic: not read as this one */
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		if (pd_config_bool(&c, unsupported[i], 0, 0, &on))
			return -1;
		if (on)
			return pd_errorf("%s: %s is not supported (Qwen-Image's transformer has it off)", c.path,
					 unsupported[i]);
	}
	return pd_flux_config_axes(cfg, &c);
}

/* axes_dims_rope (summing to the head width) and the widths that follow. */
static int pd_flux_config_axes(struct pd_flux_config *cfg, const struct pd_config *cp)
{
	struct pd_config c = *cp;
	int64_t axes[PD_FLUX_MAX_AXES];
	int rc = -1, n, sum = 0;

	if (pd_config_int_array(&c, "axes_dims_rope", PD_FLUX_MAX_AXES, 2, 1 << 14, axes, &n))
		goto out;
	cfg->n_axes = n;
	for (int i = 0; i < n; i++) {
		cfg->axes_dims[i] = (int)axes[i];
		sum += (int)axes[i];
		if (axes[i] % 2) {
			pd_errorf("%s: axes_dims_rope entries must be even", c.path);
			goto out;
		}
	}
	if (sum != cfg->head_dim) {
		pd_errorf("%s: axes_dims_rope sum to %d but attention_head_dim is %d", c.path, sum, cfg->head_dim);
		goto out;
	}
	if ((int64_t)cfg->heads * cfg->head_dim > (1 << 20)) {
		pd_errorf("%s: heads x head_dim is too large", c.path);
		goto out;
	}
	cfg->dim = cfg->heads * cfg->head_dim;
	cfg->mlp_dim = 4 * cfg->dim;
	rc = 0;
out:
	return rc;
}

/* ----------------------------------------------------------------------- */
/* Loading                                                                 */
/* ----------------------------------------------------------------------- */

/* The slices of one shard: column-parallel layers keep rows [r0, r0+n) with
 * their bias; row-parallel ones keep the matching input columns, and the
 * bias on shard 0 only, or with whole inputs (pd_dit_shard.whole_inputs)
 * the shard's share of the output rows over every input column, with their
 * bias. */
static struct pd_slice pd_col_slice(int64_t n_in, int64_t r0, int64_t n)
{
	struct pd_slice s = { r0, n, 0, n_in, 1 };

	return s;
}

/* Of a row-parallel layer whose input is columns [c0, c0 + n_in) of its
 * weight (all shards' together); BIAS: the bias comes with this part. */
static struct pd_slice pd_row_slice(const struct pd_flux *m, int64_t n_out, int64_t c0, int64_t n_in, int bias)
{
	int64_t r = m->dit.shard.rank, count = m->dit.shard.count;
	struct pd_slice rows = { r * n_out / count, n_out / count, c0, n_in, bias };
	struct pd_slice cols = { 0, n_out, c0 + r * n_in / count, n_in / count, bias && r == 0 };

	return m->dit.shard.whole_inputs ? rows : cols;
}

static void pd_flux_load_double(struct pd_loader *ld, const struct pd_flux *m, int i, struct pd_flux_double *b)
{
	const struct pd_flux_config *c = &m->cfg;
	int64_t D = c->dim, M = c->mlp_dim, Dh = c->head_dim, r = m->dit.shard.rank;
	struct pd_slice qkv = pd_col_slice(D, r * m->dim, m->dim), mod = pd_col_slice(D, r * 6 * D / m->dit.shard.count,
										       6 * D / m->dit.shard.count);
	struct pd_slice out = pd_row_slice(m, D, 0, D, 1), ff1 = pd_col_slice(D, r * m->mlp, m->mlp);
	struct pd_slice ff2 = pd_row_slice(m, D, 0, M, 1);
	const char *p = "transformer_blocks";
	/* the two layouts' names of the same layers (pd_flux_config.qwen) */
	const char *n1 = c->qwen ? "img_mod.1" : "norm1.linear", *n1c = c->qwen ? "txt_mod.1" : "norm1_context.linear";
	const char *ff = c->qwen ? "img_mlp" : "ff", *ffc = c->qwen ? "txt_mlp" : "ff_context";

	b->norm1 = pd_loader_linear_slice(ld, 6 * D, D, &mod, "%s.%d.%s", p, i, n1);
	b->norm1_ctx = pd_loader_linear_slice(ld, 6 * D, D, &mod, "%s.%d.%s", p, i, n1c);
	b->q = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_q", p, i);
	b->k = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_k", p, i);
	b->v = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_v", p, i);
	b->add_q = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.add_q_proj", p, i);
	b->add_k = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.add_k_proj", p, i);
	b->add_v = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.add_v_proj", p, i);
	b->norm_q = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_q.weight", p, i);
	b->norm_k = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_k.weight", p, i);
	b->norm_added_q = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_added_q.weight", p, i);
	b->norm_added_k = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_added_k.weight", p, i);
	b->out = pd_loader_linear_slice(ld, D, D, &out, "%s.%d.attn.to_out.0", p, i);
	b->add_out = pd_loader_linear_slice(ld, D, D, &out, "%s.%d.attn.to_add_out", p, i);
	b->ff1 = pd_loader_linear_slice(ld, M, D, &ff1, "%s.%d.%s.net.0.proj", p, i, ff);
	b->ff2 = pd_loader_linear_slice(ld, D, M, &ff2, "%s.%d.%s.net.2", p, i, ff);
	b->ff_ctx1 = pd_loader_linear_slice(ld, M, D, &ff1, "%s.%d.%s.net.0.proj", p, i, ffc);
	b->ff_ctx2 = pd_loader_linear_slice(ld, D, M, &ff2, "%s.%d.%s.net.2", p, i, ffc);
}

static void pd_flux_load_single(struct pd_loader *ld, const struct pd_flux *m, int i, struct pd_flux_single *b)
{
	const struct pd_flux_config *c = &m->cfg;
	int64_t D = c->dim, M = c->mlp_dim, Dh = c->head_dim, r = m->dit.shard.rank;
	struct pd_slice qkv = pd_col_slice(D, r * m->dim, m->dim), mlp = pd_col_slice(D, r * m->mlp, m->mlp);
	struct pd_slice mod = pd_col_slice(D, r * 3 * D / m->dit.shard.count, 3 * D / m->dit.shard.count);
	/* proj_out's input is [attention D | MLP M]: this shard's heads in the
	 * first block and its MLP columns in the second, never one contiguous
	 * range of D + M (a contiguous split has the right shapes and the wrong
	 * columns); the bias comes once, with the attention part */
	struct pd_slice out_a = pd_row_slice(m, D, 0, D, 1), out_m = pd_row_slice(m, D, D, M, 0);
	const char *p = "single_transformer_blocks";

	b->norm = pd_loader_linear_slice(ld, 3 * D, D, &mod, "%s.%d.norm.linear", p, i);
	b->q = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_q", p, i);
	b->k = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_k", p, i);
	b->v = pd_loader_linear_slice(ld, D, D, &qkv, "%s.%d.attn.to_v", p, i);
	b->norm_q = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_q.weight", p, i);
	b->norm_k = pd_loader_vector(ld, Dh, "%s.%d.attn.norm_k.weight", p, i);
	b->mlp = pd_loader_linear_slice(ld, M, D, &mlp, "%s.%d.proj_mlp", p, i);
	b->proj_attn = pd_loader_linear_slice(ld, D, D + M, &out_a, "%s.%d.proj_out", p, i);
	b->proj_mlp = pd_loader_linear_slice(ld, D, D + M, &out_m, "%s.%d.proj_out", p, i);
}

/* FLUX.1 uses an MLP of 4 x dim, but the weights are the authority. */
static int pd_flux_mlp_dim(const struct pd_st *st, struct pd_flux_config *c)
{
	const struct pd_st_tensor *t = pd_st_get(st, c->qwen ? "transformer_blocks.0.img_mlp.net.0.proj.weight"
						       : "transformer_blocks.0.ff.net.0.proj.weight");

	if (!t)
		t = pd_st_get(st, "single_transformer_blocks.0.proj_mlp.weight");
	if (t && t->ndim == 2 && t->shape[0] > 0 && t->shape[0] <= (1 << 22))
		c->mlp_dim = (int)t->shape[0];
	return 0;
}

static int pd_flux_load_cfg(struct pd_flux **out, const char *dir, const char *config_json, struct pd_backend *be,
			    const struct pd_dit_shard *shard);

int pd_flux_load(struct pd_flux **out, const char *dir, struct pd_backend *be)
{
	return pd_flux_load_cfg(out, dir, NULL, be, NULL);
}

int pd_flux_load_config(struct pd_flux **out, const char *path, const char *config_json, struct pd_backend *be)
{
	return pd_flux_load_cfg(out, path, config_json, be, NULL);
}

int pd_flux_load_shard(struct pd_flux **out, const char *dir, struct pd_backend *be, const struct pd_dit_shard *shard)
{
	return pd_flux_load_cfg(out, dir, NULL, be, shard);
}

static const struct pd_dit_ops pd_flux_dit_ops;

static int pd_flux_load_cfg(struct pd_flux **out, const char *dir, const char *config_json, struct pd_backend *be,
			    const struct pd_dit_shard *shard)
{
	struct pd_flux *m = pd_calloc(1, sizeof(*m), "model");
	struct pd_st *st = NULL;
	struct pd_loader ld = { 0 };
	struct pd_flux_config *c;
	struct pd_slice nout;
	int64_t D;

	if (!m)
		return -1;
	m->be = be;
	m->dit.shard.rank = shard ? shard->rank : 0;
	m->dit.shard.count = shard ? shard->count : 1;
	m->dit.shard.block_first = shard ? shard->block_first : 0;
	m->dit.shard.block_count = shard ? shard->block_count : 0;
	m->dit.shard.whole_inputs = shard && shard->count > 1 ? shard->whole_inputs : 0;
	c = &m->cfg;
	if (pd_is_dir(dir) ? pd_flux_config_load(c, dir) || pd_st_open_component(&st, dir, "diffusion_pytorch_model")
			  : pd_flux_open_file(&st, dir, c, config_json))
		goto fail;
	pd_flux_mlp_dim(st, c);
	if (m->dit.shard.block_count == 0)
		m->dit.shard.block_count = pd_flux_blocks(c) - m->dit.shard.block_first;
	if (m->dit.shard.block_first < 0 || m->dit.shard.block_count < 0 ||
	    m->dit.shard.block_first + m->dit.shard.block_count > pd_flux_blocks(c)) {
		pd_errorf("%s: blocks %d..%d of %d", dir, m->dit.shard.block_first,
			  m->dit.shard.block_first + m->dit.shard.block_count, pd_flux_blocks(c));
		goto fail;
	}
	if (m->dit.shard.count < 1 || m->dit.shard.rank < 0 || m->dit.shard.rank >= m->dit.shard.count ||
	    c->heads % m->dit.shard.count || c->mlp_dim % m->dit.shard.count || c->dim % m->dit.shard.count) {
		pd_errorf("%s: %d heads, a width of %d and an MLP of %d cannot be split %d ways", dir, c->heads, c->dim,
			  c->mlp_dim, m->dit.shard.count);
		goto fail;
	}
	m->heads = c->heads / m->dit.shard.count;
	m->dim = (int64_t)m->heads * c->head_dim;
	m->mlp = c->mlp_dim / m->dit.shard.count;
	m->dit.ops = &pd_flux_dit_ops;
	m->dit.family = &pd_flux_family;
	m->dit.local_width = m->dim;
	m->dit.be = be;
	if (pd_flux_dit_info(c, &m->dit.info)) {
		pd_error_prefix("%s", dir);
		goto fail;
	}
	D = c->dim;
	ld.st = st;
	ld.be = be;
	/* the layers as adapters find them (pd_lora_set) */
	if (pd_flux_linears(c, &m->dit.layers, &m->dit.n_layers))
		goto fail;
	ld.each_linear = pd_dit_hold_linear;
	ld.each_ctx = &m->dit;
	/* embedders are replicated: small, and needed by every shard whole;
	 * every stage needs the time embedding for its modulations */
	if (m->dit.shard.block_first == 0) {
		m->x_embedder = pd_loader_linear(&ld, D, c->in_channels, c->qwen ? "img_in" : "x_embedder");
		m->context_embedder = pd_loader_linear(&ld, D, c->joint_attention_dim, c->qwen ? "txt_in" : "context_embedder");
		if (c->qwen)
			m->txt_norm = pd_loader_vector(&ld, c->joint_attention_dim, "txt_norm.weight");
	}
	m->time1 = pd_loader_linear(&ld, D, PD_TIME_CHANNELS, "time_text_embed.timestep_embedder.linear_1");
	m->time2 = pd_loader_linear(&ld, D, D, "time_text_embed.timestep_embedder.linear_2");
	if (c->guidance_embeds) {
		m->guid1 = pd_loader_linear(&ld, D, PD_TIME_CHANNELS, "time_text_embed.guidance_embedder.linear_1");
		m->guid2 = pd_loader_linear(&ld, D, D, "time_text_embed.guidance_embedder.linear_2");
	}
	if (c->pooled_projection_dim) {
		m->text1 = pd_loader_linear(&ld, D, c->pooled_projection_dim, "time_text_embed.text_embedder.linear_1");
		m->text2 = pd_loader_linear(&ld, D, D, "time_text_embed.text_embedder.linear_2");
	}
	if (m->dit.shard.block_first + m->dit.shard.block_count == pd_flux_blocks(c)) {
		nout = pd_col_slice(D, m->dit.shard.rank * 2 * D / m->dit.shard.count, 2 * D / m->dit.shard.count);
		m->norm_out = pd_loader_linear_slice(&ld, 2 * D, D, &nout, "norm_out.linear");
		m->proj_out = pd_loader_linear(&ld, c->out_channels, D, "proj_out");
	}
	m->dbl = pd_calloc((size_t)c->num_layers + 1, sizeof(*m->dbl), "blocks");
	m->sgl = pd_calloc((size_t)c->num_single_layers + 1, sizeof(*m->sgl), "blocks");
	if (!m->dbl || !m->sgl)
		goto fail;
	/* the blocks' weights only, as ComfyUI-GGUF quantizes FLUX files: the
	 * embedders and final layers stay as stored */
	ld.quantize = shard ? shard->quantize : PD_Q_F32;
	for (int k = m->dit.shard.block_first; k < m->dit.shard.block_first + m->dit.shard.block_count && !ld.failed; k++) {
		if (k < c->num_layers)
			pd_flux_load_double(&ld, m, k, &m->dbl[k]);
		else
			pd_flux_load_single(&ld, m, k - c->num_layers, &m->sgl[k - c->num_layers]);
	}
	if (ld.failed)
		goto fail;
	pd_st_close(st);
	*out = m;
	return 0;
fail:
	pd_st_close(st);
	pd_flux_free(m);
	return -1;
}

static int pd_flux_dit_forward_blocks(struct pd_dit *d, const struct pd_dit_call *in, int first, int count,
				      const float *x_in, float *x_out, float *out, const struct pd_dump *dump)
{
	return pd_flux_forward_blocks((struct pd_flux *)d, in, first, count, x_in, x_out, out, dump);
}

static void pd_flux_dit_free(struct pd_dit *d)
{
	pd_flux_free((struct pd_flux *)d);
}

static const struct pd_dit_ops pd_flux_dit_ops = {
	.forward_blocks = pd_flux_dit_forward_blocks,
	.free = pd_flux_dit_free,
};

int pd_flux_load_dit(struct pd_dit **out, const char *dir, const char *config, struct pd_backend *be,
		     const struct pd_dit_shard *shard)
{
	struct pd_flux *m;

	if (pd_flux_load_cfg(&m, dir, config, be, shard))
		return -1;
	*out = &m->dit;
	return 0;
}

struct pd_dit *pd_flux_dit(struct pd_flux *m)
{
	return &m->dit;
}

static void pd_flux_free_buffers(struct pd_flux *m)
{
	struct pd_backend *be = m->be;
	float **bufs[] = { &m->x, &m->nx, &m->q, &m->k, &m->v, &m->attn, &m->proj, &m->wide, &m->cos, &m->sin,
			   &m->vec, &m->io, &m->modpart };

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
		if (*bufs[i])
			be->ops->free(be, *bufs[i]);
		*bufs[i] = NULL;
	}
	free(m->host);
	m->host = NULL;
	m->cap_seq = 0;
}

void pd_flux_free(struct pd_flux *m)
{
	struct pd_backend *be;

	if (!m)
		return;
	be = m->be;
#define LF(l) be->ops->linear_free(be, (l))
#define VF(p) do { if (p) be->ops->free(be, (p)); } while (0)
	LF(m->x_embedder);
	LF(m->context_embedder);
	VF(m->txt_norm);
	LF(m->time1);
	LF(m->time2);
	LF(m->guid1);
	LF(m->guid2);
	LF(m->text1);
	LF(m->text2);
	LF(m->norm_out);
	LF(m->proj_out);
	for (int i = 0; m->dbl && i < m->cfg.num_layers; i++) {
		struct pd_flux_double *b = &m->dbl[i];

		LF(b->norm1); LF(b->norm1_ctx);
		LF(b->q); LF(b->k); LF(b->v);
		LF(b->add_q); LF(b->add_k); LF(b->add_v);
		VF(b->norm_q); VF(b->norm_k); VF(b->norm_added_q); VF(b->norm_added_k);
		LF(b->out); LF(b->add_out);
		LF(b->ff1); LF(b->ff2); LF(b->ff_ctx1); LF(b->ff_ctx2);
	}
	for (int i = 0; m->sgl && i < m->cfg.num_single_layers; i++) {
		struct pd_flux_single *b = &m->sgl[i];

		LF(b->norm);
		LF(b->q); LF(b->k); LF(b->v);
		VF(b->norm_q); VF(b->norm_k);
		LF(b->mlp); LF(b->proj_attn); LF(b->proj_mlp);
	}
#undef LF
#undef VF
	pd_flux_free_buffers(m);
	pd_dit_release(&m->dit);
	free(m->dbl);
	free(m->sgl);
	free(m);
}

const struct pd_flux_config *pd_flux_get_config(const struct pd_flux *m)
{
	return &m->cfg;
}

int pd_flux_dit_info(const struct pd_flux_config *c, struct pd_dit_info *info)
{
	double D = c->dim, M = c->mlp_dim;

	memset(info, 0, sizeof(*info));
	info->in_channels = c->in_channels;
	info->out_channels = c->out_channels;
	info->txt_width = c->joint_attention_dim;
	info->pooled_width = c->pooled_projection_dim;
	info->n_axes = c->n_axes;
	info->dim = c->dim;
	info->heads = c->heads;
	info->head_dim = c->head_dim;
	info->guidance = c->guidance_embeds;
	info->mlp_width = c->mlp_dim;
	info->blocks = pd_flux_blocks(c);
	if (info->blocks > PD_DIT_MAX_BLOCKS)
		return pd_errorf("%d blocks, more than the %d pdit takes", info->blocks, PD_DIT_MAX_BLOCKS);
	for (int k = 0; k < info->blocks; k++) {
		int dbl = k < c->num_layers;

		/* per token: q, k, v, the output projections and both
		 * feed-forwards of a double block (both streams over all rows);
		 * q, k, v, proj_mlp and proj_out over [D | M] of a single one */
		info->block_cost[k] = dbl ? 2.0 * (3 * D * D + D * D + 2 * D * M) : 2.0 * (3 * D * D + D * M + (D + M) * D);
		info->block_params[k] = dbl ? 20.0 * D * D + 4.0 * D * M : 7.0 * D * D + 2.0 * D * M;
		/* a double block sums attention and feed-forward outputs, a
		 * single block its one projection */
		info->block_reduces[k] = dbl ? 2 : 1;
		/* the attention's output and the MLP's, the same in both kinds
		 * (a double block gathers each stream's MLP apart) */
		info->block_row_inputs[k] = D + M;
		info->block_row_gathers[k] = dbl ? 3 : 2;
		/* two modulated LayerNorms (a read, a write) and two gated
		 * residual adds (two reads, a write) per double block, one of
		 * each per single block */
		info->block_passes[k] = dbl ? 10 : 5;
	}
	/* x_embedder, context_embedder, time/guidance/text embedders, norm_out,
	 * proj_out */
	info->fixed_params = D * c->in_channels + D * c->joint_attention_dim + 2.0 * 256 * D + 2.0 * D * D +
			     (c->pooled_projection_dim ? c->pooled_projection_dim * D + D * D : 0) + 2.0 * D * D +
			     D * c->out_channels;
	info->img_flops = 2.0 * c->in_channels * D + 2.0 * D * c->out_channels;
	info->txt_flops = 2.0 * c->joint_attention_dim * D;
	/* the modulations are matrix-vector products: counted, if small */
	info->call_flops = 2.0 * D * (c->num_layers * 12 * D + c->num_single_layers * 3 * D + 2 * D);
	return 0;
}

/* ----------------------------------------------------------------------- */
/* Embeddings                                                              */
/* ----------------------------------------------------------------------- */

void pd_rope_tables(const struct pd_flux_config *cfg, const float *ids, int64_t n, float *cos_out, float *sin_out)
{
	/* TF:512, EMB:1165-1173 */
	pd_dit_rope_tables(cfg->n_axes, cfg->axes_dims, cfg->head_dim, ids, n, cos_out, sin_out);
}

/* ----------------------------------------------------------------------- */
/* Forward                                                                 */
/* ----------------------------------------------------------------------- */

static int pd_flux_reserve(struct pd_flux *m, int64_t S)
{
	struct pd_backend *be = m->be;
	int64_t D = m->cfg.dim, W = m->dim + m->mlp, Dh = m->cfg.head_dim;
	int64_t io_w = m->cfg.in_channels, host_w;	/* W: the widest dump, proj_out's input */

	if (m->cfg.joint_attention_dim > io_w)
		io_w = m->cfg.joint_attention_dim;
	if (m->cfg.out_channels > io_w)
		io_w = m->cfg.out_channels;
	if (m->cfg.pooled_projection_dim > io_w)
		io_w = m->cfg.pooled_projection_dim;
	if (PD_TIME_CHANNELS > io_w)
		io_w = PD_TIME_CHANNELS;
	if (S < 1)
		S = 1;
	if (S <= m->cap_seq)
		return 0;
	pd_flux_free_buffers(m);
	m->x = pd_backend_alloc(be, (size_t)(S * D), "hidden states");
	m->nx = pd_backend_alloc(be, (size_t)(S * D), "normalised states");
	m->q = pd_backend_alloc(be, (size_t)(S * m->dim), "queries");
	m->k = pd_backend_alloc(be, (size_t)(S * m->dim), "keys");
	m->v = pd_backend_alloc(be, (size_t)(S * m->dim), "values");
	m->attn = pd_backend_alloc(be, (size_t)(S * m->dim), "attention output");
	m->proj = pd_backend_alloc(be, (size_t)(S * D), "projections");
	m->wide = pd_backend_alloc(be, (size_t)(S * m->mlp), "MLP activations");
	m->cos = pd_backend_alloc(be, (size_t)(S * Dh), "RoPE table");
	m->sin = pd_backend_alloc(be, (size_t)(S * Dh), "RoPE table");
	m->vec = pd_backend_alloc(be, (size_t)(32 * D + 4 * PD_TIME_CHANNELS), "embeddings");
	m->io = pd_backend_alloc(be, (size_t)(S * io_w), "inputs");
	m->modpart = pd_backend_alloc(be, (size_t)(6 * D), "modulation");
	host_w = W > D ? W : D;
	host_w = host_w > 2 * Dh ? host_w : 2 * Dh;
	m->host = pd_malloc((size_t)(S * host_w) * sizeof(float), "host staging");
	if (!m->host)
		return -1;
	if (pd_backend_check(be))
		return -1;
	m->cap_seq = S;
	return 0;
}

/* OUT [n_full] = modulation linear(silu(temb)); each shard computes its part
 * of the outputs and the parts are gathered in shard order. */
static void pd_flux_modulation(struct pd_flux *m, struct pd_linear *l, const float *silu_temb, int64_t n_full,
			       float *out)
{
	struct pd_backend *be = m->be;
	int64_t D = m->cfg.dim, part = n_full / m->dit.shard.count;

	if (m->dit.shard.count == 1) {
		be->ops->linear(be, l, silu_temb, D, 1, out, n_full, 0);
		return;
	}
	be->ops->linear(be, l, silu_temb, D, 1, m->modpart, part, 0);
	if (!be->failed)
		pd_dit_hook_result(&m->dit, m->dit.hooks.gather(m->dit.hooks.shard_ctx, m->modpart, (size_t)part, out));
}

/* Downloads a [rows, cols] block with row stride ld and hands it to the dump
 * as PREFIX.SUFFIX (SUFFIX alone without a prefix) with NDIM dims SHAPE. */
static void pd_flux_dump(struct pd_flux *m, const struct pd_dump *dump, const char *prefix, const char *suffix,
			 const float *p, int64_t ld, int64_t rows, int64_t cols, const int64_t *shape, int ndim)
{
	char name[160];

	if (!dump || m->be->failed)
		return;
	if (prefix)
		snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
	else
		snprintf(name, sizeof(name), "%s", suffix);
	for (int64_t r = 0; r < rows; r++)
		m->be->ops->download(m->be, m->host + r * cols, p + r * ld, (size_t)cols);
	dump->fn(dump->ctx, name, dump->index, m->host, ndim, shape);
}

/* The one way the blocks dump: ROWS x COLS of PTR (row stride LD) as
 * PREFIX.SUFFIX with shape [1, dims...], when the call has a dump (M and
 * DUMP in scope). Without one it costs a test. */
#define PD_FLUX_DUMP(prefix, suffix, ptr, ld, rows, cols, ...) \
	pd_flux_dump(m, dump, prefix, suffix, ptr, ld, rows, cols, (const int64_t[]){ 1, __VA_ARGS__ }, \
		     1 + (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)))

/* Dumps cat([attention A | MLP M]) of S rows: attention from m->attn, MLP
 * from m->wide, assembled on the host. */
static void pd_flux_dump_cat(struct pd_flux *m, const struct pd_dump *dump, const char *name, int64_t S, int64_t A,
			     int64_t M)
{
	int64_t shape[3] = { 1, S, A + M };

	if (!dump || m->be->failed)
		return;
	for (int64_t r = 0; r < S; r++) {
		m->be->ops->download(m->be, m->host + r * (A + M), m->attn + r * A, (size_t)A);
		m->be->ops->download(m->be, m->host + r * (A + M) + A, m->wide + r * M, (size_t)M);
	}
	dump->fn(dump->ctx, name, dump->index, m->host, 3, shape);
}

/* Dumps a plain LayerNorm of X (the golden files record norm2 before the
 * modulation that pdit fuses into it). */
static void pd_flux_dump_ln(struct pd_flux *m, const struct pd_dump *dump, const char *name, const float *x,
			    int64_t rows, float *tmp)
{
	int64_t D = m->cfg.dim;

	if (!dump)
		return;
	m->be->ops->layernorm_mod(m->be, tmp, D, x, D, rows, D, NULL, NULL, PD_FLUX_EPS);
	PD_FLUX_DUMP(NULL, name, tmp, D, rows, D, rows, D);
}

/* q, k, v (this shard's heads) for rows [r0, r0+n) of the joint sequence
 * from nx, then per-head RMSNorm with the given weights. READ: the
 * previous linear call read these rows (they are converted once). */
static void pd_flux_qkv(struct pd_flux *m, int64_t r0, int64_t n, struct pd_linear *lq, struct pd_linear *lk,
			struct pd_linear *lv, const float *wq, const float *wk, int read)
{
	struct pd_backend *be = m->be;
	int64_t D = m->cfg.dim, W = m->dim;

	be->ops->linear(be, lq, m->nx + r0 * D, D, n, m->q + r0 * W, W, read ? PD_LIN_SAME_INPUT : 0);
	be->ops->linear(be, lk, m->nx + r0 * D, D, n, m->k + r0 * W, W, PD_LIN_SAME_INPUT);
	be->ops->linear(be, lv, m->nx + r0 * D, D, n, m->v + r0 * W, W, PD_LIN_SAME_INPUT);
	be->ops->rmsnorm_heads(be, m->q + r0 * W, W, n, m->heads, m->cfg.head_dim, wq, PD_FLUX_EPS);
	be->ops->rmsnorm_heads(be, m->k + r0 * W, W, n, m->heads, m->cfg.head_dim, wk, PD_FLUX_EPS);
}

/* RoPE on q and k, then attention of this process's S tokens over the whole
 * sequence (through the attention seam when one is set) into OUT (row
 * stride ldo). */
static void pd_flux_attend(struct pd_flux *m, int layer, int64_t S, float *out, int64_t ldo,
			   const struct pd_dump *dump, const char *prefix)
{
	struct pd_backend *be = m->be;
	int64_t W = m->dim, H = m->heads, Dh = m->cfg.head_dim;

	be->ops->rope(be, m->q, W, S, (int)H, (int)Dh, m->cos, m->sin);
	be->ops->rope(be, m->k, W, S, (int)H, (int)Dh, m->cos, m->sin);
	PD_FLUX_DUMP(prefix, "attn.q_rope", m->q, W, S, W, S, H, Dh);
	PD_FLUX_DUMP(prefix, "attn.k_rope", m->k, W, S, W, S, H, Dh);
	PD_FLUX_DUMP(prefix, "attn.v", m->v, W, S, W, S, H, Dh);
	if (m->dit.hooks.attention) {
		if (!be->failed)
			pd_dit_hook_result(&m->dit, m->dit.hooks.attention(m->dit.hooks.attention_ctx, be, m->call, layer, out, ldo,
								      m->q, m->k, m->v, W, S, (int)H, (int)Dh));
	} else {
		be->ops->attention(be, out, ldo, NULL, m->q, W, m->k, W, m->v, W, S, S, (int)H, (int)Dh,
				   1.0f / sqrtf((float)Dh));
	}
	PD_FLUX_DUMP(prefix, "attn.sdpa_out", out, ldo, S, W, S, H, Dh);
}

/* One stream's modulation chunks, laid out as diffusers chunks them. */
struct pd_mod6 {
	const float *shift_msa, *scale_msa, *gate_msa, *shift_mlp, *scale_mlp, *gate_mlp;
};

static struct pd_mod6 pd_mod6_of(const float *m, int64_t D)
{
	struct pd_mod6 r = { m, m + D, m + 2 * D, m + 3 * D, m + 4 * D, m + 5 * D };

	return r;
}

/* Dumps of AdaLayerNormZero's returned values for one stream. */
static void pd_flux_dump_norm1(struct pd_flux *m, const struct pd_dump *dump, const char *prefix, int64_t r0,
			       int64_t n, const struct pd_mod6 *md)
{
	int64_t D = m->cfg.dim;

	PD_FLUX_DUMP(prefix, "x", m->nx + r0 * D, D, n, D, n, D);
	PD_FLUX_DUMP(prefix, "gate_msa", md->gate_msa, D, 1, D, D);
	PD_FLUX_DUMP(prefix, "shift_mlp", md->shift_mlp, D, 1, D, D);
	PD_FLUX_DUMP(prefix, "scale_mlp", md->scale_mlp, D, 1, D, D);
	PD_FLUX_DUMP(prefix, "gate_mlp", md->gate_mlp, D, 1, D, D);
}

/* The feed-forward input of one stream (rows [r0, r0+n)) and its output,
 * before pd_dit_rows_out: proj = FF(LN(x) (1 + scale) + shift). */
static void pd_flux_ff(struct pd_flux *m, int64_t r0, int64_t n, const struct pd_mod6 *md, struct pd_linear *ff1,
		       struct pd_linear *ff2, const struct pd_dump *dump, const char *norm_name)
{
	struct pd_backend *be = m->be;
	int64_t D = m->cfg.dim, M = m->mlp, ld, ldp = pd_dit_rows_width(&m->dit, D);
	const float *in;

	pd_flux_dump_ln(m, dump, norm_name, m->x + r0 * D, n, m->nx + r0 * D);
	be->ops->layernorm_mod(be, m->nx + r0 * D, D, m->x + r0 * D, D, n, D, md->scale_mlp, md->shift_mlp,
			       PD_FLUX_EPS);
	be->ops->linear(be, ff1, m->nx + r0 * D, D, n, m->wide, M, PD_LIN_GELU_TANH);
	in = pd_dit_rows_in(&m->dit, 0, m->wide, M, n, M, &ld);
	be->ops->linear(be, ff2, in, ld, n, m->proj + r0 * ldp, ldp, 0);
}

static void pd_flux_double_block(struct pd_flux *m, int i, int64_t T, int64_t L, const float *silu_temb,
				 float *mod, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_flux_double *b = &m->dbl[i];
	int64_t D = m->cfg.dim, S = T + L, W = m->dim, H = m->heads, Dh = m->cfg.head_dim;
	int64_t ld, ldp = pd_dit_rows_width(&m->dit, D);
	const float *in;
	struct pd_mod6 mi, mt;
	char p[64], name[128];

	snprintf(p, sizeof(p), "double.%d", i);
	/* NORM:130-170: six chunks from linear(silu(temb)) per stream. */
	pd_flux_modulation(m, b->norm1, silu_temb, 6 * D, mod);
	pd_flux_modulation(m, b->norm1_ctx, silu_temb, 6 * D, mod + 6 * D);
	mi = pd_mod6_of(mod, D);
	mt = pd_mod6_of(mod + 6 * D, D);
	be->ops->layernorm_mod(be, m->nx + T * D, D, m->x + T * D, D, L, D, mi.scale_msa, mi.shift_msa, PD_FLUX_EPS);
	be->ops->layernorm_mod(be, m->nx, D, m->x, D, T, D, mt.scale_msa, mt.shift_msa, PD_FLUX_EPS);
	if (dump) {
		snprintf(name, sizeof(name), "%s.norm1", p);
		pd_flux_dump_norm1(m, dump, name, T, L, &mi);
		snprintf(name, sizeof(name), "%s.norm1_context", p);
		pd_flux_dump_norm1(m, dump, name, 0, T, &mt);
	}
	/* TF:98-115: image and text q/k/v, per-head RMSNorm, joint (text first). */
	pd_flux_qkv(m, T, L, b->q, b->k, b->v, b->norm_q, b->norm_k, 0);
	pd_flux_qkv(m, 0, T, b->add_q, b->add_k, b->add_v, b->norm_added_q, b->norm_added_k, 0);
	PD_FLUX_DUMP(p, "attn.norm_q", m->q + T * W, W, L, W, L, H, Dh);
	PD_FLUX_DUMP(p, "attn.norm_k", m->k + T * W, W, L, W, L, H, Dh);
	PD_FLUX_DUMP(p, "attn.norm_added_q", m->q, W, T, W, T, H, Dh);
	PD_FLUX_DUMP(p, "attn.norm_added_k", m->k, W, T, W, T, H, Dh);
	pd_flux_attend(m, i, S, m->attn, W, dump, p);
	/* TF:133-138: split back, output projections (row-parallel: one
	 * reduction or gather for both streams). */
	in = pd_dit_rows_in(&m->dit, 0, m->attn, W, S, W, &ld);
	be->ops->linear(be, b->out, in + T * ld, ld, L, m->proj + T * ldp, ldp, 0);
	be->ops->linear(be, b->add_out, in, ld, T, m->proj, ldp, 0);
	pd_dit_rows_out(&m->dit, m->proj, S, D);
	PD_FLUX_DUMP(p, "attn.img_sdpa_flat", m->attn + T * W, W, L, W, L, W);
	PD_FLUX_DUMP(p, "attn.txt_sdpa_flat", m->attn, W, T, W, T, W);
	PD_FLUX_DUMP(p, "attn.img_out", m->proj + T * D, D, L, D, L, D);
	PD_FLUX_DUMP(p, "attn.txt_out", m->proj, D, T, D, T, D);
	/* TF:472-493: gated residuals and the feed-forward of each stream. */
	be->ops->gated_add(be, m->x + T * D, D, m->proj + T * D, D, L, D, mi.gate_msa);
	be->ops->gated_add(be, m->x, D, m->proj, D, T, D, mt.gate_msa);
	snprintf(name, sizeof(name), "%s.norm2", p);
	pd_flux_ff(m, T, L, &mi, b->ff1, b->ff2, dump, name);
	snprintf(name, sizeof(name), "%s.norm2_context", p);
	pd_flux_ff(m, 0, T, &mt, b->ff_ctx1, b->ff_ctx2, dump, name);
	pd_dit_rows_out(&m->dit, m->proj, S, D);
	PD_FLUX_DUMP(p, "ff", m->proj + T * D, D, L, D, L, D);
	PD_FLUX_DUMP(p, "ff_context", m->proj, D, T, D, T, D);
	be->ops->gated_add(be, m->x + T * D, D, m->proj + T * D, D, L, D, mi.gate_mlp);
	be->ops->gated_add(be, m->x, D, m->proj, D, T, D, mt.gate_mlp);
	PD_FLUX_DUMP(p, "out.encoder_hidden_states", m->x, D, T, D, T, D);
	PD_FLUX_DUMP(p, "out.hidden_states", m->x + T * D, D, L, D, L, D);
}

static void pd_flux_single_block(struct pd_flux *m, int i, int64_t T, int64_t L, const float *silu_temb,
				 float *mod, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	struct pd_flux_single *b = &m->sgl[i];
	int64_t D = m->cfg.dim, A = m->dim, M = m->mlp, S = T + L;
	int64_t H = m->heads, Dh = m->cfg.head_dim, lda, ldm, ldp = pd_dit_rows_width(&m->dit, D);
	const float *shift = mod, *scale = mod + D, *gate = mod + 2 * D, *in, *inm;
	char p[64], name[128];

	snprintf(p, sizeof(p), "single.%d", i);
	/* NORM:173-202: shift, scale, gate. */
	pd_flux_modulation(m, b->norm, silu_temb, 3 * D, mod);
	be->ops->layernorm_mod(be, m->nx, D, m->x, D, S, D, scale, shift, PD_FLUX_EPS);
	PD_FLUX_DUMP(p, "norm.x", m->nx, D, S, D, S, D);
	PD_FLUX_DUMP(p, "norm.gate", gate, D, 1, D, D);
	/* TF:396-407: mlp = GELU(proj_mlp(nx)), attention in parallel with it */
	be->ops->linear(be, b->mlp, m->nx, D, S, m->wide, M, PD_LIN_GELU_TANH);
	pd_flux_qkv(m, 0, S, b->q, b->k, b->v, b->norm_q, b->norm_k, 1);
	PD_FLUX_DUMP(p, "mlp_act", m->wide, M, S, M, S, M);
	PD_FLUX_DUMP(p, "attn.norm_q", m->q, A, S, A, S, H, Dh);
	PD_FLUX_DUMP(p, "attn.norm_k", m->k, A, S, A, S, H, Dh);
	pd_flux_attend(m, m->cfg.num_layers + i, S, m->attn, A, dump, p);
	if (dump) {
		PD_FLUX_DUMP(p, "attn.out", m->attn, A, S, A, S, A);
		snprintf(name, sizeof(name), "%s.proj_out_in", p);
		pd_flux_dump_cat(m, dump, name, S, A, M);
	}
	/* proj_out(cat(attn, mlp)) = attention part + MLP part */
	in = pd_dit_rows_in(&m->dit, 0, m->attn, A, S, A, &lda);
	inm = pd_dit_rows_in(&m->dit, 1, m->wide, M, S, M, &ldm);
	be->ops->linear(be, b->proj_attn, in, lda, S, m->proj, ldp, 0);
	be->ops->linear(be, b->proj_mlp, inm, ldm, S, m->proj, ldp, PD_LIN_ACCUMULATE);
	pd_dit_rows_out(&m->dit, m->proj, S, D);
	be->ops->gated_add(be, m->x, D, m->proj, D, S, D, gate);
	PD_FLUX_DUMP(p, "out.encoder_hidden_states", m->x, D, T, D, T, D);
	PD_FLUX_DUMP(p, "out.hidden_states", m->x + T * D, D, L, D, L, D);
}
/* timestep/guidance/text embeddings -> temb (EMB:1585-1626); writes temb
 * and silu(temb) into the vec area. */
static void pd_flux_temb(struct pd_flux *m, const struct pd_dit_call *in, float *temb, float *silu_temb,
			 float *tmp, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	const struct pd_flux_config *c = &m->cfg;
	int64_t D = c->dim, TC = PD_TIME_CHANNELS;
	float proj[PD_TIME_CHANNELS], freqs[PD_TIME_CHANNELS / 2];
	float *dproj = m->io, *h = tmp, *e_t = h + D, *e_g = e_t + D, *e_x = e_g + D;
	/* TF:725-727: the pipeline's /1000 is undone in float32. */
	float t = in->timestep * 1000.0f, g = in->guidance * 1000.0f;

	pd_timestep_embedding(t, PD_TIME_CHANNELS / 2, proj, freqs);
	if (dump) {
		int64_t one = 1, half = TC / 2;

		dump->fn(dump->ctx, "emb.timestep_x1000", -1, &t, 1, &one);
		dump->fn(dump->ctx, "emb.sinusoid_freqs", -1, freqs, 1, &half);
		{
			int64_t sh[2] = { 1, TC };

			dump->fn(dump->ctx, "emb.time_proj", dump->index, proj, 2, sh);
		}
	}
	be->ops->upload(be, dproj, proj, (size_t)TC);
	be->ops->linear(be, m->time1, dproj, TC, 1, h, D, 0);
	be->ops->silu(be, h, h, (size_t)D);
	be->ops->linear(be, m->time2, h, D, 1, e_t, D, 0);
	PD_FLUX_DUMP(NULL, "emb.timestep_embedder", e_t, D, 1, D, D);
	if (c->guidance_embeds) {
		pd_timestep_embedding(g, PD_TIME_CHANNELS / 2, proj, NULL);
		if (dump) {
			int64_t one = 1, sh[2] = { 1, TC };

			dump->fn(dump->ctx, "emb.guidance_x1000", -1, &g, 1, &one);
			dump->fn(dump->ctx, "emb.guidance_proj", dump->index, proj, 2, sh);
		}
		be->ops->upload(be, dproj, proj, (size_t)TC);
		be->ops->linear(be, m->guid1, dproj, TC, 1, h, D, 0);
		be->ops->silu(be, h, h, (size_t)D);
		be->ops->linear(be, m->guid2, h, D, 1, e_g, D, 0);
		PD_FLUX_DUMP(NULL, "emb.guidance_embedder", e_g, D, 1, D, D);
		be->ops->add(be, e_t, e_t, e_g, (size_t)D);
	}
	if (c->pooled_projection_dim) {
		be->ops->upload(be, dproj, in->pooled, (size_t)c->pooled_projection_dim);
		be->ops->linear(be, m->text1, dproj, c->pooled_projection_dim, 1, h, D, 0);
		be->ops->silu(be, h, h, (size_t)D);
		be->ops->linear(be, m->text2, h, D, 1, e_x, D, 0);
		PD_FLUX_DUMP(NULL, "emb.text_embedder", e_x, D, 1, D, D);
		be->ops->add(be, temb, e_t, e_x, (size_t)D);
	} else {
		/* Qwen-Image: the time alone */
		be->ops->copy2d(be, temb, D, e_t, D, 1, D);
	}
	PD_FLUX_DUMP(NULL, "emb.temb", temb, D, 1, D, D);
	be->ops->silu(be, silu_temb, temb, (size_t)D);
}

int pd_flux_blocks(const struct pd_flux_config *cfg)
{
	return cfg->num_layers + cfg->num_single_layers;
}

int pd_flux_forward(struct pd_flux *m, const struct pd_dit_call *in, float *out, const struct pd_dump *dump)
{
	return pd_dit_forward(&m->dit, in, out, dump);
}

int pd_flux_forward_blocks(struct pd_flux *m, const struct pd_dit_call *in, int first, int count,
			   const float *x_in, float *x_out, float *out, const struct pd_dump *dump)
{
	struct pd_backend *be = m->be;
	const struct pd_flux_config *c = &m->cfg;
	int64_t T = in->txt_len, L = in->img_len, S = T + L, D = c->dim, Dh = c->head_dim;
	float *temb, *silu_temb, *mod, *tmp, *hcos = NULL, *hsin = NULL, *ids = NULL;
	int rc = -1;

	if (T < 0 || L < 0)
		return pd_errorf("forward: negative token count");
	if (first < m->dit.shard.block_first || count < 0 || first + count > m->dit.shard.block_first + m->dit.shard.block_count ||
	    (!x_in && (first != 0 || !m->x_embedder)) || (out && !m->proj_out))
		return pd_errorf("forward: blocks %d..%d are not all held here", first, first + count);
	if (pd_flux_reserve(m, S))
		return -1;
	m->call = in;
	temb = m->vec;
	silu_temb = temb + D;
	mod = silu_temb + D;            /* 12 D: both streams' six chunks */
	tmp = mod + 12 * D;             /* 4 D */

	pd_flux_temb(m, in, temb, silu_temb, tmp, dump);

	if (x_in) {
		be->ops->upload(be, m->x, x_in, (size_t)(S * D));
	} else {
		/* TF:723, 734: embedders, text rows first. */
		be->ops->upload(be, m->io, in->img, (size_t)(L * c->in_channels));
		be->ops->linear(be, m->x_embedder, m->io, c->in_channels, L, m->x + T * D, D, 0);
		if (T > 0) {
			be->ops->upload(be, m->io, in->txt, (size_t)(T * c->joint_attention_dim));
			/* Qwen-Image: RMSNorm of the text first */
			if (m->txt_norm)
				be->ops->rmsnorm_heads(be, m->io, c->joint_attention_dim, T, 1, c->joint_attention_dim,
						       m->txt_norm, PD_FLUX_EPS);
			be->ops->linear(be, m->context_embedder, m->io, c->joint_attention_dim, T, m->x, D, 0);
		}
		PD_FLUX_DUMP(NULL, "emb.x_embedder", m->x + T * D, D, L, D, L, D);
		PD_FLUX_DUMP(NULL, "emb.context_embedder", m->x, D, T, D, T, D);
	}

	/* TF:749-750: RoPE tables for cat(txt_ids, img_ids). */
	hcos = pd_malloc((size_t)(S * Dh + 1) * sizeof(float), "RoPE table");
	hsin = pd_malloc((size_t)(S * Dh + 1) * sizeof(float), "RoPE table");
	ids = pd_malloc((size_t)(S * c->n_axes + 1) * sizeof(float), "position ids");
	if (!hcos || !hsin || !ids)
		goto out;
	if (T > 0)
		memcpy(ids, in->txt_ids, (size_t)(T * c->n_axes) * sizeof(float));
	if (L > 0)
		memcpy(ids + T * c->n_axes, in->img_ids, (size_t)(L * c->n_axes) * sizeof(float));
	pd_rope_tables(c, ids, S, hcos, hsin);
	be->ops->upload(be, m->cos, hcos, (size_t)(S * Dh));
	be->ops->upload(be, m->sin, hsin, (size_t)(S * Dh));
	if (dump) {
		int64_t sh[2] = { S, Dh };

		dump->fn(dump->ctx, "rope.cos", -1, hcos, 2, sh);
		dump->fn(dump->ctx, "rope.sin", -1, hsin, 2, sh);
	}

	/* The blocks in order, double then single. */
	for (int k = first; k < first + count; k++) {
		if (k < c->num_layers)
			pd_flux_double_block(m, k, T, L, silu_temb, mod, dump);
		else
			pd_flux_single_block(m, k - c->num_layers, T, L, silu_temb, mod, dump);
		if (pd_backend_check(be))
			goto out;
	}

	if (!out) {
		be->ops->download(be, x_out, m->x, (size_t)(S * D));
		rc = pd_backend_check(be);
		goto out;
	}
	/* TF:815-816, NORM:349: the final norm chunks scale first, then shift. */
	pd_flux_modulation(m, m->norm_out, silu_temb, 2 * D, mod);
	be->ops->layernorm_mod(be, m->nx, D, m->x + T * D, D, L, D, mod, mod + D, PD_FLUX_EPS);
	PD_FLUX_DUMP(NULL, "final.norm_out", m->nx, D, L, D, L, D);
	be->ops->linear(be, m->proj_out, m->nx, D, L, m->io, c->out_channels, 0);
	be->ops->download(be, out, m->io, (size_t)(L * c->out_channels));
	rc = pd_backend_check(be);
out:
	m->call = NULL;
	free(hcos);
	free(hsin);
	free(ids);
	return rc;
}
