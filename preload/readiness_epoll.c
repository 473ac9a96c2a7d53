/* Readiness of RDMA-backed sockets under epoll: each app epoll instance that
 * holds one gets a shadow epoll set of the channels' indicators, registered
 * inside it, so level, edge, one-shot and RDHUP semantics come from the
 * kernel's epoll.  It also gets the devices' completion channels, so a
 * thread asleep in it wakes on a completion and takes it in itself
 * (core/app_wake.c).  A socket's registrations follow its mode. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn.h"
#include "core/progress.h"
#include "preload/gate.h"
#include "preload/init.h"
#include "preload/fork_handoff.h"
#include "preload/readiness.h"
#include "preload/readiness_internal.h"
#include "preload/sock.h"

struct sdp_epoll {
	int epfd;             /* one of the app's numbers for it: the library's own calls on
			       * the kernel set use it (ep->lock), and it moves on to another
			       * when the app closes it (rdy_epoll_forget) */
	int fd_names;         /* the app's fd numbers naming it (dup, dup2, F_DUPFD; table
			       * lock): closed with the last */
	int shadow_fd;        /* our epoll set of indicators, registered in epfd; -1 until needed */
	pthread_mutex_t lock; /* shadow membership and the regs' shadow fields */
	_Atomic int refs;     /* fd numbers naming it + registrations */
	bool closed;
	uint32_t gen;         /* merge generation of the current epoll_wait */
	pid_t pid;            /* the process that made it: a set inherited across fork
			       * is shared with the parent, and gets no channels */
	unsigned chan_gen;    /* the device generation whose channels it holds */
	bool chan_counted;    /* counted by conn_channels_add */
	/* Readiness a deferral told this set's thread instead of the kernel
	 * (core's conn_defer_*): registrations to report from user space. */
	struct ep_reg *ready_head, *ready_tail;
	_Atomic int ready_count;
	_Atomic int sleepers;  /* threads in the kernel's wait on epfd */
	_Atomic bool nested;   /* epfd is itself watched (poll, select, a set): never defer */
	bool shared;           /* a forked child holds epfd too: never defer */
	bool born_here;        /* recorded at epoll_create: every nesting and fork of it seen */
	unsigned kernel_skips; /* answers from user space since the kernel was last asked */
	_Atomic unsigned list_turns; /* waits of room 1 with a ready list (kernel_room) */
	bool kick_spent;       /* the shadow's kick was reported (shadow_kick) */
};

struct ep_reg {
	struct ep_reg *next;  /* in the socket's list */
	struct sdp_epoll *ep;
	int fd;               /* the app's fd number it registered */
	uint32_t events;
	epoll_data_t data;
	struct sdp_conn *conn; /* referenced while in the shadow */
	/* Each indicator's flags in the shadow set, by IND_RD and IND_WR (0:
	 * not in it).  Never 0 when in: shadow_flags always has EPOLLIN. */
	uint32_t in_shadow[2];
	bool disarmed;        /* EPOLLONESHOT fired; EPOLL_CTL_MOD re-arms */
	uint32_t out_gen;
	int out_idx;
	struct ep_reg *ready_prev, *ready_next;
	bool on_ready;        /* in ep's ready list (ep->lock) */
};

#define IND_RD 0u
#define IND_WR 1u
#define REG_TAG_MASK ((uintptr_t)1)
#define CHAN_TAG ((uintptr_t)1) /* on ep's address: a completion channel's event */
#define KICK_TAG ((uint64_t)0)  /* the shadow's one-shot wake-up (ensure_shadow); no reg */
#define CHAN_MAX 8

