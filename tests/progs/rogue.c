/* rogue: a lying sdpshim peer for the trust tests (tests/vm/35-trust.bats).
 * It speaks the channel protocol with core/wire.c's encoders and decoders over
 * librdmacm and libibverbs directly (no sdpshim library), and needs no
 * privilege: any local user can open rdma_cm and bind a port >= 1024 in its
 * RDMA_PS_TCP port space, which is not the kernel's TCP port space.
 *
 *   rogue listen --port P [--addr A] [--attach after-commit|early|never]
 *                [--buf-count C] [--buf-size S] [--v1] [--log FILE] [--for SECONDS]
 *       An rdma_cm listener on A:P (default: every address).  Every Hello gets a
 *       HelloAck (a random nonce) instead of a reject; C receive buffers of S
 *       bytes (default 16 x 32768) are posted and advertised.  ATTACH goes out
 *       after the client's COMMIT (after-commit, the default), right after
 *       ESTABLISHED (early), or never.  Runs until SIGTERM/SIGINT, or SECONDS.
 *       Lines: "listening addr=A port=P ... uid=U", "hello conn=I src=.. sport=.. dst=..
 *       dport=.. bufs=.. size=.. version=..", "established conn=I", "commit conn=I
 *       nonce=HEX", "msg conn=I mid=N len=L mseq=.. ack=.. bufs=..", "data conn=I
 *       bytes=N preview=..." (the first bytes, escaped), "attach_sent conn=I",
 *       "disconnected conn=I", and last "data_bytes=N attach_sent=N hellos=N
 *       commits=N".
 *
 *   rogue hello --to ADDR:PORT --src-port N [--src-addr A] [--count K]
 *               [--buf-count C] [--buf-size S] [--no-commit] [--hold SECONDS]
 *               [--v1] [--log FILE]
 *       K rdma_cm connections to ADDR:PORT at once; connection I (from 0) sends a
 *       Hello naming the TCP tuple src A (default: the local address rdma_cm
 *       chose), src port N+I, dst ADDR:PORT, and claiming C receive buffers of S
 *       bytes (default 32 x 32768; 1024 x 1048576 is the most a Hello may ask).
 *       It really posts at most 8 buffers of at most 16 KiB (what an unprivileged
 *       RLIMIT_MEMLOCK allows for 16 connections).  On ESTABLISHED it sends COMMIT
 *       (a random nonce) unless --no-commit.  Once every connection is settled
 *       (established, rejected or failed), it holds them SECONDS (default 10),
 *       then disconnects and exits.  Lines: "start ... uid=U", "established conn=I bufs=.. size=..
 *       nonce=HEX", "rejected conn=I code=N status=S", "error conn=I event=..",
 *       "commit_sent conn=I" (the COMMIT's send completed: the server's QP has
 *       it), "msg conn=I mid=N len=L ...", "attach conn=I", "detach conn=I
 *       reason=N", "data conn=I bytes=N preview=...", "disconnected conn=I", and
 *       last "established=E rejected=R attach=A detach=D data_bytes=B errors=X
 *       commits_sent=C".
 *
 *   rogue peer --to ADDR:PORT --lie LIE [--bytes N] [--offer src|sink] [--offset-delta D]
 *              [--stack K] [--src-len L] [--after-ms MS] [--disconnect-at acked|posted|first]
 *              [--ack-timeout E] [--buf-count C] [--buf-size S]
 *              [--wire-version N | --v1] [--for SECONDS] [--log FILE]
 *       A complete sdpshim client of a real sdpshim server (rogue_peer.c): a TCP
 *       socket bound where rdma_cm routes, an rdma_cm connection whose Hello names
 *       that 4-tuple (C x S receive buffers, default 16 x 32768, really posted),
 *       COMMIT, the TCP connect, the server's urgent byte, the PROOF (the
 *       HelloAck's nonce) on TCP, ATTACH.  Then an open peer that keeps the
 *       protocol (credits, DATA of the stream in lie_pattern.h, READs of the
 *       server's SrcAvails answered by RdmaRdCompl, every byte received checked)
 *       except for one LIE:
 *         none                 honest: N bytes (1 MiB), the echo, DisConn;
 *         never-answer-cancel  N bytes (1 MiB); a SrcAvail is never READ, its
 *                              SrcAvailCancel never answered; holds until SECONDS;
 *         false-wrcompl        N bytes (4096); the next SinkAvail at our offset gets
 *                              RdmaWrCompl(its full length), no WRITE; DisConn MS later;
 *         wrong-offset         N bytes (64 KiB) and their echo, then a SrcAvail (src)
 *                              or SinkAvail (sink) of L bytes (256 KiB) naming the
 *                              true offset + D (4096; negative: behind);
 *         stacked-srcavail     N bytes (64 KiB) and K SrcAvails (4) of L bytes back
 *                              to back; each RdmaRdCompl is checked against its
 *                              SrcAvail ("rdcompl ... expected_off=.. ok|WRONG");
 *         abort-disconnect     on the server's first SrcAvail or SinkAvail: ABORT,
 *                              rdma_disconnect once the ABORT is in the server's QP
 *                              (acked, the default), right after posting it, or
 *                              just before it (first),
 *                              and MS (500) later an RDMA READ or WRITE of at most
 *                              64 KiB to that window, with our QP still in RTS (we
 *                              own it: ibv_create_qp, moved by rdma_init_qp_attr).
 *       It ends when both DisConns passed, on the server's ABORT, DETACH or NAK,
 *       a disconnect, a QP error, after the probe, or after SECONDS (default 120).
 *       Lines: "tcp_bound conn=0 addr=.. sport=..", "hello_sent ..", "established
 *       conn=0 bufs=.. size=.. nonce=HEX", "commit_sent", "tcp_connected", "signal
 *       conn=0 byte=0xb5", "proof_sent", "attach conn=0", "msg conn=0 mid=N NAME
 *       len=.. a=.. d=.." (each control message), "data conn=0 off=.. bytes=..
 *       bad=..", "srcavail conn=0 off=.. len=.. rkey=.. addr=.. expected_off=..",
 *       "rdcompl_sent ..", "srcavail_ignored ..", "srccancel_ignored ..",
 *       "sinkavail ..", "wrcompl_lie conn=0 off=.. bytes=..", "offer_sent conn=0
 *       kind=src|sink off=.. claimed=.. len=..", "rdcompl conn=0 off=.. bytes=..
 *       expected_off=.. expected_bytes=.. ok|WRONG", "sinkcancelack ..", "wrcompl
 *       ..", "window conn=0 op=read|write ..", "disconnect_sent", "probe conn=0
 *       op=read|write status=IBV_WC_... (N) bytes=..", "probe_data .." (a READ
 *       that succeeded: how many bytes were the server's stream), "end conn=0
 *       reason=..", and last "lie=.. attach=.. data_sent=.. data_received=..
 *       echo_bad=.. ... rdcompl_bad=.. aborted=.. probe=..".  Exit status 1 when
 *       the channel could not be set up.  --wire-version N (or --v1) speaks an older
 *       build's version in the Hello, the HelloAck and the PROOF (version 1: a
 *       12-byte HelloAck, a bare COMMIT, and no binding handshake at all).
 *
 * --v1 (listen, hello) speaks the version-1 formats (Hello and HelloAck version
 * byte 1, a 12-byte HelloAck without nonce, a bare 16-byte COMMIT), to reproduce the
 * findings on a build of the old protocol.  Every line ends in t_ms=N (since
 * start) and is flushed at once.  Everything from the wire is length-checked
 * before use; garbage is logged ("msg_invalid ..."), never trusted.
 * Exit status: 0, or 2 for usage errors, 1 when setup failed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core/wire.h"
#include "progutil.h"
#include "rogue.h"

#define MAX_CONNS        256
#define CTRL_SLOTS       8u
#define CTRL_SLOT_SIZE   64u
#define HELLO_POST_MAX   8u
#define HELLO_POST_SIZE  16384u
#define V1_HELLO_ACK_LEN 12u     /* version 1: magic, version, flags, buf_count, buf_size */
#define RESOLVE_MS       5000
#define SETTLE_SECS      60      /* hello: give up on connections not settled by then */
#define SEND_TAG         (1ull << 32)

