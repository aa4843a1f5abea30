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

/* The encoded file grows here (libpng's write callback). */
struct pd_png_mem {
	uint8_t *data;                  /* the bytes so far */
	size_t len, cap;                /* used and allocated */
	int failed;                     /* out of memory */
};

static void pd_png_mem_write(png_structp png, png_bytep bytes, png_size_t n)
{
	struct pd_png_mem *m = png_get_io_ptr(png);

	if (m->failed)
		return;
	if (m->len + n > m->cap) {
		size_t cap = m->cap ? m->cap : 1 << 16;
		uint8_t *p;

		while (cap < m->len + n)
			cap *= 2;
		p = realloc(m->data, cap);
		if (!p) {
			m->failed = 1;
			return;
		}
		m->data = p;
		m->cap = cap;
	}
	memcpy(m->data + m->len, bytes, n);
	m->len += n;
}

static void pd_png_mem_flush(png_structp png)
{
	(void)png;
}

int pd_png_encode(const uint8_t *rgb, int width, int height, const char *key, const char *text, uint8_t **out,
		  size_t *len)
{
	struct pd_png_mem m = { 0 };
	png_structp png = NULL;
	png_infop info = NULL;

	*out = NULL;
	*len = 0;
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	info = png ? png_create_info_struct(png) : NULL;
	if (!png || !info) {
		pd_errorf("cannot initialise libpng");
		goto fail;
	}
	if (setjmp(png_jmpbuf(png))) {
		pd_errorf("PNG encoding failed");
		goto fail;
	}
	png_set_write_fn(png, &m, pd_png_mem_write, pd_png_mem_flush);
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
	if (m.failed) {
		free(m.data);
		return pd_errorf("out of memory encoding a %dx%d PNG", width, height);
	}
	*out = m.data;
	*len = m.len;
	return 0;
fail:
	if (png)
		png_destroy_write_struct(&png, info ? &info : NULL);
	free(m.data);
	return -1;
}

int pd_png_write(const char *path, const uint8_t *rgb, int width, int height, const char *key, const char *text)
{
	struct pd_out_file o;
	uint8_t *png;
	size_t len;

	if (pd_png_encode(rgb, width, height, key, text, &png, &len)) {
		char why[256];

		snprintf(why, sizeof(why), "%s", pd_last_error());
		return pd_errorf("%s: %s", path, why);
	}
	if (pd_out_open(&o, path)) {
		free(png);
		return -1;
	}
	if (pd_out_write(&o, png, len)) {
		free(png);
		pd_out_abort(&o);
		return -1;
	}
	free(png);
	return pd_out_commit(&o);
}

/* The rest of a read begun on IMG (NAME for the messages); ALPHA_MASK: as
 * pd_png_decode_alpha_mask. */
static int pd_png_finish(png_image *img, const char *path, uint8_t **rgb, int *width, int *height, int alpha_mask);

int pd_png_read(const char *path, uint8_t **rgb, int *width, int *height)
{
	png_image img;
	unsigned char magic[3] = { 0 };
	FILE *f = fopen(path, "rb");

	/* a JPEG: the whole file through libjpeg */
	if (f && fread(magic, 1, 3, f) == 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff) {
		char *data = NULL;
		size_t len = 0;
		int rc;

		fclose(f);
		if (pd_read_file(path, (size_t)1 << 30, &data, &len))
			return -1;
		rc = pd_jpeg_decode((const uint8_t *)data, len, path, rgb, width, height);
		free(data);
		return rc;
	}
	if (f)
		fclose(f);

	memset(&img, 0, sizeof(img));
	img.version = PNG_IMAGE_VERSION;
	if (!png_image_begin_read_from_file(&img, path))
		return pd_errorf("%s: %s", path, img.message);
	return pd_png_finish(&img, path, rgb, width, height, 0);
}

static int pd_png_decode_as(const uint8_t *png, size_t len, const char *name, uint8_t **rgb, int *width, int *height,
			    int alpha_mask)
{
	png_image img;

	/* a JPEG (no alpha: a mask of OpenAI's kind is a PNG) */
	if (!alpha_mask && len >= 3 && png[0] == 0xff && png[1] == 0xd8 && png[2] == 0xff)
		return pd_jpeg_decode(png, len, name, rgb, width, height);
	memset(&img, 0, sizeof(img));
	img.version = PNG_IMAGE_VERSION;
	if (len < 8 || !png_image_begin_read_from_memory(&img, png, len))
		return pd_errorf("%s: %s", name, len < 8 ? "not a PNG" : img.message);
	return pd_png_finish(&img, name, rgb, width, height, alpha_mask);
}

int pd_png_decode(const uint8_t *png, size_t len, const char *name, uint8_t **rgb, int *width, int *height)
{
	return pd_png_decode_as(png, len, name, rgb, width, height, 0);
}

int pd_png_decode_alpha_mask(const uint8_t *png, size_t len, const char *name, uint8_t **rgb, int *width,
			     int *height)
{
	return pd_png_decode_as(png, len, name, rgb, width, height, 1);
}

static int pd_png_finish(png_image *img, const char *path, uint8_t **rgb, int *width, int *height, int alpha_mask)
{
	uint8_t *buf;

	/* a header may say anything: nothing beyond the largest picture */
	if (img->width < 1 || img->height < 1 || img->width > 16384 || img->height > 16384) {
		unsigned w = img->width, h = img->height;

		png_image_free(img);
		return pd_errorf("%s: a picture of %ux%u (at most 16384 a side)", path, w, h);
	}
	/* RGBA always: PIL's convert("RGB") drops the alpha, where libpng's
	 * RGB output would composite the pixels onto black */
	img->format = PNG_FORMAT_RGBA;
	buf = pd_malloc(PNG_IMAGE_SIZE(*img), path);
	if (!buf) {
		png_image_free(img);
		return -1;
	}
	if (!png_image_finish_read(img, NULL, buf, 0, NULL)) {
		free(buf);
		return pd_errorf("%s: %s", path, img->message);
	}
	/* RGBA in place into RGB: the colour, or for a mask of OpenAI's kind
	 * white where fully transparent */
	for (size_t i = 0; i < (size_t)img->width * img->height; i++) {
		if (alpha_mask) {
			uint8_t v = buf[4 * i + 3] == 0 ? 255 : 0;

			buf[3 * i] = buf[3 * i + 1] = buf[3 * i + 2] = v;
		} else {
			memmove(buf + 3 * i, buf + 4 * i, 3);
		}
	}
	*rgb = buf;
	*width = (int)img->width;
	*height = (int)img->height;
	return 0;
}
