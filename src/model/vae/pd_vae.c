/*
 * pd_vae.c - the AutoencoderKL decoder and encoder (diffusers
 * models/autoencoders/vae.py Decoder and Encoder, unet_2d_blocks.py
 * UNetMidBlock2D/UpDecoderBlock2D/DownEncoderBlock2D, resnet.py
 * ResnetBlock2D and Downsample2D, attention_processor.py AttnProcessor2_0).
 */
#include "pd_vae.h"
#include "pd_config.h"
#include "pd_loader.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_VAE_EPS 1e-6f

struct pd_vae_resnet {
	int c_in, c_out;                /* channels in and out */
	float *norm1_w, *norm1_b;       /* GroupNorm before conv1 */
	struct pd_conv *conv1;          /* 3x3, c_in -> c_out */
	float *norm2_w, *norm2_b;       /* GroupNorm before conv2 */
	struct pd_conv *conv2;          /* 3x3, c_out -> c_out */
	struct pd_conv *shortcut;       /* 1x1 when c_in != c_out, else NULL */
};

struct pd_vae_up {
	int n_resnets;                  /* layers_per_block + 1 */
	struct pd_vae_resnet res[PD_VAE_MAX_RESNETS];
	struct pd_conv *upconv;         /* conv after the 2x upsample; NULL in the last block */
};

/* An encoder block: resnets, then (but in the last block) Downsample2D,
 * a 3x3 convolution of stride 2 over the picture padded by one row and
 * column at its bottom and right. */
struct pd_vae_down {
	int n_resnets;                  /* layers_per_block */
	struct pd_vae_resnet res[PD_VAE_MAX_RESNETS];
	struct pd_conv *downconv;       /* the downsampler's convolution, or NULL */
};

/* The mid block both halves have: resnet, one-head attention, resnet. */
struct pd_vae_mid {
	struct pd_vae_resnet res[2];    /* before and after the attention */
	float *attn_norm_w, *attn_norm_b; /* the attention's GroupNorm */
	struct pd_linear *attn_q, *attn_k, *attn_v, *attn_out; /* its projections */
};

/* The encoder, loaded when a request brings a picture (pd_vae_load_encoder). */
struct pd_vae_enc {
	struct pd_conv *conv_in;        /* image -> block_out[0] channels */
	struct pd_vae_down down[PD_VAE_MAX_BLOCKS]; /* full resolution first */
	struct pd_vae_mid mid;          /* at the lowest resolution */
	float *norm_out_w, *norm_out_b; /* conv_norm_out */
	struct pd_conv *conv_out;       /* -> 2 x latent channels: the posterior's mean and log-variance */
	struct pd_conv *quant;          /* 1x1 quant_conv, when configured */
};

struct pd_vae {
	struct pd_vae_config cfg;       /* sizes */
	struct pd_backend *be;          /* compute backend (borrowed) */
	struct pd_vae_hooks hooks;      /* bands (one when not set) */
	struct pd_conv *post_quant;     /* 1x1 post_quant_conv, when configured */
	struct pd_conv *conv_in;        /* latent -> top channels */
	struct pd_vae_mid mid;          /* the decoder's mid block */
	struct pd_vae_up up[PD_VAE_MAX_BLOCKS]; /* up blocks, top resolution last */
	float *norm_out_w, *norm_out_b; /* conv_norm_out */
	struct pd_conv *conv_out;       /* -> image channels */
	struct pd_vae_enc *enc;         /* the encoder, once loaded; or NULL */
	char *path;                     /* where the weights are: the encoder loads from there */
};

int pd_vae_config_load(struct pd_vae_config *cfg, const char *dir)
{
	struct pd_config c;
	int rc;

	if (!pd_is_dir(dir)) {
		struct pd_st *st;

		if (pd_vae_open_file(&st, dir, cfg))
			return -1;
		pd_st_close(st);
		return 0;
	}
	if (pd_config_load_in(&c, dir, "config.json", "VAE"))
		return -1;
	rc = pd_vae_config_parse(cfg, &c);
	pd_config_free(&c);
	return rc;
}

