/*
 * pd_wan_vae.h - Wan2.1's video decoder (diffusers v0.40 AutoencoderKLWan,
 * VW:n below; tests/golden/wan-tiny/README.md §7 has the formulas).
 *
 *   struct pd_wan_vae *v;
 *   pd_wan_vae_load(&v, "model/vae", be);
 *   pd_wan_unnormalize(v, latents, F * h * w, z);       // as WanPipeline does
 *   pd_wan_vae_decode(v, z, F, h, w, video, NULL);      // [3, 1 + 4 (F - 1), 8h, 8w]
 *
 * It decodes as diffusers does, one latent frame (a chunk) at a time:
 * every causal 3-D convolution keeps the last two frames it was given
 * (zeros before the first), so memory holds four frames at most whatever
 * the video's length, and the result is that of one pass over the whole
 * sequence. Inside, a chunk is frame-major: frame t's [c, h, w] after
 * frame t - 1's.
 */
#ifndef PD_WAN_VAE_H
#define PD_WAN_VAE_H

#include "pd_backend.h"
#include "pd_dump.h"

#define PD_WAN_VAE_MAX_Z 64

struct pd_wan_vae_config {
	int z_dim;                      /* latent channels (16) */
	int out_channels;               /* 3 */
	float mean[PD_WAN_VAE_MAX_Z];   /* latents_mean */
	float std[PD_WAN_VAE_MAX_Z];    /* latents_std */
	int up_blocks;                  /* decoder up blocks (4) */
	int spatial, temporal;          /* compression: 8 and 4 */
};

struct pd_wan_vae;

/* The VAE folder (config.json + diffusion_pytorch_model.safetensors) or
 * one file with its config.json given as CONFIG. */
int pd_wan_vae_load(struct pd_wan_vae **out, const char *path, struct pd_backend *be);
const struct pd_wan_vae_config *pd_wan_vae_get_config(const struct pd_wan_vae *v);
void pd_wan_vae_free(struct pd_wan_vae *v);

/* z = latents / (1 / std) + mean per channel (PW:656-666, a float32
 * division by the reciprocal): LAT and Z [z_dim, N]. */
void pd_wan_unnormalize(const struct pd_wan_vae *v, const float *lat, int64_t n, float *z);

/* Z [z_dim, F, h, w] (host) -> OUT [3, 1 + 4 (F - 1), 8h, 8w] (host), the
 * decoder's output before clamping. DUMP (may be NULL) gets
 * vae.post_quant_conv and per chunk k vae.chunk.k.conv_in, .mid_block,
 * .up_blocks.j (.time_conv), .conv_out, channel-major as diffusers'. */
int pd_wan_vae_decode(struct pd_wan_vae *v, const float *z, int F, int h, int w, float *out,
		      const struct pd_dump *dump);

/* The banded decode (pd_vae.h's seam, as the picture VAE's): with BANDS >
 * 1, every band's process calls pd_wan_vae_decode with the whole Z, decodes
 * its rows, and band 0 receives the whole video (OUT is left alone on the
 * others); DUMP must be NULL then. */
struct pd_vae_hooks;
void pd_wan_vae_set_hooks(struct pd_wan_vae *v, const struct pd_vae_hooks *hooks);
/* What decoding F latent frames of H x W costs (pd_vae.h's pd_vae_cost),
 * from the folder's config.json: Wan2.1's decoder (temporal upsampling in
 * the first two up blocks), as pd_wan_vae_decode runs it (every causal
 * tap computed, two cached frames per 3x3x3 convolution, buffers of four
 * frames of the widest stage). */
struct pd_vae_cost;
int pd_wan_vae_cost(const char *dir, int F, int h, int w, struct pd_vae_cost *out);
/* The decoder as a family's VAE kind (pd_vae.h; pd_wan_family.c): the
 * pipeline's un-normalising and frame conversion around pd_wan_vae_decode. */
extern const struct pd_vae_kind pd_wan_vae_kind;
/* True where pd_wan_vae_decode delivers the video (one band, or band 0). */
int pd_wan_vae_has_video(const struct pd_wan_vae *v);

#endif /* PD_WAN_VAE_H */
