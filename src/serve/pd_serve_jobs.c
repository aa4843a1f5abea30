/*
 * pd_serve_jobs.c - the jobs' life: queued by the connection threads,
 * taken one at a time by the command's loop, ended there or by a cancel,
 * kept for GET when submitted to /v1/jobs. Every field moves under the
 * server's lock; a connection that waits for a job or streams its events
 * holds a reference, so no job is freed under it.
 */
#include "pd_serve_int.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const pd_job_names[] = { "queued", "running", "done", "failed", "cancelled" };
static const char *const pd_phase_names[] = { "denoising", "decoding", "writing" };
/* stable-diffusion.cpp's names of the same states */
static const char *const pd_sdcpp_names[] = { "queued", "generating", "completed", "failed", "cancelled" };

static void pd_job_free(struct pd_serve_job *j)
{
	pd_serve_params_free(&j->params);
	free(j->body);
	free(j->info);
	free(j->media);
	free(j);
}

/* Unlinks and frees J from the kept list (lock held). */
static void pd_jobs_forget(struct pd_serve *s, struct pd_serve_job *j)
{
	for (struct pd_serve_job **p = &s->jobs; *p; p = &(*p)->older)
		if (*p == j) {
			*p = j->older;
			break;
		}
	pd_job_free(j);
}

/* Ended jobs beyond the newest PD_SERVE_KEEP_ENDED async ones, and ended
 * waiting ones no client holds any more, are freed (lock held). */
static void pd_jobs_trim(struct pd_serve *s)
{
	int kept = 0;
	struct pd_serve_job *j = s->jobs, *next;

	for (; j; j = next) {
		next = j->older;
		if (j->state < PD_JOB_DONE || j->refs > 0)
			continue;
		if (!j->async || ++kept > PD_SERVE_KEEP_ENDED)
			pd_jobs_forget(s, j);
	}
}

int pd_jobs_submit(struct pd_serve *s, struct pd_serve_params *p, int async, struct pd_serve_job **out, int *retry)
{
	struct pd_serve_job *job = pd_calloc(1, sizeof(*job), "a job");

	*out = NULL;
	*retry = 0;
	if (!job)
		return 500;
	job->params = *p;
	memset(p, 0, sizeof(*p));
	job->async = async;
	job->t_submit = pd_now();
	job->refs = 1;
	pthread_mutex_lock(&s->mu);
	/* the limit counts the waiting jobs; the one about to run (taken
	 * by the loop at its next turn) is not waiting */
	if (s->stopping || s->queued >= s->o.queue_max + !s->running) {
		int status = s->stopping ? 503 : 429;
		double each = s->served ? s->busy_s / (double)s->served : 5;

		*retry = (int)(each * (s->queued + 1)) + 1;
		pthread_mutex_unlock(&s->mu);
		pd_job_free(job);
		return status;
	}
	job->id = ++s->next_id;
	if (s->tail)
		s->tail->next = job;
	else
		s->head = job;
	s->tail = job;
	s->queued++;
	job->older = s->jobs;
	s->jobs = job;
	pthread_cond_signal(&s->queued_cv);
	pthread_mutex_unlock(&s->mu);
	*out = job;
	return 0;
}

int pd_jobs_wait(struct pd_serve *s, struct pd_serve_job *job, int fd)
{
	int gone = 0;

	pthread_mutex_lock(&s->mu);
	while (job->state < PD_JOB_DONE) {
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->changed_cv, &s->mu, &until);
		/* a client that went away cancels its job: nothing to answer */
		if (!gone && fd >= 0 && job->state < PD_JOB_DONE) {
			struct pollfd p = { .fd = fd, .events = POLLRDHUP };

			if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
				gone = 1;
				pthread_mutex_unlock(&s->mu);
				pd_jobs_cancel(s, job);
				pthread_mutex_lock(&s->mu);
			}
		}
	}
	pthread_mutex_unlock(&s->mu);
	return gone;
}

struct pd_serve_job *pd_jobs_find(struct pd_serve *s, uint64_t id)
{
	struct pd_serve_job *j;

	pthread_mutex_lock(&s->mu);
	for (j = s->jobs; j && j->id != id; j = j->older)
		;
	if (j)
		j->refs++;
	pthread_mutex_unlock(&s->mu);
	return j;
}

void pd_jobs_release(struct pd_serve *s, struct pd_serve_job *job)
{
	pthread_mutex_lock(&s->mu);
	job->refs--;
	pd_jobs_trim(s);
	pthread_mutex_unlock(&s->mu);
}

