/*
 * pd_wan.h - Wan2.1's transformer (diffusers v0.40 WanTransformer3DModel,
 * text-to-video; tests/golden/wan-tiny/README.md §5 has the formulas with
 * their line numbers, cited below as TW:n).
 *
 * Seen from outside through pd_dit.h: a token is a (1, 2, 2) patch of the
 * latent video, in_channels = 16 x 1 x 2 x 2 values in the order (channel,
 * dt, dy, dx), and its prediction (out_channels x 4 values) in the same
 * order: proj_out's rows, which diffusers orders (dt, dy, dx, channel)
 * for its unpatchify, are reordered at load. The text rows of the
 * hidden state are the text embedder's output, which every block reads
 * (cross-attention) and none changes. Position ids are (frame, row,
 * column) of the patch.
 */
#ifndef PD_WAN_H
#define PD_WAN_H

#include "pd_backend.h"
#include "pd_dit.h"
#include "pd_dump.h"

struct pd_wan_config {
	int in_channels, out_channels;  /* latent channels (16) */
	int patch[3];                   /* patch_size (t, h, w): (1, 2, 2) */
	int heads, head_dim, dim;       /* num_attention_heads, attention_head_dim, their product */
	int ffn_dim;                    /* feed-forward width */
	int layers;                     /* num_layers */
	int text_dim;                   /* UMT5 width */
	int freq_dim;                   /* sinusoid width (256) */
	float eps;                      /* norms' epsilon */
	int rope_max;                   /* rope_max_seq_len: positions per axis */
	int axes[3];                    /* RoPE channels of t, h, w: head_dim - 2 (head_dim / 6) x 2, and 2 (head_dim / 6) twice */
};

struct pd_config;
struct pd_st;
/* A config.json: diffusers' WanTransformer3DModel or Wan-AI's WanModel
 * (the original layout's keys), checked. */
int pd_wan_config_json(struct pd_wan_config *c, const struct pd_config *cfg);
/* The checks every config passes (PATH names it in messages); fills the
 * RoPE axes. */
int pd_wan_config_check(struct pd_wan_config *c, const char *path);

/* Files in the original layout (pd_wan_file.c). */
/* 1: ST holds a Wan transformer under the original names (perhaps under a
 * prefix), 0: under diffusers', -1: no Wan transformer. */
int pd_wan_file_layout(const struct pd_st *st);
/* The config of single file ST: its "config" metadata entry, else from
 * the shapes of the original layout (heads of 128). */
int pd_wan_file_config(struct pd_wan_config *c, const struct pd_st *st);
/* The weights at PATH (a folder or one file) under diffusers' names: as
 * they are, or a view renaming the original layout's. */
int pd_wan_file_open(struct pd_st **out, const char *path);
/* Every linear layer a model of config C loads by name, under the model's
 * and the original layout's names (*OUT malloc'd, *N entries): what
 * adapters in either are matched to. */
int pd_wan_linears(const struct pd_wan_config *c, struct pd_dit_linear **out, int *n);
/* The sizes the outside sees (pd_dit.h). */
int pd_wan_dit_info(const struct pd_wan_config *c, struct pd_dit_info *info);

/* The transformer in folder or file PATH, in diffusers' layout or the
 * original (CONFIG: a config.json for a file; without it the file's
 * metadata or shapes). */
int pd_wan_load_dit(struct pd_dit **out, const char *path, const char *config, struct pd_backend *be,
		    const struct pd_dit_shard *shard);
/* The config of a Wan transformer at PATH without loading weights. */
int pd_wan_probe(const char *path, const char *config, struct pd_wan_config *c);


/* Wan2.1's pipeline side (pd_wan_family.c). */
extern const struct pd_dit_family pd_wan_family;

/* A latent video [C, F, h, w] as tokens [L, C pt ph pw], the vector of a
 * patch in the order (channel, dt, dy, dx), tokens ordered by (frame,
 * row, column) of the patch; IDS (may be NULL) [L, 3] get those three.
 * F, h, w are multiples of the patch. */
void pd_wan_patchify(const int *patch, int C, int F, int h, int w, const float *lat, float *tokens, float *ids);
/* Tokens (or predictions) [L, C pt ph pw] back to a latent video [C, F,
 * h, w]: the inverse of pd_wan_patchify. */
void pd_wan_unpatchify(const int *patch, int C, int F, int h, int w, const float *tokens, float *lat);

/* Its random model folders (pdit tiny; pd_wan_tiny.c). */
extern const struct pd_family_tiny pd_wan_tiny_models;
struct pd_tiny_opts;
/* A random Wan2.1 VAE folder (its decoder, o->wan_vae_base wide) whose
 * config names the class CLS. */
int pd_wan_tiny_vae(const char *dir, const struct pd_tiny_opts *o, const char *cls);

#endif /* PD_WAN_H */
