/*
 * pd_engine_run.c - a prepared request run: the denoising steps on the
 * mesh, the decode in bands over each data-parallel group, the result.
 */
#include "pd_engine.h"
#include "pd_par_data.h"
#include "pd_st_writer.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------- */
/* Running a request                                                       */
/* ----------------------------------------------------------------------- */

int pd_engine_vae_load(struct pd_engine *e)
{
	const struct pd_vae_kind *k = e->fam->vae;

	if (!e->vae && k->load(&e->vae, e->mp.vae, e->be))
		return -1;
	if (k->channels(e->vae) != e->ls.channels)
		return pd_errorf("%s: the VAE has %d latent channels but the transformer makes %d", e->mp.vae,
				 k->channels(e->vae), e->ls.channels);
	return 0;
}

void pd_engine_vae_hooks(struct pd_engine *e, const struct pd_vae_hooks *hooks)
{
	if (e->vae)
		e->fam->vae->set_hooks(e->vae, hooks ? hooks : &pd_vae_whole);
}

int pd_engine_vae_scale(const struct pd_engine *e)
{
	return e->fam->vae->scale(e->vae);
}

int pd_engine_vae_decode(struct pd_engine *e, const float *packed, uint8_t *rgb)
{
	float *z = pd_malloc((size_t)pd_latent_numel(&e->ls) * sizeof(float), "latents");
	int rc;

	if (!z)
		return -1;
	/* the VAE takes the latents as the family's pipeline unpacks them */
	e->fam->unpack(&e->ls, packed, z);
	rc = e->fam->vae->decode(e->vae, z, e->ls.frames, e->ls.h, e->ls.w, rgb);
	free(z);
	return rc;
}

void pd_engine_free_transformer(struct pd_engine *e)
{
	pd_dit_free(e->m);
	e->m = NULL;
}

/* Who decodes the prepared request's pictures, loading the VAE where it is
 * needed first: every rank of a data-parallel group takes a band, or the
 * group's writer decodes alone. */
int pd_engine_vae_setup(struct pd_engine *e)
{
	struct pd_vae_hooks hooks = pd_vae_whole;

	if (!e->o.decode || !e->mp.vae || e->vae_rows == e->ls.h)
		return 0;
	pd_vae_par_free(&e->vae_par);
	e->vae_rows = 0;
	e->vae_bands = 0;
	if (e->o.vae_parallel >= 0 && e->mesh.replica->size > 1) {
		if (pd_vae_par_hooks(&e->vae_par, e->mesh.replica, e->be, e->ls.h, &hooks))
			return -1;
	} else if (!pd_parallel_is_writer(&e->mesh))
		hooks.bands = 0;
	if (hooks.bands > 0) {
		if (pd_engine_vae_load(e))
			return -1;
		pd_engine_vae_hooks(e, &hooks);
	} else {
		/* (an encode's bands may be set: nothing here decodes) */
		pd_engine_vae_hooks(e, NULL);
	}
	/* set up for this height: only now */
	e->vae_bands = hooks.bands;
	e->vae_rows = e->ls.h;
	return 0;
}

int pd_engine_vae_encode_setup(struct pd_engine *e, int latent_rows)
{
	struct pd_vae_hooks hooks = pd_vae_whole;

	/* the decode's hooks are set again before it */
	pd_vae_par_free(&e->vae_par);
	e->vae_rows = 0;
	e->vae_bands = 0;
	if (e->o.vae_parallel >= 0 && e->mesh.replica->size > 1 && e->mesh.replica->size <= latent_rows &&
	    pd_vae_par_hooks(&e->vae_par, e->mesh.replica, e->be, latent_rows, &hooks))
		return -1;
	pd_engine_vae_hooks(e, &hooks);
	return 0;
}

