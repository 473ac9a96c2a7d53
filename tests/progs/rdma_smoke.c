/* rdma_smoke: proves the RDMA stack itself works, with no preload involved: moves
 * seeded pseudo-random data client->server over an rdma_cm RC QP and checks SHA-256. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "base/sha256.h"

/* ------------------------------------------------------------------------ */
/* Wire protocol.  Every message starts with a header; all fields big-endian.
 *   DATA   client->server  payload = next `len` bytes of the stream
 *   DONE   client->server  payload = struct done_body (total + digest)
 *   CREDIT server->client  arg = number of receive buffers re-posted
 *   RESULT server->client  arg = 1 if the digests matched, else 0
 * Flow control: the server pre-posts `depth` receive buffers and tells the
 * client in the accept private data; the client sends one message per credit
 * and the server hands credits back in batches as it re-posts buffers. */

#define MAGIC        0x534d4b31u          /* "SMK1" */
#define CHUNK        (64 * 1024)          /* payload bytes per DATA message */
#define RQ_DEPTH     16                   /* server receive buffers */
#define CREDIT_BATCH (RQ_DEPTH / 2)
#define CTRL_SLOTS   8                    /* small control buffers per side */
#define CTRL_SIZE    128
#define CQ_DEPTH     64

enum { MSG_DATA = 1, MSG_DONE, MSG_CREDIT, MSG_RESULT };

struct msg_hdr {
    uint32_t magic;
    uint32_t type;
    uint32_t len;          /* payload bytes after the header */
    uint32_t arg;
    uint64_t seq;
};

struct done_body {
    uint64_t total;
    uint8_t digest[SHA256_DIGEST_LEN];
};

struct conn_priv {         /* server -> client in rdma_accept private data */
    uint32_t magic;
    uint32_t depth;
    uint32_t chunk;
};

#define SLOT_SIZE (sizeof(struct msg_hdr) + CHUNK)
#define WR_RECV   (1ull << 32)              /* wr_id flag: receive buffer */

/* ------------------------------------------------------------------------ */

static const char *role = "rdma_smoke";
static struct timespec t_deadline;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "rdma_smoke: %s: error: ", role);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Milliseconds left until the overall deadline (0 when it has passed). */
static int remaining_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ms = (t_deadline.tv_sec - ts.tv_sec) * 1000LL +
                   (t_deadline.tv_nsec - ts.tv_nsec) / 1000000;
    return ms < 0 ? 0 : ms > 1000000000 ? 1000000000 : (int)ms;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        die("fcntl(O_NONBLOCK): %s", strerror(errno));
}

/* Deterministic stream: xorshift64* words stored little-endian. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
    rng_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

static void rng_fill(uint8_t *p, size_t n)    /* n is a multiple of 8 */
{
    for (size_t i = 0; i < n; i += 8) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        uint64_t w = htole64(rng_state * 0x2545f4914f6cdd1dull);
        memcpy(p + i, &w, 8);
    }
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return dflt;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        die("bad value for %s: '%s'", name, s);
    return v;
}

/* ------------------------------------------------------------------------ */
/* rdma_cm and verbs plumbing */

struct ctx {
    struct rdma_event_channel *cm;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *big_mr, *ctrl_mr;
    uint8_t *big, *ctrl;           /* big: data slots; ctrl: control slots */
    int ctrl_busy[CTRL_SLOTS];     /* send side: slot in use */
    int lenient;                   /* end of run: a disconnect/flush is not an error */
    int peer_gone;                 /* DISCONNECTED already seen */
};

static void check_devices(void)
{
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l)
        die("cannot list RDMA devices (%s); this kernel/host has no RDMA "
            "support, so rdma_cm cannot work here", strerror(errno));
    ibv_free_device_list(l);
    if (n == 0)
        die("no RDMA device found (ibv_get_device_list returned 0 devices); "
            "rdma_cm needs one, e.g. soft-RoCE: rdma link add rxe0 type rxe netdev IFACE");
}

