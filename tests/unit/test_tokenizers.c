/*
 * test_tokenizers.c - both tokenizers against the golden prompts.
 *
 *   test_tokenizers GOLDEN_TE_DIR
 *
 * For every prompt of prompts.json (accents, CJK, emoji, zero-width and
 * no-break spaces, contractions, a truncated CLIP prompt, a truncated T5
 * prompt, the empty prompt ...): CLIP's untruncated ids and its 77 ids,
 * sentencepiece's ids and T5's ids at 32 (and 512 where recorded) must
 * equal transformers' exactly.
 */
#include "pd_test.h"
#include "pd_tokenizer.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <string.h>

static int ids_equal(const int32_t *a, size_t n, const cJSON *want)
{
	size_t i = 0;
	const cJSON *e;

	if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != n)
		return 0;
	cJSON_ArrayForEach(e, want)
		if (!cJSON_IsNumber(e) || (int32_t)e->valuedouble != a[i++])
			return 0;
	return 1;
}

static int ids64_equal(const int64_t *a, size_t n, const cJSON *want)
{
	size_t i = 0;
	const cJSON *e;

	if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != n)
		return 0;
	cJSON_ArrayForEach(e, want)
		if (!cJSON_IsNumber(e) || (int64_t)e->valuedouble != a[i++])
			return 0;
	return 1;
}

static void show(const char *what, const int32_t *ids, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n && i < 40; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/text-encoders-tiny";
	char *path = pd_strfmt("%s/prompts.json", dir), *text = NULL;
	char *tdir = pd_strfmt("%s/tokenizer", dir), *sdir = pd_strfmt("%s/tokenizer_2", dir);
	struct pd_clip_tok clip;
	struct pd_t5_tok t5;
	cJSON *root = NULL, *p;
	size_t len;
	int n_prompts = 0;

	if (pd_clip_tok_load(&clip, tdir) || pd_t5_tok_load(&t5, sdir) || pd_read_file(path, 16u << 20, &text, &len) ||
	    !(root = cJSON_Parse(text))) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(root, "prompts")) {
		const char *id = cJSON_GetObjectItemCaseSensitive(p, "id")->valuestring;
		const char *prompt = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(p, "clip"), *t = cJSON_GetObjectItemCaseSensitive(p, "t5");
		int32_t *ids = NULL;
		size_t n = 0;
		int64_t fit[512];

		n_prompts++;
		PD_CHECK(pd_clip_tok_encode(&clip, prompt, &ids, &n) == 0, "%s: CLIP: %s", id, pd_last_error());
		if (!ids_equal(ids, n, cJSON_GetObjectItemCaseSensitive(c, "ids"))) {
			PD_CHECK(0, "%s: CLIP ids differ", id);
			show("got", ids, n);
		}
		pd_tok_fit(ids, n, clip.eos, clip.pad, fit, clip.max_len);
		PD_CHECK(ids64_equal(fit, (size_t)clip.max_len, cJSON_GetObjectItemCaseSensitive(c, "ids_77")),
			 "%s: CLIP's 77 ids differ", id);
		free(ids);
		ids = NULL;
		PD_CHECK(pd_t5_tok_encode(&t5, prompt, &ids, &n) == 0, "%s: T5: %s", id, pd_last_error());
		if (!ids_equal(ids, n, cJSON_GetObjectItemCaseSensitive(t, "spm_ids"))) {
			char *norm = NULL;
			size_t nl;

			PD_CHECK(0, "%s: sentencepiece ids differ", id);
			show("got", ids, n);
			if (pd_t5_tok_normalize(&t5, prompt, &norm, &nl) == 0)
				fprintf(stderr, "  normalized: \"%s\"\n", norm);
			free(norm);
		}
		{
			int32_t *with_eos = malloc((n + 1) * sizeof(int32_t));

			memcpy(with_eos, ids, n * sizeof(int32_t));
			with_eos[n] = t5.eos;
			pd_tok_fit(with_eos, n + 1, t5.eos, t5.pad, fit, 32);
			PD_CHECK(ids64_equal(fit, 32, cJSON_GetObjectItemCaseSensitive(t, "ids_32")), "%s: T5's 32 ids differ",
				 id);
			if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(t, "ids_512"))) {
				pd_tok_fit(with_eos, n + 1, t5.eos, t5.pad, fit, 512);
				PD_CHECK(ids64_equal(fit, 512, cJSON_GetObjectItemCaseSensitive(t, "ids_512")),
					 "%s: T5's 512 ids differ", id);
			}
			free(with_eos);
		}
		free(ids);
	}
	PD_CHECK(n_prompts >= 30, "only %d prompts read", n_prompts);
	printf("%d prompts\n", n_prompts);
	cJSON_Delete(root);
	free(text);
	free(path);
	free(tdir);
	free(sdir);
	pd_clip_tok_free(&clip);
	pd_t5_tok_free(&t5);
	return pd_test_report();
}
