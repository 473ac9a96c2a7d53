/* What every layer's library code shares about running inside the preload:
 * symbol visibility, branch hints, and the recursion guard that sends the
 * libc calls of our own code (and of librdmacm/libibverbs under it)
 * straight to libc instead of back into the hooks. */
#ifndef SDPSHIM_GUARD_H
#define SDPSHIM_GUARD_H

#define SDP_EXPORT __attribute__((visibility("default")))
/* On the declaration of a variable defined in the library: the hooks then
 * load it directly instead of through the GOT (-fvisibility=hidden covers
 * definitions only). */
#define SDP_HIDDEN __attribute__((visibility("hidden")))
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Nonzero while this thread runs library code that calls into librdmacm or
 * libibverbs (or our own init): their libc calls must go straight to libc.
 * Initial-exec: one %fs load instead of a __tls_get_addr call per check (the
 * library is preloaded, so its TLS is in the static block).  Defined in
 * base/real.c. */
extern __thread int sdp_in_lib SDP_HIDDEN __attribute__((tls_model("initial-exec")));

#define SDP_GUARD_ENTER() (sdp_in_lib++)
#define SDP_GUARD_LEAVE() (sdp_in_lib--)

#endif
