/*
 * pd_wan_family.c - Wan2.1's pipeline side (WanPipeline, diffusers v0.40
 * pipeline_wan.py, PW:n): a video of 4k + 1 frames is latent frames k + 1
 * of 1/8 its size (the VAE's compression), tokens are its (1, 2, 2)
 * patches at (frame, row, column), UniPC with flow shift 3 and 50 steps
 * unless the scheduler folder says otherwise, UMT5 prompts of 512 tokens.
 */
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_wan.h"
#include "pd_wan_prompt.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int pd_wan_patch[3] = { 1, 2, 2 };

/* PW:291, 493-496: sides multiples of 16; frames 4k + 1 (the pipeline
 * rounds others down with a warning, pdit refuses them). */
static int pd_wan_latent_shape(struct pd_latent_shape *ls, const struct pd_dit_info *info, int frames, int height,
			       int width)
{
	if (frames < 1 || (frames - 1) % 4)
		return frames < 1 ? pd_errorf("--frames must be 4k + 1 (1, 5, 9, ... 81), got %d", frames)
				  : pd_errorf("--frames must be 4k + 1: %d is not; %d or %d are", frames,
					      frames / 4 * 4 + 1, frames / 4 * 4 + 5);
	if (height < 16 || width < 16 || height % 16 || width % 16)
		return pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", height,
				 width);
	if (info->in_channels % 4)
		return pd_errorf("the transformer's patch (%d values) is not 4 x latent channels", info->in_channels);
	ls->channels = info->in_channels / 4;
	ls->frames = (frames - 1) / 4 + 1;
	ls->h = height / 8;
	ls->w = width / 8;
	ls->tokens = (int64_t)ls->frames * (ls->h / 2) * (ls->w / 2);
	ls->packed_channels = info->in_channels;
	return 0;
}

static void pd_wan_pack(const struct pd_latent_shape *ls, const float *u, float *p)
{
	pd_wan_patchify(pd_wan_patch, ls->channels, ls->frames, ls->h, ls->w, u, p, NULL);
}

static void pd_wan_unpack(const struct pd_latent_shape *ls, const float *p, float *u)
{
	pd_wan_unpatchify(pd_wan_patch, ls->channels, ls->frames, ls->h, ls->w, p, u);
}

static void pd_wan_image_ids(const struct pd_latent_shape *ls, int n_axes, float *ids)
{
	int64_t nh = ls->h / 2, nw = ls->w / 2;

	for (int64_t n = 0; n < ls->tokens; n++) {
		float v[3] = { (float)(n / (nh * nw)), (float)(n / nw % nh), (float)(n % nw) };

		for (int a = 0; a < n_axes; a++)
			ids[n * n_axes + a] = a < 3 ? v[a] : 0.0f;
	}
}

/* Wan-AI's scheduler folder: UniPC, flow_shift 3 (5 is advised for 720p);
 * WanPipeline's defaults: 50 steps, 81 frames of 480 x 832, CFG 5 with
 * the empty negative prompt. */
static void pd_wan_defaults(const struct pd_dit_info *info, struct pd_dit_defaults *d)
{
	(void)info;
	memset(d, 0, sizeof(*d));
	d->steps = 50;
	d->shift = 3.0;
	d->whose = "Wan2.1's";
	d->frames = 81;
	d->height = 480;
	d->width = 832;
	d->guidance = 5.0f;
	d->guidance_cfg = 1;
	/* no picture in yet (its VAE kind has no encoder); img2img's share when one comes */
	d->strength = 0.75;
}

/* The transformer is Wan's when its config names WanTransformer3DModel;
 * a single file's header says what it keeps quantized (as FLUX's probe). */
static int pd_wan_family_probe(const char *path, const char *config, struct pd_dit_info *info)
{
	struct pd_wan_config c;
	struct pd_st *st = NULL;
	double params = 0, kept = 0, kept_bytes = 0;

	if (pd_wan_probe(path, config, &c) || pd_wan_dit_info(&c, info))
		return -1;
	if (pd_is_dir(path))
		return 0;
	if (pd_wan_file_open(&st, path))
		return -1;
	pd_st_weight_stats(st, &params, &kept, &kept_bytes);
	pd_st_close(st);
	info->kept_fraction = params > 0 ? kept / params : 0;
	info->kept_bytes = kept > 0 ? kept_bytes / kept : 0;
	return 0;
}

static int pd_wan_prompt_widths(const struct pd_model_paths *mp, int64_t *txt_width, int64_t *pooled_width)
{
	*pooled_width = 0;
	return pd_wan_prompt_width(mp, txt_width);
}

static int pd_wan_default_max_seq(const struct pd_dit_info *info)
{
	(void)info;
	return 512;
}

static const struct pd_prompt_encoder_kind pd_wan_prompt_encoder = {
	.size = sizeof(struct pd_wan_prompt_encoder),
	.load = pd_wan_prompt_encoder_load,
	.embeds = pd_wan_prompt_embeds,
	.free = pd_wan_prompt_encoder_free,
};

static int pd_wan_kind_load(void **vae, const char *path, struct pd_backend *be)
{
	return pd_wan_vae_load((struct pd_wan_vae **)vae, path, be);
}

static void pd_wan_kind_free(void *vae)
{
	pd_wan_vae_free(vae);
}

static int pd_wan_kind_channels(const void *vae)
{
	return pd_wan_vae_get_config(vae)->z_dim;
}

static int pd_wan_kind_scale(const void *vae)
{
	return pd_wan_vae_get_config(vae)->spatial;
}

