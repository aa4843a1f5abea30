/*
 * fuzz.h - helpers shared by the fuzz targets (fuzz_*.c).
 *
 * Every target is one LLVMFuzzerTestOneInput. Built with clang and
 * -fsanitize=fuzzer it is a libFuzzer binary (scripts/fuzz.sh); built with
 * fuzz_main.c instead it replays files, which is how the seed corpus and the
 * regressions run in CTest under the normal and the sanitizer builds.
 *
 * The parsers read files, so a target writes its input into a private
 * scratch folder first (in /dev/shm when there is one: no disk traffic).
 */
#ifndef PD_FUZZ_H
#define PD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char pd_fuzz_dirname[64];
static char pd_fuzz_written[8][512];    /* files to remove at exit */

static inline void pd_fuzz_cleanup(void)
{
	for (int i = 0; i < 8; i++)
		if (pd_fuzz_written[i][0])
			unlink(pd_fuzz_written[i]);
	rmdir(pd_fuzz_dirname);
}

/* The scratch folder, made on first use and removed at exit. */
static inline const char *pd_fuzz_dir(void)
{
	char *dir = pd_fuzz_dirname;

	if (!dir[0]) {
		strcpy(dir, access("/dev/shm", W_OK) == 0 ? "/dev/shm/pdit-fuzz-XXXXXX" : "/tmp/pdit-fuzz-XXXXXX");
		if (!mkdtemp(dir)) {
			perror("pdit fuzz: mkdtemp");
			abort();
		}
		atexit(pd_fuzz_cleanup);
	}
	return dir;
}

/* DIR/NAME with LEN bytes of DATA; SLOT (0..7) names the buffer that keeps
 * the path, valid until the slot is used again. */
static inline const char *pd_fuzz_file(int slot, const char *name, const void *data, size_t len)
{
	char *path = pd_fuzz_written[slot];
	FILE *f;

	snprintf(path, sizeof(pd_fuzz_written[slot]), "%s/%s", pd_fuzz_dir(), name);
	f = fopen(path, "wb");
	if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f)) {
		perror("pdit fuzz: writing the input");
		abort();
	}
	return path;
}

/* Splits DATA at the first occurrence of SEP (a byte string unlikely in
 * real files), so one input can carry two files; without SEP the second
 * part is empty. */
static inline void pd_fuzz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **b,
				 size_t *nb, size_t *na)
{
	size_t k = strlen(sep);

	for (size_t i = 0; i + k <= size; i++)
		if (memcmp(data + i, sep, k) == 0) {
			*na = i;
			*b = data + i + k;
			*nb = size - i - k;
			return;
		}
	*na = size;
	*b = data + size;
	*nb = 0;
}

/* A NUL-terminated copy (malloc'd) of DATA. */
static inline char *pd_fuzz_str(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = 0;
	return s;
}

#endif /* PD_FUZZ_H */
