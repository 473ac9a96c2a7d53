/* Path-choice rules in the style of libsdp's libsdp.conf:
 *   use rdma|tcp|both server|client <program glob> <addr[/prefix]|*>:<port[-port]|*> [key=value ...]
 * Options: zcopy_thresh=N, connect_timeout_ms=N, climb=yes|no (a stream a
 * failover moved to TCP goes back to RDMA, and a server takes a peer's move
 * back: core/climb.c), and on server rules only clients=NET[,NET...] (the
 * client subnets that may open RDMA channels).
 * First match wins; no match means "both".  A file with a bad line, or one
 * that cannot be read, fails closed: none of its rules apply and every
 * connection matches "use tcp" instead.  Pure module: no I/O except
 * rules_load_file(), no globals. */
#ifndef SDPSHIM_RULES_H
#define SDPSHIM_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/policy.h" /* struct sdp_net, SDP_CLIENT_NETS_MAX */

enum rule_use  { RULE_USE_BOTH = 0, RULE_USE_RDMA = 1, RULE_USE_TCP = 2 };
enum rule_role { RULE_ROLE_SERVER = 1, RULE_ROLE_CLIENT = 2 };

#define RULE_PROG_MAX 128

struct sdp_rule {
	enum rule_use  use;
	enum rule_role role;
	char     prog_glob[RULE_PROG_MAX]; /* fnmatch(3) pattern; "*" matches all */
	int      family;                   /* AF_UNSPEC for "*", else AF_INET/AF_INET6 */
	uint8_t  addr[16];                 /* network order; 4 bytes used for AF_INET */
	uint8_t  prefix;                   /* prefix length in bits */
	uint16_t port_lo, port_hi;         /* host order; 0-65535 for "*" */
	int64_t  zcopy_thresh;             /* option zcopy_thresh=N; -1 when absent */
	int64_t  connect_timeout_ms;       /* option connect_timeout_ms=N; -1 when absent */
	int8_t   climb;                    /* option climb=yes|no: 1 or 0; -1 when absent */
	unsigned client_net_count;         /* option clients=; 0 when absent (server rules only) */
	struct sdp_net client_nets[SDP_CLIENT_NETS_MAX];
	unsigned line;                     /* source line number, for diagnostics */
};

struct sdp_rules {
	struct sdp_rule *rule;
	size_t count;
	bool fail_closed;   /* the file was rejected: rule is NULL, count 0, and every
			     * match is a "use tcp" rule of no line (line 0) */
};

/* Called once for a rejected file: "FILE:LINE: problem (and N more bad
 * lines); ...", or "FILE: problem; ..." when it cannot be read. */
typedef void (*rules_diag_fn)(void *ctx, const char *one_line_message);

/* Parses a whole config text.  On success fills *out and returns 0.  If any
 * line is bad, *out holds no rule but fails closed (fail_closed: every
 * connection uses TCP), diag is called once with a message naming file and
 * the first bad line, and -1 is returned.  Never crashes on any input (it is
 * fuzzed). */
int rules_parse(struct sdp_rules *out, const char *text, size_t len,
		const char *filename, rules_diag_fn diag, void *diag_ctx);

/* Reads FILE and parses it.  A missing file is not an error when
 * missing_ok is true (returns 0, no rules).  A file that cannot be read (any
 * other open or read error, not a regular file or character device, over
 * 1 MiB) is rejected as a bad line is: -1, one diag line, fail_closed. */
int rules_load_file(struct sdp_rules *out, const char *filename, bool missing_ok,
		    rules_diag_fn diag, void *diag_ctx);

/* First rule that matches role, program name and address:port, or NULL.
 * For a fail_closed set: a static "use tcp" rule for any IPv4/IPv6 address. */
const struct sdp_rule *rules_match(const struct sdp_rules *rules, enum rule_role role,
				   const char *progname, const struct sockaddr *addr);

/* Effective use for a match (RULE_USE_BOTH when no rule matched). */
enum rule_use rules_decide(const struct sdp_rules *rules, enum rule_role role,
			   const char *progname, const struct sockaddr *addr);

/* Frees the rules and leaves an empty set (not fail_closed). */
void rules_free(struct sdp_rules *rules);

#endif
