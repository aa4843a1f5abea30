/*
 * pd_args.h - table-driven command-line options for the pdit subcommands.
 *
 * Each subcommand lists its options once; parsing, type checking, help
 * text and the messages for bad input ("-H/--height expects an integer,
 * got 'x'") come from the table.
 */
#ifndef PD_ARGS_H
#define PD_ARGS_H

#include <stdint.h>

enum pd_arg_type {
	PD_ARG_FLAG,                    /* no value; sets an int to 1 */
	PD_ARG_INT,                     /* int */
	PD_ARG_COUNT,                   /* int of at least 1: a count or a size, whose default is its
					 * absence (a given 0 or negative is refused, never "the default") */
	PD_ARG_U64,                     /* uint64_t */
	PD_ARG_FLOAT,                   /* float */
	PD_ARG_DOUBLE,                  /* double: a value the program computes with as Python does */
	PD_ARG_STRING,                  /* const char * (borrowed from argv) */
	PD_ARG_LIST,                    /* struct pd_arg_list: every value of a repeatable flag */
};

/* A repeatable flag's values, in order (borrowed from argv). */
#define PD_ARG_LIST_MAX 16
struct pd_arg_list {
	char *v[PD_ARG_LIST_MAX];       /* argv's own strings (writable, as argv's are) */
	int n;                          /* how many were given */
};

struct pd_arg {
	const char *long_name;          /* "--height" */
	char short_name;                /* 'H', or 0 */
	enum pd_arg_type type;          /* value type */
	void *dest;                     /* where the value goes */
	const char *metavar;            /* "N", "FILE", ... (NULL for flags) */
	const char *help;               /* one line */
	int *seen;                      /* set to 1 when given (may be NULL) */
};

/* Parses argv[first..argc) against ARGS (terminated by a zeroed entry).
 * Positional arguments are collected into POS (at most max_pos). Returns 0,
 * 1 when --help was asked for, or -1 with pd_last_error() naming the flag. */
int pd_args_parse(const char *cmd, const struct pd_arg *args, int argc, char **argv, int first, const char **pos,
		  int max_pos, int *n_pos);
void pd_args_help(const char *usage, const struct pd_arg *args, const char *examples);

#endif /* PD_ARGS_H */
