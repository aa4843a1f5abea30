/*
 * fuzz_clip_files.c - CLIP tokenizer files: the input is vocab.json and,
 * after "\n--merges--\n", merges.txt; when they load, a fixed prompt and
 * the input's own bytes are encoded.
 */
#include "fuzz.h"
#include "pd_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *merges;
	size_t n_vocab, n_merges;
	struct pd_clip_tok t;
	int32_t *ids = NULL;
	size_t n;

	pd_fuzz_split(data, size, "\n--merges--\n", &merges, &n_merges, &n_vocab);
	pd_fuzz_file(0, "vocab.json", data, n_vocab);
	pd_fuzz_file(1, "merges.txt", merges, n_merges);
	memset(&t, 0, sizeof(t));
	if (pd_clip_tok_load(&t, pd_fuzz_dir()))
		return 0;
	if (pd_clip_tok_encode(&t, "a photo of a cat, isn't it? 猫 😺", &ids, &n) == 0)
		free(ids);
	{
		char *s = pd_fuzz_str(merges, n_merges);

		ids = NULL;
		if (pd_clip_tok_encode(&t, s, &ids, &n) == 0)
			free(ids);
		free(s);
	}
	pd_clip_tok_free(&t);
	return 0;
}
