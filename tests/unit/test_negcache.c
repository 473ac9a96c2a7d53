/* Unit tests (TAP) for ipoib_fallback/negcache.c: hits and misses, TTL,
 * refresh, removal, eviction of the oldest entry, keys, and 4 threads. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "ipoib_fallback/negcache.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ---------------------------------------------------------------- */

struct addr {
	struct sockaddr_storage ss;
};

static struct addr addr_scoped(const char *ip, unsigned port, uint32_t scope)
{
	struct addr a;

	memset(&a, 0, sizeof(a));
	if (strchr(ip, ':') != NULL) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a.ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		in6->sin6_scope_id = scope;
		inet_pton(AF_INET6, ip, &in6->sin6_addr);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&a.ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, ip, &in->sin_addr);
	}
	return a;
}

static struct addr addr_of(const char *ip, unsigned port)
{
	return addr_scoped(ip, port, 0);
}

#define SA(a) ((const struct sockaddr *)&(a).ss)

static void insert(struct negcache *nc, const char *ip, unsigned port, enum sdp_reason why,
		   uint64_t now)
{
	struct addr a = addr_of(ip, port);

	negcache_insert(nc, SA(a), why, now);
}

/* 1 if ip:port is cached at now (and, when why >= 0, with that reason). */
static int hit(struct negcache *nc, const char *ip, unsigned port, uint64_t now, int why)
{
	struct addr a = addr_of(ip, port);
	enum sdp_reason got = SDP_REASON_COUNT;

	if (!negcache_lookup(nc, SA(a), now, &got))
		return 0;
	return why < 0 || (int)got == why;
}

/* ---- cases ------------------------------------------------------------------ */

static int test_empty(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok = check(nc != NULL, "new");

	ok = ok && check(negcache_size(nc) == 0, "size") &&
	     check(!hit(nc, "10.0.0.1", 80, 0, -1), "hit in empty cache");
	negcache_free(nc);
	return ok;
}

static int test_insert_lookup(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 100);
	ok = check(hit(nc, "10.0.0.1", 80, 100, SDP_REASON_PEER_NO_SDPSHIM), "hit with reason");
	ok &= check(negcache_size(nc) == 1, "size 1");
	negcache_free(nc);
	return ok;
}

static int test_port_distinct(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(!hit(nc, "10.0.0.1", 81, 0, -1), "other port hit");
	ok &= check(!hit(nc, "10.0.0.1", 0, 0, -1), "port 0 hit");
	insert(nc, "10.0.0.1", 81, SDP_REASON_RDMA_TIMEOUT, 0);
	ok &= check(hit(nc, "10.0.0.1", 80, 0, SDP_REASON_PEER_NO_SDPSHIM), "port 80 reason");
	ok &= check(hit(nc, "10.0.0.1", 81, 0, SDP_REASON_RDMA_TIMEOUT), "port 81 reason");
	ok &= check(negcache_size(nc) == 2, "size 2");
	negcache_free(nc);
	return ok;
}

static int test_address_distinct(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(!hit(nc, "10.0.0.2", 80, 0, -1), "neighbour hit");
	ok &= check(!hit(nc, "1.0.0.10", 80, 0, -1), "reversed bytes hit");
	negcache_free(nc);
	return ok;
}

static int test_ipv4_vs_ipv6(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok;

	/* Same leading bytes, different family: different peers. */
	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(!hit(nc, "a00:1::", 80, 0, -1), "IPv6 with IPv4's bytes hit");
	insert(nc, "2001:db8::1", 80, SDP_REASON_PEER_UNREACHABLE, 0);
	ok &= check(hit(nc, "2001:db8::1", 80, 0, SDP_REASON_PEER_UNREACHABLE), "IPv6 hit");
	ok &= check(!hit(nc, "2001:db8::2", 80, 0, -1), "IPv6 neighbour hit");
	ok &= check(negcache_size(nc) == 2, "size 2");
	negcache_free(nc);
	return ok;
}