/* Ends J (lock held): answer, times, wake everyone. */
static void pd_jobs_end(struct pd_serve *s, struct pd_serve_job *j, enum pd_job_state state, int status, char *body,
			char *info)
{
	free(j->body);
	free(j->info);
	j->state = state;
	j->status = status;
	j->body = body;
	j->info = info;
	j->t_end = pd_now();
	if (state == PD_JOB_DONE) {
		s->served++;
		s->busy_s += j->t_end - j->t_submit;
	}
	pthread_cond_broadcast(&s->changed_cv);
}

int pd_jobs_cancel(struct pd_serve *s, struct pd_serve_job *job)
{
	int status;

	pthread_mutex_lock(&s->mu);
	if (job->state == PD_JOB_QUEUED) {
		for (struct pd_serve_job **p = &s->head; *p; p = &(*p)->next)
			if (*p == job) {
				*p = job->next;
				break;
			}
		s->tail = NULL;
		for (struct pd_serve_job *q = s->head; q; q = q->next)
			s->tail = q;
		s->queued--;
		pd_jobs_end(s, job, PD_JOB_CANCELLED, 409,
			    pd_serve_error_json("cancelled while queued (DELETE)", "cancelled", NULL), NULL);
		status = 200;
	} else if (job->state == PD_JOB_RUNNING) {
		job->cancel = 1;
		status = 202;
	} else {
		status = 409;
	}
	pthread_mutex_unlock(&s->mu);
	return status;
}

/* The queue position of a waiting job, from 1 (lock held). */
static int pd_jobs_position(const struct pd_serve *s, const struct pd_serve_job *job)
{
	int k = 1;

	for (const struct pd_serve_job *q = s->head; q && q != job; q = q->next)
		k++;
	return k;
}

char *pd_jobs_json(struct pd_serve *s, struct pd_serve_job *job)
{
	char *text, *info = NULL;

	pthread_mutex_lock(&s->mu);
	if (job->info) {
		/* the text as a JSON string */
		cJSON *str = cJSON_CreateString(job->info);

		info = str ? cJSON_PrintUnformatted(str) : NULL;
		cJSON_Delete(str);
	}
	text = pd_strfmt("{\"id\":\"%llu\",\"object\":\"job\",\"status\":\"%s\",\"phase\":%s%s%s,\"step\":%d,"
			 "\"steps\":%d,\"decoded\":%d,\"to_decode\":%d,\"video\":%s,"
			 "\"queue_position\":%d,\"seconds\":%.3f,\"engine_seconds\":%.3f,\"parameters\":%s%s%s}",
			 (unsigned long long)job->id, pd_job_names[job->state],
			 job->state == PD_JOB_RUNNING ? "\"" : "", job->state == PD_JOB_RUNNING ? pd_phase_names[job->phase]
											  : "null",
			 job->state == PD_JOB_RUNNING ? "\"" : "", job->step, job->steps, job->decoded, job->to_decode,
			 job->params.video ? "true" : "false",
			 job->state == PD_JOB_QUEUED ? pd_jobs_position(s, job) : 0,
			 (job->state >= PD_JOB_DONE ? job->t_end : pd_now()) - job->t_submit, job->engine_s,
			 info ? info : "null",
			 job->state >= PD_JOB_DONE && job->body ? ",\"result\":" : "",
			 job->state >= PD_JOB_DONE && job->body ? job->body : "");
	pthread_mutex_unlock(&s->mu);
	cJSON_free(info);
	return text;
}

/* The Unix time of T (pd_now's clock). */
static double pd_wall(double t)
{
	return (double)time(NULL) - (pd_now() - t);
}