void pd_engine_notes(const struct pd_engine *e, const struct pd_request *rq)
{
	char mesh[128];

	if (!e->mp.scheduler)
		pd_log(1, "pdit: note: no scheduler folder; using %s settings\n", e->dflt.whose);
	/* a file's negatives are there for whoever wants them: worth a word
	 * only when asked for detail */
	if (e->e.neg_prompt && e->p.true_cfg_scale <= 1 && rq->embeds)
		pd_log(2, "pdit: note: true CFG is off: %s's negative embeddings are not used (--true-cfg-scale above 1 "
		       "uses them)\n", rq->embeds);
	else if (e->e.neg_prompt && e->p.true_cfg_scale <= 1)
		pd_log(1, "pdit: note: true CFG is off, so the negative prompt is not used: add --true-cfg-scale 4 (or "
		       "another scale above 1) to use it\n");
	if (!e->info.guidance && !e->dflt.guidance_cfg && rq->guidance >= 0)
		pd_log(1, "pdit: note: this transformer has no guidance embedding; --guidance is ignored\n");
	if (e->world->size > 1 && e->requests == 0) {
		pd_mesh_format(e->degree, mesh, sizeof(mesh));
		pd_log(1, "pdit: %d processes, mesh %s%s, on %s (%s), %d thread%s each\n", e->world->size, mesh,
		       e->mesh_auto == 2 ? " (chosen by the cost model, as pdit plan ranks them)" :
		       e->mesh_auto ? " (chosen automatically)" : "", e->be->ops->name, e->be->device, e->be->threads,
		       e->be->threads > 1 ? "s" : "");
	} else if (e->requests == 0) {
		pd_log(1, "pdit: computing on %s (%s), %d thread%s\n", e->be->ops->name, e->be->device, e->be->threads,
		       e->be->threads > 1 ? "s" : "");
	}
	if (e->p.frames > 1)
		pd_log(1, "pdit: %lld video%s of %d frames %dx%d, %d steps, seed %llu%s\n", (long long)e->e.batch,
		       e->e.batch > 1 ? "s" : "", e->p.frames, e->p.width, e->p.height, e->p.steps,
		       (unsigned long long)rq->seed, pd_gen_uses_cfg(&e->p, &e->e) ? ", CFG" : "");
	else if (e->p.first_step > 0)
		pd_log(1, "pdit: %lld image%s %dx%d from a picture, the last %d of %d steps (strength %g), seed %llu%s\n",
		       (long long)e->e.batch, e->e.batch > 1 ? "s" : "", e->p.width, e->p.height,
		       e->p.steps - e->p.first_step, e->p.steps, e->strength, (unsigned long long)rq->seed,
		       pd_gen_uses_cfg(&e->p, &e->e) ? ", true CFG" : "");
	else
		pd_log(1, "pdit: %lld image%s %dx%d, %d steps, seed %llu%s\n", (long long)e->e.batch,
		       e->e.batch > 1 ? "s" : "", e->p.width, e->p.height, e->p.steps, (unsigned long long)rq->seed,
		       pd_gen_uses_cfg(&e->p, &e->e) ? ", true CFG" : "");
}

int pd_engine_denoise(struct pd_engine *e, float *all, const struct pd_dump *model_dump)
{
	int64_t per = e->ls.tokens * e->ls.packed_channels;
	struct pd_comm *dp = e->mesh.axis[PD_AXIS_DP];
	float *mine;
	double deadline;
	int rc;

	pd_dp_slice(e->e.batch, e->degree[PD_AXIS_DP], e->mesh.coord[PD_AXIS_DP], &e->par.runner.first_image,
		    &e->par.runner.n_images);
	mine = pd_malloc((size_t)((e->par.runner.n_images + 1) * per) * sizeof(float), "latents");
	rc = !mine || pd_denoise(&e->par.runner, e->fam, &e->info, &e->sched, &e->e, &e->p, e->init, mine, NULL,
				 model_dump);
	/* a group with a picture more keeps the others waiting here */
	deadline = dp->timeout_s;
	dp->timeout_s = 0;
	rc = rc || pd_dp_gather(dp, mine, per, e->e.batch, all);
	dp->timeout_s = deadline;
	free(mine);
	/* a cancel stops every process after the same step: nothing is left
	 * half-done, the engine goes on */
	if (rc && !e->cancelled)
		e->dead = 1;
	return rc ? -1 : 0;
}

/* The initial latents of every picture: as given, or the seeds' noise
 * drawn again (cheaper than keeping it). */
