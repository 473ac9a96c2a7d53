/* Watches the kernel's uevents for an RDMA device that goes away.  A
 * process with no rdma_cm id on the device when it goes gets no
 * DEVICE_REMOVAL (its connections ended before, or the peer's disconnect
 * tore its link down first), yet holds the device until it lets go: the
 * verbs file's removal makes core/dev.c look at the kernel's device list. */
#include <errno.h>
#include <linux/netlink.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "core/dev.h"
#include "core/progress.h"
#include "core/uevent.h"

#define UEVENT_GROUP_KERNEL 1u
#define UEVENT_MSG_MAX 8192

static int uevent_fd = -1;
static struct progress_source uevent_src;

/* One message, from the kernel only (a forged one could at most make us
 * look at the device list, but there is no reason to read it).  -1 when
 * none is left. */
static int read_one(char *buf, size_t size, bool *from_kernel)
{
	struct sockaddr_nl from;
	struct iovec iov = { buf, size };
	struct msghdr msg = { .msg_name = &from, .msg_namelen = sizeof(from),
			      .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n = real.recvmsg(uevent_fd, &msg, MSG_DONTWAIT);

	if (n < 0)
		return errno == ENOBUFS ? 0 : -1; /* overflowed: something was lost, look */
	*from_kernel = msg.msg_namelen == sizeof(from) && from.nl_pid == 0 &&
		       !(msg.msg_flags & MSG_TRUNC);
	return (int)n;
}

static void on_uevents(struct progress_source *src, uint32_t events)
{
	static char buf[UEVENT_MSG_MAX];
	bool look = false, from_kernel = false;
	int n;

	(void)src;
	(void)events;
	while ((n = read_one(buf, sizeof(buf), &from_kernel)) >= 0) {
		if (n == 0)
			look = true;
		else if (from_kernel && uevent_is_rdma_removal(buf, (size_t)n))
			look = true;
	}
	if (look)
		dev_check_listed();
}

void dev_watch_start(void)
{
	struct sockaddr_nl addr = { .nl_family = AF_NETLINK, .nl_groups = UEVENT_GROUP_KERNEL };
	int fd;

	if (uevent_fd >= 0)
		return;
	fd = real.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
			 NETLINK_KOBJECT_UEVENT);
	if (fd < 0 || real.bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		sdp_info("no uevents (%s): a device removed while this process has no "
			 "connection on it is held until the process exits", strerror(errno));
		if (fd >= 0)
			real.close(fd);
		return;
	}
	fd = progress_hide_fd(fd);
	uevent_src.on_ready = on_uevents;
	if (progress_watch(fd, EPOLLIN, &uevent_src) != 0) {
		progress_close_hidden(fd);
		return;
	}
	uevent_fd = fd;
}

void dev_watch_atfork_child(void)
{
	/* The parent's socket: the child reads its own (the next record). */
	progress_close_hidden(uevent_fd);
	uevent_fd = -1;
}
