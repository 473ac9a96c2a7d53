/* The modelled verbs device: our QP's send queue (FIFO; the driver
 * executes each request's remote effect, then delivers its completion, in
 * order), the posted receives (FIFO), the CQ, memory regions and memory
 * windows, and the error state.  The core calls it through the function
 * pointers that <infiniband/verbs.h>'s inline wrappers dispatch on
 * (ctx->ops), and through the few non-inline libibverbs functions it uses,
 * which this file defines. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zcm_internal.h"

static uint32_t sq_count(void)
{
	return zcm.sq_head - zcm.sq_tail;
}

static struct zcm_swr *sq_at(uint32_t pos)
{
	return &zcm.sq[pos % ZCM_SQ_MAX];
}

/* ---------------------------------------------------------- memory */

struct zcm_mr *zcm_mr_add(uintptr_t start, uintptr_t end, unsigned access, void *owned)
{
	struct zcm_mr *m = calloc(1, sizeof(*m));

	if (!m)
		abort();
	m->start = start;
	m->end = end;
	m->access = access;
	m->live = true;
	m->owned = owned;
	m->mr.context = &zcm.ctx;
	m->mr.pd = &zcm.pd;
	m->mr.addr = (void *)start;
	m->mr.length = end - start;
	m->mr.lkey = m->mr.rkey = (zcm.next_key++) << 8;
	m->next = zcm.mrs;
	zcm.mrs = m;
	return m;
}

/* The memory of [start, end) goes away: regions over it are deregistered
 * (what the registration cache's memory hooks do). */
void zcm_mr_drop_range(uintptr_t start, uintptr_t end)
{
	for (struct zcm_mr *m = zcm.mrs; m; m = m->next)
		if (m->live && !m->owned && m->start < end && start < m->end)
			m->live = false;
}

struct zcm_mr *zcm_mr_by_lkey(uint32_t lkey)
{
	for (struct zcm_mr *m = zcm.mrs; m; m = m->next)
		if (m->live && m->mr.lkey == lkey)
			return m;
	return NULL;
}

/* Local access of a request: a live region with that key covering it. */
static bool local_ok(uint32_t lkey, uint64_t addr, uint32_t len, bool write)
{
	struct zcm_mr *m = zcm_mr_by_lkey(lkey);

	if (!m || addr < m->start || addr + len > m->end)
		return false;
	return !write || (m->access & IBV_ACCESS_LOCAL_WRITE);
}

/* --------------------------------------------------------------- CQ */

void zcm_cq_push(const struct ibv_wc *wc, uint8_t mid, uint64_t end_off)
{
	if (zcm.cq_head - zcm.cq_tail >= ZCM_CQ_MAX) {
		zcm_finding("completion queue overflow");
		return;
	}
	zcm.cqes[zcm.cq_head % ZCM_CQ_MAX] = (struct zcm_cqe){ .wc = *wc, .mid = mid,
								.end_off = end_off };
	zcm.cq_head++;
}

uint32_t zcm_cq_count(void)
{
	return zcm.cq_head - zcm.cq_tail;
}

/* One completion per poll, as if each arrived alone: the model then knows
 * which one the core is handling when it resets the connection. */
static int op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct zcm_cqe *e;

	(void)cq;
	if (n < 1 || zcm.cq_tail == zcm.cq_head)
		return 0;
	e = &zcm.cqes[zcm.cq_tail++ % ZCM_CQ_MAX];
	zcm.taken_before = zcm.taken_off;
	if (e->end_off > zcm.taken_off)
		zcm.taken_off = e->end_off;
	if (e->mid == SDP_MID_ABORT)
		zcm_note_abort(true); /* the core handles it in this very poll */
	if (e->mid == SDP_MID_DISCONN && !zcm.abort_known)
		zcm.fin_before_reset = true;
	wc[0] = e->wc;
	return 1;
}

static int op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

/* -------------------------------------------------------- receives */

static void flush_recv(uint64_t wr_id)
{
	struct ibv_wc wc = { .wr_id = wr_id, .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV };

	zcm_cq_push(&wc, 0, 0);
}

