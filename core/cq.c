/* Work completions: dispatch receive, data-send, control-send, zero-copy
 * and liveness-probe completions (any error status means the carrier
 * failed), and the events of the devices' completion channels. */
#include <errno.h>
#include <stddef.h>

#include "base/guard.h"
#include "base/log.h"
#include "core/conn_internal.h"
#include "core/cq.h"
#include "core/dev.h"
#include "core/link.h"
#include "core/zcopy.h"

/* After a switch started, a completion only settles bookkeeping: the
 * stream's position was fixed when the QP stopped. */
static void on_completion_switched(struct sdp_conn *c, enum wr_kind kind, uint32_t index)
{
	if (kind != WR_RECV && c->sq_outstanding)
		c->sq_outstanding--;
	if (kind >= WR_READ && kind <= WR_INV)
		zc_on_completion(c, kind, index, false);
}

static void on_completion(struct sdp_conn *c, const struct ibv_wc *wc)
{
	enum wr_kind kind = WR_KIND(wc->wr_id);

	if (c->phase == CONN_SWITCHING || (c->sw.started && c->phase != CONN_OPEN)) {
		on_completion_switched(c, kind, WR_INDEX(wc->wr_id));
		return;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		static const char *const kinds[] = { "?", "recv", "send", "control send", "RDMA READ",
						     "RDMA WRITE", "window bind", "window invalidate",
						     "liveness probe" };
		if (!c->carrier_dead && wc->status != IBV_WC_WR_FLUSH_ERR)
			sdp_warn("RDMA completion error on %s: %s",
				 kind <= WR_PROBE ? kinds[kind] : "?", ibv_wc_status_str(wc->status));
		if (kind != WR_RECV && c->sq_outstanding)
			c->sq_outstanding--;
		if (!c->carrier_why)
			c->carrier_why = ibv_wc_status_str(wc->status);
		if (kind >= WR_READ && kind <= WR_INV)
			zc_on_completion(c, kind, WR_INDEX(wc->wr_id), false);
		close_ev_carrier_failed(c, ECONNRESET, NULL);
		return;
	}
	switch (WR_KIND(wc->wr_id)) {
	case WR_RECV:
		c->last_rx_ms = progress_coarse_ms();
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			rx_on_write_imm(c, WR_INDEX(wc->wr_id), wc->byte_len, be32toh(wc->imm_data));
		else
			rx_on_recv(c, WR_INDEX(wc->wr_id), wc->byte_len);
		break;
	case WR_SEND_DATA:
	case WR_PROBE:
		c->sq_outstanding--;
		break;
	case WR_SEND_CTRL:
		c->sq_outstanding--;
		if (c->ctrl_outstanding)
			c->ctrl_outstanding--;
		if (c->attach_unconfirmed && c->attach_posted && WR_INDEX(wc->wr_id) == c->attach_idx) {
			c->attach_unconfirmed = false; /* the ATTACH is in the client's queue */
			conn_wake_waiters(c);
		}
		break;
	case WR_READ:
	case WR_WRITE:
	case WR_BIND:
	case WR_INV:
		c->sq_outstanding--;
		zc_on_completion(c, kind, WR_INDEX(wc->wr_id), true);
		break;
	}
}

/* What follows completions: sends they allow, the orphan check, the
 * readiness the app sees (unless !readiness_moved: see send_leaves_readiness). */
static void after_completions(struct sdp_conn *c, int total, int sends, bool readiness_moved)
{
	bool fresh;

	c->completions_seen++;
	c->wcs_seen += (unsigned)total;
	if (sends)
		c->sq_progress_ms = progress_coarse_ms(); /* the watchdog's clock (timers.c) */
	if (total && c->app_closed)
		close_check_orphan(c); /* a send it waited for may have completed */
	tx_kick(c);
	switch_debug_maybe_fail(c);
	fresh = rx_take_new_data(c);
	if (readiness_moved || fresh)
		conn_update_readiness(c, fresh);
}

/* A data or control send that completed on an open channel moves no
 * readiness: its slot is freed by the peer's acknowledgement (a receive),
 * and what the completion may set off (a close step, a switch, an error)
 * updates readiness itself (close.c, switch.c). */
