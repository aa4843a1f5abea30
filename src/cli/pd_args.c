/*
 * pd_args.c - table-driven command-line options.
 */
#include "pd_args.h"
#include "pd_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void pd_arg_name(const struct pd_arg *a, char *buf, size_t len)
{
	if (a->short_name)
		snprintf(buf, len, "-%c/%s", a->short_name, a->long_name);
	else
		snprintf(buf, len, "%s", a->long_name);
}

static int pd_arg_set(const struct pd_arg *a, const char *v)
{
	char name[64], *end;

	pd_arg_name(a, name, sizeof(name));
	errno = 0;
	switch (a->type) {
	case PD_ARG_INT:
	case PD_ARG_COUNT: {
		long x = strtol(v, &end, 10);

		if (!*v || *end)
			return pd_errorf("%s expects an integer, got '%s'", name, v);
		if (x < -2147483647L && a->type == PD_ARG_COUNT)
			return pd_errorf("%s must be at least 1 (got %s)", name, v);
		if (errno || x < -2147483647L || x > 2147483647L)
			return pd_errorf("%s is out of range: %s (%s 2147483647)", name, v,
					 a->type == PD_ARG_COUNT ? "at most" : "from -2147483647 to");
		if (a->type == PD_ARG_COUNT && x < 1)
			return pd_errorf("%s must be at least 1 (got %ld); leave it out for the default", name, x);
		*(int *)a->dest = (int)x;
		break;
	}
	case PD_ARG_U64: {
		unsigned long long x;

		if (*v == '-')
			return pd_errorf("%s expects a non-negative integer, got '%s'", name, v);
		x = strtoull(v, &end, 10);
		if (!*v || *end)
			return pd_errorf("%s expects a non-negative integer, got '%s'", name, v);
		if (errno)
			return pd_errorf("%s is out of range: %s (at most 18446744073709551615)", name, v);
		*(uint64_t *)a->dest = (uint64_t)x;
		break;
	}
	case PD_ARG_FLOAT: {
		double x = strtod(v, &end);

		if (!*v || *end || errno || !isfinite(x))
			return pd_errorf("%s expects a number, got '%s'", name, v);
		*(float *)a->dest = (float)x;
		break;
	}
	case PD_ARG_DOUBLE: {
		double x = strtod(v, &end);

		if (!*v || *end || errno || !isfinite(x))
			return pd_errorf("%s expects a number, got '%s'", name, v);
		*(double *)a->dest = x;
		break;
	}
	case PD_ARG_STRING:
		*(const char **)a->dest = v;
		break;
	case PD_ARG_LIST: {
		struct pd_arg_list *l = a->dest;

		if (l->n == PD_ARG_LIST_MAX)
			return pd_errorf("%s: at most %d", name, PD_ARG_LIST_MAX);
		l->v[l->n++] = (char *)v;
		break;
	}
	case PD_ARG_FLAG:
		*(int *)a->dest = 1;
		break;
	}
	if (a->seen)
		*a->seen = 1;
	return 0;
}

/* Spellings that name one option wherever either is defined. */
static const char *const pd_arg_aliases[][2] = {
	{ "--out", "--output" },
};

static const struct pd_arg *pd_arg_find(const struct pd_arg *args, const char *key)
{
	for (const struct pd_arg *p = args; p->long_name; p++)
		if (strcmp(p->long_name, key) == 0)
			return p;
	for (size_t i = 0; i < sizeof(pd_arg_aliases) / sizeof(pd_arg_aliases[0]); i++)
		for (int k = 0; k < 2; k++)
			if (strcmp(key, pd_arg_aliases[i][k]) == 0)
				for (const struct pd_arg *p = args; p->long_name; p++)
					if (strcmp(p->long_name, pd_arg_aliases[i][1 - k]) == 0)
						return p;
	return NULL;
}

/* Options whose repetition is a mistake, not a change of mind: two -p
 * look like two pictures (--prompts FILE makes those), two -r like two
 * Kontext references (one is read). Any other option given twice takes
 * its last value. */
