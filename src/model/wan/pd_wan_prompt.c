/*
 * pd_wan_prompt.c - Wan2.1's prompt embeddings (pd_wan_prompt.h).
 */
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_text_clean.h"
#include "pd_util.h"
#include "pd_wan_prompt.h"

#include <stdlib.h>
#include <string.h>

int pd_wan_prompt_clean(const char *text, char **out)
{
	char *a = NULL, *b = NULL;
	int rc;

	/* html.unescape(html.unescape(text)).strip(), whitespace_clean (PW:78-93) */
	*out = NULL;
	if (pd_html_unescape(text, &a) || pd_html_unescape(a, &b)) {
		free(a);
		return -1;
	}
	rc = pd_whitespace_clean(b, out);
	free(a);
	free(b);
	return rc;
}

int pd_wan_prompt_ids(const struct pd_t5_tok *tok, const struct pd_added_tokens *added, const char *text, int len,
		      int64_t *ids, int64_t *mask, int *seq_len, size_t *full)
{
	int32_t *got = NULL;
	size_t n = 0, keep;

	if (pd_t5_tok_encode_added(tok, added, text, &got, &n))
		return -1;
	/* "</s>" unless the ids end with it (TT:286-297); truncation keeps
	 * len - 1 ids for it */
	if (full)
		*full = n + (n == 0 || got[n - 1] != tok->eos);
	keep = n < (size_t)len - 1 ? n : (size_t)len - 1;
	for (size_t i = 0; i < keep; i++)
		ids[i] = got[i];
	if (keep == 0 || ids[keep - 1] != tok->eos)
		ids[keep++] = tok->eos;
	*seq_len = (int)keep;
	for (size_t i = 0; i < (size_t)len; i++) {
		if (i >= keep)
			ids[i] = tok->pad;
		if (mask)
			mask[i] = i < keep;
	}
	free(got);
	return 0;
}

int pd_wan_prompt_width(const struct pd_model_paths *mp, int64_t *width)
{
	struct pd_config c;
	int64_t v = 0;
	int rc;

	if (!mp->encoder[0])
		return pd_errorf("no text encoder: give --model DIR (with text_encoder/), --text-encoder DIR|FILE or "
				 "--t5xxl FILE");
	if (!pd_is_dir(mp->encoder[0])) {
		struct pd_st *st = NULL;
		const struct pd_st_tensor *t;

		if (pd_st_open_path(&st, mp->encoder[0], "model"))
			return -1;
		t = pd_st_find_suffix(st, "shared.weight");
		if (!t)
			t = pd_st_find_suffix(st, "encoder.embed_tokens.weight");
		rc = t && t->ndim == 2 ? 0 : pd_errorf("%s: no UMT5 token embedding (shared.weight)", st->path);
		if (!rc)
			*width = t->shape[1];
		pd_st_close(st);
		return rc;
	}
	if (pd_config_load_in(&c, mp->encoder[0], "config.json", "UMT5 encoder"))
		return -1;
	rc = pd_config_int(&c, "d_model", 1, 0, 1, 1 << 20, &v);
	pd_config_free(&c);
	*width = v;
	return rc;
}

int pd_wan_prompt_encoder_load(void *p, const struct pd_model_paths *mp,
			       struct pd_backend *be)
{
	struct pd_wan_prompt_encoder *pe = p;
	memset(pe, 0, sizeof(*pe));
	if (!mp->tokenizer[0])
		return pd_errorf("no tokenizer folder: give --model DIR or --tokenizer DIR");
	if (!mp->encoder[0])
		return pd_errorf("no UMT5 text encoder: give --model DIR, --text-encoder DIR|FILE or --t5xxl FILE");
	if (pd_t5_tok_load(&pe->tok, mp->tokenizer[0]))
		return -1;
	pe->loaded = 1;
	if (pd_added_tokens_load(&pe->added, mp->tokenizer[0]))
		goto fail;
	pe->loaded = 2;
	if (pd_t5_load(&pe->umt5, mp->encoder[0], be))
		goto fail;
	{
		int vocab = pd_t5_get_config(pe->umt5)->vocab;
		int32_t top = pe->tok.n_pieces - 1;

		for (int i = 0; i < pe->added.n; i++)
			top = pe->added.tok[i].id > top ? pe->added.tok[i].id : top;
		if (top >= vocab) {
			pd_errorf("%s: %d token embeddings, but the tokenizer in %s uses ids up to %d", mp->encoder[0],
				  vocab, mp->tokenizer[0], top);
			goto fail;
		}
	}
	return 0;
fail:
	pd_wan_prompt_encoder_free(pe);
	return -1;
}

