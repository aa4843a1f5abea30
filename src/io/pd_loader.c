/*
 * pd_loader.c - named weights into backend objects.
 */
#include "pd_loader.h"
#include "pd_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Whether the slice S of W can stay in W's block format: the backend
 * keeps such weights and S cuts no block (a column slice not on block
 * boundaries is decoded for its shard instead). */
static int pd_linear_keeps_blocks(const struct pd_backend *be, const struct pd_st_tensor *w,
				  const struct pd_slice *s, enum pd_qtype *type, float *scale)
{
	const struct pd_qtype_info *q;

	if (!be->ops->linear_new_q || !pd_st_block_format(w, type, scale) || !(q = pd_quant_info(*type)) ||
	    (be->ops->keeps_q && !be->ops->keeps_q(be, *type)))
		return 0;
	return s->c0 % q->block_size == 0 && s->nc % q->block_size == 0;
}

/* Reads the slice S of W (and of BIAS, when S asks for it) into host
 * memory and hands it to the backend, which converts it to its own layout,
 * or keeps its blocks (those of the file, or QUANTIZE's encoded here). */
static struct pd_linear *pd_linear_load(struct pd_backend *be, const struct pd_st_tensor *w,
					const struct pd_slice *s, const struct pd_st_tensor *bias, enum pd_qtype quantize)
{
	struct pd_linear *l = NULL;
	int64_t cols = s->nc;
	float *hw = NULL, *hb = NULL, scale;
	void *blocks = NULL;
	enum pd_qtype type;
	int keep = pd_linear_keeps_blocks(be, w, s, &type, &scale), encode;
	size_t n;

	if (bias && s->with_bias) {
		hb = pd_malloc((size_t)s->nr * sizeof(float), bias->name);
		if (!hb || pd_st_read_f32(bias, (size_t)s->r0, (size_t)s->nr, hb))
			goto out;
	}
	if (keep) {
		/* whole rows in file order are handed over from the mapping
		 * itself: no copy besides the backend's own */
		const void *direct = pd_st_blocks_at(w, s->r0, s->nr, s->c0, s->nc);

		if (!direct) {
			if (pd_mul_size((size_t)s->nr, pd_quant_row_bytes(pd_quant_info(type), cols), &n))
				goto out;
			blocks = pd_malloc(n ? n : 1, w->name);
			if (!blocks || pd_st_read_blocks(w, s->r0, s->nr, s->c0, s->nc, blocks))
				goto out;
			direct = blocks;
		}
		l = be->ops->linear_new_q(be, s->nr, cols, type, scale, direct, hb);
		goto made;
	}
	encode = quantize != PD_Q_F32 && be->ops->linear_new_q && pd_quant_encodes(quantize) &&
		 (!be->ops->keeps_q || be->ops->keeps_q(be, quantize)) &&
		 !pd_st_block_format(w, &type, &scale) && s->c0 % pd_quant_info(quantize)->block_size == 0 &&
		 cols % pd_quant_info(quantize)->block_size == 0;
	if (!encode) {
		/* F32 and BF16 weights go from the mapping into the backend's
		 * layout in one pass (its threads convert as they reorder) */
		int64_t ld;
		const void *plain = pd_st_plain_at(w, s->r0, s->nr, s->c0, s->nc, &ld);

		if (plain) {
			l = be->ops->linear_new(be, s->nr, cols, plain, w->dtype, ld, hb);
			goto made;
		}
	}
	if (pd_mul_size((size_t)s->nr, (size_t)cols, &n))
		goto out;
	hw = pd_malloc(n * sizeof(float), w->name);
	if (!hw)
		goto out;
	if (pd_st_read_block_f32(w, s->r0, s->nr, s->c0, s->nc, hw, cols))
		goto out;
	if (encode) {
		/* pdit --quantize: a plain weight encoded as pdit quantize
		 * encodes it (BF16 as it is, other floats through F16, as
		 * ComfyUI-GGUF's convert.py), then kept; weights a file
		 * already holds in blocks are never quantized twice */
		const struct pd_qtype_info *q = pd_quant_info(quantize);

		if (pd_mul_size((size_t)s->nr, pd_quant_row_bytes(q, cols), &n))
			goto out;
		blocks = pd_malloc(n ? n : 1, w->name);
		if (!blocks)
			goto out;
		pd_quant_encode_rows(quantize, w->dtype == PD_BF16 ? PD_Q_BF16 : PD_Q_F16, hw, s->nr, cols, blocks);
		l = be->ops->linear_new_q(be, s->nr, cols, quantize, 1.0f, blocks, hb);
		goto made;
	}
	l = be->ops->linear_new(be, s->nr, cols, hw, PD_F32, cols, hb);
made:
	if (!l)
		pd_errorf("cannot prepare weight '%s': %s", w->name, be->error);
	else
		pd_st_release(w);
out:
	free(blocks);
	free(hw);
	free(hb);
	return l;
}

static struct pd_linear *pd_loader_linear_v(struct pd_loader *ld, int64_t n_out, int64_t n_in,
					    const struct pd_slice *s, const char *fmt, va_list ap)
{
	char base[256], name[300];
	const struct pd_st_tensor *w, *b = NULL;
	int64_t ws[2] = { n_out, n_in }, bs[1] = { n_out };
	struct pd_linear *l;

	if (ld->failed)
		return NULL;
	vsnprintf(base, sizeof(base), fmt, ap);
	snprintf(name, sizeof(name), "%s.weight", base);
	if (pd_st_require(ld->st, name, 2, ws, &w))
		goto fail;
	snprintf(name, sizeof(name), "%s.bias", base);
	if (s->with_bias && pd_st_require(ld->st, name, 1, bs, &b))
		goto fail;
	l = pd_linear_load(ld->be, w, s, b, ld->quantize);
	if (!l)
		goto fail;
	if (ld->each_linear && ld->each_linear(ld->each_ctx, ld->be, l, base, s)) {
		ld->be->ops->linear_free(ld->be, l);
		goto fail;
	}
	return l;
fail:
	ld->failed = 1;
	return NULL;
}

