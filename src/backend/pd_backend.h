/*
 * pd_backend.h - the compute interface the model code calls.
 *
 * Model code (FLUX blocks, VAE) and the parallel methods never touch
 * activation memory directly: every buffer an operation reads or writes
 * comes from the backend (alloc, pd_backend_grow, pd_backend_zeros), host
 * data moves in and out with upload/download, and the work is done through
 * the operations below. A backend is one implementation of struct
 * pd_backend_ops in its own folder: backend/cpu (oneDNN matrix products and
 * own OpenMP kernels), backend/cuda (cuBLASLt and own kernels), and
 * backend/staged (the CPU's kernels on memory the host may not touch: the
 * tests' stand-in for a device). pd_backend_new (backend/select) makes one
 * by name.
 *
 * Memory: every pointer an operation takes is the backend's memory (a
 * buffer from alloc, or a place inside one), except upload's SRC and
 * download's DST, and the weights and biases given to linear_new,
 * linear_new_q and conv_new, which are host memory the backend copies from.
 * No operation returns results in host memory: a step's only host round
 * trips are its inputs and outputs and the communicator's staging. A
 * communicator reads and writes host memory, so the parallel methods hand
 * it backend buffers through pd_comm_staged (comm/), which copies them
 * through pinned host buffers when host_memory is 0.
 *
 * Activations are float32 everywhere.  `compute` only selects the precision of
 * matrix products: PD_F32, or PD_BF16 with bf16 weights and inputs and f32
 * accumulation and output.
 *
 * Matrices are row-major with an explicit row stride ("ld", in elements), so a
 * layer can read or write a column range of a wider buffer (the single block
 * writes attention and MLP side by side into one [S, D+M] buffer).
 *
 * Errors are sticky, like a CUDA stream's: an operation that fails (a primitive
 * that cannot be created, memory that cannot be found) records the first
 * message and turns every later operation into a no-op; model code checks
 * pd_backend_check() at block boundaries.
 */
#ifndef PD_BACKEND_H
#define PD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "pd_dtype.h"
#include "pd_quant.h"

struct pd_backend;
struct pd_linear;       /* a prepared weight [n_out, n_in] and its bias */
struct pd_conv;         /* a prepared 2-D convolution kernel and its bias */

/* How a layer kept in a block format (linear_new_q) multiplies; read when
 * the layer is made. */
enum pd_qproducts {
	PD_QP_DECODE = 0,       /* its blocks decoded to the precision of the products (`compute`) */
	PD_QP_INT8 = 1,         /* int8 dot products: each input row quantized in blocks of 32
				 * (symmetric, one f32 scale per block, as ggml's Q8_0; 256 for the
				 * K-quants, as its Q8_K, and for Q8_0 layers a multiple of 256
				 * wide), int32 sums scaled by both scales in f32;
				 * Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and Q6_K in int8 forms of their
				 * integers, fp8 e4m3 converted to int8 blocks at load (values below a
				 * block's top four binades rounded to 2^-7 of its largest); other
				 * types decode */
	PD_QP_INT8_W256 = 2,    /* PD_QP_INT8, but a Q8_0 layer a multiple of 256 inputs wide has
				 * its weights requantized at load to one scale per 256 inputs
				 * (of each output): a second rounding of the file's values,
				 * and AMX-INT8 tiles of full depth (pd_cpu_i8.c) */
};

/* Flags of the linear operation. */
#define PD_LIN_GELU_TANH 0x1    /* apply GELU (tanh approximation) to the output */
#define PD_LIN_NO_BIAS   0x2    /* leave the bias out (row-parallel layers add it after the reduction) */
#define PD_LIN_ACCUMULATE 0x4   /* y += x W^T (+ b) instead of y = ... */
#define PD_LIN_SAME_INPUT 0x8   /* the caller's promise: x is what the previous linear call on this
				 * backend read (the same address, stride and rows, not written
				 * since), as q, k and v read one input: a backend may reuse what
				 * it made of it (the CPU: its bf16 operand, its int8 rows; CUDA:
				 * its bf16 operand) */

