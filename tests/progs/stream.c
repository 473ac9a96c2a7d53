/* stream: a byte-exact TCP stream checker for the test suites.  The client
 * sends a header naming the byte count, direction and seed; both ends
 * generate the same pseudo-random stream, write it in messages of random
 * sizes (1 byte to -m), and the receiver compares every byte and prints the
 * SHA-256 of what it received.  -e picks blocking I/O or a readiness API.
 * STREAM_READ_MAX / STREAM_READ_PAUSE_US make the receiver slow; -t SECS
 * paces the sender to take at least that long. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "progutil.h"

#define MAGIC 0x5354524dU /* "STRM" */

enum dir { DIR_UP = 1, DIR_DOWN = 2, DIR_BOTH = 3 };
enum io_mode { IO_BLOCK, IO_POLL, IO_SELECT, IO_EPOLL, IO_EPOLL_ET };

struct header {
	uint32_t magic, dir;
	uint64_t bytes, seed;
	uint32_t max_msg, flags; /* flags bit 0: fixed-size writes (-F) */
};

static struct {
	enum io_mode mode;
	size_t max_msg;
	int quiet;
	int fixed; /* -F: every write is exactly max_msg bytes */
	unsigned min_secs; /* -t: a sender paces itself to take at least this long */
} opt = { IO_BLOCK, 65536, 0, 0, 0 };

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t stream_word(uint64_t seed, uint64_t word_index)
{
	uint64_t s = seed ^ (word_index * 0x2545f4914f6cdd1dULL);

	return splitmix(&s);
}

/* Byte pos of the stream is byte (pos % 8) of word pos / 8, least
 * significant first: a pure function of (seed, pos), so any offset checks. */
static uint8_t stream_byte(uint64_t seed, uint64_t pos)
{
	return (uint8_t)(stream_word(seed, pos / 8) >> (8 * (pos % 8)));
}

/* Bytes off..off+len of the stream; whole words at a time where aligned. */
static void fill(uint64_t seed, uint64_t off, uint8_t *buf, size_t len)
{
	size_t i = 0;

	for (; i < len && (off + i) % 8; i++)
		buf[i] = stream_byte(seed, off + i);
	for (; len - i >= 8; i += 8) {
		uint64_t w = htole64(stream_word(seed, (off + i) / 8));
		memcpy(buf + i, &w, 8);
	}
	for (; i < len; i++)
		buf[i] = stream_byte(seed, off + i);
}

/* Message sizes: mostly small, sometimes up to max (1 byte to 1 MiB). */
static size_t next_size(uint64_t *s, size_t max)
{
	uint64_t r = splitmix(s);
	size_t cap;

	switch (r & 3) {
	case 0: cap = 16; break;
	case 1: cap = 1024; break;
	case 2: cap = 65536; break;
	default: cap = max; break;
	}
	if (cap > max)
		cap = max;
	return 1 + (size_t)((r >> 8) % cap);
}

static void die(const char *what)
{
	fprintf(stderr, "stream: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void wait_ready(int fd, int for_write)
{
	static __thread int epfd = -1; /* per thread: two epoll sets on one socket */
	struct epoll_event ev;
	int rc = 1;

	switch (opt.mode) {
	case IO_BLOCK:
		return;
	case IO_POLL: {
		struct pollfd p = { fd, (short)(for_write ? POLLOUT : POLLIN), 0 };
		rc = poll(&p, 1, 60000);
		break;
	}
	case IO_SELECT: {
		fd_set set;
		struct timeval tv = { 60, 0 };
		FD_ZERO(&set);
		FD_SET(fd, &set);
		rc = select(fd + 1, for_write ? NULL : &set, for_write ? &set : NULL, NULL, &tv);
		break;
	}
	case IO_EPOLL:
	case IO_EPOLL_ET:
		if (epfd < 0) {
			epfd = epoll_create1(0);
			ev.events = EPOLLIN | EPOLLOUT | (opt.mode == IO_EPOLL_ET ? EPOLLET : 0);
			ev.data.fd = fd;
			if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
				die("epoll");
		}
		if (opt.mode == IO_EPOLL) {
			ev.events = for_write ? EPOLLOUT : EPOLLIN;
			ev.data.fd = fd;
			epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
		}
		rc = epoll_wait(epfd, &ev, 1, 60000);
		break;
	}
	if (rc == 0) {
		fprintf(stderr, "stream: no readiness for 60 s (%s)\n", for_write ? "write" : "read");
		exit(3);
	}
	if (rc < 0 && errno != EINTR)
		die("wait");
}

static void set_nonblock(int fd)
{
	if (opt.mode != IO_BLOCK)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void write_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			wait_ready(fd, 1);
			continue;
		}
		if (n <= 0)
			die("write");
		buf += n;
		len -= (size_t)n;
	}
}

