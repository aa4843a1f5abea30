/*
 * pd_wan_vae_decode.c - AutoencoderKLWan's decoder run as diffusers runs
 * it (VW = diffusers v0.40 autoencoder_kl_wan.py): one latent frame (a
 * chunk) at a time through causal convolutions with their caches, in row
 * bands over several processes when the hooks say so.
 */
#include "pd_config.h"
#include "pd_dit.h"
#include "pd_safetensors.h"
#include "pd_util.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"
#include "pd_wan_vae_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Decoding                                                               */
/* ---------------------------------------------------------------------- */

void pd_wan_unnormalize(const struct pd_wan_vae *v, const float *lat, int64_t n, float *z)
{
	for (int c = 0; c < v->cfg.z_dim; c++) {
		float inv = 1.0f / v->cfg.std[c];

		for (int64_t i = 0; i < n; i++)
			z[(int64_t)c * n + i] = lat[(int64_t)c * n + i] / inv + v->cfg.mean[c];
	}
}

/* One decode. With bands, a process decodes rows [b0, b0 + bh) of every
 * frame at the latent's size (twice as many at each spatial upsample):
 * each 3x3 convolution's input frame gets a row above and below from the
 * neighbouring bands first (halo), and the causal caches keep frames with
 * those rows, so a band meets exactly what one pass over the whole frame
 * would; the mid attention gathers every band's keys and values of a
 * frame; band 0 collects the frames. */
struct pd_wdec {
	struct pd_wan_vae *v;
	struct pd_backend *be;
	float *buf[5];                  /* each 4 frames of the widest stage (one_chunk: 1) */
	float *hx;                      /* bands: 4 input frames of a convolution with their halo rows */
	float *qkv, *qt, *kt, *vt, *ot; /* the mid attention's, one frame (kt, vt: the whole frame's) */
	float *host;                    /* dumps */
	const struct pd_dump *dump;
	int chunk;                      /* the chunk being decoded */
	const struct pd_vae_hooks *hk;  /* the bands' seam */
	int halo;                       /* 1 with bands: rows a 3x3 convolution takes from its neighbours */
	int one_chunk;                  /* the latents are one frame: one chunk, whose causal padding
					 * (zeros through taps without bias) adds nothing and whose
					 * frames no later chunk reads, so no convolution keeps a cache
					 * (at 1328² the caches were 16.7 GB of the decode's 22) */
	int lat_h;                      /* the whole latent's rows */
};

/* A hook's failure becomes the backend's sticky error. */
static void pd_wdec_hook(struct pd_wdec *d, int rc)
{
	if (rc && !d->be->failed)
		pd_backend_fail(d->be, "%s", pd_last_error());
}

/* Frame X [c][h][w] into HX [c][h + 2][w] with the neighbours' rows. */
static void pd_wdec_halo(struct pd_wdec *d, float *hx, const float *x, int c, int h, int w)
{
	struct pd_backend *be = d->be;

	be->ops->copy2d(be, hx + w, (int64_t)(h + 2) * w, x, (int64_t)h * w, c, (int64_t)h * w);
	if (!be->failed)
		pd_wdec_hook(d, d->hk->halo(d->hk->ctx, be, hx, c, h, w, 1));
}

/* The rows above and below a frame that C's input keeps (bands, 3x3). */
static int pd_cconv_halo(const struct pd_wdec *d, const struct pd_cconv *c)
{
	return c->k == 3 ? d->halo : 0;
}

/* The cache of C sized for H x W frames (with their halo rows), zeroed (the
 * causal padding). */
static int pd_cconv_reset(struct pd_wdec *d, struct pd_cconv *c, int h, int w)
{
	struct pd_backend *be = d->be;
	int64_t hw = (int64_t)(h + 2 * pd_cconv_halo(d, c)) * w;

	if (c->kt < 2)
		return 0;
	if (d->one_chunk) {
		if (c->cache)
			be->ops->free(be, c->cache);
		c->cache = NULL;
		c->cache_hw = 0;
		return 0;
	}
	if (c->cache_hw != hw) {
		if (c->cache)
			be->ops->free(be, c->cache);
		c->cache = pd_backend_alloc(be, (size_t)(2 * c->c_in * hw), "the VAE's frame cache");
		c->cache_hw = 0;
		if (!c->cache)
			return -1;
		c->cache_hw = hw;
	}
	be->ops->fill(be, c->cache, 0.0f, (size_t)(2 * c->c_in * hw));
	return 0;
}

/* Y [T][c_out][h w] = the causal convolution of X [T][c_in][h w] after the
 * frames it was given before; TMP holds one output frame. */
