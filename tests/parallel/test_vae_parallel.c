/*
 * test_vae_parallel.c - the VAE decoded in bands, one per rank, against the
 * one-process decode (within 1e-5 relative) and the golden images (1e-4).
 *
 *   mpirun --oversubscribe -np N test_vae_parallel GOLDEN_DIR
 *
 * Latent heights are chosen so that most band counts do not divide them
 * (bands differ by a row), and the tiny VAE case has two resnets per up
 * block and 1x1 shortcuts.
 *
 * With WAN_DIR (the golden wan-tiny folder) also Wan2.1's video VAE: the
 * golden decodes of 1, 2 and 3 latent frames (1, 5, 9 frames) and a VAE of
 * another width pdit writes, at latent heights 7 and 5: in bands against
 * one process (1e-5) and the golden decoder output (1e-4).
 *
 *   mpirun -np N test_vae_parallel GOLDEN_DIR [WAN_DIR]
 *
 * The encoder too (an img2img picture's latents on a mesh): each rank's
 * banded moments against one process's (1e-5), on the tiny VAE and the
 * golden dev VAE at latent heights that do not divide.
 *
 * Every case runs twice: f32 convolutions, then bf16 ones (--vae-dtype
 * bf16). bf16 bands equal bf16 on one process as f32's do (the banded
 * decode cuts each convolution into chunks of a few rows too, so chunks
 * are checked as well); bf16 is within 2e-2 of the golden result and
 * differs from f32 (its own kernels ran).
 */
#include "pd_engine_tools.h"
#include "pd_backend_cpu.h"
#include "pd_par_vae.h"
#include "pd_rng.h"
#include "pd_test.h"
#include "pd_tiny.h"
#include "pdit.h"
#include "pd_util.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_ONE 1e-5
#define TOL_GOLDEN 1e-4
#define TOL_GOLDEN_BF16 2e-2
/* bf16 against f32 on the random tiny VAEs: 4 to 24 channels of random
 * weights amplify rounding more than a trained VAE (3.9e-2 measured on
 * Wan's of base 4; the golden ones stay within TOL_GOLDEN_BF16) */
#define TOL_RANDOM_BF16 6e-2

static struct pd_comm *world;
static enum pd_dtype conv_dt = PD_F32;  /* the pass: f32, then bf16 convolutions */
static int fell_back;                   /* the last decode's bf16 convolutions ran in f32 (a CPU
					 * without fast bf16 ones: oneDNN 2.6 before AVX-512) */

/* A backend of THREADS threads for this pass's convolutions; CHUNKS:
 * bf16's row chunks of a few KB (many per convolution). */
static int open_backend(struct pd_backend **be, int chunks, int threads)
{
	int rc;

	if (chunks)
		setenv("PDIT_CONV_CHUNK_KB", "4", 1);
	rc = pd_test_backend_new(be, PD_F32, threads);
	unsetenv("PDIT_CONV_CHUNK_KB");
	if (rc)
		return rc;
	(*be)->conv_compute = conv_dt;
	pd_backend_enter(*be);
	return 0;
}

/* A banded decode BANDED (N values) against ONE's and GOLDEN (may be NULL),
 * where this band holds the result (HAS); elsewhere its poisoned buffer
 * must stay unwritten. */
static void check_bands(const char *what, const struct pd_vae_hooks *hooks, int has, const float *banded,
			const float *one, const float *golden, size_t n)
{
	double e1 = 0, e2 = 0;

	if (has)
		e1 = pd_rel_err(banded, one, n);
	else
		PD_CHECK(isnan(banded[0]), "%s: band %d wrote a result it should not have", what, hooks->band);
	if (golden && has)
		e2 = pd_rel_err(banded, golden, n);
	if (world->rank == 0 && golden)
		printf("  %-44s %s %d bands  vs one process %.2e  vs golden %.2e\n", what, pd_dtype_name(conv_dt),
		       hooks->bands, e1, e2);
	else if (world->rank == 0)
		printf("  %-44s %s %d bands  vs one process %.2e\n", what, pd_dtype_name(conv_dt), hooks->bands, e1);
	PD_CHECK(e1 <= TOL_ONE, "%s: %d bands differ from one process by %.3g", what, hooks->bands, e1);
	PD_CHECK(e2 <= (conv_dt == PD_BF16 ? TOL_GOLDEN_BF16 : TOL_GOLDEN),
		 "%s: %d bands differ from the golden result by %.3g", what, hooks->bands, e2);
}

