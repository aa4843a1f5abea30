/*
 * fuzz_gguf.c - the GGUF reader on one file: the pairs, every tensor found
 * by its name, and every decodable tensor's first, middle and last blocks
 * decoded. Seeds: the golden broken/ and edge/ files and ggml's types file.
 */
#include "fuzz.h"
#include "pd_gguf.h"
#include "pd_quant.h"
#include "pd_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = pd_fuzz_file(0, "x.gguf", data, size);
	struct pd_gguf *g = NULL;
	float buf[256];

	if (pd_gguf_open(&g, path))
		return 0;
	for (int64_t i = 0; i < g->n_kv; i++)
		if (pd_gguf_kv_find(g, g->kv[i].key) != &g->kv[i])
			abort();
	for (int64_t i = 0; i < g->n_tensors; i++) {
		const struct pd_gguf_tensor *t = &g->tensors[i];
		const struct pd_qtype_info *q = pd_qtype_get(t->type);
		int64_t blocks = t->numel / q->block_size, pick[3] = { 0, blocks / 2, blocks - 1 };

		if (pd_gguf_get(g, t->name) != t)
			abort();
		if (!q->decodes || blocks == 0)
			continue;
		for (int k = 0; k < 3; k++)
			pd_quant_decode((enum pd_qtype)t->type, t->data + pick[k] * q->block_bytes, buf, q->block_size);
	}
	pd_gguf_close(g);
	return 0;
}