static void pd_cconv_run(struct pd_wdec *d, struct pd_cconv *c, const float *x, int T, int h, int w, float *y,
			 float *tmp)
{
	struct pd_backend *be = d->be;
	int halo = pd_cconv_halo(d, c);
	int64_t hw = (int64_t)h * w, fo = c->c_out * hw, fi = c->c_in * (int64_t)(h + 2 * halo) * w;

	if (halo) {
		for (int t = 0; t < T; t++)
			pd_wdec_halo(d, d->hx + t * fi, x + t * c->c_in * hw, c->c_in, h, w);
		x = d->hx;
	}
	for (int t = 0; t < T; t++) {
		be->ops->conv(be, c->tap[c->kt - 1], x + t * fi, h, w, halo, y + t * fo);
		for (int j = 1; j < c->kt; j++) {
			int s = t - j;
			const float *in = s >= 0 ? x + s * fi : c->cache ? c->cache + (2 + s) * fi : NULL;

			/* no cache: the zero padding times a tap without bias */
			if (!in)
				continue;
			be->ops->conv(be, c->tap[c->kt - 1 - j], in, h, w, halo, tmp);
			be->ops->add(be, y + t * fo, y + t * fo, tmp, (size_t)fo);
		}
	}
	if (c->kt < 2 || !c->cache)
		return;
	/* the last two frames of [cache, x] */
	if (T >= 2) {
		be->ops->copy2d(be, c->cache, fi, x + (T - 2) * fi, fi, 1, fi);
		be->ops->copy2d(be, c->cache + fi, fi, x + (T - 1) * fi, fi, 1, fi);
	} else if (T == 1) {
		be->ops->copy2d(be, c->cache, fi, c->cache + fi, fi, 1, fi);
		be->ops->copy2d(be, c->cache + fi, fi, x, fi, 1, fi);
	}
}

/* Dumps chunk-major [T][C][h w] as NAME [1, C, T, h, w] (diffusers'). */
static void pd_wdec_dump(struct pd_wdec *d, const char *name, const float *x, int T, int C, int h, int w)
{
	int64_t hw = (int64_t)h * w, shape[5] = { 1, C, T, h, w };
	float *f;

	if (!d->dump || d->be->failed)
		return;
	f = pd_malloc((size_t)(T * C * hw) * sizeof(float), "a dump");
	if (!f)
		return;
	d->be->ops->download(d->be, f, x, (size_t)(T * C * hw));
	for (int t = 0; t < T; t++)
		for (int c = 0; c < C; c++)
			memcpy(d->host + ((int64_t)c * T + t) * hw, f + ((int64_t)t * C + c) * hw, (size_t)hw * sizeof(float));
	free(f);
	d->dump->fn(d->dump->ctx, name, d->dump->index, d->host, 5, shape);
}

/* X [T][c_in][hw] -> Y [T][c_out][hw] through residual block R; uses
 * buf[2..4]. */
static void pd_wres_run(struct pd_wdec *d, struct pd_wres *r, const float *x, int T, int h, int w, float *y)
{
	struct pd_backend *be = d->be;
	int64_t hw = (int64_t)h * w;
	float *n = d->buf[2], *a = d->buf[3], *tmp = d->buf[4];

	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, n + t * r->c_in * hw, x + t * r->c_in * hw, r->c_in, hw, r->g1, 1);
	pd_cconv_run(d, &r->conv1, n, T, h, w, a, tmp);
	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, n + t * r->c_out * hw, a + t * r->c_out * hw, r->c_out, hw, r->g2, 1);
	pd_cconv_run(d, &r->conv2, n, T, h, w, y, tmp);
	if (r->shortcut.tap[0]) {
		pd_cconv_run(d, &r->shortcut, x, T, h, w, a, tmp);
		be->ops->add(be, y, y, a, (size_t)(T * r->c_out * hw));
	} else {
		be->ops->add(be, y, y, x, (size_t)(T * r->c_out * hw));
	}
}

/* The mid block's attention (VW:389-431): per frame, one head over the h w
 * positions, in place on X [T][C][hw]; uses buf[2]. With bands the keys and
 * values are the whole frame's (gathered in band order: row order). */