int pd_vae_config_parse(struct pd_vae_config *cfg, const struct pd_config *cp)
{
	struct pd_config c = *cp;
	int64_t v, blocks[PD_VAE_MAX_BLOCKS];
	int rc = -1, n;

	memset(cfg, 0, sizeof(*cfg));
	if (pd_config_int(&c, "latent_channels", 1, 0, 1, 1 << 14, &v))
		goto out;
	cfg->latent_channels = (int)v;
	if (pd_config_int(&c, "out_channels", 0, 3, 1, 1 << 14, &v))
		goto out;
	cfg->out_channels = (int)v;
	if (pd_config_int(&c, "layers_per_block", 0, 2, 0, PD_VAE_MAX_RESNETS - 1, &v))
		goto out;
	cfg->layers_per_block = (int)v;
	if (pd_config_int(&c, "norm_num_groups", 0, 32, 1, 1 << 14, &v))
		goto out;
	cfg->groups = (int)v;
	if (pd_config_int_array(&c, "block_out_channels", PD_VAE_MAX_BLOCKS, 1, 1 << 14, blocks, &n))
		goto out;
	cfg->n_blocks = n;
	for (int i = 0; i < n; i++) {
		cfg->block_out[i] = (int)blocks[i];
		if (blocks[i] % cfg->groups) {
			pd_errorf("%s: block_out_channels %lld not divisible by norm_num_groups %d", c.path,
				  (long long)blocks[i], cfg->groups);
			goto out;
		}
	}
	if (pd_config_int(&c, "in_channels", 0, 3, 1, 1 << 14, &v))
		goto out;
	cfg->in_channels = (int)v;
	if (pd_config_bool(&c, "mid_block_add_attention", 0, 1, &cfg->mid_attention) ||
	    pd_config_bool(&c, "use_post_quant_conv", 0, 1, &cfg->post_quant_conv) ||
	    pd_config_bool(&c, "use_quant_conv", 0, 1, &cfg->quant_conv) ||
	    pd_config_double(&c, "scaling_factor", 0, 0.18215, &cfg->scaling_factor) ||
	    pd_config_double(&c, "shift_factor", 0, 0.0, &cfg->shift_factor))
		goto out;
	if (cfg->scaling_factor == 0) {
		pd_errorf("%s: scaling_factor must not be 0", c.path);
		goto out;
	}
	rc = 0;
out:
	return rc;
}

int pd_vae_scale(const struct pd_vae_config *cfg)
{
	return 1 << (cfg->n_blocks - 1);
}

static void pd_vae_load_resnet(struct pd_loader *ld, struct pd_vae_resnet *r, int c_in, int c_out,
			       const char *prefix)
{
	r->c_in = c_in;
	r->c_out = c_out;
	r->norm1_w = pd_loader_vector(ld, c_in, "%s.norm1.weight", prefix);
	r->norm1_b = pd_loader_vector(ld, c_in, "%s.norm1.bias", prefix);
	r->conv1 = pd_loader_conv(ld, c_out, c_in, 3, "%s.conv1", prefix);
	r->norm2_w = pd_loader_vector(ld, c_out, "%s.norm2.weight", prefix);
	r->norm2_b = pd_loader_vector(ld, c_out, "%s.norm2.bias", prefix);
	r->conv2 = pd_loader_conv(ld, c_out, c_out, 3, "%s.conv2", prefix);
	if (c_in != c_out)
		r->shortcut = pd_loader_conv(ld, c_out, c_in, 1, "%s.conv_shortcut", prefix);
}

/* N resnets of a block (BLOCK: "decoder.up_blocks.0"), the first from
 * C_IN channels, all to C_OUT. */
static void pd_vae_load_resnets(struct pd_loader *ld, struct pd_vae_resnet *res, int n, int c_in, int c_out,
				const char *block)
{
	char prefix[160];

	for (int j = 0; j < n; j++) {
		snprintf(prefix, sizeof(prefix), "%s.resnets.%d", block, j);
		pd_vae_load_resnet(ld, &res[j], j == 0 ? c_in : c_out, c_out, prefix);
	}
}

/* A mid block's weights under PREFIX ("decoder.mid_block"). */
static void pd_vae_load_mid(struct pd_loader *ld, struct pd_vae_mid *m, int c, int attention, const char *prefix)
{
	char name[128];

	snprintf(name, sizeof(name), "%s.resnets.0", prefix);
	pd_vae_load_resnet(ld, &m->res[0], c, c, name);
	if (attention) {
		m->attn_norm_w = pd_loader_vector(ld, c, "%s.attentions.0.group_norm.weight", prefix);
		m->attn_norm_b = pd_loader_vector(ld, c, "%s.attentions.0.group_norm.bias", prefix);
		m->attn_q = pd_loader_linear(ld, c, c, "%s.attentions.0.to_q", prefix);
		m->attn_k = pd_loader_linear(ld, c, c, "%s.attentions.0.to_k", prefix);
		m->attn_v = pd_loader_linear(ld, c, c, "%s.attentions.0.to_v", prefix);
		m->attn_out = pd_loader_linear(ld, c, c, "%s.attentions.0.to_out.0", prefix);
	}
	snprintf(name, sizeof(name), "%s.resnets.1", prefix);
	pd_vae_load_resnet(ld, &m->res[1], c, c, name);
}

