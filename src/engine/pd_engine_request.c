/*
 * pd_engine_request.c - a request checked against the engine and shaped:
 * the family's defaults for what it leaves out, its embeddings read from a
 * file or its prompts encoded (one rank per data-parallel group), its
 * initial latents, and the same inputs on every rank.
 */
#include "pd_engine.h"
#include "pd_par_data.h"
#include "pd_png.h"
#include "pd_resize.h"
#include "pd_rng.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------- */
/* A request's inputs                                                      */
/* ----------------------------------------------------------------------- */

/* init_latents: latents.init [B, L, 4C] (packed), or latents.init_unpacked
 * [B, C, h, w] as the golden files hold them. */
static int pd_engine_read_init(struct pd_engine *e, const char *path)
{
	const struct pd_latent_shape *ls = &e->ls;
	int64_t n = e->e.batch * ls->tokens * ls->packed_channels, per = n / e->e.batch;
	const struct pd_st_tensor *t;
	struct pd_st *st;
	float *init, *u = NULL;
	int rc = -1;

	if (pd_st_open(&st, path))
		return -1;
	init = pd_malloc((size_t)n * sizeof(float), "initial latents");
	if (!init)
		goto out;
	/* packed [B, L, C]; unpacked [B, C, (F,) h, w] under either name (a
	 * video pipeline's latents are unpacked, as Wan's) */
	if ((t = pd_st_get(st, "latents.init")) && t->numel == n && t->ndim == 3) {
		rc = pd_st_read_f32(t, 0, (size_t)n, init);
	} else if (((t = pd_st_get(st, "latents.init_unpacked")) || (t = pd_st_get(st, "latents.init"))) &&
		   t->numel == n && t->ndim >= 4) {
		u = pd_malloc((size_t)n * sizeof(float), "initial latents");
		rc = !u || pd_st_read_f32(t, 0, (size_t)n, u) ? -1 : 0;
		for (int64_t b = 0; !rc && b < e->e.batch; b++)
			e->fam->pack(ls, u + b * per, init + b * per);
	} else {
		pd_errorf("%s: needs latents.init [%lld, %lld, %d] or latents.init_unpacked [%lld, %d, %d, %d]", path,
			  (long long)e->e.batch, (long long)ls->tokens, ls->packed_channels, (long long)e->e.batch,
			  ls->channels, ls->h, ls->w);
	}
out:
	free(u);
	pd_st_close(st);
	if (rc)
		free(init);
	else
		e->init = init;
	return rc;
}

/* PIL's "L" of an RGB pixel: ITU-R 601-2 luma in 16-bit fixed point. */
static uint8_t pd_engine_luma(const uint8_t *px)
{
	return (uint8_t)(((uint32_t)px[0] * 19595 + (uint32_t)px[1] * 38470 + (uint32_t)px[2] * 7471 + 0x8000) >> 16);
}

/* *RGB [h, w, 3] resized to [oh, ow, 3] as diffusers' image processors
 * resize (PIL's Lanczos); a MASK first made gray as their mask processors
 * do (PIL's "L"), resized as one channel, and kept gray in RGB. */
static int pd_engine_resize_rgb(uint8_t **rgb, int w, int h, int ow, int oh, int mask)
{
	size_t n = (size_t)w * h, on = (size_t)ow * oh;
	uint8_t *gray = NULL, *out = pd_malloc(on * 3, "the resized picture");
	int rc = -1;

	if (!out)
		return -1;
	if (mask) {
		gray = pd_malloc(n + on, "the resized mask");
		if (!gray)
			goto out;
		for (size_t i = 0; i < n; i++)
			gray[i] = pd_engine_luma(*rgb + 3 * i);
		if (pd_resize_lanczos(gray, w, h, 1, gray + n, ow, oh))
			goto out;
		for (size_t i = 0; i < on; i++)
			out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = gray[n + i];
	} else if (pd_resize_lanczos(*rgb, w, h, 3, out, ow, oh)) {
		goto out;
	}
	free(*rgb);
	*rgb = out;
	out = NULL;
	rc = 0;
out:
	free(out);
	free(gray);
	return rc;
}

/* img2img's picture, read before the request's size is settled: the
 * request's size when it gives one, else the picture's (rounded down to a
 * multiple of 16); the picture resized to it. */
static int pd_engine_read_picture(struct pd_engine *e, const char *path, struct pd_request *r)
{
	const char *mask = r->mask_image ? r->mask_image : "the mask";

	if (r->init_latents)
		return pd_errorf("-i/--init-img and --init-latents both say where to start: give one");
	if (!e->fam->vae->encode)
		return pd_errorf("-i/--init-img: the %s family takes no picture in yet", e->fam->name);
	if (r->frames != PD_DEFAULT && r->frames != 1)
		return pd_errorf("-i/--init-img starts a picture, not a video of %d frames", r->frames);
	if (r->init_image ? pd_png_read(path, &e->init_rgb, &e->init_w, &e->init_h) && pd_error_prefix("-i/--init-img")
			  : pd_png_decode(r->init_png, r->init_png_len, path, &e->init_rgb, &e->init_w, &e->init_h))
		return -1;
	if (r->mask_image || r->mask_png) {
		int mw, mh;

		if (r->mask_image ? pd_png_read(r->mask_image, &e->mask_rgb, &mw, &mh) && pd_error_prefix("--mask")
		    : r->mask_alpha ? pd_png_decode_alpha_mask(r->mask_png, r->mask_png_len, mask, &e->mask_rgb, &mw, &mh)
				    : pd_png_decode(r->mask_png, r->mask_png_len, mask, &e->mask_rgb, &mw, &mh))
			return -1;
		if (mw != e->init_w || mh != e->init_h)
			return pd_errorf("--mask%s%s is %dx%d, the picture %dx%d: give a mask of the picture's size",
					 r->mask_image ? " " : ": ", mask, mw, mh, e->init_w, e->init_h);
	}
	/* the request's size, or the picture's rounded down to a multiple of
	 * 16 (VaeImageProcessor.get_default_height_width); the picture (and
	 * the mask) resized to it as VaeImageProcessor.resize does */
	r->width = r->width != PD_DEFAULT ? r->width : e->init_w - e->init_w % 16;
	r->height = r->height != PD_DEFAULT ? r->height : e->init_h - e->init_h % 16;
	r->frames = 1;
	if (r->width < 16 || r->height < 16)
		return pd_errorf("-i/--init-img %s: %dx%d is smaller than 16x16", path, e->init_w, e->init_h);
	if (r->width % 16 || r->height % 16 || r->width > PD_MAX_SIDE || r->height > PD_MAX_SIDE)
		return 0;       /* refused with the size's own message */
	if (r->width != e->init_w || r->height != e->init_h) {
		if (pd_engine_resize_rgb(&e->init_rgb, e->init_w, e->init_h, r->width, r->height, 0) ||
		    (e->mask_rgb && pd_engine_resize_rgb(&e->mask_rgb, e->init_w, e->init_h, r->width, r->height, 1)))
			return -1;
		pd_log(2, "pdit: -i/--init-img %s: %dx%d resized to %dx%d (Lanczos, as PIL)\n", path, e->init_w,
		       e->init_h, r->width, r->height);
		e->init_w = r->width;
		e->init_h = r->height;
	}
	return 0;
}

