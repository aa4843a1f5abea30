/*
 * test_text_golden.c - the CLIP text model and the T5 encoder against
 * transformers' outputs, prompt by prompt.
 *
 *   test_text_golden GOLDEN_TE_DIR [f32|bf16]
 *
 * For every cases/pNN.safetensors: the prompt's ids through both
 * tokenizers equal the recorded ones; then CLIP's hidden states after the
 * embeddings and each layer, its last hidden state and pooled output (and
 * the pooled row), and T5's embeddings, block outputs and last hidden state
 * at 32 tokens (and 512 where recorded) are within 1e-5 of the reference,
 * max|a - b| / max|ref| (2e-2 with bf16 products). detail-p01: the position
 * bias and the relative buckets for every offset up to 511.
 */
#include "pd_backend_cpu.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_clip.h"
#include "pd_t5.h"
#include "pd_tokenizer.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <string.h>

static double tol = 1e-5, worst;

static void compare(const char *file, struct pd_test_store *s, const char *mine, const struct pd_st *st, const char *ref)
{
	const struct pd_st_tensor *t = pd_st_get(st, ref);
	float *r;
	double e;

	for (int i = 0; i < s->n; i++) {
		if (strcmp(s->name[i], mine) != 0)
			continue;
		PD_CHECK(t && t->numel == s->count[i], "%s: %s: no reference of %lld values", file, ref,
			 (long long)s->count[i]);
		if (!t || t->numel != s->count[i])
			return;
		r = malloc((size_t)t->numel * sizeof(float));
		pd_st_read_f32(t, 0, (size_t)t->numel, r);
		e = pd_rel_err(s->data[i], r, (size_t)t->numel);
		worst = e > worst ? e : worst;
		PD_CHECK(e <= tol, "%s: %s differs by %.3g (limit %g)", file, ref, e, tol);
		free(r);
		return;
	}
	PD_CHECK(0, "%s: the model gave no %s", file, mine);
}

static int64_t *ids_of(const struct pd_st *st, const char *name, int *n)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	int64_t *v;

	if (!t || t->dtype != PD_I64)
		return NULL;
	v = malloc((size_t)t->numel * sizeof(int64_t));
	memcpy(v, t->data, (size_t)t->numel * sizeof(int64_t));
	*n = (int)t->numel;
	return v;
}

