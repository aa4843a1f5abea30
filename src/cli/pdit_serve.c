/*
 * pdit_serve.c - pdit serve: one engine on every rank, HTTP on rank 0.
 *
 * Rank 0 takes the next job from the server's queue and broadcasts its
 * parameters (pd_serve_params_encode: the same text on every rank; an empty
 * text stops the job); every rank runs it as one engine request, the
 * pictures come to rank 0 (from the writer of each data-parallel group),
 * which answers. Ranks other than 0 wait in that broadcast between requests
 * (the communicator polls with sleeps: an idle server costs no cores).
 */
#include "pd_png.h"
#include "pd_serve.h"
#include "pd_util.h"
#include "pd_video.h"
#include "pdit_cli.h"
#include "pdit_flags.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char pd_serve_usage[] =
	"usage: [mpirun -np N] pdit serve --model DIR [mesh degrees | --parallel auto] [--listen 127.0.0.1:8080]\n"
	"\n"
	"Loads the model once on every process and answers HTTP requests: rank 0 queues\n"
	"them and hands each to every process, which run it together; the pictures are\n"
	"those pdit generate makes with the same arguments, on any mesh. JSON in and out:\n"
	"  POST /v1/images/generations   OpenAI's images API: prompt, n, size \"WxH\",\n"
	"                                response_format b64_json (model accepted); and\n"
	"                                seed, steps, guidance, negative_prompt,\n"
	"                                true_cfg_scale, fbcache_threshold\n"
	"  POST /sdapi/v1/txt2img        A1111's: prompt, negative_prompt, width, height,\n"
	"                                steps, cfg_scale (FLUX: true CFG above 1, the\n"
	"                                negative prompt \"\" unless given; Wan: its\n"
	"                                guidance), distilled_cfg_scale (Forge's: FLUX's\n"
	"                                guidance), seed (-1: any), batch_size, n_iter;\n"
	"                                the rest of A1111's fields are accepted, and\n"
	"                                logged when they ask for what pdit does not do\n"
	"                                (sampler_name other than Euler, restore_faces,\n"
	"                                enable_hr, scripts, ...); --strict refuses them\n"
	"  POST /v1/jobs                 OpenAI's body: 202 with the job's id at once;\n"
	"                                GET /v1/jobs/ID (its phase and step; when done\n"
	"                                its answer), /v1/jobs/ID/events, DELETE cancels\n"
	"  videos (Wan2.1)               frames, fps (16) on /v1/jobs or the images API:\n"
	"                                the MP4 generate -o clip.mp4 writes, also at\n"
	"                                GET /v1/jobs/ID/video; output_format png: the\n"
	"                                frames; POST /sdcpp/v1/vid_gen, GET\n"
	"                                /sdcpp/v1/jobs/ID: stable-diffusion.cpp's\n"
	"  GET /health, GET /v1/models\n"
	"Each PNG carries pdit generate's parameters chunk. Bad requests get a 4xx with a\n"
	"JSON error naming the field; a full queue 429 with Retry-After. SIGTERM or\n"
	"Ctrl-C: the running request finishes, the queued ones get 503, exit 0. Under\n"
	"mpirun send SIGUSR1 to mpirun instead (it ends the job on SIGTERM), or SIGTERM\n"
	"to the pid in --pid-file; examples/pdit-serve.service is a systemd unit.";

static const char pd_serve_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit serve --model tiny-model --listen 127.0.0.1:8080 &\n"
	"  curl -s localhost:8080/v1/images/generations -H 'Content-Type: application/json' \\\n"
	"      -d '{\"prompt\": \"a red fox\", \"size\": \"256x256\", \"steps\": 4}'\n"
	"  pdit serve --model Wan2.1-T2V-1.3B-Diffusers &     # then a video job, and its MP4:\n"
	"  curl -s localhost:8080/v1/jobs -H 'Content-Type: application/json' \\\n"
	"      -d '{\"prompt\": \"a red kite\", \"size\": \"832x480\", \"frames\": 33}'\n"
	"  curl -s localhost:8080/v1/jobs/1/video -o kite.mp4\n"
	"  mpirun -np 2 pdit serve --model FLUX.1-dev --dtype bf16 --ulysses-degree 2 --api-key \"$KEY\"\n";

