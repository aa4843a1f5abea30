/*
 * pd_serve.h - the HTTP side of `pdit serve`: rank 0 answers HTTP requests
 * (libmicrohttpd: Debian packages it, it parses HTTP and keeps slow or
 * broken clients to its own threads and timeouts), turns each valid one
 * into a job and queues it; the command's loop takes the jobs one at a time,
 * runs them on every rank and hands the answer back.
 *
 *   pd_serve_start(&srv, &opt);                 // rank 0
 *   while (pd_serve_next(srv, &job, 0.2) >= 0)  // 1: a job, 0: none yet
 *           ... run job->params on every rank, pd_serve_progress each step,
 *               job->cancel as the request's cancel flag ...
 *           pd_serve_finish(srv, job, PD_JOB_DONE, 200, body, info);
 *   pd_serve_stop(srv, "stopping");             // the queue gets 503
 *
 * Endpoints: POST /v1/images/generations and /sdapi/v1/txt2img answer when
 * their job ends; POST /v1/jobs (OpenAI's body, with frames and fps for a
 * video) answers 202 with the job's id at once; GET /v1/jobs/ID its state
 * (and when done its pictures or video), GET /v1/jobs/ID/video the MP4,
 * DELETE /v1/jobs/ID cancels it, GET /v1/jobs/ID/events streams its
 * progress (Server-Sent Events); POST /sdcpp/v1/vid_gen, GET
 * /sdcpp/v1/jobs/ID and POST /sdcpp/v1/jobs/ID/cancel are
 * stable-diffusion.cpp's video job; GET /health, /v1/models, and / (a
 * page).
 *
 * Nothing here knows the engine: a job is its parameters (pd_serve_params,
 * the same text on every rank) and an answer.
 */
#ifndef PD_SERVE_H
#define PD_SERVE_H

#include <stddef.h>
#include <stdint.h>

/* The dialect a request came in: its fields and its answer's shape. */
enum pd_serve_api {
	PD_API_OPENAI,                  /* POST /v1/images/generations */
	PD_API_A1111,                   /* POST /sdapi/v1/txt2img (stable-diffusion.cpp's server) */
	PD_API_SDCPP_VIDEO,             /* POST /sdcpp/v1/vid_gen (stable-diffusion.cpp's native video job) */
	PD_API_A1111_IMG2IMG,           /* POST /sdapi/v1/img2img (A1111's, as stable-diffusion.cpp's server takes it) */
	PD_API_OPENAI_EDIT,             /* POST /v1/images/edits (OpenAI's images.edit: multipart/form-data) */
	PD_API_JOBS,                    /* POST /v1/jobs (pdit's: images.generate's fields, a picture, a mask, a strength) */
};

/* What one request asks for: one batch of pictures. Unset numbers are
 * 0 (or -1 where 0 means something): the model's defaults. */
struct pd_serve_params {
	enum pd_serve_api api;          /* the dialect (fixes the answer's shape) */
	char *prompt;                   /* the prompt (UTF-8) */
	char *negative;                 /* negative prompt, or NULL */
	int width, height;              /* pixels, multiples of 16; 0: the model's */
	int steps;                      /* 0: the model's */
	int n;                          /* pictures, copies of the prompt with seeds seed + b */
	uint64_t seed;                  /* picture b is drawn from seed + b */
	float guidance;                 /* the family's guidance (FLUX distilled, Wan CFG); < 0: the model's */
	float true_cfg_scale;           /* FLUX's true CFG with the negative prompt; 1: off */
	float cfg_scale;                /* A1111's cfg_scale (< 0: not given): the pipeline maps it */
	float fbcache_threshold;        /* First Block Cache; 0: off */
	float flow_shift;               /* the sampler's shift; 0: the model's */
	int video;                      /* answered as one video: frames given, or the video route */
	int frames;                     /* a video's frames; 0: the model's (pictures: one) */
	int fps;                        /* a video's frames a second; 0: 16 */
	int frames_png;                 /* a video answered as its frames' PNGs, not an MP4 */
	char *init_png;                 /* img2img: the picture, base64 of a PNG (a data URL's prefix
					 * dropped), or NULL */
	char *mask_png;                 /* inpainting: the mask likewise, or NULL */
	int init_alpha;                 /* init_png has an alpha channel or a transparent colour (parsing
					 * only: OpenAI's edit without a mask takes it as the mask) */
	int mask_alpha;                 /* the mask's fully transparent pixels are repainted (OpenAI's edits),
					 * not its white ones */
	char *ref_png;                  /* FLUX.1 Kontext's reference picture (base64 PNG: pdit's ref_image
					 * field), or NULL */
	float strength;                 /* img2img's denoising strength; < 0: not given */
	/* A1111 fields given with a value pdit does not honour (sampler_name,
	 * restore_faces, ...), ", "-separated for the job's log line; rank 0
	 * only (not encoded) */
	char ignored[256];
};

