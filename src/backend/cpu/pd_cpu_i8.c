/*
 * pd_cpu_i8.c - products of kept-quantized layers in int8 (PD_QP_INT8).
 *
 * A Q8_0 weight is int8 values in blocks of 32 inputs with one scale each.
 * Each input row is quantized in blocks too (ggml's quantize_row_q8_0:
 * scale amax / 127, values rounded to the nearest, ties to even), so a
 * block's dot product is exact in int32 and
 *
 *   y[r, j] = sum over blocks b, in order, of (float)dot_b * (d_w[j, b] * d_x[r, b])
 *
 * accumulated in f32 with one fused multiply-add per block. That is three
 * f32 operations (convert, the scales' product, the sum) for every 8
 * vpdpbusd, which bound the kernel: a Q8_0 layer whose inputs are a
 * multiple of 256 ("wide", pd_i8_wide) takes its input rows in blocks of
 * 256 instead, one scale d_x per 8 of the weight's blocks, and
 *
 *   g[r, j, u] = sum over the 8 blocks b of block u, in order, of (float)dot_b * d_w[j, b]
 *   y[r, j] = sum over u, in order, of g[r, j, u] * d_x[r, u]
 *
 * two f32 operations a block and one each 256 inputs (on the AVX-512
 * EPYC at 1024², pdit bench --op-times: the layers at 1.56-1.64x the bf16
 * matmul rate, 1.47-1.52x with blocks of 32). The error that adds: a
 * block of 32 quantized with the scale of its 256, as ggml's Q8_K for the
 * K-quants (docs/quantization.md has the pictures). AVX-512 VNNI's
 * vpdpbusd multiplies unsigned by signed bytes: weights are kept plus 128
 * (the layout's bytes) and each block's sum starts from -128 * sum(q_x),
 * taken when the input is quantized. The portable kernel does the same arithmetic in the same order: both give
 * the same bits, so a mesh of machines with and without VNNI agrees.
 *
 * Requantized (PD_QP_INT8_W256, --quant-products int8-256): a wide Q8_0
 * layer's weights get one scale per 256 inputs of each output at load, as
 * its inputs have. For output j and inputs 256 u to 256 u + 255, with the
 * file's values w_k = d_b * q_k (exact in f32: an f16 times an integer of
 * 8 bits), D = max |w_k| / 127 and q'_k = w_k / D rounded to the nearest
 * (ties to even), within -127..127 (D 0: q' 0; a value not finite: D NaN,
 * q' 0). The block of the largest scale keeps its values (its largest is
 * 127 d_b, as ggml writes them); the others round to 1/127 of the 256's
 * largest, as the inputs do. Then a 256's sum is one int32 and
 *
 *   y[r, j] = sum over u, in order, of (float)(S + corr) * (D[j, u] * d_x[r, u])
 *
 * one fused multiply-add each 256 inputs (corr: -128 * sum(q_x) of the
 * 256, the 8 blocks' added), and AMX's tdpbsud takes 64 inputs deep,
 * four of them into one tile before its sums leave it. For each group of
 * 16 outputs, each 256 inputs, PD_I8W_BLOCK bytes:
 *  4096  q' + 128 [k / 4][column][k % 4] (the 8 blocks of 32 of Q8_0's
 *        layout, without their scales between)
 *    64  D[column] as f32
 * 4160 bytes per 4096 weights (8.1 bits a weight against the file's 8.5).
 *
 * The block quantization of a row depends only on its block's values (32,
 * or 256 for the K-quants and wide Q8_0 layers), so a row split over
 * processes (sequence parallel) quantizes every block as one process does;
 * tensor parallel on int8 products gathers whole input rows for its
 * row-parallel layers (pd_dit_shard.whole_inputs), so their blocks, and
 * whether a layer is wide, are those of the whole layer.
 *
 * Layout (pd_linear.i8): output rows in groups of 16 (the last padded with
 * zero rows); for each group, for each block of 32 inputs, PD_I8_BLOCK
 * bytes:
 *   512  q + 128 [k / 4][column][k % 4]  a 64-byte vector of 16 columns x 4 inputs per vpdpbusd
 *    32  d[column] as f16                the file's scales, unchanged
 * 544 bytes per 512 weights, as the file's Q8_0. Its 512 bytes are also
 * AMX's B operand as they are: on a CPU with AMX-INT8 this layout's
 * products take pd_cpu_amx.c's tiles, 16 input rows at a time.
 *
 * The K-quants (super-blocks of 256 inputs with integer sub-block scales)
 * take their input rows in blocks of 256, as ggml's dot products with
 * them do (its Q8_K): one scale d_x = amax / 127 per 256 inputs, so a
 * super-block's sub-block scales apply in int32 and its f32 work is done
 * once per 256 inputs, not once per 32 (the kernels' cost beside
 * vpdpbusd is that f32 work: 3 operations for every 8 vpdpbusd with
 * blocks of 32).
 *
 * Q4_K (8 sub-blocks of 32, w = d * sc * q - dmin * m with q in 0..15):
 *
 *   I = sum over sub-blocks b of sc_b * dot_b,  M = sum over b of m_b * sum_b(q_x)
 *   y[r, j] = sum over super-blocks of (float)I * (d * d_x) - (float)M * (dmin * d_x)
 *
 * I and M exact in int32, two fused multiply-adds a super-block. q is
 * unsigned already: no correction. M's terms go in pairs (vpdpwssd of the
 * mins and the input's sums of 32 as int16). For each group of 16
 * outputs, each super-block, PD_I8K_BLOCK bytes:
 *   2048  q[sub-block][k / 8][column][k % 4] in nibbles: the low one k % 8 < 4,
 *         the high one the next 4 (one load gives two vectors of 4 inputs)
 *    128  sc[sub-block][column]             the 6-bit scales
 *    128  m[sub-block / 2][column][sub-block % 2]  the 6-bit mins (one
 *         vpmovzxbw makes a pair's int16 for vpdpwssd)
 *     32  d[column] as f16, 32 dmin[column] as f16
 * 2368 bytes per 4096 weights: 2.8% more than the file's 2304.
 *
 * Q4_0 and Q4_1 (blocks of 32, w = d * q + m with q in 0..15; Q4_0's m is
 * -8 d): the input's blocks, and
 *
 *   y[r, j] = sum over blocks b of (float)dot_b * (d * d_x) + m * (d_x * sum(q_x))
 *
 * (Q4_0's m = -8 d computed in f32, exact). For each group of 16 outputs,
 * each block, 288 bytes (Q4_0: 4.5 bits a weight, as the file) or 320
 * (Q4_1: 5, as the file):
 *   256  q[k / 8][column][k % 4] in nibbles, as Q4_K's sub-blocks
 *    32  d[column] as f16 (Q4_1: then 32 of m[column] as f16)
 *
 * Q5_0 (blocks of 32, w = d * (q - 16), q in 0..31) takes Q8_0's layout
 * with its values q - 16: the same products, 544 bytes per 512 weights
 * (8.5 bits a weight against the file's 5.5).
 *
 * Q5_K is Q4_K's arithmetic with 5-bit q, kept as bytes: for each group,
 * each super-block, 4416 bytes (8.6 bits a weight against the file's 5.5):
 *  4096  q[sub-block][k / 4][column][k % 4]  (Q8_0's order, unsigned)
 *   128  sc, 128 m, 32 d, 32 dmin as Q4_K's
 *
 * Q6_K (16 sub-blocks of 16, w = d * sc * (q - 32), q in 0..63, sc a
 * signed byte):
 *
 *   dot_h = sum over the 16 inputs of q * q_x - 32 * sum(q_x)
 *   y[r, j] = sum over super-blocks of (float)(sum over h of sc_h * dot_h) * (d * d_x)
 *
 * exact in int32 (the input's sums of 16 taken when it is quantized).
 * For each group, each super-block, 4384 bytes (8.6 bits a weight against
 * the file's 6.6):
 *  4096  q as Q5_K's
 *   256  sc[sub-block][column] (signed)
 *    32  d[column] as f16
 *
 * fp8 e4m3 has no int8 form of its own: its blocks of 32 become Q8_0's
 * layout at load with a power-of-two scale, d = 2^(E - 6) for the block's
 * largest exponent E. e4m3's values are (8 + f) 2^(e - 3), so the 4 binades
 * below the largest value's top come out exact (|q| <= 120) and smaller
 * values within d / 2 (2^-7 of the block's largest); a scaled file's
 * scale multiplies the sums. 544 bytes per 512 weights: 6% more than the
 * file's.
 */
#include "pd_cpu.h"
#include "pd_util.h"

#include <float.h>
#include <math.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define PD_I8K_BLOCK 2368
#define PD_I8K5_BLOCK 4416
#define PD_I8K6_BLOCK 4384
/* A tile: PD_I8_MR input rows by PD_I8_NG groups of 16 output rows, its
 * 12 int32 and 12 f32 accumulators in registers (the K-quants': 24 int32,
 * the f32 sums in the tile's buffer) (measured on the AVX-512
 * EPYC with [1536, 3072] x [3072, 3072]: 6x2 and 5x2 equal, 4x3 within 1%,
 * 3x4 and 8x1 slower). */
#define PD_I8_MR 6
#define PD_I8_NG 2
#define PD_I8_COLS (16 * PD_I8_NG)
/* a tile's sums, either kernel's: AMX's rows are the more */
_Static_assert(PD_AMX_ROWS >= PD_I8_MR, "pd_cpu_i8_linear's tile buffer holds PD_AMX_ROWS rows");
/* Quantized input rows per task, about this many bytes of them (at least
 * one tile): a task runs its rows by one pair of groups, whose weights stay
 * in the core's cache; the tasks go panel by panel, so a thread's panel
 * stays in cache while the weights stream past it. */
#define PD_I8_PANEL_BYTES (1 << 20)

/* A K-quant: super-blocks of 256 inputs. */
static int pd_i8_k(enum pd_qtype t)
{
	return t == PD_Q_Q4_K || t == PD_Q_Q5_K || t == PD_Q_Q6_K;
}

int pd_cpu_i8_q8_layout(enum pd_qtype t)
{
	return t == PD_Q_Q8_0 || t == PD_Q_Q5_0 || t == PD_Q_F8_E4M3;
}

/* Whether a Q8_0 layer of N_IN inputs takes them in blocks of 256 (the
 * header's "wide"): the layer's whole inputs decide, never a shard's, as
 * tensor parallel on int8 products gathers whole input rows. */
static int pd_i8_wide(enum pd_qtype t, int64_t n_in)
{
	return t == PD_Q_Q8_0 && n_in % 256 == 0;
}

/* Inputs of one group's unit of T in the layout: a block (Q8_0, Q5_0,
 * fp8, Q4_0, Q4_1) or a super-block (the K-quants). */
static int64_t pd_i8_unit(enum pd_qtype t)
{
	return pd_i8_k(t) ? 256 : 32;
}