/* pdit serve's own settings, parsed with the engine's options. */
struct pd_cli_serve {
	const char *listen;             /* HOST:PORT */
	const char *api_key;            /* --api-key or PDIT_API_KEY, or NULL */
	int queue;                      /* requests waiting besides the running one */
	size_t body_max;                /* bytes of a request body */
	int strict;                     /* unknown fields refused */
	int io_timeout;                 /* seconds a silent connection lives */
	int quiet;                      /* -q: errors only */
	const char *model;              /* the model as the PNGs name it (generate's "model:") */
	const char *dtype;              /* "f32" or "bf16" */
	const char *pid_file;           /* --pid-file: rank 0's pid, while it serves; or NULL */
};
struct pd_serve_args {
	struct pd_gen_args gen;         /* the shared flags: the model, the mesh, precision */
	const char *listen, *api_key;   /* --listen HOST:PORT, --api-key KEY */
	const char *pid_file;           /* --pid-file FILE */
	int queue, strict, io_timeout, max_body_kb;
	int lora_cache_mb;              /* --lora-cache MB */
};

static void pd_serve_flags(struct pd_serve_args *a, struct pd_arg *opts)
{
	int n = pd_gen_flags(&a->gen, opts, PD_CMD_SERVE);

	a->listen = "127.0.0.1:8080";
	a->api_key = NULL;
	a->queue = 16;
	a->strict = 0;
	a->max_body_kb = 256;
	a->io_timeout = 10;
	a->pid_file = NULL;
	a->lora_cache_mb = 1024;
	opts[n++] = (struct pd_arg){ "--listen", 0, PD_ARG_STRING, &a->listen, "HOST:PORT",
				     "address to answer on (default 127.0.0.1:8080; port 0: any free one, printed)",
				     NULL };
	opts[n++] = (struct pd_arg){ "--api-key", 0, PD_ARG_STRING, &a->api_key, "KEY",
				     "require \"Authorization: Bearer KEY\" (or set PDIT_API_KEY); needed to listen "
				     "on an address other than 127.0.0.1", NULL };
	opts[n++] = (struct pd_arg){ "--queue", 0, PD_ARG_INT, &a->queue, "N",
				     "requests waiting besides the running one; more get 429 (default 16)", NULL };
	opts[n++] = (struct pd_arg){ "--max-body", 0, PD_ARG_INT, &a->max_body_kb, "KB",
				     "largest request body; more get 413 (default 256)", NULL };
	opts[n++] = (struct pd_arg){ "--strict", 0, PD_ARG_FLAG, &a->strict, NULL,
				     "refuse fields a request's API does not have, and A1111 fields asking for what pdit does not do (400)", NULL };
	opts[n++] = (struct pd_arg){ "--io-timeout", 0, PD_ARG_INT, &a->io_timeout, "S",
				     "seconds a connection may stay silent before it is closed (default 10)", NULL };
	opts[n++] = (struct pd_arg){ "--pid-file", 0, PD_ARG_STRING, &a->pid_file, "FILE",
				     "write rank 0's pid to FILE while serving (removed at exit): SIGTERM to it "
				     "stops cleanly under any launcher", NULL };
	opts[n++] = (struct pd_arg){ "--lora-cache", 0, PD_ARG_INT, &a->lora_cache_mb, "MB",
				     "adapter sets (--lora, <lora:NAME:SCALE> tags) whose terms stay on the host, "
				     "so a request naming a set used before does not read its files again; the least "
				     "recently used go past MB (default 1024; 0: none kept)", NULL };
	memset(&opts[n], 0, sizeof(opts[n]));
}

int pd_cmd_serve_parse_only(int argc, char **argv)
{
	struct pd_serve_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];

	pd_serve_flags(&a, opts);
	return pd_gen_parse(NULL, &a.gen, opts, "serve", NULL, NULL, argc, argv);
}

/* Parses pdit serve's arguments (generate's model and mesh options and
 * serve's own): 0 go on, 1 help shown, -1 refused (message set). */
