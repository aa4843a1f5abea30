/*
 * pd_vae.h - the AutoencoderKL decoder as FLUX configures it (diffusers'
 * Decoder: conv_in, mid block with one-head attention, up blocks of
 * ResnetBlock2D with nearest 2x upsampling, GroupNorm + SiLU, conv_out).
 *
 *   struct pd_vae *v;
 *   pd_vae_load(&v, "model/vae", be);
 *   pd_vae_decode(v, z, h, w, img, NULL);  // z [C, h, w] -> img [3, h*f, w*f]
 *
 * z is the decoder input: latents / scaling_factor + shift_factor.
 */
#ifndef PD_VAE_H
#define PD_VAE_H

#include "pd_backend.h"
#include "pd_dump.h"

#include <stdint.h>

#define PD_VAE_MAX_BLOCKS 8
/* resnets per up block: layers_per_block + 1 */
#define PD_VAE_MAX_RESNETS 16

struct pd_vae_config {
	int latent_channels;            /* decoder input channels (16 in FLUX.1) */
	int out_channels;               /* image channels (3) */
	int n_blocks;                   /* up blocks = len(block_out_channels) */
	int block_out[PD_VAE_MAX_BLOCKS]; /* block_out_channels, from the encoder's view */
	int layers_per_block;           /* resnets per up block minus one */
	int groups;                     /* norm_num_groups */
	int mid_attention;              /* mid_block_add_attention */
	int post_quant_conv;            /* use_post_quant_conv (false for FLUX) */
	int in_channels;                /* the encoder's image channels (3) */
	int quant_conv;                 /* use_quant_conv: the encoder's 1x1 after conv_out (false for FLUX) */
	double scaling_factor;          /* latents / scaling_factor ... */
	double shift_factor;            /* ... + shift_factor = decoder input */
};

struct pd_config;
struct pd_st;

/* Reads DIR/config.json (or a single file's sizes, see pd_vae_open_file). */
int pd_vae_config_load(struct pd_vae_config *cfg, const char *dir);
int pd_vae_config_parse(struct pd_vae_config *cfg, const struct pd_config *c);
/* An autoencoder in one .safetensors file in the original (LDM) layout, as
 * Black Forest Labs publish ae.safetensors (decoder.mid.block_1,
 * decoder.up.N.block.M, attention as 1x1 convolutions, under any prefix),
 * or with diffusers' names: *ST gets a view with diffusers' names (up
 * blocks in diffusers' order), CFG its sizes: from a "config" metadata
 * entry when present, else from the shapes, with FLUX.1's 32 groups and
 * latent scaling (0.3611, shift 0.1159) for 16 latent channels. */
int pd_vae_open_file(struct pd_st **st, const char *path, struct pd_vae_config *cfg);

struct pd_vae;

int pd_vae_load(struct pd_vae **out, const char *dir, struct pd_backend *be);
void pd_vae_free(struct pd_vae *v);
const struct pd_vae_config *pd_vae_get_config(const struct pd_vae *v);
/* Pixels per latent pixel: 2^(n_blocks - 1). */
int pd_vae_scale(const struct pd_vae_config *cfg);

/* Where parallel decoding attaches: the latent rows are cut into BANDS
 * nearly equal bands (pd_chunk_start/len), this process decodes band BAND
 * at every resolution, and three hooks give it what crosses band edges. */
struct pd_vae_hooks {
	int band, bands;                /* this band and how many (1: the whole picture) */
	/* X is [c, halo + rows + halo, w]: fills the top halo rows with the
	 * last rows of the band above and the bottom ones with the first rows
	 * of the band below (zeros at the picture's edges). */
	int (*halo)(void *ctx, struct pd_backend *be, float *x, int c, int rows, int w, int halo);
	/* Adds N doubles over all bands, in place (GroupNorm statistics). */
	int (*reduce)(void *ctx, double *buf, size_t n);
	/* Each band contributes n_all[band] floats; ALL receives them in band
	 * order: on every band (gather), or on band 0 only (collect). */
	int (*gather)(void *ctx, const float *mine, size_t n, float *all, const size_t *n_all);
	int (*collect)(void *ctx, const float *mine, size_t n, float *all, const size_t *n_all);
	void *ctx;
};

/* The hooks of a decode on one process: the whole picture, one band. */
extern const struct pd_vae_hooks pd_vae_whole;

void pd_vae_set_hooks(struct pd_vae *v, const struct pd_vae_hooks *hooks);
/* True where pd_vae_decode delivers the picture (one band, or band 0). */
int pd_vae_has_picture(const struct pd_vae *v);

