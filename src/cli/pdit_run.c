/*
 * pdit_run.c - `pdit generate`, `pdit check` and `pdit bench`, on one process or a
 * mesh of them (mpirun -np N pdit ...).
 *
 * Both go through the same phases. Every rank checks what a user can get
 * wrong before any weight is read, then loads its share of the model; each
 * phase ends with an agreement among the ranks, so a failure on one rank
 * (a file only it cannot read) stops every rank cleanly with the failing
 * rank's message. A failure in the middle of collective work aborts the
 * whole job instead of leaving the others waiting.
 */
#include "pd_args.h"
#include "pd_backend_cpu.h"
#include "pd_backend_rate.h"
#include "pd_flux.h"
#include "pd_model_paths.h"
#include "pd_par_data.h"
#include "pd_plan.h"
#include "pd_par_seq.h"
#include "pd_par_vae.h"
#include "pd_prompt.h"
#include "pd_parallel.h"
#include "pd_png.h"
#include "pd_rng.h"
#include "pd_util.h"
#include "pdit_cli.h"
#include "pd_st_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_gen_args {
	const char *model, *transformer, *vae, *scheduler;
	const char *diffusion_model, *text_encoder, *text_encoder_2, *clip_l, *t5xxl, *tokenizer, *tokenizer_2;
	const char *prompt, *negative, *prompts_file;
	int max_seq;
	const char *embeds, *output, *out_latents, *init_latents, *dtype;
	int height, width, steps, threads, verbose;
	float guidance, true_cfg_scale, fbcache, comm_timeout;
	uint64_t seed;
	int steps_seen;
	/* mesh degrees (0: not given) */
	int dp, tp, ulysses, ring, pp, cfg_parallel, distrifusion, warmup_steps, patches;
	int no_vae_parallel, vae_parallel;
	const char *parallel;           /* --parallel auto|auto-stale, or NULL */
	/* pdit check */
	const char *golden;
	float tolerance;
	/* pdit bench */
	int warmup, json, vae_time, batch;
};

#define PD_MAX_SIDE 16384
#define PD_MAX_STEPS 10000
#define PD_MAX_BATCH 4096

/* Everything one run holds, from validated arguments to loaded models. */
struct pd_run {
	struct pd_comm *world;          /* all processes (borrowed) */
	struct pd_model_paths mp;       /* component folders */
	struct pd_flux_config fc;       /* transformer sizes */
	struct pd_dit_info info;        /* the same as the parallel methods and the planner see them */
	const struct pd_dit_family *fam; /* the model family's pipeline side */
	struct pd_embeds e;             /* prompt embeddings */
	char **prompts;                 /* -p / --prompts: the texts to encode (NULL with --embeds) */
	int n_prompts;
	const char *negative;           /* -n (borrowed) */
	int max_seq;                    /* T5 tokens per prompt */
	struct pd_scheduler sched;      /* the schedule */
	struct pd_latent_shape ls;      /* latent geometry */
	struct pd_gen_params p;         /* generation parameters */
	enum pd_dtype dt;               /* matrix-product precision */
	int degree[PD_AXIS_COUNT];      /* the mesh */
	int mesh_auto;                  /* chosen by pdit, not given: 1 by rule, 2 by the cost model */
	struct pd_par_options opt;      /* DistriFusion, warm-up */
	struct pd_mesh mesh;            /* its communicators (once created) */
	int mesh_ok;
	struct pd_backend *be;          /* compute */
	struct pd_dit *m;               /* this rank's share of the transformer */
	struct pd_vae *v;               /* the VAE (on ranks that write pictures) */
	struct pd_parallel par;         /* the parallel methods */
	int par_ok;
	struct pd_vae_par vae_par;      /* decoding in bands over the data-parallel group */
	int vae_bands;                  /* bands this rank takes part in (0: it does not decode) */
	float *init;                    /* --init-latents [B, L, C], or NULL */
};

static const char pd_gen_usage[] =
	"usage: [mpirun -np N] pdit generate (--model DIR | --transformer DIR|--diffusion-model FILE ...)\n"
	"                                  (-p TEXT | --prompts FILE | --embeds FILE) [options]\n"
	"\n"
	"Runs FLUX.1 from a prompt to a PNG, numerically equal to diffusers' FluxPipeline\n"
	"with the same seed. Several prompts (--prompts, one a line) make several images:\n"
	"image b uses seed + b and is written as NAME-b.png (or through a %d in the\n"
	"name). Under mpirun the processes form a mesh of degrees\n"
	"dp x cfg x pp x ring x ulysses x tp = N (pdit picks one when no degree is given);\n"
	"every mesh of exact methods computes the same pictures as one process.\n"
	"PipeFusion (pp) and DistriFusion attend to some keys and values one step old\n"
	"after --warmup-steps exact steps: less traffic or more overlap, slightly\n"
	"different pictures (use pdit check to see how different).";

static const char pd_gen_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit generate --model tiny-model -p \"a photo of a cat\" -H 256 -W 256 --steps 4 -o out.png\n"
	"  mpirun -np 4 pdit generate --model tiny-model -p \"a red fox\" -H 256 -W 256 \\\n"
	"      --ulysses-degree 2 --ring-degree 2 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev --prompts prompts.txt -n \"blurry\" --true-cfg-scale 4 \\\n"
	"      --cfg-parallel -s 7 --dtype bf16 -o cat-%d.png\n"
	"  pdit generate --diffusion-model flux1-schnell.safetensors --vae ae.safetensors --clip_l clip_l.safetensors \\\n"
	"      --t5xxl t5xxl_fp16.safetensors --tokenizer tok --tokenizer-2 tok2 -p \"a lighthouse\" --dtype bf16\n"
	"  mpirun -np 4 pdit generate --model FLUX.1-dev -p \"a city at night\" --pipefusion-degree 4 \\\n"
	"      --num-patches 4 --warmup-steps 2 --fbcache-threshold 0.08 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev -p \"a forest\" --distrifusion-degree 2 -o out.png\n";

static const char pd_check_usage[] =
	"usage: [mpirun -np N] pdit check <the arguments of pdit generate> [--golden FILE] [--tolerance T]\n"
	"\n"
	"Runs the mesh and, on rank 0, the single-process computation on the same inputs,\n"
	"and prints for each transformer block at the first step and for the final latents\n"
	"the largest relative difference (max|a - b| / max|b|), then PASS or FAIL. With\n"
	"--golden FILE the final latents (and the initial noise) are compared with FILE's\n"
	"latents.final (and latents.init) instead: a diffusers reference or an earlier\n"
	"--out-latents file. Nothing is written.";

static const char pd_check_examples[] =
	"  mpirun -np 4 pdit check --model tiny-model -p \"a photo of a cat\" -H 256 -W 256 \\\n"
	"      --steps 4 --ulysses-degree 2 --ring-degree 2\n"
	"  mpirun -np 2 pdit check --transformer golden/transformer-dev --vae golden/vae-dev \\\n"
	"      --scheduler golden/scheduler-dev --embeds golden/pipeline-dev-h64w48.safetensors -H 64 -W 48 \\\n"
	"      --steps 4 -s 5301 --golden golden/pipeline-dev-h64w48.safetensors\n";

static const char pd_bench_usage[] =
	"usage: [mpirun -np N] pdit bench --model DIR [-H 512 -W 512] [--steps 3] [--warmup 1] [--dtype bf16]\n"
	"                                 [mesh degrees] [--json] [--vae-time]\n"
	"\n"
	"Times denoising steps (the median of --steps after --warmup untimed ones; the\n"
	"slowest rank's) and reports the step's floating-point work counted from the\n"
	"shapes, the rate achieved, the bf16 (or f32) matrix-product rate pdit measures\n"
	"in the same run at the model's largest product shape and the ratio of the two,\n"
	"bytes sent per rank per step, peak resident memory per rank next to an estimate\n"
	"(the weights as the backend holds them plus its largest activation and scratch\n"
	"use), the allocations made in the timed steps (0: buffers and primitives are\n"
	"reused), and with --vae-time the VAE decode's seconds at that size. The\n"
	"embeddings default to DIR/embeds.safetensors (written by pdit tiny).";

static const char pd_bench_examples[] =
	"  pdit tiny flux-width --flux-width\n"
	"  pdit bench --model flux-width -H 1024 -W 1024 --dtype bf16 --vae-time\n"
	"  mpirun -np 2 pdit bench --model flux-width -H 512 -W 512 --dtype bf16 --tensor-parallel-degree 2 --json\n";

/* ----------------------------------------------------------------------- */
/* Phases                                                                  */
/* ----------------------------------------------------------------------- */

/* --init-latents FILE: latents.init [B, L, 4C] (packed), or
 * latents.init_unpacked [B, C, h, w] as the golden files hold them. */
static int pd_read_init_latents(const char *path, const struct pd_embeds *e, const struct pd_dit_family *fam,
				const struct pd_latent_shape *ls, float **out)
{
	int64_t n = e->batch * ls->tokens * ls->packed_channels, per = n / e->batch;
	const struct pd_st_tensor *t;
	struct pd_st *st;
	float *init, *u = NULL;
	int rc = -1;

	if (pd_st_open(&st, path))
		return -1;
	init = pd_malloc((size_t)n * sizeof(float), "initial latents");
	if (!init)
		goto out;
	if ((t = pd_st_get(st, "latents.init")) && t->numel == n) {
		rc = pd_st_read_f32(t, 0, (size_t)n, init);
	} else if ((t = pd_st_get(st, "latents.init_unpacked")) && t->numel == n) {
		u = pd_malloc((size_t)n * sizeof(float), "initial latents");
		rc = !u || pd_st_read_f32(t, 0, (size_t)n, u) ? -1 : 0;
		for (int64_t b = 0; !rc && b < e->batch; b++)
			fam->pack(ls, u + b * per, init + b * per);
	} else {
		pd_errorf("%s: needs latents.init [%lld, %lld, %d] or latents.init_unpacked [%lld, %d, %d, %d]", path,
			  (long long)e->batch, (long long)ls->tokens, ls->packed_channels, (long long)e->batch,
			  ls->channels, ls->h, ls->w);
	}
out:
	free(u);
	pd_st_close(st);
	if (rc)
		free(init);
	else
		*out = init;
	return rc;
}

