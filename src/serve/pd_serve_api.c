/*
 * pd_serve_api.c - the request bodies and answers of `pdit serve`:
 * OpenAI's images API (as its clients send it) and the A1111 txt2img
 * shape stable-diffusion.cpp's server accepts, both with pdit's own fields.
 * Every refusal names the field.
 */
#include "pd_serve.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* A field of a dialect: its JSON name and what it sets. */
enum pd_sf_kind { PD_SF_PROMPT, PD_SF_NEGATIVE, PD_SF_N, PD_SF_SIZE, PD_SF_WIDTH, PD_SF_HEIGHT, PD_SF_STEPS,
		  PD_SF_SEED, PD_SF_GUIDANCE, PD_SF_TRUE_CFG, PD_SF_CFG, PD_SF_FBCACHE, PD_SF_FORMAT, PD_SF_N_ITER,
		  PD_SF_FRAMES, PD_SF_FPS, PD_SF_VIDEO_FORMAT, PD_SF_FLOW_SHIFT, PD_SF_OBJECT, PD_SF_INIT_IMAGES,
		  PD_SF_MASK, PD_SF_STRENGTH, PD_SF_EDIT_IMAGE, PD_SF_REF_IMAGE, PD_SF_IGNORED, PD_SF_NOTED };

/* A field inside an object field is named by its path ("sample_params.
 * sample_steps"), in the same table as its object (PD_SF_OBJECT). */
struct pd_serve_field {
	const char *name;               /* the JSON key, or its path */
	enum pd_sf_kind kind;           /* what it sets */
	/* PD_SF_NOTED: the values that ask for nothing pdit does not do
	 * besides null, false, "", [] and {} ("|"-separated, numbers as %g,
	 * strings lowercased; "*": any value) */
	const char *quiet;
};

/* OpenAI's images.generate (model, quality, style and user are accepted
 * and have no effect here: one model, its own quality) and pdit's fields. */
