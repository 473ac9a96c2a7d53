/* rogue peer: a complete sdpshim channel client of a real sdpshim server app,
 * which speaks the data path correctly except for one scripted lie (rogue.c's
 * header lists the modes and lines; tests/vm/36-datapath-lies.bats uses them).
 *
 * It binds like an sdpshim client (docs/trust.md): a TCP socket bound to the
 * address rdma_cm chose, a Hello naming that 4-tuple, COMMIT, the TCP connect,
 * the server's urgent byte, the PROOF (the HelloAck's nonce) on TCP, ATTACH.
 * Then it is an OPEN peer: it advertises and reposts its receive buffers,
 * returns credits in every header and in credit updates, counts the server's
 * credits, sends the stream (lie_pattern.h) as DATA, READs the server's
 * SrcAvails and answers them, and checks every byte it receives.
 *
 * The QP is created with ibv_create_qp and driven through INIT/RTR/RTS with
 * rdma_init_qp_attr, its number passed in the connect parameters, so that
 * rdma_cm never touches it: rdma_disconnect does not move it to the error
 * state, and the abort-disconnect probe can still use it afterwards.
 *
 * With --link the rdma_cm connection is a link (core/link.c): its Hello has
 * SDP_HELLO_FLAG_LINK and names no TCP connection (source port 0, the
 * link's buffers); the stream then opens with an OPEN naming the 4-tuple,
 * and the server's OPEN_ACK carries the nonce the PROOF echoes.  Every SEND
 * starts with a link header (lseq, lack, the stream's index) and takes a
 * link credit (two, but for a link CREDIT); a WRITE with immediate takes a
 * credit and an lseq too, its immediate SDP_LINK_IMM(stream, mseq).  The
 * stream protocol inside is the same as on a channel of its own.  The link
 * lies (rogue.h) break that framing, or use a second stream (struct xstream)
 * opened on the same link. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core/wire.h"
#include "rogue.h"

#define CTRL_SLOTS     32u
#define CTRL_SIZE      128u
#define DATA_SLOTS     16u
#define DATA_SLOT_MAX  65536u
#define READ_CHUNK     (256u * 1024u)
#define PROBE_MAX      65536u
#define WIN_MAX        (4u << 20)
#define MAX_STEPS      16
#define MAX_OFFERS     8
#define MAX_ANSWERS    32
#define MAX_ZC_LEN     (1u << 30)
#define RESOLVE_MS     5000
#define TCP_CONNECT_S  10
#define SQ_DEPTH       (CTRL_SLOTS + DATA_SLOTS + 8)
#define END_GRACE_MS   300.0

/* wr_id = kind << 32 | mid << 16 | index */
enum wr_kind { WRK_RECV = 1, WRK_CTRL, WRK_DATA, WRK_READ, WRK_PROBE, WRK_WRITE };
#define WRID(kind, mid, idx) (((uint64_t)(kind) << 32) | ((uint64_t)(mid) << 16) | (uint64_t)(idx))

/* PH_LINK_UP: a link is established, our OPEN is on its way (--link). */
enum phase { PH_RESOLVING, PH_CONNECTING, PH_LINK_UP, PH_TCP_UP, PH_PROVING, PH_OPEN, PH_FAILED };

/* wr_id's mid byte for the link's own messages (OPEN, CREDIT, RELEASED). */
#define LINK_MID(kind) (0xe0u | (kind))

enum step_kind {
	ST_DATA,          /* n bytes of the stream as DATA */
	ST_SRC,           /* a SrcAvail of n bytes of our memory, offset + delta */
	ST_SINK,          /* a SinkAvail of n bytes, offset + delta */
	ST_WAIT_ECHO,     /* until everything we sent came back */
	ST_WAIT_ANSWERS,  /* until every offer we made was answered */
	ST_WAIT_LIE,      /* until the reactive lie happened */
	ST_PAUSE,         /* n ms */
	ST_DISCONN,       /* half-close */
	ST_HOLD,          /* forever (until --for, a signal or the end of the channel) */
	ST_LIE,           /* tell the scripted link lie now */
	ST_END,           /* end here (reason lie_told) */
};

struct step {
	enum step_kind kind;
	uint64_t n;
	long delta;
};

/* An offer we made: its window lies at win_off in our window memory. */
struct offer {
	bool sink, answered;
	uint64_t off;     /* the true stream offset */
	uint64_t claimed; /* the offset the message named */
	uint32_t len, win_off;
};

/* The server's SrcAvail we are reading. */
struct peer_src {
	bool active, cancelled, reading;
	uint64_t off, addr;
	uint32_t len, done, chunk, rkey;
};

/* The server's SinkAvail we hold (honest: until bytes take its place). */
struct peer_sink {
	bool valid;
	uint64_t off, addr;
	uint32_t len, rkey;
};

/* The second stream a link lie opens beside ours, on the same link: a full
 * one for write-imm-other (its own TCP connection, COMMIT, PROOF, ATTACH;
 * it then only holds the sinks the server offers); with --second-pending one
 * left pending at the server (OPEN_ACK, then nothing: no COMMIT, no TCP
 * connect, so no accept() ever claims it); and for open-dup-index only its
 * bound TCP socket, whose tuple the lying OPEN names. */
enum xphase { XS_NONE, XS_BOUND, XS_OPENING, XS_PENDING, XS_TCP_UP, XS_PROVING, XS_OPEN, XS_GONE };

struct xstream {
	enum xphase phase;
	uint16_t idx;
	int tcp;
	bool tcp_watch, starving, disconn_sent, attached;
	uint8_t nonce[SDP_NONCE_SIZE];
	uint32_t tx_seq, rx_seq, ack_sent, peer_ack, peer_bufs;
	struct peer_sink sink;
};

struct probe {
	bool armed, posted, done, write;
	uint64_t addr, off;
	uint32_t rkey, len;
	double at, done_at;
};

struct tally {
	unsigned long long data_sent, data_received, echo_bad;
	unsigned srcavails, srcavails_ignored, cancels, cancels_ignored, sinkavails, offers_sent,
		rdcompl, rdcompl_bad, wrcompl, wrcompl_bad, wrcompl_lies, sinkcancelacks,
		sinkcancelacks_bad, invalid, other_stream, open_acks, open_naks, released,
		unexpected, write_imm_lies;
	unsigned long long tcp_bytes;
	const char *probe;
};

struct answer {
	uint8_t mid;
	struct sdp_ext x;
};

struct peer {
	const struct peer_opts *o;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *rx_mr, *ctrl_mr, *data_mr, *read_mr, *win_mr;
	uint8_t *rx_mem, *ctrl_mem, *data_mem, *read_mem, *win_mem;
	struct sockaddr_storage to;
	int tcp;
	bool tcp_watch;
	enum phase phase;
	uint8_t nonce[SDP_NONCE_SIZE];
	/* receiving */
	uint32_t rx_count, rx_size, rx_seq, ack_sent;
	uint64_t rx_off;
	bool peer_starving;
	/* sending */
	uint32_t tx_seq, peer_ack, peer_bufs, sq_out, ctrl_busy, data_busy, data_slot;
	struct ibv_send_wr chain[SQ_DEPTH];
	struct ibv_sge chain_sge[SQ_DEPTH];
	unsigned nchain;
	uint64_t tx_off;
	struct answer ans[MAX_ANSWERS];
	unsigned nans;
	/* the script */
	struct step steps[MAX_STEPS];
	unsigned nsteps, step;
	uint64_t step_done;
	bool step_started;
	double pause_until;
	struct offer offers[MAX_OFFERS];
	unsigned noffers;
	uint32_t win_len, win_used;
	struct peer_src src;
	struct peer_sink psink;
	struct probe probe;
	/* the link (--link): hdr bytes of link header before every stream message */
	uint32_t hdr, buf_rx;         /* SDP_LH_SIZE or 0; bytes per receive buffer */
	uint16_t sidx;                /* our stream's index */
	uint32_t data_stride;         /* bytes per data send slot: hdr + data_slot */
	uint32_t l_tx, l_peer_lack;   /* our last lseq; the server's last lack */
	uint32_t l_peer_bufs, l_peer_size; /* the server's link buffers (its HelloAck) */
	uint32_t l_rx, l_lack_sent;   /* the server's last lseq taken in; the last lack we sent */
	bool l_starving;              /* the server asked for a link CREDIT */
	int frame_lie;                /* the next link header lies (bad-lseq, bad-lack) */
	struct xstream x;
	/* how it ends */
	bool lied, self_aborted, abort_posted, aborted, peer_disconn, disconn_sent, disconnected,
	     disconnect_called, qp_dead, attached, released, script_ended;
	double deadline;
	struct tally t;
};

static const char *const wc_names[] = {
	"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
	"IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
	"IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
	"IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR",
	"IBV_WC_LOC_RDD_VIOL_ERR", "IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",
	"IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
	"IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR", "IBV_WC_TM_ERR", "IBV_WC_TM_RNDV_INCOMPLETE",
};

static const char *wc_name(enum ibv_wc_status st)
{
	return (unsigned)st < sizeof(wc_names) / sizeof(wc_names[0]) ? wc_names[st] : "IBV_WC_?";
}

static const char *mid_name(uint8_t mid)
{
	static const char *const names[] = {
		"?", "DATA", "CREDIT_UPDATE", "DISCONN", "ABORT", "KEEPALIVE", "ATTACH", "DETACH",
		"SRC_AVAIL", "RDMA_RD_COMPL", "SRC_CANCEL", "SINK_AVAIL", "RDMA_WR_COMPL",
		"SINK_CANCEL", "SINK_CANCEL_ACK", "SWITCH", "COMMIT",
	};

	return mid < sizeof(names) / sizeof(names[0]) ? names[mid] : "?";
}

static void disconnect_after_abort(struct peer *p);

static void fail(struct peer *p, const char *what)
{
	logline("error conn=0 %s: %s", what, strerror(errno));
	p->phase = PH_FAILED;
}

static bool channel_ended(const struct peer *p)
{
	return p->aborted || p->peer_disconn || p->disconnected || p->qp_dead || p->released;
}

/* ------------------------------------------------------------- credits */

/* The server's receive buffers still free for us. */
static uint32_t credits(const struct peer *p)
{
	uint32_t out = p->tx_seq - p->peer_ack;

	return out >= p->peer_bufs ? 0 : p->peer_bufs - out;
}

/* The server's link buffers still free for us (--link): a link CREDIT may
 * take the last one, every other SEND (and a WRITE with immediate) needs
 * two (core/link.c). */
static uint32_t link_credits(const struct peer *p)
{
	uint32_t out = p->l_tx - p->l_peer_lack;

	return out >= p->l_peer_bufs ? 0 : p->l_peer_bufs - out;
}

/* A credit update, an abort or a keepalive may take the last credit; every
 * other message leaves one (core/credits.h). */
static bool credit_ok(const struct peer *p, uint8_t mid)
{
	bool may_take_last = mid == SDP_MID_CREDIT_UPDATE || mid == SDP_MID_ABORT ||
			     mid == SDP_MID_KEEPALIVE;

	if (p->hdr && link_credits(p) < 2)
		return false;
	return may_take_last ? credits(p) >= 1 : credits(p) > 1;
}

enum frame_lie { FRAME_TRUE, FRAME_SKIP_LSEQ, FRAME_FALSE_LACK };

/* The link header in front of a SEND (len: the whole message, header
 * included): the next lseq, and our lack, the server's last message taken
 * in (its buffer is posted again).  A scripted lie bends one header. */
