/*
 * pdit_run.c - `pdit generate`, `pdit check` and `pdit bench`, on one process or a
 * mesh of them (mpirun -np N pdit ...): the options become an engine's
 * options and one request (engine/pdit.h). generate opens the engine, runs
 * the request and writes what it made; check and bench look inside the run
 * (engine/pd_engine.h). A failure the engine reports is printed by the
 * lowest failing rank; one in the middle of collective work ends the whole
 * job instead of leaving the others waiting.
 */
#include "pd_args.h"
#include "pd_backend_cpu.h"
#include "pd_backend_rate.h"
#include "pd_engine.h"
#include "pd_png.h"
#include "pd_prompts.h"
#include "pd_safetensors.h"
#include "pd_st_writer.h"
#include "pd_util.h"
#include "pd_video.h"
#include "pdit_cli.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_gen_args {
	const char *model, *transformer, *vae, *scheduler;
	const char *diffusion_model, *text_encoder, *text_encoder_2, *clip_l, *t5xxl, *tokenizer, *tokenizer_2;
	const char *config;             /* --config: a single-file transformer's config.json */
	const char *quantize;           /* --quantize: the blocks' plain weights encoded at load */
	const char *prompt, *negative, *prompts_file;
	int max_seq;
	const char *embeds, *output, *out_latents, *init_latents, *dtype, *vae_dtype;
	int height, width, frames, frames_seen, steps, threads, verbose, quiet, output_seen, fps, guidance_seen;
	float flow_shift;
	float guidance, true_cfg_scale, fbcache, comm_timeout;
	uint64_t seed;
	int steps_seen;
	/* mesh degrees (0: not given) */
	int dp, tp, ulysses, ring, pp, cfg_parallel, distrifusion, warmup_steps, patches;
	int no_vae_parallel, vae_parallel;
	const char *parallel;           /* --parallel auto|auto-stale, or NULL */
	/* pdit check */
	const char *golden;
	float tolerance;
	/* pdit bench */
	int warmup, json, vae_time, batch, e2e;
	/* pdit serve */
	const char *listen, *api_key;
	int queue, strict, io_timeout, max_body_kb;
};

static const char pd_gen_usage[] =
	"usage: [mpirun -np N] pdit generate (--model DIR | --transformer DIR|--diffusion-model FILE ...)\n"
	"                                  (-p TEXT | --prompts FILE | --embeds FILE) [options]\n"
	"\n"
	"Runs FLUX.1 from a prompt to a PNG, numerically equal to diffusers' FluxPipeline\n"
	"with the same seed. Several prompts (--prompts, one a line) make several images:\n"
	"image b uses seed + b and is written as NAME-b.png (or through a %d in the\n"
	"name). Under mpirun the processes form a mesh of degrees\n"
	"dp x cfg x pp x ring x ulysses x tp = N (pdit picks one when no degree is given);\n"
	"every mesh of exact methods computes the same pictures as one process.\n"
	"PipeFusion (pp) and DistriFusion attend to some keys and values one step old\n"
	"after --warmup-steps exact steps: less traffic or more overlap, slightly\n"
	"different pictures (use pdit check to see how different).";

static const char pd_gen_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit generate --model tiny-model -p \"a photo of a cat\" -H 256 -W 256 --steps 4 -o out.png\n"
	"  mpirun -np 4 pdit generate --model tiny-model -p \"a red fox\" -H 256 -W 256 \\\n"
	"      --ulysses-degree 2 --ring-degree 2 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev --prompts prompts.txt -n \"blurry\" --true-cfg-scale 4 \\\n"
	"      --cfg-parallel -s 7 --dtype bf16 -o cat-%d.png\n"
	"  pdit generate --diffusion-model flux1-schnell.safetensors --vae ae.safetensors --clip_l clip_l.safetensors \\\n"
	"      --t5xxl t5xxl_fp16.safetensors --tokenizer tok --tokenizer-2 tok2 -p \"a lighthouse\" --dtype bf16\n"
	"  mpirun -np 4 pdit generate --model FLUX.1-dev -p \"a city at night\" --pipefusion-degree 4 \\\n"
	"      --num-patches 4 --warmup-steps 2 --fbcache-threshold 0.08 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev -p \"a forest\" --distrifusion-degree 2 -o out.png\n";

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

static const char pd_bench_usage[] =
	"usage: [mpirun -np N] pdit bench --model DIR [-H 1024 -W 1024] [--steps 3] [--warmup 1] [--dtype bf16]\n"
	"                                 [mesh degrees] [--json] [--vae-time] [--vae-dtype bf16] [--e2e]\n"
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
	"included), the decode and the total. The embeddings default to\n"
	"DIR/embeds.safetensors (written by pdit tiny).";

static const char pd_bench_examples[] =
	"  pdit tiny flux-width --flux-width\n"
	"  pdit bench --model flux-width -H 1024 -W 1024 --dtype bf16 --vae-time --vae-dtype bf16\n"
	"  pdit bench --model flux-width -H 512 -W 512 --dtype bf16 --vae-dtype bf16 -p \"a lighthouse\" --steps 3 --e2e\n"
	"  mpirun -np 2 pdit bench --model flux-width -H 512 -W 512 --dtype bf16 --tensor-parallel-degree 2 --json\n";

static const char pd_serve_usage[] =
	"usage: [mpirun -np N] pdit serve --model DIR [mesh degrees | --parallel auto] [--listen 127.0.0.1:8080]\n"
	"\n"
	"Loads the model once on every process and answers HTTP requests: rank 0 queues\n"
	"them and hands each to every process, which run it together; the pictures are\n"
	"those pdit generate makes with the same arguments, on any mesh. JSON in and out:\n"
	"  POST /v1/images/generations   OpenAI's images API: prompt, n, size \"WxH\",\n"
	"                                response_format b64_json (model accepted); and\n"
	"                                seed, steps, guidance, negative_prompt,\n"
	"                                true_cfg_scale, fbcache_threshold\n"
	"  POST /sdapi/v1/txt2img        A1111's: prompt, negative_prompt, width, height,\n"
	"                                steps, cfg_scale, seed (-1: any), batch_size\n"
	"  GET /health, GET /v1/models\n"
	"Each PNG carries pdit generate's parameters chunk. Bad requests get a 4xx with a\n"
	"JSON error naming the field; a full queue 429 with Retry-After. SIGTERM or\n"
	"Ctrl-C: the running request finishes, the queued ones get 503, exit 0.";

static const char pd_serve_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit serve --model tiny-model --listen 127.0.0.1:8080 &\n"
	"  curl -s localhost:8080/v1/images/generations -H 'Content-Type: application/json' \\\n"
	"      -d '{\"prompt\": \"a red fox\", \"size\": \"256x256\", \"steps\": 4}'\n"
	"  mpirun -np 2 pdit serve --model FLUX.1-dev --dtype bf16 --ulysses-degree 2 --api-key \"$KEY\"\n";

/* ----------------------------------------------------------------------- */
/* Phases                                                                  */
/* ----------------------------------------------------------------------- */

enum pd_cmd_kind { PD_CMD_GENERATE, PD_CMD_CHECK, PD_CMD_BENCH, PD_CMD_SERVE };