int pd_vae_load(struct pd_vae **out, const char *dir, struct pd_backend *be)
{
	struct pd_vae *v = pd_calloc(1, sizeof(*v), "VAE");
	struct pd_vae_config *c;
	struct pd_st *st = NULL;
	struct pd_loader ld = { 0 };
	char prefix[128];
	int top, prev;

	if (!v)
		return -1;
	v->be = be;
	v->hooks.bands = 1;
	c = &v->cfg;
	if (pd_is_dir(dir) ? pd_vae_config_load(c, dir) || pd_st_open_component(&st, dir, "diffusion_pytorch_model")
			  : pd_vae_open_file(&st, dir, c))
		goto fail;
	ld.st = st;
	ld.be = be;
	top = c->block_out[c->n_blocks - 1];
	if (c->post_quant_conv)
		v->post_quant = pd_loader_conv(&ld, c->latent_channels, c->latent_channels, 1, "post_quant_conv");
	v->conv_in = pd_loader_conv(&ld, top, c->latent_channels, 3, "decoder.conv_in");
	pd_vae_load_mid(&ld, &v->mid, top, c->mid_attention, "decoder.mid_block");
	prev = top;
	for (int i = 0; i < c->n_blocks; i++) {
		int ch = c->block_out[c->n_blocks - 1 - i];
		struct pd_vae_up *u = &v->up[i];

		u->n_resnets = c->layers_per_block + 1;
		snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d", i);
		pd_vae_load_resnets(&ld, u->res, u->n_resnets, prev, ch, prefix);
		if (i < c->n_blocks - 1)
			u->upconv = pd_loader_conv(&ld, ch, ch, 3, "decoder.up_blocks.%d.upsamplers.0.conv", i);
		prev = ch;
	}
	v->norm_out_w = pd_loader_vector(&ld, c->block_out[0], "decoder.conv_norm_out.weight");
	v->norm_out_b = pd_loader_vector(&ld, c->block_out[0], "decoder.conv_norm_out.bias");
	v->conv_out = pd_loader_conv(&ld, c->out_channels, c->block_out[0], 3, "decoder.conv_out");
	v->path = pd_strdup(dir);
	if (ld.failed || !v->path)
		goto fail;
	pd_st_close(st);
	*out = v;
	return 0;
fail:
	pd_st_close(st);
	pd_vae_free(v);
	return -1;
}

static void pd_vae_free_resnet(struct pd_backend *be, struct pd_vae_resnet *r)
{
	float *vecs[] = { r->norm1_w, r->norm1_b, r->norm2_w, r->norm2_b };

	for (int i = 0; i < 4; i++)
		if (vecs[i])
			be->ops->free(be, vecs[i]);
	be->ops->conv_free(be, r->conv1);
	be->ops->conv_free(be, r->conv2);
	be->ops->conv_free(be, r->shortcut);
}

static void pd_vae_free_vec(struct pd_backend *be, float *p)
{
	if (p)
		be->ops->free(be, p);
}

static void pd_vae_free_mid(struct pd_backend *be, struct pd_vae_mid *m)
{
	pd_vae_free_resnet(be, &m->res[0]);
	pd_vae_free_resnet(be, &m->res[1]);
	be->ops->linear_free(be, m->attn_q);
	be->ops->linear_free(be, m->attn_k);
	be->ops->linear_free(be, m->attn_v);
	be->ops->linear_free(be, m->attn_out);
	pd_vae_free_vec(be, m->attn_norm_w);
	pd_vae_free_vec(be, m->attn_norm_b);
}

static void pd_vae_free_encoder(struct pd_backend *be, struct pd_vae_enc *e)
{
	if (!e)
		return;
	be->ops->conv_free(be, e->conv_in);
	for (int i = 0; i < PD_VAE_MAX_BLOCKS; i++) {
		for (int j = 0; j < e->down[i].n_resnets; j++)
			pd_vae_free_resnet(be, &e->down[i].res[j]);
		be->ops->conv_free(be, e->down[i].downconv);
	}
	pd_vae_free_mid(be, &e->mid);
	pd_vae_free_vec(be, e->norm_out_w);
	pd_vae_free_vec(be, e->norm_out_b);
	be->ops->conv_free(be, e->conv_out);
	be->ops->conv_free(be, e->quant);
	free(e);
}

void pd_vae_free(struct pd_vae *v)
{
	struct pd_backend *be;

	if (!v)
		return;
	be = v->be;
	be->ops->conv_free(be, v->post_quant);
	be->ops->conv_free(be, v->conv_in);
	pd_vae_free_mid(be, &v->mid);
	for (int i = 0; i < PD_VAE_MAX_BLOCKS; i++) {
		for (int j = 0; j < v->up[i].n_resnets; j++)
			pd_vae_free_resnet(be, &v->up[i].res[j]);
		be->ops->conv_free(be, v->up[i].upconv);
	}
	be->ops->conv_free(be, v->conv_out);
	pd_vae_free_vec(be, v->norm_out_w);
	pd_vae_free_vec(be, v->norm_out_b);
	pd_vae_free_encoder(be, v->enc);
	free(v->path);
	free(v);
}

int pd_vae_has_picture(const struct pd_vae *v)
{
	return v->hooks.bands == 1 || v->hooks.band == 0;
}

const struct pd_vae_config *pd_vae_get_config(const struct pd_vae *v)
{
	return &v->cfg;
}

const struct pd_vae_hooks pd_vae_whole = { .band = 0, .bands = 1 };