static int op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	(void)qp;
	for (; wr; wr = wr->next) {
		if (wr->num_sge != 1) {
			*bad = wr;
			return EINVAL;
		}
		if (zcm.qp_err) {
			flush_recv(wr->wr_id);
			continue;
		}
		for (uint32_t p = zcm.rq_tail; p != zcm.rq_head; p++)
			if (zcm.rq[p % ZCM_RQ_MAX].wr_id == wr->wr_id)
				zcm_finding("receive buffer %#llx posted twice",
					    (unsigned long long)wr->wr_id);
		if (zcm.rq_head - zcm.rq_tail >= ZCM_BUF_COUNT) {
			zcm_finding("more receives posted than the queue holds");
			*bad = wr;
			return ENOMEM;
		}
		zcm.rq[zcm.rq_head++ % ZCM_RQ_MAX] = (struct zcm_rwr){
			.wr_id = wr->wr_id, .addr = wr->sg_list[0].addr,
			.len = wr->sg_list[0].length, .lkey = wr->sg_list[0].lkey };
	}
	return 0;
}

bool zcm_rq_take(struct zcm_rwr *out)
{
	if (zcm.qp_err || zcm.rq_tail == zcm.rq_head)
		return false;
	*out = zcm.rq[zcm.rq_tail++ % ZCM_RQ_MAX];
	return true;
}

/* ------------------------------------------------------------ sends */

static void note_bind_posted(void)
{
	zcm.binds_posted++;
	if (zcm.abort_known) {
		zcm.binds_after_abort++;
		zcm_finding("a memory window was bound after the connection was reset");
	}
}

static void record_send(struct zcm_swr *w, const struct ibv_send_wr *wr)
{
	if (wr->num_sge >= 1) {
		w->has_sge = true;
		w->laddr = wr->sg_list[0].addr;
		w->llen = wr->sg_list[0].length;
		w->lkey = wr->sg_list[0].lkey;
	}
	if (w->opcode == IBV_WR_SEND && w->has_sge) {
		if (wr->send_flags & IBV_SEND_INLINE) {
			w->inline_copy = malloc(w->llen ? w->llen : 1);
			memcpy(w->inline_copy, (void *)(uintptr_t)w->laddr, w->llen);
		}
		w->mid = w->llen ? *(const uint8_t *)(uintptr_t)w->laddr : 0;
		if (w->mid == SDP_MID_ABORT)
			zcm_note_abort(true);
	}
	w->raddr = wr->wr.rdma.remote_addr;
	w->rkey = wr->wr.rdma.rkey;
	w->imm_be = wr->imm_data;
	if (w->opcode == IBV_WR_BIND_MW) {
		w->mw = wr->bind_mw.mw;
		w->bind_rkey = wr->bind_mw.rkey;
		w->bind_mr = wr->bind_mw.bind_info.mr;
		w->bind_addr = wr->bind_mw.bind_info.addr;
		w->bind_len = wr->bind_mw.bind_info.length;
		w->bind_access = wr->bind_mw.bind_info.mw_access_flags;
		note_bind_posted();
	}
	if (w->opcode == IBV_WR_LOCAL_INV)
		w->inv_rkey = wr->invalidate_rkey;
}

static enum ibv_wc_opcode wc_opcode(int opcode)
{
	switch (opcode) {
	case IBV_WR_RDMA_READ:           return IBV_WC_RDMA_READ;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_BIND_MW:             return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV:           return IBV_WC_LOCAL_INV;
	default:                         return IBV_WC_SEND;
	}
}

static bool opcode_known(int opcode)
{
	switch (opcode) {
	case IBV_WR_SEND:
	case IBV_WR_RDMA_READ:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_BIND_MW:
	case IBV_WR_LOCAL_INV:
		return true;
	default:
		return false;
	}
}

static void push_swr_completion(struct zcm_swr *w, enum ibv_wc_status st)
{
	struct ibv_wc wc = { .wr_id = w->wr_id, .status = st, .opcode = wc_opcode(w->opcode),
			     .byte_len = st == IBV_WC_SUCCESS ? w->byte_len : 0 };

	zcm_cq_push(&wc, 0, 0);
	free(w->inline_copy);
	w->inline_copy = NULL;
}

