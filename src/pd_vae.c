/*
 * pd_vae.c - the AutoencoderKL decoder (diffusers models/autoencoders/vae.py
 * Decoder, unet_2d_blocks.py UNetMidBlock2D/UpDecoderBlock2D, resnet.py
 * ResnetBlock2D, attention_processor.py AttnProcessor2_0).
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
#define PD_VAE_MAX_RESNETS 16

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

struct pd_vae {
	struct pd_vae_config cfg;       /* sizes */
	struct pd_backend *be;          /* compute backend (borrowed) */
	struct pd_conv *post_quant;     /* 1x1 post_quant_conv, when configured */
	struct pd_conv *conv_in;        /* latent -> top channels */
	struct pd_vae_resnet mid[2];    /* mid block resnets */
	float *attn_norm_w, *attn_norm_b; /* mid attention GroupNorm */
	struct pd_linear *attn_q, *attn_k, *attn_v, *attn_out; /* mid attention projections */
	struct pd_vae_up up[PD_VAE_MAX_BLOCKS]; /* up blocks, top resolution last */
	float *norm_out_w, *norm_out_b; /* conv_norm_out */
	struct pd_conv *conv_out;       /* -> image channels */
};

int pd_vae_config_load(struct pd_vae_config *cfg, const char *dir)
{
	struct pd_config c;
	int64_t v, blocks[PD_VAE_MAX_BLOCKS];
	int rc = -1, n;

	memset(cfg, 0, sizeof(*cfg));
	if (pd_config_load_in(&c, dir, "config.json", "VAE"))
		return -1;
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
	if (pd_config_bool(&c, "mid_block_add_attention", 0, 1, &cfg->mid_attention) ||
	    pd_config_bool(&c, "use_post_quant_conv", 0, 1, &cfg->post_quant_conv) ||
	    pd_config_double(&c, "scaling_factor", 0, 0.18215, &cfg->scaling_factor) ||
	    pd_config_double(&c, "shift_factor", 0, 0.0, &cfg->shift_factor))
		goto out;
	if (cfg->scaling_factor == 0) {
		pd_errorf("%s: scaling_factor must not be 0", c.path);
		goto out;
	}
	rc = 0;
out:
	pd_config_free(&c);
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
	c = &v->cfg;
	if (pd_vae_config_load(c, dir) || pd_st_open_component(&st, dir, "diffusion_pytorch_model"))
		goto fail;
	ld.st = st;
	ld.be = be;
	top = c->block_out[c->n_blocks - 1];
	if (c->post_quant_conv)
		v->post_quant = pd_loader_conv(&ld, c->latent_channels, c->latent_channels, 1, "post_quant_conv");
	v->conv_in = pd_loader_conv(&ld, top, c->latent_channels, 3, "decoder.conv_in");
	pd_vae_load_resnet(&ld, &v->mid[0], top, top, "decoder.mid_block.resnets.0");
	if (c->mid_attention) {
		v->attn_norm_w = pd_loader_vector(&ld, top, "decoder.mid_block.attentions.0.group_norm.weight");
		v->attn_norm_b = pd_loader_vector(&ld, top, "decoder.mid_block.attentions.0.group_norm.bias");
		v->attn_q = pd_loader_linear(&ld, top, top, "decoder.mid_block.attentions.0.to_q");
		v->attn_k = pd_loader_linear(&ld, top, top, "decoder.mid_block.attentions.0.to_k");
		v->attn_v = pd_loader_linear(&ld, top, top, "decoder.mid_block.attentions.0.to_v");
		v->attn_out = pd_loader_linear(&ld, top, top, "decoder.mid_block.attentions.0.to_out.0");
	}
	pd_vae_load_resnet(&ld, &v->mid[1], top, top, "decoder.mid_block.resnets.1");
	prev = top;
	for (int i = 0; i < c->n_blocks; i++) {
		int ch = c->block_out[c->n_blocks - 1 - i];
		struct pd_vae_up *u = &v->up[i];

		u->n_resnets = c->layers_per_block + 1;
		for (int j = 0; j < u->n_resnets; j++) {
			snprintf(prefix, sizeof(prefix), "decoder.up_blocks.%d.resnets.%d", i, j);
			pd_vae_load_resnet(&ld, &u->res[j], j == 0 ? prev : ch, ch, prefix);
		}
		if (i < c->n_blocks - 1)
			u->upconv = pd_loader_conv(&ld, ch, ch, 3, "decoder.up_blocks.%d.upsamplers.0.conv", i);
		prev = ch;
	}
	v->norm_out_w = pd_loader_vector(&ld, c->block_out[0], "decoder.conv_norm_out.weight");
	v->norm_out_b = pd_loader_vector(&ld, c->block_out[0], "decoder.conv_norm_out.bias");
	v->conv_out = pd_loader_conv(&ld, c->out_channels, c->block_out[0], 3, "decoder.conv_out");
	if (ld.failed)
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

void pd_vae_free(struct pd_vae *v)
{
	struct pd_backend *be;
	float *vecs[4];

	if (!v)
		return;
	be = v->be;
	be->ops->conv_free(be, v->post_quant);
	be->ops->conv_free(be, v->conv_in);
	pd_vae_free_resnet(be, &v->mid[0]);
	pd_vae_free_resnet(be, &v->mid[1]);
	be->ops->linear_free(be, v->attn_q);
	be->ops->linear_free(be, v->attn_k);
	be->ops->linear_free(be, v->attn_v);
	be->ops->linear_free(be, v->attn_out);
	for (int i = 0; i < PD_VAE_MAX_BLOCKS; i++) {
		for (int j = 0; j < v->up[i].n_resnets; j++)
			pd_vae_free_resnet(be, &v->up[i].res[j]);
		be->ops->conv_free(be, v->up[i].upconv);
	}
	be->ops->conv_free(be, v->conv_out);
	vecs[0] = v->attn_norm_w;
	vecs[1] = v->attn_norm_b;
	vecs[2] = v->norm_out_w;
	vecs[3] = v->norm_out_b;
	for (int i = 0; i < 4; i++)
		if (vecs[i])
			be->ops->free(be, vecs[i]);
	free(v);
}

const struct pd_vae_config *pd_vae_get_config(const struct pd_vae *v)
{
	return &v->cfg;
}

/* ----------------------------------------------------------------------- */
/* Decode                                                                  */
/* ----------------------------------------------------------------------- */

/* out = shortcut(x) + conv2(silu(GN2(conv1(silu(GN1(x)))))); X and OUT may
 * be the same buffer; T1, T2 are scratch. */
static void pd_vae_resnet_fwd(struct pd_vae *v, const struct pd_vae_resnet *r, const float *x, int h, int w,
			      float *out, float *t1, float *t2)
{
	struct pd_backend *be = v->be;
	int64_t hw = (int64_t)h * w;

	be->ops->group_norm(be, t1, x, r->c_in, hw, v->cfg.groups, r->norm1_w, r->norm1_b, PD_VAE_EPS, 1);
	be->ops->conv(be, r->conv1, t1, h, w, t2);
	be->ops->group_norm(be, t1, t2, r->c_out, hw, v->cfg.groups, r->norm2_w, r->norm2_b, PD_VAE_EPS, 1);
	be->ops->conv(be, r->conv2, t1, h, w, t2);
	if (r->shortcut) {
		be->ops->conv(be, r->shortcut, x, h, w, t1);
		be->ops->add(be, out, t1, t2, (size_t)(r->c_out * hw));
	} else {
		be->ops->add(be, out, x, t2, (size_t)(r->c_out * hw));
	}
}

/* The mid block's single-head attention over all h*w positions, in place
 * on X [c, hw]; needs 5 scratch buffers of c*hw. */
static void pd_vae_attention(struct pd_vae *v, float *x, int c, int64_t hw, float *s0, float *s1, float *s2,
			     float *s3, float *s4)
{
	struct pd_backend *be = v->be;

	be->ops->group_norm(be, s0, x, c, hw, v->cfg.groups, v->attn_norm_w, v->attn_norm_b, PD_VAE_EPS, 0);
	be->ops->transpose(be, s1, s0, c, hw);	/* [hw, c] */
	be->ops->linear(be, v->attn_q, s1, c, hw, s2, c, 0);
	be->ops->linear(be, v->attn_k, s1, c, hw, s3, c, 0);
	be->ops->linear(be, v->attn_v, s1, c, hw, s4, c, 0);
	be->ops->attention(be, s0, c, NULL, s2, c, s3, c, s4, c, hw, hw, 1, c, 1.0f / sqrtf((float)c));
	be->ops->linear(be, v->attn_out, s0, c, hw, s1, c, 0);
	be->ops->transpose(be, s0, s1, hw, c);	/* back to [c, hw] */
	be->ops->add(be, x, x, s0, (size_t)(c * hw));
}

static void pd_vae_dump(struct pd_vae *v, const struct pd_dump *dump, const char *name, const float *p, int c,
			int h, int w, float *host)
{
	int64_t shape[4] = { 1, c, h, w };

	if (!dump || v->be->failed)
		return;
	v->be->ops->download(v->be, host, p, (size_t)c * h * w);
	dump->fn(dump->ctx, name, dump->index, host, 4, shape);
}

/* Largest activation (in floats) of any stage for an h x w latent. */
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
	int top = c->block_out[c->n_blocks - 1], ch = top;
	size_t n = pd_vae_work_size(c, h, w), n_mid = (size_t)top * h * w;
	/* Three buffers of the largest activation; the mid-block attention,
	 * at the lowest resolution, needs three more of its own size. */
	float *buf[6] = { 0 }, *x, *host = NULL;
	char name[64];
	int rc = -1;

	if (h < 1 || w < 1)
		return pd_errorf("VAE: empty latent");
	for (int i = 0; i < 6; i++)
		buf[i] = pd_backend_alloc(be, i < 3 ? n : n_mid, "VAE activations");
	if (dump)
		host = pd_malloc(n * sizeof(float), "VAE dump");
	if (pd_backend_check(be) || (dump && !host))
		goto out;
	x = buf[0];
	be->ops->upload(be, buf[1], z, (size_t)c->latent_channels * h * w);
	if (v->post_quant) {
		be->ops->conv(be, v->post_quant, buf[1], h, w, buf[2]);
		be->ops->conv(be, v->conv_in, buf[2], h, w, x);
	} else {
		be->ops->conv(be, v->conv_in, buf[1], h, w, x);
	}
	pd_vae_dump(v, dump, "vae.dec.conv_in", x, top, h, w, host);
	pd_vae_resnet_fwd(v, &v->mid[0], x, h, w, x, buf[1], buf[2]);
	if (c->mid_attention)
		pd_vae_attention(v, x, top, (int64_t)h * w, buf[1], buf[2], buf[3], buf[4], buf[5]);
	pd_vae_resnet_fwd(v, &v->mid[1], x, h, w, x, buf[1], buf[2]);
	pd_vae_dump(v, dump, "vae.dec.mid_block", x, top, h, w, host);
	for (int i = 0; i < c->n_blocks; i++) {
		struct pd_vae_up *u = &v->up[i];

		for (int j = 0; j < u->n_resnets; j++)
			pd_vae_resnet_fwd(v, &u->res[j], x, h, w, x, buf[1], buf[2]);
		ch = u->res[u->n_resnets - 1].c_out;
		if (u->upconv) {
			be->ops->upsample2x(be, buf[1], x, ch, h, w);
			h *= 2;
			w *= 2;
			be->ops->conv(be, u->upconv, buf[1], h, w, x);
		}
		snprintf(name, sizeof(name), "vae.dec.up_blocks.%d", i);
		pd_vae_dump(v, dump, name, x, ch, h, w, host);
		if (pd_backend_check(be))
			goto out;
	}
	be->ops->group_norm(be, buf[1], x, ch, (int64_t)h * w, c->groups, v->norm_out_w, v->norm_out_b,
			    PD_VAE_EPS, 0);
	pd_vae_dump(v, dump, "vae.dec.conv_norm_out", buf[1], ch, h, w, host);
	be->ops->silu(be, buf[1], buf[1], (size_t)ch * h * w);
	pd_vae_dump(v, dump, "vae.dec.conv_act", buf[1], ch, h, w, host);
	be->ops->conv(be, v->conv_out, buf[1], h, w, x);
	be->ops->download(be, img, x, (size_t)c->out_channels * h * w);
	rc = pd_backend_check(be);
out:
	for (int i = 0; i < 6; i++)
		if (buf[i])
			be->ops->free(be, buf[i]);
	free(host);
	return rc;
}
