/* The channel itself: struct sdp_conn, private to core/.  Only the files of core/
 * and the tests that model the data path include this header; the preload
 * sees an opaque struct through core/conn.h.  The fields are grouped by the
 * file that owns them (writes them); others may read them under c->lock. */
#ifndef SDPSHIM_CONN_STRUCT_H
#define SDPSHIM_CONN_STRUCT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/conn.h"
#include "core/progress.h"
#include "core/switch_reader.h"
#include "core/wire.h"

struct rdma_cm_id;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;
struct ibv_mw;
struct sdp_dev;
struct mrc_entry;
struct conn_carrier;
struct sdp_link;

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

enum { ZC_WIN_SRC, ZC_WIN_SINK, ZC_WINDOWS };

struct zc_window {
	struct ibv_mw *mw;
	uint32_t rkey;
	bool bound, busy; /* bound now / a bind or invalidate in flight */
};

/* Moving the open stream to TCP (core/switch.c owns all of it). */
struct conn_switch {
	enum sdp_reason reason;
	bool started;
	bool by_peer;              /* the peer's record started it: take its reason */
	bool tx_done;              /* our record and resend are in the kernel socket */
	bool shut_wr;              /* the app shut down writing: SHUT_WR after them */
	bool peer_done;            /* the peer's record read, its duplicates dropped */
	bool local_provisional;    /* local is dropped when the peer's record arrives */
	int peer_err;              /* TCP error seen while reading it (reported once) */
	struct switch_reader reader; /* the peer's record, then its resend we have */
	uint64_t rx_have;          /* stream bytes this end has: delivered + kept */
	uint8_t *local;            /* received over RDMA, not read yet (kept) */
	size_t local_len, local_off;
};

/* The climb back to RDMA of a stream a failover moved to TCP (climb.c
 * owns it all; docs/upgrade.md).  The client starts it; each step has a
 * bound (the main timer). */
enum climb_step {
	CLIMB_IDLE,      /* held; a retry may be armed */
	CLIMB_DIALING,   /* client: on a link, REQ sent once it is up; CHAL awaited */
	CLIMB_CHAL_SENT, /* server: CHAL sent, PROVE awaited */
	CLIMB_CUT_SENT,  /* client: PROVE sent and its writes go on the channel; ACK awaited */
	CLIMB_DONE,      /* both cuts known */
};

#define CLIMB_KEY_SIZE 32
#define CLIMB_CUT_UNKNOWN UINT64_MAX

struct conn_climb {
	enum climb_step step;
	bool eligible;             /* held with a key (a bound stream, one process) */
	bool refused;              /* the peer or a rule said no: it stays on TCP */
	bool registered;           /* in climb.c's list of held streams */
	bool released;             /* the last channel's resources are gone: it may dial */
	uint8_t key[CLIMB_KEY_SIZE];
	uint8_t nonce_i[SDP_NONCE_SIZE], nonce_r[SDP_NONCE_SIZE];
	bool initiator;            /* this end dials and asks (a failover's client, a forked
				    * child); the other waits for its REQ */
	bool via_rdv;              /* it dials the peer's rendezvous port (a forked child) */
	struct sockaddr_storage peer_rdv; /* the peer's rendezvous address (port 0: none) */
	uint64_t tcp_rx_off;       /* stream offset of the next byte read from TCP */
	uint64_t rx_cut;           /* CLIMB_HALF: reads take TCP up to here (or UNKNOWN) */
	uint64_t tx_cut;           /* the initiator's cut, as its PROVE named it */
	bool let_go_said;          /* the log has said once that the peer let an attempt go */
	unsigned attempts;         /* since the stream was held */
	unsigned backoff_ms;
	struct sdp_conn *held_next; /* climb.c's list */
};

