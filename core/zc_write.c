/* Write zero-copy: the receiver's SinkAvail (or its cancel) and the count
 * its own completion gives; the sender's RDMA WRITE with immediate, or decline. */
#include <endian.h>
#include <errno.h>
#include <sys/socket.h>

#include "core/conn_internal.h"
#include "core/link.h"
#include "core/dev.h"
#include "core/mrcache.h"
#include "core/zc_internal.h"
#include "core/zcopy.h"

/* ------------------------------------------------------------- sender */

/* The WRITE completed and its RdmaWrCompl landed (only then is a switch
 * sure the peer has the bytes; see core/switch.c). */
static bool write_done(struct sdp_conn *c)
{
	return !c->write_active && !c->wr_unconfirmed;
}

/* The peer's sink at our offset.  We write a sink whole or not at all: the
 * receiver takes the byte count from its own completion and accepts only a
 * WRITE that filled the window, which no WRITE can do without covering every
 * byte of it.  A send shorter than the sink declines it (SinkCancelAck) and
 * goes as a SrcAvail, which the waiting receiver READs directly. */
bool zc_sink_usable(struct sdp_conn *c, size_t len)
{
	if (!c->psink.valid || c->psink.stream_off != c->tx_stream_off)
		return false;
	if (len >= c->psink.len)
		return true;
	c->psink.valid = false;
	c->sink_ack_off = c->psink.stream_off;
	tx_queue_ctrl(c, SDP_MID_SINK_CANCEL_ACK);
	return false;
}

/* Write zero-copy: the peer waits with a sink at our stream offset.  One
 * RDMA WRITE with immediate fills it; the immediate is the next message
 * sequence number, so the WRITE takes a credit (and a receive) like a
 * message, and its completion at the peer says how many bytes landed. */
ssize_t zc_send_into_sink(struct sdp_conn *c, const void *buf)
{
	uint32_t n = c->psink.len;
	struct mrc_entry *mre;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = WR_ID(WR_WRITE, 0), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED };
	bool hit;

	if (mrcache_get(c->dev, buf, n, false, &mre, &hit) != 0)
		return 0;
	zc_count_cache(c, hit);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = n, .lkey = mre->mr->lkey };
	wr.wr.rdma.remote_addr = c->psink.addr;
	wr.wr.rdma.rkey = c->psink.rkey;
	wr.imm_data = htobe32(c->tx_seq + 1);
	if (zc_post_wr(c, &wr) != 0) {
		mrcache_put(mre);
		close_ev_carrier_failed(c, EIO, "posting an RDMA WRITE failed");
		return -ECONNRESET;
	}
	c->tx_seq++;
	c->psink.valid = false;
	c->write_active = true;
	c->wr_unconfirmed = true;
	c->wr_compl_bytes = n;
	c->tx_stream_off += n;
	zc_wait_answer(c, write_done, "an RDMA WRITE");
	mrcache_put(mre);
	if (c->write_rolled_back) {
		c->write_rolled_back = false; /* the switch resends these bytes: buffer copy path */
		return 0;
	}
	if (c->carrier_dead && c->wr_unconfirmed) {
		c->wr_unconfirmed = false;
		return -ECONNRESET;
	}
	COUNT(c, zcopy_bytes_sent, n);
	COUNT(c, zcopy_ops, 1);
	return n;
}

void zc_note_bcopy(struct sdp_conn *c, size_t bytes)
{
	if (c->psink.valid && c->psink.stream_off == c->tx_stream_off && bytes) {
		/* These bytes take the sink's place in the stream: it is void. */
		c->psink.valid = false;
		c->sink_ack_off = c->psink.stream_off;
		tx_queue_ctrl(c, SDP_MID_SINK_CANCEL_ACK);
	}
	c->tx_stream_off += bytes;
}

/* ---------------------------------------------------------------- sink */

bool zc_sink_eligible(struct sdp_conn *c, size_t room, int flags)
{
	return c->policy.zcopy_thresh > 0 && room >= (size_t)c->policy.zcopy_thresh && zc_channel_sound(c) &&
	       !(flags & (MSG_PEEK | MSG_TRUNC)) && !c->sink.active && !c->win[ZC_WIN_SINK].busy &&
	       c->rx_bytes_ready == 0 && !zc_head_source(c) && !c->rx_eof && c->dev &&
	       c->dev->mw_type2 && tx_credits(c) >= 2;
}

/* Bytes at the sink's offset that came another way (buffer copy or a
 * SrcAvail) prove the peer gave the sink up: it sends the stream strictly
 * in order and writes into a sink only at exactly its offset.  The window
 * can close without waiting for the peer's SinkCancelAck, which is then
 * ignored.  Waiting for it instead could deadlock: the ack may need a
 * credit that only our consuming those very bytes would return. */
static bool sink_void(struct sdp_conn *c)
{
	if (c->rx_bytes_ready == 0 && !zc_head_source(c))
		return false;
	c->sink_voided = true;
	c->sink_void_off = c->sink.stream_off;
	if (!c->sink.cancel_sent)
		COUNT(c, zcopy_cancels, 1);
	return true;
}

/* After our SinkCancel: the peer's answer (its WRITE, or SinkCancelAck),
 * or bytes at the sink's offset that came another way. */
static bool sink_settled(struct sdp_conn *c)
{
	return c->sink.answered || c->hard_error || c->rx_eof || sink_void(c);
}