static void frame(struct peer *p, uint8_t *buf, uint8_t kind, uint16_t stream, uint32_t len)
{
	struct sdp_lh h = { .kind = kind, .stream = stream, .len = len, .lack = p->l_rx };

	h.lseq = ++p->l_tx;
	h.flags = link_credits(p) <= 2 ? SDP_LINK_FLAG_STARVING : 0;
	if (p->frame_lie == FRAME_SKIP_LSEQ) {
		h.lseq = ++p->l_tx;
		logline("lseq_lie conn=0 kind=%u stream=%u lseq=%u expected=%u", kind, stream, h.lseq,
			h.lseq - 1);
	} else if (p->frame_lie == FRAME_FALSE_LACK) {
		h.lack = p->l_rx + 1000;
		logline("lack_lie conn=0 kind=%u stream=%u lack=%u received=%u", kind, stream, h.lack,
			p->l_rx);
	}
	p->frame_lie = FRAME_TRUE;
	p->l_lack_sent = p->l_rx;
	p->l_starving = false;
	sdp_lh_to_wire(&h, buf);
}

/* We consume every message on arrival: our ack is always the last mseq. */
static void fill_header(struct peer *p, uint8_t mid, uint32_t len, uint8_t *out)
{
	struct sdp_bsdh h = {
		.mid = mid,
		.flags = credits(p) <= 2 ? SDP_FLAG_STARVING : 0,
		.bufs = (uint16_t)p->rx_count,
		.len = len,
		.mseq = ++p->tx_seq,
		.mseq_ack = p->rx_seq,
	};

	p->ack_sent = p->rx_seq;
	p->peer_starving = false;
	sdp_bsdh_to_wire(&h, out);
}

static int free_slot(uint32_t busy, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (!(busy & (1u << i)))
			return (int)i;
	return -1;
}

/* SENDs are chained while pump() runs and posted at its end, in one
 * ibv_post_send: the server finds them in its queue together (stacked
 * SrcAvails reach it before its app can read the DATA ahead of them). */