struct sdp_conn {
	/* ---- Life and state (setup.c allocates; notify.c locks and tells the
	 * owner; phase.c alone writes phase and carrier). */
	int cm_kind;            /* CM_KIND_CONN: first, for rdma_cm id contexts */
	pthread_mutex_t lock;
	pthread_cond_t cond;    /* phase changes (connect waits on it) */
	_Atomic int refs;
	enum conn_phase phase;
	const struct conn_carrier *carrier; /* the stream's steps in this phase */
	bool is_server;
	struct sdp_policy policy; /* the path decision's: zero-copy threshold, connect bound */
	void *owner;
	const struct conn_owner_ops *owner_ops;
	uint32_t owner_events;  /* bit per enum conn_event raised under the lock */
	struct sdp_conn_stats *st;
	int error;              /* pending socket error (errno), reported once */
	int hard_error;         /* error that ends the stream (ECONNRESET, EPIPE...) */
	int tcp_taken_err;      /* the kernel socket's error that our own peek took
				 * (tcp_peek): a move to TCP reports it */
	bool stream_ended;      /* it ended with an error before it settled (its TCP
				 * connection failed as it bound or drained, or we
				 * reset it): DEAD, never a fallback */
	enum sdp_reason fail_reason;

	/* ---- Closing (close.c; conn_io.c for the app's shutdown and close,
	 * setup.c for destruction). */
	enum conn_close_state close_state;
	bool app_closed;        /* no fd names it any more: linger, then free */
	bool destroy_queued;
	bool lingering;         /* counted in progress_linger_*() until destroyed */
	bool rd_shut;           /* shutdown(SHUT_RD): reads see EOF */
	bool carrier_dead;      /* QP or cm id failed */
	bool unbound_violated;  /* its peer broke the protocol before it was bound: the channel
				 * is not used, and nothing more the peer sends is read (rx.c) */
	bool fork_shared;       /* another process holds the socket: a failover keeps no byte here */
	bool qp_in_error;       /* we moved the QP to the error state: no remote access */
	bool carrier_reaping;   /* close_ev_carrier_failed takes in the completions first */
	const char *carrier_why; /* the first sign of the failure (static text), for the log */
	int abort_errno;

	/* ---- Client connect (cm_client.c). */
	bool async_connect;     /* the progress thread issues the kernel connect */
	uint64_t connect_deadline_ms; /* client: the whole RDMA attempt ends by then */
	struct sockaddr_storage peer_addr;
	socklen_t peer_addr_len;

	/* ---- Binding to the app's TCP connection (bind.c, docs/trust.md). */
	struct sdp_tuple tuple;
	enum conn_bind bind;
	uint8_t nonce_local[SDP_NONCE_SIZE]; /* server: ours, in the HelloAck; client: ours, in COMMIT */
	uint8_t nonce_peer[SDP_NONCE_SIZE];  /* client: the server's (echoed in our PROOF) */
	uint64_t bind_deadline_ms;    /* the handshake's current bound */
	bool committed;         /* server: the client's COMMIT arrived */
	bool peer_gave_up;      /* server: the client DETACHed (it uses TCP) */
	uint32_t detach_reason;

	/* ---- Server: pending and attaching (cm_server.c; budget.c). */
	struct sdp_listener *lsn; /* the listener it arrived on */
	struct sdp_conn *pend_next; /* listener's pending list */
	bool budget_held;       /* counted in the pending budget (budget.c) */
	bool budget_stream;     /* ... in the budget of streams on links */
	/* The TTL, and the checks whether another process accepted the TCP
	 * connection (a pre-fork server's worker). */
	uint64_t pending_deadline_ms;
	unsigned pending_check_ms;
	uint64_t pending_accepted_ms; /* when sock_diag first saw it accepted (0: not) */
	bool pending_detached;     /* DETACH sent; the timer now bounds the client's hang-up */
	/* Our ATTACH is queued or posted and has not completed, so the client
	 * may not know the channel is attached: the stream must not move to TCP
	 * until it has (switch.c). */
	bool attach_unconfirmed;
	uint32_t attach_idx;       /* its control slot, once posted */
	bool attach_posted;
	bool attach_held;          /* SDPSHIM_DEBUG_ATTACH_DELAY_MS: queued when the timer fires */