static void pd_gen_options(struct pd_gen_args *a, struct pd_arg *opts, enum pd_cmd_kind kind)
{
	const struct pd_arg common[] = {
		{ "--model", 'm', PD_ARG_STRING, &a->model, "DIR", "diffusers FLUX folder (model_index.json, transformer/, vae/, scheduler/)", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &a->transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--vae", 0, PD_ARG_STRING, &a->vae, "DIR|FILE", "VAE folder, or one .safetensors file (overrides --model's)", NULL },
		{ "--scheduler", 0, PD_ARG_STRING, &a->scheduler, "DIR", "scheduler folder (overrides --model's)", NULL },
		{ "--diffusion-model", 0, PD_ARG_STRING, &a->diffusion_model, "FILE", "transformer in one file: safetensors (Black Forest Labs' layout or diffusers'; BF16, F16, fp8, scaled fp8) or GGUF (ComfyUI-GGUF, stable-diffusion.cpp)", NULL },
		{ "--config", 0, PD_ARG_STRING, &a->config, "FILE", "the transformer's config.json, for a single file that carries none (FLUX.1's sizes are inferred)", NULL },
		{ "--quantize", 0, PD_ARG_STRING, &a->quantize, "TYPE", "encode the transformer blocks' BF16/F16/F32 weights at load into q8_0, q4_0, q4_1, q5_0, q5_1, q4_k or fp8 and keep them so (as pdit quantize writes them; quantized files need none)", NULL },
		{ "--text-encoder", 0, PD_ARG_STRING, &a->text_encoder, "DIR", "CLIP text encoder folder (overrides --model's)", NULL },
		{ "--clip_l", 0, PD_ARG_STRING, &a->clip_l, "FILE", "CLIP text encoder in one .safetensors file", NULL },
		{ "--text-encoder-2", 0, PD_ARG_STRING, &a->text_encoder_2, "DIR", "T5 encoder folder (overrides --model's)", NULL },
		{ "--t5xxl", 0, PD_ARG_STRING, &a->t5xxl, "FILE", "T5 encoder in one .safetensors file", NULL },
		{ "--tokenizer", 0, PD_ARG_STRING, &a->tokenizer, "DIR", "CLIP tokenizer folder (vocab.json, merges.txt)", NULL },
		{ "--tokenizer-2", 0, PD_ARG_STRING, &a->tokenizer_2, "DIR", "T5 tokenizer folder (spiece.model)", NULL },
		{ "--prompt", 'p', PD_ARG_STRING, &a->prompt, "TEXT", "the prompt (encoded with the model's CLIP and T5)", NULL },
		{ "--negative-prompt", 'n', PD_ARG_STRING, &a->negative, "TEXT", "negative prompt, for --true-cfg-scale above 1", NULL },
		{ "--prompts", 0, PD_ARG_STRING, &a->prompts_file, "FILE", "one prompt a line: a batch (written as NAME-0.png, ...)", NULL },
		{ "--max-sequence-length", 0, PD_ARG_INT, &a->max_seq, "N", "T5 tokens (default 512, or 256 for models without guidance embedding)", NULL },
		{ "--embeds", 0, PD_ARG_STRING, &a->embeds, "FILE", "instead of prompts: safetensors with prompt_embeds [B,T,J], pooled_prompt_embeds [B,P], optional negative_* (pdit encode writes them)", NULL },
		{ "--height", 'H', PD_ARG_INT, &a->height, "PX", "image height, a multiple of 16 (default 1024; Wan 480)", NULL },
		{ "--width", 'W', PD_ARG_INT, &a->width, "PX", "image width, a multiple of 16 (default 1024; Wan 832)", NULL },
		{ "--frames", 0, PD_ARG_INT, &a->frames, "N", "video frames, 4k + 1 (Wan; default 81)", &a->frames_seen },
		{ "--flow-shift", 0, PD_ARG_FLOAT, &a->flow_shift, "S", "the sampler's shift instead of the scheduler folder's (Wan: 3 for 480p, 5 for 720p; FLUX: a static shift)", NULL },
		{ "--steps", 0, PD_ARG_INT, &a->steps, "N", "denoising steps (default 28, or 4 for models without guidance embedding)", &a->steps_seen },
		{ "--guidance", 0, PD_ARG_FLOAT, &a->guidance, "G", "FLUX: distilled guidance scale (default 3.5; dev-style models); Wan: classifier-free guidance with the negative prompt, \"\" unless -n (default 5)", &a->guidance_seen },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &a->true_cfg_scale, "C", "true classifier-free guidance with the negative embeddings when > 1", NULL },
		{ "--seed", 's', PD_ARG_U64, &a->seed, "S", "seed of image 0 (default 42), as torch.Generator('cpu').manual_seed", NULL },
		{ "--output", 'o', PD_ARG_STRING, &a->output, "FILE", "PNG to write (default output.png); a video: clip.mp4 (default output.mp4) or frame-%03d.png", &a->output_seen },
		{ "--fps", 0, PD_ARG_INT, &a->fps, "N", "a video's frames a second (default 16)", NULL },
		{ "--out-latents", 0, PD_ARG_STRING, &a->out_latents, "FILE", "also write latents.init and latents.final [B,L,C] (packed)", NULL },
		{ "--init-latents", 0, PD_ARG_STRING, &a->init_latents, "FILE", "start from latents.init [B,L,C] or latents.init_unpacked instead of the seed", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a->dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--vae-dtype", 0, PD_ARG_STRING, &a->vae_dtype, "f32|bf16", "precision of the VAE's convolutions (default f32; bf16: about 2x faster decoding, pixels within a few levels)", NULL },
		{ "--threads", 't', PD_ARG_INT, &a->threads, "N", "threads per process (default, or 0: the cores divided among the processes)", NULL },
		{ "--comm-timeout", 0, PD_ARG_FLOAT, &a->comm_timeout, "S", "seconds a process may wait for the others before the job is reported and stopped (default 1800; 0: forever; lifted where one rank works alone: encoding prompts, check's reference)", NULL },
		{ "--parallel", 0, PD_ARG_STRING, &a->parallel, "auto", "choose the mesh as pdit plan ranks them: auto among the exact methods, auto-stale also PipeFusion and DistriFusion", NULL },
		{ "--data-parallel-degree", 0, PD_ARG_INT, &a->dp, "N", "split the batch of images over N groups", NULL },
		{ "--cfg-parallel", 0, PD_ARG_FLAG, &a->cfg_parallel, NULL, "run the positive and negative passes of true CFG on two processes", NULL },
		{ "--tensor-parallel-degree", 0, PD_ARG_INT, &a->tp, "N", "split heads and MLP width over N processes (Megatron)", NULL },
		{ "--ulysses-degree", 0, PD_ARG_INT, &a->ulysses, "N", "sequence parallel with all-to-all between tokens and heads", NULL },
		{ "--ring-degree", 0, PD_ARG_INT, &a->ring, "N", "sequence parallel with ring attention", NULL },
		{ "--pipefusion-degree", 0, PD_ARG_INT, &a->pp, "N", "PipeFusion: N pipeline stages, each a range of the blocks", NULL },
		{ "--num-patches", 0, PD_ARG_INT, &a->patches, "M", "PipeFusion: row bands per step (default: as many as stages)", NULL },
		{ "--distrifusion-degree", 0, PD_ARG_INT, &a->distrifusion, "N", "DistriFusion over N bands of tokens: other bands' keys and values one step old", NULL },
		{ "--warmup-steps", 0, PD_ARG_INT, &a->warmup_steps, "W", "DistriFusion, PipeFusion: the first W steps exact, on fresh keys and values (default 1)", NULL },
		{ "--fbcache-threshold", 0, PD_ARG_FLOAT, &a->fbcache, "T", "First Block Cache: skip the other blocks when the first block's change is below T (0: off; 0.05 to 0.12 usual)", NULL },
		{ "--vae-parallel", 0, PD_ARG_FLAG, &a->vae_parallel, NULL, "decode each picture in row bands over its data-parallel group (the default with more than one process)", NULL },
		{ "--no-vae-parallel", 0, PD_ARG_FLAG, &a->no_vae_parallel, NULL, "decode each picture on one process instead", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a->verbose, NULL, "more detail", NULL },
		{ "--quiet", 'q', PD_ARG_FLAG, &a->quiet, NULL, "nothing but errors: no progress, no summary", NULL },
	};
	size_t n = 0;

	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) {
		/* check and bench write nothing and start from the seed */
		if (kind != PD_CMD_GENERATE && (common[i].dest == &a->output || common[i].dest == &a->out_latents ||
						common[i].dest == &a->init_latents))
			continue;
		/* serve: what a picture is comes with each request */
		if (kind == PD_CMD_SERVE &&
		    (common[i].dest == &a->prompt || common[i].dest == &a->negative || common[i].dest == &a->prompts_file ||
		     common[i].dest == &a->embeds || common[i].dest == &a->height || common[i].dest == &a->width ||
		     common[i].dest == &a->frames || common[i].dest == &a->steps || common[i].dest == &a->guidance ||
		     common[i].dest == &a->true_cfg_scale || common[i].dest == &a->seed || common[i].dest == &a->fps ||
		     common[i].dest == &a->fbcache))
			continue;
		opts[n] = common[i];
		if (kind == PD_CMD_BENCH && common[i].dest == &a->steps)
			opts[n].help = "timed steps (default 3), after --warmup untimed ones";
		n++;
	}
	if (kind == PD_CMD_BENCH) {
		opts[n++] = (struct pd_arg){ "--warmup", 0, PD_ARG_INT, &a->warmup, "N",
					     "untimed steps first (default 1)", NULL };
		opts[n++] = (struct pd_arg){ "--json", 0, PD_ARG_FLAG, &a->json, NULL,
					     "print one JSON object instead of the table", NULL };
		opts[n++] = (struct pd_arg){ "--vae-time", 0, PD_ARG_FLAG, &a->vae_time, NULL,
					     "also time one VAE decode at this size (in bands over the processes, as generate)",
					     NULL };
		opts[n++] = (struct pd_arg){ "--e2e", 0, PD_ARG_FLAG, &a->e2e, NULL,
					     "one whole generation's phases: load, encode, all steps, decode, total (implies --vae-time)",
					     NULL };
		opts[n++] = (struct pd_arg){ "--batch", 0, PD_ARG_INT, &a->batch, "N",
					     "run N copies of the first prompt (for data parallelism)", NULL };
	}
	if (kind == PD_CMD_SERVE) {
		opts[n++] = (struct pd_arg){ "--listen", 0, PD_ARG_STRING, &a->listen, "HOST:PORT",
					     "address to answer on (default 127.0.0.1:8080; port 0: any free one, printed)",
					     NULL };
		opts[n++] = (struct pd_arg){ "--api-key", 0, PD_ARG_STRING, &a->api_key, "KEY",
					     "require \"Authorization: Bearer KEY\" (or set PDIT_API_KEY); needed to listen "
					     "on an address other than 127.0.0.1", NULL };
		opts[n++] = (struct pd_arg){ "--queue", 0, PD_ARG_INT, &a->queue, "N",
					     "requests waiting besides the running one; more get 429 (default 16)", NULL };
		opts[n++] = (struct pd_arg){ "--max-body", 0, PD_ARG_INT, &a->max_body_kb, "KB",
					     "largest request body; more get 413 (default 256)", NULL };
		opts[n++] = (struct pd_arg){ "--strict", 0, PD_ARG_FLAG, &a->strict, NULL,
					     "refuse fields a request's API does not have (400)", NULL };
		opts[n++] = (struct pd_arg){ "--io-timeout", 0, PD_ARG_INT, &a->io_timeout, "S",
					     "seconds a connection may stay silent before it is closed (default 10)", NULL };
	}
	if (kind == PD_CMD_CHECK) {
		opts[n++] = (struct pd_arg){ "--golden", 0, PD_ARG_STRING, &a->golden, "FILE",
					     "compare with FILE's latents.final instead of a single-process run", NULL };
		opts[n++] = (struct pd_arg){ "--tolerance", 0, PD_ARG_FLOAT, &a->tolerance, "T",
					     "largest relative difference that passes (default 1e-5, 2e-2 with bf16)", NULL };
	}
	memset(&opts[n], 0, sizeof(opts[n]));
}

static void pd_gen_defaults(struct pd_gen_args *a)
{
	memset(a, 0, sizeof(*a));
	a->output = "output.png";
	a->dtype = "f32";
	a->guidance = -1; /* the family's */
	a->fps = 16;
	a->true_cfg_scale = 1.0f;
	a->seed = 42;
	a->warmup_steps = 1;
	a->comm_timeout = 1800;
	a->listen = "127.0.0.1:8080";
	a->queue = 16;
	a->max_body_kb = 256;
	a->io_timeout = 10;
	/* not given (a given 0 is refused) */
	a->dp = a->tp = a->ulysses = a->ring = a->pp = a->distrifusion = -1;
}

/* Parses the arguments: 0 go on, 1 help shown, -1 error (message set). */
static int pd_gen_parse(struct pd_comm *world, struct pd_gen_args *a, int argc, char **argv, enum pd_cmd_kind kind)
{
	static const char *names[] = { "generate", "check", "bench", "serve" };
	const char *usage[] = { pd_gen_usage, pd_check_usage, pd_bench_usage, pd_serve_usage };
	const char *examples[] = { pd_gen_examples, pd_check_examples, pd_bench_examples, pd_serve_examples };
	struct pd_arg opts[56];
	const char *pos[1];
	int n_pos, hr;

	pd_gen_defaults(a);
	pd_gen_options(a, opts, kind);
	hr = pd_args_parse(names[kind], opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1 && world->rank == 0)
		pd_args_help(usage[kind], opts, examples[kind]);
	if (hr == 0 && a->verbose && a->quiet)
		hr = pd_errorf("-v/--verbose and -q/--quiet contradict each other");
	if (hr == 0 && a->verbose && world->rank == 0)
		pd_log_level = 2;
	if (hr == 0 && a->quiet)
		pd_log_level = 0;
	return hr;
}

int pd_cli_parse_only(int argc, char **argv)
{
	static const char *names[] = { "generate", "check", "bench", "serve" };
	struct pd_gen_args a;
	struct pd_arg opts[56];
	const char *pos[1];
	int n_pos;

	if (argc < 2)
		return pd_errorf("no command");
	for (int kind = PD_CMD_GENERATE; kind <= PD_CMD_SERVE; kind++)
		if (strcmp(argv[1], names[kind]) == 0) {
			pd_gen_defaults(&a);
			pd_gen_options(&a, opts, (enum pd_cmd_kind)kind);
			return pd_args_parse(names[kind], opts, argc, argv, 2, pos, 0, &n_pos);
		}
	return pd_errorf("unknown command '%s'", argv[1]);
}

/* ======================================================================= */
/* pdit generate                                                           */
/* ======================================================================= */

/* -v: every rank's peak resident memory, printed by rank 0. */
static void pd_report_memory(struct pd_comm *world)
{
	double mine = pd_peak_rss_mb(), *all = pd_calloc((size_t)world->size, sizeof(double), "memory");

	if (!all)
		return;
	if (pd_comm_allgather(world, &mine, sizeof(double), all) == 0 && world->rank == 0) {
		pd_log(2, "pdit: peak resident memory (MB):");
		for (int i = 0; i < world->size; i++)
			pd_log(2, " %.0f", all[i]);
		pd_log(2, "\n");
	}
	free(all);
}

/* Whether PATTERN holds exactly one number conversion, %d or %0Nd (N a
 * digit), and no other '%': the only patterns -o takes, so a name is never
 * a format string of the user's. */
static int pd_pattern_ok(const char *pattern)
{
	const char *p = strchr(pattern, '%');

	if (!p)
		return 0;
	if (p[1] == '0' && p[2] >= '1' && p[2] <= '9' && p[3] == 'd')
		return !strchr(p + 4, '%');
	return p[1] == 'd' && !strchr(p + 2, '%');
}

static char *pd_output_name(const char *pattern, int64_t b, int64_t batch)
{
	const char *dot;

	if (pd_pattern_ok(pattern))
		return pd_strfmt(pattern, (int)b);
	if (batch == 1)
		return pd_strdup(pattern);
	dot = strrchr(pattern, '.');
	if (!dot || strchr(dot, '/'))
		return pd_strfmt("%s-%lld", pattern, (long long)b);
	return pd_strfmt("%.*s-%lld%s", (int)(dot - pattern), pattern, (long long)b, dot);
}

/* Every output can be written, before any weight is read: -o's pattern
 * and folder, --out-latents. The batch is not known yet with --embeds:
 * both names of one picture and of several are tried. */
static int pd_gen_check_outputs(const struct pd_gen_args *a, int pictures)
{
	int rc = 0;

	if (strchr(a->output, '%') && !pd_pattern_ok(a->output))
		return pd_errorf("-o/--output %s: the one pattern it takes is a single %%d or %%03d (the picture's number, "
				 "or a video's frame)",
				 a->output);
	for (int k = 0; k < 2 && !rc; k++) {
		int64_t batch = k ? 2 : pictures > 0 ? pictures : 1;
		char *name = pd_output_name(a->output, 0, batch);

		rc = !name || pd_out_check(name) ? -1 : 0;
		free(name);
		if (pictures > 0)
			break;
	}
	if (!rc && a->out_latents && pd_out_check(a->out_latents))
		rc = -1;
	if (!rc && a->out_latents) {
		char *name = pd_output_name(a->output, 0, pictures > 0 ? pictures : 1);

		if (name && strcmp(name, a->out_latents) == 0)
			rc = pd_errorf("--out-latents %s is also -o's picture: give them different names", a->out_latents);
		free(name);
	}
	return rc;
}

/* latents.init and latents.final of the whole batch to PATH: packed [B,
 * L, C] as FluxPipeline's, or [B, C, F, h, w] as a video pipeline's. */
static int pd_write_latents(const struct pd_engine *e, const struct pd_result *res, const char *path)
{
	const struct pd_latent_shape *ls = &e->ls;
	int64_t shape[5] = { res->images, res->tokens, res->channels }, per = res->tokens * res->channels;
	struct pd_st_writer *w = pd_st_writer_new();
	float *init = NULL, *fin = NULL;
	int nd = 3, rc = -1;

	if (!w)
		return -1;
	if (e->fam->latents_unpacked) {
		int64_t s5[5] = { res->images, ls->channels, ls->frames, ls->h, ls->w };

		memcpy(shape, s5, sizeof(s5));
		nd = 5;
		init = pd_malloc((size_t)(res->images * per) * sizeof(float), "latents");
		fin = pd_malloc((size_t)(res->images * per) * sizeof(float), "latents");
		if (!init || !fin)
			goto out;
		for (int64_t b = 0; b < res->images; b++) {
			e->fam->unpack(ls, res->init + b * per, init + b * per);
			e->fam->unpack(ls, res->latents + b * per, fin + b * per);
		}
	}
	rc = pd_st_writer_add(w, "latents.init", PD_F32, nd, shape, init ? init : res->init) ||
	     pd_st_writer_add(w, "latents.final", PD_F32, nd, shape, fin ? fin : res->latents) ||
	     pd_st_writer_meta(w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(w, path) ? -1 : 0;
out:
	pd_st_writer_free(w);
	free(init);
	free(fin);
	return rc;
}

/* Prompt B of an embeddings file, from the "prompts" list pdit encode
 * writes into its metadata (malloc'd), or NULL. */
static char *pd_embeds_prompt(const char *path, int64_t b)
{
	struct pd_st *st = NULL;
	const char *meta;
	cJSON *list = NULL, *item;
	char *out = NULL;

	if (pd_st_open(&st, path))
		return NULL;
	meta = pd_st_meta(st, "prompts");
	list = meta ? cJSON_Parse(meta) : NULL;
	/* a batch of one prompt repeated (--batch) names its first */
	item = cJSON_IsArray(list) ? cJSON_GetArrayItem(list, b < cJSON_GetArraySize(list) ? (int)b : 0) : NULL;
	if (cJSON_IsString(item))
		out = pd_strdup(item->valuestring);
	cJSON_Delete(list);
	pd_st_close(st);
	return out;
}

/* Video B of the result as -o asks: an MP4 (or .mkv, .mov) carrying the
 * parameters TEXT, or with a pattern one PNG per frame (its number in the
 * pattern; "-B" before the extension for a batch). */
static int pd_write_video(const struct pd_gen_args *a, const struct pd_result *res, int64_t b, const uint8_t *rgb,
			  const char *prompt, const char *text)
{
	size_t frame = (size_t)res->width * res->height * 3;
	const char *out = a->output_seen ? a->output : "output.mp4";
	int rc = 0;

	if (pd_pattern_ok(out)) {
		const char *dot = strrchr(out, '.');
		char *pattern = res->images == 1 ? pd_strdup(out)
			      : dot && !strchr(dot, '/') ? pd_strfmt("%.*s-%lld%s", (int)(dot - out), out, (long long)b, dot)
							 : pd_strfmt("%s-%lld", out, (long long)b);

		if (!pattern)
			return -1; /* pd_strfmt said why */
		for (int f = 0; f < res->frames && !rc; f++) {
			char *name = pd_strfmt(pattern, f);

			rc = !name ? -1 : pd_png_write(name, rgb + (size_t)f * frame, res->width, res->height, "parameters", text);
			free(name);
		}
		free(pattern);
		return rc;
	}
	{
		char *name = pd_output_name(out, b, res->images);
		const char *meta[] = { "title", prompt, "comment", text, NULL };

		if (name && !pd_video_is_video_name(name))
			rc = pd_errorf("-o/--output %s: a video is written as .mp4, .mkv or .mov, or as frames with a "
				       "pattern such as frame-%%03d.png", name);
		else
			rc = !name ? -1 : pd_video_write(name, rgb, res->frames, res->width, res->height, a->fps, meta);
		free(name);
	}
	return rc;
}

char *pd_cli_prompt_source(const char *prompt, const char *negative)
{
	return pd_strfmt("%s%s%s\n", prompt, negative ? "\nNegative prompt: " : "", negative ? negative : "");
}

char *pd_cli_parameters(const char *source, uint64_t seed, const struct pd_result *res, const char *model,
			const char *dtype)
{
	return pd_strfmt("%spdit %s; seed: %llu; steps: %d; guidance: %g; true_cfg_scale: %g; size: %dx%d; frames: %d; "
			 "model: %s; dtype: %s",
			 source, PDIT_VERSION, (unsigned long long)seed, res->steps, res->guidance, res->true_cfg_scale,
			 res->width, res->height, res->frames, model, dtype);
}

/* The pictures this rank holds, as PNGs carrying their parameters. */
static int pd_write_pictures(const struct pd_gen_args *a, const struct pd_request *rq, const struct pd_result *res)
{
	size_t npx = (size_t)res->width * res->height * (size_t)(res->frames > 1 ? res->frames : 1);
	const char *model = a->model ? a->model : a->diffusion_model ? a->diffusion_model : a->transformer;
	int rc = 0;

	for (int64_t i = 0; i < res->n_pictures && !rc; i++) {
		int64_t b = res->first_picture + i;
		char *name = pd_output_name(a->output, b, res->images);
		char *carried = rq->n_prompts ? NULL : pd_embeds_prompt(a->embeds, b);
		char *source = rq->n_prompts ? pd_cli_prompt_source(rq->prompts[rq->batch ? 0 : b], a->negative)
			       : carried ? pd_strfmt("%s\n", carried)
					 : pd_strfmt("embeds: %s (prompt %lld)\n", a->embeds, (long long)b);
		char *text = source ? pd_cli_parameters(source, a->seed + b, res, model, a->dtype) : NULL;

		/* a video, or one frame asked for as a video */
		if (res->frames > 1 || pd_video_is_video_name(a->output))
			rc = !text ? -1 : pd_write_video(a, res, b, res->rgb + (size_t)i * npx * 3,
							 rq->n_prompts ? rq->prompts[rq->batch ? 0 : b] : "", text);
		else
			rc = !name || !text ? -1 : pd_png_write(name, res->rgb + (size_t)i * npx * 3, res->width, res->height,
								"parameters", text);
		free(name);
		free(text);
		free(source);
		free(carried);
	}
	return rc;
}

/* The engine's options from the arguments: DECODE loads a VAE. */
static int pd_gen_engine_options(const struct pd_gen_args *a, struct pd_engine_options *o, int decode)
{
	if ((a->transformer && a->diffusion_model) || (a->text_encoder && a->clip_l) ||
	    (a->text_encoder_2 && a->t5xxl))
		return pd_errorf("give each component once: --transformer or --diffusion-model, --text-encoder or "
				 "--clip_l, --text-encoder-2 or --t5xxl");
	const struct {
		int v;
		const char *flag;
	} degrees[] = { { a->dp, "--data-parallel-degree" }, { a->tp, "--tensor-parallel-degree" },
			{ a->ulysses, "--ulysses-degree" }, { a->ring, "--ring-degree" },
			{ a->pp, "--pipefusion-degree" }, { a->distrifusion, "--distrifusion-degree" } };

	if (a->vae_parallel && a->no_vae_parallel)
		return pd_errorf("--vae-parallel and --no-vae-parallel contradict each other");
	for (size_t i = 0; i < sizeof(degrees) / sizeof(degrees[0]); i++)
		if (degrees[i].v != -1 && degrees[i].v < 1)
			return pd_errorf("%s must be at least 1 (got %d); leave it out to let pdit choose", degrees[i].flag,
					 degrees[i].v);
	if (a->threads < 0)
		return pd_errorf("-t/--threads must be at least 1, or 0 for the cores divided among the processes (got %d)",
				 a->threads);
	pd_engine_options_init(o);
	o->model = a->model;
	o->transformer = a->diffusion_model ? a->diffusion_model : a->transformer;
	o->transformer_config = a->config;
	o->vae = a->vae;
	o->scheduler = a->scheduler;
	o->text_encoder = a->clip_l ? a->clip_l : a->text_encoder;
	o->text_encoder_2 = a->t5xxl ? a->t5xxl : a->text_encoder_2;
	o->tokenizer = a->tokenizer;
	o->tokenizer_2 = a->tokenizer_2;
	o->dtype = a->dtype;
	o->vae_dtype = a->vae_dtype;
	o->quantize = a->quantize;
	o->threads = a->threads;
	o->log_level = pd_log_level; /* as the command set it for this rank */
	o->comm_timeout = a->comm_timeout;
	o->dp = a->dp > 0 ? a->dp : 0;
	o->cfg_parallel = a->cfg_parallel;
	o->pp = a->pp > 0 ? a->pp : 0;
	o->ring = a->ring > 0 ? a->ring : 0;
	o->ulysses = a->ulysses > 0 ? a->ulysses : 0;
	o->tp = a->tp > 0 ? a->tp : 0;
	o->distrifusion = a->distrifusion > 0 ? a->distrifusion : 0;
	o->parallel = a->parallel;
	o->warmup_steps = a->warmup_steps;
	o->patches = a->patches;
	o->vae_parallel = a->no_vae_parallel ? -1 : a->vae_parallel ? 1 : 0;
	o->decode = decode;
	o->one_request = 1;
	return 0;
}

/* The request from the arguments; *PROMPTS holds --prompts FILE's lines. */
static int pd_gen_request(const struct pd_gen_args *a, struct pd_request *rq, char ***prompts, int *n)
{
	int sources = (a->embeds != NULL) + (a->prompt != NULL) + (a->prompts_file != NULL);

	pd_request_init(rq);
	if (sources != 1)
		return pd_errorf(sources ? "give one of -p/--prompt, --prompts FILE and --embeds FILE" :
					   "no prompt: give -p \"a prompt\" (or --prompts FILE, or --embeds FILE)");
	if (a->steps_seen && (a->steps < 1 || a->steps > PD_MAX_STEPS))
		return pd_errorf("--steps must be between 1 and %d (got %d)", PD_MAX_STEPS, a->steps);
	if (a->prompts_file) {
		if (pd_prompt_read_file(a->prompts_file, prompts, n))
			return -1;
		if (*n > PD_MAX_BATCH)
			return pd_errorf("%s has %d prompts; at most %d make one run", a->prompts_file, *n, PD_MAX_BATCH);
		rq->prompts = (const char *const *)*prompts;
		rq->n_prompts = *n;
	} else if (a->prompt) {
		rq->prompts = &a->prompt;
		rq->n_prompts = 1;
	}
	rq->negative = a->negative;
	rq->max_seq = a->max_seq;
	rq->embeds = a->embeds;
	rq->init_latents = a->init_latents;
	rq->height = a->height;
	rq->width = a->width;
	if (a->frames_seen && a->frames > 1 && a->output_seen && !strchr(a->output, '%') &&
	    !pd_video_is_video_name(a->output))
		return pd_errorf("-o/--output %s: a video is written as .mp4, .mkv or .mov, or as frames with a pattern "
				 "such as frame-%%03d.png", a->output);
	if (a->guidance_seen && !(a->guidance >= 0))
		return pd_errorf("--guidance must not be negative (got %g)", a->guidance);
	if (a->fps < 1 || a->fps > 240)
		return pd_errorf("--fps must be between 1 and 240 (got %d)", a->fps);
	if (a->frames_seen && a->frames < 1)
		return pd_errorf("--frames must be positive (got %d)", a->frames);
	rq->frames = a->frames;
	rq->flow_shift = a->flow_shift;
	rq->steps = a->steps_seen ? a->steps : 0;
	rq->guidance = a->guidance;
	rq->true_cfg_scale = a->true_cfg_scale;
	rq->seed = a->seed;
	rq->batch = a->batch;
	rq->fbcache_threshold = a->fbcache;
	rq->want_latents = a->out_latents != NULL;
	return 0;
}

/* An engine call failed: the lowest failing rank says why; a collective
 * failure ends the whole job. */
static void pd_gen_failed(struct pd_comm *world, struct pd_engine *e)
{
	if (e && pd_engine_dead(e))
		pd_cli_abort(world);
	pd_cli_report(world);
}

static void pd_free_prompts(char **prompts, int n)
{
	for (int i = 0; i < n; i++)
		free(prompts[i]);
	free(prompts);
}

int pd_cli_serve_parse(struct pd_comm *world, int argc, char **argv, struct pd_engine_options *o,
		       struct pd_cli_serve *sv)
{
	struct pd_gen_args a;
	int hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_SERVE);

	if (hr)
		return hr;
	if (pd_gen_engine_options(&a, o, 1))
		return -1;
	o->one_request = 0;
	o->keep_encoders = 1;
	memset(sv, 0, sizeof(*sv));
	sv->listen = a.listen;
	sv->api_key = a.api_key ? a.api_key : getenv("PDIT_API_KEY");
	if (sv->api_key && !sv->api_key[0])
		sv->api_key = NULL;
	sv->queue = a.queue;
	sv->strict = a.strict;
	sv->io_timeout = a.io_timeout;
	sv->quiet = a.quiet;
	sv->model = a.model ? a.model : a.diffusion_model ? a.diffusion_model : a.transformer;
	sv->dtype = a.dtype;
	if (a.queue < 0 || a.queue > 4096)
		return pd_errorf("--queue must be 0 to 4096 (got %d)", a.queue);
	if (a.max_body_kb < 1 || a.max_body_kb > 65536)
		return pd_errorf("--max-body must be 1 to 65536 KB (got %d)", a.max_body_kb);
	if (a.io_timeout < 1 || a.io_timeout > 3600)
		return pd_errorf("--io-timeout must be 1 to 3600 seconds (got %d)", a.io_timeout);
	sv->body_max = (size_t)a.max_body_kb << 10;
	return 0;
}

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_result res = { 0 };
	struct pd_engine *e = NULL;
	struct pd_cli_progress prog;
	char **prompts = NULL;
	int n_prompts = 0, hr, rc = 1;
	double t_write, peak;

	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_GENERATE);
	if (hr == 1)
		return 0;
	pd_cli_progress_init(&prog, 0);
	hr = hr || pd_gen_engine_options(&a, &o, 1) || pd_gen_request(&a, &rq, &prompts, &n_prompts) ||
	     pd_gen_check_outputs(&a, rq.batch > 0 ? rq.batch : a.embeds ? 0 : rq.n_prompts);
	if (pd_cli_any_failed(world, hr))
		goto out;
	/* rank 0 shows the run; the others only say what went wrong */
	pd_cli_progress_init(&prog, world->rank == 0 && !a.quiet);
	o.on_progress = pd_cli_progress_cb;
	o.progress_ctx = &prog;
	o.log = pd_cli_progress_log;
	o.log_ctx = &prog;
	if (pd_engine_open(&e, world, &o, &rq)) {
		pd_gen_failed(world, NULL);
		goto out;
	}
	if (e->p.frames > 1 && !pd_pattern_ok(a.output_seen ? a.output : "output.mp4") &&
	    !pd_video_is_video_name(a.output_seen ? a.output : "output.mp4")) {
		/* known once the model's family is: before any step */
		pd_errorf("-o/--output %s: a video is written as .mp4, .mkv or .mov, or as frames with a pattern such as "
			  "frame-%%03d.png", a.output);
		pd_gen_failed(world, e);
		goto out;
	}
	if (pd_engine_run(e, &rq, &res)) {
		pd_gen_failed(world, e);
		goto out;
	}
	hr = 0;
	t_write = pd_now();
	if (a.out_latents && world->rank == 0) {
		hr = pd_write_latents(e, &res, a.out_latents);
		if (!hr)
			pd_log(1, "pdit: wrote %s\n", a.out_latents);
	}
	if (!hr && res.rgb)
		hr = pd_write_pictures(&a, &rq, &res);
	rc = pd_cli_any_failed(world, hr);
	prog.write_s = pd_now() - t_write;
	/* every rank's pictures are written: rank 0 names them all */
	for (int64_t b = 0; !rc && world->rank == 0 && b < res.images && res.bands > 0; b++) {
		char *name = pd_output_name(a.output, b, res.images);

		if (name)
			pd_log(1, "pdit: wrote %s\n", name);
		free(name);
	}
	/* collectives: on what every rank shares, not on the log level */
	if (!rc && a.verbose)
		pd_report_memory(world);
	peak = pd_peak_rss_mb();
	if (!rc && world->size > 1)
		world->ops->allreduce(world, &peak, 1, PD_COMM_F64, PD_COMM_MAX);
	if (!rc)
		pd_cli_progress_summary(&prog, peak);
