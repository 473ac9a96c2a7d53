/* Process start-up and shutdown of the preload: resolve libc, read config,
 * size the fd table, adopt inherited sockets, register fork handlers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/config.h"
#include "base/fdtable.h"
#include "base/log.h"
#include "base/pin_budget.h" /* pin_budget_init() */
#include "base/real.h"
#include "core/progress.h"
#include "ipoib_fallback/path.h"
#include "preload/exit_flush.h"
#include "preload/gate.h"
#include "preload/init.h"
#include "preload/procs.h" /* proc_atfork_*() */
#include "preload/sock.h"

volatile bool sdp_ready;
/* Closed until initialisation has finished (preload/gate.h). */
_Atomic int sdp_gates[GATE_COUNT] = { [0 ... GATE_COUNT - 1] = 1 };
/* A gate's count moves between zero and one, with its route, only under
 * this lock (the innermost of the library); other changes are one
 * compare-and-swap, so sockets coming and going while others live never
 * meet the lock. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;

/* Adds delta to g's count without the lock unless that would move it
 * between zero and one.  Returns false if the lock is needed. */
static bool gate_add_unlocked(enum sdp_gate g, int delta)
{
	int n = atomic_load_explicit(&sdp_gates[g], memory_order_relaxed);

	while (delta > 0 ? n > 0 : n > 1)
		if (atomic_compare_exchange_weak_explicit(&sdp_gates[g], &n, n + delta,
							  memory_order_acq_rel, memory_order_relaxed))
			return true;
	return false;
}

/* The same under the lock, switching the route when the count leaves or
 * reaches zero.  Only this lock's holders move a count off zero (an unlocked
 * hold needs a count above it), so a gate that is closing has its route on
 * the slow path before its count reads one: no hold that follows, unlocked,
 * returns while the route still leads to libc.  An opening gate's route
 * leads to libc only after its count is zero. */
static void gate_add_locked(enum sdp_gate g, int delta)
{
	pthread_mutex_lock(&gate_lock);
	for (;;) {
		int n = atomic_load_explicit(&sdp_gates[g], memory_order_acquire);

		if (delta > 0 && n == 0) {
			gate_route(g, false);
			atomic_fetch_add_explicit(&sdp_gates[g], 1, memory_order_acq_rel);
			break;
		}
		if (delta < 0 && n == 1) {
			/* An unlocked hold may take it to two meanwhile: look again. */
			if (atomic_compare_exchange_strong_explicit(&sdp_gates[g], &n, 0,
								    memory_order_acq_rel,
								    memory_order_relaxed)) {
				gate_route(g, true);
				break;
			}
			continue;
		}
		if (gate_add_unlocked(g, delta))
			break;
	}
	pthread_mutex_unlock(&gate_lock);
}

void gate_hold(enum sdp_gate g)
{
	if (!gate_add_unlocked(g, 1))
		gate_add_locked(g, 1);
}

void gate_release(enum sdp_gate g)
{
	if (!gate_add_unlocked(g, -1))
		gate_add_locked(g, -1);
}

void gate_init_done(void)
{
	for (int g = 0; g < GATE_COUNT; g++)
		gate_release((enum sdp_gate)g);
}

void gate_atfork_prepare(void)
{
	pthread_mutex_lock(&gate_lock);
}

void gate_atfork_after(void)
{
	pthread_mutex_unlock(&gate_lock);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static __thread bool initialising;

struct adopted {
	dev_t dev;
	ino_t ino;
	struct sdp_sock *sock;
};

/* The socket already adopted under another fd (inetd: stdin and stdout). */
static struct sdp_sock *already_adopted(const struct stat *st, const struct adopted *seen, int n)
{
	for (int i = 0; i < n; i++)
		if (seen[i].dev == st->st_dev && seen[i].ino == st->st_ino)
			return seen[i].sock;
	return NULL;
}

/* Who connected is not recorded by the kernel: a local port in the
 * ephemeral range (and a remote one outside it) means we were the client. */
static enum stats_role guess_role(const struct sdp_sock *s)
{
	int lo = 32768, hi = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");

	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2) {
			lo = 32768;
			hi = 60999;
		}
		fclose(f);
	}
	if (!s->st->remote.family)
		return STATS_ROLE_NONE;
	bool local_eph = s->st->local.port >= lo && s->st->local.port <= hi;
	bool remote_eph = s->st->remote.port >= lo && s->st->remote.port <= hi;
	return local_eph && !remote_eph ? STATS_ROLE_CLIENT : STATS_ROLE_SERVER;
}

/* An inherited AF_INET/AF_INET6 stream socket (exec, inetd, systemd). */
static void adopt_inherited_fd(int fd, struct adopted *seen, int *nseen, int max_seen)
{
	int domain = 0, type = 0, listening = 0, flags;
	socklen_t len = sizeof(int);
	struct sdp_sock *s;
	struct stat st;

	if (real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    (domain != AF_INET && domain != AF_INET6))
		return;
	len = sizeof(int);
	if (real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
		return;
	if (fstat(fd, &st) == 0 && (s = already_adopted(&st, seen, *nseen)) != NULL) {
		sock_add_fd(s, fd);
		return;
	}
	len = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
	flags = real.fcntl(fd, F_GETFL);
	s = sock_track(fd, domain, flags >= 0 && (flags & O_NONBLOCK));
	if (!s)
		return;
	if (*nseen < max_seen)
		seen[(*nseen)++] = (struct adopted){ st.st_dev, st.st_ino, s };
	sock_note_addresses(s, fd);
	if (listening) {
		sock_set_role(s, STATS_ROLE_LISTENER);
		sock_set_mode(s, SOCK_MODE_LISTEN);
		s->st->path = SDP_PATH_TCP;
		s->st->reason = SDP_REASON_INHERITED;
		return;
	}
	sock_set_role(s, guess_role(s));
	sock_set_tcp(s, SDP_REASON_INHERITED, false);
}

static void adopt_inherited_sockets(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct adopted seen[64];
	struct dirent *de;
	int self, nseen = 0;

	if (!dir)
		return;
	self = dirfd(dir);
	while ((de = readdir(dir)) != NULL) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || de->d_name[0] == '.' || fd == self || fd < 0)
			continue;
		adopt_inherited_fd((int)fd, seen, &nseen, 64);
	}
	closedir(dir);
}

static void init_once_fn(void)
{
	initialising = true;
	real_resolve();
	mem_hooks_init();
	sdp_log_init_from_env();
	tunables_load_env();
	pin_budget_init();
	if (fdt_init(0) != 0)
		sdp_warn("cannot allocate the fd table; every socket stays untracked TCP");
	path_init();
	adopt_inherited_sockets();
	pthread_atfork(proc_atfork_prepare, proc_atfork_parent, proc_atfork_child);
	atexit(exit_flush_at_exit); /* RDMA sockets end as TCP ones do at exit */
	sdp_ready = true;
	gate_init_done();
	initialising = false;
}

void sdp_init_slow(void)
{
	if (initialising) {
		/* Re-entered from our own init: libc must be usable already. */
		if (!real.read)
			real_resolve();
		return;
	}
	SDP_GUARD_ENTER();
	pthread_once(&init_once, init_once_fn);
	SDP_GUARD_LEAVE();
}

__attribute__((constructor)) static void sdp_constructor(void)
{
	sdp_ensure_init();
}