int pd_cpu_i8_has(enum pd_qtype t, int64_t n_in)
{
	/* fp8's blocks of 1 make any width: whole blocks of 32 inputs only */
	return (t == PD_Q_Q8_0 || t == PD_Q_Q5_0 || t == PD_Q_Q4_0 || t == PD_Q_Q4_1 || t == PD_Q_Q4_K ||
		t == PD_Q_Q5_K || t == PD_Q_Q6_K || t == PD_Q_F8_E4M3) &&
	       n_in % pd_i8_unit(t) == 0;
}

/* Bytes of that unit. */
static size_t pd_i8_unit_bytes(enum pd_qtype t)
{
	switch (t) {
	case PD_Q_Q4_K: return PD_I8K_BLOCK;
	case PD_Q_Q5_K: return PD_I8K5_BLOCK;
	case PD_Q_Q6_K: return PD_I8K6_BLOCK;
	case PD_Q_Q4_0: return 288;
	case PD_Q_Q4_1: return 320;
	default: return PD_I8_BLOCK;
	}
}

/* The integers of block B (inputs 32 B to 32 B + 31) of a row of T at ROW
 * into V, read from ggml's layouts as pd_quant_decode does: Q8_0's values,
 * Q5_0's q - 16 (both signed); Q4_0's, Q4_1's, Q4_K's, Q5_K's and Q6_K's q
 * (unsigned; Q6_K's - 32 is applied through the input's sums). */
static void pd_i8_ints(enum pd_qtype t, const unsigned char *row, int64_t b, int *v)
{
	const unsigned char *s;
	uint32_t qh;
	int sb = (int)(b % 8);

	switch (t) {
	case PD_Q_Q8_0:
		for (int k = 0; k < 32; k++)
			v[k] = (signed char)row[b * 34 + 2 + k];
		break;
	case PD_Q_Q5_0:
		s = row + b * 22;
		qh = (uint32_t)s[2] | (uint32_t)s[3] << 8 | (uint32_t)s[4] << 16 | (uint32_t)s[5] << 24;
		for (int j = 0; j < 16; j++) {
			v[j] = (int)((s[6 + j] & 0xF) | (((qh >> j) << 4) & 0x10)) - 16;
			v[j + 16] = (int)((s[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
		}
		break;
	case PD_Q_Q4_0:
	case PD_Q_Q4_1:
		s = row + b * (t == PD_Q_Q4_0 ? 18 : 20) + (t == PD_Q_Q4_0 ? 2 : 4);
		for (int j = 0; j < 16; j++) {
			v[j] = s[j] & 0xF;
			v[j + 16] = s[j] >> 4;
		}
		break;
	case PD_Q_Q4_K:
		s = row + (b / 8) * 144;
		for (int k = 0; k < 32; k++)
			v[k] = (s[16 + 32 * (sb / 2) + k] >> (4 * (sb % 2))) & 0xF;
		break;
	case PD_Q_Q5_K:
		/* d, dmin, 12 bytes of scales, qh[32], qs[128] */
		s = row + (b / 8) * 176;
		for (int k = 0; k < 32; k++)
			v[k] = ((s[48 + 32 * (sb / 2) + k] >> (4 * (sb % 2))) & 0xF) | (((s[16 + k] >> sb) & 1) << 4);
		break;
	case PD_Q_Q6_K:
		/* ql[128], qh[64], scales[16], d: input e of the super-block in
		 * its half c = e / 128, quarter j, lane l */
		s = row + (b / 8) * 210;
		for (int k = 0; k < 32; k++) {
			int e = sb * 32 + k, c = e / 128, j = e % 128 / 32, l = e % 32;

			v[k] = ((s[64 * c + l + 32 * (j & 1)] >> (4 * (j / 2))) & 0xF) |
			       (((s[128 + 32 * c + l] >> (2 * j)) & 3) << 4);
		}
		break;
	default:
		memset(v, 0, 32 * sizeof(*v));
		break;
	}
}

int64_t pd_cpu_i8_groups(int64_t n_out)
{
	return (n_out + 15) / 16;
}

int pd_cpu_i8_w256(enum pd_qproducts qp, enum pd_qtype t, int64_t n_in)
{
	return qp == PD_QP_INT8_W256 && pd_i8_wide(t, n_in);
}

size_t pd_cpu_i8_bytes(enum pd_qtype t, int64_t n_out, int64_t n_in, int w256)
{
	if (w256)
		return (size_t)pd_cpu_i8_groups(n_out) * (size_t)(n_in / 256) * PD_I8W_BLOCK;
	return (size_t)pd_cpu_i8_groups(n_out) * (size_t)(n_in / pd_i8_unit(t)) * pd_i8_unit_bytes(t);
}

/* 32 e4m3 values as int8 Q (the header's conversion) and their scale's
 * f16 bits into D. */
static void pd_i8_from_fp8(const unsigned char *src, int8_t *q, unsigned char *d)
{
	float v[32], amax = 0, scale = 0;
	uint16_t h;
	int e;

	pd_quant_decode(PD_Q_F8_E4M3, src, v, 32);
	for (int k = 0; k < 32; k++)
		amax = v[k] == v[k] ? fmaxf(amax, fabsf(v[k])) : amax;
	if (amax > 0) {
		/* amax = m 2^e with m in [0.5, 1): the largest exponent E is e - 1 */
		frexpf(amax, &e);
		scale = ldexpf(1.0f, e - 1 - 6);
	}
	for (int k = 0; k < 32; k++) {
		float r = scale > 0 && v[k] == v[k] ? nearbyintf(v[k] / scale) : 0.0f;

		q[k] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
	}
	h = pd_f32_to_f16(scale);
	memcpy(d, &h, 2);
}

/* Output C's 32 unsigned values V of a block into the nibbles at O (Q4_K's
 * sub-block order). */
static void pd_i8_put_nibbles(unsigned char *o, int c, const int *v)
{
	for (int k = 0; k < 32; k++)
		o[(k / 8) * 64 + c * 4 + k % 4] |= (unsigned char)(k % 8 < 4 ? v[k] : v[k] << 4);
}

/* The K-quants (super-blocks of 256) and Q4_0/Q4_1 (blocks of 32). */
static void pd_i8_pack_units(unsigned char *dst, enum pd_qtype t, int64_t n_out, int64_t n_in,
			     const unsigned char *blocks, size_t row_bytes)
{
	int64_t units = n_in / pd_i8_unit(t), groups = pd_cpu_i8_groups(n_out);
	size_t ub = pd_i8_unit_bytes(t), fb = (size_t)pd_quant_info(t)->block_bytes;
	/* where the q values end and the scales start */
	size_t qa = t == PD_Q_Q4_K ? 2048 : t == PD_Q_Q4_0 || t == PD_Q_Q4_1 ? 256 : 4096;

#pragma omp parallel for schedule(static)
	for (int64_t g = 0; g < groups; g++)
		for (int64_t u = 0; u < units; u++) {
			unsigned char *o = dst + ((size_t)g * (size_t)units + (size_t)u) * ub;

			/* padding: q 0, scales 0 */
			memset(o, 0, ub);
			for (int c = 0; c < 16 && g * 16 + c < n_out; c++) {
				const unsigned char *row = blocks + (size_t)(g * 16 + c) * row_bytes;
				const unsigned char *s = row + (size_t)u * fb;
				int v[32];

				if (t == PD_Q_Q4_0 || t == PD_Q_Q4_1) {
					pd_i8_ints(t, row, u, v);
					pd_i8_put_nibbles(o, c, v);
					memcpy(o + qa + 2 * c, s, 2);
					if (t == PD_Q_Q4_1)
						memcpy(o + qa + 32 + 2 * c, s + 2, 2);
					continue;
				}
				for (int sb = 0; sb < 8; sb++) {
					pd_i8_ints(t, row, u * 8 + sb, v);
					unsigned char *ob = o + sb * 512 + c * 4, *sc = o + qa + sb * 16 + c;

					if (t == PD_Q_Q4_K)
						pd_i8_put_nibbles(o + sb * 256, c, v);
					else
						for (int k = 0; k < 32; k++)
							ob[(k / 4) * 64 + k % 4] = (unsigned char)v[k];
					if (t != PD_Q_Q6_K) {
						unsigned char mn;

						/* the min in its pair */
						pd_scale_min_k4(sb, s + 4, sc, &mn);
						o[qa + 128 + (sb / 2) * 32 + c * 2 + sb % 2] = mn;
					}
				}
				if (t == PD_Q_Q6_K) {
					for (int h = 0; h < 16; h++)
						o[qa + h * 16 + c] = s[192 + h];
					memcpy(o + qa + 256 + 2 * c, s + 208, 2);
				} else {
					memcpy(o + qa + 256 + 2 * c, s, 2);
					memcpy(o + qa + 288 + 2 * c, s + 2, 2);
				}
			}
		}
}

/* Output C's 256 inputs at ROW (a Q8_0 row's 8 blocks) requantized (the
 * header's int8-256) into the group's unit at O. */
static void pd_i8_requant256(const unsigned char *row, int c, unsigned char *o)
{
	float w[256], amax = 0, d;

	pd_quant_decode(PD_Q_Q8_0, row, w, 256);
	for (int k = 0; k < 256; k++)
		amax = isfinite(w[k]) && amax == amax ? fmaxf(amax, fabsf(w[k])) : NAN;
	d = amax / 127.0f;
	for (int k = 0; k < 256; k++) {
		float v = d > 0 ? nearbyintf(w[k] / d) : 0.0f;

		v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		o[(k / 4) * 64 + c * 4 + k % 4] = (unsigned char)((int)v + 128);
	}
	memcpy(o + 4096 + 4 * c, &d, 4);
}

void pd_cpu_i8_pack(unsigned char *dst, enum pd_qtype t, int64_t n_out, int64_t n_in, const unsigned char *blocks,
		    size_t row_bytes, int w256)
{
	int64_t nb = n_in / 32, groups = pd_cpu_i8_groups(n_out);
	int fp8 = t == PD_Q_F8_E4M3;
	size_t fb = fp8 ? 32 : (size_t)pd_quant_info(t)->block_bytes;

	if (w256) {
#pragma omp parallel for schedule(static)
		for (int64_t g = 0; g < groups; g++)
			for (int64_t u = 0; u < n_in / 256; u++) {
				unsigned char *o = dst + ((size_t)g * (size_t)(n_in / 256) + (size_t)u) * PD_I8W_BLOCK;

				/* padding: value 0 (128 stored), scale 0 */
				memset(o, 128, 4096);
				memset(o + 4096, 0, 64);
				for (int c = 0; c < 16 && g * 16 + c < n_out; c++)
					pd_i8_requant256(blocks + (size_t)(g * 16 + c) * row_bytes + (size_t)u * 8 * 34, c,
							 o);
			}
		return;
	}
	if (!pd_cpu_i8_q8_layout(t)) {
		pd_i8_pack_units(dst, t, n_out, n_in, blocks, row_bytes);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int64_t g = 0; g < groups; g++)
		for (int64_t b = 0; b < nb; b++) {
			unsigned char *o = dst + ((size_t)g * (size_t)nb + (size_t)b) * PD_I8_BLOCK;

			/* padding: value 0 (128 stored), scale 0 */
			memset(o, 128, 512);
			memset(o + 512, 0, 32);
			for (int c = 0; c < 16 && g * 16 + c < n_out; c++) {
				const unsigned char *row = blocks + (size_t)(g * 16 + c) * row_bytes;
				const unsigned char *s = row + (size_t)b * fb;
				int8_t q[32];

				if (fp8) {
					pd_i8_from_fp8(s, q, o + 512 + 2 * c);
				} else {
					int v[32];

					pd_i8_ints(t, row, b, v);
					memcpy(o + 512 + 2 * c, s, 2);
					for (int k = 0; k < 32; k++)
						q[k] = (int8_t)v[k];
				}
				for (int k = 0; k < 32; k++)
					o[(k / 4) * 64 + c * 4 + k % 4] = (unsigned char)(q[k] + 128);
			}
		}
}

int pd_cpu_i8_avx2_fits(enum pd_qtype t, const unsigned char *i8, int64_t n_out, int64_t n_in)
{
	size_t blocks = (size_t)pd_cpu_i8_groups(n_out) * (size_t)(n_in / 32);

#if defined(__x86_64__) && defined(__GNUC__)
	/* the kernel converts the f16 scales itself */
	if (!pd_cpu_f16c())
		return 0;
#else
	return 0;
#endif
	if (!pd_cpu_i8_q8_layout(t))
		return 0;
	/* -128 is stored as 0; Q5_0's and fp8's values never are */
	for (size_t b = 0; t == PD_Q_Q8_0 && b < blocks; b++)
		if (memchr(i8 + b * PD_I8_BLOCK, 0, 512))
			return 0;
	return 1;
}

/* N inputs (32 or 256) quantized as one block: their values into Q, their
 * scale amax / 127 into D, the sums of each 16 values into S16. A NaN
 * makes the block's scale NaN (its products NaN, as decoded products'
 * would be). A scale below FLT_MIN (or NaN, or infinite) quantizes by 0:
 * its inverse would overflow, which the scalar clamp and the vector
 * conversion (inf to INT_MIN) take apart; NaN and infinite inputs then
 * give -127 and the rest 0, on both paths. */
static void pd_i8_quant_values(const float *x, int n, int8_t *q, float *d, int32_t *s16)
{
	float amax = 0, id;

	for (int k = 0; k < n; k++)
		amax = x[k] != x[k] || amax != amax ? NAN : fmaxf(amax, fabsf(x[k]));
	*d = amax / 127.0f;
	id = *d >= FLT_MIN ? 1.0f / *d : 0.0f;
	for (int k = 0; k < n; k++) {
		float v = nearbyintf(x[k] * id);

		/* NaN as the vector conversion makes it (then clamped) */
		v = v != v ? -127.0f : v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
		q[k] = (int8_t)v;
		s16[k / 16] = (k % 16 ? s16[k / 16] : 0) + q[k];
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void pd_i8_quant_values_avx512(const float *x, int n,
											    int8_t *q, float *d,
											    int32_t *s16)
{
	__m512 m = _mm512_setzero_ps(), iv;
	__m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
	__mmask16 nan = 0;
	float id;

	for (int k = 0; k < n; k += 16) {
		__m512 v = _mm512_loadu_ps(x + k);

		m = _mm512_max_ps(m, _mm512_abs_ps(v));
		nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
	}
	*d = (nan ? NAN : _mm512_reduce_max_ps(m)) / 127.0f;
	id = *d >= FLT_MIN ? 1.0f / *d : 0.0f;
	iv = _mm512_set1_ps(id);
	for (int k = 0; k < n; k += 16) {
		/* round to nearest even (the conversion's default mode) */
		__m512i v = _mm512_min_epi32(
			_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), iv)), lo), hi);

		_mm_storeu_si128((__m128i *)(q + k), _mm512_cvtepi32_epi8(v));
		s16[k / 16] = _mm512_reduce_add_epi32(v);
	}
}
#endif

/* pd_i8_quant_values, with VEC its AVX-512 form (the same bits). */
static void pd_i8_quant(const float *x, int n, int vec, int8_t *q, float *d, int32_t *s16)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (vec) {
		pd_i8_quant_values_avx512(x, n, q, d, s16);
		return;
	}
#endif
	(void)vec;
	pd_i8_quant_values(x, n, q, d, s16);
}

