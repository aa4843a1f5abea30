/*
 * pd_backend_staged.c - the CPU backend's kernels behind a device's
 * boundary: its buffers are addresses the host cannot use (the CPU's
 * buffers moved by a fixed offset into non-canonical address space), so
 * anything that reads or writes backend memory without the backend (a
 * communicator given a backend buffer, a host loop over activations), or
 * hands the backend host memory where the interface says backend memory,
 * stops at once with a fault. The conformance suite and the parallel tests
 * run on it in CI, where no GPU is: what passes here keeps the promises the
 * CUDA backend relies on.
 */
#include "pd_backend_staged.h"
#include "pd_backend_cpu.h"
#include "pd_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Bit 62 set: no x86-64 or AArch64 user address has it, and offsets inside
 * a buffer never carry into it. */
#define PD_STAGED_OFFSET ((uintptr_t)1 << 62)

struct pd_staged {
	struct pd_backend be;           /* the interface; must stay first */
	struct pd_backend *cpu;         /* the backend that computes */
};

#define STG(b) ((struct pd_staged *)(b))

/* Backend address -> the CPU's, and back; NULL stays NULL. */
static void *pd_dev(const void *p)
{
	return p ? (void *)((uintptr_t)p - PD_STAGED_OFFSET) : NULL;
}

static void *pd_out(const void *p)
{
	return p ? (void *)((uintptr_t)p + PD_STAGED_OFFSET) : NULL;
}

#define F(p) ((float *)pd_dev(p))
#define D(p) ((double *)pd_dev(p))

static struct pd_backend *pd_in(struct pd_backend *be)
{
	return pd_backend_wrap_in(be, STG(be)->cpu);
}

static void pd_back(struct pd_backend *be)
{
	pd_backend_wrap_back(be, STG(be)->cpu);
}

/* Runs CALL on the CPU backend C as the staged backend BE. */
#define RUN(be, call)                                                                                              \
	do {                                                                                                       \
		struct pd_backend *c = pd_in(be);                                                                  \
		if (!be->failed)                                                                                   \
			call;                                                                                      \
		pd_back(be);                                                                                       \
	} while (0)

static void pd_stg_destroy(struct pd_backend *be)
{
	pd_backend_free(STG(be)->cpu);
	free(be);
}

static int pd_stg_enter(struct pd_backend *be)
{
	return pd_backend_enter(pd_in(be));
}

static void pd_stg_leave(struct pd_backend *be, int saved)
{
	pd_backend_leave(STG(be)->cpu, saved);
}

static float *pd_stg_alloc(struct pd_backend *be, size_t n)
{
	float *p = STG(be)->cpu->ops->alloc(pd_in(be), n);

	pd_back(be);
	return pd_out(p);
}

static void pd_stg_free(struct pd_backend *be, float *p)
{
	STG(be)->cpu->ops->free(pd_in(be), F(p));
	pd_back(be);
}

static void pd_stg_upload(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	RUN(be, c->ops->upload(c, F(dst), src, n));
}

static void pd_stg_download(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	RUN(be, c->ops->download(c, dst, F(src), n));
}

static void pd_stg_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
			  int64_t cols)
{
	RUN(be, c->ops->copy2d(c, F(dst), ldd, F(src), lds, rows, cols));
}

/* Weights come from the host: the CPU backend takes them as they are. */
static struct pd_linear *pd_stg_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
					   enum pd_dtype wt, int64_t ldw, const float *bias)
{
	struct pd_backend *c = pd_in(be);
	struct pd_linear *l = c->ops->linear_new(c, n_out, n_in, w, wt, ldw, bias);

	pd_back(be);
	return l;
}

static struct pd_linear *pd_stg_linear_new_q(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype t,
					     float scale, const void *blocks, const float *bias)
{
	struct pd_backend *c = pd_in(be);
	struct pd_linear *l = c->ops->linear_new_q(c, n_out, n_in, t, scale, blocks, bias);

	pd_back(be);
	return l;
}

static void pd_stg_linear_free(struct pd_backend *be, struct pd_linear *l)
{
	RUN(be, c->ops->linear_free(c, l));
}