/* Limits on what a request may ask. */
#define PD_SERVE_MAX_PROMPT 16384   /* bytes of a prompt or negative prompt */
#define PD_SERVE_MAX_N 16           /* pictures per request */
#define PD_SERVE_MAX_SIDE 4096      /* pixels per side */
#define PD_SERVE_MAX_STEPS 1000     /* steps per request */
#define PD_SERVE_MAX_PIXELS (16 << 20) /* n x width x height of a request */
#define PD_SERVE_MAX_FRAMES 1025    /* frames of a video */
#define PD_SERVE_MAX_VIDEO_PIXELS (256 << 20) /* frames x width x height of a video */
#define PD_SERVE_FPS 16             /* a video's frames a second when not given (pdit generate's) */

/* Parses a request body in dialect API into P. STRICT refuses fields the
 * dialect does not have, and A1111's fields pdit does not honour (given
 * with another value than their no-op one; without STRICT they are named
 * in P->ignored). On failure -1 with the message in pd_last_error()
 * and the field's name in FIELD ("" for the whole body). */
int pd_serve_params_parse(struct pd_serve_params *p, enum pd_serve_api api, const char *body, size_t len, int strict,
			  char *field, size_t field_len);
/* A multipart/form-data body (RFC 7578: OpenAI's SDKs' and curl -F's
 * images.edit) of CONTENT_TYPE (its boundary) as the JSON object
 * pd_serve_params_parse reads: file parts (image, mask) as base64 strings,
 * the others as numbers where they read as one (but the text fields:
 * prompt, size, ...), true and false as booleans, else strings. NULL with
 * the message (and the part's name in FIELD) when the body is not one. */
char *pd_serve_multipart_json(const char *content_type, const char *body, size_t len, char *field, size_t field_len);

/* P as one JSON text that pd_serve_params_decode reads back exactly: how
 * rank 0 hands a job to the others (malloc'd, NULL when out of memory). */
char *pd_serve_params_encode(const struct pd_serve_params *p);
int pd_serve_params_decode(struct pd_serve_params *p, const char *text);
void pd_serve_params_free(struct pd_serve_params *p);

/* The answer to a request that made N pictures: PNGS[i] (LENS[i] bytes)
 * in the dialect's JSON (malloc'd). INFO is the parameters text every
 * PNG carries (A1111's "info"). */
char *pd_serve_answer(const struct pd_serve_params *p, int n, uint8_t *const *pngs, const size_t *lens,
		      const char *info);
/* The engine's message MSG (written for the command line: "--steps",
 * "-n") in the JSON field names of dialect API (malloc'd); *PARAM: the
 * first field it names, or NULL. */
char *pd_serve_engine_error(enum pd_serve_api api, const char *msg, const char **param);
/* The answer to a video request: the MP4 (LEN bytes) of FRAMES frames of
 * WIDTH x HEIGHT in the shape of stable-diffusion.cpp's video result
 * (output_format, mime_type, fps, frame_count, b64_json) with INFO, the
 * parameters text (malloc'd). */
char *pd_serve_video_answer(const struct pd_serve_params *p, const uint8_t *mp4, size_t len, int frames, int width,
			    int height, const char *info);
/* An error answer: {"error": {"message", "type", "param"}} (malloc'd). */
char *pd_serve_error_json(const char *message, const char *type, const char *param);

/* Standard base64 of N bytes (malloc'd, NUL-terminated). */
char *pd_base64(const uint8_t *data, size_t n);
/* TEXT's bytes (standard base64, padding optional, whitespace skipped):
 * 0 with *OUT (malloc'd) of *LEN, or -1 when TEXT is not base64. */
int pd_unbase64(const char *text, uint8_t **out, size_t *len);

/* How the server runs. */
struct pd_serve_options {
	const char *listen;             /* "HOST:PORT" (127.0.0.1:8080 by default) */
	const char *api_key;            /* required as "Authorization: Bearer KEY" when not NULL */
	int queue_max;                  /* jobs waiting besides the running one; more get 429 */
	size_t body_max;                /* bytes of a request body; more get 413 */
	int strict;                     /* unknown fields get 400 */
	int io_timeout;                 /* seconds a connection may stay silent (slow clients) */
	const char *model;              /* the model's name for /v1/models and /health */
	const char *mesh;               /* the mesh, for /health */
	int ranks;                      /* processes running each job, for /health */
	/* the model's own width, height, steps and video frames: what a
	 * request that leaves them out runs, for the log and the jobs' steps */
	int default_width, default_height, default_steps, default_frames;
	/* 0 when the model makes FRAMES x HEIGHT x WIDTH, else -1 with the
	 * engine's message (in flags; the request's fields are put in): a
	 * request it refuses gets 400 before it is queued, as one of /v1/jobs
	 * would otherwise be accepted and fail later. NULL: no check here */
	int (*shape_ok)(void *ctx, int frames, int height, int width);
	void *shape_ctx;                /* shape_ok's first argument */
	/* receives each log line (request and answer, one line each) */
	void (*log)(void *ctx, const char *line);
	void *log_ctx;                  /* log's first argument */
};

