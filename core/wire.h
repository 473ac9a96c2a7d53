/* The sdpshim wire format, described once: the base header on every
 * message (modelled on SDP's BSDH), the control-message extensions, and the
 * Hello/HelloAck/reject private data of rdma_cm.  Wire structs are packed,
 * big-endian and separate types from the host structs; exactly two helpers
 * convert each pair, and the decoders validate every length and field. */
#ifndef SDPSHIM_WIRE_H
#define SDPSHIM_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Version 2: the binding handshake (nonces in HelloAck and COMMIT, bind
 * records on the TCP connection; docs/trust.md).  Version 3: a SinkAvail is
 * filled by one RDMA WRITE with immediate (imm = its message sequence
 * number) and the receiver counts its bytes from its own completion; the
 * RdmaWrCompl message is no longer sent, and receiving one is a violation. */
#define SDP_WIRE_VERSION 4
#define SDP_HELLO_MAGIC  0x53445053u /* "SDPS" */
#define SDP_BIND_MAGIC   0x53445042u /* "SDPB" */
#define SDP_NONCE_SIZE   16

/* Message ids (SDP's names where the meaning matches). */
enum sdp_mid {
	SDP_MID_DATA          = 0x01, /* payload: application bytes */
	SDP_MID_CREDIT_UPDATE = 0x02, /* no payload: carries bufs/ack only */
	SDP_MID_DISCONN       = 0x03, /* half-close: no more data from the sender */
	SDP_MID_ABORT         = 0x04, /* reset: ext = error code */
	SDP_MID_KEEPALIVE     = 0x05, /* no payload */
	SDP_MID_ATTACH        = 0x06, /* server bound the channel to the accepted fd */
	SDP_MID_DETACH        = 0x07, /* server will not use the channel: use TCP */
	SDP_MID_SRC_AVAIL     = 0x08, /* zero-copy: ext = range the peer may READ */
	SDP_MID_RDMA_RD_COMPL = 0x09, /* zero-copy: ext = bytes read of a SrcAvail */
	SDP_MID_SRC_CANCEL    = 0x0a, /* zero-copy: sender withdraws a SrcAvail */
	SDP_MID_SINK_AVAIL    = 0x0b, /* zero-copy: ext = range the peer may WRITE */
	SDP_MID_RDMA_WR_COMPL = 0x0c, /* version 2 only (now a violation): bytes written to a SinkAvail */
	SDP_MID_SINK_CANCEL   = 0x0d, /* zero-copy: receiver withdraws a SinkAvail */
	SDP_MID_SINK_CANCEL_ACK = 0x0e,
	SDP_MID_SWITCH        = 0x0f, /* move the stream to TCP: ext = offsets */
	SDP_MID_COMMIT        = 0x10, /* client: I will use this channel (sent before my SYN);
				       * ext c,d = the client's nonce */
};

/* Header flags. */
#define SDP_FLAG_STARVING 0x01 /* sender is out of credits: send an update */
#define SDP_FLAG_KNOWN    (SDP_FLAG_STARVING)

/* Base header: 16 bytes on the wire. */
struct sdp_bsdh_wire {
	uint8_t  mid;
	uint8_t  flags;
	uint16_t bufs;     /* receive buffers the sender has posted */
	uint32_t len;      /* whole message length, header included */
	uint32_t mseq;     /* sequence number of this message */
	uint32_t mseq_ack; /* last message of the peer this sender consumed */
} __attribute__((packed));

struct sdp_bsdh {
	uint8_t  mid;
	uint8_t  flags;
	uint16_t bufs;
	uint32_t len;
	uint32_t mseq;
	uint32_t mseq_ack;
};

/* Extension after the base header of control messages that carry data:
 * ABORT (a = errno), DETACH (a = reason; either direction before the
 * channel is bound), COMMIT (c,d = the client's nonce), SRC_AVAIL/SINK_AVAIL
 * (a = length, b = rkey, c = address, d = stream offset),
 * RDMA_RD_COMPL/RDMA_WR_COMPL/..._CANCEL(_ACK) (a = bytes, d = offset),
 * SWITCH travels on TCP, not here (struct sdp_switch_wire). */
