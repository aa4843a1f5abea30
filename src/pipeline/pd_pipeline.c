/*
 * pd_pipeline.c - FluxPipeline's loop on embeddings (PF = diffusers v0.40
 * pipelines/flux/pipeline_flux.py).
 */
#include "pd_pipeline.h"
#include "pd_rng.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------- */
/* Latents                                                                 */
/* ----------------------------------------------------------------------- */

void pd_draw_noise(const struct pd_latent_shape *ls, uint64_t seed, float *unpacked)
{
	struct pd_rng g;

	pd_rng_seed(&g, seed);
	pd_rng_randn(&g, unpacked, (size_t)pd_latent_numel(ls));
}

/* ----------------------------------------------------------------------- */
/* Denoising                                                               */
/* ----------------------------------------------------------------------- */

/* COMB [tokens, C] scaled per token to POS's norm: comb |pos| / |comb|,
 * the norms over a token's channels in float32 (a token whose combination
 * is zero stays zero, where diffusers would divide by it). */
static void pd_cfg_renorm(float *comb, const float *pos, int64_t tokens, int64_t C)
{
	for (int64_t t = 0; t < tokens; t++) {
		float np = 0, nc = 0;

		for (int64_t c = 0; c < C; c++) {
			np += pos[t * C + c] * pos[t * C + c];
			nc += comb[t * C + c] * comb[t * C + c];
		}
		np = sqrtf(np);
		nc = sqrtf(nc);
		if (nc > 0)
			for (int64_t c = 0; c < C; c++)
				comb[t * C + c] = comb[t * C + c] * (np / nc);
	}
}

/* FluxInpaintPipeline's loop, after step I of image G: the kept region
 * from the picture (scale_noise to sigma[i + 1] but after the last step),
 * (1 - m) x kept + m x latents, float32 operations in torch's order. */
static void pd_inpaint_blend(const struct pd_inpaint *ip, const struct pd_scheduler *s, int i, int64_t g, float *x,
			     int64_t n)
{
	const float *img = ip->image + g * n, *noise = ip->noise + g * n;
	int last = i == s->steps - 1;
	float sigma = last ? 0.0f : s->sigmas[i + 1];

	for (int64_t k = 0; k < n; k++) {
		float kept = last ? img[k] : sigma * noise[k] + (1.0f - sigma) * img[k];
		float m = ip->mask[k];

		x[k] = (1.0f - m) * kept + m * x[k];
	}
}

int pd_gen_uses_cfg(const struct pd_gen_params *p, const struct pd_embeds *e)
{
	/* PF:766-769: true CFG needs both a scale above 1 and a negative prompt. */
	return p->true_cfg_scale > 1.0f && e->neg_prompt != NULL;
}

static void pd_dump_host(const struct pd_dump *dump, const char *name, const float *data, int ndim, ...)
{
	int64_t shape[8];
	va_list ap;

	if (!dump)
		return;
	va_start(ap, ndim);
	for (int i = 0; i < ndim; i++)
		shape[i] = va_arg(ap, int64_t);
	va_end(ap);
	dump->fn(dump->ctx, name, -1, data, ndim, shape);
}

static int pd_local_predict(void *ctx, const struct pd_dit_call *in, float *out, const struct pd_dump *dump)
{
	return pd_dit_forward(ctx, in, out, dump);
}

struct pd_runner pd_runner_local(struct pd_dit *m)
{
	struct pd_runner r = { .predict = pd_local_predict, .predict_ctx = m, .n_images = -1, .cfg_branch = -1 };

	return r;
}

