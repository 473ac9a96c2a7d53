/* zctest: zero-copy edge cases.  The sender writes numbered blocks from
 * buffers whose pages it changes between sends (munmap and map again, free
 * and malloc again, realloc, madvise(DONTNEED)); every block carries its own
 * pattern, so a registration cache that kept stale pages shows up as wrong
 * bytes at the receiver.  The receiver can also stop early (close with data
 * unread) to exercise cancels.
 *   zctest recv PORT COUNT BLOCK [STOP_AFTER_BYTES]
 *   zctest send HOST PORT COUNT BLOCK CASE     CASE: same|munmap|free|realloc|madvise
 * A sender whose write fails prints the error, closes the socket and, with
 * ZCTEST_HOLD_S set, stays alive that long so a test can count its MRs.
 * ZCTEST_READ_CHUNK=N: the receiver reads at most N bytes per call.
 * ZCTEST_SEND_DELAY_MS=N: the sender waits N ms after connecting.
 * ZCTEST_GO_FILE=PATH: the sender prints "connected", then waits (120 s at
 * most) until PATH exists before its first write (a test that wants every
 * block on the open channel creates it once the connection shows path=rdma). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"

static void die(const char *what)
{
	fprintf(stderr, "zctest: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* Block i's bytes: a pattern no other block shares. */
static void fill_block(uint8_t *buf, size_t len, unsigned i)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL * (i + 1);

	for (size_t k = 0; k < len; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[k] = (uint8_t)x;
	}
}

/* Returns 0, or the errno of the failed write. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_failed(int fd, unsigned block_no, int err)
{
	const char *hold = getenv("ZCTEST_HOLD_S");

	printf("zctest: write of block %u failed: %s\n", block_no, strerror(err));
	fflush(stdout);
	close(fd);
	if (hold)
		sleep((unsigned)atoi(hold));
	return 3;
}

/* ZCTEST_READ_CHUNK caps each read() (a reader with less room than the
 * zero-copy threshold never offers a sink: the sender's SrcAvail is READ).
 * ZCTEST_READ_PAUSE_US sleeps after each read: a paced reader, so that a
 * transfer is still in its READs when the test kills the reader. */
static size_t read_full(int fd, uint8_t *buf, size_t len)
{
	const char *chunk_env = getenv("ZCTEST_READ_CHUNK");
	const char *pause_env = getenv("ZCTEST_READ_PAUSE_US");
	size_t chunk = chunk_env ? (size_t)atol(chunk_env) : 0, got = 0;
	useconds_t pause_us = pause_env ? (useconds_t)atol(pause_env) : 0;

	while (got < len) {
		size_t ask = chunk && chunk < len - got ? chunk : len - got;
		ssize_t n = read(fd, buf + got, ask);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read");
		if (n == 0)
			break;
		got += (size_t)n;
		if (pause_us)
			usleep(pause_us);
	}
	return got;
}

/* The buffer the sender uses for block i, after the case's page change. */
static uint8_t *next_buffer(uint8_t *buf, size_t len, unsigned i, const char *kase)
{
	if (i == 0 || !strcmp(kase, "same"))
		return buf ? buf : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!strcmp(kase, "munmap")) {
		/* Same address, new pages: the old ones stay pinned by any stale MR. */
		munmap(buf, len);
		return mmap(buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	}
	if (!strcmp(kase, "free")) {
		free(buf);
		return malloc(len); /* glibc usually hands back the same address */
	}
	if (!strcmp(kase, "realloc"))
		return realloc(buf, len + (i % 2 ? 4096 * 64 : 0));
	if (!strcmp(kase, "madvise")) {
		madvise(buf, len, MADV_DONTNEED); /* next touch maps fresh zero pages */
		return buf;
	}
	fprintf(stderr, "zctest: unknown case %s\n", kase);
	exit(2);
}

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int fd;

	if (getaddrinfo(host, port, &hints, &ai) != 0) {
		fprintf(stderr, "zctest: cannot resolve %s\n", host);
		exit(2);
	}
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
		die("connect");
	freeaddrinfo(ai);
	return fd;
}

