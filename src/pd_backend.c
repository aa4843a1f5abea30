/*
 * pd_backend.c - backend-independent helpers: sticky errors, loading weights.
 */
#include "pd_backend.h"
#include "pd_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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

struct pd_slice pd_slice_all(int64_t n_out, int64_t n_in)
{
	struct pd_slice s = { 0, n_out, 0, n_in, 1 };

	return s;
}

struct pd_linear *pd_linear_load(struct pd_backend *be, const struct pd_st_tensor *w, const struct pd_slice *s,
				 const struct pd_st_tensor *bias)
{
	struct pd_linear *l = NULL;
	int64_t cols = s->nc;
	float *hw = NULL, *hb = NULL;
	size_t n;

	if (pd_mul_size((size_t)s->nr, (size_t)cols, &n))
		return NULL;
	hw = pd_malloc(n * sizeof(float), w->name);
	if (!hw)
		return NULL;
	if (pd_st_read_block_f32(w, s->r0, s->nr, s->c0, s->nc, hw, cols))
		goto out;
	if (bias && s->with_bias) {
		hb = pd_malloc((size_t)s->nr * sizeof(float), bias->name);
		if (!hb || pd_st_read_f32(bias, (size_t)s->r0, (size_t)s->nr, hb))
			goto out;
	}
	l = be->ops->linear_new(be, s->nr, cols, hw, cols, hb);
	if (!l)
		pd_errorf("cannot prepare weight '%s': %s", w->name, be->error);
	else
		pd_st_release(w);
out:
	free(hw);
	free(hb);
	return l;
}