struct pd_backend_ops {
	const char *name;
	void (*destroy)(struct pd_backend *be);
	/* Makes the calling thread compute with the backend's settings (the
	 * CPU's: its thread count) and returns what leave puts back: the
	 * backend changes nothing of the process for longer than a scope. */
	int (*enter)(struct pd_backend *be);
	void (*leave)(struct pd_backend *be, int saved);

	/* Memory (counts are in floats). */
	float *(*alloc)(struct pd_backend *be, size_t n);
	void (*free)(struct pd_backend *be, float *p);
	void (*upload)(struct pd_backend *be, float *dst, const float *src, size_t n);
	void (*download)(struct pd_backend *be, float *dst, const float *src, size_t n);
	/* dst[r, c] = src[r, c] for r < rows, c < cols. */
	void (*copy2d)(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds,
		       int64_t rows, int64_t cols);

	/* Linear layers: W is [n_out, n_in] on the host with row stride ldw,
	 * of type WT (PD_F32 or PD_BF16: a file's mapping is read as it is),
	 * bias [n_out] or NULL; the backend converts them into its own layout
	 * and precision and keeps no reference to the host copies. */
	struct pd_linear *(*linear_new)(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
					enum pd_dtype wt, int64_t ldw, const float *bias);
	/* A linear layer whose weight stays in a block format (pd_quant.h:
	 * ggml's types, fp8): BLOCKS holds n_out rows of
	 * pd_quant_row_bytes(n_in) bytes, every decoded value times SCALE
	 * (scaled fp8; 1 otherwise). The backend keeps its own copy of the
	 * blocks and decodes them as it computes, into the precision of its
	 * products: memory stays that of the file. NULL in a backend without
	 * it (the loader then decodes at load). */
	struct pd_linear *(*linear_new_q)(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype t,
					  float scale, const void *blocks, const float *bias);
	/* Whether linear_new_q keeps blocks of type T (NULL: every type
	 * pd_quant_decode knows); the loader decodes the others at load. */
	int (*keeps_q)(const struct pd_backend *be, enum pd_qtype t);
	void (*linear_free)(struct pd_backend *be, struct pd_linear *l);
	/* Puts a low-rank term beside layer L (LoRA adapters): from now on
	 * its products are y = act(x W^T + b + (x A^T) B^T), A [rank, n_in]
	 * and B [n_out, rank] f32 on the host (the adapters' scales already in
	 * B), copied as plain weights (pd_adapter). W itself is untouched:
	 * kept-quantized blocks stay as they are, and the term can change
	 * between requests without reloading. Replaces an earlier term; rank
	 * 0 removes it. 0, or -1 with the backend failed. */
	int (*linear_adapt)(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a, const float *b);
	/* y[rows, n_out] = act(x[rows, n_in] W^T + b). */
	void (*linear)(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx,
		       int64_t rows, float *y, int64_t ldy, int flags);

	/* Convolutions, stride 1, zero padding (k-1)/2; W is [c_out, c_in, k, k].
	 * Tensors are one image, [c, h, w]. HALO rows above and below the
	 * output's rows are already part of x (a band of a picture with its
	 * neighbours' rows) and replace the zero padding in height: x has
	 * h + 2 halo rows, y has h. */
	struct pd_conv *(*conv_new)(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				    const float *bias);
	void (*conv_free)(struct pd_backend *be, struct pd_conv *c);
	void (*conv)(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y);

