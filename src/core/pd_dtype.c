/*
 * pd_dtype.c - element types by their safetensors names.
 */

#include "pd_dtype.h"
#include "pd_util.h"

#include <string.h>

static const struct {
	const char *name;
	size_t size;
} pd_dtypes[PD_DTYPE_COUNT] = {
	[PD_F32] = { "F32", 4 },     [PD_F16] = { "F16", 2 },     [PD_BF16] = { "BF16", 2 },
	[PD_F64] = { "F64", 8 },     [PD_F8_E4M3] = { "F8_E4M3", 1 }, [PD_F8_E5M2] = { "F8_E5M2", 1 },
	[PD_I8] = { "I8", 1 },       [PD_U8] = { "U8", 1 },       [PD_I16] = { "I16", 2 },
	[PD_U16] = { "U16", 2 },     [PD_I32] = { "I32", 4 },     [PD_U32] = { "U32", 4 },
	[PD_I64] = { "I64", 8 },     [PD_U64] = { "U64", 8 },     [PD_BOOL] = { "BOOL", 1 },
};

const char *pd_dtype_name(enum pd_dtype dt)
{
	return (unsigned)dt < PD_DTYPE_COUNT ? pd_dtypes[dt].name : "?";
}

size_t pd_dtype_size(enum pd_dtype dt)
{
	return (unsigned)dt < PD_DTYPE_COUNT ? pd_dtypes[dt].size : 0;
}

int pd_dtype_from_name(const char *name)
{
	for (int i = 0; i < PD_DTYPE_COUNT; i++)
		if (strcmp(pd_dtypes[i].name, name) == 0)
			return i;
	return -1;
}

int pd_dtype_is_float(enum pd_dtype dt)
{
	return dt == PD_F32 || dt == PD_F16 || dt == PD_BF16 || dt == PD_F64 || dt == PD_F8_E4M3 || dt == PD_F8_E5M2;
}

int pd_dtype_compute(const char *flag, const char *s, enum pd_dtype *out)
{
	if (strcmp(s, "f32") == 0)
		*out = PD_F32;
	else if (strcmp(s, "bf16") == 0)
		*out = PD_BF16;
	else
		return pd_errorf("%s must be f32 or bf16, not '%s'", flag, s);
	return 0;
}
