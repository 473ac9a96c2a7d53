/* Readiness hooks: poll, ppoll, select, pselect and the epoll family.
 * With no RDMA-backed socket in the set they cost one check and go to libc;
 * otherwise readiness.c answers for the RDMA-backed fds. */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "preload/init.h"
#include "preload/readiness.h" /* rdy_*() */
#include "preload/real.h"

#include "preload/fortify.h"

SDP_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	sdp_ensure_init();
	if (likely(!rdy_any_rdma()) || sdp_in_lib)
		return real.poll(fds, nfds, timeout);
	return rdy_poll(fds, nfds, timeout >= 0 ? (long long)timeout * 1000000 : -1, NULL);
}

static long long timespec_ns(const struct timespec *ts)
{
	return ts ? (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec : -1;
}

SDP_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
		     const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (likely(!rdy_any_rdma()) || sdp_in_lib)
		return real.ppoll(fds, nfds, ts, sigmask);
	return rdy_poll(fds, nfds, timespec_ns(ts), sigmask);
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

SDP_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	long long ns;

	sdp_ensure_init();
	if (likely(!rdy_any_rdma()) || sdp_in_lib)
		return real.select(nfds, rd, wr, ex, tv);
	ns = tv ? (long long)tv->tv_sec * 1000000000LL + (long long)tv->tv_usec * 1000 : -1;
	return rdy_select(nfds, rd, wr, ex, ns, NULL, tv);
}

SDP_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
		       const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (likely(!rdy_any_rdma()) || sdp_in_lib)
		return real.pselect(nfds, rd, wr, ex, ts, sigmask);
	return rdy_select(nfds, rd, wr, ex, timespec_ns(ts), sigmask, NULL);
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

SDP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	sdp_ensure_init();
	if (sdp_in_lib)
		return real.epoll_ctl(epfd, op, fd, ev);
	return rdy_epoll_ctl(epfd, op, fd, ev);
}

SDP_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	sdp_ensure_init();
	if (likely(!rdy_epoll_shadowed(epfd)) || sdp_in_lib)
		return real.epoll_wait(epfd, events, maxevents, timeout);
	return rdy_epoll_wait(epfd, events, maxevents,
			      timeout >= 0 ? (long long)timeout * 1000000 : -1, NULL);
}

SDP_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			   const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (likely(!rdy_epoll_shadowed(epfd)) || sdp_in_lib)
		return real.epoll_pwait(epfd, events, maxevents, timeout, sigmask);
	return rdy_epoll_wait(epfd, events, maxevents,
			      timeout >= 0 ? (long long)timeout * 1000000 : -1, sigmask);
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