enum attach_mode { ATTACH_AFTER_COMMIT, ATTACH_EARLY, ATTACH_NEVER };

struct rconn {
	int idx;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	uint8_t *rx_mem, *tx_mem;
	struct ibv_mr *rx_mr, *tx_mr;
	uint32_t rx_count, rx_size;   /* buffers really posted */
	uint16_t claim_bufs;          /* the bufs field of our headers */
	uint32_t tx_seq, rx_seq;      /* our last mseq; the last peer mseq consumed */
	unsigned tx_next;
	bool established, settled, committed, attach_sent, wc_error_logged, destroy;
	uint16_t src_port;            /* hello: the source port this Hello names */
};

static struct {
	bool v1, no_commit;
	enum attach_mode attach;
	uint16_t buf_count;
	uint32_t buf_size;
	int count;
	double hold_s, for_s;
	const char *addr, *port, *to, *src_addr;
	uint16_t src_port;
} opt = {
	.attach = ATTACH_AFTER_COMMIT, .count = 1, .hold_s = 10,
};

static struct {
	unsigned long long data_bytes;
	unsigned attach_sent, hellos, commits, established, rejected, attach, detach, errors,
		commits_sent;
} tally;

FILE *logfp;
static double t_start;
volatile sig_atomic_t stop;
static struct rdma_event_channel *cm_ch;
static struct rconn *conns[MAX_CONNS];
static int nconns;
static bool listen_mode;

double mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void logline(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(logfp, fmt, ap);
	va_end(ap);
	fprintf(logfp, " t_ms=%.0f\n", mono_ms() - t_start);
	fflush(logfp);
}

void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(logfp, "fatal ");
	va_start(ap, fmt);
	vfprintf(logfp, fmt, ap);
	va_end(ap);
	fprintf(logfp, " t_ms=%.0f\n", mono_ms() - t_start);
	fflush(logfp);
	exit(1);
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = '\0';
}

/* Printable bytes as they are, the rest as \xNN: at most PREVIEW_BYTES. */
void preview(const uint8_t *p, size_t n, char *out)
{
	size_t o = 0;

	if (n > PREVIEW_BYTES)
		n = PREVIEW_BYTES;
	for (size_t i = 0; i < n; i++) {
		if (p[i] > 0x20 && p[i] < 0x7f && p[i] != '\\')
			out[o++] = (char)p[i];
		else
			o += (size_t)sprintf(out + o, "\\x%02x", p[i]);
	}
	out[o] = '\0';
}

void random_bytes(uint8_t *p, size_t n)
{
	while (n) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("getrandom: %s", strerror(errno));
		p += r;
		n -= (size_t)r;
	}
}

/* An address as text, and as the wire's IPv6 form (IPv4-mapped for IPv4). */
void addr_text(const struct sockaddr *sa, char *out, size_t len)
{
	const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
						  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;

	if (!inet_ntop(sa->sa_family, a, out, (socklen_t)len))
		snprintf(out, len, "?");
}

void addr_to_wire(const struct sockaddr *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

uint16_t addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

static void wire_addr_text(const uint8_t a[16], char *out, size_t len)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (memcmp(a, mapped, sizeof(mapped)) == 0)
		inet_ntop(AF_INET, a + 12, out, (socklen_t)len);
	else
		inet_ntop(AF_INET6, a, out, (socklen_t)len);
}