out:
	pd_result_free(&res);
	pd_engine_close(e);
	pd_free_prompts(prompts, n_prompts);
	pd_cli_progress_end(&prog);
	return rc;
}

/* ======================================================================= */
/* pdit check                                                              */
/* ======================================================================= */

/* The block outputs (text and image streams) of the first step, as the dump
 * hands them over: for a process's own tokens in the parallel run, for all
 * tokens in the reference. */
struct pd_blocks {
	int n;                          /* blocks recorded */
	char **names;                   /* "double.0", "single.3", ... */
	float **txt, **img;             /* [rows, D] each */
	int64_t *txt_rows, *img_rows;
	int failed;
};

static void pd_blocks_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim,
			   const int64_t *shape)
{
	struct pd_blocks *b = ctx;
	const char *tail = strstr(name, ".out.");
	int img, k = -1;
	int64_t rows = ndim == 3 ? shape[1] : 0, D = ndim == 3 ? shape[2] : 0;
	size_t base;

	(void)index;
	if (!tail || b->failed)
		return;
	img = strcmp(tail, ".out.hidden_states") == 0;
	if (!img && strcmp(tail, ".out.encoder_hidden_states") != 0)
		return;
	base = (size_t)(tail - name);
	for (int i = 0; i < b->n; i++)
		if (strlen(b->names[i]) == base && strncmp(b->names[i], name, base) == 0)
			k = i;
	if (k < 0) {
		char **nn = realloc(b->names, sizeof(char *) * (size_t)(b->n + 1));
		float **nt = realloc(b->txt, sizeof(float *) * (size_t)(b->n + 1));
		float **ni = realloc(b->img, sizeof(float *) * (size_t)(b->n + 1));
		int64_t *rt = realloc(b->txt_rows, sizeof(int64_t) * (size_t)(b->n + 1));
		int64_t *ri = realloc(b->img_rows, sizeof(int64_t) * (size_t)(b->n + 1));

		if (nn)
			b->names = nn;
		if (nt)
			b->txt = nt;
		if (ni)
			b->img = ni;
		if (rt)
			b->txt_rows = rt;
		if (ri)
			b->img_rows = ri;
		if (!nn || !nt || !ni || !rt || !ri) {
			b->failed = 1;
			return;
		}
		k = b->n++;
		b->names[k] = strndup(name, base);
		b->txt[k] = b->img[k] = NULL;
		b->txt_rows[k] = b->img_rows[k] = 0;
	}
	if (img) {
		b->img[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->img_rows[k] = rows;
		if (b->img[k])
			memcpy(b->img[k], data, (size_t)(rows * D) * sizeof(float));
	} else {
		b->txt[k] = malloc((size_t)(rows * D) * sizeof(float) + 1);
		b->txt_rows[k] = rows;
		if (b->txt[k])
			memcpy(b->txt[k], data, (size_t)(rows * D) * sizeof(float));
	}
	if (!b->names[k] || (img && !b->img[k]) || (!img && !b->txt[k]))
		b->failed = 1;
}

static void pd_blocks_free(struct pd_blocks *b)
{
	for (int i = 0; i < b->n; i++) {
		free(b->names[i]);
		free(b->txt[i]);
		free(b->img[i]);
	}
	free(b->names);
	free(b->txt);
	free(b->img);
	free(b->txt_rows);
	free(b->img_rows);
	memset(b, 0, sizeof(*b));
}

/* True for the ranks whose first-step block outputs are compared: image 0,
 * the positive branch, tensor shard 0 (the hidden states are replicated),
 * every pipeline stage (each records its own blocks). */
static int pd_check_contributes(const int degree[PD_AXIS_COUNT], const int coord[PD_AXIS_COUNT])
{
	int cfg_branch = degree[PD_AXIS_CFG] > 1 ? 1 : 0;

	return coord[PD_AXIS_DP] == 0 && coord[PD_AXIS_CFG] == cfg_branch && coord[PD_AXIS_TP] == 0;
}

/* Gathers the contributing ranks' token slices of their stage's blocks onto
 * rank 0 into FULL (which has the reference's layout: all rows per block). */
static int pd_check_gather(struct pd_engine *r, const struct pd_blocks *mine, const struct pd_blocks *ref,
			   struct pd_blocks *full)
{
	struct pd_comm *w = r->world;
	int P = r->mesh.sp->size, D = r->info.dim, nb = ref ? ref->n : 0, first, count;
	/* a text context (Wan's) is no block output: image rows alone */
	int64_t T = r->info.txt_context ? 0 : r->e.txt_len, L = r->ls.tokens, total = 0;
	size_t *bytes = pd_calloc((size_t)w->size, sizeof(size_t), "counts"), send_bytes = 0;
	float *send = NULL, *recv = NULL;
	int32_t recorded = mine->n > 0;
	int rc = -1;

	if (!bytes)
		return -1;
	/* a pipeline run records nothing when its first step is patched */
	if (w->size > 1 && w->ops->allreduce(w, &recorded, 1, PD_COMM_I32, PD_COMM_MAX))
		goto out;
	for (int q = 0; q < w->size && recorded; q++) {
		int coord[PD_AXIS_COUNT], j;

		pd_mesh_coords(r->degree, q, coord);
		if (!pd_check_contributes(r->degree, coord))
			continue;
		pd_mesh_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
		j = pd_mesh_seq_index(r->degree, coord);
		bytes[q] = (size_t)(count * (pd_chunk_len(T, P, j) + pd_chunk_len(L, P, j)) * D) * sizeof(float);
		total += (int64_t)bytes[q];
	}
	if (bytes[w->rank]) {
		int64_t off = 0;

		send_bytes = bytes[w->rank];
		send = pd_malloc(send_bytes + 1, "check");
		if (!send)
			goto out;
		memset(send, 0, send_bytes);
		for (int k = 0; k < mine->n && (size_t)off * sizeof(float) < send_bytes; k++) {
			/* a text context (Wan's) records no text rows: no buffer */
			if (mine->txt_rows[k])
				memcpy(send + off, mine->txt[k], (size_t)(mine->txt_rows[k] * D) * sizeof(float));
			off += mine->txt_rows[k] * D;
			if (mine->img_rows[k])
				memcpy(send + off, mine->img[k], (size_t)(mine->img_rows[k] * D) * sizeof(float));
			off += mine->img_rows[k] * D;
		}
	}
	if (w->rank == 0) {
		recv = pd_malloc((size_t)total + 1, "check");
		if (!recv)
			goto out;
	}
	if (w->ops->gatherv(w, send, send_bytes, recv, bytes, 0))
		goto out;
	if (w->rank == 0) {
		/* lay the slices out by token: SP rank j's text rows start at its
		 * chunk start, likewise its image rows; stage s's blocks at its first */
		const float *p = recv;

		full->n = recorded ? nb : 0;
		full->names = pd_calloc((size_t)nb + 1, sizeof(char *), "check");
		full->txt = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->img = pd_calloc((size_t)nb + 1, sizeof(float *), "check");
		full->txt_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		full->img_rows = pd_calloc((size_t)nb + 1, sizeof(int64_t), "check");
		if (!full->names || !full->txt || !full->img || !full->txt_rows || !full->img_rows)
			goto out;
		for (int k = 0; k < nb; k++) {
			full->names[k] = pd_strdup(ref->names[k]);
			full->txt[k] = pd_malloc((size_t)(T * D) * sizeof(float) + 1, "check");
			full->img[k] = pd_malloc((size_t)(L * D) * sizeof(float) + 1, "check");
			full->txt_rows[k] = recorded ? T : 0;
			full->img_rows[k] = recorded ? L : 0;
			if (!full->names[k] || !full->txt[k] || !full->img[k])
				goto out;
		}
		for (int q = 0; q < w->size; q++) {
			int coord[PD_AXIS_COUNT], j;

			if (!bytes[q])
				continue;
			pd_mesh_coords(r->degree, q, coord);
			pd_mesh_stage_blocks(&r->info, r->degree[PD_AXIS_PP], coord[PD_AXIS_PP], &first, &count);
			j = pd_mesh_seq_index(r->degree, coord);
			for (int k = first; k < first + count; k++) {
				int64_t tn = pd_chunk_len(T, P, j), in = pd_chunk_len(L, P, j);

				if (k < nb) {
					memcpy(full->txt[k] + pd_chunk_start(T, P, j) * D, p,
					       (size_t)(tn * D) * sizeof(float));
					memcpy(full->img[k] + pd_chunk_start(L, P, j) * D, p + tn * D,
					       (size_t)(in * D) * sizeof(float));
				}
				p += (tn + in) * D;
			}
		}
	}
	rc = 0;
out:
	free(bytes);
	free(send);
	free(recv);
	return rc;
}

static double pd_rel_diff(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)b[i]);

		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		num = d > num ? d : num;
		den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
	}
	return den > 0 ? num / den : num;
}

