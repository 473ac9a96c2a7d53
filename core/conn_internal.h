/* Functions shared by the core files that implement struct sdp_conn.
 * Callers hold c->lock unless a name says otherwise. */
#ifndef SDPSHIM_CONN_INTERNAL_H
#define SDPSHIM_CONN_INTERNAL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <time.h>

#include "core/conn_struct.h"
#include "core/geometry.h" /* CTRL_SLOTS, CTRL_SLOT_SIZE */
#include "core/wire.h"

/* wr_id = kind << 32 | index */
enum wr_kind {
	WR_RECV = 1, WR_SEND_DATA = 2, WR_SEND_CTRL = 3,
	WR_READ = 4,   /* receiver: RDMA READ of a SrcAvail */
	WR_WRITE = 5,  /* sender: RDMA WRITE into the peer's SinkAvail */
	WR_BIND = 6,   /* memory window bind */
	WR_INV = 7,    /* memory window invalidate */
	WR_PROBE = 8,  /* a zero-byte RDMA WRITE: is the peer's host there? (timers.c) */
};
#define WR_ID(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))
#define WR_KIND(id)      ((enum wr_kind)((id) >> 32))
#define WR_INDEX(id)     ((uint32_t)(id))

#define CTRL_BIT(mid) (1u << (mid))

static inline uint8_t *conn_ctrl_slot(const struct sdp_conn *c, uint32_t idx)
{
	return c->ctrl_mem + (size_t)idx * CTRL_SLOT_SIZE;
}

/* A carrier: how the stream moves in the channel's phase; conn_set_phase
 * picks it (phase.c).  channel_carrier (conn_io.c, with notify.c's
 * readiness) serves every phase but SWITCHING; switch_carrier (switch.c)
 * serves SWITCHING: kept bytes, then the kernel socket.  Called locked. */
struct conn_carrier {
	/* One step of recv or send: bytes so far, -errno, CONN_USE_TCP, or
	 * *again set: wait and step again. */
	ssize_t (*recv_step)(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			     size_t total, int flags, bool *again);
	ssize_t (*send_step)(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
			     size_t total, bool nonblock, int flags, bool *again);
	/* POLL* bits, as the kernel would report them. */
	unsigned (*poll_mask)(struct sdp_conn *c);
	/* What the readiness indicators stand for: each alone, or both in one pass. */
	bool (*readable)(struct sdp_conn *c);
	bool (*writable)(struct sdp_conn *c);
	void (*readiness)(struct sdp_conn *c, bool *readable, bool *writable);
	/* shutdown(how): 0, or CONN_USE_TCP (the owner shuts the kernel socket). */
	int (*shutdown)(struct sdp_conn *c, int how);
	/* FIONREAD. */
	uint64_t (*readable_bytes)(struct sdp_conn *c);
	/* SO_ERROR: the pending error, taken (reported once), 0, or
	 * CONN_USE_TCP: the kernel socket's (the owner asks it). */
	int (*take_error)(struct sdp_conn *c);
};
extern const struct conn_carrier channel_carrier;
extern const struct conn_carrier switch_carrier;
extern const struct conn_carrier held_carrier; /* HELD and CLIMB_HALF (climb.c) */
extern const struct conn_carrier drain_carrier; /* DRAINING (drain.c) */
/* The channel carrier's SO_ERROR, which the others begin with. */
int channel_take_error(struct sdp_conn *c);
/* A carrier's table from its functions, named PREFIX_recv_step and so on. */
#define CONN_CARRIER(prefix)                                                             \
	{                                                                                \
		.recv_step = prefix##_recv_step, .send_step = prefix##_send_step,        \
		.poll_mask = prefix##_poll_mask, .readable = prefix##_readable,          \
		.writable = prefix##_writable, .readiness = prefix##_readiness,          \
		.shutdown = prefix##_shutdown, .readable_bytes = prefix##_readable_bytes, \
		.take_error = prefix##_take_error,                                        \
	}

/* phase.c: the one writer of c->phase.  conn_phase_start sets the first
 * phase of a new channel; conn_set_phase makes a transition, and logs one
 * the table does not hold (debug builds assert). */
