/*
 * fuzz_qwen_files.c - Qwen2's tokenizer files: the input is vocab.json,
 * then after "\n--merges--\n" merges.txt, then after "\n--config--\n"
 * tokenizer_config.json (its added tokens); an input starting with
 * "--json--\n" is a tokenizer.json instead. When they load, a templated
 * prompt and the input's own bytes are encoded.
 */
#include "fuzz.h"
#include "pd_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *merges, *config;
	size_t n_vocab, n_merges, n_config, n_rest;
	struct pd_qwen_tok t;
	int32_t *ids = NULL;
	size_t n;

	if (size >= 9 && memcmp(data, "--json--\n", 9) == 0) {
		pd_fuzz_file(0, "tokenizer.json", data + 9, size - 9);
		unlink(pd_fuzz_file(1, "vocab.json", "", 0));
		unlink(pd_fuzz_file(2, "tokenizer_config.json", "", 0));
		pd_fuzz_written[1][0] = pd_fuzz_written[2][0] = 0;
		config = data + 9;
		n_config = size - 9;
	} else {
		pd_fuzz_split(data, size, "\n--merges--\n", &merges, &n_rest, &n_vocab);
		pd_fuzz_split(merges, n_rest, "\n--config--\n", &config, &n_config, &n_merges);
		pd_fuzz_file(0, "vocab.json", data, n_vocab);
		pd_fuzz_file(1, "merges.txt", merges, n_merges);
		pd_fuzz_file(2, "tokenizer_config.json", config, n_config);
	}
	memset(&t, 0, sizeof(t));
	if (pd_qwen_tok_load(&t, pd_fuzz_dir()))
		return 0;
	if (pd_qwen_tok_encode(&t, "<|im_start|>user\nA cat's 12 dogs, 猫 😺\r\n\t  <|im_end|>\n", &ids, &n) == 0)
		free(ids);
	{
		char *s = pd_fuzz_str(config, n_config);

		ids = NULL;
		if (pd_qwen_tok_encode(&t, s, &ids, &n) == 0)
			free(ids);
		free(s);
	}
	pd_qwen_tok_free(&t);
	return 0;
}
