/* Unit tests (TAP) for core/verbs_fence.c: a fork waits until no thread is
 * inside the fence (a control-path call into librdmacm or libibverbs, whose
 * process-wide locks a child would otherwise inherit held), a thread may
 * enter while a fork waits (a call inside those libraries may wait for
 * another thread's call), and the child, and a fork from inside the fence,
 * go on without a hang; a fork waits 2 s at most.  Each case runs in a child of its own, bounded. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/verbs_fence.h"
#include "progutil.h"
#include "tap.h"

#define INSIDE_MS 300

static long long now_ms(void)
{
	return (long long)prog_mono_ms();
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static _Atomic bool inside, may_leave;
static _Atomic long long second_enter_ms, left_ms;

/* Inside the fence for INSIDE_MS (or until told), as a progress thread in
 * rdma_get_cm_event would be. */
static void *stay_inside(void *arg)
{
	long long until = now_ms() + INSIDE_MS;

	(void)arg;
	verbs_fence_enter();
	inside = true;
	while (now_ms() < until || (!may_leave && now_ms() < until + 2000))
		sleep_ms(5);
	left_ms = now_ms();
	verbs_fence_leave();
	return NULL;
}

static _Atomic bool entered;

static void *enter_once(void *arg)
{
	(void)arg;
	verbs_fence_enter();
	verbs_fence_leave();
	entered = true;
	return NULL;
}

/* Another thread gets into the fence within a second: nobody holds it
 * exclusive (a fork's parent handler gave it back). */
static bool other_thread_enters(void)
{
	pthread_t t;
	long long until = now_ms() + 1000;

	entered = false;
	if (pthread_create(&t, NULL, enter_once, NULL) != 0)
		return false;
	while (!entered && now_ms() < until)
		sleep_ms(2);
	if (!entered)
		return false; /* left blocked: the case's process ends with it */
	pthread_join(t, NULL);
	return true;
}

/* Enters once the fork waits, and says how long its entry took. */
static void *enter_while_fork_waits(void *arg)
{
	long long t0;

	(void)arg;
	sleep_ms(100);
	t0 = now_ms();
	verbs_fence_enter();
	second_enter_ms = now_ms() - t0;
	verbs_fence_leave();
	may_leave = true;
	return NULL;
}

/* The child: the fence works there (its lock was copied held), and a
 * fork of its own goes through. */
static int child_uses_fence(void)
{
	pid_t pid;
	int status = -1;

	verbs_fence_enter();
	verbs_fence_enter();
	verbs_fence_leave();
	verbs_fence_leave();
	if (!other_thread_enters())
		return 3;
	pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 4;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 5;
}

/* A child that forked from inside the fence: its outer leave is still to
 * come.  It leaves, and then the fence must be free in it. */
static int child_forked_inside(void)
{
	verbs_fence_leave();
	return child_uses_fence();
}

static int fork_and_wait(int (*child)(void), long long *returned_ms)
{
	int status = -1;
	pid_t pid = fork();

	if (pid == 0) {
		alarm(5);
		_exit(child());
	}
	*returned_ms = now_ms();
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void register_handlers(void)
{
	pthread_atfork(verbs_fence_fork_prepare, verbs_fence_fork_parent, verbs_fence_fork_child);
}

static int fork_waits_for_thread_inside(void)
{
	pthread_t t;
	long long returned = 0;
	int rc, ok = 1;

	register_handlers();
	may_leave = true;
	pthread_create(&t, NULL, stay_inside, NULL);
	while (!inside)
		sleep_ms(1);
	rc = fork_and_wait(child_uses_fence, &returned);
	pthread_join(t, NULL);
	ok &= check(rc == 0, "the child exited %d", rc);
	ok &= check(returned >= left_ms, "fork returned %lld ms before the thread left the fence",
		    (long long)left_ms - returned);
	ok &= check(other_thread_enters(), "after the fork, no other thread gets into the fence");
	return ok;
}

static int thread_enters_while_fork_waits(void)
{
	pthread_t t, u;
	long long returned = 0;
	int rc, ok = 1;

	register_handlers();
	pthread_create(&t, NULL, stay_inside, NULL);
	while (!inside)
		sleep_ms(1);
	pthread_create(&u, NULL, enter_while_fork_waits, NULL);
	rc = fork_and_wait(child_uses_fence, &returned);
	pthread_join(t, NULL);
	pthread_join(u, NULL);
	ok &= check(rc == 0, "the child exited %d", rc);
	ok &= check(second_enter_ms < 1000, "a thread's entry took %lld ms while a fork waited",
		    (long long)second_enter_ms);
	ok &= check(other_thread_enters(), "after the fork, no other thread gets into the fence");
	return ok;
}

static int fork_from_inside(void)
{
	long long returned = 0;
	int rc, ok = 1;

	register_handlers();
	verbs_fence_enter();
	rc = fork_and_wait(child_forked_inside, &returned);
	verbs_fence_leave();
	ok &= check(rc == 0, "the child exited %d", rc);
	ok &= check(other_thread_enters(), "after the fork, no other thread gets into the fence");
	rc = fork_and_wait(child_uses_fence, &returned); /* nothing of ours is left inside */
	ok &= check(rc == 0, "a second fork's child exited %d", rc);
	return ok;
}

static void *stay_inside_long(void *arg)
{
	(void)arg;
	verbs_fence_enter();
	inside = true;
	sleep_ms(3500);
	verbs_fence_leave();
	return NULL;
}

/* A call that does not come back holds a fork up for 2 s, no longer. */
static int fork_wait_bounded(void)
{
	pthread_t t;
	long long start, returned = 0;
	int rc, ok = 1;

	register_handlers();
	pthread_create(&t, NULL, stay_inside_long, NULL);
	while (!inside)
		sleep_ms(1);
	start = now_ms();
	rc = fork_and_wait(child_uses_fence, &returned);
	ok &= check(rc == 0, "the child exited %d", rc);
	ok &= check(returned - start >= 1900 && returned - start < 3400,
		    "fork returned after %lld ms (the bound is 2000)", returned - start);
	pthread_join(t, NULL);
	ok &= check(other_thread_enters(), "after the fork, no other thread gets into the fence");
	return ok;
}

static int run_fork_wait_bounded(void)
{
	return tap_run_isolated(fork_wait_bounded, 15);
}

static int run_fork_waits(void)
{
	return tap_run_isolated(fork_waits_for_thread_inside, 10);
}

static int run_enters_while_waiting(void)
{
	return tap_run_isolated(thread_enters_while_fork_waits, 10);
}

static int run_fork_from_inside(void)
{
	return tap_run_isolated(fork_from_inside, 10);
}

int main(void)
{
	static const struct tap_case cases[] = {
		{ "a fork waits until no thread is inside the fence", run_fork_waits },
		{ "a thread enters the fence while a fork waits for another to leave",
		  run_enters_while_waiting },
		{ "a fork from inside the fence neither waits for itself nor leaves the fence "
		  "held, in the parent or the child", run_fork_from_inside },
		{ "a fork waits at most 2 s for a call that does not come back", run_fork_wait_bounded },
	};

	return tap_run(cases, sizeof(cases) / sizeof(cases[0]));
}
