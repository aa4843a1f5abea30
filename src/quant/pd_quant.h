/*
 * pd_quant.h - the block formats of quantized weights: ggml's types (as
 * GGUF files store them) and the fp8 codes of safetensors, decoded to
 * float32 exactly as ggml's to_float does (float32 arithmetic in its
 * order, no fused multiply-add), so decoded values equal ggml's bit for
 * bit.
 *
 * A row of N elements is N / block_size blocks of block_bytes each; rows
 * never share a block.
 */
#ifndef PD_QUANT_H
#define PD_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml_type ids (ggml.h): the numbers a GGUF file carries. */
enum pd_qtype {
	PD_Q_F32 = 0,
	PD_Q_F16 = 1,
	PD_Q_Q4_0 = 2,
	PD_Q_Q4_1 = 3,
	PD_Q_Q5_0 = 6,
	PD_Q_Q5_1 = 7,
	PD_Q_Q8_0 = 8,
	PD_Q_Q8_1 = 9,
	PD_Q_Q2_K = 10,
	PD_Q_Q3_K = 11,
	PD_Q_Q4_K = 12,
	PD_Q_Q5_K = 13,
	PD_Q_Q6_K = 14,
	PD_Q_Q8_K = 15,
	PD_Q_I8 = 24,
	PD_Q_I16 = 25,
	PD_Q_I32 = 26,
	PD_Q_I64 = 27,
	PD_Q_F64 = 28,
	PD_Q_BF16 = 30,
	PD_Q_COUNT = 40,                /* ggml's ids are below this */
	/* pdit's own, never in a GGUF file: safetensors' fp8 codes as a
	 * format of one-byte blocks, so a linear layer keeps them as it
	 * keeps ggml's blocks */
	PD_Q_F8_E4M3 = 64,
	PD_Q_F8_E5M2 = 65
};

/* What a type is; name NULL: an id pdit does not know (or a retired one). */
struct pd_qtype_info {
	const char *name;               /* "q8_0", as ggml names it */
	int block_size;                 /* elements per block */
	int block_bytes;                /* bytes per block */
	int decodes;                    /* pd_quant_decode takes it */
};

/* The type with ggml id ID, or NULL when ID is unknown or retired. */
const struct pd_qtype_info *pd_qtype_get(int id);

/* The format T (ggml's or pdit's fp8), or NULL when unknown. */
const struct pd_qtype_info *pd_quant_info(enum pd_qtype t);

/* Bytes of a row of N elements of T (N a multiple of its block size). */
size_t pd_quant_row_bytes(const struct pd_qtype_info *q, int64_t n);

/* Decodes N elements (a multiple of the type's block size) of type T from
 * SRC into float32 DST. */
void pd_quant_decode(enum pd_qtype t, const void *src, float *dst, int64_t n);

/* The same values by AVX-512 kernels (pd_quant_avx512.c): 0, or -1 when
 * this CPU or build has none for T (pd_quant_avx512_has says which). */
int pd_quant_avx512_has(enum pd_qtype t);
int pd_quant_decode_avx512(enum pd_qtype t, const void *src, float *dst, int64_t n);
/* The fastest of the two this CPU runs. */
void pd_quant_decode_fast(enum pd_qtype t, const void *src, float *dst, int64_t n);
/* N elements of T decoded straight to bf16 bits, each the decoded float32
 * value rounded to nearest even as (u + 0x7fff + (u >> 16 & 1)) >> 16 (the
 * backend's rounding of its bf16 operands), so equal to pd_quant_decode
 * followed by that rounding: 0, or -1 when this CPU or build has no such
 * kernel for T. fp8 e4m3fn has one (its values are bf16 values: 0.2 ns an
 * element on one core against 0.39 through float32); Q8_0 measured no
 * faster that way (0.25 either way), so it and the rest go through float32. */
int pd_quant_decode_bf16_avx512(enum pd_qtype t, const void *src, uint16_t *dst, int64_t n);

/* fp8 code to float32: e4m3fn (bias 7, no infinities, S.1111.111 NaN) and
 * e5m2 (bias 15, the upper byte of an IEEE half). */
float pd_fp8_e4m3_to_f32(uint8_t c);
float pd_fp8_e5m2_to_f32(uint8_t c);
/* The 256 values of e4m3fn (E5M2 0) or e5m2 codes. */
const float *pd_fp8_table(int e5m2);
/* N codes into float32, times SCALE (ComfyUI's scaled fp8: one rounding of
 * the product; 1.0f for plain fp8). */
void pd_fp8_decode(int e5m2, const uint8_t *src, float *dst, int64_t n, float scale);

/* The type named NAME: ggml's names in any case ("q8_0", "Q4_K"), "fp8"
 * or "f8_e4m3fn", "f8_e5m2"; 0, or -1 when unknown. */
int pd_quant_parse(const char *name, enum pd_qtype *t);

/* Whether pd_quant_encode writes T: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K and both fp8 codes. */
int pd_quant_encodes(enum pd_qtype t);
/* Encodes N float32 values (a multiple of T's block size) into T as
 * ggml's quantize_row_*_ref does (byte for byte); fp8 rounds to nearest
 * even and saturates at the largest finite value. */
void pd_quant_encode(enum pd_qtype t, const float *src, void *dst, int64_t n);
/* ROWS rows of COLS values (COLS a multiple of T's block size) encoded
 * row after row, the rows spread over the calling thread's OpenMP
 * threads; VIA (PD_Q_F16 or PD_Q_BF16) rounds every value to that type
 * first, PD_Q_F32 takes them as they are. SRC is rounded in place. */
void pd_quant_encode_rows(enum pd_qtype t, enum pd_qtype via, float *src, int64_t rows, int64_t cols, void *dst);

/* ggml's get_scale_min_k4: the 6-bit scale D and min M of sub-block J of
 * a Q4_K or Q5_K super-block's 12 scale bytes Q (the decoders here and the
 * CPU's int8 layout read them the same way). */
static inline void pd_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
	}
}

#endif /* PD_QUANT_H */
