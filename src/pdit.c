/*
 * pdit.c - the command line: generate, forward, tiny.
 *
 * The only place that exits: library calls return -1 with a message, which
 * is printed here as one line "pdit: <message>" before a nonzero exit.
 */
#include "pd_args.h"
#include "pd_forward.h"
#include "pd_model.h"
#include "pd_pipeline.h"
#include "pd_png.h"
#include "pd_tiny.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PDIT_VERSION
#define PDIT_VERSION "0.0.0"
#endif

static int pd_fail(void)
{
	fprintf(stderr, "pdit: %s\n", pd_last_error());
	return 1;
}

static int pd_parse_dtype(const char *s, enum pd_dtype *out)
{
	if (strcmp(s, "f32") == 0)
		*out = PD_F32;
	else if (strcmp(s, "bf16") == 0)
		*out = PD_BF16;
	else
		return pd_errorf("--dtype must be f32 or bf16, not '%s'", s);
	return 0;
}

/* "out.png" -> "out-3.png" for image 3 of several; a name holding %d is
 * used as a printf pattern instead. */
static char *pd_output_name(const char *pattern, int64_t b, int64_t batch)
{
	const char *dot, *pct = strstr(pattern, "%d");

	if (pct && !strchr(pct + 2, '%') && !memchr(pattern, '%', (size_t)(pct - pattern)))
		return pd_strfmt(pattern, (int)b);
	if (batch == 1)
		return pd_strdup(pattern);
	dot = strrchr(pattern, '.');
	if (!dot || strchr(dot, '/'))
		return pd_strfmt("%s-%lld", pattern, (long long)b);
	return pd_strfmt("%.*s-%lld%s", (int)(dot - pattern), pattern, (long long)b, dot);
}

/* ======================================================================= */
/* pdit generate                                                           */
/* ======================================================================= */

/* --init-latents FILE: latents.init [B, L, 4C] (packed), or
 * latents.init_unpacked [B, C, h, w] as the golden files hold them. */
static int pd_read_init_latents(const char *path, const struct pd_embeds *e, const struct pd_latent_shape *ls,
				float **out)
{
	int64_t n = e->batch * ls->tokens * ls->packed_channels, per = n / e->batch;
	const struct pd_st_tensor *t;
	struct pd_st *st;
	float *init, *u = NULL;
	int rc = -1;

	if (pd_st_open(&st, path))
		return -1;
	init = pd_malloc((size_t)n * sizeof(float), "initial latents");
	if (!init)
		goto out;
	if ((t = pd_st_get(st, "latents.init")) && t->numel == n) {
		rc = pd_st_read_f32(t, 0, (size_t)n, init);
	} else if ((t = pd_st_get(st, "latents.init_unpacked")) && t->numel == n) {
		u = pd_malloc((size_t)n * sizeof(float), "initial latents");
		rc = !u || pd_st_read_f32(t, 0, (size_t)n, u) ? -1 : 0;
		for (int64_t b = 0; !rc && b < e->batch; b++)
			pd_pack_latents(ls, u + b * per, init + b * per);
	} else {
		pd_errorf("%s: needs latents.init [%lld, %lld, %d] or latents.init_unpacked [%lld, %d, %d, %d]", path,
			  (long long)e->batch, (long long)ls->tokens, ls->packed_channels, (long long)e->batch,
			  ls->channels, ls->h, ls->w);
	}
out:
	free(u);
	pd_st_close(st);
	if (rc)
		free(init);
	else
		*out = init;
	return rc;
}

struct pd_generate_args {
	const char *model, *transformer, *vae, *scheduler;
	const char *embeds, *output, *out_latents, *init_latents, *dtype;
	int height, width, steps, threads, verbose;
	float guidance, true_cfg_scale;
	uint64_t seed;
	int steps_seen;
};

static const char pd_generate_usage[] =
	"usage: pdit generate (--model DIR | --transformer DIR [--vae DIR] [--scheduler DIR])\n"
	"                     --embeds FILE [options]\n"
	"\n"
	"Runs FLUX.1 from prompt embeddings to a PNG, numerically equal to diffusers'\n"
	"FluxPipeline with the same seed. Several prompts in the embeddings file make\n"
	"several images: image b uses seed + b and is written as NAME-b.png (or through a\n"
	"%d in the name).";

