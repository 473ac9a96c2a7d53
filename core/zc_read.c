/* Read zero-copy: the sender's SrcAvail and its wait for RdmaRdCompl (or
 * its cancel); the receiver's RDMA READ, direct or into the staging buffer. */
#include <errno.h>
#include <string.h>

#include "core/conn_internal.h"
#include "core/dev.h"
#include "core/mrcache.h"
#include "core/zc_internal.h"
#include "core/zcopy.h"

#define STAGE_SIZE      (256u * 1024u)
#define DIRECT_MIN      (16u * 1024u)   /* smaller direct READs are not worth a registration */

/* ------------------------------------------------------------- sender */

static bool src_answered(struct sdp_conn *c)
{
	return c->src.answered || c->hard_error;
}

/* Read zero-copy: expose exactly buf with remote read, announce it, wait. */
ssize_t zc_send_as_source(struct sdp_conn *c, const void *buf, size_t len, int timeout_ms,
			  uint64_t start_us)
{
	uint32_t n = len > MAX_ZC_LEN ? MAX_ZC_LEN : (uint32_t)len;
	struct zc_window *win = &c->win[ZC_WIN_SRC];
	struct mrc_entry *mre;
	int why = 0, rc;

	rc = zc_expose(c, win, buf, n, IBV_ACCESS_REMOTE_READ, &mre);
	if (rc != 0)
		return rc > 0 ? 0 : rc;
	c->src = (struct zc_src){ .active = true, .stream_off = c->tx_stream_off,
				  .addr = (uintptr_t)buf, .len = n, .rkey = win->rkey, .mre = mre };
	tx_queue_ctrl(c, SDP_MID_SRC_AVAIL);
	tx_kick(c);
	while (!c->src.answered && !c->carrier_dead && !c->hard_error && !c->src.cancel_sent) {
		int w = conn_wait(c, true, timeout_ms, start_us);

		cq_poll(c);
		if (w < 0)
			why = w; /* reported if nothing was taken, even if the answer crossed it */
		if (w < 0 && !c->src.answered) {
			/* A signal or SO_SNDTIMEO: withdraw; the answer says how much the peer took. */
			c->src.cancel_sent = true;
			tx_queue_ctrl(c, SDP_MID_SRC_CANCEL);
			tx_kick(c);
			COUNT(c, zcopy_cancels, 1);
		}
	}
	if (c->src.cancel_sent && !c->hard_error)
		zc_wait_answer(c, src_answered, "a SrcAvailCancel");
	zc_mw_close(c, win);
	mrcache_put(mre);
	c->src.active = false; /* zc_on_rd_compl advanced tx_stream_off */
	COUNT(c, zcopy_bytes_sent, c->src.consumed);
	COUNT(c, zcopy_ops, 1);
	conn_update_readiness(c, false);
	if (c->src.consumed) {
		/* A signal or timeout ended the call: the partial count goes back
		 * to the app now, as TCP returns it (core/conn_io.c). */
		c->zc_interrupted = why != 0;
		return c->src.consumed;
	}
	if (c->sw.started && !c->hard_error)
		return why; /* the stream moved to TCP: the bytes go there (buffer copy path),
			     * unless a signal or timeout ended the call first */
	if (c->carrier_dead || c->hard_error)
		return -(c->hard_error ? c->hard_error : ECONNRESET);
	/* Nothing taken: the signal (EINTR) or timeout (EAGAIN) that withdrew
	 * it (or that crossed the peer's answer), as TCP reports them; a peer
	 * that took nothing unasked leaves the bytes to buffer copy. */
	return why;
}

/* ----------------------------------------------------------- receiver */

static int post_read(struct sdp_conn *c, struct rx_entry *e, void *dst, uint32_t lkey, uint32_t n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)dst, .length = n, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = WR_ID(WR_READ, 0), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };

	wr.wr.rdma.remote_addr = e->raddr;
	wr.wr.rdma.rkey = e->rkey;
	return zc_post_wr(c, &wr);
}

