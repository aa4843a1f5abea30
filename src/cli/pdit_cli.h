/*
 * pdit_cli.h - helpers shared by the command-line files.
 */
#ifndef PDIT_CLI_H
#define PDIT_CLI_H

#include "pd_comm.h"
#include "pdit.h"

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

/* The option parsing of generate, check, bench or serve (argv[1]) alone,
 * nothing read or run, help not printed: 0 parsed, 1 help asked, -1
 * refused with a message. For the argument fuzzer. */
int pd_cli_parse_only(int argc, char **argv);
int pd_cmd_generate_parse_only(int argc, char **argv);
int pd_cmd_check_parse_only(int argc, char **argv);
int pd_cmd_bench_parse_only(int argc, char **argv);
int pd_cmd_serve_parse_only(int argc, char **argv);

/* The first lines of a PNG's parameters: the prompt and the negative
 * prompt, as other tools write them (malloc'd). */
char *pd_cli_prompt_source(const char *prompt, const char *negative);
/* The whole "parameters" text of picture SEED's PNG (malloc'd): SOURCE,
 * then pdit's settings; pdit generate and pdit serve write the same. */
char *pd_cli_parameters(const char *source, uint64_t seed, const struct pd_result *res, const char *model,
			const char *dtype);

int pd_cmd_serve(struct pd_comm *world, int argc, char **argv);
/* The first signal only sets the flag (pd_cli_interrupted): a long-lived
 * command stops at its own pace; a second one stops the process now. */
void pd_cli_signals_deferred(void);
/* PATH (or NULL: none) is removed when a signal ends the process: pdit
 * serve's --pid-file, which must not outlive the process it names. */
void pd_cli_signal_removes(const char *path);
/* SIGUSR1 (which mpirun passes on to every rank) asks rank 0 to stop
 * after the running request, the others to follow it: pdit serve's clean
 * stop under a service manager. */
void pd_cli_catch_stop_request(void);
/* A signal came from the parent process: under mpirun, the launcher ending
 * the job (a process failed, or mpirun itself was signalled). */
int pd_cli_signal_from_launcher(void);

/* Ctrl-C, SIGTERM, SIGHUP (pd_interrupt.c): the temporaries being written
 * are removed, rank 0 says "interrupted", the process exits with 130. */
void pd_cli_catch_signals(int rank, int size);
/* The command's outputs are written and reported ("done"): a signal from
 * here on ends the process with status 0, saying nothing. */
void pd_cli_work_done(void);
/* This process is ending the job with its own message: a signal now only
 * removes the temporaries. */
void pd_cli_stopping(void);
/* A signal came while a folder was being written (pd_cli_pending_tree). */
int pd_cli_interrupted(void);
/* While DIR (not NULL) is being written, a signal only sets the flag: the
 * command removes DIR when its write returns and stops with
 * pd_cli_stop_interrupted. */
void pd_cli_pending_tree(const char *dir);
int pd_cli_stop_interrupted(void);

/* Progress of a run on rank 0's stderr (pd_progress.c). */
struct pd_cli_progress {
	int enabled;                    /* shows anything (rank 0, not --quiet) */
	int tty;                        /* stderr is a terminal: one line rewritten in place */
	int open_line;                  /* that line has no newline yet */
	double t_start;                 /* when the command began */
	double phase_s[PD_PHASE_PICTURES + 1]; /* seconds per phase (enum pd_phase), summed */
	int steps;                      /* denoising steps run */
	double write_s;                 /* seconds writing the outputs */
};
void pd_cli_progress_init(struct pd_cli_progress *p, int enabled);
/* The engine's on_progress and log callbacks (CTX: the progress). */
void pd_cli_progress_cb(void *ctx, const struct pd_progress *pg);
void pd_cli_progress_log(void *ctx, int level, const char *line);
/* "done in T s (load, encode, steps, decode, write), peak memory". */
void pd_cli_progress_summary(struct pd_cli_progress *p, double peak_mb);
/* An error is about to be printed: the line being rewritten goes. */
void pd_cli_progress_clear(void);
/* P is going away (the end of the command). */
void pd_cli_progress_end(struct pd_cli_progress *p);

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv);
int pd_cmd_check(struct pd_comm *world, int argc, char **argv);
int pd_cmd_bench(struct pd_comm *world, int argc, char **argv);
int pd_cmd_encode(struct pd_comm *world, int argc, char **argv);
int pd_cmd_inspect(int argc, char **argv);
int pd_cmd_quantize(int argc, char **argv);
int pd_cmd_plan(int argc, char **argv);

#endif /* PDIT_CLI_H */
