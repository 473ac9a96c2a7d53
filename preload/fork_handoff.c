/* The owner's side of the fork handoff (SDPSHIM_FORK=handoff): the state
 * byte per shared socket, the processes that may share them (children, and
 * children's children a child reports), sockets closed here but kept for
 * live sharers (orphans), and the request server that moves a stream to
 * TCP when a sharer asks, with a climb ticket when that sharer is left
 * alone with it.  The sharer's side: preload/fork_claim.c. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/config.h"
#include "base/fdtable.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "base/thread.h"
#include "core/progress.h" /* progress_hide_fd(), progress_close_hidden(), progress_now_ms() */
#include "preload/exit_flush.h"
#include "preload/fork_handoff.h"
#include "preload/fork_handoff_wire.h"
#include "preload/readiness.h"
#include "preload/sock_close.h"
#include "preload/sock_rdma.h"

#define HANDOFF_SLOTS (1u << 20) /* state bytes per owner process, never reused */
#define HANDOFF_STACK (256 * 1024)
#define ORPHAN_SWEEP_MS 200 /* how often a sharer with no pidfd is looked at */
/* Sharers watched one by one (a pidfd each).  Past it, every shared socket
 * counts as shared for good: a descendant that names pid after pid (any
 * descendant can write to the request socket) costs us no more than this
 * many descriptors, and is told nothing. */
#define SHARERS_MAX 1024

/* A process that may hold copies of our shared sockets: a child, or a
 * child's child that a child told us of.  It holds those first shared at
 * or before its fork (seq). */
struct sharer {
	int pidfd; /* readable once the process is gone; -1: none (kill(0) then) */
	pid_t pid;
	uint64_t seq;
};

/* This process's server (server_pid): its request socket, state bytes. */
static pid_t server_pid;
static pthread_t server_thread;     /* joinable: exit stops it (handoff_stop_server) */
static _Atomic bool server_stopping;
static int server_rx = -1, server_tx = -1;
static _Atomic uint8_t *slots;
static uint32_t slots_used;
static bool forced_switch; /* daemon(): its child outlives an _exit'ed parent */
/* This thread's fork's child shares RDMA streams (set by its prepare
 * handler, read when its fork returns: two threads may fork at once). */
static __thread bool fork_shares;
static __thread bool in_fork_wrapper; /* our fork(): it records the child */

/* Sharers and orphans, under share_lock (the app's threads and the server). */
static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sharer *sharers;
static size_t sharers_n, sharers_cap;
static bool sharers_unknown; /* one could not be recorded: every one counts as alive */
static uint64_t fork_seq;    /* forks that shared a stream, so far */
static unsigned forks_in_flight; /* prepared, their child not recorded yet */
static struct sdp_sock **orphans; /* closed here, held for their sharers */
static size_t orphans_n, orphans_cap;

enum fork_mode fork_mode(void)
{
	static _Atomic int warned;
	const char *v = getenv("SDPSHIM_FORK");

	if (forced_switch)
		return FORK_SWITCH;
	if (!v || !*v || strcmp(v, "handoff") == 0)
		return FORK_HANDOFF;
	if (strcmp(v, "switch") == 0)
		return FORK_SWITCH;
	if (strcmp(v, "keep") == 0)
		return FORK_KEEP;
	if (!warned++)
		sdp_warn("SDPSHIM_FORK=%s is not one of handoff, switch, keep: using handoff", v);
	return FORK_HANDOFF;
}

void fork_force_switch(bool on)
{
	forced_switch = on;
}

/* ---- who may share ---- */

static bool grow(void **arr, size_t *cap, size_t elem)
{
	size_t n = *cap ? *cap * 2 : 8;
	void *p = realloc(*arr, n * elem);

	if (!p)
		return false;
	*arr = p;
	*cap = n;
	return true;
}

static bool sharer_gone(const struct sharer *sh)
{
	struct pollfd p = { .fd = sh->pidfd, .events = POLLIN };

	if (sh->pidfd >= 0)
		return real.poll(&p, 1, 0) == 1;
	return kill(sh->pid, 0) != 0 && errno == ESRCH;
}

/* share_lock held.  A live process named again with the same fork number
 * is recorded once. */
