/* The modelled peer: an sdpshim end driven by the caller, which may lie.
 * Its stream to us is zcm_pattern(offset, ZCM_DIR_TO_US); it keeps honest
 * books of where that stream is (tx_off), and notes when its own lies make
 * positions ambiguous (then the app-side check only looks for canaries).
 * It checks everything we send it: headers, sequence, acks, credits, our
 * stream's bytes and offsets, and that each RdmaRdCompl names its oldest
 * SrcAvail and counts exactly the bytes we READ from it. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/credits.h"
#include "zcm_internal.h"

#define P (zcm.peer)
#define PEER_BASE_ADDR 0x500000000000ull

void zcm_peer_init(void)
{
	memset(&P, 0, sizeof(P));
}

void zcm_peer_free(void)
{
	for (int i = 0; i < P.nwin; i++)
		free(P.win[i].mem);
	for (int i = 0; i < P.nout; i++)
		free(P.out[i].data);
	P.nwin = P.nout = 0;
}

/* ------------------------------------------------------------ sending */

static void queue_op(struct zcm_pop op)
{
	if (P.nout >= ZCM_OUT_MAX) {
		free(op.data);
		return; /* the peer's queue is full: the action is dropped */
	}
	P.out[P.nout++] = op;
}

static uint32_t peer_credits(void)
{
	return credits_available(ZCM_BUF_COUNT, P.seq, P.our_ack);
}

static void queue_msg_at(uint8_t mid, const struct sdp_ext *ext, const uint8_t *payload,
			 uint32_t plen, uint64_t end_off)
{
	uint32_t len = mid == SDP_MID_DATA ? (uint32_t)SDP_BSDH_SIZE + plen
					   : (uint32_t)sdp_mid_fixed_len(mid);
	uint8_t *m = calloc(1, len);
	struct sdp_bsdh h = { .mid = mid, .bufs = ZCM_BUF_COUNT, .len = len, .mseq = ++P.seq,
			      .mseq_ack = P.rx_seq };

	if (peer_credits() <= CREDIT_RESERVE)
		h.flags = SDP_FLAG_STARVING;
	P.ack_sent = P.rx_seq;
	sdp_bsdh_to_wire(&h, m);
	if (mid != SDP_MID_DATA && len > SDP_BSDH_SIZE && ext)
		sdp_ext_to_wire(ext, m + SDP_BSDH_SIZE);
	if (payload)
		memcpy(m + SDP_BSDH_SIZE, payload, plen);
	zcm_trace("peer queues mid %u seq %u", mid, h.mseq);
	queue_op((struct zcm_pop){ .kind = POP_SEND, .data = m, .len = len, .mid = mid,
				   .end_off = end_off });
}

static void queue_msg(uint8_t mid, const struct sdp_ext *ext, const uint8_t *payload,
		      uint32_t plen)
{
	queue_msg_at(mid, ext, payload, plen, 0);
}

static uint8_t *pattern_bytes(uint64_t off, uint32_t n, unsigned dir)
{
	uint8_t *b = malloc(n ? n : 1);

	zcm_pattern_fill(b, off, n, dir);
	return b;
}

/* A receive of ours takes a SEND (or a WRITE with immediate). */
static bool deliver_send(struct zcm_pop *op)
{
	struct zcm_rwr r;
	struct ibv_wc wc = { .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV, .byte_len = op->len };

	if (!zcm_rq_take(&r))
		return false;
	wc.wr_id = r.wr_id;
	if (op->len > r.len) {
		wc.status = IBV_WC_LOC_LEN_ERR;
		zcm_cq_push(&wc, 0, 0);
		zcm_qp_to_error(IBV_WC_WR_FLUSH_ERR);
		return true;
	}
	memcpy((void *)(uintptr_t)r.addr, op->data, op->len);
	zcm_cq_push(&wc, op->mid, op->end_off);
	return true;
}

