/*
 * pd_backend_cpu.c - the CPU backend: matrix products and convolutions
 * through oneDNN (v2 C API, Debian's libdnnl 2.6), everything else in own
 * OpenMP kernels.
 *
 * Weights are reordered once, at load, into the layout oneDNN's matmul
 * prefers (and converted to bf16 for bf16 compute); the layout it picks does
 * not depend on the number of rows, so one packed copy serves every sequence
 * length.  Primitives are cached per row count and strides.
 */
#include "pd_backend.h"
#include "pd_util.h"

#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Primitives kept per linear layer: text rows, image rows, joint rows and a
 * few parallel variants are all a layer ever sees. */
#define PD_MM_CACHE 8
#define PD_CONV_CACHE 4
/* Rows assumed when asking oneDNN for its preferred weight layout. */
#define PD_MM_REF_ROWS 256
/* Queries per attention block: the block's scores [block, keys] stay in f32. */
#define PD_ATTN_QBLOCK 256
/* Plain matrix products (attention) with operands given per call. */
#define PD_GEMM_CACHE 32

struct pd_gemm {
	int64_t m, n, k, lda, ldb, ldc;  /* shape and strides it was made for */
	int trans_b;                    /* B given as [n, k] rows */
	dnnl_data_type_t dt;            /* type of A and B (C is f32) */
	uint64_t used;                  /* last use, for eviction */
	dnnl_primitive_t prim;
	dnnl_memory_t a, b, c;          /* handles set per call */
};

struct pd_cpu {
	struct pd_backend be;           /* the interface; must stay first */
	dnnl_engine_t eng;              /* oneDNN CPU engine */
	dnnl_stream_t stream;           /* its (in-order) stream */
	uint16_t *bf16;                 /* bf16 copy of a linear layer's input */
	size_t bf16_cap;                /* its capacity in elements */
	float *scratch;                 /* attention scores of one query block */
	size_t scratch_cap;             /* its capacity in floats */
	uint16_t *abf;                  /* bf16 copies of q, k, v and the probabilities */
	size_t abf_cap;                 /* its capacity in elements */
	int avx512;                     /* the CPU has AVX-512 F/BW/VL (softmax kernel) */
	struct pd_gemm gemm[PD_GEMM_CACHE]; /* cached attention products */
	int n_gemm;
	uint64_t clock;                 /* use counter for the cache */
};

struct pd_mm {
	int64_t rows, ldx, ldy;         /* shape and strides this primitive was made for */
	int flags;                      /* PD_LIN_* flags it was made for */
	dnnl_primitive_t prim;          /* the matmul */
	dnnl_memory_t src, dst;         /* memories whose handles are set per call */
};

struct pd_linear {
	int64_t n_out, n_in;            /* weight shape [n_out, n_in] */
	dnnl_memory_desc_t w_md;        /* packed layout chosen by oneDNN */
	dnnl_memory_t w;                /* packed weights */
	dnnl_memory_t bias;             /* f32 [1, n_out], or NULL */
	size_t bytes;                   /* packed weights and bias, as counted in weight_bytes */
	int n_mm;                       /* cached primitives in use */
	int next;                       /* next cache slot to evict */
	struct pd_mm mm[PD_MM_CACHE];   /* cached primitives */
};

struct pd_conv_prim {
	int h, w, halo;                 /* output size and input halo this primitive was made for */
	dnnl_primitive_t prim;          /* the convolution */
	dnnl_memory_t wts;              /* weights in the primitive's layout */
	size_t wbytes;                  /* their size */
	dnnl_memory_t src, dst;         /* handles set per call */
};

struct pd_conv {
	int c_out, c_in, k;             /* kernel shape */
	dnnl_memory_t w_user;           /* weights as given, oihw f32 */
	dnnl_memory_t bias;             /* f32 [c_out] */
	int n_prim, next;               /* cache use */
	size_t bytes;                   /* weights in every layout and bias, as counted in weight_bytes */
	struct pd_conv_prim p[PD_CONV_CACHE]; /* cached primitives */
};

#define CPU(be) ((struct pd_cpu *)(be))

/* Evaluates a oneDNN call; on failure records it in the backend and jumps
 * to the label. */
#define DNNL_TRY(be, call, label) \
	do { \
		dnnl_status_t s_ = (call); \
		if (s_ != dnnl_success) { \
			pd_backend_fail((be), "oneDNN error %d in %s", (int)s_, #call); \
			goto label; \
		} \
	} while (0)

static void pd_cpu_count_work(struct pd_backend *be, size_t add, size_t sub)
{
	be->work_bytes += add;
	be->work_bytes -= sub;
	if (add)
		be->allocations++;
	if (be->work_bytes > be->work_peak)
		be->work_peak = be->work_bytes;
}

/* Scratch grows to the largest request and stays: after the first step
 * nothing is allocated. */
static int pd_cpu_grow(struct pd_backend *be, void **buf, size_t *cap, size_t need, size_t elem)
{
	void *p;

	if (need <= *cap)
		return 0;
	p = aligned_alloc(64, ((need * elem) + 63) & ~(size_t)63);
	if (!p) {
		pd_backend_fail(be, "out of memory (%zu MB scratch)", (need * elem) >> 20);
		return -1;
	}
	free(*buf);
	pd_cpu_count_work(be, need * elem, *cap * elem);
	*buf = p;
	*cap = need;
	return 0;
}

/* ----------------------------------------------------------------------- */
/* Memory                                                                  */
/* ----------------------------------------------------------------------- */

/* Each block starts with a 64-byte header that holds its size, for the
 * accounting of work_bytes; the floats after it stay 64-byte aligned. */
static float *pd_cpu_alloc(struct pd_backend *be, size_t n)
{
	size_t bytes = ((n * sizeof(float)) + 63) & ~(size_t)63;
	char *p;

	if (n > (SIZE_MAX - 128) / sizeof(float))
		return NULL;
	p = aligned_alloc(64, bytes + 64);
	if (!p)
		return NULL;
	*(size_t *)p = bytes;
	pd_cpu_count_work(be, bytes, 0);
	return (float *)(p + 64);
}

static void pd_cpu_free(struct pd_backend *be, float *p)
{
	char *b;

	if (!p)
		return;
	b = (char *)p - 64;
	pd_cpu_count_work(be, 0, *(size_t *)b);
	free(b);
}

static void pd_cpu_copy(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	(void)be;
	if (n)
		memcpy(dst, src, n * sizeof(float));
}

static void pd_cpu_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds,
			  int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
	for (int64_t r = 0; r < rows; r++)
		memcpy(dst + r * ldd, src + r * lds, (size_t)cols * sizeof(float));
}

