/* `sdpshim doctor [ADDR]`: a readable report on the library `run` preloads,
 * RDMA devices, RLIMIT_MEMLOCK, the config file, and which path a connection
 * to ADDR would take and why. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "base/config.h"
#include "base/log.h"
#include "base/pin_budget.h"
#include "base/reason.h"
#include "core/conn.h" /* conn_pinned_bytes_estimate() */
#include "ipoib_fallback/path.h"
#include "ipoib_fallback/rules.h"
#include "tools/cli.h"

#define SYS_IB "/sys/class/infiniband"
#define SYS_NET "/sys/class/net"
#define RDMA_CM_NODE "/dev/infiniband/rdma_cm"
#define DEFAULT_CONFIG "/etc/sdpshim.conf"
#define ARPHRD_INFINIBAND_TYPE 32
#define LOW_MEMLOCK_CONNS 64
#define MAX_NAMES 16
#define NAME_LEN 64 /* fits netdev names and RDMA device names */

extern char **environ;

/* A small set of interface or device names, without duplicates. */
struct name_set {
	char name[MAX_NAMES][NAME_LEN];
	int count;
};

static void name_set_add(struct name_set *set, const char *name)
{
	if (!*name || set->count == MAX_NAMES)
		return;
	for (int i = 0; i < set->count; i++)
		if (strcmp(set->name[i], name) == 0)
			return;
	snprintf(set->name[set->count++], sizeof(set->name[0]), "%s", name);
}

static void name_set_print(const struct name_set *set, const char *none)
{
	if (set->count == 0)
		printf("%s", none);
	for (int i = 0; i < set->count; i++)
		printf("%s%s", i ? ", " : "", set->name[i]);
}

/* First line of a sysfs file, without the newline. */
static bool read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	bool ok;

	if (!f)
		return false;
	ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

static const char *human_bytes(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double x = (double)v;
	size_t u = 0;

	while (x >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		x /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", v);
	else
		snprintf(buf, len, "%.1f %s", x, units[u]);
	return buf;
}

/* ---- the library ---------------------------------------------------------- */

/* The libsdpshim.so that `sdpshim run` would preload, resolved (no "..",
 * no symbolic link) when it exists. */
static void report_library(void)
{
	char lib[PATH_MAX], real[PATH_MAX];
	const char *how;

	printf("Library:\n");
	if (find_library(lib, sizeof(lib), &how) != 0)
		printf("  libsdpshim.so: not found (tried %s; set SDPSHIM_LIB): "
		       "sdpshim run cannot start a program\n", lib);
	else
		printf("  libsdpshim.so: %s (%s)\n", realpath(lib, real) ? real : lib, how);
	printf("\n");
}

/* ---- RDMA devices --------------------------------------------------------- */

static const char *port_state_name(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_NOP:          return "NOP";
	case IBV_PORT_DOWN:         return "DOWN";
	case IBV_PORT_INIT:         return "INIT";
	case IBV_PORT_ARMED:        return "ARMED";
	case IBV_PORT_ACTIVE:       return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
	}
	return "UNKNOWN";
}

/* Physical port states as numbered by the InfiniBand specification. */
static const char *phys_state_name(uint8_t s)
{
	static const char *const names[] = { "no state change", "Sleep", "Polling", "Disabled",
		"PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "PhyTest" };

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

static const char *link_layer_name(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_ETHERNET:    return "Ethernet (RoCE)";
	case IBV_LINK_LAYER_INFINIBAND:  return "InfiniBand";
	case IBV_LINK_LAYER_UNSPECIFIED: return "unspecified (InfiniBand)";
	}
	return "unknown";
}

static unsigned mtu_bytes(enum ibv_mtu mtu)
{
	return (mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096) ? 128u << mtu : 0;
}

/* The netdevs named by a port's GID table (RoCE, rxe, siw). */
static void port_netdevs(const char *dev, unsigned port, struct name_set *out)
{
	char dir[PATH_MAX], file[PATH_MAX + 256], name[NAME_LEN];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), SYS_IB "/%s/ports/%u/gid_attrs/ndevs", dev, port);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s", dir, de->d_name);
		if (read_line(file, name, sizeof(name)))
			name_set_add(out, name);
	}
	closedir(d);
}

/* Netdevs of the same PCI function (IPoIB interfaces have no GID netdev). */
static void device_netdevs(const char *dev, struct name_set *out)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), SYS_IB "/%s/device/net", dev);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			name_set_add(out, de->d_name);
	closedir(d);
}

