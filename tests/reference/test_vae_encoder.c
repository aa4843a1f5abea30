/*
 * test_vae_encoder.c - the AutoencoderKL encoder against diffusers, through
 * the image pipelines' first transformer inputs (tests/golden/edit-tiny):
 *
 *   img2img: first.hidden_states = pack(sigma * noise + (1 - sigma) *
 *            (posterior.sample(generator) - shift) * scale), the posterior's
 *            draws first and the noise's after them from one generator
 *            seeded noise_seed (FluxImg2ImgPipeline.prepare_latents);
 *   kontext: its reference tokens (after the output's) = pack((posterior
 *            .mode() - shift) * scale) of a picture of another size.
 *
 * sigma is the first step's (the transformer's timestep / 1000). The
 * packing is diffusers' _pack_latents, written out here.
 *
 *   test_vae_encoder EDIT_GOLDEN_DIR FLUX_GOLDEN_DIR
 */
#include "pd_rng.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_util.h"
#include "pd_vae.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* diffusers' _pack_latents: [C, h, w] -> [(h/2)(w/2), 4C], (c, 2x2) inner. */
static void pack(const float *lat, int C, int h, int w, float *out)
{
	for (int i = 0; i < h / 2; i++)
		for (int j = 0; j < w / 2; j++)
			for (int c = 0; c < C; c++)
				for (int a = 0; a < 2; a++)
					for (int b = 0; b < 2; b++)
						out[((size_t)(i * (w / 2) + j) * C + c) * 4 + a * 2 + b] =
							lat[((size_t)c * h + 2 * i + a) * w + 2 * j + b];
}

/* VaeImageProcessor: uint8 [H, W, 3] -> float32 [3, H, W] in [-1, 1]. */
static float *picture(const struct pd_st_tensor *t, int H, int W)
{
	const uint8_t *u = t->data;
	float *img = malloc((size_t)3 * H * W * sizeof(float));

	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			for (int c = 0; c < 3; c++)
				img[((size_t)c * H + y) * W + x] = 2.0f * ((float)u[((size_t)y * W + x) * 3 + c] / 255.0f) - 1.0f;
	return img;
}

/* The packed latents of picture NAME ([ph, pw, 3]) through V: sampled
 * with the first draws of G (then the noise of sigma from the next ones)
 * or the mode (G NULL). */
static float *encoded(struct pd_vae *v, const struct pd_st_tensor *t, int ph, int pw, struct pd_rng *g, float sigma)
{
	const struct pd_vae_config *c = pd_vae_get_config(v);
	int f = pd_vae_scale(c), C = c->latent_channels, h = ph / f, w = pw / f;
	size_t n = (size_t)C * h * w;
	float *img = picture(t, ph, pw), *mom = malloc(2 * n * sizeof(float)), *lat = malloc(n * sizeof(float));
	float *eps = g ? malloc(n * sizeof(float)) : NULL, *noise = g ? malloc(n * sizeof(float)) : NULL;
	float *packed = malloc(n * sizeof(float));
	int rc = pd_vae_encode(v, img, ph, pw, mom);

	PD_CHECK(rc == 0, "encode %dx%d: %s", pw, ph, rc ? pd_last_error() : "");
	if (g) {
		pd_rng_randn(g, eps, n);
		pd_rng_randn(g, noise, n);
	}
	pd_vae_posterior_latents(c, mom, n, eps, lat);
	/* FlowMatchEulerDiscreteScheduler.scale_noise */
	for (size_t i = 0; g && i < n; i++)
		lat[i] = sigma * noise[i] + (1.0f - sigma) * lat[i];
	pack(lat, C, h, w, packed);
	free(img);
	free(mom);
	free(lat);
	free(eps);
	free(noise);
	return packed;
}

static void one_case(const char *edit, const char *flux, const char *name)
{
	char path[1024], vdir[1024];
	struct pd_st *st = NULL;
	struct pd_backend *be = NULL;
	struct pd_vae *v = NULL;
	const char *kind, *cfg;
	int H, W;

	snprintf(path, sizeof(path), "%s/%s", edit, name);
	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s: %s", path, pd_last_error());
		return;
	}
	kind = pd_st_meta(st, "kind");
	cfg = pd_st_meta(st, "config");
	H = atoi(pd_st_meta(st, "height"));
	W = atoi(pd_st_meta(st, "width"));
	snprintf(vdir, sizeof(vdir), "%s/vae-%s", flux, cfg);
	PD_CHECK(pd_test_backend_new(&be, PD_F32, 1) == 0, "backend: %s", pd_last_error());
	if (be && pd_vae_load(&v, vdir, be) == 0 && pd_vae_load_encoder(v) == 0) {
		const struct pd_st_tensor *first = pd_st_get(st, "first.hidden_states");
		const struct pd_vae_config *c = pd_vae_get_config(v);
		size_t out_n = (size_t)c->latent_channels * (H / pd_vae_scale(c)) * (W / pd_vae_scale(c));
		float sigma, *packed;

		pd_st_read_f32(pd_st_get(st, "first.timestep"), 0, 1, &sigma);
		if (strcmp(kind, "img2img") == 0) {
			struct pd_rng g;

			pd_rng_seed(&g, strtoull(pd_st_meta(st, "noise_seed"), NULL, 10));
			packed = encoded(v, pd_st_get(st, "in.init_image"), H, W, &g, sigma);
			pd_test_compare(name, "the noised picture latents (first.hidden_states)", packed, out_n, st,
					"first.hidden_states", 0, 1e-4, 0);
		} else {
			int rh = atoi(pd_st_meta(st, "ref_height")), rw = atoi(pd_st_meta(st, "ref_width"));
			size_t ref_n = (size_t)c->latent_channels * (rh / pd_vae_scale(c)) * (rw / pd_vae_scale(c));

			packed = encoded(v, pd_st_get(st, "in.ref_image"), rh, rw, NULL, 0);
			PD_CHECK(first && (size_t)first->numel == out_n + ref_n, "%s: %zu + %zu tokens' values", name, out_n,
				 ref_n);
			pd_test_compare(name, "the reference's mode latents (first.hidden_states after the output's)",
					packed, ref_n, st, "first.hidden_states", out_n, 1e-4, 0);
		}
		free(packed);
	} else {
		PD_CHECK(0, "%s: %s", vdir, pd_last_error());
	}
	pd_vae_free(v);
	if (be)
		be->ops->destroy(be);
	pd_st_close(st);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: test_vae_encoder EDIT_GOLDEN_DIR FLUX_GOLDEN_DIR\n");
		return 2;
	}
	one_case(argv[1], argv[2], "img2img-dev-h64w48.safetensors");
	one_case(argv[1], argv[2], "img2img-schnell-h48w96.safetensors");
	one_case(argv[1], argv[2], "kontext-dev-h64w48.safetensors");
	/* a side that is no multiple of the scale is refused, not read past */
	{
		struct pd_backend *be = NULL;
		struct pd_vae *v = NULL;
		char vdir[1024];
		float img[3 * 20 * 16] = { 0 }, mom[1024];

		snprintf(vdir, sizeof(vdir), "%s/vae-dev", argv[2]);
		if (pd_test_backend_new(&be, PD_F32, 1) == 0 && pd_vae_load(&v, vdir, be) == 0 && pd_vae_load_encoder(v) == 0)
			PD_CHECK(pd_vae_encode(v, img, 20, 16, mom) != 0 && strstr(pd_last_error(), "multiples of"),
				 "a 16x20 picture refused: %s", pd_last_error());
		pd_vae_free(v);
		if (be)
			be->ops->destroy(be);
	}
	return pd_test_report();
}
