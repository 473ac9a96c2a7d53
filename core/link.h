/* Links: one RC connection between two processes that carries many
 * streams (docs/links.md).  A link owns the QP, the CQ and the registered
 * buffers; a stream (struct sdp_conn with c->link set) keeps its own
 * sequence numbers, credits and rings, and its bytes wait in unpinned
 * memory.  Private to core/.  Lock order: a stream's lock, then its
 * link's; the link never takes a stream's lock while holding its own. */
#ifndef SDPSHIM_LINK_H
#define SDPSHIM_LINK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/policy.h"
#include "base/reason.h"
#include "core/wire.h"

struct sdp_conn;
struct sdp_link;
struct sdp_listener;
struct rdma_cm_event;
struct ibv_cq;
struct ibv_send_wr;

#define CM_KIND_LINK 3

/* Client: puts c (phase RESOLVING, tuple's ports set) on a link to dst,
 * made if none has room, and opens the stream on it (at once, or when the
 * link is up).  0, or -errno with *reason. */
int link_client_open(struct sdp_conn *c, const struct sockaddr *dst, socklen_t dst_len,
		     enum sdp_reason *reason);

/* The climb (core/climb.c).  A held stream (phase HELD) goes on a link
 * with link_client_open as a new one would; once the link is up its REQ
 * goes (climb_send_req) instead of an OPEN.  climb_refuse answers a REQ
 * with a NAK; link_stream_send_kind sends a message of the given kind
 * for c's index on c's link. */
void climb_refuse(struct sdp_link *link, uint16_t idx, uint8_t code);
int link_stream_send_kind(struct sdp_conn *c, uint8_t kind, const void *payload, uint32_t len);
/* climb.c's, called by the link (c locked where c is named).  True if
 * the REQ went (the server may take the index); false: the attempt ended. */
bool climb_send_req(struct sdp_conn *c);
/* The peer released c's index (c locked).  An initiator whose PROVE is
 * still unanswered learns that the responder never took it (its ACK would
 * have come first on the link): with nothing of this end's on the new
 * channel since the cut, the stream is whole on TCP and stays held (the
 * next attempt comes after the backoff).  True if so; false: not the
 * climb's to answer, the stream is lost as any other. */
bool climb_on_peer_released(struct sdp_conn *c);
/* listener_policy: the listener's the link came on (its climb=no refuses). */
void climb_on_req(struct sdp_link *link, uint16_t idx, const struct sdp_climb_req *r,
		  const struct sdp_policy *listener_policy);
/* The peer process's rendezvous port, from its OPEN or OPEN_ACK, at the
 * link's peer address (port 0: it has none). */
void climb_note_peer_rdv(struct sdp_conn *c, const struct sockaddr *link_peer, uint16_t port);
/* False: the message is not one c expects now (a protocol violation).  One
 * that crossed the end of an attempt this end ended (its bound, a give-up
 * to TCP, a reset) is ignored. */
bool climb_on_step(struct sdp_conn *c, uint8_t kind, const uint8_t *payload);

/* Server: a Hello with SDP_HELLO_FLAG_LINK arrived on listener l. */
void link_server_accept(struct sdp_listener *l, struct rdma_cm_event *ev,
			const struct sdp_hello *h);
/* Server: binds a new stream to the link it was opened on (index idx) and
 * sets up its rings.  0 or -errno. */
int link_stream_setup(struct sdp_conn *c, struct sdp_link *link, uint16_t idx);
/* The largest stream message (its own header included) one of the link's
 * send slots holds: a stream's send slots are never larger, whatever size
 * the peer announced. */
uint32_t link_stream_msg_max(const struct sdp_link *link);
/* Server: undoes link_stream_setup before the peer heard of the index (c
 * locked or new), as when a refusal follows: a NAK tells the client the
 * index was never taken, so no RELEASED may follow it.  The stream's
 * rings stay until its channel is released. */
void link_stream_unsetup(struct sdp_conn *c);
/* Server: answers an OPEN (code 0: OPEN_ACK with c's nonce and geometry). */
void link_answer_open(struct sdp_link *link, uint16_t idx, struct sdp_conn *c, uint8_t code);

