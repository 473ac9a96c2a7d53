/* Readiness hooks: poll, ppoll, select, pselect and the epoll family.
 * Each gated hook is one jump through its route: libc's function while no
 * socket needs the hook (its gate is open, preload/gate.h), else the hook's
 * slow path, where readiness_poll.c and readiness_epoll.c answer for the
 * RDMA-backed fds.  epoll_wait's open route is libc's wait plus one look at
 * the gate when it returns events. */
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

static SLOW int poll_slow(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
			  const sigset_t *sigmask);
static SLOW int poll_slow_ms(struct pollfd *fds, nfds_t nfds, int timeout);
static SLOW int select_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv);
static SLOW int pselect_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
			     const struct timespec *ts, const sigset_t *sigmask);
static SLOW int epoll_wait_closed(int epfd, struct epoll_event *events, int maxevents,
				  int timeout);
static int epoll_ctl_open(int epfd, int op, int fd, struct epoll_event *ev);
static SLOW int epoll_pwait_closed(int epfd, struct epoll_event *events, int maxevents,
				   int timeout, const sigset_t *sigmask);
static int select_open(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv);
static int pselect_open(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
			const sigset_t *sigmask);
static int epoll_wait_open(int epfd, struct epoll_event *events, int maxevents, int timeout);
static int epoll_pwait_open(int epfd, struct epoll_event *events, int maxevents, int timeout,
			    const sigset_t *sigmask);

/* The routes.  Until initialisation has finished every gate is closed, so
 * they start on the slow paths (which initialise).  gate_route() switches
 * them, under the gates' lock, whenever a gate opens or closes; a gate is
 * closed, and its routes on the slow paths, before the state that closes
 * it becomes visible.  So the route is the whole decision: a hook loads it
 * (relaxed, fused into the jump) and reads nothing else. */
#define ROUTE(name, slow) static __typeof__(real.name) _Atomic name##_route = slow
ROUTE(poll, poll_slow_ms);
ROUTE(ppoll, poll_slow);
ROUTE(select, select_slow);
ROUTE(pselect, pselect_slow);
ROUTE(epoll_ctl, rdy_epoll_ctl);
ROUTE(epoll_wait, epoll_wait_closed);
ROUTE(epoll_pwait, epoll_pwait_closed);
#undef ROUTE
#define SET_ROUTE(name, open, slow) \
	atomic_store_explicit(&name##_route, (open) ? real.name : (slow), memory_order_release)
#define GO(name) atomic_load_explicit(&name##_route, memory_order_relaxed)

void gate_route(enum sdp_gate g, bool open)
{
	switch (g) {
	case GATE_POLL:
		SET_ROUTE(poll, open, poll_slow_ms);
		SET_ROUTE(ppoll, open, poll_slow);
		SET_ROUTE(select, false, open ? select_open : select_slow);
		SET_ROUTE(pselect, false, open ? pselect_open : pselect_slow);
		break;
	case GATE_EPOLL_CTL:
		SET_ROUTE(epoll_ctl, false, open ? epoll_ctl_open : rdy_epoll_ctl);
		break;
	case GATE_EPOLL_WAIT:
		SET_ROUTE(epoll_wait, false, open ? epoll_wait_open : epoll_wait_closed);
		SET_ROUTE(epoll_pwait, false, open ? epoll_pwait_open : epoll_pwait_closed);
		break;
	case GATE_COUNT:
		break;
	}
}

/* A timeout the kernel refuses (EINVAL): negative, or nanoseconds past a
 * second.  The library's own waits would take it for "forever". */
static bool timespec_bad(const struct timespec *ts)
{
	return ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L);
}

static bool timeval_bad(const struct timeval *tv)
{
	return tv && (tv->tv_sec < 0 || tv->tv_usec < 0); /* microseconds past 1e6 carry over */
}

static int refuse_timeout(void)
{
	errno = EINVAL;
	return -1;
}

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
	if (timespec_bad(ts))
		return refuse_timeout();
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
	return GO(poll)(fds, nfds, timeout);
}

SDP_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *ts,
		     const sigset_t *sigmask)
{
	return GO(ppoll)(fds, nfds, ts, sigmask);
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

/* select and pselect while no RDMA socket needs them: the kernel's, with
 * an nfds past FD_SETSIZE cut to the app's fds (rdy_select_kernel_nfds). */
static int select_open(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	if (__builtin_expect(nfds > FD_SETSIZE, 0))
		nfds = rdy_select_kernel_nfds(nfds);
	return real.select(nfds, rd, wr, ex, tv);
}

static int pselect_open(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
			const sigset_t *sigmask)
{
	if (__builtin_expect(nfds > FD_SETSIZE, 0))
		nfds = rdy_select_kernel_nfds(nfds);
	return real.pselect(nfds, rd, wr, ex, ts, sigmask);
}

static SLOW int select_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	long long ns;

	sdp_ensure_init();
	if (sdp_in_lib)
		return real.select(nfds, rd, wr, ex, tv);
	if (!rdy_any_rdma())
		return select_open(nfds, rd, wr, ex, tv);
	if (timeval_bad(tv))
		return refuse_timeout();
	ns = tv ? (long long)tv->tv_sec * 1000000000LL + (long long)tv->tv_usec * 1000 : -1;
	return rdy_select(nfds, rd, wr, ex, ns, NULL, tv);
}

SDP_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	return GO(select)(nfds, rd, wr, ex, tv);
}

