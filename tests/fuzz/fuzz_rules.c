/* libFuzzer harness for ipoib_fallback/rules.c and rules_match.c: bytes into
 * rules_parse(), result invariants checked, then rules_match() on a few peers
 * (a rejected text fails closed: every peer matches a "use tcp" rule). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/un.h>

#include "ipoib_fallback/rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct diag_seen {
	int calls;
	int bad_message;
};

static void note_diag(void *ctx, const char *msg)
{
	struct diag_seen *d = ctx;

	d->calls++;
	for (const char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20)
			d->bad_message = 1;
	if (strstr(msg, "fuzz.conf:") != msg || strstr(msg, "every connection uses TCP") == NULL)
		d->bad_message = 1;
}

static void check_rule(const struct sdp_rule *r)
{
	unsigned max_prefix = r->family == AF_INET ? 32 : r->family == AF_INET6 ? 128 : 0;

	if (memchr(r->prog_glob, '\0', sizeof(r->prog_glob)) == NULL ||
	    r->prefix > max_prefix || r->port_lo > r->port_hi || r->line == 0 ||
	    (r->family != AF_UNSPEC && r->family != AF_INET && r->family != AF_INET6) ||
	    r->zcopy_thresh < -1 || r->zcopy_thresh > ((int64_t)1 << 40) ||
	    r->connect_timeout_ms < -1 || r->connect_timeout_ms == 0 ||
	    r->connect_timeout_ms > 600000 || r->climb < -1 || r->climb > 1 ||
	    r->client_net_count > SDP_CLIENT_NETS_MAX ||
	    (r->client_net_count > 0 && r->role != RULE_ROLE_SERVER))
		__builtin_trap();
	for (unsigned i = 0; i < r->client_net_count; i++)
		if (r->client_nets[i].prefix > 128)
			__builtin_trap();
}

static void set_v4(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	inet_pton(AF_INET, ip, &in->sin_addr);
}

static void set_v6(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(port);
	inet_pton(AF_INET6, ip, &in6->sin6_addr);
}

/* The peer's address as sdp_nets_match() takes it: IPv4 mapped. */
static void addr16_of(const struct sockaddr_storage *ss, uint8_t out[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (ss->ss_family == AF_INET) {
		memcpy(out, mapped, sizeof(mapped));
		memcpy(out + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else {
		memcpy(out, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
	}
}

static void match_some_peers(const struct sdp_rules *rules)
{
	static const char *const progs[] = { NULL, "redis-server", "a", "[x]*?" };
	struct sockaddr_storage peers[5];
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	uint8_t addr[16];

	set_v4(&peers[0], "10.1.2.3", 6379);
	set_v4(&peers[1], "0.0.0.0", 0);
	set_v6(&peers[2], "fe80::1", 65535);
	set_v6(&peers[3], "::ffff:10.1.2.3", 80);
	set_v6(&peers[4], "2001:db8::ffff", 22);
	for (size_t p = 0; p < sizeof(progs) / sizeof(progs[0]); p++) {
		for (size_t a = 0; a < sizeof(peers) / sizeof(peers[0]); a++) {
			const struct sockaddr *sa = (const struct sockaddr *)&peers[a];
			const struct sdp_rule *m = rules_match(rules, RULE_ROLE_CLIENT, progs[p], sa);
			enum rule_use server_use = rules_decide(rules, RULE_ROLE_SERVER, progs[p], sa);
			if (rules->fail_closed) {
				if (m == NULL || m->use != RULE_USE_TCP || m->line != 0 ||
				    server_use != RULE_USE_TCP)
					__builtin_trap();
			} else if (m != NULL && (m < rules->rule || m >= rules->rule + rules->count)) {
				__builtin_trap();
			}
		}
		if (rules_match(rules, RULE_ROLE_CLIENT, progs[p], (struct sockaddr *)&un) != NULL)
			__builtin_trap();
	}
	for (size_t i = 0; i < rules->count; i++) {
		const struct sdp_rule *r = &rules->rule[i];
		for (size_t a = 0; a < sizeof(peers) / sizeof(peers[0]); a++) {
			addr16_of(&peers[a], addr);
			if (!sdp_nets_match(r->client_nets, r->client_net_count, addr) &&
			    r->client_net_count == 0)
				__builtin_trap();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sdp_rules rules;
	struct diag_seen d = { 0, 0 };
	int rc = rules_parse(&rules, (const char *)data, size, "fuzz.conf", note_diag, &d);

	if (rc == 0) {
		if (d.calls != 0 || rules.fail_closed)
			__builtin_trap();
		for (size_t i = 0; i < rules.count; i++)
			check_rule(&rules.rule[i]);
		match_some_peers(&rules);
	} else if (rc != -1 || d.calls != 1 || d.bad_message || rules.rule != NULL ||
		   rules.count != 0 || !rules.fail_closed) {
		__builtin_trap();
	} else {
		match_some_peers(&rules);
	}
	rules_free(&rules);
	return 0;
}
