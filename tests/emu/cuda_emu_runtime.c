/*
 * cuda_emu_runtime.c - the CUDA runtime and cuBLAS calls of the CUDA
 * backend, on the CPU (tests/emu/include/: the headers that rename them).
 * Device memory is host memory handed out here and tracked: a copy or a
 * product whose device side is not inside one live allocation (a host
 * pointer where a device one belongs, a leading dimension that runs past
 * the buffer) fails as the GPU would fault, with the call named on stderr.
 * Streams run each operation when it is queued, so every wait is already
 * over. The products follow cuBLAS's documented semantics: column-major,
 * C = alpha op(A) op(B) + beta C, C not read when beta is 0, f32
 * accumulation, bf16 or f32 operands; cuBLASLt's adds its bias and GELU
 * epilogues and holds an operand to the alignment its algorithm was found
 * for.
 */
#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_runtime.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* what a device may hold: a larger request fails as cudaMalloc does */
#define PD_EMU_MEMORY ((size_t)16 << 30)

struct pd_emu_alloc {
	char *p;
	size_t bytes;
};

static struct pd_emu_alloc *allocs;
static int n_allocs, cap_allocs;
static size_t held;
static cudaError_t last_error = cudaSuccess;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t fail(cudaError_t e, const char *what)
{
	fprintf(stderr, "cuda emulation: %s\n", what);
	last_error = e;
	return e;
}

void pd_emu_launch_failed(const char *kernel)
{
	char msg[160];

	snprintf(msg, sizeof(msg), "kernel %s: a launch configuration a GPU refuses", kernel);
	fail(cudaErrorInvalidConfiguration, msg);
}

int pd_emu_is_device(const void *p, size_t bytes)
{
	const char *c = p;
	int in = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < n_allocs && !in; i++)
		in = c >= allocs[i].p && c + bytes <= allocs[i].p + allocs[i].bytes;
	pthread_mutex_unlock(&mu);
	return in;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	void *m = NULL;

	*p = NULL;
	/* exactly BYTES: under AddressSanitizer a kernel reading past its
	 * buffer is caught */
	if (bytes > PD_EMU_MEMORY - held || posix_memalign(&m, 256, bytes ? bytes : 1))
		return last_error = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&mu);
	if (n_allocs == cap_allocs) {
		int cap = cap_allocs ? 2 * cap_allocs : 64;
		struct pd_emu_alloc *a = realloc(allocs, sizeof(*a) * (size_t)cap);

		if (!a) {
			pthread_mutex_unlock(&mu);
			free(m);
			return last_error = cudaErrorMemoryAllocation;
		}
		allocs = a;
		cap_allocs = cap;
	}
	allocs[n_allocs].p = m;
	allocs[n_allocs].bytes = bytes;
	n_allocs++;
	held += bytes;
	pthread_mutex_unlock(&mu);
	/* fresh device memory is not zeros: NaN bytes */
	memset(m, 0xff, bytes);
	*p = m;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	int i;

	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&mu);
	for (i = 0; i < n_allocs && allocs[i].p != p; i++)
		;
	if (i == n_allocs) {
		pthread_mutex_unlock(&mu);
		return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not give");
	}
	held -= allocs[i].bytes;
	allocs[i] = allocs[--n_allocs];
	pthread_mutex_unlock(&mu);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	*p = malloc(bytes ? bytes : 1);
	return *p ? cudaSuccess : (last_error = cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

/* whether each side of a copy of BYTES is where KIND says */
static int sides_ok(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, const char *what)
{
	int dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	int sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	char msg[200];

	if (!bytes)
		return 1;
	if (pd_emu_is_device(dst, bytes) == dd && pd_emu_is_device(src, bytes) == sd)
		return 1;
	snprintf(msg, sizeof(msg), "%s of %zu bytes: the destination is %s, the source %s, not as kind %d says", what,
		 bytes, pd_emu_is_device(dst, bytes) ? "device memory" : "not device memory",
		 pd_emu_is_device(src, bytes) ? "device memory" : "not device memory", (int)kind);
	fail(cudaErrorInvalidValue, msg);
	return 0;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
	if (!sides_ok(dst, src, bytes, kind, "cudaMemcpy"))
		return cudaErrorInvalidValue;
	memmove(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s)
{
	(void)s;
	if (!sides_ok(dst, src, bytes, kind, "cudaMemcpyAsync"))
		return cudaErrorInvalidValue;
	memmove(dst, src, bytes);
	return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			      enum cudaMemcpyKind kind, cudaStream_t s)
{
	int dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	int sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;

	(void)s;
	if (!height || !width)
		return cudaSuccess;
	if (width > dpitch || width > spitch)
		return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: a row wider than its pitch");
	/* each side's whole extent where KIND puts it */
	if (pd_emu_is_device(dst, dpitch * (height - 1) + width) != dd ||
	    pd_emu_is_device(src, spitch * (height - 1) + width) != sd)
		return fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync: a side not where the copy's kind puts it");
	for (size_t r = 0; r < height; r++)
		memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = malloc(16);
	return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	(void)s;
	return last_error;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	last_error = cudaSuccess;
	return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess                     ? "no error"
	       : e == cudaErrorMemoryAllocation     ? "out of memory"
	       : e == cudaErrorInvalidValue         ? "invalid argument"
	       : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
						    : "emulated error";
}

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
	if (device != 0)
		return cudaErrorInvalidDevice;
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "pdit's CUDA emulation (the CPU)");
	p->totalGlobalMem = PD_EMU_MEMORY;
	p->major = 9;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDevice(int *device)
{
	*device = 0;
	return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------ */

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = malloc(16);
	return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	(void)h;
	(void)s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
	(void)h;
	(void)mode;
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t st)
{
	return st == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
	       : st == CUBLAS_STATUS_INVALID_VALUE ? "CUBLAS_STATUS_INVALID_VALUE"
	       : st == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
						   : "CUBLAS_STATUS_NOT_INITIALIZED";
}

static float elem(const void *p, cudaDataType t, long long i)
{
	if (t == CUDA_R_32F)
		return ((const float *)p)[i];
	{
		uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
		float f;

		memcpy(&f, &u, 4);
		return f;
	}
}

/* one product of the batch; its operands checked against device memory */
static cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
			   cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb, float beta, float *C,
			   int ldc)
{
	size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2;
	int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
	int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;

	if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1)) {
		fprintf(stderr,
			"cuda emulation: cuBLAS: m %d n %d k %d with lda %d ldb %d ldc %d: a leading dimension "
			"below its rows (cuBLAS's CUBLAS_STATUS_INVALID_VALUE)\n",
			m, n, k, lda, ldb, ldc);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	if (!m || !n)
		return CUBLAS_STATUS_SUCCESS;
	if ((k && ac && !pd_emu_is_device(A, ((size_t)lda * (size_t)(ac - 1) + (size_t)ar) * ea)) ||
	    (k && bc && !pd_emu_is_device(B, ((size_t)ldb * (size_t)(bc - 1) + (size_t)br) * eb)) ||
	    !pd_emu_is_device(C, ((size_t)ldc * (size_t)(n - 1) + (size_t)m) * 4)) {
		fprintf(stderr, "cuda emulation: cuBLAS: an operand of a %dx%dx%d product outside device memory\n", m,
			n, k);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float acc = 0;

			for (int l = 0; l < k; l++) {
				float a = elem(A, at,
					       ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda);
				float b = elem(B, bt,
					       tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);

				acc += a * b;
			}
			C[i + (long long)j * ldc] =
				beta == 0.0f ? alpha * acc : alpha * acc + beta * C[i + (long long)j * ldc];
		}
	return CUBLAS_STATUS_SUCCESS;
}

