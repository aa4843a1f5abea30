/*
 * pd_util.c - errors, logging, checked allocation, number formats.
 */

#include "pd_util.h"

#include <errno.h>
#include <ftw.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Thread_local int pd_log_level = 1;
static _Thread_local void (*pd_log_write)(void *ctx, int level, const char *line);
static _Thread_local void *pd_log_ctx;
int pd_fault_rank;

static _Thread_local char pd_error_buf[1024];

void pd_abort_assert(const char *expr, const char *file, int line)
{
	fprintf(stderr, "pdit: internal error: assertion %s failed at %s:%d\n", expr, file, line);
	abort();
}

int pd_errorf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(pd_error_buf, sizeof(pd_error_buf), fmt, ap);
	va_end(ap);
	return -1;
}

int pd_error_prefix(const char *fmt, ...)
{
	char prefix[sizeof(pd_error_buf)], old[sizeof(pd_error_buf)];
	size_t k, n;
	va_list ap;

	/* the message is copied first: it is the buffer written; a long one
	 * loses its end */
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, pd_error_buf, sizeof(old));
	/* a prefix as long as the buffer (a long path) keeps room for ": " */
	k = strlen(prefix);
	k = k < sizeof(pd_error_buf) - 3 ? k : sizeof(pd_error_buf) - 3;
	memcpy(pd_error_buf, prefix, k);
	memcpy(pd_error_buf + k, ": ", 2);
	k += 2;
	n = strnlen(old, sizeof(old) - 1);
	n = n < sizeof(pd_error_buf) - 1 - k ? n : sizeof(pd_error_buf) - 1 - k;
	memcpy(pd_error_buf + k, old, n);
	pd_error_buf[k + n] = 0;
	return -1;
}

const char *pd_last_error(void)
{
	return pd_error_buf;
}

void pd_log(int level, const char *fmt, ...)
{
	char line[2048];
	va_list ap;

	if (level > pd_log_level)
		return;
	va_start(ap, fmt);
	if (pd_log_write) {
		vsnprintf(line, sizeof(line), fmt, ap);
		pd_log_write(pd_log_ctx, level, line);
	} else {
		vfprintf(stderr, fmt, ap);
	}
	va_end(ap);
}

struct pd_log_sink pd_log_use(const struct pd_log_sink *s)
{
	struct pd_log_sink old = { pd_log_level, pd_log_write, pd_log_ctx };

	pd_log_level = s->level;
	pd_log_write = s->write;
	pd_log_ctx = s->ctx;
	return old;
}

int pd_mul_size(size_t a, size_t b, size_t *out)
{
	if (a != 0 && b > SIZE_MAX / a)
		return pd_errorf("size overflow (%zu x %zu)", a, b);
	*out = a * b;
	return 0;
}

void *pd_malloc(size_t bytes, const char *what)
{
	void *p = malloc(bytes ? bytes : 1);

	if (!p)
		pd_errorf("out of memory (%zu bytes for %s)", bytes, what);
	return p;
}

void *pd_calloc(size_t count, size_t size, const char *what)
{
	size_t bytes = 0;
	void *p;

	if (pd_mul_size(count, size, &bytes))
		return NULL;
	p = calloc(bytes ? bytes : 1, 1);
	if (!p)
		pd_errorf("out of memory (%zu bytes for %s)", bytes, what);
	return p;
}

int pd_grow_floats(float **buf, size_t *cap, size_t n, const char *what)
{
	float *nb;

	if (n <= *cap)
		return 0;
	nb = realloc(*buf, (n ? n : 1) * sizeof(float));
	if (!nb)
		return pd_errorf("out of memory (%zu MB for %s)", (n * sizeof(float)) >> 20, what);
	*buf = nb;
	*cap = n;
	return 0;
}

char *pd_strdup(const char *s)
{
	char *d = strdup(s);

	if (!d)
		pd_errorf("out of memory");
	return d;
}

char *pd_strfmt(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		pd_errorf("out of memory");
		return NULL;
	}
	return s;
}