static void sharer_add(pid_t pid, uint64_t seq)
{
	int fd;

	for (size_t i = 0; i < sharers_n; i++)
		if (sharers[i].pid == pid && sharers[i].seq == seq && !sharer_gone(&sharers[i]))
			return;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0 && (errno == ESRCH || errno == EINVAL))
		return; /* no such process: it holds nothing */
	if (sharers_n >= SHARERS_MAX ||
	    (sharers_n == sharers_cap && !grow((void **)&sharers, &sharers_cap, sizeof(*sharers)))) {
		if (fd >= 0)
			real.close(fd);
		if (!sharers_unknown)
			sdp_warn("fork: more than %u processes share this process's RDMA streams; "
				 "each shared stream now moves to TCP when this process closes it",
				 SHARERS_MAX);
		sharers_unknown = true;
		return;
	}
	sharers[sharers_n++] = (struct sharer){ .pidfd = progress_hide_fd(fd), .pid = pid,
						.seq = seq };
}

/* share_lock held: forgets the sharers that are gone. */
static void sharers_prune(void)
{
	size_t i = 0;

	while (i < sharers_n) {
		if (sharer_gone(&sharers[i])) {
			progress_close_hidden(sharers[i].pidfd);
			sharers[i] = sharers[--sharers_n];
		} else {
			i++;
		}
	}
}

/* share_lock held: the recorded sharers forked while a socket was open
 * here (forks first..last), but the claimer (its pid, from the kernel's
 * credentials of its request; 0: count them all); *is_one: the claimer is
 * one of them. */
static unsigned sharers_besides(uint64_t first, uint64_t last, pid_t claimer, bool *is_one)
{
	unsigned n = 0;

	*is_one = false;
	for (size_t i = 0; i < sharers_n; i++) {
		if (sharers[i].seq < first || sharers[i].seq > last)
			continue;
		if (claimer > 0 && sharers[i].pid == claimer)
			*is_one = true;
		else
			n++;
	}
	return n;
}

/* share_lock held: all of those sharers. */
static unsigned sharers_in_forks(uint64_t first, uint64_t last)
{
	bool none;

	return sharers_besides(first, last, 0, &none);
}

/* share_lock held, the list pruned: true if a sharer forked while a socket
 * was open here (forks first..last) is recorded, or a fork is under way
 * (its child is not recorded yet). */
static bool sharer_in_forks(uint64_t first, uint64_t last)
{
	return sharers_unknown || forks_in_flight > 0 || sharers_in_forks(first, last) > 0;
}

/* share_lock held: sharer_in_forks over the sharers still alive. */
static bool sharers_alive_in(uint64_t first, uint64_t last)
{
	sharers_prune();
	return sharer_in_forks(first, last);
}

static void set_state(struct sdp_sock *s, enum handoff_state st)
{
	if (s->handoff_state && s->owner_pid == getpid())
		atomic_store(s->handoff_state, (uint8_t)st);
}

void handoff_note_on_tcp(struct sdp_sock *s)
{
	set_state(s, HANDOFF_ON_TCP);
}

/* Moves s's stream to TCP for its sharers (the move writes ON_TCP); one
 * that cannot move is lost to them.  True if it moved. */
static uint64_t switch_deadline(void)
{
	return progress_now_ms() + sdp_tun.switch_timeout_ms;
}

static bool move_for_sharers_by(struct sdp_sock *s, uint64_t deadline_ms)
{
	if (sock_switch_one_to_tcp(s, deadline_ms))
		return true;
	set_state(s, HANDOFF_LOST);
	return false;
}

/* Bounded by SDPSHIM_SWITCH_TIMEOUT_MS. */
static bool move_for_sharers(struct sdp_sock *s)
{
	return move_for_sharers_by(s, switch_deadline());
}

/* The exit's (or exec's) moves share one bound: each waiting a whole
 * SDPSHIM_SWITCH_TIMEOUT_MS, K streams whose peers do not answer kept
 * exit() for K times that.  Set by handoff_exit_moves_begin, which each
 * batch calls first (sock_close_all_rdma, prepare_exec). */
static uint64_t exit_moves_deadline;

void handoff_exit_moves_begin(void)
{
	exit_moves_deadline = switch_deadline();
}


/* ---- orphans: closed here while a sharer may still use them ---- */