struct sdp_ext_wire {
	uint32_t a;
	uint32_t b;
	uint64_t c;
	uint64_t d;
} __attribute__((packed));

struct sdp_ext {
	uint32_t a;
	uint32_t b;
	uint64_t c;
	uint64_t d;
};

#define SDP_BSDH_SIZE sizeof(struct sdp_bsdh_wire)
#define SDP_EXT_SIZE  sizeof(struct sdp_ext_wire)

/* The TCP 4-tuple a channel belongs to, addresses as IPv6 (IPv4-mapped
 * for IPv4), ports in host order. */
struct sdp_tuple {
	uint8_t  src_addr[16];
	uint8_t  dst_addr[16];
	uint16_t src_port;
	uint16_t dst_port;
};

/* Hello flags.  LINK: the connection is a link that carries many streams
 * (core/link.c); the tuple names no TCP connection (src_port 0) and the
 * buffers are the link's.  Each stream then opens with a LINK_OPEN message
 * on the link. */
#define SDP_HELLO_FLAG_LINK 0x01
/* SOLICITED (links only): every message this end sends on the link asks
 * for a solicited event, so the other end may arm its CQ for those alone
 * while none of its own sends is awaited (core/link.c, link_arm). */
#define SDP_HELLO_FLAG_SOLICITED 0x02
/* OPEN_COMMITS (links only): a stream may open with LINK_OPEN_COMMIT, which
 * carries the client's nonce and commits the stream as COMMIT would: the
 * client's kernel connect goes ahead without waiting for the answer
 * (docs/links.md, "Opening a stream"). */
#define SDP_HELLO_FLAG_OPEN_COMMITS 0x04
#define SDP_HELLO_FLAGS (SDP_HELLO_FLAG_LINK | SDP_HELLO_FLAG_SOLICITED | SDP_HELLO_FLAG_OPEN_COMMITS)
/* Flags that only a link's Hello (and HelloAck) may carry. */
#define SDP_HELLO_LINK_ONLY (SDP_HELLO_FLAG_SOLICITED | SDP_HELLO_FLAG_OPEN_COMMITS)

/* Hello: rdma_cm connect private data (at most 56 bytes on RDMA_PS_TCP). */
struct sdp_hello_wire {
	uint32_t magic;
	uint8_t  version;
	uint8_t  flags;
	uint16_t buf_count;  /* receive buffers the client posted (initial credits) */
	uint32_t buf_size;   /* bytes per receive buffer, header included */
	uint16_t src_port;
	uint16_t dst_port;
	uint8_t  src_addr[16];
	uint8_t  dst_addr[16];
} __attribute__((packed));

struct sdp_hello {
	uint8_t  version;
	uint8_t  flags;
	uint16_t buf_count;
	uint32_t buf_size;
	struct sdp_tuple tuple;
};

/* HelloAck: rdma_cm accept private data.  nonce: the server's, which the
 * client echoes on the TCP connection (its bind proof). */
struct sdp_hello_ack_wire {
	uint32_t magic;
	uint8_t  version;
	uint8_t  flags;
	uint16_t buf_count;
	uint32_t buf_size;
	uint8_t  nonce[SDP_NONCE_SIZE];
} __attribute__((packed));

struct sdp_hello_ack {
	uint8_t  version;
	uint8_t  flags;
	uint16_t buf_count;
	uint32_t buf_size;
	uint8_t  nonce[SDP_NONCE_SIZE];
};

/* Reject private data: why a server shim declined. */
enum sdp_reject_code {
	SDP_REJECT_VERSION   = 1, /* unsupported protocol version */
	SDP_REJECT_MALFORMED = 2, /* Hello did not validate */
	SDP_REJECT_RULE      = 3, /* server rule says tcp */
	SDP_REJECT_RESOURCES = 4, /* out of QPs, memory or pending slots */
	SDP_REJECT_TUPLE     = 5, /* Hello names a tuple this listener does not serve */
};