int pd_read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f)
		return pd_errorf("%s: %s", path, strerror(errno));
	for (;;) {
		size_t got;

		if (n + 4096 + 1 > cap) {
			size_t ncap = cap ? cap * 2 : 8192;
			char *nb = realloc(buf, ncap);

			if (!nb) {
				free(buf);
				fclose(f);
				return pd_errorf("%s: out of memory", path);
			}
			buf = nb;
			cap = ncap;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (n > max_bytes) {
			free(buf);
			fclose(f);
			return pd_errorf("%s: file larger than %zu bytes", path, max_bytes);
		}
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		free(buf);
		fclose(f);
		return pd_errorf("%s: read error", path);
	}
	fclose(f);
	buf[n] = 0;
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

int64_t pd_utf8_bad(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned c = u[i];
		size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 4;
		uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1f : k == 2 ? c & 0x0f : c & 0x07;

		if (k == 4 || i + k >= n)
			return (int64_t)i;
		for (size_t j = 1; j <= k; j++) {
			if ((u[i + j] & 0xc0) != 0x80)
				return (int64_t)i;
			cp = cp << 6 | (u[i + j] & 0x3f);
		}
		/* the shortest form only; no surrogates; Unicode's range */
		if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return (int64_t)i;
		i += k + 1;
	}
	return -1;
}

int pd_file_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int pd_is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int pd_mkdirs(const char *path)
{
	char *p = pd_strdup(path);
	char *s;

	if (!p)
		return -1;
	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0777) && errno != EEXIST) {
			int rc = pd_errorf("cannot create directory %s: %s", p, strerror(errno));

			free(p);
			return rc;
		}
		*s = '/';
	}
	if (mkdir(p, 0777) && errno != EEXIST) {
		int rc = pd_errorf("cannot create directory %s: %s", p, strerror(errno));

		free(p);
		return rc;
	}
	free(p);
	return 0;
}

/* The temporaries open now, for pd_out_remove_temporaries: a slot holds
 * its name from before the file is created until after it is renamed or
 * removed. Process-wide because a signal handler is. */
#define PD_OUT_SLOTS 16
static char *volatile pd_out_live[PD_OUT_SLOTS];

static void pd_out_track(char *tmp, int on)
{
	for (int i = 0; i < PD_OUT_SLOTS; i++)
		if (on ? !pd_out_live[i] : pd_out_live[i] == tmp) {
			pd_out_live[i] = on ? tmp : NULL;
			return;
		}
}

void pd_out_remove_temporaries(void)
{
	for (int i = 0; i < PD_OUT_SLOTS; i++) {
		char *t = pd_out_live[i];

		if (t)
			unlink(t);
	}
}

int pd_out_check(const char *path)
{
	char *dir = pd_strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
	int rc = 0;

	if (!dir)
		return -1;
	if (slash)
		*(slash == dir ? slash + 1 : slash) = 0;
	if (!*path || (slash && !slash[1] && slash != dir))
		rc = pd_errorf("cannot write '%s': not a file name", path);
	else if (pd_is_dir(path))
		rc = pd_errorf("cannot write %s: it is a folder", path);
	else if (!pd_is_dir(slash ? dir : "."))
		rc = access(dir, F_OK) == 0 ? pd_errorf("cannot write %s: %s is not a folder", path, dir)
					    : pd_errorf("cannot write %s: the folder %s does not exist", path, dir);
	else if (access(slash ? dir : ".", W_OK | X_OK))
		rc = pd_errorf("cannot write %s: the folder %s is not writable", path, slash ? dir : ".");
	free(dir);
	return rc;
}