static bool post_send(struct peer *p, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge *sge = &p->chain_sge[p->nchain];
	struct ibv_send_wr *wr = &p->chain[p->nchain];

	if (p->nchain == SQ_DEPTH)
		return false;
	*sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	*wr = (struct ibv_send_wr){ .wr_id = wr_id, .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	if (p->nchain)
		p->chain[p->nchain - 1].next = wr;
	p->nchain++;
	p->sq_out++;
	return true;
}

static void flush_chain(struct peer *p)
{
	struct ibv_send_wr *bad;
	int rc;

	if (!p->nchain)
		return;
	rc = ibv_post_send(p->qp, p->chain, &bad);
	if (rc) {
		logline("send_failed conn=0 wrs=%u: %s", p->nchain, strerror(rc));
		p->qp_dead = true;
	}
	p->nchain = 0;
}

/* A version-1 COMMIT is the bare header. */
static uint32_t ctrl_len(const struct peer *p, uint8_t mid)
{
	if (mid == SDP_MID_COMMIT && p->o->wire_version == 1)
		return (uint32_t)SDP_BSDH_SIZE;
	return (uint32_t)sdp_mid_fixed_len(mid);
}

/* One control message now, if a slot, the send queue and the credits allow. */
static bool send_ctrl(struct peer *p, uint8_t mid, const struct sdp_ext *x)
{
	int slot = free_slot(p->ctrl_busy, CTRL_SLOTS);
	uint32_t len = ctrl_len(p, mid);
	uint8_t *buf;

	if (slot < 0 || p->qp_dead || p->sq_out >= SQ_DEPTH || !credit_ok(p, mid) || len == 0)
		return false;
	buf = p->ctrl_mem + (size_t)slot * CTRL_SIZE;
	fill_header(p, mid, len, buf + p->hdr);
	if (len > SDP_BSDH_SIZE)
		sdp_ext_to_wire(x ? x : &(struct sdp_ext){ 0 }, buf + p->hdr + SDP_BSDH_SIZE);
	if (p->hdr)
		frame(p, buf, SDP_LINK_STREAM, p->sidx, p->hdr + len);
	if (!post_send(p, WRID(WRK_CTRL, mid, slot), buf, p->hdr + len, p->ctrl_mr->lkey))
		return false;
	p->ctrl_busy |= 1u << slot;
	p->abort_posted |= mid == SDP_MID_ABORT;
	return true;
}

/* Answers go out in order, ahead of the script's messages. */
static void answer(struct peer *p, uint8_t mid, uint64_t bytes, uint64_t off)
{
	if (p->nans == MAX_ANSWERS) {
		logline("answers_overflow conn=0 mid=%u", mid);
		return;
	}
	p->ans[p->nans++] = (struct answer){ mid, { .a = (uint32_t)bytes, .d = off } };
}

static void flush_answers(struct peer *p)
{
	while (p->nans && send_ctrl(p, p->ans[0].mid, &p->ans[0].x)) {
		memmove(p->ans, p->ans + 1, (p->nans - 1) * sizeof(p->ans[0]));
		p->nans--;
	}
}

/* A standalone update when half our buffers were consumed unadvertised, or
 * the server asked (STARVING), or it is down to its last two credits. */
static void maybe_credit_update(struct peer *p)
{
	uint32_t unadvertised = p->rx_seq - p->ack_sent;

	if (unadvertised == 0)
		return;
	if (unadvertised >= (p->rx_count + 1) / 2 || p->peer_starving ||
	    p->rx_count - unadvertised <= 2)
		send_ctrl(p, SDP_MID_CREDIT_UPDATE, NULL);
}

/* ------------------------------------------------------------- the link */

/* One of the link's own messages (OPEN, CREDIT, RELEASED) from a control
 * slot: the link header and payload bytes. */
static bool send_link(struct peer *p, uint8_t kind, uint16_t stream, const void *payload,
		      uint32_t plen)
{
	int slot = free_slot(p->ctrl_busy, CTRL_SLOTS);
	uint32_t need = kind == SDP_LINK_CREDIT ? 1 : 2;
	uint8_t *buf;

	if (slot < 0 || p->qp_dead || p->sq_out >= SQ_DEPTH || link_credits(p) < need ||
	    SDP_LH_SIZE + plen > CTRL_SIZE)
		return false;
	buf = p->ctrl_mem + (size_t)slot * CTRL_SIZE;
	if (plen)
		memcpy(buf + SDP_LH_SIZE, payload, plen);
	frame(p, buf, kind, stream, (uint32_t)SDP_LH_SIZE + plen);
	if (!post_send(p, WRID(WRK_CTRL, LINK_MID(kind), slot), buf, (uint32_t)SDP_LH_SIZE + plen,
		       p->ctrl_mr->lkey))
		return false;
	p->ctrl_busy |= 1u << slot;
	return true;
}

/* A link CREDIT when half our link buffers were taken in unadvertised, the
 * server asked (STARVING), or it is down to its last two. */
static void maybe_link_credit(struct peer *p)
{
	uint32_t unadvertised = p->l_rx - p->l_lack_sent;

	if (!p->hdr || p->phase < PH_LINK_UP || unadvertised == 0)
		return;
	if (unadvertised >= (p->rx_count + 1) / 2 || p->l_starving || p->rx_count - unadvertised <= 2)
		send_link(p, SDP_LINK_CREDIT, 0, NULL, 0);
}

/* OPEN for stream idx, naming the 4-tuple of the TCP socket fd (bound). */
static bool send_open(struct peer *p, uint16_t idx, int fd)
{
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	struct sdp_open o = { .buf_count = (uint16_t)p->rx_count, .buf_size = p->rx_size };
	uint8_t payload[sizeof(struct sdp_open_wire)];

	getsockname(fd, (struct sockaddr *)&local, &len);
	addr_to_wire((struct sockaddr *)&local, o.tuple.src_addr);
	o.tuple.src_port = addr_port((struct sockaddr *)&local);
	addr_to_wire((struct sockaddr *)&p->to, o.tuple.dst_addr);
	o.tuple.dst_port = addr_port((struct sockaddr *)&p->to);
	if (p->o->lie == LIE_OPEN_COMMIT_UNOFFERED) {
		uint8_t committed[sizeof(struct sdp_open_commit_wire)], zeros[SDP_NONCE_SIZE] = { 0 };

		sdp_open_commit_to_wire(&o, zeros, committed);
		if (!send_link(p, SDP_LINK_OPEN_COMMIT, idx, committed, sizeof(committed)))
			return false;
		logline("open_commit_sent conn=0 stream=%u sport=%u lseq=%u", idx, o.tuple.src_port,
			p->l_tx);
		return true;
	}
	sdp_open_to_wire(&o, payload);
	if (!send_link(p, SDP_LINK_OPEN, idx, payload, sizeof(payload))) {
		logline("open_failed conn=0 stream=%u (no slot or link credit)", idx);
		return false;
	}
	logline("open_sent conn=0 stream=%u sport=%u dport=%u bufs=%u size=%u lseq=%u", idx,
		o.tuple.src_port, o.tuple.dst_port, o.buf_count, o.buf_size, p->l_tx);
	return true;
}

/* stream-unopened: a STREAM message, DATA of n bytes (no stream's: the
 * pattern far past anything we send), for an index never opened. */
static bool send_unopened_data(struct peer *p, uint16_t idx, uint32_t n)
{
	int slot = free_slot(p->data_busy, DATA_SLOTS);
	struct sdp_bsdh h = { .mid = SDP_MID_DATA, .bufs = (uint16_t)p->rx_count,
			      .len = (uint32_t)SDP_BSDH_SIZE + n, .mseq = 1 };
	uint8_t *buf;

	if (slot < 0 || p->qp_dead || p->sq_out >= SQ_DEPTH || link_credits(p) < 2)
		return false;
	buf = p->data_mem + (size_t)slot * p->data_stride;
	lie_pattern_fill(buf + p->hdr + SDP_BSDH_SIZE, n, 1ull << 40);
	sdp_bsdh_to_wire(&h, buf + p->hdr);
	frame(p, buf, SDP_LINK_STREAM, idx, p->hdr + h.len);
	if (!post_send(p, WRID(WRK_DATA, SDP_MID_DATA, slot), buf, p->hdr + h.len, p->data_mr->lkey))
		return false;
	p->data_busy |= 1u << slot;
	logline("unopened_sent conn=0 stream=%u bytes=%u lseq=%u", idx, n, p->l_tx);
	return true;
}

/* ------------------------------------------------- the second stream */

static uint32_t x_credits(const struct xstream *x)
{
	uint32_t out = x->tx_seq - x->peer_ack;

	return out >= x->peer_bufs ? 0 : x->peer_bufs - out;
}

/* A control message on the second stream (logged as conn=1). */
static bool x_send_ctrl(struct peer *p, uint8_t mid, const struct sdp_ext *ext)
{
	struct xstream *x = &p->x;
	int slot = free_slot(p->ctrl_busy, CTRL_SLOTS);
	uint32_t len = (uint32_t)sdp_mid_fixed_len(mid);
	bool last_ok = mid == SDP_MID_CREDIT_UPDATE;
	uint8_t *buf;
	struct sdp_bsdh h = { .mid = mid, .bufs = (uint16_t)p->rx_count, .len = len };

	if (slot < 0 || p->qp_dead || p->sq_out >= SQ_DEPTH || link_credits(p) < 2 || len == 0 ||
	    (last_ok ? x_credits(x) < 1 : x_credits(x) < 2))
		return false;
	h.flags = x_credits(x) <= 2 ? SDP_FLAG_STARVING : 0;
	h.mseq = ++x->tx_seq;
	h.mseq_ack = x->rx_seq;
	x->ack_sent = x->rx_seq;
	x->starving = false;
	buf = p->ctrl_mem + (size_t)slot * CTRL_SIZE;
	sdp_bsdh_to_wire(&h, buf + p->hdr);
	if (len > SDP_BSDH_SIZE)
		sdp_ext_to_wire(ext ? ext : &(struct sdp_ext){ 0 }, buf + p->hdr + SDP_BSDH_SIZE);
	frame(p, buf, SDP_LINK_STREAM, x->idx, p->hdr + len);
	if (!post_send(p, WRID(WRK_CTRL, mid, slot), buf, p->hdr + len, p->ctrl_mr->lkey))
		return false;
	p->ctrl_busy |= 1u << slot;
	return true;
}

static void x_maybe_credit_update(struct peer *p)
{
	struct xstream *x = &p->x;
	uint32_t unadvertised = x->rx_seq - x->ack_sent;

	if (x->phase < XS_TCP_UP || x->phase == XS_GONE || unadvertised == 0)
		return;
	if (unadvertised >= (p->rx_count + 1) / 2 || x->starving || p->rx_count - unadvertised <= 2)
		x_send_ctrl(p, SDP_MID_CREDIT_UPDATE, NULL);
}

/* ---------------------------------------------------------- sending data */

/* Bytes that reach the server at the offset of a sink it gave us void that
 * sink; the honest answer (design.md) follows them. */
static void void_held_sink(struct peer *p)
{
	if (!p->psink.valid || p->psink.off != p->tx_off)
		return;
	p->psink.valid = false;
	answer(p, SDP_MID_SINK_CANCEL_ACK, 0, p->tx_off);
	logline("sinkcancelack_sent conn=0 off=%llu (bytes took its place)",
		(unsigned long long)p->tx_off);
}

static bool send_data(struct peer *p, uint32_t n)
{
	int slot = free_slot(p->data_busy, DATA_SLOTS);
	uint8_t *buf;

	if (slot < 0 || p->qp_dead || p->sq_out >= SQ_DEPTH || !credit_ok(p, SDP_MID_DATA))
		return false;
	void_held_sink(p);
	buf = p->data_mem + (size_t)slot * p->data_stride;
	lie_pattern_fill(buf + p->hdr + SDP_BSDH_SIZE, n, p->tx_off);
	fill_header(p, SDP_MID_DATA, (uint32_t)SDP_BSDH_SIZE + n, buf + p->hdr);
	if (p->hdr)
		frame(p, buf, SDP_LINK_STREAM, p->sidx, p->hdr + (uint32_t)SDP_BSDH_SIZE + n);
	if (!post_send(p, WRID(WRK_DATA, SDP_MID_DATA, slot), buf,
		       p->hdr + (uint32_t)SDP_BSDH_SIZE + n, p->data_mr->lkey))
		return false;
	p->data_busy |= 1u << slot;
	p->tx_off += n;
	p->t.data_sent += n;
	return true;
}

static bool push_data(struct peer *p, const struct step *s)
{
	uint32_t payload = p->data_slot - (uint32_t)SDP_BSDH_SIZE;

	while (p->step_done < s->n) {
		uint64_t left = s->n - p->step_done;
		uint32_t n = left < payload ? (uint32_t)left : payload;

		if (!send_data(p, n))
			return false;
		p->step_done += n;
	}
	logline("data_sent conn=0 bytes=%llu stream_off=%llu", (unsigned long long)s->n,
		(unsigned long long)p->tx_off);
	return true;
}

/* SrcAvail (our stream bytes, remote read) or SinkAvail (room for the
 * server's, remote write) over a piece of our window memory. */
static bool send_offer(struct peer *p, bool sink, const struct step *s)
{
	struct offer *o = &p->offers[p->noffers];
	struct sdp_ext x;

	if (p->noffers == MAX_OFFERS || p->win_used + s->n > p->win_len) {
		logline("offer_skipped conn=0: no room");
		return true;
	}
	*o = (struct offer){ .sink = sink, .off = sink ? p->rx_off : p->tx_off,
			     .len = (uint32_t)s->n, .win_off = p->win_used };
	o->claimed = o->off + (uint64_t)(int64_t)s->delta;
	if (sink)
		memset(p->win_mem + o->win_off, 0, o->len);
	else
		lie_pattern_fill(p->win_mem + o->win_off, o->len, o->off);
	x = (struct sdp_ext){ .a = o->len, .b = p->win_mr->rkey,
			      .c = (uintptr_t)(p->win_mem + o->win_off), .d = o->claimed };
	if (!send_ctrl(p, sink ? SDP_MID_SINK_AVAIL : SDP_MID_SRC_AVAIL, &x))
		return false;
	p->win_used += o->len;
	p->noffers++;
	p->t.offers_sent++;
	if (!sink)
		p->tx_off += o->len; /* the stream goes on after it */
	logline("offer_sent conn=0 kind=%s off=%llu claimed=%llu delta=%ld len=%u rkey=0x%x addr=0x%llx",
		sink ? "sink" : "src", (unsigned long long)o->off, (unsigned long long)o->claimed,
		s->delta, o->len, x.b, (unsigned long long)x.c);
	return true;
}

static bool offers_answered(const struct peer *p)
{
	for (unsigned i = 0; i < p->noffers; i++)
		if (!p->offers[i].answered)
			return false;
	return true;
}

static bool pause_over(struct peer *p, const struct step *s)
{
	if (!p->step_started) {
		p->step_started = true;
		p->pause_until = mono_ms() + (double)s->n;
	}
	return mono_ms() >= p->pause_until;
}

static bool send_disconn(struct peer *p)
{
	if (p->x.phase == XS_OPEN && !p->x.disconn_sent) {
		if (!x_send_ctrl(p, SDP_MID_DISCONN, NULL))
			return false;
		p->x.disconn_sent = true;
		logline("disconn_sent conn=1");
	}
	if (!send_ctrl(p, SDP_MID_DISCONN, NULL))
		return false;
	p->disconn_sent = true;
	logline("disconn_sent conn=0 stream_off=%llu", (unsigned long long)p->tx_off);
	return true;
}

/* The link lie of the script, once there is room for it; true when told. */
static bool tell_link_lie(struct peer *p)
{
	bool told = true;

	switch (p->o->lie) {
	case LIE_OPEN_DUP_INDEX:
		/* Our index is in use; the OPEN names the tuple of another socket of ours. */
		told = send_open(p, p->sidx, p->x.tcp);
		break;
	case LIE_BAD_LSEQ:
	case LIE_BAD_LACK:
		if (!credit_ok(p, SDP_MID_CREDIT_UPDATE))
			return false;
		p->frame_lie = p->o->lie == LIE_BAD_LSEQ ? FRAME_SKIP_LSEQ : FRAME_FALSE_LACK;
		told = send_ctrl(p, SDP_MID_CREDIT_UPDATE, NULL);
		p->frame_lie = FRAME_TRUE;
		break;
	case LIE_STREAM_UNOPENED:
		told = send_unopened_data(p, (uint16_t)((p->sidx + 7) % SDP_LINK_STREAMS_MAX), 4096);
		break;
	case LIE_RELEASED_IN_USE:
		told = send_link(p, SDP_LINK_RELEASED, p->sidx, NULL, 0);
		if (told)
			logline("released_sent conn=0 stream=%u stream_off=%llu (still in use)", p->sidx,
				(unsigned long long)p->tx_off);
		break;
	default:
		break;
	}
	if (told)
		p->lied = true;
	return told;
}

/* True when the step is done. */
static bool step_advance(struct peer *p, const struct step *s)
{
	switch (s->kind) {
	case ST_DATA:         return push_data(p, s);
	case ST_SRC:          return send_offer(p, false, s);
	case ST_SINK:         return send_offer(p, true, s);
	case ST_WAIT_ECHO:    return p->rx_off >= p->tx_off || channel_ended(p);
	case ST_WAIT_ANSWERS: return offers_answered(p) || channel_ended(p);
	case ST_WAIT_LIE:     return p->lied || channel_ended(p);
	case ST_PAUSE:        return pause_over(p, s);
	case ST_DISCONN:      return p->aborted || p->disconnected || p->qp_dead || p->released ||
				     send_disconn(p);
	case ST_HOLD:         return false;
	case ST_LIE:          return channel_ended(p) || tell_link_lie(p);
	case ST_END:          p->script_ended = true; return true;
	}
	return false;
}

static void run_script(struct peer *p)
{
	while (p->step < p->nsteps && step_advance(p, &p->steps[p->step])) {
		p->step++;
		p->step_done = 0;
		p->step_started = false;
	}
}

static bool script_sent_data(const struct peer *p)
{
	for (unsigned i = p->step; i < p->nsteps; i++)
		if (p->steps[i].kind == ST_DATA)
			return false;
	return true;
}

/* write-imm-other: a sink the server offered on one of our two streams is
 * filled by one RDMA WRITE whose immediate names the OTHER stream.  (A link
 * lets one stream at a time expose a sink, so usually only one has one; if
 * both do, the second stream's is filled and ours named.)  Does the named
 * stream take bytes that landed in another stream's buffer? */
static void maybe_write_imm_lie(struct peer *p)
{
	struct peer_sink *v = &p->psink, *t = &p->x.sink, *target;
	struct ibv_sge *sge = &p->chain_sge[p->nchain];
	struct ibv_send_wr *wr = &p->chain[p->nchain];
	uint32_t imm, named, target_idx, mseq, len;

	if (p->o->lie != LIE_WRITE_IMM_OTHER || p->lied || (!v->valid && !t->valid) ||
	    p->x.phase != XS_OPEN)
		return;
	target = t->valid ? t : v;
	target_idx = t->valid ? p->x.idx : p->sidx;
	named = t->valid ? p->sidx : p->x.idx;
	len = v->valid && t->valid && v->len < t->len ? v->len : target->len;
	if (len > p->win_len) {
		logline("write_imm_skipped conn=0 len=%u window=%u", len, p->win_len);
		p->lied = true;
		return;
	}
	if (p->qp_dead || p->sq_out >= SQ_DEPTH || p->nchain == SQ_DEPTH || !credit_ok(p, SDP_MID_DATA))
		return;
	lie_pattern_fill(p->win_mem, len, p->tx_off);
	/* The named stream's next sequence number: the WRITE takes it. */
	mseq = named == p->sidx ? ++p->tx_seq : ++p->x.tx_seq;
	imm = SDP_LINK_IMM(named, mseq);
	*sge = (struct ibv_sge){ .addr = (uintptr_t)p->win_mem, .length = len, .lkey = p->win_mr->lkey };
	*wr = (struct ibv_send_wr){ .wr_id = WRID(WRK_WRITE, 0, 0), .sg_list = sge, .num_sge = 1,
				    .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				    .imm_data = htonl(imm) };
	wr->wr.rdma.remote_addr = target->addr;
	wr->wr.rdma.rkey = target->rkey;
	if (p->nchain)
		p->chain[p->nchain - 1].next = wr;
	p->nchain++;
	p->sq_out++;
	p->l_tx++; /* one of the server's link receives */
	logline("write_imm_lie conn=0 named_stream=%u target_stream=%u bytes=%u mseq=%u lseq=%u "
		"rkey=0x%x addr=0x%llx (the bytes go to the other stream's sink)", named, target_idx,
		len, mseq, p->l_tx, target->rkey, (unsigned long long)target->addr);
	if (named == p->sidx)
		p->tx_off += len;
	v->valid = false;
	t->valid = false;
	p->lied = true;
	p->t.write_imm_lies++;
}

static void pump_chained(struct peer *p)
{
	if (p->phase >= PH_TCP_UP)
		flush_answers(p);
	if (p->self_aborted || p->disconnected)
		return; /* nothing after our ABORT, nothing to a peer that left */
	if (p->phase == PH_OPEN) {
		maybe_write_imm_lie(p);
		run_script(p);
	}
	if (p->phase >= PH_TCP_UP && p->phase != PH_FAILED)
		maybe_credit_update(p);
	x_maybe_credit_update(p);
	maybe_link_credit(p);
}

static void pump(struct peer *p)
{
	if (p->phase < PH_LINK_UP || p->phase == PH_FAILED)
		return;
	if (!p->qp_dead)
		pump_chained(p);
	flush_chain(p);
	if (p->abort_posted && p->o->disconnect_at == DISC_POSTED)
		disconnect_after_abort(p);
}

/* ------------------------------------------------- the server's offers */

static void start_read(struct peer *p)
{
	struct peer_src *s = &p->src;
	uint32_t n = s->len - s->done < READ_CHUNK ? s->len - s->done : READ_CHUNK;
	struct ibv_sge sge = { .addr = (uintptr_t)p->read_mem, .length = n, .lkey = p->read_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WRID(WRK_READ, 0, 0), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc;

	wr.wr.rdma.remote_addr = s->addr + s->done;
	wr.wr.rdma.rkey = s->rkey;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (rc) {
		logline("read_post_failed conn=0: %s", strerror(rc));
		p->qp_dead = true;
		return;
	}
	p->sq_out++;
	s->reading = true;
	s->chunk = n;
}

static void answer_src(struct peer *p)
{
	struct peer_src *s = &p->src;

	answer(p, SDP_MID_RDMA_RD_COMPL, s->done, s->off);
	p->rx_off = s->off + s->done;
	s->active = false;
	logline("rdcompl_sent conn=0 off=%llu bytes=%u of=%u%s", (unsigned long long)s->off, s->done,
		s->len, s->cancelled ? " cancelled=1" : "");
}

static void read_completed(struct peer *p, enum ibv_wc_status st)
{
	struct peer_src *s = &p->src;
	size_t bad;

	s->reading = false;
	if (st != IBV_WC_SUCCESS) {
		logline("read_failed conn=0 off=%llu status=%s (%d)", (unsigned long long)s->off,
			wc_name(st), (int)st);
		s->active = false;
		return;
	}
	bad = lie_pattern_mismatches(p->read_mem, s->chunk, s->off + s->done);
	p->t.echo_bad += bad;
	p->t.data_received += s->chunk;
	s->done += s->chunk;
	if (bad)
		logline("read_bad conn=0 off=%llu bytes=%u bad=%zu",
			(unsigned long long)(s->off + s->done - s->chunk), s->chunk, bad);
	if (s->done == s->len || s->cancelled)
		answer_src(p);
	else
		start_read(p);
}

/* abort-disconnect: the server exposes a window; ABORT now, disconnect once
 * the ABORT's send completed (the server's QP has it), probe later. */
static void abort_on_window(struct peer *p, bool write, const struct sdp_ext *x)
{
	if (p->probe.armed) {
		logline("offer_after_abort conn=0 off=%llu", (unsigned long long)x->d);
		return;
	}
	p->probe = (struct probe){ .armed = true, .write = write, .addr = x->c, .off = x->d,
				   .rkey = x->b, .len = x->a < PROBE_MAX ? x->a : PROBE_MAX };
	logline("window conn=0 op=%s off=%llu len=%u rkey=0x%x addr=0x%llx", write ? "write" : "read",
		(unsigned long long)x->d, x->a, x->b, (unsigned long long)x->c);
	if (p->o->disconnect_at == DISC_FIRST)
		disconnect_after_abort(p);
	answer(p, SDP_MID_ABORT, ECONNRESET, 0);
	p->self_aborted = p->lied = true;
}

static void on_src_avail(struct peer *p, const struct sdp_ext *x)
{
	p->t.srcavails++;
	logline("srcavail conn=0 off=%llu len=%u rkey=0x%x addr=0x%llx expected_off=%llu",
		(unsigned long long)x->d, x->a, x->b, (unsigned long long)x->c,
		(unsigned long long)p->rx_off);
	if (p->o->lie == LIE_ABORT_DISCONNECT) {
		abort_on_window(p, false, x);
		return;
	}
	if (p->src.active || x->a == 0 || x->a > MAX_ZC_LEN) {
		logline("srcavail_out_of_place conn=0 off=%llu len=%u", (unsigned long long)x->d, x->a);
		return;
	}
	p->src = (struct peer_src){ .active = true, .off = x->d, .addr = x->c, .len = x->a,
				    .rkey = x->b };
	if (p->o->lie == LIE_NEVER_ANSWER_CANCEL) {
		p->lied = true;
		p->t.srcavails_ignored++;
		logline("srcavail_ignored conn=0 off=%llu len=%u (no READ, no answer, ever)",
			(unsigned long long)x->d, x->a);
		return;
	}
	if (x->d != p->rx_off)
		logline("srcavail_offset_wrong conn=0 off=%llu expected_off=%llu",
			(unsigned long long)x->d, (unsigned long long)p->rx_off);
	start_read(p);
}

static void on_src_cancel(struct peer *p, const struct sdp_ext *x)
{
	p->t.cancels++;
	if (p->o->lie == LIE_NEVER_ANSWER_CANCEL && p->src.active) {
		p->t.cancels_ignored++;
		logline("srccancel_ignored conn=0 off=%llu", (unsigned long long)x->d);
		return;
	}
	if (!p->src.active || x->d != p->src.off) {
		logline("srccancel_stale conn=0 off=%llu", (unsigned long long)x->d);
		return;
	}
	p->src.cancelled = true;
	if (!p->src.reading)
		answer_src(p);
}

static void lie_wrcompl(struct peer *p, const struct sdp_ext *x)
{
	answer(p, SDP_MID_RDMA_WR_COMPL, x->a, x->d);
	p->tx_off += x->a;
	p->lied = true;
	p->t.wrcompl_lies++;
	logline("wrcompl_lie conn=0 off=%llu bytes=%u (no RDMA WRITE was made)",
		(unsigned long long)x->d, x->a);
}

static void on_sink_avail(struct peer *p, const struct sdp_ext *x)
{
	p->t.sinkavails++;
	logline("sinkavail conn=0 off=%llu len=%u rkey=0x%x addr=0x%llx expected_off=%llu",
		(unsigned long long)x->d, x->a, x->b, (unsigned long long)x->c,
		(unsigned long long)p->tx_off);
	if (p->o->lie == LIE_ABORT_DISCONNECT) {
		abort_on_window(p, true, x);
		return;
	}
	if (p->o->lie == LIE_FALSE_WRCOMPL && !p->lied && script_sent_data(p) && x->d == p->tx_off &&
	    x->a > 0 && x->a <= MAX_ZC_LEN) {
		lie_wrcompl(p, x);
		return;
	}
	if (x->d != p->tx_off || p->psink.valid) {
		answer(p, SDP_MID_SINK_CANCEL_ACK, 0, x->d);
		logline("sinkcancelack_sent conn=0 off=%llu (not usable)", (unsigned long long)x->d);
		return;
	}
	p->psink = (struct peer_sink){ .valid = true, .off = x->d, .addr = x->c, .len = x->a,
				       .rkey = x->b };
}

static void on_sink_cancel(struct peer *p, const struct sdp_ext *x)
{
	if (!p->psink.valid || p->psink.off != x->d) {
		logline("sinkcancel_stale conn=0 off=%llu", (unsigned long long)x->d);
		return;
	}
	p->psink.valid = false;
	answer(p, SDP_MID_SINK_CANCEL_ACK, 0, x->d);
	logline("sinkcancelack_sent conn=0 off=%llu (cancelled)", (unsigned long long)x->d);
}

/* ------------------------------------------ answers to our own offers */

static struct offer *first_open_offer(struct peer *p, bool sink)
{
	for (unsigned i = 0; i < p->noffers; i++)
		if (!p->offers[i].answered && p->offers[i].sink == sink)
			return &p->offers[i];
	return NULL;
}

static void on_rd_compl(struct peer *p, const struct sdp_ext *x)
{
	struct offer *o = first_open_offer(p, false);
	bool ok;

	p->t.rdcompl++;
	if (!o) {
		p->t.rdcompl_bad++;
		logline("rdcompl conn=0 off=%llu bytes=%u expected_off=none WRONG (no SrcAvail open)",
			(unsigned long long)x->d, x->a);
		return;
	}
	o->answered = true;
	ok = x->d == o->claimed && x->a == o->len;
	p->t.rdcompl_bad += !ok;
	logline("rdcompl conn=0 off=%llu bytes=%u expected_off=%llu expected_bytes=%u %s",
		(unsigned long long)x->d, x->a, (unsigned long long)o->claimed, o->len,
		ok ? "ok" : "WRONG");
}

static void on_wr_compl(struct peer *p, const struct sdp_ext *x)
{
	struct offer *o = first_open_offer(p, true);
	size_t bad;

	p->t.wrcompl++;
	if (!o || x->a > o->len) {
		p->t.wrcompl_bad++;
		logline("wrcompl conn=0 off=%llu bytes=%u WRONG (no such sink)", (unsigned long long)x->d,
			x->a);
		return;
	}
	o->answered = true;
	bad = lie_pattern_mismatches(p->win_mem + o->win_off, x->a, o->off);
	p->t.wrcompl_bad += x->d != o->claimed || bad;
	p->t.echo_bad += bad;
	p->t.data_received += x->a;
	if (o->off == p->rx_off)
		p->rx_off += x->a;
	logline("wrcompl conn=0 off=%llu bytes=%u expected_off=%llu data_bad=%zu %s",
		(unsigned long long)x->d, x->a, (unsigned long long)o->claimed, bad,
		x->d == o->claimed && !bad ? "ok" : "WRONG");
}

static void on_sink_cancel_ack(struct peer *p, const struct sdp_ext *x)
{
	struct offer *o = first_open_offer(p, true);
	bool ok = o && x->d == o->claimed;

	p->t.sinkcancelacks++;
	p->t.sinkcancelacks_bad += !ok;
	if (o)
		o->answered = true;
	logline("sinkcancelack conn=0 off=%llu expected_off=%llu %s", (unsigned long long)x->d,
		o ? (unsigned long long)o->claimed : 0ull, ok ? "ok" : "WRONG");
}

/* --------------------------------------------------------- receiving */

static void on_data(struct peer *p, const uint8_t *b, uint32_t n)
{
	size_t bad = lie_pattern_mismatches(b, n, p->rx_off);

	p->t.echo_bad += bad;
	p->t.data_received += n;
	logline("data conn=0 off=%llu bytes=%u bad=%zu", (unsigned long long)p->rx_off, n, bad);
	p->rx_off += n;
}

static void on_attach(struct peer *p)
{
	if (p->phase != PH_PROVING) {
		logline("attach_early conn=0 phase=%d (not believed)", (int)p->phase);
		return;
	}
	p->phase = PH_OPEN;
	p->attached = true;
	logline("attach conn=0");
}

static void dispatch(struct peer *p, const struct sdp_bsdh *h, const uint8_t *m,
		     const struct sdp_ext *x)
{
	switch ((enum sdp_mid)h->mid) {
	case SDP_MID_DATA:            on_data(p, m + SDP_BSDH_SIZE, h->len - SDP_BSDH_SIZE); break;
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_KEEPALIVE:       break;
	case SDP_MID_DISCONN:         p->peer_disconn = true; break;
	case SDP_MID_ABORT:           p->aborted = true; break;
	case SDP_MID_ATTACH:          on_attach(p); break;
	case SDP_MID_DETACH:          p->aborted = true; break; /* the server will not use it */
	case SDP_MID_SRC_AVAIL:       on_src_avail(p, x); break;
	case SDP_MID_SRC_CANCEL:      on_src_cancel(p, x); break;
	case SDP_MID_RDMA_RD_COMPL:   on_rd_compl(p, x); break;
	case SDP_MID_SINK_AVAIL:      on_sink_avail(p, x); break;
	case SDP_MID_SINK_CANCEL:     on_sink_cancel(p, x); break;
	case SDP_MID_RDMA_WR_COMPL:   on_wr_compl(p, x); break;
	case SDP_MID_SINK_CANCEL_ACK: on_sink_cancel_ack(p, x); break;
	case SDP_MID_SWITCH:
	case SDP_MID_COMMIT:          logline("unexpected conn=0 mid=%u", h->mid); break;
	}
}

/* Sequence, the server's buffers and acknowledgement, its STARVING flag. */
static void note_header(struct peer *p, const struct sdp_bsdh *h)
{
	if (h->mseq != p->rx_seq + 1)
		logline("seq_gap conn=0 mseq=%u expected=%u", h->mseq, p->rx_seq + 1);
	p->rx_seq = h->mseq;
	if (h->bufs)
		p->peer_bufs = h->bufs;
	if ((uint32_t)(h->mseq_ack - p->peer_ack) <= (uint32_t)(p->tx_seq - p->peer_ack))
		p->peer_ack = h->mseq_ack;
	else
		logline("ack_invalid conn=0 ack=%u tx_seq=%u", h->mseq_ack, p->tx_seq);
	if (h->flags & SDP_FLAG_STARVING)
		p->peer_starving = true;
}

static void repost(struct peer *p, uint32_t slot)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(p->rx_mem + (size_t)slot * p->buf_rx),
			       .length = p->buf_rx, .lkey = p->rx_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = WRID(WRK_RECV, 0, slot), .sg_list = &sge, .num_sge = 1 },
			   *bad;

	if (ibv_post_recv(p->qp, &wr, &bad) != 0)
		logline("repost_failed conn=0 slot=%u", slot);
}