/* One block of 32 inputs (VEC as pd_i8_quant's): its values,
 * scale, -128 * their sum and scale * their sum; the sums of its two
 * halves into H unless NULL. */
static void pd_i8_quant_block(const float *x, int vec, int8_t *q, float *d, int32_t *corr, float *sx, int32_t *h)
{
	int32_t s16[2];

	pd_i8_quant(x, 32, vec, q, d, s16);
	if (h) {
		h[0] = s16[0];
		h[1] = s16[1];
	}
	*corr = -128 * (s16[0] + s16[1]);
	*sx = *d * (float)(s16[0] + s16[1]);
}

/* The K-quants' input: 256 values (VEC as above) into Q, their scale into
 * D, the sums of each 32 as int16 pairs into P (word k: sums 2k and
 * 2k + 1, in the low and the high half, vpdpwssd's order; |sum| <= 32 *
 * 127 fits) and of each 16 into H unless NULL. */
static void pd_i8_quant_super(const float *x, int vec, int8_t *q, float *d, int32_t *p, int32_t *h)
{
	int32_t s16[16];

	pd_i8_quant(x, 256, vec, q, d, s16);
	for (int k = 0; k < 4; k++) {
		uint32_t lo = (uint16_t)(int16_t)(s16[4 * k] + s16[4 * k + 1]);
		uint32_t hi = (uint16_t)(int16_t)(s16[4 * k + 2] + s16[4 * k + 3]);

		p[k] = (int32_t)(lo | hi << 16);
	}
	if (h)
		memcpy(h, s16, sizeof(s16));
}

/* A wide Q8_0 input: 256 values (VEC as above) into Q, their scale into
 * D, -128 * the sum of each 32 into CORR[8]. */
static void pd_i8_quant_wide(const float *x, int vec, int8_t *q, float *d, int32_t *corr)
{
	int32_t s16[16];

	pd_i8_quant(x, 256, vec, q, d, s16);
	for (int k = 0; k < 8; k++)
		corr[k] = -128 * (s16[2 * k] + s16[2 * k + 1]);
}

void pd_cpu_i8_quant_rows(const struct pd_cpu *cpu, const float *x, int64_t ldx, int64_t rows, int64_t n_in,
			  enum pd_i8_inputs inputs, int8_t *xq, float *xd, int32_t *xc, float *xs, int32_t *xh)
{
	int64_t nb = n_in / 32;
	int vec = cpu->avx512;

	if (inputs == PD_I8_IN_WIDE) {
#pragma omp parallel for schedule(static)
		for (int64_t r = 0; r < rows; r++)
			for (int64_t u = 0; u < n_in / 256; u++)
				pd_i8_quant_wide(x + r * ldx + u * 256, vec, xq + r * n_in + u * 256, xd + r * nb + u,
						 xc + r * nb + u * 8);
		return;
	}
	if (inputs == PD_I8_IN_SUPER) {
#pragma omp parallel for schedule(static)
		for (int64_t r = 0; r < rows; r++)
			for (int64_t u = 0; u < n_in / 256; u++)
				pd_i8_quant_super(x + r * ldx + u * 256, vec, xq + r * n_in + u * 256, xd + r * nb + u,
						  xc + r * nb + u * 4, xh ? xh + r * nb * 2 + u * 16 : NULL);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++)
		for (int64_t b = 0; b < nb; b++)
			pd_i8_quant_block(x + r * ldx + b * 32, vec, xq + r * n_in + b * 32, xd + r * nb + b,
					  xc + r * nb + b, xs + r * nb + b, xh ? xh + 2 * (r * nb + b) : NULL);
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
__attribute__((target("avx512f"))) static __m512 pd_i8_gelu_avx512(__m512 x)
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
	t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(_mm512_castps_si512(u),
											 _mm512_set1_epi32(INT32_MIN))));
	return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, t));
}

