/*
 * pd_wan_prompt.h - prompts to Wan2.1's embeddings, as WanPipeline
 * computes them (diffusers v0.40 pipeline_wan.py; the formulas with line
 * references in tests/golden/wan-tiny/README.md §1-3):
 *
 *   prompt_clean: html.unescape twice, strip, White_Space runs -> " "
 *     (without ftfy, which the reference did not have);
 *   the umT5 tokenizer (T5Tokenizer, legacy): split on the added tokens,
 *     sentencepiece with byte fallback, "</s>", cut and padded to L;
 *   UMT5's last hidden state of the real tokens, the rows after them zero
 *     (shape [L, d_model]: the zero rows stay and the transformer's
 *     cross-attention sees them).
 *
 * UMT5 runs on the real tokens alone: with the pipeline's mask the padded
 * keys get weight exactly 0, so their rows are the same and the padded
 * query rows are dropped anyway.
 */
#ifndef PD_WAN_PROMPT_H
#define PD_WAN_PROMPT_H

#include "pd_backend.h"
#include "pd_embeds.h"
#include "pd_model_paths.h"
#include "pd_t5.h"
#include "pd_tokenizer.h"

struct pd_wan_prompt_encoder {
	struct pd_t5_tok tok;           /* tokenizer/spiece.model */
	struct pd_added_tokens added;   /* tokenizer/tokenizer_config.json's added tokens */
	struct pd_t5 *umt5;             /* text_encoder/ */
	int loaded;                     /* what pd_wan_prompt_encoder_free must release */
};

/* WanPipeline's prompt_clean (no ftfy): *OUT malloc'd. */
int pd_wan_prompt_clean(const char *text, char **out);

/* The tokenizer call of _get_t5_prompt_embeds for the cleaned TEXT: IDS
 * and MASK [len], *SEQ_LEN the real tokens (</s> included). TOK and ADDED
 * as loaded; *FULL (may be NULL) gets the untruncated count. */
int pd_wan_prompt_ids(const struct pd_t5_tok *tok, const struct pd_added_tokens *added, const char *text, int len,
		      int64_t *ids, int64_t *mask, int *seq_len, size_t *full);

/* UMT5's width (d_model) from text_encoder/config.json or its tensors. */
int pd_wan_prompt_width(const struct pd_model_paths *mp, int64_t *width);

int pd_wan_prompt_encoder_load(void *pe, const struct pd_model_paths *mp,
			       struct pd_backend *be);
void pd_wan_prompt_encoder_free(void *pe);

/* One prompt (raw text): EMBEDS [len, d_model] as encode_prompt returns
 * it; IDS and MASK [len] when not NULL. */
int pd_wan_prompt_encode(struct pd_wan_prompt_encoder *pe, const char *prompt, int len, float *embeds,
			 int64_t *ids, int64_t *mask);

/* E for PROMPTS[0..n) and NEGATIVE (NULL: no negative branch; "" is the
 * pipeline's default negative prompt), encoding prompts [first, first +
 * count) only. With KEEP_EXTRA, E's extras get input_ids and
 * attention_mask (int64 [n, len]). */
int pd_wan_prompt_embeds(struct pd_embeds *e, void *pe, char *const *prompts, int n,
			 const char *negative, int len, int64_t first, int64_t count, int keep_extra);

#endif /* PD_WAN_PROMPT_H */