static struct rdma_event_channel *open_cm(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch)
        die("rdma_cm: cannot open the event channel (%s); is rdma_ucm loaded and "
            "is there an RDMA device?", strerror(errno));
    set_nonblock(ch->fd);
    return ch;
}

static struct rdma_cm_event *cm_wait(struct rdma_event_channel *ch,
                                     enum rdma_cm_event_type want, const char *what)
{
    struct rdma_cm_event *ev;
    for (;;) {
        if (rdma_get_cm_event(ch, &ev) == 0)
            break;
        if (errno != EAGAIN)
            die("rdma_cm: rdma_get_cm_event: %s", strerror(errno));
        struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
        int ms = remaining_ms();
        int r = ms ? poll(&pfd, 1, ms) : 0;
        if (r < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (r == 0)
            die("rdma_cm: timed out waiting for %s", what);
    }
    if (ev->event != want) {
        int st = ev->status;
        const char *got = rdma_event_str(ev->event);
        if (ev->event == RDMA_CM_EVENT_REJECTED)
            die("rdma_cm: connection rejected while waiting for %s (status %d): "
                "no rdma_smoke server listening there?", what, st);
        die("rdma_cm: waiting for %s, got %s (status %d%s%s)", what, got, st,
            st < 0 ? ": " : "", st < 0 ? strerror(-st) : "");
    }
    return ev;
}

static void build_qp(struct ctx *c, struct rdma_cm_id *id, size_t big_len)
{
    if (!id->verbs)
        die("rdma_cm: no RDMA device is bound to this address");
    c->id = id;
    printf("rdma_smoke: %s using device %s port %u\n", role,
           ibv_get_device_name(id->verbs->device), id->port_num);
    fflush(stdout);

    c->pd = ibv_alloc_pd(id->verbs);
    if (!c->pd)
        die("ibv_alloc_pd: %s", strerror(errno));
    c->cc = ibv_create_comp_channel(id->verbs);
    if (!c->cc)
        die("ibv_create_comp_channel: %s", strerror(errno));
    set_nonblock(c->cc->fd);
    c->cq = ibv_create_cq(id->verbs, CQ_DEPTH, NULL, c->cc, 0);
    if (!c->cq)
        die("ibv_create_cq: %s", strerror(errno));
    if (ibv_req_notify_cq(c->cq, 0))
        die("ibv_req_notify_cq failed");

    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {
            .max_send_wr = RQ_DEPTH + CTRL_SLOTS,
            .max_recv_wr = RQ_DEPTH + CTRL_SLOTS,
            .max_send_sge = 1,
            .max_recv_sge = 1,
        },
    };
    if (rdma_create_qp(id, c->pd, &qa))
        die("rdma_create_qp: %s", strerror(errno));

    /* aligned_alloc wants the size to be a multiple of the alignment. */
    big_len = (big_len + 4095) & ~(size_t)4095;
    c->big = aligned_alloc(4096, big_len);
    c->ctrl = aligned_alloc(4096, (CTRL_SLOTS * CTRL_SIZE + 4095) & ~(size_t)4095);
    if (!c->big || !c->ctrl)
        die("out of memory");
    memset(c->big, 0, big_len);
    memset(c->ctrl, 0, CTRL_SLOTS * CTRL_SIZE);
    int acc = IBV_ACCESS_LOCAL_WRITE;
    c->big_mr = ibv_reg_mr(c->pd, c->big, big_len, acc);
    c->ctrl_mr = ibv_reg_mr(c->pd, c->ctrl, CTRL_SLOTS * CTRL_SIZE, acc);
    if (!c->big_mr || !c->ctrl_mr)
        die("ibv_reg_mr: %s", strerror(errno));
}

static void post_recv(struct ctx *c, struct ibv_mr *mr, uint8_t *buf, uint32_t len,
                      uint64_t wr_id)
{
    struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = wr_id | WR_RECV, .sg_list = &sge, .num_sge = 1 };
    struct ibv_recv_wr *bad;
    int e = ibv_post_recv(c->id->qp, &wr, &bad);
    if (e)
        die("ibv_post_recv: %s", strerror(e));
}