/* bf16 against f32 on one process: near, and not equal (a bf16 pass whose
 * convolutions fell back to f32 unannounced would test nothing). Where the
 * backend reports that they fell back (FELL), exactly f32's result. */
static void check_bf16_ran(const char *what, const float *bf16, const float *f32, size_t n, double tol, int fell)
{
	double e = pd_rel_err(bf16, f32, n);

	if (world->rank == 0)
		printf("  %-44s bf16 against f32 %.2e%s\n", what, e,
		       fell ? " (no fast bf16 convolutions on this CPU: some or all ran in f32)" : "");
	if (fell && e == 0)
		return;
	PD_CHECK(e > 0 && e <= tol, "%s: bf16 convolutions differ from f32 by %.3g (0: they did not run)",
		 what, e);
}

/* A decode under test: the picture VAE at VDIR of latents Z [C, h, w], or
 * with F > 0 Wan's video VAE of Z [16, F, h, w]. */
struct decode {
	const char *vdir;
	const float *z;
	int F, h, w;
};

/* One decode into OUT on a fresh backend of convolutions in DT (CHUNKS:
 * bf16 chunks of a few rows), on this process alone with two threads (one
 * beside more than one other rank: the cores are two), or with BANDED in
 * bands over the world with one thread a rank, as pdit runs them on two
 * cores (*HOOKS: the bands made); *HAS: this band holds the result. Equal
 * results with 2 ranks say that no kernel's sums depend on the threads. */
static int run_decode(const struct decode *d, enum pd_dtype dt, int chunks, int banded, struct pd_vae_hooks *hooks,
		      float *out, int *has)
{
	struct pd_backend *be = NULL;
	struct pd_vae *v = NULL;
	struct pd_wan_vae *wv = NULL;
	struct pd_vae_par par = { 0 };
	enum pd_dtype saved = conv_dt;
	int rc;

	*hooks = (struct pd_vae_hooks){ 0, 1, NULL, NULL, NULL, NULL, NULL };
	conv_dt = dt;
	rc = open_backend(&be, chunks, banded || world->size > 2 ? 1 : 2);
	conv_dt = saved;
	if (rc)
		return -1;
	if (banded && pd_vae_par_hooks(&par, world, be, d->h, hooks)) {
		pd_backend_free(be);
		return -1;
	}
	if (d->F > 0) {
		rc = pd_wan_vae_load(&wv, d->vdir, be);
		if (!rc) {
			pd_wan_vae_set_hooks(wv, hooks);
			rc = pd_wan_vae_decode(wv, d->z, d->F, d->h, d->w, out, NULL);
			*has = pd_wan_vae_has_video(wv);
		}
	} else {
		rc = pd_vae_load(&v, d->vdir, be);
		if (!rc) {
			pd_vae_set_hooks(v, hooks);
			rc = pd_vae_decode(v, d->z, d->h, d->w, out, NULL);
			*has = pd_vae_has_picture(v);
		}
	}
	fell_back = be->conv_f32_fallbacks > 0;
	/* the bands' buffers are the backend's memory */
	pd_vae_par_free(&par);
	pd_wan_vae_free(wv);
	pd_vae_free(v);
	pd_backend_free(be);
	return rc;
}

/* Decodes D with and without bands and compares; with a golden result,
 * compares that too. N: the result's values. In the bf16 pass also f32's
 * result against bf16's, and the bands run in chunks. */