/* img2img's schedule (FluxImg2ImgPipeline.get_timesteps): the steps
 * STRENGTH leaves run, from the step it starts at. */
static int pd_engine_picture_schedule(struct pd_engine *e, double strength)
{
	int N = e->p.steps, first;
	double init_t;

	if (!(strength > 0 && strength <= 1))
		return pd_errorf("--strength must be above 0 and at most 1 (got %g)", strength);
	/* Python: min(N * strength, N), then int(max(N - that, 0)) */
	init_t = fmin((double)N * strength, (double)N);
	first = (int)fmax((double)N - init_t, 0.0);
	if (first >= N)
		return pd_errorf("--strength %g of %d steps runs none: give a larger strength or more steps", strength, N);
	if (!e->mp.vae)
		return pd_errorf("-i/--init-img needs the VAE to encode the picture: give --vae DIR");
	e->p.first_step = first;
	e->strength = (float)strength;
	return 0;
}

int pd_engine_ref_picture(struct pd_engine *e)
{
	const struct pd_vae_kind *k = e->fam->vae;
	struct pd_latent_shape rs;
	int A = e->info.n_axes;
	float *moments = NULL, *lat = NULL;
	int64_t nl;
	int rc = -1;

	if ((!e->vae && k->load(&e->vae, e->mp.vae, e->be)) ||
	    e->fam->latent_shape(&rs, &e->info, 1, e->ref_h, e->ref_w) || pd_engine_vae_encode_setup(e, (int)rs.h))
		return -1;
	/* PipeFusion cuts the sequence into bands of whole rows of the
	 * picture's width: the reference's tokens must be whole rows too */
	if (e->degree[PD_AXIS_PP] > 1 && rs.tokens % (e->ls.w / 2))
		return pd_errorf("-r/--ref-image: PipeFusion splits whole rows of %d tokens, and the %dx%d reference's %lld "
				 "tokens are not: give a reference whose width is the picture's (%d) or another mesh",
				 e->ls.w / 2, e->ref_w, e->ref_h, (long long)rs.tokens, e->p.width);
	nl = pd_latent_numel(&rs);
	moments = pd_malloc((size_t)(2 * nl) * sizeof(float), "the reference's latents");
	lat = pd_malloc((size_t)nl * sizeof(float), "the reference's latents");
	e->ref = pd_malloc((size_t)(rs.tokens * rs.packed_channels) * sizeof(float), "the reference's tokens");
	e->ref_ids = pd_malloc((size_t)(rs.tokens * A) * sizeof(float), "the reference's ids");
	if (!moments || !lat || !e->ref || !e->ref_ids || k->encode(e->vae, e->ref_rgb, NULL, e->ref_h, e->ref_w, moments))
		goto out;
	/* FluxKontextPipeline: the mode (sample_mode="argmax"), no draw */
	k->posterior(e->vae, moments, (size_t)nl, NULL, lat);
	e->fam->pack(&rs, lat, e->ref);
	/* its own grid, the first axis 1 (image_ids[..., 0] = 1) */
	e->fam->image_ids(&rs, A, e->ref_ids);
	for (int64_t t = 0; t < rs.tokens; t++)
		e->ref_ids[t * A] = 1.0f;
	e->ref_len = rs.tokens;
	e->p.ref = e->ref;
	e->p.ref_ids = e->ref_ids;
	e->p.ref_len = rs.tokens;
	rc = 0;
out:
	free(moments);
	free(lat);
	return rc;
}

/* A mask's pixel as diffusers' mask processors read it: PIL's grayscale,
 * / 255, binarized at 0.5. */
static float pd_engine_mask_bit(const uint8_t *px)
{
	return (float)pd_engine_luma(px) / 255.0f < 0.5f ? 0.0f : 1.0f;
}

/* FLUX.1 Fill's mask as FluxFillPipeline.prepare_mask_latents folds it:
 * [H, W] viewed [h, 8, w, 8], permuted to [8, 8, h, w]: 64 channels a
 * latent position (dy * 8 + dx), then packed as latents of 64 channels
 * into OUT [L, 256]. */
static int pd_engine_fill_mask(struct pd_engine *e, int f, float *out)
{
	struct pd_latent_shape m = e->ls;
	float *u = pd_malloc((size_t)f * f * m.h * m.w * sizeof(float), "the folded mask");

	if (!u)
		return -1;
	m.channels = f * f;
	for (int dy = 0; dy < f; dy++)
		for (int dx = 0; dx < f; dx++)
			for (int y = 0; y < m.h; y++)
				for (int x = 0; x < m.w; x++)
					u[(((int64_t)dy * f + dx) * m.h + y) * m.w + x] = pd_engine_mask_bit(
						e->mask_rgb + ((size_t)(y * f + dy) * e->init_w + (size_t)(x * f + dx)) * 3);
	e->fam->pack(&m, u, out);
	free(u);
	return 0;
}