static int test_mapped_is_ipv4(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	int ok;

	insert(nc, "::ffff:10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(hit(nc, "10.0.0.1", 80, 0, SDP_REASON_PEER_NO_SDPSHIM), "plain IPv4 misses mapped");
	insert(nc, "10.0.0.1", 80, SDP_REASON_RDMA_TIMEOUT, 0);
	ok &= check(negcache_size(nc) == 1, "mapped and plain are two entries");
	ok &= check(hit(nc, "::ffff:10.0.0.1", 80, 0, SDP_REASON_RDMA_TIMEOUT), "mapped lookup");
	negcache_free(nc);
	return ok;
}

static int test_scope_id_distinct(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	struct addr eth0 = addr_scoped("fe80::1", 80, 2), eth1 = addr_scoped("fe80::1", 80, 3);
	int ok;

	negcache_insert(nc, SA(eth0), SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(negcache_lookup(nc, SA(eth0), 0, NULL), "same scope misses");
	ok &= check(!negcache_lookup(nc, SA(eth1), 0, NULL), "other scope hits");
	negcache_free(nc);
	return ok;
}

static int test_ttl_boundary(void)
{
	struct negcache *nc = negcache_new(500, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 1000);
	ok = check(hit(nc, "10.0.0.1", 80, 1499, -1), "miss at age 499");
	ok &= check(hit(nc, "10.0.0.1", 80, 1500, -1), "miss at age 500 (= TTL)");
	ok &= check(negcache_size(nc) == 1, "size before expiry");
	ok &= check(!hit(nc, "10.0.0.1", 80, 1501, -1), "hit at age 501");
	ok &= check(negcache_size(nc) == 0, "expired entry not dropped");
	ok &= check(!hit(nc, "10.0.0.1", 80, 1000, -1), "dropped entry came back");
	negcache_free(nc);
	return ok;
}

static int test_ttl_zero(void)
{
	struct negcache *nc = negcache_new(0, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 7);
	ok = check(hit(nc, "10.0.0.1", 80, 7, -1), "miss in the same ms");
	ok &= check(!hit(nc, "10.0.0.1", 80, 8, -1), "hit 1 ms later");
	negcache_free(nc);
	return ok;
}

static int test_clock_behind_stamp(void)
{
	struct negcache *nc = negcache_new(100, 8);
	int ok;

	/* Another thread's older clock reading must not expire a fresh entry. */
	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 5000);
	ok = check(hit(nc, "10.0.0.1", 80, 4000, -1), "miss with now < stamp");
	negcache_free(nc);
	return ok;
}

static int test_refresh(void)
{
	struct negcache *nc = negcache_new(500, 8);
	int ok;

	insert(nc, "10.0.0.1", 80, SDP_REASON_PEER_NO_SDPSHIM, 1000);
	insert(nc, "10.0.0.1", 80, SDP_REASON_RDMA_TIMEOUT, 1400);
	ok = check(negcache_size(nc) == 1, "refresh added a second entry");
	ok &= check(hit(nc, "10.0.0.1", 80, 1800, SDP_REASON_RDMA_TIMEOUT), "refreshed entry expired");
	ok &= check(!hit(nc, "10.0.0.1", 80, 1901, -1), "entry outlived refreshed TTL");
	negcache_free(nc);
	return ok;
}

static int test_remove(void)
{
	struct negcache *nc = negcache_new(1000, 8);
	struct addr a = addr_of("10.0.0.1", 80), b = addr_of("10.0.0.2", 80);
	int ok;

	negcache_insert(nc, SA(a), SDP_REASON_PEER_NO_SDPSHIM, 0);
	negcache_insert(nc, SA(b), SDP_REASON_PEER_NO_SDPSHIM, 0);
	negcache_remove(nc, SA(a));
	ok = check(!negcache_lookup(nc, SA(a), 0, NULL), "removed entry hits");
	ok &= check(negcache_lookup(nc, SA(b), 0, NULL), "other entry gone");
	negcache_remove(nc, SA(a));
	ok &= check(negcache_size(nc) == 1, "size after removes");
	negcache_remove(nc, SA(b));
	ok &= check(negcache_size(nc) == 0, "size 0");
	negcache_insert(nc, SA(a), SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok &= check(negcache_lookup(nc, SA(a), 0, NULL), "insert after emptying");
	negcache_free(nc);
	return ok;
}

static int test_evict_oldest(void)
{
	struct negcache *nc = negcache_new(100000, 3);
	int ok;

	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 1);
	insert(nc, "10.0.0.2", 1, SDP_REASON_PEER_NO_SDPSHIM, 2);
	insert(nc, "10.0.0.3", 1, SDP_REASON_PEER_NO_SDPSHIM, 3);
	insert(nc, "10.0.0.4", 1, SDP_REASON_PEER_NO_SDPSHIM, 4);
	ok = check(negcache_size(nc) == 3, "size %zu, want 3", negcache_size(nc));
	ok &= check(!hit(nc, "10.0.0.1", 1, 5, -1), "oldest not evicted");
	ok &= check(hit(nc, "10.0.0.2", 1, 5, -1) && hit(nc, "10.0.0.3", 1, 5, -1) &&
		    hit(nc, "10.0.0.4", 1, 5, -1), "a newer entry was evicted");
	negcache_free(nc);
	return ok;
}

static int test_refresh_protects_from_eviction(void)
{
	struct negcache *nc = negcache_new(100000, 3);
	int ok;

	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 1);
	insert(nc, "10.0.0.2", 1, SDP_REASON_PEER_NO_SDPSHIM, 2);
	insert(nc, "10.0.0.3", 1, SDP_REASON_PEER_NO_SDPSHIM, 3);
	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 4);   /* refresh */
	insert(nc, "10.0.0.4", 1, SDP_REASON_PEER_NO_SDPSHIM, 5);
	ok = check(hit(nc, "10.0.0.1", 1, 6, -1), "refreshed entry evicted");
	ok &= check(!hit(nc, "10.0.0.2", 1, 6, -1), "oldest (after refresh) kept");
	ok &= check(negcache_size(nc) == 3, "size");
	negcache_free(nc);
	return ok;
}

