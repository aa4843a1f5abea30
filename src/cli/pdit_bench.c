/*
 * pdit_bench.c - `pdit bench`: denoising steps timed on the mesh, the rate
 * they reach against the machine's product rate, bytes sent, memory, and
 * with --vae-time one decode; the engine measures (pd_engine_bench), this
 * prints a table or one JSON object.
 */
#include "pd_util.h"
#include "pdit_cli.h"
#include "pdit_flags.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char pd_bench_usage[] =
	"usage: [mpirun -np N] pdit bench --model DIR [-H 1024 -W 1024] [--steps 3] [--warmup 1] [--dtype bf16]\n"
	"                                 [mesh degrees] [--json] [--vae-time] [--vae-dtype bf16] [--e2e]\n"
	"                                 [--op-times]\n"
	"\n"
	"Times denoising steps (the median of --steps after --warmup untimed ones; the\n"
	"slowest rank's) and reports the step's floating-point work counted from the\n"
	"shapes, the rate achieved, the bf16 (or f32) matrix-product rate pdit measures\n"
	"in the same run at the model's largest product shape and the ratio of the two,\n"
	"bytes sent per rank per step, peak resident memory per rank next to an estimate\n"
	"(the weights as the backend holds them plus its largest activation and scratch\n"
	"use), the allocations made in the timed steps (0: buffers and primitives are\n"
	"reused), the loading's seconds and rate, and with --vae-time the VAE decode's\n"
	"seconds, its work counted from the shapes and its rate. --e2e times one whole\n"
	"generation as generate runs it: loading, prompt encoding, every step (warm-up\n"
	"included), the decode and the total. --op-times splits a timed step by\n"
	"operation and shape (each product's and attention's rate next to the matmul\n"
	"rate: which one falls short of it). The embeddings default to\n"
	"DIR/embeds.safetensors (written by pdit tiny).";

static const char pd_bench_examples[] =
	"  pdit tiny flux-width --flux-width\n"
	"  pdit bench --model flux-width -H 1024 -W 1024 --dtype bf16 --vae-time --vae-dtype bf16\n"
	"  pdit bench --model flux-width -H 512 -W 512 --dtype bf16 --vae-dtype bf16 -p \"a lighthouse\" --steps 3 --e2e\n"
	"  pdit bench --model flux-width -H 1024 -W 1024 --dtype bf16 --op-times\n"
	"  mpirun -np 2 pdit bench --model flux-width -H 512 -W 512 --dtype bf16 --tensor-parallel-degree 2 --json\n";

struct pd_bench_args {
	struct pd_gen_args gen;         /* the shared flags */
	int warmup;                     /* untimed steps first */
	int json;                       /* one JSON object instead of the table */
	int vae_time;                   /* also time one decode */
	int e2e;                        /* one whole generation's phases */
	int op_times;                   /* each backend operation timed, by shape */
};

static void pd_bench_flags(struct pd_bench_args *a, struct pd_arg *opts)
{
	int n = pd_gen_flags(&a->gen, opts, PD_CMD_BENCH);

	a->json = a->vae_time = a->e2e = a->op_times = 0;
	a->warmup = 1;
	opts[n++] = (struct pd_arg){ "--warmup", 0, PD_ARG_COUNT, &a->warmup, "N", "untimed steps first, at least one (default 1)",
				     NULL };
	opts[n++] = (struct pd_arg){ "--json", 0, PD_ARG_FLAG, &a->json, NULL,
				     "print one JSON object instead of the table", NULL };
	opts[n++] = (struct pd_arg){ "--vae-time", 0, PD_ARG_FLAG, &a->vae_time, NULL,
				     "also time one VAE decode at this size (in bands over the processes, as generate)",
				     NULL };
	opts[n++] = (struct pd_arg){ "--e2e", 0, PD_ARG_FLAG, &a->e2e, NULL,
				     "one whole generation's phases: load, encode, all steps, decode, total (implies --vae-time)",
				     NULL };
	opts[n++] = (struct pd_arg){ "--op-times", 0, PD_ARG_FLAG, &a->op_times, NULL,
				     "where a step's time goes: each operation by shape, its seconds and rate against the "
				     "matmul rate (rank 0)",
				     NULL };
	opts[n++] = (struct pd_arg){ "--batch", 0, PD_ARG_COUNT, &a->gen.batch, "N",
				     "run N copies of the first prompt (for data parallelism)", NULL };
	memset(&opts[n], 0, sizeof(opts[n]));
}

