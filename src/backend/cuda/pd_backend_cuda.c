/*
 * pd_backend_cuda.c - the CUDA backend's host side: device memory, weights,
 * the products through cuBLAS, and the launches of pd_cuda_kernels.cu, all
 * on one stream. An operation returns when it is queued; download waits for
 * the stream (a step's only waits are its outputs and the communicator's
 * staging, which downloads).
 *
 * Products: bf16 compute converts the activations to bf16 operands
 * (weights are bf16 from load) and accumulates in f32 (CUBLAS_COMPUTE_32F
 * over bf16 inputs); a linear layer's product runs through cuBLASLt with
 * its bias and GELU (tanh, pdit's) as the product's epilogue, so its f32
 * output is written once instead of written, read and written again (an
 * algorithm is searched once a shape and kept; a shape it finds none for,
 * or every shape with PDIT_CUDA_NO_LT=1, takes cuBLAS and a kernel for the
 * bias). f32 compute runs f32 products with the default math
 * mode, never TF32 (the exactness mode: the golden tolerances of f32).
 * Attention in bf16 with heads of 64 or 128 channels is fused (a flash
 * kernel: the scores stay in registers; PDIT_CUDA_NO_FLASH=1 turns it off;
 * 64 query rows a block, PDIT_CUDA_FLASH_ROWS=128 twice that: which is
 * faster is for the device check to measure).
 * Otherwise, and in f32, it is done in query chunks: scores by a batched
 * product over the heads, a softmax kernel (log-sum-exp for ring attention,
 * bias and causal mask for the text encoders), probabilities times values
 * by a second batched product; the chunk bounds the scores' memory.
 * Convolutions are column blocks (im2col) of a band of rows times the
 * kernel.
 *
 * Quantized weights: ggml's block formats and fp8 stay as the file has them
 * in device memory and are expanded into a reused bf16 (or f32) operand
 * before each product (cuBLAS takes no decoding in its tile loads; a
 * product of pdit's own would be needed for that).
 */
#include "pd_backend_cuda.h"
#include "pd_cuda_kernels.h"
#include "pd_quant.h"
#include "pd_util.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The scores of one attention chunk stay under this many bytes. */
#define PD_CUDA_ATTN_BYTES ((size_t)512 << 20)
/* An im2col block stays under this many bytes. */
#define PD_CUDA_COL_BYTES ((size_t)256 << 20)
/* cuBLASLt's workspace (NVIDIA's advice for Hopper: 32 MiB) */
#define PD_CUDA_LT_WS ((size_t)32 << 20)
/* Product shapes whose cuBLASLt algorithm is kept (a FLUX.1 step has about 15). */
#define PD_CUDA_LT_PLANS 64

/* One linear product's cuBLASLt plan, D [m, n] (column-major, ld ldd) =
 * epilogue(W^T-view [m, k] times X [k, n] (ld ldb) + beta D). */
struct pd_cuda_lt {
	int64_t m, n, k, ldb, ldd;      /* the product's shape and leading dimensions */
	uint32_t epilogue;              /* cublasLtEpilogue_t */
	unsigned align;                 /* bytes every operand's address is a multiple of (up to 256) */
	unsigned bias_align;            /* and the bias's, which the search reads from its pointer */
	int ok;                         /* an algorithm was found (else cuBLAS and a bias kernel) */
	cublasLtMatmulDesc_t desc;      /* the operation (its bias pointer set each call) */
	cublasLtMatrixLayout_t lw, lx, ly; /* the weight's, the activations' and the output's layouts */
	cublasLtMatmulAlgo_t algo;      /* the search's first */
};

/* A device buffer's size, for the accounting (work_bytes) at free. */
struct pd_cuda_block {
	void *p;
	size_t bytes;
};

struct pd_cuda {
	struct pd_backend be;           /* the interface; must stay first */
	int device;                     /* the GPU */
	int flash;                      /* bf16 attention fused where the heads fit (not PDIT_CUDA_NO_FLASH) */
	int flash_rows;                 /* its query rows a block: 64, or 128 (PDIT_CUDA_FLASH_ROWS) */
	cudaStream_t stream;            /* every operation's */
	cublasHandle_t blas;            /* on that stream */
	cublasLtHandle_t lt;            /* cuBLASLt, for linear layers' bf16 products */
	void *lt_ws;                    /* its workspace, PD_CUDA_LT_WS bytes (at the first plan) */
	size_t lt_ws_bytes;
	struct pd_cuda_lt plans[PD_CUDA_LT_PLANS]; /* the shapes met, each searched once */
	int n_plans;                    /* plans in use */
	int next_plan;                  /* the one replaced when all are in use */
	struct pd_cuda_block *blocks;   /* live allocations */
	int n_blocks, cap_blocks;
	/* scratch, grown to the largest request and kept */
	void *opa;                      /* activations as a product's operand (bf16) */
	size_t opa_bytes;
	const float *opa_x;             /* whose rows opa holds (with PD_LIN_SAME_INPUT the next layer
					 * reading them takes opa as it is: q, k and v convert once) */
	int64_t opa_ldx, opa_rows, opa_cols; /* their stride, rows and columns */
	void *opw;                      /* a quantized weight expanded for its product */
	size_t opw_bytes;
	void *scores;                   /* attention's scores */
	size_t scores_bytes;
	void *probs;                    /* and probabilities */
	size_t probs_bytes;
	void *qkv;                      /* attention's q, k, v as bf16 operands */
	size_t qkv_bytes;
	void *col;                      /* convolutions' columns */
	size_t col_bytes;
	double *gn;                     /* group_stats' partial sums */
	size_t gn_bytes;
	float *adapt;                   /* an adapter's x A^T (pd_adapter_term: a buffer of the backend's
					 * own, freed with it) */
	size_t adapt_cap;               /* its capacity in floats */
};