static void post_send(struct ctx *c, struct ibv_mr *mr, uint8_t *buf, uint32_t len,
                      uint64_t wr_id)
{
    struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
    struct ibv_send_wr wr = {
        .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
        .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
    };
    struct ibv_send_wr *bad;
    int e = ibv_post_send(c->id->qp, &wr, &bad);
    if (e)
        die("ibv_post_send: %s", strerror(e));
}

static void put_hdr(uint8_t *buf, uint32_t type, uint32_t len, uint32_t arg, uint64_t seq)
{
    struct msg_hdr h = {
        .magic = htobe32(MAGIC), .type = htobe32(type), .len = htobe32(len),
        .arg = htobe32(arg), .seq = htobe64(seq),
    };
    memcpy(buf, &h, sizeof h);
}

static struct msg_hdr get_hdr(const uint8_t *buf, uint32_t byte_len)
{
    struct msg_hdr h;
    if (byte_len < sizeof h)
        die("short message (%u bytes)", byte_len);
    memcpy(&h, buf, sizeof h);
    h.magic = be32toh(h.magic);
    h.type = be32toh(h.type);
    h.len = be32toh(h.len);
    h.arg = be32toh(h.arg);
    h.seq = be64toh(h.seq);
    if (h.magic != MAGIC)
        die("bad message magic 0x%08x", h.magic);
    if (h.len != byte_len - sizeof h)
        die("message length %u does not match received %u bytes",
            h.len, (unsigned)(byte_len - sizeof h));
    return h;
}

/* Send a small control message from a free ctrl slot.  Returns the slot
 * number + 1, or 0 if every slot is still in flight. */
static int send_ctrl(struct ctx *c, uint32_t type, uint32_t arg, const void *body,
                     uint32_t body_len)
{
    for (int i = 0; i < CTRL_SLOTS; i++) {
        if (c->ctrl_busy[i])
            continue;
        uint8_t *b = c->ctrl + i * CTRL_SIZE;
        put_hdr(b, type, body_len, arg, 0);
        if (body_len)
            memcpy(b + sizeof(struct msg_hdr), body, body_len);
        c->ctrl_busy[i] = 1;
        post_send(c, c->ctrl_mr, b, sizeof(struct msg_hdr) + body_len, (uint64_t)i);
        return i + 1;
    }
    return 0;
}

/* Wait for at least one work completion; dies on timeout, on a failed
 * completion or on a disconnect, except that with c->lenient set a disconnect
 * or a flushed request returns -1 (the run's outcome is already known).
 * Completions that arrived before a disconnect are still returned first: the
 * peer may legitimately disconnect right after its last message lands. */
static int cq_wait(struct ctx *c, struct ibv_wc *wc, int max, const char *what)
{
    for (;;) {
        int n = ibv_poll_cq(c->cq, max, wc);
        if (n < 0)
            die("ibv_poll_cq failed");
        if (n > 0) {
            for (int i = 0; i < n; i++) {
                if (wc[i].status == IBV_WC_WR_FLUSH_ERR && (c->lenient || c->peer_gone)) {
                    if (i > 0)
                        return i;       /* hand out what completed before the flush */
                    if (c->lenient)
                        return -1;
                    die("peer disconnected while %s", what);
                }
                if (wc[i].status != IBV_WC_SUCCESS)
                    die("work completion error while %s: %s (wr_id 0x%" PRIx64 ")",
                        what, ibv_wc_status_str(wc[i].status), (uint64_t)wc[i].wr_id);
            }
            return n;
        }
        if (c->peer_gone) {
            if (c->lenient)
                return -1;
            die("rdma_cm: peer disconnected while %s", what);
        }
        struct pollfd pfd[2] = {
            { .fd = c->cc->fd, .events = POLLIN },
            { .fd = c->id->channel->fd, .events = POLLIN },
        };
        int ms = remaining_ms();
        int r = ms ? poll(pfd, 2, ms) : 0;
        if (r < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (r == 0)
            die("timed out while %s", what);
        if (pfd[1].revents) {
            struct rdma_cm_event *ev;
            if (rdma_get_cm_event(c->id->channel, &ev) == 0) {
                enum rdma_cm_event_type t = ev->event;
                rdma_ack_cm_event(ev);
                if (t == RDMA_CM_EVENT_DISCONNECTED) {
                    c->peer_gone = 1;   /* drain the CQ once more (loop top) */
                    continue;
                }
                die("rdma_cm: unexpected %s while %s (peer went away?)",
                    rdma_event_str(t), what);
            }
        }
        if (pfd[0].revents) {
            struct ibv_cq *cq;
            void *cq_ctx;
            if (ibv_get_cq_event(c->cc, &cq, &cq_ctx) == 0) {
                ibv_ack_cq_events(cq, 1);
                if (ibv_req_notify_cq(cq, 0))
                    die("ibv_req_notify_cq failed");
            }
        }
    }
}

static void resolve(const char *addr, const char *port, int passive, struct addrinfo **res)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = passive ? AI_PASSIVE : 0 };
    int e = getaddrinfo(addr, port, &hints, res);
    if (e)
        die("cannot resolve %s port %s: %s", addr, port, gai_strerror(e));
}