static const char *const pd_arg_once[] = { "--prompt", "--negative-prompt", "--ref-image", "--init-img", "--mask" };

static int pd_arg_only_once(const struct pd_arg *a)
{
	for (size_t i = 0; i < sizeof(pd_arg_once) / sizeof(pd_arg_once[0]); i++)
		if (strcmp(a->long_name, pd_arg_once[i]) == 0)
			return 1;
	return 0;
}

int pd_args_parse(const char *cmd, const struct pd_arg *args, int argc, char **argv, int first, const char **pos,
		  int max_pos, int *n_pos)
{
	unsigned char given[128] = { 0 };

	*n_pos = 0;
	for (int i = first; i < argc; i++) {
		const char *s = argv[i], *val = NULL;
		const struct pd_arg *a = NULL;
		char key[128];

		if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0)
			return 1;
		if (s[0] != '-' || s[1] == 0) {
			if (*n_pos >= max_pos)
				return pd_errorf("%s: unexpected argument '%s'", cmd, s);
			pos[(*n_pos)++] = s;
			continue;
		}
		if (s[1] == '-') {
			const char *eq = strchr(s, '=');
			size_t n = eq ? (size_t)(eq - s) : strlen(s);

			if (n >= sizeof(key))
				return pd_errorf("%s: unknown option '%s'", cmd, s);
			memcpy(key, s, n);
			key[n] = 0;
			if (eq)
				val = eq + 1;
			a = pd_arg_find(args, key);
		} else if (s[2] == 0) {
			for (const struct pd_arg *p = args; p->long_name; p++)
				if (p->short_name == s[1])
					a = p;
		}
		if (!a)
			return pd_errorf("%s: unknown option '%s' (see pdit %s --help)", cmd, s, cmd);
		if (a->type == PD_ARG_FLAG) {
			if (val)
				return pd_errorf("%s: %s takes no value", cmd, a->long_name);
		} else if (!val) {
			if (i + 1 >= argc)
				return pd_errorf("%s: %s needs a value (%s)", cmd, a->long_name, a->metavar);
			val = argv[++i];
		}
		if (pd_arg_only_once(a) && a - args < (long)sizeof(given)) {
			if (given[a - args]) {
				char name[64];

				pd_arg_name(a, name, sizeof(name));
				if (a->short_name == 'p' || a->short_name == 'n')
					return pd_errorf("%s: %s given twice: give it once (several prompts: --prompts FILE, "
							 "one a line)", cmd, name);
				if (strcmp(a->long_name, "--ref-image") == 0)
					return pd_errorf("%s: %s given twice: FLUX.1 Kontext takes one reference picture "
							 "(as diffusers' FluxKontextPipeline)", cmd, name);
				return pd_errorf("%s: %s given twice: a request starts from one picture and one mask",
						 cmd, name);
			}
			given[a - args] = 1;
		}
		if (pd_arg_set(a, val ? val : ""))
			return -1;
	}
	return 0;
}

void pd_args_help(const char *usage, const struct pd_arg *args, const char *examples)
{
	printf("%s\n\nOptions:\n", usage);
	for (const struct pd_arg *a = args; a->long_name; a++) {
		char left[64];

		if (a->short_name)
			snprintf(left, sizeof(left), "-%c, %s%s%s", a->short_name, a->long_name, a->metavar ? " " : "",
				 a->metavar ? a->metavar : "");
		else
			snprintf(left, sizeof(left), "    %s%s%s", a->long_name, a->metavar ? " " : "",
				 a->metavar ? a->metavar : "");
		printf("  %-30s %s\n", left, a->help);
	}
	printf("  %-30s %s\n", "-h, --help", "show this help");
	{
		int prompts = 0;

		/* the exception only where the command has those flags */
		for (const struct pd_arg *a = args; a->long_name; a++)
			prompts |= strcmp(a->long_name, "--prompt") == 0;
		printf("\nAn option given twice takes its last value%s.\n", prompts ? " (but -p and -n: once)" : "");
	}
	if (examples)
		printf("\nExamples:\n%s", examples);
}
