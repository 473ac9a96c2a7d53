/* Zero-copy transfers: SrcAvail/RDMA READ/RdmaRdCompl and
 * SinkAvail/RDMA WRITE/RdmaWrCompl, their cancels, the per-connection
 * memory window and the staging buffer.  See core/zcopy.h. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "core/config.h"
#include "core/conn_internal.h"
#include "core/dev.h"
#include "core/log.h"
#include "core/mrcache.h"
#include "core/zcopy.h"
#include "preload/init.h"

#define STAGE_SIZE      (256u * 1024u)
#define DIRECT_MIN      (16u * 1024u)   /* smaller direct READs are not worth a registration */
#define MAX_ZC_LEN      (1u << 30)      /* one SrcAvail moves at most 1 GiB */
/* One direct READ, and one sink, move at most this much: a transfer then
 * takes well under SDPSHIM_ZCOPY_ANSWER_MS even on a slow link, so the
 * bound on waiting for the peer never cuts an honest transfer short. */
#define MAX_ZC_STEP     (8u << 20)

/* Counters live in the socket's stats slot; a closed socket has none. */
#define COUNT(c, field, n)                                                                  \
	do {                                                                                \
		if ((c)->st)                                                                \
			atomic_fetch_add_explicit(&(c)->st->field, (uint64_t)(n),           \
						  memory_order_relaxed);                    \
	} while (0)

static void count_cache(struct sdp_conn *c, bool hit)
{
	if (hit)
		COUNT(c, mr_cache_hits, 1);
	else
		COUNT(c, mr_cache_misses, 1);
}

static void violation(struct sdp_conn *c, const char *what)
{
	sdp_warn("peer violated the zero-copy protocol (%s); aborting the connection", what);
	c->fail_reason = SDP_REASON_PROTOCOL;
	close_ev_abort(c, ECONNRESET, true);
}

/* ------------------------------------------------------------ the window */

static bool mw_ready(struct sdp_conn *c, struct zc_window *w)
{
	if (w->mw)
		return true;
	if (!c->dev || !c->dev->mw_type2)
		return false;
	SDP_GUARD_ENTER();
	w->mw = ibv_alloc_mw(c->dev->pd, IBV_MW_TYPE_2);
	SDP_GUARD_LEAVE();
	if (!w->mw) {
		sdp_info("cannot allocate a memory window (%s): zero-copy off for this connection",
			 strerror(errno));
		c->zcopy_thresh = 0;
		return false;
	}
	w->rkey = w->mw->rkey;
	return true;
}

static int post_wr(struct sdp_conn *c, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc;

	SDP_GUARD_ENTER();
	rc = ibv_post_send(c->qp, wr, &bad);
	SDP_GUARD_LEAVE();
	if (rc) {
		sdp_warn("ibv_post_send of a zero-copy request failed: %s", strerror(rc));
		return -rc;
	}
	conn_note_post(c);
	return 0;
}

/* Binds the window to exactly [addr, addr+len) with one remote access. */
static int mw_bind(struct sdp_conn *c, struct zc_window *w, struct mrc_entry *mre, uint64_t addr,
		   uint32_t len, int access)
{
	struct ibv_send_wr wr = {
		.wr_id = WR_ID(WR_BIND, w - c->win),
		.opcode = IBV_WR_BIND_MW,
		.send_flags = IBV_SEND_SIGNALED,
	};
	int rc;

	w->rkey = ibv_inc_rkey(w->rkey);
	sdp_debug("bind window %#x over [%#llx, +%u) of MR [%#lx, %#lx) access %#x", w->rkey,
		  (unsigned long long)addr, len, (unsigned long)mre->start, (unsigned long)mre->end,
		  access);
	wr.bind_mw.mw = w->mw;
	wr.bind_mw.rkey = w->rkey;
	wr.bind_mw.bind_info.mr = mre->mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (unsigned)access;
	rc = post_wr(c, &wr);
	if (rc == 0)
		w->busy = w->bound = true;
	return rc;
}

static int mw_invalidate(struct sdp_conn *c, struct zc_window *w)
{
	struct ibv_send_wr wr = {
		.wr_id = WR_ID(WR_INV, w - c->win),
		.opcode = IBV_WR_LOCAL_INV,
		.send_flags = IBV_SEND_SIGNALED,
		.invalidate_rkey = w->rkey,
	};
	int rc = post_wr(c, &wr);

	if (rc == 0)
		w->busy = true;
	return rc;
}