static int op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	(void)qp;
	for (; wr; wr = wr->next) {
		struct zcm_swr w = { .wr_id = wr->wr_id, .opcode = wr->opcode };

		if (!opcode_known(wr->opcode) || wr->num_sge > 1) {
			zcm_finding("unsupported work request (opcode %d, %d sges)", wr->opcode,
				    wr->num_sge);
			*bad = wr;
			return EINVAL;
		}
		if (sq_count() >= zcm.c->sq_depth) {
			*bad = wr;
			return ENOMEM; /* what a device does past max_send_wr */
		}
		record_send(&w, wr);
		if (zcm.qp_err) {
			push_swr_completion(&w, IBV_WC_WR_FLUSH_ERR);
			continue;
		}
		*sq_at(zcm.sq_head++) = w;
		zcm_trace("post opcode %d wr %#llx len %u mid %u", w.opcode,
			  (unsigned long long)w.wr_id, w.llen, w.mid);
	}
	return 0;
}

/* ------------------------------------------------------ error state */

/* The QP enters the error state.  Requests executed before the failure
 * complete with their status when they_completed, else everything
 * outstanding is flushed; so are the posted receives. */
static void qp_error(bool executed_complete, enum ibv_wc_status first)
{
	bool first_used = false;

	if (zcm.qp_err)
		return;
	zcm.qp_err = true;
	zcm_trace("QP -> ERR");
	while (zcm.sq_tail != zcm.sq_head) {
		struct zcm_swr *w = sq_at(zcm.sq_tail++);
		enum ibv_wc_status st = IBV_WC_WR_FLUSH_ERR;

		if (executed_complete && w->executed)
			st = w->status;
		else if (!first_used && first != IBV_WC_WR_FLUSH_ERR)
			st = first;
		first_used |= st != IBV_WC_SUCCESS;
		push_swr_completion(w, st);
	}
	while (zcm.rq_tail != zcm.rq_head)
		flush_recv(zcm.rq[zcm.rq_tail++ % ZCM_RQ_MAX].wr_id);
}

void zcm_qp_to_error(enum ibv_wc_status first_status)
{
	qp_error(false, first_status);
}

bool zcm_qp_in_error(void)
{
	return zcm.qp_err;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	(void)qp;
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		qp_error(false, IBV_WC_WR_FLUSH_ERR);
	return 0;
}

void zcm_remote_qp_error(void)
{
	zcm.peer.dead = true;
	qp_error(false, IBV_WC_RETRY_EXC_ERR);
}

/* ---------------------------------------------------------- windows */

static struct zcm_mw *mw_of(struct ibv_mw *mw)
{
	for (int i = 0; i < ZCM_MW_MAX; i++)
		if (zcm.mws[i].allocated && &zcm.mws[i].mw == mw)
			return &zcm.mws[i];
	return NULL;
}

static struct ibv_mw *op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	for (int i = 0; i < ZCM_MW_MAX; i++) {
		struct zcm_mw *w = &zcm.mws[i];

		if (w->allocated)
			continue;
		*w = (struct zcm_mw){ .allocated = true };
		w->mw.context = &zcm.ctx;
		w->mw.pd = pd;
		w->mw.type = type;
		w->mw.rkey = (0x7000u + (uint32_t)i) << 8;
		w->rkey = w->mw.rkey;
		return &w->mw;
	}
	errno = ENOMEM;
	return NULL;
}

static int op_dealloc_mw(struct ibv_mw *mw)
{
	struct zcm_mw *w = mw_of(mw);

	if (w)
		w->allocated = w->bound = false;
	return 0;
}

static bool bind_pending(const struct zcm_mw *w)
{
	for (uint32_t p = zcm.sq_tail; p != zcm.sq_head; p++) {
		struct zcm_swr *s = sq_at(p);

		if (!s->executed && s->opcode == IBV_WR_BIND_MW && s->mw == &w->mw)
			return true;
	}
	return false;
}