int pd_denoise(const struct pd_runner *run, const struct pd_dit_family *fam, const struct pd_dit_info *info,
	       struct pd_scheduler *s, const struct pd_embeds *e, const struct pd_gen_params *p, const float *init,
	       float *latents, const struct pd_dump *dump, const struct pd_dump *model_dump)
{
	struct pd_latent_shape ls;
	int64_t B, b0 = run->first_image, L, C, n;
	int cfg_on = pd_gen_uses_cfg(p, e);
	/* CFG split: this process runs one branch, 0 negative or 1 positive */
	int branch = cfg_on ? run->cfg_branch : -1;
	/* the cache slot of the first branch this process runs (1: positive) */
	int first_branch = branch == 0 ? 0 : 1;
	float *img_ids = NULL, *txt_ids = NULL, *neg_ids = NULL, *noise = NULL, *pred = NULL, *pair = NULL;
	float *tvec = NULL, *xin = NULL, *ids_all = NULL, *out_all = NULL;
	int64_t R = p->ref_len > 0 ? p->ref_len : 0;
	struct pd_sched_state **st = NULL;
	/* First Block Cache: one state per image and branch (0 negative, 1 positive) */
	struct pd_fbcache *fbc = NULL;
	int rc = -1;

	memset(&ls, 0, sizeof(ls));
	if (fam->latent_shape(&ls, info, p->frames, p->height, p->width))
		return -1;
	if (R > 0 && ls.cond_channels > 0)
		return pd_errorf("a reference picture (-r) and a model conditioned on a masked picture (FLUX.1 Fill) do not "
				 "go together");
	if (ls.cond_channels > 0 && !p->cond)
		return pd_errorf("this transformer takes %d channels of conditioning a token (FLUX.1 Fill: the masked "
				 "picture and its mask): give -i/--init-img and --mask", ls.cond_channels);
	B = run->n_images < 0 ? e->batch : run->n_images;
	if (p->fbcache_threshold > 0) {
		fbc = pd_calloc((size_t)(2 * B + 1), sizeof(*fbc), "First Block Cache");
		if (!fbc)
			return -1;
		for (int64_t k = 0; k < 2 * B; k++)
			fbc[k].threshold = p->fbcache_threshold;
	}
	L = ls.tokens;
	C = ls.packed_channels;
	n = L * C;
	if (pd_scheduler_set(s, p->steps, L) || pd_scheduler_cut(s, p->first_step))
		return -1;
	img_ids = pd_malloc((size_t)(L * info->n_axes) * sizeof(float), "ids");
	txt_ids = pd_calloc((size_t)(e->txt_len * info->n_axes), sizeof(float), "ids");
	neg_ids = pd_calloc((size_t)((e->neg_txt_len + 1) * info->n_axes), sizeof(float), "ids");
	noise = pd_malloc((size_t)((B + 1) * pd_latent_numel(&ls)) * sizeof(float), "noise");
	pred = pd_malloc((size_t)((B + 1) * n) * sizeof(float), "predictions");
	/* per image: [negative | positive] predictions */
	pair = pd_malloc((size_t)((B + 1) * 2 * n) * sizeof(float), "predictions");
	tvec = pd_malloc((size_t)(B + 1) * sizeof(float), "timesteps");
	st = pd_calloc((size_t)(B + 1), sizeof(*st), "the sampler's state");
	/* a call's tokens: the latents, then the conditioning of each (Fill);
	 * or the latents, then the reference's tokens (Kontext) */
	if (ls.cond_channels > 0 || R > 0)
		xin = pd_malloc((size_t)((L + R) * (C + ls.cond_channels)) * sizeof(float), "the transformer's input");
	if (R > 0) {
		ids_all = pd_malloc((size_t)((L + R) * info->n_axes) * sizeof(float), "ids");
		out_all = pd_malloc((size_t)((L + R) * C) * sizeof(float), "predictions");
	}
	if (!img_ids || !txt_ids || !neg_ids || !noise || !pred || !pair || !tvec || !st ||
	    ((ls.cond_channels > 0 || R > 0) && !xin) || (R > 0 && (!ids_all || !out_all)))
		goto out;
	for (int64_t b = 0; b < B; b++)
		if (!(st[b] = pd_sched_state_new(s, (size_t)n)))
			goto out;
	fam->image_ids(&ls, info->n_axes, img_ids);
	/* text beside the picture (Qwen-Image's), or at the origin (zeros) */
	if (fam->text_ids) {
		fam->text_ids(&ls, e->txt_len, info->n_axes, txt_ids);
		fam->text_ids(&ls, e->neg_txt_len, info->n_axes, neg_ids);
	}
	if (R > 0) {
		/* FluxKontextPipeline: latent_ids = cat([latent_ids, image_ids]) */
		memcpy(ids_all, img_ids, (size_t)(L * info->n_axes) * sizeof(float));
		memcpy(ids_all + L * info->n_axes, p->ref_ids, (size_t)(R * info->n_axes) * sizeof(float));
		memcpy(xin + n, p->ref, (size_t)(R * C) * sizeof(float));
	}
	pd_dump_host(dump, "sched.sigmas_in", s->sigmas_in, 1, (int64_t)s->steps);
	pd_dump_host(dump, "sched.sigmas", s->sigmas, 1, (int64_t)s->steps + 1);
	pd_dump_host(dump, "sched.timesteps", s->timesteps, 1, (int64_t)s->steps);
	pd_dump_host(dump, "in.img_ids", img_ids, 2, L, (int64_t)info->n_axes);
	for (int64_t b = 0; b < B; b++) {
		float *u = noise + b * pd_latent_numel(&ls);

		if (init) {
			memcpy(latents + b * n, init + (b0 + b) * n, (size_t)n * sizeof(float));
			fam->unpack(&ls, latents + b * n, u);
		} else {
			/* seed + global image index: an image does not depend on how
			 * the batch is split over processes */
			pd_draw_noise(&ls, p->seed + (uint64_t)(b0 + b), u);
			fam->pack(&ls, u, latents + b * n);
		}
	}
	if (ls.frames == 1)
		pd_dump_host(dump, "latents.init_unpacked", noise, 4, B, (int64_t)ls.channels, (int64_t)ls.h, (int64_t)ls.w);
	else
		pd_dump_host(dump, "latents.init_unpacked", noise, 5, B, (int64_t)ls.channels, (int64_t)ls.frames,
			     (int64_t)ls.h, (int64_t)ls.w);
	pd_dump_host(dump, "latents.init", latents, 3, B, L, C);

	for (int i = 0; i < s->steps; i++) {
		double t0 = pd_now();
		/* PF:896: FLUX's transformer sees t / 1000 in float32, Wan's t */
		float tstep = s->timesteps[i] / fam->timestep_div;
		int skipped_before = fbc && B > 0 ? fbc[first_branch].skipped : 0;
		char name[64];

		if (pd_fault("step", i))
			goto out;

		for (int64_t b = 0; b < B; b++) {
			int64_t g = b0 + b;
			float *neg = pair + b * 2 * n, *pos = neg + n;
			const struct pd_dump *md = i == 0 && b == 0 ? model_dump : NULL;
			struct pd_dit_call pin = {
				/* a shorter prompt of the batch: its own rows, the
				 * padding never attended (QP's text mask) */
				.txt_len = pd_embeds_len(e, g),
				.img_len = L,
				.img = latents + b * n,
				.txt = e->prompt + g * e->txt_len * e->joint_dim,
				.pooled = e->pooled + g * e->pooled_dim,
				.img_ids = img_ids,
				.txt_ids = txt_ids,
				.timestep = tstep,
				.guidance = p->guidance,
				.cache = fbc ? &fbc[2 * b + 1] : NULL,
				.step = i,
				.image = g,
				.branch = 1,
			};
			/* PF:915-926: the negative call sees the same latents,
			 * timestep and embedded guidance */
			struct pd_dit_call nin;

			if (ls.cond_channels > 0) {
				/* FluxFillPipeline: cat((latents, masked_image_latents), dim=2) */
				int64_t K = ls.cond_channels;

				for (int64_t t = 0; t < L; t++) {
					memcpy(xin + t * (C + K), latents + b * n + t * C, (size_t)C * sizeof(float));
					memcpy(xin + t * (C + K) + C, p->cond + (g * L + t) * K, (size_t)K * sizeof(float));
				}
				pin.img = xin;
			} else if (R > 0) {
				/* FluxKontextPipeline: cat([latents, image_latents], dim=1) */
				memcpy(xin, latents + b * n, (size_t)n * sizeof(float));
				pin.img = xin;
				pin.img_len = L + R;
				pin.img_ids = ids_all;
			}
			nin = pin;

			nin.cache = fbc ? &fbc[2 * b] : NULL;
			nin.branch = 0;
			nin.txt_len = e->neg_txt_len;
			nin.txt = cfg_on ? e->neg_prompt + g * e->neg_txt_len * e->joint_dim : NULL;
			nin.pooled = cfg_on ? e->neg_pooled + g * e->pooled_dim : NULL;
			nin.txt_ids = neg_ids;
			/* Kontext: noise_pred[:, :latents.size(1)], the image tokens' */
			if (branch < 0) {
				if (run->predict(run->predict_ctx, &pin, R ? out_all : pos, md))
					goto out;
				if (R)
					memcpy(pos, out_all, (size_t)n * sizeof(float));
				if (cfg_on && run->predict(run->predict_ctx, &nin, R ? out_all : neg, NULL))
					goto out;
				if (cfg_on && R)
					memcpy(neg, out_all, (size_t)n * sizeof(float));
			} else {
				float *mine = branch == 0 ? neg : pos;

				if (run->predict(run->predict_ctx, branch == 0 ? &nin : &pin, R ? out_all : mine,
						 branch ? md : NULL))
					goto out;
				if (R)
					memcpy(mine, out_all, (size_t)n * sizeof(float));
				if (run->cfg_exchange(run->cfg_ctx, mine, (size_t)n, pair + b * 2 * n))
					goto out;
			}
			if (cfg_on) {
				/* PF:927: neg + s (pos - neg) as three float32 operations */
				float scale = p->true_cfg_scale;

				for (int64_t k = 0; k < n; k++) {
					float d = pos[k] - neg[k];

					d = scale * d;
					pred[b * n + k] = neg[k] + d;
				}
				/* QwenImagePipeline: each token's combination at the
				 * positive prediction's norm (over its channels) */
				if (fam->cfg_renorm)
					pd_cfg_renorm(pred + b * n, pos, L, C);
			} else {
				memcpy(pred + b * n, pos, (size_t)n * sizeof(float));
			}
			pd_scheduler_step(s, st[b], i, latents + b * n, pred + b * n, (size_t)n);
			if (p->inpaint)
				pd_inpaint_blend(p->inpaint, s, i, g, latents + b * n, n);
		}
		if (dump) {
			/* PF:896: t.expand(B), one value per image */
			for (int64_t b = 0; b < B; b++)
				tvec[b] = tstep;
			snprintf(name, sizeof(name), "step.%d.timestep", i);
			pd_dump_host(dump, name, tvec, 1, B);
			snprintf(name, sizeof(name), "step.%d.noise_pred", i);
			pd_dump_host(dump, name, pred, 3, B, L, C);
			if (cfg_on) {
				for (int64_t b = 0; b < B; b++)
					memcpy(pred + b * n, pair + b * 2 * n + n, (size_t)n * sizeof(float));
				snprintf(name, sizeof(name), "step.%d.noise_pred_pos", i);
				pd_dump_host(dump, name, pred, 3, B, L, C);
				for (int64_t b = 0; b < B; b++)
					memcpy(pred + b * n, pair + b * 2 * n, (size_t)n * sizeof(float));
				snprintf(name, sizeof(name), "step.%d.noise_pred_neg", i);
				pd_dump_host(dump, name, pred, 3, B, L, C);
			}
			snprintf(name, sizeof(name), "step.%d.latents", i);
			pd_dump_host(dump, name, latents, 3, B, L, C);
		}
		if (fbc && run->fb_report && i < run->fb_report->steps && B > 0)
			run->fb_report->decisions[i] = (unsigned char)(fbc[first_branch].skipped > skipped_before);
		if (run->on_step && run->on_step(run->step_ctx, i))
			goto out;
		/* the engine's progress shows steps; this is the detail */
		pd_log(2, "pdit: step %d/%d took %.2f s\n", i + 1, s->steps, pd_now() - t0);
	}
	pd_dump_host(dump, "latents.final", latents, 3, B, L, C);
	if (fbc) {
		int done = 0, skip = 0;

		for (int64_t k = 0; k < 2 * B; k++) {
			done += fbc[k].computed;
			skip += fbc[k].skipped;
		}
		if (run->fb_report) {
			run->fb_report->computed = done;
			run->fb_report->skipped = skip;
		}
		pd_log(1, "pdit: First Block Cache (threshold %g) skipped %d of %d transformer calls\n",
		       p->fbcache_threshold, skip, done + skip);
	}
	rc = 0;
out:
	for (int64_t k = 0; fbc && k < 2 * B; k++)
		pd_fbcache_free(&fbc[k]);
	free(fbc);
	free(img_ids);
	free(txt_ids);
	free(neg_ids);
	free(noise);
	free(pred);
	free(pair);
	free(tvec);
	free(xin);
	free(ids_all);
	free(out_all);
	for (int64_t b = 0; st && b < B; b++)
		pd_sched_state_free(st[b]);
	free(st);
	return rc;
}

/* ----------------------------------------------------------------------- */
/* Decoding                                                                */
/* ----------------------------------------------------------------------- */

int pd_decode_image(struct pd_vae *v, const struct pd_dit_family *fam, const struct pd_latent_shape *ls,
		    const float *packed, uint8_t *rgb, float *decoded, const struct pd_dump *dump)
{
	const struct pd_vae_config *vc = pd_vae_get_config(v);
	float *u;
	int rc;

	if (vc->latent_channels != ls->channels)
		return pd_errorf("the VAE has %d latent channels but the transformer makes %d", vc->latent_channels,
				 ls->channels);
	u = pd_malloc((size_t)ls->channels * ls->h * ls->w * sizeof(float), "latents");
	if (!u)
		return -1;
	fam->unpack(ls, packed, u);
	if (dump) {
		int64_t shape[4] = { 1, ls->channels, ls->h, ls->w };

		dump->fn(dump->ctx, "vae.latents_unpacked", dump->index, u, 4, shape);
	}
	rc = pd_vae_decode_rgb(v, u, ls->h, ls->w, rgb, decoded, dump);
	free(u);
	return rc;
}
