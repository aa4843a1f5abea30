/*
 * pd_backend_staged.h - the test backend whose memory is not host memory:
 * the CPU's kernels on buffers the host cannot address (pd_backend_staged.c
 * says how), so CI runs the paths a GPU takes without one.
 */
#ifndef PD_BACKEND_STAGED_H
#define PD_BACKEND_STAGED_H

#include "pd_backend.h"

/* As pd_backend_cpu_new, behind the boundary. */
int pd_backend_staged_new(struct pd_backend **out, enum pd_dtype compute, int threads);

#endif /* PD_BACKEND_STAGED_H */
