/*
 * pd_pipeline.h - the generation loop on embeddings, as diffusers'
 * flow-matching pipelines run it (FluxPipeline first: diffusers
 * pipelines/flux/pipeline_flux.py): latent noise, the family's packing and
 * position ids (struct pd_dit_family), the Euler loop with optional true
 * CFG, and decoding to 8-bit pixels.
 *
 * Image b of a batch is drawn from seed + b, as diffusers does when given
 * one generator per image seeded seed + b; every image is computed on its
 * own, so a batch entry equals the batch-1 run of its prompt and seed.
 */
#ifndef PD_PIPELINE_H
#define PD_PIPELINE_H

#include <stdint.h>

#include "pd_dit.h"
#include "pd_embeds.h"
#include "pd_scheduler.h"
#include "pd_vae.h"

/* torch.randn([1, C, h, w], generator=manual_seed(seed)), unpacked. */
void pd_draw_noise(const struct pd_latent_shape *ls, uint64_t seed, float *unpacked);

/* FluxInpaintPipeline's known region, put back after every step: the
 * picture's clean latents noised to the next step's sigma (the clean ones
 * after the last), where the mask keeps the picture. */
struct pd_inpaint {
	const float *image;             /* [images, L, C] each picture's clean latents (packed) */
	const float *noise;             /* [images, L, C] the noise each started from (packed) */
	const float *mask;              /* [L, C] 1 where the picture is made anew, 0 where it is kept */
};

struct pd_gen_params {
	int frames;                     /* video frames (1: a picture) */
	int height, width;              /* image size in pixels */
	int steps;                      /* denoising steps */
	float guidance;                 /* distilled guidance scale (guidance-embedded models) */
	float true_cfg_scale;           /* > 1 with negative embeddings: true CFG */
	uint64_t seed;                  /* image b uses seed + b */
	float fbcache_threshold;        /* First Block Cache: skip when the change is below this (0: off) */
	int first_step;                 /* img2img: the schedule of STEPS from this step on (0: all of it) */
	const struct pd_inpaint *inpaint; /* inpainting, or NULL */
	/* [images, L, ls.cond_channels] what every call appends to each
	 * token's latents (the shape's cond_channels: FLUX.1 Fill's masked
	 * picture and mask), or NULL when the model takes none */
	const float *cond;
	/* FLUX.1 Kontext: reference tokens [ref_len, C] (packed latents) with
	 * their position ids [ref_len, n_axes], appended after every call's
	 * image tokens; only the image tokens' prediction is used. ref_len 0:
	 * none */
	const float *ref;
	const float *ref_ids;
	int64_t ref_len;
};

/* True when the run combines positive and negative predictions. */
int pd_gen_uses_cfg(const struct pd_gen_params *p, const struct pd_embeds *e);

/* How the denoising loop gets its predictions, and which share of the work
 * is this process's. pd_runner_local(): one process does everything. */
struct pd_runner {
	/* One transformer call on one image; OUT [L, out_channels] receives the
	 * whole prediction. DUMP (may be NULL) receives the model's
	 * intermediates (for this process's tokens). */
	int (*predict)(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump);
	void *predict_ctx;
	int64_t first_image;            /* data parallel: first image of the batch denoised here */
	int64_t n_images;               /* and how many (-1: all) */
	/* CFG parallel: this process runs branch cfg_branch only (0 negative,
	 * 1 positive; -1: both branches here) and cfg_exchange gives both
	 * processes of the pair [negative | positive] of N floats each. */
	int cfg_branch;
	int (*cfg_exchange)(void *ctx, const float *mine, size_t n, float *both);
	void *cfg_ctx;
	/* Called after each step (may be NULL): the benchmark's clock, the
	 * engine's progress and cancel. Nonzero stops the denoising there (-1,
	 * the message already set): every process must return the same. */
	int (*on_step)(void *ctx, int step);
	void *step_ctx;
	/* First Block Cache's report (may be NULL). */
	struct pd_fbcache_report *fb_report;
};

struct pd_fbcache_report {
	int computed, skipped;          /* over all images and branches of this process */
	int steps;                      /* entries of decisions */
	/* per step, 1 where this process's first image skipped in the first
	 * branch it runs: what every rank of a call must agree on */
	unsigned char *decisions;
};

/* The runner of a single process: pd_dit_forward on the whole sequence. */
struct pd_runner pd_runner_local(struct pd_dit *m);

/* Denoises this process's images of the batch (all of them with the local
 * runner). INIT: [B, L, C] packed initial latents of the whole batch (C:
 * the packed channels), or NULL to draw them from the seed; LATENTS
 * receives [n_images, L, C]. DUMP
 * (may be NULL) receives the pipeline tensors under the golden names;
 * MODEL_DUMP (may be NULL) the transformer's intermediates at the first step
 * of this process's first image, positive branch. */
int pd_denoise(const struct pd_runner *run, const struct pd_dit_family *fam, const struct pd_dit_info *info,
	       struct pd_scheduler *s, const struct pd_embeds *e, const struct pd_gen_params *p, const float *init,
	       float *latents, const struct pd_dump *dump, const struct pd_dump *model_dump);

/* Packed latents [L, C] of one image -> RGB bytes [H, W, 3] (and, when
 * DECODED is not NULL, the decoder's float output [3, H, W]). */
int pd_decode_image(struct pd_vae *v, const struct pd_dit_family *fam, const struct pd_latent_shape *ls,
		    const float *packed, uint8_t *rgb, float *decoded, const struct pd_dump *dump);

#endif /* PD_PIPELINE_H */