/* ----------------------------------------------------------------------- */
/* Linear layers                                                           */
/* ----------------------------------------------------------------------- */

static void pd_cpu_linear_free(struct pd_backend *be, struct pd_linear *l)
{
	if (!l)
		return;
	be->weight_bytes -= l->bytes;
	for (int i = 0; i < l->n_mm; i++) {
		dnnl_primitive_destroy(l->mm[i].prim);
		dnnl_memory_destroy(l->mm[i].src);
		dnnl_memory_destroy(l->mm[i].dst);
	}
	if (l->w)
		dnnl_memory_destroy(l->w);
	if (l->bias)
		dnnl_memory_destroy(l->bias);
	free(l);
}

static dnnl_data_type_t pd_cpu_mm_type(struct pd_backend *be)
{
	return be->compute == PD_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* The matmul primitive for ROWS rows with the given strides and flags. The
 * src is the f32 input itself, or the contiguous bf16 scratch copy. */
static int pd_cpu_mm_create(struct pd_backend *be, const struct pd_linear *l, struct pd_mm *mm, int64_t rows,
			    int64_t ldx, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_memory_desc_t src_md, dst_md, bias_md;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_dims_t sd = { rows, l->n_in }, dd = { rows, l->n_out }, bd = { 1, l->n_out };
	dnnl_dims_t ss = { ldx, 1 }, ds = { ldy, 1 };
	int rc = -1;

	memset(mm, 0, sizeof(*mm));
	if (be->compute == PD_BF16)
		DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&src_md, 2, sd, dnnl_bf16, dnnl_ab), out);
	else
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&src_md, 2, sd, dnnl_f32, ss), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&dst_md, 2, dd, dnnl_f32, ds), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&bias_md, 2, bd, dnnl_f32, dnnl_ab), out);
	DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &src_md, &l->w_md,
					   (flags & PD_LIN_NO_BIAS) || !l->bias ? NULL : &bias_md, &dst_md), out);
	DNNL_TRY(be, dnnl_primitive_attr_create(&attr), out);
	DNNL_TRY(be, dnnl_post_ops_create(&po), out);
	if (flags & PD_LIN_ACCUMULATE)
		DNNL_TRY(be, dnnl_post_ops_append_sum(po, 1.0f), out);
	if (flags & PD_LIN_GELU_TANH)
		DNNL_TRY(be, dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_gelu_tanh, 0.f, 0.f), out);
	DNNL_TRY(be, dnnl_primitive_attr_set_post_ops(attr, po), out);
	DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, attr, cpu->eng, NULL), out);
	DNNL_TRY(be, dnnl_primitive_create(&mm->prim, pd), out);
	DNNL_TRY(be, dnnl_memory_create(&mm->src, &src_md, cpu->eng, DNNL_MEMORY_NONE), out);
	DNNL_TRY(be, dnnl_memory_create(&mm->dst, &dst_md, cpu->eng, DNNL_MEMORY_NONE), out);
	mm->rows = rows;
	mm->ldx = ldx;
	mm->ldy = ldy;
	mm->flags = flags;
	rc = 0;
out:
	if (rc) {
		if (mm->prim)
			dnnl_primitive_destroy(mm->prim);
		if (mm->src)
			dnnl_memory_destroy(mm->src);
		memset(mm, 0, sizeof(*mm));
	}
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	return rc;
}

static struct pd_linear *pd_cpu_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const float *w,
					   int64_t ldw, const float *bias)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_linear *l;
	dnnl_memory_desc_t a_md, w_any, c_md, user_md;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd = NULL, rpd = NULL;
	dnnl_primitive_t reorder = NULL;
	dnnl_memory_t user = NULL;
	dnnl_dims_t ad = { PD_MM_REF_ROWS, n_in }, wd = { n_in, n_out }, cd = { PD_MM_REF_ROWS, n_out };
	dnnl_dims_t ws = { 1, ldw };
	dnnl_data_type_t dt = pd_cpu_mm_type(be);
	int ok = 0;

	if (be->failed)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		pd_backend_fail(be, "out of memory");
		return NULL;
	}
	l->n_out = n_out;
	l->n_in = n_in;
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dt, dnnl_ab), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dt, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab), out);
	DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &a_md, &w_any, NULL, &c_md), out);
	DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL), out);
	l->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	DNNL_TRY(be, dnnl_memory_create(&l->w, &l->w_md, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
	/* W is [n_out, n_in] row-major = the [n_in, n_out] matrix with strides {1, ldw}. */
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&user_md, 2, wd, dnnl_f32, ws), out);
	DNNL_TRY(be, dnnl_memory_create(&user, &user_md, cpu->eng, (void *)w), out);
	DNNL_TRY(be, dnnl_reorder_primitive_desc_create(&rpd, &user_md, cpu->eng, &l->w_md, cpu->eng, NULL), out);
	DNNL_TRY(be, dnnl_primitive_create(&reorder, rpd), out);
	{
		dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, user }, { DNNL_ARG_TO, l->w } };

		DNNL_TRY(be, dnnl_primitive_execute(reorder, cpu->stream, 2, args), out);
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), out);
	}
	if (bias) {
		dnnl_memory_desc_t b_md;
		dnnl_dims_t bd = { 1, n_out };
		void *h;

		DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_f32, dnnl_ab), out);
		DNNL_TRY(be, dnnl_memory_create(&l->bias, &b_md, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
		DNNL_TRY(be, dnnl_memory_get_data_handle(l->bias, &h), out);
		memcpy(h, bias, (size_t)n_out * sizeof(float));
	}
	l->bytes = dnnl_memory_desc_get_size(&l->w_md) + (bias ? (size_t)n_out * sizeof(float) : 0);
	be->weight_bytes += l->bytes;
	ok = 1;
out:
	if (reorder)
		dnnl_primitive_destroy(reorder);
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	if (user)
		dnnl_memory_destroy(user);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (!ok) {
		pd_cpu_linear_free(be, l);
		return NULL;
	}
	return l;
}

