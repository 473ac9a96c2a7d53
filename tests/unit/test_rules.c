/* Unit tests (TAP) for ipoib_fallback/rules.c and rules_match.c: grammar,
 * whole-file rejection (fail closed: TCP for every connection) and its
 * diagnostic, first-match-wins matching, and loading files. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipoib_fallback/path.h"
#include "ipoib_fallback/rules.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define FAIL_CLOSED_NOTE "; ignoring its rules: every connection uses TCP (fail closed)"

/* ---- diagnostics capture ---------------------------------------------------- */

struct diag_capture {
	int calls;
	char msg[2048];
};

static void capture_diag(void *ctx, const char *line)
{
	struct diag_capture *d = ctx;

	d->calls++;
	snprintf(d->msg, sizeof(d->msg), "%s", line);
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int has_control_bytes(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

static struct sockaddr_storage make_addr(const char *ip, unsigned port);

/* Every role, program and IPv4/IPv6 peer gets "use tcp" from a rejected set. */
static int check_all_tcp(const struct sdp_rules *r)
{
	static const char *const ips[] = { "10.1.2.3", "192.0.2.1", "2001:db8::1", "::ffff:10.1.2.3" };
	static const enum rule_role roles[] = { RULE_ROLE_CLIENT, RULE_ROLE_SERVER };
	static const char *const progs[] = { "redis-server", NULL };
	int ok = 1;

	for (size_t i = 0; ok && i < ARRAY_SIZE(ips); i++) {
		struct sockaddr_storage ss = make_addr(ips[i], 6379);
		for (size_t k = 0; ok && k < ARRAY_SIZE(roles); k++) {
			for (size_t p = 0; ok && p < ARRAY_SIZE(progs); p++) {
				const struct sdp_rule *m = rules_match(r, roles[k], progs[p],
								       (struct sockaddr *)&ss);
				ok &= check(rules_decide(r, roles[k], progs[p], (struct sockaddr *)&ss) ==
					    RULE_USE_TCP, "%s role %d: not tcp", ips[i], roles[k]);
				ok &= check(m != NULL && m->use == RULE_USE_TCP && m->role == roles[k] &&
					    m->line == 0 && m->client_net_count == 0 &&
					    m->zcopy_thresh == -1 && m->connect_timeout_ms == -1,
					    "%s role %d: not the fail-closed rule", ips[i], roles[k]);
			}
		}
	}
	return ok;
}

/* A rejected parse: -1, no rules, fail closed (TCP for every connection), one
 * diag line holding want. */
static int check_rejected(int rc, const struct sdp_rules *r, const struct diag_capture *d,
			  const char *want)
{
	int ok = check(rc == -1, "rc %d, want -1", rc);
	ok &= check(r->rule == NULL && r->count == 0, "rules not empty (%zu)", r->count);
	ok &= check(r->fail_closed, "a rejected file does not fail closed");
	ok &= check_all_tcp(r);
	ok &= check(d->calls == 1, "diag called %d times, want 1", d->calls);
	ok &= check(strstr(d->msg, want) != NULL, "diag '%s' lacks '%s'", d->msg, want);
	ok &= check(ends_with(d->msg, FAIL_CLOSED_NOTE), "diag '%s' lacks the fail-closed note",
		    d->msg);
	ok &= check(!has_control_bytes(d->msg), "diag has control bytes");
	return ok;
}

static int check_accepted(int rc, const struct sdp_rules *r, const struct diag_capture *d,
			  size_t count)
{
	int ok = check(rc == 0, "rc %d, want 0 (diag: %s)", rc, d->msg);
	ok &= check(r->count == count, "count %zu, want %zu", r->count, count);
	ok &= check(!r->fail_closed, "an accepted file fails closed");
	ok &= check(d->calls == 0, "diag called: %s", d->msg);
	return ok;
}

/* ---- 1. whole texts: accepted or rejected ------------------------------------ */

struct parse_case {
	const char *desc;
	const char *text;
	size_t len;        /* 0: strlen(text) */
	int rc;
	size_t count;      /* rules when accepted */
	const char *diag;  /* substring of the diag line when rejected */
};

#define OK_TEXT(d, t, n)      { d, t, 0, 0, n, NULL }
#define BAD_TEXT(d, t, want)  { d, t, 0, -1, 0, want }
#define NUL_TEXT(d, t, want)  { d, t, sizeof(t) - 1, -1, 0, want }

static const struct parse_case parse_cases[] = {
	OK_TEXT("empty text", "", 0),
	OK_TEXT("comments and blank lines only", "# hello\n\n   \t \n#use rdmaa\n", 0),
	OK_TEXT("one rule, no final newline", "use tcp client * *:*", 1),
	OK_TEXT("trailing comment after a rule", "use tcp client * *:* # why\n", 1),
	OK_TEXT("comment glued to last field", "use tcp client * *:*#why\n", 1),
	OK_TEXT("CRLF line endings", "use tcp client * *:*\r\nuse rdma server * *:*\r\n", 2),
	OK_TEXT("tabs and runs of spaces", "\t use  \ttcp\t\tclient *   *:*  \t\n", 1),
	OK_TEXT("three rules between comments",
		"# a\nuse tcp client * *:1\n\nuse rdma client * *:2\n# b\nuse both server * *:3\n", 3),
	OK_TEXT("both options", "use rdma client * *:* zcopy_thresh=1 connect_timeout_ms=2\n", 1),
	BAD_TEXT("unknown keyword", "usee tcp client * *:*\n",
		 "t.conf:1: unknown keyword 'usee' (expected use)"),
	BAD_TEXT("keywords are case-sensitive", "USE tcp client * *:*\n",
		 "t.conf:1: unknown keyword 'USE'"),
	BAD_TEXT("unknown use", "use rdmaa client * *:*\n",
		 "t.conf:1: unknown use 'rdmaa' (expected rdma|tcp|both)"),
	BAD_TEXT("use is case-sensitive", "use TCP client * *:*\n", "t.conf:1: unknown use 'TCP'"),
	BAD_TEXT("unknown role", "use tcp serve * *:*\n",
		 "t.conf:1: unknown role 'serve' (expected server|client)"),
	BAD_TEXT("missing use", "use\n", "t.conf:1: missing use (expected rdma|tcp|both)"),
	BAD_TEXT("missing role", "use tcp\n", "t.conf:1: missing role (expected server|client)"),
	BAD_TEXT("missing program glob", "use tcp client\n", "t.conf:1: missing program glob"),
	BAD_TEXT("missing address:port", "use tcp client *\n",
		 "t.conf:1: missing address:port (expected addr[/prefix]:port[-port])"),
	BAD_TEXT("address without port", "use tcp client * 1.2.3.4\n",
		 "t.conf:1: bad address:port '1.2.3.4' (expected addr[/prefix]:port[-port]"),
	BAD_TEXT("bracketed IPv6 without port", "use tcp client * [::1]\n",
		 "t.conf:1: bad address:port '[::1]'"),
	BAD_TEXT("IPv4 octet 256", "use tcp client * 1.2.3.256:80\n",
		 "t.conf:1: bad address '1.2.3.256' (expected *, a.b.c.d[/n] or [ipv6][/n])"),
	BAD_TEXT("IPv4 with three parts", "use tcp client * 1.2.3:80\n", "bad address '1.2.3'"),
	BAD_TEXT("IPv4 with five parts", "use tcp client * 1.2.3.4.5:80\n", "bad address '1.2.3.4.5'"),
	BAD_TEXT("host name instead of address", "use tcp client * localhost:80\n",
		 "bad address 'localhost'"),
	BAD_TEXT("empty address", "use tcp client * :80\n", "t.conf:1: bad address ''"),
	BAD_TEXT("IPv6 without brackets", "use tcp client * ::1:80\n", "bad address '::1'"),
	BAD_TEXT("IPv6 missing closing bracket", "use tcp client * [::1:80\n",
		 "bad address:port '[::1:80'"),
	BAD_TEXT("IPv6 malformed", "use tcp client * [:::1]:80\n", "bad address '[:::1]'"),
	BAD_TEXT("IPv4 inside brackets", "use tcp client * [1.2.3.4]:80\n",
		 "bad address '[1.2.3.4]'"),
	BAD_TEXT("empty brackets", "use tcp client * []:80\n", "bad address '[]'"),
	BAD_TEXT("IPv6 zone index", "use tcp client * [fe80::1%eth0]:80\n",
		 "bad address '[fe80::1%eth0]'"),
	BAD_TEXT("prefix on star", "use tcp client * */0:80\n", "bad address '*/0'"),
	BAD_TEXT("IPv4 prefix 33", "use tcp client * 1.2.3.4/33:80\n",
		 "t.conf:1: bad prefix '33' (expected 0..32 for IPv4)"),
	BAD_TEXT("IPv6 prefix 129", "use tcp client * [::]/129:80\n",
		 "t.conf:1: bad prefix '129' (expected 0..128 for IPv6)"),
	BAD_TEXT("empty prefix", "use tcp client * 1.2.3.4/:80\n", "bad prefix ''"),
	BAD_TEXT("negative prefix", "use tcp client * 1.2.3.4/-1:80\n", "bad prefix '-1'"),
	BAD_TEXT("prefix with letters", "use tcp client * 1.2.3.4/2a:80\n", "bad prefix '2a'"),
	BAD_TEXT("two prefixes", "use tcp client * 1.2.3.4/8/8:80\n", "bad prefix '8/8'"),
	BAD_TEXT("huge prefix", "use tcp client * [::]/99999999999999999999999:80\n",
		 "bad prefix '99999999999999999999999'"),
	BAD_TEXT("port 65536", "use tcp client * *:65536\n",
		 "t.conf:1: bad port '65536' (expected *, N or N-M with 0<=N<=M<=65535)"),
	BAD_TEXT("empty port", "use tcp client * *:\n", "bad port ''"),
	BAD_TEXT("negative port", "use tcp client * *:-1\n", "bad port '-1'"),
	BAD_TEXT("port with plus sign", "use tcp client * *:+80\n", "bad port '+80'"),
	BAD_TEXT("port with letters", "use tcp client * *:8x\n", "bad port '8x'"),
	BAD_TEXT("range missing high end", "use tcp client * *:80-\n", "bad port '80-'"),
	BAD_TEXT("range reversed (lo > hi)", "use tcp client * *:90-80\n", "bad port '90-80'"),
	BAD_TEXT("range high end 65536", "use tcp client * *:1-65536\n", "bad port '1-65536'"),
	BAD_TEXT("range with three parts", "use tcp client * *:1-2-3\n", "bad port '1-2-3'"),
	BAD_TEXT("huge port", "use tcp client * *:18446744073709551617\n",
		 "bad port '18446744073709551617'"),
	BAD_TEXT("option without value", "use tcp client * *:* zcopy_thresh=\n",
		 "t.conf:1: bad value '' (expected zcopy_thresh=0..1099511627776)"),
	BAD_TEXT("option without '='", "use tcp client * *:* zcopy_thresh\n",
		 "t.conf:1: unknown option 'zcopy_thresh' (expected zcopy_thresh=N, connect_timeout_ms=N,"
		 " climb=yes|no or clients=addr[/n][,addr[/n]...])"),
	BAD_TEXT("zcopy_thresh negative", "use tcp client * *:* zcopy_thresh=-1\n", "bad value '-1'"),
	BAD_TEXT("zcopy_thresh 2^40+1", "use tcp client * *:* zcopy_thresh=1099511627777\n",
		 "bad value '1099511627777'"),
	BAD_TEXT("connect_timeout_ms 0", "use tcp client * *:* connect_timeout_ms=0\n",
		 "t.conf:1: bad value '0' (expected connect_timeout_ms=1..600000)"),
	BAD_TEXT("connect_timeout_ms 600001", "use tcp client * *:* connect_timeout_ms=600001\n",
		 "bad value '600001'"),
	BAD_TEXT("option value with unit", "use tcp client * *:* connect_timeout_ms=5s\n",
		 "bad value '5s'"),
	BAD_TEXT("unknown option", "use tcp client * *:* foo=1\n", "unknown option 'foo=1'"),
	BAD_TEXT("option keys are case-sensitive", "use tcp client * *:* Zcopy_thresh=1\n",
		 "unknown option 'Zcopy_thresh=1'"),
	BAD_TEXT("duplicate option", "use tcp client * *:* zcopy_thresh=1 zcopy_thresh=2\n",
		 "t.conf:1: duplicate option 'zcopy_thresh' (expected each option at most once)"),
	BAD_TEXT("extra junk field", "use tcp client * *:* extra\n", "unknown option 'extra'"),
	BAD_TEXT("extra field after both options",
		 "use tcp client * *:* zcopy_thresh=1 connect_timeout_ms=2 x\n",
		 "unknown option 'x'"),
	BAD_TEXT("many extra fields",
		 "use tcp client * *:* zcopy_thresh=1 connect_timeout_ms=2 zcopy_thresh=3 a b c d\n",
		 "duplicate option 'zcopy_thresh'"),
	BAD_TEXT("bad line after good ones names its line number",
		 "use tcp client * *:*\n# c\n\nuse rdma client * *:99999\n", "t.conf:4: bad port"),
	BAD_TEXT("bad last line without newline", "use tcp client * *:*\nuse x", "t.conf:2: unknown use 'x'"),
	BAD_TEXT("first of several bad lines, plural count",
		 "use tcp client * *:*\n\nuse rdmaa client * *:*\nbogus\nuse tcp client * *:x\n",
		 "t.conf:3: unknown use 'rdmaa' (expected rdma|tcp|both) (and 2 more bad lines)"
		 FAIL_CLOSED_NOTE),
	BAD_TEXT("two bad lines, singular count", "bogus\nbogus\n",
		 "t.conf:1: unknown keyword 'bogus' (expected use) (and 1 more bad line)"
		 FAIL_CLOSED_NOTE),
	BAD_TEXT("single bad line has no count", "bogus\n",
		 "t.conf:1: unknown keyword 'bogus' (expected use)" FAIL_CLOSED_NOTE),
	BAD_TEXT("control bytes are escaped in the message", "use \x01\x1b[31m client * *:*\n",
		 "unknown use '\\x01\\x1b[31m'"),
	BAD_TEXT("bare CR in the middle is not whitespace", "use tcp\rclient * *:*\n",
		 "unknown use 'tcp\\x0dclient'"),
	BAD_TEXT("long bad token is shortened",
		 "use aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa client * *:*\n",
		 "unknown use 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'"),
	/* option clients= */
	OK_TEXT("clients= one IPv4 network", "use rdma server * *:* clients=10.1.0.0/16\n", 1),
	OK_TEXT("clients= IPv4 and bracketed IPv6",
		"use both server redis-* *:6379 clients=10.1.0.0/16,[fd00::]/8\n", 1),
	OK_TEXT("clients= bare IPv6", "use rdma server * *:* clients=fd00::/8\n", 1),
	OK_TEXT("clients= exactly 8 networks",
		"use rdma server * *:* clients=1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,"
		"5.0.0.0/8,6.0.0.0/8,7.0.0.0/8,fd00::/8\n", 1),
	OK_TEXT("clients= on a use tcp server rule", "use tcp server * *:* clients=10.0.0.0/8\n", 1),
	OK_TEXT("all three options", "use rdma server * *:* zcopy_thresh=1 connect_timeout_ms=2 "
		"clients=10.0.0.0/8\n", 1),
	BAD_TEXT("clients= on a client rule", "use rdma client * *:* clients=10.0.0.0/8\n",
		 "t.conf:1: option clients= on a client rule (expected it only on server rules"),
	BAD_TEXT("clients= with an empty list", "use rdma server * *:* clients=\n",
		 "t.conf:1: bad value '' (expected clients=addr[/n][,addr[/n]...])"),
	BAD_TEXT("clients= with 9 networks",
		 "use rdma server * *:* clients=1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,"
		 "5.0.0.0/8,6.0.0.0/8,7.0.0.0/8,8.0.0.0/8,9.0.0.0/8\n",
		 "t.conf:1: too many networks in clients '1.0.0.0/8,2.0.0.0/8,"),
	BAD_TEXT("clients= 9 networks: the count is named", "use rdma server * *:* "
		 "clients=1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1,1.1.1.1\n",
		 "(expected at most 8 networks)"),
	BAD_TEXT("clients= trailing comma", "use rdma server * *:* clients=10.0.0.0/8,\n",
		 "t.conf:1: empty network in clients '10.0.0.0/8,' (expected addr[/n] between commas"),
	BAD_TEXT("clients= leading comma", "use rdma server * *:* clients=,10.0.0.0/8\n",
		 "empty network in clients ',10.0.0.0/8'"),
	BAD_TEXT("clients= double comma", "use rdma server * *:* clients=1.0.0.0/8,,2.0.0.0/8\n",
		 "empty network in clients '1.0.0.0/8,,2.0.0.0/8'"),
	BAD_TEXT("clients= lone comma", "use rdma server * *:* clients=,\n",
		 "empty network in clients ','"),
	BAD_TEXT("clients= IPv4 prefix 33", "use rdma server * *:* clients=10.0.0.0/33\n",
		 "t.conf:1: bad prefix '33' (expected 0..32 for IPv4)"),
	BAD_TEXT("clients= bare IPv6 prefix 129", "use rdma server * *:* clients=fd00::/129\n",
		 "t.conf:1: bad prefix '129' (expected 0..128 for IPv6)"),
	BAD_TEXT("clients= bracketed IPv6 prefix 129", "use rdma server * *:* clients=[fd00::]/129\n",
		 "t.conf:1: bad prefix '129' (expected 0..128 for IPv6)"),
	BAD_TEXT("clients= IPv4-mapped written as IPv6, prefix 129",
		 "use rdma server * *:* clients=::ffff:10.0.0.0/129\n", "bad prefix '129'"),
	BAD_TEXT("clients= empty prefix", "use rdma server * *:* clients=10.0.0.0/\n", "bad prefix ''"),
	BAD_TEXT("clients= negative prefix", "use rdma server * *:* clients=10.0.0.0/-1\n",
		 "bad prefix '-1'"),
	BAD_TEXT("clients= prefix with letters", "use rdma server * *:* clients=10.0.0.0/1a\n",
		 "bad prefix '1a'"),
	BAD_TEXT("clients= two prefixes", "use rdma server * *:* clients=10.0.0.0/8/8\n",
		 "bad prefix '8/8'"),
	BAD_TEXT("clients= huge prefix", "use rdma server * *:* clients=fd00::/99999999999999999999\n",
		 "bad prefix '99999999999999999999'"),
	BAD_TEXT("clients= prefix only", "use rdma server * *:* clients=/8\n",
		 "t.conf:1: bad address '/8' (expected a.b.c.d[/n], ipv6[/n] or [ipv6][/n])"),
	BAD_TEXT("clients= IPv4 octet 256", "use rdma server * *:* clients=10.0.0.256/8\n",
		 "bad address '10.0.0.256/8'"),
	BAD_TEXT("clients= host name", "use rdma server * *:* clients=localhost\n",
		 "bad address 'localhost'"),
	BAD_TEXT("clients= star is not a network", "use rdma server * *:* clients=*\n",
		 "bad address '*'"),
	BAD_TEXT("clients= IPv4 inside brackets", "use rdma server * *:* clients=[10.0.0.0]/8\n",
		 "bad address '[10.0.0.0]/8'"),
	BAD_TEXT("clients= IPv6 missing closing bracket", "use rdma server * *:* clients=[fd00::/8\n",
		 "bad address '[fd00::/8'"),
	BAD_TEXT("clients= prefix inside the brackets", "use rdma server * *:* clients=[fd00::/8]\n",
		 "bad address '[fd00::/8]'"),
	BAD_TEXT("clients= malformed IPv6", "use rdma server * *:* clients=fd00:::1\n",
		 "bad address 'fd00:::1'"),
	BAD_TEXT("clients= IPv6 zone index", "use rdma server * *:* clients=fe80::1%eth0\n",
		 "bad address 'fe80::1%eth0'"),
	BAD_TEXT("clients= with a port", "use rdma server * *:* clients=10.0.0.1:80\n",
		 "bad address '10.0.0.1:80'"),
	BAD_TEXT("clients= bad second network is named", "use rdma server * *:* "
		 "clients=10.0.0.0/8,fd00::/129\n", "t.conf:1: bad prefix '129'"),
	BAD_TEXT("clients= space after a comma splits the list",
		 "use rdma server * *:* clients=10.0.0.0/8, fd00::/8\n",
		 "empty network in clients '10.0.0.0/8,'"),
	BAD_TEXT("clients= over-long network", "use rdma server * *:* clients=10.0.0.0/"
		 "0000000000000000000000000000000000000000000000000000000000000000000000008\n",
		 "t.conf:1: over-long network in clients '10.0.0.0/000"),
	BAD_TEXT("duplicate clients=", "use rdma server * *:* clients=10.0.0.0/8 clients=fd00::/8\n",
		 "t.conf:1: duplicate option 'clients' (expected each option at most once)"),
	BAD_TEXT("option key clients is case-sensitive", "use rdma server * *:* Clients=10.0.0.0/8\n",
		 "unknown option 'Clients=10.0.0.0/8'"),
	BAD_TEXT("extra field after all three options",
		 "use rdma server * *:* zcopy_thresh=1 connect_timeout_ms=2 clients=10.0.0.0/8 x\n",
		 "unknown option 'x'"),
	BAD_TEXT("fourth option is a duplicate",
		 "use rdma server * *:* zcopy_thresh=1 connect_timeout_ms=2 clients=10.0.0.0/8 "
		 "clients=10.0.0.0/8 a b\n",
		 "duplicate option 'clients'"),
	NUL_TEXT("NUL byte in a rule line", "use tcp client\0 * *:*\n", "t.conf:1: NUL byte in line"),
	NUL_TEXT("NUL byte in a comment line", "use tcp client * *:*\n# x\0y\n",
		 "t.conf:2: NUL byte in line"),
};

static void run_parse_case(const struct parse_case *c)
{
	struct diag_capture d = { 0 };
	struct sdp_rules r = { (struct sdp_rule *)&d, 99, true };   /* junk: must be reset */
	size_t len = c->len ? c->len : strlen(c->text);
	int rc = rules_parse(&r, c->text, len, "t.conf", capture_diag, &d);
	int ok;

	if (c->rc == 0)
		ok = check_accepted(rc, &r, &d, c->count);
	else
		ok = check_rejected(rc, &r, &d, c->diag);
	rules_free(&r);
	tap_result(ok, c->desc);
}

/* ---- 2. fields of one accepted rule ------------------------------------------ */

struct field_case {
	const char *desc;
	const char *text;
	enum rule_use use;
	enum rule_role role;
	const char *glob;
	int family;
	const char *addr;      /* inet_pton text; NULL for "*" */
	unsigned prefix;
	unsigned port_lo, port_hi;
	int64_t zcopy, timeout;
};

static const struct field_case field_cases[] = {
	{ "use rdma server, all wildcards", "use rdma server * *:*",
	  RULE_USE_RDMA, RULE_ROLE_SERVER, "*", AF_UNSPEC, NULL, 0, 0, 65535, -1, -1 },
	{ "use tcp client, glob, IPv4 /8, single port", "use tcp client redis-* 10.0.0.0/8:6379",
	  RULE_USE_TCP, RULE_ROLE_CLIENT, "redis-*", AF_INET, "10.0.0.0", 8, 6379, 6379, -1, -1 },
	{ "use both, IPv4 host gets /32, port range", "use both client nginx 1.2.3.4:80-90",
	  RULE_USE_BOTH, RULE_ROLE_CLIENT, "nginx", AF_INET, "1.2.3.4", 32, 80, 90, -1, -1 },
	{ "IPv4 /0 and port 0", "use rdma client * 0.0.0.0/0:0",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_INET, "0.0.0.0", 0, 0, 0, -1, -1 },
	{ "IPv4 explicit /32, port 65535", "use rdma client * 255.255.255.255/32:65535",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_INET, "255.255.255.255", 32, 65535, 65535, -1, -1 },
	{ "IPv6 host gets /128", "use rdma client * [::1]:443",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_INET6, "::1", 128, 443, 443, -1, -1 },
	{ "IPv6 /64, any port", "use tcp server * [fe80::]/64:*",
	  RULE_USE_TCP, RULE_ROLE_SERVER, "*", AF_INET6, "fe80::", 64, 0, 65535, -1, -1 },
	{ "IPv6 /0 and explicit /128", "use tcp server * [::]/0:1-2",
	  RULE_USE_TCP, RULE_ROLE_SERVER, "*", AF_INET6, "::", 0, 1, 2, -1, -1 },
	{ "IPv6 explicit /128 with embedded IPv4 text", "use tcp server * [::ffff:1.2.3.4]/128:7",
	  RULE_USE_TCP, RULE_ROLE_SERVER, "*", AF_INET6, "::ffff:1.2.3.4", 128, 7, 7, -1, -1 },
	{ "port range 0-65535", "use tcp client * *:0-65535",
	  RULE_USE_TCP, RULE_ROLE_CLIENT, "*", AF_UNSPEC, NULL, 0, 0, 65535, -1, -1 },
	{ "leading zeros in numbers", "use tcp client * 1.2.3.4/008:0080-00090",
	  RULE_USE_TCP, RULE_ROLE_CLIENT, "*", AF_INET, "1.2.3.4", 8, 80, 90, -1, -1 },
	{ "zcopy_thresh=0", "use rdma client * *:* zcopy_thresh=0",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_UNSPEC, NULL, 0, 0, 65535, 0, -1 },
	{ "zcopy_thresh=2^40", "use rdma client * *:* zcopy_thresh=1099511627776",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_UNSPEC, NULL, 0, 0, 65535, 1099511627776LL, -1 },
	{ "connect_timeout_ms=1", "use rdma client * *:* connect_timeout_ms=1",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_UNSPEC, NULL, 0, 0, 65535, -1, 1 },
	{ "connect_timeout_ms=600000 then zcopy_thresh", "use rdma client * *:* connect_timeout_ms=600000 zcopy_thresh=65536",
	  RULE_USE_RDMA, RULE_ROLE_CLIENT, "*", AF_UNSPEC, NULL, 0, 0, 65535, 65536, 600000 },
	{ "bracket glob kept verbatim", "use tcp client [a-c]?x* *:*",
	  RULE_USE_TCP, RULE_ROLE_CLIENT, "[a-c]?x*", AF_UNSPEC, NULL, 0, 0, 65535, -1, -1 },
};

static int check_rule_address(const struct sdp_rule *r, const struct field_case *c)
{
	uint8_t want[16] = { 0 };

	if (c->addr == NULL)
		return check(r->family == AF_UNSPEC, "family %d, want AF_UNSPEC", r->family);
	if (inet_pton(c->family, c->addr, want) != 1)
		return check(0, "bad test address %s", c->addr);
	return check(memcmp(r->addr, want, c->family == AF_INET ? 4 : 16) == 0,
		     "address bytes differ from %s", c->addr);
}

static int check_rule_fields(const struct sdp_rule *r, const struct field_case *c)
{
	int ok = check(r->use == c->use, "use %d, want %d", r->use, c->use);
	ok &= check(r->role == c->role, "role %d, want %d", r->role, c->role);
	ok &= check(strcmp(r->prog_glob, c->glob) == 0, "glob '%s', want '%s'", r->prog_glob, c->glob);
	ok &= check(r->family == c->family, "family %d, want %d", r->family, c->family);
	ok &= check_rule_address(r, c);
	ok &= check(r->prefix == c->prefix, "prefix %u, want %u", r->prefix, c->prefix);
	ok &= check(r->port_lo == c->port_lo && r->port_hi == c->port_hi, "ports %u-%u, want %u-%u",
		    r->port_lo, r->port_hi, c->port_lo, c->port_hi);
	ok &= check(r->zcopy_thresh == c->zcopy, "zcopy_thresh %lld, want %lld",
		    (long long)r->zcopy_thresh, (long long)c->zcopy);
	ok &= check(r->connect_timeout_ms == c->timeout, "connect_timeout_ms %lld, want %lld",
		    (long long)r->connect_timeout_ms, (long long)c->timeout);
	ok &= check(r->line == 2, "line %u, want 2", r->line);
	return ok;
}

static void run_field_case(const struct field_case *c)
{
	char text[512];
	struct diag_capture d = { 0 };
	struct sdp_rules r;
	int ok;

	snprintf(text, sizeof(text), "# the rule is on line 2\n%s\n", c->text);
	ok = check_accepted(rules_parse(&r, text, strlen(text), "t.conf", capture_diag, &d), &r, &d, 1);
	if (ok)
		ok = check_rule_fields(&r.rule[0], c);
	rules_free(&r);
	tap_result(ok, c->desc);
}

/* ---- 3. matching ------------------------------------------------------------- */

static const char match_text[] =
	"# line 1: matching table\n"
	"use tcp  client redis-* 10.1.0.0/16:6379\n"              /* 2 */
	"use rdma client redis-* 10.0.0.0/8:*\n"                  /* 3 */
	"use tcp  client *       192.168.1.7:1000-2000\n"         /* 4 */
	"use rdma server *       *:5000\n"                        /* 5 */
	"use tcp  client *       [fe80::]/64:*\n"                 /* 6 */
	"use rdma client *       [2001:db8::1]:80\n"              /* 7 */
	"use rdma client *       [::]/0:22\n"                     /* 8 */
	"use tcp  client *       0.0.0.0/0:22\n"                  /* 9 */
	"use both client nginx   *:*\n"                           /* 10 */
	"use tcp  client *       [::ffff:172.16.0.0]/108:*\n"     /* 11 */
	"use rdma client *       11.22.33.44/32:*\n"              /* 12 */
	"use rdma client *       [2001:db8::ffff]/128:*\n"        /* 13 */
	"use tcp  client prog?x  *:7\n"                           /* 14 */
	"use tcp  client [ab]*   *:8\n"                           /* 15 */
	"use tcp  client *       100.64.0.0/10:*\n"               /* 16 */
	"use both server *       [::]/0:6000-6001\n"              /* 17 */
	"use rdma client *       *:*\n";                          /* 18: client catch-all */

struct match_case {
	const char *desc;
	enum rule_role role;
	const char *prog;
	const char *ip;
	unsigned port;
	unsigned line;     /* expected matching rule line, 0 = no match */
};

static const struct match_case match_cases[] = {
	{ "first match wins over a later, wider rule", RULE_ROLE_CLIENT, "redis-server", "10.1.2.3", 6379, 2 },
	{ "second rule when the first's prefix misses", RULE_ROLE_CLIENT, "redis-server", "10.2.2.3", 6379, 3 },
	{ "second rule when the first's port misses", RULE_ROLE_CLIENT, "redis-cli", "10.1.2.3", 6380, 3 },
	{ "program glob miss falls through", RULE_ROLE_CLIENT, "memcached", "10.1.2.3", 6379, 18 },
	{ "NULL program name matches only '*'", RULE_ROLE_CLIENT, NULL, "10.1.2.3", 6379, 18 },
	{ "port range low edge", RULE_ROLE_CLIENT, "x", "192.168.1.7", 1000, 4 },
	{ "port range high edge", RULE_ROLE_CLIENT, "x", "192.168.1.7", 2000, 4 },
	{ "port just below range", RULE_ROLE_CLIENT, "x", "192.168.1.7", 999, 18 },
	{ "port just above range", RULE_ROLE_CLIENT, "x", "192.168.1.7", 2001, 18 },
	{ "/32 edge: neighbour address misses", RULE_ROLE_CLIENT, "x", "192.168.1.8", 1500, 18 },
	{ "server rule matches any IPv4 address", RULE_ROLE_SERVER, "x", "1.2.3.4", 5000, 5 },
	{ "'*' address matches IPv6 too", RULE_ROLE_SERVER, "x", "::1", 5000, 5 },
	{ "role must match: client does not use server rule", RULE_ROLE_CLIENT, "nomatch", "1.2.3.4", 5000, 18 },
	{ "no rule at all for this server", RULE_ROLE_SERVER, "x", "1.2.3.4", 5001, 0 },
	{ "IPv6 /64 inside", RULE_ROLE_CLIENT, "x", "fe80::1234:5678", 9, 6 },
	{ "IPv6 /64 edge: next /64 misses", RULE_ROLE_CLIENT, "x", "fe80:0:0:1::1", 9, 18 },
	{ "IPv6 host and port", RULE_ROLE_CLIENT, "x", "2001:db8::1", 80, 7 },
	{ "IPv6 host, other port", RULE_ROLE_CLIENT, "x", "2001:db8::1", 81, 18 },
	{ "IPv6 [::]/0 matches any IPv6 address", RULE_ROLE_CLIENT, "x", "2001:db8::5", 22, 8 },
	{ "IPv4 address skips IPv6 /0 rule", RULE_ROLE_CLIENT, "x", "1.2.3.4", 22, 9 },
	{ "IPv4-mapped address skips IPv6 /0, takes IPv4 rule", RULE_ROLE_CLIENT, "x", "::ffff:1.2.3.4", 22, 9 },
	{ "program glob exact name", RULE_ROLE_CLIENT, "nginx", "5.6.7.8", 99, 10 },
	{ "IPv4 inside an IPv6-written mapped /108", RULE_ROLE_CLIENT, "x", "172.16.5.5", 1, 11 },
	{ "mapped inside mapped /108 at its top edge", RULE_ROLE_CLIENT, "x", "::ffff:172.31.255.255", 1, 11 },
	{ "IPv4 just outside the mapped /108", RULE_ROLE_CLIENT, "x", "172.32.0.1", 1, 18 },
	{ "IPv4 /32 rule", RULE_ROLE_CLIENT, "x", "11.22.33.44", 1, 12 },
	{ "IPv4-mapped address matches IPv4 /32 rule", RULE_ROLE_CLIENT, "x", "::ffff:11.22.33.44", 1, 12 },
	{ "IPv4 /32 neighbour misses", RULE_ROLE_CLIENT, "x", "11.22.33.45", 1, 18 },
	{ "IPv6 /128 rule", RULE_ROLE_CLIENT, "x", "2001:db8::ffff", 1, 13 },
	{ "IPv6 /128 neighbour misses", RULE_ROLE_CLIENT, "x", "2001:db8::fffe", 1, 18 },
	{ "glob '?' needs one character (hit)", RULE_ROLE_CLIENT, "progAx", "1.1.1.1", 7, 14 },
	{ "glob '?' needs one character (miss)", RULE_ROLE_CLIENT, "progx", "1.1.1.1", 7, 18 },
	{ "glob bracket set (hit)", RULE_ROLE_CLIENT, "apple", "1.1.1.1", 8, 15 },
	{ "glob bracket set (miss)", RULE_ROLE_CLIENT, "cherry", "1.1.1.1", 8, 18 },
	{ "/10 inside, top of range", RULE_ROLE_CLIENT, "x", "100.127.255.255", 1, 16 },
	{ "/10 outside, just above", RULE_ROLE_CLIENT, "x", "100.128.0.0", 1, 18 },
	{ "/10 outside, just below", RULE_ROLE_CLIENT, "x", "100.63.255.255", 1, 18 },
	{ "server IPv6 range rule", RULE_ROLE_SERVER, "x", "::2", 6001, 17 },
	{ "server: mapped address does not match IPv6 /0", RULE_ROLE_SERVER, "x", "::ffff:1.2.3.4", 6001, 0 },
};

static struct sockaddr_storage make_addr(const char *ip, unsigned port)
{
	struct sockaddr_storage ss;

	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':') != NULL) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		inet_pton(AF_INET6, ip, &in6->sin6_addr);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		inet_pton(AF_INET, ip, &in->sin_addr);
	}
	return ss;
}

