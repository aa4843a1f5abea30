/*
 * pd_flux_tiny.c - FLUX's random model folders for `pdit tiny`: the
 * transformer in diffusers' layout, and the folder laid out as the
 * published FLUX.1-dev repository (pd_tiny.h has the shared parts).
 */
#include "pd_flux.h"
#include "pd_st_writer.h"
#include "pd_tiny.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pd_flux_tiny_width(struct pd_tiny_opts *o)
{
	pd_tiny_defaults(o);
	o->dtype = PD_BF16;
	o->heads = 24;
	o->head_dim = 128;
	o->layers = 2;
	o->single_layers = 4;
	o->joint_dim = 4096;
	o->pooled_dim = 768;
	o->vae_blocks[0] = 128;
	o->vae_blocks[1] = 256;
	o->vae_blocks[2] = 512;
	o->vae_blocks[3] = 512;
	o->vae_layers = 2;
	o->vae_groups = 32;
	o->txt_len = 512;
	o->clip_heads = 12;
	o->t5_heads = 64;
	o->t5_ff = 10240;
}

static void pd_flux_tiny_axes(const struct pd_tiny_opts *o, int axes[3])
{
	int a0, a1;

	if (o->axes[0]) {
		memcpy(axes, o->axes, sizeof(int) * 3);
		return;
	}
	/* FLUX.1's split (16, 56, 56) of 128, scaled, every part even. */
	a1 = ((o->head_dim - o->head_dim / 8) / 2) & ~1;
	a0 = o->head_dim - 2 * a1;
	axes[0] = a0;
	axes[1] = a1;
	axes[2] = a1;
}