int pd_engine_init_picture(struct pd_engine *e)
{
	const struct pd_vae_kind *k = e->fam->vae;
	struct pd_latent_shape *ls = &e->ls;
	struct pd_scheduler s = e->sched;
	int N = e->p.steps, first = e->p.first_step;
	int64_t per = ls->tokens * ls->packed_channels, nl = pd_latent_numel(ls), B = e->e.batch;
	int64_t K = ls->cond_channels, L = ls->tokens, C = ls->packed_channels;
	float *moments = NULL, *eps = NULL, *noise = NULL, *lat = NULL, *init = NULL, *fill = NULL, *part = NULL, sigma;
	uint8_t *masked = NULL;
	int rc = -1;

	if ((!e->vae && k->load(&e->vae, e->mp.vae, e->be)) || pd_engine_vae_encode_setup(e, (int)ls->h))
		return -1;
	if (k->channels(e->vae) != ls->channels)
		return pd_errorf("%s: the VAE's %d latent channels are not the transformer's %d", e->mp.vae,
				 k->channels(e->vae), ls->channels);
	/* the first step's sigma, of the request's schedule */
	s.sigmas_in = s.sigmas = s.timesteps = NULL;
	if (pd_scheduler_set(&s, N, ls->tokens))
		return -1;
	sigma = s.sigmas[first];
	pd_scheduler_free(&s);
	moments = pd_malloc((size_t)(2 * nl) * sizeof(float), "the picture's latents");
	eps = pd_malloc((size_t)nl * sizeof(float), "the picture's latents");
	noise = pd_malloc((size_t)nl * sizeof(float), "noise");
	lat = pd_malloc((size_t)nl * sizeof(float), "the picture's latents");
	init = pd_malloc((size_t)(B * per) * sizeof(float), "initial latents");
	if (!moments || !eps || !noise || !lat || !init ||
	    k->encode(e->vae, e->init_rgb, NULL, e->init_h, e->init_w, moments))
		goto out;
	if (K > 0) {
		/* FLUX.1 Fill: the masked picture's moments, the folded mask */
		int f = k->scale(e->vae);

		masked = pd_malloc((size_t)e->init_h * e->init_w, "the mask");
		fill = pd_malloc((size_t)(2 * nl) * sizeof(float), "the masked picture's latents");
		part = pd_malloc((size_t)(L * (K - C) + per) * sizeof(float), "the conditioning");
		e->cond = pd_malloc((size_t)(B * L * K) * sizeof(float), "the conditioning");
		if (!masked || !fill || !part || !e->cond)
			goto out;
		for (size_t i = 0; i < (size_t)e->init_h * e->init_w; i++)
			masked[i] = (uint8_t)pd_engine_mask_bit(e->mask_rgb + 3 * i);
		if (k->encode(e->vae, e->init_rgb, masked, e->init_h, e->init_w, fill) ||
		    pd_engine_fill_mask(e, f, part + per))
			goto out;
	}
	if (e->mask_rgb && K == 0 &&
	    !(e->inpaint_buf = pd_malloc((size_t)((2 * B + 1) * per) * sizeof(float), "inpainting")))
		goto out;
	for (int64_t b = 0; b < B; b++) {
		struct pd_rng g;

		pd_rng_seed(&g, e->p.seed + (uint64_t)b);
		pd_rng_randn(&g, eps, (size_t)nl);
		k->posterior(e->vae, moments, (size_t)nl, eps, lat);
		pd_rng_randn(&g, noise, (size_t)nl);
		if (e->inpaint_buf) {
			/* the clean picture and the noise, packed, for every step */
			e->fam->pack(ls, lat, e->inpaint_buf + b * per);
			e->fam->pack(ls, noise, e->inpaint_buf + (B + b) * per);
		}
		for (int64_t i = 0; i < nl; i++)
			lat[i] = sigma * noise[i] + (1.0f - sigma) * lat[i];
		e->fam->pack(ls, lat, init + b * per);
		if (K > 0) {
			/* the masked picture's posterior, drawn next from the same
			 * generator; then [its latents | the mask] a token */
			float *dst = e->cond + b * L * K;

			pd_rng_randn(&g, eps, (size_t)nl);
			k->posterior(e->vae, fill, (size_t)nl, eps, lat);
			e->fam->pack(ls, lat, part);
			for (int64_t t = 0; t < L; t++) {
				memcpy(dst + t * K, part + t * C, (size_t)C * sizeof(float));
				memcpy(dst + t * K + C, part + per + t * (K - C), (size_t)(K - C) * sizeof(float));
			}
		}
	}
	if (K > 0)
		e->p.cond = e->cond;
	if (e->inpaint_buf) {
		/* the mask as FluxInpaintPipeline prepares it: PIL's grayscale,
		 * /255, binarized at 0.5, nearest to the latent grid, every latent
		 * channel, packed */
		float *mask = e->inpaint_buf + 2 * B * per;
		int f = k->scale(e->vae);

		for (int c = 0; c < ls->channels; c++)
			for (int y = 0; y < ls->h; y++)
				for (int x = 0; x < ls->w; x++) {
					lat[((int64_t)c * ls->h + y) * ls->w + x] =
						pd_engine_mask_bit(e->mask_rgb + ((size_t)y * f * e->init_w + (size_t)x * f) * 3);
				}
		e->fam->pack(ls, lat, mask);
		e->inpaint.image = e->inpaint_buf;
		e->inpaint.noise = e->inpaint_buf + B * per;
		e->inpaint.mask = mask;
		e->p.inpaint = &e->inpaint;
	}
	e->init = init;
	init = NULL;
	rc = 0;
out:
	free(moments);
	free(eps);
	free(noise);
	free(lat);
	free(init);
	free(fill);
	free(part);
	free(masked);
	return rc;
}

int pd_engine_text_ok(const char *const *prompts, int n, const char *negative)
{
	for (int i = 0; i <= n; i++) {
		const char *t = i < n ? prompts[i] : negative;
		int64_t bad = t ? pd_utf8_bad(t, strlen(t)) : -1;

		/* counted from 1, as the prompts file's columns */
		if (bad >= 0 && i < n && n > 1)
			return pd_errorf("-p/--prompt: prompt %d is not UTF-8 text (byte 0x%02x at byte %lld)", i,
					 (unsigned char)t[bad], (long long)bad + 1);
		if (bad >= 0)
			return pd_errorf("%s: not UTF-8 text (byte 0x%02x at byte %lld)",
					 i < n ? "-p/--prompt" : "-n/--negative-prompt", (unsigned char)t[bad],
					 (long long)bad + 1);
	}
	return 0;
}

int pd_engine_encoders_given(const struct pd_engine *e)
{
	for (int i = 0; i < e->fam->n_encoders && i < PD_MAX_ENCODERS; i++) {
		const struct pd_encoder_spec *x = &e->fam->encoders[i];
		char comp[32], flag[32], tcomp[32], tflag[32];

		if (x->optional)
			continue;
		pd_model_encoder_names(i, comp, flag, (int)sizeof(comp));
		pd_model_tokenizer_names(i, tcomp, tflag, (int)sizeof(tcomp));
		if (!e->mp.encoder[i])
			return pd_errorf("no %s text encoder: give --model DIR (with model_index.json naming %s), %s DIR|FILE%s%s%s, "
					 "or --embeds FILE (prompts pdit encode wrote)",
					 x->kind, comp, flag, x->file ? ", --" : "", x->file ? x->file : "", x->file ? " FILE" : "");
		if (!e->mp.tokenizer[i])
			return pd_errorf("no %s tokenizer: give --model DIR (with model_index.json naming %s) or %s DIR%s%s%s",
					 x->kind, tcomp, tflag, x->tokenizer ? " (" : "", x->tokenizer ? x->tokenizer : "",
					 x->tokenizer ? ")" : "");
	}
	return 0;
}

/* stable-diffusion.cpp's and A1111's <lora:NAME:SCALE> (SCALE 1 when left
 * out) taken out of prompt P, in place: adapter DIR/NAME.safetensors. The
 * first prompt's make e->tags; every other prompt of the run must name the
 * same (one set of adapters a run). */
