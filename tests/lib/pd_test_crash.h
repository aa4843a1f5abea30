/*
 * pd_test_crash.h - what a test says when it dies of a signal.
 *
 * A kernel test that meets an instruction its CPU lacks dies of SIGILL
 * with its buffered output lost, and CI's log then reads "Illegal" and
 * nothing else: not the seed, not the place. pd_test_catch_crashes()
 * makes stdout line-buffered and, on SIGILL, SIGSEGV, SIGBUS or SIGFPE,
 * writes the signal, the instruction's address, the mapping it lies in
 * (/proc/self/maps: the library, and the offset in it to look up with
 * objdump on the same build) and the instruction's first bytes, then
 * dies of the same signal. Only write(2), open(2) and read(2) run in the
 * handler.
 */
#ifndef PD_TEST_CRASH_H
#define PD_TEST_CRASH_H

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static inline void pd_crash_puts(const char *s)
{
	ssize_t n = write(2, s, strlen(s));

	(void)n;
}

/* V in hex, with 0x unless it is a byte (two digits). */
static inline void pd_crash_hex(uintptr_t v, int byte)
{
	char b[2 + 2 * sizeof(v) + 1];
	int i = (int)sizeof(b) - 1;

	b[i] = 0;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while ((v || (byte && i > (int)sizeof(b) - 3)) && i > 2);
	if (!byte) {
		b[--i] = 'x';
		b[--i] = '0';
	}
	pd_crash_puts(b + i);
}

static inline uintptr_t pd_crash_parse_hex(const char **p)
{
	uintptr_t v = 0;

	for (;; (*p)++) {
		char c = **p;
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;

		if (d < 0)
			return v;
		v = v * 16 + (uintptr_t)d;
	}
}

/* The line of /proc/self/maps that holds PC, with PC's offset in its
 * file; whether there is one. */
static inline int pd_crash_mapping(uintptr_t pc)
{
	static char buf[1 << 16];
	char line[512];
	size_t len = 0;
	int fd = open("/proc/self/maps", O_RDONLY), l = 0;
	ssize_t n;

	if (fd < 0)
		return 0;
	while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n') {
			if (l < (int)sizeof(line) - 1)
				line[l++] = buf[i];
			continue;
		}
		line[l] = 0;
		l = 0;
		/* start-end perms offset dev inode path */
		const char *p = line;
		uintptr_t start = pd_crash_parse_hex(&p), end, off;

		p++;
		end = pd_crash_parse_hex(&p);
		if (pc < start || pc >= end)
			continue;
		p = strchr(p + 1, ' ');
		if (!p)
			return 0;
		p++;
		off = pd_crash_parse_hex(&p);
		pd_crash_puts("  in: ");
		pd_crash_puts(line);
		pd_crash_puts("\n  offset in that file: ");
		pd_crash_hex(pc - start + off, 0);
		pd_crash_puts("\n");
		return 1;
	}
	pd_crash_puts("  in no mapping of /proc/self/maps\n");
	return 0;
}

static inline void pd_crash_handler(int sig, siginfo_t *si, void *ctx)
{
	uintptr_t pc = 0;

#if defined(__x86_64__) && defined(REG_RIP)
	pc = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
#else
	(void)ctx;
	pc = (uintptr_t)si->si_addr;
#endif
	pd_crash_puts(sig == SIGILL ? "\n*** SIGILL (an instruction this CPU lacks, or a jump into data)"
		      : sig == SIGSEGV ? "\n*** SIGSEGV"
		      : sig == SIGBUS  ? "\n*** SIGBUS"
				       : "\n*** SIGFPE");
	pd_crash_puts(" at instruction ");
	pd_crash_hex(pc, 0);
	pd_crash_puts(", address ");
	pd_crash_hex((uintptr_t)si->si_addr, 0);
	pd_crash_puts("\n");
	if (pd_crash_mapping(pc)) {
		/* the instruction's bytes (code is readable on x86-64) */
		pd_crash_puts("  bytes:");
		for (int i = 0; i < 16; i++) {
			pd_crash_puts(" ");
			pd_crash_hex(((const unsigned char *)pc)[i], 1);
		}
		pd_crash_puts("\n");
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static inline void pd_test_catch_crashes(void)
{
	struct sigaction sa;
#if defined(__SANITIZE_ADDRESS__)
	/* the sanitizer reports the others itself, better */
	int sigs[] = { SIGILL };
#else
	int sigs[] = { SIGILL, SIGSEGV, SIGBUS, SIGFPE };
#endif

	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = pd_crash_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

#endif
