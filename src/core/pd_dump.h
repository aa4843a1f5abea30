/*
 * pd_dump.h - how model code hands its intermediates to a test or to
 * `pdit forward --dump`.
 */
#ifndef PD_DUMP_H
#define PD_DUMP_H

#include <stdint.h>

/* Receives intermediates under the golden files' names. DATA is a host copy
 * valid during the call. When INDEX >= 0, DATA is batch entry INDEX alone
 * (SHAPE[0] == 1); when INDEX < 0 it spans the whole batch (or has no batch
 * dimension). */
struct pd_dump {
	void (*fn)(void *ctx, const char *name, int64_t index, const float *data, int ndim, const int64_t *shape);
	void *ctx;                      /* passed back to fn */
	int64_t index;                  /* batch entry of per-image tensors */
};

#endif /* PD_DUMP_H */