void pd_vae_set_hooks(struct pd_vae *v, const struct pd_vae_hooks *hooks)
{
	memset(&v->hooks, 0, sizeof(v->hooks));
	if (hooks)
		v->hooks = *hooks;
	if (v->hooks.bands < 1)
		v->hooks.bands = 1;
}

/* ----------------------------------------------------------------------- */
/* Decode                                                                  */
/* ----------------------------------------------------------------------- */

/* One decode: the band being decoded. Heights are the band's at the
 * current resolution; H is the whole picture's.
 *
 * With bands, a convolution's input lives in the halo layout: each channel
 * has one spare row above and below the band's rows, [c, h + 2, w], so the
 * neighbours' rows can be put there and the convolution read it as it is.
 * GroupNorm and the upsampler write straight into that layout. One band
 * uses the packed layout [c, h, w] and the usual zero padding. */
struct pd_vae_run {
	struct pd_vae *v;
	int banded;                     /* more than one band */
	int H;                          /* whole height at the current resolution */
	double *stats;                  /* GroupNorm's sums (backend memory: the bands add them up) */
};

static int64_t pd_in_cstride(const struct pd_vae_run *r, int h, int w)
{
	return r->banded ? (int64_t)(h + 2) * w : (int64_t)h * w;
}

static int64_t pd_in_offset(const struct pd_vae_run *r, int w)
{
	return r->banded ? w : 0;
}

static void pd_vae_fail_hook(struct pd_vae_run *r, int rc)
{
	if (rc && !r->v->be->failed)
		pd_backend_fail(r->v->be, "%s", pd_last_error());
}

/* A 3x3 convolution of the band; XIN is in the input layout. */
static void pd_vae_conv3(struct pd_vae_run *r, struct pd_conv *c, int c_in, float *xin, int h, int w, float *y)
{
	struct pd_backend *be = r->v->be;

	if (!r->banded) {
		be->ops->conv(be, c, xin, h, w, 0, y);
		return;
	}
	if (!be->failed)
		pd_vae_fail_hook(r, r->v->hooks.halo(r->v->hooks.ctx, be, xin, c_in, h, w, 1));
	be->ops->conv(be, c, xin, h, w, 1, y);
}

/* GroupNorm over the whole picture (the bands add their statistics), into Y
 * with channel stride y_cstride. */
static void pd_vae_group_norm(struct pd_vae_run *r, float *y, int64_t y_cstride, const float *x, int c, int h, int w,
			      const float *gamma, const float *beta, int silu)
{
	struct pd_backend *be = r->v->be;
	int groups = r->v->cfg.groups;

	be->ops->group_stats(be, x, c, (int64_t)h * w, groups, r->stats);
	if (r->banded && !be->failed)
		pd_vae_fail_hook(r, r->v->hooks.reduce(r->v->hooks.ctx, r->stats, 2 * (size_t)groups));
	be->ops->group_apply(be, y, y_cstride, x, c, (int64_t)h * w, groups, r->stats, (double)(c / groups) * r->H * w,
			     gamma, beta, PD_VAE_EPS, silu);
}

/* out = shortcut(x) + conv2(silu(GN2(conv1(silu(GN1(x)))))); X and OUT may
 * be the same packed buffer; T1 (input layout, then packed) and T2 (packed)
 * are scratch. */
static void pd_vae_resnet_fwd(struct pd_vae_run *r, const struct pd_vae_resnet *res, const float *x, int h, int w,
			      float *out, float *t1, float *t2)
{
	struct pd_backend *be = r->v->be;
	int64_t hw = (int64_t)h * w, cs = pd_in_cstride(r, h, w), off = pd_in_offset(r, w);

	pd_vae_group_norm(r, t1 + off, cs, x, res->c_in, h, w, res->norm1_w, res->norm1_b, 1);
	pd_vae_conv3(r, res->conv1, res->c_in, t1, h, w, t2);
	pd_vae_group_norm(r, t1 + off, cs, t2, res->c_out, h, w, res->norm2_w, res->norm2_b, 1);
	pd_vae_conv3(r, res->conv2, res->c_out, t1, h, w, t2);
	if (res->shortcut) {
		be->ops->conv(be, res->shortcut, x, h, w, 0, t1);
		be->ops->add(be, out, t1, t2, (size_t)(res->c_out * hw));
	} else {
		be->ops->add(be, out, x, t2, (size_t)(res->c_out * hw));
	}
}

/* The mid block's single-head attention over all pixels of the picture, in
 * place on the band X [c, h w]: the bands' keys and values are gathered, so
 * every query sees every pixel. S0, S1 hold c x (band pixels); S2..S4 hold c
 * x (all pixels). */