/* f32 -> bf16, round to nearest even (what torch's .to(bfloat16) does). */
static void pd_cpu_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t lds)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const uint32_t *s = (const uint32_t *)(src + r * lds);
		uint16_t *d = dst + r * cols;

		for (int64_t c = 0; c < cols; c++) {
			uint32_t u = s[c];

			d[c] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
		}
	}
}

static void pd_cpu_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
			  float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_mm *mm = NULL;
	const void *src = x;
	int64_t key_ldx = be->compute == PD_BF16 ? l->n_in : ldx;

	if (be->failed || rows == 0)
		return;
	for (int i = 0; i < l->n_mm; i++) {
		struct pd_mm *c = &l->mm[i];

		if (c->rows == rows && c->ldx == key_ldx && c->ldy == ldy && c->flags == flags) {
			mm = c;
			break;
		}
	}
	if (!mm) {
		struct pd_mm fresh;

		if (pd_cpu_mm_create(be, l, &fresh, rows, key_ldx, ldy, flags))
			return;
		be->allocations++;
		if (l->n_mm < PD_MM_CACHE) {
			mm = &l->mm[l->n_mm++];
		} else {
			mm = &l->mm[l->next];
			l->next = (l->next + 1) % PD_MM_CACHE;
			dnnl_primitive_destroy(mm->prim);
			dnnl_memory_destroy(mm->src);
			dnnl_memory_destroy(mm->dst);
		}
		*mm = fresh;
	}
	if (be->compute == PD_BF16) {
		if (pd_cpu_grow(be, (void **)&cpu->bf16, &cpu->bf16_cap, (size_t)(rows * l->n_in), sizeof(uint16_t)))
			return;
		pd_cpu_to_bf16(cpu->bf16, x, rows, l->n_in, ldx);
		src = cpu->bf16;
	}
	DNNL_TRY(be, dnnl_memory_set_data_handle(mm->src, (void *)src), fail);
	DNNL_TRY(be, dnnl_memory_set_data_handle(mm->dst, y), fail);
	{
		dnnl_exec_arg_t args[4] = {
			{ DNNL_ARG_SRC, mm->src },
			{ DNNL_ARG_WEIGHTS, l->w },
			{ DNNL_ARG_DST, mm->dst },
			{ DNNL_ARG_BIAS, l->bias },
		};
		int nargs = (flags & PD_LIN_NO_BIAS) || !l->bias ? 3 : 4;

		DNNL_TRY(be, dnnl_primitive_execute(mm->prim, cpu->stream, nargs, args), fail);
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), fail);
	}
fail:
	return;
}

/* ----------------------------------------------------------------------- */
/* Convolution                                                             */
/* ----------------------------------------------------------------------- */

static void pd_cpu_conv_free(struct pd_backend *be, struct pd_conv *c)
{
	if (!c)
		return;
	be->weight_bytes -= c->bytes;
	for (int i = 0; i < c->n_prim; i++) {
		dnnl_primitive_destroy(c->p[i].prim);
		dnnl_memory_destroy(c->p[i].wts);
		dnnl_memory_destroy(c->p[i].src);
		dnnl_memory_destroy(c->p[i].dst);
	}
	if (c->w_user)
		dnnl_memory_destroy(c->w_user);
	if (c->bias)
		dnnl_memory_destroy(c->bias);
	free(c);
}

static struct pd_conv *pd_cpu_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				       const float *bias)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_conv *c;
	dnnl_memory_desc_t w_md, b_md;
	dnnl_dims_t wd = { c_out, c_in, k, k }, bd = { c_out };
	void *h;

	if (be->failed)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		pd_backend_fail(be, "out of memory");
		return NULL;
	}
	c->c_out = c_out;
	c->c_in = c_in;
	c->k = k;
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_md, 4, wd, dnnl_f32, dnnl_oihw), fail);
	DNNL_TRY(be, dnnl_memory_create(&c->w_user, &w_md, cpu->eng, DNNL_MEMORY_ALLOCATE), fail);
	DNNL_TRY(be, dnnl_memory_get_data_handle(c->w_user, &h), fail);
	memcpy(h, w, (size_t)c_out * (size_t)c_in * (size_t)k * (size_t)k * sizeof(float));
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), fail);
	DNNL_TRY(be, dnnl_memory_create(&c->bias, &b_md, cpu->eng, DNNL_MEMORY_ALLOCATE), fail);
	DNNL_TRY(be, dnnl_memory_get_data_handle(c->bias, &h), fail);
	memcpy(h, bias, (size_t)c_out * sizeof(float));
	c->bytes = ((size_t)c_out * (size_t)c_in * (size_t)k * (size_t)k + (size_t)c_out) * sizeof(float);
	be->weight_bytes += c->bytes;
	return c;
fail:
	pd_cpu_conv_free(be, c);
	return NULL;
}