int pd_out_open(struct pd_out_file *o, const char *path)
{
	struct stat st, lst;
	const char *target = path;
	int found = stat(path, &st) == 0, link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);

	o->path = path;
	o->f = NULL;
	o->tmp = o->real = NULL;
	if (found && S_ISDIR(st.st_mode))
		return pd_errorf("cannot write %s: it is a folder", path);
	if (link && found && S_ISREG(st.st_mode) && !(o->real = realpath(path, NULL)))
		return pd_errorf("cannot write %s: where its link leads: %s", path, strerror(errno));
	if (link && !found) {
		/* a link to where nothing is yet: its target, read as the link
		 * reads it (relative to the link's folder) */
		char to[4096];
		ssize_t n = readlink(path, to, sizeof(to) - 1);
		const char *slash = strrchr(path, '/');

		if (n < 0 || n == (ssize_t)sizeof(to) - 1)
			return pd_errorf("cannot write %s: where its link leads: %s", path,
					 n < 0 ? strerror(errno) : "a name too long");
		to[n] = 0;
		o->real = to[0] == '/' || !slash ? pd_strdup(to) : pd_strfmt("%.*s/%s", (int)(slash - path), path, to);
		if (!o->real)
			return -1;
	}
	if (o->real)
		target = o->real;
	/* a device or a pipe (or a link to one): in place */
	if (found && !S_ISREG(st.st_mode)) {
		o->f = fopen(path, "wb");
		if (!o->f) {
			int rc = pd_errorf("cannot write %s: %s", path, strerror(errno));

			free(o->real);
			o->real = NULL;
			return rc;
		}
		return 0;
	}
	o->tmp = pd_strfmt("%s.tmp", target);
	if (!o->tmp) {
		free(o->real);
		o->real = NULL;
		return -1;
	}
	pd_out_track(o->tmp, 1);
	o->f = fopen(o->tmp, "wb");
	if (!o->f) {
		/* the user's path, and its folder when that is what fails */
		int e = errno, rc = pd_out_check(path) ? -1 : pd_errorf("cannot write %s: %s", path, strerror(e));

		pd_out_track(o->tmp, 0);
		free(o->tmp);
		free(o->real);
		o->tmp = o->real = NULL;
		return rc;
	}
	return 0;
}

int pd_out_write(struct pd_out_file *o, const void *data, size_t n)
{
	if (n && fwrite(data, 1, n, o->f) != n)
		return pd_errorf("%s: write failed: %s", o->path, strerror(errno));
	return 0;
}

void pd_out_abort(struct pd_out_file *o)
{
	if (o->f)
		fclose(o->f);
	if (o->tmp) {
		unlink(o->tmp);
		pd_out_track(o->tmp, 0);
	}
	free(o->tmp);
	free(o->real);
	o->f = NULL;
	o->tmp = o->real = NULL;
}

int pd_out_commit(struct pd_out_file *o)
{
	int rc = 0;

	/* on disk before it takes the name: after a crash the name holds the
	 * old file or the whole new one */
	if (pd_fault("write", 0))
		rc = -1;
	else if (fflush(o->f) || (o->tmp && fsync(fileno(o->f))))
		rc = pd_errorf("%s: write failed: %s", o->path, strerror(errno));
	if (fclose(o->f) && !rc)
		rc = pd_errorf("%s: write failed: %s", o->path, strerror(errno));
	o->f = NULL;
	if (o->tmp) {
		if (!rc && rename(o->tmp, o->real ? o->real : o->path))
			rc = pd_errorf("cannot write %s: %s", o->path, strerror(errno));
		if (rc)
			unlink(o->tmp);
		pd_out_track(o->tmp, 0);
	}
	free(o->tmp);
	free(o->real);
	o->tmp = o->real = NULL;
	return rc;
}

static int pd_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int pd_remove_tree(const char *path)
{
	if (nftw(path, pd_remove_one, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
		return pd_errorf("cannot remove %s: %s", path, strerror(errno));
	return 0;
}

double pd_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double pd_status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kb = 0;
	size_t klen = strlen(key);

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, klen) == 0) {
			kb = atof(line + klen);
			break;
		}
	}
	fclose(f);
	return kb;
}

int pd_env_on(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] && strcmp(v, "0") != 0;
}

long pd_env_long(const char *name, long lo, long hi, long dflt)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !v[0])
		return dflt;
	errno = 0;
	x = strtol(v, &end, 10);
	return *end || errno || x < lo || x > hi ? dflt : x;
}