static void pd_vae_attention(struct pd_vae_run *r, const struct pd_vae_mid *m, float *x, int c, int h, int w,
			     float *s0, float *s1, float *s2, float *s3, float *s4)
{
	struct pd_vae *v = r->v;
	struct pd_backend *be = v->be;
	int64_t hw = (int64_t)h * w, all = hw;
	float *k = s3, *vv = s4;

	pd_vae_group_norm(r, s0, hw, x, c, h, w, m->attn_norm_w, m->attn_norm_b, 0);
	be->ops->transpose(be, s1, s0, c, hw);	/* [hw, c] */
	be->ops->linear(be, m->attn_q, s1, c, hw, s2, c, 0);
	if (r->banded) {
		struct pd_vae_hooks *hk = &v->hooks;
		size_t n_all[256];

		if (hk->bands > 256) {
			pd_backend_fail(be, "VAE: more than 256 bands");
			return;
		}
		all = (int64_t)r->H * w;
		for (int b = 0; b < hk->bands; b++)
			n_all[b] = (size_t)(pd_chunk_len(r->H, hk->bands, b) * w * c);
		/* this band's keys and values first go where gathering reads them
		 * (q, k and v read s1, which the gathering leaves alone) */
		be->ops->linear(be, m->attn_k, s1, c, hw, s0, c, PD_LIN_SAME_INPUT);
		if (!be->failed)
			pd_vae_fail_hook(r, hk->gather(hk->ctx, s0, (size_t)(hw * c), k, n_all));
		be->ops->linear(be, m->attn_v, s1, c, hw, s0, c, PD_LIN_SAME_INPUT);
		if (!be->failed)
			pd_vae_fail_hook(r, hk->gather(hk->ctx, s0, (size_t)(hw * c), vv, n_all));
	} else {
		be->ops->linear(be, m->attn_k, s1, c, hw, k, c, PD_LIN_SAME_INPUT);
		be->ops->linear(be, m->attn_v, s1, c, hw, vv, c, PD_LIN_SAME_INPUT);
	}
	be->ops->attention(be, s0, c, NULL, s2, c, k, c, vv, c, hw, all, 1, c, 1.0f / sqrtf((float)c));
	be->ops->linear(be, m->attn_out, s0, c, hw, s1, c, 0);
	be->ops->transpose(be, s0, s1, hw, c);	/* back to [c, hw] */
	be->ops->add(be, x, x, s0, (size_t)(c * hw));
}

/* A mid block on X [c, h w], in place: resnet, attention (when the model
 * has it), resnet; BUF as pd_vae_decode's scratch. */
static void pd_vae_mid_fwd(struct pd_vae_run *r, const struct pd_vae_mid *m, float *x, int c, int h, int w,
			   float *const *buf)
{
	pd_vae_resnet_fwd(r, &m->res[0], x, h, w, x, buf[1], buf[2]);
	if (r->v->cfg.mid_attention)
		pd_vae_attention(r, m, x, c, h, w, buf[1], buf[2], buf[3], buf[4], buf[5]);
	pd_vae_resnet_fwd(r, &m->res[1], x, h, w, x, buf[1], buf[2]);
}

/* A run's six buffers and its GroupNorm statistics back to the backend. */
static void pd_vae_run_release(struct pd_vae_run *r, float **buf)
{
	for (int i = 0; i < 6; i++)
		if (buf[i])
			r->v->be->ops->free(r->v->be, buf[i]);
	pd_backend_release(r->v->be, (float *)r->stats);
}

static void pd_vae_dump(struct pd_vae *v, const struct pd_dump *dump, const char *name, const float *p, int c,
			int h, int w, float *host)
{
	int64_t shape[4] = { 1, c, h, w };

	if (!dump || v->be->failed || v->hooks.bands > 1)
		return;
	v->be->ops->download(v->be, host, p, (size_t)c * h * w);
	dump->fn(dump->ctx, name, dump->index, host, 4, shape);
}

/* Largest activation (in floats) of any stage for a band of h x w latent
 * pixels. */
static size_t pd_vae_work_size(const struct pd_vae_config *c, int h, int w)
{
	size_t hw = (size_t)h * w, best = 0;
	int prev = c->block_out[c->n_blocks - 1];

	best = (size_t)(prev > c->latent_channels ? prev : c->latent_channels) * hw;
	for (int i = 0; i < c->n_blocks; i++) {
		int ch = c->block_out[c->n_blocks - 1 - i];
		size_t m = (size_t)(prev > ch ? prev : ch) * hw;

		if (m > best)
			best = m;
		if (i < c->n_blocks - 1) {
			hw *= 4;
			if ((size_t)ch * hw > best)
				best = (size_t)ch * hw;
		}
		prev = ch;
	}
	if ((size_t)c->out_channels * hw > best)
		best = (size_t)c->out_channels * hw;
	return best;
}