static int pd_engine_lora_tags(struct pd_engine *e, char *p, int first)
{
	struct pd_lora_spec mine[PD_MAX_LORAS];
	int n = 0, rc = -1;
	char *t;

	while ((t = strstr(p, "<lora:"))) {
		char *end = strchr(t, '>'), *name = t + 6, *colon, *x;
		double scale = 1;

		if (!end) {
			pd_errorf("the prompt's \"%.40s\" has no closing '>' (<lora:NAME:SCALE>)", t);
			goto out;
		}
		*end = 0;
		colon = strrchr(name, ':');
		if (colon) {
			scale = strtod(colon + 1, &x);
			if (x == colon + 1 || *x || !isfinite(scale)) {
				pd_errorf("<lora:%s>: the scale after ':' is not a number", name);
				goto out;
			}
			*colon = 0;
		}
		if (!*name || strchr(name, '/') || name[0] == '.' || strlen(name) > 200) {
			pd_errorf("<lora:%s>: an adapter's name is a file name in the adapters' folder", name);
			goto out;
		}
		if (!e->o.lora_dir) {
			pd_errorf("<lora:%s> in the prompt: give --lora-model-dir DIR, the adapters' folder", name);
			goto out;
		}
		if (n == PD_MAX_LORAS) {
			pd_errorf("the prompt names more than %d adapters", PD_MAX_LORAS);
			goto out;
		}
		mine[n].scale = (float)scale;
		mine[n].path = pd_strfmt("%s/%s%s", e->o.lora_dir, name,
					 strstr(name, ".safetensors") ? "" : ".safetensors");
		if (!mine[n].path)
			goto out;
		if (!pd_file_exists(mine[n++].path)) {
			pd_errorf("<lora:%s>: no adapter of that name (%s.safetensors in the adapters' folder)", name, name);
			goto out;
		}
		memmove(t, end + 1, strlen(end + 1) + 1);
	}
	if (first) {
		memcpy(e->tags, mine, (size_t)n * sizeof(*mine));
		e->n_tags = n;
		return 0;
	}
	rc = n != e->n_tags ? -1 : 0;
	for (int i = 0; i < n && !rc; i++)
		rc = strcmp(mine[i].path, e->tags[i].path) || mine[i].scale != e->tags[i].scale ? -1 : 0;
	if (rc)
		pd_errorf("the prompts of one run name different adapters (<lora:...>): a run has one set");
out:
	for (int i = 0; i < n; i++)
		free((char *)mine[i].path);
	return rc;
}

/* The prompt embeddings: read from a file, or shaped here for prompts and
 * filled by pd_engine_encode. */
static int pd_engine_inputs(struct pd_engine *e, const struct pd_request *rq)
{
	int64_t J, P;
	int sources = (rq->embeds != NULL) + (rq->n_prompts > 0);

	if (sources != 1)
		return pd_errorf(sources ? "give one of -p/--prompt, --prompts FILE and --embeds FILE" :
					   "no prompt: give -p \"a prompt\" (or --prompts FILE, or --embeds FILE)");
	if (rq->negative && rq->embeds)
		return pd_errorf("-n/--negative-prompt goes with -p or --prompts; --embeds files hold their own "
				 "negative_prompt_embeds");
	if (rq->embeds)
		return pd_embeds_load(&e->e, rq->embeds) || pd_embeds_check(&e->e, &e->info, rq->embeds);
	if (rq->max_seq != PD_DEFAULT && (rq->max_seq < 1 || rq->max_seq > 512))
		return pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", rq->max_seq);
	if (rq->n_prompts > PD_MAX_BATCH)
		return pd_errorf("%d prompts; at most %d make one run", rq->n_prompts, PD_MAX_BATCH);
	if (!e->fam->prompt_encoder)
		return pd_errorf("the %s family takes embeddings, not prompts: give --embeds FILE", e->fam->name);
	if (pd_engine_encoders_given(e))
		return -1;
	e->max_seq = rq->max_seq == PD_DEFAULT ? e->fam->default_max_seq(&e->info) : rq->max_seq;
	e->prompts = pd_calloc((size_t)rq->n_prompts, sizeof(char *), "prompts");
	if (!e->prompts)
		return -1;
	for (e->n_prompts = 0; e->n_prompts < rq->n_prompts; e->n_prompts++)
		if (!rq->prompts[e->n_prompts] || !(e->prompts[e->n_prompts] = pd_strdup(rq->prompts[e->n_prompts])))
			return rq->prompts[e->n_prompts] ? -1 : pd_errorf("prompt %d is missing", e->n_prompts);
	if (pd_engine_text_ok((const char *const *)e->prompts, e->n_prompts, rq->negative))
		return -1;
	for (int i = 0; i < e->n_prompts; i++)
		if (pd_engine_lora_tags(e, e->prompts[i], i == 0))
			return -1;
	if (rq->negative && !(e->negative = pd_strdup(rq->negative)))
		return -1;
	/* read from the encoders' configs once: the engine's files do not change */
	if (!e->widths_read && e->fam->prompt_widths(&e->mp, &e->prompt_width, &e->pooled_width))
		return -1;
	e->widths_read = 1;
	J = e->prompt_width;
	P = e->pooled_width;
	if (J != e->info.txt_width || P != e->info.pooled_width)
		return pd_errorf("the text encoders make prompt embeddings of width %lld and pooled ones of %lld, but %s "
				 "expects %d and %d", (long long)J, (long long)P, e->mp.transformer, e->info.txt_width,
				 e->info.pooled_width);
	/* zeros until encoded; shaped now so the mesh can be checked: the
	 * request's text length, or the prompts' own (every rank tokenizes) */
	e->e.batch = e->n_prompts;
	e->e.txt_len = e->e.neg_txt_len = e->max_seq;
	if (e->fam->text_lens) {
		/* each prompt its own length, the batch's rows the longest's */
		int64_t *lens = pd_malloc((size_t)e->n_prompts * sizeof(int64_t), "text lengths");
		int rc = !lens || e->fam->text_lens(&e->mp, e->prompts, e->n_prompts, e->negative, e->max_seq, lens,
						    &e->e.neg_txt_len);

		e->e.txt_len = 0;
		for (int b = 0; !rc && b < e->n_prompts; b++)
			e->e.txt_len = lens[b] > e->e.txt_len ? lens[b] : e->e.txt_len;
		rc = rc || pd_embeds_set_lens(&e->e, lens);
		free(lens);
		if (rc)
			return -1;
	}
	e->e.joint_dim = J;
	e->e.pooled_dim = P;
	e->e.prompt = pd_calloc((size_t)(e->e.batch * e->e.txt_len * J) + 1, sizeof(float), "prompt embeddings");
	e->e.pooled = pd_calloc((size_t)(e->e.batch * P) + 1, sizeof(float), "prompt embeddings");
	if (!e->e.prompt || !e->e.pooled)
		return -1;
	if (e->negative) {
		e->e.neg_prompt = pd_calloc((size_t)(e->e.batch * e->e.neg_txt_len * J) + 1, sizeof(float),
					    "prompt embeddings");
		e->e.neg_pooled = pd_calloc((size_t)(e->e.batch * P) + 1, sizeof(float), "prompt embeddings");
		if (!e->e.neg_prompt || !e->e.neg_pooled)
			return -1;
	}
	return 0;
}

