/*
 * pd_vae_file.c - single-file autoencoders in the original layout, read
 * under diffusers' names (the mapping of diffusers'
 * convert_ldm_vae_checkpoint, decoder side, done as views).
 */
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"

#include <stdio.h>
#include <string.h>

struct pd_vf {
	struct pd_st *base, *view;
	const char *pre;                /* the names' prefix before "decoder." */
	int failed;
};

static const struct pd_st_tensor *pd_vf_get(const struct pd_vf *f, const char *name)
{
	char full[512];

	snprintf(full, sizeof(full), "%s%s", f->pre, name);
	return pd_st_get(f->base, full);
}

/* SRC.weight/.bias -> DST.weight/.bias; a 1x1 convolution becomes a matrix
 * when LINEAR. A missing weight is an error unless OPTIONAL. */
static void pd_vf_map(struct pd_vf *f, const char *src, const char *dst, int linear, int optional)
{
	static const char *const ext[2] = { ".weight", ".bias" };

	for (int e = 0; e < 2 && !f->failed; e++) {
		char s[256], d[256];
		const struct pd_st_tensor *t;

		snprintf(s, sizeof(s), "%s%s", src, ext[e]);
		snprintf(d, sizeof(d), "%s%s", dst, ext[e]);
		t = pd_vf_get(f, s);
		if (!t) {
			if (e == 0 && !optional) {
				pd_errorf("%s: no %s%s (an autoencoder in the original layout has it)", f->base->path, f->pre, s);
				f->failed = 1;
			}
			return;
		}
		if (linear && e == 0 && t->ndim == 4) {
			int64_t shape[2] = { t->shape[0], t->shape[1] };

			if (t->shape[2] != 1 || t->shape[3] != 1) {
				pd_errorf("%s: %s%s is not a 1x1 convolution", f->base->path, f->pre, s);
				f->failed = 1;
				return;
			}
			if (pd_st_view_add(f->view, d, t, 0, t->shape[0], 0, 2, shape))
				f->failed = 1;
		} else if (pd_st_view_add(f->view, d, t, 0, t->shape[0], 0, t->ndim, NULL)) {
			f->failed = 1;
		}
	}
}

static void pd_vf_resnet(struct pd_vf *f, const char *src, const char *dst)
{
	static const char *const parts[][2] = { { "norm1", "norm1" }, { "conv1", "conv1" }, { "norm2", "norm2" },
						{ "conv2", "conv2" } };
	char s[256], d[256];

	for (size_t i = 0; i < 4; i++) {
		snprintf(s, sizeof(s), "%s.%s", src, parts[i][0]);
		snprintf(d, sizeof(d), "%s.%s", dst, parts[i][1]);
		pd_vf_map(f, s, d, 0, 0);
	}
	snprintf(s, sizeof(s), "%s.nin_shortcut", src);
	snprintf(d, sizeof(d), "%s.conv_shortcut", dst);
	pd_vf_map(f, s, d, 0, 1);
}

/* Sizes from the shapes. */
static int pd_vf_infer(struct pd_vae_config *c, const struct pd_vf *f)
{
	const struct pd_st_tensor *ci = pd_vf_get(f, "decoder.conv_in.weight"), *co = pd_vf_get(f, "decoder.conv_out.weight");
	char name[128];

	memset(c, 0, sizeof(*c));
	if (!ci || !co || ci->ndim != 4 || co->ndim != 4)
		return pd_errorf("%s: no decoder.conv_in / decoder.conv_out convolutions", f->base->path);
	c->latent_channels = (int)ci->shape[1];
	c->out_channels = (int)co->shape[0];
	for (c->n_blocks = 0; c->n_blocks < PD_VAE_MAX_BLOCKS; c->n_blocks++) {
		const struct pd_st_tensor *t;

		snprintf(name, sizeof(name), "decoder.up.%d.block.0.conv2.weight", c->n_blocks);
		t = pd_vf_get(f, name);
		if (!t)
			break;
		c->block_out[c->n_blocks] = (int)t->shape[0];
	}
	if (c->n_blocks == 0)
		return pd_errorf("%s: no decoder.up.0.block.0", f->base->path);
	for (c->layers_per_block = 0;; c->layers_per_block++) {
		snprintf(name, sizeof(name), "decoder.up.0.block.%d.conv1.weight", c->layers_per_block + 1);
		if (!pd_vf_get(f, name) || c->layers_per_block + 1 >= PD_VAE_MAX_RESNETS)
			break;
	}
	c->groups = 32;
	for (int i = 0; i < c->n_blocks; i++)
		if (c->block_out[i] % c->groups)
			return pd_errorf("%s: %d channels do not divide into 32 groups; give the VAE folder or a \"config\" "
					 "metadata entry", f->base->path, c->block_out[i]);
	c->mid_attention = pd_vf_get(f, "decoder.mid.attn_1.q.weight") != NULL;
	c->post_quant_conv = pd_vf_get(f, "post_quant_conv.weight") != NULL;
	if (c->latent_channels != 16)
		return pd_errorf("%s: %d latent channels; only FLUX.1's scaling (16 channels) is known without a config",
				 f->base->path, c->latent_channels);
	c->scaling_factor = 0.3611;
	c->shift_factor = 0.1159;
	return 0;
}

