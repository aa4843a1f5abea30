/*
 * pd_backend_timed.c - a backend that runs another and times each of its
 * operations: a step's time split by operation and, for the products and
 * attention, by shape, so that each can be set against its own limit (the
 * product rate at that shape, the memory's speed) rather than the step's
 * as a whole. The wrapped backend computes; this one keeps a table. A
 * device's queue is waited for after each operation, so its times are the
 * operations' own (and the step slower than without the wrapper).
 */
#include "pd_backend_timed.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_TIMED_ROWS 128

/* What the wrapper knows of a layer: the product's shape is in the
 * wrapped backend's own struct, which it cannot read. */
struct pd_tm_layer {
	const struct pd_linear *l;      /* the wrapped backend's layer */
	int64_t n_out, n_in;            /* its weight's shape */
	const char *kind;               /* its weights' format, when kept in one ("q8_0", "fp8"); NULL: the
					 * products' precision */
};

struct pd_timed {
	struct pd_backend be;           /* the interface; must stay first */
	struct pd_backend_ops ops;      /* the wrapper's operations under the wrapped backend's name */
	struct pd_backend *in;          /* the backend that computes */
	struct pd_op_time row[PD_TIMED_ROWS];   /* the table; the last row takes what does not fit */
	int n_rows;                     /* rows in use */
	struct pd_tm_layer *layer;      /* the layers made through the wrapper */
	int n_layers, cap_layers;       /* in use and allocated */
};

#define TM(b) ((struct pd_timed *)(b))

/* Adds one call of NAME: SECONDS and FLOP. */
static void pd_tm_add(struct pd_timed *t, const char *name, double seconds, double flop)
{
	struct pd_op_time *r = NULL;

	for (int i = 0; i < t->n_rows && !r; i++)
		if (!strcmp(t->row[i].name, name))
			r = &t->row[i];
	if (!r && t->n_rows < PD_TIMED_ROWS - 1) {
		r = &t->row[t->n_rows++];
		snprintf(r->name, sizeof(r->name), "%s", name);
	} else if (!r) {
		r = &t->row[PD_TIMED_ROWS - 1];
		t->n_rows = PD_TIMED_ROWS;
		snprintf(r->name, sizeof(r->name), "(other)");
	}
	r->calls++;
	r->seconds += seconds;
	r->flop += flop;
}

/* Runs CALL on the wrapped backend C as BE, timed as NAME. */
#define TIMED(be, name, call)                                                                                      \
	do {                                                                                                       \
		struct pd_timed *t_ = TM(be);                                                                      \
		struct pd_backend *c = pd_backend_wrap_in(be, t_->in);                                             \
		double t0_ = pd_now(), f0_ = c->flop;                                                              \
		if (!be->failed) {                                                                                 \
			call;                                                                                      \
			pd_backend_sync(c);                                                                        \
		}                                                                                                  \
		pd_tm_add(t_, name, pd_now() - t0_, c->flop - f0_);                                                \
		pd_backend_wrap_back(be, c);                                                                       \
	} while (0)

/* Runs CALL on the wrapped backend C as BE, untimed. */
#define PASS(be, call)                                                                                             \
	do {                                                                                                       \
		struct pd_backend *c = pd_backend_wrap_in(be, TM(be)->in);                                         \
		call;                                                                                              \
		pd_backend_wrap_back(be, c);                                                                       \
	} while (0)

static void pd_tm_destroy(struct pd_backend *be)
{
	pd_backend_free(TM(be)->in);
	free(TM(be)->layer);
	free(be);
}

static int pd_tm_enter(struct pd_backend *be)
{
	return pd_backend_enter(pd_backend_wrap_in(be, TM(be)->in));
}

static void pd_tm_leave(struct pd_backend *be, int saved)
{
	pd_backend_leave(TM(be)->in, saved);
}

static float *pd_tm_alloc(struct pd_backend *be, size_t n)
{
	float *p = NULL;

	PASS(be, p = c->ops->alloc(c, n));
	return p;
}

static void pd_tm_free(struct pd_backend *be, float *p)
{
	PASS(be, c->ops->free(c, p));
}

static void pd_tm_upload(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	TIMED(be, "upload", c->ops->upload(c, dst, src, n));
}

static void pd_tm_download(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	TIMED(be, "download", c->ops->download(c, dst, src, n));
}

static void pd_tm_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
			 int64_t cols)
{
	TIMED(be, "copy2d", c->ops->copy2d(c, dst, ldd, src, lds, rows, cols));
}