static int pd_flux_tiny_transformer(const char *dir, const struct pd_tiny_opts *o)
{
	int64_t D = (int64_t)o->heads * o->head_dim, M = (int64_t)o->mlp_ratio * D, Dh = o->head_dim;
	struct pd_tiny_writer tw;
	cJSON *cfg = cJSON_CreateObject(), *ax;
	char *path;
	int axes[3], rc;

	pd_flux_tiny_axes(o, axes);
	if (!cfg)
		return pd_errorf("out of memory");
	cJSON_AddStringToObject(cfg, "_class_name", "FluxTransformer2DModel");
	cJSON_AddStringToObject(cfg, "_diffusers_version", "0.40.0");
	cJSON_AddNumberToObject(cfg, "attention_head_dim", o->head_dim);
	ax = cJSON_AddArrayToObject(cfg, "axes_dims_rope");
	for (int i = 0; i < 3; i++)
		cJSON_AddItemToArray(ax, cJSON_CreateNumber(axes[i]));
	cJSON_AddBoolToObject(cfg, "guidance_embeds", o->guidance);
	cJSON_AddNumberToObject(cfg, "in_channels", o->in_channels);
	cJSON_AddNumberToObject(cfg, "joint_attention_dim", o->joint_dim);
	cJSON_AddNumberToObject(cfg, "num_attention_heads", o->heads);
	cJSON_AddNumberToObject(cfg, "num_layers", o->layers);
	cJSON_AddNumberToObject(cfg, "num_single_layers", o->single_layers);
	cJSON_AddNullToObject(cfg, "out_channels");
	cJSON_AddNumberToObject(cfg, "patch_size", 1);
	cJSON_AddNumberToObject(cfg, "pooled_projection_dim", o->pooled_dim);
	if (pd_tiny_save_json(dir, "config.json", cfg))
		return -1;
	if (pd_tiny_writer_init(&tw, o->seed, o->dtype, 64 + 48 * o->layers + 24 * o->single_layers))
		return -1;
	pd_tiny_linear(&tw, D, o->in_channels, "x_embedder");
	pd_tiny_linear(&tw, D, o->joint_dim, "context_embedder");
	pd_tiny_linear(&tw, D, 256, "time_text_embed.timestep_embedder.linear_1");
	pd_tiny_linear(&tw, D, D, "time_text_embed.timestep_embedder.linear_2");
	if (o->guidance) {
		pd_tiny_linear(&tw, D, 256, "time_text_embed.guidance_embedder.linear_1");
		pd_tiny_linear(&tw, D, D, "time_text_embed.guidance_embedder.linear_2");
	}
	pd_tiny_linear(&tw, D, o->pooled_dim, "time_text_embed.text_embedder.linear_1");
	pd_tiny_linear(&tw, D, D, "time_text_embed.text_embedder.linear_2");
	for (int i = 0; i < o->layers; i++) {
		const char *p = "transformer_blocks";
		char b[96];

		pd_tiny_linear(&tw, 6 * D, D, "%s.%d.norm1.linear", p, i);
		pd_tiny_linear(&tw, 6 * D, D, "%s.%d.norm1_context.linear", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_q", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_k", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_v", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.add_q_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.add_k_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.add_v_proj", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_out.0", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_add_out", p, i);
		pd_tiny_linear(&tw, M, D, "%s.%d.ff.net.0.proj", p, i);
		pd_tiny_linear(&tw, D, M, "%s.%d.ff.net.2", p, i);
		pd_tiny_linear(&tw, M, D, "%s.%d.ff_context.net.0.proj", p, i);
		pd_tiny_linear(&tw, D, M, "%s.%d.ff_context.net.2", p, i);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_q", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_k", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_added_q", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_added_k", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
	}
	for (int i = 0; i < o->single_layers; i++) {
		const char *p = "single_transformer_blocks";
		char b[96];

		pd_tiny_linear(&tw, 3 * D, D, "%s.%d.norm.linear", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_q", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_k", p, i);
		pd_tiny_linear(&tw, D, D, "%s.%d.attn.to_v", p, i);
		pd_tiny_linear(&tw, M, D, "%s.%d.proj_mlp", p, i);
		pd_tiny_linear(&tw, D, D + M, "%s.%d.proj_out", p, i);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_q", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
		snprintf(b, sizeof(b), "%s.%d.attn.norm_k", p, i);
		pd_tiny_norm(&tw, Dh, 0, b);
	}
	pd_tiny_linear(&tw, 2 * D, D, "norm_out.linear");
	pd_tiny_linear(&tw, o->in_channels, D, "proj_out");
	path = pd_strfmt("%s/diffusion_pytorch_model.safetensors", dir);
	rc = path ? pd_tiny_writer_save(&tw, path) : -1;
	free(path);
	return rc;
}

static int pd_flux_tiny_t5(const char *dir, const struct pd_tiny_opts *o, int pieces)
{
	/* the embedding table is larger than the vocabulary, as T5's 32128 rows
	 * for 32100 ids */
	int64_t V = (pieces + 7) / 8 * 8 + 8;

	return pd_tiny_t5_encoder(dir, o, o->joint_dim, o->t5_heads, o->t5_ff ? o->t5_ff : 2 * o->joint_dim, o->t5_layers,
				  V, 0, o->seed + 12, 2);
}

static int pd_flux_tiny_text(const char *dir, const struct pd_tiny_opts *o)
{
	char *tk = pd_strfmt("%s/tokenizer", dir), *tk2 = pd_strfmt("%s/tokenizer_2", dir);
	char *te = pd_strfmt("%s/text_encoder", dir), *te2 = pd_strfmt("%s/text_encoder_2", dir);
	char *tr = pd_strfmt("%s/transformer", dir), *shard = pd_strfmt("%s/transformer/diffusion_pytorch_model.safetensors", dir);
	int cv = 0, tv = 0, rc;

	rc = !tk || !tk2 || !te || !te2 || !tr || !shard || pd_tiny_clip_tokenizer(tk, &cv) ||
	     pd_tiny_t5_tokenizer(tk2, &tv) || pd_tiny_clip(te, o, cv) || pd_flux_tiny_t5(te2, o, tv) ||
	     pd_st_write_shards(shard, tr, "diffusion_pytorch_model", 3);
	free(tk);
	free(tk2);
	free(te);
	free(te2);
	free(tr);
	free(shard);
	return rc ? -1 : 0;
}

