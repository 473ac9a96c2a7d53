/* The API of the RDMA channel of one TCP connection, as the preload uses
 * it: connect/accept binding, byte-stream send/recv with TCP semantics,
 * readiness, shutdown and close.  The channel (struct sdp_conn) is opaque
 * here; its fields are private to core/ (core/conn_struct.h).  All
 * functions return 0 or a byte count, or -errno; only the preload sets
 * errno. */
#ifndef SDPSHIM_CONN_H
#define SDPSHIM_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/policy.h"
#include "base/reason.h"
#include "base/stats_shm.h"

struct sdp_conn;
struct sdp_listener;

/* Where the channel is in its life.  Transitions (core/phase.c checks them):
 *   client: RESOLVING -> TCP_CONNECTING -> AWAIT_ATTACH -> OPEN
 *   server: PENDING -> (accept matched) ATTACHING -> OPEN
 *   any phase up to OPEN -> FALLBACK (the stream continues on kernel TCP)
 *   AWAIT_ATTACH, ATTACHING -> DRAINING -> FALLBACK (the app's buffered bytes go to TCP first)
 *   OPEN  -> SWITCHING -> FALLBACK (the stream moves to TCP mid-way: core/switch.c)
 *   SWITCHING -> HELD -> CLIMB_HALF -> OPEN (a failover's stream climbs back: core/climb.c)
 *   HELD -> FALLBACK (it stays on TCP: fork, exec, shutdown, a refusal)
 *   CLIMB_HALF -> HELD (the peer let the attempt go before its ACK, nothing of
 *                       ours on the new channel yet: climb_on_peer_released)
 *   a forked child's adopted stream starts HELD (conn_adopt_held)
 *   any but FALLBACK -> DEAD (both sides closed, reset, given up, or torn down;
 *                             resources released).  FALLBACK and DEAD are final. */
enum conn_phase {
	CONN_RESOLVING,      /* rdma_cm address/route/connect in flight */
	CONN_TCP_CONNECTING, /* channel up; kernel TCP connect in flight */
	CONN_AWAIT_ATTACH,   /* TCP up; waiting for the server's ATTACH; writes are buffered */
	CONN_PENDING,        /* server: channel up, no accepted fd matched yet */
	CONN_ATTACHING,      /* server: matched, waiting for ESTABLISHED to send ATTACH */
	CONN_OPEN,           /* bytes flow over RDMA */
	CONN_DRAINING,       /* moving to TCP: buffered bytes are written to TCP first */
	CONN_SWITCHING,      /* moving an open stream to TCP: SWITCH records and resends */
	CONN_FALLBACK,       /* channel abandoned; the socket uses kernel TCP */
	CONN_DEAD,           /* channel torn down */
	CONN_HELD,           /* a failover moved the stream to TCP; the channel does its TCP
			      * I/O, counting offsets, and climbs back (core/climb.c) */
	CONN_CLIMB_HALF,     /* climbed: writes go on the new channel, reads take TCP up to
			      * the peer's cut first */
};

/* Why the owner is being called back. */
enum conn_event {
	CONN_EV_RDMA_READY,    /* client channel established: issue the kernel connect */
	CONN_EV_FALLBACK,      /* the socket is plain TCP now: the channel was abandoned
				* before any byte moved, or the stream moved (switch) */
	CONN_EV_STATE,         /* readiness or error changed */
};

/* An event and what it carries, filled under the conn lock that raised it. */
struct conn_event_info {
	enum conn_event ev;
	enum sdp_reason reason; /* CONN_EV_FALLBACK: why the socket is on TCP */
};

struct conn_owner_ops {
	/* Called without the conn lock held, from whichever thread raised it. */
	void (*event)(void *owner, struct sdp_conn *conn, const struct conn_event_info *info);
	/* Keep the owner alive across an event delivery. */
	void (*hold)(void *owner);
	void (*release)(void *owner);
};

/* Parameters of a client connect. */
struct conn_connect_params {
	const struct sockaddr *dst;
	socklen_t dst_len;
	int app_fd;                /* the app's socket; conn keeps its own dup */
	const struct sdp_policy *policy; /* copied */
	bool async;                /* non-blocking connect: the kernel connect is ours */
	/* The server's answer before the kernel connect (a rule that requires
	 * RDMA refuses the connect instead of connecting TCP): no committed OPEN. */
	bool answer_first;
	void *owner;
	const struct conn_owner_ops *owner_ops;
	struct sdp_conn_stats *st;
};

/* ---- lifetime ---- */
void conn_get(struct sdp_conn *c);
void conn_put(struct sdp_conn *c);

