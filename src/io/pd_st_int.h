/*
 * pd_st_int.h - inside the weights store: one mapped file (safetensors,
 * or GGUF through its reader) and what the store's files share. Private to
 * io/: pd_st_file.c reads safetensors files, pd_st_gguf.c adapts GGUF
 * files, pd_safetensors.c makes sets, views and reads of them.
 */
#ifndef PD_ST_INT_H
#define PD_ST_INT_H

#include "pd_safetensors.h"

/* A dimension above this is refused before any product is formed. */
#define PD_ST_MAX_DIM ((int64_t)1 << 40)
/* Largest tensor count pdit accepts in one header. */
#define PD_ST_MAX_TENSORS 1000000

struct pd_gguf;

struct pd_st_file {
	char *path;                     /* file path, for messages */
	unsigned char *map;             /* whole-file read-only mapping */
	size_t size;                    /* file size in bytes */
	size_t data_start;              /* 8 + header length */
	int n_tensors;                  /* tensors in this file */
	struct pd_st_tensor *tensors;   /* their descriptions */
	int scaled_fp8;                 /* ComfyUI's scaled fp8 (a "scaled_fp8" marker) */
	struct pd_gguf *gguf;           /* a GGUF file: it owns the mapping */
};

/* A safetensors file at PATH, mapped and its header checked whole. */
int pd_st_file_open(struct pd_st_file **out, const char *path);
/* A GGUF file at PATH as one file of a set: its tensors in torch order. */
int pd_st_file_gguf(struct pd_st_file **out, const char *path);
void pd_st_file_free(struct pd_st_file *f);
/* ST's metadata from its first file F (a GGUF file's strings and numbers). */
int pd_st_load_meta(struct pd_st *st, const struct pd_st_file *f);
int pd_st_load_meta_gguf(struct pd_st *st, const struct pd_gguf *g);

/* COUNT values of type DT at SRC as float32. */
void pd_convert_f32(enum pd_dtype dt, const unsigned char *src, size_t count, float *dst);
/* Bytes of one row (the outermost dimension) of T as stored. */
size_t pd_st_row_bytes(const struct pd_st_tensor *t);

#endif /* PD_ST_INT_H */