static const char pd_generate_examples[] =
	"  pdit tiny tiny-model\n"
	"  pdit generate --model tiny-model --embeds tiny-model/embeds.safetensors -H 256 -W 256 --steps 4 -o out.png\n"
	"  pdit generate --transformer flux/transformer --vae flux/vae --scheduler flux/scheduler \\\n"
	"      --embeds prompts.safetensors --true-cfg-scale 4 -s 7 --dtype bf16 -o cat-%d.png\n";

static int pd_cmd_generate(int argc, char **argv)
{
	struct pd_generate_args a = {
		.output = "output.png", .dtype = "f32", .height = 1024, .width = 1024,
		.guidance = 3.5f, .true_cfg_scale = 1.0f, .seed = 42,
	};
	const struct pd_arg opts[] = {
		{ "--model", 'm', PD_ARG_STRING, &a.model, "DIR", "diffusers FLUX folder (model_index.json, transformer/, vae/, scheduler/)", NULL },
		{ "--transformer", 0, PD_ARG_STRING, &a.transformer, "DIR", "transformer folder (overrides --model's)", NULL },
		{ "--vae", 0, PD_ARG_STRING, &a.vae, "DIR", "VAE folder (overrides --model's)", NULL },
		{ "--scheduler", 0, PD_ARG_STRING, &a.scheduler, "DIR", "scheduler folder (overrides --model's)", NULL },
		{ "--embeds", 0, PD_ARG_STRING, &a.embeds, "FILE", "safetensors with prompt_embeds [B,T,J], pooled_prompt_embeds [B,P], optional negative_*", NULL },
		{ "--height", 'H', PD_ARG_INT, &a.height, "PX", "image height, a multiple of 16 (default 1024)", NULL },
		{ "--width", 'W', PD_ARG_INT, &a.width, "PX", "image width, a multiple of 16 (default 1024)", NULL },
		{ "--steps", 0, PD_ARG_INT, &a.steps, "N", "denoising steps (default 28, or 4 for models without guidance embedding)", &a.steps_seen },
		{ "--guidance", 0, PD_ARG_FLOAT, &a.guidance, "G", "distilled guidance scale (default 3.5; dev-style models)", NULL },
		{ "--true-cfg-scale", 0, PD_ARG_FLOAT, &a.true_cfg_scale, "C", "true classifier-free guidance with the negative embeddings when > 1", NULL },
		{ "--seed", 's', PD_ARG_U64, &a.seed, "S", "seed of image 0 (default 42), as torch.Generator('cpu').manual_seed", NULL },
		{ "--output", 'o', PD_ARG_STRING, &a.output, "FILE", "PNG to write (default output.png)", NULL },
		{ "--out-latents", 0, PD_ARG_STRING, &a.out_latents, "FILE", "also write latents.init and latents.final [B,L,C] (packed)", NULL },
		{ "--init-latents", 0, PD_ARG_STRING, &a.init_latents, "FILE", "start from latents.init [B,L,C] or latents.init_unpacked instead of the seed", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &a.dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_INT, &a.threads, "N", "threads (default: all cores)", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &a.verbose, NULL, "more detail", NULL },
		{ 0 },
	};
	const char *pos[1];
	int n_pos, rc = 1, hr;
	struct pd_model_paths mp = { 0 };
	struct pd_flux_config fc;
	struct pd_embeds e = { 0 };
	struct pd_scheduler sched = { 0 };
	struct pd_backend *be = NULL;
	struct pd_flux *m = NULL;
	struct pd_vae *v = NULL;
	struct pd_latent_shape ls;
	struct pd_gen_params p;
	enum pd_dtype dt;
	float *init = NULL, *lat = NULL;
	double t0;

	hr = pd_args_parse("generate", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_generate_usage, opts, pd_generate_examples);
		return 0;
	}
	if (hr)
		return pd_fail();
	if (a.verbose)
		pd_log_level = 2;
	/* Everything a user can get wrong is checked before any weight is read. */
	if (pd_parse_dtype(a.dtype, &dt))
		return pd_fail();
	if (a.height < 16 || a.width < 16 || a.height % 16 || a.width % 16) {
		pd_errorf("-H/--height and -W/--width must be positive multiples of 16 (got %dx%d)", a.height, a.width);
		return pd_fail();
	}
	if (a.steps_seen && a.steps < 1) {
		pd_errorf("--steps must be at least 1 (got %d)", a.steps);
		return pd_fail();
	}
	if (a.true_cfg_scale < 0) {
		pd_errorf("--true-cfg-scale must not be negative");
		return pd_fail();
	}
	if (!a.embeds) {
		pd_errorf("generate needs --embeds FILE (prompt embeddings; see pdit generate --help)");
		return pd_fail();
	}
	if (pd_model_paths_resolve(&mp, a.model, a.transformer, a.vae, a.scheduler) ||
	    pd_flux_config_load(&fc, mp.transformer) || pd_embeds_load(&e, a.embeds) ||
	    pd_embeds_check(&e, &fc, a.embeds) || pd_latent_shape(&ls, &fc, a.height, a.width))
		goto fail;
	if (!mp.vae && !a.out_latents) {
		pd_errorf("no VAE to decode with: give --vae DIR (or --out-latents FILE to keep only latents)");
		goto fail;
	}
	p.height = a.height;
	p.width = a.width;
	p.steps = a.steps_seen ? a.steps : fc.guidance_embeds ? 28 : 4;
	p.guidance = a.guidance;
	p.true_cfg_scale = a.true_cfg_scale;
	p.seed = a.seed;
	if (a.true_cfg_scale > 1 && !e.neg_prompt) {
		/* diffusers silently ignores the scale here; say so instead. */
		pd_errorf("--true-cfg-scale %g needs negative_prompt_embeds and negative_pooled_prompt_embeds in %s "
			  "(diffusers would silently run without true CFG)", a.true_cfg_scale, a.embeds);
		goto fail;
	}
	if (mp.scheduler && pd_scheduler_load(&sched, mp.scheduler))
		goto fail;
	if (!mp.scheduler)
		pd_scheduler_default(&sched, fc.guidance_embeds);
	if (a.init_latents && pd_read_init_latents(a.init_latents, &e, &ls, &init))
		goto fail;
	lat = pd_malloc((size_t)(e.batch * ls.tokens * ls.packed_channels) * sizeof(float), "latents");
	if (!lat)
		goto fail;

	/* Load everything before computing anything: a broken VAE must not
	 * surface after minutes of denoising. */
	t0 = pd_now();
	if (pd_backend_cpu_new(&be, dt, a.threads) || pd_flux_load(&m, mp.transformer, be) ||
	    (mp.vae && pd_vae_load(&v, mp.vae, be)))
		goto fail;
	if (v && pd_vae_get_config(v)->latent_channels != ls.channels) {
		pd_errorf("%s: the VAE has %d latent channels but the transformer makes %d", mp.vae,
			  pd_vae_get_config(v)->latent_channels, ls.channels);
		goto fail;
	}
	pd_log(2, "pdit: models loaded in %.2f s (%d threads, %s)\n", pd_now() - t0, be->threads, a.dtype);
	if (!mp.scheduler)
		pd_log(1, "pdit: note: no scheduler folder; using FLUX.1-%s's settings\n",
		       fc.guidance_embeds ? "dev" : "schnell");
	if (e.neg_prompt && a.true_cfg_scale <= 1)
		pd_log(1, "pdit: note: %s has negative embeddings, unused because --true-cfg-scale is %g (<= 1)\n",
		       a.embeds, a.true_cfg_scale);
	if (!fc.guidance_embeds && a.guidance != 3.5f)
		pd_log(1, "pdit: note: this transformer has no guidance embedding; --guidance is ignored\n");
	pd_log(1, "pdit: %lld image%s %dx%d, %d steps, seed %llu%s\n", (long long)e.batch, e.batch > 1 ? "s" : "",
	       a.width, a.height, p.steps, (unsigned long long)a.seed,
	       pd_gen_uses_cfg(&p, &e) ? ", true CFG" : "");
	if (pd_denoise(m, &sched, &e, &p, init, lat, NULL))
		goto fail;
	if (a.out_latents) {
		struct pd_st_writer *w = pd_st_writer_new();
		int64_t shape[3] = { e.batch, ls.tokens, ls.packed_channels };
		float *first = init;
		int64_t n = e.batch * ls.tokens * ls.packed_channels;

		if (!first) {
			/* redraw the noise rather than keep a copy through the loop */
			first = pd_malloc((size_t)n * sizeof(float), "latents");
			for (int64_t b = 0; first && b < e.batch; b++) {
				float *u = pd_malloc((size_t)ls.channels * ls.h * ls.w * sizeof(float), "noise");

				if (!u) {
					free(first);
					first = NULL;
					break;
				}
				pd_draw_noise(&ls, a.seed + (uint64_t)b, u);
				pd_pack_latents(&ls, u, first + b * n / e.batch);
				free(u);
			}
		}
		hr = !w || !first || pd_st_writer_add(w, "latents.init", PD_F32, 3, shape, first) ||
		     pd_st_writer_add(w, "latents.final", PD_F32, 3, shape, lat) ||
		     pd_st_writer_meta(w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(w, a.out_latents);
		if (first != init)
			free(first);
		pd_st_writer_free(w);
		if (hr)
			goto fail;
		pd_log(1, "pdit: wrote %s\n", a.out_latents);
	}
	if (v) {
		int f;
		size_t npx;
		uint8_t *rgb;

		pd_flux_free(m);	/* the transformer's memory goes before decoding */
		m = NULL;
		f = pd_vae_scale(pd_vae_get_config(v));
		npx = (size_t)ls.h * f * ls.w * f;
		rgb = pd_malloc(npx * 3, "image");
		if (!rgb)
			goto fail;
		for (int64_t b = 0; b < e.batch; b++) {
			char *name = pd_output_name(a.output, b, e.batch);
			char *text = pd_strfmt("pdit %s; embeds: %s (prompt %lld); seed: %llu; steps: %d; guidance: %g; "
					       "true_cfg_scale: %g; size: %dx%d; model: %s; dtype: %s",
					       PDIT_VERSION, a.embeds, (long long)b, (unsigned long long)(a.seed + b),
					       p.steps, a.guidance, a.true_cfg_scale, a.width, a.height,
					       mp.root ? mp.root : mp.transformer, a.dtype);

			t0 = pd_now();
			hr = !name || !text ||
			     pd_decode_image(v, &ls, lat + b * ls.tokens * ls.packed_channels, rgb, NULL, NULL) ||
			     pd_png_write(name, rgb, ls.w * f, ls.h * f, "parameters", text);
			if (!hr)
				pd_log(1, "pdit: wrote %s (decoded in %.2f s)\n", name, pd_now() - t0);
			free(name);
			free(text);
			if (hr) {
				free(rgb);
				goto fail;
			}
		}
		free(rgb);
	}
	rc = 0;
	goto out;
fail:
	rc = pd_fail();
out:
	free(init);
	free(lat);
	pd_vae_free(v);
	pd_flux_free(m);
	pd_backend_free(be);
	pd_scheduler_free(&sched);
	pd_embeds_free(&e);
	pd_model_paths_free(&mp);
	return rc;
}

