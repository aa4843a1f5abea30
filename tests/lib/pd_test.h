/*
 * pd_test.h - a minimal test harness in the manner of sds's testhelp.h.
 *
 *   PD_CHECK(cond, "what is being checked %d", x);   // counts and reports
 *   return pd_test_report();                          // 0 when all passed
 *
 * Comparisons state their tolerance and print the measured error, so a
 * failing run says by how much it failed.
 */
#ifndef PD_TEST_H
#define PD_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pd_backend_new.h"
#include "pd_comm.h"

static int pd_test_failed;
static int pd_test_passed;

#define PD_CHECK(cond, ...) \
	do { \
		if (cond) { \
			pd_test_passed++; \
		} else { \
			pd_test_failed++; \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__); \
			fprintf(stderr, "\n"); \
		} \
	} while (0)

static inline int pd_test_report(void)
{
	printf("%d checks passed, %d failed\n", pd_test_passed, pd_test_failed);
	return pd_test_failed ? 1 : 0;
}

/* The end of a multi-process test: every rank's failures count, rank 0
 * removes the scratch folder TMP (when not NULL) and prints the summary;
 * WORLD is finalized. The exit status. */
static inline int pd_test_finish(struct pd_comm *world, const char *tmp)
{
	int failed = pd_test_failed;

	if (world->size > 1)
		world->ops->allreduce(world, &failed, 1, PD_COMM_I32, PD_COMM_MAX);
	if (world->rank == 0) {
		char cmd[600];

		if (tmp && tmp[0]) {
			snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
			if (system(cmd) != 0)
				fprintf(stderr, "could not remove %s\n", tmp);
		}
		pd_test_report();
	}
	pd_comm_world_finalize(world);
	return failed ? 1 : 0;
}

/* The backend the model tests run on: PDIT_TEST_BACKEND names it (the
 * staged one runs every path a GPU takes), the CPU by default;
 * PDIT_TEST_QUANT_PRODUCTS its --quant-products (auto by default). */
static inline int pd_test_backend_new(struct pd_backend **be, enum pd_dtype compute, int threads)
{
	const char *name = getenv("PDIT_TEST_BACKEND");
	struct pd_backend_config cfg = { compute, threads, -1, 0, -1 };

	if (pd_backend_qproducts(getenv("PDIT_TEST_QUANT_PRODUCTS"), &cfg.quant_products))
		return -1;
	return pd_backend_new(be, name && *name ? name : "cpu", &cfg);
}

/* max |a - b| / max |ref| (the golden README's measure); NaN anywhere gives
 * +inf so it can never pass. */
static inline double pd_rel_err(const float *a, const float *ref, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)ref[i]);

		if (isnan(a[i]) || isnan(ref[i]))
			return INFINITY;
		if (d > num)
			num = d;
		if (fabs((double)ref[i]) > den)
			den = fabs((double)ref[i]);
	}
	return den > 0 ? num / den : num;
}

static inline double pd_max_abs_err(const float *a, const float *ref, size_t n)
{
	double num = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - (double)ref[i]);

		if (isnan(a[i]) || isnan(ref[i]))
			return INFINITY;
		if (d > num)
			num = d;
	}
	return num;
}

/* Fills with NaN so that elements a kernel forgot to write show up. */
static inline void pd_poison(float *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
}

#endif /* PD_TEST_H */
