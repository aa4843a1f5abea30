/*
 * test_wan_pipeline.c - WanPipeline's whole denoising run against diffusers.
 *
 *   test_wan_pipeline WAN_TINY_DIR [f32|bf16]
 *
 * For each pipeline-*.safetensors (CFG 5 with an English negative prompt,
 * no CFG with flow shift 5, CFG 3 with the default empty negative prompt;
 * 5 and 9 frames): the prompts through pdit's UMT5 path equal
 * in.prompt_embeds / in.negative_prompt_embeds (1e-5; bf16 2e-2), the noise of the
 * seed equals latents.init (1e-6: PyTorch's SLEEF functions' ulps), and the UniPC run on the Wan family
 * from that noise gives every step's latents and latents.final within
 * 1e-4 of the reference, max|a - b| / max|ref| (bf16 products: 5e-2).
 */
#include "pd_backend_cpu.h"
#include "pd_model_paths.h"
#include "pd_pipeline.h"
#include "pd_safetensors.h"
#include "pd_scheduler.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_util.h"
#include "pd_wan.h"

#include <string.h>

static double tol = 1e-4, emb_tol = 1e-5, worst;

struct steps {
	const struct pd_latent_shape *ls;
	const struct pd_st *ref;
	const char *file;
	int seen;
};

static void compare(const char *file, const char *what, const float *a, size_t n, const struct pd_st *st,
		    const char *name, double limit)
{
	double w = pd_test_compare(file, what, a, n, st, name, 0, limit, 0);

	if (limit == tol)
		worst = w > worst ? w : worst;
}

/* The loop's dump: every step's packed latents, unpacked and compared. */
static void on_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim, const int64_t *shape)
{
	struct steps *s = ctx;
	int step;
	char tail[24];
	size_t n = (size_t)pd_latent_numel(s->ls);
	float *u;

	(void)index;
	(void)ndim;
	(void)shape;
	char ref[64];

	if (sscanf(name, "step.%d.%23s", &step, tail) != 2)
		return;
	/* pdit's names for the branches: pos / neg */
	if (strcmp(tail, "latents") == 0 || strcmp(tail, "noise_pred") == 0)
		snprintf(ref, sizeof(ref), "%s", name);
	else if (strcmp(tail, "noise_pred_pos") == 0 || strcmp(tail, "noise_pred_neg") == 0)
		snprintf(ref, sizeof(ref), "step.%d.noise_pred_%s", step, tail[11] == 'p' ? "cond" : "uncond");
	else
		return;
	u = malloc(n * sizeof(float));
	pd_wan_family.unpack(s->ls, data, u);
	compare(s->file, name, u, n, s->ref, ref, tol);
	free(u);
	s->seen += strcmp(tail, "latents") == 0;
}

static const char *meta(const struct pd_st *st, const char *k, const char *def)
{
	const char *v = pd_st_meta(st, k);

	return v ? v : def;
}