bool conn_phase_transition_ok(enum conn_phase from, enum conn_phase to);
void conn_phase_start(struct sdp_conn *c, enum conn_phase phase);
void conn_set_phase(struct sdp_conn *c, enum conn_phase to);
/* The phase as the connection's stats slot shows it (its `channel`), once
 * c->st is set; both calls above publish it. */
void conn_publish_phase(struct sdp_conn *c);

/* setup.c: allocation, QP and buffers, teardown */
struct sdp_conn *conn_alloc(bool is_server, const struct sdp_policy *policy);
int conn_setup_qp(struct sdp_conn *c, struct rdma_cm_id *id, uint32_t peer_buf_size,
		  uint16_t peer_buf_count, enum sdp_reason *reason);
int conn_setup_tx(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count);
/* The reason a failed setup gives the connection: resources for the
 * pinned-memory budget's refusal (-ENOBUFS), memlock for the kernel's. */
enum sdp_reason conn_setup_error_reason(int err);
/* "cannot set up WHAT: ...": a warning, or only a debug line for the
 * budget's refusal (the budget logs its first refusal itself). */
void conn_warn_setup_error(int err, const char *what);
void conn_post_all_recvs(struct sdp_conn *c);
/* A linked stream's rings (unpinned); idempotent.  0 or -ENOMEM. */
int conn_setup_linked_rx(struct sdp_conn *c);
int conn_repost_recv(struct sdp_conn *c, uint32_t slot);
/* Releases every RDMA resource; progress thread only; lock not held. */
void conn_destroy_resources(struct sdp_conn *c);
/* The same but the TCP socket (a held stream keeps it: climb.c). */
void conn_release_channel(struct sdp_conn *c);
/* Queues destruction on the progress thread (idempotent). */
void conn_schedule_destroy(struct sdp_conn *c);

/* notify.c: readiness indicators and owner callbacks */
void conn_update_readiness(struct sdp_conn *c, bool new_data);
void conn_signal_owner(struct sdp_conn *c, enum conn_event ev);
bool conn_readable_locked(const struct sdp_conn *c);
/* Wakes the threads blocked in recv so they look again (the channel
 * opened: a large blocking read may now offer a zero-copy sink). */
void conn_wake_readers(struct sdp_conn *c);
/* c locked: a thread is about to sleep in the kernel on c's eventfds (and
 * any write a deferral owes is made), or has woken. */
void conn_sleeper_add_locked(struct sdp_conn *c);
void conn_sleeper_drop_locked(struct sdp_conn *c);
void conn_settle_readable(struct sdp_conn *c);
bool conn_writable_locked(const struct sdp_conn *c);
/* The open channel's readiness (channel_carrier's; SWITCHING has its own). */
unsigned channel_poll_mask(struct sdp_conn *c);
bool channel_readable(struct sdp_conn *c);
bool channel_writable(struct sdp_conn *c);
void channel_readiness(struct sdp_conn *c, bool *readable, bool *writable);

/* tx.c */
uint32_t tx_credits(const struct sdp_conn *c);
void tx_note_awaited_sends(struct sdp_conn *c);
void tx_kick(struct sdp_conn *c);
void tx_queue_ctrl(struct sdp_conn *c, uint8_t mid);
bool tx_has_unposted(const struct sdp_conn *c);
/* Bytes wait for a credit of the peer's. */
bool tx_waits_for_credits(const struct sdp_conn *c);
/* A zero-byte RDMA WRITE on a channel of its own (timers.c's probe). */
int tx_post_probe(struct sdp_conn *c);
/* A work request on the channel's own QP (not a link's), counted for the
 * send-queue watchdog; what names it in the diagnostic if it fails. */
int tx_post_own(struct sdp_conn *c, struct ibv_send_wr *wr, const char *what);
void tx_free_acked(struct sdp_conn *c, uint32_t ack);
uint32_t tx_free_space(const struct sdp_conn *c);
size_t tx_append(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t skip, size_t len);
/* The run of kept send slots that ends at stream offset end_off, back from
 * the newest while each ends where the next begins: returns the offset of
 * its first byte, with its first slot and its payload bytes. */
uint64_t tx_kept_run(const struct sdp_conn *c, uint64_t end_off, uint32_t *first, size_t *payload);
/* No send slot is kept: the peer consumed every byte we sent. */
bool tx_all_consumed(const struct sdp_conn *c);
/* Forgets every slot (their bytes went another way: core/switch.c). */
void tx_drop_all(struct sdp_conn *c);