/* One message of our stream (its base header first), on a channel of its
 * own or inside a link's STREAM message. */
static void on_stream_msg(struct peer *p, const uint8_t *m, uint32_t len)
{
	struct sdp_ext x = { 0 };
	struct sdp_bsdh h;
	enum sdp_wire_error err = sdp_bsdh_from_wire(m, len, p->rx_size, &h);

	if (err != SDP_WIRE_OK) {
		p->t.invalid++;
		logline("msg_invalid conn=0 len=%u first=0x%02x err=%s", len, len ? m[0] : 0,
			sdp_wire_error_text(err));
		return;
	}
	note_header(p, &h);
	if (h.mid != SDP_MID_DATA && h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE)
		sdp_ext_from_wire(m + SDP_BSDH_SIZE, &x);
	if (h.mid != SDP_MID_DATA && h.mid != SDP_MID_CREDIT_UPDATE)
		logline("msg conn=0 mid=%u %s len=%u mseq=%u ack=%u bufs=%u a=%u d=%llu", h.mid,
			mid_name(h.mid), h.len, h.mseq, h.mseq_ack, h.bufs, x.a,
			(unsigned long long)x.d);
	dispatch(p, &h, m, &x);
}

static void on_msg(struct peer *p, uint32_t slot, uint32_t len)
{
	on_stream_msg(p, p->rx_mem + (size_t)slot * p->buf_rx, len);
	repost(p, slot);
}

