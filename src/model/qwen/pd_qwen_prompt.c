/*
 * pd_qwen_prompt.c - Qwen-Image's prompt embeddings (QP = diffusers'
 * pipeline_qwenimage.py at v0.40, _get_qwen_prompt_embeds and
 * encode_prompt): the prompt inside the pipeline's chat template, Qwen2's
 * tokenizer, the language model's last hidden state (after its final
 * norm), the template's first 34 tokens dropped (the real template's
 * length, whatever the tokenizer: QP drops 34), at most max_seq rows kept.
 * A prompt has as many rows as it has tokens: the negative prompt keeps
 * its own count.
 */
#include "pd_config.h"
#include "pd_qwen.h"
#include "pd_safetensors.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* QP's prompt_template_encode and its start index */
static const char pd_qwen_template[] =
	"<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
	"relationships of the objects and background:<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n";
#define PD_QWEN_DROP 34
/* QP: tokenizer_max_length + the drop */
#define PD_QWEN_MAX_IDS (1024 + PD_QWEN_DROP)

int pd_qwen_prompt_encoder_load(void *p, const struct pd_model_paths *mp,
				struct pd_backend *be)
{
	struct pd_qwen_prompt_encoder *pe = p;
	memset(pe, 0, sizeof(*pe));
	if (!mp->tokenizer[0])
		return pd_errorf("no tokenizer folder: give --model DIR or --tokenizer DIR");
	if (!mp->encoder[0])
		return pd_errorf("no language model: give --model DIR, --text-encoder DIR|FILE or --llm FILE");
	if (pd_qwen_tok_load(&pe->tok, mp->tokenizer[0]))
		return -1;
	pe->loaded = 1;
	if (pd_llm_load(&pe->llm, mp->encoder[0], be))
		goto fail;
	return 0;
fail:
	pd_qwen_prompt_encoder_free(pe);
	return -1;
}

void pd_qwen_prompt_encoder_free(void *p)
{
	struct pd_qwen_prompt_encoder *pe = p;
	if (pe->loaded)
		pd_qwen_tok_free(&pe->tok);
	pd_llm_free(pe->llm);
	memset(pe, 0, sizeof(*pe));
}

int pd_qwen_prompt_ids(const struct pd_qwen_tok *tok, const char *prompt, int64_t **ids, int *n)
{
	char *text = pd_strfmt(pd_qwen_template, prompt);
	int32_t *got = NULL;
	size_t m = 0;
	int rc = -1;

	*ids = NULL;
	if (!text || pd_qwen_tok_encode(tok, text, &got, &m))
		goto out;
	if (m > PD_QWEN_MAX_IDS) {
		pd_log(1, "pdit: note: the prompt in its template is %zu tokens; the first %d are read\n", m,
		       PD_QWEN_MAX_IDS);
		m = PD_QWEN_MAX_IDS;
	}
	if (m <= PD_QWEN_DROP) {
		pd_errorf("the prompt's template is %zu tokens, not more than the %d the pipeline drops", m, PD_QWEN_DROP);
		goto out;
	}
	*ids = pd_malloc(m * sizeof(int64_t), "token ids");
	if (!*ids)
		goto out;
	for (size_t i = 0; i < m; i++)
		(*ids)[i] = got[i];
	*n = (int)m;
	rc = 0;
out:
	free(text);
	free(got);
	return rc;
}

/* The rows of one prompt: *LEN of them (at most MAX_SEQ) into OUT [*LEN, J]. */
static int pd_qwen_prompt_rows(struct pd_qwen_prompt_encoder *pe, const int64_t *ids, int n, int max_seq, float *out,
			       int *len)
{
	int64_t J = pd_llm_get_config(pe->llm)->hidden;
	float *all = pd_malloc((size_t)n * (size_t)J * sizeof(float), "the language model's output");
	int keep = (int)pd_qwen_text_rows(n, max_seq);
	double t0 = pd_now();

	if (!all)
		return -1;
	if (pd_llm_forward(pe->llm, ids, n, all, NULL)) {
		free(all);
		return -1;
	}
	/* bench/qwen.sh reads this line for the encoder's rate */
	pd_log(2, "pdit: the language model ran %d tokens in %.4f s\n", n, pd_now() - t0);
	memcpy(out, all + (int64_t)PD_QWEN_DROP * J, (size_t)keep * (size_t)J * sizeof(float));
	free(all);
	*len = keep;
	return 0;
}

int64_t pd_qwen_text_rows(int tokens, int max_seq)
{
	return tokens - PD_QWEN_DROP < max_seq ? tokens - PD_QWEN_DROP : max_seq;
}

