/*
 * cublas_v2.h (pdit's CUDA emulation) - the two products the CUDA backend
 * asks cuBLAS for, as cuBLAS documents them (column-major C = alpha op(A)
 * op(B) + beta C, bf16 or f32 operands, f32 C, f32 accumulation), computed
 * on the CPU by tests/emu/cuda_emu_runtime.c; every operand must be device
 * memory. Names renamed to pd_emu_*.
 */
#ifndef PD_EMU_CUBLAS_V2_H
#define PD_EMU_CUBLAS_V2_H

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_emu_blas *cublasHandle_t;
typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;

#define cublasCreate pd_emu_cublasCreate
#define cublasDestroy pd_emu_cublasDestroy
#define cublasSetStream pd_emu_cublasSetStream
#define cublasSetMathMode pd_emu_cublasSetMathMode
#define cublasGetStatusString pd_emu_cublasGetStatusString
#define cublasGemmEx pd_emu_cublasGemmEx
#define cublasGemmStridedBatchedEx pd_emu_cublasGemmStridedBatchedEx

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
const char *cublasGetStatusString(cublasStatus_t st);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
			    int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
			    cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
					  int k, const void *alpha, const void *A, cudaDataType at, int lda,
					  long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
					  const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
					  cublasComputeType_t compute, cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif

#endif