static int pd_cli_serve_parse(struct pd_comm *world, int argc, char **argv, struct pd_engine_options *o,
			      struct pd_cli_serve *sv)
{
	struct pd_serve_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];
	int hr;

	pd_serve_flags(&a, opts);
	hr = pd_gen_parse(world, &a.gen, opts, "serve", pd_serve_usage, pd_serve_examples, argc, argv);
	if (hr)
		return hr;
	if (pd_gen_engine_options(&a.gen, o, 1))
		return -1;
	o->one_request = 0;
	o->keep_encoders = 1;
	o->lora_cache_mb = a.lora_cache_mb;
	memset(sv, 0, sizeof(*sv));
	sv->listen = a.listen;
	sv->api_key = a.api_key ? a.api_key : getenv("PDIT_API_KEY");
	if (sv->api_key && !sv->api_key[0])
		sv->api_key = NULL;
	sv->queue = a.queue;
	sv->strict = a.strict;
	sv->io_timeout = a.io_timeout;
	sv->pid_file = a.pid_file;
	sv->quiet = a.gen.quiet;
	sv->model = pd_gen_model_name(&a.gen);
	sv->dtype = a.gen.dtype;
	if (a.queue < 0 || a.queue > 4096)
		return pd_errorf("--queue must be 0 to 4096 (got %d)", a.queue);
	if (a.max_body_kb < 1 || a.max_body_kb > 65536)
		return pd_errorf("--max-body must be 1 to 65536 KB (got %d)", a.max_body_kb);
	if (a.io_timeout < 1 || a.io_timeout > 3600)
		return pd_errorf("--io-timeout must be 1 to 3600 seconds (got %d)", a.io_timeout);
	sv->body_max = (size_t)a.max_body_kb << 10;
	return 0;
}

/* The engine request of job parameters P (the prompt borrowed). */
static void pd_serve_request(const struct pd_engine_about *ab, const struct pd_serve_params *p,
			     const char **prompt, struct pd_request *rq)
{
	pd_request_init(rq);
	rq->prompts = prompt;
	rq->n_prompts = 1;
	rq->batch = p->n;
	rq->negative = p->negative;
	/* fields the request left out (0 in P: the API refused a given 0) */
	rq->height = p->height ? p->height : PD_DEFAULT;
	rq->width = p->width ? p->width : PD_DEFAULT;
	rq->steps = p->steps ? p->steps : PD_DEFAULT;
	rq->seed = p->seed;
	rq->guidance = p->guidance;
	rq->true_cfg_scale = p->true_cfg_scale;
	rq->fbcache_threshold = p->fbcache_threshold;
	/* pictures are one frame (of a video family too); a video the frames
	 * asked, or the model's */
	rq->frames = !p->video ? 1 : p->frames ? p->frames : PD_DEFAULT;
	rq->flow_shift = p->flow_shift;
	rq->strength = p->strength >= 0 ? p->strength : PD_DEFAULT;
	/* A1111's cfg_scale is classifier-free guidance: FLUX's true CFG with
	 * the negative prompt (1: off), Wan's guidance */
	if (p->cfg_scale >= 0) {
		if (ab->guidance_is_cfg)
			rq->guidance = p->cfg_scale;
		else
			rq->true_cfg_scale = p->cfg_scale;
	}
	rq->want_pictures = 1;
}

/* Rank 0 gets every picture of RES (each data-parallel group's writer holds
 * its own): *ALL [images, frames, h, w, 3], NULL elsewhere. 0, or -1 on
 * every rank alike (a request's failure: the engine goes on), or -2 when
 * a transfer failed (the job is lost). */