int pd_qwen_prompt_embeds(struct pd_embeds *e, void *p, char *const *prompts, int n,
			  const char *negative, int max_seq, int64_t first, int64_t count, int keep_extra)
{
	struct pd_qwen_prompt_encoder *pe = p;
	int64_t J = pd_llm_get_config(pe->llm)->hidden, T = 0, full = 0;
	int64_t **ids = pd_calloc((size_t)n + 1, sizeof(*ids), "token ids");
	int *lens = pd_calloc((size_t)n + 1, sizeof(int), "token ids"), got, nn = 0;
	int64_t *neg_ids = NULL, *rows = pd_calloc((size_t)n + 1, sizeof(int64_t), "text lengths");

	memset(e, 0, sizeof(*e));
	if (max_seq < 1) {
		pd_errorf("--max-sequence-length must be at least 1 (got %d)", max_seq);
		goto fail;
	}
	if (!ids || !lens || !rows)
		goto fail;
	/* every prompt's count first: the batch's rows are the longest's, the
	 * others padded (QP pads with zeros and a mask) */
	for (int b = 0; b < n; b++) {
		int64_t t;

		if (pd_qwen_prompt_ids(&pe->tok, prompts[b], &ids[b], &lens[b]))
			goto fail;
		/* QP's tokenizer truncates at max_seq + 34: the causal model's
		 * first rows do not see the rest, so only the work changes */
		if (lens[b] > max_seq + PD_QWEN_DROP) {
			pd_log(1, "pdit: note: prompt %d is %d tokens in its template; the first %d are read "
			       "(--max-sequence-length %d after the template's %d)\n", b + 1, lens[b], max_seq + PD_QWEN_DROP,
			       max_seq, PD_QWEN_DROP);
			lens[b] = max_seq + PD_QWEN_DROP;
		}
		t = pd_qwen_text_rows(lens[b], max_seq);
		rows[b] = t;
		T = t > T ? t : T;
		full = lens[b] > full ? lens[b] : full;
	}
	e->batch = n;
	e->txt_len = T;
	e->joint_dim = J;
	e->prompt = pd_calloc((size_t)(n * T * J) + 1, sizeof(float), "prompt embeddings");
	e->pooled = pd_calloc(1, sizeof(float), "prompt embeddings");
	if (!e->prompt || !e->pooled || pd_embeds_set_lens(e, rows))
		goto fail;
	if (negative) {
		if (pd_qwen_prompt_ids(&pe->tok, negative, &neg_ids, &nn))
			goto fail;
		nn = nn > max_seq + PD_QWEN_DROP ? max_seq + PD_QWEN_DROP : nn;
		e->neg_txt_len = pd_qwen_text_rows(nn, max_seq);
		e->neg_prompt = pd_calloc((size_t)(n * e->neg_txt_len * J) + 1, sizeof(float), "prompt embeddings");
		e->neg_pooled = pd_calloc(1, sizeof(float), "prompt embeddings");
		if (!e->neg_prompt || !e->neg_pooled)
			goto fail;
	}
	if (keep_extra) {
		int64_t s_i[2] = { n, full }, s_m[2] = { n, T };
		int64_t *xi = pd_embeds_add_extra(e, "input_ids", PD_I64, 2, s_i, NULL);
		int64_t *xm = pd_embeds_add_extra(e, "attention_mask", PD_I64, 2, s_i, NULL);
		int64_t *pm = pd_embeds_add_extra(e, "prompt_embeds_mask", PD_I64, 2, s_m, NULL);

		if (!xi || !xm || !pm)
			goto fail;
		/* the tokenizer's ids and mask for the whole template, padded
		 * with the pad token to the batch's longest (QP pads so) */
		for (int b = 0; b < n; b++)
			for (int64_t i = 0; i < full; i++) {
				xi[b * full + i] = i < lens[b] ? ids[b][i] : (pe->tok.pad >= 0 ? pe->tok.pad : 0);
				xm[b * full + i] = i < lens[b];
			}
		for (int64_t i = 0; i < n * T; i++)
			pm[i] = i % T < rows[i / T];
	}
	for (int64_t b = first; b < first + count && b < n; b++) {
		pd_log(2, "pdit: encoding prompt %lld of %d\n", (long long)b + 1, n);
		if (pd_qwen_prompt_rows(pe, ids[b], lens[b], max_seq, e->prompt + b * T * J, &got))
			goto fail;
		if (negative) {
			/* one negative prompt for all: encoded once, copied */
			if (b == first ? pd_qwen_prompt_rows(pe, neg_ids, nn, max_seq, e->neg_prompt + b * e->neg_txt_len * J,
							     &got)
				       : (memcpy(e->neg_prompt + b * e->neg_txt_len * J,
						 e->neg_prompt + first * e->neg_txt_len * J,
						 (size_t)(e->neg_txt_len * J) * sizeof(float)),
					  0))
				goto fail;
		}
	}
	for (int b = 0; b < n; b++)
		free(ids[b]);
	free(ids);
	free(lens);
	free(rows);
	free(neg_ids);
	return 0;
fail:
	for (int b = 0; ids && b < n; b++)
		free(ids[b]);
	free(ids);
	free(lens);
	free(rows);
	free(neg_ids);
	pd_embeds_free(e);
	return -1;
}

int pd_qwen_prompt_width(const struct pd_model_paths *mp, int64_t *width)
{
	struct pd_config c, tc;
	int64_t v = 0;
	int rc;

	if (!mp->encoder[0])
		return pd_errorf("no language model: give --model DIR (with text_encoder/), --text-encoder DIR|FILE or "
				 "--llm FILE");
	if (!pd_is_dir(mp->encoder[0])) {
		/* a single file's (safetensors, GGUF): its sizes as the
		 * encoder finds them, nothing loaded */
		struct pd_llm *m;

		if (pd_llm_open_weights(&m, mp->encoder[0]))
			return -1;
		*width = pd_llm_get_config(m)->hidden;
		pd_llm_free(m);
		return 0;
	}
	if (pd_config_load_in(&c, mp->encoder[0], "config.json", "language model"))
		return -1;
	tc = c;
	rc = (!pd_config_has(&c, "hidden_size") && pd_config_has(&c, "text_config") &&
	      pd_config_object(&c, "text_config", &tc)) ||
	     pd_config_int(&tc, "hidden_size", 1, 0, 1, 1 << 20, &v);
	pd_config_free(&c);
	*width = v;
	return rc ? -1 : 0;
}
