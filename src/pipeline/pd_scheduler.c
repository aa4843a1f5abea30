/*
 * pd_scheduler.c - FlowMatchEulerDiscreteScheduler (diffusers v0.40, SCH:283-522)
 * with FluxPipeline's sigmas and mu (PF:73-84, 821-835).
 */
#include "pd_scheduler.h"
#include "pd_config.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pd_scheduler_default(struct pd_scheduler *s, const struct pd_dit_defaults *d, enum pd_sampler sampler)
{
	memset(s, 0, sizeof(*s));
	s->num_train_timesteps = 1000;
	s->shift = d->shift;
	s->dynamic = d->dynamic_shift;
	s->base_shift = d->base_shift;
	s->max_shift = d->max_shift;
	s->base_seq = d->base_seq;
	s->max_seq = d->max_seq;
	s->shift_terminal = d->shift_terminal;
	if (sampler == PD_SAMPLER_UNIPC) {
		s->kind = PD_SCHED_UNIPC;
		s->solver_order = 2;
		s->lower_order_final = 1;
	}
}

int pd_scheduler_load(struct pd_scheduler *s, const char *dir)
{
	static const char *unsupported[] = { "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
					     "invert_sigmas", "stochastic_sampling" };
	struct pd_config c;
	const char *cls = NULL, *tst = NULL;
	int64_t v;
	int rc = -1, flag;

	/* the class's own defaults (its __init__), under the folder's keys */
	static const struct pd_dit_defaults class_defaults = {
		.shift = 1.0, .base_shift = 0.5, .max_shift = 1.15, .base_seq = 256, .max_seq = 4096, .frames = 1,
	};

	pd_scheduler_default(s, &class_defaults, PD_SAMPLER_EULER);
	if (pd_config_load_in(&c, dir, "scheduler_config.json", "scheduler"))
		return -1;
	if (pd_config_string(&c, "_class_name", 0, "FlowMatchEulerDiscreteScheduler", &cls))
		goto out;
	if (strcmp(cls, "UniPCMultistepScheduler") == 0) {
		rc = pd_unipc_config(s, &c);
		goto out;
	}
	if (strcmp(cls, "FlowMatchEulerDiscreteScheduler") != 0) {
		pd_errorf("%s: scheduler %s is not supported (pdit implements FlowMatchEulerDiscreteScheduler and "
			  "UniPCMultistepScheduler)",
			  c.path, cls);
		goto out;
	}
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		if (pd_config_bool(&c, unsupported[i], 0, 0, &flag))
			goto out;
		if (flag) {
			pd_errorf("%s: \"%s\": true is not supported", c.path, unsupported[i]);
			goto out;
		}
	}
	/* (null: none) */
	if (pd_config_double(&c, "shift_terminal", 0, 0.0, &s->shift_terminal))
		goto out;
	if (!(s->shift_terminal >= 0 && s->shift_terminal < 1)) {
		pd_errorf("%s: shift_terminal must be in [0, 1)", c.path);
		goto out;
	}
	if (pd_config_int(&c, "num_train_timesteps", 0, 1000, 1, 1000000, &v))
		goto out;
	s->num_train_timesteps = (int)v;
	if (pd_config_double(&c, "shift", 0, 1.0, &s->shift) ||
	    pd_config_bool(&c, "use_dynamic_shifting", 0, 0, &s->dynamic) ||
	    pd_config_double(&c, "base_shift", 0, 0.5, &s->base_shift) ||
	    pd_config_double(&c, "max_shift", 0, 1.15, &s->max_shift) ||
	    pd_config_double(&c, "base_image_seq_len", 0, 256, &s->base_seq) ||
	    pd_config_double(&c, "max_image_seq_len", 0, 4096, &s->max_seq) ||
	    pd_config_string(&c, "time_shift_type", 0, "exponential", &tst))
		goto out;
	if (strcmp(tst, "linear") == 0) {
		s->linear_shift = 1;
	} else if (strcmp(tst, "exponential") != 0) {
		pd_errorf("%s: time_shift_type \"%s\" is not supported", c.path, tst);
		goto out;
	}
	if (s->max_seq == s->base_seq) {
		pd_errorf("%s: max_image_seq_len equals base_image_seq_len", c.path);
		goto out;
	}
	rc = 0;
out:
	pd_config_free(&c);
	return rc;
}

void pd_scheduler_free(struct pd_scheduler *s)
{
	free(s->sigmas_in);
	free(s->sigmas);
	free(s->timesteps);
	s->sigmas_in = s->sigmas = s->timesteps = NULL;
	s->steps = 0;
}

int pd_scheduler_alloc(struct pd_scheduler *s, int steps)
{
	pd_scheduler_free(s);
	s->sigmas_in = pd_malloc(sizeof(float) * (size_t)steps, "sigmas");
	s->sigmas = pd_malloc(sizeof(float) * (size_t)(steps + 1), "sigmas");
	s->timesteps = pd_malloc(sizeof(float) * (size_t)steps, "timesteps");
	if (!s->sigmas_in || !s->sigmas || !s->timesteps) {
		pd_scheduler_free(s);
		return -1;
	}
	s->steps = steps;
	return 0;
}

