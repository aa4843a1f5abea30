/*
 * pdit_flags.c - the flags generate, check, bench and serve share, and what
 * they become: the engine's options and a request.
 */
#include "pdit_flags.h"
#include "pd_prompts.h"
#include "pd_util.h"
#include "pd_video.h"
#include "pdit_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int pd_gen_flags(struct pd_gen_args *a, struct pd_arg *opts, enum pd_cmd_kind kind)
{
	const struct pd_arg common[] = {
		{ "--model", 'm', PD_ARG_STRING, &a->model, "DIR", "diffusers model folder (model_index.json, transformer/, vae/, scheduler/, the text encoders)", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &a->transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--vae", 0, PD_ARG_STRING, &a->vae, "DIR|FILE", "VAE folder, or one .safetensors file (overrides --model's)", NULL },
		{ "--scheduler", 0, PD_ARG_STRING, &a->scheduler, "DIR", "scheduler folder (overrides --model's)", NULL },
		{ "--diffusion-model", 0, PD_ARG_STRING, &a->diffusion_model, "FILE", "transformer in one file: safetensors (Black Forest Labs' layout or diffusers'; BF16, F16, fp8, scaled fp8) or GGUF (ComfyUI-GGUF, stable-diffusion.cpp)", NULL },
		{ "--config", 0, PD_ARG_STRING, &a->config, "FILE", "the transformer's config.json, for a single file that carries none (FLUX.1's sizes are inferred)", NULL },
		{ "--quantize", 0, PD_ARG_STRING, &a->quantize, "TYPE", "encode the transformer blocks' BF16/F16/F32 weights at load into q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k or fp8 and keep them so (as pdit quantize writes them; quantized files need none)", NULL },
		{ "--lora", 0, PD_ARG_LIST, &a->lora, "FILE[:SCALE]", "a LoRA adapter (diffusers/PEFT, kohya or Black Forest Labs' names) beside the transformer's layers, times SCALE (default 1, negative reverses it); repeatable, applied in order; never merged, so quantized weights stay quantized", NULL },
		{ "--lora-model-dir", 0, PD_ARG_STRING, &a->lora_dir, "DIR", "where <lora:NAME:SCALE> in a prompt finds NAME.safetensors (stable-diffusion.cpp's and A1111's tags; taken out of the prompt)", NULL },
		{ "--lora-lenient", 0, PD_ARG_FLAG, &a->lora_lenient, NULL, "skip an adapter's keys of no layer of the model (-v lists them) instead of refusing the file", NULL },
		{ NULL, 0, PD_ARG_STRING, &a->enc, NULL, NULL, NULL }, /* the text encoders' flags go here */
		{ "--prompt", 'p', PD_ARG_STRING, &a->prompt, "TEXT", "the prompt (encoded with the model's text encoders)", NULL },
		{ "--negative-prompt", 'n', PD_ARG_STRING, &a->negative, "TEXT", "negative prompt, for --true-cfg-scale above 1", NULL },
		{ "--prompts", 0, PD_ARG_STRING, &a->prompts_file, "FILE", "one prompt a line: a batch (written as NAME-0.png, ...)", NULL },
		{ "--max-sequence-length", 0, PD_ARG_COUNT, &a->max_seq, "N", "text tokens of the prompt (the family's default: FLUX 512, or 256 without guidance embedding; Wan 512; Qwen-Image up to 512, each prompt its own length)", NULL },
		{ "--embeds", 0, PD_ARG_STRING, &a->embeds, "FILE", "instead of prompts: safetensors with prompt_embeds [B,T,J], pooled_prompt_embeds [B,P], optional negative_* (pdit encode writes them)", NULL },
		{ "--height", 'H', PD_ARG_COUNT, &a->height, "PX", "image height, a multiple of 16 (default 1024; Wan 480; Qwen-Image 1328)", NULL },
		{ "--width", 'W', PD_ARG_COUNT, &a->width, "PX", "image width, a multiple of 16 (default 1024; Wan 832; Qwen-Image 1328)", NULL },
		{ "--aspect", 0, PD_ARG_STRING, &a->aspect, "W:H", "instead of -H and -W: the size the model's card gives the ratio (Qwen-Image 16:9: 1664x928), else the default size's area in that shape", NULL },
		{ "--frames", 0, PD_ARG_COUNT, &a->frames, "N", "video frames, 4k + 1 (Wan; default 81)", &a->frames_seen },
		{ "--flow-shift", 0, PD_ARG_FLOAT, &a->flow_shift, "S", "the sampler's shift instead of the scheduler folder's (Wan: 3 for 480p, 5 for 720p; FLUX: a static shift)", NULL },
		{ "--steps", 0, PD_ARG_COUNT, &a->steps, "N", "denoising steps (default: FLUX 28, or 4 for models without guidance embedding; Wan and Qwen-Image 50)", &a->steps_seen },
		{ "--guidance", 0, PD_ARG_FLOAT, &a->guidance, "G", "FLUX: distilled guidance scale (default 3.5; dev-style models); Wan: classifier-free guidance with the negative prompt, \"\" unless -n (default 5)", &a->guidance_seen },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &a->true_cfg_scale, "C", "true classifier-free guidance with the negative prompt when above 1 (default 1; Qwen-Image 4 when -n is given)", &a->true_cfg_seen },
		{ "--seed", 's', PD_ARG_U64, &a->seed, "S", "seed of image 0 (default 42), as torch.Generator('cpu').manual_seed", NULL },
		{ "--output", 'o', PD_ARG_STRING, &a->output, "FILE", "PNG to write (default output.png); a video: clip.mp4 (default output.mp4) or frame-%03d.png; a %d in a batch's name numbers its pictures (cat-%d.png) or videos (clip-%d.mp4)", &a->output_seen },
		{ "--fps", 0, PD_ARG_COUNT, &a->fps, "N", "a video's frames a second (default 16)", NULL },
		{ "--out-latents", 0, PD_ARG_STRING, &a->out_latents, "FILE", "also write latents.init and latents.final [B,L,C] (packed)", NULL },
		{ "--init-latents", 0, PD_ARG_STRING, &a->init_latents, "FILE", "start from latents.init [B,L,C] or latents.init_unpacked instead of the seed", NULL },
		{ "--init-img", 'i', PD_ARG_STRING, &a->init_img, "FILE", "img2img (FLUX): start from this picture (PNG or JPEG), encoded by the VAE; resized to -W x -H when given (as diffusers, Lanczos), else its size rounded down to 16", NULL },
		{ "--strength", 0, PD_ARG_DOUBLE, &a->strength, "S", "img2img: how much of the picture is made anew, the share of the steps run (0 to 1; default 0.75)", &a->strength_seen },
		{ "--mask", 0, PD_ARG_STRING, &a->mask, "FILE", "inpainting (with -i): a picture (PNG or JPEG) of the picture's size, white where it is made anew, black where it is kept; with a FLUX.1 Fill model, what it fills", NULL },
		{ "--ref-image", 'r', PD_ARG_STRING, &a->ref_img, "FILE", "FLUX.1 Kontext: a reference picture (PNG or JPEG, its own size rounded down to 16) the model edits or draws from", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a->dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--vae-dtype", 0, PD_ARG_STRING, &a->vae_dtype, "f32|bf16", "precision of the VAE's convolutions (default f32; bf16: about 2x faster decoding, pixels within a few levels)", NULL },
		{ "--quant-products", 0, PD_ARG_STRING, &a->quant_products, "int8|int8-256|bf16|auto", "how layers kept quantized (GGUF, fp8, --quantize) multiply: int8 dot products on inputs quantized in blocks of 32 (of 256 for Q4_K, Q5_K, Q6_K and Q8_0 layers a multiple of 256 wide; Q8_0, Q4_0, Q4_1 and Q4_K weights as stored, Q5_0, Q5_K and Q6_K as bytes; fp8 e4m3 converted to int8 blocks at load, its small values rounded); int8-256 as int8 with those Q8_0 layers' weights requantized at load to one scale per 256 inputs (a second rounding; fewer f32 operations, AMX-INT8 tiles of full depth); or decoded to bf16 (default auto: int8 with --dtype bf16 on a CPU with AVX-512 VNNI or AVX-VNNI, decoded where the bf16 products take AMX tiles, faster there; bf16 keeps fp8 values exact)", NULL },
		{ "--ring-attention", 0, PD_ARG_STRING, &a->ring_attention, "merged|gathered|auto", "ring attention's form: merged (each chunk's partial result merged as the next travels: transfers behind the work, K/V memory O(S/R), one process's result within f32's last bits) or gathered (every chunk's K/V gathered in the sequence's order and attended once: one process's result bit for bit, K/V memory O(S)); default auto: gathered on int8 products, whose 8-bit roundings would turn the last bits into steps, else merged", NULL },
		{ "--threads", 't', PD_ARG_COUNT, &a->threads, "N", "threads per process (default: the CPUs it may run on, divided among the processes there)", NULL },
		{ "--backend", 0, PD_ARG_STRING, &a->backend, "cpu|cuda|auto", "what computes (default auto: CUDA where pdit was built with it and a GPU is present, else the CPU)", NULL },
		{ "--device", 0, PD_ARG_INT, &a->device, "N", "the GPU of this process (default: its local rank on its machine, modulo the GPUs there)", &a->device_seen },
		{ "--comm", 0, PD_ARG_STRING, &a->comm, "mpi|nccl|auto", "how GPUs' buffers travel between processes: MPI through pinned host buffers, or NCCL (default auto: NCCL when built with it and every process has its own GPU)", NULL },
		{ "--comm-timeout", 0, PD_ARG_FLOAT, &a->comm_timeout, "S", "seconds a process may wait for the others before the job is reported and stopped (default 1800; 0: forever; lifted where one rank works alone: encoding prompts, check's reference)", NULL },
		{ "--parallel", 0, PD_ARG_STRING, &a->parallel, "auto", "choose the mesh as pdit plan ranks them: auto among the exact methods, auto-stale also PipeFusion and DistriFusion", NULL },
		{ NULL, 0, PD_ARG_INT, a->degree, NULL, NULL, NULL }, /* the mesh's axes go here */
		{ "--num-patches", 0, PD_ARG_COUNT, &a->patches, "M", "PipeFusion: row bands per step (default: as many as stages)", NULL },
		{ "--warmup-steps", 0, PD_ARG_INT, &a->warmup_steps, "W", "DistriFusion, PipeFusion: the first W steps exact, on fresh keys and values (default 1)", &a->warmup_seen },
		{ "--fbcache-threshold", 0, PD_ARG_FLOAT, &a->fbcache, "T", "First Block Cache: skip the other blocks when the first block's change is below T (0: off; 0.05 to 0.12 usual)", NULL },
		{ "--vae-parallel", 0, PD_ARG_FLAG, &a->vae_parallel, NULL, "decode each picture in row bands over its data-parallel group (the default with more than one process)", NULL },
		{ "--no-vae-parallel", 0, PD_ARG_FLAG, &a->no_vae_parallel, NULL, "decode each picture on one process instead", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a->verbose, NULL, "more detail", NULL },
		{ "--quiet", 'q', PD_ARG_FLAG, &a->quiet, NULL, "nothing but errors: no progress, no summary", NULL },
	};
	size_t n = 0;

	memset(a, 0, sizeof(*a));
	a->output = "output.png";
	/* the counts: not given (a given 0 is refused) */
	a->height = a->width = a->frames = a->steps = a->max_seq = a->batch = PD_DEFAULT;
	a->dtype = "f32";
	a->guidance = -1; /* the family's */
	a->fps = 16;
	a->true_cfg_scale = -1;
	a->seed = 42;
	a->warmup_steps = 1;
	a->comm_timeout = 1800;
	/* not given (a given 0 is refused) */
	for (int x = 0; x < PD_AXIS_COUNT; x++)
		a->degree[x] = pd_axes[x].is_switch ? 0 : -1;
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) {
		if (common[i].dest == &a->enc) {
			n = (size_t)pd_cli_encoder_flags(&a->enc, opts, (int)n, 1);
			continue;
		}
		if (common[i].dest == a->degree) {
			/* an axis's flag each, the slowest-varying first */
			for (int x = PD_AXIS_COUNT - 1; x >= 0; x--)
				opts[n++] = (struct pd_arg){ pd_axes[x].flag, 0, pd_axes[x].is_switch ? PD_ARG_FLAG : PD_ARG_INT,
							     &a->degree[x], pd_axes[x].is_switch ? NULL : "N",
							     pd_axes[x].help, NULL };
			continue;
		}
		/* check and bench write nothing and start from the seed */
		if (kind != PD_CMD_GENERATE && (common[i].dest == &a->output || common[i].dest == &a->out_latents ||
						common[i].dest == &a->init_latents || common[i].dest == &a->init_img ||
						common[i].dest == &a->strength || common[i].dest == &a->mask ||
						common[i].dest == &a->ref_img))
			continue;
		/* serve: what a picture is comes with each request */
		if (kind == PD_CMD_SERVE &&
		    (common[i].dest == &a->prompt || common[i].dest == &a->negative || common[i].dest == &a->prompts_file ||
		     common[i].dest == &a->embeds || common[i].dest == &a->height || common[i].dest == &a->width ||
		     common[i].dest == &a->aspect ||
		     common[i].dest == &a->frames || common[i].dest == &a->steps || common[i].dest == &a->guidance ||
		     common[i].dest == &a->true_cfg_scale || common[i].dest == &a->seed || common[i].dest == &a->fps ||
		     common[i].dest == &a->fbcache))
			continue;
		opts[n] = common[i];
		if (kind == PD_CMD_BENCH && common[i].dest == &a->steps)
			opts[n].help = "timed steps (default 3), after --warmup untimed ones";
		n++;
	}
	memset(&opts[n], 0, sizeof(opts[n]));
	return (int)n;
}

int pd_cli_encoder_flags(struct pd_cli_encoders *c, struct pd_arg *opts, int n, int tokenizers)
{
	struct pd_encoders_known *k = &c->known;
	int f = 0;

	memset(c, 0, sizeof(*c));
	pd_encoders_known(k);
	for (int i = 0; i < k->slots; i++, f++) {
		snprintf(c->name[f], sizeof(c->name[f]), i ? "--text-encoder-%d" : "--text-encoder", i + 1);
		snprintf(c->help[f], sizeof(c->help[f]), "text encoder %d (%s): folder or file (overrides --model's)", i + 1,
			 k->slot[i]);
		opts[n++] = (struct pd_arg){ c->name[f], 0, PD_ARG_STRING, &c->dir[i], "DIR|FILE", c->help[f], NULL };
	}
	for (int i = 0; i < k->n_files; i++, f++) {
		snprintf(c->name[f], sizeof(c->name[f]), "--%s", k->files[i].name);
		snprintf(c->help[f], sizeof(c->help[f]), "%s in one file (.safetensors, fp8 included%s), as "
			 "stable-diffusion.cpp's --%s", k->files[i].help,
			 strcmp(k->files[i].name, "llm") == 0 ? ", or a GGUF in llama.cpp's names" : "", k->files[i].name);
		opts[n++] = (struct pd_arg){ c->name[f], 0, PD_ARG_STRING, &c->file[i], "FILE", c->help[f], NULL };
	}
	for (int i = 0; tokenizers && i < k->slots; i++, f++) {
		snprintf(c->name[f], sizeof(c->name[f]), i ? "--tokenizer-%d" : "--tokenizer", i + 1);
		snprintf(c->help[f], sizeof(c->help[f]), "tokenizer %d folder: %s", i + 1, k->tokenizer[i]);
		opts[n++] = (struct pd_arg){ c->name[f], 0, PD_ARG_STRING, &c->tok[i], "DIR", c->help[f], NULL };
	}
	memset(&opts[n], 0, sizeof(opts[n]));
	return n;
}

int pd_cli_encoder_options(const struct pd_cli_encoders *c, struct pd_engine_options *o)
{
	int m = 0;

	memcpy(o->text_encoder, c->dir, sizeof(o->text_encoder));
	memcpy(o->tokenizer, c->tok, sizeof(o->tokenizer));
	memset(o->encoder_files, 0, sizeof(o->encoder_files));
	for (int i = 0; i < c->known.n_files; i++) {
		if (!c->file[i])
			continue;
		if (m == PD_MAX_ENCODERS)
			return pd_errorf("--%s: more text encoders in single files than a family has (%d)",
					 c->known.files[i].name, PD_MAX_ENCODERS);
		o->encoder_files[m++] = (struct pd_encoder_file){ c->known.files[i].name, c->file[i] };
	}
	return 0;
}

int pd_gen_parse(struct pd_comm *world, struct pd_gen_args *a, const struct pd_arg *opts, const char *name,
		 const char *usage, const char *examples, int argc, char **argv)
{
	const char *pos[1];
	int n_pos, hr;

	hr = pd_args_parse(name, opts, argc, argv, 2, pos, 0, &n_pos);
	/* once: FILE:SCALE's ':' is cut where the path ends */
	for (int i = 0; hr == 0 && i < a->lora.n; i++)
		pd_lora_spec_parse(a->lora.v[i], &a->loras[i]);
	if (!world)
		return hr;
	if (hr == 1 && world->rank == 0)
		pd_args_help(usage, opts, examples);
	if (hr == 0 && a->verbose && a->quiet)
		hr = pd_errorf("-v/--verbose and -q/--quiet contradict each other");
	if (hr == 0 && a->verbose && world->rank == 0)
		pd_log_level = 2;
	if (hr == 0 && a->quiet)
		pd_log_level = 0;
	return hr;
}

const char *pd_gen_model_name(const struct pd_gen_args *a)
{
	return a->model ? a->model : a->diffusion_model ? a->diffusion_model : a->transformer;
}

void pd_gen_failed(struct pd_comm *world, struct pd_engine *e)
{
	if (e && pd_engine_dead(e))
		pd_cli_abort(world);
	pd_cli_report(world);
}

void pd_gen_free_prompts(char **prompts, int n)
{
	for (int i = 0; i < n; i++)
		free(prompts[i]);
	free(prompts);
}

/* Whether PATTERN holds exactly one number conversion, %d or %0Nd (N a
 * digit), and no other '%': the only patterns -o takes, so a name is never
 * a format string of the user's. */
int pd_pattern_ok(const char *pattern)
{
	const char *p = strchr(pattern, '%');

	if (!p)
		return 0;
	if (p[1] == '0' && p[2] >= '1' && p[2] <= '9' && p[3] == 'd')
		return !strchr(p + 4, '%');
	return p[1] == 'd' && !strchr(p + 2, '%');
}

char *pd_output_name(const char *pattern, int64_t b, int64_t batch)
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

int pd_gen_engine_options(const struct pd_gen_args *a, struct pd_engine_options *o, int decode)
{
	if (a->transformer && a->diffusion_model)
		return pd_errorf("give each component once: --transformer or --diffusion-model");
	if (a->vae_parallel && a->no_vae_parallel)
		return pd_errorf("--vae-parallel and --no-vae-parallel contradict each other");
	for (int x = 0; x < PD_AXIS_COUNT; x++)
		if (!pd_axes[x].is_switch && a->degree[x] != -1 && a->degree[x] < 1)
			return pd_errorf("%s must be at least 1 (got %d); leave it out to let pdit choose", pd_axes[x].flag,
					 a->degree[x]);
	if (a->device_seen && a->device < 0)
		return pd_errorf("--device must be a GPU's index, 0 or more (got %d)", a->device);
	pd_engine_options_init(o);
	o->backend = a->backend;
	o->quant_products = a->quant_products;
	o->ring_attention = a->ring_attention;
	o->comm = a->comm;
	o->device = a->device_seen ? a->device : -1;
	o->model = a->model;
	o->transformer = a->diffusion_model ? a->diffusion_model : a->transformer;
	o->transformer_config = a->config;
	o->vae = a->vae;
	o->scheduler = a->scheduler;
	if (pd_cli_encoder_options(&a->enc, o))
		return -1;
	o->dtype = a->dtype;
	o->vae_dtype = a->vae_dtype;
	o->quantize = a->quantize;
	memcpy(o->loras, a->loras, sizeof(o->loras));
	o->lora_lenient = a->lora_lenient;
	o->lora_dir = a->lora_dir;
	o->threads = a->threads;
	o->log_level = pd_log_level; /* as the command set it for this rank */
	o->comm_timeout = a->comm_timeout;
	for (int x = 0; x < PD_AXIS_COUNT; x++)
		o->degree[x] = pd_axes[x].is_switch ? (a->degree[x] ? pd_axes[x].max : 0) : a->degree[x] > 0 ? a->degree[x] : 0;
	o->parallel = a->parallel;
	/* said, not ignored: the other meshes' steps are all exact */
	if (a->warmup_seen && a->degree[PD_AXIS_DISTRI] <= 1 && a->degree[PD_AXIS_PP] <= 1 &&
	    !(a->parallel && strcmp(a->parallel, "auto-stale") == 0))
		return pd_errorf("--warmup-steps goes with --distrifusion-degree or --pipefusion-degree (or --parallel "
				 "auto-stale): their stale steps; other meshes run every step exact");
	o->warmup_steps = a->warmup_steps;
	o->patches = a->patches;
	o->vae_parallel = a->no_vae_parallel ? -1 : a->vae_parallel ? 1 : 0;
	o->decode = decode;
	o->one_request = 1;
	return 0;
}

int pd_gen_request(const struct pd_gen_args *a, struct pd_request *rq, char ***prompts, int *n)
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
	rq->init_image = a->init_img;
	rq->mask_image = a->mask;
	rq->ref_image = a->ref_img;
	/* (strength without a picture: the engine's refusal) */
	rq->strength = a->strength_seen ? a->strength : PD_DEFAULT;
	rq->height = a->height;
	rq->aspect = a->aspect;
	rq->width = a->width;
	if (a->output_seen && !pd_is_dir(a->output)) {
		/* pictures are PNG, videos MP4 (or Matroska, QuickTime): a .jpg
		 * name would hold PNG bytes (a folder gets its own refusal) */
		const char *base = strrchr(a->output, '/'), *dot;

		base = base ? base + 1 : a->output;
		dot = strrchr(base, '.');
		if (dot && dot != base && strcasecmp(dot, ".png") != 0 && !pd_video_is_video_name(a->output))
			return pd_errorf("-o/--output %s: pdit writes pictures as PNG (.png) and videos as .mp4, .mkv or "
					 ".mov; give one of those names", a->output);
	}
	if (a->frames_seen && a->frames > 1 && a->output_seen && !strchr(a->output, '%') &&
	    !pd_video_is_video_name(a->output))
		return pd_errorf("-o/--output %s: --frames %d makes a video, written as .mp4, .mkv or .mov, or as frames "
				 "with a pattern such as frame-%%03d.png", a->output, a->frames);
	if (a->guidance_seen && !(a->guidance >= 0))
		return pd_errorf("--guidance must not be negative (got %g)", a->guidance);
	if (a->true_cfg_seen && !(a->true_cfg_scale >= 0))
		return pd_errorf("--true-cfg-scale must not be negative (got %g)", a->true_cfg_scale);
	if (a->fps < 1 || a->fps > 240)
		return pd_errorf("--fps must be between 1 and 240 (got %d)", a->fps);
	rq->frames = a->frames;
	rq->flow_shift = a->flow_shift;
	rq->steps = a->steps;
	rq->guidance = a->guidance;
	rq->true_cfg_scale = a->true_cfg_scale;
	rq->seed = a->seed;
	rq->batch = a->batch;
	rq->fbcache_threshold = a->fbcache;
	rq->want_latents = a->out_latents != NULL;
	return 0;
}