static int pd_cpu_conv_create(struct pd_backend *be, struct pd_conv *c, struct pd_conv_prim *p, int h, int w,
			      int halo)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_memory_desc_t src_md, dst_md, w_any, b_md;
	dnnl_convolution_desc_t desc;
	dnnl_primitive_desc_t pd = NULL, rpd = NULL;
	dnnl_primitive_t reorder = NULL;
	dnnl_dims_t sd = { 1, c->c_in, h + 2 * halo, w }, dd = { 1, c->c_out, h, w };
	dnnl_dims_t wd = { c->c_out, c->c_in, c->k, c->k }, bd = { c->c_out };
	dnnl_dims_t strides = { 1, 1 }, pad = { (c->k - 1) / 2 - halo, (c->k - 1) / 2 };
	int rc = -1;

	memset(p, 0, sizeof(*p));
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&src_md, 4, sd, dnnl_f32, dnnl_nchw), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&dst_md, 4, dd, dnnl_f32, dnnl_nchw), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), out);
	DNNL_TRY(be, dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct,
							&src_md, &w_any, &b_md, &dst_md, strides, pad, pad), out);
	DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL), out);
	DNNL_TRY(be, dnnl_primitive_create(&p->prim, pd), out);
	{
		const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
		const dnnl_memory_desc_t *have = NULL;
		dnnl_exec_arg_t args[2];

		DNNL_TRY(be, dnnl_memory_get_memory_desc(c->w_user, &have), out);
		DNNL_TRY(be, dnnl_memory_create(&p->wts, want, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
		p->wbytes = dnnl_memory_desc_get_size(want);
		DNNL_TRY(be, dnnl_reorder_primitive_desc_create(&rpd, have, cpu->eng, want, cpu->eng, NULL), out);
		DNNL_TRY(be, dnnl_primitive_create(&reorder, rpd), out);
		args[0] = (dnnl_exec_arg_t){ DNNL_ARG_FROM, c->w_user };
		args[1] = (dnnl_exec_arg_t){ DNNL_ARG_TO, p->wts };
		DNNL_TRY(be, dnnl_primitive_execute(reorder, cpu->stream, 2, args), out);
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), out);
	}
	DNNL_TRY(be, dnnl_memory_create(&p->src, &src_md, cpu->eng, DNNL_MEMORY_NONE), out);
	DNNL_TRY(be, dnnl_memory_create(&p->dst, &dst_md, cpu->eng, DNNL_MEMORY_NONE), out);
	p->h = h;
	p->w = w;
	p->halo = halo;
	rc = 0;
out:
	if (reorder)
		dnnl_primitive_destroy(reorder);
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (rc) {
		if (p->prim)
			dnnl_primitive_destroy(p->prim);
		if (p->wts)
			dnnl_memory_destroy(p->wts);
		if (p->src)
			dnnl_memory_destroy(p->src);
		memset(p, 0, sizeof(*p));
	}
	return rc;
}

static void pd_cpu_conv(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_conv_prim *p = NULL;

	if (be->failed)
		return;
	if (halo < 0 || halo > (c->k - 1) / 2) {
		pd_backend_fail(be, "convolution: halo of %d rows for a %dx%d kernel", halo, c->k, c->k);
		return;
	}
	for (int i = 0; i < c->n_prim; i++)
		if (c->p[i].h == h && c->p[i].w == w && c->p[i].halo == halo)
			p = &c->p[i];
	if (!p) {
		struct pd_conv_prim fresh;

		int threads = omp_get_max_threads(), rc;

		/* made for one thread where it runs on one (see below): oneDNN
		 * fixes its partition of the work when the primitive is made */
		if (c->c_out < 16)
			omp_set_num_threads(1);
		rc = pd_cpu_conv_create(be, c, &fresh, h, w, halo);
		omp_set_num_threads(threads);
		if (rc)
			return;
		be->allocations++;
		if (c->n_prim < PD_CONV_CACHE) {
			p = &c->p[c->n_prim++];
		} else {
			p = &c->p[c->next];
			c->next = (c->next + 1) % PD_CONV_CACHE;
			c->bytes -= p->wbytes;
			be->weight_bytes -= p->wbytes;
			dnnl_primitive_destroy(p->prim);
			dnnl_memory_destroy(p->wts);
			dnnl_memory_destroy(p->src);
			dnnl_memory_destroy(p->dst);
		}
		*p = fresh;
		c->bytes += p->wbytes;
		be->weight_bytes += p->wbytes;
	}
	DNNL_TRY(be, dnnl_memory_set_data_handle(p->src, (void *)x), fail);
	DNNL_TRY(be, dnnl_memory_set_data_handle(p->dst, y), fail);
	{
		dnnl_exec_arg_t args[4] = {
			{ DNNL_ARG_SRC, p->src },
			{ DNNL_ARG_WEIGHTS, p->wts },
			{ DNNL_ARG_BIAS, c->bias },
			{ DNNL_ARG_DST, p->dst },
		};

		/* With plain layouts oneDNN convolves by im2col + sgemm, and for
		 * few output channels (the VAE's last layer) sgemm splits the sums
		 * among the threads: the picture would differ by a level between
		 * 1 and 2 threads, so between one process and a data-parallel
		 * rank. One thread there; that layer is a small part of the decode. */
		int threads = omp_get_max_threads(), alone = c->c_out < 16 && threads > 1;
		dnnl_status_t st;

		if (alone)
			omp_set_num_threads(1);
		st = dnnl_primitive_execute(p->prim, cpu->stream, 4, args);
		if (st == dnnl_success)
			st = dnnl_stream_wait(cpu->stream);
		if (alone)
			omp_set_num_threads(threads);
		if (st != dnnl_success)
			pd_backend_fail(be, "oneDNN error %d running a convolution", (int)st);
	}
fail:
	return;
}

/* ----------------------------------------------------------------------- */
/* Elementwise and normalisation kernels                                   */
/* ----------------------------------------------------------------------- */

static void pd_cpu_silu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] / (1.0f + expf(-x[i]));
}

static void pd_cpu_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * (1.0f / (1.0f + expf(-1.702f * x[i])));
}

static void pd_cpu_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] * b[i];
}

static void pd_cpu_add(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

static void pd_cpu_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] - b[i];
}

static void pd_cpu_l1_stats(struct pd_backend *be, const float *ref, const float *x, size_t n, double *sums)
{
	double d = 0, r = 0;

	if (be->failed)
		return;
#pragma omp parallel for schedule(static) reduction(+ : d, r) if (n > 65536)
	for (size_t i = 0; i < n; i++) {
		d += fabs((double)ref[i] - (double)x[i]);
		r += fabs((double)ref[i]);
	}
	sums[0] = d;
	sums[1] = r;
}

/* A row's mean and 1 / sqrt(variance + eps), summed in double (two
 * passes, as torch's layer_norm keeps the mean apart from the spread). */
static void pd_row_stats(const float *xr, int64_t dim, float eps, float *mean, float *rstd)
{
	double sum = 0, sq = 0;
	float m;

	for (int64_t j = 0; j < dim; j++)
		sum += xr[j];
	m = (float)(sum / (double)dim);
	for (int64_t j = 0; j < dim; j++) {
		double d = (double)xr[j] - (double)m;

		sq += d * d;
	}
	*mean = m;
	*rstd = (float)(1.0 / sqrt(sq / (double)dim + (double)eps));
}