/* The request's state, released before the next one. */
void pd_engine_request_free(struct pd_engine *e)
{
	pd_embeds_free(&e->e);
	for (int i = 0; i < e->n_prompts; i++)
		free(e->prompts[i]);
	free(e->prompts);
	free(e->negative);
	for (int i = 0; i < e->n_tags; i++)
		free((char *)e->tags[i].path);
	e->n_tags = 0;
	free(e->init);
	free(e->init_rgb);
	free(e->mask_rgb);
	free(e->inpaint_buf);
	free(e->cond);
	free(e->ref_rgb);
	free(e->ref);
	free(e->ref_ids);
	e->ref_rgb = NULL;
	e->ref = e->ref_ids = NULL;
	e->ref_len = 0;
	e->p.ref = e->p.ref_ids = NULL;
	e->p.ref_len = 0;
	e->mask_rgb = NULL;
	e->inpaint_buf = NULL;
	e->cond = NULL;
	e->p.cond = NULL;
	memset(&e->inpaint, 0, sizeof(e->inpaint));
	e->p.inpaint = NULL;
	e->prompts = NULL;
	e->n_prompts = 0;
	e->negative = NULL;
	e->init = NULL;
	e->init_rgb = NULL;
	e->strength = 0;
	e->p.first_step = 0;
	e->ready = NULL;
}

/* Encodes this data-parallel group's prompts on its first rank, sends the
 * embeddings to the group's other ranks, and releases the encoders (at
 * open: before any transformer weight is read). FAILED: this rank failed
 * before; every rank goes through the agreement here all the same. */
int pd_engine_encode(struct pd_engine *e, int failed)
{
	struct pd_comm *grp = e->mesh.replica;
	int64_t first, count, J = e->e.joint_dim, P = e->e.pooled_dim, T = e->e.txt_len, Tn = e->e.neg_txt_len;
	int rc = failed;

	double t_enc = pd_now();

	if (!e->prompts)
		return pd_engine_agree(e, rc);
	pd_engine_progress(e, PD_PHASE_ENCODE, t_enc, 0, (int)e->e.batch, 0);
	pd_dp_slice(e->e.batch, e->degree[PD_AXIS_DP], e->mesh.coord[PD_AXIS_DP], &first, &count);
	if (!rc && grp->rank == 0) {
		struct pd_embeds enc;
		double t0 = pd_now();
		char kinds[128];

		/* the progress says how many; this is the detail */
		pd_engine_encoder_kinds(e->fam, kinds, sizeof(kinds));
		pd_log(2, "pdit: encoding %lld of %lld prompts here (%s, %lld tokens)\n", (long long)count,
		       (long long)e->e.batch, kinds, (long long)T);
		/* --batch N repeats the one prompt: encode it once, copy it to
		 * every image of this group */
		int repeat = e->n_prompts < e->e.batch;

		rc = pd_dit_encode(e->fam, &enc, e->o.keep_encoders ? &e->encoders : NULL, &e->mp, e->be, e->prompts,
				   e->n_prompts, e->negative, e->max_seq, repeat ? 0 : first, repeat ? 1 : count, 0);
		/* the encoders made the lengths shaped for (text_lens) */
		for (int64_t b = first; !rc && b < first + count; b++)
			if (enc.txt_len != T || pd_embeds_len(&enc, repeat ? 0 : b) != pd_embeds_len(&e->e, b) ||
			    (e->negative && enc.neg_txt_len != Tn)) {
				rc = pd_errorf("internal error: the text encoders made %lld of %lld rows (negative %lld), "
					       "not %lld of %lld (%lld)", (long long)pd_embeds_len(&enc, repeat ? 0 : b),
					       (long long)enc.txt_len, (long long)enc.neg_txt_len,
					       (long long)pd_embeds_len(&e->e, b), (long long)T, (long long)Tn);
				pd_embeds_free(&enc);
			}
		for (int64_t b = first; !rc && b < first + count; b++) {
			int64_t src = repeat ? 0 : b;

			memcpy(e->e.prompt + b * T * J, enc.prompt + src * T * J, (size_t)(T * J) * sizeof(float));
			memcpy(e->e.pooled + b * P, enc.pooled + src * P, (size_t)P * sizeof(float));
			if (e->negative) {
				memcpy(e->e.neg_prompt + b * Tn * J, enc.neg_prompt + src * Tn * J,
				       (size_t)(Tn * J) * sizeof(float));
				memcpy(e->e.neg_pooled + b * P, enc.neg_pooled + src * P, (size_t)P * sizeof(float));
			}
		}
		if (!rc) {
			pd_embeds_free(&enc);
			pd_log(2, "pdit: encoded in %.2f s\n", pd_now() - t0);
		}
	}
	/* the others wait here while one rank per group encodes */
	if (pd_engine_agree_waiting(e, rc))
		return -1;
	if (grp->size > 1 &&
	    (grp->ops->bcast(grp, e->e.prompt + first * T * J, (size_t)(count * T * J) * sizeof(float), 0) ||
	     grp->ops->bcast(grp, e->e.pooled + first * P, (size_t)(count * P) * sizeof(float), 0) ||
	     (e->negative &&
	      (grp->ops->bcast(grp, e->e.neg_prompt + first * Tn * J, (size_t)(count * Tn * J) * sizeof(float), 0) ||
	       grp->ops->bcast(grp, e->e.neg_pooled + first * P, (size_t)(count * P) * sizeof(float), 0))))) {
		e->dead = 1;
		return -1;
	}
	/* every rank gets every group's embeddings (a few MB): pdit check's
	 * single-process reference runs the whole batch on rank 0 */
	if (e->degree[PD_AXIS_DP] > 1) {
		struct pd_comm *dp = e->mesh.axis[PD_AXIS_DP];
		size_t *bytes = pd_calloc((size_t)dp->size, sizeof(size_t), "counts");
		float *bufs[4] = { e->e.prompt, e->e.pooled, e->negative ? e->e.neg_prompt : NULL,
				   e->negative ? e->e.neg_pooled : NULL };
		int64_t width[4] = { T * J, P, Tn * J, P };
		int64_t wide = T > Tn ? T * J : Tn * J;
		float *tmp = pd_malloc((size_t)(e->e.batch * (wide > P ? wide : P)) * sizeof(float) + 1,
				       "prompt embeddings");
		int rc2 = 0;

		/* every rank has its buffers before any enters the collectives */
		if (pd_engine_agree(e, !bytes || !tmp)) {
			free(bytes);
			free(tmp);
			return -1;
		}
		for (int k = 0; k < 4 && !rc2; k++) {
			if (!bufs[k] || width[k] == 0)
				continue;
			for (int g = 0; g < dp->size; g++) {
				int64_t f, c;

				pd_dp_slice(e->e.batch, dp->size, g, &f, &c);
				bytes[g] = (size_t)(c * width[k]) * sizeof(float);
			}
			rc2 = dp->ops->allgatherv(dp, bufs[k] + first * width[k], bytes[dp->rank], tmp, bytes);
			if (!rc2)
				memcpy(bufs[k], tmp, (size_t)(e->e.batch * width[k]) * sizeof(float));
		}
		free(bytes);
		free(tmp);
		if (rc2) {
			e->dead = 1;
			return -1;
		}
	}
	pd_engine_progress(e, PD_PHASE_ENCODE, t_enc, (int)e->e.batch, (int)e->e.batch, 1);
	return 0;
}