static ssize_t recv_into_sink(struct sdp_conn *c, void *dst, size_t room, int timeout_ms,
			      uint64_t start_us)
{
	uint32_t n = room > MAX_ZC_STEP ? MAX_ZC_STEP : (uint32_t)room;
	struct zc_window *win = &c->win[ZC_WIN_SINK];
	struct mrc_entry *mre;
	ssize_t result;
	int why = 0, rc;

	if (!zc_mw_ready(c, win) || !link_sink_claim(c))
		return 0;
	rc = zc_expose(c, win, dst, n, IBV_ACCESS_REMOTE_WRITE, &mre);
	if (rc != 0) {
		link_sink_release(c);
		return rc > 0 ? 0 : rc;
	}
	c->sink = (struct zc_sink){ .active = true, .stream_off = c->rx_stream_off,
				    .addr = (uintptr_t)dst, .len = n, .rkey = win->rkey, .mre = mre };
	tx_queue_ctrl(c, SDP_MID_SINK_AVAIL);
	tx_kick(c);
	while (!c->sink.answered && !c->carrier_dead && !c->hard_error && !c->rx_eof &&
	       !c->sink.cancel_sent) {
		int w = conn_wait(c, false, timeout_ms, start_us);

		if (w < 0)
			why = w; /* reported if nothing was written, even if the answer crossed it */
		cq_poll(c);
		if (!c->sink.answered && sink_void(c))
			break; /* a signal that came with the bytes still ends the call */
		if (w < 0 && !c->sink.answered) {
			/* A signal or timeout: withdraw the sink, wait for the answer. */
			c->sink.cancel_sent = true;
			tx_queue_ctrl(c, SDP_MID_SINK_CANCEL);
			tx_kick(c);
			COUNT(c, zcopy_cancels, 1);
		}
	}
	if (c->sink.cancel_sent)
		zc_wait_answer(c, sink_settled, "a SinkCancel");
	zc_mw_close(c, win);
	link_sink_release(c); /* no remote access is left: another stream may offer one */
	mrcache_put(mre);
	c->sink.active = false;
	result = c->sink.written;
	if (result) {
		COUNT(c, zcopy_bytes_received, (uint64_t)result);
		COUNT(c, bytes_received, (uint64_t)result);
		COUNT(c, zcopy_ops, 1);
	} else if (why && !c->rx_eof) {
		/* Withdrawn by a signal or SO_RCVTIMEO: reported as TCP does.
		 * Bytes that came another way meanwhile go back first (conn_recv
		 * takes them), and a MSG_WAITALL call ends with them. */
		result = why;
	}
	return result;
}

ssize_t zc_recv_sink(struct sdp_conn *c, void *dst, size_t room, int timeout_ms, uint64_t start_us)
{
	ssize_t r;

	c->zc_threads++;
	r = recv_into_sink(c, dst, room, timeout_ms, start_us);
	zc_leave(c);
	return r;
}

/* ------------------------------------------------------------ messages */

bool zc_on_sink_avail(struct sdp_conn *c, const struct sdp_ext *x)
{
	/* Behind our offset is a normal race (our bytes crossed it on the wire);
	 * ahead of it the peer would be waiting for bytes we never sent. */
	if (x->a == 0 || x->a > MAX_ZC_LEN || x->d > c->tx_stream_off) {
		zc_violation(c, "SinkAvail out of place");
		return false;
	}
	if (c->psink.valid || zc_tx_busy(c) || tx_has_unposted(c) || x->d != c->tx_stream_off) {
		c->sink_ack_off = x->d; /* not usable: say so at once */
		tx_queue_ctrl(c, SDP_MID_SINK_CANCEL_ACK);
		return true;
	}
	c->psink = (struct zc_peer_sink){ .valid = true, .stream_off = x->d, .addr = x->c,
					  .len = x->a, .rkey = x->b };
	conn_update_readiness(c, false);
	return true;
}

/* Our sink was written: the count is our own completion's (the RDMA WRITE
 * with immediate), never the peer's word.  A WRITE that did not fill the
 * sink, or that came with no sink waiting, breaks the protocol: a filled
 * sink is the only proof that every byte we return was written. */
void zc_on_write_landed(struct sdp_conn *c, uint32_t bytes)
{
	if (!c->sink.active || c->sink.answered || bytes != c->sink.len ||
	    c->rx_stream_off != c->sink.stream_off) {
		zc_violation(c, "RDMA WRITE that did not fill a SinkAvail");
		return;
	}
	c->sink.written = bytes;
	c->sink.answered = true;
	conn_wake_waiters(c);
	c->rx_stream_off += bytes;
	conn_update_readiness(c, true);
}

bool zc_on_sink_cancel(struct sdp_conn *c, const struct sdp_ext *x)
{
	if (c->psink.valid && c->psink.stream_off == x->d) {
		c->psink.valid = false;
		c->sink_ack_off = x->d;
		tx_queue_ctrl(c, SDP_MID_SINK_CANCEL_ACK);
	}
	return true; /* otherwise already answered (RdmaWrCompl or SinkCancelAck) */
}

bool zc_on_sink_cancel_ack(struct sdp_conn *c, const struct sdp_ext *x)
{
	bool for_active = c->sink.active && !c->sink.answered && x->d == c->sink.stream_off;

	if (!for_active && c->sink_voided && x->d <= c->sink_void_off)
		return true; /* the late answer to a sink we already gave up */
	if (!for_active) {
		zc_violation(c, "SinkCancelAck for no SinkAvail");
		return false;
	}
	c->sink.answered = true;
	conn_wake_waiters(c);
	conn_update_readiness(c, true);
	return true;
}
