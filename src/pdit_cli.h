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

/* A failure in the middle of collective work: print and end the whole job. */
void pd_cli_abort(struct pd_comm *world);

int pd_cli_dtype(const char *s, enum pd_dtype *out);

/* Threads per process: -t when given, else the cores divided among the
 * processes on this machine. */
int pd_cli_threads(struct pd_comm *world, int requested);

/* MC: this machine as pdit plan models it by default (a product's rate
 * MATMUL in GFLOP/s, or when 0 timed here, the best of TIMINGS; the
 * elementwise kernels' rate timed here, the best of TIMINGS; DEVICES
 * processes sharing its cores and memory, PER_NODE of them a node;
 * shared-memory links). 0, or -1 with a message. */
struct pd_plan_machine;
struct pd_plan_work;
int pd_cli_machine_here(struct pd_plan_machine *mc, const struct pd_plan_work *w, int devices, int per_node,
			int timings, double matmul);

/* Rates of this backend, timed now (medians of several runs): a matrix
 * product of M x K x N in GFLOP/s, and the elementwise kernels a block
 * repeats on every tensor-parallel shard over ROWS x DIM, in bytes/s.
 * 0 when they could not run. */
struct pd_backend;
double pd_bench_matmul(struct pd_backend *be, int64_t M, int64_t K, int64_t N);
double pd_bench_elementwise(struct pd_backend *be, int64_t rows, int64_t dim);

/* Runs the command argv[1]; its exit status. */
int pd_dispatch(struct pd_comm *world, int argc, char **argv);

/* The option parsing of generate, check or bench (argv[1]) alone, nothing
 * read or run, help not printed: 0 parsed, 1 help asked, -1 refused with a
 * message. For the argument fuzzer. */
int pd_cli_parse_only(int argc, char **argv);

int pd_cmd_generate(struct pd_comm *world, int argc, char **argv);
int pd_cmd_check(struct pd_comm *world, int argc, char **argv);
int pd_cmd_bench(struct pd_comm *world, int argc, char **argv);
int pd_cmd_encode(int argc, char **argv);
int pd_cmd_plan(int argc, char **argv);

#endif /* PDIT_CLI_H */
