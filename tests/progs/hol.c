/* hol: head-of-line blocking between the streams of one process pair (issue
 * 15: streams that share a link or a receive pool).  A reader that stops on
 * one stream must not stall the others; idle streams must not slow a busy one.
 *
 *   hol -s PORT [-a ADDR] [-n CONNS] [-S STALL_MS]
 *       server, a thread per connection.  Each connection starts with a 12-byte
 *       header from the client (role, stream number, parameter) and then:
 *         S  stopped reader: reads nothing more until a busy stream (E) has
 *            ended; then reads to EOF, checks every byte (stream 0x5300000000 + I,
 *            seedpat.h) and answers with its count (8 bytes, big-endian) and SHA-256
 *         W  stopped writer's peer: writes stream 0x5700000000 + I, non-blocking,
 *            until no write is possible for STALL_MS (default 1500): the client does
 *            not read it, so its window is full; once a busy stream has ended, adds
 *            the count and SHA-256 of what it wrote (40 bytes) and half-closes
 *         E  busy echo: waits until PARAM W streams are stalled, writes one 'G',
 *            then echoes every byte until EOF
 *         I  idle: echoes every byte until EOF
 *         B  bulk sink: reads to EOF, compares every byte with the bulk pattern (a
 *            block of BULK_BLOCK bytes of stream 0x4200000000 + I, repeated: memcmp,
 *            so the check costs little beside the transfer being timed), answers
 *            with the count and the offset of the first differing byte (all ones:
 *            none), 8 bytes each, big-endian
 *       With -n it exits after CONNS connections ended: status 1 if one failed.
 *   hol -c HOST -p PORT -m hol [-k STOPPED] [-b BYTES] [-t SECS] [-S STALL_MS]
 *       STOPPED (default 4) S streams, each written until its window is full (no
 *       write possible for STALL_MS), and STOPPED W streams the client never reads;
 *       then one E stream echoes BYTES (default 4 MiB) of stream 0x4500000000,
 *       checked byte by byte, which must finish within SECS (default 60) of the
 *       server's 'G'.  Then the stopped streams resume: each S stream's count and
 *       SHA-256 as the server got them must equal what was written, each W stream
 *       is read to EOF, every byte checked, and must match the server's trailer.
 *       Server: -n 2*STOPPED+1.
 *   hol -c HOST -p PORT -m idle [-k IDLE] [-b BYTES]
 *       IDLE (default 1000) connections, each set up with a checked 16-byte echo
 *       and then idle; then one B stream of BYTES (default 64 MiB), timed from its
 *       first write to the server's answer, which must say every byte arrived as
 *       sent; then each idle
 *       connection echoes 16 checked bytes again.  Server: -n IDLE+1.
 *
 * Client lines (stdout, flushed):
 *   "start pid=P uid=U nofile=N"
 *   hol:  "stopped S I: window full after N bytes"  (one per S stream)
 *         "busy: go after G ms (K writers stalled)"
 *         "busy: echoed N bytes in X ms = Y MB/s sha256=HEX ok"
 *         "stopped S I: server received N bytes sha256=HEX ok"
 *         "stopped W I: received N bytes sha256=HEX ok"
 *         "ok hol stopped=K bytes=N"
 *   idle: "idle: K connections up in X ms"
 *         "busy: N bytes in X ms = Y MB/s with K idle connections, every byte checked ok"
 *         "ok idle=K bytes=N"
 * Server lines: "listening on PORT", "server: S|W|E|I|B I ...", and with -n
 * "server: N connections, F failed".  Any failure prints "FAIL ..." and exits 1;
 * GUARD_SECS (600) bounds every run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "progutil.h"
#include "seedpat.h"

#define GUARD_SECS  600
#define CHUNK       65536
#define HDR_LEN     12
#define REPLY_LEN   (8 + SHA256_DIGEST_LEN)
#define IDLE_PING   16
#define FILL_MAX    (1ull << 30) /* a window that takes more than this never fills */
#define WAIT_SECS   120          /* how long a server thread waits for another stream */

