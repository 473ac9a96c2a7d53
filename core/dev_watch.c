/* Watches the kernel's uevents for an RDMA device that goes away (or comes
 * back: core/climb.c and the listeners try again at once).  A
 * process with no rdma_cm id on the device when it goes gets no
 * DEVICE_REMOVAL (its connections ended before, or the peer's disconnect
 * tore its link down first), yet holds the device until it lets go: the
 * verbs file's removal makes core/dev.c look at the kernel's device list. */
#include <errno.h>
#include <linux/netlink.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "base/thread.h"
#include "core/conn_internal.h" /* cm_server_device_added, climb_device_added */
#include "core/dev.h"
#include "core/progress.h"
#include "core/uevent.h"

#define UEVENT_GROUP_KERNEL 1u
#define UEVENT_MSG_MAX 8192
#define INHERITED_WATCH_STACK (128u << 10)

static int uevent_fd = -1;
static struct progress_source uevent_src;
static int inherited_fd = -1; /* a forked child's own watch (dev_watch_inherited_start) */

/* One message, from the kernel only (a forged one could at most make us
 * look at the device list, but there is no reason to read it).  -1 when
 * none is left. */
static int read_one(int fd, char *buf, size_t size, bool *from_kernel)
{
	struct sockaddr_nl from;
	struct iovec iov = { buf, size };
	struct msghdr msg = { .msg_name = &from, .msg_namelen = sizeof(from),
			      .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n = real.recvmsg(fd, &msg, MSG_DONTWAIT);

	if (n < 0)
		return errno == ENOBUFS ? 0 : -1; /* overflowed: something was lost, look */
	*from_kernel = msg.msg_namelen == sizeof(from) && from.nl_pid == 0 &&
		       !(msg.msg_flags & MSG_TRUNC);
	return (int)n;
}

/* Reads every queued message of fd: did one say an RDMA device went (or
 * were some lost)?  *added: did one say a device came (NULL: not asked). */
static bool removal_seen_added(int fd, char *buf, size_t size, bool *added)
{
	bool look = false, from_kernel = false;
	int n;

	while ((n = read_one(fd, buf, size, &from_kernel)) >= 0) {
		if (n > 0 && added && from_kernel && uevent_is_rdma_addition(buf, (size_t)n))
			*added = true;
		if (n == 0)
			look = true;
		else if (from_kernel && uevent_is_rdma_removal(buf, (size_t)n))
			look = true;
	}
	return look;
}

static bool removal_seen(int fd, char *buf, size_t size)
{
	return removal_seen_added(fd, buf, size, NULL);
}

/* A device that came back: listeners listen again, held streams climb,
 * at once rather than at their next backoff. */
static void on_uevents(struct progress_source *src, uint32_t events)
{
	static char buf[UEVENT_MSG_MAX];
	bool added = false;

	(void)src;
	(void)events;
	if (removal_seen_added(uevent_fd, buf, sizeof(buf), &added))
		dev_check_listed();
	if (added) {
		cm_server_device_added();
		climb_device_added();
	}
}

/* A non-blocking uevent socket (hidden), or -1. */
static int open_uevents(void)
{
	struct sockaddr_nl addr = { .nl_family = AF_NETLINK, .nl_groups = UEVENT_GROUP_KERNEL };
	int fd = real.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			     NETLINK_KOBJECT_UEVENT);

	if (fd < 0 || real.bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		sdp_info("no uevents (%s): a device removed while this process has no "
			 "connection on it is held until the process exits", strerror(errno));
		if (fd >= 0)
			real.close(fd);
		return -1;
	}
	return progress_hide_fd(fd);
}

void dev_watch_start(void)
{
	int fd;

	if (uevent_fd >= 0)
		return;
	fd = open_uevents();
	if (fd < 0)
		return;
	uevent_src.on_ready = on_uevents;
	if (progress_watch(fd, EPOLLIN, &uevent_src) != 0) {
		progress_close_hidden(fd);
		return;
	}
	uevent_fd = fd;
}

void dev_watch_atfork_child(void)
{
	/* The parent's sockets: the child reads its own (the next record). */
	progress_close_hidden(uevent_fd);
	uevent_fd = -1;
	progress_close_hidden(inherited_fd);
	inherited_fd = -1;
}

/* Not the progress thread: in a forked child it would run the deferred
 * work of objects that are the parent's (a stream's teardown on its link). */
static void *inherited_watch_main(void *arg)
{
	static char buf[UEVENT_MSG_MAX];
	struct pollfd p = { .fd = inherited_fd, .events = POLLIN };

	(void)arg;
	for (;;) {
		if (real.poll(&p, 1, -1) < 0 && errno != EINTR)
			return NULL;
		if (p.revents & POLLNVAL)
			return NULL; /* closed behind the hooks (a raw close_range): never spin */
		if (removal_seen(p.fd, buf, sizeof(buf)))
			dev_release_inherited_gone();
	}
}

void dev_watch_inherited_start(void)
{
	int err;

	inherited_fd = open_uevents();
	if (inherited_fd < 0)
		return;
	/* its buffer is static */
	err = lib_thread_start(NULL, inherited_watch_main, NULL, false, INHERITED_WATCH_STACK);
	if (err) {
		sdp_info("no watch for a removed device's inherited files: %s", strerror(err));
		progress_close_hidden(inherited_fd);
		inherited_fd = -1;
	}
}
