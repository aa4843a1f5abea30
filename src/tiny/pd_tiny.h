/*
 * pd_tiny.h - deterministic random model folders, so pdit runs end to end
 * with nothing downloaded: the options every family's writer takes, and the
 * tools and shared components they are written with (a weights file whose
 * tensors are drawn from PyTorch's generator seeded from the model seed and
 * each tensor's name; AutoencoderKL; the flow-matching scheduler; CLIP, T5
 * and UMT5 encoders with small made-up tokenizers in the real formats). A
 * family's own parts and its folder's layout are its own (model/flux's
 * pd_flux_tiny.c, model/wan's pd_wan_tiny.c), reached through its record
 * (pd_dit_family.tiny), so the files depend only on the options.
 */
#ifndef PD_TINY_H
#define PD_TINY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pd_safetensors.h"

struct pd_tiny_opts {
	uint64_t seed;                  /* everything is drawn from this */
	enum pd_dtype dtype;            /* weights on disk: F32, BF16 or F16 */
	/* transformer */
	int heads, head_dim;            /* attention heads x channels */
	int layers, single_layers;      /* double and single blocks */
	int in_channels;                /* 4 x latent channels */
	int joint_dim, pooled_dim;      /* text widths */
	int mlp_ratio;                  /* MLP width = ratio x heads x head_dim */
	int guidance;                   /* guidance embedder (dev-style) */
	int axes[3];                    /* RoPE axes; 0 = derived from head_dim */
	/* VAE */
	int vae_blocks[4];              /* block_out_channels */
	int vae_layers;                 /* layers_per_block */
	int vae_groups;                 /* norm_num_groups */
	/* text encoders and tokenizers (full) */
	int full;                       /* the whole published layout: encoders, tokenizers, shards */
	int clip_layers, clip_heads;    /* CLIP text model (width pooled_dim) */
	int t5_layers, t5_heads, t5_ff; /* T5 encoder (width joint_dim) */
	/* Wan2.1: heads, head_dim, layers as above */
	int ffn_dim;                    /* its feed-forward width */
	int text_dim;                   /* its UMT5 width */
	int umt5_layers, umt5_heads, umt5_ff; /* its UMT5 encoder */
	int wan_vae_base;               /* its VAE's base_dim (96 in Wan2.1) */
	/* Qwen-Image: heads, head_dim, layers as above; wan_vae_base its VAE */
	int llm_width;                  /* its language model's hidden size (= the transformer's
					 * joint_attention_dim) */
	int llm_layers, llm_heads, llm_kv_heads, llm_ff; /* the language model */
	/* embeddings file */
	int batch;                      /* prompts */
	int txt_len;                    /* text tokens */
};

/* A flag of a family's own for `pdit tiny`: an int of its options. */
struct pd_tiny_flag {
	const char *name;               /* without the dashes: "wan-vae-base" */
	size_t offset;                  /* offsetof(struct pd_tiny_opts, field), an int */
	const char *help;               /* one line */
};

/* The base every family's defaults start from: a small dev-style FLUX
 * model (64 wide, 16 latent channels), seed 1, f32. */
void pd_tiny_defaults(struct pd_tiny_opts *o);

/* ----------------------------------------------------------------------- */
/* A weights file of random tensors                                        */
/* ----------------------------------------------------------------------- */

struct pd_tiny_fill;

struct pd_tiny_writer {
	struct pd_st_writer *w;         /* the file being assembled */
	struct pd_tiny_fill *fills;     /* one per tensor, alive until save */
	int n, cap;                     /* fills used and room for them */
	uint64_t seed;                  /* the model seed */
	enum pd_dtype dtype;            /* weight dtype */
	int failed;                     /* an add failed: save refuses */
};

/* Room for CAP tensors drawn from SEED, written as DT. */
int pd_tiny_writer_init(struct pd_tiny_writer *tw, uint64_t seed, enum pd_dtype dt, int cap);
/* Writes PATH and frees TW. */
int pd_tiny_writer_save(struct pd_tiny_writer *tw, const char *path);
/* A tensor: mean + std x N(0, 1). */
void pd_tiny_add(struct pd_tiny_writer *tw, float mean, float std, int ndim, const int64_t *shape, const char *fmt,
		 ...) __attribute__((format(printf, 6, 7)));
