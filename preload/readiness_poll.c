/* Readiness of RDMA-backed sockets under poll, ppoll, select and pselect, in
 * sets mixed with ordinary fds: the kernel still does the waiting, on each
 * channel's indicator eventfds instead of the idle TCP socket. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fdtable.h"
#include "base/real.h"
#include "core/conn.h"
#include "core/progress.h" /* progress_hidden_mark() */
#include "preload/gate.h"
#include "preload/readiness.h"
#include "preload/readiness_internal.h"
#include "preload/sock.h"
#include "preload/stream.h"

/* GATE_POLL counts the RDMA-backed sockets (once initialised). */
bool rdy_any_rdma(void)
{
	return !gate_open(GATE_POLL);
}

struct poll_map {
	struct sdp_conn *conn; /* NULL: an ordinary fd, at index rd */
	int rd, wr;            /* indices in the kernel array, -1 if absent */
};

/* The channel to wait on for fd, with a reference; NULL: the fd itself. */
static struct sdp_conn *rdma_conn_of(int fd)
{
	struct sdp_sock *s = fd >= 0 ? sock_of(fd) : NULL;

	return s ? sock_stream(s)->channel_get(s) : NULL;
}

/* How often a wait looks again at a channel whose readable indicator it
 * leaves out of the kernel's array (rd_for_hangups_only). */
#define HANGUP_LOOK_NS (50 * 1000000LL)

/* The app asks c only for its errors and hang-ups (no POLLIN: events 0,
 * POLLRDHUP or POLLPRI alone) and c is readable for something it did not
 * ask (unread bytes, the peer's FIN without POLLRDHUP asked): the readable
 * indicator is set and would end every kernel wait at once, for nothing.
 * It is left out, and the wait looks again every HANGUP_LOOK_NS for what
 * the app asked (an indicator cannot tell a hang-up from bytes). */
static bool rd_for_hangups_only(struct sdp_conn *c, short events)
{
	unsigned mask;

	if (events & (POLLIN | POLLRDNORM))
		return false;
	mask = conn_poll_mask(c);
	return (mask & POLLIN) && !(mask & ((unsigned short)events | POLLERR | POLLHUP));
}

/* Builds the kernel's array; returns its length.  *looks: a channel's
 * readable indicator was left out (rd_for_hangups_only). */
static nfds_t build_poll_set(const struct pollfd *fds, nfds_t nfds, struct pollfd *k,
			     struct poll_map *map, bool *looks)
{
	nfds_t n = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct sdp_conn *c = rdma_conn_of(fds[i].fd);

		map[i].conn = c;
		map[i].rd = map[i].wr = -1;
		if (!c) {
			rdy_epoll_watched(fds[i].fd); /* an epoll set polled */
			k[n] = fds[i];
			map[i].rd = (int)n++;
			continue;
		}
		if (rdy_wants_rd((uint32_t)fds[i].events)) {
			if (rd_for_hangups_only(c, fds[i].events)) {
				*looks = true;
			} else {
				k[n] = (struct pollfd){ .fd = conn_readable_eventfd(c), .events = POLLIN };
				map[i].rd = (int)n++;
			}
		}
		if (fds[i].events & POLLOUT) {
			k[n] = (struct pollfd){ .fd = conn_writable_eventfd(c), .events = POLLIN };
			map[i].wr = (int)n++;
		}
	}
	return n;
}

static int collect_revents(struct pollfd *fds, nfds_t nfds, const struct pollfd *k,
			   const struct poll_map *map)
{
	int ready = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		if (map[i].conn) {
			unsigned want = (unsigned)fds[i].events | POLLERR | POLLHUP;
			fds[i].revents = (short)(conn_poll_mask(map[i].conn) & want);
		} else {
			fds[i].revents = k[map[i].rd].revents;
		}
		ready += fds[i].revents != 0;
	}
	return ready;
}

static void release_map(struct poll_map *map, nfds_t nfds, bool prepare_wait)
{
	for (nfds_t i = 0; i < nfds; i++) {
		if (!map[i].conn)
			continue;
		if (prepare_wait)
			conn_prepare_wait(map[i].conn);
		conn_put(map[i].conn);
		map[i].conn = NULL;
	}
}

/* The thread is about to sleep on the set's eventfds: each channel counts
 * it as a sleeper (no indicator of it is deferred from now on), then is
 * looked at once more.  True: one is ready, do not sleep. */
