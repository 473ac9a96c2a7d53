/* Unit tests (TAP) for the pinned-memory budget (base/pin_budget.c, issue
 * 15) and its tunable (base/config.c): take and give keep one count that
 * never passes the budget and never goes below zero; a refusal is counted
 * and logged once per process; pin_budget_try counts nothing; the count is
 * mirrored into a stats header; SDPSHIM_PIN_BUDGET takes K, M and G, and a
 * bad value gets one diagnostic line and the default; the soft
 * RLIMIT_MEMLOCK caps the budget where it binds (a child without
 * CAP_IPC_LOCK); and one connection's pinned bytes from the geometry
 * (core/geometry.c). */
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/config.h"
#include "base/pin_budget.h"
#include "base/stats_shm.h"
#include "core/conn.h" /* conn_pinned_bytes_estimate() */
#include "core/geometry.h"
#include "capture.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIB (UINT64_C(1) << 20)
#define U   (UINT64_C(64) << 10) /* budgets of a few U: below any usual RLIMIT_MEMLOCK */

/* ---- helpers ------------------------------------------------------------- */

/* A fresh budget of `limit` bytes, nothing pinned, nothing refused yet.
 * An RLIMIT_MEMLOCK below it would cap it (and fail the case): say so. */
static void fresh_budget(uint64_t limit)
{
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

	pin_budget_atfork_child(); /* the reset a child gets */
	tunables_load_env();
	sdp_tun.pin_budget = limit;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < limit && !pin_has_cap_ipc_lock()) {
		printf("#   RLIMIT_MEMLOCK %llu caps this test's budget\n",
		       (unsigned long long)rl.rlim_cur);
	}
	pin_budget_init();
}

/* ---- take and give ----------------------------------------------------------- */

