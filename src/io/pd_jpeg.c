/*
 * pd_jpeg.c - JPEG pictures in (libjpeg-turbo): decoded to 8-bit RGB with
 * libjpeg's defaults (the accurate integer IDCT, fancy upsampling), which
 * are Pillow's, so a JPEG reaches the VAE as diffusers' load_image gives
 * it, turned as its EXIF orientation says (load_image's exif_transpose).
 * libjpeg's fatal errors come back here through a jump, never exit; a
 * progressive JPEG of more scans than any encoder writes is refused before
 * it spends minutes (libjpeg-turbo's advice for untrusted files).
 */
#include "pd_png.h"
#include "pd_util.h"

#include <jpeglib.h>
#include <jerror.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_jpeg_err {
	struct jpeg_error_mgr mgr;      /* libjpeg's (must stay first) */
	jmp_buf jump;                   /* where a fatal error returns */
	char msg[JMSG_LENGTH_MAX];      /* its message */
};

static void pd_jpeg_fail(j_common_ptr c)
{
	struct pd_jpeg_err *e = (struct pd_jpeg_err *)c->err;

	c->err->format_message(c, e->msg);
	longjmp(e->jump, 1);
}

/* warnings stay quiet, but a stream that ends early is an error, as
 * Pillow makes it ("image file is truncated") */
static void pd_jpeg_quiet(j_common_ptr c, int level)
{
	if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
		pd_jpeg_fail(c);
}

/* Scans a progressive JPEG may have: encoders write about ten. */
#define PD_JPEG_MAX_SCANS 256

struct pd_jpeg_progress {
	struct jpeg_progress_mgr mgr;   /* libjpeg's (must stay first) */
	struct pd_jpeg_err *err;        /* where a refusal goes */
};

static void pd_jpeg_scans(j_common_ptr c)
{
	j_decompress_ptr d = (j_decompress_ptr)c;
	struct pd_jpeg_progress *p = (struct pd_jpeg_progress *)c->progress;

	if (d->input_scan_number > PD_JPEG_MAX_SCANS) {
		snprintf(p->err->msg, sizeof(p->err->msg), "more than %d progressive scans", PD_JPEG_MAX_SCANS);
		longjmp(p->err->jump, 1);
	}
}

/* The EXIF orientation (1..8) of a JPEG's APP1 marker M, or 1. */
static int pd_jpeg_orientation(const jpeg_saved_marker_ptr markers)
{
	for (jpeg_saved_marker_ptr m = markers; m; m = m->next) {
		const uint8_t *t = m->data + 6;
		size_t n = m->data_length >= 6 ? m->data_length - 6 : 0;
		int le;
		uint32_t ifd, count;

		if (m->marker != JPEG_APP0 + 1 || n < 8 || memcmp(m->data, "Exif\0\0", 6))
			continue;
		/* a TIFF header: byte order, 42, the first directory's offset */
		le = t[0] == 'I';
		if (!(le ? t[1] == 'I' : t[0] == 'M' && t[1] == 'M'))
			continue;
#define PD_U16(p) (le ? (uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 : (uint32_t)(p)[0] << 8 | (uint32_t)(p)[1])
#define PD_U32(p) (le ? PD_U16(p) | PD_U16((p) + 2) << 16 : PD_U16(p) << 16 | PD_U16((p) + 2))
		ifd = PD_U32(t + 4);
		if (ifd > n - 2)
			continue;
		count = PD_U16(t + ifd);
		for (uint32_t i = 0; i < count && ifd + 2 + 12 * (i + 1) <= n; i++) {
			const uint8_t *e = t + ifd + 2 + 12 * i;

			/* Orientation: a SHORT, its value in the entry */
			if (PD_U16(e) == 0x0112 && PD_U16(e + 2) == 3) {
				uint32_t v = PD_U16(e + 8);

				return v >= 1 && v <= 8 ? (int)v : 1;
			}
		}
#undef PD_U32
#undef PD_U16
	}
	return 1;
}

