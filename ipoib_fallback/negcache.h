/* Negative cache of peers that cannot take the RDMA path, keyed by
 * (address, port), with a TTL.  A second connect to a plain-TCP peer pays no
 * detection cost.  Thread-safe; bounded in size (oldest entry evicted). */
#ifndef SDPSHIM_NEGCACHE_H
#define SDPSHIM_NEGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/reason.h"

struct negcache;

struct negcache *negcache_new(uint64_t ttl_ms, size_t max_entries);
void negcache_free(struct negcache *nc);

/* True (and *reason set) if addr (AF_INET/AF_INET6 with port) is cached
 * and not older than the TTL at now_ms.  Expired entries are dropped. */
bool negcache_lookup(struct negcache *nc, const struct sockaddr *addr,
		     uint64_t now_ms, enum sdp_reason *reason);
/* Inserts or refreshes an entry. */
void negcache_insert(struct negcache *nc, const struct sockaddr *addr,
		     enum sdp_reason reason, uint64_t now_ms);
void negcache_remove(struct negcache *nc, const struct sockaddr *addr);
size_t negcache_size(struct negcache *nc);

#endif