static void ep_put(struct sdp_epoll *ep)
{
	if (atomic_fetch_sub(&ep->refs, 1) != 1)
		return;
	if (ep->shadow_fd >= 0)
		gate_release(GATE_EPOLL_WAIT);
	if (ep->chan_counted && ep->pid == self_pid())
		conn_channels_unwatched();
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
			ep->fd_names = 1;
			ep->shadow_fd = -1;
			ep->pid = self_pid();
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

void rdy_epoll_born(int epfd)
{
	struct sdp_epoll *ep;

	if (fdt_kind_of(epfd) == FDT_EPOLL)
		rdy_epoll_forget(epfd); /* a set closed behind the hooks left it */
	ep = ep_for(epfd);

	if (!ep)
		return; /* no record: the set never answers from user space */
	ep->born_here = true;
	ep_put(ep);
}

struct name_search {
	struct sdp_epoll *ep;
	int gone, found;
};

static void find_other_name(int fd, void *obj, void *ctx)
{
	struct name_search *ns = ctx;

	if (obj == ns->ep && fd != ns->gone && ns->found < 0)
		ns->found = fd;
}

/* The app closes epfd, a name of ep's, not the last: the library's calls
 * move on to another name.  Under ep->lock, as every use of ep->epfd, so
 * none is in flight on the number when the hook's real close comes. */
static void move_off_name(struct sdp_epoll *ep, int gone)
{
	struct name_search ns = { ep, gone, -1 };

	pthread_mutex_lock(&ep->lock);
	if (ep->epfd == gone) {
		fdt_for_each(FDT_EPOLL, find_other_name, &ns);
		if (ns.found >= 0)
			ep->epfd = ns.found;
	}
	pthread_mutex_unlock(&ep->lock);
}

void rdy_epoll_forget(int epfd)
{
	struct sdp_epoll *ep;
	bool last = false;

	sock_table_lock();
	ep = fdt_get(epfd, FDT_EPOLL);
	fdt_clear(epfd);
	if (ep)
		last = --ep->fd_names <= 0; /* the app's last name for the set */
	sock_table_unlock();
	if (!ep)
		return;
	if (last) {
		pthread_mutex_lock(&ep->lock);
		ep->closed = true;
		pthread_mutex_unlock(&ep->lock);
	} else {
		move_off_name(ep, epfd);
	}
	ep_put(ep);
}

/* new_fd names old_fd's set too (a dup): a wait or a registration through
 * it goes through the set's record, never straight to the kernel, which
 * would hand the app the library's own data of a shadowed registration. */
void rdy_epoll_dup(int old_fd, int new_fd)
{
	struct sdp_epoll *ep;

	if (fdt_kind_of(new_fd) == FDT_EPOLL)
		rdy_epoll_forget(new_fd); /* a number closed behind the hooks left it */
	sock_table_lock();
	ep = fdt_get(old_fd, FDT_EPOLL);
	if (ep && fdt_set(new_fd, FDT_EPOLL, ep) == 0) {
		atomic_fetch_add(&ep->refs, 1); /* the new number's */
		ep->fd_names++;
	}
	sock_table_unlock();
}

/* Shadows made so far: a plain wait that saw this move while it slept may
 * have been woken by one (rdy_epoll_after_plain). */
_Atomic unsigned rdy_shadow_births;

/* The n events of a plain wait on epfd that began when rdy_shadow_births was
 * births: looked at again if a shadow was made meanwhile. */
static int after_plain_if_born(unsigned births, int epfd, struct epoll_event *events, int n,
			       int maxevents, long long timeout_ns, long long start_ns,
			       const sigset_t *sigmask)
{
	if (atomic_load(&rdy_shadow_births) == births)
		return n;
	return rdy_epoll_after_plain(epfd, events, n, maxevents, timeout_ns, start_ns, sigmask);
}

/* An eventfd that is always readable (never read): in a new shadow, one-
 * shot, it makes the shadow report once.  -1: none could be made. */
static int kick_fd(void)
{
	static _Atomic int fd = -1;
	int mine, none = -1, made = atomic_load(&fd);

	if (made >= 0)
		return made;
	mine = progress_hide_fd(eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));
	if (mine >= 0 && !atomic_compare_exchange_strong(&fd, &none, mine))
		progress_close_hidden(mine); /* another thread's came first */
	return atomic_load(&fd);
}

/* A thread that went to sleep in the kernel on epfd before the shadow
 * existed does not count as a sleeper, and the shadow's events would reach
 * it untranslated (rdy_epoll_after_plain takes them out).  The kick wakes
 * such a thread once, so that it comes back through the slow path; each
 * one that comes back that way arms it again for the next (the kernel
 * wakes one epoll waiter a time, oldest first), and the first counted
 * waiter to see it ends the chain.  A set shared across fork is left
 * alone: the other process's record knows nothing of this shadow.  ep
 * locked; op EPOLL_CTL_ADD or EPOLL_CTL_MOD. */
static void shadow_kick(struct sdp_epoll *ep, int op)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = KICK_TAG };
	int fd = kick_fd();

	if (ep->shared || ep->pid != self_pid())
		return;
	ep->kick_spent = false;
	if (fd < 0 || real.epoll_ctl(ep->shadow_fd, op, fd, &ev) != 0)
		sdp_debug("epoll: no wake-up for threads already asleep on fd %d", ep->epfd);
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
	atomic_fetch_add(&rdy_shadow_births, 1);
	if (real.epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->shadow_fd, &ev) != 0) {
		int err = -errno;
		progress_close_hidden(ep->shadow_fd);
		ep->shadow_fd = -1;
		gate_release(GATE_EPOLL_WAIT);
		return err;
	}
	shadow_kick(ep, EPOLL_CTL_ADD);
	return 0;
}

static uint64_t chan_tag(const struct sdp_epoll *ep)
{
	return (uint64_t)((uintptr_t)ep | CHAN_TAG);
}

/* Puts the devices' completion channels in the app's set.  ep locked. */
static void channels_sync(struct sdp_epoll *ep)
{
	unsigned gen = conn_channels_generation();

	if (ep->chan_gen == gen || ep->closed || ep->shadow_fd < 0 || ep->pid != self_pid())
		return;
	ep->chan_gen = gen;
	if (conn_channels_add(ep->epfd, chan_tag(ep), CHAN_MAX, !ep->chan_counted))
		ep->chan_counted = true;
}

static uint32_t shadow_flags(uint32_t events)
{
	return EPOLLIN | (events & (EPOLLET | EPOLLONESHOT));
}

/* A level-triggered registration that watches the readable indicator only
 * for its errors and hang-ups (no EPOLLIN: a paused connection's events 0,
 * EPOLLRDHUP alone).  Unread bytes keep that indicator set, and a
 * level-triggered shadow entry would wake every wait for nothing, at once,
 * again and again: the entry is edge-triggered, a hang-up or an error
 * writes the indicator again (conn_update_readiness), and what it reports
 * stays on the ready list while it holds, as level-triggering wants. */
static bool rd_for_hangups_only(uint32_t events)
{
	return !(events & (EPOLLIN | EPOLLRDNORM | EPOLLET | EPOLLONESHOT)) && rdy_wants_rd(events);
}

/* Puts one of reg's indicators in the shadow set with flags (0: out of
 * it).  An entry already there with the same flags, level-triggered, is
 * left alone: a MOD would change nothing (an app's EPOLL_CTL_MOD that
 * toggles EPOLLOUT, as redis-benchmark does for every request, leaves the
 * readable one as it was).  An edge-triggered or one-shot entry is always
 * re-made: the kernel's MOD re-polls it, which can report an edge again or
 * re-enable it.  ep locked. */
