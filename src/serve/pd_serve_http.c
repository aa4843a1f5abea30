/*
 * pd_serve_http.c - rank 0's HTTP server (libmicrohttpd, a thread per
 * connection): routes, authentication, limits and the answers. A
 * generation request's thread queues its job (pd_serve_jobs.c) and waits
 * for its end; the command's loop is the only consumer, so jobs run one at
 * a time in arrival order.
 */
#include "pd_serve_int.h"
#include "pd_util.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A connection's request body as it arrives. */
struct pd_conn {
	char *body;                     /* the bytes so far (NUL-terminated) */
	size_t len, cap;                /* used and allocated */
	int too_big;                    /* past body_max: refused once complete */
	unsigned long long seen;        /* body bytes received, kept or not */
};

/* images.edit's form (RFC 7578), as the SDKs and curl -F send it */
static int pd_multipart_type(struct MHD_Connection *c)
{
	const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);

	return t && strncasecmp(t, "multipart/form-data", 19) == 0;
}

void pd_serve_log(struct pd_serve *s, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (s->o.log)
		s->o.log(s->o.log_ctx, line);
	else
		fprintf(stderr, "%s\n", line);
}

/* Sends BODY (taken over) with STATUS; RETRY > 0 adds Retry-After. */
enum MHD_Result pd_reply(struct MHD_Connection *c, int status, char *body, int retry)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!body)
		body = pd_strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null}}");
	if (!body)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (retry > 0) {
		char v[16];

		snprintf(v, sizeof(v), "%d", retry);
		MHD_add_response_header(r, "Retry-After", v);
	}
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result pd_reply_error(struct MHD_Connection *c, int status, const char *type, const char *param,
			       const char *msg, int retry)
{
	return pd_reply(c, status, pd_serve_error_json(msg, type, param), retry);
}

static const char *pd_peer(struct MHD_Connection *c, char *buf, size_t n)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr_in *a = ci ? (const struct sockaddr_in *)ci->client_addr : NULL;

	if (!a || a->sin_family != AF_INET || !inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)n))
		snprintf(buf, n, "?");
	return buf;
}

static enum MHD_Result pd_health(struct pd_serve *s, struct MHD_Connection *c)
{
	cJSON *o = cJSON_CreateObject();
	char *body = NULL;
	int ok;

	pthread_mutex_lock(&s->mu);
	ok = o && cJSON_AddStringToObject(o, "status", s->stopping ? "stopping" : "ok") &&
	     cJSON_AddNumberToObject(o, "ranks", s->o.ranks) &&
	     cJSON_AddStringToObject(o, "mesh", s->o.mesh ? s->o.mesh : "") &&
	     cJSON_AddStringToObject(o, "model", s->o.model ? s->o.model : "") &&
	     /* waiting: the job the loop takes next while none runs is not */
	     cJSON_AddNumberToObject(o, "queue", s->queued - (!s->running && s->queued > 0)) &&
	     cJSON_AddNumberToObject(o, "queue_max", s->o.queue_max) &&
	     cJSON_AddNumberToObject(o, "running", s->running) &&
	     /* a process stopped mid-request shows here long before the
	      * transfer deadline (--comm-timeout) ends the job */
	     cJSON_AddNumberToObject(o, "since_progress_s", s->running ? pd_now() - s->t_moved : 0) &&
	     cJSON_AddNumberToObject(o, "served", (double)s->served);
	pthread_mutex_unlock(&s->mu);
	if (ok)
		body = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return pd_reply(c, 200, body, 0);
}

static enum MHD_Result pd_models(struct pd_serve *s, struct MHD_Connection *c)
{
	cJSON *o = cJSON_CreateObject(), *list = o ? cJSON_AddArrayToObject(o, "data") : NULL, *m = cJSON_CreateObject();
	char *body = NULL;

