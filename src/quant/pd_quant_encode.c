/*
 * pd_quant_encode.c - float32 into ggml's block formats, as ggml's
 * quantize_row_*_ref do it (ggml-quants.c; the path llama-quantize takes
 * without an importance matrix), and into fp8 codes as PyTorch's
 * .to(float8_*) rounds. float32 arithmetic in ggml's order with the build's
 * -ffp-contract=off: the blocks equal ggml's byte for byte (the golden Q8_0
 * and Q4_K_S files are the test).
 */
#include "pd_quant.h"
#include "pd_util.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#define QK_K 256
#define PD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PD_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline void pd_put_half(uint8_t *p, float v)
{
	uint16_t h = pd_f32_to_f16(v);

	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

static inline float pd_get_half(const uint8_t *p)
{
	return pd_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* ggml's nearest_int: round half to even through the float adder (valid
 * for |v| <= 4194303). */
static inline int pd_nearest_int(float v)
{
	float f = v + 12582912.f;
	int i;

	memcpy(&i, &f, sizeof(i));
	return (i & 0x007fffff) - 0x00400000;
}

static void pd_enc_q8_0(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32, y += 34) {
		float amax = 0;

		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[j]));
		{
			const float d = amax / ((1 << 7) - 1), id = d ? 1.0f / d : 0.0f;

			pd_put_half(y, d);
			for (int j = 0; j < 32; j++)
				y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
		}
	}
}

/* The value of largest magnitude (the first of equals), as Q4_0 and Q5_0
 * pick it. */
static float pd_signed_max(const float *x)
{
	float amax = 0, max = 0;

	for (int j = 0; j < 32; j++)
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	return max;
}

static void pd_enc_q4_0(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32, y += 18) {
		const float d = pd_signed_max(x) / -8, id = d ? 1.0f / d : 0.0f;

		pd_put_half(y, d);
		for (int j = 0; j < 16; j++) {
			const float x0 = x[j] * id, x1 = x[16 + j] * id;
			const uint8_t xi0 = (uint8_t)PD_MIN(15, (int8_t)(x0 + 8.5f));
			const uint8_t xi1 = (uint8_t)PD_MIN(15, (int8_t)(x1 + 8.5f));

			y[2 + j] = (uint8_t)(xi0 | xi1 << 4);
		}
	}
}

static void pd_min_max(const float *x, float *min, float *max)
{
	*min = FLT_MAX;
	*max = -FLT_MAX;
	for (int j = 0; j < 32; j++) {
		if (x[j] < *min)
			*min = x[j];
		if (x[j] > *max)
			*max = x[j];
	}
}

static void pd_enc_q4_1(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32, y += 20) {
		float min, max;

		pd_min_max(x, &min, &max);
		{
			const float d = (max - min) / ((1 << 4) - 1), id = d ? 1.0f / d : 0.0f;

			pd_put_half(y, d);
			pd_put_half(y + 2, min);
			for (int j = 0; j < 16; j++) {
				const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
				const uint8_t xi0 = (uint8_t)PD_MIN(15, (int8_t)(x0 + 0.5f));
				const uint8_t xi1 = (uint8_t)PD_MIN(15, (int8_t)(x1 + 0.5f));

				y[4 + j] = (uint8_t)(xi0 | xi1 << 4);
			}
		}
	}
}

/* Q5's low nibbles into QS and fifth bits into the u32 at QH. */
static void pd_put_q5(const uint8_t *xi, uint8_t *qh_at, uint8_t *qs)
{
	uint32_t qh = 0;

	for (int j = 0; j < 16; j++) {
		qs[j] = (uint8_t)((xi[j] & 0x0F) | ((xi[16 + j] & 0x0F) << 4));
		qh |= ((xi[j] & 0x10u) >> 4) << (j + 0);
		qh |= ((xi[16 + j] & 0x10u) >> 4) << (j + 16);
	}
	for (int k = 0; k < 4; k++)
		qh_at[k] = (uint8_t)(qh >> (8 * k));
}

static void pd_enc_q5_0(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32, y += 22) {
		const float d = pd_signed_max(x) / -16, id = d ? 1.0f / d : 0.0f;
		uint8_t xi[32];

		pd_put_half(y, d);
		for (int j = 0; j < 32; j++)
			xi[j] = (uint8_t)PD_MIN(31, (int8_t)(x[j] * id + 16.5f));
		pd_put_q5(xi, y + 2, y + 6);
	}
}

static void pd_enc_q5_1(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += 32, y += 24) {
		float min, max;
		uint8_t xi[32];

		pd_min_max(x, &min, &max);
		{
			const float d = (max - min) / ((1 << 5) - 1), id = d ? 1.0f / d : 0.0f;

			pd_put_half(y, d);
			pd_put_half(y + 2, min);
			for (int j = 0; j < 32; j++)
				xi[j] = (uint8_t)((x[j] - min) * id + 0.5f);
			pd_put_q5(xi, y + 4, y + 8);
		}
	}
}