int pd_vae_decode(struct pd_vae *v, const float *z, int h, int w, float *img, const struct pd_dump *dump)
{
	struct pd_backend *be = v->be;
	const struct pd_vae_config *c = &v->cfg;
	struct pd_vae_hooks *hk = &v->hooks;
	struct pd_vae_run r = { v, hk->bands > 1, h, NULL };
	int top = c->block_out[c->n_blocks - 1], ch = top, f = pd_vae_scale(c);
	int b0 = (int)pd_chunk_start(h, hk->bands, hk->band), bh = (int)pd_chunk_len(h, hk->bands, hk->band);
	int cmax = c->latent_channels, hh;
	size_t n, n_mid = (size_t)top * h * w;
	/* buf[0] holds the activations, buf[1] (with room for halo rows) and
	 * buf[2] are scratch of the band's largest activation; the mid-block
	 * attention needs three more of all pixels at its resolution. */
	float *buf[6] = { 0 }, *x, *host = NULL;
	char name[64];
	int rc = -1;

	if (h < 1 || w < 1)
		return pd_errorf("VAE: empty latent");
	if (hk->bands > h)
		return pd_errorf("VAE: %d bands for %d latent rows", hk->bands, h);
	for (int i = 0; i < c->n_blocks; i++)
		cmax = c->block_out[i] > cmax ? c->block_out[i] : cmax;
	n = pd_vae_work_size(c, bh, w);
	for (int i = 0; i < 6; i++) {
		size_t m = i >= 3 ? n_mid : i == 1 && r.banded ? n + 2 * (size_t)cmax * (size_t)w * (size_t)f : n;

		buf[i] = pd_backend_alloc(be, m, "VAE activations");
	}
	r.stats = (double *)pd_backend_alloc(be, 4 * (size_t)c->groups, "GroupNorm statistics");
	if (dump)
		host = pd_malloc(n * sizeof(float), "VAE dump");
	if (pd_backend_check(be) || (dump && !host))
		goto out;
	x = buf[0];
	hh = bh;
	if (v->post_quant) {
		for (int k = 0; k < c->latent_channels; k++)
			be->ops->upload(be, buf[2] + (int64_t)k * bh * w, z + ((int64_t)k * h + b0) * w, (size_t)bh * w);
		be->ops->conv(be, v->post_quant, buf[2], hh, w, 0, x);
		be->ops->copy2d(be, buf[1] + pd_in_offset(&r, w), pd_in_cstride(&r, hh, w), x, (int64_t)hh * w,
				c->latent_channels, (int64_t)hh * w);
	} else {
		/* this band's latent rows, every channel, in the input layout */
		for (int k = 0; k < c->latent_channels; k++)
			be->ops->upload(be, buf[1] + pd_in_offset(&r, w) + k * pd_in_cstride(&r, hh, w),
					z + ((int64_t)k * h + b0) * w, (size_t)bh * w);
	}
	pd_vae_conv3(&r, v->conv_in, c->latent_channels, buf[1], hh, w, x);
	pd_vae_dump(v, dump, "vae.dec.conv_in", x, top, hh, w, host);
	pd_vae_mid_fwd(&r, &v->mid, x, top, hh, w, buf);
	pd_vae_dump(v, dump, "vae.dec.mid_block", x, top, hh, w, host);
	for (int i = 0; i < c->n_blocks; i++) {
		struct pd_vae_up *u = &v->up[i];

		for (int j = 0; j < u->n_resnets; j++)
			pd_vae_resnet_fwd(&r, &u->res[j], x, hh, w, x, buf[1], buf[2]);
		ch = u->res[u->n_resnets - 1].c_out;
		if (u->upconv) {
			/* bands stay aligned: each doubles its own rows */
			be->ops->upsample2x(be, buf[1] + pd_in_offset(&r, 2 * w), pd_in_cstride(&r, 2 * hh, 2 * w), x, ch,
					    hh, w);
			hh *= 2;
			w *= 2;
			r.H *= 2;
			pd_vae_conv3(&r, u->upconv, ch, buf[1], hh, w, x);
		}
		snprintf(name, sizeof(name), "vae.dec.up_blocks.%d", i);
		pd_vae_dump(v, dump, name, x, ch, hh, w, host);
		if (pd_backend_check(be))
			goto out;
	}
	pd_vae_group_norm(&r, buf[1] + pd_in_offset(&r, w), pd_in_cstride(&r, hh, w), x, ch, hh, w, v->norm_out_w,
			  v->norm_out_b, 0);
	pd_vae_dump(v, dump, "vae.dec.conv_norm_out", buf[1], ch, hh, w, host);
	/* halo rows included: their values are replaced before use */
	be->ops->silu(be, buf[1], buf[1], (size_t)(ch * pd_in_cstride(&r, hh, w)));
	pd_vae_dump(v, dump, "vae.dec.conv_act", buf[1], ch, hh, w, host);
	pd_vae_conv3(&r, v->conv_out, ch, buf[1], hh, w, x);
	if (!r.banded) {
		be->ops->download(be, img, x, (size_t)c->out_channels * hh * w);
	} else {
		/* one channel at a time, the bands' rows follow each other: they
		 * land in place in band 0's picture */
		size_t n_all[256];
		float *mine = pd_malloc((size_t)hh * w * sizeof(float), "VAE band");

		if (!mine || hk->bands > 256) {
			free(mine);
			pd_errorf("VAE: cannot collect %d bands", hk->bands);
			goto out;
		}
		for (int b = 0; b < hk->bands; b++)
			n_all[b] = (size_t)(pd_chunk_len(h, hk->bands, b) * f * w);
		for (int k = 0; k < c->out_channels && !be->failed; k++) {
			be->ops->download(be, mine, x + (int64_t)k * hh * w, (size_t)hh * w);
			pd_vae_fail_hook(&r, hk->collect(hk->ctx, mine, (size_t)hh * w,
							 hk->band == 0 ? img + (size_t)k * r.H * w : NULL, n_all));
		}
		free(mine);
	}
	rc = pd_backend_check(be);
out:
	pd_vae_run_release(&r, buf);
	free(host);
	return rc;
}

