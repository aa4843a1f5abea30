/*
 * pd_sched_unipc.c - UniPCMultistepScheduler with flow sigmas (diffusers
 * v0.40 scheduling_unipc_multistep.py, SCH:n below; the formulas in
 * tests/golden/wan-tiny/README.md §6). Every scalar is computed as torch
 * computes its 0-d float32 tensors, and every update operation by
 * operation in float32 (the build forbids contracting a*b+c).
 */
#include "pd_config.h"
#include "pd_scheduler.h"
#include "pd_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pd_unipc_config(struct pd_scheduler *s, const struct pd_config *c)
{
	/* options whose other values pdit does not implement, with the value it does */
	static const struct {
		const char *key;
		int want, def;          /* the value pdit implements, the class's default */
	} flags[] = {
		{ "use_flow_sigmas", 1, 0 }, { "predict_x0", 1, 1 }, { "thresholding", 0, 0 },
		{ "use_karras_sigmas", 0, 0 }, { "use_exponential_sigmas", 0, 0 }, { "use_beta_sigmas", 0, 0 },
		{ "use_dynamic_shifting", 0, 0 }, { "rescale_betas_zero_snr", 0, 0 },
	};
	const char *pt = NULL, *st = NULL, *fs = NULL;
	int64_t v;
	int flag;

	s->kind = PD_SCHED_UNIPC;
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		if (pd_config_bool(c, flags[i].key, 0, flags[i].def, &flag))
			return -1;
		if (flag != flags[i].want)
			return pd_errorf("%s: \"%s\": %s is not supported", c->path, flags[i].key, flag ? "true" : "false");
	}
	if (pd_config_has(c, "shift_terminal") || pd_config_has(c, "solver_p"))
		return pd_errorf("%s: \"%s\" is not supported", c->path,
				 pd_config_has(c, "shift_terminal") ? "shift_terminal" : "solver_p");
	/* only the default, an empty list */
	{
		const cJSON *dc = cJSON_GetObjectItemCaseSensitive(c->json, "disable_corrector");

		if (dc && !cJSON_IsNull(dc) && !(cJSON_IsArray(dc) && cJSON_GetArraySize(dc) == 0))
			return pd_errorf("%s: \"disable_corrector\" is not supported", c->path);
	}
	if (pd_config_int(c, "num_train_timesteps", 0, 1000, 1, 1000000, &v))
		return -1;
	s->num_train_timesteps = (int)v;
	if (pd_config_int(c, "solver_order", 0, 2, 1, PD_UNIPC_MAX_ORDER, &v))
		return -1;
	s->solver_order = (int)v;
	if (pd_config_bool(c, "lower_order_final", 0, 1, &s->lower_order_final) ||
	    pd_config_double(c, "flow_shift", 0, 1.0, &s->shift) ||
	    pd_config_string(c, "prediction_type", 0, "epsilon", &pt) ||
	    pd_config_string(c, "solver_type", 0, "bh2", &st) ||
	    pd_config_string(c, "final_sigmas_type", 0, "zero", &fs))
		return -1;
	if (strcmp(pt, "flow_prediction") != 0)
		return pd_errorf("%s: prediction_type \"%s\" is not supported (flow_prediction is)", c->path, pt);
	if (strcmp(st, "bh1") != 0 && strcmp(st, "bh2") != 0)
		return pd_errorf("%s: solver_type \"%s\" is not supported (bh1 and bh2 are)", c->path, st);
	s->bh1 = strcmp(st, "bh1") == 0;
	if (strcmp(fs, "zero") != 0)
		return pd_errorf("%s: final_sigmas_type \"%s\" is not supported (zero is)", c->path, fs);
	if (!(s->shift > 0))
		return pd_errorf("%s: flow_shift must be positive", c->path);
	return 0;
}

