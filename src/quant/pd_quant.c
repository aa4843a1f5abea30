/*
 * pd_quant.c - decoding ggml's block formats and fp8 codes to float32, as
 * ggml-quants.c's dequantize_row_* do (ggml d99724f, src/ggml-common.h
 * block layouts). Every value is one float32 product, or a product and a
 * sum, of exactly representable operands in ggml's order: with the build's
 * -ffp-contract=off the results are ggml's bit for bit.
 */
#include "pd_quant.h"
#include "pd_util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define QK_K 256

static const struct pd_qtype_info pd_qtypes[PD_Q_COUNT] = {
	[PD_Q_F32] = { "f32", 1, 4, 1 },
	[PD_Q_F16] = { "f16", 1, 2, 1 },
	[PD_Q_Q4_0] = { "q4_0", 32, 18, 1 },
	[PD_Q_Q4_1] = { "q4_1", 32, 20, 1 },
	[PD_Q_Q5_0] = { "q5_0", 32, 22, 1 },
	[PD_Q_Q5_1] = { "q5_1", 32, 24, 1 },
	[PD_Q_Q8_0] = { "q8_0", 32, 34, 1 },
	[PD_Q_Q8_1] = { "q8_1", 32, 36, 0 },
	[PD_Q_Q2_K] = { "q2_K", QK_K, 84, 1 },
	[PD_Q_Q3_K] = { "q3_K", QK_K, 110, 1 },
	[PD_Q_Q4_K] = { "q4_K", QK_K, 144, 1 },
	[PD_Q_Q5_K] = { "q5_K", QK_K, 176, 1 },
	[PD_Q_Q6_K] = { "q6_K", QK_K, 210, 1 },
	[PD_Q_Q8_K] = { "q8_K", QK_K, 292, 0 },
	[PD_Q_I8] = { "i8", 1, 1, 0 },
	[PD_Q_I16] = { "i16", 1, 2, 0 },
	[PD_Q_I32] = { "i32", 1, 4, 0 },
	[PD_Q_I64] = { "i64", 1, 8, 0 },
	[PD_Q_F64] = { "f64", 1, 8, 1 },
	[PD_Q_BF16] = { "bf16", 1, 2, 1 },
};

const struct pd_qtype_info *pd_qtype_get(int id)
{
	if (id < 0 || id >= PD_Q_COUNT || !pd_qtypes[id].name)
		return NULL;
	return &pd_qtypes[id];
}

static const struct pd_qtype_info pd_fp8_info[2] = { { "f8_e4m3", 1, 1, 1 }, { "f8_e5m2", 1, 1, 1 } };

const struct pd_qtype_info *pd_quant_info(enum pd_qtype t)
{
	if (t == PD_Q_F8_E4M3 || t == PD_Q_F8_E5M2)
		return &pd_fp8_info[t == PD_Q_F8_E5M2];
	return pd_qtype_get((int)t);
}

size_t pd_quant_row_bytes(const struct pd_qtype_info *q, int64_t n)
{
	return (size_t)(n / q->block_size) * (size_t)q->block_bytes;
}

static inline float pd_half(const uint8_t *p)
{
	return pd_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

float pd_fp8_e4m3_to_f32(uint8_t c)
{
	int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
	float f;

	if (e == 15 && m == 7)
		return NAN;
	f = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
	return s ? -f : f;
}

float pd_fp8_e5m2_to_f32(uint8_t c)
{
	return pd_f16_to_f32((uint16_t)(c << 8));
}

/* Both formats' 256 values, made once (reads call this a row at a time). */
static float pd_fp8_tables[2][256];
static pthread_once_t pd_fp8_once = PTHREAD_ONCE_INIT;

static void pd_fp8_make_tables(void)
{
	for (int c = 0; c < 256; c++) {
		pd_fp8_tables[0][c] = pd_fp8_e4m3_to_f32((uint8_t)c);
		pd_fp8_tables[1][c] = pd_fp8_e5m2_to_f32((uint8_t)c);
	}
}

const float *pd_fp8_table(int e5m2)
{
	pthread_once(&pd_fp8_once, pd_fp8_make_tables);
	return pd_fp8_tables[e5m2 != 0];
}

void pd_fp8_decode(int e5m2, const uint8_t *src, float *dst, int64_t n, float scale)
{
	const float *table;

	pthread_once(&pd_fp8_once, pd_fp8_make_tables);
	table = pd_fp8_tables[e5m2 != 0];
	if (scale == 1.0f) {
		for (int64_t i = 0; i < n; i++)
			dst[i] = table[src[i]];
	} else {
		for (int64_t i = 0; i < n; i++)
			dst[i] = table[src[i]] * scale;
	}
}

/* Q4_K's and Q5_K's scales and mins of sub-blocks IS and IS + 1 (a group
 * of 64), times the super-block's d and dmin. */
static inline void pd_k_pair(const uint8_t *scales, int is, float d, float min, float *d1, float *m1, float *d2,
			     float *m2)
{
	uint8_t sc, m;

	pd_scale_min_k4(is + 0, scales, &sc, &m);
	*d1 = d * (float)sc;
	*m1 = min * (float)m;
	pd_scale_min_k4(is + 1, scales, &sc, &m);
	*d2 = d * (float)sc;
	*m2 = min * (float)m;
}

static void pd_dec_q4_0(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
		const float d = pd_half(b);
		const uint8_t *qs = b + 2;

		for (int j = 0; j < 16; j++) {
			y[j] = (float)((qs[j] & 0x0F) - 8) * d;
			y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
		}
	}
}