static void run_match_case(const struct sdp_rules *rules, const struct match_case *c)
{
	struct sockaddr_storage ss = make_addr(c->ip, c->port);
	const struct sdp_rule *m = rules_match(rules, c->role, c->prog, (struct sockaddr *)&ss);
	unsigned got = m ? m->line : 0;
	enum rule_use want_use = m != NULL ? m->use : RULE_USE_BOTH;
	int ok = check(got == c->line, "%s:%u matched line %u, want %u", c->ip, c->port, got, c->line);
	ok &= check(rules_decide(rules, c->role, c->prog, (struct sockaddr *)&ss) == want_use,
		    "rules_decide disagrees with rules_match");
	tap_result(ok, c->desc);
}

/* ---- 4. special cases ---------------------------------------------------------- */

static int parse_generated(char *text, size_t len, struct sdp_rules *r, struct diag_capture *d)
{
	memset(d, 0, sizeof(*d));
	return rules_parse(r, text, len, "gen.conf", capture_diag, d);
}

/* A line of exactly n bytes: a rule padded by a trailing comment. */
static char *line_of_length(size_t n)
{
	static const char rule[] = "use tcp client * *:* #";
	char *s = malloc(n + 2);

	if (s == NULL)
		return NULL;
	memset(s, 'c', n);
	memcpy(s, rule, sizeof(rule) - 1);
	s[n] = '\n';
	s[n + 1] = '\0';
	return s;
}