struct addrinfo *resolve(const char *host, const char *port, bool passive)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV |
					      (passive ? AI_PASSIVE : 0) }, *ai;
	int err = getaddrinfo(host, port, &hints, &ai);

	if (err)
		die("address %s port %s: %s", host ? host : "*", port, gai_strerror(err));
	return ai;
}

/* --- one channel ------------------------------------------------------------ */

static struct rconn *conn_new(struct rdma_cm_id *id)
{
	struct rconn *c;

	if (nconns >= MAX_CONNS)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->idx = nconns;
	c->id = id;
	id->context = c;
	conns[nconns++] = c;
	return c;
}

static int post_recv(struct rconn *c, uint32_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(c->rx_mem + (size_t)slot * c->rx_size),
		.length = c->rx_size,
		.lkey = c->rx_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* PD, completion channel, CQ, RC QP, and rx_count buffers of rx_size posted. */
static int conn_setup(struct rconn *c, uint32_t rx_count, uint32_t rx_size)
{
	struct ibv_qp_init_attr attr;
	int fl;

	c->rx_count = rx_count;
	c->rx_size = rx_size;
	c->pd = ibv_alloc_pd(c->id->verbs);
	c->cch = c->pd ? ibv_create_comp_channel(c->id->verbs) : NULL;
	if (!c->cch)
		return -1;
	fl = fcntl(c->cch->fd, F_GETFL);
	fcntl(c->cch->fd, F_SETFL, fl | O_NONBLOCK);
	c->cq = ibv_create_cq(c->id->verbs, (int)(rx_count + CTRL_SLOTS + 4), c, c->cch, 0);
	if (!c->cq || ibv_req_notify_cq(c->cq, 0) != 0)
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.cap.max_send_wr = CTRL_SLOTS;
	attr.cap.max_recv_wr = rx_count;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	if (rdma_create_qp(c->id, c->pd, &attr) != 0)
		return -1;
	if (posix_memalign((void **)&c->rx_mem, 4096, (size_t)rx_count * rx_size) != 0 ||
	    posix_memalign((void **)&c->tx_mem, 4096, (size_t)CTRL_SLOTS * CTRL_SLOT_SIZE) != 0) {
		errno = ENOMEM;
		return -1;
	}
	memset(c->rx_mem, 0, (size_t)rx_count * rx_size);
	c->rx_mr = ibv_reg_mr(c->pd, c->rx_mem, (size_t)rx_count * rx_size, IBV_ACCESS_LOCAL_WRITE);
	c->tx_mr = ibv_reg_mr(c->pd, c->tx_mem, (size_t)CTRL_SLOTS * CTRL_SLOT_SIZE, 0);
	if (!c->rx_mr || !c->tx_mr)
		return -1;
	for (uint32_t i = 0; i < rx_count; i++)
		if (post_recv(c, i) != 0)
			return -1;
	return 0;
}

/* Releases everything; the id last (never inside its own event). */
static void conn_free(struct rconn *c)
{
	if (c->id && c->id->qp)
		rdma_destroy_qp(c->id);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->cch)
		ibv_destroy_comp_channel(c->cch);
	if (c->rx_mr)
		ibv_dereg_mr(c->rx_mr);
	if (c->tx_mr)
		ibv_dereg_mr(c->tx_mr);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	free(c->rx_mem);
	free(c->tx_mem);
	conns[c->idx] = NULL;
	free(c);
}

/* One control message: base header (+ extension); mseq_ack = the last peer
 * message seen.  A v1 COMMIT is the bare header. */
static int send_ctrl(struct rconn *c, uint8_t mid, const struct sdp_ext *ext)
{
	unsigned slot = c->tx_next++ % CTRL_SLOTS;
	uint8_t *buf = c->tx_mem + (size_t)slot * CTRL_SLOT_SIZE;
	size_t len = SDP_BSDH_SIZE + (ext ? SDP_EXT_SIZE : 0);
	struct sdp_bsdh h = {
		.mid = mid,
		.bufs = c->claim_bufs,
		.len = (uint32_t)len,
		.mseq = ++c->tx_seq,
		.mseq_ack = c->rx_seq,
	};
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = c->tx_mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = SEND_TAG | ((uint64_t)mid << 8) | slot,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	sdp_bsdh_to_wire(&h, buf);
	if (ext)
		sdp_ext_to_wire(ext, buf + SDP_BSDH_SIZE);
	if (ibv_post_send(c->id->qp, &wr, &bad) != 0) {
		logline("send_failed conn=%d mid=%u: %s", c->idx, mid, strerror(errno));
		return -1;
	}
	return 0;
}

static void send_attach(struct rconn *c)
{
	if (c->attach_sent || send_ctrl(c, SDP_MID_ATTACH, NULL) != 0)
		return;
	c->attach_sent = true;
	tally.attach_sent++;
	logline("attach_sent conn=%d mseq=%u ack=%u", c->idx, c->tx_seq, c->rx_seq);
}

static void send_commit(struct rconn *c)
{
	uint8_t nonce[SDP_NONCE_SIZE];
	char nx[2 * SDP_NONCE_SIZE + 1];
	struct sdp_ext e = { 0 };

	random_bytes(nonce, sizeof(nonce));
	sdp_nonce_to_ext(nonce, &e);
	if (send_ctrl(c, SDP_MID_COMMIT, opt.v1 ? NULL : &e) != 0)
		return;
	hex(nonce, sizeof(nonce), nx);
	logline("commit_posted conn=%d nonce=%s", c->idx, opt.v1 ? "-" : nx);
}

