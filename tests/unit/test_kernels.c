/*
 * test_kernels.c - every backend operation against a plain-C reference in
 * double precision, on fresh random shapes and values each run (the seed is
 * printed; pass it as argv[1] to repeat a run).  Outputs are poisoned with
 * NaN first and written through strided views, so an element a kernel
 * forgot, or one it wrote outside its view, shows up.
 *
 * Tolerances: f32 operations 1e-5 x max|ref|; bf16 matrix products 2e-5
 * against a reference on bf16-rounded inputs (products of bf16 values are
 * exact in f32, so only the f32 accumulation order differs).
 */
#include "pd_backend.h"
#include "pd_backend_cpu.h"
#include "pd_rng.h"
#include "pd_test.h"
#include "pd_test_crash.h"
#include "pd_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOL 1e-5
/* the backend's rows limit of its dot-product kernel (pd_cpu.h's PD_QDOT_ROWS) */
#define PD_QDOT_ROWS_TEST 8
/* Rounds of fresh shapes; three take every round-dependent case (the
 * first two's, both backends of each pair, round % 3 == 0 and not), which
 * is what the sanitizer build needs: its four runs of this test took 2.5
 * minutes of the suite with six */
#if defined(__SANITIZE_ADDRESS__)
#define PD_KERNEL_ROUNDS 3
#else
#define PD_KERNEL_ROUNDS 6
#endif

static struct pd_rng rng;

static int rnd_int(int lo, int hi)
{
	return lo + (int)(pd_rng_u32(&rng) % (uint32_t)(hi - lo + 1));
}

static float *rnd_buf(size_t n, float scale)
{
	float *p = malloc(n * sizeof(float) + 1);

	pd_rng_randn(&rng, p, n);
	for (size_t i = 0; i < n; i++)
		p[i] *= scale;
	return p;
}

static float *nan_buf(size_t n)
{
	float *p = malloc(n * sizeof(float) + 1);

	pd_poison(p, n);
	return p;
}

static float bf16_round(float x)
{
	return pd_bf16_to_f32(pd_f32_to_bf16(x));
}

/* Compares the [rows, cols] view (stride ld) and checks that every element
 * outside the view in the first rows*ld values is still NaN. */
static void check_view_scaled(const char *what, const float *got, const double *ref, int64_t rows, int64_t cols,
			      int64_t ld, double tol, double scale)
{
	double num = 0, den = scale;
	int64_t stray = 0;

	for (int64_t r = 0; r < rows; r++) {
		for (int64_t c = 0; c < ld; c++) {
			float g = got[r * ld + c];

			if (c >= cols) {
				stray += !isnan(g);
				continue;
			}
			if (isnan(g)) {
				num = INFINITY;
				continue;
			}
			num = fmax(num, fabs(g - ref[r * cols + c]));
			den = fmax(den, fabs(ref[r * cols + c]));
		}
	}
	PD_CHECK(num <= tol * (den > 0 ? den : 1), "%s: relative error %.3g > %g (max |ref| %.3g)", what,
		 num / (den > 0 ? den : 1), tol, den);
	PD_CHECK(stray == 0, "%s: %lld elements written outside the view", what, (long long)stray);
}

static void check_view(const char *what, const float *got, const double *ref, int64_t rows, int64_t cols, int64_t ld,
		       double tol)
{
	check_view_scaled(what, got, ref, rows, cols, ld, tol, 0);
}


