/*
 * pd_engine_open.c - an engine opened once: the options checked, the mesh
 * chosen (as given, by rule, or by the cost model) and checked against the
 * memory, every rank's share of the model loaded; closed at the end.
 *
 * Every phase ends with an agreement among the ranks (pd_comm_agree), so a
 * failure on one rank (a file only it cannot read) stops every rank cleanly
 * with the failing rank's message. Everything a user can get wrong is
 * checked before any weight is read; a failure in the middle of collective
 * work leaves the engine dead, and the caller ends the job.
 */
#include "pd_engine.h"
#include "pd_backend_new.h"
#include "pd_comm.h"
#include "pd_video.h"
#include "pd_plan.h"
#include "pd_safetensors.h"
#include "pd_lora.h"
#include "pd_util.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char pd_about[512];

static void pd_build_about_once(void)
{
	snprintf(pd_about, sizeof(pd_about), "backends: cpu%s\ncommunicators: %s\nvideos: %s",
		 pd_backend_cuda_built() ? ", cuda" : " (cuda: -DPDIT_CUDA=ON with the CUDA toolkit)",
		 !pd_comm_mpi_available() ? "one process (mpi: -DPDIT_MPI=ON with Open MPI)"
		 : pd_comm_nccl_available() ? "mpi, nccl"
		 : pd_backend_cuda_built() ? "mpi (nccl: not found beside the CUDA toolkit)" : "mpi",
		 pd_video_built() ? "MP4, MKV, MOV (FFmpeg)" : "none, frames as PNG (-DPDIT_VIDEO=ON with FFmpeg)");
}

const char *pd_build_about(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, pd_build_about_once);
	return pd_about;
}

void pd_engine_options_init(struct pd_engine_options *o)
{
	memset(o, 0, sizeof(*o));
	o->dtype = "f32";
	o->device = -1;
	o->comm_timeout = 1800;
	o->warmup_steps = 1;
	o->decode = 1;
	o->log_level = 1;
}

