/*
 * pdit_generate.c - `pdit generate`, on one process or a mesh of them
 * (mpirun -np N pdit generate ...): the flags become an engine's options
 * and one request (engine/pdit.h); the engine is opened, runs it, and what
 * it made is written: PNGs carrying their parameters, videos, latents. A
 * failure the engine reports is printed by the lowest failing rank; one in
 * the middle of collective work ends the whole job instead of leaving the
 * others waiting.
 */
#include "pd_png.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_video.h"
#include "pdit_cli.h"
#include "pdit_flags.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char pd_gen_usage[] =
	"usage: [mpirun -np N] pdit generate (--model DIR | --transformer DIR|--diffusion-model FILE ...)\n"
	"                                  (-p TEXT | --prompts FILE | --embeds FILE) [options]\n"
	"\n"
	"Runs the model's family (FLUX.1, Qwen-Image, Wan2.1) from a prompt to a PNG\n"
	"or a video, numerically equal to its diffusers pipeline with the same seed.\n"
	"Several prompts (--prompts, one a line) make several images: image b uses\n"
	"seed + b and is written as NAME-b.png (or through a %d in the name). Under\n"
	"mpirun the processes form a mesh of degrees\n"
	"dp x cfg x pp x distrifusion x ring x ulysses x tp = N (pdit picks one when no\n"
	"degree is given); every mesh of exact methods computes the same pictures as\n"
	"one process.\n"
	"PipeFusion (pp) and DistriFusion attend to some keys and values one step old\n"
	"after --warmup-steps exact steps: less traffic or more overlap, slightly\n"
	"different pictures (use pdit check to see how different).";

static const char pd_gen_examples[] =
	"  pdit tiny tiny-model --full\n"
	"  pdit generate --model tiny-model -p \"a photo of a cat\" -H 256 -W 256 --steps 4 -o out.png\n"
	"  pdit tiny tiny-wan --family wan\n"
	"  pdit generate --model tiny-wan -p \"a red kite\" -H 64 -W 64 --frames 9 --steps 4 -o kite.mp4\n"
	"  pdit generate --model Wan2.1-T2V-1.3B-Diffusers -p \"a cat surfing\" -H 480 -W 832 --frames 33 \\\n"
	"      --dtype bf16 -o cat.mp4\n"
	"  # as root, Open MPI wants --allow-run-as-root, and --oversubscribe beyond one process a core\n"
	"  # (the source tree's scripts/mpirun adds both)\n"
	"  mpirun -np 2 pdit generate --model tiny-model -p \"a red fox\" -H 256 -W 256 --ulysses-degree 2 -o out.png\n"
	"  mpirun -np 4 pdit generate --model tiny-model -p \"a red fox\" -H 256 -W 256 \\\n"
	"      --ulysses-degree 2 --ring-degree 2 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev --prompts prompts.txt -n \"blurry\" --true-cfg-scale 4 \\\n"
	"      --cfg-parallel -s 7 --dtype bf16 -o cat-%d.png\n"
	"  pdit generate --diffusion-model flux1-schnell.safetensors --vae ae.safetensors --clip_l clip_l.safetensors \\\n"
	"      --t5xxl t5xxl_fp16.safetensors --tokenizer tok --tokenizer-2 tok2 -p \"a lighthouse\" --dtype bf16\n"
	"  mpirun -np 4 pdit generate --model FLUX.1-dev -p \"a city at night\" --pipefusion-degree 4 \\\n"
	"      --num-patches 4 --warmup-steps 2 --fbcache-threshold 0.08 -o out.png\n"
	"  mpirun -np 2 pdit generate --model FLUX.1-dev -p \"a forest\" --distrifusion-degree 2 -o out.png\n";

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

/* Frame F of video B of IMAGES as PNGs: OUT is a frame pattern, "-B"
 * put before its extension for a batch. */
static char *pd_frame_name(const char *out, int64_t b, int64_t images, int f)
{
	const char *dot = strrchr(out, '.');
	char *pattern = images == 1 ? pd_strdup(out)
		      : dot && !strchr(dot, '/') ? pd_strfmt("%.*s-%lld%s", (int)(dot - out), out, (long long)b, dot)
						 : pd_strfmt("%s-%lld", out, (long long)b);
	char *name = pattern ? pd_strfmt(pattern, f) : NULL;

	free(pattern);
	return name;
}

/* Whether -o is a pattern of a video's frames (a %d in a picture's name
 * numbers the frames of a video; in a video's name, the videos). */
static int pd_frames_pattern(const char *out)
{
	return pd_pattern_ok(out) && !pd_video_is_video_name(out);
}

