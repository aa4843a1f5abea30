/*
 * st_compare.c - comparisons for the command-line tests.
 *
 *   st_compare tensors GOT REF TOL [--all | NAME...]
 *       max|got - ref| / max|ref| <= TOL for each NAME (--all: every tensor
 *       of REF except the in.* inputs, each of which GOT must hold)
 *   st_compare png GOT.png REF TENSOR INDEX MAXDIFF   (TENSOR [N, H, W, 3] or [1, F, H, W, 3])
 *       PNG pixels against the uint8 tensor's batch entry INDEX [B,H,W,3]
 *   st_compare pngs A.png B.png MAXDIFF
 *       two pictures of the same size within MAXDIFF per channel (says their
 *       PSNR too)
 *   st_compare meta FILE KEY
 *       prints a metadata value (exit 1 when absent)
 *   st_compare topng FILE TENSOR OUT.png
 *       writes a uint8 tensor [H, W, 3] as a PNG (a golden case's picture in)
 */
#include "pd_png.h"
#include "pd_resize.h"
#include "pd_safetensors.h"
#include "pd_test.h"
#include "pd_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare_one(const struct pd_st *got, const struct pd_st *ref, const char *name, double tol)
{
	const struct pd_st_tensor *g = pd_st_get(got, name), *r = pd_st_get(ref, name);
	float *a, *b;
	double err;

	if (!r) {
		fprintf(stderr, "FAIL %s: not in the reference\n", name);
		return 1;
	}
	if (!g || g->numel != r->numel) {
		fprintf(stderr, "FAIL %s: %s\n", name, g ? "size differs" : "missing");
		return 1;
	}
	a = malloc((size_t)g->numel * sizeof(float) + 1);
	b = malloc((size_t)r->numel * sizeof(float) + 1);
	if (pd_st_read_f32(g, 0, (size_t)g->numel, a) || pd_st_read_f32(r, 0, (size_t)r->numel, b)) {
		fprintf(stderr, "FAIL %s: %s\n", name, pd_last_error());
		free(a);
		free(b);
		return 1;
	}
	err = pd_rel_err(a, b, (size_t)g->numel);
	free(a);
	free(b);
	if (!(err <= tol)) {
		fprintf(stderr, "FAIL %s: relative error %.3g > %g\n", name, err, tol);
		return 1;
	}
	printf("ok   %-50s %.2e\n", name, err);
	return 0;
}

static int cmd_tensors(int argc, char **argv)
{
	struct pd_st *got, *ref;
	double tol = atof(argv[4]);
	int bad = 0, n = 0;

	if (pd_st_open(&got, argv[2]) || pd_st_open(&ref, argv[3])) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	if (argc > 5 && strcmp(argv[5], "--all") == 0) {
		for (int i = 0; i < ref->n_tensors; i++) {
			const char *name = ref->sorted[i]->name;

			if (strncmp(name, "in.", 3) == 0 || !pd_dtype_is_float(ref->sorted[i]->dtype))
				continue;
			bad += compare_one(got, ref, name, tol);
			n++;
		}
	} else {
		for (int i = 5; i < argc; i++, n++)
			bad += compare_one(got, ref, argv[i], tol);
	}
	pd_st_close(got);
	pd_st_close(ref);
	printf("%d tensors compared, %d failed\n", n, bad);
	return bad || n == 0;
}

static int cmd_png(char **argv)
{
	uint8_t *img;
	int w, h, maxd = 0;
	long idx = atol(argv[5]), lim = atol(argv[6]);
	struct pd_st *ref;
	const struct pd_st_tensor *t;

	if (pd_png_read(argv[2], &img, &w, &h) || pd_st_open(&ref, argv[3])) {
		fprintf(stderr, "%s\n", pd_last_error());
		return 1;
	}
	t = pd_st_get(ref, argv[4]);
	/* [N, H, W, 3] pictures, a video's [1, F, H, W, 3] frames, or one
	 * picture [H, W, 3] */
	if (t && t->ndim == 5 && t->shape[0] == 1) {
		static struct pd_st_tensor v;

		v = *t;
		v.ndim = 4;
		memmove(v.shape, v.shape + 1, 4 * sizeof(v.shape[0]));
		t = &v;
	} else if (t && t->ndim == 3) {
		static struct pd_st_tensor v;

		v = *t;
		v.ndim = 4;
		memmove(v.shape + 1, v.shape, 3 * sizeof(v.shape[0]));
		v.shape[0] = 1;
		t = &v;
	}
	if (!t || t->dtype != PD_U8 || t->ndim != 4 || t->shape[1] != h || t->shape[2] != w || t->shape[3] != 3 ||
	    idx >= t->shape[0]) {
		fprintf(stderr, "FAIL %s: %s does not match a %dx%d image\n", argv[2], argv[4], w, h);
		return 1;
	}
	for (size_t k = 0; k < (size_t)w * h * 3; k++) {
		int d = abs((int)img[k] - (int)t->data[(size_t)idx * w * h * 3 + k]);

		maxd = d > maxd ? d : maxd;
	}
	free(img);
	pd_st_close(ref);
	printf("%s: pixels within %d (limit %ld)\n", argv[2], maxd, lim);
	return maxd > lim;
}