#define STREAM_S(i) (0x5300000000ull + (i))
#define STREAM_W(i) (0x5700000000ull + (i))
#define STREAM_E    0x4500000000ull
#define STREAM_I(i) (0x4900000000ull + (i))
#define STREAM_B(i) (0x4200000000ull + (i))
#define BULK_BLOCK  1048573u     /* a prime: a block out of place cannot line up */
#define BULK_REPLY  16
#define NO_BAD      UINT64_MAX

static int stall_ms = 1500;

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

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	va_list ap;

	pthread_mutex_lock(&lock);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	pthread_mutex_unlock(&lock);
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
		"usage: hol -s PORT [-a ADDR] [-n CONNS] [-S STALL_MS]\n"
		"       hol -c HOST -p PORT -m hol [-k STOPPED] [-b BYTES] [-t SECS] [-S STALL_MS]\n"
		"       hol -c HOST -p PORT -m idle [-k IDLE] [-b BYTES]\n");
	exit(2);
}

static long number(const char *s, long min, long max)
{
	long v;

	if (!prog_parse_long(s, min, max, &v))
		usage();
	return v;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* 0, or an errno (EPIPE for EOF) */
static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* 0, ENODATA for EOF before len, or an errno */
static int read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return ENODATA;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static const char *err_text(int err)
{
	return err == ENODATA ? "EOF" : strerror(err);
}

static char *hex_of(const uint8_t d[SHA256_DIGEST_LEN], char out[SHA256_HEX_LEN + 1])
{
	return sha256_hex(d, out);
}

/* Writes a seeded stream non-blocking until no write is possible for
 * stall_ms: the peer does not read, so its window is full.  Returns the count
 * written; *err is set on a write error. */
static uint64_t fill_until_stalled(int fd, uint64_t stream, sha256_ctx *sha, int *err)
{
	uint8_t buf[CHUNK];
	uint64_t off = 0;

	*err = 0;
	set_nonblock(fd, 1);
	while (off < FILL_MAX) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n;

		seedpat_fill(stream, off, buf, sizeof(buf));
		n = write(fd, buf, sizeof(buf));
		if (n > 0) {
			sha256_update(sha, buf, (size_t)n);
			off += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
			*err = n == 0 ? EPIPE : errno;
			return off;
		}
		n = poll(&p, 1, stall_ms);
		if (n == 0)
			return off;
		if (n < 0 && errno != EINTR) {
			*err = errno;
			return off;
		}
		if (p.revents & (POLLERR | POLLHUP)) {
			*err = EPIPE;
			return off;
		}
	}
	*err = EFBIG;
	return off;
}

/* Reads to EOF, checks every byte against the stream, hashes; 0 or an errno
 * (EILSEQ: a byte differs). */
static int read_stream(int fd, uint64_t stream, uint64_t *count, sha256_ctx *sha, uint64_t *bad_at)
{
	uint8_t buf[CHUNK];

	*count = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		long bad;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return 0;
		bad = seedpat_check(stream, *count, buf, (size_t)n);
		if (bad >= 0) {
			*bad_at = *count + (uint64_t)bad;
			return EILSEQ;
		}
		sha256_update(sha, buf, (size_t)n);
		*count += (uint64_t)n;
	}
}

/* --- server ------------------------------------------------------------------ */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int w_stalled, busy_done, ended, failed;
} srv = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0 };

/* Waits until *counter >= want, at most WAIT_SECS; true when it got there. */
static int srv_wait(int *counter, int want)
{
	struct timespec until;
	int ok = 1;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += WAIT_SECS;
	pthread_mutex_lock(&srv.lock);
	while (*counter < want && ok)
		ok = pthread_cond_timedwait(&srv.cond, &srv.lock, &until) != ETIMEDOUT || *counter >= want;
	pthread_mutex_unlock(&srv.lock);
	return *counter >= want;
}

