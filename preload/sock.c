/* Lifecycle of tracked sockets: the fd-table entries that name them, their
 * stats slots, the stats-file line written when they close (through
 * preload/stats_file.c), and fork. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/pin_budget.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn.h" /* conn_forked_with_channels() */
#include "preload/exit_flush.h"
#include "preload/gate.h"
#include "preload/sock.h"
#include "preload/fork_handoff.h"
#include "preload/sock_close.h" /* sock_close_transport() */
#include "preload/stats_file.h"
#include "preload/stream.h"     /* sock_stream_tcp, sock_stream_rdma */

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stats_seg proc_seg;
static pid_t proc_seg_pid;
static bool proc_seg_failed;
/* Last resort when even calloc fails: shared, never freed, never exported. */
static struct sdp_conn_stats orphan_slot;

void sock_table_lock(void)
{
	pthread_mutex_lock(&table_lock);
}

void sock_table_unlock(void)
{
	pthread_mutex_unlock(&table_lock);
}

/* Called with table_lock held.  The segment is named and owned by the
 * effective uid: `sdpshim stat` reads only a file owned by the uid in its
 * name (base/stats_shm.h). */
static struct stats_seg *seg_locked(void)
{
	pid_t pid = self_pid();
	int err;

	if (proc_seg.hdr && proc_seg_pid == pid)
		return &proc_seg;
	if (proc_seg_failed)
		return NULL;
	err = stats_seg_create(&proc_seg, stats_dir(), pid, geteuid(), path_progname(),
			       sdp_tun.stats_slots, sdp_tun.link_slots);
	if (err) {
		proc_seg_failed = true;
		sdp_warn("cannot create stats segment in %s: %s; sdpshim stat will not see this "
			 "process", stats_dir(), strerror(-err));
		return NULL;
	}
	if (proc_seg.taken[0])
		sdp_warn("stats segment name sdpshim-%u-%d.stats in %s is taken by %s; using %s",
			 (unsigned)geteuid(), (int)pid, stats_dir(), proc_seg.taken, proc_seg.path);
	proc_seg_pid = pid;
	pin_budget_publish(proc_seg.hdr);
	stats_seg_set_current(&proc_seg);
	return &proc_seg;
}

static struct sdp_conn_stats *slot_alloc_locked(void)
{
	struct stats_seg *seg = seg_locked();
	struct sdp_conn_stats *slot = seg ? stats_slot_alloc(seg) : NULL;

	if (!slot) {
		/* Private slot: counters still work, only `sdpshim stat` misses it. */
		slot = calloc(1, sizeof(*slot));
		if (!slot)
			return &orphan_slot;
		slot->opened_ms = stats_now_ms();
	}
	return slot;
}

static bool slot_in_seg(const struct sdp_conn_stats *slot, const struct stats_seg *seg);

static void slot_free_locked(struct sdp_conn_stats *slot)
{
	if (slot == &orphan_slot)
		return;
	if (slot_in_seg(slot, &proc_seg))
		stats_slot_release(&proc_seg, slot);
	else
		free(slot);
}

/* Modes whose epoll registrations are recorded: the path may still change
 * (FRESH) or the channel carries it (RDMA). */
static bool mode_records_epoll(int mode)
{
	return mode == SOCK_MODE_FRESH || mode == SOCK_MODE_RDMA;
}

static const struct sock_stream_ops *stream_of_mode(enum sock_mode mode)
{
	return mode == SOCK_MODE_RDMA ? &sock_stream_rdma : &sock_stream_tcp;
}

/* Two changes at once (two threads' connect() on one socket, say) can
 * leave the stream of the mode that lost: each changer stores the stream of
 * the mode it finds, until it sees the mode and its stream agree, so once
 * the changes are over they agree.  One load each when they already do. */
static void stream_follow_mode(struct sdp_sock *s)
{
	for (;;) {
		int now = atomic_load(&s->mode);
		const struct sock_stream_ops *want = stream_of_mode((enum sock_mode)now);

		if (atomic_load(&s->stream) != want)
			atomic_store(&s->stream, want);
		else if (atomic_load(&s->mode) == now)
			return;
	}
}

/* The transitions are FRESH -> TCP | LISTEN | RDMA and RDMA -> TCP, so a
 * socket only ever leaves the gate's count (it entered it in sock_track()).
 * The stream is stored first: whoever reads the new mode also finds its
 * stream. */
