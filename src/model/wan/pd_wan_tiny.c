/*
 * pd_wan_tiny.c - Wan2.1's random model folders for `pdit tiny`: a whole
 * text-to-video folder as diffusers publishes it (transformer,
 * AutoencoderKLWan decoder, UMT5 and its tokenizer with byte fallback,
 * UniPC); pd_tiny.h has the shared parts.
 */
#include "pd_wan.h"
#include "pd_st_writer.h"
#include "pd_tiny.h"
#include "pd_util.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pd_wan_tiny_small(struct pd_tiny_opts *o)
{
	pd_tiny_defaults(o);
	o->heads = 2;
	o->head_dim = 32;
	o->layers = 2;
	o->ffn_dim = 128;
	o->text_dim = 32;
	o->umt5_layers = 2;
	o->umt5_heads = 4;
	o->umt5_ff = 64;
	o->wan_vae_base = 8;
}

static void pd_wan_tiny_width(struct pd_tiny_opts *o)
{
	pd_wan_tiny_small(o);
	o->dtype = PD_BF16;
	o->heads = 12;
	o->head_dim = 128;
	o->ffn_dim = 8960;
	o->text_dim = 4096;
	o->umt5_heads = 64;
	o->umt5_ff = 10240;
	o->wan_vae_base = 96;
}

static int pd_wan_tiny_transformer(const char *dir, const struct pd_tiny_opts *o)
{
	int64_t D = (int64_t)o->heads * o->head_dim, F = o->ffn_dim, E = o->text_dim, P = 16 * 4;
	int64_t ps[5] = { D, 16, 1, 2, 2 }, pb[1] = { D }, t6[3] = { 1, 6, D }, t2[3] = { 1, 2, D };
	struct pd_tiny_writer tw;
	cJSON *c = cJSON_CreateObject(), *a;
	char *path;
	int rc;

	if (!c)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(c, "_class_name", "WanTransformer3DModel");
	cJSON_AddStringToObject(c, "_diffusers_version", "0.40.0");
	cJSON_AddNullToObject(c, "added_kv_proj_dim");
	cJSON_AddNumberToObject(c, "attention_head_dim", o->head_dim);
	cJSON_AddBoolToObject(c, "cross_attn_norm", 1);
	cJSON_AddNumberToObject(c, "eps", 1e-6);
	cJSON_AddNumberToObject(c, "ffn_dim", (double)F);
	cJSON_AddNumberToObject(c, "freq_dim", 256);
	cJSON_AddNullToObject(c, "image_dim");
	cJSON_AddNumberToObject(c, "in_channels", 16);
	cJSON_AddNumberToObject(c, "num_attention_heads", o->heads);
	cJSON_AddNumberToObject(c, "num_layers", o->layers);
	cJSON_AddNumberToObject(c, "out_channels", 16);
	a = cJSON_AddArrayToObject(c, "patch_size");
	cJSON_AddItemToArray(a, cJSON_CreateNumber(1));
	cJSON_AddItemToArray(a, cJSON_CreateNumber(2));
	cJSON_AddItemToArray(a, cJSON_CreateNumber(2));
	cJSON_AddNullToObject(c, "pos_embed_seq_len");
	cJSON_AddStringToObject(c, "qk_norm", "rms_norm_across_heads");
	cJSON_AddNumberToObject(c, "rope_max_seq_len", 1024);
	cJSON_AddNumberToObject(c, "text_dim", (double)E);
	if (pd_tiny_save_json(dir, "config.json", c) || pd_tiny_writer_init(&tw, o->seed + 20, o->dtype, 16 + 32 * o->layers))
		return -1;
	pd_tiny_add(&tw, 0.0f, 1.0f / sqrtf((float)P), 5, ps, "patch_embedding.weight");
	pd_tiny_add(&tw, 0.0f, 0.05f, 1, pb, "patch_embedding.bias");
	pd_tiny_linear(&tw, D, 256, "condition_embedder.time_embedder.linear_1");
	pd_tiny_linear(&tw, D, D, "condition_embedder.time_embedder.linear_2");
	pd_tiny_linear(&tw, 6 * D, D, "condition_embedder.time_proj");
	pd_tiny_linear(&tw, D, E, "condition_embedder.text_embedder.linear_1");
	pd_tiny_linear(&tw, D, D, "condition_embedder.text_embedder.linear_2");
	for (int i = 0; i < o->layers; i++) {
		char b[96];

		for (int at = 1; at <= 2; at++) {
			pd_tiny_linear(&tw, D, D, "blocks.%d.attn%d.to_q", i, at);
			pd_tiny_linear(&tw, D, D, "blocks.%d.attn%d.to_k", i, at);
			pd_tiny_linear(&tw, D, D, "blocks.%d.attn%d.to_v", i, at);
			pd_tiny_linear(&tw, D, D, "blocks.%d.attn%d.to_out.0", i, at);
			snprintf(b, sizeof(b), "blocks.%d.attn%d.norm_q", i, at);
			pd_tiny_norm(&tw, D, 0, b);
			snprintf(b, sizeof(b), "blocks.%d.attn%d.norm_k", i, at);
			pd_tiny_norm(&tw, D, 0, b);
		}
		snprintf(b, sizeof(b), "blocks.%d.norm2", i);
		pd_tiny_norm(&tw, D, 1, b);
		pd_tiny_linear(&tw, F, D, "blocks.%d.ffn.net.0.proj", i);
		pd_tiny_linear(&tw, D, F, "blocks.%d.ffn.net.2", i);
		pd_tiny_add(&tw, 0.0f, 1.0f / sqrtf((float)D), 3, t6, "blocks.%d.scale_shift_table", i);
	}
	pd_tiny_linear(&tw, 16 * 4, D, "proj_out");
	pd_tiny_add(&tw, 0.0f, 1.0f / sqrtf((float)D), 3, t2, "scale_shift_table");
	path = pd_strfmt("%s/diffusion_pytorch_model.safetensors", dir);
	rc = !path || pd_tiny_writer_save(&tw, path);
	free(path);
	return rc ? -1 : 0;
}

