/*
 * test_flux_golden.c - every forward-*.safetensors golden case: the output
 * and every recorded intermediate against diffusers' values.
 *
 *   test_flux_golden GOLDEN_DIR f32    tolerance 1e-4 x max|ref| per tensor
 *   test_flux_golden GOLDEN_DIR bf16   bf16 matrix products: out.sample
 *                                      within 2e-2 x max|f32 result|
 *
 * The issue asks for 1e-4; the README's tighter 1e-5 holds because pdit
 * evaluates the sinusoid frequencies with torch's own expf (SLEEF), so the
 * frequency table must match bit for bit.
 */
#include "pd_backend_cpu.h"
#include "pd_flux.h"
#include "pd_forward.h"
#include "pd_test.h"
#include "pd_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_F32 1e-5
#define TOL_BF16 2e-2

struct compare_ctx {
	const struct pd_st *golden;     /* the case file */
	const char *file;               /* its name, for messages */
	char **seen;                    /* names compared so far */
	int n_seen;
	double worst;                   /* largest relative error met */
	char worst_name[128];
};

static void compare_dump(void *vctx, const char *name, int64_t index, const float *data, int ndim,
			 const int64_t *shape)
{
	struct compare_ctx *c = vctx;
	const struct pd_st_tensor *t = pd_st_get(c->golden, name);
	float *ref;
	double err;
	int same = 1;

	(void)index;	/* forward cases have batch 1 */
	if (!t)
		return;	/* pdit records a few tensors the golden files do not */
	c->seen = realloc(c->seen, sizeof(char *) * (size_t)(c->n_seen + 1));
	c->seen[c->n_seen++] = strdup(name);
	same = t->ndim == ndim;
	for (int i = 0; same && i < ndim; i++)
		same = t->shape[i] == shape[i];
	PD_CHECK(same, "%s: %s shape differs from the golden one", c->file, name);
	if (!same)
		return;
	ref = malloc((size_t)t->numel * sizeof(float));
	pd_st_read_f32(t, 0, (size_t)t->numel, ref);
	err = pd_rel_err(data, ref, (size_t)t->numel);
	PD_CHECK(err <= TOL_F32, "%s: %s relative error %.3g > %g", c->file, name, err, TOL_F32);
	if (strcmp(name, "emb.sinusoid_freqs") == 0)
		PD_CHECK(memcmp(data, ref, (size_t)t->numel * sizeof(float)) == 0,
			 "%s: sinusoid frequencies differ from torch's bit pattern", c->file);
	if (err > c->worst) {
		c->worst = err;
		snprintf(c->worst_name, sizeof(c->worst_name), "%s", name);
	}
	free(ref);
}

static int was_seen(const struct compare_ctx *c, const char *name)
{
	for (int i = 0; i < c->n_seen; i++)
		if (strcmp(c->seen[i], name) == 0)
			return 1;
	return 0;
}

/* Runs every batch entry of the case; OUT receives [B, L, C]. */
static int run_case(const char *golden_dir, const struct pd_st *st, enum pd_dtype dt, const struct pd_dump *dump,
		    float **out, int64_t *n_out)
{
	const char *cfgname = pd_st_meta(st, "config");
	char tdir[1024];
	struct pd_backend *be = NULL;
	struct pd_flux *m = NULL;
	struct pd_forward_inputs in;
	const struct pd_dit_info *info;
	int rc = -1;

	snprintf(tdir, sizeof(tdir), "%s/transformer-%s", golden_dir, cfgname ? cfgname : "?");
	if (pd_test_backend_new(&be, dt, 0) || pd_flux_load(&m, tdir, be))
		goto out;
	info = &pd_flux_dit(m)->info;
	if (pd_forward_inputs_read(&in, st, &pd_flux_family, info))
		goto out;
	*n_out = in.batch * in.img_len * info->out_channels;
	*out = malloc((size_t)*n_out * sizeof(float));
	pd_poison(*out, (size_t)*n_out);
	rc = 0;
	for (int64_t b = 0; b < in.batch && !rc; b++) {
		struct pd_dit_call x = pd_forward_inputs_image(&in, info, b);

		rc = pd_flux_forward(m, &x, *out + b * in.img_len * info->out_channels, dump);
	}
	pd_forward_inputs_free(&in);
out:
	if (rc)
		fprintf(stderr, "error: %s\n", pd_last_error());
	pd_flux_free(m);
	pd_backend_free(be);
	return rc;
}

