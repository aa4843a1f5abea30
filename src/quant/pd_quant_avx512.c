/*
 * pd_quant_avx512.c - AVX-512 decoders of the block formats a linear layer
 * decodes on every pass: every type ggml quantizes FLUX files to (Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K) and fp8. Each lane computes
 * what pd_quant.c's portable loop computes for its element: the same
 * float32 operations in the same order, no fused multiply-add, so the
 * values are the same bit for bit (the unit test compares both with ggml's).
 *
 * Built for every x86-64 machine with per-function targets; whether the
 * CPU runs them is asked once at run time.
 */
#include "pd_quant.h"
#include "pd_util.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define PD_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

PD_AVX512 static inline float pd_half(const uint8_t *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* 16 bytes from P as 16 int32 lanes, unsigned. */
PD_AVX512 static inline __m512i pd_u8x16(const uint8_t *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

PD_AVX512 static void pd_avx_q8_0(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
		const __m512 d = _mm512_set1_ps(pd_half(b));
		__m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2))));
		__m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18))));

		_mm512_storeu_ps(y, _mm512_mul_ps(lo, d));
		_mm512_storeu_ps(y + 16, _mm512_mul_ps(hi, d));
	}
}

PD_AVX512 static void pd_avx_q4_0(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i mask = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);

	for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
		const __m512 d = _mm512_set1_ps(pd_half(b));
		__m512i q = pd_u8x16(b + 2);
		__m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, mask), eight);
		__m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);

		_mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
		_mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
	}
}

PD_AVX512 static void pd_avx_q4_1(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i mask = _mm512_set1_epi32(0x0F);

	for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
		const __m512 d = _mm512_set1_ps(pd_half(b)), m = _mm512_set1_ps(pd_half(b + 2));
		__m512i q = pd_u8x16(b + 4);

		_mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, mask)), d), m));
		_mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), d), m));
	}
}

/* Q5's values of one block before scaling: lane j of *LO is element j,
 * of *HI element j + 16 (the fifth bits from the u32 at QH). */
PD_AVX512 static inline void pd_q5_lanes(const uint8_t *qh_at, const uint8_t *qs, __m512i *lo, __m512i *hi)
{
	const __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	const __m512i mask = _mm512_set1_epi32(0x0F), bit = _mm512_set1_epi32(0x10);
	uint32_t qh = (uint32_t)qh_at[0] | (uint32_t)qh_at[1] << 8 | (uint32_t)qh_at[2] << 16 | (uint32_t)qh_at[3] << 24;
	__m512i h = _mm512_set1_epi32((int)qh), q = pd_u8x16(qs);
	__m512i h0 = _mm512_and_si512(_mm512_slli_epi32(_mm512_srlv_epi32(h, idx), 4), bit);
	__m512i h1 = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_add_epi32(idx, _mm512_set1_epi32(12))), bit);

	*lo = _mm512_or_si512(_mm512_and_si512(q, mask), h0);
	*hi = _mm512_or_si512(_mm512_srli_epi32(q, 4), h1);
}

PD_AVX512 static void pd_avx_q5_0(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i k16 = _mm512_set1_epi32(16);

	for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
		const __m512 d = _mm512_set1_ps(pd_half(b));
		__m512i lo, hi;

		pd_q5_lanes(b + 2, b + 6, &lo, &hi);
		_mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, k16)), d));
		_mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, k16)), d));
	}
}

PD_AVX512 static void pd_avx_q5_1(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
		const __m512 d = _mm512_set1_ps(pd_half(b)), m = _mm512_set1_ps(pd_half(b + 2));
		__m512i lo, hi;

		pd_q5_lanes(b + 4, b + 8, &lo, &hi);
		_mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), m));
		_mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(hi), d), m));
	}
}

/* block_q2_K: scales[16], qs[64], d, dmin */
PD_AVX512 static void pd_avx_q2_k(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i three = _mm512_set1_epi32(3);

	for (int64_t i = 0; i < nb; i++, b += 84) {
		const uint8_t *sc = b, *q = b + 16;
		const float d = pd_half(b + 80), min = pd_half(b + 82);
		int is = 0;

		for (int n = 0; n < 256; n += 128, q += 32) {
			__m512i q0 = pd_u8x16(q), q1 = pd_u8x16(q + 16);

			for (int shift = 0; shift < 8; shift += 2) {
				for (int half = 0; half < 2; half++, y += 16) {
					uint8_t s = sc[is++];
					__m512 dl = _mm512_set1_ps(d * (float)(s & 0xF)), ml = _mm512_set1_ps(min * (float)(s >> 4));
					__m512i v = _mm512_and_si512(_mm512_srli_epi32(half ? q1 : q0, (unsigned)shift), three);

					_mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(dl, _mm512_cvtepi32_ps(v)), ml));
				}
			}
		}
	}
}

