/* Readiness of RDMA-backed sockets under poll, ppoll, select, pselect and
 * epoll, in sets mixed with ordinary fds.  The kernel still does the
 * waiting: poll/select substitute each channel's indicator eventfds for the
 * idle TCP socket, and each app epoll instance that holds an RDMA-backed
 * socket gets a shadow epoll set (of indicators) registered inside it, so
 * level, edge, one-shot and RDHUP semantics come from the kernel's epoll. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "core/conn.h"
#include "core/progress.h"
#include "preload/gate.h"
#include "preload/init.h"
#include "preload/readiness.h"
#include "preload/real.h"
#include "preload/sock.h"

struct sdp_epoll {
	int epfd;             /* the app's epoll fd */
	int shadow_fd;        /* our epoll set of indicators, registered in epfd; -1 until needed */
	pthread_mutex_t lock; /* shadow membership and the regs' shadow fields */
	_Atomic int refs;     /* fd numbers naming it + registrations */
	bool closed;
	uint32_t gen;         /* merge generation of the current epoll_wait */
};

struct ep_reg {
	struct ep_reg *next;  /* in the socket's list */
	struct sdp_epoll *ep;
	int fd;               /* the app's fd number it registered */
	uint32_t events;
	epoll_data_t data;
	struct sdp_conn *conn; /* referenced while in the shadow */
	bool in_rd, in_wr;
	bool disarmed;        /* EPOLLONESHOT fired; EPOLL_CTL_MOD re-arms */
	uint32_t out_gen;
	int out_idx;
};

#define IND_RD 0u
#define IND_WR 1u
#define REG_TAG_MASK ((uintptr_t)1)

/* GATE_POLL counts the RDMA-backed sockets (once initialised). */
bool rdy_any_rdma(void)
{
	return !gate_open(GATE_POLL);
}

/* ---------------------------------------------------------------- epoll */

static void ep_put(struct sdp_epoll *ep)
{
	if (atomic_fetch_sub(&ep->refs, 1) != 1)
		return;
	if (ep->shadow_fd >= 0)
		gate_release(GATE_EPOLL_WAIT);
	progress_close_hidden(ep->shadow_fd);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

/* The shadow record of epfd, created on first need.  NULL: not possible. */
static struct sdp_epoll *ep_for(int epfd)
{
	struct sdp_epoll *ep;

	sock_table_lock();
	ep = fdt_get(epfd, FDT_EPOLL);
	if (!ep && fdt_kind_of(epfd) == FDT_NONE) {
		ep = calloc(1, sizeof(*ep));
		if (ep) {
			ep->epfd = epfd;
			ep->shadow_fd = -1;
			pthread_mutex_init(&ep->lock, NULL);
			atomic_init(&ep->refs, 1);
			if (fdt_set(epfd, FDT_EPOLL, ep) != 0) {
				free(ep);
				ep = NULL;
			}
		}
	}
	if (ep)
		atomic_fetch_add(&ep->refs, 1); /* the caller's */
	sock_table_unlock();
	return ep;
}

void rdy_epoll_forget(int epfd)
{
	struct sdp_epoll *ep;

	sock_table_lock();
	ep = fdt_get(epfd, FDT_EPOLL);
	fdt_clear(epfd);
	sock_table_unlock();
	if (!ep)
		return;
	pthread_mutex_lock(&ep->lock);
	ep->closed = true;
	pthread_mutex_unlock(&ep->lock);
	ep_put(ep);
}

/* Called with ep->lock held. */
static int ensure_shadow(struct sdp_epoll *ep)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = ep };

	if (ep->shadow_fd >= 0)
		return 0;
	ep->shadow_fd = progress_hide_fd(real.epoll_create1(EPOLL_CLOEXEC));
	if (ep->shadow_fd < 0)
		return -errno;
	gate_hold(GATE_EPOLL_WAIT); /* before the shadow can wake an epoll_wait */
	if (real.epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->shadow_fd, &ev) != 0) {
		int err = -errno;
		progress_close_hidden(ep->shadow_fd);
		ep->shadow_fd = -1;
		gate_release(GATE_EPOLL_WAIT);
		return err;
	}
	return 0;
}