static double gelu_tanh(double x)
{
	return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* The reference of a linear layer in double: y = x W^T (+ b), inputs and
 * weights rounded to bf16 first with BF16; then as oneDNN's post-ops: the
 * START values added (PD_LIN_ACCUMULATE), GELU. */
static void ref_linear(double *ref, const float *x, int ldx, const float *w, int ldw, const float *b,
		       const float *start, int M, int K, int N, int bf16, int flags)
{
	for (int r = 0; r < M; r++) {
		for (int n = 0; n < N; n++) {
			double s = 0;

			for (int k = 0; k < K; k++) {
				double xv = bf16 ? bf16_round(x[(size_t)r * ldx + k]) : x[(size_t)r * ldx + k];
				double wv = bf16 ? bf16_round(w[(size_t)n * ldw + k]) : w[(size_t)n * ldw + k];

				s += xv * wv;
			}
			if (!(flags & PD_LIN_NO_BIAS))
				s += b[n];
			if (flags & PD_LIN_ACCUMULATE)
				s += start[(size_t)r * N + n];
			if (flags & PD_LIN_GELU_TANH)
				s = gelu_tanh(s);
			ref[(size_t)r * N + n] = s;
		}
	}
}

/* The error of a linear layer's output is relative to its terms' size, the
 * largest sum of |x w| (+ |b|, + |start|) over the outputs: f32 sums round
 * against that, and an output that cancels to near 0 (a single output of a
 * few terms, or one strongly negative through GELU) would make any error
 * look large against itself. */
static double linear_scale(const float *x, int ldx, const float *w, int ldw, const float *b, const float *start, int M,
			   int K, int N, int bf16, int flags)
{
	double m = 0;

	for (int r = 0; r < M; r++)
		for (int n = 0; n < N; n++) {
			double a = 0;

			for (int k = 0; k < K; k++) {
				double xv = bf16 ? bf16_round(x[(size_t)r * ldx + k]) : x[(size_t)r * ldx + k];
				double wv = bf16 ? bf16_round(w[(size_t)n * ldw + k]) : w[(size_t)n * ldw + k];

				a += fabs(xv * wv);
			}
			if (!(flags & PD_LIN_NO_BIAS))
				a += fabs(b[n]);
			if (flags & PD_LIN_ACCUMULATE)
				a += fabs(start[(size_t)r * N + n]);
			m = fmax(m, a);
		}
	return m;
}

static void test_linear(struct pd_backend *be, int bf16)
{
	int M = rnd_int(1, 70), K = rnd_int(1, 200), N = rnd_int(1, 150);
	int ldx = K + rnd_int(0, 5), ldy = N + rnd_int(0, 5), ldw = K + rnd_int(0, 3);
	int flags_list[4] = { 0, PD_LIN_GELU_TANH, PD_LIN_NO_BIAS, PD_LIN_ACCUMULATE };
	float *x = rnd_buf((size_t)M * ldx, 1.0f), *w = rnd_buf((size_t)N * ldw, 0.2f), *b = rnd_buf((size_t)N, 0.1f);
	double *ref = malloc(sizeof(double) * (size_t)M * N);
	struct pd_linear *l = be->ops->linear_new(be, N, K, w, PD_F32, ldw, b);
	char what[128];

	PD_CHECK(l != NULL, "linear_new %dx%d: %s", N, K, be->error);
	if (!l)
		return;
	for (int fi = 0; fi < 4; fi++) {
		int flags = flags_list[fi];
		float *y = nan_buf((size_t)M * ldy);
		float *start = rnd_buf((size_t)M * N, 1.0f);

		if (flags & PD_LIN_ACCUMULATE)
			for (int r = 0; r < M; r++)
				memcpy(y + (size_t)r * ldy, start + (size_t)r * N, sizeof(float) * (size_t)N);
		be->ops->linear(be, l, x, ldx, M, y, ldy, flags);
		ref_linear(ref, x, ldx, w, ldw, b, start, M, K, N, bf16, flags);
		snprintf(what, sizeof(what), "linear %s M=%d K=%d N=%d flags=%d", bf16 ? "bf16" : "f32", M, K, N, flags);
		check_view_scaled(what, y, ref, M, N, ldy, bf16 ? 2e-5 : TOL,
				  linear_scale(x, ldx, w, ldw, b, start, M, K, N, bf16, flags));
		free(y);
		free(start);
	}
	be->ops->linear_free(be, l);
	free(x);
	free(w);
	free(b);
	free(ref);
}

/* Random blocks of type T: random bytes with the scales (fp16 fields) set
 * to small finite values, and no fp8 NaN or infinity codes. */
static void rnd_blocks(enum pd_qtype t, unsigned char *p, size_t bytes)
{
	const struct pd_qtype_info *q = pd_quant_info(t);
	/* where each format keeps its fp16 scale (and min) */
	int at[2] = { -1, -1 };

	for (size_t i = 0; i < bytes; i++)
		p[i] = (unsigned char)pd_rng_u32(&rng);
	switch (t) {
	case PD_Q_Q8_0: case PD_Q_Q4_0: case PD_Q_Q5_0: at[0] = 0; break;
	case PD_Q_Q4_1: case PD_Q_Q5_1: case PD_Q_Q4_K: case PD_Q_Q5_K: at[0] = 0; at[1] = 2; break;
	case PD_Q_Q2_K: at[0] = 80; at[1] = 82; break;
	case PD_Q_Q3_K: at[0] = 108; break;
	case PD_Q_Q6_K: at[0] = 208; break;
	case PD_Q_F8_E4M3:
	case PD_Q_F8_E5M2:
		/* finite codes: e4m3's NaN is S.1111.111, e5m2's specials S.11111.xx */
		for (size_t i = 0; i < bytes; i++)
			if (t == PD_Q_F8_E4M3 ? (p[i] & 0x7f) == 0x7f : (p[i] & 0x7c) == 0x7c)
				p[i] = 0x12;
		return;
	default: return;
	}
	for (size_t b = 0; b < bytes; b += (size_t)q->block_bytes)
		for (int k = 0; k < 2; k++)
			if (at[k] >= 0) {
				uint16_t h = pd_f32_to_f16((float)(pd_rng_u32(&rng) % 1000 + 1) * 1e-5f);

				p[b + (size_t)at[k]] = (unsigned char)h;
				p[b + (size_t)at[k] + 1] = (unsigned char)(h >> 8);
			}
}

/* A linear layer kept in a block format against the reference product on
 * its weights decoded by pd_quant_decode (itself checked against ggml in
 * test_gguf): few rows (the dot-product kernel) and more (decoded panels),
 * and with BIG (on a backend of 1 MB panels) a weight of several panels.
 * PLAIN_FP8: unscaled e4m3 through panels, whose bf16 products take the
 * straight-to-bf16 decoder (a random type would pick it too rarely). */
static void test_qlinear(struct pd_backend *be, int bf16, int big, int plain_fp8)
{
	static const enum pd_qtype types[] = { PD_Q_Q8_0, PD_Q_Q4_0, PD_Q_Q4_1, PD_Q_Q5_0, PD_Q_Q5_1, PD_Q_Q2_K,
					       PD_Q_Q3_K, PD_Q_Q4_K, PD_Q_Q5_K, PD_Q_Q6_K, PD_Q_F8_E4M3, PD_Q_F8_E5M2 };
	enum pd_qtype t = plain_fp8 ? PD_Q_F8_E4M3 : types[rnd_int(0, (int)(sizeof(types) / sizeof(types[0])) - 1)];
	const struct pd_qtype_info *q = pd_quant_info(t);
	/* big in f32: 4096+ inputs (panels written in place); in bf16: 8192+
	 * (panels through the dense scratch; on the portable backends, of
	 * PDIT_QDENSE_ROWS 8, written in place above 8 rows) */
	int K = q->block_size * (big ? (bf16 ? rnd_int(8192, 8704) : rnd_int(4096, 4600)) / q->block_size
				     : rnd_int(1, q->block_size == 1 ? 200 : 4));
	int N = big ? rnd_int(300, 700) : rnd_int(1, 150);
	int M = rnd_int(0, 1) && !plain_fp8 ? rnd_int(1, PD_QDOT_ROWS_TEST) : rnd_int(PD_QDOT_ROWS_TEST + 1, big ? 12 : 70);
	int ldx = K + rnd_int(0, 5), ldy = N + rnd_int(0, 5);
	int flags_list[4] = { 0, PD_LIN_GELU_TANH, PD_LIN_NO_BIAS, PD_LIN_ACCUMULATE };
	/* scaled fp8 or plain (plain e4m3 takes the straight-to-bf16 decoder) */
	float scale = t == PD_Q_F8_E4M3 && !plain_fp8 && rnd_int(0, 1) ? 0.37f : 1.0f;
	size_t bytes = pd_quant_row_bytes(q, K) * (size_t)N;
	unsigned char *blocks = malloc(bytes);
	float *x = rnd_buf((size_t)M * ldx, 1.0f), *w = malloc(sizeof(float) * (size_t)N * K), *b = rnd_buf((size_t)N, 0.1f);
	double *ref = malloc(sizeof(double) * (size_t)M * N);
	struct pd_linear *l;
	char what[160];

	rnd_blocks(t, blocks, bytes);
	pd_quant_decode(t, blocks, w, (int64_t)N * K);
	for (size_t i = 0; i < (size_t)N * K; i++)
		w[i] = w[i] * scale;
	l = be->ops->linear_new_q(be, N, K, t, scale, blocks, b);
	/* the backend keeps its own copy */
	memset(blocks, 0xff, bytes);
	PD_CHECK(l != NULL, "linear_new_q %s %dx%d: %s", q->name, N, K, be->error);
	for (int fi = 0; l && fi < 4; fi++) {
		int flags = flags_list[fi];
		float *y = nan_buf((size_t)M * ldy), *start = rnd_buf((size_t)M * N, 1.0f);
		if (flags & PD_LIN_ACCUMULATE)
			for (int r = 0; r < M; r++)
				memcpy(y + (size_t)r * ldy, start + (size_t)r * N, sizeof(float) * (size_t)N);
		be->ops->linear(be, l, x, ldx, M, y, ldy, flags);
		ref_linear(ref, x, ldx, w, K, b, start, M, K, N, bf16, flags);
		snprintf(what, sizeof(what), "quantized linear %s %s M=%d K=%d N=%d flags=%d", q->name,
			 bf16 ? "bf16" : "f32", M, K, N, flags);
		check_view_scaled(what, y, ref, M, N, ldy, bf16 ? 2e-5 : TOL,
				  linear_scale(x, ldx, w, K, b, start, M, K, N, bf16, flags));
		free(y);
		free(start);
	}
	if (l)
		be->ops->linear_free(be, l);
	free(blocks);
	free(x);
	free(w);
	free(b);
	free(ref);
}

/* The integers of input block K0 (32 inputs) of a row of T at W, from
 * ggml's block layouts (written out here apart from the backend's reading
 * of them): V the values (Q5_0's q - 16, Q6_K's q - 32), SUB 1 but for
 * Q6_K (2: two sub-blocks of 16 with their own scales); the scales
 * through D (per sub-block) and the min through M (w = d v + m). */
static void ref_i8_ints(enum pd_qtype t, const unsigned char *w, int k0, int *v, float *d, float *m, int *sub)
{
	const unsigned char *b;
	int j = k0 % 8;

	*sub = 1;
	*m = 0;
	switch (t) {
	case PD_Q_Q8_0:
		b = w + (size_t)k0 * 34;
		for (int k = 0; k < 32; k++)
			v[k] = (signed char)b[2 + k];
		d[0] = pd_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
		break;
	case PD_Q_Q5_0: {
		uint32_t qh;

		b = w + (size_t)k0 * 22;
		qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
		for (int k = 0; k < 32; k++)
			v[k] = (int)(((b[6 + k % 16] >> (k < 16 ? 0 : 4)) & 0xF) | ((qh >> k) & 1) << 4) - 16;
		d[0] = pd_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
		break;
	}
	case PD_Q_Q4_0:
	case PD_Q_Q4_1:
		b = w + (size_t)k0 * (t == PD_Q_Q4_0 ? 18 : 20);
		for (int k = 0; k < 32; k++)
			v[k] = (b[(t == PD_Q_Q4_0 ? 2 : 4) + k % 16] >> (k < 16 ? 0 : 4)) & 0xF;
		d[0] = pd_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
		*m = t == PD_Q_Q4_0 ? -8.0f * d[0] : pd_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
		break;
	case PD_Q_Q4_K:
	case PD_Q_Q5_K: {
		/* super-block k0 / 8, sub-block j (ggml's layouts) */
		const unsigned char *sc;
		int d6, m6;

		b = w + (size_t)(k0 / 8) * (t == PD_Q_Q4_K ? 144 : 176);
		sc = b + 4;
		d6 = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
		m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
		for (int k = 0; k < 32; k++)
			v[k] = t == PD_Q_Q4_K ? (b[16 + 32 * (j / 2) + k] >> (4 * (j % 2))) & 0xF :
			       ((b[48 + 32 * (j / 2) + k] >> (4 * (j % 2))) & 0xF) | ((b[16 + k] >> j) & 1) << 4;
		d[0] = pd_f16_to_f32((uint16_t)(b[0] | b[1] << 8)) * (float)d6;
		*m = -pd_f16_to_f32((uint16_t)(b[2] | b[3] << 8)) * (float)m6;
		break;
	}
	case PD_Q_Q6_K:
		/* ql[128], qh[64], scales[16], d; input e in 128-halves of 4 quarters of 32 */
		b = w + (size_t)(k0 / 8) * 210;
		for (int k = 0; k < 32; k++) {
			int e = j * 32 + k, c = e / 128, qt = e % 128 / 32, l = e % 32;
			int lo = (b[64 * c + l + (qt % 2) * 32] >> (qt / 2 * 4)) & 0xF;
			int hi = (b[128 + 32 * c + l] >> (2 * qt)) & 3;

			v[k] = (lo | hi << 4) - 32;
		}
		*sub = 2;
		d[0] = pd_f16_to_f32((uint16_t)(b[208] | b[209] << 8)) * (float)(signed char)b[192 + 2 * j];
		d[1] = pd_f16_to_f32((uint16_t)(b[208] | b[209] << 8)) * (float)(signed char)b[192 + 2 * j + 1];
		break;
	default:
		break;
	}
}

/* The int8 products' arithmetic, written out from its definition
 * (pd_cpu_i8.c's header): each input block of 32 (of 256 for the K-quants,
 * as ggml's Q8_K, and for Q8_0 layers of a multiple of 256 inputs) quantized with scale amax / 127 and values rint(x /
 * scale) in f32; a block's dot product with
 * the weight's integers (ref_i8_ints; Q6_K's per sub-block of 16) exact,
 * times the f32 product of the two scales (a wide Q8_0 layer sums the
 * products with the weight's scales over 256 inputs first, then times the
 * input's: another f32 order, within the tolerance below), plus the weight's min times
 * scale * sum of the block's integers (fp8 e4m3: its blocks as int8 times
 * a power of two, 2^(E - 6) for the largest exponent E, all times the
 * file's WSCALE); summed here in double (the backend
 * sums in f32: SUMABS gets the sum of the terms' sizes, the bound of that
 * difference). W256 (--quant-products int8-256, a Q8_0 layer of a multiple
 * of 256 inputs): the weight's values d q of each 256 inputs requantized
 * first, scale D = their largest size / 127 and values rint(d q / D) (D 0:
 * 0), and each 256's dot product exact, times D d_x. */
static void ref_i8(double *ref, double *sumabs, enum pd_qtype t, float wscale, const float *x, int ldx,
		   const unsigned char *blocks, const float *b, const float *start, int M, int K, int N, int flags,
		   int w256)
{
	int nb = K / 32, qb = pd_quant_info(t)->block_size == 256 || (t == PD_Q_Q8_0 && K % 256 == 0) ? 8 : 1;
	size_t row = pd_quant_row_bytes(pd_quant_info(t), K);
	signed char *q = malloc((size_t)K);
	float *dx = malloc(sizeof(float) * (size_t)nb);
	long *sq = malloc(sizeof(long) * (size_t)nb);

	for (int r = 0; r < M; r++) {
		for (int k0 = 0; k0 < nb; k0++) {
			float amax = 0, id;

			/* the scale of the quantization block (qb blocks of 32) it is in */
			for (int k = 0; k < 32 * qb; k++)
				amax = fmaxf(amax, fabsf(x[(size_t)r * ldx + k0 / qb * qb * 32 + k]));
			dx[k0] = amax / 127.0f;
			/* a scale below FLT_MIN quantizes by 0 (its inverse would overflow) */
			id = dx[k0] >= FLT_MIN ? 1.0f / dx[k0] : 0.0f;
			sq[k0] = 0;
			for (int k = 0; k < 32; k++) {
				float v = rintf(x[(size_t)r * ldx + k0 * 32 + k] * id);

				q[k0 * 32 + k] = (signed char)(v > 127 ? 127 : v < -127 ? -127 : v);
				sq[k0] += q[k0 * 32 + k];
			}
		}
		for (int n = 0; n < N; n++) {
			double s = 0, a = 0;

			for (int u = 0; w256 && u < K / 256; u++) {
				const unsigned char *w = blocks + (size_t)n * row + (size_t)u * 8 * 34;
				float v[256], amax = 0, D;
				long dot = 0;

				for (int k = 0; k < 256; k++) {
					v[k] = pd_f16_to_f32((uint16_t)(w[k / 32 * 34] | w[k / 32 * 34 + 1] << 8)) *
					       (float)(signed char)w[k / 32 * 34 + 2 + k % 32];
					amax = fmaxf(amax, fabsf(v[k]));
				}
				D = amax / 127.0f;
				for (int k = 0; k < 256; k++)
					dot += (long)(D > 0 ? rintf(v[k] / D) : 0) * q[u * 256 + k];
				s += (double)dot * (D * dx[u * 8]);
				a += fabs((double)dot * (D * dx[u * 8]));
			}
			for (int k0 = 0; !w256 && k0 < nb; k0++) {
				const unsigned char *w = blocks + (size_t)n * row;
				float sx = dx[k0] * (float)sq[k0];

				if (t == PD_Q_F8_E4M3) {
					/* e4m3 values as int8 times 2^(E - 6), E the largest one's exponent */
					float v[32], amax = 0, p2 = 0, scale;
					long dot = 0;

					pd_quant_decode(t, w + (size_t)k0 * 32, v, 32);
					for (int k = 0; k < 32; k++)
						amax = fmaxf(amax, fabsf(v[k]));
					if (amax > 0)
						p2 = (float)pow(2.0, floor(log2(amax)) - 6);
					for (int k = 0; k < 32; k++)
						dot += (long)(p2 > 0 ? rint(v[k] / p2) : 0) * q[k0 * 32 + k];
					scale = p2 * dx[k0];
					s += (double)dot * scale;
					a += fabs((double)dot * scale);
				} else {
					int v[32], sub;
					float d[2], mn;

					ref_i8_ints(t, w, k0, v, d, &mn, &sub);
					for (int h = 0; h < sub; h++) {
						long dot = 0;
						float scale = d[h] * dx[k0];

						for (int k = h * 32 / sub; k < (h + 1) * 32 / sub; k++)
							dot += (long)v[k] * q[k0 * 32 + k];
						s += (double)dot * scale;
						a += fabs((double)dot * scale);
					}
					/* K-quants: the min's product in int32 (exact), times dmin * d_x */
					if (qb > 1)
						sx = (float)((double)dx[k0] * (double)sq[k0]);
					s += qb > 1 ? (double)mn * dx[k0] * (double)sq[k0] : (double)mn * sx;
					a += fabs((double)mn * sx);
				}
			}
			s *= wscale;
			a *= wscale;
			if (!(flags & PD_LIN_NO_BIAS))
				s += b[n];
			if (flags & PD_LIN_ACCUMULATE)
				s += start[(size_t)r * N + n];
			sumabs[(size_t)r * N + n] = a;
			ref[(size_t)r * N + n] = flags & PD_LIN_GELU_TANH ? gelu_tanh(s) : s;
		}
	}
	free(q);
	free(dx);
	free(sq);
}

/* Layers of every type with an int8 form (Q8_0, Q5_0, Q4_0, Q4_1, Q4_K,
 * Q5_K, Q6_K, fp8) on int8 products (PD_QP_INT8) against ref_i8, on BE (the
 * kernels the CPU has) and PORTABLE (the portable kernels, quantization
 * included), which must give the same bits; odd output counts (a last group
 * of 16 alone, padded rows), row counts off the tile's 6, strided views.
 * A type without an int8 form (Q5_1) on the same backend decodes (no int8
 * layer counted). REQUANT: a wide Q8_0 layer on int8-256 (PD_QP_INT8_W256,
 * its weights requantized at load), which otherwise comes now and then. */
static void test_i8linear(struct pd_backend *be, struct pd_backend *portable, int requant)
{
	static const enum pd_qtype types[] = { PD_Q_Q8_0, PD_Q_Q4_K, PD_Q_F8_E4M3, PD_Q_Q5_0,
					       PD_Q_Q4_0, PD_Q_Q4_1, PD_Q_Q5_K, PD_Q_Q6_K };
	/* Q8_0 a third of the time (its layers a multiple of 256 wide half of those) */
	enum pd_qtype t = rnd_int(0, 3) && !requant ? types[rnd_int(0, 7)] : PD_Q_Q8_0;
	float wscale = t == PD_Q_F8_E4M3 && rnd_int(0, 1) ? 0.37f : 1.0f;
	/* Q8_0 half the time a multiple of 256 (its inputs then in blocks of 256) */
	int K = pd_quant_info(t)->block_size == 256 || (t == PD_Q_Q8_0 && (requant || rnd_int(0, 1))) ? 256 * rnd_int(1, 5) :
										     32 * rnd_int(1, 40);
	int N = rnd_int(1, 150), M = rnd_int(1, 3) == 1 ? rnd_int(1, 7) : rnd_int(8, 140), w256;
	int ldx, ldy, flags_list[4] = { 0, PD_LIN_GELU_TANH, PD_LIN_NO_BIAS, PD_LIN_ACCUMULATE };
	size_t bytes;
	unsigned char *blocks, *q4;
	float *x, *b;
	double *ref, *sumabs;
	struct pd_linear *l, *lp, *l4;
	int before = be->int8_layers;
	char what[160];

	/* now and then inputs of more than a panel (1 MB of quantized rows:
	 * several panels of rows, the last shorter) */
	if (rnd_int(0, 5) == 0) {
		/* a Q8_0 layer wide or not (the K-quants' whole super-blocks) */
		K = pd_quant_info(t)->block_size == 256 || requant || rnd_int(0, 1) ? 1280 : 1312;
		N = rnd_int(1, 70);
		M = rnd_int(820, 1000);
	}
	ldx = K + rnd_int(0, 5);
	ldy = N + rnd_int(0, 5);
	bytes = (size_t)N * pd_quant_row_bytes(pd_quant_info(t), K);
	blocks = malloc(bytes);
	q4 = malloc((size_t)N * (size_t)(K / 32) * 24);
	x = rnd_buf((size_t)M * ldx, 1.0f);
	b = rnd_buf((size_t)N, 0.1f);
	ref = malloc(sizeof(double) * (size_t)M * N);
	sumabs = malloc(sizeof(double) * (size_t)M * N);
	/* outliers, as activations have them: one block's scale set by one value */
	for (int i = 0; i < M; i++)
		x[(size_t)i * ldx + rnd_int(0, K - 1)] *= 40.0f;
	/* and the last row tiny: its blocks' scales below FLT_MIN, whose
	 * inverses would overflow (both paths quantize them by 0; without a
	 * bias its outputs are its own blocks' alone) */
	for (int k = 0; M > 1 && k < K; k++)
		x[(size_t)(M - 1) * ldx + k] *= 1e-37f;
	rnd_blocks(t, blocks, bytes);
	/* Q8_0 most times without -128 (ggml's quantizers write -127..127):
	 * the AVX2 kernel takes those layers, the portable kernel the others */
	if (t == PD_Q_Q8_0 && rnd_int(0, 3))
		for (size_t i = 0; i < bytes; i++)
			if (i % 34 >= 2 && blocks[i] == 0x80)
				blocks[i] = 0x81;
	/* a wide Q8_0 layer half the time requantized (int8-256) */
	w256 = t == PD_Q_Q8_0 && K % 256 == 0 && (requant || rnd_int(0, 1));
	be->qproducts = portable->qproducts = w256 ? PD_QP_INT8_W256 : PD_QP_INT8;
	l = be->ops->linear_new_q(be, N, K, t, wscale, blocks, b);
	lp = portable->ops->linear_new_q(portable, N, K, t, wscale, blocks, b);
	PD_CHECK(l && lp && be->int8_layers == before + 1, "int8 linear_new_q %dx%d: %s %s", N, K, be->error,
		 portable->error);
	rnd_blocks(PD_Q_Q5_1, q4, (size_t)N * (size_t)(K / 32) * 24);
	l4 = be->ops->linear_new_q(be, N, K, PD_Q_Q5_1, 1.0f, q4, b);
	PD_CHECK(l4 && be->int8_layers == before + 1, "q5_1 with int8 products asked: decoded, not counted as int8");
	for (int fi = 0; l && lp && fi < 4; fi++) {
		int flags = flags_list[fi];
		float *y = nan_buf((size_t)M * ldy), *yp = nan_buf((size_t)M * ldy), *start = rnd_buf((size_t)M * N, 1.0f);
		double scale = 0;

		if (flags & PD_LIN_ACCUMULATE)
			for (int r = 0; r < M; r++) {
				memcpy(y + (size_t)r * ldy, start + (size_t)r * N, sizeof(float) * (size_t)N);
				memcpy(yp + (size_t)r * ldy, start + (size_t)r * N, sizeof(float) * (size_t)N);
			}
		be->ops->linear(be, l, x, ldx, M, y, ldy, flags);
		portable->ops->linear(portable, lp, x, ldx, M, yp, ldy, flags);
		ref_i8(ref, sumabs, t, wscale, x, ldx, blocks, b, start, M, K, N, flags, w256);
		for (size_t i = 0; i < (size_t)M * N; i++)
			scale = fmax(scale, sumabs[i] + fabs(b[i % (size_t)N]) + fabs(start[i]));
		snprintf(what, sizeof(what), "int8 linear %s%s M=%d K=%d N=%d flags=%d", pd_quant_info(t)->name,
			 w256 ? " requantized (int8-256)" : "", M, K, N, flags);
		/* f32 sums of at most 80 terms here: within 2^-24 * 80 (5e-6) of the terms' size */
		check_view_scaled(what, y, ref, M, N, ldy, 5e-6, scale);
		PD_CHECK(memcmp(y, yp, sizeof(float) * (size_t)M * ldy) == 0,
			 "%s: the portable kernels give other bits than %s", what, ((struct pd_backend *)be)->device);
		free(y);
		free(yp);
		free(start);
	}
	/* a NaN input makes its row NaN on both (as decoded products would) */
	if (l && lp) {
		float *y = nan_buf((size_t)M * ldy), *yp = nan_buf((size_t)M * ldy);
		int nan_rows = 0;

		memset(y, 0, sizeof(float) * (size_t)M * ldy);
		memset(yp, 0, sizeof(float) * (size_t)M * ldy);
		x[rnd_int(0, K - 1)] = NAN;
		be->ops->linear(be, l, x, ldx, M, y, ldy, 0);
		portable->ops->linear(portable, lp, x, ldx, M, yp, ldy, 0);
		for (int n = 0; n < N; n++)
			nan_rows += isnan(y[n]) && isnan(yp[n]);
		PD_CHECK(nan_rows == N, "int8 linear %s: a NaN input gives NaN outputs (%d of %d)", pd_quant_info(t)->name,
			 nan_rows, N);
		free(y);
		free(yp);
	}
	be->ops->linear_free(be, l);
	portable->ops->linear_free(portable, lp);
	be->ops->linear_free(be, l4);
	be->qproducts = portable->qproducts = PD_QP_DECODE;
	free(blocks);
	free(q4);
	free(x);
	free(b);
	free(ref);
	free(sumabs);
}

/* PD_LIN_SAME_INPUT (q, k and v reading one input: the CPU converts or
 * quantizes it once). Layers of every kind of input the CPU makes (a bf16
 * operand for plain and decoded layers; int8 rows in blocks of 32, in the
 * K-quants' super-blocks with and without Q6_K's halves, in a wide Q8_0
 * layer's 256) on one input, in a random order, each after the first with
 * the flag: each gives the bits it gives alone. Then what was made must not
 * be reused: after a call without the flag (the input rewritten at the same
 * address), for fewer rows, at another address, or after a layer whose
 * adapter makes its own calls; and it must be (the promise broken on
 * purpose: the old bits where the input was made in the kind a layer
 * takes). Few rows now and then (decoded layers' dot-product path, which
 * makes no operand). BE: bf16 products. */
static void test_same_input(struct pd_backend *be)
{
	enum { NL = 7 };
	static const enum pd_qtype types[NL] = { PD_Q_F32, PD_Q_Q8_0, PD_Q_Q4_K, PD_Q_Q6_K,
						 PD_Q_Q4_0, PD_Q_Q8_0, PD_Q_Q5_K };
	/* layer 5 decodes (a bf16 operand), the others of a block type multiply in int8 */
	int K = 256 * rnd_int(1, 3), N = rnd_int(1, 60), M = rnd_int(0, 3) ? rnd_int(9, 80) : rnd_int(2, 8);
	int ldx = K + rnd_int(0, 5);
	float *x = rnd_buf((size_t)M * ldx, 1.0f), *x2 = rnd_buf((size_t)M * ldx, 1.0f);
	float *xo = rnd_buf((size_t)M * ldx, 1.0f), *w = rnd_buf((size_t)N * K, 0.1f), *b = rnd_buf((size_t)N, 0.1f);
	float *ref[NL], *ref2[NL], *refo[NL], *y = nan_buf((size_t)M * N), *refad = nan_buf((size_t)M * N);
	float *a = rnd_buf((size_t)3 * K, 0.1f), *ab = rnd_buf((size_t)N * 3, 0.1f);
	struct pd_linear *l[NL] = { NULL }, *ad;
	int order[NL];
	size_t out = sizeof(float) * (size_t)M * N;

	for (int i = 0; i < NL; i++) {
		enum pd_qtype t = types[i];
		size_t bytes;
		unsigned char *blocks;

		if (t == PD_Q_F32) {
			l[i] = be->ops->linear_new(be, N, K, w, PD_F32, K, b);
			continue;
		}
		bytes = (size_t)N * pd_quant_row_bytes(pd_quant_info(t), K);
		blocks = malloc(bytes);
		rnd_blocks(t, blocks, bytes);
		be->qproducts = i == 5 ? PD_QP_DECODE : PD_QP_INT8;
		l[i] = be->ops->linear_new_q(be, N, K, t, 1.0f, blocks, b);
		free(blocks);
	}
	be->qproducts = PD_QP_DECODE;
	ad = be->ops->linear_new(be, N, K, w, PD_F32, K, b);
	PD_CHECK(ad && !be->ops->linear_adapt(be, ad, 3, a, ab), "same input: layers: %s", be->error);
	for (int i = 0; i < NL; i++) {
		PD_CHECK(l[i] != NULL, "same input: layer %d: %s", i, be->error);
		if (!l[i] || !ad)
			goto out;
	}
	/* each alone, on each input */
	for (int i = 0; i < NL; i++) {
		ref[i] = nan_buf((size_t)M * N), ref2[i] = nan_buf((size_t)M * N), refo[i] = nan_buf((size_t)M * N);
		be->ops->linear(be, l[i], x, ldx, M, ref[i], N, 0);
		be->ops->linear(be, l[i], x2, ldx, M, ref2[i], N, 0);
		be->ops->linear(be, l[i], xo, ldx, M, refo[i], N, 0);
		order[i] = i;
	}
	be->ops->linear(be, ad, xo, ldx, M, refad, N, 0);
	for (int i = NL - 1; i > 0; i--) {
		int j = rnd_int(0, i), s = order[i];

		order[i] = order[j], order[j] = s;
	}
	for (int k = 0; k < NL; k++) {
		int i = order[k];

		be->ops->linear(be, l[i], x, ldx, M, y, N, k ? PD_LIN_SAME_INPUT : 0);
		PD_CHECK(!memcmp(y, ref[i], out), "same input: layer %d (%s) %dth of %d in a row (K=%d M=%d N=%d)", i,
			 types[i] == PD_Q_F32 ? "plain" : pd_quant_info(types[i])->name, k + 1, NL, K, M, N);
	}
	/* x rewritten in place (x2's values): a call without the flag makes it anew, and the next with the flag */
	memcpy(x, x2, sizeof(float) * (size_t)M * ldx);
	for (int k = 0; k < 2; k++) {
		int i = order[k];

		be->ops->linear(be, l[i], x, ldx, M, y, N, k ? PD_LIN_SAME_INPUT : 0);
		PD_CHECK(!memcmp(y, ref2[i], out), "same input: layer %d after its input was rewritten (%s flag)", i,
			 k ? "with the" : "without");
	}
	/* the flag where the rows differ: the last row made from another input,
	 * the others from x, then all of x with the flag: made anew */
	be->ops->linear(be, l[order[2]], xo, ldx, M, y, N, 0);
	be->ops->linear(be, l[order[2]], x, ldx, M - 1, y, N, 0);
	be->ops->linear(be, l[order[2]], x, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, ref2[order[2]], out), "same input: layer %d after fewer rows", order[2]);
	/* and at another address */
	be->ops->linear(be, l[order[3]], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, refo[order[3]], out), "same input: layer %d at another address", order[3]);
	/* after a layer with an adapter on the same input: its own calls make other inputs */
	be->ops->linear(be, ad, xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, refad, out), "same input: the adapted layer");
	for (int k = 0; k < NL; k++) {
		be->ops->linear(be, l[order[k]], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
		PD_CHECK(!memcmp(y, refo[order[k]], out), "same input: layer %d after an adapted layer", order[k]);
	}
	/* and what is kept is used: the promise broken on purpose (xo rewritten
	 * with x2's values), a layer whose input was made gives the old bits
	 * (Q4_K from Q6_K's rows, which hold more; plain from the bf16 operand),
	 * one that needs another blocking the new bits */
	be->ops->linear(be, l[3], xo, ldx, M, y, N, 0);
	be->ops->linear(be, l[0], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	memcpy(xo, x2, sizeof(float) * (size_t)M * ldx);
	be->ops->linear(be, l[2], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, refo[2], out), "same input: q4_k did not take q6_k's rows");
	be->ops->linear(be, l[0], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	/* (up to 8 rows a plain layer on bf16 values in f32 products, kept as
	 * bf16 rows, takes the decoded layers' dot products, which read x) */
	PD_CHECK(M <= 8 || !memcmp(y, refo[0], out), "same input: the plain layer did not take the kept operand");
	be->ops->linear(be, l[1], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, ref2[1], out), "same input: q8_0 (blocks of 256, -128 sums) took q6_k's rows");
	be->ops->linear(be, l[3], xo, ldx, M, y, N, PD_LIN_SAME_INPUT);
	PD_CHECK(!memcmp(y, ref2[3], out), "same input: q6_k took q8_0's rows");
	for (int i = 0; i < NL; i++)
		free(ref[i]), free(ref2[i]), free(refo[i]);
out:
	for (int i = 0; i < NL; i++)
		if (l[i])
			be->ops->linear_free(be, l[i]);
	if (ad)
		be->ops->linear_free(be, ad);
	PD_CHECK(!be->failed, "same input: backend error: %s", be->error);
	free(x), free(x2), free(xo), free(w), free(b), free(y), free(a), free(ab), free(refad);
}

