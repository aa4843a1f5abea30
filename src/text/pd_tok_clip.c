/*
 * pd_tok_clip.c - CLIP's byte-level BPE tokenizer (transformers'
 * CLIPTokenizer without ftfy; line numbers refer to its v4.43.4
 * tokenization_clip.py).
 */
#include "pd_tokenizer.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* transformers reads merges.txt lines 1 .. 49152 - 256 - 2 (313): the
 * merges CLIP was trained with, whatever else the file holds */
#define PD_CLIP_MAX_MERGES (49152 - 256 - 2)

/* A token string of the special-tokens files: a plain string or {"content": ...}. */
static const char *pd_clip_token_text(const cJSON *j)
{
	if (cJSON_IsString(j))
		return j->valuestring;
	if (cJSON_IsObject(j)) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");

		return cJSON_IsString(c) ? c->valuestring : NULL;
	}
	return NULL;
}

static int pd_clip_special(const struct pd_clip_tok *t, const cJSON *cfg, const char *key, int32_t *id,
			   const char *path)
{
	const char *s = pd_clip_token_text(cJSON_GetObjectItemCaseSensitive(cfg, key));

	if (!s)
		return 0;
	if (!pd_strmap_get(&t->bpe.vocab, s, strlen(s), id))
		return pd_errorf("%s: %s \"%s\" is not in vocab.json", path, key, s);
	return 0;
}

static int pd_clip_read_config(struct pd_clip_tok *t, const char *dir)
{
	const char *files[2] = { "special_tokens_map.json", "tokenizer_config.json" };
	int rc = 0;

	for (int f = 0; f < 2 && !rc; f++) {
		char *path = pd_strfmt("%s/%s", dir, files[f]), *text = NULL;
		cJSON *j = NULL;
		size_t len;

		if (!path)
			return -1;
		if (pd_file_exists(path)) {
			if (pd_read_file(path, 1 << 20, &text, &len) || !(j = cJSON_Parse(text))) {
				rc = text ? pd_errorf("%s: not valid JSON", path) : -1;
			} else {
				const cJSON *ml = cJSON_GetObjectItemCaseSensitive(j, "model_max_length");

				rc = pd_clip_special(t, j, "bos_token", &t->bos, path) ||
				     pd_clip_special(t, j, "eos_token", &t->eos, path) ||
				     pd_clip_special(t, j, "pad_token", &t->pad, path);
				if (!rc && cJSON_IsNumber(ml) && ml->valuedouble >= 2 && ml->valuedouble <= 1e6)
					t->max_len = (int)ml->valuedouble;
			}
		}
		cJSON_Delete(j);
		free(text);
		free(path);
	}
	return rc;
}

int pd_clip_tok_load(struct pd_clip_tok *t, const char *dir)
{
	char *vpath = pd_strfmt("%s/vocab.json", dir), *mpath = pd_strfmt("%s/merges.txt", dir);
	char *text = NULL;
	cJSON *vocab = NULL;
	size_t len;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	pd_bpe_init(&t->bpe);
	t->max_len = 77;
	if (!vpath || !mpath)
		goto out;
	if (pd_read_file(vpath, 64u << 20, &text, &len))
		goto out;
	vocab = cJSON_Parse(text);
	if (pd_bpe_vocab_json(&t->bpe, vocab, vpath))
		goto out;
	if (!pd_strmap_get(&t->bpe.vocab, "<|startoftext|>", 15, &t->bos) ||
	    !pd_strmap_get(&t->bpe.vocab, "<|endoftext|>", 13, &t->eos)) {
		pd_errorf("%s: no <|startoftext|> or <|endoftext|> token", vpath);
		goto out;
	}
	t->pad = t->eos;
	if (pd_bpe_merges_txt(&t->bpe, mpath, PD_CLIP_MAX_MERGES))
		goto out;
	rc = pd_clip_read_config(t, dir);
out:
	cJSON_Delete(vocab);
	free(text);
	free(vpath);
	free(mpath);
	if (rc)
		pd_clip_tok_free(t);
	return rc;
}

void pd_clip_tok_free(struct pd_clip_tok *t)
{
	pd_bpe_free(&t->bpe);
}

/* A growable list of code points. */
struct pd_cps {
	int32_t *v;
	size_t n, cap;
};

static int pd_cps_push(struct pd_cps *c, int32_t cp)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		int32_t *nv = realloc(c->v, cap * sizeof(int32_t));

		if (!nv)
			return pd_errorf("out of memory tokenizing");
		c->v = nv;
		c->cap = cap;
	}
	c->v[c->n++] = cp;
	return 0;
}