void pd_request_init(struct pd_request *rq)
{
	memset(rq, 0, sizeof(*rq));
	rq->guidance = -1;
	rq->height = rq->width = rq->frames = rq->steps = rq->batch = rq->max_seq = PD_DEFAULT;
	rq->true_cfg_scale = -1;
	rq->strength = PD_DEFAULT;
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

int pd_engine_cancelled(const struct pd_engine *e)
{
	return e->cancelled;
}

int pd_engine_shape_ok(const struct pd_engine *e, int frames, int height, int width)
{
	struct pd_latent_shape ls;

	return e->fam->latent_shape(&ls, &e->info, frames, height, width) ? -1 : 0;
}

void pd_engine_about(const struct pd_engine *e, struct pd_engine_about *a)
{
	memset(a, 0, sizeof(*a));
	a->family = e->fam ? e->fam->name : "";
	a->model = e->mp.root ? e->mp.root : e->mp.transformer ? e->mp.transformer : "";
	a->guidance_is_cfg = e->dflt.guidance_cfg;
	a->frames = e->p.frames > 0 ? e->p.frames : 1;
	a->latents_unpacked = e->fam && e->fam->latents_unpacked;
	a->default_width = e->dflt.width;
	a->default_height = e->dflt.height;
	a->default_steps = e->dflt.steps;
	a->default_frames = e->dflt.frames;
	pd_mesh_format(e->degree, a->mesh, sizeof(a->mesh));
	pd_mesh_format_short(e->degree, a->mesh_short, sizeof(a->mesh_short));
	a->threads = e->be ? e->be->threads : 0;
	a->backend = e->be ? e->be->ops->name : "";
	a->device = e->be ? e->be->device : "";
	a->dtype = e->dt == PD_BF16 ? "bf16" : "f32";
	a->vae_dtype = e->vae_dt == PD_BF16 ? "bf16" : "f32";
	a->quant_products = !e->be || e->be->int8_layers == 0 ? "bf16" :
			    e->be->qproducts == PD_QP_INT8_W256 ? "int8-256" : "int8";
	a->int8_layers = e->be ? e->be->int8_layers : 0;
	/* (PipeFusion's stages attend over their own K/V buffers) */
	a->ring_attention = e->degree[PD_AXIS_RING] <= 1 || e->degree[PD_AXIS_PP] > 1 ? "" :
			    e->opt.ring_gathered ? "gathered" : "merged";
	a->load_seconds = e->load_seconds;
	a->encode_seconds = e->encode_seconds;
}

void pd_engine_set_log_level(struct pd_engine *e, int level)
{
	e->log.level = level;
}

void pd_engine_set_progress(struct pd_engine *e, void (*on_progress)(void *ctx, const struct pd_progress *p),
			    void *ctx)
{
	e->o.on_progress = on_progress;
	e->o.progress_ctx = ctx;
}

/* Tells the caller where a phase stands: begun at T0, DONE of TOTAL. */
void pd_engine_progress(struct pd_engine *e, enum pd_phase phase, double t0, int done, int total, int finished)
{
	struct pd_progress p = { phase, done, total, pd_now() - t0, finished, e->p.frames > 1,
				 phase == PD_PHASE_DECODE ? (int)e->e.batch : 0 };

	if (e->o.on_progress)
		e->o.on_progress(e->o.progress_ctx, &p);
}

/* Agreement over the world after a phase. */
int pd_engine_agree(struct pd_engine *e, int failed)
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

int pd_engine_threads_ok(int threads)
{
	/* OpenMP and oneDNN make a pool of that many; tens of thousands
	 * crashed oneDNN's setup */
	if (threads < 0 || threads > PD_MAX_THREADS)
		return pd_errorf("-t/--threads must be %s %d (got %d)", threads < 0 ? "at least" : "at most",
				 threads < 0 ? 1 : PD_MAX_THREADS, threads);
	return 0;
}

/* The communicator's count of this process's CPUs, but where
 * OMP_PROC_BIND or OMP_PLACES is set: OpenMP pinned this thread to its
 * first place before main, so the masks are no measure; then the CPUs the
 * process started with (OpenMP counted them first), shared by every
 * process of the machine, and no binding to speak of. */
static void pd_engine_cpu_share(struct pd_comm *world, struct pd_cpu_share *s)
{
	pd_comm_cpu_share(world, s);
	if (omp_get_proc_bind() != omp_proc_bind_false) {
		s->cpus = omp_get_num_procs();
		s->sharing = pd_comm_local_size(world);
		s->used = s->online;
	}
}

/* Threads per process: as asked, else the CPUs it may run on divided
 * among the processes of this machine that may run there too (a cpuset or
 * mpirun's binding counted: threads beyond the CPUs a process is bound to
 * only take turns on them). */
static int pd_engine_threads(struct pd_comm *world, int requested)
{
	struct pd_cpu_share s;

	if (requested > 0)
		return requested;
	pd_engine_cpu_share(world, &s);
	return s.sharing > 0 && s.cpus / s.sharing > 1 ? s.cpus / s.sharing : 1;
}

/* Said once (rank 0, its machine): a job whose processes are bound to
 * fewer CPUs than the machine has. Open MPI binds each process to one
 * core with -np 2 or fewer (to a socket above), which leaves a large
 * machine's cores idle. */
static void pd_engine_say_binding(struct pd_engine *e, int threads)
{
	struct pd_cpu_share s;

	pd_engine_cpu_share(e->world, &s);
	if (e->world->rank != 0 || e->world->size < 2 || e->be->queue || s.used >= s.online)
		return;
	pd_log(1, "pdit: note: the %d process%s on this machine may run on %d of its %d CPUs (%d thread%s each): "
		  "mpirun binds each process to one core with -np 2 or fewer, to a socket above; where that is "
		  "the cause, mpirun --bind-to none lets them use every CPU (it cannot widen a container's cpuset)\n",
	       pd_comm_local_size(e->world), pd_comm_local_size(e->world) == 1 ? "" : "es", s.used, s.online, threads,
	       threads == 1 ? "" : "s");
}

/* Every rank alike, in one exchange: auto's products int8 only where
 * every rank's CPU takes them, so a mesh of CPUs with and without VNNI
 * multiplies alike; tensor parallel's whole inputs only where every rank
 * would gather them (shards that split a layer differently would not
 * meet); ring's gathered form only where every rank takes it (its
 * exchange is another). */
static int pd_engine_products_agree(struct pd_engine *e)
{
	int mine[3], *all, low = 1, whole = 1, gathered = 1, ring = e->ring_form;

	mine[0] = !e->int8_unfit && e->be->qproducts == PD_QP_INT8;
	mine[1] = e->info.tp_whole_inputs && e->be->qproducts != PD_QP_DECODE;
	/* auto's form where every rank multiplies in int8, a form asked for as
	 * asked */
	mine[2] = ring >= 0 ? ring : e->info.ring_gathered && e->be->qproducts != PD_QP_DECODE;
	all = pd_malloc(sizeof(mine) * (size_t)e->world->size, "the products' agreement");
	if (pd_engine_agree(e, !all)) {
		free(all);
		return -1;
	}
	if (pd_comm_allgather(e->world, mine, sizeof(mine), all)) {
		e->dead = 1;
		free(all);
		return pd_errorf("cannot agree on the quantized layers' products with the other processes");
	}
	for (int r = 0; r < e->world->size; r++) {
		low = all[3 * r] < low ? all[3 * r] : low;
		whole &= all[3 * r + 1];
		gathered &= all[3 * r + 2];
	}
	free(all);
	if (pd_engine_products_auto(&e->o))
		e->be->qproducts = low ? PD_QP_INT8 : PD_QP_DECODE;
	e->info.tp_whole_inputs = whole && e->be->qproducts != PD_QP_DECODE;
	e->info.ring_gathered = gathered ? (ring > 0 ? 2 : 1) : 0;
	e->opt.ring_gathered = e->info.ring_gathered;
	return 0;
}

/* The backend O asks for, computing in DT with THREADS (CPU), said in the
 * log: what computes on each process is the first thing a slow run is
 * asked about. */
static int pd_engine_backend_new(struct pd_engine *e, enum pd_dtype dt, int threads)
{
	struct pd_backend_config cfg = { dt, threads, e->o.device, e->o.op_times, -1 };
	const char *cm = e->o.comm ? e->o.comm : "auto";

	if (pd_backend_qproducts(e->o.quant_products, &cfg.quant_products))
		return -1;

	if (strcmp(cm, "auto") && strcmp(cm, "mpi") && strcmp(cm, "nccl"))
		return pd_errorf("--comm %s: unknown (mpi, nccl or auto)", cm);
	if (!strcmp(cm, "nccl") && !pd_comm_nccl_available())
		return pd_errorf("--comm nccl: this pdit was built without NCCL");
	if (pd_backend_new(&e->be, e->o.backend, &cfg))
		return -1;
	if (!strcmp(cm, "nccl") && !e->be->queue)
		return pd_errorf("--comm nccl: the %s backend's buffers are host memory (NCCL moves a GPU's: --backend cuda)",
				 e->be->ops->name);
	/* NCCL takes one GPU a process: several processes on one GPU (the
	 * check machine's meshes) go through MPI's staging */
	e->opt.nccl = !strcmp(cm, "nccl") ||
		      (!strcmp(cm, "auto") && pd_comm_nccl_available() && e->be->queue && e->world->size > 1 &&
		       pd_comm_local_size(e->world) <= pd_backend_gpus());
	/* the first request says it for the job (pd_engine_run.c) */
	pd_log(2, "pdit: rank %d computes on %s (%s)%s\n", e->world->rank, e->be->ops->name, e->be->device,
	       e->be->queue ? e->opt.nccl ? ", sends through NCCL" : ", sends through pinned host buffers" : "");
	if (e->be->note)
		pd_log(1, "pdit: note: %s\n", e->be->note);
	return 0;
}

/* The text encoders O gives as single files by name, into the slots of
 * FAM's encoders they are. */
static int pd_engine_encoder_files(const struct pd_engine_options *o, const struct pd_dit_family *fam,
				   struct pd_model_paths *mp)
{
	int n = fam->n_encoders < PD_MAX_ENCODERS ? fam->n_encoders : PD_MAX_ENCODERS, taken[PD_MAX_ENCODERS] = { 0 };

	/* a slot's flags where the family has no such slot are a mistake, not
	 * something to ignore */
	for (int i = n; i < PD_MAX_ENCODERS; i++)
		if (o->text_encoder[i] || o->tokenizer[i]) {
			char comp[32], flag[32];

			if (o->text_encoder[i])
				pd_model_encoder_names(i, comp, flag, (int)sizeof(comp));
			else
				pd_model_tokenizer_names(i, comp, flag, (int)sizeof(comp));
			return pd_errorf("%s: the %s family has %d text encoder%s", flag, fam->name, n, n == 1 ? "" : "s");
		}
	for (int k = 0; k < PD_MAX_ENCODERS && o->encoder_files[k].name; k++) {
		const struct pd_encoder_file *f = &o->encoder_files[k];
		char flag[64], list[160] = "";
		int slot = -1;

		for (int i = 0; i < n; i++) {
			const char *file = fam->encoders[i].file;

			if (file && strcmp(file, f->name) == 0)
				slot = i;
			if (file)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s--%s (%s)", list[0] ? ", " : "",
					 file, fam->encoders[i].kind);
		}
		snprintf(flag, sizeof(flag), "--%s", f->name);
		if (slot < 0)
			return pd_errorf("%s: the %s family has no such text encoder (%s)", flag, fam->name,
					 list[0] ? list : n ? "none given as a single file" : "it takes embeddings");
		if (!f->path)
			return pd_errorf("%s: no file given", flag);
		if (taken[slot]++)
			return pd_errorf("%s: given twice", flag);
		if (pd_model_paths_encoder(mp, slot, f->path, flag, o->text_encoder[slot] != NULL))
			return -1;
	}
	return 0;
}

