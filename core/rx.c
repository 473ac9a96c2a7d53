/* The receive side: validates every message the peer SENDs into our
 * buffers, queues data in order, dispatches control messages, and returns
 * buffers (and credits) as the app consumes the bytes. */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <string.h>

#include "base/log.h"
#include "core/conn_internal.h"
#include "core/credits.h"
#include "core/zcopy.h"

static struct rx_entry *entry_at(const struct sdp_conn *c, uint32_t pos)
{
	return &c->rx_ring[pos % c->buf_count];
}

static uint8_t *rx_buf(const struct sdp_conn *c, uint32_t slot)
{
	if (c->rx_heap)
		return c->rx_heap[slot];
	return c->rx_mem + (size_t)slot * c->buf_size;
}

static bool unbound(const struct sdp_conn *c);

/* A channel not bound yet: its peer is not proven to be the TCP
 * connection's (docs/trust.md), so whatever it breaks costs the channel,
 * never the stream, which goes on over TCP (a pending channel no socket
 * took yet is dropped). */
static void unbound_violation(struct sdp_conn *c, const char *what)
{
	c->unbound_violated = true;
	if (c->phase == CONN_PENDING) {
		sdp_warn_limited("an unattached RDMA channel's peer broke the protocol (%s); dropping the channel",
			 what);
		pending_drop(c);
		return;
	}
	bind_on_violation(c, what);
}

/* A peer that breaks the protocol gets an abort and a logged reason; on a
 * channel not bound yet, only the channel ends. */
static void protocol_violation(struct sdp_conn *c, const char *what)
{
	if (unbound(c)) {
		unbound_violation(c, what);
		return;
	}
	sdp_warn_limited("peer violated the sdpshim protocol (%s); aborting the connection", what);
	c->fail_reason = SDP_REASON_PROTOCOL;
	close_ev_abort(c, ECONNRESET, true);
}

/* Returns consumed buffers to the receive queue and advances our ack. */
static void rx_advance(struct sdp_conn *c)
{
	while (c->rx_tail != c->rx_head && entry_at(c, c->rx_tail)->consumed) {
		struct rx_entry *e = entry_at(c, c->rx_tail);

		if (e->is_data)
			conn_repost_recv(c, e->slot); /* control buffers went back on arrival */
		if (e->is_data || e->is_src)
			c->rx_payload_ack = e->seq;
		c->rx_ack = e->seq;
		c->rx_tail++;
	}
}

void rx_maybe_update_credits(struct sdp_conn *c)
{
	uint32_t unadvertised = c->rx_ack - c->rx_ack_sent;
	uint32_t peer_view = peer_view_of_credits(c->buf_count, c->rx_seq, c->rx_ack_sent);
	bool starving = c->peer_starving || peer_view <= CREDIT_RESERVE + 1;

	if (credit_update_due(unadvertised, c->buf_count, starving))
		tx_queue_ctrl(c, SDP_MID_CREDIT_UPDATE);
}

void rx_entry_consumed(struct sdp_conn *c)
{
	rx_advance(c);
	rx_maybe_update_credits(c);
}

/* A channel not bound yet: the client before ATTACH, the server before it
 * opened (docs/trust.md).  It carries nothing but the handshake. */
static bool unbound(const struct sdp_conn *c)
{
	if (c->is_server)
		return c->phase == CONN_PENDING || c->phase == CONN_ATTACHING;
	return c->phase == CONN_AWAIT_ATTACH || c->phase == CONN_TCP_CONNECTING;
}

static bool allowed_unbound(const struct sdp_conn *c, uint8_t mid)
{
	switch (mid) {
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_KEEPALIVE:
	case SDP_MID_DETACH:
		return true;
	case SDP_MID_ATTACH:
		return !c->is_server;
	case SDP_MID_COMMIT:
		return c->is_server;
	default:
		return false;
	}
}

static void on_attach(struct sdp_conn *c)
{
	if (c->is_server || !unbound(c)) {
		protocol_violation(c, "unexpected ATTACH");
		return;
	}
	bind_client_on_attach(c);
}

/* DETACH: the server will not use the channel; or (to a server) the
 * client gave up on it before binding and uses TCP. */
static void on_detach(struct sdp_conn *c)
{
	if (!unbound(c)) {
		protocol_violation(c, "unexpected DETACH");
		return;
	}
	if (!c->is_server) {
		bind_client_on_detach(c);
		return;
	}
	c->peer_gave_up = true;
	if (c->phase == CONN_ATTACHING)
		bind_fallback(c, SDP_REASON_RDMA_TIMEOUT);
	else
		pending_drop(c);
}