/* A Wan residual block's weights (VW:315-386). */
static void pd_wan_tiny_res(struct pd_tiny_writer *tw, int64_t ci, int64_t co, const char *p)
{
	int64_t g1[4] = { ci, 1, 1, 1 }, g2[4] = { co, 1, 1, 1 };

	pd_tiny_add(tw, 1.0f, 0.1f, 4, g1, "%s.norm1.gamma", p);
	pd_tiny_conv3(tw, co, ci, 3, 3, "%s.conv1", p);
	pd_tiny_add(tw, 1.0f, 0.1f, 4, g2, "%s.norm2.gamma", p);
	pd_tiny_conv3(tw, co, co, 3, 3, "%s.conv2", p);
	if (ci != co)
		pd_tiny_conv3(tw, co, ci, 1, 1, "%s.conv_shortcut", p);
}

/* AutoencoderKLWan's decoder as WanDecoder3d lays it out (dims base x
 * [4, 4, 4, 2, 1], each up block after the first starting from half the
 * channels, temporal upsamplers first), under the class CLS (Qwen-Image's
 * AutoencoderKLQwenImage is the same); the encoder is not written. */
int pd_wan_tiny_vae(const char *dir, const struct pd_tiny_opts *o, const char *cls)
{
	static const double mean[16] = { -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
					 0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921 };
	static const double std[16] = { 2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
					3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916 };
	static const int mult[4] = { 1, 2, 4, 4 };
	int64_t b = o->wan_vae_base, dims[5] = { 4 * b, 4 * b, 4 * b, 2 * b, b }, g[3], qs[4], ps[4];
	struct pd_tiny_writer tw;
	cJSON *c = cJSON_CreateObject(), *a;
	char p[128], *path;
	int rc;

	if (!c)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(c, "_class_name", cls);
	cJSON_AddStringToObject(c, "_diffusers_version", "0.40.0");
	cJSON_AddItemToObject(c, "attn_scales", cJSON_CreateArray());
	cJSON_AddNumberToObject(c, "base_dim", (double)b);
	a = cJSON_AddArrayToObject(c, "dim_mult");
	for (int i = 0; i < 4; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(mult[i]));
	cJSON_AddNumberToObject(c, "dropout", 0.0);
	cJSON_AddNumberToObject(c, "in_channels", 3);
	cJSON_AddBoolToObject(c, "is_residual", 0);
	cJSON_AddItemToObject(c, "latents_mean", cJSON_CreateDoubleArray(mean, 16));
	cJSON_AddItemToObject(c, "latents_std", cJSON_CreateDoubleArray(std, 16));
	cJSON_AddNumberToObject(c, "num_res_blocks", 2);
	cJSON_AddNumberToObject(c, "out_channels", 3);
	cJSON_AddNumberToObject(c, "scale_factor_spatial", 8);
	cJSON_AddNumberToObject(c, "scale_factor_temporal", 4);
	a = cJSON_AddArrayToObject(c, "temperal_downsample");
	cJSON_AddItemToArray(a, cJSON_CreateFalse());
	cJSON_AddItemToArray(a, cJSON_CreateTrue());
	cJSON_AddItemToArray(a, cJSON_CreateTrue());
	cJSON_AddNumberToObject(c, "z_dim", 16);
	if (pd_tiny_save_json(dir, "config.json", c) || pd_tiny_writer_init(&tw, o->seed + 30, o->dtype, 160))
		return -1;
	pd_tiny_conv3(&tw, 16, 16, 1, 1, "post_quant_conv");
	pd_tiny_conv3(&tw, dims[0], 16, 3, 3, "decoder.conv_in");
	pd_wan_tiny_res(&tw, dims[0], dims[0], "decoder.mid_block.resnets.0");
	pd_wan_tiny_res(&tw, dims[0], dims[0], "decoder.mid_block.resnets.1");
	g[0] = dims[0];
	g[1] = g[2] = 1;
	pd_tiny_add(&tw, 1.0f, 0.1f, 3, g, "decoder.mid_block.attentions.0.norm.gamma");
	qs[0] = 3 * dims[0], qs[1] = dims[0], qs[2] = qs[3] = 1;
	ps[0] = ps[1] = dims[0], ps[2] = ps[3] = 1;
	pd_tiny_add(&tw, 0.0f, 1.0f / sqrtf((float)dims[0]), 4, qs, "decoder.mid_block.attentions.0.to_qkv.weight");
	pd_tiny_add(&tw, 0.0f, 0.05f, 1, qs, "decoder.mid_block.attentions.0.to_qkv.bias");
	pd_tiny_add(&tw, 0.0f, 1.0f / sqrtf((float)dims[0]), 4, ps, "decoder.mid_block.attentions.0.proj.weight");
	pd_tiny_add(&tw, 0.0f, 0.05f, 1, ps, "decoder.mid_block.attentions.0.proj.bias");
	for (int i = 0; i < 4; i++) {
		int64_t in = i > 0 ? dims[i] / 2 : dims[i], out = dims[i + 1];

		for (int r = 0; r < 3; r++) {
			snprintf(p, sizeof(p), "decoder.up_blocks.%d.resnets.%d", i, r);
			pd_wan_tiny_res(&tw, r ? out : in, out, p);
		}
		if (i < 3) {
			pd_tiny_conv(&tw, out / 2, out, 3, "decoder.up_blocks.%d.upsamplers.0.resample.1", i);
			if (i < 2)
				pd_tiny_conv3(&tw, 2 * out, out, 3, 1, "decoder.up_blocks.%d.upsamplers.0.time_conv", i);
		}
	}
	{
		int64_t g4[4] = { dims[4], 1, 1, 1 };

		pd_tiny_add(&tw, 1.0f, 0.1f, 4, g4, "decoder.norm_out.gamma");
	}
	pd_tiny_conv3(&tw, 3, dims[4], 3, 3, "decoder.conv_out");
	path = pd_strfmt("%s/diffusion_pytorch_model.safetensors", dir);
	rc = !path || pd_tiny_writer_save(&tw, path);
	free(path);
	return rc ? -1 : 0;
}