/* The peer (or our own send queue) did not answer in time: the QP goes
 * to the error state, which ends every remote access to our windows and
 * flushes what is outstanding; the stream moves to TCP or is reset. */
static void answer_overdue(struct sdp_conn *c, const char *what)
{
	sdp_warn("no answer to %s within SDPSHIM_ZCOPY_ANSWER_MS=%u ms; failing the RDMA channel",
		 what, sdp_tun.zcopy_answer_ms);
	close_ev_carrier_failed(c, ETIMEDOUT, what);
	qp_force_error(c); /* even when the carrier was already given up */
}

/* Waits, ignoring signals, until pred holds or the carrier is gone: for
 * operations that write into or expose the app's buffer.  At most
 * SDPSHIM_ZCOPY_ANSWER_MS: then the QP is failed (answer_overdue), after
 * which nothing can touch the buffer.  Every completion the progress thread
 * handles broadcasts c->cond. */
static void wait_answer(struct sdp_conn *c, bool (*pred)(struct sdp_conn *), const char *what)
{
	uint64_t deadline = conn_now_us() + (uint64_t)sdp_tun.zcopy_answer_ms * 1000u;

	while (!pred(c) && !c->carrier_dead && c->qp) {
		struct timespec until;

		cq_poll(c);
		if (pred(c))
			break;
		if (conn_now_us() >= deadline) {
			answer_overdue(c, what);
			break;
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 20 * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&c->cond, &c->lock, &until);
	}
}

static bool src_win_idle(struct sdp_conn *c)
{
	return !c->win[ZC_WIN_SRC].busy;
}

static bool sink_win_idle(struct sdp_conn *c)
{
	return !c->win[ZC_WIN_SINK].busy;
}

/* A QP we moved to the error state accepts no remote access (a dead
 * carrier always is one: close_ev_carrier_failed). */
static bool windows_unreachable(const struct sdp_conn *c)
{
	return c->qp_in_error || !c->qp;
}

/* Ends the window's exposure before the call that exposed the app's
 * buffer returns: invalidate it and wait until that is done.  No answer in
 * time, or a failed post, fails the QP instead, which ends it too. */
static void mw_close(struct sdp_conn *c, struct zc_window *w)
{
	bool (*idle)(struct sdp_conn *) = w == &c->win[ZC_WIN_SRC] ? src_win_idle : sink_win_idle;

	wait_answer(c, idle, "a memory window bind");
	if (!w->bound)
		return;
	w->bound = false;
	if (windows_unreachable(c))
		return;
	if (mw_invalidate(c, w) != 0) {
		qp_force_error(c);
		close_ev_carrier_failed(c, EIO, "posting a window invalidate failed");
		return;
	}
	wait_answer(c, idle, "a memory window invalidate");
	if (!idle(c))
		qp_force_error(c); /* the carrier died first: nothing completes now */
}

/* ------------------------------------------------------------- sender */

/* No window is bound or offered on a connection that is reset (by either
 * end, or for a protocol violation) or whose carrier is gone. */
static bool channel_sound(const struct sdp_conn *c)
{
	return c->phase == CONN_OPEN && !c->carrier_dead && !c->qp_in_error && !c->hard_error &&
	       c->close_state != CLOSE_ABORTED && !c->sw_started;
}

bool zc_send_eligible(struct sdp_conn *c, size_t len)
{
	return c->zcopy_thresh > 0 && len >= (size_t)c->zcopy_thresh && channel_sound(c) && c->dev &&
	       c->dev->mw_type2;
}

bool zc_tx_busy(const struct sdp_conn *c)
{
	return c->src.active || c->write_active;
}

/* The WRITE completed and its RdmaWrCompl landed (only then is a switch
 * sure the peer has the bytes; see core/switch.c). */
static bool write_done(struct sdp_conn *c)
{
	return !c->write_active && !c->wr_unconfirmed;
}

static bool src_answered(struct sdp_conn *c)
{
	return c->src.answered || c->hard_error;
}