/* rx.c */
void rx_on_recv(struct sdp_conn *c, uint32_t slot, uint32_t byte_len);
/* A linked stream's message (msg: the link's buffer, valid during the call;
 * DATA is copied into the stream's own memory). */
void rx_on_link_message(struct sdp_conn *c, const uint8_t *msg, uint32_t len);
/* A linked stream's sink took the peer's WRITE (immediate: mseq's low 16 bits). */
void rx_on_link_write(struct sdp_conn *c, uint32_t byte_len, uint16_t mseq16);
/* Did DATA arrive since the last call?  Each receive's caller runs
 * cq.c's after_completions, which asks once and forces the readable edge. */
bool rx_take_new_data(struct sdp_conn *c);
/* A receive taken by the peer's RDMA WRITE with immediate (imm = mseq). */
void rx_on_write_imm(struct sdp_conn *c, uint32_t slot, uint32_t byte_len, uint32_t mseq);
void rx_maybe_update_credits(struct sdp_conn *c);
/* An entry was consumed outside the copy path (a SrcAvail READ and
 * answered): return its place in the ring and advance the ack. */
void rx_entry_consumed(struct sdp_conn *c);
/* Copies unread payload into iov (MSG_PEEK: without consuming). */
size_t rx_copy_out(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		   size_t len, bool peek);
/* The stream offset delivered to the app: what arrived minus what is
 * queued (DATA payloads, and SrcAvail bytes not consumed). */
uint64_t rx_delivered_offset(const struct sdp_conn *c);
/* The received bytes not read yet that are here (DATA payloads, then the
 * bytes a READ staged), in stream order, in a malloc'd copy of *len bytes;
 * NULL if there are none, or no memory. */
uint8_t *rx_copy_unread(const struct sdp_conn *c, size_t *len);
/* Forgets every queued byte (they went another way: core/switch.c). */
void rx_drop_unread(struct sdp_conn *c);

/* conn_io.c: waiting.  conn_wait is called locked; it sleeps unlocked on
 * the readiness eventfd (0 changed, -EAGAIN timeout, -EINTR signal). */
int conn_wait(struct sdp_conn *c, bool for_write, int timeout_ms, uint64_t start_us);
uint64_t conn_now_us(void);

/* cq.c: returns the number of completions handled (a linked stream's
 * completions come from its link: cq_poll only moves it along). */
int cq_poll(struct sdp_conn *c);
/* cq_poll, unless a linked stream has had nothing since the last one. */
int cq_poll_if_due(struct sdp_conn *c);
/* c locked: wakes every thread waiting on c->cond, one in the middle of
 * conn_cond_wait_counted included (it drops c's lock before it sleeps). */
static inline void conn_wake_waiters(struct sdp_conn *c)
{
	c->wakes++;
	pthread_cond_broadcast(&c->cond);
}
/* c locked: pthread_cond_(timed)wait on c->cond (until NULL: untimed) as a
 * thread asleep on readiness (app_wake.c), so that no CQ arm is put off
 * while it waits for the link's messages.  Returns at once if c was woken
 * or handed completions while its lock was down. */
void conn_cond_wait_counted(struct sdp_conn *c, const struct timespec *until);
/* c->cond, whose timed waits read CLOCK_MONOTONIC: a step of the wall
 * clock neither stretches a wait's slice nor cuts it short. */
static inline void conn_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &attr);
	pthread_condattr_destroy(&attr);
}
/* The same, for at most ms from now. */
static inline void conn_cond_wait_ms(struct sdp_conn *c, uint64_t ms)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(ms / 1000);
	until.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	conn_cond_wait_counted(c, &until);
}
/* One slice of a wait that ends at deadline_ms (now: the time it is): at
 * most 20 ms, so that a caller's loop looks at its condition again even
 * without a broadcast. */