static void check_decode(const char *what, const struct decode *d, size_t n, const float *golden)
{
	struct pd_vae_hooks hooks;
	float *one = malloc(n * sizeof(float)), *other = malloc(n * sizeof(float));
	int has = 1, ok = one && other;

	if (!ok) {
		PD_CHECK(0, "%s: out of memory", what);
		return;
	}
	/* rank 0 holds the bands' result: it alone decodes on one process
	 * (the others would only oversubscribe the cores meanwhile); a
	 * failure there still joins the bands, so nobody waits for it */
	if (world->rank == 0 && run_decode(d, conv_dt, 0, 0, &hooks, one, &has)) {
		PD_CHECK(0, "%s: one-process decode: %s", what, pd_last_error());
		ok = 0;
	}
	if (world->rank == 0 && ok && conv_dt == PD_BF16) {
		int fell = fell_back;

		if (run_decode(d, PD_F32, 0, 0, &hooks, other, &has)) {
			PD_CHECK(0, "%s: f32 decode: %s", what, pd_last_error());
			ok = 0;
		} else {
			check_bf16_ran(what, one, other, n, golden ? TOL_GOLDEN_BF16 : TOL_RANDOM_BF16, fell);
		}
	}
	pd_poison(other, n);
	if (run_decode(d, conv_dt, conv_dt == PD_BF16, 1, &hooks, other, &has))
		PD_CHECK(0, "%s: banded decode: %s", what, pd_last_error());
	else if (hooks.bands > 0 && ok)
		check_bands(what, &hooks, has, other, one, golden, n);
	free(one);
	free(other);
}

/* The encoder of the VAE at VDIR on IMG [3, H, W], into a new buffer of
 * *N moments: on this process alone, or with BANDED in bands over the
 * world (*HOOKS: the bands made). NULL on failure. */
static float *run_encode(const char *vdir, const float *img, int H, int W, int banded, struct pd_vae_hooks *hooks,
			 size_t *n)
{
	struct pd_backend *be = NULL;
	struct pd_vae *v = NULL;
	struct pd_vae_par par = { 0 };
	float *m = NULL;

	*hooks = (struct pd_vae_hooks){ 0, 1, NULL, NULL, NULL, NULL, NULL };
	if (open_backend(&be, 0, banded || world->size > 2 ? 1 : 2))
		return NULL;
	if (!pd_vae_load(&v, vdir, be) && !pd_vae_load_encoder(v)) {
		const struct pd_vae_config *c = pd_vae_get_config(v);
		int f = pd_vae_scale(c);

		*n = 2 * (size_t)c->latent_channels * (size_t)(H / f) * (size_t)(W / f);
		m = malloc(*n * sizeof(float));
		if (m && (!banded || !pd_vae_par_hooks(&par, world, be, H / f, hooks))) {
			pd_poison(m, *n);
			pd_vae_set_hooks(v, hooks);
			if (pd_vae_encode(v, img, H, W, m)) {
				free(m);
				m = NULL;
			}
		} else {
			free(m);
			m = NULL;
		}
	}
	pd_vae_par_free(&par);
	pd_vae_free(v);
	pd_backend_free(be);
	return m;
}

/* The encoder in bands (an img2img picture's latents on a mesh): a random
 * picture of LH x LW latent pixels' size through the VAE at VDIR, every
 * rank's banded moments (each rank gets them whole) against one process's
 * within TOL_ONE. */