struct sdp_reject_wire {
	uint32_t magic;
	uint8_t  version;
	uint8_t  code;
	uint16_t pad;
} __attribute__((packed));

/* SWITCH record: the first bytes an end writes on the kernel TCP socket
 * when it moves the stream there (see core/switch.c).  The stream bytes
 * from resend_from on follow it; the reader skips the ones it already has. */
struct sdp_switch_wire {
	uint32_t magic;
	uint8_t  version;
	uint8_t  reason;      /* enum sdp_reason of the end that started the move */
	uint16_t flags;
	uint64_t resend_from; /* stream offset of the first byte after the record */
} __attribute__((packed));

struct sdp_switch {
	uint8_t  reason;
	uint64_t resend_from;
};

#define SDP_SWITCH_SIZE sizeof(struct sdp_switch_wire)

/* Bind records: the binding handshake on the TCP connection itself
 * (docs/trust.md).  The server, holding a committed channel that names the
 * accepted 4-tuple, sends one urgent (MSG_OOB) byte, SDP_BIND_SIGNAL; a
 * plain peer's reads skip it.  Only then does the client write a PROOF
 * (nonce = the server's nonce from the HelloAck).  A server that finds the
 * proof right sends ATTACH over that channel; otherwise it writes NAK
 * (reason) on TCP.  ACK is reserved (never sent). */
#define SDP_BIND_SIGNAL 0xb5

enum sdp_bind_kind {
	SDP_BIND_PROOF = 1, /* client -> server */
	SDP_BIND_ACK   = 2, /* server -> client: the channel is this connection's */
	SDP_BIND_NAK   = 3, /* server -> client: use TCP (reason) */
};

struct sdp_bind_wire {
	uint32_t magic;
	uint8_t  version;
	uint8_t  kind;
	uint16_t reason;    /* NAK: enum sdp_reason; 0 otherwise */
	uint8_t  nonce[SDP_NONCE_SIZE];
} __attribute__((packed));

struct sdp_bind {
	uint8_t  kind;
	uint16_t reason;
	uint8_t  nonce[SDP_NONCE_SIZE];
};

#define SDP_BIND_SIZE sizeof(struct sdp_bind_wire)

/* Link framing (core/link.c, docs/links.md).  Every SEND on a link starts
 * with this 16-byte header; a STREAM message's payload is one stream
 * message (base header first), exactly as a per-connection channel would
 * carry it.  lseq numbers the link's messages, lack acknowledges the
 * peer's (its receive buffer is posted again: a link credit back).  An
 * RDMA WRITE with immediate into a stream's sink takes a link credit and a
 * sequence number too; its immediate is SDP_LINK_IMM(stream, mseq). */
enum sdp_link_kind {
	SDP_LINK_STREAM   = 1, /* payload: one stream message */
	SDP_LINK_CREDIT   = 2, /* no payload: lack only (may take the last credit) */
	SDP_LINK_OPEN     = 3, /* client -> server: open `stream` (struct sdp_open_wire) */
	SDP_LINK_OPEN_ACK = 4, /* server -> client: opened (struct sdp_open_ack_wire) */
	SDP_LINK_OPEN_NAK = 5, /* server -> client: refused (struct sdp_open_nak_wire) */
	SDP_LINK_RELEASED = 6, /* either: my end of `stream` is gone; the index is free here */
	/* The climb back to RDMA of a stream that moved to TCP (docs/upgrade.md) */
	SDP_LINK_CLIMB_REQ   = 7,  /* client -> server (struct sdp_climb_req_wire) */
	SDP_LINK_CLIMB_CHAL  = 8,  /* server -> client (struct sdp_climb_chal_wire) */
	SDP_LINK_CLIMB_PROVE = 9,  /* client -> server (struct sdp_climb_prove_wire) */
	SDP_LINK_CLIMB_ACK   = 10, /* server -> client (struct sdp_climb_ack_wire) */
	SDP_LINK_CLIMB_NAK   = 11, /* server -> client (struct sdp_open_nak_wire) */
	/* An OPEN that commits at once (SDP_HELLO_FLAG_OPEN_COMMITS links only) */
	SDP_LINK_OPEN_COMMIT = 12, /* client -> server (struct sdp_open_commit_wire) */
};

