/* libFuzzer harness for the stats segment reader (base/stats_read.c): the
 * parsers `sdpshim stat` runs on a segment it copied out of /dev/shm, where
 * any local user may have written anything.
 *
 * Input: the bytes of a segment file, as the writer lays them out (native
 * byte order, struct sdp_proc_stats, then slot_count struct sdp_conn_stats,
 * then link_count struct sdp_link_stats).
 *
 * Checked: stats_image_parse accepts exactly what the model below allows
 * (a whole header, STATS_MAGIC, STATS_VERSION, 1 <= slot_count <=
 * STATS_SLOTS_MAX with every slot inside the input, pid > 0, 1 <= link_count
 * <= STATS_LINKS_MAX with every link record inside the input after the
 * slots), and every refusal names that rule with its own text; it writes the whole output on
 * success and nothing depends on what was there before.  An accepted header
 * equals its bytes (pid, uid, counters) and its comm is the bytes made
 * printable: NUL-terminated, no control character, no '"' or '\\', no byte
 * >= 0x7f.  stats_header_parse gives the same verdict from the header's own
 * bytes alone (in a buffer that size, so ASan sees any read past it) and
 * SHORT one byte short.  Every slot stats_image_slot accepts is exactly one
 * the model finds live and in range (in_use 1, seq even, role, path, reason
 * and address families known), its copy equals its bytes, and its JSON line
 * (stats_conn_json, as `sdpshim stat --json` prints it) fits and has no
 * control character, backslash or unbalanced quote.  The same for link
 * records (stats_image_link: in_use 1, seq even, role client or server, a
 * known state, pads 0, known address families; stats_link_json).  No index
 * past slot_count, link_count or the input is ever accepted, even with a
 * header that lies about them. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "base/stats_shm.h"
#include "tests/fuzz/fuzz.h"

#define HDR_SIZE sizeof(struct sdp_proc_stats)
#define SLOT_SIZE sizeof(struct sdp_conn_stats)
#define LINK_SIZE sizeof(struct sdp_link_stats)

/* The layout the model reads: pinned here as the writer lays it out. */
_Static_assert(HDR_SIZE == 440 && SLOT_SIZE == 208 && LINK_SIZE == 144, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, version) == 8, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, slot_count) == 12, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, pid) == 16, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, uid) == 20, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, comm) == 32, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, conns_by_path) == 96, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, negcache_hits) == 392, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, link_count) == 400, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, pin_budget) == 408, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, pinned_bytes) == 416, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, budget_refusals) == 424, "layout");
_Static_assert(offsetof(struct sdp_proc_stats, progress_wakeups) == 432, "layout");
_Static_assert(offsetof(struct sdp_link_stats, seq) == 4, "layout");
_Static_assert(offsetof(struct sdp_link_stats, role) == 8, "layout");
_Static_assert(offsetof(struct sdp_link_stats, state) == 9, "layout");
_Static_assert(offsetof(struct sdp_link_stats, pad) == 10, "layout");
_Static_assert(offsetof(struct sdp_link_stats, local) == 12, "layout");
_Static_assert(offsetof(struct sdp_link_stats, peer) == 32, "layout");
_Static_assert(offsetof(struct sdp_link_stats, pad2) == 52, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, seq) == 4, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, role) == 12, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, path) == 13, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, reason) == 14, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, local) == 20, "layout");
_Static_assert(offsetof(struct sdp_conn_stats, remote) == 40, "layout");

static enum stats_image_error model_header(const uint8_t *m, size_t n)
{
	uint32_t slots, links;

	if (n < HDR_SIZE)
		return STATS_IMAGE_SHORT;
	if (ne64_at(m) != STATS_MAGIC)
		return STATS_IMAGE_BAD_MAGIC;
	if (ne32_at(m + 8) != STATS_VERSION)
		return STATS_IMAGE_BAD_VERSION;
	slots = ne32_at(m + 12);
	if (slots == 0 || slots > STATS_SLOTS_MAX || HDR_SIZE + (uint64_t)slots * SLOT_SIZE > n)
		return STATS_IMAGE_BAD_SLOTS;
	if ((int32_t)ne32_at(m + 16) <= 0)
		return STATS_IMAGE_BAD_PID;
	links = ne32_at(m + 400);
	if (links == 0 || links > STATS_LINKS_MAX ||
	    HDR_SIZE + (uint64_t)slots * SLOT_SIZE + (uint64_t)links * LINK_SIZE > n)
		return STATS_IMAGE_BAD_LINKS;
	return STATS_IMAGE_OK;
}

static bool model_family(const uint8_t *a)
{
	uint16_t f = ne16_at(a);

	return f == 0 || f == AF_INET || f == AF_INET6;
}