static void srv_bump(int *counter)
{
	pthread_mutex_lock(&srv.lock);
	(*counter)++;
	pthread_cond_broadcast(&srv.cond);
	pthread_mutex_unlock(&srv.lock);
}

static int echo_to_eof(int fd, uint64_t *count)
{
	uint8_t buf[CHUNK];
	int err;

	*count = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return 0;
		err = write_all(fd, buf, (size_t)n);
		if (err)
			return err;
		*count += (uint64_t)n;
	}
}

/* Reads to EOF, checks, answers with count and digest. */
static int sink_and_answer(int fd, char role, uint32_t idx, uint64_t stream)
{
	uint8_t reply[REPLY_LEN];
	char hex[SHA256_HEX_LEN + 1];
	uint64_t count = 0, bad_at = 0;
	sha256_ctx sha;
	int err;

	sha256_init(&sha);
	err = read_stream(fd, stream, &count, &sha, &bad_at);
	if (err == EILSEQ) {
		say("server: %c %u byte %llu differs from the stream", role, idx, (unsigned long long)bad_at);
		return 1;
	}
	if (err) {
		say("server: %c %u read after %llu bytes: %s", role, idx, (unsigned long long)count,
		    strerror(err));
		return 1;
	}
	put_be64(reply, count);
	sha256_final(&sha, reply + 8);
	err = write_all(fd, reply, sizeof(reply));
	say("server: %c %u received %llu bytes sha256=%s%s%s", role, idx, (unsigned long long)count,
	    hex_of(reply + 8, hex), err ? ", answer: " : "", err ? err_text(err) : "");
	return err != 0;
}

static int serve_w(int fd, uint32_t idx)
{
	uint8_t trailer[REPLY_LEN];
	sha256_ctx sha;
	uint64_t count, rest;
	int err;

	sha256_init(&sha);
	count = fill_until_stalled(fd, STREAM_W(idx), &sha, &err);
	if (err) {
		say("server: W %u write after %llu bytes: %s", idx, (unsigned long long)count,
		    err == EFBIG ? "1 GiB written and the window never filled" : strerror(err));
		return 1;
	}
	say("server: W %u stalled after %llu bytes", idx, (unsigned long long)count);
	srv_bump(&srv.w_stalled);
	if (!srv_wait(&srv.busy_done, 1)) {
		say("server: W %u no busy stream ended within %d s", idx, WAIT_SECS);
		return 1;
	}
	set_nonblock(fd, 0);
	put_be64(trailer, count);
	sha256_final(&sha, trailer + 8);
	err = write_all(fd, trailer, sizeof(trailer));
	if (!err && shutdown(fd, SHUT_WR) != 0)
		err = errno;
	if (!err)
		err = echo_to_eof(fd, &rest);
	if (!err && rest)
		err = EPROTO;
	say("server: W %u resumed, %llu bytes and the trailer written%s%s", idx,
	    (unsigned long long)count, err ? ": " : "", err ? strerror(err) : "");
	return err != 0;
}

static int serve_e(int fd, uint32_t writers)
{
	uint64_t count = 0;
	int err;

	if (!srv_wait(&srv.w_stalled, (int)writers)) {
		say("server: E only %d of %u W streams stalled within %d s", srv.w_stalled, writers, WAIT_SECS);
		return 1;
	}
	err = write_all(fd, "G", 1);
	if (!err)
		err = echo_to_eof(fd, &count);
	srv_bump(&srv.busy_done);
	say("server: E echoed %llu bytes%s%s", (unsigned long long)count, err ? ": " : "",
	    err ? strerror(err) : "");
	return err != 0;
}

/* The bulk pattern: bytes 0..BULK_BLOCK-1 of the stream, the stream's byte
 * p being block[p % BULK_BLOCK]. */