static uint32_t shadow_flags(uint32_t events)
{
	return EPOLLIN | (events & (EPOLLET | EPOLLONESHOT));
}

static bool wants_rd(uint32_t events)
{
	/* Errors and hang-ups are always reported: with no output interest
	 * they arrive through the readable indicator. */
	return (events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI)) || !(events & EPOLLOUT);
}

static void ind_ctl(struct sdp_epoll *ep, int op, int ind_fd, struct ep_reg *reg, uintptr_t which)
{
	struct epoll_event ev = {
		.events = shadow_flags(reg->events),
		.data.u64 = (uint64_t)((uintptr_t)reg | which),
	};

	real.epoll_ctl(ep->shadow_fd, op, ind_fd, &ev);
}

/* Puts reg's indicators in the shadow set to match reg->events.  ep locked. */
static void shadow_sync(struct ep_reg *reg)
{
	struct sdp_epoll *ep = reg->ep;
	bool rd = !reg->disarmed && wants_rd(reg->events);
	bool wr = !reg->disarmed && (reg->events & EPOLLOUT) != 0;
	int rd_fd = reg->conn->rd_fd, wr_fd = reg->conn->wr_fd;

	if (ep->closed || ensure_shadow(ep) != 0)
		return;
	if (rd)
		ind_ctl(ep, reg->in_rd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, rd_fd, reg, IND_RD);
	else if (reg->in_rd)
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, rd_fd, NULL);
	if (wr)
		ind_ctl(ep, reg->in_wr ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, wr_fd, reg, IND_WR);
	else if (reg->in_wr)
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, wr_fd, NULL);
	reg->in_rd = rd;
	reg->in_wr = wr;
}

static void shadow_add(struct ep_reg *reg, struct sdp_conn *c)
{
	pthread_mutex_lock(&reg->ep->lock);
	conn_get(c);
	reg->conn = c;
	reg->in_rd = reg->in_wr = false;
	shadow_sync(reg);
	pthread_mutex_unlock(&reg->ep->lock);
}

static void shadow_del(struct ep_reg *reg)
{
	struct sdp_epoll *ep = reg->ep;
	struct sdp_conn *c = reg->conn;

	if (!c)
		return;
	pthread_mutex_lock(&ep->lock);
	if (ep->shadow_fd >= 0 && reg->in_rd)
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, c->rd_fd, NULL);
	if (ep->shadow_fd >= 0 && reg->in_wr)
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, c->wr_fd, NULL);
	reg->in_rd = reg->in_wr = false;
	reg->conn = NULL;
	pthread_mutex_unlock(&ep->lock);
	conn_put(c);
}

static struct ep_reg *reg_find(struct sdp_sock *s, struct sdp_epoll *ep, int fd)
{
	for (struct ep_reg *r = s->regs; r; r = r->next)
		if (r->ep == ep && r->fd == fd)
			return r;
	return NULL;
}

static void reg_unlink_free(struct sdp_sock *s, struct ep_reg *reg)
{
	for (struct ep_reg **pp = &s->regs; *pp; pp = &(*pp)->next) {
		if (*pp == reg) {
			*pp = reg->next;
			break;
		}
	}
	shadow_del(reg);
	ep_put(reg->ep);
	free(reg);
}

static struct ep_reg *reg_new(struct sdp_sock *s, struct sdp_epoll *ep, int fd,
			      const struct epoll_event *ev)
{
	struct ep_reg *reg = calloc(1, sizeof(*reg));

	if (!reg)
		return NULL;
	atomic_fetch_add(&ep->refs, 1);
	reg->ep = ep;
	reg->fd = fd;
	reg->events = ev->events;
	reg->data = ev->data;
	reg->next = s->regs;
	s->regs = reg;
	return reg;
}

void rdy_sock_to_rdma(struct sdp_sock *s)
{
	gate_hold(GATE_POLL);
	for (struct ep_reg *reg = s->regs; reg; reg = reg->next) {
		if (!reg->ep->closed)
			real.epoll_ctl(reg->ep->epfd, EPOLL_CTL_DEL, reg->fd, NULL);
		shadow_add(reg, s->conn);
	}
}