/* ---- client ---- */
/* Starts the RDMA attempt (binding fd's local port first).  Returns the
 * conn in phase RESOLVING, or NULL with *reason set. */
struct sdp_conn *conn_connect_start(const struct conn_connect_params *p, enum sdp_reason *reason,
				    int *err);
/* Blocks until the RDMA attempt leaves RESOLVING (bounded by its timeout).
 * Returns the phase it reached. */
enum conn_phase conn_wait_resolved(struct sdp_conn *c);
/* A blocking connect() whose stream's OPEN committed (the kernel connect
 * did not wait for the server's answer): waits for the answer, or the
 * fallback, once the kernel connect is done. */
void conn_wait_answered(struct sdp_conn *c);
/* Before the kernel connect of a stream whose OPEN committed (no lock
 * held): waits, bounded, until the OPEN's send completed, so the server
 * holds it before the SYN. */
void conn_wait_open_delivered(struct sdp_conn *c);
/* The app thread's blocking kernel connect finished: rc 0 or -errno. */
void conn_tcp_connected(struct sdp_conn *c, int rc);
/* True while the RDMA phase or the kernel connect is still in flight
 * (a second connect() gets EALREADY). */
bool conn_connect_in_progress(struct sdp_conn *c);

/* ---- server ---- */
/* Before conn_attach_accepted (no socket lock held): if no pending channel
 * names the accepted connection, the listener's links are taken in once.
 * A client's committed OPEN goes before its SYN, but the progress thread
 * may not have taken it in yet. */
void conn_accept_prepare(struct sdp_listener *lsn, const struct sockaddr *local,
			 const struct sockaddr *peer);
/* Looks up and attaches the channel of an accepted TCP connection.
 * Returns the conn (phase ATTACHING/OPEN) or NULL. */
struct sdp_conn *conn_attach_accepted(struct sdp_listener *lsn, int fd,
				      const struct sockaddr *local, const struct sockaddr *peer,
				      void *owner, const struct conn_owner_ops *ops,
				      struct sdp_conn_stats *st);

/* ---- data (TCP semantics) ---- */
/* flags: MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL, MSG_TRUNC, MSG_MORE, MSG_NOSIGNAL. */
ssize_t conn_send(struct sdp_conn *c, const struct iovec *iov, int iovcnt, int flags,
		  bool nonblock, int timeout_ms);
ssize_t conn_recv(struct sdp_conn *c, const struct iovec *iov, int iovcnt, int flags,
		  bool nonblock, int timeout_ms);
/* POLLIN/POLLOUT/POLLHUP/POLLERR/POLLRDHUP as the kernel would report.
 * Reads state only: safe to call with other locks held. */
unsigned conn_poll_mask(struct sdp_conn *c);
/* The devices' completion channels, for an app thread that sleeps in
 * epoll_wait (core/app_wake.c).  An app epoll set holds each channel with
 * EPOLLIN | EPOLLET | EPOLLEXCLUSIVE; a thread woken by one calls
 * conn_take_completions.  The generation changes when a device is added. */
unsigned conn_channels_generation(void);
int conn_channel_fds(int *fds, int max);
/* Returns the events taken in (non-blocking). */
int conn_take_completions(void);
/* The same, by a thread woken in a blocked call that sleeps again in a
 * hooked call when it finds nothing: while no other thread sleeps on
 * readiness, the links' CQs are left unarmed until that sleep arms them
 * (or the lease timer does), so a message that lands meanwhile wakes no
 * other thread: the sleeper's look before it sleeps finds it. */
int conn_take_completions_then_sleep(void);
/* Puts the channels (at most max) that epfd lacks into it, edge-triggered
 * (the waker reads every event) and exclusive (one sleeper wakes, and the
 * progress thread only when none does), with data tag.  If any went in,
 * the progress thread's watch goes last again (first: the set's first
 * channels; it is counted until conn_channels_unwatched).  True if any
 * went in. */
bool conn_channels_add(int epfd, uint64_t tag, int max, bool first);
/* A set that held the channels is gone. */
void conn_channels_unwatched(void);
/* Busy-poll (SDPSHIM_SPIN_US; 0: off).  conn_app_poll takes in c's
 * completions from the caller's thread (its link's, if no other thread is
 * at them); conn_poll_links does so for every link of the process.  Both
 * poll in user space: no system call. */
unsigned conn_spin_us(void);
/* Around a busy-poll spin over every link of the process (epoll_wait's:
 * links' CQs are left unarmed meanwhile; a spin over some links only does
 * not count), and before a thread sleeps on readiness (the arms a spin put
 * off are made). */