/* The component paths from the flags (--diffusion-model, --clip_l and
 * --t5xxl are stable-diffusion.cpp's names for the same components). */
static int pd_run_resolve(struct pd_run *r, const struct pd_gen_args *a)
{
	struct pd_model_flags f = { a->model, a->transformer, a->vae, a->scheduler, a->text_encoder,
				    a->text_encoder_2, a->tokenizer, a->tokenizer_2 };

	if ((a->transformer && a->diffusion_model) || (a->text_encoder && a->clip_l) ||
	    (a->text_encoder_2 && a->t5xxl))
		return pd_errorf("give each component once: --transformer or --diffusion-model, --text-encoder or "
				 "--clip_l, --text-encoder-2 or --t5xxl");
	if (a->diffusion_model)
		f.transformer = a->diffusion_model;
	if (a->clip_l)
		f.text_encoder = a->clip_l;
	if (a->t5xxl)
		f.text_encoder_2 = a->t5xxl;
	return pd_model_paths_resolve(&r->mp, &f, 0);
}

/* The prompt embeddings: read from --embeds, or shaped here for -p /
 * --prompts and filled by pd_run_encode once the mesh exists. */
static int pd_run_inputs(struct pd_run *r, const struct pd_gen_args *a)
{
	int64_t J, P;
	int sources = (a->embeds != NULL) + (a->prompt != NULL) + (a->prompts_file != NULL);

	if (sources != 1)
		return pd_errorf(sources ? "give one of -p/--prompt, --prompts FILE and --embeds FILE" :
					   "no prompt: give -p \"a prompt\" (or --prompts FILE, or --embeds FILE)");
	if (a->negative && a->embeds)
		return pd_errorf("-n/--negative-prompt goes with -p or --prompts; --embeds files hold their own "
				 "negative_prompt_embeds");
	if (a->embeds)
		return pd_embeds_load(&r->e, a->embeds) || pd_embeds_check(&r->e, &r->info, a->embeds);
	if (a->max_seq < 0 || a->max_seq > 512)
		return pd_errorf("--max-sequence-length must be between 1 and 512 (got %d)", a->max_seq);
	r->max_seq = a->max_seq ? a->max_seq : pd_prompt_default_length(r->fc.guidance_embeds);
	r->negative = a->negative;
	if (a->prompt) {
		r->prompts = pd_calloc(1, sizeof(char *), "prompts");
		if (!r->prompts || !(r->prompts[0] = pd_strdup(a->prompt)))
			return -1;
		r->n_prompts = 1;
	} else if (pd_prompt_read_file(a->prompts_file, &r->prompts, &r->n_prompts)) {
		return -1;
	}
	if (r->n_prompts > PD_MAX_BATCH)
		return pd_errorf("%s has %d prompts; at most %d make one run", a->prompts_file, r->n_prompts,
				 PD_MAX_BATCH);
	if (pd_prompt_widths(&r->mp, &J, &P))
		return -1;
	if (J != r->fc.joint_attention_dim || P != r->fc.pooled_projection_dim)
		return pd_errorf("the text encoders make prompt embeddings of width %lld and pooled ones of %lld, but %s "
				 "expects %d and %d", (long long)J, (long long)P, r->mp.transformer,
				 r->fc.joint_attention_dim, r->fc.pooled_projection_dim);
	/* zeros until encoded; shaped now so the mesh can be checked */
	r->e.batch = r->n_prompts;
	r->e.txt_len = r->max_seq;
	r->e.joint_dim = J;
	r->e.pooled_dim = P;
	r->e.prompt = pd_calloc((size_t)(r->e.batch * r->max_seq * J) + 1, sizeof(float), "prompt embeddings");
	r->e.pooled = pd_calloc((size_t)(r->e.batch * P) + 1, sizeof(float), "prompt embeddings");
	if (!r->e.prompt || !r->e.pooled)
		return -1;
	if (r->negative) {
		r->e.neg_txt_len = r->max_seq;
		r->e.neg_prompt = pd_calloc((size_t)(r->e.batch * r->max_seq * J) + 1, sizeof(float), "prompt embeddings");
		r->e.neg_pooled = pd_calloc((size_t)(r->e.batch * P) + 1, sizeof(float), "prompt embeddings");
		if (!r->e.neg_prompt || !r->e.neg_pooled)
			return -1;
	}
	return 0;
}

/* Where one rank works alone by design (encoding prompts, check's
 * reference, a data-parallel group's extra image) the others wait without
 * the --comm-timeout deadline: returns it, for restoring. */
static double pd_deadline_off(void)
{
	double d = pd_comm_timeout_s;

	pd_comm_timeout_s = 0;
	return d;
}

/* Encodes this data-parallel group's prompts on its first rank, sends the
 * embeddings to the group's other ranks, and releases the encoders before
 * any transformer weight is read. */
static int pd_run_encode(struct pd_run *r)
{
	struct pd_comm *grp = r->mesh.replica;
	int64_t first, count, J = r->e.joint_dim, P = r->e.pooled_dim, T = r->max_seq;
	double deadline;
	int rc = 0;

	if (!r->prompts)
		return 0;
	pd_dp_slice(r->e.batch, r->degree[PD_AXIS_DP], r->mesh.coord[PD_AXIS_DP], &first, &count);
	if (grp->rank == 0) {
		struct pd_prompt_encoder pe;
		struct pd_embeds enc;
		double t0 = pd_now();

		pd_log(1, "pdit: encoding %lld prompt%s (CLIP + T5, %lld tokens)\n", (long long)count, count > 1 ? "s" : "",
		       (long long)T);
		rc = pd_prompt_encoder_load(&pe, &r->mp, r->be);
		if (!rc) {
			rc = pd_prompt_embeds(&enc, &pe, r->prompts, r->n_prompts, r->negative, (int)T, first, count);
			pd_prompt_encoder_free(&pe);
		}
		if (!rc) {
			memcpy(r->e.prompt + first * T * J, enc.prompt + first * T * J, (size_t)(count * T * J) * sizeof(float));
			memcpy(r->e.pooled + first * P, enc.pooled + first * P, (size_t)(count * P) * sizeof(float));
			if (r->negative) {
				memcpy(r->e.neg_prompt + first * T * J, enc.neg_prompt + first * T * J,
				       (size_t)(count * T * J) * sizeof(float));
				memcpy(r->e.neg_pooled + first * P, enc.neg_pooled + first * P, (size_t)(count * P) * sizeof(float));
			}
			pd_embeds_free(&enc);
			pd_log(2, "pdit: encoded in %.2f s\n", pd_now() - t0);
		}
	}
	/* the others wait here while one rank per group encodes */
	deadline = pd_deadline_off();
	rc = pd_cli_any_failed(r->world, rc);
	pd_comm_timeout_s = deadline;
	if (rc)
		return -1;
	if (grp->size > 1 &&
	    (grp->ops->bcast(grp, r->e.prompt + first * T * J, (size_t)(count * T * J) * sizeof(float), 0) ||
	     grp->ops->bcast(grp, r->e.pooled + first * P, (size_t)(count * P) * sizeof(float), 0) ||
	     (r->negative &&
	      (grp->ops->bcast(grp, r->e.neg_prompt + first * T * J, (size_t)(count * T * J) * sizeof(float), 0) ||
	       grp->ops->bcast(grp, r->e.neg_pooled + first * P, (size_t)(count * P) * sizeof(float), 0)))))
		return -1;
	return 0;
}

/* The work of this run as the cost model takes it: BRANCHES passes per
 * image, and with VAE the decode (from the VAE folder's config, when it
 * has one). */
static void pd_run_plan_work(const struct pd_run *r, const struct pd_gen_args *a, int branches, int vae,
			     struct pd_plan_work *w)
{
	struct pd_vae_config vc;

	memset(w, 0, sizeof(*w));
	w->info = &r->info;
	w->txt_len = r->e.txt_len;
	w->img_len = r->ls.tokens;
	w->img_w = r->ls.w / 2;
	w->images = (int)r->e.batch;
	w->branches = branches;
	w->weight_bytes = r->dt == PD_BF16 ? 2 : 4;
	if (vae && r->mp.vae && pd_is_dir(r->mp.vae) && pd_vae_config_load(&vc, r->mp.vae) == 0)
		pd_plan_vae(w, &vc, a->height, a->width);
}

/* Refuses a run that cannot fit before anything big is read or allocated:
 * a low estimate of a process's peak (its share of the transformer's
 * weights and the activations it allocates, or the VAE decode's two
 * largest feature maps, whichever is larger: the transformer is freed
 * before decoding) times the processes on this machine, against the
 * memory it has available. What is hard to know here (oneDNN's scratch,
 * the libraries, the text encoders) is left out, so a refusal is certain,
 * not cautious. */