#define SDP_LINK_FLAG_STARVING 0x01 /* sender is low on link credits: send LINK_CREDIT */
#define SDP_LINK_FLAG_KNOWN    (SDP_LINK_FLAG_STARVING)
#define SDP_LINK_STREAMS_MAX   4096u /* stream indexes per link: 0 .. max-1 */

struct sdp_lh_wire {
	uint8_t  kind;
	uint8_t  flags;
	uint16_t stream;
	uint32_t len;   /* whole link message, this header included */
	uint32_t lseq;
	uint32_t lack;
} __attribute__((packed));

struct sdp_lh {
	uint8_t  kind;
	uint8_t  flags;
	uint16_t stream;
	uint32_t len;
	uint32_t lseq;
	uint32_t lack;
};

#define SDP_LH_SIZE sizeof(struct sdp_lh_wire)

/* OPEN: the TCP 4-tuple the stream belongs to and the stream's receive
 * geometry (credits: buf_count messages of at most buf_size bytes). */
struct sdp_open_wire {
	uint8_t  src_addr[16];
	uint8_t  dst_addr[16];
	uint16_t src_port;
	uint16_t dst_port;
	uint16_t buf_count;
	uint16_t rdv_port; /* the sender's rendezvous port (core/rendezvous.c), 0: none */
	uint32_t buf_size;
} __attribute__((packed));

struct sdp_open {
	struct sdp_tuple tuple;
	uint16_t buf_count;
	uint16_t rdv_port;
	uint32_t buf_size;
};

/* OPEN_COMMIT: an OPEN and the client's nonce (as COMMIT's extension). */
struct sdp_open_commit_wire {
	struct sdp_open_wire open;
	uint8_t nonce[SDP_NONCE_SIZE];
} __attribute__((packed));

/* OPEN_ACK: the server's stream geometry and its nonce (the client's bind
 * proof echoes it on the TCP connection, as with a HelloAck). */
struct sdp_open_ack_wire {
	uint8_t  nonce[SDP_NONCE_SIZE];
	uint16_t buf_count;
	uint16_t rdv_port; /* the server's rendezvous port, 0: none */
	uint32_t buf_size;
} __attribute__((packed));

struct sdp_open_ack {
	uint8_t  nonce[SDP_NONCE_SIZE];
	uint16_t buf_count;
	uint16_t rdv_port;
	uint32_t buf_size;
};

struct sdp_open_nak_wire {
	uint8_t code; /* enum sdp_reject_code */
	uint8_t pad[7];
} __attribute__((packed));

/* The climb (core/climb.c, docs/upgrade.md).  REQ names the TCP
 * connection, the client's receive geometry for the new stream and its
 * nonce Ni; CHAL answers with the server's nonce Nr, geometry, and its MAC
 * over both nonces and the tuple (the server proves it holds the stream's
 * key first); PROVE carries the client's MAC and T, the stream offset
 * where its bytes leave TCP; ACK carries the server's T. */
#define SDP_CLIMB_MAC_SIZE 32

/* REQ flags: FROM_SERVER, the asker holds the TCP connection's server end
 * (a forked child of the server dials the client's rendezvous port). */
#define SDP_CLIMB_FROM_SERVER 0x0001
#define SDP_CLIMB_FLAGS_KNOWN SDP_CLIMB_FROM_SERVER