static void pd_cpu_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
			     int64_t rows, int64_t dim, const float *w, const float *b, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * ldx;
		float *yr = y + r * ldy;
		float mean, rstd;

		pd_row_stats(xr, dim, eps, &mean, &rstd);
		for (int64_t j = 0; j < dim; j++) {
			float t = (xr[j] - mean) * rstd;

			if (w)
				t = t * w[j];
			yr[j] = b ? t + b[j] : t;
		}
	}
}

static void pd_cpu_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
				 int64_t rows, int64_t dim, const float *scale, const float *shift, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * ldx;
		float *yr = y + r * ldy;
		float mean, rstd;

		pd_row_stats(xr, dim, eps, &mean, &rstd);
		if (scale) {
			for (int64_t j = 0; j < dim; j++) {
				float t = (xr[j] - mean) * rstd;

				t = t * (1.0f + scale[j]);
				yr[j] = t + shift[j];
			}
		} else {
			for (int64_t j = 0; j < dim; j++)
				yr[j] = (xr[j] - mean) * rstd;
		}
	}
}

static void pd_cpu_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads,
				 int head_dim, const float *w, float eps)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		for (int h = 0; h < heads; h++) {
			float *v = x + r * ldx + (int64_t)h * head_dim;
			double sq = 0;
			float rs;

			for (int d = 0; d < head_dim; d++)
				sq += (double)v[d] * v[d];
			rs = (float)(1.0 / sqrt(sq / head_dim + (double)eps));
			for (int d = 0; d < head_dim; d++)
				v[d] = (v[d] * rs) * w[d];
		}
	}
}

static void pd_cpu_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
			const float *cos, const float *sin)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const float *c = cos + r * head_dim, *s = sin + r * head_dim;

		for (int h = 0; h < heads; h++) {
			float *v = x + r * ldx + (int64_t)h * head_dim;

			for (int d = 0; d < head_dim; d += 2) {
				float a = v[d], b = v[d + 1];
				float t0 = a * c[d], t1 = b * s[d];
				float u0 = b * c[d + 1], u1 = a * s[d + 1];

				v[d] = t0 - t1;
				v[d + 1] = u0 + u1;
			}
		}
	}
}

static void pd_cpu_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy,
			     int64_t rows, int64_t dim, const float *gate)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *xr = x + r * ldx;
		const float *yr = y + r * ldy;

		for (int64_t j = 0; j < dim; j++) {
			float t = gate[j] * yr[j];

			xr[j] = xr[j] + t;
		}
	}
}

/* C[m, n] = A[m, k] B, B given as [k, n] or (trans_b) as [n, k] rows; any
 * row strides; A and B f32 or bf16, C f32. Primitives are cached by shape. */
static int pd_cpu_gemm(struct pd_backend *be, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
		       const void *b, int64_t ldb, int trans_b, float *c, int64_t ldc, dnnl_data_type_t dt)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_gemm *g = NULL;
	int rc = -1;

	for (int i = 0; i < cpu->n_gemm; i++) {
		struct pd_gemm *x = &cpu->gemm[i];

		if (x->m == m && x->n == n && x->k == k && x->lda == lda && x->ldb == ldb && x->ldc == ldc &&
		    x->trans_b == trans_b && x->dt == dt) {
			g = x;
			break;
		}
	}
	if (!g) {
		dnnl_memory_desc_t a_md, b_md, c_md;
		dnnl_dims_t ad = { m, k }, bd = { k, n }, cd = { m, n };
		dnnl_dims_t as = { lda, 1 }, bs_t = { 1, ldb }, bs = { ldb, 1 }, cs = { ldc, 1 };
		dnnl_matmul_desc_t desc;
		dnnl_primitive_desc_t pd = NULL;

		if (cpu->n_gemm < PD_GEMM_CACHE) {
			g = &cpu->gemm[cpu->n_gemm++];
		} else {
			g = &cpu->gemm[0];
			for (int i = 1; i < PD_GEMM_CACHE; i++)
				if (cpu->gemm[i].used < g->used)
					g = &cpu->gemm[i];
			dnnl_primitive_destroy(g->prim);
			dnnl_memory_destroy(g->a);
			dnnl_memory_destroy(g->b);
			dnnl_memory_destroy(g->c);
		}
		memset(g, 0, sizeof(*g));
		be->allocations++;
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dt, as), fail);
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&b_md, 2, bd, dt, trans_b ? bs_t : bs), fail);
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&c_md, 2, cd, dnnl_f32, cs), fail);
		DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), fail);
		DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL), fail);
		rc = dnnl_primitive_create(&g->prim, pd);
		dnnl_primitive_desc_destroy(pd);
		if (rc != dnnl_success) {
			pd_backend_fail(be, "oneDNN error %d creating an attention product", rc);
			goto fail;
		}
		DNNL_TRY(be, dnnl_memory_create(&g->a, &a_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		DNNL_TRY(be, dnnl_memory_create(&g->b, &b_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		DNNL_TRY(be, dnnl_memory_create(&g->c, &c_md, cpu->eng, DNNL_MEMORY_NONE), fail);
		g->m = m;
		g->n = n;
		g->k = k;
		g->lda = lda;
		g->ldb = ldb;
		g->ldc = ldc;
		g->trans_b = trans_b;
		g->dt = dt;
	}
	g->used = ++cpu->clock;
	DNNL_TRY(be, dnnl_memory_set_data_handle(g->a, (void *)a), fail);
	DNNL_TRY(be, dnnl_memory_set_data_handle(g->b, (void *)b), fail);
	DNNL_TRY(be, dnnl_memory_set_data_handle(g->c, c), fail);
	{
		dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, g->a }, { DNNL_ARG_WEIGHTS, g->b }, { DNNL_ARG_DST, g->c } };

		DNNL_TRY(be, dnnl_primitive_execute(g->prim, cpu->stream, 3, args), fail);
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), fail);
	}
	return 0;
