/*
 * pd_cpu_i8.c - products of kept-quantized layers in int8 (PD_QP_INT8).
 *
 * A Q8_0 weight is int8 values in blocks of 32 inputs with one scale each.
 * Each input row is quantized the same way (ggml's quantize_row_q8_0:
 * scale amax / 127, values rounded to the nearest, ties to even), so a
 * block's dot product is exact in int32 and
 *
 *   y[r, j] = sum over blocks b, in order, of (float)dot_b * (d_w[j, b] * d_x[r, b])
 *
 * accumulated in f32 with one fused multiply-add per block. AVX-512 VNNI's
 * vpdpbusd multiplies unsigned by signed bytes: weights are kept plus 128
 * (the layout's bytes) and each block's sum starts from -128 * sum(q_x),
 * taken when the input is quantized. The portable kernel does the same arithmetic in the same order: both give
 * the same bits, so a mesh of machines with and without VNNI agrees.
 *
 * The block quantization of a row depends only on its 32 values, so a
 * row split over processes (sequence parallel) or an input range split at
 * block boundaries (tensor parallel's row-parallel layers: the weight's
 * blocks are never cut) quantizes every block as one process does.
 *
 * Layout (pd_linear.i8): output rows in groups of 16 (the last padded with
 * zero rows); for each group, for each block of 32 inputs, PD_I8_BLOCK
 * bytes:
 *   512  q + 128 [k / 4][column][k % 4]  a 64-byte vector of 16 columns x 4 inputs per vpdpbusd
 *    32  d[column] as f16                the file's scales, unchanged
 * 544 bytes per 512 weights, as the file's Q8_0.
 */
#include "pd_cpu.h"
#include "pd_util.h"

#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define PD_I8_BLOCK 544
/* A tile: PD_I8_MR input rows by PD_I8_NG groups of 16 output rows, its
 * 12 int32 and 12 f32 accumulators in registers (measured on the AVX-512
 * EPYC with [1536, 3072] x [3072, 3072]: 6x2 and 5x2 equal, 4x3 within 1%,
 * 3x4 and 8x1 slower). */
#define PD_I8_MR 6
#define PD_I8_NG 2
#define PD_I8_COLS (16 * PD_I8_NG)
/* Input rows per task: the tasks of one tile column reuse its weights
 * from the cache. */
#define PD_I8_ROWS_PER_TASK 96

int pd_cpu_i8_has(enum pd_qtype t)
{
	return t == PD_Q_Q8_0;
}

int64_t pd_cpu_i8_groups(int64_t n_out)
{
	return (n_out + 15) / 16;
}

size_t pd_cpu_i8_bytes(int64_t n_out, int64_t n_in)
{
	return (size_t)pd_cpu_i8_groups(n_out) * (size_t)(n_in / 32) * PD_I8_BLOCK;
}

void pd_cpu_i8_pack(unsigned char *dst, enum pd_qtype t, int64_t n_out, int64_t n_in, const unsigned char *blocks,
		    size_t row_bytes)
{
	int64_t nb = n_in / 32, groups = pd_cpu_i8_groups(n_out);

	(void)t; /* Q8_0: pd_cpu_i8_has */
#pragma omp parallel for schedule(static)
	for (int64_t g = 0; g < groups; g++)
		for (int64_t b = 0; b < nb; b++) {
			unsigned char *o = dst + ((size_t)g * (size_t)nb + (size_t)b) * PD_I8_BLOCK;

			/* padding: value 0 (128 stored), scale 0 */
			memset(o, 128, 512);
			memset(o + 512, 0, 32);
			for (int c = 0; c < 16 && g * 16 + c < n_out; c++) {
				const unsigned char *s = blocks + (size_t)(g * 16 + c) * row_bytes + (size_t)b * 34;

				memcpy(o + 512 + 2 * c, s, 2);
				for (int k = 0; k < 32; k++)
					o[(k / 4) * 64 + c * 4 + k % 4] = (unsigned char)((int8_t)s[2 + k] + 128);
			}
		}
}