static inline void conn_cond_wait_slice(struct sdp_conn *c, uint64_t now, uint64_t deadline_ms)
{
	conn_cond_wait_ms(c, deadline_ms - now < 20 ? deadline_ms - now : 20);
}
/* A linked stream's completion, its wr_id its own again (link.c). */
void cq_on_stream_wc(struct sdp_conn *c, const struct ibv_wc *wc);
/* A linked stream's work that never went (stopped): settled as flushed. */
void cq_on_stream_flushed(struct sdp_conn *c, uint64_t wr_id);
/* After the link handed a linked stream a message: what cq_poll does after
 * completions (sends, orphan check, readiness). */
void cq_stream_progress(struct sdp_conn *c);

/* close.c: one function per event */
void close_ev_app_shutdown_wr(struct sdp_conn *c);
void close_ev_tx_flushed(struct sdp_conn *c);
void close_ev_peer_disconn(struct sdp_conn *c);
void close_ev_abort(struct sdp_conn *c, int err, bool send_abort);
void close_ev_carrier_failed(struct sdp_conn *c, int err, const char *why);
/* The app shut down writing (or closed), whatever the peer did. */
bool close_app_shut_writing(const struct sdp_conn *c);

/* cm.c: the process-wide rdma_cm event channel */
int cm_channel_ensure(struct rdma_event_channel **out);
/* The connection parameters of every connect and accept: our private data
 * and the transport's retry counts. */
void cm_conn_param(struct rdma_conn_param *param, const void *private_data, uint8_t len);
/* Applies SDPSHIM_ACK_TIMEOUT (if set) to id before connect or accept. */
void cm_apply_ack_timeout(struct rdma_cm_id *id);
/* rdma_resolve_route within the connect bound, inside the fork fence. */
int cm_resolve_route(struct rdma_cm_id *id);
/* cm_client.c / cm_server.c: event handlers */
void cm_client_event(struct sdp_conn *c, struct rdma_cm_event *ev);
void cm_server_conn_event(struct sdp_conn *c, struct rdma_cm_event *ev);
void cm_listener_event(struct sdp_listener *l, struct rdma_cm_event *ev);
/* cm_server.c: the timer of an unmatched server channel: DETACH it once
 * another process accepted its TCP connection or its TTL ran out. */
void pending_on_timer(struct sdp_conn *c);
/* close.c: an orphaned channel (app closed) whose bytes are all consumed
 * by the peer, or which ended, is freed. */
void close_check_orphan(struct sdp_conn *c);

/* bind.c: the binding handshake on the TCP connection (docs/trust.md) */
bool bind_make_nonce(uint8_t nonce[SDP_NONCE_SIZE]);
/* Server: accept() matched the channel (phase ATTACHING). */
void bind_server_begin(struct sdp_conn *c);
/* Server: the client's COMMIT arrived. */
void bind_server_on_commit(struct sdp_conn *c);
/* Server: proven and established; the channel opens (ATTACH queued). */
void bind_server_open(struct sdp_conn *c);
/* Client: the kernel connect completed (phase becomes AWAIT_ATTACH). */
void bind_client_begin(struct sdp_conn *c);
void bind_client_on_attach(struct sdp_conn *c);
void bind_client_on_detach(struct sdp_conn *c);
/* Either end, while binding: the TCP socket is readable (or urgent). */
void bind_on_tcp_ready(struct sdp_conn *c);
void bind_on_timer(struct sdp_conn *c);
/* The app closed as the channel binds, and its close armed the linger
 * bound: the timer (there is one) comes back at the handshake's own bound
 * if that is sooner, so bytes waiting for an ATTACH that never comes reach
 * TCP then, not a linger bound later. */
void bind_keep_bound(struct sdp_conn *c);
void bind_on_carrier_failed(struct sdp_conn *c);
/* The peer sent what an unbound channel may not carry. */
void bind_on_violation(struct sdp_conn *c, const char *what);
/* Falls back to TCP (the server DETACHes its channel's peer first). */
void bind_fallback(struct sdp_conn *c, enum sdp_reason reason);
/* cm_server.c: queues ATTACH (or holds it: SDPSHIM_DEBUG_ATTACH_DELAY_MS). */
void queue_attach(struct sdp_conn *c);
/* cm_server.c: a pending channel is given up (its peer left or lied). */
void pending_drop(struct sdp_conn *c);
/* cm_server.c: an OPEN for stream idx arrived on a link of listener l
 * from peer; answered on the link (OPEN_ACK with a pending channel, or
 * OPEN_NAK with the reason). */
