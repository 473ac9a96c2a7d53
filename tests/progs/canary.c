/* canary: a one-connection server whose buffer holds a canary, for the
 * data-path lie tests (tests/vm/36-datapath-lies.bats): did recv() return
 * bytes nobody sent, or did memory change after the call that exposed it
 * returned?
 *
 *   canary -s PORT [-a ADDR] [-b BUFSIZE] [-x EXPECT] [-t SECS] [-H SECS]
 *       recv mode: accepts one connection; before every blocking recv() the
 *       whole buffer (default 1 MiB + 4 KiB) is filled with CANARY_FILL
 *       (lie_pattern.h).  Each return is checked: bytes equal to the stream
 *       the rogue peer sends (lie_pattern at that stream offset, in runs of >= 16),
 *       canary bytes (runs of >= CANARY_RUN that still equal the fill), and other
 *       bytes.
 *       Ends at EOF, an error, SO_RCVTIMEO (-t, default 30 s) or EXPECT bytes.
 *       Then it holds the socket and the untouched buffer -H seconds (default
 *       0; SIGTERM ends it early) and reports any byte of it that changed
 *       meanwhile.
 *   canary -s PORT -S BYTES [-a ADDR] [-H SECS]
 *       send mode: one blocking send() of BYTES of the stream, then holds the
 *       socket and the buffer -H seconds.
 *   canary -s PORT -n N [recv mode options]
 *       recv mode on N connections at once (a thread and a buffer each; the
 *       rogue's link lies open two streams of one link): each line names its
 *       connection ("recv conn=I ...", "late_write conn=I ...", "conn_end
 *       conn=I end=.. total=.. canary_bytes=.."), and the last line sums them
 *       ("end=all ...").  -x counts per connection.
 *
 * Lines (stdout, flushed, each ending in t_ms=N): "listening port=P",
 * "accepted peer=A:P", "recv off=O ret=N pattern=P canary=C other=X errno=E",
 * "late_write bytes=N first=OFF" (after the hold), "send ret=N errno=E ms=M",
 * and last "end=eof|ERRNAME|expected total=N pattern_bytes=N canary_bytes=N
 * other_bytes=N late_bytes=N".
 * Exit status: 0 no canary returned and nothing written late, 1 otherwise,
 * 2 usage or setup errors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <pthread.h>
#include <unistd.h>

#include "lie_pattern.h"
#include "progutil.h"

struct counts {
	unsigned long long total, pattern, canary, other, late;
};

static struct {
	const char *port, *addr;
	size_t buf_size, expect, send_bytes;
	unsigned timeout_s, hold_s, conns;
} opt = { .buf_size = (1u << 20) + 4096, .timeout_s = 30, .conns = 1 };

/* "conn=I " in front of a line's fields when there are several connections. */
static const char *tag(int conn)
{
	static __thread char t[16];

	if (opt.conns == 1)
		return "";
	snprintf(t, sizeof(t), "conn=%d ", conn);
	return t;
}


static void on_term(int sig)
{
	(void)sig; /* only ends the hold early (sleep returns) */
}

static const char *err_name(int err)
{
	const char *n = strerrorname_np(err);

	return err == 0 ? "0" : n ? n : "E?";
}

static void fill_canary(uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = canary_byte(i);
}

typedef bool (*match_fn)(const uint8_t *buf, size_t i, uint64_t off);

static bool is_canary(const uint8_t *buf, size_t i, uint64_t off)
{
	(void)off;
	return buf[i] == canary_byte(i);
}

static bool is_stream(const uint8_t *buf, size_t i, uint64_t off)
{
	return buf[i] == lie_pattern(off + i);
}

/* Bytes of buf[0..n) in runs of at least min_run that match: a byte that
 * equals the other kind by chance (1 in 256) does not count. */
static size_t run_bytes(const uint8_t *buf, size_t n, uint64_t off, match_fn match, size_t min_run)
{
	size_t total = 0, run = 0;

	for (size_t i = 0; i <= n; i++) {
		if (i < n && match(buf, i, off)) {
			run++;
			continue;
		}
		if (run >= min_run)
			total += run;
		run = 0;
	}
	return total;
}