static bool deliver_write_imm(struct zcm_pop *op)
{
	struct zcm_rwr r;
	struct ibv_wc wc = { .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
			     .byte_len = op->len, .wc_flags = IBV_WC_WITH_IMM };

	if (zcm.rq_tail == zcm.rq_head)
		return false; /* receiver not ready: the peer retries */
	if (!zcm_remote_access(op->rkey, op->addr, op->len, true, op->data)) {
		P.tx_ambiguous = true; /* its books counted bytes that never landed */
		return true;
	}
	zcm_rq_take(&r);
	zcm_trace("peer WRITE with immediate %u: %u bytes at %#llx", op->imm, op->len,
		  (unsigned long long)op->addr);
	wc.wr_id = r.wr_id;
	wc.imm_data = htobe32(op->imm);
	zcm_cq_push(&wc, 0, op->end_off);
	return true;
}

/* Delivers the peer's queued operations in order while our receive queue
 * takes them.  Our QP in error: the peer's operations fail and are lost. */
bool zcm_peer_pump(void)
{
	bool did = false;

	while (P.nout > 0) {
		struct zcm_pop *op = &P.out[0];
		bool done = true;

		if (zcm.qp_err || P.dead)
			done = true;
		else if (op->kind == POP_SEND)
			done = deliver_send(op);
		else if (op->kind == POP_WRITE_IMM)
			done = deliver_write_imm(op);
		else if (!zcm_remote_access(op->rkey, op->addr, op->len, true, op->data))
			P.tx_ambiguous = true;
		if (!done)
			break;
		free(op->data);
		memmove(&P.out[0], &P.out[1], (size_t)(P.nout - 1) * sizeof(P.out[0]));
		P.nout--;
		did = true;
	}
	return did;
}

/* -------------------------------------------------- its own windows */

static int new_window(uint32_t len, unsigned access, const uint8_t *content)
{
	struct zcm_pwin *w;
	int k = P.nwin;

	if (k >= ZCM_PWIN_MAX)
		return -1;
	w = &P.win[P.nwin++];
	*w = (struct zcm_pwin){ .valid = true, .rkey = (0x5000u + (uint32_t)k) << 8 | 0x11,
				.addr = PEER_BASE_ADDR + ((uint64_t)k << 32), .len = len,
				.access = access };
	w->mem = calloc(1, len ? len : 1);
	if (content)
		memcpy(w->mem, content, len);
	return k;
}

static struct zcm_pwin *find_window(uint32_t rkey, uint64_t addr, uint32_t len, unsigned access)
{
	for (int i = 0; i < P.nwin; i++) {
		struct zcm_pwin *w = &P.win[i];

		if (w->valid && w->rkey == rkey && (w->access & access) && addr >= w->addr &&
		    addr + len <= w->addr + w->len)
			return w;
	}
	return NULL;
}

/* Our RDMA READ of one of its SrcAvails. */
enum ibv_wc_status zcm_peer_on_read(uint64_t raddr, uint32_t rkey, uint8_t *dst, uint32_t len)
{
	struct zcm_pwin *w = P.dead ? NULL : find_window(rkey, raddr, len, IBV_ACCESS_REMOTE_READ);
	uint32_t end;

	if (!w)
		return IBV_WC_REM_ACCESS_ERR;
	memcpy(dst, w->mem + (raddr - w->addr), len);
	end = (uint32_t)(raddr - w->addr) + len;
	if (end > w->read_bytes)
		w->read_bytes = end;
	return IBV_WC_SUCCESS;
}

/* ---------------------------------------------------- our stream */

static void check_our_bytes(const uint8_t *b, uint32_t n, uint64_t off, const char *how)
{
	size_t i;

	if (P.rx_ambiguous)
		return;
	i = zcm_pattern_mismatch(b, off, n, ZCM_DIR_TO_PEER);
	if (i < n) {
		zcm_finding("the peer got byte %#x at offset %llu of our stream (%s), expected %#x",
			    b[i], (unsigned long long)(off + i), how,
			    zcm_pattern(off + i, ZCM_DIR_TO_PEER));
		P.rx_ambiguous = true;
	}
}

/* A message or a WRITE with immediate took one of its receives. */
static void take_sequence(uint32_t mseq, const char *what)
{
	if (mseq != P.rx_seq + 1)
		zcm_finding("%s carries sequence %u, the peer expected %u", what, mseq, P.rx_seq + 1);
	P.rx_seq = mseq;
	if (mseq - P.ack_sent > ZCM_BUF_COUNT)
		zcm_finding("we sent message %u with only %u of the peer's buffers free", mseq,
			    ZCM_BUF_COUNT - (mseq - 1 - P.ack_sent));
}

