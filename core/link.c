/* Links: one RC connection per pair of processes (per server listener),
 * carrying up to SDPSHIM_LINK_STREAMS streams.  This file owns the link's
 * QP, CQ and registered buffers, its framing and credits (docs/links.md),
 * the order of every send on it, and the table of its streams; a stream's
 * own protocol (rx.c, tx.c, zcopy) is unchanged above it. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/pin_budget.h" /* pin_pages_len() */
#include "base/self.h"
#include "base/stats_shm.h"
#include "core/conn_internal.h"
#include "core/cq.h" /* app_wake_sweep_start() */
#include "core/dev.h"
#include "core/link.h"
#include "core/listener.h"
#include "core/progress.h"
#include "core/qp.h"
#include "core/verbs_fence.h"

#define LINK_DIRECT_WRS  256u /* work requests beyond the send slots (zero-copy) */
#define LINK_CONNECT_BOUND_MS 30000u
#define LINK_WR_SEND  1u
#define LINK_WR_RECV  2u
#define LINK_WR_ID(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))

enum link_state {
	LINK_CONNECTING, /* client: resolving and connecting; server: accepted, not established */
	LINK_UP,
	LINK_FAILED,     /* carrier gone or given up: streams move to TCP */
	LINK_CLOSING,    /* idle, disconnecting */
};

enum link_job_kind { JOB_COPY, JOB_WR, JOB_LINK };

/* A send waiting for room on the link (FIFO: a stream's order is kept). */
struct link_job {
	struct link_job *next;
	enum link_job_kind kind;
	struct sdp_conn *c;        /* COPY, WR: with a reference */
	uint64_t wr_id;            /* the stream's */
	const uint8_t *msg;        /* COPY: stays valid until the send completes */
	uint8_t *owned;            /* COPY whose stream went first: msg's own copy */
	uint32_t len;
	struct ibv_send_wr wr;     /* WR */
	struct ibv_sge sge;
	uint8_t lkind;             /* LINK */
	uint16_t stream;
	uint8_t payload[64];       /* the largest link message's */
};

_Static_assert(sizeof(struct sdp_open_wire) <= 64 && sizeof(struct sdp_open_ack_wire) <= 64 &&
		       sizeof(struct sdp_climb_req_wire) <= 64 &&
		       sizeof(struct sdp_climb_chal_wire) <= 64 &&
		       sizeof(struct sdp_climb_prove_wire) <= 64,
	       "a link message's payload fits a job");

/* A posted send-queue entry: whose it is, and its send slot. */
struct link_wr {
	struct sdp_conn *c; /* with a reference; NULL for the link's own message */
	uint64_t wr_id;     /* the stream's */
	int32_t slot;       /* -1: no slot (a zero-copy request) */
	int32_t next_free;
};

struct sdp_link {
	int cm_kind; /* CM_KIND_LINK: first, for rdma_cm id and CQ contexts */
	pthread_mutex_t lock;
	pthread_mutex_t poll_lock; /* one thread takes in the CQ at a time: streams see their
				    * messages in order (taken with no stream or link lock held) */
	_Atomic int refs;
	enum link_state state;
	bool is_server;
	_Atomic bool destroying; /* set under lock; read without it by a poller (cq_pollable) */
	pid_t pid;
	struct sdp_link *next; /* the process's list */
	const char *why;       /* why it failed (static text) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	uint8_t local_addr[16];
	struct sdp_listener *lsn; /* server: the listener it arrived on (a reference) */

	struct rdma_cm_id *cm_id;
	struct sdp_dev *dev;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t max_inline;
	uint32_t sq_depth;
	bool peer_solicits;    /* its Hello: every message of the peer's asks for an event */
	bool open_commits;     /* both Hellos: a stream may open with OPEN_COMMIT */
	/* Sends posted and completed (link lock): an RC queue completes them
	 * in order, so a send is delivered once sends_done reaches its number. */
	uint64_t sends_posted, sends_done;
	/* Liveness (probe_check): what had been heard from the peer at the
	 * last look (receives plus completed sends) and since when nothing
	 * more; a probe waits for sends_done to reach probe_until. */
	uint64_t heard_mark, quiet_since_ms;
	uint64_t probe_until, probe_started_ms;
	_Atomic bool arm_owed; /* an event left the CQ unarmed for a spinner (set: poll lock) */
	/* Non-blocking calls that took the CQ in (a recv(MSG_DONTWAIT) loop):
	 * how many, and the sleep epoch of the last (app_wake.c).  The mark is
	 * the count the last put-off or lease check saw (poll lock). */
	_Atomic unsigned nb_polls, nb_poll_epoch;
	unsigned nb_polls_mark;
	_Atomic int poll_waiters; /* threads blocked on poll_lock (drain_cq) */
	_Atomic bool armed_solicited; /* the CQ is armed for solicited events only (link_arm;
				       * written under lock, read without it first) */

	/* Receive: our buffers, reposted as soon as a message is taken in. */
	uint32_t buf_size;
	uint32_t buf_count;
	uint8_t *rx_mem;
	size_t rx_mem_len;
	struct ibv_mr *rx_mr;
	uint32_t rx_lseq;      /* the peer's last message taken in and its buffer reposted */
	uint32_t rx_lack_sent; /* the last rx_lseq we told the peer */
	bool credit_due;       /* the peer is starving: tell it at once */

	/* Send. */
	uint32_t peer_buf_size, peer_buf_count;
	uint32_t slot_size, nslots;
	uint8_t *tx_mem;
	size_t tx_mem_len;
	struct ibv_mr *tx_mr;
	int32_t *slot_free;
	uint32_t slots_free;
	struct link_wr *wrs;
	int32_t wr_free;
	uint32_t wrs_free;
	uint32_t tx_lseq, tx_peer_lack;
	struct link_job *jobs, *jobs_tail;
	uint32_t jobs_queued; /* in jobs: bounded (submit_locked) */

	/* Streams. */
	struct sdp_conn **streams;
	uint8_t *peer_holds;   /* client: the server has not released this index yet */
	uint32_t streams_max, nstreams;
	struct sdp_conn *sink_owner; /* the one stream whose sink the peer may WRITE (see link_sink_claim) */
	struct progress_timer timer; /* idle lifetime; a client's connect bound */
	struct sdp_link_stats *st;   /* its record for `sdpshim stat`, or NULL */
};

static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_link *links;
static unsigned links_count;

static void link_get(struct sdp_link *link)
{
	atomic_fetch_add(&link->refs, 1);
}

/* ---------------------------------------------------------------- stats */

#define LINK_COUNT(link, field, n) \
	do { if ((link)->st) atomic_fetch_add_explicit(&(link)->st->field, (n), memory_order_relaxed); } while (0)

static const uint8_t stats_state_of[] = {
	[LINK_CONNECTING] = STATS_LINK_CONNECTING, [LINK_UP] = STATS_LINK_UP,
	[LINK_FAILED] = STATS_LINK_FAILED, [LINK_CLOSING] = STATS_LINK_CLOSING,
};

static void stats_open(struct sdp_link *link)
{
	struct stats_seg *seg = stats_seg_current();
	struct timespec now;

	link->st = seg ? stats_link_alloc(seg) : NULL;
	if (!link->st)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	stats_link_begin(link->st);
	link->st->role = link->is_server ? STATS_LINK_SERVER : STATS_LINK_CLIENT;
	link->st->state = STATS_LINK_CONNECTING;
	link->st->opened_ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
	atomic_store(&link->st->streams_max, link->is_server ? SDP_LINK_STREAMS_MAX : link->streams_max);
	stats_link_end(link->st);
}

/* The identity: addresses and state (link locked, or only this thread). */
static void stats_identity(struct sdp_link *link)
{
	if (!link->st)
		return;
	stats_link_begin(link->st);
	link->st->state = stats_state_of[link->state];
	if (link->cm_id) {
		stats_addr_set(&link->st->local, rdma_get_local_addr(link->cm_id));
		stats_addr_set(&link->st->peer, rdma_get_peer_addr(link->cm_id));
	}
	stats_link_end(link->st);
}

static void stats_credits(struct sdp_link *link)
{
	if (!link->st)
		return;
	atomic_store_explicit(&link->st->credits_total, link->peer_buf_count, memory_order_relaxed);
	atomic_store_explicit(&link->st->credits_in_use, link->tx_lseq - link->tx_peer_lack,
			      memory_order_relaxed);
}

static void stats_close(struct sdp_link *link)
{
	struct stats_seg *seg = stats_seg_current();

	if (link->st && seg && link->pid == self_pid())
		stats_link_release(seg, link->st);
	link->st = NULL;
}

static _Atomic unsigned arms_owed; /* links with arm_owed set */
static _Atomic unsigned opens_sent; /* SDPSHIM_DEBUG_FAIL_OPEN counts them (tests only) */
#define LINK_POLL_MAX 64u     /* links a busy-poll spin polls (link_poll_all) */

static void link_free(struct sdp_link *link)
{
	if (link->arm_owed && link->pid == self_pid())
		atomic_fetch_sub(&arms_owed, 1);
	free(link->slot_free);
	free(link->wrs);
	free(link->streams);
	free(link->peer_holds);
	pthread_mutex_destroy(&link->lock);
	pthread_mutex_destroy(&link->poll_lock);
	free(link);
}

static void link_put(struct sdp_link *link)
{
	if (atomic_fetch_sub(&link->refs, 1) == 1)
		link_free(link);
}

static void link_timer_fired(void *arg);

static struct sdp_link *link_alloc(bool is_server)
{
	struct sdp_link *link = calloc(1, sizeof(*link));

	if (!link)
		return NULL;
	link->cm_kind = CM_KIND_LINK;
	pthread_mutex_init(&link->lock, NULL);
	pthread_mutex_init(&link->poll_lock, NULL);
	atomic_init(&link->refs, 1); /* the process's list */
	link->is_server = is_server;
	link->pid = self_pid();
	link->state = LINK_CONNECTING;
	/* A server takes whatever index a client picks (the wire's bound); a
	 * client uses what its own tunable allows. */
	link->streams_max = is_server ? SDP_LINK_STREAMS_MAX : sdp_tun.link_streams;
	link->streams = calloc(link->streams_max, sizeof(*link->streams));
	link->peer_holds = calloc(link->streams_max, 1);
	link->buf_size = sdp_tun.buf_size + (uint32_t)SDP_LH_SIZE;
	link->buf_count = sdp_tun.link_bufs;
	link->timer.fn = link_timer_fired;
	link->timer.arg = link;
	link->wr_free = -1;
	if (!link->streams || !link->peer_holds) {
		link_free(link);
		return NULL;
	}
	stats_open(link);
	return link;
}

/* ------------------------------------------------------------ resources */

static int create_cq_qp(struct sdp_link *link, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;
	int err;

	link->sq_depth = link->buf_count + LINK_DIRECT_WRS;
	link->cq = ibv_create_cq(link->dev->ctx, (int)(link->sq_depth + link->buf_count + 8), link,
				 link->dev->link_cc, 0);
	if (!link->cq)
		return -errno;
	atomic_fetch_add(&link->dev->link_cqs, 1);
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.send_cq = link->cq;
	attr.recv_cq = link->cq;
	attr.cap.max_send_wr = link->sq_depth;
	attr.cap.max_recv_wr = link->buf_count;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 256;
	attr.sq_sig_all = 1;
	err = qp_create(link->dev, id, &attr, &link->qp);
	if (err) {
		attr.cap.max_inline_data = 0;
		err = qp_create(link->dev, id, &attr, &link->qp);
		if (err)
			return err;
	}
	link->max_inline = attr.cap.max_inline_data;
	if (ibv_req_notify_cq(link->cq, 0) != 0) /* every completion, until link_arm decides */
		return -errno;
	return 0;
}

static int post_recv(struct sdp_link *link, uint32_t idx)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(link->rx_mem + (size_t)idx * link->buf_size),
		.length = link->buf_size,
		.lkey = link->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = LINK_WR_ID(LINK_WR_RECV, idx), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	int rc;

	SDP_GUARD_ENTER();
	rc = ibv_post_recv(link->qp, &wr, &bad);
	SDP_GUARD_LEAVE();
	return rc;
}