	if (list && m && cJSON_AddStringToObject(o, "object", "list") &&
	    cJSON_AddStringToObject(m, "id", s->o.model ? s->o.model : "pdit") &&
	    cJSON_AddStringToObject(m, "object", "model") && cJSON_AddNumberToObject(m, "created", 0) &&
	    cJSON_AddStringToObject(m, "owned_by", "pdit")) {
		cJSON_AddItemToArray(list, m);
		m = NULL;
		body = cJSON_PrintUnformatted(o);
	}
	cJSON_Delete(m);
	cJSON_Delete(o);
	return pd_reply(c, 200, body, 0);
}

/* A generation request with its complete body: queued, then (ASYNC) the
 * job's id at once, or its answer once it ends. */
static enum MHD_Result pd_generate(struct pd_serve *s, struct MHD_Connection *c, const char *url,
				   enum pd_serve_api api, int async, struct pd_conn *k)
{
	struct pd_serve_params p;
	struct pd_serve_job *job;
	char field[128], peer[64], frames[64], size[32], *body;
	int status, retry = 0, w, h, steps, n, gone;
	unsigned long long seed;
	double t0 = pd_now();

	pd_peer(c, peer, sizeof(peer));
	if (api == PD_API_OPENAI_EDIT && pd_multipart_type(c)) {
		/* images.edit's form, read as the JSON object of its fields */
		char *json = pd_serve_multipart_json(
			MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE), k->body ? k->body : "",
			k->len, field, sizeof(field));
		int rc = !json || pd_serve_params_parse(&p, api, json, strlen(json), s->o.strict, field, sizeof(field));

		free(json);
		if (rc) {
			pd_serve_log(s, "pdit: POST %s from %s -> 400 (%s)", url, peer, pd_last_error());
			return pd_reply_error(c, 400, "invalid_request_error", field[0] ? field : NULL, pd_last_error(), 0);
		}
	} else if (pd_serve_params_parse(&p, api, k->body ? k->body : "", k->len, s->o.strict, field, sizeof(field))) {
		pd_serve_log(s, "pdit: POST %s from %s -> 400 (%s)", url, peer, pd_last_error());
		return pd_reply_error(c, 400, "invalid_request_error", field[0] ? field : NULL, pd_last_error(), 0);
	}
	/* what runs: the model's own where the request left it out */
	w = p.width ? p.width : s->o.default_width;
	h = p.height ? p.height : s->o.default_height;
	steps = p.steps ? p.steps : s->o.default_steps;
	n = p.n, seed = (unsigned long long)p.seed;
	/* a picture's size is its init picture's where the request has none:
	 * the model's own then stands in, for the frames' rule */
	if (s->o.shape_ok && s->o.shape_ok(s->o.shape_ctx, p.video ? (p.frames ? p.frames : s->o.default_frames) : 1, h, w)) {
		const char *param;
		char *msg = pd_serve_engine_error(api, pd_last_error(), &param);
		enum MHD_Result r;

		pd_serve_log(s, "pdit: POST %s from %s -> 400 (%s)", url, peer, msg ? msg : pd_last_error());
		r = pd_reply_error(c, 400, "invalid_request_error", param, msg ? msg : pd_last_error(), 0);
		free(msg);
		pd_serve_params_free(&p);
		return r;
	}
	frames[0] = 0;
	if (p.video)
		snprintf(frames, sizeof(frames), ", a video of %d frames", p.frames ? p.frames : s->o.default_frames);
	status = pd_jobs_submit(s, &p, async, &job, &retry);
	if (status) {
		pd_serve_params_free(&p);
		pd_serve_log(s, "pdit: POST %s from %s -> %d (%s)", url, peer, status,
			     status == 429 ? "queue full" : status == 503 ? "stopping" : "out of memory");
		return status == 429 ? pd_reply_error(c, 429, "rate_limit_error", NULL,
						      "the queue is full: retry later (Retry-After)", retry)
		       : status == 503 ? pd_reply_error(c, 503, "server_error", NULL, "the server is stopping", 0)
				       : pd_reply_error(c, 500, "server_error", NULL, "out of memory", 0);
	}
	if (job->params.init_png && !job->params.width)
		snprintf(size, sizeof(size), "the picture's size");
	else
		snprintf(size, sizeof(size), "%dx%d", w, h);
	pd_serve_log(s, "pdit: job %llu: POST %s from %s: %s%s, %d step(s), n %d, seed %llu%s%s%s",
		     (unsigned long long)job->id, url, peer, size, frames, steps, n, seed,
		     job->params.ignored[0] ? " (ignored: " : "", job->params.ignored, job->params.ignored[0] ? ")" : "");
	if (async && api == PD_API_SDCPP_VIDEO) {
		/* stable-diffusion.cpp's acknowledgement */
		body = pd_strfmt("{\"id\":\"%llu\",\"kind\":\"vid_gen\",\"status\":\"queued\",\"created\":%lld,"
				 "\"poll_url\":\"/sdcpp/v1/jobs/%llu\"}", (unsigned long long)job->id, (long long)time(NULL),
				 (unsigned long long)job->id);
		pd_jobs_release(s, job);
		return pd_reply(c, 202, body, 0);
	}
	if (async) {
		body = pd_jobs_json(s, job);
		pd_jobs_release(s, job);
		return pd_reply(c, 202, body, 0);
	}
	{
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

		gone = pd_jobs_wait(s, job, ci ? ci->connect_fd : -1);
	}
	/* ended: only this thread reads its answer now */
	status = job->status;
	body = job->body;
	job->body = NULL;
	pd_serve_log(s, "pdit: job %llu -> %d in %.3f s (waited %.3f s, engine %.3f s)%s", (unsigned long long)job->id,
		     /* a job never started (503 at a stop) waited all along */
		     status, pd_now() - t0, (job->t_start > 0 ? job->t_start : pd_now()) - job->t_submit, job->engine_s,
		     gone ? " (the client left: cancelled)" : "");
	pd_jobs_release(s, job);
	return pd_reply(c, status, body, 0);
}