/* The double-precision reference of query row I of head H against keys
 * 0 to LIM - 1 (Q, K, V of row stride LD, heads of DH): scores q.k * SCALE
 * plus BIAS[j] (NULL: none), softmax, times v into OUT [DH]; q, k and v
 * rounded to bf16 first with BF16. S: scratch [LIM]. Returns the
 * log-sum-exp. */
static double ref_attention_row(const float *q, const float *k, const float *v, int ld, int i, int h, int Dh, int lim,
				float scale, const float *bias, int bf16, double *s, double *out)
{
	double m = -INFINITY, l = 0;

	for (int j = 0; j < lim; j++) {
		double d = 0;

		for (int c = 0; c < Dh; c++) {
			double qv = q[i * ld + h * Dh + c], kv = k[j * ld + h * Dh + c];

			if (bf16) {
				qv = bf16_round((float)qv);
				kv = bf16_round((float)kv);
			}
			d += qv * kv;
		}
		s[j] = d * scale + (bias ? bias[j] : 0);
		m = fmax(m, s[j]);
	}
	for (int j = 0; j < lim; j++)
		l += exp(s[j] - m);
	for (int c = 0; c < Dh; c++) {
		double o = 0;

		for (int j = 0; j < lim; j++)
			o += exp(s[j] - m) / l * (bf16 ? bf16_round(v[j * ld + h * Dh + c]) : v[j * ld + h * Dh + c]);
		out[c] = o;
	}
	return m + log(l);
}