/* The single-process reference on rank 0: the whole model, every image. */
static int pd_check_reference(struct pd_engine *r, float *latents, struct pd_blocks *blocks)
{
	struct pd_backend *be = NULL;
	struct pd_dit *m = NULL;
	struct pd_runner run;
	struct pd_dump dump = { pd_blocks_dump, blocks, 0 };
	int rc = -1;

	if (pd_backend_cpu_new(&be, r->dt, r->be->threads) || r->fam->load(&m, r->mp.transformer, r->tconfig, be, NULL))
		goto out;
	run = pd_runner_local(m);
	pd_log(1, "pdit: running the single-process reference\n");
	rc = pd_denoise(&run, r->fam, &r->info, &r->sched, &r->e, &r->p, r->init, latents, NULL, &dump);
	if (!rc && blocks->failed)
		rc = pd_errorf("out of memory recording the reference");
out:
	pd_dit_free(m);
	pd_backend_free(be);
	return rc;
}

/* --golden: the final latents (and the noise) against a file. */
static int pd_check_golden(struct pd_engine *r, const char *path, const float *all, double tol, int *pass)
{
	int64_t n = r->e.batch * r->ls.tokens * r->ls.packed_channels;
	const char *names[2] = { "latents.init", "latents.final" };
	float *ref = pd_malloc((size_t)n * sizeof(float), "reference"), *init = NULL;
	struct pd_st *st = NULL;
	int rc = -1;

	if (!ref || pd_st_open(&st, path))
		goto out;
	*pass = 1;
	for (int k = 0; k < 2; k++) {
		const struct pd_st_tensor *t = pd_st_get(st, names[k]);
		const float *got = all;
		double d;

		if (!t) {
			if (k == 1) {
				pd_errorf("%s: no latents.final to compare with", path);
				goto out;
			}
			continue;
		}
		if (t->numel != n) {
			pd_errorf("%s: %s has %lld values, the run makes %lld", path, names[k], (long long)t->numel,
				  (long long)n);
			goto out;
		}
		if (pd_st_read_f32(t, 0, (size_t)n, ref))
			goto out;
		if (t->ndim >= 4) {
			/* a video pipeline's latents, unpacked: packed as pdit holds them */
			int64_t per = r->ls.tokens * r->ls.packed_channels;
			float *u = pd_malloc((size_t)n * sizeof(float), "reference");

			if (!u)
				goto out;
			memcpy(u, ref, (size_t)n * sizeof(float));
			for (int64_t b = 0; b < r->e.batch; b++)
				r->fam->pack(&r->ls, u + b * per, ref + b * per);
			free(u);
		}
		if (k == 0) {
			init = pd_engine_initial(r);
			if (!init)
				goto out;
			got = init;
		}
		d = pd_rel_diff(got, ref, (size_t)n);
		printf("  %-24s %9.2e\n", k ? "final latents" : "initial noise", d);
		if (!(d <= tol))
			*pass = 0;
	}
	rc = 0;
out:
	free(ref);
	free(init);
	pd_st_close(st);
	return rc;
}

