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

/* bytes_to_unicode (38-59): printable bytes stand for themselves, the 68
 * others for U+0100 onwards in byte order. */
static void pd_clip_byte_table(struct pd_clip_tok *t)
{
	int next = 256;

	for (int b = 0; b < 256; b++) {
		int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);

		t->byte_len[b] = pd_utf8_encode(printable ? b : next++, t->byte_sym[b]);
	}
}

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
	if (!pd_strmap_get(&t->vocab, s, strlen(s), id))
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
	char *text = NULL, *line, *save = NULL;
	cJSON *vocab = NULL, *e;
	size_t len;
	int rc = -1, rank = 0, first = 1;

	memset(t, 0, sizeof(*t));
	pd_clip_byte_table(t);
	t->max_len = 77;
	if (!vpath || !mpath)
		goto out;
	if (pd_read_file(vpath, 64u << 20, &text, &len))
		goto out;
	vocab = cJSON_Parse(text);
	free(text);
	text = NULL;
	if (!cJSON_IsObject(vocab)) {
		pd_errorf("%s: not a JSON object of token -> id", vpath);
		goto out;
	}
	if (pd_strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab)) || pd_strmap_init(&t->ranks, 50000))
		goto out;
	cJSON_ArrayForEach(e, vocab) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e9) {
			pd_errorf("%s: token \"%s\" has no valid id", vpath, e->string);
			goto out;
		}
		if (pd_strmap_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble))
			goto out;
	}
	if (!pd_strmap_get(&t->vocab, "<|startoftext|>", 15, &t->bos) ||
	    !pd_strmap_get(&t->vocab, "<|endoftext|>", 13, &t->eos)) {
		pd_errorf("%s: no <|startoftext|> or <|endoftext|> token", vpath);
		goto out;
	}
	t->pad = t->eos;
	if (pd_read_file(mpath, 64u << 20, &text, &len))
		goto out;
	/* "#version" header, then "first second" per line */
	for (line = strtok_r(text, "\n", &save); line && rank < PD_CLIP_MAX_MERGES; line = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(line);

		if (n && line[n - 1] == '\r')
			line[--n] = 0;
		if (first && strncmp(line, "#version", 8) == 0) {
			first = 0;
			continue;
		}
		first = 0;
		if (!strchr(line, ' ')) {
			pd_errorf("%s: merge %d is not two symbols: \"%s\"", mpath, rank + 1, line);
			goto out;
		}
		if (pd_strmap_put(&t->ranks, line, n, rank++))
			goto out;
	}
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
	pd_strmap_free(&t->vocab);
	pd_strmap_free(&t->ranks);
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

/* A word's BPE symbols: strings into one buffer. */
struct pd_bpe_sym {
	char *s;
	size_t len;
};

/* bpe (417-457): the last symbol gets "</w>"; the lowest-ranked adjacent
 * pair merges, every occurrence left to right, until no pair has a rank. */