static void ind_sync(struct ep_reg *reg, uintptr_t which, int ind_fd, uint32_t flags)
{
	uint32_t *now = &reg->in_shadow[which];
	struct epoll_event ev = { .events = flags, .data.u64 = (uint64_t)((uintptr_t)reg | which) };

	if (flags && *now == flags && !(flags & (EPOLLET | EPOLLONESHOT)))
		return;
	if (flags)
		real.epoll_ctl(reg->ep->shadow_fd, *now ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, ind_fd, &ev);
	else if (*now)
		real.epoll_ctl(reg->ep->shadow_fd, EPOLL_CTL_DEL, ind_fd, NULL);
	*now = flags;
}

/* Puts reg's indicators in the shadow set to match reg->events.  ep locked. */
static void shadow_sync(struct ep_reg *reg)
{
	bool rd = !reg->disarmed && rdy_wants_rd(reg->events);
	bool wr = !reg->disarmed && (reg->events & EPOLLOUT) != 0;
	uint32_t flags = shadow_flags(reg->events);

	if (reg->ep->closed || ensure_shadow(reg->ep) != 0)
		return;
	ind_sync(reg, IND_RD, conn_readable_eventfd(reg->conn),
		 rd ? flags | (rd_for_hangups_only(reg->events) ? EPOLLET : 0) : 0);
	ind_sync(reg, IND_WR, conn_writable_eventfd(reg->conn), wr ? flags : 0);
}

/* The ready list (ep locked): oldest first, so a small maxevents still
 * reaches every registration in turn. */
static void ready_add(struct sdp_epoll *ep, struct ep_reg *reg)
{
	if (reg->on_ready)
		return;
	reg->on_ready = true;
	reg->ready_next = NULL;
	reg->ready_prev = ep->ready_tail;
	if (ep->ready_tail)
		ep->ready_tail->ready_next = reg;
	else
		ep->ready_head = reg;
	ep->ready_tail = reg;
	atomic_fetch_add(&ep->ready_count, 1);
}

static void ready_unlink(struct sdp_epoll *ep, struct ep_reg *reg)
{
	if (reg->ready_prev)
		reg->ready_prev->ready_next = reg->ready_next;
	else
		ep->ready_head = reg->ready_next;
	if (reg->ready_next)
		reg->ready_next->ready_prev = reg->ready_prev;
	else
		ep->ready_tail = reg->ready_prev;
}

/* To the back of the list; ready_count, which waiters read unlocked, does
 * not move. */
static void ready_to_back(struct sdp_epoll *ep, struct ep_reg *reg)
{
	if (ep->ready_tail == reg)
		return;
	ready_unlink(ep, reg);
	reg->ready_next = NULL;
	reg->ready_prev = ep->ready_tail;
	ep->ready_tail->ready_next = reg;
	ep->ready_tail = reg;
}

static void ready_remove(struct sdp_epoll *ep, struct ep_reg *reg)
{
	if (!reg->on_ready)
		return;
	ready_unlink(ep, reg);
	reg->on_ready = false;
	atomic_fetch_sub(&ep->ready_count, 1);
}

/* Hands every deferred readiness of the list to the kernel (ep locked):
 * the eventfds are written, and the shadow reports them from now on. */
static uint32_t reg_events_now(struct ep_reg *reg);

static void ready_pay_all(struct sdp_epoll *ep)
{
	if (ep->pid != self_pid())
		return; /* a forked child's copy: the parent's debts, not ours to write */
	while (ep->ready_head) {
		struct ep_reg *reg = ep->ready_head;

		ready_remove(ep, reg);
		if (reg->conn && rd_for_hangups_only(reg->events) && reg_events_now(reg))
			conn_renew_readable(reg->conn); /* its entry is edge-triggered */
		else if (reg->conn)
			conn_pay_deferred(reg->conn);
	}
}

/* Can a thread in epoll_wait on ep answer for its channels itself?  Not
 * when some other waiter could sleep on epfd where it cannot see. */
static bool ep_answers_itself(const struct sdp_epoll *ep)
{
	return ep->born_here && ep->pid == self_pid() && !ep->shared && !ep->closed &&
	       !atomic_load(&ep->nested);
}

/* s locked: the one set that watches s's channel alone, none
 * (CONN_UNWATCHED), or NULL: several, or another process may hold it.
 * The watch is changed before a registration leaves its set
 * (reg_unlink_free), so a cookie read under ep->lock names a live
 * registration. */
static void watch_sync(struct sdp_sock *s)
{
	struct ep_reg *only = s->regs && !s->regs->next ? s->regs : NULL;
	bool private = !s->shared_with_child && !s->from_parent;
	bool alone = only && only->conn && private;

	if (!s->conn)
		return;
	if (!s->regs && private)
		conn_set_watch(s->conn, CONN_UNWATCHED, NULL);
	else
		conn_set_watch(s->conn, alone ? only->ep : NULL, alone ? only : NULL);
}

/* A channel whose indicator this thread did not write (ep locked).  As
 * the kernel filters a wake-up by the registration's interest, an
 * indicator the registration does not watch lists nothing. */
static void told_ready(struct sdp_conn *c, bool readable, void *arg)
{
	struct sdp_epoll *ep = arg;
	struct ep_reg *reg = conn_watch_cookie(c, ep);

	if (!reg || reg->conn != c)
		conn_pay_deferred(c); /* no longer this set's alone */
	else if (readable ? rdy_wants_rd(reg->events) : (reg->events & EPOLLOUT) != 0)
		ready_add(ep, reg);
}