static const struct pd_serve_field pd_sf_openai[] = {
	{ "prompt", PD_SF_PROMPT, NULL },           { "n", PD_SF_N, NULL },
	{ "size", PD_SF_SIZE, NULL },               { "response_format", PD_SF_FORMAT, NULL },
	{ "model", PD_SF_IGNORED, NULL },           { "quality", PD_SF_IGNORED, NULL },
	{ "style", PD_SF_IGNORED, NULL },           { "user", PD_SF_IGNORED, NULL },
	{ "seed", PD_SF_SEED, NULL },               { "steps", PD_SF_STEPS, NULL },
	{ "guidance", PD_SF_GUIDANCE, NULL },       { "negative_prompt", PD_SF_NEGATIVE, NULL },
	{ "true_cfg_scale", PD_SF_TRUE_CFG, NULL }, { "fbcache_threshold", PD_SF_FBCACHE, NULL },
	{ "frames", PD_SF_FRAMES, NULL },           { "fps", PD_SF_FPS, NULL },
	{ "output_format", PD_SF_VIDEO_FORMAT, NULL },
	{ "ref_image", PD_SF_REF_IMAGE, NULL },     /* pdit's: FLUX.1 Kontext's reference */
	/* gpt-image-1's: what asks for something else is noted */
	{ "background", PD_SF_NOTED, "auto|opaque" },
	{ "moderation", PD_SF_NOTED, "*" },
	{ "output_compression", PD_SF_NOTED, "*" },
	{ "partial_images", PD_SF_NOTED, "0" },
	{ "stream", PD_SF_NOTED, "" },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* OpenAI's images.edit (multipart, pd_serve_multipart_json): its picture
 * and mask (fully transparent where it is edited), and pdit's fields as on
 * images.generate. */
static const struct pd_serve_field pd_sf_openai_edit[] = {
	{ "prompt", PD_SF_PROMPT, NULL },           { "n", PD_SF_N, NULL },
	{ "size", PD_SF_SIZE, NULL },               { "response_format", PD_SF_FORMAT, NULL },
	{ "image", PD_SF_EDIT_IMAGE, NULL },        { "mask", PD_SF_MASK, NULL },
	{ "model", PD_SF_IGNORED, NULL },           { "user", PD_SF_IGNORED, NULL },
	{ "seed", PD_SF_SEED, NULL },               { "steps", PD_SF_STEPS, NULL },
	{ "guidance", PD_SF_GUIDANCE, NULL },       { "negative_prompt", PD_SF_NEGATIVE, NULL },
	{ "true_cfg_scale", PD_SF_TRUE_CFG, NULL }, { "fbcache_threshold", PD_SF_FBCACHE, NULL },
	{ "strength", PD_SF_STRENGTH, NULL },
	{ "quality", PD_SF_NOTED, "auto|standard" },
	{ "background", PD_SF_NOTED, "auto|opaque" },
	{ "input_fidelity", PD_SF_NOTED, "*" },
	{ "output_format", PD_SF_NOTED, "png" },
	{ "output_compression", PD_SF_NOTED, "*" },
	{ "partial_images", PD_SF_NOTED, "0" },
	{ "stream", PD_SF_NOTED, "" },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* pdit's job API (POST /v1/jobs, what the page sends): images.generate's
 * fields, and a picture to start from, a mask in the command line's
 * convention (white repaints: the page paints white on black) and the
 * strength. */
static const struct pd_serve_field pd_sf_jobs[] = {
	{ "image", PD_SF_EDIT_IMAGE, NULL },        { "mask", PD_SF_MASK, NULL },
	{ "strength", PD_SF_STRENGTH, NULL },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* A1111's img2img: its own fields here, the rest are txt2img's. The first
 * of init_images is the picture; a mask inpaints (white repaints). */
static const struct pd_serve_field pd_sf_a1111_img2img[] = {
	{ "init_images", PD_SF_INIT_IMAGES, NULL },
	{ "mask", PD_SF_MASK, NULL },
	{ "denoising_strength", PD_SF_STRENGTH, NULL },
	{ "resize_mode", PD_SF_NOTED, "0" },
	{ "mask_blur", PD_SF_NOTED, "0" },
	{ "mask_blur_x", PD_SF_NOTED, "0" },
	{ "mask_blur_y", PD_SF_NOTED, "0" },
	{ "inpainting_fill", PD_SF_NOTED, "1" },   /* "original": the picture's latents */
	{ "inpaint_full_res", PD_SF_NOTED, "" },
	{ "inpaint_full_res_padding", PD_SF_NOTED, "*" },
	{ "inpainting_mask_invert", PD_SF_NOTED, "" },
	{ "initial_noise_multiplier", PD_SF_NOTED, "1" },
	{ "image_cfg_scale", PD_SF_NOTED, "*" },
	{ "include_init_images", PD_SF_NOTED, "*" },
	{ "latent_mask", PD_SF_NOTED, "" },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* stable-diffusion.cpp's POST /sdcpp/v1/vid_gen (its examples/server/
 * api.md): its sampling fields nested as it nests them, txt_cfg as A1111's
 * cfg_scale, distilled_guidance as FLUX's guidance; what only its other
 * models or inputs use is noted as A1111's fields are. */
static const struct pd_serve_field pd_sf_sdcpp_video[] = {
	{ "prompt", PD_SF_PROMPT, NULL },           { "negative_prompt", PD_SF_NEGATIVE, NULL },
	{ "width", PD_SF_WIDTH, NULL },             { "height", PD_SF_HEIGHT, NULL },
	{ "seed", PD_SF_SEED, NULL },               { "video_frames", PD_SF_FRAMES, NULL },
	{ "fps", PD_SF_FPS, NULL },                 { "output_format", PD_SF_VIDEO_FORMAT, NULL },
	{ "sample_params", PD_SF_OBJECT, NULL },
	{ "sample_params.sample_steps", PD_SF_STEPS, NULL },
	{ "sample_params.flow_shift", PD_SF_FLOW_SHIFT, NULL },
	{ "sample_params.sample_method", PD_SF_NOTED, "euler" },
	{ "sample_params.scheduler", PD_SF_NOTED, "discrete|default|simple" },
	{ "sample_params.eta", PD_SF_NOTED, "*" },
	{ "sample_params.shifted_timestep", PD_SF_NOTED, "0" },
	{ "sample_params.custom_sigmas", PD_SF_NOTED, "" },
	{ "sample_params.guidance", PD_SF_OBJECT, NULL },
	{ "sample_params.guidance.txt_cfg", PD_SF_CFG, NULL },
	{ "sample_params.guidance.distilled_guidance", PD_SF_GUIDANCE, NULL },
	{ "sample_params.guidance.img_cfg", PD_SF_NOTED, "*" },
	{ "sample_params.guidance.slg", PD_SF_OBJECT, NULL },
	{ "sample_params.guidance.slg.scale", PD_SF_NOTED, "0" },
	{ "sample_params.guidance.slg.layers", PD_SF_NOTED, "*" },
	{ "sample_params.guidance.slg.layer_start", PD_SF_NOTED, "*" },
	{ "sample_params.guidance.slg.layer_end", PD_SF_NOTED, "*" },
	{ "high_noise_sample_params", PD_SF_NOTED, "*" }, /* Wan2.2's second expert */
	{ "moe_boundary", PD_SF_NOTED, "*" },
	{ "vace_strength", PD_SF_NOTED, "*" },
	{ "strength", PD_SF_NOTED, "*" },         /* with init_image only */
	{ "clip_skip", PD_SF_NOTED, "-1|0" },
	{ "init_image", PD_SF_NOTED, "" },
	{ "end_image", PD_SF_NOTED, "" },
	{ "control_frames", PD_SF_NOTED, "" },
	{ "lora", PD_SF_NOTED, "" },
	{ "vae_tiling_params", PD_SF_NOTED, "*" },
	{ "cache_mode", PD_SF_NOTED, "disabled" },
	{ "cache_option", PD_SF_NOTED, "" },
	{ "scm_mask", PD_SF_NOTED, "" },
	{ "scm_policy_dynamic", PD_SF_NOTED, "*" },
	{ "output_compression", PD_SF_NOTED, "*" },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* A1111's txt2img (its API's StableDiffusionProcessingTxt2Img, as
 * stable-diffusion.cpp's server and Forge read it): what pdit can do is
 * honoured; the rest is accepted and named in the job's log line when its
 * value asks for something (a sampler other than Euler, face restoration,
 * the high-resolution pass, scripts), refused with --strict. The hr_*
 * fields and denoising_strength only matter with enable_hr, which is noted
 * itself. Forge's distilled_cfg_scale is FLUX's guidance. */
static const struct pd_serve_field pd_sf_a1111[] = {
	{ "prompt", PD_SF_PROMPT, NULL },           { "negative_prompt", PD_SF_NEGATIVE, NULL },
	{ "width", PD_SF_WIDTH, NULL },             { "height", PD_SF_HEIGHT, NULL },
	{ "steps", PD_SF_STEPS, NULL },             { "cfg_scale", PD_SF_CFG, NULL },
	{ "seed", PD_SF_SEED, NULL },               { "batch_size", PD_SF_N, NULL },
	{ "n_iter", PD_SF_N_ITER, NULL },           { "distilled_cfg_scale", PD_SF_GUIDANCE, NULL },
	{ "guidance", PD_SF_GUIDANCE, NULL },       { "true_cfg_scale", PD_SF_TRUE_CFG, NULL },
	{ "fbcache_threshold", PD_SF_FBCACHE, NULL },
	{ "ref_image", PD_SF_REF_IMAGE, NULL },     /* pdit's: FLUX.1 Kontext's reference */
	{ "sampler_name", PD_SF_NOTED, "euler" },
	{ "sampler_index", PD_SF_NOTED, "euler" },
	{ "scheduler", PD_SF_NOTED, "automatic" },
	{ "styles", PD_SF_NOTED, "" },
	{ "subseed", PD_SF_NOTED, "-1" },
	{ "subseed_strength", PD_SF_NOTED, "0" },
	{ "seed_resize_from_h", PD_SF_NOTED, "-1|0" },
	{ "seed_resize_from_w", PD_SF_NOTED, "-1|0" },
	{ "restore_faces", PD_SF_NOTED, "" },
	{ "tiling", PD_SF_NOTED, "" },
	{ "eta", PD_SF_NOTED, "*" },          /* Euler draws no noise between steps */
	{ "s_min_uncond", PD_SF_NOTED, "0" },
	{ "s_churn", PD_SF_NOTED, "0" },
	{ "s_tmax", PD_SF_NOTED, "0|inf" },
	{ "s_tmin", PD_SF_NOTED, "0" },
	{ "s_noise", PD_SF_NOTED, "1" },
	{ "override_settings", PD_SF_NOTED, "" },
	{ "override_settings_restore_afterwards", PD_SF_NOTED, "*" },
	{ "refiner_checkpoint", PD_SF_NOTED, "" },
	{ "refiner_switch_at", PD_SF_NOTED, "0" },
	{ "disable_extra_networks", PD_SF_NOTED, "*" },
	{ "firstpass_image", PD_SF_NOTED, "" },
	{ "comments", PD_SF_NOTED, "*" },
	{ "enable_hr", PD_SF_NOTED, "" },
	{ "denoising_strength", PD_SF_NOTED, "*" },
	{ "firstphase_width", PD_SF_NOTED, "*" },
	{ "firstphase_height", PD_SF_NOTED, "*" },
	{ "hr_scale", PD_SF_NOTED, "*" },
	{ "hr_upscaler", PD_SF_NOTED, "*" },
	{ "hr_second_pass_steps", PD_SF_NOTED, "*" },
	{ "hr_resize_x", PD_SF_NOTED, "*" },
	{ "hr_resize_y", PD_SF_NOTED, "*" },
	{ "hr_checkpoint_name", PD_SF_NOTED, "*" },
	{ "hr_sampler_name", PD_SF_NOTED, "*" },
	{ "hr_scheduler", PD_SF_NOTED, "*" },
	{ "hr_prompt", PD_SF_NOTED, "*" },
	{ "hr_negative_prompt", PD_SF_NOTED, "*" },
	{ "hr_cfg", PD_SF_NOTED, "*" },
	{ "hr_distilled_cfg", PD_SF_NOTED, "*" },
	{ "force_task_id", PD_SF_NOTED, "*" },
	{ "script_name", PD_SF_NOTED, "" },
	{ "script_args", PD_SF_NOTED, "" },
	{ "alwayson_scripts", PD_SF_NOTED, "" },
	{ "send_images", PD_SF_NOTED, "true" },
	{ "save_images", PD_SF_NOTED, "" },  /* pdit keeps no files */
	{ "do_not_save_samples", PD_SF_NOTED, "*" },
	{ "do_not_save_grid", PD_SF_NOTED, "*" },
	{ "infotext", PD_SF_NOTED, "" },
	{ NULL, PD_SF_IGNORED, NULL },
};

/* Whether value V of noted field F asks for nothing pdit does not do. */
static int pd_sf_quiet(const struct pd_serve_field *f, const cJSON *v)
{
	char text[64];
	size_t n = 0;
	const char *q = f->quiet;

	if (strcmp(q, "*") == 0 || cJSON_IsNull(v) || cJSON_IsFalse(v) ||
	    ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child) || (cJSON_IsString(v) && !v->valuestring[0]))
		return 1;
	if (cJSON_IsTrue(v))
		snprintf(text, sizeof(text), "true");
	else if (cJSON_IsNumber(v))
		snprintf(text, sizeof(text), "%g", v->valuedouble);
	else if (cJSON_IsString(v) && strlen(v->valuestring) < sizeof(text))
		for (const char *c = v->valuestring; (text[n] = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c)); c++)
			n++;
	else
		return 0;
	n = strlen(text);
	while (*q) {
		size_t len = strcspn(q, "|");

		if (len == n && memcmp(q, text, n) == 0)
			return 1;
		q += len + (q[len] == '|');
	}
	return 0;
}

static int pd_sf_fail(const char **field, const char *name, const char *fmt, const char *detail)
{
	*field = name;
	return pd_errorf(fmt, name, detail);
}

/* An integer field in [LO, HI]. */
static int pd_sf_int(const cJSON *v, const char *name, double lo, double hi, double *out, const char **field)
{
	char range[64];

	snprintf(range, sizeof(range), "%.0f to %.0f", lo, hi);
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
		return pd_sf_fail(field, name, "%s must be an integer (%s)", range);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return pd_sf_fail(field, name, "%s must be %s", range);
	*out = v->valuedouble;
	return 0;
}

static int pd_sf_float(const cJSON *v, const char *name, double lo, double hi, float *out, const char **field)
{
	char range[64];

	snprintf(range, sizeof(range), "between %g and %g", lo, hi);
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
		return pd_sf_fail(field, name, "%s must be a number %s", range);
	*out = (float)v->valuedouble;
	return 0;
}

static int pd_sf_text(const cJSON *v, const char *name, char **out, const char **field)
{
	if (!cJSON_IsString(v))
		return pd_sf_fail(field, name, "%s must be a string%s", "");
	if (strlen(v->valuestring) > PD_SERVE_MAX_PROMPT) {
		char lim[64];

		snprintf(lim, sizeof(lim), " (at most %d bytes)", PD_SERVE_MAX_PROMPT);
		return pd_sf_fail(field, name, "%s is too long%s", lim);
	}
	free(*out);
	*out = pd_strdup(v->valuestring);
	return *out ? 0 : -1;
}

/* Whether a string of the JSON text BODY holds \u0000: cJSON ends the
 * string there, so the rest of a prompt would be dropped without a word.
 * The key of the value it is in (or the key itself) into KEY. */
static int pd_sf_nul(const char *body, size_t len, char *key, size_t key_size)
{
	size_t i = 0;

	key[0] = 0;
	while (i < len) {
		size_t start, end, j;
		int nul = 0;

		if (body[i++] != '"')
			continue;
		start = i;
		while (i < len && body[i] != '"') {
			if (body[i] == '\\') {
				nul |= i + 5 < len && body[i + 1] == 'u' && !memcmp(body + i + 2, "0000", 4);
				i += 2;
			} else {
				i++;
			}
		}
		end = i < len ? i : len;
		i++;
		for (j = i; j < len && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r'); j++)
			;
		if (j < len && body[j] == ':')
			snprintf(key, key_size, "%.*s", (int)(end - start < 64 ? end - start : 64), body + start);
		if (nul)
			return 1;
	}
	return 0;
}

/* A side: a multiple of 16 up to PD_SERVE_MAX_SIDE. */
/* The number the digits at S write (one at least; no sign, no space) into
 * *V, held at 1e9 once past it, so that a side of any length is read whole
 * ("100000x100000" is too large, not malformed): the first byte after them,
 * or NULL where S has no digit. */
static const char *pd_sf_digits(const char *s, double *v)
{
	if (!(*s >= '0' && *s <= '9'))
		return NULL;
	for (*v = 0; *s >= '0' && *s <= '9'; s++)
		*v = *v < 1e9 ? *v * 10 + (*s - '0') : *v;
	return s;
}

static int pd_sf_side(double v, const char *name, int *out, const char **field)
{
	if (v < 16 || v > PD_SERVE_MAX_SIDE || fmod(v, 16) != 0) {
		char lim[64];

		snprintf(lim, sizeof(lim), "a multiple of 16 from 16 to %d", PD_SERVE_MAX_SIDE);
		return pd_sf_fail(field, name, "%s must be %s", lim);
	}
	*out = (int)v;
	return 0;
}

/* A picture field: base64 of a PNG, or a data URL of one; kept as base64
 * (the job's text every process reads), checked here. */
/* The size a PNG's or JPEG's header declares (B, N bytes); 0 when it says
 * none (the engine's reader names what is wrong). *ALPHA: a PNG with an
 * alpha channel or a transparent colour. */
static int pd_sf_picture_size(const uint8_t *b, size_t n, uint64_t *w, uint64_t *h, int *alpha)
{
	*w = *h = 0;
	*alpha = 0;
	if (n >= 29 && b[0] == 0x89 && memcmp(b + 12, "IHDR", 4) == 0) {
		*w = (uint64_t)b[16] << 24 | (uint64_t)b[17] << 16 | (uint64_t)b[18] << 8 | b[19];
		*h = (uint64_t)b[20] << 24 | (uint64_t)b[21] << 16 | (uint64_t)b[22] << 8 | b[23];
		*alpha = b[25] == 4 || b[25] == 6;
		/* tRNS: a transparent colour or palette entries */
		for (size_t i = 8; !*alpha && i + 8 <= n;) {
			size_t len = (size_t)b[i] << 24 | (size_t)b[i + 1] << 16 | (size_t)b[i + 2] << 8 | b[i + 3];

			if (memcmp(b + i + 4, "tRNS", 4) == 0)
				*alpha = 1;
			if (memcmp(b + i + 4, "IDAT", 4) == 0 || len > n)
				break;
			i += len + 12;
		}
		return 0;
	}
	/* JPEG: the frame header (SOFn, not DHT, JPG or DAC) after the markers before it */
	for (size_t i = 2; i + 9 < n && b[i] == 0xff;) {
		int m = b[i + 1];
		size_t len = (size_t)b[i + 2] << 8 | b[i + 3];

		if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
			*h = (uint64_t)b[i + 5] << 8 | b[i + 6];
			*w = (uint64_t)b[i + 7] << 8 | b[i + 8];
			return 0;
		}
		i += 2 + len;
	}
	return 0;
}

static int pd_sf_png_alpha(const cJSON *v, const char *name, char **out, const char **field, int *alpha)
{
	const char *s = cJSON_GetStringValue(v), *comma;
	uint8_t *bytes = NULL;
	size_t len = 0;
	uint64_t w, h;

	if (!s)
		return pd_sf_fail(field, name, "%s must be a base64 PNG (or a data: URL of one)%s", "");
	if (strncmp(s, "data:", 5) == 0 && (comma = strchr(s, ',')))
		s = comma + 1;
	/* a PNG, or a JPEG (the engine reads both) */
	if (pd_unbase64(s, &bytes, &len) || len < 8 ||
	    (memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) != 0 && memcmp(bytes, "\xff\xd8\xff", 3) != 0)) {
		free(bytes);
		return pd_sf_fail(field, name, "%s is not a base64 PNG or JPEG%s", "");
	}
	pd_sf_picture_size(bytes, len, &w, &h, alpha);
	free(bytes);
	/* whatever size the request asks for, the picture is decoded whole first */
	if (w * h > PD_SERVE_MAX_PIXELS) {
		*field = name;
		return pd_errorf("%s: a picture of %llux%llu is more than %d pixels", name, (unsigned long long)w,
				 (unsigned long long)h, PD_SERVE_MAX_PIXELS);
	}
	free(*out);
	*out = pd_strdup(s);
	return *out ? 0 : -1;
}

static int pd_sf_png(const cJSON *v, const char *name, char **out, const char **field)
{
	int alpha;

	return pd_sf_png_alpha(v, name, out, field, &alpha);
}

static int pd_sf_one(struct pd_serve_params *p, const struct pd_serve_field *f, const cJSON *v, int *n_iter,
		     int *format, const char **field)
{
	double d = 0;

	switch (f->kind) {
	case PD_SF_PROMPT:
		return pd_sf_text(v, f->name, &p->prompt, field);
	case PD_SF_NEGATIVE:
		return cJSON_IsNull(v) ? 0 : pd_sf_text(v, f->name, &p->negative, field);
	case PD_SF_N:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_N, &d, field))
			return -1;
		p->n = (int)d;
		return 0;
	case PD_SF_SIZE: {
		const char *s;
		double side[2] = { 0, 0 };

		if (!cJSON_IsString(v))
			return pd_sf_fail(field, f->name, "%s must be a string such as \"1024x1024\"%s", "");
		if (strcmp(v->valuestring, "auto") == 0)
			return 0;
		s = pd_sf_digits(v->valuestring, &side[0]);
		if (!s || *s != 'x' || !(s = pd_sf_digits(s + 1, &side[1])) || *s)
			return pd_sf_fail(field, f->name, "%s must be \"WIDTHxHEIGHT\" (such as \"1024x1024\") or \"auto\"%s",
					  "");
		return pd_sf_side(side[0], f->name, &p->width, field) || pd_sf_side(side[1], f->name, &p->height, field);
	}
	case PD_SF_WIDTH:
	case PD_SF_HEIGHT:
		if (!cJSON_IsNumber(v))
			return pd_sf_fail(field, f->name, "%s must be an integer%s", "");
		return pd_sf_side(v->valuedouble, f->name, f->kind == PD_SF_WIDTH ? &p->width : &p->height, field);
	case PD_SF_STEPS:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_STEPS, &d, field))
			return -1;
		p->steps = (int)d;
		return 0;
	case PD_SF_SEED:
		/* A1111's -1: a seed of the server's choosing */
		if (cJSON_IsNumber(v) && v->valuedouble == -1) {
			p->seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
			p->seed &= (1ULL << 53) - 1;
			return 0;
		}
		if (pd_sf_int(v, f->name, 0, 9007199254740991.0, &d, field))
			return -1;
		p->seed = (uint64_t)d;
		return 0;
	case PD_SF_GUIDANCE:
		return pd_sf_float(v, f->name, 0, 100, &p->guidance, field);
	case PD_SF_TRUE_CFG:
		return pd_sf_float(v, f->name, 0, 100, &p->true_cfg_scale, field);
	case PD_SF_CFG:
		return pd_sf_float(v, f->name, 0, 100, &p->cfg_scale, field);
	case PD_SF_FBCACHE:
		return pd_sf_float(v, f->name, 0, 1, &p->fbcache_threshold, field);
	case PD_SF_FORMAT:
		if (!cJSON_IsString(v) || strcmp(v->valuestring, "b64_json") != 0)
			return pd_sf_fail(field, f->name, "%s must be \"b64_json\"%s (pdit keeps no files to link to)", "");
		return 0;
	case PD_SF_FRAMES:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_FRAMES, &d, field))
			return -1;
		p->frames = (int)d;
		p->video = 1;
		return 0;
	case PD_SF_FPS:
		if (pd_sf_int(v, f->name, 1, 240, &d, field))
			return -1;
		p->fps = (int)d;
		return 0;
	case PD_SF_VIDEO_FORMAT:
		/* pictures are PNGs (the images APIs' b64_json); a video is H.264
		 * in MP4, as pdit generate -o clip.mp4 writes it, or its frames */
		if (cJSON_IsString(v) && strcmp(v->valuestring, "mp4") == 0)
			*format = 2;
		else if (cJSON_IsString(v) && strcmp(v->valuestring, "png") == 0)
			*format = 1;
		else
			return pd_sf_fail(field, f->name, "%s must be \"png\" (pictures, or a video's frames) or \"mp4\" "
					  "(a video: H.264)%s", "");
		return 0;
	case PD_SF_FLOW_SHIFT:
		/* stable-diffusion.cpp's 0 (or null): the model's */
		return cJSON_IsNull(v) ? 0 : pd_sf_float(v, f->name, 0, 100, &p->flow_shift, field);
	case PD_SF_OBJECT:
		return 0;
	case PD_SF_INIT_IMAGES:
		if (!cJSON_IsArray(v) || !v->child)
			return pd_sf_fail(field, f->name, "%s must be an array of base64 PNGs%s", "");
		if (cJSON_GetArraySize(v) > 1)
			return pd_sf_fail(field, f->name, "%s: one picture a request (got several)%s", "");
		return pd_sf_png(v->child, f->name, &p->init_png, field);
	case PD_SF_MASK:
		return cJSON_IsNull(v) ? 0 : pd_sf_png(v, f->name, &p->mask_png, field);
	case PD_SF_REF_IMAGE:
		return cJSON_IsNull(v) ? 0 : pd_sf_png(v, f->name, &p->ref_png, field);
	case PD_SF_EDIT_IMAGE:
		/* one part, or the SDK's image[] list of one */
		if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 1)
			return pd_sf_fail(field, f->name, "%s: one picture a request (got several)%s", "");
		return pd_sf_png_alpha(cJSON_IsArray(v) ? v->child : v, f->name, &p->init_png, field, &p->init_alpha);
	case PD_SF_STRENGTH:
		return pd_sf_float(v, f->name, 0, 1, &p->strength, field);
	case PD_SF_N_ITER:
		if (pd_sf_int(v, f->name, 1, PD_SERVE_MAX_N, &d, field))
			return -1;
		*n_iter = (int)d;
		return 0;
	case PD_SF_IGNORED:
	case PD_SF_NOTED:
		return 0;
	}
	return 0;
}

