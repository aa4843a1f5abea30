/*
 * pd_vae_kl.c - the AutoencoderKL decoder as a family's VAE kind: loading,
 * the pipeline's scaling and pixel conversion around pd_vae_decode, and the
 * decode's cost for the planner, counted from the config.
 */
#include "pd_vae.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>

int pd_vae_decode_rgb(struct pd_vae *v, float *z, int h, int w, uint8_t *rgb, float *decoded,
		      const struct pd_dump *dump)
{
	const struct pd_vae_config *vc = pd_vae_get_config(v);
	int f = pd_vae_scale(vc);
	size_t nz = (size_t)vc->latent_channels * h * w, npx = (size_t)h * f * w * f;
	float *img;
	float sf = (float)vc->scaling_factor, sh = (float)vc->shift_factor;
	int rc = -1;

	if (vc->out_channels != 3)
		return pd_errorf("the VAE makes %d channels; a PNG needs 3", vc->out_channels);
	img = decoded ? decoded : pd_malloc(3 * npx * sizeof(float), "image");
	if (!img)
		return -1;
	/* PF:959-962: latents / scaling_factor + shift_factor, float32. */
	for (size_t k = 0; k < nz; k++)
		z[k] = z[k] / sf + sh;
	if (dump) {
		int64_t shape[4] = { 1, vc->latent_channels, h, w };

		dump->fn(dump->ctx, "vae.z", dump->index, z, 4, shape);
	}
	if (pd_vae_decode(v, z, h, w, img, dump))
		goto out;
	if (!pd_vae_has_picture(v)) {
		/* a band of a picture decoded in parallel: band 0 has it */
		rc = 0;
		goto out;
	}
	if (dump) {
		int64_t shape[4] = { 1, 3, (int64_t)h * f, (int64_t)w * f };

		dump->fn(dump->ctx, "image.decoded", dump->index, img, 4, shape);
	}
	/* image_processor.py: clamp(x / 2 + 0.5, 0, 1), NHWC, (x * 255).round()
	 * with NumPy's half-to-even rounding. */
	for (size_t k = 0; k < npx; k++) {
		for (int c = 0; c < 3; c++) {
			float x = img[(size_t)c * npx + k] / 2.0f + 0.5f;

			x = x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
			rgb[k * 3 + c] = (uint8_t)rintf(x * 255.0f);
		}
	}
	rc = 0;
out:
	if (img != decoded)
		free(img);
	return rc;
}

static int pd_vae_kl_load(void **vae, const char *path, struct pd_backend *be)
{
	return pd_vae_load((struct pd_vae **)vae, path, be);
}

static void pd_vae_kl_free(void *vae)
{
	pd_vae_free(vae);
}

static int pd_vae_kl_channels(const void *vae)
{
	return pd_vae_get_config(vae)->latent_channels;
}

static int pd_vae_kl_scale(const void *vae)
{
	return pd_vae_scale(pd_vae_get_config(vae));
}

static void pd_vae_kl_set_hooks(void *vae, const struct pd_vae_hooks *hooks)
{
	pd_vae_set_hooks(vae, hooks);
}

static int pd_vae_kl_decode(void *vae, float *z, int frames, int h, int w, uint8_t *rgb)
{
	(void)frames;
	return pd_vae_decode_rgb(vae, z, h, w, rgb, NULL, NULL);
}

/* The decoder's products at every resolution (a picture's, so FRAMES is
 * 1), its halo exchanges when decoded in bands, and its two largest
 * feature maps. */
static int pd_vae_kl_cost(const char *dir, int frames, int lh, int lw, struct pd_vae_cost *out)
{
	/* FLOPs of a k x k convolution of CI to CO channels on an h x w map */
#define PD_CONV(k, ci, co, h, w) (2.0 * (k) * (k) * (ci) * (co) * (double)(h) * (double)(w))
	struct pd_vae_config vc, *c = &vc;
	int n, top, prev, ex = 0;
	double h = lh, wd = lw, f = 0;

	(void)frames;
	if (pd_vae_config_load(&vc, dir))
		return -1;
	n = c->n_blocks;
	top = prev = c->block_out[n - 1];
	/* conv_in, the mid block's two resnets and its attention */
	f += PD_CONV(3, c->latent_channels, top, h, wd) + 4 * PD_CONV(3, top, top, h, wd);
	ex += 5 + 4;
	if (c->mid_attention) {
		f += 4 * 2.0 * h * wd * top * top + 4.0 * (h * wd) * (h * wd) * top;
		ex += 1;
	}
	for (int i = 0; i < n; i++) {
		int ch = c->block_out[n - 1 - i];

		for (int j = 0; j <= c->layers_per_block; j++) {
			int ci = j == 0 ? prev : ch;

			f += PD_CONV(3, ci, ch, h, wd) + PD_CONV(3, ch, ch, h, wd) + (ci != ch ? PD_CONV(1, ci, ch, h, wd) : 0);
			ex += 4;
		}
		if (i < n - 1) {
			h *= 2;
			wd *= 2;
			f += PD_CONV(3, ch, ch, h, wd);
			ex += 1;
		}
		prev = ch;
	}
	f += PD_CONV(3, c->block_out[0], c->out_channels, h, wd);
	ex += 2;
#undef PD_CONV
	out->gflop = f / 1e9;
	out->exchanges = ex;
	/* h x wd: the picture's pixels by now */
	out->map_gb = 2.0 * c->block_out[0] * h * wd * 4.0 / 1e9;
	return 0;
}

/* VaeImageProcessor: uint8 -> float32 / 255, then 2x - 1, channels first;
 * a masked picture as FluxFillPipeline makes it: image * (1 - mask). */
static int pd_vae_kl_encode(void *vae, const uint8_t *rgb, const uint8_t *masked, int H, int W, float *moments)
{
	struct pd_vae *v = vae;
	float *img;
	int rc;

	if (pd_vae_load_encoder(v))
		return -1;
	img = pd_malloc((size_t)3 * H * W * sizeof(float), "the picture");
	if (!img)
		return -1;
	for (int y = 0; y < H; y++)
		for (int x = 0; x < W; x++)
			for (int c = 0; c < 3; c++) {
				float v = 2.0f * ((float)rgb[((size_t)y * W + x) * 3 + c] / 255.0f) - 1.0f;

				/* the product, signed zero and all */
				if (masked)
					v = v * (1.0f - (float)masked[(size_t)y * W + x]);
				img[((size_t)c * H + y) * W + x] = v;
			}
	rc = pd_vae_encode(v, img, H, W, moments);
	free(img);
	return rc;
}

static void pd_vae_kl_posterior(const void *vae, const float *moments, size_t n, const float *eps, float *latents)
{
	pd_vae_posterior_latents(pd_vae_get_config(vae), moments, n, eps, latents);
}

const struct pd_vae_kind pd_vae_kl = {
	.name = "AutoencoderKL",
	.load = pd_vae_kl_load,
	.free = pd_vae_kl_free,
	.channels = pd_vae_kl_channels,
	.scale = pd_vae_kl_scale,
	.set_hooks = pd_vae_kl_set_hooks,
	.decode = pd_vae_kl_decode,
	.cost = pd_vae_kl_cost,
	.encode = pd_vae_kl_encode,
	.posterior = pd_vae_kl_posterior,
};