/* Moves the thread's deferrals to the ready list (ep locked).  If another
 * thread sleeps in the kernel on epfd, or epfd is watched, they go to the
 * kernel instead (written after being listed: a waiter counts itself,
 * then looks at ready_count).  True: the shadow may hold events. */
static bool ready_hand_over(struct sdp_epoll *ep)
{
	if (!ep->ready_head || (atomic_load(&ep->sleepers) == 0 && ep_answers_itself(ep)))
		return false;
	ready_pay_all(ep);
	return true;
}

static bool ready_publish(struct sdp_epoll *ep)
{
	conn_defer_flush(told_ready, ep);
	return ready_hand_over(ep);
}

static void shadow_add(struct ep_reg *reg, struct sdp_conn *c)
{
	pthread_mutex_lock(&reg->ep->lock);
	conn_get(c);
	reg->conn = c;
	reg->in_shadow[IND_RD] = reg->in_shadow[IND_WR] = 0;
	shadow_sync(reg);
	pthread_mutex_unlock(&reg->ep->lock);
}

static void shadow_del(struct ep_reg *reg)
{
	struct sdp_epoll *ep = reg->ep;
	struct sdp_conn *c = reg->conn;

	/* Locked even with no channel: a reader of the watch's cookie holds
	 * ep->lock, and reg is freed after this. */
	pthread_mutex_lock(&ep->lock);
	ready_remove(ep, reg);
	if (!c) {
		pthread_mutex_unlock(&ep->lock);
		return;
	}
	if (ep->shadow_fd >= 0) {
		ind_sync(reg, IND_RD, conn_readable_eventfd(c), 0);
		ind_sync(reg, IND_WR, conn_writable_eventfd(c), 0);
	}
	reg->in_shadow[IND_RD] = reg->in_shadow[IND_WR] = 0;
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
	if (reg->conn)
		conn_set_watch(reg->conn, NULL, NULL); /* s->conn may be gone (a fallback) */
	watch_sync(s);
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

/* A call on the app's kernel set, unless the set is closed (the set's
 * number is closed with its last name, under ep->lock). */
static void kernel_set_ctl(struct sdp_epoll *ep, int op, int fd, struct epoll_event *ev)
{
	pthread_mutex_lock(&ep->lock);
	if (!ep->closed)
		real.epoll_ctl(ep->epfd, op, fd, ev);
	pthread_mutex_unlock(&ep->lock);
}

void rdy_sock_to_rdma(struct sdp_sock *s)
{
	gate_hold(GATE_POLL);
	for (struct ep_reg *reg = s->regs; reg; reg = reg->next) {
		kernel_set_ctl(reg->ep, EPOLL_CTL_DEL, reg->fd, NULL);
		shadow_add(reg, s->conn);
	}
	watch_sync(s);
}

void rdy_sock_to_kernel(struct sdp_sock *s)
{
	while (s->regs) {
		struct ep_reg *reg = s->regs;
		struct epoll_event ev = { .events = reg->events, .data = reg->data };

		if (reg->conn) /* s->conn is already gone on a fallback */
			conn_set_watch(reg->conn, NULL, NULL);
		if (reg->disarmed) /* keep it disarmed: only EPOLL_CTL_MOD re-arms */
			ev.events = EPOLLONESHOT;
		shadow_del(reg);
		kernel_set_ctl(reg->ep, EPOLL_CTL_ADD, reg->fd, &ev);
		reg_unlink_free(s, reg);
	}
	gate_release(GATE_POLL); /* the stream is the kernel socket's again */
}

void rdy_sock_regs_drop(struct sdp_sock *s)
{
	while (s->regs)
		reg_unlink_free(s, s->regs);
}

void rdy_sock_closed(struct sdp_sock *s)
{
	if (atomic_load(&s->mode) == SOCK_MODE_RDMA)
		gate_release(GATE_POLL);
	rdy_sock_regs_drop(s);
}

/* As the kernel polls a file on EPOLL_CTL_ADD and MOD: the next wait
 * looks at reg's channel in user space (readiness a deferral owes is in
 * no eventfd). */
static void look_again(struct ep_reg *reg)
{
	pthread_mutex_lock(&reg->ep->lock);
	ready_add(reg->ep, reg);
	ready_hand_over(reg->ep); /* a thread asleep on epfd must hear of it */
	pthread_mutex_unlock(&reg->ep->lock);
}

static int epoll_ctl_recorded(struct sdp_sock *s, struct sdp_epoll *ep, int epfd, int op, int fd,
			      struct epoll_event *ev)
{
	struct ep_reg *reg = reg_find(s, ep, fd);
	bool rdma = atomic_load(&s->mode) == SOCK_MODE_RDMA;

	if (!rdma && real.epoll_ctl(epfd, op, fd, ev) != 0)
		return -errno;
	/* A set recorded at its birth is taken as open: its close through
	 * the hooks drops the record.  One closed behind them (a raw close
	 * syscall, glibc's closefrom) is not noticed here, as the shadow set
	 * does not notice it either: the call succeeds where the kernel would
	 * say EBADF.  Only a set met first here asks the kernel. */
	if (rdma && !ep->born_here && real.fcntl(epfd, F_GETFD) < 0)
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
		if (rdma) {
			shadow_add(reg, s->conn);
			watch_sync(s);
			look_again(reg);
		}
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
			look_again(reg);
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
	if (!s && op == EPOLL_CTL_ADD)
		rdy_epoll_watched(fd); /* a set inside a set */
	if (s && !sdp_in_lib && handoff_claimable(s))
		handoff_claim(s); /* inherited on RDMA: this process takes it over on TCP */
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

/* One app event for reg (ep locked): merged with an earlier one of this
 * call (the other indicator, or the ready list); a one-shot registration
 * is disarmed.  Returns the events added (0 or 1). */
static int emit(struct sdp_epoll *ep, struct ep_reg *reg, uint32_t rev, struct epoll_event *out,
		int at)
{
	if (reg->out_gen == ep->gen) {
		out[reg->out_idx].events |= rev;
		return 0;
	}
	reg->out_gen = ep->gen;
	reg->out_idx = at;
	out[at].events = rev;
	out[at].data = reg->data;
	if (reg->events & EPOLLONESHOT) {
		reg->disarmed = true;
		shadow_sync(reg);
	}
	return 1;
}

static uint32_t reg_events_now(struct ep_reg *reg)
{
	if (!reg->conn || reg->disarmed)
		return 0;
	return conn_poll_mask(reg->conn) & (reg->events | EPOLLERR | EPOLLHUP);
}

/* A set a forked process shares with the channel's owner: the channel is
 * the owner's (its lock may have been held at the fork), so the indicator
 * that fired is all this process reads of it; its read or write then
 * takes the socket over (preload/fork_handoff.c). */
static uint32_t reg_events_foreign(const struct ep_reg *reg, uint64_t tag)
{
	if (!reg->conn || reg->disarmed)
		return 0;
	if (tag == IND_RD)
		return reg->events & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP);
	return reg->events & (EPOLLOUT | EPOLLWRNORM);
}

/* Turns shadow events into app events for the channels' sockets.  ep
 * locked.  Returns events added. */
static int translate_shadow(struct sdp_epoll *ep, struct epoll_event *out, int base, int room)
{
	struct epoll_event tmp[64];
	int n, added = 0;

	if (room > 64)
		room = 64;
	n = real.epoll_wait(ep->shadow_fd, tmp, room, 0);
	for (int i = 0; i < n; i++) {
		struct ep_reg *reg = (struct ep_reg *)(uintptr_t)(tmp[i].data.u64 & ~REG_TAG_MASK);
		bool own = ep->pid == self_pid();
		uint32_t rev;

		if (tmp[i].data.u64 == KICK_TAG) {
			ep->kick_spent = true; /* one-shot: no longer in the shadow's answers */
			continue;
		}
		rev = own ? reg_events_now(reg) : reg_events_foreign(reg, tmp[i].data.u64 & REG_TAG_MASK);
		if (!reg->conn)
			continue;
		if (!rev && !own)
			continue;
		if (!rev) {
			conn_prepare_wait(reg->conn); /* stale: clear it before sleeping */
			if (reg->events & EPOLLONESHOT)
				shadow_sync(reg); /* the kernel disarmed it for nothing: re-arm */
			continue;
		}
		if (own && rd_for_hangups_only(reg->events))
			ready_add(ep, reg); /* its edge-triggered entry reports it once */
		added += emit(ep, reg, rev, out, base + added);
	}
	return added;
}

/* A listed registration whose channel is no longer ready leaves the list,
 * and the channel's indicators are cleared before anyone sleeps (ep locked). */
static void ready_drop_stale(struct sdp_epoll *ep, struct ep_reg *reg)
{
	ready_remove(ep, reg);
	if (reg->conn)
		conn_prepare_wait(reg->conn);
}

/* Reports the ready list, oldest first (ep locked).  A level-triggered
 * registration that is still ready goes to the back and stays; an edge-
 * triggered or one-shot one leaves once reported; one that is not ready
 * leaves.  Returns events added. */
static int report_ready(struct sdp_epoll *ep, struct epoll_event *out, int base, int room)
{
	int added = 0, todo = atomic_load(&ep->ready_count);
	struct ep_reg *reg, *next;

	for (reg = ep->ready_head; reg && todo-- > 0 && added < room; reg = next) {
		uint32_t rev = reg_events_now(reg);

		next = reg->ready_next;
		if (!rev) {
			ready_drop_stale(ep, reg);
			continue;
		}
		if (reg->events & (EPOLLET | EPOLLONESHOT))
			ready_remove(ep, reg);
		else
			ready_to_back(ep, reg);
		added += emit(ep, reg, rev, out, base + added);
	}
	return added;
}

/* Drops the listed registrations that are no longer ready.  True: some
 * are still listed. */
static bool ready_prune(struct sdp_epoll *ep)
{
	struct ep_reg *reg, *next;
	bool left;

	pthread_mutex_lock(&ep->lock);
	for (reg = ep->ready_head; reg; reg = next) {
		next = reg->ready_next;
		if (!reg_events_now(reg))
			ready_drop_stale(ep, reg);
	}
	left = ep->ready_head != NULL;
	pthread_mutex_unlock(&ep->lock);
	return left;
}

/* Takes events of the shadow and the channels out of the batch, keeping
 * the app's in order; the completions a channel announced are taken in
 * here.  True when the shadow may hold events. */
static bool take_library_events(struct sdp_epoll *ep, struct epoll_event *events, int *n)
{
	bool shadow = false, chan = false;
	int kept = 0;

	for (int i = 0; i < *n; i++) {
		if (events[i].data.ptr == ep)
			shadow = true;
		else if (events[i].data.u64 == chan_tag(ep))
			chan = true;
		else
			events[kept++] = events[i];
	}
	*n = kept;
	if (chan && ep->pid == self_pid()) {
		unsigned before = conn_indicators_set_by_thread();
		conn_take_completions();
		shadow |= conn_indicators_set_by_thread() != before;
	}
	return shadow;
}

/* Adds the library's answers to the app's n events: the shadow's (if
 * look_in_shadow) and the ready list's.  Returns the new total. */
static int add_library_answers(struct sdp_epoll *ep, struct epoll_event *events, int n,
			       int maxevents, bool look_in_shadow)
{
	pthread_mutex_lock(&ep->lock);
	ep->kernel_skips = 0;
	look_in_shadow |= ready_publish(ep);
	ep->gen++;
	if (look_in_shadow && ep->shadow_fd >= 0)
		n += translate_shadow(ep, events, n, maxevents - n);
	n += report_ready(ep, events, n, maxevents - n);
	ready_hand_over(ep); /* what stays listed, another sleeper must see */
	pthread_mutex_unlock(&ep->lock);
	return n;
}

/* One kernel wait and its translation: the app's events, or -1 (errno).
 * A thread that may sleep counts itself in ep->sleepers, then looks at the
 * ready list (ready_publish looks the other way round).  *timed_out: the
 * kernel's wait ran out with nothing at all. */
static __thread int app_cancel_state; /* the app's, restored around the kernel's wait */

static void sleeper_gone(void *arg)
{
	if (!arg)
		return;
	atomic_fetch_sub(&((struct sdp_epoll *)arg)->sleepers, 1);
	conn_sleep_end_any();
}

/* The kernel's wait, the call's only cancellation point (no lock held). */
static int kernel_wait(struct sdp_epoll *counted_in, int epfd, struct epoll_event *events,
		       int maxevents, int timeout_ms, const sigset_t *sigmask)
{
	int n, saved;

	pthread_cleanup_push(sleeper_gone, counted_in);
	pthread_setcancelstate(app_cancel_state, NULL);
	n = real.epoll_pwait(epfd, events, maxevents, timeout_ms, sigmask);
	saved = errno;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cleanup_pop(0);
	errno = saved;
	return n;
}

/* The part of maxevents a wait that does not sleep (a ready list to
 * report) gives the kernel: never all of it, or fds the kernel keeps ready
 * would fill it every time and starve the listed channels.  Half at most;
 * with a room of one, every other wait is the list's alone (0). */
static int kernel_room(struct sdp_epoll *ep, int maxevents)
{
	int listed = atomic_load(&ep->ready_count);

	if (listed <= 0)
		return maxevents;
	if (maxevents == 1)
		return atomic_fetch_add(&ep->list_turns, 1) % 2 ? 0 : 1;
	return maxevents - (listed < maxevents / 2 ? listed : maxevents / 2);
}

static int wait_once(struct sdp_epoll *ep, int epfd, struct epoll_event *events, int maxevents,
		     int timeout_ms, const sigset_t *sigmask, bool *timed_out)
{
	bool counted = timeout_ms != 0, look;
	int n, total, room = maxevents;

	if (counted)
		conn_sleep_begin_any(); /* its take-in is listed just below */
	if (counted && conn_defer_pending()) {
		/* Told before this wait (an owed arm's take-in): listed first. */
		pthread_mutex_lock(&ep->lock);
		conn_defer_flush(told_ready, ep);
		pthread_mutex_unlock(&ep->lock);
	}
	if (counted) {
		atomic_fetch_add(&ep->sleepers, 1);
		if (atomic_load(&ep->ready_count) > 0)
			timeout_ms = 0;
	}
	if (timeout_ms == 0 && (room = kernel_room(ep, maxevents)) == 0)
		n = 0; /* the ready list's turn */
	else
		n = kernel_wait(counted ? ep : NULL, epfd, events, timeout_ms ? maxevents : room,
				timeout_ms, sigmask);
	if (counted)
		sleeper_gone(ep);
	*timed_out = n == 0 && (timeout_ms != 0 || !counted);
	if (n < 0)
		return n;
	total = n;
	look = take_library_events(ep, events, &total);
	return add_library_answers(ep, events, total, maxevents, look);
}

/* The kernel is asked at least once in this many answers, so the app's
 * own fds in the set are never starved by a busy channel. */
#define KERNEL_EVERY 32

/* An answer from user space alone: the ready list, when this thread's
 * deferrals put everything there (no eventfd written) and the kernel was
 * asked recently.  0: ask the kernel. */
static int answer_in_user_space(struct sdp_epoll *ep, struct epoll_event *events, int maxevents,
				unsigned written_before)
{
	int n = 0;

	if (conn_indicators_set_by_thread() != written_before)
		return 0; /* the shadow has some: only the kernel can say */
	pthread_mutex_lock(&ep->lock);
	if (ep->kernel_skips < KERNEL_EVERY - 1 && !ready_publish(ep)) {
		ep->gen++;
		n = report_ready(ep, events, 0, maxevents);
		ep->kernel_skips += n > 0;
		ready_hand_over(ep);
	}
	pthread_mutex_unlock(&ep->lock);
	return n;
}

/* Before sleeping, the app's thread polls the process's links in user
 * space: a message already there needs no wake-up.  Busy-poll
 * (SDPSHIM_SPIN_US, never longer than the call's timeout) goes on until
 * one taken in by this thread makes a channel readable or writable, or the
 * spin is over.  A thread spins only if its last wait took messages in
 * itself: an idle one (a server's 10 Hz timer) sleeps at once, and spins
 * again once a message has woken it.  True: look without sleeping. */
static __thread bool spin_earned = true; /* the thread's last wait took messages in */

static bool poll_for_messages(long long timeout_ns)
{
	unsigned us = spin_earned ? conn_spin_us() : 0;
	unsigned written = conn_indicators_set_by_thread();
	unsigned told = conn_indicators_deferred_by_thread();
	long long until;
	bool found = true;

	if (us && timeout_ns > 0 && timeout_ns / 1000 < us)
		us = (unsigned)(timeout_ns / 1000);
	until = us ? rdy_spin_until(us) : 0;
	if (us)
		conn_spin_begin();
	for (;;) {
		conn_poll_links();
		if (conn_indicators_set_by_thread() != written ||
		    conn_indicators_deferred_by_thread() != told)
			break;
		if (!us || rdy_spin_over(until)) {
			found = false;
			break;
		}
		rdy_cpu_relax();
	}
	if (us)
		conn_spin_end();
	return found;
}

/* A zero timeout: a loop that asks again and again, and sleeps nowhere the
 * library sees.  While a CQ arm is put off, no event announces a link's
 * messages: the call takes them in.  True: something was told. */
static bool poll_owed_links(void)
{
	unsigned written = conn_indicators_set_by_thread();
	unsigned told = conn_indicators_deferred_by_thread();

	if (!conn_arms_owed())
		return false;
	conn_poll_links();
	return conn_indicators_set_by_thread() != written ||
	       conn_indicators_deferred_by_thread() != told;
}

static int epoll_wait_answer(struct sdp_epoll *ep, int epfd, struct epoll_event *events,
			     int maxevents, long long timeout_ns, const sigset_t *sigmask)
{
	unsigned written = conn_indicators_set_by_thread();
	struct rdy_bound bound;
	bool timed_out;
	int n;

	/* Readiness already listed (a level-triggered channel not drained):
	 * with the kernel's, as epoll reports every ready fd.  Entries whose
	 * channel was drained since leave first, at no system call. */
	if (atomic_load(&ep->ready_count) > 0 && ready_prune(ep) &&
	    (n = wait_once(ep, epfd, events, maxevents, 0, sigmask, &timed_out)) != 0)
		return n;
	if (timeout_ns == 0 ? poll_owed_links() : poll_for_messages(timeout_ns)) {
		n = answer_in_user_space(ep, events, maxevents, written);
		if (n == 0)
			n = wait_once(ep, epfd, events, maxevents, 0, sigmask, &timed_out);
		if (n != 0)
			return n;
	}
	rdy_bound_start(&bound, timeout_ns);
	for (;;) {
		n = wait_once(ep, epfd, events, maxevents, ns_to_ms(rdy_bound_left(&bound)), sigmask,
			      &timed_out);
		if (n != 0 || timed_out || rdy_bound_expired(&bound))
			return n;
	}
}

/* The end of the thread's deferral window: what it was told and did not
 * report is listed for the next call (or handed to the kernel). */
static void defer_window_close(void *arg)
{
	struct sdp_epoll *ep = arg;
	int saved = errno;

	if (!ep)
		return;
	pthread_mutex_lock(&ep->lock);
	conn_defer_close(told_ready, ep);
	ready_hand_over(ep);
	pthread_mutex_unlock(&ep->lock);
	errno = saved;
}

/* The record of epfd with a reference (another thread may close epfd
 * while this one waits in it), or NULL. */
static struct sdp_epoll *ep_get(int epfd)
{
	struct sdp_epoll *ep;

	sock_table_lock();
	ep = fdt_get(epfd, FDT_EPOLL);
	if (ep)
		atomic_fetch_add(&ep->refs, 1);
	sock_table_unlock();
	return ep;
}

static int epoll_wait_held(struct sdp_epoll *ep, int epfd, struct epoll_event *events,
			   int maxevents, long long timeout_ns, const sigset_t *sigmask);

/* The kernel's wait alone, with epoll_pwait2's precision when the
 * timeout is not whole milliseconds. */
static int plain_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		      const sigset_t *sigmask)
{
	if (real.epoll_pwait2 && timeout_ns > 0 && timeout_ns % 1000000) {
		struct timespec ts = { (time_t)(timeout_ns / 1000000000LL),
				       (long)(timeout_ns % 1000000000LL) };
		return real.epoll_pwait2(epfd, events, maxevents, &ts, sigmask);
	}
	return real.epoll_pwait(epfd, events, maxevents, ns_to_ms(timeout_ns), sigmask);
}