struct pd_linear {
	int64_t n_out, n_in;
	void *w;                        /* [n_out, n_in] bf16 or f32 (plain), or the file's blocks */
	int qtype;                      /* -1 plain, else the blocks' enum pd_cuda_q */
	int bf16;                       /* plain: w is bf16 (compute was bf16 at creation), else f32 */
	int64_t row_bytes;              /* a row of blocks */
	float scale;                    /* the blocks' scale (scaled fp8) */
	float *table;                   /* fp8's 256 values (device) */
	float *bias;                    /* [n_out] or NULL (device) */
	size_t bytes;                   /* device memory held */
	struct pd_adapter ad;           /* a low-rank term beside it (linear_adapt), or none */
};

struct pd_conv {
	int c_out, c_in, k;
	void *w;                        /* [c_out, c_in k k], bf16 or f32 as conv_compute was at creation */
	int bf16;
	float *bias;                    /* [c_out] or NULL */
	size_t bytes;
};

#define CU(b) ((struct pd_cuda *)(b))

static char pd_cuda_no_device[256] = "not looked for yet";

/* ----------------------------------------------------------------------- */
/* Errors                                                                  */
/* ----------------------------------------------------------------------- */

static int pd_cu_ok(struct pd_backend *be, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 1;
	pd_backend_fail(be, "CUDA: %s: %s", what, cudaGetErrorString(e));
	return 0;
}

static int pd_blas_ok(struct pd_backend *be, cublasStatus_t st, const char *what)
{
	if (st == CUBLAS_STATUS_SUCCESS)
		return 1;
	pd_backend_fail(be, "cuBLAS: %s: %s", what, cublasGetStatusString(st));
	return 0;
}

/* A launch's error (a bad configuration) shows at once; a fault inside a
 * kernel shows at the next wait. */
static void pd_cu_launched(struct pd_backend *be, const char *what)
{
	if (!be->failed)
		pd_cu_ok(be, cudaGetLastError(), what);
}

/* ----------------------------------------------------------------------- */
/* Memory                                                                  */
/* ----------------------------------------------------------------------- */

static void *pd_cu_malloc(struct pd_backend *be, size_t bytes, const char *what)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);

	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		pd_backend_fail(be, "CUDA: out of device memory (%zu MB for %s)", bytes >> 20, what);
		return NULL;
	}
	return p;
}

/* Scratch of at least BYTES in *BUF (contents not kept). */
static void *pd_cu_scratch(struct pd_backend *be, void **buf, size_t *cap, size_t bytes, const char *what)
{
	if (be->failed)
		return NULL;
	if (bytes <= *cap && *buf)
		return *buf;
	if (*buf) {
		cudaStreamSynchronize(CU(be)->stream);
		cudaFree(*buf);
		be->work_bytes -= *cap;
	}
	*buf = pd_cu_malloc(be, bytes, what);
	*cap = *buf ? bytes : 0;
	if (*buf) {
		be->work_bytes += bytes;
		be->allocations++;
		if (be->work_bytes > be->work_peak)
			be->work_peak = be->work_bytes;
	}
	return *buf;
}

static float *pd_cu_alloc(struct pd_backend *be, size_t n)
{
	struct pd_cuda *cu = CU(be);
	size_t bytes;
	void *p;

	if (n > ((size_t)1 << 40))
		return NULL;
	bytes = (n * sizeof(float) + 255) & ~(size_t)255;
	if (cu->n_blocks == cu->cap_blocks) {
		int cap = cu->cap_blocks ? 2 * cu->cap_blocks : 256;
		struct pd_cuda_block *nb = realloc(cu->blocks, sizeof(*nb) * (size_t)cap);

		if (!nb)
			return NULL;
		cu->blocks = nb;
		cu->cap_blocks = cap;
	}
	if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	cu->blocks[cu->n_blocks].p = p;
	cu->blocks[cu->n_blocks].bytes = bytes;
	cu->n_blocks++;
	be->work_bytes += bytes;
	be->allocations++;
	if (be->work_bytes > be->work_peak)
		be->work_peak = be->work_bytes;
	return p;
}

static void pd_cu_free(struct pd_backend *be, float *p)
{
	struct pd_cuda *cu = CU(be);

	if (!p)
		return;
	for (int i = cu->n_blocks - 1; i >= 0; i--) {
		if (cu->blocks[i].p != p)
			continue;
		be->work_bytes -= cu->blocks[i].bytes;
		cu->blocks[i] = cu->blocks[--cu->n_blocks];
		break;
	}
	/* the stream may still read it */
	cudaStreamSynchronize(cu->stream);
	cudaFree(p);
}

static void pd_cu_upload(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	struct pd_cuda *cu = CU(be);

	if (be->failed || !n)
		return;
	/* the caller may reuse SRC at once */
	if (pd_cu_ok(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, cu->stream), "upload"))
		pd_cu_ok(be, cudaStreamSynchronize(cu->stream), "upload");
}

static void pd_cu_download(struct pd_backend *be, float *dst, const float *src, size_t n)
{
	struct pd_cuda *cu = CU(be);

	if (be->failed || !n)
		return;
	if (pd_cu_ok(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, cu->stream), "download"))
		pd_cu_ok(be, cudaStreamSynchronize(cu->stream), "download");
}