/* Each dialect's fields: its own, then those of the dialect it extends. */
static const struct pd_sf_dialect {
	const struct pd_serve_field *own;   /* looked up first */
	const struct pd_serve_field *base;  /* then these, or NULL */
} pd_sf_dialects[] = {
	[PD_API_OPENAI] = { pd_sf_openai, NULL },
	[PD_API_A1111] = { pd_sf_a1111, NULL },
	[PD_API_SDCPP_VIDEO] = { pd_sf_sdcpp_video, NULL },
	[PD_API_A1111_IMG2IMG] = { pd_sf_a1111_img2img, pd_sf_a1111 },
	[PD_API_OPENAI_EDIT] = { pd_sf_openai_edit, NULL },
	[PD_API_JOBS] = { pd_sf_jobs, pd_sf_openai },
};

/* The field of table T that key KEY of object PATH ("" at the top) is. */
static const struct pd_serve_field *pd_sf_find_in(const struct pd_serve_field *t, const char *path, const char *key)
{
	size_t n = strlen(path);

	for (const struct pd_serve_field *f = t; f && f->name; f++)
		if (n ? strncmp(f->name, path, n) == 0 && f->name[n] == '.' && strcmp(f->name + n + 1, key) == 0
		      : !strchr(f->name, '.') && strcmp(f->name, key) == 0)
			return f;
	return NULL;
}