static size_t read_some(int fd, uint8_t *buf, size_t len)
{
	for (;;) {
		ssize_t n = read(fd, buf, len);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			wait_ready(fd, 0);
			continue;
		}
		if (n < 0)
			die("read");
		return (size_t)n;
	}
}

static void read_exact(int fd, void *buf, size_t len)
{
	while (len) {
		size_t n = read_some(fd, buf, len);
		if (n == 0) {
			fprintf(stderr, "stream: unexpected EOF in header\n");
			exit(4);
		}
		buf = (uint8_t *)buf + n;
		len -= n;
	}
}

/* -t: sleeps while the bytes sent so far are ahead of an even pace over
 * opt.min_secs, so that a test can act on the stream before it ends. */
static void pace(double start_ms, uint64_t sent, uint64_t total)
{
	double due_ms, now;

	if (!opt.min_secs || !total)
		return;
	due_ms = start_ms + (double)sent / (double)total * opt.min_secs * 1000.0;
	now = prog_mono_ms();
	if (due_ms > now)
		usleep((useconds_t)((due_ms - now) * 1000));
}

static void send_stream(int fd, const struct header *h)
{
	uint8_t *buf = malloc(h->max_msg);
	uint64_t sizes = h->seed ^ 0x51ed, off = 0;
	double start_ms = prog_mono_ms();

	if (!buf)
		die("malloc");
	while (off < h->bytes) {
		size_t len = (h->flags & 1) ? h->max_msg : next_size(&sizes, h->max_msg);
		if (len > h->bytes - off)
			len = (size_t)(h->bytes - off);
		fill(h->seed, off, buf, len);
		write_all(fd, buf, len);
		off += len;
		pace(start_ms, off, h->bytes);
	}
	free(buf);
}

/* The receiver's check runs in a second thread, a few chunks behind its
 * reads, so checking and hashing a chunk overlaps with receiving the next
 * one (with zero-copy, a sender's write waits for the receiver's read). */
#define CHECK_CHUNKS 4
#define CHUNK_CAP (1u << 20)

struct checker {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint8_t *chunk[CHECK_CHUNKS];
	size_t len[CHECK_CHUNKS];
	unsigned filled, checked; /* chunks handed over / verified, ever */
	bool eof;                 /* no chunk will follow */
	bool mismatch;
	uint64_t mismatch_at;
	uint64_t seed, off;       /* the checker's own position */
	sha256_ctx sha;
};

static void *checker_main(void *p)
{
	struct checker *k = p;
	uint8_t *want = malloc(CHUNK_CAP);

	if (!want)
		die("malloc");
	pthread_mutex_lock(&k->lock);
	for (;;) {
		while (k->checked == k->filled && !k->eof)
			pthread_cond_wait(&k->cond, &k->lock);
		if (k->checked == k->filled)
			break;
		unsigned slot = k->checked % CHECK_CHUNKS;
		const uint8_t *got = k->chunk[slot];
		size_t n = k->len[slot];
		pthread_mutex_unlock(&k->lock);

		fill(k->seed, k->off, want, n);
		if (memcmp(got, want, n) != 0) {
			size_t i = 0;
			while (got[i] == want[i])
				i++;
			pthread_mutex_lock(&k->lock);
			k->mismatch = true;
			k->mismatch_at = k->off + i;
			pthread_cond_broadcast(&k->cond);
			break;
		}
		sha256_update(&k->sha, got, n);
		k->off += n;
		pthread_mutex_lock(&k->lock);
		k->checked++;
		pthread_cond_broadcast(&k->cond);
	}
	pthread_mutex_unlock(&k->lock);
	free(want);
	return NULL;
}

/* The reader's side: a free chunk, or NULL once the checker found a mismatch. */
static uint8_t *checker_free_chunk(struct checker *k)
{
	uint8_t *chunk = NULL;

	pthread_mutex_lock(&k->lock);
	while (k->filled - k->checked == CHECK_CHUNKS && !k->mismatch)
		pthread_cond_wait(&k->cond, &k->lock);
	if (!k->mismatch)
		chunk = k->chunk[k->filled % CHECK_CHUNKS];
	pthread_mutex_unlock(&k->lock);
	return chunk;
}

static void checker_hand_over(struct checker *k, size_t n, bool eof)
{
	pthread_mutex_lock(&k->lock);
	if (n)
		k->len[k->filled++ % CHECK_CHUNKS] = n;
	k->eof = eof;
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->lock);
}