static void print_port(struct ibv_context *ctx, const char *dev, uint8_t port)
{
	struct ibv_port_attr attr;
	struct name_set nd = { .count = 0 };

	if (ibv_query_port(ctx, port, &attr) != 0) {
		printf("    port %u: cannot query: %s\n", port, strerror(errno));
		return;
	}
	printf("    port %u: state %s, physical %s, link layer %s, active MTU %u\n", port,
	       port_state_name(attr.state), phys_state_name(attr.phys_state),
	       link_layer_name(attr.link_layer), mtu_bytes(attr.active_mtu));
	port_netdevs(dev, port, &nd);
	if (nd.count == 0)
		device_netdevs(dev, &nd);
	printf("      netdev: ");
	name_set_print(&nd, "none found in sysfs");
	printf("\n");
	if (attr.state != IBV_PORT_ACTIVE)
		printf("      note: the port is not ACTIVE, so RDMA connections through it fail\n");
}

static void print_guid(__be64 guid_be)
{
	uint64_t g = be64toh(guid_be);

	printf("%04x:%04x:%04x:%04x", (unsigned)(g >> 48) & 0xffff, (unsigned)(g >> 32) & 0xffff,
	       (unsigned)(g >> 16) & 0xffff, (unsigned)g & 0xffff);
}

static void print_device(struct ibv_device *dev)
{
	const char *name = ibv_get_device_name(dev);
	struct ibv_device_attr attr;
	struct ibv_context *ctx;
	char mr_size[32];

	printf("  %s: node GUID ", name);
	print_guid(ibv_get_device_guid(dev));
	printf("\n");
	ctx = ibv_open_device(dev);
	if (!ctx) {
		printf("    cannot open: %s (permissions on /dev/infiniband/uverbs*?)\n",
		       strerror(errno));
		return;
	}
	if (ibv_query_device(ctx, &attr) != 0) {
		printf("    cannot query: %s\n", strerror(errno));
	} else {
		printf("    firmware %s, %u port(s), max QPs %d, max MR size %s\n", attr.fw_ver,
		       attr.phys_port_cnt, attr.max_qp,
		       human_bytes(attr.max_mr_size, mr_size, sizeof(mr_size)));
		for (uint8_t p = 1; p <= attr.phys_port_cnt; p++)
			print_port(ctx, name, p);
	}
	ibv_close_device(ctx);
}

static void print_sysfs_devices_hint(void)
{
	struct name_set seen = { .count = 0 };
	struct dirent *de;
	DIR *d = opendir(SYS_IB);

	if (!d)
		return;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			name_set_add(&seen, de->d_name);
	closedir(d);
	if (seen.count == 0)
		return;
	printf("  but " SYS_IB " lists ");
	name_set_print(&seen, "");
	printf(": is the rdma-core provider library for it installed?\n");
}

static void print_rdma_cm_node(void)
{
	printf("  " RDMA_CM_NODE ": ");
	if (access(RDMA_CM_NODE, F_OK) != 0)
		printf("missing (load the rdma_ucm module)\n");
	else if (access(RDMA_CM_NODE, R_OK | W_OK) != 0)
		printf("present but not accessible to uid %u: %s\n", (unsigned)getuid(),
		       strerror(errno));
	else
		printf("present and accessible\n");
}

static void report_devices(void)
{
	int count = 0;
	struct ibv_device **list = ibv_get_device_list(&count);

	printf("RDMA devices:\n");
	if (!list || count == 0) {
		printf("  no RDMA device: every connection will use kernel TCP, reason %s\n",
		       sdp_reason_name(SDP_REASON_NO_DEVICE));
		print_sysfs_devices_hint();
	}
	for (int i = 0; list && i < count; i++)
		print_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	print_rdma_cm_node();
	printf("\n");
}

/* ---- memory locking ------------------------------------------------------- */

static const char *rlim_text(rlim_t v, char *buf, size_t len)
{
	char human[32];

	if (v == RLIM_INFINITY)
		return "unlimited";
	snprintf(buf, len, "%s (%llu)", human_bytes((uint64_t)v, human, sizeof(human)),
		 (unsigned long long)v);
	return buf;
}

