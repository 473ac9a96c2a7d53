/* Unit tests (TAP) of the climb's messages (core/climb.c) on the zero-copy
 * model's connection (tests/model/): the stream is held as a failover
 * leaves it, and the test plays the link and the peer (REQ, CHAL, PROVE,
 * ACK with the MACs an honest peer computes).  What is checked: a message
 * that crosses the end of an attempt on this side is ignored (a race, not
 * a lie: climb_on_step true), no climb step outlives the climb, and a
 * message out of turn from a liar is still refused (false: the link
 * fails), a responder without resources refuses cleanly, a close ends
 * the attempt, and a held stream reports its TCP socket's error and
 * unsent bytes.  Each case runs in a child process. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"
#include "base/hmac.h"
#include "base/policy.h"
#include "base/real.h"
#include "core/conn_internal.h"
#include "core/link.h"
#include "tap.h"
#include "tests/model/zcmodel.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define FAKE_LINK ((struct sdp_link *)0x1) /* never dereferenced: the link is the test's */
#define IDX       3u

static const struct zcm_opts opts = { .quiet = true };

/* ---------------------------------------------- the link, as the test */

static struct {
	unsigned n;
	uint8_t kind;
	uint8_t payload[64];
} sent;

int link_stream_setup(struct sdp_conn *c, struct sdp_link *link, uint16_t idx)
{
	return 0;
}

int link_stream_send_kind(struct sdp_conn *c, uint8_t kind, const void *payload, uint32_t len)
{
	sent.n++;
	sent.kind = kind;
	memcpy(sent.payload, payload, len < sizeof(sent.payload) ? len : sizeof(sent.payload));
	return 0;
}

int link_client_open(struct sdp_conn *c, const struct sockaddr *dst, socklen_t dst_len,
		     enum sdp_reason *reason)
{
	return 0; /* on a link; the test sends the REQ as the link would once up */
}

/* The responder's refusals: how many, the last code, and whether the
 * stream the test names was locked when it went. */
static struct {
	unsigned n;
	uint8_t code;
	bool stream_locked;
	struct sdp_conn *stream;
} refused;

void climb_refuse(struct sdp_link *link, uint16_t idx, uint8_t code)
{
	refused.n++;
	refused.code = code;
	refused.stream_locked = refused.stream && pthread_mutex_trylock(&refused.stream->lock) != 0;
	if (refused.stream && !refused.stream_locked)
		pthread_mutex_unlock(&refused.stream->lock);
}

/* The index handed back after a setup: how often, and how many refusals
 * had gone before it (a NAK says the index was never taken). */
static struct {
	unsigned n;
	unsigned refusals_before;
} unsetup;

void link_stream_unsetup(struct sdp_conn *c)
{
	unsetup.n++;
	unsetup.refusals_before = refused.n;
}

static bool fail_setup_tx; /* the next conn_setup_tx fails (no memory) */

/* The model's send slots, as the new channel's (linked: ordinary memory). */
int conn_setup_tx(struct sdp_conn *c, uint32_t peer_buf_size, uint16_t peer_buf_count)
{
	if (fail_setup_tx) {
		fail_setup_tx = false;
		return -ENOMEM;
	}
	c->peer_buf_size = peer_buf_size;
	c->peer_buf_count = peer_buf_count;
	c->tx_peer_bufs = peer_buf_count;
	c->tx_nslots = ZCM_BUF_COUNT + 1;
	return 0;
}

static void owner_event(void *owner, struct sdp_conn *conn, const struct conn_event_info *info) {}
static void owner_hold(void *owner) {}
static const struct conn_owner_ops owner_ops = { owner_event, owner_hold, owner_hold };

/* ------------------------------------------------------- the peer's MACs */

static size_t tuple_bytes(const struct sdp_tuple *t, uint8_t out[36])
{
	memcpy(out, t->src_addr, 16);
	memcpy(out + 16, t->dst_addr, 16);
	out[32] = (uint8_t)(t->src_port >> 8);
	out[33] = (uint8_t)t->src_port;
	out[34] = (uint8_t)(t->dst_port >> 8);
	out[35] = (uint8_t)t->dst_port;
	return 36;
}