static void pd_cu_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
			 int64_t cols)
{
	if (be->failed || rows <= 0 || cols <= 0)
		return;
	/* the VAE encoder takes every other value of a row (1-float rows by
	 * the million): a kernel, where the copy engine's 2-D copy would
	 * crawl; wide rows go to the copy engine */
	if (cols < 64) {
		pd_cuda_copy2d(CU(be)->stream, dst, ldd, src, lds, rows, cols);
		pd_cu_launched(be, "copy2d");
		return;
	}
	pd_cu_ok(be, cudaMemcpy2DAsync(dst, (size_t)ldd * sizeof(float), src, (size_t)lds * sizeof(float),
				       (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToDevice, CU(be)->stream),
		 "copy2d");
}

static void *pd_cu_pinned_alloc(struct pd_backend *be, size_t bytes)
{
	void *p = NULL;

	(void)be;
	if (cudaMallocHost(&p, bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		return NULL;
	}
	return p;
}

static void pd_cu_pinned_free(struct pd_backend *be, void *p)
{
	(void)be;
	cudaFreeHost(p);
}

static void pd_cu_sync(struct pd_backend *be)
{
	if (!be->failed)
		pd_cu_ok(be, cudaStreamSynchronize(CU(be)->stream), "a kernel");
}

/* Host data into a new device buffer of BYTES (NULL with the failure recorded). */
static void *pd_cu_put(struct pd_backend *be, const void *host, size_t bytes, const char *what)
{
	void *d = pd_cu_malloc(be, bytes, what);

	/* on the stream the products run on (the legacy stream does not order
	 * with it), and finished before HOST may go */
	if (d && (!pd_cu_ok(be, cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, CU(be)->stream), what) ||
		  !pd_cu_ok(be, cudaStreamSynchronize(CU(be)->stream), what))) {
		cudaFree(d);
		return NULL;
	}
	return d;
}

/* ----------------------------------------------------------------------- */
/* Products                                                                */
/* ----------------------------------------------------------------------- */

/* C (col-major m x n, ldc) = alpha op(A) op(B) + beta C: cuBLAS's view of
 * pdit's row-major matrices. TYPE: the operands' (bf16 or f32); C is f32. */
static void pd_cu_gemm(struct pd_backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
		       const void *A, int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc,
		       cudaDataType type)
{
	if (be->failed || m <= 0 || n <= 0)
		return;
	pd_blas_ok(be, cublasGemmEx(CU(be)->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
				    (int)m, (int)n, (int)k, &alpha, A, type, (int)lda, B, type, (int)ldb, &beta, C,
				    CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "a matrix product");
}

static void pd_cu_gemm_batched(struct pd_backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
			       const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta,
			       float *C, int64_t ldc, int64_t sc, int batch, cudaDataType type)
{
	if (be->failed || m <= 0 || n <= 0 || batch <= 0)
		return;
	pd_blas_ok(be, cublasGemmStridedBatchedEx(CU(be)->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
						  tb ? CUBLAS_OP_T : CUBLAS_OP_N, (int)m, (int)n, (int)k, &alpha, A, type,
						  (int)lda, sa, B, type, (int)ldb, sb, &beta, C, CUDA_R_32F, (int)ldc, sc,
						  batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
		   "a batched matrix product");
}

static int pd_cu_bf16(struct pd_backend *be)
{
	return be->compute == PD_BF16;
}

/* A plan's cuBLASLt objects freed (its shape kept: a plan without them is
 * one whose search found nothing) */
static void pd_cu_lt_drop(struct pd_cuda_lt *p)
{
	if (p->desc)
		cublasLtMatmulDescDestroy(p->desc);
	if (p->lw)
		cublasLtMatrixLayoutDestroy(p->lw);
	if (p->lx)
		cublasLtMatrixLayoutDestroy(p->lx);
	if (p->ly)
		cublasLtMatrixLayoutDestroy(p->ly);
	p->desc = NULL, p->lw = p->lx = p->ly = NULL;
	p->ok = 0;
}

/* The largest power of two up to 256 dividing each of the N values: what
 * cuBLASLt may assume of the operands' addresses and rows (its default is
 * 256, which a column slice of an output or an odd row breaks). */
static unsigned pd_cu_align(const uintptr_t *v, int n)
{
	uintptr_t bits = 256;

	for (int i = 0; i < n; i++)
		bits |= v[i];
	return (unsigned)(bits & (~bits + 1));
}

/* The plan for a bf16 product of this shape, searched at its first call
 * (BIAS: one of the same alignment); NULL where cuBLASLt has no algorithm
 * for it, which is remembered too. */
static struct pd_cuda_lt *pd_cu_lt_plan(struct pd_backend *be, int64_t m, int64_t n, int64_t k, int64_t ldb,
					int64_t ldd, uint32_t epilogue, unsigned align, const float *bias)
{
	const uintptr_t bp = (uintptr_t)bias;
	const unsigned bias_align = bias ? pd_cu_align(&bp, 1) : 0;
	struct pd_cuda *cu = CU(be);
	struct pd_cuda_lt *p;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t r;
	int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N, bias_type = CUDA_R_32F;
	uint64_t ws = PD_CUDA_LT_WS;
	uint32_t al = align;
	int got = 0;

	for (int i = 0; i < cu->n_plans; i++) {
		p = &cu->plans[i];
		if (p->m == m && p->n == n && p->k == k && p->ldb == ldb && p->ldd == ldd && p->epilogue == epilogue &&
		    p->align == align && p->bias_align == bias_align)
			return p->ok ? p : NULL;
	}
	if (!cu->lt || !pd_cu_scratch(be, &cu->lt_ws, &cu->lt_ws_bytes, PD_CUDA_LT_WS, "cuBLASLt's workspace"))
		return NULL;
	if (cu->n_plans < PD_CUDA_LT_PLANS) {
		p = &cu->plans[cu->n_plans++];
	} else {
		p = &cu->plans[cu->next_plan];
		cu->next_plan = (cu->next_plan + 1) % PD_CUDA_LT_PLANS;
		pd_cu_lt_drop(p);
	}
	memset(p, 0, sizeof(*p));
	p->m = m, p->n = n, p->k = k, p->ldb = ldb, p->ldd = ldd, p->epilogue = epilogue, p->align = align;
	p->bias_align = bias_align;
	if (cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
					   sizeof(bias_type)) == CUBLAS_STATUS_SUCCESS &&
	    /* the search reads the bias pointer's alignment */
	    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatrixLayoutCreate(&p->lw, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k) == CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatrixLayoutCreate(&p->lx, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, ldb) == CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatrixLayoutCreate(&p->ly, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldd) == CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof(al)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof(al)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof(al)) ==
		    CUBLAS_STATUS_SUCCESS &&
	    cublasLtMatmulAlgoGetHeuristic(cu->lt, p->desc, p->lw, p->lx, p->ly, p->ly, pref, 1, &r, &got) ==
		    CUBLAS_STATUS_SUCCESS &&
	    got > 0 && r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= PD_CUDA_LT_WS) {
		p->algo = r.algo;
		p->ok = 1;
	}
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (!p->ok)
		pd_cu_lt_drop(p);
	return p->ok ? p : NULL;
}

static struct pd_linear *pd_cu_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
					  enum pd_dtype wt, int64_t ldw, const float *bias)
{
	struct pd_linear *l;
	int bf16 = pd_cu_bf16(be);
	size_t esz = bf16 ? 2 : 4, n = (size_t)(n_out * n_in);
	void *host;

