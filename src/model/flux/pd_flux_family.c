/*
 * pd_flux_family.c - FLUX.1's side of the pipeline (PF = diffusers v0.40
 * pipelines/flux/pipeline_flux.py): the latent in 2x2 patches, a token's
 * position as (0, row, column).
 */
#include "pd_flux.h"
#include "pd_flux_prompt.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"

#include <stdlib.h>
#include <string.h>

/* FLUX.1 Fill's conditioning of a token: the masked picture's packed
 * latents (4 C) and its 2x2 patch of the mask folded 8x8 (4 x 64). */
static int pd_flux_fill_channels(int latent_channels)
{
	return 4 * latent_channels + 4 * 64;
}

/* The VAE's latent is 1/8 of the picture and the tokens are its 2x2
 * patches: a picture is a multiple of 16 pixels each way. */
int pd_flux_latent_shape(struct pd_latent_shape *ls, const struct pd_dit_info *info, int frames, int height,
				int width)
{
	if (frames != 1)
		return pd_errorf("--frames %d: this model makes pictures (one frame; video is Wan2.1's)", frames);
	if (height < 16 || width < 16 || height % 16 || width % 16)
		return pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", height,
				 width);
	if (info->out_channels % 4)
		return pd_errorf("the transformer's out_channels (%d) is not 4 x latent channels", info->out_channels);
	ls->channels = info->out_channels / 4;
	ls->frames = 1;
	ls->h = 2 * (height / 16);
	ls->w = 2 * (width / 16);
	ls->tokens = (int64_t)(ls->h / 2) * (ls->w / 2);
	ls->packed_channels = info->out_channels;
	ls->cond_channels = info->in_channels - info->out_channels;
	/* FLUX.1 Fill: the masked picture's latents and the 8x8-folded mask,
	 * both packed (FluxFillPipeline.prepare_mask_latents) */
	if (ls->cond_channels && ls->cond_channels != pd_flux_fill_channels(ls->channels))
		return pd_errorf("the transformer's in_channels (%d) are neither its out_channels (%d, FLUX.1) nor FLUX.1 "
				 "Fill's %d", info->in_channels, info->out_channels,
				 info->out_channels + pd_flux_fill_channels(ls->channels));
	return 0;
}

/* packed[(i * w/2 + j), ch * 4 + dy * 2 + dx] = latent[ch, 2i + dy, 2j + dx]
 * (PF:520-525). */
void pd_flux_pack(const struct pd_latent_shape *ls, const float *u, float *p)
{
	int hp = ls->h / 2, wp = ls->w / 2, C = ls->channels;

	for (int i = 0; i < hp; i++)
		for (int j = 0; j < wp; j++)
			for (int ch = 0; ch < C; ch++)
				for (int dy = 0; dy < 2; dy++)
					for (int dx = 0; dx < 2; dx++)
						p[((int64_t)i * wp + j) * 4 * C + ch * 4 + dy * 2 + dx] =
							u[((int64_t)ch * ls->h + 2 * i + dy) * ls->w + 2 * j + dx];
}

void pd_flux_unpack(const struct pd_latent_shape *ls, const float *p, float *u)
{
	int hp = ls->h / 2, wp = ls->w / 2, C = ls->channels;

	for (int i = 0; i < hp; i++)
		for (int j = 0; j < wp; j++)
			for (int ch = 0; ch < C; ch++)
				for (int dy = 0; dy < 2; dy++)
					for (int dx = 0; dx < 2; dx++)
						u[((int64_t)ch * ls->h + 2 * i + dy) * ls->w + 2 * j + dx] =
							p[((int64_t)i * wp + j) * 4 * C + ch * 4 + dy * 2 + dx];
}

/* ids[n] = (0, i, j) for packed token n = i * w/2 + j (PF:506-517). */
static void pd_flux_image_ids(const struct pd_latent_shape *ls, int n_axes, float *ids)
{
	int wp = ls->w / 2;

	for (int64_t n = 0; n < ls->tokens; n++) {
		for (int a = 0; a < n_axes; a++)
			ids[n * n_axes + a] = 0.0f;
		if (n_axes > 1)
			ids[n * n_axes + 1] = (float)(n / wp);
		if (n_axes > 2)
			ids[n * n_axes + 2] = (float)(n % wp);
	}
}

/* The scheduler folders Black Forest Labs publish: FLUX.1-dev shifts by
 * the resolution (scheduler_config.json: shift 3, use_dynamic_shifting,
 * base_shift 0.5 at 256 tokens, max_shift 1.15 at 4096), schnell does
 * not; dev runs 28 steps, schnell 4. */