static void on_commit(struct sdp_conn *c, const struct sdp_ext *ext)
{
	if (!c->is_server || c->committed) {
		protocol_violation(c, "unexpected COMMIT");
		return;
	}
	c->committed = true;
	sdp_nonce_from_ext(ext, c->nonce_peer);
	sdp_debug("bind: COMMIT from the client (port %u, phase %s)", c->tuple.src_port,
		  conn_phase_name(c->phase));
	bind_server_on_commit(c);
}

static void on_control(struct sdp_conn *c, const struct sdp_bsdh *h, const uint8_t *msg,
		       struct rx_entry *e)
{
	struct sdp_ext ext = { 0 };

	if (h->len > SDP_BSDH_SIZE)
		sdp_ext_from_wire(msg + SDP_BSDH_SIZE, &ext);
	switch ((enum sdp_mid)h->mid) {
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_KEEPALIVE:
		break;
	case SDP_MID_DISCONN:
		close_ev_peer_disconn(c);
		conn_ack_disconn_later(c); /* the closer learns its bytes landed */
		break;
	case SDP_MID_ABORT:
		close_ev_abort(c, ECONNRESET, false);
		break;
	case SDP_MID_ATTACH:
		on_attach(c);
		break;
	case SDP_MID_COMMIT:
		on_commit(c, &ext);
		break;
	case SDP_MID_DETACH:
		on_detach(c);
		break;
	case SDP_MID_SRC_AVAIL:
	case SDP_MID_RDMA_RD_COMPL:
	case SDP_MID_SRC_CANCEL:
	case SDP_MID_SINK_AVAIL:
	case SDP_MID_SINK_CANCEL:
	case SDP_MID_SINK_CANCEL_ACK:
		zc_on_message(c, h, &ext, e);
		break;
	case SDP_MID_DATA:
	case SDP_MID_SWITCH:
	case SDP_MID_RDMA_WR_COMPL: /* version 2's: the WRITE's immediate took its place */
		protocol_violation(c, "message not supported by this channel");
		break;
	}
}

static bool validate(struct sdp_conn *c, const struct sdp_bsdh *h, enum sdp_wire_error err)
{
	if (err != SDP_WIRE_OK) {
		protocol_violation(c, sdp_wire_error_text(err));
		return false;
	}
	if (h->mseq != c->rx_seq + 1) {
		protocol_violation(c, "sequence gap");
		return false;
	}
	if (!ack_is_valid(h->mseq_ack, c->tx_peer_ack, c->tx_seq)) {
		protocol_violation(c, "acknowledges a message never sent");
		return false;
	}
	if (h->bufs > c->peer_buf_count || ring_used(c->rx_head, c->rx_tail) >= c->buf_count) {
		protocol_violation(c, "more messages than credits");
		return false;
	}
	if (unbound(c) && !allowed_unbound(c, h->mid)) {
		unbound_violation(c, "a message other than the handshake's");
		return false;
	}
	if (h->mid == SDP_MID_DATA && c->rx_eof) {
		protocol_violation(c, "data after DisConn");
		return false;
	}
	if (h->mid == SDP_MID_DATA && zc_rx_source_unanswered(c)) {
		protocol_violation(c, "data behind an unanswered SrcAvail");
		return false;
	}
	return true;
}

/* The channel is not used any more: its peer broke the protocol before it
 * was bound, or the stream fell back to TCP before any byte moved (its
 * peer's late messages, such as a server's answering DETACH, say nothing
 * about the TCP stream). */
static bool channel_abandoned(const struct sdp_conn *c)
{
	return c->unbound_violated || c->phase == CONN_DRAINING || c->phase == CONN_FALLBACK;
}

/* A receive completion (a message, or a WRITE with immediate into our
 * sink) for one of our buffers: false if it is not ours, or if it comes
 * after a reset, or once the channel is abandoned.  Then nothing the peer
 * sends counts: it is dropped unread and not judged (one diagnostic per
 * connection, not one per message); after a reset the buffer is posted
 * again, an abandoned channel needs none. */
static bool receive_counts(struct sdp_conn *c, uint32_t slot)
{
	if (channel_abandoned(c))
		return false;
	if (slot >= c->buf_count) {
		protocol_violation(c, "completion for an unknown buffer");
		return false;
	}
	if (c->close_state == CLOSE_ABORTED) {
		conn_repost_recv(c, slot);
		return false;
	}
	return true;
}

static void rx_on_message(struct sdp_conn *c, uint32_t slot, const uint8_t *msg, uint32_t byte_len);

void rx_on_recv(struct sdp_conn *c, uint32_t slot, uint32_t byte_len)
{
	if (!receive_counts(c, slot))
		return;
	rx_on_message(c, slot, rx_buf(c, slot), byte_len);
}