int pd_unipc_set(struct pd_scheduler *s, int steps)
{
	double step;

	if (pd_scheduler_alloc(s, steps))
		return -1;
	/* SCH:428-466 in float64: linspace(1, 1/T, N + 1)[:-1], shifted; the
	 * first moved below 1; timesteps truncated; sigmas to float32, then 0 */
	step = (1.0 / s->num_train_timesteps - 1.0) / steps;
	for (int i = 0; i < steps; i++) {
		double sg = 1.0 + (double)i * step;

		sg = s->shift * sg / (1.0 + (s->shift - 1.0) * sg);
		if (i == 0 && fabs(sg - 1.0) < 1e-6)
			sg -= 1e-6;
		s->sigmas_in[i] = (float)(1.0 + (double)i * step);
		s->sigmas[i] = (float)sg;
		s->timesteps[i] = (float)(int64_t)(sg * s->num_train_timesteps);
	}
	s->sigmas[steps] = 0.0f;
	return 0;
}

/* A small linear system A x = b (n <= PD_UNIPC_MAX_ORDER) in float32 by
 * elimination with partial pivoting, as LAPACK's sgesv does it. */
static void pd_unipc_solve(int n, float a[PD_UNIPC_MAX_ORDER][PD_UNIPC_MAX_ORDER], float *b, float *x)
{
	for (int k = 0; k < n; k++) {
		int p = k;

		for (int r = k + 1; r < n; r++)
			if (fabsf(a[r][k]) > fabsf(a[p][k]))
				p = r;
		if (p != k) {
			for (int c = 0; c < n; c++) {
				float t = a[k][c];

				a[k][c] = a[p][c];
				a[p][c] = t;
			}
			{
				float t = b[k];

				b[k] = b[p];
				b[p] = t;
			}
		}
		for (int r = k + 1; r < n; r++) {
			float f = a[r][k] / a[k][k];

			for (int c = k + 1; c < n; c++)
				a[r][c] = a[r][c] - f * a[k][c];
			b[r] = b[r] - f * b[k];
		}
	}
	for (int k = n - 1; k >= 0; k--) {
		float t = b[k];

		for (int c = k + 1; c < n; c++)
			t = t - a[k][c] * x[c];
		x[k] = t / a[k][k];
	}
}

static float pd_unipc_lambda(const struct pd_scheduler *s, int j)
{
	/* flow sigmas: alpha = 1 - sigma; lambda = log(alpha) - log(sigma) */
	float sg = s->sigmas[j], al = 1.0f - sg;

	return logf(al) - logf(sg);
}

void pd_unipc_coeffs(const struct pd_scheduler *s, int i, int order, char kind, struct pd_unipc_coeffs *co)
{
	/* SCH:833-960 (predictor: t = i + 1, s0 = i, s_k = i - k) and
	 * SCH:962-1083 (corrector: t = i, s0 = i - 1, s_k = i - 1 - k) */
	int t = kind == 'p' ? i + 1 : i, s0 = t - 1;
	float R[PD_UNIPC_MAX_ORDER][PD_UNIPC_MAX_ORDER], b[PD_UNIPC_MAX_ORDER], hh, h_phi_k, fac = 1;

	memset(co, 0, sizeof(*co));
	co->order = order;
	co->sigma_t = s->sigmas[t];
	co->sigma_s0 = s->sigmas[s0];
	co->alpha_t = 1.0f - co->sigma_t;
	co->lambda_t = pd_unipc_lambda(s, t);
	co->lambda_s0 = pd_unipc_lambda(s, s0);
	co->h = co->lambda_t - co->lambda_s0;
	for (int k = 1; k < order; k++)
		co->rks[k - 1] = (pd_unipc_lambda(s, s0 - k) - co->lambda_s0) / co->h;
	co->rks[order - 1] = 1.0f;
	hh = -co->h;                    /* predict_x0 */
	co->h_phi_1 = expm1f(hh);
	h_phi_k = co->h_phi_1 / hh - 1.0f;
	co->B_h = s->bh1 ? hh : expm1f(hh);
	for (int k = 1; k <= order; k++) {
		for (int c = 0; c < order; c++)
			R[k - 1][c] = powf(co->rks[c], (float)(k - 1));
		b[k - 1] = h_phi_k * fac / co->B_h;
		fac *= (float)(k + 1);
		h_phi_k = h_phi_k / hh - 1.0f / fac;
	}
	if (kind == 'p') {
		if (order == 2)
			co->rhos[0] = 0.5f;
		else if (order > 2)
			pd_unipc_solve(order - 1, R, b, co->rhos);
	} else {
		if (order == 1)
			co->rhos[0] = 0.5f;
		else
			pd_unipc_solve(order, R, b, co->rhos);
	}
}

