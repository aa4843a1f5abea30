/*
 * pd_tok_t5.c - sentencepiece's unigram tokenizer (v0.1.97: normalizer.cc,
 * unigram_model.cc EncodeOptimized, darts-clone's double array), reading
 * the model's protobuf directly.
 */
#include "pd_tokenizer.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------------- */
/* Protobuf                                                                */
/* ----------------------------------------------------------------------- */

/* A cursor over a message. */
struct pd_pb {
	const uint8_t *p, *end;
	int bad;
};

static uint64_t pd_pb_varint(struct pd_pb *b)
{
	uint64_t v = 0;

	for (int s = 0; s < 64; s += 7) {
		if (b->p >= b->end) {
			b->bad = 1;
			return 0;
		}
		v |= (uint64_t)(*b->p & 0x7F) << s;
		if (!(*b->p++ & 0x80))
			return v;
	}
	b->bad = 1;
	return 0;
}

/* The next field: its number, wire type and payload (varint value, or the
 * bytes of a fixed or length-delimited field). 0 at the end or on damage. */
static int pd_pb_next(struct pd_pb *b, int *field, int *wire, uint64_t *v, const uint8_t **data, size_t *len)
{
	uint64_t key;

	if (b->bad || b->p >= b->end)
		return 0;
	key = pd_pb_varint(b);
	*field = (int)(key >> 3);
	*wire = (int)(key & 7);
	*data = NULL;
	*len = 0;
	switch (*wire) {
	case 0:
		*v = pd_pb_varint(b);
		break;
	case 1:
	case 5: {
		size_t n = *wire == 1 ? 8 : 4;

		if ((size_t)(b->end - b->p) < n) {
			b->bad = 1;
			return 0;
		}
		*data = b->p;
		*len = n;
		b->p += n;
		break;
	}
	case 2: {
		uint64_t n = pd_pb_varint(b);

		if (b->bad || n > (uint64_t)(b->end - b->p)) {
			b->bad = 1;
			return 0;
		}
		*data = b->p;
		*len = (size_t)n;
		b->p += n;
		break;
	}
	default:
		b->bad = 1;
		return 0;
	}
	return !b->bad;
}

/* ----------------------------------------------------------------------- */
/* Loading                                                                 */
/* ----------------------------------------------------------------------- */

/* SentencePiece { piece = 1; score = 2; type = 3 (default NORMAL = 1) } */
static int pd_t5_piece(struct pd_t5_tok *t, const uint8_t *d, size_t n, int id, const char *path)
{
	struct pd_pb b = { d, d + n, 0 };
	const uint8_t *data, *piece = NULL;
	size_t len, plen = 0;
	uint64_t v = 0;
	int field, wire;

	t->type[id] = 1;
	t->score[id] = 0;
	while (pd_pb_next(&b, &field, &wire, &v, &data, &len)) {
		if (field == 1 && wire == 2) {
			piece = data;
			plen = len;
		} else if (field == 2 && wire == 5) {
			memcpy(&t->score[id], data, 4);
		} else if (field == 3 && wire == 0) {
			t->type[id] = (int)v;
		}
	}
	if (b.bad || !piece)
		return pd_errorf("%s: piece %d is damaged", path, id);
	if (t->type[id] == 1) {
		if (pd_strmap_put(&t->normal, (const char *)piece, plen, id))
			return -1;
		if ((int)plen > t->max_piece)
			t->max_piece = (int)plen;
		if (t->normal.count == 1 || t->score[id] < t->min_score)
			t->min_score = t->score[id];
	}
	if (t->type[id] == 2)
		t->unk = id;
	/* byte pieces "<0xNN>" (type 6): what an unknown character becomes
	 * with byte fallback */
	if (t->type[id] == 6 && plen == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>') {
		unsigned v;
		char hex[3] = { (char)piece[3], (char)piece[4], 0 };

		if (sscanf(hex, "%2x", &v) == 1)
			t->byte_id[v & 255] = id;
	}
	if (plen == 4 && memcmp(piece, "</s>", 4) == 0)
		t->eos = id;
	if (plen == 5 && memcmp(piece, "<pad>", 5) == 0)
		t->pad = id;
	return 0;
}

/* NormalizerSpec { name = 1; precompiled_charsmap = 2; add_dummy_prefix = 3;
 * remove_extra_whitespaces = 4; escape_whitespaces = 5 } */
