/*
 * pd_tok_bpe.c - what the byte-level BPE tokenizers share (GPT-2's scheme,
 * which CLIP's and Qwen2's follow; line numbers refer to transformers
 * v4.43.4's tokenization_clip.py, whose bpe() is GPT-2's with a word-end
 * suffix): the byte stand-ins, vocab.json and merges.txt, and the merges of
 * one pre-token.
 */
#include "pd_tokenizer.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

void pd_bpe_init(struct pd_bpe *b)
{
	int next = 256;

	memset(b, 0, sizeof(*b));
	/* bytes_to_unicode (38-59): printable bytes stand for themselves, the
	 * 68 others for U+0100 onwards in byte order */
	for (int c = 0; c < 256; c++) {
		int printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);

		b->byte_len[c] = pd_utf8_encode(printable ? c : next++, b->byte_sym[c]);
	}
}

void pd_bpe_free(struct pd_bpe *b)
{
	pd_strmap_free(&b->vocab);
	pd_strmap_free(&b->ranks);
}

int pd_bpe_vocab_json(struct pd_bpe *b, const cJSON *vocab, const char *path)
{
	const cJSON *e;

	if (!cJSON_IsObject(vocab))
		return pd_errorf("%s: the vocabulary is not a JSON object of token -> id", path);
	if (pd_strmap_init(&b->vocab, (size_t)cJSON_GetArraySize(vocab)))
		return -1;
	cJSON_ArrayForEach(e, vocab) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e9)
			return pd_errorf("%s: token \"%s\" has no valid id", path, e->string);
		if (pd_strmap_put(&b->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble))
			return -1;
	}
	return 0;
}

int pd_bpe_merge_line(struct pd_bpe *b, const char *line, size_t n, const char *path)
{
	int32_t rank = (int32_t)b->n_merges;

	if (!b->ranks.cap && pd_strmap_init(&b->ranks, 50000))
		return -1;
	if (!memchr(line, ' ', n))
		return pd_errorf("%s: merge %d is not two symbols: \"%.*s\"", path, rank + 1, (int)(n > 80 ? 80 : n), line);
	/* a pair listed twice keeps its last rank, as bpe_ranks =
	 * dict(zip(merges, range(len(merges)))) does */
	if (pd_strmap_put(&b->ranks, line, n, rank))
		return -1;
	b->n_merges++;
	return 0;
}

int pd_bpe_merges_txt(struct pd_bpe *b, const char *path, int max_merges)
{
	char *text = NULL, *line, *save = NULL;
	size_t len;
	int first = 1, rc = -1;

	if (pd_read_file(path, 64u << 20, &text, &len))
		return -1;
	/* "#version" header, then "first second" per line */
	for (line = strtok_r(text, "\n", &save); line && (max_merges <= 0 || b->n_merges < (size_t)max_merges);
	     line = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(line);

		if (n && line[n - 1] == '\r')
			line[--n] = 0;
		if (first && strncmp(line, "#version", 8) == 0) {
			first = 0;
			continue;
		}
		first = 0;
		if (pd_bpe_merge_line(b, line, n, path))
			goto out;
	}
	if (!b->ranks.cap && pd_strmap_init(&b->ranks, 16))
		goto out;
	rc = 0;
out:
	free(text);
	return rc;
}

int pd_ids_push(struct pd_ids *ids, int32_t id)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap * 2 + 16;
		int32_t *v = realloc(ids->v, cap * sizeof(int32_t));

		if (!v)
			return pd_errorf("out of memory tokenizing");
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

/* A word's BPE symbols: strings into one buffer. */
struct pd_bpe_sym {
	char *s;
	size_t len;
};

/* bpe (417-457): the characters of WORD (each CHAR_LEN bytes), the last
 * with SUFFIX; the lowest-ranked adjacent pair merges, every occurrence
 * left to right, until no pair has a rank. */