int pd_engine_resolve(const struct pd_engine_options *o, int encode_only, struct pd_model_paths *mp,
		      const struct pd_dit_family **fam, struct pd_dit_info *info, int *info_ok)
{
	struct pd_model_flags f = { o->model, o->transformer, o->vae, o->scheduler, { NULL }, { NULL } };

	memcpy(f.encoder, o->text_encoder, sizeof(f.encoder));
	memcpy(f.tokenizer, o->tokenizer, sizeof(f.tokenizer));
	*info_ok = 0;
	if (pd_model_paths_resolve(mp, &f, encode_only))
		return -1;
	/* the transformer says the family; encoding needs none (when the
	 * folder's reads, it says the family and its text length, else O's) */
	if (mp->transformer) {
		const char *config = o->transformer_config;

		*info_ok = pd_family_find(mp->transformer, config, fam, info) == 0;
		if (!*info_ok && !config && mp->folder_config) {
			/* a single file in the folder's transformer's place that
			 * carries no config (pdit quantize's of the folder): the
			 * folder's config serves it */
			char *first = pd_strdup(pd_last_error());

			config = mp->folder_config;
			*info_ok = pd_family_find(mp->transformer, config, fam, info) == 0;
			if (!*info_ok && first)
				pd_errorf("%s", first);
			free(first);
		}
		if (!*info_ok && !encode_only)
			return -1;
		if (*info_ok && config && !(mp->config = pd_strdup(config)))
			return -1;
	}
	if (!*info_ok && !(*fam = pd_family_named(o->family)))
		return -1;
	if ((*fam)->prediction != PD_PREDICT_FLOW)
		return pd_errorf("the %s family's transformer predicts what pdit's samplers do not step", (*fam)->name);
	return pd_engine_encoder_files(o, *fam, mp);
}