/* docs/upgrade.md: MAC(K, role || Ni || Nr || tuple [|| cut]), K the key
 * both ends derived at the hold (read from c: the peer has the same). */
static void peer_mac(const struct sdp_conn *c, char role, const uint64_t *cut, uint8_t out[32])
{
	uint8_t msg[1 + 2 * SDP_NONCE_SIZE + 36 + 8];
	size_t len = 0;

	msg[len++] = (uint8_t)role;
	memcpy(msg + len, c->climb.nonce_i, SDP_NONCE_SIZE);
	len += SDP_NONCE_SIZE;
	memcpy(msg + len, c->climb.nonce_r, SDP_NONCE_SIZE);
	len += SDP_NONCE_SIZE;
	len += tuple_bytes(&c->tuple, msg + len);
	if (cut) {
		for (int i = 7; i >= 0; i--)
			msg[len++] = (uint8_t)(*cut >> (8 * i));
	}
	hmac_sha256(c->climb.key, CLIMB_KEY_SIZE, msg, len, out);
}

static void prove_payload(const struct sdp_conn *c, uint64_t cut, bool honest, uint8_t *out)
{
	uint8_t mac[32];

	peer_mac(c, 'i', &cut, mac);
	if (!honest)
		mac[0] ^= 1;
	sdp_climb_cut_to_wire(mac, cut, out);
}

static void chal_payload(struct sdp_conn *c, uint8_t *out)
{
	struct sdp_climb_chal ch = { .buf_count = ZCM_BUF_COUNT, .buf_size = ZCM_BUF_SIZE };

	memset(ch.nonce, 0x44, sizeof(ch.nonce));
	memcpy(c->climb.nonce_r, ch.nonce, sizeof(ch.nonce)); /* what on_chal takes */
	peer_mac(c, 'r', NULL, ch.mac);
	memset(c->climb.nonce_r, 0, sizeof(c->climb.nonce_r));
	sdp_climb_chal_to_wire(&ch, out);
}

/* -------------------------------------------------------------- streams */

/* The model's connection, moved to TCP by a failover and held (as
 * switch.c's finish_if_done leaves it), its last channel released. */
static struct sdp_conn *held_stream(bool is_server)
{
	struct sdp_conn *c = zcm_open(&opts);
	int sv[2];
	bool held;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		abort();
	c->is_server = is_server;
	c->tcp_fd = sv[0];
	c->policy.climb = true;
	c->owner_ops = &owner_ops;
	c->tuple.src_addr[10] = c->tuple.src_addr[11] = 0xff;
	c->tuple.src_addr[15] = 1;
	c->tuple.dst_addr[10] = c->tuple.dst_addr[11] = 0xff;
	c->tuple.dst_addr[15] = 2;
	c->tuple.src_port = 40000;
	c->tuple.dst_port = 5000;
	memset(c->nonce_local, 0x11, sizeof(c->nonce_local));
	memset(c->nonce_peer, 0x22, sizeof(c->nonce_peer));
	conn_lock(c);
	climb_note_switch(c, SDP_REASON_FAILOVER);
	conn_phase_start(c, CONN_SWITCHING);
	held = climb_hold(c);
	conn_unlock(c);
	zcm_settle(); /* the channel's release (progress thread) */
	if (!held || c->phase != CONN_HELD || !c->climb.released)
		printf("#   the stream is not held: phase %s\n", conn_phase_name(c->phase));
	return c;
}

/* The client's REQ reaches the held server stream: its CHAL goes out. */
static bool req_arrives(struct sdp_conn *c)
{
	struct sdp_climb_req r = { .tuple = c->tuple, .buf_count = ZCM_BUF_COUNT,
				   .buf_size = ZCM_BUF_SIZE };
	struct sdp_policy lp;

	policy_default(&lp);
	lp.climb = true;
	memset(r.nonce, 0x33, sizeof(r.nonce));
	sent.n = 0;
	climb_on_req(FAKE_LINK, IDX, &r, &lp);
	if (sent.n != 1 || sent.kind != SDP_LINK_CLIMB_CHAL || c->climb.step != CLIMB_CHAL_SENT) {
		printf("#   no CHAL: %u sent, kind %u, step %d\n", sent.n, sent.kind, (int)c->climb.step);
		return false;
	}
	return true;
}