static int test_line_4096_accepted(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char *s = line_of_length(4096);
	int ok = check(s != NULL, "malloc") &&
		 check_accepted(parse_generated(s, strlen(s), &r, &d), &r, &d, 1);

	rules_free(&r);
	free(s);
	return ok;
}

static int test_line_4097_rejected(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char *s = line_of_length(4097);
	int ok = check(s != NULL, "malloc") &&
		 check_rejected(parse_generated(s, strlen(s), &r, &d), &r, &d,
				"gen.conf:1: line longer than 4096 bytes");

	free(s);
	return ok;
}

static char *many_rules(size_t n)
{
	static const char rule[] = "use tcp client * *:1\n";
	char *s = malloc(n * (sizeof(rule) - 1) + 1);

	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * (sizeof(rule) - 1), rule, sizeof(rule) - 1);
	s[n * (sizeof(rule) - 1)] = '\0';
	return s;
}

static int test_10000_rules_accepted(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char *s = many_rules(10000);
	int ok = check(s != NULL, "malloc") &&
		 check_accepted(parse_generated(s, strlen(s), &r, &d), &r, &d, 10000);

	if (ok)
		ok = check(r.rule[9999].line == 10000, "last rule line %u", r.rule[9999].line);
	rules_free(&r);
	free(s);
	return ok;
}

