/* Unit tests (TAP) for the registration cache under the pinned-memory
 * budget (core/mrcache.c with base/pin_budget.c; issue 15), verbs stubbed:
 * a miss that does not fit evicts unused entries, least recently used
 * first; entries in use are never evicted, and with nothing to evict the
 * miss is refused (-ENOBUFS, counted) and zero-copy falls back; a
 * channel's buffers (mrcache_budget_take) make room the same way; every
 * deregistration, and every failed registration, gives its bytes back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "base/config.h"
#include "base/pin_budget.h"
#include "core/dev.h"
#include "core/mrcache.h"
#include "capture.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define K64 (64u * 1024u)

__thread int sdp_in_lib; /* base/guard.h: defined by base/real.c in the library */

/* ---- verbs, stubbed -------------------------------------------------------- */

static int regs, deregs;
static bool fail_next_reg;
static void *dereg_addr[64];

static struct ibv_mr *fake_reg(void *addr, size_t length)
{
	struct ibv_mr *mr;

	if (fail_next_reg) {
		fail_next_reg = false;
		errno = ENOMEM;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	mr->addr = addr;
	mr->length = length;
	regs++;
	return mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return fake_reg(addr, length);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	return fake_reg(addr, length);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (deregs < (int)ARRAY_SIZE(dereg_addr))
		dereg_addr[deregs] = mr->addr;
	deregs++;
	free(mr);
	return 0;
}

/* ---- helpers ----------------------------------------------------------------- */

static struct sdp_dev dev;
static char log_text[4096];

static void *buffer(void)
{
	void *p = aligned_alloc(4096, 2 * K64);

	if (!p) {
		perror("aligned_alloc");
		exit(1);
	}
	return p;
}

static bool deregistered(const void *addr)
{
	for (int i = 0; i < deregs && i < (int)ARRAY_SIZE(dereg_addr); i++)
		if (dereg_addr[i] == addr)
			return true;
	return false;
}

/* A budget of `limit`, an empty cache, fresh counts; log lines go to a file. */
static void fresh(uint64_t limit)
{
	mrcache_flush_dev(&dev);
	pin_budget_atfork_child();
	tunables_load_env();
	sdp_tun.pin_budget = limit;
	pin_budget_init();
	regs = deregs = 0;
	fail_next_reg = false;
	memset(dereg_addr, 0, sizeof(dereg_addr));
}

static struct mrc_entry *get(void *addr, size_t len, int *err)
{
	struct mrc_entry *e = NULL;
	bool hit;