/* Our RDMA WRITE into its sink. */
void zcm_peer_on_write(uint64_t raddr, uint32_t rkey, const uint8_t *data, uint32_t len, bool imm,
		       uint32_t imm_be, enum ibv_wc_status *st)
{
	struct zcm_pwin *w;

	if (len == 0 && !imm) { /* a probe: no address or key is checked (IBTA C9-88) */
		*st = P.dead ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS;
		return;
	}
	w = P.dead ? NULL : find_window(rkey, raddr, len, IBV_ACCESS_REMOTE_WRITE);
	if (!w) {
		*st = IBV_WC_REM_ACCESS_ERR;
		return;
	}
	memcpy(w->mem + (raddr - w->addr), data, len);
	if ((uint32_t)(raddr - w->addr) + len > w->written)
		w->written = (uint32_t)(raddr - w->addr) + len;
	if (!imm)
		return;
	take_sequence(be32toh(imm_be), "our RDMA WRITE with immediate");
	if (!P.psink_active || &P.win[P.psink_win] != w || raddr != w->addr) {
		zcm_finding("our RDMA WRITE with immediate landed outside the peer's sink");
		return;
	}
	check_our_bytes(w->mem, len, P.psink_off, "sink WRITE");
	if (!P.rx_ambiguous && P.psink_off != P.rx_off)
		zcm_finding("we wrote into a sink at offset %llu with the peer at %llu",
			    (unsigned long long)P.psink_off, (unsigned long long)P.rx_off);
	P.rx_off = P.psink_off + len;
	P.psink_active = false;
	P.win[P.psink_win].valid = false;
}

void zcm_peer_note_key(uint32_t rkey, uint64_t addr, uint32_t len)
{
	if (P.nkeys >= ZCM_KEYS_MAX)
		return;
	P.keys[P.nkeys] = rkey;
	P.key_addr[P.nkeys] = addr;
	P.key_len[P.nkeys] = len;
	P.nkeys++;
}

static void on_our_data(const uint8_t *payload, uint32_t n)
{
	if (!P.rx_ambiguous && P.osrc_valid && !P.osrc_answered)
		zcm_finding("we sent DATA while our SrcAvail was unanswered");
	check_our_bytes(payload, n, P.rx_off, "DATA");
	P.rx_off += n;
}

static void on_our_src_avail(const struct sdp_ext *x)
{
	zcm_peer_note_key(x->b, x->c, x->a);
	if (!P.rx_ambiguous && P.osrc_valid && !P.osrc_answered)
		zcm_finding("we sent a second SrcAvail before the first was answered");
	if (!P.rx_ambiguous && x->d != P.rx_off)
		zcm_finding("our SrcAvail names offset %llu, the peer is at %llu",
			    (unsigned long long)x->d, (unsigned long long)P.rx_off);
	P.osrc_valid = true;
	P.osrc_cancelled = P.osrc_answered = false;
	P.osrc_off = x->d;
	P.osrc_len = x->a;
	P.osrc_rkey = x->b;
	P.osrc_addr = x->c;
	P.osrc_read = 0;
}

