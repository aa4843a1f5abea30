/*
 * pd_backend_cuda.h - the CUDA backend: one GPU, one stream, matrix
 * products through cuBLAS and cuBLASLt (bf16 in, f32 accumulate, a linear
 * layer's bias and GELU in its product; or f32 without TF32), attention
 * fused in bf16 or as chunks of batched products around a softmax kernel, the
 * convolutions as column blocks times the kernel, everything else in own
 * kernels (pd_cuda_kernels.cu).
 */
#ifndef PD_BACKEND_CUDA_H
#define PD_BACKEND_CUDA_H

#include "pd_backend.h"

/* A backend on GPU DEVICE computing products in COMPUTE (PD_F32 or PD_BF16). */
int pd_backend_cuda_new(struct pd_backend **out, enum pd_dtype compute, int device);

/* CUDA devices this process sees (0 without a driver or a device). */
int pd_backend_cuda_devices(void);

/* Why there are none, for the message that says so. */
const char *pd_backend_cuda_why(void);

#endif /* PD_BACKEND_CUDA_H */
