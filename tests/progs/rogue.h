/* Shared by the rogue peer tool's two files: rogue.c (listen and hello modes,
 * the command line, the helpers below) and rogue_peer.c (peer mode: a full
 * channel client that lies on the data path).  See rogue.c's header. */
#ifndef SDPSHIM_TESTS_ROGUE_H
#define SDPSHIM_TESTS_ROGUE_H

#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "lie_pattern.h"

#define PREVIEW_BYTES 24

extern FILE *logfp;
extern volatile sig_atomic_t stop;

double mono_ms(void);
/* One line, " t_ms=N" appended (since start), flushed. */
void logline(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void hex(const uint8_t *p, size_t n, char *out);
/* Printable bytes as they are, the rest as \xNN; out holds 4 * PREVIEW_BYTES + 1. */
void preview(const uint8_t *p, size_t n, char *out);
void random_bytes(uint8_t *p, size_t n);
void addr_text(const struct sockaddr *sa, char *out, size_t len);
void addr_to_wire(const struct sockaddr *sa, uint8_t out[16]);
uint16_t addr_port(const struct sockaddr *sa);
struct addrinfo *resolve(const char *host, const char *port, bool passive);
/* ADDR:PORT or [ADDR6]:PORT, numeric. */
void parse_to(const char *to, struct sockaddr_storage *out);

/* --- peer mode ------------------------------------------------------------- */

enum peer_lie {
	LIE_NONE,                /* an honest peer (the tool's own control) */
	LIE_NEVER_ANSWER_CANCEL, /* a SrcAvail is never READ, its cancel never answered */
	LIE_FALSE_WRCOMPL,       /* a SinkAvail gets RdmaWrCompl(full length), no WRITE */
	LIE_WRONG_OFFSET,        /* our SrcAvail/SinkAvail names a wrong stream offset */
	LIE_STACKED_SRCAVAIL,    /* DATA, then several SrcAvails back to back */
	LIE_ABORT_DISCONNECT,    /* ABORT + disconnect on an offer, then probe its window */
	/* Link lies (--link only): */
	LIE_OPEN_DUP_INDEX,      /* a second OPEN for our stream's index, still in use */
	LIE_OPEN_INDEX_OOB,      /* our stream opens at index SDP_LINK_STREAMS_MAX - 1 */
	LIE_BAD_LSEQ,            /* a link header whose lseq skips one */
	LIE_BAD_LACK,            /* a link header acknowledging messages never sent */
	LIE_STREAM_UNOPENED,     /* a STREAM message (DATA) for an index never opened */
	LIE_RELEASED_IN_USE,     /* RELEASED for our stream while it is open, then DATA on it */
	LIE_WRITE_IMM_OTHER,     /* a WRITE into one stream's sink whose immediate names another */
	LIE_FALSE_SOLICITED,     /* the link Hello claims SOLICITED; no message asks for an event */
	LIE_OPEN_COMMIT_UNOFFERED, /* OPEN_COMMIT on a link whose Hello did not offer OPEN_COMMITS */
	LIE_COUNT
};

enum peer_offer { OFFER_SRC, OFFER_SINK };

/* abort-disconnect: rdma_disconnect once our ABORT's send completed (the
 * server's QP has it), right after posting the ABORT, or before it. */
enum disconnect_at { DISC_ACKED, DISC_POSTED, DISC_FIRST };

struct peer_opts {
	const char *to;
	enum peer_lie lie;
	enum peer_offer offer;   /* wrong-offset: which offer lies */
	long long bytes;         /* DATA bytes sent first (-1: the lie's default) */
	long offset_delta;       /* wrong-offset: added to the true offset */
	unsigned stack;          /* stacked-srcavail: how many */
	uint32_t src_len;        /* length of each SrcAvail/SinkAvail we send */
	unsigned after_ms;       /* abort-disconnect: probe delay; false-wrcompl: DisConn delay */
	unsigned ack_timeout;    /* RC ack timeout exponent, 0: rdma_cm's */
	uint16_t buf_count;      /* our receive buffers */
	uint32_t buf_size;
	double for_s;            /* overall bound */
	uint8_t wire_version;    /* the version our Hello, PROOF and COMMIT speak */
	enum disconnect_at disconnect_at; /* abort-disconnect: when rdma_disconnect goes */
	bool link;               /* speak link framing: a link Hello, then OPEN (core/link.c) */
	uint16_t stream_index;   /* --link: our stream's index */
	bool second_pending;     /* --link: a second stream, left pending at the server */
};

const char *peer_lie_name(enum peer_lie lie);
/* A lie that only a link can tell. */
bool peer_lie_needs_link(enum peer_lie lie);
int run_peer(const struct peer_opts *o);

#endif