static int pd_run_check_memory(const struct pd_run *r, const struct pd_gen_args *a, int decodes)
{
	double MB = 1048576.0, avail = pd_mem_available_mb(), weights, act, vae = 0, need;
	int local = pd_comm_local_size(r->world);
	struct pd_plan_work w;
	struct pd_plan_machine mc = { .devices = r->world->size, .gflops = 1 };
	struct pd_plan_mesh mesh = { .distrifusion = r->opt.distrifusion };
	struct pd_plan_cost cost;

	if (avail <= 0)
		return 0;
	memcpy(mesh.degree, r->degree, sizeof(mesh.degree));
	pd_run_plan_work(r, a, 1, decodes, &w);
	if (pd_plan_cost(&w, &mc, &mesh, &cost))
		return -1;
	/* the lightest stage: low whichever stage a rank runs */
	weights = cost.weights_min_gb * 1e9 / MB;
	act = cost.activations_gb * 1e9 / MB;
	/* the decode in bands over the data-parallel group, or whole */
	if (w.vae_gflop > 0)
		vae = (a->no_vae_parallel || r->world->size == 1 ? w.vae_map_gb : cost.vae_gb) * 1e9 / MB;
	need = (weights + act > vae ? weights + act : vae) * local;
	if (need <= avail)
		return 0;
	return pd_errorf("%dx%d needs at least %.1f GB on this machine (%d process%s, each: transformer weights %.1f GB + "
			 "activations %.1f GB, or the VAE decode %.1f GB) and %.1f GB are available: choose a smaller "
			 "size, or more machines with tensor, sequence, pipeline parallel or the banded decode",
			 a->width, a->height, need / 1024, local, local > 1 ? "es" : "", weights / 1024, act / 1024,
			 vae / 1024, avail / 1024);
}

/* --parallel auto: rank 0 ranks the meshes as `pdit plan` does on this
 * machine (a product timed here, the processes of a node sharing its cores
 * and memory) and every rank takes its first choice; exact methods only
 * unless STALE. */
static int pd_run_plan_mesh(struct pd_run *r, const struct pd_gen_args *a, const struct pd_mesh_limits *lim,
			    int stale)
{
	/* ok, the degrees, DistriFusion */
	int msg[PD_AXIS_COUNT + 2] = { 0 };

	if (r->world->size == 1) {
		for (int x = 0; x < PD_AXIS_COUNT; x++)
			r->degree[x] = 1;
		return 0;
	}
	if (r->world->rank == 0) {
		struct pd_plan_work w;
		struct pd_plan_machine mc;
		struct pd_plan_row *rows = NULL;
		int n = 0;

		pd_run_plan_work(r, a, lim->cfg_possible ? 2 : 1, 1, &w);
		if (pd_plan_machine_here(&mc, &w, r->world->size, pd_comm_local_size(r->world), 1, 0) == 0 &&
		    pd_plan_list(&w, &mc, lim, &rows, &n) == 0) {
			for (int i = 0; i < n && !msg[0]; i++)
				if (rows[i].cost.fits && (stale || !rows[i].stale)) {
					msg[0] = 1;
					memcpy(msg + 1, rows[i].mesh.degree, sizeof(rows[i].mesh.degree));
					msg[PD_AXIS_COUNT + 1] = rows[i].mesh.distrifusion;
				}
			if (!msg[0])
				pd_errorf("--parallel %s: no %smesh of %d processes fits this machine's memory (see pdit plan)",
					  stale ? "auto-stale" : "auto", stale ? "" : "exact ", r->world->size);
		}
		free(rows);
	}
	if (r->world->ops->bcast(r->world, msg, sizeof(msg), 0))
		return -1;
	if (!msg[0])
		return r->world->rank == 0 ? -1 : pd_errorf("--parallel: rank 0 could not choose a mesh");
	memcpy(r->degree, msg + 1, sizeof(r->degree));
	r->opt.distrifusion = msg[PD_AXIS_COUNT + 1];
	return 0;
}

/* Phase 1: everything that can be checked without reading a weight. */
static int pd_run_prepare(struct pd_run *r, const struct pd_gen_args *a, int need_vae)
{
	struct pd_mesh_limits lim;
	int given = a->dp || a->tp || a->ulysses || a->ring || a->pp || a->cfg_parallel || a->distrifusion;

	if (pd_cli_dtype(a->dtype, &r->dt))
		return -1;
	if (!(a->comm_timeout >= 0))
		return pd_errorf("--comm-timeout must be 0 (wait forever) or a number of seconds (got %g)", a->comm_timeout);
	pd_comm_timeout_s = a->comm_timeout;
	if (a->height < 16 || a->width < 16 || a->height % 16 || a->width % 16)
		return pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", a->height,
				 a->width);
	/* bounds that keep every size product far from overflow: 1M image
	 * tokens, 16384 px a side; more steps or images than anyone runs */
	if (a->height > PD_MAX_SIDE || a->width > PD_MAX_SIDE)
		return pd_errorf("-H/--height and -W/--width must be at most %d (got %dx%d)", PD_MAX_SIDE, a->height,
				 a->width);
	if (a->steps_seen && (a->steps < 1 || a->steps > PD_MAX_STEPS))
		return pd_errorf("--steps must be between 1 and %d (got %d)", PD_MAX_STEPS, a->steps);
	if (a->batch < 0 || a->batch > PD_MAX_BATCH)
		return pd_errorf("--batch must be positive and at most %d (got %d)", PD_MAX_BATCH, a->batch);
	if (a->true_cfg_scale < 0)
		return pd_errorf("--true-cfg-scale must not be negative");
	r->fam = &pd_flux_family;
	if (pd_run_resolve(r, a) || pd_flux_config_load(&r->fc, r->mp.transformer) ||
	    pd_flux_dit_info(&r->fc, &r->info) || pd_run_inputs(r, a) ||
	    r->fam->latent_shape(&r->ls, &r->info, a->height, a->width) ||
	    (a->batch > 0 && pd_embeds_repeat(&r->e, a->batch)))
		return -1;
	if (need_vae && !r->mp.vae && !a->out_latents)
		return pd_errorf("no VAE to decode with: give --vae DIR (or --out-latents FILE to keep only latents)");
	r->p.height = a->height;
	r->p.width = a->width;
	r->p.steps = a->steps_seen ? a->steps : r->fc.guidance_embeds ? 28 : 4;
	r->p.guidance = a->guidance;
	r->p.true_cfg_scale = a->true_cfg_scale;
	r->p.seed = a->seed;
	if (a->fbcache < 0)
		return pd_errorf("--fbcache-threshold must not be negative");
	r->p.fbcache_threshold = a->fbcache;
	if (a->true_cfg_scale > 1 && !r->e.neg_prompt)
		/* diffusers silently ignores the scale here; say so instead. */
		return a->embeds ? pd_errorf("--true-cfg-scale %g needs negative_prompt_embeds and "
					     "negative_pooled_prompt_embeds in %s (diffusers would silently run without "
					     "true CFG)", a->true_cfg_scale, a->embeds) :
				   pd_errorf("--true-cfg-scale %g needs a negative prompt: give -n \"...\" (diffusers "
					     "would silently run without true CFG)", a->true_cfg_scale);
	if (r->mp.scheduler) {
		if (pd_scheduler_load(&r->sched, r->mp.scheduler))
			return -1;
	} else {
		/* FLUX.1-dev's scheduler shifts by resolution, schnell's does not. */
		pd_scheduler_default(&r->sched, r->fc.guidance_embeds);
	}
	if (a->init_latents && pd_read_init_latents(a->init_latents, &r->e, r->fam, &r->ls, &r->init))
		return -1;
	/* the mesh, refused here when impossible: no weight has been read */
	lim.world = r->world->size;
	lim.heads = r->fc.heads;
	lim.cfg_possible = pd_gen_uses_cfg(&r->p, &r->e);
	lim.images = (int)r->e.batch;
	lim.max_pp = pd_flux_blocks(&r->fc);
	lim.distrifusion = a->distrifusion > 0;
	if (a->distrifusion && a->ring)
		return pd_errorf("--distrifusion-degree and --ring-degree cannot both be given");
	if (a->warmup_steps < 0)
		return pd_errorf("--warmup-steps must not be negative");
	if (a->vae_parallel && a->no_vae_parallel)
		return pd_errorf("--vae-parallel and --no-vae-parallel contradict each other");
	if (a->patches < 0 || (a->patches > 0 && a->pp <= 1))
		return pd_errorf("--num-patches needs --pipefusion-degree 2 or more, and must be positive");
	if (a->warmup_steps < 1 && (a->distrifusion > 1 || (a->pp > 1 && a->patches != 1)))
		/* the first step has no earlier keys and values to attend to */
		return pd_errorf("--warmup-steps must be at least 1 with %s", a->distrifusion > 1 ?
				 "--distrifusion-degree" : "--pipefusion-degree (unless --num-patches 1)");
	r->opt.distrifusion = a->distrifusion > 0;
	r->opt.warmup_steps = a->warmup_steps;
	r->opt.patches = a->patches;
	r->degree[PD_AXIS_DP] = a->dp;
	r->degree[PD_AXIS_CFG] = a->cfg_parallel ? 2 : 0;
	r->degree[PD_AXIS_PP] = a->pp;
	r->degree[PD_AXIS_RING] = a->distrifusion ? a->distrifusion : a->ring;
	r->degree[PD_AXIS_ULYSSES] = a->ulysses;
	r->degree[PD_AXIS_TP] = a->tp;
	if (a->parallel) {
		int stale = strcmp(a->parallel, "auto-stale") == 0;

		if (!stale && strcmp(a->parallel, "auto"))
			return pd_errorf("--parallel must be auto or auto-stale (got '%s')", a->parallel);
		if (given)
			return pd_errorf("--parallel %s chooses the mesh: give it or degree flags, not both", a->parallel);
		r->mesh_auto = 2;
		lim.distrifusion = 0;
		if (pd_run_plan_mesh(r, a, &lim, stale))
			return -1;
	} else if (!given) {
		r->mesh_auto = r->world->size > 1;
		if (pd_mesh_choose(r->degree, &lim))
			return -1;
	} else {
		for (int x = 0; x < PD_AXIS_COUNT; x++)
			if (r->degree[x] <= 0)
				r->degree[x] = 1;
		if (pd_mesh_check(r->degree, &lim))
			return -1;
	}
	return pd_run_check_memory(r, a, need_vae);
}

