/* Unit tests (TAP) for base/self.c: the cached process id is this
 * process's, and a child reads its own, whether it was made by fork() or
 * by a raw fork system call that runs no fork handler (glibc's _Fork, a
 * clone without CLONE_VM): the cache's page is wiped in every child. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/self.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int test_own(void)
{
	pid_t first = self_pid(), again = self_pid();

	return check(first == getpid() && again == first, "self_pid %d then %d, getpid %d",
		     (int)first, (int)again, (int)getpid());
}

/* Runs in the child: exit 0 if self_pid() is the child's own id. */
static int child_status(pid_t child)
{
	int st = 0;

	if (child == 0)
		_exit(self_pid() == getpid() ? 0 : 1);
	if (child < 0 || waitpid(child, &st, 0) != child)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int test_fork_child(void)
{
	(void)self_pid(); /* cached in the parent first */
	int st = child_status(fork());

	return check(st == 0, "fork child: status %d (1: it read its parent's id)", st) &&
	       check(self_pid() == getpid(), "parent after fork: %d, getpid %d", (int)self_pid(),
		     (int)getpid());
}

static int test_raw_fork_child(void)
{
	(void)self_pid();
	int st = child_status((pid_t)syscall(SYS_fork));

	return check(st == 0, "raw fork child (no handlers): status %d (1: it read its parent's id)",
		     st);
}

static const struct tap_case cases[] = {
	{ "the cached id is this process's", test_own },
	{ "a fork child reads its own id, and the parent keeps its own", test_fork_child },
	{ "a child of a raw fork system call (no fork handler ran) reads its own id", test_raw_fork_child },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
