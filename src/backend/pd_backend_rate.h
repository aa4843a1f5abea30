/*
 * pd_backend_rate.h - rates of a backend, timed now (medians of several
 * runs): a matrix product of M x K x N in GFLOP/s, the part of its time
 * that its weights cost whatever the rows, and the elementwise kernels a
 * block repeats on every tensor-parallel shard over ROWS x DIM, in bytes/s.
 * 0 when they could not run.
 */
#ifndef PD_BACKEND_RATE_H
#define PD_BACKEND_RATE_H

#include "pd_backend.h"

double pd_backend_rate_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N);
double pd_backend_rate_elementwise(struct pd_backend *be, int64_t rows, int64_t dim);
/* The rate of the M x K x N product as pd_backend_rate_matmul, and in
 * *PER_WEIGHT what it spends on its K x N weights whatever its rows
 * (decoding bf16 or quantized weights to the product's precision, reading
 * them), in seconds per weight: timed at M rows and at M / 8, a product
 * taken as rows x a per-row time + weights x this (0 when lost in the
 * timings' noise). */
double pd_backend_rate_matmul_weights(struct pd_backend *be, int64_t M, int64_t K, int64_t N, double *per_weight);
/* How much faster the M x K x N product runs with its weights kept in T's
 * blocks (as the backend's qproducts multiplies them) than with plain
 * ones: the ratio of the two products' median times, timed interleaved; 0
 * where T cannot be timed at that shape (K not a multiple of its blocks). */
double pd_backend_rate_blocks(struct pd_backend *be, enum pd_qtype t, int64_t M, int64_t K, int64_t N);

#endif /* PD_BACKEND_RATE_H */