__attribute__((target("avx512f"))) static void pd_i8_post_avx512(const float *t, int nr, int64_t cols,
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

/* Four input bytes as one 32-bit lane for vpdpbusd's broadcast. */
static inline int32_t pd_i8_word(const int8_t *p)
{
	int32_t w;

	memcpy(&w, p, 4);
	return w;
}

/* A tile's inputs: PD_I8_MR rows (a short tile repeats its last) as
 * quantized values, their blocks' scales and sums. */
struct pd_i8_rows {
	const int8_t *q[PD_I8_MR];      /* [n_in] each */
	const float *d[PD_I8_MR];       /* [n_in / 32] each (K-quants, wide Q8_0: [n_in / 256]) */
	const int32_t *c[PD_I8_MR];     /* [n_in / 32] each: -128 * sum(q) (K-quants: [n_in / 64], sums of 32 in int16 pairs) */
	const float *s[PD_I8_MR];       /* [n_in / 32] each: scale * sum(q) (not the K-quants, nor wide Q8_0) */
	const int32_t *h[PD_I8_MR];     /* [n_in / 16] each: sum(q) of each 16 (Q6_K only) */
};

/* A group's f16 value for output C at P. */
static float pd_i8_half(const unsigned char *p, int c)
{
	uint16_t h;

	memcpy(&h, p + 2 * c, 2);
	return pd_f16_to_f32(h);
}

/* S plus row R's inputs 32 B + K0 to 32 B + K1 - 1 (of its block B) times
 * output C's values at O: the block's bytes, unsigned, in Q8_0's order
 * ([k / 4][column][k % 4]), or with NIBBLES its nibbles in Q4_K's ([k / 8]
 * [column][k % 4]). */
static int32_t pd_i8_dot(const struct pd_i8_rows *x, int r, int64_t b, const unsigned char *o, int c, int nibbles,
			 int k0, int k1, int32_t s)
{
	const int8_t *q = x->q[r] + b * 32;

	for (int k = k0; k < k1; k++) {
		int v = nibbles ? o[(k / 8) * 64 + c * 4 + k % 4] : o[(k / 4) * 64 + c * 4 + k % 4];

		if (nibbles)
			v = k % 8 < 4 ? v & 0xF : v >> 4;
		s += (int32_t)v * q[k];
	}
	return s;
}

/* ACC plus row R's inputs of unit B times output C of the unit at O
 * (T's layout), in the VNNI kernels' order of operations. */
static float pd_i8_unit_portable(enum pd_qtype t, const struct pd_i8_rows *x, int r, int64_t b,
				 const unsigned char *o, int c, float acc)
{
	switch (t) {
	case PD_Q_Q4_0:
	case PD_Q_Q4_1: {
		float d = pd_i8_half(o + 256, c), m = t == PD_Q_Q4_1 ? pd_i8_half(o + 288, c) : d * -8.0f;

		acc = fmaf((float)pd_i8_dot(x, r, b, o, c, 1, 0, 32, 0), d * x->d[r][b], acc);
		return fmaf(m, x->s[r][b], acc);
	}
	case PD_Q_Q4_K:
	case PD_Q_Q5_K: {
		int nib = t == PD_Q_Q4_K;
		const unsigned char *e = o + (nib ? 2048 : 4096);
		float d = pd_i8_half(e + 256, c), dmin = pd_i8_half(e + 288, c), dx = x->d[r][b];
		int32_t is = 0, im = 0;

		for (int sb = 0; sb < 8; sb++)
			is += (int32_t)e[sb * 16 + c] * pd_i8_dot(x, r, b * 8 + sb, o + sb * (nib ? 256 : 512), c, nib, 0, 32, 0);
		for (int k = 0; k < 4; k++) {
			uint32_t w = (uint32_t)x->c[r][b * 4 + k];
			const unsigned char *m = e + 128 + k * 32 + c * 2;

			im += (int32_t)m[0] * (int16_t)(w & 0xFFFF) + (int32_t)m[1] * (int16_t)(w >> 16);
		}
		acc = fmaf((float)is, d * dx, acc);
		return fmaf(-(float)im, dmin * dx, acc);
	}
	case PD_Q_Q6_K: {
		int32_t is = 0;

		for (int sb = 0; sb < 8; sb++)
			for (int h = 0; h < 2; h++) {
				int64_t xb = b * 8 + sb;

				is += (int32_t)(int8_t)o[4096 + (sb * 2 + h) * 16 + c] *
				      pd_i8_dot(x, r, xb, o + sb * 512, c, 0, 16 * h, 16 * h + 16, -32 * x->h[r][2 * xb + h]);
			}
		return fmaf((float)is, pd_i8_half(o + 4352, c) * x->d[r][b], acc);
	}
	default:
		/* Q8_0's layout: q + 128, from -128 sum(q_x) */
		return fmaf((float)pd_i8_dot(x, r, b, o, c, 0, 0, 32, x->c[r][b]), pd_i8_half(o + 512, c) * x->d[r][b],
			    acc);
	}
}

/* ACC plus row R's wide inputs U (a wide Q8_0 layer's 256) times output
 * C of the 8 blocks at O, in pd_i8_tile_wide_vnni's order. */
static float pd_i8_wide_portable(const struct pd_i8_rows *x, int r, int64_t u, const unsigned char *o, int c,
				 float acc)
{
	float g = 0;

	for (int64_t b = u * 8; b < u * 8 + 8; b++, o += PD_I8_BLOCK)
		g = fmaf((float)pd_i8_dot(x, r, b, o, c, 0, 0, 32, x->c[r][b]), pd_i8_half(o + 512, c), g);
	return fmaf(g, x->d[r][u], acc);
}

/* ACC plus row R's wide inputs U times output C of a requantized layer's
 * unit at O (the header's int8-256), in pd_i8_tile_w256_vnni's order. */
static float pd_i8_w256_portable(const struct pd_i8_rows *x, int r, int64_t u, const unsigned char *o, int c,
				 float acc)
{
	int32_t s = pd_cpu_i8_corr256(x->c[r] + u * 8);
	float d;

	for (int64_t b = 0; b < 8; b++)
		s = pd_i8_dot(x, r, u * 8 + b, o + b * 512, c, 0, 0, 32, s);
	memcpy(&d, o + 4096 + 4 * c, 4);
	return fmaf((float)s, d * x->d[r][u], acc);
}

/* The tile of rows X by the groups at W0 and W1 (UNITS units of T each;
 * FORM PD_I8_WIDE or PD_I8_W256: UNITS wide inputs of a wide Q8_0 layer,
 * its weights as the file's or requantized): T[r * PD_I8_COLS + c]. */
static void pd_i8_tile_portable(enum pd_qtype t, enum pd_i8_form form, const struct pd_i8_rows *x, const unsigned char *w0,
				const unsigned char *w1, int64_t units, float *tile)
{
	size_t ub = form == PD_I8_WIDE ? 8 * PD_I8_BLOCK : form == PD_I8_W256 ? PD_I8W_BLOCK : pd_i8_unit_bytes(t);

	for (int r = 0; r < PD_I8_MR; r++)
		for (int g = 0; g < PD_I8_NG; g++)
			for (int c = 0; c < 16; c++) {
				float acc = 0;

				for (int64_t b = 0; b < units; b++) {
					const unsigned char *o = (g ? w1 : w0) + (size_t)b * ub;

					acc = form == PD_I8_WIDE ? pd_i8_wide_portable(x, r, b, o, c, acc) :
					      form == PD_I8_W256 ? pd_i8_w256_portable(x, r, b, o, c, acc) :
								   pd_i8_unit_portable(t, x, r, b, o, c, acc);
				}
				tile[r * PD_I8_COLS + g * 16 + c] = acc;
			}
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The VNNI tiles' rows, written out (the registers are named, not indexed,
 * so the compiler keeps them in registers): M applied to rows 0 to 5; the
 * 12 f32 accumulators f<row><group>, zero, and the 12 int32 ones
 * i<row><group>; stored into T. */
#define PD_I8_EACH_ROW(M) \
	do {              \
		M(0);     \
		M(1);     \
		M(2);     \
		M(3);     \
		M(4);     \
		M(5);     \
	} while (0)
#define PD_I8_ACCUMULATORS                                                                      \
	__m512 f00 = _mm512_setzero_ps(), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00; \
	__m512 f30 = f00, f31 = f00, f40 = f00, f41 = f00, f50 = f00, f51 = f00;                  \
	__m512i i00, i01, i10, i11, i20, i21, i30, i31, i40, i41, i50, i51
#define PD_I8_STORE(r)                                          \
	do {                                                    \
		_mm512_storeu_ps(t + r * PD_I8_COLS, f##r##0);      \
		_mm512_storeu_ps(t + r * PD_I8_COLS + 16, f##r##1); \
	} while (0)
/* Each row's int32 sums start from V(r). */
#define PD_I8_START(V)                                                                                        \
	do {                                                                                                  \
		i00 = i01 = _mm512_set1_epi32(V(0));                                                          \
		i10 = i11 = _mm512_set1_epi32(V(1));                                                          \
		i20 = i21 = _mm512_set1_epi32(V(2));                                                          \
		i30 = i31 = _mm512_set1_epi32(V(3));                                                          \
		i40 = i41 = _mm512_set1_epi32(V(4));                                                          \
		i50 = i51 = _mm512_set1_epi32(V(5));                                                          \
	} while (0)
#define PD_I8_ZERO(r) 0
/* The int32 sums plus the inputs XO + 4 V to XO + 4 V + 3 of each row times
 * the byte vectors at Q0 + 64 V and Q1 + 64 V (V from V0 to V1 - 1: Q8_0's
 * order). PD_I8_DPBUSD is its step: it reads the loop's v, b0, b1 and xo_,
 * the tile's x and int32 accumulators. */
#define PD_I8_BYTES(q0, q1, xo, v0, v1)                                                                       \
	for (int64_t v = (v0), xo_ = (xo); v < (v1); v++) {                                                  \
		__m512i a, b0 = _mm512_loadu_si512((q0) + v * 64), b1 = _mm512_loadu_si512((q1) + v * 64);     \
		PD_I8_EACH_ROW(PD_I8_DPBUSD);                                                                  \
	}
#define PD_I8_DPBUSD(r)                                                         \
	a = _mm512_set1_epi32(pd_i8_word(x->q[r] + xo_ + v * 4));              \
	i##r##0 = _mm512_dpbusd_epi32(i##r##0, b0, a);                          \
	i##r##1 = _mm512_dpbusd_epi32(i##r##1, b1, a)
/* The same for 32 inputs at XO whose values are nibbles (Q4_K's order:
 * one load gives inputs 8 p to 8 p + 3 and the next 4); it needs the
 * caller's mask LOW (0x0F in every byte). */
#define PD_I8_NIBBLES(q0, q1, xo)                                                                              \
	for (int64_t p = 0, xo_ = (xo); p < 4; p++) {                                                         \
		__m512i a, n0 = _mm512_loadu_si512((q0) + p * 64), n1 = _mm512_loadu_si512((q1) + p * 64);      \
		__m512i l0 = _mm512_and_si512(n0, low), l1 = _mm512_and_si512(n1, low);                         \
		__m512i h0 = _mm512_and_si512(_mm512_srli_epi16(n0, 4), low);                                   \
		__m512i h1 = _mm512_and_si512(_mm512_srli_epi16(n1, 4), low);                                   \
		PD_I8_EACH_ROW(PD_I8_DPBUSD_NIBBLES);                                                           \
	}
#define PD_I8_DPBUSD_NIBBLES(r)                                                  \
	a = _mm512_set1_epi32(pd_i8_word(x->q[r] + xo_ + p * 8));               \
	i##r##0 = _mm512_dpbusd_epi32(i##r##0, l0, a);                           \
	i##r##1 = _mm512_dpbusd_epi32(i##r##1, l1, a);                           \
	a = _mm512_set1_epi32(pd_i8_word(x->q[r] + xo_ + p * 8 + 4));           \
	i##r##0 = _mm512_dpbusd_epi32(i##r##0, h0, a);                           \
	i##r##1 = _mm512_dpbusd_epi32(i##r##1, h1, a)
/* f += (float)i * (d * the row's block scale): the caller's d0 and d1
 * (the two groups' weight scales) and input block XB. */
#define PD_I8_SCALE(r)                                                                                  \
	do {                                                                                            \
		__m512 s = _mm512_set1_ps(x->d[r][xb]);                                                 \
		f##r##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##0), _mm512_mul_ps(d0, s), f##r##0); \
		f##r##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##1), _mm512_mul_ps(d1, s), f##r##1); \
	} while (0)
/* f += m * the row's block scale * sum: the caller's m0 and m1 (the two
 * groups' mins) and input block XB. */
#define PD_I8_MIN(r)                                                      \
	do {                                                              \
		__m512 sx = _mm512_set1_ps(x->s[r][xb]);                  \
		f##r##0 = _mm512_fmadd_ps(m0, sx, f##r##0);               \
		f##r##1 = _mm512_fmadd_ps(m1, sx, f##r##1);               \
	} while (0)
#define PD_I8_CORR(r) x->c[r][xb]
/* Q6_K's sums start from -32 * the sum of the row's 16 inputs of the
 * caller's half HF of block XB. */
#define PD_I8_Q6_SUM(r) (-32 * x->h[r][2 * xb + hf])

/* Q8_0's block XB at W0 and W1: the int32 sums of each row, started from
 * its block's -128 sum(q_x), and the two groups' weight scales D0, D1. */
#define PD_I8_Q8_BLOCK                                                                          \
	do {                                                                                    \
		PD_I8_START(PD_I8_CORR);                                                        \
		PD_I8_BYTES(w0, w1, xb * 32, 0, 8);                                             \
		d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 512)));          \
		d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 512)));          \
	} while (0)

/* Q8_0's layout (Q8_0, Q5_0, fp8); W256: a requantized wide layer (the
 * header's int8-256), NB its wide inputs, each 256's int32 sums from its
 * -128 sum(q_x), then one scaling. */