static int test_take_give(void)
{
	int ok;

	fresh_budget(10 * U);
	ok = check(pin_budget_limit() == 10 * U, "limit %llu",
		   (unsigned long long)pin_budget_limit()) &&
	     check(pin_budget_take(4 * U), "4 U of 10") &&
	     check(pin_budget_take(6 * U), "6 more: exactly the budget") &&
	     check(pin_budget_pinned() == 10 * U, "pinned %llu",
		   (unsigned long long)pin_budget_pinned()) &&
	     check(pin_budget_refusals() == 0, "refusals %llu",
		   (unsigned long long)pin_budget_refusals());
	pin_budget_give(4 * U);
	ok = check(pin_budget_pinned() == 6 * U, "after a give: %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	ok = check(pin_budget_take(4 * U), "the given bytes can be taken again") && ok;
	pin_budget_give(10 * U);
	ok = check(pin_budget_pinned() == 0, "all given back: %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	pin_budget_give(U); /* a forked child releasing its parent's buffers */
	ok = check(pin_budget_pinned() == 0, "a give past zero stays at zero: %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	return ok;
}

static int test_refusal_counted_logged_once(void)
{
	char log[4096];
	int lines, ok;

	fresh_budget(8 * U);
	ok = check(pin_budget_take(7 * U), "7 U of 8");
	stderr_capture_begin();
	bool first = pin_budget_take(2 * U);
	bool second = pin_budget_take(2 * U);
	bool tried = pin_budget_try(2 * U);
	bool huge = pin_budget_take(SIZE_MAX);
	lines = stderr_capture_end(log, sizeof(log));
	ok = check(!first && !second && !tried && !huge, "a take past the budget succeeded") && ok;
	ok = check(pin_budget_refusals() == 3, "refusals %llu, expected 3 (try counts none)",
		   (unsigned long long)pin_budget_refusals()) && ok;
	ok = check(pin_budget_pinned() == 7 * U, "a refusal moved the count: %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	ok = check(lines == 1, "%d log lines, expected 1: %s", lines, log) && ok;
	ok = check(strstr(log, "pinned-memory budget of 524288 bytes") != NULL &&
		   strstr(log, "reason resources") != NULL, "log: %s", log) && ok;
	ok = check(pin_budget_take(U), "the last U still fits") && ok;
	/* A forked child starts afresh, and says it again. */
	pin_budget_atfork_child();
	ok = check(pin_budget_pinned() == 0 && pin_budget_refusals() == 0,
		   "the child's count %llu, refusals %llu", (unsigned long long)pin_budget_pinned(),
		   (unsigned long long)pin_budget_refusals()) && ok;
	stderr_capture_begin();
	pin_budget_take(9 * U);
	lines = stderr_capture_end(log, sizeof(log));
	ok = check(lines == 1, "the child logged %d lines: %s", lines, log) && ok;
	return ok;
}

static int test_zero_budget_refuses_all(void)
{
	char log[1024];
	int ok;

	fresh_budget(0);
	stderr_capture_begin();
	ok = check(!pin_budget_take(1), "one byte of a zero budget") &&
	     check(pin_budget_take(0), "nothing always fits");
	stderr_capture_end(log, sizeof(log));
	return ok;
}

struct churn_arg {
	unsigned rounds;
	uint64_t over; /* takes that found the count above the budget */
};

static void *churn(void *p)
{
	struct churn_arg *a = p;

	for (unsigned i = 0; i < a->rounds; i++) {
		size_t n = 4096u * (1 + i % 7);

		if (pin_budget_take(n)) {
			a->over += pin_budget_pinned() > pin_budget_limit();
			pin_budget_give(n);
		}
	}
	return NULL;
}

/* Eight threads take and give at once: the count never passes the budget,
 * ends at zero, and the mirror ends equal to it. */
static int test_concurrent(void)
{
	struct sdp_proc_stats *hdr = calloc(1, sizeof(*hdr));
	struct churn_arg arg[8];
	pthread_t t[8];
	uint64_t over = 0;
	char log[4096];
	int ok;

	fresh_budget(64 * 1024);
	pin_budget_publish(hdr);
	stderr_capture_begin();
	for (int i = 0; i < 8; i++) {
		arg[i] = (struct churn_arg){ 20000, 0 };
		pthread_create(&t[i], NULL, churn, &arg[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		over += arg[i].over;
	}
	stderr_capture_end(log, sizeof(log));
	ok = check(over == 0, "%llu takes saw the count over the budget", (unsigned long long)over) &&
	     check(pin_budget_pinned() == 0, "count %llu at the end",
		   (unsigned long long)pin_budget_pinned()) &&
	     check(atomic_load(&hdr->pinned_bytes) == 0, "mirror %llu at the end",
		   (unsigned long long)atomic_load(&hdr->pinned_bytes)) &&
	     check(atomic_load(&hdr->budget_refusals) == pin_budget_refusals(),
		   "mirrored refusals %llu, counted %llu",
		   (unsigned long long)atomic_load(&hdr->budget_refusals),
		   (unsigned long long)pin_budget_refusals());
	pin_budget_publish(NULL);
	free(hdr);
	return ok;
}

/* ---- the mirror in the stats header ------------------------------------------ */

static int test_mirror(void)
{
	struct sdp_proc_stats *hdr = calloc(1, sizeof(*hdr));
	char log[1024];
	int ok;

	fresh_budget(4 * U);
	ok = check(pin_budget_take(U), "take before publishing");
	pin_budget_publish(hdr);
	ok = check(atomic_load(&hdr->pin_budget) == 4 * U && atomic_load(&hdr->pinned_bytes) == U,
		   "published budget %llu, pinned %llu",
		   (unsigned long long)atomic_load(&hdr->pin_budget),
		   (unsigned long long)atomic_load(&hdr->pinned_bytes)) && ok;
	pin_budget_take(2 * U);
	stderr_capture_begin();
	pin_budget_take(2 * U); /* refused */
	stderr_capture_end(log, sizeof(log));
	ok = check(atomic_load(&hdr->pinned_bytes) == 3 * U &&
		   atomic_load(&hdr->budget_refusals) == 1, "mirror: pinned %llu, refusals %llu",
		   (unsigned long long)atomic_load(&hdr->pinned_bytes),
		   (unsigned long long)atomic_load(&hdr->budget_refusals)) && ok;
	/* Lies written into the shared copy change nothing in the count. */
	atomic_store(&hdr->pinned_bytes, 0);
	ok = check(!pin_budget_try(2 * U), "the shared copy was read back") && ok;
	pin_budget_give(3 * U);
	ok = check(atomic_load(&hdr->pinned_bytes) == 0, "after give: %llu",
		   (unsigned long long)atomic_load(&hdr->pinned_bytes)) && ok;
	pin_budget_publish(NULL);
	pin_budget_take(U);
	ok = check(atomic_load(&hdr->pinned_bytes) == 0, "stored after the mirror stopped") && ok;
	pin_budget_give(U);
	free(hdr);
	return ok;
}

/* ---- SDPSHIM_PIN_BUDGET -------------------------------------------------------- */

struct env_case {
	const char *text;
	uint64_t want;   /* sdp_tun.pin_budget */
	int bad;         /* diagnostic lines */
};

static const struct env_case env_cases[] = {
	{ "1048576", 1048576, 0 },
	{ "64M", 64 * MIB, 0 },
	{ "64m", 64 * MIB, 0 },
	{ "512K", 512 * 1024, 0 },
	{ "2G", 2048 * MIB, 0 },
	{ "0", 0, 0 },
	{ "1048576G", UINT64_C(1) << 50, 0 },       /* the maximum */
	{ "bogus", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "64MiB", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "64 M", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "-1", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ " 5", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "+5", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "M", SDP_PIN_BUDGET_DEFAULT, 1 },
	{ "1048577G", SDP_PIN_BUDGET_DEFAULT, 1 },  /* past the maximum */
	{ "99999999999999999999", SDP_PIN_BUDGET_DEFAULT, 1 }, /* past 64 bits */
	{ "18014398509481984K", SDP_PIN_BUDGET_DEFAULT, 1 },   /* 2^54 K: the shift would wrap */
	{ "", SDP_PIN_BUDGET_DEFAULT, 0 },
};

static int test_env(void)
{
	int ok = 1;

	for (size_t i = 0; i < ARRAY_SIZE(env_cases); i++) {
		const struct env_case *c = &env_cases[i];
		char log[1024];
		int bad, lines;

		setenv("SDPSHIM_PIN_BUDGET", c->text, 1);
		stderr_capture_begin();
		bad = tunables_load_env();
		lines = stderr_capture_end(log, sizeof(log));
		ok = check(sdp_tun.pin_budget == c->want, "'%s': %llu, expected %llu", c->text,
			   (unsigned long long)sdp_tun.pin_budget, (unsigned long long)c->want) && ok;
		ok = check(bad == c->bad && lines == c->bad, "'%s': %d bad, %d lines, expected %d",
			   c->text, bad, lines, c->bad) && ok;
		ok = check(!c->bad || (strstr(log, "SDPSHIM_PIN_BUDGET=") != NULL &&
				       strstr(log, "using 268435456") != NULL),
			   "'%s': diagnostic '%s'", c->text, log) && ok;
	}
	unsetenv("SDPSHIM_PIN_BUDGET");
	ok = check(tunables_load_env() == 0 && sdp_tun.pin_budget == SDP_PIN_BUDGET_DEFAULT,
		   "unset: %llu", (unsigned long long)sdp_tun.pin_budget) && ok;
	return ok;
}

static int test_link_slots_env(void)
{
	char log[1024];
	int ok, bad;

	setenv("SDPSHIM_LINK_SLOTS", "1024", 1);
	ok = check(tunables_load_env() == 0 && sdp_tun.link_slots == 1024, "1024: %u",
		   sdp_tun.link_slots);
	setenv("SDPSHIM_LINK_SLOTS", "0", 1);
	stderr_capture_begin();
	bad = tunables_load_env();
	ok = check(stderr_capture_end(log, sizeof(log)) == 1 && bad == 1 && sdp_tun.link_slots == 256,
		   "0: %u, log '%s'", sdp_tun.link_slots, log) && ok;
	unsetenv("SDPSHIM_LINK_SLOTS");
	ok = check(tunables_load_env() == 0 && sdp_tun.link_slots == 256, "default %u",
		   sdp_tun.link_slots) && ok;
	return ok;
}

/* ---- the RLIMIT_MEMLOCK cap ----------------------------------------------------- */

static int drop_cap_ipc_lock(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data) != 0)
		return -1;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	return (int)syscall(SYS_capset, &hdr, data);
}

/* In a child without CAP_IPC_LOCK, with a soft RLIMIT_MEMLOCK of 3 MiB:
 * exit 0 if the budget is capped there (the default and a larger
 * SDPSHIM_PIN_BUDGET alike) and a smaller one is left alone. */
static int capped_child(void)
{
	struct rlimit rl;

	if (drop_cap_ipc_lock() != 0 || pin_has_cap_ipc_lock() || getrlimit(RLIMIT_MEMLOCK, &rl))
		return 10;
	rl.rlim_cur = 3 * MIB;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur)
		rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return 11;
	unsetenv("SDPSHIM_PIN_BUDGET");
	tunables_load_env();
	pin_budget_init();
	if (pin_budget_limit() != rl.rlim_cur || !pin_budget_capped())
		return 12;
	setenv("SDPSHIM_PIN_BUDGET", "1G", 1);
	tunables_load_env();
	pin_budget_init();
	if (pin_budget_limit() != rl.rlim_cur || !pin_budget_capped())
		return 13;
	setenv("SDPSHIM_PIN_BUDGET", "1M", 1);
	tunables_load_env();
	pin_budget_init();
	if (pin_budget_limit() != MIB || pin_budget_capped())
		return 14;
	return 0;
}

static int test_memlock_cap(void)
{
	int status = 0;
	pid_t child = fork();

	if (child == 0)
		_exit(capped_child());
	waitpid(child, &status, 0);
	return check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d (10: no "
		     "capset, 11: setrlimit, 12: default not capped, 13: 1G not capped, 14: 1M "
		     "changed)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* With CAP_IPC_LOCK the limit does not bind: no cap, whatever it says. */
static int test_cap_ipc_lock_no_cap(void)
{
	uint64_t soft;

	if (!pin_has_cap_ipc_lock())
		return printf("#   needs CAP_IPC_LOCK: not run\n") > 0;
	fresh_budget(SDP_PIN_BUDGET_DEFAULT);
	return check(!pin_memlock_binds(&soft), "the limit binds despite CAP_IPC_LOCK") &&
	       check(pin_budget_limit() == SDP_PIN_BUDGET_DEFAULT && !pin_budget_capped(),
		     "limit %llu", (unsigned long long)pin_budget_limit());
}

/* ---- what one connection pins ---------------------------------------------------- */

static int test_conn_estimate(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int ok;

	unsetenv("SDPSHIM_BUF_SIZE");
	unsetenv("SDPSHIM_BUF_COUNT");
	tunables_load_env();
	ok = check(pin_pages_len(1) == page && pin_pages_len(page) == page &&
		   pin_pages_len(page + 1) == 2 * page && pin_pages_len(0) == 0, "page rounding") &&
	     check(conn_rx_mem_len(32768, 32) == 32 * 32768 + CTRL_SLOTS * CTRL_SLOT_SIZE, "rx") &&
	     check(conn_tx_mem_len(32768, 33) == 33 * 32768, "tx");
	if (page == 4096)
		ok = check(conn_pinned_bytes_estimate() == 2134016, "default geometry: %zu, expected "
			   "1052672 + 1081344", conn_pinned_bytes_estimate()) && ok;
	setenv("SDPSHIM_BUF_SIZE", "65536", 1);
	setenv("SDPSHIM_BUF_COUNT", "16", 1);
	tunables_load_env();
	ok = check(conn_pinned_bytes_estimate() ==
		   pin_pages_len(16 * 65536 + 2048) + pin_pages_len(17 * 65536),
		   "65536 x 16: %zu", conn_pinned_bytes_estimate()) && ok;
	unsetenv("SDPSHIM_BUF_SIZE");
	unsetenv("SDPSHIM_BUF_COUNT");
	tunables_load_env();
	return ok;
}

static const struct tap_case cases[] = {
	{ "take and give keep one count within the budget, never below zero", test_take_give },
	{ "a refusal is counted and logged once per process (a forked child again)",
	  test_refusal_counted_logged_once },
	{ "a budget of 0 refuses every byte", test_zero_budget_refuses_all },
	{ "threads taking and giving at once: never over the budget, back to zero",
	  test_concurrent },
	{ "the count, budget and refusals are mirrored into a stats header, never read back",
	  test_mirror },
	{ "SDPSHIM_PIN_BUDGET: K, M, G suffixes; a bad value gets one line and the default",
	  test_env },
	{ "SDPSHIM_LINK_SLOTS: 1..65536, default 256", test_link_slots_env },
	{ "without CAP_IPC_LOCK the soft RLIMIT_MEMLOCK caps the budget", test_memlock_cap },
	{ "with CAP_IPC_LOCK RLIMIT_MEMLOCK does not cap it", test_cap_ipc_lock_no_cap },
	{ "one connection's pinned bytes from the geometry, in whole pages", test_conn_estimate },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
