/*
 * pd_cuda_kernels.cu - the CUDA backend's own kernels, each behind a C
 * launcher (pd_cuda_kernels.h) that pd_backend_cuda.c calls on its stream.
 * They follow the CPU backend's definitions operation by operation (the
 * same formulas, reductions in double where the CPU sums in double), so the
 * conformance suite holds them to a few ulps of the CPU.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "pd_cuda_kernels.h"

/* A launch: on a GPU, NAME<<<GRID, BLOCK, 0, S>>>(...); in the emulation
 * (tests/emu/cuda_emu.h, which defines both) on the CPU, the threads of a
 * _COOP kernel (barriers, shuffles, tensor-core products) together, the
 * others' one after another. */
#ifndef PD_CUDA_EMULATE
#define PD_LAUNCH(k, grid, block, s, ...) k<<<grid, block, 0, s>>>(__VA_ARGS__)
#define PD_LAUNCH_COOP PD_LAUNCH
#endif

/* threads a block */
#define PD_THREADS 256

static unsigned pd_blocks(int64_t n)
{
	int64_t b = (n + PD_THREADS - 1) / PD_THREADS;

	return (unsigned)(b < 1 ? 1 : b > 1048576 ? 1048576 : b);
}

/* grid-stride loop over N elements */
#define PD_FOR(i, n) \
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__device__ static float pd_sigmoid_mul(float x, float a)
{
	return x * (1.0f / (1.0f + expf(-a * x)));
}

/* A block's sum of V in double, in a fixed order (deterministic). */
__device__ static double pd_block_sum(double v, double *sh)
{
	int t = threadIdx.x;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	__syncthreads();
	if ((t & 31) == 0)
		sh[t >> 5] = v;
	__syncthreads();
	if (t < 32) {
		v = t < (int)(blockDim.x >> 5) ? sh[t] : 0.0;
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, o);
		if (t == 0)
			sh[0] = v;
	}
	__syncthreads();
	v = sh[0];
	__syncthreads();
	return v;
}

/* ----------------------------------------------------------------------- */
/* Elementwise                                                             */
/* ----------------------------------------------------------------------- */

__global__ static void k_fill(float *y, float v, int64_t n)
{
	PD_FOR(i, n) y[i] = v;
}

__global__ static void k_unary(float *y, const float *x, int64_t n, int op)
{
	PD_FOR(i, n)
	{
		float v = x[i];

		y[i] = op == 0 ? v / (1.0f + expf(-v)) : pd_sigmoid_mul(v, 1.702f);
	}
}

__global__ static void k_binary(float *y, const float *a, const float *b, int64_t n, int op)
{
	PD_FOR(i, n) y[i] = op == 0 ? a[i] * b[i] : op == 1 ? a[i] + b[i] : a[i] - b[i];
}

/* one element a thread over [rows, cols] */
__global__ static void k_copy2d(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t cols)
{
	PD_FOR(i, rows * cols) y[(i / cols) * ldy + i % cols] = x[(i / cols) * ldx + i % cols];
}

extern "C" void pd_cuda_copy2d(cudaStream_t s, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
			       int64_t cols)
{
	if (rows > 0 && cols > 0)
		PD_LAUNCH(k_copy2d, pd_blocks(rows * cols), PD_THREADS, s, y, ldy, x, ldx, rows, cols);
}

extern "C" void pd_cuda_fill(cudaStream_t s, float *y, float v, int64_t n)
{
	if (n > 0)
		PD_LAUNCH(k_fill, pd_blocks(n), PD_THREADS, s, y, v, n);
}

extern "C" void pd_cuda_unary(cudaStream_t s, float *y, const float *x, int64_t n, int op)
{
	if (n > 0)
		PD_LAUNCH(k_unary, pd_blocks(n), PD_THREADS, s, y, x, n, op);
}

extern "C" void pd_cuda_binary(cudaStream_t s, float *y, const float *a, const float *b, int64_t n, int op)
{
	if (n > 0)
		PD_LAUNCH(k_binary, pd_blocks(n), PD_THREADS, s, y, a, b, n, op);
}

/* ----------------------------------------------------------------------- */
/* Operands of the products                                                */
/* ----------------------------------------------------------------------- */