int pd_cmd_check(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_engine *e = NULL;
	struct pd_engine_scope scope = { 0 };
	char **prompts = NULL;
	int n_prompts = 0;
	struct pd_blocks mine = { 0 }, ref = { 0 }, full = { 0 };
	struct pd_dump dump = { pd_blocks_dump, &mine, 0 };
	float *all = NULL, *ref_lat = NULL;
	char mesh[128];
	double tol;
	int hr, rc = 1, pass = 1;

	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_CHECK);
	if (hr == 1)
		return 0;
	hr = hr || pd_gen_engine_options(&a, &o, 0) || pd_gen_request(&a, &rq, &prompts, &n_prompts);
	rq.want_pictures = 0;
	if (pd_cli_any_failed(world, hr))
		goto out;
	if (pd_engine_open(&e, world, &o, &rq)) {
		pd_gen_failed(world, NULL);
		goto out;
	}
	/* the reference runs below compute as the engine does */
	pd_engine_enter(e, &scope);
	tol = a.tolerance > 0 ? a.tolerance : e->dt == PD_BF16 ? 2e-2 : 1e-5;
	all = pd_malloc((size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels) * sizeof(float), "latents");
	if (pd_cli_any_failed(world, !all))
		goto out;
	pd_engine_notes(e, &rq);
	if (pd_engine_denoise(e, all, a.golden ? NULL : &dump))
		pd_cli_abort(world);
	pd_dit_free(e->m);
	e->m = NULL;
	pd_mesh_format(e->degree, e->opt.distrifusion, mesh, sizeof(mesh));
	if (a.golden) {
		hr = 0;
		if (world->rank == 0) {
			printf("pdit check: mesh %s against %s, tolerance %g\n", mesh, a.golden, tol);
			hr = pd_check_golden(e, a.golden, all, tol, &pass);
		}
	} else {
		/* the reference first (rank 0), then the slices come to it */
		ref_lat = pd_malloc((size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels) * sizeof(float), "latents");
		hr = !ref_lat || mine.failed || (world->rank == 0 && pd_check_reference(e, ref_lat, &ref));
		/* the others wait for rank 0's reference */
		if (pd_engine_agree_waiting(e, hr)) {
			pd_gen_failed(world, e);
			goto out;
		}
		hr = pd_check_gather(e, &mine, world->rank == 0 ? &ref : NULL, &full);
		if (!hr && world->rank == 0) {
			printf("pdit check: mesh %s against one process, %s, tolerance %g\n", mesh, a.dtype, tol);
			printf("  %-24s %9s\n", "first step", "max rel. difference");
			if (full.n == 0)
				printf("  (the first step ran patched: blocks not compared)\n");
			for (int k = 0; k < full.n; k++) {
				double dt = pd_rel_diff(full.txt[k], ref.txt[k], (size_t)(ref.txt_rows[k] * e->info.dim));
				double di = pd_rel_diff(full.img[k], ref.img[k], (size_t)(ref.img_rows[k] * e->info.dim));
				double d = dt > di ? dt : di;

				if (ref.txt_rows[k] == 0)
					d = di;
				printf("  %-24s %9.2e\n", ref.names[k], d);
				if (!(d <= tol))
					pass = 0;
			}
			{
				double d = pd_rel_diff(all, ref_lat,
						       (size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels));

				printf("  %-24s %9.2e\n", "final latents", d);
				if (!(d <= tol))
					pass = 0;
			}
			if (ref.n == 0)
				pass = 0;	/* nothing was compared: not a pass */
			if ((e->opt.distrifusion || (e->degree[PD_AXIS_PP] > 1 && e->opt.patches != 1)) && e->opt.warmup_steps < e->p.steps)
				printf("  note: %s is exact only in its %d warm-up step%s; later steps attend to keys and\n"
				       "  values one step old, so they differ from one process by design. With\n"
				       "  --warmup-steps %d every step is exact and the check must pass.\n",
				       e->opt.distrifusion ? "DistriFusion" : "PipeFusion", e->opt.warmup_steps,
				       e->opt.warmup_steps == 1 ? "" : "s", e->p.steps);
		}
	}
	if (!hr && world->rank == 0)
		printf("%s\n", pass ? "PASS" : "FAIL");
	if (pd_cli_any_failed(world, hr))
		goto out;
	{
		int32_t p32 = pass;

		if (world->size > 1)
			world->ops->bcast(world, &p32, sizeof(p32), 0);
		rc = p32 ? 0 : 1;
	}
