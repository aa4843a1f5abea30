/*
 * pd_util.h - errors, logging (pd_api.h: the calls a program shares),
 * checked allocation, output files, number formats.
 *
 * Error convention used by every pdit library function: return 0 on success
 * and -1 on failure after recording one human-readable line with
 * pd_errorf(); the caller (ultimately the CLI) prints pd_last_error().
 * Library code never exits.  Programmer errors (a broken invariant, not bad
 * input) stop the process through PD_ASSERT with file:line.
 */
#ifndef PD_UTIL_H
#define PD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pd_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PD_ASSERT(x) \
	do { \
		if (!(x)) \
			pd_abort_assert(#x, __FILE__, __LINE__); \
	} while (0)

void pd_abort_assert(const char *expr, const char *file, int line);

/* Fault injection for the failure tests: with PDIT_INJECT_FAULT set to
 * "SITE:INDEX" or "SITE:INDEX:RANK", pd_fault(SITE, INDEX) records
 * "injected fault ..." and returns -1 (on rank RANK only, pd_fault_rank
 * being this process's rank, set by the command line); otherwise 0. With
 * ":hang" appended the process stops there for good instead (a rank that
 * never reaches its next transfer).
 * Sites: "load" (index 0, before a rank reads its weights), "step" (index:
 * the denoising step, before its transformer calls), "write" (index 0, an
 * output file written but not yet renamed into place). */
extern int pd_fault_rank;
int pd_fault(const char *site, long long index);

/* Allocation that records "out of memory (N bytes for WHAT)" on failure. */
void *pd_malloc(size_t bytes, const char *what);
void *pd_calloc(size_t count, size_t size, const char *what);
/* Grows *BUF (capacity *CAP floats) to hold N floats; the contents are kept. */
int pd_grow_floats(float **buf, size_t *cap, size_t n, const char *what);
/* count*size with overflow check; returns 0 and records an error on overflow. */
int pd_mul_size(size_t a, size_t b, size_t *out);

char *pd_strdup(const char *s);
/* Heap string from a printf format (NULL on allocation failure). */
char *pd_strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The offset of the first byte of S[0..N) that is no part of well-formed
 * UTF-8 (an overlong form, a surrogate, past U+10FFFF, a cut sequence), or
 * -1 when all of it is. */
int64_t pd_utf8_bad(const char *s, size_t n);

/* Reads a whole (small) file; appends a NUL. Caps the size at max_bytes. */
int pd_read_file(const char *path, size_t max_bytes, char **out, size_t *len);
int pd_file_exists(const char *path);
int pd_is_dir(const char *path);
/* mkdir -p for one path; existing directories are fine. */
int pd_mkdirs(const char *path);

/* Output files are written to PATH.tmp and renamed when complete, so an
 * interrupted run never leaves a half-written file under the requested name
 * and an existing file is only replaced by a complete one. A symbolic link
 * keeps pointing where it did: its target is the file replaced. What is no
 * file (/dev/null, a pipe, a terminal) is written in place: a rename would
 * put a plain file where the device was. */
struct pd_out_file {
	FILE *f;                        /* open on the temporary name, or on PATH itself (tmp NULL) */
	char *tmp;                      /* PATH.tmp (or the link's target's), NULL when written in place */
	char *real;                     /* the target of PATH when it is a link (owned), else NULL */
	const char *path;               /* the final name (borrowed) */
};
int pd_out_open(struct pd_out_file *o, const char *path);
/* Whether PATH can be written as an output (not a folder, its folder there
 * and writable), before any work: 0, or -1 with a message naming PATH. */
int pd_out_check(const char *path);
int pd_out_write(struct pd_out_file *o, const void *data, size_t n);
/* Closes and renames; on any failure the temporary file is removed. */
int pd_out_commit(struct pd_out_file *o);
/* Closes and removes the temporary file (after a failure). */
void pd_out_abort(struct pd_out_file *o);
/* Removes every temporary file being written now: only unlink(2), so a
 * signal handler may call it (the command line's does, on Ctrl-C). */
void pd_out_remove_temporaries(void);

/* rm -r PATH (a file or a folder); 0, or -1 with a message. */
int pd_remove_tree(const char *path);

/* N items cut into P nearly equal chunks: chunk I starts here and holds
 * N/P items, one more for the first N%P chunks (token bands, image bands,
 * slices of a batch). */
static inline int64_t pd_chunk_start(int64_t n, int p, int i)
{
	return (int64_t)i * (n / p) + (i < n % p ? i : n % p);
}

static inline int64_t pd_chunk_len(int64_t n, int p, int i)
{
	return n / p + (i < n % p);
}

/* The environment's switches (docs/environment.md): whether NAME is set to
 * anything but "" or "0" (PDIT_NO_AMX=0 leaves AMX on); NAME's whole
 * decimal number when it lies in [LO, HI], else DFLT (unset, not a
 * number, out of range). */
int pd_env_on(const char *name);
long pd_env_long(const char *name, long lo, long hi, long dflt);

double pd_now(void);
/* The median of V[0..n) (n > 0), sorting V in place. */
double pd_median_sort(double *v, int n);
/* The CPUs this process may run on: its affinity mask's (a container's
 * cpuset, taskset, mpirun's binding), else every CPU online. */
int pd_cpus_here(void);
/* Peak resident set size of this process in MiB (from /proc/self/status). */
double pd_peak_rss_mb(void);
/* MemAvailable of /proc/meminfo in MB, or PDIT_MEM_AVAILABLE_MB when set
 * (a container's limit that /proc/meminfo does not show; the tests'
 * machine of a chosen size); 0 when unknown. */
double pd_mem_available_mb(void);
double pd_current_rss_mb(void);

/* IEEE half and bfloat16 conversions. bf16 rounding is to nearest even,
 * which is what PyTorch's .to(torch.bfloat16) does. */
float pd_bf16_to_f32(uint16_t h);
uint16_t pd_f32_to_bf16(float f);
float pd_f16_to_f32(uint16_t h);
uint16_t pd_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif

#endif /* PD_UTIL_H */
