/*
 * pd_backend_rate.c - how fast this backend runs, timed now: what pdit
 * bench compares its steps with and what pdit plan predicts from.
 */
#include "pd_backend_rate.h"
#include "pd_quant.h"
#include "pd_rng.h"
#include "pd_util.h"

#include <stdlib.h>

/* row counts one timing may compare */
#define PD_RATE_MAX_ROWS 2

/* The products of layer L[k] on MS[k] rows of X (K wide) into Y (N wide)
 * for k < N: a warm-up each, then RUNS rounds of all of them interleaved
 * (a shared machine's drift reaches them alike; a device's queue drained
 * around each), seconds in T[k * RUNS + round]. */
static void pd_rate_interleaved(struct pd_backend *be, struct pd_linear *const *l, const int64_t *ms, int n,
				const float *x, int64_t K, float *y, int64_t N, int runs, double *t)
{
	for (int i = -1; i < runs; i++)
		for (int k = 0; k < n; k++) {
			double t0;

			pd_backend_sync(be);
			t0 = pd_now();
			be->ops->linear(be, l[k], x, K, ms[k], y, N, PD_LIN_NO_BIAS);
			pd_backend_sync(be);
			if (i >= 0)
				t[k * runs + i] = pd_now() - t0;
		}
}

/* Random inputs of M rows and K columns on the backend, and an output of M
 * x N: 0, or -1 with neither made. */
static int pd_rate_buffers(struct pd_backend *be, struct pd_rng *g, int64_t M, int64_t K, int64_t N, float **x,
			   float **y)
{
	/* random data: zeros would run faster than real inputs */
	float *h = pd_malloc((size_t)(M * K) * sizeof(float), "matmul");

	*x = h ? pd_backend_alloc(be, (size_t)(M * K), "matmul") : NULL;
	*y = *x ? pd_backend_alloc(be, (size_t)(M * N), "matmul") : NULL;
	if (*y) {
		pd_rng_randn(g, h, (size_t)(M * K));
		be->ops->upload(be, *x, h, (size_t)(M * K));
	} else if (*x) {
		be->ops->free(be, *x);
		*x = NULL;
	}
	free(h);
	return *y ? 0 : -1;
}

/* Median seconds of the product of each of the NM row counts in MS (0 where
 * it could not run), one weight made for all of them; the fastest of the
 * runs in LOW when not NULL. */
static void pd_rate_matmul_times(struct pd_backend *be, const int64_t *ms, int nm, int64_t K, int64_t N, double *sec,
				 double *low)
{
	int64_t M = 0;
	float *w, *x = NULL, *y = NULL;
	struct pd_linear *l[PD_RATE_MAX_ROWS] = { NULL };
	double t[7 * PD_RATE_MAX_ROWS];
	struct pd_rng g;

	if (nm > PD_RATE_MAX_ROWS)
		nm = PD_RATE_MAX_ROWS;
	for (int k = 0; k < nm; k++) {
		sec[k] = 0;
		M = ms[k] > M ? ms[k] : M;
	}
	w = pd_malloc((size_t)(N * K) * sizeof(float), "matmul");
	if (!w)
		return;
	pd_rng_seed(&g, 1);
	/* random data: zeros would run faster than real weights */
	pd_rng_randn(&g, w, (size_t)(N * K));
	l[0] = be->ops->linear_new(be, N, K, w, PD_F32, K, NULL);
	if (l[0] && !pd_rate_buffers(be, &g, M, K, N, &x, &y)) {
		for (int k = 1; k < nm; k++)
			l[k] = l[0];
		pd_rate_interleaved(be, l, ms, nm, x, K, y, N, 7, t);
		for (int k = 0; k < nm; k++) {
			sec[k] = be->failed ? 0 : pd_median_sort(t + k * 7, 7);
			if (low)
				low[k] = be->failed ? 0 : t[k * 7];
		}
	}
	if (x)
		be->ops->free(be, x);
	if (y)
		be->ops->free(be, y);
	be->ops->linear_free(be, l[0]);
	free(w);
}

double pd_backend_rate_matmul_weights(struct pd_backend *be, int64_t M, int64_t K, int64_t N, double *per_weight)
{
	int64_t ms[2] = { M, M / 8 > 0 ? M / 8 : 1 };
	double sec[2], low[2], b;

	*per_weight = 0;
	if (ms[1] >= M)
		return pd_backend_rate_matmul(be, M, K, N);
	pd_rate_matmul_times(be, ms, 2, K, N, sec, low);
	if (sec[0] <= 0)
		return 0;
	/* t(m) = m a + b from the two: b = (t1 - t0 m1 / m0) / (1 - m1 / m0),
	 * from the fastest runs (a difference of two timings: others only
	 * slow a run down, and a median's swing would be most of it) */
	b = (low[1] - low[0] * (double)ms[1] / (double)M) / (1.0 - (double)ms[1] / (double)M);
	*per_weight = low[1] > 0 && b > 0 ? b / ((double)K * (double)N) : 0;
	return 2.0 * (double)M * (double)K * (double)N / sec[0] / 1e9;
}

