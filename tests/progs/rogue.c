/* rogue: a lying sdpshim peer for the trust tests (tests/vm/35-trust.bats).
 * It speaks the channel protocol with core/wire.c's encoders and decoders over
 * librdmacm and libibverbs directly (no sdpshim library), and needs no
 * privilege: any local user can open rdma_cm and bind a port >= 1024 in its
 * RDMA_PS_TCP port space, which is not the kernel's TCP port space.
 *
 *   rogue listen --port P [--addr A] [--attach after-commit|early|never]
 *                [--lie none|bad-mseq] [--link [--lie released-oob] [--stream-index X]]
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
 *       commits=N links=N opens=N released=N lies=N".
 *       --lie bad-mseq: the client's COMMIT is answered, before any ATTACH,
 *       with two CREDIT_UPDATEs, the first one's mseq skipping one (a
 *       sequence gap on a channel or stream not bound yet, and a message
 *       after it); line "mseq_lie conn=I [stream=X] mseq=N expected=M" (N:
 *       the first one's).
 *       With --link, a link Hello (SDP_HELLO_FLAG_LINK) gets a link HelloAck
 *       (other Hellos are answered as above), and the link's framing is spoken
 *       (core/link.c): every SEND in a link header with lseq, lack and link
 *       credits (a CREDIT back when half the buffers were taken in or the
 *       client is STARVING); each OPEN gets an OPEN_ACK (a random nonce, C
 *       buffers of S - 16 bytes), and the stream inside behaves as a channel
 *       above (COMMIT, ATTACH per --attach, early: right after the OPEN_ACK).
 *       --lie released-oob: after the first OPEN_ACK, a RELEASED for stream
 *       index I (--stream-index, default 1024: one past the client library's
 *       default table of SDPSHIM_LINK_STREAMS), never opened.  Lines add
 *       "link=1" to hello/established, and "open conn=I stream=X src=..
 *       sport=.. dst=.. dport=.. bufs=.. size=..", "open_ack_sent conn=I
 *       stream=X nonce=HEX", "commit conn=I stream=X ..", "msg conn=I stream=X
 *       ..", "data conn=I stream=X ..", "attach_sent conn=I stream=X ..",
 *       "released conn=I stream=X", "released_lie conn=I stream=X",
 *       "link_seq_gap ..", "link_ack_invalid ..".
 *
 *   rogue hello --to ADDR:PORT --src-port N [--src-addr A] [--count K]
 *               [--link [--streams S] [--stream-index X]]
 *               [--buf-count C] [--buf-size S] [--no-commit] [--hold SECONDS]
 *               [--lie bad-mseq] [--v1] [--log FILE]
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
 *       commits_sent=C opened=O refused=F released=R".
 *       With --link [--streams S] [--stream-index X], each of the K rdma_cm
 *       connections is a link: its Hello names no TCP connection (source port
 *       0, its own address; --src-addr goes into the OPENs instead), and once
 *       established it opens S streams (default 1; 0: none, the link is held
 *       bare), indexes X.. (default 0), stream J of link I naming source port
 *       N + I*S + J; each OPEN_ACK gets a COMMIT (unless --no-commit).  A link
 *       is settled once every OPEN is answered.  Lines: "established conn=I
 *       link=1 bufs=.. size=..", "open_sent conn=I stream=X sport=..",
 *       "open_ack conn=I stream=X bufs=.. size=.. nonce=HEX", "open_nak conn=I
 *       stream=X code=N" (enum sdp_reject_code), "commit_sent conn=I stream=X",
 *       "attach conn=I stream=X", "detach conn=I stream=X reason=N",
 *       "released conn=I stream=X".
 *       --lie bad-mseq: on each SIGUSR1, every established connection (over
 *       links, every stream with an OPEN_ACK) sends the two CREDIT_UPDATEs of
 *       listen mode's lie ("mseq_lie ..." lines): a forger's
 *       violation while the server may be binding its channel to a stranger's
 *       TCP connection.
 *       --lie withhold-lack (with --link): every link header acknowledges
 *       nothing (lack 0), no CREDIT goes back, and the rogue sends whatever
 *       the peer's link credits say: the peer's answers to its OPENs can only
 *       queue.
 *
 *   rogue peer --to ADDR:PORT --lie LIE [--bytes N] [--offer src|sink] [--offset-delta D]
 *              [--stack K] [--src-len L] [--after-ms MS] [--disconnect-at acked|posted|first]
 *              [--ack-timeout E] [--buf-count C] [--buf-size S]
 *              [--link [--stream-index X] [--second-pending]]
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
 *       With --link [--stream-index X] (rogue_peer.c's header) the channel is a
 *       link: a link Hello, then OPEN for stream X (default 0) naming the TCP
 *       4-tuple, whose OPEN_ACK's nonce goes into the PROOF; every lie above
 *       works the same inside it, and these only a link can tell:
 *         open-dup-index       N bytes (64 KiB) echoed, an OPEN for X again (X
 *                              still in use) naming a second bound socket's
 *                              tuple, MS later N more bytes echoed, DisConn;
 *         open-index-oob       our stream opens at X (default 1024, one past
 *                              the server's default table), then as none;
 *         bad-lseq, bad-lack   N bytes echoed, then one link header whose lseq
 *                              skips one ("lseq_lie ..") or whose lack is 1000
 *                              past what the server sent ("lack_lie .."); ends
 *                              MS later (reason lie_told);
 *         stream-unopened      N bytes echoed, a STREAM message with 4096 bytes
 *                              of DATA for index X+7, never opened
 *                              ("unopened_sent .."), MS later N more, DisConn;
 *         released-in-use      N bytes echoed, RELEASED for X while open
 *                              ("released_sent .."), N more bytes of DATA on X,
 *                              ends MS later;
 *         write-imm-other      a second stream (X+1, conn=1) on the same link,
 *                              with its own TCP connection and PROOF; once the
 *                              server offers a sink on each, one RDMA WRITE
 *                              with immediate fills stream X+1's sink with as
 *                              many bytes as X's asks, its immediate naming X
 *                              ("write_imm_lie .."); DisConn MS later.
 *         false-solicited      the link Hello claims SOLICITED (every message
 *                              asks for an event), and none does; then as
 *                              none with --bytes (default 65536).
 *         open-commit-unoffered our stream opens with OPEN_COMMIT (its nonce
 *                              zeros) though our link Hello did not offer
 *                              OPEN_COMMITS ("open_commit_sent .."); then as
 *                              none, if the server let it.
 *       --second-pending opens a second stream (X+1, conn=1) beside ours and
 *       leaves it pending at the server: its OPEN_ACK gets no COMMIT and no
 *       TCP connect follows, so no accept() claims it ("pending conn=1 ..").
 *       Link lines: "open_sent conn=0 stream=X ..", "open_ack conn=C stream=X
 *       bufs=.. size=.. nonce=HEX", "open_nak conn=C stream=X code=N",
 *       "released conn=C stream=X", "stream_msg_other ..", "link_seq_gap ..",
 *       and the summary adds "link=1 stream=X open_acks=.. open_naks=..
 *       released=.. other_stream=.. unexpected=.. write_imm_lies=..
 *       tcp_bytes=.. lseq_sent=.. lseq_received=.. second_attach=0|1".
 *
 * --link is version 3 only (no --v1).
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
#define LINK_SLOTS       64u     /* a link's send slots (and send queue) */
#define LINK_QUEUE       256u    /* link messages waiting for a slot or a credit */
#define LINK_STREAMS     64u     /* streams per link this tool keeps */
#define LINK_PAYLOAD_MAX (CTRL_SLOT_SIZE - SDP_LH_SIZE)