static int pd_serve_gather(struct pd_comm *world, const struct pd_result *res, uint8_t **all)
{
	size_t pic = (size_t)res->width * res->height * 3 * (size_t)(res->frames > 1 ? res->frames : 1);
	int64_t mine[2] = { res->rgb ? res->first_picture : 0, res->rgb ? res->n_pictures : 0 }, *spans, covered = 0;
	size_t *bytes, total = 0;
	uint8_t *recv = NULL;
	int rc = -1, bad;

	*all = NULL;
	spans = pd_calloc((size_t)world->size * 2, sizeof(*spans), "pictures");
	bytes = pd_calloc((size_t)world->size, sizeof(*bytes), "pictures");
	/* every rank takes the same way: agree before each collective */
	if (pd_comm_agree(world, !spans || !bytes, NULL))
		goto out;
	rc = -2;
	if (pd_comm_allgather(world, mine, sizeof(mine), spans))
		goto out;
	/* the same numbers on every rank: the same verdict */
	for (int r = 0; r < world->size; r++) {
		int64_t first = spans[2 * r], n = spans[2 * r + 1];

		bad = n < 0 || first < 0 || first + n > res->images;
		if (bad) {
			covered = -1;
			break;
		}
		covered += n;
		bytes[r] = (size_t)n * pic;
		total += bytes[r];
	}
	if (covered != res->images) {
		rc = -1;
		pd_errorf("the run made %lld of its %lld pictures", (long long)(covered > 0 ? covered : 0),
			  (long long)res->images);
		goto out;
	}
	if (world->rank == 0) {
		recv = world->size > 1 ? pd_malloc(total, "pictures") : NULL;
		*all = pd_malloc((size_t)res->images * pic, "pictures");
	}
	rc = -1;
	if (pd_comm_agree(world, world->rank == 0 && (!*all || (world->size > 1 && !recv)), NULL))
		goto out;
	rc = -2;
	if (world->size == 1) {
		memcpy(*all, res->rgb, total);
	} else {
		size_t off = 0;

		if (world->ops->gatherv(world, res->rgb, bytes[world->rank], recv, bytes, 0))
			goto out;
		for (int r = 0; world->rank == 0 && r < world->size; r++) {
			memcpy(*all + (size_t)spans[2 * r] * pic, recv + off, bytes[r]);
			off += bytes[r];
		}
	}
	rc = 0;
out:
	if (rc) {
		free(*all);
		*all = NULL;
	}
	free(spans);
	free(bytes);
	free(recv);
	return rc;
}

/* Rank 0: the answer to job P from the pictures ALL. */
static char *pd_serve_pngs(const struct pd_cli_serve *sv, const struct pd_serve_params *p,
			   const struct pd_result *res, const uint8_t *all, char **info)
{
	size_t pic = (size_t)res->width * res->height * 3;
	uint8_t **pngs = pd_calloc((size_t)res->images, sizeof(*pngs), "pictures");
	size_t *lens = pd_calloc((size_t)res->images, sizeof(*lens), "pictures");
	char *source = pd_cli_prompt_source(p->prompt, p->negative), *body = NULL;
	int ok = pngs && lens && source;

	*info = NULL;
	for (int64_t b = 0; ok && b < res->images; b++) {
		char *text = pd_cli_parameters(source, p->seed + (uint64_t)b, res, sv->model, sv->dtype);

		ok = text && !pd_png_encode(all + (size_t)b * pic * (size_t)res->frames, res->width, res->height,
					    "parameters", text, &pngs[b], &lens[b]);
		if (b == 0 && ok)
			*info = text;
		else
			free(text);
	}
	if (ok)
		body = pd_serve_answer(p, (int)res->images, pngs, lens, *info);
	for (int64_t b = 0; pngs && b < res->images; b++)
		free(pngs[b]);
	free(pngs);
	free(lens);
	free(source);
	return body;
}

/* Rank 0: job P's one video from ALL as the answer: the MP4 pdit generate
 * -o clip.mp4 writes (*MP4, *MP4_LEN), or its frames' PNGs (as generate -o
 * frame-%03d.png writes them). */