static void print_memlock_advice(void)
{
	printf("  advice: raise the limit where the program starts:\n"
	       "    shell:   ulimit -l unlimited\n"
	       "    systemd: LimitMEMLOCK=infinity in the [Service] section\n"
	       "    PAM:     '<user> - memlock unlimited' in /etc/security/limits.conf\n");
}

/* What RLIMIT_MEMLOCK and the pinned-memory budget allow, with what
 * today's per-connection channels really register (core/geometry.c: every
 * registration in whole pages, the control slots and the spare send slot
 * included), and with links (docs/links.md): a link pins the same
 * whatever number of streams it carries. */
static void report_links(uint64_t per_conn)
{
	uint64_t per_link = link_pinned_bytes_estimate(), soft, links;
	char human[32];

	printf("  links (SDPSHIM_LINKS=%u): one link pins %s (%" PRIu64 " bytes) and carries up to "
	       "%u connections to one server\n", sdp_tun.links,
	       human_bytes(per_link, human, sizeof(human)), per_link, sdp_tun.link_streams);
	if (!pin_memlock_binds(&soft)) {
		printf("  RLIMIT_MEMLOCK allows unlimited links\n");
		return;
	}
	links = soft / per_link;
	if (links > sdp_tun.link_max)
		links = sdp_tun.link_max;
	printf("  RLIMIT_MEMLOCK allows %" PRIu64 " links: %" PRIu64 " connections to one server "
	       "with links (%" PRIu64 " with per-connection channels)\n", links,
	       links * sdp_tun.link_streams, soft / per_conn);
}

static void report_pin_budget(void)
{
	uint64_t per_conn = conn_pinned_bytes_estimate(), soft, budget, set;
	bool from_env = tunable_parse_size(getenv("SDPSHIM_PIN_BUDGET"), SDP_PIN_BUDGET_MAX, &set);
	char human[32], requested[32];

	printf("  per-connection channels: one connection pins %s (%" PRIu64 " bytes: its buffers, "
	       "control slots and spare send slot, in whole pages)\n",
	       human_bytes(per_conn, human, sizeof(human)), per_conn);
	if (pin_memlock_binds(&soft))
		printf("  RLIMIT_MEMLOCK allows %" PRIu64 " connections with per-connection channels\n",
		       soft / per_conn);
	else
		printf("  RLIMIT_MEMLOCK allows unlimited connections with per-connection channels "
		       "(%s)\n", pin_has_cap_ipc_lock() ? "CAP_IPC_LOCK" : "no limit");
	report_links(per_conn);
	pin_budget_init();
	budget = pin_budget_limit();
	human_bytes(sdp_tun.pin_budget, requested, sizeof(requested));
	printf("  pin budget: %s (%" PRIu64 " bytes; %s %s%s), %" PRIu64 " links or %" PRIu64
	       " connections with per-connection channels; past it new connections use TCP, "
	       "reason %s\n",
	       human_bytes(budget, human, sizeof(human)), budget,
	       from_env ? "SDPSHIM_PIN_BUDGET" : "the default", requested,
	       pin_budget_capped() ? ", capped at the soft RLIMIT_MEMLOCK" : "",
	       budget / link_pinned_bytes_estimate(), budget / per_conn,
	       sdp_reason_name(SDP_REASON_RESOURCES));
}

static void report_memlock(void)
{
	uint64_t per_conn = 2ull * sdp_tun.buf_size * sdp_tun.buf_count;
	bool cap = pin_has_cap_ipc_lock();
	char soft[64], hard[64], human[32];
	struct rlimit rl;

	printf("Memory locking:\n");
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
		printf("  RLIMIT_MEMLOCK: cannot read: %s\n\n", strerror(errno));
		return;
	}
	printf("  RLIMIT_MEMLOCK: soft %s, hard %s\n", rlim_text(rl.rlim_cur, soft, sizeof(soft)),
	       rlim_text(rl.rlim_max, hard, sizeof(hard)));
	printf("  CAP_IPC_LOCK: %s\n", cap ? "held (the limit does not apply)" : "not held");
	printf("  one RDMA connection pins %s (2 x SDPSHIM_BUF_SIZE %u x SDPSHIM_BUF_COUNT %u)\n",
	       human_bytes(per_conn, human, sizeof(human)), sdp_tun.buf_size, sdp_tun.buf_count);
	if (cap || rl.rlim_cur == RLIM_INFINITY) {
		printf("  connections per process: not limited by memlock\n");
		report_pin_budget();
		printf("\n");
		return;
	}
	uint64_t conns = (uint64_t)rl.rlim_cur / per_conn;
	printf("  connections per process: %llu\n", (unsigned long long)conns);
	if (conns == 0)
		printf("  too low for even one: every connection uses kernel TCP, reason %s\n",
		       sdp_reason_name(SDP_REASON_MEMLOCK));
	else if (conns < LOW_MEMLOCK_CONNS)
		printf("  that is low: further connections cannot register their buffers and "
		       "stay on kernel TCP\n");
	if (conns < LOW_MEMLOCK_CONNS)
		print_memlock_advice();
	report_pin_budget();
	printf("\n");
}