struct sdp_open;
/* client_nonce: a committed OPEN's (OPEN_COMMIT), else NULL. */
void cm_server_open_stream(struct sdp_listener *l, struct sdp_link *link, uint16_t idx,
			   const struct sdp_open *o, const struct sockaddr *peer,
			   const uint8_t *client_nonce);
/* cm_server.c: rejects a connect request that has no channel. */
void cm_reject_request(struct rdma_cm_id *id, uint8_t code);
/* A linked stream lost its carrier (the peer's RELEASED, or its link
 * failed): what DISCONNECTED is to a channel with its own QP.  A pending
 * server stream leaves its listener's table; a client stream not opened
 * yet falls back with reason `unopened`. */
void conn_stream_lost(struct sdp_conn *c, enum sdp_reason unopened, const char *why);
/* cm_client.c: the server answered a linked stream's OPEN. */
void client_stream_opened(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count,
			  const uint8_t nonce[SDP_NONCE_SIZE]);
void client_stream_refused(struct sdp_conn *c, uint8_t code);
/* cm_client.c: a committed OPEN went out: the kernel connect goes ahead,
 * and the answer is awaited in CONN_TCP_CONNECTING. */
void client_stream_open_committed(struct sdp_conn *c);
/* Does c wait for the server's answer to its OPEN? */
bool client_stream_awaits_answer(const struct sdp_conn *c);
/* The fallback reason for a server's reject code (0: no sdpshim there),
 * and for a REJECTED event's private data. */
enum sdp_reason cm_reject_reason(uint8_t code);
enum sdp_reason cm_event_reject_reason(const struct rdma_cm_event *ev);

/* budget.c: what unattached (pending) channels may hold, per source address
 * (c->tuple.src_addr) and per process.  take: true if the channel fits
 * (then it is counted until pending_budget_give). */
bool pending_budget_take(struct sdp_conn *c);
void pending_budget_give(struct sdp_conn *c);

/* timers.c: the connection's one timer, by phase */
void conn_on_timer(struct sdp_conn *c);
/* Counts a posted work request; the send-queue watchdog starts with the
 * first on an empty queue. */
void conn_note_post(struct sdp_conn *c);
void conn_stall_timer_fired(void *arg);
void conn_probe_timer_fired(void *arg);
/* A channel of its own whose sender waits for credits: watch the peer. */
void conn_probe_arm(struct sdp_conn *c);
void conn_arm_timer(struct sdp_conn *c, unsigned ms_from_now);
/* The same at an absolute deadline (progress_deadline_ms()'s clock). */
void conn_arm_timer_at(struct sdp_conn *c, uint64_t at_ms);
/* The peer's DisConn arrived on an open stream: our next message acknowledges
 * it, or a credit update does within DISCONN_ACK_DELAY_MS. */
void conn_ack_disconn_later(struct sdp_conn *c);

/* tcp_watch.c: the library's dup of the TCP socket, watched by the progress
 * thread (connect completion, FIN/RST evidence, a server that chose TCP). */
void tcp_watch_start(struct sdp_conn *c, uint32_t events);
void tcp_drain_start(struct sdp_conn *c);
/* Sends drain_buf from drain_off without blocking: 0 once all of it went,
 * EAGAIN while the socket is full, else the errno of the failure. */
int tcp_drain_send(struct sdp_conn *c);
/* The payload bytes of send slots [first, end), copied to dst unless NULL. */
size_t tx_slots_payload(const struct sdp_conn *c, uint32_t first, uint32_t end, uint8_t *dst);
/* Resets the kernel TCP connection (connect AF_UNSPEC sends RST). */
void tcp_send_reset(struct sdp_conn *c);
/* recv(MSG_PEEK | MSG_DONTWAIT) on it, EINTR retried: n, or -1 and errno.
 * A failure other than EAGAIN took the kernel's pending error; the first
 * is kept in tcp_taken_err, for the app (a move to TCP reports it). */
ssize_t tcp_peek(struct sdp_conn *c, void *buf, size_t len);
/* The app closed a DRAINING stream: an abortive close resets the TCP
 * connection now; else the drain goes on in the background while it moves,
 * and a drain that takes no byte for SDPSHIM_LINGER_MS is reset (timers.c
 * calls tcp_drain_on_timer). */
