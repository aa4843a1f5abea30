/*
 * pd_cpu_matmul.c - linear layers and plain matrix products.
 *
 * Weights are reordered once, at load, into the layout oneDNN's matmul
 * prefers (and converted to bf16 for bf16 compute); the layout it picks does
 * not depend on the number of rows, so one packed copy serves every sequence
 * length.  Primitives are cached per row count and strides.
 */
#include "pd_cpu.h"
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

/* ----------------------------------------------------------------------- */
/* Linear layers                                                           */
/* ----------------------------------------------------------------------- */

static void pd_cpu_mm_destroy(struct pd_mm *mm)
{
	if (mm->prim)
		dnnl_primitive_destroy(mm->prim);
	if (mm->src)
		dnnl_memory_destroy(mm->src);
	if (mm->dst)
		dnnl_memory_destroy(mm->dst);
	if (mm->w)
		dnnl_memory_destroy(mm->w);
	if (mm->b)
		dnnl_memory_destroy(mm->b);
	memset(mm, 0, sizeof(*mm));
}

void pd_cpu_linear_free(struct pd_backend *be, struct pd_linear *l)
{
	if (!l)
		return;
	pd_adapter_clear(be, &l->ad);
	be->weight_bytes -= l->bytes;
	for (int i = 0; i < l->n_mm; i++)
		pd_cpu_mm_destroy(&l->mm[i]);
	if (l->w)
		dnnl_memory_destroy(l->w);
	if (l->bias)
		dnnl_memory_destroy(l->bias);
	free(l->blocks);
	free(l->i8);
	free(l->bias_host);
	free(l);
}

dnnl_data_type_t pd_cpu_mm_type(struct pd_backend *be)
{
	return be->compute == PD_BF16 && !CPU(be)->bf16_f32 ? dnnl_bf16 : dnnl_f32;
}

size_t pd_cpu_operand_size(struct pd_backend *be)
{
	return pd_cpu_mm_type(be) == dnnl_bf16 ? 2 : 4;
}

void pd_cpu_operand(struct pd_backend *be, void *dst, const float *src, int64_t rows, int64_t cols, int64_t lds)
{
	if (pd_cpu_mm_type(be) == dnnl_bf16)
		pd_cpu_to_bf16(dst, src, rows, cols, lds);
	else
		pd_cpu_round_bf16(CPU(be), dst, src, rows, cols, lds);
}

/* The matmul primitive for ROWS rows with the given strides and flags. The
 * src is the f32 input itself, or the contiguous bf16 scratch copy. A
 * quantized layer's weights are a decoded panel of COLS output rows, plain
 * [cols, n_in] rows: oneDNN reads them as the [n_in, cols] matrix with
 * strides {1, n_in}, 1-9% slower than its own layout at FLUX's widths.
 * Writing the panel in that layout instead was measured slower still (a
 * scatter per 32 values, and oneDNN 2.6 has only its reference kernel for
 * blocked weights with a strided output, so a dense copy too); so was
 * oneDNN's reorder into it (2.6 ns an element). */
int pd_cpu_mm_create(struct pd_backend *be, const struct pd_linear *l, struct pd_mm *mm, int64_t rows,
		     int64_t cols, int64_t ldx, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	dnnl_memory_desc_t src_md, dst_md, bias_md, w_md = l->w_md;
	dnnl_matmul_desc_t desc;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	dnnl_dims_t sd = { rows, l->n_in }, dd = { rows, cols }, bd = { 1, cols }, wd = { l->n_in, cols };
	dnnl_dims_t ss = { ldx, 1 }, ds = { ldy, 1 }, ws = { 1, l->n_in };
	int bias = !(flags & PD_LIN_NO_BIAS) && (l->bias || l->bias_host);
	int rc = -1;

	memset(mm, 0, sizeof(*mm));
	if (be->compute == PD_BF16)
		DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&src_md, 2, sd, pd_cpu_mm_type(be), dnnl_ab), out);
	else
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&src_md, 2, sd, dnnl_f32, ss), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&dst_md, 2, dd, dnnl_f32, ds), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&bias_md, 2, bd, dnnl_f32, dnnl_ab), out);
	if (l->q)
		DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&w_md, 2, wd, pd_cpu_mm_type(be), ws), out);
	DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &src_md, &w_md, bias ? &bias_md : NULL, &dst_md), out);
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
	if (l->q) {
		DNNL_TRY(be, dnnl_memory_create(&mm->w, &w_md, cpu->eng, DNNL_MEMORY_NONE), out);
		DNNL_TRY(be, dnnl_memory_create(&mm->b, &bias_md, cpu->eng, DNNL_MEMORY_NONE), out);
	}
	mm->rows = rows;
	mm->cols = cols;
	mm->ldx = ldx;
	mm->ldy = ldy;
	mm->flags = flags;
	rc = 0;
