/* Unit tests (TAP) for base/sockaddr.h: the port of an IPv4 and an IPv6
 * address is read and set in host order, in place, without touching the
 * address, and a family without a port reads 0 and is left alone. */
#include <arpa/inet.h>
#include <string.h>
#include <sys/un.h>

#include "base/sockaddr.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int test_ipv4(void)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	in->sin_family = AF_INET;
	in->sin_port = htons(20002);
	inet_pton(AF_INET, "10.77.0.1", &in->sin_addr);
	if (!check(sockaddr_port(&ss) == 20002, "read %u, want 20002", sockaddr_port(&ss)))
		return 0;
	sockaddr_set_port(&ss, 65535);
	return check(in->sin_port == htons(65535), "set: network order %#x", in->sin_port) &&
	       check(in->sin_addr.s_addr == inet_addr("10.77.0.1"), "the address changed");
}

static int test_ipv6(void)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	struct in6_addr want;

	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(1);
	inet_pton(AF_INET6, "fe80::1", &in6->sin6_addr);
	want = in6->sin6_addr;
	if (!check(sockaddr_port(&ss) == 1, "read %u, want 1", sockaddr_port(&ss)))
		return 0;
	sockaddr_set_port(&ss, 4791);
	return check(in6->sin6_port == htons(4791), "set: network order %#x", in6->sin6_port) &&
	       check(memcmp(&in6->sin6_addr, &want, sizeof(want)) == 0, "the address changed");
}

static int test_other_family(void)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX, .sun_path = "/tmp/x" };
	struct sockaddr_un before = un;

	sockaddr_set_port(&un, 80);
	return check(sockaddr_port(&un) == 0, "AF_UNIX port read %u", sockaddr_port(&un)) &&
	       check(memcmp(&un, &before, sizeof(un)) == 0, "AF_UNIX address written");
}

static const struct tap_case cases[] = {
	{ "an IPv4 port is read and set in host order, the address kept", test_ipv4 },
	{ "an IPv6 port is read and set in host order, the address kept", test_ipv6 },
	{ "a family without a port reads 0 and is not written", test_other_family },
};

int main(void)
{
	return tap_run(cases, ARRAY_SIZE(cases));
}
