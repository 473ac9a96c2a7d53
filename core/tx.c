/* The send side of the buffer-copy channel: app bytes are copied into slots
 * mirroring the peer's receive buffers and posted as SENDs while credits
 * last; without credits they coalesce in the last unposted slot.  A slot
 * is kept until the peer acknowledges it consumed it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "core/conn_internal.h"
#include "core/credits.h"
#include "core/link.h"
#include "core/zcopy.h"

/* Control messages that may overtake queued data (they carry no stream
 * position; DETACH comes from a pending server, which has no data); the
 * others (DisConn, Switch) wait behind the data. */
#define CTRL_OVERTAKING (CTRL_BIT(SDP_MID_CREDIT_UPDATE) | CTRL_BIT(SDP_MID_KEEPALIVE) | \
			 CTRL_BIT(SDP_MID_ABORT) | CTRL_BIT(SDP_MID_ATTACH) | CTRL_BIT(SDP_MID_COMMIT) | \
			 CTRL_BIT(SDP_MID_DETACH) | \
			 CTRL_BIT(SDP_MID_RDMA_RD_COMPL) | CTRL_BIT(SDP_MID_SRC_CANCEL) |             \
			 CTRL_BIT(SDP_MID_SINK_AVAIL) | CTRL_BIT(SDP_MID_SINK_CANCEL))

uint32_t tx_credits(const struct sdp_conn *c)
{
	return credits_available(c->tx_peer_bufs, c->tx_seq, c->tx_peer_ack);
}

static uint32_t slot_payload_max(const struct sdp_conn *c)
{
	return c->tx_slot_size - (uint32_t)SDP_BSDH_SIZE;
}

static uint8_t *slot_mem(const struct sdp_conn *c, uint32_t pos)
{
	if (c->tx_heap)
		return c->tx_heap[ring_index(pos, c->tx_nslots)];
	return c->tx_mem + (size_t)ring_index(pos, c->tx_nslots) * c->tx_slot_size;
}

/* A thread's spare slot memory.  A linked stream's slot is allocated as it
 * starts to fill and freed once acknowledged, so a request/response stream
 * would malloc and free a slot (32 KiB, above glibc's per-thread cache) per
 * message.  Freed slots wait here instead, SPARE_SLOTS at most per thread,
 * and are freed when the thread exits (the key's destructor). */
#define SPARE_SLOTS 2
static __thread struct spare {
	uint8_t *mem;
	uint32_t size;
} spares[SPARE_SLOTS];
static __thread unsigned spare_count;
static __thread bool spare_registered;
static __thread bool spare_exiting;	/* the destructor ran: keep nothing more */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static bool spare_key_ok;

static void spares_free(void *unused)
{
	(void)unused;
	spare_exiting = true;
	while (spare_count)
		free(spares[--spare_count].mem);
}

static void spare_key_create(void)
{
	spare_key_ok = pthread_key_create(&spare_key, spares_free) == 0;
}

/* The thread's exit must free what it keeps: without the key, nothing is kept. */
static bool spare_may_keep(void)
{
	if (spare_exiting)
		return false;
	if (spare_registered)
		return true;
	pthread_once(&spare_once, spare_key_create);
	spare_registered = spare_key_ok && pthread_setspecific(spare_key, &spare_registered) == 0;
	return spare_registered;
}

static uint8_t *spare_take(uint32_t size)
{
	for (unsigned i = spare_count; i-- > 0;) {
		if (spares[i].size == size) {
			uint8_t *mem = spares[i].mem;

			spares[i] = spares[--spare_count];
			return mem;
		}
	}
	return malloc(size);
}

static void spare_give(uint8_t *mem, uint32_t size)
{
	if (mem && spare_count < SPARE_SLOTS && spare_may_keep()) {
		spares[spare_count++] = (struct spare){ mem, size };
		return;
	}
	free(mem);
}

/* A linked stream's slot gets its memory as it starts to fill, and gives
 * it back once acknowledged: what waits is what the stream holds. */