struct rx_entry *zc_head_source(struct sdp_conn *c)
{
	for (uint32_t pos = c->rx_tail; pos != c->rx_head; pos++) {
		struct rx_entry *e = &c->rx_ring[pos % c->buf_count];

		if (e->is_src && e->len)
			return e;
		if (e->is_data && e->len)
			return NULL; /* buffered bytes come first */
	}
	return NULL;
}

/* The SrcAvail not answered yet, if any.  There is at most one, and it is
 * the last thing in the stream: nothing may follow it until it is answered
 * (the sender sends nothing in between), so cutting it short by a cancel
 * is cutting the stream's end. */
static struct rx_entry *unanswered_source(struct sdp_conn *c)
{
	for (uint32_t pos = c->rx_tail; pos != c->rx_head; pos++) {
		struct rx_entry *e = &c->rx_ring[pos % c->buf_count];

		if (e->is_src && !e->answered)
			return e;
	}
	return NULL;
}

bool zc_rx_source_unanswered(struct sdp_conn *c)
{
	return unanswered_source(c) != NULL;
}

/* The entry of the READ in flight or just finished: found again by its
 * sequence number after every wait, never by a pointer kept across one. */
static struct rx_entry *read_source(struct sdp_conn *c)
{
	for (uint32_t pos = c->rx_tail; pos != c->rx_head; pos++) {
		struct rx_entry *e = &c->rx_ring[pos % c->buf_count];

		if (e->is_src && e->seq == c->rd.seq)
			return e;
	}
	return NULL;
}

static void source_cut(struct sdp_conn *c, struct rx_entry *e);

static int ensure_stage(struct sdp_conn *c)
{
	int err = 0;

	if (c->stage)
		return 0;
	c->stage = dev_alloc_registered(c->dev, STAGE_SIZE, &c->stage_mr, &err);
	if (!c->stage)
		return err;
	c->stage_len = STAGE_SIZE;
	return 0;
}

static int post_source_read(struct sdp_conn *c, struct rx_entry *e, void *dst, uint32_t lkey,
			    uint32_t n, bool direct, struct mrc_entry *mre)
{
	if (post_read(c, e, dst, lkey, n) != 0)
		return -1;
	c->rd = (struct zc_read){ .active = true, .direct = direct, .len = n, .mre = mre,
				  .seq = e->seq };
	e->raddr += n;
	e->unread -= n;
	return 0;
}

void zc_stage_kick(struct sdp_conn *c)
{
	struct rx_entry *e;
	uint32_t n;

	if (c->rd.active || c->carrier_dead || !c->qp || c->stage_fill > c->stage_off)
		return;
	e = zc_head_source(c);
	if (!e || !e->unread)
		return;
	if (ensure_stage(c) != 0) {
		/* No staging buffer (the pinned-memory budget is spent, or
		 * RLIMIT_MEMLOCK): decline the rest of this source as a cancel
		 * cuts it.  The RdmaRdCompl says what we took; the sender sends
		 * the rest by buffer copy. */
		source_cut(c, e);
		return;
	}
	n = e->unread < c->stage_len ? e->unread : c->stage_len;
	if (post_source_read(c, e, c->stage, c->stage_mr->lkey, n, false, NULL) != 0) {
		close_ev_carrier_failed(c, EIO, "posting an RDMA READ failed");
		return;
	}
	c->stage_off = c->stage_fill = 0;
}

static bool read_done(struct sdp_conn *c)
{
	return !c->rd.active;
}

/* RdmaRdCompl once every byte the SrcAvail still claims is our app's: the
 * sender keeps its buffer until then, so a switch to TCP can always resend
 * what we have not delivered (core/switch.c). */