/* ZCTEST_SEND_DELAY_MS: the sender waits this long after connecting before
 * its first write (so a receiver already blocked in a large read offers its
 * sink first: the SinkAvail case needs that order, not a race for it). */
static void send_delay(void)
{
	const char *ms = getenv("ZCTEST_SEND_DELAY_MS");
	long v = ms ? strtol(ms, NULL, 10) : 0;

	if (v > 0)
		nanosleep(&(struct timespec){ v / 1000, (v % 1000) * 1000000L }, NULL);
}

/* ZCTEST_GO_FILE: waits until the test says go (or gives up after 120 s). */
static void wait_go_file(void)
{
	const char *path = getenv("ZCTEST_GO_FILE");

	if (!path)
		return;
	printf("zctest: connected\n");
	fflush(stdout);
	for (int i = 0; i < 1200 && access(path, F_OK) != 0; i++)
		nanosleep(&(struct timespec){ 0, 100 * 1000000L }, NULL);
}

static int do_send(const char *host, const char *port, unsigned count, size_t block, const char *kase)
{
	int fd = connect_to(host, port);

	send_delay();
	wait_go_file();
	uint8_t *buf = NULL;
	char verdict = 0;

	if (!strcmp(kase, "free") || !strcmp(kase, "realloc"))
		buf = malloc(block);
	for (unsigned i = 0; i < count; i++) {
		buf = next_buffer(buf, block, i, kase);
		if (!buf || buf == MAP_FAILED)
			die("buffer");
		fill_block(buf, block, i);
		int err = write_all(fd, buf, block);
		if (err)
			return send_failed(fd, i, err);
	}
	shutdown(fd, SHUT_WR);
	if (read(fd, &verdict, 1) != 1 || verdict != 'K') {
		fprintf(stderr, "zctest: receiver reported wrong bytes\n");
		return 1;
	}
	printf("zctest: sent %u blocks of %zu bytes (%s), receiver verified\n", count, block, kase);
	return 0;
}

static int accept_one(const char *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0), fd;

	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 4))
		die("listen");
	printf("zctest: listening on %s\n", port);
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(lfd);
	return fd;
}

static int do_recv(const char *port, unsigned count, size_t block, long long stop_after)
{
	uint8_t *got = malloc(block), *want = malloc(block);
	int fd = accept_one(port), bad = 0;

	if (!got || !want)
		die("malloc");
	if (stop_after >= 0) {
		/* Read a little, then close with the rest unread: the sender must
		 * see a reset, never hang. */
		size_t n = read_full(fd, got, (size_t)stop_after < block ? (size_t)stop_after : block);
		printf("zctest: read %zu bytes, closing with data unread\n", n);
		close(fd);
		return 0;
	}
	for (unsigned i = 0; i < count; i++) {
		size_t n = read_full(fd, got, block);
		fill_block(want, block, i);
		if (n != block || memcmp(got, want, block) != 0) {
			fprintf(stderr, "zctest: block %u wrong (%zu bytes)\n", i, n);
			bad = 1;
			break;
		}
	}
	if (write_all(fd, (const uint8_t *)(bad ? "F" : "K"), 1) != 0)
		die("write");
	printf("zctest: received %u blocks of %zu bytes: %s\n", count, block, bad ? "WRONG" : "OK");
	close(fd);
	return bad;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 5 && !strcmp(argv[1], "recv"))
		return do_recv(argv[2], (unsigned)atoi(argv[3]), (size_t)atol(argv[4]),
			       argc > 5 ? atoll(argv[5]) : -1);
	if (argc == 7 && !strcmp(argv[1], "send"))
		return do_send(argv[2], argv[3], (unsigned)atoi(argv[4]), (size_t)atol(argv[5]),
			       argv[6]);
	fprintf(stderr, "usage: zctest recv PORT COUNT BLOCK [STOP_AFTER_BYTES]\n"
			"       zctest send HOST PORT COUNT BLOCK same|munmap|free|realloc|madvise\n");
	return 2;
}