/* Can the peer reach this window (now, or once a posted bind executes)? */
bool zcm_window_exposed(const struct zcm_mw *w)
{
	if (zcm.qp_err || !w->allocated)
		return false;
	return w->bound || bind_pending(w);
}

bool zcm_remote_access(uint32_t rkey, uint64_t addr, uint32_t len, bool write, uint8_t *data)
{
	unsigned need = write ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;

	if (zcm.qp_err)
		return false;
	for (int i = 0; i < ZCM_MW_MAX; i++) {
		struct zcm_mw *w = &zcm.mws[i];

		if (!w->allocated || !w->bound || w->rkey != rkey || !(w->access & need))
			continue;
		if (addr < w->addr || addr + len > w->addr + w->len || !w->mr || !w->mr->live)
			return false;
		if (data && write)
			memcpy((void *)(uintptr_t)addr, data, len);
		else if (data)
			memcpy(data, (void *)(uintptr_t)addr, len);
		return true;
	}
	return false;
}

static enum ibv_wc_status exec_bind(struct zcm_swr *s)
{
	struct zcm_mw *w = mw_of(s->mw);
	struct zcm_mr *m = NULL;

	for (struct zcm_mr *it = zcm.mrs; it; it = it->next)
		if (it->live && &it->mr == s->bind_mr)
			m = it;
	if (!w || !m || !(m->access & IBV_ACCESS_MW_BIND) || s->bind_addr < m->start ||
	    s->bind_addr + s->bind_len > m->end || (s->bind_rkey >> 8) != (w->mw.rkey >> 8))
		return IBV_WC_MW_BIND_ERR;
	w->bound = true;
	w->addr = s->bind_addr;
	w->len = s->bind_len;
	w->access = s->bind_access;
	w->rkey = s->bind_rkey;
	w->mr = m;
	return IBV_WC_SUCCESS;
}

static enum ibv_wc_status exec_inv(struct zcm_swr *s)
{
	for (int i = 0; i < ZCM_MW_MAX; i++) {
		struct zcm_mw *w = &zcm.mws[i];

		if (w->allocated && w->bound && w->rkey == s->inv_rkey) {
			w->bound = false;
			return IBV_WC_SUCCESS;
		}
	}
	return IBV_WC_MW_BIND_ERR;
}

/* --------------------------------------------------------- executing */

static enum ibv_wc_status exec_send(struct zcm_swr *s)
{
	const uint8_t *bytes = s->inline_copy;

	if (!bytes) {
		if (!local_ok(s->lkey, s->laddr, s->llen, false))
			return IBV_WC_LOC_PROT_ERR;
		bytes = (const uint8_t *)(uintptr_t)s->laddr;
	}
	if (zcm.peer.dead)
		return IBV_WC_RETRY_EXC_ERR;
	zcm_peer_on_send(bytes, s->llen);
	return IBV_WC_SUCCESS;
}

static enum ibv_wc_status exec_read(struct zcm_swr *s)
{
	uint8_t *tmp;
	enum ibv_wc_status st;

	if (!local_ok(s->lkey, s->laddr, s->llen, true))
		return IBV_WC_LOC_PROT_ERR;
	tmp = malloc(s->llen ? s->llen : 1);
	st = zcm_peer_on_read(s->raddr, s->rkey, tmp, s->llen);
	if (st == IBV_WC_SUCCESS) {
		memcpy((void *)(uintptr_t)s->laddr, tmp, s->llen);
		s->byte_len = s->llen;
	}
	free(tmp);
	return st;
}

static enum ibv_wc_status exec_write(struct zcm_swr *s)
{
	enum ibv_wc_status st = IBV_WC_SUCCESS;

	if (s->llen && !local_ok(s->lkey, s->laddr, s->llen, false))
		return IBV_WC_LOC_PROT_ERR; /* a zero-byte WRITE (a probe) reads nothing */
	zcm_peer_on_write(s->raddr, s->rkey, (const uint8_t *)(uintptr_t)s->laddr, s->llen,
			  s->opcode == IBV_WR_RDMA_WRITE_WITH_IMM, s->imm_be, &st);
	return st;
}

