/*
 * pd_cpu.h - what the CPU backend's files share (not a public header):
 * its state, the prepared weights and primitives, and the kernels each
 * file implements for the operation table in pd_backend_cpu.c.
 */
#ifndef PD_CPU_H
#define PD_CPU_H

#include "pd_backend.h"

#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>

/* Primitives kept per linear layer: text rows, image rows, joint rows and a
 * few parallel variants are all a layer ever sees (a quantized one makes
 * two per shape: its full panels and the last). */
#define PD_MM_CACHE 12
/* Primitives kept per convolution: f32 makes one per size; bf16 one per
 * kind of row chunk (first, middle, last, alone) of each size. */
#define PD_CONV_CACHE 8
/* bf16 convolutions run in chunks of rows whose blocked copies (the bf16
 * input and the f32 output in oneDNN's layout) take about this much
 * scratch: bounded memory whatever the picture's size. */
#define PD_CONV_CHUNK_BYTES (16u << 20)
/* Rows assumed when asking oneDNN for its preferred weight layout. */
#define PD_MM_REF_ROWS 256
/* Attention's blocks (pd_cpu_attention.c): a thread holds one block's
 * scores in f32 and its probabilities, [queries, keys], the queries and
 * their output, and a block of keys and values: with heads of 128, about
 * 0.7 MB (bf16 operands) to 1.2 MB (f32), a core's L2. Counts are cut as equally as the
 * number of blocks allows, so a block is at most this. Chosen on FLUX's
 * attention at 1024² (24 heads, 4608 tokens, bf16 values in f32 products,
 * 2 AVX2 cores, of the product rate, +-0.03 between runs): 64 queries 0.62,
 * 128 0.70, 256 0.72 against 512 keys; 256 keys 0.67, 1024 0.69. */
#define PD_ATTN_QBLOCK 128
#define PD_ATTN_KBLOCK 512
/* Attention copies q, k and v head-major (bf16 for bf16 products) for
 * about this many bytes of heads at a time: at 1024² FLUX's 24 heads
 * are 85 MB in bf16, 9 heads 32 MB, still 324 blocks to share. */
#define PD_ATTN_PACK_BYTES (32u << 20)
/* Quantized linear layers: up to this many rows take the decode-and-dot
 * kernel (the modulation's one row per picture); more decode a panel of
 * output rows at a time for a oneDNN product, whose scratch is about
 * PD_QPANEL_BYTES (32 MB measured 1-3% faster at FLUX's widths, and cost
 * 20 MB more than the memory bound of the issue allows at 1024²). */
#define PD_QDOT_ROWS 8
/* Up to this many rows a panel's product goes to a dense scratch and is
 * copied out: oneDNN 2.6 multiplies plain (decoded) weights with its brgemm
 * kernel only into a dense output, with its older gemm into a strided one.
 * On the AVX-512 EPYC (pdit bench --op-times, FLUX's widths, Q8_0, 512²)
 * the 1536-row products went from 0.78 to 0.86 of the matmul rate with it,
 * the 512- and 1024-row ones from 0.74-0.89 to 0.80-0.87; above this the
 * scratch (rows x panel floats) outgrows the memory bound of quantized
 * runs, and at 4608 rows the strided product keeps the rate (0.92-0.98 of
 * BF16's step at 1024²). */
#define PD_QDENSE_ROWS 2048
#define PD_QPANEL_BYTES (12u << 20)
/* Attention's block products kept (two per shape of block). */
#define PD_AGEMM_CACHE 16
/* Bytes rounded up to whole cache lines. */
#define PD_ALIGN64(n) (((size_t)(n) + 63) & ~(size_t)63)

/* One of attention's block products, run by several threads at once: each
 * has its own memory objects and scratchpad. */