static void pd_flux_defaults(const struct pd_dit_info *info, struct pd_dit_defaults *d)
{
	int fill = info->in_channels != info->out_channels;

	memset(d, 0, sizeof(*d));
	d->steps = info->guidance ? 28 : 4;
	d->shift = info->guidance ? 3.0 : 1.0;
	d->dynamic_shift = info->guidance;
	d->base_shift = 0.5;
	d->max_shift = 1.15;
	d->base_seq = 256;
	d->max_seq = 4096;
	d->whose = info->guidance ? "FLUX.1-dev's" : "FLUX.1-schnell's";
	d->frames = 1;
	d->height = d->width = 1024;
	d->guidance = 3.5f;
	d->strength = 0.75;
	if (fill) {
		/* FluxFillPipeline's and FLUX.1-Fill-dev's card: 50 steps,
		 * guidance 30, the whole schedule (strength 1) */
		d->steps = 50;
		d->guidance = 30.0f;
		d->strength = 1.0;
		d->whose = "FLUX.1-Fill-dev's";
	}
}

int pd_flux_probe_config(const char *path, const char *config, struct pd_flux_config *c, struct pd_dit_info *info)
{
	struct pd_st *st = NULL;
	double params = 0, kept = 0, kept_bytes = 0;

	if (!pd_is_dir(path)) {
		/* a single file (BFL's, ComfyUI's, GGUF): its sizes, and what
		 * it keeps quantized */
		if (pd_flux_open_file(&st, path, c, config))
			return -1;
		pd_st_weight_stats(st, &params, &kept, &kept_bytes);
		pd_st_close(st);
	} else if (pd_flux_config_load(c, path)) {
		return -1;
	}
	if (pd_flux_dit_info(c, info))
		return -1;
	info->kept_fraction = params > 0 ? kept / params : 0;
	info->kept_bytes = kept > 0 ? kept_bytes / kept : 0;
	return 0;
}

static int pd_flux_probe(const char *path, const char *config, struct pd_dit_info *info)
{
	struct pd_flux_config c;

	return pd_flux_probe_config(path, config, &c, info);
}

/* FluxPipeline.encode_prompt: CLIP's pooled output and T5's last state. */
static const struct pd_prompt_encoder_kind pd_flux_prompt_encoder = {
	.size = sizeof(struct pd_flux_prompt_encoder),
	.load = pd_flux_prompt_encoder_load,
	.embeds = pd_flux_prompt_embeds,
	.free = pd_flux_prompt_encoder_free,
};

/* 512 tokens for guidance-distilled (dev-style) models, 256 for the others
 * (schnell), as Black Forest Labs run them; 512 for encoders alone. */
static int pd_flux_default_max_seq(const struct pd_dit_info *info)
{
	return pd_flux_prompt_default_length(info ? info->guidance : 1);
}


/* Black Forest Labs' double_blocks or diffusers' transformer_blocks (not
 * Qwen-Image's, which has an RMSNorm of the text) */
static int pd_flux_names_are(const struct pd_st *st)
{
	static const char *const prefixes[] = { "double_blocks.", "transformer_blocks.", NULL };

	return pd_dit_names_start(st, prefixes) && !pd_st_find_suffix(st, "txt_norm.weight");
}

static const char *const pd_flux_classes[] = { "FluxTransformer2DModel", NULL };

/* FluxPipeline's CLIP-L (pooled, 77 ids) and T5-XXL (the sequence), as
 * text_encoder and text_encoder_2; Black Forest Labs' and ComfyUI's
 * single files are stable-diffusion.cpp's --clip_l and --t5xxl. */
static const struct pd_encoder_spec pd_flux_encoders[] = {
	{ "CLIP", "clip_l", "vocab.json, merges.txt", 77, 0 },
	{ "T5", "t5xxl", "spiece.model", 0, 0 },
};

const struct pd_dit_family pd_flux_family = {
	.name = "flux",
	.gguf_arch = "flux",
	.names_are = pd_flux_names_are,
	.title = "FLUX.1 (dev- or schnell-style) pictures",
	.prediction = PD_PREDICT_FLOW,
	.sampler = PD_SAMPLER_EULER,
	.timestep_div = 1000.0f,
	.probe = pd_flux_probe,
	.classes = pd_flux_classes,
	.load = pd_flux_load_dit,
	.latent_shape = pd_flux_latent_shape,
	.pack = pd_flux_pack,
	.unpack = pd_flux_unpack,
	.image_ids = pd_flux_image_ids,
	.defaults = pd_flux_defaults,
	.vae = &pd_vae_kl,
	.encoders = pd_flux_encoders,
	.n_encoders = (int)(sizeof(pd_flux_encoders) / sizeof(pd_flux_encoders[0])),
	.prompt_widths = pd_flux_prompt_widths,
	.default_max_seq = pd_flux_default_max_seq,
	.prompt_encoder = &pd_flux_prompt_encoder,
	.tiny = &pd_flux_tiny_models,
};