void pd_wan_prompt_encoder_free(void *p)
{
	struct pd_wan_prompt_encoder *pe = p;
	if (pe->loaded >= 1)
		pd_t5_tok_free(&pe->tok);
	if (pe->loaded >= 2)
		pd_added_tokens_free(&pe->added);
	pd_t5_free(pe->umt5);
	memset(pe, 0, sizeof(*pe));
}

int pd_wan_prompt_encode(struct pd_wan_prompt_encoder *pe, const char *prompt, int len, float *embeds,
			 int64_t *ids_out, int64_t *mask_out)
{
	int64_t D = pd_t5_get_config(pe->umt5)->d_model;
	int64_t *ids = pd_malloc((size_t)len * sizeof(int64_t), "ids");
	char *clean = NULL;
	size_t full = 0;
	int seq = 0, rc = -1;

	if (!ids)
		return -1;
	if (pd_wan_prompt_clean(prompt, &clean) ||
	    pd_wan_prompt_ids(&pe->tok, &pe->added, clean, len, ids, mask_out, &seq, &full))
		goto out;
	if (full > (size_t)len)
		pd_log(1, "pdit: note: the prompt is %zu umT5 tokens; --max-sequence-length %d keeps the first %d\n",
		       full, len, len);
	/* the real rows, then zeros (PW:187-190) */
	if (pd_t5_forward(pe->umt5, ids, seq, embeds, NULL))
		goto out;
	memset(embeds + (int64_t)seq * D, 0, (size_t)((len - seq) * D) * sizeof(float));
	if (ids_out)
		memcpy(ids_out, ids, (size_t)len * sizeof(int64_t));
	rc = 0;
out:
	free(clean);
	free(ids);
	return rc;
}

int pd_wan_prompt_embeds(struct pd_embeds *e, void *p, char *const *prompts, int n,
			 const char *negative, int len, int64_t first, int64_t count, int keep_extra)
{
	struct pd_wan_prompt_encoder *pe = p;
	int64_t J = pd_t5_get_config(pe->umt5)->d_model, s_i[2] = { n, len };
	int64_t *ids = NULL, *mask = NULL;

	memset(e, 0, sizeof(*e));
	e->batch = n;
	e->txt_len = len;
	e->joint_dim = J;
	/* no pooled embedding: width 0, but buffers all the same (copies of
	 * zero bytes need somewhere to point) */
	e->prompt = pd_calloc((size_t)(n * len * J) + 1, sizeof(float), "prompt embeddings");
	e->pooled = pd_calloc(1, sizeof(float), "prompt embeddings");
	if (!e->prompt || !e->pooled)
		goto fail;
	if (negative) {
		e->neg_txt_len = len;
		e->neg_prompt = pd_calloc((size_t)(n * len * J) + 1, sizeof(float), "prompt embeddings");
		e->neg_pooled = pd_calloc(1, sizeof(float), "prompt embeddings");
		if (!e->neg_prompt || !e->neg_pooled)
			goto fail;
	}
	if (keep_extra && (!(ids = pd_embeds_add_extra(e, "input_ids", PD_I64, 2, s_i, NULL)) ||
			   !(mask = pd_embeds_add_extra(e, "attention_mask", PD_I64, 2, s_i, NULL))))
		goto fail;
	for (int64_t b = first; b < first + count && b < n; b++) {
		pd_log(2, "pdit: encoding prompt %lld of %d\n", (long long)b + 1, n);
		if (pd_wan_prompt_encode(pe, prompts[b], len, e->prompt + b * len * J, ids ? ids + b * len : NULL,
					 mask ? mask + b * len : NULL))
			goto fail;
		if (negative) {
			/* one negative prompt for all: encoded once, copied */
			if (b == first) {
				if (pd_wan_prompt_encode(pe, negative, len, e->neg_prompt + b * len * J, NULL, NULL))
					goto fail;
			} else {
				memcpy(e->neg_prompt + b * len * J, e->neg_prompt + first * len * J,
				       (size_t)(len * J) * sizeof(float));
			}
		}
	}
	return 0;
fail:
	pd_embeds_free(e);
	return -1;
}