static int pd_wan_tiny_umt5(const char *dir, const struct pd_tiny_opts *o, int vocab)
{
	return pd_tiny_t5_encoder(dir, o, o->text_dim, o->umt5_heads, o->umt5_ff, o->umt5_layers, vocab, 1, o->seed + 40, 1);
}

static int pd_wan_tiny_rest(const char *dir)
{
	static const char *const parts[][3] = {
		{ "scheduler", "diffusers", "UniPCMultistepScheduler" },
		{ "text_encoder", "transformers", "UMT5EncoderModel" },
		{ "tokenizer", "transformers", "T5Tokenizer" },
		{ "transformer", "diffusers", "WanTransformer3DModel" },
		{ "vae", "diffusers", "AutoencoderKLWan" },
	};
	cJSON *sch = cJSON_CreateObject();
	char *sdir = pd_strfmt("%s/scheduler", dir);
	int rc;

	if (!sch || !sdir) {
		cJSON_Delete(sch);
		free(sdir);
		return pd_errorf("out of memory");
	}
	/* Wan-AI's scheduler folder */
	cJSON_AddStringToObject(sch, "_class_name", "UniPCMultistepScheduler");
	cJSON_AddStringToObject(sch, "_diffusers_version", "0.40.0");
	cJSON_AddItemToObject(sch, "disable_corrector", cJSON_CreateArray());
	cJSON_AddStringToObject(sch, "final_sigmas_type", "zero");
	cJSON_AddNumberToObject(sch, "flow_shift", 3.0);
	cJSON_AddBoolToObject(sch, "lower_order_final", 1);
	cJSON_AddNumberToObject(sch, "num_train_timesteps", 1000);
	cJSON_AddBoolToObject(sch, "predict_x0", 1);
	cJSON_AddStringToObject(sch, "prediction_type", "flow_prediction");
	cJSON_AddNumberToObject(sch, "solver_order", 2);
	cJSON_AddStringToObject(sch, "solver_type", "bh2");
	cJSON_AddBoolToObject(sch, "thresholding", 0);
	cJSON_AddBoolToObject(sch, "use_flow_sigmas", 1);
	rc = pd_tiny_model_index(dir, "WanPipeline", parts, (int)(sizeof(parts) / sizeof(parts[0]))) |
	     pd_tiny_save_json(sdir, "scheduler_config.json", sch);
	free(sdir);
	return rc ? -1 : 0;
}