char *pd_jobs_json_sdcpp(struct pd_serve *s, struct pd_serve_job *job)
{
	cJSON *o = cJSON_CreateObject(), *result = NULL, *error = NULL;
	char id[32], *text = NULL;
	int ok;

	snprintf(id, sizeof(id), "%llu", (unsigned long long)job->id);
	pthread_mutex_lock(&s->mu);
	/* the answer is the result when done; an error answer's message the
	 * error otherwise */
	if (job->state >= PD_JOB_DONE && job->body) {
		cJSON *body = cJSON_Parse(job->body);

		if (job->state == PD_JOB_DONE) {
			result = body;
		} else {
			cJSON *e = cJSON_GetObjectItemCaseSensitive(body, "error");
			const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));

			error = cJSON_CreateObject();
			if (error && (!cJSON_AddStringToObject(error, "code", job->state == PD_JOB_CANCELLED
										   ? "cancelled" : "generation_failed") ||
				      !cJSON_AddStringToObject(error, "message", msg ? msg : ""))) {
				cJSON_Delete(error);
				error = NULL;
			}
			cJSON_Delete(body);
		}
	}
	ok = o && cJSON_AddStringToObject(o, "id", id) &&
	     cJSON_AddStringToObject(o, "kind", job->params.video ? "vid_gen" : "img_gen") &&
	     cJSON_AddStringToObject(o, "status", pd_sdcpp_names[job->state]) &&
	     cJSON_AddNumberToObject(o, "created", floor(pd_wall(job->t_submit))) &&
	     (job->t_start > 0 ? cJSON_AddNumberToObject(o, "started", floor(pd_wall(job->t_start))) != NULL
			       : cJSON_AddNullToObject(o, "started") != NULL) &&
	     (job->state >= PD_JOB_DONE ? cJSON_AddNumberToObject(o, "completed", floor(pd_wall(job->t_end))) != NULL
					: cJSON_AddNullToObject(o, "completed") != NULL) &&
	     cJSON_AddNumberToObject(o, "queue_position", job->state == PD_JOB_QUEUED ? pd_jobs_position(s, job) : 0) &&
	     cJSON_AddNumberToObject(o, "step", job->step) && cJSON_AddNumberToObject(o, "steps", job->steps);
	pthread_mutex_unlock(&s->mu);
	if (ok) {
		cJSON_AddItemToObject(o, "result", result ? result : cJSON_CreateNull());
		cJSON_AddItemToObject(o, "error", error ? error : cJSON_CreateNull());
		result = error = NULL;
		text = cJSON_PrintUnformatted(o);
	}
	cJSON_Delete(result);
	cJSON_Delete(error);
	cJSON_Delete(o);
	return text;
}

/* ----------------------------------------------------------------------- */
/* Server-Sent Events                                                      */
/* ----------------------------------------------------------------------- */

/* One stream: what was sent, what is left to send. */
struct pd_events {
	struct pd_serve *s;             /* the server */
	struct pd_serve_job *job;       /* followed (a reference held) */
	int sent_step;                  /* the last step sent (-1: none) */
	enum pd_job_phase sent_phase;   /* the last phase sent */
	int sent_decoded;               /* the last count of decoded pictures sent */
	enum pd_job_state sent_state;   /* the last state sent */
	int first, ended;               /* nothing sent yet; the end event sent */
	char pending[512];              /* an event not yet handed over */
	size_t len, off;                /* its length, and how much is out */
};

static ssize_t pd_events_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct pd_events *ev = cls;
	struct pd_serve *s = ev->s;
	struct pd_serve_job *j = ev->job;
	size_t n;

	(void)pos;
	if (ev->off == ev->len) {
		struct timespec until;

		if (ev->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		/* a quiet stream still sends something within half the
		 * connection timeout, which would otherwise close it (the
		 * decode of a large picture is a long time without steps) */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += s->o.io_timeout > 2 ? s->o.io_timeout / 2 : 1;
		pthread_mutex_lock(&s->mu);
#define PD_EV_SAME (j->step == ev->sent_step && j->state == ev->sent_state && j->phase == ev->sent_phase && \
		    j->decoded == ev->sent_decoded)
		while (!ev->first && !s->stopping && PD_EV_SAME && pthread_cond_timedwait(&s->changed_cv, &s->mu, &until) == 0)
			;
		ev->off = 0;
		if (!ev->first && !s->stopping && PD_EV_SAME) {
#undef PD_EV_SAME
			/* quiet: a comment keeps the connection (and proxies) from closing it */
			ev->len = (size_t)snprintf(ev->pending, sizeof(ev->pending), ": waiting\n\n");
		} else {
			int end = j->state >= PD_JOB_DONE || s->stopping, running = j->state == PD_JOB_RUNNING;

			/* a phase only while it runs, as GET /v1/jobs/ID says it */
			ev->len = (size_t)snprintf(ev->pending, sizeof(ev->pending),
						   "event: %s\ndata: {\"id\":\"%llu\",\"status\":\"%s\",\"phase\":%s%s%s,"
						   "\"step\":%d,\"steps\":%d,\"decoded\":%d,\"to_decode\":%d,"
						   "\"queue_position\":%d}\n\n",
						   end ? "end" : "progress", (unsigned long long)j->id,
						   s->stopping && j->state < PD_JOB_DONE ? "stopping" : pd_job_names[j->state],
						   running ? "\"" : "", running ? pd_phase_names[j->phase] : "null", running ? "\"" : "",
						   j->step, j->steps, j->decoded, j->to_decode,
						   j->state == PD_JOB_QUEUED ? pd_jobs_position(s, j) : 0);
			ev->sent_step = j->step;
			ev->sent_phase = j->phase;
			ev->sent_decoded = j->decoded;
			ev->sent_state = j->state;
			ev->first = 0;
			ev->ended = end;
		}
		pthread_mutex_unlock(&s->mu);
	}
	n = ev->len - ev->off < max ? ev->len - ev->off : max;
	memcpy(buf, ev->pending + ev->off, n);
	ev->off += n;
	return (ssize_t)n;
}

