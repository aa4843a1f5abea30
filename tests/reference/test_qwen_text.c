/*
 * test_qwen_text.c - Qwen-Image's prompt side against transformers
 * (tests/golden/qwen-tiny's text cases): the pipeline's template around
 * each prompt (ASCII, quotes and digits, accents and a dash, CJK with a
 * line break and a tab) tokenized by Qwen2's tokenizer, the ids exact; the
 * same from a tokenizer.json written here from the folder's files; the
 * language model (Qwen2.5-VL's, pd_llm) on those ids: last_hidden_state
 * and prompt_embeds (the first 34 rows dropped, as the pipeline does)
 * within 1e-4, in f32 products (and on the backend PDIT_TEST_BACKEND
 * names).
 *
 *   test_qwen_text QWEN_GOLDEN_DIR
 */
#include "pd_llm.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_tokenizer.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The template with its "{}" replaced by PROMPT (malloc'd). */
static char *fill_template(const char *tmpl, const char *prompt)
{
	const char *at = strstr(tmpl, "{}");

	if (!at)
		return NULL;
	return pd_strfmt("%.*s%s%s", (int)(at - tmpl), tmpl, prompt, at + 2);
}

/* IDS (N) against the case's input_ids. */
static void check_ids(const char *what, const struct pd_st *st, const int32_t *ids, size_t n)
{
	const struct pd_st_tensor *t = pd_st_get(st, "input_ids");
	const int64_t *want = t && t->dtype == PD_I64 ? (const int64_t *)t->data : NULL;
	size_t bad = n;

	PD_CHECK(want != NULL, "%s: no int64 input_ids", what);
	if (!want)
		return;
	if ((size_t)t->numel == n)
		for (bad = 0; bad < n && want[bad] == ids[bad]; bad++)
			;
	PD_CHECK((size_t)t->numel == n && bad == n, "%s: %zu ids, transformers' %lld; first difference at %zu (%d, not %lld)",
		 what, n, (long long)t->numel, bad, bad < n ? ids[bad] : -1,
		 bad < (size_t)t->numel ? (long long)want[bad] : -1LL);
}

/* OUT (N rows of D) against the case's tensor NAME from row FIRST, as a
 * relative error within 1e-4. */
static void check_rows(const char *what, const struct pd_st *st, const char *name, const float *out, int64_t n,
		       int64_t first, int64_t d)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	float *want = t ? malloc((size_t)t->numel * sizeof(float)) : NULL;
	double e = 1;

	if (want && t->numel == (n - first) * d && !pd_st_read_f32(t, 0, (size_t)t->numel, want))
		e = pd_rel_err(out + first * d, want, (size_t)t->numel);
	printf("  %s: %s %.2e\n", what, name, e);
	PD_CHECK(e <= 1e-4, "%s: %s differs from transformers' by %.3g", what, name, e);
	free(want);
}

/* A tokenizer.json of the folder DIR's vocabulary, merges (as [a, b]
 * pairs, the newer format) and added tokens, into OUT_DIR. */