	/* y[i] = v. */
	void (*fill)(struct pd_backend *be, float *y, float v, size_t n);
	/* y = x * sigmoid(x). */
	void (*silu)(struct pd_backend *be, float *y, const float *x, size_t n);
	/* y = x * sigmoid(1.702 x) (CLIP's quick GELU). */
	void (*quick_gelu)(struct pd_backend *be, float *y, const float *x, size_t n);
	/* y = a * b. */
	void (*mul)(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
	/* y = a + b. */
	void (*add)(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
	/* y = a - b. */
	void (*sub)(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
	/* y = LN(x) * (1 + scale) + shift per row of length dim, LayerNorm
	 * without affine, biased variance; scale and shift are [dim] (both NULL:
	 * plain LayerNorm). */
	void (*layernorm_mod)(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
			      int64_t rows, int64_t dim, const float *scale, const float *shift, float eps);
	/* y = (x - mean) / sqrt(var + eps) * w + b per row, biased variance;
	 * w and b [dim] may be NULL (1 and 0). */
	void (*layernorm)(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
			  int64_t dim, const float *w, const float *b, float eps);
	/* In place, per head: x = x * rsqrt(mean(x^2) + eps) * w; x is
	 * [rows, heads * head_dim], w is [head_dim]. */
	void (*rmsnorm_heads)(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads,
			      int head_dim, const float *w, float eps);
	/* An RMSNorm whose rows are split over tensor-parallel shards (Wan's
	 * norm across heads): each shard sums its part, the sums are added
	 * over the shards, then each applies them. sumsq[r] = sum of x[r,
	 * 0..cols)^2 (summed in double). */
	void (*row_sumsq)(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows,
			  int64_t cols);
	/* In place: x = x * rsqrt(sumsq[r] / n + eps) * w, w [cols]; N is the
	 * whole row's length. */
	void (*rms_apply)(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols,
			  const float *sumsq, int64_t n, const float *w, float eps);
	/* In place, interleaved pairs: x[2k] = x[2k] cos - x[2k+1] sin,
	 * x[2k+1] = x[2k+1] cos + x[2k] sin; cos, sin are [rows, head_dim]. */
	void (*rope)(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
		     const float *cos, const float *sin);
	/* x += gate * y, gate [dim] broadcast over rows. */
	void (*gated_add)(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy,
			  int64_t rows, int64_t dim, const float *gate);
	/* Softmax attention per head without mask:
	 * out[i, h] = softmax_j(scale * q[i, h] . k[j, h]) v[j, h];
	 * q is [sq, heads * head_dim] (row stride ldq), k and v [skv, ...];
	 * lse (may be NULL) receives log(sum_j exp(scale q.k)) in f32 as
	 * [heads, sq], natural log: ring attention merges partial results with it. */
	void (*attention)(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
			  int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
			  int64_t skv, int heads, int head_dim, float scale);
	/* Attention of S tokens with an additive bias and an optional causal
	 * mask (the text encoders): scores scale * q.k + bias[h, i, j] (bias
	 * [heads, s, s], may be NULL); with causal set, query i sees keys
	 * j <= i only. */
	void (*attention_masked)(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
				 const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
				 int head_dim, float scale, const float *bias, int causal);
	/* Ring attention's merge: (out, lse) and (part, plse) are attention
	 * results over two disjoint key sets, and become the result over their
	 * union, in f32: out -= sigmoid(plse - lse) (out - part),
	 * lse = log(e^lse + e^plse). A log-sum-exp of -inf marks an empty key
	 * set. lse and plse are [heads, sq]. */
	void (*lse_merge)(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part, int64_t ldp,
			  const float *plse, int64_t sq, int heads, int head_dim);
	/* GroupNorm in two halves, so that a picture cut into bands can add
	 * its bands' statistics before normalising. group_stats: for x [c, hw]
	 * and each group g, stats[2g] = sum and stats[2g+1] = sum of squares
	 * of its (c / groups) x hw values, in double; STATS is backend memory
	 * (2 groups doubles: allocate 4 groups floats). group_apply: y = (x -
	 * mean) / sqrt(var + eps) gamma + beta per group, var biased, from
	 * stats over COUNT values per group; then SiLU when silu != 0. Channel
	 * ch of y starts at y + ch * y_cstride (hw: packed), so a picture band
	 * can be written with spare halo rows around each channel. */
	void (*group_stats)(struct pd_backend *be, const float *x, int c, int64_t hw, int groups, double *stats);
	void (*group_apply)(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int64_t hw,
			    int groups, const double *stats, double count, const float *gamma, const float *beta,
			    float eps, int silu);
	/* RMS over the channels of each position (Wan's VAE: F.normalize):
	 * y[ch, i] = x[ch, i] / max(|x[:, i]|, 1e-12) * sqrt(c) * gamma[ch],
	 * then SiLU when silu != 0; x and y [c, hw], in place allowed. */
	void (*rms_channels)(struct pd_backend *be, float *y, const float *x, int c, int64_t hw, const float *gamma,
			     int silu);
	/* Nearest-neighbour 2x: y [c, 2h, 2w] from x [c, h, w]; channel ch of y
	 * starts at y + ch * y_cstride (4 h w: packed). */
	void (*upsample2x)(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int h, int w);
	/* y [cols, rows] = x [rows, cols] transposed. */
	void (*transpose)(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols);

	/* Host memory the communicator's staging copies through: page-locked
	 * where the device copies faster from it (CUDA's pinned memory). NULL:
	 * malloc and free. */
	void *(*pinned_alloc)(struct pd_backend *be, size_t bytes);
	void (*pinned_free)(struct pd_backend *be, void *p);
	/* Waits until every operation issued so far has finished (a device's
	 * queue), for timings; NULL where operations finish before returning. */
	void (*sync)(struct pd_backend *be);
};

struct pd_backend {
	const struct pd_backend_ops *ops;       /* the implementation */
	enum pd_dtype compute;                  /* PD_F32 or PD_BF16 matrix products */
	enum pd_dtype conv_compute;             /* PD_F32 or PD_BF16 convolutions (the VAEs'): read when
						 * a convolution is made (conv_new) */
	int conv_f32_fallbacks;                 /* bf16 convolutions that run in f32 instead: no fast bf16
						 * kernel for their shape on this CPU */
	int host_memory;                        /* its buffers are host memory (a communicator may use them
						 * as they are) */
	char device[128];                       /* what it computes on, for the logs ("NVIDIA H100 80GB
						 * HBM3, device 0"; the CPU's model name) */
	void *queue;                            /* the device stream its operations are queued on (CUDA:
						 * a cudaStream_t), for a communicator that works on the
						 * device (NCCL); NULL where there is none */
	const char *note;                       /* how it meets `compute` here where that is not what the
						 * user would assume, for the run to say; NULL: as asked */
	int threads;                            /* OpenMP threads it computes with between enter and leave */
	enum pd_qproducts qproducts;            /* how its kept-quantized layers multiply (set before they
						 * are made) */
	enum pd_qproducts int8_auto;            /* what `auto` chooses here with bf16 products: PD_QP_INT8
						 * where int8 products beat bf16 ones (VNNI, 512- or
						 * 256-bit, bf16 not on AMX), PD_QP_DECODE elsewhere */
	int int8_products;                      /* it has int8 products at all (the CPU's kernels); 0: its
						 * kept-quantized layers always decode (CUDA), so
						 * --quant-products int8 is refused */
	int int8_layers;                        /* layers made so far that multiply in int8 */
	int failed;                             /* set by the first failing operation */
	char error[512];                        /* its message */
	size_t weight_bytes;                    /* held now by prepared weights (linear, conv) */
	size_t work_bytes;                      /* held now by activations and scratch */
	size_t work_peak;                       /* the most work_bytes has been */
	double flop;                            /* floating-point operations of the matrix products, attention
						 * and convolutions run so far, counted from their shapes
						 * (2 per multiply-add): pdit bench's GFLOP */
	uint64_t allocations;                   /* buffers allocated or grown and primitives made, ever;
						 * a step after the first adds none */
};

static inline void pd_backend_free(struct pd_backend *be)
{
	if (be)
		be->ops->destroy(be);
}

/* A scope of work on BE: the calling thread computes with BE's settings
 * until pd_backend_leave puts back what pd_backend_enter returned. Scopes
 * nest. */
static inline int pd_backend_enter(struct pd_backend *be)
{
	return be->ops->enter ? be->ops->enter(be) : 0;
}

static inline void pd_backend_leave(struct pd_backend *be, int saved)
{
	if (be->ops->leave)
		be->ops->leave(be, saved);
}

/* Records the first failure; later operations become no-ops. */
void pd_backend_fail(struct pd_backend *be, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 0, or -1 with the recorded message as pd_last_error(). */
int pd_backend_check(struct pd_backend *be);

/* Forgets a recorded failure (the engine's next request starts afresh:
 * what failed was an allocation or a primitive of the last one). */
static inline void pd_backend_recover(struct pd_backend *be)
{
	be->failed = 0;
	be->error[0] = 0;
}

/* A backend that wraps another (staged, timed): the settings the caller
 * may change go down to INNER before each operation (returned, for the
 * call), and its counters and a failure come back to OUTER after it. */
struct pd_backend *pd_backend_wrap_in(struct pd_backend *outer, struct pd_backend *inner);
void pd_backend_wrap_back(struct pd_backend *outer, const struct pd_backend *inner);

/* Allocation helper that fails the backend when memory is short. */
float *pd_backend_alloc(struct pd_backend *be, size_t n, const char *what);

/* Grows the backend buffer *BUF of *CAP floats to at least N (contents are
 * not kept); 0, or -1 with a message naming WHAT. */
int pd_backend_grow(struct pd_backend *be, float **buf, size_t *cap, size_t n, const char *what);

/* A new backend buffer of N zeros, or NULL with a message. */
float *pd_backend_zeros(struct pd_backend *be, size_t n, const char *what);

/* Frees a backend buffer (NULL is allowed). */
static inline void pd_backend_release(struct pd_backend *be, float *p)
{
	if (p)
		be->ops->free(be, p);
}

/* Waits for BE's queued work (timings). */
static inline void pd_backend_sync(struct pd_backend *be)
{
	if (be->ops->sync)
		be->ops->sync(be);
}

/* A layer's low-rank term (linear_adapt) as two plain layers of the same
 * backend, which every backend keeps in its struct pd_linear and runs with
 * pd_adapter_term: the rank is small, so two products of its own kernels
 * cost little next to the layer's. */
struct pd_adapter {
	struct pd_linear *down;         /* A [rank, n_in], or NULL: no term */
	struct pd_linear *up;           /* B [n_out, rank] */
	int64_t rank;                   /* A's rows */
};

/* Makes AD the term of A and B (rank 0: none), freeing the one it held. */
int pd_adapter_set(struct pd_backend *be, struct pd_adapter *ad, int64_t n_out, int64_t n_in, int64_t rank,
		   const float *a, const float *b);
void pd_adapter_clear(struct pd_backend *be, struct pd_adapter *ad);
/* The term's part of a layer's product, run ahead of it: y = (x A^T) B^T,
 * or y += with PD_LIN_ACCUMULATE, through *T (a backend buffer of *CAP
 * floats, grown here). Returns the flags the layer's own product then runs
 * with: accumulating, so that its bias and GELU follow the sum as they
 * would a merged weight's. */
int pd_adapter_term(struct pd_backend *be, const struct pd_adapter *ad, float **t, size_t *cap, const float *x,
		    int64_t ldx, int64_t rows, float *y, int64_t ldy, int flags);

/* A part of a weight matrix [n_out, n_in]: rows [r0, r0+nr) and columns
 * [c0, c0+nc). Tensor parallelism takes its share of a weight this way
 * without reading the rest of it. */
struct pd_slice {
	int64_t r0, nr;                 /* output rows */
	int64_t c0, nc;                 /* input columns */
	int with_bias;                  /* load bias[r0, r0+nr) (0: no bias on this part) */
};

/* The whole matrix, with its bias. */
struct pd_slice pd_slice_all(int64_t n_out, int64_t n_in);

#endif /* PD_BACKEND_H */