__global__ static void k_to_bf16(__nv_bfloat16 *y, const float *x, int64_t rows, int64_t cols, int64_t ldx)
{
	PD_FOR(i, rows * cols)
	{
		int64_t r = i / cols, c = i - r * cols;

		y[i] = __float2bfloat16_rn(x[r * ldx + c]);
	}
}

extern "C" void pd_cuda_to_bf16(cudaStream_t s, void *y, const float *x, int64_t rows, int64_t cols, int64_t ldx)
{
	if (rows * cols > 0)
		PD_LAUNCH(k_to_bf16, pd_blocks(rows * cols), PD_THREADS, s, (__nv_bfloat16 *)y, x, rows, cols, ldx);
}

/* oneDNN's gelu_tanh, as the CPU backend applies it */
__device__ static float pd_gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)));
}

__global__ static void k_bias_act(float *y, int64_t ldy, int64_t rows, int64_t cols, const float *bias, int gelu)
{
	PD_FOR(i, rows * cols)
	{
		int64_t r = i / cols, c = i - r * cols;
		float v = y[r * ldy + c];

		if (bias)
			v = v + bias[c];
		y[r * ldy + c] = gelu ? pd_gelu_tanh(v) : v;
	}
}

extern "C" void pd_cuda_bias_act(cudaStream_t s, float *y, int64_t ldy, int64_t rows, int64_t cols, const float *bias,
				 int gelu)
{
	if (rows * cols > 0 && (bias || gelu))
		PD_LAUNCH(k_bias_act, pd_blocks(rows * cols), PD_THREADS, s, y, ldy, rows, cols, bias, gelu);
}

/* Channel bias of a convolution's output [c, n] (row stride ld). */
__global__ static void k_channel_bias(float *y, int64_t ld, int c, int64_t n, const float *bias)
{
	PD_FOR(i, (int64_t)c * n)
	{
		int64_t ch = i / n, j = i - ch * n;

		y[ch * ld + j] += bias[ch];
	}
}

extern "C" void pd_cuda_channel_bias(cudaStream_t s, float *y, int64_t ld, int c, int64_t n, const float *bias)
{
	if ((int64_t)c * n > 0 && bias)
		PD_LAUNCH(k_channel_bias, pd_blocks((int64_t)c * n), PD_THREADS, s, y, ld, c, n, bias);
}

/* ---- quantized weights: ggml's block layouts, one element at a time -- */

/* the f16 at P, little-endian */
__device__ static float pd_half_at(const uint8_t *p)
{
	__half_raw hr;

	hr.x = (unsigned short)(p[0] | p[1] << 8);
	return __half2float(__half(hr));
}

/* ggml's get_scale_min_k4: Q4_K's and Q5_K's 6-bit scale and min of
 * sub-block J from their 12 packed bytes Q */
