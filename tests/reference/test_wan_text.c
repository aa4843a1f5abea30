/*
 * test_wan_text.c - Wan2.1's prompt path against WanPipeline's files.
 *
 *   test_wan_text WAN_TINY_DIR [f32|bf16]
 *
 * prompts.json: prompt_clean's text and the full ids (byte fallback, the
 * added tokens </s> and <extra_id_0> in the text, a 1254-token prompt)
 * equal transformers' exactly; text/pNN.safetensors: the ids and masks
 * at 512 and 64 exactly, and the embeddings encode_prompt returns within
 * 1e-5 of the reference, max|a - b| / max|ref| (2e-2 with bf16
 * products), the zero rows exactly zero; text-detail-p01: the relative
 * bucket of every offset up to 511. html.unescape's corner cases against
 * the values Python 3.11 gives.
 */
#include "pd_backend_cpu.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_text_clean.h"
#include "pd_util.h"
#include "pd_wan_prompt.h"

#include <cjson/cJSON.h>
#include <string.h>

static double tol = 1e-5, worst;

static void unescape_cases(void)
{
	/* inputs and what Python 3.11's html.unescape returns */
	static const char *const cases[][2] = {
		{ "&amp;amp;", "&amp;" },
		{ "&#8212;&#x41;&#X42", "\xe2\x80\x94" "AB" },
		{ "&#128;&#0;&#1;&#xD800;&#99999999999;", "\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "&notit; &not &noti; &ampx &lt3 &eacute", "\xc2\xacit; \xc2\xac \xc2\xaci; &x <3 \xc3\xa9" },
		{ "&;&#;&#x;&", "&;&#;&#x;&" },
		{ "caf&eacute; &AElig; &Aacute", "caf\xc3\xa9 \xc3\x86 \xc3\x81" },
		{ "&unknownentity; &zz", "&unknownentity; &zz" },
		{ "&#65&#66;x", "ABx" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *out = NULL;

		PD_CHECK(pd_html_unescape(cases[i][0], &out) == 0 && strcmp(out, cases[i][1]) == 0,
			 "html.unescape(\"%s\") gave \"%s\", not \"%s\"", cases[i][0], out ? out : "(null)", cases[i][1]);
		free(out);
	}
}

static int ids_equal(const int64_t *a, size_t n, const int64_t *b, size_t m)
{
	return n == m && memcmp(a, b, n * sizeof(int64_t)) == 0;
}

static const int64_t *i64(const struct pd_st *st, const char *name, size_t *n)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);

	if (!t || t->dtype != PD_I64)
		return NULL;
	*n = (size_t)t->numel;
	return (const int64_t *)t->data;
}

