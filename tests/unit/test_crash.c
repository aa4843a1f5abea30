/*
 * test_crash.c - pd_test_crash.h's report, which CI's log depends on when
 * a test dies of a signal: a child that catches crashes runs ud2 (an
 * instruction that is always illegal) and must die of SIGILL having
 * written the signal, the mapping that holds the instruction with its
 * offset, and the instruction's bytes (0f 0b); its earlier stdout line
 * must not be lost.
 */
#include "pd_test.h"
#include "pd_test_crash.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	int out[2], err[2], status = 0;
	char buf[4096] = { 0 }, line[256] = { 0 };
	ssize_t n, len = 0;
	pid_t pid;

	if (pipe(out) || pipe(err))
		return 1;
	pid = fork();
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(err[1], 2);
		pd_test_catch_crashes();
		/* a pipe, so without the line buffering this is lost */
		printf("before the crash\n");
		__asm__ volatile("ud2");
		_exit(0);
	}
	close(out[1]);
	close(err[1]);
	while (len < (ssize_t)sizeof(buf) - 1 && (n = read(err[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	n = read(out[0], line, sizeof(line) - 1);
	waitpid(pid, &status, 0);
	PD_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGILL, "the child died of SIGILL (status %#x)", status);
	PD_CHECK(n > 0 && strstr(line, "before the crash"), "its stdout before the crash kept: '%s'", line);
	PD_CHECK(strstr(buf, "*** SIGILL") && strstr(buf, "test_crash") && strstr(buf, "offset in that file: 0x") &&
			 strstr(buf, "bytes: 0f 0b"),
		 "the report names the signal, the mapping, the offset and the bytes:\n%s", buf);
#else
	printf("skip: ud2 is x86-64's\n");
#endif
	return pd_test_report();
}