out:
	if (rc)
		pd_cpu_mm_destroy(mm);
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	return rc;
}

struct pd_linear *pd_cpu_linear_alloc(struct pd_backend *be, int64_t n_out, int64_t n_in)
{
	struct pd_linear *l;

	if (be->failed)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		pd_backend_fail(be, "out of memory");
		return NULL;
	}
	l->n_out = n_out;
	l->n_in = n_in;
	return l;
}

/* bf16 compute without bf16 products (bf16_f32): the weights kept as bf16
 * rows, the memory a bf16 layer holds, and multiplied as a quantized
 * layer's are, a panel of rows at a time decoded to f32 (their bf16
 * values exactly). */
static struct pd_linear *pd_cpu_linear_new_bf16_rows(struct pd_backend *be, int64_t n_out, int64_t n_in,
						     const void *w, enum pd_dtype wt, int64_t ldw, const float *bias)
{
	struct pd_linear *l;
	uint16_t *rows = NULL;

	if (be->failed)
		return NULL;
	if (wt == PD_BF16 && ldw == n_in)
		return pd_cpu_linear_new_q(be, n_out, n_in, PD_Q_BF16, 1.0f, w, bias);
	rows = malloc((size_t)n_out * (size_t)n_in * sizeof(uint16_t));
	if (!rows) {
		pd_backend_fail(be, "out of memory");
		return NULL;
	}
	if (wt == PD_F32) {
		pd_cpu_to_bf16(rows, w, n_out, n_in, ldw);
	} else {
		for (int64_t r = 0; r < n_out; r++)
			memcpy(rows + r * n_in, (const uint16_t *)w + r * ldw, (size_t)n_in * sizeof(uint16_t));
	}
	l = pd_cpu_linear_new_q(be, n_out, n_in, PD_Q_BF16, 1.0f, rows, bias);
	free(rows);
	return l;
}

struct pd_linear *pd_cpu_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
				    enum pd_dtype wt, int64_t ldw, const float *bias)
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

	if (wt != PD_F32 && wt != PD_BF16) {
		pd_backend_fail(be, "linear weights of type %s", pd_dtype_name(wt));
		return NULL;
	}
	if (be->compute == PD_BF16 && cpu->bf16_f32)
		return pd_cpu_linear_new_bf16_rows(be, n_out, n_in, w, wt, ldw, bias);
	l = pd_cpu_linear_alloc(be, n_out, n_in);
	if (!l)
		return NULL;
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dt, dnnl_ab), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&w_any, 2, wd, dt, dnnl_format_tag_any), out);
	DNNL_TRY(be, dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab), out);
	DNNL_TRY(be, dnnl_matmul_desc_init(&desc, &a_md, &w_any, NULL, &c_md), out);
	DNNL_TRY(be, dnnl_primitive_desc_create(&pd, &desc, NULL, cpu->eng, NULL), out);
	l->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	DNNL_TRY(be, dnnl_memory_create(&l->w, &l->w_md, cpu->eng, DNNL_MEMORY_ALLOCATE), out);
	/* W is [n_out, n_in] row-major = the [n_in, n_out] matrix with strides
	 * {1, ldw}; the reorder converts bf16 and f32 as it goes (all threads) */
	DNNL_TRY(be, dnnl_memory_desc_init_by_strides(&user_md, 2, wd, wt == PD_BF16 ? dnnl_bf16 : dnnl_f32, ws),
		 out);
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

