/*
 * pdit_plan.c - `pdit plan`: every valid mesh for N devices, ranked by the
 * predicted seconds per step (pd_plan.h), with the bytes and memory each
 * rank needs. Reads only the transformer's config.json.
 */
#include "pd_args.h"
#include "pd_util.h"
#include "pdit_cli.h"
#include "pdit_flags.h"
#include "pdit_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char pd_plan_usage[] =
	"usage: pdit plan --model DIR --devices N [-H 1024 -W 1024] [--steps S] [--batch B] [--true-cfg-scale C]\n"
	"                 [--device h100|h200|a100|l40 | --gflops R] [--memory GB] [--per-node K [--one-machine]]\n"
	"                 [--link nvlink|pcie|ib|ethernet|shm | --bandwidth GB/s --latency US]\n"
	"                 [--inter-link KIND | --inter-bandwidth GB/s --inter-latency US] [--quant-products Q]\n"
	"                 [--ring-attention merged|gathered|auto] [--json]\n"
	"\n"
	"Lists every valid mesh of N processes for the model and size, ranked by the\n"
	"predicted seconds per denoising step, with the work, the bytes sent and the\n"
	"memory of the busiest process, and marks the meshes that do not fit. Without\n"
	"--device or --gflops the devices are this machine's: a bf16 matrix product is\n"
	"timed here, and the processes share its cores and memory (as `mpirun -np N`\n"
	"does here). The --device and --link presets carry published peak figures\n"
	"(listed below); a device's whole-step rate is --efficiency times its peak.\n"
	"A run's seconds add --steps steps and the VAE decode, in bands over each\n"
	"data-parallel group. Devices fill nodes of --per-node in rank order: a method\n"
	"whose groups lie within a node uses --link, the others --inter-link. \"stale\"\n"
	"marks the meshes whose picture differs a little from one process's (PipeFusion\n"
	"and DistriFusion attend to some keys and values a step old); the others are\n"
	"exact. `pdit generate --parallel auto` runs the first exact one. The model and\n"
	"its error against measured steps: docs/plan.md.\n"
	"\n"
	"Presets (published peak figures, dense bf16 with f32 accumulation):\n"
	"  h100  H100 SXM5, 989 TFLOP/s, 80 GB at 3.35 TB/s    nvlink    NVLink 4, 450 GB/s each way per GPU\n"
	"  h200  H200 SXM, 989 TFLOP/s, 141 GB at 4.8 TB/s     pcie      PCIe 4.0 x16, 32 GB/s each way\n"
	"  a100  A100 SXM4, 312 TFLOP/s, 80 GB at 2.04 TB/s    ib        InfiniBand NDR, 50 GB/s per GPU\n"
	"  l40   L40, 181 TFLOP/s, 48 GB at 0.86 TB/s          ethernet  100 GbE, 12.5 GB/s\n"
	"                                                      shm       processes on one machine\n"
	"A step takes at least the time to read the rank's weights at the memory\n"
	"bandwidth (--memory-bandwidth; not modelled for this machine's processes).\n"
	"Latencies (assumed, not published peaks): nvlink 5 us, pcie 10 us, ib 5 us,\n"
	"ethernet 30 us, shm 20 us.";

static const char pd_plan_examples[] =
	"  pdit plan --model bench/flux-width --devices 4 -H 512 -W 512\n"
	"  pdit plan --model FLUX.1-dev --devices 16 --device h100 --per-node 8 --link nvlink --inter-link ib\n"
	"  pdit plan --model FLUX.1-dev --devices 8 --device l40 --link pcie -H 2048 -W 2048\n"
	"  pdit plan --model FLUX.1-dev --devices 4 --gflops 400000 --memory 80 --bandwidth 300 --latency 10\n"
	"  pdit plan --model bench/flux-width --devices 4 -H 512 -W 512 --per-node 1 --one-machine \\\n"
	"      --inter-bandwidth 0.125 --inter-latency 50    (4 namespaces of this machine, 1 Gbit/s links)\n";