/* FluxPipeline's model_index.json; the text encoders and tokenizers are
 * left out ([null, null]) unless FULL. */
static int pd_flux_tiny_index(const char *dir, int full)
{
	const char *parts[][3] = {
		{ "scheduler", "diffusers", "FlowMatchEulerDiscreteScheduler" },
		{ "text_encoder", "transformers", "CLIPTextModel" },
		{ "text_encoder_2", "transformers", "T5EncoderModel" },
		{ "tokenizer", "transformers", "CLIPTokenizer" },
		{ "tokenizer_2", "transformers", "T5TokenizerFast" },
		{ "transformer", "diffusers", "FluxTransformer2DModel" },
		{ "vae", "diffusers", "AutoencoderKL" },
	};

	for (int i = 1; !full && i <= 4; i++)
		parts[i][1] = NULL;
	return pd_tiny_model_index(dir, "FluxPipeline", (const char *const (*)[3])parts,
				   (int)(sizeof(parts) / sizeof(parts[0])));
}

/* FLUX.1-dev's layout: model_index.json, transformer/, vae/, scheduler/ and
 * embeds.safetensors; with FULL its text encoders and tokenizers too and
 * the transformer in shards with its index, as published. */
static int pd_flux_tiny(const char *dir, const struct pd_tiny_opts *o)
{
	char *t = pd_strfmt("%s/transformer", dir), *v = pd_strfmt("%s/vae", dir);
	char *s = pd_strfmt("%s/scheduler", dir), *e = pd_strfmt("%s/embeds.safetensors", dir);
	int rc = -1;

	if (!t || !v || !s || !e)
		goto out;
	if (o->heads < 1 || o->head_dim < 2 || o->head_dim % 2 || o->in_channels % 4 || o->in_channels < 4 ||
	    o->layers < 0 || o->single_layers < 0 || o->joint_dim < 1 || o->pooled_dim < 1 || o->batch < 1 ||
	    o->txt_len < 1 || o->mlp_ratio < 1) {
		pd_errorf("tiny: invalid sizes");
		goto out;
	}
	if (o->layers + o->single_layers < 1) {
		pd_errorf("--layers and --single-layers: a model needs at least one block");
		goto out;
	}
	for (int i = 0; i < 4; i++) {
		if (o->vae_blocks[i] < 1 || o->vae_blocks[i] % o->vae_groups) {
			pd_errorf("tiny: VAE channels must be multiples of the group count");
			goto out;
		}
	}
	if (pd_mkdirs(dir) || pd_flux_tiny_index(dir, o->full) || pd_flux_tiny_transformer(t, o) || pd_tiny_vae_kl(v, o) ||
	    pd_tiny_flow_scheduler(s, o->guidance) || pd_tiny_embeds(e, o) || (o->full && pd_flux_tiny_text(dir, o)))
		goto out;
	rc = 0;
out:
	free(t);
	free(v);
	free(s);
	free(e);
	return rc;
}

static void pd_flux_tiny_defaults(struct pd_tiny_opts *o, int real)
{
	if (real)
		pd_flux_tiny_width(o);
	else
		pd_tiny_defaults(o);
}

static const struct pd_tiny_flag pd_flux_tiny_flags[] = {
	{ NULL, 0, NULL },
};

static void pd_flux_tiny_summary(const struct pd_tiny_opts *o, char *buf, size_t len)
{
	snprintf(buf, len, "%d heads x %d, %d + %d blocks", o->heads, o->head_dim, o->layers, o->single_layers);
}

const struct pd_family_tiny pd_flux_tiny_models = {
	.write = pd_flux_tiny,
	.defaults = pd_flux_tiny_defaults,
	.flags = pd_flux_tiny_flags,
	.summary = pd_flux_tiny_summary,
};