void pd_engine_encoder_kinds(const struct pd_dit_family *fam, char *buf, size_t len)
{
	buf[0] = 0;
	for (int i = 0; i < fam->n_encoders; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? " + " : "", fam->encoders[i].kind);
}

/* The options alone, before any request: the model's parts and sizes, the
 * schedule, the mesh flags. */
static int pd_engine_configure(struct pd_engine *e, const struct pd_engine_options *o)
{
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
			return pd_errorf("--quantize %s: pdit encodes q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, fp8 or "
					 "f8_e5m2", o->quantize);
		e->quantize = t;
	}
	if (pd_engine_ring_form(o->ring_attention, &e->ring_form))
		return -1;
	if (!(o->comm_timeout >= 0))
		return pd_errorf("--comm-timeout must be 0 (wait forever) or a number of seconds (got %g)", o->comm_timeout);
	if (pd_engine_threads_ok(o->threads))
		return -1;
	if (o->vae_parallel < -1 || o->vae_parallel > 1)
		return pd_errorf("--vae-parallel must be -1, 0 or 1 (got %d)", o->vae_parallel);
	e->world->timeout_s = o->comm_timeout;
	if (o->encode_only && e->world->size > 1)
		return pd_errorf("encoding runs on one process (this job has %d)", e->world->size);
	if (pd_engine_resolve(o, o->encode_only, &e->mp, &e->fam, &e->info, &e->info_ok))
		return -1;
	if (o->encode_only)
		return e->fam->prompt_encoder ? 0 :
		       pd_errorf("the %s family takes embeddings: it has no text encoders to run", e->fam->name);
	enum pd_qtype encoded = pd_engine_encoded_info(e->quantize, &e->info);

	if (pd_engine_held_layout(o, e->dt, e->mp.transformer, encoded, &e->info))
		return -1;
	e->fam->defaults(&e->info, &e->dflt);
	if (e->mp.scheduler) {
		if (pd_scheduler_load(&e->sched, e->mp.scheduler))
			return -1;
	} else {
		pd_scheduler_default(&e->sched, &e->dflt, e->fam->sampler);
	}
	e->shift0 = e->sched.shift;
	e->dynamic0 = e->sched.dynamic;
	for (int a = 0; a < PD_AXIS_COUNT; a++)
		if (o->degree[a] < 0 || (pd_axes[a].max > 0 && o->degree[a] > pd_axes[a].max))
			return pd_errorf("%s: a degree of %d (at most %d)", pd_axes[a].flag, o->degree[a],
					 pd_axes[a].max > 0 ? pd_axes[a].max : e->world->size);
	if (o->degree[PD_AXIS_DISTRI] && o->degree[PD_AXIS_RING])
		return pd_errorf("--distrifusion-degree and --ring-degree cannot both be given");
	if (o->warmup_steps < 0)
		return pd_errorf("--warmup-steps must not be negative");
	if (o->patches < 0 || (o->patches > 0 && o->degree[PD_AXIS_PP] <= 1))
		return pd_errorf("--num-patches needs --pipefusion-degree 2 or more, and must be positive");
	if (o->warmup_steps < 1 && pd_mesh_stale(o->degree, o->patches))
		/* the first step has no earlier keys and values to attend to */
		return pd_errorf("--warmup-steps must be at least 1 with %s", o->degree[PD_AXIS_DISTRI] > 1 ?
				 "--distrifusion-degree" : "--pipefusion-degree (unless --num-patches 1)");
	e->opt.warmup_steps = o->warmup_steps;
	e->opt.patches = o->patches;
	memcpy(e->degree, o->degree, sizeof(e->degree));
	return 0;
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
	struct {
		const char *path, *stem;
	} parts[2 + PD_MAX_ENCODERS] = { { e->o.encode_only ? NULL : e->mp.transformer, "diffusion_pytorch_model" },
					 { e->o.decode && !e->o.encode_only ? e->mp.vae : NULL,
					   "diffusion_pytorch_model" } };

	for (int i = 0; i < e->fam->n_encoders && i < PD_MAX_ENCODERS; i++) {
		parts[2 + i].path = prompts ? e->mp.encoder[i] : NULL;
		parts[2 + i].stem = "model";
	}
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		struct pd_st *st;

		if (!parts[i].path)
			continue;
		if (pd_st_open_path(&st, parts[i].path, parts[i].stem))
			return -1;
		pd_st_close(st);
	}
	/* an adapter is read after the prompts are encoded: a wrong name is
	 * told before that work */
	for (int i = 0; i < e->n_loras && !e->o.encode_only; i++) {
		struct pd_st *st;

		if (pd_st_open(&st, e->o.loras[i].path))
			return pd_error_prefix("--lora");
		pd_st_close(st);
	}
	return 0;
}

