/* Private to preload/readiness_epoll.c and readiness_poll.c: the helpers
 * both use. */
#ifndef SDPSHIM_READINESS_INTERNAL_H
#define SDPSHIM_READINESS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/readiness.h" /* rdy_mono_ns() */

/* Do these events need the channel's readable indicator? */
static inline bool rdy_wants_rd(uint32_t events)
{
	/* Errors and hang-ups are always reported: with no output interest
	 * they arrive through the readable indicator. */
	return (events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI)) || !(events & EPOLLOUT);
}

/* The bound of a call that may wait more than once (a wake-up that turns
 * out to hold nothing for the app: a completion channel's, a stale
 * indicator's).  Its start is read from CLOCK_MONOTONIC (the vDSO serves it
 * without a system call on hosts whose clock source allows) just before
 * the first wait, which takes the whole timeout; every later one takes
 * what is left.  So a call never ends early, and one answered before any
 * wait (in user space, or after a busy-poll spin) reads no clock: it is
 * late by at most what ran before that first wait.  A start read from the
 * coarse clock would save the read, but under emulation the coarse clock
 * lagged by more than its tick, and a wait after a wake-up with nothing to
 * report ended early (148 ms of 150). */
struct rdy_bound {
	long long timeout_ns; /* -1: none */
	long long deadline;   /* CLOCK_MONOTONIC ns, once waited and timeout_ns > 0 */
	bool waited;
};

/* CLOCK_MONOTONIC_COARSE in ns: the vDSO serves it without a system call
 * on any clock source (the busy-poll spin's clock). */
static inline long long rdy_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void rdy_bound_start(struct rdy_bound *b, long long timeout_ns)
{
	b->timeout_ns = timeout_ns;
	b->deadline = 0;
	b->waited = false;
}

/* Has the bound passed?  Asked after a wait that had nothing to report. */
static inline bool rdy_bound_expired(struct rdy_bound *b)
{
	if (b->timeout_ns < 0)
		return false;
	if (b->timeout_ns == 0)
		return true;
	return rdy_mono_ns() >= b->deadline;
}

/* The timeout of the next wait in ns (-1: none): the whole timeout the
 * first time, then what is left of it. */
static inline long long rdy_bound_left(struct rdy_bound *b)
{
	long long left;

	if (b->timeout_ns <= 0)
		return b->timeout_ns;
	if (!b->waited) {
		b->waited = true;
		b->deadline = rdy_mono_ns() + b->timeout_ns;
		return b->timeout_ns;
	}
	left = b->deadline - rdy_mono_ns();
	return left > 0 ? left : 0;
}

/* Between two polls of a busy-poll spin. */
static inline void rdy_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

/* The end of a busy-poll spin of us microseconds, on the coarse clock (no
 * system call whatever the clock source; the spin may run a tick long). */
static inline long long rdy_spin_until(unsigned us)
{
	return rdy_coarse_ns() + (long long)us * 1000;
}

static inline bool rdy_spin_over(long long until)
{
	return rdy_coarse_ns() >= until;
}

#endif