static char *pd_serve_video(const struct pd_cli_serve *sv, const struct pd_serve_params *p,
			    const struct pd_result *res, const uint8_t *all, char **info, uint8_t **mp4, size_t *mp4_len)
{
	size_t frame = (size_t)res->width * res->height * 3;
	char *source = pd_cli_prompt_source(p->prompt, p->negative), *text = NULL, *body = NULL;

	*info = NULL;
	*mp4 = NULL;
	*mp4_len = 0;
	text = source ? pd_cli_parameters(source, p->seed, res, sv->model, sv->dtype) : NULL;
	if (!text)
		goto out;
	if (p->frames_png) {
		uint8_t **pngs = pd_calloc((size_t)res->frames, sizeof(*pngs), "frames");
		size_t *lens = pd_calloc((size_t)res->frames, sizeof(*lens), "frames");
		int ok = pngs && lens;

		for (int f = 0; ok && f < res->frames; f++)
			ok = !pd_png_encode(all + (size_t)f * frame, res->width, res->height, "parameters", text, &pngs[f],
					    &lens[f]);
		if (ok)
			body = pd_serve_answer(p, res->frames, pngs, lens, text);
		for (int f = 0; pngs && f < res->frames; f++)
			free(pngs[f]);
		free(pngs);
		free(lens);
	} else {
		/* in memory: a server killed mid-answer leaves no file behind */
		const char *meta[] = { "title", p->prompt, "comment", text, NULL };
		uint8_t *bytes = NULL;
		size_t len = 0;

		if (!pd_video_bytes("video.mp4", all, res->frames, res->width, res->height, p->fps ? p->fps : PD_SERVE_FPS,
				    meta, &bytes, &len)) {
			body = pd_serve_video_answer(p, bytes, len, res->frames, res->width, res->height, text);
			if (body) {
				*mp4 = bytes;
				*mp4_len = len;
				bytes = NULL;
			}
		}
		free(bytes);
	}
out:
	free(source);
	if (body)
		*info = text;
	else
		free(text);
	return body;
}

/* Rank 0's step callback: the job's progress for GET and the streams. */
struct pd_serve_step {
	struct pd_serve *srv;           /* the server */
	struct pd_serve_job *job;       /* the running job */
};

static void pd_serve_on_step(void *ctx, int step, int steps)
{
	struct pd_serve_step *st = ctx;

	pd_serve_progress(st->srv, st->job, step, steps);
}

/* Rank 0 under mpirun: when the launcher signals (it ends the job because
 * a process failed, or it was itself stopped), the loop may be stuck in a
 * collective with a lost process, and the launcher kills what remains a
 * moment later: the clients get their 503 now, from this thread. */
struct pd_serve_watch {
	struct pd_serve *srv;           /* the server */
	const char *pid_file;           /* --pid-file, removed before the process ends; or NULL */
	volatile int done;              /* the loop has ended: stop watching */
};

static void *pd_serve_watcher(void *arg)
{
	struct pd_serve_watch *w = arg;

	while (!w->done) {
		if (pd_cli_interrupted() && pd_cli_signal_from_launcher()) {
			pd_cli_progress_clear();
			fprintf(stderr, "pdit: the job is being ended (a process failed, or mpirun was stopped): every "
					"request is answered 503\n");
			pd_serve_abort(w->srv, "the job was ended: a process failed, or mpirun was stopped", 0.5);
			if (w->pid_file)
				unlink(w->pid_file);
			_exit(1);
		}
		usleep(20000);
	}
	return NULL;
}

/* The engine's phases of the running request, summed (every rank; rank 0's
 * goes in the log): what the server adds is the rest of a request's time. */
struct pd_serve_clock {
	double engine_s;                /* encoding, steps and decoding so far */
	struct pd_serve *srv;           /* rank 0: the server, for the decode's progress; NULL elsewhere */
	struct pd_serve_job *job;       /* rank 0: the running job */
};

/* The service's check of a request's frames and size before it is queued
 * (the engine's rule; CTX is the engine). */
static int pd_serve_shape_ok(void *ctx, int frames, int height, int width)
{
	return pd_engine_shape_ok(ctx, frames, height, width);
}

static void pd_serve_on_progress(void *ctx, const struct pd_progress *p)
{
	struct pd_serve_clock *c = ctx;

	if (p->finished && p->phase != PD_PHASE_LOAD)
		c->engine_s += p->elapsed;
	if (c->srv && c->job && p->phase == PD_PHASE_DECODE)
		pd_serve_phase(c->srv, c->job, PD_JOB_DECODING, p->done, p->total);
}

