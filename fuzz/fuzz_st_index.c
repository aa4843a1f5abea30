/*
 * fuzz_st_index.c - a sharded set: the input is an index JSON and, after the
 * separator "\n--shard--\n", the bytes of a shard written as
 * "model-00001-of-00002.safetensors" beside it (a second shard,
 * "model-00002-of-00002.safetensors", is a fixed valid file). The index may
 * name any file: names that leave the folder must be refused.
 */
#include "fuzz.h"
#include "pd_safetensors.h"
#include "pd_util.h"

static const uint8_t pd_fuzz_valid_shard[] = {
	/* header length 64, {"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} padded, 8 data bytes */
	64, 0, 0, 0, 0, 0, 0, 0,
	'{', '"', 'b', '"', ':', '{', '"', 'd', 't', 'y', 'p', 'e', '"', ':', '"', 'F', '3', '2', '"', ',',
	'"', 's', 'h', 'a', 'p', 'e', '"', ':', '[', '2', ']', ',', '"', 'd', 'a', 't', 'a', '_', 'o', 'f',
	'f', 's', 'e', 't', 's', '"', ':', '[', '0', ',', '8', ']', '}', '}', ' ', ' ', ' ', ' ', ' ', ' ',
	' ', ' ', ' ', ' ',
	0, 0, 128, 63, 0, 0, 0, 64,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *shard;
	size_t n_index, n_shard;
	struct pd_st *st = NULL;
	float v[4];

	pd_fuzz_split(data, size, "\n--shard--\n", &shard, &n_shard, &n_index);
	pd_fuzz_file(1, "model-00001-of-00002.safetensors", shard, n_shard);
	pd_fuzz_file(2, "model-00002-of-00002.safetensors", pd_fuzz_valid_shard, sizeof(pd_fuzz_valid_shard));
	pd_fuzz_file(0, "model.safetensors.index.json", data, n_index);
	if (pd_st_open_component(&st, pd_fuzz_dir(), "model"))
		return 0;
	for (int i = 0; i < st->n_tensors; i++) {
		const struct pd_st_tensor *t = st->sorted[i];

		if (pd_dtype_is_float(t->dtype) && t->numel > 0)
			pd_st_read_f32(t, 0, 1, v);
	}
	pd_st_close(st);
	return 0;
}
