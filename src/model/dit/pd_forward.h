/*
 * pd_forward.h - inputs of one transformer call under the golden files'
 * names (`pdit forward`, the tests), for any family.
 *
 *   in.hidden_states [B, L, C] packed tokens (FLUX's files), with
 *     in.img_ids [L, A] and in.txt_ids [T, A]; or the latents
 *     [B, C, F, h, w] (Wan's files), packed and given ids by the family
 *   in.encoder_hidden_states [B, T, J]
 *   in.pooled_projections [B, P] (models with a pooled embedding)
 *   in.timestep [1] or [B]: what the transformer receives
 *   in.guidance [1] or [B] (models with guidance embeddings)
 */
#ifndef PD_FORWARD_H
#define PD_FORWARD_H

#include "pd_dit.h"
#include "pd_safetensors.h"

struct pd_forward_inputs {
	int64_t batch;                  /* images B */
	int64_t txt_len, img_len;       /* T, L */
	float *img;                     /* [B, L, C] packed */
	float *txt;                     /* [B, T, J] */
	float *pooled;                  /* [B, P], or NULL without a pooled embedding */
	float *img_ids;                 /* [L, A] */
	float *txt_ids;                 /* [T, A] */
	float *timestep;                /* [B] */
	float *guidance;                /* [B] (zeros without guidance embeddings) */
	int unpacked;                   /* the file gave latents [B, C, F, h, w]: out.sample is written so */
	struct pd_latent_shape ls;      /* their geometry, when unpacked */
	const struct pd_dit_family *fam; /* who packs them (unpacked) */
};

/* Reads and checks the inputs against the model's sizes INFO (FAM packs
 * and places latents given unpacked). */
int pd_forward_inputs_read(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_dit_family *fam,
			   const struct pd_dit_info *info);
void pd_forward_inputs_free(struct pd_forward_inputs *in);
/* The single-image view of batch entry B. */
struct pd_dit_call pd_forward_inputs_image(const struct pd_forward_inputs *in, const struct pd_dit_info *info,
					     int64_t b);

/* Reads a whole float tensor NAME of exactly the given shape into a new
 * buffer (errors name the file and tensor). */
int pd_st_load_f32(const struct pd_st *st, const char *name, int ndim, const int64_t *shape, float **out);

#endif /* PD_FORWARD_H */