/* Phase 2: the mesh's communicators, the backend, this rank's weights. */
static int pd_run_load(struct pd_run *r, const struct pd_gen_args *a, int want_vae)
{
	struct pd_dit_shard sh;

	if (pd_mesh_create(&r->mesh, r->world, r->degree))
		return -1;
	r->mesh_ok = 1;
	sh = pd_parallel_shard(&r->mesh, &r->info);
	if (pd_backend_cpu_new(&r->be, r->dt, pd_cli_threads(r->world, a->threads)) || pd_run_encode(r) ||
	    pd_fault("load", 0) || pd_flux_load_dit(&r->m, r->mp.transformer, r->be, &sh))
		return -1;
	/* a broken VAE must not surface after minutes of denoising; with the
	 * parallel decode every rank of a data-parallel group decodes a band */
	if (want_vae && r->mp.vae) {
		struct pd_vae_hooks hooks = { 0, 1, NULL, NULL, NULL, NULL, NULL };

		if (!a->no_vae_parallel && r->mesh.replica->size > 1)
			pd_vae_par_hooks(&r->vae_par, r->mesh.replica, r->ls.h, &hooks);
		else if (!pd_parallel_is_writer(&r->mesh))
			hooks.bands = 0;
		r->vae_bands = hooks.bands;
		if (r->vae_bands > 0) {
			if (pd_vae_load(&r->v, r->mp.vae, r->be))
				return -1;
			pd_vae_set_hooks(r->v, &hooks);
			if (pd_vae_get_config(r->v)->latent_channels != r->ls.channels)
				return pd_errorf("%s: the VAE has %d latent channels but the transformer makes %d",
						 r->mp.vae, pd_vae_get_config(r->v)->latent_channels, r->ls.channels);
		}
	}
	if (pd_parallel_setup(&r->par, &r->mesh, r->m, r->e.batch, &r->opt))
		return -1;
	r->par_ok = 1;
	return 0;
}

static void pd_run_free(struct pd_run *r)
{
	if (r->par_ok)
		pd_parallel_free(&r->par);
	pd_vae_free(r->v);
	pd_vae_par_free(&r->vae_par);
	pd_dit_free(r->m);
	pd_backend_free(r->be);
	if (r->mesh_ok)
		pd_mesh_free(&r->mesh);
	pd_scheduler_free(&r->sched);
	pd_embeds_free(&r->e);
	pd_model_paths_free(&r->mp);
	for (int i = 0; i < r->n_prompts; i++)
		free(r->prompts[i]);
	free(r->prompts);
	free(r->init);
}

static void pd_run_notes(const struct pd_run *r, const struct pd_gen_args *a)
{
	char mesh[128];

	if (!r->mp.scheduler)
		pd_log(1, "pdit: note: no scheduler folder; using FLUX.1-%s's settings\n",
		       r->fc.guidance_embeds ? "dev" : "schnell");
	if (r->e.neg_prompt && a->true_cfg_scale <= 1)
		pd_log(1, "pdit: note: %s, unused because --true-cfg-scale is %g (<= 1)\n",
		       a->embeds ? "the embeddings file has negative embeddings" : "a negative prompt was given",
		       a->true_cfg_scale);
	if (!r->fc.guidance_embeds && a->guidance != 3.5f)
		pd_log(1, "pdit: note: this transformer has no guidance embedding; --guidance is ignored\n");
	if (r->world->size > 1) {
		pd_mesh_format(r->degree, r->opt.distrifusion, mesh, sizeof(mesh));
		pd_log(1, "pdit: %d processes, mesh %s%s, %d thread%s each\n", r->world->size, mesh,
		       r->mesh_auto == 2 ? " (chosen by the cost model, as pdit plan ranks them)" :
		       r->mesh_auto ? " (chosen automatically)" : "", r->be->threads, r->be->threads > 1 ? "s" : "");
	}
	pd_log(1, "pdit: %lld image%s %dx%d, %d steps, seed %llu%s\n", (long long)r->e.batch,
	       r->e.batch > 1 ? "s" : "", a->width, a->height, r->p.steps, (unsigned long long)a->seed,
	       pd_gen_uses_cfg(&r->p, &r->e) ? ", true CFG" : "");
}

/* Denoises this rank's images and gathers every image's latents into ALL
 * [B, L, C] on every rank. Failures abort the job. */
static void pd_run_denoise(struct pd_run *r, float *all, const struct pd_dump *model_dump)
{
	int64_t per = r->ls.tokens * r->ls.packed_channels;
	float *mine = pd_malloc((size_t)((r->par.runner.n_images + 1) * per) * sizeof(float), "latents");
	double deadline;
	int rc;

	rc = !mine || pd_denoise(&r->par.runner, r->fam, &r->info, &r->sched, &r->e, &r->p, r->init, mine, NULL, model_dump);
	/* a group with an image more keeps the others waiting here */
	deadline = pd_deadline_off();
	rc = rc || pd_dp_gather(r->mesh.axis[PD_AXIS_DP], mine, per, r->e.batch, all);
	pd_comm_timeout_s = deadline;
	if (rc) {
		free(mine);
		pd_cli_abort(r->world);
	}
	free(mine);
}

enum pd_cmd_kind { PD_CMD_GENERATE, PD_CMD_CHECK, PD_CMD_BENCH };

