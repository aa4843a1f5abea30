/*
 * pdit_plan.c - `pdit plan`: every valid mesh for N devices, ranked by the
 * predicted seconds per step (pd_plan.h), with the bytes and memory each
 * rank needs. Reads only the transformer's config.json.
 */
#include "pd_args.h"
#include "pd_backend.h"
#include "pd_model.h"
#include "pd_plan.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

double pd_bench_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N);

static const char pd_plan_usage[] =
	"usage: pdit plan --model DIR --devices N [-H 1024 -W 1024] [--batch B] [--true-cfg-scale C]\n"
	"                 [--gflops R] [--per-node K] [--memory GB] [--bandwidth GB/s] [--latency US] [--json]\n"
	"\n"
	"Lists every valid mesh of N processes for the model and size, ranked by the\n"
	"predicted seconds per denoising step, with the work, the bytes sent and the\n"
	"memory of the busiest process, and marks the meshes that do not fit. Without\n"
	"--gflops the rate is this machine's: a bf16 matrix product is timed here and\n"
	"the processes share the cores (as in `mpirun -np N` on this machine).";

static const char pd_plan_examples[] =
	"  pdit plan --model bench/flux-width --devices 4 -H 512 -W 512\n"
	"  pdit plan --model FLUX.1-dev --devices 8 --gflops 400000 --memory 80 --bandwidth 300 --latency 10\n";

struct pd_plan_row {
	struct pd_plan_mesh mesh;
	struct pd_plan_cost cost;
};

static int pd_plan_cmp(const void *a, const void *b)
{
	const struct pd_plan_row *x = a, *y = b;

	if (x->cost.fits != y->cost.fits)
		return y->cost.fits - x->cost.fits;
	return (x->cost.seconds > y->cost.seconds) - (x->cost.seconds < y->cost.seconds);
}

