/*
 * pd_tiny.h - writes a deterministic random FLUX model folder in the
 * diffusers layout (model_index.json, transformer/, vae/, scheduler/) and an
 * embeddings file, so pdit runs end to end with nothing downloaded. With
 * FULL the folder is laid out as the published FLUX.1-dev repository:
 * text_encoder/ (CLIP), text_encoder_2/ (T5, sharded), tokenizer/,
 * tokenizer_2/ and a sharded transformer/, each with its index file; the
 * tokenizers are small made-up vocabularies in the real formats (a BPE
 * vocab.json + merges.txt, a sentencepiece unigram spiece.model).
 *
 * Every tensor is drawn from PyTorch's generator seeded from the model seed
 * and the tensor's name, so the files depend only on the options.
 */
#ifndef PD_TINY_H
#define PD_TINY_H

#include <stdint.h>

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
	int full;                       /* the whole FLUX.1-dev layout: encoders, tokenizers, shards */
	int clip_layers, clip_heads;    /* CLIP text model (width pooled_dim) */
	int t5_layers, t5_heads, t5_ff; /* T5 encoder (width joint_dim) */
	/* Wan2.1 (family wan): heads, head_dim, layers as above */
	int wan;                        /* write a Wan2.1 text-to-video folder instead of FLUX's */
	int ffn_dim;                    /* its feed-forward width */
	int text_dim;                   /* its UMT5 width */
	int umt5_layers, umt5_heads, umt5_ff; /* its UMT5 encoder */
	int wan_vae_base;               /* its VAE's base_dim (96 in Wan2.1) */
	/* embeddings file */
	int batch;                      /* prompts */
	int txt_len;                    /* text tokens */
};

/* The README's default: a small dev-style model (64 wide, 16 latent channels). */
void pd_tiny_defaults(struct pd_tiny_opts *o);
/* FLUX.1's real widths (3072 = 24 x 128, MLP 12288, T5 4096, CLIP 768,
 * 16 latent channels, FLUX VAE) with 2 double and 4 single blocks, bf16. */
void pd_tiny_flux_width(struct pd_tiny_opts *o);

/* Wan2.1 presets: a small one (2 x 32 heads, 2 blocks, VAE base 8, UMT5
 * 32 wide), and Wan2.1-T2V-1.3B's widths (12 x 128, FFN 8960, UMT5 4096,
 * VAE base 96) with 2 blocks and 2 UMT5 layers, bf16. */
void pd_tiny_wan_defaults(struct pd_tiny_opts *o);
void pd_tiny_wan_width(struct pd_tiny_opts *o);

int pd_tiny_write(const char *dir, const struct pd_tiny_opts *o);

#endif /* PD_TINY_H */