static int test_10001_rules_rejected(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char *s = many_rules(10001);
	int ok = check(s != NULL, "malloc") &&
		 check_rejected(parse_generated(s, strlen(s), &r, &d), &r, &d,
				"gen.conf:10001: more than 10000 rules");

	free(s);
	return ok;
}

static int parse_with_field(const char *prefix, size_t fill_len, char fill, const char *suffix,
			    struct sdp_rules *r, struct diag_capture *d)
{
	char text[512];
	size_t p = strlen(prefix);

	memcpy(text, prefix, p);
	memset(text + p, fill, fill_len);
	snprintf(text + p + fill_len, sizeof(text) - p - fill_len, "%s", suffix);
	return parse_generated(text, strlen(text), r, d);
}

static int test_glob_127_accepted(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	int ok = check_accepted(parse_with_field("use tcp client ", 127, 'g', " *:*\n", &r, &d),
				&r, &d, 1);

	if (ok)
		ok = check(strlen(r.rule[0].prog_glob) == 127, "glob length");
	rules_free(&r);
	return ok;
}

static int test_glob_128_rejected(void)
{
	struct sdp_rules r;
	struct diag_capture d;

	return check_rejected(parse_with_field("use tcp client ", 128, 'g', " *:*\n", &r, &d),
			      &r, &d, "gen.conf:1: over-long program glob 'gggg");
}

