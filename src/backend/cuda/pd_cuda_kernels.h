/*
 * pd_cuda_kernels.h - the launchers of the CUDA backend's own kernels
 * (pd_cuda_kernels.cu), for its host code (pd_backend_cuda.c). Every
 * pointer is device memory; every launch goes on stream S and returns
 * at once. "bf16" operands are __nv_bfloat16, passed as void.
 */
#ifndef PD_CUDA_KERNELS_H
#define PD_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void pd_cuda_fill(cudaStream_t s, float *y, float v, int64_t n);
/* y [rows, cols] of row stride ldy = x of row stride ldx (narrow rows: a
 * copy engine's 2-D copy moves a few bytes a row slowly) */
void pd_cuda_copy2d(cudaStream_t s, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t cols);
/* OP 0: SiLU, 1: quick GELU */
void pd_cuda_unary(cudaStream_t s, float *y, const float *x, int64_t n, int op);
/* OP 0: a * b, 1: a + b, 2: a - b */
void pd_cuda_binary(cudaStream_t s, float *y, const float *a, const float *b, int64_t n, int op);
/* packed bf16 [rows, cols] from f32 of row stride ldx */
void pd_cuda_to_bf16(cudaStream_t s, void *y, const float *x, int64_t rows, int64_t cols, int64_t ldx);
/* y = act(y + bias) over [rows, cols] of row stride ldy */
void pd_cuda_bias_act(cudaStream_t s, float *y, int64_t ldy, int64_t rows, int64_t cols, const float *bias, int gelu);
void pd_cuda_channel_bias(cudaStream_t s, float *y, int64_t ld, int c, int64_t n, const float *bias);
/* The block formats the device decodes (pd_quant.h's ggml types) */
enum pd_cuda_q {
	PD_CQ_CODE,                     /* one-byte codes through a 256-value table (fp8) */
	PD_CQ_Q8_0,
	PD_CQ_Q4_0,
	PD_CQ_Q4_1,
	PD_CQ_Q5_0,
	PD_CQ_Q5_1,
	PD_CQ_Q2_K,
	PD_CQ_Q3_K,
	PD_CQ_Q4_K,
	PD_CQ_Q5_K,
	PD_CQ_Q6_K
};
/* [rows, cols] of TYPE (an enum pd_cuda_q; PD_CQ_CODE through TABLE),
 * rows ROW_BYTES apart, decoded times SCALE into f32 or (BF16) bf16 */
void pd_cuda_dequant(cudaStream_t s, void *dst, int bf16, const void *src, int type, const float *table, float scale,
		     int64_t rows, int64_t cols, int64_t row_bytes);
/* MODE 0: layernorm (w, b), 1: layernorm_mod (w = scale, b = shift) */
void pd_cuda_layernorm(cudaStream_t s, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t dim,
		       const float *w, const float *b, float eps, int mode);
void pd_cuda_rmsnorm_heads(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int heads, int hd, const float *w,
			   float eps);
void pd_cuda_row_sumsq(cudaStream_t s, float *sumsq, const float *x, int64_t ldx, int64_t rows, int64_t cols);
void pd_cuda_rms_apply(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int64_t cols, const float *sumsq,
		       int64_t n, const float *w, float eps);
void pd_cuda_rope(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int heads, int hd, const float *cs,
		  const float *sn);
void pd_cuda_gated_add(cudaStream_t s, float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, int64_t dim,
		       const float *gate);
/* softmax of scaled scores S [heads][sq][skv] into P, LSE at [h * lse_ld + row0 + i] */
void pd_cuda_softmax(cudaStream_t s, const float *S, void *P, int bf16, float *lse, int64_t lse_ld, int heads,
		     int64_t sq, int64_t skv, int64_t row0, const float *bias, int64_t bias_s, int causal);
/* Whether pd_cuda_flash takes heads of HD channels (64, 128). */
int pd_cuda_flash_fits(int hd);
/* Attention of Q [sq, W] over K, V [skv, W] (packed bf16, head h at columns
 * h * hd), SCALE times the scores, fused (the scores stay in registers):
 * OUT f32 of row stride LDO, LSE at [h * lse_ld + i] (may be NULL); ROWS
 * (64 or 128) query rows a block. */
void pd_cuda_flash(cudaStream_t s, const void *q, const void *k, const void *v, int64_t W, float *out, int64_t ldo,
		   float *lse, int64_t lse_ld, int64_t sq, int64_t skv, int heads, int hd, float scale, int rows);
void pd_cuda_lse_merge(cudaStream_t s, float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
		       const float *plse, int64_t sq, int heads, int hd);
/* device bytes group_stats needs for its partial sums */
size_t pd_cuda_group_scratch(int groups);
void pd_cuda_group_stats(cudaStream_t s, const float *x, int c, int64_t hw, int groups, double *stats,
			 double *scratch);
void pd_cuda_group_apply(cudaStream_t s, float *y, int64_t ycs, const float *x, int c, int64_t hw, int groups,
			 const double *stats, double count, const float *gamma, const float *beta, float eps, int silu);
void pd_cuda_rms_channels(cudaStream_t s, float *y, const float *x, int c, int64_t hw, const float *gamma, int silu);
void pd_cuda_upsample2x(cudaStream_t s, float *y, int64_t ycs, const float *x, int c, int h, int w);
void pd_cuda_transpose(cudaStream_t s, float *y, const float *x, int64_t rows, int64_t cols);
void pd_cuda_im2col(cudaStream_t s, void *col, int bf16, const float *x, int c_in, int h, int w, int halo, int k,
		    int r0, int nr);

#ifdef __cplusplus
}
#endif

#endif /* PD_CUDA_KERNELS_H */