/* x_t = (sigma_t / sigma_s0) x - (alpha_t h_phi_1) m0 - (alpha_t B_h) res,
 * res = sum_k rho_k D_k (+ rho_last (x0_now - m0) for the corrector), D_k
 * = (m_k - m0) / r_k; OUT may be X. */
static void pd_unipc_update(const struct pd_unipc_coeffs *co, struct pd_sched_state *st, const float *x,
			    const float *m0, const float *x0_now, float *out, size_t n)
{
	float ratio = co->sigma_t / co->sigma_s0, ah = co->alpha_t * co->h_phi_1, ab = co->alpha_t * co->B_h;
	int nd = co->order - 1;

	for (size_t k = 0; k < n; k++) {
		float xt = ratio * x[k] - ah * m0[k], res = 0;
		int have = 0;

		/* einsum over the differences: a single one is rho D exactly */
		for (int d = 0; d < nd; d++) {
			float D = (st->m[d + 1][k] - m0[k]) / co->rks[d], term = co->rhos[d] * D;

			res = have ? res + term : term;
			have = 1;
		}
		if (x0_now) {
			float last = co->rhos[nd] * (x0_now[k] - m0[k]);

			res = have ? res + last : last;
			have = 1;
		}
		out[k] = have ? xt - ab * res : xt;
	}
}

void pd_unipc_step(const struct pd_scheduler *s, struct pd_sched_state *st, int i, float *x, const float *v,
		   size_t n)
{
	struct pd_unipc_coeffs co;
	float sg = s->sigmas[i], *x0, *oldest;
	int order;

	/* x0 = x - sigma v (SCH:807), into the oldest slot: m[0] the new
	 * x0, m[1] the previous (the corrector's m0), m[2] the one before */
	oldest = st->m[s->solver_order];
	for (int k = s->solver_order; k > 0; k--)
		st->m[k] = st->m[k - 1];
	st->m[0] = oldest;
	x0 = oldest;
	for (size_t k = 0; k < n; k++) {
		float t = sg * v[k];

		x0[k] = x[k] - t;
	}
	if (i > 0 && st->have > 0) {
		/* the corrector redoes the last step with the new x0 (SCH:1153-1233)
		 * from the previous predictor's sample and order, on the history
		 * before it (m[1..]) */
		struct pd_sched_state view = *st;

		pd_unipc_coeffs(s, i, st->this_order, 'c', &co);
		for (int k = 0; k < PD_UNIPC_MAX_ORDER; k++)
			view.m[k] = st->m[k + 1];
		pd_unipc_update(&co, &view, st->last, view.m[0], x0, x, n);
	}
	st->have = st->have < s->solver_order ? st->have + 1 : s->solver_order;
	order = s->solver_order;
	if (s->lower_order_final && s->steps - i < order)
		order = s->steps - i;
	if (order > st->lower + 1)
		order = st->lower + 1;
	st->this_order = order;
	memcpy(st->last, x, n * sizeof(float));
	pd_unipc_coeffs(s, i, order, 'p', &co);
	pd_unipc_update(&co, st, x, st->m[0], NULL, x, n);
	if (st->lower < s->solver_order)
		st->lower++;
}
