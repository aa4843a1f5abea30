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
	PD_Q_COUNT = 40                 /* ids are below this */
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

/* Decodes N elements (a multiple of the type's block size) of type T from
 * SRC into float32 DST. */
void pd_quant_decode(enum pd_qtype t, const void *src, float *dst, int64_t n);

/* fp8 code to float32: e4m3fn (bias 7, no infinities, S.1111.111 NaN) and
 * e5m2 (bias 15, the upper byte of an IEEE half). */
float pd_fp8_e4m3_to_f32(uint8_t c);
float pd_fp8_e5m2_to_f32(uint8_t c);
/* N codes into float32, times SCALE (ComfyUI's scaled fp8: one rounding of
 * the product; 1.0f for plain fp8). */
void pd_fp8_decode(int e5m2, const uint8_t *src, float *dst, int64_t n, float scale);

#endif /* PD_QUANT_H */