static const struct pd_serve_field *pd_sf_find(const struct pd_sf_dialect *d, const char *path, const char *key)
{
	const struct pd_serve_field *f = pd_sf_find_in(d->own, path, key);

	return f ? f : pd_sf_find_in(d->base, path, key);
}

/* Names NAME in P->ignored (the job's log line). */
static void pd_sf_note(struct pd_serve_params *p, const char *path, const char *name)
{
	size_t used = strlen(p->ignored), len = strlen(path) + strlen(name) + 1;

	if (used + len + 3 < sizeof(p->ignored))
		snprintf(p->ignored + used, sizeof(p->ignored) - used, "%s%s%s%s", used ? ", " : "", path,
			 *path ? "." : "", name);
}

/* Object OBJ (at PATH in the body) into P. An unknown field is refused
 * with STRICT, or UNKNOWN_REFUSED (OpenAI's API answers 400 for an
 * argument it does not have), else named in the log. */
static int pd_sf_object(struct pd_serve_params *p, const struct pd_sf_dialect *table, const char *path,
			const cJSON *obj, int strict, int unknown_refused, int *n_iter, int *format, const char **bad)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, obj) {
		const struct pd_serve_field *f = pd_sf_find(table, path, v->string);

		if (!f) {
			if (!strict && !unknown_refused) {
				pd_sf_note(p, path, v->string);
				continue;
			}
			*bad = v->string;
			return pd_errorf("%s%s%.100s is not a field of this request%s", path, *path ? "." : "", v->string,
					 strict ? " (strict mode)" : "");
		}
		if (f->kind == PD_SF_NOTED && !pd_sf_quiet(f, v)) {
			if (strict) {
				*bad = f->name;
				return pd_errorf("%s: pdit does not honour it (strict mode; without --strict it is ignored "
						 "and logged)", f->name);
			}
			pd_sf_note(p, "", f->name);
		}
		if (f->kind == PD_SF_OBJECT) {
			if (cJSON_IsNull(v))
				continue;
			if (!cJSON_IsObject(v)) {
				*bad = f->name;
				return pd_errorf("%s must be an object", f->name);
			}
			if (pd_sf_object(p, table, f->name, v, strict, unknown_refused, n_iter, format, bad))
				return -1;
			continue;
		}
		if (pd_sf_one(p, f, v, n_iter, format, bad))
			return -1;
	}
	return 0;
}