static void pd_gen_options(struct pd_gen_args *a, struct pd_arg *opts, enum pd_cmd_kind kind)
{
	const struct pd_arg common[] = {
		{ "--model", 'm', PD_ARG_STRING, &a->model, "DIR", "diffusers FLUX folder (model_index.json, transformer/, vae/, scheduler/)", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &a->transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--vae", 0, PD_ARG_STRING, &a->vae, "DIR|FILE", "VAE folder, or one .safetensors file (overrides --model's)", NULL },
		{ "--scheduler", 0, PD_ARG_STRING, &a->scheduler, "DIR", "scheduler folder (overrides --model's)", NULL },
		{ "--diffusion-model", 0, PD_ARG_STRING, &a->diffusion_model, "FILE", "transformer in one .safetensors file (Black Forest Labs' layout or diffusers')", NULL },
		{ "--text-encoder", 0, PD_ARG_STRING, &a->text_encoder, "DIR", "CLIP text encoder folder (overrides --model's)", NULL },
		{ "--clip_l", 0, PD_ARG_STRING, &a->clip_l, "FILE", "CLIP text encoder in one .safetensors file", NULL },
		{ "--text-encoder-2", 0, PD_ARG_STRING, &a->text_encoder_2, "DIR", "T5 encoder folder (overrides --model's)", NULL },
		{ "--t5xxl", 0, PD_ARG_STRING, &a->t5xxl, "FILE", "T5 encoder in one .safetensors file", NULL },
		{ "--tokenizer", 0, PD_ARG_STRING, &a->tokenizer, "DIR", "CLIP tokenizer folder (vocab.json, merges.txt)", NULL },
		{ "--tokenizer-2", 0, PD_ARG_STRING, &a->tokenizer_2, "DIR", "T5 tokenizer folder (spiece.model)", NULL },
		{ "--prompt", 'p', PD_ARG_STRING, &a->prompt, "TEXT", "the prompt (encoded with the model's CLIP and T5)", NULL },
		{ "--negative-prompt", 'n', PD_ARG_STRING, &a->negative, "TEXT", "negative prompt, for --true-cfg-scale above 1", NULL },
		{ "--prompts", 0, PD_ARG_STRING, &a->prompts_file, "FILE", "one prompt a line: a batch (written as NAME-0.png, ...)", NULL },
		{ "--max-sequence-length", 0, PD_ARG_INT, &a->max_seq, "N", "T5 tokens (default 512, or 256 for models without guidance embedding)", NULL },
		{ "--embeds", 0, PD_ARG_STRING, &a->embeds, "FILE", "instead of prompts: safetensors with prompt_embeds [B,T,J], pooled_prompt_embeds [B,P], optional negative_* (pdit encode writes them)", NULL },
		{ "--height", 'H', PD_ARG_INT, &a->height, "PX", "image height, a multiple of 16 (default 1024)", NULL },
		{ "--width", 'W', PD_ARG_INT, &a->width, "PX", "image width, a multiple of 16 (default 1024)", NULL },
		{ "--steps", 0, PD_ARG_INT, &a->steps, "N", "denoising steps (default 28, or 4 for models without guidance embedding)", &a->steps_seen },
		{ "--guidance", 0, PD_ARG_FLOAT, &a->guidance, "G", "distilled guidance scale (default 3.5; dev-style models)", NULL },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &a->true_cfg_scale, "C", "true classifier-free guidance with the negative embeddings when > 1", NULL },
		{ "--seed", 's', PD_ARG_U64, &a->seed, "S", "seed of image 0 (default 42), as torch.Generator('cpu').manual_seed", NULL },
		{ "--output", 'o', PD_ARG_STRING, &a->output, "FILE", "PNG to write (default output.png)", NULL },
		{ "--out-latents", 0, PD_ARG_STRING, &a->out_latents, "FILE", "also write latents.init and latents.final [B,L,C] (packed)", NULL },
		{ "--init-latents", 0, PD_ARG_STRING, &a->init_latents, "FILE", "start from latents.init [B,L,C] or latents.init_unpacked instead of the seed", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a->dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_INT, &a->threads, "N", "threads per process (default: the cores divided among the processes)", NULL },
		{ "--comm-timeout", 0, PD_ARG_FLOAT, &a->comm_timeout, "S", "seconds a process may wait for the others before the job is reported and stopped (default 1800; 0: forever; lifted where one rank works alone: encoding prompts, check's reference)", NULL },
		{ "--parallel", 0, PD_ARG_STRING, &a->parallel, "auto", "choose the mesh as pdit plan ranks them: auto among the exact methods, auto-stale also PipeFusion and DistriFusion", NULL },
		{ "--data-parallel-degree", 0, PD_ARG_INT, &a->dp, "N", "split the batch of images over N groups", NULL },
		{ "--cfg-parallel", 0, PD_ARG_FLAG, &a->cfg_parallel, NULL, "run the positive and negative passes of true CFG on two processes", NULL },
		{ "--tensor-parallel-degree", 0, PD_ARG_INT, &a->tp, "N", "split heads and MLP width over N processes (Megatron)", NULL },
		{ "--ulysses-degree", 0, PD_ARG_INT, &a->ulysses, "N", "sequence parallel with all-to-all between tokens and heads", NULL },
		{ "--ring-degree", 0, PD_ARG_INT, &a->ring, "N", "sequence parallel with ring attention", NULL },
		{ "--pipefusion-degree", 0, PD_ARG_INT, &a->pp, "N", "PipeFusion: N pipeline stages, each a range of the blocks", NULL },
		{ "--num-patches", 0, PD_ARG_INT, &a->patches, "M", "PipeFusion: row bands per step (default: as many as stages)", NULL },
		{ "--distrifusion-degree", 0, PD_ARG_INT, &a->distrifusion, "N", "DistriFusion over N bands of tokens: other bands' keys and values one step old", NULL },
		{ "--warmup-steps", 0, PD_ARG_INT, &a->warmup_steps, "W", "DistriFusion, PipeFusion: the first W steps exact, on fresh keys and values (default 1)", NULL },
		{ "--fbcache-threshold", 0, PD_ARG_FLOAT, &a->fbcache, "T", "First Block Cache: skip the other blocks when the first block's change is below T (0: off; 0.05 to 0.12 usual)", NULL },
		{ "--vae-parallel", 0, PD_ARG_FLAG, &a->vae_parallel, NULL, "decode each picture in row bands over its data-parallel group (the default with more than one process)", NULL },
		{ "--no-vae-parallel", 0, PD_ARG_FLAG, &a->no_vae_parallel, NULL, "decode each picture on one process instead", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a->verbose, NULL, "more detail", NULL },
	};
	size_t n = sizeof(common) / sizeof(common[0]);

	memcpy(opts, common, sizeof(common));
	if (kind == PD_CMD_BENCH) {
		opts[n++] = (struct pd_arg){ "--warmup", 0, PD_ARG_INT, &a->warmup, "N",
					     "untimed steps first (default 1)", NULL };
		opts[n++] = (struct pd_arg){ "--json", 0, PD_ARG_FLAG, &a->json, NULL,
					     "print one JSON object instead of the table", NULL };
		opts[n++] = (struct pd_arg){ "--vae-time", 0, PD_ARG_FLAG, &a->vae_time, NULL,
					     "also time one VAE decode at this size", NULL };
		opts[n++] = (struct pd_arg){ "--batch", 0, PD_ARG_INT, &a->batch, "N",
					     "run N copies of the first prompt (for data parallelism)", NULL };
	}
	if (kind == PD_CMD_CHECK) {
		opts[n++] = (struct pd_arg){ "--golden", 0, PD_ARG_STRING, &a->golden, "FILE",
					     "compare with FILE's latents.final instead of a single-process run", NULL };
		opts[n++] = (struct pd_arg){ "--tolerance", 0, PD_ARG_FLOAT, &a->tolerance, "T",
					     "largest relative difference that passes (default 1e-5, 2e-2 with bf16)", NULL };
	}
	memset(&opts[n], 0, sizeof(opts[n]));
}

static void pd_gen_defaults(struct pd_gen_args *a)
{
	memset(a, 0, sizeof(*a));
	a->output = "output.png";
	a->dtype = "f32";
	a->height = 1024;
	a->width = 1024;
	a->guidance = 3.5f;
	a->true_cfg_scale = 1.0f;
	a->seed = 42;
	a->warmup_steps = 1;
	a->comm_timeout = 1800;
}

/* Parses the arguments: 0 go on, 1 help shown, -1 error (message set). */
static int pd_gen_parse(struct pd_comm *world, struct pd_gen_args *a, int argc, char **argv, enum pd_cmd_kind kind)
{
	static const char *names[] = { "generate", "check", "bench" };
	const char *usage[] = { pd_gen_usage, pd_check_usage, pd_bench_usage };
	const char *examples[] = { pd_gen_examples, pd_check_examples, pd_bench_examples };
	struct pd_arg opts[56];
	const char *pos[1];
	int n_pos, hr;

	pd_gen_defaults(a);
	pd_gen_options(a, opts, kind);
	hr = pd_args_parse(names[kind], opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1 && world->rank == 0)
		pd_args_help(usage[kind], opts, examples[kind]);
	if (hr == 0 && a->verbose && world->rank == 0)
		pd_log_level = 2;
	return hr;
}

int pd_cli_parse_only(int argc, char **argv)
{
	static const char *names[] = { "generate", "check", "bench" };
	struct pd_gen_args a;
	struct pd_arg opts[56];
	const char *pos[1];
	int n_pos;

	if (argc < 2)
		return pd_errorf("no command");
	for (int kind = PD_CMD_GENERATE; kind <= PD_CMD_BENCH; kind++)
		if (strcmp(argv[1], names[kind]) == 0) {
			pd_gen_defaults(&a);
			pd_gen_options(&a, opts, (enum pd_cmd_kind)kind);
			return pd_args_parse(names[kind], opts, argc, argv, 2, pos, 0, &n_pos);
		}
	return pd_errorf("unknown command '%s'", argv[1]);
}

/* ======================================================================= */
/* pdit generate                                                           */
/* ======================================================================= */

/* -v: every rank's peak resident memory, printed by rank 0. */
static void pd_report_memory(struct pd_comm *world)
{
	double mine = pd_peak_rss_mb(), *all = pd_calloc((size_t)world->size, sizeof(double), "memory");

	if (!all)
		return;
	if (pd_comm_allgather(world, &mine, sizeof(double), all) == 0 && world->rank == 0) {
		pd_log(2, "pdit: peak resident memory (MB):");
		for (int i = 0; i < world->size; i++)
			pd_log(2, " %.0f", all[i]);
		pd_log(2, "\n");
	}
	free(all);
}

static char *pd_output_name(const char *pattern, int64_t b, int64_t batch)
{
	const char *dot, *pct = strstr(pattern, "%d");

	if (pct && !strchr(pct + 2, '%') && !memchr(pattern, '%', (size_t)(pct - pattern)))
		return pd_strfmt(pattern, (int)b);
	if (batch == 1)
		return pd_strdup(pattern);
	dot = strrchr(pattern, '.');
	if (!dot || strchr(dot, '/'))
		return pd_strfmt("%s-%lld", pattern, (long long)b);
	return pd_strfmt("%.*s-%lld%s", (int)(dot - pattern), pattern, (long long)b, dot);
}

/* latents.init and latents.final of the whole batch to PATH. */
static int pd_write_latents(struct pd_run *r, const char *path, const float *final)
{
	int64_t per = r->ls.tokens * r->ls.packed_channels, B = r->e.batch;
	int64_t shape[3] = { B, r->ls.tokens, r->ls.packed_channels };
	struct pd_st_writer *w = pd_st_writer_new();
	float *first = r->init, *u = NULL;
	int rc = -1;

	if (!w)
		return -1;
	if (!first) {
		/* the noise is cheap to draw again, cheaper than keeping it */
		first = pd_malloc((size_t)(B * per) * sizeof(float), "latents");
		u = pd_malloc((size_t)r->ls.channels * r->ls.h * r->ls.w * sizeof(float), "noise");
		if (!first || !u)
			goto out;
		for (int64_t b = 0; b < B; b++) {
			pd_draw_noise(&r->ls, r->p.seed + (uint64_t)b, u);
			r->fam->pack(&r->ls, u, first + b * per);
		}
	}
	rc = pd_st_writer_add(w, "latents.init", PD_F32, 3, shape, first) ||
	     pd_st_writer_add(w, "latents.final", PD_F32, 3, shape, final) ||
	     pd_st_writer_meta(w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(w, path) ? -1 : 0;
out:
	if (first != r->init)
		free(first);
	free(u);
	pd_st_writer_free(w);
	return rc;
}

/* Decodes and writes this data-parallel group's images. */
static int pd_write_pictures(struct pd_run *r, const struct pd_gen_args *a, const float *all)
{
	int64_t per = r->ls.tokens * r->ls.packed_channels;
	int f = pd_vae_scale(pd_vae_get_config(r->v));
	size_t npx = (size_t)r->ls.h * f * r->ls.w * f;
	uint8_t *rgb = pd_malloc(npx * 3, "image");
	int rc = 0;

	if (!rgb)
		return -1;
	for (int64_t i = 0; i < r->par.runner.n_images && !rc; i++) {
		int64_t b = r->par.runner.first_image + i;
		char *name = pd_output_name(a->output, b, r->e.batch);
		/* the prompt first, as other tools write this chunk */
		char *source = r->prompts ? pd_strfmt("%s%s%s\n", r->prompts[b], r->negative ? "\nNegative prompt: " : "",
						      r->negative ? r->negative : "")
					  : pd_strfmt("embeds: %s (prompt %lld)\n", a->embeds, (long long)b);
		char *text = source ? pd_strfmt("%spdit %s; seed: %llu; steps: %d; guidance: %g; true_cfg_scale: %g; "
						"size: %dx%d; model: %s; dtype: %s",
						source, PDIT_VERSION, (unsigned long long)(a->seed + b), r->p.steps,
						a->guidance, a->true_cfg_scale, a->width, a->height,
						r->mp.root ? r->mp.root : r->mp.transformer, a->dtype)
				    : NULL;
		double t0 = pd_now();

		rc = !name || !text || pd_decode_image(r->v, r->fam, &r->ls, all + b * per, rgb, NULL, NULL) ? -1 : 0;
		if (!rc && pd_parallel_is_writer(&r->mesh)) {
			rc = pd_png_write(name, rgb, r->ls.w * f, r->ls.h * f, "parameters", text);
			if (!rc)
				pd_log(1, "pdit: wrote %s (decoded in %.2f s%s)\n", name, pd_now() - t0,
				       r->vae_bands > 1 ? " in bands" : "");
		}
		free(name);
		free(text);
		free(source);
	}
	free(rgb);
	return rc;
}

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_run r;
	float *all = NULL;
	int hr, rc = 1;

	memset(&r, 0, sizeof(r));
	r.world = world;
	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_GENERATE);
	if (hr == 1)
		return 0;
	if (pd_cli_any_failed(world, hr || pd_run_prepare(&r, &a, 1)))
		goto out;
	all = pd_malloc((size_t)(r.e.batch * r.ls.tokens * r.ls.packed_channels) * sizeof(float), "latents");
	if (pd_cli_any_failed(world, !all || pd_run_load(&r, &a, 1)))
		goto out;
	pd_run_notes(&r, &a);
	pd_run_denoise(&r, all, NULL);
	/* the flux share goes before decoding: the VAE needs the memory */
	pd_dit_free(r.m);
	r.m = NULL;
	hr = 0;
	if (a.out_latents && world->rank == 0) {
		hr = pd_write_latents(&r, a.out_latents, all);
		if (!hr)
			pd_log(1, "pdit: wrote %s\n", a.out_latents);
	}
	if (!hr && r.v)
		hr = pd_write_pictures(&r, &a, all);
	rc = pd_cli_any_failed(world, hr);
	/* a collective: on the flag every rank shares, not on the log level */
	if (!rc && a.verbose)
		pd_report_memory(world);
out:
	free(all);
	pd_run_free(&r);
	return rc;
}