struct pd_attn_gemm {
	int64_t m, n, k;                /* C[m, n] = A[m, k] B, all contiguous */
	int trans_b;                    /* B given as [n, k] rows (the keys) */
	int acc;                        /* C += (the output over key blocks) */
	dnnl_data_type_t dt;            /* type of A and B (C is f32) */
	uint64_t used;                  /* last use, for eviction */
	dnnl_primitive_t prim;          /* made with a scratchpad the caller gives */
	size_t scratch;                 /* bytes of that scratchpad */
	int nthr;                       /* threads it has memory objects for */
	dnnl_memory_t *mem;             /* per thread: A, B, C, scratchpad (handles set per call) */
};

/* Which input rows a scratch holds, made into a product's operand
 * (PD_LIN_SAME_INPUT): layers reading one input convert or quantize it once. */
struct pd_cpu_input {
	const float *x;                 /* the rows' address (NULL: holds nothing) */
	int64_t ldx, rows, n_in;        /* their stride, count and width */
	int kind;                       /* how they were made (bf16: 0; int8: enum pd_i8_inputs, | 8
					 * with the halves' sums, which serve a kind without them too) */
	uint64_t epoch;                 /* pd_cpu.in_epoch when made */
};

struct pd_cpu {
	struct pd_backend be;           /* the interface; must stay first */
	dnnl_engine_t eng;              /* oneDNN CPU engine */
	dnnl_stream_t stream;           /* its (in-order) stream */
	void *bf16;                     /* a linear layer's input as its product's operand (pd_cpu_operand) */
	size_t bf16_cap;                /* its capacity in elements */
	void *abf;                      /* q, k and v of a group of heads as attention's operands */
	size_t abf_cap;                 /* its capacity in bytes */
	size_t attn_pack_bytes;         /* about its size (PD_ATTN_PACK_BYTES) */
	void *aws;                      /* attention's working memory, a part per thread */
	size_t aws_cap;                 /* its capacity in bytes */
	dnnl_stream_t *astream;         /* a stream per attention thread */
	int n_astream;                  /* how many */
	void *qpanel;                   /* decoded output rows of a quantized weight (bf16 or f32) */
	size_t qpanel_cap;              /* its capacity in elements */
	float *qout;                    /* a panel's product, dense [rows, panel], for few rows */
	size_t qout_cap;                /* its capacity in floats */
	float *qrow;                    /* one decoded row per thread */
	size_t qrow_cap;                /* its capacity in floats */
	int avx512;                     /* the CPU has AVX-512 F/BW/VL (softmax kernel, decoders) */
	int avx2;                       /* the CPU has AVX2 and FMA (softmax kernel where no AVX-512) */
	int vnni;                       /* the CPU has AVX-512 VNNI int8 dot products (pd_cpu_i8.c) */
	int vnni256;                    /* without vnni, 256-bit ones: 1 AVX-VNNI, 2 AVX-512 VNNI's 256-bit
					 * form (AVX-512 turned off for pdit), 0 none */
	int amx;                        /* with vnni, AMX-INT8 tiles for Q8_0's layout (pd_cpu_amx.c): 1
					 * the CPU's, 2 emulated (PDIT_AMX_EMULATE, the tests), 0 none */
	int8_t *xq;                     /* an int8 product's input rows, quantized (pd_cpu_i8.c) */
	size_t xq_cap;                  /* its capacity in bytes */
	float *xd;                      /* their blocks' scales (K-quants: their super-blocks') */
	size_t xd_cap;                  /* its capacity in floats */
	int32_t *xc;                    /* their blocks' -128 * sum of values (K-quants: sums of 32 in int16 pairs) */
	size_t xc_cap;                  /* its capacity in values */
	float *xs;                      /* their blocks' scale * sum of values */
	size_t xs_cap;                  /* its capacity in values */
	int32_t *xh;                    /* their blocks' sums of each half (Q6_K's sub-blocks of 16) */
	size_t xh_cap;                  /* its capacity in values */
	const float *last_x;            /* the rows the previous linear call read: their address, */
	int64_t last_ldx, last_rows;    /* stride and count */
	uint64_t in_epoch;              /* bumped by each linear call that does not promise (with
					 * PD_LIN_SAME_INPUT) to read last_x's rows unchanged: what
					 * the scratches below hold from before is stale */
	struct pd_cpu_input bf16_in;    /* what bf16 holds (one input at a time) */
	struct pd_cpu_input xq_in;      /* what xq, xd, xc, xs and xh hold (one input, one kind) */
	float *adapt;                   /* an adapter's x A^T (pd_adapter_term; backend memory) */
	size_t adapt_cap;               /* its capacity in floats */
	int avx512bf16;                 /* the CPU has AVX-512 BF16 dot products (attention's own block
					 * products) */
	int bf16_f32;                   /* bf16 compute where oneDNN has no bf16 products (a CPU
					 * without AVX-512, or PDIT_BF16_AS_F32 for the tests):
					 * operands and weights rounded to bf16 values but stored and
					 * multiplied as f32, so the numbers are those of bf16
					 * products up to the order of the sums */
	size_t qpanel_bytes;            /* a quantized layer's panel scratch, about (PD_QPANEL_BYTES) */
	int64_t qdense_rows;            /* up to these rows its panels' products go through a dense
					 * scratch (PD_QDENSE_ROWS) */
	void *csrc, *cdst;              /* a bf16 convolution's chunk: its input and output, blocked */
	size_t csrc_cap, cdst_cap;      /* their capacities in bytes */
	size_t conv_chunk_bytes;        /* their size per chunk, about (PD_CONV_CHUNK_BYTES) */
	int attn_qblock, attn_kblock;   /* most queries and keys per attention block */
	struct pd_attn_gemm agemm[PD_AGEMM_CACHE]; /* attention's block products */
	int n_agemm;                    /* how many are made */
	uint64_t clock;                 /* use counter for their eviction */
};

