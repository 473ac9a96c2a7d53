/* The end of a process's RDMA-backed sockets: exit() flushes them from
 * atexit; _exit() and _Exit() ask a helper thread for the same flush and
 * wait for it, bounded, since they may be called from a signal handler
 * that interrupted our own code (whose locks the flush needs).  Over TCP
 * the kernel sends a socket's last bytes and its FIN after either exit;
 * here the process's QPs die with it, so the flush comes first. */
#include <errno.h>
#include <linux/futex.h>
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
#include "base/thread.h"
#include "core/progress.h"
#include "preload/exit_flush.h"
#include "preload/init.h"
#include "preload/sock.h"

#define HELPER_STACK (256 * 1024)
#define QUIESCE_MS 2500 /* progress_quiesce_for_exit's own wait for the park, and a margin */
/* How long the closes may go without progress (a socket closed, or moved
 * for its sharers).  Longer means a lock they need is held by the code the
 * signal interrupted: that thread will never let it go, so the process
 * leaves without the rest of the flush.  CLOSES_CAP_MS bounds them all. */
#define CLOSES_MS     500
#define CLOSES_CAP_MS 15000
#define SLICE_MS      50

static atomic_int flushed_pid;  /* the process whose flush has run (or runs) */
static atomic_int helper_pid;   /* the process whose helper thread waits */
static atomic_uint helper_go;   /* futex word: 1 asks the helper for the flush */
static atomic_uint helper_step; /* futex word: STEP_* */
enum { STEP_WAITING, STEP_CLOSED, STEP_DONE };
static atomic_uint closes_done; /* bumped by each socket the flush has dealt with */

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

static void set_step(unsigned step)
{
	atomic_store(&helper_step, step);
	futex_wake_all(&helper_step);
}

/* exit()'s thread or the helper, once per process. */
static void flush_now(void)
{
	sock_close_all_rdma(); /* first: channels stop using the stats slots */
	sock_flush_all_stats();
	set_step(STEP_CLOSED);
	progress_quiesce_for_exit(linger_bound_ms());
	set_step(STEP_DONE);
}

void exit_flush_at_exit(void)
{
	if (claim_flush())
		flush_now();
}

void exit_flush_note_progress(void)
{
	atomic_fetch_add(&closes_done, 1);
}

/* Its flush, unless exit()'s runs already (that one then ends the steps). */
static void *helper_main(void *arg)
{
	(void)arg;
	while (atomic_load(&helper_go) == 0)
		futex(&helper_go, FUTEX_WAIT_PRIVATE, 0, NULL);
	if (claim_flush())
		flush_now();
	return NULL;
}

/* The process holds an RDMA-backed socket: its _exit will need the
 * helper.  One per process; a forked child that gets a socket of its
 * own starts its own.  helper_pid is -pid while a thread of pid starts it
 * (no lock: a fork meanwhile leaves the child nothing held). */
void exit_flush_helper_ensure(void)
{
	static atomic_int warned_pid;
	int self = (int)self_pid(), seen = atomic_load_explicit(&helper_pid, memory_order_acquire);
	int rc;

	if (seen == self || seen == -self ||
	    !atomic_compare_exchange_strong(&helper_pid, &seen, -self))
		return; /* there, being started, or another thread won the start */
	atomic_store(&helper_go, 0);
	atomic_store(&helper_step, STEP_WAITING);
	rc = lib_thread_start(NULL, helper_main, NULL, false, HELPER_STACK);
	atomic_store_explicit(&helper_pid, rc == 0 ? self : 0, memory_order_release);
	if (rc != 0 && atomic_exchange(&warned_pid, self) != self)
		sdp_warn("no helper thread for _exit (%s): an _exit will not flush RDMA sockets",
			 strerror(rc));
}

/* Sleeps on the step word for at most SLICE_MS, or until until_ms. */
static void step_wait_slice(unsigned seen, uint64_t now, uint64_t until_ms)
{
	uint64_t left = until_ms - now < SLICE_MS ? until_ms - now : SLICE_MS;
	struct timespec slice = { 0, (long)left * 1000000L };

	futex(&helper_step, FUTEX_WAIT_PRIVATE, seen, &slice);
}

/* The closes: true once issued; false when they stopped making progress
 * for CLOSES_MS, or passed CLOSES_CAP_MS. */
static bool wait_closes(void)
{
	uint64_t now = progress_now_ms(), cap = now + CLOSES_CAP_MS, quiet_until = now + CLOSES_MS;
	unsigned progress = atomic_load(&closes_done), seen;

	while ((seen = atomic_load(&helper_step)) == STEP_WAITING) {
		unsigned p = atomic_load(&closes_done);

		now = progress_now_ms();
		if (p != progress) {
			progress = p;
			quiet_until = now + CLOSES_MS;
		}
		if (now >= quiet_until || now >= cap)
			return false;
		step_wait_slice(seen, now, quiet_until < cap ? quiet_until : cap);
	}
	return true;
}

/* The linger: until the flush is done or the bound passes. */
static void wait_done(uint64_t until_ms)
{
	unsigned seen;

	while ((seen = atomic_load(&helper_step)) != STEP_DONE) {
		uint64_t now = progress_now_ms();

		if (now >= until_ms)
			return;
		step_wait_slice(seen, now, until_ms);
	}
}

/* Async-signal-safe: atomics, futex calls and clock reads (progress_now_ms
 * is one clock_gettime).  The helper runs the flush (or finds exit()'s
 * under way, and leaves the steps to it); this thread waits for the
 * closes, then the linger. */
static void flush_by_helper(void)
{
	if (!sdp_ready || atomic_load(&helper_pid) != (int)getpid())
		return;
	atomic_store(&helper_go, 1);
	futex(&helper_go, FUTEX_WAKE_PRIVATE, 1, NULL);
	if (wait_closes())
		wait_done(progress_now_ms() + linger_bound_ms() + QUIESCE_MS);
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