/* block_q3_K: hmask[32], qs[64], scales[12], d */
PD_AVX512 static void pd_avx_q3_k(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i three = _mm512_set1_epi32(3), four = _mm512_set1_epi32(4), zero = _mm512_setzero_si512();

	for (int64_t i = 0; i < nb; i++, b += 110) {
		const uint8_t *hm = b, *q = b + 32, *s = b + 96;
		const float d_all = pd_half(b + 108);
		__m512i h0 = pd_u8x16(hm), h1 = pd_u8x16(hm + 16);
		int8_t scales[16];
		int m = 1, is = 0;

		for (int k = 0; k < 4; k++) {
			scales[k] = (int8_t)((s[k] & 15) | (s[8 + k] & 3) << 4);
			scales[4 + k] = (int8_t)((s[4 + k] & 15) | ((s[8 + k] >> 2) & 3) << 4);
			scales[8 + k] = (int8_t)((s[k] >> 4) | ((s[8 + k] >> 4) & 3) << 4);
			scales[12 + k] = (int8_t)((s[4 + k] >> 4) | ((s[8 + k] >> 6) & 3) << 4);
		}
		for (int n = 0; n < 256; n += 128, q += 32) {
			__m512i q0 = pd_u8x16(q), q1 = pd_u8x16(q + 16);

			for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
				for (int half = 0; half < 2; half++, y += 16) {
					__m512 dl = _mm512_set1_ps(d_all * (float)(scales[is++] - 32));
					__m512i v = _mm512_and_si512(_mm512_srli_epi32(half ? q1 : q0, (unsigned)shift), three);
					/* minus 4 where the high bit is clear */
					__mmask16 clear = _mm512_cmpeq_epi32_mask(_mm512_and_si512(half ? h1 : h0,
												   _mm512_set1_epi32(m)), zero);

					v = _mm512_mask_sub_epi32(v, clear, v, four);
					_mm512_storeu_ps(y, _mm512_mul_ps(dl, _mm512_cvtepi32_ps(v)));
				}
			}
		}
	}
}

/* ggml's get_scale_min_k4, as in pd_quant.c. */
static inline void pd_scale_min(int j, const uint8_t *q, int *d, int *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
	}
}

PD_AVX512 static void pd_avx_q4_k(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i mask = _mm512_set1_epi32(0x0F);

	for (int64_t i = 0; i < nb; i++, b += 144) {
		const float d = pd_half(b), min = pd_half(b + 2);
		const uint8_t *scales = b + 4, *q = b + 16;

		for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
			int sc, m;
			__m512 d1, m1, d2, m2;

			pd_scale_min(is, scales, &sc, &m);
			d1 = _mm512_set1_ps(d * (float)sc);
			m1 = _mm512_set1_ps(min * (float)m);
			pd_scale_min(is + 1, scales, &sc, &m);
			d2 = _mm512_set1_ps(d * (float)sc);
			m2 = _mm512_set1_ps(min * (float)m);
			for (int l = 0; l < 32; l += 16) {
				__m512i v = pd_u8x16(q + l);
				__m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, mask));
				__m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));

				_mm512_storeu_ps(y + l, _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1));
				_mm512_storeu_ps(y + 32 + l, _mm512_sub_ps(_mm512_mul_ps(d2, hi), m2));
			}
		}
	}
}

