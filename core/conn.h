/* The RDMA channel of one TCP connection (struct sdp_conn) and the API the
 * preload uses: connect/accept binding, byte-stream send/recv with TCP
 * semantics, readiness, shutdown and close.  All functions return 0 or a
 * byte count, or -errno; only the preload sets errno. */
#ifndef SDPSHIM_CONN_H
#define SDPSHIM_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/policy.h"
#include "base/reason.h"
#include "base/stats_shm.h"
#include "core/progress.h"
#include "core/switch_reader.h"
#include "core/wire.h"

struct sdp_conn;
struct rdma_cm_id;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;
struct sdp_dev;
struct sdp_listener;
struct mrc_entry;
struct ibv_mw;

enum { ZC_WIN_SRC, ZC_WIN_SINK, ZC_WINDOWS };

struct zc_window {
	struct ibv_mw *mw;
	uint32_t rkey;
	bool bound, busy; /* bound now / a bind or invalidate in flight */
};

/* Where the channel is in its life.  Transitions:
 *   client: RESOLVING -> TCP_CONNECTING -> AWAIT_ATTACH -> OPEN
 *   server: PENDING -> (accept matched) ATTACHING -> OPEN
 *   any   -> [DRAINING ->] FALLBACK (the stream continues on kernel TCP)
 *   OPEN  -> SWITCHING -> FALLBACK (the stream moves to TCP mid-way: core/switch.c)
 *   OPEN  -> DEAD (both sides closed, or reset; resources released) */
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
};

/* The binding handshake (core/bind.c, docs/trust.md): how far this end is
 * in proving, on the TCP connection, that the channel is that connection's.
 * Only in client AWAIT_ATTACH and server ATTACHING. */
enum conn_bind {
	BIND_IDLE,      /* server: no signal sent yet; client: no signal seen yet */
	BIND_SIGNALLED, /* server: urgent byte sent, PROOF awaited;
			 * client: PROOF sent, ATTACH (channel) or NAK (TCP) awaited */
	BIND_PROVEN,    /* server: PROOF matched, ATTACH goes once established;
			 * client: ATTACH received (the phase is OPEN) */
};

/* Orderly close, one direction at a time, like TCP (see core/close.c). */
enum conn_close_state {
	CLOSE_ACTIVE,      /* both directions open */
	CLOSE_TX_DRAINING, /* app shut down writing; queued bytes go first, then DisConn */
	CLOSE_FIN_WAIT,    /* our DisConn is posted; the peer may still send */
	CLOSE_PEER_FIN,    /* the peer's DisConn arrived; we may still send */
	CLOSE_LAST_DRAIN,  /* peer finished; our queued bytes, then our DisConn */
	CLOSE_DONE,        /* both DisConns exchanged */
	CLOSE_ABORTED,     /* reset sent or received, or the carrier died */
};

/* Why the owner is being called back. */
enum conn_event {
	CONN_EV_RDMA_READY,    /* client channel established: issue the kernel connect */
	CONN_EV_FALLBACK,      /* channel abandoned before any byte moved: use TCP */
	CONN_EV_STATE,         /* readiness or error changed */
};

struct conn_owner_ops {
	/* Called without the conn lock held, from whichever thread raised it. */
	void (*event)(void *owner, struct sdp_conn *conn, enum conn_event ev);
	/* Keep the owner alive across an event delivery. */
	void (*hold)(void *owner);
	void (*release)(void *owner);
};

struct tx_slot {
	uint32_t seq; /* message sequence number once posted */
	uint32_t len; /* bytes in the slot, header included */
	uint64_t off; /* stream offset of its first payload byte */
};

struct rx_entry {
	uint32_t seq;
	uint16_t slot;     /* receive buffer index */
	bool     consumed; /* acked once every earlier entry is consumed too */
	bool     is_data;  /* bytes in our buffer (DATA) */
	bool     is_src;   /* bytes at the peer (SrcAvail), read by RDMA READ */
	uint32_t off, len; /* DATA: unread payload; SrcAvail: len = bytes not yet consumed */
	uint64_t raddr;    /* SrcAvail: next remote address to read */
	uint32_t rkey;
	uint32_t total;    /* SrcAvail: bytes it announced (a cancel truncates it) */
	uint32_t unread;   /* SrcAvail: bytes not yet READ (len minus staged and in flight) */
	uint64_t stream_off; /* SrcAvail: the stream offset of its first byte */
	bool     answered; /* SrcAvail: RdmaRdCompl queued (every byte READ, or cancelled) */
};

