/* evecho: an event-loop echo server for the test suites, in the shape of
 * the servers a peer that never answers could freeze: one thread, epoll,
 * non-blocking sockets, many clients.
 *
 *   evecho -s PORT [-a ADDR] [-w MAXWRITE] [-m MIN] [-M HOLD_MS]
 *
 * Every connection's bytes go back to it.  A write() passes whatever is
 * buffered, up to MAXWRITE bytes (default 4 MiB, also the buffer per
 * connection, allocated at the connection's first byte: an idle connection
 * costs no buffer).  -m MIN holds the bytes back until MIN are buffered, the
 * client half-closed, or the oldest waited HOLD_MS (default 200): large
 * writes then come out of a stream that arrives in small pieces.
 * RLIMIT_NOFILE's soft limit is raised to the hard one at start, so it
 * serves as many connections as the hard limit allows (tests/vm/80-scale.bats:
 * thousands, each with sdpshim's own fds beside it).
 *
 * Lines (stdout, flushed, each ending in t_ms=N since start):
 *   "listening addr=A port=P pid=N nofile=N"
 *   "accept conn=I peer=A:P"
 *   "accept_failed errno=E open=N"                    accept() failed other than EAGAIN
 *                                                     (once per errno in a row)
 *   "slow_write conn=I bytes=N ret=R errno=E ms=M"   a write() that took >= 100 ms
 *   "close conn=I peer=A:P in=N out=N end=eof|ERRNAME"
 *   "totals conns=N open=N in=N out=N"                at SIGTERM/SIGINT, then exit 0
 * Exit status: 0, 1 when setup failed, 2 for usage errors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include "progutil.h"

#define SLOW_WRITE_MS 100.0
#define MAX_EVENTS    64

struct conn {
	int fd, id;
	char peer[64];
	uint8_t *buf;
	size_t head, tail;              /* pending bytes: buf[head..tail) */
	unsigned long long in, out;
	double first_ms;                /* when the oldest pending byte came */
	bool eof, draining;             /* draining: a partial write happened */
	uint32_t events;                /* the epoll interest now */
	struct conn *prev, *next;       /* every open connection */
};

static struct {
	size_t max_write, min_flush;
	double hold_ms;
} opt = { 4u << 20, 1, 200 };

static volatile sig_atomic_t stop;
static int ep;
static unsigned nconns, nopen;
static unsigned long long total_in, total_out;
static struct conn *conns;
static int accept_err;                  /* the errno of the last failed accept() */

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static const char *err_name(int err)
{
	const char *n = strerrorname_np(err);

	return n ? n : "E?";
}

static size_t pending(const struct conn *c)
{
	return c->tail - c->head;
}

static bool flush_due(const struct conn *c, double now)
{
	return pending(c) > 0 && (pending(c) >= opt.min_flush || c->eof || c->draining ||
				  now - c->first_ms >= opt.hold_ms);
}

static void set_interest(struct conn *c, double now)
{
	struct epoll_event ev = { .data.ptr = c };

	if (!c->eof && c->tail < opt.max_write)
		ev.events |= EPOLLIN | EPOLLRDHUP;
	if (flush_due(c, now))
		ev.events |= EPOLLOUT;
	if (ev.events == c->events)
		return;
	c->events = ev.events;
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_close(struct conn *c, int err)
{
	prog_logline("close conn=%d peer=%s in=%llu out=%llu end=%s", c->id, c->peer, c->in, c->out,
		err ? err_name(err) : "eof");
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->prev)
		c->prev->next = c->next;
	else
		conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->fd);
	free(c->buf);
	free(c);
	nopen--;
}

/* Reads until the socket is empty or the buffer full.  errno, or 0. */
static int conn_read(struct conn *c, double now)
{
	if (c->head == c->tail)
		c->head = c->tail = 0;
	if (!c->buf && !(c->buf = malloc(opt.max_write))) {
		prog_logline("out_of_memory conn=%d", c->id);
		return ENOMEM;
	}
	while (!c->eof && c->tail < opt.max_write) {
		ssize_t n = read(c->fd, c->buf + c->tail, opt.max_write - c->tail);

		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : errno;
		if (n == 0) {
			c->eof = true;
			break;
		}
		if (pending(c) == 0)
			c->first_ms = now;
		c->tail += (size_t)n;
		c->in += (unsigned long long)n;
		total_in += (unsigned long long)n;
	}
	return 0;
}

/* Writes whatever is due, up to max_write bytes per call.  errno, or 0. */
static int conn_write(struct conn *c)
{
	while (flush_due(c, prog_mono_ms())) {
		size_t want = pending(c) < opt.max_write ? pending(c) : opt.max_write;
		double t0 = prog_mono_ms(), ms;
		ssize_t n = write(c->fd, c->buf + c->head, want);
		int err = n < 0 ? errno : 0;

		ms = prog_mono_ms() - t0;
		if (ms >= SLOW_WRITE_MS)
			prog_logline("slow_write conn=%d bytes=%zu ret=%zd errno=%s ms=%.0f", c->id, want, n,
				n < 0 ? err_name(err) : "0", ms);
		if (n < 0)
			return err == EAGAIN || err == EINTR ? 0 : err;
		c->head += (size_t)n;
		c->out += (unsigned long long)n;
		total_out += (unsigned long long)n;
		c->draining = c->head != c->tail;
		if ((size_t)n < want)
			return 0;
	}
	if (c->head == c->tail)
		c->head = c->tail = 0;
	return 0;
}