/* Wait up to `secs` for the DISCONNECTED event (sets c->peer_gone). */
static void await_disconnect(struct ctx *c, double secs)
{
    double until = now_s() + secs;
    while (!c->peer_gone && now_s() < until) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(c->id->channel, &ev) == 0) {
            if (ev->event == RDMA_CM_EVENT_DISCONNECTED)
                c->peer_gone = 1;
            rdma_ack_cm_event(ev);
            continue;
        }
        struct pollfd pfd = { .fd = c->id->channel->fd, .events = POLLIN };
        poll(&pfd, 1, 100);
    }
}

/* Best-effort teardown.  The client hangs up first (it does so once it holds
 * the verdict); the server gives it a few seconds to, so that its last message
 * is never flushed by an early disconnect, then hangs up itself. */
static void disconnect_quietly(struct ctx *c, int initiator)
{
    if (!initiator)
        await_disconnect(c, 5.0);
    rdma_disconnect(c->id);
    await_disconnect(c, 2.0);
    rdma_destroy_qp(c->id);
    ibv_dereg_mr(c->big_mr);
    ibv_dereg_mr(c->ctrl_mr);
    ibv_destroy_cq(c->cq);
    ibv_destroy_comp_channel(c->cc);
    ibv_dealloc_pd(c->pd);
    free(c->big);
    free(c->ctrl);
}

/* ------------------------------------------------------------------------ */