/* ggml's make_qkx2_quants: the scale and min of a group of N values with
 * levels 0..NMAX, searched over NSTEP + 1 candidate scales for the least
 * weighted error. */
static float pd_make_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
			  uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad)
{
	float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
	float iscale, scale, best_mad = 0;

	for (int i = 1; i < n; ++i) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		for (int i = 0; i < n; ++i)
			L[i] = 0;
		*the_min = -min;
		return 0.f;
	}
	iscale = nmax / (max - min);
	scale = 1 / iscale;
	for (int i = 0; i < n; ++i) {
		int l = pd_nearest_int(iscale * (x[i] - min));
		float diff;

		L[i] = (uint8_t)PD_MAX(0, PD_MIN(nmax, l));
		diff = scale * L[i] + min - x[i];
		diff = use_mad ? fabsf(diff) : diff * diff;
		best_mad += w[i] * diff;
	}
	if (nstep < 1) {
		*the_min = -min;
		return scale;
	}
	for (int is = 0; is <= nstep; ++is) {
		float sum_l = 0, sum_l2 = 0, sum_xl = 0, D;

		iscale = (rmin + rdelta * is + nmax) / (max - min);
		for (int i = 0; i < n; ++i) {
			int l = pd_nearest_int(iscale * (x[i] - min));

			l = PD_MAX(0, PD_MIN(nmax, l));
			Laux[i] = (uint8_t)l;
			sum_l += w[i] * l;
			sum_l2 += w[i] * l * l;
			sum_xl += w[i] * l * x[i];
		}
		D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			float mad = 0;

			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			for (int i = 0; i < n; ++i) {
				float diff = this_scale * Laux[i] + this_min - x[i];

				diff = use_mad ? fabsf(diff) : diff * diff;
				mad += w[i] * diff;
			}
			if (mad < best_mad) {
				for (int i = 0; i < n; ++i)
					L[i] = Laux[i];
				best_mad = mad;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* ggml's get_scale_min_k4. */
static inline void pd_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
	}
}

/* The 8 sub-blocks of 32 of a Q4_K or Q5_K super-block at X (ggml's
 * quantize_row_q4_K_ref / q5_K_ref: levels 0..NMAX, make_qkx2_quants with
 * RMIN and NSTEP): d, dmin and the 12 bytes of 6-bit scales and mins at Y,
 * each value's level into L. */
static void pd_enc_k_scales(const float *x, uint8_t *y, uint8_t *L, int nmax, float rmin, int nstep)
{
	uint8_t Laux[32], *scales = y + 4;
	float weights[32], mins[QK_K / 32], sc[QK_K / 32], max_scale = 0, max_min = 0, inv_scale, inv_min;

	for (int j = 0; j < QK_K / 32; ++j) {
		float sum_x2 = 0, av_x;

		for (int l = 0; l < 32; ++l)
			sum_x2 += x[32 * j + l] * x[32 * j + l];
		av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; ++l)
			weights[l] = av_x + fabsf(x[32 * j + l]);
		sc[j] = pd_make_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
		if (sc[j] > max_scale)
			max_scale = sc[j];
		if (mins[j] > max_min)
			max_min = mins[j];
	}
	inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	memset(scales, 0, 12);
	for (int j = 0; j < QK_K / 32; ++j) {
		uint8_t ls = (uint8_t)pd_nearest_int(inv_scale * sc[j]);
		uint8_t lm = (uint8_t)pd_nearest_int(inv_min * mins[j]);

		ls = PD_MIN(63, ls);
		lm = PD_MIN(63, lm);
		if (j < 4) {
			scales[j] = ls;
			scales[j + 4] = lm;
		} else {
			scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
			scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
			scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	pd_put_half(y, max_scale / 63.f);
	pd_put_half(y + 2, max_min / 63.f);
	for (int j = 0; j < QK_K / 32; ++j) {
		uint8_t s, m;
		float d, dm;

		pd_scale_min(j, scales, &s, &m);
		d = pd_get_half(y) * s;
		if (!d)
			continue;
		dm = pd_get_half(y + 2) * m;
		for (int ii = 0; ii < 32; ++ii) {
			int l = pd_nearest_int((x[32 * j + ii] + dm) / d);

			L[32 * j + ii] = (uint8_t)PD_MAX(0, PD_MIN(nmax, l));
		}
	}
}

/* block_q4_K: d, dmin, scales[12], qs[128] */
static void pd_enc_q4_k(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK_K, y += 144) {
		uint8_t L[QK_K], *q = y + 16;

		pd_enc_k_scales(x, y, L, 15, -1.f, 20);
		for (int j = 0; j < QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; ++l)
				q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
	}
}