/* ======================================================================= */
/* pdit forward                                                            */
/* ======================================================================= */

/* Collects dumped tensors; per-image ones are stacked over the batch. */
struct pd_dump_store {
	struct pd_st_writer *w;         /* the output file */
	int64_t batch;                  /* images */
	int n;                          /* stored entries */
	struct pd_dump_entry {
		char *name;
		int ndim;
		int64_t shape[8];
		float *data;
	} *e;
	int failed;
};

static void pd_store_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim,
			  const int64_t *shape)
{
	struct pd_dump_store *s = ctx;
	struct pd_dump_entry *x = NULL;
	int64_t n = 1;

	for (int i = 0; i < ndim; i++)
		n *= shape[i];
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->e[i].name, name) == 0)
			x = &s->e[i];
	if (!x) {
		struct pd_dump_entry *ne = realloc(s->e, sizeof(*ne) * (size_t)(s->n + 1));

		if (!ne) {
			s->failed = 1;
			return;
		}
		s->e = ne;
		x = &s->e[s->n++];
		x->name = strdup(name);
		x->ndim = ndim;
		memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
		if (index >= 0)
			x->shape[0] = s->batch;
		x->data = calloc((size_t)(index >= 0 ? n * s->batch : n), sizeof(float));
		if (!x->name || !x->data) {
			s->failed = 1;
			return;
		}
	} else if (index < 0) {
		return;	/* batch-independent: the first image's copy stands */
	}
	memcpy(x->data + (index >= 0 ? index * n : 0), data, (size_t)n * sizeof(float));
}