int pd_serve_params_parse(struct pd_serve_params *p, enum pd_serve_api api, const char *body, size_t len, int strict,
			  char *field, size_t field_len)
{
	const struct pd_sf_dialect *table = &pd_sf_dialects[api];
	int openai = api == PD_API_OPENAI || api == PD_API_OPENAI_EDIT || api == PD_API_JOBS;
	const char *bad = NULL;
	cJSON *root;
	int rc = -1, n_iter = 1, format = 0;

	memset(p, 0, sizeof(*p));
	p->api = api;
	p->n = 1;
	p->seed = 42;
	p->guidance = -1;
	p->true_cfg_scale = -1;
	p->cfg_scale = -1;
	p->video = api == PD_API_SDCPP_VIDEO;
	p->strength = -1;
	p->mask_alpha = api == PD_API_OPENAI_EDIT;
	field[0] = 0;
	root = cJSON_ParseWithLength(body, len);
	if (!root)
		return pd_errorf("the body is not JSON");
	if (!cJSON_IsObject(root)) {
		pd_errorf("the body must be a JSON object");
		goto out;
	}
	if (pd_sf_nul(body, len, field, field_len)) {
		pd_errorf("%s: a string holds \\u0000 (NUL), where it would end; leave it out", field);
		goto out;
	}
	if (pd_sf_object(p, table, "", root, strict, openai, &n_iter, &format, &bad))
		goto out;
	if (format == 2 && !p->video) {
		bad = "output_format";
		pd_errorf("output_format mp4 goes with frames (a video request); pictures are png");
		goto out;
	}
	p->frames_png = p->video && format == 1;
	/* A1111's n_iter batches of batch_size, seeds counting on across them */
	if (n_iter > 1) {
		if ((int64_t)p->n * n_iter > PD_SERVE_MAX_N) {
			bad = "n_iter";
			pd_errorf("n_iter %d x batch_size %d: at most %d pictures a request", n_iter, p->n,
				  PD_SERVE_MAX_N);
			goto out;
		}
		p->n *= n_iter;
	}
	if (!p->prompt) {
		bad = "prompt";
		pd_errorf("prompt is required");
		goto out;
	}
	if (api == PD_API_A1111_IMG2IMG && !p->init_png) {
		bad = "init_images";
		pd_errorf("init_images is required (the picture img2img starts from)");
		goto out;
	}
	if (api == PD_API_OPENAI_EDIT && !p->init_png) {
		bad = "image";
		pd_errorf("image is required (the picture to edit)");
		goto out;
	}
	/* OpenAI's images.edit: without a mask, the picture's own transparent
	 * pixels are what it edits */
	if (api == PD_API_OPENAI_EDIT && !p->mask_png && p->init_alpha && !(p->mask_png = pd_strdup(p->init_png)))
		goto out;
	/* refused here, not when the job runs (an asynchronous job would fail after its 202) */
	if ((p->strength >= 0 || p->mask_png) && !p->init_png) {
		bad = p->mask_png ? "mask" : "strength";
		pd_errorf("%s goes with image (the picture it starts from)", bad);
		goto out;
	}
	if (p->video && p->n > 1) {
		bad = "n";
		pd_errorf("n: a video request makes one video (got %d)", p->n);
		goto out;
	}
	if (p->fps && !p->video) {
		bad = "fps";
		pd_errorf("fps goes with frames (a video request)");
		goto out;
	}
	if (p->video && (int64_t)p->frames * p->width * p->height > PD_SERVE_MAX_VIDEO_PIXELS) {
		bad = api == PD_API_SDCPP_VIDEO ? "video_frames" : "frames";
		pd_errorf("%s: %d frames of %dx%d are more than %d pixels a video", bad, p->frames, p->width,
			  p->height, PD_SERVE_MAX_VIDEO_PIXELS);
		goto out;
	}
	if ((int64_t)p->n * p->width * p->height > PD_SERVE_MAX_PIXELS) {
		bad = openai ? "n" : "batch_size";
		pd_errorf("%s: %d pictures of %dx%d are more than %d pixels a request", bad, p->n, p->width, p->height,
			  PD_SERVE_MAX_PIXELS);
		goto out;
	}
	rc = 0;
out:
	if (bad)
		snprintf(field, field_len, "%s", bad);
	cJSON_Delete(root);
	if (rc)
		pd_serve_params_free(p);
	return rc;
}