/* The ring's next slot for a linked stream's message, or false (dropped
 * after a reset; more messages than credits is a violation). */
static bool link_slot(struct sdp_conn *c, uint32_t *slot)
{
	if (!c->rx_ring || c->close_state == CLOSE_ABORTED || channel_abandoned(c))
		return false;
	if (ring_used(c->rx_head, c->rx_tail) >= c->buf_count) {
		protocol_violation(c, "more messages than credits");
		return false;
	}
	*slot = c->rx_head % c->buf_count;
	return true;
}

/* A held stream's bytes go over TCP until its climb's cut: a stream
 * message before then comes from a peer that has not proven it holds the
 * stream (the responder checks the asker's key only in its PROVE), or that
 * breaks the climb's order.  It ends the attempt, never the stream
 * (docs/upgrade.md, "Rogue peers"). */
static bool held_stray(struct sdp_conn *c)
{
	if (c->phase != CONN_HELD)
		return false;
	if (c->climb.step != CLIMB_IDLE) {
		sdp_warn("a message came on RDMA for a stream still on TCP, before its climb's cut; "
			 "the attempt ends, the stream stays on TCP");
		climb_link_lost(c, "a stream message before the climb's cut");
	}
	return true;
}

void rx_on_link_message(struct sdp_conn *c, const uint8_t *msg, uint32_t len)
{
	uint32_t slot;

	if (held_stray(c) || !link_slot(c, &slot))
		return;
	if (msg[0] == SDP_MID_DATA && len <= c->buf_size) {
		/* The link's buffer goes back at once: the bytes wait here. */
		uint8_t *copy = malloc(len);

		if (!copy) {
			sdp_warn("out of memory for received bytes; resetting the connection");
			close_ev_abort(c, ENOMEM, true);
			return;
		}
		memcpy(copy, msg, len);
		free(c->rx_heap[slot]);
		c->rx_heap[slot] = copy;
		msg = copy;
	}
	rx_on_message(c, slot, msg, len);
}

bool rx_take_new_data(struct sdp_conn *c)
{
	bool fresh = c->rx_new_data;

	c->rx_new_data = false;
	return fresh;
}

void rx_on_link_write(struct sdp_conn *c, uint32_t byte_len, uint16_t mseq16)
{
	uint32_t slot;

	if (!link_slot(c, &slot))
		return;
	if ((uint16_t)(c->rx_seq + 1) != mseq16) {
		protocol_violation(c, "sequence gap");
		return;
	}
	rx_on_write_imm(c, slot, byte_len, c->rx_seq + 1);
}

static void rx_on_message(struct sdp_conn *c, uint32_t slot, const uint8_t *msg, uint32_t byte_len)
{
	struct rx_entry *e;
	struct sdp_bsdh h;
	enum sdp_wire_error err;

	err = sdp_bsdh_from_wire(msg, byte_len, c->buf_size, &h);
	if (!validate(c, &h, err))
		return;
	c->rx_seq = h.mseq;
	if (h.bufs)
		c->tx_peer_bufs = h.bufs;
	/* Sticky until our next message carries the ack (see fill_header). */
	c->peer_starving |= (h.flags & SDP_FLAG_STARVING) != 0;
	tx_free_acked(c, h.mseq_ack);
	close_check_orphan(c);
	e = entry_at(c, c->rx_head++);
	e->seq = h.mseq;
	e->slot = (uint16_t)slot;
	e->is_data = h.mid == SDP_MID_DATA;
	e->is_src = false;
	e->off = (uint32_t)SDP_BSDH_SIZE;
	e->len = e->is_data ? h.len - (uint32_t)SDP_BSDH_SIZE : 0;
	e->consumed = !e->is_data;
	if (e->is_data)
		c->rx_stream_off += e->len;
	if (e->is_data && c->app_closed) {
		/* Bytes for a socket the app closed: TCP answers with a reset. */
		e->consumed = true;
		e->is_data = false;
		conn_repost_recv(c, slot);
		rx_advance(c);
		close_ev_abort(c, ECONNRESET, true);
		return;
	}
	if (e->is_data) {
		c->rx_bytes_ready += e->len;
		c->rx_new_data = true; /* the completion's caller updates readiness once */
		return;
	}
	conn_repost_recv(c, slot);
	on_control(c, &h, msg, e);
	rx_advance(c);
	/* A control message is consumed on arrival: a peer that spent its
	 * credits on them learns of it here (cq_poll's tx_kick sends it). */
	rx_maybe_update_credits(c);
}

