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

struct pd_linear *pd_linear_load(struct pd_backend *be, const struct pd_st_tensor *w, int64_t r0, int64_t nr,
				 int64_t c0, int64_t nc, const struct pd_st_tensor *bias)
{
	struct pd_linear *l = NULL;
	float *hw = NULL, *hb = NULL;
	size_t n;

	if (pd_mul_size((size_t)nr, (size_t)nc, &n))
		return NULL;
	hw = pd_malloc(n * sizeof(float), w->name);
	if (!hw)
		return NULL;
	if (pd_st_read_block_f32(w, r0, nr, c0, nc, hw, nc))
		goto out;
	if (bias) {
		hb = pd_malloc((size_t)nr * sizeof(float), bias->name);
		if (!hb || pd_st_read_f32(bias, (size_t)r0, (size_t)nr, hb))
			goto out;
	}
	l = be->ops->linear_new(be, nr, nc, hw, nc, hb);
	if (!l)
		pd_errorf("cannot prepare weight '%s': %s", w->name, be->error);
	else
		pd_st_release(w);
out:
	free(hw);
	free(hb);
	return l;
}