struct pd_mm {
	int64_t rows, ldx, ldy;         /* shape and strides this primitive was made for */
	int64_t cols;                   /* output columns (a quantized layer's panel; n_out otherwise) */
	int flags;                      /* PD_LIN_* flags it was made for */
	dnnl_primitive_t prim;          /* the matmul */
	dnnl_memory_t src, dst;         /* memories whose handles are set per call */
	dnnl_memory_t w, b;             /* a quantized layer's panel and its bias part, set per call */
};

struct pd_linear {
	int64_t n_out, n_in;            /* weight shape [n_out, n_in] */
	dnnl_memory_desc_t w_md;        /* packed layout chosen by oneDNN */
	dnnl_memory_t w;                /* packed weights */
	dnnl_memory_t bias;             /* f32 [1, n_out], or NULL */
	size_t bytes;                   /* packed weights and bias, as counted in weight_bytes */
	int n_mm;                       /* cached primitives in use */
	int next;                       /* next cache slot to evict */
	struct pd_mm mm[PD_MM_CACHE];   /* cached primitives */
	/* A weight kept in a block format (linear_new_q); w and w_md are
	 * then unused and bias is read from bias_host. */
	const struct pd_qtype_info *q;  /* its format, or NULL: packed weights */
	enum pd_qtype qtype;            /* its id */
	float scale;                    /* every decoded value times this (scaled fp8) */
	unsigned char *blocks;          /* n_out rows of row_bytes */
	size_t row_bytes;               /* bytes of one row of blocks */
	float *bias_host;               /* f32 [n_out], or NULL */
	int64_t panel;                  /* output rows decoded per product */
	unsigned char *i8;              /* the weight in the int8 products' layout (pd_cpu_i8.c; blocks is
					 * then NULL), or NULL: decoded for products */
	int64_t i8_groups;              /* its groups of 16 output rows */
	int i8_avx2;                    /* its products take the AVX2 kernel (a CPU with AVX2, without VNNI) */
	int i8_w256;                    /* i8 holds it requantized to one scale per 256 inputs
					 * (PD_QP_INT8_W256, pd_cpu_i8.c) */
	struct pd_adapter ad;           /* a low-rank term beside it (linear_adapt), or none */
};