/* Our answer to its oldest SrcAvail. */
static void on_our_rd_compl(const struct sdp_ext *x)
{
	struct zcm_psrc *s = &P.src[0];
	struct zcm_pwin *w;

	if ((P.nsrc == 0 || x->d != s->off) && P.raw_srcs > 0) {
		/* An answer to a SrcAvail it made up: our side may decline one
		 * it cannot take (no staging buffer), with what it READ. */
		P.raw_srcs--;
		return;
	}
	if (P.nsrc == 0) {
		zcm_finding("RdmaRdCompl(%u bytes at %llu) for no SrcAvail of the peer", x->a,
			    (unsigned long long)x->d);
		return;
	}
	w = &P.win[s->win];
	if (x->d != s->off) {
		zcm_finding("RdmaRdCompl names offset %llu, the peer's oldest SrcAvail is at %llu",
			    (unsigned long long)x->d, (unsigned long long)s->off);
		return;
	}
	if (x->a > s->len)
		zcm_finding("RdmaRdCompl says %u bytes of a %u-byte SrcAvail", x->a, s->len);
	else if (x->a != w->read_bytes)
		zcm_finding("RdmaRdCompl says %u bytes, we READ %u of that SrcAvail", x->a,
			    w->read_bytes);
	if (P.nsrc > 1 && x->a != s->len)
		P.tx_ambiguous = true; /* its later SrcAvails assumed all of this one */
	if (x->a < s->len)
		P.wire_off -= s->len - x->a; /* we took only x->a of it: later bytes come sooner */
	P.tx_off = s->off + x->a;
	P.last_src_read = w->read_bytes;
	w->valid = false; /* an honest sender invalidates its window now */
	memmove(&P.src[0], &P.src[1], (size_t)(P.nsrc - 1) * sizeof(P.src[0]));
	P.nsrc--;
}

static void on_our_wr_compl(const struct sdp_ext *x)
{
	struct zcm_pwin *w;

	if (!P.psink_active || x->d != P.psink_off) {
		zcm_finding("RdmaWrCompl(%u at %llu) for no sink of the peer", x->a,
			    (unsigned long long)x->d);
		return;
	}
	w = &P.win[P.psink_win];
	if (x->a > w->len || x->a > w->written)
		zcm_finding("RdmaWrCompl says %u bytes, we wrote %u", x->a, w->written);
	else
		check_our_bytes(w->mem, x->a, x->d, "sink WRITE");
	P.rx_off = x->d + x->a;
	P.psink_active = false;
	w->valid = false;
}

static void log_msg(const struct sdp_bsdh *h, const struct sdp_ext *x)
{
	struct zcm_msg m = { .mid = h->mid, .seq = h->mseq, .len = h->len, .ext = *x };

	P.count[h->mid & 31]++;
	P.last[h->mid & 31] = m;
	P.last[0] = m;
	P.total_msgs++;
}

static void on_our_ctrl(const struct sdp_bsdh *h, const struct sdp_ext *x)
{
	switch (h->mid) {
	case SDP_MID_SRC_AVAIL:
		on_our_src_avail(x);
		break;
	case SDP_MID_SRC_CANCEL:
		if (P.osrc_valid && x->d == P.osrc_off)
			P.osrc_cancelled = true;
		break;
	case SDP_MID_RDMA_RD_COMPL:
		on_our_rd_compl(x);
		break;
	case SDP_MID_SINK_AVAIL:
		zcm_peer_note_key(x->b, x->c, x->a);
		P.sink_valid = true;
		P.sink_answered = P.sink_cancelled = false;
		P.sink_off = x->d;
		P.sink_len = x->a;
		P.sink_rkey = x->b;
		P.sink_addr = x->c;
		break;
	case SDP_MID_SINK_CANCEL:
		if (P.sink_valid && x->d == P.sink_off)
			P.sink_cancelled = true;
		break;
	case SDP_MID_RDMA_WR_COMPL:
		on_our_wr_compl(x);
		break;
	case SDP_MID_SINK_CANCEL_ACK:
		if (P.psink_active && x->d == P.psink_off) {
			P.psink_active = false;
			P.win[P.psink_win].valid = false;
		}
		break;
	case SDP_MID_ABORT:
		P.got_abort = true;
		break;
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_KEEPALIVE:
	case SDP_MID_DISCONN:
		break;
	default:
		zcm_finding("we sent message %u on an open channel", h->mid);
		break;
	}
}

