/*
 * pd_flux.h - the FLUX.1 transformer (diffusers' FluxTransformer2DModel).
 *
 * Sizes come from the model folder's config.json; nothing assumes FLUX.1's
 * 3072/24/19/38.  The formulas follow diffusers v0.40 as the golden
 * README (tests/golden/flux-tiny/README.md) documents them line by line.
 *
 *   struct pd_flux *m;
 *   pd_flux_load(&m, "model/transformer", be);
 *   struct pd_flux_input in = { .txt_len = T, .img_len = L, ... };
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
#include "pd_dump.h"

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
};

struct pd_config;
struct pd_st;

/* Reads and checks DIR/config.json (or a single file's sizes, as
 * pd_flux_open_file finds them). */
int pd_flux_config_load(struct pd_flux_config *cfg, const char *dir);
/* Checks a diffusers transformer config already parsed. */
int pd_flux_config_parse(struct pd_flux_config *cfg, const struct pd_config *c);

/* A transformer in one .safetensors file, as Black Forest Labs publish it
 * (double_blocks.N.img_attn.qkv, single_blocks.N.linear1, final_layer with
 * its modulation as (shift, scale)) or with diffusers' names, under any
 * prefix ("model.diffusion_model."): *ST gets a view with diffusers' names
 * (fused projections split by rows, the final modulation's halves
 * swapped), CFG its sizes: from a "config" metadata entry (a diffusers
 * config.json) when present, else from the tensors' shapes, with FLUX.1's
 * RoPE axes (16, 56, 56) for heads of 128. */
int pd_flux_open_file(struct pd_st **st, const char *path, struct pd_flux_config *cfg);

struct pd_flux;

/* The share of the model this process holds under tensor parallelism:
 * shard RANK of COUNT owns heads [RANK H/COUNT, (RANK+1) H/COUNT), the same
 * part of the MLP width and of every modulation output. Column-parallel
 * layers (q, k, v, the first MLP layer, modulations) keep their rows,
 * row-parallel ones (attention output projections, the second MLP layer,
 * single-block proj_out with its packed [attention | MLP] input) their
 * columns, and only shard 0 adds their bias, so the sum over shards counts
 * it once. */
struct pd_flux_shard {
	int rank;                       /* this process's shard */
	int count;                      /* shards (the tensor-parallel degree) */
	/* Pipeline stages: the blocks (double then single, counted from 0)
	 * this process holds; block_count 0 means all. Only the stage holding
	 * block 0 loads the embedders, only the one holding the last block the
	 * final norm and projection. */
	int block_first, block_count;
};

/* The seams where parallel methods attach; any may be NULL. Each returns 0
 * or -1 with a message. */
struct pd_flux_hooks {
	/* Attention for this process's ROWS tokens: q, k, v [rows, heads x
	 * head_dim] (row stride ld, RoPE applied) against the whole sequence;
	 * OUT gets [rows, heads x head_dim] with row stride ldo. LAYER counts
	 * the blocks, double then single, from 0. NULL: the local sequence is
	 * the whole sequence. */
	int (*attention)(void *ctx, struct pd_backend *be, int layer, float *out, int64_t ldo, const float *q,
			 const float *k, const float *v, int64_t ld, int64_t rows, int heads, int head_dim);
	void *attention_ctx;
	/* Sums row-parallel partial results over the shards, in place. */
	int (*reduce)(void *ctx, float *buf, size_t n);
	/* Gathers column-parallel parts of N floats, in shard order, into OUT. */
	int (*gather)(void *ctx, const float *part, size_t n, float *out);
	void *shard_ctx;
	/* Adds N doubles over every process taking part in this call (First
	 * Block Cache's statistics), in place; NULL: this process alone. */
	int (*sum)(void *ctx, double *buf, size_t n);
	void *sum_ctx;
};

/* First Block Cache (ParaAttention's): after the first block, r = its
 * change of the image tokens; when mean|r_ref - r| / mean|r_ref| is below
 * the threshold, r_ref being r at the last fully computed step, the other
 * blocks are skipped and their stored effect (output minus input at that
 * step) is added instead. The two sums are added over every process of
 * the call first (pd_flux_hooks.sum), so all of them decide alike. One
 * state per image and branch (the positive and negative passes differ). */