/* A video job's MP4 (GET /v1/jobs/ID/video): what the page plays. */
static enum MHD_Result pd_job_video(struct pd_serve *s, struct MHD_Connection *c, struct pd_serve_job *job)
{
	struct MHD_Response *r = NULL;
	enum MHD_Result ret;
	int state;

	pthread_mutex_lock(&s->mu);
	state = job->state;
	if (job->media)
		r = MHD_create_response_from_buffer(job->media_len, job->media, MHD_RESPMEM_MUST_COPY);
	pthread_mutex_unlock(&s->mu);
	pd_jobs_release(s, job);
	if (!r && state == PD_JOB_DONE)
		return pd_reply_error(c, 404, "invalid_request_error", "id",
				      "this job made no MP4 (pictures, or its video's frames as PNGs)", 0);
	if (!r && state < PD_JOB_DONE)
		return pd_reply_error(c, 409, "invalid_request_error", "id", "the job has not ended yet", 0);
	if (!r)
		return pd_reply_error(c, 404, "invalid_request_error", "id", "the job ended without a video", 0);
	MHD_add_response_header(r, "Content-Type", "video/mp4");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* stable-diffusion.cpp's /sdcpp/v1/jobs/ID and /sdcpp/v1/jobs/ID/cancel. */
static enum MHD_Result pd_sdcpp_job_route(struct pd_serve *s, struct MHD_Connection *c, const char *url,
					  const char *method)
{
	const char *rest = url + strlen("/sdcpp/v1/jobs/");
	char *end, *body;
	unsigned long long id = strtoull(rest, &end, 10);
	int cancel = strcmp(end, "/cancel") == 0, status = 200;
	struct pd_serve_job *job;

	if (end == rest || (*end && !cancel))
		return pd_reply_error(c, 404, "invalid_request_error", NULL, "no such endpoint", 0);
	if (strcmp(method, cancel ? "POST" : "GET") != 0)
		return pd_reply_error(c, 405, "invalid_request_error", NULL, cancel ? "use POST" : "use GET", 0);
	job = pd_jobs_find(s, id);
	if (!job)
		return pd_reply_error(c, 404, "invalid_request_error", "id", "no such job (ended jobs are kept a while)", 0);
	if (cancel) {
		status = pd_jobs_cancel(s, job);
		pd_serve_log(s, "pdit: job %llu: cancel -> %d", id, status);
		status = status == 202 ? 200 : status;
	}
	body = pd_jobs_json_sdcpp(s, job);
	pd_jobs_release(s, job);
	if (status == 409) {
		free(body);
		return pd_reply_error(c, 409, "invalid_request_error", "id", "the job has already ended", 0);
	}
	return pd_reply(c, status, body, 0);
}

/* /v1/jobs/ID, /v1/jobs/ID/events and /v1/jobs/ID/video. */
static enum MHD_Result pd_job_route(struct pd_serve *s, struct MHD_Connection *c, const char *url,
				    const char *method)
{
	const char *rest = url + strlen("/v1/jobs/");
	char *end;
	unsigned long long id = strtoull(rest, &end, 10);
	int events = strcmp(end, "/events") == 0, video = strcmp(end, "/video") == 0;
	struct pd_serve_job *job;
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (end == rest || (*end && !events && !video))
		return pd_reply_error(c, 404, "invalid_request_error", NULL, "no such endpoint", 0);
	job = pd_jobs_find(s, id);
	if (!job)
		return pd_reply_error(c, 404, "invalid_request_error", "id", "no such job (ended jobs are kept a while)", 0);
	if (video) {
		if (strcmp(method, "GET") == 0)
			return pd_job_video(s, c, job);
		pd_jobs_release(s, job);
		return pd_reply_error(c, 405, "invalid_request_error", NULL, "use GET", 0);
	}
	if (events && strcmp(method, "GET") == 0) {
		r = pd_jobs_events(s, job);
		if (!r)
			return MHD_NO;
		ret = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return ret;
	}
	if (!events && strcmp(method, "GET") == 0) {
		char *body = pd_jobs_json(s, job);

		pd_jobs_release(s, job);
		return pd_reply(c, 200, body, 0);
	}
	if (!events && strcmp(method, "DELETE") == 0) {
		int status = pd_jobs_cancel(s, job);
		char *body = pd_jobs_json(s, job);

		pd_serve_log(s, "pdit: job %llu: DELETE -> %d", id, status);
		pd_jobs_release(s, job);
		if (status == 409) {
			free(body);
			return pd_reply_error(c, 409, "invalid_request_error", "id", "the job has already ended", 0);
		}
		return pd_reply(c, status, body, 0);
	}
	pd_jobs_release(s, job);
	return pd_reply_error(c, 405, "invalid_request_error", NULL, events ? "use GET" : "use GET or DELETE", 0);
}

static enum MHD_Result pd_page(struct MHD_Connection *c)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(pd_serve_page), (void *)pd_serve_page,
								 MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

static int pd_json_type(struct MHD_Connection *c)
{
	const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);