#define PD_I8_CORR256(r) pd_cpu_i8_corr256(x->c[r] + xb * 8)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static inline __attribute__((always_inline)) void
pd_i8_tile_vnni_body(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
		     float *t, const int w256)
{
	const size_t ub = w256 ? PD_I8W_BLOCK : PD_I8_BLOCK;
	PD_I8_ACCUMULATORS;

	for (int64_t xb = 0; xb < nb; xb++, w0 += ub, w1 += ub) {
		__m512 d0, d1;

		if (w256) {
			PD_I8_START(PD_I8_CORR256);
			PD_I8_BYTES(w0, w1, xb * 256, 0, 64);
			d0 = _mm512_loadu_ps(w0 + 4096);
			d1 = _mm512_loadu_ps(w1 + 4096);
		} else {
			PD_I8_Q8_BLOCK;
		}
		PD_I8_EACH_ROW(PD_I8_SCALE);
	}
	PD_I8_EACH_ROW(PD_I8_STORE);
}
#undef PD_I8_CORR256

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_vnni_body(x, w0, w1, nb, t, 0);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_w256_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
		     float *t)
{
	pd_i8_tile_vnni_body(x, w0, w1, nb, t, 1);
}

/* The int32 sums of rows R and R + 1 of inputs XO to XO + 4 NV - 1 by the
 * 16 outputs at W (Q8_0's layout: a block, NV 8; a requantized 256, 64)
 * on AVX2 without VNNI: vpmaddubsw with the input's sign
 * moved onto the weight (ggml's trick: |x| unsigned times sign(w, x), a
 * pair at most 2 x 127 x 127, never saturated), its pairs summed into
 * int32 by vpmaddwd: VNNI's integers without the +128 and its correction.
 * I: row R's columns 0-7 and 8-15, then row R + 1's. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
pd_i8_avx2_sums(const struct pd_i8_rows *x, int r, int64_t xo, int nv, const unsigned char *w, __m256i *i)
{
	const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);

	i[0] = i[1] = i[2] = i[3] = _mm256_setzero_si256();
	for (int v = 0; v < nv; v++) {
		/* columns 0-7 and 8-15, 4 inputs each, signed */
		__m256i b0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + v * 64)), flip);
		__m256i b1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + v * 64 + 32)), flip);
		__m256i a0 = _mm256_set1_epi32(pd_i8_word(x->q[r] + xo + v * 4));
		__m256i a1 = _mm256_set1_epi32(pd_i8_word(x->q[r + 1] + xo + v * 4));
		__m256i u0 = _mm256_sign_epi8(a0, a0), u1 = _mm256_sign_epi8(a1, a1);

#define PD_I8_PAIRS(u, b, a) _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(b, a)), ones)
		i[0] = _mm256_add_epi32(i[0], PD_I8_PAIRS(u0, b0, a0));
		i[1] = _mm256_add_epi32(i[1], PD_I8_PAIRS(u0, b1, a0));
		i[2] = _mm256_add_epi32(i[2], PD_I8_PAIRS(u1, b0, a1));
		i[3] = _mm256_add_epi32(i[3], PD_I8_PAIRS(u1, b1, a1));
#undef PD_I8_PAIRS
	}
}

/* Q8_0's layout on AVX2 without VNNI (pd_i8_avx2_sums): the block's sums
 * are VNNI's integers, and the scales apply in VNNI's order, so the
 * bits are the same. -128 has no sign to take (its negation is no byte):
 * a layer with such a weight runs the portable kernel (pd_cpu_i8_avx2).
 * Two rows by 16 outputs at a time: 4 int32 and 4 f32 sums in registers
 * of AVX2's 16. W256: a requantized wide layer (the header's int8-256),
 * NB its wide inputs, each one sum and one scaling (its values are never
 * -128). */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
pd_i8_tile_avx2_body(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
		     float *t, const int w256)
{
	for (int g = 0; g < PD_I8_NG; g++)
		for (int r = 0; r < PD_I8_MR; r += 2) {
			const unsigned char *w = g ? w1 : w0;
			__m256 f00 = _mm256_setzero_ps(), f01 = f00, f10 = f00, f11 = f00;

			for (int64_t xb = 0; xb < nb; xb++, w += w256 ? PD_I8W_BLOCK : PD_I8_BLOCK) {
				__m256i i[4];
				__m256 d0, d1, s;

				pd_i8_avx2_sums(x, r, xb * (w256 ? 256 : 32), w256 ? 64 : 8, w, i);
				if (w256) {
					d0 = _mm256_loadu_ps((const float *)(w + 4096));
					d1 = _mm256_loadu_ps((const float *)(w + 4096 + 32));
				} else {
					d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 512)));
					d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 528)));
				}
				s = _mm256_set1_ps(x->d[r][xb]);
				f00 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[0]), _mm256_mul_ps(d0, s), f00);
				f01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[1]), _mm256_mul_ps(d1, s), f01);
				s = _mm256_set1_ps(x->d[r + 1][xb]);
				f10 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[2]), _mm256_mul_ps(d0, s), f10);
				f11 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[3]), _mm256_mul_ps(d1, s), f11);
			}
			_mm256_storeu_ps(t + r * PD_I8_COLS + g * 16, f00);
			_mm256_storeu_ps(t + r * PD_I8_COLS + g * 16 + 8, f01);
			_mm256_storeu_ps(t + (r + 1) * PD_I8_COLS + g * 16, f10);
			_mm256_storeu_ps(t + (r + 1) * PD_I8_COLS + g * 16 + 8, f11);
		}
}

__attribute__((target("avx2,fma,f16c"))) static void
pd_i8_tile_avx2(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_avx2_body(x, w0, w1, nb, t, 0);
}

__attribute__((target("avx2,fma,f16c"))) static void
pd_i8_tile_w256_avx2(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
		     float *t)
{
	pd_i8_tile_avx2_body(x, w0, w1, nb, t, 1);
}

/* A wide Q8_0 layer's (NU wide inputs) on AVX2 without VNNI: the block
 * sums of pd_i8_tile_avx2, the f32 order of pd_i8_tile_wide_vnni (the f32
 * sums in T, each wide input's in registers). */
__attribute__((target("avx2,fma,f16c"))) static void
pd_i8_tile_wide_avx2(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nu,
		     float *t)
{
	for (int g = 0; g < PD_I8_NG; g++)
		for (int r = 0; r < PD_I8_MR; r += 2) {
			const unsigned char *w = g ? w1 : w0;
			float *t0 = t + r * PD_I8_COLS + g * 16, *t1 = t0 + PD_I8_COLS;

			memset(t0, 0, 16 * sizeof(float));
			memset(t1, 0, 16 * sizeof(float));
			for (int64_t u = 0; u < nu; u++) {
				__m256 g00 = _mm256_setzero_ps(), g01 = g00, g10 = g00, g11 = g00, dx;

				for (int64_t xb = u * 8; xb < u * 8 + 8; xb++, w += PD_I8_BLOCK) {
					__m256i i[4];
					__m256 d0, d1;

					pd_i8_avx2_sums(x, r, xb * 32, 8, w, i);
					d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 512)));
					d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 528)));
					g00 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[0]), d0, g00);
					g01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[1]), d1, g01);
					g10 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[2]), d0, g10);
					g11 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[3]), d1, g11);
				}
				dx = _mm256_set1_ps(x->d[r][u]);
				_mm256_storeu_ps(t0, _mm256_fmadd_ps(g00, dx, _mm256_loadu_ps(t0)));
				_mm256_storeu_ps(t0 + 8, _mm256_fmadd_ps(g01, dx, _mm256_loadu_ps(t0 + 8)));
				dx = _mm256_set1_ps(x->d[r + 1][u]);
				_mm256_storeu_ps(t1, _mm256_fmadd_ps(g10, dx, _mm256_loadu_ps(t1)));
				_mm256_storeu_ps(t1 + 8, _mm256_fmadd_ps(g11, dx, _mm256_loadu_ps(t1 + 8)));
			}
		}
}

/* The 256-bit kernels' int32 sums of rows R to R + 2 of Q8_0's block XB by
 * the 16 outputs at W into I[3][2] (columns 0-7 and 8-15), started from
 * the block's -128 sum(q_x), and its weight scales into D0 and D1; W256
 * (1 or 0): XB is a requantized layer's 256 (the header's int8-256). */
#define PD_I8_Q8_SUMS256(DPBUSD, W256)                                                                         \
	do {                                                                                                   \
		for (int k = 0; k < 3; k++)                                                                    \
			i[k][0] = i[k][1] = _mm256_set1_epi32((W256) ? pd_cpu_i8_corr256(x->c[r + k] + xb * 8) :   \
								       x->c[r + k][xb]);                       \
		for (int v = 0; v < ((W256) ? 64 : 8); v++) {                                                  \
			__m256i b0 = _mm256_loadu_si256((const __m256i *)(w + v * 64));                        \
			__m256i b1 = _mm256_loadu_si256((const __m256i *)(w + v * 64 + 32));                   \
                                                                                                               \
			for (int k = 0; k < 3; k++) {                                                          \
				__m256i a = _mm256_set1_epi32(pd_i8_word(x->q[r + k] + xb * ((W256) ? 256 : 32) + v * 4)); \
                                                                                                               \
				i[k][0] = DPBUSD(i[k][0], b0, a);                                              \
				i[k][1] = DPBUSD(i[k][1], b1, a);                                              \
			}                                                                                      \
		}                                                                                              \
		if (W256) {                                                                                    \
			d0 = _mm256_loadu_ps((const float *)(w + 4096));                                       \
			d1 = _mm256_loadu_ps((const float *)(w + 4096 + 32));                                  \
		} else {                                                                                       \
			d0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 512)));                     \
			d1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 528)));                     \
		}                                                                                              \
	} while (0)
/* Q8_0's layout with 256-bit VNNI, where the 512-bit kernels are not used:
 * vpdpbusd on 8 outputs at a time, the sums started from the block's
 * -128 sum(q_x) as pd_i8_tile_vnni's (the same integers and f32 order, so
 * the same bits). Three rows by 16 outputs at a time: 6 int32 and 6 f32
 * sums in registers. One body, two encodings: AVX-VNNI's (client CPUs
 * without AVX-512) and AVX-512 VNNI's 256-bit form (AVX-512 turned off for
 * pdit, as the tests run it here). W256 1: a requantized wide layer, NB
 * its wide inputs (pd_i8_tile_w256_vnni's order: each 256 one sum and one
 * scaling). */
