/*
 * pd_prompts.c - prompts files.
 */
#include "pd_prompts.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* --prompts FILE: one prompt a line; blank lines are skipped. A line that
 * is no UTF-8 text, or holds a NUL, is refused with its number (a prompt
 * cut at a NUL, or bytes no tokenizer reads as diffusers does, would make
 * another picture than the file says). */
int pd_prompt_read_file(const char *path, char ***out, int *n)
{
	char *text = NULL, *line, *p, *end;
	size_t len;
	int cap = 0, no = 0;

	*out = NULL;
	*n = 0;
	if (pd_read_file(path, 64u << 20, &text, &len))
		return -1;
	for (p = text, end = text + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), **g;
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		int64_t bad;
		int nul;

		line = p;
		p = nl ? nl + 1 : end;
		no++;
		line[l] = 0;
		nul = memchr(line, 0, l) != NULL;
		if (nul || (bad = pd_utf8_bad(line, l)) >= 0) {
			int rc = nul ? pd_errorf("%s:%d: a NUL byte in the line", path, no)
				     : pd_errorf("%s:%d: not UTF-8 text (byte 0x%02x at column %lld)", path, no,
								(unsigned char)line[bad], (long long)bad + 1);

			free(text);
			for (int i = 0; i < *n; i++)
				free((*out)[i]);
			free(*out);
			*out = NULL;
			*n = 0;
			return rc;
		}
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