	return t && strncasecmp(t, "application/json", 16) == 0 && (t[16] == 0 || t[16] == ';' || t[16] == ' ');
}

static int pd_authorized(struct pd_serve *s, struct MHD_Connection *c)
{
	const char *h;
	size_t n, k;
	unsigned diff = 0;

	if (!s->o.api_key)
		return 1;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!h || strncmp(h, "Bearer ", 7) != 0)
		return 0;
	h += 7;
	n = strlen(h);
	k = strlen(s->o.api_key);
	/* the same time whatever the key's first difference */
	for (size_t i = 0; i < k; i++)
		diff |= (unsigned)(unsigned char)s->o.api_key[i] ^ (unsigned)(i < n ? (unsigned char)h[i] : 0);
	return diff == 0 && n == k;
}

static enum MHD_Result pd_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct pd_serve *s = cls;
	struct pd_conn *k = *con_cls;
	int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
	enum pd_serve_api api = PD_API_OPENAI;
	int gen = 0, async = 0;

	(void)version;
	if (strcmp(url, "/v1/images/generations") == 0)
		gen = 1;
	else if (strcmp(url, "/sdapi/v1/txt2img") == 0)
		gen = 1, api = PD_API_A1111;
	else if (strcmp(url, "/sdapi/v1/img2img") == 0)
		gen = 1, api = PD_API_A1111_IMG2IMG;
	else if (strcmp(url, "/v1/images/edits") == 0)
		gen = 1, api = PD_API_OPENAI_EDIT;
	else if (strcmp(url, "/v1/jobs") == 0)
		gen = 1, async = 1, api = PD_API_JOBS;
	else if (strcmp(url, "/sdcpp/v1/vid_gen") == 0)
		gen = 1, async = 1, api = PD_API_SDCPP_VIDEO;
	if (!k) {
		/* the first call: headers only. Refusals that need no body go now. */
		k = pd_calloc(1, sizeof(*k), "a connection");
		if (!k)
			return MHD_NO;
		*con_cls = k;
		pthread_mutex_lock(&s->mu);
		s->active++;
		pthread_mutex_unlock(&s->mu);
		/* the page asks for the key itself */
		if (!pd_authorized(s, c) && !(get && strcmp(url, "/") == 0))
			return pd_reply_error(c, 401, "authentication_error", NULL,
					      "a valid \"Authorization: Bearer KEY\" header is required", 0);
		if (gen && !post)
			return pd_reply_error(c, 405, "invalid_request_error", NULL, "use POST", 0);
		if (gen && !pd_json_type(c) && !(api == PD_API_OPENAI_EDIT && pd_multipart_type(c)))
			return pd_reply_error(c, 415, "invalid_request_error", NULL,
					      api == PD_API_OPENAI_EDIT ? "Content-Type must be multipart/form-data (or "
									  "application/json)"
									: "Content-Type must be application/json", 0);
		if (gen) {
			const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
			const char *ex = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
			unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0;

			/* a client that waits for "100 Continue" hears it now; one that
			 * sends anyway is read to the end (up to 64 MB, discarded) so it
			 * is there to read the answer */
			if (n > s->o.body_max && (ex || n > (64ULL << 20)))
				return pd_reply_error(c, 413, "invalid_request_error", NULL, "the body is too large", 0);
			k->too_big = n > s->o.body_max;
		}
		return MHD_YES;
	}
	if (*upload_size) {
		/* more of the body */
		if (!k->too_big && k->len + *upload_size > s->o.body_max)
			k->too_big = 1;
		k->seen += *upload_size;
		if (k->seen > (64ULL << 20))
			return MHD_NO;          /* past any sane body, sent without a length: dropped */
		if (!k->too_big) {
			if (k->len + *upload_size + 1 > k->cap) {
				size_t cap = k->cap ? k->cap : 4096;
				char *b;

				while (cap < k->len + *upload_size + 1)
					cap *= 2;
				b = realloc(k->body, cap);
				if (!b)
					return MHD_NO;
				k->body = b;
				k->cap = cap;
			}
			memcpy(k->body + k->len, upload, *upload_size);
			k->len += *upload_size;
			k->body[k->len] = 0;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (k->too_big)
		return pd_reply_error(c, 413, "invalid_request_error", NULL, "the body is too large", 0);
	if (gen)
		return pd_generate(s, c, url, api, async, k);
	if (strncmp(url, "/v1/jobs/", 9) == 0)
		return pd_job_route(s, c, url, method);
	if (strncmp(url, "/sdcpp/v1/jobs/", 15) == 0)
		return pd_sdcpp_job_route(s, c, url, method);
	if (get && strcmp(url, "/") == 0)
		return pd_page(c);
	if (get && strcmp(url, "/health") == 0)
		return pd_health(s, c);
	if (get && strcmp(url, "/v1/models") == 0)
		return pd_models(s, c);
	if (strcmp(url, "/health") == 0 || strcmp(url, "/v1/models") == 0)
		return pd_reply_error(c, 405, "invalid_request_error", NULL, "use GET", 0);
	return pd_reply_error(c, 404, "invalid_request_error", NULL, "no such endpoint", 0);
}

static void pd_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode code)
{
	struct pd_conn *k = *con_cls;

	struct pd_serve *s = cls;

	(void)c;
	(void)code;
	if (k) {
		free(k->body);
		free(k);
		*con_cls = NULL;
		pthread_mutex_lock(&s->mu);
		s->active--;
		pthread_cond_broadcast(&s->changed_cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* "HOST:PORT" (an IPv4 address or localhost) into A. */
static int pd_parse_listen(const char *listen, struct sockaddr_in *a)
{
	char host[64];
	const char *colon = strrchr(listen, ':');
	char *end;
	long port;

	if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(host))
		return pd_errorf("--listen %s: give HOST:PORT, such as 127.0.0.1:8080", listen);
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = 0;
	port = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port < 0 || port > 65535)
		return pd_errorf("--listen %s: the port must be 0 to 65535", listen);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
		return pd_errorf("--listen %s: %s is not an IPv4 address", listen, host);
	return 0;
}

int pd_serve_built(void)
{
	return 1;
}

int pd_serve_check_listen(const char *listen)
{
	struct sockaddr_in a;
	int fd, one = 1, rc;

	if (pd_parse_listen(listen, &a))
		return -1;
	/* a port in use, or an address of another machine, told before the
	 * weights load (minutes for a real model), not after; bound as
	 * libmicrohttpd binds it, then let go */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	rc = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : errno;
	close(fd);
	if (rc == EADDRINUSE)
		return pd_errorf("--listen %s: cannot listen there: the port is in use", listen);
	if (rc == EADDRNOTAVAIL)
		return pd_errorf("--listen %s: cannot listen there: not this machine's address", listen);
	return rc ? pd_errorf("--listen %s: cannot listen there: %s", listen, strerror(rc)) : 0;
}

int pd_serve_start(struct pd_serve **out, const struct pd_serve_options *o)
{
	struct pd_serve *s;
	struct sockaddr_in a;
	const union MHD_DaemonInfo *di;

	*out = NULL;
	if (pd_parse_listen(o->listen, &a))
		return -1;
	s = pd_calloc(1, sizeof(*s), "the server");
	if (!s)
		return -1;
	s->o = *o;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->queued_cv, NULL);
	pthread_cond_init(&s->changed_cv, NULL);
	s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC,
				     0, NULL, NULL, pd_handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&a,
				     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->io_timeout > 0 ? o->io_timeout : 10),
				     MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->queue_max + 64),
				     /* one address cannot take every connection */
				     MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(o->queue_max / 2 + 32),
				     MHD_OPTION_NOTIFY_COMPLETED, pd_completed, s, MHD_OPTION_END);
	if (!s->daemon) {
		pd_errorf("--listen %s: cannot listen there (in use, or not this machine's address)", o->listen);
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->queued_cv);
		pthread_cond_destroy(&s->changed_cv);
		free(s);
		return -1;
	}
	di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	{
		char host[INET_ADDRSTRLEN];

		inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
		pd_serve_log(s, "pdit: serving %s on http://%s:%u (POST /v1/images/generations, /sdapi/v1/txt2img, "
			     "/sdapi/v1/img2img, /v1/images/edits, /v1/jobs, /sdcpp/v1/vid_gen; GET /, /health, /v1/models)", o->model ? o->model : "", host,
			     di ? (unsigned)di->port : (unsigned)ntohs(a.sin_port));
	}
	*out = s;
	return 0;
}