/* Sends the server a NOP: it looks at its orphans from now on. */
static void wake_server(void)
{
	struct handoff_req req = { .magic = HANDOFF_MAGIC, .owner_pid = (uint32_t)getpid(),
				   .kind = HANDOFF_NOP };

	real.send(server_tx, &req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* share_lock held: takes orphan i out of the list (the caller ends it). */
static struct sdp_sock *orphan_take(size_t i)
{
	struct sdp_sock *s = orphans[i];

	orphans[i] = orphans[--orphans_n];
	return s;
}

/* An orphan no sharer can use any more, or one moved to TCP: its
 * transport closes as the app's close would have closed it. */
static void orphan_end(struct sdp_sock *s)
{
	if (sock_is_rdma(s))
		set_state(s, HANDOFF_LOST);
	sock_close_transport(s, -1);
	sock_release(s);
}

/* A parent that closes, without having carried a byte on it, a socket its
 * child holds (a fork-per-connection server: accept, fork, close) leaves
 * the stream to the child: the move starts now, and the child's claim
 * mostly finds it done.  One the parent used (a redis client that quit
 * while a BGSAVE child runs) stays on its channel until the child is gone. */
static void start_move(struct sdp_sock *s)
{
	struct sdp_conn *c;

	if (atomic_load(&s->st->bytes_sent) || atomic_load(&s->st->bytes_received))
		return;
	c = sock_conn_get(s);
	if (c) {
		conn_switch_begin(c, SDP_REASON_FORKED);
		conn_put(c);
	}
}

void handoff_debug_pause(unsigned ms)
{
	if (ms)
		nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000L }, NULL);
}

bool handoff_keep_orphan(struct sdp_sock *s)
{
	bool shared, keep;

	if (!s->handoff_state || s->owner_pid != getpid() || !sock_is_rdma(s))
		return false;
	handoff_debug_pause(sdp_tun.debug_orphan_delay_ms); /* tests: a claim finds it in neither place */
	pthread_mutex_lock(&share_lock);
	s->handoff_last = fork_seq; /* no later child gets it */
	s->handoff_closed_in_fork = forks_in_flight > 0; /* but one under way may have */
	shared = sharers_alive_in(s->handoff_seq, s->handoff_last);
	keep = shared && (orphans_n < orphans_cap ||
			  grow((void **)&orphans, &orphans_cap, sizeof(*orphans)));
	if (keep) {
		sock_hold(s);
		orphans[orphans_n++] = s;
	}
	pthread_mutex_unlock(&share_lock);
	if (keep) {
		pthread_mutex_lock(&s->lock); /* the app's fd is gone: so are its epoll registrations */
		rdy_sock_regs_drop(s);
		s->primary_fd = -1;
		pthread_mutex_unlock(&s->lock);
		start_move(s);
		wake_server();
	} else if (!shared) {
		set_state(s, HANDOFF_LOST); /* it ends here, on RDMA */
	} else {
		move_for_sharers(s); /* no room to keep it */
	}
	return keep;
}

/* Server thread: forgets the sharers that are gone; the orphans none of
 * whose sharers is left end. */
static void sweep_orphans(void)
{
	struct sdp_sock *done[64];
	size_t n = 0;

	pthread_mutex_lock(&share_lock);
	sharers_prune();
	for (size_t i = 0; i < orphans_n && n < 64;) {
		if (!sharer_in_forks(orphans[i]->handoff_seq, orphans[i]->handoff_last))
			done[n++] = orphan_take(i);
		else
			i++;
	}
	pthread_mutex_unlock(&share_lock);
	for (size_t i = 0; i < n; i++)
		orphan_end(done[i]);
}

/* ---- the request server ---- */

struct sock_match {
	uint64_t sock, id;
	struct sdp_sock *found; /* held */
};

static void match_sock(int fd, void *obj, void *ctx)
{
	struct sock_match *m = ctx;
	struct sdp_sock *s = obj;

	(void)fd;
	if (!m->found && (uintptr_t)s == m->sock && s->handoff_id == m->id) {
		sock_hold(s);
		m->found = s;
	}
}

/* The socket a CLAIM names: open here (held), or an orphan (taken out of
 * the list: *orphan set). */
static struct sdp_sock *find_claimed(const struct handoff_req *req, bool *orphan)
{
	struct sock_match m = { .sock = req->sock, .id = req->id };

	*orphan = false;
	pthread_mutex_lock(&share_lock);
	sock_table_lock();
	fdt_for_each(FDT_SOCK, match_sock, &m);
	sock_table_unlock();
	for (size_t i = 0; !m.found && i < orphans_n; i++) {
		if ((uintptr_t)orphans[i] == req->sock && orphans[i]->handoff_id == req->id) {
			m.found = orphan_take(i);
			*orphan = true;
		}
	}
	pthread_mutex_unlock(&share_lock);
	return m.found;
}