static bool ready_to_zcopy(struct sdp_conn *c)
{
	return !tx_has_unposted(c) && !zc_tx_busy(c) && !c->win[ZC_WIN_SRC].busy &&
	       tx_credits(c) >= 2;
}

/* The peer's sink at our offset.  We write a sink whole or not at all: the
 * receiver takes the byte count from its own completion and accepts only a
 * WRITE that filled the window, which no WRITE can do without covering every
 * byte of it.  A send shorter than the sink declines it (SinkCancelAck) and
 * goes as a SrcAvail, which the waiting receiver READs directly. */
static bool sink_usable(struct sdp_conn *c, size_t len)
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
static ssize_t send_into_sink(struct sdp_conn *c, const void *buf)
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
	count_cache(c, hit);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = n, .lkey = mre->mr->lkey };
	wr.wr.rdma.remote_addr = c->psink.addr;
	wr.wr.rdma.rkey = c->psink.rkey;
	wr.imm_data = htobe32(c->tx_seq + 1);
	if (post_wr(c, &wr) != 0) {
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
	wait_answer(c, write_done, "an RDMA WRITE");
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

/* Read zero-copy: expose exactly buf with remote read, announce it, wait. */
static ssize_t send_as_source(struct sdp_conn *c, const void *buf, size_t len, int timeout_ms,
			      uint64_t start_us)
{
	uint32_t n = len > MAX_ZC_LEN ? MAX_ZC_LEN : (uint32_t)len;
	struct zc_window *win = &c->win[ZC_WIN_SRC];
	struct mrc_entry *mre;
	int why = 0;
	bool hit;

	if (mrcache_get(c->dev, buf, n, false, &mre, &hit) != 0)
		return 0;
	count_cache(c, hit);

	if (mw_bind(c, win, mre, (uintptr_t)buf, n, IBV_ACCESS_REMOTE_READ) != 0) {
		mrcache_put(mre);
		close_ev_carrier_failed(c, EIO, "binding a read window failed");
		return -ECONNRESET;
	}
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
		wait_answer(c, src_answered, "a SrcAvailCancel");
	mw_close(c, win);
	mrcache_put(mre);
	c->src.active = false; /* on_rd_compl advanced tx_stream_off */
	COUNT(c, zcopy_bytes_sent, c->src.consumed);
	COUNT(c, zcopy_ops, 1);
	conn_update_readiness(c, false);
	if (c->src.consumed) {
		/* A signal or timeout ended the call: the partial count goes back
		 * to the app now, as TCP returns it (core/conn_io.c). */
		c->zc_interrupted = why != 0;
		return c->src.consumed;
	}
	if (c->sw_started && !c->hard_error)
		return why; /* the stream moved to TCP: the bytes go there (buffer copy path),
			     * unless a signal or timeout ended the call first */
	if (c->carrier_dead || c->hard_error)
		return -(c->hard_error ? c->hard_error : ECONNRESET);
	/* Nothing taken: the signal (EINTR) or timeout (EAGAIN) that withdrew
	 * it (or that crossed the peer's answer), as TCP reports them; a peer
	 * that took nothing unasked leaves the bytes to buffer copy. */
	return why;
}

/* After a non-blocking attempt the peer did not serve in time, this many
 * non-blocking writes use buffer copy (a slow reader must not make every
 * write of an event loop wait out the bound). */
#define NB_BACKOFF_WRITES 8

static ssize_t zc_send_nonblocking(struct sdp_conn *c, const void *buf, size_t len, int wait_ms)
{
	ssize_t r;

	if (c->zc_nb_backoff) {
		c->zc_nb_backoff--;
		return 0;
	}
	if (!ready_to_zcopy(c) || !channel_sound(c) || !mw_ready(c, &c->win[ZC_WIN_SRC]))
		return 0;
	if (sink_usable(c, len))
		return send_into_sink(c, buf);
	r = send_as_source(c, buf, len, wait_ms, conn_now_us());
	if (r > 0 || r == -ECONNRESET || c->carrier_dead || c->hard_error)
		return r;
	c->zc_nb_backoff = NB_BACKOFF_WRITES;
	return 0;
}

static ssize_t send_zero_copy(struct sdp_conn *c, const void *buf, size_t len, bool nonblock,
			      int timeout_ms, uint64_t start_us)
{
	if (nonblock)
		return zc_send_nonblocking(c, buf, len, timeout_ms);
	while (!ready_to_zcopy(c)) {
		int w;

		if (c->carrier_dead || c->hard_error || c->phase != CONN_OPEN)
			return 0; /* the caller's buffer-copy path reports the state */
		/* Bytes held back for an ack, or no credit for a SrcAvail: the
		 * socket stays writable, so waiting for that here would spin.
		 * These bytes take the buffer-copy path, which waits for room
		 * (fuzz_zcopy found the spin with a peer that spent our credits). */
		if (conn_writable_locked(c))
			return 0;
		w = conn_wait(c, true, timeout_ms, start_us);
		cq_poll(c);
		if (w < 0)
			return w;
	}
	if (!channel_sound(c) || !mw_ready(c, &c->win[ZC_WIN_SRC]))
		return 0;
	if (sink_usable(c, len))
		return send_into_sink(c, buf);
	return send_as_source(c, buf, len, timeout_ms, start_us);
}

/* ----------------------------------------------------------- receiver */

static int post_read(struct sdp_conn *c, struct rx_entry *e, void *dst, uint32_t lkey, uint32_t n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)dst, .length = n, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = WR_ID(WR_READ, 0), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };

	wr.wr.rdma.remote_addr = e->raddr;
	wr.wr.rdma.rkey = e->rkey;
	return post_wr(c, &wr);
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
		close_ev_abort(c, ENOMEM, true);
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
 * does not return before it completed or the QP failed (wait_answer).
 * read_completed does the accounting; the entry may be gone by then. */
