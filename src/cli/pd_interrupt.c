/*
 * pd_interrupt.c - Ctrl-C and kill: what a run was writing is removed, the
 * command says "interrupted" once (rank 0; mpirun passes the signal to
 * every rank) and exits with 130. Only the command line catches signals:
 * the library never does.
 */
#include "pd_util.h"
#include "pdit_cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t pd_int_signal;
static volatile sig_atomic_t pd_int_deferred;
static int pd_int_rank;
static int pd_int_tty;                  /* stderr is a terminal: clear a progress line first */

static void pd_int_handler(int sig)
{
	static const char tty_msg[] = "\r\033[Kpdit: interrupted\n";
	const char *msg = pd_int_tty ? tty_msg : tty_msg + 4;

	pd_int_signal = sig;
	/* a folder being written is the command's to remove (not safe here):
	 * it looks at pd_cli_interrupted between its files */
	if (pd_int_deferred)
		return;
	pd_out_remove_temporaries();
	if (pd_int_rank == 0 && write(2, msg, strlen(msg)) < 0)
		_exit(130);
	_exit(130);
}

void pd_cli_catch_signals(int rank)
{
	struct sigaction sa;

	pd_int_rank = rank;
	pd_int_tty = isatty(2);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = pd_int_handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int pd_cli_interrupted(void)
{
	return pd_int_signal != 0;
}

void pd_cli_pending_tree(const char *dir)
{
	pd_int_deferred = dir != NULL;
}

int pd_cli_stop_interrupted(void)
{
	if (pd_int_rank == 0)
		fprintf(stderr, "pdit: interrupted\n");
	return 130;
}