/* Our receive side and the QP: before the Hello (client) or HelloAck. */
static int setup_receive(struct sdp_link *link, struct rdma_cm_id *id)
{
	int err;

	link->dev = dev_get(id->verbs);
	if (!link->dev)
		return -ENODEV;
	VERBS_CTL_ENTER();
	err = create_cq_qp(link, id);
	VERBS_CTL_LEAVE();
	if (err)
		return err;
	link->rx_mem_len = (size_t)link->buf_size * link->buf_count;
	link->rx_mem = dev_alloc_registered(link->dev, link->rx_mem_len, &link->rx_mr, &err);
	if (!link->rx_mem)
		return err ? err : -ENOMEM;
	LINK_COUNT(link, pinned_bytes, pin_pages_len(link->rx_mem_len)); /* as the budget counts */
	for (uint32_t i = 0; i < link->buf_count; i++)
		if (post_recv(link, i) != 0)
			return -EIO;
	return 0;
}

/* The send side, once the peer's geometry is known: slots as large as its
 * buffers (capped at ours), as many as ours; sizes nothing from its word
 * beyond our own policy. */
static int setup_send(struct sdp_link *link, uint32_t peer_size, uint32_t peer_count)
{
	int err = 0;

	link->peer_buf_size = peer_size;
	link->peer_buf_count = peer_count;
	link->slot_size = peer_size < link->buf_size ? peer_size : link->buf_size;
	link->nslots = link->buf_count;
	link->tx_mem_len = (size_t)link->slot_size * link->nslots;
	link->tx_mem = dev_alloc_registered(link->dev, link->tx_mem_len, &link->tx_mr, &err);
	if (!link->tx_mem)
		return err ? err : -ENOMEM;
	LINK_COUNT(link, pinned_bytes, pin_pages_len(link->tx_mem_len));
	link->slot_free = calloc(link->nslots, sizeof(*link->slot_free));
	link->wrs = calloc(link->sq_depth, sizeof(*link->wrs));
	if (!link->slot_free || !link->wrs)
		return -ENOMEM;
	for (uint32_t i = 0; i < link->nslots; i++)
		link->slot_free[link->slots_free++] = (int32_t)i;
	for (uint32_t i = 0; i < link->sq_depth; i++) {
		link->wrs[i].next_free = link->wr_free;
		link->wr_free = (int32_t)i;
	}
	link->wrs_free = link->sq_depth;
	return 0;
}

/* The largest stream message (base header included) the link carries. */
static uint32_t link_msg_max(const struct sdp_link *link)
{
	return link->slot_size - (uint32_t)SDP_LH_SIZE;
}

uint32_t link_stream_msg_max(const struct sdp_link *link)
{
	return link_msg_max(link);
}

static void destroy_resources(struct sdp_link *link)
{
	VERBS_CTL_ENTER();
	qp_destroy(link->dev, link->cm_id, link->qp);
	link->qp = NULL;
	if (link->cq) {
		ibv_destroy_cq(link->cq);
		atomic_fetch_sub(&link->dev->link_cqs, 1);
	}
	link->cq = NULL;
	VERBS_CTL_LEAVE();
	/* The registrations go before the id: destroying the last id on a
	 * device librdmacm has seen leave closes librdmacm's context, which
	 * they are on unless the record has one of its own. */
	dev_free_registered(link->rx_mem, link->rx_mem_len, link->rx_mr);
	dev_free_registered(link->tx_mem, link->tx_mem_len, link->tx_mr);
	link->rx_mem = link->tx_mem = NULL;
	if (link->dev)
		dev_conn_gone(link->dev); /* the last use flushes cached registrations */
	link->dev = NULL;
	VERBS_CTL_ENTER();
	if (link->cm_id)
		rdma_destroy_id(link->cm_id);
	link->cm_id = NULL;
	VERBS_CTL_LEAVE();
}

/* ------------------------------------------------------------- sending */

static uint32_t link_credits(const struct sdp_link *link)
{
	uint32_t used = link->tx_lseq - link->tx_peer_lack;

	return used >= link->peer_buf_count ? 0 : link->peer_buf_count - used;
}

static void wr_give(struct sdp_link *link, uint32_t idx)
{
	link->wrs[idx].next_free = link->wr_free;
	link->wr_free = (int32_t)idx;
	link->wrs_free++;
}

static int32_t wr_take(struct sdp_link *link, struct sdp_conn *c, uint64_t wr_id, int32_t slot)
{
	int32_t i = link->wr_free;

	link->wr_free = link->wrs[i].next_free;
	link->wrs_free--;
	link->wrs[i] = (struct link_wr){ .c = c, .wr_id = wr_id, .slot = slot, .next_free = -1 };
	return i;
}

/* A header asks for an ack when it leaves the link two credits or fewer;
 * a CREDIT never does (the rule of message_asks_ack, core/credits.h: two
 * ends whose CREDITs asked would trade them forever).  An end whose jobs
 * wait for credits is answered anyway: a job needs two, so the peer holds
 * at least buf_count - 1 buffers it has not advertised, past the half that
 * makes maybe_send_credit send. */
static void fill_lh(struct sdp_link *link, uint8_t kind, uint16_t stream, uint32_t len, void *out)
{
	uint32_t credits = link_credits(link), after = credits ? credits - 1 : 0;
	bool asks = after <= 2 && kind != SDP_LINK_CREDIT;
	struct sdp_lh h = {
		.kind = kind,
		.stream = stream,
		.len = len,
		.lseq = ++link->tx_lseq,
		.lack = link->rx_lseq,
		.flags = asks ? SDP_LINK_FLAG_STARVING : 0,
	};

	link->rx_lack_sent = link->rx_lseq;
	link->credit_due = false;
	sdp_lh_to_wire(&h, out);
}

static bool job_has_room(const struct sdp_link *link, const struct link_job *j)
{
	bool needs_slot = j->kind != JOB_WR;
	bool needs_credit = j->kind != JOB_WR || j->wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

	if (!link->wrs_free || (needs_slot && !link->slots_free))
		return false;
	return !needs_credit || link_credits(link) >= 2;
}

static int post_send_wr(struct sdp_link *link, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int rc;

	SDP_GUARD_ENTER();
	rc = ibv_post_send(link->qp, wr, &bad);
	SDP_GUARD_LEAVE();
	if (rc)
		sdp_warn("ibv_post_send on a link failed: %s", strerror(rc));
	else
		link->sends_posted++;
	return rc;
}

/* Posts a message from a send slot: the link header, then len bytes. */
static int post_slot(struct sdp_link *link, struct sdp_conn *c, uint64_t wr_id, uint8_t kind,
		     uint16_t stream, const void *body, uint32_t len)
{
	uint32_t total = (uint32_t)SDP_LH_SIZE + len;
	struct ibv_sge sge = { .length = total, .lkey = link->tx_mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED |
			      (total <= link->max_inline ? IBV_SEND_INLINE : 0),
	};
	int32_t slot;
	uint8_t *mem;

	if (len > link_msg_max(link)) { /* a stream's slots are sized to fit: a bug */
		sdp_error("a %u-byte message does not fit a %u-byte link slot", len, link->slot_size);
		return -EMSGSIZE;
	}
	slot = link->slot_free[--link->slots_free];
	mem = link->tx_mem + (size_t)slot * link->slot_size;
	sge.addr = (uintptr_t)mem;
	fill_lh(link, kind, stream, total, mem);
	if (len)
		memcpy(mem + SDP_LH_SIZE, body, len);
	LINK_COUNT(link, msgs_sent, 1);
	LINK_COUNT(link, bytes_sent, total);
	stats_credits(link);
	wr.wr_id = LINK_WR_ID(LINK_WR_SEND, wr_take(link, c, wr_id, slot));
	return post_send_wr(link, &wr);
}

static int post_job(struct sdp_link *link, struct link_job *j)
{
	switch (j->kind) {
	case JOB_COPY:
		return post_slot(link, j->c, j->wr_id, SDP_LINK_STREAM, j->stream, j->msg, j->len);
	case JOB_LINK:
		return post_slot(link, NULL, 0, j->lkind, j->stream, j->payload, j->len);
	case JOB_WR:
		j->wr.sg_list = &j->sge;
		j->wr.next = NULL;
		if (j->wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			link->tx_lseq++; /* it takes one of the peer's receives */
			j->wr.send_flags |= IBV_SEND_SOLICITED;
		}
		j->wr.wr_id = LINK_WR_ID(LINK_WR_SEND, wr_take(link, j->c, j->wr_id, -1));
		return post_send_wr(link, &j->wr);
	}
	return -EINVAL;
}

static void link_fail_locked(struct sdp_link *link, const char *why);

static void job_release(struct link_job *j)
{
	free(j->owned);
	free(j);
}

/* Posts queued jobs while there is room (link lock held).  A job's
 * reference to its stream passes to the work request. */
static void drain_jobs(struct sdp_link *link)
{
	while (link->jobs && link->state == LINK_UP && job_has_room(link, link->jobs)) {
		struct link_job *j = link->jobs;

		link->jobs = j->next;
		link->jobs_queued--;
		if (!link->jobs)
			link->jobs_tail = NULL;
		if (post_job(link, j) != 0) {
			if (j->c)
				conn_put(j->c);
			job_release(j);
			link_fail_locked(link, "posting a send failed");
			return;
		}
		job_release(j);
	}
}

/* A credit update goes ahead of the queue and may take the last credit:
 * each end can always tell the other that its buffers are back. */
static void maybe_send_credit(struct sdp_link *link)
{
	uint32_t unadvertised = link->rx_lseq - link->rx_lack_sent;

	if (link->state != LINK_UP || !unadvertised)
		return;
	if (!link->credit_due && unadvertised < link->buf_count / 2)
		return;
	if (!link->slots_free || !link->wrs_free || link_credits(link) < 1)
		return;
	if (post_slot(link, NULL, 0, SDP_LINK_CREDIT, 0, NULL, 0) != 0)
		link_fail_locked(link, "posting a credit update failed");
}

static void want_send_events_locked(struct sdp_link *link);

static void enqueue(struct sdp_link *link, struct link_job *j)
{
	want_send_events_locked(link); /* room comes back with send completions */
	j->next = NULL;
	if (link->jobs_tail)
		link->jobs_tail->next = j;
	else
		link->jobs = j;
	link->jobs_tail = j;
	link->jobs_queued++;
}

/* The most sends a link queues.  An honest peer's credits come back as its
 * progress takes messages in, whatever its apps do: a queue holds at most
 * each stream's data within its stream credits, and a few controls each.
 * One that never returns them, and makes us answer (OPENs, REQs), would
 * grow the queue for as long as it talks: the link fails instead. */
static uint32_t jobs_max(const struct sdp_link *link)
{
	if (sdp_tun.debug_link_jobs_max)
		return sdp_tun.debug_link_jobs_max;
	return link->streams_max * (sdp_tun.buf_count + 8u) + 1024u;
}

/* Submits a job: posted at once if nothing waits and there is room. */
/* Link locked.  Returns the job for job_free (posted, or refused: *rc),
 * or NULL: it waits in the queue (a job on the caller's stack waits as a
 * copy on the heap). */
static struct link_job *submit_locked(struct sdp_link *link, struct link_job *j, int *rc,
				      bool on_stack)
{
	*rc = 0;
	if (link->state == LINK_FAILED || link->state == LINK_CLOSING) {
		*rc = -EPIPE;
		return j;
	}
	if (link->jobs && link->jobs_queued >= jobs_max(link)) {
		sdp_warn("a linked peer takes no more messages (%u sends queued, its link credits never "
			 "come back); the link fails", link->jobs_queued);
		link_fail_locked(link, "the peer takes no more messages");
		*rc = -EPIPE;
		return j;
	}
	if (link->state == LINK_UP && !link->jobs && job_has_room(link, j)) {
		if (j->kind == JOB_WR)
			want_send_events_locked(link); /* a zero-copy step waits for its completion */
		if (post_job(link, j) != 0) {
			link_fail_locked(link, "posting a send failed");
			*rc = -EIO;
			return j;
		}
		j->c = NULL; /* the work request holds the reference now */
		return j;
	}
	if (on_stack) {
		struct link_job *copy = malloc(sizeof(*copy));

		if (!copy) {
			*rc = -ENOMEM;
			return j;
		}
		*copy = *j;
		j = copy;
	}
	enqueue(link, j);
	return NULL;
}

