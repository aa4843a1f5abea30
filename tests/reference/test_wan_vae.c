/*
 * test_wan_vae.c - Wan2.1's video decoder against diffusers'
 * AutoencoderKLWan, chunk by chunk.
 *
 *   test_wan_vae WAN_TINY_DIR [f32|bf16]
 *
 * For each vae-decode-*.safetensors (1, 2 and 3 latent frames: 1, 5 and
 * 9 video frames): the un-normalisation equals vae.z bit for bit; the
 * post_quant_conv, every chunk's conv_in, mid_block, up_blocks.j (and
 * their time_conv) and conv_out, and the whole decoder_out are within
 * 1e-5 of the reference, max|a - b| / max|ref| (bf16 products: 2e-2);
 * the frames, clamped and converted as export_to_video does, differ from
 * video.uint8 by at most 1 (a value on a rounding boundary). The output
 * is poisoned first.
 */
#include "pd_backend_cpu.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_test_st.h"
#include "pd_util.h"
#include "pd_wan_vae.h"

#include <string.h>

static double tol = 1e-5, worst;

struct seen {
	const struct pd_st *ref;
	const char *file;
	int n;
};

static void compare(const char *file, const char *what, const float *a, size_t n, const struct pd_st *st,
		    const char *name)
{
	worst = pd_test_compare(file, what, a, n, st, name, 0, tol, worst);
}

static void on_dump(void *ctx, const char *name, int64_t index, const float *data, int ndim, const int64_t *shape)
{
	struct seen *s = ctx;
	int64_t n = 1;

	(void)index;
	for (int i = 0; i < ndim; i++)
		n *= shape[i];
	compare(s->file, name, data, (size_t)n, s->ref, name);
	s->n++;
}

static void one_file(const char *path, struct pd_wan_vae *v)
{
	struct pd_st *st = NULL;
	const struct pd_st_tensor *in, *u8;
	struct seen sn = { .file = path };
	struct pd_dump dump = { .fn = on_dump, .ctx = &sn, .index = -1 };
	int64_t C, F, h, w, frames, H, W, n_lat, n_out;
	float *lat, *z, *out;
	int far = 0, off = 0;

	if (pd_st_open(&st, path)) {
		PD_CHECK(0, "%s", pd_last_error());
		return;
	}
	sn.ref = st;
	in = pd_st_get(st, "in.latents");
	u8 = pd_st_get(st, "video.uint8");
	PD_CHECK(in && in->ndim == 5 && u8, "%s: no in.latents or video.uint8", path);
	if (!in || in->ndim != 5 || !u8) {
		pd_st_close(st);
		return;
	}
	C = in->shape[1], F = in->shape[2], h = in->shape[3], w = in->shape[4];
	frames = 1 + 4 * (F - 1), H = 8 * h, W = 8 * w;
	n_lat = C * F * h * w;
	n_out = 3 * frames * H * W;
	lat = malloc((size_t)n_lat * sizeof(float));
	z = malloc((size_t)n_lat * sizeof(float));
	out = malloc((size_t)n_out * sizeof(float));
	for (int64_t i = 0; i < n_out; i++)
		out[i] = NAN;
	pd_st_read_f32(in, 0, (size_t)n_lat, lat);
	pd_wan_unnormalize(v, lat, F * h * w, z);
	{
		const struct pd_st_tensor *t = pd_st_get(st, "vae.z");
		float *r = malloc((size_t)n_lat * sizeof(float));

		PD_CHECK(t && t->numel == n_lat && !pd_st_read_f32(t, 0, (size_t)n_lat, r) &&
				 !memcmp(r, z, (size_t)n_lat * sizeof(float)),
			 "%s: the un-normalised latents differ from vae.z", path);
		free(r);
	}
	PD_CHECK(pd_wan_vae_decode(v, z, (int)F, (int)h, (int)w, out, &dump) == 0, "%s: %s", path, pd_last_error());
	PD_CHECK(sn.n >= 1 + 4 * (int)F, "%s: %d intermediates compared", path, sn.n);
	compare(path, "decoder_out", out, (size_t)n_out, st, "vae.decoder_out");
	/* clamp, [0, 1], [F, H, W, 3], truncated to 8 bits (export_to_video) */
	for (int64_t f = 0; f < frames; f++)
		for (int64_t y = 0; y < H; y++)
			for (int64_t x = 0; x < W; x++)
				for (int c = 0; c < 3; c++) {
					float d = out[((c * frames + f) * H + y) * W + x];
					float t = d < -1 ? -1 : d > 1 ? 1 : d, f01 = t * 0.5f + 0.5f;
					int mine, ref = ((const uint8_t *)u8->data)[((f * H + y) * W + x) * 3 + c];

					f01 = f01 < 0 ? 0 : f01 > 1 ? 1 : f01;
					mine = (int)(f01 * 255.0f);
					far += abs(mine - ref) > 1;
					off += mine != ref;
				}
	PD_CHECK(far == 0, "%s: %d frame values differ by more than 1 from video.uint8", path, far);
	printf("%s: %lld frames, %d of %lld 8-bit values off by one\n", path, (long long)frames, off,
	       (long long)n_out);
	free(lat);
	free(z);
	free(out);
	pd_st_close(st);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "tests/golden/wan-tiny";
	int bf16 = argc > 2 && strcmp(argv[2], "bf16") == 0;
	char *vdir = pd_strfmt("%s/model/vae", dir);
	struct pd_backend *be;
	struct pd_wan_vae *v;
	char **paths;
	int nf;

	if (bf16)
		tol = 2e-2;
	if (pd_test_backend_new(&be, bf16 ? PD_BF16 : PD_F32, 0) || pd_wan_vae_load(&v, vdir, be)) {
		fprintf(stderr, "setup: %s\n", pd_last_error());
		return 1;
	}
	paths = pd_test_files(dir, "vae-decode-", &nf);
	for (int i = 0; i < nf; i++)
		one_file(paths[i], v);
	pd_test_files_free(paths, nf);
	PD_CHECK(nf == 3, "%d VAE files", nf);
	printf("%d VAE files, %s, worst max|diff|/max|ref| %.2e (limit %g)\n", nf, bf16 ? "bf16" : "f32", worst, tol);
	pd_wan_vae_free(v);
	pd_backend_free(be);
	free(vdir);
	return pd_test_report();
}