/* ------------------------------------------- the link's own messages */

static void stream_begin(struct peer *p);
static void x_begin(struct peer *p);

/* Order, the server's acknowledgement of our link messages, STARVING. */
static void link_note_header(struct peer *p, const struct sdp_lh *lh)
{
	if (lh->lseq != p->l_rx + 1)
		logline("link_seq_gap conn=0 lseq=%u expected=%u", lh->lseq, p->l_rx + 1);
	if ((uint32_t)(lh->lack - p->l_peer_lack) <= (uint32_t)(p->l_tx - p->l_peer_lack))
		p->l_peer_lack = lh->lack;
	else
		logline("link_ack_invalid conn=0 lack=%u lseq_sent=%u", lh->lack, p->l_tx);
	if (lh->flags & SDP_LINK_FLAG_STARVING)
		p->l_starving = true;
}

/* The server's OPEN_ACK or OPEN_NAK: for our stream, for the second one,
 * or for nothing we asked (logged). */
static void on_open_answer(struct peer *p, const struct sdp_lh *lh, const uint8_t *payload)
{
	bool ours = lh->stream == p->sidx && p->phase == PH_LINK_UP;
	bool second = !ours && p->x.phase == XS_OPENING && lh->stream == p->x.idx;
	int conn = second ? 1 : 0;
	char nx[2 * SDP_NONCE_SIZE + 1];
	struct sdp_open_ack a;

	if (!ours && !second) {
		p->t.unexpected++;
		logline("open_answer_unexpected conn=0 stream=%u kind=%s", lh->stream,
			lh->kind == SDP_LINK_OPEN_ACK ? "ack" : "nak");
		return;
	}
	if (lh->kind == SDP_LINK_OPEN_NAK ||
	    sdp_open_ack_from_wire(payload, sizeof(struct sdp_open_ack_wire), &a) != SDP_WIRE_OK) {
		if (lh->kind == SDP_LINK_OPEN_NAK) {
			p->t.open_naks++;
			logline("open_nak conn=%d stream=%u code=%u", conn, lh->stream, payload[0]);
		} else {
			p->t.invalid++;
			logline("open_ack_invalid conn=%d stream=%u", conn, lh->stream);
		}
		if (second)
			p->x.phase = XS_GONE;
		else
			p->phase = PH_FAILED;
		return;
	}
	p->t.open_acks++;
	hex(a.nonce, sizeof(a.nonce), nx);
	logline("open_ack conn=%d stream=%u bufs=%u size=%u nonce=%s", conn, lh->stream, a.buf_count,
		a.buf_size, nx);
	if (second) {
		memcpy(p->x.nonce, a.nonce, sizeof(p->x.nonce));
		p->x.peer_bufs = a.buf_count;
		if (p->o->second_pending) {
			p->x.phase = XS_PENDING;
			logline("pending conn=1 stream=%u (left pending: no COMMIT, no TCP connect)",
				p->x.idx);
			return;
		}
		x_begin(p);
		return;
	}
	memcpy(p->nonce, a.nonce, sizeof(p->nonce));
	p->peer_bufs = a.buf_count;
	p->data_slot = a.buf_size < p->l_peer_size - p->hdr ? a.buf_size : p->l_peer_size - p->hdr;
	if (p->data_slot > DATA_SLOT_MAX)
		p->data_slot = DATA_SLOT_MAX;
	stream_begin(p);
}

static void on_released(struct peer *p, uint16_t idx)
{
	bool second = p->x.phase != XS_NONE && idx == p->x.idx && idx != p->sidx;

	p->t.released++;
	logline("released conn=%d stream=%u", second ? 1 : 0, idx);
	if (second)
		p->x.phase = XS_GONE;
	else if (idx == p->sidx && p->phase >= PH_TCP_UP)
		p->released = true;
}

/* A message of the second stream (write-imm-other): the handshake, its
 * sinks (held, for the lie), credits. */
static void x_on_msg(struct peer *p, const uint8_t *m, uint32_t len)
{
	struct xstream *x = &p->x;
	struct sdp_ext e = { 0 };
	struct sdp_bsdh h;
	enum sdp_wire_error err = sdp_bsdh_from_wire(m, len, p->rx_size, &h);

	if (err != SDP_WIRE_OK) {
		p->t.invalid++;
		logline("msg_invalid conn=1 len=%u err=%s", len, sdp_wire_error_text(err));
		return;
	}
	if (h.mseq != x->rx_seq + 1)
		logline("seq_gap conn=1 mseq=%u expected=%u", h.mseq, x->rx_seq + 1);
	x->rx_seq = h.mseq;
	if (h.bufs)
		x->peer_bufs = h.bufs;
	if ((uint32_t)(h.mseq_ack - x->peer_ack) <= (uint32_t)(x->tx_seq - x->peer_ack))
		x->peer_ack = h.mseq_ack;
	if (h.flags & SDP_FLAG_STARVING)
		x->starving = true;
	if (h.mid != SDP_MID_DATA && h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE)
		sdp_ext_from_wire(m + SDP_BSDH_SIZE, &e);
	if (h.mid != SDP_MID_CREDIT_UPDATE)
		logline("msg conn=1 mid=%u %s len=%u mseq=%u ack=%u a=%u d=%llu", h.mid, mid_name(h.mid),
			h.len, h.mseq, h.mseq_ack, e.a, (unsigned long long)e.d);
	switch ((enum sdp_mid)h.mid) {
	case SDP_MID_ATTACH:
		if (x->phase == XS_PROVING) {
			x->phase = XS_OPEN;
			x->attached = true;
			logline("attach conn=1");
		} else {
			logline("attach_early conn=1 phase=%d (not believed)", (int)x->phase);
		}
		break;
	case SDP_MID_SINK_AVAIL:
		x->sink = (struct peer_sink){ .valid = true, .off = e.d, .addr = e.c, .len = e.a,
					      .rkey = e.b };
		logline("sinkavail conn=1 off=%llu len=%u rkey=0x%x addr=0x%llx (held)",
			(unsigned long long)e.d, e.a, e.b, (unsigned long long)e.c);
		break;
	case SDP_MID_SINK_CANCEL:
		if (x->sink.valid && x->sink.off == e.d) {
			x->sink.valid = false;
			x_send_ctrl(p, SDP_MID_SINK_CANCEL_ACK, &(struct sdp_ext){ .d = e.d });
			logline("sinkcancelack_sent conn=1 off=%llu", (unsigned long long)e.d);
		}
		break;
	case SDP_MID_DETACH:
	case SDP_MID_ABORT:
		x->phase = XS_GONE;
		break;
	default:
		break;
	}
}

/* A SEND on the link: its header checked and taken in, then its kind. */
static void link_on_recv(struct peer *p, uint32_t slot, uint32_t len)
{
	const uint8_t *m = p->rx_mem + (size_t)slot * p->buf_rx;
	struct sdp_lh lh;
	enum sdp_wire_error err = sdp_lh_from_wire(m, len, p->buf_rx, &lh);

	if (err != SDP_WIRE_OK) {
		p->t.invalid++;
		logline("link_msg_invalid conn=0 len=%u first=0x%02x err=%s", len, len ? m[0] : 0,
			sdp_wire_error_text(err));
		repost(p, slot);
		p->l_rx++;
		return;
	}
	link_note_header(p, &lh);
	switch ((enum sdp_link_kind)lh.kind) {
	case SDP_LINK_STREAM:
		if (lh.stream == p->sidx && p->phase >= PH_TCP_UP) {
			on_stream_msg(p, m + p->hdr, lh.len - p->hdr);
		} else if (lh.stream == p->x.idx && p->x.phase >= XS_PENDING && p->x.phase != XS_GONE) {
			x_on_msg(p, m + p->hdr, lh.len - p->hdr);
		} else {
			p->t.other_stream++;
			logline("stream_msg_other conn=0 stream=%u len=%u mid=%u", lh.stream, lh.len,
				m[p->hdr]);
		}
		break;
	case SDP_LINK_CREDIT:
		break;
	case SDP_LINK_OPEN_ACK:
	case SDP_LINK_OPEN_NAK:
		on_open_answer(p, &lh, m + p->hdr);
		break;
	case SDP_LINK_RELEASED:
		on_released(p, lh.stream);
		break;
	case SDP_LINK_CLIMB_CHAL:
	case SDP_LINK_CLIMB_ACK:
	case SDP_LINK_CLIMB_NAK:
		logline("climb_msg conn=0 kind=%u stream=%u", lh.kind, lh.stream);
		break;
	case SDP_LINK_CLIMB_REQ:
	case SDP_LINK_CLIMB_PROVE:
	case SDP_LINK_OPEN:
	case SDP_LINK_OPEN_COMMIT:
		p->t.unexpected++;
		logline("unexpected conn=0 link_kind=%u stream=%u", lh.kind, lh.stream);
		break;
	}
	repost(p, slot);
	p->l_rx = lh.lseq; /* taken in, its buffer posted again */
}

/* ------------------------------------------------------ the probe */