static void job_free(struct link_job *j)
{
	if (!j)
		return;
	if (j->c)
		conn_put(j->c);
	job_release(j);
}

static int submit(struct sdp_link *link, struct link_job *j)
{
	int rc;

	pthread_mutex_lock(&link->lock);
	j = submit_locked(link, j, &rc, false);
	pthread_mutex_unlock(&link->lock);
	job_free(j);
	return rc;
}

/* The same for a job on the caller's stack (no allocation when it is
 * posted at once, the common case). */
static int submit_from_stack(struct sdp_link *link, struct link_job *j)
{
	struct link_job *left;
	int rc;

	pthread_mutex_lock(&link->lock);
	left = submit_locked(link, j, &rc, true);
	pthread_mutex_unlock(&link->lock);
	if (left && left->c)
		conn_put(left->c); /* posted (c cleared) or refused: nothing else to free */
	return rc;
}

static struct link_job *job_new(enum link_job_kind kind, struct sdp_conn *c)
{
	struct link_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->kind = kind;
	if (c) {
		conn_get(c);
		j->c = c;
		j->stream = c->link_idx;
	}
	return j;
}

int link_send(struct sdp_conn *c, uint64_t wr_id, const void *msg, uint32_t len)
{
	struct link_job j = { .kind = JOB_COPY, .c = c, .stream = c->link_idx,
			      .wr_id = wr_id, .msg = msg, .len = len };

	if (!c->link || c->link_stopped)
		return -EPIPE;
	conn_get(c);
	return submit_from_stack(c->link, &j);
}

int link_post_wr(struct sdp_conn *c, struct ibv_send_wr *wr)
{
	struct link_job *j;

	if (!c->link || c->link_stopped || wr->num_sge > 1 || wr->next)
		return -EPIPE;
	j = job_new(JOB_WR, c);
	if (!j)
		return -ENOMEM;
	j->wr = *wr;
	j->wr_id = wr->wr_id;
	if (wr->num_sge)
		j->sge = wr->sg_list[0];
	if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		j->wr.imm_data = htobe32(SDP_LINK_IMM(c->link_idx, be32toh(wr->imm_data)));
	return submit(c->link, j);
}

static struct link_job *link_msg_job(uint8_t kind, uint16_t stream, const void *payload,
				     uint32_t len)
{
	struct link_job *j = len <= sizeof(j->payload) ? job_new(JOB_LINK, NULL) : NULL;

	if (!j)
		return NULL;
	j->lkind = kind;
	j->stream = stream;
	j->len = len;
	if (len)
		memcpy(j->payload, payload, len);
	return j;
}

static int send_link_msg(struct sdp_link *link, uint8_t kind, uint16_t stream, const void *payload,
			 uint32_t len)
{
	struct link_job *j = link_msg_job(kind, stream, payload, len);

	return j ? submit(link, j) : -ENOMEM;
}

/* ------------------------------------------------------------ failure */

static void notify_streams_failed(void *arg);

/* The link is gone (or given up): the QP goes to the error state at once,
 * so no remote access survives and every posted request is flushed; its
 * streams hear of it on the progress thread (never under a stream's lock). */
static void link_fail_locked(struct sdp_link *link, const char *why)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	if (link->state == LINK_FAILED)
		return;
	link->state = LINK_FAILED;
	link->why = why;
	stats_identity(link);
	if (link->qp) {
		VERBS_CTL_ENTER();
		ibv_modify_qp(link->qp, &attr, IBV_QP_STATE);
		VERBS_CTL_LEAVE();
	}
	link_get(link);
	if (progress_defer(notify_streams_failed, link) != 0) {
		sdp_error("cannot queue a link's failure: out of memory");
		atomic_fetch_sub(&link->refs, 1);
	}
}

static void link_fail(struct sdp_link *link, const char *why)
{
	pthread_mutex_lock(&link->lock);
	link_fail_locked(link, why);
	pthread_mutex_unlock(&link->lock);
}

void link_force_fail(struct sdp_conn *c, const char *why)
{
	if (c->link)
		link_fail(c->link, why);
}

static void protocol_violation(struct sdp_link *link, const char *what)
{
	sdp_warn_limited("link peer violated the sdpshim protocol (%s); its streams move to TCP", what);
	link_fail(link, "link protocol violation");
}

static void unlist(struct sdp_link *link)
{
	pthread_mutex_lock(&links_lock);
	for (struct sdp_link **pp = &links; *pp; pp = &(*pp)->next) {
		if (*pp == link) {
			*pp = link->next;
			links_count--;
			break;
		}
	}
	pthread_mutex_unlock(&links_lock);
}

static bool sends_in_flight(struct sdp_link *link)
{
	bool any;

	pthread_mutex_lock(&link->lock);
	any = link->wrs_free < link->sq_depth;
	pthread_mutex_unlock(&link->lock);
	return any;
}

/* Progress thread: the completions still queued release their streams'
 * references; then the resources go. */
static void destroy_on_progress(void *arg)
{
	struct sdp_link *link = arg;
	struct ibv_wc wc[16];
	int n;

	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int idle = 0;

	progress_timer_cancel(&link->timer);
	unlist(link);
	VERBS_CTL_ENTER();
	if (link->qp)
		ibv_modify_qp(link->qp, &attr, IBV_QP_STATE);
	VERBS_CTL_LEAVE();
	/* App threads poll the CQ too (drain_cq): the last poll and the
	 * teardown hold the poll lock, and drain_cq looks again once it has
	 * the lock.  Flushed requests complete soon; a bounded wait for them
	 * (each holds a stream's reference). */
	pthread_mutex_lock(&link->poll_lock);
	while (link->wrs && sends_in_flight(link) && idle < 100) {
		SDP_GUARD_ENTER();
		n = link->cq ? ibv_poll_cq(link->cq, 16, wc) : 0;
		SDP_GUARD_LEAVE();
		if (n <= 0) {
			idle++;
			usleep(1000);
		}
		for (int i = 0; i < n; i++) {
			uint32_t idx = (uint32_t)wc[i].wr_id;

			if ((wc[i].wr_id >> 32) == LINK_WR_SEND && idx < link->sq_depth) {
				if (link->wrs[idx].c)
					conn_put(link->wrs[idx].c);
				link->wrs[idx].c = NULL;
				pthread_mutex_lock(&link->lock);
				link->wrs_free++;
				pthread_mutex_unlock(&link->lock);
			}
		}
	}
	do {
		SDP_GUARD_ENTER();
		n = link->cq ? ibv_poll_cq(link->cq, 16, wc) : 0;
		SDP_GUARD_LEAVE();
		for (int i = 0; i < n; i++) {
			uint32_t idx = (uint32_t)wc[i].wr_id;

			if ((wc[i].wr_id >> 32) == LINK_WR_SEND && idx < link->sq_depth && link->wrs[idx].c) {
				conn_put(link->wrs[idx].c);
				link->wrs[idx].c = NULL;
			}
		}
	} while (n > 0);
	destroy_resources(link);
	pthread_mutex_unlock(&link->poll_lock);
	stats_close(link);
	if (link->lsn)
		listener_release(link->lsn);
	link->lsn = NULL;
	sdp_debug("link destroyed");
	link_put(link);
}

/* A failed or closing link without streams is destroyed (link lock held). */
static void maybe_destroy_locked(struct sdp_link *link)
{
	if (link->destroying || link->nstreams || link->state == LINK_UP ||
	    link->state == LINK_CONNECTING)
		return;
	link->destroying = true;
	while (link->jobs) {
		struct link_job *j = link->jobs;

		link->jobs = j->next;
		if (j->c)
			conn_put(j->c);
		job_release(j);
	}
	link->jobs_tail = NULL;
	link->jobs_queued = 0;
	if (progress_defer(destroy_on_progress, link) != 0)
		sdp_error("cannot queue a link's teardown: out of memory (link leaked)");
}

/* The link's streams, each with a reference, in a malloc'd array of *n
 * (link locked); NULL if there is no memory. */
static struct sdp_conn **streams_snapshot_locked(struct sdp_link *link, uint32_t *n)
{
	struct sdp_conn **list = calloc(link->nstreams ? link->nstreams : 1, sizeof(*list));

	*n = 0;
	for (uint32_t i = 0; list && i < link->streams_max; i++) {
		if (link->streams[i]) {
			conn_get(link->streams[i]);
			list[(*n)++] = link->streams[i];
		}
	}
	return list;
}

static void drain_cq(struct sdp_link *link, bool try_only);

static void notify_streams_failed(void *arg)
{
	struct sdp_link *link = arg;
	uint32_t n = 0;
	struct sdp_conn **list;

	/* What completed before the failure happened first: the streams take
	 * in their last messages (a DisConn, credits) before they judge. */
	drain_cq(link, false);
	pthread_mutex_lock(&link->lock);
	list = streams_snapshot_locked(link, &n);
	pthread_mutex_unlock(&link->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct sdp_conn *c = list[i];

		conn_lock(c);
		conn_stream_lost(c, SDP_REASON_RDMA_CM_ERROR, link->why);
		conn_unlock(c);
		conn_put(c);
	}
	free(list);
	pthread_mutex_lock(&link->lock);
	maybe_destroy_locked(link);
	pthread_mutex_unlock(&link->lock);
	link_put(link);
}

/* ------------------------------------------------------------- streams */

/* A link without streams closes: a client's after SDPSHIM_LINK_IDLE_MS, a
 * server's after SDPSHIM_PENDING_TTL_MS, as a channel no accept() claims
 * (longer by default, so the client normally disconnects first).  An idle
 * link pins its buffers for nobody, and a peer cannot hold one. */
static void arm_idle_timer(struct sdp_link *link)
{
	unsigned ms = link->is_server ? sdp_tun.pending_ttl_ms : sdp_tun.link_idle_ms;

	progress_timer_arm(&link->timer, progress_deadline_ms(ms));
}

static void stream_attach_locked(struct sdp_link *link, struct sdp_conn *c, uint16_t idx)
{
	link->streams[idx] = c;
	link->nstreams++;
	LINK_COUNT(link, streams_opened, 1);
	if (link->st)
		atomic_store(&link->st->streams, link->nstreams);
	conn_get(c);
	link_get(link);
	c->link = link;
	c->link_idx = idx;
	c->qp = link->qp;
	if (link->state == LINK_UP)
		progress_timer_cancel(&link->timer); /* its idle lifetime */
}

/* The stream's rings, once its link has a device (c locked or new). */
static int stream_rings(struct sdp_conn *c, struct sdp_link *link)
{
	if (!c->dev) {
		c->dev = link->dev;
		dev_conn_added(c->dev);
	}
	c->qp = link->qp;
	return conn_setup_linked_rx(c);
}

int link_stream_setup(struct sdp_conn *c, struct sdp_link *link, uint16_t idx)
{
	int rc = 0;

	pthread_mutex_lock(&link->lock);
	if (link->state != LINK_UP && link->state != LINK_CONNECTING)
		rc = -EPIPE;
	else if (idx >= link->streams_max || link->streams[idx])
		rc = -EBUSY;
	else
		stream_attach_locked(link, c, idx);
	pthread_mutex_unlock(&link->lock);
	if (rc)
		return rc;
	rc = stream_rings(c, link);
	if (rc)
		link_stream_unsetup(c); /* the refusal that follows owes no RELEASED */
	return rc;
}

/* Empties c's slot of the link (link locked): the slot's reference goes,
 * and an idle link starts its lifetime. */