static bool slot_mem_ensure(struct sdp_conn *c, uint32_t pos)
{
	uint8_t **mem;

	if (!c->tx_heap)
		return true;
	mem = &c->tx_heap[ring_index(pos, c->tx_nslots)];
	if (!*mem)
		*mem = spare_take(c->tx_slot_size);
	return *mem != NULL;
}

static void slot_mem_release(struct sdp_conn *c, uint32_t pos)
{
	if (c->tx_heap) {
		spare_give(c->tx_heap[ring_index(pos, c->tx_nslots)], c->tx_slot_size);
		c->tx_heap[ring_index(pos, c->tx_nslots)] = NULL;
	}
}

static struct tx_slot *slot_at(const struct sdp_conn *c, uint32_t pos)
{
	return &c->tx_slots[ring_index(pos, c->tx_nslots)];
}

bool tx_has_unposted(const struct sdp_conn *c)
{
	return c->tx_slots && c->tx_posted != c->tx_head;
}

uint32_t tx_free_space(const struct sdp_conn *c)
{
	uint32_t used = ring_used(c->tx_head, c->tx_tail);
	uint32_t space = (c->tx_nslots - used) * slot_payload_max(c);

	if (tx_has_unposted(c))
		space += c->tx_slot_size - slot_at(c, c->tx_head - 1)->len;
	return space;
}

/* Copies up to len bytes from the iovec cursor into slots.  Returns bytes taken. */
size_t tx_append(struct sdp_conn *c, const struct iovec *iov, int iovcnt, size_t skip, size_t len)
{
	size_t taken = 0;
	int i = 0;

	while (i < iovcnt && skip >= iov[i].iov_len)
		skip -= iov[i++].iov_len;
	while (taken < len && i < iovcnt) {
		struct tx_slot *slot;

		if (!tx_has_unposted(c) || slot_at(c, c->tx_head - 1)->len == c->tx_slot_size) {
			if (ring_used(c->tx_head, c->tx_tail) == c->tx_nslots ||
			    !slot_mem_ensure(c, c->tx_head))
				break;
			slot = slot_at(c, c->tx_head++);
			slot->len = (uint32_t)SDP_BSDH_SIZE;
			slot->off = c->tx_stream_off; /* zc_note_bcopy() below advances it */
		}
		slot = slot_at(c, c->tx_head - 1);
		size_t room = c->tx_slot_size - slot->len;
		size_t chunk = iov[i].iov_len - skip;
		if (chunk > room)
			chunk = room;
		if (chunk > len - taken)
			chunk = len - taken;
		memcpy(slot_mem(c, c->tx_head - 1) + slot->len, (const uint8_t *)iov[i].iov_base + skip,
		       chunk);
		slot->len += (uint32_t)chunk;
		taken += chunk;
		zc_note_bcopy(c, chunk);
		skip += chunk;
		if (skip == iov[i].iov_len) {
			skip = 0;
			i++;
		}
	}
	return taken;
}

/* Data messages posted and not yet consumed by the peer. */
static uint32_t data_in_flight(const struct sdp_conn *c)
{
	return ring_used(c->tx_posted, c->tx_tail);
}

/* Past this many unconsumed messages, a partial slot waits for the peer's
 * ack instead of spending a whole receive buffer on a few bytes (Nagle on
 * the credit clock).  Below it, small writes go at once: latency first. */
static uint32_t coalesce_threshold(const struct sdp_conn *c)
{
	return c->peer_buf_count / 4 > 2 ? c->peer_buf_count / 4 : 2;
}

static void fill_header(struct sdp_conn *c, uint8_t mid, uint32_t len, void *out)
{
	uint32_t after = tx_credits(c) - 1;
	bool is_update = mid == SDP_MID_CREDIT_UPDATE || mid == SDP_MID_KEEPALIVE;
	bool want_ack = message_asks_ack(after, is_update) ||
			(mid == SDP_MID_DATA && data_in_flight(c) + 1 >= coalesce_threshold(c));
	struct sdp_bsdh h = {
		.mid = mid,
		.flags = want_ack ? SDP_FLAG_STARVING : 0,
		.bufs = c->buf_count,
		.len = len,
		.mseq = ++c->tx_seq,
		.mseq_ack = c->rx_ack,
	};

	c->rx_ack_sent = c->rx_ack;
	if (c->rx_ack == c->rx_seq)
		c->peer_starving = false; /* this message acknowledges everything it asked for */
	sdp_bsdh_to_wire(&h, out);
}