	*err = mrcache_get(&dev, addr, len, true, &e, &hit);
	return *err ? NULL : e;
}

/* Runs fn with fd 2 in a file; the lines it logged in log_text. */
static int quietly(int (*fn)(void))
{
	int ok;

	stderr_capture_begin();
	ok = fn();
	stderr_capture_end(log_text, sizeof(log_text));
	return ok;
}

/* ---- cases ------------------------------------------------------------------- */

static int lru_eviction(void)
{
	void *a = buffer(), *b = buffer(), *c = buffer();
	struct mrc_entry *ea, *eb, *ec;
	int err, ok;

	fresh(3 * K64);
	ea = get(a, K64, &err);
	eb = get(b, K64, &err);
	ok = check(ea && eb, "two entries of 64 KiB in a budget of 192 KiB");
	if (!ok)
		return 0;
	mrcache_put(ea);
	mrcache_put(eb);
	ea = get(a, K64, &err);         /* a hit: a is now the more recent */
	mrcache_put(ea);
	ok = check(regs == 2 && pin_budget_pinned() == 2 * K64, "%d registrations, %llu pinned",
		   regs, (unsigned long long)pin_budget_pinned());
	ec = get(c, 2 * K64, &err);     /* 128 KiB: one of the two must go */
	ok = check(ec != NULL, "the miss was refused: %d", err) && ok;
	ok = check(deregistered(b) && !deregistered(a), "evicted: b %d, a %d (b is the LRU)",
		   deregistered(b), deregistered(a)) && ok;
	ok = check(pin_budget_pinned() == 3 * K64 && pin_budget_refusals() == 0,
		   "%llu pinned, %llu refusals", (unsigned long long)pin_budget_pinned(),
		   (unsigned long long)pin_budget_refusals()) && ok;
	if (ec)
		mrcache_put(ec);
	fresh(0);
	free(a);
	free(b);
	free(c);
	return ok;
}

static int in_use_not_evicted(void)
{
	void *a = buffer(), *b = buffer();
	struct mrc_entry *ea, *eb;
	int err, ok;

	fresh(2 * K64);
	ea = get(a, 2 * K64, &err);     /* held: a transfer in flight */
	ok = check(ea != NULL, "first entry: %d", err);
	eb = get(b, K64, &err);
	ok = check(eb == NULL && err == -ENOBUFS, "a miss past the budget gave %d", err) && ok;
	ok = check(deregs == 0 && regs == 1, "an entry in use was evicted (%d deregs)", deregs) && ok;
	ok = check(pin_budget_refusals() == 1 && pin_budget_pinned() == 2 * K64,
		   "%llu refusals, %llu pinned", (unsigned long long)pin_budget_refusals(),
		   (unsigned long long)pin_budget_pinned()) && ok;
	if (ea)
		mrcache_put(ea);
	eb = get(b, K64, &err);         /* a is unused now: evicted for b */
	ok = check(eb != NULL && deregistered(a), "after the put: %d, a deregistered %d", err,
		   deregistered(a)) && ok;
	if (eb)
		mrcache_put(eb);
	fresh(0);
	free(a);
	free(b);
	return ok;
}

static int channel_buffers_make_room(void)
{
	void *a = buffer();
	struct mrc_entry *ea;
	int err, ok;

	fresh(3 * K64);
	ea = get(a, 2 * K64, &err);
	ok = check(ea != NULL, "entry: %d", err);
	if (ea)
		mrcache_put(ea);
	ok = check(mrcache_budget_take(2 * K64), "the channel's buffers did not fit") && ok;
	ok = check(deregistered(a) && pin_budget_pinned() == 2 * K64,
		   "a deregistered %d, %llu pinned", deregistered(a),
		   (unsigned long long)pin_budget_pinned()) && ok;
	ok = check(!mrcache_budget_take(2 * K64) && pin_budget_refusals() == 1,
		   "nothing left to evict, yet %llu refusals",
		   (unsigned long long)pin_budget_refusals()) && ok;
	pin_budget_give(2 * K64);
	fresh(0);
	free(a);
	return ok;
}

static int bytes_given_back(void)
{
	void *a = buffer(), *b = buffer();
	struct mrc_entry *ea;
	int err, ok;

	fresh(4 * K64);
	ea = get(a, K64 + 1, &err);     /* 17 pages */
	ok = check(ea && pin_budget_pinned() == K64 + 4096, "%llu pinned for 64 KiB + 1",
		   (unsigned long long)pin_budget_pinned());
	fail_next_reg = true;
	ok = check(get(b, K64, &err) == NULL && err == -ENOMEM, "a failed registration gave %d",
		   err) && ok;
	ok = check(pin_budget_pinned() == K64 + 4096, "a failed registration kept %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	if (ea)
		mrcache_put(ea);
	mrcache_flush_dev(&dev);
	ok = check(pin_budget_pinned() == 0 && deregs == 1, "after the flush: %llu pinned, %d deregs",
		   (unsigned long long)pin_budget_pinned(), deregs) && ok;
	/* Invalidated while in use: deregistered, and given back, at the put. */
	ea = get(a, K64, &err);
	mrcache_invalidate(a, K64);
	ok = check(pin_budget_pinned() == K64, "a stale entry in use gave its bytes back early") && ok;
	if (ea)
		mrcache_put(ea);
	ok = check(pin_budget_pinned() == 0, "the stale entry's put kept %llu",
		   (unsigned long long)pin_budget_pinned()) && ok;
	fresh(0);
	free(a);
	free(b);
	return ok;
}

static int test_lru_eviction(void) { return quietly(lru_eviction); }
static int test_in_use_not_evicted(void) { return quietly(in_use_not_evicted); }
static int test_channel_buffers_make_room(void) { return quietly(channel_buffers_make_room); }
static int test_bytes_given_back(void) { return quietly(bytes_given_back); }

static const struct tap_case cases[] = {
	{ "a miss past the budget evicts unused entries, least recently used first",
	  test_lru_eviction },
	{ "entries in use are never evicted: with nothing to evict, -ENOBUFS, counted",
	  test_in_use_not_evicted },
	{ "a channel's buffers evict unused cached registrations (mrcache_budget_take)",
	  test_channel_buffers_make_room },
	{ "deregistration and failed registrations give the bytes back, in whole pages",
	  test_bytes_given_back },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