void conn_spin_begin(void);
void conn_spin_end(void);
/* A thread about to sleep on readiness (a blocked call, poll, select,
 * epoll_wait) counts itself and makes the CQ arms a busy-poll or a
 * non-blocking loop put off; conn_sleep_end_any once it is awake. */
void conn_sleep_begin_any(void);
void conn_sleep_end_any(void);
void conn_sleep_end_cleanup(void *unused); /* the same, as a cancellation cleanup */
/* Is a CQ arm put off now?  A wait that asks with a zero timeout polls
 * the links itself (conn_poll_links): no event announces their messages. */
bool conn_arms_owed(void);
void conn_app_poll(struct sdp_conn *c);
void conn_poll_links(void);
/* Indicator eventfds this thread has set so far (a running count). */
unsigned conn_indicators_set_by_thread(void);
/* Deferred indicators.  An app thread that answers readiness itself (in
 * epoll_wait, for one set) opens a window naming that set.  While it is
 * open, an indicator that the thread's own take-in of completions would
 * set is not written if the channel is watched by that set alone
 * (conn_set_watch) and no thread sleeps on its eventfds: the channel and
 * which indicator are handed to `told` at the next flush, and the write
 * is owed.  It is made
 * (conn_pay_deferred) when the caller cannot answer for it itself, when
 * the watch changes, or when a thread goes to sleep on the eventfds
 * (conn_sleep_begin); it lapses when the condition does. */
typedef void (*conn_told_fn)(struct sdp_conn *c, bool readable, void *arg);
void conn_defer_open(const void *set);
void conn_defer_flush(conn_told_fn told, void *arg);
void conn_defer_close(conn_told_fn told, void *arg);
unsigned conn_indicators_deferred_by_thread(void); /* a running count */
bool conn_defer_pending(void); /* anything to hand back at the next flush? */
void conn_pay_deferred(struct sdp_conn *c);
/* The same, and a new write of the readable indicator if c is readable
 * (a hang-up, an error): for a watcher whose entry for it is
 * edge-triggered, and whose report, handed to other threads, must come
 * again as level-triggering does. */
void conn_renew_readable(struct sdp_conn *c);
/* The set that alone watches c (NULL: more than one, or a watcher this
 * process cannot count; CONN_UNWATCHED: none, and no other process holds
 * the socket), and the watcher's record of it, which conn_watch_cookie
 * returns while set is still the watch.  While c is unwatched and no
 * thread sleeps on its eventfds, no indicator is written: the write is
 * owed, and made when the watch changes or a sleeper comes. */
extern const char conn_unwatched_tag;
#define CONN_UNWATCHED ((const void *)&conn_unwatched_tag)
/* A fork gave a child a socket whose stream is still on RDMA
 * (SDPSHIM_FORK=keep): from now on every indicator is written. */
void conn_forked_with_channels(void);
void conn_set_watch(struct sdp_conn *c, const void *set, void *cookie);
void *conn_watch_cookie(struct sdp_conn *c, const void *set);
/* A poll or select about to sleep in the kernel on c's eventfds: returns
 * c's poll mask, read after the sleeper was counted; conn_sleep_end when
 * the thread is awake again. */
unsigned conn_sleep_begin(struct sdp_conn *c);
void conn_sleep_end(struct sdp_conn *c);
/* Clears indicators whose condition is false (call before sleeping). */
void conn_prepare_wait(struct sdp_conn *c);
/* The level-triggered eventfds poll, select and epoll wait on: set while
 * the channel is readable / writable.  Fixed for the channel's life. */
int conn_readable_eventfd(const struct sdp_conn *c);
int conn_writable_eventfd(const struct sdp_conn *c);
/* 0, or CONN_USE_TCP: the stream is on TCP, shut the kernel socket down. */
int conn_shutdown(struct sdp_conn *c, int how);
/* The socket's last fd is closing: flush, DisConn, free in the background
 * (bounded by SDPSHIM_LINGER_MS).  abort: SO_LINGER with l_linger 0.
 * Drops the owner's reference. */
void conn_app_close(struct sdp_conn *c, bool abort);
enum conn_phase conn_get_phase(struct sdp_conn *c);
/* Why the socket is on TCP (CONN_EV_FALLBACK carries it too). */
enum sdp_reason conn_get_fail_reason(struct sdp_conn *c);
/* Why the stream ended with a failure (aborted, or its channel gone), else
 * SDP_REASON_NONE.  One whose path was never settled ended on its TCP
 * connection: no byte went over RDMA. */