void pd_engine_adapters_forget(struct pd_engine *e)
{
	for (int i = 0; i < e->n_on; i++)
		free((char *)e->on[i].path);
	memset(e->on, 0, sizeof(e->on));
	e->n_on = 0;
}

/* FNV-1a of a file's bytes, 0 when it cannot be read. */
static uint64_t pd_fnv_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint64_t h = PD_ENGINE_HASH_START;
	char buf[65536];
	size_t n;

	if (!f)
		return 0;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		h = pd_engine_hash(h, buf, n);
	fclose(f);
	return h;
}

void pd_engine_made_from(const struct pd_engine *e, char *out, size_t cap)
{
	size_t k = 0;

#define PD_ADD(...)                                                                                                \
	do {                                                                                                       \
		int w_ = snprintf(out + (k < cap ? k : cap), k < cap ? cap - k : 0, __VA_ARGS__);                  \
		k += w_ > 0 ? (size_t)w_ : 0;                                                                      \
	} while (0)
	out[0] = 0;
	if (e->init_rgb)
		PD_ADD("; init image hash: %016llx", (unsigned long long)pd_engine_hash(PD_ENGINE_HASH_START, e->init_rgb,
										  (size_t)e->init_w * e->init_h * 3));
	if (e->mask_rgb)
		PD_ADD("; mask hash: %016llx", (unsigned long long)pd_engine_hash(PD_ENGINE_HASH_START, e->mask_rgb,
									    (size_t)e->init_w * e->init_h * 3));
	if (e->ref_rgb)
		PD_ADD("; reference image hash: %016llx", (unsigned long long)pd_engine_hash(PD_ENGINE_HASH_START, e->ref_rgb,
											(size_t)e->ref_w * e->ref_h * 3));
	/* A1111's "Lora hashes" with the names as prompts name them (the file's
	 * name without .safetensors), and the scales */
	for (int i = 0; i < e->n_on; i++) {
		const char *b = strrchr(e->on[i].path, '/');
		size_t n;

		b = b ? b + 1 : e->on[i].path;
		n = strlen(b) > 12 && !strcmp(b + strlen(b) - 12, ".safetensors") ? strlen(b) - 12 : strlen(b);
		PD_ADD("%s%.*s: %016llx", i ? ", " : "; Lora hashes: \"", (int)n, b, (unsigned long long)e->on_hash[i]);
	}
	if (e->n_on)
		PD_ADD("\"; loras: ");
	for (int i = 0; i < e->n_on; i++) {
		const char *b = strrchr(e->on[i].path, '/');

		b = b ? b + 1 : e->on[i].path;
		PD_ADD("%s%s:%g", i ? ", " : "", b, e->on[i].scale);
	}
#undef PD_ADD
	if (k >= cap && cap > 4)
		strcpy(out + cap - 4, "...");
}