static int pd_wan_tiny(const char *dir, const struct pd_tiny_opts *o)
{
	char *t = pd_strfmt("%s/transformer", dir), *v = pd_strfmt("%s/vae", dir);
	char *tk = pd_strfmt("%s/tokenizer", dir), *te = pd_strfmt("%s/text_encoder", dir);
	int vocab = 0, rc = -1;

	if (o->heads < 1 || o->head_dim < 6 || o->head_dim % 2 || o->layers < 0 || o->ffn_dim < 1 || o->text_dim < 1 ||
	    o->umt5_layers < 0 || o->umt5_heads < 1 || o->umt5_ff < 1 || o->wan_vae_base < 2 || o->wan_vae_base % 2) {
		pd_errorf("tiny: invalid Wan sizes");
		goto out;
	}
	if (o->layers < 1) {
		pd_errorf("--layers: a model needs at least one block");
		goto out;
	}
	if (t && v && tk && te && !pd_mkdirs(dir) && !pd_wan_tiny_rest(dir) && !pd_wan_tiny_transformer(t, o) &&
	    !pd_wan_tiny_vae(v, o, "AutoencoderKLWan") && !pd_tiny_umt5_tokenizer(tk, &vocab) && !pd_wan_tiny_umt5(te, o, vocab))
		rc = 0;
out:
	free(t);
	free(v);
	free(tk);
	free(te);
	return rc;
}


static void pd_wan_tiny_defaults(struct pd_tiny_opts *o, int real)
{
	if (real)
		pd_wan_tiny_width(o);
	else
		pd_wan_tiny_small(o);
}

/* Wan's own sizes (the transformer's heads, layers and widths are the
 * shared flags') */
static const struct pd_tiny_flag pd_wan_tiny_flags[] = {
	{ "ffn-dim", offsetof(struct pd_tiny_opts, ffn_dim), "Wan: feed-forward width (default 128)" },
	{ "wan-vae-base", offsetof(struct pd_tiny_opts, wan_vae_base), "Wan: the VAE's base_dim, even (default 8)" },
	{ "umt5-layers", offsetof(struct pd_tiny_opts, umt5_layers), "Wan: UMT5 layers (default 2)" },
	{ NULL, 0, NULL },
};

static void pd_wan_tiny_summary(const struct pd_tiny_opts *o, char *buf, size_t len)
{
	snprintf(buf, len, "Wan2.1: %d heads x %d, %d blocks, FFN %d, UMT5 %d wide", o->heads, o->head_dim, o->layers,
		 o->ffn_dim, o->text_dim);
}

const struct pd_family_tiny pd_wan_tiny_models = {
	.write = pd_wan_tiny,
	.defaults = pd_wan_tiny_defaults,
	.flags = pd_wan_tiny_flags,
	.summary = pd_wan_tiny_summary,
};
