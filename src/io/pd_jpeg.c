/*
 * pd_jpeg.c - JPEG pictures in (libjpeg-turbo): decoded to 8-bit RGB with
 * libjpeg's defaults (the accurate integer IDCT, fancy upsampling), which
 * are Pillow's, so a JPEG reaches the VAE as diffusers' load_image gives
 * it. libjpeg's fatal errors come back here through a jump, never exit.
 */
#include "pd_png.h"
#include "pd_util.h"

#include <jpeglib.h>
#include <jerror.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

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

int pd_jpeg_decode(const uint8_t *data, size_t len, const char *name, uint8_t **rgb, int *width, int *height)
{
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
	jpeg_mem_src(&cinfo, data, (unsigned long)len);
	jpeg_read_header(&cinfo, TRUE);
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
	*rgb = buf;
	buf = NULL;
	rc = 0;
out:
	jpeg_destroy_decompress(&cinfo);
	free(buf);
	return rc;
}