/* One of our SENDs landed in its receive buffer. */
void zcm_peer_on_send(const uint8_t *msg, uint32_t len)
{
	struct sdp_bsdh h;
	struct sdp_ext x = { 0 };
	enum sdp_wire_error err = sdp_bsdh_from_wire(msg, len, ZCM_BUF_SIZE, &h);

	if (err != SDP_WIRE_OK) {
		zcm_finding("we sent a malformed message: %s", sdp_wire_error_text(err));
		return;
	}
	take_sequence(h.mseq, "our message");
	if (!ack_is_valid(h.mseq_ack, P.our_ack, P.seq))
		zcm_finding("we acknowledged message %u, the peer sent up to %u", h.mseq_ack, P.seq);
	P.our_ack = h.mseq_ack;
	P.starving_seen = (h.flags & SDP_FLAG_STARVING) != 0;
	if (h.mid != SDP_MID_DATA && h.len > SDP_BSDH_SIZE)
		sdp_ext_from_wire(msg + SDP_BSDH_SIZE, &x);
	log_msg(&h, &x);
	zcm_trace("peer got mid %u seq %u ack %u a %u d %llu", h.mid, h.mseq, h.mseq_ack, x.a,
		  (unsigned long long)x.d);
	if (h.mid == SDP_MID_DATA)
		on_our_data(msg + SDP_BSDH_SIZE, h.len - (uint32_t)SDP_BSDH_SIZE);
	else
		on_our_ctrl(&h, &x);
}

/* ------------------------------------------------- public: its stream */

void zcm_peer_data(uint32_t n)
{
	uint8_t *b;

	if (n == 0 || n > ZCM_PAYLOAD_MAX)
		n = n ? ZCM_PAYLOAD_MAX : 1;
	if (P.nsrc > 0)
		P.tx_ambiguous = true; /* data behind its own unanswered SrcAvail */
	b = pattern_bytes(P.tx_off, n, ZCM_DIR_TO_US);
	P.wire_off += n; /* behind its unanswered SrcAvails: past all of them */
	queue_msg_at(SDP_MID_DATA, NULL, b, n, P.wire_off);
	free(b);
	P.tx_off += n;
	zcm_settle();
}

void zcm_peer_src_avail(uint32_t len)
{
	uint64_t off = P.tx_off;
	uint8_t *b;
	int k;

	for (int i = 0; i < P.nsrc; i++)
		off = P.src[i].off + P.src[i].len; /* stacked: assumes each is taken whole */
	if (P.nsrc >= ZCM_PSRC_MAX || len == 0)
		return;
	b = pattern_bytes(off, len, ZCM_DIR_TO_US);
	k = new_window(len, IBV_ACCESS_REMOTE_READ, b);
	free(b);
	if (k < 0)
		return;
	P.src[P.nsrc++] = (struct zcm_psrc){ .off = off, .len = len, .win = k };
	P.wire_off += len;
	queue_msg_at(SDP_MID_SRC_AVAIL,
		     &(struct sdp_ext){ .a = len, .b = P.win[k].rkey, .c = P.win[k].addr, .d = off },
		     NULL, 0, P.wire_off);
	zcm_settle();
}

void zcm_peer_src_cancel(void)
{
	struct sdp_ext x = { .d = P.tx_off };

	if (P.nsrc > 0) {
		P.src[P.nsrc - 1].cancelled = true;
		x.d = P.src[P.nsrc - 1].off;
	}
	queue_msg(SDP_MID_SRC_CANCEL, &x, NULL, 0);
	zcm_settle();
}

void zcm_peer_src_invalidate(void)
{
	if (P.nsrc > 0)
		P.win[P.src[P.nsrc - 1].win].valid = false;
}

void zcm_peer_sink_write(uint32_t n, enum zcm_sink_mode mode)
{
	uint32_t placed;
	uint8_t *b;

	if (!P.sink_valid || P.sink_answered)
		return;
	if (n == 0 || n > P.sink_len)
		n = P.sink_len;
	if (P.sink_off != P.tx_off || P.nsrc > 0)
		P.tx_ambiguous = true; /* it writes bytes that are not at the sink's offset */
	placed = mode == ZCM_SINK_COMPL_ONLY ? 0 : mode == ZCM_SINK_PARTIAL ? n / 2 : n;
	zcm_trace("peer answers our sink: mode %d, %u bytes claimed, %u placed", (int)mode, n, placed);
	b = pattern_bytes(P.tx_off, placed, ZCM_DIR_TO_US);
	P.wire_off += n; /* our side counts what the peer claims */
	if (mode == ZCM_SINK_IMM) {
		queue_op((struct zcm_pop){ .kind = POP_WRITE_IMM, .data = b, .len = placed,
					   .rkey = P.sink_rkey, .addr = P.sink_addr, .imm = ++P.seq,
					   .end_off = P.wire_off });
	} else {
		if (placed)
			queue_op((struct zcm_pop){ .kind = POP_WRITE, .data = b, .len = placed,
						   .rkey = P.sink_rkey, .addr = P.sink_addr });
		else
			free(b);
		queue_msg_at(SDP_MID_RDMA_WR_COMPL, &(struct sdp_ext){ .a = n, .d = P.sink_off },
			     NULL, 0, P.wire_off);
	}
	P.tx_off += placed;
	P.sink_answered = true;
	zcm_settle();
}