static bool sleepers_add(const struct pollfd *fds, nfds_t nfds, const struct poll_map *map)
{
	bool ready = false;

	for (nfds_t i = 0; i < nfds; i++) {
		unsigned want = (unsigned)fds[i].events | POLLERR | POLLHUP;
		if (map[i].conn && (conn_sleep_begin(map[i].conn) & want))
			ready = true;
	}
	return ready;
}

static void sleepers_drop(const struct poll_map *map, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++)
		if (map[i].conn)
			conn_sleep_end(map[i].conn);
}

static bool any_rdma_ready(struct pollfd *fds, nfds_t nfds, const struct poll_map *map)
{
	for (nfds_t i = 0; i < nfds; i++) {
		unsigned want = (unsigned)fds[i].events | POLLERR | POLLHUP;
		if (map[i].conn && (conn_poll_mask(map[i].conn) & want))
			return true;
	}
	return false;
}

/* Busy-poll (SDPSHIM_SPIN_US): the set's channels take in their
 * completions in this thread, in user space, until one is ready or the
 * spin is over; the ordinary fds of a mixed set are looked at every 32
 * rounds (one system call).  True: something may be ready. */
static bool spin_poll_set(const struct pollfd *fds, nfds_t nfds, struct pollfd *k, nfds_t kn,
			  const struct poll_map *map)
{
	static const struct timespec zero;
	unsigned us = conn_spin_us();
	bool plain = false, found = true;
	long long until;

	if (!us)
		return false;
	for (nfds_t i = 0; i < nfds; i++)
		plain |= !map[i].conn;
	until = rdy_spin_until(us);
	for (unsigned round = 1;; round++) {
		for (nfds_t i = 0; i < nfds; i++)
			if (map[i].conn)
				conn_app_poll(map[i].conn);
		if (any_rdma_ready((struct pollfd *)fds, nfds, map) ||
		    (plain && round % 32 == 0 && real.ppoll(k, kn, &zero, NULL) > 0))
			break;
		if (rdy_spin_over(until)) {
			found = false;
			break;
		}
		rdy_cpu_relax();
	}
	return found;
}

static __thread bool spin_earned = true; /* the thread's last wait found a channel ready */

/* After the kernel's wait, or as its cancellation cleanup. */
static void sleep_over(void *sleeping)
{
	if (*(bool *)sleeping)
		conn_sleep_end_any();
}

/* One wait; *timed_out: the kernel's wait itself ran out (nothing woke it). */
static int poll_once(struct pollfd *fds, nfds_t nfds, struct pollfd *k, struct poll_map *map,
		     long long left_ns, const sigset_t *sigmask, bool *timed_out)
{
	bool looks = false;
	volatile bool capped = false; /* read after the cancellation point */
	nfds_t kn = build_poll_set(fds, nfds, k, map, &looks);

	/* The app's thread takes in its streams' completions first (in user
	 * space): a message already there needs no other thread's wake-up. */
	for (nfds_t i = 0; i < nfds; i++)
		if (map[i].conn)
			conn_app_poll(map[i].conn);
	struct timespec ts, *tsp = NULL;
	bool rdma_ready = any_rdma_ready(fds, nfds, map), sleeping;
	int rc;

	/* A spin makes the call late by up to its length, never early.  As in
	 * epoll_wait, only a thread whose last wait found a channel ready
	 * spins: an idle one sleeps at once. */
	if (!rdma_ready && left_ns != 0 && spin_earned)
		rdma_ready = spin_poll_set(fds, nfds, k, kn, map);
	if (rdma_ready)
		left_ns = 0;
	sleeping = left_ns != 0;
	if (sleeping)
		conn_sleep_begin_any();
	if (sleeping && sleepers_add(fds, nfds, map)) {
		rdma_ready = true;
		left_ns = 0;
	}
	if (looks && (left_ns < 0 || left_ns > HANGUP_LOOK_NS)) {
		left_ns = HANGUP_LOOK_NS;
		capped = true; /* running out is not the call's timeout */
	}
	if (left_ns >= 0) {
		ts.tv_sec = (time_t)(left_ns / 1000000000LL);
		ts.tv_nsec = (long)(left_ns % 1000000000LL);
		tsp = &ts;
	}
	pthread_cleanup_push(sleep_over, &sleeping);
	rc = real.ppoll(k, kn, tsp, sigmask);
	pthread_cleanup_pop(1);
	if (sleeping)
		sleepers_drop(map, nfds);
	*timed_out = rc == 0 && !rdma_ready && !capped;
	if (rc >= 0)
		rc = collect_revents(fds, nfds, k, map);
	spin_earned = rc > 0 && any_rdma_ready(fds, nfds, map);
	release_map(map, nfds, rc == 0);
	return rc;
}