static void stream_unslot_locked(struct sdp_link *link, struct sdp_conn *c, uint16_t idx)
{
	if (link->streams[idx] == c) {
		link->streams[idx] = NULL;
		link->nstreams--;
		if (link->st)
			atomic_store(&link->st->streams, link->nstreams);
		conn_put(c);
	}
	if (!link->nstreams && link->state == LINK_UP)
		arm_idle_timer(link);
}

void link_stream_unsetup(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;

	if (!link)
		return;
	c->link = NULL;
	c->qp = NULL;
	c->link_stopped = true;
	pthread_mutex_lock(&link->lock);
	stream_unslot_locked(link, c, c->link_idx);
	maybe_destroy_locked(link);
	pthread_mutex_unlock(&link->lock);
	link_put(link);
}

/* Takes c's queued jobs out (link locked); their wr_ids, if ids. */
static uint32_t purge_jobs_of(struct sdp_link *link, struct sdp_conn *c, uint64_t **ids)
{
	struct link_job **pp = &link->jobs;
	uint32_t n = 0, cap = 0;

	if (ids)
		*ids = NULL;
	link->jobs_tail = NULL;
	while (*pp) {
		struct link_job *j = *pp;

		if (j->c != c) {
			link->jobs_tail = j;
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		link->jobs_queued--;
		if (ids && n == cap) {
			uint64_t *more = realloc(*ids, (cap = cap ? cap * 2 : 16) * sizeof(**ids));
			if (more)
				*ids = more;
			else
				cap = n; /* its bookkeeping is lost, not the memory */
		}
		if (ids && n < cap)
			(*ids)[n++] = j->wr_id;
		conn_put(c);
		job_release(j);
	}
	return n;
}

/* A stream that goes while messages of its wait in the queue (it reset,
 * and its Abort waits behind link credits): they still go, ahead of its
 * RELEASED, each with a copy of its bytes and no stream to tell.  Dropped,
 * the peer would take the RELEASED for a lost carrier and move the stream to
 * TCP, resending into a socket our app closed.  All or a prefix of them
 * go, never with a hole in the stream's sequence: a queued zero-copy request
 * (the stream's memory goes with it) drops them all, as does running out of
 * memory from that job on. */
static bool has_zc_job(const struct sdp_link *link, const struct sdp_conn *c)
{
	for (const struct link_job *j = link->jobs; j; j = j->next)
		if (j->c == c && j->kind == JOB_WR)
			return true;
	return false;
}

static void orphan_jobs_of(struct sdp_link *link, struct sdp_conn *c)
{
	for (struct link_job *j = has_zc_job(link, c) ? NULL : link->jobs; j; j = j->next) {
		if (j->c != c)
			continue;
		if (!(j->owned = malloc(j->len ? j->len : 1)))
			break;
		memcpy(j->owned, j->msg, j->len);
		j->msg = j->owned;
		j->c = NULL;
		conn_put(c);
	}
	purge_jobs_of(link, c, NULL); /* what could not go */
}

/* Any window bound or zero-copy work in flight: the peer (or our READ)
 * could still touch app memory, which only a QP in error rules out. */
static bool zc_busy(const struct sdp_conn *c)
{
	for (int w = 0; w < ZC_WINDOWS; w++)
		if (c->win[w].bound || c->win[w].busy)
			return true;
	return c->rd.active || c->write_active || c->src.active || c->sink.active;
}

void link_stream_stop(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;
	uint64_t *ids;
	uint32_t n;

	if (!link || c->link_stopped)
		return;
	c->link_stopped = true;
	pthread_mutex_lock(&link->lock);
	if (zc_busy(c)) {
		sdp_warn("a stream with zero-copy work in flight stopped; its link fails so that no "
			 "remote access outlives it (its other streams move to TCP)");
		link_fail_locked(link, "a stream with zero-copy work stopped");
	}
	n = purge_jobs_of(link, c, &ids);
	pthread_mutex_unlock(&link->lock);
	/* What was queued never went: settle it as flushed. */
	for (uint32_t i = 0; i < n; i++)
		cq_on_stream_flushed(c, ids[i]);
	free(ids);
}

void link_stream_fence(struct sdp_conn *c)
{
	struct sdp_link *link;

	conn_lock(c);
	link = c->link;
	if (link) {
		c->link_stopped = true; /* received messages: ignored */
		c->link_fenced = true;  /* send completions: not handed over */
		link_get(link);
	}
	conn_unlock(c);
	if (!link)
		return;
	/* A delivery already under way (deliveries run under the poll lock,
	 * drain_cq) ends before this returns. */
	if (link->pid == self_pid()) {
		pthread_mutex_lock(&link->poll_lock);
		pthread_mutex_unlock(&link->poll_lock);
	}
	link_put(link);
}

void link_stream_detach(struct sdp_conn *c)
{
	struct sdp_link *link;
	struct link_job *released = NULL;
	uint16_t idx;
	bool known;
	int rc;

	conn_lock(c);
	link = c->link;
	idx = c->link_idx;
	known = (link && link->is_server) || c->link_open_sent; /* the link's role, not the TCP one */
	c->link = NULL;
	c->qp = NULL;
	c->link_stopped = true;
	conn_unlock(c);
	if (!link)
		return;
	if (known)
		released = link_msg_job(SDP_LINK_RELEASED, idx, NULL, 0);
	pthread_mutex_lock(&link->lock);
	orphan_jobs_of(link, c);
	if (!known)
		link->peer_holds[idx] = 0; /* the server never heard of it */
	if (link->sink_owner == c)
		link->sink_owner = NULL;
	/* RELEASED is queued before the index can be taken again: it reaches
	 * the peer ahead of the next OPEN naming it. */
	if (released && link->state == LINK_UP && link->pid == self_pid())
		released = submit_locked(link, released, &rc, false);
	stream_unslot_locked(link, c, idx);
	maybe_destroy_locked(link);
	pthread_mutex_unlock(&link->lock);
	job_free(released);
	link_put(link);
}

/* --------------------------------------------------------- the client */

static bool same_peer(const struct sdp_link *link, const struct sockaddr *dst, socklen_t len)
{
	return link->peer_len == len && memcmp(&link->peer, dst, len) == 0;
}

/* A free index: no stream here, and the server released it. */
static int free_index_locked(struct sdp_link *link)
{
	for (uint32_t i = 0; i < link->streams_max; i++)
		if (!link->streams[i] && !link->peer_holds[i])
			return (int)i;
	return -1;
}

/* An OPEN that commits: the client's nonce goes with it (as in COMMIT),
 * and the kernel connect goes ahead without waiting for the answer. */
static enum sdp_reason send_open_commit(struct sdp_link *link, struct sdp_conn *c,
					const struct sdp_open *o)
{
	uint8_t payload[sizeof(struct sdp_open_commit_wire)];
	bool queued;
	uint64_t seq;

	/* Neither failure sent anything: the index was never the server's. */
	if (!bind_make_nonce(c->nonce_local))
		return SDP_REASON_RESOURCES;
	sdp_open_commit_to_wire(o, c->nonce_local, payload);
	if (send_link_msg(link, SDP_LINK_OPEN_COMMIT, c->link_idx, payload, sizeof(payload)) != 0)
		return SDP_REASON_RDMA_CM_ERROR;
	c->link_open_sent = true; /* c is locked: no one looks before this */
	c->open_committed = true;
	/* Posted at once, it is the last one posted (or before it): the SYN
	 * waits for that send's completion.  Queued behind other messages (the
	 * link's credits are out, as in a burst of connects), its number is
	 * not known yet, and nothing would hold the SYN back: the stream stays
	 * in RESOLVING and its kernel connect waits for the answer, as after a
	 * plain OPEN (it is committed already, so no COMMIT follows). */
	pthread_mutex_lock(&link->lock);
	queued = link->jobs != NULL;
	seq = link->sends_posted;
	pthread_mutex_unlock(&link->lock);
	if (queued) {
		sdp_debug("a committed OPEN waits in the link's queue: the SYN waits for its answer");
		return SDP_REASON_NONE;
	}
	c->open_send_seq = seq;
	client_stream_open_committed(c);
	return SDP_REASON_NONE;
}

/* c locked, its rings set up.  Returns why the OPEN could not go, or
 * SDP_REASON_NONE.  The caller falls back: the connecting thread, which
 * holds its socket's lock, ends the attempt before the socket adopts it
 * (a fallback here would deliver its event to that socket, whose lock it
 * then waits for). */
static enum sdp_reason send_open(struct sdp_link *link, struct sdp_conn *c)
{
	struct sdp_open o = { .tuple = c->tuple, .buf_count = c->buf_count, .buf_size = c->buf_size,
			      .rdv_port = rdv_port() };
	uint8_t payload[sizeof(struct sdp_open_wire)];

	if (c->phase == CONN_HELD && !c->link_open_sent && c->link == link) {
		/* Only a REQ sent makes the index the server's to release. */
		c->link_open_sent = climb_send_req(c);
		return SDP_REASON_NONE;
	}
	if (c->link_open_sent || c->phase != CONN_RESOLVING || c->link != link)
		return SDP_REASON_NONE;
	memcpy(o.tuple.src_addr, link->local_addr, 16);
	c->tuple = o.tuple;
	if (sdp_tun.debug_fail_open && ++opens_sent == sdp_tun.debug_fail_open) {
		sdp_warn("SDPSHIM_DEBUG_FAIL_OPEN: failing the link as OPEN %u is posted",
			 sdp_tun.debug_fail_open);
		link_fail(link, "SDPSHIM_DEBUG_FAIL_OPEN");
	}
	if (link->open_commits && !c->answer_first)
		return send_open_commit(link, c, &o);
	sdp_open_to_wire(&o, payload);
	if (send_link_msg(link, SDP_LINK_OPEN, c->link_idx, payload, sizeof(payload)) != 0)
		return SDP_REASON_RDMA_CM_ERROR; /* never queued: the index was never the server's */
	c->link_open_sent = true;
	return SDP_REASON_NONE;
}

static int start_connect(struct sdp_link *link, const struct sockaddr *dst)
{
	struct rdma_event_channel *ch;
	int rc = cm_channel_ensure(&ch);

	if (rc)
		return rc;
	VERBS_CTL_ENTER();
	rc = rdma_create_id(ch, &link->cm_id, link, RDMA_PS_TCP);
	if (rc == 0)
		rc = rdma_resolve_addr(link->cm_id, NULL, (struct sockaddr *)dst,
				       (int)sdp_tun.connect_timeout_ms);
	rc = rc ? -errno : 0;
	VERBS_CTL_LEAVE();
	return rc;
}

static bool usable_for(const struct sdp_link *link, const struct sockaddr *dst, socklen_t len)
{
	return !link->is_server && link->pid == self_pid() && same_peer(link, dst, len) &&
	       (link->state == LINK_UP || link->state == LINK_CONNECTING);
}

/* Puts c on a link to dst that has a free index (links_lock held), or on a
 * new one (connecting: *fresh).  NULL with *reason when there is none. */
static struct sdp_link *attach_to_link(struct sdp_conn *c, const struct sockaddr *dst,
				       socklen_t len, enum sdp_reason *reason, bool *fresh)
{
	struct sdp_link *link;
	int idx = -1;

	*fresh = false;
	for (link = links; link; link = link->next) {
		if (!usable_for(link, dst, len))
			continue;
		pthread_mutex_lock(&link->lock);
		idx = link->nstreams < link->streams_max ? free_index_locked(link) : -1;
		if (idx >= 0) {
			stream_attach_locked(link, c, (uint16_t)idx);
			link->peer_holds[idx] = 1;
		}
		pthread_mutex_unlock(&link->lock);
		if (idx >= 0)
			return link;
	}
	if (links_count >= sdp_tun.link_max || !(link = link_alloc(false))) {
		*reason = SDP_REASON_RESOURCES;
		return NULL;
	}
	memcpy(&link->peer, dst, len);
	link->peer_len = len;
	link->next = links;
	links = link;
	links_count++;
	*fresh = true;
	pthread_mutex_lock(&link->lock);
	stream_attach_locked(link, c, 0);
	link->peer_holds[0] = 1;
	pthread_mutex_unlock(&link->lock);
	return link;
}

int link_client_open(struct sdp_conn *c, const struct sockaddr *dst, socklen_t dst_len,
		     enum sdp_reason *reason)
{
	struct sdp_link *link;
	bool fresh, up;
	int rc = 0;

	if (c->phase == CONN_RESOLVING)
		(void)rdv_port_ensure(); /* named in the OPEN: a forked child of the peer dials it */
	pthread_mutex_lock(&links_lock);
	link = attach_to_link(c, dst, dst_len, reason, &fresh);
	if (link)
		link_get(link);
	pthread_mutex_unlock(&links_lock);
	if (!link)
		return -ENOBUFS;
	pthread_mutex_lock(&link->lock);
	up = link->state == LINK_UP;
	pthread_mutex_unlock(&link->lock);
	if (fresh) {
		progress_timer_arm(&link->timer, progress_now_ms() + LINK_CONNECT_BOUND_MS);
		rc = start_connect(link, dst);
		if (rc) {
			*reason = SDP_REASON_RDMA_CM_ERROR;
			link_fail(link, "rdma_cm could not start");
		}
	}
	if (rc == 0 && up) {
		enum sdp_reason why = SDP_REASON_RESOURCES;

		conn_lock(c);
		rc = stream_rings(c, link);
		if (rc == 0 && (why = send_open(link, c)) != SDP_REASON_NONE)
			rc = -EIO; /* not started: conn_connect_start() ends it */
		conn_unlock(c);
		if (rc)
			*reason = why;
	}
	link_put(link);
	return rc;
}

static void connect_failed(struct sdp_link *link, enum sdp_reason reason, const char *why);

/* The client could not register the link's buffers: its streams use TCP
 * with the reason a channel of its own would have had (resources for the
 * pinned-memory budget, which says so once itself; memlock for the kernel). */
static void link_setup_failed(struct sdp_link *link, int err)
{
	enum sdp_reason reason = conn_setup_error_reason(err);

	sdp_log_at(err == -ENOBUFS ? SDP_LOG_DEBUG : SDP_LOG_WARN, "cannot set up an RDMA link: %s%s",
		   strerror(-err), reason == SDP_REASON_MEMLOCK ? " (RLIMIT_MEMLOCK too low?)" : "");
	connect_failed(link, reason, "link setup failed");
}

static void on_route_resolved(struct sdp_link *link)
{
	struct rdma_conn_param param;
	struct sdp_hello_wire hello;
	struct sdp_hello h = { .version = SDP_WIRE_VERSION,
			       .flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED };
	uint16_t port;
	int err = setup_receive(link, link->cm_id);

	if (sdp_tun.open_commits)
		h.flags |= SDP_HELLO_FLAG_OPEN_COMMITS;

	if (err) {
		link_setup_failed(link, err);
		return;
	}
	h.buf_count = (uint16_t)link->buf_count;
	h.buf_size = link->buf_size;
	sockaddr_to_tuple_addr(rdma_get_local_addr(link->cm_id), h.tuple.src_addr, &port);
	memcpy(link->local_addr, h.tuple.src_addr, 16);
	sockaddr_to_tuple_addr((struct sockaddr *)&link->peer, h.tuple.dst_addr, &h.tuple.dst_port);
	sdp_hello_to_wire(&h, &hello);
	cm_conn_param(&param, &hello, sizeof(hello));
	qp_before_connect(link->dev, link->qp, &param);
	cm_apply_ack_timeout(link->cm_id);
	VERBS_CTL_ENTER();
	int rc = rdma_connect(link->cm_id, &param);
	VERBS_CTL_LEAVE();
	if (rc != 0)
		link_fail(link, "rdma_connect failed");
}

/* The streams that waited for the link: their rings, then their OPENs. */
static void open_waiting_streams(struct sdp_link *link)
{
	struct sdp_conn **list;
	uint32_t n = 0;

	pthread_mutex_lock(&link->lock);
	list = streams_snapshot_locked(link, &n);
	pthread_mutex_unlock(&link->lock);
	for (uint32_t i = 0; i < n; i++) {
		struct sdp_conn *c = list[i];

		conn_lock(c);
		if ((c->phase == CONN_RESOLVING || c->phase == CONN_HELD) && c->link == link &&
		    !c->link_open_sent) {
			enum sdp_reason why = stream_rings(c, link) != 0 ? SDP_REASON_RESOURCES
									 : send_open(link, c);

			if (why != SDP_REASON_NONE)
				conn_fallback(c, why);
		}
		conn_unlock(c);
		conn_put(c);
	}
	if (!list && link->nstreams)
		link_fail(link, "out of memory");
	free(list);
}

static void on_established(struct sdp_link *link, struct rdma_cm_event *ev)
{
	struct sdp_hello_ack ack;
	enum sdp_wire_error werr = SDP_WIRE_OK;
	int err;

	if (!link->is_server) {
		werr = sdp_hello_ack_from_wire(ev->param.conn.private_data,
					       ev->param.conn.private_data_len, &ack);
		if (werr == SDP_WIRE_OK && !(ack.flags & SDP_HELLO_FLAG_LINK))
			werr = SDP_WIRE_BAD_FLAGS;
		if (werr != SDP_WIRE_OK) {
			sdp_warn("server's link HelloAck rejected: %s; using TCP",
				 sdp_wire_error_text(werr));
			link_fail(link, "bad HelloAck");
			return;
		}
		err = setup_send(link, ack.buf_size, ack.buf_count);
		if (err) {
			link_setup_failed(link, err);
			return;
		}
		link->peer_solicits = (ack.flags & SDP_HELLO_FLAG_SOLICITED) != 0;
		/* A server of an older build knows no such flag, and says so by
		 * refusing the Hello; one that leaves it out does not take them. */
		link->open_commits = sdp_tun.open_commits && (ack.flags & SDP_HELLO_FLAG_OPEN_COMMITS);
	}
	app_wake_sweep_start(); /* what no event announces is taken in within a second */
	pthread_mutex_lock(&link->lock);
	if (link->state == LINK_CONNECTING)
		link->state = LINK_UP;
	stats_identity(link);
	stats_credits(link);
	if (!link->is_server)
		progress_timer_cancel(&link->timer);
	else if (!link->nstreams)
		arm_idle_timer(link); /* a link that never opens a stream closes too */
	drain_jobs(link); /* a server's answers to OPENs that came first */
	pthread_mutex_unlock(&link->lock);
	sdp_debug("link up (%s)", link->is_server ? "server" : "client");
	if (!link->is_server)
		open_waiting_streams(link);
}

/* The link never came up: its streams fall back with the reason. */
static void connect_failed(struct sdp_link *link, enum sdp_reason reason, const char *why)
{
	struct sdp_conn **list;
	uint32_t n = 0;

	pthread_mutex_lock(&link->lock);
	if (link->state != LINK_CONNECTING) {
		pthread_mutex_unlock(&link->lock);
		link_fail(link, why);
		return;
	}
	link->state = LINK_FAILED;
	link->why = why;
	list = streams_snapshot_locked(link, &n);
	pthread_mutex_unlock(&link->lock);
	for (uint32_t i = 0; i < n; i++) {
		conn_lock(list[i]);
		conn_fallback(list[i], reason);
		conn_unlock(list[i]);
		conn_put(list[i]);
	}
	free(list);
	pthread_mutex_lock(&link->lock);
	maybe_destroy_locked(link);
	pthread_mutex_unlock(&link->lock);
}

void cm_link_event(struct sdp_link *link, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (link->state == LINK_CONNECTING &&
		    cm_resolve_route(link->cm_id) != 0)
			connect_failed(link, SDP_REASON_PEER_UNREACHABLE, "route resolution failed");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (link->state == LINK_CONNECTING)
			on_route_resolved(link);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE: /* our own QP (core/qp.h) */
		if (link->state != LINK_CONNECTING)
			break;
		if (qp_on_connect_response(ev->id, link->qp) != 0)
			connect_failed(link, SDP_REASON_RDMA_CM_ERROR, "our QP did not reach RTS");
		else
			on_established(link, ev);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (link->state == LINK_CONNECTING)
			on_established(link, ev);
		break;
	case RDMA_CM_EVENT_REJECTED:
		connect_failed(link, cm_event_reject_reason(ev), "the server rejected the link");
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		connect_failed(link, SDP_REASON_PEER_UNREACHABLE, rdma_event_str(ev->event));
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		connect_failed(link, SDP_REASON_RDMA_CM_ERROR, rdma_event_str(ev->event));
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		pthread_mutex_lock(&link->lock);
		if (link->state == LINK_CLOSING) {
			link->state = LINK_FAILED;
			maybe_destroy_locked(link);
		} else {
			link_fail_locked(link, rdma_event_str(ev->event));
		}
		pthread_mutex_unlock(&link->lock);
		break;
	default:
		break;
	}
}