/* A link message for c, as link.c's on_climb_step hands it over. */
static bool step(struct sdp_conn *c, uint8_t kind, const uint8_t *payload)
{
	bool ok;

	conn_lock(c);
	ok = climb_on_step(c, kind, payload);
	conn_unlock(c);
	return ok;
}

static int expect(int cond, const char *what)
{
	if (!cond)
		printf("#   failed: %s\n", what);
	return cond;
}

/* A held server stream whose CHAL is out, and the honest client's PROVE
 * of it (its cut: what the server has read); NULL if no CHAL went. */
static struct sdp_conn *server_chal_out(uint8_t prove[sizeof(struct sdp_climb_prove_wire)])
{
	struct sdp_conn *c = held_stream(true);

	if (!req_arrives(c))
		return NULL;
	prove_payload(c, c->climb.tcp_rx_off, true, prove);
	return c;
}

/* ---------------------------------------------------------------- cases */

/* CI71: the server's CHAL is out when the stream leaves the climb for good
 * (switch.c's conn_switch_wait for a fork: climb_give_up at once); the
 * client, committed, sends its PROVE: ignored, the link stands. */
static int test_prove_after_give_up(void)
{
	uint8_t prove[sizeof(struct sdp_climb_prove_wire)];
	struct sdp_conn *c = server_chal_out(prove);
	int ok = 1;

	if (!c)
		return 0;
	conn_lock(c);
	climb_give_up(c, "fork or exec");
	conn_unlock(c);
	ok &= expect(c->phase == CONN_FALLBACK, "the stream stays on TCP");
	sent.n = 0;
	ok &= expect(step(c, SDP_LINK_CLIMB_PROVE, prove), "the late PROVE is ignored");
	ok &= expect(c->phase == CONN_FALLBACK && sent.n == 0, "nothing moved, no ACK");
	return ok;
}

/* A server stream climbs back; no step is left behind, so its next move
 * to plain TCP ignores a late message as any FALLBACK stream does, while
 * the same message on the open stream is still a lie. */
static int test_no_step_outlives_the_climb(void)
{
	uint8_t prove[sizeof(struct sdp_climb_prove_wire)];
	struct sdp_conn *c = server_chal_out(prove);
	int ok = 1;

	if (!c)
		return 0;
	sent.n = 0;
	ok &= expect(step(c, SDP_LINK_CLIMB_PROVE, prove), "the PROVE is taken");
	ok &= expect(sent.n == 1 && sent.kind == SDP_LINK_CLIMB_ACK, "an ACK answers it");
	ok &= expect(c->phase == CONN_OPEN, "the stream is back on RDMA");
	ok &= expect(c->climb.step == CLIMB_IDLE, "no climb step outlives the climb");
	ok &= expect(!step(c, SDP_LINK_CLIMB_PROVE, prove), "a replayed PROVE on it is refused");
	conn_lock(c);
	conn_set_phase(c, CONN_SWITCHING); /* a second failover, to plain TCP */
	conn_set_phase(c, CONN_FALLBACK);
	conn_unlock(c);
	ok &= expect(step(c, SDP_LINK_CLIMB_PROVE, prove), "a late PROVE in FALLBACK is ignored");
	return ok;
}

/* The client's attempt: its bound passes with the ACK still out (it resets
 * the stream); the ACK that then arrives moves nothing and fails no link. */
static int test_late_ack_after_reset(void)
{
	uint8_t chal[sizeof(struct sdp_climb_chal_wire)], ack[sizeof(struct sdp_climb_ack_wire)];
	struct sdp_conn *c = held_stream(false);
	int ok = 1;

	zcm_advance(c->climb.backoff_ms + 1); /* the retry timer: start_attempt, deferred */
	zcm_settle();
	ok &= expect(c->climb.step == CLIMB_DIALING, "the client dials");
	climb_send_req(c); /* as the link does once it is up */
	ok &= expect(sent.kind == SDP_LINK_CLIMB_REQ, "its REQ goes");
	chal_payload(c, chal);
	sent.n = 0;
	ok &= expect(step(c, SDP_LINK_CLIMB_CHAL, chal), "the CHAL is taken");
	ok &= expect(sent.kind == SDP_LINK_CLIMB_PROVE && c->phase == CONN_CLIMB_HALF,
		     "the PROVE goes, writes on the new channel");
	zcm_advance(sdp_tun.connect_timeout_ms + 1); /* no ACK within the bound */
	ok &= expect(c->close_state == CLOSE_ABORTED, "the stream is reset");
	sdp_climb_cut_to_wire(NULL, 0, ack);
	ok &= expect(step(c, SDP_LINK_CLIMB_ACK, ack), "the late ACK is ignored");
	ok &= expect(c->phase == CONN_CLIMB_HALF, "the reset stream does not go back on RDMA");
	return ok;
}