int rdy_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask)
{
	struct pollfd k_stack[64];
	struct poll_map map_stack[32];
	struct pollfd *k = nfds <= 32 ? k_stack : malloc(nfds * 2 * sizeof(*k));
	struct poll_map *map = nfds <= 32 ? map_stack : malloc(nfds * sizeof(*map));
	struct rdy_bound bound;
	bool timed_out;
	int rc;

	if (!k || !map) {
		if (k != k_stack)
			free(k);
		if (map != map_stack)
			free(map);
		errno = ENOMEM;
		return -1;
	}
	rdy_bound_start(&bound, timeout_ns);
	for (;;) {
		rc = poll_once(fds, nfds, k, map, rdy_bound_left(&bound), sigmask, &timed_out);
		if (rc != 0 || timed_out || rdy_bound_expired(&bound))
			break;
	}
	if (k != k_stack)
		free(k);
	if (map != map_stack)
		free(map);
	return rc;
}

#define POLLIN_SET  (POLLIN | POLLRDNORM | POLLRDBAND | POLLHUP | POLLERR)
#define POLLOUT_SET (POLLOUT | POLLWRNORM | POLLWRBAND | POLLERR)
#define POLLEX_SET  (POLLPRI)

/* The kernel's fd_set: longs of bits, as many as nfds needs (an app may
 * pass a set larger than FD_SETSIZE, sized by its own fd limit); glibc's
 * FD_ISSET refuses bits past FD_SETSIZE under FORTIFY. */
#define SET_BITS (8 * sizeof(unsigned long))

static size_t set_bytes(int nfds)
{
	return ((size_t)nfds + SET_BITS - 1) / SET_BITS * sizeof(unsigned long);
}

static bool set_has(const fd_set *set, int fd)
{
	return set && ((const unsigned long *)(const void *)set)[fd / SET_BITS] >> (fd % SET_BITS) & 1;
}

static void set_add(fd_set *set, int fd)
{
	((unsigned long *)(void *)set)[fd / SET_BITS] |= 1UL << (fd % SET_BITS);
}

struct dirent64_raw { /* getdents64's record (linux_dirent64) */
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* One past the highest fd open for the app in /proc/thread-self/fd, the
 * library's hidden ones left out; -1 if it cannot be listed. */
static int list_app_fds(void)
{
	_Alignas(8) char buf[4096];
	int end = 0, dir = (int)syscall(SYS_openat, AT_FDCWD, "/proc/thread-self/fd",
					O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;

	if (dir < 0)
		return -1;
	while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			const struct dirent64_raw *d = (const void *)(buf + off);
			int fd = d->d_name[0] >= '0' && d->d_name[0] <= '9' ? atoi(d->d_name) : -1;

			if (fd >= 0 && fd != dir && fdt_kind_of(fd) != FDT_HIDDEN && fd >= end)
				end = fd + 1;
			off += d->d_reclen;
		}
	}
	syscall(SYS_close, dir);
	return n < 0 ? -1 : end;
}

/* The same by asking each number from below, downward (no /proc, or no
 * fd free to list it with). */
static int probe_app_fds(int below)
{
	for (int fd = below - 1; fd >= FD_SETSIZE; fd--)
		if (fdt_kind_of(fd) != FDT_HIDDEN && real.fcntl(fd, F_GETFD) >= 0)
			return fd + 1;
	return FD_SETSIZE;
}

/* One past the highest fd open for the app, the library's hidden ones left
 * out: they sit high (3/4 of the fd limit) and would make the kernel's
 * table, and so the bits read, larger than the app's set.  A hidden fd is
 * open and unmarked for a moment while it is made or closed: a listing
 * that saw one of those moments is taken again. */
