/*
 * pd_embeds.h - prompt embeddings: what a family's text encoders make, or
 * a file holds (pdit encode writes them), and a call's text rows come from.
 */
#ifndef PD_EMBEDS_H
#define PD_EMBEDS_H

#include <stdint.h>

#include "pd_dit.h"

/* Prompt embeddings: what the text encoders produce (or a file holds). */
struct pd_embeds {
	int64_t batch;                  /* prompts B */
	int64_t txt_len;                /* T */
	int64_t joint_dim;              /* J */
	int64_t pooled_dim;             /* P */
	float *prompt;                  /* [B, T, J] prompt_embeds */
	float *pooled;                  /* [B, P] pooled_prompt_embeds */
	int64_t neg_txt_len;            /* T of the negative prompt */
	float *neg_prompt;              /* [B, Tn, J] negative_prompt_embeds, or NULL */
	float *neg_pooled;              /* [B, P] negative_pooled_prompt_embeds, or NULL */
};

/* Reads prompt_embeds [B, T, J] and pooled_prompt_embeds [B, P] (the golden
 * names in.prompt_embeds / in.pooled_prompt_embeds are accepted too), and
 * the negative pair when present (a batch of 1 is repeated for every
 * prompt). */
int pd_embeds_load(struct pd_embeds *e, const char *path);
/* Checks the widths against the transformer's config. */
int pd_embeds_check(const struct pd_embeds *e, const struct pd_dit_info *info, const char *path);
void pd_embeds_free(struct pd_embeds *e);
/* Makes the batch N copies of its first prompt (benchmarks of data parallelism). */
int pd_embeds_repeat(struct pd_embeds *e, int64_t n);

#endif /* PD_EMBEDS_H */