/* ---- config --------------------------------------------------------------- */

static void print_config_diag(void *ctx, const char *msg)
{
	(void)ctx;
	printf("  error: %s\n", msg);
}

static void report_sdpshim_env(void)
{
	int shown = 0;

	printf("  environment:");
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "SDPSHIM_", 8) != 0)
			continue;
		printf("\n    %s", *e);
		shown++;
	}
	printf("%s\n", shown ? "" : " no SDPSHIM_* variable set");
}

static void report_config(void)
{
	const char *env = getenv("SDPSHIM_CONFIG");
	bool explicit_file = env && *env;
	const char *file = explicit_file ? env : DEFAULT_CONFIG;
	struct sdp_rules rules = { NULL, 0, false };

	printf("Config:\n");
	printf("  file: %s (%s)\n", file, explicit_file ? "from SDPSHIM_CONFIG" : "the default");
	if (!explicit_file && access(file, F_OK) != 0 && errno == ENOENT)
		printf("  not present: no rules, every connection may try RDMA\n");
	else if (rules_load_file(&rules, file, !explicit_file, print_config_diag, NULL) != 0)
		printf("  rejected: none of its rules apply, every connection uses TCP "
		       "(reason rule_tcp; fail closed)\n");
	else
		printf("  parses: %zu rule(s)\n", rules.count);
	rules_free(&rules);
	report_sdpshim_env();
	printf("\n");
}

/* ---- the path to ADDR ----------------------------------------------------- */

union any_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
	struct sockaddr_storage ss;
};

static bool parse_port(const char *text, uint16_t *port)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < 0 || v > 65535)
		return false;
	*port = (uint16_t)v;
	return true;
}

/* IPv6 literal, optionally with %scope; getaddrinfo resolves the scope. */
static bool parse_ipv6(const char *host, uint16_t port, union any_addr *out)
{
	struct addrinfo hints = { .ai_family = AF_INET6, .ai_flags = AI_NUMERICHOST };
	struct addrinfo *res;

	if (getaddrinfo(host, NULL, &hints, &res) != 0)
		return false;
	memcpy(&out->in6, res->ai_addr, sizeof(out->in6));
	out->in6.sin6_port = htons(port);
	freeaddrinfo(res);
	return true;
}

static bool parse_ipv4(const char *host, uint16_t port, union any_addr *out)
{
	memset(out, 0, sizeof(*out));
	out->in.sin_family = AF_INET;
	out->in.sin_port = htons(port);
	return inet_pton(AF_INET, host, &out->in.sin_addr) == 1;
}

/* "1.2.3.4", "1.2.3.4:80", "::1", "[::1]", "[::1]:80". */
static bool parse_target(const char *text, union any_addr *out, bool *has_port)
{
	char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
	const char *colon = strchr(text, ':');
	uint16_t port = 0;

	*has_port = false;
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close || (size_t)(close - text - 1) >= sizeof(host))
			return false;
		snprintf(host, sizeof(host), "%.*s", (int)(close - text - 1), text + 1);
		if (close[1] != '\0' && (close[1] != ':' || !parse_port(close + 2, &port)))
			return false;
		*has_port = close[1] != '\0';
		return parse_ipv6(host, port, out);
	}
	if (colon && strchr(colon + 1, ':'))
		return strlen(text) < sizeof(host) && parse_ipv6(text, 0, out);
	if (strlen(text) >= sizeof(host))
		return false;
	snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - text) : (int)strlen(text), text);
	if (colon && !parse_port(colon + 1, &port))
		return false;
	*has_port = colon != NULL;
	return parse_ipv4(host, port, out);
}