static uint8_t *bulk_block(uint32_t idx)
{
	uint8_t *b = malloc(BULK_BLOCK);

	if (b)
		seedpat_fill(STREAM_B(idx), 0, b, BULK_BLOCK);
	return b;
}

static int serve_b(int fd, uint32_t idx)
{
	uint8_t buf[CHUNK], reply[BULK_REPLY], *block = bulk_block(idx);
	uint64_t count = 0, bad_at = NO_BAD;
	int err = 0;

	if (!block) {
		say("server: B %u: out of memory", idx);
		return 1;
	}
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : 0;
			break;
		}
		for (size_t done = 0; done < (size_t)n && bad_at == NO_BAD;) {
			size_t at = (size_t)((count + done) % BULK_BLOCK), len = (size_t)n - done;

			if (len > BULK_BLOCK - at)
				len = BULK_BLOCK - at;
			if (memcmp(buf + done, block + at, len) != 0)
				for (size_t i = 0; i < len; i++)
					if (buf[done + i] != block[at + i]) {
						bad_at = count + done + i;
						break;
					}
			done += len;
		}
		count += (uint64_t)n;
	}
	free(block);
	if (err) {
		say("server: B %u read after %llu bytes: %s", idx, (unsigned long long)count, strerror(err));
		return 1;
	}
	put_be64(reply, count);
	put_be64(reply + 8, bad_at);
	err = write_all(fd, reply, sizeof(reply));
	if (bad_at != NO_BAD)
		say("server: B %u byte %llu of %llu differs from the pattern", idx, (unsigned long long)bad_at,
		    (unsigned long long)count);
	else
		say("server: B %u received %llu bytes, every byte as sent%s%s", idx, (unsigned long long)count,
		    err ? ", answer: " : "", err ? err_text(err) : "");
	return err != 0 || bad_at != NO_BAD;
}

static void *serve_main(void *arg)
{
	int fd = (int)(intptr_t)arg, bad = 0, err;
	uint8_t h[HDR_LEN];
	uint32_t idx = 0, param = 0;
	uint64_t count;

	err = read_all(fd, h, sizeof(h));
	if (err) {
		say("server: header: %s", err_text(err));
		bad = 1;
	} else {
		idx = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
		param = (uint32_t)h[8] << 24 | (uint32_t)h[9] << 16 | (uint32_t)h[10] << 8 | h[11];
		switch (h[0]) {
		case 'S':
			if (!srv_wait(&srv.busy_done, 1)) {
				say("server: S %u no busy stream ended within %d s", idx, WAIT_SECS);
				bad = 1;
				break;
			}
			bad = sink_and_answer(fd, 'S', idx, STREAM_S(idx));
			break;
		case 'W':
			bad = serve_w(fd, idx);
			break;
		case 'E':
			bad = serve_e(fd, param);
			break;
		case 'I':
			err = echo_to_eof(fd, &count);
			if (err) {
				say("server: I %u: %s", idx, strerror(err));
				bad = 1;
			}
			break;
		case 'B':
			bad = serve_b(fd, idx);
			break;
		default:
			say("server: unknown role 0x%02x", h[0]);
			bad = 1;
		}
	}
	close(fd);
	pthread_mutex_lock(&srv.lock);
	srv.ended++;
	srv.failed += bad;
	pthread_cond_broadcast(&srv.cond);
	pthread_mutex_unlock(&srv.lock);
	return NULL;
}

