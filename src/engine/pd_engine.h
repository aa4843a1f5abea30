/*
 * pd_engine.h - the engine's state and the functions its files share
 * (pd_engine_open.c: options, mesh, memory, loading; pd_engine_request.c: a
 * request checked, shaped and encoded; pd_engine_run.c: denoising and
 * decoding; pd_engine_check.c and pd_engine_bench.c: pdit check and bench).
 * Private to the engine: programs and the commands use pdit.h.
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

struct pd_engine {
	struct pd_comm *world;          /* all processes (borrowed) */
	struct pd_engine_options o;     /* as opened (its strings are not kept: see mp) */
	struct pd_model_paths mp;       /* component folders and files */
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
	int int8_unfit;                 /* auto's int8 layout would not fit where the stored one does: decoded */
	int ring_form;                  /* o.ring_attention read (pd_engine_ring_form): 1 gathered, 0 merged,
					 * -1 auto */
	int n_loras;                    /* adapters in o.loras (their paths copied: the engine's) */
	struct pd_lora_spec on[PD_MAX_LORAS]; /* the adapters beside the model's layers now (paths copied) */
	int n_on;                       /* how many */
	uint64_t on_hash[PD_MAX_LORAS]; /* their files' FNV-1a, read once when they go on (PNG parameters) */
	struct pd_lora_cache *lora_cache; /* adapter sets built before (o.lora_cache_mb), or NULL */
	int on_cached;                  /* the request's adapters went on from lora_cache */
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
	void *vae;                      /* the VAE (of the family's kind, fam->vae), on ranks that decode */
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
	int busy;                       /* pd_engine_run is running (a second caller is refused) */
	/* The request being run (or prepared at open for PLAN). */
	const struct pd_request *ready; /* the request prepared and encoded, NULL: none */
	struct pd_request ready_rq;     /* *ready as it was prepared, and a digest of its texts: a
					 * request at that address that differs (another caller's
					 * struct there since) is prepared anew */
	uint64_t ready_text;
	const struct pd_request *running; /* the request being denoised (its step callback) */
	double t_denoise;               /* when its denoising began (progress) */
	struct pd_embeds e;             /* its prompt embeddings */
	char **prompts;                 /* its prompts (copies), NULL with embeddings from a file */
	int n_prompts;
	char *negative;                 /* its negative prompt (a copy), or NULL */
	struct pd_lora_spec tags[PD_MAX_LORAS]; /* adapters its prompts name (<lora:NAME:SCALE>; paths malloc'd) */
	int n_tags;                     /* how many */
	int max_seq;                    /* T5 tokens per prompt */
	struct pd_latent_shape ls;      /* latent geometry */
	struct pd_gen_params p;         /* generation parameters */
	float *init;                    /* initial latents from a file or a picture [B, L, C], or NULL */
	uint8_t *init_rgb;              /* img2img's picture [init_h, init_w, 3], or NULL */
	int init_w, init_h;             /* its size */
	float strength;                 /* img2img's strength, or 0 */
	uint8_t *mask_rgb;              /* inpainting's mask [init_h, init_w, 3], or NULL */
	uint8_t *ref_rgb;               /* Kontext's reference picture [ref_h, ref_w, 3], or NULL */
	int ref_w, ref_h;               /* its size */
	float *ref, *ref_ids;           /* its tokens [ref_len, C] and their ids, once encoded (p.ref points here) */
	int64_t ref_len;                /* how many */
	struct pd_inpaint inpaint;      /* its latents, once the picture is encoded (p.inpaint points here) */
	float *inpaint_buf;             /* what inpaint's pointers hold: image, noise, mask */
	float *cond;                    /* FLUX.1 Fill's conditioning [B, L, ls.cond_channels] once the picture
					 * is encoded (p.cond points here), or NULL */
};

/* The caller's log and thread count, put back when a call returns. */
struct pd_engine_scope {
	struct pd_log_sink log;         /* the caller's log */
	struct pd_backend *be;          /* the backend entered, or NULL */
	int threads;                    /* what pd_backend_enter returned */
};

/* The engine's log and (once it has a backend) thread count on the calling
 * thread until pd_engine_leave: every public call that computes or logs
 * holds one (open, run, check, bench). */
void pd_engine_enter(struct pd_engine *e, struct pd_engine_scope *s);
void pd_engine_leave(const struct pd_engine_scope *s);

/* Tells the caller where a phase stands: begun at T0, DONE of TOTAL. */
void pd_engine_progress(struct pd_engine *e, enum pd_phase phase, double t0, int done, int total, int finished);