int tx_post_own(struct sdp_conn *c, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	int rc;

	SDP_GUARD_ENTER();
	rc = ibv_post_send(c->qp, wr, &bad);
	SDP_GUARD_LEAVE();
	if (rc) {
		sdp_warn("ibv_post_send of %s failed: %s", what, strerror(rc));
		return -rc;
	}
	conn_note_post(c);
	return 0;
}

static int post_send(struct sdp_conn *c, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | (len <= c->max_inline ? IBV_SEND_INLINE : 0),
	};
	int rc;

	if (c->link) {
		rc = link_send(c, wr_id, buf, len);
		if (rc)
			return rc;
		conn_note_post(c);
		return 0;
	}
	return tx_post_own(c, &wr, "a send");
}

bool tx_waits_for_credits(const struct sdp_conn *c)
{
	return tx_has_unposted(c) && !credits_allow_data(tx_credits(c));
}

int tx_post_probe(struct sdp_conn *c)
{
	struct ibv_send_wr wr = { .wr_id = WR_ID(WR_PROBE, 0), .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED };

	if (c->link || !c->qp)
		return -EINVAL;
	return tx_post_own(c, &wr, "a probe"); /* the send-queue watchdog bounds its answer */
}

static bool post_data_slot(struct sdp_conn *c)
{
	struct tx_slot *slot = slot_at(c, c->tx_posted);
	uint8_t *mem = slot_mem(c, c->tx_posted);

	fill_header(c, SDP_MID_DATA, slot->len, mem);
	slot->seq = c->tx_seq;
	if (post_send(c, WR_ID(WR_SEND_DATA, ring_index(c->tx_posted, c->tx_nslots)), mem,
		      slot->len, c->tx_mr ? c->tx_mr->lkey : 0) != 0) {
		close_ev_carrier_failed(c, EIO, "posting a data send failed");
		return false;
	}
	if (c->st)
		atomic_fetch_add_explicit(&c->st->copy_bytes_sent, slot->len - SDP_BSDH_SIZE,
					  memory_order_relaxed);
	c->tx_posted++;
	return true;
}

static bool post_ctrl(struct sdp_conn *c, uint8_t mid)
{
	uint32_t idx = c->ctrl_next++ % CTRL_SLOTS;
	uint8_t *mem = conn_ctrl_slot(c, idx);
	uint32_t len = (uint32_t)sdp_mid_fixed_len(mid);
	struct sdp_ext ext = { 0 };

	fill_header(c, mid, len, mem);
	if (len > SDP_BSDH_SIZE) {
		if (mid == SDP_MID_ABORT)
			ext.a = (uint32_t)c->abort_errno;
		else if (mid == SDP_MID_DETACH)
			ext.a = c->detach_reason;
		else if (mid == SDP_MID_COMMIT)
			sdp_nonce_to_ext(c->nonce_local, &ext);
		else
			zc_fill_ext(c, mid, &ext);
		sdp_ext_to_wire(&ext, mem + SDP_BSDH_SIZE);
	}
	if (mid == SDP_MID_ATTACH && sdp_tun.debug_fail_attach) {
		sdp_warn("SDPSHIM_DEBUG_FAIL_ATTACH: forcing the QP into the error state as ATTACH is posted");
		if (c->link) /* the ATTACH is flushed, never confirmed */
			link_force_fail(c, "SDPSHIM_DEBUG_FAIL_ATTACH");
		else
			qp_force_error(c);
	}
	if (post_send(c, WR_ID(WR_SEND_CTRL, idx), mem, len, c->rx_mr ? c->rx_mr->lkey : 0) != 0) {
		close_ev_carrier_failed(c, EIO, "posting a control send failed");
		return false;
	}
	c->ctrl_outstanding++;
	if (mid == SDP_MID_ATTACH) {
		c->attach_idx = idx; /* its completion tells the client knows (cq.c) */
		c->attach_posted = true;
	}
	if (mid == SDP_MID_CREDIT_UPDATE && c->st)
		atomic_fetch_add_explicit(&c->st->credit_updates_sent, 1, memory_order_relaxed);
	return true;
}