/* bf16: the reference rounds q, k, v to bf16; the probabilities are rounded
 * to bf16 before P V, which bounds the difference near 2^-8 relative.
 * STRIPS: heads of 64 or 128 (whole 64-column strips: where AVX-512 BF16
 * runs, bf16 takes the backend's own block products). */
static void test_attention(struct pd_backend *be, int bf16, int strips)
{
	/* up to 600 queries and 300 keys: several blocks of both (the kernels
	 * test makes them small with PDIT_ATTN_QBLOCK and PDIT_ATTN_KBLOCK),
	 * padded where they do not divide */
	int H = rnd_int(1, 5), Dh = strips ? 64 * rnd_int(1, 2) : 2 * rnd_int(1, 24), Sq = rnd_int(1, 600);
	int Skv = rnd_int(1, 300);
	int D = H * Dh, ld = D + rnd_int(0, 4), ldo = D + rnd_int(0, 4);
	/* now and then large scores: rows close to one-hot, exponentials that underflow */
	float *q = rnd_buf((size_t)Sq * ld, rnd_int(0, 2) ? 1.0f : 8.0f), *k = rnd_buf((size_t)Skv * ld, 1.0f);
	float *v = rnd_buf((size_t)Skv * ld, 1.0f);
	float *out = nan_buf((size_t)Sq * ldo), *lse = nan_buf((size_t)H * Sq);
	double *ref = malloc(sizeof(double) * (size_t)Sq * D), *rlse = malloc(sizeof(double) * (size_t)H * Sq);
	double *s = malloc(sizeof(double) * (size_t)Skv);
	float scale = 1.0f / sqrtf((float)Dh);
	char what[128];

	be->ops->attention(be, out, ldo, lse, q, ld, k, ld, v, ld, Sq, Skv, H, Dh, scale);
	for (int h = 0; h < H; h++)
		for (int i = 0; i < Sq; i++)
			rlse[(size_t)h * Sq + i] =
				ref_attention_row(q, k, v, ld, i, h, Dh, Skv, scale, NULL, bf16, s, ref + (size_t)i * D + h * Dh);
	snprintf(what, sizeof(what), "attention %s H=%d Dh=%d Sq=%d Skv=%d", bf16 ? "bf16" : "f32", H, Dh, Sq, Skv);
	check_view(what, out, ref, Sq, D, ldo, bf16 ? 1e-2 : TOL);
	snprintf(what, sizeof(what), "attention lse H=%d Sq=%d Skv=%d", H, Sq, Skv);
	check_view(what, lse, rlse, H, Sq, Sq, TOL);
	free(q);
	free(k);
	free(v);
	free(out);
	free(lse);
	free(ref);
	free(rlse);
	free(s);
}

