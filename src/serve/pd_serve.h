/*
 * pd_serve.h - the HTTP side of `pdit serve`: rank 0 answers HTTP requests
 * (libmicrohttpd: Debian packages it, it parses HTTP and keeps slow or
 * broken clients to its own threads and timeouts), turns each valid one
 * into a job and queues it; the command's loop takes the jobs one at a time,
 * runs them on every rank and hands the answer back.
 *
 *   pd_serve_start(&srv, &opt);                 // rank 0
 *   while (pd_serve_next(srv, &job, 0.2) >= 0)  // 1: a job, 0: none yet
 *           ... run job->params on every rank ...
 *           pd_serve_done(srv, job, 200, body); // the client gets BODY
 *   pd_serve_stop(srv);                         // the queue gets 503
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
};

/* Limits on what a request may ask. */
#define PD_SERVE_MAX_PROMPT 16384   /* bytes of a prompt or negative prompt */
#define PD_SERVE_MAX_N 16           /* pictures per request */
#define PD_SERVE_MAX_SIDE 4096      /* pixels per side */
#define PD_SERVE_MAX_STEPS 1000     /* steps per request */

/* Parses a request body in dialect API into P. STRICT refuses fields the
 * dialect does not have. On failure -1 with the message in pd_last_error()
 * and the field's name in FIELD ("" for the whole body). */
int pd_serve_params_parse(struct pd_serve_params *p, enum pd_serve_api api, const char *body, size_t len, int strict,
			  char *field, size_t field_len);
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
/* An error answer: {"error": {"message", "type", "param"}} (malloc'd). */
char *pd_serve_error_json(const char *message, const char *type, const char *param);

/* Standard base64 of N bytes (malloc'd, NUL-terminated). */
char *pd_base64(const uint8_t *data, size_t n);

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
	/* receives each log line (request and answer, one line each) */
	void (*log)(void *ctx, const char *line);
	void *log_ctx;                  /* log's first argument */
};

/* One queued request. */
struct pd_serve_job {
	uint64_t id;                    /* in arrival order, from 1 */
	struct pd_serve_params params;  /* what it asks */
	double t_submit;                /* when it was queued (pd_now) */
	/* the rest belongs to the server */
	int status;                     /* HTTP status of the answer, once done */
	char *body;                     /* the answer's JSON */
	int done;                       /* answered */
	struct pd_serve_job *next;      /* the queue */
};

struct pd_serve;

/* Binds and starts answering (health and models right away; jobs queue). */
int pd_serve_start(struct pd_serve **out, const struct pd_serve_options *o);
/* The next job, waiting up to TIMEOUT seconds: 1 with *JOB, 0 when none
 * came. */
int pd_serve_next(struct pd_serve *s, struct pd_serve_job **job, double timeout);
/* Answers JOB with STATUS and BODY (taken over) and wakes its client. */
void pd_serve_done(struct pd_serve *s, struct pd_serve_job *job, int status, char *body);
/* Jobs waiting (for the log). */
int pd_serve_queued(struct pd_serve *s);
/* Stops accepting, answers every queued job 503 with WHY, stops the
 * daemon and frees everything. */
void pd_serve_stop(struct pd_serve *s, const char *why);

#endif /* PD_SERVE_H */