static int pd_clip_bpe(const struct pd_clip_tok *t, const char *word, size_t wlen, const int *char_len,
		       size_t n_chars, int32_t **ids, size_t *n_ids, size_t *cap_ids)
{
	struct pd_bpe_sym *sym = pd_calloc(n_chars + 1, sizeof(*sym), "tokenizing");
	char *key = pd_malloc(2 * wlen + 16, "tokenizing");
	size_t ns = n_chars, off = 0;
	int rc = -1;

	if (!sym || !key)
		goto out;
	for (size_t i = 0; i < n_chars; i++) {
		size_t extra = i + 1 == n_chars ? 4 : 0;

		sym[i].s = pd_malloc((size_t)char_len[i] + extra + 1, "tokenizing");
		if (!sym[i].s)
			goto out;
		memcpy(sym[i].s, word + off, (size_t)char_len[i]);
		sym[i].len = (size_t)char_len[i];
		if (extra) {
			memcpy(sym[i].s + sym[i].len, "</w>", 4);
			sym[i].len += 4;
		}
		off += (size_t)char_len[i];
	}
	while (ns > 1) {
		int32_t best = -1, r;
		size_t bi = 0;

		for (size_t i = 0; i + 1 < ns; i++) {
			memcpy(key, sym[i].s, sym[i].len);
			key[sym[i].len] = ' ';
			memcpy(key + sym[i].len + 1, sym[i + 1].s, sym[i + 1].len);
			if (pd_strmap_get(&t->ranks, key, sym[i].len + 1 + sym[i + 1].len, &r) && (best < 0 || r < best)) {
				best = r;
				bi = i;
			}
		}
		if (best < 0)
			break;
		{
			/* merge every occurrence of the pair (sym[bi], sym[bi+1]) */
			struct pd_bpe_sym a = sym[bi], b = sym[bi + 1];
			char *as = pd_malloc(a.len + 1, "tokenizing"), *bs = pd_malloc(b.len + 1, "tokenizing");
			size_t w = 0, alen = a.len, blen = b.len;

			if (!as || !bs) {
				free(as);
				free(bs);
				goto out;
			}
			memcpy(as, a.s, alen);
			memcpy(bs, b.s, blen);
			for (size_t i = 0; i < ns;) {
				if (i + 1 < ns && sym[i].len == alen && memcmp(sym[i].s, as, alen) == 0 &&
				    sym[i + 1].len == blen && memcmp(sym[i + 1].s, bs, blen) == 0) {
					char *m = pd_malloc(alen + blen + 1, "tokenizing");

					if (!m) {
						free(as);
						free(bs);
						goto out;
					}
					memcpy(m, as, alen);
					memcpy(m + alen, bs, blen);
					free(sym[i].s);
					free(sym[i + 1].s);
					sym[w].s = m;
					sym[w].len = alen + blen;
					w++;
					i += 2;
				} else {
					sym[w++] = sym[i++];
				}
			}
			for (size_t i = w; i < ns; i++)
				sym[i].s = NULL;
			ns = w;
			free(as);
			free(bs);
		}
	}
	for (size_t i = 0; i < ns; i++) {
		int32_t id;

		/* byte-level symbols always exist; a vocabulary without one
		 * maps it to the unknown token, <|endoftext|> (474-476) */
		if (!pd_strmap_get(&t->vocab, sym[i].s, sym[i].len, &id))
			id = t->eos;
		if (*n_ids == *cap_ids) {
			size_t cap = *cap_ids * 2 + 16;
			int32_t *nv = realloc(*ids, cap * sizeof(int32_t));

			if (!nv) {
				pd_errorf("out of memory tokenizing");
				goto out;
			}
			*ids = nv;
			*cap_ids = cap;
		}
		(*ids)[(*n_ids)++] = id;
	}
	rc = 0;
out:
	for (size_t i = 0; sym && i < ns; i++)
		free(sym[i].s);
	free(sym);
	free(key);
	return rc;
}

int pd_clip_tok_encode(const struct pd_clip_tok *t, const char *text, int32_t **ids_out, size_t *n_out)
{
	struct pd_cps c = { 0 };
	int32_t *ids = NULL;
	size_t n = 0, cap = 16;
	int rc = -1;

	ids = pd_malloc(cap * sizeof(int32_t), "tokenizing");
	if (!ids || pd_clip_clean(text, &c))
		goto out;
	ids[n++] = t->bos;
	for (size_t p = 0; p < c.n;) {
		int special;
		size_t len = pd_clip_match(c.v, c.n, p, &special);

		if (len == 0) {
			p++;	/* whitespace */
			continue;
		}
		if (special) {
			if (n == cap) {
				int32_t *nv = realloc(ids, (cap *= 2) * sizeof(int32_t));

				if (!nv) {
					pd_errorf("out of memory tokenizing");
					goto out;
				}
				ids = nv;
			}
			ids[n++] = c.v[p + 2] == 's' ? t->bos : t->eos;
		} else {
			/* the match's UTF-8 bytes, each as its stand-in character */
			char *w = pd_malloc(len * 4 * 2 + 1, "tokenizing");
			int *cl = pd_malloc(len * 4 * sizeof(int) + sizeof(int), "tokenizing");
			size_t wl = 0, nc = 0;

			if (!w || !cl) {
				free(w);
				free(cl);
				goto out;
			}
			for (size_t k = p; k < p + len; k++) {
				char u8[4];
				int bl = pd_utf8_encode(c.v[k], u8);

				for (int b = 0; b < bl; b++) {
					int sl = t->byte_len[(unsigned char)u8[b]];

					memcpy(w + wl, t->byte_sym[(unsigned char)u8[b]], (size_t)sl);
					wl += (size_t)sl;
					cl[nc++] = sl;
				}
			}
			rc = pd_clip_bpe(t, w, wl, cl, nc, &ids, &n, &cap);
			free(w);
			free(cl);
			if (rc)
				goto out;
			rc = -1;
		}
		p += len;
	}
	if (n == cap) {
		int32_t *nv = realloc(ids, (cap + 1) * sizeof(int32_t));

		if (!nv) {
			pd_errorf("out of memory tokenizing");
			goto out;
		}
		ids = nv;
	}
	ids[n++] = t->eos;
	rc = 0;
out:
	free(c.v);
	if (rc) {
		free(ids);
		ids = NULL;
		n = 0;
	}
	*ids_out = ids;
	*n_out = n;
	return rc;
}

void pd_tok_fit(const int32_t *ids, size_t n, int32_t last, int32_t pad, int64_t *out, int len)
{
	for (int i = 0; i < len; i++)
		out[i] = (size_t)i < n ? ids[i] : pad;
	if (n > (size_t)len && len > 0)
		out[len - 1] = last;
}