/* RGB *BUF of *W x *H turned as EXIF orientation O says (Pillow's
 * exif_transpose: 2 mirrored, 3 turned half round, 4 flipped, 5
 * transposed, 6 turned a quarter clockwise, 7 transversed, 8 a quarter
 * counter-clockwise); the sides swap for 5 to 8. */
static int pd_jpeg_orient(uint8_t **buf, int *w, int *h, int o, const char *name)
{
	int W = *w, H = *h, ow = o >= 5 ? H : W, oh = o >= 5 ? W : H;
	uint8_t *out;

	if (o <= 1)
		return 0;
	out = pd_malloc((size_t)W * H * 3, name);
	if (!out)
		return -1;
	for (int y = 0; y < oh; y++)
		for (int x = 0; x < ow; x++) {
			int sx, sy;

			switch (o) {
			case 2: sx = W - 1 - x; sy = y; break;
			case 3: sx = W - 1 - x; sy = H - 1 - y; break;
			case 4: sx = x; sy = H - 1 - y; break;
			case 5: sx = y; sy = x; break;
			case 6: sx = y; sy = H - 1 - x; break;
			case 7: sx = W - 1 - y; sy = H - 1 - x; break;
			default: sx = W - 1 - y; sy = x; break;
			}
			memcpy(out + ((size_t)y * ow + x) * 3, *buf + ((size_t)sy * W + sx) * 3, 3);
		}
	free(*buf);
	*buf = out;
	*w = ow;
	*h = oh;
	return 0;
}

int pd_jpeg_decode(const uint8_t *data, size_t len, const char *name, uint8_t **rgb, int *width, int *height)
{
	struct pd_jpeg_progress progress;
	volatile int orient = 1;
	struct jpeg_decompress_struct cinfo;
	struct pd_jpeg_err err;
	uint8_t *volatile buf = NULL;
	volatile int rc = -1;

	*rgb = NULL;
	cinfo.err = jpeg_std_error(&err.mgr);
	err.mgr.error_exit = pd_jpeg_fail;
	err.mgr.emit_message = pd_jpeg_quiet;
	err.msg[0] = 0;
	if (setjmp(err.jump)) {
		pd_errorf("%s: not a JPEG it can read (%s)", name, err.msg);
		goto out;
	}
	jpeg_create_decompress(&cinfo);
	progress.mgr.progress_monitor = pd_jpeg_scans;
	progress.err = &err;
	cinfo.progress = &progress.mgr;
	jpeg_mem_src(&cinfo, data, (unsigned long)len);
	jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
	jpeg_read_header(&cinfo, TRUE);
	/* (the saved markers go with the image's memory at the end) */
	orient = pd_jpeg_orientation(cinfo.marker_list);
	/* a header may say anything: nothing beyond the largest picture */
	if (cinfo.image_width < 1 || cinfo.image_height < 1 || cinfo.image_width > 16384 || cinfo.image_height > 16384) {
		pd_errorf("%s: a picture of %ux%u (at most 16384 a side)", name, cinfo.image_width, cinfo.image_height);
		goto out;
	}
	if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
		pd_errorf("%s: a CMYK JPEG; give an RGB or gray picture", name);
		goto out;
	}
	cinfo.out_color_space = JCS_RGB;
	jpeg_start_decompress(&cinfo);
	buf = pd_malloc((size_t)cinfo.output_width * cinfo.output_height * 3, name);
	if (!buf)
		goto out;
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW row = buf + (size_t)cinfo.output_scanline * cinfo.output_width * 3;

		jpeg_read_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_decompress(&cinfo);
	*width = (int)cinfo.output_width;
	*height = (int)cinfo.output_height;
	{
		uint8_t *b = buf;

		buf = NULL;
		if (pd_jpeg_orient(&b, width, height, orient, name)) {
			free(b);
			goto out;
		}
		*rgb = b;
	}
	rc = 0;
out:
	jpeg_destroy_decompress(&cinfo);
	free(buf);
	return rc;
}
