/* Unit tests (TAP) for core/credits.h: credit and ring arithmetic, the
 * rule that only a credit update (or an Abort) may take the last credit,
 * a two-end simulation showing that rule keeps bursts of control
 * messages crossing on the wire from deadlocking, and one showing that two
 * ends at their reserve stop trading credit updates and let data through. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/credits.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int test_available(void)
{
	int ok = 1;

	ok &= check(credits_available(32, 10, 10) == 32, "nothing outstanding");
	ok &= check(credits_available(32, 40, 10) == 2, "30 outstanding of 32");
	ok &= check(credits_available(32, 42, 10) == 0, "all outstanding");
	ok &= check(credits_available(32, 50, 10) == 0, "more outstanding than posted");
	ok &= check(credits_available(8, 3, UINT32_MAX - 2) == 2, "sequence wraps: 6 outstanding");
	return ok;
}

static int test_allow(void)
{
	int ok = 1;

	ok &= check(!credits_allow_data(0) && !credits_allow_data(1), "data leaves the reserve");
	ok &= check(credits_allow_data(2), "data with two credits");
	ok &= check(credits_allow_ctrl(1, true), "an update may take the last credit");
	ok &= check(!credits_allow_ctrl(0, true), "nothing goes without a credit");
	ok &= check(!credits_allow_ctrl(1, false), "other control leaves the last credit");
	ok &= check(credits_allow_ctrl(2, false), "other control with two credits");
	return ok;
}

static int test_update_due(void)
{
	int ok = 1;

	ok &= check(!credit_update_due(0, 32, true), "nothing consumed: no update");
	ok &= check(credit_update_due(1, 32, true), "a starving peer gets one at once");
	ok &= check(!credit_update_due(15, 32, false), "under half: piggybacked later");
	ok &= check(credit_update_due(16, 32, false), "half the buffers: standalone update");
	ok &= check(credit_update_due(2, 3, false), "odd count rounds up");
	return ok;
}

static int test_ack_valid(void)
{
	int ok = 1;

	ok &= check(ack_is_valid(5, 5, 9), "same ack");
	ok &= check(ack_is_valid(9, 5, 9), "acks everything sent");
	ok &= check(!ack_is_valid(10, 5, 9), "acks a message never sent");
	ok &= check(!ack_is_valid(4, 5, 9), "goes backwards");
	ok &= check(ack_is_valid(2, UINT32_MAX - 1, 3), "wraps");
	return ok;
}

static int test_ring(void)
{
	int ok = 1;

	ok &= check(ring_used(7, 3) == 4, "used");
	ok &= check(ring_used(2, UINT32_MAX - 1) == 4, "used across the wrap");
	ok &= check(ring_index(35, 32) == 3, "index");
	return ok;
}

/* ---- two ends exchanging control messages ------------------------------------ */

#define BUFS   4u
#define ROUNDS 200

struct msg {
	bool update;
	uint32_t ack;
};

struct end {
	uint32_t tx_seq, peer_ack;          /* what we sent, what the peer acked */
	uint32_t rx_seq, rx_ack, rx_ack_sent;
	int to_send;                        /* other control messages still to send */
	int burst;                          /* at most this many of them per round */
	bool update_pending;
	struct msg wire[4 * BUFS];          /* sent this round, delivered at its end */
	int nwire;
};

typedef bool (*ctrl_rule)(uint32_t avail, bool may_take_last);

static bool rule_any_takes_last(uint32_t avail, bool may_take_last)
{
	(void)may_take_last;
	return avail >= 1; /* the rule before: every control message may take the last credit */
}

static uint32_t avail(const struct end *e)
{
	return credits_available(BUFS, e->tx_seq, e->peer_ack);
}

static void put(struct end *e, bool update)
{
	e->tx_seq++;
	e->rx_ack_sent = e->rx_ack; /* every message carries our ack */
	e->wire[e->nwire++] = (struct msg){ .update = update, .ack = e->rx_ack };
}

static void send_round(struct end *e, ctrl_rule rule)
{
	if (e->update_pending && e->rx_ack != e->rx_ack_sent && rule(avail(e), true)) {
		put(e, true);
		e->update_pending = false;
	}
	for (int n = 0; n < e->burst && e->to_send > 0 && rule(avail(e), false); n++) {
		put(e, false);
		e->to_send--;
	}
}

/* Control messages are consumed on arrival; a starving peer is told. */
static void deliver(struct end *from, struct end *to)
{
	for (int i = 0; i < from->nwire; i++) {
		to->rx_seq++;
		to->rx_ack = to->rx_seq;
		to->peer_ack = from->wire[i].ack;
		uint32_t view = peer_view_of_credits(BUFS, to->rx_seq, to->rx_ack_sent);
		if (credit_update_due(to->rx_ack - to->rx_ack_sent, BUFS, view <= CREDIT_RESERVE + 1))
			to->update_pending = true;
	}
	from->nwire = 0;
}

