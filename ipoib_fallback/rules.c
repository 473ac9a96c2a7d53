/* Owns the path-choice rules' text: parsing libsdp-style rule text and files
 * (a bad or unreadable file fails closed: its rules are dropped and every
 * connection uses TCP).  Finding a connection's rule: rules_match.c. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/policy.h"
#include "ipoib_fallback/rules.h"

#define RULES_LINE_MAX       4096                 /* bytes per line, without '\n' */
#define RULES_MAX            10000                /* rules per file */
#define RULES_FILE_MAX       (1024 * 1024)        /* bytes per file */
#define RULES_FIELDS_MAX     10                   /* fields kept per line, see tokenize() */
#define RULES_ADDRPORT_MAX   79                   /* bytes in an address:port field */
#define RULES_NET_MAX        79                   /* bytes in one clients= entry */
#define ZCOPY_THRESH_MAX     ((uint64_t)1 << 40)
#define CONNECT_TIMEOUT_MAX  600000
#define ERR_MAX              400                  /* one problem description */
#define DIAG_MAX             1024                 /* one whole diagnostic line */
#define QUOTE_MAX            48                   /* bytes of a bad token shown */
#define RULES_FAIL_CLOSED_NOTE "ignoring its rules: every connection uses TCP (fail closed)"

enum line_kind { LINE_EMPTY, LINE_RULE, LINE_BAD };

struct parse_state {
	struct sdp_rules rules;
	size_t cap;
	size_t rule_lines;
	size_t bad_lines;
	size_t first_bad_line;
	char first_err[ERR_MAX];
	bool out_of_memory;
};

struct fields {
	char *f[RULES_FIELDS_MAX];
	size_t n;
};

/* Where parse_address() puts what it read: family, bytes, prefix bits. */
struct addr_out {
	int *family;        /* AF_UNSPEC ("*"), AF_INET or AF_INET6 */
	uint8_t *addr;      /* 16 bytes; 4 used for AF_INET */
	uint8_t *prefix;
};

/* The two places an address is written: the rule's address:port field
 * ("*" allowed, IPv6 only in brackets, since ':' also ends the address) and
 * a clients= entry (no "*", brackets optional). */
struct addr_syntax {
	bool star_ok;
	bool bare_ipv6_ok;
	const char *expected;
};

static const struct addr_syntax rule_addr_syntax = {
	true, false, "*, a.b.c.d[/n] or [ipv6][/n]"
};
static const struct addr_syntax client_net_syntax = {
	false, true, "a.b.c.d[/n], ipv6[/n] or [ipv6][/n]"
};

/* ---- diagnostics ------------------------------------------------------ */

/* Copies src into dst for a one-line message: control bytes become \xNN and
 * anything beyond max_src bytes becomes "...". */
static void sanitize(char *dst, size_t dst_size, const char *src, size_t max_src)
{
	size_t len = strnlen(src, max_src + 1);
	size_t shown = len > max_src ? max_src : len;
	size_t o = 0, i;

	for (i = 0; i < shown && o + 5 < dst_size; i++) {
		unsigned char c = (unsigned char)src[i];
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(dst + o, dst_size - o, "\\x%02x", c);
		else
			dst[o++] = (char)c;
	}
	if (i < len && o + 4 <= dst_size) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o] = '\0';
}

/* Writes "<what> '<tok>' (expected <expected>)" into err; returns LINE_BAD. */
static int fail_token(char *err, const char *what, const char *tok, const char *expected)
{
	char quoted[QUOTE_MAX * 4 + 8];

	sanitize(quoted, sizeof(quoted), tok, QUOTE_MAX);
	snprintf(err, ERR_MAX, "%s '%s' (expected %s)", what, quoted, expected);
	return LINE_BAD;
}

static int fail_msg(char *err, const char *msg)
{
	snprintf(err, ERR_MAX, "%s", msg);
	return LINE_BAD;
}