static int write_tokenizer_json(const char *dir, const char *out_dir)
{
	char *vpath = pd_strfmt("%s/vocab.json", dir), *mpath = pd_strfmt("%s/merges.txt", dir);
	char *cpath = pd_strfmt("%s/tokenizer_config.json", dir), *opath = pd_strfmt("%s/tokenizer.json", out_dir);
	char *vt = NULL, *mt = NULL, *ct = NULL, *line, *save = NULL, *out = NULL;
	size_t len;
	cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model"), *merges, *added, *cfg = NULL;
	const cJSON *e;
	int rc = -1;
	FILE *f;

	if (pd_read_file(vpath, 1 << 24, &vt, &len) || pd_read_file(mpath, 1 << 24, &mt, &len) ||
	    pd_read_file(cpath, 1 << 24, &ct, &len) || !(cfg = cJSON_Parse(ct)))
		goto out;
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddItemToObject(model, "vocab", cJSON_Parse(vt));
	merges = cJSON_AddArrayToObject(model, "merges");
	for (line = strtok_r(mt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strchr(line, ' ');
		cJSON *pair;

		if (!strncmp(line, "#version", 8) || !sp)
			continue;
		*sp = 0;
		pair = cJSON_CreateArray();
		cJSON_AddItemToArray(pair, cJSON_CreateString(line));
		cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
		cJSON_AddItemToArray(merges, pair);
	}
	added = cJSON_AddArrayToObject(root, "added_tokens");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder")) {
		cJSON *a = cJSON_CreateObject();

		cJSON_AddNumberToObject(a, "id", atoi(e->string));
		cJSON_AddStringToObject(a, "content", cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring);
		cJSON_AddBoolToObject(a, "special", 1);
		cJSON_AddItemToArray(added, a);
	}
	out = cJSON_PrintUnformatted(root);
	f = out ? fopen(opath, "wb") : NULL;
	rc = !f || fputs(out, f) < 0;
	if (f && fclose(f))
		rc = -1;
out:
	cJSON_Delete(root);
	cJSON_Delete(cfg);
	free(vt);
	free(mt);
	free(ct);
	free(out);
	free(vpath);
	free(mpath);
	free(cpath);
	free(opath);
	return rc;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/qwen-tiny";
	char *tdir = pd_strfmt("%s/model/tokenizer", dir), jdir[] = "/tmp/pdit-qwen-tok-XXXXXX";
	char *edir = pd_strfmt("%s/model/text_encoder", dir);
	struct pd_backend *be = NULL;
	struct pd_llm *llm = NULL;
	struct pd_qwen_tok tok, jtok;
	int have_json;

	PD_CHECK(pd_qwen_tok_load(&tok, tdir) == 0, "the tokenizer: %s", pd_last_error());
	have_json = mkdtemp(jdir) && write_tokenizer_json(tdir, jdir) == 0 && pd_qwen_tok_load(&jtok, jdir) == 0;
	PD_CHECK(have_json, "a tokenizer.json of the same: %s", pd_last_error());
	PD_CHECK(tok.pad >= 0, "no pad token read (<|endoftext|>)");
	PD_CHECK(pd_test_backend_new(&be, PD_F32, 2) == 0, "backend: %s", pd_last_error());
	pd_backend_enter(be);
	PD_CHECK(pd_llm_load(&llm, edir, be) == 0, "the language model: %s", pd_last_error());
	for (int k = 0; k < 4; k++) {
		char *path = pd_strfmt("%s/text-%d.safetensors", dir, k), *text = NULL;
		struct pd_st *st = NULL;
		int32_t *ids = NULL;
		size_t n = 0;

		if (pd_st_open(&st, path)) {
			PD_CHECK(0, "%s", pd_last_error());
			free(path);
			continue;
		}
		text = fill_template(pd_st_meta(st, "template"), pd_st_meta(st, "prompt"));
		PD_CHECK(text != NULL, "%s: no template with {} or no prompt", path);
		if (text && pd_qwen_tok_encode(&tok, text, &ids, &n) == 0) {
			int64_t D = llm ? pd_llm_get_config(llm)->hidden : 0, drop = atoi(pd_st_meta(st, "drop_idx"));
			int64_t *ids64 = malloc(n * sizeof(int64_t) + 1);
			float *out = malloc((size_t)(n * (size_t)D + 1) * sizeof(float));

			check_ids(path, st, ids, n);
			for (size_t i = 0; ids64 && i < n; i++)
				ids64[i] = ids[i];
			if (llm && ids64 && out && pd_llm_forward(llm, ids64, (int)n, out, NULL) == 0) {
				check_rows(path, st, "last_hidden_state", out, (int64_t)n, 0, D);
				check_rows(path, st, "prompt_embeds", out, (int64_t)n, drop, D);
			} else {
				PD_CHECK(0, "%s: the language model: %s", path, pd_last_error());
			}
			free(ids64);
			free(out);
		} else {
			PD_CHECK(0, "%s: %s", path, pd_last_error());
		}
		free(ids);
		ids = NULL;
		if (text && have_json && pd_qwen_tok_encode(&jtok, text, &ids, &n) == 0)
			check_ids("tokenizer.json", st, ids, n);
		free(ids);
		printf("  %s: %zu ids as transformers'\n", path, n);
		free(text);
		pd_st_close(st);
		free(path);
	}
	pd_llm_free(llm);
	pd_backend_free(be);
	free(edir);
	pd_qwen_tok_free(&tok);
	if (have_json)
		pd_qwen_tok_free(&jtok);
	free(tdir);
	if (jdir[strlen(jdir) - 1] != 'X') {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", jdir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", jdir);
	}
	return pd_test_report();
}
