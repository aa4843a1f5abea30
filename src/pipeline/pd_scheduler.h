/*
 * pd_scheduler.h - the samplers of the pipelines pdit runs:
 *
 * FlowMatchEulerDiscreteScheduler as FluxPipeline drives it:
 *
 *   sigmas   = linspace(1, 1/N, N) as float32
 *   shifted  = exp(mu) / (exp(mu) + (1/sigma - 1))      dynamic shifting (dev),
 *              mu = L * m + b from the image token count L
 *            or shift * sigma / (1 + (shift - 1) sigma)  otherwise (schnell)
 *   timesteps = shifted * 1000; a terminal sigma 0 is appended
 *   step: x_next = x + (sigma[i+1] - sigma[i]) * v     in float32
 *
 * UniPCMultistepScheduler with flow sigmas as WanPipeline drives it
 * (pd_sched_unipc.c; tests/golden/wan-tiny/README.md §6): predictor and
 * corrector (bh2 or bh1) of up to solver_order, lower orders at the start
 * and (lower_order_final) at the end; it keeps, per image, the last
 * sample and the last x0 predictions (struct pd_sched_state).
 */
#ifndef PD_SCHEDULER_H
#define PD_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "pd_dit.h"

enum pd_sched_kind {
	PD_SCHED_EULER,                 /* FlowMatchEulerDiscreteScheduler */
	PD_SCHED_UNIPC,                 /* UniPCMultistepScheduler, flow sigmas */
};

#define PD_UNIPC_MAX_ORDER 3

struct pd_scheduler {
	enum pd_sched_kind kind;        /* which sampler */
	int num_train_timesteps;        /* 1000 */
	double shift;                   /* static shift (used without dynamic shifting) */
	int dynamic;                    /* use_dynamic_shifting */
	int linear_shift;               /* time_shift_type "linear" instead of "exponential" */
	double base_shift, max_shift;   /* mu at base_seq and at max_seq tokens */
	double base_seq, max_seq;       /* base_image_seq_len, max_image_seq_len */
	double shift_terminal;          /* the shifted sigmas stretched so the last is this; 0: not */
	/* UniPC (shift is its flow_shift): */
	int solver_order;               /* 1 to PD_UNIPC_MAX_ORDER */
	int lower_order_final;          /* lower orders for the last steps */
	int bh1;                        /* solver_type bh1 (B(h) = h) instead of bh2 (expm1) */
	/* Filled by pd_scheduler_set: */
	int steps;                      /* N */
	double mu;                      /* the dynamic shift used */
	float *sigmas_in;               /* [N] linspace before shifting */
	float *sigmas;                  /* [N + 1] shifted, terminal 0 */
	float *timesteps;               /* [N] sigmas * num_train_timesteps (UniPC: truncated to integers) */
};

/* What a multistep sampler keeps for one image between steps. */
struct pd_sched_state {
	size_t n;                       /* values per image */
	float *last;                    /* the sample the last predictor started from */
	float *m[PD_UNIPC_MAX_ORDER + 1]; /* x0 predictions, m[0] the newest (solver_order + 1 of them:
					 * the corrector needs the one before the newest's history) */
	int have;                       /* predictions held */
	int this_order;                 /* the last predictor's order */
	int lower;                      /* lower_order_nums */
};

/* State for one image of N values (NULL with a message when out of
 * memory); Euler needs none but takes one. */
struct pd_sched_state *pd_sched_state_new(const struct pd_scheduler *s, size_t n);
void pd_sched_state_free(struct pd_sched_state *st);

/* Reads DIR/scheduler_config.json; refuses options pdit does not implement
 * (Karras/exponential/beta sigmas, stochastic sampling). */
int pd_scheduler_load(struct pd_scheduler *s, const char *dir);
/* A family's schedule D and SAMPLER, for a model given without a
 * scheduler folder. */
void pd_scheduler_default(struct pd_scheduler *s, const struct pd_dit_defaults *d, enum pd_sampler sampler);
int pd_scheduler_set(struct pd_scheduler *s, int steps, int64_t image_seq_len);
/* The schedule from step FIRST on (img2img's strength: diffusers'
 * get_timesteps and set_begin_index): the steps before it dropped. */
int pd_scheduler_cut(struct pd_scheduler *s, int first);
void pd_scheduler_free(struct pd_scheduler *s);

/* Step I of image state ST: X (n values) from sigma[i] to sigma[i+1]
 * given the model output V. Steps run in order from 0 for each image. */
void pd_scheduler_step(const struct pd_scheduler *s, struct pd_sched_state *st, int i, float *x, const float *v,
		       size_t n);

/* The UniPC scalars of one predictor (KIND 'p': sigma[i] -> sigma[i+1])
 * or corrector ('c': sigma[i-1] -> sigma[i]) update of ORDER, as torch
 * computes them in float32 (for the tests). */
struct pd_unipc_coeffs {
	float sigma_t, sigma_s0, alpha_t, lambda_t, lambda_s0, h, h_phi_1, B_h;
	float rks[PD_UNIPC_MAX_ORDER];  /* order of them, the last 1 */
	float rhos[PD_UNIPC_MAX_ORDER]; /* predictor: order - 1; corrector: order */
	int order;
};
void pd_unipc_coeffs(const struct pd_scheduler *s, int i, int order, char kind, struct pd_unipc_coeffs *co);
/* The UniPC parts of pd_scheduler_load and pd_scheduler_set. */
struct pd_config;
int pd_unipc_config(struct pd_scheduler *s, const struct pd_config *c);
int pd_unipc_set(struct pd_scheduler *s, int steps);
/* The N-step arrays (freed first), steps = N; -1 when out of memory. */
int pd_scheduler_alloc(struct pd_scheduler *s, int steps);
void pd_unipc_step(const struct pd_scheduler *s, struct pd_sched_state *st, int i, float *x, const float *v,
		   size_t n);

#endif /* PD_SCHEDULER_H */