/* Our outstanding SrcAvail (sender side of read zero-copy). */
struct zc_src {
	bool active, answered, cancel_sent;
	uint64_t stream_off, addr;
	uint32_t len, consumed;  /* consumed: the peer's RdmaRdCompl */
	uint32_t rkey;
	struct mrc_entry *mre;
};

/* Our RDMA READ in flight (receiver side of read zero-copy). */
struct zc_read {
	bool active, done, direct;
	uint32_t len;
	uint32_t seq;            /* the SrcAvail's entry, found again by this */
	struct mrc_entry *mre;   /* the app buffer's entry for a direct READ */
};

/* Our outstanding SinkAvail (receiver side of write zero-copy). */
struct zc_sink {
	bool active, answered, cancel_sent;
	uint64_t stream_off, addr;
	uint32_t len, written;   /* written: the peer's RdmaWrCompl */
	uint32_t rkey;
	struct mrc_entry *mre;
};

/* A SinkAvail the peer advertised (sender side of write zero-copy). */
struct zc_peer_sink {
	bool valid;
	uint64_t stream_off, addr;
	uint32_t len, rkey;
};

#define CM_KIND_CONN     1
#define CM_KIND_LISTENER 2

struct sdp_conn {
	int cm_kind;            /* CM_KIND_CONN: first, for rdma_cm id contexts */
	pthread_mutex_t lock;
	pthread_cond_t cond;    /* phase changes (connect waits on it) */
	_Atomic int refs;
	enum conn_phase phase;
	enum conn_close_state close_state;
	bool is_server;
	struct sdp_policy policy; /* the path decision's: zero-copy threshold, connect bound */
	bool async_connect;     /* the progress thread issues the kernel connect */
	bool app_closed;        /* no fd names it any more: linger, then free */
	bool destroy_queued;
	bool carrier_dead;      /* QP or cm id failed */
	bool qp_in_error;       /* we moved the QP to the error state: no remote access */
	bool carrier_reaping;   /* close_ev_carrier_failed takes in the completions first */
	const char *carrier_why; /* the first sign of the failure (static text), for the log */
	bool rd_shut;           /* shutdown(SHUT_RD): reads see EOF */
	bool committed;         /* server: the client's COMMIT arrived */
	bool lingering;         /* counted in progress_linger_*() until destroyed */
	int error;              /* pending socket error (errno), reported once */
	int hard_error;         /* error that ends the stream (ECONNRESET, EPIPE...) */
	enum sdp_reason fail_reason;
	uint32_t owner_events;  /* bit per enum conn_event raised under the lock */

	/* Binding to the app's TCP connection. */
	struct sdp_tuple tuple;
	enum conn_bind bind;
	uint8_t nonce_local[SDP_NONCE_SIZE]; /* server: ours, in the HelloAck; client: ours, in COMMIT */
	uint8_t nonce_peer[SDP_NONCE_SIZE];  /* client: the server's (echoed in our PROOF) */
	bool peer_gave_up;      /* server: the client DETACHed (it uses TCP) */
	bool budget_held;       /* server: counted in the pending budget (core/budget.c) */
	uint64_t connect_deadline_ms; /* client: the whole RDMA attempt ends by then */
	uint64_t bind_deadline_ms;    /* the handshake's current bound (core/bind.c) */
	struct sockaddr_storage peer_addr;
	socklen_t peer_addr_len;
	int tcp_fd;             /* the library's own dup of the TCP socket, or -1 */
	struct progress_source tcp_src;
	bool tcp_watched;
	void *owner;
	const struct conn_owner_ops *owner_ops;
	struct sdp_conn_stats *st;
	struct sdp_listener *lsn; /* server: the listener it arrived on */

	/* Verbs and rdma_cm. */
	struct rdma_cm_id *cm_id;
	struct sdp_dev *dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t max_inline;
	uint32_t sq_depth;
	uint32_t sq_outstanding;
	bool established;
	/* Server: our ATTACH is queued or posted and has not completed, so the
	 * client may not know the channel is attached: the stream must not
	 * move to TCP until it has (switch.c). */
	bool attach_unconfirmed;
	uint32_t attach_idx;       /* its control slot, once posted */
	bool attach_posted;
	bool attach_held;          /* SDPSHIM_DEBUG_ATTACH_DELAY_MS: queued when the timer fires */