void zcm_peer_sink_cancel_ack(void)
{
	queue_msg(SDP_MID_SINK_CANCEL_ACK, &(struct sdp_ext){ .d = P.sink_off }, NULL, 0);
	P.sink_answered = true;
	zcm_settle();
}

/* ------------------------------------------------- public: our stream */

uint32_t zcm_peer_read_src(uint32_t n)
{
	uint8_t *tmp;
	uint32_t left = P.osrc_len - P.osrc_read;

	if (!P.osrc_valid || P.osrc_answered || left == 0)
		return 0;
	if (n == 0 || n > left)
		n = left;
	tmp = malloc(n);
	if (!zcm_remote_access(P.osrc_rkey, P.osrc_addr + P.osrc_read, n, false, tmp)) {
		free(tmp);
		return 0;
	}
	check_our_bytes(tmp, n, P.osrc_off + P.osrc_read, "READ of our SrcAvail");
	free(tmp);
	P.osrc_read += n;
	return n;
}

void zcm_peer_rd_compl(uint32_t n)
{
	if (!P.osrc_valid || P.osrc_answered) {
		/* An answer to nothing (or to what it has not seen yet): a lie
		 * after which it cannot judge our stream's positions. */
		P.rx_ambiguous = true;
		queue_msg(SDP_MID_RDMA_RD_COMPL, &(struct sdp_ext){ .a = n, .d = P.rx_off }, NULL, 0);
		zcm_settle();
		return;
	}
	if (n != P.osrc_read)
		P.rx_ambiguous = true; /* a lie: its books no longer match ours */
	queue_msg(SDP_MID_RDMA_RD_COMPL, &(struct sdp_ext){ .a = n, .d = P.osrc_off }, NULL, 0);
	P.rx_off = P.osrc_off + n;
	P.osrc_answered = true;
	zcm_settle();
}

void zcm_peer_rd_compl_honest(void)
{
	zcm_peer_rd_compl(P.osrc_read);
}

void zcm_peer_sink_avail(uint32_t len)
{
	int k;

	if (P.psink_active || len == 0)
		return;
	k = new_window(len, IBV_ACCESS_REMOTE_WRITE, NULL);
	if (k < 0)
		return;
	P.psink_active = true;
	P.psink_off = P.rx_off;
	P.psink_win = k;
	queue_msg(SDP_MID_SINK_AVAIL,
		  &(struct sdp_ext){ .a = len, .b = P.win[k].rkey, .c = P.win[k].addr,
				     .d = P.rx_off },
		  NULL, 0);
	zcm_settle();
}

void zcm_peer_sink_cancel(void)
{
	if (!P.psink_active)
		return;
	queue_msg(SDP_MID_SINK_CANCEL, &(struct sdp_ext){ .d = P.psink_off }, NULL, 0);
	zcm_settle();
}

/* --------------------------------------------------- public: anything */

void zcm_peer_credit_update(void)
{
	queue_msg(SDP_MID_CREDIT_UPDATE, NULL, NULL, 0);
	zcm_settle();
}

void zcm_peer_abort(void)
{
	queue_msg(SDP_MID_ABORT, &(struct sdp_ext){ .a = ECONNRESET }, NULL, 0);
	zcm_settle();
}

void zcm_peer_disconn(void)
{
	if (P.sent_disconn)
		return;
	P.sent_disconn = true;
	P.disconn_off = P.tx_off;
	queue_msg(SDP_MID_DISCONN, NULL, NULL, 0);
	zcm_settle();
}