/* Remembers L's shape (a failed layer, NULL, is not kept). */
static void pd_tm_keep(struct pd_backend *be, const struct pd_linear *l, int64_t n_out, int64_t n_in, const char *kind)
{
	struct pd_timed *t = TM(be);

	if (!l)
		return;
	if (t->n_layers == t->cap_layers) {
		int cap = t->cap_layers ? 2 * t->cap_layers : 64;
		struct pd_tm_layer *p = realloc(t->layer, (size_t)cap * sizeof(*p));

		/* without room the layer runs all the same, timed under "linear" */
		if (!p)
			return;
		t->layer = p;
		t->cap_layers = cap;
	}
	t->layer[t->n_layers++] = (struct pd_tm_layer){ l, n_out, n_in, kind };
}

static struct pd_linear *pd_tm_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
					  enum pd_dtype wt, int64_t ldw, const float *bias)
{
	struct pd_linear *l = NULL;

	PASS(be, l = c->ops->linear_new(c, n_out, n_in, w, wt, ldw, bias));
	pd_tm_keep(be, l, n_out, n_in, NULL);
	return l;
}

static struct pd_linear *pd_tm_linear_new_q(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype qt,
					    float scale, const void *blocks, const float *bias)
{
	const struct pd_qtype_info *q = pd_quant_info(qt);
	struct pd_linear *l = NULL;

	PASS(be, l = c->ops->linear_new_q(c, n_out, n_in, qt, scale, blocks, bias));
	pd_tm_keep(be, l, n_out, n_in, q ? q->name : "quantized");
	return l;
}

static int pd_tm_keeps_q(const struct pd_backend *be, enum pd_qtype qt)
{
	const struct pd_backend *in = TM(be)->in;

	return in->ops->keeps_q ? in->ops->keeps_q(in, qt) : 0;
}

static void pd_tm_linear_free(struct pd_backend *be, struct pd_linear *l)
{
	struct pd_timed *t = TM(be);

	for (int i = 0; i < t->n_layers; i++)
		if (t->layer[i].l == l) {
			t->layer[i] = t->layer[--t->n_layers];
			break;
		}
	PASS(be, c->ops->linear_free(c, l));
}

/* The term's products run inside the layer's time. */
static int pd_tm_linear_adapt(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a,
			      const float *b)
{
	int rc = -1;

	PASS(be, rc = c->ops->linear_adapt(c, l, rank, a, b));
	return rc;
}

static void pd_tm_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
			 float *y, int64_t ldy, int flags)
{
	const struct pd_timed *t = TM(be);
	char name[72] = "linear";

	for (int i = 0; i < t->n_layers; i++)
		if (t->layer[i].l == l) {
			const struct pd_tm_layer *k = &t->layer[i];

			snprintf(name, sizeof(name), "linear %lld x %lld -> %lld %s", (long long)rows, (long long)k->n_in,
				 (long long)k->n_out, k->kind ? k->kind : pd_dtype_name(be->compute));
			break;
		}
	TIMED(be, name, c->ops->linear(c, l, x, ldx, rows, y, ldy, flags));
}

static struct pd_conv *pd_tm_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				      const float *bias)
{
	struct pd_conv *cv = NULL;

	PASS(be, cv = c->ops->conv_new(c, c_out, c_in, k, w, bias));
	return cv;
}

static void pd_tm_conv_free(struct pd_backend *be, struct pd_conv *cv)
{
	PASS(be, c->ops->conv_free(c, cv));
}

static void pd_tm_conv(struct pd_backend *be, struct pd_conv *cv, const float *x, int h, int w, int halo, float *y)
{
	char name[72];

	snprintf(name, sizeof(name), "conv %d x %d", h, w);
	TIMED(be, name, c->ops->conv(c, cv, x, h, w, halo, y));
}

static void pd_tm_fill(struct pd_backend *be, float *y, float v, size_t n)
{
	TIMED(be, "fill", c->ops->fill(c, y, v, n));
}

static void pd_tm_silu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	TIMED(be, "silu", c->ops->silu(c, y, x, n));
}

static void pd_tm_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	TIMED(be, "quick_gelu", c->ops->quick_gelu(c, y, x, n));
}

static void pd_tm_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	TIMED(be, "mul", c->ops->mul(c, y, a, b, n));
}

static void pd_tm_add_op(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	TIMED(be, "add", c->ops->add(c, y, a, b, n));
}