struct pd_conv_prim {
	int h, w, halo;                 /* the call's output size and input halo this primitive was made for */
	/* bf16: the chunk of output rows it makes, and its zero padding above
	 * and below (the picture's edges; elsewhere the input has the rows) */
	int rows, pad_t, pad_b;
	dnnl_primitive_t prim;          /* the convolution */
	dnnl_memory_t wts;              /* weights in the primitive's layout */
	size_t wbytes;                  /* their size, when this primitive owns them (0: shared) */
	dnnl_memory_t src, dst;         /* handles set per call */
	/* bf16 only: the caller's f32 [c, h, w] rows as strided views, and
	 * the reorders between them and the convolution's blocked layouts */
	dnnl_memory_t src_user, dst_user;
	dnnl_primitive_t to_src, from_dst;
	size_t src_bytes, dst_bytes;    /* the blocked copies' sizes (backend scratch) */
};

struct pd_conv {
	int c_out, c_in, k;             /* kernel shape */
	int bf16;                       /* bf16 products with f32 sums in oneDNN's blocked layouts
					 * (the backend's conv_compute when made; 0 where oneDNN has no
					 * fast kernel for the shape) */
	dnnl_memory_t w_user;           /* weights as given, oihw f32 */
	dnnl_memory_t bias;             /* f32 [c_out] */
	dnnl_memory_t w_bf16;           /* bf16 weights in the first bf16 primitive's layout (the
					 * others that choose the same layout use them), or NULL */
	int n_prim, next;               /* cache use */
	size_t bytes;                   /* weights in every layout and bias, as counted in weight_bytes */
	struct pd_conv_prim p[PD_CONV_CACHE]; /* cached primitives */
};

#define CPU(be) ((struct pd_cpu *)(be))

/* Evaluates a oneDNN call; on failure records it in the backend and jumps
 * to the label. */
#define DNNL_TRY(be, call, label) \
	do { \
		dnnl_status_t s_ = (call); \
		if (s_ != dnnl_success) { \
			pd_backend_fail((be), "oneDNN error %d in %s", (int)s_, #call); \
			goto label; \
		} \
	} while (0)

/* Counts ADD bytes of activations allocated and SUB freed. */
void pd_cpu_count_work(struct pd_backend *be, size_t add, size_t sub);
/* Scratch grows to the largest request and stays: after the first step
 * nothing is allocated. */
int pd_cpu_grow(struct pd_backend *be, void **buf, size_t *cap, size_t need, size_t elem);
/* f32 -> bf16, round to nearest even (what torch's .to(bfloat16) does). */
void pd_cpu_to_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t lds);
/* The same rounding, the results kept as f32: N values of one row (DST may
 * be SRC; AVX-512 where present), and ROWS x COLS of SRC with row stride LDS
 * into contiguous DST (on all threads). */
void pd_cpu_round_bf16_row(const struct pd_cpu *cpu, float *dst, const float *src, int64_t n);
void pd_cpu_round_bf16(const struct pd_cpu *cpu, float *dst, const float *src, int64_t rows, int64_t cols, int64_t lds);
/* f32 bits rounded to the nearest bf16, ties to even (torch's rounding):
 * the bf16's 16 bits. */
static inline uint32_t pd_bf16_bits(uint32_t u)
{
	return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}
/* N values of one row as bf16 with that rounding (AVX-512 where present). */
void pd_cpu_bf16_row(const struct pd_cpu *cpu, uint16_t *dst, const float *src, int64_t n);
/* The data type of the products' operands: bf16 where oneDNN multiplies
 * bf16 here, else f32. */
dnnl_data_type_t pd_cpu_mm_type(struct pd_backend *be);
/* Bytes of one element of a product's operand: 2 for native bf16 products,
 * else 4 (f32, or bf16 values held as f32). */
size_t pd_cpu_operand_size(struct pd_backend *be);
/* ROWS x COLS of SRC (row stride LDS) as a contiguous operand of the
 * backend's bf16 products into DST: bf16, or bf16 values as f32 (bf16_f32). */
void pd_cpu_operand(struct pd_backend *be, void *dst, const float *src, int64_t rows, int64_t cols, int64_t lds);
/* Whether REC holds X's ROWS (stride LDX, width N_IN) made as KIND (or as
 * KIND | 8, which holds more) in this epoch (pd_cpu.in_epoch: since the
 * last linear call that did not promise its input unchanged); if not, REC
 * is set to them: the caller makes them now. */
