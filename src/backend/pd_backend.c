/*
 * pd_backend.c - backend-independent helpers: sticky errors, buffers, adapters.
 */
#include "pd_backend.h"
#include "pd_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_backend_fail(struct pd_backend *be, const char *fmt, ...)
{
	va_list ap;

	if (be->failed)
		return;
	be->failed = 1;
	va_start(ap, fmt);
	vsnprintf(be->error, sizeof(be->error), fmt, ap);
	va_end(ap);
}

int pd_backend_check(struct pd_backend *be)
{
	if (!be->failed)
		return 0;
	return pd_errorf("%s", be->error);
}

float *pd_backend_alloc(struct pd_backend *be, size_t n, const char *what)
{
	float *p;

	if (be->failed)
		return NULL;
	p = be->ops->alloc(be, n);
	if (!p)
		pd_backend_fail(be, "out of memory (%zu MB for %s)", n * sizeof(float) >> 20, what);
	return p;
}

int pd_backend_grow(struct pd_backend *be, float **buf, size_t *cap, size_t n, const char *what)
{
	float *p;

	if (n <= *cap && *buf)
		return 0;
	p = pd_backend_alloc(be, n, what);
	if (!p)
		return pd_errorf("%s", be->error);
	pd_backend_release(be, *buf);
	*buf = p;
	*cap = n;
	return 0;
}

float *pd_backend_zeros(struct pd_backend *be, size_t n, const char *what)
{
	float *p = pd_backend_alloc(be, n, what);

	if (!p) {
		pd_errorf("%s", be->error);
		return NULL;
	}
	be->ops->fill(be, p, 0.0f, n);
	return p;
}

struct pd_backend *pd_backend_wrap_in(struct pd_backend *outer, struct pd_backend *inner)
{
	/* a recovered wrapper recovers what it wraps too */
	if (!outer->failed && inner->failed)
		pd_backend_recover(inner);
	inner->compute = outer->compute;
	inner->conv_compute = outer->conv_compute;
	inner->threads = outer->threads;
	inner->qproducts = outer->qproducts;
	return inner;
}

void pd_backend_wrap_back(struct pd_backend *outer, const struct pd_backend *inner)
{
	outer->conv_f32_fallbacks = inner->conv_f32_fallbacks;
	outer->weight_bytes = inner->weight_bytes;
	outer->work_bytes = inner->work_bytes;
	outer->work_peak = inner->work_peak;
	outer->flop = inner->flop;
	outer->allocations = inner->allocations;
	outer->int8_layers = inner->int8_layers;
	if (inner->failed && !outer->failed)
		pd_backend_fail(outer, "%s", inner->error);
}

struct pd_slice pd_slice_all(int64_t n_out, int64_t n_in)
{
	struct pd_slice s = { 0, n_out, 0, n_in, 1 };

	return s;
}

void pd_adapter_clear(struct pd_backend *be, struct pd_adapter *ad)
{
	if (ad->down)
		be->ops->linear_free(be, ad->down);
	if (ad->up)
		be->ops->linear_free(be, ad->up);
	memset(ad, 0, sizeof(*ad));
}

int pd_adapter_set(struct pd_backend *be, struct pd_adapter *ad, int64_t n_out, int64_t n_in, int64_t rank,
		   const float *a, const float *b)
{
	pd_adapter_clear(be, ad);
	if (rank <= 0 || be->failed)
		return be->failed ? -1 : 0;
	ad->down = be->ops->linear_new(be, rank, n_in, a, PD_F32, n_in, NULL);
	ad->up = ad->down ? be->ops->linear_new(be, n_out, rank, b, PD_F32, rank, NULL) : NULL;
	if (!ad->up) {
		pd_adapter_clear(be, ad);
		if (!be->failed)
			pd_backend_fail(be, "cannot prepare an adapter of rank %lld", (long long)rank);
		return -1;
	}
	ad->rank = rank;
	return 0;
}

int pd_adapter_term(struct pd_backend *be, const struct pd_adapter *ad, float **t, size_t *cap, const float *x,
		    int64_t ldx, int64_t rows, float *y, int64_t ldy, int flags)
{
	if (pd_backend_grow(be, t, cap, (size_t)(rows * ad->rank), "an adapter's products"))
		return flags;
	be->ops->linear(be, ad->down, x, ldx, rows, *t, ad->rank, PD_LIN_NO_BIAS);
	be->ops->linear(be, ad->up, *t, ad->rank, rows, y, ldy, PD_LIN_NO_BIAS | (flags & PD_LIN_ACCUMULATE));
	return flags | PD_LIN_ACCUMULATE;
}
