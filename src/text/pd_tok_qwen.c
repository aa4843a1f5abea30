/*
 * pd_tok_qwen.c - Qwen2's byte-level BPE tokenizer (transformers'
 * Qwen2Tokenizer, v4.43.4's tokenization_qwen2.py, as Qwen-Image's
 * pipeline calls it): the whole text NFC-normalised
 * (prepare_for_tokenization), split on the added tokens (<|im_start|>,
 * ...: matched whole, never broken up), each other piece cut by Qwen2's
 * pre-tokenizer pattern
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * and each match's bytes merged by rank (GPT-2's bpe, no word-end mark).
 * Nothing is added around the text: the pipeline's template holds the
 * special tokens.
 */
#include "pd_tokenizer.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* \s of the pattern (Python's regex module: Unicode's White_Space). */
static int pd_qwen_space(int32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int pd_qwen_letter(int32_t c)
{
	return pd_unicode_class(c) == PD_UCAT_LETTER;
}

static int pd_qwen_number(int32_t c)
{
	return pd_unicode_class(c) == PD_UCAT_NUMBER;
}

static int pd_qwen_crlf(int32_t c)
{
	return c == '\r' || c == '\n';
}

/* [^\s\p{L}\p{N}] */
static int pd_qwen_other(int32_t c)
{
	return !pd_qwen_space(c) && !pd_qwen_letter(c) && !pd_qwen_number(c);
}

/* The length of the pattern's match at P of C[0..n) (at least 1), the
 * alternatives tried in order as the regex engine tries them. */
static size_t pd_qwen_match(const int32_t *c, size_t n, size_t p)
{
	size_t k, e;

	/* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
	if (c[p] == '\'' && p + 1 < n) {
		int32_t a = c[p + 1] | 0x20, b = p + 2 < n ? c[p + 2] | 0x20 : 0;

		if (c[p + 1] < 0x80 && (a == 's' || a == 't' || a == 'm' || a == 'd'))
			return 2;
		if (c[p + 1] < 0x80 && p + 2 < n && c[p + 2] < 0x80 &&
		    ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')))
			return 3;
	}
	/* [^\r\n\p{L}\p{N}]?\p{L}+ : the optional character taken when
	 * letters follow it */
	k = p;
	if (!pd_qwen_crlf(c[p]) && !pd_qwen_letter(c[p]) && !pd_qwen_number(c[p]) && p + 1 < n &&
	    pd_qwen_letter(c[p + 1]))
		k = p + 1;
	if (pd_qwen_letter(c[k])) {
		while (k < n && pd_qwen_letter(c[k]))
			k++;
		return k - p;
	}
	/* \p{N} */
	if (pd_qwen_number(c[p]))
		return 1;
	/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
	k = p + (c[p] == ' ' && p + 1 < n && pd_qwen_other(c[p + 1]));
	if (pd_qwen_other(c[k])) {
		while (k < n && pd_qwen_other(c[k]))
			k++;
		while (k < n && pd_qwen_crlf(c[k]))
			k++;
		return k - p;
	}
	/* the whitespace run [p, e) */
	for (e = p; e < n && pd_qwen_space(c[e]); e++)
		;
	if (e == p)
		return 1;
	/* \s*[\r\n]+ : up to the run's last line break */
	for (k = e; k > p; k--)
		if (pd_qwen_crlf(c[k - 1]))
			return k - p;
	/* \s+(?!\S) : the run, less the space before a word */
	if (e == n || e - p == 1)
		return e - p;
	return e - p - 1;
}

/* One piece of text between added tokens (already NFC): its matches'
 * bytes through the merges. */
static int pd_qwen_piece(const void *ctx, const char *piece, struct pd_ids *ids)
{
	const struct pd_qwen_tok *t = ctx;
	size_t n = strlen(piece), nc = 0;
	int32_t *cp = pd_malloc((n + 1) * sizeof(int32_t), "tokenizing");
	char *w = pd_malloc(4 * n + 4, "tokenizing");
	int rc = -1;

	if (!cp || !w)
		goto out;
	for (size_t i = 0; i < n;) {
		int len = pd_utf8_decode(piece + i, n - i, &cp[nc++]);

		i += len > 0 ? (size_t)len : 1;
	}
	for (size_t p = 0; p < nc;) {
		size_t len = pd_qwen_match(cp, nc, p), wl = 0;

		for (size_t k = p; k < p + len; k++)
			wl += (size_t)pd_utf8_encode(cp[k], w + wl);
		if (pd_bpe_word(&t->bpe, w, wl, NULL, -1, ids))
			goto out;
		p += len;
	}
	rc = 0;
out:
	free(cp);
	free(w);
	return rc;
}

int pd_qwen_tok_encode(const struct pd_qwen_tok *t, const char *text, int32_t **ids_out, size_t *n_out)
{
	struct pd_ids ids = { 0 };
	char *nfc = pd_unicode_nfc(text, strlen(text));
	int rc = -1;

	*ids_out = NULL;
	*n_out = 0;
	if (!nfc || pd_added_encode(&t->added, nfc, pd_qwen_piece, t, &ids))
		goto out;
	for (size_t i = 0; i < ids.n; i++)
		if (ids.v[i] < 0) {
			/* a byte-level vocabulary holds every byte: this one does not */
			pd_errorf("the tokenizer's vocabulary lacks a symbol the text needs (its byte stand-ins)");
			goto out;
		}
	if (!ids.v && !(ids.v = pd_malloc(sizeof(int32_t), "tokenizing")))
		goto out;
	*ids_out = ids.v;
	*n_out = ids.n;
	ids.v = NULL;
	rc = 0;
out:
	free(ids.v);
	free(nfc);
	return rc;
}

/* The id of token string S (a plain string or {"content": ...}) in T's
 * vocabulary or added tokens, or -1. */
static int32_t pd_qwen_token_id(const struct pd_qwen_tok *t, const cJSON *j)
{
	const char *s = cJSON_IsString(j) ? j->valuestring : NULL;
	int32_t id;

	if (cJSON_IsObject(j) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "content")))
		s = cJSON_GetObjectItemCaseSensitive(j, "content")->valuestring;
	if (!s)
		return -1;
	for (int i = 0; i < t->added.n; i++)
		if (!strcmp(t->added.tok[i].text, s))
			return t->added.tok[i].id;
	return pd_strmap_get(&t->bpe.vocab, s, strlen(s), &id) ? id : -1;
}