/* ----------------------------------------------------------------------- */
/* Encode                                                                  */
/* ----------------------------------------------------------------------- */

int pd_vae_load_encoder(struct pd_vae *v)
{
	const struct pd_vae_config *c = &v->cfg;
	struct pd_vae_enc *e;
	struct pd_st *st = NULL;
	struct pd_vae_config file_cfg;
	struct pd_loader ld = { 0 };
	char prefix[128];
	int prev;

	if (v->enc)
		return 0;
	e = pd_calloc(1, sizeof(*e), "the VAE encoder");
	if (!e)
		return -1;
	if (pd_is_dir(v->path) ? pd_st_open_component(&st, v->path, "diffusion_pytorch_model")
			       : pd_vae_open_file(&st, v->path, &file_cfg))
		goto fail;
	ld.st = st;
	ld.be = v->be;
	e->conv_in = pd_loader_conv(&ld, c->block_out[0], c->in_channels, 3, "encoder.conv_in");
	prev = c->block_out[0];
	for (int i = 0; i < c->n_blocks; i++) {
		struct pd_vae_down *d = &e->down[i];
		int ch = c->block_out[i];

		d->n_resnets = c->layers_per_block;
		snprintf(prefix, sizeof(prefix), "encoder.down_blocks.%d", i);
		pd_vae_load_resnets(&ld, d->res, d->n_resnets, prev, ch, prefix);
		if (i < c->n_blocks - 1)
			d->downconv = pd_loader_conv(&ld, ch, ch, 3, "encoder.down_blocks.%d.downsamplers.0.conv", i);
		prev = ch;
	}
	pd_vae_load_mid(&ld, &e->mid, prev, c->mid_attention, "encoder.mid_block");
	e->norm_out_w = pd_loader_vector(&ld, prev, "encoder.conv_norm_out.weight");
	e->norm_out_b = pd_loader_vector(&ld, prev, "encoder.conv_norm_out.bias");
	e->conv_out = pd_loader_conv(&ld, 2 * c->latent_channels, prev, 3, "encoder.conv_out");
	if (c->quant_conv)
		e->quant = pd_loader_conv(&ld, 2 * c->latent_channels, 2 * c->latent_channels, 1, "quant_conv");
	if (ld.failed)
		goto fail;
	pd_st_close(st);
	v->enc = e;
	return 0;
fail:
	pd_st_close(st);
	pd_vae_free_encoder(v->be, e);
	return -1;
}

/* Largest activation (floats) of the encoder at H x W: a block's widest
 * resnet at its resolution, the input, conv_out's moments. */
static size_t pd_vae_enc_size(const struct pd_vae_config *c, int H, int W)
{
	size_t hw = (size_t)H * W, best = (size_t)c->in_channels * hw;
	int prev = c->block_out[0];

	for (int i = 0; i < c->n_blocks; i++) {
		int ch = c->block_out[i];
		size_t m = (size_t)(prev > ch ? prev : ch) * hw;

		best = m > best ? m : best;
		if (i < c->n_blocks - 1)
			hw /= 4;
		prev = ch;
	}
	if ((size_t)2 * c->latent_channels * hw > best)
		best = (size_t)2 * c->latent_channels * hw;
	return best;
}