#define PD_I8_TILE_256(DPBUSD, W256)                                                                           \
	for (int g = 0; g < PD_I8_NG; g++)                                                                     \
		for (int r = 0; r < PD_I8_MR; r += 3) {                                                        \
			const unsigned char *w = g ? w1 : w0;                                                  \
			__m256 f[3][2];                                                                        \
                                                                                                               \
			for (int k = 0; k < 3; k++)                                                            \
				f[k][0] = f[k][1] = _mm256_setzero_ps();                                       \
			for (int64_t xb = 0; xb < nb; xb++, w += (W256) ? PD_I8W_BLOCK : PD_I8_BLOCK) {        \
				__m256i i[3][2];                                                               \
				__m256 d0, d1;                                                                 \
                                                                                                               \
				PD_I8_Q8_SUMS256(DPBUSD, W256);                                                \
				for (int k = 0; k < 3; k++) {                                                  \
					__m256 s = _mm256_set1_ps(x->d[r + k][xb]);                            \
                                                                                                               \
					f[k][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[k][0]), _mm256_mul_ps(d0, s), \
								  f[k][0]);                                    \
					f[k][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[k][1]), _mm256_mul_ps(d1, s), \
								  f[k][1]);                                    \
				}                                                                              \
			}                                                                                      \
			for (int k = 0; k < 3; k++) {                                                          \
				_mm256_storeu_ps(t + (r + k) * PD_I8_COLS + g * 16, f[k][0]);                  \
				_mm256_storeu_ps(t + (r + k) * PD_I8_COLS + g * 16 + 8, f[k][1]);              \
			}                                                                                      \
		}

/* A wide Q8_0 layer's (NU wide inputs) in pd_i8_tile_wide_vnni's order:
 * the f32 sums in T, each wide input's g[3][2] in registers beside the 6
 * i's (with the weights and the input 15 of AVX2's 16, the block's scales
 * d0 and d1 taking the weights' registers after the vpdpbusd). */
#define PD_I8_TILE_WIDE_256(DPBUSD)                                                                            \
	for (int g = 0; g < PD_I8_NG; g++)                                                                     \
		for (int r = 0; r < PD_I8_MR; r += 3) {                                                        \
			const unsigned char *w = g ? w1 : w0;                                                  \
			float *tr = t + r * PD_I8_COLS + g * 16;                                               \
                                                                                                               \
			for (int k = 0; k < 3; k++)                                                            \
				memset(tr + k * PD_I8_COLS, 0, 16 * sizeof(float));                            \
			for (int64_t u = 0; u < nu; u++) {                                                     \
				__m256 gs[3][2];                                                               \
                                                                                                               \
				for (int k = 0; k < 3; k++)                                                    \
					gs[k][0] = gs[k][1] = _mm256_setzero_ps();                             \
				for (int64_t xb = u * 8; xb < u * 8 + 8; xb++, w += PD_I8_BLOCK) {             \
					__m256i i[3][2];                                                       \
					__m256 d0, d1;                                                         \
                                                                                                               \
					PD_I8_Q8_SUMS256(DPBUSD, 0);                                           \
					for (int k = 0; k < 3; k++) {                                          \
						gs[k][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[k][0]), d0, gs[k][0]); \
						gs[k][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[k][1]), d1, gs[k][1]); \
					}                                                                      \
				}                                                                              \
				for (int k = 0; k < 3; k++) {                                                  \
					__m256 dx = _mm256_set1_ps(x->d[r + k][u]);                            \
					float *o = tr + k * PD_I8_COLS;                                        \
                                                                                                               \
					_mm256_storeu_ps(o, _mm256_fmadd_ps(gs[k][0], dx, _mm256_loadu_ps(o))); \
					_mm256_storeu_ps(o + 8, _mm256_fmadd_ps(gs[k][1], dx, _mm256_loadu_ps(o + 8))); \
				}                                                                              \
			}                                                                                      \
		}

__attribute__((target("avx2,fma,f16c,avxvnni"))) static void
pd_i8_tile_w256_avxvnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
			float *t)
{
	PD_I8_TILE_256(_mm256_dpbusd_avx_epi32, 1)
}

__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) static void
pd_i8_tile_w256_vnni256(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb,
			float *t)
{
	PD_I8_TILE_256(_mm256_dpbusd_epi32, 1)
}

__attribute__((target("avx2,fma,f16c,avxvnni"))) static void
pd_i8_tile_avxvnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	PD_I8_TILE_256(_mm256_dpbusd_avx_epi32, 0)
}

__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) static void
pd_i8_tile_vnni256(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	PD_I8_TILE_256(_mm256_dpbusd_epi32, 0)
}

__attribute__((target("avx2,fma,f16c,avxvnni"))) static void
pd_i8_tile_wide_avxvnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nu,
			float *t)
{
	PD_I8_TILE_WIDE_256(_mm256_dpbusd_avx_epi32)
}

__attribute__((target("avx2,fma,f16c,avx512vl,avx512vnni"))) static void
pd_i8_tile_wide_vnni256(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nu,
			float *t)
{
	PD_I8_TILE_WIDE_256(_mm256_dpbusd_epi32)
}
#undef PD_I8_TILE_WIDE_256
#undef PD_I8_TILE_256
#undef PD_I8_Q8_SUMS256

/* The 256-bit kernels of the other types: each type's 512-bit kernel's
 * integers and f32 order on 8 outputs at a time, so the same bits; three
 * rows by 16 outputs a pass, the f32 sums in registers, one body for both
 * encodings as PD_I8_TILE_256's. PD_I8_SUMS256 adds to the int32 sums
 * i[3][2] the inputs XO + 4 V0 to XO + 4 V1 - 1 of rows R to R + 2 times
 * the weights at O, bytes in Q8_0's order or (NIB) nibbles in Q4_K's (the
 * low nibbles of load V / 2 for even V, the high for odd). */
#define PD_I8_SUMS256(DPBUSD, o, xo, v0, v1, nib)                                                              \
	for (int v = (v0); v < (v1); v++)                                                                      \
		for (int h = 0; h < 2; h++) {                                                                  \
			__m256i q = _mm256_loadu_si256((const __m256i *)((o) + ((nib) ? v / 2 : v) * 64 + h * 32)); \
                                                                                                               \
			if (nib)                                                                               \
				q = _mm256_and_si256(v % 2 ? _mm256_srli_epi16(q, 4) : q, low);                \
			for (int k = 0; k < 3; k++)                                                            \
				i[k][h] = DPBUSD(i[k][h], q, _mm256_set1_epi32(pd_i8_word(                     \
					x->q[r + k] + (xo) + ((nib) ? (v / 2) * 8 + (v % 2) * 4 : v * 4))));   \
		}
#define PD_I8_PASS256_BEGIN                                                                                    \
	const __m256i low = _mm256_set1_epi8(0x0F);                                                            \
                                                                                                               \
	(void)low;                                                                                             \
	for (int g = 0; g < PD_I8_NG; g++)                                                                     \
		for (int r = 0; r < PD_I8_MR; r += 3) {                                                        \
			const unsigned char *w = g ? w1 : w0;                                                  \
			__m256 f[3][2];                                                                        \
			__m256i i[3][2];                                                                       \
                                                                                                               \
			for (int k = 0; k < 3; k++)                                                            \
				f[k][0] = f[k][1] = _mm256_setzero_ps();
#define PD_I8_PASS256_END                                                                                      \
			for (int k = 0; k < 3; k++) {                                                          \
				_mm256_storeu_ps(t + (r + k) * PD_I8_COLS + g * 16, f[k][0]);                  \
				_mm256_storeu_ps(t + (r + k) * PD_I8_COLS + g * 16 + 8, f[k][1]);              \
			}                                                                                      \
		}
#define PD_I8_ZERO256(a)                                                                                       \
	for (int k = 0; k < 3; k++)                                                                            \
		a[k][0] = a[k][1] = _mm256_setzero_si256()

/* Q4_0 and Q4_1 (Q41): pd_i8_tile_q4_body's. */
#define PD_I8_TILE_Q4_256(DPBUSD, q41)                                                                         \
	PD_I8_PASS256_BEGIN                                                                                    \
	for (int64_t xb = 0; xb < nb; xb++, w += (q41) ? 320 : 288) {                                          \
		__m256 d[2], m[2];                                                                             \
                                                                                                               \
		PD_I8_ZERO256(i);                                                                              \
		PD_I8_SUMS256(DPBUSD, w, xb * 32, 0, 8, 1)                                                     \
		for (int h = 0; h < 2; h++) {                                                                  \
			d[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 256 + h * 16)));           \
			m[h] = (q41) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 288 + h * 16)))    \
				     : _mm256_mul_ps(d[h], _mm256_set1_ps(-8.0f));                              \
		}                                                                                              \
		for (int k = 0; k < 3; k++) {                                                                  \
			__m256 s = _mm256_set1_ps(x->d[r + k][xb]);                                            \
                                                                                                               \
			for (int h = 0; h < 2; h++)                                                            \
				f[k][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[k][h]), _mm256_mul_ps(d[h], s), f[k][h]); \
		}                                                                                              \
		for (int k = 0; k < 3; k++) {                                                                  \
			__m256 sx = _mm256_set1_ps(x->s[r + k][xb]);                                           \
                                                                                                               \
			for (int h = 0; h < 2; h++)                                                            \
				f[k][h] = _mm256_fmadd_ps(m[h], sx, f[k][h]);                                   \
		}                                                                                              \
	}                                                                                                      \
	PD_I8_PASS256_END

/* Q4_K (NIB 1: nibbles) and Q5_K (NIB 0: bytes): pd_i8_tile_k_body's; Q6_K
 * (Q6): pd_i8_tile_q6_k_vnni's. */
#define PD_I8_TILE_K256(DPBUSD, DPWSSD, nib, q6)                                                               \
	PD_I8_PASS256_BEGIN                                                                                    \
	const size_t qa = (q6) ? 4096 : (nib) ? 2048 : 4096;                                                   \
                                                                                                               \
	for (int64_t b = 0; b < nb; b++, w += (q6) ? PD_I8K6_BLOCK : (nib) ? PD_I8K_BLOCK : PD_I8K5_BLOCK) {   \
		__m256i s[3][2];                                                                               \
		__m256 dd[2], dm[2];                                                                           \
                                                                                                               \
		PD_I8_ZERO256(s);                                                                              \
		for (int sb = 0; sb < 8; sb++) {                                                               \
			const int64_t xb = b * 8 + sb;                                                         \
                                                                                                               \
			for (int hf = 0; hf < ((q6) ? 2 : 1); hf++) {                                          \
				__m256i sc[2];                                                                 \
                                                                                                               \
				for (int h = 0; h < 2; h++) {                                                  \
					__m128i c8 = _mm_loadl_epi64((const __m128i *)(w + qa + ((q6) ? (sb * 2 + hf) * 16 : sb * 16) + h * 8)); \
                                                                                                               \
					sc[h] = (q6) ? _mm256_cvtepi8_epi32(c8) : _mm256_cvtepu8_epi32(c8);    \
				}                                                                              \
				/* Q6_K's sums start from -32 sum(q_x) of the half's 16 inputs */              \
				for (int k = 0; k < 3; k++)                                                    \
					i[k][0] = i[k][1] = _mm256_set1_epi32((q6) ? -32 * x->h[r + k][2 * xb + hf] : 0); \
				PD_I8_SUMS256(DPBUSD, w + sb * ((nib) ? 256 : 512), xb * 32, (q6) ? 4 * hf : 0, \
					      (q6) ? 4 * hf + 4 : 8, nib)                                      \
				for (int k = 0; k < 3; k++)                                                    \
					for (int h = 0; h < 2; h++)                                            \
						s[k][h] = _mm256_add_epi32(s[k][h], _mm256_mullo_epi32(i[k][h], sc[h])); \
			}                                                                                      \
		}                                                                                              \
		/* the mins' sums, in the i's (none for Q6_K) */                                               \
		PD_I8_ZERO256(i);                                                                              \
		for (int kk = 0; kk < ((q6) ? 0 : 4); kk++)                                                    \
			for (int h = 0; h < 2; h++) {                                                          \
				__m256i mp = _mm256_cvtepu8_epi16(                                             \
					_mm_loadu_si128((const __m128i *)(w + qa + 128 + kk * 32 + h * 16)));  \
                                                                                                               \
				for (int k = 0; k < 3; k++)                                                    \
					i[k][h] = DPWSSD(i[k][h], mp, _mm256_set1_epi32(x->c[r + k][b * 4 + kk])); \
			}                                                                                      \
		for (int h = 0; h < 2; h++) {                                                                  \
			dd[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + ((q6) ? 4352 : qa + 256) + h * 16))); \
			dm[h] = (q6) ? _mm256_setzero_ps()                                                     \
				     : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + qa + 288 + h * 16))); \
		}                                                                                              \
		for (int k = 0; k < 3; k++) {                                                                  \
			__m256 dx = _mm256_set1_ps(x->d[r + k][b]);                                            \
                                                                                                               \
			for (int h = 0; h < 2; h++)                                                            \
				f[k][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[k][h]), _mm256_mul_ps(dd[h], dx), f[k][h]); \
			for (int h = 0; !(q6) && h < 2; h++)                                                   \
				f[k][h] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(i[k][h]), _mm256_mul_ps(dm[h], dx), f[k][h]); \
		}                                                                                              \
	}                                                                                                      \
	PD_I8_PASS256_END