/* A version-1 COMMIT is a bare header: wire.c (version 2) requires the
 * extension, so that one case is decoded here, with the same checks. */
static bool v1_commit(const uint8_t *m, uint32_t len, struct sdp_bsdh *h)
{
	struct sdp_bsdh_wire w;

	if (!opt.v1 || len != SDP_BSDH_SIZE || m[0] != SDP_MID_COMMIT)
		return false;
	memcpy(&w, m, sizeof(w));
	*h = (struct sdp_bsdh){ .mid = w.mid, .flags = w.flags, .bufs = ntohs(w.bufs),
				.len = ntohl(w.len), .mseq = ntohl(w.mseq),
				.mseq_ack = ntohl(w.mseq_ack) };
	return h->len == len && (h->flags & ~SDP_FLAG_KNOWN) == 0 && h->bufs <= SDP_MAX_BUF_COUNT;
}

static void on_recv(struct rconn *c, uint64_t slot, uint32_t len)
{
	const uint8_t *m;
	struct sdp_bsdh h;
	struct sdp_ext e = { 0 };
	enum sdp_wire_error err;
	char pv[PREVIEW_BYTES * 4 + 1], nx[2 * SDP_NONCE_SIZE + 1];

	if (slot >= c->rx_count || len > c->rx_size) {
		logline("msg_invalid conn=%d slot=%llu len=%u", c->idx, (unsigned long long)slot, len);
		return;
	}
	m = c->rx_mem + slot * c->rx_size;
	err = sdp_bsdh_from_wire(m, len, c->rx_size, &h);
	if (err != SDP_WIRE_OK && v1_commit(m, len, &h))
		err = SDP_WIRE_OK;
	if (err != SDP_WIRE_OK) {
		logline("msg_invalid conn=%d len=%u first=0x%02x err=%s", c->idx, len,
			len ? m[0] : 0, sdp_wire_error_text(err));
		goto repost;
	}
	logline("msg conn=%d mid=%u len=%u mseq=%u ack=%u bufs=%u", c->idx, h.mid, h.len, h.mseq,
		h.mseq_ack, h.bufs);
	c->rx_seq = h.mseq;
	if (h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE && h.mid != SDP_MID_DATA)
		sdp_ext_from_wire(m + SDP_BSDH_SIZE, &e);
	switch (h.mid) {
	case SDP_MID_COMMIT:
		tally.commits++;
		c->committed = true;
		if (h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE) {
			uint8_t nonce[SDP_NONCE_SIZE];
			sdp_nonce_from_ext(&e, nonce);
			hex(nonce, sizeof(nonce), nx);
		} else {
			snprintf(nx, sizeof(nx), "-");
		}
		logline("commit conn=%d nonce=%s", c->idx, nx);
		if (listen_mode && opt.attach == ATTACH_AFTER_COMMIT)
			send_attach(c);
		break;
	case SDP_MID_DATA:
		tally.data_bytes += h.len - SDP_BSDH_SIZE;
		preview(m + SDP_BSDH_SIZE, h.len - SDP_BSDH_SIZE, pv);
		logline("data conn=%d bytes=%u total=%llu preview=%s", c->idx, h.len - (uint32_t)SDP_BSDH_SIZE,
			tally.data_bytes, pv);
		break;
	case SDP_MID_ATTACH:
		tally.attach++;
		logline("attach conn=%d", c->idx);
		break;
	case SDP_MID_DETACH:
		tally.detach++;
		logline("detach conn=%d reason=%u", c->idx, e.a);
		break;
	case SDP_MID_ABORT:
		logline("abort conn=%d errno=%u", c->idx, e.a);
		break;
	default:
		break;
	}
repost:
	if (post_recv(c, (uint32_t)slot) != 0)
		logline("repost_failed conn=%d: %s", c->idx, strerror(errno));
}

static void drain_cq(struct rconn *c)
{
	struct ibv_wc wc[16];
	int n;

	while (c->cq && (n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (!c->wc_error_logged && !c->destroy)
					logline("wc_error conn=%d status=%s", c->idx,
						ibv_wc_status_str(wc[i].status));
				c->wc_error_logged = true;
				continue;
			}
			if (wc[i].wr_id & SEND_TAG) {
				uint8_t mid = (uint8_t)(wc[i].wr_id >> 8);
				if (mid == SDP_MID_COMMIT) {
					tally.commits_sent++;
					logline("commit_sent conn=%d", c->idx);
				}
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV)
				on_recv(c, wc[i].wr_id, wc[i].byte_len);
		}
	}
}