float *pd_engine_initial(const struct pd_engine *e)
{
	int64_t per = e->ls.tokens * e->ls.packed_channels, B = e->e.batch;
	float *first = pd_malloc((size_t)(B * per) * sizeof(float), "latents"), *u;

	if (!first)
		return NULL;
	if (e->init) {
		memcpy(first, e->init, (size_t)(B * per) * sizeof(float));
		return first;
	}
	u = pd_malloc((size_t)pd_latent_numel(&e->ls) * sizeof(float), "noise");
	if (!u) {
		free(first);
		return NULL;
	}
	for (int64_t b = 0; b < B; b++) {
		pd_draw_noise(&e->ls, e->p.seed + (uint64_t)b, u);
		e->fam->pack(&e->ls, u, first + b * per);
	}
	free(u);
	return first;
}

/* Decodes this data-parallel group's pictures (collective over its bands);
 * the writer keeps them. */
static int pd_engine_decode(struct pd_engine *e, const float *all, struct pd_result *res)
{
	int64_t per = e->ls.tokens * e->ls.packed_channels, n = e->par.runner.n_images;
	int f = pd_engine_vae_scale(e);
	/* a video's frames, one after the other */
	size_t npx = (size_t)e->ls.h * f * e->ls.w * f * (size_t)e->p.frames;
	int writer = pd_parallel_is_writer(&e->mesh);
	uint8_t *rgb = pd_malloc(npx * 3 * (size_t)(n + 1), "pictures");
	double t0 = pd_now();

	if (!rgb)
		return -1;
	pd_engine_progress(e, PD_PHASE_DECODE, t0, 0, (int)n, 0);
	for (int64_t i = 0; i < n; i++) {
		int64_t b = e->par.runner.first_image + i;

		if (pd_engine_vae_decode(e, all + b * per, rgb + (size_t)i * npx * 3)) {
			free(rgb);
			return -1;
		}
		pd_engine_progress(e, PD_PHASE_DECODE, t0, (int)i + 1, (int)n, i + 1 == n);
	}
	res->decode_s = n > 0 ? (pd_now() - t0) / (double)n : 0;
	res->bands = e->vae_bands;
	if (!writer) {
		free(rgb);
		return 0;
	}
	res->rgb = rgb;
	res->first_picture = e->par.runner.first_image;
	res->n_pictures = n;
	return 0;
}

static int pd_engine_on_step(void *ctx, int step)
{
	struct pd_engine *e = ctx;
	int32_t stop;

	int run = e->p.steps - e->p.first_step;

	if (e->running->on_step)
		e->running->on_step(e->running->step_ctx, step, run);
	pd_engine_progress(e, PD_PHASE_DENOISE, e->t_denoise, step + 1, run, step + 1 == run);
	if (!e->running->cancel || step + 1 == run)
		return 0;
	/* every process stops after the same step, or none does; the data-
	 * parallel groups meet here too (they run the same steps) */
	stop = *e->running->cancel != 0;
	if (e->world->size > 1 && e->world->ops->allreduce(e->world, &stop, 1, PD_COMM_I32, PD_COMM_MAX))
		return -1;
	if (!stop)
		return 0;
	e->cancelled = 1;
	pd_errorf("cancelled after step %d of %d", step + 1, run);
	return 1;
}

/* An engine opened to encode: the request's prompts to embeddings, with
 * the token ids. */
static int pd_engine_run_encode(struct pd_engine *e, const struct pd_request *rq, struct pd_result *res)
{
	struct pd_embeds *emb;
	char kinds[128];
	int max_seq;
	double t0 = pd_now();

	if (!rq->want_embeds || rq->want_latents || rq->want_pictures)
		return pd_errorf("this engine was opened to encode prompts: it makes embeddings (want_embeds), not "
				 "latents or pictures");
	if (rq->embeds || rq->n_prompts < 1)
		return pd_errorf("no prompt: give -p \"a prompt\" (or --prompts FILE)");
	if (rq->max_seq != PD_DEFAULT && (rq->max_seq < 1 || rq->max_seq > 512))
		return pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", rq->max_seq);
	for (int b = 0; b < rq->n_prompts; b++)
		if (!rq->prompts[b])
			return pd_errorf("prompt %d is missing", b);
	if (pd_engine_text_ok(rq->prompts, rq->n_prompts, rq->negative) || pd_engine_encoders_given(e))
		return -1;
	max_seq = rq->max_seq == PD_DEFAULT ? e->fam->default_max_seq(e->info_ok ? &e->info : NULL) : rq->max_seq;
	emb = pd_calloc(1, sizeof(*emb), "prompt embeddings");
	if (!emb)
		return -1;
	pd_backend_recover(e->be);
	if (pd_dit_encode(e->fam, emb, e->o.keep_encoders ? &e->encoders : NULL, &e->mp, e->be,
			  (char *const *)rq->prompts, rq->n_prompts, rq->negative, max_seq, 0, rq->n_prompts, 1)) {
		free(emb);
		return -1;
	}
	/* after, not before: a file that fails to load gets its one line */
	pd_engine_encoder_kinds(e->fam, kinds, sizeof(kinds));
	pd_log(1, "pdit: encoded %d prompt%s (%s, %d tokens) in %.2f s\n", rq->n_prompts, rq->n_prompts > 1 ? "s" : "",
	       kinds, max_seq, pd_now() - t0);
	res->embeds = emb;
	res->images = rq->n_prompts;
	res->txt_len = emb->txt_len;
	res->txt_width = emb->joint_dim;
	res->pooled_width = emb->pooled_dim;
	e->requests++;
	return 0;
}

