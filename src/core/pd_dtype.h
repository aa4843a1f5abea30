/*
 * pd_dtype.h - element types of tensors on disk and of the backend's
 * matrix products, named as safetensors names them.
 */
#ifndef PD_DTYPE_H
#define PD_DTYPE_H

#include <stddef.h>

enum pd_dtype {
	PD_F32,
	PD_F16,
	PD_BF16,
	PD_F64,
	PD_F8_E4M3,
	PD_F8_E5M2,
	PD_I8,
	PD_U8,
	PD_I16,
	PD_U16,
	PD_I32,
	PD_U32,
	PD_I64,
	PD_U64,
	PD_BOOL,
	PD_DTYPE_COUNT
};

const char *pd_dtype_name(enum pd_dtype dt);
size_t pd_dtype_size(enum pd_dtype dt);
/* -1 when the string names no dtype pdit knows. */
int pd_dtype_from_name(const char *name);
/* The compute precision S names ("f32" or "bf16"), as FLAG (--dtype,
 * --vae-dtype) gives it; else -1 with a message naming the flag. */
int pd_dtype_compute(const char *flag, const char *s, enum pd_dtype *out);
/* True for the floating dtypes pd_st_read_* can convert. */
int pd_dtype_is_float(enum pd_dtype dt);

#endif /* PD_DTYPE_H */
