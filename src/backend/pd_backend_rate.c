/*
 * pd_backend_rate.c - how fast this backend runs, timed now: what pdit
 * bench compares its steps with and what pdit plan predicts from.
 */
#include "pd_backend_rate.h"
#include "pd_rng.h"
#include "pd_util.h"

#include <stdlib.h>

/* The compute rate of one matrix product of shape M x K x N (rows, inner,
 * outputs) on this backend: the median of several timed runs, GFLOP/s. */
double pd_backend_rate_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N)
{
	float *w = pd_malloc((size_t)(N * K) * sizeof(float), "matmul"), *x = NULL, *y = NULL;
	struct pd_linear *l = NULL;
	double t[7], rate = 0;
	struct pd_rng g;

	if (!w)
		return 0;
	pd_rng_seed(&g, 1);
	/* random data: zeros would run faster than real weights */
	pd_rng_randn(&g, w, (size_t)(N * K));
	l = be->ops->linear_new(be, N, K, w, PD_F32, K, NULL);
	x = pd_backend_alloc(be, (size_t)(M * K), "matmul");
	y = pd_backend_alloc(be, (size_t)(M * N), "matmul");
	if (l && x && y) {
		pd_rng_randn(&g, w, (size_t)(M * K) < (size_t)(N * K) ? (size_t)(M * K) : (size_t)(N * K));
		be->ops->upload(be, x, w, (size_t)(M * K) < (size_t)(N * K) ? (size_t)(M * K) : (size_t)(N * K));
		be->ops->linear(be, l, x, K, M, y, N, PD_LIN_NO_BIAS);	/* warm-up */
		for (int i = 0; i < 7; i++) {
			double t0 = pd_now();

			be->ops->linear(be, l, x, K, M, y, N, PD_LIN_NO_BIAS);
			t[i] = pd_now() - t0;
		}
		rate = 2.0 * (double)M * (double)K * (double)N / pd_median_sort(t, 7) / 1e9;
	}
	if (x)
		be->ops->free(be, x);
	if (y)
		be->ops->free(be, y);
	be->ops->linear_free(be, l);
	free(w);
	return be->failed ? 0 : rate;
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
			double t0 = pd_now();

			be->ops->layernorm_mod(be, y, dim, x, dim, rows, dim, mod, mod + dim, 1e-6f);
			be->ops->gated_add(be, x, dim, y, dim, rows, dim, mod);
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
