/* Library initialisation: a constructor plus pthread_once, so hooks work
 * before main, during init and in every thread; the recursion guard. */
#ifndef SDPSHIM_INIT_H
#define SDPSHIM_INIT_H

#include <stdbool.h>

#define SDP_EXPORT __attribute__((visibility("default")))
/* On the declaration of a variable defined in the library: the hooks then
 * load it directly instead of through the GOT (-fvisibility=hidden covers
 * definitions only). */
#define SDP_HIDDEN __attribute__((visibility("hidden")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

extern volatile bool sdp_ready SDP_HIDDEN;
/* Nonzero while this thread runs library code that calls into librdmacm or
 * libibverbs (or our own init): their libc calls must go straight to libc.
 * Initial-exec: one %fs load instead of a __tls_get_addr call per check (the
 * library is preloaded, so its TLS is in the static block). */
extern __thread int sdp_in_lib SDP_HIDDEN __attribute__((tls_model("initial-exec")));

void sdp_init_slow(void);

static inline void sdp_ensure_init(void)
{
	if (unlikely(!sdp_ready))
		sdp_init_slow();
}

#define SDP_GUARD_ENTER() (sdp_in_lib++)
#define SDP_GUARD_LEAVE() (sdp_in_lib--)

#endif