static int types_ok(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute)
{
	return at == bt && (at == CUDA_R_32F || at == CUDA_R_16BF) && ct == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
			    int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
			    cublasGemmAlgo_t algo)
{
	(void)h;
	(void)algo;
	if (!types_ok(at, bt, ct, compute))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ldc);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
					  int k, const void *alpha, const void *A, cudaDataType at, int lda,
					  long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
					  const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
					  cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	size_t ea = at == CUDA_R_32F ? 4 : 2;

	(void)h;
	(void)algo;
	if (!types_ok(at, bt, ct, compute) || batch < 0)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	for (int b = 0; b < batch; b++) {
		cublasStatus_t st =
			gemm(ta, tb, m, n, k, *(const float *)alpha, (const char *)A + (size_t)(sa * b) * ea, at, lda,
			     (const char *)B + (size_t)(sb * b) * ea, bt, ldb, *(const float *)beta,
			     (float *)C + sc * b, ldc);

		if (st != CUBLAS_STATUS_SUCCESS)
			return st;
	}
	return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt ---------------------------------------------------------- */

struct pd_emu_lt_desc {
	int ta, tb;                     /* op(A), op(B): CUBLAS_OP_T or _N */
	uint32_t epilogue;              /* cublasLtEpilogue_t */
	const float *bias;              /* [D's rows] f32, or NULL */
	int bias_type;                  /* cudaDataType of the bias (f32 only here) */
};

struct pd_emu_lt_layout {
	cudaDataType type;
	uint64_t rows, cols;
	int64_t ld;                     /* column-major */
};

