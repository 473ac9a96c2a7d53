/* Path choice: every reason a connection stays on kernel TCP is decided
 * here, before any RDMA resource is touched. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/pin_budget.h" /* pin_memlock_binds() */
#include "ipoib_fallback/negcache.h"
#include "ipoib_fallback/path.h"

#define DEFAULT_CONFIG_PATH "/etc/sdpshim.conf"
#define NEGCACHE_MAX_ENTRIES 4096
#define DEVICE_RECHECK_MS 2000

static struct sdp_rules path_rules;
static enum rule_use path_mode = RULE_USE_BOTH;
static struct negcache *path_negcache;

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void config_diag(void *ctx, const char *msg)
{
	(void)ctx;
	sdp_warn("%s", msg);
}

static void load_mode(void)
{
	const char *mode = getenv("SDPSHIM_MODE");

	if (!mode || !*mode || strcmp(mode, "both") == 0)
		path_mode = RULE_USE_BOTH;
	else if (strcmp(mode, "tcp") == 0)
		path_mode = RULE_USE_TCP;
	else if (strcmp(mode, "rdma") == 0)
		path_mode = RULE_USE_RDMA;
	else
		sdp_warn("SDPSHIM_MODE='%.32s' is not rdma|tcp|both; using both", mode);
}

void path_init(void)
{
	const char *file = getenv("SDPSHIM_CONFIG");
	bool explicit_file = file && *file;

	load_mode();
	rules_load_file(&path_rules, explicit_file ? file : DEFAULT_CONFIG_PATH,
			!explicit_file, config_diag, NULL);
	path_negcache = negcache_new(sdp_tun.negcache_ttl_ms, NEGCACHE_MAX_ENTRIES);
}

void path_atfork_child(void)
{
	/* The parent's cache lock may have been held at fork: start empty. */
	path_negcache = negcache_new(sdp_tun.negcache_ttl_ms, NEGCACHE_MAX_ENTRIES);
}

const char *path_progname(void)
{
	return program_invocation_short_name;
}

bool sockaddr_is_inet(const struct sockaddr *sa, socklen_t len)
{
	if (!sa)
		return false;
	if (sa->sa_family == AF_INET)
		return len >= sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET6)
		return len >= sizeof(struct sockaddr_in6);
	return false;
}

bool sockaddr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
	}
	return false;
}

static bool sysfs_has_rdma_device(void)
{
	/* Any entry in /sys/class/infiniband is an RDMA device (IB, RoCE, rxe, iWARP). */
	static const char *const probe_dirs[] = { "/sys/class/infiniband" };
	char buf[512];
	int fd = (int)syscall(SYS_openat, AT_FDCWD, probe_dirs[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool found = false;
	long n;

	if (fd < 0)
		return false;
	while (!found && (n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			const char *name = buf + off + 19; /* d_name after ino, off, reclen, type */
			unsigned short reclen;

			memcpy(&reclen, buf + off + 16, sizeof(reclen));
			if (name[0] != '.') {
				found = true;
				break;
			}
			off += reclen;
		}
	}
	syscall(SYS_close, fd);
	return found;
}

static bool device_present_at(uint64_t now)
{
	static _Atomic uint64_t checked_at;
	static _Atomic int present;
	uint64_t last = checked_at;

	if (last && now - last < DEVICE_RECHECK_MS)
		return present;
	present = access("/dev/infiniband/rdma_cm", R_OK | W_OK) == 0 && sysfs_has_rdma_device();
	checked_at = now ? now : 1;
	return present;
}

bool path_rdma_device_present(void)
{
	return device_present_at(mono_ms());
}

/* The memlock limit as of DEVICE_RECHECK_MS ago at most: two system calls
 * (getrlimit, capget) per connection otherwise.  A limit lowered since then
 * shows as the registration's own failure (reason memlock). */
static bool memlock_allows_at(uint64_t now, uint64_t bytes)
{
	static _Atomic uint64_t checked_at;
	static _Atomic uint64_t soft_limit; /* UINT64_MAX: the limit does not bind */
	uint64_t last = checked_at, soft;

	if (!last || now - last >= DEVICE_RECHECK_MS) {
		soft_limit = pin_memlock_binds(&soft) ? soft : UINT64_MAX;
		checked_at = now ? now : 1;
	}
	return soft_limit >= bytes;
}


static void decision_init(struct path_decision *out)
{
	memset(out, 0, sizeof(*out));
	out->reason = SDP_REASON_NONE;
	policy_default(&out->policy);
}

static bool decide_by_rules(enum rule_role role, const struct sockaddr *sa,
			    struct path_decision *out)
{
	const struct sdp_rule *rule = rules_match(&path_rules, role, path_progname(), sa);
	enum rule_use use = path_mode;

	if (rule) {
		if (rule->zcopy_thresh >= 0)
			out->policy.zcopy_thresh = rule->zcopy_thresh;
		if (rule->connect_timeout_ms > 0)
			out->policy.connect_timeout_ms = (unsigned)rule->connect_timeout_ms;
		if (rule->climb >= 0)
			out->policy.climb = rule->climb != 0;
		out->policy.client_net_count = rule->client_net_count; /* server rules only */
		memcpy(out->policy.client_nets, rule->client_nets, sizeof(out->policy.client_nets));
		if (path_mode == RULE_USE_BOTH)
			use = rule->use;
	}
	out->require_rdma = use == RULE_USE_RDMA;
	if (use == RULE_USE_TCP) {
		out->reason = SDP_REASON_RULE_TCP;
		return false;
	}
	return true;
}

static uint64_t pinned_bytes_per_conn(void)
{
	/* Receive buffers plus the mirrored send buffers. */
	return 2ull * sdp_tun.buf_size * sdp_tun.buf_count;
}

static bool decide_by_host(const struct sockaddr *sa, uint64_t now, struct path_decision *out)
{
	if (sockaddr_is_loopback(sa)) {
		out->reason = SDP_REASON_LOOPBACK;
		return false;
	}
	if (!device_present_at(now)) {
		out->reason = SDP_REASON_NO_DEVICE;
		return false;
	}
	if (!memlock_allows_at(now, pinned_bytes_per_conn())) {
		static _Atomic int warned;
		if (!warned++)
			sdp_warn("RLIMIT_MEMLOCK is below the %llu bytes one connection pins; "
				 "using TCP (raise it with ulimit -l or LimitMEMLOCK=)",
				 (unsigned long long)pinned_bytes_per_conn());
		out->reason = SDP_REASON_MEMLOCK;
		return false;
	}
	return true;
}

void path_decide_client(const struct sockaddr *dst, struct path_decision *out)
{
	enum sdp_reason cached;
	uint64_t now = mono_ms();

	decision_init(out);
	if (!decide_by_rules(RULE_ROLE_CLIENT, dst, out) || !decide_by_host(dst, now, out))
		return;
	if (path_negcache && negcache_lookup(path_negcache, dst, now, &cached)) {
		out->reason = cached;
		out->negcached = true;
		return;
	}
	out->try_rdma = true;
}

void path_decide_server(const struct sockaddr *local, struct path_decision *out)
{
	decision_init(out);
	if (!decide_by_rules(RULE_ROLE_SERVER, local, out) || !decide_by_host(local, mono_ms(), out))
		return;
	out->try_rdma = true;
}

void path_remember_failure(const struct sockaddr *dst, enum sdp_reason reason)
{
	if (path_negcache && sdp_tun.negcache_ttl_ms)
		negcache_insert(path_negcache, dst, reason, mono_ms());
}
