/*
 * pd_engine.c - the engine: opened once (the mesh chosen and checked, every
 * rank's share of the model loaded), then any number of requests.
 *
 * Every phase ends with an agreement among the ranks (pd_comm_agree), so a
 * failure on one rank (a file only it cannot read) stops every rank cleanly
 * with the failing rank's message. Everything a user can get wrong is
 * checked before any weight is read; a failure in the middle of collective
 * work leaves the engine dead, and the caller ends the job.
 */
#include "pd_engine.h"
#include "pd_backend_cpu.h"
#include "pd_par_data.h"
#include "pd_plan.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pd_engine_options_init(struct pd_engine_options *o)
{
	memset(o, 0, sizeof(*o));
	o->dtype = "f32";
	o->comm_timeout = 1800;
	o->warmup_steps = 1;
	o->decode = 1;
	o->log_level = 1;
}

void pd_request_init(struct pd_request *rq)
{
	memset(rq, 0, sizeof(*rq));
	rq->guidance = -1;
	rq->true_cfg_scale = 1.0f;
	rq->seed = 42;
	rq->want_pictures = 1;
}

int pd_engine_dead(const struct pd_engine *e)
{
	return e->dead;
}

void pd_engine_enter(struct pd_engine *e, struct pd_engine_scope *s)
{
	s->log = pd_log_use(&e->log);
	s->be = e->be;
	s->threads = s->be ? pd_backend_enter(s->be) : 0;
}

void pd_engine_leave(const struct pd_engine_scope *s)
{
	if (s->be)
		pd_backend_leave(s->be, s->threads);
	pd_log_use(&s->log);
}

/* Tells the caller where a phase stands: begun at T0, DONE of TOTAL. */
static void pd_engine_progress(const struct pd_engine *e, enum pd_phase phase, double t0, int done, int total,
			       int finished)
{
	struct pd_progress p = { phase, done, total, pd_now() - t0, finished, e->p.frames > 1 };

	if (e->o.on_progress)
		e->o.on_progress(e->o.progress_ctx, &p);
}

/* Agreement over the world after a phase. */
static int pd_engine_agree(struct pd_engine *e, int failed)
{
	return pd_comm_agree(e->world, failed, &e->dead);
}

int pd_engine_agree_waiting(struct pd_engine *e, int failed)
{
	double d = e->world->timeout_s;
	int rc;

	e->world->timeout_s = 0;
	rc = pd_engine_agree(e, failed);
	e->world->timeout_s = d;
	return rc;
}

/* Threads per process: as asked, else the cores divided among the
 * processes on this machine. */
static int pd_engine_threads(struct pd_comm *world, int requested)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int local = pd_comm_local_size(world);

	if (requested > 0)
		return requested;
	if (cores < 1)
		cores = 1;
	return cores / local > 1 ? (int)(cores / local) : 1;
}

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
	if (rq->max_seq < 0 || rq->max_seq > 512)
		return pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", rq->max_seq);
	if (rq->n_prompts > PD_MAX_BATCH)
		return pd_errorf("%d prompts; at most %d make one run", rq->n_prompts, PD_MAX_BATCH);
	if (!e->fam->encode)
		return pd_errorf("the %s family takes embeddings, not prompts: give --embeds FILE", e->fam->name);
	e->max_seq = rq->max_seq ? rq->max_seq : e->fam->default_max_seq(&e->info);
	e->prompts = pd_calloc((size_t)rq->n_prompts, sizeof(char *), "prompts");
	if (!e->prompts)
		return -1;
	for (e->n_prompts = 0; e->n_prompts < rq->n_prompts; e->n_prompts++)
		if (!rq->prompts[e->n_prompts] || !(e->prompts[e->n_prompts] = pd_strdup(rq->prompts[e->n_prompts])))
			return rq->prompts[e->n_prompts] ? -1 : pd_errorf("prompt %d is missing", e->n_prompts);
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
	/* zeros until encoded; shaped now so the mesh can be checked */
	e->e.batch = e->n_prompts;
	e->e.txt_len = e->max_seq;
	e->e.joint_dim = J;
	e->e.pooled_dim = P;
	e->e.prompt = pd_calloc((size_t)(e->e.batch * e->max_seq * J) + 1, sizeof(float), "prompt embeddings");
	e->e.pooled = pd_calloc((size_t)(e->e.batch * P) + 1, sizeof(float), "prompt embeddings");
	if (!e->e.prompt || !e->e.pooled)
		return -1;
	if (e->negative) {
		e->e.neg_txt_len = e->max_seq;
		e->e.neg_prompt = pd_calloc((size_t)(e->e.batch * e->max_seq * J) + 1, sizeof(float), "prompt embeddings");
		e->e.neg_pooled = pd_calloc((size_t)(e->e.batch * P) + 1, sizeof(float), "prompt embeddings");
		if (!e->e.neg_prompt || !e->e.neg_pooled)
			return -1;
	}
	return 0;
}

