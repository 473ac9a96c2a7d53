/* Zero-copy's entry points and what its parts share: eligibility, the send
 * road, message dispatch, completions, control-message extensions, teardown.
 * The parts: zc_window.c, zc_read.c, zc_write.c (zc_internal.h); see core/zcopy.h. */
#include <errno.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "core/dev.h"
#include "core/zc_internal.h"
#include "core/zcopy.h"

void zc_count_cache(struct sdp_conn *c, bool hit)
{
	if (hit)
		COUNT(c, mr_cache_hits, 1);
	else
		COUNT(c, mr_cache_misses, 1);
}

void zc_violation(struct sdp_conn *c, const char *what)
{
	sdp_warn_limited("peer violated the zero-copy protocol (%s); aborting the connection", what);
	c->fail_reason = SDP_REASON_PROTOCOL;
	close_ev_abort(c, ECONNRESET, true);
}

int zc_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr)
{
	int rc;

	if (c->link) {
		rc = link_post_wr(c, wr);
		if (rc)
			return rc;
		conn_note_post(c);
		return 0;
	}
	return tx_post_own(c, wr, "a zero-copy request");
}

/* ------------------------------------------------------------- sender */

/* No window is bound or offered on a connection that is reset (by either
 * end, or for a protocol violation) or whose carrier is gone. */
bool zc_channel_sound(const struct sdp_conn *c)
{
	return c->phase == CONN_OPEN && !c->carrier_dead && !c->qp_in_error && !c->hard_error &&
	       c->close_state != CLOSE_ABORTED && !c->sw.started;
}

bool zc_send_eligible(struct sdp_conn *c, size_t len)
{
	return c->policy.zcopy_thresh > 0 && len >= (size_t)c->policy.zcopy_thresh && zc_channel_sound(c) &&
	       c->dev && c->dev->mw_type2;
}

bool zc_tx_busy(const struct sdp_conn *c)
{
	return c->src.active || c->write_active;
}

bool zc_send_ready(const struct sdp_conn *c)
{
	return !tx_has_unposted(c) && !zc_tx_busy(c) && !c->win[ZC_WIN_SRC].busy &&
	       tx_credits(c) >= 2;
}

/* A blocking writer waits for the bytes queued ahead of it to leave, and
 * for two credits, before its SrcAvail, rather than copying: a copy queues
 * more bytes ahead of the next write, and a writer ahead of a slow reader
 * would never come back to zero-copy.  Meanwhile the channel is writable
 * only when the SrcAvail may go (channel_writable), so the wait sleeps.
 * 1 ready, 0 "use buffer copy" (the channel's state says why), or -errno. */
static int wait_send_ready(struct sdp_conn *c, int timeout_ms, uint64_t start_us)
{
	int rc = 1;

	c->zc_writer_waits = true;
	while (!zc_send_ready(c)) {
		int w;

		/* Writable while not ready: an error, a shutdown or a phase
		 * change, which the buffer-copy path reports. */
		if (c->carrier_dead || c->hard_error || c->phase != CONN_OPEN || c->sw.started ||
		    conn_writable_locked(c)) {
			rc = 0;
			break;
		}
		w = conn_wait(c, true, timeout_ms, start_us);
		cq_poll(c);
		if (w < 0) {
			rc = w;
			break;
		}
	}
	c->zc_writer_waits = false;
	conn_update_readiness(c, false); /* writable in the ordinary sense again */
	return rc;
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
	if (!zc_send_ready(c) || !zc_channel_sound(c) || !zc_mw_ready(c, &c->win[ZC_WIN_SRC]))
		return 0;
	if (zc_sink_usable(c, len))
		return zc_send_into_sink(c, buf);
	r = zc_send_as_source(c, buf, len, wait_ms, conn_now_us());
	if (r > 0 || r == -ECONNRESET || c->carrier_dead || c->hard_error)
		return r;
	c->zc_nb_backoff = NB_BACKOFF_WRITES;
	return 0;
}

static ssize_t send_zero_copy(struct sdp_conn *c, const void *buf, size_t len, bool nonblock,
			      int timeout_ms, uint64_t start_us)
{
	int ready;

	if (nonblock)
		return zc_send_nonblocking(c, buf, len, timeout_ms);
	ready = wait_send_ready(c, timeout_ms, start_us);
	if (ready <= 0)
		return ready;
	if (!zc_channel_sound(c) || !zc_mw_ready(c, &c->win[ZC_WIN_SRC]))
		return 0;
	if (zc_sink_usable(c, len))
		return zc_send_into_sink(c, buf);
	return zc_send_as_source(c, buf, len, timeout_ms, start_us);
}

/* ------------------------------------------- app threads in zero-copy */

/* An app thread inside a zero-copy operation holds registrations and
 * windows of the channel (across unlocked waits): a switch may not finish,
 * and so free them, until it has left. */
void zc_leave(struct sdp_conn *c)
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

/* ------------------------------------------------------------ messages */

bool zc_on_message(struct sdp_conn *c, const struct sdp_bsdh *h, const struct sdp_ext *x,
		   struct rx_entry *e)
{
	switch ((enum sdp_mid)h->mid) {
	case SDP_MID_SRC_AVAIL:       return zc_on_src_avail(c, x, e);
	case SDP_MID_RDMA_RD_COMPL:   return zc_on_rd_compl(c, x);
	case SDP_MID_SRC_CANCEL:      return zc_on_src_cancel(c, x);
	case SDP_MID_SINK_AVAIL:      return zc_on_sink_avail(c, x);
	case SDP_MID_SINK_CANCEL:     return zc_on_sink_cancel(c, x);
	case SDP_MID_SINK_CANCEL_ACK: return zc_on_sink_cancel_ack(c, x);
	default:                      return false;
	}
}

/* ---------------------------------------------------------- completions */

void zc_on_completion(struct sdp_conn *c, int kind, uint32_t index, bool ok)
{
	struct zc_window *w = &c->win[index < ZC_WINDOWS ? index : 0];

	conn_wake_waiters(c);
	switch ((enum wr_kind)kind) {
	case WR_READ:
		zc_read_completed(c, ok);
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
	case WR_PROBE:
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
