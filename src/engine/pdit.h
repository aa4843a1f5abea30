/*
 * pdit.h - the pdit engine: a diffusion transformer of any family it knows
 * (FLUX.1, Qwen-Image, Wan2.1: pd_family_names) from prompts to pictures and videos, on
 * one process or on a mesh of them, opened once and asked for any number
 * of them.
 *
 *   struct pd_comm *world;
 *   struct pd_engine *e;
 *   struct pd_engine_options o;
 *   struct pd_request rq;
 *   struct pd_result res;
 *   const char *prompts[] = { "a red fox in the snow" };
 *
 *   pd_comm_world_init(&argc, &argv, &world);    // under mpirun: the job
 *   pd_engine_options_init(&o);
 *   o.model = "FLUX.1-dev";
 *   o.degree[PD_AXIS_ULYSSES] = world->size;     // or nothing: pdit chooses
 *   if (pd_engine_open(&e, world, &o, NULL))
 *           fprintf(stderr, "%s\n", pd_last_error());
 *   pd_request_init(&rq);
 *   rq.prompts = prompts;
 *   rq.n_prompts = 1;
 *   rq.height = rq.width = 512;
 *   if (pd_engine_run(e, &rq, &res) == 0 && res.rgb)
 *           ... res.rgb: [res.n_pictures, frames, height, width, 3] ...
 *   pd_result_free(&res);
 *   pd_engine_close(e);
 *   pd_comm_world_finalize(world);
 *
 * Every process of the world calls every function with the same arguments:
 * the calls are collective. A request that cannot run (a size that does not
 * fit the mesh, a missing negative prompt, an unreadable file) returns -1
 * with a message (pd_last_error()) on every process and leaves the engine
 * ready for the next one. A failure in the middle of collective work (a
 * process lost or past the transfer deadline) leaves the engine dead: its
 * calls return -1 until it is closed. After a failed call, world->failed_rank
 * is the lowest process that failed: its message is the cause, the others
 * say which process failed.
 *
 * The library never exits the process but in one case, and leaves no
 * process-wide setting changed: the transfer deadline is the engine's
 * communicators', and its log level and thread count hold on the calling
 * thread only while one of its calls runs (the caller's own come back when
 * it returns). The one case: under MPI, a process that has waited past
 * comm_timeout (1800 s by default) for the others says who is missing on
 * stderr and stops the whole job (MPI_Abort), as a collective stuck in MPI
 * cannot be left any other way. On a CPU with AMX-INT8, opening asks Linux
 * for the tiles' state (arch_prctl, as oneDNN does): granted to the process
 * for good. One engine runs one request at a time (a second thread's
 * pd_engine_run is refused); two engines may run on two threads.
 */
#ifndef PDIT_H
#define PDIT_H

#include <stddef.h>
#include <stdint.h>

#include "pd_axis.h"
#include "pd_comm.h"
#include "pd_model_paths.h"
#include "pd_api.h"