/* Every output can be written, before any work: each name OUT (-o's, or
 * the default) makes for PICTURES of FRAMES each, --out-latents. Called
 * before any weight is read with what the flags say (the batch is not
 * known yet with --embeds: both names of one picture and of several are
 * tried), and again once the engine knows the frames. */
static int pd_gen_check_outputs(const struct pd_gen_args *a, const char *out, int pictures, int frames)
{
	int per_video = frames > 1 && pd_frames_pattern(out) ? frames : 1, rc = 0;

	if (strchr(out, '%') && !pd_pattern_ok(out))
		return pd_errorf("-o/--output %s: the one pattern it takes is a single %%d or %%03d (the picture's number, "
				 "a video's frame, or in a .mp4 name the video's number)",
				 out);
	for (int k = 0; k < 2 && !rc; k++) {
		int64_t batch = k ? 2 : pictures > 0 ? pictures : 1;

		for (int64_t b = 0; b < batch && !rc; b++)
			for (int f = 0; f < per_video && !rc; f++) {
				char *name = per_video > 1 ? pd_frame_name(out, b, batch, f) : pd_output_name(out, b, batch);

				rc = !name || pd_out_check(name) || pd_video_out_check(name) ? -1 : 0;
				free(name);
			}
		if (pictures > 0)
			break;
	}
	if (!rc && a->out_latents && pd_out_check(a->out_latents))
		rc = -1;
	if (!rc && a->out_latents) {
		char *name = pd_output_name(out, 0, pictures > 0 ? pictures : 1);

		if (name && strcmp(name, a->out_latents) == 0)
			rc = pd_errorf("--out-latents %s is also -o's picture: give them different names", a->out_latents);
		free(name);
	}
	return rc;
}

/* The prompts in an embeddings file (prompt_embeds' first size), for the
 * output names checked before the work; 0 where it cannot tell (the
 * engine then says what is wrong with the file). */
static int pd_embeds_batch(const char *path)
{
	struct pd_st *st = NULL;
	const struct pd_st_tensor *t;
	int n = 0;

	if (pd_st_open(&st, path))
		return 0;
	t = pd_st_get(st, "prompt_embeds");
	if (t && t->ndim == 3 && t->shape[0] >= 1 && t->shape[0] <= PD_MAX_BATCH)
		n = (int)t->shape[0];
	pd_st_close(st);
	return n;
}

/* Prompt B of an embeddings file, from the "prompts" list pdit encode
 * writes into its metadata (malloc'd), or NULL: also where it is no UTF-8
 * text (another program's file), which the picture's parameters must be. */
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
	if (cJSON_IsString(item) && pd_utf8_bad(item->valuestring, strlen(item->valuestring)) < 0)
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

	if (pd_frames_pattern(out)) {
		for (int f = 0; f < res->frames && !rc; f++) {
			char *name = pd_frame_name(out, b, res->images, f);

			rc = !name ? -1 : pd_png_write(name, rgb + (size_t)f * frame, res->width, res->height, "parameters", text);
			free(name);
		}
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
	char strength[48] = "";

	/* img2img: the share of the steps it ran */
	if (res->strength > 0)
		snprintf(strength, sizeof(strength), "; strength: %g", res->strength);
	return pd_strfmt("%spdit %s; seed: %llu; steps: %d%s; guidance: %g; true_cfg_scale: %g; size: %dx%d; frames: %d; "
			 "model: %s; dtype: %s%s",
			 source, PDIT_VERSION, (unsigned long long)seed, res->steps, strength, res->guidance,
			 res->true_cfg_scale, res->width, res->height, res->frames, model, dtype, res->made_from);
}