static void check_encode(const char *what, const char *vdir, int lh, int lw)
{
	int H = lh * 8, W = lw * 8;
	float *img = malloc(sizeof(float) * (size_t)(3 * H * W)), *one = NULL, *bands = NULL;
	struct pd_vae_hooks hooks;
	size_t n = 0, n2 = 0;
	struct pd_rng g;
	double e = 1;

	if (!img) {
		PD_CHECK(0, "%s: out of memory", what);
		return;
	}
	pd_rng_seed(&g, (uint64_t)(lh * 31 + lw));
	for (int i = 0; i < 3 * H * W; i++)
		img[i] = 2.0f * (float)pd_rng_u32(&g) / 4294967296.0f - 1.0f;
	one = run_encode(vdir, img, H, W, 0, &hooks, &n);
	bands = run_encode(vdir, img, H, W, 1, &hooks, &n2);
	if (one && bands && n == n2)
		e = pd_rel_err(bands, one, n);
	if (world->rank == 0)
		printf("  %-44s %s %d bands  vs one process %.2e\n", what, pd_dtype_name(conv_dt), hooks.bands, e);
	PD_CHECK(one && bands && e <= TOL_ONE, "%s: encoded in %d bands on rank %d, %.3g from one process (%s)", what,
		 hooks.bands, world->rank, e, one && bands ? "" : pd_last_error());
	free(img);
	free(one);
	free(bands);
}

static void wan_golden_case(const char *dir, const char *file)
{
	char path[1024], vdir[1024];
	struct pd_st *st;
	const struct pd_st_tensor *z, *out;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	snprintf(vdir, sizeof(vdir), "%s/model/vae", dir);
	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s", pd_last_error());
		return;
	}
	z = pd_st_get(st, "vae.z");
	out = pd_st_get(st, "vae.decoder_out");
	PD_CHECK(z && out && z->ndim == 5, "%s: vae.z, vae.decoder_out", file);
	if (z && out && z->ndim == 5) {
		float *zf = malloc((size_t)z->numel * sizeof(float)), *gf = malloc((size_t)out->numel * sizeof(float));

		pd_st_read_f32(z, 0, (size_t)z->numel, zf);
		pd_st_read_f32(out, 0, (size_t)out->numel, gf);
		struct decode d = { vdir, zf, (int)z->shape[2], (int)z->shape[3], (int)z->shape[4] };

		check_decode(file, &d, (size_t)out->numel, gf);
		free(zf);
		free(gf);
	}
	pd_st_close(st);
}

static void golden_case(const char *dir, const char *file, const char *cfg)
{
	char path[1024], vdir[1024];
	struct pd_st *st;
	const struct pd_st_tensor *z, *img;
	float *zf, *gf;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	snprintf(vdir, sizeof(vdir), "%s/vae-%s", dir, cfg);
	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s", pd_last_error());
		return;
	}
	z = pd_st_get(st, "vae.z");
	img = pd_st_get(st, "image.decoded");
	PD_CHECK(z && img && z->ndim == 4, "%s: vae.z, image.decoded", file);
	if (z && img) {
		/* the first image of the file */
		int64_t nz = z->numel / z->shape[0], ni = img->numel / img->shape[0];

		zf = malloc((size_t)nz * sizeof(float));
		gf = malloc((size_t)ni * sizeof(float));
		pd_st_read_f32(z, 0, (size_t)nz, zf);
		pd_st_read_f32(img, 0, (size_t)ni, gf);
		struct decode d = { vdir, zf, 0, (int)z->shape[2], (int)z->shape[3] };

		check_decode(file, &d, (size_t)ni, gf);
		free(zf);
		free(gf);
	}
	pd_st_close(st);
}