static void pd_events_free(void *cls)
{
	struct pd_events *ev = cls;

	pd_jobs_release(ev->s, ev->job);
	free(ev);
}

struct MHD_Response *pd_jobs_events(struct pd_serve *s, struct pd_serve_job *job)
{
	struct pd_events *ev = pd_calloc(1, sizeof(*ev), "an event stream");
	struct MHD_Response *r;

	if (!ev) {
		pd_jobs_release(s, job);
		return NULL;
	}
	ev->s = s;
	ev->job = job;
	ev->sent_step = -1;
	ev->first = 1;
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, pd_events_read, ev, pd_events_free);
	if (!r) {
		pd_events_free(ev);
		return NULL;
	}
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	return r;
}

/* ----------------------------------------------------------------------- */
/* The command's side                                                      */
/* ----------------------------------------------------------------------- */

int pd_serve_next(struct pd_serve *s, struct pd_serve_job **job, double timeout)
{
	struct timespec until;
	double t;

	*job = NULL;
	clock_gettime(CLOCK_REALTIME, &until);
	t = (double)until.tv_sec + until.tv_nsec * 1e-9 + timeout;
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	pthread_mutex_lock(&s->mu);
	if (!s->head && !s->stopping)
		pthread_cond_timedwait(&s->queued_cv, &s->mu, &until);
	if (s->head && !s->stopping) {
		*job = s->head;
		s->head = s->head->next;
		if (!s->head)
			s->tail = NULL;
		(*job)->next = NULL;
		(*job)->state = PD_JOB_RUNNING;
		(*job)->t_start = s->t_moved = pd_now();
		(*job)->steps = (*job)->params.steps ? (*job)->params.steps : s->o.default_steps;
		s->queued--;
		s->running = 1;
		pthread_cond_broadcast(&s->changed_cv);
	}
	pthread_mutex_unlock(&s->mu);
	return *job != NULL;
}

void pd_serve_progress(struct pd_serve *s, struct pd_serve_job *job, int step, int steps)
{
	pthread_mutex_lock(&s->mu);
	job->step = step + 1;
	job->steps = steps;
	s->t_moved = pd_now();
	pthread_cond_broadcast(&s->changed_cv);
	pthread_mutex_unlock(&s->mu);
}

void pd_serve_phase(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_phase phase, int done, int total)
{
	pthread_mutex_lock(&s->mu);
	job->phase = phase;
	job->decoded = done;
	job->to_decode = total;
	s->t_moved = pd_now();
	pthread_cond_broadcast(&s->changed_cv);
	pthread_mutex_unlock(&s->mu);
}

void pd_serve_attach_video(struct pd_serve *s, struct pd_serve_job *job, uint8_t *mp4, size_t len)
{
	pthread_mutex_lock(&s->mu);
	free(job->media);
	job->media = mp4;
	job->media_len = len;
	pthread_mutex_unlock(&s->mu);
}