void sock_set_mode(struct sdp_sock *s, enum sock_mode mode)
{
	int old;

	atomic_store(&s->stream, stream_of_mode(mode));
	old = atomic_exchange(&s->mode, (int)mode);
	stream_follow_mode(s);

	if (mode_records_epoll(old) && !mode_records_epoll((int)mode))
		gate_release(GATE_EPOLL_CTL);
}

struct sdp_sock *sock_track(int fd, int family, bool nonblock)
{
	struct sdp_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	s->family = family;
	s->nonblock = nonblock;
	s->rcvtimeo_ms = -1;
	s->sndtimeo_ms = -1;
	s->primary_fd = fd;
	s->handoff_fd = -1;
	atomic_init(&s->mode, SOCK_MODE_FRESH);
	atomic_init(&s->stream, stream_of_mode(SOCK_MODE_FRESH));
	atomic_init(&s->fd_refs, 1);
	atomic_init(&s->obj_refs, 1);
	gate_hold(GATE_EPOLL_CTL); /* FRESH, before any other thread can find it */
	sock_table_lock();
	s->st = slot_alloc_locked();
	if (fdt_set(fd, FDT_SOCK, s) != 0) {
		gate_release(GATE_EPOLL_CTL);
		slot_free_locked(s->st);
		sock_table_unlock();
		pthread_mutex_destroy(&s->lock);
		free(s);
		return NULL;
	}
	stats_slot_begin(s->st);
	s->st->fd = fd;
	s->st->reason = SDP_REASON_PENDING;
	stats_slot_end(s->st);
	sock_table_unlock();
	return s;
}

void sock_add_fd(struct sdp_sock *s, int new_fd)
{
	sock_table_lock();
	if (fdt_set(new_fd, FDT_SOCK, s) == 0)
		atomic_fetch_add(&s->fd_refs, 1);
	sock_table_unlock();
}

static bool is_connection(const struct sdp_sock *s)
{
	return s->st->role == STATS_ROLE_CLIENT || s->st->role == STATS_ROLE_SERVER;
}

/* One line per connection per process that used it: a copy shared across
 * fork writes a line only from a process that moved bytes on it, so the
 * lines of one connection add up without double counting. */
static bool owes_stats_line(const struct sdp_sock *s)
{
	uint64_t moved = atomic_load(&s->st->bytes_sent) + atomic_load(&s->st->bytes_received);

	if (!is_connection(s))
		return false;
	return moved > 0 || (!s->shared_with_child && !s->from_parent);
}

static void count_path_locked(struct sdp_sock *s);

void sock_hold(struct sdp_sock *s)
{
	atomic_fetch_add(&s->obj_refs, 1);
}

void sock_release(struct sdp_sock *s)
{
	if (atomic_fetch_sub(&s->obj_refs, 1) != 1)
		return;
	sock_table_lock();
	slot_free_locked(s->st);
	sock_table_unlock();
	pthread_mutex_destroy(&s->lock);
	if (s->climb_ticket)
		explicit_bzero(s->climb_ticket, sizeof(*s->climb_ticket)); /* a key */
	free(s->climb_ticket);
	free(s);
}

static void sock_free(struct sdp_sock *s)
{
	if (owes_stats_line(s))
		stats_file_append(s->st, self_pid(), stats_now_ms());
	sock_release(s);
}

void sock_drop_fd(int fd)
{
	struct sdp_sock *s;
	int left;

	sock_table_lock();
	s = sock_of(fd);
	if (!s) {
		sock_table_unlock();
		return;
	}
	fdt_clear(fd);
	left = atomic_fetch_sub(&s->fd_refs, 1) - 1;
	if (left > 0 && s->primary_fd == fd)
		s->primary_fd = -1; /* found again lazily by sock_primary_fd() */
	sock_table_unlock();
	if (left > 0)
		return;
	/* A stream a forked process may still use stays open for it, as the
	 * kernel socket does (preload/fork_handoff.c). */
	if (!handoff_keep_orphan(s))
		sock_close_transport(s, fd);
	sock_free(s);
}

void sock_forget_fd(int fd)
{
	sock_drop_fd(fd);
}