int pd_vae_open_file(struct pd_st **out, const char *path, struct pd_vae_config *cfg)
{
	struct pd_vf f = { 0 };
	const struct pd_st_tensor *t;
	const char *meta;
	char pre[200], s[128], d[128];

	*out = NULL;
	if (pd_st_open(&f.base, path))
		return -1;
	t = pd_st_find_suffix(f.base, "decoder.conv_in.weight");
	if (!t) {
		pd_st_close(f.base);
		return pd_errorf("%s: not an autoencoder (no decoder.conv_in.weight)", path);
	}
	snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("decoder.conv_in.weight")), t->name);
	f.pre = pre;
	meta = pd_st_meta(f.base, "config");
	if (meta) {
		struct pd_config j;
		int rc = pd_config_parse(&j, meta, path) || pd_vae_config_parse(cfg, &j);

		pd_config_free(&j);
		if (rc) {
			pd_st_close(f.base);
			return -1;
		}
	}
	if (pd_vf_get(&f, "decoder.mid_block.resnets.0.conv1.weight")) {
		/* diffusers' names already */
		if (!meta) {
			pd_st_close(f.base);
			return pd_errorf("%s: diffusers names but no config: give the VAE folder", path);
		}
		if (pre[0]) {
			pd_st_close(f.base);
			return pd_errorf("%s: diffusers names under the prefix \"%s\" are not supported", path, pre);
		}
		*out = f.base;
		return 0;
	}
	if ((!meta && pd_vf_infer(cfg, &f)) || pd_st_view_new(&f.view, f.base)) {
		pd_st_close(f.base);
		return -1;
	}
	pd_vf_map(&f, "post_quant_conv", "post_quant_conv", 0, 1);
	pd_vf_map(&f, "decoder.conv_in", "decoder.conv_in", 0, 0);
	pd_vf_resnet(&f, "decoder.mid.block_1", "decoder.mid_block.resnets.0");
	pd_vf_resnet(&f, "decoder.mid.block_2", "decoder.mid_block.resnets.1");
	if (cfg->mid_attention) {
		pd_vf_map(&f, "decoder.mid.attn_1.norm", "decoder.mid_block.attentions.0.group_norm", 0, 0);
		pd_vf_map(&f, "decoder.mid.attn_1.q", "decoder.mid_block.attentions.0.to_q", 1, 0);
		pd_vf_map(&f, "decoder.mid.attn_1.k", "decoder.mid_block.attentions.0.to_k", 1, 0);
		pd_vf_map(&f, "decoder.mid.attn_1.v", "decoder.mid_block.attentions.0.to_v", 1, 0);
		pd_vf_map(&f, "decoder.mid.attn_1.proj_out", "decoder.mid_block.attentions.0.to_out.0", 1, 0);
	}
	/* diffusers' up_blocks.k is the original's up.(n - 1 - k) */
	for (int k = 0; k < cfg->n_blocks && !f.failed; k++) {
		int i = cfg->n_blocks - 1 - k;

		for (int j = 0; j <= cfg->layers_per_block; j++) {
			snprintf(s, sizeof(s), "decoder.up.%d.block.%d", i, j);
			snprintf(d, sizeof(d), "decoder.up_blocks.%d.resnets.%d", k, j);
			pd_vf_resnet(&f, s, d);
		}
		if (k < cfg->n_blocks - 1) {
			snprintf(s, sizeof(s), "decoder.up.%d.upsample.conv", i);
			snprintf(d, sizeof(d), "decoder.up_blocks.%d.upsamplers.0.conv", k);
			pd_vf_map(&f, s, d, 0, 0);
		}
	}
	pd_vf_map(&f, "decoder.norm_out", "decoder.conv_norm_out", 0, 0);
	pd_vf_map(&f, "decoder.conv_out", "decoder.conv_out", 0, 0);
	if (f.failed || pd_st_view_done(f.view)) {
		pd_st_close(f.view);
		return -1;
	}
	*out = f.view;
	return 0;
}