static void report(rules_diag_fn diag, void *ctx, const char *filename,
		   const char *where_and_what)
{
	char name[256], msg[DIAG_MAX];

	if (diag == NULL)
		return;
	sanitize(name, sizeof(name), filename ? filename : "(rules)", 200);
	snprintf(msg, sizeof(msg), "%s:%s; " RULES_FAIL_CLOSED_NOTE, name, where_and_what);
	diag(ctx, msg);
}

/* ---- small parsers ----------------------------------------------------- */

/* Strict unsigned decimal: one or more digits, value at most max. */
static bool parse_decimal(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

static int parse_use(const char *tok, struct sdp_rule *r, char *err)
{
	if (strcmp(tok, "rdma") == 0)
		r->use = RULE_USE_RDMA;
	else if (strcmp(tok, "tcp") == 0)
		r->use = RULE_USE_TCP;
	else if (strcmp(tok, "both") == 0)
		r->use = RULE_USE_BOTH;
	else
		return fail_token(err, "unknown use", tok, "rdma|tcp|both");
	return LINE_RULE;
}

static int parse_role(const char *tok, struct sdp_rule *r, char *err)
{
	if (strcmp(tok, "server") == 0)
		r->role = RULE_ROLE_SERVER;
	else if (strcmp(tok, "client") == 0)
		r->role = RULE_ROLE_CLIENT;
	else
		return fail_token(err, "unknown role", tok, "server|client");
	return LINE_RULE;
}

static int parse_glob(const char *tok, struct sdp_rule *r, char *err)
{
	size_t n = strlen(tok);

	if (n >= RULE_PROG_MAX)
		return fail_token(err, "over-long program glob", tok, "at most 127 bytes");
	memcpy(r->prog_glob, tok, n + 1);
	return LINE_RULE;
}

/* "[v6]" with brackets, dotted-quad IPv4, or (if bare_ipv6_ok) a bare v6
 * text, told apart by its ':'; sets family and bytes. */
static bool parse_ip(char *s, bool bare_ipv6_ok, const struct addr_out *out)
{
	size_t n = strlen(s);

	if (s[0] == '[') {
		if (n < 2 || s[n - 1] != ']')
			return false;
		s[n - 1] = '\0';
		*out->family = AF_INET6;
		return inet_pton(AF_INET6, s + 1, out->addr) == 1;
	}
	if (bare_ipv6_ok && strchr(s, ':') != NULL) {
		*out->family = AF_INET6;
		return inet_pton(AF_INET6, s, out->addr) == 1;
	}
	*out->family = AF_INET;
	return inet_pton(AF_INET, s, out->addr) == 1;
}

/* "*", "a.b.c.d[/n]" or "[ipv6][/n]", as syntax allows; no prefix means the
 * full length; s is modified. */
static int parse_address(char *s, const struct addr_syntax *syntax,
			 const struct addr_out *out, char *err)
{
	char shown[RULES_ADDRPORT_MAX + 1];
	uint64_t prefix;

	if (syntax->star_ok && strcmp(s, "*") == 0) {
		*out->family = AF_UNSPEC;
		*out->prefix = 0;
		return LINE_RULE;
	}
	snprintf(shown, sizeof(shown), "%s", s);
	char *slash = strchr(s, '/');
	if (slash != NULL)
		*slash = '\0';
	if (!parse_ip(s, syntax->bare_ipv6_ok, out))
		return fail_token(err, "bad address", shown, syntax->expected);
	unsigned max = *out->family == AF_INET ? 32 : 128;
	if (slash == NULL) {
		*out->prefix = (uint8_t)max;
		return LINE_RULE;
	}
	if (!parse_decimal(slash + 1, max, &prefix))
		return fail_token(err, "bad prefix", slash + 1,
				  max == 32 ? "0..32 for IPv4" : "0..128 for IPv6");
	*out->prefix = (uint8_t)prefix;
	return LINE_RULE;
}

/* "*", "N" or "N-M" with 0 <= N <= M <= 65535. */
static int parse_ports(char *s, struct sdp_rule *r, char *err)
{
	static const char expected[] = "*, N or N-M with 0<=N<=M<=65535";
	uint64_t lo = 0, hi;

	if (strcmp(s, "*") == 0) {
		r->port_lo = 0;
		r->port_hi = 65535;
		return LINE_RULE;
	}
	char *dash = strchr(s, '-');
	if (dash != NULL)
		*dash = '\0';
	bool ok = parse_decimal(s, 65535, &lo);
	hi = lo;
	if (ok && dash != NULL)
		ok = parse_decimal(dash + 1, 65535, &hi);
	if (dash != NULL)
		*dash = '-';
	if (!ok || lo > hi)
		return fail_token(err, "bad port", s, expected);
	r->port_lo = (uint16_t)lo;
	r->port_hi = (uint16_t)hi;
	return LINE_RULE;
}

/* "<address>:<ports>", split at the last ':'. */
static int parse_addrport(const char *tok, struct sdp_rule *r, char *err)
{
	static const char expected[] = "addr[/prefix]:port[-port], * allowed for either";
	char buf[RULES_ADDRPORT_MAX + 1];
	size_t n = strlen(tok);

	if (n > RULES_ADDRPORT_MAX)
		return fail_token(err, "over-long address:port", tok, "at most 79 bytes");
	memcpy(buf, tok, n + 1);
	char *colon = strrchr(buf, ':');
	if (colon == NULL || (buf[0] == '[' && memchr(buf, ']', (size_t)(colon - buf)) == NULL))
		return fail_token(err, "bad address:port", tok, expected);
	*colon = '\0';
	const struct addr_out out = { &r->family, r->addr, &r->prefix };
	if (parse_address(buf, &rule_addr_syntax, &out, err) == LINE_BAD)
		return LINE_BAD;
	return parse_ports(colon + 1, r, err);
}

static int parse_option_value(const char *key, const char *value, uint64_t min,
			      uint64_t max, int64_t *slot, char *err)
{
	uint64_t v;

	if (*slot >= 0)
		return fail_token(err, "duplicate option", key, "each option at most once");
	if (!parse_decimal(value, max, &v) || v < min) {
		char expected[64];
		snprintf(expected, sizeof(expected), "%s=%llu..%llu", key,
			 (unsigned long long)min, (unsigned long long)max);
		return fail_token(err, "bad value", value, expected);
	}
	*slot = (int64_t)v;
	return LINE_RULE;
}

/* One clients= entry, "a.b.c.d[/n]", "ipv6[/n]" or "[ipv6][/n]"; IPv4 is
 * stored IPv4-mapped with prefix + 96. */
static int parse_client_net(const char *entry, size_t len, struct sdp_net *net, char *err)
{
	char buf[RULES_NET_MAX + 1];
	uint8_t bytes[16] = { 0 };
	int family = AF_UNSPEC;
	uint8_t prefix = 0;
	const struct addr_out out = { &family, bytes, &prefix };

	if (len > RULES_NET_MAX)
		return fail_token(err, "over-long network in clients", entry,
				  "at most 79 bytes per network");
	memcpy(buf, entry, len);
	buf[len] = '\0';
	if (parse_address(buf, &client_net_syntax, &out, err) == LINE_BAD)
		return LINE_BAD;
	memset(net, 0, sizeof(*net));
	if (family == AF_INET) {
		memcpy(net->addr, sdp_v4_mapped_prefix, sizeof(sdp_v4_mapped_prefix));
		memcpy(net->addr + 12, bytes, 4);
		net->prefix = (uint8_t)(prefix + 96);
	} else {
		memcpy(net->addr, bytes, 16);
		net->prefix = prefix;
	}
	return LINE_RULE;
}

/* "clients=NET[,NET...]": 1..SDP_CLIENT_NETS_MAX networks, server rules only. */
static int parse_client_nets(const char *value, struct sdp_rule *r, char *err)
{
	static const char expected[] = "clients=addr[/n][,addr[/n]...]";
	unsigned count = 0;

	if (r->role != RULE_ROLE_SERVER)
		return fail_msg(err, "option clients= on a client rule (expected it only on "
				     "server rules: it limits which clients may open RDMA channels)");
	if (r->client_net_count > 0)
		return fail_token(err, "duplicate option", "clients", "each option at most once");
	if (*value == '\0')
		return fail_token(err, "bad value", value, expected);
	for (const char *entry = value;; ) {
		size_t len = strcspn(entry, ",");
		if (len == 0)
			return fail_token(err, "empty network in clients", value,
					  "addr[/n] between commas, none empty");
		if (count == SDP_CLIENT_NETS_MAX)
			return fail_token(err, "too many networks in clients", value,
					  "at most 8 networks");
		if (parse_client_net(entry, len, &r->client_nets[count], err) == LINE_BAD)
			return LINE_BAD;
		count++;
		if (entry[len] == '\0')
			break;
		entry += len + 1;
	}
	r->client_net_count = count;
	return LINE_RULE;
}

/* "climb=yes" or "climb=no". */
static int parse_climb(const char *value, struct sdp_rule *r, char *err)
{
	if (r->climb >= 0)
		return fail_token(err, "duplicate option", "climb", "each option at most once");
	if (strcmp(value, "yes") == 0)
		r->climb = 1;
	else if (strcmp(value, "no") == 0)
		r->climb = 0;
	else
		return fail_token(err, "bad value", value, "climb=yes or climb=no");
	return LINE_RULE;
}

/* "zcopy_thresh=N", "connect_timeout_ms=N", "climb=yes|no" or
 * "clients=NET[,NET...]"; tok is modified. */
static int parse_option(char *tok, struct sdp_rule *r, char *err)
{
	static const char expected[] = "zcopy_thresh=N, connect_timeout_ms=N, climb=yes|no or "
				       "clients=addr[/n][,addr[/n]...]";
	char *eq = strchr(tok, '=');

	if (eq == NULL)
		return fail_token(err, "unknown option", tok, expected);
	*eq = '\0';
	if (strcmp(tok, "zcopy_thresh") == 0)
		return parse_option_value(tok, eq + 1, 0, ZCOPY_THRESH_MAX,
					  &r->zcopy_thresh, err);
	if (strcmp(tok, "connect_timeout_ms") == 0)
		return parse_option_value(tok, eq + 1, 1, CONNECT_TIMEOUT_MAX,
					  &r->connect_timeout_ms, err);
	if (strcmp(tok, "climb") == 0)
		return parse_climb(eq + 1, r, err);
	if (strcmp(tok, "clients") == 0)
		return parse_client_nets(eq + 1, r, err);
	*eq = '=';
	return fail_token(err, "unknown option", tok, expected);
}

/* ---- one line ----------------------------------------------------------- */

/* Splits at spaces/tabs in place.  Keeps at most RULES_FIELDS_MAX fields: a
 * line with more always fails, because field 10 is a fifth option (there are
 * four), which is necessarily unknown or a duplicate. */
static void tokenize(char *line, struct fields *fl)
{
	char *save = NULL;

	fl->n = 0;
	for (char *t = strtok_r(line, " \t", &save); t != NULL && fl->n < RULES_FIELDS_MAX;
	     t = strtok_r(NULL, " \t", &save))
		fl->f[fl->n++] = t;
}

static int parse_fields(struct fields *fl, struct sdp_rule *r, char *err)
{
	if (strcmp(fl->f[0], "use") != 0)
		return fail_token(err, "unknown keyword", fl->f[0], "use");
	if (fl->n < 2)
		return fail_msg(err, "missing use (expected rdma|tcp|both)");
	if (parse_use(fl->f[1], r, err) == LINE_BAD)
		return LINE_BAD;
	if (fl->n < 3)
		return fail_msg(err, "missing role (expected server|client)");
	if (parse_role(fl->f[2], r, err) == LINE_BAD)
		return LINE_BAD;
	if (fl->n < 4)
		return fail_msg(err, "missing program glob (expected e.g. * or redis-*)");
	if (parse_glob(fl->f[3], r, err) == LINE_BAD)
		return LINE_BAD;
	if (fl->n < 5)
		return fail_msg(err, "missing address:port (expected addr[/prefix]:port[-port])");
	if (parse_addrport(fl->f[4], r, err) == LINE_BAD)
		return LINE_BAD;
	for (size_t i = 5; i < fl->n; i++)
		if (parse_option(fl->f[i], r, err) == LINE_BAD)
			return LINE_BAD;
	return LINE_RULE;
}

/* Classifies one raw line (no '\n') and, for a rule, fills *r. */
static int parse_line(const char *raw, size_t len, struct sdp_rule *r, char *err)
{
	char buf[RULES_LINE_MAX + 1];
	struct fields fl;

	if (len > RULES_LINE_MAX)
		return fail_msg(err, "line longer than 4096 bytes (expected a shorter line)");
	if (memchr(raw, '\0', len) != NULL)
		return fail_msg(err, "NUL byte in line (expected text)");
	memcpy(buf, raw, len);
	buf[len] = '\0';
	if (len > 0 && buf[len - 1] == '\r')
		buf[len - 1] = '\0';
	char *hash = strchr(buf, '#');
	if (hash != NULL)
		*hash = '\0';
	tokenize(buf, &fl);
	if (fl.n == 0)
		return LINE_EMPTY;
	memset(r, 0, sizeof(*r));
	r->zcopy_thresh = -1;
	r->connect_timeout_ms = -1;
	r->climb = -1;
	return parse_fields(&fl, r, err);
}

/* ---- whole text --------------------------------------------------------- */

static void note_bad_line(struct parse_state *st, size_t lineno, const char *err)
{
	if (st->bad_lines++ == 0) {
		st->first_bad_line = lineno;
		snprintf(st->first_err, sizeof(st->first_err), "%s", err);
	}
}

static bool append_rule(struct parse_state *st, const struct sdp_rule *r)
{
	if (st->rules.count == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 16;
		if (cap > RULES_MAX)
			cap = RULES_MAX;
		struct sdp_rule *grown = realloc(st->rules.rule, cap * sizeof(*grown));
		if (grown == NULL)
			return false;
		st->rules.rule = grown;
		st->cap = cap;
	}
	st->rules.rule[st->rules.count++] = *r;
	return true;
}

static void parse_one_line(struct parse_state *st, const char *raw, size_t len, size_t lineno)
{
	char err[ERR_MAX];
	struct sdp_rule r;

	switch (parse_line(raw, len, &r, err)) {
	case LINE_EMPTY:
		return;
	case LINE_BAD:
		note_bad_line(st, lineno, err);
		return;
	default:
		break;
	}
	if (++st->rule_lines > RULES_MAX) {
		note_bad_line(st, lineno, "more than 10000 rules (expected at most 10000)");
		return;
	}
	r.line = lineno > UINT_MAX ? UINT_MAX : (unsigned)lineno;
	if (st->bad_lines == 0 && !append_rule(st, &r)) {
		st->out_of_memory = true;
		note_bad_line(st, lineno, "out of memory (expected fewer rules)");
	}
}

/* A rejected file: no rule of it applies, and every connection matches
 * "use tcp" (rules_match()). */
static void set_fail_closed(struct sdp_rules *out)
{
	out->rule = NULL;
	out->count = 0;
	out->fail_closed = true;
}

/* Hands the rules to *out, or rejects the file with one diagnostic line. */
static int finish(struct parse_state *st, struct sdp_rules *out, const char *filename,
		  rules_diag_fn diag, void *ctx)
{
	char where[ERR_MAX + 96];
	size_t more = st->bad_lines - 1;

	if (st->bad_lines == 0) {
		*out = st->rules;
		return 0;
	}
	rules_free(&st->rules);
	set_fail_closed(out);
	if (st->out_of_memory || more == 0)
		snprintf(where, sizeof(where), "%zu: %s", st->first_bad_line, st->first_err);
	else
		snprintf(where, sizeof(where), "%zu: %s (and %zu more bad line%s)",
			 st->first_bad_line, st->first_err, more, more == 1 ? "" : "s");
	report(diag, ctx, filename, where);
	return -1;
}

int rules_parse(struct sdp_rules *out, const char *text, size_t len,
		const char *filename, rules_diag_fn diag, void *diag_ctx)
{
	struct parse_state st;
	size_t pos = 0, lineno = 0;

	if (out == NULL)
		return -1;
	*out = (struct sdp_rules){ NULL, 0, false };
	memset(&st, 0, sizeof(st));
	if (text == NULL)
		len = 0;
	while (pos < len && !st.out_of_memory) {
		const char *start = text + pos;
		const char *nl = memchr(start, '\n', len - pos);
		size_t line_len = nl != NULL ? (size_t)(nl - start) : len - pos;
		pos += line_len + (nl != NULL);
		parse_one_line(&st, start, line_len, ++lineno);
	}
	return finish(&st, out, filename, diag, diag_ctx);
}

/* ---- files -------------------------------------------------------------- */

static int reject_file(const char *filename, const char *problem, rules_diag_fn diag,
		       void *ctx)
{
	char where[ERR_MAX + 2];

	snprintf(where, sizeof(where), " %s", problem);
	report(diag, ctx, filename, where);
	return -1;
}

static int reject_errno(const char *filename, const char *action, int err,
			rules_diag_fn diag, void *ctx)
{
	char problem[ERR_MAX], text[128];

	snprintf(problem, sizeof(problem), "cannot %s: %s", action,
		 strerror_r(err, text, sizeof(text)));
	return reject_file(filename, problem, diag, ctx);
}

/* Reads up to RULES_FILE_MAX + 1 bytes; returns bytes read or -1 (errno). */
static ssize_t read_capped(int fd, char *buf)
{
	size_t got = 0;

	while (got <= RULES_FILE_MAX) {
		ssize_t n = read(fd, buf + got, RULES_FILE_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

/* Regular files and character devices (e.g. /dev/null) only: a FIFO could
 * block forever. */
static bool readable_kind(int fd)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return false;
	return S_ISREG(st.st_mode) || S_ISCHR(st.st_mode);
}

static int parse_fd(struct sdp_rules *out, int fd, const char *filename,
		    rules_diag_fn diag, void *ctx)
{
	if (!readable_kind(fd))
		return reject_file(filename, "not a regular file (expected a text file)",
				   diag, ctx);
	char *buf = malloc(RULES_FILE_MAX + 1);
	if (buf == NULL)
		return reject_errno(filename, "read", ENOMEM, diag, ctx);
	ssize_t n = read_capped(fd, buf);
	int saved = errno;
	int rc;
	if (n < 0)
		rc = reject_errno(filename, "read", saved, diag, ctx);
	else if (n > RULES_FILE_MAX)
		rc = reject_file(filename, "larger than 1 MiB (expected at most 1048576 bytes)",
				 diag, ctx);
	else
		rc = rules_parse(out, buf, (size_t)n, filename, diag, ctx);
	free(buf);
	return rc;
}

static int load_named(struct sdp_rules *out, const char *filename, bool missing_ok,
		      rules_diag_fn diag, void *diag_ctx)
{
	int fd = open(filename, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0 && errno == ENOENT && missing_ok)
		return 0;
	if (fd < 0)
		return reject_errno(filename, "open", errno, diag, diag_ctx);
	int rc = parse_fd(out, fd, filename, diag, diag_ctx);
	close(fd);
	return rc;
}

/* A file that cannot be read fails closed as a bad line does: the admin
 * meant some rules, and which of them is unknown. */
int rules_load_file(struct sdp_rules *out, const char *filename, bool missing_ok,
		    rules_diag_fn diag, void *diag_ctx)
{
	int rc;

	if (out == NULL)
		return -1;
	*out = (struct sdp_rules){ NULL, 0, false };
	if (filename == NULL)
		rc = missing_ok ? 0 : reject_file(filename, "no file name", diag, diag_ctx);
	else
		rc = load_named(out, filename, missing_ok, diag, diag_ctx);
	if (rc != 0)
		set_fail_closed(out);
	return rc;
}

void rules_free(struct sdp_rules *rules)
{
	if (rules == NULL)
		return;
	free(rules->rule);
	*rules = (struct sdp_rules){ NULL, 0, false };
}