int pd_cmd_bench_parse_only(int argc, char **argv)
{
	struct pd_bench_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];

	pd_bench_flags(&a, opts);
	return pd_gen_parse(NULL, &a.gen, opts, "bench", NULL, NULL, argc, argv);
}

/* --op-times: rank 0's operations in a timed step, the longest first,
 * each product's rate against the matmul rate at the widest shape. SPS:
 * the step's seconds. */
static void pd_bench_print_ops(const struct pd_bench_report *r, double sps)
{
	double sum = 0;

	printf("  where a step's time goes (rank 0, per step; each operation waited for):\n");
	printf("    %-44s %7s %9s %6s %9s %9s %7s\n", "operation", "calls", "seconds", "share", "GFLOP", "GFLOP/s",
	       "x rate");
	for (int i = 0; i < r->n_ops; i++) {
		const struct pd_bench_op *o = &r->ops[i];

		sum += o->seconds;
		printf("    %-44s %7.0f %9.4f %5.1f%%", o->name, o->calls, o->seconds, 100 * o->seconds / sps);
		if (o->gflop > 0 && o->seconds > 0)
			printf(" %9.1f %9.1f %7.2f", o->gflop, o->gflop / o->seconds,
			       r->matmul_gflops > 0 ? o->gflop / o->seconds / r->matmul_gflops : 0);
		printf("\n");
	}
	printf("    %-44s %7s %9.4f %5.1f%%  (the rest: the step's own code, transfers)\n", "all operations", "", sum,
	       100 * sum / sps);
}

