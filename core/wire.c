/* Encoders and validating decoders of the sdpshim wire format. */
#include <arpa/inet.h>
#include <endian.h>
#include <string.h>

#include "core/wire.h"

const char *sdp_wire_error_text(enum sdp_wire_error err)
{
	switch (err) {
	case SDP_WIRE_OK:          return "ok";
	case SDP_WIRE_SHORT:       return "message shorter than its header";
	case SDP_WIRE_BAD_MAGIC:   return "bad magic";
	case SDP_WIRE_BAD_VERSION: return "unsupported protocol version";
	case SDP_WIRE_BAD_LENGTH:  return "length field disagrees with bytes received";
	case SDP_WIRE_BAD_MID:     return "unknown message id";
	case SDP_WIRE_BAD_FLAGS:   return "unknown flags";
	case SDP_WIRE_BAD_FIELD:   return "field out of range";
	}
	return "unknown wire error";
}

size_t sdp_mid_fixed_len(uint8_t mid)
{
	switch ((enum sdp_mid)mid) {
	case SDP_MID_DATA:
		return 0;
	case SDP_MID_CREDIT_UPDATE:
	case SDP_MID_DISCONN:
	case SDP_MID_KEEPALIVE:
	case SDP_MID_ATTACH:
		return SDP_BSDH_SIZE;
	case SDP_MID_ABORT:
	case SDP_MID_COMMIT:
	case SDP_MID_DETACH:
	case SDP_MID_SRC_AVAIL:
	case SDP_MID_RDMA_RD_COMPL:
	case SDP_MID_SRC_CANCEL:
	case SDP_MID_SINK_AVAIL:
	case SDP_MID_RDMA_WR_COMPL:
	case SDP_MID_SINK_CANCEL:
	case SDP_MID_SINK_CANCEL_ACK:
	case SDP_MID_SWITCH:
		return SDP_BSDH_SIZE + SDP_EXT_SIZE;
	}
	return (size_t)-1;
}