int pd_engine_adapters(struct pd_engine *e, const struct pd_request *rq)
{
	const struct pd_lora_spec *given = rq && rq->loras_given ? rq->loras : e->o.loras;
	struct pd_lora_spec want[2 * PD_MAX_LORAS];
	int n = 0, same;

	/* the request's (or the engine's), then those its prompts name */
	while (n < PD_MAX_LORAS && given[n].path) {
		want[n] = given[n];
		n++;
	}
	if (n + e->n_tags > PD_MAX_LORAS)
		return pd_errorf("%d adapters with those the prompt names; at most %d", n + e->n_tags, PD_MAX_LORAS);
	for (int i = 0; i < e->n_tags; i++)
		want[n++] = e->tags[i];
	same = n == e->n_on;
	for (int i = 0; i < n && same; i++)
		same = !strcmp(want[i].path, e->on[i].path) && want[i].scale == e->on[i].scale;
	e->on_cached = 0;
	if (same)
		return 0;
	pd_engine_adapters_forget(e);
	if (pd_lora_set_cached(e->m, e->lora_cache, want, n, e->o.lora_lenient, &e->on_cached))
		return -1;
	for (int i = 0; i < n; i++) {
		e->on[i].scale = want[i].scale;
		if (!(e->on[i].path = pd_strdup(want[i].path))) {
			pd_lora_set(e->m, NULL, 0, 0);
			pd_engine_adapters_forget(e);
			return -1;
		}
		e->on_hash[i] = pd_fnv_file(want[i].path);
		e->n_on = i + 1;
	}
	for (int i = 0; i < n; i++)
		pd_log(1, "pdit: adapter %s x %g%s\n", want[i].path, want[i].scale,
		       e->on_cached ? " (its terms from the cache)" : "");
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
	rc = pd_engine_backend_new(e, e->dt, pd_engine_threads(e->world, e->o.threads));
	if (!rc) {
		e->be->conv_compute = e->vae_dt;
		/* the weights are laid out for the threads that will run them */
		scope->be = e->be;
		scope->threads = pd_backend_enter(e->be);
		pd_engine_say_binding(e, e->be->threads);
	}
	t0 = pd_now();
	if (pd_engine_encode(e, rc))
		return -1;
	e->encode_seconds = pd_now() - t0;
	if (pd_engine_products_agree(e))
		return -1;
	sh.whole_inputs = e->info.tp_whole_inputs;
	t0 = pd_now();
	pd_engine_progress(e, PD_PHASE_LOAD, t0, 0, 0, 0);
	if (pd_fault("load", 0) || e->fam->load(&e->m, e->mp.transformer, e->mp.config, e->be, &sh))
		return -1;
	/* a broken VAE must not surface after minutes of denoising */
	if (pd_engine_adapters(e, NULL) || pd_engine_vae_setup(e))
		return -1;
	e->load_seconds = pd_now() - t0;
	/* the numbers differ from decoded products': a run says so */
	if (e->be->int8_layers)
		pd_log(1, "pdit: %d quantized layers multiply in int8 (inputs quantized in blocks of 256 for "
			  "Q8_0 and the K-quants, of 32 for the other types and Q8_0 layers of other widths; "
			  "--quant-products bf16 decodes them instead)%s\n", e->be->int8_layers,
		       e->be->qproducts == PD_QP_INT8_W256 ? "; Q8_0 layers a multiple of 256 wide hold their weights "
							     "requantized to one scale per 256 inputs" : "");
	/* (auto's choice, not one the user made) */
	if (e->info.ring_gathered == 1 && e->mesh.degree[PD_AXIS_RING] > 1 && e->mesh.degree[PD_AXIS_PP] <= 1)
		pd_log(1, "pdit: ring attention gathers every chunk's keys and values and attends once, as one "
			  "process does (int8 products would turn its merges' last bits into roundings; "
			  "--ring-attention merged overlaps the transfers instead)\n");
	pd_engine_progress(e, PD_PHASE_LOAD, t0, 0, 0, 1);
	if (pd_parallel_setup(&e->par, &e->mesh, e->m, e->e.batch, &e->opt))
		return -1;
	e->par_ok = 1;
	return 0;
}

