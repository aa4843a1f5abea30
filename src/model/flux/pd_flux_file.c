/*
 * pd_flux_file.c - single-file FLUX transformers: Black Forest Labs' layout
 * read under diffusers' names (the mapping of diffusers'
 * convert_flux_transformer_checkpoint_to_diffusers, done as views: nothing
 * is copied).
 */
#include "pd_config.h"
#include "pd_flux.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Looks up PREFIX + NAME in the base file. */
static const struct pd_st_tensor *pd_ff_get(const struct pd_st *st, const char *pre, const char *fmt, int i)
{
	char name[512], tail[200];

	snprintf(tail, sizeof(tail), fmt, i);
	snprintf(name, sizeof(name), "%s%s", pre, tail);
	return pd_st_get(st, name);
}

struct pd_ff {
	struct pd_st *base;             /* the file */
	struct pd_st *view;             /* what the model reads */
	const char *pre;                /* the names' prefix in the file */
	int failed;
};

/* NAME(.weight/.bias) of the view = rows [r0, r0 + nr) of SRC(.weight/.bias)
 * (all rows when nr is 0), rolled by ROLL. A missing weight is an error
 * unless OPTIONAL; a missing bias is left out. */
static void pd_ff_map(struct pd_ff *f, const char *src, int i, const char *dst, int j, int64_t r0, int64_t nr,
		      int64_t roll, int optional)
{
	static const char *const ext[2] = { ".weight", ".bias" };

	for (int e = 0; e < 2 && !f->failed; e++) {
		char s[200], d[200];
		const struct pd_st_tensor *t;

		snprintf(s, sizeof(s), src, i);
		strcat(s, ext[e]);
		t = pd_ff_get(f->base, f->pre, s, 0);
		if (!t) {
			if (e == 0 && !optional) {
				pd_errorf("%s: no %s%s (a FLUX transformer in Black Forest Labs' layout has one)",
					  f->base->path, f->pre, s);
				f->failed = 1;
			}
			if (e == 0)
				return;
			continue;
		}
		snprintf(d, sizeof(d), dst, j);
		strcat(d, ext[e]);
		if (pd_st_view_add(f->view, d, t, r0, nr ? nr : t->shape[0], roll, t->ndim, NULL))
			f->failed = 1;
	}
}

/* An RMSNorm scale ("...scale" in the file, "...weight" in diffusers). */
static void pd_ff_scale(struct pd_ff *f, const char *src, int i, const char *dst)
{
	const struct pd_st_tensor *t = pd_ff_get(f->base, f->pre, src, i);
	char d[200];

	if (f->failed)
		return;
	if (!t) {
		pd_errorf("%s: no %s%s", f->base->path, f->pre, src);
		f->failed = 1;
		return;
	}
	snprintf(d, sizeof(d), dst, i);
	if (pd_st_view_add(f->view, d, t, 0, t->shape[0], 0, t->ndim, NULL))
		f->failed = 1;
}

static int pd_ff_count(const struct pd_st *st, const char *pre, const char *fmt)
{
	int n = 0;

	while (pd_ff_get(st, pre, fmt, n))
		n++;
	return n;
}

/* Sizes from the shapes; the RoPE axes are not in the tensors: FLUX.1's
 * for heads of 128. */
static int pd_ff_infer(struct pd_flux_config *c, const struct pd_st *st, const char *pre)
{
	const struct pd_st_tensor *img = pd_ff_get(st, pre, "img_in.weight", 0);
	const struct pd_st_tensor *txt = pd_ff_get(st, pre, "txt_in.weight", 0);
	const struct pd_st_tensor *vec = pd_ff_get(st, pre, "vector_in.in_layer.weight", 0);
	const struct pd_st_tensor *fin = pd_ff_get(st, pre, "final_layer.linear.weight", 0);
	const struct pd_st_tensor *qn;

	memset(c, 0, sizeof(*c));
	if (!img || !txt || !vec || !fin || img->ndim != 2 || txt->ndim != 2 || vec->ndim != 2 || fin->ndim != 2)
		return pd_errorf("%s: img_in, txt_in, vector_in or final_layer missing or not matrices", st->path);
	c->dim = (int)img->shape[0];
	c->in_channels = (int)img->shape[1];
	c->joint_attention_dim = (int)txt->shape[1];
	c->pooled_projection_dim = (int)vec->shape[1];
	c->out_channels = (int)fin->shape[0];
	c->guidance_embeds = pd_ff_get(st, pre, "guidance_in.in_layer.weight", 0) != NULL;
	c->num_layers = pd_ff_count(st, pre, "double_blocks.%d.img_attn.qkv.weight");
	c->num_single_layers = pd_ff_count(st, pre, "single_blocks.%d.linear1.weight");
	qn = c->num_layers ? pd_ff_get(st, pre, "double_blocks.0.img_attn.norm.query_norm.scale", 0)
			   : pd_ff_get(st, pre, "single_blocks.0.norm.query_norm.scale", 0);
	if (!qn || qn->ndim != 1 || qn->shape[0] < 2 || c->dim % qn->shape[0])
		return pd_errorf("%s: no query_norm.scale to tell the head width", st->path);
	c->head_dim = (int)qn->shape[0];
	c->heads = c->dim / c->head_dim;
	if (c->head_dim != 128)
		return pd_errorf("%s: heads of %d channels; only FLUX.1's RoPE axes (16, 56, 56) for heads of 128 are known "
				 "without a config (give the transformer folder, or a \"config\" metadata entry)",
				 st->path, c->head_dim);
	c->n_axes = 3;
	c->axes_dims[0] = 16;
	c->axes_dims[1] = 56;
	c->axes_dims[2] = 56;
	c->mlp_dim = 4 * c->dim;
	return 0;
}