static void source_maybe_answer(struct sdp_conn *c, struct rx_entry *e)
{
	if (e->answered || e->unread || e->len || (c->rd.active && c->rd.seq == e->seq))
		return;
	e->answered = true;
	c->rd_compl_bytes = e->total;
	c->rd_compl_off = e->stream_off;
	tx_queue_ctrl(c, SDP_MID_RDMA_RD_COMPL);
	c->src_cancel_pending = false;
	tx_kick(c);
}

/* The source's bytes are all with our app: its place in the ring returns.
 * Its ack goes out now: the RdmaRdCompl may have to wait for a credit that
 * only this ack, in a credit update, can bring back. */
static void source_maybe_consumed(struct sdp_conn *c, struct rx_entry *e)
{
	source_maybe_answer(c, e);
	if (!e->answered || e->consumed)
		return;
	e->consumed = true;
	rx_entry_consumed(c);
	tx_kick(c);
}

/* A blocking recv READs straight into the app's buffer, at most
 * MAX_ZC_STEP at a time.  The READ writes into that buffer, so the call
 * does not return before it completed or the QP failed (zc_wait_answer).
 * zc_read_completed does the accounting; the entry may be gone by then. */
static ssize_t recv_direct(struct sdp_conn *c, struct rx_entry *e, void *dst, size_t room)
{
	uint32_t n = e->unread < room ? e->unread : (uint32_t)room;
	struct mrc_entry *mre;
	bool hit, done;

	if (n > MAX_ZC_STEP)
		n = MAX_ZC_STEP;
	if (c->rd.active || c->stage_fill > c->stage_off || e->unread != e->len ||
	    !zc_channel_sound(c) || (n < DIRECT_MIN && n < e->unread))
		return 0;
	if (mrcache_get(c->dev, dst, n, true, &mre, &hit) != 0)
		return 0;
	zc_count_cache(c, hit);
	if (post_source_read(c, e, dst, mre->mr->lkey, n, true, mre) != 0) {
		mrcache_put(mre);
		close_ev_carrier_failed(c, EIO, "posting an RDMA READ failed");
		return -ECONNRESET;
	}
	e = NULL; /* not valid after the wait */
	zc_wait_answer(c, read_done, "an RDMA READ");
	if (c->rd.active)
		qp_force_error(c); /* the carrier died first: nothing completes now */
	mrcache_put(mre);
	c->rd.mre = NULL;
	done = c->rd.done;
	c->rd.done = false;
	if (!done)
		return c->sw.started && !c->hard_error ? 0 : -ECONNRESET;
	COUNT(c, zcopy_bytes_received, n);
	COUNT(c, bytes_received, n);
	return n;
}

size_t zc_copy_staged(struct sdp_conn *c, struct rx_entry *e, const struct iovec *iov, int iovcnt,
		      size_t skip, size_t len, bool peek)
{
	uint32_t off = c->stage_off;
	size_t copied = 0;
	int i = 0;

	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	while (copied < len && i < iovcnt && off < c->stage_fill) {
		size_t chunk = c->stage_fill - off;

		if (chunk > iov[i].iov_len - skip)
			chunk = iov[i].iov_len - skip;
		if (chunk > len - copied)
			chunk = len - copied;
		if (iov[i].iov_base)
			memcpy((uint8_t *)iov[i].iov_base + skip, c->stage + off, chunk);
		off += (uint32_t)chunk;
		copied += chunk;
		skip += chunk;
		if (skip == iov[i].iov_len) {
			i++;
			skip = 0;
		}
	}
	if (peek || !copied)
		return copied;
	c->stage_off = off;
	e->len -= (uint32_t)copied;
	c->rx_bytes_ready -= copied;
	COUNT(c, copy_bytes_received, copied);
	if (c->stage_off == c->stage_fill) {
		c->stage_off = c->stage_fill = 0;
		source_maybe_consumed(c, e);
		if (c->rx_waiters == 0)
			zc_stage_kick(c);
	}
	return copied;
}