static void post_probe(struct peer *p)
{
	struct probe *pr = &p->probe;
	struct ibv_sge sge = { .addr = (uintptr_t)p->read_mem, .length = pr->len,
			       .lkey = p->read_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WRID(WRK_PROBE, 0, 0), .sg_list = &sge, .num_sge = 1,
				  .opcode = pr->write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int rc;

	for (uint32_t i = 0; i < pr->len; i++)
		p->read_mem[i] = pr->write ? (uint8_t)"ROGUEWR!"[i % 8] : 0;
	wr.wr.rdma.remote_addr = pr->addr;
	wr.wr.rdma.rkey = pr->rkey;
	pr->posted = true;
	rc = ibv_post_send(p->qp, &wr, &bad);
	if (rc) {
		logline("probe conn=0 op=%s status=post_failed (%s)", pr->write ? "write" : "read",
			strerror(rc));
		p->t.probe = "post_failed";
		pr->done = true;
		pr->done_at = mono_ms();
		return;
	}
	p->sq_out++;
	logline("probe_posted conn=0 op=%s rkey=0x%x addr=0x%llx len=%u", pr->write ? "write" : "read",
		pr->rkey, (unsigned long long)pr->addr, pr->len);
}

static void probe_completed(struct peer *p, enum ibv_wc_status st, uint32_t byte_len)
{
	struct probe *pr = &p->probe;

	pr->done = true;
	pr->done_at = mono_ms();
	p->t.probe = wc_name(st);
	logline("probe conn=0 op=%s status=%s (%d) bytes=%u", pr->write ? "write" : "read",
		wc_name(st), (int)st, st == IBV_WC_SUCCESS ? pr->len : byte_len);
	if (st == IBV_WC_SUCCESS && !pr->write)
		logline("probe_data conn=0 bytes=%u stream_bytes=%zu preview_hex=%02x%02x%02x%02x",
			pr->len, pr->len - lie_pattern_mismatches(p->read_mem, pr->len, pr->off),
			p->read_mem[0], p->read_mem[1], p->read_mem[2], p->read_mem[3]);
}

/* Our ABORT is in the server's QP (--disconnect-at posted: on its way;
 * first: not sent yet): now the rdma_cm disconnect, which leaves our own QP
 * as it is (rdma_cm does not know it). */
static void disconnect_after_abort(struct peer *p)
{
	if (p->disconnect_called)
		return;
	p->disconnect_called = true;
	if (rdma_disconnect(p->id) != 0)
		logline("disconnect_failed conn=0: %s", strerror(errno));
	else
		logline("disconnect_sent conn=0 (our QP stays in RTS)");
	p->probe.at = mono_ms() + p->o->after_ms;
}

/* ------------------------------------------------------ completions */

static void on_send_wc(struct peer *p, const struct ibv_wc *wc)
{
	enum wr_kind kind = (enum wr_kind)(wc->wr_id >> 32);
	uint8_t mid = (uint8_t)(wc->wr_id >> 16);
	uint32_t idx = (uint32_t)(wc->wr_id & 0xffff);

	p->sq_out--;
	if (kind == WRK_CTRL)
		p->ctrl_busy &= ~(1u << idx);
	else if (kind == WRK_DATA)
		p->data_busy &= ~(1u << idx);
	if (kind == WRK_READ) {
		read_completed(p, wc->status);
		return;
	}
	if (kind == WRK_PROBE) {
		probe_completed(p, wc->status, wc->byte_len);
		return;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		if (!p->qp_dead)
			logline("wc_error conn=0 mid=%u status=%s (%d)", mid, wc_name(wc->status),
				(int)wc->status);
		p->qp_dead = true;
	}
	if (mid == SDP_MID_ABORT && p->self_aborted)
		disconnect_after_abort(p); /* the probe shows what is left, either way */
}

/* A version-3 sender fills our sink with one RDMA WRITE with immediate,
 * which takes one of our receive buffers and a sequence number (the
 * immediate; on a link SDP_LINK_IMM(stream, mseq), and an lseq): the count
 * is our completion's. */
static void on_write_imm(struct peer *p, uint32_t bytes, uint32_t imm)
{
	uint32_t mseq = imm;

	logline("write_imm conn=0 bytes=%u imm=%u", bytes, imm);
	if (p->hdr) {
		p->l_rx++;
		if (SDP_LINK_IMM_STREAM(imm) != p->sidx || p->phase < PH_TCP_UP) {
			p->t.other_stream++;
			logline("write_imm_other conn=0 stream=%u bytes=%u", SDP_LINK_IMM_STREAM(imm), bytes);
			return;
		}
		mseq = p->rx_seq + 1;
		if (SDP_LINK_IMM_MSEQ16(imm) != (uint16_t)mseq)
			logline("seq_gap conn=0 mseq16=%u expected=%u", SDP_LINK_IMM_MSEQ16(imm),
				(uint16_t)mseq);
	} else if (mseq != p->rx_seq + 1) {
		logline("seq_gap conn=0 mseq=%u expected=%u", mseq, p->rx_seq + 1);
	}
	p->rx_seq = mseq;
	on_wr_compl(p, &(struct sdp_ext){ .a = bytes, .d = p->rx_off });
}

static void on_wc(struct peer *p, const struct ibv_wc *wc)
{
	if ((enum wr_kind)(wc->wr_id >> 32) != WRK_RECV) {
		on_send_wc(p, wc);
		return;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		if (!p->qp_dead)
			logline("wc_error conn=0 recv status=%s (%d)", wc_name(wc->status), (int)wc->status);
		p->qp_dead = true;
		return;
	}
	if ((uint32_t)wc->wr_id >= p->rx_count) {
		p->t.invalid++;
		logline("msg_invalid conn=0 slot=%u len=%u", (uint32_t)wc->wr_id, wc->byte_len);
		return;
	}
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		repost(p, (uint32_t)wc->wr_id);
		on_write_imm(p, wc->byte_len, ntohl(wc->imm_data));
		return;
	}
	if (wc->byte_len > p->buf_rx) {
		p->t.invalid++;
		logline("msg_invalid conn=0 len=%u", wc->byte_len);
		repost(p, (uint32_t)wc->wr_id);
		return;
	}
	if (p->hdr)
		link_on_recv(p, (uint32_t)wc->wr_id, wc->byte_len);
	else
		on_msg(p, (uint32_t)wc->wr_id, wc->byte_len);
}

static void drain_cq(struct peer *p)
{
	struct ibv_wc wc[32];
	int n;

	while (p->cq && (n = ibv_poll_cq(p->cq, 32, wc)) > 0)
		for (int i = 0; i < n; i++)
			on_wc(p, &wc[i]);
}

static void on_cq_event(struct peer *p)
{
	struct ibv_cq *cq;
	void *ctx;

	while (ibv_get_cq_event(p->cch, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		ibv_req_notify_cq(cq, 0);
	}
	drain_cq(p);
}

/* ------------------------------------------------------ setup */

static void *alloc_mr(struct peer *p, size_t len, int access, struct ibv_mr **mr)
{
	void *mem;

	if (posix_memalign(&mem, 4096, len) != 0)
		return NULL;
	memset(mem, 0, len);
	*mr = ibv_reg_mr(p->pd, mem, len, access);
	if (!*mr) {
		free(mem);
		return NULL;
	}
	return mem;
}

/* Moves our QP to st with the attributes rdma_cm computed for the id; a
 * responder may READ from and WRITE to the windows we announce.  In RTS a
 * request nobody answers (a peer QP in the error state drops it) is sent
 * again after the ack timeout, 6 times, and then fails: a probe always ends. */
static int qp_to(struct peer *p, enum ibv_qp_state st)
{
	struct ibv_qp_attr attr = { .qp_state = st };
	int mask = 0;

	if (rdma_init_qp_attr(p->id, &attr, &mask) != 0)
		return -1;
	if (mask & IBV_QP_ACCESS_FLAGS)
		attr.qp_access_flags |= IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					IBV_ACCESS_REMOTE_WRITE;
	if (st == IBV_QPS_RTS) {
		if (p->o->ack_timeout || !(mask & IBV_QP_TIMEOUT) || attr.timeout == 0)
			attr.timeout = (uint8_t)(p->o->ack_timeout ? p->o->ack_timeout : 14);
		attr.retry_cnt = 6; /* rxe retries forever at 7 */
		attr.rnr_retry = 7;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
		logline("qp_rts conn=0 timeout=%u retry=%u max_rd_atomic=%u", attr.timeout,
			attr.retry_cnt, attr.max_rd_atomic);
	}
	errno = ibv_modify_qp(p->qp, &attr, mask);
	return errno ? -1 : 0;
}

static int create_qp(struct peer *p)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = p->rx_count,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	p->qp = ibv_create_qp(p->pd, &attr);
	return p->qp ? qp_to(p, IBV_QPS_INIT) : -1;
}

static int make_resources(struct peer *p)
{
	int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

	p->pd = ibv_alloc_pd(p->id->verbs);
	p->cch = p->pd ? ibv_create_comp_channel(p->id->verbs) : NULL;
	if (!p->cch)
		return -1;
	fcntl(p->cch->fd, F_SETFL, fcntl(p->cch->fd, F_GETFL) | O_NONBLOCK);
	p->cq = ibv_create_cq(p->id->verbs, (int)(p->rx_count + SQ_DEPTH + 8), p, p->cch, 0);
	if (!p->cq || ibv_req_notify_cq(p->cq, 0) != 0 || create_qp(p) != 0)
		return -1;
	p->rx_mem = alloc_mr(p, (size_t)p->rx_count * p->buf_rx, IBV_ACCESS_LOCAL_WRITE, &p->rx_mr);
	p->ctrl_mem = alloc_mr(p, CTRL_SLOTS * CTRL_SIZE, 0, &p->ctrl_mr);
	p->read_mem = alloc_mr(p, READ_CHUNK, IBV_ACCESS_LOCAL_WRITE, &p->read_mr);
	p->win_mem = alloc_mr(p, p->win_len, remote, &p->win_mr);
	if (!p->rx_mem || !p->ctrl_mem || !p->read_mem || !p->win_mem)
		return -1;
	for (uint32_t i = 0; i < p->rx_count; i++)
		repost(p, i);
	return 0;
}

/* A TCP socket bound to the address rdma_cm chose (the kernel picks the
 * port), or -1. */
static int bind_tcp(struct peer *p, int conn)
{
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	char a[INET6_ADDRSTRLEN];
	int fd;

	memcpy(&local, rdma_get_local_addr(p->id), sizeof(local));
	if (local.ss_family == AF_INET)
		((struct sockaddr_in *)&local)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&local)->sin6_port = 0;
	fd = socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&local,
		 local.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&local, &len) != 0) {
		close(fd);
		return -1;
	}
	addr_text((struct sockaddr *)&local, a, sizeof(a));
	logline("tcp_bound conn=%d addr=%s sport=%u", conn, a, addr_port((struct sockaddr *)&local));
	return fd;
}

/* Our TCP socket, and the second stream's (write-imm-other, open-dup-index). */
static int make_tcp(struct peer *p)
{
	p->tcp = bind_tcp(p, 0);
	if (p->tcp < 0)
		return -1;
	if (p->o->lie == LIE_WRITE_IMM_OTHER || p->o->lie == LIE_OPEN_DUP_INDEX ||
	    p->o->second_pending) {
		p->x.tcp = bind_tcp(p, 1);
		if (p->x.tcp < 0)
			return -1;
		p->x.phase = XS_BOUND;
	}
	return 0;
}

/* The Hello names our TCP 4-tuple; a link's names none (source port 0) and
 * offers the link's buffers. */
