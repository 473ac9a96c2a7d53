/* Finding the first path-choice rule for a connection (rules_match), and
 * whether a client's address is in a server rule's clients= networks. */
#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <string.h>

#include "ipoib_fallback/rules.h"
#include "ipoib_fallback/rules_internal.h"

/* An address network to compare against: family, bytes, prefix bits. */
struct net {
	int family;
	const uint8_t *addr;
	unsigned prefix;
};

const uint8_t rules_v4_mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* The peer as a /32 or /128 network; IPv4-mapped IPv6 becomes IPv4. */
static bool peer_net(const struct sockaddr *sa, struct net *peer, uint16_t *port)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		*peer = (struct net){ AF_INET, (const uint8_t *)&in->sin_addr, 32 };
		*port = ntohs(in->sin_port);
		return true;
	}
	if (sa->sa_family != AF_INET6)
		return false;
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
	const uint8_t *a = in6->sin6_addr.s6_addr;
	*port = ntohs(in6->sin6_port);
	if (memcmp(a, rules_v4_mapped_prefix, sizeof(rules_v4_mapped_prefix)) == 0)
		*peer = (struct net){ AF_INET, a + 12, 32 };
	else
		*peer = (struct net){ AF_INET6, a, 128 };
	return true;
}

/* The rule's network; an IPv6 rule inside ::ffff:0:0/96 is an IPv4 rule, so
 * that it keeps matching the peers it names. */
static struct net rule_address_net(const struct sdp_rule *r)
{
	unsigned max = r->family == AF_INET ? 32 : 128;
	unsigned prefix = r->prefix > max ? max : r->prefix;

	if (r->family == AF_INET6 && prefix >= 96 &&
	    memcmp(r->addr, rules_v4_mapped_prefix, sizeof(rules_v4_mapped_prefix)) == 0)
		return (struct net){ AF_INET, r->addr + 12, prefix - 96 };
	return (struct net){ r->family, r->addr, prefix };
}

static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(a, b, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[whole] & mask) == (b[whole] & mask);
}

static bool address_matches(const struct sdp_rule *r, const struct net *peer)
{
	if (r->family == AF_UNSPEC)
		return true;
	struct net rn = rule_address_net(r);
	return rn.family == peer->family && prefix_equal(rn.addr, peer->addr, rn.prefix);
}

static bool program_matches(const struct sdp_rule *r, const char *progname)
{
	if (memchr(r->prog_glob, '\0', sizeof(r->prog_glob)) == NULL)
		return false;
	if (progname == NULL)
		return strcmp(r->prog_glob, "*") == 0;
	return fnmatch(r->prog_glob, progname, 0) == 0;
}

/* What a fail_closed set matches: "use tcp <role> * *:*", of no line. */
static const struct sdp_rule fail_closed_rule[2] = {
	{ .use = RULE_USE_TCP, .role = RULE_ROLE_SERVER, .prog_glob = "*", .family = AF_UNSPEC,
	  .port_lo = 0, .port_hi = 65535, .zcopy_thresh = -1, .connect_timeout_ms = -1 },
	{ .use = RULE_USE_TCP, .role = RULE_ROLE_CLIENT, .prog_glob = "*", .family = AF_UNSPEC,
	  .port_lo = 0, .port_hi = 65535, .zcopy_thresh = -1, .connect_timeout_ms = -1 },
};

const struct sdp_rule *rules_match(const struct sdp_rules *rules, enum rule_role role,
				   const char *progname, const struct sockaddr *addr)
{
	struct net peer;
	uint16_t port;

	if (rules == NULL || addr == NULL || !peer_net(addr, &peer, &port))
		return NULL;
	if (rules->fail_closed) {
		for (size_t i = 0; i < sizeof(fail_closed_rule) / sizeof(fail_closed_rule[0]); i++)
			if (fail_closed_rule[i].role == role)
				return &fail_closed_rule[i];
		return NULL;
	}
	if (rules->rule == NULL)
		return NULL;
	for (size_t i = 0; i < rules->count; i++) {
		const struct sdp_rule *r = &rules->rule[i];
		if (r->role == role && port >= r->port_lo && port <= r->port_hi &&
		    address_matches(r, &peer) && program_matches(r, progname))
			return r;
	}
	return NULL;
}

enum rule_use rules_decide(const struct sdp_rules *rules, enum rule_role role,
			   const char *progname, const struct sockaddr *addr)
{
	const struct sdp_rule *r = rules_match(rules, role, progname, addr);

	return r != NULL ? r->use : RULE_USE_BOTH;
}

/* Inside ::ffff:0:0/96: an IPv4 address written as IPv6. */
static bool is_v4_mapped(const uint8_t addr[16])
{
	return memcmp(addr, rules_v4_mapped_prefix, sizeof(rules_v4_mapped_prefix)) == 0;
}

bool rule_nets_match(const struct rule_net *nets, unsigned count, const uint8_t addr[16])
{
	if (count == 0)
		return true;
	if (nets == NULL || addr == NULL)
		return false;
	if (count > RULE_CLIENT_NETS_MAX)
		count = RULE_CLIENT_NETS_MAX;
	bool addr_v4 = is_v4_mapped(addr);
	for (unsigned i = 0; i < count; i++) {
		unsigned prefix = nets[i].prefix > 128 ? 128 : nets[i].prefix;
		bool net_v4 = prefix >= 96 && is_v4_mapped(nets[i].addr);
		if (net_v4 == addr_v4 && prefix_equal(nets[i].addr, addr, prefix))
			return true;
	}
	return false;
}