enum attach_mode { ATTACH_AFTER_COMMIT, ATTACH_EARLY, ATTACH_NEVER };

/* listen --lie: what the rogue server tells a client (released-oob: its link). */
enum listen_lie { LLIE_NONE, LLIE_RELEASED_OOB, LLIE_BAD_MSEQ, LLIE_WITHHOLD_LACK };

static const char *listen_lie_name(enum listen_lie lie)
{
	switch (lie) {
	case LLIE_RELEASED_OOB: return "released-oob";
	case LLIE_BAD_MSEQ:     return "bad-mseq";
	case LLIE_WITHHOLD_LACK: return "withhold-lack";
	default:                return "none";
	}
}

/* A stream on a link: hello opens them, listen takes the client's OPENs. */
struct rstream {
	uint16_t idx, src_port;
	bool answered, opened, refused, committed, attach_sent, released;
	uint32_t tx_seq, rx_seq;      /* our last mseq; the peer's last mseq seen */
};

/* A link message waiting for a send slot or a link credit. */
struct lmsg {
	uint8_t kind, mid, len;
	uint16_t stream;
	uint8_t payload[LINK_PAYLOAD_MAX];
};

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
	/* A link (--link): its framing, credits and streams. */
	bool link;
	unsigned tx_slots, sq_out;    /* send slots; sends posted and not completed */
	uint32_t l_tx, l_peer_lack, l_peer_bufs; /* our last lseq, the peer's lack, its buffers */
	uint32_t l_rx, l_lack_sent;   /* the peer's last lseq taken in; the last lack we sent */
	bool l_starving;              /* the peer asked for a link CREDIT */
	struct rstream streams[LINK_STREAMS];
	unsigned nstreams;
	struct lmsg *queue;           /* LINK_QUEUE entries */
	unsigned q_head, q_tail;
	bool lie_told;
};

static struct {
	bool v1, no_commit, link;
	enum attach_mode attach;
	enum listen_lie lie;
	uint16_t lie_index;
	uint16_t buf_count;
	uint32_t buf_size;
	int count, streams;
	double hold_s, for_s;
	const char *addr, *port, *to, *src_addr;
	uint16_t src_port;
} opt = {
	.attach = ATTACH_AFTER_COMMIT, .count = 1, .streams = 1, .hold_s = 10,
};

static struct {
	unsigned long long data_bytes;
	unsigned attach_sent, hellos, commits, established, rejected, attach, detach, errors,
		commits_sent, links, opens, opened, refused, released, lies;
} tally;

FILE *logfp;
static double t_start;
volatile sig_atomic_t stop;
static volatile sig_atomic_t lie_requested; /* hello --lie bad-mseq: SIGUSR1 */
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
	if (sig == SIGUSR1)
		lie_requested = 1;
	else
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
	c->tx_slots = CTRL_SLOTS;
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
	c->cq = ibv_create_cq(c->id->verbs, (int)(rx_count + c->tx_slots + 4), c, c->cch, 0);
	if (!c->cq || ibv_req_notify_cq(c->cq, 0) != 0)
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RC;
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.cap.max_send_wr = c->tx_slots;
	attr.cap.max_recv_wr = rx_count;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	if (rdma_create_qp(c->id, c->pd, &attr) != 0)
		return -1;
	if (posix_memalign((void **)&c->rx_mem, 4096, (size_t)rx_count * rx_size) != 0 ||
	    posix_memalign((void **)&c->tx_mem, 4096, (size_t)c->tx_slots * CTRL_SLOT_SIZE) != 0) {
		errno = ENOMEM;
		return -1;
	}
	memset(c->rx_mem, 0, (size_t)rx_count * rx_size);
	c->rx_mr = ibv_reg_mr(c->pd, c->rx_mem, (size_t)rx_count * rx_size, IBV_ACCESS_LOCAL_WRITE);
	c->tx_mr = ibv_reg_mr(c->pd, c->tx_mem, (size_t)c->tx_slots * CTRL_SLOT_SIZE, 0);
	if (c->link && !c->queue)
		c->queue = calloc(LINK_QUEUE, sizeof(*c->queue));
	if (c->link && !c->queue)
		return -1;
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
	free(c->queue);
	conns[c->idx] = NULL;
	free(c);
}