/* "1.2.3.4:" + zeros (port 0): 79 bytes is accepted, 80 is over-long. */
static int test_addrport_79_vs_80(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	int ok = check_accepted(parse_with_field("use tcp client * 1.2.3.4:", 79 - 8, '0', "\n", &r, &d),
				&r, &d, 1);

	rules_free(&r);
	ok &= check_rejected(parse_with_field("use tcp client * 1.2.3.4:", 80 - 8, '0', "\n", &r, &d),
			     &r, &d, "gen.conf:1: over-long address:port '1.2.3.4:000");
	return ok;
}

static int test_null_text_and_filename(void)
{
	struct sdp_rules r;
	struct diag_capture d = { 0 };
	int ok = check_accepted(rules_parse(&r, NULL, 10, "x", capture_diag, &d), &r, &d, 0);

	ok &= check(rules_parse(&r, "bogus", 5, NULL, NULL, NULL) == -1, "NULL diag: rc");
	ok &= check(rules_parse(NULL, "", 0, NULL, NULL, NULL) == -1, "NULL out: rc");
	memset(&d, 0, sizeof(d));
	ok &= check(rules_parse(&r, "bogus", 5, NULL, capture_diag, &d) == -1, "NULL name: rc");
	ok &= check(d.calls == 1 && strstr(d.msg, ":1: unknown keyword") != NULL, "NULL name: %s", d.msg);
	return ok;
}

static int test_filename_is_sanitized(void)
{
	struct sdp_rules r;
	struct diag_capture d = { 0 };

	rules_parse(&r, "bogus\n", 6, "evil\nname.conf", capture_diag, &d);
	return check(strstr(d.msg, "evil\\x0aname.conf:1: unknown keyword") == d.msg, "got %s", d.msg);
}

static int test_match_degenerate_inputs(void)
{
	struct sdp_rules r, empty = { NULL, 0, false };
	struct sockaddr_storage ss = make_addr("1.2.3.4", 1);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	int ok;

	if (rules_parse(&r, "use tcp client * *:*\n", strlen("use tcp client * *:*\n"), "t",
			NULL, NULL) != 0)
		return check(0, "parse");
	ok = check(rules_match(&r, RULE_ROLE_CLIENT, "x", NULL) == NULL, "NULL addr");
	ok &= check(rules_match(NULL, RULE_ROLE_CLIENT, "x", (struct sockaddr *)&ss) == NULL, "NULL rules");
	ok &= check(rules_match(&r, RULE_ROLE_CLIENT, "x", (struct sockaddr *)&un) == NULL, "AF_UNIX");
	ok &= check(rules_match(&empty, RULE_ROLE_CLIENT, "x", (struct sockaddr *)&ss) == NULL, "empty");
	ok &= check(rules_decide(&empty, RULE_ROLE_CLIENT, "x", (struct sockaddr *)&ss) == RULE_USE_BOTH,
		    "empty decides both");
	ok &= check(rules_decide(&r, RULE_ROLE_CLIENT, "x", (struct sockaddr *)&ss) == RULE_USE_TCP,
		    "decide tcp");
	rules_free(&r);
	rules_free(&r);
	rules_free(NULL);
	return ok;
}

/* ---- 5. files ----------------------------------------------------------------- */

static char tmpdir[] = "/tmp/test_rules.XXXXXX";

static void tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", tmpdir, name);
}

static int write_file(const char *path, const char *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, len);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

static int write_file_text(const char *path, const char *text)
{
	return write_file(path, text, strlen(text));
}

static int load(const char *name, bool missing_ok, struct sdp_rules *r, struct diag_capture *d,
		char *path, size_t path_size)
{
	tmp_path(path, path_size, name);
	memset(d, 0, sizeof(*d));
	return rules_load_file(r, path, missing_ok, capture_diag, d);
}

static int test_file_good(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256];
	int ok;

	tmp_path(path, sizeof(path), "good.conf");
	write_file_text(path, "# x\nuse tcp client * *:*\nuse rdma server * *:1\n");
	ok = check_accepted(load("good.conf", false, &r, &d, path, sizeof(path)), &r, &d, 2);
	if (ok)
		ok = check(r.rule[1].line == 3 && r.rule[1].role == RULE_ROLE_SERVER, "second rule");
	rules_free(&r);
	return ok;
}

static int test_file_bad_names_path_and_line(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256], want[300];

	tmp_path(path, sizeof(path), "bad.conf");
	write_file_text(path, "use tcp client * *:*\nuse rdmaa client * *:*\n");
	snprintf(want, sizeof(want), "%s:2: unknown use 'rdmaa'", path);
	return check_rejected(load("bad.conf", true, &r, &d, path, sizeof(path)), &r, &d, want);
}

static int test_file_missing_ok(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256];

	return check_accepted(load("nope.conf", true, &r, &d, path, sizeof(path)), &r, &d, 0);
}

static int test_file_missing_not_ok(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256], want[300];
	int rc = load("nope.conf", false, &r, &d, path, sizeof(path));

	snprintf(want, sizeof(want), "%s: cannot open: No such file", path);
	return check_rejected(rc, &r, &d, want);
}

static int test_file_directory(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256];

	tmp_path(path, sizeof(path), "dir.conf");
	mkdir(path, 0700);
	return check_rejected(load("dir.conf", true, &r, &d, path, sizeof(path)), &r, &d,
			      "dir.conf: not a regular file");
}

static int test_file_fifo_does_not_block(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256];

	tmp_path(path, sizeof(path), "fifo.conf");
	if (mkfifo(path, 0600) != 0)
		return check(0, "mkfifo: %s", strerror(errno));
	return check_rejected(load("fifo.conf", true, &r, &d, path, sizeof(path)), &r, &d,
			      "fifo.conf: not a regular file");
}

static int test_file_dev_null_is_empty(void)
{
	struct sdp_rules r;
	struct diag_capture d = { 0 };

	return check_accepted(rules_load_file(&r, "/dev/null", false, capture_diag, &d), &r, &d, 0);
}

/* n bytes of comment lines ending in one rule; n >= 64. */
static char *comment_file_text(size_t n)
{
	static const char rule[] = "use tcp client * *:*\n";
	char *s = malloc(n);

	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		s[i] = (i % 64 == 63) ? '\n' : (i % 64 == 0 ? '#' : 'x');
	s[n - sizeof(rule)] = '\n';
	memcpy(s + n - sizeof(rule) + 1, rule, sizeof(rule) - 1);
	return s;
}

static int load_sized(size_t n, const char *name, struct sdp_rules *r, struct diag_capture *d)
{
	char path[256];
	char *s = comment_file_text(n);
	int rc = -2;

	tmp_path(path, sizeof(path), name);
	if (s != NULL && write_file(path, s, n) == 0)
		rc = load(name, false, r, d, path, sizeof(path));
	free(s);
	return rc;
}