/* The client's timer: the bound on a link that does not come up, and the
 * lifetime of an idle one. */
static void link_timer_fired(void *arg)
{
	struct sdp_link *link = arg;
	bool disconnect = false;

	pthread_mutex_lock(&link->lock);
	if (link->state == LINK_CONNECTING && !link->is_server) {
		pthread_mutex_unlock(&link->lock);
		connect_failed(link, SDP_REASON_RDMA_TIMEOUT, "the link did not come up in time");
		return;
	}
	if (link->state == LINK_UP && !link->nstreams) {
		if (link->jobs) {
			arm_idle_timer(link); /* messages of streams that went still wait for credits */
		} else {
			link->state = LINK_CLOSING;
			stats_identity(link);
			disconnect = true;
		}
	}
	pthread_mutex_unlock(&link->lock);
	if (disconnect) {
		sdp_debug("closing an idle link");
		VERBS_CTL_ENTER();
		qp_before_disconnect(link->dev, link->qp);
		rdma_disconnect(link->cm_id);
		VERBS_CTL_LEAVE();
	}
}

/* --------------------------------------------------------- the server */

void link_server_accept(struct sdp_listener *l, struct rdma_cm_event *ev, const struct sdp_hello *h)
{
	struct sdp_hello_ack_wire ack_wire;
	struct sdp_hello_ack ack = { .version = SDP_WIRE_VERSION,
				     .flags = SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED |
					      SDP_HELLO_FLAG_OPEN_COMMITS };
	struct rdma_conn_param param;
	struct sdp_link *link = NULL;
	int err = -ENOBUFS;

	if (!l->rendezvous)
		(void)rdv_port_ensure(); /* named in each OPEN_ACK */
	pthread_mutex_lock(&links_lock);
	if (links_count < sdp_tun.link_max && (link = link_alloc(true)) != NULL) {
		link->next = links;
		links = link;
		links_count++;
	}
	pthread_mutex_unlock(&links_lock);
	if (link) {
		link->cm_id = ev->id;
		ev->id->context = link;
		link->lsn = l;
		listener_hold(l);
		memcpy(&link->peer, rdma_get_peer_addr(ev->id), sizeof(struct sockaddr_storage));
		link->peer_len = sizeof(struct sockaddr_storage);
		memcpy(link->local_addr, h->tuple.dst_addr, 16);
		link->peer_solicits = (h->flags & SDP_HELLO_FLAG_SOLICITED) != 0;
		if (!link->peer_solicits) /* a client of an older build: a HelloAck it accepts */
			ack.flags &= (uint8_t)~SDP_HELLO_FLAG_SOLICITED;
		link->open_commits = (h->flags & SDP_HELLO_FLAG_OPEN_COMMITS) != 0;
		if (!link->open_commits) /* the same */
			ack.flags &= (uint8_t)~SDP_HELLO_FLAG_OPEN_COMMITS;
		err = setup_receive(link, ev->id);
		if (!err)
			err = setup_send(link, h->buf_size, h->buf_count);
	}
	if (err) {
		sdp_warn_limited("refusing an RDMA link on port %u: %s", l->port, strerror(-err));
		if (link && link->qp) {
			VERBS_CTL_ENTER();
			qp_destroy(link->dev, ev->id, link->qp);
			VERBS_CTL_LEAVE();
			link->qp = NULL;
		}
		cm_reject_request(ev->id, SDP_REJECT_RESOURCES);
		if (link) {
			ev->id->context = NULL;
			link->cm_id = NULL; /* the reject path destroys the id */
			pthread_mutex_lock(&link->lock);
			link->state = LINK_FAILED;
			maybe_destroy_locked(link);
			pthread_mutex_unlock(&link->lock);
		}
		return;
	}
	ack.buf_count = (uint16_t)link->buf_count;
	ack.buf_size = link->buf_size;
	sdp_hello_ack_to_wire(&ack, &ack_wire);
	cm_conn_param(&param, &ack_wire, sizeof(ack_wire));
	cm_apply_ack_timeout(ev->id);
	VERBS_CTL_ENTER();
	int rc = qp_accept(link->dev, ev->id, link->qp, &param);
	VERBS_CTL_LEAVE();
	if (rc != 0) {
		sdp_warn("rdma_accept of a link failed: %s", strerror(errno));
		link_fail(link, "rdma_accept failed");
	} else {
		sdp_debug("accepted an RDMA link on port %u", l->port);
	}
}

