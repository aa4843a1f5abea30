/*
 * test_unipc.c - UniPCMultistepScheduler (flow sigmas) against diffusers'.
 *
 *   test_unipc WAN_TINY_DIR
 *
 * scheduler-unipc.safetensors: the schedules of flow shifts 1, 3 and 5
 * for 1 to 50 steps bit for bit (timesteps and float32 sigmas); a 6-step
 * run from its recorded model outputs: every x0 prediction, corrected
 * sample and step result within 1e-6 of the reference, max|a - b| /
 * max|ref|, the predictor's and corrector's orders exactly, and their
 * scalars (sigma, alpha, lambda, h, h_phi_1, B_h, rks, rhos) within 2e-6.
 * The pipeline files' recorded steps (each WanPipeline run's model
 * outputs) the same way. Buffers are poisoned first.
 */
#include "pd_safetensors.h"
#include "pd_scheduler.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_util.h"

#include <string.h>

static double worst;

static const struct pd_st_tensor *get(const struct pd_st *st, const char *fmt, int i, const char *what)
{
	char name[128];

	snprintf(name, sizeof(name), fmt, i, what);
	return pd_st_get(st, name);
}

static float *read_all(const struct pd_st_tensor *t)
{
	float *v = malloc((size_t)t->numel * sizeof(float) + 4);

	pd_st_read_f32(t, 0, (size_t)t->numel, v);
	return v;
}

static void close_to(const char *file, const char *what, int i, const float *a, const struct pd_st_tensor *t,
		     size_t n, double tol)
{
	float *r;
	double e;

	PD_CHECK(t && (size_t)t->numel == n, "%s: step %d: no %s", file, i, what);
	if (!t || (size_t)t->numel != n)
		return;
	r = read_all(t);
	e = pd_rel_err(a, r, n);
	worst = e > worst && tol < 1e-5 ? e : worst;
	PD_CHECK(e <= tol, "%s: step %d: %s differs by %.3g (limit %g)", file, i, what, e, tol);
	free(r);
}

static void scalar(const char *file, int i, const char *kind, const char *name, const float *mine, int n,
		   const struct pd_st *st, const char *prefix)
{
	char key[160];
	const struct pd_st_tensor *t;
	float *r;

	snprintf(key, sizeof(key), "%sstep.%d.unipc.%s.%s", prefix, i, kind, name);
	t = pd_st_get(st, key);
	PD_CHECK(t && t->numel == n, "%s: no %s of %d values", file, key, n);
	if (!t || t->numel != n)
		return;
	r = read_all(t);
	for (int k = 0; k < n; k++) {
		double d = fabs((double)mine[k] - r[k]), m = fabs((double)r[k]);

		if (isinf(r[k]) && mine[k] == r[k])
			continue;
		PD_CHECK(d <= 2e-6 * (m > 1 ? m : 1), "%s: %s[%d] = %.9g, not %.9g", file, key, k, mine[k], r[k]);
	}
	free(r);
}

static void check_coeffs(const char *file, const struct pd_st *st, const char *prefix, int i, char kind,
			 const struct pd_unipc_coeffs *co)
{
	const char k[2] = { kind, 0 };
	float one[8] = { co->sigma_t, co->sigma_s0, co->alpha_t, co->lambda_t, co->lambda_s0, co->h, co->h_phi_1,
			 co->B_h };
	const char *names[8] = { "sigma_t", "sigma_s0", "alpha_t", "lambda_t", "lambda_s0", "h", "h_phi_1", "B_h" };
	int nr = kind == 'p' ? co->order - 1 : co->order;

	for (int j = 0; j < 8; j++)
		scalar(file, i, k, names[j], &one[j], 1, st, prefix);
	scalar(file, i, k, "rks", co->rks, co->order, st, prefix);
	if (nr > 0)
		scalar(file, i, k, "rhos", co->rhos, nr, st, prefix);
}

/* A recorded run: PREFIX "run." (sample_in, model_output, prev_sample) or
 * "" (a pipeline: latents_in, noise_pred, latents). */