	if (be->failed)
		return NULL;
	if (wt != PD_F32 && wt != PD_BF16) {
		pd_backend_fail(be, "CUDA: weights of %s", pd_dtype_name(wt));
		return NULL;
	}
	l = pd_calloc(1, sizeof(*l), "a linear layer");
	host = malloc(n * esz + 1);
	if (!l || !host) {
		free(l);
		free(host);
		pd_backend_fail(be, "out of memory preparing a %lldx%lld weight", (long long)n_out, (long long)n_in);
		return NULL;
	}
	/* into the products' type, packed rows */
	for (int64_t r = 0; r < n_out; r++)
		for (int64_t c = 0; c < n_in; c++) {
			float v = wt == PD_F32 ? ((const float *)w)[r * ldw + c]
					       : pd_bf16_to_f32(((const uint16_t *)w)[r * ldw + c]);

			if (bf16)
				((uint16_t *)host)[r * n_in + c] = pd_f32_to_bf16(v);
			else
				((float *)host)[r * n_in + c] = v;
		}
	l->n_out = n_out;
	l->n_in = n_in;
	l->qtype = -1;
	l->bf16 = bf16;
	l->w = pd_cu_put(be, host, n * esz, "a weight");
	l->bias = bias ? pd_cu_put(be, bias, (size_t)n_out * sizeof(float), "a bias") : NULL;
	free(host);
	if (!l->w || (bias && !l->bias)) {
		cudaFree(l->w);
		cudaFree(l->bias);
		free(l);
		return NULL;
	}
	l->bytes = n * esz + (bias ? (size_t)n_out * sizeof(float) : 0);
	be->weight_bytes += l->bytes;
	return l;
}

/* The block formats kept on the device: the kernels' name for T, or -1. */
static int pd_cu_qkind(enum pd_qtype t)
{
	switch (t) {
	case PD_Q_Q8_0:
		return PD_CQ_Q8_0;
	case PD_Q_Q4_0:
		return PD_CQ_Q4_0;
	case PD_Q_Q4_1:
		return PD_CQ_Q4_1;
	case PD_Q_Q5_0:
		return PD_CQ_Q5_0;
	case PD_Q_Q5_1:
		return PD_CQ_Q5_1;
	case PD_Q_Q2_K:
		return PD_CQ_Q2_K;
	case PD_Q_Q3_K:
		return PD_CQ_Q3_K;
	case PD_Q_Q4_K:
		return PD_CQ_Q4_K;
	case PD_Q_Q5_K:
		return PD_CQ_Q5_K;
	case PD_Q_Q6_K:
		return PD_CQ_Q6_K;
	case PD_Q_F8_E4M3:
	case PD_Q_F8_E5M2:
		return PD_CQ_CODE;
	default:
		return -1;
	}
}

static int pd_cu_keeps_q(const struct pd_backend *be, enum pd_qtype t)
{
	(void)be;
	return pd_cu_qkind(t) >= 0;
}

static struct pd_linear *pd_cu_linear_new_q(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype t,
					    float scale, const void *blocks, const float *bias)
{
	const struct pd_qtype_info *qi = pd_quant_info(t);
	struct pd_linear *l;
	size_t rb;

	if (be->failed)
		return NULL;
	if (!qi || pd_cu_qkind(t) < 0) {
		pd_backend_fail(be, "CUDA: %s weights are decoded at load, not kept", qi ? qi->name : "unknown");
		return NULL;
	}
	/* the CPU's refusal: the kernels take whole blocks a row */
	if (!qi->decodes || n_out <= 0 || n_in <= 0 || n_in % qi->block_size) {
		pd_backend_fail(be, "a [%lld, %lld] weight cannot be kept as %s", (long long)n_out, (long long)n_in,
				qi->name);
		return NULL;
	}
	rb = pd_quant_row_bytes(qi, n_in);
	l = pd_calloc(1, sizeof(*l), "a linear layer");
	if (!l) {
		pd_backend_fail(be, "out of memory preparing a %lldx%lld weight", (long long)n_out, (long long)n_in);
		return NULL;
	}
	l->n_out = n_out;
	l->n_in = n_in;
	l->qtype = pd_cu_qkind(t);
	l->row_bytes = (int64_t)rb;
	l->scale = scale;
	l->w = pd_cu_put(be, blocks, rb * (size_t)n_out, "quantized weights");
	l->bias = bias ? pd_cu_put(be, bias, (size_t)n_out * sizeof(float), "a bias") : NULL;
	if (l->qtype == PD_CQ_CODE) {
		float table[256];

		for (int c = 0; c < 256; c++)
			table[c] = t == PD_Q_F8_E4M3 ? pd_fp8_e4m3_to_f32((uint8_t)c) : pd_fp8_e5m2_to_f32((uint8_t)c);
		l->table = pd_cu_put(be, table, sizeof(table), "an fp8 table");
	}
	if (!l->w || (bias && !l->bias) || (l->qtype == PD_CQ_CODE && !l->table)) {
		cudaFree(l->w);
		cudaFree(l->bias);
		cudaFree(l->table);
		free(l);
		return NULL;
	}
	l->bytes = rb * (size_t)n_out + (bias ? (size_t)n_out * sizeof(float) : 0) + (l->table ? 1024 : 0);
	be->weight_bytes += l->bytes;
	return l;
}

static void pd_cu_linear_free(struct pd_backend *be, struct pd_linear *l)
{
	if (!l)
		return;
	cudaStreamSynchronize(CU(be)->stream);
	pd_adapter_clear(be, &l->ad);
	be->weight_bytes -= l->bytes;
	cudaFree(l->w);
	cudaFree(l->bias);
	cudaFree(l->table);
	free(l);
}