int pd_vae_encode(struct pd_vae *v, const float *img, int H, int W, float *moments)
{
	struct pd_backend *be = v->be;
	const struct pd_vae_config *c = &v->cfg;
	const struct pd_vae_hooks *hk = &v->hooks;
	struct pd_vae_enc *e = v->enc;
	struct pd_vae_run r = { v, hk->bands > 1, H, NULL };
	int f = pd_vae_scale(c), w = W, ch = c->block_out[0], top = c->block_out[c->n_blocks - 1], cmax = c->in_channels;
	int hl = H / f, b0 = 0, bh = hl, h;
	size_t n, n_mid, n_all[256];
	float *buf[6] = { 0 }, *x;
	int rc = -1;

	if (!e)
		return pd_errorf("VAE: the encoder is not loaded");
	if (H < f || W < f || H % f || W % f)
		return pd_errorf("VAE: a %dx%d picture does not encode: sides must be multiples of %d", W, H, f);
	if (hk->bands > hl || hk->bands > 256)
		return pd_errorf("VAE: %d bands for %d latent rows", hk->bands, hl);
	/* a band is whole latent rows: its picture rows halve with every
	 * downsampling and stay aligned, as the decoder's double */
	if (r.banded) {
		b0 = (int)pd_chunk_start(hl, hk->bands, hk->band);
		bh = (int)pd_chunk_len(hl, hk->bands, hk->band);
	}
	h = bh * f;
	for (int i = 0; i < c->n_blocks; i++)
		cmax = c->block_out[i] > cmax ? c->block_out[i] : cmax;
	n = pd_vae_enc_size(c, h, W);
	n_mid = (size_t)top * hl * (W / f);
	for (int i = 0; i < 6; i++) {
		/* buf[1] and buf[2] take the halo rows of a band's input */
		size_t m = i >= 3 ? n_mid : i > 0 && r.banded ? n + 2 * (size_t)cmax * (size_t)W : n;

		buf[i] = pd_backend_alloc(be, m, "VAE activations");
	}
	r.stats = (double *)pd_backend_alloc(be, 4 * (size_t)c->groups, "GroupNorm statistics");
	if (pd_backend_check(be))
		goto out;
	x = buf[0];
	/* the band's rows of every channel, in the input layout */
	for (int k = 0; k < c->in_channels; k++)
		be->ops->upload(be, buf[1] + pd_in_offset(&r, w) + k * pd_in_cstride(&r, h, w),
				img + ((int64_t)k * H + (int64_t)b0 * f) * W, (size_t)h * w);
	pd_vae_conv3(&r, e->conv_in, c->in_channels, buf[1], h, w, x);
	for (int i = 0; i < c->n_blocks; i++) {
		struct pd_vae_down *d = &e->down[i];

		for (int j = 0; j < d->n_resnets; j++)
			pd_vae_resnet_fwd(&r, &d->res[j], x, h, w, x, buf[1], buf[2]);
		ch = d->n_resnets ? d->res[d->n_resnets - 1].c_out : ch;
		if (d->downconv) {
			/* stride 2 over the picture padded at its bottom and right
			 * is the stride-1 convolution (padded all round) read at its
			 * odd rows and columns: the same sums, four times the work
			 * of the encoder's three smallest convolutions. A band
			 * starts at an even row: its odd rows are the picture's,
			 * and its last reads the next band's first (the halo). */
			float *xin = x;

			if (r.banded) {
				be->ops->copy2d(be, buf[2] + pd_in_offset(&r, w), pd_in_cstride(&r, h, w), x, (int64_t)h * w,
						ch, (int64_t)h * w);
				xin = buf[2];
			}
			pd_vae_conv3(&r, d->downconv, ch, xin, h, w, buf[1]);
			be->ops->copy2d(be, buf[2], w, buf[1] + w, 2 * (int64_t)w, (int64_t)ch * (h / 2), w);
			be->ops->copy2d(be, x, 1, buf[2] + 1, 2, (int64_t)ch * (h / 2) * (w / 2), 1);
			h /= 2;
			w /= 2;
			r.H /= 2;
		}
		if (pd_backend_check(be))
			goto out;
	}
	pd_vae_mid_fwd(&r, &e->mid, x, ch, h, w, buf);
	pd_vae_group_norm(&r, buf[1] + pd_in_offset(&r, w), pd_in_cstride(&r, h, w), x, ch, h, w, e->norm_out_w,
			  e->norm_out_b, 1);
	pd_vae_conv3(&r, e->conv_out, ch, buf[1], h, w, x);
	if (e->quant) {
		be->ops->conv(be, e->quant, x, h, w, 0, buf[1]);
		x = buf[1];
	}
	if (!r.banded) {
		be->ops->download(be, moments, x, (size_t)2 * c->latent_channels * h * w);
	} else {
		/* every band needs the whole latent (the pipeline starts from it on
		 * every rank): a channel's bands gathered, in order, then read */
		for (int b = 0; b < hk->bands; b++)
			n_all[b] = (size_t)pd_chunk_len(hl, hk->bands, b) * w;
		for (int k = 0; k < 2 * c->latent_channels && !be->failed; k++) {
			pd_vae_fail_hook(&r, hk->gather(hk->ctx, x + (int64_t)k * h * w, (size_t)h * w, buf[3], n_all));
			be->ops->download(be, moments + (int64_t)k * hl * w, buf[3], (size_t)hl * w);
		}
	}
	rc = pd_backend_check(be);
out:
	pd_vae_run_release(&r, buf);
	return rc;
}

void pd_vae_posterior_latents(const struct pd_vae_config *cfg, const float *moments, size_t n, const float *eps,
			      float *out)
{
	for (size_t i = 0; i < n; i++) {
		/* DiagonalGaussianDistribution: float32 throughout */
		float mean = moments[i], logvar = moments[n + i], z = mean;

		logvar = logvar < -30.0f ? -30.0f : logvar > 20.0f ? 20.0f : logvar;
		if (eps)
			z = mean + expf(0.5f * logvar) * eps[i];
		out[i] = (z - (float)cfg->shift_factor) * (float)cfg->scaling_factor;
	}
}