static int pd_t5_normalizer(struct pd_t5_tok *t, const uint8_t *d, size_t n, const char *path)
{
	struct pd_pb b = { d, d + n, 0 };
	const uint8_t *data;
	size_t len;
	uint64_t v = 0;
	int field, wire;

	while (pd_pb_next(&b, &field, &wire, &v, &data, &len)) {
		if (field == 2 && wire == 2 && len > 0) {
			uint32_t tsize;

			free(t->charsmap);
			t->charsmap = pd_malloc(len, "the normalizer");
			if (!t->charsmap)
				return -1;
			memcpy(t->charsmap, data, len);
			t->charsmap_len = len;
			/* uint32 trie size | trie | replacement strings */
			if (len < 4)
				return pd_errorf("%s: precompiled charsmap of %zu bytes", path, len);
			memcpy(&tsize, t->charsmap, 4);
			if (tsize % 4 || tsize > len - 4 || tsize == 0)
				return pd_errorf("%s: precompiled charsmap with a trie of %u bytes in %zu", path, tsize, len);
			t->trie = (const uint32_t *)(t->charsmap + 4);
			t->trie_units = tsize / 4;
			t->repl = (const char *)t->charsmap + 4 + tsize;
			t->repl_len = len - 4 - tsize;
		} else if (field == 3 && wire == 0) {
			t->add_dummy_prefix = v != 0;
		} else if (field == 4 && wire == 0) {
			t->remove_extra_whitespaces = v != 0;
		} else if (field == 5 && wire == 0) {
			t->escape_whitespaces = v != 0;
		}
	}
	return b.bad ? pd_errorf("%s: damaged normalizer spec", path) : 0;
}

int pd_t5_tok_load(struct pd_t5_tok *t, const char *path_in)
{
	char *path = pd_is_dir(path_in) ? pd_strfmt("%s/spiece.model", path_in) : pd_strdup(path_in), *blob = NULL;
	struct pd_pb b;
	const uint8_t *data;
	size_t len, n = 0;
	uint64_t v = 0;
	int field, wire, rc = -1, id = 0;

	memset(t, 0, sizeof(*t));
	t->unk = 2;
	t->eos = 1;
	t->pad = 0;
	t->add_dummy_prefix = t->remove_extra_whitespaces = t->escape_whitespaces = 1;
	for (int b = 0; b < 256; b++)
		t->byte_id[b] = -1;
	if (!path || pd_read_file(path, 256u << 20, &blob, &n))
		goto out;
	/* ModelProto { pieces = 1; trainer_spec = 2; normalizer_spec = 3 }:
	 * count the pieces first */
	b = (struct pd_pb){ (const uint8_t *)blob, (const uint8_t *)blob + n, 0 };
	while (pd_pb_next(&b, &field, &wire, &v, &data, &len))
		t->n_pieces += field == 1 && wire == 2;
	if (b.bad || t->n_pieces == 0) {
		pd_errorf("%s: not a sentencepiece model", path);
		goto out;
	}
	t->score = pd_calloc((size_t)t->n_pieces, sizeof(float), "the T5 tokenizer");
	t->type = pd_calloc((size_t)t->n_pieces, sizeof(int), "the T5 tokenizer");
	if (!t->score || !t->type || pd_strmap_init(&t->normal, (size_t)t->n_pieces))
		goto out;
	b = (struct pd_pb){ (const uint8_t *)blob, (const uint8_t *)blob + n, 0 };
	while (pd_pb_next(&b, &field, &wire, &v, &data, &len)) {
		if (field == 1 && wire == 2) {
			if (pd_t5_piece(t, data, len, id++, path))
				goto out;
		} else if (field == 2 && wire == 2) {
			/* TrainerSpec: model_type = 3 (1 unigram), unk_id = 40,
			 * eos_id = 42, pad_id = 43 */
			struct pd_pb s = { data, data + len, 0 };
			const uint8_t *d2;
			size_t l2;
			uint64_t v2 = 0;
			int f2, w2;

			while (pd_pb_next(&s, &f2, &w2, &v2, &d2, &l2)) {
				if (f2 == 3 && w2 == 0 && v2 != 1) {
					pd_errorf("%s: model type %d, not unigram", path, (int)v2);
					goto out;
				}
				if (f2 == 35 && w2 == 0)
					t->byte_fallback = v2 != 0;
				if (w2 == 0 && (f2 == 40 || f2 == 42 || f2 == 43) && (int64_t)(int32_t)v2 >= 0 &&
				    (int32_t)v2 < t->n_pieces)
					*(f2 == 40 ? &t->unk : f2 == 42 ? &t->eos : &t->pad) = (int32_t)v2;
			}
		} else if (field == 3 && wire == 2) {
			if (pd_t5_normalizer(t, data, len, path))
				goto out;
		}
	}
	if (t->normal.count == 0) {
		pd_errorf("%s: no normal pieces", path);
		goto out;
	}
	for (int b = 0; t->byte_fallback && b < 256; b++)
		if (t->byte_id[b] < 0) {
			pd_errorf("%s: byte fallback without the piece <0x%02X>", path, b);
			goto out;
		}
	rc = 0;
out:
	free(blob);
	free(path);
	if (rc)
		pd_t5_tok_free(t);
	return rc;
}