/* The stream's messages and work requests go through the link, in order:
 * posted at once when the link has room, else queued behind the others.
 * The message bytes must stay valid until the send completes (they are
 * copied when posted).  0, or -EPIPE when the link is gone. */
int link_send(struct sdp_conn *c, uint64_t wr_id, const void *msg, uint32_t len);
int link_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr);

/* The stream's traffic on the link ends here (the per-stream form of a QP
 * in the error state): its queued work is dropped, its arriving messages
 * ignored.  With zero-copy work the peer could still touch, the whole link
 * fails instead, so that no remote access survives. */
void link_stream_stop(struct sdp_conn *c);
/* Progress thread, c not locked: takes in what c's link has completed (an
 * ATTACH in the queue is seen before the TCP bytes that followed it). */
void link_reap(struct sdp_conn *c);
/* The same from any thread: link_hold with c locked (NULL: not linked),
 * then link_reap_held with c unlocked (it releases the hold). */
struct sdp_link *link_hold(struct sdp_conn *c);
void link_reap_held(struct sdp_link *link);
/* An app thread's form, before it spins or sleeps on its stream: takes in
 * the link's completions unless another thread is taking them in. */
void link_app_reap_held(struct sdp_link *link);
/* The same, for a non-blocking call about to fail with EAGAIN: while such
 * calls keep polling the link, its CQ events are put off (link.c). */
void link_app_poll_held(struct sdp_link *link);
/* Write zero-copy: at most one stream of a link exposes a sink at a time
 * (a WRITE's completion on the shared QP cannot say which window it
 * filled).  Claim before binding the sink's window; false: another stream
 * has it (use buffer copy).  Release once the window is closed. */
bool link_sink_claim(struct sdp_conn *c);
void link_sink_release(struct sdp_conn *c);
/* Fails c's whole link as a carrier failure would (test hooks). */
void link_force_fail(struct sdp_conn *c, const char *why);
/* The stream is being destroyed: leave the link and tell the peer. */
void link_stream_detach(struct sdp_conn *c);
/* Before a stream's resources go (no lock held): the link hands it no
 * message or completion from now on, and one already being handed over
 * has ended when this returns. */
void link_stream_fence(struct sdp_conn *c);

/* The progress thread: rdma_cm events of a link's id, and its CQ. */
void cm_link_event(struct sdp_link *link, struct rdma_cm_event *ev);
void link_on_cq_event(void *ctx, struct ibv_cq *cq);
/* The stream waits for a send of its to complete (room, its last ack, a
 * confirmation): the link's completions raise events again (link_arm). */
void link_stream_awaits_sends(struct sdp_conn *c);
/* Busy-poll: every link of the process, each if no other thread polls it. */
void link_poll_all(void);
/* accept(): takes in the links of listener l that carry committed OPENs. */
void link_reap_listener(struct sdp_listener *l);
/* Takes link's completions in (no stream locked); true once its send
 * number seq completed (the peer holds the message), or the link is down. */
bool link_open_delivered(struct sdp_link *link, uint64_t seq);
/* Lets go of a link_hold() that no reap released. */
void link_release_held(struct sdp_link *link);
/* The once-a-second sweep: every link as if its CQ raised an event. */
void link_sweep_all(void);
/* Does the process have a link (in any state)? */
bool link_any(void);

/* Forget the parent's links in a forked child. */
void link_atfork_child(void);

/* The process's rendezvous port (core/rendezvous.c): made on first use
 * (0: none, or SDPSHIM_CLIMB=0); rdv_port only reads it.  A forked child
 * forgets its parent's. */
uint16_t rdv_port_ensure(void);
uint16_t rdv_port(void);
void rdv_atfork_child(void);
/* Links whose CQ an event left unarmed while an app thread spun: any? and
 * arm them (take in, arm, take in). */
bool link_arms_owed(void);
void link_arm_owed_all(void);
/* The lease of the put-off arms is over: arm each owed link that no
 * non-blocking call has polled since the last look. */
void link_lease_over_all(void);

#endif