static int pd_clip_is_cjk(int32_t c)
{
	return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
	       (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* BasicTokenizer (93-263) as CLIPTokenizer sets it up: _clean_text,
 * _tokenize_chinese_chars, NFC, whitespace split, lower-case each word, join
 * with single spaces. */
static int pd_clip_clean(const char *text, struct pd_cps *out)
{
	size_t n = strlen(text), u8n = 0;
	/* an input character of k bytes becomes at most 3k (a CJK ideograph
	 * and two spaces) */
	char *u8 = pd_malloc(n * 3 + 8, "tokenizing"), *nfc = NULL;
	struct pd_cps word = { 0 };
	int rc = -1;

	if (!u8)
		return -1;
	for (size_t i = 0; i < n;) {
		int32_t c;
		int len = pd_utf8_decode(text + i, n - i, &c);
		enum pd_ucat k;

		i += len > 0 ? (size_t)len : 1;
		k = pd_unicode_class(c);
		if (c == 0 || c == 0xFFFD || (k == PD_UCAT_OTHER && c != '\t' && c != '\n' && c != '\r'))
			continue;
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || k == PD_UCAT_SPACE)
			c = ' ';
		if (pd_clip_is_cjk(c)) {
			u8[u8n++] = ' ';
			u8n += (size_t)pd_utf8_encode(c, u8 + u8n);
			u8[u8n++] = ' ';
		} else {
			u8n += (size_t)pd_utf8_encode(c, u8 + u8n);
		}
	}
	nfc = pd_unicode_nfc(u8, u8n);
	if (!nfc)
		goto out;
	/* words: runs between Python whitespace; each lower-cased alone
	 * (final sigma looks only inside its word) */
	n = strlen(nfc);
	for (size_t i = 0; i <= n;) {
		int32_t c = 0;
		int len = i < n ? pd_utf8_decode(nfc + i, n - i, &c) : 1;

		if (i == n || pd_unicode_is_space(c)) {
			if (word.n) {
				int32_t *low = pd_malloc(2 * word.n * sizeof(int32_t), "tokenizing");
				size_t m;

				if (!low)
					goto out;
				m = pd_unicode_lower(word.v, word.n, low);
				if (out->n && pd_cps_push(out, ' ')) {
					free(low);
					goto out;
				}
				for (size_t k = 0; k < m; k++)
					if (pd_cps_push(out, low[k])) {
						free(low);
						goto out;
					}
				free(low);
				word.n = 0;
			}
		} else if (pd_cps_push(&word, c)) {
			goto out;
		}
		i += len > 0 ? (size_t)len : 1;
	}
	rc = 0;
out:
	free(u8);
	free(nfc);
	free(word.v);
	return rc;
}

/* The length of the pre-tokenizer's match at P (0: no match), for the
 * pattern (318-321)
 *   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
 * tried alternative by alternative. */
static size_t pd_clip_match(const int32_t *c, size_t n, size_t p, int *special)
{
	static const char *const fixed[] = { "<|startoftext|>", "<|endoftext|>", "'s", "'t", "'re", "'ve", "'m",
					     "'ll", "'d" };
	size_t k;

	*special = 0;
	for (size_t f = 0; f < sizeof(fixed) / sizeof(fixed[0]); f++) {
		size_t len = strlen(fixed[f]);

		if (p + len > n)
			continue;
		for (k = 0; k < len && c[p + k] == (unsigned char)fixed[f][k]; k++)
			;
		if (k == len) {
			*special = f < 2;
			return len;
		}
	}
	if (pd_unicode_class(c[p]) == PD_UCAT_LETTER) {
		for (k = p; k < n && pd_unicode_class(c[k]) == PD_UCAT_LETTER; k++)
			;
		return k - p;
	}
	if (pd_unicode_class(c[p]) == PD_UCAT_NUMBER)
		return 1;
	for (k = p; k < n && !pd_unicode_is_space(c[k]) && pd_unicode_class(c[k]) != PD_UCAT_LETTER &&
		    pd_unicode_class(c[k]) != PD_UCAT_NUMBER;
	     k++)
		;
	return k - p;
}

int pd_clip_tok_encode(const struct pd_clip_tok *t, const char *text, int32_t **ids_out, size_t *n_out)
{
	struct pd_cps c = { 0 };
	struct pd_ids ids = { 0 };
	char *w = NULL;
	int rc = -1;

	if (pd_clip_clean(text, &c) || pd_ids_push(&ids, t->bos) || !(w = pd_malloc(c.n * 4 + 1, "tokenizing")))
		goto out;
	for (size_t p = 0; p < c.n;) {
		int special;
		size_t len = pd_clip_match(c.v, c.n, p, &special), wl = 0;

		if (len == 0) {
			p++;	/* whitespace */
			continue;
		}
		if (special) {
			if (pd_ids_push(&ids, c.v[p + 2] == 's' ? t->bos : t->eos))
				goto out;
		} else {
			/* the match's UTF-8 bytes; a symbol not in the vocabulary
			 * becomes the unknown token, <|endoftext|> */
			for (size_t k = p; k < p + len; k++)
				wl += (size_t)pd_utf8_encode(c.v[k], w + wl);
			if (pd_bpe_word(&t->bpe, w, wl, "</w>", t->eos, &ids))
				goto out;
		}
		p += len;
	}
	rc = pd_ids_push(&ids, t->eos);
out:
	free(c.v);
	free(w);
	if (rc) {
		free(ids.v);
		ids.v = NULL;
		ids.n = 0;
	}
	*ids_out = ids.v;
	*n_out = ids.n;
	return rc;
}

void pd_tok_fit(const int32_t *ids, size_t n, int32_t last, int32_t pad, int64_t *out, int len)
{
	for (int i = 0; i < len; i++)
		out[i] = (size_t)i < n ? ids[i] : pad;
	if (n > (size_t)len && len > 0)
		out[len - 1] = last;
}
