/* Library initialisation: a constructor plus pthread_once, so hooks work
 * before main, during init and in every thread; the recursion guard. */
#ifndef SDPSHIM_INIT_H
#define SDPSHIM_INIT_H

#include <stdbool.h>

#define SDP_EXPORT __attribute__((visibility("default")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

extern volatile bool sdp_ready;
/* Nonzero while this thread runs library code that calls into librdmacm or
 * libibverbs (or our own init): their libc calls must go straight to libc. */
extern __thread int sdp_in_lib;

void sdp_init_slow(void);

static inline void sdp_ensure_init(void)
{
	if (unlikely(!sdp_ready))
		sdp_init_slow();
}

#define SDP_GUARD_ENTER() (sdp_in_lib++)
#define SDP_GUARD_LEAVE() (sdp_in_lib--)

#endif