static void flush_cloexec(int fd, void *obj, void *ctx)
{
	struct sdp_sock *s = obj;
	int flags = real.fcntl(fd, F_GETFD);

	(void)ctx;
	if (flags >= 0 && (flags & FD_CLOEXEC) && atomic_load(&s->fd_refs) == 1 &&
	    owes_stats_line(s))
		stats_file_append(s->st, getpid(), stats_now_ms()); /* exec: as collect_channel */
}

void sock_prepare_exec(void)
{
	fdt_for_each(FDT_SOCK, flush_cloexec, NULL);
}

static void count_path_locked(struct sdp_sock *s)
{
	struct stats_seg *seg = seg_locked();

	if (!seg || s->st->path > SDP_PATH_RDMA)
		return;
	atomic_fetch_add(&seg->hdr->conns_by_path[s->st->path], 1);
	if (s->st->reason < STATS_REASON_SLOTS)
		atomic_fetch_add(&seg->hdr->conns_by_reason[s->st->reason], 1);
	if (s->st->negcached)
		atomic_fetch_add(&seg->hdr->negcache_hits, 1);
}

/* "fd 5 client 10.0.0.1:4000 -> 10.0.0.2:6379: <what>" at info level. */
static void log_path(const struct sdp_sock *s, const char *what)
{
	char local[64], remote[64];

	stats_addr_format(&s->st->local, local, sizeof(local));
	stats_addr_format(&s->st->remote, remote, sizeof(remote));
	sdp_info("fd %d %s %s -> %s: %s", s->st->fd, stats_role_name(s->st->role), local, remote,
		 what);
}

/* Path tcp, for reason; counted in the process's totals (once: a second
 * word on the same path, from another thread or a later event, is not). */
static bool publish_tcp_path(struct sdp_sock *s, enum sdp_reason reason, bool negcached)
{
	bool first;

	sock_table_lock();
	first = s->st->path != SDP_PATH_TCP;
	stats_slot_begin(s->st);
	s->st->path = SDP_PATH_TCP;
	s->st->reason = (uint16_t)reason;
	s->st->negcached = negcached;
	stats_slot_end(s->st);
	if (first && is_connection(s))
		count_path_locked(s);
	sock_table_unlock();
	return first;
}

/* Says the connection's path in one info line. */
static void log_tcp_path(struct sdp_sock *s, enum sdp_reason reason, bool negcached,
			 const char *note)
{
	if (!is_connection(s))
		return;
	if (sdp_log_level >= SDP_LOG_INFO) {
		char what[192];

		snprintf(what, sizeof(what), "path=tcp reason=%s%s (%s)%s", sdp_reason_name(reason),
			 negcached ? " (cached)" : "", sdp_reason_text(reason), note);
		log_path(s, what);
	}
}

void sock_set_tcp(struct sdp_sock *s, enum sdp_reason reason, bool negcached)
{
	bool first = publish_tcp_path(s, reason, negcached);

	sock_set_mode(s, SOCK_MODE_TCP);
	if (first)
		log_tcp_path(s, reason, negcached, "");
}

void sock_note_ended_on_tcp(struct sdp_sock *s, enum sdp_reason reason)
{
	if (publish_tcp_path(s, reason, false))
		log_tcp_path(s, reason, false, "; the stream ended with an error before it settled");
}

void sock_note_draining(struct sdp_sock *s, enum sdp_reason reason)
{
	if (publish_tcp_path(s, reason, false))
		log_tcp_path(s, reason, false, "; the bytes written so far move to TCP first");
}

void sock_set_switched(struct sdp_sock *s, enum sdp_reason reason)
{
	sock_note_moved(s, reason);
	sock_set_mode(s, SOCK_MODE_TCP);
}

void sock_note_moved(struct sdp_sock *s, enum sdp_reason reason)
{
	struct stats_seg *seg;

	stats_slot_begin(s->st);
	s->st->path = SDP_PATH_TCP;
	s->st->reason = (uint16_t)reason;
	stats_slot_end(s->st);
	sock_table_lock();
	seg = seg_locked();
	if (seg && reason < STATS_REASON_SLOTS)
		atomic_fetch_add(&seg->hdr->conns_by_reason[reason], 1);
	sock_table_unlock();
	if (sdp_log_level >= SDP_LOG_INFO) {
		char what[160];

		snprintf(what, sizeof(what), "moved from rdma to tcp, reason=%s (%s)",
			 sdp_reason_name(reason), sdp_reason_text(reason));
		log_path(s, what);
	}
}