static int pd_cu_linear_adapt(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a,
			      const float *b)
{
	return pd_adapter_set(be, &l->ad, l->n_out, l->n_in, rank, a, b);
}

static void pd_cu_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
			 float *y, int64_t ldy, int flags)
{
	struct pd_cuda *cu = CU(be);
	int bf16 = pd_cu_bf16(be);
	cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
	const void *a = x, *w = l->w;
	int64_t lda = ldx;

	if (be->failed || rows <= 0)
		return;
	/* a plain weight is stored in its creation's type: read as the other,
	 * the product would run past it */
	if (l->qtype < 0 && l->bf16 != bf16) {
		pd_backend_fail(be, "CUDA: a linear layer made for %s products run with %s ones", l->bf16 ? "bf16" : "f32",
				bf16 ? "bf16" : "f32");
		return;
	}
	if (l->ad.down)
		flags = pd_adapter_term(be, &l->ad, &cu->adapt, &cu->adapt_cap, x, ldx, rows, y, ldy, flags);
	be->flop += 2.0 * (double)rows * (double)l->n_in * (double)l->n_out;
	if (bf16) {
		/* an adapter's own calls above converted their inputs over it */
		if (!(flags & PD_LIN_SAME_INPUT) || cu->opa_x != x || cu->opa_ldx != ldx || cu->opa_rows != rows ||
		    cu->opa_cols != l->n_in) {
			if (!pd_cu_scratch(be, &cu->opa, &cu->opa_bytes, (size_t)(rows * l->n_in) * 2,
					   "product operands"))
				return;
			pd_cuda_to_bf16(cu->stream, cu->opa, x, rows, l->n_in, ldx);
			cu->opa_x = x, cu->opa_ldx = ldx, cu->opa_rows = rows, cu->opa_cols = l->n_in;
		}
		a = cu->opa;
		lda = l->n_in;
	}
	if (l->qtype >= 0) {
		void *op = pd_cu_scratch(be, &cu->opw, &cu->opw_bytes, (size_t)(l->n_out * l->n_in) * (bf16 ? 2 : 4),
					 "expanded weights");

		if (!op)
			return;
		pd_cuda_dequant(cu->stream, op, bf16, l->w, l->qtype, l->table, l->scale, l->n_out, l->n_in, l->row_bytes);
		w = op;
	}
	if (bf16) {
		/* the product with its bias and GELU in one: cuBLASLt */
		const float *bias = flags & PD_LIN_NO_BIAS ? NULL : l->bias;
		int gelu = (flags & PD_LIN_GELU_TANH) != 0;
		uint32_t epi = bias ? gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS
			       : gelu ? CUBLASLT_EPILOGUE_GELU
				      : CUBLASLT_EPILOGUE_DEFAULT;
		/* the addresses and the rows' bytes (the bias's apart) */
		uintptr_t v[] = { (uintptr_t)w, (uintptr_t)a, (uintptr_t)y, (uintptr_t)(l->n_in * 2),
				  (uintptr_t)(lda * 2), (uintptr_t)(ldy * 4) };
		struct pd_cuda_lt *p = pd_cu_lt_plan(be, l->n_out, rows, l->n_in, lda, ldy, epi,
						     pd_cu_align(v, (int)(sizeof(v) / sizeof(v[0]))), bias);
		float one = 1.0f, beta = flags & PD_LIN_ACCUMULATE ? 1.0f : 0.0f;

		if (be->failed)
			return;
		if (p) {
			pd_blas_ok(be,
				   cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
								  sizeof(bias)),
				   "a product's bias");
			pd_blas_ok(be,
				   cublasLtMatmul(cu->lt, p->desc, &one, w, p->lw, a, p->lx, &beta, y, p->ly, y, p->ly,
						  &p->algo, cu->lt_ws, PD_CUDA_LT_WS, cu->stream),
				   "a linear layer's product");
			pd_cu_launched(be, "linear");
			return;
		}
	}
	/* y^T [n_out, rows] = W [n_out, n_in] x^T, column-major */
	pd_cu_gemm(be, 1, 0, l->n_out, rows, l->n_in, 1.0f, w, l->n_in, a, lda,
		   flags & PD_LIN_ACCUMULATE ? 1.0f : 0.0f, y, ldy, type);
	pd_cuda_bias_act(cu->stream, y, ldy, rows, l->n_out, flags & PD_LIN_NO_BIAS ? NULL : l->bias,
			 (flags & PD_LIN_GELU_TANH) != 0);
	pd_cu_launched(be, "linear");
}

/* ----------------------------------------------------------------------- */
/* Convolutions                                                            */
/* ----------------------------------------------------------------------- */

static struct pd_conv *pd_cu_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				      const float *bias)
{
	struct pd_conv *c;
	size_t n = (size_t)c_out * c_in * k * k;
	int bf16 = be->conv_compute == PD_BF16;
	void *host;

	if (be->failed)
		return NULL;
	c = pd_calloc(1, sizeof(*c), "a convolution");
	host = malloc(n * 4 + 1);
	if (!c || !host) {
		free(c);
		free(host);
		pd_backend_fail(be, "out of memory preparing a convolution");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (bf16)
			((uint16_t *)host)[i] = pd_f32_to_bf16(w[i]);
		else
			((float *)host)[i] = w[i];
	}
	c->c_out = c_out;
	c->c_in = c_in;
	c->k = k;
	c->bf16 = bf16;
	c->w = pd_cu_put(be, host, n * (bf16 ? 2 : 4), "a convolution's weights");
	c->bias = bias ? pd_cu_put(be, bias, (size_t)c_out * sizeof(float), "a convolution's bias") : NULL;
	free(host);
	if (!c->w || (bias && !c->bias)) {
		cudaFree(c->w);
		cudaFree(c->bias);
		free(c);
		return NULL;
	}
	c->bytes = n * (bf16 ? 2 : 4) + (bias ? (size_t)c_out * 4 : 0);
	be->weight_bytes += c->bytes;
	return c;
}

