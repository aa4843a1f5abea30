/*
 * pd_cpu_qmatmul.c - linear layers whose weights stay in a block format
 * (ggml's types from GGUF files, fp8 from safetensors).
 *
 * Memory is what the file holds; the products run on decoded weights:
 *  - a few rows (the modulation's one row per picture): each thread decodes
 *    an output row into f32 and takes its dot products with the inputs, so
 *    a weight is read once, in its small format;
 *  - more rows: a panel of output rows is decoded at a time into a scratch
 *    in the product's precision and oneDNN multiplies it, so decoding costs
 *    a weight element once per call while the product costs it once per
 *    input row.
 * Decoded values are those of pd_quant_decode, rounded to bf16 the way the
 * packed layers round theirs: a quantized layer computes with the weights a
 * decoded-at-load layer would hold.
 */
#include "pd_backend_cpu.h"
#include "pd_cpu.h"
#include "pd_util.h"

#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct pd_linear *pd_cpu_linear_new_q(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype t,
				      float scale, const void *blocks, const float *bias)
{
	const struct pd_qtype_info *q = pd_quant_info(t);
	size_t elem = pd_cpu_operand_size(be), bytes;
	struct pd_linear *l;
	int64_t panel, parts;
	unsigned char *mem;
	int int8;

	if (be->failed)
		return NULL;
	if (!q || !q->decodes || n_out <= 0 || n_in <= 0 || n_in % q->block_size) {
		pd_backend_fail(be, "a [%lld, %lld] weight cannot be kept as %s", (long long)n_out, (long long)n_in,
				q ? q->name : "an unknown format");
		return NULL;
	}
	l = pd_cpu_linear_alloc(be, n_out, n_in);
	if (!l)
		return NULL;
	l->q = q;
	l->qtype = t;
	l->scale = scale;
	l->row_bytes = pd_quant_row_bytes(q, n_in);
	int8 = pd_backend_cpu_int8_takes(be->qproducts, t, n_in);
	l->i8_w256 = int8 && pd_cpu_i8_w256(be->qproducts, t, n_in);
	bytes = int8 ? pd_cpu_i8_bytes(t, n_out, n_in, l->i8_w256) : l->row_bytes * (size_t)n_out;
	mem = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (bias)
		l->bias_host = malloc((size_t)n_out * sizeof(float));
	if (!mem || (bias && !l->bias_host)) {
		free(mem);
		pd_backend_fail(be, "out of memory (%zu MB of quantized weights)", bytes >> 20);
		pd_cpu_linear_free(be, l);
		return NULL;
	}
	if (int8) {
		l->i8 = mem;
		l->i8_groups = pd_cpu_i8_groups(n_out);
		pd_cpu_i8_pack(l->i8, t, n_out, n_in, blocks, l->row_bytes, l->i8_w256);
		/* requantized values are never -128 */
		l->i8_avx2 = CPU(be)->avx2 && !CPU(be)->vnni && !CPU(be)->vnni256 &&
			     (l->i8_w256 ? pd_cpu_f16c() : pd_cpu_i8_avx2_fits(t, l->i8, n_out, n_in));
		be->int8_layers++;
	} else {
		l->blocks = mem;
		/* all threads: the copy's page faults (the mapping's and the fresh
		 * memory's) are most of a quantized file's loading */
#pragma omp parallel for schedule(static)
		for (int64_t r = 0; r < n_out; r++)
			memcpy(l->blocks + (size_t)r * l->row_bytes,
			       (const unsigned char *)blocks + (size_t)r * l->row_bytes, l->row_bytes);
	}
	if (bias)
		memcpy(l->bias_host, bias, (size_t)n_out * sizeof(float));
	/* panels of about qpanel_bytes, as equal as multiples of 16 allow */
	panel = (int64_t)(CPU(be)->qpanel_bytes / ((size_t)n_in * elem));
	panel = panel < 16 ? 16 : panel;
	parts = (n_out + panel - 1) / panel;
	panel = ((n_out + parts - 1) / parts + 15) / 16 * 16;
	l->panel = panel < n_out ? panel : n_out;
	l->bytes = bytes + (bias ? (size_t)n_out * sizeof(float) : 0);
	be->weight_bytes += l->bytes;
	return l;
}

/* Output row J of L decoded into f32 DST [n_in]. */
static void pd_q_row(const struct pd_cpu *cpu, const struct pd_linear *l, int64_t j, float *dst)
{
	const unsigned char *src = l->blocks + (size_t)j * l->row_bytes;

	if (!cpu->avx512 || pd_quant_decode_avx512(l->qtype, src, dst, l->n_in))
		pd_quant_decode(l->qtype, src, dst, l->n_in);
	if (l->scale != 1.0f)
		for (int64_t k = 0; k < l->n_in; k++)
			dst[k] = dst[k] * l->scale;
}

