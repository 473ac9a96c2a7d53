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

#endif