/* The value of parameter KEY (case-insensitive, perhaps quoted) of a
 * header value H ("multipart/form-data; boundary=x", "form-data;
 * name=\"image\""), into OUT; 0, or -1 when absent or too long. */
static int pd_mp_param(const char *h, const char *end, const char *key, char *out, size_t cap)
{
	size_t k = strlen(key);
	int quoted = 0;

	for (const char *p = h; p + k < end; p++) {
		size_t n = 0;

		/* a quoted value (a file's name) holds no parameters */
		if (*p == '"')
			quoted = !quoted;
		if (quoted || strncasecmp(p, key, k) || p[k] != '=' || (p > h && p[-1] != ';' && p[-1] != ' '))
			continue;
		p += k + 1;
		if (*p == '"') {
			for (p++; p < end && *p != '"' && n + 1 < cap; p++)
				out[n++] = *p;
			if (p >= end || *p != '"')
				return -1;
		} else {
			for (; p < end && *p != ';' && *p != ' ' && *p != '\r' && n + 1 < cap; p++)
				out[n++] = *p;
		}
		out[n] = 0;
		return n ? 0 : -1;
	}
	return -1;
}

/* Fields whose parts stay text, whatever they read as. */
static int pd_mp_text(const char *name)
{
	static const char *const text[] = { "prompt", "negative_prompt", "size", "response_format", "model", "user",
					    "quality", "background", "output_format", "moderation", "input_fidelity",
					    "style", NULL };

	for (int i = 0; text[i]; i++)
		if (!strcmp(name, text[i]))
			return 1;
	return 0;
}

char *pd_serve_multipart_json(const char *content_type, const char *body, size_t len, char *field, size_t field_len)
{
	char boundary[128], delim[140], name[128] = "";
	int file;
	const char *p = body, *end = body + len;
	cJSON *o = NULL;
	char *text = NULL;
	size_t dl;

	field[0] = 0;
	if (!content_type || strncasecmp(content_type, "multipart/form-data", 19) ||
	    pd_mp_param(content_type, content_type + strlen(content_type), "boundary", boundary, sizeof(boundary))) {
		pd_errorf("Content-Type must be multipart/form-data with a boundary (as images.edit sends it)");
		return NULL;
	}
	/* "\r\n--B": a part's bytes end only where a line starts the delimiter */
	dl = (size_t)snprintf(delim, sizeof(delim), "\r\n--%s", boundary);
	o = cJSON_CreateObject();
	if (!o)
		return NULL;
	/* the preamble, then "--B" CRLF part ... CRLF "--B" ... "--B--"; the
	 * first delimiter may open the body (no CRLF before it) */
	if ((size_t)(end - p) < dl - 2 || memcmp(p, delim + 2, dl - 2)) {
		p = memmem(p, (size_t)(end - p), delim, dl);
		p = p ? p + 2 : NULL;
	}
	/* P: at a delimiter's "--B" */
	while (p) {
		const char *hdr, *hend, *data, *next;
		cJSON *v;

		p += dl - 2;
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			break;          /* the closing delimiter */
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
			goto bad;
		hdr = p + 2;
		hend = memmem(hdr, (size_t)(end - hdr), "\r\n\r\n", 4);
		if (!hend)
			goto bad;
		data = hend + 4;
		next = memmem(data, (size_t)(end - data), delim, dl);
		if (!next)
			goto bad;
		next += 2;      /* at "--B"; the part's bytes end before its CRLF */
		/* Content-Disposition: form-data; name="image"; filename="x.png" */
		{
			const char *cd = NULL;

			for (const char *l = hdr; l < hend; l++)
				if ((l == hdr || l[-1] == '\n') && !strncasecmp(l, "Content-Disposition:", 20))
					cd = l + 20;
			if (!cd) {
				pd_errorf("a part without Content-Disposition");
				goto fail;
			}
			{
				const char *cde = memchr(cd, '\r', (size_t)(hend - cd + 2));

				if (!cde)
					cde = hend;
				if (pd_mp_param(cd, cde, "name", name, sizeof(name))) {
					pd_errorf("a part without a name");
					goto fail;
				}
				/* a file part, whatever its name's length */
				file = memmem(cd, (size_t)(cde - cd), "filename=", 9) != NULL;
			}
		}
		/* the SDKs' list form: image[] */
		if (strlen(name) > 2 && !strcmp(name + strlen(name) - 2, "[]"))
			name[strlen(name) - 2] = 0;
		if (file || !strcmp(name, "image") || !strcmp(name, "mask")) {
			char *b64 = pd_base64((const uint8_t *)data, (size_t)(next - 2 - data));

			v = b64 ? cJSON_CreateString(b64) : NULL;
			free(b64);
		} else {
			char *s = pd_malloc((size_t)(next - 2 - data) + 1, "a form field"), *e;
			double d;

			if (!s)
				goto fail;
			/* a C string would end there, and the rest of a prompt with it */
			if (memchr(data, 0, (size_t)(next - 2 - data))) {
				pd_errorf("%s: the form field holds a NUL byte, where it would end; leave it out", name);
				free(s);
				goto fail;
			}
			memcpy(s, data, (size_t)(next - 2 - data));
			s[next - 2 - data] = 0;
			d = strtod(s, &e);
			if (!pd_mp_text(name) && *s && !*e && isfinite(d))
				v = cJSON_CreateNumber(d);
			else if (!pd_mp_text(name) && (!strcmp(s, "true") || !strcmp(s, "false")))
				v = cJSON_CreateBool(!strcmp(s, "true"));
			else
				v = cJSON_CreateString(s);
			free(s);
		}
		if (!v)
			goto fail;
		if (cJSON_GetObjectItemCaseSensitive(o, name)) {
			/* a repeated part: several pictures, which the field refuses */
			cJSON *prev = cJSON_DetachItemFromObjectCaseSensitive(o, name), *arr = cJSON_CreateArray();

			if (!arr) {
				cJSON_Delete(prev);
				cJSON_Delete(v);
				goto fail;
			}
			if (cJSON_IsArray(prev)) {
				cJSON_Delete(arr);
				arr = prev;
			} else {
				cJSON_AddItemToArray(arr, prev);
			}
			cJSON_AddItemToArray(arr, v);
			v = arr;
		}
		cJSON_AddItemToObject(o, name, v);
		p = next;
	}
	if (!p)
		goto bad;
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
bad:
	pd_errorf("the body is not multipart/form-data of its boundary (a part cut short?)");
fail:
	if (name[0] && field_len)
		snprintf(field, field_len, "%s", name);
	cJSON_Delete(o);
	return NULL;
}