/* A claim's reply status for a socket found neither open nor an orphan
 * here, by its state byte: 0 on TCP, 1 otherwise. */
static uint8_t status_of_state(uint8_t st)
{
	return st == HANDOFF_ON_TCP ? 0 : 1;
}

/* The state byte of a socket that is neither open nor an orphan here. */
static uint8_t state_of_id(uint64_t id)
{
	return id >= 1 && id <= slots_used ? atomic_load(&slots[id - 1]) : HANDOFF_LOST;
}

/* share_lock held: the claimer is the one sharer of s left (s was closed
 * here, so no other process holds the kernel socket).  A fork under way
 * now began after the close, so its child has no copy, unless the close
 * itself came while a fork was under way.  By pid: a grandchild whose
 * parent's report of it is still on its way is not taken for that parent,
 * nor a descendant that never held the socket for the one that does. */
static bool claimer_alone(const struct sdp_sock *s, pid_t claimer)
{
	bool is_one;

	sharers_prune();
	if (sharers_unknown || (forks_in_flight && s->handoff_closed_in_fork))
		return false;
	return sharers_besides(s->handoff_seq, s->handoff_last, claimer, &is_one) == 0 && is_one;
}

/* s's stream could climb back in a child that held it alone: a ticket was
 * kept for it (why not, sock_rdma.c's debug line says). */
static bool ticket_kept(struct sdp_sock *s)
{
	bool kept;

	pthread_mutex_lock(&s->lock);
	kept = s->climb_ticket != NULL;
	pthread_mutex_unlock(&s->lock);
	return kept;
}

/* An orphan moved to TCP for its claimer: the ticket, if it holds it
 * alone.  False if it does not. */
static bool give_ticket(struct sdp_sock *s, pid_t claimer, struct handoff_reply *reply)
{
	bool alone;

	pthread_mutex_lock(&share_lock);
	alone = claimer_alone(s, claimer);
	pthread_mutex_unlock(&share_lock);
	pthread_mutex_lock(&s->lock);
	if (alone && s->climb_ticket && sdp_tun.climb_fork) {
		reply->ticket = *s->climb_ticket;
		reply->has_ticket = 1;
	}
	pthread_mutex_unlock(&s->lock);
	sdp_debug("fork: the claimer %s the socket alone; %s", alone ? "holds" : "does not hold",
		  reply->has_ticket ? "it may climb back to RDMA" : "it stays on TCP");
	return alone;
}

/* Who holds s, still open here, besides this process, as a claim sees it. */
enum open_sharers {
	OPEN_OTHERS,   /* another live process may hold it, or the claimer is
			* not one we know: no ticket */
	OPEN_ONE,      /* the claimer alone, and no fork under way */
	OPEN_FORKING,  /* a fork is under way: its child (maybe the claimer,
			* which can run before its parent's fork() returns)
			* is not recorded yet */
};

/* share_lock held: s's sharers among the recorded ones, pruned. */
static enum open_sharers open_sharers_of(const struct sdp_sock *s, pid_t claimer)
{
	bool is_one;

	sharers_prune();
	if (sharers_unknown || sharers_besides(s->handoff_seq, fork_seq, claimer, &is_one) > 0)
		return OPEN_OTHERS;
	if (forks_in_flight)
		return OPEN_FORKING;
	return is_one ? OPEN_ONE : OPEN_OTHERS;
}

/* How a claim's wait for its owner's close ended. */
enum close_wait_end {
	CLOSE_WAIT_CLOSED,    /* an orphan now */
	CLOSE_WAIT_TIMED_OUT, /* still open here after HANDOFF_OWNER_CLOSE_WAIT_MS */
	CLOSE_WAIT_SHARED,    /* open here and shared beyond the claimer: not waited */
	CLOSE_WAIT_FORKING,   /* the fork was still under way after HANDOFF_FORK_RETURN_WAIT_MS */
	CLOSE_WAIT_GONE,      /* closed here and not kept for the claimer */
};

static const char *close_wait_end_str(enum close_wait_end end)
{
	switch (end) {
	case CLOSE_WAIT_CLOSED: return "closed";
	case CLOSE_WAIT_TIMED_OUT: return "still open";
	case CLOSE_WAIT_SHARED: return "shared beyond the claimer";
	case CLOSE_WAIT_FORKING: return "the fork had not returned";
	case CLOSE_WAIT_GONE: return "closed, not kept for the claimer";
	}
	return "?";
}