/* A and B are host memory, as linear_new's weights. */
static int pd_stg_linear_adapt(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a,
			       const float *b)
{
	struct pd_backend *c = pd_in(be);
	int rc = c->ops->linear_adapt(c, l, rank, a, b);

	pd_back(be);
	return rc;
}

static void pd_stg_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
			  float *y, int64_t ldy, int flags)
{
	RUN(be, c->ops->linear(c, l, F(x), ldx, rows, F(y), ldy, flags));
}

static struct pd_conv *pd_stg_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				       const float *bias)
{
	struct pd_backend *c = pd_in(be);
	struct pd_conv *cv = c->ops->conv_new(c, c_out, c_in, k, w, bias);

	pd_back(be);
	return cv;
}

static void pd_stg_conv_free(struct pd_backend *be, struct pd_conv *cv)
{
	RUN(be, c->ops->conv_free(c, cv));
}

static void pd_stg_conv(struct pd_backend *be, struct pd_conv *cv, const float *x, int h, int w, int halo, float *y)
{
	RUN(be, c->ops->conv(c, cv, F(x), h, w, halo, F(y)));
}

static void pd_stg_fill(struct pd_backend *be, float *y, float v, size_t n)
{
	RUN(be, c->ops->fill(c, F(y), v, n));
}

static void pd_stg_silu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	RUN(be, c->ops->silu(c, F(y), F(x), n));
}

static void pd_stg_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	RUN(be, c->ops->quick_gelu(c, F(y), F(x), n));
}

static void pd_stg_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	RUN(be, c->ops->mul(c, F(y), F(a), F(b), n));
}

static void pd_stg_add(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	RUN(be, c->ops->add(c, F(y), F(a), F(b), n));
}

static void pd_stg_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	RUN(be, c->ops->sub(c, F(y), F(a), F(b), n));
}

static void pd_stg_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
				 int64_t rows, int64_t dim, const float *scale, const float *shift, float eps)
{
	RUN(be, c->ops->layernorm_mod(c, F(y), ldy, F(x), ldx, rows, dim, F(scale), F(shift), eps));
}

static void pd_stg_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
			     int64_t dim, const float *w, const float *b, float eps)
{
	RUN(be, c->ops->layernorm(c, F(y), ldy, F(x), ldx, rows, dim, F(w), F(b), eps));
}

static void pd_stg_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
				 const float *w, float eps)
{
	RUN(be, c->ops->rmsnorm_heads(c, F(x), ldx, rows, heads, head_dim, F(w), eps));
}

static void pd_stg_row_sumsq(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows,
			     int64_t cols)
{
	RUN(be, c->ops->row_sumsq(c, F(sumsq), F(x), ldx, rows, cols));
}

static void pd_stg_rms_apply(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols,
			     const float *sumsq, int64_t n, const float *w, float eps)
{
	RUN(be, c->ops->rms_apply(c, F(x), ldx, rows, cols, F(sumsq), n, F(w), eps));
}

static void pd_stg_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
			const float *cos, const float *sin)
{
	RUN(be, c->ops->rope(c, F(x), ldx, rows, heads, head_dim, F(cos), F(sin)));
}

static void pd_stg_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows,
			     int64_t dim, const float *gate)
{
	RUN(be, c->ops->gated_add(c, F(x), ldx, F(y), ldy, rows, dim, F(gate)));
}

static void pd_stg_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q, int64_t ldq,
			     const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq, int64_t skv,
			     int heads, int head_dim, float scale)
{
	RUN(be, c->ops->attention(c, F(out), ldo, F(lse), F(q), ldq, F(k), ldk, F(v), ldv, sq, skv, heads, head_dim,
				  scale));
}

static void pd_stg_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
				    const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
				    int head_dim, float scale, const float *bias, int causal)
{
	RUN(be, c->ops->attention_masked(c, F(out), ldo, F(q), ldq, F(k), ldk, F(v), ldv, s, heads, head_dim, scale,
					 F(bias), causal));
}

