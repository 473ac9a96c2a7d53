/* Process start-up and shutdown of the preload: resolve libc, read config,
 * size the fd table, adopt inherited sockets, register fork handlers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"
#include "core/progress.h"
#include "ipoib_fallback/path.h"
#include "preload/fdtable.h"
#include "preload/init.h"
#include "preload/procs.h" /* proc_atfork_*() */
#include "preload/real.h"
#include "preload/sock.h"

volatile bool sdp_ready;
__thread int sdp_in_lib;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static __thread bool initialising;

/* An inherited AF_INET/AF_INET6 stream socket (exec, inetd, systemd). */
static void adopt_inherited_fd(int fd)
{
	int domain = 0, type = 0, listening = 0, flags;
	socklen_t len = sizeof(int);
	struct sdp_sock *s;

	if (real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    (domain != AF_INET && domain != AF_INET6))
		return;
	len = sizeof(int);
	if (real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
		return;
	len = sizeof(int);
	real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
	flags = real.fcntl(fd, F_GETFL);
	s = sock_track(fd, domain, flags >= 0 && (flags & O_NONBLOCK));
	if (!s)
		return;
	sock_note_addresses(s, fd);
	if (listening) {
		sock_set_role(s, STATS_ROLE_LISTENER);
		atomic_store(&s->mode, SOCK_MODE_LISTEN);
		s->st->path = SDP_PATH_TCP;
		s->st->reason = SDP_REASON_INHERITED;
		return;
	}
	sock_set_role(s, s->st->remote.family ? STATS_ROLE_SERVER : STATS_ROLE_NONE);
	sock_set_tcp(s, SDP_REASON_INHERITED, false);
}

static void adopt_inherited_sockets(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	int self;

	if (!dir)
		return;
	self = dirfd(dir);
	while ((de = readdir(dir)) != NULL) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || de->d_name[0] == '.' || fd == self || fd < 0)
			continue;
		adopt_inherited_fd((int)fd);
	}
	closedir(dir);
}

/* Normal exit: RDMA-backed sockets still open end like TCP sockets do at
 * exit (their queued bytes go out, then DisConn), bounded by the linger
 * tunable; then the progress thread parks so no library destructor races
 * with it. */
static void at_exit_flush(void)
{
	sock_close_all_rdma(); /* first: channels stop using the stats slots */
	sock_flush_all_stats();
	progress_quiesce_for_exit(sdp_tun.linger_ms < 5000 ? sdp_tun.linger_ms : 5000);
}

static void init_once_fn(void)
{
	initialising = true;
	real_resolve();
	sdp_log_init_from_env();
	tunables_load_env();
	if (fdt_init(0) != 0)
		sdp_warn("cannot allocate the fd table; every socket stays untracked TCP");
	path_init();
	adopt_inherited_sockets();
	pthread_atfork(proc_atfork_prepare, proc_atfork_parent, proc_atfork_child);
	atexit(at_exit_flush);
	sdp_ready = true;
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