	/* ---- The kernel TCP socket (tcp_watch.c). */
	int tcp_fd;             /* the library's own dup of the TCP socket, or -1 */
	struct progress_source tcp_src;
	bool tcp_watched;
	/* Bytes moving to TCP after a fallback (DRAINING phase), or our SWITCH
	 * record and resend (SWITCHING, switch.c). */
	uint8_t *drain_buf;
	size_t drain_len, drain_off;
	int64_t drain_taken_seen; /* what the TCP peer had taken at the last linger look */
	uint64_t drain_look_ms;   /* the next linger look (progress_now_ms clock) */

	/* ---- Verbs and rdma_cm (setup.c; cq.c counts completions). */
	struct rdma_cm_id *cm_id;
	struct sdp_dev *dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t max_inline;
	uint32_t sq_depth;
	uint32_t sq_outstanding;
	bool established;       /* cm_client.c / cm_server.c: ESTABLISHED seen */

	/* ---- The link the stream rides (link.c), or NULL: the channel has its
	 * own QP (cm_id, cq, qp above).  A linked stream's bytes wait in
	 * unpinned memory: rx_heap holds a DATA message's copy per ring slot
	 * (rx.c), tx_heap a send slot's bytes, allocated as it fills (tx.c). */
	struct sdp_link *link;
	uint16_t link_idx;
	bool link_stopped;        /* its traffic on the link ended (qp_force_error) */
	bool link_fenced;         /* its resources are going: the link hands it nothing more */
	bool link_open_sent;      /* client: its OPEN went on the link */
	/* client, a committed OPEN (OPEN_COMMIT): in CONN_TCP_CONNECTING, the
	 * server has not answered yet; the kernel connect finished first. */
	bool open_unanswered;
	bool tcp_connected_early;
	bool open_committed;      /* client: its OPEN was an OPEN_COMMIT (it carried the nonce) */
	bool kernel_connect_issued; /* client, non-blocking: its SYN went (ours to send) */
	bool answer_first;        /* client: never a committed OPEN (conn_connect_params) */
	uint64_t open_send_seq;   /* client: the committed OPEN's send number on its link, 0: none */
	uint8_t **rx_heap;
	uint8_t **tx_heap;
	uint8_t *ctrl_mem;        /* where control messages are built (CTRL_SLOTS of them) */
#define SDP_CONN_HAS_CTRL_MEM 1

	/* ---- Receive side (rx.c): our buffers, filled by the peer's SENDs. */
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
	uint32_t rx_payload_ack;  /* last consumed message that carried bytes (DATA, SrcAvail) */
	uint64_t rx_bytes_ready;
	bool rx_new_data;         /* DATA arrived since the indicators last heard (rx_take_new_data) */
	bool rx_eof;
	bool peer_starving;

	/* ---- Send side (tx.c): slots mirroring the peer's buffers, kept until
	 * acked.  [tail, posted) posted and unacked, [posted, head) filled,
	 * unposted; slot head-1 may still take bytes while it is unposted. */
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