static void pd_cu_conv_free(struct pd_backend *be, struct pd_conv *c)
{
	if (!c)
		return;
	cudaStreamSynchronize(CU(be)->stream);
	be->weight_bytes -= c->bytes;
	cudaFree(c->w);
	cudaFree(c->bias);
	free(c);
}

static void pd_cu_conv(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y)
{
	struct pd_cuda *cu = CU(be);
	int64_t K = (int64_t)c->c_in * c->k * c->k, hw = (int64_t)h * w;
	size_t esz = c->bf16 ? 2 : 4;
	int band;

	if (be->failed || h <= 0 || w <= 0)
		return;
	if (halo < 0 || halo > (c->k - 1) / 2) {
		pd_backend_fail(be, "convolution: halo of %d rows for a %dx%d kernel", halo, c->k, c->k);
		return;
	}
	band = (int)(PD_CUDA_COL_BYTES / ((size_t)K * (size_t)w * esz));
	be->flop += 2.0 * c->c_out * c->c_in * c->k * c->k * (double)h * w;
	band = band < 1 ? 1 : band > h ? h : band;
	if (!pd_cu_scratch(be, &cu->col, &cu->col_bytes, (size_t)K * (size_t)band * (size_t)w * esz, "convolution columns"))
		return;
	for (int r0 = 0; r0 < h; r0 += band) {
		int nr = r0 + band <= h ? band : h - r0;
		int64_t N = (int64_t)nr * w;

		pd_cuda_im2col(cu->stream, cu->col, c->bf16, x, c->c_in, h, w, halo, c->k, r0, nr);
		/* y [c_out, hw]: (y^T)[N, c_out] = col^T [N, K] W^T [K, c_out], column-major */
		pd_cu_gemm(be, 0, 0, N, c->c_out, K, 1.0f, cu->col, N, c->w, K, 0.0f, y + (int64_t)r0 * w, hw,
			   c->bf16 ? CUDA_R_16BF : CUDA_R_32F);
	}
	pd_cuda_channel_bias(cu->stream, y, hw, c->c_out, hw, c->bias);
	pd_cu_launched(be, "conv");
}

/* ----------------------------------------------------------------------- */
/* Attention                                                               */
/* ----------------------------------------------------------------------- */

static void pd_cu_attention_impl(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
				 int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
				 int64_t skv, int heads, int hd, float scale, const float *bias, int causal)
{
	struct pd_cuda *cu = CU(be);
	int bf16 = pd_cu_bf16(be);
	cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
	int64_t W = (int64_t)heads * hd, qc;
	const void *Q = q, *Kp = k, *V = v;
	int64_t lq = ldq, lk = ldk, lv = ldv;

	if (be->failed || sq <= 0)
		return;
	be->flop += 4.0 * (double)sq * (double)skv * (double)W;
	if (skv <= 0) {
		/* no keys: nothing attended (zeros), an empty log-sum-exp */
		for (int64_t i = 0; i < sq; i++)
			pd_cuda_fill(cu->stream, out + i * ldo, 0.0f, W);
		if (lse)
			pd_cuda_fill(cu->stream, lse, -INFINITY, (int64_t)heads * sq);
		return;
	}
	qc = (int64_t)(PD_CUDA_ATTN_BYTES / ((size_t)heads * (size_t)skv * 4));
	qc = qc < 1 ? 1 : qc > sq ? sq : qc;
	if (bf16) {
		char *b = pd_cu_scratch(be, &cu->qkv, &cu->qkv_bytes, (size_t)((sq + 2 * skv) * W) * 2, "attention operands");

		if (!b)
			return;
		pd_cuda_to_bf16(cu->stream, b, q, sq, W, ldq);
		pd_cuda_to_bf16(cu->stream, b + sq * W * 2, k, skv, W, ldk);
		pd_cuda_to_bf16(cu->stream, b + (sq + skv) * W * 2, v, skv, W, ldv);
		Q = b;
		Kp = b + sq * W * 2;
		V = b + (sq + skv) * W * 2;
		lq = lk = lv = W;
	}
	if (bf16 && cu->flash && !bias && !causal && pd_cuda_flash_fits(hd)) {
		/* no scores in memory: nothing to chunk */
		pd_cuda_flash(cu->stream, Q, Kp, V, W, out, ldo, lse, sq, sq, skv, heads, hd, scale, cu->flash_rows);
		pd_cu_launched(be, "attention");
		return;
	}
	if (!pd_cu_scratch(be, &cu->scores, &cu->scores_bytes, (size_t)heads * (size_t)qc * (size_t)skv * 4,
			   "attention scores") ||
	    !pd_cu_scratch(be, &cu->probs, &cu->probs_bytes, (size_t)heads * (size_t)qc * (size_t)skv * (bf16 ? 2 : 4),
			   "attention probabilities"))
		return;
	for (int64_t i0 = 0; i0 < sq; i0 += qc) {
		int64_t n = i0 + qc <= sq ? qc : sq - i0;
		size_t esz = bf16 ? 2 : 4;

		/* S_h [n, skv] (column-major skv x n) = K_h^T-view times Q_h */
		pd_cu_gemm_batched(be, 1, 0, skv, n, hd, scale, Kp, lk, hd, (const char *)Q + (size_t)(i0 * lq) * esz, lq,
				   hd, 0.0f, cu->scores, skv, n * skv, heads, type);
		pd_cuda_softmax(cu->stream, cu->scores, cu->probs, bf16, lse, sq, heads, n, skv, i0, bias, sq, causal);
		/* O_h [n, hd] (column-major hd x n, ldo) = V_h times P_h */
		pd_cu_gemm_batched(be, 0, 0, hd, n, skv, 1.0f, V, lv, hd, cu->probs, skv, n * skv, 0.0f, out + i0 * ldo, ldo,
				   hd, heads, type);
	}
	pd_cu_launched(be, "attention");
}

