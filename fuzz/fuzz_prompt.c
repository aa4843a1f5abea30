/*
 * fuzz_prompt.c - the prompt tokenizers on any text: the real CLIP and T5
 * tokenizer files (tests/golden/text-encoders-tiny, or the folders in
 * PDIT_FUZZ_TOKENIZERS: "CLIP_DIR:T5_PATH"), loaded once. CLIP's ids must
 * start with BOS and end with EOS, T5's be pieces of the model, and fitting
 * to 77 must keep BOS first and EOS last.
 */
#include "fuzz.h"
#include "pd_tokenizer.h"

#ifndef PDIT_FUZZ_TE
#define PDIT_FUZZ_TE "tests/golden/text-encoders-tiny"
#endif

static struct pd_clip_tok clip;
static struct pd_t5_tok t5;

static void pd_fuzz_load(void)
{
	static int done;
	char a[1024], b[1024];
	const char *env = getenv("PDIT_FUZZ_TOKENIZERS");

	if (done)
		return;
	done = 1;
	if (env && strchr(env, ':')) {
		snprintf(a, sizeof(a), "%.*s", (int)(strchr(env, ':') - env), env);
		snprintf(b, sizeof(b), "%s", strchr(env, ':') + 1);
	} else {
		snprintf(a, sizeof(a), "%s/tokenizer", PDIT_FUZZ_TE);
		snprintf(b, sizeof(b), "%s/tokenizer_2", PDIT_FUZZ_TE);
	}
	if (pd_clip_tok_load(&clip, a) || pd_t5_tok_load(&t5, b)) {
		fprintf(stderr, "fuzz_prompt: cannot load the tokenizers from %s and %s\n", a, b);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = pd_fuzz_str(data, size);
	int32_t *ids = NULL;
	int64_t fit[512];
	size_t n;

	pd_fuzz_load();
	if (pd_clip_tok_encode(&clip, text, &ids, &n) == 0) {
		if (n < 2 || ids[0] != clip.bos || ids[n - 1] != clip.eos)
			abort();
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0)
				abort();
		pd_tok_fit(ids, n, clip.eos, clip.pad, fit, 77);
		if (fit[0] != clip.bos || (n >= 77 && fit[76] != clip.eos))
			abort();
		free(ids);
	}
	ids = NULL;
	if (pd_t5_tok_encode(&t5, text, &ids, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= t5.n_pieces)
				abort();
		free(ids);
	}
	free(text);
	return 0;
}