/* One control message: base header (+ extension); mseq_ack = the last peer
 * message seen.  A v1 COMMIT is the bare header. */
static int send_ctrl(struct rconn *c, uint8_t mid, const struct sdp_ext *ext)
{
	unsigned slot = c->tx_next++ % c->tx_slots;
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


/* --- links (--link) --------------------------------------------------------- */

static struct sockaddr_storage to_addr;

/* The peer's link buffers still free for us: a CREDIT may take the last
 * one, everything else needs two (core/link.c). */
static uint32_t link_credits(const struct rconn *c)
{
	uint32_t out = c->l_tx - c->l_peer_lack;

	if (opt.lie == LLIE_WITHHOLD_LACK)
		return 1u << 20; /* the liar sends whatever the peer's credits say */
	return out >= c->l_peer_bufs ? 0 : c->l_peer_bufs - out;
}

/* Posts one link message now: the next lseq, our lack (every peer message
 * taken in, its buffer posted again). */
static int link_post(struct rconn *c, const struct lmsg *m)
{
	unsigned slot = c->tx_next++ % c->tx_slots;
	uint8_t *buf = c->tx_mem + (size_t)slot * CTRL_SLOT_SIZE;
	uint32_t len = (uint32_t)SDP_LH_SIZE + m->len;
	struct sdp_lh h = { .kind = m->kind, .stream = m->stream, .len = len,
			    .lack = opt.lie == LLIE_WITHHOLD_LACK ? 0 : c->l_rx };
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = c->tx_mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = SEND_TAG | ((uint64_t)m->stream << 16) | ((uint64_t)m->mid << 8) | slot,
		.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	h.lseq = ++c->l_tx;
	h.flags = link_credits(c) <= 2 ? SDP_LINK_FLAG_STARVING : 0;
	sdp_lh_to_wire(&h, buf);
	if (m->len)
		memcpy(buf + SDP_LH_SIZE, m->payload, m->len);
	if (ibv_post_send(c->id->qp, &wr, &bad) != 0) {
		logline("send_failed conn=%d link_kind=%u stream=%u: %s", c->idx, m->kind, m->stream,
			strerror(errno));
		return -1;
	}
	c->l_lack_sent = c->l_rx;
	c->l_starving = false;
	c->sq_out++;
	return 0;
}

/* Queued link messages go while there are slots and credits (in order). */
static void link_flush(struct rconn *c)
{
	while (c->q_head != c->q_tail && c->established && !c->destroy &&
	       c->sq_out < c->tx_slots && link_credits(c) >= 2) {
		if (link_post(c, &c->queue[c->q_head % LINK_QUEUE]) != 0)
			return;
		c->q_head++;
	}
}

static void link_send(struct rconn *c, uint8_t kind, uint8_t mid, uint16_t stream,
		      const void *payload, uint32_t len)
{
	struct lmsg *m;

	if (c->q_tail - c->q_head == LINK_QUEUE || len > LINK_PAYLOAD_MAX) {
		logline("link_queue_full conn=%d kind=%u stream=%u", c->idx, kind, stream);
		return;
	}
	m = &c->queue[c->q_tail++ % LINK_QUEUE];
	*m = (struct lmsg){ .kind = kind, .mid = mid, .len = (uint8_t)len, .stream = stream };
	if (len)
		memcpy(m->payload, payload, len);
	link_flush(c);
}

/* A CREDIT ahead of the queue (it may take the last credit) when half our
 * buffers were taken in unadvertised, or the peer asked (STARVING). */
static void maybe_link_credit(struct rconn *c)
{
	uint32_t unadvertised = c->l_rx - c->l_lack_sent;
	struct lmsg m = { .kind = SDP_LINK_CREDIT, .mid = 0xe0 | SDP_LINK_CREDIT };

	if (!c->link || !c->established || c->destroy || !unadvertised ||
	    opt.lie == LLIE_WITHHOLD_LACK)
		return;
	if (!c->l_starving && unadvertised < (c->rx_count + 1) / 2 && c->rx_count - unadvertised > 2)
		return;
	if (c->sq_out < c->tx_slots && link_credits(c) >= 1)
		link_post(c, &m);
}

/* One stream message (base header, extension) inside a STREAM link message. */
static void link_stream_ctrl(struct rconn *c, struct rstream *st, uint8_t mid,
			     const struct sdp_ext *ext)
{
	uint8_t payload[SDP_BSDH_SIZE + SDP_EXT_SIZE];
	uint32_t len = (uint32_t)SDP_BSDH_SIZE + (ext ? (uint32_t)SDP_EXT_SIZE : 0);
	struct sdp_bsdh h = { .mid = mid, .bufs = opt.buf_count, .len = len,
			      .mseq = ++st->tx_seq, .mseq_ack = st->rx_seq };

	sdp_bsdh_to_wire(&h, payload);
	if (ext)
		sdp_ext_to_wire(ext, payload + SDP_BSDH_SIZE);
	link_send(c, SDP_LINK_STREAM, mid, st->idx, payload, len);
}

static struct rstream *stream_find(struct rconn *c, uint16_t idx)
{
	for (unsigned i = 0; i < c->nstreams; i++)
		if (c->streams[i].idx == idx)
			return &c->streams[i];
	return NULL;
}

static struct rstream *stream_add(struct rconn *c, uint16_t idx)
{
	struct rstream *st;

	if (c->nstreams == LINK_STREAMS)
		return NULL;
	st = &c->streams[c->nstreams++];
	*st = (struct rstream){ .idx = idx };
	return st;
}

static void link_attach(struct rconn *c, struct rstream *st)
{
	if (st->attach_sent)
		return;
	link_stream_ctrl(c, st, SDP_MID_ATTACH, NULL);
	st->attach_sent = true;
	tally.attach_sent++;
	logline("attach_sent conn=%d stream=%u mseq=%u ack=%u", c->idx, st->idx, st->tx_seq,
		st->rx_seq);
}

/* --lie bad-mseq: two CREDIT_UPDATEs back to back, the first skipping one
 * mseq (so neither comes in sequence), on the channel (st NULL) or on
 * stream st of a link, before any ATTACH: the second one finds whatever
 * the first left. */
static void mseq_lie(struct rconn *c, struct rstream *st)
{
	uint32_t *tx_seq = st ? &st->tx_seq : &c->tx_seq;
	uint32_t expected = *tx_seq + 1;

	if (st ? st->attach_sent : c->attach_sent)
		return;
	++*tx_seq; /* the skipped one */
	for (int i = 0; i < 2; i++) {
		if (st)
			link_stream_ctrl(c, st, SDP_MID_CREDIT_UPDATE, NULL);
		else if (send_ctrl(c, SDP_MID_CREDIT_UPDATE, NULL) != 0)
			return;
	}
	tally.lies++;
	if (st)
		logline("mseq_lie conn=%d stream=%u mseq=%u expected=%u", c->idx, st->idx,
			expected + 1, expected);
	else
		logline("mseq_lie conn=%d mseq=%u expected=%u", c->idx, expected + 1, expected);
}

/* listen: a client's OPEN gets an OPEN_ACK (a random nonce, our geometry). */
static void link_on_open(struct rconn *c, uint16_t idx, const uint8_t *pl, uint32_t len)
{
	struct sdp_open o;
	struct sdp_open_ack a = { .buf_count = opt.buf_count,
				  .buf_size = opt.buf_size - (uint32_t)SDP_LH_SIZE };
	uint8_t ack[sizeof(struct sdp_open_ack_wire)];
	enum sdp_wire_error err = sdp_open_from_wire(pl, len, &o);
	char src[INET6_ADDRSTRLEN], dst[INET6_ADDRSTRLEN], nx[2 * SDP_NONCE_SIZE + 1];
	struct sdp_open_nak_wire nak = { .code = SDP_REJECT_RESOURCES };
	struct rstream *st;

	tally.opens++;
	if (err != SDP_WIRE_OK) {
		logline("open conn=%d stream=%u invalid=\"%s\"", c->idx, idx, sdp_wire_error_text(err));
		nak.code = SDP_REJECT_MALFORMED;
		link_send(c, SDP_LINK_OPEN_NAK, 0xe0 | SDP_LINK_OPEN_NAK, idx, &nak, sizeof(nak));
		return;
	}
	wire_addr_text(o.tuple.src_addr, src, sizeof(src));
	wire_addr_text(o.tuple.dst_addr, dst, sizeof(dst));
	logline("open conn=%d stream=%u src=%s sport=%u dst=%s dport=%u bufs=%u size=%u", c->idx, idx,
		src, o.tuple.src_port, dst, o.tuple.dst_port, o.buf_count, o.buf_size);
	st = stream_find(c, idx);
	if (st)
		logline("open_again conn=%d stream=%u", c->idx, idx);
	else
		st = stream_add(c, idx);
	if (!st) {
		link_send(c, SDP_LINK_OPEN_NAK, 0xe0 | SDP_LINK_OPEN_NAK, idx, &nak, sizeof(nak));
		return;
	}
	*st = (struct rstream){ .idx = idx, .src_port = o.tuple.src_port, .answered = true,
				.opened = true };
	random_bytes(a.nonce, sizeof(a.nonce));
	sdp_open_ack_to_wire(&a, ack);
	link_send(c, SDP_LINK_OPEN_ACK, 0xe0 | SDP_LINK_OPEN_ACK, idx, ack, sizeof(ack));
	hex(a.nonce, sizeof(a.nonce), nx);
	logline("open_ack_sent conn=%d stream=%u nonce=%s", c->idx, idx, nx);
	if (opt.lie == LLIE_RELEASED_OOB && !c->lie_told) {
		uint16_t bad = opt.lie_index;

		link_send(c, SDP_LINK_RELEASED, 0xe0 | SDP_LINK_RELEASED, bad, NULL, 0);
		c->lie_told = true;
		tally.lies++;
		logline("released_lie conn=%d stream=%u (never opened, past the client's table)", c->idx,
			bad);
	}
	if (opt.attach == ATTACH_EARLY)
		link_attach(c, st);
}

/* hello: OPEN for one of our streams, naming the tuple src (--src-addr or
 * the link's own address):src_port -> the server. */
static void link_send_open(struct rconn *c, struct rstream *st)
{
	struct sdp_open o = { .buf_count = opt.buf_count, .buf_size = opt.buf_size };
	uint8_t payload[sizeof(struct sdp_open_wire)];

	if (opt.src_addr) {
		struct addrinfo *ai = resolve(opt.src_addr, "0", false);
		addr_to_wire(ai->ai_addr, o.tuple.src_addr);
		freeaddrinfo(ai);
	} else {
		addr_to_wire(rdma_get_local_addr(c->id), o.tuple.src_addr);
	}
	addr_to_wire((struct sockaddr *)&to_addr, o.tuple.dst_addr);
	o.tuple.src_port = st->src_port;
	o.tuple.dst_port = addr_port((struct sockaddr *)&to_addr);
	sdp_open_to_wire(&o, payload);
	link_send(c, SDP_LINK_OPEN, 0xe0 | SDP_LINK_OPEN, st->idx, payload, sizeof(payload));
	logline("open_sent conn=%d stream=%u sport=%u bufs=%u size=%u", c->idx, st->idx, st->src_port,
		o.buf_count, o.buf_size);
}

static void send_link_commit(struct rconn *c, struct rstream *st)
{
	uint8_t nonce[SDP_NONCE_SIZE];
	char nx[2 * SDP_NONCE_SIZE + 1];
	struct sdp_ext e = { 0 };

	random_bytes(nonce, sizeof(nonce));
	sdp_nonce_to_ext(nonce, &e);
	link_stream_ctrl(c, st, SDP_MID_COMMIT, &e);
	hex(nonce, sizeof(nonce), nx);
	logline("commit_posted conn=%d stream=%u nonce=%s", c->idx, st->idx, nx);
}

/* hello: the server's answer to one of our OPENs; the link is settled once
 * every stream has its answer. */
static void link_on_open_answer(struct rconn *c, const struct sdp_lh *lh, const uint8_t *pl)
{
	struct rstream *st = stream_find(c, lh->stream);
	struct sdp_open_ack a;
	char nx[2 * SDP_NONCE_SIZE + 1];
	bool all = true;

	if (listen_mode || !st || st->answered) {
		logline("open_answer_unexpected conn=%d stream=%u kind=%u", c->idx, lh->stream, lh->kind);
		return;
	}
	st->answered = true;
	if (lh->kind == SDP_LINK_OPEN_NAK) {
		st->refused = true;
		tally.refused++;
		logline("open_nak conn=%d stream=%u code=%u", c->idx, st->idx, pl[0]);
	} else if (sdp_open_ack_from_wire(pl, sizeof(struct sdp_open_ack_wire), &a) != SDP_WIRE_OK) {
		logline("open_ack_invalid conn=%d stream=%u", c->idx, st->idx);
	} else {
		st->opened = true;
		tally.opened++;
		hex(a.nonce, sizeof(a.nonce), nx);
		logline("open_ack conn=%d stream=%u bufs=%u size=%u nonce=%s", c->idx, st->idx,
			a.buf_count, a.buf_size, nx);
		if (!opt.no_commit)
			send_link_commit(c, st);
	}
	for (unsigned i = 0; i < c->nstreams; i++)
		all &= c->streams[i].answered;
	c->settled |= all;
}

/* A stream message inside a STREAM link message. */
static void link_on_stream(struct rconn *c, uint16_t idx, const uint8_t *m, uint32_t len)
{
	struct rstream *st = stream_find(c, idx);
	struct sdp_bsdh h;
	struct sdp_ext e = { 0 };
	enum sdp_wire_error err = sdp_bsdh_from_wire(m, len, c->rx_size, &h);
	char pv[PREVIEW_BYTES * 4 + 1], nx[2 * SDP_NONCE_SIZE + 1];

	if (!st) {
		logline("stream_msg_unknown conn=%d stream=%u len=%u", c->idx, idx, len);
		return;
	}
	if (err != SDP_WIRE_OK) {
		logline("msg_invalid conn=%d stream=%u len=%u first=0x%02x err=%s", c->idx, idx, len,
			len ? m[0] : 0, sdp_wire_error_text(err));
		return;
	}
	logline("msg conn=%d stream=%u mid=%u len=%u mseq=%u ack=%u bufs=%u", c->idx, idx, h.mid,
		h.len, h.mseq, h.mseq_ack, h.bufs);
	st->rx_seq = h.mseq;
	if (h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE && h.mid != SDP_MID_DATA)
		sdp_ext_from_wire(m + SDP_BSDH_SIZE, &e);
	switch (h.mid) {
	case SDP_MID_COMMIT:
		tally.commits++;
		st->committed = true;
		if (h.len >= SDP_BSDH_SIZE + SDP_EXT_SIZE) {
			uint8_t nonce[SDP_NONCE_SIZE];
			sdp_nonce_from_ext(&e, nonce);
			hex(nonce, sizeof(nonce), nx);
		} else {
			snprintf(nx, sizeof(nx), "-");
		}
		logline("commit conn=%d stream=%u nonce=%s", c->idx, idx, nx);
		if (listen_mode && opt.lie == LLIE_BAD_MSEQ)
			mseq_lie(c, st);
		if (listen_mode && opt.attach == ATTACH_AFTER_COMMIT)
			link_attach(c, st);
		break;
	case SDP_MID_DATA:
		tally.data_bytes += h.len - SDP_BSDH_SIZE;
		preview(m + SDP_BSDH_SIZE, h.len - SDP_BSDH_SIZE, pv);
		logline("data conn=%d stream=%u bytes=%u total=%llu preview=%s", c->idx, idx,
			h.len - (uint32_t)SDP_BSDH_SIZE, tally.data_bytes, pv);
		break;
	case SDP_MID_ATTACH:
		tally.attach++;
		logline("attach conn=%d stream=%u", c->idx, idx);
		break;
	case SDP_MID_DETACH:
		tally.detach++;
		logline("detach conn=%d stream=%u reason=%u", c->idx, idx, e.a);
		break;
	case SDP_MID_ABORT:
		logline("abort conn=%d stream=%u errno=%u", c->idx, idx, e.a);
		break;
	default:
		break;
	}
}

/* A SEND on a link: its header (order, the peer's lack, STARVING), then its
 * kind; the buffer goes back, and the message counts as taken in. */
static void link_on_recv(struct rconn *c, uint32_t slot, uint32_t len)
{
	const uint8_t *m = c->rx_mem + (size_t)slot * c->rx_size;
	struct sdp_lh lh;
	enum sdp_wire_error err = sdp_lh_from_wire(m, len, c->rx_size, &lh);

	if (err != SDP_WIRE_OK) {
		logline("link_msg_invalid conn=%d len=%u first=0x%02x err=%s", c->idx, len,
			len ? m[0] : 0, sdp_wire_error_text(err));
		c->l_rx++;
		goto repost;
	}
	if (lh.lseq != c->l_rx + 1)
		logline("link_seq_gap conn=%d lseq=%u expected=%u", c->idx, lh.lseq, c->l_rx + 1);
	if ((uint32_t)(lh.lack - c->l_peer_lack) <= (uint32_t)(c->l_tx - c->l_peer_lack))
		c->l_peer_lack = lh.lack;
	else
		logline("link_ack_invalid conn=%d lack=%u lseq_sent=%u", c->idx, lh.lack, c->l_tx);
	if (lh.flags & SDP_LINK_FLAG_STARVING)
		c->l_starving = true;
	c->l_rx = lh.lseq;
	switch ((enum sdp_link_kind)lh.kind) {
	case SDP_LINK_STREAM:
		link_on_stream(c, lh.stream, m + SDP_LH_SIZE, lh.len - (uint32_t)SDP_LH_SIZE);
		break;
	case SDP_LINK_CREDIT:
		break;
	case SDP_LINK_OPEN:
		if (listen_mode)
			link_on_open(c, lh.stream, m + SDP_LH_SIZE, lh.len - (uint32_t)SDP_LH_SIZE);
		else
			logline("unexpected conn=%d link_kind=OPEN stream=%u", c->idx, lh.stream);
		break;
	case SDP_LINK_OPEN_ACK:
	case SDP_LINK_OPEN_NAK:
		link_on_open_answer(c, &lh, m + SDP_LH_SIZE);
		break;
	case SDP_LINK_RELEASED:
		tally.released++;
		logline("released conn=%d stream=%u", c->idx, lh.stream);
		if (stream_find(c, lh.stream))
			stream_find(c, lh.stream)->released = true;
		break;
	case SDP_LINK_CLIMB_REQ:
	case SDP_LINK_CLIMB_CHAL:
	case SDP_LINK_CLIMB_PROVE:
	case SDP_LINK_CLIMB_ACK:
	case SDP_LINK_CLIMB_NAK:
		logline("climb_msg conn=%d kind=%u stream=%u", c->idx, lh.kind, lh.stream);
		break;
	case SDP_LINK_OPEN_COMMIT: /* never: its HelloAck does not offer them */
		logline("unexpected conn=%d link_kind=OPEN_COMMIT stream=%u", c->idx, lh.stream);
		break;
	}
repost:
	if (post_recv(c, slot) != 0)
		logline("repost_failed conn=%d: %s", c->idx, strerror(errno));
	link_flush(c);
	maybe_link_credit(c);
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
	if (c->link) {
		link_on_recv(c, (uint32_t)slot, len);
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
		if (listen_mode && opt.lie == LLIE_BAD_MSEQ)
			mseq_lie(c, NULL);
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
			if ((wc[i].wr_id & SEND_TAG) && c->sq_out)
				c->sq_out--;
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
					if (c->link)
						logline("commit_sent conn=%d stream=%u", c->idx,
							(unsigned)(uint16_t)(wc[i].wr_id >> 16));
					else
						logline("commit_sent conn=%d", c->idx);
				}
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV) {
				on_recv(c, wc[i].wr_id, wc[i].byte_len);
			} else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				uint32_t imm = ntohl(wc[i].imm_data);

				logline("write_imm conn=%d stream=%u bytes=%u", c->idx,
					c->link ? SDP_LINK_IMM_STREAM(imm) : 0, wc[i].byte_len);
				if (c->link)
					c->l_rx++;
				if (wc[i].wr_id < c->rx_count && post_recv(c, (uint32_t)wc[i].wr_id) != 0)
					logline("repost_failed conn=%d: %s", c->idx, strerror(errno));
			}
		}
		if (c->link) {
			link_flush(c);
			maybe_link_credit(c);
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
		logline("hello conn=%d src=%s sport=%u dst=%s dport=%u bufs=%u size=%u version=%u peer=%s "
			"link=%d", c ? c->idx : -1, src, h.tuple.src_port, dst, h.tuple.dst_port,
			h.buf_count, h.buf_size, version, peer, (h.flags & SDP_HELLO_FLAG_LINK) ? 1 : 0);
		/* A link Hello gets a link HelloAck only from a rogue that speaks links. */
		if (c && opt.link && (h.flags & SDP_HELLO_FLAG_LINK)) {
			c->link = true;
			c->tx_slots = LINK_SLOTS;
			c->l_peer_bufs = h.buf_count;
			ack.flags = SDP_HELLO_FLAG_LINK;
			tally.links++;
		}
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

static void hello_connect(struct rconn *c)
{
	struct sdp_hello h = { .version = SDP_WIRE_VERSION, .buf_count = opt.buf_count,
			       .buf_size = opt.buf_size };
	struct sdp_hello_wire w;
	struct rdma_conn_param param;
	uint32_t count = opt.buf_count < HELLO_POST_MAX ? opt.buf_count : HELLO_POST_MAX;
	uint32_t size = opt.buf_size < HELLO_POST_SIZE ? opt.buf_size : HELLO_POST_SIZE;

	if (c->link)
		c->tx_slots = LINK_SLOTS;
	if (conn_setup(c, count, size) != 0) {
		logline("error conn=%d setup: %s", c->idx, strerror(errno));
		tally.errors++;
		c->settled = c->destroy = true;
		return;
	}
	c->claim_bufs = opt.buf_count;
	if (opt.src_addr && !c->link) {
		struct addrinfo *ai = resolve(opt.src_addr, "0", false);
		addr_to_wire(ai->ai_addr, h.tuple.src_addr);
		freeaddrinfo(ai);
	} else {
		/* A link's Hello names its own address; --src-addr goes into its OPENs. */
		addr_to_wire(rdma_get_local_addr(c->id), h.tuple.src_addr);
	}
	addr_to_wire((struct sockaddr *)&to_addr, h.tuple.dst_addr);
	h.tuple.src_port = c->link ? 0 : c->src_port;
	h.flags = c->link ? SDP_HELLO_FLAG_LINK : 0;
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

	c->established = true;
	c->settled = !c->link || opt.streams == 0; /* a link: once its OPENs are answered */
	tally.established++;
	if (pd && pdlen >= need) {
		memset(&raw, 0, sizeof(raw));
		memcpy(&raw, pd, need);
		if (opt.v1 && raw.version == 1)
			raw.version = SDP_WIRE_VERSION; /* same layout, no nonce */
		err = sdp_hello_ack_from_wire(&raw, sizeof(raw), &ack);
	}
	if (c->link) {
		if (err == SDP_WIRE_OK && !(ack.flags & SDP_HELLO_FLAG_LINK))
			err = SDP_WIRE_BAD_FLAGS;
		if (err != SDP_WIRE_OK) {
			logline("established conn=%d link=1 helloack_invalid=\"%s\" len=%zu", c->idx,
				sdp_wire_error_text(err), pdlen);
			c->settled = true;
			return;
		}
		c->l_peer_bufs = ack.buf_count;
		logline("established conn=%d link=1 bufs=%u size=%u", c->idx, ack.buf_count,
			ack.buf_size);
		for (int j = 0; j < opt.streams; j++) {
			struct rstream *st = stream_add(c, (uint16_t)(opt.lie_index + j));

			st->src_port = (uint16_t)(c->src_port + j);
			link_send_open(c, st);
		}
		return;
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
			logline("established conn=%d%s", c->idx, c->link ? " link=1" : "");
			if (c->link)
				link_flush(c); /* answers to OPENs that came first */
			else if (opt.attach == ATTACH_EARLY)
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

/* hello --lie bad-mseq, on SIGUSR1: a sequence gap on every channel (or
 * opened stream) the server accepted. */
static void tell_mseq_lies(void)
{
	for (int i = 0; i < nconns; i++) {
		struct rconn *c = conns[i];

		if (!c || !c->established || c->destroy)
			continue;
		if (!c->link) {
			mseq_lie(c, NULL);
			continue;
		}
		for (unsigned j = 0; j < c->nstreams; j++)
			if (c->streams[j].opened)
				mseq_lie(c, &c->streams[j]);
	}
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
		if (lie_requested) {
			lie_requested = 0;
			tell_mseq_lies();
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
	logline("listening addr=%s port=%s attach=%s version=%d link=%d lie=%s uid=%u", a, opt.port,
		opt.attach == ATTACH_EARLY ? "early" : opt.attach == ATTACH_NEVER ? "never" : "after-commit",
		opt.v1 ? 1 : SDP_WIRE_VERSION, opt.link ? 1 : 0,
		listen_lie_name(opt.lie), (unsigned)getuid());
	loop(opt.for_s > 0 ? mono_ms() + opt.for_s * 1000.0 : 0, false);
	teardown_all();
	rdma_destroy_id(lid);
	fprintf(logfp, "data_bytes=%llu attach_sent=%u hellos=%u commits=%u links=%u opens=%u "
		"released=%u lies=%u\n", tally.data_bytes, tally.attach_sent, tally.hellos, tally.commits,
		tally.links, tally.opens, tally.released, tally.lies);
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
	int per = opt.link ? opt.streams : 1; /* source ports per rdma_cm connection */

	parse_to(opt.to, &to_addr);
	if ((unsigned)opt.src_port + (unsigned)(opt.count * per) - 1 > 65535)
		die("--src-port + --count (x --streams) leaves the port range");
	open_channel();
	logline("start to=%s count=%d src_port=%u bufs=%u size=%u commit=%s version=%d link=%d "
		"streams=%d first_index=%u uid=%u", opt.to, opt.count, opt.src_port, opt.buf_count,
		opt.buf_size, opt.no_commit ? "no" : "yes", opt.v1 ? 1 : SDP_WIRE_VERSION,
		opt.link ? 1 : 0, opt.link ? opt.streams : 0, opt.lie_index, (unsigned)getuid());
	for (int i = 0; i < opt.count; i++) {
		struct rdma_cm_id *id;
		struct rconn *c;

		if (rdma_create_id(cm_ch, &id, NULL, RDMA_PS_TCP) != 0)
			die("rdma_create_id: %s", strerror(errno));
		c = conn_new(id);
		if (!c)
			die("out of memory");
		c->src_port = (uint16_t)(opt.src_port + i * per);
		c->link = opt.link;
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&to_addr, RESOLVE_MS) != 0) {
			logline("error conn=%d rdma_resolve_addr: %s", c->idx, strerror(errno));
			tally.errors++;
			c->settled = c->destroy = true;
		}
	}
	loop(0, true);
	teardown_all();
	fprintf(logfp, "established=%u rejected=%u attach=%u detach=%u data_bytes=%llu errors=%u "
		"commits_sent=%u opened=%u refused=%u released=%u\n", tally.established, tally.rejected,
		tally.attach, tally.detach, tally.data_bytes, tally.errors, tally.commits_sent,
		tally.opened, tally.refused, tally.released);
	fflush(logfp);
	return 0;
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: rogue listen --port P [--addr A] [--attach after-commit|early|never]\n"
		"                    [--lie none|bad-mseq] [--link [--lie released-oob] [--stream-index I]]\n"
		"                    [--buf-count C] [--buf-size S] [--v1] [--log FILE] [--for SECONDS]\n"
		"       rogue hello --to ADDR:PORT --src-port N [--src-addr A] [--count K]\n"
		"                   [--link [--streams S] [--stream-index I]]\n"
		"                   [--buf-count C] [--buf-size S] [--no-commit] [--hold SECONDS]\n"
		"                   [--lie bad-mseq|withhold-lack] [--v1] [--log FILE]\n"
		"       rogue peer --to ADDR:PORT --lie none|never-answer-cancel|false-wrcompl|\n"
		"                  wrong-offset|stacked-srcavail|abort-disconnect|\n"
		"                  (with --link:) open-dup-index|open-index-oob|bad-lseq|bad-lack|\n"
		"                  stream-unopened|released-in-use|write-imm-other|false-solicited|\n"
		"                  open-commit-unoffered\n"
		"                  [--link [--stream-index I] [--second-pending]]\n"
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
	{ "link", no_argument, NULL, 'N' },
	{ "streams", required_argument, NULL, 'Y' },
	{ "stream-index", required_argument, NULL, 'i' },
	{ "second-pending", no_argument, NULL, 'P' },
	{ NULL, 0, NULL, 0 },
};

static const char *const lie_names[] = {
	[LIE_NONE] = "none",
	[LIE_NEVER_ANSWER_CANCEL] = "never-answer-cancel",
	[LIE_FALSE_WRCOMPL] = "false-wrcompl",
	[LIE_WRONG_OFFSET] = "wrong-offset",
	[LIE_STACKED_SRCAVAIL] = "stacked-srcavail",
	[LIE_ABORT_DISCONNECT] = "abort-disconnect",
	[LIE_OPEN_DUP_INDEX] = "open-dup-index",
	[LIE_OPEN_INDEX_OOB] = "open-index-oob",
	[LIE_BAD_LSEQ] = "bad-lseq",
	[LIE_BAD_LACK] = "bad-lack",
	[LIE_STREAM_UNOPENED] = "stream-unopened",
	[LIE_RELEASED_IN_USE] = "released-in-use",
	[LIE_WRITE_IMM_OTHER] = "write-imm-other",
	[LIE_FALSE_SOLICITED] = "false-solicited",
	[LIE_OPEN_COMMIT_UNOFFERED] = "open-commit-unoffered",
};

_Static_assert(sizeof(lie_names) / sizeof(lie_names[0]) == LIE_COUNT, "a lie without a name");

const char *peer_lie_name(enum peer_lie lie)
{
	return lie_names[lie];
}

bool peer_lie_needs_link(enum peer_lie lie)
{
	return lie >= LIE_OPEN_DUP_INDEX;
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

static const char *mode;
static bool index_given;

static enum listen_lie listen_lie_from_name(const char *s)
{
	if (strcmp(s, "none") == 0)
		return LLIE_NONE;
	if (strcmp(s, "released-oob") == 0)
		return LLIE_RELEASED_OOB;
	if (strcmp(s, "bad-mseq") == 0)
		return LLIE_BAD_MSEQ;
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
	case 'L':
		if (strcmp(mode, "listen") == 0)
			opt.lie = listen_lie_from_name(arg);
		else if (strcmp(mode, "hello") == 0 && strcmp(arg, "bad-mseq") == 0)
			opt.lie = LLIE_BAD_MSEQ;
		else if (strcmp(mode, "hello") == 0 && strcmp(arg, "withhold-lack") == 0)
			opt.lie = LLIE_WITHHOLD_LACK;
		else if (strcmp(mode, "peer") == 0)
			popt.lie = lie_from_name(arg);
		else
			usage();
		break;
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
	case 'P': popt.second_pending = true; break;
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
	case 'N': opt.link = true; break;
	case 'Y': opt.streams = (int)number(arg, 0, LINK_STREAMS); break;
	case 'i':
		opt.lie_index = (uint16_t)number(arg, 0, SDP_LINK_STREAMS_MAX - 1);
		index_given = true;
		break;
	default: usage();
	}
}

/* What a mode needs, and what the buffers it really posts may be: within
 * the wire's limits and an unprivileged RLIMIT_MEMLOCK. */
static void check_mode_options(void)
{
	bool posts = strcmp(mode, "hello") != 0;

	if (strcmp(mode, "listen") == 0 ? !opt.port : !opt.to)
		usage();
	if (strcmp(mode, "hello") == 0 && !opt.src_port)
		usage();
	if (!opt.link && (opt.lie == LLIE_RELEASED_OOB || opt.lie == LLIE_WITHHOLD_LACK ||
			  opt.streams != 1 || index_given ||
			  popt.second_pending || peer_lie_needs_link(popt.lie))) {
		fprintf(stderr, "rogue %s: --streams, --stream-index, --second-pending and link lies "
			"need --link\n", mode);
		exit(2);
	}
	if (popt.second_pending && (popt.lie == LIE_WRITE_IMM_OTHER || popt.lie == LIE_OPEN_DUP_INDEX)) {
		fprintf(stderr, "rogue peer: --second-pending and %s both need the second stream\n",
			peer_lie_name(popt.lie));
		exit(2);
	}
	if (opt.link && (opt.v1 || (popt.wire_version && popt.wire_version < SDP_WIRE_VERSION))) {
		fprintf(stderr, "rogue %s: links speak wire version %d only\n", mode, SDP_WIRE_VERSION);
		exit(2);
	}
	if (strcmp(mode, "hello") == 0 && (unsigned)opt.lie_index + (unsigned)opt.streams > SDP_LINK_STREAMS_MAX) {
		fprintf(stderr, "rogue hello: --stream-index + --streams past %u\n", SDP_LINK_STREAMS_MAX);
		exit(2);
	}
	/* released-oob, open-index-oob: one past the library's default table of
	 * SDPSHIM_LINK_STREAMS = 1024 (its first byte past the end). */
	if (!index_given && (opt.lie == LLIE_RELEASED_OOB || popt.lie == LIE_OPEN_INDEX_OOB))
		opt.lie_index = 1024;
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
	popt.link = opt.link;
	popt.stream_index = opt.lie_index;
	if (!popt.wire_version)
		popt.wire_version = opt.v1 ? 1 : SDP_WIRE_VERSION;
	if (opt.for_s > 0)
		popt.for_s = opt.for_s;
	return run_peer(&popt);
}

int main(int argc, char **argv)
{
	const char *logpath = NULL;
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
	check_mode_options();
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
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (strcmp(mode, "peer") == 0)
		return run_peer_mode();
	return strcmp(mode, "listen") == 0 ? run_listen() : run_hello();
}
