/*
 * pd_qwen.h - Qwen-Image (diffusers' QwenImagePipeline): its transformer
 * is FLUX's double-stream block in Qwen-Image's names (pd_flux.c, its
 * config's qwen layout), its VAE Wan2.1's on one frame, its text encoder a
 * language model (pd_llm.h) behind Qwen2's tokenizer and the pipeline's
 * template. This family's record says where each piece is.
 */
#ifndef PD_QWEN_H
#define PD_QWEN_H

#include "pd_dit.h"
#include "pd_embeds.h"
#include "pd_llm.h"
#include "pd_model_paths.h"
#include "pd_tokenizer.h"

extern const struct pd_dit_family pd_qwen_family;
extern const struct pd_family_tiny pd_qwen_tiny_models;

/* The prompt side: Qwen2's tokenizer and the language model. */
struct pd_qwen_prompt_encoder {
	struct pd_qwen_tok tok;         /* tokenizer/ */
	struct pd_llm *llm;             /* text_encoder/ (Qwen2.5-VL's language model) */
	int loaded;                     /* tok is loaded */
};

int pd_qwen_prompt_encoder_load(void *pe, const struct pd_model_paths *mp,
				struct pd_backend *be);
void pd_qwen_prompt_encoder_free(void *pe);
/* The ids of PROMPT inside the pipeline's template (*IDS malloc'd, *N of
 * them; at most 1024 + 34 read, as the pipeline truncates). */
int pd_qwen_prompt_ids(const struct pd_qwen_tok *tok, const char *prompt, int64_t **ids, int *n);
/* The text rows of a prompt of TOKENS ids in its template: those after the
 * template's first 34, at most MAX_SEQ. */
int64_t pd_qwen_text_rows(int tokens, int max_seq);
/* E for PROMPTS[first, first + count) of N (and NEGATIVE, its own length):
 * each prompt's pd_qwen_text_rows, the shorter ones padded with zeros to
 * the longest (E's lens). KEEP_EXTRA: input_ids and attention_mask of the
 * whole template and prompt_embeds_mask, the pipeline's names
 * (prompt_embeds are the embeddings). */
int pd_qwen_prompt_embeds(struct pd_embeds *e, void *pe, char *const *prompts, int n,
			  const char *negative, int max_seq, int64_t first, int64_t count, int keep_extra);
/* The embeddings' width (the language model's hidden size) from its config
 * or its header. */
int pd_qwen_prompt_width(const struct pd_model_paths *mp, int64_t *width);

#endif /* PD_QWEN_H */