static void pd_serve_log_line(void *ctx, const char *line)
{
	(void)ctx;
	pd_cli_progress_clear();
	fprintf(stderr, "%s\n", line);
}

/* Refuses FILE when it names a process still running (another server's):
 * a stale one (its process gone) is replaced. */
static int pd_pid_file_check(const char *file)
{
	FILE *f = fopen(file, "r");
	long pid = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%ld", &pid) == 1 && pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) == 0) {
		fclose(f);
		return pd_errorf("--pid-file %s: process %ld is running with it (another pdit serve?)", file, pid);
	}
	fclose(f);
	return 0;
}

/* FILE holds this process's pid, whole or not at all (written beside it,
 * then renamed). */
static int pd_pid_file_write(const char *file)
{
	char *tmp = pd_strfmt("%s.%ld.tmp", file, (long)getpid());
	FILE *f = tmp ? fopen(tmp, "w") : NULL;
	int bad;

	if (!f) {
		pd_errorf("--pid-file %s: %s", file, strerror(errno));
		free(tmp);
		return -1;
	}
	bad = fprintf(f, "%ld\n", (long)getpid()) < 0;
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, file)) {
		pd_errorf("--pid-file %s: %s", file, strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return 0;
}

int pd_cmd_serve(struct pd_comm *world, int argc, char **argv)
{
	struct pd_engine_options o;
	struct pd_cli_serve sv;
	struct pd_engine *e = NULL;
	struct pd_engine_about about;
	struct pd_serve *srv = NULL;
	struct pd_cli_progress prog;
	int hr, rc = 1, local, watching = 0, pid_written = 0;
	pthread_t watcher;
	struct pd_serve_watch watch = { 0 };
	struct pd_serve_clock clock = { 0 };

	/* a service manager's stop (SIGUSR1 through mpirun) from the start:
	 * one during loading stops before the first request */
	pd_cli_catch_stop_request();
	hr = pd_cli_serve_parse(world, argc, argv, &o, &sv);
	if (hr == 1)
		return 0;
	/* rank 0 listens: the port is its machine's (another rank's host may
	 * not have the address, or have the port taken) */
	if (!hr && world->rank == 0)
		hr = pd_serve_check_listen(sv.listen);
	if (!hr && world->rank == 0 && sv.pid_file)
		hr = pd_pid_file_check(sv.pid_file);
	if (!hr) {
		local = strncmp(sv.listen, "127.0.0.1:", 10) == 0 || strncmp(sv.listen, "localhost:", 10) == 0;
		if (!local && !sv.api_key)
			hr = pd_errorf("--listen %s: another address than 127.0.0.1 needs --api-key KEY (or PDIT_API_KEY)",
				       sv.listen);
	}
	pd_cli_progress_init(&prog, 0);
	if (pd_cli_any_failed(world, hr != 0))
		return 1;
	pd_cli_progress_init(&prog, world->rank == 0 && !sv.quiet);
	o.on_progress = pd_cli_progress_cb;
	o.progress_ctx = &prog;
	o.log = pd_cli_progress_log;
	o.log_ctx = &prog;
	if (pd_engine_open(&e, world, &o, NULL)) {
		if (e && pd_engine_dead(e))
			pd_cli_abort(world);
		pd_cli_report(world);
		goto out;
	}
	pd_cli_progress_end(&prog);
	pd_cli_progress_init(&prog, 0);
	/* a request is logged as it comes and as it is answered (pd_serve_log):
	 * the engine's own lines only with -v */
	pd_engine_set_log_level(e, pd_log_level > 1 ? 2 : 0);
	pd_engine_set_progress(e, pd_serve_on_progress, &clock);
	/* from here a signal asks rank 0 to stop after the running request */
	pd_cli_signals_deferred();
	pd_engine_about(e, &about);
	hr = 0;
	if (world->rank == 0) {
		struct pd_serve_options so = {
			.listen = sv.listen, .api_key = sv.api_key, .queue_max = sv.queue, .body_max = sv.body_max,
			.strict = sv.strict, .io_timeout = sv.io_timeout, .model = sv.model, .mesh = about.mesh_short,
			.ranks = world->size, .log = pd_serve_log_line, .default_width = about.default_width,
			.default_height = about.default_height, .default_steps = about.default_steps,
			.default_frames = about.default_frames, .shape_ok = pd_serve_shape_ok, .shape_ctx = e,
		};

		hr = pd_serve_start(&srv, &so);
		watch.srv = srv;
		/* written once it answers: the file's presence says it is up */
		if (!hr && sv.pid_file) {
			hr = pd_pid_file_write(sv.pid_file);
			pid_written = !hr;
			watch.pid_file = pid_written ? sv.pid_file : NULL;
			/* a second signal's hard stop removes it too */
			pd_cli_signal_removes(watch.pid_file);
		}
	}
	if (pd_cli_any_failed(world, hr))
		goto out;
	if (srv && world->size > 1)
		watching = !pthread_create(&watcher, NULL, pd_serve_watcher, &watch);
	for (;;) {
		struct pd_serve_job *job = NULL;
		struct pd_serve_params p;
		struct pd_request rq;
		struct pd_result res = { 0 };
		const char *prompt;
		char *text = NULL;
		uint64_t len = 0;
		uint8_t *all = NULL, *init_png = NULL, *mask_png = NULL, *ref_png = NULL;
		size_t init_len = 0, mask_len = 0, ref_len = 0;
		int failed;
		double deadline;
		static const int no_cancel;
		struct pd_serve_step step;

		if (world->rank == 0) {
			while (!job && !pd_cli_interrupted())
				pd_serve_next(srv, &job, 0.2);
			text = job ? pd_serve_params_encode(&job->params) : NULL;
			if (job && !text) {
				pd_serve_finish(srv, job, PD_JOB_FAILED, 500,
						pd_serve_error_json("out of memory", "server_error", NULL), NULL, clock.engine_s);
				continue;
			}
			len = text ? strlen(text) + 1 : 0;
		}
		/* between requests the others wait as long as it takes: no
		 * deadline on this one */
		deadline = world->timeout_s;
		world->timeout_s = 0;
		hr = world->ops->bcast(world, &len, sizeof(len), 0);
		world->timeout_s = deadline;
		if (hr) {
			free(text);
			goto dead;
		}
		if (len == 0)
			break;          /* rank 0 stops: every rank ends */
		if (world->rank != 0 && !(text = pd_malloc(len, "a job")))
			goto dead;
		if (world->ops->bcast(world, text, len, 0)) {
			free(text);
			goto dead;
		}
		hr = pd_serve_params_decode(&p, text);
		free(text);
		/* A1111's cfg_scale above 1 on FLUX is true CFG with the negative
		 * prompt, the empty one when none is given (as stable-diffusion.cpp
		 * and Forge run it) */
		if (!hr && p.cfg_scale > 1 && !about.guidance_is_cfg && !p.negative && !(p.negative = pd_strdup("")))
			hr = -1;
		/* the pictures in, from the job's text (every process decodes them;
		 * rank 0 checked them when the request came) */
		if (!hr && p.init_png && pd_unbase64(p.init_png, &init_png, &init_len))
			hr = -1;
		if (!hr && p.mask_png && pd_unbase64(p.mask_png, &mask_png, &mask_len))
			hr = -1;
		if (!hr && p.ref_png && pd_unbase64(p.ref_png, &ref_png, &ref_len))
			hr = -1;
		if (pd_cli_any_failed(world, hr)) {
			free(init_png);
			free(mask_png);
			free(ref_png);
			goto out;
		}
		prompt = p.prompt;
		pd_serve_request(&about, &p, &prompt, &rq);
		rq.init_png = init_png;
		rq.init_png_len = init_len;
		rq.mask_png = mask_png;
		rq.mask_png_len = mask_len;
		rq.mask_alpha = p.mask_alpha;
		rq.ref_png = ref_png;
		rq.ref_png_len = ref_len;
		/* every rank takes part in the cancel's agreement; rank 0's flag
		 * is the job's (DELETE sets it) */
		rq.cancel = job ? &job->cancel : &no_cancel;
		if (job) {
			step.srv = srv;
			step.job = job;
			rq.on_step = pd_serve_on_step;
			rq.step_ctx = &step;
		}
		clock.engine_s = 0;
		clock.srv = srv;
		clock.job = job;
		failed = pd_engine_run(e, &rq, &res);
		if (!failed && job && res.adapters_cached) {
			char line[96];

			snprintf(line, sizeof(line), "pdit: job %llu: its adapters' terms from the cache (--lora-cache)",
				 (unsigned long long)job->id);
			pd_serve_log_line(NULL, line);
		}
		if (!failed)
			failed = pd_serve_gather(world, &res, &all);
		/* a lost transfer in the gather loses the job as a dead engine does */
		if (failed == -2 || (failed && pd_engine_dead(e))) {
			if (job)
				pd_serve_finish(srv, job, PD_JOB_FAILED, 503,
						pd_serve_error_json(pd_last_error(), "server_error", NULL), NULL, clock.engine_s);
			pd_result_free(&res);
			pd_serve_params_free(&p);
			free(init_png);
			free(mask_png);
			free(ref_png);
			goto dead;
		}
		if (job && !failed && job->cancel) {
			/* a cancel during the decode (one collective over the group's
			 * bands) ends the job when the decode ends: nothing is sent */
			pd_errorf("cancelled during the decode");
			failed = 1;
		} else if (job && !failed && p.video) {
			pd_serve_phase(srv, job, PD_JOB_WRITING, (int)res.images, (int)res.images);
		}
		if (job) {
			uint8_t *mp4 = NULL;
			size_t mp4_len = 0;
			char *info = NULL, *body = failed ? NULL
						  : p.video ? pd_serve_video(&sv, &p, &res, all, &info, &mp4, &mp4_len)
							    : pd_serve_pngs(&sv, &p, &res, all, &info);

			if (mp4)
				pd_serve_attach_video(srv, job, mp4, mp4_len);
			/* a request that cannot run (or was cancelled) leaves the engine ready */
			if (failed && (pd_engine_cancelled(e) || job->cancel))
				pd_serve_finish(srv, job, PD_JOB_CANCELLED, 409,
						pd_serve_error_json(pd_last_error(), "cancelled", NULL), NULL, clock.engine_s);
			else if (failed) {
				/* the engine speaks the command line's flags; the client
				 * its fields */
				const char *param;
				char *msg = pd_serve_engine_error(p.api, pd_last_error(), &param);

				pd_serve_finish(srv, job, PD_JOB_FAILED, 400,
						pd_serve_error_json(msg ? msg : pd_last_error(), "invalid_request_error", param),
						NULL, clock.engine_s);
				free(msg);
			}
			else if (!body)
				pd_serve_finish(srv, job, PD_JOB_FAILED, 500,
						pd_serve_error_json(pd_last_error(), "server_error", NULL), info, clock.engine_s);
			else
				pd_serve_finish(srv, job, PD_JOB_DONE, 200, body, info, clock.engine_s);
		}
		free(all);
		free(init_png);
		free(mask_png);
		free(ref_png);
		pd_result_free(&res);
		pd_serve_params_free(&p);
	}
	rc = 0;
	goto out;
dead:
	if (watching) {
		watch.done = 1;
		pthread_join(watcher, NULL);
		watching = 0;
	}
	/* a lost process: every rank ends, the clients are told */
	if (srv)
		pd_serve_stop(srv, "a process of the job failed: the server is stopping");
	srv = NULL;
	if (pid_written)
		unlink(sv.pid_file);
	pd_cli_signal_removes(NULL);
	pid_written = 0;
	pd_cli_abort(world);
out:
	if (watching) {
		watch.done = 1;
		pthread_join(watcher, NULL);
	}
	if (srv) {
		pd_serve_log_line(NULL, "pdit: stopping: queued requests get 503");
		pd_serve_stop(srv, "the server is stopping");
	}
	if (pid_written)
		unlink(sv.pid_file);
	pd_cli_signal_removes(NULL);
	pd_engine_close(e);
	pd_cli_progress_end(&prog);
	return rc;
}