static const char pd_forward_usage[] =
	"usage: pdit forward --transformer DIR --inputs FILE --out FILE [--dump] [options]\n"
	"\n"
	"One transformer call, for tests and debugging. The inputs file holds the golden\n"
	"names in.hidden_states [B,L,C], in.encoder_hidden_states [B,T,J],\n"
	"in.pooled_projections [B,P], in.timestep, in.guidance (models with guidance\n"
	"embeddings), in.img_ids [L,3], in.txt_ids [T,3]. The output holds out.sample\n"
	"[B,L,C]; --dump adds every intermediate under the golden names\n"
	"(emb.temb, double.{i}.out.hidden_states, single.{j}.attn.sdpa_out, ...), so a\n"
	"mismatch names the first wrong layer.";

static const char pd_forward_examples[] =
	"  pdit forward --transformer tests/golden/flux-tiny/transformer-dev \\\n"
	"      --inputs tests/golden/flux-tiny/forward-dev-h64w48.safetensors --out out.safetensors --dump\n";

static int pd_cmd_forward(int argc, char **argv)
{
	const char *tdir = NULL, *inputs = NULL, *outp = NULL, *dtype = "f32";
	int dump_all = 0, threads = 0, verbose = 0, n_pos, hr, rc = 1;
	const struct pd_arg opts[] = {
		{ "--transformer", 0, PD_ARG_STRING, &tdir, "DIR", "transformer folder", NULL },
		{ "--inputs", 0, PD_ARG_STRING, &inputs, "FILE", "safetensors with the in.* tensors", NULL },
		{ "--out", 'o', PD_ARG_STRING, &outp, "FILE", "safetensors to write (out.sample, and the dump)", NULL },
		{ "--dump", 0, PD_ARG_FLAG, &dump_all, NULL, "also write every intermediate", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &dtype, "f32|bf16", "precision of matrix products (default f32)", NULL },
		{ "--threads", 't', PD_ARG_INT, &threads, "N", "threads (default: all cores)", NULL },
		{ "--verbose", 'v', PD_ARG_FLAG, &verbose, NULL, "more detail", NULL },
		{ 0 },
	};
	const char *pos[1];
	struct pd_backend *be = NULL;
	struct pd_flux *m = NULL;
	struct pd_st *st = NULL;
	struct pd_forward_inputs in = { 0 };
	struct pd_dump_store store = { 0 };
	struct pd_dump dump = { pd_store_dump, &store, 0 };
	const struct pd_flux_config *cfg;
	float *out = NULL;
	enum pd_dtype dt;

	hr = pd_args_parse("forward", opts, argc, argv, 2, pos, 0, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_forward_usage, opts, pd_forward_examples);
		return 0;
	}
	if (hr)
		return pd_fail();
	if (verbose)
		pd_log_level = 2;
	if (!tdir || !inputs || !outp) {
		pd_errorf("forward needs --transformer DIR, --inputs FILE and --out FILE");
		return pd_fail();
	}
	if (pd_parse_dtype(dtype, &dt) || pd_st_open(&st, inputs) || pd_backend_cpu_new(&be, dt, threads) ||
	    pd_flux_load(&m, tdir, be))
		goto fail;
	cfg = pd_flux_get_config(m);
	if (pd_forward_inputs_read(&in, st, cfg))
		goto fail;
	out = pd_malloc((size_t)(in.batch * in.img_len * cfg->out_channels) * sizeof(float), "output");
	store.w = pd_st_writer_new();
	store.batch = in.batch;
	if (!out || !store.w)
		goto fail;
	for (int64_t b = 0; b < in.batch; b++) {
		struct pd_flux_input x = pd_forward_inputs_image(&in, cfg, b);

		dump.index = b;
		if (pd_flux_forward(m, &x, out + b * in.img_len * cfg->out_channels, dump_all ? &dump : NULL))
			goto fail;
	}
	if (store.failed) {
		pd_errorf("out of memory storing the dump");
		goto fail;
	}
	{
		int64_t shape[3] = { in.batch, in.img_len, cfg->out_channels };

		if (pd_st_writer_add(store.w, "out.sample", PD_F32, 3, shape, out))
			goto fail;
	}
	for (int i = 0; i < store.n; i++)
		if (pd_st_writer_add(store.w, store.e[i].name, PD_F32, store.e[i].ndim, store.e[i].shape,
				     store.e[i].data))
			goto fail;
	if (pd_st_writer_meta(store.w, "pdit_version", PDIT_VERSION) || pd_st_writer_save(store.w, outp))
		goto fail;
	pd_log(1, "pdit: wrote %s (%d tensors)\n", outp, store.n + 1);
	rc = 0;
	goto out;
