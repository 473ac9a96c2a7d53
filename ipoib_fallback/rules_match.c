/* Finding the first path-choice rule for a connection (rules_match). */
#include <arpa/inet.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <string.h>

#include "base/policy.h"
#include "ipoib_fallback/rules.h"

/* An address network to compare against: family, bytes, prefix bits. */
struct net {
	int family;
	const uint8_t *addr;
	unsigned prefix;
};

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
	if (memcmp(a, sdp_v4_mapped_prefix, sizeof(sdp_v4_mapped_prefix)) == 0)
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
	    memcmp(r->addr, sdp_v4_mapped_prefix, sizeof(sdp_v4_mapped_prefix)) == 0)
		return (struct net){ AF_INET, r->addr + 12, prefix - 96 };
	return (struct net){ r->family, r->addr, prefix };
}

static bool address_matches(const struct sdp_rule *r, const struct net *peer)
{
	if (r->family == AF_UNSPEC)
		return true;
	struct net rn = rule_address_net(r);
	return rn.family == peer->family && sdp_prefix_equal(rn.addr, peer->addr, rn.prefix);
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
	  .port_lo = 0, .port_hi = 65535, .zcopy_thresh = -1, .connect_timeout_ms = -1,
	  .climb = -1 },
	{ .use = RULE_USE_TCP, .role = RULE_ROLE_CLIENT, .prog_glob = "*", .family = AF_UNSPEC,
	  .port_lo = 0, .port_hi = 65535, .zcopy_thresh = -1, .connect_timeout_ms = -1,
	  .climb = -1 },
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
