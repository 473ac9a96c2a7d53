/* Unit tests (TAP) for core/phase.c: the transition table, checked for
 * every pair of phases against the transitions written out above enum
 * conn_phase (core/conn.h), and conn_set_phase() on a bare channel: an
 * expected transition is silent, an unexpected one is made and logged in
 * one warning line naming both phases, and each phase gets its carrier. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "core/conn_internal.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PHASES        (CONN_CLIMB_HALF + 1)

/* The carriers, as the setter sees them: only their addresses count. */
const struct conn_carrier channel_carrier = { 0 };
const struct conn_carrier switch_carrier = { 0 };
const struct conn_carrier held_carrier = { 0 };
const struct conn_carrier drain_carrier = { 0 };

struct edge {
	enum conn_phase from, to;
};

/* The documented transitions, one per line of the comment in core/conn.h. */
static const struct edge documented[] = {
	/* client: RESOLVING -> TCP_CONNECTING -> AWAIT_ATTACH -> OPEN */
	{ CONN_RESOLVING, CONN_TCP_CONNECTING },
	{ CONN_TCP_CONNECTING, CONN_AWAIT_ATTACH },
	{ CONN_AWAIT_ATTACH, CONN_OPEN },
	/* server: PENDING -> ATTACHING -> OPEN */
	{ CONN_PENDING, CONN_ATTACHING },
	{ CONN_ATTACHING, CONN_OPEN },
	/* any phase up to OPEN -> FALLBACK */
	{ CONN_RESOLVING, CONN_FALLBACK },
	{ CONN_TCP_CONNECTING, CONN_FALLBACK },
	{ CONN_AWAIT_ATTACH, CONN_FALLBACK },
	{ CONN_PENDING, CONN_FALLBACK },
	{ CONN_ATTACHING, CONN_FALLBACK },
	{ CONN_OPEN, CONN_FALLBACK },
	/* AWAIT_ATTACH, ATTACHING -> DRAINING -> FALLBACK */
	{ CONN_AWAIT_ATTACH, CONN_DRAINING },
	{ CONN_ATTACHING, CONN_DRAINING },
	{ CONN_DRAINING, CONN_FALLBACK },
	/* OPEN -> SWITCHING -> FALLBACK */
	{ CONN_OPEN, CONN_SWITCHING },
	{ CONN_SWITCHING, CONN_FALLBACK },
	/* any but FALLBACK -> DEAD */
	{ CONN_RESOLVING, CONN_DEAD },
	{ CONN_TCP_CONNECTING, CONN_DEAD },
	{ CONN_AWAIT_ATTACH, CONN_DEAD },
	{ CONN_PENDING, CONN_DEAD },
	{ CONN_ATTACHING, CONN_DEAD },
	{ CONN_OPEN, CONN_DEAD },
	{ CONN_DRAINING, CONN_DEAD },
	{ CONN_SWITCHING, CONN_DEAD },
	{ CONN_DEAD, CONN_DEAD },
	/* the climb (core/climb.c): SWITCHING -> HELD -> CLIMB_HALF -> OPEN;
	 * HELD -> FALLBACK (it stays on TCP) or DEAD; CLIMB_HALF -> DEAD, or
	 * back to HELD when the peer released the attempt before its ACK */
	{ CONN_SWITCHING, CONN_HELD },
	{ CONN_HELD, CONN_CLIMB_HALF },
	{ CONN_HELD, CONN_FALLBACK },
	{ CONN_HELD, CONN_DEAD },
	{ CONN_CLIMB_HALF, CONN_OPEN },
	{ CONN_CLIMB_HALF, CONN_DEAD },
	{ CONN_CLIMB_HALF, CONN_HELD },
};

static bool is_documented(enum conn_phase from, enum conn_phase to)
{
	for (size_t i = 0; i < ARRAY_SIZE(documented); i++)
		if (documented[i].from == from && documented[i].to == to)
			return true;
	return false;
}

static int test_table_is_the_documented_one(void)
{
	int ok = 1;

	for (int from = 0; from < PHASES; from++)
		for (int to = 0; to < PHASES; to++)
			ok &= check(conn_phase_transition_ok(from, to) == is_documented(from, to),
				    "%s -> %s: table %d, documented %d", conn_phase_name(from),
				    conn_phase_name(to), conn_phase_transition_ok(from, to),
				    is_documented(from, to));
	return ok;
}