int pd_scheduler_set(struct pd_scheduler *s, int steps, int64_t image_seq_len)
{
	double m, b, step;

	if (steps < 1)
		return pd_errorf("--steps must be at least 1");
	if (s->kind == PD_SCHED_UNIPC)
		return pd_unipc_set(s, steps);
	if (pd_scheduler_alloc(s, steps))
		return -1;
	/* PF:73-84, in Python doubles. */
	m = (s->max_shift - s->base_shift) / (s->max_seq - s->base_seq);
	b = s->base_shift - m * s->base_seq;
	s->mu = (double)image_seq_len * m + b;
	/* np.linspace(1.0, 1/N, N): start + i * step, the last value exact. */
	step = steps > 1 ? (1.0 / steps - 1.0) / (steps - 1) : 0.0;
	for (int i = 0; i < steps; i++)
		s->sigmas_in[i] = (float)(i == steps - 1 ? 1.0 / steps : 1.0 + (double)i * step);
	/* SCH:343-367 on float32 NumPy arrays: Python scalars are rounded to
	 * float32 and every operation is a float32 one. */
	for (int i = 0; i < steps; i++) {
		float sg = s->sigmas_in[i], out;

		if (s->dynamic) {
			float e = s->linear_shift ? (float)s->mu : (float)exp(s->mu);
			float t = 1.0f / sg - 1.0f;

			out = e / (e + t);
		} else {
			/* shift - 1 is a Python double before it meets the array */
			float num = (float)s->shift * sg;
			float den = 1.0f + (float)(s->shift - 1.0) * sg;

			out = num / den;
		}
		s->sigmas[i] = out;
	}
	/* SCH stretch_shift_to_terminal: 1 - (1 - s) / ((1 - s_last) / (1 -
	 * shift_terminal)), float32 */
	if (s->shift_terminal > 0) {
		float scale = (1.0f - s->sigmas[steps - 1]) / (float)(1.0 - s->shift_terminal);

		/* one step: its only sigma is 1, and the stretch 0 / 0 (NaN
		 * latents in diffusers too) */
		if (!(scale > 0))
			return pd_errorf("--steps %d: this scheduler stretches its last sigma to shift_terminal %g "
					 "(Qwen-Image's), which takes at least 2 steps", steps, s->shift_terminal);
		for (int i = 0; i < steps; i++)
			s->sigmas[i] = 1.0f - (1.0f - s->sigmas[i]) / scale;
	}
	for (int i = 0; i < steps; i++)
		s->timesteps[i] = s->sigmas[i] * (float)s->num_train_timesteps;
	s->sigmas[steps] = 0.0f;
	return 0;
}

int pd_scheduler_cut(struct pd_scheduler *s, int first)
{
	int left = s->steps - first;

	if (first <= 0)
		return 0;
	if (left < 1)
		return pd_errorf("a schedule of %d steps from step %d runs none", s->steps, first);
	memmove(s->sigmas_in, s->sigmas_in + first, sizeof(float) * (size_t)left);
	memmove(s->sigmas, s->sigmas + first, sizeof(float) * (size_t)(left + 1));
	memmove(s->timesteps, s->timesteps + first, sizeof(float) * (size_t)left);
	s->steps = left;
	return 0;
}

struct pd_sched_state *pd_sched_state_new(const struct pd_scheduler *s, size_t n)
{
	struct pd_sched_state *st = pd_calloc(1, sizeof(*st), "the sampler's state");

	if (!st)
		return NULL;
	st->n = n;
	if (s->kind == PD_SCHED_UNIPC) {
		st->last = pd_malloc((n + 1) * sizeof(float), "the sampler's state");
		for (int k = 0; st->last && k <= s->solver_order; k++)
			if (!(st->m[k] = pd_malloc((n + 1) * sizeof(float), "the sampler's state")))
				break;
		if (!st->last || !st->m[s->solver_order]) {
			pd_sched_state_free(st);
			return NULL;
		}
	}
	return st;
}

void pd_sched_state_free(struct pd_sched_state *st)
{
	if (!st)
		return;
	free(st->last);
	for (int k = 0; k <= PD_UNIPC_MAX_ORDER; k++)
		free(st->m[k]);
	free(st);
}

void pd_scheduler_step(const struct pd_scheduler *s, struct pd_sched_state *st, int i, float *x, const float *v,
		       size_t n)
{
	float dt;

	if (s->kind == PD_SCHED_UNIPC) {
		pd_unipc_step(s, st, i, x, v, n);
		return;
	}
	dt = s->sigmas[i + 1] - s->sigmas[i];
	for (size_t k = 0; k < n; k++) {
		float t = dt * v[k];

		x[k] = x[k] + t;
	}
}