double pd_backend_rate_blocks(struct pd_backend *be, enum pd_qtype t, int64_t M, int64_t K, int64_t N)
{
	const struct pd_qtype_info *q = pd_quant_info(t);
	struct pd_linear *l[2] = { NULL, NULL };
	float *w = NULL, *x = NULL, *y = NULL;
	void *blocks = NULL;
	double sec[2 * 5], ratio = 0;
	int64_t ms[2] = { M, M };
	struct pd_rng g;

	if (!q || q->block_size < 1 || K % q->block_size || !pd_quant_encodes(t) || !be->ops->linear_new_q)
		return 0;
	w = pd_malloc((size_t)(N * K) * sizeof(float), "matmul");
	blocks = w ? pd_malloc(pd_quant_row_bytes(q, K) * (size_t)N, "matmul") : NULL;
	if (!blocks)
		goto out;
	pd_rng_seed(&g, 3);
	pd_rng_randn(&g, w, (size_t)(N * K));
	l[0] = be->ops->linear_new(be, N, K, w, PD_F32, K, NULL);
	pd_quant_encode_rows(t, PD_Q_F32, w, N, K, blocks);
	l[1] = be->ops->linear_new_q(be, N, K, t, 1.0f, blocks, NULL);
	if (!l[0] || !l[1] || pd_rate_buffers(be, &g, M, K, N, &x, &y))
		goto out;
	pd_rate_interleaved(be, l, ms, 2, x, K, y, N, 5, sec);
	if (!be->failed) {
		double plain = pd_median_sort(sec, 5), kept = pd_median_sort(sec + 5, 5);

		ratio = kept > 0 ? plain / kept : 0;
	}
out:
	if (x)
		be->ops->free(be, x);
	if (y)
		be->ops->free(be, y);
	for (int k = 0; k < 2; k++)
		if (l[k])
			be->ops->linear_free(be, l[k]);
	free(blocks);
	free(w);
	return ratio;
}

/* The compute rate of one matrix product of shape M x K x N (rows, inner,
 * outputs) on this backend: the median of several timed runs, GFLOP/s. */
double pd_backend_rate_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N)
{
	double sec;

	pd_rate_matmul_times(be, &M, 1, K, N, &sec, NULL);
	return sec > 0 ? 2.0 * (double)M * (double)K * (double)N / sec / 1e9 : 0;
}

/* The rate at which this backend streams ROWS x DIM rows through the
 * elementwise kernels every block repeats on each tensor-parallel shard (a
 * modulated LayerNorm, a gated residual add): bytes read and written per
 * second, the median of several timed runs. */
double pd_backend_rate_elementwise(struct pd_backend *be, int64_t rows, int64_t dim)
{
	size_t n = (size_t)(rows * dim), hn = n > (size_t)(2 * dim) ? n : (size_t)(2 * dim);
	/* the host copy also fills the two [dim] modulation vectors */
	float *h = pd_malloc(hn * sizeof(float), "elementwise"), *x = NULL, *y = NULL, *mod = NULL;
	double t[7], rate = 0;
	struct pd_rng g;

	if (!h)
		return 0;
	pd_rng_seed(&g, 2);
	pd_rng_randn(&g, h, hn);
	x = pd_backend_alloc(be, n, "elementwise");
	y = pd_backend_alloc(be, n, "elementwise");
	mod = pd_backend_alloc(be, (size_t)(2 * dim), "elementwise");
	if (x && y && mod) {
		be->ops->upload(be, x, h, n);
		be->ops->upload(be, y, h, n);
		be->ops->upload(be, mod, h, (size_t)(2 * dim));
		for (int i = -1; i < 7; i++) {	/* the first a warm-up */
			double t0;

			pd_backend_sync(be);
			t0 = pd_now();
			be->ops->layernorm_mod(be, y, dim, x, dim, rows, dim, mod, mod + dim, 1e-6f);
			be->ops->gated_add(be, x, dim, y, dim, rows, dim, mod);
			pd_backend_sync(be);
			if (i >= 0)
				t[i] = pd_now() - t0;
		}
		/* the norm reads x and writes y; the add reads both, writes x */
		rate = 5.0 * (double)n * sizeof(float) / pd_median_sort(t, 7);
	}
	if (x)
		be->ops->free(be, x);
	if (y)
		be->ops->free(be, y);
	if (mod)
		be->ops->free(be, mod);
	free(h);
	return be->failed ? 0 : rate;
}