void pd_serve_params_free(struct pd_serve_params *p)
{
	free(p->prompt);
	free(p->negative);
	free(p->init_png);
	free(p->mask_png);
	free(p->ref_png);
	p->prompt = p->negative = p->init_png = p->mask_png = p->ref_png = NULL;
}

char *pd_serve_params_encode(const struct pd_serve_params *p)
{
	cJSON *o = cJSON_CreateObject();
	char seed[32], *text = NULL;

	if (!o)
		return NULL;
	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)p->seed);
	/* floats as their exact decimal so every rank reads the same bits */
	if (cJSON_AddNumberToObject(o, "api", p->api) && cJSON_AddStringToObject(o, "prompt", p->prompt) &&
	    (!p->negative || cJSON_AddStringToObject(o, "negative", p->negative)) &&
	    cJSON_AddNumberToObject(o, "width", p->width) && cJSON_AddNumberToObject(o, "height", p->height) &&
	    cJSON_AddNumberToObject(o, "steps", p->steps) && cJSON_AddNumberToObject(o, "n", p->n) &&
	    cJSON_AddStringToObject(o, "seed", seed) && cJSON_AddNumberToObject(o, "guidance", p->guidance) &&
	    cJSON_AddNumberToObject(o, "true_cfg_scale", p->true_cfg_scale) &&
	    cJSON_AddNumberToObject(o, "cfg_scale", p->cfg_scale) &&
	    cJSON_AddNumberToObject(o, "fbcache_threshold", p->fbcache_threshold) &&
	    cJSON_AddNumberToObject(o, "flow_shift", p->flow_shift) && cJSON_AddNumberToObject(o, "video", p->video) &&
	    cJSON_AddNumberToObject(o, "frames", p->frames) && cJSON_AddNumberToObject(o, "fps", p->fps) &&
	    cJSON_AddNumberToObject(o, "frames_png", p->frames_png) &&
	    cJSON_AddNumberToObject(o, "strength", p->strength) &&
	    cJSON_AddNumberToObject(o, "mask_alpha", p->mask_alpha) &&
	    (!p->init_png || cJSON_AddStringToObject(o, "init_png", p->init_png)) &&
	    (!p->mask_png || cJSON_AddStringToObject(o, "mask_png", p->mask_png)) &&
	    (!p->ref_png || cJSON_AddStringToObject(o, "ref_png", p->ref_png)))
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