	/* Receive side: our buffers, filled by the peer's SENDs. */
	uint32_t buf_size;
	uint16_t buf_count;
	uint8_t *rx_mem;
	size_t rx_mem_len;
	struct ibv_mr *rx_mr;
	struct rx_entry *rx_ring; /* buf_count entries, in sequence order */
	uint32_t rx_head, rx_tail; /* [tail, head) received, not yet acked */
	uint32_t rx_seq;          /* last sequence received */
	uint32_t rx_ack;          /* last sequence consumed in order */
	uint32_t rx_ack_sent;     /* last ack we advertised */
	uint64_t rx_bytes_ready;
	bool rx_eof;
	bool peer_starving;

	/* Send side: slots mirroring the peer's buffers, kept until acked.
	 * [tail, posted) posted and unacked, [posted, head) filled, unposted;
	 * slot head-1 may still take bytes while it is unposted. */
	uint32_t peer_buf_size;    /* as the peer announced (validated, not trusted for sizing) */
	uint16_t peer_buf_count;
	uint32_t tx_slot_size;     /* our send slots: the peer's buffer size capped at ours */
	uint16_t tx_peer_bufs;     /* receive buffers the peer says it posted */
	uint8_t *tx_mem;
	size_t tx_mem_len;
	struct ibv_mr *tx_mr;
	struct tx_slot *tx_slots;
	uint32_t tx_nslots;
	uint32_t tx_tail, tx_posted, tx_head;
	uint32_t tx_seq;           /* last sequence sent */
	uint32_t tx_peer_ack;      /* last of our sequences the peer consumed */
	uint32_t ctrl_pending;     /* bit per control mid waiting for a credit */
	uint32_t ctrl_next;        /* next control slot (ring at the end of tx_mem) */
	uint32_t ctrl_outstanding; /* control sends not completed yet */
	uint32_t detach_reason;
	int abort_errno;

	/* Zero-copy (core/zcopy.c, zc_*.c).  Two windows, one per direction (our
	 * SrcAvail, our SinkAvail), each bound to one range per transfer. */
	uint64_t tx_stream_off;    /* bytes the app handed to the stream */
	uint64_t rx_stream_off;    /* bytes the peer put in the stream, as queued here */
	struct zc_window win[ZC_WINDOWS];
	struct zc_src src;
	struct zc_read rd;
	struct zc_sink sink;
	uint8_t zc_nb_backoff;     /* non-blocking writes to copy before trying zero-copy again */
	bool zc_interrupted;       /* the last zero-copy send was cut short by a signal or timeout */
	bool sink_voided;          /* our last sink was given up unanswered, at: */
	uint64_t sink_void_off;
	struct zc_peer_sink psink;
	bool write_active;         /* our RDMA WRITE into the peer's sink */
	bool src_cancel_pending;   /* the peer's SrcAvailCancel waits for our READ */
	/* Values the pending answers carry. */
	uint32_t rd_compl_bytes, wr_compl_bytes;
	uint64_t rd_compl_off, sink_ack_off;
	uint8_t *stage;            /* staging buffer for READs nobody waits for */
	struct ibv_mr *stage_mr;
	uint32_t stage_len, stage_off, stage_fill;
	int rx_waiters;            /* threads blocked in recv (they READ directly) */
	int zc_threads;            /* app threads inside a zero-copy operation */

	/* Bytes moving to TCP after a fallback (DRAINING phase), or our SWITCH
	 * record and resend (SWITCHING). */
	uint8_t *drain_buf;
	size_t drain_len, drain_off;

