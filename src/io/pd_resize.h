/*
 * pd_resize.h - pictures resized as diffusers' image processors resize
 * them (PIL's Lanczos, bit for bit).
 */
#ifndef PD_RESIZE_H
#define PD_RESIZE_H

#include <stdint.h>

/* SRC [h, w, channels] (8 bits; 1 to 4 channels, each on its own) into
 * DST [oh, ow, channels] as Pillow's Image.resize((ow, oh), LANCZOS). */
int pd_resize_lanczos(const uint8_t *src, int w, int h, int channels, uint8_t *dst, int ow, int oh);

#endif /* PD_RESIZE_H */