/* The encoders' attention: an additive bias per head and query, and a
 * causal mask, against double precision; STRIPS as test_attention's. */
static void test_attention_masked(struct pd_backend *be, int bf16, int strips)
{
	int H = rnd_int(1, 5), Dh = strips ? 64 * rnd_int(1, 2) : 2 * rnd_int(1, 20), S = rnd_int(1, 600);
	int causal = rnd_int(0, 1);
	int has_bias = rnd_int(0, 1) || !causal, D = H * Dh, ld = D + rnd_int(0, 4), ldo = D + rnd_int(0, 4);
	float *q = rnd_buf((size_t)S * ld, 1.0f), *k = rnd_buf((size_t)S * ld, 1.0f), *v = rnd_buf((size_t)S * ld, 1.0f);
	float *bias = has_bias ? rnd_buf((size_t)H * S * S, 3.0f) : NULL, *out = nan_buf((size_t)S * ldo);
	double *ref = malloc(sizeof(double) * (size_t)S * D), *sc = malloc(sizeof(double) * (size_t)S);
	float scale = rnd_int(0, 1) ? 1.0f : 1.0f / sqrtf((float)Dh);
	char what[128];

	/* now and then a padding mask: a row's first keys at -inf, as many as
	 * leave it one (whole key blocks of nothing but -inf, where the running
	 * maximum stays -inf) */
	if (bias && rnd_int(0, 2) == 0)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < S; i++)
				for (int j = 0, n = rnd_int(0, causal ? i : S - 1); j < n; j++)
					bias[((size_t)h * S + i) * S + j] = -INFINITY;
	be->ops->attention_masked(be, out, ldo, q, ld, k, ld, v, ld, S, H, Dh, scale, bias, causal);
	for (int h = 0; h < H; h++)
		for (int i = 0; i < S; i++)
			ref_attention_row(q, k, v, ld, i, h, Dh, causal ? i + 1 : S, scale,
					  bias ? bias + ((size_t)h * S + i) * S : NULL, bf16, sc, ref + (size_t)i * D + h * Dh);
	snprintf(what, sizeof(what), "attention_masked %s H=%d Dh=%d S=%d bias=%d causal=%d", bf16 ? "bf16" : "f32", H,
		 Dh, S, has_bias, causal);
	/* f32 logits carry their dot products' rounding, about eps x scale x
	 * sum |q k| (0.64 Dh for these inputs): T5's unscaled ones at Dh 128
	 * pass 1e-5 (seen: 1.04e-5, seed 1796101016301773) */
	check_view(what, out, ref, S, D, ldo, bf16 ? 1e-2 : fmax(TOL, 2 * FLT_EPSILON * scale * Dh));
	free(q);
	free(k);
	free(v);
	free(bias);
	free(out);
	free(ref);
	free(sc);
}

