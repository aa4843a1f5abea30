/*
 * pd_flux.h - the FLUX.1 transformer (diffusers' FluxTransformer2DModel).
 *
 * Sizes come from the model folder's config.json; nothing assumes FLUX.1's
 * 3072/24/19/38.  The formulas follow diffusers v0.40 as the golden
 * README (tests/golden/flux-tiny/README.md) documents them line by line.
 *
 *   struct pd_flux *m;
 *   pd_flux_load(&m, "model/transformer", be);
 *   struct pd_dit_call in = { .txt_len = T, .img_len = L, ... };
 *   pd_flux_forward(m, &in, out, NULL);     // out: [L, out_channels]
 *   pd_flux_free(m);
 *
 * One forward call runs one image (batch 1): a batch is a loop, which keeps
 * every image bit-identical to its batch-1 run and maps directly onto data
 * and CFG parallelism.  The joint sequence is text first, then image.
 */
#ifndef PD_FLUX_H
#define PD_FLUX_H

#include <stdint.h>

#include "pd_backend.h"
#include "pd_dit.h"
#include "pd_dump.h"

struct pd_config;

#define PD_FLUX_MAX_AXES 8

struct pd_flux_config {
	int in_channels;                /* packed latent channels (4 x VAE latent channels) */
	int out_channels;               /* prediction channels (= in_channels unless set) */
	int num_layers;                 /* double-stream blocks */
	int num_single_layers;          /* single-stream blocks */
	int heads;                      /* attention heads */
	int head_dim;                   /* channels per head */
	int dim;                        /* inner width = heads * head_dim */
	int mlp_dim;                    /* feed-forward width (read from the weights; 4 x dim in FLUX.1) */
	int joint_attention_dim;        /* text-encoder (T5) width */
	int pooled_projection_dim;      /* pooled (CLIP) width */
	int guidance_embeds;            /* has the distilled-guidance embedder (dev) */
	int n_axes;                     /* RoPE axes (3 in FLUX.1) */
	int axes_dims[PD_FLUX_MAX_AXES]; /* channels per RoPE axis, summing to head_dim */
	/* Qwen-Image's transformer (QwenImageTransformer2DModel) is FLUX's
	 * double-stream block without single blocks: its names (img_in,
	 * txt_in, img_mod.1, txt_mod.1, img_mlp, txt_mlp), an RMSNorm of the
	 * text before txt_in (txt_norm), no pooled or guidance embedding;
	 * the same arithmetic otherwise (modulation chunks, q/k RMSNorm,
	 * interleaved RoPE, [text, image] attention, final scale/shift) */
	int qwen;
};

/* Checks a diffusers QwenImageTransformer2DModel config already parsed
 * (its proj_out writes patch_size^2 x out_channels: out_channels here). */
int pd_flux_config_parse_qwen(struct pd_flux_config *cfg, const struct pd_config *c);

struct pd_st;

/* Reads and checks DIR/config.json (or a single file's sizes, as
 * pd_flux_open_file finds them). */
int pd_flux_config_load(struct pd_flux_config *cfg, const char *dir);
/* PATH's config (a folder's config.json, or a single file's: CONFIG, its
 * metadata, or its shapes) into C and its sizes and kept-quantized share
 * into INFO: the probe of FLUX.1 and of Qwen-Image, which shares the
 * transformer. */
int pd_flux_probe_config(const char *path, const char *config, struct pd_flux_config *c, struct pd_dit_info *info);
/* Checks a diffusers transformer config already parsed. */
int pd_flux_config_parse(struct pd_flux_config *cfg, const struct pd_config *c);

/* A transformer in one .safetensors file, as Black Forest Labs publish it
 * (double_blocks.N.img_attn.qkv, single_blocks.N.linear1, final_layer with
 * its modulation as (shift, scale)) or with diffusers' names, under any
 * prefix ("model.diffusion_model."): *ST gets a view with diffusers' names
 * (fused projections split by rows, the final modulation's halves
 * swapped), CFG its sizes: from a "config" metadata entry (a diffusers
 * config.json) when present, else from the tensors' shapes, with FLUX.1's
 * RoPE axes (16, 56, 56) for heads of 128; CONFIG_JSON (a diffusers
 * config.json, may be NULL) before either. The file may be a GGUF one
 * (ComfyUI-GGUF's or stable-diffusion.cpp's) or fp8 safetensors. */
