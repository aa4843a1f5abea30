/*
 * fuzz_llm.c - a language model's single file (safetensors, its sizes
 * inferred from the shapes; or a GGUF in llama.cpp's names, its sizes from
 * the metadata, as pdit quantize writes the gguf-* seeds): when it loads, a
 * few tokens run through it on the CPU.
 */
#include "fuzz.h"
#include "pd_backend_new.h"
#include "pd_llm.h"
#include "pd_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = pd_fuzz_file(0, "llm.safetensors", data, size);
	static struct pd_backend *be;
	struct pd_llm *m = NULL;
	const struct pd_llm_config *c;
	int64_t ids[5] = { 0, 1, 2, 3, 4 };

	if (!be) {
		struct pd_backend_config cfg = { PD_F32, 1, -1, 0, PD_QP_DECODE };

		if (pd_backend_new(&be, "cpu", &cfg))
			abort();
	}
	if (pd_llm_load(&m, path, be))
		return 0;
	c = pd_llm_get_config(m);
	/* a model of reasonable sizes runs; the ids fit its vocabulary */
	if ((int64_t)c->hidden * c->intermediate < (1 << 22) && c->layers <= 8) {
		float *out = malloc((size_t)c->hidden * 5 * sizeof(float));

		for (int i = 0; i < 5; i++)
			ids[i] %= c->vocab;
		if (out)
			pd_llm_forward(m, ids, 5, out, NULL);
		free(out);
		pd_backend_recover(be);
	}
	pd_llm_free(m);
	return 0;
}