/* A linear layer: weight ~ N(0, 1/fan_in) keeps activations O(1) at any
 * width; bias ~ N(0, 0.05^2) as in the golden models. A weight alone. */
void pd_tiny_linear(struct pd_tiny_writer *tw, int64_t n_out, int64_t n_in, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void pd_tiny_weight(struct pd_tiny_writer *tw, int64_t n_out, int64_t n_in, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* 2-D [c_out, c_in, k, k] and 3-D [c_out, c_in, kt, k, k] convolutions and their biases. */
void pd_tiny_conv(struct pd_tiny_writer *tw, int64_t c_out, int64_t c_in, int64_t k, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void pd_tiny_conv3(struct pd_tiny_writer *tw, int64_t c_out, int64_t c_in, int64_t kt, int64_t k, const char *fmt,
		   ...) __attribute__((format(printf, 6, 7)));
/* A normalisation's scale (1 + N(0, 0.1^2)) and, when wanted, shift. */
void pd_tiny_norm(struct pd_tiny_writer *tw, int64_t n, int with_bias, const char *base);

/* DIR/NAME with ROOT's JSON (ROOT freed), DIR made when missing; NAME with
 * TEXT. */
int pd_tiny_save_json(const char *dir, const char *name, cJSON *root);
int pd_tiny_file(const char *dir, const char *name, const char *text);

/* ----------------------------------------------------------------------- */
/* Shared components                                                       */
/* ----------------------------------------------------------------------- */

/* DIR/model_index.json of PIPELINE ("FluxPipeline") listing PARTS[N]:
 * { component, library, class }; a NULL library lists it as left out. */
int pd_tiny_model_index(const char *dir, const char *pipeline, const char *const (*parts)[3], int n);
/* diffusers' AutoencoderKL (o->vae_blocks, vae_layers, vae_groups). */
int pd_tiny_vae_kl(const char *dir, const struct pd_tiny_opts *o);
/* FlowMatchEulerDiscreteScheduler's folder as FLUX.1-dev's (DYNAMIC: its
 * shifting by resolution) or schnell's. */
int pd_tiny_flow_scheduler(const char *dir, int dynamic);
/* The same with another shift, max_image_seq_len and max_shift, and the
 * last sigma stretched to TERMINAL (0: not): Qwen/Qwen-Image's 1, 8192,
 * 0.9, 0.02. */
int pd_tiny_flow_scheduler_as(const char *dir, int dynamic, double shift, int max_seq, double max_shift, double terminal);
/* Random prompt embeddings (with negatives) of o->batch x o->txt_len. */
int pd_tiny_embeds(const char *path, const struct pd_tiny_opts *o);
/* Tokenizers in miniature, in their real formats: CLIP's BPE (vocab.json,
 * merges.txt), T5's sentencepiece unigram (spiece.model) and umT5's (byte
 * fallback, 300 added tokens); *VOCAB: the embedding rows they need. */
int pd_tiny_clip_tokenizer(const char *dir, int *vocab);
int pd_tiny_t5_tokenizer(const char *dir, int *vocab);
int pd_tiny_umt5_tokenizer(const char *dir, int *vocab);
/* CLIP's text model of width o->pooled_dim. */
int pd_tiny_clip(const char *dir, const struct pd_tiny_opts *o, int vocab);
/* A T5-style encoder (T5 v1.1's, or UMT5's with a relative position table
 * per block) of width D, H heads, feed-forward F, LAYERS blocks and V
 * embedding rows; SHARDS > 1 splits the weights as published folders do. */
int pd_tiny_t5_encoder(const char *dir, const struct pd_tiny_opts *o, int64_t D, int64_t H, int64_t F, int layers,
		       int64_t V, int umt5, uint64_t seed, int shards);

#endif /* PD_TINY_H */
