/* Allocation of a channel: indicators, the QP and CQ, registered receive
 * buffers and send slots; and their release on the progress thread. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/dev.h"
#include "core/link.h"
#include "core/progress.h"
#include "core/qp.h"
#include "core/verbs_fence.h"
#include "core/zcopy.h"

#define REQ_MAX_INLINE 256u

static void conn_timer_fired(void *arg);

static _Atomic uint64_t conn_serials;

struct sdp_conn *conn_alloc(bool is_server, const struct sdp_policy *policy)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cm_kind = CM_KIND_CONN;
	pthread_mutex_init(&c->lock, NULL);
	conn_cond_init(&c->cond);
	atomic_init(&c->refs, 1);
	c->is_server = is_server;
	c->policy = *policy;
	conn_phase_start(c, is_server ? CONN_PENDING : CONN_RESOLVING);
	c->close_state = CLOSE_ACTIVE;
	c->tcp_fd = -1;
	c->buf_size = sdp_tun.buf_size;
	c->buf_count = (uint16_t)sdp_tun.buf_count;
	c->timer.fn = conn_timer_fired;
	c->timer.arg = c;
	c->stall_timer.fn = conn_stall_timer_fired;
	c->stall_timer.arg = c;
	c->probe_timer.fn = conn_probe_timer_fired;
	c->probe_timer.arg = c;
	c->rd_fd = progress_hide_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	c->wr_fd = progress_hide_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	c->serial = atomic_fetch_add(&conn_serials, 1) + 1;
	if (c->rd_fd < 0 || c->wr_fd < 0) {
		progress_close_hidden(c->rd_fd);
		progress_close_hidden(c->wr_fd);
		free(c);
		return NULL;
	}
	return c;
}

void conn_get(struct sdp_conn *c)
{
	atomic_fetch_add(&c->refs, 1);
}

static void conn_free(struct sdp_conn *c)
{
	progress_close_hidden(c->rd_fd);
	progress_close_hidden(c->wr_fd);
	free(c->drain_buf);
	free(c->sw.local);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The last reference frees the channel.  Its timer is unlinked first: a
 * close after teardown may have armed the linger timer again, and a freed
 * node left in the timer list turns it into a cycle. */
void conn_put(struct sdp_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	progress_timer_cancel(&c->timer);
	progress_timer_cancel(&c->stall_timer);
	progress_timer_cancel(&c->probe_timer);
	conn_free(c);
}

static int create_cq_qp(struct sdp_conn *c, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;
	int err;

	c->sq_depth = (uint32_t)c->buf_count + CTRL_SLOTS;
	c->cq = ibv_create_cq(c->dev->ctx, (int)(c->sq_depth + c->buf_count + 8), c, c->dev->cc, 0);
	if (!c->cq)
		return -errno;
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.cap.max_send_wr = c->sq_depth;
	attr.cap.max_recv_wr = c->buf_count;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = REQ_MAX_INLINE;
	attr.sq_sig_all = 1;
	err = qp_create(c->dev, id, &attr, &c->qp);
	if (err) {
		attr.cap.max_inline_data = 0; /* some devices have no inline sends */
		err = qp_create(c->dev, id, &attr, &c->qp);
		if (err)
			return err;
	}
	c->max_inline = attr.cap.max_inline_data;
	if (ibv_req_notify_cq(c->cq, 0) != 0)
		return -errno;
	return 0;
}

/* Our receive buffers, and after them the control slots our small messages
 * are sent from: one registration, sized by our policy alone. */
static int alloc_rx(struct sdp_conn *c)
{
	int err = 0;

	c->rx_mem_len = conn_rx_mem_len(c->buf_size, c->buf_count);
	c->rx_mem = dev_alloc_registered(c->dev, c->rx_mem_len, &c->rx_mr, &err);
	if (!c->rx_mem)
		return err;
	c->ctrl_mem = c->rx_mem + (size_t)c->buf_size * c->buf_count;
	c->rx_ring = calloc(c->buf_count, sizeof(*c->rx_ring));
	return c->rx_ring ? 0 : -ENOMEM;
}

/* A linked stream pins nothing: its link's buffers carry its messages,
 * and what waits here is in ordinary memory, DATA copies allocated as they
 * arrive (rx.c), send slots as they fill (tx.c). */
