/*
 * pd_st_writer.h - writes safetensors files (pdit tiny, pdit encode, the
 * latents and dumps), sharded sets with their index, and any file
 * atomically.
 */
#ifndef PD_ST_WRITER_H
#define PD_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "pd_safetensors.h"

/* Writer: collects tensors, then writes the file in one pass to PATH.tmp
 * and renames it, so an interrupted run never leaves a half-written file. */
struct pd_st_writer;

/* Called at save time to produce a tensor's bytes (lets `pdit tiny` write
 * gigabytes without holding them all). */
typedef int (*pd_st_fill_fn)(void *ctx, void *dst, size_t nbytes);

struct pd_st_writer *pd_st_writer_new(void);
void pd_st_writer_free(struct pd_st_writer *w);
/* DATA is borrowed: it must stay valid until pd_st_writer_save. */
int pd_st_writer_add(struct pd_st_writer *w, const char *name, enum pd_dtype dt, int ndim,
		     const int64_t *shape, const void *data);
/* The bytes come from FILL(CTX, ...) at save time; CTX is borrowed. */
int pd_st_writer_add_fill(struct pd_st_writer *w, const char *name, enum pd_dtype dt, int ndim,
			  const int64_t *shape, pd_st_fill_fn fill, void *ctx);
/* W's fills may run at once, on OpenMP's threads (each writes only its own
 * bytes, touches nothing shared and logs nothing): a save makes several
 * tensors together (about 1 GiB of them at most) and writes them in order.
 * Without it they run one after another (a fill may share progress). */
void pd_st_writer_fills_apart(struct pd_st_writer *w);
int pd_st_writer_meta(struct pd_st_writer *w, const char *key, const char *value);
int pd_st_writer_save(struct pd_st_writer *w, const char *path);

/* Splits the file SRC into SHARDS files DIR/STEM-0000i-of-0000n.safetensors
 * (tensors in name order, nearly equal byte counts) with
 * DIR/STEM.safetensors.index.json, as transformers and diffusers save large
 * models; SRC is removed. */
int pd_st_write_shards(const char *src, const char *dir, const char *stem, int shards);

/* Writes PATH atomically from a buffer (PATH.tmp, then rename). */
int pd_write_file_atomic(const char *path, const void *data, size_t len);

#endif /* PD_ST_WRITER_H */