fail:
	if (g && !g->prim) {
		/* a half-made entry must not be found again */
		if (g->a)
			dnnl_memory_destroy(g->a);
		if (g->b)
			dnnl_memory_destroy(g->b);
		*g = cpu->gemm[--cpu->n_gemm];
	}
	return -1;
}

/* exp(d) for softmax arguments (d <= 0), branch-free so that loops over it
 * vectorise: SLEEF's expf_u10 reduction and polynomial, rounding by the
 * 1.5 x 2^23 trick instead of rintf (no SSE4 at the baseline). */
static inline float pd_exp_vec(float d)
{
	const float r_ln2 = 1.442695040888963407f, l2u = 0.693145751953125f, l2l = 1.428606765330187045e-06f;
	const float magic = 12582912.0f;
	union { float f; int32_t i; } pw;
	float q, s, u;

	d = d < -87.0f ? -87.0f : d;
	q = (d * r_ln2 + magic) - magic;
	s = d - q * l2u;
	s = s - q * l2l;
	u = 0.000198527617612853646278381f;
	u = u * s + 0.00139304355252534151077271f;
	u = u * s + 0.00833336077630519866943359f;
	u = u * s + 0.0416664853692054748535156f;
	u = u * s + 0.166666671633720397949219f;
	u = u * s + 0.5f;
	u = 1.0f + (s * s * u + s);
	pw.i = ((int32_t)q + 127) << 23;
	return u * pw.f;
}

/* One score row's exponentials, shifted by the row's maximum times SCALE
 * and left unnormalised, into bf16 O16 or f32 O32 (either may alias the row
 * when f32); returns their sum and sets *mx to the scaled maximum. */
static float pd_softmax_row(const float *row, int64_t n, float scale, uint16_t *o16, float *o32, float *mx)
{
	float m = -INFINITY, sum = 0.0f;

	for (int64_t j = 0; j < n; j++)
		m = row[j] > m ? row[j] : m;
	m *= scale;
	for (int64_t j = 0; j < n; j++) {
		union { float f; uint32_t u; } e = { .f = pd_exp_vec(row[j] * scale - m) };

		sum += e.f;
		if (o16)
			o16[j] = (uint16_t)((e.u + 0x7fff + ((e.u >> 16) & 1)) >> 16);
		else
			o32[j] = e.f;
	}
	*mx = m;
	return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with AVX-512, sixteen lanes at a time: the exponential is
 * pd_exp_vec's reduction and polynomial with fused multiply-adds (a few
 * ulps apart from it), the sum kept per lane. The compiler does not
 * vectorise the scalar loop (its sum is an ordered float reduction). */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static float pd_softmax_row_avx512(const float *row, int64_t n, float scale, uint16_t *o16, float *o32, float *mx)
{
	const __m512 ninf = _mm512_set1_ps(-INFINITY), lo = _mm512_set1_ps(-87.0f);
	const __m512 r_ln2 = _mm512_set1_ps(1.442695040888963407f), l2u = _mm512_set1_ps(0.693145751953125f);
	const __m512 l2l = _mm512_set1_ps(1.428606765330187045e-06f), one = _mm512_set1_ps(1.0f);
	const __m512 c0 = _mm512_set1_ps(0.000198527617612853646278381f), c1 = _mm512_set1_ps(0.00139304355252534151077271f);
	const __m512 c2 = _mm512_set1_ps(0.00833336077630519866943359f), c3 = _mm512_set1_ps(0.0416664853692054748535156f);
	const __m512 c4 = _mm512_set1_ps(0.166666671633720397949219f), c5 = _mm512_set1_ps(0.5f);
	const __m512i rnd = _mm512_set1_epi32(0x7fff), bit = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(127);
	__m512 vm = ninf, vs = _mm512_setzero_ps(), vsc = _mm512_set1_ps(scale), vmx;
	float m;

	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);

		vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, k, row + j));
	}
	m = _mm512_reduce_max_ps(vm) * scale;
	vmx = _mm512_set1_ps(m);
	for (int64_t j = 0; j < n; j += 16) {
		__mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
		__m512 d = _mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, row + j), vsc, vmx), q, t, u, e;
		__m512i pw;

		d = _mm512_max_ps(d, lo);
		q = _mm512_roundscale_ps(_mm512_mul_ps(d, r_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		t = _mm512_fnmadd_ps(q, l2u, d);
		t = _mm512_fnmadd_ps(q, l2l, t);
		u = _mm512_fmadd_ps(c0, t, c1);
		u = _mm512_fmadd_ps(u, t, c2);
		u = _mm512_fmadd_ps(u, t, c3);
		u = _mm512_fmadd_ps(u, t, c4);
		u = _mm512_fmadd_ps(u, t, c5);
		u = _mm512_add_ps(one, _mm512_fmadd_ps(_mm512_mul_ps(t, t), u, t));
		pw = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(q), bias), 23);
		e = _mm512_maskz_mul_ps(k, u, _mm512_castsi512_ps(pw));
		vs = _mm512_add_ps(vs, e);
		if (o16) {
			__m512i b = _mm512_castps_si512(e);

			b = _mm512_add_epi32(b, _mm512_add_epi32(rnd, _mm512_and_si512(_mm512_srli_epi32(b, 16), bit)));
			_mm256_mask_storeu_epi16(o16 + j, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16)));
		} else {
			_mm512_mask_storeu_ps(o32 + j, k, e);
		}
	}
	*mx = m;
	return _mm512_reduce_add_ps(vs);
}
#endif

/* The softmax of each of ROWS score rows (raw q.k, scaled here) without
 * its normalisation: exponentials in place, or into bf16 P16 when not NULL.
 * inv[r] gets 1 / (row sum), applied to the output after P V instead of to
 * every score (a pass over the scores fewer); the log-sum-exp of row r goes
 * to lse[r * lse_stride]. */
static void pd_cpu_softmax_rows(float *s, int64_t rows, int64_t n, float scale, float *lse, int64_t lse_stride,
				uint16_t *p16, float *inv, int avx512)
{
	(void)avx512;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *row = s + r * n, m, sum;
		uint16_t *o16 = p16 ? p16 + r * n : NULL;

#if defined(__x86_64__) && defined(__GNUC__)
		if (avx512)
			sum = pd_softmax_row_avx512(row, n, scale, o16, row, &m);
		else
#endif
			sum = pd_softmax_row(row, n, scale, o16, row, &m);
		inv[r] = 1.0f / sum;
		if (lse)
			lse[r * lse_stride] = m + logf(sum);
	}
}

