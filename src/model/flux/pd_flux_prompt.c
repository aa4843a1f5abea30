/*
 * pd_flux_prompt.c - prompts to FLUX.1's embeddings.
 */
#include "pd_flux_prompt.h"
#include "pd_config.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

int pd_flux_prompt_default_length(int guidance_embeds)
{
	return guidance_embeds ? 512 : 256;
}

/* A width from DIR/config.json KEY, or from a single file's tensor SUFFIX
 * (column COL of its shape). */
static int pd_flux_prompt_width(const char *path, const char *what, const char *key, const char *suffix, int col,
			   int64_t *out)
{
	if (!path)
		return pd_errorf("no %s: give --model DIR (with model_index.json naming it) or its own flag", what);
	if (pd_is_dir(path)) {
		struct pd_config c;
		int rc;

		if (pd_config_load_in(&c, path, "config.json", what))
			return -1;
		rc = pd_config_int(&c, key, 1, 0, 1, 1 << 20, out);
		pd_config_free(&c);
		return rc;
	} else {
		struct pd_st *st;
		const struct pd_st_tensor *t;
		int rc = 0;

		if (pd_st_open(&st, path))
			return -1;
		t = pd_st_find_suffix(st, suffix);
		if (!t || t->ndim != 2)
			rc = pd_errorf("%s: not a %s (no ...%s)", path, what, suffix);
		else
			*out = t->shape[col];
		pd_st_close(st);
		return rc;
	}
}

int pd_flux_prompt_widths(const struct pd_model_paths *mp, int64_t *joint_dim, int64_t *pooled_dim)
{
	return pd_flux_prompt_width(mp->encoder[1], "T5 text encoder (text_encoder_2)", "d_model",
			       "encoder.final_layer_norm.weight", 0, joint_dim) ||
	       pd_flux_prompt_width(mp->encoder[0], "CLIP text encoder (text_encoder)", "hidden_size",
			       "embeddings.token_embedding.weight", 1, pooled_dim);
}

int pd_flux_prompt_encoder_load(void *p, const struct pd_model_paths *mp, struct pd_backend *be)
{
	struct pd_flux_prompt_encoder *pe = p;
	memset(pe, 0, sizeof(*pe));
	if (!mp->tokenizer[0] || !mp->tokenizer[1])
		return pd_errorf("no %s folder: give --model DIR or --tokenizer%s DIR",
				 !mp->tokenizer[0] ? "tokenizer" : "tokenizer_2", !mp->tokenizer[0] ? "" : "-2");
	if (!mp->encoder[0] || !mp->encoder[1])
		return pd_errorf("no %s: give --model DIR or %s", !mp->encoder[0] ? "CLIP text encoder" : "T5 encoder",
				 !mp->encoder[0] ? "--text-encoder DIR|--clip_l FILE" : "--text-encoder-2 DIR|--t5xxl FILE");
	if (pd_clip_tok_load(&pe->clip_tok, mp->tokenizer[0]))
		return -1;
	pe->loaded = 1;
	if (pd_t5_tok_load(&pe->t5_tok, mp->tokenizer[1]))
		goto fail;
	pe->loaded = 2;
	if (pd_clip_load(&pe->clip, mp->encoder[0], be) || pd_t5_load(&pe->t5, mp->encoder[1], be))
		goto fail;
	if (pd_clip_get_config(pe->clip)->vocab <= pe->clip_tok.eos) {
		pd_errorf("%s: %d token embeddings, but the tokenizer in %s uses ids up to %d", mp->encoder[0],
			  pd_clip_get_config(pe->clip)->vocab, mp->tokenizer[0], pe->clip_tok.eos);
		goto fail;
	}
	if (pd_t5_get_config(pe->t5)->vocab < pe->t5_tok.n_pieces) {
		pd_errorf("%s: %d token embeddings, but the tokenizer in %s has %d pieces", mp->encoder[1],
			  pd_t5_get_config(pe->t5)->vocab, mp->tokenizer[1], pe->t5_tok.n_pieces);
		goto fail;
	}
	return 0;
fail:
	pd_flux_prompt_encoder_free(pe);
	return -1;
}

void pd_flux_prompt_encoder_free(void *p)
{
	struct pd_flux_prompt_encoder *pe = p;
	if (pe->loaded >= 1)
		pd_clip_tok_free(&pe->clip_tok);
	if (pe->loaded >= 2)
		pd_t5_tok_free(&pe->t5_tok);
	pd_clip_free(pe->clip);
	pd_t5_free(pe->t5);
	memset(pe, 0, sizeof(*pe));
}