static int app_fd_end(int nfds)
{
	for (int tries = 0; tries < 16; tries++) {
		unsigned mark = progress_hidden_mark();
		int end;

		if (!progress_hidden_stable(mark))
			continue; /* a hidden fd is being made or closed */
		end = list_app_fds();
		if (end < 0)
			break;
		if (progress_hidden_stable(mark))
			return end;
	}
	return probe_app_fds(nfds);
}

/* As the kernel: an nfds past the open fds is cut, never refused, and no
 * bit past them is read (an app may pass its fd limit as nfds with an
 * fd_set of FD_SETSIZE bits, which the kernel reads only as far as its fd
 * table).  Never below FD_SETSIZE: the set holds those bits, and a bit set
 * for a closed fd there gets EBADF, as from the kernel. */
static int select_nfds(int nfds)
{
	int end;

	if (nfds <= FD_SETSIZE)
		return nfds;
	end = app_fd_end(nfds);
	if (end < FD_SETSIZE)
		end = FD_SETSIZE;
	return nfds < end ? nfds : end;
}

int rdy_select_kernel_nfds(int nfds)
{
	/* No fd of the library's was ever open: the kernel's table is the
	 * app's own, and the kernel cuts nfds to it. */
	if (progress_hidden_mark() == 0)
		return nfds;
	return select_nfds(nfds);
}

static short select_events(int fd, const fd_set *rd, const fd_set *wr, const fd_set *ex)
{
	return (short)((set_has(rd, fd) ? POLLIN : 0) | (set_has(wr, fd) ? POLLOUT : 0) |
		       (set_has(ex, fd) ? POLLPRI : 0));
}

/* The sets rewritten from the answers: the bits of what is ready. */
static int select_answer(const struct pollfd *pfds, int n, int nfds, fd_set *rd, fd_set *wr,
			 fd_set *ex)
{
	int bits = 0;

	if (rd)
		memset(rd, 0, set_bytes(nfds));
	if (wr)
		memset(wr, 0, set_bytes(nfds));
	if (ex)
		memset(ex, 0, set_bytes(nfds));
	for (int i = 0; i < n; i++) {
		short re = pfds[i].revents, ev = pfds[i].events;

		if ((ev & POLLIN) && (re & POLLIN_SET)) {
			set_add(rd, pfds[i].fd);
			bits++;
		}
		if ((ev & POLLOUT) && (re & POLLOUT_SET)) {
			set_add(wr, pfds[i].fd);
			bits++;
		}
		if ((ev & POLLPRI) && (re & POLLEX_SET)) {
			set_add(ex, pfds[i].fd);
			bits++;
		}
	}
	return bits;
}

static int select_wait(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, long long timeout_ns,
		       const sigset_t *sigmask)
{
	struct pollfd *pfds;
	int n = 0, rc;

	for (int fd = 0; fd < nfds; fd++)
		n += select_events(fd, rd, wr, ex) != 0;
	pfds = calloc(n ? (size_t)n : 1, sizeof(*pfds));
	if (!pfds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0, i = 0; fd < nfds && i < n; fd++) {
		short ev = select_events(fd, rd, wr, ex);

		if (ev)
			pfds[i++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	rc = rdy_poll(pfds, (nfds_t)n, timeout_ns, sigmask);
	for (int i = 0; rc >= 0 && i < n; i++) {
		if (pfds[i].revents & POLLNVAL) {
			errno = EBADF;
			rc = -1;
		}
	}
	if (rc >= 0)
		rc = select_answer(pfds, n, nfds, rd, wr, ex);
	free(pfds);
	return rc;
}

int rdy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, long long timeout_ns,
	       const sigset_t *sigmask, struct timeval *tv_out)
{
	long long start = rdy_mono_ns();
	int rc, err;

	if (nfds < 0) {
		errno = EINVAL;
		return -1;
	}
	rc = select_wait(select_nfds(nfds), rd, wr, ex, timeout_ns, sigmask);
	err = errno;
	/* Linux reports the time left, after an error (EINTR) too; a zero
	 * timeout is left as it is. */
	if (tv_out && timeout_ns > 0) {
		long long left = timeout_ns - (rdy_mono_ns() - start);

		if (left < 0)
			left = 0;
		tv_out->tv_sec = (time_t)(left / 1000000000LL);
		tv_out->tv_usec = (suseconds_t)(left % 1000000000LL / 1000);
	}
	errno = err;
	return rc;
}
