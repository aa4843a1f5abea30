/*
 * fuzz_args.c - the command line's option parser with the option tables of
 * generate, check and bench: the input's first byte picks the command, the
 * rest is argv split at NUL bytes (at most 64 arguments).
 */
#include "fuzz.h"
#include "pdit_cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *cmds[] = { "generate", "check", "bench" };
	char *buf, *argv[67];
	int argc = 2;

	if (size == 0)
		return 0;
	buf = pd_fuzz_str(data + 1, size - 1);
	argv[0] = "pdit";
	argv[1] = (char *)cmds[data[0] % 3];
	for (size_t i = 0; i < size - 1 && argc < 66;) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;
	pd_cli_parse_only(argc, argv);
	free(buf);
	return 0;
}