static int run_server(const char *addr, const char *port)
{
    struct ctx c = { 0 };
    struct addrinfo *ai;
    check_devices();
    c.cm = open_cm();
    resolve(addr, port, 1, &ai);

    struct rdma_cm_id *lid;
    if (rdma_create_id(c.cm, &lid, NULL, RDMA_PS_TCP))
        die("rdma_cm: rdma_create_id: %s", strerror(errno));
    if (rdma_bind_addr(lid, ai->ai_addr))
        die("rdma_cm: cannot bind %s:%s: %s (is that address on an RDMA device?)",
            addr, port, strerror(errno));
    freeaddrinfo(ai);
    if (rdma_listen(lid, 1))
        die("rdma_cm: rdma_listen: %s", strerror(errno));
    printf("rdma_smoke: server listening on %s:%s\n", addr, port);
    fflush(stdout);

    struct rdma_cm_event *ev = cm_wait(c.cm, RDMA_CM_EVENT_CONNECT_REQUEST,
                                       "a connection request");
    struct rdma_cm_id *id = ev->id;
    rdma_ack_cm_event(ev);

    build_qp(&c, id, RQ_DEPTH * SLOT_SIZE);
    for (int i = 0; i < RQ_DEPTH; i++)
        post_recv(&c, c.big_mr, c.big + i * SLOT_SIZE, SLOT_SIZE, (uint64_t)i);

    struct conn_priv priv = { htobe32(MAGIC), htobe32(RQ_DEPTH), htobe32(CHUNK) };
    struct rdma_conn_param cp = {
        .private_data = &priv, .private_data_len = sizeof priv,
        .retry_count = 7, .rnr_retry_count = 7,
    };
    if (rdma_accept(id, &cp))
        die("rdma_cm: rdma_accept: %s", strerror(errno));
    rdma_ack_cm_event(cm_wait(c.cm, RDMA_CM_EVENT_ESTABLISHED, "the connection"));
    double t0 = now_s();

    sha256_ctx sha;
    sha256_init(&sha);
    uint64_t received = 0, next_seq = 0;
    unsigned pending_credit = 0;
    int done = 0, result_slot = 0, finished = 0, match = 0;
    struct done_body peer;
    struct ibv_wc wc[16];

    while (!finished) {
        int n = cq_wait(&c, wc, 16, result_slot ? "delivering the result" : "receiving data");
        if (n < 0)                 /* lenient: client already hung up */
            break;
        for (int i = 0; i < n; i++) {
            if (!(wc[i].wr_id & WR_RECV)) {            /* control send finished */
                int slot = (int)(wc[i].wr_id & 0xffff);
                c.ctrl_busy[slot] = 0;
                if (result_slot && slot == result_slot - 1)
                    finished = 1;
                continue;
            }
            int slot = (int)(wc[i].wr_id & 0xffff);
            uint8_t *buf = c.big + slot * SLOT_SIZE;
            struct msg_hdr h = get_hdr(buf, wc[i].byte_len);
            if (h.seq != next_seq)
                die("message %" PRIu64 " arrived, expected %" PRIu64, h.seq, next_seq);
            next_seq++;
            if (h.type == MSG_DATA) {
                if (done)
                    die("DATA after DONE");
                sha256_update(&sha, buf + sizeof h, h.len);
                received += h.len;
            } else if (h.type == MSG_DONE) {
                if (h.len != sizeof peer)
                    die("bad DONE message");
                memcpy(&peer, buf + sizeof h, sizeof peer);
                done = 1;
            } else {
                die("unexpected message type %u from client", h.type);
            }
            post_recv(&c, c.big_mr, buf, SLOT_SIZE, (uint64_t)slot);
            pending_credit++;
        }
        if (pending_credit >= CREDIT_BATCH && !done &&
            send_ctrl(&c, MSG_CREDIT, pending_credit, NULL, 0))
            pending_credit = 0;
        if (done && !result_slot) {
            uint8_t mine[SHA256_DIGEST_LEN];
            char hex[SHA256_HEX_LEN + 1], phex[SHA256_HEX_LEN + 1];
            sha256_final(&sha, mine);
            sha256_hex(mine, hex);
            sha256_hex(peer.digest, phex);
            uint64_t ptotal = be64toh(peer.total);
            match = ptotal == received && memcmp(mine, peer.digest, sizeof mine) == 0;
            double dt = now_s() - t0;
            printf("rdma_smoke: received %" PRIu64 " bytes sha256=%s %s\n", received, hex,
                   match ? "MATCH" : "MISMATCH");
            if (!match)
                printf("rdma_smoke: client reported %" PRIu64 " bytes sha256=%s\n",
                       ptotal, phex);
            printf("rdma_smoke: server %.2f s, %.1f MiB/s\n", dt,
                   dt > 0 ? received / 1048576.0 / dt : 0.0);
            fflush(stdout);
            /* CREDITs stop after DONE, so at most a couple are in flight. */
            result_slot = send_ctrl(&c, MSG_RESULT, (uint32_t)match, NULL, 0);
            if (!result_slot)
                die("no free control slot for the result");
            /* The client disconnects once it has the result; that is fine now. */
            c.lenient = 1;
        }
    }
    disconnect_quietly(&c, 0);
    rdma_destroy_id(id);
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(c.cm);
    if (!match)
        die("data mismatch");
    return 0;
}