static void pd_cu_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q, int64_t ldq,
			    const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq, int64_t skv, int heads,
			    int head_dim, float scale)
{
	pd_cu_attention_impl(be, out, ldo, lse, q, ldq, k, ldk, v, ldv, sq, skv, heads, head_dim, scale, NULL, 0);
}

static void pd_cu_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
				   const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
				   int head_dim, float scale, const float *bias, int causal)
{
	pd_cu_attention_impl(be, out, ldo, NULL, q, ldq, k, ldk, v, ldv, s, s, heads, head_dim, scale, bias, causal);
}

static void pd_cu_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
			    const float *plse, int64_t sq, int heads, int head_dim)
{
	if (be->failed)
		return;
	pd_cuda_lse_merge(CU(be)->stream, out, ldo, lse, part, ldp, plse, sq, heads, head_dim);
	pd_cu_launched(be, "lse_merge");
}

/* ----------------------------------------------------------------------- */
/* Elementwise and normalisations                                          */
/* ----------------------------------------------------------------------- */

static void pd_cu_fill(struct pd_backend *be, float *y, float v, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_fill(CU(be)->stream, y, v, (int64_t)n);
	pd_cu_launched(be, "fill");
}

static void pd_cu_silu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_unary(CU(be)->stream, y, x, (int64_t)n, 0);
	pd_cu_launched(be, "silu");
}

static void pd_cu_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_unary(CU(be)->stream, y, x, (int64_t)n, 1);
	pd_cu_launched(be, "quick_gelu");
}

static void pd_cu_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_binary(CU(be)->stream, y, a, b, (int64_t)n, 0);
	pd_cu_launched(be, "mul");
}

static void pd_cu_add(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_binary(CU(be)->stream, y, a, b, (int64_t)n, 1);
	pd_cu_launched(be, "add");
}

static void pd_cu_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n)
{
	if (be->failed)
		return;
	pd_cuda_binary(CU(be)->stream, y, a, b, (int64_t)n, 2);
	pd_cu_launched(be, "sub");
}

static void pd_cu_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
				int64_t rows, int64_t dim, const float *scale, const float *shift, float eps)
{
	if (be->failed)
		return;
	pd_cuda_layernorm(CU(be)->stream, y, ldy, x, ldx, rows, dim, scale, shift, eps, 1);
	pd_cu_launched(be, "layernorm_mod");
}

static void pd_cu_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
			    int64_t dim, const float *w, const float *b, float eps)
{
	if (be->failed)
		return;
	pd_cuda_layernorm(CU(be)->stream, y, ldy, x, ldx, rows, dim, w, b, eps, 0);
	pd_cu_launched(be, "layernorm");
}

static void pd_cu_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
				const float *w, float eps)
{
	if (be->failed)
		return;
	pd_cuda_rmsnorm_heads(CU(be)->stream, x, ldx, rows, heads, head_dim, w, eps);
	pd_cu_launched(be, "rmsnorm_heads");
}

static void pd_cu_row_sumsq(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows,
			    int64_t cols)
{
	if (be->failed)
		return;
	pd_cuda_row_sumsq(CU(be)->stream, sumsq, x, ldx, rows, cols);
	pd_cu_launched(be, "row_sumsq");
}

static void pd_cu_rms_apply(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols,
			    const float *sumsq, int64_t n, const float *w, float eps)
{
	if (be->failed)
		return;
	pd_cuda_rms_apply(CU(be)->stream, x, ldx, rows, cols, sumsq, n, w, eps);
	pd_cu_launched(be, "rms_apply");
}

static void pd_cu_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
		       const float *cos, const float *sin)
{
	if (be->failed)
		return;
	pd_cuda_rope(CU(be)->stream, x, ldx, rows, heads, head_dim, cos, sin);
	pd_cu_launched(be, "rope");
}

static void pd_cu_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows,
			    int64_t dim, const float *gate)
{
	if (be->failed)
		return;
	pd_cuda_gated_add(CU(be)->stream, x, ldx, y, ldy, rows, dim, gate);
	pd_cu_launched(be, "gated_add");
}

static void pd_cu_group_stats(struct pd_backend *be, const float *x, int c, int64_t hw, int groups, double *stats)
{
	struct pd_cuda *cu = CU(be);

	if (be->failed || groups < 1)
		return;
	if (!pd_cu_scratch(be, (void **)&cu->gn, &cu->gn_bytes, pd_cuda_group_scratch(groups), "GroupNorm sums"))
		return;
	pd_cuda_group_stats(cu->stream, x, c, hw, groups, stats, cu->gn);
	pd_cu_launched(be, "group_stats");
}

static void pd_cu_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int64_t hw,
			      int groups, const double *stats, double count, const float *gamma, const float *beta,
			      float eps, int silu)
{
	if (be->failed)
		return;
	pd_cuda_group_apply(CU(be)->stream, y, y_cstride, x, c, hw, groups, stats, count, gamma, beta, eps, silu);
	pd_cu_launched(be, "group_apply");
}

static void pd_cu_rms_channels(struct pd_backend *be, float *y, const float *x, int c, int64_t hw, const float *gamma,
			       int silu)
{
	if (be->failed)
		return;
	pd_cuda_rms_channels(CU(be)->stream, y, x, c, hw, gamma, silu);
	pd_cu_launched(be, "rms_channels");
}

static void pd_cu_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int h, int w)
{
	if (be->failed)
		return;
	pd_cuda_upsample2x(CU(be)->stream, y, y_cstride, x, c, h, w);
	pd_cu_launched(be, "upsample2x");
}

static void pd_cu_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols)
{
	if (be->failed)
		return;
	pd_cuda_transpose(CU(be)->stream, y, x, rows, cols);
	pd_cu_launched(be, "transpose");
}

/* ----------------------------------------------------------------------- */
/* Creation                                                                */
/* ----------------------------------------------------------------------- */

