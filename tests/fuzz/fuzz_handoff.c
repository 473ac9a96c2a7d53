/* libFuzzer harness for the fork handoff's request check (preload/
 * fork_handoff_wire.h): handoff_req_check, which the owner's server thread
 * runs on every message a descendant writes to its request socket.
 *
 * Input: one flags byte (bit 0: the kernel reported MSG_TRUNC/MSG_CTRUNC),
 * four bytes of the owner's pid (native order), then the message as received
 * (any length; the server reads at most one request's bytes, and a longer
 * message comes back truncated).
 *
 * Checked: the verdict equals the model below, taken from the raw bytes at
 * the layout's offsets (exactly one request, magic, this owner's pid, pad 0,
 * a known kind; a CLAIM or CLAIM_TCP names a socket and an id; a HOLDER names two
 * distinct real pids, neither the owner); a message of any other length or a
 * truncated one is BAD whatever it holds; the bytes past what was received
 * (left as the server's stack had them) never change the verdict. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "preload/fork_handoff_wire.h"
#include "tests/fuzz/fuzz.h"

_Static_assert(sizeof(struct handoff_req) == 40, "a 40-byte request");
_Static_assert(offsetof(struct handoff_req, kind) == 8, "layout");
_Static_assert(offsetof(struct handoff_req, holder_pid) == 12, "layout");
_Static_assert(offsetof(struct handoff_req, via_pid) == 16, "layout");
_Static_assert(offsetof(struct handoff_req, pad) == 20, "layout");
_Static_assert(offsetof(struct handoff_req, sock) == 24, "layout");
_Static_assert(offsetof(struct handoff_req, id) == 32, "layout");

static uint32_t u32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t u64_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static bool model_pid(uint32_t pid)
{
	return pid >= 1 && pid < 0x80000000u;
}

static enum handoff_req_verdict model(const uint8_t *m, size_t n, bool truncated, uint32_t self)
{
	uint32_t kind, holder, via;

	if (n != 40 || truncated || u32_at(m) != 0x5344484fu || u32_at(m + 4) != self ||
	    u32_at(m + 20) != 0)
		return HANDOFF_REQ_BAD;
	kind = u32_at(m + 8);
	holder = u32_at(m + 12);
	via = u32_at(m + 16);
	if (kind == 0)
		return HANDOFF_REQ_NOP;
	if (kind == 1 || kind == 3)
		return !u64_at(m + 24) || !u64_at(m + 32) ? HANDOFF_REQ_BAD
		       : kind == 1		     ? HANDOFF_REQ_CLAIM
						     : HANDOFF_REQ_CLAIM_TCP;
	if (kind == 2)
		return model_pid(holder) && model_pid(via) && holder != via && holder != self
			       ? HANDOFF_REQ_HOLDER
			       : HANDOFF_REQ_BAD;
	return HANDOFF_REQ_BAD;
}

/* The server's buffer: what arrived, the rest as the stack had it (fill). */
static enum handoff_req_verdict check_with_fill(const uint8_t *m, size_t n, bool truncated,
						uint32_t self, uint8_t fill)
{
	struct handoff_req req;

	memset(&req, fill, sizeof(req));
	memcpy(&req, m, n < sizeof(req) ? n : sizeof(req));
	return handoff_req_check(&req, n, truncated, self);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum handoff_req_verdict got, want;
	bool truncated;
	uint32_t self;
	const uint8_t *m;
	size_t n;

	if (size < 5)
		return 0;
	truncated = data[0] & 1;
	self = u32_at(data + 1);
	m = data + 5;
	n = size - 5;
	want = model(m, n, truncated, self);
	got = check_with_fill(m, n, truncated, self, 0x00);
	CHECK(got == want);
	CHECK(check_with_fill(m, n, truncated, self, 0xff) == got);
	if (got != HANDOFF_REQ_BAD) {
		CHECK(n == sizeof(struct handoff_req) && !truncated);
		CHECK(got == HANDOFF_REQ_NOP || got == HANDOFF_REQ_CLAIM || got == HANDOFF_REQ_HOLDER ||
		      got == HANDOFF_REQ_CLAIM_TCP);
		/* The same bytes reported truncated, or one byte short, are BAD. */
		CHECK(check_with_fill(m, n, true, self, 0) == HANDOFF_REQ_BAD);
		CHECK(check_with_fill(m, n - 1, false, self, 0) == HANDOFF_REQ_BAD);
		/* Another owner's request is BAD here. */
		CHECK(check_with_fill(m, n, false, self + 1, 0) == HANDOFF_REQ_BAD);
	}
	return 0;
}
