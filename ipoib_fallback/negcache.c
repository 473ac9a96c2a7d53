/* Owns the negative cache: peers (address, port) known not to take the RDMA
 * path, with a TTL and a size bound, in a uthash table behind one mutex. */
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Allocation failure inside uthash must not exit(): the add is rolled back
 * and the entry's hh.tbl is left NULL, which insert_entry() checks. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#include "ipoib_fallback/negcache.h"

/* Hashed as raw bytes, so always built with memset() first. */
struct nc_key {
	uint32_t family;
	uint32_t scope_id;  /* IPv6 link-local peers differ per interface */
	uint16_t port;      /* host order */
	uint8_t  addr[16];
	uint8_t  pad[2];    /* explicit, so that struct copies keep it zero */
};

struct nc_entry {
	struct nc_key key;
	uint64_t stamp_ms;
	enum sdp_reason reason;
	UT_hash_handle hh;
};

/* Table order is insertion order and a refresh re-inserts, so the head is
 * always the entry stamped longest ago: the one to evict. */
struct negcache {
	pthread_mutex_t lock;
	struct nc_entry *table;
	uint64_t ttl_ms;
	size_t max_entries;
};

static const uint8_t v4_mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* Builds the key; IPv4-mapped IPv6 is the same peer as plain IPv4. */
static bool make_key(const struct sockaddr *sa, struct nc_key *key)
{
	memset(key, 0, sizeof(*key));
	if (sa == NULL)
		return false;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		key->family = AF_INET;
		key->port = ntohs(in->sin_port);
		memcpy(key->addr, &in->sin_addr, 4);
		return true;
	}
	if (sa->sa_family != AF_INET6)
		return false;
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
	const uint8_t *a = in6->sin6_addr.s6_addr;
	key->port = ntohs(in6->sin6_port);
	if (memcmp(a, v4_mapped_prefix, sizeof(v4_mapped_prefix)) == 0) {
		key->family = AF_INET;
		memcpy(key->addr, a + 12, 4);
		return true;
	}
	key->family = AF_INET6;
	key->scope_id = in6->sin6_scope_id;
	memcpy(key->addr, a, 16);
	return true;
}

static bool expired(const struct negcache *nc, const struct nc_entry *e, uint64_t now_ms)
{
	return now_ms > e->stamp_ms && now_ms - e->stamp_ms > nc->ttl_ms;
}

static struct nc_entry *find_entry(struct negcache *nc, const struct nc_key *key)
{
	struct nc_entry *e = NULL;

	HASH_FIND(hh, nc->table, key, sizeof(*key), e);
	return e;
}

static void delete_entry(struct negcache *nc, struct nc_entry *e)
{
	HASH_DEL(nc->table, e);
	free(e);
}

/* Adds e at the tail (newest end); frees it if uthash ran out of memory. */
static void add_entry(struct negcache *nc, struct nc_entry *e)
{
	HASH_ADD(hh, nc->table, key, sizeof(e->key), e);
	if (e->hh.tbl == NULL)
		free(e);
}

static void evict_oldest(struct negcache *nc)
{
	if (nc->table != NULL)
		delete_entry(nc, nc->table);
}

struct negcache *negcache_new(uint64_t ttl_ms, size_t max_entries)
{
	struct negcache *nc = calloc(1, sizeof(*nc));

	if (nc == NULL)
		return NULL;
	if (pthread_mutex_init(&nc->lock, NULL) != 0) {
		free(nc);
		return NULL;
	}
	nc->ttl_ms = ttl_ms;
	nc->max_entries = max_entries;
	return nc;
}

void negcache_free(struct negcache *nc)
{
	if (nc == NULL)
		return;
	while (nc->table != NULL)
		evict_oldest(nc);
	pthread_mutex_destroy(&nc->lock);
	free(nc);
}

bool negcache_lookup(struct negcache *nc, const struct sockaddr *addr,
		     uint64_t now_ms, enum sdp_reason *reason)
{
	struct nc_key key;
	bool hit = false;

	if (nc == NULL || !make_key(addr, &key))
		return false;
	pthread_mutex_lock(&nc->lock);
	struct nc_entry *e = find_entry(nc, &key);
	if (e != NULL && expired(nc, e, now_ms)) {
		delete_entry(nc, e);
	} else if (e != NULL) {
		hit = true;
		if (reason != NULL)
			*reason = e->reason;
	}
	pthread_mutex_unlock(&nc->lock);
	return hit;
}

void negcache_insert(struct negcache *nc, const struct sockaddr *addr,
		     enum sdp_reason reason, uint64_t now_ms)
{
	struct nc_key key;

	if (nc == NULL || nc->max_entries == 0 || !make_key(addr, &key))
		return;
	pthread_mutex_lock(&nc->lock);
	struct nc_entry *e = find_entry(nc, &key);
	if (e != NULL) {
		HASH_DEL(nc->table, e);   /* re-added below at the newest end */
	} else {
		while (HASH_COUNT(nc->table) >= nc->max_entries)
			evict_oldest(nc);
		e = malloc(sizeof(*e));
	}
	if (e != NULL) {
		e->key = key;
		e->stamp_ms = now_ms;
		e->reason = reason;
		add_entry(nc, e);
	}
	pthread_mutex_unlock(&nc->lock);
}

void negcache_remove(struct negcache *nc, const struct sockaddr *addr)
{
	struct nc_key key;

	if (nc == NULL || !make_key(addr, &key))
		return;
	pthread_mutex_lock(&nc->lock);
	struct nc_entry *e = find_entry(nc, &key);
	if (e != NULL)
		delete_entry(nc, e);
	pthread_mutex_unlock(&nc->lock);
}

size_t negcache_size(struct negcache *nc)
{
	size_t n;

	if (nc == NULL)
		return 0;
	pthread_mutex_lock(&nc->lock);
	n = HASH_COUNT(nc->table);
	pthread_mutex_unlock(&nc->lock);
	return n;
}
