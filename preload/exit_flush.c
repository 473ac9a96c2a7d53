/* The end of a process's RDMA-backed sockets: exit() flushes them from
 * atexit; _exit() and _Exit() ask a helper thread for the same flush and
 * wait for it, bounded, since they may be called from a signal handler
 * that interrupted our own code (whose locks the flush needs).  Over TCP
 * the kernel sends a socket's last bytes and its FIN after either exit;
 * here the process's QPs die with it, so the flush comes first. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/progress.h"
#include "preload/exit_flush.h"
#include "preload/init.h"
#include "preload/sock.h"

#define HELPER_STACK (256 * 1024)
#define QUIESCE_MS 2500 /* progress_quiesce_for_exit's own wait for the park, and a margin */
/* How long the closes may take to be issued.  Longer means a lock they
 * need is held by the code the signal interrupted: that thread will never
 * let it go, so the process leaves without the flush. */
#define CLOSES_MS 500

static atomic_int flushed_pid;  /* the process whose flush has run (or runs) */
static atomic_int helper_pid;   /* the process whose helper thread waits */
static atomic_uint helper_go;   /* futex word: 1 asks the helper for the flush */
static atomic_uint helper_step; /* futex word: STEP_* */
enum { STEP_WAITING, STEP_CLOSED, STEP_DONE };
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned linger_bound_ms(void)
{
	return sdp_tun.linger_ms < 5000 ? sdp_tun.linger_ms : 5000;
}

/* Once per process: the first caller flushes, later ones do nothing. */
static bool claim_flush(void)
{
	int pid = (int)getpid(), seen = atomic_load(&flushed_pid);

	while (seen != pid)
		if (atomic_compare_exchange_weak(&flushed_pid, &seen, pid))
			return true;
	return false;
}

static long futex(atomic_uint *word, int op, unsigned val, const struct timespec *timeout)
{
	return syscall(SYS_futex, (unsigned *)word, op, val, timeout, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
	futex(word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
}

static void flush_now(void)
{
	sock_close_all_rdma(); /* first: channels stop using the stats slots */
	sock_flush_all_stats();
	atomic_store(&helper_step, STEP_CLOSED);
	futex_wake_all(&helper_step);
	progress_quiesce_for_exit(linger_bound_ms());
}

void exit_flush_at_exit(void)
{
	if (claim_flush())
		flush_now();
}

static void *helper_main(void *arg)
{
	(void)arg;
	while (atomic_load(&helper_go) == 0)
		futex(&helper_go, FUTEX_WAIT_PRIVATE, 0, NULL);
	if (claim_flush())
		flush_now();
	atomic_store(&helper_step, STEP_DONE);
	futex_wake_all(&helper_step);
	return NULL;
}

/* The process holds an RDMA-backed socket: its _exit will need the
 * helper.  One per process; a forked child that gets a socket of its
 * own starts its own. */
void exit_flush_helper_ensure(void)
{
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int rc;

	if (atomic_load_explicit(&helper_pid, memory_order_acquire) == (int)self_pid())
		return;
	pthread_mutex_lock(&helper_lock);
	if (atomic_load(&helper_pid) != (int)self_pid()) {
		atomic_store(&helper_go, 0);
		atomic_store(&helper_step, STEP_WAITING);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, HELPER_STACK);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with the app's threads */
		rc = pthread_create(&tid, &attr, helper_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
		if (rc == 0)
			atomic_store_explicit(&helper_pid, (int)self_pid(), memory_order_release);
		else
			sdp_warn("no helper thread for _exit (%s): an _exit will not flush RDMA sockets",
				 strerror(rc));
	}
	pthread_mutex_unlock(&helper_lock);
}

static uint64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Until the helper's step is past `step` or the clock reaches until_ms;
 * false if the clock did. */
static bool wait_step_past(unsigned step, uint64_t until_ms)
{
	unsigned seen;

	while ((seen = atomic_load(&helper_step)) <= step) {
		uint64_t now = monotonic_ms();
		struct timespec slice;

		if (now >= until_ms)
			return false;
		slice.tv_sec = (time_t)((until_ms - now) / 1000);
		slice.tv_nsec = (long)((until_ms - now) % 1000) * 1000000;
		futex(&helper_step, FUTEX_WAIT_PRIVATE, seen, &slice);
	}
	return true;
}

/* Async-signal-safe: atomics, futex calls and clock reads.  The closes
 * come first (bounded by CLOSES_MS: past it, the code we interrupted holds
 * a lock they need), then the linger. */
static void flush_by_helper(void)
{
	if (!sdp_ready || atomic_load(&helper_pid) != (int)getpid())
		return;
	/* exit()'s flush ran, or runs, in this process: nothing is left to ask.
	 * Another thread's _exit that asked first is waited for as our own. */
	if (atomic_load(&flushed_pid) == (int)getpid() && !atomic_load(&helper_go))
		return;
	atomic_store(&helper_go, 1);
	futex(&helper_go, FUTEX_WAKE_PRIVATE, 1, NULL);
	if (wait_step_past(STEP_WAITING, monotonic_ms() + CLOSES_MS))
		(void)wait_step_past(STEP_CLOSED, monotonic_ms() + linger_bound_ms() + QUIESCE_MS);
}

static _Noreturn void leave(void (*real_exit)(int), int status)
{
	if (real_exit)
		real_exit(status);
	syscall(SYS_exit_group, status);
	for (;;)
		pause();
}

SDP_EXPORT _Noreturn void _exit(int status)
{
	int saved = errno;

	flush_by_helper();
	errno = saved;
	leave(real._exit, status);
}

SDP_EXPORT _Noreturn void _Exit(int status)
{
	int saved = errno;

	flush_by_helper();
	errno = saved;
	leave(real._Exit, status);
}