void tx_queue_ctrl(struct sdp_conn *c, uint8_t mid)
{
	c->ctrl_pending |= CTRL_BIT(mid);
}

static bool sq_has_room(const struct sdp_conn *c)
{
	return c->sq_outstanding < c->sq_depth;
}

/* An RdmaRdCompl releases the peer's writer, whose app may read nothing
 * until then: an echo server that filled the writer's receive ring up to our
 * reserve would otherwise wait for the writer's app, and the writer for this
 * answer.  It may take the last credit when the ack it carries leaves the
 * peer a credit toward us: it asks for an ack (STARVING), and the peer's
 * credit update, which may take its own last credit, gives ours back. */
static bool rd_compl_may_take_last(const struct sdp_conn *c)
{
	return peer_view_of_credits(c->buf_count, c->rx_seq, c->rx_ack) >= 1;
}

/* Sends pending control messages in `allowed`, lowest mid first. */
static void send_ctrls(struct sdp_conn *c, uint32_t allowed)
{
	if (!(c->ctrl_pending & allowed))
		return;
	for (uint8_t mid = 1; mid < 32; mid++) {
		/* A keepalive probe too: like TCP's window probe, it must go while
		 * the peer's app reads nothing (its answer is the RC ack). */
		bool may_take_last = mid == SDP_MID_CREDIT_UPDATE || mid == SDP_MID_ABORT ||
				     mid == SDP_MID_KEEPALIVE ||
				     (mid == SDP_MID_RDMA_RD_COMPL && rd_compl_may_take_last(c));

		if (!(c->ctrl_pending & allowed & CTRL_BIT(mid)))
			continue;
		if (!sq_has_room(c) || c->carrier_dead || c->ctrl_outstanding >= CTRL_SLOTS)
			return;
		if (!credits_allow_ctrl(tx_credits(c), may_take_last))
			continue; /* the last credit is kept for updates */
		if (mid == SDP_MID_CREDIT_UPDATE && c->rx_ack_sent == c->rx_ack) {
			c->ctrl_pending &= ~CTRL_BIT(mid); /* already carried by another message */
			continue;
		}
		c->ctrl_pending &= ~CTRL_BIT(mid);
		if (!post_ctrl(c, mid))
			return;
		if (mid == SDP_MID_DISCONN)
			close_ev_tx_flushed(c);
	}
}

/* CLIMB_HALF (core/climb.c): the new channel carries our writes already. */
static bool phase_sends_data(enum conn_phase phase)
{
	return phase == CONN_OPEN || phase == CONN_CLIMB_HALF;
}

static bool phase_sends_ctrl(enum conn_phase phase)
{
	return phase == CONN_OPEN || phase == CONN_ATTACHING || phase == CONN_PENDING ||
	       phase == CONN_AWAIT_ATTACH || phase == CONN_TCP_CONNECTING || phase == CONN_CLIMB_HALF;
}

/* Data may not overtake a held ATTACH. */
static bool may_send_data(const struct sdp_conn *c)
{
	return phase_sends_data(c->phase) && !c->attach_held;
}

/* Does someone wait for a send of this stream to complete, rather than
 * merely have one in flight?  Room in its queue or for its control
 * messages, its close, its move to TCP, a confirmation of its ATTACH. */
static bool sends_awaited(const struct sdp_conn *c)
{
	return c->sq_outstanding > 0 &&
	       (c->app_closed || c->sw.started || c->attach_unconfirmed ||
		c->close_state != CLOSE_ACTIVE || !sq_has_room(c) ||
		c->ctrl_outstanding >= CTRL_SLOTS);
}

/* A linked stream's awaited send must raise an event when it completes
 * (core/link.c arms the link's CQ for solicited events alone otherwise). */