/* The pictures this rank holds, as PNGs carrying their parameters. */
static int pd_write_pictures(const struct pd_gen_args *a, const struct pd_request *rq, const struct pd_result *res)
{
	size_t npx = (size_t)res->width * res->height * (size_t)(res->frames > 1 ? res->frames : 1);
	const char *model = pd_gen_model_name(a);
	int rc = 0;

	for (int64_t i = 0; i < res->n_pictures && !rc; i++) {
		int64_t b = res->first_picture + i;
		char *name = pd_output_name(a->output, b, res->images);
		char *carried = rq->n_prompts ? NULL : pd_embeds_prompt(a->embeds, b);
		char *source = rq->n_prompts ? pd_cli_prompt_source(rq->prompts[rq->batch != PD_DEFAULT ? 0 : b], a->negative)
			       : carried ? pd_strfmt("%s\n", carried)
					 : pd_strfmt("embeds: %s (prompt %lld)\n", a->embeds, (long long)b);
		char *text = source ? pd_cli_parameters(source, a->seed + b, res, model, a->dtype) : NULL;

		/* a video, or one frame asked for as a video */
		if (res->frames > 1 || pd_video_is_video_name(a->output))
			rc = !text ? -1 : pd_write_video(a, res, b, res->rgb + (size_t)i * npx * 3,
							 rq->n_prompts ? rq->prompts[rq->batch != PD_DEFAULT ? 0 : b] : "", text);
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

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_engine_options o;
	struct pd_request rq;
	struct pd_result res = { 0 };
	struct pd_engine *e = NULL;
	struct pd_engine_about about;
	struct pd_cli_progress prog;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];
	char **prompts = NULL;
	int n_prompts = 0, embeds_batch = 0, hr, rc = 1;
	double t_write, peak;

	pd_gen_flags(&a, opts, PD_CMD_GENERATE);
	hr = pd_gen_parse(world, &a, opts, "generate", pd_gen_usage, pd_gen_examples, argc, argv);
	if (hr == 1)
		return 0;
	pd_cli_progress_init(&prog, 0);
	hr = hr || pd_gen_engine_options(&a, &o, 1) || pd_gen_request(&a, &rq, &prompts, &n_prompts);
	if (!hr && a.embeds)
		embeds_batch = pd_embeds_batch(a.embeds);
	hr = hr || pd_gen_check_outputs(&a, a.output, rq.batch > 0 ? rq.batch : a.embeds ? embeds_batch : rq.n_prompts,
				  a.frames_seen && a.frames > 1 ? a.frames : 1);
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
	pd_engine_about(e, &about);
	if (about.frames > 1 && !pd_pattern_ok(a.output_seen ? a.output : "output.mp4") &&
	    !pd_video_is_video_name(a.output_seen ? a.output : "output.mp4")) {
		/* known once the model's family is: before any step */
		pd_errorf("-o/--output %s: a video is written as .mp4, .mkv or .mov, or as frames with a pattern such as "
			  "frame-%%03d.png", a.output);
		pd_gen_failed(world, e);
		goto out;
	}
	/* the frames are known now (the family's default when not given);
	 * every rank writes its own pictures, so every rank agrees */
	if (pd_cli_any_failed(world, about.frames > 1 && !a.frames_seen &&
					     pd_gen_check_outputs(&a, a.output_seen ? a.output : "output.mp4",
								  rq.batch > 0 ? rq.batch : a.embeds ? embeds_batch : rq.n_prompts,
								  about.frames)))
		goto out;
	if (pd_engine_run(e, &rq, &res)) {
		pd_gen_failed(world, e);
		goto out;
	}
	hr = 0;
	t_write = pd_now();
	if (a.out_latents && world->rank == 0) {
		hr = pd_engine_save_latents(e, &res, a.out_latents);
		if (!hr)
			pd_log(1, "pdit: wrote %s\n", a.out_latents);
	}
	if (!hr && res.rgb)
		hr = pd_write_pictures(&a, &rq, &res);
	rc = pd_cli_any_failed(world, hr);
	prog.write_s = pd_now() - t_write;
	/* every rank's pictures are written: rank 0 names them all */
	for (int64_t b = 0; !rc && world->rank == 0 && b < res.images && res.bands > 0; b++) {
		const char *out = a.output_seen || res.frames == 1 ? a.output : "output.mp4";
		int frames = res.frames > 1 && pd_frames_pattern(out);
		char *name = frames ? pd_frame_name(out, b, res.images, 0) : pd_output_name(out, b, res.images);
		char *last = frames ? pd_frame_name(out, b, res.images, res.frames - 1) : NULL;

		if (name && (!frames || last))
			pd_log(1, frames ? "pdit: wrote %s ... %s\n" : "pdit: wrote %s\n", name, last);
		free(name);
		free(last);
	}
	/* collectives: on what every rank shares, not on the log level */
	if (!rc && a.verbose)
		pd_report_memory(world);
	peak = pd_peak_rss_mb();
	if (!rc && world->size > 1)
		world->ops->allreduce(world, &peak, 1, PD_COMM_F64, PD_COMM_MAX);
	if (!rc) {
		pd_cli_progress_summary(&prog, peak);
		pd_cli_work_done();
	}
out:
	pd_result_free(&res);
	pd_engine_close(e);
	pd_gen_free_prompts(prompts, n_prompts);
	pd_cli_progress_end(&prog);
	return rc;
}

int pd_cmd_generate_parse_only(int argc, char **argv)
{
	struct pd_gen_args a;
	struct pd_arg opts[PD_GEN_MAX_FLAGS];

	pd_gen_flags(&a, opts, PD_CMD_GENERATE);
	return pd_gen_parse(NULL, &a, opts, "generate", NULL, NULL, argc, argv);
}