void link_answer_open(struct sdp_link *link, uint16_t idx, struct sdp_conn *c, uint8_t code)
{
	if (code) {
		struct sdp_open_nak_wire nak = { .code = code };

		send_link_msg(link, SDP_LINK_OPEN_NAK, idx, &nak, sizeof(nak));
		return;
	}
	struct sdp_open_ack a = { .buf_count = c->buf_count, .buf_size = c->buf_size,
				  .rdv_port = rdv_port() };
	uint8_t payload[sizeof(struct sdp_open_ack_wire)];

	memcpy(a.nonce, c->nonce_local, SDP_NONCE_SIZE);
	sdp_open_ack_to_wire(&a, payload);
	send_link_msg(link, SDP_LINK_OPEN_ACK, idx, payload, sizeof(payload));
}

/* ------------------------------------------------------------ receiving */

/* The stream an arriving message names, with a reference; NULL if none
 * (it was released here: its late messages are dropped). */
static struct sdp_conn *stream_ref(struct sdp_link *link, uint16_t idx)
{
	struct sdp_conn *c = idx < link->streams_max ? link->streams[idx] : NULL;

	if (c)
		conn_get(c);
	return c;
}

/* OPEN, or OPEN_COMMIT (committed: it carries the client's nonce). */
static void on_open(struct sdp_link *link, uint16_t idx, const uint8_t *payload, uint32_t len,
		    bool committed)
{
	uint8_t nonce[SDP_NONCE_SIZE];
	struct sdp_open o;
	enum sdp_wire_error werr = committed ? sdp_open_commit_from_wire(payload, len, &o, nonce)
					     : sdp_open_from_wire(payload, len, &o);

	if (werr != SDP_WIRE_OK) {
		protocol_violation(link, "malformed OPEN");
		return;
	}
	if (o.buf_size > link_msg_max(link))
		o.buf_size = link_msg_max(link); /* we never send more than a link slot holds */
	cm_server_open_stream(link->lsn, link, idx, &o, (const struct sockaddr *)&link->peer,
			      committed ? nonce : NULL);
}

/* An answer to an OPEN of c (locked; unlocked and put here) that no longer
 * waits for one.  A stream that gave up first (its connect's bound, a
 * kernel connect that failed) is still slotted until its teardown runs:
 * the answer is stale, its RELEASED is on its way, and a refusal says the
 * index was never the server's.  Any other stream was answered twice. */
static void open_answer_unasked(struct sdp_link *link, struct sdp_conn *c, const struct sdp_lh *lh)
{
	bool gave_up = c->phase == CONN_FALLBACK || c->phase == CONN_DRAINING || c->phase == CONN_DEAD;
	bool twice = c->link == link && !gave_up;

	/* Still slotted here but c->link no longer this link: its detach is
	 * under way, and a refusal frees the index all the same. */
	if ((c->link != link || gave_up) && lh->kind == SDP_LINK_OPEN_NAK) {
		pthread_mutex_lock(&link->lock);
		link->peer_holds[lh->stream] = 0;
		pthread_mutex_unlock(&link->lock);
	}
	conn_unlock(c);
	conn_put(c);
	if (twice)
		protocol_violation(link, "OPEN answered twice");
}

static void on_open_answer(struct sdp_link *link, const struct sdp_lh *lh, const uint8_t *payload)
{
	struct sdp_conn *c;

	pthread_mutex_lock(&link->lock);
	c = stream_ref(link, lh->stream);
	if (!c && lh->kind == SDP_LINK_OPEN_NAK && lh->stream < link->streams_max)
		link->peer_holds[lh->stream] = 0; /* the server never took it */
	pthread_mutex_unlock(&link->lock);
	if (!c)
		return; /* the stream gave up meanwhile; its RELEASED frees the server's */
	conn_lock(c);
	if (c->link != link || !client_stream_awaits_answer(c)) {
		open_answer_unasked(link, c, lh);
		return;
	}
	if (lh->kind == SDP_LINK_OPEN_NAK) {
		const struct sdp_open_nak_wire *nak = (const void *)payload;

		pthread_mutex_lock(&link->lock);
		link->peer_holds[lh->stream] = 0; /* (stream_ref found it: a valid index) */
		pthread_mutex_unlock(&link->lock);
		client_stream_refused(c, nak->code);
	} else {
		struct sdp_open_ack a;

		if (sdp_open_ack_from_wire(payload, sizeof(struct sdp_open_ack_wire), &a) != SDP_WIRE_OK) {
			sdp_warn("server's OPEN answer is malformed; the stream uses TCP");
			conn_fallback(c, SDP_REASON_PROTOCOL);
		} else {
			if (a.buf_size > link_msg_max(link))
				a.buf_size = link_msg_max(link);
			climb_note_peer_rdv(c, (const struct sockaddr *)&link->peer, a.rdv_port);
			client_stream_opened(c, a.buf_size, a.buf_count, a.nonce);
		}
	}
	conn_unlock(c);
	conn_put(c);
}

/* The asker is the tuple's end it claims to be: on a listener's link, the
 * client of that listener's port (as for an OPEN); on a rendezvous link,
 * either end (FROM_SERVER says which), the link's peer address. */
static bool climb_req_names_peer(const struct sdp_listener *l, const struct sdp_climb_req *r,
				 const uint8_t peer[16])
{
	bool from_server = r->flags & SDP_CLIMB_FROM_SERVER;

	if (!l->rendezvous)
		return !from_server && r->tuple.dst_port == l->port &&
		       memcmp(r->tuple.src_addr, peer, 16) == 0;
	return memcmp(from_server ? r->tuple.dst_addr : r->tuple.src_addr, peer, 16) == 0;
}

/* A climb REQ names a held stream of this process (core/climb.c); the
 * link's own checks first (climb_req_names_peer). */
static void on_climb_req(struct sdp_link *link, uint16_t idx, const uint8_t *payload, uint32_t len)
{
	struct sdp_climb_req r;
	uint8_t peer[16];
	uint16_t port;

	if (sdp_climb_req_from_wire(payload, len, &r) != SDP_WIRE_OK) {
		protocol_violation(link, "malformed CLIMB_REQ");
		return;
	}
	sockaddr_to_tuple_addr((const struct sockaddr *)&link->peer, peer, &port);
	if (!link->lsn || idx >= link->streams_max || !climb_req_names_peer(link->lsn, &r, peer)) {
		climb_refuse(link, idx, SDP_REJECT_TUPLE);
		return;
	}
	if (r.buf_size > link_msg_max(link))
		r.buf_size = link_msg_max(link);
	climb_on_req(link, idx, &r, &link->lsn->policy);
}

/* CHAL, ACK, NAK (client) and PROVE (server): the stream's next step. */
static void on_climb_step(struct sdp_link *link, const struct sdp_lh *lh, const uint8_t *payload)
{
	struct sdp_conn *c;

	pthread_mutex_lock(&link->lock);
	c = stream_ref(link, lh->stream);
	if (lh->kind == SDP_LINK_CLIMB_NAK && !link->is_server && lh->stream < link->streams_max)
		link->peer_holds[lh->stream] = 0;
	pthread_mutex_unlock(&link->lock);
	if (!c)
		return;
	conn_lock(c);
	if (c->link == link && !c->link_stopped && !climb_on_step(c, lh->kind, payload)) {
		char what[96];

		/* What it found, in the one line: which message, and where c stood. */
		snprintf(what, sizeof(what), "climb message %u out of turn: phase %s, step %d, %s",
			 lh->kind, conn_phase_name(c->phase), (int)c->climb.step,
			 c->climb.initiator ? "initiator" : "responder");
		conn_unlock(c);
		conn_put(c);
		protocol_violation(link, what);
		return;
	}
	conn_unlock(c);
	conn_put(c);
}

void climb_refuse(struct sdp_link *link, uint16_t idx, uint8_t code)
{
	struct sdp_open_nak_wire nak = { .code = code };

	send_link_msg(link, SDP_LINK_CLIMB_NAK, idx, &nak, sizeof(nak));
}

int link_stream_send_kind(struct sdp_conn *c, uint8_t kind, const void *payload, uint32_t len)
{
	if (!c->link)
		return -EPIPE;
	return send_link_msg(c->link, kind, c->link_idx, payload, len);
}

static void on_released(struct sdp_link *link, uint16_t idx)
{
	struct sdp_conn *c;

	pthread_mutex_lock(&link->lock);
	if (!link->is_server && idx < link->streams_max)
		link->peer_holds[idx] = 0;
	c = stream_ref(link, idx);
	pthread_mutex_unlock(&link->lock);
	if (!c)
		return;
	conn_lock(c);
	if (c->link == link && !c->link_stopped && !climb_on_peer_released(c))
		conn_stream_lost(c, SDP_REASON_PROTOCOL, "the peer released the stream");
	conn_unlock(c);
	conn_put(c);
}

/* c: the stream's reference, taken with the header (on_recv), or NULL. */
static void on_stream_message(struct sdp_link *link, struct sdp_conn *c, const uint8_t *msg,
			      uint32_t len)
{
	if (!c)
		return;
	conn_lock(c);
	if (c->link == link && !c->link_stopped) {
		c->last_rx_ms = progress_coarse_ms();
		rx_on_link_message(c, msg, len);
		cq_stream_progress(c);
	}
	conn_unlock(c);
	conn_put(c);
}

/* A WRITE with immediate landed in the one sink this link exposes: the
 * immediate must name that sink's stream.  (The QP is shared, so our
 * completion cannot tell which window the peer wrote; with one sink per
 * link there is only one it can have written.) */
static void on_write_imm(struct sdp_link *link, uint32_t byte_len, uint32_t imm)
{
	struct sdp_conn *c;
	bool owner;

	pthread_mutex_lock(&link->lock);
	c = stream_ref(link, SDP_LINK_IMM_STREAM(imm));
	owner = c && link->sink_owner == c;
	pthread_mutex_unlock(&link->lock);
	if (!owner) {
		if (c)
			conn_put(c);
		protocol_violation(link, "an RDMA WRITE naming a stream without an open sink");
		return;
	}
	conn_lock(c);
	if (c->link == link && !c->link_stopped) {
		c->last_rx_ms = progress_coarse_ms();
		rx_on_link_write(c, byte_len, SDP_LINK_IMM_MSEQ16(imm));
		cq_stream_progress(c);
	}
	conn_unlock(c);
	conn_put(c);
}

/* Header checks that need the link's state: order and acknowledgement. */
static bool take_header(struct sdp_link *link, const struct sdp_lh *lh)
{
	uint32_t sent = link->tx_lseq - link->tx_peer_lack, acked = lh->lack - link->tx_peer_lack;

	if (lh->lseq != link->rx_lseq + 1 || acked > sent)
		return false;
	link->tx_peer_lack = lh->lack;
	stats_credits(link);
	if (lh->flags & SDP_LINK_FLAG_STARVING)
		link->credit_due = true;
	return true;
}