	/* ---- Zero-copy (zcopy.c, zc_window.c, zc_read.c, zc_write.c).  Two
	 * windows, one per direction (our SrcAvail, our SinkAvail), each bound
	 * to one range per transfer. */
	uint64_t tx_stream_off;    /* bytes the app handed to the stream */
	uint64_t rx_stream_off;    /* bytes the peer put in the stream, as queued here */
	struct zc_window win[ZC_WINDOWS];
	struct zc_src src;
	struct zc_read rd;
	struct zc_sink sink;
	uint8_t zc_nb_backoff;     /* non-blocking writes to copy before trying zero-copy again */
	bool zc_interrupted;       /* the last zero-copy send was cut short by a signal or timeout */
	bool zc_writer_waits;      /* a blocking zero-copy writer waits for the bytes queued ahead
				    * of it to leave: writable means "a SrcAvail may go" (notify.c) */
	bool sink_voided;          /* our last sink was given up unanswered, at: */
	uint64_t sink_void_off;
	struct zc_peer_sink psink;
	bool write_active;         /* our RDMA WRITE into the peer's sink */
	bool wr_unconfirmed;       /* our RDMA WRITE with immediate may not have landed */
	bool src_cancel_pending;   /* the peer's SrcAvailCancel waits for our READ */
	/* Values the pending answers carry. */
	uint32_t rd_compl_bytes, wr_compl_bytes;
	uint64_t rd_compl_off, sink_ack_off;
	uint8_t *stage;            /* staging buffer for READs nobody waits for */
	struct ibv_mr *stage_mr;
	uint32_t stage_len, stage_off, stage_fill;
	int rx_waiters;            /* threads blocked in recv (they READ directly; conn_io.c) */
	bool rx_wants_open;        /* one of them found the channel still binding: the channel
				    * reads as readable once open, so it wakes and may offer
				    * its buffer as a sink (conn_io.c, notify.c) */
	int zc_threads;            /* app threads inside a zero-copy operation */

	/* ---- Moving the open stream to TCP (switch.c). */
	struct conn_switch sw;
	bool write_rolled_back;    /* the switch took our unconfirmed WRITE's bytes back */
	bool debug_failed;         /* SDPSHIM_DEBUG_FAIL_AFTER fired */

	/* ---- The climb back to RDMA (climb.c). */
	struct conn_climb climb;

	/* ---- Readiness indicators (notify.c): level-triggered eventfds. */
	int rd_fd, wr_fd;
	uint64_t serial;           /* unique in the process: tells its eventfds from later ones */
	bool rd_set, wr_set;
	bool wr_blocked;           /* a send left it unwritable: next writability forces an edge */
	/* Deferred indicators: an app thread that answers readiness itself
	 * (epoll_wait on the one set that watches the channel) is told
	 * instead of the eventfd being written; the write is owed until the
	 * condition is false again or a kernel waiter needs it. */
	bool rd_owed, wr_owed;
	unsigned kernel_sleepers;  /* threads asleep in the kernel on the indicators */
	const void *watch_set;     /* the set that watches the channel alone, none, or NULL */
	void *watch_cookie;        /* the owner's record of that watch */
	unsigned completions_seen; /* completions and link messages handled (after_completions) */
	unsigned wakes; /* conn_wake_waiters calls: a counted wait's look between its checks */

	/* ---- Timers (timers.c). */
	/* Keepalive (SO_KEEPALIVE / TCP_KEEP*; set by conn_io.c). */
	bool keepalive;
	unsigned keepidle_s, keepintvl_s, keepcnt;
	uint64_t last_rx_ms;
	unsigned keep_probes;
	/* The peer's DisConn waits for our next message to be acknowledged,
	 * or for the main timer (DISCONN_ACK_DELAY_MS) to send a credit update. */
	bool disconn_ack_owed;
	/* The main timer of the connection: connect bound, pending TTL, linger,
	 * keepalive, the delayed ack of a DisConn, carrier-failure grace. */
	struct progress_timer timer;
	/* The send-queue watchdog: armed while work requests are outstanding;
	 * sq_progress_ms is the last send completion, or the post that found
	 * the queue empty. */
	struct progress_timer stall_timer;
	bool stall_armed;
	/* A channel of its own whose sender waits for credits: the liveness
	 * probe's timer, and the completions seen when it was armed. */
	struct progress_timer probe_timer;
	bool probe_armed;
	unsigned probe_mark;
	unsigned wcs_seen; /* work completions taken in (after_completions): what the probe watches */
	uint64_t sq_progress_ms;
};

#endif