static void one_run(const char *file, const struct pd_st *st, struct pd_scheduler *s, const char *prefix,
		    const char *in_key, const char *v_key, const char *out_key)
{
	char f[64];
	const struct pd_st_tensor *sig, *x_in;
	struct pd_sched_state *state;
	size_t n;
	float *x;
	int steps;

	snprintf(f, sizeof(f), "%ssigmas", prefix);
	sig = pd_st_get(st, f);
	if (!sig)
		sig = pd_st_get(st, "sched.sigmas");
	snprintf(f, sizeof(f), "%sstep.%%d.%%s", prefix);
	x_in = get(st, f, 0, in_key);
	PD_CHECK(sig && x_in, "%s: no sigmas or first sample", file);
	if (!sig || !x_in)
		return;
	steps = (int)sig->numel - 1;
	PD_CHECK(pd_scheduler_set(s, steps, 0) == 0, "%s", pd_last_error());
	{
		float *r = read_all(sig);

		PD_CHECK(memcmp(r, s->sigmas, (size_t)sig->numel * sizeof(float)) == 0, "%s: the sigmas differ", file);
		free(r);
	}
	n = (size_t)x_in->numel;
	state = pd_sched_state_new(s, n);
	x = read_all(x_in);
	for (int i = 0; i < steps; i++) {
		const struct pd_st_tensor *v = get(st, f, i, v_key), *po = get(st, f, i, "predictor_order"),
					  *cor = get(st, f, i, "corrector_order");
		float *vv;
		struct pd_unipc_coeffs co;

		PD_CHECK(v && (size_t)v->numel == n, "%s: step %d: no %s", file, i, v_key);
		if (!v || (size_t)v->numel != n)
			break;
		vv = read_all(v);
		/* from the reference's own sample each step: errors do not add up */
		if (i > 0) {
			float *r = read_all(get(st, f, i, in_key));

			close_to(file, in_key, i, x, get(st, f, i, in_key), n, 1e-6);
			memcpy(x, r, n * sizeof(float));
			free(r);
		}
		pd_scheduler_step(s, state, i, x, vv, n);
		close_to(file, "x0_pred", i, state->m[0], get(st, f, i, "x0_pred"), n, 1e-6);
		PD_CHECK(po && po->dtype == PD_I64 && pd_test_i64(po, 0) == state->this_order,
			 "%s: step %d: predictor order %d", file, i, state->this_order);
		pd_unipc_coeffs(s, i, state->this_order, 'p', &co);
		check_coeffs(file, st, prefix, i, 'p', &co);
		if (i > 0) {
			PD_CHECK(cor && cor->dtype == PD_I64, "%s: step %d: no corrector order", file, i);
			if (cor && cor->dtype == PD_I64) {
				pd_unipc_coeffs(s, i, (int)pd_test_i64(cor, 0), 'c', &co);
				check_coeffs(file, st, prefix, i, 'c', &co);
			}
			close_to(file, "corrected", i, state->last, get(st, f, i, "corrected"), n, 1e-6);
		}
		close_to(file, out_key, i, x, get(st, f, i, out_key), n, 1e-6);
		free(vv);
	}
	free(x);
	pd_sched_state_free(state);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/wan-tiny";
	char *sdir = pd_strfmt("%s/model/scheduler", dir), *path = pd_strfmt("%s/scheduler-unipc.safetensors", dir);
	static const char *pipes[] = { "pipeline-cfg-n9-h32w48", "pipeline-nocfg-n5-h48w64",
				       "pipeline-cfg-defaultneg-n5-h32w32" };
	static const double pipe_shift[] = { 3.0, 5.0, 3.0 };
	static const double shifts[] = { 1, 3, 5 };
	static const int steps[] = { 1, 2, 3, 4, 5, 10, 30, 50 };
	struct pd_scheduler s;
	struct pd_st *st = NULL;
	int tables = 0;

	if (pd_scheduler_load(&s, sdir) || pd_st_open(&st, path)) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	PD_CHECK(s.kind == PD_SCHED_UNIPC && s.solver_order == 2 && s.shift == 3.0, "the scheduler config was misread");
	for (size_t a = 0; a < 3; a++)
		for (size_t b = 0; b < 8; b++) {
			char name[64];
			const struct pd_st_tensor *t, *g;

			s.shift = shifts[a];
			snprintf(name, sizeof(name), "table.shift%d.n%d.timesteps", (int)shifts[a], steps[b]);
			t = pd_st_get(st, name);
			snprintf(name, sizeof(name), "table.shift%d.n%d.sigmas", (int)shifts[a], steps[b]);
			g = pd_st_get(st, name);
			PD_CHECK(t && g && pd_scheduler_set(&s, steps[b], 0) == 0, "%s", name);
			if (!t || !g)
				continue;
			for (int i = 0; i < steps[b]; i++)
				PD_CHECK(s.timesteps[i] == (float)pd_test_i64(t, i), "%s: timestep %d is %g", name,
					 i, s.timesteps[i]);
			{
				float *r = read_all(g);

				PD_CHECK(memcmp(r, s.sigmas, (size_t)(steps[b] + 1) * sizeof(float)) == 0, "%s differ", name);
				free(r);
			}
			tables++;
		}
	s.shift = 3.0;
	one_run(path, st, &s, "run.", "sample_in", "model_output", "prev_sample");
	pd_st_close(st);
	for (int p = 0; p < 3; p++) {
		char *pp = pd_strfmt("%s/%s.safetensors", dir, pipes[p]);

		s.shift = pipe_shift[p];
		if (pd_st_open(&st, pp) == 0) {
			one_run(pp, st, &s, "", "latents_in", "noise_pred", "latents");
			pd_st_close(st);
		} else {
			PD_CHECK(0, "%s", pd_last_error());
		}
		free(pp);
	}
	printf("%d schedules, 4 runs, worst max|diff|/max|ref| %.2e (limit 1e-06)\n", tables, worst);
	pd_scheduler_free(&s);
	free(sdir);
	free(path);
	return pd_test_report();
}