/* Rows of one head's output block times their 1 / (row sum). */
static void pd_cpu_scale_rows(float *o, int64_t ldo, int64_t rows, int cols, const float *inv)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *x = o + r * ldo, f = inv[r];

		for (int c = 0; c < cols; c++)
			x[c] *= f;
	}
}

/* Attention per head and block of queries: S = Q K^T and O = P V through
 * oneDNN (bf16 operands with f32 accumulation when computing in bf16), the
 * softmax in f32 in between. */
/* The encoders' scores: s = scale s + bias, then -inf above the diagonal
 * when causal (query i0 + r against key j). The softmax then runs with
 * scale 1; its exp turns -inf into e^-87 ~ 1e-38, nothing next to the
 * diagonal's weight. */
static void pd_cpu_scores_adjust(float *s, int64_t rows, int64_t n, float scale, const float *bias, int64_t i0,
				 int causal)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		float *row = s + r * n;

		for (int64_t j = 0; j < n; j++) {
			float t = row[j] * scale;

			row[j] = bias ? t + bias[r * n + j] : t;
		}
		if (causal)
			for (int64_t j = i0 + r + 1; j < n; j++)
				row[j] = -INFINITY;
	}
}

static void pd_cpu_attention_impl(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
				  int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
				  int64_t skv, int heads, int head_dim, float scale, const float *bias, int causal)
{
	struct pd_cpu *cpu = CPU(be);
	int bf16 = be->compute == PD_BF16;
	int64_t W = (int64_t)heads * head_dim, bq = sq < PD_ATTN_QBLOCK ? sq : PD_ATTN_QBLOCK;
	dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
	const void *qa = q, *ka = k, *va = v;
	uint16_t *p16 = NULL;
	float *inv;

	if (be->failed || sq == 0)
		return;
	if (skv == 0) {
		/* no keys: nothing to attend to (ring chunks may be empty) */
		for (int64_t i = 0; i < sq; i++)
			memset(out + i * ldo, 0, sizeof(float) * (size_t)W);
		for (int64_t i = 0; lse && i < (int64_t)heads * sq; i++)
			lse[i] = -INFINITY;
		return;
	}
	/* the block's scores, then its rows' 1 / sum */
	if (pd_cpu_grow(be, (void **)&cpu->scratch, &cpu->scratch_cap, (size_t)(bq * skv + bq), sizeof(float)))
		return;
	inv = cpu->scratch + bq * skv;
	if (bf16) {
		size_t need = (size_t)((sq + 2 * skv) * W + bq * skv);
		uint16_t *b;

		if (pd_cpu_grow(be, (void **)&cpu->abf, &cpu->abf_cap, need, sizeof(uint16_t)))
			return;
		b = cpu->abf;
		pd_cpu_to_bf16(b, q, sq, W, ldq);
		pd_cpu_to_bf16(b + sq * W, k, skv, W, ldk);
		pd_cpu_to_bf16(b + (sq + skv) * W, v, skv, W, ldv);
		qa = b;
		ka = b + sq * W;
		va = b + (sq + skv) * W;
		p16 = b + (sq + 2 * skv) * W;
		ldq = ldk = ldv = W;
	}
	for (int h = 0; h < heads; h++) {
		size_t es = bf16 ? 2 : 4, off = (size_t)h * (size_t)head_dim;

		for (int64_t i0 = 0; i0 < sq; i0 += bq) {
			int64_t mb = sq - i0 < bq ? sq - i0 : bq;
			const char *qb = (const char *)qa + ((size_t)i0 * (size_t)ldq + off) * es;

			if (pd_cpu_gemm(be, mb, skv, head_dim, qb, ldq, (const char *)ka + off * es, ldk, 1, cpu->scratch,
					skv, dt))
				return;
			if (bias || causal)
				pd_cpu_scores_adjust(cpu->scratch, mb, skv, scale,
						     bias ? bias + ((int64_t)h * sq + i0) * skv : NULL, i0, causal);
			pd_cpu_softmax_rows(cpu->scratch, mb, skv, bias || causal ? 1.0f : scale,
					    lse ? lse + (int64_t)h * sq + i0 : NULL, 1, p16, inv, cpu->avx512);
			if (pd_cpu_gemm(be, mb, head_dim, skv, bf16 ? (const void *)p16 : cpu->scratch, skv,
					(const char *)va + off * es, ldv, 0, out + i0 * ldo + (int64_t)h * head_dim, ldo,
					dt))
				return;
			pd_cpu_scale_rows(out + i0 * ldo + (int64_t)h * head_dim, ldo, mb, head_dim, inv);
		}
	}
}

static void pd_cpu_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
			     int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
			     int64_t skv, int heads, int head_dim, float scale)
{
	pd_cpu_attention_impl(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, sq, skv, heads, head_dim, scale, NULL, 0);
}

static void pd_cpu_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
				    const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
				    int head_dim, float scale, const float *bias, int causal)
{
	pd_cpu_attention_impl(be, out, ldo, NULL, q, ldq, k, ldk, v, ldv, s, s, heads, head_dim, scale, bias, causal);
}

static void pd_cpu_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part,
			     int64_t ldp, const float *plse, int64_t sq, int heads, int head_dim)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int h = 0; h < heads; h++) {
		for (int64_t i = 0; i < sq; i++) {
			float l1 = lse[(int64_t)h * sq + i], l2 = plse[(int64_t)h * sq + i], w, d;
			float *o = out + i * ldo + (int64_t)h * head_dim;
			const float *p = part + i * ldp + (int64_t)h * head_dim;

			if (l2 == -INFINITY)
				continue;
			if (l1 == -INFINITY) {
				memcpy(o, p, sizeof(float) * (size_t)head_dim);
				lse[(int64_t)h * sq + i] = l2;
				continue;
			}
			/* w = sigmoid(l2 - l1), evaluated without overflow either way */
			d = l2 - l1;
			w = d >= 0 ? 1.0f / (1.0f + expf(-d)) : expf(d) / (1.0f + expf(d));
			for (int c = 0; c < head_dim; c++)
				o[c] = o[c] - w * (o[c] - p[c]);
			lse[(int64_t)h * sq + i] = (d >= 0 ? l2 : l1) + log1pf(expf(-fabsf(d)));
		}
	}
}