struct sdp_climb_req_wire {
	uint8_t  src_addr[16];
	uint8_t  dst_addr[16];
	uint16_t src_port;
	uint16_t dst_port;
	uint16_t buf_count;
	uint16_t flags;
	uint32_t buf_size;
	uint8_t  nonce[SDP_NONCE_SIZE];
} __attribute__((packed));

struct sdp_climb_req {
	struct sdp_tuple tuple;
	uint16_t buf_count;
	uint16_t flags;
	uint32_t buf_size;
	uint8_t  nonce[SDP_NONCE_SIZE];
};

struct sdp_climb_chal_wire {
	uint8_t  nonce[SDP_NONCE_SIZE];
	uint8_t  mac[SDP_CLIMB_MAC_SIZE];
	uint16_t buf_count;
	uint16_t pad;
	uint32_t buf_size;
} __attribute__((packed));

struct sdp_climb_chal {
	uint8_t  nonce[SDP_NONCE_SIZE];
	uint8_t  mac[SDP_CLIMB_MAC_SIZE];
	uint16_t buf_count;
	uint32_t buf_size;
};

struct sdp_climb_prove_wire {
	uint8_t  mac[SDP_CLIMB_MAC_SIZE];
	uint64_t cut; /* big-endian */
} __attribute__((packed));

struct sdp_climb_ack_wire {
	uint64_t cut; /* big-endian */
} __attribute__((packed));

void sdp_climb_req_to_wire(const struct sdp_climb_req *r, void *out);
/* Checks ports (both non-zero), the padding and the geometry. */
enum sdp_wire_error sdp_climb_req_from_wire(const void *in, size_t len, struct sdp_climb_req *r);
void sdp_climb_chal_to_wire(const struct sdp_climb_chal *ch, void *out);
enum sdp_wire_error sdp_climb_chal_from_wire(const void *in, size_t len, struct sdp_climb_chal *ch);
/* PROVE and ACK: the MAC (PROVE only, may be NULL) and the cut. */
void sdp_climb_cut_to_wire(const uint8_t *mac, uint64_t cut, void *out);
enum sdp_wire_error sdp_climb_cut_from_wire(const void *in, size_t len, bool with_mac,
					    uint8_t *mac, uint64_t *cut);

/* The immediate of a WRITE into a stream's sink: the stream's index and
 * the low 16 bits of the stream sequence number the WRITE takes. */
#define SDP_LINK_IMM(stream, mseq) (((uint32_t)(mseq) << 16) | (uint16_t)(stream))
#define SDP_LINK_IMM_STREAM(imm)   ((uint16_t)(imm))
#define SDP_LINK_IMM_MSEQ16(imm)   ((uint16_t)((imm) >> 16))

/* Link header: checks that `received` bytes arrived, len == received,
 * len <= buf_size, the kind and flags are known, the stream index is below
 * SDP_LINK_STREAMS_MAX and the payload has the size its kind requires
 * (STREAM: at least a base header). */
void sdp_lh_to_wire(const struct sdp_lh *h, void *out);
enum sdp_wire_error sdp_lh_from_wire(const void *in, size_t received, uint32_t buf_size,
				     struct sdp_lh *h);
/* Payload bytes a kind requires, or 0 for STREAM (variable). */
size_t sdp_link_payload_len(uint8_t kind);
void sdp_open_to_wire(const struct sdp_open *o, void *out);
/* Checks ports (both non-zero) and the geometry. */
enum sdp_wire_error sdp_open_from_wire(const void *in, size_t len, struct sdp_open *o);
void sdp_open_commit_to_wire(const struct sdp_open *o, const uint8_t nonce[SDP_NONCE_SIZE],
			     void *out);
/* The OPEN's checks, and the nonce. */
enum sdp_wire_error sdp_open_commit_from_wire(const void *in, size_t len, struct sdp_open *o,
					      uint8_t nonce[SDP_NONCE_SIZE]);
void sdp_open_ack_to_wire(const struct sdp_open_ack *a, void *out);
enum sdp_wire_error sdp_open_ack_from_wire(const void *in, size_t len, struct sdp_open_ack *a);

