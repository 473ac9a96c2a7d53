/* Readiness of RDMA-backed sockets in poll/select/epoll sets mixed with
 * ordinary fds.  Each RDMA channel exposes two level-triggered eventfds
 * (readable-or-hangup, writable-or-error); poll and select wait on those
 * instead of the idle kernel socket, and each app epoll instance that holds
 * RDMA-backed sockets gets a shadow epoll set registered inside it. */
#ifndef SDPSHIM_READINESS_H
#define SDPSHIM_READINESS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#include "base/fdtable.h"

/* True when any socket of this process is RDMA-backed (or connecting).
 * Meaningful once initialised (before, it says true). */
bool rdy_any_rdma(void);

static inline bool rdy_epoll_shadowed(int epfd)
{
	return fdt_kind_of(epfd) == FDT_EPOLL;
}

/* timeout_ns < 0: wait forever.  Both restore the caller's sets/revents. */
int rdy_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask);
int rdy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, long long timeout_ns,
	       const sigset_t *sigmask, struct timeval *tv_out);
/* The nfds for a kernel select of the app's sets: one past FD_SETSIZE is
 * cut to one past the app's highest fd once the library has fds of its own
 * (they sit high, and the kernel reads and writes as many bits as its fd
 * table spans, past an fd_set of FD_SETSIZE bits). */
int rdy_select_kernel_nfds(int nfds);

struct sdp_sock;
/* Mode switches of a socket (called with s->lock held): its epoll
 * registrations move between the kernel and the channel's indicators. */
void rdy_sock_to_rdma(struct sdp_sock *s);
void rdy_sock_to_kernel(struct sdp_sock *s);
/* The socket's last fd is closing: drop its registrations. */
void rdy_sock_closed(struct sdp_sock *s);
/* Its registrations only (the socket stays on its channel: an orphan kept
 * for a forked process, preload/fork_handoff.c). */
void rdy_sock_regs_drop(struct sdp_sock *s);
/* An epoll fd is closing (or being replaced by dup2). */
void rdy_epoll_dup(int old_fd, int new_fd);
void rdy_epoll_forget(int epfd);
/* fd, if an epoll set, is watched by poll, select or another set: its
 * channels' readiness is always written to their eventfds from now on. */
void rdy_epoll_watched(int fd);
/* epfd was just made by epoll_create: record it now. */
void rdy_epoll_born(int epfd);
/* In the parent after fork: every set is shared with the child. */
void rdy_epoll_atfork_parent(void);
/* In the child: what the parent's sets listed is the parent's to report. */
void rdy_epoll_atfork_child(void);

/* The epoll_ctl hook when its gate is closed (initialises if needed). */
int rdy_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int rdy_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		   const sigset_t *sigmask);
/* The wait of a set that holds no channel itself (it may nest one that
 * does) while RDMA sockets exist: the kernel answers; a sleeping wait
 * counts as a sleeper (core's conn_sleep_begin_any), a zero timeout takes
 * in the links whose CQ arm is put off. */
int rdy_epoll_wait_plain(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
			 const sigset_t *sigmask);
/* CLOCK_MONOTONIC in nanoseconds, for the waits' deadlines. */
static inline long long rdy_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Shadow sets made so far in this process (readiness_epoll.c). */
extern _Atomic unsigned rdy_shadow_births;

/* The n > 0 events of a kernel wait on epfd that began before epfd had a
 * shadow set and may have been woken by it: the library's events are
 * taken out and translated; if none is left, the wait goes on for what is
 * left of its timeout (start_ns: CLOCK_MONOTONIC when it began, read only
 * for a timeout above 0; 0 if not read: the whole timeout again). */
int rdy_epoll_after_plain(int epfd, struct epoll_event *events, int n, int maxevents,
			  long long timeout_ns, long long start_ns, const sigset_t *sigmask);

#endif