static void ep_put_cleanup(void *arg)
{
	ep_put(arg);
}

static void sleep_over(void *sleeps)
{
	if (*(bool *)sleeps)
		conn_sleep_end_any();
}

int rdy_epoll_wait_plain(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
			 const sigset_t *sigmask)
{
	unsigned births = atomic_load(&rdy_shadow_births);
	bool sleeps = timeout_ns != 0;
	long long start_ns = timeout_ns > 0 ? rdy_mono_ns() : 0;
	int n, saved;

	if (rdy_epoll_shadowed(epfd)) /* recorded since the caller looked */
		return rdy_epoll_wait(epfd, events, maxevents, timeout_ns, sigmask);
	if (sleeps)
		conn_sleep_begin_any();
	else if (conn_arms_owed())
		conn_poll_links();
	pthread_cleanup_push(sleep_over, &sleeps);
	n = plain_wait(epfd, events, maxevents, timeout_ns, sigmask);
	saved = errno;
	pthread_cleanup_pop(1);
	errno = saved;
	return after_plain_if_born(births, epfd, events, n, maxevents, timeout_ns, start_ns, sigmask);
}

/* The events of a wait that began before epfd had a shadow: the shadow's
 * and the channels' are the library's, translated here as after any wait
 * of the set; if nothing is left for the app, the wait goes on through the
 * slow path (counted as a sleeper), for what is left of its timeout. */
