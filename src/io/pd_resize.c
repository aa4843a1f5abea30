/*
 * pd_resize.c - pictures resized as diffusers' VaeImageProcessor resizes
 * them: PIL's Image.resize with LANCZOS (Pillow's libImaging/Resample.c,
 * 8 bits a channel): a separable pass over columns then rows, each output
 * pixel a window of a 3-lobe Lanczos kernel stretched by the scale when
 * shrinking, its weights normalised, then made 22-bit fixed point and
 * summed in integers, rounded, clipped. The same doubles and the same
 * integer sums as Pillow, so the same bytes.
 */
#include "pd_resize.h"
#include "pd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pillow's: 32 bits less 8 for the values and 2 for the sum's headroom */
#define PD_PRECISION_BITS (32 - 8 - 2)

static double pd_sinc(double x)
{
	if (x == 0.0)
		return 1.0;
	x = x * M_PI;
	return sin(x) / x;
}

static double pd_lanczos(double x)
{
	/* truncated sinc, 3 lobes */
	if (-3.0 <= x && x < 3.0)
		return pd_sinc(x) * pd_sinc(x / 3);
	return 0.0;
}

/* Each output index's first input index and count (BOUNDS [2 OUT]) and
 * its weights (K [OUT, *KSIZE]) in fixed point, for IN -> OUT. */
static int pd_coeffs(int in, int out, int **bounds_out, int32_t **k_out, int *ksize_out)
{
	double scale = (double)in / out, filterscale = scale < 1.0 ? 1.0 : scale;
	double support = 3.0 * filterscale, ss = 1.0 / filterscale;
	int ksize = (int)ceil(support) * 2 + 1;
	double *w = pd_malloc((size_t)ksize * sizeof(double), "resize weights");
	int *bounds = pd_malloc((size_t)out * 2 * sizeof(int), "resize weights");
	int32_t *k = pd_calloc((size_t)out * (size_t)ksize, sizeof(int32_t), "resize weights");

	if (!w || !bounds || !k) {
		free(w);
		free(bounds);
		free(k);
		return -1;
	}
	for (int xx = 0; xx < out; xx++) {
		double center = (xx + 0.5) * scale, ww = 0.0;
		int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);

		if (xmin < 0)
			xmin = 0;
		if (xmax > in)
			xmax = in;
		xmax -= xmin;
		for (int x = 0; x < xmax; x++) {
			w[x] = pd_lanczos((x + xmin - center + 0.5) * ss);
			ww += w[x];
		}
		for (int x = 0; x < xmax; x++) {
			double v = ww != 0.0 ? w[x] / ww : w[x];

			/* normalize_coeffs_8bpc: half away from zero */
			k[(size_t)xx * ksize + x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PD_PRECISION_BITS))
							  : (int32_t)(0.5 + v * (1 << PD_PRECISION_BITS));
		}
		bounds[2 * xx] = xmin;
		bounds[2 * xx + 1] = xmax;
	}
	free(w);
	*bounds_out = bounds;
	*k_out = k;
	*ksize_out = ksize;
	return 0;
}

static uint8_t pd_clip8(int32_t in)
{
	if (in >= (1 << PD_PRECISION_BITS << 8))
		return 255;
	if (in <= 0)
		return 0;
	return (uint8_t)(in >> PD_PRECISION_BITS);
}

int pd_resize_lanczos(const uint8_t *src, int w, int h, int channels, uint8_t *dst, int ow, int oh)
{
	int *bx = NULL, *by = NULL, kx = 0, ky = 0, y0, y1, rc = -1;
	int32_t *cx = NULL, *cy = NULL;
	uint8_t *tmp = NULL;
	const uint8_t *rows = src;

	if (w < 1 || h < 1 || ow < 1 || oh < 1 || channels < 1 || channels > 4)
		return pd_errorf("cannot resize %dx%d to %dx%d", w, h, ow, oh);
	if (ow == w && oh == h) {
		memcpy(dst, src, (size_t)w * h * channels);
		return 0;
	}
	if (pd_coeffs(w, ow, &bx, &cx, &kx) || pd_coeffs(h, oh, &by, &cy, &ky))
		goto out;
	/* the rows the vertical pass reads */
	y0 = by[0];
	y1 = by[2 * oh - 2] + by[2 * oh - 1];
	if (ow != w) {
		/* horizontal pass over those rows only, as Pillow does */
		tmp = pd_malloc((size_t)ow * (size_t)(y1 - y0) * channels + 1, "the resized picture");
		if (!tmp)
			goto out;
		for (int yy = 0; yy < y1 - y0; yy++)
			for (int xx = 0; xx < ow; xx++) {
				const int32_t *k = cx + (size_t)xx * kx;

				for (int c = 0; c < channels; c++) {
					int32_t ss = 1 << (PD_PRECISION_BITS - 1);

					for (int x = 0; x < bx[2 * xx + 1]; x++)
						ss += src[((size_t)(yy + y0) * w + x + bx[2 * xx]) * channels + c] * k[x];
					tmp[((size_t)yy * ow + xx) * channels + c] = pd_clip8(ss);
				}
			}
		rows = tmp;
		for (int i = 0; i < oh; i++)
			by[2 * i] -= y0;
	}
	if (oh != h) {
		for (int yy = 0; yy < oh; yy++) {
			const int32_t *k = cy + (size_t)yy * ky;

			for (int xx = 0; xx < ow; xx++)
				for (int c = 0; c < channels; c++) {
					int32_t ss = 1 << (PD_PRECISION_BITS - 1);

					for (int y = 0; y < by[2 * yy + 1]; y++)
						ss += rows[((size_t)(y + by[2 * yy]) * ow + xx) * channels + c] * k[y];
					dst[((size_t)yy * ow + xx) * channels + c] = pd_clip8(ss);
				}
		}
	} else {
		memcpy(dst, rows, (size_t)ow * oh * channels);
	}
	rc = 0;
out:
	free(bx);
	free(by);
	free(cx);
	free(cy);
	free(tmp);
	return rc;
}
