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

/* Layer L(.weight/.bias) of the view = its rows of the file's tensor. A
 * missing bias is left out. */
static void pd_ff_map(struct pd_ff *f, const struct pd_dit_linear *l)
{
	static const char *const ext[2] = { ".weight", ".bias" };

	for (int e = 0; e < 2 && !f->failed; e++) {
		char s[200], d[200];
		const struct pd_st_tensor *t;

		snprintf(s, sizeof(s), "%s%s", l->native, ext[e]);
		t = pd_ff_get(f->base, f->pre, s, 0);
		if (!t) {
			if (e == 0) {
				pd_errorf("%s: no %s%s (a FLUX transformer in Black Forest Labs' layout has one)",
					  f->base->path, f->pre, s);
				f->failed = 1;
			}
			continue;
		}
		if (t->shape[0] != l->native_rows) {
			pd_errorf("%s: %s%s has %lld rows, not the %lld the model's sizes give", f->base->path, f->pre, s,
				  (long long)t->shape[0], (long long)l->native_rows);
			f->failed = 1;
			return;
		}
		snprintf(d, sizeof(d), "%s%s", l->name, ext[e]);
		if (pd_st_view_add(f->view, d, t, l->r0, l->n_out, l->roll, t->ndim, NULL))
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

/* Adds one layer to the table. */
static void pd_fl_add(struct pd_dit_linear *t, int *n, const char *name, int i, const char *native, int64_t r0,
		      int64_t native_rows, int64_t n_out, int64_t n_in, int64_t roll)
{
	struct pd_dit_linear *l = &t[(*n)++];

	snprintf(l->name, sizeof(l->name), name, i);
	snprintf(l->native, sizeof(l->native), native, i);
	l->r0 = r0;
	l->native_rows = native_rows;
	l->n_out = n_out;
	l->n_in = n_in;
	l->roll = roll;
}

/* Names the run of COUNT layers ending the table at *N (its first is
 * t[*n - count]) as XLabs' adapters do: PATTERN with block I. */
static void pd_fl_alias(struct pd_dit_linear *t, int n, const char *pattern, int i, int count)
{
	snprintf(t[n - count].alias, sizeof(t[n - count].alias), pattern, i);
	t[n - count].alias_count = count;
}

/* diffusers' convert_flux_transformer_checkpoint_to_diffusers as a table:
 * fused q, k, v (and the single blocks' MLP input) split by rows, the final
 * modulation's (shift, scale) read as (scale, shift). */
/* Qwen-Image's layout: the checkpoints people download (Qwen's, ComfyUI's)
 * use diffusers' names, so a layer's native tensor is itself. */
static int pd_flux_linears_qwen(const struct pd_flux_config *c, struct pd_dit_linear **out, int *n)
{
	static const char *const blk[] = { "img_mod.1", "txt_mod.1", "attn.to_q", "attn.to_k", "attn.to_v",
					   "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_out.0",
					   "attn.to_add_out", "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj",
					   "txt_mlp.net.2" };
	int64_t D = c->dim, M = c->mlp_dim;
	int k = 0;
	struct pd_dit_linear *t = pd_calloc((size_t)(8 + 14 * c->num_layers), sizeof(*t), "the layers' names");

	if (!t)
		return -1;
	pd_fl_add(t, &k, "img_in", 0, "img_in", 0, D, D, c->in_channels, 0);
	pd_fl_add(t, &k, "txt_in", 0, "txt_in", 0, D, D, c->joint_attention_dim, 0);
	pd_fl_add(t, &k, "time_text_embed.timestep_embedder.linear_1", 0, "time_text_embed.timestep_embedder.linear_1", 0,
		  D, D, 256, 0);
	pd_fl_add(t, &k, "time_text_embed.timestep_embedder.linear_2", 0, "time_text_embed.timestep_embedder.linear_2", 0,
		  D, D, D, 0);
	for (int i = 0; i < c->num_layers; i++)
		for (size_t j = 0; j < sizeof(blk) / sizeof(blk[0]); j++) {
			char name[96];
			int64_t o = j < 2 ? 6 * D : (j == 10 || j == 12) ? M : D, in = (j == 11 || j == 13) ? M : D;

			snprintf(name, sizeof(name), "transformer_blocks.%%d.%s", blk[j]);
			pd_fl_add(t, &k, name, i, name, 0, o, o, in, 0);
		}
	pd_fl_add(t, &k, "norm_out.linear", 0, "norm_out.linear", 0, 2 * D, 2 * D, D, 0);
	pd_fl_add(t, &k, "proj_out", 0, "proj_out", 0, c->out_channels, c->out_channels, D, 0);
	*out = t;
	*n = k;
	return 0;
}

int pd_flux_linears(const struct pd_flux_config *c, struct pd_dit_linear **out, int *n)
{
	int64_t D = c->dim, M = c->mlp_dim, T = 256;
	int cap = 10 + 14 * c->num_layers + 6 * c->num_single_layers, k = 0;
	struct pd_dit_linear *t;

	*out = NULL;
	*n = 0;
	if (c->qwen)
		return pd_flux_linears_qwen(c, out, n);
	t = pd_calloc((size_t)cap, sizeof(*t), "the layers' names");
	if (!t)
		return -1;
	pd_fl_add(t, &k, "x_embedder", 0, "img_in", 0, D, D, c->in_channels, 0);
	pd_fl_add(t, &k, "context_embedder", 0, "txt_in", 0, D, D, c->joint_attention_dim, 0);
	pd_fl_add(t, &k, "time_text_embed.timestep_embedder.linear_1", 0, "time_in.in_layer", 0, D, D, T, 0);
	pd_fl_add(t, &k, "time_text_embed.timestep_embedder.linear_2", 0, "time_in.out_layer", 0, D, D, D, 0);
	pd_fl_add(t, &k, "time_text_embed.text_embedder.linear_1", 0, "vector_in.in_layer", 0, D, D,
		  c->pooled_projection_dim, 0);
	pd_fl_add(t, &k, "time_text_embed.text_embedder.linear_2", 0, "vector_in.out_layer", 0, D, D, D, 0);
	if (c->guidance_embeds) {
		pd_fl_add(t, &k, "time_text_embed.guidance_embedder.linear_1", 0, "guidance_in.in_layer", 0, D, D, T, 0);
		pd_fl_add(t, &k, "time_text_embed.guidance_embedder.linear_2", 0, "guidance_in.out_layer", 0, D, D, D,
			  0);
	}
	for (int i = 0; i < c->num_layers; i++) {
		static const char *const q[3] = { "q", "k", "v" };
		char name[96];

		pd_fl_add(t, &k, "transformer_blocks.%d.norm1.linear", i, "double_blocks.%d.img_mod.lin", 0, 6 * D, 6 * D,
			  D, 0);
		pd_fl_add(t, &k, "transformer_blocks.%d.norm1_context.linear", i, "double_blocks.%d.txt_mod.lin", 0,
			  6 * D, 6 * D, D, 0);
		for (int j = 0; j < 3; j++) {
			snprintf(name, sizeof(name), "transformer_blocks.%%d.attn.to_%s", q[j]);
			pd_fl_add(t, &k, name, i, "double_blocks.%d.img_attn.qkv", j * D, 3 * D, D, D, 0);
		}
		pd_fl_alias(t, k, "double_blocks.%d.processor.qkv_lora1", i, 3);
		for (int j = 0; j < 3; j++) {
			snprintf(name, sizeof(name), "transformer_blocks.%%d.attn.add_%s_proj", q[j]);
			pd_fl_add(t, &k, name, i, "double_blocks.%d.txt_attn.qkv", j * D, 3 * D, D, D, 0);
		}
		pd_fl_alias(t, k, "double_blocks.%d.processor.qkv_lora2", i, 3);
		pd_fl_add(t, &k, "transformer_blocks.%d.attn.to_out.0", i, "double_blocks.%d.img_attn.proj", 0, D, D, D, 0);
		pd_fl_alias(t, k, "double_blocks.%d.processor.proj_lora1", i, 1);
		pd_fl_add(t, &k, "transformer_blocks.%d.attn.to_add_out", i, "double_blocks.%d.txt_attn.proj", 0, D, D, D,
			  0);
		pd_fl_alias(t, k, "double_blocks.%d.processor.proj_lora2", i, 1);
		pd_fl_add(t, &k, "transformer_blocks.%d.ff.net.0.proj", i, "double_blocks.%d.img_mlp.0", 0, M, M, D, 0);
		pd_fl_add(t, &k, "transformer_blocks.%d.ff.net.2", i, "double_blocks.%d.img_mlp.2", 0, D, D, M, 0);
		pd_fl_add(t, &k, "transformer_blocks.%d.ff_context.net.0.proj", i, "double_blocks.%d.txt_mlp.0", 0, M, M,
			  D, 0);
		pd_fl_add(t, &k, "transformer_blocks.%d.ff_context.net.2", i, "double_blocks.%d.txt_mlp.2", 0, D, D, M, 0);
	}
	for (int i = 0; i < c->num_single_layers; i++) {
		const char *l1 = "single_blocks.%d.linear1";

		pd_fl_add(t, &k, "single_transformer_blocks.%d.norm.linear", i, "single_blocks.%d.modulation.lin", 0,
			  3 * D, 3 * D, D, 0);
		pd_fl_add(t, &k, "single_transformer_blocks.%d.attn.to_q", i, l1, 0, 3 * D + M, D, D, 0);
		pd_fl_add(t, &k, "single_transformer_blocks.%d.attn.to_k", i, l1, D, 3 * D + M, D, D, 0);
		pd_fl_add(t, &k, "single_transformer_blocks.%d.attn.to_v", i, l1, 2 * D, 3 * D + M, D, D, 0);
		pd_fl_alias(t, k, "single_blocks.%d.processor.qkv_lora", i, 3);
		pd_fl_add(t, &k, "single_transformer_blocks.%d.proj_mlp", i, l1, 3 * D, 3 * D + M, M, D, 0);
		pd_fl_add(t, &k, "single_transformer_blocks.%d.proj_out", i, "single_blocks.%d.linear2", 0, D, D, D + M,
			  0);
		pd_fl_alias(t, k, "single_blocks.%d.processor.proj_lora", i, 1);
	}
	/* forgetting the roll gives noise silently */
	pd_fl_add(t, &k, "norm_out.linear", 0, "final_layer.adaLN_modulation.1", 0, 2 * D, 2 * D, D, D);
	pd_fl_add(t, &k, "proj_out", 0, "final_layer.linear", 0, c->out_channels, c->out_channels, D, 0);
	*out = t;
	*n = k;
	return 0;
}

/* Qwen-Image's sizes from its tensors' shapes (Qwen-Image's RoPE axes
 * (16, 56, 56) scaled to the head width: give --config for another). */
static int pd_qwen_config_infer(struct pd_flux_config *c, const struct pd_st *st, const char *pre)
{
	const struct pd_st_tensor *ii = pd_ff_get(st, pre, "img_in.weight", 0), *ti = pd_ff_get(st, pre, "txt_in.weight", 0);
	const struct pd_st_tensor *nq = pd_ff_get(st, pre, "transformer_blocks.%d.attn.norm_q.weight", 0);
	const struct pd_st_tensor *po = pd_ff_get(st, pre, "proj_out.weight", 0);

	memset(c, 0, sizeof(*c));
	if (!ii || !ti || !nq || !po || ii->ndim != 2 || ti->ndim != 2 || nq->ndim != 1 || po->ndim != 2 || nq->shape[0] < 8 ||
	    ii->shape[0] % nq->shape[0] || nq->shape[0] % 8)
		return pd_errorf("%s: not a Qwen-Image transformer (img_in, txt_in, transformer_blocks.0.attn.norm_q, "
				 "proj_out)", st->path);
	c->qwen = 1;
	c->dim = (int)ii->shape[0];
	c->in_channels = (int)ii->shape[1];
	c->joint_attention_dim = (int)ti->shape[1];
	c->head_dim = (int)nq->shape[0];
	c->heads = c->dim / c->head_dim;
	c->out_channels = (int)po->shape[0];
	c->n_axes = 3;
	c->axes_dims[0] = c->head_dim / 8;
	c->axes_dims[1] = c->axes_dims[2] = (c->head_dim - c->head_dim / 8) / 2;
	if (c->axes_dims[1] % 2)
		return pd_errorf("%s: a head of %d has no RoPE axes as Qwen-Image's: give --config FILE", st->path,
				 c->head_dim);
	while (pd_ff_get(st, pre, "transformer_blocks.%d.img_mod.1.weight", c->num_layers))
		c->num_layers++;
	c->mlp_dim = 4 * c->dim;
	return 0;
}

/* A Qwen-Image transformer in one file (ComfyUI's, city96's GGUF): its
 * names are diffusers', perhaps under a prefix ("model.diffusion_model.");
 * *OUT a view of them without it. */
static int pd_qwen_open_file(struct pd_st **out, struct pd_st *base, const char *pre, struct pd_flux_config *cfg,
			     const char *config_json)
{
	struct pd_st *view = NULL;
	size_t np = strlen(pre);
	int rc = -1;

	if (config_json) {
		struct pd_config j;

		rc = pd_config_load(&j, config_json);
		if (!rc) {
			rc = pd_flux_config_parse_qwen(cfg, &j);
			pd_config_free(&j);
		}
	} else {
		struct pd_config j;
		int has = pd_st_meta_config(base, &j);

		rc = has < 0 ? -1 : has ? pd_flux_config_parse_qwen(cfg, &j) : pd_qwen_config_infer(cfg, base, pre);
		if (has > 0)
			pd_config_free(&j);
	}
	if (rc || pd_st_view_new(&view, base)) {
		pd_st_close(base);
		return -1;
	}
	for (int i = 0; i < base->n_tensors && !rc; i++) {
		const struct pd_st_tensor *t = base->sorted[i];

		if (!strncmp(t->name, pre, np))
			rc = t->ndim ? pd_st_view_add(view, t->name + np, t, 0, t->shape[0], 0, t->ndim, NULL) : 0;
	}
	if (rc || pd_st_view_done(view)) {
		pd_st_close(view);
		return -1;
	}
	*out = view;
	return 0;
}

int pd_flux_open_file(struct pd_st **out, const char *path, struct pd_flux_config *cfg, const char *config_json)
{
	struct pd_st *base = NULL;
	const struct pd_st_tensor *t;
	struct pd_ff f = { 0 };
	struct pd_dit_linear *lin = NULL;
	int n_lin = 0;
	char pre[200];
	int64_t D;

	*out = NULL;
	if (pd_st_open(&base, path))
		return -1;
	/* Qwen-Image's: an RMSNorm of the text, unlike FLUX */
	t = pd_st_find_suffix(base, "txt_norm.weight");
	if (t) {
		snprintf(pre, sizeof(pre), "%.*s", (int)(strlen(t->name) - strlen("txt_norm.weight")), t->name);
		return pd_qwen_open_file(out, base, pre, cfg, config_json);
	}
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
	{
		/* the MLP's width from the weights (FLUX.1: 4 x dim) */
		const struct pd_st_tensor *l1 = pd_ff_get(base, pre, "single_blocks.%d.linear1.weight", 0);

		if (cfg->num_single_layers && (!l1 || l1->ndim != 2 || l1->shape[0] <= 3 * D)) {
			pd_errorf("%s: single_blocks.0.linear1 has %lld rows, not more than 3 x %lld", path,
				  l1 ? (long long)l1->shape[0] : 0LL, (long long)D);
			f.failed = 1;
		} else if (cfg->num_single_layers) {
			cfg->mlp_dim = (int)(l1->shape[0] - 3 * D);
		} else if ((l1 = pd_ff_get(base, pre, "double_blocks.%d.img_mlp.0.weight", 0)) && l1->ndim == 2) {
			cfg->mlp_dim = (int)l1->shape[0];
		}
	}
	if (!f.failed && pd_flux_linears(cfg, &lin, &n_lin))
		f.failed = 1;
	for (int k = 0; k < n_lin && !f.failed; k++)
		pd_ff_map(&f, &lin[k]);
	free(lin);
	for (int i = 0; i < cfg->num_layers && !f.failed; i++) {
		const char *q = "transformer_blocks.%d.";
		char d[160];

#define DST(x) (snprintf(d, sizeof(d), "%s%s", q, x), d)
		pd_ff_scale(&f, "double_blocks.%d.img_attn.norm.query_norm.scale", i, DST("attn.norm_q.weight"));
		pd_ff_scale(&f, "double_blocks.%d.img_attn.norm.key_norm.scale", i, DST("attn.norm_k.weight"));
		pd_ff_scale(&f, "double_blocks.%d.txt_attn.norm.query_norm.scale", i, DST("attn.norm_added_q.weight"));
		pd_ff_scale(&f, "double_blocks.%d.txt_attn.norm.key_norm.scale", i, DST("attn.norm_added_k.weight"));
	}
	for (int i = 0; i < cfg->num_single_layers && !f.failed; i++) {
		const char *q = "single_transformer_blocks.%d.";
		char d[160];

		pd_ff_scale(&f, "single_blocks.%d.norm.query_norm.scale", i, DST("attn.norm_q.weight"));
		pd_ff_scale(&f, "single_blocks.%d.norm.key_norm.scale", i, DST("attn.norm_k.weight"));
#undef DST
	}
	if (f.failed || pd_st_view_done(f.view)) {
		pd_st_close(f.view);
		return -1;
	}
	*out = f.view;
	return 0;
}