	/* Moving the open stream to TCP (core/switch.c). */
	enum sdp_reason sw_reason;
	bool sw_started;
	bool sw_by_peer;           /* the peer's record started it: take its reason */
	bool sw_tx_done;           /* our record and resend are in the kernel socket */
	bool sw_shut_wr;           /* the app shut down writing: SHUT_WR after them */
	bool sw_peer_done;         /* the peer's record read, its duplicates dropped */
	bool sw_local_provisional; /* sw_local is dropped when the peer's record arrives */
	int sw_peer_err;           /* TCP error seen while reading it (reported once) */
	struct switch_reader sw_reader; /* the peer's record, then its resend we have */
	uint64_t sw_rx_have;       /* stream bytes this end has: delivered + kept */
	uint8_t *sw_local;         /* received over RDMA, not read yet (kept) */
	size_t sw_local_len, sw_local_off;
	bool wr_unconfirmed;       /* our RDMA WRITE with immediate may not have landed */
	bool write_rolled_back;    /* the switch took that WRITE's bytes back */
	bool debug_failed;         /* SDPSHIM_DEBUG_FAIL_AFTER fired */

	/* Readiness indicators (level-triggered eventfds). */
	int rd_fd, wr_fd;
	bool rd_set, wr_set;
	bool wr_blocked;           /* a send left it unwritable: next writability forces an edge */

	/* Keepalive (SO_KEEPALIVE / TCP_KEEP*). */
	bool keepalive;
	unsigned keepidle_s, keepintvl_s, keepcnt;
	uint64_t last_rx_ms;
	unsigned keep_probes;

	/* The main timer of the connection: connect bound, pending TTL, linger,
	 * keepalive, carrier-failure grace. */
	struct progress_timer timer;
	/* The send-queue watchdog (core/timers.c): armed while work requests
	 * are outstanding; sq_progress_ms is the last send completion, or the post
	 * that found the queue empty. */
	struct progress_timer stall_timer;
	bool stall_armed;
	uint64_t sq_progress_ms;
	struct sdp_conn *pend_next; /* listener's pending list */
	/* Pending (server): the TTL, and the checks whether another process
	 * accepted the TCP connection (a pre-fork server's worker). */
	uint64_t pending_deadline_ms;
	unsigned pending_check_ms;
	uint64_t pending_accepted_ms; /* when sock_diag first saw it accepted (0: not) */
	bool pending_detached;     /* DETACH sent; the timer now bounds the client's hang-up */
};

/* Parameters of a client connect. */
struct conn_connect_params {
	const struct sockaddr *dst;
	socklen_t dst_len;
	int app_fd;                /* the app's socket; conn keeps its own dup */
	const struct sdp_policy *policy; /* copied */
	bool async;                /* non-blocking connect: the kernel connect is ours */
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
/* The app thread's blocking kernel connect finished: rc 0 or -errno. */
void conn_tcp_connected(struct sdp_conn *c, int rc);
/* True while the RDMA phase or the kernel connect is still in flight
 * (a second connect() gets EALREADY). */
bool conn_connect_in_progress(struct sdp_conn *c);

/* ---- server ---- */
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
/* Reaps completions now (the app thread's share of progress).  Call with
 * no other library lock held: it may call back into the owner. */
void conn_progress(struct sdp_conn *c);
/* Clears indicators whose condition is false (call before sleeping). */
void conn_prepare_wait(struct sdp_conn *c);
/* 0, or CONN_USE_TCP: the stream is on TCP, shut the kernel socket down. */
int conn_shutdown(struct sdp_conn *c, int how);
/* The socket's last fd is closing: flush, DisConn, free in the background
 * (bounded by SDPSHIM_LINGER_MS).  abort: SO_LINGER with l_linger 0.
 * Drops the owner's reference. */
void conn_app_close(struct sdp_conn *c, bool abort);
enum conn_phase conn_get_phase(struct sdp_conn *c);
enum sdp_reason conn_get_fail_reason(struct sdp_conn *c);
bool conn_is_server(const struct sdp_conn *c);
/* The address a client connected to (fixed at conn_connect_start). */
const struct sockaddr *conn_peer_addr(const struct sdp_conn *c);

/* SO_ERROR: returns and clears the pending error. */
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
bool conn_switch_wait(struct sdp_conn *c, enum sdp_reason reason, uint64_t deadline_ms);

/* In a forked child: the parent's progress thread, devices and rdma_cm
 * channel are not ours; start afresh when the child makes a channel. */
void conn_layer_atfork_child(void);

/* Sentinel from conn_send/conn_recv: the socket now uses kernel TCP. */
#define CONN_USE_TCP (-10000)
const char *conn_phase_name(enum conn_phase phase);

#endif