static void test_norms(struct pd_backend *be)
{
	int rows = rnd_int(1, 40), H = rnd_int(1, 4), Dh = 2 * rnd_int(1, 20), dim = H * Dh;
	int ld = dim + rnd_int(0, 4), ldy = dim + rnd_int(0, 4);
	float *x = rnd_buf((size_t)rows * ld, 2.0f), *sc = rnd_buf((size_t)dim, 0.3f), *sh = rnd_buf((size_t)dim, 0.3f);
	float *w = rnd_buf((size_t)Dh, 0.2f), *y = nan_buf((size_t)rows * ldy);
	float *cosv = rnd_buf((size_t)rows * Dh, 1.0f), *sinv = rnd_buf((size_t)rows * Dh, 1.0f);
	float *gate = rnd_buf((size_t)dim, 1.0f), *o = rnd_buf((size_t)rows * ld, 1.0f);
	double *ref = malloc(sizeof(double) * (size_t)rows * dim);
	char what[96];

	/* LayerNorm with weight and bias (either may be absent) */
	{
		float *lw = rnd_buf((size_t)dim, 2.0f), *lb = rnd_buf((size_t)dim, 1.0f);
		int use_w = rnd_int(0, 1), use_b = rnd_int(0, 1);

		be->ops->layernorm(be, y, ldy, x, ld, rows, dim, use_w ? lw : NULL, use_b ? lb : NULL, 1e-5f);
		for (int r = 0; r < rows; r++) {
			double mean = 0, var = 0;

			for (int j = 0; j < dim; j++)
				mean += x[r * ld + j];
			mean /= dim;
			for (int j = 0; j < dim; j++)
				var += (x[r * ld + j] - mean) * (x[r * ld + j] - mean);
			var /= dim;
			for (int j = 0; j < dim; j++)
				ref[(size_t)r * dim + j] = (x[r * ld + j] - mean) / sqrt(var + 1e-5) * (use_w ? lw[j] : 1) +
							   (use_b ? lb[j] : 0);
		}
		snprintf(what, sizeof(what), "layernorm rows=%d dim=%d w=%d b=%d", rows, dim, use_w, use_b);
		check_view(what, y, ref, rows, dim, ldy, TOL);
		free(lw);
		free(lb);
	}
	/* LayerNorm with modulation */
	be->ops->layernorm_mod(be, y, ldy, x, ld, rows, dim, sc, sh, 1e-6f);
	for (int r = 0; r < rows; r++) {
		double mean = 0, var = 0;

		for (int j = 0; j < dim; j++)
			mean += x[r * ld + j];
		mean /= dim;
		for (int j = 0; j < dim; j++)
			var += (x[r * ld + j] - mean) * (x[r * ld + j] - mean);
		var /= dim;
		for (int j = 0; j < dim; j++)
			ref[r * dim + j] = (x[r * ld + j] - mean) / sqrt(var + 1e-6) * (1.0 + sc[j]) + sh[j];
	}
	snprintf(what, sizeof(what), "layernorm_mod rows=%d dim=%d", rows, dim);
	check_view(what, y, ref, rows, dim, ldy, TOL);

	/* RMSNorm per head, in place */
	for (int r = 0; r < rows; r++)
		for (int hh = 0; hh < H; hh++) {
			double ms = 0;

			for (int c = 0; c < Dh; c++)
				ms += (double)x[r * ld + hh * Dh + c] * x[r * ld + hh * Dh + c];
			ms /= Dh;
			for (int c = 0; c < Dh; c++)
				ref[r * dim + hh * Dh + c] = x[r * ld + hh * Dh + c] / sqrt(ms + 1e-6) * w[c];
		}
	for (int r = 0; r < rows; r++)
		for (int j = dim; j < ld; j++)
			x[r * ld + j] = NAN;	/* the padding must stay untouched */
	be->ops->rmsnorm_heads(be, x, ld, rows, H, Dh, w, 1e-6f);
	snprintf(what, sizeof(what), "rmsnorm_heads rows=%d H=%d Dh=%d", rows, H, Dh);
	check_view(what, x, ref, rows, dim, ld, TOL);

	/* the same norm across the whole row, its columns split in two parts
	 * whose sums are added (tensor parallel's way) */
	{
		int c0 = dim / 3;
		float *s0 = malloc(sizeof(float) * (size_t)rows), *s1 = malloc(sizeof(float) * (size_t)rows);
		double *wr = malloc(sizeof(double) * (size_t)dim);

		for (int c = 0; c < dim; c++)
			wr[c] = w[c % Dh];
		for (int r = 0; r < rows; r++) {
			double ms = 0;

			for (int c = 0; c < dim; c++)
				ms += (double)x[r * ld + c] * x[r * ld + c];
			ms /= dim;
			for (int c = 0; c < dim; c++)
				ref[r * dim + c] = x[r * ld + c] / sqrt(ms + 1e-6) * wr[c];
			s0[r] = s1[r] = NAN;	/* poisoned: each must be written */
		}
		be->ops->row_sumsq(be, s0, x, ld, rows, c0);
		be->ops->row_sumsq(be, s1, x + c0, ld, rows, dim - c0);
		for (int r = 0; r < rows; r++)
			s0[r] += s1[r];
		{
			float *wf = malloc(sizeof(float) * (size_t)dim);

			for (int c = 0; c < dim; c++)
				wf[c] = (float)wr[c];
			be->ops->rms_apply(be, x, ld, rows, c0, s0, dim, wf, 1e-6f);
			be->ops->rms_apply(be, x + c0, ld, rows, dim - c0, s0, dim, wf + c0, 1e-6f);
			free(wf);
		}
		snprintf(what, sizeof(what), "row_sumsq + rms_apply rows=%d split %d+%d", rows, c0, dim - c0);
		check_view(what, x, ref, rows, dim, ld, TOL);
		free(s0);
		free(s1);
		free(wr);
	}

	/* RoPE in place on interleaved pairs */
	for (int r = 0; r < rows; r++)
		for (int hh = 0; hh < H; hh++)
			for (int c = 0; c < Dh; c += 2) {
				double a = x[r * ld + hh * Dh + c], bb = x[r * ld + hh * Dh + c + 1];

				ref[r * dim + hh * Dh + c] = a * cosv[r * Dh + c] - bb * sinv[r * Dh + c];
				ref[r * dim + hh * Dh + c + 1] = bb * cosv[r * Dh + c + 1] + a * sinv[r * Dh + c + 1];
			}
	be->ops->rope(be, x, ld, rows, H, Dh, cosv, sinv);
	snprintf(what, sizeof(what), "rope rows=%d H=%d Dh=%d", rows, H, Dh);
	check_view(what, x, ref, rows, dim, ld, TOL);

	/* gated residual */
	for (int r = 0; r < rows; r++)
		for (int j = 0; j < dim; j++)
			ref[r * dim + j] = x[r * ld + j] + (double)gate[j] * o[r * ld + j];
	be->ops->gated_add(be, x, ld, o, ld, rows, dim, gate);
	snprintf(what, sizeof(what), "gated_add rows=%d dim=%d", rows, dim);
	check_view(what, x, ref, rows, dim, ld, TOL);
	free(x);
	free(sc);
	free(sh);
	free(w);
	free(y);
	free(cosv);
	free(sinv);
	free(gate);
	free(o);
	free(ref);
}