/* Limits every decoder enforces. */
#define SDP_MIN_BUF_SIZE   4096u
#define SDP_MAX_BUF_SIZE   (1u << 20)
#define SDP_MIN_BUF_COUNT  4u
#define SDP_MAX_BUF_COUNT  1024u

enum sdp_wire_error {
	SDP_WIRE_OK = 0,
	SDP_WIRE_SHORT,       /* fewer bytes than the structure */
	SDP_WIRE_BAD_MAGIC,
	SDP_WIRE_BAD_VERSION,
	SDP_WIRE_BAD_LENGTH,  /* header length disagrees with the bytes received */
	SDP_WIRE_BAD_MID,
	SDP_WIRE_BAD_FLAGS,
	SDP_WIRE_BAD_FIELD,   /* a count, size or port out of range */
};

const char *sdp_wire_error_text(enum sdp_wire_error err);

/* Base header.  Encode writes SDP_BSDH_SIZE bytes.  Decode checks that
 * `received` bytes arrived, that len == received, len <= buf_size, the mid is
 * known, the flags are known, and that control messages have exactly the
 * size their mid requires. */
void sdp_bsdh_to_wire(const struct sdp_bsdh *h, void *out);
enum sdp_wire_error sdp_bsdh_from_wire(const void *in, size_t received, uint32_t buf_size,
				       struct sdp_bsdh *h);

void sdp_ext_to_wire(const struct sdp_ext *e, void *out);
void sdp_ext_from_wire(const void *in, struct sdp_ext *e);

/* Total message length a mid requires, or 0 if it carries a variable
 * payload (DATA). */
size_t sdp_mid_fixed_len(uint8_t mid);

void sdp_hello_to_wire(const struct sdp_hello *h, struct sdp_hello_wire *out);
enum sdp_wire_error sdp_hello_from_wire(const void *in, size_t len, struct sdp_hello *h);

void sdp_hello_ack_to_wire(const struct sdp_hello_ack *h, struct sdp_hello_ack_wire *out);
enum sdp_wire_error sdp_hello_ack_from_wire(const void *in, size_t len, struct sdp_hello_ack *h);

void sdp_reject_to_wire(uint8_t code, struct sdp_reject_wire *out);
/* Returns the code, or 0 if the data is not an sdpshim reject. */
uint8_t sdp_reject_from_wire(const void *in, size_t len);

void sdp_switch_to_wire(const struct sdp_switch *sw, struct sdp_switch_wire *out);
/* Checks magic, version and flags; reason_count bounds the reason code. */
enum sdp_wire_error sdp_switch_from_wire(const void *in, size_t len, unsigned reason_count,
					 struct sdp_switch *sw);

void sdp_bind_to_wire(const struct sdp_bind *b, struct sdp_bind_wire *out);
/* Checks magic, version, kind (a bit per accepted kind in kinds_mask),
 * and the reason (below reason_count for NAK, 0 otherwise). */
enum sdp_wire_error sdp_bind_from_wire(const void *in, size_t len, unsigned kinds_mask,
				       unsigned reason_count, struct sdp_bind *b);
/* Could these first len bytes begin a bind record (magic, version, a known
 * kind, a zero reason unless NAK, as far as they go)?  The reader waits
 * for the rest only then; anything else is app data. */
bool sdp_bind_prefix_plausible(const void *in, size_t len);
#define SDP_BIND_KIND_BIT(k) (1u << (k))

/* The client's nonce rides in COMMIT's extension (c, d). */
void sdp_nonce_to_ext(const uint8_t nonce[SDP_NONCE_SIZE], struct sdp_ext *e);
void sdp_nonce_from_ext(const struct sdp_ext *e, uint8_t nonce[SDP_NONCE_SIZE]);

/* Sequence arithmetic (mod 2^32): a is after b. */
static inline bool sdp_seq_after(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

#endif
