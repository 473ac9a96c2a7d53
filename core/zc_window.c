/* The per-connection memory windows of zero-copy (one for SrcAvails, one
 * for SinkAvails): bind, invalidate, close, and the bounded wait for answers. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "core/conn_internal.h"
#include "core/dev.h"
#include "core/mrcache.h"
#include "core/zc_internal.h"

bool zc_mw_ready(struct sdp_conn *c, struct zc_window *w)
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
		c->policy.zcopy_thresh = 0;
		return false;
	}
	w->rkey = w->mw->rkey;
	return true;
}

/* Binds the window to exactly [addr, addr+len) with one remote access. */
int zc_mw_bind(struct sdp_conn *c, struct zc_window *w, struct mrc_entry *mre, uint64_t addr,
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
	rc = zc_post_wr(c, &wr);
	if (rc == 0)
		w->busy = w->bound = true;
	return rc;
}

int zc_expose(struct sdp_conn *c, struct zc_window *w, const void *buf, uint32_t n, int access,
	      struct mrc_entry **mre)
{
	bool remote_write = access == IBV_ACCESS_REMOTE_WRITE;
	bool hit;

	if (mrcache_get(c->dev, buf, n, remote_write, mre, &hit) != 0)
		return 1;
	zc_count_cache(c, hit);
	if (zc_mw_bind(c, w, *mre, (uintptr_t)buf, n, access) != 0) {
		mrcache_put(*mre);
		close_ev_carrier_failed(c, EIO, remote_write ? "binding a write window failed"
							     : "binding a read window failed");
		/* On a link that already failed the bind fails at once, in the
		 * app's call: the switch it started carries the bytes, and the
		 * call must not report a reset for it. */
		return c->sw.started && !c->hard_error ? 1 : -ECONNRESET;
	}
	return 0;
}

static int mw_invalidate(struct sdp_conn *c, struct zc_window *w)
{
	struct ibv_send_wr wr = {
		.wr_id = WR_ID(WR_INV, w - c->win),
		.opcode = IBV_WR_LOCAL_INV,
		.send_flags = IBV_SEND_SIGNALED,
		.invalidate_rkey = w->rkey,
	};
	int rc = zc_post_wr(c, &wr);

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
 * which nothing can touch the buffer.  Zero-copy completions wake c's
 * waiters (zc_on_completion); the wait also looks again every 20 ms. */
void zc_wait_answer(struct sdp_conn *c, bool (*pred)(struct sdp_conn *), const char *what)
{
	uint64_t deadline = conn_now_us() + (uint64_t)sdp_tun.zcopy_answer_ms * 1000u;

	while (!pred(c) && !c->carrier_dead && c->qp) {
		cq_poll(c);
		if (pred(c))
			break;
		if (conn_now_us() >= deadline) {
			answer_overdue(c, what);
			break;
		}
		conn_cond_wait_ms(c, 20);
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
void zc_mw_close(struct sdp_conn *c, struct zc_window *w)
{
	bool (*idle)(struct sdp_conn *) = w == &c->win[ZC_WIN_SRC] ? src_win_idle : sink_win_idle;

	zc_wait_answer(c, idle, "a memory window bind");
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
	zc_wait_answer(c, idle, "a memory window invalidate");
	if (!idle(c))
		qp_force_error(c); /* the carrier died first: nothing completes now */
}
