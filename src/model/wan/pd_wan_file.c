/*
 * pd_wan_file.c - Wan2.1 transformers as published outside diffusers: the
 * original layout of Wan-AI's repositories (class "WanModel" in their
 * config.json), ComfyUI's single files (the same names under
 * "model.diffusion_model.", bf16, fp8 or scaled fp8) and city96's GGUF files
 * made from them. They are read under diffusers' names (the renames of
 * diffusers' scripts/convert_wan_to_diffusers.py, as views: nothing is
 * copied), so the model code sees one layout.
 */
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_wan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Original name -> diffusers name, outside the blocks and in block i
 * (after "blocks.%d."). Only the names differ: no tensor is split or
 * reordered. The original calls the cross-attention's affine norm norm3
 * and the FFN's plain norm norm2; diffusers swaps the two. */
static const char *const pd_wf_top[][2] = {
	{ "patch_embedding", "patch_embedding" },
	{ "text_embedding.0", "condition_embedder.text_embedder.linear_1" },
	{ "text_embedding.2", "condition_embedder.text_embedder.linear_2" },
	{ "time_embedding.0", "condition_embedder.time_embedder.linear_1" },
	{ "time_embedding.2", "condition_embedder.time_embedder.linear_2" },
	{ "time_projection.1", "condition_embedder.time_proj" },
	{ "head.head", "proj_out" },
};
static const char *const pd_wf_block[][2] = {
	{ "self_attn.q", "attn1.to_q" },   { "self_attn.k", "attn1.to_k" },
	{ "self_attn.v", "attn1.to_v" },   { "self_attn.o", "attn1.to_out.0" },
	{ "self_attn.norm_q", "attn1.norm_q" }, { "self_attn.norm_k", "attn1.norm_k" },
	{ "cross_attn.q", "attn2.to_q" },  { "cross_attn.k", "attn2.to_k" },
	{ "cross_attn.v", "attn2.to_v" },  { "cross_attn.o", "attn2.to_out.0" },
	{ "cross_attn.norm_q", "attn2.norm_q" }, { "cross_attn.norm_k", "attn2.norm_k" },
	{ "norm3", "norm2" },              { "ffn.0", "ffn.net.0.proj" },
	{ "ffn.2", "ffn.net.2" },
};

/* Every linear layer a model of config C loads by name (the patch
 * embedding and proj_out are read as tensors and reordered: adapters do not
 * reach them), named as the model loads it and as Wan-AI's original layout
 * holds it: renamed, never split. */
int pd_wan_linears(const struct pd_wan_config *c, struct pd_dit_linear **out, int *n)
{
	int64_t D = c->dim, F = c->ffn_dim;
	/* the pd_wf_top and pd_wf_block rows that are linear layers, with their shapes */
	const struct {
		int row, block;
		int64_t n_out, n_in;
	} lin[] = {
		{ 1, 0, D, c->text_dim }, { 2, 0, D, D }, { 3, 0, D, c->freq_dim }, { 4, 0, D, D }, { 5, 0, 6 * D, D },
		{ 0, 1, D, D }, { 1, 1, D, D }, { 2, 1, D, D }, { 3, 1, D, D },
		{ 6, 1, D, D }, { 7, 1, D, D }, { 8, 1, D, D }, { 9, 1, D, D },
		{ 13, 1, F, D }, { 14, 1, D, F },
	};
	int per = 0, top = 0, k = 0;
	struct pd_dit_linear *t;

	for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i++)
		lin[i].block ? per++ : top++;
	*out = NULL;
	*n = 0;
	t = pd_calloc((size_t)(top + per * c->layers), sizeof(*t), "the layers' names");
	if (!t)
		return -1;
	for (int b = -1; b < c->layers; b++)
		for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i++) {
			const char *const *names = lin[i].block ? pd_wf_block[lin[i].row] : pd_wf_top[lin[i].row];
			struct pd_dit_linear *l;

			if ((b >= 0) != lin[i].block)
				continue;
			l = &t[k++];
			if (b >= 0) {
				snprintf(l->name, sizeof(l->name), "blocks.%d.%s", b, names[1]);
				snprintf(l->native, sizeof(l->native), "blocks.%d.%s", b, names[0]);
			} else {
				snprintf(l->name, sizeof(l->name), "%s", names[1]);
				snprintf(l->native, sizeof(l->native), "%s", names[0]);
			}
			l->n_out = l->native_rows = lin[i].n_out;
			l->n_in = lin[i].n_in;
		}
	*out = t;
	*n = k;
	return 0;
}