static int server(const char *addr, const char *port, int count)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	int one = 1, lfd, err = getaddrinfo(addr, port, &hints, &ai);
	pthread_attr_t attr;

	if (err)
		fail("address %s port %s: %s", addr ? addr : "*", port, gai_strerror(err));
	lfd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (lfd < 0)
		fail("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, SOMAXCONN) != 0)
		fail("bind/listen: %s", strerror(errno));
	freeaddrinfo(ai);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 512 << 10);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	say("listening on %s", port);
	for (int accepted = 0; count == 0 || accepted < count; accepted++) {
		pthread_t t;
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0)
			fail("accept: %s", strerror(errno));
		if (pthread_create(&t, &attr, serve_main, (void *)(intptr_t)fd) != 0)
			fail("pthread_create after %d connections", accepted);
	}
	pthread_mutex_lock(&srv.lock);
	while (srv.ended < count)
		pthread_cond_wait(&srv.cond, &srv.lock);
	pthread_mutex_unlock(&srv.lock);
	close(lfd);
	say("server: %d connections, %d failed", count, srv.failed);
	return srv.failed ? 1 : 0;
}

/* --- client ------------------------------------------------------------------ */

static struct addrinfo *peer;

static int dial(char role, uint32_t idx, uint32_t param)
{
	uint8_t h[HDR_LEN] = { (uint8_t)role, 0, 0, 0,
			       (uint8_t)(idx >> 24), (uint8_t)(idx >> 16), (uint8_t)(idx >> 8), (uint8_t)idx,
			       (uint8_t)(param >> 24), (uint8_t)(param >> 16), (uint8_t)(param >> 8),
			       (uint8_t)param };
	int fd = socket(peer->ai_family, SOCK_STREAM, 0), err;

	if (fd < 0)
		fail("%c %u: socket: %s", role, idx, strerror(errno));
	if (connect(fd, peer->ai_addr, peer->ai_addrlen) != 0)
		fail("%c %u: connect: %s", role, idx, strerror(errno));
	err = write_all(fd, h, sizeof(h));
	if (err)
		fail("%c %u: header: %s", role, idx, strerror(err));
	return fd;
}

/* Reads the server's count and SHA-256 and compares them with what was sent
 * (sha: of the bytes sent; finalised into mine). */
static void reply_check(int fd, char role, uint32_t idx, uint64_t count, sha256_ctx *sha,
			uint8_t mine[SHA256_DIGEST_LEN])
{
	uint8_t reply[REPLY_LEN];
	int err = read_all(fd, reply, sizeof(reply));

	if (err)
		fail("%c %u: the server's answer: %s", role, idx, err_text(err));
	sha256_final(sha, mine);
	if (get_be64(reply) != count)
		fail("%c %u: the server received %llu bytes, %llu were sent", role, idx,
		     (unsigned long long)get_be64(reply), (unsigned long long)count);
	if (memcmp(reply + 8, mine, SHA256_DIGEST_LEN) != 0)
		fail("%c %u: the server's SHA-256 of %llu bytes differs from the sender's", role, idx,
		     (unsigned long long)count);
}