static void conn_event(struct conn *c, uint32_t events)
{
	double now = prog_mono_ms();
	int err = 0;

	if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		err = conn_read(c, now);
	if (!err)
		err = conn_write(c);
	if (err || (c->eof && pending(c) == 0)) {
		conn_close(c, err);
		return;
	}
	set_interest(c, prog_mono_ms());
}

static void accept_all(int lfd)
{
	for (;;) {
		struct sockaddr_storage sa;
		socklen_t len = sizeof(sa);
		char host[INET6_ADDRSTRLEN] = "?", serv[8] = "?";
		int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != accept_err)
				prog_logline("accept_failed errno=%s open=%u", err_name(errno), nopen);
			if (errno != EAGAIN && errno != EINTR)
				accept_err = errno;
			return;
		}
		accept_err = 0;
		c = calloc(1, sizeof(*c));
		if (!c) {
			prog_logline("out_of_memory");
			close(fd);
			continue;
		}
		getnameinfo((struct sockaddr *)&sa, len, host, sizeof(host), serv, sizeof(serv),
			    NI_NUMERICHOST | NI_NUMERICSERV);
		snprintf(c->peer, sizeof(c->peer), "%s:%s", host, serv);
		c->fd = fd;
		c->id = (int)nconns++;
		nopen++;
		c->events = EPOLLIN | EPOLLRDHUP;
		c->next = conns;
		if (conns)
			conns->prev = c;
		conns = c;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &(struct epoll_event){ .events = c->events, .data.ptr = c });
		prog_logline("accept conn=%d peer=%s", c->id, c->peer);
	}
}

static int listen_on(const char *addr, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
	int fd, one = 1, err = getaddrinfo(addr, port, &hints, &ai);

	if (err) {
		fprintf(stderr, "evecho: %s:%s: %s\n", addr ? addr : "*", port, gai_strerror(err));
		exit(1);
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
		fprintf(stderr, "evecho: listen %s:%s: %s\n", addr ? addr : "*", port, strerror(errno));
		exit(1);
	}
	freeaddrinfo(ai);
	return fd;
}

/* Milliseconds until the next held buffer is due (epoll_wait's timeout). */
static int next_timeout(void)
{
	double now = prog_mono_ms(), best = 1000;

	/* Without -m nothing is ever held back: no need to walk thousands of
	 * connections per event. */
	if (opt.min_flush <= 1)
		return (int)best + 1;
	for (struct conn *c = conns; c; c = c->next) {
		double left = c->first_ms + opt.hold_ms - now;

		if (pending(c) > 0 && !flush_due(c, now) && left < best)
			best = left < 0 ? 0 : left;
	}
	return (int)best + 1;
}

/* Held buffers whose time came: echo them (no epoll event says so). */
static void flush_held(void)
{
	double now = prog_mono_ms();

	if (opt.min_flush <= 1)
		return;
	for (struct conn *c = conns, *next; c; c = next) {
		next = c->next;
		if (pending(c) > 0 && !(c->events & EPOLLOUT) && flush_due(c, now))
			conn_event(c, 0);
	}
}

/* The soft limit up to the hard one: an event loop serves as many connections
 * as it may have fds (sdpshim's own fds for each connection count too). */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			fprintf(stderr, "evecho: setrlimit(RLIMIT_NOFILE): %s\n", strerror(errno));
	}
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr, "usage: evecho -s PORT [-a ADDR] [-w MAXWRITE] [-m MIN] [-M HOLD_MS]\n");
	exit(2);
}

static long number(const char *s, long min, long max)
{
	long v;

	if (!prog_parse_long(s, min, max, &v))
		usage();
	return v;
}

int main(int argc, char **argv)
{
	const char *port = NULL, *addr = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	int lfd, o;

	prog_log_start();
	while ((o = getopt(argc, argv, "s:a:w:m:M:")) != -1) {
		switch (o) {
		case 's': number(optarg, 1, 65535); port = optarg; break;
		case 'a': addr = optarg; break;
		case 'w': opt.max_write = (size_t)number(optarg, 1, 1L << 30); break;
		case 'm': opt.min_flush = (size_t)number(optarg, 1, 1L << 30); break;
		case 'M': opt.hold_ms = (double)number(optarg, 0, 600000); break;
		default: usage();
		}
	}
	if (!port || optind != argc)
		usage();
	raise_nofile();
	sigaction(SIGTERM, &sa, NULL); /* no SA_RESTART: epoll_wait returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	lfd = listen_on(addr, port);
	ep = epoll_create1(EPOLL_CLOEXEC);
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &(struct epoll_event){ .events = EPOLLIN, .data.ptr = NULL });
	{
		struct rlimit rl = { 0, 0 };

		getrlimit(RLIMIT_NOFILE, &rl);
		prog_logline("listening addr=%s port=%s pid=%d nofile=%llu", addr ? addr : "*", port,
			     (int)getpid(), (unsigned long long)rl.rlim_cur);
	}
	while (!stop) {
		struct epoll_event ev[MAX_EVENTS];
		int n = epoll_wait(ep, ev, MAX_EVENTS, next_timeout());

		if (n < 0 && errno != EINTR) {
			perror("evecho: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr)
				conn_event(ev[i].data.ptr, ev[i].events);
			else
				accept_all(lfd);
		}
		flush_held();
	}
	prog_logline("totals conns=%u open=%u in=%llu out=%llu", nconns, nopen, total_in, total_out);
	return 0;
}