static int test_file_1mib_accepted(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	int ok = check_accepted(load_sized(1024 * 1024, "big.conf", &r, &d), &r, &d, 1);

	rules_free(&r);
	return ok;
}

static int test_file_over_1mib_rejected(void)
{
	struct sdp_rules r;
	struct diag_capture d;

	return check_rejected(load_sized(1024 * 1024 + 1, "huge.conf", &r, &d), &r, &d,
			      "huge.conf: larger than 1 MiB");
}

static int test_file_null_name(void)
{
	struct sdp_rules r;
	struct diag_capture d = { 0 };
	int ok = check_accepted(rules_load_file(&r, NULL, true, capture_diag, &d), &r, &d, 0);

	ok &= check(rules_load_file(&r, NULL, false, capture_diag, &d) == -1 && d.calls == 1,
		    "NULL name, not missing_ok");
	ok &= check(rules_load_file(NULL, "/dev/null", true, NULL, NULL) == -1, "NULL out");
	return ok;
}

/* Fail closed: a bad line must not switch off an admin's "use tcp". */
static int decide_at(const struct sdp_rules *r, enum rule_role role, const char *ip, unsigned port)
{
	struct sockaddr_storage ss = make_addr(ip, port);

	return (int)rules_decide(r, role, "x", (struct sockaddr *)&ss);
}

static int test_bad_line_keeps_use_tcp(void)
{
	static const char text[] = "use tcp client * 10.1.0.0/16:*\n"
				   "use rdmaa client * *:*\n";
	struct sdp_rules r;
	struct diag_capture d = { 0 };
	int ok = check_rejected(rules_parse(&r, text, strlen(text), "t.conf", capture_diag, &d), &r,
				&d, "t.conf:2: unknown use 'rdmaa'");

	ok &= check(decide_at(&r, RULE_ROLE_CLIENT, "10.1.2.3", 80) == RULE_USE_TCP,
		    "the admin's 'use tcp' for 10.1.0.0/16 no longer applies");
	ok &= check(decide_at(&r, RULE_ROLE_CLIENT, "10.9.2.3", 80) == RULE_USE_TCP,
		    "other peers are not on TCP either");
	rules_free(&r);
	return ok;
}

static int test_typo_in_use_tcp_line(void)
{
	static const char text[] = "use both client * *:6379\n"
				   "use tcp client * 10.1.0.0/61:*\n"   /* the typo: /61 */
				   "use rdma client * *:*\n";
	struct sdp_rules r;
	struct diag_capture d = { 0 };
	int ok = check_rejected(rules_parse(&r, text, strlen(text), "t.conf", capture_diag, &d), &r,
				&d, "t.conf:2: bad prefix '61'");

	ok &= check(decide_at(&r, RULE_ROLE_CLIENT, "10.1.2.3", 80) == RULE_USE_TCP,
		    "the subnet of the mistyped 'use tcp' line is not on TCP");
	ok &= check(decide_at(&r, RULE_ROLE_CLIENT, "10.1.2.3", 6379) == RULE_USE_TCP,
		    "the valid 'use both' line before the typo still applies");
	rules_free(&r);
	return ok;
}

static int test_bad_clients_line_admits_no_channel(void)
{
	static const char text[] = "use both server * *:6379 clients=10.1.0.0/16,10.2.0.0/33\n";
	struct sdp_rules r;
	struct diag_capture d = { 0 };
	int ok = check_rejected(rules_parse(&r, text, strlen(text), "t.conf", capture_diag, &d), &r,
				&d, "t.conf:1: bad prefix '33'");

	ok &= check(decide_at(&r, RULE_ROLE_SERVER, "0.0.0.0", 6379) == RULE_USE_TCP,
		    "a listener whose clients= line is bad still takes RDMA channels");
	rules_free(&r);
	return ok;
}

static int test_free_ends_fail_closed(void)
{
	struct sdp_rules r;
	int ok = check(rules_parse(&r, "bogus\n", 6, "t", NULL, NULL) == -1 && r.fail_closed,
		       "a bad text without diag fails closed");

	rules_free(&r);
	ok &= check(!r.fail_closed && r.rule == NULL && r.count == 0, "rules_free leaves an empty set");
	ok &= check(decide_at(&r, RULE_ROLE_CLIENT, "10.1.2.3", 80) == RULE_USE_BOTH,
		    "a freed set decides both");
	return ok;
}

/* The admin meant some rules; which ones is unknown: TCP, as for a bad line. */
static int test_file_open_error_fails_closed(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256], want[300];
	int rc;

	tmp_path(path, sizeof(path), "good.conf");
	if (write_file_text(path, "use tcp client * *:*\n") != 0)
		return check(0, "cannot write %s", path);
	rc = load("good.conf/x", true, &r, &d, path, sizeof(path));

	snprintf(want, sizeof(want), "%s: cannot open: Not a directory", path);
	return check_rejected(rc, &r, &d, want);
}

static int test_file_unreadable_fails_closed(void)
{
	struct sdp_rules r;
	struct diag_capture d;
	char path[256], want[300];
	int ok, rc;

	tmp_path(path, sizeof(path), "noread.conf");
	if (write_file_text(path, "use tcp client * *:*\n") != 0 || chmod(path, 0) != 0)
		return check(0, "cannot write %s", path);
	rc = load("noread.conf", true, &r, &d, path, sizeof(path));
	if (access(path, R_OK) == 0) {
		/* root reads a file of mode 000: it loads as any other file */
		ok = check_accepted(rc, &r, &d, 1);
		rules_free(&r);
		return ok;
	}
	snprintf(want, sizeof(want), "%s: cannot open: Permission denied", path);
	return check_rejected(rc, &r, &d, want);
}

struct special_case {
	const char *desc;
	int (*fn)(void);
};

static const struct special_case special_cases[] = {
	{ "line of exactly 4096 bytes is accepted", test_line_4096_accepted },
	{ "line of 4097 bytes rejects the file", test_line_4097_rejected },
	{ "10000 rules are accepted", test_10000_rules_accepted },
	{ "10001 rules reject the file at line 10001", test_10001_rules_rejected },
	{ "program glob of 127 bytes is accepted", test_glob_127_accepted },
	{ "program glob of 128 bytes is over-long", test_glob_128_rejected },
	{ "address:port of 79 bytes accepted, 80 over-long", test_addrport_79_vs_80 },
	{ "NULL text, out, diag and filename are safe", test_null_text_and_filename },
	{ "file name is sanitized in the diag line", test_filename_is_sanitized },
	{ "rules_match/decide/free on degenerate inputs", test_match_degenerate_inputs },
	{ "file: good file loads", test_file_good },
	{ "file: bad file names path and line", test_file_bad_names_path_and_line },
	{ "file: missing with missing_ok is no rules", test_file_missing_ok },
	{ "file: missing without missing_ok is rejected", test_file_missing_not_ok },
	{ "file: directory is rejected", test_file_directory },
	{ "file: FIFO is rejected without blocking", test_file_fifo_does_not_block },
	{ "file: /dev/null is an empty rule set", test_file_dev_null_is_empty },
	{ "file: exactly 1 MiB is accepted", test_file_1mib_accepted },
	{ "file: 1 MiB + 1 byte is rejected", test_file_over_1mib_rejected },
	{ "file: NULL file name and NULL out", test_file_null_name },
	{ "fail closed: a bad line keeps an admin's 'use tcp' in force (TCP for all)",
	  test_bad_line_keeps_use_tcp },
	{ "fail closed: a typo in the 'use tcp' line itself still gives TCP",
	  test_typo_in_use_tcp_line },
	{ "fail closed: a bad clients= line admits no RDMA channel",
	  test_bad_clients_line_admits_no_channel },
	{ "fail closed: rules_free leaves an empty set that decides both",
	  test_free_ends_fail_closed },
	{ "file: an open error other than ENOENT fails closed, even missing_ok",
	  test_file_open_error_fails_closed },
	{ "file: unreadable (mode 000) fails closed (root: loads)",
	  test_file_unreadable_fails_closed },
};

/* ---- 6. option clients=: stored networks and sdp_nets_match() --------------- */

/* Parses "use rdma server * *:* clients=<value>" (or no option for NULL). */
static int parse_clients(const char *value, struct sdp_rules *r, struct diag_capture *d)
{
	char text[512];

	if (value != NULL)
		snprintf(text, sizeof(text), "use rdma server * *:* clients=%s\n", value);
	else
		snprintf(text, sizeof(text), "use rdma server * *:*\n");
	return parse_generated(text, strlen(text), r, d);
}