/* The E stream: BYTES echoed through one fd, writing and reading at once. */
static void busy_echo(int fd, size_t bytes, int secs)
{
	uint8_t buf[CHUNK], d[SHA256_DIGEST_LEN];
	char hex[SHA256_HEX_LEN + 1];
	size_t sent = 0, got = 0;
	double t0, deadline, ms;
	sha256_ctx sha;
	char g;
	int err;

	t0 = prog_mono_ms();
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (poll(&p, 1, (WAIT_SECS + 10) * 1000) != 1)
			fail("busy: no 'G' from the server within %d s: its W streams never stalled, or "
			     "the 'G' waits behind them", WAIT_SECS + 10);
	}
	err = read_all(fd, &g, 1);
	if (err || g != 'G')
		fail("busy: expected 'G', got %s", err ? err_text(err) : "another byte");
	say("busy: go after %.0f ms", prog_mono_ms() - t0);
	sha256_init(&sha);
	set_nonblock(fd, 1);
	t0 = prog_mono_ms();
	deadline = t0 + secs * 1000.0;
	while (got < bytes) {
		struct pollfd p = { .fd = fd, .events = POLLIN | (sent < bytes ? POLLOUT : 0) };
		double left = deadline - prog_mono_ms();
		int n;

		if (left <= 0)
			fail("busy: only %zu of %zu bytes echoed (%zu sent) after %d s: the stream stalls "
			     "behind the stopped ones", got, bytes, sent, secs);
		n = poll(&p, 1, (int)left + 1);
		if (n < 0 && errno != EINTR)
			fail("busy: poll: %s", strerror(errno));
		if (n <= 0)
			continue;
		if ((p.revents & POLLOUT) && sent < bytes) {
			size_t len = bytes - sent < sizeof(buf) ? bytes - sent : sizeof(buf);
			ssize_t w;

			seedpat_fill(STREAM_E, sent, buf, len);
			w = write(fd, buf, len);
			if (w > 0)
				sent += (size_t)w;
			else if (w == 0 || (errno != EAGAIN && errno != EINTR))
				fail("busy: write after %zu bytes: %s", sent, w ? strerror(errno) : "0 bytes");
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = read(fd, buf, sizeof(buf));
			long bad;

			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r <= 0)
				fail("busy: read after %zu echoed bytes: %s", got, r ? strerror(errno) : "EOF");
			if (got + (size_t)r > sent)
				fail("busy: %zu bytes echoed, only %zu sent", got + (size_t)r, sent);
			bad = seedpat_check(STREAM_E, got, buf, (size_t)r);
			if (bad >= 0)
				fail("busy: echoed byte %zu differs from the one sent", got + (size_t)bad);
			sha256_update(&sha, buf, (size_t)r);
			got += (size_t)r;
		}
	}
	ms = prog_mono_ms() - t0;
	sha256_final(&sha, d);
	say("busy: echoed %zu bytes in %.0f ms = %.2f MB/s sha256=%s ok", bytes, ms,
	    ms > 0 ? bytes / ms / 1000.0 : 0.0, hex_of(d, hex));
	set_nonblock(fd, 0);
	if (shutdown(fd, SHUT_WR) != 0)
		fail("busy: shutdown: %s", strerror(errno));
	err = read_all(fd, &g, 1);
	if (err != ENODATA)
		fail("busy: expected EOF after the echo, got %s", err ? err_text(err) : "a byte");
	close(fd);
}

