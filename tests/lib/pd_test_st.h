/*
 * pd_test_st.h - what the reference tests share besides pd_test.h: a dump
 * that keeps every tensor by name, and the comparison of values with a
 * reference tensor of a safetensors file.
 *
 *   struct pd_test_store s = { 0 };
 *   struct pd_dump dump = { pd_test_store_fn, &s, -1 };
 *   ... run with &dump ...
 *   worst = pd_test_compare(file, "x", mine, n, st, "ref.x", tol, worst);
 *   pd_test_store_clear(&s);
 *
 *   int n;
 *   char **files = pd_test_files(dir, "forward-", &n);   // sorted paths
 *   pd_test_files_free(files, n);
 */
#ifndef PD_TEST_ST_H
#define PD_TEST_ST_H

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "pd_safetensors.h"
#include "pd_test.h"

#define PD_TEST_STORE_MAX 64

/* The paths DIR/NAME of the files whose names start with PREFIX, in name
 * order (*N of them; NULL and 0 when DIR cannot be read). */
static inline char **pd_test_files(const char *dir, const char *prefix, int *n)
{
	struct dirent **list;
	char **out;
	int nl = scandir(dir, &list, NULL, alphasort), k = 0;

	*n = 0;
	if (nl < 0)
		return NULL;
	out = calloc((size_t)nl + 1, sizeof(char *));
	for (int i = 0; i < nl; i++) {
		if (out && strncmp(list[i]->d_name, prefix, strlen(prefix)) == 0) {
			size_t len = strlen(dir) + strlen(list[i]->d_name) + 2;

			if ((out[k] = malloc(len)))
				snprintf(out[k++], len, "%s/%s", dir, list[i]->d_name);
		}
		free(list[i]);
	}
	free(list);
	*n = k;
	return out;
}

static inline void pd_test_files_free(char **files, int n)
{
	for (int i = 0; i < n; i++)
		free(files[i]);
	free(files);
}

struct pd_test_store {
	int n;                          /* tensors kept */
	char *name[PD_TEST_STORE_MAX];  /* their names */
	float *data[PD_TEST_STORE_MAX]; /* their values (host copies) */
	int64_t count[PD_TEST_STORE_MAX]; /* their value counts */
};

static inline void pd_test_store_fn(void *ctx, const char *name, int64_t index, const float *data, int ndim,
				    const int64_t *shape)
{
	struct pd_test_store *s = ctx;
	int64_t c = 1;

	(void)index;
	for (int i = 0; i < ndim; i++)
		c *= shape[i];
	if (s->n == PD_TEST_STORE_MAX)
		return;
	s->name[s->n] = strdup(name);
	s->data[s->n] = malloc((size_t)c * sizeof(float) + 1);
	memcpy(s->data[s->n], data, (size_t)c * sizeof(float));
	s->count[s->n++] = c;
}

static inline void pd_test_store_clear(struct pd_test_store *s)
{
	for (int i = 0; i < s->n; i++) {
		free(s->name[i]);
		free(s->data[i]);
	}
	s->n = 0;
}

/* Value I of an int64 tensor, read without assuming the file aligned it
 * (safetensors data offsets need not be multiples of 8). */
static inline int64_t pd_test_i64(const struct pd_st_tensor *t, int64_t i)
{
	int64_t v;

	memcpy(&v, (const char *)t->data + i * 8, 8);
	return v;
}

/* MINE (N values) against values [OFFSET, OFFSET + N) of tensor NAME of
 * ST: max|a - b| / max|ref| within TOL (a check, naming FILE and WHAT);
 * returns the larger of WORST and the error. */
static inline double pd_test_compare(const char *file, const char *what, const float *mine, size_t n,
				     const struct pd_st *st, const char *name, size_t offset, double tol,
				     double worst)
{
	const struct pd_st_tensor *t = pd_st_get(st, name);
	float *r;
	double e;

	PD_CHECK(t && (size_t)t->numel >= offset + n, "%s: no reference %s of %zu values", file, name, n);
	if (!t || (size_t)t->numel < offset + n)
		return worst;
	r = malloc((size_t)t->numel * sizeof(float) + 1);
	pd_st_read_f32(t, 0, (size_t)t->numel, r);
	e = pd_rel_err(mine, r + offset, n);
	PD_CHECK(e <= tol, "%s: %s differs by %.3g (limit %g)", file, what, e, tol);
	free(r);
	return e > worst ? e : worst;
}

#endif /* PD_TEST_ST_H */