enum sdp_reason conn_failed_reason(struct sdp_conn *c);
bool conn_is_server(const struct sdp_conn *c);
/* The address a client connected to (fixed at conn_connect_start). */
const struct sockaddr *conn_peer_addr(const struct sdp_conn *c);

/* SO_ERROR: returns and clears the pending error; CONN_USE_TCP when the
 * stream's error is its kernel socket's (the caller asks SO_ERROR there). */
int conn_take_error(struct sdp_conn *c);
uint64_t conn_readable_bytes(struct sdp_conn *c);
uint64_t conn_unsent_bytes(struct sdp_conn *c);
void conn_set_keepalive(struct sdp_conn *c, bool on, unsigned idle_s, unsigned intvl_s,
			unsigned cnt);

/* Before fork or exec: start moving an open channel's stream to the kernel
 * TCP socket (reason SDP_REASON_FORKED), then wait until the socket is
 * plain TCP and its owner was told (CONN_EV_FALLBACK), or the deadline
 * (progress_now_ms() clock) passes.  Start every channel before waiting on
 * any.  A channel still connecting or attaching is moved once it opens.
 * conn_switch_wait returns false if the socket is still the channel's
 * (still moving, or bytes only this process holds). */
void conn_switch_begin(struct sdp_conn *c, enum sdp_reason reason);
/* Another process shares the socket (a fork that left the stream on the
 * channel): a later move to TCP, a failover's too, leaves every byte this
 * process has not delivered to the kernel socket (the peer resends it),
 * where that process can read it. */
void conn_mark_fork_shared(struct sdp_conn *c);
bool conn_switch_wait(struct sdp_conn *c, enum sdp_reason reason, uint64_t deadline_ms);

/* A stream a fork moved to TCP (SDPSHIM_FORK=handoff): what the one child
 * that holds it alone needs to bring it back to RDMA (docs/upgrade.md,
 * "Fork"), handed over by the owner with its answer to the child's claim.
 * Canonical tuple (src: the TCP client), the climb key, the stream
 * offsets where TCP starts in each direction, the peer's rendezvous. */
#define CONN_CLIMB_KEY_SIZE 32
struct conn_climb_ticket {
	uint8_t src_addr[16], dst_addr[16];
	uint16_t src_port, dst_port;
	uint8_t is_server;
	uint8_t pad[3];
	uint8_t key[CONN_CLIMB_KEY_SIZE];
	uint64_t tx_off, rx_off;
	struct sockaddr_storage peer_rdv;
};

/* Owner: c moved to TCP for a fork (FALLBACK, reason forked): true with
 * *t filled if a child may climb it (a bound stream, climb allowed, the
 * peer named a rendezvous port, nothing shut down or failed). */
bool conn_climb_ticket(struct sdp_conn *c, struct conn_climb_ticket *t);
/* Child, the sole holder of app_fd: a channel that carries the stream on
 * TCP (HELD) and dials the peer's rendezvous port to climb.  NULL if it
 * cannot (no memory, no fd): the socket stays on plain TCP. */
struct sdp_conn *conn_adopt_held(int app_fd, const struct conn_climb_ticket *t, void *owner,
				 const struct conn_owner_ops *ops, struct sdp_conn_stats *st);

/* Child, right after conn_adopt_held: waits at most ms for the climb
 * (until the stream's writes go over RDMA), so that a short-lived
 * connection does not spend its life on TCP.  True if it climbed. */
bool conn_wait_climb(struct sdp_conn *c, unsigned ms);

/* In a forked child: the parent's progress thread, devices and rdma_cm
 * channel are not ours; start afresh when the child makes a channel. */
void conn_layer_atfork_child(void);

/* The memory one RDMA connection of this process pins with today's
 * per-connection channels, from SDPSHIM_BUF_SIZE and SDPSHIM_BUF_COUNT:
 * its receive buffers with the control slots, and its send slots for a
 * peer of the same geometry, each in whole pages (core/geometry.c; pure,
 * so `sdpshim doctor` calls it too).  Zero-copy's staging buffer and
 * registration cache come on top, only while zero-copy runs. */
size_t conn_pinned_bytes_estimate(void);
/* What one link pins (docs/links.md), with this process's tunables. */
size_t link_pinned_bytes_estimate(void);

/* Sentinel from conn_send/conn_recv: the socket now uses kernel TCP. */
#define CONN_USE_TCP (-10000)
const char *conn_phase_name(enum conn_phase phase);

#endif
