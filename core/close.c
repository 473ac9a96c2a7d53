/* The close state machine of a channel: one function per event, each
 * switching over every state.  Orderly close is a DisConn in each
 * direction after the data; abort and carrier failure end both. */
#include <errno.h>

#include "base/log.h"
#include "core/conn_internal.h"

static void notify_close_change(struct sdp_conn *c, enum conn_close_state old)
{
	if (c->close_state == old)
		return;
	sdp_debug("channel close state %d -> %d", old, c->close_state);
	/* A new edge even if the readable indicator is set already (unread
	 * bytes): a hang-up or an error is news to an edge-triggered watcher,
	 * as the kernel's FIN or reset is. */
	conn_update_readiness(c, true);
	conn_signal_owner(c, CONN_EV_STATE);
	close_check_orphan(c);
}

/* Before an orderly close takes the channel down, the peer learns that
 * every byte it sent was consumed: when our end disappears its sender then
 * knows nothing is left to move (and does not take it for a failure).
 * Control messages (its DisConn, credit updates) hold no bytes, and the
 * peer's judgement looks at its data alone (nothing_to_move, switch.c): an
 * ack of those alone is not owed.  True once that credit update completed,
 * or nothing is owed. */
static bool final_ack_landed(struct sdp_conn *c)
{
	if (c->carrier_dead)
		return true;
	if ((int32_t)(c->rx_payload_ack - c->rx_ack_sent) > 0) {
		tx_queue_ctrl(c, SDP_MID_CREDIT_UPDATE); /* sent by the caller's tx_kick */
		return false;
	}
	return c->sq_outstanding == 0;
}

void close_check_orphan(struct sdp_conn *c)
{
	bool all_acked = c->tx_peer_ack == c->tx_seq && !tx_has_unposted(c);

	if (!c->app_closed || c->phase != CONN_OPEN || c->sw.started)
		return;
	switch (c->close_state) {
	case CLOSE_ABORTED:
		conn_schedule_destroy(c);
		break;
	case CLOSE_DONE:
		if (final_ack_landed(c))
			conn_schedule_destroy(c);
		break;
	case CLOSE_FIN_WAIT:
		if (all_acked && final_ack_landed(c))
			conn_schedule_destroy(c); /* every byte and our DisConn were consumed */
		break;
	case CLOSE_ACTIVE:
	case CLOSE_TX_DRAINING:
	case CLOSE_PEER_FIN:
	case CLOSE_LAST_DRAIN:
		break;
	}
}

/* The app shut down writing (shutdown SHUT_WR, or close). */
void close_ev_app_shutdown_wr(struct sdp_conn *c)
{
	enum conn_close_state old = c->close_state;

	switch (c->close_state) {
	case CLOSE_ACTIVE:
		c->close_state = CLOSE_TX_DRAINING;
		tx_queue_ctrl(c, SDP_MID_DISCONN);
		break;
	case CLOSE_PEER_FIN:
		c->close_state = CLOSE_LAST_DRAIN;
		tx_queue_ctrl(c, SDP_MID_DISCONN);
		break;
	case CLOSE_TX_DRAINING:
	case CLOSE_FIN_WAIT:
	case CLOSE_LAST_DRAIN:
	case CLOSE_DONE:
	case CLOSE_ABORTED:
		break;
	}
	/* The carrier died with nothing to move (close_ev_carrier_failed):
	 * the DisConn can never go, and both directions are now ended. */
	if (c->carrier_dead && c->phase == CONN_OPEN && c->close_state == CLOSE_LAST_DRAIN)
		c->close_state = CLOSE_DONE;
	tx_kick(c);
	notify_close_change(c, old);
}

bool close_app_shut_writing(const struct sdp_conn *c)
{
	switch (c->close_state) {
	case CLOSE_TX_DRAINING:
	case CLOSE_FIN_WAIT:
	case CLOSE_LAST_DRAIN:
	case CLOSE_DONE:
		return true;
	case CLOSE_ACTIVE:
	case CLOSE_PEER_FIN:
	case CLOSE_ABORTED:
		return false;
	}
	return false;
}

/* Our DisConn was posted behind the last byte of data. */
void close_ev_tx_flushed(struct sdp_conn *c)
{
	enum conn_close_state old = c->close_state;

	switch (c->close_state) {
	case CLOSE_TX_DRAINING:
		c->close_state = CLOSE_FIN_WAIT;
		break;
	case CLOSE_LAST_DRAIN:
		c->close_state = CLOSE_DONE;
		break;
	case CLOSE_ACTIVE:
	case CLOSE_FIN_WAIT:
	case CLOSE_PEER_FIN:
	case CLOSE_DONE:
	case CLOSE_ABORTED:
		break;
	}
	notify_close_change(c, old);
}

/* The peer's DisConn arrived: it sends no more; we read EOF after the data. */
void close_ev_peer_disconn(struct sdp_conn *c)
{
	enum conn_close_state old = c->close_state;

	switch (c->close_state) {
	case CLOSE_ACTIVE:
		c->close_state = CLOSE_PEER_FIN;
		break;
	case CLOSE_TX_DRAINING:
		c->close_state = CLOSE_LAST_DRAIN;
		break;
	case CLOSE_FIN_WAIT:
		c->close_state = CLOSE_DONE;
		break;
	case CLOSE_PEER_FIN:
	case CLOSE_LAST_DRAIN:
	case CLOSE_DONE:
		break; /* a duplicate DisConn changes nothing */
	case CLOSE_ABORTED:
		return; /* reset first: the stream reads as reset, never as ended */
	}
	c->rx_eof = true;
	notify_close_change(c, old);
}