void rdy_sock_to_kernel(struct sdp_sock *s)
{
	while (s->regs) {
		struct ep_reg *reg = s->regs;
		struct epoll_event ev = { .events = reg->events, .data = reg->data };

		if (reg->disarmed) /* keep it disarmed: only EPOLL_CTL_MOD re-arms */
			ev.events = EPOLLONESHOT;
		shadow_del(reg);
		if (!reg->ep->closed)
			real.epoll_ctl(reg->ep->epfd, EPOLL_CTL_ADD, reg->fd, &ev);
		reg_unlink_free(s, reg);
	}
	gate_release(GATE_POLL); /* the stream is the kernel socket's again */
}

void rdy_sock_closed(struct sdp_sock *s)
{
	if (atomic_load(&s->mode) == SOCK_MODE_RDMA)
		gate_release(GATE_POLL);
	while (s->regs)
		reg_unlink_free(s, s->regs);
}

static int epoll_ctl_recorded(struct sdp_sock *s, struct sdp_epoll *ep, int epfd, int op, int fd,
			      struct epoll_event *ev)
{
	struct ep_reg *reg = reg_find(s, ep, fd);
	bool rdma = atomic_load(&s->mode) == SOCK_MODE_RDMA;

	if (!rdma && real.epoll_ctl(epfd, op, fd, ev) != 0)
		return -errno;
	if (rdma && real.fcntl(epfd, F_GETFD) < 0)
		return -EBADF;
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev)
		return -EFAULT;
	switch (op) {
	case EPOLL_CTL_ADD:
		if (reg)
			return -EEXIST;
		reg = reg_new(s, ep, fd, ev);
		if (!reg)
			return -ENOMEM;
		if (rdma)
			shadow_add(reg, s->conn);
		return 0;
	case EPOLL_CTL_MOD:
		if (!reg)
			return -ENOENT;
		reg->events = ev->events;
		reg->data = ev->data;
		reg->disarmed = false;
		if (rdma) {
			pthread_mutex_lock(&ep->lock);
			shadow_sync(reg);
			pthread_mutex_unlock(&ep->lock);
		}
		return 0;
	case EPOLL_CTL_DEL:
		if (!reg)
			return -ENOENT;
		reg_unlink_free(s, reg);
		return 0;
	default:
		return -EINVAL;
	}
}

/* The hook's gate is closed: some socket is FRESH or RDMA.  The lock-free
 * test sends untracked fds and sockets in a final kernel mode (TCP, LISTEN)
 * to the kernel.  It is safe because those modes are terminal and are
 * published only after the socket's registrations are back in the kernel's
 * sets (on_fallback: rdy_sock_to_kernel(), then the mode).  A socket that
 * reads FRESH or RDMA is decided again under its lock, as the connect or
 * the fallback that changes it holds that lock while it moves the records. */
int rdy_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct sdp_sock *s;
	struct sdp_epoll *ep;
	int mode, rc;

	sdp_ensure_init();
	s = sock_of(fd);
	if (!s || sdp_in_lib || sock_path_final_tcp(s))
		return real.epoll_ctl(epfd, op, fd, ev);
	pthread_mutex_lock(&s->lock);
	mode = atomic_load(&s->mode);
	if (mode == SOCK_MODE_TCP || mode == SOCK_MODE_LISTEN || !(ep = ep_for(epfd))) {
		pthread_mutex_unlock(&s->lock);
		return real.epoll_ctl(epfd, op, fd, ev);
	}
	rc = epoll_ctl_recorded(s, ep, epfd, op, fd, ev);
	pthread_mutex_unlock(&s->lock);
	ep_put(ep);
	if (rc < 0) {
		errno = -rc;
		return -1;
	}
	return 0;
}

static int ns_to_ms(long long ns)
{
	if (ns < 0)
		return -1;
	if (ns / 1000000 > 0x7fffffff)
		return 0x7fffffff;
	return (int)((ns + 999999) / 1000000);
}

