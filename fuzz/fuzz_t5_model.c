/*
 * fuzz_t5_model.c - a sentencepiece model file (protobuf, normalizer trie);
 * when it loads, a fixed prompt is normalized and encoded.
 */
#include "fuzz.h"
#include "pd_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = pd_fuzz_file(0, "spiece.model", data, size);
	struct pd_t5_tok t;
	int32_t *ids = NULL;
	char *norm = NULL;
	size_t n;

	memset(&t, 0, sizeof(t));
	if (pd_t5_tok_load(&t, path))
		return 0;
	if (pd_t5_tok_normalize(&t, "  Ａ photo\tof a ﬁsh, 1/2 ½  ", &norm, &n) == 0)
		free(norm);
	if (pd_t5_tok_encode(&t, "a photo of a cat </s> <unk> 猫 😺", &ids, &n) == 0)
		free(ids);
	pd_t5_tok_free(&t);
	return 0;
}
