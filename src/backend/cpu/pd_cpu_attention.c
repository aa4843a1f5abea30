/*
 * pd_cpu_attention.c - softmax attention as two matrix products per query
 * block, with a vectorised softmax, and ring attention's merge.
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
void pd_cpu_softmax_rows(float *s, int64_t rows, int64_t n, float scale, float *lse, int64_t lse_stride,
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
void pd_cpu_scale_rows(float *o, int64_t ldo, int64_t rows, int cols, const float *inv)
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
void pd_cpu_scores_adjust(float *s, int64_t rows, int64_t n, float scale, const float *bias, int64_t i0,
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

void pd_cpu_attention_impl(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
			   int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
			   int64_t skv, int heads, int head_dim, float scale, const float *bias, int causal)
{
	struct pd_cpu *cpu = CPU(be);
	int bf16 = be->compute == PD_BF16;
	int64_t W = (int64_t)heads * head_dim, bq = skv > 0 ? (int64_t)(PD_ATTN_SCORES_BYTES / 4) / skv : sq;
	dnnl_data_type_t dt = pd_cpu_mm_type(be);
	/* operands' element size: 2 (bf16), 4 (f32, or bf16 values as f32) */
	size_t es = pd_cpu_operand_size(be);
	const void *qa = q, *ka = k, *va = v;
	uint16_t *p16 = NULL;
	float *p32 = NULL;                      /* bf16_f32: the rounded probabilities */
	float *inv;

	if (be->failed || sq == 0)
		return;
	/* blocks as equal as their count allows, in rows of 16 */
	bq = bq < PD_ATTN_QBLOCK_MIN ? PD_ATTN_QBLOCK_MIN : bq > PD_ATTN_QBLOCK_MAX ? PD_ATTN_QBLOCK_MAX : bq;
	bq = cpu->attn_qblock ? cpu->attn_qblock : bq;
	bq = ((sq + (sq + bq - 1) / bq - 1) / ((sq + bq - 1) / bq) + 15) / 16 * 16;
	bq = bq < sq ? bq : sq;
	/* a causal mask counted as the full product */
	be->flop += 4.0 * (double)sq * (double)skv * (double)W;
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
		char *b;

		if (pd_cpu_grow(be, &cpu->abf, &cpu->abf_cap, need, es))
			return;
		b = cpu->abf;
		pd_cpu_operand(be, b, q, sq, W, ldq);
		pd_cpu_operand(be, b + (size_t)(sq * W) * es, k, skv, W, ldk);
		pd_cpu_operand(be, b + (size_t)((sq + skv) * W) * es, v, skv, W, ldv);
		qa = b;
		ka = b + (size_t)(sq * W) * es;
		va = b + (size_t)((sq + skv) * W) * es;
		if (es == 2)
			p16 = (uint16_t *)(b + (size_t)((sq + 2 * skv) * W) * es);
		else
			p32 = (float *)(b + (size_t)((sq + 2 * skv) * W) * es);
		ldq = ldk = ldv = W;
	}
	for (int h = 0; h < heads; h++) {
		size_t off = (size_t)h * (size_t)head_dim;

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
			if (p32)
				pd_cpu_round_bf16(cpu, p32, cpu->scratch, mb, skv, skv);
			if (pd_cpu_gemm(be, mb, head_dim, skv, p16 ? (const void *)p16 : p32 ? (const void *)p32 : cpu->scratch, skv,
					(const char *)va + off * es, ldv, 0, out + i0 * ldo + (int64_t)h * head_dim, ldo,
					dt))
				return;
			pd_cpu_scale_rows(out + i0 * ldo + (int64_t)h * head_dim, ldo, mb, head_dim, inv);
		}
	}
}

void pd_cpu_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
		      int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
		      int64_t skv, int heads, int head_dim, float scale)
{
	pd_cpu_attention_impl(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, sq, skv, heads, head_dim, scale, NULL, 0);
}

void pd_cpu_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
			     const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
			     int head_dim, float scale, const float *bias, int causal)
{
	pd_cpu_attention_impl(be, out, ldo, NULL, q, ldq, k, ldk, v, ldv, s, s, heads, head_dim, scale, bias, causal);
}

void pd_cpu_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part,
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
