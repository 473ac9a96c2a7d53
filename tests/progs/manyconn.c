/* manyconn: many concurrent connections from one process, each echo checked
 * (issue 15: ten thousand connections per process).
 *
 *   manyconn -c HOST -p PORT -n N [-b BYTES] [-j OPEN_PARALLEL] [-w HOLDFILE] [-g GUARD_SECS]
 *       Raises RLIMIT_NOFILE's soft limit to the hard one (with sdpshim a
 *       connection costs about 4 fds: the socket, the library's dup of it and
 *       its 2 eventfds), then opens N connections to an echo server (evecho)
 *       with non-blocking connects driven by epoll, at most OPEN_PARALLEL
 *       (default 64) in flight.  Once all N are connected, so all N are open at
 *       once, each sends BYTES (default 256) of its own seeded stream
 *       (seedpat.h, stream = connection number 1..N) and reads the echo back,
 *       all at the same time; every byte is compared.  With -w, it then holds
 *       every connection open until HOLDFILE exists.  Last, each connection is
 *       half-closed, must read EOF with no further byte, and is closed.
 *   manyconn -R -n N [-b BYTES]
 *       the reference: what "verified" must print for N and BYTES, from the
 *       streams alone, without any socket.
 *
 * Lines (stdout, flushed):
 *   "start pid=P uid=U nofile=SOFT memlock=BYTES|unlimited"
 *   "connected N"                     all N connections are up at once
 *   "verified N sha256=HEX"           every echo byte-exact; HEX is the SHA-256 of
 *                                     the N per-connection SHA-256s in order
 *   "holding"                         (-w) waiting for HOLDFILE
 *   "ok N"                            all N half-closed and closed cleanly
 *   "timing connect_ms=X echo_ms=Y close_ms=Z max_inflight=M"
 *   "reference N sha256=HEX"          (-R)
 * Any failure prints "FAIL ..." and exits 1; GUARD_SECS (default 600, -g)
 * bounds the whole run, the hold included. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "progutil.h"
#include "seedpat.h"

#define GUARD_SECS 600
#define CHUNK      16384
#define MAX_EVENTS 256

enum mc_state { MC_NONE, MC_CONNECTING, MC_IDLE, MC_ECHO, MC_DONE, MC_CLOSING, MC_CLOSED };

struct mc {
	int fd;
	enum mc_state state;
	size_t sent, got;
	sha256_ctx sha; /* of the bytes echoed back */
};

static struct mc *conns;
static size_t nconns;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL still running after the guard time\n";

	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr,
		"usage: manyconn -c HOST -p PORT -n N [-b BYTES] [-j OPEN_PARALLEL] [-w HOLDFILE] [-g GUARD_SECS]\n"
		"       manyconn -R -n N [-b BYTES]\n");
	exit(2);
}

static long number(const char *s, long min, long max)
{
	long v;

	if (!prog_parse_long(s, min, max, &v))
		usage();
	return v;
}

static uint64_t stream_of(size_t i)
{
	return (uint64_t)i + 1;
}

/* The digest line: SHA-256 over the per-connection digests, in order. */
static void print_combined(const char *word, size_t n, const uint8_t (*digests)[SHA256_DIGEST_LEN])
{
	uint8_t d[SHA256_DIGEST_LEN];
	char hex[SHA256_HEX_LEN + 1];
	sha256_ctx all;

	sha256_init(&all);
	for (size_t i = 0; i < n; i++)
		sha256_update(&all, digests[i], SHA256_DIGEST_LEN);
	sha256_final(&all, d);
	printf("%s %zu sha256=%s\n", word, n, sha256_hex(d, hex));
	fflush(stdout);
}

