/* TAP output for the C unit tests (see tap.h). */
#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

static int tap_number;
static int tap_failures;

void tap_result(int ok, const char *desc)
{
	tap_number++;
	if (!ok)
		tap_failures++;
	printf("%s %d - %s\n", ok ? "ok" : "not ok", tap_number, desc);
}

int check(int ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return 1;
	printf("#   ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return 0;
}

int tap_exit_status(void)
{
	return tap_failures == 0 ? 0 : 1;
}

int tap_run(const struct tap_case *cases, unsigned count)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%u\n", count);
	for (unsigned i = 0; i < count; i++)
		tap_result(cases[i].fn(), cases[i].desc);
	return tap_exit_status();
}

int tap_run_isolated(int (*fn)(void), unsigned alarm_s)
{
	int status;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		alarm(alarm_s);
		_exit(fn() ? 0 : 1);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 0;
	if (WIFSIGNALED(status))
		printf("#   crashed (signal %d)\n", WTERMSIG(status));
	else if (WEXITSTATUS(status) > 1)
		printf("#   exited %d (a sanitizer report?)\n", WEXITSTATUS(status));
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