static void send_hello(struct peer *p)
{
	struct sockaddr_storage local;
	socklen_t len = sizeof(local);
	struct sdp_hello h = { .version = SDP_WIRE_VERSION, .buf_count = (uint16_t)p->rx_count,
			       .buf_size = p->buf_rx };
	struct sdp_hello_wire w;
	struct rdma_conn_param param = { .private_data = &w, .private_data_len = sizeof(w),
					 .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };

	getsockname(p->tcp, (struct sockaddr *)&local, &len);
	addr_to_wire((struct sockaddr *)&local, h.tuple.src_addr);
	h.tuple.src_port = p->hdr ? 0 : addr_port((struct sockaddr *)&local);
	h.flags = p->hdr ? SDP_HELLO_FLAG_LINK : 0;
	if (p->o->lie == LIE_FALSE_SOLICITED) /* its sends never carry IBV_SEND_SOLICITED */
		h.flags |= SDP_HELLO_FLAG_SOLICITED;
	addr_to_wire((struct sockaddr *)&p->to, h.tuple.dst_addr);
	h.tuple.dst_port = addr_port((struct sockaddr *)&p->to);
	sdp_hello_to_wire(&h, &w);
	w.version = p->o->wire_version;
	param.qp_num = p->qp->qp_num;
	if (rdma_connect(p->id, &param) != 0) {
		fail(p, "rdma_connect");
		return;
	}
	p->phase = PH_CONNECTING;
	logline("hello_sent conn=0 sport=%u bufs=%u size=%u qpn=%u version=%u link=%d",
		h.tuple.src_port, h.buf_count, h.buf_size, p->qp->qp_num, w.version, p->hdr ? 1 : 0);
}

static bool parse_hello_ack(struct peer *p, const struct rdma_cm_event *ev)
{
	const void *pd = ev->param.conn.private_data;
	size_t len = ev->param.conn.private_data_len;
	struct sdp_hello_ack_wire raw;
	struct sdp_hello_ack ack;
	enum sdp_wire_error err = SDP_WIRE_SHORT;
	char nx[2 * SDP_NONCE_SIZE + 1];
	/* version 1: magic, version, flags, buf_count, buf_size; no nonce */
	size_t need = p->o->wire_version == 1 ? 12 : sizeof(raw);

	if (pd && len >= need) {
		memset(&raw, 0, sizeof(raw));
		memcpy(&raw, pd, need);
		if (raw.version == p->o->wire_version)
			raw.version = SDP_WIRE_VERSION; /* the same layout */
		err = sdp_hello_ack_from_wire(&raw, sizeof(raw), &ack);
	}
	if (err == SDP_WIRE_OK && !(ack.flags & SDP_HELLO_FLAG_LINK) != !p->hdr)
		err = SDP_WIRE_BAD_FLAGS; /* a link's answer to a channel's Hello, or back */
	if (err != SDP_WIRE_OK) {
		logline("helloack_invalid conn=0 err=\"%s\" len=%zu", sdp_wire_error_text(err), len);
		return false;
	}
	if (p->hdr) {
		p->l_peer_bufs = ack.buf_count;
		p->l_peer_size = ack.buf_size;
		logline("established conn=0 link=1 bufs=%u size=%u", ack.buf_count, ack.buf_size);
		return true;
	}
	memcpy(p->nonce, ack.nonce, sizeof(p->nonce));
	p->peer_bufs = ack.buf_count;
	p->data_slot = ack.buf_size < DATA_SLOT_MAX ? ack.buf_size : DATA_SLOT_MAX;
	hex(ack.nonce, sizeof(ack.nonce), nx);
	logline("established conn=0 bufs=%u size=%u nonce=%s", ack.buf_count, ack.buf_size, nx);
	return true;
}

static int tcp_connect(struct peer *p, int fd)
{
	struct timeval tv = { .tv_sec = TCP_CONNECT_S };
	socklen_t len = p->to.ss_family == AF_INET ? sizeof(struct sockaddr_in)
						   : sizeof(struct sockaddr_in6);

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&p->to, len) != 0)
		return -1;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return 0;
}

static void send_commit(struct peer *p)
{
	uint8_t nonce[SDP_NONCE_SIZE];
	struct sdp_ext x = { 0 };

	random_bytes(nonce, sizeof(nonce));
	sdp_nonce_to_ext(nonce, &x);
	if (send_ctrl(p, SDP_MID_COMMIT, &x)) {
		flush_chain(p); /* before our SYN, as an sdpshim client does */
		logline("commit_sent conn=0");
	}
	else
		logline("commit_failed conn=0");
}

/* Our send slots, once the server's buffer size is known. */
static bool alloc_data(struct peer *p)
{
	p->data_stride = p->hdr + p->data_slot;
	p->data_mem = alloc_mr(p, (size_t)DATA_SLOTS * p->data_stride, 0, &p->data_mr);
	return p->data_mem != NULL;
}

/* The server took our stream (HelloAck, or OPEN_ACK on a link): COMMIT,
 * and only then the TCP connect (as an sdpshim client does). */
static void stream_begin(struct peer *p)
{
	if (p->hdr && !alloc_data(p)) {
		fail(p, "send buffers");
		return;
	}
	p->phase = PH_TCP_UP;
	send_commit(p);
	if (tcp_connect(p, p->tcp) != 0) {
		fail(p, "TCP connect");
		return;
	}
	p->tcp_watch = true;
	logline("tcp_connected conn=0");
	if (p->o->wire_version == 1)
		p->phase = PH_PROVING; /* no binding handshake: ATTACH follows accept() */
}

/* The second stream's OPEN_ACK: its COMMIT and TCP connect. */
static void x_begin(struct peer *p)
{
	struct xstream *x = &p->x;
	uint8_t nonce[SDP_NONCE_SIZE];
	struct sdp_ext e = { 0 };

	random_bytes(nonce, sizeof(nonce));
	sdp_nonce_to_ext(nonce, &e);
	x->phase = XS_TCP_UP;
	if (x_send_ctrl(p, SDP_MID_COMMIT, &e)) {
		flush_chain(p);
		logline("commit_sent conn=1");
	} else {
		logline("commit_failed conn=1");
	}
	if (tcp_connect(p, x->tcp) != 0) {
		logline("error conn=1 TCP connect: %s", strerror(errno));
		x->phase = XS_GONE;
		return;
	}
	x->tcp_watch = true;
	logline("tcp_connected conn=1");
}

/* The server accepted: our QP to RTR and RTS, the RTU (rdma_establish);
 * then COMMIT and the TCP connect, or on a link the OPEN(s) first. */
static void on_connect_response(struct peer *p, const struct rdma_cm_event *ev)
{
	if (!parse_hello_ack(p, ev)) {
		p->phase = PH_FAILED;
		return;
	}
	if ((!p->hdr && !alloc_data(p)) || qp_to(p, IBV_QPS_INIT) != 0 ||
	    qp_to(p, IBV_QPS_RTR) != 0 || qp_to(p, IBV_QPS_RTS) != 0) {
		fail(p, "QP to RTS");
		return;
	}
	if (rdma_establish(p->id) != 0) {
		fail(p, "rdma_establish");
		return;
	}
	if (!p->hdr) {
		stream_begin(p);
		return;
	}
	p->phase = PH_LINK_UP;
	if (!send_open(p, p->sidx, p->tcp)) {
		p->phase = PH_FAILED;
		return;
	}
	if (p->o->lie == LIE_WRITE_IMM_OTHER || p->o->second_pending) {
		p->x.phase = XS_OPENING;
		if (!send_open(p, p->x.idx, p->x.tcp))
			p->x.phase = XS_GONE;
	}
	flush_chain(p);
}

/* ------------------------------------------------------ the TCP side */

/* The PROOF on TCP fd: the nonce of the stream's HelloAck or OPEN_ACK. */
static bool write_proof(struct peer *p, int fd, const uint8_t *nonce, int conn)
{
	struct sdp_bind b = { .kind = SDP_BIND_PROOF };
	struct sdp_bind_wire w;
	char nx[2 * SDP_NONCE_SIZE + 1];

	memcpy(b.nonce, nonce, sizeof(b.nonce));
	sdp_bind_to_wire(&b, &w);
	w.version = p->o->wire_version;
	if (send(fd, &w, sizeof(w), MSG_NOSIGNAL) != (ssize_t)sizeof(w)) {
		logline("error conn=%d writing the PROOF: %s", conn, strerror(errno));
		return false;
	}
	hex(nonce, SDP_NONCE_SIZE, nx);
	logline("proof_sent conn=%d nonce=%s", conn, nx);
	return true;
}

static void send_proof(struct peer *p)
{
	if (!write_proof(p, p->tcp, p->nonce, 0)) {
		p->phase = PH_FAILED;
		return;
	}
	p->phase = PH_PROVING;
}

static void take_signal(struct peer *p)
{
	uint8_t b;

	if (recv(p->tcp, &b, 1, MSG_OOB | MSG_DONTWAIT) != 1)
		return;
	logline("signal conn=0 byte=0x%02x", b);
	if (b == SDP_BIND_SIGNAL && p->phase == PH_TCP_UP)
		send_proof(p);
}

static void x_take_signal(struct peer *p)
{
	uint8_t b;

	if (recv(p->x.tcp, &b, 1, MSG_OOB | MSG_DONTWAIT) != 1)
		return;
	logline("signal conn=1 byte=0x%02x", b);
	if (b == SDP_BIND_SIGNAL && p->x.phase == XS_TCP_UP)
		p->x.phase = write_proof(p, p->x.tcp, p->x.nonce, 1) ? XS_PROVING : XS_GONE;
}

/* In-band bytes: a NAK, or a server's SWITCH record; logged, never used. */
static void read_tcp(struct peer *p, int conn)
{
	int fd = conn ? p->x.tcp : p->tcp;
	uint8_t buf[4096];
	char pv[PREVIEW_BYTES * 4 + 1];
	struct sdp_bind nak;
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		logline("tcp_%s conn=%d%s%s", n == 0 ? "eof" : "error", conn, n ? " " : "",
			n ? strerror(errno) : "");
		if (conn)
			p->x.tcp_watch = false;
		else
			p->tcp_watch = false;
		return;
	}
	if ((size_t)n >= SDP_BIND_SIZE && buf[4] == p->o->wire_version)
		buf[4] = SDP_WIRE_VERSION; /* a bind record's version byte */
	if ((size_t)n >= SDP_BIND_SIZE &&
	    sdp_bind_from_wire(buf, SDP_BIND_SIZE, SDP_BIND_KIND_BIT(SDP_BIND_NAK), 1000, &nak) ==
		    SDP_WIRE_OK) {
		logline("nak conn=%d reason=%u", conn, nak.reason);
		if (conn)
			p->x.phase = XS_GONE;
		else
			p->aborted = true;
		return;
	}
	preview(buf, (size_t)n, pv);
	logline("tcp_bytes conn=%d bytes=%zd preview=%s", conn, n, pv);
	if (!conn)
		p->t.tcp_bytes += (unsigned long long)n;
}

/* ------------------------------------------------------ rdma_cm */

static void on_cm_error(struct peer *p, const struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		logline("rejected conn=0 code=%u status=%d",
			sdp_reject_from_wire(ev->param.conn.private_data, ev->param.conn.private_data_len),
			ev->status);
	else
		logline("error conn=0 event=%s status=%d", rdma_event_str(ev->event), ev->status);
	if (p->phase < PH_OPEN)
		p->phase = PH_FAILED;
	else
		p->disconnected = true;
}

static void on_cm(struct peer *p, struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (make_tcp(p) != 0 || rdma_resolve_route(p->id, RESOLVE_MS) != 0)
			fail(p, "TCP bind or route");
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (make_resources(p) != 0)
			fail(p, "channel resources");
		else
			send_hello(p);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		on_connect_response(p, ev);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		break; /* not for an active side that owns its QP */
	case RDMA_CM_EVENT_DISCONNECTED:
		drain_cq(p); /* what came before it (a DisConn, an ABORT) happened first */
		logline("disconnected conn=0");
		p->disconnected = true;
		if (!p->disconnect_called && rdma_disconnect(p->id) == 0)
			p->disconnect_called = true;
		break;
	default:
		on_cm_error(p, ev);
		break;
	}
}

static void pump_cm(struct peer *p)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(p->ch, &ev) == 0) {
		on_cm(p, ev);
		rdma_ack_cm_event(ev);
	}
}

