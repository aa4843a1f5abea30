/*
 * pdit_cli.h - helpers shared by the command-line files.
 */
#ifndef PDIT_CLI_H
#define PDIT_CLI_H

#include "pd_comm.h"
#include "pd_safetensors.h"

#ifndef PDIT_VERSION
#define PDIT_VERSION "0.0.0"
#endif

/* Prints pd_last_error() as "pdit: <message>" and returns 1. */
int pd_cli_fail(void);

/* After a phase every rank goes through: 1 when any rank failed, in which
 * case the lowest failing rank has printed its message (prefixed with its
 * rank when it is not rank 0). */
int pd_cli_any_failed(struct pd_comm *world, int failed);

/* After a failed agreement: the lowest failing rank prints its message
 * (prefixed with its rank when it is not rank 0); a rank that failed alone,
 * without an agreement (failed_rank -1), prints its own. */
void pd_cli_report(struct pd_comm *world);

/* A failure in the middle of collective work: print and end the whole job. */
void pd_cli_abort(struct pd_comm *world);


/* Runs the command argv[1]; its exit status. */
int pd_dispatch(struct pd_comm *world, int argc, char **argv);

/* The option parsing of generate, check or bench (argv[1]) alone, nothing
 * read or run, help not printed: 0 parsed, 1 help asked, -1 refused with a
 * message. For the argument fuzzer. */
int pd_cli_parse_only(int argc, char **argv);

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv);
int pd_cmd_check(struct pd_comm *world, int argc, char **argv);
int pd_cmd_bench(struct pd_comm *world, int argc, char **argv);
int pd_cmd_encode(struct pd_comm *world, int argc, char **argv);
int pd_cmd_plan(int argc, char **argv);

#endif /* PDIT_CLI_H */