/* Returns 0 if every byte matched. */
static int recv_stream(int fd, const struct header *h, const char *who)
{
	struct checker k = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
			     .seed = h->seed };
	pthread_t checker;
	uint64_t off = 0;
	uint8_t digest[32];
	char hex[65];
	int rc = 0;

	/* Test knobs for a slow reader (bytes pile up in the receive path):
	 * STREAM_READ_MAX caps each read, STREAM_READ_PAUSE_US sleeps after it. */
	const char *rmax = getenv("STREAM_READ_MAX"), *pause = getenv("STREAM_READ_PAUSE_US");
	size_t read_max = rmax ? strtoul(rmax, NULL, 0) : 0;
	unsigned pause_us = pause ? (unsigned)strtoul(pause, NULL, 0) : 0;

	if (read_max == 0 || read_max > CHUNK_CAP)
		read_max = CHUNK_CAP;
	for (int i = 0; i < CHECK_CHUNKS; i++)
		if (!(k.chunk[i] = malloc(CHUNK_CAP)))
			die("malloc");
	sha256_init(&k.sha);
	if (pthread_create(&checker, NULL, checker_main, &k) != 0)
		die("pthread_create");
	while (off < h->bytes) {
		size_t ask = h->bytes - off < read_max ? (size_t)(h->bytes - off) : read_max;
		uint8_t *chunk = checker_free_chunk(&k);
		size_t n;

		if (!chunk)
			break; /* mismatch: reported below */
		n = read_some(fd, chunk, ask);
		if (pause_us)
			usleep(pause_us);
		if (n == 0) {
			fprintf(stderr, "stream: %s: EOF after %llu of %llu bytes\n", who,
				(unsigned long long)off, (unsigned long long)h->bytes);
			rc = 5;
			break;
		}
		checker_hand_over(&k, n, false);
		off += n;
	}
	checker_hand_over(&k, 0, true);
	pthread_join(checker, NULL);
	for (int i = 0; i < CHECK_CHUNKS; i++)
		free(k.chunk[i]);
	if (k.mismatch) {
		fprintf(stderr, "stream: %s: MISMATCH at byte %llu\n", who,
			(unsigned long long)k.mismatch_at);
		return 6;
	}
	if (rc)
		return rc;
	sha256_final(&k.sha, digest);
	sha256_hex(digest, hex);
	printf("stream: %s received %llu bytes sha256=%s OK\n", who, (unsigned long long)off, hex);
	fflush(stdout);
	return 0;
}

struct writer_arg {
	int fd;
	struct header h;
};

static void *writer_main(void *p)
{
	struct writer_arg *w = p;

	send_stream(w->fd, &w->h);
	shutdown(w->fd, SHUT_WR);
	return NULL;
}

static int run_both(int fd, const struct header *h, int sending_dir, const char *who)
{
	struct writer_arg w = { fd, *h };
	struct header theirs = *h;
	pthread_t writer;
	int rc;

	/* Both directions at once: a writer thread and a reading main thread,
	 * so one socket is used by two threads concurrently. */
	w.h.seed ^= (uint64_t)sending_dir;
	if (pthread_create(&writer, NULL, writer_main, &w) != 0)
		die("pthread_create");
	theirs.seed ^= (uint64_t)(sending_dir == DIR_UP ? DIR_DOWN : DIR_UP);
	rc = recv_stream(fd, &theirs, who);
	pthread_join(writer, NULL);
	return rc;
}

static int serve_one(int fd)
{
	struct header h;
	char eof;
	int rc = 0;

	read_exact(fd, &h, sizeof(h));
	if (h.magic != MAGIC || h.max_msg == 0 || h.max_msg > (64u << 20)) {
		fprintf(stderr, "stream: bad header\n");
		return 8;
	}
	if (h.dir == DIR_UP)
		rc = recv_stream(fd, &h, "server");
	else if (h.dir == DIR_DOWN)
		send_stream(fd, &h);
	else
		rc = run_both(fd, &h, DIR_DOWN, "server");
	if (h.dir == DIR_UP)
		write_all(fd, (const uint8_t *)(rc ? "F" : "K"), 1); /* verdict to the client */
	shutdown(fd, SHUT_WR);
	while (read_some(fd, (uint8_t *)&eof, 1) > 0)
		;
	return rc;
}

static int listen_on(int port, int family)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port) };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, fd = socket(family, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6 ? bind(fd, (struct sockaddr *)&a6, sizeof(a6))
			       : bind(fd, (struct sockaddr *)&a4, sizeof(a4)))
		die("bind");
	if (listen(fd, 64))
		die("listen");
	return fd;
}