/* installed for programs in C or C++ */
#ifdef __cplusplus
extern "C" {
#endif

struct pd_embeds;

/* Bounds that keep every size product far from overflow: 1M image tokens,
 * 16384 px a side; more steps or pictures than anyone runs. */
#define PD_MAX_SIDE 16384
#define PD_MAX_STEPS 10000
#define PD_MAX_BATCH 4096
#define PD_MAX_THREADS 1024

/* What the engine is doing, for a progress display: each phase reports
 * its start (done 0), its progress and its end (finished). */
enum pd_phase {
	PD_PHASE_ENCODE,                /* the text encoders, on the prompts */
	PD_PHASE_LOAD,                  /* reading this process's weights */
	PD_PHASE_DENOISE,               /* denoising steps: done of total */
	PD_PHASE_DECODE,                /* the VAE: pictures done of total (this process's) */
	PD_PHASE_PICTURES,              /* the VAE's encoder, on the pictures in (img2img, inpainting,
					 * Fill, Kontext's reference): pictures done of total */
};

struct pd_progress {
	enum pd_phase phase;
	int done, total;                /* steps or pictures done; total 0: not counted */
	double elapsed;                 /* seconds since the phase began */
	int finished;                   /* the phase is over (elapsed: its whole time) */
	int videos;                     /* decoding: the pictures are videos */
	int all;                        /* decoding: the request's pictures, of which total are this
					 * process's (data parallel decodes each group's own) */
};

/* What an engine loads and how it runs, fixed for its life. */
struct pd_engine_options {
	/* The model, as the command's flags name its parts; NULL parts come
	 * from MODEL's folder (model_index.json). */
	const char *model;              /* a diffusers folder */
	const char *transformer;        /* folder, or one file (safetensors, fp8, GGUF) */
	const char *transformer_config; /* a config.json for a single file that carries none, or NULL */
	const char *vae;                /* folder, or one .safetensors file */
	const char *scheduler;          /* folder */
	/* The family's text encoders in its order (FLUX: CLIP, T5; Wan:
	 * UMT5): folders or files, and their tokenizers' folders, as
	 * diffusers' text_encoder, text_encoder_2, ... and tokenizer, ... */
	const char *text_encoder[PD_MAX_ENCODERS];
	const char *tokenizer[PD_MAX_ENCODERS];
	/* Text encoders given as single files by the names stable-diffusion.cpp
	 * gives them ("clip_l", "t5xxl", ...; pd_encoders_known lists them):
	 * the family says which of its encoders each is. A NULL name ends. */
	struct pd_encoder_file {
		const char *name;       /* "t5xxl" */
		const char *path;       /* the file */
	} encoder_files[PD_MAX_ENCODERS];
	const char *dtype;              /* "f32" or "bf16": the matrix products */
	const char *vae_dtype;          /* "f32" (the default: the reference's numbers) or "bf16": the VAE's
					 * convolutions (about 2x faster, pixels within a few levels) */
	const char *quantize;           /* "q8_0", "q4_k", "fp8", ...: the transformer blocks' weights a file
					 * stores as plain floats, encoded into that type at load and kept
					 * so; NULL: as stored */
	/* LoRA adapters put beside the transformer's layers as it loads
	 * (--lora FILE[:SCALE]): in this order, a NULL path ends the list;
	 * never merged, so kept-quantized weights stay so */
	struct pd_lora_spec loras[PD_MAX_LORAS];
	int lora_lenient;               /* an adapter's keys of no layer of the model are skipped (listed at log
					 * level 2), not refused */
	const char *lora_dir;           /* where <lora:NAME:SCALE> in a prompt finds NAME.safetensors
					 * (--lora-model-dir, stable-diffusion.cpp's); NULL: such tags are
					 * refused */
	int lora_cache_mb;              /* adapter sets whose terms stay on the host, up to this many MB
					 * (the least recently used go first), so a request that names a
					 * set used before puts it back without reading its files (pdit
					 * serve --lora-cache); 0: none kept */
	int threads;                    /* per process, at most PD_MAX_THREADS; 0: the cores divided among
					 * this machine's processes */
	const char *quant_products;     /* how layers kept quantized multiply: "int8" (inputs quantized in
					 * blocks of 256 for Q8_0 (layers a multiple of 256 wide) and
					 * the K-quants, as ggml's Q8_K, of 32 for the other types as
					 * its Q8_0, int8 dot products with the weights' integers (Q8_0,
					 * Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K), fp8 e4m3's converted to
					 * int8 blocks at load), "int8-256" (as int8, and those Q8_0
					 * layers' weights requantized at load to one scale per 256
					 * inputs: another rounding, fewer f32 operations, AMX tiles
					 * of full depth), "bf16" (decoded to the products' precision), or "auto"
					 * (NULL, the default: int8 with bf16 products where the
					 * backend's int8 products are faster, as a CPU with AVX-512
					 * VNNI or AVX-VNNI whose bf16 products are not AMX's;
					 * decoded elsewhere) */
	const char *ring_attention;     /* ring attention's form: "merged" (each chunk's partial result
					 * merged by its log-sum-exp while the next travels: the transfers
					 * overlap the work, K/V memory O(S/R), one process's result within
					 * f32's last bits), "gathered" (every chunk's K/V gathered in the
					 * sequence's order, one attention: one process's result bit for
					 * bit, K/V memory O(S)), or "auto" (NULL, the default: gathered
					 * on int8 products, whose 8-bit roundings turn last bits into
					 * steps of 1/127, else merged) */
	const char *backend;            /* what computes: "cpu", "cuda", or "auto" (NULL, the default: CUDA
					 * where pdit has it and a GPU is present, else the CPU) */
	int device;                     /* the GPU of this process; -1 (the default): its local rank among
					 * the job's processes on its machine, modulo the GPUs there */
	const char *comm;               /* how a GPU's buffers travel between processes: "mpi" (through
					 * pinned host buffers), "nccl", or "auto" (NULL, the default:
					 * NCCL where pdit has it and every process of a machine has its
					 * own GPU) */
	int log_level;                  /* 0 errors only, 1 progress (the default), 2 detail */
	/* receives each line of the log (NULL: stderr) */
	void (*log)(void *ctx, int level, const char *line);
	void *log_ctx;                  /* log's first argument */
	/* called on every process as the engine's phases go (may be NULL) */
	void (*on_progress)(void *ctx, const struct pd_progress *p);
	void *progress_ctx;             /* on_progress's first argument */
	int op_times;                   /* time each backend operation (pdit bench --op-times: the
					 * report's ops; a device is waited for after each) */
	double comm_timeout;            /* seconds a process waits for the others before the job is reported
					 * and stopped (MPI_Abort: every process ends); 0: forever;
					 * pd_engine_options_init: 1800 */
	/* The mesh: a degree per axis (pd_axis.h; 0: not given; none given:
	 * pdit chooses; CFG parallel is degree 2 on PD_AXIS_CFG; DistriFusion's
	 * and the ring's exclude each other), or parallel = "auto" /
	 * "auto-stale" (the cost model's first choice). */
	int degree[PD_AXIS_COUNT];
	const char *parallel;
	int warmup_steps;               /* DistriFusion, PipeFusion: exact steps first */
	int patches;                    /* PipeFusion: patches per step (0: one per stage) */
	int vae_parallel;               /* 1 decode in bands over each data-parallel group, -1 on one
					 * process, 0 banded with more than one process */
	int decode;                     /* load the VAE: requests can ask for pictures */
	int one_request;                /* the command's mode: the transformer is freed before the one
					 * request's decode (the VAE gets its memory); later requests fail */
	int keep_encoders;              /* the text encoders stay loaded after the first request's prompts
					 * (a long-lived engine: their weights are read once, and held
					 * beside the transformer); 0: loaded and freed per request */
	int encode_only;                /* load no transformer: requests make prompt embeddings
					 * (want_embeds), on one process */
	const char *family;             /* with encode_only and no transformer: its family (NULL: the
					 * first pd_family_names lists, FLUX) */
};

/* The model families pdit knows, NULL-terminated ("flux", "qwen", "wan"), and
 * what each makes (for help). */
PD_API const char *const *pd_family_names(void);
PD_API const char *pd_family_title(const char *name);

/* What this pdit was built with, for --version: a line each for the
 * backends, the communicators and the videos, those left out named with
 * the CMake option that brings them ("videos: none, frames as PNG
 * (-DPDIT_VIDEO=ON with FFmpeg)"). Made once; no trailing newline. */
PD_API const char *pd_build_about(void);

/* What the families' text encoders are, for a command's flags and help:
 * the most any family has (each a slot, --text-encoder[-N] and
 * --tokenizer[-N]), which family's encoder each slot is, and the single
 * files' names (--clip_l, --t5xxl, ...). */
struct pd_encoders_known {
	int slots;                      /* the most text encoders a family has */
	char slot[PD_MAX_ENCODERS][160]; /* slot I in every family: "flux's CLIP, wan's UMT5" */
	char tokenizer[PD_MAX_ENCODERS][200]; /* and its tokenizer's files */
	int n_files;                    /* single-file names */
	struct {
		const char *name;       /* "t5xxl" */
		char help[160];         /* "flux's T5, wan's UMT5" */
	} files[2 * PD_MAX_ENCODERS];
};
PD_API void pd_encoders_known(struct pd_encoders_known *k);

/* A request's count or size left to pdit (the family's default): "not
 * given" is never 0, which is refused like any size below 1. */
#define PD_DEFAULT (-1)

/* One batch of pictures (pd_request_init: every count PD_DEFAULT). */
struct pd_request {
	const char *const *prompts;     /* the prompts, one picture each */
	int n_prompts;
	const char *negative;           /* the negative prompt of every picture (true CFG), or NULL */
	int max_seq;                    /* text tokens; PD_DEFAULT: the family's (FLUX 512, or 256 without
					 * guidance embedding; Qwen-Image and Wan 512) */
	const char *embeds;             /* instead of prompts: a safetensors file of embeddings
					 * (prompt_embeds, pooled_prompt_embeds, optional negative_*) */
	const char *init_latents;       /* start from latents.init of this file instead of the noise */
	/* img2img (FluxImg2ImgPipeline): start from this picture (PNG, 8-bit;
	 * its size is the request's unless height and width are given, which
	 * it must then have), encoded by the VAE, its posterior sampled from
	 * each picture's generator before the noise is drawn; or NULL */
	const char *init_image;
	/* FLUX.1 Kontext (FluxKontextPipeline): a reference picture (PNG,
	 * sides multiples of 16, any size), encoded by the VAE (the
	 * posterior's mode) and appended after the image tokens with position
	 * ids whose first axis is 1; or NULL */
	const char *ref_image;
	const uint8_t *ref_png;         /* the same as PNG bytes (a service's request; the file wins) */
	size_t ref_png_len;
	const char *mask_image;         /* inpainting (with init_image): a PNG of its size, white where the
					 * picture is made anew (FluxInpaintPipeline); or NULL */
	/* the same pictures as PNG bytes instead of files (a service's
	 * request; the files win when both are given) */
	const uint8_t *init_png, *mask_png;
	size_t init_png_len, mask_png_len;
	int mask_alpha;                 /* mask_png's fully transparent pixels are the ones repainted
					 * (OpenAI's images.edit), not its white ones */
	/* LoRA adapters of this request, in place of the engine's
	 * (pd_engine_options.loras) when loras_given: a NULL path ends the
	 * list (none at all: no adapter). The model is not reloaded: the
	 * terms beside its layers change, and stay for the next request that
	 * asks for the same. */
	int loras_given;
	struct pd_lora_spec loras[PD_MAX_LORAS];
	double strength;                /* img2img: the share of the steps run, noise to picture (0, 1];
					 * PD_DEFAULT: 0.75 (a double: N x strength as Python computes it) */
	int height, width;              /* pixels, multiples of 16; PD_DEFAULT: the family's (FLUX 1024,
					 * Qwen-Image 1328, Wan 480 x 832) */
	const char *aspect;             /* instead of height and width, "W:H": the size the family's card
					 * lists for it (Qwen-Image's 16:9 is 1664 x 928), or the default
					 * size's area in that shape; NULL: not */
	int frames;                     /* video frames (video families); PD_DEFAULT: the family's (a
					 * picture; Wan 81) */
	int steps;                      /* denoising steps; PD_DEFAULT: the family's (FLUX 28, or 4 without
					 * guidance embedding; Qwen-Image and Wan 50) */
	double flow_shift;              /* the sampler's static shift (Wan's flow_shift; FLUX without its
					 * dynamic shifting); 0: the scheduler folder's */
	float guidance;                 /* guidance scale, negative: the family's. FLUX: distilled (models
					 * with guidance embedding, 3.5); Wan: classifier-free (5) */
	float true_cfg_scale;           /* above 1 with a negative prompt: true CFG; negative: the
					 * family's when there is a negative prompt (Qwen-Image 4, as
					 * QwenImagePipeline), else 1 (off) */
	uint64_t seed;                  /* picture b is drawn from seed + b */
	int batch;                      /* PD_DEFAULT: a picture per prompt; N: N copies of the first prompt */
	float fbcache_threshold;        /* First Block Cache: 0 off, 0.05 to 0.12 usual */
	int want_latents;               /* fill the result's latents (every process) */
	int want_pictures;              /* decode: fill the result's pictures (writing processes) */
	int want_embeds;                /* encode_only engines: fill the result's embeddings */
	/* Called on every process after denoising step STEP (from 0) of STEPS
	 * (may be NULL). */
	void (*on_step)(void *ctx, int step, int steps);
	void *step_ctx;
	/* When not NULL: read on every process after each step but the last
	 * and agreed over all of them (one small all-reduce a step); nonzero on
	 * any process stops the request there with -1 and "cancelled", the
	 * engine ready for the next. Another thread may set it. */
	const volatile int *cancel;
};

/* What a request made. Free with pd_result_free. */
struct pd_result {
	int64_t images;                 /* pictures in the batch */
	int height, width;              /* pixels */
	int steps;                      /* the schedule's steps (img2img runs its last steps x strength) */
	float strength;                 /* img2img's strength, or 0 */
	int frames;                     /* video frames (1: pictures) */
	float guidance, true_cfg_scale; /* the scales used: guidance the distilled one (FLUX's embedding; 0
					 * where the model has none), true_cfg_scale the classifier-free
					 * one over the negative prompt (Wan's guidance lands here: 5) */
	uint64_t seed;                  /* of picture 0 */
	int64_t tokens, channels;       /* latent tokens and channels per picture (packed) */
	float *latents;                 /* [images, tokens, channels] final latents, or NULL */
	float *init;                    /* [images, tokens, channels] initial latents, or NULL */
	/* Pictures: a process that writes holds those of its data-parallel
	 * group, pictures [first_picture, first_picture + n_pictures). */
	int64_t first_picture, n_pictures;
	uint8_t *rgb;                   /* [n_pictures, frames, height, width, 3], or NULL */
	double decode_s;                /* seconds a picture's decode took (the mean) */
	int bands;                      /* bands a picture was decoded in */
	struct pd_embeds *embeds;       /* want_embeds: the prompts' embeddings, the token ids among
					 * their extras (pd_result_save_embeds writes them) */
	int64_t txt_len, txt_width;     /* want_embeds: text tokens per prompt and their width */
	int64_t pooled_width;           /* want_embeds: the pooled embedding's width (0: none) */
	/* What the pictures were made from besides the prompt and the
	 * settings, for their parameters text ("; init image hash: ...;
	 * Lora hashes: ..."): the pictures in (hashes of their pixels, so a
	 * file and the same picture sent to the service agree) and the
	 * adapters (names, scales, hashes of their files); "" when none */
	char made_from[1024];
	int adapters_cached;            /* this request's adapters went on from the engine's cache of
					 * adapter sets (lora_cache_mb), not from their files */
};

struct pd_engine;

PD_API void pd_engine_options_init(struct pd_engine_options *o);
/* Every count and size PD_DEFAULT, guidance, true_cfg_scale and strength
 * the family's, seed 42, want_pictures 1, the rest 0 or NULL. */
PD_API void pd_request_init(struct pd_request *rq);

/* Loads the model on every process of WORLD (each its share of it). PLAN
 * (may be NULL) is the request the mesh is chosen and the memory checked
 * for; its prompts are encoded before the transformer is read, so the text
 * encoders and the transformer are never in memory together for it. Run it
 * first and unchanged (the same struct; its on_step, step_ctx, cancel and
 * want_latents may be set since): that run uses what open prepared. A
 * request that differs is prepared and encoded at its run, the
 * transformer loaded beside the encoders. */
PD_API int pd_engine_open(struct pd_engine **out, struct pd_comm *world, const struct pd_engine_options *o,
		   const struct pd_request *plan);
PD_API int pd_engine_run(struct pd_engine *e, const struct pd_request *rq, struct pd_result *res);
PD_API void pd_result_free(struct pd_result *res);
PD_API void pd_engine_close(struct pd_engine *e);

/* True once a collective failure has left the engine unusable. */
PD_API int pd_engine_dead(const struct pd_engine *e);
/* True when the last request stopped because it was cancelled (its cancel
 * flag): the engine is ready for the next. */
PD_API int pd_engine_cancelled(const struct pd_engine *e);

/* What an open engine runs, for a command's messages and a service's
 * answers. The strings live as long as the engine. */
struct pd_engine_about {
	const char *family;             /* the model family ("flux", "qwen", "wan") */
	const char *model;              /* the model folder, or the transformer's path without one */
	int guidance_is_cfg;            /* the family's guidance scale is classifier-free guidance over
					 * the negative prompt (Wan): a client's cfg_scale is its
					 * guidance; 0: a distilled scale, and cfg_scale is true CFG */
	int frames;                     /* the planned request's frames (1: pictures), or the family's */
	int latents_unpacked;           /* --out-latents holds [B, C, F, h, w], not packed tokens */
	/* what a request that leaves them out gets: the family's (or the
	 * scheduler folder's) */
	int default_width, default_height, default_steps, default_frames;
	char mesh[128];                 /* every degree: "dp=1 cfg=2 pp=1 ring=1 ulysses=2 tp=1" */
	char mesh_short[128];           /* the degrees above 1 ("ulysses=2 cfg=2"), or "one process" */
	int threads;                    /* per process */
	const char *backend;            /* what computes ("cpu", "cuda") */
	const char *device;             /* on what: the processor's or the GPU's name */
	const char *dtype, *vae_dtype;  /* the products' and the VAE's precision: "f32" or "bf16" */
	const char *quant_products;     /* how its quantized layers multiply: "int8" (some do),
					 * "int8-256" (some do, Q8_0's requantized) or "bf16"
					 * (decoded, or none is quantized) */
	int int8_layers;                /* layers of this process that multiply in int8 */
	const char *ring_attention;     /* "merged" or "gathered" (pd_engine_options.ring_attention) where
					 * the mesh has ring attention, else "" */
	double load_seconds;            /* reading this process's weights at open */
	double encode_seconds;          /* encoding the planned request's prompts at open */
};
PD_API void pd_engine_about(const struct pd_engine *e, struct pd_engine_about *a);
/* 0 when the model makes a picture or video of FRAMES x HEIGHT x WIDTH
 * (the family's rule: FLUX one frame, Wan 4k + 1), else -1 with the
 * message pd_engine_run would give. Reads only what open fixed, so a
 * service's threads may ask while a request runs. */
PD_API int pd_engine_shape_ok(const struct pd_engine *e, int frames, int height, int width);

/* A long-lived engine's log level and progress callback from now on (a
 * service shows loading, then logs its requests its own way). */
PD_API void pd_engine_set_log_level(struct pd_engine *e, int level);
PD_API void pd_engine_set_progress(struct pd_engine *e, void (*on_progress)(void *ctx, const struct pd_progress *p),
			    void *ctx);

/* The result's latents.init and latents.final to PATH (safetensors): packed
 * [B, L, C] as FluxPipeline holds them, or [B, C, F, h, w] as a video
 * pipeline does (about.latents_unpacked). Needs want_latents. */
PD_API int pd_engine_save_latents(const struct pd_engine *e, const struct pd_result *res, const char *path);
/* The embeddings of a want_embeds result to PATH, with PROMPTS[N] and
 * NEGATIVE in its metadata (what --embeds reads back). */
PD_API int pd_result_save_embeds(const struct pd_result *res, const char *path, char *const *prompts, int n,
			  const char *negative);

/* ----------------------------------------------------------------------- */
/* Looking inside a run: pdit check and pdit bench                         */
/* ----------------------------------------------------------------------- */

/* One compared quantity: a block's outputs at the first step, the final
 * latents, the initial noise. */
struct pd_check_row {
	char name[48];                  /* "double.0", "single.3", "final latents", "initial noise" */
	double diff;                    /* the largest relative difference, max|a - b| / max|b| */
};

/* What pd_engine_check found (the rows on the world's rank 0). */
struct pd_check_report {
	char mesh[128];                 /* the mesh compared (pd_engine_about's mesh) */
	double tolerance;               /* the largest difference that passes */
	int pass;                       /* every row within it (every rank) */
	int patched;                    /* the first step ran patched: no block was compared */
	int n_rows;                     /* rows: the blocks, then the final latents */
	struct pd_check_row *rows;
	const char *stale;              /* "PipeFusion" or "DistriFusion" when the mesh attends to keys
					 * and values a step old after its warm-up (differences by
					 * design), NULL when every step is exact */
	int warmup_steps, steps;        /* with stale: its exact steps, and the run's */
};

/* Runs RQ (the request the engine was opened for, or another) on the mesh
 * and compares with one process: the first step's block outputs and the
 * final latents against the same computation on rank 0 alone; with GOLDEN
 * (a safetensors file: latents.final, and latents.init when present) the
 * final latents and the noise against it instead. TOLERANCE below 0: 1e-5,
 * or 2e-2 with bf16 products; 0: equal bits. The engine's transformer is freed on the way
 * (the reference needs the memory): no request can follow (pd_engine_run
 * refuses). Collective; 0
 * with REP filled (free it), or -1 with a message. */
PD_API int pd_engine_check(struct pd_engine *e, const struct pd_request *rq, const char *golden, double tolerance,
		    struct pd_check_report *rep);
PD_API void pd_check_report_free(struct pd_check_report *rep);

/* What each process reports of a bench run. */
struct pd_bench_rank {
	double rss_mb;                  /* peak resident memory, MB */
	double weights_mb;              /* the estimate: weights the backend holds */
	double work_mb;                 /* and its activations' and scratch's high-water mark */
	double wait_s;                  /* seconds waiting in transfers per timed step (the mean) */
	double load_s;                  /* seconds loading its weights */
};

/* One backend operation at one shape in a bench's timed steps, per step
 * (op_times). */
struct pd_bench_op {
	char name[72];                  /* the operation and its shape ("linear 4608 x 3072 -> 12288 bf16") */
	double calls;                   /* calls a step */
	double seconds;                 /* seconds a step */
	double gflop;                   /* its work a step, counted from the shapes (products, attention,
					 * convolutions; 0 for the rest) */
};

/* What pd_engine_bench measured (the per-rank lists on rank 0). */
struct pd_bench_report {
	int64_t txt_len, img_len;       /* tokens of a picture */
	int64_t images;                 /* pictures in the batch */
	int branches;                   /* 2 with true CFG */
	int dim, mlp_width;             /* the widest product's shape: tokens x dim x mlp_width */
	int timed, warmup;              /* steps */
	double seconds_per_step;        /* the median of the timed steps (the slowest rank's) */
	double steps_seconds;           /* every step, the warm-up included */
	double step_gflop;              /* a step's work, counted from the shapes */
	double matmul_gflops;           /* the product rate at the widest shape, one process (rank 0) */
	uint64_t bytes_max;             /* bytes sent per step by the busiest rank */
	uint64_t bytes_rank0;           /* and by rank 0 */
	uint64_t allocations;           /* made in the timed steps, the most on a rank */
	int ranks;                      /* processes */
	struct pd_bench_rank *rank;     /* [ranks] */
	/* with vae: one decode */
	double vae_seconds;             /* -1: not timed */
	double vae_gflop;               /* its work over every band */
	double vae_matmul_gflops;       /* the product rate at its middle convolutions' shape */
	int vae_bands;                  /* bands it ran in */
	/* with op_times: rank 0's operations in the timed steps, the longest first */
	struct pd_bench_op *ops;        /* [n_ops] */
	int n_ops;                      /* rows of ops */
};

/* Times RQ's denoising steps: WARMUP untimed ones, then the rest of
 * rq->steps (total), on every process; with VAE one decode of the first
 * picture after them, in bands over every process when BANDED, else on
 * rank 0. With VAE the transformer is freed before the decode, and no
 * request can follow (pd_engine_run refuses). Collective; 0 with REP
 * filled (free it), or -1 with a message. */
PD_API int pd_engine_bench(struct pd_engine *e, const struct pd_request *rq, int warmup, int vae, int banded,
		    struct pd_bench_report *rep);
PD_API void pd_bench_report_free(struct pd_bench_report *rep);

/* ----------------------------------------------------------------------- */
/* One transformer call: pdit forward                                      */
/* ----------------------------------------------------------------------- */

/* One transformer call on golden-style inputs (pdit forward). */
struct pd_forward_options {
	const char *transformer;        /* folder or one file */
	const char *config;             /* a config.json for a single file that carries none, or NULL */
	const char *inputs;             /* the in.* tensors (golden names) */
	const char *out;                /* out.sample (and the dump) go here */
	int dump;                       /* also every intermediate */
	const char *dtype;              /* "f32" (NULL) or "bf16" */
	int threads;                    /* 0: the caller's */
	const char *backend;            /* as pd_engine_options' (NULL: auto) */
	const char *quant_products;     /* as pd_engine_options' (NULL: auto) */
	struct pd_lora_spec loras[PD_MAX_LORAS]; /* as pd_engine_options' */
	int lora_lenient;               /* as pd_engine_options' */
};
/* One process. */
PD_API int pd_forward_file(const struct pd_forward_options *o);

#ifdef __cplusplus
}
#endif

#endif /* PDIT_H */