int pd_cpu_input_kept(struct pd_cpu *cpu, struct pd_cpu_input *rec, const float *x, int64_t ldx, int64_t rows,
		      int64_t n_in, int kind);
/* X's ROWS (stride LDX, width N_IN) as the bf16 products' operand, in the
 * scratch bf16, made unless it holds them (pd_cpu_input_kept); NULL with
 * the backend failed. */
const void *pd_cpu_input_operand(struct pd_backend *be, const float *x, int64_t ldx, int64_t rows, int64_t n_in);
/* The matmul of L for ROWS rows and COLS output columns (a quantized
 * layer's panel), with these strides and PD_LIN_* flags. */
int pd_cpu_mm_create(struct pd_backend *be, const struct pd_linear *l, struct pd_mm *mm, int64_t rows,
		     int64_t cols, int64_t ldx, int64_t ldy, int flags);
/* L's cached matmul for these, made when missing; NULL on failure. */
struct pd_mm *pd_cpu_mm_get(struct pd_backend *be, struct pd_linear *l, int64_t rows, int64_t cols, int64_t ldx,
			    int64_t ldy, int flags);
/* The product of a quantized layer (pd_cpu_qmatmul.c). */
void pd_cpu_qlinear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		    float *y, int64_t ldy, int flags);
/* Int8 products of kept-quantized layers (pd_cpu_i8.c). Whether a weight
 * of type T with N_IN inputs has them; groups of 16 output rows and bytes of a [n_out, n_in] weight in
 * their layout; BLOCKS (n_out rows of ROW_BYTES) into DST of that size; the
 * input rows quantized (INPUTS PD_I8_IN_32) in blocks of 32 (values in XQ [rows, n_in], scales
 * in XD, -128 * sums in XC, scale * sums in XS, [rows, n_in / 32]), with
 * INPUTS PD_I8_IN_SUPER (the K-quants) in blocks of 256 (a row's scales first in its row
 * of XD, its sums of 32 as int16 pairs first in its row of XC, XS
 * untouched), with PD_I8_IN_WIDE (a wide Q8_0 layer) in blocks of 256 (a row's
 * scales first in its row of XD, XC as with blocks of 32, XS untouched);
 * the sums of each 16 in XH [rows, n_in / 16] unless it is NULL; the
 * product, as pd_cpu_linear. */
int pd_cpu_i8_has(enum pd_qtype t, int64_t n_in);
/* How pd_cpu_i8_quant_rows blocks the input rows. */
enum pd_i8_inputs {
	PD_I8_IN_32 = 0,        /* blocks of 32 (Q8_0 of other widths, Q5_0, Q4_0, Q4_1, fp8) */
	PD_I8_IN_SUPER = 1,     /* blocks of 256, sums of 32 as int16 pairs (the K-quants) */
	PD_I8_IN_WIDE = 2,      /* blocks of 256, -128 * sums of 32 (a wide Q8_0 layer) */
};
/* Bytes of a group's block of 32 inputs in Q8_0's layout (pd_cpu_i8.c's
 * header): 512 of weights, 32 of f16 scales. */
#define PD_I8_BLOCK 544
/* Bytes of a group's 256 inputs requantized (int8-256): 4096 of weights,
 * 64 of f32 scales. */
#define PD_I8W_BLOCK 4160
/* -128 * the sum of a wide input's 256 quantized values (an int8-256
 * product's start): its 8 blocks' at C (pd_cpu_i8_quant_rows' XC). */
static inline int32_t pd_cpu_i8_corr256(const int32_t *c)
{
	return c[0] + c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7];
}
/* Whether T takes Q8_0's layout (Q8_0, Q5_0 as q - 16, fp8 converted at
 * load): the one the AVX2 and AMX kernels multiply. */
int pd_cpu_i8_q8_layout(enum pd_qtype t);
int64_t pd_cpu_i8_groups(int64_t n_out);
/* Whether a layer of T with N_IN inputs is requantized to one scale per
 * 256 inputs under QP (PD_QP_INT8_W256 on a wide Q8_0 layer); the bytes and
 * packing below then take W256 1. */