int rdy_epoll_after_plain(int epfd, struct epoll_event *events, int n, int maxevents,
			  long long timeout_ns, long long start_ns, const sigset_t *sigmask)
{
	struct sdp_epoll *ep = NULL;
	int cancel_state, saved = errno;
	bool look;

	if (n <= 0 || sdp_in_lib)
		return n;
	if (fdt_kind_of(epfd) == FDT_EPOLL)
		ep = ep_get(epfd);
	if (!ep)
		return n;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	if (ep->shadow_fd >= 0) {
		look = take_library_events(ep, events, &n);
		n = add_library_answers(ep, events, n, maxevents, look);
		pthread_mutex_lock(&ep->lock);
		if (ep->kick_spent && ep->shadow_fd >= 0)
			shadow_kick(ep, EPOLL_CTL_MOD); /* for the next thread asleep since before */
		pthread_mutex_unlock(&ep->lock);
	}
	ep_put(ep);
	pthread_setcancelstate(cancel_state, NULL);
	errno = saved;
	if (n != 0 || timeout_ns == 0)
		return n;
	if (timeout_ns > 0 && start_ns) { /* 0: not read (hooks_poll.c, epoll_pwait_open) */
		timeout_ns -= rdy_mono_ns() - start_ns;
		if (timeout_ns <= 0)
			return 0; /* its timeout is over */
	}
	return rdy_epoll_wait(epfd, events, maxevents, timeout_ns, sigmask); /* counted now */
}

