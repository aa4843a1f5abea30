/*
 * fuzz_safetensors.c - the safetensors reader on one file: header, tensors,
 * metadata, and reads of every tensor as f32 (start, middle, end and a block).
 */
#include "fuzz.h"
#include "pd_safetensors.h"
#include "pd_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = pd_fuzz_file(0, "x.safetensors", data, size);
	struct pd_st *st = NULL;
	float buf[64];

	if (pd_st_open(&st, path))
		return 0;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];
		size_t n = t->numel < 16 ? (size_t)t->numel : 16;

		if (!pd_dtype_is_float(t->dtype) || t->numel == 0)
			continue;
		pd_st_read_f32(t, 0, n, buf);
		pd_st_read_f32(t, (size_t)t->numel - n, n, buf);
		pd_st_read_f32(t, (size_t)t->numel / 2, 1, buf);
		if (t->ndim == 2 && t->shape[0] > 0 && t->shape[1] > 0)
			pd_st_read_block_f32(t, t->shape[0] / 2, 1, 0, t->shape[1] < 64 ? t->shape[1] : 64, buf,
					     t->shape[1] < 64 ? t->shape[1] : 64);
		if (pd_st_get(st, t->name) != t)
			abort();
	}
	for (int i = 0; i < st->n_meta; i++)
		if (pd_st_meta(st, st->meta_keys[i]) == NULL)
			abort();
	pd_st_close(st);
	return 0;
}
