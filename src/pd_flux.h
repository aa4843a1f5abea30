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

/* Reads and checks DIR/config.json. */
int pd_flux_config_load(struct pd_flux_config *cfg, const char *dir);

struct pd_flux;

int pd_flux_load(struct pd_flux **out, const char *dir, struct pd_backend *be);
void pd_flux_free(struct pd_flux *m);
const struct pd_flux_config *pd_flux_get_config(const struct pd_flux *m);

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
};

/* Receives intermediates under the golden files' names. DATA is a host copy
 * valid during the call. When INDEX >= 0, DATA is batch entry INDEX alone
 * (SHAPE[0] == 1); when INDEX < 0 it spans the whole batch (or has no batch
 * dimension). */
struct pd_dump {
	void (*fn)(void *ctx, const char *name, int64_t index, const float *data, int ndim, const int64_t *shape);
	void *ctx;                      /* passed back to fn */
	int64_t index;                  /* batch entry of per-image tensors */
};

/* Runs the transformer on one image; OUT (host) receives [img_len, out_channels].
 * DUMP may be NULL. */
int pd_flux_forward(struct pd_flux *m, const struct pd_flux_input *in, float *out, const struct pd_dump *dump);

/* Sinusoidal timestep embedding as diffusers computes it in float32
 * ([cos | sin], 2 x half values); freqs receives the half frequencies. */
void pd_timestep_embedding(float t, int half, float *emb, float *freqs);

/* RoPE tables [n, head_dim] for position ids [n, n_axes] (float64 inside,
 * as diffusers does on CPU). */
void pd_rope_tables(const struct pd_flux_config *cfg, const float *ids, int64_t n, float *cos_out,
		    float *sin_out);

#endif /* PD_FLUX_H */
