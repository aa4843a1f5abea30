/*
 * pd_backend_timed.h - any backend with each operation timed: where a
 * step's time goes, operation by operation and shape by shape, against the
 * limits each one has (pdit bench --op-times).
 *
 *   struct pd_backend *be;                  (made by pd_backend_new)
 *   pd_backend_timed_new(&be, be);          (be now times what it runs)
 *   ... steps ...
 *   n = pd_backend_timed_rows(be, rows, 64);
 */
#ifndef PD_BACKEND_TIMED_H
#define PD_BACKEND_TIMED_H

#include "pd_backend.h"

/* One kind of operation at one shape, summed over its calls. */
struct pd_op_time {
	char name[72];                  /* the operation and its shape ("linear 4608 x 3072 -> 12288 bf16",
					 * "attention 4608 x 4608, 24 x 128", "layernorm_mod") */
	uint64_t calls;                 /* times it ran */
	double seconds;                 /* wall time in it (a device backend is waited for after each) */
	double flop;                    /* its work counted from the shapes (products, attention,
					 * convolutions; 0 for the rest) */
};

/* Wraps INNER (taken over: freed with the wrapper) so that every operation
 * is timed; *OUT is the wrapper, with INNER's name and settings. 0, or -1
 * with a message (INNER is freed then too). */
int pd_backend_timed_new(struct pd_backend **out, struct pd_backend *inner);

/* Up to MAX rows of what BE ran since it was made or reset, the longest
 * first; -1 where BE is not a timed backend. */
int pd_backend_timed_rows(struct pd_backend *be, struct pd_op_time *rows, int max);

/* Forgets the times so far (a bench's warm-up). */
void pd_backend_timed_reset(struct pd_backend *be);

#endif /* PD_BACKEND_TIMED_H */