int pd_cpu_i8_w256(enum pd_qproducts qp, enum pd_qtype t, int64_t n_in);
size_t pd_cpu_i8_bytes(enum pd_qtype t, int64_t n_out, int64_t n_in, int w256);
void pd_cpu_i8_pack(unsigned char *dst, enum pd_qtype t, int64_t n_out, int64_t n_in, const unsigned char *blocks,
		    size_t row_bytes, int w256);
/* How a layer's units are laid out for the tiles (pd_cpu_i8_linear and
 * pd_cpu_amx_tile's FORM). */
enum pd_i8_form {
	PD_I8_UNITS = 0,        /* each type's blocks of 32 or super-blocks of 256 */
	PD_I8_WIDE = 1,         /* a wide Q8_0 layer: its blocks of 32, inputs in blocks of 256 */
	PD_I8_W256 = 2,         /* a wide Q8_0 layer requantized: one weight scale per 256 inputs */
};
/* Whether the AVX2 kernel takes the packed weight I8 of type T: Q8_0's
 * layout (Q8_0, Q5_0, fp8) without a weight of -128. */
int pd_cpu_i8_avx2_fits(enum pd_qtype t, const unsigned char *i8, int64_t n_out, int64_t n_in);
void pd_cpu_i8_quant_rows(const struct pd_cpu *cpu, const float *x, int64_t ldx, int64_t rows, int64_t n_in,
			  enum pd_i8_inputs inputs, int8_t *xq, float *xd, int32_t *xc, float *xs, int32_t *xh);
void pd_cpu_i8_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		      float *y, int64_t ldy, int flags);
/* Input rows an AMX tile takes (pd_cpu_amx_tile's NR at most). */
#define PD_AMX_ROWS 16
/* F16C and AVX-VNNI from CPUID, 1 where the CPU has them: the names clang
 * 14's __builtin_cpu_supports does not know (the fuzzing build's). */
int pd_cpu_f16c(void);
int pd_cpu_avx_vnni(void);
/* AMX-INT8 for the int8 products (pd_cpu_amx.c): 1 where the CPU and the
 * system have it (asking Linux for the tiles' state), 2 emulated
 * (PDIT_AMX_EMULATE=1 on a CPU with AVX-512 VNNI: the kernel's code, its
 * tile instructions in C), 0 not (or PDIT_NO_AMX). */
int pd_cpu_amx_int8(void);
/* The f32 sums of NR (1 to 16) input rows by two groups of 16 outputs, on
 * AMX (the CPU's, AMX 1, or emulated, 2): the rows' quantized values XQ
 * (N_IN a row), scales XD and -128 * sums XC (n_in / 32 a row, as
 * pd_cpu_i8_quant_rows makes them), the groups at W0 and W1 in Q8_0's
 * layout as FORM lays it out (a wide layer's inputs in blocks of 256), into
 * T[r * 32 + column]: the VNNI kernel's bits. */
void pd_cpu_amx_tile(int amx, const int8_t *xq, int64_t n_in, const float *xd, const int32_t *xc, int nr,
		     const unsigned char *w0, const unsigned char *w1, enum pd_i8_form form, float *t);
/* oneDNN's gelu_tanh, for the products that are not oneDNN's. */
static inline float pd_cpu_gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)));
}
/* Frees attention's products, streams and buffers (pd_cpu_attention.c). */
void pd_cpu_attn_free(struct pd_cpu *cpu);

/* The operations (pd_backend.h documents each). */
float *pd_cpu_alloc(struct pd_backend *be, size_t n);
void pd_cpu_free(struct pd_backend *be, float *p);
void pd_cpu_copy(struct pd_backend *be, float *dst, const float *src, size_t n);
void pd_cpu_copy2d(struct pd_backend *be, float *dst, int64_t ldd, const float *src, int64_t lds,
		   int64_t rows, int64_t cols);