static void pd_tm_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	TIMED(be, "sub", c->ops->sub(c, y, a, b, n));
}

static void pd_tm_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
				int64_t rows, int64_t dim, const float *scale, const float *shift, float eps)
{
	TIMED(be, "layernorm_mod", c->ops->layernorm_mod(c, y, ldy, x, ldx, rows, dim, scale, shift, eps));
}

static void pd_tm_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
			    int64_t dim, const float *w, const float *b, float eps)
{
	TIMED(be, "layernorm", c->ops->layernorm(c, y, ldy, x, ldx, rows, dim, w, b, eps));
}

static void pd_tm_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
				const float *w, float eps)
{
	TIMED(be, "rmsnorm_heads", c->ops->rmsnorm_heads(c, x, ldx, rows, heads, head_dim, w, eps));
}

static void pd_tm_row_sumsq(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows,
			    int64_t cols)
{
	TIMED(be, "row_sumsq", c->ops->row_sumsq(c, sumsq, x, ldx, rows, cols));
}

static void pd_tm_rms_apply(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols,
			    const float *sumsq, int64_t n, const float *w, float eps)
{
	TIMED(be, "rms_apply", c->ops->rms_apply(c, x, ldx, rows, cols, sumsq, n, w, eps));
}

static void pd_tm_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
		       const float *cos, const float *sin)
{
	TIMED(be, "rope", c->ops->rope(c, x, ldx, rows, heads, head_dim, cos, sin));
}

static void pd_tm_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows,
			    int64_t dim, const float *gate)
{
	TIMED(be, "gated_add", c->ops->gated_add(c, x, ldx, y, ldy, rows, dim, gate));
}

static void pd_tm_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q, int64_t ldq,
			    const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq, int64_t skv, int heads,
			    int head_dim, float scale)
{
	char name[72];

	snprintf(name, sizeof(name), "attention %lld x %lld, %d x %d", (long long)sq, (long long)skv, heads, head_dim);
	TIMED(be, name,
	      c->ops->attention(c, out, ldo, lse, q, ldq, k, ldk, v, ldv, sq, skv, heads, head_dim, scale));
}

static void pd_tm_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
				   const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
				   int head_dim, float scale, const float *bias, int causal)
{
	char name[72];

	snprintf(name, sizeof(name), "attention_masked %lld, %d x %d", (long long)s, heads, head_dim);
	TIMED(be, name,
	      c->ops->attention_masked(c, out, ldo, q, ldq, k, ldk, v, ldv, s, heads, head_dim, scale, bias, causal));
}

static void pd_tm_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
			    const float *plse, int64_t sq, int heads, int head_dim)
{
	TIMED(be, "lse_merge", c->ops->lse_merge(c, out, ldo, lse, part, ldp, plse, sq, heads, head_dim));
}

static void pd_tm_group_stats(struct pd_backend *be, const float *x, int ch, int64_t hw, int groups, double *stats)
{
	TIMED(be, "group_stats", c->ops->group_stats(c, x, ch, hw, groups, stats));
}

static void pd_tm_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int ch, int64_t hw,
			      int groups, const double *stats, double count, const float *gamma, const float *beta,
			      float eps, int silu)
{
	TIMED(be, "group_apply",
	      c->ops->group_apply(c, y, y_cstride, x, ch, hw, groups, stats, count, gamma, beta, eps, silu));
}

static void pd_tm_rms_channels(struct pd_backend *be, float *y, const float *x, int ch, int64_t hw, const float *gamma,
			       int silu)
{
	TIMED(be, "rms_channels", c->ops->rms_channels(c, y, x, ch, hw, gamma, silu));
}

static void pd_tm_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int ch, int h, int w)
{
	TIMED(be, "upsample2x", c->ops->upsample2x(c, y, y_cstride, x, ch, h, w));
}

static void pd_tm_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols)
{
	TIMED(be, "transpose", c->ops->transpose(c, y, x, rows, cols));
}

static void *pd_tm_pinned_alloc(struct pd_backend *be, size_t bytes)
{
	struct pd_backend *in = TM(be)->in;

	return in->ops->pinned_alloc(in, bytes);
}

static void pd_tm_pinned_free(struct pd_backend *be, void *p)
{
	struct pd_backend *in = TM(be)->in;

	in->ops->pinned_free(in, p);
}

static void pd_tm_sync(struct pd_backend *be)
{
	pd_backend_sync(TM(be)->in);
}