out:
	pd_blocks_free(&mine);
	pd_blocks_free(&ref);
	pd_blocks_free(&full);
	free(all);
	free(ref_lat);
	if (e)
		pd_engine_leave(&scope);
	pd_engine_close(e);
	pd_free_prompts(prompts, n_prompts);
	return rc;
}

/* ======================================================================= */
/* pdit bench                                                              */
/* ======================================================================= */

/* Bytes this rank has sent through every communicator of the mesh, and
 * the seconds it has waited in them. */
static void pd_mesh_traffic(const struct pd_mesh *m, uint64_t *bytes, double *wait)
{
	const struct pd_comm *all[PD_AXIS_COUNT + 3] = { m->world, m->sp, m->model };

	for (int x = 0; x < PD_AXIS_COUNT; x++)
		all[3 + x] = m->axis[x];
	*bytes = 0;
	*wait = 0;
	for (int i = 0; i < PD_AXIS_COUNT + 3; i++) {
		*bytes += all[i]->bytes_sent;
		*wait += all[i]->wait_s;
	}
}

/* What each rank reports at the end of bench (gathered to rank 0). */
struct pd_bench_rank {
	double rss_mb;                  /* peak resident memory, MB */
	double weights_mb;              /* the estimate: weights the backend holds */
	double work_mb;                 /* and its activations' and scratch's high-water mark */
	double wait_s;                  /* seconds waiting in transfers per timed step (mean) */
	double load_s;                  /* seconds loading its weights */
};

