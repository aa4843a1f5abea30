/*
 * pd_prompts.c - prompts files.
 */
#include "pd_prompts.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* --prompts FILE: one prompt a line; blank lines are skipped. */
int pd_prompt_read_file(const char *path, char ***out, int *n)
{
	char *text = NULL, *line, *save = NULL;
	size_t len;
	int cap = 0;

	*out = NULL;
	*n = 0;
	if (pd_read_file(path, 64u << 20, &text, &len))
		return -1;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t l = strlen(line);
		char **g;

		if (l && line[l - 1] == '\r')
			line[--l] = 0;
		if (strspn(line, " \t") == l)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			g = realloc(*out, (size_t)cap * sizeof(char *));
			if (!g)
				goto oom;
			*out = g;
		}
		(*out)[*n] = pd_strdup(line);
		if (!(*out)[(*n)++])
			goto oom;
	}
	free(text);
	if (*n == 0)
		return pd_errorf("%s: no prompt in it (one prompt a line)", path);
	return 0;
oom:
	free(text);
	return pd_errorf("out of memory reading %s", path);
}