void sock_note_back_on_rdma(struct sdp_sock *s)
{
	if (s->st->path != SDP_PATH_TCP)
		return;
	stats_slot_begin(s->st);
	s->st->path = SDP_PATH_RDMA;
	s->st->reason = SDP_REASON_NONE;
	stats_slot_end(s->st);
	if (sdp_log_level >= SDP_LOG_INFO)
		log_path(s, "moved back from tcp to rdma");
}

/* Once per connection: the channel's event and the thread that adopted
 * the channel may both get here (preload/connect.c). */
void sock_set_rdma(struct sdp_sock *s)
{
	bool first;

	sock_table_lock();
	first = s->st->path != SDP_PATH_RDMA;
	if (first) {
		stats_slot_begin(s->st);
		s->st->path = SDP_PATH_RDMA;
		s->st->reason = SDP_REASON_NONE;
		stats_slot_end(s->st);
		count_path_locked(s);
	}
	sock_table_unlock();
	if (first && sdp_log_level >= SDP_LOG_INFO)
		log_path(s, "path=rdma");
}

void sock_set_role(struct sdp_sock *s, enum stats_role role)
{
	stats_slot_begin(s->st);
	s->st->role = (uint8_t)role;
	stats_slot_end(s->st);
}

bool sock_read_addresses(int fd, struct sock_addresses *a)
{
	socklen_t llen = sizeof(a->local), rlen = sizeof(a->remote);

	a->have_local = real.getsockname(fd, (struct sockaddr *)&a->local, &llen) == 0;
	a->have_remote = real.getpeername(fd, (struct sockaddr *)&a->remote, &rlen) == 0;
	return a->have_local && a->have_remote;
}

void sock_note_read_addresses(struct sdp_sock *s, const struct sock_addresses *a)
{
	stats_slot_begin(s->st);
	if (a->have_local)
		stats_addr_set(&s->st->local, (const struct sockaddr *)&a->local);
	if (a->have_remote)
		stats_addr_set(&s->st->remote, (const struct sockaddr *)&a->remote);
	stats_slot_end(s->st);
}

void sock_note_addresses(struct sdp_sock *s, int fd)
{
	struct sock_addresses a;

	sock_read_addresses(fd, &a);
	sock_note_read_addresses(s, &a);
}

static bool addr_unspecified(const struct stats_addr *a)
{
	static const uint8_t zero[16];

	return a->family == 0 || a->port == 0 || memcmp(a->addr, zero, sizeof(zero)) == 0;
}

void sock_refresh_local(struct sdp_sock *s)
{
	struct sockaddr_storage local;
	socklen_t llen = sizeof(local);

	if (!s->st || !addr_unspecified(&s->st->local) || s->primary_fd < 0)
		return;
	if (real.getsockname(s->primary_fd, (struct sockaddr *)&local, &llen) != 0)
		return;
	stats_slot_begin(s->st);
	stats_addr_set(&s->st->local, (struct sockaddr *)&local);
	stats_slot_end(s->st);
}

static void flush_one(int fd, void *obj, void *ctx)
{
	struct sdp_sock *s = obj;
	uint64_t now = *(uint64_t *)ctx;

	(void)fd;
	/* A socket named by several fds is written once. */
	if (s->exit_flushed)
		return;
	s->exit_flushed = true;
	if (owes_stats_line(s))
		stats_file_append(s->st, getpid(), now);
}

void sock_flush_all_stats(void)
{
	uint64_t now = stats_now_ms();

	fdt_for_each(FDT_SOCK, flush_one, &now);
	sock_table_lock();
	/* Unlink only: the progress thread may still count into (and release)
	 * slots of this segment while the process exits; unmapping it here
	 * made those writes, and the release, touch freed memory. */
	if (proc_seg.hdr && proc_seg_pid == getpid()) /* at exit: a CLONE_VM child reads our cached id */
		stats_seg_unlink(&proc_seg);
	sock_table_unlock();
}