void tcp_drain_on_close(struct sdp_conn *c, bool abort);
void tcp_drain_on_timer(struct sdp_conn *c);

/* tcp_ask.c: the kernel socket asked without waiting (0 without one).
 * tcp_poll_now: its poll() bits for events; tcp_unread_bytes: FIONREAD;
 * tcp_unsent_bytes: SIOCOUTQ; tcp_take_error: the error our own peek
 * took (tcp_taken_err), once, else CONN_USE_TCP (the kernel's, asked on
 * the app's fd). */
unsigned tcp_poll_now(const struct sdp_conn *c, short events);
uint64_t tcp_unread_bytes(const struct sdp_conn *c);
uint64_t tcp_unsent_bytes(const struct sdp_conn *c);
int tcp_take_error(struct sdp_conn *c);

/* switch.c: moving an open stream to TCP.  keep_local: bytes received
 * over RDMA and not read yet stay here and are read first (else they are
 * dropped and the peer resends them).  Returns false if the stream cannot
 * move (no TCP socket, reset, or nothing left to move). */
bool switch_start(struct sdp_conn *c, enum sdp_reason reason, bool keep_local, bool by_peer);
void switch_on_tcp_ready(struct sdp_conn *c, uint32_t events);
/* Plain TCP once both records are through, nothing is kept here and no
 * app thread is inside a zero-copy operation. */
void switch_maybe_finish(struct sdp_conn *c);
void switch_on_timer(struct sdp_conn *c);
/* climb.c: a stream held on TCP after a failover, and its way back. */
/* switch_start: may this stream be held (its TCP I/O done here)? */
void climb_note_switch(struct sdp_conn *c, enum sdp_reason reason);
/* The stream will not climb (it falls back for good). */
void climb_not_eligible(struct sdp_conn *c);
/* The peer's SWITCH record says it forked: this end waits for its child. */
void climb_peer_forked(struct sdp_conn *c);
/* The switch is through: HELD instead of FALLBACK?  True if held. */
bool climb_hold(struct sdp_conn *c);
/* HELD -> FALLBACK (fork, exec, shutdown, a refusal). */
void climb_give_up(struct sdp_conn *c, const char *why);
/* The app closed a HELD stream. */
void climb_closed(struct sdp_conn *c);
void climb_on_timer(struct sdp_conn *c);
/* Progress thread: an RDMA device came (a uevent): held streams try now,
 * and listeners whose device went listen again now (cm_server.c). */
void climb_device_added(void);
void cm_server_device_added(void);
void climb_on_tcp_ready(struct sdp_conn *c);
/* The link of an attempt (HELD) or of the new channel (CLIMB_HALF) failed. */
void climb_link_lost(struct sdp_conn *c, const char *why);
void climb_half_lost(struct sdp_conn *c, const char *why);
/* The held stream's own TCP I/O, non-blocking, counting its offsets
 * (SWITCHING uses them too once its records are through). */
ssize_t climb_tcp_recv(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
		       size_t total, int flags, bool *again);
ssize_t climb_tcp_send(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t done,
		       size_t total, int flags, bool *again);
/* SDPSHIM_DEBUG_FAIL_AFTER: fail this channel's QP once it sent that much. */
void switch_debug_maybe_fail(struct sdp_conn *c);
void qp_force_error(struct sdp_conn *c);

/* cm_client.c: IPv4 as IPv4-mapped IPv6, so tuples compare either way. */
void sockaddr_to_tuple_addr(const struct sockaddr *sa, uint8_t out[16], uint16_t *port);

/* Fails the connection before attach: the socket falls back to TCP (not
 * one whose handshake ended the stream, stream_ended: that one ends, as
 * below). */
void conn_fallback(struct sdp_conn *c, enum sdp_reason reason);
/* A stream that ended with an error (close_ev_abort) is done: DEAD (so
 * nothing late opens it, or moves it to TCP), its unsent bytes dropped,
 * its waiters and pollers told, its resources released in the background. */
void conn_end_aborted(struct sdp_conn *c);

void conn_lock(struct sdp_conn *c);
/* Unlocks and delivers any owner event raised while locked. */
void conn_unlock(struct sdp_conn *c);

#endif