void pd_t5_tok_free(struct pd_t5_tok *t)
{
	free(t->score);
	free(t->type);
	free(t->charsmap);
	pd_strmap_free(&t->normal);
	memset(t, 0, sizeof(*t));
}

/* ----------------------------------------------------------------------- */
/* Normalizer                                                              */
/* ----------------------------------------------------------------------- */

/* darts-clone's commonPrefixSearch, keeping the longest match: the
 * replacement's offset in t->repl, and the key length (0: none). */
static size_t pd_t5_longest_rule(const struct pd_t5_tok *t, const uint8_t *key, size_t n, uint32_t *value)
{
	size_t pos = 0, best = 0;
	uint32_t unit;

	if (!t->trie)
		return 0;
	unit = t->trie[0];
	pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
	for (size_t i = 0; i < n; i++) {
		pos ^= key[i];
		if (pos >= t->trie_units)
			break;
		unit = t->trie[pos];
		if ((unit & ((1u << 31) | 0xFF)) != key[i])
			break;
		pos ^= (size_t)((unit >> 10) << ((unit & (1u << 9)) >> 6));
		if (pos >= t->trie_units)
			break;
		if ((unit >> 8) & 1) {
			best = i + 1;
			*value = t->trie[pos] & ((1u << 31) - 1);
		}
	}
	return best;
}

/* normalize_prefix: the replacement of the longest rule at S, or the next
 * character itself (U+FFFD for a malformed byte); *CONSUMED bytes used. */
static const char *pd_t5_prefix(const struct pd_t5_tok *t, const char *s, size_t n, size_t *consumed,
				size_t *out_len)
{
	uint32_t value = 0;
	size_t len = pd_t5_longest_rule(t, (const uint8_t *)s, n, &value);
	int32_t cp;
	int cl;

	if (len > 0 && value < t->repl_len) {
		const char *r = t->repl + value;

		*consumed = len;
		*out_len = strnlen(r, t->repl_len - value);
		return r;
	}
	cl = pd_utf8_decode(s, n, &cp);
	if (cl < 0) {
		*consumed = 1;
		*out_len = 3;
		return "\xEF\xBF\xBD";
	}
	*consumed = (size_t)cl;
	*out_len = (size_t)cl;
	return s;
}

int pd_t5_tok_normalize(const struct pd_t5_tok *t, const char *text, char **out_p, size_t *out_len)
{
	static const char ws[] = "\xE2\x96\x81";	/* U+2581 */
	size_t n = strlen(text), k = 0, cap = 3 * (n + 1) * 4 + 16, used, rl;
	char *out = pd_malloc(cap, "normalizing");
	int prev_space = t->remove_extra_whitespaces;
	const char *r;

	if (!out)
		return -1;
	/* leading whitespace */
	while (t->remove_extra_whitespaces && n > 0) {
		r = pd_t5_prefix(t, text, n, &used, &rl);
		if (!(rl == 1 && r[0] == ' '))
			break;
		text += used;
		n -= used;
	}
	if (n > 0 && t->add_dummy_prefix) {
		memcpy(out, t->escape_whitespaces ? ws : " ", t->escape_whitespaces ? 3 : 1);
		k = t->escape_whitespaces ? 3 : 1;
	}
	while (n > 0) {
		r = pd_t5_prefix(t, text, n, &used, &rl);
		if (prev_space && t->remove_extra_whitespaces)
			while (rl > 0 && r[0] == ' ') {
				r++;
				rl--;
			}
		if (rl > 0) {
			if (k + 3 * rl + 4 > cap) {
				char *g = realloc(out, cap = 2 * (k + 3 * rl + 4));

				if (!g) {
					free(out);
					return pd_errorf("out of memory normalizing");
				}
				out = g;
			}
			for (size_t i = 0; i < rl; i++) {
				if (t->escape_whitespaces && r[i] == ' ') {
					memcpy(out + k, ws, 3);
					k += 3;
				} else {
					out[k++] = r[i];
				}
			}
			prev_space = r[rl - 1] == ' ';
		}
		text += used;
		n -= used;
		if (!t->remove_extra_whitespaces)
			prev_space = 0;
	}
	/* trailing whitespace */
	if (t->remove_extra_whitespaces) {
		if (t->escape_whitespaces)
			while (k >= 3 && memcmp(out + k - 3, ws, 3) == 0)
				k -= 3;
		else
			while (k >= 1 && out[k - 1] == ' ')
				k--;
	}
	out[k] = 0;
	*out_p = out;
	*out_len = k;
	return 0;
}