/* The app closes a held client stream while its attempt is out: no REQ
 * goes for the link still rising, and a CHAL that crosses the close gets
 * no PROVE (the server would move half a stream its peer then released,
 * and reset it). */
static int test_close_ends_the_attempt(void)
{
	uint8_t chal[sizeof(struct sdp_climb_chal_wire)];
	struct sdp_conn *c = held_stream(false);
	int ok = 1;

	zcm_advance(c->climb.backoff_ms + 1); /* the retry timer: start_attempt, deferred */
	zcm_settle();
	ok &= expect(c->climb.step == CLIMB_DIALING, "the client dials");
	conn_get(c); /* the test's, across the close */
	conn_app_close(c, false);
	sent.n = 0;
	conn_lock(c);
	ok &= expect(!climb_send_req(c), "the link, once up, is told no REQ went");
	conn_unlock(c);
	ok &= expect(sent.n == 0, "no REQ goes");
	chal_payload(c, chal);
	ok &= expect(step(c, SDP_LINK_CLIMB_CHAL, chal), "a crossing CHAL is ignored, not a lie");
	ok &= expect(sent.n == 0 && c->phase != CONN_CLIMB_HALF, "no PROVE goes, nothing moves");
	zcm_settle();
	conn_put(c);
	return ok;
}

/* A held client whose PROVE is out (CLIMB_HALF, no ACK): true if so. */
static bool client_prove_out(struct sdp_conn *c)
{
	uint8_t chal[sizeof(struct sdp_climb_chal_wire)];

	zcm_advance(c->climb.backoff_ms + 1); /* the retry timer: start_attempt, deferred */
	zcm_settle();
	climb_send_req(c);
	chal_payload(c, chal);
	sent.n = 0;
	return step(c, SDP_LINK_CLIMB_CHAL, chal) && sent.kind == SDP_LINK_CLIMB_PROVE &&
	       c->phase == CONN_CLIMB_HALF && c->climb.step == CLIMB_CUT_SENT;
}

static bool peer_released(struct sdp_conn *c)
{
	bool taken;

	conn_lock(c);
	taken = climb_on_peer_released(c);
	conn_unlock(c);
	return taken;
}

/* The server lets the attempt go with the client's PROVE out (it closed or
 * forked with its CHAL out): its release says it never took the PROVE.  A
 * client that put nothing on the new channel stays whole on TCP, held, and
 * dials again after the backoff; one that wrote there is not taken back. */
static int test_release_before_ack(void)
{
	struct sdp_conn *c = held_stream(false);
	struct zcm_call send = { .kind = ZCM_SEND, .len = 100, .flags = MSG_DONTWAIT, .timeout_ms = -1,
				 .signal_after_ms = -1 };
	int ok = 1;

	ok &= expect(client_prove_out(c), "the client's PROVE goes");
	ok &= expect(peer_released(c), "the release is the climb's to answer");
	ok &= expect(c->phase == CONN_HELD && c->climb.step == CLIMB_IDLE && c->close_state ==
		     CLOSE_ACTIVE && !c->hard_error, "the stream is held on TCP again, not reset");
	zcm_settle(); /* the attempt's channel is released */
	ok &= expect(c->climb.released, "the attempt's channel is released");
	zcm_advance(c->climb.backoff_ms + 1);
	zcm_settle();
	ok &= expect(c->climb.step == CLIMB_DIALING, "the client dials again after the backoff");

	c = held_stream(false);
	ok &= expect(client_prove_out(c), "a second stream's PROVE goes");
	ok &= expect(zcm_app_do(&send) == 100, "the app writes on the new channel");
	ok &= expect(!peer_released(c), "with bytes on the new channel, the release is a lost stream");
	ok &= expect(c->phase == CONN_CLIMB_HALF, "and the climb moved nothing");
	return ok;
}