static void test_elementwise(struct pd_backend *be)
{
	int n = rnd_int(1, 100000), rows = rnd_int(1, 30), cols = rnd_int(1, 40);
	float *a = rnd_buf((size_t)n, 3.0f), *b = rnd_buf((size_t)n, 1.0f), *y = nan_buf((size_t)n + 1);
	double *ref = malloc(sizeof(double) * (size_t)(n > rows * cols ? n : rows * cols));

	y[n] = NAN;
	be->ops->fill(be, y, -2.5f, (size_t)n);
	for (int i = 0; i < n; i++)
		ref[i] = -2.5;
	check_view("fill", y, ref, 1, n, n, 0);
	PD_CHECK(isnan(y[n]), "fill wrote past the end");
	be->ops->silu(be, y, a, (size_t)n);
	for (int i = 0; i < n; i++)
		ref[i] = a[i] / (1.0 + exp(-(double)a[i]));
	check_view("silu", y, ref, 1, n, n, TOL);
	PD_CHECK(isnan(y[n]), "silu wrote past the end");
	be->ops->add(be, y, a, b, (size_t)n);
	for (int i = 0; i < n; i++)
		ref[i] = (double)a[i] + b[i];
	check_view("add", y, ref, 1, n, n, TOL);
	be->ops->mul(be, y, a, b, (size_t)n);
	for (int i = 0; i < n; i++)
		ref[i] = (double)a[i] * b[i];
	check_view("mul", y, ref, 1, n, n, TOL);
	be->ops->quick_gelu(be, y, a, (size_t)n);
	for (int i = 0; i < n; i++)
		ref[i] = a[i] / (1.0 + exp(-1.702 * (double)a[i]));
	check_view("quick_gelu", y, ref, 1, n, n, TOL);
	PD_CHECK(isnan(y[n]), "quick_gelu wrote past the end");
	free(y);
	y = nan_buf((size_t)rows * cols);
	be->ops->transpose(be, y, a, rows, cols < n / rows ? cols : 1);
	{
		int c2 = cols < n / rows ? cols : 1;

		for (int r = 0; r < rows && r * c2 < n; r++)
			for (int c = 0; c < c2; c++)
				ref[c * rows + r] = a[r * c2 + c];
		if (rows * c2 <= n)
			check_view("transpose", y, ref, c2, rows, rows, 0);
	}
	free(y);
	y = nan_buf((size_t)rows * (cols + 3));
	if (rows * cols <= n) {
		be->ops->copy2d(be, y, cols + 3, a, cols, rows, cols);
		for (int i = 0; i < rows * cols; i++)
			ref[i] = a[i];
		check_view("copy2d", y, ref, rows, cols, cols + 3, 0);
	}
	free(a);
	free(b);
	free(y);
	free(ref);
}

