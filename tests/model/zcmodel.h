/* A model of everything around one connection's data path, for unit tests
 * and the stateful fuzzer of the receive/zero-copy state machine.
 *
 * The real core files that carry the data path (zcopy.c zc_*.c rx.c tx.c
 * cq.c conn_io.c close.c notify.c timers.c wire.c config.c log.c) are linked
 * unchanged; this model replaces what lies below and beside them:
 *  - verbs (zcm_verbs.c): a QP with a FIFO send queue whose work requests
 *    the driver executes and completes one at a time, a FIFO of posted
 *    receives, a CQ, memory regions and memory windows, and the error state
 *    (every outstanding and new work request is flushed, no remote access
 *    succeeds);
 *  - the peer (zcm_peer.c): an sdpshim end scripted by the caller, which may
 *    lie.  It sends messages, exposes windows over its own pattern memory,
 *    RDMA-reads and -writes our windows, and checks everything we send it;
 *  - the app (zcm_app.c): send/recv calls through conn_send/conn_recv on a
 *    second thread; the core's waits (conn_wait's poll, the condition waits
 *    of zc_window.c) hand control back to the driver, so a blocked call runs
 *    peer actions and completions, and time is a fake clock;
 *  - the rest (zcm_stubs.c): registration cache, devices, progress thread,
 *    timers, switch and bind hooks, libc clock.
 * Invariants are checked after every step; a violation is a "finding"
 * (recorded for unit tests, abort() in the fuzzer).
 *
 * Only one thread runs at a time (a baton): the driver (the caller: test
 * or fuzzer, acting as peer, network and progress thread) or the app. */
#ifndef SDPSHIM_TESTS_ZCMODEL_H
#define SDPSHIM_TESTS_ZCMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "core/wire.h"

struct sdp_conn;

/* Geometry of the modelled connection (both ends alike). */
#define ZCM_BUF_SIZE    4096u
#define ZCM_BUF_COUNT   8u
#define ZCM_ZC_THRESH   65536u
#define ZCM_PAYLOAD_MAX (ZCM_BUF_SIZE - 16u)
/* A call with a finite timeout (or a signal) must return this long (model
 * time) after it: longer is an "unbounded wait" finding. */
#define ZCM_WAIT_BOUND_MS 120000u

/* Stream bytes are 7-bit patterns of their offset (one per direction):
 * a table of a prime length, rotated by 7 more for every lap, so no shift
 * of the stream reproduces it.  Canaries in app buffers have the top bit
 * set, so no byte the peer wrote ever equals one. */
#define ZCM_DIR_TO_US   0u /* the peer's stream, which our app receives */
#define ZCM_DIR_TO_PEER 1u /* our app's stream, which the peer receives */
uint8_t zcm_pattern(uint64_t off, unsigned dir);
void zcm_pattern_fill(uint8_t *dst, uint64_t off, size_t n, unsigned dir);
/* Index of the first byte of b that is not the stream's at off, or n. */
size_t zcm_pattern_mismatch(const uint8_t *b, uint64_t off, size_t n, unsigned dir);
void zcm_canary_fill(uint8_t *dst, size_t n);
/* Index of the first canary-like byte (top bit set) in b, or n. */
size_t zcm_canary_find(const uint8_t *b, size_t n);

/* ------------------------------------------------------------ lifecycle */

struct zcm_opts {
	bool fuzzing;          /* a finding aborts (libFuzzer reports it) */
	bool quiet;            /* no core log lines */
	unsigned answer_ms;    /* SDPSHIM_ZCOPY_ANSWER_MS (0: the default) */
	unsigned nb_wait_ms;   /* SDPSHIM_ZCOPY_NB_WAIT_MS (0: the default) */
};
/* Fresh model and connection: OPEN, receives posted, credits full. */
struct sdp_conn *zcm_open(const struct zcm_opts *opts);
/* Ends any call still blocked (abandoned) and frees everything. */
void zcm_close(void);
struct sdp_conn *zcm_conn(void);