static int run_client(const char *addr, const char *port, uint64_t mib)
{
    struct ctx c = { 0 };
    struct addrinfo *ai;
    uint64_t seed = env_u64("RDMA_SMOKE_SEED", 0x5d9a11);
    int corrupt = (int)env_u64("RDMA_SMOKE_CORRUPT", 0);
    check_devices();
    c.cm = open_cm();
    resolve(addr, port, 0, &ai);

    struct rdma_cm_id *id;
    if (rdma_create_id(c.cm, &id, NULL, RDMA_PS_TCP))
        die("rdma_cm: rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(id, NULL, ai->ai_addr, 5000))
        die("rdma_cm: rdma_resolve_addr %s: %s", addr, strerror(errno));
    freeaddrinfo(ai);
    rdma_ack_cm_event(cm_wait(c.cm, RDMA_CM_EVENT_ADDR_RESOLVED,
                              "address resolution (no RDMA device for that address?)"));
    if (rdma_resolve_route(id, 5000))
        die("rdma_cm: rdma_resolve_route: %s", strerror(errno));
    rdma_ack_cm_event(cm_wait(c.cm, RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution"));

    build_qp(&c, id, RQ_DEPTH * SLOT_SIZE);
    for (int i = 0; i < CTRL_SLOTS; i++)
        post_recv(&c, c.ctrl_mr, c.ctrl + i * CTRL_SIZE, CTRL_SIZE,
                  (uint64_t)(i + 0x100));       /* 0x100+: receive ctrl slots */
    /* The client's ctrl area is used for receives only; sends use big slots. */

    struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
    if (rdma_connect(id, &cp))
        die("rdma_cm: rdma_connect: %s", strerror(errno));
    struct rdma_cm_event *ev = cm_wait(c.cm, RDMA_CM_EVENT_ESTABLISHED, "the connection");
    struct conn_priv priv = { 0 };
    if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof priv)
        memcpy(&priv, ev->param.conn.private_data, sizeof priv);
    rdma_ack_cm_event(ev);
    if (be32toh(priv.magic) != MAGIC)
        die("server sent no rdma_smoke parameters (not an rdma_smoke server?)");
    uint32_t credits = be32toh(priv.depth);
    uint32_t chunk = be32toh(priv.chunk);
    if (chunk > CHUNK)
        chunk = CHUNK;
    chunk &= ~7u;
    if (!credits || !chunk)
        die("server sent bad parameters (depth %u chunk %u)", credits, chunk);

    printf("rdma_smoke: client sending %" PRIu64 " MiB, seed 0x%" PRIx64 "\n", mib, seed);
    fflush(stdout);
    double t0 = now_s();
    rng_seed(seed);
    sha256_ctx sha;
    sha256_init(&sha);
    const uint64_t total = mib << 20;
    uint64_t sent = 0, seq = 0;
    int slot_busy[RQ_DEPTH] = { 0 };
    int done_sent = 0, got_result = 0, match = 0;
    uint8_t digest[SHA256_DIGEST_LEN];
    struct ibv_wc wc[16];

    while (!got_result) {
        for (int s = 0; s < RQ_DEPTH && credits > 0 && !done_sent; s++) {
            if (slot_busy[s])
                continue;
            uint8_t *b = c.big + s * SLOT_SIZE;
            uint8_t *payload = b + sizeof(struct msg_hdr);
            if (sent < total) {
                uint32_t n = total - sent < chunk ? (uint32_t)(total - sent) : chunk;
                rng_fill(payload, n);
                sha256_update(&sha, payload, n);
                if (corrupt && sent == 0)
                    payload[n / 2] ^= 0x01;      /* test hook: flip one bit after hashing */
                put_hdr(b, MSG_DATA, n, 0, seq++);
                post_send(&c, c.big_mr, b, sizeof(struct msg_hdr) + n, (uint64_t)s);
                sent += n;
            } else {
                struct done_body body = { .total = htobe64(total) };
                sha256_final(&sha, digest);
                memcpy(body.digest, digest, sizeof digest);
                put_hdr(b, MSG_DONE, sizeof body, 0, seq++);
                memcpy(payload, &body, sizeof body);
                post_send(&c, c.big_mr, b, sizeof(struct msg_hdr) + sizeof body, (uint64_t)s);
                done_sent = 1;
            }
            slot_busy[s] = 1;
            credits--;
        }
        int n = cq_wait(&c, wc, 16, done_sent ? "waiting for the server's verdict"
                                               : "sending data");
        for (int i = 0; i < n; i++) {
            if (!(wc[i].wr_id & WR_RECV)) {
                slot_busy[wc[i].wr_id & 0xffff] = 0;
                continue;
            }
            int cs = (int)(wc[i].wr_id & 0xffff) - 0x100;
            uint8_t *b = c.ctrl + cs * CTRL_SIZE;
            struct msg_hdr h = get_hdr(b, wc[i].byte_len);
            if (h.type == MSG_CREDIT) {
                credits += h.arg;
            } else if (h.type == MSG_RESULT) {
                match = h.arg == 1;
                got_result = 1;
            } else {
                die("unexpected message type %u from server", h.type);
            }
            post_recv(&c, c.ctrl_mr, b, CTRL_SIZE, (uint64_t)(cs + 0x100));
        }
    }
    double dt = now_s() - t0;
    char hex[SHA256_HEX_LEN + 1];
    printf("rdma_smoke: sent %" PRIu64 " bytes sha256=%s in %.2f s (%.1f MiB/s): "
           "server reports %s\n", sent, sha256_hex(digest, hex), dt,
           dt > 0 ? sent / 1048576.0 / dt : 0.0, match ? "MATCH" : "MISMATCH");
    fflush(stdout);
    disconnect_quietly(&c, 1);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(c.cm);
    if (!match)
        die("server reported a digest mismatch");
    return 0;
}

/* Write the client's byte stream to stdout; its digest to stderr.  Lets a test
 * check the received digest against an independent sha256sum. */
static int run_gen(uint64_t mib)
{
    static uint8_t buf[CHUNK];
    sha256_ctx sha;
    uint8_t d[SHA256_DIGEST_LEN];
    char hex[SHA256_HEX_LEN + 1];
    rng_seed(env_u64("RDMA_SMOKE_SEED", 0x5d9a11));
    sha256_init(&sha);
    for (uint64_t left = mib << 20; left;) {
        size_t n = left < CHUNK ? left : CHUNK;
        rng_fill(buf, n);
        sha256_update(&sha, buf, n);
        if (fwrite(buf, 1, n, stdout) != n)
            die("write: %s", strerror(errno));
        left -= n;
    }
    if (fflush(stdout))
        die("write: %s", strerror(errno));
    sha256_final(&sha, d);
    fprintf(stderr, "rdma_smoke: gen %" PRIu64 " bytes sha256=%s\n", mib << 20,
            sha256_hex(d, hex));
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: rdma_smoke server ADDR PORT\n"
            "       rdma_smoke client ADDR PORT [MiB]   (default 64)\n"
            "       rdma_smoke gen [MiB]                (client's stream to stdout)\n"
            "env: RDMA_SMOKE_TIMEOUT (s, default 60), RDMA_SMOKE_SEED,\n"
            "     RDMA_SMOKE_CORRUPT=1 (client flips a bit: the server must say MISMATCH)\n");
    exit(2);
}

static uint64_t parse_mib(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > 65536)
        die("bad size '%s' (MiB, 1..65536)", s);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint64_t tmo = env_u64("RDMA_SMOKE_TIMEOUT", 60);
    clock_gettime(CLOCK_MONOTONIC, &t_deadline);
    t_deadline.tv_sec += (time_t)tmo;

    if (!strcmp(argv[1], "server") && argc == 4) {
        role = "server";
        return run_server(argv[2], argv[3]);
    }
    if (!strcmp(argv[1], "client") && (argc == 4 || argc == 5)) {
        role = "client";
        return run_client(argv[2], argv[3], argc == 5 ? parse_mib(argv[4]) : 64);
    }
    if (!strcmp(argv[1], "gen") && argc <= 3) {
        role = "gen";
        setvbuf(stdout, NULL, _IOFBF, 1 << 16);
        return run_gen(argc == 3 ? parse_mib(argv[2]) : 64);
    }
    usage();
}