/* Reset: sent by us (SO_LINGER 0, protocol violation) or by the peer. */
void close_ev_abort(struct sdp_conn *c, int err, bool send_abort)
{
	enum conn_close_state old = c->close_state;

	switch (c->close_state) {
	case CLOSE_ACTIVE:
	case CLOSE_TX_DRAINING:
	case CLOSE_FIN_WAIT:
	case CLOSE_PEER_FIN:
	case CLOSE_LAST_DRAIN:
		c->close_state = CLOSE_ABORTED;
		c->hard_error = err;
		if (send_abort) {
			c->abort_errno = err;
			tx_queue_ctrl(c, SDP_MID_ABORT);
			tx_kick(c);
		}
		break;
	case CLOSE_DONE:
	case CLOSE_ABORTED:
		break;
	}
	notify_close_change(c, old);
}

/* The carrier failed while our ATTACH was unconfirmed: the client may still
 * be waiting for it, and then takes TCP for a plain server and a SWITCH
 * record for app bytes; or it has it, and then moves the stream itself.
 * Neither end can know which, so the connection is reset, never guessed. */
static void reset_unconfirmed_attach(struct sdp_conn *c)
{
	sdp_warn("the RDMA channel failed before the client confirmed it (%s); resetting the "
		 "connection", c->carrier_why ? c->carrier_why : "carrier failure");
	close_ev_abort(c, ECONNRESET, false);
	tcp_send_reset(c);
	conn_update_readiness(c, true);
	if (c->app_closed)
		conn_schedule_destroy(c);
}

/* The QP or the rdma_cm connection failed, or the peer disconnected
 * without DisConn.  Before ATTACH no byte moved: fall back to TCP.  After
 * it the stream moves to TCP (core/switch.c).
 *
 * The failover invariant.  The two ends learn of a failure separately, in
 * any order and at any delay: DISCONNECTED, DEVICE_REMOVAL, a QP error, a
 * stalled send queue, or the peer's SWITCH record on the TCP socket, and
 * an end whose own carrier still looks healthy may learn of it only from
 * that record.  So the carrier never decides how the stream ends: on an
 * open stream that was not reset (no Abort either way), every sign of
 * failure moves the stream, and an end that moves writes its SWITCH
 * record and reads the peer's, which the peer writes as soon as it sees
 * either its own sign or ours.  The one exception is an end with nothing
 * left to move, whose peer ended its stream (DisConn) and consumed every
 * byte of ours: it stays where it is (the peer's app may be gone, and its
 * TCP socket with it), reads EOF after the bytes it holds, and still
 * follows the peer if the peer's record arrives (switch_start, by_peer):
 * that peer may not have learned we consumed its last bytes, and a record
 * left unread would come back to it as a reset. */
void close_ev_carrier_failed(struct sdp_conn *c, int err, const char *why)
{
	enum conn_close_state old = c->close_state;

	if (c->phase == CONN_HELD || c->phase == CONN_CLIMB_HALF) {
		climb_link_lost(c, why); /* the attempt's link, or the new channel's */
		return;
	}
	if (!c->carrier_why)
		c->carrier_why = why;
	if (c->carrier_dead || c->carrier_reaping)
		return;
	if (c->phase == CONN_OPEN && !c->sw.started) {
		/* What completed before the failure (data, the peer's DisConn, its
		 * last credits) happened first: take it in before judging. */
		c->carrier_reaping = true;
		cq_poll(c);
		c->carrier_reaping = false;
	}
	c->carrier_dead = true;
	/* A dead carrier is a QP in the error state: no remote access to a
	 * window survives it, whatever the peer's QP still believes. */
	qp_force_error(c);
	switch (c->phase) {
	case CONN_AWAIT_ATTACH:
	case CONN_ATTACHING:
		bind_on_carrier_failed(c); /* a PROOF may be owed an answer */
		return;
	case CONN_RESOLVING:
	case CONN_TCP_CONNECTING:
	case CONN_PENDING:
		conn_fallback(c, SDP_REASON_RDMA_CM_ERROR);
		return;
	case CONN_OPEN:
		break;
	case CONN_DRAINING:
	case CONN_SWITCHING:
	case CONN_FALLBACK:
	case CONN_DEAD:
	case CONN_HELD:
	case CONN_CLIMB_HALF:
		return;
	}
	if (c->sw.started)
		return; /* reaping completions while a switch starts */
	if (c->attach_unconfirmed) {
		reset_unconfirmed_attach(c);
		return;
	}
	if (switch_start(c, SDP_REASON_FAILOVER, !c->fork_shared, false))
		return; /* the stream continues on TCP */
	/* Not moved: reset already, nothing left to move, or no TCP socket. */
	switch (c->close_state) {
	case CLOSE_ACTIVE:
	case CLOSE_TX_DRAINING:
	case CLOSE_FIN_WAIT:
		/* Bytes may be missing and there is no TCP socket to move to. */
		c->hard_error = err ? err : ECONNRESET;
		c->close_state = CLOSE_ABORTED;
		break;
	case CLOSE_PEER_FIN:
		/* The peer's stream ended; ours stays open for the app, whose
		 * writes fail (EPIPE) unless the peer moves the stream to TCP. */
		break;
	case CLOSE_LAST_DRAIN:
		c->close_state = CLOSE_DONE; /* our DisConn can never go */
		break;
	case CLOSE_DONE:
	case CLOSE_ABORTED:
		break;
	}
	notify_close_change(c, old);
	conn_update_readiness(c, true);
	if (c->app_closed)
		conn_schedule_destroy(c);
}