int conn_setup_linked_rx(struct sdp_conn *c)
{
	struct rx_entry *ring;
	uint8_t **heap, *ctrl;

	if (c->rx_heap)
		return 0;
	ring = calloc(c->buf_count, sizeof(*ring));
	heap = calloc(c->buf_count, sizeof(*heap));
	ctrl = malloc((size_t)CTRL_SLOTS * CTRL_SLOT_SIZE);
	if (!ring || !heap || !ctrl) {
		free(ring);
		free(heap);
		free(ctrl);
		return -ENOMEM;
	}
	c->rx_ring = ring;
	c->rx_heap = heap;
	c->ctrl_mem = ctrl;
	c->sq_depth = (uint32_t)c->buf_count + CTRL_SLOTS;
	return 0;
}

/* A linked stream's messages go out through the link's send slots: no
 * larger than one holds, whatever buffer size the peer announced (an
 * OPEN, an OPEN_ACK, a climb's REQ or CHAL). */
static int alloc_tx_linked(struct sdp_conn *c)
{
	uint32_t count = c->peer_buf_count < c->buf_count ? c->peer_buf_count : c->buf_count;
	uint32_t link_max = link_stream_msg_max(c->link);

	c->tx_slot_size = c->peer_buf_size < c->buf_size ? c->peer_buf_size : c->buf_size;
	if (c->tx_slot_size > link_max)
		c->tx_slot_size = link_max;
	c->tx_nslots = count + 1;
	c->tx_heap = calloc(c->tx_nslots, sizeof(*c->tx_heap));
	c->tx_slots = calloc(c->tx_nslots, sizeof(*c->tx_slots));
	return c->tx_heap && c->tx_slots ? 0 : -ENOMEM;
}

static void free_linked_memory(struct sdp_conn *c)
{
	for (uint32_t i = 0; c->rx_heap && i < c->buf_count; i++)
		free(c->rx_heap[i]);
	for (uint32_t i = 0; c->tx_heap && i < c->tx_nslots; i++)
		free(c->tx_heap[i]);
	free(c->rx_heap);
	free(c->tx_heap);
	free(c->ctrl_mem);
	c->rx_heap = c->tx_heap = NULL;
	c->ctrl_mem = NULL;
}

/* Send slots mirror the peer's buffers, but what we pin for them is
 * bounded by our own geometry: a peer announcing more (or larger) buffers
 * gets no more memory, only fewer credits used (or smaller messages). */
static int alloc_tx(struct sdp_conn *c)
{
	uint32_t count = c->peer_buf_count < c->buf_count ? c->peer_buf_count : c->buf_count;
	int err = 0;

	c->tx_slot_size = c->peer_buf_size < c->buf_size ? c->peer_buf_size : c->buf_size;
	c->tx_nslots = count + 1;
	c->tx_mem_len = conn_tx_mem_len(c->tx_slot_size, c->tx_nslots);
	c->tx_mem = dev_alloc_registered(c->dev, c->tx_mem_len, &c->tx_mr, &err);
	if (!c->tx_mem)
		return err;
	c->tx_slots = calloc(c->tx_nslots, sizeof(*c->tx_slots));
	return c->tx_slots ? 0 : -ENOMEM;
}

/* -ENOBUFS is the pinned-memory budget's refusal (dev_alloc_registered):
 * resources, as the budget is our policy; the kernel's refusal to pin
 * (RLIMIT_MEMLOCK) comes as -ENOMEM, -EPERM or -EAGAIN. */
enum sdp_reason conn_setup_error_reason(int err)
{
	if (err == -ENOBUFS)
		return SDP_REASON_RESOURCES;
	if (err == -ENOMEM || err == -EPERM || err == -EAGAIN)
		return SDP_REASON_MEMLOCK;
	return SDP_REASON_RESOURCES;
}

void conn_warn_setup_error(int err, const char *what)
{
	/* The budget says so itself, once per process: not once per connection. */
	sdp_log_at(err == -ENOBUFS ? SDP_LOG_DEBUG : SDP_LOG_WARN,
		   "cannot set up %s: %s%s", what, strerror(-err),
		   conn_setup_error_reason(err) == SDP_REASON_MEMLOCK ? " (RLIMIT_MEMLOCK too low?)"
		   : err == -ENOBUFS ? " (the pinned-memory budget is spent)" : "");
}

int conn_setup_qp(struct sdp_conn *c, struct rdma_cm_id *id, uint32_t peer_buf_size,
		  uint16_t peer_buf_count, enum sdp_reason *reason)
{
	int err;

	c->dev = dev_get(id->verbs);
	if (!c->dev) {
		*reason = SDP_REASON_RDMA_CM_ERROR;
		return -ENODEV;
	}
	VERBS_CTL_ENTER();
	err = create_cq_qp(c, id);
	VERBS_CTL_LEAVE();
	if (!err)
		err = alloc_rx(c);
	if (!err && peer_buf_count)
		err = conn_setup_tx(c, peer_buf_size, peer_buf_count);
	if (err) {
		*reason = conn_setup_error_reason(err);
		conn_warn_setup_error(err, "an RDMA channel");
		return err;
	}
	return 0;
}