static void on_cq_event(struct rconn *c)
{
	struct ibv_cq *cq;
	void *ctx;

	while (ibv_get_cq_event(c->cch, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		ibv_req_notify_cq(cq, 0);
	}
	drain_cq(c);
}

/* --- listener ---------------------------------------------------------------- */

static void reject_request(struct rdma_cm_id *id)
{
	struct sdp_reject_wire rej;

	sdp_reject_to_wire(SDP_REJECT_RESOURCES, &rej);
	rdma_reject(id, &rej, sizeof(rej));
}

/* Answers every Hello: a valid one is logged field by field, a broken one
 * with its decoder's verdict, and either gets a HelloAck.  Returns the new
 * channel (marked destroy when its setup failed and it was rejected), or NULL
 * when there is none: the caller then destroys the id after the ack. */
static struct rconn *on_connect_request(struct rdma_cm_event *ev)
{
	const void *pd = ev->param.conn.private_data;
	size_t pdlen = ev->param.conn.private_data_len;
	struct sdp_hello_wire raw;
	struct sdp_hello h;
	struct sdp_hello_ack ack = { .version = SDP_WIRE_VERSION, .buf_count = opt.buf_count,
				     .buf_size = opt.buf_size };
	struct sdp_hello_ack_wire ack_wire;
	struct rdma_conn_param param;
	enum sdp_wire_error err = SDP_WIRE_SHORT;
	char src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN], peer[INET6_ADDRSTRLEN];
	uint8_t version = 0;
	struct rconn *c;

	addr_text(rdma_get_peer_addr(ev->id), peer, sizeof(peer));
	tally.hellos++;
	if (pd && pdlen >= sizeof(raw)) {
		memcpy(&raw, pd, sizeof(raw));
		version = raw.version;
		raw.version = SDP_WIRE_VERSION; /* decode either version's identical layout */
		err = sdp_hello_from_wire(&raw, sizeof(raw), &h);
	}
	c = conn_new(ev->id);
	if (err == SDP_WIRE_OK) {
		wire_addr_text(h.tuple.src_addr, src, sizeof(src));
		wire_addr_text(h.tuple.dst_addr, dst, sizeof(dst));
		logline("hello conn=%d src=%s sport=%u dst=%s dport=%u bufs=%u size=%u version=%u peer=%s",
			c ? c->idx : -1, src, h.tuple.src_port, dst, h.tuple.dst_port, h.buf_count,
			h.buf_size, version, peer);
	} else {
		logline("hello conn=%d invalid=\"%s\" len=%zu version=%u peer=%s", c ? c->idx : -1,
			sdp_wire_error_text(err), pdlen, version, peer);
	}
	if (!c) {
		logline("setup_failed conn=-1: too many channels");
		reject_request(ev->id);
		return NULL;
	}
	if (conn_setup(c, opt.buf_count, opt.buf_size) != 0) {
		logline("setup_failed conn=%d: %s", c->idx, strerror(errno));
		reject_request(ev->id);
		c->destroy = true;
		return c;
	}
	c->claim_bufs = opt.buf_count;
	random_bytes(ack.nonce, sizeof(ack.nonce));
	sdp_hello_ack_to_wire(&ack, &ack_wire);
	memset(&param, 0, sizeof(param));
	param.private_data = &ack_wire;
	param.private_data_len = sizeof(ack_wire);
	if (opt.v1) {
		ack_wire.version = 1;
		param.private_data_len = V1_HELLO_ACK_LEN;
	}
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	if (rdma_accept(ev->id, &param) != 0) {
		logline("accept_failed conn=%d: %s", c->idx, strerror(errno));
		c->destroy = true;
	}
	return c;
}

/* --- client ------------------------------------------------------------------ */

static struct sockaddr_storage to_addr;

static void hello_connect(struct rconn *c)
{
	struct sdp_hello h = { .version = SDP_WIRE_VERSION, .buf_count = opt.buf_count,
			       .buf_size = opt.buf_size };
	struct sdp_hello_wire w;
	struct rdma_conn_param param;
	uint32_t count = opt.buf_count < HELLO_POST_MAX ? opt.buf_count : HELLO_POST_MAX;
	uint32_t size = opt.buf_size < HELLO_POST_SIZE ? opt.buf_size : HELLO_POST_SIZE;

	if (conn_setup(c, count, size) != 0) {
		logline("error conn=%d setup: %s", c->idx, strerror(errno));
		tally.errors++;
		c->settled = c->destroy = true;
		return;
	}
	c->claim_bufs = opt.buf_count;
	if (opt.src_addr) {
		struct addrinfo *ai = resolve(opt.src_addr, "0", false);
		addr_to_wire(ai->ai_addr, h.tuple.src_addr);
		freeaddrinfo(ai);
	} else {
		addr_to_wire(rdma_get_local_addr(c->id), h.tuple.src_addr);
	}
	addr_to_wire((struct sockaddr *)&to_addr, h.tuple.dst_addr);
	h.tuple.src_port = c->src_port;
	h.tuple.dst_port = addr_port((struct sockaddr *)&to_addr);
	sdp_hello_to_wire(&h, &w);
	if (opt.v1)
		w.version = 1;
	memset(&param, 0, sizeof(param));
	param.private_data = &w;
	param.private_data_len = sizeof(w);
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	if (rdma_connect(c->id, &param) != 0) {
		logline("error conn=%d rdma_connect: %s", c->idx, strerror(errno));
		tally.errors++;
		c->settled = c->destroy = true;
	}
}

static void hello_established(struct rconn *c, struct rdma_cm_event *ev)
{
	const uint8_t *pd = ev->param.conn.private_data;
	size_t pdlen = ev->param.conn.private_data_len;
	struct sdp_hello_ack_wire raw;
	struct sdp_hello_ack ack;
	enum sdp_wire_error err = SDP_WIRE_SHORT;
	char nx[2 * SDP_NONCE_SIZE + 1] = "-";
	size_t need = opt.v1 ? V1_HELLO_ACK_LEN : sizeof(raw);

	c->established = c->settled = true;
	tally.established++;
	if (pd && pdlen >= need) {
		memset(&raw, 0, sizeof(raw));
		memcpy(&raw, pd, need);
		if (opt.v1 && raw.version == 1)
			raw.version = SDP_WIRE_VERSION; /* same layout, no nonce */
		err = sdp_hello_ack_from_wire(&raw, sizeof(raw), &ack);
	}
	if (err == SDP_WIRE_OK) {
		if (!opt.v1)
			hex(ack.nonce, sizeof(ack.nonce), nx);
		logline("established conn=%d bufs=%u size=%u nonce=%s", c->idx, ack.buf_count,
			ack.buf_size, nx);
	} else {
		logline("established conn=%d helloack_invalid=\"%s\" len=%zu", c->idx,
			sdp_wire_error_text(err), pdlen);
	}
	if (!opt.no_commit)
		send_commit(c);
}

/* --- the event loop ------------------------------------------------------------- */