static int cmd_pngs(char **argv)
{
	uint8_t *a, *b;
	int wa, ha, wb, hb, maxd = 0;
	long lim = atol(argv[4]);
	double se = 0;

	if (pd_png_read(argv[2], &a, &wa, &ha))
		return fprintf(stderr, "%s\n", pd_last_error()), 1;
	if (pd_png_read(argv[3], &b, &wb, &hb)) {
		free(a);
		return fprintf(stderr, "%s\n", pd_last_error()), 1;
	}
	if (wa != wb || ha != hb) {
		fprintf(stderr, "FAIL: %dx%d vs %dx%d\n", wa, ha, wb, hb);
		free(a);
		free(b);
		return 1;
	}
	for (size_t k = 0; k < (size_t)wa * ha * 3; k++) {
		int d = abs((int)a[k] - (int)b[k]);

		maxd = d > maxd ? d : maxd;
		se += (double)d * d;
	}
	free(a);
	free(b);
	se /= (double)wa * ha * 3;
	printf("%s vs %s: pixels within %d (limit %ld), PSNR %.2f dB\n", argv[2], argv[3], maxd, lim,
	       se > 0 ? 10 * log10(255.0 * 255.0 / se) : INFINITY);
	return maxd > lim;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && strcmp(argv[1], "tensors") == 0)
		return cmd_tensors(argc, argv);
	if (argc == 7 && strcmp(argv[1], "png") == 0)
		return cmd_png(argv);
	if (argc == 5 && strcmp(argv[1], "pngs") == 0)
		return cmd_pngs(argv);
	if (argc == 5 && strcmp(argv[1], "topng") == 0) {
		struct pd_st *st;
		const struct pd_st_tensor *t;
		int rc = 1;

		if (pd_st_open(&st, argv[2]))
			return 1;
		t = pd_st_get(st, argv[3]);
		if (t && t->ndim == 3 && t->shape[2] == 3 && t->nbytes == (size_t)t->numel) {
			rc = pd_png_write(argv[4], t->data, (int)t->shape[1], (int)t->shape[0], NULL, NULL) != 0;
		} else if (t && t->ndim == 2 && t->nbytes == (size_t)t->numel) {
			/* a mask [H, W]: gray, every channel the same */
			size_t n = (size_t)t->numel;
			uint8_t *rgb = malloc(3 * n);

			for (size_t i = 0; rgb && i < 3 * n; i++)
				rgb[i] = t->data[i / 3];
			rc = !rgb || pd_png_write(argv[4], rgb, (int)t->shape[1], (int)t->shape[0], NULL, NULL) != 0;
			free(rgb);
		} else {
			fprintf(stderr, "%s: no uint8 [H, W, 3] or [H, W] tensor %s\n", argv[2], argv[3]);
		}
		pd_st_close(st);
		return rc;
	}
	if (argc == 7 && strcmp(argv[1], "resize") == 0) {
		/* IN.png resized to W x H by pdit's Lanczos (CHANNELS 1: its PIL
		 * "L" gray first, as the mask processors do) into OUT.png */
		uint8_t *rgb = NULL, *gray = NULL, *out = NULL;
		int w, h, ow = atoi(argv[3]), oh = atoi(argv[4]), ch = atoi(argv[5]), rc = 1;

		if (pd_png_read(argv[2], &rgb, &w, &h) || ow < 1 || oh < 1 || (ch != 1 && ch != 3)) {
			fprintf(stderr, "resize: %s\n", pd_last_error());
			free(rgb);
			return 1;
		}
		gray = malloc((size_t)w * h + 1);
		out = malloc((size_t)ow * oh * 3);
		if (gray && out) {
			for (size_t i = 0; i < (size_t)w * h; i++)
				gray[i] = (uint8_t)(((uint32_t)rgb[3 * i] * 19595 + (uint32_t)rgb[3 * i + 1] * 38470 +
						     (uint32_t)rgb[3 * i + 2] * 7471 + 0x8000) >> 16);
			rc = pd_resize_lanczos(ch == 1 ? gray : rgb, w, h, ch, out, ow, oh);
			for (size_t i = (size_t)ow * oh; !rc && ch == 1 && i-- > 0;)
				out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = out[i];
			rc = rc || pd_png_write(argv[6], out, ow, oh, NULL, NULL);
		}
		free(rgb);
		free(gray);
		free(out);
		return rc != 0;
	}
	if (argc == 4 && strcmp(argv[1], "meta") == 0) {
		struct pd_st *st;
		const char *v;

		if (pd_st_open(&st, argv[2]))
			return 1;
		v = pd_st_meta(st, argv[3]);
		if (v)
			printf("%s\n", v);
		pd_st_close(st);
		return v ? 0 : 1;
	}
	fprintf(stderr, "usage: st_compare tensors GOT REF TOL [--all|NAME...] | png GOT REF TENSOR INDEX MAXDIFF | pngs A B MAXDIFF | "
			"meta FILE KEY | resize IN W H CHANNELS OUT\n");
	return 2;
}