/* The config of a config.json file PATH. */
static int pd_flux_config_load_file(struct pd_flux_config *c, const char *path)
{
	struct pd_config j;
	int rc;

	if (pd_config_load(&j, path))
		return -1;
	rc = pd_flux_config_parse(c, &j);
	pd_config_free(&j);
	return rc;
}

/* The config: a "config" metadata entry when there is one, else inferred. */
static int pd_ff_config(struct pd_flux_config *c, const struct pd_st *st, const char *pre)
{
	struct pd_config j;
	int rc = pd_st_meta_config(st, &j);

	if (rc < 0)
		return -1;
	if (!rc)
		return pd_ff_infer(c, st, pre);
	rc = pd_flux_config_parse(c, &j);
	pd_config_free(&j);
	return rc;
}

int pd_flux_open_file(struct pd_st **out, const char *path, struct pd_flux_config *cfg, const char *config_json)
{
	struct pd_st *base = NULL;
	const struct pd_st_tensor *t;
	struct pd_ff f = { 0 };
	char pre[200];
	int64_t D;

	*out = NULL;
	if (pd_st_open(&base, path))
		return -1;
	t = pd_st_find_suffix(base, "img_in.weight");
	if (!t) {
		/* diffusers' names in one file, perhaps under a prefix */
		t = pd_st_find_suffix(base, "x_embedder.weight");
		if (!t) {
			pd_st_close(base);
			return pd_errorf("%s: not a FLUX transformer (no img_in.weight or x_embedder.weight)", path);
		}
		snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("x_embedder.weight")), t->name);
		if (!pd_st_get(base, "x_embedder.weight")) {
			pd_errorf("%s: diffusers names under the prefix \"%s\" are not supported; save the transformer "
				  "without it", path, pre);
			pd_st_close(base);
			return -1;
		}
		{
			const char *meta = pd_st_meta(base, "config");
			struct pd_config j;
			int rc;

			if (config_json) {
				rc = pd_flux_config_load_file(cfg, config_json);
			} else if (!meta) {
				pd_st_close(base);
				return pd_errorf("%s: diffusers names but no config: give --config FILE or the transformer "
						 "folder", path);
			} else {
				rc = pd_config_parse(&j, meta, path) || pd_flux_config_parse(cfg, &j);
				pd_config_free(&j);
			}
			if (rc) {
				pd_st_close(base);
				return -1;
			}
		}
		*out = base;
		return 0;
	}
	snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("img_in.weight")), t->name);
	if ((config_json ? pd_flux_config_load_file(cfg, config_json) : pd_ff_config(cfg, base, pre)) ||
	    pd_st_view_new(&f.view, base)) {
		pd_st_close(base);
		return -1;
	}
	f.base = base;
	f.pre = pre;
	D = cfg->dim;
	pd_ff_map(&f, "img_in", 0, "x_embedder", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "txt_in", 0, "context_embedder", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "time_in.in_layer", 0, "time_text_embed.timestep_embedder.linear_1", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "time_in.out_layer", 0, "time_text_embed.timestep_embedder.linear_2", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "vector_in.in_layer", 0, "time_text_embed.text_embedder.linear_1", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "vector_in.out_layer", 0, "time_text_embed.text_embedder.linear_2", 0, 0, 0, 0, 0);
	pd_ff_map(&f, "guidance_in.in_layer", 0, "time_text_embed.guidance_embedder.linear_1", 0, 0, 0, 0, 1);
	pd_ff_map(&f, "guidance_in.out_layer", 0, "time_text_embed.guidance_embedder.linear_2", 0, 0, 0, 0, 1);
	for (int i = 0; i < cfg->num_layers && !f.failed; i++) {
		const char *q = "transformer_blocks.%d.";
		char d[160];

#define DST(x) (snprintf(d, sizeof(d), "%s%s", q, x), d)
		pd_ff_map(&f, "double_blocks.%d.img_mod.lin", i, DST("norm1.linear"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_mod.lin", i, DST("norm1_context.linear"), i, 0, 0, 0, 0);
		/* qkv [3D, D]: q, k, v by rows */
		pd_ff_map(&f, "double_blocks.%d.img_attn.qkv", i, DST("attn.to_q"), i, 0, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.img_attn.qkv", i, DST("attn.to_k"), i, D, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.img_attn.qkv", i, DST("attn.to_v"), i, 2 * D, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_attn.qkv", i, DST("attn.add_q_proj"), i, 0, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_attn.qkv", i, DST("attn.add_k_proj"), i, D, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_attn.qkv", i, DST("attn.add_v_proj"), i, 2 * D, D, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.img_attn.proj", i, DST("attn.to_out.0"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_attn.proj", i, DST("attn.to_add_out"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.img_mlp.0", i, DST("ff.net.0.proj"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.img_mlp.2", i, DST("ff.net.2"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_mlp.0", i, DST("ff_context.net.0.proj"), i, 0, 0, 0, 0);
		pd_ff_map(&f, "double_blocks.%d.txt_mlp.2", i, DST("ff_context.net.2"), i, 0, 0, 0, 0);
		pd_ff_scale(&f, "double_blocks.%d.img_attn.norm.query_norm.scale", i, DST("attn.norm_q.weight"));
		pd_ff_scale(&f, "double_blocks.%d.img_attn.norm.key_norm.scale", i, DST("attn.norm_k.weight"));
		pd_ff_scale(&f, "double_blocks.%d.txt_attn.norm.query_norm.scale", i, DST("attn.norm_added_q.weight"));
		pd_ff_scale(&f, "double_blocks.%d.txt_attn.norm.key_norm.scale", i, DST("attn.norm_added_k.weight"));
#undef DST
	}
	for (int i = 0; i < cfg->num_single_layers && !f.failed; i++) {
		const char *q = "single_transformer_blocks.%d.";
		const struct pd_st_tensor *l1 = pd_ff_get(base, pre, "single_blocks.%d.linear1.weight", i);
		int64_t M = l1 ? l1->shape[0] - 3 * D : 0;
		char d[160];

#define DST(x) (snprintf(d, sizeof(d), "%s%s", q, x), d)
		if (M < 1) {
			pd_errorf("%s: single_blocks.%d.linear1 has %lld rows, fewer than 3 x %lld", path, i,
				  l1 ? (long long)l1->shape[0] : 0LL, (long long)D);
			f.failed = 1;
			break;
		}
		pd_ff_map(&f, "single_blocks.%d.modulation.lin", i, DST("norm.linear"), i, 0, 0, 0, 0);
		/* linear1 [3D + M, D]: q, k, v, then the MLP's first layer */
		pd_ff_map(&f, "single_blocks.%d.linear1", i, DST("attn.to_q"), i, 0, D, 0, 0);
		pd_ff_map(&f, "single_blocks.%d.linear1", i, DST("attn.to_k"), i, D, D, 0, 0);
		pd_ff_map(&f, "single_blocks.%d.linear1", i, DST("attn.to_v"), i, 2 * D, D, 0, 0);
		pd_ff_map(&f, "single_blocks.%d.linear1", i, DST("proj_mlp"), i, 3 * D, M, 0, 0);
		pd_ff_map(&f, "single_blocks.%d.linear2", i, DST("proj_out"), i, 0, 0, 0, 0);
		pd_ff_scale(&f, "single_blocks.%d.norm.query_norm.scale", i, DST("attn.norm_q.weight"));
		pd_ff_scale(&f, "single_blocks.%d.norm.key_norm.scale", i, DST("attn.norm_k.weight"));
#undef DST
	}
	/* the final modulation: (shift, scale) in the file, (scale, shift) in
	 * diffusers, so the halves swap; forgetting it gives noise silently */
	pd_ff_map(&f, "final_layer.adaLN_modulation.1", 0, "norm_out.linear", 0, 0, 0, D, 0);
	pd_ff_map(&f, "final_layer.linear", 0, "proj_out", 0, 0, 0, 0, 0);
	if (f.failed || pd_st_view_done(f.view)) {
		pd_st_close(f.view);
		return -1;
	}
	*out = f.view;
	return 0;
}