static void on_cm_event(struct rdma_cm_event *ev)
{
	struct rconn *c = ev->id->context;
	uint8_t code;

	if (!c)
		return; /* the listening id */
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id, RESOLVE_MS) != 0) {
			logline("error conn=%d rdma_resolve_route: %s", c->idx, strerror(errno));
			tally.errors++;
			c->settled = c->destroy = true;
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		hello_connect(c);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (listen_mode) {
			c->established = true;
			logline("established conn=%d", c->idx);
			if (opt.attach == ATTACH_EARLY)
				send_attach(c);
		} else {
			hello_established(c, ev);
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
		code = sdp_reject_from_wire(ev->param.conn.private_data,
					    ev->param.conn.private_data_len);
		logline("rejected conn=%d code=%u status=%d", c->idx, code, ev->status);
		tally.rejected++;
		c->settled = c->destroy = true;
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		drain_cq(c);
		logline("disconnected conn=%d", c->idx);
		rdma_disconnect(c->id);
		c->destroy = true;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		logline("error conn=%d event=%s status=%d", c->idx, rdma_event_str(ev->event),
			ev->status);
		tally.errors++;
		c->settled = c->destroy = true;
		break;
	default:
		break;
	}
}

/* rdma_cm events.  An id is destroyed only after its event is acked
 * (rdma_destroy_id waits for that). */
static void pump_cm(void)
{
	struct rdma_cm_event *ev;

	while (rdma_get_cm_event(cm_ch, &ev) == 0) {
		struct rdma_cm_id *orphan = NULL;
		struct rconn *c;

		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			c = on_connect_request(ev);
			if (!c)
				orphan = ev->id;
		} else {
			c = ev->id->context;
			on_cm_event(ev);
		}
		rdma_ack_cm_event(ev);
		if (orphan)
			rdma_destroy_id(orphan);
		if (c && c->destroy)
			conn_free(c);
	}
}

static void free_destroyed(void)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i] && conns[i]->destroy)
			conn_free(conns[i]);
}

static bool all_settled(void)
{
	for (int i = 0; i < nconns; i++)
		if (conns[i] && !conns[i]->settled)
			return false;
	return true;
}

static void loop(double deadline_ms, bool hello)
{
	struct pollfd pfd[MAX_CONNS + 1];
	struct rconn *who[MAX_CONNS + 1];
	double settle_by = mono_ms() + SETTLE_SECS * 1000.0, hold_until = 0;

	while (!stop) {
		double now = mono_ms();
		int n = 0, rc;

		if (deadline_ms > 0 && now >= deadline_ms)
			break;
		if (hello) {
			if (hold_until == 0 && (all_settled() || now >= settle_by)) {
				hold_until = now + opt.hold_s * 1000.0;
				logline("holding secs=%g", opt.hold_s);
			}
			if (hold_until > 0 && now >= hold_until)
				break;
		}
		pfd[n] = (struct pollfd){ .fd = cm_ch->fd, .events = POLLIN };
		who[n++] = NULL;
		for (int i = 0; i < nconns; i++) {
			if (!conns[i] || !conns[i]->cch)
				continue;
			pfd[n] = (struct pollfd){ .fd = conns[i]->cch->fd, .events = POLLIN };
			who[n++] = conns[i];
		}
		rc = poll(pfd, (nfds_t)n, 100);
		if (rc < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (rc > 0) {
			for (int i = 1; i < n; i++)
				if (pfd[i].revents)
					on_cq_event(who[i]); /* nothing is freed before the sweep below */
			if (pfd[0].revents)
				pump_cm();
		}
		for (int i = 0; i < nconns; i++)
			if (conns[i] && !conns[i]->destroy)
				drain_cq(conns[i]); /* a missed notification costs 100 ms at most */
		free_destroyed();
	}
}

static void teardown_all(void)
{
	for (int i = 0; i < nconns; i++) {
		struct rconn *c = conns[i];
		if (!c)
			continue;
		drain_cq(c);
		if (c->established)
			rdma_disconnect(c->id);
		c->destroy = true;
		conn_free(c);
	}
}

static void open_channel(void)
{
	int fl;

	cm_ch = rdma_create_event_channel();
	if (!cm_ch)
		die("rdma_create_event_channel: %s (is /dev/infiniband/rdma_cm readable?)",
		    strerror(errno));
	fl = fcntl(cm_ch->fd, F_GETFL);
	fcntl(cm_ch->fd, F_SETFL, fl | O_NONBLOCK);
}

static int run_listen(void)
{
	struct rdma_cm_id *lid;
	struct addrinfo *ai = resolve(opt.addr ? opt.addr : "0.0.0.0", opt.port, true);
	char a[INET6_ADDRSTRLEN];

	listen_mode = true;
	open_channel();
	if (rdma_create_id(cm_ch, &lid, NULL, RDMA_PS_TCP) != 0)
		die("rdma_create_id: %s", strerror(errno));
	if (rdma_bind_addr(lid, ai->ai_addr) != 0)
		die("rdma_bind_addr %s:%s: %s", opt.addr ? opt.addr : "*", opt.port, strerror(errno));
	if (rdma_listen(lid, 64) != 0)
		die("rdma_listen: %s", strerror(errno));
	addr_text(ai->ai_addr, a, sizeof(a));
	freeaddrinfo(ai);
	logline("listening addr=%s port=%s attach=%s version=%d uid=%u", a, opt.port,
		opt.attach == ATTACH_EARLY ? "early" : opt.attach == ATTACH_NEVER ? "never" : "after-commit",
		opt.v1 ? 1 : SDP_WIRE_VERSION, (unsigned)getuid());
	loop(opt.for_s > 0 ? mono_ms() + opt.for_s * 1000.0 : 0, false);
	teardown_all();
	rdma_destroy_id(lid);
	fprintf(logfp, "data_bytes=%llu attach_sent=%u hellos=%u commits=%u\n", tally.data_bytes,
		tally.attach_sent, tally.hellos, tally.commits);
	fflush(logfp);
	return 0;
}

void parse_to(const char *to, struct sockaddr_storage *out)
{
	char *colon, host[256];
	struct addrinfo *ai;

	if (strlen(to) >= sizeof(host))
		die("--to too long");
	strcpy(host, to);
	colon = strrchr(host, ':');
	if (!colon)
		die("--to wants ADDR:PORT");
	*colon = '\0';
	if (host[0] == '[' && colon > host && colon[-1] == ']') {
		colon[-1] = '\0';
		memmove(host, host + 1, strlen(host));
	}
	ai = resolve(host, colon + 1, false);
	memset(out, 0, sizeof(*out));
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
}

static int run_hello(void)
{
	parse_to(opt.to, &to_addr);
	if ((unsigned)opt.src_port + (unsigned)opt.count - 1 > 65535)
		die("--src-port + --count leaves the port range");
	open_channel();
	logline("start to=%s count=%d src_port=%u bufs=%u size=%u commit=%s version=%d uid=%u", opt.to,
		opt.count, opt.src_port, opt.buf_count, opt.buf_size, opt.no_commit ? "no" : "yes",
		opt.v1 ? 1 : SDP_WIRE_VERSION, (unsigned)getuid());
	for (int i = 0; i < opt.count; i++) {
		struct rdma_cm_id *id;
		struct rconn *c;

		if (rdma_create_id(cm_ch, &id, NULL, RDMA_PS_TCP) != 0)
			die("rdma_create_id: %s", strerror(errno));
		c = conn_new(id);
		if (!c)
			die("out of memory");
		c->src_port = (uint16_t)(opt.src_port + i);
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&to_addr, RESOLVE_MS) != 0) {
			logline("error conn=%d rdma_resolve_addr: %s", c->idx, strerror(errno));
			tally.errors++;
			c->settled = c->destroy = true;
		}
	}
	loop(0, true);
	teardown_all();
	fprintf(logfp, "established=%u rejected=%u attach=%u detach=%u data_bytes=%llu errors=%u "
		"commits_sent=%u\n", tally.established, tally.rejected, tally.attach, tally.detach,
		tally.data_bytes, tally.errors, tally.commits_sent);
	fflush(logfp);
	return 0;
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: rogue listen --port P [--addr A] [--attach after-commit|early|never]\n"
		"                    [--buf-count C] [--buf-size S] [--v1] [--log FILE] [--for SECONDS]\n"
		"       rogue hello --to ADDR:PORT --src-port N [--src-addr A] [--count K]\n"
		"                   [--buf-count C] [--buf-size S] [--no-commit] [--hold SECONDS]\n"
		"                   [--v1] [--log FILE]\n"
		"       rogue peer --to ADDR:PORT --lie none|never-answer-cancel|false-wrcompl|\n"
		"                  wrong-offset|stacked-srcavail|abort-disconnect\n"
		"                  [--bytes N] [--offer src|sink] [--offset-delta D] [--stack K]\n"
		"                  [--src-len L] [--after-ms MS] [--disconnect-at acked|posted|first]\n"
		"                  [--ack-timeout E] [--buf-count C]\n"
		"                  [--buf-size S] [--wire-version N | --v1] [--for SECONDS]\n"
		"                  [--log FILE]\n");
	exit(2);
}

