/*
 * pd_serve_int.h - what the server's two files share: its state, the
 * answers' helpers (pd_serve_http.c) and the jobs' life (pd_serve_jobs.c).
 */
#ifndef PD_SERVE_INT_H
#define PD_SERVE_INT_H

#include "pd_serve.h"

#include <microhttpd.h>
#include <pthread.h>

/* Ended async jobs kept for GET; older ones are forgotten. */
#define PD_SERVE_KEEP_ENDED 64

struct pd_serve {
	struct MHD_Daemon *daemon;      /* the HTTP server */
	struct pd_serve_options o;      /* as started (strings borrowed) */
	pthread_mutex_t mu;             /* guards everything below and every job's server fields */
	pthread_cond_t queued_cv;       /* a job was queued, or stopping */
	pthread_cond_t changed_cv;      /* a job moved (a step, an end), a request completed, or stopping */
	struct pd_serve_job *head, *tail; /* waiting jobs, oldest first */
	struct pd_serve_job *jobs;      /* every job kept, newest first */
	int queued;                     /* jobs waiting */
	int running;                    /* the loop holds a job */
	int stopping;                   /* no new jobs: they get 503 */
	int active;                     /* requests begun and not yet completed (their answers not sent) */
	uint64_t next_id;               /* the next job's id */
	uint64_t served;                /* jobs done */
	double busy_s;                  /* seconds the done jobs took, for Retry-After */
	double t_moved;                 /* when the running job last moved (began, a step, the decode):
					 * /health's since_progress_s, which a stuck process shows */
};

void pd_serve_log(struct pd_serve *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends BODY (taken over) as JSON with STATUS; RETRY > 0 adds Retry-After. */
enum MHD_Result pd_reply(struct MHD_Connection *c, int status, char *body, int retry);
enum MHD_Result pd_reply_error(struct MHD_Connection *c, int status, const char *type, const char *param,
			       const char *msg, int retry);

/* Queues a job of P (taken over) for async or waiting clients: 0 with *JOB
 * (one reference held for the caller), or the HTTP status of the refusal
 * (429 queue full, with *RETRY seconds; 503 stopping). */
int pd_jobs_submit(struct pd_serve *s, struct pd_serve_params *p, int async, struct pd_serve_job **job, int *retry);
/* Waits until JOB has ended; when the client's socket FD (-1: not
 * watched) hangs up first, JOB is cancelled: 1. */
int pd_jobs_wait(struct pd_serve *s, struct pd_serve_job *job, int fd);
/* The job numbered ID with a reference held, or NULL. */
struct pd_serve_job *pd_jobs_find(struct pd_serve *s, uint64_t id);
/* Drops a reference; a job no one holds and no one will ask for is freed. */
void pd_jobs_release(struct pd_serve *s, struct pd_serve_job *job);
/* Cancels JOB: a queued one ends now, a running one after its next step;
 * the HTTP status to answer (200 ended, 202 cancelling, 409 already ended). */
int pd_jobs_cancel(struct pd_serve *s, struct pd_serve_job *job);
/* JOB as GET /v1/jobs/ID shows it (malloc'd). */
char *pd_jobs_json(struct pd_serve *s, struct pd_serve_job *job);
/* JOB as stable-diffusion.cpp's GET /sdcpp/v1/jobs/ID shows it (malloc'd). */
char *pd_jobs_json_sdcpp(struct pd_serve *s, struct pd_serve_job *job);
/* A Server-Sent Events response following JOB (its reference taken over). */
struct MHD_Response *pd_jobs_events(struct pd_serve *s, struct pd_serve_job *job);

/* The web page GET / serves (pd_serve_page.c). */
extern const char pd_serve_page[];

#endif /* PD_SERVE_INT_H */
