/*
 * test_engine.c - one engine, many requests (run on 1 process, or under
 * mpirun with "ulysses" or "pipefusion" on 2):
 *
 *   - four different requests in a row (sizes, seeds, prompts, a batch, true
 *     CFG on and off, First Block Cache) each give the pictures and latents,
 *     byte for byte, of a fresh engine opened for that request alone (what
 *     `pdit generate` does: cli_golden and cli_parallel check that path);
 *   - bad requests in between (a size, a missing negative prompt, an
 *     unreadable file) return their error on every rank and the next
 *     request succeeds;
 *   - ten more runs of a request leave the peak memory within 2% of its
 *     peak after one (in the sanitizer build, whose quarantine holds freed
 *     memory, LeakSanitizer's check at exit stands in for it).
 *
 *   test_engine [ulysses|pipefusion]
 */
#include "pd_engine.h"
#include "pd_test.h"
#include "pd_tiny.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fox[] = { "a red fox in the snow" };

/* The step callback: how often, and the steps it was told. */
struct steps_seen {
	int calls, last, total;
};

static void on_step(void *ctx, int step, int steps)
{
	struct steps_seen *s = ctx;

	s->calls++;
	s->last = step;
	s->total = steps;
}
static const char *two[] = { "a lighthouse at dusk", "three green apples" };

static void options(struct pd_engine_options *o, const char *dir, const char *mesh, int world)
{
	pd_engine_options_init(o);
	o->model = dir;
	o->threads = 1;
	pd_log_level = 0;
	if (mesh && strcmp(mesh, "ulysses") == 0)
		o->ulysses = world;
	if (mesh && strcmp(mesh, "pipefusion") == 0)
		o->pp = world;
}

/* The four requests, different in every way a request can be. */
static void request(struct pd_request *rq, int k)
{
	pd_request_init(rq);
	rq->want_latents = 1;
	rq->prompts = fox;
	rq->n_prompts = 1;
	switch (k) {
	case 0:
		rq->height = 64, rq->width = 96, rq->steps = 3, rq->seed = 1;
		break;
	case 1:
		rq->height = 96, rq->width = 64, rq->steps = 2, rq->seed = 7;
		rq->negative = "blurry";
		rq->true_cfg_scale = 3.0f;
		break;
	case 2:
		rq->prompts = two;
		rq->n_prompts = 2;
		rq->height = 64, rq->width = 64, rq->steps = 2, rq->seed = 3, rq->guidance = 5.0f;
		break;
	default:
		rq->height = 48, rq->width = 80, rq->steps = 4, rq->seed = 11;
		rq->max_seq = 32;
		rq->fbcache_threshold = 0.5f;
		rq->negative = "dark";
		rq->true_cfg_scale = 2.0f;
		break;
	}
}

/* A result equal to another, byte for byte: latents on every rank,
 * pictures where they are written. */
static int same(const struct pd_result *a, const struct pd_result *b)
{
	size_t n = (size_t)(a->images * a->tokens * a->channels);

	if (a->images != b->images || a->tokens != b->tokens || a->channels != b->channels ||
	    a->n_pictures != b->n_pictures || a->first_picture != b->first_picture || !a->latents || !b->latents)
		return 0;
	if (memcmp(a->latents, b->latents, n * sizeof(float)) || memcmp(a->init, b->init, n * sizeof(float)))
		return 0;
	if ((a->rgb != NULL) != (b->rgb != NULL))
		return 0;
	return !a->rgb || !memcmp(a->rgb, b->rgb, (size_t)(a->n_pictures * a->height * a->width * 3));
}

int main(int argc, char **argv)
{
	const char *mesh = argc > 1 ? argv[1] : NULL;
	struct pd_comm *world;
	struct pd_engine_options o;
	struct pd_engine *e = NULL;
	struct pd_result mine[4];
	struct pd_request rq, bad;
	char dir[64] = "/tmp/pdit-engine-XXXXXX";
	double peak1, peak10;
	int ok;

	if (pd_comm_world_init(&argc, &argv, &world))
		return 1;
	/* a model with text encoders, in the published layout */
	if (world->rank == 0) {
		struct pd_tiny_opts t;

		pd_tiny_defaults(&t);
		t.full = 1;
		PD_CHECK(mkdtemp(dir) && pd_tiny_write(dir, &t) == 0, "tiny model: %s", pd_last_error());
	}
	world->ops->bcast(world, dir, sizeof(dir), 0);
	options(&o, dir, mesh, world->size);

	PD_CHECK(pd_engine_open(&e, world, &o, NULL) == 0, "open: %s", pd_last_error());
	if (!e)
		return pd_test_finish(world, world->rank == 0 ? dir : NULL);
	for (int k = 0; k < 4; k++) {
		struct steps_seen seen = { 0, -1, 0 };

		request(&rq, k);
		rq.on_step = on_step;
		rq.step_ctx = &seen;
		PD_CHECK(pd_engine_run(e, &rq, &mine[k]) == 0, "request %d: %s", k, pd_last_error());
		PD_CHECK(seen.calls == rq.steps && seen.last == rq.steps - 1 && seen.total == rq.steps,
			 "request %d: %d step calls, last %d of %d, for %d steps", k, seen.calls, seen.last, seen.total,
			 rq.steps);
		rq.on_step = NULL;
		/* a bad request between two good ones */
		bad = rq;
		if (k == 0)
			bad.height = 65;
		else if (k == 1)
			bad.negative = NULL;
		else
			bad.init_latents = "/nonexistent/latents.safetensors";
		PD_CHECK(pd_engine_run(e, &bad, &(struct pd_result){ 0 }) == -1, "bad request %d accepted", k);
		PD_CHECK(strlen(pd_last_error()) > 0 && !pd_engine_dead(e), "bad request %d: no message or dead", k);
	}
	/* each as a fresh engine makes it */
	for (int k = 0; k < 4; k++) {
		struct pd_engine *f = NULL;
		struct pd_result theirs;

		request(&rq, k);
		PD_CHECK(pd_engine_open(&f, world, &o, &rq) == 0 && pd_engine_run(f, &rq, &theirs) == 0,
			 "fresh engine, request %d: %s", k, pd_last_error());
		PD_CHECK(same(&mine[k], &theirs), "request %d differs from a fresh engine's", k);
		pd_result_free(&theirs);
		pd_engine_close(f);
		pd_result_free(&mine[k]);
	}
	/* memory after one request and after ten more */
	request(&rq, 1);
	ok = pd_engine_run(e, &rq, &mine[0]) == 0;
	pd_result_free(&mine[0]);
	peak1 = pd_peak_rss_mb();
	for (int i = 0; i < 10 && ok; i++) {
		ok = pd_engine_run(e, &rq, &mine[0]) == 0;
		pd_result_free(&mine[0]);
	}
	peak10 = pd_peak_rss_mb();
	PD_CHECK(ok, "repeated requests: %s", pd_last_error());
#ifdef __SANITIZE_ADDRESS__
	/* AddressSanitizer keeps freed memory in quarantine, so the resident
	 * size grows without a leak; there its leak check is the test */
	(void)peak1;
	(void)peak10;
#else
	PD_CHECK(peak10 <= peak1 * 1.02, "peak memory %.1f MB after ten requests, %.1f MB after one", peak10, peak1);
#endif
	pd_engine_close(e);
	return pd_test_finish(world, world->rank == 0 ? dir : NULL);
}