/* Rounds until both ends sent their messages, or -1 if they stopped. */
static int simulate(ctrl_rule rule, int a_msgs, int a_burst, int b_msgs, int b_burst)
{
	struct end a, b;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.to_send = a_msgs;
	a.burst = a_burst;
	b.to_send = b_msgs;
	b.burst = b_burst;
	for (int round = 1; round <= ROUNDS; round++) {
		send_round(&a, rule);
		send_round(&b, rule);
		deliver(&a, &b); /* both directions cross on the wire */
		deliver(&b, &a);
		if (a.to_send == 0 && b.to_send == 0)
			return round;
	}
	return -1;
}

static int test_crossing_bursts(void)
{
	int ok = 1, worked_old = 0;

	/* The scenario is real: under the old rule some of these stop for good. */
	for (int ab = 1; ab <= (int)BUFS; ab++)
		for (int bb = 1; bb <= (int)BUFS; bb++)
			worked_old += simulate(rule_any_takes_last, 50, ab, 50, bb) > 0;
	ok &= check(worked_old < (int)(BUFS * BUFS), "the old rule deadlocks in %d of %u cases",
		    (int)(BUFS * BUFS) - worked_old, BUFS * BUFS);
	for (int ab = 1; ab <= (int)BUFS; ab++)
		for (int bb = 1; bb <= (int)BUFS; bb++) {
			int rounds = simulate(credits_allow_ctrl, 50, ab, 50, bb);

			ok &= check(rounds > 0, "bursts %d and %d: stopped", ab, bb);
		}
	ok &= check(simulate(credits_allow_ctrl, 50, 4, 0, 1) > 0, "one-way burst");
	return ok;
}

/* ---- two ends at their reserve, trading credit updates ----------------------
 * The state of a hang seen in the test bed (issue 15, a busy stream beside a
 * thousand idle ones): both ends had one credit and a window of updates in
 * flight toward the other, each asking for an ack; every update that landed
 * was answered by one, which took the credit the sender's data needed. */

#define WBUFS  8u
#define WDELAY 3   /* rounds a message spends on the wire */
#define WQ     64

struct wmsg {
	bool update, asks;
	uint32_t ack;
	int due;
};

struct wend {
	uint32_t tx_seq, peer_ack, rx_seq, rx_ack, rx_ack_sent;
	bool peer_starving, update_pending;
	int data_left, updates_sent;
	struct wmsg q[WQ]; /* toward the other end, in order */
	int qh, qt;
};

struct wrules {
	bool (*asks)(uint32_t after, bool is_update);
	bool (*update_first)(bool data_waiting, uint32_t avail);
};

static bool asks_before(uint32_t after, bool is_update)
{
	(void)is_update;
	return after <= CREDIT_RESERVE; /* the rule before: every message at the reserve asked */
}

static bool update_first_before(bool data_waiting, uint32_t avail)
{
	(void)data_waiting, (void)avail;
	return true; /* the order before: updates always overtook data */
}

static uint32_t wavail(const struct wend *e)
{
	return credits_available(WBUFS, e->tx_seq, e->peer_ack);
}

static void wput(const struct wrules *r, struct wend *e, bool update, int now)
{
	bool asks = r->asks(wavail(e) - 1, update);

	e->tx_seq++;
	e->rx_ack_sent = e->rx_ack;
	if (e->rx_ack == e->rx_seq)
		e->peer_starving = false;
	e->q[e->qt++ % WQ] = (struct wmsg){ .update = update, .asks = asks, .ack = e->rx_ack, .due = now + WDELAY };
	e->updates_sent += update;
}

static void wsend_update(const struct wrules *r, struct wend *e, int now)
{
	if (!e->update_pending)
		return;
	if (e->rx_ack != e->rx_ack_sent && credits_allow_ctrl(wavail(e), true)) {
		wput(r, e, true, now);
		e->update_pending = false;
	} else if (e->rx_ack == e->rx_ack_sent) {
		e->update_pending = false; /* another message carried it */
	}
}

/* tx_kick's order: the update, then data, then the update if still due. */
static void wkick(const struct wrules *r, struct wend *e, int now)
{
	if (r->update_first(e->data_left > 0, wavail(e)))
		wsend_update(r, e, now);
	while (e->data_left > 0 && credits_allow_data(wavail(e))) {
		wput(r, e, false, now);
		e->data_left--;
	}
	wsend_update(r, e, now);
}

