/* libFuzzer harness for the receive/zero-copy state machine: the real core
 * files of one connection's data path (core/zcopy.c zc_*.c rx.c tx.c cq.c
 * conn_io.c close.c notify.c timers.c switch.c) with verbs, the peer, the
 * app and time modelled (tests/model/zcmodel.h).  The input is a script.
 *
 * Input: a sequence of steps.  Each step is one opcode byte (its low 5 bits
 * pick the action; the top bit, "lie", lets the peer ignore its credits)
 * followed by the action's parameter bytes; a missing byte reads as 0.
 *   network   0 execute our next send-queue request (its remote effect)
 *             1 deliver the next completion      2 both, for all outstanding
 *   peer      3 DATA(len)   4 SrcAvail(len)   5 SrcAvailCancel
 *             6 drop its SrcAvail window (a lie)
 *             7 answer our sink (mode: WRITE with immediate | WRITE +
 *               RdmaWrCompl | RdmaWrCompl only | half WRITE + full count; len)
 *             8 SinkCancelAck   9 READ our SrcAvail(len)   10 RdmaRdCompl(bytes read)
 *             11 RdmaRdCompl(any count: a lie)   12 SinkAvail(len)   13 SinkCancel
 *             14 credit update  15 ABORT   16 DisConn
 *             17 any control message with any extension (offset near the stream's)
 *             18 rdma_cm DISCONNECTED        19 the peer's QP fails
 *             25 try every window key it was given
 *             28 answer honestly from now on (toggle)
 *   time      20 advance the clock (ms)
 *   app       21 recv(len, flags, mode)   22 send(len, mode)
 *             mode: SO_*TIMEO, non-blocking, a signal, MSG_DONTWAIT, none
 *             23/24 the scheduler holds/releases the app thread
 *             26 FIONREAD   27 wait until the call returns
 *   process   29 the pinned-memory budget is spent / has room again (toggle):
 *             while spent, no buffer or app buffer can be registered
 *   30-31     nothing
 * At the end: the call in progress runs to its end (network running, the
 * peer as the script left it), the network drains, and the peer probes
 * every window it was given.
 *
 * Checked (the model aborts on the first violation): the app's bytes are
 * exactly the peer's stream in order (no duplicate, gap or reorder) while
 * the peer kept honest positions, and never a canary (a byte the peer never
 * wrote) whatever it did; no call outlives its timeout or signal by more
 * than ZCM_WAIT_BOUND_MS of model time; after a call returns no window of
 * ours is reachable, no RDMA into or out of its buffer is queued, no
 * registration is held; no window is bound once the connection is reset;
 * our messages are well-formed, in sequence, within credits, our stream's
 * bytes and offsets are right, and each RdmaRdCompl names the oldest
 * SrcAvail and counts exactly the bytes READ from it; FIONREAD never
 * exceeds the unread stream; no wait wakes at once forever; and ASan/UBSan
 * (out-of-bounds, use-after-free, overflow, null arithmetic). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tests/fuzz/fuzz.h"
#include "tests/model/zcmodel.h"

struct script {
	const uint8_t *p;
	size_t left;
};

static uint8_t take8(struct script *s)
{
	if (!s->left)
		return 0;
	s->left--;
	return *s->p++;
}

static uint32_t take16(struct script *s)
{
	return (uint32_t)take8(s) << 8 | take8(s);
}

static uint32_t take32(struct script *s)
{
	return take16(s) << 16 | take16(s);
}

/* Lengths around every boundary the code has: a message's payload, the
 * direct-READ minimum, the zero-copy threshold, the staging buffer. */
static uint32_t choose_len(uint8_t b)
{
	static const uint32_t lens[] = { 1, 100, 4079, 4080, 4081, 8192, 16383, 16384,
					 32768, 65535, 65536, 100000, 131072, 262144, 262145,
					 600000 };

	return lens[b % 16];
}

static unsigned choose_ms(uint8_t b)
{
	static const unsigned ms[] = { 1, 5, 19, 20, 21, 50, 100, 1000, 4999, 5000, 5001,
				       10000, 30000, 60000, 130000, 2 };

	return ms[b % 16];
}

static bool peer_may_send(bool lie)
{
	return lie || zcm_peer_credits() > 1;
}

static void app_mode(struct script *s, struct zcm_call *k)
{
	uint8_t m = take8(s);

	k->timeout_ms = -1;
	k->signal_after_ms = -1;
	switch (m % 5) {
	case 0: k->timeout_ms = (int)choose_ms(take8(s)); break;
	case 1: k->nonblock = true; break;
	case 2: k->signal_after_ms = (int)choose_ms(take8(s)); break;
	case 3: k->flags |= MSG_DONTWAIT; break;
	default: break; /* blocking, no bound: may legitimately wait forever */
	}
}