static void pd_wattn_run(struct pd_wdec *d, float *x, int T, int h, int w)
{
	struct pd_backend *be = d->be;
	struct pd_wan_vae *v = d->v;
	const struct pd_vae_hooks *hk = d->hk;
	int C = v->mid_c;
	int64_t hw = (int64_t)h * w, all = hw;
	float *n = d->buf[2], *o = d->buf[2] + C * hw, *k = d->kt, *vv = d->vt;
	size_t n_all[256];

	if (d->halo) {
		all = (int64_t)d->lat_h * w;
		for (int b = 0; b < hk->bands; b++)
			n_all[b] = (size_t)(pd_chunk_len(d->lat_h, hk->bands, b) * w * C);
		/* this band's keys and values after the gathered frame's */
		k = d->kt + all * C;
		vv = d->vt + all * C;
	}
	for (int t = 0; t < T; t++) {
		float *xt = x + t * C * hw;

		be->ops->rms_channels(be, n, xt, C, hw, v->attn_g, 0);
		be->ops->conv(be, v->to_qkv, n, h, w, 0, d->qkv);
		be->ops->transpose(be, d->qt, d->qkv, C, hw);
		be->ops->transpose(be, k, d->qkv + C * hw, C, hw);
		be->ops->transpose(be, vv, d->qkv + 2 * C * hw, C, hw);
		if (d->halo && !be->failed) {
			pd_wdec_hook(d, hk->gather(hk->ctx, k, (size_t)(hw * C), d->kt, n_all));
			if (!be->failed)
				pd_wdec_hook(d, hk->gather(hk->ctx, vv, (size_t)(hw * C), d->vt, n_all));
		}
		be->ops->attention(be, d->ot, C, NULL, d->qt, C, d->kt, C, d->vt, C, hw, all, 1, C,
				   1.0f / sqrtf((float)C));
		be->ops->transpose(be, n, d->ot, hw, C);
		be->ops->conv(be, v->proj, n, h, w, 0, o);
		be->ops->add(be, xt, xt, o, (size_t)(C * hw));
	}
}

/* One chunk: latent frame Z [z][hw] -> OUT frames [T][3][H W]; returns T. */
static int pd_wdec_chunk(struct pd_wdec *d, const float *z, int h, int w, float **out, int *out_h, int *out_w)
{
	struct pd_backend *be = d->be;
	struct pd_wan_vae *v = d->v;
	float *x = d->buf[0], *y = d->buf[1], *sw;
	int T = 1, c;
	char name[96];

#define SWAP() (sw = x, x = y, y = sw)
	pd_cconv_run(d, &v->conv_in, z, 1, h, w, x, d->buf[4]);
	snprintf(name, sizeof(name), "vae.chunk.%d.conv_in", d->chunk);
	pd_wdec_dump(d, name, x, T, v->conv_in.c_out, h, w);
	pd_wres_run(d, &v->mid[0], x, T, h, w, y);
	SWAP();
	pd_wattn_run(d, x, T, h, w);
	pd_wres_run(d, &v->mid[1], x, T, h, w, y);
	SWAP();
	snprintf(name, sizeof(name), "vae.chunk.%d.mid_block", d->chunk);
	pd_wdec_dump(d, name, x, T, v->mid_c, h, w);
	c = v->mid_c;
	for (int j = 0; j < v->cfg.up_blocks; j++) {
		struct pd_wup *u = &v->up[j];
		int64_t hw = (int64_t)h * w;

		for (int r = 0; r < u->n_res; r++) {
			pd_wres_run(d, &u->res[r], x, T, h, w, y);
			SWAP();
			c = u->res[r].c_out;
		}
		if (u->mode == 3 && d->chunk > 0) {
			/* frame t becomes two: channels [0, c) then [c, 2c) (VW:283-299);
			 * the first chunk's frame stays one and is not history */
			pd_cconv_run(d, &u->time_conv, x, T, h, w, y, d->buf[4]);
			snprintf(name, sizeof(name), "vae.chunk.%d.up_blocks.%d.time_conv", d->chunk, j);
			pd_wdec_dump(d, name, y, T, 2 * c, h, w);
			SWAP();
			T *= 2;
		}
		if (u->mode) {
			/* nearest 2x and the 3x3 convolution, frame by frame (bands:
			 * with a row of each neighbour's upsampled frame) */
			int64_t st = (int64_t)(2 * h + 2 * d->halo) * 2 * w;

			for (int t = 0; t < T; t++) {
				be->ops->upsample2x(be, d->buf[2] + d->halo * 2 * w, st, x + t * c * hw, c, h, w);
				if (d->halo && !be->failed)
					pd_wdec_hook(d, d->hk->halo(d->hk->ctx, be, d->buf[2], c, 2 * h, 2 * w, 1));
				be->ops->conv(be, u->resample, d->buf[2], 2 * h, 2 * w, d->halo,
					      y + t * (c / 2) * 4 * hw);
			}
			SWAP();
			c /= 2;
			h *= 2;
			w *= 2;
		}
		snprintf(name, sizeof(name), "vae.chunk.%d.up_blocks.%d", d->chunk, j);
		pd_wdec_dump(d, name, x, T, c, h, w);
	}
	for (int t = 0; t < T; t++)
		be->ops->rms_channels(be, y + t * c * (int64_t)h * w, x + t * c * (int64_t)h * w, c, (int64_t)h * w,
				      v->norm_out_g, 1);
	pd_cconv_run(d, &v->conv_out, y, T, h, w, x, d->buf[4]);
	snprintf(name, sizeof(name), "vae.chunk.%d.conv_out", d->chunk);
	pd_wdec_dump(d, name, x, T, 3, h, w);
#undef SWAP
	*out = x;
	*out_h = h;
	*out_w = w;
	return T;
}