static void test_vae_ops(struct pd_backend *be)
{
	int G = rnd_int(1, 4), C = G * rnd_int(1, 2), h = rnd_int(1, 12), w = rnd_int(1, 12), Co = rnd_int(1, 9);
	int64_t hw = (int64_t)h * w;
	float *x = rnd_buf((size_t)(C * hw), 2.0f), *y = nan_buf((size_t)(C * hw * 4));
	float *gam = rnd_buf((size_t)C, 1.0f), *bet = rnd_buf((size_t)C, 1.0f);
	double *ref = malloc(sizeof(double) * (size_t)(C * hw * 4 + Co * hw));
	char what[96];

	for (int silu = 0; silu < 2; silu++) {
		int cpg = C / G;

		double stats[8], half[8];

		/* the statistics of two halves of every channel add up to the
		 * whole's: what a picture decoded in bands relies on */
		be->ops->group_stats(be, x, C, hw, G, stats);
		if (C % G == 0 && C / G == 1 && hw > 1) {
			double a[8], b[8];
			float *x1 = malloc(sizeof(float) * (size_t)(C * hw)), *x2 = malloc(sizeof(float) * (size_t)(C * hw));
			int64_t h1 = hw / 2;

			for (int ch = 0; ch < C; ch++) {
				memcpy(x1 + ch * h1, x + ch * hw, sizeof(float) * (size_t)h1);
				memcpy(x2 + ch * (hw - h1), x + ch * hw + h1, sizeof(float) * (size_t)(hw - h1));
			}
			be->ops->group_stats(be, x1, C, h1, G, a);
			be->ops->group_stats(be, x2, C, hw - h1, G, b);
			for (int g = 0; g < 2 * G; g++)
				half[g] = a[g] + b[g];
			for (int g = 0; g < 2 * G; g++)
				PD_CHECK(fabs(half[g] - stats[g]) <= 1e-9 * (fabs(stats[g]) + 1), "group stats of halves");
			free(x1);
			free(x2);
		}
		be->ops->group_apply(be, y, hw, x, C, hw, G, stats, (double)(C / G) * (double)hw, gam, bet, 1e-6f, silu);
		for (int g = 0; g < G; g++) {
			double mean = 0, var = 0;
			int64_t n = cpg * hw;

			for (int64_t i = 0; i < n; i++)
				mean += x[g * n + i];
			mean /= (double)n;
			for (int64_t i = 0; i < n; i++)
				var += (x[g * n + i] - mean) * (x[g * n + i] - mean);
			var /= (double)n;
			for (int c = g * cpg; c < (g + 1) * cpg; c++)
				for (int64_t i = 0; i < hw; i++) {
					double t = (x[c * hw + i] - mean) / sqrt(var + 1e-6) * gam[c] + bet[c];

					ref[c * hw + i] = silu ? t / (1 + exp(-t)) : t;
				}
		}
		snprintf(what, sizeof(what), "group_norm C=%d G=%d hw=%lld silu=%d", C, G, (long long)hw, silu);
		check_view(what, y, ref, 1, C * hw, C * hw, TOL);
	}
	pd_poison(y, (size_t)(C * hw * 4));
	be->ops->upsample2x(be, y, 4 * hw, x, C, h, w);
	for (int c = 0; c < C; c++)
		for (int i = 0; i < 2 * h; i++)
			for (int j = 0; j < 2 * w; j++)
				ref[((int64_t)c * 2 * h + i) * 2 * w + j] = x[((int64_t)c * h + i / 2) * w + j / 2];
	check_view("upsample2x", y, ref, 1, C * hw * 4, C * hw * 4, 0);

	for (int k = 1; k <= 3; k += 2) {
		float *wt = rnd_buf((size_t)(Co * C * k * k), 0.3f), *bias = rnd_buf((size_t)Co, 0.1f);
		float *out = nan_buf((size_t)(Co * hw));
		struct pd_conv *cv = be->ops->conv_new(be, Co, C, k, wt, bias);
		int p = (k - 1) / 2;

		PD_CHECK(cv != NULL, "conv_new: %s", be->error);
		if (cv) {
			be->ops->conv(be, cv, x, h, w, 0, out);
			for (int o = 0; o < Co; o++)
				for (int i = 0; i < h; i++)
					for (int j = 0; j < w; j++) {
						double s = bias[o];

						for (int c = 0; c < C; c++)
							for (int di = 0; di < k; di++)
								for (int dj = 0; dj < k; dj++) {
									int yi = i + di - p, xj = j + dj - p;

									if (yi < 0 || yi >= h || xj < 0 || xj >= w)
										continue;
									s += (double)wt[((o * C + c) * k + di) * k + dj] *
									     x[((int64_t)c * h + yi) * w + xj];
								}
						ref[((int64_t)o * h + i) * w + j] = s;
					}
			snprintf(what, sizeof(what), "conv%dx%d C=%d->%d %dx%d", k, k, C, Co, h, w);
			check_view(what, out, ref, 1, Co * hw, Co * hw, TOL);
			if (k == 3) {
				/* a band of rows [r0, r0 + n) given with one row of each
				 * neighbour (zeros past the edges) equals those rows of
				 * the whole convolution */
				int r0 = rnd_int(0, h - 1), n = rnd_int(1, h - r0);
				float *xb = calloc((size_t)(C * (n + 2) * w), sizeof(float));
				float *ob = nan_buf((size_t)(Co * n * w));
				double *rb = malloc(sizeof(double) * (size_t)(Co * n * w));

				for (int ch = 0; ch < C; ch++)
					for (int i = -1; i <= n; i++)
						if (r0 + i >= 0 && r0 + i < h)
							memcpy(xb + ((int64_t)ch * (n + 2) + i + 1) * w,
							       x + ((int64_t)ch * h + r0 + i) * w, sizeof(float) * (size_t)w);
				be->ops->conv(be, cv, xb, n, w, 1, ob);
				for (int o = 0; o < Co; o++)
					for (int i = 0; i < n; i++)
						for (int j = 0; j < w; j++)
							rb[((int64_t)o * n + i) * w + j] = ref[((int64_t)o * h + r0 + i) * w + j];
				snprintf(what, sizeof(what), "conv3x3 band rows %d..%d of %d", r0, r0 + n, h);
				check_view(what, ob, rb, 1, Co * n * w, Co * n * w, TOL);
				free(xb);
				free(ob);
				free(rb);
			}
			be->ops->conv_free(be, cv);
		}
		free(wt);
		free(bias);
		free(out);
	}
	free(x);
	free(y);
	free(gam);
	free(bet);
	free(ref);
}

int main(int argc, char **argv)
{
	unsigned long long seed = argc > 1 ? strtoull(argv[1], NULL, 10) :
						    (unsigned long long)time(NULL) * 1000003ull + (unsigned long long)getpid();
	struct pd_backend *f32 = NULL, *bf16 = NULL, *f32p = NULL, *bf16p = NULL, *bf16q = NULL;

	pd_test_catch_crashes();
	printf("seed %llu (rerun with: test_kernels %llu)\n", seed, seed);
	pd_rng_seed(&rng, seed);
	if (pd_backend_cpu_new(&f32, PD_F32, 0) || pd_backend_cpu_new(&bf16, PD_BF16, 0)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	printf("on %s\n", bf16->device);
	/* quantized layers cut into panels of 1 MB (many, in the big case):
	 * bf16 with the kernels the environment chose (several panels'
	 * offsets through the straight fp8 decoder where AVX-512 runs), then
	 * the same backends with the portable kernels (decoders included),
	 * whose products above 8 rows write the panels in place */
	setenv("PDIT_QPANEL_MB", "1", 1);
	if (pd_backend_cpu_new(&bf16q, PD_BF16, 0)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	setenv("PDIT_NO_AVX512", "1", 1);
	setenv("PDIT_NO_AVX2", "1", 1);
	setenv("PDIT_QDENSE_ROWS", "8", 1);
	if (pd_backend_cpu_new(&f32p, PD_F32, 0) || pd_backend_cpu_new(&bf16p, PD_BF16, 0)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	unsetenv("PDIT_NO_AVX512");
	unsetenv("PDIT_NO_AVX2");
	unsetenv("PDIT_QDENSE_ROWS");
	unsetenv("PDIT_QPANEL_MB");
	for (int round = 0; round < PD_KERNEL_ROUNDS; round++) {
		printf("round %d\n", round + 1);
		test_linear(f32, 0);
		test_linear(bf16, 1);
		for (int k = 0; k < 4; k++) {
			test_qlinear(k % 2 ? f32p : f32, 0, round == 0 && k == 1, 0);
			test_qlinear(k % 2 ? bf16p : bf16, 1, round == 1 && k == 1, 0);
		}
		test_qlinear(bf16q, 1, round % 2, 1);
		for (int k = 0; k < 4; k++)
			test_i8linear(bf16, bf16p, k == 3);
		test_same_input(round % 2 ? bf16p : bf16);
		test_attention(round % 2 ? f32p : f32, 0, round % 3 == 0);
		test_attention(round % 2 ? bf16p : bf16, 1, 0);
		test_attention(bf16, 1, 1);
		test_attention_masked(round % 2 ? f32p : f32, 0, round % 3 == 0);
		test_attention_masked(round % 2 ? bf16p : bf16, 1, 0);
		test_attention_masked(bf16, 1, 1);
		test_norms(f32);
		test_elementwise(f32);
		test_vae_ops(f32);
	}
	PD_CHECK(!f32->failed && !bf16->failed && !f32p->failed && !bf16p->failed && !bf16q->failed,
		 "backend error: %s %s %s %s %s", f32->error, bf16->error, f32p->error, bf16p->error, bf16q->error);
	pd_backend_free(f32);
	pd_backend_free(bf16);
	pd_backend_free(f32p);
	pd_backend_free(bf16p);
	pd_backend_free(bf16q);
	return pd_test_report();
}