struct pd_mm *pd_cpu_mm_get(struct pd_backend *be, struct pd_linear *l, int64_t rows, int64_t cols, int64_t ldx,
			    int64_t ldy, int flags)
{
	struct pd_mm fresh, *mm;
	/* bf16 inputs are copied to a contiguous scratch: the stride is n_in */
	int64_t key_ldx = be->compute == PD_BF16 ? l->n_in : ldx;

	for (int i = 0; i < l->n_mm; i++) {
		struct pd_mm *c = &l->mm[i];

		if (c->rows == rows && c->cols == cols && c->ldx == key_ldx && c->ldy == ldy && c->flags == flags)
			return c;
	}
	if (pd_cpu_mm_create(be, l, &fresh, rows, cols, key_ldx, ldy, flags))
		return NULL;
	be->allocations++;
	if (l->n_mm < PD_MM_CACHE) {
		mm = &l->mm[l->n_mm++];
	} else {
		mm = &l->mm[l->next];
		l->next = (l->next + 1) % PD_MM_CACHE;
		pd_cpu_mm_destroy(mm);
	}
	*mm = fresh;
	return mm;
}

/* f32 -> bf16, round to nearest even (what torch's .to(bfloat16) does). */
void pd_cpu_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t lds)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		const uint32_t *s = (const uint32_t *)(src + r * lds);
		uint16_t *d = dst + r * cols;

		for (int64_t c = 0; c < cols; c++) {
			uint32_t u = s[c];

			d[c] = (uint16_t)pd_bf16_bits(u);
		}
	}
}

void pd_cpu_round_bf16(const struct pd_cpu *cpu, float *dst, const float *src, int64_t rows, int64_t cols, int64_t lds)
{
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++)
		pd_cpu_round_bf16_row(cpu, dst + r * cols, src + r * lds, cols);
}

int pd_cpu_linear_adapt(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a, const float *b)
{
	return pd_adapter_set(be, &l->ad, l->n_out, l->n_in, rank, a, b);
}

int pd_cpu_input_kept(struct pd_cpu *cpu, struct pd_cpu_input *rec, const float *x, int64_t ldx, int64_t rows,
		      int64_t n_in, int kind)
{
	if (rec->x == x && rec->ldx == ldx && rec->rows == rows && rec->n_in == n_in && rec->epoch == cpu->in_epoch &&
	    (rec->kind == kind || rec->kind == (kind | 8)))
		return 1;
	*rec = (struct pd_cpu_input){ x, ldx, rows, n_in, kind, cpu->in_epoch };
	return 0;
}

const void *pd_cpu_input_operand(struct pd_backend *be, const float *x, int64_t ldx, int64_t rows, int64_t n_in)
{
	struct pd_cpu *cpu = CPU(be);

	if (pd_cpu_grow(be, &cpu->bf16, &cpu->bf16_cap, (size_t)(rows * n_in), pd_cpu_operand_size(be)))
		return NULL;
	if (!pd_cpu_input_kept(cpu, &cpu->bf16_in, x, ldx, rows, n_in, 0))
		pd_cpu_operand(be, cpu->bf16, x, rows, n_in, ldx);
	return cpu->bf16;
}

static void pd_cpu_linear_run(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
			      float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	struct pd_mm *mm;
	const void *src = x;

	if (be->failed || rows == 0)
		return;
	if (l->ad.down)
		flags = pd_adapter_term(be, &l->ad, &cpu->adapt, &cpu->adapt_cap, x, ldx, rows, y, ldy, flags);
	be->flop += 2.0 * (double)rows * (double)l->n_in * (double)l->n_out;
	if (l->q) {
		pd_cpu_qlinear(be, l, x, ldx, rows, y, ldy, flags);
		return;
	}
	mm = pd_cpu_mm_get(be, l, rows, l->n_out, ldx, ldy, flags);
	if (!mm)
		return;
	if (be->compute == PD_BF16 && !(src = pd_cpu_input_operand(be, x, ldx, rows, l->n_in)))
		return;
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

void pd_cpu_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		   float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);

	/* A call that cannot promise its input unchanged makes stale whatever
	 * was made of earlier inputs (an adapter's own calls below included). */
	if (!(flags & PD_LIN_SAME_INPUT) || cpu->last_x != x || cpu->last_ldx != ldx || cpu->last_rows != rows)
		cpu->in_epoch++;
	pd_cpu_linear_run(be, l, x, ldx, rows, y, ldy, flags & ~PD_LIN_SAME_INPUT);
	cpu->last_x = x, cpu->last_ldx = ldx, cpu->last_rows = rows;
}