static long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Turns shadow events into app events for the channels' sockets; merges
 * the two indicators of one registration.  ep locked.  Returns events added. */
static int translate_shadow(struct sdp_epoll *ep, struct epoll_event *out, int base, int room)
{
	struct epoll_event tmp[64];
	int n, added = 0;

	if (room > 64)
		room = 64;
	n = real.epoll_wait(ep->shadow_fd, tmp, room, 0);
	ep->gen++;
	for (int i = 0; i < n; i++) {
		struct ep_reg *reg = (struct ep_reg *)(uintptr_t)(tmp[i].data.u64 & ~REG_TAG_MASK);
		uint32_t rev;

		if (!reg->conn)
			continue;
		rev = conn_poll_mask(reg->conn) & (reg->events | EPOLLERR | EPOLLHUP);
		if (!rev) {
			conn_prepare_wait(reg->conn); /* stale: clear it before sleeping */
			if (reg->events & EPOLLONESHOT)
				shadow_sync(reg); /* the kernel disarmed it for nothing: re-arm */
			continue;
		}
		if (reg->out_gen == ep->gen) {
			out[reg->out_idx].events |= rev;
			continue;
		}
		reg->out_gen = ep->gen;
		reg->out_idx = base + added;
		out[base + added].events = rev;
		out[base + added].data = reg->data;
		added++;
		if (reg->events & EPOLLONESHOT) {
			reg->disarmed = true;
			shadow_sync(reg);
		}
	}
	return added;
}

int rdy_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		   const sigset_t *sigmask)
{
	struct sdp_epoll *ep = fdt_get(epfd, FDT_EPOLL);
	long long deadline = timeout_ns >= 0 ? mono_ns() + timeout_ns : -1;

	if (!ep || ep->shadow_fd < 0 || maxevents <= 0)
		return real.epoll_pwait(epfd, events, maxevents, ns_to_ms(timeout_ns), sigmask);
	for (;;) {
		long long left = deadline < 0 ? -1 : deadline - mono_ns();
		int n = real.epoll_pwait(epfd, events, maxevents, ns_to_ms(left < 0 && deadline >= 0 ? 0 : left),
					 sigmask);
		int sentinel = -1, total;

		if (n <= 0)
			return n;
		for (int i = 0; i < n; i++)
			if (events[i].data.ptr == ep)
				sentinel = i;
		if (sentinel < 0)
			return n;
		events[sentinel] = events[n - 1];
		total = n - 1;
		pthread_mutex_lock(&ep->lock);
		if (ep->shadow_fd >= 0)
			total += translate_shadow(ep, events, total, maxevents - total);
		pthread_mutex_unlock(&ep->lock);
		if (total > 0 || (deadline >= 0 && mono_ns() >= deadline))
			return total;
	}
}

/* ---------------------------------------------------------- poll/select */

struct poll_map {
	struct sdp_conn *conn; /* NULL: an ordinary fd, at index rd */
	int rd, wr;            /* indices in the kernel array, -1 if absent */
};

static struct sdp_conn *rdma_conn_of(int fd)
{
	struct sdp_sock *s = fd >= 0 ? sock_of(fd) : NULL;
	struct sdp_conn *c = NULL;

	if (!s || !sock_is_rdma(s))
		return NULL;
	pthread_mutex_lock(&s->lock);
	if (sock_is_rdma(s) && s->conn) {
		c = s->conn;
		conn_get(c);
	}
	pthread_mutex_unlock(&s->lock);
	return c;
}

/* Builds the kernel's array; returns its length. */
static nfds_t build_poll_set(const struct pollfd *fds, nfds_t nfds, struct pollfd *k,
			     struct poll_map *map)
{
	nfds_t n = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct sdp_conn *c = rdma_conn_of(fds[i].fd);