static int reference(size_t n, size_t bytes)
{
	uint8_t (*digests)[SHA256_DIGEST_LEN] = calloc(n ? n : 1, SHA256_DIGEST_LEN);
	uint8_t buf[CHUNK];

	if (!digests)
		fail("out of memory");
	for (size_t i = 0; i < n; i++) {
		sha256_ctx c;

		sha256_init(&c);
		for (size_t off = 0; off < bytes;) {
			size_t len = bytes - off < sizeof(buf) ? bytes - off : sizeof(buf);

			seedpat_fill(stream_of(i), off, buf, len);
			sha256_update(&c, buf, len);
			off += len;
		}
		sha256_final(&c, digests[i]);
	}
	print_combined("reference", n, (const uint8_t (*)[SHA256_DIGEST_LEN])digests);
	free(digests);
	return 0;
}

static struct addrinfo *resolve(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai;
	int err = getaddrinfo(host, port, &hints, &ai);

	if (err)
		fail("address %s port %s: %s", host, port, gai_strerror(err));
	return ai;
}

static void raise_nofile(void)
{
	struct rlimit rl, ml;
	char mem[32] = "unlimited";

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			fail("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)rl.rlim_max,
			     strerror(errno));
	}
	getrlimit(RLIMIT_NOFILE, &rl);
	if (getrlimit(RLIMIT_MEMLOCK, &ml) == 0 && ml.rlim_cur != RLIM_INFINITY)
		snprintf(mem, sizeof(mem), "%llu", (unsigned long long)ml.rlim_cur);
	printf("start pid=%d uid=%d nofile=%llu memlock=%s\n", (int)getpid(), (int)getuid(),
	       (unsigned long long)rl.rlim_cur, mem);
	fflush(stdout);
}

static void ep_ctl(int ep, int op, size_t i, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = i };

	if (epoll_ctl(ep, op, conns[i].fd, &ev) != 0)
		fail("conn %zu: epoll_ctl(%d): %s", i + 1, op, strerror(errno));
}

static double connect_all(int ep, const struct addrinfo *ai, size_t parallel, size_t *max_inflight)
{
	struct epoll_event ev[MAX_EVENTS];
	size_t next = 0, inflight = 0, connected = 0;
	double t0 = prog_mono_ms();

	while (connected < nconns) {
		while (inflight < parallel && next < nconns) {
			struct mc *c = &conns[next];
			int fd = socket(ai->ai_family, SOCK_STREAM, 0);

			if (fd < 0)
				fail("conn %zu: socket: %s (%zu connections open)", next + 1, strerror(errno),
				     connected + inflight);
			if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
				fail("conn %zu: O_NONBLOCK: %s", next + 1, strerror(errno));
			c->fd = fd;
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
				c->state = MC_IDLE;
				connected++;
			} else if (errno == EINPROGRESS) {
				c->state = MC_CONNECTING;
				ep_ctl(ep, EPOLL_CTL_ADD, next, EPOLLOUT);
				inflight++;
			} else {
				fail("conn %zu: connect: %s (%zu connected, %zu in flight)", next + 1,
				     strerror(errno), connected, inflight);
			}
			next++;
		}
		if (inflight > *max_inflight)
			*max_inflight = inflight;
		if (inflight == 0)
			continue;
		int n = epoll_wait(ep, ev, MAX_EVENTS, 1000);
		if (n < 0 && errno != EINTR)
			fail("epoll_wait: %s", strerror(errno));
		for (int k = 0; k < n; k++) {
			size_t i = (size_t)ev[k].data.u64;
			struct mc *c = &conns[i];
			int err = 0;
			socklen_t len = sizeof(err);

			if (c->state != MC_CONNECTING)
				fail("conn %zu: event 0x%x after connect", i + 1, ev[k].events);
			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
				err = errno;
			if (err)
				fail("conn %zu: connect: %s (%zu connected, %zu in flight)", i + 1,
				     strerror(err), connected, inflight);
			if (ev[k].events & (EPOLLERR | EPOLLHUP))
				fail("conn %zu: connect: events 0x%x without an error", i + 1, ev[k].events);
			if (!(ev[k].events & EPOLLOUT))
				continue;
			/* Out of the set until the echo starts: an idle connection waits. */
			ep_ctl(ep, EPOLL_CTL_DEL, i, 0);
			c->state = MC_IDLE;
			inflight--;
			connected++;
		}
	}
	return prog_mono_ms() - t0;
}