/* ----------------------------------------------------------------------- */
/* Viterbi                                                                 */
/* ----------------------------------------------------------------------- */

/* sentencepiece's OneCharLen: the length a UTF-8 lead byte announces. */
static int pd_t5_char_len(unsigned char c)
{
	return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

struct pd_t5_node {
	int32_t id;                     /* piece ending here on the best path */
	int32_t start;                  /* where it starts (-1: unreached) */
	float score;                    /* best path score (stored as float, as sentencepiece does) */
};

int pd_t5_tok_encode(const struct pd_t5_tok *t, const char *text, int32_t **ids_out, size_t *n_out)
{
	char *s = NULL;
	size_t n = 0, count = 0;
	struct pd_t5_node *best = NULL;
	int32_t *ids = NULL;
	float unk_score = t->min_score - 10.0f;
	int rc = -1;

	*ids_out = NULL;
	*n_out = 0;
	if (pd_t5_tok_normalize(t, text, &s, &n))
		return -1;
	best = pd_malloc((n + 1) * sizeof(*best), "tokenizing");
	ids = pd_malloc((n + 1) * sizeof(int32_t), "tokenizing");
	if (!best || !ids)
		goto out;
	for (size_t i = 0; i <= n; i++)
		best[i] = (struct pd_t5_node){ -1, -1, 0 };
	best[0].start = 0;
	for (size_t i = 0; i < n;) {
		int mb = pd_t5_char_len((unsigned char)s[i]), single = 0;
		float here = best[i].score;

		if ((size_t)mb > n - i)
			mb = (int)(n - i);
		for (int L = 1; L <= t->max_piece && (size_t)L <= n - i; L++) {
			int32_t id;
			double sc;

			if (!pd_strmap_get(&t->normal, s + i, (size_t)L, &id))
				continue;
			/* in double, as sentencepiece's `auto score` is (a ternary
			 * with a double user-symbol branch), compared with the
			 * stored float and stored as float: exact ties break alike */
			sc = (double)t->score[id] + (double)here;
			if (best[i + L].start < 0 || sc > (double)best[i + L].score)
				best[i + L] = (struct pd_t5_node){ id, (int32_t)i, (float)sc };
			if (L == mb)
				single = 1;
		}
		if (!single) {
			float sc = unk_score + here;

			if (best[i + mb].start < 0 || sc > best[i + mb].score)
				best[i + mb] = (struct pd_t5_node){ t->unk, (int32_t)i, sc };
		}
		i += (size_t)mb;
	}
	/* back from the end, then reverse (the ends of the pieces, in place
	 * of their ids: an unknown piece needs its bytes) */
	for (size_t e = n; e > 0; e = (size_t)best[e].start)
		ids[count++] = (int32_t)e;
	for (size_t i = 0; i < count / 2; i++) {
		int32_t x = ids[i];

		ids[i] = ids[count - 1 - i];
		ids[count - 1 - i] = x;
	}
	{
		/* with byte fallback an unknown piece becomes the pieces of its
		 * UTF-8 bytes (sentencepiece_processor.cc), else runs of
		 * <unk> become one */
		size_t w = 0, bytes = 0;
		int32_t *out;

		for (size_t i = 0; i < count; i++) {
			size_t e = (size_t)ids[i];

			bytes += best[e].id == t->unk && t->byte_fallback ? e - (size_t)best[e].start : 1;
		}
		out = pd_malloc((bytes + 1) * sizeof(int32_t), "tokenizing");
		if (!out)
			goto out;
		for (size_t i = 0; i < count; i++) {
			size_t e = (size_t)ids[i];
			int32_t id = best[e].id;

			if (id == t->unk && t->byte_fallback)
				for (size_t k = (size_t)best[e].start; k < e; k++)
					out[w++] = t->byte_id[(unsigned char)s[k]];
			else if (!(id == t->unk && w > 0 && out[w - 1] == t->unk))
				out[w++] = id;
		}
		free(ids);
		ids = out;
		count = w;
	}
	*ids_out = ids;
	*n_out = count;
	ids = NULL;
	rc = 0;
out:
	free(s);
	free(best);
	free(ids);
	return rc;
}