/* Each type's tile in one encoding: SUFFIX, its TARGET, its vpdpbusd and
 * vpdpwssd. */
#define PD_I8_TILES_256(SUFFIX, TARGET, DPBUSD, DPWSSD)                                                        \
	__attribute__((target(TARGET))) static void pd_i8_tile_q4_0_##SUFFIX(                                  \
		const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t) \
	{                                                                                                      \
		PD_I8_TILE_Q4_256(DPBUSD, 0)                                                                   \
	}                                                                                                      \
	__attribute__((target(TARGET))) static void pd_i8_tile_q4_1_##SUFFIX(                                  \
		const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t) \
	{                                                                                                      \
		PD_I8_TILE_Q4_256(DPBUSD, 1)                                                                   \
	}                                                                                                      \
	__attribute__((target(TARGET))) static void pd_i8_tile_q4_k_##SUFFIX(                                  \
		const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t) \
	{                                                                                                      \
		PD_I8_TILE_K256(DPBUSD, DPWSSD, 1, 0)                                                          \
	}                                                                                                      \
	__attribute__((target(TARGET))) static void pd_i8_tile_q5_k_##SUFFIX(                                  \
		const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t) \
	{                                                                                                      \
		PD_I8_TILE_K256(DPBUSD, DPWSSD, 0, 0)                                                          \
	}                                                                                                      \
	__attribute__((target(TARGET))) static void pd_i8_tile_q6_k_##SUFFIX(                                  \
		const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t) \
	{                                                                                                      \
		PD_I8_TILE_K256(DPBUSD, DPWSSD, 0, 1)                                                          \
	}

PD_I8_TILES_256(avxvnni, "avx2,fma,f16c,avxvnni", _mm256_dpbusd_avx_epi32, _mm256_dpwssd_avx_epi32)
PD_I8_TILES_256(vnni256, "avx2,fma,f16c,avx512vl,avx512vnni", _mm256_dpbusd_epi32, _mm256_dpwssd_epi32)
#undef PD_I8_TILES_256
#undef PD_I8_TILE_K256
#undef PD_I8_TILE_Q4_256
#undef PD_I8_ZERO256
#undef PD_I8_PASS256_END
#undef PD_I8_PASS256_BEGIN
#undef PD_I8_SUMS256

/* Q4_0 and Q4_1 (Q41): nibbles, d and m per block. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static inline __attribute__((always_inline)) void
pd_i8_tile_q4_body(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t,
		   const int q41)
{
	const __m512i low = _mm512_set1_epi8(0x0F);
	const size_t ub = q41 ? 320 : 288;
	PD_I8_ACCUMULATORS;

	for (int64_t xb = 0; xb < nb; xb++, w0 += ub, w1 += ub) {
		__m512 d0, d1, m0, m1;

		PD_I8_START(PD_I8_ZERO);
		PD_I8_NIBBLES(w0, w1, xb * 32);
		d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 256)));
		d1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 256)));
		if (q41) {
			m0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 288)));
			m1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 288)));
		} else {
			m0 = _mm512_mul_ps(d0, _mm512_set1_ps(-8.0f));
			m1 = _mm512_mul_ps(d1, _mm512_set1_ps(-8.0f));
		}
		PD_I8_EACH_ROW(PD_I8_SCALE);
		PD_I8_EACH_ROW(PD_I8_MIN);
	}
	PD_I8_EACH_ROW(PD_I8_STORE);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_q4_0_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_q4_body(x, w0, w1, nb, t, 0);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_q4_1_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_q4_body(x, w0, w1, nb, t, 1);
}

/* The K-quants' kernels keep the tile's f32 sums in T (zero first, added
 * to once a super-block) and 12 int32 sums s<row><group> of each
 * super-block's scaled sub-block sums in registers beside the i's. */
#define PD_I8_KSUMS __m512i s00, s01, s10, s11, s20, s21, s30, s31, s40, s41, s50, s51
#define PD_I8_KSUMS_ZERO(r) s##r##0 = s##r##1 = _mm512_setzero_si512()
#define PD_I8_T_ZERO(r) PD_I8_STORE_T(r, _mm512_setzero_ps(), _mm512_setzero_ps())
#define PD_I8_STORE_T(r, v0, v1)                                \
	do {                                                    \
		_mm512_storeu_ps(t + r * PD_I8_COLS, v0);       \
		_mm512_storeu_ps(t + r * PD_I8_COLS + 16, v1);  \
	} while (0)
/* s += i * the sub-block's scales SC0 and SC1 (the two groups', int32). */
#define PD_I8_ISCALE(r)                                                                \
	do {                                                                           \
		s##r##0 = _mm512_add_epi32(s##r##0, _mm512_mullo_epi32(i##r##0, sc0)); \
		s##r##1 = _mm512_add_epi32(s##r##1, _mm512_mullo_epi32(i##r##1, sc1)); \
	} while (0)
/* i += the mins' pair K (MP0, MP1) times the row's sums of 32 of pair K
 * of super-block B. */
#define PD_I8_MINS(r)                                                          \
	do {                                                                   \
		__m512i a = _mm512_set1_epi32(x->c[r][b * 4 + k]);             \
		i##r##0 = _mm512_dpwssd_epi32(i##r##0, mp0, a);                 \
		i##r##1 = _mm512_dpwssd_epi32(i##r##1, mp1, a);                 \
	} while (0)
/* T += (float)s * (d * d_x) - (float)i * (dmin * d_x), the caller's DD0,
 * DD1 (d), DM0, DM1 (dmin) and MINS (0: no min term, Q6_K) of
 * super-block B. */
#define PD_I8_KTAIL(r)                                                                                        \
	do {                                                                                                  \
		__m512 dx = _mm512_set1_ps(x->d[r][b]);                                                       \
		__m512 g0 = _mm512_loadu_ps(t + r * PD_I8_COLS), g1 = _mm512_loadu_ps(t + r * PD_I8_COLS + 16); \
		g0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s##r##0), _mm512_mul_ps(dd0, dx), g0);                 \
		g1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s##r##1), _mm512_mul_ps(dd1, dx), g1);                 \
		if (mins) {                                                                                   \
			g0 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(i##r##0), _mm512_mul_ps(dm0, dx), g0);        \
			g1 = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(i##r##1), _mm512_mul_ps(dm1, dx), g1);        \
		}                                                                                             \
		PD_I8_STORE_T(r, g0, g1);                                                                     \
	} while (0)

/* Q4_K (nibbles) and Q5_K (bytes, NIB 0). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static inline __attribute__((always_inline)) void
pd_i8_tile_k_body(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t,
		  const int nib)
{
	const __m512i low = _mm512_set1_epi8(0x0F);
	const size_t ub = nib ? PD_I8K_BLOCK : PD_I8K5_BLOCK, qa = nib ? 2048 : 4096;
	const int mins = 1;
	__m512i i00, i01, i10, i11, i20, i21, i30, i31, i40, i41, i50, i51;
	PD_I8_KSUMS;

	PD_I8_EACH_ROW(PD_I8_T_ZERO);
	for (int64_t b = 0; b < nb; b++, w0 += ub, w1 += ub) {
		__m512 dd0, dd1, dm0, dm1;

		PD_I8_EACH_ROW(PD_I8_KSUMS_ZERO);
		for (int sb = 0; sb < 8; sb++) {
			const int64_t xb = b * 8 + sb;
			__m512i sc0, sc1;

			PD_I8_START(PD_I8_ZERO);
			if (nib) {
				PD_I8_NIBBLES(w0 + sb * 256, w1 + sb * 256, xb * 32);
			} else {
				PD_I8_BYTES(w0 + sb * 512, w1 + sb * 512, xb * 32, 0, 8);
			}
			sc0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w0 + qa + sb * 16)));
			sc1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w1 + qa + sb * 16)));
			PD_I8_EACH_ROW(PD_I8_ISCALE);
		}
		/* the mins' sums, in the i's */
		PD_I8_START(PD_I8_ZERO);
		for (int k = 0; k < 4; k++) {
			__m512i mp0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w0 + qa + 128 + k * 32)));
			__m512i mp1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w1 + qa + 128 + k * 32)));

			PD_I8_EACH_ROW(PD_I8_MINS);
		}
		dd0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + qa + 256)));
		dd1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + qa + 256)));
		dm0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + qa + 288)));
		dm1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + qa + 288)));
		PD_I8_EACH_ROW(PD_I8_KTAIL);
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_q4_k_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_k_body(x, w0, w1, nb, t, 1);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_q5_k_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	pd_i8_tile_k_body(x, w0, w1, nb, t, 0);
}

/* Q6_K: each block of 32 inputs in its two sub-blocks of 16. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_q6_k_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nb, float *t)
{
	__m512i i00, i01, i10, i11, i20, i21, i30, i31, i40, i41, i50, i51;
	PD_I8_KSUMS;

	PD_I8_EACH_ROW(PD_I8_T_ZERO);
	for (int64_t b = 0; b < nb; b++, w0 += PD_I8K6_BLOCK, w1 += PD_I8K6_BLOCK) {
		/* no mins: the i's are the last sub-block's, unused */
		const int mins = 0;
		__m512 dd0, dd1, dm0 = _mm512_setzero_ps(), dm1 = dm0;

		PD_I8_EACH_ROW(PD_I8_KSUMS_ZERO);
		for (int sb = 0; sb < 8; sb++) {
			const int64_t xb = b * 8 + sb;

			for (int hf = 0; hf < 2; hf++) {
				__m512i sc0 = _mm512_cvtepi8_epi32(
					_mm_loadu_si128((const __m128i *)(w0 + 4096 + (sb * 2 + hf) * 16)));
				__m512i sc1 = _mm512_cvtepi8_epi32(
					_mm_loadu_si128((const __m128i *)(w1 + 4096 + (sb * 2 + hf) * 16)));

				/* the sums start from -32 sum(q_x) of the 16 inputs */
				PD_I8_START(PD_I8_Q6_SUM);
				PD_I8_BYTES(w0 + sb * 512, w1 + sb * 512, xb * 32, 4 * hf, 4 * hf + 4);
				PD_I8_EACH_ROW(PD_I8_ISCALE);
			}
		}
		dd0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w0 + 4352)));
		dd1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w1 + 4352)));
		PD_I8_EACH_ROW(PD_I8_KTAIL);
	}
}