static int test_lookup_does_not_refresh(void)
{
	struct negcache *nc = negcache_new(100000, 2);
	int ok;

	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 1);
	insert(nc, "10.0.0.2", 1, SDP_REASON_PEER_NO_SDPSHIM, 2);
	hit(nc, "10.0.0.1", 1, 3, -1);
	insert(nc, "10.0.0.3", 1, SDP_REASON_PEER_NO_SDPSHIM, 4);
	ok = check(!hit(nc, "10.0.0.1", 1, 5, -1), "lookup refreshed the entry");
	negcache_free(nc);
	return ok;
}

static int test_many_entries_bounded(void)
{
	struct negcache *nc = negcache_new(100000, 1000);
	char ip[32];
	int ok = 1;

	for (unsigned i = 0; i < 5000; i++) {
		snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16, (i >> 8) & 255, i & 255);
		insert(nc, ip, 443, SDP_REASON_PEER_NO_SDPSHIM, i);
		ok &= check(negcache_size(nc) <= 1000, "size over bound");
	}
	ok &= check(negcache_size(nc) == 1000, "size %zu", negcache_size(nc));
	ok &= check(hit(nc, "10.0.19.135", 443, 5000, -1), "newest (4999) missing");
	ok &= check(hit(nc, "10.0.15.160", 443, 5000, -1), "4000th missing");
	ok &= check(!hit(nc, "10.0.15.159", 443, 5000, -1), "3999th kept");
	negcache_free(nc);
	return ok;
}

static int test_max_one(void)
{
	struct negcache *nc = negcache_new(1000, 1);
	int ok;

	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 0);
	insert(nc, "10.0.0.2", 1, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(negcache_size(nc) == 1, "size");
	ok &= check(hit(nc, "10.0.0.2", 1, 0, -1) && !hit(nc, "10.0.0.1", 1, 0, -1), "contents");
	negcache_free(nc);
	return ok;
}