static int listen_fd(void)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV }, *ai;
	int one = 1, lfd, err = getaddrinfo(opt.addr, opt.port, &hints, &ai);

	if (err) {
		fprintf(stderr, "canary: %s\n", gai_strerror(err));
		exit(2);
	}
	lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, 4) != 0) {
		fprintf(stderr, "canary: listen: %s\n", strerror(errno));
		exit(2);
	}
	freeaddrinfo(ai);
	prog_logline("listening port=%s", opt.port);
	return lfd;
}

static int accept_one(int lfd, int conn)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char host[INET6_ADDRSTRLEN] = "?", serv[8] = "?";
	int fd = accept(lfd, (struct sockaddr *)&sa, &len);

	if (fd < 0) {
		fprintf(stderr, "canary: accept: %s\n", strerror(errno));
		exit(2);
	}
	getnameinfo((struct sockaddr *)&sa, len, host, sizeof(host), serv, sizeof(serv),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	prog_logline("accepted %speer=%s:%s", tag(conn), host, serv);
	return fd;
}

/* Classifies one recv() return of n bytes at stream offset off. */
static void classify(const uint8_t *buf, size_t n, struct counts *k, int conn)
{
	size_t pat = run_bytes(buf, n, k->total, is_stream, n < 16 ? n : 16);
	size_t can = run_bytes(buf, n, 0, is_canary, CANARY_RUN);
	size_t other = n > pat + can ? n - pat - can : 0;

	prog_logline("recv %soff=%llu ret=%zu pattern=%zu canary=%zu other=%zu errno=0", tag(conn),
		k->total, n, pat, can, other);
	k->total += n;
	k->pattern += pat;
	k->canary += can;
	k->other += other;
}

/* After the hold: did anything write into the buffer since the last call? */
static void check_late(const uint8_t *buf, struct counts *k, int conn)
{
	size_t first = 0, changed = 0;

	for (size_t i = 0; i < opt.buf_size; i++) {
		if (buf[i] != canary_byte(i)) {
			if (!changed)
				first = i;
			changed++;
		}
	}
	k->late = changed;
	if (changed)
		prog_logline("late_write %sbytes=%zu first=%zu", tag(conn), changed, first);
}

static const char *recv_loop(int fd, uint8_t *buf, struct counts *k, int conn, char *why)
{
	for (;;) {
		ssize_t n;

		fill_canary(buf, opt.buf_size);
		n = recv(fd, buf, opt.buf_size, 0);
		if (n <= 0) {
			int err = n < 0 ? errno : 0;

			prog_logline("recv %soff=%llu ret=%zd errno=%s", tag(conn), k->total, n, err_name(err));
			snprintf(why, 32, "%s", n == 0 ? "eof" : err_name(err));
			return why;
		}
		classify(buf, (size_t)n, k, conn);
		if (opt.expect && k->total >= opt.expect) {
			fill_canary(buf, opt.buf_size); /* the hold checks a buffer no call uses */
			return "expected";
		}
	}
}

static const char *send_once(int fd, uint8_t *buf)
{
	static char why[32];
	double t0 = prog_mono_ms();
	ssize_t n;

	lie_pattern_fill(buf, opt.send_bytes, 0);
	n = send(fd, buf, opt.send_bytes, MSG_NOSIGNAL);
	prog_logline("send ret=%zd errno=%s ms=%.0f", n, n < 0 ? err_name(errno) : "0", prog_mono_ms() - t0);
	snprintf(why, sizeof(why), "%s", n < 0 ? err_name(errno) : "sent");
	return why;
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
	fprintf(stderr, "usage: canary -s PORT [-a ADDR] [-n CONNS] [-b BUFSIZE] [-x EXPECT] [-t SECS] [-H SECS]\n"
			"       canary -s PORT -S BYTES [-a ADDR] [-H SECS]\n");
	exit(2);
}

static long number(const char *s, long min, long max)
{
	long v;

	if (!prog_parse_long(s, min, max, &v))
		usage();
	return v;
}