static int pd_engine_run_scoped(struct pd_engine *e, const struct pd_request *rq, struct pd_result *res)
{
	int64_t per;
	float *all = NULL;
	int rc;

	memset(res, 0, sizeof(*res));
	if (e->dead)
		return pd_errorf("the engine stopped after a failure of rank %d; close it", e->world->failed_rank);
	if (e->o.one_request && e->requests > 0)
		return pd_errorf("this engine was opened for one request");
	if (e->o.encode_only)
		return pd_engine_run_encode(e, rq, res);
	if (rq->want_embeds)
		return pd_errorf("embeddings come from an engine opened with encode_only");
	if (!e->m)
		return pd_errorf("this engine has no transformer left (pd_engine_check or pd_engine_bench freed it): "
				 "close it and open another");
	/* a failure of the last request (an allocation) is not this one's */
	pd_backend_recover(e->be);
	if (pd_engine_ready(e, rq))
		return -1;
	/* another request's adapters: the terms change, the weights stay */
	if (pd_engine_agree(e, pd_engine_adapters(e, rq)))
		return -1;
	{
		/* the pictures in, through the VAE's encoder: what img2img adds
		 * to its share of the steps */
		int pics = (e->init_rgb && !e->init) + (e->ref_rgb && !e->ref);
		double t_pic = pd_now();

		if (pics)
			pd_engine_progress(e, PD_PHASE_PICTURES, t_pic, 0, pics, 0);
		rc = e->init_rgb && !e->init ? pd_engine_init_picture(e) : 0;
		if (!rc && e->ref_rgb && !e->ref)
			rc = pd_engine_ref_picture(e);
		if (pd_engine_agree(e, rc))
			return -1;
		if (pics)
			pd_engine_progress(e, PD_PHASE_PICTURES, t_pic, pics, pics, 1);
	}
	rc = pd_engine_vae_setup(e);
	if (pd_engine_agree(e, rc))
		return -1;
	pd_engine_notes(e, rq);
	per = e->ls.tokens * e->ls.packed_channels;
	all = pd_malloc((size_t)(e->e.batch * per) * sizeof(float), "latents");
	if (pd_engine_agree(e, !all)) {
		free(all);
		return -1;
	}
	e->running = rq;
	e->cancelled = 0;
	e->par.runner.on_step = rq->on_step || rq->cancel || e->o.on_progress ? pd_engine_on_step : NULL;
	e->par.runner.step_ctx = e;
	e->t_denoise = pd_now();
	pd_engine_progress(e, PD_PHASE_DENOISE, e->t_denoise, 0, e->p.steps - e->p.first_step, 0);
	rc = pd_engine_denoise(e, all, NULL);
	e->par.runner.on_step = NULL;
	e->running = NULL;
	e->requests++;
	if (rc) {
		free(all);
		return -1;
	}
	res->images = e->e.batch;
	res->height = e->p.height;
	res->width = e->p.width;
	res->steps = e->p.steps;
	res->strength = e->strength;
	res->frames = e->p.frames;
	res->guidance = e->p.guidance;
	res->true_cfg_scale = e->p.true_cfg_scale;
	res->seed = e->p.seed;
	res->tokens = e->ls.tokens;
	res->channels = e->ls.packed_channels;
	pd_engine_made_from(e, res->made_from, sizeof(res->made_from));
	res->adapters_cached = e->on_cached;
	rc = 0;
	if (rq->want_latents) {
		res->init = pd_engine_initial(e);
		rc = !res->init;
	}
	/* the decode is collective over each group's bands: all go, or none */
	if (pd_engine_agree(e, rc)) {
		free(all);
		pd_result_free(res);
		return -1;
	}
	if (rq->want_pictures && e->mp.vae) {
		/* the transformer's share goes before decoding: the VAE needs the memory */
		if (e->o.one_request)
			pd_engine_free_transformer(e);
		if (e->vae_bands > 0)
			rc = pd_engine_decode(e, all, res);
	}
	if (rq->want_latents)
		res->latents = all;
	else
		free(all);
	if (pd_engine_agree(e, rc)) {
		pd_result_free(res);
		return -1;
	}
	return 0;
}

