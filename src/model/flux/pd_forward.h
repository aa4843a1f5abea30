/*
 * pd_forward.h - inputs of one transformer call under the golden files'
 * names (`pdit forward`, the tests).
 *
 *   in.hidden_states [B, L, C]   in.encoder_hidden_states [B, T, J]
 *   in.pooled_projections [B, P] in.timestep [1] or [B]
 *   in.guidance [1] or [B] (models with guidance embeddings)
 *   in.img_ids [L, A]            in.txt_ids [T, A]
 */
#ifndef PD_FORWARD_H
#define PD_FORWARD_H

#include "pd_flux.h"
#include "pd_safetensors.h"

struct pd_forward_inputs {
	int64_t batch;                  /* images B */
	int64_t txt_len, img_len;       /* T, L */
	float *img;                     /* [B, L, C] */
	float *txt;                     /* [B, T, J] */
	float *pooled;                  /* [B, P] */
	float *img_ids;                 /* [L, A] */
	float *txt_ids;                 /* [T, A] */
	float *timestep;                /* [B] */
	float *guidance;                /* [B] (zeros without guidance embeddings) */
};

/* Reads and checks the inputs against the model's config. */
int pd_forward_inputs_read(struct pd_forward_inputs *in, const struct pd_st *st, const struct pd_flux_config *cfg);
void pd_forward_inputs_free(struct pd_forward_inputs *in);
/* The single-image view of batch entry B. */
struct pd_dit_call pd_forward_inputs_image(const struct pd_forward_inputs *in, const struct pd_flux_config *cfg,
					     int64_t b);

/* Reads a whole float tensor NAME of exactly the given shape into a new
 * buffer (errors name the file and tensor). */
int pd_st_load_f32(const struct pd_st *st, const char *name, int ndim, const int64_t *shape, float **out);

#endif /* PD_FORWARD_H */
