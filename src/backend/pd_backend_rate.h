/*
 * pd_backend_rate.h - rates of a backend, timed now (medians of several
 * runs): a matrix product of M x K x N in GFLOP/s, and the elementwise
 * kernels a block repeats on every tensor-parallel shard over ROWS x DIM, in
 * bytes/s. 0 when they could not run.
 */
#ifndef PD_BACKEND_RATE_H
#define PD_BACKEND_RATE_H

#include "pd_backend.h"

double pd_backend_rate_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N);
double pd_backend_rate_elementwise(struct pd_backend *be, int64_t rows, int64_t dim);

#endif /* PD_BACKEND_RATE_H */