/* The prefix before the original names ("model.diffusion_model." in
 * ComfyUI's files), or -1 when ST is not in the original layout. */
static int pd_wf_prefix(const struct pd_st *st, char *pre, size_t n)
{
	static const char key[] = "blocks.0.self_attn.q.weight";
	const struct pd_st_tensor *t = pd_st_find_suffix(st, key);
	const struct pd_st_tensor *m = pd_st_find_suffix(st, "head.modulation");

	if (!t || !m)
		return -1;
	snprintf(pre, n, "%.*s", (int)(strlen(t->name) - strlen(key)), t->name);
	return strncmp(m->name, pre, strlen(pre)) == 0 ? 0 : -1;
}

int pd_wan_file_layout(const struct pd_st *st)
{
	char pre[200];

	if (pd_wf_prefix(st, pre, sizeof(pre)) == 0)
		return 1;
	return pd_st_find_suffix(st, "condition_embedder.time_proj.weight") ? 0 : -1;
}

static const struct pd_st_tensor *pd_wf_get(const struct pd_st *st, const char *pre, const char *name)
{
	char full[400];

	snprintf(full, sizeof(full), "%s%s", pre, name);
	return pd_st_get(st, full);
}

static int pd_wf_count_blocks(const struct pd_st *st, const char *pre)
{
	char name[200];
	int n = 0;

	for (;; n++) {
		snprintf(name, sizeof(name), "blocks.%d.self_attn.q.weight", n);
		if (!pd_wf_get(st, pre, name))
			return n;
	}
}

/* Sizes from the shapes of a file in the original layout. The head width
 * is in no tensor: 128, as in every Wan2.1 (and as ComfyUI assumes). */
static int pd_wf_infer(struct pd_wan_config *c, const struct pd_st *st, const char *pre)
{
	const struct pd_st_tensor *pe = pd_wf_get(st, pre, "patch_embedding.weight");
	const struct pd_st_tensor *te = pd_wf_get(st, pre, "text_embedding.0.weight");
	const struct pd_st_tensor *tm = pd_wf_get(st, pre, "time_embedding.0.weight");
	const struct pd_st_tensor *ff = pd_wf_get(st, pre, "blocks.0.ffn.0.weight");
	const struct pd_st_tensor *hd = pd_wf_get(st, pre, "head.head.weight");

	memset(c, 0, sizeof(*c));
	if (!pe || !te || !tm || !ff || !hd || pe->ndim != 5 || te->ndim != 2 || tm->ndim != 2 || ff->ndim != 2 ||
	    hd->ndim != 2)
		return pd_errorf("%s: patch_embedding, text_embedding.0, time_embedding.0, blocks.0.ffn.0 or head.head "
				 "missing or of the wrong rank", st->path);
	if (pd_wf_get(st, pre, "blocks.0.cross_attn.k_img.weight") || pd_wf_get(st, pre, "img_emb.proj.1.weight"))
		return pd_errorf("%s: an image-to-video Wan (k_img, img_emb); pdit runs Wan2.1 text-to-video", st->path);
	c->dim = (int)pe->shape[0];
	c->in_channels = (int)pe->shape[1];
	for (int i = 0; i < 3; i++)
		c->patch[i] = (int)pe->shape[2 + i];
	c->head_dim = 128;
	c->heads = c->dim / 128;
	c->ffn_dim = (int)ff->shape[0];
	c->layers = pd_wf_count_blocks(st, pre);
	c->text_dim = (int)te->shape[1];
	c->freq_dim = (int)tm->shape[1];
	c->out_channels = (int)(hd->shape[0] / ((int64_t)c->patch[0] * c->patch[1] * c->patch[2]));
	c->eps = 1e-6f;
	c->rope_max = 1024;
	if (c->dim % 128 || c->heads < 1)
		return pd_errorf("%s: width %d is not a multiple of Wan2.1's heads of 128; give --config FILE.json",
				 st->path, c->dim);
	return 0;
}