static void pd_stg_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part,
			     int64_t ldp, const float *plse, int64_t sq, int heads, int head_dim)
{
	RUN(be, c->ops->lse_merge(c, F(out), ldo, F(lse), F(part), ldp, F(plse), sq, heads, head_dim));
}

static void pd_stg_group_stats(struct pd_backend *be, const float *x, int ch, int64_t hw, int groups, double *stats)
{
	RUN(be, c->ops->group_stats(c, F(x), ch, hw, groups, D(stats)));
}

static void pd_stg_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int ch, int64_t hw,
			       int groups, const double *stats, double count, const float *gamma, const float *beta,
			       float eps, int silu)
{
	RUN(be, c->ops->group_apply(c, F(y), y_cstride, F(x), ch, hw, groups, D(stats), count, F(gamma), F(beta), eps,
				    silu));
}

static void pd_stg_rms_channels(struct pd_backend *be, float *y, const float *x, int ch, int64_t hw,
				const float *gamma, int silu)
{
	RUN(be, c->ops->rms_channels(c, F(y), F(x), ch, hw, F(gamma), silu));
}

static void pd_stg_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int ch, int h, int w)
{
	RUN(be, c->ops->upsample2x(c, F(y), y_cstride, F(x), ch, h, w));
}

static void pd_stg_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols)
{
	RUN(be, c->ops->transpose(c, F(y), F(x), rows, cols));
}

static const struct pd_backend_ops pd_staged_ops = {
	.name = "staged",
	.destroy = pd_stg_destroy,
	.enter = pd_stg_enter,
	.leave = pd_stg_leave,
	.alloc = pd_stg_alloc,
	.free = pd_stg_free,
	.upload = pd_stg_upload,
	.download = pd_stg_download,
	.copy2d = pd_stg_copy2d,
	.linear_new = pd_stg_linear_new,
	.linear_new_q = pd_stg_linear_new_q,
	.linear_free = pd_stg_linear_free,
	.linear_adapt = pd_stg_linear_adapt,
	.linear = pd_stg_linear,
	.conv_new = pd_stg_conv_new,
	.conv_free = pd_stg_conv_free,
	.conv = pd_stg_conv,
	.fill = pd_stg_fill,
	.silu = pd_stg_silu,
	.quick_gelu = pd_stg_quick_gelu,
	.mul = pd_stg_mul,
	.add = pd_stg_add,
	.sub = pd_stg_sub,
	.layernorm_mod = pd_stg_layernorm_mod,
	.layernorm = pd_stg_layernorm,
	.rmsnorm_heads = pd_stg_rmsnorm_heads,
	.row_sumsq = pd_stg_row_sumsq,
	.rms_apply = pd_stg_rms_apply,
	.rope = pd_stg_rope,
	.gated_add = pd_stg_gated_add,
	.attention = pd_stg_attention,
	.attention_masked = pd_stg_attention_masked,
	.lse_merge = pd_stg_lse_merge,
	.group_stats = pd_stg_group_stats,
	.group_apply = pd_stg_group_apply,
	.rms_channels = pd_stg_rms_channels,
	.upsample2x = pd_stg_upsample2x,
	.transpose = pd_stg_transpose,
};

int pd_backend_staged_new(struct pd_backend **out, enum pd_dtype compute, int threads)
{
	struct pd_staged *s;
	struct pd_backend *cpu;

	*out = NULL;
	if (pd_backend_cpu_new(&cpu, compute, threads))
		return -1;
	s = pd_calloc(1, sizeof(*s), "the staged backend");
	if (!s) {
		pd_backend_free(cpu);
		return -1;
	}
	s->cpu = cpu;
	s->be.ops = &pd_staged_ops;
	s->be.compute = cpu->compute;
	s->be.conv_compute = cpu->conv_compute;
	s->be.threads = cpu->threads;
	s->be.note = cpu->note;
	s->be.int8_auto = cpu->int8_auto;
	s->be.int8_products = cpu->int8_products;
	s->be.host_memory = 0;
	snprintf(s->be.device, sizeof(s->be.device), "%.90s, behind a device boundary", cpu->device);
	*out = &s->be;
	return 0;
}