/* Findings since zcm_open, one per line; "" if none. */
const char *zcm_findings(void);
int zcm_finding_count(void);
void zcm_finding(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Optional trace of model steps on stderr (ZCM_TRACE=1). */
void zcm_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------------- time */

uint64_t zcm_now_ms(void);
/* Moves the clock forward, firing timers and expiring the app's waits on
 * the way (settling after each). */
void zcm_advance(unsigned ms);

/* ------------------------------------------------------------- the app */

enum zcm_call_kind { ZCM_RECV, ZCM_SEND };
struct zcm_call {
	enum zcm_call_kind kind;
	size_t len;
	int flags;             /* MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT, MSG_TRUNC */
	bool nonblock;
	int timeout_ms;        /* SO_RCVTIMEO/SO_SNDTIMEO; -1: none */
	int signal_after_ms;   /* a signal interrupts the wait then; -1: none */
};
/* Starts a call on the app thread; returns once it returned or blocked. */
void zcm_app_start(const struct zcm_call *call);
bool zcm_app_busy(void);
/* Runs the network (every send-queue request executed and completed in
 * order; the peer as the caller left it) and time until the call returns,
 * at most ZCM_WAIT_BOUND_MS past its timeout or signal; then a finding
 * and the call is abandoned.  Returns the call's result. */
ssize_t zcm_app_finish(void);
/* The result of the last call (valid once it returned). */
ssize_t zcm_app_result(void);
/* While held, the driver never resumes the app (the scheduler delays it). */
void zcm_app_hold(bool hold);
/* Convenience: start + finish. */
ssize_t zcm_app_do(const struct zcm_call *call);
/* Stream offsets the app reached. */
uint64_t zcm_app_rx_off(void);
uint64_t zcm_app_tx_off(void);
/* FIONREAD-like check: conn_readable_bytes() never exceeds the bytes the
 * peer put in the stream that the app has not read. */
void zcm_app_check_readable(void);

/* ------------------------------------------------------ driver: network */

/* Lets the progress thread handle completions and the app run while its
 * wait is satisfied, until nothing changes. */
void zcm_settle(void);
/* Send-queue requests posted and not executed, of one opcode (-1: any). */
int zcm_sq_unexecuted(int opcode);
/* Executes the first unexecuted request (its remote effect); completion
 * comes later.  Returns its opcode, or -1 if none. */
int zcm_exec_next(void);
/* Executes requests in order up to and including the first of opcode. */
bool zcm_exec_until(int opcode);
/* Delivers the completion of the first executed, uncompleted request. */
bool zcm_complete_next(void);
/* Executes and completes everything outstanding, settling after each. */
void zcm_run_network(void);
/* The QP's state as the device sees it. */
bool zcm_qp_in_error(void);
/* rdma_cm says DISCONNECTED (the peer's end went away). */
void zcm_carrier_drop(void);
/* The peer's QP failed: our outstanding requests complete in error. */
void zcm_remote_qp_error(void);

/* The process's pinned-memory budget is spent (true) or has room again:
 * while spent, every new registration is refused with -ENOBUFS, the
 * registration cache's (an app buffer for zero-copy) and a buffer's (the
 * staging buffer), as core/mrcache.c and core/dev.c refuse them. */
void zcm_pin_budget_spent(bool spent);

/* ------------------------------------------------------------ the peer */

/* Its stream to us. */
void zcm_peer_data(uint32_t n);                /* DATA of n bytes */
void zcm_peer_src_avail(uint32_t len);          /* SrcAvail over its pattern memory */
void zcm_peer_src_cancel(void);                 /* SrcAvailCancel of its last SrcAvail */
void zcm_peer_src_invalidate(void);             /* it drops its window (a lie) */
enum zcm_sink_mode {
	ZCM_SINK_IMM,          /* RDMA WRITE with immediate of n bytes (version 3) */
	ZCM_SINK_WRITE_COMPL,  /* RDMA WRITE of n bytes, then RdmaWrCompl(n) (version 2) */
	ZCM_SINK_COMPL_ONLY,   /* RdmaWrCompl(n) and no WRITE (a lie) */
	ZCM_SINK_PARTIAL,      /* RDMA WRITE of n/2 bytes, RdmaWrCompl(n) (a lie) */
};
/* Answers our last SinkAvail; n 0: the whole sink. */
void zcm_peer_sink_write(uint32_t n, enum zcm_sink_mode mode);
void zcm_peer_sink_cancel_ack(void);
/* Its side of our stream. */
uint32_t zcm_peer_read_src(uint32_t n);         /* READs our SrcAvail; bytes read (0: failed) */
void zcm_peer_rd_compl(uint32_t n);             /* RdmaRdCompl(n) for our SrcAvail */
void zcm_peer_rd_compl_honest(void);            /* RdmaRdCompl(bytes it read) */
void zcm_peer_sink_avail(uint32_t len);         /* offers a sink for our stream */
void zcm_peer_sink_cancel(void);
/* Anything. */
void zcm_peer_credit_update(void);
void zcm_peer_abort(void);
void zcm_peer_disconn(void);
/* A raw message (mid, ext) with a correct header: for lies of any kind. */
void zcm_peer_raw(uint8_t mid, const struct sdp_ext *ext);
/* Tries READ and WRITE through every window key we ever gave it: true if
 * any access succeeded (and the model then calls it a finding if no app
 * call is in progress). */
bool zcm_peer_probe_windows(void);
/* The peer answers honestly from now on whenever the model runs the
 * network (zcm_app_finish, zcm_run_network): acks, reads and answers our
 * SrcAvails, declines our sinks, answers our cancels. */
void zcm_peer_set_auto(bool on);

/* What the peer received from us. */
struct zcm_msg {
	uint8_t mid;
	uint32_t seq, len;
	struct sdp_ext ext;
};
/* How many messages of mid (0: any) the peer received; *last gets the last. */
int zcm_peer_msgs(uint8_t mid, struct zcm_msg *last);
/* Bytes the peer READ from its last SrcAvail's window. */
uint32_t zcm_peer_src_read_bytes(void);
/* Messages the peer may still send us (our buffers it believes free). */
uint32_t zcm_peer_credits(void);
/* Did our last ack cover every message the peer sent? */
bool zcm_peer_all_acked(void);
/* The peer's stream offset (bytes it placed honestly) / our stream it got. */
uint64_t zcm_peer_tx_off(void);
uint64_t zcm_peer_rx_off(void);
/* Our side's resets: an ABORT the peer received from us. */
bool zcm_peer_got_abort(void);
/* Bind requests posted while the connection was known to be reset. */
int zcm_binds_after_abort(void);
/* Total binds posted. */
int zcm_binds_posted(void);

#endif