static bool model_slot(const uint8_t *s)
{
	return ne32_at(s) == 1 && (ne32_at(s + 4) & 1) == 0 && s[12] <= STATS_ROLE_LISTENER &&
	       s[13] <= SDP_PATH_RDMA && ne16_at(s + 14) < SDP_REASON_COUNT && model_family(s + 20) &&
	       model_family(s + 40);
}

static bool model_link(const uint8_t *l)
{
	return ne32_at(l) == 1 && (ne32_at(l + 4) & 1) == 0 && (l[8] == 1 || l[8] == 2) &&
	       l[9] <= 3 && ne16_at(l + 10) == 0 && ne32_at(l + 52) == 0 && model_family(l + 12) &&
	       model_family(l + 32);
}

static void check_comm(const char *comm, const uint8_t *raw)
{
	size_t i;

	for (i = 0; i < 64 && raw[i]; i++) {
		unsigned char c = (unsigned char)comm[i];
		bool bad = raw[i] < 0x20 || raw[i] >= 0x7f || raw[i] == '"' || raw[i] == '\\';

		CHECK(c == (bad ? '_' : raw[i]));
		CHECK(c >= 0x20 && c < 0x7f && c != '"' && c != '\\');
	}
	CHECK(comm[i] == '\0');
}

static void check_header(const struct stats_proc_info *info, const uint8_t *m, size_t n)
{
	CHECK(info->slot_count == ne32_at(m + 12));
	CHECK(info->slot_count >= 1 && info->slot_count <= STATS_SLOTS_MAX);
	CHECK(stats_seg_len(info->slot_count) <= n);
	CHECK(info->pid > 0 && info->pid == (pid_t)ne32_at(m + 16));
	CHECK(info->uid == (uid_t)ne32_at(m + 20));
	CHECK(info->start_ms == ne64_at(m + 24));
	for (size_t i = 0; i < 3; i++)
		CHECK(info->conns_by_path[i] == ne64_at(m + 96 + 8 * i));
	for (size_t i = 0; i < STATS_REASON_SLOTS; i++)
		CHECK(info->conns_by_reason[i] == ne64_at(m + 120 + 8 * i));
	CHECK(info->bytes_sent == ne64_at(m + 376) && info->bytes_received == ne64_at(m + 384));
	CHECK(info->negcache_hits == ne64_at(m + 392));
	CHECK(info->link_count == ne32_at(m + 400));
	CHECK(info->link_count >= 1 && info->link_count <= STATS_LINKS_MAX);
	CHECK(stats_link_off(info->slot_count, info->link_count) <= n);
	CHECK(info->pin_budget == ne64_at(m + 408) && info->pinned_bytes == ne64_at(m + 416));
	CHECK(info->budget_refusals == ne64_at(m + 424));
	CHECK(info->progress_wakeups == ne64_at(m + 432));
	check_comm(info->comm, m + 32);
}

/* The header alone, in a buffer of exactly its size, reads the same. */
static void check_header_bytes(const uint8_t *data, size_t size, enum stats_image_error err,
			       const struct stats_proc_info *whole)
{
	struct stats_proc_info info;
	uint8_t *copy;

	if (size < HDR_SIZE)
		return;
	copy = malloc(HDR_SIZE);
	CHECK(copy != NULL);
	memcpy(copy, data, HDR_SIZE);
	CHECK(stats_header_parse(copy, HDR_SIZE, size, &info) == err);
	if (err == STATS_IMAGE_OK)
		CHECK(memcmp(&info, whole, sizeof(info)) == 0);
	CHECK(stats_header_parse(copy, HDR_SIZE - 1, size, &info) == STATS_IMAGE_SHORT);
	free(copy);
}

/* Quotes balance and nothing inside needs escaping. */
static void check_json(const char *s, int len)
{
	bool in_string = false;

	CHECK(len > 2 && (size_t)len == strlen(s) && s[0] == '{' && s[len - 1] == '}');
	for (int i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		CHECK(c >= 0x20 && c < 0x7f && c != '\\');
		if (c == '"')
			in_string = !in_string;
	}
	CHECK(!in_string);
}

/* One slot's own bytes, in a buffer that size, read the same; one short, not. */
static void check_slot_bytes(const uint8_t *slot, bool ok)
{
	struct sdp_conn_stats s;
	uint8_t *copy = malloc(SLOT_SIZE);

	CHECK(copy != NULL);
	memcpy(copy, slot, SLOT_SIZE);
	CHECK(stats_slot_parse(copy, SLOT_SIZE, &s) == ok);
	CHECK(!stats_slot_parse(copy, SLOT_SIZE - 1, &s));
	CHECK(!stats_slot_parse(NULL, SLOT_SIZE, &s));
	free(copy);
}