static void one_case(const char *path, struct pd_clip *clip, struct pd_t5 *t5, const struct pd_clip_tok *ctok,
		     const struct pd_t5_tok *ttok)
{
	struct pd_st *st;
	struct pd_test_store s = { 0 };
	struct pd_dump dump = { pd_test_store_fn, &s, 0 };
	const char *file = strrchr(path, '/') + 1;
	cJSON *prompt;
	int n;
	int64_t *ids;

	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s", pd_last_error());
		return;
	}
	prompt = cJSON_Parse(pd_st_meta(st, "prompt"));
	/* CLIP */
	ids = ids_of(st, "clip.input_ids", &n);
	PD_CHECK(ids != NULL && cJSON_IsString(prompt), "%s: no clip.input_ids or prompt", file);
	if (ids && cJSON_IsString(prompt)) {
		int32_t *tok;
		size_t nt;
		int64_t fit[77];

		pd_clip_tok_encode(ctok, prompt->valuestring, &tok, &nt);
		pd_tok_fit(tok, nt, ctok->eos, ctok->pad, fit, 77);
		PD_CHECK(n == 77 && memcmp(fit, ids, sizeof(fit)) == 0, "%s: CLIP ids differ", file);
		free(tok);
		PD_CHECK(pd_clip_forward(clip, ids, n, NULL, NULL, &dump) == 0, "%s: %s", file, pd_last_error());
		for (int l = 0; l <= pd_clip_get_config(clip)->layers; l++) {
			char name[64];

			snprintf(name, sizeof(name), "clip.hidden_states.%d", l);
			compare(file, &s, name, st, name);
		}
		compare(file, &s, "clip.last_hidden_state", st, "clip.last_hidden_state");
		compare(file, &s, "clip.pooler_output", st, "clip.pooler_output");
		{
			int ne = 0;
			int64_t *eos = ids_of(st, "clip.eos_index", &ne);

			for (int i = 0; i < s.n; i++)
				if (strcmp(s.name[i], "clip.eos_index") == 0)
					PD_CHECK(eos && ne == 1 && (int64_t)s.data[i][0] == eos[0], "%s: pooled row %g, not %lld",
						 file, s.data[i][0], eos ? (long long)eos[0] : -1LL);
			free(eos);
		}
		pd_test_store_clear(&s);
		free(ids);
	}
	/* T5 at each recorded length */
	for (int L = 32; L <= 512; L *= 16) {
		char key[64], mine[64], ref[64];

		snprintf(key, sizeof(key), "t5.input_ids.%d", L);
		ids = ids_of(st, key, &n);
		if (!ids)
			continue;
		if (cJSON_IsString(prompt)) {
			int32_t *tok, *with;
			size_t nt;
			int64_t *fit = malloc((size_t)L * sizeof(int64_t));

			pd_t5_tok_encode(ttok, prompt->valuestring, &tok, &nt);
			with = malloc((nt + 1) * sizeof(int32_t));
			memcpy(with, tok, nt * sizeof(int32_t));
			with[nt] = ttok->eos;
			pd_tok_fit(with, nt + 1, ttok->eos, ttok->pad, fit, L);
			PD_CHECK(n == L && memcmp(fit, ids, (size_t)L * sizeof(int64_t)) == 0, "%s: %s differ", file, key);
			free(tok);
			free(with);
			free(fit);
		}
		{
			float *out = malloc((size_t)n * pd_t5_get_config(t5)->d_model * sizeof(float));

			PD_CHECK(pd_t5_forward(t5, ids, n, out, &dump) == 0, "%s: %s", file, pd_last_error());
			free(out);
		}
		snprintf(ref, sizeof(ref), "t5.embeddings.%d", L);
		if (pd_st_get(st, ref))
			compare(file, &s, "t5.embeddings", st, ref);
		for (int b = 0; b < pd_t5_get_config(t5)->layers; b++) {
			snprintf(mine, sizeof(mine), "t5.block.%d", b);
			snprintf(ref, sizeof(ref), "t5.block.%d.%d", b, L);
			if (pd_st_get(st, ref))
				compare(file, &s, mine, st, ref);
		}
		snprintf(ref, sizeof(ref), "t5.last_hidden_state.%d", L);
		compare(file, &s, "t5.last_hidden_state", st, ref);
		if (pd_st_get(st, "t5.detail.position_bias") && L == 32)
			compare(file, &s, "t5.position_bias", st, "t5.detail.position_bias");
		pd_test_store_clear(&s);
		free(ids);
	}
	/* every relative offset's bucket */
	for (int L = 32; L <= 512; L *= 16) {
		char key[64];
		const struct pd_st_tensor *t;

		snprintf(key, sizeof(key), "t5.rel_bucket_by_offset.%d", L);
		t = pd_st_get(st, key);
		if (!t)
			continue;
		for (int64_t i = 0; i < t->numel; i++) {
			int64_t want;

			memcpy(&want, t->data + i * 8, 8);
			if (pd_t5_bucket((int)(i - (L - 1)), pd_t5_get_config(t5)->buckets,
					 pd_t5_get_config(t5)->max_distance) != want) {
				PD_CHECK(0, "%s: bucket of offset %lld", file, (long long)(i - (L - 1)));
				break;
			}
		}
	}
	cJSON_Delete(prompt);
	pd_st_close(st);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/text-encoders-tiny";
	int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0, files = 0;
	char path[1024];
	struct pd_backend *be;
	struct pd_clip *clip;
	struct pd_t5 *t5;
	struct pd_clip_tok ctok;
	struct pd_t5_tok ttok;
	struct dirent **list;
	int nl;

	if (bf16)
		tol = 2e-2;
	if (pd_test_backend_new(&be, bf16 ? PD_BF16 : PD_F32, 0)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/text_encoder", dir);
	if (pd_clip_load(&clip, path, be)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/text_encoder_2", dir);
	if (pd_t5_load(&t5, path, be)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/tokenizer", dir);
	if (pd_clip_tok_load(&ctok, path)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/tokenizer_2", dir);
	if (pd_t5_tok_load(&ttok, path)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/cases", dir);
	nl = scandir(path, &list, NULL, alphasort);
	for (int i = 0; i < nl; i++) {
		if (strstr(list[i]->d_name, ".safetensors")) {
			snprintf(path, sizeof(path), "%s/cases/%s", dir, list[i]->d_name);
			one_case(path, clip, t5, &ctok, &ttok);
			files++;
		}
		free(list[i]);
	}
	free(list);
	snprintf(path, sizeof(path), "%s/detail-p01.safetensors", dir);
	one_case(path, clip, t5, &ctok, &ttok);
	PD_CHECK(files >= 30, "only %d case files", files);
	printf("%d case files + detail, %s, worst max|diff|/max|ref| %.2e (limit %g)\n", files, bf16 ? "bf16" : "f32",
	       worst, tol);
	pd_clip_free(clip);
	pd_t5_free(t5);
	pd_clip_tok_free(&ctok);
	pd_t5_tok_free(&ttok);
	pd_backend_free(be);
	return pd_test_report();
}