struct pd_fbcache {
	float threshold;                /* 0: never skip (the cache only records) */
	int64_t rows;                   /* image rows the buffers hold */
	float *r_ref;                   /* [rows, D] first block's change at the last computed step */
	float *r;                       /* [rows, D] this step's */
	float *rest;                    /* [rows, D] the other blocks' effect at the last computed step */
	int valid;                      /* r_ref and rest hold a computed step */
	int computed, skipped;          /* steps run and steps skipped */
	double last_change;             /* the last measure, for the log */
	struct pd_backend *be;          /* owner of the buffers */
};

void pd_fbcache_free(struct pd_fbcache *c);

int pd_flux_load(struct pd_flux **out, const char *dir, struct pd_backend *be);
/* SHARD NULL: the whole model. The head count must divide by shard->count. */
int pd_flux_load_shard(struct pd_flux **out, const char *dir, struct pd_backend *be, const struct pd_flux_shard *shard);
void pd_flux_set_hooks(struct pd_flux *m, const struct pd_flux_hooks *hooks);
void pd_flux_free(struct pd_flux *m);
const struct pd_flux_config *pd_flux_get_config(const struct pd_flux *m);
/* Attention width held here: the local heads x head_dim. */
int64_t pd_flux_local_width(const struct pd_flux *m);

struct pd_flux_input {
	int64_t txt_len;                /* text tokens */
	int64_t img_len;                /* image tokens */
	const float *img;               /* [img_len, in_channels] packed latents */
	const float *txt;               /* [txt_len, joint_attention_dim] prompt embeddings */
	const float *pooled;            /* [pooled_projection_dim] pooled embedding */
	const float *img_ids;           /* [img_len, n_axes] position ids */
	const float *txt_ids;           /* [txt_len, n_axes] position ids (zeros in FLUX.1) */
	float timestep;                 /* what the pipeline passes: t / 1000 */
	float guidance;                 /* distilled guidance scale (3.5); ignored without guidance_embeds */
	struct pd_fbcache *cache;       /* First Block Cache state, or NULL */
	/* Which call this is, for methods that keep state from one step to
	 * the next (DistriFusion, PipeFusion): */
	int step;                       /* denoising step */
	int64_t image;                  /* image of the batch */
	int branch;                     /* 1 positive, 0 negative (true CFG) */
};


/* Runs the transformer on one image; OUT (host) receives [img_len, out_channels].
 * DUMP may be NULL. */
int pd_flux_forward(struct pd_flux *m, const struct pd_flux_input *in, float *out, const struct pd_dump *dump);

/* A part of a forward call (a pipeline stage): blocks [first, first+count)
 * on the rows of IN. X_IN (host, [txt_len + img_len, dim], text rows
 * first) holds the hidden states after block first - 1, or is NULL to run
 * the embedders (first must be 0). With OUT not NULL the final norm and
 * projection follow and OUT gets the prediction of the image rows; otherwise
 * X_OUT (host) gets the hidden states. First Block Cache applies only to a
 * whole forward. */
int pd_flux_forward_blocks(struct pd_flux *m, const struct pd_flux_input *in, int first, int count,
			   const float *x_in, float *x_out, float *out, const struct pd_dump *dump);

/* Blocks of the model: num_layers + num_single_layers. */
int pd_flux_blocks(const struct pd_flux_config *cfg);

/* Floating-point operations of one forward call on T text and L image
 * tokens: the matrix products of every linear layer (2 m n k each) and of
 * attention (4 S^2 D per block); elementwise work is not counted. */
struct pd_flux_flops {
	double linear;                  /* linear layers */
	double attention;               /* Q K^T and P V */
};
struct pd_flux_flops pd_flux_count_flops(const struct pd_flux_config *c, int64_t T, int64_t L);

/* Sinusoidal timestep embedding as diffusers computes it in float32
 * ([cos | sin], 2 x half values); freqs receives the half frequencies. */
void pd_timestep_embedding(float t, int half, float *emb, float *freqs);

/* RoPE tables [n, head_dim] for position ids [n, n_axes] (float64 inside,
 * as diffusers does on CPU). */
void pd_rope_tables(const struct pd_flux_config *cfg, const float *ids, int64_t n, float *cos_out,
		    float *sin_out);

#endif /* PD_FLUX_H */