		map[i].conn = c;
		map[i].rd = map[i].wr = -1;
		if (!c) {
			k[n] = fds[i];
			map[i].rd = (int)n++;
			continue;
		}
		if (wants_rd((uint32_t)fds[i].events)) {
			k[n] = (struct pollfd){ .fd = c->rd_fd, .events = POLLIN };
			map[i].rd = (int)n++;
		}
		if (fds[i].events & POLLOUT) {
			k[n] = (struct pollfd){ .fd = c->wr_fd, .events = POLLIN };
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

static bool any_rdma_ready(struct pollfd *fds, nfds_t nfds, const struct poll_map *map)
{
	for (nfds_t i = 0; i < nfds; i++) {
		unsigned want = (unsigned)fds[i].events | POLLERR | POLLHUP;
		if (map[i].conn && (conn_poll_mask(map[i].conn) & want))
			return true;
	}
	return false;
}

static int poll_once(struct pollfd *fds, nfds_t nfds, struct pollfd *k, struct poll_map *map,
		     long long left_ns, const sigset_t *sigmask)
{
	nfds_t kn = build_poll_set(fds, nfds, k, map);

	for (nfds_t i = 0; i < nfds; i++)
		if (map[i].conn)
			conn_progress(map[i].conn);
	struct timespec ts, *tsp = NULL;
	int rc;

	if (any_rdma_ready(fds, nfds, map))
		left_ns = 0;
	if (left_ns >= 0) {
		ts.tv_sec = (time_t)(left_ns / 1000000000LL);
		ts.tv_nsec = (long)(left_ns % 1000000000LL);
		tsp = &ts;
	}
	rc = real.ppoll(k, kn, tsp, sigmask);
	if (rc >= 0)
		rc = collect_revents(fds, nfds, k, map);
	release_map(map, nfds, rc == 0);
	return rc;
}

int rdy_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask)
{
	struct pollfd k_stack[64];
	struct poll_map map_stack[32];
	struct pollfd *k = nfds <= 32 ? k_stack : malloc(nfds * 2 * sizeof(*k));
	struct poll_map *map = nfds <= 32 ? map_stack : malloc(nfds * sizeof(*map));
	long long deadline = timeout_ns >= 0 ? mono_ns() + timeout_ns : -1;
	int rc;

	if (!k || !map) {
		if (k != k_stack)
			free(k);
		if (map != map_stack)
			free(map);
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		long long left = deadline < 0 ? -1 : deadline - mono_ns();

		rc = poll_once(fds, nfds, k, map, deadline >= 0 && left < 0 ? 0 : left, sigmask);
		if (rc != 0 || (deadline >= 0 && mono_ns() >= deadline))
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

int rdy_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, long long timeout_ns,
	       const sigset_t *sigmask, struct timeval *tv_out)
{
	struct pollfd *pfds;
	int n = 0, rc, bits = 0;
	long long start = mono_ns();

	if (nfds < 0 || nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	pfds = calloc(nfds ? (size_t)nfds : 1, sizeof(*pfds));
	if (!pfds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			pfds[n++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	rc = rdy_poll(pfds, (nfds_t)n, timeout_ns, sigmask);
	if (rc < 0) {
		free(pfds);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (pfds[i].revents & POLLNVAL) {
			free(pfds);
			errno = EBADF;
			return -1;
		}
	}
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	for (int i = 0; i < n; i++) {
		short re = pfds[i].revents, ev = pfds[i].events;
		if ((ev & POLLIN) && (re & POLLIN_SET)) {
			FD_SET(pfds[i].fd, rd);
			bits++;
		}
		if ((ev & POLLOUT) && (re & POLLOUT_SET)) {
			FD_SET(pfds[i].fd, wr);
			bits++;
		}
		if ((ev & POLLPRI) && (re & POLLEX_SET)) {
			FD_SET(pfds[i].fd, ex);
			bits++;
		}
	}
	free(pfds);
	if (tv_out) { /* Linux reports the time left */
		long long left = timeout_ns - (mono_ns() - start);
		if (left < 0)
			left = 0;
		tv_out->tv_sec = (time_t)(left / 1000000000LL);
		tv_out->tv_usec = (suseconds_t)(left % 1000000000LL / 1000);
	}
	return bits;
}