/* ----------------------------------------------------------------------- */
/* Preparing a request                                                     */
/* ----------------------------------------------------------------------- */

/* ASPECT "W:H" as the family's card lists it, else the default size's
 * area in that shape, sides rounded to multiples of 16. */
static int pd_engine_aspect(const struct pd_dit_defaults *d, const char *aspect, int *width, int *height)
{
	double area = (double)d->width * d->height, w;
	int rw = 0, rh = 0, used = 0;

	if (sscanf(aspect, "%d:%d%n", &rw, &rh, &used) != 2 || aspect[used] || rw < 1 || rh < 1 || rw > 100 ||
	    rh > 100 || rw > 8 * rh || rh > 8 * rw)
		return pd_errorf("--aspect %s: give width to height as two whole numbers, such as 16:9 (each side at most "
				 "8 times the other)", aspect);
	for (const struct pd_dit_size *s = d->sizes; s && s->aspect; s++) {
		int sw = 0, sh = 0;

		if (sscanf(s->aspect, "%d:%d", &sw, &sh) == 2 && (int64_t)sw * rh == (int64_t)sh * rw) {
			*width = s->width;
			*height = s->height;
			return 0;
		}
	}
	w = sqrt(area * rw / rh);
	*width = 16 * (int)lround(w / 16);
	*height = 16 * (int)lround(area / w / 16);
	*width = *width < 16 ? 16 : *width;
	*height = *height < 16 ? 16 : *height;
	return 0;
}

/* R's aspect as its height and width (once: before a picture in sets
 * them from its own size). */
static int pd_engine_request_aspect(const struct pd_dit_defaults *d, struct pd_request *r)
{
	if (!r->aspect)
		return 0;
	if (r->height != PD_DEFAULT || r->width != PD_DEFAULT)
		return pd_errorf("--aspect %s goes instead of -H/--height and -W/--width: give one or the other",
				 r->aspect);
	if (pd_engine_aspect(d, r->aspect, &r->width, &r->height))
		return -1;
	r->aspect = NULL;
	return 0;
}

int pd_engine_request_defaults(const struct pd_dit_defaults *d, const char *family, struct pd_request *r)
{
	if (pd_engine_request_aspect(d, r))
		return -1;
	r->height = r->height == PD_DEFAULT ? d->height : r->height;
	r->width = r->width == PD_DEFAULT ? d->width : r->width;
	r->frames = r->frames == PD_DEFAULT ? d->frames : r->frames;
	r->guidance = r->guidance >= 0 ? r->guidance : d->guidance;
	/* The family's true CFG goes with a negative prompt: from prompts now,
	 * from embeddings once they are read (pd_engine_prepare_local); a
	 * plan, with neither, counts the family's usual run. */
	if (r->true_cfg_scale < 0 && !d->guidance_cfg && (r->negative || !r->embeds))
		r->true_cfg_scale = (r->negative || (!r->n_prompts && !r->prompts)) && d->true_cfg_scale > 1
					    ? d->true_cfg_scale
					    : 1;
	if (d->guidance_cfg) {
		if (r->true_cfg_scale > 1)
			return pd_errorf("the %s family's --guidance is its classifier-free guidance: give --guidance %g, "
					 "not --true-cfg-scale", family, r->true_cfg_scale);
		r->true_cfg_scale = r->guidance;
		r->guidance = 0;
		if (r->true_cfg_scale > 1 && !r->negative && r->n_prompts > 0)
			r->negative = "";
	}
	return 0;
}

/* Everything about RQ that can be checked without the mesh's communicators
 * (this rank alone). */
