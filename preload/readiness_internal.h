/* Private to preload/readiness_epoll.c and readiness_poll.c: the helpers
 * both use. */
#ifndef SDPSHIM_READINESS_INTERNAL_H
#define SDPSHIM_READINESS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

/* Do these events need the channel's readable indicator? */
static inline bool rdy_wants_rd(uint32_t events)
{
	/* Errors and hang-ups are always reported: with no output interest
	 * they arrive through the readable indicator. */
	return (events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI)) || !(events & EPOLLOUT);
}

/* CLOCK_MONOTONIC in nanoseconds, for the waits' deadlines. */
static inline long long rdy_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The bound of a call that may wait more than once (a wake-up that turns
 * out to hold nothing for the app).  Its first wait takes the whole
 * timeout and reads no clock but the coarse one (no system call); only a
 * wait after a wake-up with nothing to report reads CLOCK_MONOTONIC.  The
 * coarse start can overstate the time already waited by under one tick,
 * so the remainder gets that tick back: a wait may end up to two ticks
 * late (the estimate is also rounded down to nothing waited), never early. */
struct rdy_bound {
	long long timeout_ns;   /* -1: none */
	long long start_coarse; /* ns */
	long long deadline;     /* CLOCK_MONOTONIC ns; -1 until a second wait needs it */
	bool waited;
};

static inline long long rdy_coarse_ns(long long *tick_ns)
{
	struct timespec ts, res;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	if (tick_ns) {
		clock_getres(CLOCK_MONOTONIC_COARSE, &res);
		*tick_ns = (long long)res.tv_sec * 1000000000LL + res.tv_nsec;
	}
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void rdy_bound_start(struct rdy_bound *b, long long timeout_ns)
{
	b->timeout_ns = timeout_ns;
	b->start_coarse = timeout_ns > 0 ? rdy_coarse_ns(NULL) : 0;
	b->deadline = -1;
	b->waited = false;
}

/* Has the bound passed?  Asked after a wait that had nothing to report. */
static inline bool rdy_bound_expired(struct rdy_bound *b)
{
	long long tick, waited, now;

	if (b->timeout_ns < 0)
		return false;
	if (b->timeout_ns == 0)
		return true;
	now = rdy_mono_ns();
	if (b->deadline < 0) {
		waited = rdy_coarse_ns(&tick) - b->start_coarse - tick;
		b->deadline = now + b->timeout_ns - (waited > 0 ? waited : 0);
	}
	return now >= b->deadline;
}

/* Time went by before the first wait (a busy-poll spin): that wait gets
 * only what is left of the timeout. */
static inline void rdy_bound_note_spin(struct rdy_bound *b)
{
	if (b->timeout_ns > 0)
		b->waited = true;
}

/* The timeout of the next wait in ns (-1: none): the whole timeout the
 * first time, then what is left of it (rdy_bound_expired said not yet). */
static inline long long rdy_bound_left(struct rdy_bound *b)
{
	long long left;

	if (!b->waited || b->timeout_ns <= 0) {
		b->waited = true;
		return b->timeout_ns;
	}
	if (b->deadline < 0)
		(void)rdy_bound_expired(b);
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
	return rdy_coarse_ns(NULL) + (long long)us * 1000;
}

static inline bool rdy_spin_over(long long until)
{
	return rdy_coarse_ns(NULL) >= until;
}

#endif