static void echo_write(int ep, size_t i, size_t bytes)
{
	struct mc *c = &conns[i];
	uint8_t buf[CHUNK];

	while (c->sent < bytes) {
		size_t len = bytes - c->sent < sizeof(buf) ? bytes - c->sent : sizeof(buf);
		ssize_t n;

		seedpat_fill(stream_of(i), c->sent, buf, len);
		n = write(c->fd, buf, len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0)
			fail("conn %zu: write after %zu of %zu bytes: %s", i + 1, c->sent, bytes,
			     n < 0 ? strerror(errno) : "0 bytes");
		c->sent += (size_t)n;
	}
	ep_ctl(ep, EPOLL_CTL_MOD, i, EPOLLIN | EPOLLRDHUP);
}

/* Reads what is there; true once the whole echo is back and checked. */
static int echo_read(size_t i, size_t bytes)
{
	struct mc *c = &conns[i];
	uint8_t buf[CHUNK];

	for (;;) {
		/* One byte more than is due: an echo that sends extra bytes fails. */
		size_t want = bytes - c->got + 1 < sizeof(buf) ? bytes - c->got + 1 : sizeof(buf);
		ssize_t n = read(c->fd, buf, want);
		long bad;

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n < 0)
			fail("conn %zu: read after %zu of %zu echoed bytes: %s", i + 1, c->got, bytes,
			     strerror(errno));
		if (n == 0)
			fail("conn %zu: EOF after %zu of %zu echoed bytes", i + 1, c->got, bytes);
		if (c->got + (size_t)n > c->sent)
			fail("conn %zu: %zu bytes echoed, only %zu sent", i + 1, c->got + (size_t)n, c->sent);
		bad = seedpat_check(stream_of(i), c->got, buf, (size_t)n);
		if (bad >= 0)
			fail("conn %zu: echoed byte %zu differs from the one sent", i + 1,
			     c->got + (size_t)bad);
		sha256_update(&c->sha, buf, (size_t)n);
		c->got += (size_t)n;
		if (c->got == bytes)
			return 1;
	}
}