int pd_engine_run(struct pd_engine *e, const struct pd_request *rq, struct pd_result *res)
{
	struct pd_engine_scope scope;
	int rc;

	if (!e || !rq || !res)
		return pd_errorf("pd_engine_run: %s is NULL", !e ? "the engine" : !rq ? "the request" : "the result");
	/* one request at a time: a second thread's call is refused, not run
	 * over the first's buffers */
	if (__atomic_exchange_n(&e->busy, 1, __ATOMIC_ACQUIRE)) {
		memset(res, 0, sizeof(*res));
		return pd_errorf("pd_engine_run: the engine is running another request (one at a time)");
	}
	pd_engine_enter(e, &scope);
	rc = pd_engine_run_scoped(e, rq, res);
	pd_engine_leave(&scope);
	__atomic_store_n(&e->busy, 0, __ATOMIC_RELEASE);
	return rc;
}

void pd_result_free(struct pd_result *res)
{
	if (!res)
		return;
	if (res->embeds)
		pd_embeds_free(res->embeds);
	free(res->embeds);
	free(res->latents);
	free(res->init);
	free(res->rgb);
	memset(res, 0, sizeof(*res));
}

int pd_result_save_embeds(const struct pd_result *res, const char *path, char *const *prompts, int n,
			  const char *negative)
{
	if (!res->embeds)
		return pd_errorf("no embeddings to write: the request did not ask for them (want_embeds)");
	return pd_embeds_save(res->embeds, path, prompts, n, negative);
}

/* The latents' file, once its arguments are known not NULL. */
static int pd_engine_save_latents_to(const struct pd_engine *e, const struct pd_result *res, const char *path)
{
	const struct pd_latent_shape *ls = &e->ls;
	int64_t shape[5] = { res->images, res->tokens, res->channels }, per = res->tokens * res->channels;
	struct pd_st_writer *w;
	float *init = NULL, *fin = NULL;
	int nd = 3, rc = -1;

	if (!res->latents || !res->init)
		return pd_errorf("no latents to write: the request did not ask for them (want_latents)");
	if (!(w = pd_st_writer_new()))
		return -1;
	if (e->fam->latents_unpacked) {
		int64_t s5[5] = { res->images, ls->channels, ls->frames, ls->h, ls->w };

		memcpy(shape, s5, sizeof(s5));
		nd = 5;
		init = pd_malloc((size_t)(res->images * per) * sizeof(float), "latents");
		fin = pd_malloc((size_t)(res->images * per) * sizeof(float), "latents");
		if (!init || !fin)
			goto out;
		for (int64_t b = 0; b < res->images; b++) {
			e->fam->unpack(ls, res->init + b * per, init + b * per);
			e->fam->unpack(ls, res->latents + b * per, fin + b * per);
		}
	}
	rc = pd_st_writer_add(w, "latents.init", PD_F32, nd, shape, init ? init : res->init) ||
	     pd_st_writer_add(w, "latents.final", PD_F32, nd, shape, fin ? fin : res->latents) ||
	     pd_st_writer_meta(w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(w, path) ? -1 : 0;
out:
	pd_st_writer_free(w);
	free(init);
	free(fin);
	return rc;
}

int pd_engine_save_latents(const struct pd_engine *e, const struct pd_result *res, const char *path)
{
	if (!e || !res || !path)
		return pd_errorf("pd_engine_save_latents: %s is NULL", !e ? "the engine" : !res ? "the result" : "the file name");
	return pd_engine_save_latents_to(e, res, path);
}