static enum ibv_wc_status exec_one(struct zcm_swr *s)
{
	switch (s->opcode) {
	case IBV_WR_SEND:                return exec_send(s);
	case IBV_WR_RDMA_READ:           return exec_read(s);
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return exec_write(s);
	case IBV_WR_BIND_MW:             return exec_bind(s);
	case IBV_WR_LOCAL_INV:           return exec_inv(s);
	default:                         return IBV_WC_GENERAL_ERR;
	}
}

int zcm_sq_unexecuted(int opcode)
{
	int n = 0;

	for (uint32_t p = zcm.sq_tail; p != zcm.sq_head; p++)
		if (!sq_at(p)->executed && (opcode < 0 || sq_at(p)->opcode == opcode))
			n++;
	return n;
}

int zcm_exec_next(void)
{
	for (uint32_t p = zcm.sq_tail; p != zcm.sq_head; p++) {
		struct zcm_swr *s = sq_at(p);

		if (s->executed)
			continue;
		s->executed = true;
		s->status = exec_one(s);
		zcm_trace("exec opcode %d wr %#llx -> %s", s->opcode,
			  (unsigned long long)s->wr_id, ibv_wc_status_str(s->status));
		if (s->status != IBV_WC_SUCCESS)
			qp_error(true, s->status); /* a failed request fails the QP */
		return s->opcode;
	}
	return -1;
}

bool zcm_exec_until(int opcode)
{
	int op;

	while ((op = zcm_exec_next()) >= 0)
		if (op == opcode)
			return true;
	return false;
}

bool zcm_complete_next(void)
{
	struct zcm_swr *s;

	if (zcm.sq_tail == zcm.sq_head || !sq_at(zcm.sq_tail)->executed)
		return false;
	s = sq_at(zcm.sq_tail++);
	push_swr_completion(s, s->status);
	return true;
}

/* ------------------------------------------------- library functions */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:       return "success";
	case IBV_WC_WR_FLUSH_ERR:  return "Work Request Flushed Error";
	case IBV_WC_REM_ACCESS_ERR: return "remote access error";
	case IBV_WC_LOC_PROT_ERR:  return "local protection error";
	case IBV_WC_MW_BIND_ERR:   return "memory bind operation error";
	case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
	default:                   return "other error";
	}
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	(void)channel;
	(void)cq;
	(void)cq_context;
	errno = EAGAIN;
	return -1;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	(void)cq;
	(void)nevents;
}

/* -------------------------------------------------------------- setup */

void zcm_verbs_init(void)
{
	zcm.ctx.ops.post_send = op_post_send;
	zcm.ctx.ops.post_recv = op_post_recv;
	zcm.ctx.ops.poll_cq = op_poll_cq;
	zcm.ctx.ops.req_notify_cq = op_req_notify_cq;
	zcm.ctx.ops.alloc_mw = op_alloc_mw;
	zcm.ctx.ops.dealloc_mw = op_dealloc_mw;
	zcm.pd.context = &zcm.ctx;
	zcm.cq.context = &zcm.ctx;
	zcm.qp.context = &zcm.ctx;
	zcm.qp.pd = &zcm.pd;
	zcm.qp.send_cq = zcm.qp.recv_cq = &zcm.cq;
	zcm.qp.qp_type = IBV_QPT_RC;
	zcm.qp.state = IBV_QPS_RTS;
	zcm.dev.ctx = &zcm.ctx;
	zcm.dev.pd = &zcm.pd;
	zcm.dev.cc = &zcm.cc;
	zcm.dev.mw_type2 = true;
	zcm.dev.max_inline = 64;
	zcm.next_key = 1;
}

void zcm_verbs_free(void)
{
	while (zcm.sq_tail != zcm.sq_head) {
		free(sq_at(zcm.sq_tail)->inline_copy);
		zcm.sq_tail++;
	}
	while (zcm.mrs) {
		struct zcm_mr *m = zcm.mrs;

		zcm.mrs = m->next;
		free(m->owned);
		free(m->mre);
		free(m);
	}
}