/* f32 -> bf16, round to nearest even, as pd_cpu_to_bf16. */
static void pd_q_row_bf16_portable(uint16_t *dst, const float *src, int64_t n)
{
	const uint32_t *s = (const uint32_t *)src;

	for (int64_t k = 0; k < n; k++) {
		uint32_t u = s[k];

		dst[k] = (uint16_t)pd_bf16_bits(u);
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same rounding, 16 lanes at a time. */
__attribute__((target("avx512f"))) static void pd_q_row_bf16_avx512(uint16_t *dst, const float *src, int64_t n)
{
	const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
	int64_t k = 0;

	for (; k + 16 <= n; k += 16) {
		__m512i u = _mm512_loadu_si512(src + k);
		__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, half), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));

		_mm256_storeu_si256((__m256i *)(dst + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
	}
	pd_q_row_bf16_portable(dst + k, src + k, n - k);
}
#endif

void pd_cpu_bf16_row(const struct pd_cpu *cpu, uint16_t *dst, const float *src, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (cpu->avx512) {
		pd_q_row_bf16_avx512(dst, src, n);
		return;
	}
#endif
	(void)cpu;
	pd_q_row_bf16_portable(dst, src, n);
}

static float pd_dot_portable(const float *a, const float *b, int64_t n)
{
	float acc[8] = { 0 }, s = 0;
	int64_t k = 0;

	for (; k + 8 <= n; k += 8)
		for (int u = 0; u < 8; u++)
			acc[u] += a[k + u] * b[k + u];
	for (; k < n; k++)
		s += a[k] * b[k];
	for (int u = 0; u < 8; u++)
		s += acc[u];
	return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static float pd_dot_avx512(const float *a, const float *b, int64_t n)
{
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
	float s;
	int64_t k = 0;

	for (; k + 32 <= n; k += 32) {
		acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc0);
		acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), acc1);
	}
	for (; k + 16 <= n; k += 16)
		acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc0);
	s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
	for (; k < n; k++)
		s += a[k] * b[k];
	return s;
}
#endif

static float pd_dot(const struct pd_cpu *cpu, const float *a, const float *b, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (cpu->avx512)
		return pd_dot_avx512(a, b, n);
#endif
	(void)cpu;
	return pd_dot_portable(a, b, n);
}

/* f32 values rounded to bf16 and kept as f32 (products of two are exact
 * in f32: a dot product of such values is what a bf16 matmul with f32
 * accumulation computes). In place is allowed. */