static void app_recv(struct script *s)
{
	struct zcm_call k = { .kind = ZCM_RECV, .len = choose_len(take8(s)) };
	uint8_t f = take8(s);

	if (f % 8 == 1)
		k.flags |= MSG_PEEK;
	else if (f % 8 == 2)
		k.flags |= MSG_TRUNC;
	if (f & 8)
		k.flags |= MSG_WAITALL;
	app_mode(s, &k);
	zcm_app_start(&k);
}

static void app_send(struct script *s)
{
	struct zcm_call k = { .kind = ZCM_SEND, .len = choose_len(take8(s)) };

	app_mode(s, &k);
	zcm_app_start(&k);
}

static void peer_raw(struct script *s)
{
	uint8_t mid = (uint8_t)(take8(s) % 16 + 1);
	struct sdp_ext x = { .a = take32(s), .b = take32(s) };
	int8_t delta = (int8_t)take8(s);

	x.a = x.a % 4 == 0 ? choose_len((uint8_t)x.a) : x.a;
	x.c = (uint64_t)take32(s) << 8;
	x.d = zcm_peer_tx_off() + (uint64_t)(int64_t)delta;
	zcm_peer_raw(mid, &x);
}

static void network(uint8_t op)
{
	if (op == 0)
		zcm_exec_next();
	else if (op == 1)
		zcm_complete_next();
	else
		zcm_run_network();
	zcm_settle();
}

static void peer_action(uint8_t op, bool lie, struct script *s)
{
	switch (op) {
	case 3: { uint32_t n = 1 + take16(s) % ZCM_PAYLOAD_MAX;
		if (peer_may_send(lie)) zcm_peer_data(n); break; }
	case 4: { uint32_t n = choose_len(take8(s));
		if (peer_may_send(lie)) zcm_peer_src_avail(n); break; }
	case 5: zcm_peer_src_cancel(); break;
	case 6: zcm_peer_src_invalidate(); break;
	case 7: { uint8_t m = take8(s); uint32_t n = m & 0x80 ? choose_len(take8(s)) : 0;
		if (peer_may_send(lie)) zcm_peer_sink_write(n, (enum zcm_sink_mode)(m % 4)); break; }
	case 8: zcm_peer_sink_cancel_ack(); break;
	case 9: zcm_peer_read_src(take16(s) * 64u); break;
	case 10: zcm_peer_rd_compl_honest(); break;
	case 11: zcm_peer_rd_compl(take32(s) % (1u << 21)); break;
	case 12: { uint32_t n = choose_len(take8(s));
		if (peer_may_send(lie)) zcm_peer_sink_avail(n); break; }
	case 13: zcm_peer_sink_cancel(); break;
	case 14: zcm_peer_credit_update(); break;
	case 15: zcm_peer_abort(); break;
	case 16: zcm_peer_disconn(); break;
	case 17: peer_raw(s); break;
	case 18: zcm_carrier_drop(); break;
	case 19: zcm_remote_qp_error(); zcm_settle(); break;
	case 25: zcm_peer_probe_windows(); break;
	default: break;
	}
}

static bool peer_on;
static bool budget_spent; /* op 29 */

static const char *const op_names[32] = {
	"exec", "complete", "network", "peer DATA", "peer SrcAvail", "peer SrcAvailCancel",
	"peer drops its window", "peer answers the sink", "peer SinkCancelAck", "peer READs",
	"peer RdmaRdCompl", "peer RdmaRdCompl (any count)", "peer SinkAvail", "peer SinkCancel",
	"peer credit update", "peer ABORT", "peer DisConn", "peer raw message", "DISCONNECTED",
	"peer QP fails", "advance", "app recv", "app send", "hold app", "release app",
	"probe windows", "FIONREAD", "finish call", "peer auto", "pin budget", "nop", "nop",
};

static void step(struct script *s)
{
	uint8_t b = take8(s), op = b & 31;
	bool lie = (b & 0x80) != 0;

	zcm_trace("step: %s%s", op_names[op], lie ? " (lie)" : "");

	switch (op) {
	case 0: case 1: case 2: network(op); break;
	case 20: zcm_advance(choose_ms(take8(s))); break;
	case 21: app_recv(s); break;
	case 22: app_send(s); break;
	case 23: zcm_app_hold(true); break;
	case 24: zcm_app_hold(false); break;
	case 26: zcm_app_check_readable(); break;
	case 27: if (zcm_app_busy()) zcm_app_finish(); break;
	case 28: peer_on = !peer_on; zcm_peer_set_auto(peer_on); break;
	case 29: budget_spent = !budget_spent; zcm_pin_budget_spent(budget_spent); break;
	case 30: case 31: break;
	default: peer_action(op, lie, s); break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct zcm_opts opts = { .fuzzing = true, .quiet = true };
	struct script s = { data, size };
	int steps = 0;

	zcm_open(&opts);
	peer_on = false;
	budget_spent = false;
	while (s.left && steps++ < 400)
		step(&s);
	if (zcm_app_busy())
		zcm_app_finish();
	zcm_run_network();
	zcm_app_check_readable();
	zcm_peer_probe_windows();
	zcm_close();
	return 0;
}