ssize_t zc_recv_direct(struct sdp_conn *c, struct rx_entry *e, void *dst, size_t room)
{
	ssize_t r;

	c->zc_threads++;
	r = recv_direct(c, e, dst, room);
	zc_leave(c);
	return r;
}

/* ------------------------------------------------------------ messages */

bool zc_on_src_avail(struct sdp_conn *c, const struct sdp_ext *x, struct rx_entry *e)
{
	if (c->close_state == CLOSE_ABORTED)
		return true; /* after a reset: nobody's bytes, never READ (e stays consumed) */
	/* CLIMB_HALF: the peer is back on RDMA first; its SrcAvail waits behind
	 * the TCP bytes still to read here (core/climb.c). */
	if (x->a == 0 || x->a > MAX_ZC_LEN || x->d != c->rx_stream_off || unanswered_source(c) ||
	    c->rx_eof || (c->phase != CONN_OPEN && c->phase != CONN_CLIMB_HALF)) {
		zc_violation(c, "SrcAvail out of place");
		return false;
	}
	e->is_src = true;
	e->consumed = false;
	e->answered = false;
	e->total = e->len = e->unread = x->a;
	e->stream_off = x->d;
	e->raddr = x->c;
	e->rkey = x->b;
	c->rx_stream_off += x->a;
	if (c->rx_waiters)
		conn_update_readiness(c, true); /* a blocked recv READs it directly */
	else
		zc_stage_kick(c);
	return true;
}

bool zc_on_rd_compl(struct sdp_conn *c, const struct sdp_ext *x)
{
	if (!c->src.active || c->src.answered || x->a > c->src.len || x->d != c->src.stream_off) {
		zc_violation(c, "RdmaRdCompl for no SrcAvail");
		return false;
	}
	c->src.consumed = x->a;
	c->src.answered = true;
	/* Now, not when the app thread wakes: a SinkAvail right behind this
	 * message names the offset after these bytes. */
	c->tx_stream_off += x->a;
	conn_wake_waiters(c);
	conn_update_readiness(c, false);
	return true;
}

/* The sender withdrew its SrcAvail: what we READ (or are READing) stays
 * ours and the rest leaves the stream.  The source is the stream's last
 * entry (nothing may follow it unanswered), so its unread bytes are the
 * stream's end.  With a READ in flight the cut waits for its completion. */
static void source_cut(struct sdp_conn *c, struct rx_entry *e)
{
	c->rx_stream_off -= e->unread;
	e->total -= e->unread;
	e->len -= e->unread;
	e->unread = 0;
	source_maybe_consumed(c, e);
}

bool zc_on_src_cancel(struct sdp_conn *c, const struct sdp_ext *x)
{
	struct rx_entry *e = unanswered_source(c);

	if (!e || x->d != e->stream_off)
		return true; /* answered already: the RdmaRdCompl crossed it */
	c->src_cancel_pending = true;
	if (c->rd.active && c->rd.seq == e->seq)
		return true; /* cut when the READ completes (zc_read_completed) */
	source_cut(c, e);
	return true;
}

/* ---------------------------------------------------------- completions */

/* Our READ ended.  Its entry is found again by sequence: a cancel may
 * have answered and cut it meanwhile, but never while this READ was in
 * flight (zc_on_src_cancel waits for it), so it is still in the ring. */
void zc_read_completed(struct sdp_conn *c, bool ok)
{
	struct rx_entry *e = read_source(c);

	c->rd.active = false;
	if (!ok || !e) {
		close_ev_carrier_failed(c, ECONNRESET, "an RDMA READ failed");
		return;
	}
	if (c->rd.direct) {
		e->len -= c->rd.len; /* the app's bytes now: its recv returns them */
		c->rd.done = true;
	} else {
		c->stage_fill = c->rd.len;
		c->rx_bytes_ready += c->rd.len;
	}
	if (c->src_cancel_pending && !e->answered)
		source_cut(c, e);
	else
		source_maybe_consumed(c, e);
	conn_update_readiness(c, true);
}