static void test_case_f32(const char *dir, const char *file)
{
	char path[1024];
	struct pd_st *st;
	struct compare_ctx ctx = { 0 };
	struct pd_dump dump = { compare_dump, &ctx, 0 };
	float *out = NULL, *ref = NULL;
	int64_t n;
	int missing = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	PD_CHECK(pd_st_open(&st, path) == 0, "open %s: %s", path, pd_last_error());
	ctx.golden = st;
	ctx.file = file;
	PD_CHECK(run_case(dir, st, PD_F32, &dump, &out, &n) == 0, "%s: forward failed", file);
	if (out) {
		const struct pd_st_tensor *t = pd_st_get(st, "out.sample");
		double err;

		PD_CHECK(t && t->numel == n, "%s: out.sample size", file);
		ref = malloc((size_t)n * sizeof(float));
		pd_st_read_f32(t, 0, (size_t)n, ref);
		err = pd_rel_err(out, ref, (size_t)n);
		PD_CHECK(err <= TOL_F32, "%s: out.sample relative error %.3g > %g", file, err, TOL_F32);
		printf("%-40s out.sample %.2e, worst intermediate %.2e (%s), %d tensors compared\n", file, err,
		       ctx.worst, ctx.worst_name, ctx.n_seen + 1);
	}
	/* Every intermediate the golden file records must have been produced. */
	for (int i = 0; i < st->n_tensors; i++) {
		const char *name = st->sorted[i]->name;

		if (strncmp(name, "in.", 3) == 0 || strcmp(name, "out.sample") == 0)
			continue;
		if (!was_seen(&ctx, name)) {
			fprintf(stderr, "  not produced: %s\n", name);
			missing++;
		}
	}
	PD_CHECK(missing == 0, "%s: %d golden intermediates were not produced", file, missing);
	for (int i = 0; i < ctx.n_seen; i++)
		free(ctx.seen[i]);
	free(ctx.seen);
	free(out);
	free(ref);
	pd_st_close(st);
}

static void test_case_bf16(const char *dir, const char *file)
{
	char path[1024];
	struct pd_st *st;
	float *a = NULL, *b = NULL;
	int64_t na = 0, nb = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	PD_CHECK(pd_st_open(&st, path) == 0, "open %s: %s", path, pd_last_error());
	PD_CHECK(run_case(dir, st, PD_F32, NULL, &a, &na) == 0, "%s: f32 forward failed", file);
	PD_CHECK(run_case(dir, st, PD_BF16, NULL, &b, &nb) == 0, "%s: bf16 forward failed", file);
	if (a && b && na == nb) {
		double err = pd_rel_err(b, a, (size_t)na);

		PD_CHECK(err <= TOL_BF16, "%s: bf16 vs f32 relative error %.3g > %g", file, err, TOL_BF16);
		/* bf16 must actually differ from f32, or the switch did nothing. */
		PD_CHECK(err > 1e-6, "%s: bf16 result identical to f32 (%.3g): bf16 path not taken?", file, err);
		printf("%-40s bf16 vs f32 out.sample %.2e\n", file, err);
	}
	free(a);
	free(b);
	pd_st_close(st);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/flux-tiny";
	const char *mode = argc > 2 ? argv[2] : "f32";
	DIR *d = opendir(dir);
	struct dirent *e;
	int cases = 0;

	pd_log_level = 0;
	if (!d) {
		fprintf(stderr, "cannot open %s\n", dir);
		return 1;
	}
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "forward-", 8) != 0 || !strstr(e->d_name, ".safetensors"))
			continue;
		cases++;
		if (strcmp(mode, "bf16") == 0)
			test_case_bf16(dir, e->d_name);
		else
			test_case_f32(dir, e->d_name);
	}
	closedir(d);
	PD_CHECK(cases >= 4, "expected at least 4 forward cases in %s, found %d", dir, cases);
	return pd_test_report();
}