int pd_engine_prepare_local(struct pd_engine *e, const struct pd_request *rq_in)
{
	struct pd_request r = *rq_in, *rq = &r;

	pd_engine_request_free(e);
	if ((rq->mask_image || rq->mask_png) && !rq->init_image && !rq->init_png)
		return pd_errorf("--mask goes with -i/--init-img (the picture it repaints)");
	if (rq->strength != PD_DEFAULT && !rq->init_image && !rq->init_png)
		return pd_errorf("--strength goes with -i/--init-img (the picture img2img starts from)");
	if (!rq->prompts && rq->n_prompts > 0 && !rq->embeds)
		return pd_errorf("%d prompts asked for, but the request's prompts are NULL", rq->n_prompts);
	{
		/* NaN passes every "negative: the family's" test: refused by
		 * name, as the command line refuses it */
		const char *bad = !isfinite(rq->guidance) ? "--guidance" :
				  !isfinite(rq->true_cfg_scale) ? "--true-cfg-scale" :
				  !isfinite(rq->flow_shift) ? "--flow-shift" :
				  !isfinite(rq->fbcache_threshold) ? "--fbcache-threshold" :
				  !isfinite(rq->strength) ? "--strength" : NULL;

		if (bad)
			return pd_errorf("%s must be a finite number", bad);
	}
	if (pd_engine_request_aspect(&e->dflt, &r))
		return -1;
	if ((rq->init_image || rq->init_png) &&
	    pd_engine_read_picture(e, rq->init_image ? rq->init_image : "the init picture", &r))
		return -1;
	if (pd_engine_request_defaults(&e->dflt, e->fam->name, &r))
		return -1;
	if (rq->height < 16 || rq->width < 16 || rq->height % 16 || rq->width % 16)
		return pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", rq->height,
				 rq->width);
	if (rq->height > PD_MAX_SIDE || rq->width > PD_MAX_SIDE)
		return pd_errorf("-H/--height and -W/--width must be at most %d (got %dx%d)", PD_MAX_SIDE, rq->height,
				 rq->width);
	if (rq->steps != PD_DEFAULT && (rq->steps < 1 || rq->steps > PD_MAX_STEPS))
		return pd_errorf("--steps must be between 1 and %d (got %d)", PD_MAX_STEPS, rq->steps);
	if (rq->batch != PD_DEFAULT && (rq->batch < 1 || rq->batch > PD_MAX_BATCH))
		return pd_errorf("--batch must be between 1 and %d (got %d)", PD_MAX_BATCH, rq->batch);
	if (rq->frames < 1)
		return pd_errorf("--frames must be positive (got %d)", rq->frames);
	e->p.frames = rq->frames;
	if (pd_engine_inputs(e, rq))
		return -1;
	if (rq->true_cfg_scale < 0)
		rq->true_cfg_scale = e->e.neg_prompt && e->dflt.true_cfg_scale > 1 ? e->dflt.true_cfg_scale : 1;
	if (e->fam->latent_shape(&e->ls, &e->info, e->p.frames, rq->height, rq->width) ||
	    (rq->batch != PD_DEFAULT && pd_embeds_repeat(&e->e, rq->batch)))
		return -1;
	if (rq->want_pictures && !e->mp.vae && !rq->want_latents)
		return pd_errorf("no VAE to decode with: give --vae DIR (or --out-latents FILE to keep only latents)");
	if (rq->want_pictures && !e->o.decode)
		return pd_errorf("this engine was opened without a VAE: it makes latents, not pictures");
	e->p.height = rq->height;
	e->p.width = rq->width;
	e->p.steps = rq->steps == PD_DEFAULT ? e->dflt.steps : rq->steps;
	/* (pd_scheduler_set refuses it too; said here before any loading) */
	if (e->sched.shift_terminal > 0 && e->p.steps < 2)
		return pd_errorf("--steps %d: this scheduler stretches its last sigma to shift_terminal %g (Qwen-Image's), "
				 "which takes at least 2 steps", e->p.steps, e->sched.shift_terminal);
	/* --flow-shift: the sampler's static shift, for this request */
	if (rq->flow_shift < 0)
		return pd_errorf("--flow-shift must be positive (got %g)", rq->flow_shift);
	e->sched.shift = rq->flow_shift > 0 ? rq->flow_shift : e->shift0;
	e->sched.dynamic = rq->flow_shift > 0 ? 0 : e->dynamic0;
	e->p.guidance = rq->guidance;
	e->p.true_cfg_scale = rq->true_cfg_scale;
	e->p.seed = rq->seed;
	if (rq->fbcache_threshold < 0)
		return pd_errorf("--fbcache-threshold must not be negative");
	e->p.fbcache_threshold = rq->fbcache_threshold;
	if (rq->true_cfg_scale > 1 && !e->e.neg_prompt && e->dflt.guidance_cfg)
		return pd_errorf("--guidance %g is %s's classifier-free guidance and needs negative_prompt_embeds in %s "
				 "(--guidance 1 runs without it)", rq->true_cfg_scale, e->fam->name,
				 rq->embeds ? rq->embeds : "the embeddings");
	if (rq->true_cfg_scale > 1 && !e->e.neg_prompt)
		/* diffusers silently ignores the scale here; say so instead. */
		return rq->embeds ? pd_errorf("--true-cfg-scale %g needs negative_prompt_embeds and "
					      "negative_pooled_prompt_embeds in %s (diffusers would silently run without "
					      "true CFG)", rq->true_cfg_scale, rq->embeds) :
				    pd_errorf("--true-cfg-scale %g needs a negative prompt: give -n \"...\" (diffusers "
					      "would silently run without true CFG)", rq->true_cfg_scale);
	if (rq->init_latents && pd_engine_read_init(e, rq->init_latents))
		return -1;
	if (rq->ref_image || rq->ref_png) {
		const char *ref = rq->ref_image ? rq->ref_image : "the reference picture";

		if (!e->fam->vae->encode)
			return pd_errorf("-r/--ref-image: the %s family takes no picture in yet", e->fam->name);
		if (!e->mp.vae)
			return pd_errorf("-r/--ref-image needs the VAE to encode the picture: give --vae DIR");
		if (rq->ref_image ? pd_png_read(ref, &e->ref_rgb, &e->ref_w, &e->ref_h) && pd_error_prefix("-r/--ref-image")
				  : pd_png_decode(rq->ref_png, rq->ref_png_len, ref, &e->ref_rgb, &e->ref_w, &e->ref_h))
			return -1;
		/* FluxKontextPipeline: its size rounded down to a multiple of
		 * 16, resized to it (no _auto_resize to a preferred size) */
		if (e->ref_w < 16 || e->ref_h < 16)
			return pd_errorf("-r/--ref-image %s: %dx%d is smaller than 16x16", ref, e->ref_w, e->ref_h);
		if ((e->ref_w % 16 || e->ref_h % 16) &&
		    pd_engine_resize_rgb(&e->ref_rgb, e->ref_w, e->ref_h, e->ref_w - e->ref_w % 16, e->ref_h - e->ref_h % 16,
					 0))
			return -1;
		e->ref_w -= e->ref_w % 16;
		e->ref_h -= e->ref_h % 16;
	}
	if (e->ls.cond_channels > 0 && e->ref_rgb)
		return pd_errorf("-r/--ref-image: %s is FLUX.1 Fill's transformer, which takes no reference picture",
				 e->mp.transformer);
	if (e->ls.cond_channels > 0 && (!e->init_rgb || !e->mask_rgb))
		return pd_errorf("%s is FLUX.1 Fill's transformer (in_channels %d): give -i/--init-img PICTURE and --mask "
				 "MASK (white: what it fills)", e->mp.transformer, e->info.in_channels);
	if (e->init_rgb && pd_engine_picture_schedule(e, rq->strength != PD_DEFAULT ? rq->strength : e->dflt.strength))
		return -1;
	return 0;
}