void sdp_bsdh_to_wire(const struct sdp_bsdh *h, void *out)
{
	struct sdp_bsdh_wire w = {
		.mid = h->mid,
		.flags = h->flags,
		.bufs = htons(h->bufs),
		.len = htonl(h->len),
		.mseq = htonl(h->mseq),
		.mseq_ack = htonl(h->mseq_ack),
	};

	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_bsdh_from_wire(const void *in, size_t received, uint32_t buf_size,
				       struct sdp_bsdh *h)
{
	struct sdp_bsdh_wire w;
	size_t fixed;

	if (received < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	h->mid = w.mid;
	h->flags = w.flags;
	h->bufs = ntohs(w.bufs);
	h->len = ntohl(w.len);
	h->mseq = ntohl(w.mseq);
	h->mseq_ack = ntohl(w.mseq_ack);
	if (h->len != received || h->len > buf_size)
		return SDP_WIRE_BAD_LENGTH;
	fixed = sdp_mid_fixed_len(h->mid);
	if (fixed == (size_t)-1)
		return SDP_WIRE_BAD_MID;
	if (fixed != 0 && h->len != fixed)
		return SDP_WIRE_BAD_LENGTH;
	if (h->mid == SDP_MID_DATA && h->len == SDP_BSDH_SIZE)
		return SDP_WIRE_BAD_LENGTH; /* empty data messages are never sent */
	if (h->flags & ~SDP_FLAG_KNOWN)
		return SDP_WIRE_BAD_FLAGS;
	if (h->bufs > SDP_MAX_BUF_COUNT)
		return SDP_WIRE_BAD_FIELD;
	return SDP_WIRE_OK;
}

void sdp_ext_to_wire(const struct sdp_ext *e, void *out)
{
	struct sdp_ext_wire w = {
		.a = htonl(e->a),
		.b = htonl(e->b),
		.c = htobe64(e->c),
		.d = htobe64(e->d),
	};

	memcpy(out, &w, sizeof(w));
}

void sdp_ext_from_wire(const void *in, struct sdp_ext *e)
{
	struct sdp_ext_wire w;

	memcpy(&w, in, sizeof(w));
	e->a = ntohl(w.a);
	e->b = ntohl(w.b);
	e->c = be64toh(w.c);
	e->d = be64toh(w.d);
}

/* Magic (network order as received), version and flags of the messages
 * that carry them: Hello, HelloAck, SWITCH. */
static enum sdp_wire_error check_preamble_flags(uint32_t magic_be, uint8_t version, unsigned flags,
						unsigned known)
{
	if (ntohl(magic_be) != SDP_HELLO_MAGIC)
		return SDP_WIRE_BAD_MAGIC;
	if (version != SDP_WIRE_VERSION)
		return SDP_WIRE_BAD_VERSION;
	if (flags & ~known)
		return SDP_WIRE_BAD_FLAGS;
	return SDP_WIRE_OK;
}

static enum sdp_wire_error check_preamble(uint32_t magic_be, uint8_t version, unsigned flags)
{
	return check_preamble_flags(magic_be, version, flags, 0);
}

static enum sdp_wire_error check_buffers(uint16_t count, uint32_t size)
{
	if (count < SDP_MIN_BUF_COUNT || count > SDP_MAX_BUF_COUNT)
		return SDP_WIRE_BAD_FIELD;
	if (size < SDP_MIN_BUF_SIZE || size > SDP_MAX_BUF_SIZE)
		return SDP_WIRE_BAD_FIELD;
	return SDP_WIRE_OK;
}

void sdp_hello_to_wire(const struct sdp_hello *h, struct sdp_hello_wire *out)
{
	memset(out, 0, sizeof(*out));
	out->magic = htonl(SDP_HELLO_MAGIC);
	out->version = h->version;
	out->flags = h->flags;
	out->buf_count = htons(h->buf_count);
	out->buf_size = htonl(h->buf_size);
	out->src_port = htons(h->tuple.src_port);
	out->dst_port = htons(h->tuple.dst_port);
	memcpy(out->src_addr, h->tuple.src_addr, 16);
	memcpy(out->dst_addr, h->tuple.dst_addr, 16);
}

enum sdp_wire_error sdp_hello_from_wire(const void *in, size_t len, struct sdp_hello *h)
{
	enum sdp_wire_error err;
	struct sdp_hello_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	err = check_preamble_flags(w.magic, w.version, w.flags, SDP_HELLO_FLAGS);
	if (err != SDP_WIRE_OK)
		return err;
	if ((w.flags & SDP_HELLO_LINK_ONLY) && !(w.flags & SDP_HELLO_FLAG_LINK))
		return SDP_WIRE_BAD_FLAGS;
	memset(h, 0, sizeof(*h));
	h->version = w.version;
	h->flags = w.flags;
	h->buf_count = ntohs(w.buf_count);
	h->buf_size = ntohl(w.buf_size);
	h->tuple.src_port = ntohs(w.src_port);
	h->tuple.dst_port = ntohs(w.dst_port);
	memcpy(h->tuple.src_addr, w.src_addr, 16);
	memcpy(h->tuple.dst_addr, w.dst_addr, 16);
	/* A link's Hello names no TCP connection: no source port. */
	if ((h->tuple.src_port == 0) != ((h->flags & SDP_HELLO_FLAG_LINK) != 0) || h->tuple.dst_port == 0)
		return SDP_WIRE_BAD_FIELD;
	return check_buffers(h->buf_count, h->buf_size);
}

void sdp_hello_ack_to_wire(const struct sdp_hello_ack *h, struct sdp_hello_ack_wire *out)
{
	memset(out, 0, sizeof(*out));
	out->magic = htonl(SDP_HELLO_MAGIC);
	out->version = h->version;
	out->flags = h->flags;
	out->buf_count = htons(h->buf_count);
	out->buf_size = htonl(h->buf_size);
	memcpy(out->nonce, h->nonce, SDP_NONCE_SIZE);
}

enum sdp_wire_error sdp_hello_ack_from_wire(const void *in, size_t len, struct sdp_hello_ack *h)
{
	enum sdp_wire_error err;
	struct sdp_hello_ack_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	err = check_preamble_flags(w.magic, w.version, w.flags, SDP_HELLO_FLAGS);
	if (err != SDP_WIRE_OK)
		return err;
	if ((w.flags & SDP_HELLO_LINK_ONLY) && !(w.flags & SDP_HELLO_FLAG_LINK))
		return SDP_WIRE_BAD_FLAGS;
	h->version = w.version;
	h->flags = w.flags;
	h->buf_count = ntohs(w.buf_count);
	h->buf_size = ntohl(w.buf_size);
	memcpy(h->nonce, w.nonce, SDP_NONCE_SIZE);
	return check_buffers(h->buf_count, h->buf_size);
}

void sdp_reject_to_wire(uint8_t code, struct sdp_reject_wire *out)
{
	memset(out, 0, sizeof(*out));
	out->magic = htonl(SDP_HELLO_MAGIC);
	out->version = SDP_WIRE_VERSION;
	out->code = code;
}

uint8_t sdp_reject_from_wire(const void *in, size_t len)
{
	struct sdp_reject_wire w;

	if (!in || len < sizeof(w))
		return 0;
	memcpy(&w, in, sizeof(w));
	if (ntohl(w.magic) != SDP_HELLO_MAGIC)
		return 0;
	return w.code;
}

void sdp_switch_to_wire(const struct sdp_switch *sw, struct sdp_switch_wire *out)
{
	memset(out, 0, sizeof(*out));
	out->magic = htonl(SDP_HELLO_MAGIC);
	out->version = SDP_WIRE_VERSION;
	out->reason = sw->reason;
	out->resend_from = htobe64(sw->resend_from);
}

enum sdp_wire_error sdp_switch_from_wire(const void *in, size_t len, unsigned reason_count,
					 struct sdp_switch *sw)
{
	enum sdp_wire_error err;
	struct sdp_switch_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	err = check_preamble(w.magic, w.version, w.flags);
	if (err != SDP_WIRE_OK)
		return err;
	if (w.reason >= reason_count)
		return SDP_WIRE_BAD_FIELD;
	sw->reason = w.reason;
	sw->resend_from = be64toh(w.resend_from);
	return SDP_WIRE_OK;
}

void sdp_bind_to_wire(const struct sdp_bind *b, struct sdp_bind_wire *out)
{
	memset(out, 0, sizeof(*out));
	out->magic = htonl(SDP_BIND_MAGIC);
	out->version = SDP_WIRE_VERSION;
	out->kind = b->kind;
	out->reason = htons(b->reason);
	memcpy(out->nonce, b->nonce, SDP_NONCE_SIZE);
}

enum sdp_wire_error sdp_bind_from_wire(const void *in, size_t len, unsigned kinds_mask,
				       unsigned reason_count, struct sdp_bind *b)
{
	struct sdp_bind_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	if (ntohl(w.magic) != SDP_BIND_MAGIC)
		return SDP_WIRE_BAD_MAGIC;
	if (w.version != SDP_WIRE_VERSION)
		return SDP_WIRE_BAD_VERSION;
	if (w.kind < SDP_BIND_PROOF || w.kind > SDP_BIND_NAK || !(kinds_mask & (1u << w.kind)))
		return SDP_WIRE_BAD_MID;
	b->kind = w.kind;
	b->reason = ntohs(w.reason);
	if (w.kind == SDP_BIND_NAK ? b->reason >= reason_count : b->reason != 0)
		return SDP_WIRE_BAD_FIELD;
	memcpy(b->nonce, w.nonce, SDP_NONCE_SIZE);
	return SDP_WIRE_OK;
}

bool sdp_bind_prefix_plausible(const void *in, size_t len)
{
	struct sdp_bind_wire w;
	uint32_t be = htonl(SDP_BIND_MAGIC);
	uint8_t kind;

	memset(&w, 0, sizeof(w));
	memcpy(&w, in, len < sizeof(w) ? len : sizeof(w));
	if (memcmp(&w.magic, &be, len < 4 ? len : 4) != 0)
		return false;
	if (len > 4 && w.version != SDP_WIRE_VERSION)
		return false;
	kind = w.kind;
	if (len > 5 && (kind < SDP_BIND_PROOF || kind > SDP_BIND_NAK))
		return false;
	/* Only a NAK carries a reason: the others' reason bytes are zero. */
	if (len > 6 && kind != SDP_BIND_NAK && ((const uint8_t *)in)[6] != 0)
		return false;
	if (len > 7 && kind != SDP_BIND_NAK && ((const uint8_t *)in)[7] != 0)
		return false;
	return true;
}

void sdp_nonce_to_ext(const uint8_t nonce[SDP_NONCE_SIZE], struct sdp_ext *e)
{
	uint64_t hi, lo;

	memcpy(&hi, nonce, 8);
	memcpy(&lo, nonce + 8, 8);
	e->c = be64toh(hi);
	e->d = be64toh(lo);
}

void sdp_nonce_from_ext(const struct sdp_ext *e, uint8_t nonce[SDP_NONCE_SIZE])
{
	uint64_t hi = htobe64(e->c), lo = htobe64(e->d);

	memcpy(nonce, &hi, 8);
	memcpy(nonce + 8, &lo, 8);
}

/* ------------------------------------------------------------ links */

size_t sdp_link_payload_len(uint8_t kind)
{
	switch ((enum sdp_link_kind)kind) {
	case SDP_LINK_STREAM:
		return 0;
	case SDP_LINK_CREDIT:
	case SDP_LINK_RELEASED:
		return 0;
	case SDP_LINK_OPEN:
		return sizeof(struct sdp_open_wire);
	case SDP_LINK_OPEN_COMMIT:
		return sizeof(struct sdp_open_commit_wire);
	case SDP_LINK_OPEN_ACK:
		return sizeof(struct sdp_open_ack_wire);
	case SDP_LINK_OPEN_NAK:
	case SDP_LINK_CLIMB_NAK:
		return sizeof(struct sdp_open_nak_wire);
	case SDP_LINK_CLIMB_REQ:
		return sizeof(struct sdp_climb_req_wire);
	case SDP_LINK_CLIMB_CHAL:
		return sizeof(struct sdp_climb_chal_wire);
	case SDP_LINK_CLIMB_PROVE:
		return sizeof(struct sdp_climb_prove_wire);
	case SDP_LINK_CLIMB_ACK:
		return sizeof(struct sdp_climb_ack_wire);
	}
	return (size_t)-1;
}

void sdp_lh_to_wire(const struct sdp_lh *h, void *out)
{
	struct sdp_lh_wire w = {
		.kind = h->kind,
		.flags = h->flags,
		.stream = htons(h->stream),
		.len = htonl(h->len),
		.lseq = htonl(h->lseq),
		.lack = htonl(h->lack),
	};

	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_lh_from_wire(const void *in, size_t received, uint32_t buf_size,
				     struct sdp_lh *h)
{
	struct sdp_lh_wire w;
	size_t payload;

	if (received < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	h->kind = w.kind;
	h->flags = w.flags;
	h->stream = ntohs(w.stream);
	h->len = ntohl(w.len);
	h->lseq = ntohl(w.lseq);
	h->lack = ntohl(w.lack);
	if (h->len != received || h->len > buf_size)
		return SDP_WIRE_BAD_LENGTH;
	payload = sdp_link_payload_len(h->kind);
	if (payload == (size_t)-1)
		return SDP_WIRE_BAD_MID;
	if (h->kind == SDP_LINK_STREAM ? h->len < SDP_LH_SIZE + SDP_BSDH_SIZE
				       : h->len != SDP_LH_SIZE + payload)
		return SDP_WIRE_BAD_LENGTH;
	if (h->flags & ~SDP_LINK_FLAG_KNOWN)
		return SDP_WIRE_BAD_FLAGS;
	if (h->stream >= SDP_LINK_STREAMS_MAX)
		return SDP_WIRE_BAD_FIELD;
	return SDP_WIRE_OK;
}

void sdp_open_to_wire(const struct sdp_open *o, void *out)
{
	struct sdp_open_wire w;

	memset(&w, 0, sizeof(w));
	memcpy(w.src_addr, o->tuple.src_addr, 16);
	memcpy(w.dst_addr, o->tuple.dst_addr, 16);
	w.src_port = htons(o->tuple.src_port);
	w.dst_port = htons(o->tuple.dst_port);
	w.buf_count = htons(o->buf_count);
	w.rdv_port = htons(o->rdv_port);
	w.buf_size = htonl(o->buf_size);
	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_open_from_wire(const void *in, size_t len, struct sdp_open *o)
{
	struct sdp_open_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	memset(o, 0, sizeof(*o));
	memcpy(o->tuple.src_addr, w.src_addr, 16);
	memcpy(o->tuple.dst_addr, w.dst_addr, 16);
	o->tuple.src_port = ntohs(w.src_port);
	o->tuple.dst_port = ntohs(w.dst_port);
	o->buf_count = ntohs(w.buf_count);
	o->rdv_port = ntohs(w.rdv_port);
	o->buf_size = ntohl(w.buf_size);
	if (o->tuple.src_port == 0 || o->tuple.dst_port == 0)
		return SDP_WIRE_BAD_FIELD;
	return check_buffers(o->buf_count, o->buf_size);
}

void sdp_open_commit_to_wire(const struct sdp_open *o, const uint8_t nonce[SDP_NONCE_SIZE],
			     void *out)
{
	struct sdp_open_commit_wire w;

	sdp_open_to_wire(o, &w.open);
	memcpy(w.nonce, nonce, SDP_NONCE_SIZE);
	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_open_commit_from_wire(const void *in, size_t len, struct sdp_open *o,
					      uint8_t nonce[SDP_NONCE_SIZE])
{
	struct sdp_open_commit_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	memcpy(nonce, w.nonce, SDP_NONCE_SIZE);
	return sdp_open_from_wire(&w.open, sizeof(w.open), o);
}

void sdp_open_ack_to_wire(const struct sdp_open_ack *a, void *out)
{
	struct sdp_open_ack_wire w;

	memset(&w, 0, sizeof(w));
	memcpy(w.nonce, a->nonce, SDP_NONCE_SIZE);
	w.buf_count = htons(a->buf_count);
	w.rdv_port = htons(a->rdv_port);
	w.buf_size = htonl(a->buf_size);
	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_open_ack_from_wire(const void *in, size_t len, struct sdp_open_ack *a)
{
	struct sdp_open_ack_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	memcpy(a->nonce, w.nonce, SDP_NONCE_SIZE);
	a->buf_count = ntohs(w.buf_count);
	a->rdv_port = ntohs(w.rdv_port);
	a->buf_size = ntohl(w.buf_size);
	return check_buffers(a->buf_count, a->buf_size);
}

/* ------------------------------------------------------------ climb */

void sdp_climb_req_to_wire(const struct sdp_climb_req *r, void *out)
{
	struct sdp_climb_req_wire w;

	memset(&w, 0, sizeof(w));
	memcpy(w.src_addr, r->tuple.src_addr, 16);
	memcpy(w.dst_addr, r->tuple.dst_addr, 16);
	w.src_port = htons(r->tuple.src_port);
	w.dst_port = htons(r->tuple.dst_port);
	w.buf_count = htons(r->buf_count);
	w.flags = htons(r->flags);
	w.buf_size = htonl(r->buf_size);
	memcpy(w.nonce, r->nonce, SDP_NONCE_SIZE);
	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_climb_req_from_wire(const void *in, size_t len, struct sdp_climb_req *r)
{
	struct sdp_climb_req_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	memset(r, 0, sizeof(*r));
	memcpy(r->tuple.src_addr, w.src_addr, 16);
	memcpy(r->tuple.dst_addr, w.dst_addr, 16);
	r->tuple.src_port = ntohs(w.src_port);
	r->tuple.dst_port = ntohs(w.dst_port);
	r->buf_count = ntohs(w.buf_count);
	r->flags = ntohs(w.flags);
	r->buf_size = ntohl(w.buf_size);
	memcpy(r->nonce, w.nonce, SDP_NONCE_SIZE);
	if (r->tuple.src_port == 0 || r->tuple.dst_port == 0 || (r->flags & ~SDP_CLIMB_FLAGS_KNOWN))
		return SDP_WIRE_BAD_FIELD;
	return check_buffers(r->buf_count, r->buf_size);
}

void sdp_climb_chal_to_wire(const struct sdp_climb_chal *ch, void *out)
{
	struct sdp_climb_chal_wire w;

	memset(&w, 0, sizeof(w));
	memcpy(w.nonce, ch->nonce, SDP_NONCE_SIZE);
	memcpy(w.mac, ch->mac, SDP_CLIMB_MAC_SIZE);
	w.buf_count = htons(ch->buf_count);
	w.buf_size = htonl(ch->buf_size);
	memcpy(out, &w, sizeof(w));
}

enum sdp_wire_error sdp_climb_chal_from_wire(const void *in, size_t len, struct sdp_climb_chal *ch)
{
	struct sdp_climb_chal_wire w;

	if (!in || len < sizeof(w))
		return SDP_WIRE_SHORT;
	memcpy(&w, in, sizeof(w));
	memcpy(ch->nonce, w.nonce, SDP_NONCE_SIZE);
	memcpy(ch->mac, w.mac, SDP_CLIMB_MAC_SIZE);
	ch->buf_count = ntohs(w.buf_count);
	ch->buf_size = ntohl(w.buf_size);
	if (w.pad != 0)
		return SDP_WIRE_BAD_FIELD;
	return check_buffers(ch->buf_count, ch->buf_size);
}

static uint64_t be64_load(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void be64_store(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

void sdp_climb_cut_to_wire(const uint8_t *mac, uint64_t cut, void *out)
{
	uint8_t *p = out;

	if (mac) {
		memcpy(p, mac, SDP_CLIMB_MAC_SIZE);
		p += SDP_CLIMB_MAC_SIZE;
	}
	be64_store(p, cut);
}

enum sdp_wire_error sdp_climb_cut_from_wire(const void *in, size_t len, bool with_mac,
					    uint8_t *mac, uint64_t *cut)
{
	const uint8_t *p = in;
	size_t need = with_mac ? sizeof(struct sdp_climb_prove_wire) : sizeof(struct sdp_climb_ack_wire);

	if (!in || len < need)
		return SDP_WIRE_SHORT;
	if (with_mac) {
		memcpy(mac, p, SDP_CLIMB_MAC_SIZE);
		p += SDP_CLIMB_MAC_SIZE;
	}
	*cut = be64_load(p);
	if (*cut > (1ull << 62))
		return SDP_WIRE_BAD_FIELD; /* no stream gets there */
	return SDP_WIRE_OK;
}