static ssize_t recv_direct(struct sdp_conn *c, struct rx_entry *e, void *dst, size_t room)
{
	uint32_t n = e->unread < room ? e->unread : (uint32_t)room;
	struct mrc_entry *mre;
	bool hit, done;

	if (n > MAX_ZC_STEP)
		n = MAX_ZC_STEP;
	if (c->rd.active || c->stage_fill > c->stage_off || e->unread != e->len || !channel_sound(c) ||
	    (n < DIRECT_MIN && n < e->unread))
		return 0;
	if (mrcache_get(c->dev, dst, n, true, &mre, &hit) != 0)
		return 0;
	count_cache(c, hit);
	if (post_source_read(c, e, dst, mre->mr->lkey, n, true, mre) != 0) {
		mrcache_put(mre);
		close_ev_carrier_failed(c, EIO, "posting an RDMA READ failed");
		return -ECONNRESET;
	}
	e = NULL; /* not valid after the wait */
	wait_answer(c, read_done, "an RDMA READ");
	if (c->rd.active)
		qp_force_error(c); /* the carrier died first: nothing completes now */
	mrcache_put(mre);
	c->rd.mre = NULL;
	done = c->rd.done;
	c->rd.done = false;
	if (!done)
		return c->sw_started && !c->hard_error ? 0 : -ECONNRESET;
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

/* ---------------------------------------------------------------- sink */

bool zc_sink_eligible(struct sdp_conn *c, size_t room, int flags)
{
	return c->zcopy_thresh > 0 && room >= (size_t)c->zcopy_thresh && channel_sound(c) &&
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
	int why = 0;
	bool hit;

	if (!mw_ready(c, win) || mrcache_get(c->dev, dst, n, true, &mre, &hit) != 0)
		return 0;
	count_cache(c, hit);
	if (mw_bind(c, win, mre, (uintptr_t)dst, n, IBV_ACCESS_REMOTE_WRITE) != 0) {
		mrcache_put(mre);
		close_ev_carrier_failed(c, EIO, "binding a write window failed");
		return -ECONNRESET;
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
		wait_answer(c, sink_settled, "a SinkCancel");
	mw_close(c, win);
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

/* ------------------------------------------- app threads in zero-copy */

/* An app thread inside a zero-copy operation holds registrations and
 * windows of the channel (across unlocked waits): a switch may not finish,
 * and so free them, until it has left. */
static void zc_leave(struct sdp_conn *c)
{
	if (--c->zc_threads == 0 && c->phase == CONN_SWITCHING)
		switch_maybe_finish(c);
}

ssize_t zc_send(struct sdp_conn *c, const void *buf, size_t len, bool nonblock, int timeout_ms,
		uint64_t start_us)
{
	ssize_t r;

	c->zc_threads++;
	c->zc_interrupted = false; /* says how this call's bytes were taken */
	r = send_zero_copy(c, buf, len, nonblock, timeout_ms, start_us);
	zc_leave(c);
	return r;
}

ssize_t zc_recv_direct(struct sdp_conn *c, struct rx_entry *e, void *dst, size_t room)
{
	ssize_t r;

	c->zc_threads++;
	r = recv_direct(c, e, dst, room);
	zc_leave(c);
	return r;
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

static bool on_src_avail(struct sdp_conn *c, const struct sdp_ext *x, struct rx_entry *e)
{
	if (c->close_state == CLOSE_ABORTED)
		return true; /* after a reset: nobody's bytes, never READ (e stays consumed) */
	if (x->a == 0 || x->a > MAX_ZC_LEN || x->d != c->rx_stream_off || unanswered_source(c) ||
	    c->rx_eof || c->phase != CONN_OPEN) {
		violation(c, "SrcAvail out of place");
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

static bool on_rd_compl(struct sdp_conn *c, const struct sdp_ext *x)
{
	if (!c->src.active || c->src.answered || x->a > c->src.len || x->d != c->src.stream_off) {
		violation(c, "RdmaRdCompl for no SrcAvail");
		return false;
	}
	c->src.consumed = x->a;
	c->src.answered = true;
	/* Now, not when the app thread wakes: a SinkAvail right behind this
	 * message names the offset after these bytes. */
	c->tx_stream_off += x->a;
	pthread_cond_broadcast(&c->cond);
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

static bool on_src_cancel(struct sdp_conn *c, const struct sdp_ext *x)
{
	struct rx_entry *e = unanswered_source(c);

	if (!e || x->d != e->stream_off)
		return true; /* answered already: the RdmaRdCompl crossed it */
	c->src_cancel_pending = true;
	if (c->rd.active && c->rd.seq == e->seq)
		return true; /* cut when the READ completes (read_completed) */
	source_cut(c, e);
	return true;
}

static bool on_sink_avail(struct sdp_conn *c, const struct sdp_ext *x)
{
	/* Behind our offset is a normal race (our bytes crossed it on the wire);
	 * ahead of it the peer would be waiting for bytes we never sent. */
	if (x->a == 0 || x->a > MAX_ZC_LEN || x->d > c->tx_stream_off) {
		violation(c, "SinkAvail out of place");
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
		violation(c, "RDMA WRITE that did not fill a SinkAvail");
		return;
	}
	c->sink.written = bytes;
	c->sink.answered = true;
	pthread_cond_broadcast(&c->cond);
	c->rx_stream_off += bytes;
	conn_update_readiness(c, true);
}

static bool on_sink_cancel(struct sdp_conn *c, const struct sdp_ext *x)
{
	if (c->psink.valid && c->psink.stream_off == x->d) {
		c->psink.valid = false;
		c->sink_ack_off = x->d;
		tx_queue_ctrl(c, SDP_MID_SINK_CANCEL_ACK);
	}
	return true; /* otherwise already answered (RdmaWrCompl or SinkCancelAck) */
}

static bool on_sink_cancel_ack(struct sdp_conn *c, const struct sdp_ext *x)
{
	bool for_active = c->sink.active && !c->sink.answered && x->d == c->sink.stream_off;

	if (!for_active && c->sink_voided && x->d <= c->sink_void_off)
		return true; /* the late answer to a sink we already gave up */
	if (!for_active) {
		violation(c, "SinkCancelAck for no SinkAvail");
		return false;
	}
	c->sink.answered = true;
	pthread_cond_broadcast(&c->cond);
	conn_update_readiness(c, true);
	return true;
}

bool zc_on_message(struct sdp_conn *c, const struct sdp_bsdh *h, const struct sdp_ext *x,
		   struct rx_entry *e)
{
	switch ((enum sdp_mid)h->mid) {
	case SDP_MID_SRC_AVAIL:       return on_src_avail(c, x, e);
	case SDP_MID_RDMA_RD_COMPL:   return on_rd_compl(c, x);
	case SDP_MID_SRC_CANCEL:      return on_src_cancel(c, x);
	case SDP_MID_SINK_AVAIL:      return on_sink_avail(c, x);
	case SDP_MID_SINK_CANCEL:     return on_sink_cancel(c, x);
	case SDP_MID_SINK_CANCEL_ACK: return on_sink_cancel_ack(c, x);
	default:                      return false;
	}
}

/* ---------------------------------------------------------- completions */

/* Our READ ended.  Its entry is found again by sequence: a cancel may
 * have answered and cut it meanwhile, but never while this READ was in
 * flight (on_src_cancel waits for it), so it is still in the ring. */
static void read_completed(struct sdp_conn *c, bool ok)
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

void zc_on_completion(struct sdp_conn *c, int kind, uint32_t index, bool ok)
{
	struct zc_window *w = &c->win[index < ZC_WINDOWS ? index : 0];

	pthread_cond_broadcast(&c->cond);
	switch ((enum wr_kind)kind) {
	case WR_READ:
		read_completed(c, ok);
		break;
	case WR_WRITE:
		c->write_active = false;
		if (ok)
			c->wr_unconfirmed = false; /* acked: the peer has the bytes and the immediate */
		conn_update_readiness(c, false);
		break;
	case WR_BIND:
		/* The provider does not track a type 2 window's new key. */
		if (ok && w->mw)
			w->mw->rkey = w->rkey;
		w->busy = false;
		conn_update_readiness(c, false);
		break;
	case WR_INV:
		w->busy = false;
		conn_update_readiness(c, false);
		break;
	case WR_RECV:
	case WR_SEND_DATA:
	case WR_SEND_CTRL:
		break;
	}
	if (!ok)
		close_ev_carrier_failed(c, ECONNRESET, "a zero-copy operation failed");
}

/* Test hook (SDPSHIM_DEBUG_ZC_CORRUPT): make this end a misbehaving peer, so
 * the VM suite can show the other end's validation abort the connection.
 * 1: SrcAvail one byte ahead of the stream; 2: SrcAvail longer than 1 GiB;
 * 3: SinkAvail 1 GiB ahead of the stream (far enough that no bytes in flight
 * can make it look like a stale sink the sender just declines). */
static void debug_corrupt(uint8_t mid, struct sdp_ext *x)
{
	switch (sdp_tun.debug_zc_corrupt) {
	case 1:
		if (mid == SDP_MID_SRC_AVAIL)
			x->d += 1;
		break;
	case 2:
		if (mid == SDP_MID_SRC_AVAIL)
			x->a = MAX_ZC_LEN + 1;
		break;
	case 3:
		if (mid == SDP_MID_SINK_AVAIL)
			x->d += MAX_ZC_LEN;
		break;
	default:
		break;
	}
}

void zc_fill_ext(struct sdp_conn *c, uint8_t mid, struct sdp_ext *x)
{
	switch ((enum sdp_mid)mid) {
	case SDP_MID_SRC_AVAIL:
		*x = (struct sdp_ext){ c->src.len, c->src.rkey, c->src.addr, c->src.stream_off };
		break;
	case SDP_MID_SRC_CANCEL:
		x->d = c->src.stream_off;
		break;
	case SDP_MID_RDMA_RD_COMPL:
		x->a = c->rd_compl_bytes;
		x->d = c->rd_compl_off;
		break;
	case SDP_MID_SINK_AVAIL:
		*x = (struct sdp_ext){ c->sink.len, c->sink.rkey, c->sink.addr, c->sink.stream_off };
		break;
	case SDP_MID_SINK_CANCEL:
		x->d = c->sink.stream_off;
		break;
	case SDP_MID_SINK_CANCEL_ACK:
		x->d = c->sink_ack_off;
		break;
	default:
		break;
	}
	if (unlikely(sdp_tun.debug_zc_corrupt))
		debug_corrupt(mid, x);
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

void zc_release(struct sdp_conn *c)
{
	SDP_GUARD_ENTER();
	for (int i = 0; i < ZC_WINDOWS; i++) {
		if (c->win[i].mw)
			ibv_dealloc_mw(c->win[i].mw);
		c->win[i] = (struct zc_window){ 0 };
	}
	SDP_GUARD_LEAVE();
	dev_free_registered(c->stage, c->stage_len, c->stage_mr);
	c->stage = NULL;
	c->stage_mr = NULL;
}