/* A liar gains nothing: each message out of turn is refused (the link
 * fails), and a PROVE without the key ends the attempt on TCP. */
static int test_liar_still_refused(void)
{
	uint8_t prove[sizeof(struct sdp_climb_prove_wire)], chal[sizeof(struct sdp_climb_chal_wire)];
	uint8_t ack[sizeof(struct sdp_climb_ack_wire)];
	struct sdp_conn *c = held_stream(true);
	int ok = 1;

	if (!req_arrives(c))
		return 0;
	memset(chal, 0, sizeof(chal));
	sdp_climb_cut_to_wire(NULL, 0, ack);
	ok &= expect(!step(c, SDP_LINK_CLIMB_CHAL, chal), "a CHAL to the responder is refused");
	ok &= expect(!step(c, SDP_LINK_CLIMB_ACK, ack), "an ACK to the responder is refused");
	ok &= expect(c->phase == CONN_HELD && c->climb.step == CLIMB_CHAL_SENT,
		     "neither moved the attempt");
	prove_payload(c, c->climb.tcp_rx_off, false, prove);
	ok &= expect(!step(c, SDP_LINK_CLIMB_PROVE, prove), "a PROVE without the key is refused");
	ok &= expect(c->phase == CONN_HELD && c->climb.step == CLIMB_IDLE, "the stream stays on TCP");
	zcm_settle();
	prove_payload(c, c->climb.tcp_rx_off, true, prove);
	ok &= expect(step(c, SDP_LINK_CLIMB_PROVE, prove) && c->phase == CONN_HELD,
		     "after it, even a good PROVE moves nothing");
	return ok;
}

/* The responder cannot set up the new channel: it hands the index back
 * and refuses the REQ with the stream still locked (no close or give-up between the refusal and the
 * attempt's end), stays held with no step, and answers the next REQ. */
static int test_responder_without_resources(void)
{
	struct sdp_conn *c = held_stream(true);
	struct sdp_climb_req r = { .tuple = c->tuple, .buf_count = ZCM_BUF_COUNT,
				   .buf_size = ZCM_BUF_SIZE };
	struct sdp_policy lp;
	int ok = 1;

	policy_default(&lp);
	lp.climb = true;
	memset(r.nonce, 0x33, sizeof(r.nonce));
	refused.n = 0;
	refused.stream = c;
	fail_setup_tx = true;
	sent.n = 0;
	climb_on_req(FAKE_LINK, IDX, &r, &lp);
	ok &= expect(refused.n == 1 && refused.code == SDP_REJECT_RESOURCES, "the REQ is refused");
	ok &= expect(refused.stream_locked, "the refusal goes with the stream locked");
	ok &= expect(sent.n == 0, "no CHAL goes");
	ok &= expect(unsetup.n == 1 && unsetup.refusals_before == 0,
		     "the index goes back before the refusal: no RELEASED follows the NAK");
	ok &= expect(c->phase == CONN_HELD && c->climb.step == CLIMB_IDLE, "the stream stays held");
	zcm_settle(); /* the attempt's channel is released */
	ok &= expect(c->climb.released, "the attempt's channel is released");
	refused.stream = NULL;
	ok &= expect(req_arrives(c), "the next REQ gets its CHAL");
	return ok;
}

/* A connected loopback TCP pair: returns one end, *peer the other; -1 on
 * a setup failure. */
static int tcp_pair(int *peer)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int lsn = socket(AF_INET, SOCK_STREAM, 0), cli = socket(AF_INET, SOCK_STREAM, 0);

	*peer = -1;
	if (lsn < 0 || cli < 0 || bind(lsn, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lsn, 1) != 0 ||
	    getsockname(lsn, (struct sockaddr *)&a, &len) != 0 ||
	    connect(cli, (struct sockaddr *)&a, sizeof(a)) != 0 || (*peer = accept(lsn, NULL, NULL)) < 0) {
		close(cli);
		cli = -1;
	}
	if (lsn >= 0)
		close(lsn);
	return cli;
}

/* A loopback TCP connection whose peer reset it (SO_LINGER 0): the
 * returned end holds ECONNRESET.  -1 on a setup failure. */