static const struct pd_backend_ops pd_timed_ops = {
	.destroy = pd_tm_destroy,
	.enter = pd_tm_enter,
	.leave = pd_tm_leave,
	.alloc = pd_tm_alloc,
	.free = pd_tm_free,
	.upload = pd_tm_upload,
	.download = pd_tm_download,
	.copy2d = pd_tm_copy2d,
	.linear_new = pd_tm_linear_new,
	.linear_new_q = pd_tm_linear_new_q,
	.keeps_q = pd_tm_keeps_q,
	.linear_free = pd_tm_linear_free,
	.linear_adapt = pd_tm_linear_adapt,
	.linear = pd_tm_linear,
	.conv_new = pd_tm_conv_new,
	.conv_free = pd_tm_conv_free,
	.conv = pd_tm_conv,
	.fill = pd_tm_fill,
	.silu = pd_tm_silu,
	.quick_gelu = pd_tm_quick_gelu,
	.mul = pd_tm_mul,
	.add = pd_tm_add_op,
	.sub = pd_tm_sub,
	.layernorm_mod = pd_tm_layernorm_mod,
	.layernorm = pd_tm_layernorm,
	.rmsnorm_heads = pd_tm_rmsnorm_heads,
	.row_sumsq = pd_tm_row_sumsq,
	.rms_apply = pd_tm_rms_apply,
	.rope = pd_tm_rope,
	.gated_add = pd_tm_gated_add,
	.attention = pd_tm_attention,
	.attention_masked = pd_tm_attention_masked,
	.lse_merge = pd_tm_lse_merge,
	.group_stats = pd_tm_group_stats,
	.group_apply = pd_tm_group_apply,
	.rms_channels = pd_tm_rms_channels,
	.upsample2x = pd_tm_upsample2x,
	.transpose = pd_tm_transpose,
	.pinned_alloc = pd_tm_pinned_alloc,
	.pinned_free = pd_tm_pinned_free,
	.sync = pd_tm_sync,
};

int pd_backend_timed_new(struct pd_backend **out, struct pd_backend *inner)
{
	struct pd_timed *t;

	*out = NULL;
	t = pd_calloc(1, sizeof(*t), "the timed backend");
	if (!t) {
		pd_backend_free(inner);
		return -1;
	}
	t->in = inner;
	/* under the wrapped backend's name: logs, and whatever makes another
	 * backend like it, see the backend that computes */
	t->ops = pd_timed_ops;
	t->ops.name = inner->ops->name;
	if (!inner->ops->keeps_q)
		t->ops.keeps_q = NULL;
	/* the loader asks whether a backend keeps quantized layers at all */
	if (!inner->ops->linear_new_q)
		t->ops.linear_new_q = NULL;
	if (!inner->ops->pinned_alloc || !inner->ops->pinned_free) {
		t->ops.pinned_alloc = NULL;
		t->ops.pinned_free = NULL;
	}
	if (!inner->ops->sync)
		t->ops.sync = NULL;
	t->be = *inner;
	t->be.ops = &t->ops;
	*out = &t->be;
	return 0;
}

static int pd_tm_longer(const void *a, const void *b)
{
	const struct pd_op_time *x = a, *y = b;

	return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : strcmp(x->name, y->name);
}

int pd_backend_timed_rows(struct pd_backend *be, struct pd_op_time *rows, int max)
{
	const struct pd_timed *t = TM(be);
	int n;

	if (be->ops->destroy != pd_tm_destroy)
		return -1;
	memcpy(rows, t->row, sizeof(*rows) * (size_t)(t->n_rows < max ? t->n_rows : max));
	n = t->n_rows;
	if (n > max) {
		/* the longest MAX of all of them */
		struct pd_op_time *all = malloc(sizeof(*all) * (size_t)n);

		if (all) {
			memcpy(all, t->row, sizeof(*all) * (size_t)n);
			qsort(all, (size_t)n, sizeof(*all), pd_tm_longer);
			memcpy(rows, all, sizeof(*rows) * (size_t)max);
			free(all);
		}
		return max;
	}
	qsort(rows, (size_t)n, sizeof(*rows), pd_tm_longer);
	return n;
}

void pd_backend_timed_reset(struct pd_backend *be)
{
	if (be->ops->destroy != pd_tm_destroy)
		return;
	memset(TM(be)->row, 0, sizeof(TM(be)->row));
	TM(be)->n_rows = 0;
}
