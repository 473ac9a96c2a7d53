/* Per-connection policy defaults, and matching an address against the
 * network prefixes of a clients= option. */
#include <string.h>

#include "base/config.h"
#include "base/policy.h"

const uint8_t sdp_v4_mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

void policy_default(struct sdp_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->zcopy_thresh = sdp_tun.zcopy_thresh;
	p->connect_timeout_ms = sdp_tun.connect_timeout_ms;
	p->climb = sdp_tun.climb != 0;
}

bool sdp_prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned whole = bits / 8, rest = bits % 8;

	if (memcmp(a, b, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[whole] & mask) == (b[whole] & mask);
}

/* Inside ::ffff:0:0/96: an IPv4 address written as IPv6. */
static bool is_v4_mapped(const uint8_t addr[16])
{
	return memcmp(addr, sdp_v4_mapped_prefix, sizeof(sdp_v4_mapped_prefix)) == 0;
}

bool sdp_nets_match(const struct sdp_net *nets, unsigned count, const uint8_t addr[16])
{
	if (count == 0)
		return true;
	if (nets == NULL || addr == NULL)
		return false;
	if (count > SDP_CLIENT_NETS_MAX)
		count = SDP_CLIENT_NETS_MAX;
	bool addr_v4 = is_v4_mapped(addr);
	for (unsigned i = 0; i < count; i++) {
		unsigned prefix = nets[i].prefix > 128 ? 128 : nets[i].prefix;
		bool net_v4 = prefix >= 96 && is_v4_mapped(nets[i].addr);
		if (net_v4 == addr_v4 && sdp_prefix_equal(nets[i].addr, addr, prefix))
			return true;
	}
	return false;
}
