/*
 * pd_engine_bench.c - pdit bench's measurements: denoising steps timed one
 * by one on every process (their traffic, waits and allocations counted
 * between them), the product rate at the model's widest shape for the
 * ratio, and one VAE decode with its own rate.
 */
#include "pd_engine.h"
#include "pd_backend_rate.h"
#include "pd_backend_timed.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* Bytes this rank has sent through every communicator of the mesh, and
 * the seconds it has waited in them. */
static void pd_mesh_traffic(const struct pd_mesh *m, uint64_t *bytes, double *wait)
{
	const struct pd_comm *all[PD_AXIS_COUNT + 3] = { m->world, m->sp, m->model };

	for (int x = 0; x < PD_AXIS_COUNT; x++)
		all[3 + x] = m->axis[x];
	*bytes = 0;
	*wait = 0;
	for (int i = 0; i < PD_AXIS_COUNT + 3; i++) {
		*bytes += all[i]->bytes_sent;
		*wait += all[i]->wait_s;
	}
}

struct pd_bench_clock {
	const struct pd_mesh *mesh;     /* whose traffic is counted */
	double *t;                      /* time at the end of each step */
	uint64_t *bytes;                /* bytes sent by then */
	double *wait;                   /* seconds waited in transfers by then */
	double t0;                      /* start of the first step */
	uint64_t b0;                    /* bytes sent before it */
	double w0;                      /* seconds waited before it */
	struct pd_backend *be;          /* whose allocations are counted */
	uint64_t *allocs;               /* its allocation count by the end of each step */
	int warmup;                     /* untimed steps: a timed backend's table starts after them */
};

static int pd_bench_on_step(void *ctx, int step)
{
	struct pd_bench_clock *c = ctx;

	c->t[step] = pd_now();
	pd_mesh_traffic(c->mesh, &c->bytes[step], &c->wait[step]);
	c->allocs[step] = c->be->allocations;
	if (step == c->warmup - 1)
		pd_backend_timed_reset(c->be);
	return 0;
}

/* Times one decode of the latents ALL (the first picture): on this process
 * alone, or in bands over BANDS (every rank calls; too few latent rows for
 * all of them: rank 0 alone decodes); *FLOP: the products' operations, over
 * every band; *N_BANDS: the bands. The transformer's memory goes first, as
 * in generate. */
static int pd_bench_vae(struct pd_engine *e, struct pd_comm *bands, const float *all, double *seconds, double *flop,
			int *n_bands)
{
	struct pd_vae_par par = { 0 };
	struct pd_vae_hooks hooks = pd_vae_whole;
	uint8_t *rgb = NULL;
	double t0, f0, active;
	int f, rc = -1;

	pd_engine_free_transformer(e);
	if (pd_engine_vae_load(e))
		goto out;
	f = pd_engine_vae_scale(e);
	if (bands && pd_vae_par_hooks(&par, bands, e->be, e->ls.h, &hooks))
		goto out;
	pd_engine_vae_hooks(e, &hooks);
	/* a video's frames, one after the other */
	rgb = pd_malloc((size_t)e->ls.h * f * e->ls.w * f * 3 * (size_t)e->p.frames, "pictures");
	if (!rgb || (bands && bands->ops->barrier(bands)))
		goto out;
	t0 = pd_now();
	f0 = e->be->flop;
	/* a rank without a band waits in the collectives below */
	active = hooks.bands > 0;
	if (active && pd_engine_vae_decode(e, all, rgb))
		goto out;
	*seconds = pd_now() - t0;
	*flop = e->be->flop - f0;
	if (bands && (bands->ops->allreduce(bands, seconds, 1, PD_COMM_F64, PD_COMM_MAX) ||
		      bands->ops->allreduce(bands, flop, 1, PD_COMM_F64, PD_COMM_SUM) ||
		      bands->ops->allreduce(bands, &active, 1, PD_COMM_F64, PD_COMM_SUM)))
		goto out;
	*n_bands = (int)active;
	rc = 0;
out:
	/* the hooks' context is gone with this call */
	pd_engine_vae_hooks(e, NULL);
	free(rgb);
	pd_vae_par_free(&par);
	return rc;
}