/* tokenizer.json (the fast tokenizer's one file): model.vocab,
 * model.merges ("a b" strings or [a, b] pairs), added_tokens. */
static int pd_qwen_tokenizer_json(struct pd_qwen_tok *t, const char *path)
{
	char *text = NULL;
	size_t len;
	cJSON *root = NULL, *model, *merges, *added, *e;
	int rc = -1;

	if (pd_read_file(path, 256u << 20, &text, &len))
		return -1;
	root = cJSON_ParseWithLength(text, len);
	model = cJSON_GetObjectItemCaseSensitive(root, "model");
	merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	if (!cJSON_IsObject(model) || !cJSON_IsArray(merges)) {
		pd_errorf("%s: no BPE model (model.vocab, model.merges)", path);
		goto out;
	}
	if (pd_bpe_vocab_json(&t->bpe, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path))
		goto out;
	cJSON_ArrayForEach(e, merges) {
		char pair[1024];
		int n = -1;

		if (cJSON_IsString(e))
			n = snprintf(pair, sizeof(pair), "%s", e->valuestring);
		else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
			 cJSON_IsString(e->child->next))
			n = snprintf(pair, sizeof(pair), "%s %s", e->child->valuestring, e->child->next->valuestring);
		if (n < 0 || (size_t)n >= sizeof(pair)) {
			pd_errorf("%s: merge %zu is not two symbols", path, t->bpe.n_merges + 1);
			goto out;
		}
		if (pd_bpe_merge_line(&t->bpe, pair, (size_t)n, path))
			goto out;
	}
	if (!t->bpe.ranks.cap && pd_strmap_init(&t->bpe.ranks, 16))
		goto out;
	if (added && !cJSON_IsArray(added)) {
		pd_errorf("%s: added_tokens is not a list", path);
		goto out;
	}
	t->added.tok = pd_calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof(*t->added.tok), "the added tokens");
	if (!t->added.tok)
		goto out;
	cJSON_ArrayForEach(e, added) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content"), *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		struct pd_added_token *a = &t->added.tok[t->added.n];

		if (!cJSON_IsString(c) || !c->valuestring[0] || !cJSON_IsNumber(id) || id->valuedouble < 0 ||
		    id->valuedouble > 2e9) {
			pd_errorf("%s: added token %d has no content or id", path, t->added.n);
			goto out;
		}
		if (!(a->text = pd_strdup(c->valuestring)))
			goto out;
		a->len = strlen(a->text);
		a->id = (int32_t)id->valuedouble;
		a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "lstrip"));
		a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "rstrip"));
		t->added.n++;
	}
	rc = 0;
out:
	cJSON_Delete(root);
	free(text);
	return rc;
}

int pd_qwen_tok_load(struct pd_qwen_tok *t, const char *dir)
{
	char *vpath = pd_strfmt("%s/vocab.json", dir), *mpath = pd_strfmt("%s/merges.txt", dir);
	char *jpath = pd_strfmt("%s/tokenizer.json", dir), *cpath = pd_strfmt("%s/tokenizer_config.json", dir);
	char *text = NULL;
	cJSON *j = NULL;
	size_t len;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	pd_bpe_init(&t->bpe);
	t->pad = -1;
	if (!vpath || !mpath || !jpath || !cpath)
		goto out;
	if (pd_file_exists(vpath)) {
		if (pd_read_file(vpath, 64u << 20, &text, &len))
			goto out;
		j = cJSON_ParseWithLength(text, len);
		if (pd_bpe_vocab_json(&t->bpe, j, vpath) || pd_bpe_merges_txt(&t->bpe, mpath, 0) ||
		    pd_added_tokens_load(&t->added, dir))
			goto out;
	} else if (pd_file_exists(jpath)) {
		if (pd_qwen_tokenizer_json(t, jpath))
			goto out;
	} else {
		pd_errorf("%s: no tokenizer (vocab.json and merges.txt, or tokenizer.json)", dir);
		goto out;
	}
	cJSON_Delete(j);
	j = NULL;
	free(text);
	text = NULL;
	/* the pad token, when the folder names one */
	if (pd_file_exists(cpath)) {
		if (pd_read_file(cpath, 64u << 20, &text, &len))
			goto out;
		if (!(j = cJSON_ParseWithLength(text, len))) {
			pd_errorf("%s: not JSON", cpath);
			goto out;
		}
		t->pad = pd_qwen_token_id(t, cJSON_GetObjectItemCaseSensitive(j, "pad_token"));
	}
	rc = 0;
out:
	cJSON_Delete(j);
	free(text);
	free(vpath);
	free(mpath);
	free(jpath);
	free(cpath);
	if (rc)
		pd_qwen_tok_free(t);
	return rc;
}

void pd_qwen_tok_free(struct pd_qwen_tok *t)
{
	pd_bpe_free(&t->bpe);
	pd_added_tokens_free(&t->added);
}
