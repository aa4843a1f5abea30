/*
 * pd_png.c - PNG output through libpng's simplified-free classic API.
 */
#include "pd_png.h"
#include "pd_util.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pd_png_write(const char *path, const uint8_t *rgb, int width, int height, const char *key, const char *text)
{
	struct pd_out_file o;
	png_structp png = NULL;
	png_infop info = NULL;

	if (pd_out_open(&o, path))
		return -1;
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	info = png ? png_create_info_struct(png) : NULL;
	if (!png || !info) {
		pd_errorf("%s: cannot initialise libpng", path);
		goto fail;
	}
	if (setjmp(png_jmpbuf(png))) {
		pd_errorf("%s: PNG encoding failed", path);
		goto fail;
	}
	png_init_io(png, o.f);
	png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	if (key && text) {
		png_text t;

		int ascii = 1;

		for (const char *c = text; *c; c++)
			ascii &= (unsigned char)*c < 0x80;
		memset(&t, 0, sizeof(t));
		/* tEXt is Latin-1: a prompt in other scripts goes in UTF-8's iTXt */
		t.compression = ascii ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
		t.key = (png_charp)key;
		t.text = (png_charp)text;
		png_set_text(png, info, &t, 1);
	}
	png_write_info(png, info);
	for (int y = 0; y < height; y++)
		png_write_row(png, (png_const_bytep)(rgb + (size_t)y * width * 3));
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	return pd_out_commit(&o);
fail:
	if (png)
		png_destroy_write_struct(&png, info ? &info : NULL);
	pd_out_abort(&o);
	return -1;
}

int pd_png_read(const char *path, uint8_t **rgb, int *width, int *height)
{
	png_image img;
	uint8_t *buf;

	memset(&img, 0, sizeof(img));
	img.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_file(&img, path))
		return pd_errorf("%s: %s", path, img.message);
	img.format = PNG_FORMAT_RGB;
	buf = pd_malloc(PNG_IMAGE_SIZE(img), path);
	if (!buf) {
		png_image_free(&img);
		return -1;
	}
	if (!png_image_finish_read(&img, NULL, buf, 0, NULL)) {
		free(buf);
		return pd_errorf("%s: %s", path, img.message);
	}
	*rgb = buf;
	*width = (int)img.width;
	*height = (int)img.height;
	return 0;
}