static void pd_q_round_bf16_portable(float *dst, const float *src, int64_t n)
{
	const uint32_t *s = (const uint32_t *)src;
	uint32_t *d = (uint32_t *)dst;

	for (int64_t k = 0; k < n; k++)
		d[k] = pd_bf16_bits(s[k]) << 16;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void pd_q_round_bf16_avx512(float *dst, const float *src, int64_t n)
{
	const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
	int64_t k = 0;

	for (; k + 16 <= n; k += 16) {
		__m512i u = _mm512_loadu_si512(src + k);
		__m512i r = _mm512_add_epi32(_mm512_add_epi32(u, half), _mm512_and_si512(_mm512_srli_epi32(u, 16), one));

		_mm512_storeu_si512(dst + k, _mm512_slli_epi32(_mm512_srli_epi32(r, 16), 16));
	}
	pd_q_round_bf16_portable(dst + k, src + k, n - k);
}
#endif

void pd_cpu_round_bf16_row(const struct pd_cpu *cpu, float *dst, const float *src, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (cpu->avx512) {
		pd_q_round_bf16_avx512(dst, src, n);
		return;
	}
#endif
	(void)cpu;
	pd_q_round_bf16_portable(dst, src, n);
}

/* Few rows: decode each output row once and dot it with every input row,
 * with f32 accumulation; in bf16 compute weights and inputs are rounded to
 * bf16 first, as the products of the other layers round them. The
 * post-operations in oneDNN's order: bias, sum, GELU. */
static void pd_q_dot(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		     float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	int nt = omp_get_max_threads(), bf16 = be->compute == PD_BF16;
	const float *bias = (flags & PD_LIN_NO_BIAS) ? NULL : l->bias_host, *in = x;
	int64_t ld = ldx;

	/* per thread a decoded row, then (bf16) the rounded inputs */
	if (pd_cpu_grow(be, (void **)&cpu->qrow, &cpu->qrow_cap, ((size_t)nt + (bf16 ? (size_t)rows : 0)) * (size_t)l->n_in,
			sizeof(float)))
		return;
	if (bf16) {
		float *xr = cpu->qrow + (size_t)nt * (size_t)l->n_in;

		for (int64_t r = 0; r < rows; r++)
			pd_cpu_round_bf16_row(cpu, xr + r * l->n_in, x + r * ldx, l->n_in);
		in = xr;
		ld = l->n_in;
	}
#pragma omp parallel num_threads(nt)
	{
		float *w = cpu->qrow + (size_t)omp_get_thread_num() * (size_t)l->n_in;

#pragma omp for schedule(static)
		for (int64_t j = 0; j < l->n_out; j++) {
			pd_q_row(cpu, l, j, w);
			if (bf16)
				pd_cpu_round_bf16_row(cpu, w, w, l->n_in);
			for (int64_t r = 0; r < rows; r++) {
				float s = pd_dot(cpu, w, in + r * ld, l->n_in), *o = y + r * ldy + j;

				if (bias)
					s += bias[j];
				if (flags & PD_LIN_ACCUMULATE)
					s += *o;
				if (flags & PD_LIN_GELU_TANH)
					s = pd_cpu_gelu_tanh(s);
				*o = s;
			}
		}
	}
}

/* Output rows [j0, j0 + n) of L decoded into the panel, in the product's
 * precision. */
static void pd_q_panel(struct pd_backend *be, struct pd_linear *l, int64_t j0, int64_t n, int nt)
{
	struct pd_cpu *cpu = CPU(be);
	/* bf16 values held as f32 (bf16_f32): rounded, unless they are bf16 rows already */
	int bf16 = pd_cpu_operand_size(be) == 2, rounded = !bf16 && be->compute == PD_BF16 && l->qtype != PD_Q_BF16;

#pragma omp parallel for schedule(static) num_threads(nt)
	for (int64_t r = 0; r < n; r++) {
		if (bf16) {
			float *w = cpu->qrow + (size_t)omp_get_thread_num() * (size_t)l->n_in;
			uint16_t *dst = (uint16_t *)cpu->qpanel + r * l->n_in;

			/* straight to bf16 where a kernel does it (fp8 e4m3fn, whose
			 * values are bf16 values; a scale would need the f32 product
			 * and its rounding) */
			if (l->scale == 1.0f && cpu->avx512 &&
			    !pd_quant_decode_bf16_avx512(l->qtype, l->blocks + (size_t)(j0 + r) * l->row_bytes, dst,
							 l->n_in))
				continue;
			pd_q_row(cpu, l, j0 + r, w);
			pd_cpu_bf16_row(cpu, dst, w, l->n_in);
		} else {
			float *w = (float *)cpu->qpanel + r * l->n_in;

			pd_q_row(cpu, l, j0 + r, w);
			if (rounded)
				pd_cpu_round_bf16_row(cpu, w, w, l->n_in);
		}
	}
}

void pd_cpu_qlinear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		    float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	int bf16 = be->compute == PD_BF16, nt = omp_get_max_threads();
	size_t es = pd_cpu_operand_size(be);
	int bias = !(flags & PD_LIN_NO_BIAS) && l->bias_host;
	int dense = rows <= cpu->qdense_rows && l->panel < l->n_out;
	const void *src = x;

	if (l->i8) {
		pd_cpu_i8_linear(be, l, x, ldx, rows, y, ldy, flags);
		return;
	}
	if (rows <= PD_QDOT_ROWS) {
		pd_q_dot(be, l, x, ldx, rows, y, ldy, flags);
		return;
	}
	if (pd_cpu_grow(be, &cpu->qpanel, &cpu->qpanel_cap, (size_t)(l->panel * l->n_in), es))
		return;
	if (bf16) {
		if (pd_cpu_grow(be, (void **)&cpu->qrow, &cpu->qrow_cap, (size_t)nt * (size_t)l->n_in, sizeof(float)) ||
		    !(src = pd_cpu_input_operand(be, x, ldx, rows, l->n_in)))
			return;
	}
	if (dense && pd_cpu_grow(be, (void **)&cpu->qout, &cpu->qout_cap, (size_t)(rows * l->panel), sizeof(float)))
		return;
	for (int64_t j0 = 0; j0 < l->n_out; j0 += l->panel) {
		int64_t n = l->n_out - j0 < l->panel ? l->n_out - j0 : l->panel;
		struct pd_mm *mm = pd_cpu_mm_get(be, l, rows, n, ldx, dense ? n : ldy, flags);
		dnnl_exec_arg_t args[4];

		if (!mm)
			return;
		pd_q_panel(be, l, j0, n, nt);
		if (dense && (flags & PD_LIN_ACCUMULATE))
			pd_cpu_copy2d(be, cpu->qout, n, y + j0, ldy, rows, n);
		DNNL_TRY(be, dnnl_memory_set_data_handle(mm->src, (void *)src), fail);
		DNNL_TRY(be, dnnl_memory_set_data_handle(mm->dst, dense ? cpu->qout : y + j0), fail);
		DNNL_TRY(be, dnnl_memory_set_data_handle(mm->w, cpu->qpanel), fail);
		args[0] = (dnnl_exec_arg_t){ DNNL_ARG_SRC, mm->src };
		args[1] = (dnnl_exec_arg_t){ DNNL_ARG_WEIGHTS, mm->w };
		args[2] = (dnnl_exec_arg_t){ DNNL_ARG_DST, mm->dst };
		if (bias) {
			DNNL_TRY(be, dnnl_memory_set_data_handle(mm->b, l->bias_host + j0), fail);
			args[3] = (dnnl_exec_arg_t){ DNNL_ARG_BIAS, mm->b };
		}
		DNNL_TRY(be, dnnl_primitive_execute(mm->prim, cpu->stream, bias ? 4 : 3, args), fail);
		DNNL_TRY(be, dnnl_stream_wait(cpu->stream), fail);
		if (dense)
			pd_cpu_copy2d(be, y + j0, ldy, cpu->qout, n, rows, n);
	}
fail:
	return;
}