fail:
	rc = pd_fail();
out:
	for (int i = 0; i < store.n; i++) {
		free(store.e[i].name);
		free(store.e[i].data);
	}
	free(store.e);
	pd_st_writer_free(store.w);
	free(out);
	pd_forward_inputs_free(&in);
	pd_flux_free(m);
	pd_backend_free(be);
	pd_st_close(st);
	return rc;
}

/* ======================================================================= */
/* pdit tiny                                                               */
/* ======================================================================= */

static const char pd_tiny_usage[] =
	"usage: pdit tiny DIR [options]\n"
	"\n"
	"Writes a deterministic random FLUX model folder (model_index.json, transformer/,\n"
	"vae/, scheduler/) and DIR/embeds.safetensors (random prompt embeddings, with\n"
	"negatives), so pdit runs end to end with nothing to download. The pictures are\n"
	"noise: the weights are random.";

static const char pd_tiny_examples[] =
	"  pdit tiny tiny-model\n"
	"  pdit tiny tiny-6heads --heads 6 --head-dim 16 --layers 1 --single-layers 2\n"
	"  pdit tiny flux-width --flux-width      # FLUX.1's widths, 2 + 4 blocks, bf16 (about 2.5 GB)\n";

static int pd_cmd_tiny(int argc, char **argv)
{
	struct pd_tiny_opts o;
	const char *dtype = NULL, *vae_ch = NULL, *pos[1];
	int flux_width = 0, no_guidance = 0, n_pos, hr;
	struct pd_tiny_opts d;
	const struct pd_arg opts[] = {
		{ "--flux-width", 0, PD_ARG_FLAG, &flux_width, NULL, "FLUX.1's real widths with 2 double and 4 single blocks, bf16", NULL },
		{ "--seed", 's', PD_ARG_U64, &d.seed, "S", "seed of every tensor (default 1)", NULL },
		{ "--heads", 0, PD_ARG_INT, &d.heads, "N", "attention heads (default 4)", NULL },
		{ "--head-dim", 0, PD_ARG_INT, &d.head_dim, "N", "channels per head (default 16)", NULL },
		{ "--layers", 0, PD_ARG_INT, &d.layers, "N", "double-stream blocks (default 2)", NULL },
		{ "--single-layers", 0, PD_ARG_INT, &d.single_layers, "N", "single-stream blocks (default 2)", NULL },
		{ "--in-channels", 0, PD_ARG_INT, &d.in_channels, "N", "packed latent channels, 4 x VAE latent channels (default 64)", NULL },
		{ "--joint-dim", 0, PD_ARG_INT, &d.joint_dim, "N", "prompt embedding width (default 64)", NULL },
		{ "--pooled-dim", 0, PD_ARG_INT, &d.pooled_dim, "N", "pooled embedding width (default 32)", NULL },
		{ "--no-guidance", 0, PD_ARG_FLAG, &no_guidance, NULL, "schnell-style: no guidance embedder, unshifted scheduler", NULL },
		{ "--dtype", 0, PD_ARG_STRING, &dtype, "f32|bf16|f16", "weights on disk (default f32; bf16 with --flux-width)", NULL },
		{ "--vae-channels", 0, PD_ARG_STRING, &vae_ch, "A,B,C,D", "VAE block_out_channels (default 16,32,32,32)", NULL },
		{ "--vae-layers", 0, PD_ARG_INT, &d.vae_layers, "N", "VAE layers_per_block (default 1)", NULL },
		{ "--vae-groups", 0, PD_ARG_INT, &d.vae_groups, "N", "VAE norm_num_groups (default 8)", NULL },
		{ "--batch", 0, PD_ARG_INT, &d.batch, "N", "prompts in embeds.safetensors (default 1)", NULL },
		{ "--txt-len", 0, PD_ARG_INT, &d.txt_len, "N", "text tokens in embeds.safetensors (default 16)", NULL },
		{ 0 },
	};

	/* Options apply on top of the preset, so parse twice: once to learn
	 * the preset, once more onto it. */
	pd_tiny_defaults(&d);
	hr = pd_args_parse("tiny", opts, argc, argv, 2, pos, 1, &n_pos);
	if (hr == 1) {
		pd_args_help(pd_tiny_usage, opts, pd_tiny_examples);
		return 0;
	}
	if (hr)
		return pd_fail();
	if (flux_width)
		pd_tiny_flux_width(&d);
	else
		pd_tiny_defaults(&d);
	pd_args_parse("tiny", opts, argc, argv, 2, pos, 1, &n_pos);
	o = d;
	if (n_pos != 1) {
		pd_errorf("tiny needs the folder to write: pdit tiny DIR");
		return pd_fail();
	}
	if (no_guidance)
		o.guidance = 0;
	if (vae_ch && sscanf(vae_ch, "%d,%d,%d,%d", &o.vae_blocks[0], &o.vae_blocks[1], &o.vae_blocks[2],
			     &o.vae_blocks[3]) != 4) {
		pd_errorf("--vae-channels needs four numbers, like 16,32,32,32");
		return pd_fail();
	}
	if (o.vae_layers < 0 || o.vae_layers > 8 || o.vae_groups < 1) {
		pd_errorf("--vae-layers must be 0..8 and --vae-groups at least 1");
		return pd_fail();
	}
	if (dtype) {
		if (strcmp(dtype, "f32") == 0)
			o.dtype = PD_F32;
		else if (strcmp(dtype, "bf16") == 0)
			o.dtype = PD_BF16;
		else if (strcmp(dtype, "f16") == 0)
			o.dtype = PD_F16;
		else {
			pd_errorf("--dtype must be f32, bf16 or f16, not '%s'", dtype);
			return pd_fail();
		}
	}
	if (o.heads < 1 || o.head_dim < 4 || o.head_dim % 2 || o.layers < 0 || o.single_layers < 0 ||
	    o.in_channels < 4 || o.in_channels % 4 || o.joint_dim < 1 || o.pooled_dim < 1 || o.batch < 1 ||
	    o.txt_len < 1) {
		pd_errorf("tiny: sizes must be positive (--head-dim even and >= 4, --in-channels a multiple of 4)");
		return pd_fail();
	}
	if (pd_tiny_write(pos[0], &o))
		return pd_fail();
	pd_log(1, "pdit: wrote %s (%d heads x %d, %d + %d blocks)\n", pos[0], o.heads, o.head_dim, o.layers,
	       o.single_layers);
	return 0;
}