/* Agreement over the world after a phase: 0 when no rank failed. */
int pd_engine_agree(struct pd_engine *e, int failed);
/* Where one rank works alone by design (encoding prompts, check's
 * reference, a data-parallel group's extra picture) the others wait without
 * the deadline: the agreement over the world with the deadline lifted. */
int pd_engine_agree_waiting(struct pd_engine *e, int failed);

/* pd_engine_open.c: the model's parts O names (the text encoders' single
 * files in the slots their family gives them), the transformer's family
 * and sizes (*INFO_OK: read; ENCODE_ONLY: a transformer is not needed, and
 * without one the family is O's). */
int pd_engine_resolve(const struct pd_engine_options *o, int encode_only, struct pd_model_paths *mp,
		      const struct pd_dit_family **fam, struct pd_dit_info *info, int *info_ok);
/* Its text encoders' kinds for the log ("CLIP + T5"). */
void pd_engine_encoder_kinds(const struct pd_dit_family *fam, char *buf, size_t len);

/* pd_engine_plan.c: what the mesh must allow for the prepared request,
 * the mesh for it (as given, by rule or by the cost model), and whether it
 * fits this machine's memory (DECODES: with the VAE's decode; LOADED: the
 * weights are already resident). */
void pd_engine_limits(const struct pd_engine *e, struct pd_mesh_limits *lim);
int pd_engine_choose_mesh(struct pd_engine *e);
int pd_engine_check_memory(const struct pd_engine *e, int decodes, int loaded);
/* Whether O leaves the quantized layers' products to auto (as
 * pd_backend_qproducts reads --quant-products): the engine may then choose
 * for the run (every rank alike, and decoded where the int8 layout does
 * not fit). O's value was checked when the engine opened. */
int pd_engine_products_auto(const struct pd_engine_options *o);
/* The same before loading; where auto's int8 layout of the kept weights
 * does not fit but the file's does, the products decode them (int8_unfit,
 * said in the log). */
int pd_engine_check_memory_layout(struct pd_engine *e, int decodes);
/* What --quantize QUANTIZE (PD_Q_F32: none) encodes at load, in INFO: where
 * the file keeps no quantized weights, the blocks' weights held as encoded
 * (kept_fraction, kept_bytes); returns the type pd_engine_held_layout
 * takes (PD_Q_F32 where nothing is encoded). */
enum pd_qtype pd_engine_encoded_info(enum pd_qtype quantize, struct pd_dit_info *info);
/* A CPU's int8 products hold kept-quantized weights in their own layout
 * (Q4_K 2.8% above the file's bytes, fp8 6%, Q6_K 30%, Q5_0 55%, Q5_K 57%): INFO's bytes per kept weight
 * made those of the layout TRANSFORMER's tensors (or, QUANTIZE not
 * PD_Q_F32, the blocks --quantize encodes at load) will have under O's
 * backend and products (chosen as pd_backend_new chooses them), for the
 * planner and the memory check; and INFO's int8_fraction and int8_type
 * (which of them multiply in int8, the planner's timing). */
int pd_engine_held_layout(const struct pd_engine_options *o, enum pd_dtype dt, const char *transformer,
			  enum pd_qtype quantize, struct pd_dit_info *info);
/* pd_engine_options.ring_attention NAME as *FORM: 1 gathered, 0 merged,
 * -1 auto; -1 with a message naming the flag where it is none of them. */
int pd_engine_ring_form(const char *name, int *form);

/* pd_engine_request.c */

/* R with the family's defaults D for what it leaves out (size, frames,
 * guidance); a family whose guidance is classifier-free (Wan) runs it as
 * true CFG with the negative prompt, "" when none is given, as its pipeline
 * does. -1 with a message naming FAMILY when R asks for both. */
int pd_engine_request_defaults(const struct pd_dit_defaults *d, const char *family, struct pd_request *r);

/* Everything about RQ that can be checked without the mesh's communicators
 * (this rank alone): the family's defaults applied, inputs read or shaped. */
int pd_engine_prepare_local(struct pd_engine *e, const struct pd_request *rq);
/* The prepared request as every rank read it; collective. */
int pd_engine_same_everywhere(struct pd_engine *e, const struct pd_request *rq);
/* The request RQ checked against the engine and shaped; collective. */
int pd_engine_prepare(struct pd_engine *e, const struct pd_request *rq);
/* Encodes the prepared request's prompts (one rank per data-parallel
 * group) and shares them; FAILED: this rank failed before, every rank goes
 * through the agreement all the same. */