static bool kind_allowed(const struct sdp_link *link, uint8_t kind)
{
	switch ((enum sdp_link_kind)kind) {
	case SDP_LINK_OPEN_COMMIT:
		return link->is_server && link->open_commits;
	case SDP_LINK_OPEN:
	case SDP_LINK_CLIMB_REQ:
	case SDP_LINK_CLIMB_PROVE:
		return link->is_server;
	case SDP_LINK_OPEN_ACK:
	case SDP_LINK_OPEN_NAK:
	case SDP_LINK_CLIMB_CHAL:
	case SDP_LINK_CLIMB_ACK:
	case SDP_LINK_CLIMB_NAK:
		return !link->is_server;
	case SDP_LINK_STREAM:
	case SDP_LINK_CREDIT:
	case SDP_LINK_RELEASED:
		return true;
	}
	return false;
}

/* The buffer goes back, then its message counts as taken: the peer may
 * send into it once our next header acknowledges lseq. */
static void repost_taken(struct sdp_link *link, uint32_t idx, uint32_t lseq)
{
	if (post_recv(link, idx) != 0) {
		link_fail(link, "reposting a receive failed");
		return;
	}
	pthread_mutex_lock(&link->lock);
	link->rx_lseq = lseq;
	pthread_mutex_unlock(&link->lock);
}

static void on_recv(struct sdp_link *link, const struct ibv_wc *wc, bool by_app)
{
	uint32_t idx = (uint32_t)wc->wr_id;
	const uint8_t *msg;
	struct sdp_lh lh;
	enum sdp_wire_error werr;
	struct sdp_conn *stream = NULL;
	bool ok;

	if (idx >= link->buf_count) {
		protocol_violation(link, "completion for an unknown buffer");
		return;
	}
	LINK_COUNT(link, msgs_received, 1);
	if (by_app)
		LINK_COUNT(link, msgs_received_by_app, 1);
	LINK_COUNT(link, bytes_received, wc->byte_len);
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		on_write_imm(link, wc->byte_len, be32toh(wc->imm_data));
		repost_taken(link, idx, link->rx_lseq + 1);
	} else {
		msg = link->rx_mem + (size_t)idx * link->buf_size;
		werr = sdp_lh_from_wire(msg, wc->byte_len, link->buf_size, &lh);
		if (werr != SDP_WIRE_OK) {
			protocol_violation(link, sdp_wire_error_text(werr));
			return;
		}
		pthread_mutex_lock(&link->lock);
		ok = take_header(link, &lh) && kind_allowed(link, lh.kind);
		if (ok && lh.kind == SDP_LINK_STREAM)
			stream = stream_ref(link, lh.stream); /* one lock pair a message */
		pthread_mutex_unlock(&link->lock);
		if (!ok) {
			protocol_violation(link, "sequence, acknowledgement or message kind");
			return;
		}
		switch ((enum sdp_link_kind)lh.kind) {
		case SDP_LINK_STREAM:
			on_stream_message(link, stream, msg + SDP_LH_SIZE, lh.len - (uint32_t)SDP_LH_SIZE);
			break;
		case SDP_LINK_CREDIT:
			break;
		case SDP_LINK_OPEN:
		case SDP_LINK_OPEN_COMMIT:
			on_open(link, lh.stream, msg + SDP_LH_SIZE, lh.len - (uint32_t)SDP_LH_SIZE,
				lh.kind == SDP_LINK_OPEN_COMMIT);
			break;
		case SDP_LINK_OPEN_ACK:
		case SDP_LINK_OPEN_NAK:
			on_open_answer(link, &lh, msg + SDP_LH_SIZE);
			break;
		case SDP_LINK_RELEASED:
			on_released(link, lh.stream);
			break;
		case SDP_LINK_CLIMB_REQ:
			on_climb_req(link, lh.stream, msg + SDP_LH_SIZE, lh.len - (uint32_t)SDP_LH_SIZE);
			break;
		case SDP_LINK_CLIMB_CHAL:
		case SDP_LINK_CLIMB_PROVE:
		case SDP_LINK_CLIMB_ACK:
		case SDP_LINK_CLIMB_NAK:
			on_climb_step(link, &lh, msg + SDP_LH_SIZE);
			break;
		}
		repost_taken(link, idx, lh.lseq);
	}
}

/* A send completed: its slot and entry are free; its stream hears of it. */
static void on_send_done(struct sdp_link *link, const struct ibv_wc *wc)
{
	uint32_t idx = (uint32_t)wc->wr_id;
	struct link_wr w;
	struct ibv_wc swc;

	pthread_mutex_lock(&link->lock);
	if (idx >= link->sq_depth) {
		pthread_mutex_unlock(&link->lock);
		return;
	}
	w = link->wrs[idx];
	link->wrs[idx].c = NULL;
	if (w.slot >= 0)
		link->slot_free[link->slots_free++] = w.slot;
	wr_give(link, idx);
	link->sends_done++;
	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			sdp_warn("RDMA completion error on a link: %s", ibv_wc_status_str(wc->status));
		link_fail_locked(link, ibv_wc_status_str(wc->status));
	}
	pthread_mutex_unlock(&link->lock);
	if (!w.c)
		return;
	swc = *wc;
	swc.wr_id = w.wr_id;
	conn_lock(w.c);
	if (w.c->link == link && !w.c->link_fenced)
		cq_on_stream_wc(w.c, &swc); /* not to a stream whose resources are going */
	conn_unlock(w.c);
	conn_put(w.c);
}

static void on_wc(struct sdp_link *link, const struct ibv_wc *wc, bool by_app)
{
	if ((wc->wr_id >> 32) == LINK_WR_SEND) {
		on_send_done(link, wc);
		return;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			sdp_warn("RDMA receive error on a link: %s", ibv_wc_status_str(wc->status));
		link_fail(link, ibv_wc_status_str(wc->status));
		return;
	}
	on_recv(link, wc, by_app);
}

/* The CQ is still there to poll.  Poll lock held: the CQ goes only under
 * it (teardown), so its pointer reads true; a teardown that starts after
 * the look finds this poll done when it takes the poll lock. */
static bool cq_pollable(struct sdp_link *link)
{
	return link->cq && !atomic_load(&link->destroying);
}

/* Set while this thread takes in a link's completions: a handler that
 * would take them in again (a stream about to judge TCP bytes,
 * reap_before_judging) finds them taken in up to its own, in order. */
static __thread bool draining;

/* Takes in every completion queued, no stream locked.  A caller that must
 * see them taken in waits for its turn; one that may leave them to whoever
 * is at it already (try_only: an app thread's opportunistic poll) does.
 * Receives taken in by an app thread are counted apart. */
static void drain_cq_locked(struct sdp_link *link, bool by_app);

/* An app thread may be cancelled in a call that drains (pthread_cancel of
 * a worker parked in epoll_wait): a delivery's eventfd write is a
 * cancellation point, and dying there would leave the poll lock and a
 * stream's lock held for good.  Cancellation waits until the drain ends. */
static void drain_cq(struct sdp_link *link, bool try_only)
{
	bool by_app = !progress_is_own_thread();
	int cancel_state;

	if (draining || link->pid != self_pid())
		return;
	if (!try_only) {
		/* An app thread's opportunistic polls (a recv(MSG_DONTWAIT)
		 * loop) step aside while this waits: a mutex is not fair. */
		atomic_fetch_add(&link->poll_waiters, 1);
		pthread_mutex_lock(&link->poll_lock);
		atomic_fetch_sub(&link->poll_waiters, 1);
	} else if (atomic_load(&link->poll_waiters) > 0 ||
		   pthread_mutex_trylock(&link->poll_lock) != 0) {
		return;
	}
	if (!cq_pollable(link)) {
		pthread_mutex_unlock(&link->poll_lock);
		return;
	}
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	drain_cq_locked(link, by_app);
	pthread_mutex_unlock(&link->poll_lock);
	pthread_setcancelstate(cancel_state, NULL);
}

/* Poll lock held, the CQ there. */
static void drain_cq_locked(struct sdp_link *link, bool by_app)
{
	struct ibv_wc wc[16];
	int n;

	draining = true;
	do {
		SDP_GUARD_ENTER();
		n = ibv_poll_cq(link->cq, 16, wc);
		SDP_GUARD_LEAVE();
		for (int i = 0; i < n; i++) {
			on_wc(link, &wc[i], by_app);
		}
		pthread_mutex_lock(&link->lock);
		drain_jobs(link);
		maybe_send_credit(link);
		pthread_mutex_unlock(&link->lock);
	} while (n == 16);
	draining = false;
}

/* Arms the CQ for the next event.  A send completion must wake someone
 * only while a send is awaited; with none in flight, and a peer whose every
 * message asks for an event, the arm is for solicited events alone: a
 * request/response stream then wakes once per request, not again when its
 * answer's send completes.  A send posted afterwards that someone waits
 * for re-arms for every completion (want_send_events_locked).  An error
 * completion may raise no event under a solicited-only arm (rxe posts its
 * flushes unsolicited): the sweep finds it within a second (link_sweep_all).
 * Poll lock held (the CQ's teardown takes it); the link's lock orders the
 * choice against want_send_events_locked. */
static void link_arm_polling(struct sdp_link *link, bool all)
{
	bool solicited;

	pthread_mutex_lock(&link->lock);
	if (link->cq && !link->destroying && link->pid == self_pid()) {
		solicited = !all && link->peer_solicits && link->wrs_free == link->sq_depth &&
			    !link->jobs;
		link->armed_solicited = solicited;
		SDP_GUARD_ENTER();
		ibv_req_notify_cq(link->cq, solicited);
		SDP_GUARD_LEAVE();
	}
	pthread_mutex_unlock(&link->lock);
}

static void link_arm(struct sdp_link *link, bool all)
{
	pthread_mutex_lock(&link->poll_lock);
	link_arm_polling(link, all);
	pthread_mutex_unlock(&link->poll_lock);
}

/* Progress thread: arm for every completion, then take in those that came
 * while the arm was for solicited events only (they raised none). */
static void rearm_all_deferred(void *arg)
{
	struct sdp_link *link = arg;

	link_arm(link, true);
	drain_cq(link, false);
	link_put(link);
}

/* A send is awaited (its room, its completion, or the stream's last one):
 * completions must raise events again.  Link locked; the arm and the drain
 * run on the progress thread, which no stream lock held here can block. */
static void want_send_events_locked(struct sdp_link *link)
{
	if (!link->armed_solicited || link->pid != self_pid())
		return;
	link->armed_solicited = false;
	link_get(link);
	if (progress_defer(rearm_all_deferred, link) != 0)
		link_put(link); /* out of memory: the stall watchdog still drains */
}

void link_stream_awaits_sends(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;

	/* Without the lock first: a send of c's in flight keeps a new arm off
	 * "solicited only" (link_arm_polling reads the link's entries under it). */
	if (!link || !atomic_load_explicit(&link->armed_solicited, memory_order_relaxed))
		return;
	pthread_mutex_lock(&link->lock);
	want_send_events_locked(link);
	pthread_mutex_unlock(&link->lock);
}

/* The link a CQ event names, with a reference, if it is still listed: an
 * app thread may read the event while the progress thread tears it down. */
static struct sdp_link *listed_link(void *ctx)
{
	struct sdp_link *found = NULL;

	pthread_mutex_lock(&links_lock);
	for (struct sdp_link *l = links; l; l = l->next) {
		if (l == ctx) {
			link_get(l);
			found = l;
			break;
		}
	}
	pthread_mutex_unlock(&links_lock);
	return found;
}

/* What an event of the link's CQ asks: take in what is queued, arm (what
 * is still in flight decides how), then look once more for what came in
 * between.  cq: the CQ the event named (NULL: whichever the link has). */
/* Poll lock held. */
static void set_arm_owed(struct sdp_link *link, bool owed)
{
	if (link->arm_owed == owed)
		return;
	link->arm_owed = owed;
	if (owed)
		atomic_fetch_add(&arms_owed, 1);
	else
		atomic_fetch_sub(&arms_owed, 1);
}

/* Has an app thread taken this CQ in by a non-blocking call since the
 * last check, with no thread gone to sleep on readiness since, and none
 * asleep now?  Then it finds the next completions itself, and no one
 * waits to be told of them.  Poll lock held. */