struct pd_bench_clock {
	const struct pd_mesh *mesh;     /* whose traffic is counted */
	double *t;                      /* time at the end of each step */
	uint64_t *bytes;                /* bytes sent by then */
	double *wait;                   /* seconds waited in transfers by then */
	double t0;                      /* start of the first step */
	uint64_t b0;
	double w0;
	struct pd_backend *be;          /* whose allocations are counted */
	uint64_t *allocs;               /* its allocation count by the end of each step */
};

static int pd_bench_on_step(void *ctx, int step)
{
	struct pd_bench_clock *c = ctx;

	c->t[step] = pd_now();
	pd_mesh_traffic(c->mesh, &c->bytes[step], &c->wait[step]);
	c->allocs[step] = c->be->allocations;
	return 0;
}

/* Times one decode of the latents ALL (the first picture): on this process
 * alone, or in bands over BANDS (every rank calls; too few latent rows for
 * all of them: rank 0 alone decodes); *FLOP: the products' operations, over
 * every band; *N_BANDS: the bands. The transformer's memory goes first, as
 * in generate. */
static int pd_bench_vae(struct pd_engine *e, struct pd_comm *bands, const float *all, double *seconds, double *flop,
			int *n_bands)
{
	static const struct pd_vae_hooks none = { 0, 1, NULL, NULL, NULL, NULL, NULL };
	struct pd_vae_par par = { 0 };
	struct pd_vae_hooks hooks = none;
	int f = e->fam->vae_scale, rc = -1;
	uint8_t *rgb = NULL;
	double t0, f0, active;

	pd_dit_free(e->m);
	e->m = NULL;
	if (e->fam->vae_load ? !e->fv && e->fam->vae_load(&e->fv, e->mp.vae, e->be)
			     : !e->v && pd_vae_load(&e->v, e->mp.vae, e->be))
		goto out;
	if (!e->fam->vae_load)
		f = pd_vae_scale(pd_vae_get_config(e->v));
	if (bands)
		pd_vae_par_hooks(&par, bands, e->ls.h, &hooks);
	if (e->fam->vae_load)
		e->fam->vae_set_hooks(e->fv, &hooks);
	else
		pd_vae_set_hooks(e->v, &hooks);
	/* a video's frames, one after the other */
	rgb = pd_malloc((size_t)e->ls.h * f * e->ls.w * f * 3 * (size_t)e->p.frames, "pictures");
	if (!rgb || (bands && bands->ops->barrier(bands)))
		goto out;
	t0 = pd_now();
	f0 = e->be->flop;
	/* a rank without a band waits in the collectives below */
	active = hooks.bands > 0;
	if (active && (e->fam->vae_load ? e->fam->vae_decode(e->fv, &e->ls, all, rgb)
					: pd_decode_image(e->v, e->fam, &e->ls, all, rgb, NULL, NULL)))
		goto out;
	*seconds = pd_now() - t0;
	*flop = e->be->flop - f0;
	if (bands && (bands->ops->allreduce(bands, seconds, 1, PD_COMM_F64, PD_COMM_MAX) ||
		      bands->ops->allreduce(bands, flop, 1, PD_COMM_F64, PD_COMM_SUM) ||
		      bands->ops->allreduce(bands, &active, 1, PD_COMM_F64, PD_COMM_SUM)))
		goto out;
	*n_bands = (int)active;
	rc = 0;
out:
	/* the hooks' context is gone with this call */
	if (e->fv)
		e->fam->vae_set_hooks(e->fv, &none);
	if (e->v)
		pd_vae_set_hooks(e->v, &none);
	free(rgb);
	pd_vae_par_free(&par);
	return rc;
}