__device__ static void pd_k4(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* Element C of a row of TYPE (pd_cuda_kernels.h): the float32 value
 * pd_quant_decode gives, by the same operations in the same order (no
 * fused multiply-add: --fmad=false), so bit for bit the CPU's. A K type's
 * 256 elements run in halves of 128 (Q2_K, Q3_K, Q6_K: groups of 32 in
 * two sub-blocks of 16) or in groups of 64 (Q4_K, Q5_K: sub-blocks of 32
 * sharing a byte's two nibbles). */
__device__ static float pd_q_value(const uint8_t *row, int type, int64_t c, const float *table)
{
	const int j = (int)(c & 31), e = (int)(c & 255);
	const int half = e >> 7, grp = (e >> 5) & 3, sub = (e >> 4) & 1, l16 = e & 15;
	const int g64 = e >> 6, hi = (e >> 5) & 1;
	const uint8_t *b;
	int q, sc, m;

	switch (type) {
	case PD_CQ_Q8_0:
		b = row + (c >> 5) * 34;
		return (float)(int8_t)b[2 + j] * pd_half_at(b);
	case PD_CQ_Q4_0:
		b = row + (c >> 5) * 18;
		q = j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4;
		return (float)(q - 8) * pd_half_at(b);
	case PD_CQ_Q4_1:
		b = row + (c >> 5) * 20;
		q = j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4;
		return (float)q * pd_half_at(b) + pd_half_at(b + 2);
	case PD_CQ_Q5_0:
	case PD_CQ_Q5_1: {
		const int one = type == PD_CQ_Q5_1, at = one ? 4 : 2;
		uint32_t qh;

		b = row + (c >> 5) * (one ? 24 : 22);
		qh = (uint32_t)b[at] | (uint32_t)b[at + 1] << 8 | (uint32_t)b[at + 2] << 16 | (uint32_t)b[at + 3] << 24;
		q = j < 16 ? (b[at + 4 + j] & 15) | ((qh >> j) << 4 & 0x10)
			   : (b[at + 4 + j - 16] >> 4) | ((qh >> (j - 16 + 12)) & 0x10);
		return one ? (float)q * pd_half_at(b) + pd_half_at(b + 2) : (float)(q - 16) * pd_half_at(b);
	}
	case PD_CQ_Q2_K: {
		/* scales[16], qs[64], d, dmin */
		b = row + (c >> 8) * 84;
		const int s = b[half * 8 + 2 * grp + sub];
		const float dl = pd_half_at(b + 80) * (float)(s & 0xF), ml = pd_half_at(b + 82) * (float)(s >> 4);

		q = (b[16 + half * 32 + sub * 16 + l16] >> (2 * grp)) & 3;
		return dl * (float)q - ml;
	}
	case PD_CQ_Q3_K: {
		/* hmask[32], qs[64], scales[12] (16 of 6 bits), d */
		b = row + (c >> 8) * 110;
		const uint8_t *s = b + 96;
		const int is = half * 8 + 2 * grp + sub, k = is & 3, gs = is >> 2;
		const int lo = gs & 1 ? s[4 + k] : s[k];

		sc = (gs < 2 ? lo & 15 : lo >> 4) | ((s[8 + k] >> (2 * gs)) & 3) << 4;
		q = ((b[32 + half * 32 + sub * 16 + l16] >> (2 * grp)) & 3) -
		    (b[sub * 16 + l16] & (1 << (half * 4 + grp)) ? 0 : 4);
		return pd_half_at(b + 108) * (float)(sc - 32) * (float)q;
	}
	case PD_CQ_Q4_K:
	case PD_CQ_Q5_K: {
		/* d, dmin, scales[12], (Q5_K: qh[32],) qs[128] */
		const int five = type == PD_CQ_Q5_K;

		b = row + (c >> 8) * (five ? 176 : 144);
		pd_k4(2 * g64 + hi, b + 4, &sc, &m);
		const float d1 = pd_half_at(b) * (float)sc, m1 = pd_half_at(b + 2) * (float)m;
		const int qb = b[(five ? 48 : 16) + g64 * 32 + j];

		q = hi ? qb >> 4 : qb & 15;
		if (five && (b[16 + j] & (1 << (2 * g64 + hi))))
			q += 16;
		return d1 * (float)q - m1;
	}
	case PD_CQ_Q6_K: {
		/* ql[128], qh[64], scales[16] (int8), d; the 4 groups of 32 of a
		 * half: ql's low nibbles, then high, of its 64 bytes' two halves */
		b = row + (c >> 8) * 210;
		const int qlb = b[half * 64 + (grp & 1) * 32 + j];

		q = (int8_t)((grp < 2 ? qlb & 15 : qlb >> 4) | ((b[128 + half * 32 + j] >> (2 * grp)) & 3) << 4) - 32;
		return pd_half_at(b + 208) * (float)(int8_t)b[192 + half * 8 + (j >> 4) + 2 * grp] * (float)q;
	}
	case PD_CQ_CODE:
		return table[row[c]];
	default:
		/* a format the host never keeps: NaN, as pd_quant_decode's */
		return nanf("");
	}
}

/* Quantized weights into the products' operand, times SCALE (scaled fp8). */
__global__ static void k_dequant(void *dst, int bf16, const uint8_t *src, int type, const float *table, float scale,
				 int64_t rows, int64_t cols, int64_t row_bytes)
{
	PD_FOR(i, rows * cols)
	{
		int64_t r = i / cols, c = i - r * cols;
		float v = pd_q_value(src + r * row_bytes, type, c, table);

		v = v * scale;
		if (bf16)
			((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
		else
			((float *)dst)[i] = v;
	}
}

extern "C" void pd_cuda_dequant(cudaStream_t s, void *dst, int bf16, const void *src, int type, const float *table,
				float scale, int64_t rows, int64_t cols, int64_t row_bytes)
{
	if (rows * cols > 0)
		PD_LAUNCH(k_dequant, pd_blocks(rows * cols), PD_THREADS, s, dst, bf16, (const uint8_t *)src, type,
			  table, scale, rows, cols, row_bytes);
}

/* ----------------------------------------------------------------------- */
/* Normalisations                                                          */
/* ----------------------------------------------------------------------- */

/* One block a row: the mean, then the spread about it, in double (the
 * CPU's two passes), the mean kept as two floats MEAN + LOW as the CPU
 * keeps it (pd_row_stats: a float mean alone moves outputs by up to 4e-5);
 * MODE 0 layernorm (w, b may be NULL), 1 layernorm_mod (scale and shift
 * both NULL: plain). */
__global__ static void k_layernorm(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t dim, const float *w,
				   const float *b, float eps, int mode)
{
	__shared__ double sh[32];
	const float *xr = x + blockIdx.x * ldx;
	float *yr = y + blockIdx.x * ldy;
	double sum = 0, sq = 0, md;
	float mean, low, rstd;

	for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
		sum += xr[j];
	sum = pd_block_sum(sum, sh);
	md = sum / (double)dim;
	mean = (float)md;
	low = (float)(md - (double)mean);
	for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
		double d = (double)xr[j] - md;

		sq += d * d;
	}
	sq = pd_block_sum(sq, sh);
	rstd = (float)(1.0 / sqrt(sq / (double)dim + (double)eps));
	for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
		float t = ((xr[j] - mean) - low) * rstd;

		if (mode == 0) {
			if (w)
				t = t * w[j];
			yr[j] = b ? t + b[j] : t;
		} else {
			yr[j] = w ? t * (1.0f + w[j]) + b[j] : t;
		}
	}
}

extern "C" void pd_cuda_layernorm(cudaStream_t s, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
				  int64_t dim, const float *w, const float *b, float eps, int mode)
{
	if (rows > 0)
		PD_LAUNCH_COOP(k_layernorm, (unsigned)rows, PD_THREADS, s, y, ldy, x, ldx, dim, w, b, eps, mode);
}

/* One warp a (row, head). */
__global__ static void k_rmsnorm_heads(float *x, int64_t ldx, int64_t rows, int heads, int hd, const float *w,
				       float eps)
{
	int64_t task = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	int lane = threadIdx.x & 31;
	float *v;
	double sq = 0;
	float rs;

	if (task >= rows * heads)
		return;
	v = x + (task / heads) * ldx + (task % heads) * (int64_t)hd;
	for (int d = lane; d < hd; d += 32)
		sq += (double)v[d] * v[d];
	for (int o = 16; o > 0; o >>= 1)
		sq += __shfl_xor_sync(0xffffffffu, sq, o);
	rs = (float)(1.0 / sqrt(sq / hd + (double)eps));
	for (int d = lane; d < hd; d += 32)
		v[d] = (v[d] * rs) * w[d];
}

extern "C" void pd_cuda_rmsnorm_heads(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int heads, int hd,
				      const float *w, float eps)
{
	int64_t n = rows * heads * 32;

	if (n > 0)
		PD_LAUNCH_COOP(k_rmsnorm_heads, (unsigned)((n + PD_THREADS - 1) / PD_THREADS), PD_THREADS, s, x, ldx,
			       rows, heads, hd, w, eps);
}

__global__ static void k_row_sumsq(float *sumsq, const float *x, int64_t ldx, int64_t cols)
{
	__shared__ double sh[32];
	const float *v = x + blockIdx.x * ldx;
	double sq = 0;

	for (int64_t d = threadIdx.x; d < cols; d += blockDim.x)
		sq += (double)v[d] * v[d];
	sq = pd_block_sum(sq, sh);
	if (threadIdx.x == 0)
		sumsq[blockIdx.x] = (float)sq;
}

extern "C" void pd_cuda_row_sumsq(cudaStream_t s, float *sumsq, const float *x, int64_t ldx, int64_t rows, int64_t cols)
{
	if (rows > 0)
		PD_LAUNCH_COOP(k_row_sumsq, (unsigned)rows, PD_THREADS, s, sumsq, x, ldx, cols);
}

__global__ static void k_rms_apply(float *x, int64_t ldx, int64_t rows, int64_t cols, const float *sumsq, int64_t n,
				   const float *w, float eps)
{
	PD_FOR(i, rows * cols)
	{
		int64_t r = i / cols, d = i - r * cols;
		float rs = (float)(1.0 / sqrt((double)sumsq[r] / (double)n + (double)eps));
		float *v = x + r * ldx;

		v[d] = (v[d] * rs) * w[d];
	}
}

extern "C" void pd_cuda_rms_apply(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int64_t cols, const float *sumsq,
				  int64_t n, const float *w, float eps)
{
	if (rows * cols > 0)
		PD_LAUNCH(k_rms_apply, pd_blocks(rows * cols), PD_THREADS, s, x, ldx, rows, cols, sumsq, n, w, eps);
}

__global__ static void k_rope(float *x, int64_t ldx, int64_t rows, int heads, int hd, const float *cs, const float *sn)
{
	int64_t pairs = (int64_t)heads * (hd / 2);

	PD_FOR(i, rows * pairs)
	{
		int64_t r = i / pairs, p = i - r * pairs;
		int h = (int)(p / (hd / 2)), d = 2 * (int)(p % (hd / 2));
		const float *c = cs + r * hd, *sv = sn + r * hd;
		float *v = x + r * ldx + (int64_t)h * hd;
		float a = v[d], b = v[d + 1];
		float t0 = a * c[d], t1 = b * sv[d];
		float u0 = b * c[d + 1], u1 = a * sv[d + 1];

		v[d] = t0 - t1;
		v[d + 1] = u0 + u1;
	}
}

extern "C" void pd_cuda_rope(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int heads, int hd, const float *cs,
			     const float *sn)
{
	int64_t n = rows * heads * (hd / 2);

	if (n > 0)
		PD_LAUNCH(k_rope, pd_blocks(n), PD_THREADS, s, x, ldx, rows, heads, hd, cs, sn);
}

__global__ static void k_gated_add(float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, int64_t dim,
				   const float *gate)
{
	PD_FOR(i, rows * dim)
	{
		int64_t r = i / dim, j = i - r * dim;
		float t = gate[j] * y[r * ldy + j];

		x[r * ldx + j] = x[r * ldx + j] + t;
	}
}

extern "C" void pd_cuda_gated_add(cudaStream_t s, float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows,
				  int64_t dim, const float *gate)
{
	if (rows * dim > 0)
		PD_LAUNCH(k_gated_add, pd_blocks(rows * dim), PD_THREADS, s, x, ldx, y, ldy, rows, dim, gate);
}

/* ----------------------------------------------------------------------- */
/* Attention's softmax and merge                                           */
/* ----------------------------------------------------------------------- */

/* One block a score row of S [heads][sq][skv] (already scaled): plus BIAS
 * [heads][s][s] and the causal mask (query row0 + i sees keys j <= row0 +
 * i), softmax into P (f32 or bf16, the same layout), log-sum-exp into LSE
 * [heads][lse_ld] at row0 + i (may be NULL). */
__global__ static void k_softmax(const float *S, void *P, int bf16, float *lse, int64_t lse_ld, int64_t sq, int64_t skv,
				 int64_t row0, const float *bias, int64_t bias_s, int causal)
{
	__shared__ double shd[32];
	__shared__ float shf[32];
	int64_t row = blockIdx.x, h = row / sq, i = row - h * sq, qi = row0 + i;
	const float *s = S + row * skv;
	const float *bi = bias ? bias + (h * bias_s + qi) * bias_s : NULL;
	int64_t n = causal ? (qi + 1 < skv ? qi + 1 : skv) : skv;
	float m = -INFINITY;
	double sum = 0;
	int t = threadIdx.x;

	for (int64_t j = t; j < n; j += blockDim.x)
		m = fmaxf(m, bi ? s[j] + bi[j] : s[j]);
	for (int o = 16; o > 0; o >>= 1)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	if ((t & 31) == 0)
		shf[t >> 5] = m;
	__syncthreads();
	m = -INFINITY;
	for (int k = 0; k < (int)(blockDim.x >> 5); k++)
		m = fmaxf(m, shf[k]);
	if (m == -INFINITY) {
		/* nothing to attend: zeros and an empty log-sum-exp */
		for (int64_t j = t; j < skv; j += blockDim.x) {
			if (bf16)
				((__nv_bfloat16 *)P)[row * skv + j] = __float2bfloat16_rn(0.0f);
			else
				((float *)P)[row * skv + j] = 0.0f;
		}
		if (lse && t == 0)
			lse[h * lse_ld + qi] = -INFINITY;
		return;
	}
	for (int64_t j = t; j < n; j += blockDim.x)
		sum += (double)expf((bi ? s[j] + bi[j] : s[j]) - m);
	sum = pd_block_sum(sum, shd);
	for (int64_t j = t; j < skv; j += blockDim.x) {
		float p = j < n ? (float)((double)expf((bi ? s[j] + bi[j] : s[j]) - m) / sum) : 0.0f;

		if (bf16)
			((__nv_bfloat16 *)P)[row * skv + j] = __float2bfloat16_rn(p);
		else
			((float *)P)[row * skv + j] = p;
	}
	if (lse && t == 0)
		lse[h * lse_ld + qi] = m + (float)log(sum);
}

extern "C" void pd_cuda_softmax(cudaStream_t s, const float *S, void *P, int bf16, float *lse, int64_t lse_ld,
				int heads, int64_t sq, int64_t skv, int64_t row0, const float *bias, int64_t bias_s,
				int causal)
{
	if (heads * sq > 0)
		PD_LAUNCH_COOP(k_softmax, (unsigned)(heads * sq), PD_THREADS, s, S, P, bf16, lse, lse_ld, sq, skv, row0,
			       bias, bias_s, causal);
}

__global__ static void k_lse_merge(float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
				   const float *plse, int64_t sq, int heads, int hd)
{
	PD_FOR(t, (int64_t)heads * sq)
	{
		int64_t h = t / sq, i = t - h * sq;
		float l1 = lse[t], l2 = plse[t], w, d;
		float *o = out + i * ldo + h * hd;
		const float *p = part + i * ldp + h * hd;

		if (l2 == -INFINITY)
			continue;
		if (l1 == -INFINITY) {
			for (int c = 0; c < hd; c++)
				o[c] = p[c];
			lse[t] = l2;
			continue;
		}
		d = l2 - l1;
		w = d >= 0 ? 1.0f / (1.0f + expf(-d)) : expf(d) / (1.0f + expf(d));
		for (int c = 0; c < hd; c++)
			o[c] = o[c] - w * (o[c] - p[c]);
		lse[t] = (d >= 0 ? l2 : l1) + log1pf(expf(-fabsf(d)));
	}
}

extern "C" void pd_cuda_lse_merge(cudaStream_t s, float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
				  const float *plse, int64_t sq, int heads, int hd)
{
	if (sq * heads > 0)
		PD_LAUNCH(k_lse_merge, pd_blocks(sq * heads), PD_THREADS, s, out, ldo, lse, part, ldp, plse, sq, heads,
			  hd);
}

/* ----------------------------------------------------------------------- */
/* Flash attention                                                         */
/* ----------------------------------------------------------------------- */

#include "pd_cuda_flash.cuh"

extern "C" int pd_cuda_flash_fits(int hd)
{
	return hd == 64 || hd == 128;
}

extern "C" void pd_cuda_flash(cudaStream_t s, const void *q, const void *k, const void *v, int64_t W, float *out,
			      int64_t ldo, float *lse, int64_t lse_ld, int64_t sq, int64_t skv, int heads, int hd,
			      float scale, int rows)
{
	dim3 grid((unsigned)((sq + rows - 1) / rows), (unsigned)heads);
	const __nv_bfloat16 *Q = (const __nv_bfloat16 *)q, *K = (const __nv_bfloat16 *)k, *V = (const __nv_bfloat16 *)v;

	if (sq <= 0 || skv <= 0)
		return;
	if (hd == 128 && rows == 128)
		PD_LAUNCH_COOP((k_flash<128, 8>), grid, 256, s, Q, K, V, W, out, ldo, lse, lse_ld, sq, skv, scale);
	else if (hd == 128)
		PD_LAUNCH_COOP((k_flash<128, 4>), grid, 128, s, Q, K, V, W, out, ldo, lse, lse_ld, sq, skv, scale);
	else if (rows == 128)
		PD_LAUNCH_COOP((k_flash<64, 8>), grid, 256, s, Q, K, V, W, out, ldo, lse, lse_ld, sq, skv, scale);
	else
		PD_LAUNCH_COOP((k_flash<64, 4>), grid, 128, s, Q, K, V, W, out, ldo, lse, lse_ld, sq, skv, scale);
}

/* ----------------------------------------------------------------------- */
/* The VAEs'                                                               */
/* ----------------------------------------------------------------------- */

#define PD_GN_CHUNKS 64

/* Partial sums of each group over PD_GN_CHUNKS chunks, then the chunks
 * added in order: the same sums every run. */
__global__ static void k_group_partial(const float *x, int64_t per_group, double *part)
{
	__shared__ double sh[32];
	int g = blockIdx.x, ck = blockIdx.y;
	int64_t len = (per_group + PD_GN_CHUNKS - 1) / PD_GN_CHUNKS, a = ck * len,
		b = a + len < per_group ? a + len : per_group;
	const float *xg = x + (int64_t)g * per_group;
	double sum = 0, sq = 0;

	for (int64_t i = a + threadIdx.x; i < b; i += blockDim.x) {
		sum += xg[i];
		sq += (double)xg[i] * xg[i];
	}
	sum = pd_block_sum(sum, sh);
	sq = pd_block_sum(sq, sh);
	if (threadIdx.x == 0) {
		part[((int64_t)g * PD_GN_CHUNKS + ck) * 2] = sum;
		part[((int64_t)g * PD_GN_CHUNKS + ck) * 2 + 1] = sq;
	}
}

__global__ static void k_group_final(const double *part, int groups, double *stats)
{
	int g = blockIdx.x * blockDim.x + threadIdx.x;
	double sum = 0, sq = 0;

	if (g >= groups)
		return;
	for (int ck = 0; ck < PD_GN_CHUNKS; ck++) {
		sum += part[((int64_t)g * PD_GN_CHUNKS + ck) * 2];
		sq += part[((int64_t)g * PD_GN_CHUNKS + ck) * 2 + 1];
	}
	stats[2 * g] = sum;
	stats[2 * g + 1] = sq;
}

extern "C" size_t pd_cuda_group_scratch(int groups)
{
	return (size_t)groups * PD_GN_CHUNKS * 2 * sizeof(double);
}

extern "C" void pd_cuda_group_stats(cudaStream_t s, const float *x, int c, int64_t hw, int groups, double *stats,
				    double *scratch)
{
	dim3 grid((unsigned)groups, PD_GN_CHUNKS);

	if (groups < 1)
		return;
	PD_LAUNCH_COOP(k_group_partial, grid, PD_THREADS, s, x, (int64_t)(c / groups) * hw, scratch);
	PD_LAUNCH(k_group_final, (unsigned)((groups + 63) / 64), 64, s, scratch, groups, stats);
}

__global__ static void k_group_apply(float *y, int64_t ycs, const float *x, int c, int64_t hw, int groups,
				     const double *stats, double count, const float *gamma, const float *beta,
				     float eps, int silu)
{
	int cpg = c / groups;

	PD_FOR(i, (int64_t)c * hw)
	{
		int64_t ch = i / hw, j = i - ch * hw;
		int g = (int)ch / cpg;
		double mean_d = stats[2 * g] / count, var = stats[2 * g + 1] / count - mean_d * mean_d;
		float mean = (float)mean_d, rstd = (float)(1.0 / sqrt((var > 0 ? var : 0) + (double)eps));
		float t = ((x[i] - mean) * rstd) * gamma[ch] + beta[ch];

		y[ch * ycs + j] = silu ? t / (1.0f + expf(-t)) : t;
	}
}

extern "C" void pd_cuda_group_apply(cudaStream_t s, float *y, int64_t ycs, const float *x, int c, int64_t hw,
				    int groups, const double *stats, double count, const float *gamma,
				    const float *beta, float eps, int silu)
{
	if ((int64_t)c * hw > 0 && groups > 0)
		PD_LAUNCH(k_group_apply, pd_blocks((int64_t)c * hw), PD_THREADS, s, y, ycs, x, c, hw, groups, stats,
			  count, gamma, beta, eps, silu);
}

__global__ static void k_rms_channels(float *y, const float *x, int c, int64_t hw, const float *gamma, int silu)
{
	float scale = sqrtf((float)c);

	PD_FOR(i, hw)
	{
		float s = 0, d;

		for (int ch = 0; ch < c; ch++)
			s += x[(int64_t)ch * hw + i] * x[(int64_t)ch * hw + i];
		d = sqrtf(s);
		d = d > 1e-12f ? d : 1e-12f;
		for (int ch = 0; ch < c; ch++) {
			float t = (x[(int64_t)ch * hw + i] / d) * scale * gamma[ch];

			y[(int64_t)ch * hw + i] = silu ? t / (1.0f + expf(-t)) : t;
		}
	}
}

extern "C" void pd_cuda_rms_channels(cudaStream_t s, float *y, const float *x, int c, int64_t hw, const float *gamma,
				     int silu)
{
	if (hw > 0)
		PD_LAUNCH(k_rms_channels, pd_blocks(hw), PD_THREADS, s, y, x, c, hw, gamma, silu);
}

__global__ static void k_upsample2x(float *y, int64_t ycs, const float *x, int c, int h, int w)
{
	int64_t per = (int64_t)4 * h * w;

	PD_FOR(i, (int64_t)c * per)
	{
		int64_t ch = i / per, k = i - ch * per, r = k / (2 * w), q = k - r * 2 * w;

		y[ch * ycs + k] = x[(ch * h + r / 2) * w + q / 2];
	}
}

extern "C" void pd_cuda_upsample2x(cudaStream_t s, float *y, int64_t ycs, const float *x, int c, int h, int w)
{
	int64_t n = (int64_t)c * 4 * h * w;

	if (n > 0)
		PD_LAUNCH(k_upsample2x, pd_blocks(n), PD_THREADS, s, y, ycs, x, c, h, w);
}

__global__ static void k_transpose(float *y, const float *x, int64_t rows, int64_t cols)
{
	__shared__ float tile[32][33];
	int64_t tiles_c = (cols + 31) / 32, t = blockIdx.x + (int64_t)blockIdx.y * gridDim.x;
	int64_t c0 = (t % tiles_c) * 32, r0 = (t / tiles_c) * 32;

	if (r0 >= rows)
		return;

	for (int k = threadIdx.y; k < 32; k += blockDim.y) {
		int64_t r = r0 + k, c = c0 + threadIdx.x;

		if (r < rows && c < cols)
			tile[k][threadIdx.x] = x[r * cols + c];
	}
	__syncthreads();
	for (int k = threadIdx.y; k < 32; k += blockDim.y) {
		int64_t c = c0 + k, r = r0 + threadIdx.x;

		if (r < rows && c < cols)
			y[c * rows + r] = tile[threadIdx.x][k];
	}
}

extern "C" void pd_cuda_transpose(cudaStream_t s, float *y, const float *x, int64_t rows, int64_t cols)
{
	/* tiles numbered in x then y: any shape within the grid's limits */
	int64_t tiles = ((cols + 31) / 32) * ((rows + 31) / 32);
	dim3 grid((unsigned)(tiles < 65535 ? tiles : 65535), (unsigned)((tiles + 65534) / 65535)), block(32, 8);

	if (rows * cols > 0)
		PD_LAUNCH_COOP(k_transpose, grid, block, s, y, x, rows, cols);
}

/* Convolution's columns: col[(ci k + ky) k + kx][n] for output positions n
 * of rows [r0, r0 + nr) (f32 or bf16). X has H + 2 HALO rows; without a
 * halo the height is zero-padded, the width always. */
__global__ static void k_im2col(void *col, int bf16, const float *x, int c_in, int h, int w, int halo, int k, int r0,
				int nr)
{
	int64_t npos = (int64_t)nr * w, total = (int64_t)c_in * k * k * npos;
	int pad = (k - 1) / 2, hin = h + 2 * halo;

	PD_FOR(i, total)
	{
		int64_t row = i / npos, n = i - row * npos;
		int ci = (int)(row / (k * k)), kk = (int)(row % (k * k)), ky = kk / k, kx = kk % k;
		int y = r0 + (int)(n / w), xx = (int)(n % w);
		int iy = y + ky - pad + halo, ix = xx + kx - pad;
		float v = iy >= 0 && iy < hin && ix >= 0 && ix < w ? x[((int64_t)ci * hin + iy) * w + ix] : 0.0f;

		if (bf16)
			((__nv_bfloat16 *)col)[i] = __float2bfloat16_rn(v);
		else
			((float *)col)[i] = v;
	}
}

extern "C" void pd_cuda_im2col(cudaStream_t s, void *col, int bf16, const float *x, int c_in, int h, int w, int halo,
			       int k, int r0, int nr)
{
	int64_t n = (int64_t)c_in * k * k * nr * w;

	if (n > 0)
		PD_LAUNCH(k_im2col, pd_blocks(n), PD_THREADS, s, col, bf16, x, c_in, h, w, halo, k, r0, nr);
}