/* block_q5_K: d, dmin, scales[12], qh[32], qs[128] */
PD_AVX512 static void pd_avx_q5_k(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i mask = _mm512_set1_epi32(0x0F), k16 = _mm512_set1_epi32(16), zero = _mm512_setzero_si512();

	for (int64_t i = 0; i < nb; i++, b += 176) {
		const float d = pd_half(b), min = pd_half(b + 2);
		const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
		int u1 = 1, u2 = 2;

		for (int is = 0; is < 8; is += 2, ql += 32, y += 64, u1 <<= 2, u2 <<= 2) {
			int sc, m;
			__m512 d1, m1, d2, m2;

			pd_scale_min(is, scales, &sc, &m);
			d1 = _mm512_set1_ps(d * (float)sc);
			m1 = _mm512_set1_ps(min * (float)m);
			pd_scale_min(is + 1, scales, &sc, &m);
			d2 = _mm512_set1_ps(d * (float)sc);
			m2 = _mm512_set1_ps(min * (float)m);
			for (int l = 0; l < 32; l += 16) {
				__m512i v = pd_u8x16(ql + l), h = pd_u8x16(qh + l);
				__mmask16 b1 = _mm512_cmpneq_epi32_mask(_mm512_and_si512(h, _mm512_set1_epi32(u1)), zero);
				__mmask16 b2 = _mm512_cmpneq_epi32_mask(_mm512_and_si512(h, _mm512_set1_epi32(u2)), zero);
				__m512i lo = _mm512_mask_add_epi32(_mm512_and_si512(v, mask), b1, _mm512_and_si512(v, mask), k16);
				__m512i hi = _mm512_mask_add_epi32(_mm512_srli_epi32(v, 4), b2, _mm512_srli_epi32(v, 4), k16);

				_mm512_storeu_ps(y + l, _mm512_sub_ps(_mm512_mul_ps(d1, _mm512_cvtepi32_ps(lo)), m1));
				_mm512_storeu_ps(y + 32 + l, _mm512_sub_ps(_mm512_mul_ps(d2, _mm512_cvtepi32_ps(hi)), m2));
			}
		}
	}
}

PD_AVX512 static void pd_avx_q6_k(const uint8_t *b, float *y, int64_t nb)
{
	const __m512i m4 = _mm512_set1_epi32(0x0F), m2 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);

	for (int64_t i = 0; i < nb; i++, b += 210) {
		const float d = pd_half(b + 208);
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);

		for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
			for (int l = 0; l < 32; l += 16) {
				int is = l / 16;
				__m512i a = pd_u8x16(ql + l), c = pd_u8x16(ql + l + 32), h = pd_u8x16(qh + l);
				__m512i q1 = _mm512_or_si512(_mm512_and_si512(a, m4),
							     _mm512_slli_epi32(_mm512_and_si512(h, m2), 4));
				__m512i q2 = _mm512_or_si512(_mm512_and_si512(c, m4),
							     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), m2), 4));
				__m512i q3 = _mm512_or_si512(_mm512_srli_epi32(a, 4),
							     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 4), m2), 4));
				__m512i q4 = _mm512_or_si512(_mm512_srli_epi32(c, 4),
							     _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4));

				/* d * sc first, then times q: ggml's left-to-right order */
				_mm512_storeu_ps(y + l, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 0]),
								      _mm512_cvtepi32_ps(_mm512_sub_epi32(q1, k32))));
				_mm512_storeu_ps(y + l + 32, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 2]),
									   _mm512_cvtepi32_ps(_mm512_sub_epi32(q2, k32))));
				_mm512_storeu_ps(y + l + 64, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 4]),
									   _mm512_cvtepi32_ps(_mm512_sub_epi32(q3, k32))));
				_mm512_storeu_ps(y + l + 96, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 6]),
									   _mm512_cvtepi32_ps(_mm512_sub_epi32(q4, k32))));
			}
		}
	}
}

/* fp8 through half precision: e5m2 is the upper byte of a half; e4m3's
 * seven low bits shifted into a half's exponent and mantissa are the value
 * times 2^-8 (subnormals included), so times 256 exactly; S.1111.111 is NaN. */
PD_AVX512 static void pd_avx_fp8(int e5m2, const uint8_t *src, float *dst, int64_t n)
{
	const __m512i low7 = _mm512_set1_epi32(0x7F), sign = _mm512_set1_epi32(0x80);
	const __m512 k256 = _mm512_set1_ps(256.0f), nan = _mm512_set1_ps(__builtin_nanf(""));
	int64_t i = 0;

	for (; i + 16 <= n; i += 16) {
		__m512i c = pd_u8x16(src + i), h;
		__m512 f;

		if (e5m2) {
			h = _mm512_slli_epi32(c, 8);
			f = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
		} else {
			__m512i mag = _mm512_and_si512(c, low7);
			__mmask16 isnan = _mm512_cmpeq_epi32_mask(mag, low7);

			h = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(c, sign), 8), _mm512_slli_epi32(mag, 7));
			f = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)), k256);
			f = _mm512_mask_mov_ps(f, isnan, nan);
		}
		_mm512_storeu_ps(dst + i, f);
	}
	for (; i < n; i++)
		dst[i] = e5m2 ? pd_fp8_e5m2_to_f32(src[i]) : pd_fp8_e4m3_to_f32(src[i]);
}

