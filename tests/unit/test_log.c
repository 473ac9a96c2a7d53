/* Unit tests (TAP) for base/log.c's limit on diagnostics a peer can
 * repeat at will: a burst per window at each site, the rest counted and
 * reported by the first line of a later window. */
#include <stdio.h>

#include "base/log.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* n lines offered at now_ms: how many went out; *left: the last report. */
static unsigned offer(struct sdp_log_limit *lim, uint64_t now_ms, unsigned n, unsigned *left)
{
	unsigned out = 0, l;

	*left = 0;
	for (unsigned i = 0; i < n; i++) {
		out += sdp_log_admit(lim, now_ms, &l);
		if (l)
			*left = l;
	}
	return out;
}

static int test_burst_then_quiet(void)
{
	struct sdp_log_limit lim = { 0 };
	unsigned left, out = offer(&lim, 1000, 1000, &left);

	return check(out == SDP_LOG_BURST, "%u of 1000 lines in one window went out, want %u", out,
		     SDP_LOG_BURST) &&
	       check(left == 0, "a left-out count reported within the window: %u", left);
}

static int test_next_window_reports(void)
{
	struct sdp_log_limit lim = { 0 };
	unsigned left, out;

	offer(&lim, 5000, 12, &left);
	out = offer(&lim, 5000 + SDP_LOG_WINDOW_MS - 1, 3, &left);
	if (!check(out == 0 && left == 0, "still in the window: %u out, %u reported", out, left))
		return 0;
	out = offer(&lim, 5000 + SDP_LOG_WINDOW_MS, 2, &left);
	return check(out == 2, "a new window: %u of 2 went out", out) &&
	       check(left == 12 - SDP_LOG_BURST + 3, "left out reported %u, want %u", left,
		     12 - SDP_LOG_BURST + 3);
}

/* Sites are separate: one flooded site leaves another's lines alone. */
static int test_sites_apart(void)
{
	struct sdp_log_limit a = { 0 }, b = { 0 };
	unsigned left, out;

	offer(&a, 100, 50, &left);
	out = offer(&b, 100, 3, &left);
	return check(out == 3, "the quiet site wrote %u of 3", out);
}

/* A clock read of 0 (a boot's first millisecond) still starts a window. */
static int test_zero_clock(void)
{
	struct sdp_log_limit lim = { 0 };
	unsigned left, out = offer(&lim, 0, 10, &left);

	return check(out == SDP_LOG_BURST, "%u of 10 at time 0 went out", out);
}

static const struct tap_case cases[] = {
	{ "a flood at one site writes a burst, then nothing for the window", test_burst_then_quiet },
	{ "the first line of the next window says how many were left out", test_next_window_reports },
	{ "each site has its own limit", test_sites_apart },
	{ "a window starting at clock 0 still limits", test_zero_clock },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