struct pd_linear *pd_loader_linear(struct pd_loader *ld, int64_t n_out, int64_t n_in, const char *fmt, ...)
{
	struct pd_slice s = pd_slice_all(n_out, n_in);
	struct pd_linear *l;
	va_list ap;

	va_start(ap, fmt);
	l = pd_loader_linear_v(ld, n_out, n_in, &s, fmt, ap);
	va_end(ap);
	return l;
}

struct pd_linear *pd_loader_linear_nobias(struct pd_loader *ld, int64_t n_out, int64_t n_in, const char *fmt, ...)
{
	struct pd_slice s = pd_slice_all(n_out, n_in);
	struct pd_linear *l;
	va_list ap;

	s.with_bias = 0;
	va_start(ap, fmt);
	l = pd_loader_linear_v(ld, n_out, n_in, &s, fmt, ap);
	va_end(ap);
	return l;
}

struct pd_linear *pd_loader_linear_slice(struct pd_loader *ld, int64_t n_out, int64_t n_in, const struct pd_slice *s,
					 const char *fmt, ...)
{
	struct pd_linear *l;
	va_list ap;

	va_start(ap, fmt);
	l = pd_loader_linear_v(ld, n_out, n_in, s, fmt, ap);
	va_end(ap);
	return l;
}

/* Reads a float tensor of exactly SHAPE into a new host buffer. */
static float *pd_loader_host(struct pd_loader *ld, const char *name, int ndim, const int64_t *shape,
			     const struct pd_st_tensor **out)
{
	const struct pd_st_tensor *t;
	float *host;

	if (pd_st_require(ld->st, name, ndim, shape, &t))
		return NULL;
	host = pd_malloc((size_t)t->numel * sizeof(float), name);
	if (host && pd_st_read_f32(t, 0, (size_t)t->numel, host)) {
		free(host);
		return NULL;
	}
	if (out)
		*out = t;
	return host;
}

float *pd_loader_host_tensor(struct pd_loader *ld, const char *name, int ndim, const int64_t *shape)
{
	float *h = ld->failed ? NULL : pd_loader_host(ld, name, ndim, shape, NULL);

	if (!h)
		ld->failed = 1;
	return h;
}

static float *pd_loader_vector_v(struct pd_loader *ld, int64_t total, int64_t off, int64_t n, const char *fmt,
				 va_list ap)
{
	char name[300];
	float *host, *dev = NULL;

	if (ld->failed)
		return NULL;
	vsnprintf(name, sizeof(name), fmt, ap);
	host = pd_loader_host(ld, name, 1, &total, NULL);
	if (host) {
		dev = pd_backend_alloc(ld->be, (size_t)n, name);
		if (dev)
			ld->be->ops->upload(ld->be, dev, host + off, (size_t)n);
		else
			pd_backend_check(ld->be);
		free(host);
	}
	if (!dev)
		ld->failed = 1;
	return dev;
}

float *pd_loader_vector(struct pd_loader *ld, int64_t n, const char *fmt, ...)
{
	va_list ap;
	float *dev;

	va_start(ap, fmt);
	dev = pd_loader_vector_v(ld, n, 0, n, fmt, ap);
	va_end(ap);
	return dev;
}

float *pd_loader_vector_part(struct pd_loader *ld, int64_t total, int64_t off, int64_t n, const char *fmt, ...)
{
	va_list ap;
	float *dev;

	va_start(ap, fmt);
	dev = pd_loader_vector_v(ld, total, off, n, fmt, ap);
	va_end(ap);
	return dev;
}

int pd_loader_rows(struct pd_loader *ld, const char *name, int64_t rows, int64_t cols, const int64_t *ids, int n,
		   float *dst)
{
	const struct pd_st_tensor *t;
	int64_t shape[2] = { rows, cols };

	if (ld->failed)
		return -1;
	if (pd_st_require(ld->st, name, 2, shape, &t))
		goto fail;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= rows) {
			pd_errorf("%s: token id %lld is outside %s's %lld rows", ld->st->path, (long long)ids[i], name,
				  (long long)rows);
			goto fail;
		}
		if (pd_st_read_block_f32(t, ids[i], 1, 0, cols, dst + (int64_t)i * cols, cols))
			goto fail;
	}
	return 0;
fail:
	ld->failed = 1;
	return -1;
}

struct pd_conv *pd_loader_conv(struct pd_loader *ld, int c_out, int c_in, int k, const char *fmt, ...)
{
	char base[256], name[300];
	int64_t ws[4] = { c_out, c_in, k, k }, bs[1] = { c_out };
	const struct pd_st_tensor *wt = NULL;
	float *w = NULL, *b = NULL;
	struct pd_conv *c = NULL;
	va_list ap;

	if (ld->failed)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(base, sizeof(base), fmt, ap);
	va_end(ap);
	snprintf(name, sizeof(name), "%s.weight", base);
	w = pd_loader_host(ld, name, 4, ws, &wt);
	snprintf(name, sizeof(name), "%s.bias", base);
	if (w)
		b = pd_loader_host(ld, name, 1, bs, NULL);
	if (b) {
		c = ld->be->ops->conv_new(ld->be, c_out, c_in, k, w, b);
		if (!c)
			pd_errorf("cannot prepare convolution '%s': %s", base, ld->be->error);
		else
			pd_st_release(wt);
	}
	free(w);
	free(b);
	if (!c)
		ld->failed = 1;
	return c;
}
