/* Zero-copy for large transfers (SDP's read and write zero-copy):
 *  - read: the sender binds a memory window (remote read) over exactly the
 *    app's buffer and sends SrcAvail; the receiver RDMA-READs straight into
 *    the app's buffer when a recv waits with room, else into a staging
 *    buffer; RdmaRdCompl releases the sender's send();
 *  - write: a receiver blocked with a large buffer binds a window (remote
 *    write) over it and sends SinkAvail; a sender with a send at that
 *    stream offset at least as large fills it with one RDMA WRITE with
 *    immediate, whose completion at the receiver carries the byte count.
 * Either side may cancel (SrcAvailCancel, SinkAvailCancel/SinkCancelAck);
 * every path ends with the window invalidated (or the QP in the error
 * state) and the registration released before the app's call returns, and
 * every wait for the peer is bounded by SDPSHIM_ZCOPY_ANSWER_MS.  All
 * functions are called with the conn lock held. */
#ifndef SDPSHIM_ZCOPY_H
#define SDPSHIM_ZCOPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/wire.h"

struct sdp_conn;
struct rx_entry;

/* Sender: may a send of len bytes use zero-copy? */
bool zc_send_eligible(struct sdp_conn *c, size_t len);
/* Sends buf by zero-copy.  >0 bytes taken by the peer, 0 "use buffer copy
 * instead" (registration impossible, or non-blocking and the peer did not
 * take any within SDPSHIM_ZCOPY_NB_WAIT_MS), or -errno.  Blocking: waits;
 * a signal or SO_SNDTIMEO cancels, and the bytes the peer had taken are
 * returned.  Non-blocking: waits at most timeout_ms, then cancels; the
 * peer's progress thread answers within one READ, whatever its app does. */
ssize_t zc_send(struct sdp_conn *c, const void *buf, size_t len, bool nonblock, int timeout_ms,
		uint64_t start_us);

/* The first unconsumed SrcAvail with no buffered bytes before it, or NULL. */
struct rx_entry *zc_head_source(struct sdp_conn *c);
/* Receiver: the head of the receive queue is a SrcAvail; READ up to room
 * bytes into dst directly (blocking recv).  Returns bytes, 0 if not done
 * (then the staged path applies), or -errno. */
ssize_t zc_recv_direct(struct sdp_conn *c, struct rx_entry *e, void *dst, size_t room);
/* Starts a READ into the staging buffer if the head SrcAvail needs one. */
void zc_stage_kick(struct sdp_conn *c);
/* Copies staged bytes of SrcAvail e into iov; the counterpart of DATA copy. */
size_t zc_copy_staged(struct sdp_conn *c, struct rx_entry *e, const struct iovec *iov,
		      int iovcnt, size_t skip, size_t len, bool peek);
/* A blocking recv with a large empty buffer and nothing queued: advertise
 * it as a sink and wait.  Returns bytes written there, 0 if the peer did
 * not use it (data came another way; read the queue), or -errno. */
ssize_t zc_recv_sink(struct sdp_conn *c, void *dst, size_t room, int timeout_ms,
		     uint64_t start_us);
bool zc_sink_eligible(struct sdp_conn *c, size_t room, int flags);

/* Messages and completions. */
bool zc_on_message(struct sdp_conn *c, const struct sdp_bsdh *h, const struct sdp_ext *ext,
		   struct rx_entry *e);
/* The peer's RDMA WRITE with immediate into our sink completed here with
 * this many bytes (our receive completion's count). */
void zc_on_write_landed(struct sdp_conn *c, uint32_t bytes);
/* A SrcAvail waits for its RdmaRdCompl: nothing may follow it. */
bool zc_rx_source_unanswered(struct sdp_conn *c);
void zc_on_completion(struct sdp_conn *c, int kind, uint32_t index, bool ok);
/* The extension a zero-copy control message carries. */
void zc_fill_ext(struct sdp_conn *c, uint8_t mid, struct sdp_ext *ext);
/* Buffer-copy bytes entered the stream: a peer sink at that offset is void. */
void zc_note_bcopy(struct sdp_conn *c, size_t bytes);
/* Is the sender busy with zero-copy (so it may not take more bytes)? */
bool zc_tx_busy(const struct sdp_conn *c);
/* Could a SrcAvail go now: nothing queued ahead of it, nothing of ours in
 * flight, and two credits? */
bool zc_send_ready(const struct sdp_conn *c);
/* Teardown: window and staging buffer (progress thread). */
void zc_release(struct sdp_conn *c);

#endif