static bool send_leaves_readiness(const struct sdp_conn *c, const struct ibv_wc *wc)
{
	enum wr_kind kind = WR_KIND(wc->wr_id);

	return wc->status == IBV_WC_SUCCESS && c->phase == CONN_OPEN && !c->sw.started &&
	       (kind == WR_SEND_DATA || kind == WR_SEND_CTRL);
}

void cq_on_stream_wc(struct sdp_conn *c, const struct ibv_wc *wc)
{
	bool moved = !send_leaves_readiness(c, wc);

	on_completion(c, wc);
	after_completions(c, 1, WR_KIND(wc->wr_id) != WR_RECV, moved);
	conn_wake_waiters(c);
}

void cq_on_stream_flushed(struct sdp_conn *c, uint64_t wr_id)
{
	on_completion_switched(c, WR_KIND(wr_id), WR_INDEX(wr_id));
	if (WR_KIND(wr_id) == WR_SEND_CTRL && c->ctrl_outstanding)
		c->ctrl_outstanding--;
}

void cq_stream_progress(struct sdp_conn *c)
{
	after_completions(c, 1, 0, true);
	conn_wake_waiters(c);
}

int cq_poll(struct sdp_conn *c)
{
	struct ibv_wc wc[16];
	int n, total = 0, sends = 0;

	if (c->link) {
		/* The link's completions are taken in by link.c (drain_cq). */
		tx_kick(c);
		conn_update_readiness(c, false);
		return 0;
	}
	if (!c->cq)
		return 0;
	do {
		SDP_GUARD_ENTER();
		n = ibv_poll_cq(c->cq, 16, wc);
		SDP_GUARD_LEAVE();
		for (int i = 0; i < n; i++) {
			sends += WR_KIND(wc[i].wr_id) != WR_RECV;
			on_completion(c, &wc[i]);
		}
		total += n > 0 ? n : 0;
	} while (n == 16 && c->cq);
	after_completions(c, total, sends, true);
	return total;
}

int cq_poll_if_due(struct sdp_conn *c)
{
	/* A linked stream: each message and completion the link handed it
	 * ran cq_poll's work already (after_completions, on whichever thread
	 * took it in); what is left is a control message a read queued (a
	 * credit update). */
	if (c->link && !c->ctrl_pending)
		return 0;
	return cq_poll(c);
}

/* Reads one event off a channel (non-blocking) and acknowledges it. */
static bool next_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	int rc;

	SDP_GUARD_ENTER();
	rc = ibv_get_cq_event(ch, cq, ctx);
	if (rc == 0)
		ibv_ack_cq_events(*cq, 1);
	SDP_GUARD_LEAVE();
	return rc == 0;
}

void cq_on_channel_ready(struct progress_source *src, uint32_t events)
{
	struct sdp_dev *dev = (struct sdp_dev *)((char *)src - offsetof(struct sdp_dev, cc_src));
	struct ibv_cq *cq;
	void *ctx;

	(void)events;
	while (next_event(dev->cc, &cq, &ctx)) {
		struct sdp_conn *c = ctx;

		conn_lock(c);
		if (c->cq == cq) {
			SDP_GUARD_ENTER();
			ibv_req_notify_cq(cq, 0);
			SDP_GUARD_LEAVE();
			cq_poll(c);
		}
		conn_unlock(c);
	}
}

/* Takes in the events queued on dev's links' channel (non-blocking), from
 * the progress thread or an app thread: each link's CQ is polled and
 * re-armed (link_on_cq_event, which finds the link alive first).  A CQ
 * queues one event until re-armed, so with one CQ on the channel one read
 * is all there is; a later event is a new wake-up (and one left over is
 * harmless: a drain with nothing to take).  Returns the events taken. */
int cq_take_link_events(struct sdp_dev *dev)
{
	struct ibv_cq *cq;
	void *ctx;
	int taken = 0;

	for (;;) {
		bool only_cq = atomic_load(&dev->link_cqs) == 1;

		if (!next_event(dev->link_cc, &cq, &ctx))
			return taken;
		taken++;
		link_on_cq_event(ctx, cq);
		if (only_cq)
			return taken;
	}
}

void cq_on_link_channel_ready(struct progress_source *src, uint32_t events)
{
	(void)events;
	cq_take_link_events((struct sdp_dev *)((char *)src - offsetof(struct sdp_dev, link_cc_src)));
}