/* A claim that came before its owner's close (a fork-per-connection
 * server closes its copy right after the fork): it waits for that close a
 * little, so that the claimer, then alone, may climb.  The little counts
 * from the return of the fork that made the claimer (the claimer can run
 * before it), which is waited for too, within its own bound.  A socket
 * between the fd table and the orphans (its close is under way) is looked
 * for again while its state byte says RDMA.  s held; returns the socket
 * found last (held), an orphan (*orphan) once closed; *end says why the
 * wait ended. */
static struct sdp_sock *wait_for_close(const struct handoff_req *req, pid_t claimer,
				       struct sdp_sock *s, bool *orphan, enum close_wait_end *end)
{
	uint64_t start = progress_now_ms(), close_from = start, now;

	for (;;) {
		struct sdp_sock *again;
		enum open_sharers who;
		bool is_orphan;

		now = progress_now_ms();
		*end = *orphan ? CLOSE_WAIT_CLOSED : CLOSE_WAIT_TIMED_OUT;
		if (*orphan || now >= close_from + HANDOFF_OWNER_CLOSE_WAIT_MS ||
		    atomic_load(&server_stopping)) /* this process exits: its join waits */
			break;
		pthread_mutex_lock(&share_lock);
		who = open_sharers_of(s, claimer);
		pthread_mutex_unlock(&share_lock);
		if (who == OPEN_OTHERS) {
			*end = CLOSE_WAIT_SHARED;
			break;
		}
		if (who == OPEN_FORKING) {
			*end = CLOSE_WAIT_FORKING;
			if (now >= start + HANDOFF_FORK_RETURN_WAIT_MS)
				break;
			close_from = now; /* the close wait has not begun */
		}
		nanosleep(&(struct timespec){ 0, 2 * 1000000L }, NULL);
		again = find_claimed(req, &is_orphan);
		if (!again && state_of_id(req->id) != HANDOFF_ON_RDMA) {
			*end = CLOSE_WAIT_GONE;
			break;
		}
		if (!again)
			continue; /* its close is under way: the one we hold stays */
		sock_release(s);
		s = again;
		*orphan = is_orphan;
	}
	sdp_debug("fork: a claim waited %llu ms for the fork that made its claimer to return, "
		  "then %llu ms for its owner's close: %s",
		  (unsigned long long)(close_from - start), (unsigned long long)(now - close_from),
		  close_wait_end_str(*end));
	return s;
}

/* The claimed socket, held, or NULL with reply->status set: one between
 * the fd table and the orphans (its close is under way) is looked for
 * again while its state byte says RDMA. */
static struct sdp_sock *claimed_sock(const struct handoff_req *req, struct handoff_reply *reply,
				     bool *orphan)
{
	uint64_t deadline = progress_now_ms() + sdp_tun.switch_timeout_ms;
	struct sdp_sock *s;

	while (!(s = find_claimed(req, orphan))) {
		uint8_t st = state_of_id(req->id);

		if (st != HANDOFF_ON_RDMA) {
			reply->status = status_of_state(st);
			return NULL;
		}
		if (progress_now_ms() >= deadline)
			return NULL;
		nanosleep(&(struct timespec){ 0, 5 * 1000000L }, NULL);
	}
	return s;
}

/* status 0: the stream is on kernel TCP; 1: it is not, and will not be.
 * may_climb: the claimer takes a ticket (a forked child, not an exec).
 * claimer: its pid by the kernel (0: unknown, never alone). */
static void serve_claim(const struct handoff_req *req, pid_t claimer, struct handoff_reply *reply,
			bool may_climb)
{
	enum close_wait_end end = CLOSE_WAIT_SHARED;
	bool orphan, on_tcp = true, alone = false;
	struct sdp_sock *s = claimed_sock(req, reply, &orphan);

	if (!s)
		return;
	may_climb = may_climb && sdp_tun.climb && sdp_tun.climb_fork;
	if (may_climb)
		s = wait_for_close(req, claimer, s, &orphan, &end);
	if (end == CLOSE_WAIT_GONE) { /* as claimed_sock answers for one gone */
		reply->status = status_of_state(state_of_id(req->id));
		sock_release(s);
		return;
	}
	if (sock_is_rdma(s) && s->owner_pid == getpid())
		on_tcp = move_for_sharers(s); /* keeps the ticket (sock_rdma.c) */
	reply->status = on_tcp ? 0 : 1;
	if (on_tcp && may_climb && orphan)
		alone = give_ticket(s, claimer, reply);
	if (on_tcp && may_climb && !alone && ticket_kept(s))
		sdp_info("fork: a child's stream stays on TCP: %s (no climb while two can write "
			 "to it)", end == CLOSE_WAIT_TIMED_OUT
				   ? "this process still held its copy after the claim's wait for its close"
				   : "another process may hold the socket as well");
	if (orphan)
		orphan_end(s); /* on TCP now: its channel goes; the sharer has the socket */
	else
		sock_release(s);
}

