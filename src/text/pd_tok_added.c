/*
 * pd_tok_added.c - the added tokens of a transformers tokenizer folder
 * (tokenizer_config.json's added_tokens_decoder) and text split on them
 * as the slow tokenizers split it (tokenization_utils.py, v4.43:
 * PreTrainedTokenizer.tokenize): each occurrence, leftmost first and the
 * longest token there, becomes its id; next to a token with lstrip or
 * rstrip the neighbouring text loses its whitespace on that side; every
 * other piece of text is encoded on its own.
 */
#include "pd_tokenizer.h"
#include "pd_unicode.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

void pd_added_tokens_free(struct pd_added_tokens *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->tok[i].text);
	free(a->tok);
	memset(a, 0, sizeof(*a));
}

int pd_added_tokens_load(struct pd_added_tokens *a, const char *dir)
{
	char *path = pd_strfmt("%s/tokenizer_config.json", dir), *blob = NULL;
	cJSON *root = NULL, *dec, *e;
	size_t len;
	int rc = -1;

	memset(a, 0, sizeof(*a));
	if (!path)
		return -1;
	if (!pd_file_exists(path)) {
		rc = 0; /* no added tokens: the text is encoded whole */
		goto out;
	}
	if (pd_read_file(path, 64u << 20, &blob, &len))
		goto out;
	root = cJSON_ParseWithLength(blob, len);
	if (!root) {
		pd_errorf("%s: not JSON", path);
		goto out;
	}
	dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
	if (!dec) {
		rc = 0;
		goto out;
	}
	if (!cJSON_IsObject(dec)) {
		pd_errorf("%s: added_tokens_decoder is not an object", path);
		goto out;
	}
	a->tok = pd_calloc((size_t)cJSON_GetArraySize(dec) + 1, sizeof(*a->tok), "the added tokens");
	if (!a->tok)
		goto out;
	cJSON_ArrayForEach(e, dec) {
		cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
		char *end = NULL;
		long id = strtol(e->string ? e->string : "", &end, 10);
		struct pd_added_token *t = &a->tok[a->n];

		if (!cJSON_IsString(c) || !c->valuestring[0] || !end || *end || end == e->string || id < 0 ||
		    id > INT32_MAX) {
			pd_errorf("%s: added_tokens_decoder entry \"%s\" is not an id with a content", path,
				  e->string ? e->string : "");
			goto out;
		}
		t->text = pd_strdup(c->valuestring);
		if (!t->text)
			goto out;
		t->len = strlen(t->text);
		t->id = (int32_t)id;
		t->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "lstrip"));
		t->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "rstrip"));
		a->n++;
	}
	rc = 0;
out:
	if (rc)
		pd_added_tokens_free(a);
	cJSON_Delete(root);
	free(blob);
	free(path);
	return rc;
}

/* The longest added token at S (N bytes), or NULL. */
static const struct pd_added_token *pd_added_at(const struct pd_added_tokens *a, const char *s, size_t n)
{
	const struct pd_added_token *best = NULL;

	for (int i = 0; i < a->n; i++)
		if (a->tok[i].len <= n && memcmp(s, a->tok[i].text, a->tok[i].len) == 0 &&
		    (!best || a->tok[i].len > best->len))
			best = &a->tok[i];
	return best;
}

int pd_added_encode(const struct pd_added_tokens *a, const char *text,
		    int (*encode)(const void *ctx, const char *piece, struct pd_ids *ids), const void *ctx,
		    struct pd_ids *ids)
{
	size_t n = strlen(text), i = 0, seg = 0;
	const struct pd_added_token *prev = NULL;
	char *piece = pd_malloc(n + 1, "tokenizing");
	int rc = -1;

	if (!piece)
		return -1;
	while (i <= n) {
		const struct pd_added_token *tok = i < n ? pd_added_at(a, text + i, n - i) : NULL;
		size_t s0 = seg, s1 = i;

		if (i < n && !tok) {
			i++;
			continue;
		}
		/* the text between the previous token (or the start) and this
		 * one (or the end), stripped where a neighbour says so */
		if (prev && prev->rstrip)
			s0 = pd_unicode_lstrip(text, s0, s1);
		if (tok && tok->lstrip)
			s1 = pd_unicode_rstrip(text, s0, s1);
		if (s1 > s0) {
			memcpy(piece, text + s0, s1 - s0);
			piece[s1 - s0] = 0;
			if (encode(ctx, piece, ids))
				goto out;
		}
		if (!tok)
			break;
		if (pd_ids_push(ids, tok->id))
			goto out;
		i += tok->len;
		seg = i;
		prev = tok;
	}
	rc = 0;
out:
	free(piece);
	return rc;
}

static int pd_added_t5_piece(const void *ctx, const char *piece, struct pd_ids *ids)
{
	int32_t *got = NULL;
	size_t m = 0;

	if (pd_t5_tok_encode(ctx, piece, &got, &m))
		return -1;
	for (size_t k = 0; k < m; k++)
		if (pd_ids_push(ids, got[k])) {
			free(got);
			return -1;
		}
	free(got);
	return 0;
}

int pd_t5_tok_encode_added(const struct pd_t5_tok *t, const struct pd_added_tokens *a, const char *text,
			   int32_t **ids_out, size_t *n_out)
{
	struct pd_ids ids = { 0 };

	*ids_out = NULL;
	*n_out = 0;
	if (pd_added_encode(a, text, pd_added_t5_piece, t, &ids) ||
	    (!ids.v && !(ids.v = pd_malloc(sizeof(int32_t), "tokenizing")))) {
		free(ids.v);
		return -1;
	}
	*ids_out = ids.v;
	*n_out = ids.n;
	return 0;
}