/* One block of 32 inputs: its values, scale and -128 * their sum. */
static void pd_i8_quant_block(const float *x, int8_t *q, float *d, int32_t *corr)
{
	float amax = 0, id;
	int32_t sum = 0;

	for (int k = 0; k < 32; k++)
		amax = fmaxf(amax, fabsf(x[k]));
	*d = amax / 127.0f;
	id = *d != 0 ? 1.0f / *d : 0.0f;
	for (int k = 0; k < 32; k++) {
		float v = nearbyintf(x[k] * id);

		/* NaN as the vector conversion makes it (then clamped) */
		v = v != v ? -127.0f : v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		q[k] = (int8_t)v;
		sum += q[k];
	}
	*corr = -128 * sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void pd_i8_quant_block_avx512(const float *x, int8_t *q,
											   float *d, int32_t *corr)
{
	__m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16), iv;
	__m512i q0, q1, lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
	float amax, id;

	amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
	*d = amax / 127.0f;
	id = *d != 0 ? 1.0f / *d : 0.0f;
	iv = _mm512_set1_ps(id);
	/* round to nearest even (the conversion's default mode) */
	q0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, iv)), lo), hi);
	q1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, iv)), lo), hi);
	_mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
	_mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
	*corr = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}
#endif

void pd_cpu_i8_quant_rows(const struct pd_cpu *cpu, const float *x, int64_t ldx, int64_t rows, int64_t n_in,
			  int8_t *xq, float *xd, int32_t *xc)
{
	int64_t nb = n_in / 32;

#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++)
		for (int64_t b = 0; b < nb; b++) {
			const float *s = x + r * ldx + b * 32;
			int8_t *q = xq + r * n_in + b * 32;

#if defined(__x86_64__) && defined(__GNUC__)
			if (cpu->avx512) {
				pd_i8_quant_block_avx512(s, q, xd + r * nb + b, xc + r * nb + b);
				continue;
			}
#endif
			(void)cpu;
			pd_i8_quant_block(s, q, xd + r * nb + b, xc + r * nb + b);
		}
}

/* GELU's tanh form, tanh from an exponential of our own (2^f by its
 * Taylor polynomial of degree 7 on [-0.5, 0.5], error below 1e-8) whose
 * vector form below does the same operations: both give the same bits,
 * within 2e-7 of tanhf's. (oneDNN's GELU runs in its own kernels.) */
static float pd_i8_gelu(float x)
{
	float u = (0.79788456080286535588f * x) * (1.0f + (0.044715f * x) * x);
	/* e = exp(-2 |u|) = 2^a; below 2^-100 it is nothing to 1 (NaN goes there too) */
	float a = fabsf(u) * -2.8853900817779268f, n, f, p, e, t;

	a = a >= -100.0f ? a : -100.0f;
	n = nearbyintf(a);
	f = a - n;
	p = fmaf(1.5252733804059841e-05f, f, 1.5403530393381610e-04f);
	p = fmaf(p, f, 1.3333558146428443e-03f);
	p = fmaf(p, f, 9.6181291076284772e-03f);
	p = fmaf(p, f, 5.5504108664821580e-02f);
	p = fmaf(p, f, 2.4022650695910071e-01f);
	p = fmaf(p, f, 6.9314718055994531e-01f);
	p = fmaf(p, f, 1.0f);
	e = ldexpf(p, (int)n);
	t = copysignf((1.0f - e) / (1.0f + e), u);
	return (0.5f * x) * (1.0f + t);
}

/* The tile T's post-operations into Y (NR rows of COLS, row stride LDY),
 * in oneDNN's order: SCALE (1 but for scaled weights), BIAS (or NULL), the
 * sum (PD_LIN_ACCUMULATE), GELU. */
static void pd_i8_post(const float *t, int nr, int64_t cols, float *y, int64_t ldy, const float *bias, float scale,
		       int flags)
{
	for (int r = 0; r < nr; r++)
		for (int64_t c = 0; c < cols; c++) {
			float v = t[r * PD_I8_COLS + c];

			if (scale != 1.0f)
				v *= scale;
			if (bias)
				v += bias[c];
			if (flags & PD_LIN_ACCUMULATE)
				v += y[r * ldy + c];
			if (flags & PD_LIN_GELU_TANH)
				v = pd_i8_gelu(v);
			y[r * ldy + c] = v;
		}
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512dq"))) static __m512 pd_i8_gelu_avx512(__m512 x)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	__m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286535588f), x),
				 _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x)));
	__m512 a = _mm512_mul_ps(_mm512_abs_ps(u), _mm512_set1_ps(-2.8853900817779268f)), n, f, p, e, t;

	/* a NaN in the first operand gives the second, as the scalar comparison */
	a = _mm512_max_ps(a, _mm512_set1_ps(-100.0f));
	n = _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	f = _mm512_sub_ps(a, n);
	p = _mm512_fmadd_ps(_mm512_set1_ps(1.5252733804059841e-05f), f, _mm512_set1_ps(1.5403530393381610e-04f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-03f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-03f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-02f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
	p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-01f));
	p = _mm512_fmadd_ps(p, f, one);
	e = _mm512_scalef_ps(p, n);
	t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
	/* t >= 0: putting u's sign bit on it is copysignf */
	t = _mm512_or_ps(t, _mm512_and_ps(u, _mm512_set1_ps(-0.0f)));
	return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, t));
}