/* Rank 0: the report, as JSON or a table. OPEN_S: opening the engine. */
static void pd_bench_print(const struct pd_bench_args *a, const struct pd_engine_about *ab,
			   const struct pd_bench_report *r, double open_s)
{
	const struct pd_gen_args *g = &a->gen;
	double rss_max = 0, w_mb, act_mb, mm = r->matmul_gflops, sps = r->seconds_per_step;
	double achieved = r->step_gflop / sps, vae_s = r->vae_seconds, vae_mm = r->vae_matmul_gflops;
	double vae_rate = vae_s > 0 ? r->vae_gflop / vae_s : 0;
	double vae_ratio = vae_s > 0 && vae_mm > 0 ? vae_rate / (vae_mm * r->vae_bands) : 0;
	/* the generation's phases, without the bench's own reference product */
	double total_s = open_s + r->steps_seconds + (vae_s > 0 ? vae_s : 0);
	int big = 0, total = r->warmup + r->timed, P = r->ranks;

	for (int i = 0; i < P; i++)
		if (r->rank[i].rss_mb > rss_max) {
			rss_max = r->rank[i].rss_mb;
			big = i;
		}
	w_mb = r->rank[big].weights_mb;
	act_mb = r->rank[big].work_mb;
	if (a->json) {
		printf("{\"model\": \"%s\", \"height\": %d, \"width\": %d, \"tokens\": %lld, \"dtype\": \"%s\", "
		       "\"ranks\": %d, \"threads\": %d, \"mesh\": \"%s\", \"images\": %lld, \"branches\": %d, "
		       "\"seconds_per_step\": %.6g, \"step_gflop\": %.10g, \"achieved_gflops\": %.6g, "
		       "\"matmul_gflops\": %.6g, \"ratio\": %.4g, \"bytes_sent_per_rank_per_step\": %llu, "
		       "\"bytes_sent_per_step_rank0\": %llu, \"peak_rss_mb\": %.1f, \"peak_rss_mb_per_rank\": [",
		       ab->model, g->height, g->width, (long long)(r->txt_len + r->img_len), g->dtype, P, ab->threads,
		       ab->mesh, (long long)r->images, r->branches, sps, r->step_gflop, achieved, mm,
		       mm > 0 ? achieved / (mm * P) : 0, (unsigned long long)r->bytes_max,
		       (unsigned long long)r->bytes_rank0, rss_max);
		for (int i = 0; i < P; i++)
			printf("%s%.1f", i ? ", " : "", r->rank[i].rss_mb);
		printf("], \"wait_seconds_per_step_per_rank\": [");
		for (int i = 0; i < P; i++)
			printf("%s%.4f", i ? ", " : "", r->rank[i].wait_s);
		printf("], \"weights_mb\": %.4f, \"activations_mb\": %.4f, \"estimate_mb\": %.4f, "
		       "\"peak_over_estimate\": %.3f, \"allocations_after_warmup\": %llu, "
		       "\"load_seconds\": %.6g, \"load_mb_per_second\": %.6g, \"vae_dtype\": \"%s\", "
		       "\"vae_bands\": %d, \"vae_seconds\": %.6g, \"vae_gflop\": %.9g, \"vae_gflops\": %.6g, "
		       "\"vae_matmul_gflops\": %.6g, \"vae_ratio\": %.6g, \"quant_products\": \"%s\", "
		       "\"int8_layers\": %d, \"ring_attention\": \"%s\"",
		       w_mb, act_mb, w_mb + act_mb, rss_max / (w_mb + act_mb), (unsigned long long)r->allocations,
		       r->rank[big].load_s, r->rank[big].load_s > 0 ? w_mb / r->rank[big].load_s : 0, ab->vae_dtype,
		       r->vae_bands, vae_s, r->vae_gflop, vae_rate, vae_mm, vae_ratio, ab->quant_products,
		       ab->int8_layers, ab->ring_attention);
		if (a->e2e)
			printf(", \"e2e\": {\"open_seconds\": %.6g, \"load_seconds\": %.6g, \"encode_seconds\": %.6g, "
			       "\"steps\": %d, \"steps_seconds\": %.6g, \"decode_seconds\": %.6g, \"total_seconds\": %.6g}",
			       open_s, ab->load_seconds, ab->encode_seconds, total, r->steps_seconds, vae_s, total_s);
		if (r->n_ops) {
			printf(", \"ops\": [");
			for (int i = 0; i < r->n_ops; i++)
				printf("%s{\"name\": \"%s\", \"calls\": %.6g, \"seconds\": %.6g, \"gflop\": %.10g}",
				       i ? ", " : "", r->ops[i].name, r->ops[i].calls, r->ops[i].seconds, r->ops[i].gflop);
			printf("]");
		}
		printf("}\n");
		return;
	}
	printf("pdit bench: %s, %dx%d (%lld text + %lld image tokens), %s, %d process%s x %d thread%s\n", ab->model,
	       g->width, g->height, (long long)r->txt_len, (long long)r->img_len, g->dtype, P, P > 1 ? "es" : "",
	       ab->threads, ab->threads > 1 ? "s" : "");
	printf("  mesh                            %s\n", ab->mesh);
	printf("  seconds per step                %.3f  (median of %d after %d warm-up)\n", sps, r->timed, r->warmup);
	printf("  step GFLOP                      %.1f  (%lld image%s x %d branch%s)\n", r->step_gflop,
	       (long long)r->images, r->images > 1 ? "s" : "", r->branches, r->branches > 1 ? "es" : "");
	printf("  achieved GFLOP/s                %.1f\n", achieved);
	printf("  matmul GFLOP/s per process      %.1f  (%s, %lldx%dx%d)\n", mm, g->dtype,
	       (long long)(r->txt_len + r->img_len), r->dim, r->mlp_width);
	printf("  ratio                           %.2f\n", mm > 0 ? achieved / (mm * P) : 0);
	if (ab->int8_layers)
		printf("  quantized products              int8 (%d layers on rank 0; --quant-products bf16 decodes)\n",
		       ab->int8_layers);
	if (ab->ring_attention[0])
		printf("  ring attention                  %s\n", ab->ring_attention);
	printf("  bytes sent per rank per step    %.1f MB (largest rank)\n", (double)r->bytes_max / 1e6);
	if (P > 1) {
		double lo = r->rank[0].wait_s, hi = r->rank[0].wait_s;

		for (int i = 1; i < P; i++) {
			lo = fmin(lo, r->rank[i].wait_s);
			hi = fmax(hi, r->rank[i].wait_s);
		}
		printf("  seconds waiting per step        %.3f to %.3f  (over the ranks, the mean of the timed"
		       " steps: in transfers, for peers)\n", lo, hi);
	}
	printf("  peak resident memory            %.0f MB (largest rank)", rss_max);
	if (P > 1) {
		printf(":");
		for (int i = 0; i < P; i++)
			printf(" %.0f", r->rank[i].rss_mb);
	}
	printf("\n");
	printf("  memory estimate                 %.0f MB = weights %.0f + activations %.0f (rank %d);"
	       " peak / estimate %.2f\n",
	       w_mb + act_mb, w_mb, act_mb, big, rss_max / (w_mb + act_mb));
	printf("  allocations in timed steps      %llu  (buffers and primitives, the most on a rank)\n",
	       (unsigned long long)r->allocations);
	printf("  loading                         %.2f s, %.0f MB/s  (the weights held, rank %d)\n",
	       r->rank[big].load_s, r->rank[big].load_s > 0 ? w_mb / r->rank[big].load_s : 0, big);
	if (vae_s >= 0)
		printf("  VAE decode                      %.2f s, %.1f GFLOP, %.1f GFLOP/s, %.2f of the matmul"
		       " rate at its shape (%.1f; %s convolutions, %d band%s)\n",
		       vae_s, r->vae_gflop, vae_rate, vae_ratio, vae_mm, ab->vae_dtype, r->vae_bands,
		       r->vae_bands > 1 ? "s" : "");
	if (r->n_ops)
		pd_bench_print_ops(r, sps);
	if (a->e2e)
		printf("  one generation                  %.2f s = opening %.2f (loading %.2f, encoding %.2f) +"
		       " %d steps %.2f + decode %.2f\n",
		       total_s, open_s, ab->load_seconds, ab->encode_seconds, total, r->steps_seconds, vae_s);
}