static void check_slot(const uint8_t *data, size_t size, const struct stats_proc_info *info,
		       uint32_t i)
{
	size_t off = HDR_SIZE + (size_t)i * SLOT_SIZE;
	struct sdp_conn_stats s;
	char json[2048];
	bool ok = stats_image_slot(data, size, info, i, &s);
	int len;

	CHECK(ok == (i < info->slot_count && off + SLOT_SIZE <= size && model_slot(data + off)));
	if (i < info->slot_count)
		check_slot_bytes(data + off, ok);
	if (!ok)
		return;
	CHECK(memcmp(&s, data + off, SLOT_SIZE) == 0);
	len = stats_conn_json(&s, info->pid, info->comm, 0, json, sizeof(json));
	CHECK(len > 0);
	check_json(json, len);
}

/* One link record's own bytes, in a buffer that size, read the same; one short, not. */
static void check_link_bytes(const uint8_t *rec, bool ok)
{
	struct sdp_link_stats l;
	uint8_t *copy = malloc(LINK_SIZE);

	CHECK(copy != NULL);
	memcpy(copy, rec, LINK_SIZE);
	CHECK(stats_link_parse(copy, LINK_SIZE, &l) == ok);
	CHECK(!stats_link_parse(copy, LINK_SIZE - 1, &l));
	CHECK(!stats_link_parse(NULL, LINK_SIZE, &l));
	free(copy);
}

static void check_link(const uint8_t *data, size_t size, const struct stats_proc_info *info,
		       uint32_t i)
{
	size_t off = HDR_SIZE + (size_t)info->slot_count * SLOT_SIZE + (size_t)i * LINK_SIZE;
	struct sdp_link_stats l;
	char json[2048];
	bool ok = stats_image_link(data, size, info, i, &l);
	int len;

	CHECK(ok == (i < info->link_count && off + LINK_SIZE <= size && model_link(data + off)));
	if (i < info->link_count)
		check_link_bytes(data + off, ok);
	if (!ok)
		return;
	CHECK(memcmp(&l, data + off, LINK_SIZE) == 0);
	len = stats_link_json(&l, json, sizeof(json));
	CHECK(len > 0);
	check_json(json, len);
}

/* A header that claims more slots or links than the input holds gets
 * nothing past it. */
static void check_lying_header(const uint8_t *data, size_t size)
{
	struct stats_proc_info liar;
	struct sdp_conn_stats s;
	struct sdp_link_stats l;
	uint32_t fit = size < HDR_SIZE ? 0 : (uint32_t)((size - HDR_SIZE) / SLOT_SIZE);
	uint32_t links_fit = size < HDR_SIZE ? 0 : (uint32_t)((size - HDR_SIZE) / LINK_SIZE);

	memset(&liar, 0, sizeof(liar));
	liar.slot_count = UINT32_MAX;
	liar.link_count = UINT32_MAX;
	CHECK(!stats_image_slot(data, size, &liar, fit, &s));
	CHECK(!stats_image_slot(data, size, &liar, UINT32_MAX, &s));
	CHECK(!stats_image_link(data, size, &liar, 0, &l));  /* slots past any image */
	liar.slot_count = 0;
	CHECK(!stats_image_link(data, size, &liar, links_fit, &l));
	CHECK(!stats_image_link(data, size, &liar, UINT32_MAX, &l));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stats_proc_info info[2];
	enum stats_image_error err;

	memset(&info[0], 0x00, sizeof(info[0]));
	memset(&info[1], 0xff, sizeof(info[1]));
	err = stats_image_parse(data, size, &info[0]);
	CHECK(stats_image_parse(data, size, &info[1]) == err);
	CHECK(stats_image_parse(NULL, size, &info[1]) == STATS_IMAGE_SHORT);
	CHECK(err == model_header(data, size));
	CHECK(strcmp(stats_image_error_text(err), "unknown stats image error") != 0);
	check_header_bytes(data, size, err, &info[0]);
	check_lying_header(data, size);
	if (err != STATS_IMAGE_OK)
		return 0;
	CHECK(memcmp(&info[0], &info[1], sizeof(info[0])) == 0);
	check_header(&info[0], data, size);
	for (uint32_t i = 0; i <= info[0].slot_count; i++)
		check_slot(data, size, &info[0], i);
	CHECK(!stats_image_slot(data, size, &info[0], UINT32_MAX, &(struct sdp_conn_stats){ 0 }));
	for (uint32_t i = 0; i <= info[0].link_count; i++)
		check_link(data, size, &info[0], i);
	CHECK(!stats_image_link(data, size, &info[0], UINT32_MAX, &(struct sdp_link_stats){ 0 }));
	return 0;
}