static double echo_all(int ep, size_t bytes, uint8_t (*digests)[SHA256_DIGEST_LEN])
{
	struct epoll_event ev[MAX_EVENTS];
	size_t left = nconns;
	double t0 = prog_mono_ms();

	for (size_t i = 0; i < nconns; i++) {
		sha256_init(&conns[i].sha);
		conns[i].state = MC_ECHO;
		if (bytes == 0) {
			conns[i].state = MC_DONE;
			sha256_final(&conns[i].sha, digests[i]);
			left--;
			continue;
		}
		ep_ctl(ep, EPOLL_CTL_ADD, i, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
	}
	while (left) {
		int n = epoll_wait(ep, ev, MAX_EVENTS, 1000);

		if (n < 0 && errno != EINTR)
			fail("epoll_wait: %s", strerror(errno));
		for (int k = 0; k < n; k++) {
			size_t i = (size_t)ev[k].data.u64;
			struct mc *c = &conns[i];

			if (c->state != MC_ECHO)
				fail("conn %zu: event 0x%x after its echo", i + 1, ev[k].events);
			if (ev[k].events & EPOLLOUT)
				echo_write(ep, i, bytes);
			if ((ev[k].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && echo_read(i, bytes)) {
				ep_ctl(ep, EPOLL_CTL_DEL, i, 0);
				c->state = MC_DONE;
				sha256_final(&c->sha, digests[i]);
				left--;
			}
		}
	}
	return prog_mono_ms() - t0;
}

static void wait_for_file(const char *file)
{
	struct timespec ts = { 0, 50 * 1000000L };

	while (access(file, F_OK) != 0)
		nanosleep(&ts, NULL);
}

/* Half-closes every connection; each must then read EOF, no byte. */
static double close_all(int ep)
{
	struct epoll_event ev[MAX_EVENTS];
	size_t left = nconns;
	double t0 = prog_mono_ms();

	for (size_t i = 0; i < nconns; i++) {
		if (shutdown(conns[i].fd, SHUT_WR) != 0)
			fail("conn %zu: shutdown: %s", i + 1, strerror(errno));
		conns[i].state = MC_CLOSING;
		ep_ctl(ep, EPOLL_CTL_ADD, i, EPOLLIN | EPOLLRDHUP);
	}
	while (left) {
		int n = epoll_wait(ep, ev, MAX_EVENTS, 1000);

		if (n < 0 && errno != EINTR)
			fail("epoll_wait: %s", strerror(errno));
		for (int k = 0; k < n; k++) {
			size_t i = (size_t)ev[k].data.u64;
			struct mc *c = &conns[i];
			uint8_t b[64];
			ssize_t r;

			if (c->state != MC_CLOSING)
				continue;
			r = read(c->fd, b, sizeof(b));
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r != 0)
				fail("conn %zu: expected EOF from the echo server, got %zd (%s)", i + 1, r,
				     r < 0 ? strerror(errno) : "bytes");
			ep_ctl(ep, EPOLL_CTL_DEL, i, 0);
			close(c->fd);
			c->state = MC_CLOSED;
			left--;
		}
	}
	return prog_mono_ms() - t0;
}

int main(int argc, char **argv)
{
	const char *host = NULL, *port = NULL, *hold_file = NULL;
	size_t bytes = 256, parallel = 64, max_inflight = 0;
	long n = -1, guard = GUARD_SECS;
	int o, ref = 0, ep;
	uint8_t (*digests)[SHA256_DIGEST_LEN];
	double t_conn, t_echo, t_close;
	struct addrinfo *ai;

	signal(SIGPIPE, SIG_IGN);
	while ((o = getopt(argc, argv, "c:p:n:b:j:w:g:R")) != -1) {
		switch (o) {
		case 'c': host = optarg; break;
		case 'p': number(optarg, 1, 65535); port = optarg; break;
		case 'n': n = number(optarg, 1, 4000000); break;
		case 'b': bytes = (size_t)number(optarg, 0, 1L << 30); break;
		case 'j': parallel = (size_t)number(optarg, 1, 1000000); break;
		case 'w': hold_file = optarg; break;
		case 'g': guard = number(optarg, 1, 86400); break;
		case 'R': ref = 1; break;
		default: usage();
		}
	}
	if (n < 1 || optind != argc)
		usage();
	nconns = (size_t)n;
	if (ref)
		return reference(nconns, bytes);
	if (!host || !port)
		usage();
	signal(SIGALRM, on_alarm);
	alarm((unsigned)guard);
	raise_nofile();
	conns = calloc(nconns, sizeof(*conns));
	digests = calloc(nconns, SHA256_DIGEST_LEN);
	if (!conns || !digests)
		fail("out of memory for %zu connections", nconns);
	ai = resolve(host, port);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		fail("epoll_create1: %s", strerror(errno));

	t_conn = connect_all(ep, ai, parallel, &max_inflight);
	freeaddrinfo(ai);
	printf("connected %zu\n", nconns);
	fflush(stdout);
	t_echo = echo_all(ep, bytes, digests);
	print_combined("verified", nconns, (const uint8_t (*)[SHA256_DIGEST_LEN])digests);
	if (hold_file) {
		printf("holding\n");
		fflush(stdout);
		wait_for_file(hold_file);
	}
	t_close = close_all(ep);
	printf("ok %zu\n", nconns);
	printf("timing connect_ms=%.0f echo_ms=%.0f close_ms=%.0f max_inflight=%zu\n", t_conn, t_echo,
	       t_close, max_inflight);
	fflush(stdout);
	free(digests);
	free(conns);
	return 0;
}