void pd_serve_finish(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_state state, int status, char *body,
		     char *info, double engine_s)
{
	/* a job of /v1/jobs has no waiting connection to log its end: said
	 * here, with a failure's reason (the answer's message) */
	char line[512] = "";
	cJSON *err = job->async && body && status != 200 ? cJSON_Parse(body) : NULL;
	const cJSON *msg = cJSON_GetObjectItem(cJSON_GetObjectItem(err, "error"), "message");

	pthread_mutex_lock(&s->mu);
	job->engine_s = engine_s;
	s->running = 0;
	pd_jobs_end(s, job, state, status, body, info);
	if (job->async)
		snprintf(line, sizeof(line), "pdit: job %llu -> %d in %.3f s (waited %.3f s, engine %.3f s)%s%s%s",
			 (unsigned long long)job->id, status, job->t_end - job->t_submit,
			 (job->t_start > 0 ? job->t_start : job->t_end) - job->t_submit, engine_s,
			 cJSON_IsString(msg) ? " (" : "", cJSON_IsString(msg) ? msg->valuestring : "",
			 cJSON_IsString(msg) ? ")" : "");
	pd_jobs_trim(s);
	pthread_mutex_unlock(&s->mu);
	cJSON_Delete(err);
	if (line[0])
		pd_serve_log(s, "%s", line);
}

/* Ends J with 503 at a stop. A job of /v1/jobs has no connection whose
 * thread logs its end: its id goes into IDS (N of them), for one line. */
static void pd_jobs_end_stopped(struct pd_serve *s, struct pd_serve_job *j, const char *why, char *ids, size_t len,
				int *n)
{
	size_t used = strlen(ids);

	pd_jobs_end(s, j, PD_JOB_FAILED, 503, pd_serve_error_json(why, "server_error", NULL), NULL);
	if (!j->async)
		return;
	if (used + 24 < len)
		snprintf(ids + used, len - used, "%s%llu", *n ? ", " : "", (unsigned long long)j->id);
	else if (used + 4 < len && !strstr(ids, "..."))
		snprintf(ids + used, len - used, "...");
	(*n)++;
}

static void pd_jobs_log_stopped(struct pd_serve *s, const char *ids, int n)
{
	if (n)
		pd_serve_log(s, "pdit: %s %s of /v1/jobs -> 503 (the server is stopping)", n > 1 ? "jobs" : "job", ids);
}

void pd_serve_abort(struct pd_serve *s, const char *why, double wait)
{
	struct timespec until;
	double t;
	char ids[400] = "";
	int n = 0;

	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	for (struct pd_serve_job *j = s->jobs; j; j = j->older)
		if (j->state < PD_JOB_DONE)
			pd_jobs_end_stopped(s, j, why, ids, sizeof(ids), &n);
	s->head = s->tail = NULL;
	s->queued = 0;
	pthread_cond_broadcast(&s->changed_cv);
	clock_gettime(CLOCK_REALTIME, &until);
	t = (double)until.tv_sec + until.tv_nsec * 1e-9 + wait;
	until.tv_sec = (time_t)t;
	until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
	while (s->active > 0 && pthread_cond_timedwait(&s->changed_cv, &s->mu, &until) == 0)
		;
	pthread_mutex_unlock(&s->mu);
	pd_jobs_log_stopped(s, ids, n);
}

void pd_serve_stop(struct pd_serve *s, const char *why)
{
	struct pd_serve_job *j;
	MHD_socket listen_fd;
	char ids[400] = "";
	int n = 0;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	while ((j = s->head)) {
		s->head = j->next;
		s->queued--;
		pd_jobs_end_stopped(s, j, why, ids, sizeof(ids), &n);
	}
	s->tail = NULL;
	/* the loop has stopped: a job it held is over too */
	for (j = s->jobs; j; j = j->older)
		if (j->state == PD_JOB_RUNNING)
			pd_jobs_end_stopped(s, j, why, ids, sizeof(ids), &n);
	pthread_cond_broadcast(&s->changed_cv);
	/* every answer out before the sockets close (stopping the daemon shuts
	 * them): no new connections, then the requests under way complete
	 * (a slow client at most its --io-timeout) */
	listen_fd = MHD_quiesce_daemon(s->daemon);
	{
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += s->o.io_timeout + 2;
		while (s->active > 0 && pthread_cond_timedwait(&s->changed_cv, &s->mu, &until) == 0)
			;
	}
	pthread_mutex_unlock(&s->mu);
	pd_jobs_log_stopped(s, ids, n);
	MHD_stop_daemon(s->daemon);
	/* quiesce handed the listening socket over: closed, new clients are refused */
	if (listen_fd != MHD_INVALID_SOCKET)
		close(listen_fd);
	while ((j = s->jobs)) {
		s->jobs = j->older;
		pd_job_free(j);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->queued_cv);
	pthread_cond_destroy(&s->changed_cv);
	free(s);
}