/* A timed backend's table, per step over TIMED steps, into REP (nothing
 * where BE is not timed). */
static int pd_bench_ops(struct pd_backend *be, int timed, struct pd_bench_report *rep)
{
	struct pd_op_time row[64];
	int n = pd_backend_timed_rows(be, row, 64);

	if (n <= 0)
		return 0;
	rep->ops = pd_calloc((size_t)n, sizeof(*rep->ops), "bench");
	if (!rep->ops)
		return -1;
	for (int i = 0; i < n; i++) {
		struct pd_bench_op *o = &rep->ops[i];

		_Static_assert(sizeof(o->name) == sizeof(row[i].name), "the same names");
		memcpy(o->name, row[i].name, sizeof(o->name));
		o->calls = (double)row[i].calls / timed;
		o->seconds = row[i].seconds / timed;
		o->gflop = row[i].flop / 1e9 / timed;
	}
	rep->n_ops = n;
	return 0;
}

static int pd_engine_bench_scoped(struct pd_engine *e, const struct pd_request *rq, int warmup, int vae, int banded,
				  struct pd_bench_report *rep)
{
	struct pd_comm *world = e->world;
	struct pd_bench_clock clk = { 0 };
	struct pd_dit_flops fl;
	float *all = NULL;
	double *dt = NULL, sps;
	uint64_t bytes_step, bytes_max, allocs_late;
	int total, timed, rc = -1;

