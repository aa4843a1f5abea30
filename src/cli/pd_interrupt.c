/*
 * pd_interrupt.c - Ctrl-C and kill: what a run was writing is removed, the
 * command says "interrupted" once (rank 0; mpirun passes the signal to
 * every rank) and exits with 130. Only the command line catches signals:
 * the library never does.
 */
#include "pd_comm.h"
#include "pd_util.h"
#include "pdit_cli.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile sig_atomic_t pd_int_signal;
static volatile sig_atomic_t pd_int_deferred;
static volatile sig_atomic_t pd_int_quiet;
static volatile sig_atomic_t pd_int_soft;        /* a long-lived command stops at its own pace */
static volatile sig_atomic_t pd_int_launcher;    /* a signal came from the parent process */
static volatile sig_atomic_t pd_int_done;        /* the command's work is written: a signal ends it quietly */
static int pd_int_rank, pd_int_size;
static int pd_int_tty;                  /* stderr is a terminal: clear a progress line first */
static char pd_int_pid_file[4096];      /* removed when a signal ends the process (pdit serve's
					 * --pid-file), or empty */
static char pd_int_soft_note[160];      /* said on a first signal a long-lived command defers */

/* Raw system calls: the sanitizers wrap write and _exit with code of their
 * own, which a handler should not run in the middle of whatever it
 * interrupted (CI's ASan build once aborted after the message, on SIGTERM
 * while denoising; not reproduced here) */
static void pd_int_say(const char *msg)
{
	if (pd_int_tty && syscall(SYS_write, 2, "\r\033[K", 4) < 0)
		return;
	if (syscall(SYS_write, 2, msg, strlen(msg)) < 0)
		return;
}

/* The job ended around this process: where it stood says which transfer
 * the lost process or host left unfinished. No formatting functions here. */
static void pd_int_say_ended(const char *waiting)
{
	static char msg[320];
	size_t n = 0;
	const char *parts[] = { "pdit: interrupted", waiting[0] ? " in " : "", waiting,
				": the job was ended (Ctrl-C to mpirun, or another process or host stopped: see above)\n" };

	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		for (const char *p = parts[i]; *p && n < sizeof(msg) - 2; p++)
			msg[n++] = *p;
	if (msg[n - 1] != '\n')
		msg[n++] = '\n';
	msg[n] = 0;
	pd_int_say(msg);
}

static void pd_int_exit(int code)
{
	/* a pid file naming a dead process tells a service manager a lie */
	if (pd_int_pid_file[0])
		syscall(SYS_unlinkat, AT_FDCWD, pd_int_pid_file, 0);
	syscall(SYS_exit_group, code);
	_exit(code);
}

static void pd_int_handler(int sig, siginfo_t *si, void *uc)
{
	pid_t pid = getpid();

	(void)uc;
	/* sent by the process that started this one (mpirun, when it ends the
	 * job: a process failed, or it was itself signalled); before any
	 * forwarding below, which makes this process the sender */
	if (si && si->si_code == SI_USER && si->si_pid != 0 && si->si_pid == getppid())
		pd_int_launcher = 1;
	/* OpenMP's and MPI's threads may get it: the main thread (whose id is
	 * the process's) is the one that stops */
	if ((pid_t)syscall(SYS_gettid) != pid) {
		syscall(SYS_tgkill, pid, pid, sig);
		return;
	}
	/* the first signal asks a long-lived command to stop; a second one
	 * stops it now */
	if (pd_int_soft && !pd_int_signal) {
		pd_int_signal = sig;
		/* said now: the running request may take minutes. A signal
		 * from mpirun under a job of several ranks ends the job (the
		 * service's watcher answers 503 and exits): nothing to promise */
		if (!pd_int_launcher || pd_int_size == 1)
			pd_int_say(pd_int_soft_note);
		return;
	}
	pd_int_signal = sig;
	/* the outputs are written and said so: only the teardown is left,
	 * and the command succeeded */
	if (pd_int_done)
		pd_int_exit(0);
	/* a folder being written is the command's to remove (not safe here) */
	if (pd_int_deferred)
		return;
	pd_out_remove_temporaries();
	/* this process is already stopping the job and said why */
	if (pd_int_quiet)
		pd_int_exit(1);
	if (pd_int_rank == 0) {
		/* mpirun turns a Ctrl-C into SIGTERM to every rank, and ends the
		 * job the same way when a process dies: say both */
		if (sig == SIGINT)
			pd_int_say("pdit: interrupted\n");
		else if (pd_int_size > 1)
			pd_int_say_ended(pd_comm_activity());
		else
			pd_int_say(sig == SIGTERM ? "pdit: interrupted (SIGTERM)\n" : "pdit: interrupted (SIGHUP)\n");
	}
	pd_int_exit(130);
}

void pd_cli_catch_signals(int rank, int size)
{
	struct sigaction sa;

	pd_int_rank = rank;
	pd_int_size = size;
	pd_int_tty = isatty(2);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = pd_int_handler;
	/* a soft stop lets the process go on: what the signal interrupted
	 * (MPI's and the HTTP server's system calls) is restarted, not failed */
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	/* one handler at a time: its message buffer is static */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaddset(&sa.sa_mask, SIGHUP);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

void pd_cli_work_done(void)
{
	pd_int_done = 1;
}

void pd_cli_stopping(void)
{
	pd_int_quiet = 1;
}

/* SIGUSR1 is how a service manager stops a job cleanly: mpirun ends the
 * job on SIGTERM (SIGTERM to every rank, SIGKILL a moment later) but
 * passes SIGUSR1 on to every rank. Rank 0 stops after the running request
 * as on its own SIGTERM; the others follow rank 0. */
static void pd_int_stop_handler(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	if (pd_int_rank == 0 && !pd_int_signal)
		pd_int_signal = sig;
}

void pd_cli_signals_deferred(void)
{
	snprintf(pd_int_soft_note, sizeof(pd_int_soft_note), pd_int_rank == 0 ?
		 "pdit: stopping (the running request, if any, finishes first; a second signal stops at once)\n" :
		 "pdit: rank %d: a signal to this rank alone does not stop the job: signal rank 0 or mpirun "
		 "(a second one ends it at once)\n", pd_int_rank);
	pd_int_soft = 1;
}

void pd_cli_signal_removes(const char *path)
{
	size_t n = path ? strlen(path) : 0;

	/* a handler may run at any moment: it sees an empty name, or the
	 * whole one (its first byte written last) */
	pd_int_pid_file[0] = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (n == 0 || n >= sizeof(pd_int_pid_file))
		return;
	memcpy(pd_int_pid_file + 1, path + 1, n);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pd_int_pid_file[0] = path[0];
}

void pd_cli_catch_stop_request(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = pd_int_stop_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

int pd_cli_signal_from_launcher(void)
{
	return pd_int_launcher != 0;
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
