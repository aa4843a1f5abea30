/*
 * pd_flux_prompt.h - prompts to FLUX.1's embeddings, as FluxPipeline.encode_prompt
 * computes them (diffusers pipeline_flux.py): CLIP's pooled output of the
 * 77 padded ids (no attention mask) becomes pooled_prompt_embeds, T5's last
 * hidden state of the max_sequence_length padded ids (no attention mask:
 * the padding is attended to) becomes prompt_embeds; both encoders see the
 * same text.
 */
#ifndef PD_FLUX_PROMPT_H
#define PD_FLUX_PROMPT_H

#include "pd_backend.h"
#include "pd_model_paths.h"
#include "pd_embeds.h"
#include "pd_clip.h"
#include "pd_t5.h"
#include "pd_tokenizer.h"

struct pd_flux_prompt_encoder {
	struct pd_clip_tok clip_tok;    /* tokenizer/ */
	struct pd_t5_tok t5_tok;        /* tokenizer_2/ */
	struct pd_clip *clip;           /* text_encoder/ */
	struct pd_t5 *t5;               /* text_encoder_2/ */
	int loaded;                     /* what pd_flux_prompt_encoder_free must release */
};

/* The widths the encoders will produce, from their config.json files (or
 * tensor shapes), without loading them: T5's d_model (prompt_embeds) and
 * CLIP's hidden size (pooled_prompt_embeds). */
int pd_flux_prompt_widths(const struct pd_model_paths *mp, int64_t *joint_dim, int64_t *pooled_dim);

/* Loads both tokenizers and both encoders; every component must be known. */
int pd_flux_prompt_encoder_load(void *pe, const struct pd_model_paths *mp, struct pd_backend *be);
void pd_flux_prompt_encoder_free(void *pe);

/* One prompt: EMBEDS [max_seq, d_model], POOLED [hidden]; CLIP_IDS [77] and
 * T5_IDS [max_seq] receive the ids when not NULL. */
int pd_flux_prompt_encode(struct pd_flux_prompt_encoder *pe, const char *prompt, int max_seq, float *embeds, float *pooled,
		     int64_t *clip_ids, int64_t *t5_ids);

/* E for PROMPTS[0..n) (and, when NEGATIVE is not NULL, the same negative
 * prompt for each), encoding only prompts [first, first + count) and
 * leaving the other rows zero (data parallelism encodes per group). With
 * KEEP_EXTRA, E's extras get the token ids and the encoders' outputs under
 * transformers' names (clip.input_ids, t5.input_ids, clip.pooler_output,
 * t5.last_hidden_state). */
int pd_flux_prompt_embeds(struct pd_embeds *e, void *pe, char *const *prompts, int n,
		     const char *negative, int max_seq, int64_t first, int64_t count, int keep_extra);

/* The default max_sequence_length: 512 for guidance-distilled (dev-style)
 * models, 256 for the others (schnell), as Black Forest Labs run them. */
int pd_flux_prompt_default_length(int guidance_embeds);

#endif /* PD_FLUX_PROMPT_H */