/* The request's state, released before the next one. */
static void pd_engine_request_free(struct pd_engine *e)
{
	pd_embeds_free(&e->e);
	for (int i = 0; i < e->n_prompts; i++)
		free(e->prompts[i]);
	free(e->prompts);
	free(e->negative);
	free(e->init);
	e->prompts = NULL;
	e->n_prompts = 0;
	e->negative = NULL;
	e->init = NULL;
	e->ready = NULL;
}

/* Encodes this data-parallel group's prompts on its first rank, sends the
 * embeddings to the group's other ranks, and releases the encoders (at
 * open: before any transformer weight is read). FAILED: this rank failed
 * before; every rank goes through the agreement here all the same. */
static int pd_engine_encode(struct pd_engine *e, int failed)
{
	struct pd_comm *grp = e->mesh.replica;
	int64_t first, count, J = e->e.joint_dim, P = e->e.pooled_dim, T = e->max_seq;
	int rc = failed;

	double t_enc = pd_now();

	if (!e->prompts)
		return pd_engine_agree(e, rc);
	pd_engine_progress(e, PD_PHASE_ENCODE, t_enc, 0, (int)e->e.batch, 0);
	pd_dp_slice(e->e.batch, e->degree[PD_AXIS_DP], e->mesh.coord[PD_AXIS_DP], &first, &count);
	if (!rc && grp->rank == 0) {
		struct pd_embeds enc;
		double t0 = pd_now();

		/* the progress says how many; this is the detail */
		pd_log(2, "pdit: encoding %lld of %lld prompts here (%s, %lld tokens)\n", (long long)count,
		       (long long)e->e.batch, e->fam->encoders, (long long)T);
		/* --batch N repeats the one prompt: encode it once, copy it to
		 * every image of this group */
		int repeat = e->n_prompts < e->e.batch;

		rc = e->fam->encode(&enc, e->o.keep_encoders ? &e->encoders : NULL, &e->mp, e->be, e->prompts, e->n_prompts,
				    e->negative, (int)T, repeat ? 0 : first,
				    repeat ? 1 : count, 0);
		for (int64_t b = first; !rc && b < first + count; b++) {
			int64_t src = repeat ? 0 : b;

			memcpy(e->e.prompt + b * T * J, enc.prompt + src * T * J, (size_t)(T * J) * sizeof(float));
			memcpy(e->e.pooled + b * P, enc.pooled + src * P, (size_t)P * sizeof(float));
			if (e->negative) {
				memcpy(e->e.neg_prompt + b * T * J, enc.neg_prompt + src * T * J, (size_t)(T * J) * sizeof(float));
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
	      (grp->ops->bcast(grp, e->e.neg_prompt + first * T * J, (size_t)(count * T * J) * sizeof(float), 0) ||
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
		int64_t width[4] = { T * J, P, T * J, P };
		float *tmp = pd_malloc((size_t)(e->e.batch * (T * J > P ? T * J : P)) * sizeof(float) + 1,
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
/* The mesh and memory                                                     */
/* ----------------------------------------------------------------------- */

/* The work of the prepared request as the cost model takes it: BRANCHES
 * passes per picture, and with VAE the decode (from the VAE folder's
 * config, when it has one). */
static void pd_engine_plan_work(const struct pd_engine *e, int branches, int vae, struct pd_plan_work *w)
{
	struct pd_vae_config vc;

	memset(w, 0, sizeof(*w));
	w->info = &e->info;
	w->txt_len = e->e.txt_len;
	w->img_len = e->ls.tokens;
	w->img_w = e->ls.w / 2;
	w->images = (int)e->e.batch;
	w->branches = branches;
	w->weight_bytes = pd_dit_weight_bytes(&e->info, (double)pd_dtype_size(e->dt));
	w->compute_bytes = (int)pd_dtype_size(e->dt);
	if (vae && e->mp.vae && pd_is_dir(e->mp.vae) && e->fam->vae_cost) {
		struct pd_vae_cost cost;

		if (e->fam->vae_cost(e->mp.vae, &e->ls, &cost) == 0)
			pd_plan_vae_cost(w, &cost);
	} else if (vae && e->mp.vae && pd_is_dir(e->mp.vae) && pd_vae_config_load(&vc, e->mp.vae) == 0) {
		pd_plan_vae(w, &vc, e->p.height, e->p.width);
	}
}

/* Refuses a request that cannot fit before anything big is read or
 * allocated: a low estimate of a process's peak (its share of the
 * transformer's weights and the activations it allocates, or the VAE
 * decode's two largest feature maps, whichever is larger: the transformer
 * is freed before decoding) times the processes on this machine, against
 * the memory it has available. What is hard to know here (oneDNN's
 * scratch, the libraries, the text encoders) is left out, so a refusal is
 * certain, not cautious. */
static int pd_engine_check_memory(const struct pd_engine *e, int decodes, int loaded)
{
	double MB = 1048576.0, avail = pd_mem_available_mb(), weights, act, vae = 0, need;
	int local = pd_comm_local_size(e->world);
	struct pd_plan_work w;
	struct pd_plan_machine mc = { .devices = e->world->size, .gflops = 1 };
	struct pd_plan_mesh mesh = { .distrifusion = e->opt.distrifusion };
	struct pd_plan_cost cost;

	if (avail <= 0)
		return 0;
	memcpy(mesh.degree, e->degree, sizeof(mesh.degree));
	pd_engine_plan_work(e, 1, decodes, &w);
	if (pd_plan_cost(&w, &mc, &mesh, &cost))
		return -1;
	/* the lightest stage: low whichever stage a rank runs */
	weights = cost.weights_min_gb * 1e9 / MB;
	act = cost.activations_gb * 1e9 / MB;
	/* the decode in bands over the data-parallel group, or whole */
	if (w.vae_gflop > 0)
		vae = (e->o.vae_parallel < 0 || e->world->size == 1 ? w.vae_map_gb : cost.vae_gb) * 1e9 / MB;
	/* loaded: the weights are resident (and counted as used), and the
	 * transformer stays while the VAE decodes */
	need = loaded ? (act + vae) * local : (weights + act > vae ? weights + act : vae) * local;
	if (need <= avail)
		return 0;
	if (loaded)
		return pd_errorf("%dx%d needs at least %.1f GB more on this machine (%d process%s, each: activations "
				 "%.1f GB and the VAE decode %.1f GB beside the loaded weights) and %.1f GB are "
				 "available: choose a smaller size", e->p.width, e->p.height, need / 1024, local,
				 local > 1 ? "es" : "", act / 1024, vae / 1024, avail / 1024);
	return pd_errorf("%dx%d needs at least %.1f GB on this machine (%d process%s, each: transformer weights %.1f GB + "
			 "activations %.1f GB, or the VAE decode %.1f GB) and %.1f GB are available: choose a smaller "
			 "size, or more machines with tensor, sequence, pipeline parallel or the banded decode",
			 e->p.width, e->p.height, need / 1024, local, local > 1 ? "es" : "", weights / 1024, act / 1024,
			 vae / 1024, avail / 1024);
}

/* parallel = auto: rank 0 ranks the meshes as `pdit plan` does on this
 * machine (a product timed here, the processes of a node sharing its cores
 * and memory) and every rank takes its first choice; exact methods only
 * unless STALE. */
static int pd_engine_plan_mesh(struct pd_engine *e, const struct pd_mesh_limits *lim, int stale)
{
	/* ok, the degrees, DistriFusion */
	int msg[PD_AXIS_COUNT + 2] = { 0 };

	if (e->world->size == 1) {
		for (int x = 0; x < PD_AXIS_COUNT; x++)
			e->degree[x] = 1;
		return 0;
	}
	if (e->world->rank == 0) {
		struct pd_plan_work w;
		struct pd_plan_machine mc;
		struct pd_plan_row *rows = NULL;
		int n = 0;

		pd_engine_plan_work(e, lim->cfg_possible ? 2 : 1, 1, &w);
		if (pd_plan_machine_here(&mc, &w, e->world->size, pd_comm_local_size(e->world), 1, 0, -1) == 0 &&
		    pd_plan_list(&w, &mc, lim, &rows, &n) == 0) {
			for (int i = 0; i < n && !msg[0]; i++)
				if (rows[i].cost.fits && (stale || !rows[i].stale)) {
					msg[0] = 1;
					memcpy(msg + 1, rows[i].mesh.degree, sizeof(rows[i].mesh.degree));
					msg[PD_AXIS_COUNT + 1] = rows[i].mesh.distrifusion;
				}
			if (!msg[0])
				pd_errorf("--parallel %s: no %smesh of %d processes fits this machine's memory (see pdit plan)",
					  stale ? "auto-stale" : "auto", stale ? "" : "exact ", e->world->size);
		}
		free(rows);
	}
	if (e->world->ops->bcast(e->world, msg, sizeof(msg), 0))
		return -1;
	if (!msg[0])
		return e->world->rank == 0 ? -1 : pd_errorf("--parallel: rank 0 could not choose a mesh");
	memcpy(e->degree, msg + 1, sizeof(e->degree));
	e->opt.distrifusion = msg[PD_AXIS_COUNT + 1];
	return 0;
}

/* What the mesh must allow for the prepared request. */
static void pd_engine_limits(const struct pd_engine *e, struct pd_mesh_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->world = e->world->size;
	lim->heads = e->info.heads;
	lim->mlp = e->info.mlp_width;
	lim->cfg_possible = pd_gen_uses_cfg(&e->p, &e->e);
	lim->images = (int)e->e.batch;
	lim->max_pp = e->info.blocks;
	lim->distrifusion = e->opt.distrifusion;
}

/* The options alone, before any request: the model's parts and sizes, the
 * schedule, the mesh flags. */
static int pd_engine_configure(struct pd_engine *e, const struct pd_engine_options *o)
{
	struct pd_model_flags f = { o->model, o->transformer, o->vae, o->scheduler, o->text_encoder,
				    o->text_encoder_2, o->tokenizer, o->tokenizer_2 };
	const char *dtype = o->dtype ? o->dtype : "f32";

	if (pd_dtype_compute("--dtype", dtype, &e->dt) ||
	    pd_dtype_compute("--vae-dtype", o->vae_dtype ? o->vae_dtype : "f32", &e->vae_dt))
		return -1;
	e->quantize = PD_Q_F32;
	if (o->quantize) {
		const struct pd_qtype_info *q = NULL;
		enum pd_qtype t;

		/* block types and fp8: f16 and bf16 are no quantization */
		if (pd_quant_parse(o->quantize, &t) || !pd_quant_encodes(t) || !(q = pd_quant_info(t)) ||
		    (q->block_size == 1 && t != PD_Q_F8_E4M3 && t != PD_Q_F8_E5M2))
			return pd_errorf("--quantize %s: pdit encodes q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, fp8 or "
					 "f8_e5m2", o->quantize);
		e->quantize = t;
	}
	if (!(o->comm_timeout >= 0))
		return pd_errorf("--comm-timeout must be 0 (wait forever) or a number of seconds (got %g)", o->comm_timeout);
	e->world->timeout_s = o->comm_timeout;
	if (o->encode_only) {
		if (e->world->size > 1)
			return pd_errorf("encoding runs on one process (this job has %d)", e->world->size);
		if (pd_model_paths_resolve(&e->mp, &f, 1))
			return -1;
		/* a transformer, when the folder has one that reads, says the
		 * family and its text length; the encoders need nothing of it */
		if (e->mp.transformer && pd_family_find(e->mp.transformer, e->tconfig, &e->fam, &e->info) == 0)
			e->info_ok = 1;
		else if (!(e->fam = pd_family_named(o->family ? o->family : "flux")))
			return -1;
		if (!e->fam->encode)
			return pd_errorf("the %s family takes embeddings: it has no text encoders to run", e->fam->name);
		return 0;
	}
	if (pd_model_paths_resolve(&e->mp, &f, 0) || pd_family_find(e->mp.transformer, e->tconfig, &e->fam, &e->info))
		return -1;
	e->info_ok = 1;
	if (e->quantize != PD_Q_F32 && e->info.kept_fraction == 0) {
		/* the estimates: the blocks' weights held as encoded */
		const struct pd_qtype_info *q = pd_quant_info(e->quantize);
		double blocks = 0;

		for (int b = 0; b < e->info.blocks; b++)
			blocks += e->info.block_params[b];
		e->info.kept_fraction = blocks + e->info.fixed_params > 0 ? blocks / (blocks + e->info.fixed_params) : 0;
		e->info.kept_bytes = (double)q->block_bytes / q->block_size;
	}
	e->fam->defaults(&e->info, &e->dflt);
	if (e->mp.scheduler) {
		if (pd_scheduler_load(&e->sched, e->mp.scheduler))
			return -1;
	} else {
		pd_scheduler_default(&e->sched, &e->dflt);
	}
	e->shift0 = e->sched.shift;
	e->dynamic0 = e->sched.dynamic;
	if (o->distrifusion && o->ring)
		return pd_errorf("--distrifusion-degree and --ring-degree cannot both be given");
	if (o->warmup_steps < 0)
		return pd_errorf("--warmup-steps must not be negative");
	if (o->patches < 0 || (o->patches > 0 && o->pp <= 1))
		return pd_errorf("--num-patches needs --pipefusion-degree 2 or more, and must be positive");
	if (o->warmup_steps < 1 && (o->distrifusion > 1 || (o->pp > 1 && o->patches != 1)))
		/* the first step has no earlier keys and values to attend to */
		return pd_errorf("--warmup-steps must be at least 1 with %s", o->distrifusion > 1 ?
				 "--distrifusion-degree" : "--pipefusion-degree (unless --num-patches 1)");
	e->opt.distrifusion = o->distrifusion > 0;
	e->opt.warmup_steps = o->warmup_steps;
	e->opt.patches = o->patches;
	e->degree[PD_AXIS_DP] = o->dp;
	e->degree[PD_AXIS_CFG] = o->cfg_parallel ? 2 : 0;
	e->degree[PD_AXIS_PP] = o->pp;
	e->degree[PD_AXIS_RING] = o->distrifusion ? o->distrifusion : o->ring;
	e->degree[PD_AXIS_ULYSSES] = o->ulysses;
	e->degree[PD_AXIS_TP] = o->tp;
	return 0;
}

/* The mesh for the prepared request (or a picture of the defaults). */
static int pd_engine_choose_mesh(struct pd_engine *e)
{
	const struct pd_engine_options *o = &e->o;
	struct pd_mesh_limits lim;
	int given = o->dp || o->tp || o->ulysses || o->ring || o->pp || o->cfg_parallel || o->distrifusion;

	pd_engine_limits(e, &lim);
	if (o->parallel) {
		int stale = strcmp(o->parallel, "auto-stale") == 0;

		if (!stale && strcmp(o->parallel, "auto"))
			return pd_errorf("--parallel must be auto or auto-stale (got '%s')", o->parallel);
		if (given)
			return pd_errorf("--parallel %s chooses the mesh: give it or degree flags, not both", o->parallel);
		e->mesh_auto = 2;
		lim.distrifusion = 0;
		return pd_engine_plan_mesh(e, &lim, stale);
	}
	if (!given) {
		e->mesh_auto = e->world->size > 1;
		return pd_mesh_choose(e->degree, &lim);
	}
	for (int x = 0; x < PD_AXIS_COUNT; x++)
		if (e->degree[x] <= 0)
			e->degree[x] = 1;
	return pd_mesh_check(e->degree, &lim);
}

/* ----------------------------------------------------------------------- */
/* Preparing a request                                                     */
/* ----------------------------------------------------------------------- */

/* Everything about RQ that can be checked without the mesh's communicators
 * (this rank alone). */
static int pd_engine_prepare_local(struct pd_engine *e, const struct pd_request *rq_in)
{
	/* the family's defaults for what the request leaves out; a family
	 * whose guidance is CFG (Wan) runs it with the negative prompt, ""
	 * when none is given, as its pipeline does */
	struct pd_request r = *rq_in, *rq = &r;

	pd_engine_request_free(e);
	r.height = r.height ? r.height : e->dflt.height;
	r.width = r.width ? r.width : e->dflt.width;
	r.frames = r.frames ? r.frames : e->dflt.frames;
	r.guidance = r.guidance >= 0 ? r.guidance : e->dflt.guidance;
	if (e->dflt.guidance_cfg) {
		if (r.true_cfg_scale > 1)
			return pd_errorf("the %s family's --guidance is its classifier-free guidance: give --guidance %g, "
					 "not --true-cfg-scale", e->fam->name, r.true_cfg_scale);
		r.true_cfg_scale = r.guidance;
		r.guidance = 0;
		if (r.true_cfg_scale > 1 && !r.negative && r.n_prompts > 0)
			r.negative = "";
	}
	if (rq->height < 16 || rq->width < 16 || rq->height % 16 || rq->width % 16)
		return pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", rq->height,
				 rq->width);
	if (rq->height > PD_MAX_SIDE || rq->width > PD_MAX_SIDE)
		return pd_errorf("-H/--height and -W/--width must be at most %d (got %dx%d)", PD_MAX_SIDE, rq->height,
				 rq->width);
	if (rq->steps < 0 || rq->steps > PD_MAX_STEPS)
		return pd_errorf("--steps must be between 1 and %d (got %d)", PD_MAX_STEPS, rq->steps);
	if (rq->batch < 0 || rq->batch > PD_MAX_BATCH)
		return pd_errorf("--batch must be positive and at most %d (got %d)", PD_MAX_BATCH, rq->batch);
	if (rq->true_cfg_scale < 0)
		return pd_errorf("--true-cfg-scale must not be negative");
	if (rq->frames < 0)
		return pd_errorf("--frames must be positive (got %d)", rq->frames);
	e->p.frames = rq->frames;
	if (pd_engine_inputs(e, rq) || e->fam->latent_shape(&e->ls, &e->info, e->p.frames, rq->height, rq->width) ||
	    (rq->batch > 0 && pd_embeds_repeat(&e->e, rq->batch)))
		return -1;
	if (rq->want_pictures && !e->mp.vae && !rq->want_latents)
		return pd_errorf("no VAE to decode with: give --vae DIR (or --out-latents FILE to keep only latents)");
	if (rq->want_pictures && !e->o.decode)
		return pd_errorf("this engine was opened without a VAE: it makes latents, not pictures");
	e->p.height = rq->height;
	e->p.width = rq->width;
	e->p.steps = rq->steps ? rq->steps : e->dflt.steps;
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
	return 0;
}

/* FNV-1a over N bytes, continuing H. */
static uint64_t pd_engine_hash(uint64_t h, const void *p, size_t n)
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
static int pd_engine_same_everywhere(struct pd_engine *e, const struct pd_request *rq)
{
	enum { N = 8 };
	int64_t per = e->ls.tokens * e->ls.packed_channels, mine[N], *all;
	const struct pd_embeds *x = &e->e;
	uint64_t h = 14695981039346656037ull;
	int rc = 0;

	if (e->world->size == 1)
		return 0;
	/* prompts are encoded later, from the same strings: what was read from files counts */
	if (rq->embeds) {
		h = pd_engine_hash(h, x->prompt, (size_t)(x->batch * x->txt_len * x->joint_dim) * sizeof(float));
		h = pd_engine_hash(h, x->pooled, (size_t)(x->batch * x->pooled_dim) * sizeof(float));
	}
	if (rq->embeds && x->neg_prompt) {
		h = pd_engine_hash(h, x->neg_prompt, (size_t)(x->batch * x->neg_txt_len * x->joint_dim) * sizeof(float));
		h = pd_engine_hash(h, x->neg_pooled, (size_t)(x->batch * x->pooled_dim) * sizeof(float));
	}
	if (e->init)
		h = pd_engine_hash(h, e->init, (size_t)(x->batch * per) * sizeof(float));
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

/* ----------------------------------------------------------------------- */
/* Open and close                                                          */
/* ----------------------------------------------------------------------- */

/* Every weights file the run will read, opened and its header checked
 * (sizes, offsets within the file) before the first computation: a
 * truncated transformer must not surface after the prompts were encoded.
 * PROMPTS: the text encoders will run. */
static int pd_engine_check_files(const struct pd_engine *e, int prompts)
{
	const struct {
		const char *path, *stem;
	} parts[] = { { e->o.encode_only ? NULL : e->mp.transformer, "diffusion_pytorch_model" },
		      { e->o.decode && !e->o.encode_only ? e->mp.vae : NULL, "diffusion_pytorch_model" },
		      { prompts ? e->mp.text_encoder : NULL, "model" },
		      { prompts ? e->mp.text_encoder_2 : NULL, "model" } };

	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		struct pd_st *st;

		if (!parts[i].path)
			continue;
		if (pd_st_open_path(&st, parts[i].path, parts[i].stem))
			return -1;
		pd_st_close(st);
	}
	return 0;
}

/* Who decodes the prepared request's pictures, loading the VAE where it is
 * needed first: every rank of a data-parallel group takes a band, or the
 * group's writer decodes alone. */
static int pd_engine_vae_setup(struct pd_engine *e)
{
	struct pd_vae_hooks hooks = { 0, 1, NULL, NULL, NULL, NULL, NULL };

	if (!e->o.decode || !e->mp.vae || e->vae_rows == e->ls.h)
		return 0;
	pd_vae_par_free(&e->vae_par);
	e->vae_rows = 0;
	e->vae_bands = 0;
	if (e->o.vae_parallel >= 0 && e->mesh.replica->size > 1)
		pd_vae_par_hooks(&e->vae_par, e->mesh.replica, e->ls.h, &hooks);
	else if (!pd_parallel_is_writer(&e->mesh))
		hooks.bands = 0;
	if (hooks.bands > 0 && e->fam->vae_load) {
		/* a family's own decoder (Wan's video VAE), on the same seam */
		if (!e->fv && e->fam->vae_load(&e->fv, e->mp.vae, e->be))
			return -1;
		if (e->fam->vae_channels(e->fv) != e->ls.channels)
			return pd_errorf("%s: the VAE has %d latent channels but the transformer makes %d", e->mp.vae,
					 e->fam->vae_channels(e->fv), e->ls.channels);
		e->fam->vae_set_hooks(e->fv, &hooks);
	} else if (hooks.bands > 0) {
		if (!e->v && pd_vae_load(&e->v, e->mp.vae, e->be))
			return -1;
		if (pd_vae_get_config(e->v)->latent_channels != e->ls.channels)
			return pd_errorf("%s: the VAE has %d latent channels but the transformer makes %d", e->mp.vae,
					 pd_vae_get_config(e->v)->latent_channels, e->ls.channels);
		pd_vae_set_hooks(e->v, &hooks);
	}
	/* set up for this height: only now */
	e->vae_bands = hooks.bands;
	e->vae_rows = e->ls.h;
	return 0;
}

/* The mesh's communicators, the backend, the planned request's prompts,
 * this rank's weights. */
static int pd_engine_load(struct pd_engine *e, struct pd_engine_scope *scope)
{
	struct pd_dit_shard sh;
	double t0;
	int rc;

	/* a split is collective: MPI's own failure ends the job */
	if (pd_mesh_create(&e->mesh, e->world, e->degree))
		return -1;
	e->mesh_ok = 1;
	sh = pd_parallel_shard(&e->mesh, &e->info);
	sh.quantize = e->quantize;
	rc = pd_backend_cpu_new(&e->be, e->dt, pd_engine_threads(e->world, e->o.threads));
	if (!rc) {
		if (e->be->note)
			pd_log(1, "pdit: note: %s\n", e->be->note);
		e->be->conv_compute = e->vae_dt;
		/* the weights are laid out for the threads that will run them */
		scope->be = e->be;
		scope->threads = pd_backend_enter(e->be);
	}
	t0 = pd_now();
	if (pd_engine_encode(e, rc))
		return -1;
	e->encode_seconds = pd_now() - t0;
	t0 = pd_now();
	pd_engine_progress(e, PD_PHASE_LOAD, t0, 0, 0, 0);
	if (pd_fault("load", 0) || e->fam->load(&e->m, e->mp.transformer, e->tconfig, e->be, &sh))
		return -1;
	/* a broken VAE must not surface after minutes of denoising */
	if (pd_engine_vae_setup(e))
		return -1;
	e->load_seconds = pd_now() - t0;
	pd_engine_progress(e, PD_PHASE_LOAD, t0, 0, 0, 1);
	if (pd_parallel_setup(&e->par, &e->mesh, e->m, e->e.batch, &e->opt))
		return -1;
	e->par_ok = 1;
	return 0;
}

int pd_engine_open(struct pd_engine **out, struct pd_comm *world, const struct pd_engine_options *o,
		   const struct pd_request *plan)
{
	struct pd_engine *e = pd_calloc(1, sizeof(*e), "engine");
	struct pd_engine_scope scope;
	struct pd_request dflt;
	int rc;

	*out = NULL;
	if (!e)
		return pd_comm_agree(world, 1, NULL);
	e->world = world;
	e->o = *o;
	e->log = (struct pd_log_sink){ o->log_level, o->log, o->log_ctx };
	pd_engine_enter(e, &scope);
	/* the strings are the caller's: only the resolved paths are kept */
	e->o.model = e->o.transformer = e->o.vae = e->o.scheduler = NULL;
	e->o.text_encoder = e->o.text_encoder_2 = e->o.tokenizer = e->o.tokenizer_2 = e->o.dtype = e->o.vae_dtype = NULL;
	e->o.family = e->o.transformer_config = NULL;
	if (o->transformer_config && !(e->tconfig = pd_strdup(o->transformer_config))) {
		free(e);
		return pd_comm_agree(world, 1, NULL);
	}
	if (!plan) {
		/* the mesh and the memory for one picture of the defaults */
		pd_request_init(&dflt);
		dflt.embeds = NULL;
		dflt.want_pictures = o->decode;
		plan = &dflt;
	}
	rc = pd_engine_configure(e, o);
	if (!rc)
		rc = pd_engine_check_files(e, o->encode_only || (plan != &dflt && plan->n_prompts > 0));
	if (o->encode_only) {
		/* the encoders are loaded per request: a backend is all there is to open */
		/* one process alone: the caller's threads (OMP_NUM_THREADS, its cpuset) unless told */
		if (!rc && !(rc = pd_backend_cpu_new(&e->be, e->dt, o->threads))) {
			scope.be = e->be;
			scope.threads = pd_backend_enter(e->be);
		}
		if (rc)
			goto fail;
		*out = e;
		pd_engine_leave(&scope);
		return 0;
	}
	if (!rc && plan != &dflt)
		rc = pd_engine_prepare_local(e, plan);
	if (!rc && plan == &dflt) {
		/* no request yet: the mesh for a batch of one (or one per
		 * data-parallel group asked for), without CFG */
		e->e.batch = o->dp > 1 ? o->dp : 1;
		e->p.frames = e->dflt.frames;
		e->p.height = e->dflt.height;
		e->p.width = e->dflt.width;
		rc = e->fam->latent_shape(&e->ls, &e->info, e->p.frames, e->p.height, e->p.width);
	}
	if (pd_comm_agree(world, rc, &e->dead) || (plan != &dflt && pd_engine_same_everywhere(e, plan)))
		goto fail;
	rc = pd_engine_choose_mesh(e) ||
	     (plan != &dflt && pd_engine_check_memory(e, plan->want_pictures, 0));
	if (pd_comm_agree(world, rc, &e->dead))
		goto fail;
	e->o.parallel = NULL;
	rc = pd_engine_load(e, &scope);
	if (pd_comm_agree(world, rc, &e->dead))
		goto fail;
	/* the plan's prompts are encoded: its first run goes straight on */
	e->ready = plan != &dflt ? plan : NULL;
	*out = e;
	pd_engine_leave(&scope);
	return 0;
fail:
	pd_engine_leave(&scope);
	pd_engine_close(e);
	return -1;
}

void pd_engine_close(struct pd_engine *e)
{
	struct pd_log_sink caller;

	if (!e)
		return;
	/* the log alone: freeing computes nothing */
	caller = pd_log_use(&e->log);
	if (e->par_ok)
		pd_parallel_free(&e->par);
	pd_vae_free(e->v);
	if (e->fv)
		e->fam->vae_free(e->fv);
	pd_vae_par_free(&e->vae_par);
	if (e->encoders)
		e->fam->encoders_free(e->encoders);
	pd_dit_free(e->m);
	pd_backend_free(e->be);
	if (e->mesh_ok)
		pd_mesh_free(&e->mesh);
	pd_scheduler_free(&e->sched);
	pd_engine_request_free(e);
	pd_model_paths_free(&e->mp);
	free(e->tconfig);
	free(e);
	pd_log_use(&caller);
}

/* ----------------------------------------------------------------------- */
/* Running a request                                                       */
/* ----------------------------------------------------------------------- */

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
		pd_mesh_format(e->degree, e->opt.distrifusion, mesh, sizeof(mesh));
		pd_log(1, "pdit: %d processes, mesh %s%s, %d thread%s each\n", e->world->size, mesh,
		       e->mesh_auto == 2 ? " (chosen by the cost model, as pdit plan ranks them)" :
		       e->mesh_auto ? " (chosen automatically)" : "", e->be->threads, e->be->threads > 1 ? "s" : "");
	}
	if (e->p.frames > 1)
		pd_log(1, "pdit: %lld video%s of %d frames %dx%d, %d steps, seed %llu%s\n", (long long)e->e.batch,
		       e->e.batch > 1 ? "s" : "", e->p.frames, e->p.width, e->p.height, e->p.steps,
		       (unsigned long long)rq->seed, pd_gen_uses_cfg(&e->p, &e->e) ? ", CFG" : "");
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
	int f = e->fam->vae_decode ? e->fam->vae_scale : pd_vae_scale(pd_vae_get_config(e->v));
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

		if (e->fam->vae_decode ? e->fam->vae_decode(e->fv, &e->ls, all + b * per, rgb + (size_t)i * npx * 3)
				       : pd_decode_image(e->v, e->fam, &e->ls, all + b * per, rgb + (size_t)i * npx * 3, NULL,
							 NULL)) {
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

	if (e->running->on_step)
		e->running->on_step(e->running->step_ctx, step, e->p.steps);
	pd_engine_progress(e, PD_PHASE_DENOISE, e->t_denoise, step + 1, e->p.steps, step + 1 == e->p.steps);
	if (!e->running->cancel || step + 1 == e->p.steps)
		return 0;
	/* every process stops after the same step, or none does; the data-
	 * parallel groups meet here too (they run the same steps) */
	stop = *e->running->cancel != 0;
	if (e->world->size > 1 && e->world->ops->allreduce(e->world, &stop, 1, PD_COMM_I32, PD_COMM_MAX))
		return -1;
	if (!stop)
		return 0;
	e->cancelled = 1;
	pd_errorf("cancelled after step %d of %d", step + 1, e->p.steps);
	return 1;
}

/* An engine opened to encode: the request's prompts to embeddings, with
 * the token ids. */
static int pd_engine_run_encode(struct pd_engine *e, const struct pd_request *rq, struct pd_result *res)
{
	struct pd_embeds *emb;
	int max_seq;
	double t0 = pd_now();

	if (!rq->want_embeds || rq->want_latents || rq->want_pictures)
		return pd_errorf("this engine was opened to encode prompts: it makes embeddings (want_embeds), not "
				 "latents or pictures");
	if (rq->embeds || rq->n_prompts < 1)
		return pd_errorf("no prompt: give -p \"a prompt\" (or --prompts FILE)");
	if (rq->max_seq < 0 || rq->max_seq > 512)
		return pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", rq->max_seq);
	for (int b = 0; b < rq->n_prompts; b++)
		if (!rq->prompts[b])
			return pd_errorf("prompt %d is missing", b);
	max_seq = rq->max_seq ? rq->max_seq : e->fam->default_max_seq(e->info_ok ? &e->info : NULL);
	emb = pd_calloc(1, sizeof(*emb), "prompt embeddings");
	if (!emb)
		return -1;
	pd_backend_recover(e->be);
	if (e->fam->encode(emb, e->o.keep_encoders ? &e->encoders : NULL, &e->mp, e->be, (char *const *)rq->prompts,
			   rq->n_prompts, rq->negative, max_seq, 0,
			   rq->n_prompts, 1)) {
		free(emb);
		return -1;
	}
	/* after, not before: a file that fails to load gets its one line */
	pd_log(1, "pdit: encoded %d prompt%s (%s, %d tokens) in %.2f s\n", rq->n_prompts, rq->n_prompts > 1 ? "s" : "",
	       e->fam->encoders, max_seq, pd_now() - t0);
	res->embeds = emb;
	res->images = rq->n_prompts;
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
	/* a failure of the last request (an allocation) is not this one's */
	pd_backend_recover(e->be);
	if (e->ready != rq) {
		e->ready = NULL;
		if (pd_engine_prepare(e, rq) || pd_engine_encode(e, 0))
			return -1;
	}
	e->ready = NULL;
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
	pd_engine_progress(e, PD_PHASE_DENOISE, e->t_denoise, 0, e->p.steps, 0);
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
	res->frames = e->p.frames;
	res->guidance = e->p.guidance;
	res->true_cfg_scale = e->p.true_cfg_scale;
	res->seed = e->p.seed;
	res->tokens = e->ls.tokens;
	res->channels = e->ls.packed_channels;
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
		if (e->o.one_request) {
			/* the transformer's share goes before decoding: the VAE needs the memory */
			pd_dit_free(e->m);
			e->m = NULL;
		}
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

	pd_engine_enter(e, &scope);
	rc = pd_engine_run_scoped(e, rq, res);
	pd_engine_leave(&scope);
	return rc;
}

void pd_result_free(struct pd_result *res)
{
	if (res->embeds)
		pd_embeds_free(res->embeds);
	free(res->embeds);
	free(res->latents);
	free(res->init);
	free(res->rgb);
	memset(res, 0, sizeof(*res));
}