static int reset_tcp_end(void)
{
	struct linger abort_close = { .l_onoff = 1, .l_linger = 0 };
	int srv, cli = tcp_pair(&srv);
	struct pollfd p = { .fd = cli, .events = POLLIN };

	if (srv >= 0 && setsockopt(srv, SOL_SOCKET, SO_LINGER, &abort_close, sizeof(abort_close)) != 0) {
		close(cli);
		cli = -1;
	}
	if (srv >= 0)
		close(srv); /* sends the RST */
	if (cli >= 0 && (poll(&p, 1, 2000) != 1 || !(p.revents & POLLERR))) {
		close(cli);
		cli = -1;
	}
	return cli;
}

/* SO_ERROR as the preload answers it (preload/ctl.c): the stream's error,
 * or, for CONN_USE_TCP, the kernel socket's (asked on the app's fd there;
 * the same socket as c->tcp_fd). */
static int so_error(struct sdp_conn *c)
{
	int err = conn_take_error(c);
	socklen_t len = sizeof(err);

	if (err == CONN_USE_TCP && getsockopt(c->tcp_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = -1;
	return err;
}

/* A held stream reads TCP, so it reports TCP's error: poll() says POLLERR,
 * and SO_ERROR says ECONNRESET, once, as a plain socket does.  Before,
 * SO_ERROR said 0 while poll() kept saying POLLERR.  An error our own peek
 * took (tcp_taken_err) is reported once too. */
static int test_held_reports_tcp_error(void)
{
	struct sdp_conn *c = held_stream(false);
	int ok = 1, first, second, kept, after;
	unsigned mask;

	real.poll = poll; /* the model parks the app in poll; here it asks the kernel */
	close(c->tcp_fd);
	c->tcp_fd = reset_tcp_end();
	if (!expect(c->tcp_fd >= 0, "a loopback TCP connection reset by its peer"))
		return 0;
	conn_lock(c);
	mask = c->carrier->poll_mask(c);
	conn_unlock(c);
	first = so_error(c);
	second = so_error(c);
	c->tcp_taken_err = EPIPE; /* as if our own peek had taken one */
	kept = so_error(c);
	after = so_error(c);
	ok &= expect(c->phase == CONN_HELD, "the stream is held");
	ok &= expect((mask & POLLERR) != 0, "poll says POLLERR");
	ok &= expect(first == ECONNRESET, "SO_ERROR says ECONNRESET");
	ok &= expect(second == 0, "then 0: reported once");
	ok &= expect(kept == EPIPE && after == 0, "an error our peek took: reported once");
	if (first != ECONNRESET || second || kept != EPIPE || after)
		printf("#   SO_ERROR: %d, then %d; kept %d, then %d\n", first, second, kept, after);
	return ok;
}

/* c's TCP socket becomes a loopback connection whose peer reads nothing,
 * with its send queue full: SIOCOUTQ must say the kernel's count. */
static int expect_kernel_unsent(struct sdp_conn *c)
{
	static char chunk[65536];
	int ok = 1, peer, before = 0, after = 0;
	uint64_t unsent;

	real.ioctl = ioctl;
	close(c->tcp_fd);
	c->tcp_fd = tcp_pair(&peer); /* the peer reads nothing */
	if (!expect(c->tcp_fd >= 0, "a loopback TCP connection"))
		return 0;
	while (send(c->tcp_fd, chunk, sizeof(chunk), MSG_DONTWAIT) > 0)
		;
	(void)ioctl(c->tcp_fd, TIOCOUTQ, &before);
	unsent = conn_unsent_bytes(c);
	(void)ioctl(c->tcp_fd, TIOCOUTQ, &after); /* an ack between may lower it */
	ok &= expect(after > 0, "the kernel holds unsent bytes");
	ok &= expect(unsent >= (uint64_t)after && unsent <= (uint64_t)before,
		     "SIOCOUTQ says the kernel's count");
	if (unsent < (uint64_t)after || unsent > (uint64_t)before)
		printf("#   SIOCOUTQ: %llu, the kernel's %d then %d\n", (unsigned long long)unsent,
		       before, after);
	close(peer);
	return ok;
}

/* A held stream writes TCP: SIOCOUTQ counts the kernel socket's unsent
 * bytes, as a plain socket's does (before: 0 while the kernel held them). */
static int test_held_counts_kernel_unsent(void)
{
	return expect_kernel_unsent(held_stream(false));
}

/* A stream that fell back, before its socket heard of it, writes TCP too
 * (the socket asks the stream until then): the same count, not 0. */
static int test_fallback_counts_kernel_unsent(void)
{
	struct sdp_conn *c = zcm_open(&opts);

	conn_lock(c);
	conn_set_phase(c, CONN_FALLBACK);
	conn_unlock(c);
	return expect(c->phase == CONN_FALLBACK, "the stream fell back") &
	       expect_kernel_unsent(c);
}

/* The server's held stream answered a REQ (CHAL out), from a peer that
 * named the tuple but has not proven it holds the key (that comes with its
 * PROVE).  Stream messages on the index then (an ABORT, one out of
 * sequence) end the attempt: the stream stays held on TCP, not reset. */
static int test_keyless_messages_move_nothing(void)
{
	struct sdp_conn *c = held_stream(true);
	uint8_t msg[SDP_BSDH_SIZE + SDP_EXT_SIZE];
	struct sdp_bsdh h = { .mid = SDP_MID_ABORT, .len = sizeof(msg), .mseq = 1, .mseq_ack = 0 };
	struct sdp_ext x = { .a = ECONNRESET };
	int ok = 1;

	if (!req_arrives(c))
		return 0;
	sdp_bsdh_to_wire(&h, msg);
	sdp_ext_to_wire(&x, msg + SDP_BSDH_SIZE);
	for (int i = 0; i < 3; i++) { /* the first ends the attempt; the others find it over */
		h.mseq = (uint32_t)(1 + 5 * i); /* out of sequence after the first */
		sdp_bsdh_to_wire(&h, msg);
		conn_lock(c);
		rx_on_link_message(c, msg, sizeof(msg));
		conn_unlock(c);
	}
	zcm_settle();
	ok &= expect(c->phase == CONN_HELD, "the stream is still held");
	ok &= expect(c->close_state == CLOSE_ACTIVE, "no abort");
	ok &= expect(c->hard_error == 0, "no error for the app");
	ok &= expect(c->climb.step == CLIMB_IDLE, "the attempt is over");
	if (!ok)
		printf("#   phase %s close_state %d hard_error %d step %d\n", conn_phase_name(c->phase),
		       (int)c->close_state, c->hard_error, (int)c->climb.step);
	return ok;
}

static const struct tap_case cases[] = {
	{ "a PROVE that crosses the responder's give-up (CHAL out) is ignored, not a violation",
	  test_prove_after_give_up },
	{ "no climb step outlives the climb: a later FALLBACK ignores a late PROVE, OPEN refuses it",
	  test_no_step_outlives_the_climb },
	{ "an ACK after the client's bound reset the stream is ignored and moves nothing",
	  test_late_ack_after_reset },
	{ "a liar's messages out of turn are still refused, and move nothing",
	  test_liar_still_refused },
	{ "a responder without resources refuses the REQ with the stream locked, stays held, "
	  "answers the next", test_responder_without_resources },
	{ "a held client closed with its attempt out sends no REQ, and no PROVE for a crossing CHAL",
	  test_close_ends_the_attempt },
	{ "a server's release before its ACK keeps a client with nothing on the new channel on TCP, "
	  "held; one that wrote there is not taken back", test_release_before_ack },
	{ "a held stream whose TCP connection is reset: poll says POLLERR, SO_ERROR ECONNRESET once",
	  test_held_reports_tcp_error },
	{ "a held stream's SIOCOUTQ counts the bytes its kernel socket has not sent",
	  test_held_counts_kernel_unsent },
	{ "a stream that fell back, its socket not told yet: SIOCOUTQ counts the kernel's unsent bytes",
	  test_fallback_counts_kernel_unsent },
	{ "stream messages for a held stream before the asker proved its key end the attempt, "
	  "never the stream", test_keyless_messages_move_nothing },
};

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%zu\n", ARRAY_SIZE(cases));
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		tap_result(tap_run_isolated(cases[i].fn, 60), cases[i].desc);
	return tap_exit_status();
}