/* A sharer's child holds what that sharer held: the sharer's fork number
 * (the current one if the sharer is not ours to know). */
static void serve_holder(const struct handoff_req *req)
{
	uint64_t seq = fork_seq;

	pthread_mutex_lock(&share_lock);
	for (size_t i = 0; i < sharers_n; i++)
		if (sharers[i].pid == (pid_t)req->via_pid)
			seq = sharers[i].seq;
	sharer_add((pid_t)req->holder_pid, seq);
	pthread_mutex_unlock(&share_lock);
} /* the next poll set has its pidfd */

/* The reply fd a request carries (the first; any more are closed), and its
 * sender's pid as the kernel gives it (SO_PASSCRED; 0 if none came). */
static int take_reply_fd(struct msghdr *msg, pid_t *sender)
{
	int reply_fd = -1;

	*sender = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cred;

			memcpy(&cred, CMSG_DATA(cm), sizeof(cred));
			*sender = cred.pid;
			continue;
		}
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int got;

			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (reply_fd < 0)
				reply_fd = got;
			else
				real.close(got);
		}
	}
	return reply_fd;
}

/* One line for the first message that is not a request (a descendant that
 * writes anything to the request socket); the rest are dropped quietly. */
static void note_bad_request(void)
{
	static _Atomic bool noted;

	if (!atomic_exchange(&noted, true))
		sdp_warn("fork: a malformed request on the fork handoff socket was ignored "
			 "(a descendant wrote to it)");
}

/* One request; false when the socket ends. */
static bool serve_one(int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct handoff_req req;
	struct iovec iov = { &req, sizeof(req) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t n = real.recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	enum handoff_req_verdict verdict;
	pid_t sender;
	int reply_fd;

	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	reply_fd = take_reply_fd(&msg, &sender); /* an empty message is ignored: we hold the other end */
	verdict = handoff_req_check(&req, (size_t)n, msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC),
				    (uint32_t)getpid());
	if (verdict == HANDOFF_REQ_BAD && n > 0)
		note_bad_request();
	if (verdict == HANDOFF_REQ_HOLDER)
		serve_holder(&req);
	if (reply_fd >= 0) {
		struct handoff_reply reply = { .magic = HANDOFF_REPLY_MAGIC, .status = 1 };

		if (verdict == HANDOFF_REQ_CLAIM || verdict == HANDOFF_REQ_CLAIM_TCP)
			serve_claim(&req, sender, &reply, verdict == HANDOFF_REQ_CLAIM);
		real.send(reply_fd, &reply, reply.has_ticket ? sizeof(reply) : HANDOFF_REPLY_HEAD,
			  MSG_NOSIGNAL | MSG_DONTWAIT);
		explicit_bzero(&reply, sizeof(reply));
		real.close(reply_fd);
	}
	return true;
}

/* The server's poll set: its request socket, then the sharers' pidfds.
 * Returns how many; *timed: a sharer without a pidfd is looked at by time. */
static size_t build_poll_set(struct pollfd **set, size_t *cap, int rx, bool *timed)
{
	size_t n = 1;

	*timed = false;
	pthread_mutex_lock(&share_lock);
	if (*cap < sharers_n + 1) {
		struct pollfd *grown = realloc(*set, (sharers_n + 1) * sizeof(**set));

		if (grown) {
			*set = grown;
			*cap = sharers_n + 1;
		}
	}
	if (*cap >= 1)
		(*set)[0] = (struct pollfd){ .fd = rx, .events = POLLIN };
	for (size_t i = 0; i < sharers_n; i++) {
		if (sharers[i].pidfd < 0 || n >= *cap)
			*timed = true;
		else
			(*set)[n++] = (struct pollfd){ .fd = sharers[i].pidfd, .events = POLLIN };
	}
	pthread_mutex_unlock(&share_lock);
	return *cap >= 1 ? n : 0;
}

