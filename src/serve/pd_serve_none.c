/*
 * pd_serve_none.c - pdit serve in a build without libmicrohttpd
 * (-DPDIT_SERVE=OFF: a build that only computes, such as the GPU machine's
 * kit, which a device call carries and libmicrohttpd's TLS stack would
 * grow by 2 MB): refused with the reason before a model loads; nothing
 * else is reached without a server.
 */
#include "pd_serve.h"
#include "pd_util.h"

#include <stdlib.h>

int pd_serve_built(void)
{
	return 0;
}

int pd_serve_check_listen(const char *listen)
{
	(void)listen;
	return pd_errorf("serve: this pdit was built without its HTTP service (-DPDIT_SERVE=OFF): "
			 "rebuild with -DPDIT_SERVE=ON (libmicrohttpd)");
}

int pd_serve_start(struct pd_serve **out, const struct pd_serve_options *o)
{
	*out = NULL;
	return pd_serve_check_listen(o->listen);
}

int pd_serve_next(struct pd_serve *s, struct pd_serve_job **job, double timeout)
{
	(void)s;
	(void)timeout;
	*job = NULL;
	return 0;
}

void pd_serve_progress(struct pd_serve *s, struct pd_serve_job *job, int step, int steps)
{
	(void)s;
	(void)job;
	(void)step;
	(void)steps;
}

void pd_serve_phase(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_phase phase, int done, int total)
{
	(void)s;
	(void)job;
	(void)phase;
	(void)done;
	(void)total;
}

void pd_serve_attach_video(struct pd_serve *s, struct pd_serve_job *job, uint8_t *mp4, size_t len)
{
	(void)s;
	(void)job;
	(void)len;
	free(mp4);
}

void pd_serve_finish(struct pd_serve *s, struct pd_serve_job *job, enum pd_job_state state, int status, char *body,
		     char *info, double engine_s)
{
	(void)s;
	(void)job;
	(void)state;
	(void)status;
	(void)engine_s;
	free(body);
	free(info);
}

void pd_serve_stop(struct pd_serve *s, const char *why)
{
	(void)s;
	(void)why;
}

void pd_serve_abort(struct pd_serve *s, const char *why, double wait)
{
	(void)s;
	(void)why;
	(void)wait;
}