/* The widest stage: channels x positions (x 2 for time_conv's output). */
static int64_t pd_wdec_widest(const struct pd_wan_vae *v, int h, int w)
{
	int64_t hw = (int64_t)h * w, m = (int64_t)v->cfg.z_dim * hw, c = v->mid_c;

#define MAX(a) (m = (a) > m ? (a) : m)
	/* the mid attention's normalised input and output, side by side */
	MAX(2 * c * hw);
	MAX((int64_t)v->conv_in.c_out * hw);
	for (int j = 0; j < v->cfg.up_blocks; j++) {
		const struct pd_wup *u = &v->up[j];

		for (int r = 0; r < u->n_res; r++) {
			MAX((int64_t)u->res[r].c_in * hw);
			MAX((int64_t)u->res[r].c_out * hw);
			c = u->res[r].c_out;
		}
		if (u->mode == 3)
			MAX(2 * c * hw);
		if (u->mode) {
			MAX(c * 4 * hw);
			hw *= 4;
			c /= 2;
		}
	}
#undef MAX
	return m;
}

int pd_wan_vae_decode(struct pd_wan_vae *v, const float *z_host, int F, int h, int w, float *out,
		      const struct pd_dump *dump)
{
	struct pd_backend *be = v->be;
	const struct pd_vae_hooks *hk = &v->hooks;
	struct pd_wdec d = { .v = v, .be = be, .dump = dump, .hk = hk, .lat_h = h };
	int bands = hk->bands > 1 ? hk->bands : 1, band = bands > 1 ? hk->band : 0;
	int b0 = (int)pd_chunk_start(h, bands, band), bh = (int)pd_chunk_len(h, bands, band);
	int64_t hw0 = (int64_t)bh * w, zc = v->cfg.z_dim, C = v->mid_c, sc = v->cfg.spatial;
	int64_t H = (int64_t)h * sc, W = (int64_t)w * sc, frames = 1 + (int64_t)4 * (F - 1), HB = (int64_t)bh * sc;
	int64_t wide;
	float *z = NULL, *pq = NULL, *frame = NULL, *whole = NULL;
	int written = 0, rc = -1;
	size_t n_all[256];

	if (F < 1 || h < 1 || w < 1)
		return pd_errorf("the Wan VAE needs at least one latent frame of one position");
	if (bands > 1 && (bands > h || bands > 256 || !hk->halo || !hk->gather || !hk->collect))
		return pd_errorf("the Wan VAE cannot cut %d latent rows into %d bands", h, bands);
	if (bands > 1 && dump)
		return pd_errorf("the Wan VAE dumps its stages from one process only");
	d.halo = bands > 1;
	d.one_chunk = F == 1;
	/* room for the band's frames with their halo rows at every stage: a
	 * chunk's 4 after the temporal upsamplers, the first chunk's 1 */
	wide = pd_wdec_widest(v, bh + 2 * d.halo, w) * (d.one_chunk ? 1 : 4);
	for (int i = 0; i < 5; i++)
		if (!(d.buf[i] = pd_backend_alloc(be, (size_t)wide, "the VAE's activations")))
			goto out;
	if (d.halo)
		d.hx = pd_backend_alloc(be, (size_t)wide, "the VAE's halo rows");
	d.qkv = pd_backend_alloc(be, (size_t)(3 * C * hw0), "the VAE's attention");
	d.qt = pd_backend_alloc(be, (size_t)(C * hw0), "the VAE's attention");
	/* the whole frame's keys and values, and this band's after them */
	d.kt = pd_backend_alloc(be, (size_t)(C * ((int64_t)h * w + (d.halo ? hw0 : 0))), "the VAE's attention");
	d.vt = pd_backend_alloc(be, (size_t)(C * ((int64_t)h * w + (d.halo ? hw0 : 0))), "the VAE's attention");
	d.ot = pd_backend_alloc(be, (size_t)(C * hw0), "the VAE's attention");
	z = pd_backend_alloc(be, (size_t)(zc * F * hw0), "latents");
	pq = pd_backend_alloc(be, (size_t)(zc * F * hw0), "latents");
	d.host = pd_malloc((size_t)(wide > zc * F * hw0 ? wide : zc * F * hw0) * sizeof(float), "the VAE");
	frame = pd_malloc((size_t)(3 * HB * W) * sizeof(float), "a frame");
	if (d.halo && band == 0)
		whole = pd_malloc((size_t)(3 * H * W) * sizeof(float), "a frame");
	if (pd_backend_check(be) || !d.host || !frame || (d.halo && band == 0 && !whole))
		goto out;
	for (int b = 0; b < bands; b++)
		n_all[b] = (size_t)(3 * pd_chunk_len(h, bands, b) * sc * W);
	/* every cache starts as the causal zero padding */
	{
		int hh = bh, ww = w, rcache = pd_cconv_reset(&d, &v->conv_in, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[0].conv1, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[0].conv2, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[1].conv1, hh, ww) ||
					    pd_cconv_reset(&d, &v->mid[1].conv2, hh, ww);

		for (int j = 0; j < v->cfg.up_blocks && !rcache; j++) {
			struct pd_wup *u = &v->up[j];

			for (int r = 0; r < u->n_res && !rcache; r++)
				rcache = pd_cconv_reset(&d, &u->res[r].conv1, hh, ww) ||
					 pd_cconv_reset(&d, &u->res[r].conv2, hh, ww);
			if (u->mode == 3)
				rcache = rcache || pd_cconv_reset(&d, &u->time_conv, hh, ww);
			if (u->mode) {
				hh *= 2;
				ww *= 2;
			}
		}
		if (rcache || pd_cconv_reset(&d, &v->conv_out, hh, ww))
			goto out;
	}
	/* this band's rows of the latents, frame-major; post_quant_conv on all
	 * of them (VW:1195) */
	for (int t = 0; t < F; t++)
		for (int64_t c = 0; c < zc; c++)
			memcpy(d.host + ((int64_t)t * zc + c) * hw0, z_host + (((int64_t)c * F + t) * h + b0) * w,
			       (size_t)hw0 * sizeof(float));
	be->ops->upload(be, z, d.host, (size_t)(zc * F * hw0));
	pd_cconv_run(&d, &v->post_quant, z, F, bh, w, pq, d.buf[4]);
	pd_wdec_dump(&d, "vae.post_quant_conv", pq, F, (int)zc, bh, w);
	for (d.chunk = 0; d.chunk < F; d.chunk++) {
		float *o;
		int oh, ow, T = pd_wdec_chunk(&d, pq + d.chunk * zc * hw0, bh, w, &o, &oh, &ow);

		if (pd_backend_check(be))
			goto out;
		/* channel-major into OUT [3, frames, H, W] (bands: band 0 collects
		 * each frame, band after band: [3][band rows][W] each) */
		for (int t = 0; t < T && written < frames; t++, written++) {
			be->ops->download(be, frame, o + (int64_t)t * 3 * HB * W, (size_t)(3 * HB * W));
			if (d.halo) {
				if (hk->collect(hk->ctx, frame, (size_t)(3 * HB * W), whole, n_all))
					goto out;
				if (band != 0)
					continue;
				for (int b = 0, row = 0; b < bands; b++) {
					int64_t rb = pd_chunk_len(h, bands, b) * sc;

					for (int c = 0; c < 3; c++)
						memcpy(out + (((int64_t)c * frames + written) * H + row) * W,
						       whole + (3 * row + c * rb) * W, (size_t)(rb * W) * sizeof(float));
					row += (int)rb;
				}
				continue;
			}
			for (int c = 0; c < 3; c++)
				memcpy(out + ((int64_t)c * frames + written) * H * W, frame + (int64_t)c * H * W,
				       (size_t)(H * W) * sizeof(float));
		}
		pd_log(2, "pdit: decoded latent frame %d of %d\n", d.chunk + 1, F);
	}
	rc = written == frames ? 0 : pd_errorf("the Wan VAE made %d frames, not %lld", written, (long long)frames);
out:
	for (int i = 0; i < 5; i++)
		if (d.buf[i])
			be->ops->free(be, d.buf[i]);
	{
		float *bufs[] = { d.qkv, d.qt, d.kt, d.vt, d.ot, z, pq, d.hx };

		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			if (bufs[i])
				be->ops->free(be, bufs[i]);
	}
	free(d.host);
	free(frame);
	free(whole);
	if (rc && !pd_backend_check(be))
		return rc;
	return rc ? -1 : 0;
}