/* inet_pton of "a.b.c.d" as IPv4-mapped, or of an IPv6 text, into 16 bytes. */
static int addr16(const char *ip, uint8_t out[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(out, 0, 16);
	if (strchr(ip, ':') != NULL)
		return inet_pton(AF_INET6, ip, out) == 1;
	memcpy(out, mapped, sizeof(mapped));
	return inet_pton(AF_INET, ip, out + 12) == 1;
}

struct want_net {
	const char *addr;      /* IPv6 text of the stored bytes */
	unsigned prefix;       /* stored prefix: IPv4 + 96 */
};

struct client_net_case {
	const char *desc;
	const char *text;      /* a whole rule line */
	unsigned count;
	struct want_net nets[SDP_CLIENT_NETS_MAX];
};

static const struct client_net_case client_net_cases[] = {
	{ "server rule without clients= has no networks", "use rdma server * *:*", 0, { { NULL, 0 } } },
	{ "IPv4 /16 stored IPv4-mapped with prefix 112", "use rdma server * *:* clients=10.1.0.0/16",
	  1, { { "::ffff:10.1.0.0", 112 } } },
	{ "IPv4 host without prefix is /32 (stored 128)", "use rdma server * *:* clients=192.0.2.7",
	  1, { { "::ffff:192.0.2.7", 128 } } },
	{ "IPv4 /0 stored as ::ffff:0:0/96", "use rdma server * *:* clients=0.0.0.0/0",
	  1, { { "::ffff:0.0.0.0", 96 } } },
	{ "bracketed IPv6 /8", "use rdma server * *:* clients=[fd00::]/8",
	  1, { { "fd00::", 8 } } },
	{ "bare IPv6 without prefix is /128", "use rdma server * *:* clients=2001:db8::1",
	  1, { { "2001:db8::1", 128 } } },
	{ "bracketed IPv6 without prefix is /128", "use rdma server * *:* clients=[2001:db8::1]",
	  1, { { "2001:db8::1", 128 } } },
	{ "bare IPv6 ::/0", "use rdma server * *:* clients=::/0", 1, { { "::", 0 } } },
	{ "IPv4-mapped written as IPv6 is stored as written",
	  "use rdma server * *:* clients=::ffff:10.0.0.0/104", 1, { { "::ffff:10.0.0.0", 104 } } },
	{ "host bits are kept as written", "use rdma server * *:* clients=10.1.2.3/16",
	  1, { { "::ffff:10.1.2.3", 112 } } },
	{ "leading zeros in the prefix", "use rdma server * *:* clients=10.0.0.0/008",
	  1, { { "::ffff:10.0.0.0", 104 } } },
	{ "README example: IPv4 then bracketed IPv6", "use both server redis-* *:6379 clients=10.1.0.0/16,[fd00::]/8",
	  2, { { "::ffff:10.1.0.0", 112 }, { "fd00::", 8 } } },
	{ "8 networks kept in order",
	  "use rdma server * *:* clients=1.0.0.0/8,fd01::/16,3.3.0.0/16,[fd04::]/32,5.5.5.5,"
	  "fd06::6,7.0.0.0/1,::/0",
	  8, { { "::ffff:1.0.0.0", 104 }, { "fd01::", 16 }, { "::ffff:3.3.0.0", 112 }, { "fd04::", 32 },
	       { "::ffff:5.5.5.5", 128 }, { "fd06::6", 128 }, { "::ffff:7.0.0.0", 97 }, { "::", 0 } } },
	{ "clients= among the other options",
	  "use rdma server redis-* 10.0.0.1:6379 zcopy_thresh=0 clients=192.168.0.0/24 connect_timeout_ms=5",
	  1, { { "::ffff:192.168.0.0", 120 } } },
};

static void run_client_net_case(const struct client_net_case *c)
{
	struct diag_capture d = { 0 };
	struct sdp_rules r;
	uint8_t want[16];
	int ok = check_accepted(rules_parse(&r, c->text, strlen(c->text), "t.conf", capture_diag, &d),
				&r, &d, 1);

	if (ok)
		ok = check(r.rule[0].client_net_count == c->count, "count %u, want %u",
			   r.rule[0].client_net_count, c->count);
	for (unsigned i = 0; ok && i < c->count; i++) {
		const struct sdp_net *n = &r.rule[0].client_nets[i];
		ok &= check(addr16(c->nets[i].addr, want), "bad test address %s", c->nets[i].addr);
		ok &= check(memcmp(n->addr, want, 16) == 0, "net %u: bytes differ from %s", i,
			    c->nets[i].addr);
		ok &= check(n->prefix == c->nets[i].prefix, "net %u: prefix %u, want %u", i,
			    n->prefix, c->nets[i].prefix);
	}
	rules_free(&r);
	tap_result(ok, c->desc);
}

/* ---- climb=yes|no: the stream's way back to RDMA (core/climb.c) ---------- */

struct climb_case {
	const char *desc;
	const char *text;
	int want;              /* the rule's climb (-1: absent); -2: the text is rejected */
	const char *diag;      /* for a rejected text: a part of its diagnostic */
};

static const struct climb_case climb_cases[] = {
	{ "climb absent: -1, SDPSHIM_CLIMB decides", "use rdma client * *:*\n", -1, NULL },
	{ "climb=no on a server rule", "use both server redis-* *:6379 climb=no\n", 0, NULL },
	{ "climb=yes among all four options",
	  "use rdma server * *:* zcopy_thresh=1 climb=yes connect_timeout_ms=2 clients=10.0.0.0/8\n",
	  1, NULL },
	{ "climb=no on a client rule", "use both client * 10.0.0.0/8:* climb=no\n", 0, NULL },
	{ "climb values are case-sensitive", "use rdma client * *:* climb=No\n", -2,
	  "t.conf:1: bad value 'No' (expected climb=yes or climb=no)" },
	{ "climb=1 is not a value", "use rdma client * *:* climb=1\n", -2, "bad value '1'" },
	{ "climb with no value", "use rdma client * *:* climb=\n", -2, "bad value" },
	{ "climb twice", "use rdma client * *:* climb=yes climb=no\n", -2,
	  "t.conf:1: duplicate option 'climb' (expected each option at most once)" },
	{ "a fifth option is a duplicate, the rest cut off",
	  "use rdma server * *:* zcopy_thresh=1 connect_timeout_ms=2 clients=10.0.0.0/8 climb=no "
	  "climb=no a b\n", -2, "duplicate option 'climb'" },
	{ "the key is case-sensitive", "use rdma client * *:* Climb=no\n", -2,
	  "unknown option 'Climb=no'" },
};

static void run_climb_case(const struct climb_case *c)
{
	struct diag_capture d = { 0 };
	struct sdp_rules r;
	int rc = rules_parse(&r, c->text, strlen(c->text), "t.conf", capture_diag, &d);
	int ok;

	if (c->want == -2) {
		ok = check_rejected(rc, &r, &d, c->diag);
	} else {
		ok = check_accepted(rc, &r, &d, 1);
		if (ok)
			ok = check(r.rule[0].climb == c->want, "climb %d, want %d", r.rule[0].climb,
				   c->want);
	}
	rules_free(&r);
	tap_result(ok, c->desc);
}

struct nets_match_case {
	const char *desc;
	const char *clients;   /* the clients= value; NULL: no option */
	const char *ip;        /* a.b.c.d is passed IPv4-mapped */
	bool want;
};

static const struct nets_match_case nets_match_cases[] = {
	{ "no networks: any IPv4 client", NULL, "10.1.2.3", true },
	{ "no networks: any IPv6 client", NULL, "2001:db8::1", true },
	{ "IPv4 /16 inside", "10.1.0.0/16", "10.1.2.3", true },
	{ "IPv4 /16 low edge", "10.1.0.0/16", "10.1.0.0", true },
	{ "IPv4 /16 high edge", "10.1.0.0/16", "10.1.255.255", true },
	{ "IPv4 /16 just above", "10.1.0.0/16", "10.2.0.0", false },
	{ "IPv4 /16 just below", "10.1.0.0/16", "10.0.255.255", false },
	{ "IPv4 /16 given with host bits", "10.1.2.3/16", "10.1.200.1", true },
	{ "IPv4 /9: bit 9 decides (hit)", "10.128.0.0/9", "10.255.0.1", true },
	{ "IPv4 /9: bit 9 decides (miss)", "10.128.0.0/9", "10.127.0.1", false },
	{ "IPv4 exact /32 (hit)", "192.0.2.7/32", "192.0.2.7", true },
	{ "IPv4 exact /32: neighbour misses", "192.0.2.7/32", "192.0.2.6", false },
	{ "IPv4 host without prefix is exact", "192.0.2.7", "192.0.2.8", false },
	{ "IPv4 /0 admits any IPv4 client", "0.0.0.0/0", "203.0.113.9", true },
	{ "IPv4 /0 does not admit an IPv6 client", "0.0.0.0/0", "2001:db8::1", false },
	{ "IPv4 net does not admit an IPv6 client with the same low bytes", "10.1.2.3", "::10.1.2.3", false },
	{ "IPv4 net matched by a mapped address given as IPv6", "10.1.0.0/16", "::ffff:10.1.9.9", true },
	{ "IPv4 net: mapped address outside misses", "10.1.0.0/16", "::ffff:10.9.9.9", false },
	{ "mapped net written as IPv6 /104 admits IPv4", "::ffff:10.0.0.0/104", "10.200.0.1", true },
	{ "mapped net written as IPv6 /104 misses other IPv4", "[::ffff:10.0.0.0]/104", "11.0.0.1", false },
	{ "::ffff:0:0/96 admits any IPv4 client", "::ffff:0:0/96", "1.2.3.4", true },
	{ "an IPv6 /80 around the mapped range is IPv6 only", "::/80", "1.2.3.4", false },
	{ "IPv6 /8 inside", "fd00::/8", "fd12:3456::1", true },
	{ "IPv6 /8 outside", "fd00::/8", "fe80::1", false },
	{ "IPv6 /65: bit 65 decides (hit)", "2001:db8:0:1:8000::/65", "2001:db8:0:1:ffff::1", true },
	{ "IPv6 /65: bit 65 decides (miss)", "2001:db8:0:1:8000::/65", "2001:db8:0:1:7fff::1", false },
	{ "IPv6 exact /128 (hit)", "[2001:db8::1]/128", "2001:db8::1", true },
	{ "IPv6 exact /128: neighbour misses", "2001:db8::1/128", "2001:db8::2", false },
	{ "IPv6 ::/0 admits any IPv6 client", "::/0", "2001:db8::1", true },
	{ "IPv6 ::/0 does not admit an IPv4 client", "[::]/0", "10.1.2.3", false },
	{ "IPv6 ::/0 does not admit a mapped address", "::/0", "::ffff:10.1.2.3", false },
	{ "list: the second network admits", "10.1.0.0/16,fd00::/8", "fd00::5", true },
	{ "list: IPv4 client of a mixed list", "fd00::/8,10.1.0.0/16", "10.1.0.5", true },
	{ "list: no network admits", "10.1.0.0/16,fd00::/8", "10.2.0.5", false },
	{ "list of 8: only the last admits",
	  "1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8,7.0.0.0/8,fd00::/8", "fd00::1", true },
	{ "list of 8: none admits",
	  "1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8,6.0.0.0/8,7.0.0.0/8,fd00::/8", "8.0.0.1", false },
};

static void run_nets_match_case(const struct nets_match_case *c)
{
	struct diag_capture d;
	struct sdp_rules r;
	uint8_t addr[16];
	int ok = check_accepted(parse_clients(c->clients, &r, &d), &r, &d, 1);

	ok &= check(addr16(c->ip, addr), "bad test address %s", c->ip);
	if (ok) {
		const struct sdp_rule *rule = &r.rule[0];
		bool got = sdp_nets_match(rule->client_nets, rule->client_net_count, addr);
		ok = check(got == c->want, "%s in {%s}: %d, want %d", c->ip,
			   c->clients ? c->clients : "", got, c->want);
	}
	rules_free(&r);
	tap_result(ok, c->desc);
}

static int test_nets_match_degenerate(void)
{
	struct sdp_net nets[SDP_CLIENT_NETS_MAX + 1];
	uint8_t addr[16], other[16];
	int ok = check(addr16("10.1.2.3", addr) && addr16("10.9.9.9", other), "addresses");

	memset(nets, 0, sizeof(nets));
	ok &= check(sdp_nets_match(NULL, 0, addr), "NULL nets, count 0: no restriction");
	ok &= check(sdp_nets_match(NULL, 0, NULL), "count 0 with NULL addr: no restriction");
	ok &= check(!sdp_nets_match(NULL, 1, addr), "NULL nets, count 1: refused");
	/* Every zero net is "::/0": IPv6 only. */
	ok &= check(!sdp_nets_match(nets, 1, addr), "::/0 does not admit IPv4");
	ok &= check(!sdp_nets_match(nets, 1, NULL), "NULL addr, count 1: refused");
	/* Only the 9th admits: it is beyond SDP_CLIENT_NETS_MAX and not read. */
	for (unsigned i = 0; i < SDP_CLIENT_NETS_MAX; i++) {
		addr16("192.0.2.1", nets[i].addr);
		nets[i].prefix = 128;
	}
	memcpy(nets[SDP_CLIENT_NETS_MAX].addr, addr, 16);
	nets[SDP_CLIENT_NETS_MAX].prefix = 128;
	ok &= check(!sdp_nets_match(nets, SDP_CLIENT_NETS_MAX + 1, addr), "count above 8 is capped");
	ok &= check(sdp_nets_match(nets + 1, SDP_CLIENT_NETS_MAX, addr), "8th net read");
	/* A prefix above 128 (never parsed) is an exact match. */
	memcpy(nets[0].addr, addr, 16);
	nets[0].prefix = 200;
	ok &= check(sdp_nets_match(nets, 1, addr), "prefix 200 as 128: same address");
	ok &= check(!sdp_nets_match(nets, 1, other), "prefix 200 as 128: other address");
	return ok;
}

/* path_decide_server() hands the matching rule's networks on; nothing else does. */
static int test_path_decision_carries_nets(void)
{
	static const char text[] =
		"use rdma server * *:7000 clients=10.1.0.0/16,[fd00::]/8\n"
		"use both server * *:7001 zcopy_thresh=4096\n"
		"use tcp  server * *:7002 clients=192.0.2.0/24\n"
		"use rdma client * *:7000\n";
	struct path_decision dec;
	struct sockaddr_storage ss;
	uint8_t a[16];
	char path[256];
	int ok;

	tmp_path(path, sizeof(path), "path.conf");
	if (write_file_text(path, text) != 0)
		return check(0, "write %s", path);
	setenv("SDPSHIM_CONFIG", path, 1);
	unsetenv("SDPSHIM_MODE");
	path_init();

	ss = make_addr("10.0.0.1", 7000);
	path_decide_server((struct sockaddr *)&ss, &dec);
	ok = check(dec.policy.client_net_count == 2, "7000: count %u, want 2", dec.policy.client_net_count);
	ok &= check(addr16("::ffff:10.1.0.0", a) && memcmp(dec.policy.client_nets[0].addr, a, 16) == 0 &&
		    dec.policy.client_nets[0].prefix == 112, "7000: first net");
	ok &= check(addr16("fd00::", a) && memcmp(dec.policy.client_nets[1].addr, a, 16) == 0 &&
		    dec.policy.client_nets[1].prefix == 8, "7000: second net");
	ok &= check(addr16("10.1.7.7", a) && sdp_nets_match(dec.policy.client_nets, dec.policy.client_net_count, a),
		    "7000: 10.1.7.7 admitted");
	ok &= check(addr16("10.2.7.7", a) && !sdp_nets_match(dec.policy.client_nets, dec.policy.client_net_count, a),
		    "7000: 10.2.7.7 refused");

	ss = make_addr("fd00::1", 7001);
	path_decide_server((struct sockaddr *)&ss, &dec);
	ok &= check(dec.policy.client_net_count == 0 && dec.policy.zcopy_thresh == 4096,
		    "7001 (no clients=): count %u, zcopy %lld", dec.policy.client_net_count,
		    (long long)dec.policy.zcopy_thresh);

	ss = make_addr("10.0.0.1", 7002);
	path_decide_server((struct sockaddr *)&ss, &dec);
	ok &= check(dec.policy.client_net_count == 1 && dec.reason == SDP_REASON_RULE_TCP,
		    "7002 (use tcp): count %u, reason %d", dec.policy.client_net_count, dec.reason);

	ss = make_addr("10.0.0.1", 7003);
	path_decide_server((struct sockaddr *)&ss, &dec);
	ok &= check(dec.policy.client_net_count == 0, "7003 (no rule): count %u", dec.policy.client_net_count);

	ss = make_addr("10.0.0.1", 7000);
	path_decide_client((struct sockaddr *)&ss, &dec);
	ok &= check(dec.policy.client_net_count == 0, "client decision: count %u", dec.policy.client_net_count);
	unsetenv("SDPSHIM_CONFIG");
	return ok;
}

static const struct special_case nets_special_cases[] = {
	{ "sdp_nets_match: NULL, zero nets, count cap, prefix cap", test_nets_match_degenerate },
	{ "path_decide_server carries the rule's clients= networks", test_path_decision_carries_nets },
};

static void remove_tmpdir(void)
{
	static const char *const names[] = { "good.conf", "bad.conf", "fifo.conf", "big.conf",
					     "huge.conf", "path.conf", "noread.conf" };
	char path[256];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		tmp_path(path, sizeof(path), names[i]);
		unlink(path);
	}
	tmp_path(path, sizeof(path), "dir.conf");
	rmdir(path);
	rmdir(tmpdir);
}