static int test_max_zero_holds_nothing(void)
{
	struct negcache *nc = negcache_new(1000, 0);
	int ok;

	insert(nc, "10.0.0.1", 1, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(negcache_size(nc) == 0, "size");
	ok &= check(!hit(nc, "10.0.0.1", 1, 0, -1), "hit");
	negcache_free(nc);
	return ok;
}

static int test_degenerate_inputs(void)
{
	struct negcache *nc = negcache_new(1000, 4);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	struct addr a = addr_of("10.0.0.1", 1);
	enum sdp_reason why = SDP_REASON_NONE;
	int ok;

	negcache_insert(nc, NULL, SDP_REASON_PEER_NO_SDPSHIM, 0);
	negcache_insert(nc, (struct sockaddr *)&un, SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok = check(negcache_size(nc) == 0, "non-inet address cached");
	ok &= check(!negcache_lookup(nc, NULL, 0, &why), "NULL lookup");
	ok &= check(!negcache_lookup(nc, (struct sockaddr *)&un, 0, &why), "AF_UNIX lookup");
	negcache_remove(nc, NULL);
	negcache_remove(nc, (struct sockaddr *)&un);
	negcache_insert(NULL, SA(a), SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok &= check(!negcache_lookup(NULL, SA(a), 0, &why), "NULL cache lookup");
	negcache_remove(NULL, SA(a));
	ok &= check(negcache_size(NULL) == 0, "NULL cache size");
	negcache_insert(nc, SA(a), SDP_REASON_PEER_NO_SDPSHIM, 0);
	ok &= check(negcache_lookup(nc, SA(a), 0, NULL), "NULL reason pointer");
	negcache_free(nc);
	negcache_free(NULL);
	return ok;
}

/* ---- concurrency -------------------------------------------------------------- */

#define THREADS 4
#define PER_THREAD 200

struct worker {
	struct negcache *nc;
	unsigned id;
	unsigned failures;
};

/* Private keys (10.<id>.x.y): every check is deterministic while the other
 * threads hammer the same table and mutex. */
static void *private_worker(void *arg)
{
	struct worker *w = arg;
	char ip[32];

	for (unsigned round = 0; round < 20; round++) {
		for (unsigned i = 0; i < PER_THREAD; i++) {
			snprintf(ip, sizeof(ip), "10.%u.%u.%u", w->id, i / 256, i % 256);
			insert(w->nc, ip, 80 + round, SDP_REASON_PEER_NO_SDPSHIM, round);
			if (!hit(w->nc, ip, 80 + round, round, SDP_REASON_PEER_NO_SDPSHIM))
				w->failures++;
			if (i % 2 == 0) {
				struct addr a = addr_of(ip, 80 + round);
				negcache_remove(w->nc, SA(a));
				if (hit(w->nc, ip, 80 + round, round, -1))
					w->failures++;
			}
		}
	}
	return NULL;
}

/* Shared keys in a tiny cache: constant eviction, refresh and expiry races. */
static void *churn_worker(void *arg)
{
	struct worker *w = arg;
	char ip[64];

	for (unsigned i = 0; i < 20000; i++) {
		unsigned k = (i * 7 + w->id) % 97;
		snprintf(ip, sizeof(ip), k % 2 ? "10.9.9.%u" : "2001:db8::%x", k);
		switch (i % 4) {
		case 0: insert(w->nc, ip, k, SDP_REASON_RDMA_TIMEOUT, i); break;
		case 1: hit(w->nc, ip, k, i, -1); break;
		case 2: { struct addr a = addr_of(ip, k); negcache_remove(w->nc, SA(a)); } break;
		default:
			if (negcache_size(w->nc) > 16)
				w->failures++;
		}
	}
	return NULL;
}

static int run_threads(void *(*fn)(void *), struct negcache *nc)
{
	pthread_t t[THREADS];
	struct worker w[THREADS];
	unsigned failures = 0;
	unsigned started = 0;

	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ nc, i, 0 };
		if (pthread_create(&t[i], NULL, fn, &w[i]) == 0)
			started++;
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		failures += w[i].failures;
	}
	return check(started == THREADS, "only %u threads started", started) &&
	       check(failures == 0, "%u failed checks in threads", failures);
}

static int test_threads_private_keys(void)
{
	struct negcache *nc = negcache_new(1000, THREADS * PER_THREAD * 20);
	int ok = run_threads(private_worker, nc);

	ok &= check(negcache_size(nc) == THREADS * (PER_THREAD / 2) * 20, "size %zu",
		    negcache_size(nc));
	negcache_free(nc);
	return ok;
}

static int test_threads_churn(void)
{
	struct negcache *nc = negcache_new(50, 16);
	int ok = run_threads(churn_worker, nc);

	ok &= check(negcache_size(nc) <= 16, "size %zu over bound", negcache_size(nc));
	negcache_free(nc);
	return ok;
}

static const struct tap_case cases[] = {
	{ "new cache is empty", test_empty },
	{ "insert then lookup hits with the reason", test_insert_lookup },
	{ "ports are distinct keys", test_port_distinct },
	{ "addresses are distinct keys", test_address_distinct },
	{ "IPv4 and IPv6 are distinct keys", test_ipv4_vs_ipv6 },
	{ "IPv4-mapped IPv6 is the same peer as IPv4", test_mapped_is_ipv4 },
	{ "IPv6 scope id is part of the key", test_scope_id_distinct },
	{ "TTL: alive at age == TTL, expired and dropped after", test_ttl_boundary },
	{ "TTL 0: alive only within the same ms", test_ttl_zero },
	{ "now earlier than the stamp does not expire", test_clock_behind_stamp },
	{ "insert refreshes stamp and reason", test_refresh },
	{ "remove deletes one entry; removing twice is harmless", test_remove },
	{ "full cache evicts the oldest entry", test_evict_oldest },
	{ "refreshed entry is no longer the oldest", test_refresh_protects_from_eviction },
	{ "lookup does not change eviction order", test_lookup_does_not_refresh },
	{ "5000 inserts into a 1000-entry cache keep the newest 1000", test_many_entries_bounded },
	{ "max_entries 1", test_max_one },
	{ "max_entries 0 holds nothing", test_max_zero_holds_nothing },
	{ "NULL and non-inet inputs are ignored", test_degenerate_inputs },
	{ "4 threads, private keys: insert/lookup/remove", test_threads_private_keys },
	{ "4 threads, shared keys in a 16-entry cache", test_threads_churn },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