static void close_rdma_at_exit(int fd, void *obj, void *ctx)
{
	struct sdp_sock *s = obj;

	(void)ctx;
	(void)fd;
	if (!sock_is_rdma(s) || s->owner_pid != getpid()) /* not cached: as in sock_flush_all_stats */
		return;
	if (!handoff_at_exit(s)) /* a process that shares it goes on, on TCP */
		sock_close_transport(s, fd); /* the fd stays open; the kernel closes it at exit */
	exit_flush_note_progress();
}

void sock_close_all_rdma(void)
{
	handoff_exit_moves_begin();
	handoff_stop_server();
	exit_flush_note_progress();
	fdt_for_each(FDT_SOCK, close_rdma_at_exit, NULL);
	handoff_orphans_at_exit();
}

void sock_atfork_prepare(void)
{
	sock_table_lock();
	stats_file_atfork_prepare();
}

static void mark_shared(int fd, void *obj, void *ctx)
{
	struct sdp_sock *s = obj;

	(void)fd;
	s->shared_with_child = true;
	if (atomic_load(&s->mode) == SOCK_MODE_RDMA)
		*(bool *)ctx = true;
}

void sock_atfork_parent(void)
{
	bool kept_rdma = false;

	fdt_for_each(FDT_SOCK, mark_shared, &kept_rdma);
	if (kept_rdma)
		conn_forked_with_channels(); /* the child may wait on the eventfds */
	stats_file_atfork_parent();
	sock_table_unlock();
}

/* The child's counters start at zero: its line reports its own bytes. */
static void zero_counters(struct sdp_conn_stats *st)
{
	atomic_store(&st->bytes_sent, 0);
	atomic_store(&st->bytes_received, 0);
	atomic_store(&st->copy_bytes_sent, 0);
	atomic_store(&st->copy_bytes_received, 0);
	atomic_store(&st->zcopy_bytes_sent, 0);
	atomic_store(&st->zcopy_bytes_received, 0);
	atomic_store(&st->zcopy_ops, 0);
	atomic_store(&st->zcopy_cancels, 0);
	atomic_store(&st->tcp_bytes_sent, 0);
	atomic_store(&st->tcp_bytes_received, 0);
}

static bool slot_in_seg(const struct sdp_conn_stats *slot, const struct stats_seg *seg)
{
	const char *base = (const char *)seg->hdr;

	return base && (const char *)slot >= base && (const char *)slot < base + seg->map_len;
}

static uint32_t fork_generation;

/* In a forked child, once per socket: fresh lock, a slot of the child's
 * own segment with the identity copied and the counters at zero. */
static void rehome_in_child(int fd, void *obj, void *ctx)
{
	const struct stats_seg *parent = ctx;
	struct sdp_sock *s = obj;
	struct sdp_conn_stats *fresh;
	uint32_t in_use, seq;

	if (s->fork_gen == fork_generation)
		return; /* another fd of the same socket */
	s->fork_gen = fork_generation;
	s->from_parent = true;
	s->shared_with_child = false;
	pthread_mutex_init(&s->lock, NULL);
	if (!slot_in_seg(s->st, parent)) {
		zero_counters(s->st); /* a private slot: fork copied it */
		return;
	}
	fresh = slot_alloc_locked();
	if (!fresh)
		fresh = &orphan_slot;
	in_use = atomic_load(&fresh->in_use);
	seq = atomic_load(&fresh->seq);
	memcpy(fresh, s->st, sizeof(*fresh));
	atomic_store(&fresh->seq, seq + 2);
	atomic_store(&fresh->in_use, in_use);
	fresh->fd = fd;
	zero_counters(fresh);
	s->st = fresh;
}

void sock_atfork_child(void)
{
	struct stats_seg parent = proc_seg;

	/* The table lock was taken in prepare; re-create it in the child. */
	pthread_mutex_init(&table_lock, NULL);
	stats_file_atfork_child();
	pthread_mutex_lock(&table_lock);
	memset(&proc_seg, 0, sizeof(proc_seg));
	proc_seg_failed = false;
	fork_generation++;
	stats_seg_set_current(NULL); /* the parent's, unmapped below */
	fdt_for_each(FDT_SOCK, rehome_in_child, &parent);
	if (parent.hdr)
		stats_seg_detach(&parent); /* the parent's segment: unmap, never unlink */
	pthread_mutex_unlock(&table_lock);
}
