/* connects: times TCP connects and checks each connection end to end.
 *
 *   connects -s PORT [-a ADDR] [-n COUNT]
 *       echo server: a thread per connection echoes every byte until EOF.  With -n it
 *       exits after COUNT connections have ended (status 1 if one failed), else never.
 *   connects -c HOST -p PORT [-n COUNT] [-b BYTES] [-w FILE] [-g GUARD_SECS]
 *       COUNT connects one after another, in this one process (so a per-process cache
 *       of the peer's capabilities carries over).  On each: time connect(), send BYTES
 *       of seeded data (default 64 KiB) while reading the echo back, compare, close.
 *       -w FILE: once the first connection's data is verified, print "holding" and keep
 *       it open until FILE exists (another test step controls when it closes).
 *
 * Client lines: "conn I connect_ms=X.Y first_ms=X.YY bytes=N sha256=HEX ok", one per
 * connection, then "ok COUNT", then the summary
 * "rate cycles=COUNT elapsed_ms=X.Y per_s=R after_first_per_s=R2": X from the start of
 * the first connect() to the end of the last close(); R = COUNT / X; R2 the same without
 * cycle 1 (which also opens the device, sdpshim's first contact with the peer), "-" when
 * COUNT is 1 (with -w the hold is inside cycle 1).  With COUNT > 1 a last line
 * "phases cycles=N connect_ms=A first_ms=B shut_eof_ms=C close_ms=D" gives the medians over
 * cycles 2..COUNT of: connect(), connect() to the first echoed byte, shutdown(SHUT_WR) to
 * the server's EOF, and close().  connect_ms: the connect() call;
 * first_ms: from the start of connect() to the first echoed byte read back (includes
 * whatever the path still does after connect() returns, e.g. sdpshim's binding
 * handshake; with BYTES 0: connect_ms).
 * Any failure prints "FAIL ..." and exits 1.  GUARD_SECS (default 120, -g) bounds the
 * client's run. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "progutil.h"

#define GUARD_SECS 120
#define CHUNK      16384

/* Where one client cycle's time went, in ms (see the "phases" line). */
struct cycle_phases {
	double connect, first, shut_eof, close;
};

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

static struct addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0) }, *ai;
	int err = getaddrinfo(host, port, &hints, &ai);

	if (err)
		fail("address %s port %s: %s", host ? host : "*", port, gai_strerror(err));
	return ai;
}

static void write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("write: %s", n < 0 ? strerror(errno) : "0 bytes");
		p += n;
		len -= (size_t)n;
	}
}

/* --- server ----------------------------------------------------------------- */

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t srv_cond = PTHREAD_COND_INITIALIZER;
static int srv_ended, srv_failed;

static void *echo_main(void *arg)
{
	int fd = (int)(intptr_t)arg, bad = 0;
	uint8_t buf[CHUNK];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			printf("server: read: %s\n", strerror(errno));
			bad = 1;
		}
		if (n <= 0)
			break;
		write_all(fd, buf, (size_t)n);
	}
	close(fd);
	pthread_mutex_lock(&srv_lock);
	srv_ended++;
	srv_failed += bad;
	pthread_cond_broadcast(&srv_cond);
	pthread_mutex_unlock(&srv_lock);
	return NULL;
}

static int server(const char *addr, const char *port, int count)
{
	struct addrinfo *ai = resolve(addr, port, 1);
	int one = 1, lfd = socket(ai->ai_family, SOCK_STREAM, 0);

	if (lfd < 0)
		fail("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, 64) != 0)
		fail("bind/listen: %s", strerror(errno));
	freeaddrinfo(ai);
	printf("listening on %s\n", port);
	fflush(stdout);
	for (int accepted = 0; count == 0 || accepted < count; accepted++) {
		pthread_t t;
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			fail("accept: %s", strerror(errno));
		if (pthread_create(&t, NULL, echo_main, (void *)(intptr_t)fd) != 0)
			fail("pthread_create");
		pthread_detach(t);
	}
	pthread_mutex_lock(&srv_lock);
	while (srv_ended < count)
		pthread_cond_wait(&srv_cond, &srv_lock);
	pthread_mutex_unlock(&srv_lock);
	close(lfd);
	printf("server: %d connections, %d failed\n", count, srv_failed);
	return srv_failed ? 1 : 0;
}

/* --- client ----------------------------------------------------------------- */

static void fill(uint64_t seed, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		buf[i] = (uint8_t)(seed >> 56);
	}
}

static void wait_for_file(const char *file)
{
	struct timespec ts = { 0, 20 * 1000000L };

	while (access(file, F_OK) != 0)
		nanosleep(&ts, NULL);
}