/* ------------------------------------------------------ the script */

static void add_step(struct peer *p, enum step_kind kind, uint64_t n, long delta)
{
	if (p->nsteps < MAX_STEPS)
		p->steps[p->nsteps++] = (struct step){ kind, n, delta };
	if (kind == ST_SRC || kind == ST_SINK)
		p->win_len += (uint32_t)n;
}

static long long default_bytes(enum peer_lie lie)
{
	switch (lie) {
	case LIE_NONE:
	case LIE_NEVER_ANSWER_CANCEL: return 1 << 20;
	case LIE_FALSE_SOLICITED:
	case LIE_OPEN_COMMIT_UNOFFERED: return 65536;
	case LIE_FALSE_WRCOMPL:       return 4096;
	case LIE_WRONG_OFFSET:
	case LIE_STACKED_SRCAVAIL:    return 65536;
	case LIE_ABORT_DISCONNECT:
	case LIE_WRITE_IMM_OTHER:     return 0;
	case LIE_OPEN_DUP_INDEX:
	case LIE_OPEN_INDEX_OOB:
	case LIE_BAD_LSEQ:
	case LIE_BAD_LACK:
	case LIE_STREAM_UNOPENED:
	case LIE_RELEASED_IN_USE:     return 65536;
	case LIE_COUNT:               break;
	}
	return 0;
}

static void build_script(struct peer *p, const struct peer_opts *o)
{
	long long bytes = o->bytes >= 0 ? o->bytes : default_bytes(o->lie);

	if (bytes > 0)
		add_step(p, ST_DATA, (uint64_t)bytes, 0);
	switch (o->lie) {
	case LIE_NONE:
	case LIE_FALSE_SOLICITED: /* the lie was the Hello: the echo must still come back */
		add_step(p, ST_WAIT_ECHO, 0, 0);
		break;
	case LIE_NEVER_ANSWER_CANCEL:
	case LIE_ABORT_DISCONNECT:
		add_step(p, ST_HOLD, 0, 0); /* the lie reacts to the server's offers */
		break;
	case LIE_FALSE_WRCOMPL:
		add_step(p, ST_WAIT_LIE, 0, 0);
		add_step(p, ST_PAUSE, o->after_ms, 0);
		break;
	case LIE_WRONG_OFFSET:
		add_step(p, ST_WAIT_ECHO, 0, 0); /* so the sink's true offset is known */
		add_step(p, o->offer == OFFER_SRC ? ST_SRC : ST_SINK, o->src_len, o->offset_delta);
		add_step(p, ST_WAIT_ANSWERS, 0, 0);
		add_step(p, ST_WAIT_ECHO, 0, 0);
		break;
	case LIE_STACKED_SRCAVAIL:
		for (unsigned i = 0; i < o->stack; i++)
			add_step(p, ST_SRC, o->src_len, 0); /* back to back behind the DATA */
		add_step(p, ST_WAIT_ANSWERS, 0, 0);
		add_step(p, ST_WAIT_ECHO, 0, 0);
		break;
	case LIE_OPEN_INDEX_OOB:
	case LIE_OPEN_COMMIT_UNOFFERED:
		add_step(p, ST_WAIT_ECHO, 0, 0); /* the lie was the OPEN */
		break;
	case LIE_OPEN_DUP_INDEX:
	case LIE_STREAM_UNOPENED:
		/* The lie between two echoed runs: the second must come back too. */
		add_step(p, ST_WAIT_ECHO, 0, 0);
		add_step(p, ST_LIE, 0, 0);
		add_step(p, ST_PAUSE, o->after_ms, 0);
		if (bytes > 0)
			add_step(p, ST_DATA, (uint64_t)bytes, 0);
		add_step(p, ST_WAIT_ECHO, 0, 0);
		break;
	case LIE_BAD_LSEQ:
	case LIE_BAD_LACK:
		add_step(p, ST_WAIT_ECHO, 0, 0);
		add_step(p, ST_LIE, 0, 0);
		add_step(p, ST_PAUSE, o->after_ms, 0);
		add_step(p, ST_END, 0, 0);
		break;
	case LIE_RELEASED_IN_USE:
		add_step(p, ST_WAIT_ECHO, 0, 0);
		add_step(p, ST_LIE, 0, 0);
		if (bytes > 0)
			add_step(p, ST_DATA, (uint64_t)bytes, 0); /* on the index we released */
		add_step(p, ST_PAUSE, o->after_ms, 0);
		add_step(p, ST_END, 0, 0);
		break;
	case LIE_WRITE_IMM_OTHER:
		add_step(p, ST_WAIT_LIE, 0, 0); /* a sink on each stream, then the WRITE */
		add_step(p, ST_PAUSE, o->after_ms, 0);
		p->win_len = 2u << 20;          /* the WRITE's source */
		break;
	case LIE_COUNT:
		break;
	}
	add_step(p, ST_DISCONN, 0, 0);
	if (p->win_len < 4096)
		p->win_len = 4096;
}

/* ------------------------------------------------------ the loop */

static const char *end_reason(struct peer *p)
{
	double now = mono_ms();

	if (stop)
		return "signal";
	if (now >= p->deadline)
		return "time_bound";
	if (p->phase == PH_FAILED)
		return "failed";
	if (p->o->lie == LIE_ABORT_DISCONNECT)
		return p->probe.done && now >= p->probe.done_at + END_GRACE_MS ? "probed" : NULL;
	if (p->script_ended)
		return "lie_told";
	if (p->aborted)
		return "peer_abort";
	if (p->disconn_sent && p->peer_disconn)
		return "closed";
	if (p->released)
		return "released";
	if (p->disconnected)
		return "disconnected";
	if (p->qp_dead)
		return "qp_error";
	return NULL;
}

static void timers(struct peer *p)
{
	if (p->probe.armed && !p->probe.posted && p->probe.at > 0 && mono_ms() >= p->probe.at)
		post_probe(p);
}

static void loop(struct peer *p)
{
	const char *why;

	while (!(why = end_reason(p))) {
		struct pollfd pfd[4] = { { .fd = p->ch->fd, .events = POLLIN },
					 { .fd = p->cch ? p->cch->fd : -1, .events = POLLIN },
					 { .fd = p->tcp_watch ? p->tcp : -1, .events = POLLIN | POLLPRI },
					 { .fd = p->x.tcp_watch ? p->x.tcp : -1, .events = POLLIN | POLLPRI } };

		if (poll(pfd, 4, 20) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (pfd[0].revents)
			pump_cm(p);
		if (pfd[1].revents)
			on_cq_event(p);
		drain_cq(p);
		if (pfd[2].revents & POLLPRI)
			take_signal(p);
		if (pfd[2].revents & (POLLIN | POLLHUP | POLLERR))
			read_tcp(p, 0);
		if (pfd[3].revents & POLLPRI)
			x_take_signal(p);
		if (pfd[3].revents & (POLLIN | POLLHUP | POLLERR))
			read_tcp(p, 1);
		timers(p);
		pump(p);
	}
	logline("end conn=0 reason=%s phase=%d", why, (int)p->phase);
}

static void summary(const struct peer *p)
{
	const struct tally *t = &p->t;

	logline("lie=%s attach=%d data_sent=%llu data_received=%llu echo_bad=%llu srcavails=%u "
		"srcavails_ignored=%u cancels=%u cancels_ignored=%u sinkavails=%u offers_sent=%u "
		"rdcompl=%u rdcompl_bad=%u wrcompl=%u wrcompl_bad=%u wrcompl_lies=%u sinkcancelacks=%u "
		"sinkcancelacks_bad=%u aborted=%d peer_disconn=%d disconnected=%d invalid=%u probe=%s "
		"link=%d stream=%u open_acks=%u open_naks=%u released=%u other_stream=%u unexpected=%u "
		"write_imm_lies=%u tcp_bytes=%llu lseq_sent=%u lseq_received=%u second_attach=%d "
		"second_pending=%d",
		peer_lie_name(p->o->lie), p->attached, t->data_sent, t->data_received, t->echo_bad,
		t->srcavails, t->srcavails_ignored, t->cancels, t->cancels_ignored, t->sinkavails,
		t->offers_sent, t->rdcompl, t->rdcompl_bad, t->wrcompl, t->wrcompl_bad, t->wrcompl_lies,
		t->sinkcancelacks, t->sinkcancelacks_bad, p->aborted, p->peer_disconn, p->disconnected,
		t->invalid, t->probe ? t->probe : "none", p->hdr ? 1 : 0, p->sidx, t->open_acks,
		t->open_naks, t->released, t->other_stream, t->unexpected, t->write_imm_lies,
		t->tcp_bytes, p->l_tx, p->l_rx, p->x.attached, p->x.phase == XS_PENDING);
}

static void teardown(struct peer *p)
{
	struct ibv_mr *mrs[] = { p->rx_mr, p->ctrl_mr, p->data_mr, p->read_mr, p->win_mr };
	void *mems[] = { p->rx_mem, p->ctrl_mem, p->data_mem, p->read_mem, p->win_mem };

	if (p->phase >= PH_LINK_UP && !p->disconnect_called)
		rdma_disconnect(p->id);
	if (p->qp)
		ibv_destroy_qp(p->qp);
	for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++) {
		if (mrs[i])
			ibv_dereg_mr(mrs[i]);
		free(mems[i]);
	}
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->cch)
		ibv_destroy_comp_channel(p->cch);
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	rdma_destroy_id(p->id);
	rdma_destroy_event_channel(p->ch);
	if (p->tcp >= 0)
		close(p->tcp);
	if (p->x.tcp >= 0)
		close(p->x.tcp);
}

static void start(struct peer *p)
{
	uint8_t exp = (uint8_t)p->o->ack_timeout;

	p->ch = rdma_create_event_channel();
	if (!p->ch)
		die("rdma_create_event_channel: %s (is /dev/infiniband/rdma_cm readable?)",
		    strerror(errno));
	fcntl(p->ch->fd, F_SETFL, fcntl(p->ch->fd, F_GETFL) | O_NONBLOCK);
	if (rdma_create_id(p->ch, &p->id, p, RDMA_PS_TCP) != 0)
		die("rdma_create_id: %s", strerror(errno));
	if (exp && rdma_set_option(p->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &exp,
				   sizeof(exp)) != 0)
		logline("ack_timeout_unset conn=0: %s", strerror(errno));
	if (rdma_resolve_addr(p->id, NULL, (struct sockaddr *)&p->to, RESOLVE_MS) != 0)
		die("rdma_resolve_addr: %s", strerror(errno));
}

int run_peer(const struct peer_opts *o)
{
	static struct peer peer;
	struct peer *p = &peer;

	p->o = o;
	p->tcp = p->x.tcp = -1;
	p->rx_count = o->buf_count;
	p->rx_size = o->buf_size;
	p->hdr = o->link ? (uint32_t)SDP_LH_SIZE : 0;
	p->buf_rx = p->rx_size + p->hdr;
	p->sidx = o->stream_index;
	p->x.idx = (uint16_t)((p->sidx + 1) % SDP_LINK_STREAMS_MAX);
	p->deadline = mono_ms() + o->for_s * 1000.0;
	parse_to(o->to, &p->to);
	build_script(p, o);
	if (p->win_len > WIN_MAX)
		die("offers need %u bytes of window memory, at most %u", p->win_len, WIN_MAX);
	logline("start mode=peer to=%s lie=%s steps=%u bufs=%u size=%u version=%u link=%d stream=%u "
		"uid=%u", o->to, peer_lie_name(o->lie), p->nsteps, p->rx_count, p->rx_size,
		o->wire_version, o->link ? 1 : 0, p->sidx, (unsigned)getuid());
	start(p);
	loop(p);
	summary(p);
	teardown(p);
	return p->phase == PH_FAILED ? 1 : 0;
}