/* block_q5_K: d, dmin, scales[12], qh[32], qs[128] (quantize_row_q5_K_ref) */
static void pd_enc_q5_k(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK_K, y += 176) {
		uint8_t L[QK_K], *qh = y + 16, *ql = y + 48, m1 = 1, m2 = 2;

		pd_enc_k_scales(x, y, L, 31, -0.5f, 15);
		memset(qh, 0, QK_K / 8);
		for (int n = 0; n < QK_K; n += 64, ql += 32, m1 = (uint8_t)(m1 << 2), m2 = (uint8_t)(m2 << 2))
			for (int j = 0; j < 32; ++j) {
				int l1 = L[n + j], l2 = L[n + j + 32];

				if (l1 > 15) {
					l1 -= 16;
					qh[j] |= m1;
				}
				if (l2 > 15) {
					l2 -= 16;
					qh[j] |= m2;
				}
				ql[j] = (uint8_t)(l1 | (l2 << 4));
			}
	}
}

/* ggml's make_qx_quants with rmse_type 1 (weights x^2) and no importance:
 * the scale of N values with signed levels -NMAX..NMAX-1, searched over 19
 * candidates; the levels plus NMAX into L (all 0 where every value is 0,
 * as ggml leaves them). */
static float pd_make_qx(int n, int nmax, const float *x, int8_t *L)
{
	float max = 0, amax = 0, iscale, sumlx = 0, suml2 = 0, scale, best;

	for (int i = 0; i < n; ++i)
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	if (amax < 1e-15f) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	iscale = -nmax / max;
	for (int i = 0; i < n; ++i) {
		int l = PD_MAX(-nmax, PD_MIN(nmax - 1, pd_nearest_int(iscale * x[i])));
		float w = x[i] * x[i];

		L[i] = (int8_t)(l + nmax);
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	scale = suml2 ? sumlx / suml2 : 0.0f;
	best = scale * sumlx;
	for (int is = -9; is <= 9; ++is) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; ++i) {
			int l = PD_MAX(-nmax, PD_MIN(nmax - 1, pd_nearest_int(iscale * x[i])));
			float w = x[i] * x[i];

			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; ++i)
				L[i] = (int8_t)(nmax + PD_MAX(-nmax, PD_MIN(nmax - 1, pd_nearest_int(iscale * x[i]))));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

/* block_q6_K: ql[128], qh[64], scales[16] (int8), d (quantize_row_q6_K_ref) */
static void pd_enc_q6_k(const float *x, uint8_t *y, int64_t nb)
{
	for (int64_t i = 0; i < nb; i++, x += QK_K, y += 210) {
		int8_t L[QK_K], *sc = (int8_t *)(y + 192);
		float scales[QK_K / 16], max_scale = 0, max_abs_scale = 0, iscale;
		uint8_t *ql = y, *qh = y + 128;

		for (int ib = 0; ib < QK_K / 16; ++ib) {
			scales[ib] = pd_make_qx(16, 32, x + 16 * ib, L + 16 * ib);
			if (fabsf(scales[ib]) > max_abs_scale) {
				max_abs_scale = fabsf(scales[ib]);
				max_scale = scales[ib];
			}
		}
		if (max_abs_scale < 1e-15f) {
			memset(y, 0, 210);
			continue;
		}
		iscale = -128.f / max_scale;
		pd_put_half(y + 208, 1 / iscale);
		for (int ib = 0; ib < QK_K / 16; ++ib)
			sc[ib] = (int8_t)PD_MIN(127, pd_nearest_int(iscale * scales[ib]));
		for (int j = 0; j < QK_K / 16; ++j) {
			float d = pd_get_half(y + 208) * sc[j];

			if (!d)
				continue;
			for (int ii = 0; ii < 16; ++ii) {
				int l = PD_MAX(-32, PD_MIN(31, pd_nearest_int(x[16 * j + ii] / d)));

				L[16 * j + ii] = (int8_t)(l + 32);
			}
		}
		for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
			for (int l = 0; l < 32; ++l) {
				int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
				int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;

				ql[l] = (uint8_t)(q1 | (q3 << 4));
				ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
				qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
						  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
			}
	}
}

/* float32 to fp8, round to nearest even, saturating at the largest finite
 * value (e4m3fn 448, e5m2 57344) as ComfyUI clamps before casting; NaN
 * stays NaN. Positive codes 0..max are in increasing order of value: the
 * nearest is found in the decoding table, a tie goes to the even code
 * (the even mantissa). The differences are exact: neighbours are within a
 * factor of 2 of the value (Sterbenz). */
static uint8_t pd_f32_to_fp8(float v, const float *table, int e5m2)
{
	const int top = e5m2 ? 0x7B : 0x7E;
	uint8_t sign = signbit(v) ? 0x80 : 0;
	float a = fabsf(v), dlo, dhi;
	int lo = 0, hi = top;

	if (isnan(v))
		return (uint8_t)(sign | 0x7F);
	if (a >= table[top])
		return (uint8_t)(sign | top);
	/* table[lo] <= a < table[hi] */
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;

		if (table[mid] <= a)
			lo = mid;
		else
			hi = mid;
	}
	dlo = a - table[lo];
	dhi = table[hi] - a;
	if (dlo < dhi || (dlo == dhi && lo % 2 == 0))
		return (uint8_t)(sign | lo);
	return (uint8_t)(sign | hi);
}

