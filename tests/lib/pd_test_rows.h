/*
 * pd_test_rows.h - whether this CPU's products give each row the same bits
 * however many rows a call has: the property the tests' "bit for bit"
 * comparisons of meshes with one process rest on (a sequence split hands
 * each process a part of the rows).
 *
 * Measured, not assumed from the instruction set: oneDNN's products on
 * AVX-512 (brgemm) sum every output in an order set by the shapes' widths
 * alone, but its AVX2 products (gemm:jit) change the order with the row
 * count (seen on a Zen 3 EPYC: a linear layer of 96 rows in calls of 37
 * changed 308 of 18432 outputs by an ulp; attention over queries in
 * calls of 67, 231 of 25600), and on a Xeon its AMX bf16 products do for
 * narrow layers in calls of a few rows (64 outputs, 12 rows in calls of
 * 3, as Ulysses 4 hands a small picture's tokens out), where its
 * AVX-512 ones did not. Where they do, the tests hold meshes to a stated
 * tolerance instead of 0, and say so.
 */
#ifndef PD_TEST_ROWS_H
#define PD_TEST_ROWS_H

#include "pd_backend.h"
#include "pd_backend_cpu.h"
#include "pd_rng.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One product the probe splits: a linear layer, or attention over fixed
 * keys and values. */
struct pd_test_rows_op {
	struct pd_backend *be;
	struct pd_linear *l;            /* the linear layer, or NULL: attention */
	const float *k, *v;             /* attention's keys and values [skv, heads * hd] */
	int64_t skv;
	int heads, hd;
};

static inline void pd_test_rows_run(const struct pd_test_rows_op *op, const float *x, int64_t k, int64_t rows,
				    float *y, int64_t n)
{
	if (op->l)
		op->be->ops->linear(op->be, op->l, x, k, rows, y, n, 0);
	else
		op->be->ops->attention(op->be, y, n, NULL, x, k, op->k, k, op->v, k, rows, op->skv, op->heads, op->hd,
				       0.125f);
}

/* Rows [0, M) of X (row length K) through OP in one call and in calls of
 * SPLIT rows; 1 when every output is the same float (0 also when memory
 * is short: the tests then ask for less, never for more). */
static inline int pd_test_rows_same(const struct pd_test_rows_op *op, const float *x, int64_t m, int64_t k,
				    int64_t n, int64_t split)
{
	struct pd_backend *be = op->be;
	float *dx = be->ops->alloc(be, (size_t)(m * k)), *dy = be->ops->alloc(be, (size_t)(m * n));
	float *a = malloc((size_t)(m * n) * sizeof(float)), *b = malloc((size_t)(m * n) * sizeof(float));
	int same = 0;

	if (!dx || !dy || !a || !b)
		goto out;
	be->ops->upload(be, dx, x, (size_t)(m * k));
	pd_test_rows_run(op, dx, k, m, dy, n);
	be->ops->download(be, a, dy, (size_t)(m * n));
	for (int64_t r0 = 0; r0 < m; r0 += split)
		pd_test_rows_run(op, dx + r0 * k, k, m - r0 < split ? m - r0 : split, dy + r0 * n, n);
	be->ops->download(be, b, dy, (size_t)(m * n));
	same = !be->failed && !memcmp(a, b, (size_t)(m * n) * sizeof(float));
out:
	if (dx)
		be->ops->free(be, dx);
	if (dy)
		be->ops->free(be, dy);
	free(a);
	free(b);
	return same;
}

/* 1 when the CPU backend's linear layers and attention, in f32 and in
 * bf16, give every row the same bits in one call as in calls of fewer
 * rows; else 0 with what differed in WHY. */
static inline int pd_test_rows_exact(char *why, size_t why_size)
{
	static const enum pd_dtype dts[2] = { PD_F32, PD_BF16 };
	/* the linear layers: rows, inputs, outputs, rows a call */
	static const int64_t lin[2][4] = { { 96, 128, 192, 37 }, { 12, 128, 64, 3 } };
	const int64_t k = 128, n = 192, s = 200, heads = 2, hd = 64, w = heads * hd;
	struct pd_rng rng;
	float *x = malloc((size_t)(s * w) * sizeof(float)), *wt = malloc((size_t)(n * k) * sizeof(float));
	float *kv = malloc((size_t)(2 * s * w) * sizeof(float));
	int exact = 1;

	snprintf(why, why_size, "every row's bits whatever the rows a call has");
	if (!x || !wt || !kv) {
		snprintf(why, why_size, "out of memory");
		exact = 0;
		goto out;
	}
	pd_rng_seed(&rng, 7);
	pd_rng_randn(&rng, x, (size_t)(s * w));
	pd_rng_randn(&rng, wt, (size_t)(n * k));
	pd_rng_randn(&rng, kv, (size_t)(2 * s * w));
	for (int d = 0; d < 2 && exact; d++) {
		struct pd_test_rows_op op = { 0 };
		float *dk, *dv;

		if (pd_backend_cpu_new(&op.be, dts[d], 0)) {
			snprintf(why, why_size, "no CPU backend: %s", pd_last_error());
			exact = 0;
			break;
		}
		for (int i = 0; i < 2 && exact; i++) {
			op.l = op.be->ops->linear_new(op.be, lin[i][2], lin[i][1], wt, PD_F32, lin[i][1], NULL);
			if (!op.l || !pd_test_rows_same(&op, x, lin[i][0], lin[i][1], lin[i][2], lin[i][3])) {
				snprintf(why, why_size,
					 "a %s linear layer's rows (%lld outputs) in calls of %lld differ from one call of %lld",
					 pd_dtype_name(dts[d]), (long long)lin[i][2], (long long)lin[i][3],
					 (long long)lin[i][0]);
				exact = 0;
			}
			if (op.l)
				op.be->ops->linear_free(op.be, op.l);
			op.l = NULL;
		}
		dk = op.be->ops->alloc(op.be, (size_t)(s * w));
		dv = op.be->ops->alloc(op.be, (size_t)(s * w));
		if (exact && (!dk || !dv)) {
			snprintf(why, why_size, "out of memory");
			exact = 0;
		}
		if (exact) {
			op.be->ops->upload(op.be, dk, kv, (size_t)(s * w));
			op.be->ops->upload(op.be, dv, kv + s * w, (size_t)(s * w));
			op.k = dk;
			op.v = dv;
			op.skv = s;
			op.heads = (int)heads;
			op.hd = (int)hd;
			if (!pd_test_rows_same(&op, x, s, w, w, 67)) {
				snprintf(why, why_size, "%s attention's queries in calls of 67 differ from one call of %lld",
					 pd_dtype_name(dts[d]), (long long)s);
				exact = 0;
			}
		}
		if (dk)
			op.be->ops->free(op.be, dk);
		if (dv)
			op.be->ops->free(op.be, dv);
		pd_backend_free(op.be);
	}
out:
	free(x);
	free(wt);
	free(kv);
	return exact;
}

#endif /* PD_TEST_ROWS_H */