static int pd_bpe_merge(const struct pd_bpe *b, const char *word, size_t wlen, const int *char_len, size_t n_chars,
			const char *suffix, int32_t unk, struct pd_ids *ids)
{
	struct pd_bpe_sym *sym = pd_calloc(n_chars + 1, sizeof(*sym), "tokenizing");
	size_t ns = n_chars, off = 0, slen = suffix ? strlen(suffix) : 0;
	char *key = pd_malloc(2 * wlen + 2 * slen + 16, "tokenizing");
	int rc = -1;

	if (!sym || !key)
		goto out;
	for (size_t i = 0; i < n_chars; i++) {
		size_t extra = i + 1 == n_chars ? slen : 0;

		sym[i].s = pd_malloc((size_t)char_len[i] + extra + 1, "tokenizing");
		if (!sym[i].s)
			goto out;
		memcpy(sym[i].s, word + off, (size_t)char_len[i]);
		sym[i].len = (size_t)char_len[i];
		if (extra) {
			memcpy(sym[i].s + sym[i].len, suffix, extra);
			sym[i].len += extra;
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
			if (pd_strmap_get(&b->ranks, key, sym[i].len + 1 + sym[i + 1].len, &r) && (best < 0 || r < best)) {
				best = r;
				bi = i;
			}
		}
		if (best < 0)
			break;
		{
			/* merge every occurrence of the pair (sym[bi], sym[bi+1]) */
			struct pd_bpe_sym a = sym[bi], c = sym[bi + 1];
			char *as = pd_malloc(a.len + 1, "tokenizing"), *cs = pd_malloc(c.len + 1, "tokenizing");
			size_t w = 0, alen = a.len, clen = c.len;

			if (!as || !cs) {
				free(as);
				free(cs);
				goto out;
			}
			memcpy(as, a.s, alen);
			memcpy(cs, c.s, clen);
			for (size_t i = 0; i < ns;) {
				if (i + 1 < ns && sym[i].len == alen && memcmp(sym[i].s, as, alen) == 0 &&
				    sym[i + 1].len == clen && memcmp(sym[i + 1].s, cs, clen) == 0) {
					char *m = pd_malloc(alen + clen + 1, "tokenizing");

					if (!m) {
						free(as);
						free(cs);
						goto out;
					}
					memcpy(m, as, alen);
					memcpy(m + alen, cs, clen);
					free(sym[i].s);
					free(sym[i + 1].s);
					sym[w].s = m;
					sym[w].len = alen + clen;
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
			free(cs);
		}
	}
	for (size_t i = 0; i < ns; i++) {
		int32_t id;

		/* byte-level symbols always exist; a vocabulary without one
		 * gives the unknown token (474-476) */
		if (!pd_strmap_get(&b->vocab, sym[i].s, sym[i].len, &id))
			id = unk;
		if (pd_ids_push(ids, id))
			goto out;
	}
	rc = 0;
out:
	for (size_t i = 0; sym && i < ns; i++)
		free(sym[i].s);
	free(sym);
	free(key);
	return rc;
}

int pd_bpe_word(const struct pd_bpe *b, const char *s, size_t n, const char *suffix, int32_t unk, struct pd_ids *ids)
{
	/* each byte as its stand-in character (at most 2 bytes of UTF-8) */
	char *w = pd_malloc(2 * n + 1, "tokenizing");
	int *cl = pd_malloc((n + 1) * sizeof(int), "tokenizing");
	size_t wl = 0;
	int rc = -1;

	if (w && cl) {
		for (size_t k = 0; k < n; k++) {
			int sl = b->byte_len[(unsigned char)s[k]];

			memcpy(w + wl, b->byte_sym[(unsigned char)s[k]], (size_t)sl);
			wl += (size_t)sl;
			cl[k] = sl;
		}
		rc = n ? pd_bpe_merge(b, w, wl, cl, n, suffix, unk, ids) : 0;
	}
	free(w);
	free(cl);
	return rc;
}