static void pd_dec_q4_1(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
		const float d = pd_half(b), m = pd_half(b + 2);
		const uint8_t *qs = b + 4;

		for (int j = 0; j < 16; j++) {
			y[j] = (float)(qs[j] & 0x0F) * d + m;
			y[j + 16] = (float)(qs[j] >> 4) * d + m;
		}
	}
}

static void pd_dec_q5_0(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
		const float d = pd_half(b);
		uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
		const uint8_t *qs = b + 6;

		for (int j = 0; j < 16; j++) {
			const uint8_t h0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
			const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);

			y[j] = (float)(((qs[j] & 0x0F) | h0) - 16) * d;
			y[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
		}
	}
}

static void pd_dec_q5_1(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
		const float d = pd_half(b), m = pd_half(b + 2);
		uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
		const uint8_t *qs = b + 8;

		for (int j = 0; j < 16; j++) {
			const uint8_t h0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
			const uint8_t h1 = (uint8_t)((qh >> (j + 12)) & 0x10);

			y[j] = (float)((qs[j] & 0x0F) | h0) * d + m;
			y[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
		}
	}
}

static void pd_dec_q8_0(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
		const float d = pd_half(b);
		const int8_t *qs = (const int8_t *)(b + 2);

		for (int j = 0; j < 32; j++)
			y[j] = (float)qs[j] * d;
	}
}

/* block_q2_K: scales[16], qs[64], d, dmin */
static void pd_dec_q2_k(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 84) {
		const uint8_t *sc = b, *q = b + 16;
		const float d = pd_half(b + 80), min = pd_half(b + 82);
		int is = 0;

		for (int n = 0; n < QK_K; n += 128) {
			int shift = 0;

			for (int j = 0; j < 4; j++) {
				uint8_t s = sc[is++];
				float dl = d * (float)(s & 0xF), ml = min * (float)(s >> 4);

				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((int8_t)((q[l] >> shift) & 3)) - ml;
				s = sc[is++];
				dl = d * (float)(s & 0xF);
				ml = min * (float)(s >> 4);
				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3)) - ml;
				shift += 2;
			}
			q += 32;
		}
	}
}

/* block_q3_K: hmask[32], qs[64], scales[12], d */
static void pd_dec_q3_k(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 110) {
		const uint8_t *hm = b, *q = b + 32, *s = b + 96;
		const float d_all = pd_half(b + 108);
		int8_t scales[16];
		uint8_t m = 1;
		int is = 0;

		for (int k = 0; k < 4; k++) {
			scales[k] = (int8_t)((s[k] & 15) | (s[8 + k] & 3) << 4);
			scales[4 + k] = (int8_t)((s[4 + k] & 15) | ((s[8 + k] >> 2) & 3) << 4);
			scales[8 + k] = (int8_t)((s[k] >> 4) | ((s[8 + k] >> 4) & 3) << 4);
			scales[12 + k] = (int8_t)((s[4 + k] >> 4) | ((s[8 + k] >> 6) & 3) << 4);
		}
		for (int n = 0; n < QK_K; n += 128) {
			int shift = 0;

			for (int j = 0; j < 4; j++) {
				float dl = d_all * (float)(scales[is++] - 32);

				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
				dl = d_all * (float)(scales[is++] - 32);
				for (int l = 0; l < 16; l++)
					*y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
				shift += 2;
				m = (uint8_t)(m << 1);
			}
			q += 32;
		}
	}
}

