/*
 * pd_embeds.h - prompt embeddings: what a family's text encoders make, or
 * a file holds (pdit encode writes them), and a call's text rows come from.
 */
#ifndef PD_EMBEDS_H
#define PD_EMBEDS_H

#include <stdint.h>

#include "pd_dit.h"
#include "pd_dtype.h"

#define PD_EMBEDS_MAX_EXTRA 8

/* A tensor the text encoders made besides the embeddings (token ids, an
 * encoder's raw output), kept for comparison with the reference encoders. */
struct pd_embeds_extra {
	char name[48];                  /* its safetensors name ("clip.input_ids") */
	enum pd_dtype dtype;            /* PD_I64 or PD_F32 */
	int ndim;                       /* 2 or 3 */
	int64_t shape[3];               /* [batch, ...] */
	void *data;                     /* malloc'd, freed with the embeddings, unless borrowed */
	int borrowed;                   /* data is the embeddings' own (another name for them) */
};

/* Prompt embeddings: what the text encoders produce (or a file holds). */
struct pd_embeds {
	int64_t batch;                  /* prompts B */
	int64_t txt_len;                /* T */
	int64_t joint_dim;              /* J */
	int64_t pooled_dim;             /* P */
	float *prompt;                  /* [B, T, J] prompt_embeds */
	int64_t *lens;                  /* [B] each prompt's own text rows, the rest of its T zeros that
					 * no call reads (a batch of prompts of different lengths, padded
					 * as diffusers pads them with a mask), or NULL: T each */
	float *pooled;                  /* [B, P] pooled_prompt_embeds */
	int64_t neg_txt_len;            /* T of the negative prompt */
	float *neg_prompt;              /* [B, Tn, J] negative_prompt_embeds, or NULL */
	float *neg_pooled;              /* [B, P] negative_pooled_prompt_embeds, or NULL */
	int n_extra;                    /* extras the encoders kept (when asked) */
	struct pd_embeds_extra extra[PD_EMBEDS_MAX_EXTRA];
};

/* Reads prompt_embeds [B, T, J] and pooled_prompt_embeds [B, P] (the golden
 * names in.prompt_embeds / in.pooled_prompt_embeds are accepted too), and
 * the negative pair when present (a batch of 1 is repeated for every
 * prompt); prompt_embeds_mask [B, T] (padding at the end of a row) as the
 * prompts' lengths, negative_prompt_embeds_mask as the negative's (one
 * length for the batch). */
int pd_embeds_load(struct pd_embeds *e, const char *path);
/* Checks the widths against the transformer's config. */
int pd_embeds_check(const struct pd_embeds *e, const struct pd_dit_info *info, const char *path);
void pd_embeds_free(struct pd_embeds *e);
/* The rows of mask NAME [B, T] in ST (nonzero: a token; also under the
 * golden files' "in." + NAME) before its padding, into LENS[B]; no mask: T
 * each. A token after padding is refused naming the file (only trailing
 * padding is cut), as is a row of none. */
struct pd_st;
int pd_embeds_mask_lens(const struct pd_st *st, const char *name, int64_t B, int64_t T, int64_t *lens);
/* The text rows prompt B's calls read. */
int64_t pd_embeds_len(const struct pd_embeds *e, int64_t b);
/* Sets E's lens from LENS[batch] (copied), or NULL where every one is
 * txt_len; -1 with a message on out-of-memory. */
int pd_embeds_set_lens(struct pd_embeds *e, const int64_t *lens);
/* A new extra of SHAPE (zeros), or NULL with a message. With DATA not
 * NULL the extra is another name for DATA (E's own, freed with it). */
void *pd_embeds_add_extra(struct pd_embeds *e, const char *name, enum pd_dtype dtype, int ndim, const int64_t *shape,
			  void *data);
/* Writes E to PATH under the names pd_embeds_load reads (and the extras
 * under theirs), with the prompts as metadata: a file generate --embeds
 * takes. PROMPTS[0..n) may be NULL. */
int pd_embeds_save(const struct pd_embeds *e, const char *path, char *const *prompts, int n, const char *negative);
/* FAM's prompt encoder over PROMPTS (pd_prompt_encoder_kind.embeds): the
 * one in *HELD, or loaded, then kept in *HELD when HELD is given (a
 * long-lived engine reads its weights once) or freed. */
int pd_dit_encode(const struct pd_dit_family *fam, struct pd_embeds *e, void **held, const struct pd_model_paths *mp,
		  struct pd_backend *be, char *const *prompts, int n, const char *negative, int max_seq, int64_t first,
		  int64_t count, int keep_extra);
/* What pd_dit_encode kept in HELD (may be NULL). */
void pd_dit_encoders_free(const struct pd_dit_family *fam, void *held);
/* Makes the batch N copies of its first prompt (benchmarks of data parallelism). */
int pd_embeds_repeat(struct pd_embeds *e, int64_t n);

#endif /* PD_EMBEDS_H */