__attribute__((target("avx512f,avx512dq"))) static void pd_i8_post_avx512(const float *t, int nr, int64_t cols,
									 float *y, int64_t ldy, const float *bias,
									 float scale, int flags)
{
	for (int r = 0; r < nr; r++)
		for (int64_t c = 0; c < cols; c += 16) {
			__mmask16 m = cols - c >= 16 ? 0xffff : (__mmask16)((1u << (cols - c)) - 1);
			__m512 v = _mm512_loadu_ps(t + r * PD_I8_COLS + c);

			if (scale != 1.0f)
				v = _mm512_mul_ps(v, _mm512_set1_ps(scale));
			if (bias)
				v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
			if (flags & PD_LIN_ACCUMULATE)
				v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, y + r * ldy + c));
			if (flags & PD_LIN_GELU_TANH)
				v = pd_i8_gelu_avx512(v);
			_mm512_mask_storeu_ps(y + r * ldy + c, m, v);
		}
}
#endif

/* A tile's inputs: PD_I8_MR rows (a short tile repeats its last) as
 * quantized values, their blocks' scales and corrections. */
struct pd_i8_rows {
	const int8_t *q[PD_I8_MR];      /* [n_in] each */
	const float *d[PD_I8_MR];       /* [n_in / 32] each */
	const int32_t *c[PD_I8_MR];     /* [n_in / 32] each */
};

/* The tile of rows X by the groups at W0 and W1 (nb blocks each):
 * T[r * PD_I8_COLS + c]. */
static void pd_i8_tile_portable(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1,
				int64_t nb, float *t)
{
	for (int r = 0; r < PD_I8_MR; r++)
		for (int g = 0; g < PD_I8_NG; g++)
			for (int c = 0; c < 16; c++) {
				float acc = 0;

				for (int64_t b = 0; b < nb; b++) {
					const unsigned char *o = (g ? w1 : w0) + (size_t)b * PD_I8_BLOCK;
					const int8_t *q = x->q[r] + b * 32;
					uint16_t dh;
					int32_t s = x->c[r][b];

					memcpy(&dh, o + 512 + 2 * c, 2);
					for (int k = 0; k < 32; k++)
						s += (int32_t)o[(k / 4) * 64 + c * 4 + k % 4] * q[k];
					acc = fmaf((float)s, pd_f16_to_f32(dh) * x->d[r][b], acc);
				}
				t[r * PD_I8_COLS + g * 16 + c] = acc;
			}
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	__m512 f00 = _mm512_setzero_ps(), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00;
	__m512 f30 = f00, f31 = f00, f40 = f00, f41 = f00, f50 = f00, f51 = f00;
	const int8_t *x0 = x->q[0], *x1 = x->q[1], *x2 = x->q[2], *x3 = x->q[3], *x4 = x->q[4], *x5 = x->q[5];

	for (int64_t b = 0; b < nb; b++, w0 += PD_I8_BLOCK, w1 += PD_I8_BLOCK) {
		/* each row's sums start from its block's -128 sum(q_x) */
		__m512i i00 = _mm512_set1_epi32(x->c[0][b]), i01 = i00, i10 = _mm512_set1_epi32(x->c[1][b]), i11 = i10;
		__m512i i20 = _mm512_set1_epi32(x->c[2][b]), i21 = i20, i30 = _mm512_set1_epi32(x->c[3][b]), i31 = i30;
		__m512i i40 = _mm512_set1_epi32(x->c[4][b]), i41 = i40, i50 = _mm512_set1_epi32(x->c[5][b]), i51 = i50;
		__m512 d0, d1;

		for (int k = 0; k < 32; k += 4) {
			__m512i a, v0 = _mm512_loadu_si512(w0 + k * 16), v1 = _mm512_loadu_si512(w1 + k * 16);

#define PD_I8_ROW(r)                                                   \
	a = _mm512_set1_epi32(*(const int32_t *)(x##r + b * 32 + k)); \
	i##r##0 = _mm512_dpbusd_epi32(i##r##0, v0, a);                 \
	i##r##1 = _mm512_dpbusd_epi32(i##r##1, v1, a)
			PD_I8_ROW(0);
			PD_I8_ROW(1);
			PD_I8_ROW(2);
			PD_I8_ROW(3);
			PD_I8_ROW(4);
			PD_I8_ROW(5);
#undef PD_I8_ROW
		}
		d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 512)));
		d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 512)));