static bool nb_polled_since_mark(struct sdp_link *link)
{
	unsigned polls = atomic_load(&link->nb_polls);
	bool advanced = polls != link->nb_polls_mark;

	link->nb_polls_mark = polls;
	return advanced && atomic_load(&link->nb_poll_epoch) == app_wake_sleep_epoch() &&
	       !app_wake_anyone_asleep();
}

/* Why a link is armed: an event of its CQ (or the sweep), a thread about
 * to sleep on readiness, or the lease of its put-off arm is over. */
enum arm_occasion { ARM_ON_EVENT, ARM_BEFORE_SLEEP, ARM_LEASE_OVER };

/* Is the arm put off?  While an app thread busy-polls every link
 * (epoll_wait's spin), between two such spins while no thread sleeps,
 * while a thread woken in a blocked call takes the event in (it arms the
 * CQ when it sleeps again) and no other thread sleeps, or while one loops
 * on non-blocking calls that take this link's CQ in, each
 * completion is found without an event; an armed CQ would wake another
 * thread for every message.  Never for a thread about to sleep, unless a
 * spinner polls every link.  Poll lock held. */
static bool arm_put_off(struct sdp_link *link, enum arm_occasion why)
{
	/* The owed arms are made (and a spinner polls) for LINK_POLL_MAX
	 * links: past that, no put-off. */
	if (__atomic_load_n(&links_count, __ATOMIC_RELAXED) > LINK_POLL_MAX)
		return false;
	/* A link not up has no spinner to find its completions (a failing
	 * link's flushes must reach the progress thread). */
	if (__atomic_load_n(&link->state, __ATOMIC_RELAXED) != LINK_UP)
		return false;
	if (app_wake_spinning())
		return true;
	if (why == ARM_ON_EVENT && (app_wake_spun_lately() || app_wake_taker_sleeps_again()) &&
	    !app_wake_anyone_asleep())
		return true;
	return why != ARM_BEFORE_SLEEP && nb_polled_since_mark(link);
}

/* While an app thread polls the CQ itself, it is left unarmed: the arm is
 * owed, and made before any thread sleeps on readiness (app_wake.c), or
 * once the polling stopped for a lease. */
static void take_in_and_arm(struct sdp_link *link, struct ibv_cq *cq, enum arm_occasion why)
{
	bool put_off = false;

	drain_cq(link, false);
	pthread_mutex_lock(&link->poll_lock);
	if (!cq || link->cq == cq) {
		/* Owed first, then the spinners and sleepers read: a spinner
		 * that stops, or a thread about to sleep, counts itself first,
		 * then reads the owed arms (app_wake.c), so one of the two
		 * always arms. */
		set_arm_owed(link, true);
		put_off = arm_put_off(link, why);
		if (!put_off) {
			set_arm_owed(link, false);
			link_arm_polling(link, false);
		}
	}
	pthread_mutex_unlock(&link->poll_lock);
	if (put_off)
		app_wake_arm_owed();
	else
		drain_cq(link, false);
}

void link_on_cq_event(void *ctx, struct ibv_cq *cq)
{
	struct sdp_link *link = listed_link(ctx);

	if (!link)
		return;
	take_in_and_arm(link, cq, ARM_ON_EVENT);
	link_put(link);
}

/* Up to max of this process's links that are up, each with a reference. */
static unsigned links_up_held(struct sdp_link **held, unsigned max)
{
	unsigned n = 0;

	pthread_mutex_lock(&links_lock);
	for (struct sdp_link *l = links; l && n < max; l = l->next) {
		if (l->state != LINK_UP || l->pid != self_pid())
			continue;
		link_get(l);
		held[n++] = l;
	}
	pthread_mutex_unlock(&links_lock);
	return n;
}

/* accept(): the links of listener l that take committed OPENs, each taken
 * in once (waiting for a poller at it: a committed OPEN may be in the
 * queue, sent before the client's SYN).  A link whose ESTABLISHED event is
 * not handled yet counts: its client sends as soon as its own came. */
void link_reap_listener(struct sdp_listener *l)
{
	struct sdp_link *held[LINK_POLL_MAX];
	unsigned n = 0;

	pthread_mutex_lock(&links_lock);
	for (struct sdp_link *k = links; k && n < LINK_POLL_MAX; k = k->next) {
		if (!k->is_server || k->lsn != l || !k->open_commits || k->pid != self_pid() ||
		    (k->state != LINK_UP && k->state != LINK_CONNECTING))
			continue;
		link_get(k);
		held[n++] = k;
	}
	pthread_mutex_unlock(&links_lock);
	for (unsigned i = 0; i < n; i++)
		link_reap_held(held[i]);
}

/* ------------------------------------------------------------ liveness */

/* A zero-byte RDMA WRITE: the peer's adapter acknowledges it with no
 * receive buffer, no credit, no key and no CPU of the peer's (a zero-length
 * operation checks no address or key, IBTA C9-88), and it exposes nothing. */
static int post_probe(struct sdp_link *link)
{
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	int32_t idx = wr_take(link, NULL, 0, -1);
	int rc;

	wr.wr_id = LINK_WR_ID(LINK_WR_SEND, idx);
	rc = post_send_wr(link, &wr);
	if (rc)
		wr_give(link, (uint32_t)idx); /* nothing will complete it */
	return rc;
}

/* A probe, or the sends it waits for: still unanswered?  After
 * SDPSHIM_STALL_MS it fails the link. */
static bool probe_pending(struct sdp_link *link, uint64_t now)
{
	if (link->probe_until && link->sends_done >= link->probe_until)
		link->probe_until = 0; /* answered */
	if (!link->probe_until)
		return false;
	if (sdp_tun.stall_ms && now - link->probe_started_ms >= sdp_tun.stall_ms) {
		sdp_warn("link: the peer acknowledged nothing for %llu ms; its streams move to TCP",
			 (unsigned long long)(now - link->probe_started_ms));
		link_fail_locked(link, "the peer stopped answering");
	}
	return true;
}

/* Is the peer's host still there?  A sender that waits for credits has
 * nothing outstanding that could fail, so a host that died would leave it
 * waiting forever, where TCP's window probes give up.  A link that heard
 * nothing (no receive, no completed send) for SDPSHIM_LINK_PROBE_MS, while
 * it carries streams or queues sends of streams that went (the idle timer
 * keeps such a link), sends a probe, or waits for what is outstanding.  The
 * transport's retry error, or no answer within SDPSHIM_STALL_MS, fails the
 * link, and its streams move to TCP, whose own timers judge the peer from
 * there.  Run by the sweep alone (link lock held): no clock per message. */
static void probe_check(struct sdp_link *link, uint64_t now)
{
	uint64_t heard = link->rx_lseq + link->sends_done;

	if (heard != link->heard_mark || !link->quiet_since_ms) {
		link->heard_mark = heard;
		link->quiet_since_ms = now;
	}
	if (probe_pending(link, now) || !sdp_tun.link_probe_ms || (!link->nstreams && !link->jobs) ||
	    now - link->quiet_since_ms < sdp_tun.link_probe_ms)
		return;
	if (link->sends_posted == link->sends_done) { /* nothing outstanding: a probe */
		if (post_probe(link) != 0) {
			link_fail_locked(link, "posting a probe failed");
			return;
		}
		LINK_COUNT(link, probes_sent, 1);
		sdp_debug("link: the peer was silent for %llu ms; probing",
			  (unsigned long long)(now - link->quiet_since_ms));
	}
	link->probe_until = link->sends_posted;
	link->probe_started_ms = now;
}

/* The sweep (core/app_wake.c, once a second): each link as if its CQ had
 * raised an event (take in, arm, take in), so a CQ whose event was read
 * and never handled, or a completion no event announced (a peer's message
 * without the solicited bit it promised; an error completion, which rxe
 * does not raise under a solicited-only arm), waits a second at most.
 * Then each link's liveness. */
void link_sweep_all(void)
{
	/* Every link: a server has one per client process, past LINK_MAX. */
	unsigned max = __atomic_load_n(&links_count, __ATOMIC_RELAXED) + 8, n;
	struct sdp_link *stack[64], **held = stack;
	uint64_t now;

	if (max > 64)
		held = calloc(max, sizeof(*held));
	if (!held) /* without memory, the first 64 this time */
		held = stack;
	if (held == stack)
		max = 64;
	n = links_up_held(held, max);
	now = n ? progress_now_ms() : 0;
	for (unsigned i = 0; i < n; i++) {
		take_in_and_arm(held[i], NULL, ARM_ON_EVENT);
		pthread_mutex_lock(&held[i]->lock);
		if (held[i]->state == LINK_UP)
			probe_check(held[i], now);
		pthread_mutex_unlock(&held[i]->lock);
		link_put(held[i]);
	}
	if (held != stack)
		free(held);
}

bool link_any(void)
{
	bool any;

	pthread_mutex_lock(&links_lock);
	any = links != NULL;
	pthread_mutex_unlock(&links_lock);
	return any;
}

/* Busy-poll: every link of the process, by try-lock (a link another thread
 * is polling is left to it). */
void link_poll_all(void)
{
	struct sdp_link *held[LINK_POLL_MAX];
	unsigned n = links_up_held(held, LINK_POLL_MAX);

	for (unsigned i = 0; i < n; i++) {
		drain_cq(held[i], true);
		link_put(held[i]);
	}
}

bool link_open_delivered(struct sdp_link *link, uint64_t seq)
{
	bool done;

	drain_cq(link, false);
	pthread_mutex_lock(&link->lock);
	done = link->sends_done >= seq || link->state != LINK_UP;
	pthread_mutex_unlock(&link->lock);
	return done;
}

void link_release_held(struct sdp_link *link)
{
	if (link)
		link_put(link);
}

void link_reap(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;

	if (!link)
		return;
	link_get(link);
	drain_cq(link, false);
	link_put(link);
}

struct sdp_link *link_hold(struct sdp_conn *c)
{
	if (c->link)
		link_get(c->link);
	return c->link;
}

void link_reap_held(struct sdp_link *link)
{
	if (!link)
		return;
	drain_cq(link, false);
	link_put(link);
}

void link_app_reap_held(struct sdp_link *link)
{
	if (!link)
		return;
	drain_cq(link, true);
	link_put(link);
}

void link_app_poll_held(struct sdp_link *link)
{
	if (!link)
		return;
	atomic_store(&link->nb_poll_epoch, app_wake_sleep_epoch());
	atomic_fetch_add(&link->nb_polls, 1);
	drain_cq(link, true);
	link_put(link);
}

bool link_sink_claim(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;
	bool ok;

	if (!link)
		return true;
	pthread_mutex_lock(&link->lock);
	if (!link->sink_owner)
		link->sink_owner = c;
	ok = link->sink_owner == c;
	pthread_mutex_unlock(&link->lock);
	return ok;
}

void link_sink_release(struct sdp_conn *c)
{
	struct sdp_link *link = c->link;

	if (!link)
		return;
	pthread_mutex_lock(&link->lock);
	if (link->sink_owner == c)
		link->sink_owner = NULL;
	pthread_mutex_unlock(&link->lock);
}

void link_atfork_child(void)
{
	pthread_mutex_init(&links_lock, NULL);
	links = NULL; /* the parent's: left alone */
	links_count = 0;
	atomic_store(&arms_owed, 0);
}

bool link_arms_owed(void)
{
	return atomic_load(&arms_owed) > 0;
}

static void arm_owed_links(enum arm_occasion why)
{
	struct sdp_link *held[LINK_POLL_MAX];
	unsigned n = links_up_held(held, LINK_POLL_MAX);

	for (unsigned i = 0; i < n; i++) {
		if (held[i]->arm_owed) {
			if (why == ARM_LEASE_OVER)
				sdp_debug("a link's put-off arm is made by its lease timer");
			take_in_and_arm(held[i], NULL, why);
		}
		link_put(held[i]);
	}
}

void link_arm_owed_all(void)
{
	arm_owed_links(ARM_BEFORE_SLEEP);
}

void link_lease_over_all(void)
{
	arm_owed_links(ARM_LEASE_OVER);
}
