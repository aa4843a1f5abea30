/*
 * pd_png.h - 8-bit RGB PNG output with a text chunk (libpng).
 */
#ifndef PD_PNG_H
#define PD_PNG_H

#include <stddef.h>
#include <stdint.h>

/* Writes RGB [height, width, 3] to PATH (through PATH.tmp and a rename, so
 * a failed run never leaves a half-written picture). KEY/TEXT, when not
 * NULL, become a tEXt chunk (the generation parameters). */
int pd_png_write(const char *path, const uint8_t *rgb, int width, int height, const char *key, const char *text);

/* The same PNG in memory: *OUT (malloc'd) of *LEN bytes. */
int pd_png_encode(const uint8_t *rgb, int width, int height, const char *key, const char *text, uint8_t **out,
		  size_t *len);

/* A JPEG (pd_jpeg.c) as 8-bit RGB, decoded as Pillow decodes it. */
int pd_jpeg_decode(const uint8_t *data, size_t len, const char *name, uint8_t **rgb, int *width, int *height);

/* Reads a PNG of any colour type (or a JPEG, told by its first bytes) as
 * 8-bit RGB [height, width, 3] (*rgb malloc'd); a declared size above
 * 16384 a side is refused. */
int pd_png_read(const char *path, uint8_t **rgb, int *width, int *height);
/* The same from LEN bytes in memory (a service's request); NAME in the
 * messages. */
int pd_png_decode(const uint8_t *png, size_t len, const char *name, uint8_t **rgb, int *width, int *height);
/* A mask in OpenAI's images.edit convention (fully transparent where the
 * picture is edited) as the white-repaints RGB mask the pipelines read:
 * white where alpha is 0, black elsewhere. */
int pd_png_decode_alpha_mask(const uint8_t *png, size_t len, const char *name, uint8_t **rgb, int *width,
			     int *height);

#endif /* PD_PNG_H */
