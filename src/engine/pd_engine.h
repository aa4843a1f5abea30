/*
 * pd_engine.h - the engine's state, for the commands that look inside a run
 * (pdit check compares the mesh's blocks with one process's, pdit bench
 * times steps and counts bytes). Programs use pdit.h.
 */
#ifndef PD_ENGINE_H
#define PD_ENGINE_H

#include "pd_families.h"
#include "pd_mesh.h"
#include "pd_model_paths.h"
#include "pd_par_vae.h"
#include "pd_parallel.h"
#include "pd_pipeline.h"
#include "pdit.h"

/* Bounds that keep every size product far from overflow: 1M image tokens,
 * 16384 px a side; more steps or pictures than anyone runs. */
#define PD_MAX_SIDE 16384
#define PD_MAX_STEPS 10000
#define PD_MAX_BATCH 4096

struct pd_engine {
	struct pd_comm *world;          /* all processes (borrowed) */
	struct pd_engine_options o;     /* as opened (its strings are not kept: see mp) */
	struct pd_model_paths mp;       /* component folders and files */
	char *tconfig;                  /* the transformer's config.json given apart, or NULL */
	struct pd_dit_info info;        /* transformer sizes, as the parallel methods and the planner see them */
	int info_ok;                    /* info was read (an encode_only engine may have no transformer) */
	struct pd_dit_defaults dflt;    /* the family's steps and schedule for this model */
	const struct pd_dit_family *fam; /* the model family's pipeline side */
	struct pd_log_sink log;         /* the log while the engine's calls run */
	enum pd_dtype dt;               /* matrix-product precision */
	enum pd_dtype vae_dt;           /* the VAE's convolutions' precision */
	double load_seconds;            /* reading the transformer's weights into the backend (and
					 * checking the VAE) at open */
	double encode_seconds;          /* encoding the prompts at open (0 for embeddings) */
	enum pd_qtype quantize;         /* the blocks' plain weights encoded at load into this (PD_Q_F32: none) */
	int degree[PD_AXIS_COUNT];      /* the mesh */
	int mesh_auto;                  /* chosen by pdit, not given: 1 by rule, 2 by the cost model */
	struct pd_par_options opt;      /* DistriFusion, warm-up, patches */
	struct pd_mesh mesh;            /* its communicators (once created) */
	int mesh_ok;
	struct pd_scheduler sched;      /* the schedule (set per request) */
	double shift0;                  /* the scheduler's own shift (a request's --flow-shift overrides it) */
	int dynamic0;                   /* and its dynamic shifting */
	struct pd_backend *be;          /* compute */
	struct pd_dit *m;               /* this rank's share of the transformer */
	struct pd_vae *v;               /* the VAE (on ranks that decode) */
	void *fv;                       /* or the family's own (fam->vae_load) */
	struct pd_parallel par;         /* the parallel methods */
	int par_ok;
	struct pd_vae_par vae_par;      /* decoding in bands over the data-parallel group */
	int vae_bands;                  /* bands this rank takes part in (0: it does not decode) */
	int vae_rows;                   /* latent rows vae_par was set up for */
	int dead;                       /* a collective failure: no more requests */
	int cancelled;                  /* the running request was cancelled (pd_request.cancel) */
	void *encoders;                 /* the family's text encoders, kept (keep_encoders), or NULL */
	int widths_read;                /* prompt_width and pooled_width are known */
	int64_t prompt_width, pooled_width; /* the encoders' embedding widths (read once) */
	int requests;                   /* requests run */
	/* The request being run (or prepared at open for PLAN). */
	const struct pd_request *ready; /* the request prepared and encoded, NULL: none */
	const struct pd_request *running; /* the request being denoised (its step callback) */
	double t_denoise;               /* when its denoising began (progress) */
	struct pd_embeds e;             /* its prompt embeddings */
	char **prompts;                 /* its prompts (copies), NULL with embeddings from a file */
	int n_prompts;
	char *negative;                 /* its negative prompt (a copy), or NULL */
	int max_seq;                    /* T5 tokens per prompt */
	struct pd_latent_shape ls;      /* latent geometry */
	struct pd_gen_params p;         /* generation parameters */
	float *init;                    /* initial latents from a file [B, L, C], or NULL */
};

/* The caller's log and thread count, put back when a call returns. */
struct pd_engine_scope {
	struct pd_log_sink log;         /* the caller's log */
	struct pd_backend *be;          /* the backend entered, or NULL */
	int threads;                    /* what pd_backend_enter returned */
};

/* The engine's log and (once it has a backend) thread count on the calling
 * thread until pd_engine_leave; the commands that look inside a run hold
 * one scope around it. */
void pd_engine_enter(struct pd_engine *e, struct pd_engine_scope *s);
void pd_engine_leave(const struct pd_engine_scope *s);

/* The request RQ checked against the engine and shaped (embeddings read or
 * encoded, latents' geometry, parameters); collective. */
int pd_engine_prepare(struct pd_engine *e, const struct pd_request *rq);

/* Denoises the prepared request: ALL [B, L, C] gets every picture's final
 * latents on every rank. MODEL_DUMP as pd_denoise takes it. Collective; a
 * failure leaves the engine dead. */
int pd_engine_denoise(struct pd_engine *e, float *all, const struct pd_dump *model_dump);

/* The prepared request's initial latents [B, L, C] (malloc'd): as given,
 * or the seeds' noise drawn again; NULL with a message. */
float *pd_engine_initial(const struct pd_engine *e);

/* The notes and the run's summary line, before denoising RQ. */
void pd_engine_notes(const struct pd_engine *e, const struct pd_request *rq);

/* Where one rank works alone by design (encoding prompts, check's
 * reference, a data-parallel group's extra picture) the others wait without
 * the deadline: the agreement over the world with the deadline lifted. */
int pd_engine_agree_waiting(struct pd_engine *e, int failed);

#endif /* PD_ENGINE_H */
