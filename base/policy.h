/* The per-connection policy: what the path decision (ipoib_fallback/path.c)
 * settles for one connection or listener, handed whole to the channel
 * (core/).  policy_default() is the one place its defaults come from; a
 * matching rule overrides them.  Also the network prefixes of the clients=
 * option, with the one matcher the rules and the listener share. */
#ifndef SDPSHIM_POLICY_H
#define SDPSHIM_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#define SDP_CLIENT_NETS_MAX 8

/* A network.  IPv4 is stored as IPv4-mapped IPv6 (::ffff:a.b.c.d) with
 * prefix + 96, so one comparison serves both families. */
struct sdp_net {
	uint8_t addr[16];                  /* network order, as written (host bits kept) */
	uint8_t prefix;                    /* 0..128 */
};

struct sdp_policy {
	int64_t zcopy_thresh;              /* bytes; 0: buffer copy only */
	unsigned connect_timeout_ms;       /* client: bound of the whole RDMA attempt, binding included */
	bool climb;                        /* a failover's stream goes back to RDMA; a server takes
					    * a peer's move back (core/climb.c) */
	/* Server: the client subnets that may open RDMA channels (check with
	 * sdp_nets_match()); 0: no restriction.  Plain TCP is never restricted
	 * by them. */
	unsigned client_net_count;
	struct sdp_net client_nets[SDP_CLIENT_NETS_MAX];
};

/* The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
extern const uint8_t sdp_v4_mapped_prefix[12];

/* The tunables (base/config.h), no client restriction. */
void policy_default(struct sdp_policy *p);

/* True if the first `bits` bits of a and b are equal. */
bool sdp_prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits);
/* True if addr (16 bytes, IPv4-mapped for IPv4) lies in one of the nets;
 * count 0 means no restriction (true).  Families stay apart as in
 * rules_match(): an IPv4 net (a mapped address with prefix >= 96) matches
 * only IPv4-mapped addresses, and any other IPv6 net, even ::/0, matches
 * only non-mapped IPv6 addresses.  At most SDP_CLIENT_NETS_MAX nets are
 * read; NULL nets or addr with count > 0 is false. */
bool sdp_nets_match(const struct sdp_net *nets, unsigned count, const uint8_t addr[16]);

#endif
