/* Per-socket state of a tracked AF_INET/AF_INET6 stream socket, shared by
 * every fd that dup()s it, and the operations that keep the fd table, the
 * stats slot and the path decision consistent. */
#ifndef SDPSHIM_SOCK_H
#define SDPSHIM_SOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/fdtable.h"
#include "base/reason.h"
#include "base/stats_shm.h"
#include "ipoib_fallback/path.h"

/* Explicit states; transitions are listed next to each state. */
enum sock_mode {
	SOCK_MODE_FRESH,  /* socket(): -> TCP, LISTEN or RDMA (connect/accept) */
	SOCK_MODE_TCP,    /* kernel TCP carries the bytes; terminal */
	SOCK_MODE_LISTEN, /* listen(): accepts; may own an RDMA listener; terminal */
	SOCK_MODE_RDMA,   /* an RDMA channel carries the bytes; -> TCP on fallback */
};

struct sdp_conn;     /* core/conn.h: the RDMA channel */
struct sdp_listener; /* core/listener.h: the rdma_cm listener */
struct ep_reg;       /* preload/readiness_epoll.c: epoll registrations */
struct sock_stream_ops; /* preload/stream.h: the carrier's calls */
struct conn_climb_ticket; /* core/conn.h */

struct sdp_sock {
	pthread_mutex_t lock;       /* mode, conn, lsn, regs */
	_Atomic int fd_refs;        /* fds (dups) naming this socket */
	_Atomic int obj_refs;       /* fd_refs > 0 counts as one; plus callbacks in flight */
	_Atomic int mode;           /* enum sock_mode */
	/* The carrier of the mode (preload/stream.h), set with it */
	const struct sock_stream_ops *_Atomic stream;
	int family;
	bool nonblock;              /* O_NONBLOCK of the open file description */
	bool require_rdma;          /* rule "use rdma" */
	bool exit_flushed;          /* stats line written at exit */
	bool shared_with_child;     /* a fork gave a child a copy of this socket */
	_Atomic bool spawn_dup;     /* a posix_spawn dup2 action names it: the child gets it */
	bool from_parent;           /* this process got it from its parent by fork */
	uint32_t fork_gen;          /* last fork handled (one visit per socket) */
	int rcvtimeo_ms, sndtimeo_ms; /* SO_RCVTIMEO/SO_SNDTIMEO, -1 = none */
	struct linger linger;
	pid_t owner_pid;            /* process that created the RDMA state */
	/* SDPSHIM_FORK=handoff (preload/fork_handoff.c): where a process that
	 * inherits this RDMA socket asks its owner to move the stream to TCP
	 * (-1: nowhere), the owner's id for it, and its state byte in memory
	 * the owner shares with its descendants (NULL: none). */
	int handoff_fd;
	uint64_t handoff_id;
	uint64_t handoff_seq;       /* the owner's first fork that shared it */
	uint64_t handoff_last;      /* and the last, once closed there */
	bool handoff_closed_in_fork; /* closed there while a fork was under way */
	_Atomic uint8_t *handoff_state;
	/* The owner's, once a fork's move put the stream on TCP: what the one
	 * child that holds it alone needs to climb back (NULL: none). */
	struct conn_climb_ticket *climb_ticket;
	int primary_fd;             /* one fd number that names the socket */
	struct sdp_conn_stats *st;  /* live counters (never NULL: falls back to a private slot) */
	struct sdp_conn *conn;
	struct sdp_listener *lsn;
	struct ep_reg *regs;
};

/* The tracked socket behind fd, or NULL (the common, fast case). */
static inline struct sdp_sock *sock_of(int fd)
{
	return (struct sdp_sock *)fdt_get(fd, FDT_SOCK);
}

static inline bool sock_is_rdma(const struct sdp_sock *s)
{
	return atomic_load_explicit(&s->mode, memory_order_acquire) == SOCK_MODE_RDMA;
}

/* TCP or LISTEN: terminal modes, read without the lock.  A socket found so
 * stays so, and whatever moved it there (its epoll registrations back to the
 * kernel, for one) was done before the mode was published. */