int pd_serve_params_decode(struct pd_serve_params *p, const char *text)
{
	cJSON *o = cJSON_Parse(text), *v;
	const char *seed;

	memset(p, 0, sizeof(*p));
	if (!o)
		return pd_errorf("a job's parameters are not JSON");
#define NUM(key) ((v = cJSON_GetObjectItemCaseSensitive(o, key)) && cJSON_IsNumber(v) ? v->valuedouble : 0)
	p->api = (enum pd_serve_api)(int)NUM("api");
	p->width = (int)NUM("width");
	p->height = (int)NUM("height");
	p->steps = (int)NUM("steps");
	p->n = (int)NUM("n");
	p->guidance = (float)NUM("guidance");
	p->true_cfg_scale = (float)NUM("true_cfg_scale");
	p->cfg_scale = (float)NUM("cfg_scale");
	p->fbcache_threshold = (float)NUM("fbcache_threshold");
	p->flow_shift = (float)NUM("flow_shift");
	p->video = (int)NUM("video");
	p->frames = (int)NUM("frames");
	p->fps = (int)NUM("fps");
	p->frames_png = (int)NUM("frames_png");
	p->mask_alpha = (int)NUM("mask_alpha");
	p->strength = (v = cJSON_GetObjectItemCaseSensitive(o, "strength")) && cJSON_IsNumber(v) ? (float)v->valuedouble
												     : -1;
#undef NUM
	seed = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "seed"));
	p->seed = seed ? strtoull(seed, NULL, 10) : 0;
	v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
	p->prompt = pd_strdup(cJSON_IsString(v) ? v->valuestring : "");
	v = cJSON_GetObjectItemCaseSensitive(o, "negative");
	if (cJSON_IsString(v))
		p->negative = pd_strdup(v->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(o, "init_png");
	if (cJSON_IsString(v))
		p->init_png = pd_strdup(v->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(o, "mask_png");
	if (cJSON_IsString(v))
		p->mask_png = pd_strdup(v->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(o, "ref_png");
	if (cJSON_IsString(v))
		p->ref_png = pd_strdup(v->valuestring);
	cJSON_Delete(o);
	if (!p->prompt) {
		pd_serve_params_free(p);
		return -1;
	}
	return 0;
}

char *pd_base64(const uint8_t *data, size_t n)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *out = pd_malloc((n + 2) / 3 * 4 + 1, "base64");
	size_t i, k = 0;

	if (!out)
		return NULL;
	for (i = 0; i + 2 < n; i += 3) {
		uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];

		out[k++] = abc[v >> 18];
		out[k++] = abc[(v >> 12) & 63];
		out[k++] = abc[(v >> 6) & 63];
		out[k++] = abc[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0);

		out[k++] = abc[v >> 18];
		out[k++] = abc[(v >> 12) & 63];
		out[k++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
		out[k++] = '=';
	}
	out[k] = 0;
	return out;
}

int pd_unbase64(const char *text, uint8_t **out, size_t *len)
{
	size_t n = strlen(text), k = 0;
	uint32_t acc = 0;
	int bits = 0, pad = 0;
	uint8_t *buf = pd_malloc(n / 4 * 3 + 4, "base64");

	*out = NULL;
	*len = 0;
	if (!buf)
		return -1;
	for (const char *c = text; *c; c++) {
		int v;

		if (*c == ' ' || *c == '\n' || *c == '\r' || *c == '\t')
			continue;
		if (*c == '=') {
			pad++;
			continue;
		}
		if (pad)
			break;          /* data after the padding */
		v = *c >= 'A' && *c <= 'Z' ? *c - 'A' : *c >= 'a' && *c <= 'z' ? *c - 'a' + 26
		  : *c >= '0' && *c <= '9' ? *c - '0' + 52 : *c == '+' ? 62 : *c == '/' ? 63 : -1;
		if (v < 0) {
			free(buf);
			return -1;
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[k++] = (uint8_t)(acc >> bits);
		}
	}
	if (pad > 2 || (pad && text[strlen(text) - 1] != '=')) {
		free(buf);
		return -1;
	}
	*out = buf;
	*len = k;
	return 0;
}

char *pd_serve_answer(const struct pd_serve_params *p, int n, uint8_t *const *pngs, const size_t *lens,
		      const char *info)
{
	cJSON *o = cJSON_CreateObject(), *list;
	char *text = NULL;
	int ok = o != NULL;

	if (!ok)
		return NULL;
	if (p->api == PD_API_OPENAI || p->api == PD_API_OPENAI_EDIT || p->api == PD_API_JOBS) {
		ok = cJSON_AddNumberToObject(o, "created", (double)time(NULL)) != NULL;
		list = cJSON_AddArrayToObject(o, "data");
	} else {
		list = cJSON_AddArrayToObject(o, "images");
	}
	ok &= list != NULL;
	for (int i = 0; ok && i < n; i++) {
		char *b64 = pd_base64(pngs[i], lens[i]);
		cJSON *item = NULL;

		if (!b64) {
			ok = 0;
			break;
		}
		if (p->api == PD_API_OPENAI || p->api == PD_API_OPENAI_EDIT || p->api == PD_API_JOBS) {
			item = cJSON_CreateObject();
			ok = item && cJSON_AddStringToObject(item, "b64_json", b64) &&
			     cJSON_AddStringToObject(item, "revised_prompt", p->prompt);
		} else {
			item = cJSON_CreateString(b64);
			ok = item != NULL;
		}
		free(b64);
		if (item)
			cJSON_AddItemToArray(list, item);
	}
	if (ok && p->api == PD_API_A1111) {
		/* the parameters as A1111 echoes them, and the PNGs' text as "info" */
		cJSON *par = cJSON_AddObjectToObject(o, "parameters");
		char seed[32];

		snprintf(seed, sizeof(seed), "%llu", (unsigned long long)p->seed);
		ok = par && cJSON_AddStringToObject(par, "prompt", p->prompt) &&
		     cJSON_AddStringToObject(par, "negative_prompt", p->negative ? p->negative : "") &&
		     cJSON_AddNumberToObject(par, "width", p->width) && cJSON_AddNumberToObject(par, "height", p->height) &&
		     cJSON_AddNumberToObject(par, "steps", p->steps) &&
		     cJSON_AddNumberToObject(par, "batch_size", p->n) &&
		     cJSON_AddNumberToObject(par, "seed", (double)p->seed) &&
		     cJSON_AddStringToObject(o, "info", info ? info : "");
	}
	if (ok)
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

char *pd_serve_video_answer(const struct pd_serve_params *p, const uint8_t *mp4, size_t len, int frames, int width,
			    int height, const char *info)
{
	cJSON *o = cJSON_CreateObject();
	char *b64 = pd_base64(mp4, len), *text = NULL;

	if (o && b64 && cJSON_AddStringToObject(o, "output_format", "mp4") &&
	    cJSON_AddStringToObject(o, "mime_type", "video/mp4") &&
	    cJSON_AddNumberToObject(o, "fps", p->fps ? p->fps : PD_SERVE_FPS) &&
	    cJSON_AddNumberToObject(o, "frame_count", frames) && cJSON_AddNumberToObject(o, "width", width) &&
	    cJSON_AddNumberToObject(o, "height", height) && cJSON_AddStringToObject(o, "b64_json", b64) &&
	    cJSON_AddStringToObject(o, "info", info ? info : ""))
		text = cJSON_PrintUnformatted(o);
	free(b64);
	cJSON_Delete(o);
	return text;
}

char *pd_serve_error_json(const char *message, const char *type, const char *param)
{
	cJSON *o = cJSON_CreateObject(), *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
	char *text = NULL;

	if (e && cJSON_AddStringToObject(e, "message", message) && cJSON_AddStringToObject(e, "type", type) &&
	    (param ? cJSON_AddStringToObject(e, "param", param) != NULL : cJSON_AddNullToObject(e, "param") != NULL))
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

/* The command line's flags in the engine's messages and the fields of each
 * dialect that set the same thing (longer flags first: "-n/--negative-prompt"
 * before "-n"). */
static const struct {
	const char *flag;
	const char *field[6];           /* by enum pd_serve_api */
} pd_serve_flag_fields[] = {
	{ "-H/--height and -W/--width", { "size", "width and height", "width and height", "width and height", "size", "size" } },
	{ "-n/--negative-prompt", { "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt" } },
	{ "-p/--prompt", { "prompt", "prompt", "prompt", "prompt", "prompt", "prompt" } },
	{ "-n \"...\"", { "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt", "negative_prompt" } },
	{ "--true-cfg-scale", { "true_cfg_scale", "true_cfg_scale", "sample_params.guidance.txt_cfg", "true_cfg_scale", "true_cfg_scale", "true_cfg_scale" } },
	{ "--fbcache-threshold", { "fbcache_threshold", "fbcache_threshold", "fbcache_threshold", "fbcache_threshold", "fbcache_threshold", "fbcache_threshold" } },
	{ "--guidance", { "guidance", "guidance", "sample_params.guidance.txt_cfg", "guidance", "guidance", "guidance" } },
	{ "--steps", { "steps", "steps", "sample_params.sample_steps", "steps", "steps", "steps" } },
	{ "--batch", { "n", "batch_size", "n", "batch_size", "n", "n" } },
	{ "--frames", { "frames", "frames", "video_frames", "frames", "frames", "frames" } },
	{ "--fps", { "fps", "fps", "fps", "fps", "fps", "fps" } },
	{ "--flow-shift", { "flow_shift", "flow_shift", "sample_params.flow_shift", "flow_shift", "flow_shift", "flow_shift" } },
	{ "-i/--init-img", { "image", "init_images", "init_images", "init_images", "image", "image" } },
	{ "-r/--ref-image", { "ref_image", "ref_image", "ref_image", "ref_image", "ref_image", "ref_image" } },
	{ "--strength", { "strength", "denoising_strength", "strength", "denoising_strength", "strength", "strength" } },
	{ "--mask", { "mask", "mask", "mask", "mask", "mask", "mask" } },
};

char *pd_serve_engine_error(enum pd_serve_api api, const char *msg, const char **param)
{
	size_t n = sizeof(pd_serve_flag_fields) / sizeof(pd_serve_flag_fields[0]), k = 0;
	/* no field is more than four times as long as its flag */
	char *out = pd_malloc(strlen(msg) * 4 + 1, "an error message");

	*param = NULL;
	if (!out)
		return NULL;
	while (*msg) {
		size_t i, len = 0;

		for (i = 0; i < n; i++) {
			len = strlen(pd_serve_flag_fields[i].flag);
			/* a flag is one where a word begins and ends */
			if (strncmp(msg, pd_serve_flag_fields[i].flag, len) == 0 &&
			    (k == 0 || out[k - 1] == ' ' || out[k - 1] == '(') &&
			    !(msg[len] >= 'a' && msg[len] <= 'z') && msg[len] != '-')
				break;
		}
		if (i == n) {
			out[k++] = *msg++;
			continue;
		}
		{
			const char *field = pd_serve_flag_fields[i].field[api];

			if (!*param)
				/* "width and height" is no one field: its first is */
				*param = strcmp(field, "width and height") == 0 ? "width" : field;
			memcpy(out + k, field, strlen(field));
			k += strlen(field);
			msg += len;
		}
	}
	out[k] = 0;
	return out;
}
