/* Readiness hooks: poll, ppoll, select, pselect and the epoll family.
 * While no socket needs them (their gate is open, preload/gate.h) they cost
 * one load and go to libc; otherwise readiness_poll.c and
 * readiness_epoll.c answer for the RDMA-backed fds.  The slow paths are out
 * of line, so the fast path needs no stack frame. */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "base/real.h"
#include "preload/gate.h"
#include "preload/init.h"
#include "preload/readiness.h" /* rdy_*() */

#include "base/fortify.h"

#define SLOW __attribute__((noinline, cold))

static long long timespec_ns(const struct timespec *ts)
{
	return ts ? (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec : -1;
}

static long long timeout_ms_ns(int timeout)
{
	return timeout >= 0 ? (long long)timeout * 1000000 : -1;
}

/* Why an open GATE_POLL is enough: it counts every socket that is RDMA-backed
 * or connecting over RDMA, from before its channel replaces the kernel
 * socket's readiness (rdy_sock_to_rdma) until it has given it back.  A
 * socket that goes to RDMA while this call sleeps in the kernel was not
 * RDMA-backed when the call began, as before gates. */
static SLOW int poll_slow(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
			  const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (!rdy_any_rdma() || sdp_in_lib)
		return real.ppoll(fds, nfds, ts, sigmask);
	return rdy_poll(fds, nfds, timespec_ns(ts), sigmask);
}

static SLOW int poll_slow_ms(struct pollfd *fds, nfds_t nfds, int timeout)
{
	sdp_ensure_init();
	if (!rdy_any_rdma() || sdp_in_lib)
		return real.poll(fds, nfds, timeout);
	return rdy_poll(fds, nfds, timeout_ms_ns(timeout), NULL);
}

SDP_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	if (likely(gate_open(GATE_POLL)))
		return real.poll(fds, nfds, timeout);
	return poll_slow_ms(fds, nfds, timeout);
}

SDP_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
		     const sigset_t *sigmask)
{
	if (likely(gate_open(GATE_POLL)))
		return real.ppoll(fds, nfds, ts, sigmask);
	return poll_slow(fds, nfds, ts, sigmask);
}

SDP_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return poll(fds, nfds, timeout);
}

SDP_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
			   const sigset_t *sigmask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return ppoll(fds, nfds, ts, sigmask);
}

static SLOW int select_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	long long ns;

	sdp_ensure_init();
	if (!rdy_any_rdma() || sdp_in_lib)
		return real.select(nfds, rd, wr, ex, tv);
	ns = tv ? (long long)tv->tv_sec * 1000000000LL + (long long)tv->tv_usec * 1000 : -1;
	return rdy_select(nfds, rd, wr, ex, ns, NULL, tv);
}

SDP_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	if (likely(gate_open(GATE_POLL)))
		return real.select(nfds, rd, wr, ex, tv);
	return select_slow(nfds, rd, wr, ex, tv);
}

static SLOW int pselect_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
			     const struct timespec *ts, const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (!rdy_any_rdma() || sdp_in_lib)
		return real.pselect(nfds, rd, wr, ex, ts, sigmask);
	return rdy_select(nfds, rd, wr, ex, timespec_ns(ts), sigmask, NULL);
}

SDP_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
		       const sigset_t *sigmask)
{
	if (likely(gate_open(GATE_POLL)))
		return real.pselect(nfds, rd, wr, ex, ts, sigmask);
	return pselect_slow(nfds, rd, wr, ex, ts, sigmask);
}

SDP_EXPORT int epoll_create(int size)
{
	sdp_ensure_init();
	return real.epoll_create(size);
}

SDP_EXPORT int epoll_create1(int flags)
{
	sdp_ensure_init();
	return real.epoll_create1(flags);
}

/* Gate open: no socket is FRESH or RDMA, so no registration needs a record
 * and every fd's readiness is the kernel's (the race argument is at
 * rdy_epoll_ctl() and in preload/gate.h). */
SDP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (likely(gate_open(GATE_EPOLL_CTL)))
		return real.epoll_ctl(epfd, op, fd, ev);
	return rdy_epoll_ctl(epfd, op, fd, ev);
}

/* Gate open: no shadow set exists, so no event needs translating.  A shadow
 * created while this call sleeps was not there when it began: the same
 * window as the per-epfd check (rdy_epoll_shadowed) it stands in front of. */
static SLOW int epoll_wait_slow(int epfd, struct epoll_event *events, int maxevents,
				int timeout, const sigset_t *sigmask, bool pwait)
{
	sdp_ensure_init();
	if (!rdy_epoll_shadowed(epfd) || sdp_in_lib)
		return pwait ? real.epoll_pwait(epfd, events, maxevents, timeout, sigmask)
			     : real.epoll_wait(epfd, events, maxevents, timeout);
	return rdy_epoll_wait(epfd, events, maxevents, timeout_ms_ns(timeout), sigmask);
}

SDP_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	if (likely(gate_open(GATE_EPOLL_WAIT)))
		return real.epoll_wait(epfd, events, maxevents, timeout);
	return epoll_wait_slow(epfd, events, maxevents, timeout, NULL, false);
}

SDP_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			   const sigset_t *sigmask)
{
	if (likely(gate_open(GATE_EPOLL_WAIT)))
		return real.epoll_pwait(epfd, events, maxevents, timeout, sigmask);
	return epoll_wait_slow(epfd, events, maxevents, timeout, sigmask, true);
}

SDP_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			    const struct timespec *ts, const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (!real.epoll_pwait2) {
		errno = ENOSYS;
		return -1;
	}
	if (likely(!rdy_epoll_shadowed(epfd)) || sdp_in_lib)
		return real.epoll_pwait2(epfd, events, maxevents, ts, sigmask);
	return rdy_epoll_wait(epfd, events, maxevents, timespec_ns(ts), sigmask);
}