void tx_note_awaited_sends(struct sdp_conn *c)
{
	if (c->link && sends_awaited(c))
		link_stream_awaits_sends(c);
}

static void tx_kick_posts(struct sdp_conn *c);

void tx_kick(struct sdp_conn *c)
{
	tx_kick_posts(c);
	tx_note_awaited_sends(c);
}

static void tx_kick_posts(struct sdp_conn *c)
{
	bool starving = false;
	uint32_t first = CTRL_OVERTAKING;

	if (!c->qp || !c->ctrl_mem || c->carrier_dead || c->link_stopped ||
	    !phase_sends_ctrl(c->phase))
		return;
	if (!c->ctrl_pending && !tx_has_unposted(c))
		goto note_credits; /* nothing waits (most kicks after a completion) */
	if (!update_goes_first(may_send_data(c) && tx_has_unposted(c), tx_credits(c)))
		first &= ~CTRL_BIT(SDP_MID_CREDIT_UPDATE); /* the data carries the ack */
	send_ctrls(c, first);
	if (!may_send_data(c)) /* read again: a failed control post may have moved the phase */
		return;
	while (tx_has_unposted(c) && sq_has_room(c) && !c->carrier_dead) {
		struct tx_slot *slot = slot_at(c, c->tx_posted);
		bool partial = c->tx_posted + 1 == c->tx_head && slot->len < c->tx_slot_size;

		if (!credits_allow_data(tx_credits(c))) {
			starving = true;
			break;
		}
		if (partial && data_in_flight(c) >= coalesce_threshold(c))
			break; /* the last message asked for an ack; more bytes may join */
		if (!post_data_slot(c))
			return;
	}
	if (starving && c->st)
		atomic_fetch_add_explicit(&c->st->credit_stalls, 1, memory_order_relaxed);
	if (starving && !c->link)
		conn_probe_arm(c); /* a link watches its peer itself (core/link.c) */
	if (!tx_has_unposted(c))
		send_ctrls(c, ~0u);
	else
		send_ctrls(c, CTRL_BIT(SDP_MID_CREDIT_UPDATE)); /* unless the data carried it */
note_credits:
	if (c->st)
		atomic_store_explicit(&c->st->tx_credits, tx_credits(c), memory_order_relaxed);
}

void tx_free_acked(struct sdp_conn *c, uint32_t ack)
{
	c->tx_peer_ack = ack;
	while (c->tx_tail != c->tx_posted && !sdp_seq_after(slot_at(c, c->tx_tail)->seq, ack))
		slot_mem_release(c, c->tx_tail++);
}

size_t tx_slots_payload(const struct sdp_conn *c, uint32_t first, uint32_t end, uint8_t *dst)
{
	size_t total = 0;

	for (uint32_t pos = first; c->tx_slots && pos != end; pos++) {
		uint32_t idx = ring_index(pos, c->tx_nslots);
		uint32_t n = c->tx_slots[idx].len - (uint32_t)SDP_BSDH_SIZE;

		if (dst)
			memcpy(dst + total, slot_mem(c, pos) + SDP_BSDH_SIZE, n);
		total += n;
	}
	return total;
}

uint64_t tx_kept_run(const struct sdp_conn *c, uint64_t end_off, uint32_t *first, size_t *payload)
{
	uint64_t start = end_off;

	*first = c->tx_head;
	*payload = 0;
	while (c->tx_slots && *first != c->tx_tail) {
		const struct tx_slot *slot = slot_at(c, *first - 1);
		uint32_t n = slot->len - (uint32_t)SDP_BSDH_SIZE;

		if (slot->off + n != start)
			break;
		start = slot->off;
		*payload += n;
		(*first)--;
	}
	return start;
}

bool tx_all_consumed(const struct sdp_conn *c)
{
	return c->tx_tail == c->tx_head;
}

void tx_drop_all(struct sdp_conn *c)
{
	while (c->tx_slots && c->tx_tail != c->tx_head)
		slot_mem_release(c, c->tx_tail++);
	c->tx_tail = c->tx_posted = c->tx_head;
}