#define PD_I8_SCALE(r)                                                                                  \
	do {                                                                                            \
		__m512 s = _mm512_set1_ps(x->d[r][b]);                                                  \
		f##r##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##0), _mm512_mul_ps(d0, s), f##r##0); \
		f##r##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##1), _mm512_mul_ps(d1, s), f##r##1); \
	} while (0)
		PD_I8_SCALE(0);
		PD_I8_SCALE(1);
		PD_I8_SCALE(2);
		PD_I8_SCALE(3);
		PD_I8_SCALE(4);
		PD_I8_SCALE(5);
#undef PD_I8_SCALE
	}
#define PD_I8_STORE(r)                                 \
	_mm512_storeu_ps(t + r * PD_I8_COLS, f##r##0); \
	_mm512_storeu_ps(t + r * PD_I8_COLS + 16, f##r##1)
	PD_I8_STORE(0);
	PD_I8_STORE(1);
	PD_I8_STORE(2);
	PD_I8_STORE(3);
	PD_I8_STORE(4);
	PD_I8_STORE(5);
#undef PD_I8_STORE
}
#endif

void pd_cpu_i8_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		      float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	int64_t nb = l->n_in / 32, pairs = (l->i8_groups + PD_I8_NG - 1) / PD_I8_NG;
	int64_t chunk = rows < PD_I8_ROWS_PER_TASK ? rows : PD_I8_ROWS_PER_TASK, chunks = (rows + chunk - 1) / chunk;
	const float *bias = (flags & PD_LIN_NO_BIAS) ? NULL : l->bias_host;
	float scale = l->scale;

	if (pd_cpu_grow(be, (void **)&cpu->xq, &cpu->xq_cap, (size_t)(rows * l->n_in), 1) ||
	    pd_cpu_grow(be, (void **)&cpu->xd, &cpu->xd_cap, (size_t)(rows * nb), sizeof(float)) ||
	    pd_cpu_grow(be, (void **)&cpu->xc, &cpu->xc_cap, (size_t)(rows * nb), sizeof(int32_t)))
		return;
	pd_cpu_i8_quant_rows(cpu, x, ldx, rows, l->n_in, cpu->xq, cpu->xd, cpu->xc);
#pragma omp parallel for schedule(static)
	for (int64_t task = 0; task < pairs * chunks; task++) {
		int64_t p = task / chunks, r1 = (task % chunks + 1) * chunk < rows ? (task % chunks + 1) * chunk : rows;
		/* an odd last group goes with itself (the copy computed, not stored) */
		const unsigned char *w0 = l->i8 + (size_t)(p * PD_I8_NG) * (size_t)nb * PD_I8_BLOCK;
		const unsigned char *w1 = p * PD_I8_NG + 1 < l->i8_groups ? w0 + (size_t)nb * PD_I8_BLOCK : w0;
		int64_t j0 = p * PD_I8_COLS, cols = l->n_out - j0 < PD_I8_COLS ? l->n_out - j0 : PD_I8_COLS;
		float t[PD_I8_MR * PD_I8_COLS];

		for (int64_t r0 = task % chunks * chunk; r0 < r1; r0 += PD_I8_MR) {
			struct pd_i8_rows xr;
			int nr = r1 - r0 < PD_I8_MR ? (int)(r1 - r0) : PD_I8_MR;

			for (int r = 0; r < PD_I8_MR; r++) {
				int64_t rr = r0 + (r < nr ? r : nr - 1);

				xr.q[r] = cpu->xq + rr * l->n_in;
				xr.d[r] = cpu->xd + rr * nb;
				xr.c[r] = cpu->xc + rr * nb;
			}
#if defined(__x86_64__) && defined(__GNUC__)
			if (cpu->vnni)
				pd_i8_tile_vnni(&xr, w0, w1, nb, t);
			else
#endif
				pd_i8_tile_portable(&xr, w0, w1, nb, t);
#if defined(__x86_64__) && defined(__GNUC__)
			if (cpu->avx512)
				pd_i8_post_avx512(t, nr, cols, y + r0 * ldy + j0, ldy, bias ? bias + j0 : NULL, scale, flags);
			else
#endif
				pd_i8_post(t, nr, cols, y + r0 * ldy + j0, ldy, bias ? bias + j0 : NULL, scale, flags);
		}
	}
}