/* The peer's RDMA WRITE with immediate landed in our sink.  It took one of
 * our receives and one sequence number (the immediate), like a message
 * without a header: it is checked in sequence, acknowledged like a control
 * message, and its byte count is the one our completion reports. */
void rx_on_write_imm(struct sdp_conn *c, uint32_t slot, uint32_t byte_len, uint32_t mseq)
{
	struct rx_entry *e;

	if (!receive_counts(c, slot))
		return;
	if (unbound(c)) {
		unbound_violation(c, "an RDMA WRITE");
		return;
	}
	if (mseq != c->rx_seq + 1 || ring_used(c->rx_head, c->rx_tail) >= c->buf_count) {
		protocol_violation(c, mseq != c->rx_seq + 1 ? "sequence gap" : "more messages than credits");
		return;
	}
	c->rx_seq = mseq;
	e = entry_at(c, c->rx_head++);
	*e = (struct rx_entry){ .seq = mseq, .slot = (uint16_t)slot, .consumed = true };
	conn_repost_recv(c, slot);
	zc_on_write_landed(c, byte_len);
	rx_advance(c);
	rx_maybe_update_credits(c);
}

size_t rx_copy_out(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t skip,
		   size_t len, bool peek)
{
	uint32_t pos = c->rx_tail, peek_off = 0;
	size_t copied = 0;
	int i = 0;

	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	while (copied < len && pos != c->rx_head && i < iovcnt) {
		struct rx_entry *e = entry_at(c, pos);
		size_t avail = e->is_data ? e->len - peek_off : 0, chunk;

		if (e->is_src && e->len) {
			/* Bytes at the peer: only what a READ already staged here. */
			size_t skipped = skip;
			for (int k = 0; k < i; k++)
				skipped += iov[k].iov_len;
			copied += zc_copy_staged(c, e, iov, iovcnt, skipped, len - copied, peek);
			break;
		}
		if (avail == 0) {
			pos++;
			peek_off = 0;
			continue;
		}
		chunk = avail;
		if (chunk > iov[i].iov_len - skip)
			chunk = iov[i].iov_len - skip;
		if (chunk > len - copied)
			chunk = len - copied;
		if (iov[i].iov_base)
			memcpy((uint8_t *)iov[i].iov_base + skip,
			       rx_buf(c, e->slot) + e->off + peek_off, chunk);
		copied += chunk;
		skip += chunk;
		if (skip == iov[i].iov_len) {
			i++;
			skip = 0;
		}
		if (peek) {
			peek_off += (uint32_t)chunk;
			continue;
		}
		e->off += (uint32_t)chunk;
		e->len -= (uint32_t)chunk;
		c->rx_bytes_ready -= chunk;
		if (c->st)
			atomic_fetch_add_explicit(&c->st->copy_bytes_received, chunk,
						  memory_order_relaxed);
		if (e->len == 0)
			e->consumed = true;
	}
	if (!peek && copied) {
		rx_advance(c);
		rx_maybe_update_credits(c);
		tx_kick(c);
	}
	return copied;
}

uint64_t rx_delivered_offset(const struct sdp_conn *c)
{
	uint64_t queued = 0;

	for (uint32_t pos = c->rx_tail; c->rx_ring && pos != c->rx_head; pos++) {
		const struct rx_entry *e = entry_at(c, pos);

		if (e->is_data || e->is_src)
			queued += e->len;
	}
	return c->rx_stream_off - queued;
}

static size_t staged_left(const struct sdp_conn *c)
{
	return c->stage_fill > c->stage_off ? c->stage_fill - c->stage_off : 0;
}

uint8_t *rx_copy_unread(const struct sdp_conn *c, size_t *len)
{
	size_t total = staged_left(c);
	uint8_t *out;

	*len = 0;
	for (uint32_t pos = c->rx_tail; c->rx_ring && pos != c->rx_head; pos++) {
		const struct rx_entry *e = entry_at(c, pos);

		if (e->is_data)
			total += e->len;
	}
	if (total == 0 || !(out = malloc(total)))
		return NULL;
	for (uint32_t pos = c->rx_tail; pos != c->rx_head; pos++) {
		const struct rx_entry *e = entry_at(c, pos);

		if (!e->is_data || !e->len)
			continue;
		memcpy(out + *len, rx_buf(c, e->slot) + e->off, e->len);
		*len += e->len;
	}
	if (staged_left(c)) {
		memcpy(out + *len, c->stage + c->stage_off, staged_left(c));
		*len += staged_left(c);
	}
	return out;
}

void rx_drop_unread(struct sdp_conn *c)
{
	c->rx_tail = c->rx_head;
	c->rx_bytes_ready = 0;
	c->stage_off = c->stage_fill = 0;
}