struct pd_linear *pd_cpu_linear_new(struct pd_backend *be, int64_t n_out, int64_t n_in, const void *w,
				    enum pd_dtype wt, int64_t ldw, const float *bias);
void pd_cpu_linear_free(struct pd_backend *be, struct pd_linear *l);
int pd_cpu_linear_adapt(struct pd_backend *be, struct pd_linear *l, int64_t rank, const float *a, const float *b);
/* A zeroed linear layer of that shape (NULL with the backend failed). */
struct pd_linear *pd_cpu_linear_alloc(struct pd_backend *be, int64_t n_out, int64_t n_in);
struct pd_linear *pd_cpu_linear_new_q(struct pd_backend *be, int64_t n_out, int64_t n_in, enum pd_qtype t,
				      float scale, const void *blocks, const float *bias);
void pd_cpu_linear(struct pd_backend *be, struct pd_linear *l, const float *x, int64_t ldx, int64_t rows,
		   float *y, int64_t ldy, int flags);
struct pd_conv *pd_cpu_conv_new(struct pd_backend *be, int c_out, int c_in, int k, const float *w,
				const float *bias);
void pd_cpu_conv_free(struct pd_backend *be, struct pd_conv *c);
void pd_cpu_conv(struct pd_backend *be, struct pd_conv *c, const float *x, int h, int w, int halo, float *y);
void pd_cpu_fill(struct pd_backend *be, float *y, float v, size_t n);
void pd_cpu_silu(struct pd_backend *be, float *y, const float *x, size_t n);
void pd_cpu_quick_gelu(struct pd_backend *be, float *y, const float *x, size_t n);
void pd_cpu_mul(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
void pd_cpu_add(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
void pd_cpu_sub(struct pd_backend *be, float *y, const float *a, const float *b, size_t n);
void pd_cpu_layernorm_mod(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
			  int64_t rows, int64_t dim, const float *scale, const float *shift, float eps);
void pd_cpu_layernorm(struct pd_backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
		      int64_t rows, int64_t dim, const float *w, const float *b, float eps);
void pd_cpu_rmsnorm_heads(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads,
			  int head_dim, const float *w, float eps);
void pd_cpu_row_sumsq(struct pd_backend *be, float *sumsq, const float *x, int64_t ldx, int64_t rows, int64_t cols);
void pd_cpu_rms_apply(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int64_t cols, const float *sumsq,
		      int64_t n, const float *w, float eps);
void pd_cpu_rope(struct pd_backend *be, float *x, int64_t ldx, int64_t rows, int heads, int head_dim,
		 const float *cos, const float *sin);
void pd_cpu_gated_add(struct pd_backend *be, float *x, int64_t ldx, const float *y, int64_t ldy,
		      int64_t rows, int64_t dim, const float *gate);
void pd_cpu_attention(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *q,
		      int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t sq,
		      int64_t skv, int heads, int head_dim, float scale);
void pd_cpu_attention_masked(struct pd_backend *be, float *out, int64_t ldo, const float *q, int64_t ldq,
			     const float *k, int64_t ldk, const float *v, int64_t ldv, int64_t s, int heads,
			     int head_dim, float scale, const float *bias, int causal);
void pd_cpu_lse_merge(struct pd_backend *be, float *out, int64_t ldo, float *lse, const float *part,
		      int64_t ldp, const float *plse, int64_t sq, int heads, int head_dim);
void pd_cpu_group_stats(struct pd_backend *be, const float *x, int c, int64_t hw, int groups,
			double *stats);
void pd_cpu_rms_channels(struct pd_backend *be, float *y, const float *x, int c, int64_t hw, const float *gamma,
			  int silu);
void pd_cpu_group_apply(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c,
			int64_t hw, int groups, const double *stats, double count, const float *gamma,
			const float *beta, float eps, int silu);
void pd_cpu_upsample2x(struct pd_backend *be, float *y, int64_t y_cstride, const float *x, int c, int h,
		       int w);
void pd_cpu_transpose(struct pd_backend *be, float *y, const float *x, int64_t rows, int64_t cols);

#endif /* PD_CPU_H */
