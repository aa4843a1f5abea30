/*
 * pd_qwen_family.c - Qwen-Image's side of the pipeline (QP = diffusers'
 * pipelines/qwenimage/pipeline_qwenimage.py, QT = transformer_qwenimage.py
 * at v0.40): the latent in FLUX's 2x2 patches, an image token's position
 * (0, row, column) centred on the picture, a text token's on the diagonal
 * after it.
 */
#include "pd_flux.h"
#include "pd_qwen.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_wan_vae.h"

#include <stdlib.h>
#include <string.h>

/* QT QwenEmbedRope with scale_rope: row r of the H patch rows sits at
 * r - ceil(H/2), column c at c - ceil(W/2), the frame at 0. */
static void pd_qwen_image_ids(const struct pd_latent_shape *ls, int n_axes, float *ids)
{
	int hp = ls->h / 2, wp = ls->w / 2;

	for (int64_t n = 0; n < ls->tokens; n++) {
		for (int a = 0; a < n_axes; a++)
			ids[n * n_axes + a] = 0.0f;
		if (n_axes > 1)
			ids[n * n_axes + 1] = (float)(n / wp - (hp + 1) / 2);
		if (n_axes > 2)
			ids[n * n_axes + 2] = (float)(n % wp - (wp + 1) / 2);
	}
}

/* QT: text token j at max(H//2, W//2) + j on every axis (the padded
 * length's positions: a mask does not move them). */
static void pd_qwen_text_ids(const struct pd_latent_shape *ls, int64_t txt_len, int n_axes, float *ids)
{
	int hp = ls->h / 2, wp = ls->w / 2, start = hp / 2 > wp / 2 ? hp / 2 : wp / 2;

	for (int64_t j = 0; j < txt_len; j++)
		for (int a = 0; a < n_axes; a++)
			ids[j * n_axes + a] = (float)(start + j);
}

/* The model card's table; its 1140 is 1136 here, as QP floors a side to
 * a multiple of 16 (with a warning) before making the latents. */
static const struct pd_dit_size pd_qwen_sizes[] = {
	{ "1:1", 1328, 1328 }, { "16:9", 1664, 928 },  { "9:16", 928, 1664 }, { "4:3", 1472, 1136 },
	{ "3:4", 1136, 1472 }, { "3:2", 1584, 1056 }, { "2:3", 1056, 1584 }, { NULL, 0, 0 },
};

/* QP's defaults and the published scheduler_config.json: 50 steps, the
 * exponential shift of the resolution (0.5 at 256 tokens, 0.9 at 8192),
 * true CFG at 4 with a negative prompt; 1328^2, the model card's square
 * size. */
static void pd_qwen_defaults(const struct pd_dit_info *info, struct pd_dit_defaults *d)
{
	(void)info;
	memset(d, 0, sizeof(*d));
	d->steps = 50;
	d->shift = 1.0;
	d->dynamic_shift = 1;
	d->base_shift = 0.5;
	d->max_shift = 0.9;
	d->base_seq = 256;
	d->max_seq = 8192;
	d->shift_terminal = 0.02;
	d->whose = "Qwen-Image's";
	d->frames = 1;
	d->height = d->width = 1328;
	d->sizes = pd_qwen_sizes;
	d->true_cfg_scale = 4.0f;
	d->strength = 0.75;
}

static int pd_qwen_probe(const char *path, const char *config, struct pd_dit_info *info)
{
	struct pd_flux_config c;

	if (pd_flux_probe_config(path, config, &c, info))
		return -1;
	return c.qwen ? 0 : pd_errorf("%s: not a QwenImageTransformer2DModel", path);
}

/* A single file holds Qwen-Image's transformer when it has the text's
 * RMSNorm beside the image's input (any prefix) */
static int pd_qwen_file_is(const struct pd_st *st)
{
	return pd_st_find_suffix(st, "txt_norm.weight") && pd_st_find_suffix(st, "img_in.weight");
}