int rdy_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		   const sigset_t *sigmask)
{
	unsigned births = atomic_load(&rdy_shadow_births);
	struct sdp_epoll *ep = NULL;
	int n, saved;

	if (maxevents > 0 && fdt_kind_of(epfd) == FDT_EPOLL)
		ep = ep_get(epfd);
	if (ep && ep->shadow_fd < 0) {
		ep_put(ep);
		ep = NULL;
	}
	if (!ep) {
		long long start_ns = timeout_ns > 0 ? rdy_mono_ns() : 0;

		n = plain_wait(epfd, events, maxevents, timeout_ns, sigmask);
		return after_plain_if_born(births, epfd, events, n, maxevents, timeout_ns, start_ns,
					   sigmask);
	}
	pthread_cleanup_push(ep_put_cleanup, ep);
	n = epoll_wait_held(ep, epfd, events, maxevents, timeout_ns, sigmask);
	saved = errno;
	pthread_cleanup_pop(1);
	errno = saved;
	return n;
}

static int epoll_wait_held(struct sdp_epoll *ep, int epfd, struct epoll_event *events,
			   int maxevents, long long timeout_ns, const sigset_t *sigmask)
{
	unsigned took;
	bool own;
	int n, saved, outer_state;

	if (__atomic_load_n(&ep->chan_gen, __ATOMIC_RELAXED) != conn_channels_generation()) {
		pthread_mutex_lock(&ep->lock);
		channels_sync(ep);
		pthread_mutex_unlock(&ep->lock);
	}
	/* Cancellation only in the kernel's wait (kernel_wait), where no lock
	 * is held: a thread cancelled there still lists what it was told. */
	outer_state = app_cancel_state; /* a call from a signal handler nests */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &app_cancel_state);
	own = ep_answers_itself(ep);
	if (own)
		conn_defer_open(ep);
	took = conn_indicators_set_by_thread() + conn_indicators_deferred_by_thread();
	pthread_cleanup_push(defer_window_close, own ? ep : NULL);
	n = epoll_wait_answer(ep, epfd, events, maxevents, timeout_ns, sigmask);
	spin_earned = took != conn_indicators_set_by_thread() + conn_indicators_deferred_by_thread();
	pthread_cleanup_pop(1);
	saved = errno;
	pthread_setcancelstate(app_cancel_state, NULL);
	app_cancel_state = outer_state;
	errno = saved;
	return n;
}