static int server(int port, int count, int family)
{
	int lfd = listen_on(port, family), failures = 0;

	printf("stream: listening on %d\n", port);
	fflush(stdout);
	for (int i = 0; count == 0 || i < count; i++) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			die("accept");
		set_nonblock(fd);
		failures += serve_one(fd) != 0;
		close(fd);
	}
	close(lfd);
	return failures ? 1 : 0;
}

static int connect_to(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int fd, err = getaddrinfo(host, port, &hints, &ai);

	if (err) {
		fprintf(stderr, "stream: %s: %s\n", host, gai_strerror(err));
		exit(2);
	}
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	set_nonblock(fd);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
		if (errno != EINPROGRESS)
			die("connect");
		int soerr = 0;
		socklen_t len = sizeof(soerr);
		wait_ready(fd, 1);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
		if (soerr) {
			errno = soerr;
			die("connect (non-blocking)");
		}
	}
	freeaddrinfo(ai);
	return fd;
}

static int client(const char *host, const char *port, uint64_t bytes, int dir, uint64_t seed)
{
	struct header h = { MAGIC, (uint32_t)dir, bytes, seed, (uint32_t)opt.max_msg,
			    (uint32_t)opt.fixed };
	int fd = connect_to(host, port), rc = 0;
	char verdict = 0;

	write_all(fd, (const uint8_t *)&h, sizeof(h));
	if (dir == DIR_UP) {
		send_stream(fd, &h);
		if (read_some(fd, (uint8_t *)&verdict, 1) != 1 || verdict != 'K') {
			fprintf(stderr, "stream: server reported a bad stream\n");
			rc = 9;
		} else {
			printf("stream: client sent %llu bytes, server verified\n",
			       (unsigned long long)bytes);
		}
	} else if (dir == DIR_DOWN) {
		rc = recv_stream(fd, &h, "client");
	} else {
		rc = run_both(fd, &h, DIR_UP, "client");
	}
	close(fd);
	return rc;
}

static enum io_mode parse_mode(const char *s)
{
	if (!strcmp(s, "block")) return IO_BLOCK;
	if (!strcmp(s, "poll")) return IO_POLL;
	if (!strcmp(s, "select")) return IO_SELECT;
	if (!strcmp(s, "epoll")) return IO_EPOLL;
	if (!strcmp(s, "epollet")) return IO_EPOLL_ET;
	fprintf(stderr, "stream: unknown -e %s\n", s);
	exit(2);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': return v << 10;
	case 'm': case 'M': return v << 20;
	case 'g': case 'G': return v << 30;
	default: return v;
	}
}

int main(int argc, char **argv)
{
	const char *host = NULL, *dirs = "up";
	int port = 0, count = 1, c, family = AF_INET, dir;
	uint64_t bytes = 1 << 20, seed = 1;

	signal(SIGPIPE, SIG_IGN);
	while ((c = getopt(argc, argv, "s:c:p:b:d:m:e:n:S:t:6qF")) != -1) {
		switch (c) {
		case 's': port = atoi(optarg); break;
		case 'c': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'b': bytes = parse_size(optarg); break;
		case 'd': dirs = optarg; break;
		case 'm': opt.max_msg = (size_t)parse_size(optarg); break;
		case 'e': opt.mode = parse_mode(optarg); break;
		case 'n': count = atoi(optarg); break;
		case 'S': seed = strtoull(optarg, NULL, 0); break;
		case '6': family = AF_INET6; break;
		case 'q': opt.quiet = 1; break;
		case 'F': opt.fixed = 1; break;
		case 't': {
			int secs = atoi(optarg);

			opt.min_secs = secs > 0 ? (unsigned)secs : 0;
			break;
		}
		default:
			fprintf(stderr, "usage: stream -s PORT [-n COUNT] [-6] [-e MODE]\n"
					"       stream -c HOST -p PORT [-b BYTES] [-d up|down|both] "
					"[-m MAXMSG [-F: all writes MAXMSG]] [-S SEED] [-t MIN_SECS] "
					"[-e block|poll|select|epoll|epollet]\n");
			return 2;
		}
	}
	if (!host)
		return server(port, count, family);
	dir = !strcmp(dirs, "down") ? DIR_DOWN : !strcmp(dirs, "both") ? DIR_BOTH : DIR_UP;
	char port_text[16];
	snprintf(port_text, sizeof(port_text), "%d", port);
	return client(host, port_text, bytes, dir, seed);
}