static void pd_cu_destroy(struct pd_backend *be)
{
	struct pd_cuda *cu = CU(be);
	void *scratch[] = { cu->opa, cu->opw, cu->scores, cu->probs, cu->qkv, cu->col, cu->gn, cu->lt_ws };

	if (cu->stream)
		cudaStreamSynchronize(cu->stream);
	for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
		cudaFree(scratch[i]);
	/* what the caller did not free goes with the backend */
	for (int i = 0; i < cu->n_blocks; i++)
		cudaFree(cu->blocks[i].p);
	free(cu->blocks);
	for (int i = 0; i < cu->n_plans; i++)
		pd_cu_lt_drop(&cu->plans[i]);
	if (cu->lt)
		cublasLtDestroy(cu->lt);
	if (cu->blas)
		cublasDestroy(cu->blas);
	if (cu->stream)
		cudaStreamDestroy(cu->stream);
	free(cu);
}

/* The runtime's current device is a thread's setting: a scope of work on
 * the backend makes it this backend's and puts it back after. */
static int pd_cu_enter(struct pd_backend *be)
{
	int old = 0;

	cudaGetDevice(&old);
	if (old != CU(be)->device)
		cudaSetDevice(CU(be)->device);
	return old;
}

static void pd_cu_leave(struct pd_backend *be, int saved)
{
	if (saved != CU(be)->device)
		cudaSetDevice(saved);
}

static const struct pd_backend_ops pd_cuda_ops = {
	.name = "cuda",
	.destroy = pd_cu_destroy,
	.enter = pd_cu_enter,
	.leave = pd_cu_leave,
	.alloc = pd_cu_alloc,
	.free = pd_cu_free,
	.upload = pd_cu_upload,
	.download = pd_cu_download,
	.copy2d = pd_cu_copy2d,
	.linear_new = pd_cu_linear_new,
	.linear_new_q = pd_cu_linear_new_q,
	.keeps_q = pd_cu_keeps_q,
	.linear_free = pd_cu_linear_free,
	.linear_adapt = pd_cu_linear_adapt,
	.linear = pd_cu_linear,
	.conv_new = pd_cu_conv_new,
	.conv_free = pd_cu_conv_free,
	.conv = pd_cu_conv,
	.fill = pd_cu_fill,
	.silu = pd_cu_silu,
	.quick_gelu = pd_cu_quick_gelu,
	.mul = pd_cu_mul,
	.add = pd_cu_add,
	.sub = pd_cu_sub,
	.layernorm_mod = pd_cu_layernorm_mod,
	.layernorm = pd_cu_layernorm,
	.rmsnorm_heads = pd_cu_rmsnorm_heads,
	.row_sumsq = pd_cu_row_sumsq,
	.rms_apply = pd_cu_rms_apply,
	.rope = pd_cu_rope,
	.gated_add = pd_cu_gated_add,
	.attention = pd_cu_attention,
	.attention_masked = pd_cu_attention_masked,
	.lse_merge = pd_cu_lse_merge,
	.group_stats = pd_cu_group_stats,
	.group_apply = pd_cu_group_apply,
	.rms_channels = pd_cu_rms_channels,
	.upsample2x = pd_cu_upsample2x,
	.transpose = pd_cu_transpose,
	.pinned_alloc = pd_cu_pinned_alloc,
	.pinned_free = pd_cu_pinned_free,
	.sync = pd_cu_sync,
};

int pd_backend_cuda_devices(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		snprintf(pd_cuda_no_device, sizeof(pd_cuda_no_device), "%s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		return 0;
	}
	if (n == 0)
		snprintf(pd_cuda_no_device, sizeof(pd_cuda_no_device), "the driver sees no GPU");
	return n;
}

const char *pd_backend_cuda_why(void)
{
	return pd_cuda_no_device;
}

int pd_backend_cuda_new(struct pd_backend **out, enum pd_dtype compute, int device)
{
	struct pd_cuda *cu;
	struct cudaDeviceProp prop;
	const char *rows = getenv("PDIT_CUDA_FLASH_ROWS");

	*out = NULL;
	if (compute != PD_F32 && compute != PD_BF16)
		return pd_errorf("the CUDA backend computes in f32 or bf16, not %s", pd_dtype_name(compute));
	if (rows && *rows && strcmp(rows, "64") != 0 && strcmp(rows, "128") != 0)
		return pd_errorf("PDIT_CUDA_FLASH_ROWS=%s: the fused attention takes 64 or 128 query rows a block", rows);
	cu = pd_calloc(1, sizeof(*cu), "the CUDA backend");
	if (!cu)
		return -1;
	cu->be.ops = &pd_cuda_ops;
	cu->be.compute = compute;
	cu->be.conv_compute = PD_F32;
	cu->be.host_memory = 0;
	cu->be.threads = 1;
	cu->device = device;
	if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking) != cudaSuccess) {
		(void)cudaGetLastError();
		pd_cu_destroy(&cu->be);
		return pd_errorf("--device %d: cannot open CUDA device %d", device, device);
	}
	if (cublasCreate(&cu->blas) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(cu->blas, cu->stream) != CUBLAS_STATUS_SUCCESS ||
	    /* f32 products stay f32 (no TF32): the exactness mode */
	    cublasSetMathMode(cu->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS ||
	    /* PDIT_CUDA_NO_LT: cuBLAS and the bias kernel for every product */
	    (!pd_env_on("PDIT_CUDA_NO_LT") && cublasLtCreate(&cu->lt) != CUBLAS_STATUS_SUCCESS)) {
		pd_cu_destroy(&cu->be);
		return pd_errorf("cannot start cuBLAS on CUDA device %d", device);
	}
	cu->be.queue = cu->stream;
	/* the fused kernel's bf16 tensor-core products need sm_80 or newer */
	cu->flash = !pd_env_on("PDIT_CUDA_NO_FLASH") && prop.major >= 8;
	cu->flash_rows = rows && strcmp(rows, "128") == 0 ? 128 : 64;
	snprintf(cu->be.device, sizeof(cu->be.device), "%.90s, device %d, %.0f GB", prop.name, device,
		 (double)prop.totalGlobalMem / 1e9);
	*out = &cu->be;
	return 0;
}