/* epfd is watched by the kernel where no deferral can be seen (poll,
 * select, another epoll set): from now on its channels' readiness goes
 * to the eventfds, and what is listed goes there now. */
void rdy_epoll_watched(int fd)
{
	struct sdp_epoll *ep;

	if (fdt_kind_of(fd) != FDT_EPOLL || !(ep = ep_get(fd)))
		return;
	if (!atomic_exchange(&ep->nested, true)) {
		pthread_mutex_lock(&ep->lock);
		ready_pay_all(ep);
		pthread_mutex_unlock(&ep->lock);
	}
	ep_put(ep);
}

static void mark_shared(int fd, void *obj, void *ctx)
{
	(void)fd;
	(void)ctx;
	((struct sdp_epoll *)obj)->shared = true;
}

void rdy_epoll_atfork_parent(void)
{
	fdt_for_each(FDT_EPOLL, mark_shared, NULL);
}

static void forget_parents_list(int fd, void *obj, void *ctx)
{
	struct sdp_epoll *ep = obj;

	(void)fd;
	(void)ctx;
	for (struct ep_reg *reg = ep->ready_head, *next; reg; reg = next) {
		next = reg->ready_next;
		reg->on_ready = false;
	}
	ep->ready_head = ep->ready_tail = NULL;
	atomic_store(&ep->ready_count, 0);
	atomic_store(&ep->sleepers, 0);
	pthread_mutex_init(&ep->lock, NULL);
}

void rdy_epoll_atfork_child(void)
{
	fdt_for_each(FDT_EPOLL, forget_parents_list, NULL);
}
