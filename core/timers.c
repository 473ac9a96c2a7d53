/* The timers of each channel: the main one and what it means in each
 * phase (the bound on the RDMA connect, the TTL of an unmatched server
 * channel, the linger bound after close, keepalive probes), the
 * send-queue watchdog, and the liveness probe of a channel of its own. */
#include <errno.h>

#include "base/config.h"
#include "base/log.h"
#include "core/conn_internal.h"
#include "core/link.h" /* link_hold(): the watchdog reaps a link first */

/* SDPSHIM_DEBUG_ATTACH_DELAY_MS: the held ATTACH goes now. */
static void release_held_attach(struct sdp_conn *c)
{
	c->attach_held = false;
	tx_queue_ctrl(c, SDP_MID_ATTACH);
	tx_kick(c);
}

void conn_arm_timer_at(struct sdp_conn *c, uint64_t at_ms)
{
	if (c->attach_held)
		release_held_attach(c); /* the timer is wanted for something else */
	progress_timer_arm(&c->timer, at_ms);
}

void conn_arm_timer(struct sdp_conn *c, unsigned ms_from_now)
{
	conn_arm_timer_at(c, progress_deadline_ms(ms_from_now));
}

/* How long the ack of a peer's DisConn may wait for a message of ours to
 * carry it.  An app that reads EOF usually closes or shuts down at once, and
 * its DisConn carries the ack; only a closer that closed (CLOSE_FIN_WAIT)
 * waits for it, to let go of its stream.  As TCP's delayed ACK, shorter. */
#define DISCONN_ACK_DELAY_MS 10

void conn_ack_disconn_later(struct sdp_conn *c)
{
	/* A socket the app closed has sent its own DisConn: the peer's end
	 * needs no ack of this one (close_check_orphan acks its bytes). */
	if (c->phase != CONN_OPEN || c->app_closed || c->disconn_ack_owed)
		return;
	c->disconn_ack_owed = true;
	conn_arm_timer(c, DISCONN_ACK_DELAY_MS);
}

/* The owed ack goes now unless a message of ours carried it meanwhile. */
static void disconn_ack_tick(struct sdp_conn *c)
{
	c->disconn_ack_owed = false;
	if (c->rx_ack == c->rx_ack_sent || c->carrier_dead)
		return;
	tx_queue_ctrl(c, SDP_MID_CREDIT_UPDATE);
	tx_kick(c);
}

static void keepalive_tick(struct sdp_conn *c)
{
	uint64_t idle_ms = progress_now_ms() - c->last_rx_ms;

	if (!c->keepalive || c->carrier_dead)
		return;
	if (idle_ms < (uint64_t)c->keepidle_s * 1000) {
		c->keep_probes = 0;
		conn_arm_timer(c, (unsigned)((uint64_t)c->keepidle_s * 1000 - idle_ms));
		return;
	}
	if (c->keep_probes >= c->keepcnt) {
		sdp_info("keepalive: peer silent for %llu ms; connection timed out",
			 (unsigned long long)idle_ms);
		close_ev_abort(c, ETIMEDOUT, true);
		return;
	}
	/* A probe is a message: its RC acknowledgement or error is the answer,
	 * and the peer's credit update refreshes last_rx_ms. */
	c->keep_probes++;
	tx_queue_ctrl(c, SDP_MID_KEEPALIVE);
	tx_kick(c);
	conn_arm_timer(c, c->keepintvl_s * 1000);
}

void conn_on_timer(struct sdp_conn *c)
{
	conn_lock(c);
	switch (c->phase) {
	case CONN_RESOLVING:
		sdp_info("RDMA connect did not finish within its bound; using TCP");
		conn_fallback(c, SDP_REASON_RDMA_TIMEOUT);
		break;
	case CONN_PENDING:
		pending_on_timer(c);
		break;
	case CONN_OPEN:
		if (c->attach_held) {
			release_held_attach(c);
			if (c->keepalive)
				conn_arm_timer(c, c->keepidle_s * 1000);
		} else if (c->app_closed) {
			sdp_info("linger bound reached with the peer silent; aborting");
			close_ev_abort(c, ETIMEDOUT, true);
			conn_schedule_destroy(c);
		} else {
			if (c->disconn_ack_owed)
				disconn_ack_tick(c);
			keepalive_tick(c);
		}
		break;
	case CONN_SWITCHING:
		switch_on_timer(c);
		break;
	case CONN_HELD:
	case CONN_CLIMB_HALF:
		climb_on_timer(c);
		break;
	case CONN_AWAIT_ATTACH:
	case CONN_ATTACHING:
		bind_on_timer(c); /* the binding handshake's bounds */
		break;
	case CONN_TCP_CONNECTING:
		if (c->open_unanswered) { /* a committed OPEN's answer never came */
			sdp_info("RDMA connect did not finish within its bound; using TCP");
			conn_fallback(c, SDP_REASON_RDMA_TIMEOUT);
		}
		break;
	case CONN_DRAINING:
		tcp_drain_on_timer(c); /* the linger bound of a closed socket's drain */
		break;
	case CONN_FALLBACK:
	case CONN_DEAD:
		break;
	}
	conn_unlock(c);
}