static int test_final_phases(void)
{
	int ok = 1;

	for (int to = 0; to < PHASES; to++) {
		ok &= check(!conn_phase_transition_ok(CONN_FALLBACK, to), "fallback -> %s",
			    conn_phase_name(to));
		ok &= check(conn_phase_transition_ok(CONN_DEAD, to) == (to == CONN_DEAD),
			    "dead -> %s", conn_phase_name(to));
	}
	ok &= check(!conn_phase_transition_ok(PHASES, CONN_DEAD), "a phase out of range");
	ok &= check(!conn_phase_transition_ok(CONN_OPEN, PHASES), "to a phase out of range");
	return ok;
}

/* Runs conn_set_phase(c, to) with stderr captured; returns what it logged. */
static char *set_phase_logged(struct sdp_conn *c, enum conn_phase to)
{
	static char buf[1024];
	FILE *tmp = tmpfile();
	int saved = dup(2);
	size_t n;

	if (!tmp || saved < 0)
		abort();
	dup2(fileno(tmp), 2);
	conn_set_phase(c, to);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(buf, 1, sizeof(buf) - 1, tmp);
	buf[n] = '\0';
	fclose(tmp);
	return buf;
}

static int test_set_phase_expected_is_silent(void)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));
	int ok = 1;

	conn_phase_start(c, CONN_PENDING);
	ok &= check(c->phase == CONN_PENDING, "start sets the first phase");
	ok &= check(*set_phase_logged(c, CONN_ATTACHING) == '\0', "pending -> attaching: no log");
	ok &= check(*set_phase_logged(c, CONN_OPEN) == '\0', "attaching -> open: no log");
	ok &= check(*set_phase_logged(c, CONN_SWITCHING) == '\0', "open -> switching: no log");
	ok &= check(*set_phase_logged(c, CONN_FALLBACK) == '\0', "switching -> fallback: no log");
	ok &= check(c->phase == CONN_FALLBACK, "the phase is fallback");
	free(c);
	return ok;
}

static int test_set_phase_unexpected_is_logged(void)
{
#ifdef SDPSHIM_DEBUG
	return 1; /* a debug build asserts instead */
#else
	struct sdp_conn *c = calloc(1, sizeof(*c));
	const char *line;
	int ok = 1;

	conn_phase_start(c, CONN_FALLBACK);
	line = set_phase_logged(c, CONN_OPEN);
	ok &= check(strstr(line, "warn: ") && strstr(line, "fallback -> open"),
		    "one warning names both phases: %s", line);
	ok &= check(strchr(line, '\n') == line + strlen(line) - 1, "one line: %s", line);
	ok &= check(c->phase == CONN_OPEN, "the transition is still made");
	free(c);
	return ok;
#endif
}

static int test_carrier_follows_phase(void)
{
	struct sdp_conn *c = calloc(1, sizeof(*c));
	int ok = 1;

	for (int phase = 0; phase < PHASES; phase++) {
		const struct conn_carrier *want =
			phase == CONN_SWITCHING ? &switch_carrier
			: (phase == CONN_HELD || phase == CONN_CLIMB_HALF) ? &held_carrier
			: phase == CONN_DRAINING			   ? &drain_carrier
									   : &channel_carrier;

		conn_phase_start(c, phase);
		ok &= check(c->carrier == want, "start in %s", conn_phase_name(phase));
	}
	conn_phase_start(c, CONN_OPEN);
	conn_set_phase(c, CONN_SWITCHING);
	ok &= check(c->carrier == &switch_carrier, "open -> switching: the switch's carrier");
	conn_set_phase(c, CONN_FALLBACK);
	ok &= check(c->carrier == &channel_carrier, "switching -> fallback: the channel's again");
	free(c);
	return ok;
}

int main(void)
{
	static const struct tap_case cases[] = {
		{ "every pair of phases: the table is the documented one",
		  test_table_is_the_documented_one },
		{ "fallback is final; dead only marked dead again", test_final_phases },
		{ "conn_set_phase: expected transitions are made silently",
		  test_set_phase_expected_is_silent },
		{ "conn_set_phase: an unexpected one is made and logged in one line",
		  test_set_phase_unexpected_is_logged },
		{ "the setter swaps the carrier: switching's is the switch's, held and climbing the held one's, draining the drain's, every other the channel's",
		  test_carrier_follows_phase },
	};

	sdp_log_level = SDP_LOG_WARN;
	return tap_run(cases, ARRAY_SIZE(cases));
}