static void one_connection(const struct addrinfo *ai, int index, size_t bytes,
			   const char *hold_file, struct cycle_phases *ph)
{
	uint8_t *out = malloc(bytes ? bytes : 1), *in = malloc(bytes ? bytes : 1);
	uint8_t d_out[SHA256_DIGEST_LEN], d_in[SHA256_DIGEST_LEN];
	char hex[SHA256_HEX_LEN + 1];
	size_t sent = 0, got = 0;
	double t0, t1, t_first = -1, t_shut, t_eof;
	int fd;

	if (!out || !in)
		fail("malloc");
	fill((uint64_t)index * 7919 + 1, out, bytes);
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		fail("socket: %s", strerror(errno));
	t0 = prog_mono_ms();
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
		fail("conn %d: connect: %s", index, strerror(errno));
	t1 = prog_mono_ms();
	/* Lock step, one chunk out and its echo back: never more than CHUNK in flight. */
	while (got < bytes) {
		size_t n = bytes - sent < CHUNK ? bytes - sent : CHUNK;
		write_all(fd, out + sent, n);
		sent += n;
		while (got < sent) {
			ssize_t r = read(fd, in + got, sent - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				fail("conn %d: read after %zu of %zu bytes: %s", index, got, bytes,
				     r < 0 ? strerror(errno) : "EOF");
			if (t_first < 0)
				t_first = prog_mono_ms();
			got += (size_t)r;
		}
	}
	if (t_first < 0)
		t_first = t1;
	sha256(out, bytes, d_out);
	sha256(in, bytes, d_in);
	if (memcmp(d_out, d_in, sizeof(d_out)) != 0)
		fail("conn %d: echoed bytes differ from the sent ones", index);
	printf("conn %d connect_ms=%.1f first_ms=%.2f bytes=%zu sha256=%s ok\n", index, t1 - t0,
	       t_first - t0, bytes, sha256_hex(d_in, hex));
	fflush(stdout);
	if (hold_file && index == 1) {
		printf("holding\n");
		fflush(stdout);
		wait_for_file(hold_file);
	}
	t_shut = prog_mono_ms();
	shutdown(fd, SHUT_WR);
	{
		uint8_t c;
		ssize_t r;
		while ((r = read(fd, &c, 1)) < 0 && errno == EINTR)
			;
		if (r != 0)
			fail("conn %d: expected EOF from the echo server, got %zd", index, r);
	}
	t_eof = prog_mono_ms();
	close(fd);
	*ph = (struct cycle_phases){ .connect = t1 - t0, .first = t_first - t0,
				     .shut_eof = t_eof - t_shut, .close = prog_mono_ms() - t_eof };
	free(out);
	free(in);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of one field over N cycles' phases (sorts a scratch copy). */
static double phase_median(const struct cycle_phases *ph, int n, size_t field_offset)
{
	double *v = malloc((size_t)n * sizeof(*v)), m;

	if (!v)
		fail("malloc");
	for (int i = 0; i < n; i++)
		v[i] = *(const double *)((const char *)&ph[i] + field_offset);
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	free(v);
	return m;
}

static void print_phases(const struct cycle_phases *ph, int n)
{
	printf("phases cycles=%d connect_ms=%.2f first_ms=%.2f shut_eof_ms=%.2f close_ms=%.2f\n", n,
	       phase_median(ph, n, offsetof(struct cycle_phases, connect)),
	       phase_median(ph, n, offsetof(struct cycle_phases, first)),
	       phase_median(ph, n, offsetof(struct cycle_phases, shut_eof)),
	       phase_median(ph, n, offsetof(struct cycle_phases, close)));
}

int main(int argc, char **argv)
{
	const char *host = NULL, *addr = NULL, *port = NULL, *hold_file = NULL;
	int count = -1, c, serve = 0, guard = GUARD_SECS;
	double t_start, t_second = 0, t_end;
	size_t bytes = 65536;
	struct addrinfo *ai;
	struct cycle_phases *phases;

	signal(SIGPIPE, SIG_IGN);
	while ((c = getopt(argc, argv, "s:a:c:p:n:b:w:g:")) != -1) {
		switch (c) {
		case 's': serve = 1; port = optarg; break;
		case 'a': addr = optarg; break;
		case 'c': host = optarg; break;
		case 'p': port = optarg; break;
		case 'n': count = atoi(optarg); break;
		case 'b': bytes = (size_t)strtoull(optarg, NULL, 0); break;
		case 'w': hold_file = optarg; break;
		case 'g': guard = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: connects -s PORT [-a ADDR] [-n COUNT]\n"
					"       connects -c HOST -p PORT [-n COUNT] [-b BYTES] [-w FILE] [-g GUARD_SECS]\n");
			return 2;
		}
	}
	if (serve)
		return server(addr, port, count > 0 ? count : 0);
	if (count < 0)
		count = 1;
	if (!host || !port || count < 1 || guard < 1) {
		fprintf(stderr, "connects: -c HOST -p PORT needed\n");
		return 2;
	}
	signal(SIGALRM, on_alarm);
	alarm((unsigned)guard);
	ai = resolve(host, port, 0);
	phases = calloc((size_t)count, sizeof(*phases));
	if (!phases)
		fail("malloc");
	t_start = prog_mono_ms();
	for (int i = 1; i <= count; i++) {
		if (i == 2)
			t_second = prog_mono_ms();
		one_connection(ai, i, bytes, hold_file, &phases[i - 1]);
	}
	t_end = prog_mono_ms();
	freeaddrinfo(ai);
	printf("ok %d\n", count);
	if (count > 1)
		printf("rate cycles=%d elapsed_ms=%.1f per_s=%.1f after_first_per_s=%.1f\n", count,
		       t_end - t_start, count * 1000.0 / (t_end - t_start),
		       (count - 1) * 1000.0 / (t_end - t_second));
	else
		printf("rate cycles=%d elapsed_ms=%.1f per_s=%.1f after_first_per_s=-\n", count,
		       t_end - t_start, count * 1000.0 / (t_end - t_start));
	if (count > 1)
		print_phases(phases + 1, count - 1);
	free(phases);
	return 0;
}