/* Every message is consumed on arrival (the reader keeps up). */
static void wdeliver(struct wend *from, struct wend *to, int now)
{
	while (from->qh != from->qt && from->q[from->qh % WQ].due <= now) {
		struct wmsg m = from->q[from->qh++ % WQ];
		uint32_t view;

		to->rx_seq++;
		to->rx_ack = to->rx_seq;
		to->peer_ack = m.ack;
		to->peer_starving |= m.asks;
		view = peer_view_of_credits(WBUFS, to->rx_seq, to->rx_ack_sent);
		if (credit_update_due(to->rx_ack - to->rx_ack_sent, WBUFS,
				      to->peer_starving || view <= CREDIT_RESERVE + 1))
			to->update_pending = true;
	}
}

/* An end WDELAY + 1 rounds into the trade, with an update sent every round
 * (message k in round k - 11; the peer's message k acks ours up to k - 4, the
 * last it got before sending): ten sent, the last WDELAY on the wire, one
 * credit left; seven received, the last not acked yet, its sender starving. */
static void wend_trading(struct wend *e)
{
	e->tx_seq = 10;
	e->peer_ack = 7 - (WDELAY + 1);
	e->rx_seq = e->rx_ack = 7;
	e->rx_ack_sent = 10 - (WDELAY + 1);
	e->peer_starving = e->update_pending = true;
	for (uint32_t k = 11 - WDELAY; k <= 10; k++)
		e->q[e->qt++] = (struct wmsg){ .update = true, .asks = true, .ack = k - (WDELAY + 1),
					       .due = (int)k - 11 + WDELAY };
}

/* Rounds until the data is through and nothing more is on the wire, or -1. */
static int simulate_reserve_trade(const struct wrules *r, int a_data, int b_data, int *updates)
{
	struct wend a, b;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.data_left = a_data;
	b.data_left = b_data;
	wend_trading(&a);
	wend_trading(&b);
	for (int now = 0; now < 2000; now++) {
		wkick(r, &a, now);
		wkick(r, &b, now);
		wdeliver(&a, &b, now);
		wdeliver(&b, &a, now);
		if (!a.data_left && !b.data_left && a.qh == a.qt && b.qh == b.qt && !a.update_pending && !b.update_pending) {
			*updates = a.updates_sent + b.updates_sent;
			return now;
		}
	}
	*updates = a.updates_sent + b.updates_sent;
	return -1;
}

static int test_reserve_trade(void)
{
	const struct wrules before = { asks_before, update_first_before };
	const struct wrules now = { message_asks_ack, update_goes_first };
	int ok = 1, updates, rounds;

	rounds = simulate_reserve_trade(&before, 100, 0, &updates);
	ok &= check(rounds < 0, "the old rules never get the data through (%d updates in 2000 rounds)",
		    updates);
	rounds = simulate_reserve_trade(&now, 100, 0, &updates);
	ok &= check(rounds > 0, "the data goes through and the wire goes quiet (round %d)", rounds);
	ok &= check(updates < 2 * 100, "at most about one update per data message (%d)", updates);
	rounds = simulate_reserve_trade(&now, 100, 100, &updates);
	ok &= check(rounds > 0, "data queued at both ends: both go through (round %d, %d updates)", rounds,
		    updates);
	rounds = simulate_reserve_trade(&now, 0, 100, &updates);
	ok &= check(rounds > 0, "data at the other end only: it goes through (round %d)", rounds);
	rounds = simulate_reserve_trade(&now, 0, 0, &updates);
	ok &= check(rounds > 0 && updates <= 2 * (int)WBUFS, "without data the trade stops (%d updates)",
		    updates);
	ok &= check(!message_asks_ack(0, true) && !message_asks_ack(1, true), "an update never asks");
	ok &= check(message_asks_ack(1, false) && message_asks_ack(0, false),
		    "any other message at the reserve asks");
	ok &= check(!message_asks_ack(2, false), "above the reserve nothing asks");
	ok &= check(!update_goes_first(true, 2) && update_goes_first(true, 1) && update_goes_first(false, 2),
		    "an update waits only behind data that can go");
	return ok;
}

static const struct tap_case cases[] = {
	{ "credits available from posted buffers and acks", test_available },
	{ "data and control leave the last credit to updates", test_allow },
	{ "when a standalone credit update is due", test_update_due },
	{ "acknowledgement validity", test_ack_valid },
	{ "ring arithmetic", test_ring },
	{ "crossing bursts of control messages never stop both ends", test_crossing_bursts },
	{ "two ends at their reserve stop trading updates and let data through", test_reserve_trade },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