static long number(const char *s, long min, long max)
{
	long v;

	if (!prog_parse_long(s, min, max, &v)) {
		fprintf(stderr, "rogue: %s: not a number in %ld..%ld\n", s, min, max);
		exit(2);
	}
	return v;
}

static double seconds(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (*end || end == s || v < 0 || v > 86400) {
		fprintf(stderr, "rogue: %s: not a number of seconds\n", s);
		exit(2);
	}
	return v;
}

static const struct option longopts[] = {
	{ "port", required_argument, NULL, 'p' },
	{ "addr", required_argument, NULL, 'a' },
	{ "attach", required_argument, NULL, 'A' },
	{ "v1", no_argument, NULL, '1' },
	{ "log", required_argument, NULL, 'l' },
	{ "for", required_argument, NULL, 'f' },
	{ "to", required_argument, NULL, 't' },
	{ "src-port", required_argument, NULL, 's' },
	{ "src-addr", required_argument, NULL, 'S' },
	{ "count", required_argument, NULL, 'k' },
	{ "buf-count", required_argument, NULL, 'c' },
	{ "buf-size", required_argument, NULL, 'z' },
	{ "no-commit", no_argument, NULL, 'n' },
	{ "hold", required_argument, NULL, 'h' },
	{ "lie", required_argument, NULL, 'L' },
	{ "bytes", required_argument, NULL, 'b' },
	{ "offer", required_argument, NULL, 'o' },
	{ "offset-delta", required_argument, NULL, 'd' },
	{ "stack", required_argument, NULL, 'K' },
	{ "src-len", required_argument, NULL, 'e' },
	{ "after-ms", required_argument, NULL, 'm' },
	{ "ack-timeout", required_argument, NULL, 'T' },
	{ "wire-version", required_argument, NULL, 'W' },
	{ "disconnect-at", required_argument, NULL, 'D' },
	{ NULL, 0, NULL, 0 },
};

static const char *const lie_names[] = {
	[LIE_NONE] = "none",
	[LIE_NEVER_ANSWER_CANCEL] = "never-answer-cancel",
	[LIE_FALSE_WRCOMPL] = "false-wrcompl",
	[LIE_WRONG_OFFSET] = "wrong-offset",
	[LIE_STACKED_SRCAVAIL] = "stacked-srcavail",
	[LIE_ABORT_DISCONNECT] = "abort-disconnect",
};