static int pd_qwen_prompt_widths(const struct pd_model_paths *mp, int64_t *txt_width, int64_t *pooled_width)
{
	*pooled_width = 0;
	return pd_qwen_prompt_width(mp, txt_width);
}

/* QP's max_sequence_length */
static int pd_qwen_default_max_seq(const struct pd_dit_info *info)
{
	(void)info;
	return 512;
}

static const struct pd_prompt_encoder_kind pd_qwen_prompt_encoder = {
	.size = sizeof(struct pd_qwen_prompt_encoder),
	.load = pd_qwen_prompt_encoder_load,
	.embeds = pd_qwen_prompt_embeds,
	.free = pd_qwen_prompt_encoder_free,
};

/* The prompts' own lengths: their tokens after the template's 34, at most
 * MAX_SEQ (the tokenizer alone). */
static int pd_qwen_text_lens(const struct pd_model_paths *mp, char *const *prompts, int n, const char *negative,
			     int max_seq, int64_t *lens, int64_t *neg_len)
{
	struct pd_qwen_tok tok;
	int rc = 0;

	if (!mp->tokenizer[0])
		return pd_errorf("no tokenizer folder: give --model DIR or --tokenizer DIR");
	if (pd_qwen_tok_load(&tok, mp->tokenizer[0]))
		return -1;
	for (int b = 0; b < n + (negative != NULL) && !rc; b++) {
		int64_t *ids = NULL;
		int m = 0;

		rc = pd_qwen_prompt_ids(&tok, b < n ? prompts[b] : negative, &ids, &m);
		free(ids);
		if (!rc)
			*(b < n ? &lens[b] : neg_len) = pd_qwen_text_rows(m, max_seq);
	}
	pd_qwen_tok_free(&tok);
	return rc;
}

/* Qwen2.5-VL's language model and Qwen2's tokenizer; stable-diffusion.cpp
 * takes its single file as --llm. */
static const struct pd_encoder_spec pd_qwen_encoders[] = {
	{ "Qwen2.5-VL", "llm", "vocab.json, merges.txt (or tokenizer.json)", 0, 0 },
};

static const char *const pd_qwen_classes[] = { "QwenImageTransformer2DModel", NULL };

/* city96's Qwen-Image GGUF files: general.architecture "qwen_image"; the
 * modulations, as FLUX's, stay F32 */
static const char *const pd_qwen_gguf_f32[] = { "_mod.", NULL };

const struct pd_dit_family pd_qwen_family = {
	.name = "qwen",
	.gguf_arch = "qwen_image",
	.gguf_f32 = pd_qwen_gguf_f32,
	.names_are = pd_qwen_file_is,
	.title = "Qwen-Image pictures",
	.prediction = PD_PREDICT_FLOW,
	.sampler = PD_SAMPLER_EULER,
	.timestep_div = 1000.0f,
	.probe = pd_qwen_probe,
	.classes = pd_qwen_classes,
	.file_is = pd_qwen_file_is,
	.load = pd_flux_load_dit,
	/* FLUX's geometry: 1/8 of the picture, 2x2 patches, 64 channels */
	.latent_shape = pd_flux_latent_shape,
	.pack = pd_flux_pack,
	.unpack = pd_flux_unpack,
	.image_ids = pd_qwen_image_ids,
	.text_ids = pd_qwen_text_ids,
	.cfg_renorm = 1,
	.defaults = pd_qwen_defaults,
	.vae = &pd_wan_vae_kind,
	.vae_scale = 8,
	.encoders = pd_qwen_encoders,
	.n_encoders = (int)(sizeof(pd_qwen_encoders) / sizeof(pd_qwen_encoders[0])),
	.prompt_widths = pd_qwen_prompt_widths,
	.default_max_seq = pd_qwen_default_max_seq,
	.prompt_encoder = &pd_qwen_prompt_encoder,
	.text_lens = pd_qwen_text_lens,
	.tiny = &pd_qwen_tiny_models,
};