/* ======================================================================= */
/* pdit check                                                              */
/* ======================================================================= */

/* The block outputs (text and image streams) of the first step, as the dump
 * hands them over: for a process's own tokens in the parallel run, for all
 * tokens in the reference. */
struct pd_blocks {
	int n;                          /* blocks recorded */
	char **names;                   /* "double.0", "single.3", ... */
	float **txt, **img;             /* [rows, D] each */
	int64_t *txt_rows, *img_rows;
	int failed;
};

static void pd_blocks_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim,
			   const int64_t *shape)
{
	struct pd_blocks *b = ctx;
	const char *tail = strstr(name, ".out.");
	int img, k = -1;
	int64_t rows = ndim == 3 ? shape[1] : 0, D = ndim == 3 ? shape[2] : 0;
	size_t base;

	(void)index;
	if (!tail || b->failed)
		return;
	img = strcmp(tail, ".out.hidden_states") == 0;
	if (!img && strcmp(tail, ".out.encoder_hidden_states") != 0)
		return;
	base = (size_t)(tail - name);
	for (int i = 0; i < b->n; i++)
		if (strlen(b->names[i]) == base && strncmp(b->names[i], name, base) == 0)
			k = i;
	if (k < 0) {
		char **nn = realloc(b->names, sizeof(char *) * (size_t)(b->n + 1));
		float **nt = realloc(b->txt, sizeof(float *) * (size_t)(b->n + 1));
		float **ni = realloc(b->img, sizeof(float *) * (size_t)(b->n + 1));
		int64_t *rt = realloc(b->txt_rows, sizeof(int64_t) * (size_t)(b->n + 1));
		int64_t *ri = realloc(b->img_rows, sizeof(int64_t) * (size_t)(b->n + 1));

		if (nn)
			b->names = nn;
		if (nt)
			b->txt = nt;
		if (ni)
			b->img = ni;
		if (rt)
			b->txt_rows = rt;
		if (ri)
			b->img_rows = ri;
		if (!nn || !nt || !ni || !rt || !ri) {
			b->failed = 1;
			return;
		}
		k = b->n++;
		b->names[k] = strndup(name, base);
		b->txt[k] = b->img[k] = NULL;
		b->txt_rows[k] = b->img_rows[k] = 0;
	}
	if (img) {
		b->img[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->img_rows[k] = rows;
		if (b->img[k])
			memcpy(b->img[k], data, (size_t)(rows * D) * sizeof(float));
	} else {
		b->txt[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->txt_rows[k] = rows;
		if (b->txt[k])
			memcpy(b->txt[k], data, (size_t)(rows * D) * sizeof(float));
	}
	if (!b->names[k] || (img && !b->img[k]) || (!img && !b->txt[k]))
		b->failed = 1;
}

static void pd_blocks_free(struct pd_blocks *b)
{
	for (int i = 0; i < b->n; i++) {
		free(b->names[i]);
		free(b->txt[i]);
		free(b->img[i]);
	}
	free(b->names);
	free(b->txt);
	free(b->img);
	free(b->txt_rows);
	free(b->img_rows);
	memset(b, 0, sizeof(*b));
}

/* True for the ranks whose first-step block outputs are compared: image 0,
 * the positive branch, tensor shard 0 (the hidden states are replicated),
 * every pipeline stage (each records its own blocks). */
static int pd_check_contributes(const int degree[PD_AXIS_COUNT], const int coord[PD_AXIS_COUNT])
{
	int cfg_branch = degree[PD_AXIS_CFG] > 1 ? 1 : 0;

	return coord[PD_AXIS_DP] == 0 && coord[PD_AXIS_CFG] == cfg_branch && coord[PD_AXIS_TP] == 0;
}

/* Rank Q's mesh coordinates. */
static void pd_check_coord(const int degree[PD_AXIS_COUNT], int q, int coord[PD_AXIS_COUNT])
{
	for (int x = 0; x < PD_AXIS_COUNT; x++) {
		coord[x] = q % degree[x];
		q /= degree[x];
	}
}

/* Gathers the contributing ranks' token slices of their stage's blocks onto
 * rank 0 into FULL (which has the reference's layout: all rows per block). */
static int pd_check_gather(struct pd_run *r, const struct pd_blocks *mine, const struct pd_blocks *ref,
			   struct pd_blocks *full)
{
	struct pd_comm *w = r->world;
	int P = r->mesh.sp->size, D = r->fc.dim, nb = ref ? ref->n : 0, first, count;
	int64_t T = r->e.txt_len, L = r->ls.tokens, total = 0;
	size_t *bytes = pd_calloc((size_t)w->size, sizeof(size_t), "counts"), send_bytes = 0;
	float *send = NULL, *recv = NULL;
	int32_t recorded = mine->n > 0;
	int rc = -1;

	if (!bytes)
		return -1;
	/* a pipeline run records nothing when its first step is patched */
	if (w->size > 1 && w->ops->allreduce(w, &recorded, 1, PD_COMM_I32, PD_COMM_MAX))
		goto out;
	for (int q = 0; q < w->size && recorded; q++) {
		int coord[PD_AXIS_COUNT], j;

		pd_check_coord(r->degree, q, coord);
		if (!pd_check_contributes(r->degree, coord))
			continue;
		pd_pipe_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
		j = coord[PD_AXIS_RING] * r->degree[PD_AXIS_ULYSSES] + coord[PD_AXIS_ULYSSES];
		bytes[q] = (size_t)(count * (pd_chunk_len(T, P, j) + pd_chunk_len(L, P, j)) * D) * sizeof(float);
		total += (int64_t)bytes[q];
	}
	if (bytes[w->rank]) {
		int64_t off = 0;

		send_bytes = bytes[w->rank];
		send = pd_malloc(send_bytes + 1, "check");
		if (!send)
			goto out;
		memset(send, 0, send_bytes);
		for (int k = 0; k < mine->n && (size_t)off * sizeof(float) < send_bytes; k++) {
			memcpy(send + off, mine->txt[k], (size_t)(mine->txt_rows[k] * D) * sizeof(float));
			off += mine->txt_rows[k] * D;
			memcpy(send + off, mine->img[k], (size_t)(mine->img_rows[k] * D) * sizeof(float));
			off += mine->img_rows[k] * D;
		}
	}
	if (w->rank == 0) {
		recv = pd_malloc((size_t)total + 1, "check");
		if (!recv)
			goto out;
	}
	if (w->ops->gatherv(w, send, send_bytes, recv, bytes, 0))
		goto out;
	if (w->rank == 0) {
		/* lay the slices out by token: SP rank j's text rows start at its
		 * chunk start, likewise its image rows; stage s's blocks at its first */
		const float *p = recv;

		full->n = recorded ? nb : 0;
		full->names = pd_calloc((size_t)nb + 1, sizeof(char *), "check");
		full->txt = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->img = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->txt_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		full->img_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		if (!full->names || !full->txt || !full->img || !full->txt_rows || !full->img_rows)
			goto out;
		for (int k = 0; k < nb; k++) {
			full->names[k] = pd_strdup(ref->names[k]);
			full->txt[k] = pd_malloc((size_t)(T * D) * sizeof(float) + 1, "check");
			full->img[k] = pd_malloc((size_t)(L * D) * sizeof(float) + 1, "check");
			full->txt_rows[k] = recorded ? T : 0;
			full->img_rows[k] = recorded ? L : 0;
			if (!full->names[k] || !full->txt[k] || !full->img[k])
				goto out;
		}
		for (int q = 0; q < w->size; q++) {
			int coord[PD_AXIS_COUNT], j;

			if (!bytes[q])
				continue;
			pd_check_coord(r->degree, q, coord);
			pd_pipe_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
			j = coord[PD_AXIS_RING] * r->degree[PD_AXIS_ULYSSES] + coord[PD_AXIS_ULYSSES];
			for (int k = first; k < first + count; k++) {
				int64_t tn = pd_chunk_len(T, P, j), in = pd_chunk_len(L, P, j);

				if (k < nb) {
					memcpy(full->txt[k] + pd_chunk_start(T, P, j) * D, p,
					       (size_t)(tn * D) * sizeof(float));
					memcpy(full->img[k] + pd_chunk_start(L, P, j) * D, p + tn * D,
					       (size_t)(in * D) * sizeof(float));
				}
				p += (tn + in) * D;
			}
		}
	}
	rc = 0;
out:
	free(bytes);
	free(send);
	free(recv);
	return rc;
}

static double pd_rel_diff(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);

		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

/* The single-process reference on rank 0: the whole model, every image. */
static int pd_check_reference(struct pd_run *r, float *latents, struct pd_blocks *blocks)
{
	struct pd_backend *be = NULL;
	struct pd_dit *m = NULL;
	struct pd_runner run;
	struct pd_dump dump = { pd_blocks_dump, blocks, 0 };
	int rc = -1;

	if (pd_backend_cpu_new(&be, r->dt, r->be->threads) || pd_flux_load_dit(&m, r->mp.transformer, be, NULL))
		goto out;
	run = pd_runner_local(m);
	pd_log(1, "pdit: running the single-process reference\n");
	rc = pd_denoise(&run, r->fam, &r->info, &r->sched, &r->e, &r->p, r->init, latents, NULL, &dump);
	if (!rc && blocks->failed)
		rc = pd_errorf("out of memory recording the reference");
out:
	pd_dit_free(m);
	pd_backend_free(be);
	return rc;
}

/* --golden: the final latents (and the noise) against a file. */
static int pd_check_golden(struct pd_run *r, const char *path, const float *all, double tol, int *pass)
{
	int64_t n = r->e.batch * r->ls.tokens * r->ls.packed_channels;
	const char *names[2] = { "latents.init", "latents.final" };
	float *ref = pd_malloc((size_t)n * sizeof(float), "reference"), *init = NULL;
	struct pd_st *st = NULL;
	int rc = -1;

	if (!ref || pd_st_open(&st, path))
		goto out;
	*pass = 1;
	for (int k = 0; k < 2; k++) {
		const struct pd_st_tensor *t = pd_st_get(st, names[k]);
		const float *got = all;
		double d;

		if (!t) {
			if (k == 1) {
				pd_errorf("%s: no latents.final to compare with", path);
				goto out;
			}
			continue;
		}
		if (t->numel != n) {
			pd_errorf("%s: %s has %lld values, the run makes %lld", path, names[k], (long long)t->numel,
				  (long long)n);
			goto out;
		}
		if (pd_st_read_f32(t, 0, (size_t)n, ref))
			goto out;
		if (k == 0) {
			int64_t per = r->ls.tokens * r->ls.packed_channels;
			float *u = pd_malloc((size_t)r->ls.channels * r->ls.h * r->ls.w * sizeof(float), "noise");

			init = pd_malloc((size_t)n * sizeof(float), "noise");
			if (!u || !init) {
				free(u);
				goto out;
			}
			for (int64_t b = 0; b < r->e.batch; b++) {
				if (r->init) {
					memcpy(init + b * per, r->init + b * per, (size_t)per * sizeof(float));
					continue;
				}
				pd_draw_noise(&r->ls, r->p.seed + (uint64_t)b, u);
				r->fam->pack(&r->ls, u, init + b * per);
			}
			free(u);
			got = init;
		}
		d = pd_rel_diff(got, ref, (size_t)n);
		printf("  %-24s %9.2e\n", k ? "final latents" : "initial noise", d);
		if (!(d <= tol))
			*pass = 0;
	}
	rc = 0;
out:
	free(ref);
	free(init);
	pd_st_close(st);
	return rc;
}

int pd_cmd_check(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_run r;
	struct pd_blocks mine = { 0 }, ref = { 0 }, full = { 0 };
	struct pd_dump dump = { pd_blocks_dump, &mine, 0 };
	float *all = NULL, *ref_lat = NULL;
	char mesh[128];
	double tol, deadline;
	int hr, rc = 1, pass = 1;

	memset(&r, 0, sizeof(r));
	r.world = world;
	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_CHECK);
	if (hr == 1)
		return 0;
	if (pd_cli_any_failed(world, hr || pd_run_prepare(&r, &a, 0)))
		goto out;
	tol = a.tolerance > 0 ? a.tolerance : r.dt == PD_BF16 ? 2e-2 : 1e-5;
	all = pd_malloc((size_t)(r.e.batch * r.ls.tokens * r.ls.packed_channels) * sizeof(float), "latents");
	if (pd_cli_any_failed(world, !all || pd_run_load(&r, &a, 0)))
		goto out;
	pd_run_notes(&r, &a);
	pd_run_denoise(&r, all, a.golden ? NULL : &dump);
	pd_dit_free(r.m);
	r.m = NULL;
	pd_mesh_format(r.degree, r.opt.distrifusion, mesh, sizeof(mesh));
	if (a.golden) {
		hr = 0;
		if (world->rank == 0) {
			printf("pdit check: mesh %s against %s, tolerance %g\n", mesh, a.golden, tol);
			hr = pd_check_golden(&r, a.golden, all, tol, &pass);
		}
	} else {
		/* the reference first (rank 0), then the slices come to it */
		ref_lat = pd_malloc((size_t)(r.e.batch * r.ls.tokens * r.ls.packed_channels) * sizeof(float), "latents");
		hr = !ref_lat || mine.failed || (world->rank == 0 && pd_check_reference(&r, ref_lat, &ref));
		deadline = pd_deadline_off();	/* the others wait for rank 0's reference */
		hr = pd_cli_any_failed(world, hr);
		pd_comm_timeout_s = deadline;
		if (hr)
			goto out;
		hr = pd_check_gather(&r, &mine, world->rank == 0 ? &ref : NULL, &full);
		if (!hr && world->rank == 0) {
			printf("pdit check: mesh %s against one process, %s, tolerance %g\n", mesh, a.dtype, tol);
			printf("  %-24s %9s\n", "first step", "max rel. difference");
			if (full.n == 0)
				printf("  (the first step ran patched: blocks not compared)\n");
			for (int k = 0; k < full.n; k++) {
				double dt = pd_rel_diff(full.txt[k], ref.txt[k], (size_t)(ref.txt_rows[k] * r.fc.dim));
				double di = pd_rel_diff(full.img[k], ref.img[k], (size_t)(ref.img_rows[k] * r.fc.dim));
				double d = dt > di ? dt : di;

				if (ref.txt_rows[k] == 0)
					d = di;
				printf("  %-24s %9.2e\n", ref.names[k], d);
				if (!(d <= tol))
					pass = 0;
			}
			{
				double d = pd_rel_diff(all, ref_lat,
						       (size_t)(r.e.batch * r.ls.tokens * r.ls.packed_channels));

				printf("  %-24s %9.2e\n", "final latents", d);
				if (!(d <= tol))
					pass = 0;
			}
			if (ref.n == 0)
				pass = 0;	/* nothing was compared: not a pass */
			if ((r.opt.distrifusion || (r.degree[PD_AXIS_PP] > 1 && r.opt.patches != 1)) && r.opt.warmup_steps < r.p.steps)
				printf("  note: %s is exact only in its %d warm-up step%s; later steps attend to keys and\n"
				       "  values one step old, so they differ from one process by design. With\n"
				       "  --warmup-steps %d every step is exact and the check must pass.\n",
				       r.opt.distrifusion ? "DistriFusion" : "PipeFusion", r.opt.warmup_steps,
				       r.opt.warmup_steps == 1 ? "" : "s", r.p.steps);
		}
	}
	if (!hr && world->rank == 0)
		printf("%s\n", pass ? "PASS" : "FAIL");
	if (pd_cli_any_failed(world, hr))
		goto out;
	{
		int32_t p32 = pass;

		if (world->size > 1)
			world->ops->bcast(world, &p32, sizeof(p32), 0);
		rc = p32 ? 0 : 1;
	}
out:
	pd_blocks_free(&mine);
	pd_blocks_free(&ref);
	pd_blocks_free(&full);
	free(all);
	free(ref_lat);
	pd_run_free(&r);
	return rc;
}

/* ======================================================================= */
/* pdit bench                                                              */
/* ======================================================================= */

/* Bytes this rank has sent through every communicator of the mesh, and
 * the seconds it has waited in them. */
static void pd_mesh_traffic(const struct pd_mesh *m, uint64_t *bytes, double *wait)
{
	const struct pd_comm *all[PD_AXIS_COUNT + 3] = { m->world, m->sp, m->model };

	for (int x = 0; x < PD_AXIS_COUNT; x++)
		all[3 + x] = m->axis[x];
	*bytes = 0;
	*wait = 0;
	for (int i = 0; i < PD_AXIS_COUNT + 3; i++) {
		*bytes += all[i]->bytes_sent;
		*wait += all[i]->wait_s;
	}
}

/* What each rank reports at the end of bench (gathered to rank 0). */
struct pd_bench_rank {
	double rss_mb;                  /* peak resident memory, MB */
	double weights_mb;              /* the estimate: weights the backend holds */
	double work_mb;                 /* and its activations' and scratch's high-water mark */
	double wait_s;                  /* seconds waiting in transfers per timed step (mean) */
};

struct pd_bench_clock {
	const struct pd_mesh *mesh;     /* whose traffic is counted */
	double *t;                      /* time at the end of each step */
	uint64_t *bytes;                /* bytes sent by then */
	double *wait;                   /* seconds waited in transfers by then */
	double t0;                      /* start of the first step */
	uint64_t b0;
	double w0;
	struct pd_backend *be;          /* whose allocations are counted */
	uint64_t *allocs;               /* its allocation count by the end of each step */
};

static void pd_bench_on_step(void *ctx, int step)
{
	struct pd_bench_clock *c = ctx;

	c->t[step] = pd_now();
	pd_mesh_traffic(c->mesh, &c->bytes[step], &c->wait[step]);
	c->allocs[step] = c->be->allocations;
}

int pd_cmd_bench(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_run r;
	struct pd_bench_clock clk = { 0 };
	struct pd_dit_flops fl;
	float *all = NULL;
	struct pd_bench_rank *rk = NULL;
	double *dt = NULL, sps = 0, mm = 0, vae_s = -1, step_flop, achieved;
	uint64_t bytes_step = 0, bytes_max = 0, allocs_late = 0;
	char mesh[128], *default_embeds = NULL;
	int hr, rc = 1, timed, total, branches;

	memset(&r, 0, sizeof(r));
	r.world = world;
	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_BENCH);
	if (hr == 1)
		return 0;
	if (!hr && !a.embeds && !a.prompt && !a.prompts_file && a.model) {
		default_embeds = pd_strfmt("%s/embeds.safetensors", a.model);
		if (default_embeds && pd_file_exists(default_embeds))
			a.embeds = default_embeds;
	}
	if (!hr && !a.steps_seen) {
		a.steps = 3;
		a.steps_seen = 1;
	}
	if (!hr && a.warmup <= 0)
		a.warmup = 1;
	if (pd_cli_any_failed(world, hr || pd_run_prepare(&r, &a, 0)))
		goto out;
	timed = r.p.steps;
	total = r.p.steps = a.warmup + timed;
	all = pd_malloc((size_t)(r.e.batch * r.ls.tokens * r.ls.packed_channels) * sizeof(float), "latents");
	clk.t = pd_calloc((size_t)total, sizeof(double), "bench");
	clk.bytes = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.allocs = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.wait = pd_calloc((size_t)total, sizeof(double), "bench");
	rk = pd_calloc((size_t)world->size, sizeof(*rk), "bench");
	dt = pd_calloc((size_t)total, sizeof(double), "bench");
	if (pd_cli_any_failed(world, !all || !clk.t || !clk.bytes || !clk.wait || !clk.allocs || !rk || !dt || pd_run_load(&r, &a, 0)))
		goto out;
	/* the reference rate first, on rank 0 alone, at the widest product:
	 * one image's tokens through the first MLP layer */
	if (world->rank == 0)
		mm = pd_backend_rate_matmul(r.be, r.e.txt_len + r.ls.tokens, r.fc.dim, r.fc.mlp_dim);
	if (world->size > 1)
		world->ops->barrier(world);
	pd_run_notes(&r, &a);
	/* the reference product's buffers are gone: the estimate counts the steps' */
	r.be->work_peak = r.be->work_bytes;
	clk.mesh = &r.mesh;
	clk.be = r.be;
	r.par.runner.on_step = pd_bench_on_step;
	r.par.runner.step_ctx = &clk;
	clk.t0 = pd_now();
	pd_mesh_traffic(&r.mesh, &clk.b0, &clk.w0);
	pd_run_denoise(&r, all, NULL);
	for (int i = a.warmup; i < total; i++)
		dt[i - a.warmup] = clk.t[i] - (i ? clk.t[i - 1] : clk.t0);
	sps = pd_median_sort(dt, timed);
	bytes_step = (clk.bytes[total - 1] - (a.warmup ? clk.bytes[a.warmup - 1] : clk.b0)) / (uint64_t)timed;
	bytes_max = bytes_step;
	allocs_late = clk.allocs[total - 1] - clk.allocs[a.warmup - 1];
	{
		struct pd_bench_rank mine = {
			.rss_mb = pd_peak_rss_mb(),
			.weights_mb = (double)r.be->weight_bytes / 1048576.0,
			.work_mb = (double)r.be->work_peak / 1048576.0,
			.wait_s = (clk.wait[total - 1] - (a.warmup ? clk.wait[a.warmup - 1] : clk.w0)) / timed,
		};

		if (world->size > 1) {
			if (pd_comm_allgather(world, &mine, sizeof(mine), rk) ||
			    world->ops->allreduce(world, &sps, 1, PD_COMM_F64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &bytes_max, 1, PD_COMM_I64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &allocs_late, 1, PD_COMM_I64, PD_COMM_MAX))
				pd_cli_abort(world);
		} else {
			rk[0] = mine;
		}
	}
	if (a.vae_time && r.mp.vae && world->rank == 0) {
		/* the transformer's memory goes first, as in generate */
		uint8_t *rgb = NULL;

		pd_dit_free(r.m);
		r.m = NULL;
		if (pd_vae_load(&r.v, r.mp.vae, r.be) == 0) {
			int f = pd_vae_scale(pd_vae_get_config(r.v));

			rgb = pd_malloc((size_t)r.ls.h * f * r.ls.w * f * 3, "image");
			if (rgb) {
				double t0 = pd_now();

				if (pd_decode_image(r.v, r.fam, &r.ls, all, rgb, NULL, NULL) == 0)
					vae_s = pd_now() - t0;
			}
			free(rgb);
		}
	}
	fl = pd_dit_count_flops(&r.info, r.e.txt_len, r.ls.tokens);
	branches = pd_gen_uses_cfg(&r.p, &r.e) ? 2 : 1;
	step_flop = (fl.linear + fl.attention) * (double)r.e.batch * branches;
	achieved = step_flop / sps / 1e9;
	pd_mesh_format(r.degree, r.opt.distrifusion, mesh, sizeof(mesh));
	if (world->rank == 0) {
		double rss_max = 0, w_mb, act_mb;
		int big = 0;

		for (int i = 0; i < world->size; i++)
			if (rk[i].rss_mb > rss_max) {
				rss_max = rk[i].rss_mb;
				big = i;
			}
		w_mb = rk[big].weights_mb;
		act_mb = rk[big].work_mb;
		if (a.json) {
			printf("{\"model\": \"%s\", \"height\": %d, \"width\": %d, \"tokens\": %lld, \"dtype\": \"%s\", "
			       "\"ranks\": %d, \"threads\": %d, \"mesh\": \"%s\", \"images\": %lld, \"branches\": %d, "
			       "\"seconds_per_step\": %.6g, \"step_gflop\": %.10g, \"achieved_gflops\": %.6g, "
			       "\"matmul_gflops\": %.6g, \"ratio\": %.4g, \"bytes_sent_per_rank_per_step\": %llu, "
			       "\"bytes_sent_per_step_rank0\": %llu, \"peak_rss_mb\": %.1f, \"peak_rss_mb_per_rank\": [",
			       r.mp.root ? r.mp.root : r.mp.transformer, a.height, a.width,
			       (long long)(r.e.txt_len + r.ls.tokens), a.dtype, world->size, r.be->threads, mesh,
			       (long long)r.e.batch, branches, sps, step_flop / 1e9, achieved, mm,
			       mm > 0 ? achieved / (mm * world->size) : 0, (unsigned long long)bytes_max,
			       (unsigned long long)bytes_step, rss_max);
			for (int i = 0; i < world->size; i++)
				printf("%s%.1f", i ? ", " : "", rk[i].rss_mb);
			printf("], \"wait_seconds_per_step_per_rank\": [");
			for (int i = 0; i < world->size; i++)
				printf("%s%.4f", i ? ", " : "", rk[i].wait_s);
			printf("], \"weights_mb\": %.4f, \"activations_mb\": %.4f, \"estimate_mb\": %.4f, "
			       "\"peak_over_estimate\": %.3f, \"allocations_after_warmup\": %llu, "
			       "\"vae_seconds\": %.3f}\n",
			       w_mb, act_mb, w_mb + act_mb, rss_max / (w_mb + act_mb), (unsigned long long)allocs_late,
			       vae_s);
		} else {
			printf("pdit bench: %s, %dx%d (%lld text + %lld image tokens), %s, %d process%s x %d thread%s\n",
			       r.mp.root ? r.mp.root : r.mp.transformer, a.width, a.height, (long long)r.e.txt_len,
			       (long long)r.ls.tokens, a.dtype, world->size, world->size > 1 ? "es" : "", r.be->threads,
			       r.be->threads > 1 ? "s" : "");
			printf("  mesh                            %s\n", mesh);
			printf("  seconds per step                %.3f  (median of %d after %d warm-up)\n", sps, timed,
			       a.warmup);
			printf("  step GFLOP                      %.1f  (%lld image%s x %d branch%s)\n", step_flop / 1e9,
			       (long long)r.e.batch, r.e.batch > 1 ? "s" : "", branches, branches > 1 ? "es" : "");
			printf("  achieved GFLOP/s                %.1f\n", achieved);
			printf("  matmul GFLOP/s per process      %.1f  (%s, %lldx%dx%d)\n", mm, a.dtype,
			       (long long)(r.e.txt_len + r.ls.tokens), r.fc.dim, r.fc.mlp_dim);
			printf("  ratio                           %.2f\n", mm > 0 ? achieved / (mm * world->size) : 0);
			printf("  bytes sent per rank per step    %.1f MB (largest rank)\n", (double)bytes_max / 1e6);
			if (world->size > 1) {
				double lo = rk[0].wait_s, hi = rk[0].wait_s;

				for (int i = 1; i < world->size; i++) {
					lo = fmin(lo, rk[i].wait_s);
					hi = fmax(hi, rk[i].wait_s);
				}
				printf("  seconds waiting per step        %.3f to %.3f  (over the ranks, the mean of the timed"
				       " steps: in transfers, for peers)\n", lo, hi);
			}
			printf("  peak resident memory            %.0f MB (largest rank)", rss_max);
			if (world->size > 1) {
				printf(":");
				for (int i = 0; i < world->size; i++)
					printf(" %.0f", rk[i].rss_mb);
			}
			printf("\n");
			printf("  memory estimate                 %.0f MB = weights %.0f + activations %.0f (rank %d);"
			       " peak / estimate %.2f\n",
			       w_mb + act_mb, w_mb, act_mb, big, rss_max / (w_mb + act_mb));
			printf("  allocations in timed steps      %llu  (buffers and primitives, the most on a rank)\n",
			       (unsigned long long)allocs_late);
			if (vae_s >= 0)
				printf("  VAE decode seconds              %.2f\n", vae_s);
		}
	}
	rc = 0;
out:
	free(all);
	free(clk.t);
	free(clk.bytes);
	free(clk.wait);
	free(clk.allocs);
	free(rk);
	free(dt);
	free(default_embeds);
	pd_run_free(&r);
	return rc;
}