const char *peer_lie_name(enum peer_lie lie)
{
	return lie_names[lie];
}

static enum peer_lie lie_from_name(const char *s)
{
	for (size_t i = 0; i < sizeof(lie_names) / sizeof(lie_names[0]); i++)
		if (strcmp(s, lie_names[i]) == 0)
			return (enum peer_lie)i;
	usage();
}

static enum attach_mode attach_from_name(const char *s)
{
	if (strcmp(s, "after-commit") == 0)
		return ATTACH_AFTER_COMMIT;
	if (strcmp(s, "early") == 0)
		return ATTACH_EARLY;
	if (strcmp(s, "never") == 0)
		return ATTACH_NEVER;
	usage();
}

static struct peer_opts popt = {
	.bytes = -1, .offset_delta = 4096, .stack = 4, .src_len = 262144, .after_ms = 500,
	.for_s = 120,
};

/* Options only peer mode takes; false if o is none of them. */
static bool peer_option(int o, const char *arg)
{
	switch (o) {
	case 'L': popt.lie = lie_from_name(arg); break;
	case 'b': popt.bytes = number(arg, 0, 1L << 30); break;
	case 'o':
		if (strcmp(arg, "src") != 0 && strcmp(arg, "sink") != 0)
			usage();
		popt.offer = strcmp(arg, "src") == 0 ? OFFER_SRC : OFFER_SINK;
		break;
	case 'd': popt.offset_delta = number(arg, -(1L << 30), 1L << 30); break;
	case 'K': popt.stack = (unsigned)number(arg, 1, 8); break;
	case 'e': popt.src_len = (uint32_t)number(arg, 1, 1L << 20); break;
	case 'm': popt.after_ms = (unsigned)number(arg, 0, 600000); break;
	case 'T': popt.ack_timeout = (unsigned)number(arg, 0, 31); break;
	case 'W': popt.wire_version = (uint8_t)number(arg, 1, SDP_WIRE_VERSION); break;
	case 'D':
		if (strcmp(arg, "acked") == 0)
			popt.disconnect_at = DISC_ACKED;
		else if (strcmp(arg, "posted") == 0)
			popt.disconnect_at = DISC_POSTED;
		else if (strcmp(arg, "first") == 0)
			popt.disconnect_at = DISC_FIRST;
		else
			usage();
		break;
	default: return false;
	}
	return true;
}

/* Options of every mode; usage() for an unknown one. */
static void common_option(int o, const char *arg, const char **logpath)
{
	if (peer_option(o, arg))
		return;
	switch (o) {
	case 'p': number(arg, 1, 65535); opt.port = arg; break;
	case 'a': opt.addr = arg; break;
	case 'A': opt.attach = attach_from_name(arg); break;
	case '1': opt.v1 = true; break;
	case 'l': *logpath = arg; break;
	case 'f': opt.for_s = seconds(arg); break;
	case 't': opt.to = arg; break;
	case 's': opt.src_port = (uint16_t)number(arg, 1, 65535); break;
	case 'S': opt.src_addr = arg; break;
	case 'k': opt.count = (int)number(arg, 1, MAX_CONNS); break;
	case 'c': opt.buf_count = (uint16_t)number(arg, 1, 65535); break;
	case 'z': opt.buf_size = (uint32_t)number(arg, 1, 0x7fffffff); break;
	case 'n': opt.no_commit = true; break;
	case 'h': opt.hold_s = seconds(arg); break;
	default: usage();
	}
}

/* What a mode needs, and what the buffers it really posts may be: within
 * the wire's limits and an unprivileged RLIMIT_MEMLOCK. */
static void check_mode_options(const char *mode)
{
	bool posts = strcmp(mode, "hello") != 0;

	if (strcmp(mode, "listen") == 0 ? !opt.port : !opt.to)
		usage();
	if (strcmp(mode, "hello") == 0 && !opt.src_port)
		usage();
	if (posts && (opt.buf_count < SDP_MIN_BUF_COUNT || opt.buf_count > 64 ||
		      opt.buf_size < SDP_MIN_BUF_SIZE || opt.buf_size > 65536)) {
		fprintf(stderr, "rogue %s: --buf-count 4..64, --buf-size 4096..65536\n", mode);
		exit(2);
	}
}

static int run_peer_mode(void)
{
	popt.to = opt.to;
	popt.buf_count = opt.buf_count;
	popt.buf_size = opt.buf_size;
	if (!popt.wire_version)
		popt.wire_version = opt.v1 ? 1 : SDP_WIRE_VERSION;
	if (opt.for_s > 0)
		popt.for_s = opt.for_s;
	return run_peer(&popt);
}

int main(int argc, char **argv)
{
	const char *mode, *logpath = NULL;
	struct sigaction sa;
	int o;

	logfp = stdout;
	t_start = mono_ms();
	if (argc < 2)
		usage();
	mode = argv[1];
	if (strcmp(mode, "listen") != 0 && strcmp(mode, "hello") != 0 && strcmp(mode, "peer") != 0)
		usage();
	opt.buf_count = strcmp(mode, "hello") == 0 ? 32 : 16;
	opt.buf_size = 32768;
	optind = 2;
	while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		common_option(o, optarg, &logpath);
	if (optind != argc)
		usage();
	check_mode_options(mode);
	if (logpath) {
		logfp = fopen(logpath, "a");
		if (!logfp) {
			fprintf(stderr, "rogue: %s: %s\n", logpath, strerror(errno));
			exit(2);
		}
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (strcmp(mode, "peer") == 0)
		return run_peer_mode();
	return strcmp(mode, "listen") == 0 ? run_listen() : run_hello();
}