void pd_quant_encode_rows(enum pd_qtype t, enum pd_qtype via, float *src, int64_t rows, int64_t cols, void *dst)
{
	size_t rb = pd_quant_row_bytes(pd_quant_info(t), cols);

	/* encoding K-types is the slow part of writing a GGUF: rows in parallel */
#pragma omp parallel for schedule(dynamic, 16)
	for (int64_t r = 0; r < rows; r++) {
		float *v = src + r * cols;

		for (int64_t i = 0; via != PD_Q_F32 && i < cols; i++)
			v[i] = via == PD_Q_F16 ? pd_f16_to_f32(pd_f32_to_f16(v[i])) : pd_bf16_to_f32(pd_f32_to_bf16(v[i]));
		pd_quant_encode(t, v, (unsigned char *)dst + (size_t)r * rb, cols);
	}
}

int pd_quant_parse(const char *name, enum pd_qtype *t)
{
	if (strcasecmp(name, "fp8") == 0 || strcasecmp(name, "f8_e4m3fn") == 0 || strcasecmp(name, "f8_e4m3") == 0) {
		*t = PD_Q_F8_E4M3;
		return 0;
	}
	if (strcasecmp(name, "f8_e5m2") == 0) {
		*t = PD_Q_F8_E5M2;
		return 0;
	}
	for (int id = 0; id < PD_Q_COUNT; id++) {
		const struct pd_qtype_info *q = pd_qtype_get(id);

		if (q && strcasecmp(q->name, name) == 0) {
			*t = (enum pd_qtype)id;
			return 0;
		}
	}
	return -1;
}

int pd_quant_encodes(enum pd_qtype t)
{
	switch (t) {
	case PD_Q_F32: case PD_Q_F16: case PD_Q_BF16: case PD_Q_Q8_0: case PD_Q_Q4_0: case PD_Q_Q4_1:
	case PD_Q_Q5_0: case PD_Q_Q5_1: case PD_Q_Q4_K: case PD_Q_Q5_K: case PD_Q_Q6_K: case PD_Q_F8_E4M3:
	case PD_Q_F8_E5M2:
		return 1;
	default:
		return 0;
	}
}

void pd_quant_encode(enum pd_qtype t, const float *src, void *dst, int64_t n)
{
	const struct pd_qtype_info *q = pd_quant_info(t);
	int64_t nb = q ? n / q->block_size : 0;
	uint8_t *y = dst;

	switch (t) {
	case PD_Q_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case PD_Q_F16:
	case PD_Q_BF16:
		for (int64_t i = 0; i < n; i++) {
			uint16_t h = t == PD_Q_F16 ? pd_f32_to_f16(src[i]) : pd_f32_to_bf16(src[i]);

			y[2 * i] = (uint8_t)h;
			y[2 * i + 1] = (uint8_t)(h >> 8);
		}
		break;
	case PD_Q_Q8_0:
		pd_enc_q8_0(src, y, nb);
		break;
	case PD_Q_Q4_0:
		pd_enc_q4_0(src, y, nb);
		break;
	case PD_Q_Q4_1:
		pd_enc_q4_1(src, y, nb);
		break;
	case PD_Q_Q5_0:
		pd_enc_q5_0(src, y, nb);
		break;
	case PD_Q_Q5_1:
		pd_enc_q5_1(src, y, nb);
		break;
	case PD_Q_Q4_K:
		pd_enc_q4_k(src, y, nb);
		break;
	case PD_Q_Q5_K:
		pd_enc_q5_k(src, y, nb);
		break;
	case PD_Q_Q6_K:
		pd_enc_q6_k(src, y, nb);
		break;
	case PD_Q_F8_E4M3:
	case PD_Q_F8_E5M2: {
		const float *table = pd_fp8_table(t == PD_Q_F8_E5M2);

		for (int64_t i = 0; i < n; i++)
			y[i] = pd_f32_to_fp8(src[i], table, t == PD_Q_F8_E5M2);
		break;
	}
	default:
		/* callers check pd_quant_encodes first */
		memset(dst, 0, q ? pd_quant_row_bytes(q, n) : 0);
		break;
	}
}