static void one_file(const char *dir, const char *name, struct pd_backend *be, struct pd_dit *d)
{
	char *path = pd_strfmt("%s/%s.safetensors", dir, name), *sdir = pd_strfmt("%s/model/scheduler", dir);
	char *tok = pd_strfmt("%s/model/tokenizer", dir), *te = pd_strfmt("%s/model/text_encoder", dir);
	struct pd_model_paths mp = { .tokenizer = { tok }, .encoder = { te } };
	struct pd_st *st = NULL;
	struct pd_scheduler s;
	struct pd_embeds e;
	struct pd_gen_params p = { 0 };
	struct pd_latent_shape ls;
	struct pd_runner run = pd_runner_local(d);
	struct steps sd = { .ls = &ls, .file = path };
	struct pd_dump dump = { .fn = on_dump, .ctx = &sd, .index = -1 };
	const char *prompt, *negative;
	float g, *latents = NULL, *u = NULL;
	int64_t n;

	if (pd_st_open(&st, path) || pd_scheduler_load(&s, sdir)) {
		PD_CHECK(0, "%s", pd_last_error());
		goto out;
	}
	sd.ref = st;
	prompt = meta(st, "prompt", "");
	g = (float)atof(meta(st, "guidance_scale", "1"));
	negative = g > 1 ? meta(st, "negative_prompt_used", "") : NULL;
	s.shift = atof(meta(st, "flow_shift", "3"));
	p.frames = atoi(meta(st, "num_frames", "1"));
	p.height = atoi(meta(st, "height", "0"));
	p.width = atoi(meta(st, "width", "0"));
	p.steps = atoi(meta(st, "num_inference_steps", "1"));
	p.seed = strtoull(meta(st, "generator_seed", "0"), NULL, 10);
	p.true_cfg_scale = g;
	if (pd_wan_family.latent_shape(&ls, &d->info, p.frames, p.height, p.width) ||
	    pd_dit_encode(&pd_wan_family, &e, NULL, &mp, be, (char *const *)&prompt, 1, negative, 512, 0, 1, 0)) {
		PD_CHECK(0, "%s: %s", path, pd_last_error());
		goto out;
	}
	compare(path, "prompt_embeds", e.prompt, (size_t)(e.txt_len * e.joint_dim), st, "in.prompt_embeds", emb_tol);
	if (negative)
		compare(path, "negative_prompt_embeds", e.neg_prompt, (size_t)(e.txt_len * e.joint_dim), st,
			"in.negative_prompt_embeds", emb_tol);
	PD_CHECK(pd_gen_uses_cfg(&p, &e) == (g > 1), "%s: CFG %s", path, g > 1 ? "off" : "on");
	n = pd_latent_numel(&ls);
	u = malloc((size_t)n * sizeof(float));
	pd_draw_noise(&ls, p.seed, u);
	/* PyTorch's SLEEF log/sin/cos: 1-2 ulp (tests/golden/torch-cpu-rng.md) */
	compare(path, "the seed's noise", u, (size_t)n, st, "latents.init", 1e-6);
	latents = malloc((size_t)(ls.tokens * ls.packed_channels) * sizeof(float));
	for (int64_t i = 0; i < ls.tokens * ls.packed_channels; i++)
		latents[i] = NAN;
	PD_CHECK(pd_denoise(&run, &pd_wan_family, &d->info, &s, &e, &p, NULL, latents, &dump, NULL) == 0, "%s: %s", path,
		 pd_last_error());
	PD_CHECK(sd.seen == p.steps, "%s: %d of %d steps compared", path, sd.seen, p.steps);
	pd_wan_family.unpack(&ls, latents, u);
	compare(path, "latents.final", u, (size_t)n, st, "latents.final", tol);
	pd_embeds_free(&e);
	pd_scheduler_free(&s);
out:
	pd_st_close(st);
	free(latents);
	free(u);
	free(path);
	free(sdir);
	free(tok);
	free(te);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/wan-tiny";
	int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
	char *tr = pd_strfmt("%s/model/transformer", dir);
	static const char *files[] = { "pipeline-cfg-n9-h32w48", "pipeline-nocfg-n5-h48w64",
				       "pipeline-cfg-defaultneg-n5-h32w32" };
	struct pd_backend *be;
	struct pd_dit *d;

	if (bf16) {
		tol = 5e-2;
		emb_tol = 2e-2;
	}
	if (pd_test_backend_new(&be, bf16 ? PD_BF16 : PD_F32, 0) || pd_wan_load_dit(&d, tr, NULL, be, NULL)) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		one_file(dir, files[i], be, d);
	printf("3 WanPipeline runs, %s, worst max|diff|/max|ref| %.2e (limit %g)\n", bf16 ? "bf16" : "f32", worst, tol);
	pd_dit_free(d);
	pd_backend_free(be);
	free(tr);
	return pd_test_report();
}