static SLOW int pselect_slow(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
			     const struct timespec *ts, const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (sdp_in_lib)
		return real.pselect(nfds, rd, wr, ex, ts, sigmask);
	if (!rdy_any_rdma())
		return pselect_open(nfds, rd, wr, ex, ts, sigmask);
	if (timespec_bad(ts))
		return refuse_timeout();
	return rdy_select(nfds, rd, wr, ex, timespec_ns(ts), sigmask, NULL);
}

SDP_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
		       const sigset_t *sigmask)
{
	return GO(pselect)(nfds, rd, wr, ex, ts, sigmask);
}

/* A set is recorded at birth, so that every nesting and fork of it is
 * seen: only such a set answers readiness from user space. */
SDP_EXPORT int epoll_create(int size)
{
	int fd;

	sdp_ensure_init();
	fd = real.epoll_create(size);
	if (fd >= 0)
		rdy_epoll_born(fd);
	return fd;
}

SDP_EXPORT int epoll_create1(int flags)
{
	int fd;

	sdp_ensure_init();
	fd = real.epoll_create1(flags);
	if (fd >= 0)
		rdy_epoll_born(fd);
	return fd;
}

/* Gate open: the kernel's, but a set put in another set is noted (one
 * table load): it must never answer from user space. */
static int epoll_ctl_open(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (op == EPOLL_CTL_ADD)
		rdy_epoll_watched(fd);
	return real.epoll_ctl(epfd, op, fd, ev);
}

/* Gate open: no socket is FRESH or RDMA, so no registration needs a record
 * and every fd's readiness is the kernel's (the race argument is at
 * rdy_epoll_ctl() and in preload/gate.h). */
SDP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return GO(epoll_ctl)(epfd, op, fd, ev);
}

/* Gate open: libc's wait.  No shadow set existed when it began; one made
 * while it slept closes the gate first, and may have woken it: then its
 * events are looked at again (rdy_epoll_after_plain), so the app never
 * sees the library's own, and it waits on for what is left of its timeout
 * (start_ns: when it began; 0, not read: the whole timeout again). */
static inline int epoll_pwait_plain(int epfd, struct epoll_event *events, int maxevents,
				    int timeout, const sigset_t *sigmask, long long start_ns)
{
	int n = real.epoll_pwait(epfd, events, maxevents, timeout, sigmask);

	if (likely(n <= 0 || gate_open(GATE_EPOLL_WAIT)))
		return n;
	return rdy_epoll_after_plain(epfd, events, n, maxevents, timeout_ms_ns(timeout), start_ns,
				     sigmask);
}

static __attribute__((noinline)) int epoll_pwait_timed(int epfd, struct epoll_event *events,
							int maxevents, int timeout,
							const sigset_t *sigmask)
{
	return epoll_pwait_plain(epfd, events, maxevents, timeout, sigmask, rdy_mono_ns());
}

/* The clock is read only once the process has made a shadow set: one that
 * stays on TCP pays nothing for it, and a wake-up by its first shadow
 * waits the whole timeout again. */
static int epoll_pwait_open(int epfd, struct epoll_event *events, int maxevents, int timeout,
			    const sigset_t *sigmask)
{
	if (atomic_load_explicit(&rdy_shadow_births, memory_order_relaxed) && timeout > 0)
		return epoll_pwait_timed(epfd, events, maxevents, timeout, sigmask);
	return epoll_pwait_plain(epfd, events, maxevents, timeout, sigmask, 0);
}

/* epoll_wait is epoll_pwait with no signal mask. */
static int epoll_wait_open(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return epoll_pwait_open(epfd, events, maxevents, timeout, NULL);
}

/* Gate closed: a set without a shadow is the kernel's to answer (a shadow
 * made while that wait sleeps is handled as above). */
static SLOW int epoll_wait_slow(int epfd, struct epoll_event *events, int maxevents,
				int timeout, const sigset_t *sigmask, bool pwait)
{
	sdp_ensure_init();
	if (sdp_in_lib)
		return pwait ? real.epoll_pwait(epfd, events, maxevents, timeout, sigmask)
			     : real.epoll_wait(epfd, events, maxevents, timeout);
	if (!rdy_epoll_shadowed(epfd))
		return rdy_epoll_wait_plain(epfd, events, maxevents, timeout_ms_ns(timeout), sigmask);
	return rdy_epoll_wait(epfd, events, maxevents, timeout_ms_ns(timeout), sigmask);
}

static SLOW int epoll_wait_closed(int epfd, struct epoll_event *events, int maxevents,
				  int timeout)
{
	return epoll_wait_slow(epfd, events, maxevents, timeout, NULL, false);
}

static SLOW int epoll_pwait_closed(int epfd, struct epoll_event *events, int maxevents,
				   int timeout, const sigset_t *sigmask)
{
	return epoll_wait_slow(epfd, events, maxevents, timeout, sigmask, true);
}

SDP_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return GO(epoll_wait)(epfd, events, maxevents, timeout);
}

SDP_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			   const sigset_t *sigmask)
{
	return GO(epoll_pwait)(epfd, events, maxevents, timeout, sigmask);
}

SDP_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			    const struct timespec *ts, const sigset_t *sigmask)
{
	sdp_ensure_init();
	if (!real.epoll_pwait2) {
		errno = ENOSYS;
		return -1;
	}
	if (sdp_in_lib)
		return real.epoll_pwait2(epfd, events, maxevents, ts, sigmask);
	if (timespec_bad(ts))
		return refuse_timeout();
	if (likely(!rdy_epoll_shadowed(epfd)))
		return rdy_epoll_wait_plain(epfd, events, maxevents, timespec_ns(ts), sigmask);
	return rdy_epoll_wait(epfd, events, maxevents, timespec_ns(ts), sigmask);
}