/* ======================================================================= */
/* main                                                                    */
/* ======================================================================= */

static void pd_usage(FILE *f)
{
	fprintf(f,
		"pdit %s - FLUX.1 diffusion transformers in one C program\n"
		"\n"
		"usage: pdit COMMAND [options]     (pdit COMMAND --help for each)\n"
		"\n"
		"commands:\n"
		"  generate   prompt embeddings -> PNG, equal to diffusers' FluxPipeline\n"
		"  forward    one transformer call on golden-style inputs (tests, debugging)\n"
		"  tiny       write a small random model folder to try pdit with\n"
		"\n"
		"example:\n"
		"  pdit tiny tiny-model && pdit generate --model tiny-model \\\n"
		"      --embeds tiny-model/embeds.safetensors -H 256 -W 256 --steps 4 -o out.png\n",
		PDIT_VERSION);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		pd_usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "generate") == 0)
		return pd_cmd_generate(argc, argv);
	if (strcmp(argv[1], "forward") == 0)
		return pd_cmd_forward(argc, argv);
	if (strcmp(argv[1], "tiny") == 0)
		return pd_cmd_tiny(argc, argv);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		pd_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		printf("pdit %s\n", PDIT_VERSION);
		return 0;
	}
	fprintf(stderr, "pdit: unknown command '%s' (try pdit --help)\n", argv[1]);
	return 2;
}