/* block_q4_K: d, dmin, scales[12], qs[128] */
static void pd_dec_q4_k(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 144) {
		const float d = pd_half(b), min = pd_half(b + 2);
		const uint8_t *scales = b + 4, *q = b + 16;
		int is = 0;

		for (int j = 0; j < QK_K; j += 64) {
			float d1, m1, d2, m2;

			pd_k_pair(scales, is, d, min, &d1, &m1, &d2, &m2);
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)(q[l] & 0xF) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)(q[l] >> 4) - m2;
			q += 32;
			is += 2;
		}
	}
}

/* block_q5_K: d, dmin, scales[12], qh[32], qs[128] */
static void pd_dec_q5_k(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 176) {
		const float d = pd_half(b), min = pd_half(b + 2);
		const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
		int is = 0;
		uint8_t u1 = 1, u2 = 2;

		for (int j = 0; j < QK_K; j += 64) {
			float d1, m1, d2, m2;

			pd_k_pair(scales, is, d, min, &d1, &m1, &d2, &m2);
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
			ql += 32;
			is += 2;
			u1 = (uint8_t)(u1 << 2);
			u2 = (uint8_t)(u2 << 2);
		}
	}
}

/* block_q6_K: ql[128], qh[64], scales[16] (int8), d */
static void pd_dec_q6_k(const uint8_t *b, float *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, b += 210) {
		const float d = pd_half(b + 208);
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);

		for (int n = 0; n < QK_K; n += 128) {
			for (int l = 0; l < 32; l++) {
				int is = l / 16;
				const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
				const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
				const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
				const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;

				y[l + 0] = d * (float)sc[is + 0] * (float)q1;
				y[l + 32] = d * (float)sc[is + 2] * (float)q2;
				y[l + 64] = d * (float)sc[is + 4] * (float)q3;
				y[l + 96] = d * (float)sc[is + 6] * (float)q4;
			}
			y += 128;
			ql += 64;
			qh += 32;
			sc += 8;
		}
	}
}

void pd_quant_decode(enum pd_qtype t, const void *src, float *dst, int64_t n)
{
	const uint8_t *b = src;
	const struct pd_qtype_info *q = pd_quant_info(t);
	int64_t nb = q ? n / q->block_size : 0;

	switch (t) {
	case PD_Q_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case PD_Q_F16:
		for (int64_t i = 0; i < n; i++)
			dst[i] = pd_half(b + 2 * i);
		break;
	case PD_Q_BF16:
		for (int64_t i = 0; i < n; i++) {
			uint32_t bits = (uint32_t)(b[2 * i] | b[2 * i + 1] << 8) << 16;

			memcpy(&dst[i], &bits, sizeof(float));
		}
		break;
	case PD_Q_F64:
		for (int64_t i = 0; i < n; i++) {
			double v;

			memcpy(&v, b + 8 * i, sizeof(v));
			dst[i] = (float)v;
		}
		break;
	case PD_Q_Q4_0:
		pd_dec_q4_0(b, dst, nb);
		break;
	case PD_Q_Q4_1:
		pd_dec_q4_1(b, dst, nb);
		break;
	case PD_Q_Q5_0:
		pd_dec_q5_0(b, dst, nb);
		break;
	case PD_Q_Q5_1:
		pd_dec_q5_1(b, dst, nb);
		break;
	case PD_Q_Q8_0:
		pd_dec_q8_0(b, dst, nb);
		break;
	case PD_Q_Q2_K:
		pd_dec_q2_k(b, dst, nb);
		break;
	case PD_Q_Q3_K:
		pd_dec_q3_k(b, dst, nb);
		break;
	case PD_Q_Q4_K:
		pd_dec_q4_k(b, dst, nb);
		break;
	case PD_Q_Q5_K:
		pd_dec_q5_k(b, dst, nb);
		break;
	case PD_Q_Q6_K:
		pd_dec_q6_k(b, dst, nb);
		break;
	case PD_Q_F8_E4M3:
	case PD_Q_F8_E5M2:
		pd_fp8_decode(t == PD_Q_F8_E5M2, b, dst, n, 1.0f);
		break;
	default:
		/* callers check decodes first; NaN marks a slip */
		for (int64_t i = 0; i < n; i++)
			dst[i] = NAN;
		break;
	}
}