/* e4m3fn to bf16 in 16-bit lanes, 32 codes at a time: every e4m3 value is
 * a bf16 value, so no rounding: a normal code's exponent and mantissa
 * shifted by 4 plus the bias difference (127 - 7) << 7; the seven
 * subnormals (m x 2^-9) from a table; S.1111.111 the positive quiet NaN
 * 0x7fc0, as the float32 path gives. */
PD_AVX512 static void pd_avx_e4m3_bf16(const uint8_t *src, uint16_t *dst, int64_t n)
{
	const __m512i low7 = _mm512_set1_epi16(0x7f), bias = _mm512_set1_epi16(0x3C00);
	const __m512i qnan = _mm512_set1_epi16(0x7fc0), eight = _mm512_set1_epi16(8);
	const __m512i sub = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					     0x3C60, 0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80, 0x3B00, 0);
	int64_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(src + i)));
		__m512i mag = _mm512_and_si512(c, low7);
		__m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), bias);

		v = _mm512_mask_permutexvar_epi16(v, _mm512_cmplt_epu16_mask(mag, eight), mag, sub);
		v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_andnot_si512(low7, c), 8));
		_mm512_storeu_si512(dst + i, _mm512_mask_mov_epi16(v, _mm512_cmpeq_epi16_mask(mag, low7), qnan));
	}
	/* the tail: the float32 value's upper half, exact for the same reason */
	for (; i < n; i++) {
		float f = pd_fp8_e4m3_to_f32(src[i]);
		uint32_t u;

		memcpy(&u, &f, sizeof(u));
		dst[i] = (uint16_t)(u >> 16);
	}
}

static int pd_quant_cpu_ok(void)
{
	static int has = -1;

	/* a benign race: every thread computes the same answer */
	if (has < 0)
		/* every AVX-512F CPU has F16C (and older compilers cannot ask) */
		has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl");
	return has;
}

/* The block types' kernels, by ggml id. */
static void (*const pd_avx_blocks[PD_Q_COUNT])(const uint8_t *, float *, int64_t) = {
	[PD_Q_Q8_0] = pd_avx_q8_0, [PD_Q_Q4_0] = pd_avx_q4_0, [PD_Q_Q4_1] = pd_avx_q4_1,
	[PD_Q_Q5_0] = pd_avx_q5_0, [PD_Q_Q5_1] = pd_avx_q5_1, [PD_Q_Q2_K] = pd_avx_q2_k,
	[PD_Q_Q3_K] = pd_avx_q3_k, [PD_Q_Q4_K] = pd_avx_q4_k, [PD_Q_Q5_K] = pd_avx_q5_k,
	[PD_Q_Q6_K] = pd_avx_q6_k,
};

int pd_quant_avx512_has(enum pd_qtype t)
{
	if (!pd_quant_cpu_ok())
		return 0;
	return t == PD_Q_F8_E4M3 || t == PD_Q_F8_E5M2 || ((int)t >= 0 && t < PD_Q_COUNT && pd_avx_blocks[t]);
}

int pd_quant_decode_avx512(enum pd_qtype t, const void *src, float *dst, int64_t n)
{
	const struct pd_qtype_info *q = pd_quant_info(t);

	if (!q || !pd_quant_avx512_has(t))
		return -1;
	if (t == PD_Q_F8_E4M3 || t == PD_Q_F8_E5M2)
		pd_avx_fp8(t == PD_Q_F8_E5M2, src, dst, n);
	else
		pd_avx_blocks[t](src, dst, n / q->block_size);
	return 0;
}

int pd_quant_decode_bf16_avx512(enum pd_qtype t, const void *src, uint16_t *dst, int64_t n)
{
	if (!pd_quant_cpu_ok())
		return -1;
	if (t != PD_Q_F8_E4M3)
		return -1;
	pd_avx_e4m3_bf16(src, dst, n);
	return 0;
}

#else /* not x86-64 with GCC or Clang: the portable decoders only */

int pd_quant_avx512_has(enum pd_qtype t)
{
	(void)t;
	return 0;
}

int pd_quant_decode_avx512(enum pd_qtype t, const void *src, float *dst, int64_t n)
{
	(void)t;
	(void)src;
	(void)dst;
	(void)n;
	return -1;
}

int pd_quant_decode_bf16_avx512(enum pd_qtype t, const void *src, uint16_t *dst, int64_t n)
{
	(void)t;
	(void)src;
	(void)dst;
	(void)n;
	return -1;
}

#endif

void pd_quant_decode_fast(enum pd_qtype t, const void *src, float *dst, int64_t n)
{
	if (pd_quant_decode_avx512(t, src, dst, n))
		pd_quant_decode(t, src, dst, n);
}