int pd_cmd_bench(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_engine *e = NULL;
	struct pd_engine_scope scope = { 0 };
	char **prompts = NULL;
	int n_prompts = 0;
	struct pd_bench_clock clk = { 0 };
	struct pd_dit_flops fl;
	float *all = NULL;
	struct pd_bench_rank *rk = NULL;
	double *dt = NULL, sps = 0, mm = 0, vae_s = -1, vae_flop = 0, step_flop, achieved;
	int vae_ranks = 1;
	double vae_mm = 0;
	double t_start = 0, open_s = 0, t_steps = 0, total_s = 0;
	uint64_t bytes_step = 0, bytes_max = 0, allocs_late = 0;
	char mesh[128], *default_embeds = NULL;
	int hr, rc = 1, timed, total, branches;

	hr = pd_gen_parse(world, &a, argc, argv, PD_CMD_BENCH);
	if (hr == 1)
		return 0;
	if (!hr && !a.embeds && !a.prompt && !a.prompts_file && a.model) {
		default_embeds = pd_strfmt("%s/embeds.safetensors", a.model);
		if (default_embeds && pd_file_exists(default_embeds))
			a.embeds = default_embeds;
	}
	if (!hr && !a.steps_seen) {
		a.steps = 3;
		a.steps_seen = 1;
	}
	if (!hr && a.warmup <= 0)
		a.warmup = 1;
	if (a.e2e)
		a.vae_time = 1;
	t_start = pd_now();
	hr = hr || pd_gen_engine_options(&a, &o, 0) || pd_gen_request(&a, &rq, &prompts, &n_prompts);
	timed = a.steps;
	total = a.warmup + timed;
	rq.steps = total;
	rq.want_pictures = 0;
	if (pd_cli_any_failed(world, hr))
		goto out;
	if (pd_engine_open(&e, world, &o, &rq)) {
		pd_gen_failed(world, NULL);
		goto out;
	}
	open_s = pd_now() - t_start;
	pd_engine_enter(e, &scope);
	all = pd_malloc((size_t)(e->e.batch * e->ls.tokens * e->ls.packed_channels) * sizeof(float), "latents");
	clk.t = pd_calloc((size_t)total, sizeof(double), "bench");
	clk.bytes = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.allocs = pd_calloc((size_t)total, sizeof(uint64_t), "bench");
	clk.wait = pd_calloc((size_t)total, sizeof(double), "bench");
	rk = pd_calloc((size_t)world->size, sizeof(*rk), "bench");
	dt = pd_calloc((size_t)total, sizeof(double), "bench");
	if (pd_cli_any_failed(world, !all || !clk.t || !clk.bytes || !clk.wait || !clk.allocs || !rk || !dt))
		goto out;
	/* the reference rate first, on rank 0 alone, at the widest product:
	 * one image's tokens through the first MLP layer */
	if (world->rank == 0)
		mm = pd_backend_rate_matmul(e->be, e->e.txt_len + e->ls.tokens, e->info.dim, e->info.mlp_width);
	if (world->size > 1)
		world->ops->barrier(world);
	pd_engine_notes(e, &rq);
	/* the reference product's buffers are gone: the estimate counts the steps' */
	e->be->work_peak = e->be->work_bytes;
	clk.mesh = &e->mesh;
	clk.be = e->be;
	e->par.runner.on_step = pd_bench_on_step;
	e->par.runner.step_ctx = &clk;
	clk.t0 = pd_now();
	pd_mesh_traffic(&e->mesh, &clk.b0, &clk.w0);
	if (pd_engine_denoise(e, all, NULL))
		pd_cli_abort(world);
	t_steps = pd_now() - clk.t0;
	for (int i = a.warmup; i < total; i++)
		dt[i - a.warmup] = clk.t[i] - (i ? clk.t[i - 1] : clk.t0);
	sps = pd_median_sort(dt, timed);
	bytes_step = (clk.bytes[total - 1] - (a.warmup ? clk.bytes[a.warmup - 1] : clk.b0)) / (uint64_t)timed;
	bytes_max = bytes_step;
	allocs_late = clk.allocs[total - 1] - clk.allocs[a.warmup - 1];
	{
		struct pd_bench_rank mine = {
			.rss_mb = pd_peak_rss_mb(),
			.weights_mb = (double)e->be->weight_bytes / 1048576.0,
			.work_mb = (double)e->be->work_peak / 1048576.0,
			.wait_s = (clk.wait[total - 1] - (a.warmup ? clk.wait[a.warmup - 1] : clk.w0)) / timed,
			.load_s = e->load_seconds,
		};

		if (world->size > 1) {
			if (pd_comm_allgather(world, &mine, sizeof(mine), rk) ||
			    world->ops->allreduce(world, &sps, 1, PD_COMM_F64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &bytes_max, 1, PD_COMM_I64, PD_COMM_MAX) ||
			    world->ops->allreduce(world, &allocs_late, 1, PD_COMM_I64, PD_COMM_MAX))
				pd_cli_abort(world);
		} else {
			rk[0] = mine;
		}
	}
	if (a.vae_time && e->mp.vae) {
		/* with more than one process the picture is decoded in bands
		 * over all of them, as generate does (--no-vae-parallel: rank 0
		 * alone) */
		int banded = world->size > 1 && !a.no_vae_parallel;

		/* the VAE's reference: its middle convolutions' product as a
		 * matrix product (128² pixels x 512 x 9 inputs x 512 outputs at
		 * 1024²), in the products' precision (--dtype) */
		if (world->rank == 0)
			vae_mm = pd_backend_rate_matmul(e->be, 8192, 4608, 512);

		if ((banded || world->rank == 0) &&
		    pd_bench_vae(e, banded ? world : NULL, all, &vae_s, &vae_flop, &vae_ranks)) {
			pd_gen_failed(world, NULL);
			pd_cli_abort(world);
		}
	}
	/* the generation's phases, without the bench's own reference product */
	total_s = open_s + t_steps + (vae_s > 0 ? vae_s : 0);
	fl = pd_dit_count_flops(&e->info, e->e.txt_len, e->ls.tokens);
	branches = pd_gen_uses_cfg(&e->p, &e->e) ? 2 : 1;
	step_flop = (fl.linear + fl.attention) * (double)e->e.batch * branches;
	achieved = step_flop / sps / 1e9;
	pd_mesh_format(e->degree, e->opt.distrifusion, mesh, sizeof(mesh));
	if (world->rank == 0) {
		double rss_max = 0, w_mb, act_mb;
		int big = 0;

		for (int i = 0; i < world->size; i++)
			if (rk[i].rss_mb > rss_max) {
				rss_max = rk[i].rss_mb;
				big = i;
			}
		w_mb = rk[big].weights_mb;
		act_mb = rk[big].work_mb;
		if (a.json) {
			printf("{\"model\": \"%s\", \"height\": %d, \"width\": %d, \"tokens\": %lld, \"dtype\": \"%s\", "
			       "\"ranks\": %d, \"threads\": %d, \"mesh\": \"%s\", \"images\": %lld, \"branches\": %d, "
			       "\"seconds_per_step\": %.6g, \"step_gflop\": %.10g, \"achieved_gflops\": %.6g, "
			       "\"matmul_gflops\": %.6g, \"ratio\": %.4g, \"bytes_sent_per_rank_per_step\": %llu, "
			       "\"bytes_sent_per_step_rank0\": %llu, \"peak_rss_mb\": %.1f, \"peak_rss_mb_per_rank\": [",
			       e->mp.root ? e->mp.root : e->mp.transformer, a.height, a.width,
			       (long long)(e->e.txt_len + e->ls.tokens), a.dtype, world->size, e->be->threads, mesh,
			       (long long)e->e.batch, branches, sps, step_flop / 1e9, achieved, mm,
			       mm > 0 ? achieved / (mm * world->size) : 0, (unsigned long long)bytes_max,
			       (unsigned long long)bytes_step, rss_max);
			for (int i = 0; i < world->size; i++)
				printf("%s%.1f", i ? ", " : "", rk[i].rss_mb);
			printf("], \"wait_seconds_per_step_per_rank\": [");
			for (int i = 0; i < world->size; i++)
				printf("%s%.4f", i ? ", " : "", rk[i].wait_s);
			printf("], \"weights_mb\": %.4f, \"activations_mb\": %.4f, \"estimate_mb\": %.4f, "
			       "\"peak_over_estimate\": %.3f, \"allocations_after_warmup\": %llu, "
			       "\"load_seconds\": %.6g, \"load_mb_per_second\": %.6g, \"vae_dtype\": \"%s\", "
			       "\"vae_bands\": %d, \"vae_seconds\": %.6g, \"vae_gflop\": %.9g, \"vae_gflops\": %.6g, "
			       "\"vae_matmul_gflops\": %.6g, \"vae_ratio\": %.6g",
			       w_mb, act_mb, w_mb + act_mb, rss_max / (w_mb + act_mb), (unsigned long long)allocs_late,
			       rk[big].load_s, rk[big].load_s > 0 ? w_mb / rk[big].load_s : 0,
			       e->vae_dt == PD_BF16 ? "bf16" : "f32", vae_ranks, vae_s, vae_flop / 1e9,
			       vae_s > 0 ? vae_flop / 1e9 / vae_s : 0, vae_mm,
			       vae_s > 0 && vae_mm > 0 ? vae_flop / 1e9 / vae_s / (vae_mm * vae_ranks) : 0);
			if (a.e2e)
				printf(", \"e2e\": {\"open_seconds\": %.6g, \"load_seconds\": %.6g, \"encode_seconds\": %.6g, "
				       "\"steps\": %d, \"steps_seconds\": %.6g, \"decode_seconds\": %.6g, \"total_seconds\": %.6g}",
				       open_s, e->load_seconds, e->encode_seconds, total, t_steps, vae_s, total_s);
			printf("}\n");
		} else {
			printf("pdit bench: %s, %dx%d (%lld text + %lld image tokens), %s, %d process%s x %d thread%s\n",
			       e->mp.root ? e->mp.root : e->mp.transformer, a.width, a.height, (long long)e->e.txt_len,
			       (long long)e->ls.tokens, a.dtype, world->size, world->size > 1 ? "es" : "", e->be->threads,
			       e->be->threads > 1 ? "s" : "");
			printf("  mesh                            %s\n", mesh);
			printf("  seconds per step                %.3f  (median of %d after %d warm-up)\n", sps, timed,
			       a.warmup);
			printf("  step GFLOP                      %.1f  (%lld image%s x %d branch%s)\n", step_flop / 1e9,
			       (long long)e->e.batch, e->e.batch > 1 ? "s" : "", branches, branches > 1 ? "es" : "");
			printf("  achieved GFLOP/s                %.1f\n", achieved);
			printf("  matmul GFLOP/s per process      %.1f  (%s, %lldx%dx%d)\n", mm, a.dtype,
			       (long long)(e->e.txt_len + e->ls.tokens), e->info.dim, e->info.mlp_width);
			printf("  ratio                           %.2f\n", mm > 0 ? achieved / (mm * world->size) : 0);
			printf("  bytes sent per rank per step    %.1f MB (largest rank)\n", (double)bytes_max / 1e6);
			if (world->size > 1) {
				double lo = rk[0].wait_s, hi = rk[0].wait_s;

				for (int i = 1; i < world->size; i++) {
					lo = fmin(lo, rk[i].wait_s);
					hi = fmax(hi, rk[i].wait_s);
				}
				printf("  seconds waiting per step        %.3f to %.3f  (over the ranks, the mean of the timed"
				       " steps: in transfers, for peers)\n", lo, hi);
			}
			printf("  peak resident memory            %.0f MB (largest rank)", rss_max);
			if (world->size > 1) {
				printf(":");
				for (int i = 0; i < world->size; i++)
					printf(" %.0f", rk[i].rss_mb);
			}
			printf("\n");
			printf("  memory estimate                 %.0f MB = weights %.0f + activations %.0f (rank %d);"
			       " peak / estimate %.2f\n",
			       w_mb + act_mb, w_mb, act_mb, big, rss_max / (w_mb + act_mb));
			printf("  allocations in timed steps      %llu  (buffers and primitives, the most on a rank)\n",
			       (unsigned long long)allocs_late);
			printf("  loading                         %.2f s, %.0f MB/s  (the weights held, rank %d)\n",
			       rk[big].load_s, rk[big].load_s > 0 ? w_mb / rk[big].load_s : 0, big);
			if (vae_s >= 0)
				printf("  VAE decode                      %.2f s, %.1f GFLOP, %.1f GFLOP/s, %.2f of the matmul"
				       " rate at its shape (%.1f; %s convolutions, %d band%s)\n",
				       vae_s, vae_flop / 1e9, vae_s > 0 ? vae_flop / 1e9 / vae_s : 0,
				       vae_s > 0 && vae_mm > 0 ? vae_flop / 1e9 / vae_s / (vae_mm * vae_ranks) : 0, vae_mm,
				       e->vae_dt == PD_BF16 ? "bf16" : "f32", vae_ranks, vae_ranks > 1 ? "s" : "");
			if (a.e2e)
				printf("  one generation                  %.2f s = opening %.2f (loading %.2f, encoding %.2f) +"
				       " %d steps %.2f + decode %.2f\n",
				       total_s, open_s, e->load_seconds, e->encode_seconds, total, t_steps, vae_s);
		}
	}
	rc = 0;
out:
	free(all);
	free(clk.t);
	free(clk.bytes);
	free(clk.wait);
	free(clk.allocs);
	free(rk);
	free(dt);
	free(default_embeds);
	if (e)
		pd_engine_leave(&scope);
	pd_engine_close(e);
	pd_free_prompts(prompts, n_prompts);
	return rc;
}