int pd_cmd_plan(int argc, char **argv)
{
	struct pd_model_flags mf = { 0 };
	struct pd_model_paths mp;
	struct pd_flux_config fc;
	struct pd_plan_work w = { 0 };
	struct pd_plan_machine mc = { 0 };
	struct pd_mesh_limits lim = { 0 };
	struct pd_plan_row *rows = NULL;
	int (*meshes)[PD_AXIS_COUNT] = NULL;
	int height = 1024, width = 1024, batch = 1, devices = 0, per_node = 0, txt = 0, json = 0, n, rc = 1;
	float cfg_scale = 1, gflops = 0, memory = 0, bandwidth = 0, latency = 0;
	const char *dtype = "bf16", *pos[1];
	int n_pos, hr;
	const struct pd_arg opts[] = {
		{ "--model", 'm', PD_ARG_STRING, &mf.model, "DIR", "diffusers FLUX folder (its transformer/config.json is read)", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &mf.transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--devices", 'n', PD_ARG_INT, &devices, "N", "processes (GPUs, or CPU processes on this machine)", NULL },
		{ "--height", 'H', PD_ARG_INT, &height, "PX", "image height, a multiple of 16 (default 1024)", NULL },
		{ "--width", 'W', PD_ARG_INT, &width, "PX", "image width, a multiple of 16 (default 1024)", NULL },
		{ "--batch", 0, PD_ARG_INT, &batch, "B", "images (default 1)", NULL },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &cfg_scale, "C", "true CFG when above 1: two branches, CFG parallel possible", NULL },
		{ "--txt-len", 0, PD_ARG_INT, &txt, "N", "text tokens (default 512, or 256 without guidance embedding)", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &dtype, "f32|bf16", "precision of the weights and products (default bf16)", NULL },
		{ "--gflops", 0, PD_ARG_FLOAT, &gflops, "R", "whole-step GFLOP/s of one device (default: measured here, shared cores)", NULL },
		{ "--per-node", 0, PD_ARG_INT, &per_node, "K", "devices per node (default: all on one)", NULL },
		{ "--memory", 0, PD_ARG_FLOAT, &memory, "GB", "memory per device (default: this machine's, shared)", NULL },
		{ "--bandwidth", 0, PD_ARG_FLOAT, &bandwidth, "GB/s", "link bandwidth within a node (default 5, shared memory)", NULL },
		{ "--latency", 0, PD_ARG_FLOAT, &latency, "US", "per-transfer latency within a node, microseconds (default 20)", NULL },
		{ "--json", 0, PD_ARG_FLAG, &json, NULL, "one JSON object per mesh, one a line", NULL },
		{ 0 },
	};

	memset(&mp, 0, sizeof(mp));
	hr = pd_args_parse("plan", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_plan_usage, opts, pd_plan_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (devices < 1 || devices > 4096) {
		pd_errorf("--devices must be between 1 and 4096 (got %d)", devices);
		return pd_cli_fail();
	}
	if (height < 16 || width < 16 || height % 16 || width % 16 || height > 16384 || width > 16384 || batch < 1 ||
	    batch > 4096 || txt < 0 || txt > 4096 || per_node < 0 || !(gflops >= 0) || !(memory >= 0) ||
	    !(bandwidth >= 0) || !(latency >= 0)) {
		pd_errorf("plan: sizes must be multiples of 16 up to 16384, --batch 1..4096, and rates, memory, bandwidth "
			  "and latency not negative");
		return pd_cli_fail();
	}
	if (strcmp(dtype, "bf16") && strcmp(dtype, "f32")) {
		pd_errorf("--dtype must be f32 or bf16, not '%s'", dtype);
		return pd_cli_fail();
	}
	if (pd_model_paths_resolve(&mp, &mf, 0) || pd_flux_config_load(&fc, mp.transformer))
		goto out;
	w.cfg = &fc;
	w.txt_len = txt ? txt : fc.guidance_embeds ? 512 : 256;
	w.img_len = (int64_t)(height / 16) * (width / 16);
	w.images = batch;
	w.branches = cfg_scale > 1 ? 2 : 1;
	w.weight_bytes = strcmp(dtype, "bf16") == 0 ? 2 : 4;
	mc.devices = devices;
	mc.per_node = per_node ? per_node : devices;
	mc.bw_intra = (bandwidth > 0 ? bandwidth : 5) * 1e9;
	mc.lat_intra = (latency > 0 ? latency : 20) * 1e-6;
	mc.bw_inter = mc.bw_intra;
	mc.lat_inter = mc.lat_intra;
	if (gflops > 0) {
		mc.gflops = gflops;
		mc.mem_gb = memory;
	} else {
		/* this machine: a bf16 product at the model's widest shape, the
		 * whole-step rate taken as 0.85 of it (pdit bench measures 0.84 -
		 * 0.90 here), the cores and memory shared by the processes */
		struct pd_backend *be = NULL;

		if (pd_backend_cpu_new(&be, strcmp(dtype, "bf16") == 0 ? PD_BF16 : PD_F32, 0))
			goto out;
		mc.gflops = 0.85 * pd_bench_matmul(be, w.txt_len + w.img_len, fc.dim, fc.mlp_dim);
		pd_backend_free(be);
		if (mc.gflops <= 0) {
			pd_errorf("could not time a matrix product here; give --gflops");
			goto out;
		}
		mc.shared = 1;
		mc.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
		mc.mem_gb = memory > 0 ? memory : pd_mem_available_mb() / 1024.0;
	}
	lim.world = devices;
	lim.heads = fc.heads;
	lim.cfg_possible = w.branches == 2;
	lim.images = batch;
	lim.max_pp = pd_flux_blocks(&fc);
	n = pd_mesh_enumerate(&lim, NULL, 0);
	meshes = pd_calloc((size_t)n + 1, sizeof(*meshes), "meshes");
	rows = pd_calloc((size_t)(2 * n) + 1, sizeof(*rows), "meshes");
	if (!meshes || !rows)
		goto out;
	pd_mesh_enumerate(&lim, meshes, n);
	{
		int k = 0;

		for (int i = 0; i < n; i++) {
			for (int df = 0; df < 2; df++) {
				struct pd_plan_row *r = &rows[k];

				/* DistriFusion on the ring axis, with CFG and data parallel only */
				if (df && (meshes[i][PD_AXIS_RING] < 2 || meshes[i][PD_AXIS_ULYSSES] > 1 ||
					   meshes[i][PD_AXIS_TP] > 1 || meshes[i][PD_AXIS_PP] > 1))
					continue;
				memcpy(r->mesh.degree, meshes[i], sizeof(meshes[i]));
				r->mesh.distrifusion = df;
				if (pd_plan_cost(&w, &mc, &r->mesh, &r->cost))
					goto out;
				k++;
			}
		}
		n = k;
	}
	if (n == 0) {
		pd_errorf("no mesh of %d processes suits this model and work (heads %d, %d blocks, %d image%s%s)", devices,
			  fc.heads, pd_flux_blocks(&fc), batch, batch > 1 ? "s" : "", w.branches == 2 ? ", true CFG" : "");
		goto out;
	}
	qsort(rows, (size_t)n, sizeof(*rows), pd_plan_cmp);
	if (!rows[0].cost.fits) {
		/* none fits: name the smallest */
		for (int i = 1; i < n; i++)
			if (rows[i].cost.memory_gb < rows[0].cost.memory_gb)
				rows[0] = rows[i];
		pd_errorf("no mesh of %d processes fits in %.1f GB per device: the smallest needs %.1f GB (weights %.1f, "
			  "activations %.1f); add devices or memory, or lower the size", devices, mc.mem_gb,
			  rows[0].cost.memory_gb, rows[0].cost.weights_gb, rows[0].cost.activations_gb);
		goto out;
	}
	if (!json)
		printf("pdit plan: %s, %dx%d (%lld text + %lld image tokens), %d image%s%s, %d device%s at %.0f GFLOP/s%s\n"
		       "%-44s %9s %9s %9s %11s %9s\n", mp.transformer, width, height, (long long)w.txt_len,
		       (long long)w.img_len, batch, batch > 1 ? "s" : "", w.branches == 2 ? " x 2 branches" : "", devices,
		       devices > 1 ? "s" : "", mc.gflops, mc.shared ? " shared (this machine)" : " each",
		       "mesh", "s/step", "compute", "comm", "MB/rank", "GB/rank");
	for (int i = 0; i < n; i++) {
		char name[160];
		const struct pd_plan_cost *c = &rows[i].cost;

		pd_mesh_format(rows[i].mesh.degree, rows[i].mesh.distrifusion, name, sizeof(name));
		if (json)
			printf("{\"mesh\": \"%s\", \"seconds_per_step\": %.6g, \"compute_seconds\": %.6g, \"comm_seconds\": %.6g, "
			       "\"gflop_per_rank\": %.6g, \"bytes_sent_per_rank_per_step\": %.0f, \"memory_gb\": %.4g, "
			       "\"weights_gb\": %.4g, \"activations_gb\": %.4g, \"fits\": %s}\n", name, c->seconds, c->compute_s,
			       c->comm_s, c->gflop, c->bytes, c->memory_gb, c->weights_gb, c->activations_gb,
			       c->fits ? "true" : "false");
		else
			printf("%-44s %9.3f %9.3f %9.3f %11.1f %9.2f%s\n", name, c->seconds, c->compute_s, c->comm_s,
			       c->bytes / 1e6, c->memory_gb, c->fits ? "" : "  does not fit");
	}
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	free(meshes);
	free(rows);
	pd_model_paths_free(&mp);
	return rc;
}