	if (e->dead)
		return pd_errorf("the engine stopped after a failure of rank %d; close it", e->world->failed_rank);
	if (!e->m)
		return pd_errorf("this engine has no transformer left to time (a bench or a decode freed it)");
	if (pd_engine_ready(e, rq))
		return -1;
	total = e->p.steps;
	timed = total - warmup;
	if (warmup < 1 || timed < 1)
		return pd_engine_agree(e, pd_errorf("bench needs at least one untimed and one timed step (got %d of %d "
						    "untimed)", warmup, total));
	all = pd_malloc((size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels) * sizeof(float), "latents");
	clk.t = pd_calloc((size_t)total, sizeof(double), "bench");
	clk.bytes = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.allocs = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.wait = pd_calloc((size_t)total, sizeof(double), "bench");
	rep->rank = pd_calloc((size_t)world->size, sizeof(*rep->rank), "bench");
	dt = pd_calloc((size_t)total, sizeof(double), "bench");
	if (pd_engine_agree(e, !all || !clk.t || !clk.bytes || !clk.wait || !clk.allocs || !rep->rank || !dt))
		goto out;
	rep->ranks = world->size;
	/* the reference rate first, on rank 0 alone, at the widest product:
	 * one image's tokens through the first MLP layer */
	if (world->rank == 0)
		rep->matmul_gflops = pd_backend_rate_matmul(e->be, e->e.txt_len + e->ls.tokens, e->info.dim,
							    e->info.mlp_width);
	if (world->size > 1)
		world->ops->barrier(world);
	pd_engine_notes(e, rq);
	/* the reference product's buffers are gone: the estimate counts the steps' */
	e->be->work_peak = e->be->work_bytes;
	clk.mesh = &e->mesh;
	clk.be = e->be;
	clk.warmup = warmup;
	e->par.runner.on_step = pd_bench_on_step;
	e->par.runner.step_ctx = &clk;
	clk.t0 = pd_now();
	pd_mesh_traffic(&e->mesh, &clk.b0, &clk.w0);
	rc = pd_engine_denoise(e, all, NULL);
	e->par.runner.on_step = NULL;
	e->requests++;
	if (rc)
		goto out;
	rc = -1;
	rep->steps_seconds = pd_now() - clk.t0;
	for (int i = warmup; i < total; i++)
		dt[i - warmup] = clk.t[i] - (i ? clk.t[i - 1] : clk.t0);
	sps = pd_median_sort(dt, timed);
	bytes_step = (clk.bytes[total - 1] - clk.bytes[warmup - 1]) / (uint64_t)timed;
	bytes_max = bytes_step;
	allocs_late = clk.allocs[total - 1] - clk.allocs[warmup - 1];
	{
		struct pd_bench_rank mine = {
			.rss_mb = pd_peak_rss_mb(),
			.weights_mb = (double)e->be->weight_bytes / 1048576.0,
			.work_mb = (double)e->be->work_peak / 1048576.0,
			.wait_s = (clk.wait[total - 1] - clk.wait[warmup - 1]) / timed,
			.load_s = e->load_seconds,
		};

		if (world->size > 1) {
			if (pd_comm_allgather(world, &mine, sizeof(mine), rep->rank) ||
			    world->ops->allreduce(world, &sps, 1, PD_COMM_F64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &bytes_max, 1, PD_COMM_I64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &allocs_late, 1, PD_COMM_I64, PD_COMM_MAX)) {
				e->dead = 1;
				goto out;
			}
		} else {
			rep->rank[0] = mine;
		}
	}
	/* the steps' operations, before the decode runs through the same backend */
	if (pd_bench_ops(e->be, timed, rep))
		goto out;
	rep->vae_seconds = -1;
	rep->vae_bands = 1;
	if (vae && e->mp.vae) {
		/* the VAE's reference: its middle convolutions' product as a
		 * matrix product (128² pixels x 512 x 9 inputs x 512 outputs at
		 * 1024²), in the products' precision */
		if (world->rank == 0)
			rep->vae_matmul_gflops = pd_backend_rate_matmul(e->be, 8192, 4608, 512);
		if ((banded || world->rank == 0) &&
		    pd_bench_vae(e, banded ? world : NULL, all, &rep->vae_seconds, &rep->vae_gflop, &rep->vae_bands)) {
			/* a band that failed leaves the others in its collectives */
			e->dead = 1;
			goto out;
		}
		rep->vae_gflop /= 1e9;
	}
	fl = pd_dit_count_flops(&e->info, e->e.txt_len, e->ls.tokens);
	rep->branches = pd_gen_uses_cfg(&e->p, &e->e) ? 2 : 1;
	rep->step_gflop = (fl.linear + fl.attention) * (double)e->e.batch * rep->branches / 1e9;
	rep->txt_len = e->e.txt_len;
	rep->img_len = e->ls.tokens;
	rep->images = e->e.batch;
	rep->dim = e->info.dim;
	rep->mlp_width = e->info.mlp_width;
	rep->timed = timed;
	rep->warmup = warmup;
	rep->seconds_per_step = sps;
	rep->bytes_max = bytes_max;
	rep->bytes_rank0 = bytes_step;
	rep->allocations = allocs_late;
	rc = 0;
out:
	free(all);
	free(clk.t);
	free(clk.bytes);
	free(clk.wait);
	free(clk.allocs);
	free(dt);
	return rc;
}

int pd_engine_bench(struct pd_engine *e, const struct pd_request *rq, int warmup, int vae, int banded,
		    struct pd_bench_report *rep)
{
	struct pd_engine_scope scope;
	int rc;

	memset(rep, 0, sizeof(*rep));
	pd_engine_enter(e, &scope);
	rc = pd_engine_bench_scoped(e, rq, warmup, vae, banded, rep);
	pd_engine_leave(&scope);
	if (rc)
		pd_bench_report_free(rep);
	return rc;
}

void pd_bench_report_free(struct pd_bench_report *rep)
{
	free(rep->rank);
	free(rep->ops);
	memset(rep, 0, sizeof(*rep));
}