static void parse(int argc, char **argv)
{
	int o;

	while ((o = getopt(argc, argv, "s:a:b:x:t:H:S:n:")) != -1) {
		switch (o) {
		case 's': number(optarg, 1, 65535); opt.port = optarg; break;
		case 'a': opt.addr = optarg; break;
		case 'b': opt.buf_size = (size_t)number(optarg, 4096, 1L << 30); break;
		case 'x': opt.expect = (size_t)number(optarg, 1, 1L << 40); break;
		case 't': opt.timeout_s = (unsigned)number(optarg, 1, 3600); break;
		case 'H': opt.hold_s = (unsigned)number(optarg, 0, 3600); break;
		case 'S': opt.send_bytes = (size_t)number(optarg, 1, 1L << 30); break;
		case 'n': opt.conns = (unsigned)number(optarg, 1, 8); break;
		default: usage();
		}
	}
	if (!opt.port || optind != argc || (opt.conns > 1 && opt.send_bytes))
		usage();
	if (opt.send_bytes > opt.buf_size)
		opt.buf_size = opt.send_bytes;
}

/* One connection in recv mode (a thread of its own when there are several). */
struct worker {
	pthread_t thread;
	int conn, fd;
	struct counts k;
	char why[32];
	uint8_t *buf;
};

static void *recv_worker(void *arg)
{
	struct worker *w = arg;
	const char *why = recv_loop(w->fd, w->buf, &w->k, w->conn, w->why);

	if (why != w->why)
		snprintf(w->why, sizeof(w->why), "%s", why);
	if (opt.hold_s)
		sleep(opt.hold_s); /* the socket, and the buffer as the last call left it */
	check_late(w->buf, &w->k, w->conn);
	if (opt.conns > 1)
		prog_logline("conn_end conn=%d end=%s total=%llu pattern_bytes=%llu canary_bytes=%llu "
			     "other_bytes=%llu late_bytes=%llu", w->conn, w->why, w->k.total, w->k.pattern,
			     w->k.canary, w->k.other, w->k.late);
	return NULL;
}

int main(int argc, char **argv)
{
	struct counts k = { 0 };
	struct timeval tv;
	struct worker *w;
	const char *why = "all";
	int lfd;

	prog_log_start();
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &(struct sigaction){ .sa_handler = on_term }, NULL);
	parse(argc, argv);
	w = calloc(opt.conns, sizeof(*w));
	if (!w)
		return 2;
	lfd = listen_fd();
	for (unsigned i = 0; i < opt.conns; i++) {
		w[i].conn = (int)i;
		w[i].buf = malloc(opt.buf_size);
		if (!w[i].buf)
			return 2;
		w[i].fd = accept_one(lfd, (int)i);
		tv = (struct timeval){ .tv_sec = opt.timeout_s };
		setsockopt(w[i].fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	close(lfd);
	if (opt.send_bytes) {
		why = send_once(w[0].fd, w[0].buf);
		if (opt.hold_s)
			sleep(opt.hold_s);
	} else if (opt.conns == 1) {
		recv_worker(&w[0]);
		why = w[0].why;
	} else {
		for (unsigned i = 0; i < opt.conns; i++)
			if (pthread_create(&w[i].thread, NULL, recv_worker, &w[i]) != 0)
				return 2;
		for (unsigned i = 0; i < opt.conns; i++)
			pthread_join(w[i].thread, NULL);
	}
	for (unsigned i = 0; i < opt.conns; i++) {
		k.total += w[i].k.total;
		k.pattern += w[i].k.pattern;
		k.canary += w[i].k.canary;
		k.other += w[i].k.other;
		k.late += w[i].k.late;
		close(w[i].fd);
		free(w[i].buf);
	}
	prog_logline("end=%s total=%llu pattern_bytes=%llu canary_bytes=%llu other_bytes=%llu late_bytes=%llu",
		why, k.total, k.pattern, k.canary, k.other, k.late);
	free(w);
	return k.canary || k.late ? 1 : 0;
}