uint64_t pd_engine_hash(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* The prepared request as every rank read it (files a rank reads alone:
 * embeddings, initial latents): sizes that differ would make the
 * transfers disagree, contents that differ another picture on each rank.
 * Collective; -1 with the same message on every rank when they differ. */
int pd_engine_same_everywhere(struct pd_engine *e, const struct pd_request *rq)
{
	enum { N = 8 };
	int64_t per = e->ls.tokens * e->ls.packed_channels, mine[N], *all;
	const struct pd_embeds *x = &e->e;
	uint64_t h = PD_ENGINE_HASH_START;
	int rc = 0;

	if (e->world->size == 1)
		return 0;
	/* prompts are encoded later, from the same strings: what was read from files counts */
	if (rq->embeds) {
		h = pd_engine_hash(h, x->prompt, (size_t)(x->batch * x->txt_len * x->joint_dim) * sizeof(float));
		h = pd_engine_hash(h, x->pooled, (size_t)(x->batch * x->pooled_dim) * sizeof(float));
		/* each prompt's own rows shape every call's sequence */
		if (x->lens)
			h = pd_engine_hash(h, x->lens, (size_t)x->batch * sizeof(int64_t));
	}
	if (rq->embeds && x->neg_prompt) {
		h = pd_engine_hash(h, x->neg_prompt, (size_t)(x->batch * x->neg_txt_len * x->joint_dim) * sizeof(float));
		h = pd_engine_hash(h, x->neg_pooled, (size_t)(x->batch * x->pooled_dim) * sizeof(float));
	}
	if (e->init)
		h = pd_engine_hash(h, e->init, (size_t)(x->batch * per) * sizeof(float));
	/* pictures in each rank read itself: another file, another sequence */
	if (e->init_rgb)
		h = pd_engine_hash(h, e->init_rgb, (size_t)e->init_w * e->init_h * 3);
	if (e->mask_rgb)
		h = pd_engine_hash(h, e->mask_rgb, (size_t)e->init_w * e->init_h * 3);
	if (e->ref_rgb)
		h = pd_engine_hash(h, e->ref_rgb, (size_t)e->ref_w * e->ref_h * 3);
	mine[0] = x->batch;
	mine[1] = x->txt_len;
	mine[2] = x->neg_prompt ? x->neg_txt_len : -1;
	mine[3] = x->joint_dim;
	mine[4] = x->pooled_dim;
	mine[5] = e->ls.tokens;
	mine[6] = e->init != NULL;
	memcpy(&mine[7], &h, sizeof(h));
	all = pd_malloc(sizeof(mine) * (size_t)e->world->size, "request check");
	if (pd_engine_agree(e, !all)) {
		rc = -1;
		goto out;
	}
	if (pd_comm_allgather(e->world, mine, sizeof(mine), all)) {
		e->dead = 1;
		rc = -1;
		goto out;
	}
	for (int r = 1; r < e->world->size && !rc; r++) {
		const int64_t *o = all + (size_t)r * N;

		if (memcmp(o, all, sizeof(mine)) == 0)
			continue;
		if (memcmp(o, all, 5 * sizeof(*o)))
			rc = pd_errorf("rank %d read %s as %lld prompts of %lld tokens (negative: %lld) and widths %lld, "
				       "%lld; rank 0 as %lld of %lld (%lld) and %lld, %lld: every process must read the "
				       "same file", r, rq->embeds ? rq->embeds : "the prompts", (long long)o[0],
				       (long long)o[1], (long long)o[2], (long long)o[3], (long long)o[4],
				       (long long)all[0], (long long)all[1], (long long)all[2], (long long)all[3],
				       (long long)all[4]);
		else
			rc = pd_errorf("rank %d read other values than rank 0 from %s%s%s: every process must read the "
				       "same file", r, rq->embeds ? rq->embeds : "",
				       rq->embeds && rq->init_latents ? " or " : "",
				       rq->init_latents ? rq->init_latents : rq->embeds ? "" : "the request's files");
	}
out:
	free(all);
	return rc;
}

int pd_engine_prepare(struct pd_engine *e, const struct pd_request *rq)
{
	struct pd_mesh_limits lim;
	int rc = pd_engine_prepare_local(e, rq);

	/* a request for a mesh already made: it must fit that mesh */
	if (!rc && e->mesh_ok) {
		pd_engine_limits(e, &lim);
		rc = pd_mesh_check(e->degree, &lim) || pd_engine_check_memory(e, rq->want_pictures, 1);
	}
	return pd_engine_agree(e, rc) || pd_engine_same_everywhere(e, rq);
}


/* H with N bytes at P (pd_engine_hash), then whether they were there. */
static uint64_t pd_fnv(uint64_t h, const void *p, size_t n)
{
	return pd_engine_hash(p ? pd_engine_hash(h, p, n) : h, p ? "+" : "-", 1);
}

/* A digest of what RQ's struct only points to and preparing it reads: the
 * prompts, the file names, the pictures' bytes, the adapters' names. */
static uint64_t pd_request_texts(const struct pd_request *rq)
{
	const char *names[] = { rq->negative, rq->embeds, rq->init_latents, rq->init_image, rq->ref_image,
				rq->mask_image, rq->aspect };
	uint64_t h = PD_ENGINE_HASH_START;

	for (int i = 0; i < rq->n_prompts; i++) {
		const char *s = rq->prompts ? rq->prompts[i] : NULL;

		h = pd_fnv(h, s, s ? strlen(s) : 0);
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		h = pd_fnv(h, names[i], names[i] ? strlen(names[i]) : 0);
	h = pd_fnv(h, rq->init_png, rq->init_png_len);
	h = pd_fnv(h, rq->mask_png, rq->mask_png_len);
	h = pd_fnv(h, rq->ref_png, rq->ref_png_len);
	for (int i = 0; rq->loras_given && i < PD_MAX_LORAS && rq->loras[i].path; i++)
		h = pd_fnv(h, rq->loras[i].path, strlen(rq->loras[i].path));
	return h;
}

/* RQ without what preparing it does not read (the run's callbacks, its
 * cancel flag, whether latents come back): a caller may set those
 * between open and the plan's run. */
static void pd_request_prepared(struct pd_request *r, const struct pd_request *rq)
{
	/* bytes, padding too (compared with memcmp; a padding byte that
	 * changed only costs a second preparation) */
	memcpy(r, rq, sizeof(*r));
	r->on_step = NULL;
	r->step_ctx = NULL;
	r->cancel = NULL;
	r->want_latents = 0;
}

void pd_engine_set_ready(struct pd_engine *e, const struct pd_request *rq)
{
	e->ready = rq;
	pd_request_prepared(&e->ready_rq, rq);
	e->ready_text = pd_request_texts(rq);
}

int pd_engine_ready(struct pd_engine *e, const struct pd_request *rq)
{
	struct pd_request now;
	int rc = 0;

	/* the plan's request was prepared and encoded at open: taken when it
	 * is that struct, unchanged (the same address alone may be another
	 * caller's struct since) */
	pd_request_prepared(&now, rq);
	if (e->ready != rq || memcmp(&e->ready_rq, &now, sizeof(now)) != 0 || e->ready_text != pd_request_texts(rq)) {
		e->ready = NULL;
		rc = pd_engine_prepare(e, rq) || pd_engine_encode(e, 0) ? -1 : 0;
	}
	e->ready = NULL;
	return rc;
}