static int client_hol(int stopped, size_t bytes, int secs)
{
	int *s = calloc((size_t)stopped + 1, sizeof(int)), *w = calloc((size_t)stopped + 1, sizeof(int));
	uint64_t *s_sent = calloc((size_t)stopped + 1, sizeof(uint64_t));
	sha256_ctx *s_sha = calloc((size_t)stopped + 1, sizeof(sha256_ctx));
	char hex[SHA256_HEX_LEN + 1];

	if (!s || !w || !s_sent || !s_sha)
		fail("out of memory");
	/* The server's readers stop: fill each window. */
	for (int i = 0; i < stopped; i++) {
		int err;

		s[i] = dial('S', (uint32_t)i, 0);
		sha256_init(&s_sha[i]);
		s_sent[i] = fill_until_stalled(s[i], STREAM_S(i), &s_sha[i], &err);
		if (err)
			fail("S %d: write after %llu bytes: %s", i, (unsigned long long)s_sent[i],
			     err == EFBIG ? "1 GiB written and the window never filled" : strerror(err));
		say("stopped S %d: window full after %llu bytes", i, (unsigned long long)s_sent[i]);
	}
	/* Our readers stop: the server fills these. */
	for (int i = 0; i < stopped; i++)
		w[i] = dial('W', (uint32_t)i, 0);
	busy_echo(dial('E', 0, (uint32_t)stopped), bytes, secs);

	/* The stopped streams resume, every byte accounted for. */
	for (int i = 0; i < stopped; i++) {
		uint8_t d[SHA256_DIGEST_LEN];

		set_nonblock(s[i], 0);
		if (shutdown(s[i], SHUT_WR) != 0)
			fail("S %d: shutdown: %s", i, strerror(errno));
		reply_check(s[i], 'S', (uint32_t)i, s_sent[i], &s_sha[i], d);
		say("stopped S %d: server received %llu bytes sha256=%s ok", i, (unsigned long long)s_sent[i],
		    hex_of(d, hex));
		close(s[i]);
	}
	for (int i = 0; i < stopped; i++) {
		uint8_t buf[CHUNK], tail[REPLY_LEN], d[SHA256_DIGEST_LEN];
		uint64_t got = 0; /* stream bytes checked; the last REPLY_LEN read are held back */
		size_t held = 0;
		sha256_ctx sha;

		sha256_init(&sha);
		for (;;) {
			ssize_t r = read(w[i], buf, sizeof(buf));
			size_t n, pass;
			long bad;

			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				fail("W %d: read after %llu bytes: %s", i, (unsigned long long)got, strerror(errno));
			if (r == 0)
				break;
			/* held + r bytes pending; all but the last REPLY_LEN are stream bytes */
			n = (size_t)r;
			if (held + n <= REPLY_LEN) {
				memcpy(tail + held, buf, n);
				held += n;
				continue;
			}
			pass = held + n - REPLY_LEN;
			{
				uint8_t merged[REPLY_LEN + CHUNK];

				memcpy(merged, tail, held);
				memcpy(merged + held, buf, n);
				bad = seedpat_check(STREAM_W(i), got, merged, pass);
				if (bad >= 0)
					fail("W %d: byte %llu differs from the server's stream", i,
					     (unsigned long long)(got + (uint64_t)bad));
				sha256_update(&sha, merged, pass);
				got += pass;
				memcpy(tail, merged + pass, REPLY_LEN);
				held = REPLY_LEN;
			}
		}
		if (held < REPLY_LEN)
			fail("W %d: EOF after %llu bytes, before the server's trailer", i,
			     (unsigned long long)(got + held));
		sha256_final(&sha, d);
		if (get_be64(tail) != got)
			fail("W %d: received %llu stream bytes, the server wrote %llu", i,
			     (unsigned long long)got, (unsigned long long)get_be64(tail));
		if (memcmp(tail + 8, d, sizeof(d)) != 0)
			fail("W %d: SHA-256 of the %llu bytes received differs from the server's", i,
			     (unsigned long long)got);
		say("stopped W %d: received %llu bytes sha256=%s ok", i, (unsigned long long)got, hex_of(d, hex));
		shutdown(w[i], SHUT_WR);
		close(w[i]);
	}
	say("ok hol stopped=%d bytes=%zu", stopped, bytes);
	free(s);
	free(w);
	free(s_sent);
	free(s_sha);
	return 0;
}

static void idle_ping(int fd, int i, int round)
{
	uint8_t out[IDLE_PING], in[IDLE_PING];
	int err;

	seedpat_fill(STREAM_I((uint64_t)i), (uint64_t)round * IDLE_PING, out, sizeof(out));
	err = write_all(fd, out, sizeof(out));
	if (!err)
		err = read_all(fd, in, sizeof(in));
	if (err)
		fail("I %d: echo %d: %s", i, round, err_text(err));
	if (memcmp(in, out, sizeof(in)) != 0)
		fail("I %d: echo %d differs", i, round);
}