static void pd_wan_kind_set_hooks(void *vae, const struct pd_vae_hooks *hooks)
{
	pd_wan_vae_set_hooks(vae, hooks);
}

/* WanPipeline's decode and export_to_video's frames (PW:656-668, VP:93-118,
 * export_utils.py:207): un-normalised, decoded, clamped to [-1, 1], x 0.5
 * + 0.5 clamped to [0, 1], x 255 truncated, all in float32. */
static int pd_wan_kind_decode(void *vae, float *u, int F, int h, int w, uint8_t *rgb)
{
	struct pd_wan_vae *v = vae;
	int64_t per = (int64_t)F * h * w, n = pd_wan_vae_get_config(v)->z_dim * per;
	int frames = 1 + 4 * (F - 1), s = pd_wan_vae_get_config(v)->spatial;
	int64_t H = (int64_t)h * s, W = (int64_t)w * s;
	float *z = pd_malloc((size_t)n * sizeof(float), "latents");
	/* the float video on the process that receives it */
	float *out = pd_wan_vae_has_video(v) ? pd_malloc((size_t)(3 * frames * H * W) * sizeof(float), "video") : NULL;
	int rc = -1;

	if (!z || (pd_wan_vae_has_video(v) && !out))
		goto out;
	pd_wan_unnormalize(v, u, per, z);
	if (pd_wan_vae_decode(v, z, F, h, w, out, NULL))
		goto out;
	/* another band's process: band 0 has the video */
	if (!pd_wan_vae_has_video(v)) {
		rc = 0;
		goto out;
	}
	for (int64_t f = 0; f < frames; f++)
		for (int64_t p = 0; p < H * W; p++)
			for (int c = 0; c < 3; c++) {
				float d = out[((int64_t)c * frames + f) * H * W + p];
				float t = d < -1.0f ? -1.0f : d > 1.0f ? 1.0f : d, f01 = t * 0.5f + 0.5f;

				f01 = f01 < 0.0f ? 0.0f : f01 > 1.0f ? 1.0f : f01;
				rgb[(f * H * W + p) * 3 + c] = (uint8_t)(f01 * 255.0f);
			}
	rc = 0;
out:
	free(z);
	free(out);
	return rc;
}

/* AutoencoderKLWan's decoder, chunk by chunk (pd_wan_vae.c). */
const struct pd_vae_kind pd_wan_vae_kind = {
	.name = "AutoencoderKLWan",
	.load = pd_wan_kind_load,
	.free = pd_wan_kind_free,
	.channels = pd_wan_kind_channels,
	.scale = pd_wan_kind_scale,
	.set_hooks = pd_wan_kind_set_hooks,
	.decode = pd_wan_kind_decode,
	.cost = pd_wan_vae_cost,
};


/* Wan-AI's head.modulation or diffusers' condition_embedder */
static int pd_wan_names_are(const struct pd_st *st)
{
	static const char *const prefixes[] = { "head.modulation", "condition_embedder.", NULL };

	return pd_dit_names_start(st, prefixes);
}

static const char *const pd_wan_classes[] = { "WanTransformer3DModel", "WanModel", NULL };

static int pd_wan_file_is(const struct pd_st *st)
{
	return pd_wan_file_layout(st) >= 0;
}

/* UMT5-XXL and its sentencepiece tokenizer (Wan-AI's google/umt5-xxl);
 * stable-diffusion.cpp takes its single file as --t5xxl. */
static const struct pd_encoder_spec pd_wan_encoders[] = {
	{ "UMT5", "t5xxl", "spiece.model, tokenizer_config.json", 0, 0 },
};

/* convert.py's keys_hiprec (the modulation tables, under diffusers' name
 * too) and lcpp.patch's rule for the FFN's second layer (under diffusers'
 * name too) */
static const char *const pd_wan_gguf_f32[] = { ".modulation", "scale_shift_table", NULL };
static const char *const pd_wan_gguf_q_1[] = { ".ffn.2.weight", ".ffn.net.2.weight", NULL };

const struct pd_dit_family pd_wan_family = {
	.name = "wan",
	.gguf_arch = "wan",
	.names_are = pd_wan_names_are,
	.gguf_f32 = pd_wan_gguf_f32,
	.gguf_q_1 = pd_wan_gguf_q_1,
	.title = "Wan2.1 text-to-video (a whole folder: UMT5, tokenizer, VAE, UniPC)",
	.prediction = PD_PREDICT_FLOW,
	.sampler = PD_SAMPLER_UNIPC,
	.timestep_div = 1.0f,
	.latents_unpacked = 1,
	.probe = pd_wan_family_probe,
	.classes = pd_wan_classes,
	.file_is = pd_wan_file_is,
	.load = pd_wan_load_dit,
	.latent_shape = pd_wan_latent_shape,
	.pack = pd_wan_pack,
	.unpack = pd_wan_unpack,
	.image_ids = pd_wan_image_ids,
	.defaults = pd_wan_defaults,
	.vae = &pd_wan_vae_kind,
	.vae_scale = 8,
	.encoders = pd_wan_encoders,
	.n_encoders = (int)(sizeof(pd_wan_encoders) / sizeof(pd_wan_encoders[0])),
	.prompt_widths = pd_wan_prompt_widths,
	.default_max_seq = pd_wan_default_max_seq,
	.prompt_encoder = &pd_wan_prompt_encoder,
	.tiny = &pd_wan_tiny_models,
};