/* Requests, and the end of each sharer (its pidfd turns readable): the
 * orphans it was the last sharer of end then, with no timer. */
static void *server_main(void *arg)
{
	struct pollfd *set = NULL;
	size_t cap = 0, n;
	int rx = (int)(intptr_t)arg;
	bool timed, ended;

	SDP_GUARD_ENTER(); /* the library's own calls, never the app's */
	for (;;) {
		n = build_poll_set(&set, &cap, rx, &timed);
		if (!n) { /* no memory for a set: the request socket alone */
			struct pollfd one = { .fd = rx, .events = POLLIN };

			if (real.poll(&one, 1, ORPHAN_SWEEP_MS) > 0 && !serve_one(rx))
				break;
			sweep_orphans();
			continue;
		}
		if (real.poll(set, n, timed ? ORPHAN_SWEEP_MS : -1) < 0 && errno != EINTR)
			break;
		if ((set[0].revents & (POLLIN | POLLHUP | POLLERR)) && !serve_one(rx))
			break;
		if (atomic_load(&server_stopping))
			break;
		ended = timed;
		for (size_t i = 1; i < n; i++)
			ended |= set[i].revents != 0;
		if (ended)
			sweep_orphans(); /* forgets the sharers that are gone too */
	}
	free(set);
	return NULL;
}

static bool start_server_thread(int fd)
{
	int err;

	atomic_store(&server_stopping, false);
	err = lib_thread_start(&server_thread, server_main, (void *)(intptr_t)fd, true, HANDOFF_STACK);
	if (err)
		errno = err;
	return err == 0;
}

/* The request socket, state bytes and thread of this process, made at its
 * first fork with an RDMA stream. */
static bool ensure_server(void)
{
	static pid_t failed_pid;
	int pair[2];

	if (server_pid == getpid())
		return true;
	if (failed_pid == getpid())
		return false;
	slots = mmap(NULL, HANDOFF_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED) {
		slots = NULL;
		goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
		goto fail_unmap;
	/* Each request then says which process sent it: a claimer is matched
	 * by pid, not by how many sharers are left. */
	if (setsockopt(pair[0], SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int)) != 0)
		sdp_warn("fork: SO_PASSCRED on the handoff socket failed (%s): no forked child "
			 "will climb back to RDMA", strerror(errno));
	server_rx = progress_hide_fd(pair[0]);
	server_tx = progress_hide_fd(pair[1]);
	if (!start_server_thread(server_rx)) {
		progress_close_hidden(server_rx);
		progress_close_hidden(server_tx);
		server_rx = server_tx = -1;
		goto fail_unmap;
	}
	slots_used = 0;
	server_pid = getpid();
	return true;
fail_unmap:
	if (slots)
		munmap((void *)slots, HANDOFF_SLOTS);
	slots = NULL;
fail:
	failed_pid = getpid();
	sdp_warn("fork: cannot offer RDMA streams to children (%s); they move to TCP at each fork",
		 strerror(errno));
	return false;
}

/* ---- fork ---- */

static void stamp_for_fork(int fd, void *obj, void *ctx)
{
	struct sdp_sock *s = obj;

	(void)fd;
	(void)ctx;
	if (!sock_is_rdma(s) || s->owner_pid != getpid())
		return;
	if (s->handoff_state) { /* offered at an earlier fork: shared again */
		fork_shares = true;
		return;
	}
	if (!ensure_server() || slots_used == HANDOFF_SLOTS) {
		sock_switch_one_to_tcp(s, switch_deadline()); /* as SDPSHIM_FORK=switch */
		return;
	}
	pthread_mutex_lock(&s->lock);
	s->handoff_id = ++slots_used; /* its state byte's index + 1 */
	s->handoff_seq = fork_seq + 1;
	s->handoff_fd = server_tx;
	s->handoff_state = &slots[s->handoff_id - 1];
	atomic_store(s->handoff_state, HANDOFF_ON_RDMA);
	if (s->conn)
		conn_mark_fork_shared(s->conn);
	pthread_mutex_unlock(&s->lock);
	fork_shares = true;
}

/* share_lock held (handoff_lock_for_fork) */
void handoff_atfork_prepare(void)
{
	fork_shares = false;
	fdt_for_each(FDT_SOCK, stamp_for_fork, NULL);
}

/* The fork handlers' first and last steps, whatever the mode: one fork at
 * a time stamps, the child copies the sharer and orphan lists whole, and
 * until the child is recorded every socket counts as shared. */
