/*
 * cublasLt.h (pdit's CUDA emulation) - the part of cuBLASLt the CUDA backend
 * uses for its bf16 linear layers: one product D = epilogue(alpha op(A)
 * op(B) + beta C) with its bias and GELU (tanh) epilogues, its descriptors,
 * and a heuristic that hands out one algorithm, which remembers the
 * alignments the search was told the operands have (256 bytes unless the
 * preference says less, as cuBLASLt's default) so that a product on less
 * aligned memory fails here as it would misbehave on a GPU. Computed on the
 * CPU by tests/emu/cuda_emu_runtime.c; every operand must be device memory.
 * Names renamed to pd_emu_*; the enums' values are cuBLASLt's.
 */
#ifndef PD_EMU_CUBLASLT_H
#define PD_EMU_CUBLASLT_H

#include "cublas_v2.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_emu_lt *cublasLtHandle_t;
typedef struct pd_emu_lt_desc *cublasLtMatmulDesc_t;
typedef struct pd_emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct pd_emu_lt_pref *cublasLtMatmulPreference_t;
typedef struct {
	uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum {
	CUBLASLT_MATMUL_DESC_TRANSA = 3,
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
	CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
	CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;
typedef enum {
	CUBLASLT_EPILOGUE_DEFAULT = 1,
	CUBLASLT_EPILOGUE_BIAS = 4,
	CUBLASLT_EPILOGUE_GELU = 32,
	CUBLASLT_EPILOGUE_GELU_BIAS = 36,
} cublasLtEpilogue_t;
typedef enum {
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

#define cublasLtCreate pd_emu_cublasLtCreate
#define cublasLtDestroy pd_emu_cublasLtDestroy
#define cublasLtMatmulDescCreate pd_emu_cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy pd_emu_cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute pd_emu_cublasLtMatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate pd_emu_cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy pd_emu_cublasLtMatrixLayoutDestroy
#define cublasLtMatmulPreferenceCreate pd_emu_cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy pd_emu_cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute pd_emu_cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic pd_emu_cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmul pd_emu_cublasLtMatmul

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t bytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
					  int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
						    size_t bytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
					      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
					      cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
					      cublasLtMatmulHeuristicResult_t results[], int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
			      cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
			      const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dd,
			      const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
			      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
