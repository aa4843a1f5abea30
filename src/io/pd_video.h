/*
 * pd_video.h - videos out: H.264 in an MP4 (or Matroska, by the name's
 * extension) through FFmpeg's libraries as Debian packages them, with the
 * prompt and parameters in the container's metadata.
 *
 *   const char *meta[] = { "comment", "pdit ...; seed: 42", NULL };
 *   pd_video_write("clip.mp4", rgb, frames, 832, 480, 16, meta);
 *
 * Written as PATH.tmp and renamed when complete (pd_out_*), so a failed or
 * interrupted run leaves nothing under PATH.
 */
#ifndef PD_VIDEO_H
#define PD_VIDEO_H

#include <stddef.h>
#include <stdint.h>

/* Whether pdit was built with FFmpeg (-DPDIT_VIDEO), which pd_video_write
 * needs. */
int pd_video_built(void);
/* Whether PATH names a container pd_video_write can write (.mp4, .mkv,
 * .mov). */
int pd_video_is_video_name(const char *path);
/* Whether PATH, a video's name, can take one before the work: not a pipe
 * (the muxer rewinds to write the sizes). 0, or -1 naming PATH. */
int pd_video_out_check(const char *path);

/* RGB [frames, height, width, 3] (8 bits) at FPS frames a second into
 * PATH; META: key, value, ..., NULL (the container's tags). Even sizes
 * only (H.264 4:2:0). 0, or -1 with a message naming PATH. */
int pd_video_write(const char *path, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta);
/* The same video in memory: *BYTES (malloc'd, the caller frees) of *LEN,
 * the container by NAME's extension ("video.mp4"; no file is made, so a
 * killed process leaves none behind). 0, or -1 with a message naming
 * NAME. */
int pd_video_bytes(const char *name, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta, uint8_t **bytes, size_t *len);

/* FFmpeg's own log at errors only (process-wide: for the command line). */
void pd_video_quiet(void);

#endif /* PD_VIDEO_H */
