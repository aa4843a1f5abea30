/*
 * pd_scheduler.h - FlowMatchEulerDiscreteScheduler as FluxPipeline drives it.
 *
 *   sigmas   = linspace(1, 1/N, N) as float32
 *   shifted  = exp(mu) / (exp(mu) + (1/sigma - 1))      dynamic shifting (dev),
 *              mu = L * m + b from the image token count L
 *            or shift * sigma / (1 + (shift - 1) sigma)  otherwise (schnell)
 *   timesteps = shifted * 1000; a terminal sigma 0 is appended
 *   step: x_next = x + (sigma[i+1] - sigma[i]) * v     in float32
 */
#ifndef PD_SCHEDULER_H
#define PD_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "pd_dit.h"

struct pd_scheduler {
	int num_train_timesteps;        /* 1000 */
	double shift;                   /* static shift (used without dynamic shifting) */
	int dynamic;                    /* use_dynamic_shifting */
	int linear_shift;               /* time_shift_type "linear" instead of "exponential" */
	double base_shift, max_shift;   /* mu at base_seq and at max_seq tokens */
	double base_seq, max_seq;       /* base_image_seq_len, max_image_seq_len */
	/* Filled by pd_scheduler_set: */
	int steps;                      /* N */
	double mu;                      /* the dynamic shift used */
	float *sigmas_in;               /* [N] linspace before shifting */
	float *sigmas;                  /* [N + 1] shifted, terminal 0 */
	float *timesteps;               /* [N] sigmas * num_train_timesteps */
};

/* Reads DIR/scheduler_config.json; refuses options pdit does not implement
 * (Karras/exponential/beta sigmas, shift_terminal, stochastic sampling). */
int pd_scheduler_load(struct pd_scheduler *s, const char *dir);
/* A family's schedule, for a model given without a scheduler folder. */
void pd_scheduler_default(struct pd_scheduler *s, const struct pd_dit_defaults *d);
int pd_scheduler_set(struct pd_scheduler *s, int steps, int64_t image_seq_len);
void pd_scheduler_free(struct pd_scheduler *s);

/* x += (sigma[i+1] - sigma[i]) * v over n values. */
void pd_scheduler_step(const struct pd_scheduler *s, int i, float *x, const float *v, size_t n);

#endif /* PD_SCHEDULER_H */