int pd_engine_encode(struct pd_engine *e, int failed);
/* 0 when THREADS (0: the default) is a thread count a backend can make,
 * else -1 naming -t/--threads (open's and forward's rule). */
int pd_engine_threads_ok(int threads);
/* RQ prepared and encoded, unless open did it already (the plan's). */
int pd_engine_ready(struct pd_engine *e, const struct pd_request *rq);
/* Marks RQ, prepared and encoded now, as the one the next run may take
 * without preparing it again. */
void pd_engine_set_ready(struct pd_engine *e, const struct pd_request *rq);
/* The request's state, released before the next one. */
void pd_engine_request_free(struct pd_engine *e);
/* Every text encoder the family needs (its list: not optional), and its
 * tokenizer, known; -1 naming the flags that give them. */
int pd_engine_encoders_given(const struct pd_engine *e);
/* Whether the N PROMPTS and NEGATIVE (may be NULL) are UTF-8 text, as the
 * pipelines' Python strings are: other bytes each tokenizer would read its
 * own way. 0, or -1 naming the prompt and the byte. */
int pd_engine_text_ok(const char *const *prompts, int n, const char *negative);

/* pd_engine_run.c */

/* The notes and the run's summary line, before denoising RQ. */
void pd_engine_notes(const struct pd_engine *e, const struct pd_request *rq);
/* Denoises the prepared request: ALL [B, L, C] gets every picture's final
 * latents on every rank. MODEL_DUMP as pd_denoise takes it. Collective; a
 * failure leaves the engine dead. */
int pd_engine_denoise(struct pd_engine *e, float *all, const struct pd_dump *model_dump);
/* The prepared request's initial latents [B, L, C] (malloc'd): as given,
 * or the seeds' noise drawn again; NULL with a message. */
float *pd_engine_initial(const struct pd_engine *e);
/* Who decodes the prepared request's pictures, the VAE loaded where it is
 * needed. */
int pd_engine_vae_setup(struct pd_engine *e);
/* The loaded VAE's hooks for encoding a picture of LATENT_ROWS latent rows:
 * in bands over the replica as the decode is (each of its ranks gets the
 * whole latents), or whole on every rank where the replica is one process,
 * the VAE is not parallel (vae_parallel < 0) or there are more processes
 * than rows. Every rank of the replica encodes together. 0, or -1. */
int pd_engine_vae_encode_setup(struct pd_engine *e, int latent_rows);
/* img2img: the prepared request's initial latents from its picture (the
 * backend ready: at run), on every process alike. */
int pd_engine_init_picture(struct pd_engine *e);
/* Kontext's reference picture encoded (the posterior's mode), packed, with
 * its ids: e->ref, and the denoising's p.ref. */
int pd_engine_ref_picture(struct pd_engine *e);
/* The VAE loaded on this process (once). */
int pd_engine_vae_load(struct pd_engine *e);
/* The VAE's band hooks (pd_vae.h; the inert ones when HOOKS is NULL). */
void pd_engine_vae_hooks(struct pd_engine *e, const struct pd_vae_hooks *hooks);
/* Pixels per latent position of the loaded VAE. */
int pd_engine_vae_scale(const struct pd_engine *e);
/* One picture or video of the packed latents PACKED: RGB [frames, H, W, 3]
 * (written on band 0 of a banded decode). */
int pd_engine_vae_decode(struct pd_engine *e, const float *packed, uint8_t *rgb);
/* The transformer's memory goes (before a decode that needs it, or
 * check's reference). */
void pd_engine_free_transformer(struct pd_engine *e);

/* Puts the adapters RQ asks for (NULL, or none given: the options') beside
 * the model's layers when they are not those there already: 0, or -1 with a
 * message (none left on then). pd_engine_adapters_forget drops the record. */
int pd_engine_adapters(struct pd_engine *e, const struct pd_request *rq);
/* What the prepared request's pictures are made from besides the prompt
 * (the pictures in, the adapters) for their parameters text, into OUT. */
void pd_engine_made_from(const struct pd_engine *e, char *out, size_t cap);
/* FNV-1a over N bytes, continuing H (PD_ENGINE_HASH_START to begin): what
 * ranks compare their files by, and what the PNG parameters name pictures
 * and adapters by. */
#define PD_ENGINE_HASH_START 14695981039346656037ull
uint64_t pd_engine_hash(uint64_t h, const void *p, size_t n);
/* Bytes of the options' adapter files (what the memory check adds). */
double pd_engine_adapter_bytes(const struct pd_engine *e);
void pd_engine_adapters_forget(struct pd_engine *e);

#endif /* PD_ENGINE_H */