int main(void)
{
	struct sdp_rules match_rules;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mkdtemp(tmpdir) == NULL) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	if (rules_parse(&match_rules, match_text, strlen(match_text), "match", NULL, NULL) != 0) {
		printf("Bail out! matching table does not parse\n");
		return 1;
	}
	printf("1..%zu\n", ARRAY_SIZE(parse_cases) + ARRAY_SIZE(field_cases) +
	       ARRAY_SIZE(match_cases) + ARRAY_SIZE(special_cases) +
	       ARRAY_SIZE(client_net_cases) + ARRAY_SIZE(nets_match_cases) +
	       ARRAY_SIZE(nets_special_cases) + ARRAY_SIZE(climb_cases));
	for (size_t i = 0; i < ARRAY_SIZE(parse_cases); i++)
		run_parse_case(&parse_cases[i]);
	for (size_t i = 0; i < ARRAY_SIZE(field_cases); i++)
		run_field_case(&field_cases[i]);
	for (size_t i = 0; i < ARRAY_SIZE(match_cases); i++)
		run_match_case(&match_rules, &match_cases[i]);
	for (size_t i = 0; i < ARRAY_SIZE(special_cases); i++)
		tap_result(special_cases[i].fn(), special_cases[i].desc);
	for (size_t i = 0; i < ARRAY_SIZE(client_net_cases); i++)
		run_client_net_case(&client_net_cases[i]);
	for (size_t i = 0; i < ARRAY_SIZE(nets_match_cases); i++)
		run_nets_match_case(&nets_match_cases[i]);
	for (size_t i = 0; i < ARRAY_SIZE(nets_special_cases); i++)
		tap_result(nets_special_cases[i].fn(), nets_special_cases[i].desc);
	for (size_t i = 0; i < ARRAY_SIZE(climb_cases); i++)
		run_climb_case(&climb_cases[i]);
	rules_free(&match_rules);
	remove_tmpdir();
	return tap_exit_status();
}