static void format_ip(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a = sa->sa_family == AF_INET
		? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;

	if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* The source address the kernel picks for dst (a UDP connect sends nothing). */
static int route_source(const union any_addr *dst, union any_addr *src)
{
	union any_addr probe = *dst;
	socklen_t len = sizeof(*src);
	int fd = socket(dst->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err = 0;

	if (fd < 0)
		return -errno;
	if (probe.sa.sa_family == AF_INET && probe.in.sin_port == 0)
		probe.in.sin_port = htons(9);
	if (probe.sa.sa_family == AF_INET6 && probe.in6.sin6_port == 0)
		probe.in6.sin6_port = htons(9);
	if (connect(fd, &probe.sa, probe.sa.sa_family == AF_INET ? sizeof(probe.in)
								  : sizeof(probe.in6)) != 0 ||
	    getsockname(fd, &src->sa, &len) != 0)
		err = -errno;
	close(fd);
	return err;
}

/* Address bytes, with IPv4-mapped IPv6 seen as IPv4. */
static const uint8_t *addr_bytes(const struct sockaddr *sa, int *family)
{
	if (sa->sa_family == AF_INET) {
		*family = AF_INET;
		return (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
	}
	const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (IN6_IS_ADDR_V4MAPPED(a6)) {
		*family = AF_INET;
		return a6->s6_addr + 12;
	}
	*family = AF_INET6;
	return a6->s6_addr;
}

static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	int fa, fb;
	const uint8_t *xa = addr_bytes(a, &fa), *xb = addr_bytes(b, &fb);

	return fa == fb && memcmp(xa, xb, fa == AF_INET ? 4 : 16) == 0;
}

struct local_if {
	char name[IF_NAMESIZE];
	unsigned flags;
};

/* The interface that holds address ip; false if none does. */
static bool interface_with(const struct sockaddr *ip, struct local_if *out)
{
	struct ifaddrs *all, *i;
	bool found = false;

	if (getifaddrs(&all) != 0)
		return false;
	for (i = all; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
				     i->ifa_addr->sa_family != AF_INET6))
			continue;
		if (!same_ip(i->ifa_addr, ip))
			continue;
		snprintf(out->name, sizeof(out->name), "%s", i->ifa_name);
		out->flags = i->ifa_flags;
		found = true;
	}
	freeifaddrs(all);
	return found;
}

/* The RDMA device and port whose GID table names netdev, if any. */
static bool rdma_port_of_netdev(const char *netdev, char *dev, size_t dev_len, unsigned *port)
{
	struct dirent *de;
	DIR *d = opendir(SYS_IB);
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		for (unsigned p = 1; p <= 8 && !found; p++) {
			struct name_set nd = { .count = 0 };
			port_netdevs(de->d_name, p, &nd);
			for (int k = 0; k < nd.count && !found; k++)
				found = strcmp(nd.name[k], netdev) == 0;
			if (found) {
				snprintf(dev, dev_len, "%s", de->d_name);
				*port = p;
			}
		}
	}
	closedir(d);
	return found;
}

/* The RDMA device under an IPoIB interface's PCI function. */
static bool rdma_device_under_netdev(const char *netdev, char *dev, size_t dev_len)
{
	char dir[PATH_MAX];
	struct dirent *de;
	bool found = false;
	DIR *d;

	snprintf(dir, sizeof(dir), SYS_NET "/%s/device/infiniband", netdev);
	d = opendir(dir);
	if (!d)
		return false;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(dev, dev_len, "%s", de->d_name);
		found = true;
	}
	closedir(d);
	return found;
}

static bool netdev_is_ipoib(const char *netdev)
{
	char path[PATH_MAX], type[32];

	snprintf(path, sizeof(path), SYS_NET "/%s/type", netdev);
	return read_line(path, type, sizeof(type)) && atoi(type) == ARPHRD_INFINIBAND_TYPE;
}

static void describe_interface(const struct local_if *ifc)
{
	char dev[NAME_MAX + 1];
	unsigned port;

	printf("  interface: %s", ifc->name);
	if (ifc->flags & IFF_LOOPBACK) {
		printf(" is loopback: rdma_cm cannot use it, connections stay on kernel TCP "
		       "(reason %s)\n", sdp_reason_name(SDP_REASON_LOOPBACK));
	} else if (netdev_is_ipoib(ifc->name)) {
		printf(" is IPoIB (type %d, ARPHRD_INFINIBAND)", ARPHRD_INFINIBAND_TYPE);
		if (rdma_device_under_netdev(ifc->name, dev, sizeof(dev)))
			printf(" on RDMA device %s", dev);
		printf(": rdma_cm resolves the peer through it\n");
	} else if (rdma_port_of_netdev(ifc->name, dev, sizeof(dev), &port)) {
		printf(" is the netdev of RDMA device %s port %u (RoCE)\n", dev, port);
	} else {
		printf(" has no RDMA device: rdma_cm cannot reach the peer through it\n");
	}
	if (!(ifc->flags & IFF_UP))
		printf("  note: %s is down\n", ifc->name);
}