/* Every case of this pass; FIRST writes the tiny models into TMP [256]. */
static void run_cases(const char *dir, const char *wan_dir, char *tmp, int first)
{
	char vdir[300];
	struct pd_tiny_opts o;
	int32_t rc = 0;

	golden_case(dir, "pipeline-dev-h64w48.safetensors", "dev");       /* 8 latent rows */
	golden_case(dir, "pipeline-schnell-h48w96.safetensors", "schnell"); /* 6 rows, 2 resnets per block */
	/* a VAE of other widths, at latent heights 13 and 7 */
	pd_tiny_defaults(&o);
	o.vae_blocks[0] = 8;
	o.vae_blocks[1] = 16;
	o.vae_blocks[2] = 24;
	o.vae_blocks[3] = 24;
	o.vae_groups = 4;
	o.vae_layers = 2;
	if (first) {
		if (world->rank == 0)
			rc = mkdtemp(tmp) ? pd_tiny_model(NULL, tmp, &o) : -1;
		world->ops->bcast(world, tmp, 256, 0);
		world->ops->bcast(world, &rc, sizeof(rc), 0);
		PD_CHECK(rc == 0, "writing a tiny model: %s", pd_last_error());
	}
	snprintf(vdir, sizeof(vdir), "%s/vae", tmp);
	for (int hh = 7; rc == 0 && hh <= 13; hh += 6) {
		int ww = 5, C = o.in_channels / 4;
		float *z = malloc(sizeof(float) * (size_t)(C * hh * ww));
		struct pd_rng g;
		char what[64];

		pd_rng_seed(&g, (uint64_t)hh);
		pd_rng_randn(&g, z, (size_t)(C * hh * ww));
		snprintf(what, sizeof(what), "tiny VAE, %d x %d latent", hh, ww);
		/* RGB, four blocks: 8x the latent */
		check_decode(what, &(struct decode){ vdir, z, 0, hh, ww }, (size_t)3 * hh * 8 * ww * 8, NULL);
		free(z);
		/* and its encoder, a picture of that size */
		snprintf(what, sizeof(what), "tiny VAE encoder, %d x %d latent", hh, ww);
		check_encode(what, vdir, hh, ww);
	}
	snprintf(vdir, sizeof(vdir), "%s/vae-dev", dir);
	check_encode("golden VAE encoder (dev), 9 x 6 latent", vdir, 9, 6);
	if (!wan_dir)
		return;
	wan_golden_case(wan_dir, "vae-decode-n1-h48w64.safetensors");
	wan_golden_case(wan_dir, "vae-decode-n5-h32w48.safetensors");
	wan_golden_case(wan_dir, "vae-decode-n9-h32w32.safetensors");
	/* Wan's VAE at another width (base 4), 2 latent frames */
	pd_tiny_model_defaults("wan", 0, &o);
	o.wan_vae_base = 4;
	snprintf(vdir, sizeof(vdir), "%s/wan", tmp);
	if (first) {
		if (world->rank == 0)
			rc = pd_tiny_model("wan", vdir, &o);
		world->ops->bcast(world, &rc, sizeof(rc), 0);
		PD_CHECK(rc == 0, "writing a tiny Wan model: %s", pd_last_error());
	}
	snprintf(vdir, sizeof(vdir), "%s/wan/vae", tmp);
	for (int hh = 5; rc == 0 && hh <= 7; hh += 2) {
		int ww = 3, F = 2;
		float *z = malloc(sizeof(float) * (size_t)(16 * F * hh * ww));
		struct pd_rng g;
		char what[64];

		pd_rng_seed(&g, (uint64_t)hh + 100);
		pd_rng_randn(&g, z, (size_t)(16 * F * hh * ww));
		snprintf(what, sizeof(what), "tiny Wan VAE, %d frames of %d x %d latent", F, hh, ww);
		check_decode(what, &(struct decode){ vdir, z, F, hh, ww }, (size_t)3 * (1 + 4 * (F - 1)) * hh * 8 * ww * 8,
			     NULL);
		free(z);
	}
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/flux-tiny";
	char tmp[256] = "/tmp/pdit-vae-XXXXXX";

	if (pd_comm_world_init(&argc, &argv, &world)) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	pd_log_level = 0;
	if (world->rank == 0)
		printf("world size %d\n", world->size);
	for (int pass = 0; pass < 2; pass++) {
		conv_dt = pass ? PD_BF16 : PD_F32;
		if (world->rank == 0)
			printf("%s convolutions\n", pd_dtype_name(conv_dt));
		run_cases(dir, argc > 2 ? argv[2] : NULL, tmp, pass == 0);
	}
	return pd_test_finish(world, tmp);
}