/* What a running job is doing. */
enum pd_job_phase {
	PD_JOB_DENOISING,               /* the steps */
	PD_JOB_DECODING,                /* the VAE */
	PD_JOB_WRITING,                 /* the video's file (H.264) */
};

/* Where a job is. */
enum pd_job_state {
	PD_JOB_QUEUED,                  /* waiting its turn */
	PD_JOB_RUNNING,                 /* on every rank */
	PD_JOB_DONE,                    /* answered with its pictures */
	PD_JOB_FAILED,                  /* answered with an error */
	PD_JOB_CANCELLED,               /* cancelled (DELETE) while queued or between steps */
};

/* One request: queued, running or ended. The server owns it; the command's
 * loop holds the running one between pd_serve_next and pd_serve_finish. */
struct pd_serve_job {
	uint64_t id;                    /* in arrival order, from 1 */
	struct pd_serve_params params;  /* what it asks */
	int async;                      /* submitted to /v1/jobs: kept after it ends, for GET */
	volatile int cancel;            /* DELETE asked while it runs: the request's cancel flag */
	/* the rest is the server's, under its lock */
	enum pd_job_state state;        /* where it is */
	int step, steps;                /* steps done and to do, while running */
	enum pd_job_phase phase;        /* what it is doing, while running */
	int decoded, to_decode;         /* pictures (videos) decoded and to decode, in PD_JOB_DECODING */
	double t_submit, t_start, t_end; /* queued, started, ended (pd_now) */
	double engine_s;                /* seconds the engine worked on it (the rest is the server's) */
	int status;                     /* HTTP status of its answer, once ended */
	char *body;                     /* the answer's JSON, once ended */
	char *info;                     /* the parameters text of its PNGs, or NULL */
	uint8_t *media;                 /* a video job's MP4 once done (GET /v1/jobs/ID/video), or NULL */
	size_t media_len;               /* its bytes */
	int refs;                       /* connections holding it (a waiting client, an event stream) */
	struct pd_serve_job *next;      /* the queue */
	struct pd_serve_job *older;     /* every job the server keeps, newest first */
};

struct pd_serve;

/* Whether pdit serve's HTTP side was built (-DPDIT_SERVE). */
int pd_serve_built(void);
/* Whether LISTEN is a HOST:PORT pd_serve_start can take (checked before a
 * model loads): 0, or -1 with the message. */
int pd_serve_check_listen(const char *listen);
/* Binds and starts answering (health and models right away; jobs queue). */
int pd_serve_start(struct pd_serve **out, const struct pd_serve_options *o);
/* The next job, waiting up to TIMEOUT seconds: 1 with *JOB (now running),
 * 0 when none came. */
int pd_serve_next(struct pd_serve *s, struct pd_serve_job **job, double timeout);
/* The running job finished STEP (from 0) of STEPS: for GET and the event
 * streams. */
void pd_serve_progress(struct pd_serve *s, struct pd_serve_job *job, int step, int steps);
/* The running job moved to PHASE; DONE of TOTAL pictures decoded. */
void pd_serve_phase(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_phase phase, int done, int total);
/* The running job's MP4 (LEN bytes, taken over) for GET /v1/jobs/ID/video,
 * before pd_serve_finish. */
void pd_serve_attach_video(struct pd_serve *s, struct pd_serve_job *job, uint8_t *mp4, size_t len);
/* Ends JOB in STATE with HTTP STATUS and BODY (taken over; INFO too, may
 * be NULL) and wakes whoever waits for it. ENGINE_S: the seconds the
 * engine worked on it (encoding, steps, decoding), for the log. */
void pd_serve_finish(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_state state, int status, char *body,
		     char *info, double engine_s);
/* Stops accepting, answers every queued job 503 with WHY, ends the event
 * streams, stops the daemon and frees everything. */
void pd_serve_stop(struct pd_serve *s, const char *why);
/* For a process about to end while its loop is stuck (a lost rank): every
 * job, running or queued, answered 503 with WHY, waiting up to WAIT
 * seconds for the answers to go out; nothing is freed. Any thread. */
void pd_serve_abort(struct pd_serve *s, const char *why, double wait);

#endif /* PD_SERVE_H */