static inline bool sock_path_final_tcp(const struct sdp_sock *s)
{
	int mode = atomic_load_explicit(&s->mode, memory_order_acquire);

	return mode == SOCK_MODE_TCP || mode == SOCK_MODE_LISTEN;
}

/* Every change of mode goes through here, last, after the state the new
 * mode stands for is in place: it swaps the socket's stream ops (published
 * before the mode) and keeps GATE_EPOLL_CTL (preload/gate.h) counting the
 * sockets in FRESH or RDMA. */
void sock_set_mode(struct sdp_sock *s, enum sock_mode mode);

void sock_hold(struct sdp_sock *s);
void sock_release(struct sdp_sock *s);

void sock_table_lock(void);
void sock_table_unlock(void);

/* Records the local address once a connect has completed, if it was not
 * known (or only as a wildcard) when the connect started. */
void sock_refresh_local(struct sdp_sock *s);
/* Starts tracking a fresh socket fd (socket(), accept()). */
struct sdp_sock *sock_track(int fd, int family, bool nonblock);
/* Records that new_fd now names the same socket as s (dup family). */
void sock_add_fd(struct sdp_sock *s, int new_fd);
/* Forgets fd; frees the socket when it was the last fd (after the stats
 * line is written and the RDMA state is handed to its close path). */
void sock_drop_fd(int fd);

/* Forgets fd without touching the kernel fd (it was replaced behind our back). */
void sock_forget_fd(int fd);
/* Before exec: connections on FD_CLOEXEC fds end; write their stats lines. */
void sock_prepare_exec(void);

/* Decides the path: sets mode, path, reason and counts it once. */
void sock_set_tcp(struct sdp_sock *s, enum sdp_reason reason, bool negcached);
/* The same in the stats alone, for a channel that ended (a reset as it
 * bound, or as its waiting bytes drained into TCP) before its path was
 * settled: no byte went over RDMA.  The channel still answers the app. */
void sock_note_ended_on_tcp(struct sdp_sock *s, enum sdp_reason reason);
/* The same for a channel that gave up before it opened, whose waiting bytes
 * now drain into TCP (DRAINING): the stream is TCP's from here. */
void sock_note_draining(struct sdp_sock *s, enum sdp_reason reason);
/* An RDMA connection whose stream moved to TCP mid-way (failover, fork):
 * path tcp with the reason; counted once more by reason, not by path. */
void sock_set_switched(struct sdp_sock *s, enum sdp_reason reason);
/* The same in the stats alone: the channel still carries the socket and
 * does its TCP I/O (core's HELD phase: it climbs back to RDMA). */
void sock_note_moved(struct sdp_sock *s, enum sdp_reason reason);
/* ... and it climbed back: path rdma again (not counted as a new path). */
void sock_note_back_on_rdma(struct sdp_sock *s);
/* The channel is attached: path rdma, counted and logged once. */
void sock_set_rdma(struct sdp_sock *s);
void sock_set_role(struct sdp_sock *s, enum stats_role role);
/* A socket's two addresses, read once (getsockname, getpeername). */
struct sock_addresses {
	struct sockaddr_storage local, remote;
	bool have_local, have_remote;
};

/* True if both were read. */
bool sock_read_addresses(int fd, struct sock_addresses *a);
/* Copies what was read into the socket's stats slot. */
void sock_note_read_addresses(struct sdp_sock *s, const struct sock_addresses *a);
/* Both of the above. */
void sock_note_addresses(struct sdp_sock *s, int fd);

/* Writes every open connection to SDPSHIM_STATS_FILE (at exit). */
void sock_flush_all_stats(void);
/* At exit: every open RDMA-backed socket is closed the way the kernel
 * closes a TCP socket at exit (queued bytes flushed in the background). */
void sock_close_all_rdma(void);
/* After fork in the child: fresh locks, own stats segment. */
void sock_atfork_child(void);
void sock_atfork_prepare(void);
void sock_atfork_parent(void);

#endif