static void pd_cpu_group_stats(struct pd_backend *be, const float *x, int c, int64_t hw, int groups,
			       double *stats)
{
	int cpg = c / groups;

	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int g = 0; g < groups; g++) {
		const float *xg = x + (int64_t)g * cpg * hw;
		int64_t n = (int64_t)cpg * hw;
		double sum = 0, sq = 0;

		for (int64_t i = 0; i < n; i++) {
			sum += xg[i];
			sq += (double)xg[i] * xg[i];
		}
		stats[2 * g] = sum;
		stats[2 * g + 1] = sq;
	}
}

static void pd_cpu_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c,
			       int64_t hw, int groups, const double *stats, double count, const float *gamma,
			       const float *beta, float eps, int silu)
{
	int cpg = c / groups;

	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int ch = 0; ch < c; ch++) {
		int g = ch / cpg;
		double mean_d = stats[2 * g] / count, var = stats[2 * g + 1] / count - mean_d * mean_d;
		float mean = (float)mean_d, rstd = (float)(1.0 / sqrt((var > 0 ? var : 0) + (double)eps));
		const float *xc = x + (int64_t)ch * hw;
		float *yc = y + (int64_t)ch * y_cstride;

		for (int64_t i = 0; i < hw; i++) {
			float t = ((xc[i] - mean) * rstd) * gamma[ch] + beta[ch];

			yc[i] = silu ? t / (1.0f + expf(-t)) : t;
		}
	}
}

static void pd_cpu_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int h,
			      int w)
{
	if (be->failed)
		return;
#pragma omp parallel for collapse(2) schedule(static)
	for (int ch = 0; ch < c; ch++) {
		for (int i = 0; i < 2 * h; i++) {
			const float *xr = x + ((int64_t)ch * h + i / 2) * w;
			float *yr = y + (int64_t)ch * y_cstride + (int64_t)i * 2 * w;

			for (int j = 0; j < 2 * w; j++)
				yr[j] = xr[j / 2];
		}
	}
}

static void pd_cpu_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
#pragma omp parallel for schedule(static)
	for (int64_t c = 0; c < cols; c++)
		for (int64_t r = 0; r < rows; r++)
			y[c * rows + r] = x[r * cols + c];
}

/* ----------------------------------------------------------------------- */
/* Creation                                                                */
/* ----------------------------------------------------------------------- */

static void pd_cpu_destroy(struct pd_backend *be)
{
	struct pd_cpu *cpu = CPU(be);

	if (cpu->stream)
		dnnl_stream_destroy(cpu->stream);
	if (cpu->eng)
		dnnl_engine_destroy(cpu->eng);
	for (int i = 0; i < cpu->n_gemm; i++) {
		dnnl_primitive_destroy(cpu->gemm[i].prim);
		dnnl_memory_destroy(cpu->gemm[i].a);
		dnnl_memory_destroy(cpu->gemm[i].b);
		dnnl_memory_destroy(cpu->gemm[i].c);
	}
	free(cpu->bf16);
	free(cpu->scratch);
	free(cpu->abf);
	free(cpu);
}

static const struct pd_backend_ops pd_cpu_ops = {
	.name = "cpu",
	.destroy = pd_cpu_destroy,
	.alloc = pd_cpu_alloc,
	.free = pd_cpu_free,
	.upload = pd_cpu_copy,
	.download = pd_cpu_copy,
	.copy2d = pd_cpu_copy2d,
	.linear_new = pd_cpu_linear_new,
	.linear_free = pd_cpu_linear_free,
	.linear = pd_cpu_linear,
	.conv_new = pd_cpu_conv_new,
	.conv_free = pd_cpu_conv_free,
	.conv = pd_cpu_conv,
	.silu = pd_cpu_silu,
	.quick_gelu = pd_cpu_quick_gelu,
	.mul = pd_cpu_mul,
	.add = pd_cpu_add,
	.sub = pd_cpu_sub,
	.l1_stats = pd_cpu_l1_stats,
	.layernorm_mod = pd_cpu_layernorm_mod,
	.layernorm = pd_cpu_layernorm,
	.rmsnorm_heads = pd_cpu_rmsnorm_heads,
	.rope = pd_cpu_rope,
	.gated_add = pd_cpu_gated_add,
	.attention = pd_cpu_attention,
	.attention_masked = pd_cpu_attention_masked,
	.lse_merge = pd_cpu_lse_merge,
	.group_stats = pd_cpu_group_stats,
	.group_apply = pd_cpu_group_apply,
	.upsample2x = pd_cpu_upsample2x,
	.transpose = pd_cpu_transpose,
};

int pd_backend_cpu_new(struct pd_backend **out, enum pd_dtype compute, int threads)
{
	struct pd_cpu *cpu;

	if (compute != PD_F32 && compute != PD_BF16)
		return pd_errorf("the CPU backend computes in f32 or bf16, not %s", pd_dtype_name(compute));
	cpu = calloc(1, sizeof(*cpu));
	if (!cpu)
		return pd_errorf("out of memory");
	cpu->be.ops = &pd_cpu_ops;
	cpu->be.compute = compute;
	if (threads > 0)
		omp_set_num_threads(threads);
	cpu->be.threads = omp_get_max_threads();
#if defined(__x86_64__) && defined(__GNUC__)
	/* PDIT_NO_AVX512 lets the tests run the portable kernels here too */
	cpu->avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl") && !getenv("PDIT_NO_AVX512");
#endif
	if (dnnl_engine_create(&cpu->eng, dnnl_cpu, 0) != dnnl_success ||
	    dnnl_stream_create(&cpu->stream, cpu->eng, dnnl_stream_default_flags) != dnnl_success) {
		pd_cpu_destroy(&cpu->be);
		return pd_errorf("cannot create the oneDNN CPU engine");
	}
	*out = &cpu->be;
	return 0;
}