static void report_route(const union any_addr *dst)
{
	union any_addr src;
	struct local_if ifc;
	char ip[INET6_ADDRSTRLEN];
	int err = route_source(dst, &src);

	if (err) {
		printf("  route: none (%s)\n", strerror(-err));
		return;
	}
	format_ip(&src.sa, ip, sizeof(ip));
	printf("  source address: %s\n", ip);
	if (interface_with(&dst->sa, &ifc) && !(ifc.flags & IFF_LOOPBACK))
		printf("  note: this is an address of this host (on %s)\n", ifc.name);
	if (interface_with(&src.sa, &ifc))
		describe_interface(&ifc);
	else
		printf("  interface: no interface holds %s\n", ip);
}

static void report_verdict(const union any_addr *dst)
{
	int saved_level = sdp_log_level;
	struct path_decision d;

	sdp_log_level = SDP_LOG_ERROR; /* the config section already showed its problems */
	path_init();
	sdp_log_level = saved_level;
	path_decide_client(&dst->sa, &d);
	if (d.try_rdma) {
		printf("  verdict: try RDMA first (connect timeout %u ms, zero-copy from %" PRId64
		       " bytes, %s)%s\n", d.policy.connect_timeout_ms, d.policy.zcopy_thresh,
		       d.policy.climb ? "back to RDMA after a failover" : "stays on TCP after a failover",
		       d.require_rdma ? "; a rule requires RDMA, so there is no TCP fallback"
				      : "; kernel TCP if the peer does not run sdpshim");
		return;
	}
	printf("  verdict: kernel TCP, reason %s (%s)\n", sdp_reason_name(d.reason),
	       sdp_reason_text(d.reason));
	if (d.require_rdma)
		printf("  note: a rule requires RDMA, so this connect would be refused\n");
}

static void report_target(const char *text, const union any_addr *dst, bool has_port)
{
	printf("Path to %s:\n", text);
	if (!has_port)
		printf("  (no port given: rules are matched with port 0)\n");
	printf("  rules are matched for program '%s' (--prog NAME to change)\n", path_progname());
	report_route(dst);
	report_verdict(dst);
}

/* ---- main ----------------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out, "usage: sdpshim doctor [--prog NAME] [ADDR]\n"
		     "  ADDR      IPv4 or IPv6 literal, optionally with a port: 10.0.0.2:6379,\n"
		     "            fe80::1%%ib0, [2001:db8::1]:443\n"
		     "  --prog    program name the config rules are matched against\n");
}

/* Returns 0 to go on, 1 after --help, -1 on bad usage. */
static int parse_args(int argc, char **argv, const char **target)
{
	static const struct option longopts[] = {
		{ "prog", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*target = NULL;
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "+P:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'P': program_invocation_short_name = optarg; break;
		case 'h': return 1;
		default:
			fprintf(stderr, "sdpshim doctor: bad option '%s'\n", argv[optind - 1]);
			return -1;
		}
	}
	if (argc - optind > 1) {
		fprintf(stderr, "sdpshim doctor: one ADDR at most\n");
		return -1;
	}
	*target = optind < argc ? argv[optind] : NULL;
	return 0;
}

int doctor_main(int argc, char **argv)
{
	const char *target;
	union any_addr dst;
	bool has_port = false;
	int rc = parse_args(argc, argv, &target);

	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	if (target && !parse_target(target, &dst, &has_port)) {
		fprintf(stderr, "sdpshim doctor: '%s' is not an IPv4 or IPv6 address "
				"(forms: 10.0.0.2, 10.0.0.2:80, fe80::1%%ib0, [::1]:80)\n", target);
		return 2;
	}
	tunables_load_env();
	report_library();
	report_devices();
	report_memlock();
	report_config();
	if (target)
		report_target(target, &dst, has_port);
	fflush(stdout);
	return 0;
}
