/*
 * pd_loader.h - loading named weights from a safetensors set into backend
 * objects, checking every shape against the config.
 *
 * The first failure is recorded (pd_last_error) and makes later calls
 * return NULL at once, so a model loader can request all its weights and
 * check ld.failed once at the end.
 */
#ifndef PD_LOADER_H
#define PD_LOADER_H

#include "pd_backend.h"
#include "pd_safetensors.h"

struct pd_loader {
	const struct pd_st *st;         /* the weights */
	struct pd_backend *be;          /* where they go */
	int failed;                     /* an error has been recorded */
	/* plain float weights of linear layers encoded into this block type
	 * and kept so, where their rows are whole blocks (PD_Q_F32: as stored) */
	enum pd_qtype quantize;
	/* Called with each linear layer as it loads (its NAME and the part S
	 * of its weight this process holds), to put something beside it (a
	 * model's adapters); NULL: nothing. Nonzero fails the load (after
	 * leaving a message). */
	int (*each_linear)(void *ctx, struct pd_backend *be, struct pd_linear *l, const char *name,
			   const struct pd_slice *s);
	void *each_ctx;                 /* its first argument */
};

/* NAME.weight [n_out, n_in] and NAME.bias [n_out]; NAME is a printf format. */
struct pd_linear *pd_loader_linear(struct pd_loader *ld, int64_t n_out, int64_t n_in, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* NAME.weight [n_out, n_in] alone (T5's layers have no bias). */
struct pd_linear *pd_loader_linear_nobias(struct pd_loader *ld, int64_t n_out, int64_t n_in, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The part S of NAME.weight [n_out, n_in] (and of NAME.bias when S asks). */
struct pd_linear *pd_loader_linear_slice(struct pd_loader *ld, int64_t n_out, int64_t n_in, const struct pd_slice *s,
					 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A float tensor NAME of exactly SHAPE into a new host buffer (malloc'd),
 * or NULL (and LD failed) with a message. */
float *pd_loader_host_tensor(struct pd_loader *ld, const char *name, int ndim, const int64_t *shape);
/* A 1-D tensor NAME [n] into backend memory. */
float *pd_loader_vector(struct pd_loader *ld, int64_t n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Values [off, off + n) of the 1-D tensor NAME [total] into backend memory
 * (a tensor-parallel shard's part of a norm's weights). */
float *pd_loader_vector_part(struct pd_loader *ld, int64_t total, int64_t off, int64_t n, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* Rows IDS[0..n) of the table NAME [rows, cols] (an embedding lookup)
 * into host DST [n, cols]; an id outside the table is an error naming it. */
int pd_loader_rows(struct pd_loader *ld, const char *name, int64_t rows, int64_t cols, const int64_t *ids, int n,
		   float *dst);
/* NAME.weight [c_out, c_in, k, k] and NAME.bias [c_out]. */
struct pd_conv *pd_loader_conv(struct pd_loader *ld, int c_out, int c_in, int k, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#endif /* PD_LOADER_H */