int pd_flux_open_file(struct pd_st **st, const char *path, struct pd_flux_config *cfg, const char *config_json);

/* Every linear layer of a model of config C, named as the model loads it
 * and as Black Forest Labs' files hold it (*OUT malloc'd, *N entries):
 * how those files and adapters in their names are read. */
int pd_flux_linears(const struct pd_flux_config *c, struct pd_dit_linear **out, int *n);

struct pd_flux;

/* FLUX.1's pipeline side: 2x2 latent patches, (0, row, column) positions. */
extern const struct pd_dit_family pd_flux_family;
/* FLUX's geometry, which Qwen-Image shares: the VAE's latent at 1/8 of the
 * picture, its 2x2 patches the tokens (packed[(i w/2 + j), ch 4 + dy 2 +
 * dx] = latent[ch, 2i + dy, 2j + dx]). */
int pd_flux_latent_shape(struct pd_latent_shape *ls, const struct pd_dit_info *info, int frames, int height, int width);
void pd_flux_pack(const struct pd_latent_shape *ls, const float *unpacked, float *packed);
void pd_flux_unpack(const struct pd_latent_shape *ls, const float *packed, float *unpacked);

/* The sizes the outside sees (pd_dit.h) of a model of config CFG. */
int pd_flux_dit_info(const struct pd_flux_config *cfg, struct pd_dit_info *info);

int pd_flux_load(struct pd_flux **out, const char *dir, struct pd_backend *be);
/* SHARD NULL: the whole model. Tensor parallel keeps the rows of the
 * column-parallel layers (q, k, v, the first MLP layer, modulations) and the
 * columns of the row-parallel ones (attention output projections, the
 * second MLP layer, single-block proj_out with its packed [attention | MLP]
 * input); only shard 0 adds their bias. The head count and the MLP width
 * must divide by shard->count. Only the stage holding block 0 loads the
 * embedders, only the one holding the last block the final layers. */
int pd_flux_load_shard(struct pd_flux **out, const char *dir, struct pd_backend *be, const struct pd_dit_shard *shard);
/* A single file (GGUF, fp8 or BF16 safetensors) with its config from
 * CONFIG_JSON (a diffusers config.json): the files carry none, and a small
 * model's RoPE axes cannot be told from its shapes. */
int pd_flux_load_config(struct pd_flux **out, const char *path, const char *config_json, struct pd_backend *be);
/* The same model seen through the DiT interface (freed with pd_dit_free). */
int pd_flux_load_dit(struct pd_dit **out, const char *dir, const char *config, struct pd_backend *be,
		     const struct pd_dit_shard *shard);
/* M as a struct pd_dit (the same object). */
struct pd_dit *pd_flux_dit(struct pd_flux *m);
void pd_flux_free(struct pd_flux *m);
const struct pd_flux_config *pd_flux_get_config(const struct pd_flux *m);



/* Runs the transformer on one image (pd_dit_forward: First Block Cache when
 * in->cache is set); OUT (host) receives [img_len, out_channels]. DUMP may
 * be NULL. */
int pd_flux_forward(struct pd_flux *m, const struct pd_dit_call *in, float *out, const struct pd_dump *dump);

/* A part of a forward call (a pipeline stage): blocks [first, first+count)
 * on the rows of IN. X_IN (host, [txt_len + img_len, dim], text rows
 * first) holds the hidden states after block first - 1, or is NULL to run
 * the embedders (first must be 0). With OUT not NULL the final norm and
 * projection follow and OUT gets the prediction of the image rows; otherwise
 * X_OUT (host) gets the hidden states. in->cache is not used here. */
int pd_flux_forward_blocks(struct pd_flux *m, const struct pd_dit_call *in, int first, int count,
			   const float *x_in, float *x_out, float *out, const struct pd_dump *dump);

/* Blocks of the model: num_layers + num_single_layers. */
int pd_flux_blocks(const struct pd_flux_config *cfg);

/* RoPE tables [n, head_dim] for position ids [n, n_axes] (float64 inside,
 * as diffusers does on CPU). */
void pd_rope_tables(const struct pd_flux_config *cfg, const float *ids, int64_t n, float *cos_out,
		    float *sin_out);

/* Its random model folders (pdit tiny; pd_flux_tiny.c). */
extern const struct pd_family_tiny pd_flux_tiny_models;

#endif /* PD_FLUX_H */