double pd_mem_available_mb(void)
{
	FILE *f;
	char line[256];
	double kb = 0;
	const char *env = getenv("PDIT_MEM_AVAILABLE_MB");

	/* a container's limit that /proc/meminfo does not show, or a test's */
	if (env && env[0]) {
		char *end;
		double mb = strtod(env, &end);

		if (!*end && mb > 0)
			return mb;
	}
	f = fopen("/proc/meminfo", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "MemAvailable:", 13) == 0) {
			kb = atof(line + 13);
			break;
		}
	fclose(f);
	return kb / 1024.0;
}

int pd_cpus_here(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	/* a cpuset, taskset or mpirun's binding: the threads run there only */
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	return online > 0 ? (int)online : 1;
}

double pd_peak_rss_mb(void)
{
	return pd_status_kb("VmHWM:") / 1024.0;
}

double pd_current_rss_mb(void)
{
	return pd_status_kb("VmRSS:") / 1024.0;
}

float pd_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { .u = (uint32_t)h << 16 };

	return v.f;
}

uint16_t pd_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } v = { .f = f };

	if ((v.u & 0x7fffffff) > 0x7f800000)	/* NaN stays a (quiet) NaN */
		return (uint16_t)((v.u >> 16) | 0x40);
	return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}

float pd_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	union { uint32_t u; float f; } v;

	if (exp == 0) {
		/* zero or subnormal: value = man * 2^-24 */
		float x = (float)man * (1.0f / 16777216.0f);

		return sign ? -x : x;
	}
	if (exp == 31)
		v.u = sign | 0x7f800000 | (man << 13);
	else
		v.u = sign | ((exp + 112) << 23) | (man << 13);
	return v.f;
}

uint16_t pd_f32_to_f16(float f)
{
	union { float f; uint32_t u; } v = { .f = f };
	uint32_t sign = (v.u >> 16) & 0x8000;
	uint32_t a = v.u & 0x7fffffff;
	int32_t exp;
	uint32_t man, half;

	if (a > 0x7f800000)
		return (uint16_t)(sign | 0x7e00);
	if (a >= 0x47800000)	/* >= 65536 after rounding: inf */
		return (uint16_t)(sign | 0x7c00);
	exp = (int32_t)(a >> 23) - 127 + 15;
	man = a & 0x7fffff;
	if (exp <= 0) {
		/* subnormal half: shift in the implicit bit, round to nearest even */
		uint32_t shift, full, rem, halfway;

		if (exp < -10)
			return (uint16_t)sign;
		full = man | 0x800000;
		shift = (uint32_t)(14 - exp);
		half = full >> shift;
		rem = full & ((1u << shift) - 1);
		halfway = 1u << (shift - 1);
		if (rem > halfway || (rem == halfway && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	half = ((uint32_t)exp << 10) | (man >> 13);
	if ((man & 0x1fff) > 0x1000 || ((man & 0x1fff) == 0x1000 && (half & 1)))
		half++;	/* may carry into the exponent, which is still right */
	return (uint16_t)(sign | half);
}

int pd_fault(const char *site, long long index)
{
	const char *env = getenv("PDIT_INJECT_FAULT");
	size_t n = strlen(site);
	long long at, rank;
	char *end;

	if (!env || strncmp(env, site, n) != 0 || env[n] != ':')
		return 0;
	at = strtoll(env + n + 1, &end, 10);
	if (end == env + n + 1 || at != index)
		return 0;
	if (end[0] == ':' && end[1] >= '0' && end[1] <= '9') {
		rank = strtoll(end + 1, &end, 10);
		if (rank != pd_fault_rank)
			return 0;
	}
	if (strcmp(end, ":hang") == 0) {
		pd_log(0, "pdit: rank %d: hanging at %s %lld (PDIT_INJECT_FAULT=%s)\n", pd_fault_rank, site, index, env);
		for (;;)
			sleep(1);
	}
	return pd_errorf("injected fault at %s %lld (PDIT_INJECT_FAULT=%s)", site, index, env);
}

static int pd_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double pd_median_sort(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), pd_cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
