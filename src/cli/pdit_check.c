/*
 * pdit_check.c - `pdit check`: the mesh against one process (or a file's
 * latents), block by block at the first step and at the end; the engine
 * computes (pd_engine_check), this prints PASS or FAIL and exits 0 or 1.
 */
#include "pd_util.h"
#include "pdit_cli.h"
#include "pdit_flags.h"

#include <stdio.h>
#include <string.h>

static const char pd_check_usage[] =
	"usage: [mpirun -np N] pdit check <the arguments of pdit generate> [--golden FILE] [--tolerance T]\n"
	"\n"
	"Runs the mesh and, on rank 0, the single-process computation on the same inputs,\n"
	"and prints for each transformer block at the first step and for the final latents\n"
	"the largest relative difference (max|a - b| / max|b|), then PASS or FAIL. With\n"
	"--golden FILE the final latents (and the initial noise) are compared with FILE's\n"
	"latents.final (and latents.init) instead: a diffusers reference or an earlier\n"
	"--out-latents file. Nothing is written.";

static const char pd_check_examples[] =
	"  mpirun -np 4 pdit check --model tiny-model -p \"a photo of a cat\" -H 256 -W 256 \\\n"
	"      --steps 4 --ulysses-degree 2 --ring-degree 2\n"
	"  mpirun -np 2 pdit check --transformer golden/transformer-dev --vae golden/vae-dev \\\n"
	"      --scheduler golden/scheduler-dev --embeds golden/pipeline-dev-h64w48.safetensors -H 64 -W 48 \\\n"
	"      --steps 4 -s 5301 --golden golden/pipeline-dev-h64w48.safetensors\n";

struct pd_check_args {
	struct pd_gen_args gen;         /* the shared flags */
	const char *golden;             /* --golden FILE, or NULL: one process */
	float tolerance;                /* --tolerance (below 0: the engine's default; 0: equal bits) */
	int tolerance_seen;             /* --tolerance given */
};

static void pd_check_flags(struct pd_check_args *a, struct pd_arg *opts)
{
	int n = pd_gen_flags(&a->gen, opts, PD_CMD_CHECK);

	a->golden = NULL;
	a->tolerance = -1;
	a->tolerance_seen = 0;
	opts[n++] = (struct pd_arg){ "--golden", 0, PD_ARG_STRING, &a->golden, "FILE",
				     "compare with FILE's latents.final instead of a single-process run", NULL };
	opts[n++] = (struct pd_arg){ "--tolerance", 0, PD_ARG_FLOAT, &a->tolerance, "T",
				     "largest relative difference that passes (default 1e-5, 2e-2 with bf16; 0: equal bits)",
				     &a->tolerance_seen };
	memset(&opts[n], 0, sizeof(opts[n]));
}

int pd_cmd_check_parse_only(int argc, char **argv)
{
	struct pd_check_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];

	pd_check_flags(&a, opts);
	return pd_gen_parse(NULL, &a.gen, opts, "check", NULL, NULL, argc, argv);
}

/* Rank 0: the report as a table, then PASS or FAIL. */
static void pd_check_print(const struct pd_check_args *a, const struct pd_check_report *r)
{
	if (a->golden) {
		printf("pdit check: mesh %s against %s, tolerance %g\n", r->mesh, a->golden, r->tolerance);
	} else {
		printf("pdit check: mesh %s against one process, %s, tolerance %g\n", r->mesh, a->gen.dtype,
		       r->tolerance);
		printf("  %-24s %9s\n", "first step", "max rel. difference");
		if (r->patched)
			printf("  (the first step ran patched: blocks not compared)\n");
	}
	for (int k = 0; k < r->n_rows; k++)
		printf("  %-24s %9.2e\n", r->rows[k].name, r->rows[k].diff);
	if (r->stale)
		printf("  note: %s is exact only in its %d warm-up step%s; later steps attend to keys and\n"
		       "  values one step old, so they differ from one process by design. With\n"
		       "  --warmup-steps %d every step is exact and the check must pass.\n",
		       r->stale, r->warmup_steps, r->warmup_steps == 1 ? "" : "s", r->steps);
	printf("%s\n", r->pass ? "PASS" : "FAIL");
}

int pd_cmd_check(struct pd_comm *world, int argc, char **argv)
{
	struct pd_check_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_engine *e = NULL;
	struct pd_check_report rep = { 0 };
	char **prompts = NULL;
	int n_prompts = 0, hr, rc = 1;

	pd_check_flags(&a, opts);
	hr = pd_gen_parse(world, &a.gen, opts, "check", pd_check_usage, pd_check_examples, argc, argv);
	if (hr == 1)
		return 0;
	if (!hr && a.tolerance_seen && !(a.tolerance >= 0))
		hr = pd_errorf("--tolerance must not be negative (got %g; 0 asks for equal bits)", a.tolerance);
	hr = hr || pd_gen_engine_options(&a.gen, &o, 0) || pd_gen_request(&a.gen, &rq, &prompts, &n_prompts);
	rq.want_pictures = 0;
	if (pd_cli_any_failed(world, hr))
		goto out;
	if (pd_engine_open(&e, world, &o, &rq)) {
		pd_gen_failed(world, NULL);
		goto out;
	}
	if (pd_engine_check(e, &rq, a.golden, a.tolerance, &rep)) {
		pd_gen_failed(world, e);
		goto out;
	}
	if (world->rank == 0)
		pd_check_print(&a, &rep);
	rc = rep.pass ? 0 : 1;
out:
	pd_check_report_free(&rep);
	pd_engine_close(e);
	pd_gen_free_prompts(prompts, n_prompts);
	return rc;
}