int pd_flux_prompt_encode(struct pd_flux_prompt_encoder *pe, const char *prompt, int max_seq, float *embeds, float *pooled,
		     int64_t *clip_ids, int64_t *t5_ids)
{
	int n77 = pe->clip_tok.max_len;
	int64_t *cids = pd_malloc((size_t)n77 * sizeof(int64_t), "ids"), *tids = pd_malloc((size_t)max_seq * sizeof(int64_t), "ids");
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = -1;

	if (!cids || !tids)
		goto out;
	if (n77 > pd_clip_get_config(pe->clip)->max_pos)
		n77 = pd_clip_get_config(pe->clip)->max_pos;
	/* CLIP: 77 ids, BOS ... EOS, padded with the pad token */
	if (pd_clip_tok_encode(&pe->clip_tok, prompt, &ids, &n))
		goto out;
	pd_tok_fit(ids, n, pe->clip_tok.eos, pe->clip_tok.pad, cids, n77);
	free(ids);
	ids = NULL;
	if (n > (size_t)n77)
		pd_log(1, "pdit: note: the prompt is %zu CLIP tokens; CLIP sees the first %d\n", n, n77);
	/* T5: sentencepiece ids cut to max_seq - 1, </s>, padded with <pad> */
	if (pd_t5_tok_encode(&pe->t5_tok, prompt, &ids, &n))
		goto out;
	{
		int32_t *with = realloc(ids, (n + 1) * sizeof(int32_t));

		if (!with) {
			pd_errorf("out of memory tokenizing");
			goto out;
		}
		ids = with;
		ids[n++] = pe->t5_tok.eos;
	}
	pd_tok_fit(ids, n, pe->t5_tok.eos, pe->t5_tok.pad, tids, max_seq);
	if (n > (size_t)max_seq)
		pd_log(1, "pdit: note: the prompt is %zu T5 tokens; --max-sequence-length %d keeps the first %d\n", n,
		       max_seq, max_seq);
	if (pd_clip_forward(pe->clip, cids, n77, NULL, pooled, NULL) ||
	    pd_t5_forward(pe->t5, tids, max_seq, embeds, NULL))
		goto out;
	if (clip_ids)
		memcpy(clip_ids, cids, (size_t)n77 * sizeof(int64_t));
	if (t5_ids)
		memcpy(t5_ids, tids, (size_t)max_seq * sizeof(int64_t));
	rc = 0;
out:
	free(ids);
	free(cids);
	free(tids);
	return rc;
}

int pd_flux_prompt_embeds(struct pd_embeds *e, void *p, char *const *prompts, int n,
		     const char *negative, int max_seq, int64_t first, int64_t count, int keep_extra)
{
	struct pd_flux_prompt_encoder *pe = p;
	int64_t J = pd_t5_get_config(pe->t5)->d_model, P = pd_clip_get_config(pe->clip)->hidden;
	int64_t s_c[2] = { n, 77 }, s_t[2] = { n, max_seq }, s_e[3] = { n, max_seq, J }, s_p[2] = { n, P };
	int64_t *cids = NULL, *tids = NULL;

	memset(e, 0, sizeof(*e));
	e->batch = n;
	e->txt_len = max_seq;
	e->joint_dim = J;
	e->pooled_dim = P;
	e->prompt = pd_calloc((size_t)(n * max_seq * J) + 1, sizeof(float), "prompt embeddings");
	e->pooled = pd_calloc((size_t)(n * P) + 1, sizeof(float), "prompt embeddings");
	if (!e->prompt || !e->pooled)
		goto fail;
	if (negative) {
		e->neg_txt_len = max_seq;
		e->neg_prompt = pd_calloc((size_t)(n * max_seq * J) + 1, sizeof(float), "prompt embeddings");
		e->neg_pooled = pd_calloc((size_t)(n * P) + 1, sizeof(float), "prompt embeddings");
		if (!e->neg_prompt || !e->neg_pooled)
			goto fail;
	}
	/* the ids the tokenizers made and the encoders' outputs (the
	 * embeddings themselves), under transformers' names */
	if (keep_extra && pe->clip_tok.max_len != 77) {
		pd_errorf("the CLIP tokenizer's model_max_length is %d; FLUX's CLIP takes 77", pe->clip_tok.max_len);
		goto fail;
	}
	if (keep_extra && (!(cids = pd_embeds_add_extra(e, "clip.input_ids", PD_I64, 2, s_c, NULL)) ||
			   !pd_embeds_add_extra(e, "clip.pooler_output", PD_F32, 2, s_p, e->pooled) ||
			   !(tids = pd_embeds_add_extra(e, "t5.input_ids", PD_I64, 2, s_t, NULL)) ||
			   !pd_embeds_add_extra(e, "t5.last_hidden_state", PD_F32, 3, s_e, e->prompt)))
		goto fail;
	for (int64_t b = first; b < first + count && b < n; b++) {
		pd_log(2, "pdit: encoding prompt %lld of %d\n", (long long)b + 1, n);
		if (pd_flux_prompt_encode(pe, prompts[b], max_seq, e->prompt + b * max_seq * J, e->pooled + b * P,
					  cids ? cids + b * 77 : NULL, tids ? tids + b * max_seq : NULL))
			goto fail;
		if (negative) {
			/* one negative prompt for all: encoded once, copied */
			if (b == first) {
				if (pd_flux_prompt_encode(pe, negative, max_seq, e->neg_prompt + b * max_seq * J,
						     e->neg_pooled + b * P, NULL, NULL))
					goto fail;
			} else {
				memcpy(e->neg_prompt + b * max_seq * J, e->neg_prompt + first * max_seq * J,
				       (size_t)(max_seq * J) * sizeof(float));
				memcpy(e->neg_pooled + b * P, e->neg_pooled + first * P, (size_t)P * sizeof(float));
			}
		}
	}
	return 0;
fail:
	pd_embeds_free(e);
	return -1;
}