/* One text/pNN.safetensors at max length LEN. */
static void one_length(struct pd_wan_prompt_encoder *pe, const struct pd_st *st, const char *raw, int len)
{
	char name[64];
	size_t n_ids = 0, n_mask = 0;
	const int64_t *ids_ref, *mask_ref;
	const struct pd_st_tensor *t;
	int64_t E = pd_t5_get_config(pe->umt5)->d_model;
	int64_t *ids = malloc((size_t)len * sizeof(int64_t)), *mask = malloc((size_t)len * sizeof(int64_t));
	float *emb = malloc((size_t)(len * E) * sizeof(float)), *ref = malloc((size_t)(len * E) * sizeof(float));

	for (int i = 0; i < len * E; i++)
		emb[i] = NAN; /* poisoned: every value must be written */
	snprintf(name, sizeof(name), "input_ids.%d", len);
	ids_ref = i64(st, name, &n_ids);
	snprintf(name, sizeof(name), "attention_mask.%d", len);
	mask_ref = i64(st, name, &n_mask);
	PD_CHECK(pd_wan_prompt_encode(pe, raw, len, emb, ids, mask) == 0, "%s: %s", st->path, pd_last_error());
	PD_CHECK(ids_ref && ids_equal(ids, (size_t)len, ids_ref, n_ids), "%s: the ids at %d differ", st->path, len);
	PD_CHECK(mask_ref && ids_equal(mask, (size_t)len, mask_ref, n_mask), "%s: the mask at %d differs", st->path, len);
	snprintf(name, sizeof(name), "prompt_embeds.%d", len);
	t = pd_st_get(st, name);
	PD_CHECK(t && t->numel == len * E, "%s: no %s", st->path, name);
	if (t && t->numel == len * E) {
		double e;
		int zeros = 1;

		pd_st_read_f32(t, 0, (size_t)t->numel, ref);
		e = pd_rel_err(emb, ref, (size_t)t->numel);
		worst = e > worst ? e : worst;
		PD_CHECK(e <= tol, "%s: %s differs by %.3g (limit %g)", st->path, name, e, tol);
		for (int64_t i = 0; i < len * E; i++)
			if (ref[i] == 0 && emb[i] != 0 && i / E >= 1)
				zeros = 0;
		PD_CHECK(zeros, "%s: %s: the padding rows are not zero", st->path, name);
	}
	free(ids);
	free(mask);
	free(emb);
	free(ref);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/wan-tiny";
	int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0, n_prompts = 0;
	char *tok = pd_strfmt("%s/model/tokenizer", dir), *te = pd_strfmt("%s/model/text_encoder", dir);
	char *pj = pd_strfmt("%s/prompts.json", dir), *text = NULL;
	struct pd_model_paths mp = { .tokenizer = { tok }, .encoder = { te } };
	struct pd_wan_prompt_encoder pe;
	struct pd_backend *be;
	cJSON *root = NULL, *p;
	size_t len;

	if (bf16)
		tol = 2e-2;
	unescape_cases();
	if (pd_test_backend_new(&be, bf16 ? PD_BF16 : PD_F32, 0) || pd_wan_prompt_encoder_load(&pe, &mp, be) ||
	    pd_read_file(pj, 16u << 20, &text, &len) || !(root = cJSON_Parse(text))) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(root, "prompts")) {
		const char *id = cJSON_GetObjectItemCaseSensitive(p, "id")->valuestring;
		const char *raw = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
		const char *want = cJSON_GetObjectItemCaseSensitive(p, "cleaned")->valuestring;
		const cJSON *want_ids = cJSON_GetObjectItemCaseSensitive(p, "ids"), *e;
		size_t n = (size_t)cJSON_GetArraySize(want_ids), full = 0, i = 0;
		int64_t *ids = malloc((n + 2) * sizeof(int64_t)), *mask = malloc((n + 2) * sizeof(int64_t));
		char *clean = NULL, *path = pd_strfmt("%s/text/%s.safetensors", dir, id);
		struct pd_st *st = NULL;
		int seq = 0, same = 1;

		n_prompts++;
		PD_CHECK(pd_wan_prompt_clean(raw, &clean) == 0 && strcmp(clean, want) == 0,
			 "%s: prompt_clean gave \"%s\"", id, clean ? clean : "(null)");
		/* untruncated: room for every id */
		PD_CHECK(pd_wan_prompt_ids(&pe.tok, &pe.added, clean, (int)n + 1, ids, mask, &seq, &full) == 0, "%s: %s",
			 id, pd_last_error());
		cJSON_ArrayForEach(e, want_ids)
			same &= i < (size_t)seq && ids[i++] == (int64_t)e->valuedouble;
		PD_CHECK(same && (size_t)seq == n && full == n, "%s: the ids differ (%d of %zu)", id, seq, n);
		if (pd_st_open(&st, path)) {
			PD_CHECK(0, "%s", pd_last_error());
		} else {
			one_length(&pe, st, raw, 512);
			one_length(&pe, st, raw, 64);
			pd_st_close(st);
		}
		free(clean);
		free(ids);
		free(mask);
		free(path);
	}
	PD_CHECK(n_prompts == 9, "%d prompts read", n_prompts);
	{
		/* every relative bucket an offset up to 511 falls in */
		char *path = pd_strfmt("%s/text-detail-p01.safetensors", dir);
		struct pd_st *st = NULL;
		size_t n = 0;
		const int64_t *b;
		int same = 1;

		PD_CHECK(pd_st_open(&st, path) == 0, "%s", pd_last_error());
		b = st ? i64(st, "umt5.rel_bucket_by_offset.512", &n) : NULL;
		PD_CHECK(b && n == 1023, "no umt5.rel_bucket_by_offset.512");
		for (size_t i = 0; b && i < n; i++) {
			int64_t v;

			memcpy(&v, b + i, sizeof(v)); /* the file need not align it */
			same &= pd_t5_bucket((int)i - 511, 32, 128) == v;
		}
		PD_CHECK(same, "relative buckets differ");
		pd_st_close(st);
		free(path);
	}
	printf("%d prompts, %s, worst max|diff|/max|ref| %.2e (limit %g)\n", n_prompts, bf16 ? "bf16" : "f32", worst, tol);
	cJSON_Delete(root);
	free(text);
	free(pj);
	free(tok);
	free(te);
	pd_wan_prompt_encoder_free(&pe);
	pd_backend_free(be);
	return pd_test_report();
}