int pd_cmd_bench(struct pd_comm *world, int argc, char **argv)
{
	struct pd_bench_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_engine *e = NULL;
	struct pd_engine_about ab;
	struct pd_bench_report rep = { 0 };
	char **prompts = NULL, *default_embeds = NULL;
	int n_prompts = 0, hr, rc = 1;
	double t_start, open_s;

	pd_bench_flags(&a, opts);
	hr = pd_gen_parse(world, &a.gen, opts, "bench", pd_bench_usage, pd_bench_examples, argc, argv);
	if (hr == 1)
		return 0;
	/* pdit tiny writes prompt embeddings beside its model */
	if (!hr && !a.gen.embeds && !a.gen.prompt && !a.gen.prompts_file && a.gen.model) {
		default_embeds = pd_strfmt("%s/embeds.safetensors", a.gen.model);
		if (default_embeds && pd_file_exists(default_embeds))
			a.gen.embeds = default_embeds;
	}
	if (!hr && !a.gen.steps_seen) {
		a.gen.steps = 3;
		a.gen.steps_seen = 1;
	}
	if (a.e2e)
		a.vae_time = 1;
	t_start = pd_now();
	hr = hr || pd_gen_engine_options(&a.gen, &o, 0) || pd_gen_request(&a.gen, &rq, &prompts, &n_prompts);
	o.op_times = a.op_times;
	rq.steps = a.warmup + a.gen.steps;
	rq.want_pictures = 0;
	if (pd_cli_any_failed(world, hr))
		goto out;
	if (pd_engine_open(&e, world, &o, &rq)) {
		pd_gen_failed(world, NULL);
		goto out;
	}
	open_s = pd_now() - t_start;
	/* with more than one process the picture is decoded in bands over all
	 * of them, as generate does (--no-vae-parallel: rank 0 alone) */
	if (pd_engine_bench(e, &rq, a.warmup, a.vae_time, world->size > 1 && !a.gen.no_vae_parallel, &rep)) {
		pd_gen_failed(world, e);
		goto out;
	}
	pd_engine_about(e, &ab);
	if (world->rank == 0)
		pd_bench_print(&a, &ab, &rep, open_s);
	rc = 0;
out:
	pd_bench_report_free(&rep);
	free(default_embeds);
	pd_engine_close(e);
	pd_gen_free_prompts(prompts, n_prompts);
	return rc;
}