int pd_engine_open(struct pd_engine **out, struct pd_comm *world, const struct pd_engine_options *o,
		   const struct pd_request *plan)
{
	struct pd_engine *e;
	struct pd_engine_scope scope;
	struct pd_request dflt;
	int rc;

	/* a caller's mistake, told rather than crashed on (no collective yet:
	 * every process makes the same one) */
	if (!out || !world || !o)
		return pd_errorf("pd_engine_open: %s is NULL", !out ? "out" : !world ? "world" : "the options");
	*out = NULL;
	e = pd_calloc(1, sizeof(*e), "engine");
	if (!e)
		return pd_comm_agree(world, 1, NULL);
	e->world = world;
	e->o = *o;
	e->log = (struct pd_log_sink){ o->log_level, o->log, o->log_ctx };
	pd_engine_enter(e, &scope);
	/* the strings are the caller's: only the resolved paths are kept */
	e->o.model = e->o.transformer = e->o.vae = e->o.scheduler = e->o.dtype = e->o.vae_dtype = NULL;
	memset(e->o.text_encoder, 0, sizeof(e->o.text_encoder));
	memset(e->o.tokenizer, 0, sizeof(e->o.tokenizer));
	memset(e->o.encoder_files, 0, sizeof(e->o.encoder_files));
	e->o.family = e->o.transformer_config = NULL;
	/* the adapters' files are read at load: their names are kept */
	memset(e->o.loras, 0, sizeof(e->o.loras));
	for (int i = 0; i < PD_MAX_LORAS && o->loras[i].path; i++) {
		e->o.loras[i] = o->loras[i];
		if (!(e->o.loras[i].path = pd_strdup(o->loras[i].path)))
			break;
		e->n_loras = i + 1;
	}
	e->o.lora_dir = o->lora_dir ? pd_strdup(o->lora_dir) : NULL;
	if (!plan) {
		/* the mesh and the memory for one picture of the defaults */
		pd_request_init(&dflt);
		dflt.embeds = NULL;
		dflt.want_pictures = o->decode;
		plan = &dflt;
	}
	rc = pd_engine_configure(e, o);
	if (!rc && ((e->n_loras < PD_MAX_LORAS && o->loras[e->n_loras].path) || (o->lora_dir && !e->o.lora_dir)))
		rc = pd_errorf("out of memory for the adapters' names");
	if (!rc && o->lora_dir && !pd_is_dir(o->lora_dir))
		rc = pd_errorf("--lora-model-dir %s: not a folder", o->lora_dir);
	if (!rc && o->lora_cache_mb < 0)
		rc = pd_errorf("--lora-cache must not be negative (got %d MB)", o->lora_cache_mb);
	if (!rc && o->lora_cache_mb > 0)
		rc = pd_lora_cache_new(&e->lora_cache, (size_t)o->lora_cache_mb << 20);
	if (!rc)
		rc = pd_engine_check_files(e, o->encode_only || (plan != &dflt && plan->n_prompts > 0));
	if (o->encode_only) {
		/* the encoders are loaded per request: a backend is all there is to open */
		/* one process alone: the caller's threads (OMP_NUM_THREADS, its cpuset) unless told */
		if (!rc && !(rc = pd_engine_backend_new(e, e->dt, o->threads))) {
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
		e->e.batch = o->degree[PD_AXIS_DP] > 1 ? o->degree[PD_AXIS_DP] : 1;
		e->p.frames = e->dflt.frames;
		e->p.height = e->dflt.height;
		e->p.width = e->dflt.width;
		rc = e->fam->latent_shape(&e->ls, &e->info, e->p.frames, e->p.height, e->p.width);
	}
	if (pd_comm_agree(world, rc, &e->dead) || (plan != &dflt && pd_engine_same_everywhere(e, plan)))
		goto fail;
	rc = pd_engine_choose_mesh(e) || (plan != &dflt && pd_engine_check_memory_layout(e, plan->want_pictures));
	if (pd_comm_agree(world, rc, &e->dead))
		goto fail;
	e->o.parallel = NULL;
	rc = pd_engine_load(e, &scope);
	if (pd_comm_agree(world, rc, &e->dead))
		goto fail;
	/* the plan's prompts are encoded: its first run goes straight on */
	if (plan != &dflt)
		pd_engine_set_ready(e, plan);
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
	if (e->vae)
		e->fam->vae->free(e->vae);
	pd_vae_par_free(&e->vae_par);
	pd_dit_encoders_free(e->fam, e->encoders);
	pd_dit_free(e->m);
	pd_backend_free(e->be);
	if (e->mesh_ok)
		pd_mesh_free(&e->mesh);
	pd_scheduler_free(&e->sched);
	pd_engine_request_free(e);
	pd_model_paths_free(&e->mp);
	for (int i = 0; i < e->n_loras; i++)
		free((char *)e->o.loras[i].path);
	free((char *)e->o.lora_dir);
	pd_engine_adapters_forget(e);
	pd_lora_cache_free(e->lora_cache);
	free(e);
	pd_log_use(&caller);
}