/* A wide Q8_0 layer (NU wide inputs of 256): the tile's f32 sums in T (zero
 * first, added to once a wide input), each wide input's g in 12 f32
 * registers g<row><group> beside the i's. */
#define PD_I8_G_ZERO(r) g##r##0 = g##r##1 = _mm512_setzero_ps()
/* g += (float)i * the block's weight scales D0 and D1 */
#define PD_I8_G(r)                                                              \
	do {                                                                    \
		g##r##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##0), d0, g##r##0); \
		g##r##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i##r##1), d1, g##r##1); \
	} while (0)
/* T += g * the row's scale of wide input U */
#define PD_I8_G_TAIL(r)                                                                                       \
	do {                                                                                                  \
		__m512 dx = _mm512_set1_ps(x->d[r][u]);                                                       \
		PD_I8_STORE_T(r, _mm512_fmadd_ps(g##r##0, dx, _mm512_loadu_ps(t + r * PD_I8_COLS)),            \
			      _mm512_fmadd_ps(g##r##1, dx, _mm512_loadu_ps(t + r * PD_I8_COLS + 16)));         \
	} while (0)

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) static void
pd_i8_tile_wide_vnni(const struct pd_i8_rows *x, const unsigned char *w0, const unsigned char *w1, int64_t nu, float *t)
{
	__m512i i00, i01, i10, i11, i20, i21, i30, i31, i40, i41, i50, i51;
	__m512 g00, g01, g10, g11, g20, g21, g30, g31, g40, g41, g50, g51;

	PD_I8_EACH_ROW(PD_I8_T_ZERO);
	for (int64_t u = 0; u < nu; u++) {
		PD_I8_EACH_ROW(PD_I8_G_ZERO);
		for (int64_t xb = u * 8; xb < u * 8 + 8; xb++, w0 += PD_I8_BLOCK, w1 += PD_I8_BLOCK) {
			__m512 d0, d1;

			PD_I8_Q8_BLOCK;
			PD_I8_EACH_ROW(PD_I8_G);
		}
		PD_I8_EACH_ROW(PD_I8_G_TAIL);
	}
}

#endif

void pd_cpu_i8_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		      float *y, int64_t ldy, int flags)
{
	struct pd_cpu *cpu = CPU(be);
	int64_t nb = l->n_in / 32, pairs = (l->i8_groups + PD_I8_NG - 1) / PD_I8_NG;
	enum pd_qtype qt = l->qtype;
	int wide = pd_i8_wide(qt, l->n_in), halves = qt == PD_Q_Q6_K;
	enum pd_i8_form form = l->i8_w256 ? PD_I8_W256 : wide ? PD_I8_WIDE : PD_I8_UNITS;
	enum pd_i8_inputs inputs = wide ? PD_I8_IN_WIDE : pd_i8_k(qt) ? PD_I8_IN_SUPER : PD_I8_IN_32;
	/* a group's bytes; the tiles' units (a wide layer's: its wide inputs) */
	size_t gbytes = form == PD_I8_W256 ? (size_t)(l->n_in / 256) * PD_I8W_BLOCK :
					     (size_t)(l->n_in / pd_i8_unit(qt)) * pd_i8_unit_bytes(qt);
	int64_t units = wide ? l->n_in / 256 : l->n_in / pd_i8_unit(qt);
	int64_t panels = (rows * l->n_in + PD_I8_PANEL_BYTES - 1) / PD_I8_PANEL_BYTES, panel;
	const float *bias = (flags & PD_LIN_NO_BIAS) ? NULL : l->bias_host;
	float scale = l->scale;
	/* AMX's tiles take 16 rows, Q8_0's layout */
	int amx = cpu->amx && pd_cpu_i8_q8_layout(qt) ? cpu->amx : 0, mr = amx ? PD_AMX_ROWS : PD_I8_MR;
#if defined(__x86_64__) && defined(__GNUC__)
	void (*tile)(const struct pd_i8_rows *, const unsigned char *, const unsigned char *, int64_t, float *) = NULL;

	if (form == PD_I8_W256)
		tile = cpu->vnni ? pd_i8_tile_w256_vnni : cpu->vnni256 == 1 ? pd_i8_tile_w256_avxvnni :
		       cpu->vnni256 ? pd_i8_tile_w256_vnni256 : l->i8_avx2 ? pd_i8_tile_w256_avx2 : NULL;
	else if (wide)
		tile = cpu->vnni ? pd_i8_tile_wide_vnni : cpu->vnni256 == 1 ? pd_i8_tile_wide_avxvnni :
		       cpu->vnni256 ? pd_i8_tile_wide_vnni256 : l->i8_avx2 ? pd_i8_tile_wide_avx2 : NULL;
	else if (cpu->vnni)
		tile = qt == PD_Q_Q4_K ? pd_i8_tile_q4_k_vnni : qt == PD_Q_Q5_K ? pd_i8_tile_q5_k_vnni :
		       qt == PD_Q_Q6_K ? pd_i8_tile_q6_k_vnni : qt == PD_Q_Q4_0 ? pd_i8_tile_q4_0_vnni :
		       qt == PD_Q_Q4_1 ? pd_i8_tile_q4_1_vnni : pd_i8_tile_vnni;
	else if (cpu->vnni256 && pd_cpu_i8_q8_layout(qt))
		tile = cpu->vnni256 == 1 ? pd_i8_tile_avxvnni : pd_i8_tile_vnni256;
	else if (cpu->vnni256 == 1)
		tile = qt == PD_Q_Q4_K ? pd_i8_tile_q4_k_avxvnni : qt == PD_Q_Q5_K ? pd_i8_tile_q5_k_avxvnni :
		       qt == PD_Q_Q6_K ? pd_i8_tile_q6_k_avxvnni : qt == PD_Q_Q4_0 ? pd_i8_tile_q4_0_avxvnni :
		       qt == PD_Q_Q4_1 ? pd_i8_tile_q4_1_avxvnni : NULL;
	else if (cpu->vnni256)
		tile = qt == PD_Q_Q4_K ? pd_i8_tile_q4_k_vnni256 : qt == PD_Q_Q5_K ? pd_i8_tile_q5_k_vnni256 :
		       qt == PD_Q_Q6_K ? pd_i8_tile_q6_k_vnni256 : qt == PD_Q_Q4_0 ? pd_i8_tile_q4_0_vnni256 :
		       qt == PD_Q_Q4_1 ? pd_i8_tile_q4_1_vnni256 : NULL;
	else if (l->i8_avx2)
		tile = pd_i8_tile_avx2;
#endif

	/* panels of equal rows, whole tiles */
	panel = (rows + panels - 1) / panels;
	panel = (panel + mr - 1) / mr * mr;
	panels = (rows + panel - 1) / panel;
	if (pd_cpu_grow(be, (void **)&cpu->xq, &cpu->xq_cap, (size_t)(rows * l->n_in), 1) ||
	    pd_cpu_grow(be, (void **)&cpu->xd, &cpu->xd_cap, (size_t)(rows * nb), sizeof(float)) ||
	    pd_cpu_grow(be, (void **)&cpu->xc, &cpu->xc_cap, (size_t)(rows * nb), sizeof(int32_t)) ||
	    (!pd_i8_k(qt) && pd_cpu_grow(be, (void **)&cpu->xs, &cpu->xs_cap, (size_t)(rows * nb), sizeof(float))) ||
	    (halves && pd_cpu_grow(be, (void **)&cpu->xh, &cpu->xh_cap, (size_t)(rows * nb * 2), sizeof(int32_t))))
		return;
	_Static_assert(PD_I8_IN_WIDE < 8, "pd_cpu_input.kind keeps 8 for the halves' sums");
	if (!pd_cpu_input_kept(cpu, &cpu->xq_in, x, ldx, rows, l->n_in, (int)inputs | (halves ? 8 : 0)))
		pd_cpu_i8_quant_rows(cpu, x, ldx, rows, l->n_in, inputs, cpu->xq, cpu->xd, cpu->xc, cpu->xs,
				     halves ? cpu->xh : NULL);
#pragma omp parallel for schedule(static)
	for (int64_t task = 0; task < pairs * panels; task++) {
		int64_t p = task % pairs, c = task / pairs, r1 = (c + 1) * panel < rows ? (c + 1) * panel : rows;
		/* an odd last group goes with itself (the copy computed, not stored) */
		const unsigned char *w0 = l->i8 + (size_t)(p * PD_I8_NG) * gbytes;
		const unsigned char *w1 = p * PD_I8_NG + 1 < l->i8_groups ? w0 + gbytes : w0;
		int64_t j0 = p * PD_I8_COLS, cols = l->n_out - j0 < PD_I8_COLS ? l->n_out - j0 : PD_I8_COLS;
		float t[PD_AMX_ROWS * PD_I8_COLS];

		for (int64_t r0 = c * panel; r0 < r1; r0 += mr) {
			struct pd_i8_rows xr;
			int nr = r1 - r0 < mr ? (int)(r1 - r0) : mr;

			for (int r = 0; r < PD_I8_MR && !amx; r++) {
				int64_t rr = r0 + (r < nr ? r : nr - 1);

				xr.q[r] = cpu->xq + rr * l->n_in;
				xr.d[r] = cpu->xd + rr * nb;
				xr.c[r] = cpu->xc + rr * nb;
				xr.s[r] = cpu->xs + rr * nb;
				xr.h[r] = halves ? cpu->xh + rr * nb * 2 : NULL;
			}
#if defined(__x86_64__) && defined(__GNUC__)
			if (amx)
				pd_cpu_amx_tile(amx, cpu->xq + r0 * l->n_in, l->n_in, cpu->xd + r0 * nb, cpu->xc + r0 * nb,
						nr, w0, w1, form, t);
			else if (tile)
				tile(&xr, w0, w1, units, t);
			else
#endif
				pd_i8_tile_portable(qt, form, &xr, w0, w1, units, t);
#if defined(__x86_64__) && defined(__GNUC__)
			if (cpu->avx512)
				pd_i8_post_avx512(t, nr, cols, y + r0 * ldy + j0, ldy, bias ? bias + j0 : NULL, scale, flags);
			else
#endif
				pd_i8_post(t, nr, cols, y + r0 * ldy + j0, ldy, bias ? bias + j0 : NULL, scale, flags);
		}
	}
}