void handoff_lock_for_fork(void)
{
	pthread_mutex_lock(&share_lock);
	forks_in_flight++;
}

/* share_lock held: a fork returned, its child recorded as child_seq (0:
 * not recorded).  An orphan closed while that fork was under way may be
 * in its child (the close came after the kernel copied the fds): its range
 * takes the child in.  Once no fork is under way, no close is in doubt. */
static void orphans_after_fork(uint64_t child_seq)
{
	for (size_t i = 0; i < orphans_n; i++) {
		struct sdp_sock *s = orphans[i];

		if (!s->handoff_closed_in_fork)
			continue;
		if (child_seq > s->handoff_last)
			s->handoff_last = child_seq;
		if (!forks_in_flight)
			s->handoff_closed_in_fork = false;
	}
}

void handoff_unlock_after_fork(void)
{
	if (!in_fork_wrapper) {
		/* forkpty() and the like: a child we cannot know shares for good */
		sharers_unknown |= fork_shares;
		fork_shares = false;
		forks_in_flight--;
		orphans_after_fork(0);
	}
	pthread_mutex_unlock(&share_lock);
}

void handoff_fork_begin(void)
{
	in_fork_wrapper = true;
}

void handoff_fork_end(pid_t pid)
{
	bool shares = fork_shares;

	in_fork_wrapper = false;
	if (pid == 0)
		return; /* the child: handoff_atfork_child reset it all */
	pthread_mutex_lock(&share_lock);
	if (pid > 0 && fork_shares)
		sharer_add(pid, ++fork_seq);
	fork_shares = false;
	forks_in_flight--;
	orphans_after_fork(pid > 0 && shares ? fork_seq : 0);
	pthread_mutex_unlock(&share_lock);
	if (pid > 0 && shares)
		wake_server(); /* it watches the child's pidfd */
	if (pid > 0)
		handoff_report_holder(pid); /* streams this process shares as a sharer */
}

void handoff_atfork_child(void)
{
	/* The parent's server, sharers and orphans are not ours.  A child
	 * keeps only the request end, so that a request to a parent that is
	 * gone fails at once. */
	if (server_rx >= 0 && server_pid != getpid()) {
		progress_close_hidden(server_rx);
		server_rx = -1;
	}
	pthread_mutex_init(&share_lock, NULL); /* held by the forking thread */
	for (size_t i = 0; i < sharers_n; i++)
		progress_close_hidden(sharers[i].pidfd);
	sharers_n = 0;
	sharers_unknown = false;
	orphans_n = 0; /* their objects stay as the parent's copies */
	fork_seq = 0;
	fork_shares = false;
	forks_in_flight = 0;
	in_fork_wrapper = false;
}

/* ---- exit ---- */

/* At exit, before the streams shared with live sharers move: the server
 * finishes the request it serves and ends, so that no claim runs while the
 * library tears down.  A claim that comes later finds the state byte the
 * exit's own move writes (its reply fd closes with us).  Bounded: a server
 * still busy after a second is left to the exit. */
void handoff_stop_server(void)
{
	struct timespec until;

	if (server_pid != getpid() || server_tx < 0)
		return;
	atomic_store(&server_stopping, true);
	wake_server();
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_timedjoin_np(server_thread, NULL, &until) == 0)
		server_pid = 0;
}

bool handoff_at_exit(struct sdp_sock *s)
{
	bool shared;

	if (!s->handoff_state || s->owner_pid != getpid() || !sock_is_rdma(s))
		return false;
	pthread_mutex_lock(&share_lock);
	shared = sharers_alive_in(s->handoff_seq, UINT64_MAX);
	pthread_mutex_unlock(&share_lock);
	if (!shared)
		return false;
	if (!move_for_sharers_by(s, exit_moves_deadline))
		sdp_warn("fd %d: a stream shared with a child could not move to TCP within %u ms at "
			 "exit; the child's socket fails", s->primary_fd, sdp_tun.switch_timeout_ms);
	return true;
}

void handoff_orphans_at_exit(void)
{
	pthread_mutex_lock(&share_lock);
	sharers_prune();
	for (size_t i = 0; i < orphans_n; i++) {
		struct sdp_sock *s = orphans[i];

		if (sharer_in_forks(s->handoff_seq, s->handoff_last))
			move_for_sharers_by(s, exit_moves_deadline);
		exit_flush_note_progress();
	}
	pthread_mutex_unlock(&share_lock);
}