void zcm_peer_raw(uint8_t mid, const struct sdp_ext *ext)
{
	uint64_t end_off = 0;

	if (mid == SDP_MID_DATA || sdp_mid_fixed_len(mid) == 0)
		return;
	if (mid == SDP_MID_SRC_AVAIL)
		P.raw_srcs++;
	if (mid == SDP_MID_SRC_AVAIL || mid == SDP_MID_RDMA_WR_COMPL) {
		P.tx_ambiguous = true; /* its books no longer say where its stream is */
		P.wire_off += ext ? ext->a : 0; /* bytes our side may take on its word */
		end_off = P.wire_off;
	}
	if (mid == SDP_MID_RDMA_RD_COMPL)
		P.rx_ambiguous = true; /* nor where ours is */
	if (mid == SDP_MID_DISCONN && !P.sent_disconn) {
		P.sent_disconn = true;
		P.disconn_off = P.tx_off;
	}
	queue_msg_at(mid, ext, NULL, 0, end_off);
	zcm_settle();
}

bool zcm_peer_probe_windows(void)
{
	bool any = false;

	for (int i = 0; i < P.nkeys; i++) {
		uint32_t len = P.key_len[i] > 65536 ? 65536 : P.key_len[i];

		/* Access tried, nothing moved: the app's bytes stay as they are. */
		if (zcm_remote_access(P.keys[i], P.key_addr[i], len, false, NULL)) {
			any = true;
			zcm_trace("peer can READ through window %#x", P.keys[i]);
		}
		if (zcm_remote_access(P.keys[i], P.key_addr[i], len, true, NULL)) {
			any = true;
			zcm_trace("peer can WRITE through window %#x", P.keys[i]);
		}
	}
	if (any && !zcm_app_busy() && !zcm.app.broken)
		zcm_finding("the peer reached a window of ours after the call that exposed it returned");
	return any;
}

void zcm_peer_set_auto(bool on)
{
	P.auto_honest = on;
}

/* ----------------------------------------------- honest auto answers */

static bool auto_answer_our_src(void)
{
	if (!P.osrc_valid || P.osrc_answered)
		return false;
	if (!P.osrc_cancelled && P.osrc_read < P.osrc_len)
		zcm_peer_read_src(0);
	zcm_peer_rd_compl_honest();
	return true;
}

static bool auto_answer_our_sink(void)
{
	if (!P.sink_valid || P.sink_answered || !P.sink_cancelled)
		return false; /* an honest sender keeps a sink until it has a send or a cancel */
	zcm_peer_sink_cancel_ack();
	return true;
}

static bool auto_credits(void)
{
	uint32_t unacked = P.rx_seq - P.ack_sent;

	if (unacked == 0 || (!P.starving_seen && unacked < ZCM_BUF_COUNT / 2))
		return false;
	zcm_peer_credit_update();
	return true;
}

bool zcm_peer_auto_step(void)
{
	if (!P.auto_honest || P.dead || zcm.qp_err)
		return false;
	return auto_answer_our_src() || auto_answer_our_sink() || auto_credits();
}

/* ------------------------------------------------------ observations */

int zcm_peer_msgs(uint8_t mid, struct zcm_msg *last)
{
	if (last)
		*last = P.last[mid & 31];
	return mid ? P.count[mid & 31] : P.total_msgs;
}

uint32_t zcm_peer_src_read_bytes(void)
{
	if (P.nsrc > 0)
		return P.win[P.src[P.nsrc - 1].win].read_bytes;
	return P.last_src_read;
}

uint32_t zcm_peer_credits(void)
{
	return peer_credits();
}

bool zcm_peer_all_acked(void)
{
	return P.our_ack == P.seq;
}

uint64_t zcm_peer_tx_off(void)
{
	return P.tx_off;
}

uint64_t zcm_peer_rx_off(void)
{
	return P.rx_off;
}

bool zcm_peer_got_abort(void)
{
	return P.got_abort;
}

int zcm_binds_after_abort(void)
{
	return zcm.binds_after_abort;
}

int zcm_binds_posted(void)
{
	return zcm.binds_posted;
}