/* ------------------------------------------------ send-queue watchdog */

/* SDPSHIM_STALL_MS after the last send progress.  That stamp is coarse
 * (progress_coarse_ms, per completion): up to a tick behind, so the
 * deadline gets the tick back and a stall is never judged early. */
static uint64_t stall_deadline(const struct sdp_conn *c)
{
	return c->sq_progress_ms + sdp_tun.stall_ms + progress_coarse_slack_ms();
}

void conn_note_post(struct sdp_conn *c)
{
	if (c->sq_outstanding++ > 0)
		return;
	c->sq_progress_ms = progress_coarse_ms();
	if (sdp_tun.stall_ms && !c->stall_armed) {
		c->stall_armed = true;
		progress_timer_arm(&c->stall_timer, stall_deadline(c));
	}
}

/* Every work request completes within the transport's retry time (a
 * send needs no app on the other side: it only goes with a credit), and
 * a transport that gives up reports an error.  Work requests outstanding
 * with no completion for SDPSHIM_STALL_MS mean the queue pair stalled
 * without saying so (rxe of Linux 6.1 can, after retransmissions): the
 * carrier counts as failed and the stream moves to TCP. */
static bool sq_waiting(const struct sdp_conn *c)
{
	return c->phase == CONN_OPEN && !c->carrier_dead && !c->sw.started && c->sq_outstanding;
}

void conn_stall_timer_fired(void *arg)
{
	struct sdp_conn *c = arg;
	struct sdp_link *link;

	/* A link's completions may wait unreaped (its CQ armed for solicited
	 * events alone): take them in first, with no stream locked. */
	conn_lock(c);
	link = link_hold(c);
	conn_unlock(c);
	link_reap_held(link);
	conn_lock(c);
	c->stall_armed = false;
	if (sq_waiting(c))
		cq_poll(c); /* a completion whose event we missed is no stall */
	/* With nothing outstanding, the next post starts the clock again. */
	if (sq_waiting(c) && progress_now_ms() >= stall_deadline(c)) {
		close_ev_carrier_failed(c, ETIMEDOUT,
					"send queue stalled: no completion within SDPSHIM_STALL_MS");
	} else if (sq_waiting(c) && !c->stall_armed) {
		c->stall_armed = true;
		progress_timer_arm(&c->stall_timer, stall_deadline(c));
	}
	conn_unlock(c);
}

/* --------------------------------------------- liveness of a channel */

/* A channel of its own (SDPSHIM_LINKS=0) whose sender waits for credits has
 * nothing outstanding that could fail if the peer's host died, as a link's
 * (core/link.c, probe_check).  Armed when the sender starts to wait: after
 * SDPSHIM_LINK_PROBE_MS with no completion at all and still waiting, a
 * zero-byte RDMA WRITE goes (no receive, credit or key of the peer's: IBTA
 * C9-88); the transport's retry error, or the send-queue watchdog, fails
 * the carrier and the stream moves to TCP. */
void conn_probe_arm(struct sdp_conn *c)
{
	if (!sdp_tun.link_probe_ms || c->probe_armed || c->link)
		return;
	c->probe_armed = true;
	c->probe_mark = c->wcs_seen;
	progress_timer_arm(&c->probe_timer, progress_deadline_ms(sdp_tun.link_probe_ms));
}

static bool waits_for_credits(const struct sdp_conn *c)
{
	return c->phase == CONN_OPEN && !c->carrier_dead && !c->sw.started && c->qp && !c->link &&
	       tx_waits_for_credits(c);
}

void conn_probe_timer_fired(void *arg)
{
	struct sdp_conn *c = arg;

	conn_lock(c);
	c->probe_armed = false;
	if (waits_for_credits(c)) {
		if (c->wcs_seen == c->probe_mark && !c->sq_outstanding) {
			sdp_info("the peer was silent for %u ms while we wait for credits; probing",
				 sdp_tun.link_probe_ms);
			if (tx_post_probe(c) != 0)
				close_ev_carrier_failed(c, EIO, "posting a probe failed");
		}
		conn_probe_arm(c); /* again, while the sender waits */
	}
	conn_unlock(c);
}