/* One latent as its pipeline decodes it: Z [latent_channels, h, w] as the
 * transformer made it (unpacked), divided by scaling_factor and shifted in
 * place, decoded and converted as diffusers' VaeImageProcessor does
 * (clamp(x / 2 + 0.5, 0, 1) x 255, rounded half to even) into RGB [H, W, 3]
 * on the process that receives the picture. DECODED (may be NULL) gets the
 * decoder's float output [3, H, W]; DUMP vae.z, vae.dec.* and
 * image.decoded. */
int pd_vae_decode_rgb(struct pd_vae *v, float *z, int h, int w, uint8_t *rgb, float *decoded,
		      const struct pd_dump *dump);

/* The encoder (an img2img or edit request's picture in): loaded from the
 * VAE's own weights the first time, kept after. 0, or -1 with the message
 * (a VAE file without the encoder's tensors names the first missing). */
int pd_vae_load_encoder(struct pd_vae *v);
/* IMG [in_channels, H, W] (host, in [-1, 1] as VaeImageProcessor makes it;
 * H and W multiples of the scale) -> MOMENTS [2 x latent_channels, H/f,
 * W/f] (host): the posterior's mean, then its log-variance (unclamped).
 * With the hooks' bands (pd_vae_set_hooks, for H/f latent rows), each band
 * encodes its rows of the picture (every band holds the whole IMG) through
 * the decoder's seams, and every band gets the whole MOMENTS. */
int pd_vae_encode(struct pd_vae *v, const float *img, int H, int W, float *moments);
/* The latents an image pipeline starts from, from MOMENTS of N values a
 * half: DiagonalGaussianDistribution's sample mean + exp(logvar / 2) x EPS
 * (log-variance clamped to [-30, 20]), or its mode (EPS NULL), then
 * (z - shift_factor) x scaling_factor, into OUT [N]. */
void pd_vae_posterior_latents(const struct pd_vae_config *cfg, const float *moments, size_t n, const float *eps,
			      float *out);

/* What a decode costs, for the planner and the memory check. */
struct pd_vae_cost {
	double gflop;                   /* work for one picture or video */
	double map_gb;                  /* memory the whole decode holds (the planner gives a band its share) */
	int exchanges;                  /* a band's exchanges with its neighbours (halo rows, gathers) */
};

/* A kind of decoder, as a model family names the one its pipeline decodes
 * with (FLUX.1: AutoencoderKL; Wan2.1 and Qwen-Image: AutoencoderKLWan):
 * the engine, the planner and pdit bench see a VAE only through this. */
struct pd_vae_kind {
	const char *name;               /* diffusers' class ("AutoencoderKL") */
	int (*load)(void **vae, const char *path, struct pd_backend *be);
	void (*free)(void *vae);
	/* latent channels it decodes, and pixels per latent position */
	int (*channels)(const void *vae);
	int (*scale)(const void *vae);
	/* the banded decode's seam: with bands every band's process calls
	 * decode, and RGB is written on band 0 alone */
	void (*set_hooks)(void *vae, const struct pd_vae_hooks *hooks);
	/* one picture or video of FRAMES latent frames of H x W: Z [C, frames,
	 * h, w] as the transformer made it (unpacked; Z is the decoder's to
	 * scale in place; C must be channels(): the caller checks it) -> RGB
	 * [video frames, H, W, 3], 8 bits as its pipeline converts them */
	int (*decode)(void *vae, float *z, int frames, int h, int w, uint8_t *rgb);
	/* what that decode costs, from the VAE folder's config (nothing loaded) */
	int (*cost)(const char *dir, int frames, int h, int w, struct pd_vae_cost *out);
	/* Pictures in (NULL where the kind has no encoder here): RGB [H, W, 3]
	 * as its pipeline preprocesses it -> MOMENTS [2C, H/f, W/f], the
	 * posterior's mean and log-variance (the encoder loads on first use).
	 * MASKED [H, W] (may be NULL): 1 where the picture is taken out first
	 * (image x (1 - mask), FLUX.1 Fill's masked picture) */
	int (*encode)(void *vae, const uint8_t *rgb, const uint8_t *masked, int H, int W, float *moments);
	/* the latents a pipeline starts from (N of MOMENTS' halves): sampled
	 * with EPS, or the mode (EPS NULL), scaled as the transformer takes them */
	void (*posterior)(const void *vae, const float *moments, size_t n, const float *eps, float *latents);
};

/* diffusers' AutoencoderKL decoder (pd_vae_kl.c). */
extern const struct pd_vae_kind pd_vae_kl;

/* Decodes one latent Z [latent_channels, h, w] (host) into IMG (host)
 * [out_channels, h * scale, w * scale]; with bands, every band's process
 * passes the whole Z and band 0 receives the whole picture (IMG is left
 * alone on the others). DUMP (may be NULL, one band only) receives vae.dec.*
 * under the golden names. */
int pd_vae_decode(struct pd_vae *v, const float *z, int h, int w, float *img, const struct pd_dump *dump);

#endif /* PD_VAE_H */
