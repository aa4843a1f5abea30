/*
 * fuzz_main.c - replays inputs through a fuzz target without libFuzzer: every
 * file named, and every file in every folder named (not recursive). Exits 0
 * when each ran to the end; a crash or a sanitizer report ends it first.
 */
#include "fuzz.h"

#include <dirent.h>
#include <sys/stat.h>

static int pd_fuzz_run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "fuzz_main: cannot read %s\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "fuzz_main: cannot read %s\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int runs = 0, bad = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		DIR *d;
		struct dirent *e;

		if (stat(argv[i], &st)) {
			fprintf(stderr, "fuzz_main: no %s\n", argv[i]);
			bad++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			bad += pd_fuzz_run_file(argv[i]) != 0;
			runs++;
			continue;
		}
		d = opendir(argv[i]);
		while (d && (e = readdir(d))) {
			char path[4096];

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			bad += pd_fuzz_run_file(path) != 0;
			runs++;
		}
		if (d)
			closedir(d);
	}
	printf("%d inputs replayed%s\n", runs, bad ? ", some unreadable" : "");
	return bad || runs == 0;
}