int conn_setup_tx(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count)
{
	c->peer_buf_size = peer_buf_size;
	c->peer_buf_count = peer_buf_count;
	c->tx_peer_bufs = peer_buf_count;
	return c->link ? alloc_tx_linked(c) : alloc_tx(c);
}

static int post_recv(struct sdp_conn *c, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->rx_mem + (size_t)slot * c->buf_size),
		.length = c->buf_size,
		.lkey = c->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = WR_ID(WR_RECV, slot), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(c->qp, &wr, &bad);
}

int conn_repost_recv(struct sdp_conn *c, uint32_t slot)
{
	int rc;

	if (c->rx_heap) {
		free(c->rx_heap[slot]); /* a linked stream's copy: the link reposted long ago */
		c->rx_heap[slot] = NULL;
		return 0;
	}
	if (!c->qp)
		return -ENOTCONN;
	SDP_GUARD_ENTER();
	rc = post_recv(c, slot);
	SDP_GUARD_LEAVE();
	return rc ? -rc : 0;
}

void conn_post_all_recvs(struct sdp_conn *c)
{
	for (uint32_t i = 0; !c->link && i < c->buf_count; i++)
		conn_repost_recv(c, i);
	if (c->st)
		atomic_store(&c->st->rx_posted, c->buf_count);
}

void conn_release_channel(struct sdp_conn *c)
{
	link_stream_fence(c); /* app threads poll the link too: nothing reaches c past here */
	zc_release(c);
	if (c->link || c->rx_heap)
		link_stream_detach(c);
	if (c->rx_heap)
		free_linked_memory(c); /* a linked stream's (ctrl_mem is malloc'd there) */
	c->ctrl_mem = NULL;
	VERBS_CTL_ENTER();
	qp_destroy(c->dev, c->cm_id, c->qp);
	c->qp = NULL;
	if (c->cq)
		ibv_destroy_cq(c->cq);
	c->cq = NULL;
	VERBS_CTL_LEAVE();
	/* The registrations go before the id (see link.c destroy_resources). */
	dev_free_registered(c->rx_mem, c->rx_mem_len, c->rx_mr);
	dev_free_registered(c->tx_mem, c->tx_mem_len, c->tx_mr);
	c->rx_mem = c->tx_mem = NULL;
	c->rx_mr = c->tx_mr = NULL;
	if (c->dev) {
		dev_conn_gone(c->dev);
		c->dev = NULL;
	}
	VERBS_CTL_ENTER();
	if (c->cm_id)
		rdma_destroy_id(c->cm_id);
	c->cm_id = NULL;
	VERBS_CTL_LEAVE();
	free(c->rx_ring);
	free(c->tx_slots);
	c->rx_ring = NULL;
	c->tx_slots = NULL;
}

void conn_destroy_resources(struct sdp_conn *c)
{
	conn_release_channel(c);
	if (c->tcp_fd >= 0) {
		if (c->tcp_watched)
			progress_unwatch(c->tcp_fd);
		c->tcp_watched = false;
		progress_close_hidden(c->tcp_fd);
		c->tcp_fd = -1;
	}
}

static void destroy_on_progress(void *arg)
{
	struct sdp_conn *c = arg;

	progress_timer_cancel(&c->timer);
	progress_timer_cancel(&c->stall_timer);
	progress_timer_cancel(&c->probe_timer);
	conn_destroy_resources(c);
	conn_lock(c);
	climb_closed(c);
	if (c->lingering) {
		c->lingering = false;
		progress_linger_end();
	}
	if (c->phase != CONN_FALLBACK)
		conn_set_phase(c, CONN_DEAD);
	conn_update_readiness(c, false);
	conn_wake_waiters(c);
	conn_unlock(c);
	conn_put(c); /* the reference the resources held */
}

void conn_schedule_destroy(struct sdp_conn *c)
{
	if (c->destroy_queued)
		return;
	c->destroy_queued = true;
	if (progress_defer(destroy_on_progress, c) != 0)
		sdp_error("cannot queue channel teardown: out of memory (channel leaked)");
}

static void conn_timer_fired(void *arg)
{
	conn_on_timer((struct sdp_conn *)arg);
}
