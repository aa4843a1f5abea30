/*
 * fuzz_png.c - the picture reader (pictures in: img2img, masks, Kontext's
 * references, the service's base64 PNGs) on one input: as RGB, as an
 * OpenAI edit mask (its alpha), and through a file.
 */
#include "fuzz.h"
#include "pd_png.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = pd_fuzz_file(0, "x.png", data, size);
	uint8_t *rgb = NULL;
	int w, h;

	if (!pd_png_decode(data, size, "x.png", &rgb, &w, &h)) {
		if (w < 1 || h < 1 || w > 16384 || h > 16384)
			abort();
		/* every byte is there to read */
		for (size_t i = 0; i < (size_t)w * h * 3; i += 4093)
			(void)*(volatile uint8_t *)(rgb + i);
		free(rgb);
	}
	if (!pd_png_decode_alpha_mask(data, size, "x.png", &rgb, &w, &h)) {
		for (size_t i = 0; i < (size_t)w * h * 3; i++)
			if (rgb[i] != 0 && rgb[i] != 255)
				abort();
		free(rgb);
	}
	if (!pd_png_read(path, &rgb, &w, &h))
		free(rgb);
	return 0;
}