struct pd_emu_lt_pref {
	uint32_t align[4];              /* A, B, C, D: what the search may assume, bytes (cuBLASLt: 256) */
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	*h = malloc(16);
	return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType scale)
{
	if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	*d = calloc(1, sizeof(**d));
	if (!*d)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	(*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
	(*d)->bias_type = -1;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	free(d);
	return CUBLAS_STATUS_SUCCESS;
}

/* an attribute's value of its documented size, else INVALID_VALUE as cuBLASLt */
#define LT_SET(dst, buf, bytes) \
	do { \
		if (!(buf) || (bytes) != sizeof(dst)) \
			return CUBLAS_STATUS_INVALID_VALUE; \
		memcpy(&(dst), (buf), sizeof(dst)); \
	} while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t bytes)
{
	int32_t i;

	switch (attr) {
	case CUBLASLT_MATMUL_DESC_TRANSA:
		LT_SET(i, buf, bytes);
		d->ta = i;
		break;
	case CUBLASLT_MATMUL_DESC_TRANSB:
		LT_SET(i, buf, bytes);
		d->tb = i;
		break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE:
		LT_SET(d->epilogue, buf, bytes);
		break;
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
		LT_SET(d->bias, buf, bytes);
		break;
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
		LT_SET(i, buf, bytes);
		d->bias_type = i;
		break;
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
					  int64_t ld)
{
	*l = malloc(sizeof(**l));
	if (!*l)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	(*l)->type = type;
	(*l)->rows = rows;
	(*l)->cols = cols;
	(*l)->ld = ld;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	free(l);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	*p = malloc(sizeof(**p));
	if (!*p)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	for (int i = 0; i < 4; i++)
		(*p)->align[i] = 256;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	free(p);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
						    size_t bytes)
{
	uint64_t ws;

	switch (attr) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
		LT_SET(ws, buf, bytes);
		break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
		LT_SET(p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
		break;
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	return CUBLAS_STATUS_SUCCESS;
}

/* The one algorithm: it records the alignments it was found for (A, B, C,
 * D and the bias's as the descriptor's pointer had it at the search). */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
					      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
					      cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
					      cublasLtMatmulHeuristicResult_t results[], int *returned)
{
	uintptr_t bias = (uintptr_t)d->bias;

	(void)h;
	*returned = 0;
	if (requested <= 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (a->type != b->type || (a->type != CUDA_R_16BF && a->type != CUDA_R_32F) || c->type != CUDA_R_32F ||
	    dd->type != CUDA_R_32F || c->rows != dd->rows || c->cols != dd->cols || c->ld != dd->ld)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	memset(&results[0], 0, sizeof(results[0]));
	for (int i = 0; i < 4; i++)
		results[0].algo.data[i] = p->align[i];
	/* the bias: its pointer's own alignment at the search, up to 256 */
	results[0].algo.data[4] = bias ? (bias & -bias) < 256 ? (bias & -bias) : 256 : 1;
	results[0].state = CUBLAS_STATUS_SUCCESS;
	results[0].wavesCount = 1;
	*returned = 1;
	return CUBLAS_STATUS_SUCCESS;
}

static float gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)));
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
			      cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
			      const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dd,
			      const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
			      cudaStream_t stream)
{
	const void *ptr[5] = { A, B, C, D, d->bias };
	int m = (int)dd->rows, n = (int)dd->cols, k = (int)(d->ta == CUBLAS_OP_N ? a->cols : a->rows);
	cublasStatus_t st;

	(void)h;
	(void)stream;
	if (!algo || (workspace_bytes && !pd_emu_is_device(workspace, workspace_bytes)))
		return CUBLAS_STATUS_INVALID_VALUE;
	for (int i = 0; i < 5; i++)
		if (ptr[i] && (uintptr_t)ptr[i] % algo->data[i]) {
			fprintf(stderr,
				"cuda emulation: cuBLASLt: operand %c at %p is not aligned to the %llu bytes its "
				"algorithm was found for (a GPU reads it wrong or faults)\n",
				"ABCDb"[i], ptr[i], (unsigned long long)algo -> data[i]);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	if (C != D || c->ld != dd->ld) {
		fprintf(stderr, "cuda emulation: cuBLASLt: C and D apart (pdit's products accumulate in place)\n");
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if ((d->ta == CUBLAS_OP_N ? a->rows : a->cols) != (uint64_t)m ||
	    (d->tb == CUBLAS_OP_N ? b->rows : b->cols) != (uint64_t)k ||
	    (d->tb == CUBLAS_OP_N ? b->cols : b->rows) != (uint64_t)n) {
		fprintf(stderr, "cuda emulation: cuBLASLt: the layouts' shapes do not make a product\n");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	st = gemm(d->ta, d->tb, m, n, k, *(const float *)alpha, A, a->type, (int)a->ld, B, b->type, (int)b->ld,
		  *(const float *)beta, D, (int)dd->ld);
	if (st != CUBLAS_STATUS_SUCCESS || !m || !n)
		return st;
	if (d->epilogue & CUBLASLT_EPILOGUE_BIAS) {
		if (!d->bias || (d->bias_type != -1 && d->bias_type != CUDA_R_32F) ||
		    !pd_emu_is_device(d->bias, (size_t)m * 4)) {
			fprintf(stderr,
				"cuda emulation: cuBLASLt: a bias epilogue without an f32 bias of %d in device "
				"memory\n",
				m);
			return CUBLAS_STATUS_INVALID_VALUE;
		}
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float *y = (float *)D + i + (long long)j * dd->ld;

			if (d->epilogue & CUBLASLT_EPILOGUE_BIAS)
				*y = *y + d->bias[i];
			if (d->epilogue & CUBLASLT_EPILOGUE_GELU)
				*y = gelu_tanh(*y);
		}
	return CUBLAS_STATUS_SUCCESS;
}
