/* Credit and ring arithmetic of the buffer-copy channel: small pure inline
 * functions, unit-tested in tests/unit/test_credits.c. */
#ifndef SDPSHIM_CREDITS_H
#define SDPSHIM_CREDITS_H

#include <stdbool.h>
#include <stdint.h>

/* Every message but a credit update, a keepalive probe or an Abort leaves
 * this many credits, so each side can always tell the other what it
 * consumed: otherwise two ends that spent their last credits on other
 * messages (a SrcAvail one way, a SinkAvail the other) wait for each other
 * forever. */
#define CREDIT_RESERVE 1u

/* Receive buffers the peer still has free for us: it posted peer_bufs, and
 * our messages after peer_ack are not consumed yet. */
static inline uint32_t credits_available(uint32_t peer_bufs, uint32_t tx_seq, uint32_t peer_ack)
{
	uint32_t outstanding = tx_seq - peer_ack;

	return outstanding >= peer_bufs ? 0 : peer_bufs - outstanding;
}

static inline bool credits_allow_data(uint32_t avail)
{
	return avail > CREDIT_RESERVE;
}

/* may_take_last: a credit update, a keepalive probe or an Abort. */
static inline bool credits_allow_ctrl(uint32_t avail, bool may_take_last)
{
	return may_take_last ? avail >= 1 : avail > CREDIT_RESERVE;
}

/* Does a message ask the peer for an ack (the STARVING flag)?  When it
 * leaves us at the reserve; a credit update or keepalive probe never asks.
 * Two ends at their reserve whose updates asked would answer each other's
 * updates forever, one ack each, and the updates would take the credits
 * their data waits for.  An end that is short of credits is still answered:
 * its last data or other control message asked, and a receiver that sees
 * the sender's credits at the reserve sends an update anyway
 * (peer_view_of_credits, core/rx.c). */
static inline bool message_asks_ack(uint32_t credits_after, bool is_update)
{
	return credits_after <= CREDIT_RESERVE && !is_update;
}

/* A pending credit update goes before queued data only if that data cannot
 * go now: the data carries the same ack, and the update would take the
 * credit the data needs. */
static inline bool update_goes_first(bool data_waiting, uint32_t avail)
{
	return !data_waiting || !credits_allow_data(avail);
}

/* Should the receiver send a standalone credit update?  unadvertised =
 * messages consumed since the last ack we sent. */
static inline bool credit_update_due(uint32_t unadvertised, uint32_t bufs, bool peer_starving)
{
	if (unadvertised == 0)
		return false;
	return peer_starving || unadvertised >= (bufs + 1) / 2;
}

/* The peer thinks it has this many credits toward us: we posted bufs, and
 * its messages after our last advertised ack are unconsumed in its view. */
static inline uint32_t peer_view_of_credits(uint32_t bufs, uint32_t rx_seq, uint32_t ack_sent)
{
	return credits_available(bufs, rx_seq, ack_sent);
}

/* Ring of monotonically increasing 32-bit indices over n slots. */
static inline uint32_t ring_used(uint32_t head, uint32_t tail)
{
	return head - tail;
}

static inline uint32_t ring_index(uint32_t pos, uint32_t n)
{
	return pos % n;
}

/* A peer acknowledgement is valid if it does not go backwards and does not
 * acknowledge a message we never sent. */
static inline bool ack_is_valid(uint32_t ack, uint32_t prev_ack, uint32_t tx_seq)
{
	return (uint32_t)(ack - prev_ack) <= (uint32_t)(tx_seq - prev_ack);
}

#endif
