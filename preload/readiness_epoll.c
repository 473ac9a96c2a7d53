/* Readiness of RDMA-backed sockets under epoll: each app epoll instance that
 * holds one gets a shadow epoll set of the channels' indicators, registered
 * inside it, so level, edge, one-shot and RDHUP semantics come from the
 * kernel's epoll.  A socket's registrations follow its mode. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "base/real.h"
#include "core/conn.h"
#include "core/progress.h"
#include "preload/gate.h"
#include "preload/init.h"
#include "preload/readiness.h"
#include "preload/readiness_internal.h"
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
	bool rd = !reg->disarmed && rdy_wants_rd(reg->events);
	bool wr = !reg->disarmed && (reg->events & EPOLLOUT) != 0;
	int rd_fd = conn_readable_eventfd(reg->conn), wr_fd = conn_writable_eventfd(reg->conn);

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
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, conn_readable_eventfd(c), NULL);
	if (ep->shadow_fd >= 0 && reg->in_wr)
		real.epoll_ctl(ep->shadow_fd, EPOLL_CTL_DEL, conn_writable_eventfd(c), NULL);
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
	struct rdy_bound bound;

	if (!ep || ep->shadow_fd < 0 || maxevents <= 0)
		return real.epoll_pwait(epfd, events, maxevents, ns_to_ms(timeout_ns), sigmask);
	rdy_bound_start(&bound, timeout_ns);
	for (;;) {
		int n = real.epoll_pwait(epfd, events, maxevents, ns_to_ms(rdy_bound_left(&bound)),
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
		if (total > 0 || rdy_bound_expired(&bound))
			return total;
	}
}