static int client_idle(int idle, size_t bytes)
{
	int *fds = calloc((size_t)idle + 1, sizeof(int)), b;
	uint8_t *block;
	double t0, ms;

	if (!fds)
		fail("out of memory");
	t0 = prog_mono_ms();
	for (int i = 0; i < idle; i++) {
		fds[i] = dial('I', (uint32_t)i, 0);
		idle_ping(fds[i], i, 0);
	}
	say("idle: %d connections up in %.0f ms", idle, prog_mono_ms() - t0);

	block = bulk_block(0);
	if (!block)
		fail("out of memory");
	b = dial('B', 0, 0);
	t0 = prog_mono_ms();
	for (size_t off = 0; off < bytes;) {
		size_t at = off % BULK_BLOCK, len = bytes - off;
		int err;

		if (len > CHUNK)
			len = CHUNK;
		if (len > BULK_BLOCK - at)
			len = BULK_BLOCK - at;
		err = write_all(b, block + at, len);
		if (err)
			fail("busy: write after %zu bytes: %s", off, strerror(err));
		off += len;
	}
	if (shutdown(b, SHUT_WR) != 0)
		fail("busy: shutdown: %s", strerror(errno));
	{
		uint8_t reply[BULK_REPLY];
		int err = read_all(b, reply, sizeof(reply));

		ms = prog_mono_ms() - t0;
		if (err)
			fail("busy: the server's answer: %s", err_text(err));
		if (get_be64(reply) != bytes)
			fail("busy: the server received %llu bytes, %zu were sent",
			     (unsigned long long)get_be64(reply), bytes);
		if (get_be64(reply + 8) != NO_BAD)
			fail("busy: the server found byte %llu different from the one sent",
			     (unsigned long long)get_be64(reply + 8));
	}
	say("busy: %zu bytes in %.0f ms = %.2f MB/s with %d idle connections, every byte checked ok", bytes,
	    ms, ms > 0 ? bytes / ms / 1000.0 : 0.0, idle);
	free(block);
	close(b);

	for (int i = 0; i < idle; i++) {
		uint8_t c;

		idle_ping(fds[i], i, 1);
		shutdown(fds[i], SHUT_WR);
		if (read_all(fds[i], &c, 1) != ENODATA)
			fail("I %d: expected EOF", i);
		close(fds[i]);
	}
	say("ok idle=%d bytes=%zu", idle, bytes);
	free(fds);
	return 0;
}

int main(int argc, char **argv)
{
	const char *host = NULL, *addr = NULL, *port = NULL, *mode = NULL;
	long conns = 0, k = -1, secs = 60;
	size_t bytes = 0;
	int o, serve = 0, have_bytes = 0;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };

	signal(SIGPIPE, SIG_IGN);
	while ((o = getopt(argc, argv, "s:a:n:c:p:m:k:b:t:S:")) != -1) {
		switch (o) {
		case 's': serve = 1; number(optarg, 1, 65535); port = optarg; break;
		case 'a': addr = optarg; break;
		case 'n': conns = number(optarg, 1, 1000000); break;
		case 'c': host = optarg; break;
		case 'p': number(optarg, 1, 65535); port = optarg; break;
		case 'm': mode = optarg; break;
		case 'k': k = number(optarg, 0, 1000000); break;
		case 'b': bytes = (size_t)number(optarg, 1, 1L << 40); have_bytes = 1; break;
		case 't': secs = number(optarg, 1, 86400); break;
		case 'S': stall_ms = (int)number(optarg, 10, 600000); break;
		default: usage();
		}
	}
	if (optind != argc || !port)
		usage();
	signal(SIGALRM, on_alarm);
	alarm(GUARD_SECS);
	raise_nofile();
	if (serve)
		return server(addr, port, (int)conns);
	if (!host || !mode)
		usage();
	{
		struct rlimit rl = { 0, 0 };

		getrlimit(RLIMIT_NOFILE, &rl);
		say("start pid=%d uid=%d nofile=%llu", (int)getpid(), (int)getuid(),
		    (unsigned long long)rl.rlim_cur);
	}
	if (getaddrinfo(host, port, &hints, &peer) != 0)
		fail("address %s port %s", host, port);
	if (strcmp(mode, "hol") == 0)
		return client_hol(k < 0 ? 4 : (int)k, have_bytes ? bytes : 4u << 20, (int)secs);
	if (strcmp(mode, "idle") == 0)
		return client_idle(k < 0 ? 1000 : (int)k, have_bytes ? bytes : 64u << 20);
	usage();
}