int pd_wan_file_config(struct pd_wan_config *c, const struct pd_st *st)
{
	struct pd_config j;
	char pre[200];
	int rc = pd_st_meta_config(st, &j);

	if (rc < 0)
		return -1;
	if (rc) {
		rc = pd_wan_config_json(c, &j);
		pd_config_free(&j);
		return rc;
	}
	if (pd_wf_prefix(st, pre, sizeof(pre)))
		return pd_errorf("%s: diffusers' Wan names but no config: give --config FILE.json or the transformer folder",
				 st->path);
	if (pd_wf_infer(c, st, pre))
		return -1;
	return pd_wan_config_check(c, st->path);
}

/* NAME(.weight/.bias) of the view = SRC(.weight/.bias) of the base; with
 * BARE the name has no extension (a parameter: the modulation tables). */
static int pd_wf_map(struct pd_st *view, const struct pd_st *base, const char *pre, const char *src, const char *dst,
		     int bare)
{
	static const char *const ext[2] = { ".weight", ".bias" };

	for (int e = 0; e < (bare ? 1 : 2); e++) {
		char s[300], d[300];
		const struct pd_st_tensor *t;

		snprintf(s, sizeof(s), "%s%s%s", pre, src, bare ? "" : ext[e]);
		snprintf(d, sizeof(d), "%s%s", dst, bare ? "" : ext[e]);
		t = pd_st_get(base, s);
		if (!t) {
			if (e == 1)
				continue;   /* a missing bias: the model says whether it needs one */
			return pd_errorf("%s: no %s (a Wan transformer in the original layout has one)", base->path, s);
		}
		if (pd_st_view_add(view, d, t, 0, t->shape[0], 0, t->ndim, NULL))
			return -1;
	}
	return 0;
}

int pd_wan_file_open(struct pd_st **out, const char *path)
{
	struct pd_st *base = NULL, *view = NULL;
	char pre[200];
	int layers, rc = 0;

	*out = NULL;
	if (pd_st_open_path(&base, path, "diffusion_pytorch_model"))
		return -1;
	if (pd_wf_prefix(base, pre, sizeof(pre))) {
		*out = base;            /* diffusers' names: read as they are */
		return 0;
	}
	if (pd_st_view_new(&view, base)) {
		pd_st_close(base);
		return -1;
	}
	layers = pd_wf_count_blocks(base, pre);
	for (size_t i = 0; i < sizeof(pd_wf_top) / sizeof(pd_wf_top[0]) && !rc; i++)
		rc = pd_wf_map(view, base, pre, pd_wf_top[i][0], pd_wf_top[i][1], 0);
	if (!rc)
		rc = pd_wf_map(view, base, pre, "head.modulation", "scale_shift_table", 1);
	for (int b = 0; b < layers && !rc; b++) {
		char s[100], d[100];

		snprintf(s, sizeof(s), "blocks.%d.modulation", b);
		snprintf(d, sizeof(d), "blocks.%d.scale_shift_table", b);
		rc = pd_wf_map(view, base, pre, s, d, 1);
		for (size_t i = 0; i < sizeof(pd_wf_block) / sizeof(pd_wf_block[0]) && !rc; i++) {
			snprintf(s, sizeof(s), "blocks.%d.%s", b, pd_wf_block[i][0]);
			snprintf(d, sizeof(d), "blocks.%d.%s", b, pd_wf_block[i][1]);
			rc = pd_wf_map(view, base, pre, s, d, 0);
		}
	}
	if (rc || pd_st_view_done(view)) {
		pd_st_close(view);
		return -1;
	}
	*out = view;
	return 0;
}