int pd_cmd_plan(int argc, char **argv)
{
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_engine_work ew = { 0 };
	const struct pd_plan_work *w = &ew.work;
	struct pd_plan_machine mc = { 0 };
	struct pd_plan_row *rows = NULL;
	int height = PD_DEFAULT, width = PD_DEFAULT, frames = PD_DEFAULT, batch = 1, devices = 0, devices_seen = 0;
	int per_node = 0, txt = PD_DEFAULT, json = 0, steps = PD_DEFAULT, keep_enc = 0, n, rc = 1;
	int one_machine = 0;
	float cfg_scale = -1, guidance = -1, gflops = 0, memory = 0, bandwidth = 0, latency = 0, inter_bw = 0, inter_lat = 0;
	float efficiency = 0.5f, mem_bw = 0, matmul = 0, weight_ns = -1, int8_speed = -1;
	const char *dtype = "bf16", *device = NULL, *link = NULL, *inter_link = NULL, *qprod = NULL, *ring = NULL, *pos[1];
	const char *diffusion_model = NULL, *config = NULL, *model = NULL, *transformer = NULL, *vae = NULL, *ref = NULL;
	struct pd_arg_list lora = { 0 };
	const struct pd_plan_preset *dev = NULL, *ln = NULL, *iln = NULL;
	int n_pos, hr;
	struct pd_cli_encoders enc;
	struct pd_arg opts[64];
	int k = 0;
	const struct pd_arg base[] = {
		{ "--model", 'm', PD_ARG_STRING, &model, "DIR", "diffusers model folder: its transformer and VAE configs and the text encoders' headers are read", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--diffusion-model", 0, PD_ARG_STRING, &diffusion_model, "FILE", "transformer in one file (safetensors, fp8, GGUF): its header is read, quantized weights counted as stored", NULL },
		{ "--config", 0, PD_ARG_STRING, &config, "FILE", "the transformer's config.json, for a single file that carries none (FLUX.1's sizes are inferred)", NULL },
		{ "--vae", 0, PD_ARG_STRING, &vae, "DIR", "VAE folder (overrides --model's)", NULL },
		{ NULL, 0, PD_ARG_STRING, &enc, NULL, NULL, NULL }, /* the text encoders' weights go here */
		/* an int, its range checked below: a count's message offers a default it has not */
		{ "--devices", 'N', PD_ARG_INT, &devices, "N", "processes (GPUs, or CPU processes on this machine); required", &devices_seen },
		{ "--height", 'H', PD_ARG_COUNT, &height, "PX", "image height, a multiple of 16 (default 1024; Wan 480; Qwen-Image 1328)", NULL },
		{ "--width", 'W', PD_ARG_COUNT, &width, "PX", "image width, a multiple of 16 (default 1024; Wan 832; Qwen-Image 1328)", NULL },
		{ "--frames", 0, PD_ARG_COUNT, &frames, "N", "video frames, 4k + 1 (Wan; default 81)", NULL },
		{ "--steps", 0, PD_ARG_COUNT, &steps, "S", "denoising steps, for the seconds of a run with its decode (default: FLUX 28, or 4 without guidance embedding; Wan and Qwen-Image 50)", NULL },
		{ "--batch", 0, PD_ARG_COUNT, &batch, "B", "images (default 1)", NULL },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &cfg_scale, "C", "true CFG when above 1: two branches, CFG parallel possible (default 1; Qwen-Image 4)", NULL },
		{ "--guidance", 0, PD_ARG_FLOAT, &guidance, "G", "Wan: classifier-free guidance (default 5): above 1, two branches", NULL },
		{ "--txt-len", 0, PD_ARG_COUNT, &txt, "N", "text tokens (default 512, or 256 without guidance embedding)", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &dtype, "f32|bf16", "precision of the weights and products (default bf16)", NULL },
		{ "--device", 0, PD_ARG_STRING, &device, "NAME", "h100, h200, a100 or l40: published peak rate and memory", NULL },
		{ "--efficiency", 0, PD_ARG_FLOAT, &efficiency, "F", "with --device: the fraction of peak a whole step reaches (default 0.5: xDiT's one-H100 FLUX.1-dev figure)", NULL },
		{ "--gflops", 0, PD_ARG_FLOAT, &gflops, "R", "whole-step GFLOP/s of one device (default: measured here, shared cores)", NULL },
		{ "--memory", 0, PD_ARG_FLOAT, &memory, "GB", "memory per device (default: the preset's, or this machine's, shared)", NULL },
		{ "--matmul-gflops", 0, PD_ARG_FLOAT, &matmul, "R", "this machine's bf16 product rate, all cores (instead of timing one: to compare with a bench run's; the weights' part of a product is still timed unless --weight-ns is given, the elementwise kernels, a tenth of a second, and the int8 layers' product unless --int8-speed is given)", NULL },
		{ "--int8-speed", 0, PD_ARG_FLOAT, &int8_speed, "X", "how many times a bf16 product's rate the layers on int8 products run (instead of timing one of the file's type against a bf16 one; as printed by an earlier plan)", NULL },
		{ "--weight-ns", 0, PD_ARG_FLOAT, &weight_ns, "NS", "what a product spends per weight whatever its rows here, nanoseconds, all cores (instead of timing it with the product; as printed by an earlier plan)", NULL },
		{ "--memory-bandwidth", 0, PD_ARG_FLOAT, &mem_bw, "GB/s", "a device's memory bandwidth (default: the preset's; none here)", NULL },
		{ "--per-node", 0, PD_ARG_COUNT, &per_node, "K", "devices per node (default: all on one)", NULL },
		{ "--one-machine", 0, PD_ARG_FLAG, &one_machine, NULL, "the nodes of --per-node are network namespaces of this machine (tests/hosts/hosts.sh): every process shares its cores and memory, only the links between nodes are theirs", NULL },
		{ "--link", 0, PD_ARG_STRING, &link, "KIND", "link within a node: nvlink, pcie, ib, ethernet, shm (default: shm for this machine's processes, else nvlink)", NULL },
		{ "--bandwidth", 0, PD_ARG_FLOAT, &bandwidth, "GB/s", "link bandwidth within a node, each way (overrides --link's)", NULL },
		{ "--latency", 0, PD_ARG_FLOAT, &latency, "US", "per-transfer latency within a node, microseconds (overrides --link's)", NULL },
		{ "--inter-link", 0, PD_ARG_STRING, &inter_link, "KIND", "link between nodes (default ib)", NULL },
		{ "--inter-bandwidth", 0, PD_ARG_FLOAT, &inter_bw, "GB/s", "bandwidth between nodes per device, each way (overrides --inter-link's)", NULL },
		{ "--inter-latency", 0, PD_ARG_FLOAT, &inter_lat, "US", "latency between nodes, microseconds (overrides --inter-link's)", NULL },
		{ "--lora", 0, PD_ARG_LIST, &lora, "FILE[:SCALE]", "a LoRA adapter: its terms counted beside the layers, sharded as they are (repeatable)", NULL },
		{ "--ref-image", 'r', PD_ARG_STRING, &ref, "FILE", "FLUX.1 Kontext's reference picture: its tokens join every call's sequence", NULL },
		{ "--quant-products", 0, PD_ARG_STRING, &qprod, "int8|int8-256|bf16|auto", "as a run's: how the layers kept quantized (GGUF, fp8) will multiply, which sets the bytes they hold and what tensor parallel sends (int8 gathers its inputs whole); default auto, as a run on this CPU would choose (a mesh that fits only with the file's blocks is planned as a run takes it: decoded, marked so); with --device: bf16, the GPU's only form", NULL },
		{ "--ring-attention", 0, PD_ARG_STRING, &ring, "merged|gathered|auto", "as a run's: ring attention's form, gathered holding the whole sequence's K/V (default auto: gathered where the layers multiply in int8)", NULL },
		{ "--keep-encoders", 0, PD_ARG_FLAG, &keep_enc, NULL, "count the text encoders as held beside the transformer, as pdit serve keeps them (otherwise they are freed before it loads)", NULL },
		{ "--json", 0, PD_ARG_FLAG, &json, NULL, "one JSON object per mesh, one a line", NULL },
	};

	for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
		if (base[i].long_name)
			opts[k++] = base[i];
		else
			k = pd_cli_encoder_flags(&enc, opts, k, 0);
	memset(&opts[k], 0, sizeof(opts[k]));
	hr = pd_args_parse("plan", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_plan_usage, opts, pd_plan_examples);
		return 0;
	}
	if (hr)
		return pd_cli_fail();
	if (!devices_seen) {
		pd_errorf("plan needs --devices N (the processes to plan for)");
		return pd_cli_fail();
	}
	if (devices < 1 || devices > 4096) {
		pd_errorf("-N/--devices must be between 1 and 4096 (got %d)", devices);
		return pd_cli_fail();
	}
	/* the counts are PD_DEFAULT or at least 1 (the parser refuses the rest);
	 * each bad value named with its flag */
	{
		const struct {
			int bad;
			const char *flag, *rule;
			double got;
		} lim[] = {
			{ (height > 0 && height % 16) || height > 16384, "-H/--height", "a multiple of 16 up to 16384", height },
			{ (width > 0 && width % 16) || width > 16384, "-W/--width", "a multiple of 16 up to 16384", width },
			{ frames > 100000, "--frames", "at most 100000", frames },
			{ batch > 4096, "--batch", "at most 4096", batch },
			{ txt > 4096, "--txt-len", "at most 4096", txt },
			{ steps > 10000, "--steps", "at most 10000", steps },
			{ !(efficiency > 0 && efficiency <= 1), "--efficiency", "above 0 and at most 1", efficiency },
			{ !(gflops >= 0), "--gflops", "not negative", gflops },
			{ !(memory >= 0), "--memory", "not negative", memory },
			{ !(mem_bw >= 0), "--memory-bandwidth", "not negative", mem_bw },
			{ !(matmul >= 0), "--matmul-gflops", "not negative", matmul },
			{ !(weight_ns >= 0 || weight_ns == -1), "--weight-ns", "not negative", weight_ns },
			{ !(bandwidth >= 0), "--bandwidth", "not negative", bandwidth },
			{ !(latency >= 0), "--latency", "not negative", latency },
			{ !(inter_bw >= 0), "--inter-bandwidth", "not negative", inter_bw },
			{ !(inter_lat >= 0), "--inter-latency", "not negative", inter_lat },
		};

		for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++)
			if (lim[i].bad) {
				pd_errorf("%s must be %s (got %g)", lim[i].flag, lim[i].rule, lim[i].got);
				return pd_cli_fail();
			}
	}
	if ((device && gflops > 0) || (device && !(dev = pd_plan_preset_find(pd_plan_devices, device, "--device"))) ||
	    (link && !(ln = pd_plan_preset_find(pd_plan_links, link, "--link"))) ||
	    (inter_link && !(iln = pd_plan_preset_find(pd_plan_links, inter_link, "--inter-link")))) {
		if (device && gflops > 0)
			pd_errorf("give --device or --gflops, not both");
		return pd_cli_fail();
	}
	if (!(int8_speed > 0 || int8_speed == -1)) {
		pd_errorf("--int8-speed must be above 0 (got %g)", int8_speed);
		return pd_cli_fail();
	}
	if (device && (int8_speed > 0 || (qprod && !strncmp(qprod, "int8", 4)))) {
		pd_errorf("%s%s with --device %s: a GPU decodes the quantized layers (bf16)",
			  int8_speed > 0 ? "--int8-speed" : "--quant-products ", int8_speed > 0 ? "" : qprod, device);
		return pd_cli_fail();
	}
	if ((one_machine || weight_ns >= 0) && (device || gflops > 0)) {
		pd_errorf("%s plans for this machine's processes: give it without --device and --gflops",
			  one_machine ? "--one-machine" : "--weight-ns");
		return pd_cli_fail();
	}
	if (diffusion_model && transformer) {
		pd_errorf("give --transformer or --diffusion-model, not both");
		return pd_cli_fail();
	}
	pd_engine_options_init(&o);
	o.model = model;
	o.transformer = diffusion_model ? diffusion_model : transformer;
	o.transformer_config = config;
	o.vae = vae;
	if (pd_cli_encoder_options(&enc, &o))
		goto out;
	o.dtype = dtype;
	o.keep_encoders = keep_enc;
	/* FILE:SCALE's ':' is cut where the path ends */
	for (int i = 0; i < lora.n; i++)
		pd_lora_spec_parse(lora.v[i], &o.loras[i]);
	pd_request_init(&rq);
	rq.height = height;
	rq.width = width;
	rq.frames = frames;
	rq.steps = steps;
	rq.batch = batch;
	rq.true_cfg_scale = cfg_scale;
	rq.guidance = guidance;
	rq.max_seq = txt;
	rq.ref_image = ref;
	/* a GPU holds quantized weights as the file does, not in this CPU's
	 * int8 layout */
	o.quant_products = dev && (!qprod || !strcmp(qprod, "auto")) ? "bf16" : qprod;
	o.ring_attention = ring;
	if (pd_engine_work(&o, &rq, devices, &ew))
		goto out;
	if (dev) {
		mc.gflops = dev->a * 1000 * efficiency;
		mc.mem_gb = memory > 0 ? memory : dev->b;
		mc.mem_bw = dev->c * 1e9;
	} else if (gflops > 0) {
		mc.gflops = gflops;
		mc.mem_gb = memory;
		mc.int8_speed = int8_speed > 0 ? int8_speed : 0;
	} else {
		double t0 = pd_now();

		/* the one long phase of a plan: say so before, and how long after */
		pd_log(1, "pdit: timing a %s matrix product on this machine (--device or --gflops skip it)...\n",
		       dtype);
		if (pd_plan_machine_here(&mc, w, devices, devices, 3, matmul, weight_ns >= 0 ? weight_ns * 1e-9 : -1))
			goto out;
		if (int8_speed > 0)
			mc.int8_speed = int8_speed;
		else if (pd_plan_machine_int8(&mc, w))
			goto out;
		pd_log(1, "pdit: timed in %.1f s\n", pd_now() - t0);
		if (memory > 0)
			mc.mem_gb = memory;
	}
	if (mem_bw > 0)
		mc.mem_bw = mem_bw * 1e9;
	mc.devices = devices;
	mc.per_node = per_node ? per_node : devices;
	mc.one_machine = one_machine;
	if (!ln)
		ln = pd_plan_preset_find(pd_plan_links, mc.shared ? "shm" : "nvlink", "--link");
	if (!iln)
		iln = pd_plan_preset_find(pd_plan_links, "ib", "--inter-link");
	mc.bw_intra = (bandwidth > 0 ? bandwidth : ln->a) * 1e9;
	mc.lat_intra = (latency > 0 ? latency : ln->b) * 1e-6;
	mc.bw_inter = (inter_bw > 0 ? inter_bw : iln->a) * 1e9;
	mc.lat_inter = (inter_lat > 0 ? inter_lat : iln->b) * 1e-6;
	if (pd_plan_list(w, &mc, &ew.lim, &rows, &n))
		goto out;
	if (n == 0) {
		pd_errorf("no mesh of %d process(es) suits this model and work (heads %d, %d blocks, %d image%s%s)", devices,
			  ew.info.heads, ew.info.blocks, batch, batch > 1 ? "s" : "", w->branches == 2 ? ", true CFG" : "");
		goto out;
	}
	if (!rows[0].cost.fits) {
		/* none fits: name the smallest */
		for (int i = 1; i < n; i++)
			if (rows[i].cost.memory_gb < rows[0].cost.memory_gb)
				rows[0] = rows[i];
		char enc[64] = "";

		/* (the text encoders' part only when there are any) */
		if (w->encoders_gb > 0)
			snprintf(enc, sizeof(enc), ", or the text encoders %.3g", w->encoders_gb);
		/* three figures: a small model's 0.04 GB is not "0.0" */
		pd_errorf("no mesh of %d process(es) fits in %.3g GB %s: the smallest needs %.3g GB a process (weights %.3g, "
			  "activations %.3g%s); add devices or memory, or lower the size", devices, mc.mem_gb,
			  mc.shared ? "shared by the processes" : "per device", rows[0].cost.memory_gb,
			  rows[0].cost.weights_gb, rows[0].cost.activations_gb, enc);
		goto out;
	}
	steps = ew.steps;
	if (!json) {
		char refs[64] = "", mem[32];

		if (w->ref_len)
			snprintf(refs, sizeof(refs), " + %lld reference", (long long)w->ref_len);
		printf("pdit plan: %s, %dx%d%s%.0d (%lld text + %lld image%s tokens), %d %s%s%s, %d steps\n", ew.transformer,
		       ew.width, ew.height, ew.frames > 1 ? ", frames " : "", ew.frames > 1 ? ew.frames : 0, (long long)w->txt_len,
		       (long long)w->img_len, refs, batch, ew.frames > 1 ? "video" : "image", batch > 1 ? "s" : "",
		       w->branches == 2 ? " x 2 branches" : "", steps);
		/* (a memory below 10 GB, as the tests give, in its digits) */
		snprintf(mem, sizeof(mem), mc.mem_gb >= 10 ? "%.0f" : "%.2g", mc.mem_gb);
		printf("  %d device%s at %.0f GFLOP/s%s, %s GB%s; within a node %.1f GB/s, %.0f us", devices,
		       devices > 1 ? "s" : "", mc.gflops,
		       mc.shared ? " shared (this machine)" : " each", mem,
		       mc.shared ? " shared" : " each", mc.bw_intra / 1e9, mc.lat_intra * 1e6);
		if (mc.per_node < devices)
			printf("; %d a node, between nodes %.1f GB/s, %.0f us", mc.per_node, mc.bw_inter / 1e9,
			       mc.lat_inter * 1e6);
		if (mc.one_machine)
			printf("\n  the nodes are namespaces of this machine: all %d processes share its cores", devices);
		if (mc.weight_s > 0)
			printf("\n  a product spends %.3g ns a weight (all cores) whatever its rows: ranks with fewer rows a "
			       "product pay more of it", mc.weight_s * 1e9);
		if (mc.int8_speed > 0 && w->info->int8_fraction > 0)
			printf("\n  the layers on int8 products (%.0f%% of the weights) run at %.2f x a %s product's rate",
			       100 * w->info->kept_fraction * w->info->int8_fraction, mc.int8_speed, dtype);
		else if (!dev && gflops > 0 && w->info->int8_fraction > 0)
			/* --gflops: another machine's rate, whose int8 speed is not
			 * known here */
			printf("\n  the layers on int8 products (%.0f%% of the weights) counted at a %s product's rate: "
			       "--int8-speed X counts them X times faster (a plan without --gflops times X)",
			       100 * w->info->kept_fraction * w->info->int8_fraction, dtype);
		if (dev)
			printf("\n  %s: %.0f%% of its published %.0f TFLOP/s peak", dev->name, efficiency * 100, dev->a);
		if (w->adapter_bytes > 0)
			printf("\n  LoRA adapters %.1f MB at most, beside the layers: each rank holds its layers' share",
			       w->adapter_bytes / 1e6);
		if (w->encoders_gb > 0)
			printf("\n  text encoders %.1f GB on one process per data-parallel group, before the transformer",
			       w->encoders_gb);
		if (w->vae_gflop > 0)
			printf("\n  VAE decode %.0f GFLOP a %s, in bands over each data-parallel group", w->vae_gflop,
			       ew.frames > 1 ? "video" : "picture");
		printf("\n%-44s %6s %9s %9s %9s %9s %9s %11s %11s %9s\n", "mesh", "", "s/step", "compute", "comm",
		       "VAE s", "s/run", "MB/rank", "MB between", "GB/rank");
	}
	for (int i = 0; i < n; i++) {
		char name[160];
		const struct pd_plan_cost *c = &rows[i].cost;

		pd_mesh_format(rows[i].mesh.degree, name, sizeof(name));
		if (json)
			printf("{\"mesh\": \"%s\", \"seconds_per_step\": %.6g, \"compute_seconds\": %.6g, \"comm_seconds\": %.6g, "
			       "\"vae_seconds\": %.6g, \"seconds_per_run\": %.6g, \"gflop_per_rank\": %.6g, "
			       "\"weight_seconds\": %.6g, \"bytes_sent_per_rank_per_step\": %.0f, \"rounds_per_step\": %d, "
			       "\"bytes_between_nodes\": %.0f, \"memory_gb\": %.6g, \"weights_gb\": %.6g, "
			       "\"activations_gb\": %.6g, \"encoders_gb\": %.6g, \"vae_gb\": %.6g, \"stale\": %s, "
			       "\"fits\": %s, \"decoded\": %s, \"int8_speed\": %.6g}\n", name, c->seconds, c->compute_s, c->comm_s, c->vae_s,
			       c->seconds * steps + c->vae_s, c->gflop, c->weight_extra_s, c->bytes, c->rounds, c->inter_bytes, c->memory_gb,
			       c->weights_gb, c->activations_gb, w->encoders_gb, c->vae_gb, rows[i].stale ? "true" : "false",
			       c->fits ? "true" : "false", c->decoded ? "true" : "false",
			       w->info->int8_fraction > 0 && !c->decoded ? mc.int8_speed : 0);
		else
			printf("%-44s %6s %9.3f %9.3f %9.3f %9.3f %9.2f %11.1f %11.1f %9.2f%s\n", name,
			       rows[i].stale ? "stale" : "exact", c->seconds, c->compute_s, c->comm_s, c->vae_s,
			       c->seconds * steps + c->vae_s, c->bytes / 1e6, c->inter_bytes / 1e6, c->memory_gb,
			       !c->fits ? "  does not fit" : c->decoded ? "  decoded: int8's layout does not fit" : "");
	}
	/* what a process's peak memory holds besides (a tiny model's runs
	 * peak near 0.2 GB: pdit generate's "peak memory" line) */
	if (!json)
		printf("(GB/rank: weights, activations and the decode; each process also holds about 0.2 GB of code, "
		       "libraries and buffers)\n");
	rc = 0;
out:
	if (rc)
		pd_cli_fail();
	free(rows);
	pd_engine_work_free(&ew);
	return rc;
}
