/* Unit test for base/hmac.c: HMAC-SHA256 against RFC 4231's test cases 1-4,
 * 6 and 7 (6 and 7 have a 131-byte key, hashed first), a key just over the
 * block length against its digest, output over the input, and ct_equal.  TAP. */
#include <stdio.h>
#include <string.h>

#include "base/hmac.h"
#include "base/sha256.h"
#include "tap.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SEQ (-1) /* a fill "byte" that means 0x01, 0x02, 0x03 ... */

/* A key or message: text if text is set, else len bytes of fill (or SEQ). */
struct bytes {
	const char *text;
	int fill;
	size_t len;
};

struct vector {
	const char *name;
	struct bytes key, msg;
	const char *hex; /* HMAC-SHA-256 from RFC 4231, section 4 */
};

static const struct vector vectors[] = {
	{ "RFC 4231 test case 1", { NULL, 0x0b, 20 }, { "Hi There", 0, 0 },
	  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
	{ "RFC 4231 test case 2 (key shorter than the tag)", { "Jefe", 0, 0 },
	  { "what do ya want for nothing?", 0, 0 },
	  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
	{ "RFC 4231 test case 3", { NULL, 0xaa, 20 }, { NULL, 0xdd, 50 },
	  "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
	{ "RFC 4231 test case 4", { NULL, SEQ, 25 }, { NULL, 0xcd, 50 },
	  "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
	{ "RFC 4231 test case 6 (131-byte key, hashed first)", { NULL, 0xaa, 131 },
	  { "Test Using Larger Than Block-Size Key - Hash Key First", 0, 0 },
	  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
	{ "RFC 4231 test case 7 (131-byte key, message over a block)", { NULL, 0xaa, 131 },
	  { "This is a test using a larger than block-size key and a larger than block-size data. "
	    "The key needs to be hashed before being used by the HMAC algorithm.", 0, 0 },
	  "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
};

/* Fills buf (at least 256 bytes) from b; returns the length. */
static size_t expand(const struct bytes *b, uint8_t *buf)
{
	if (b->text) {
		size_t n = strlen(b->text);

		memcpy(buf, b->text, n);
		return n;
	}
	for (size_t i = 0; i < b->len; i++)
		buf[i] = b->fill == SEQ ? (uint8_t)(i + 1) : (uint8_t)b->fill;
	return b->len;
}

static int check_vector(const struct vector *v)
{
	uint8_t key[256], msg[256], tag[HMAC_SHA256_LEN];
	char hex[SHA256_HEX_LEN + 1];
	size_t key_len = expand(&v->key, key), msg_len = expand(&v->msg, msg);

	hmac_sha256(key, key_len, msg, msg_len, tag);
	sha256_hex(tag, hex);
	return check(strcmp(hex, v->hex) == 0, "got %s want %s", hex, v->hex);
}

/* RFC 2104, section 2: a key longer than the block (64 bytes) is replaced
 * by its digest; one of exactly 64 bytes is used as it is. */
static int check_long_key(void)
{
	uint8_t key[SHA256_BLOCK_LEN + 1], digest[SHA256_DIGEST_LEN];
	uint8_t a[HMAC_SHA256_LEN], b[HMAC_SHA256_LEN];
	static const char msg[] = "sdpshim";
	int ok = 1;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(i * 7 + 3);

	sha256(key, sizeof(key), digest);
	hmac_sha256(key, sizeof(key), msg, sizeof(msg) - 1, a);
	hmac_sha256(digest, sizeof(digest), msg, sizeof(msg) - 1, b);
	ok &= check(memcmp(a, b, sizeof(a)) == 0, "65-byte key: tag differs from its digest's");

	sha256(key, SHA256_BLOCK_LEN, digest);
	hmac_sha256(key, SHA256_BLOCK_LEN, msg, sizeof(msg) - 1, a);
	hmac_sha256(digest, sizeof(digest), msg, sizeof(msg) - 1, b);
	ok &= check(memcmp(a, b, sizeof(a)) != 0, "64-byte key: tag equals its digest's, as if hashed");
	return ok;
}

/* The tag may be written over the message or the key; an empty key and
 * message are allowed (NULL with length 0). */
static int check_overlap_and_empty(void)
{
	uint8_t key[40], buf[HMAC_SHA256_LEN], want[HMAC_SHA256_LEN];
	uint8_t e1[HMAC_SHA256_LEN], e2[HMAC_SHA256_LEN];
	int ok = 1;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(0xa5 ^ i);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13);

	hmac_sha256(key, sizeof(key), buf, sizeof(buf), want);
	hmac_sha256(key, sizeof(key), buf, sizeof(buf), buf);
	ok &= check(memcmp(buf, want, sizeof(buf)) == 0, "tag over the message differs");

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 13);
	hmac_sha256(key, sizeof(key), buf, sizeof(buf), want);
	hmac_sha256(key, sizeof(key), buf, sizeof(buf), key);
	ok &= check(memcmp(key, want, sizeof(want)) == 0, "tag over the key differs");

	hmac_sha256(NULL, 0, NULL, 0, e1);
	hmac_sha256("", 0, "", 0, e2);
	ok &= check(memcmp(e1, e2, sizeof(e1)) == 0, "empty key and message: NULL and \"\" differ");
	return ok;
}

static int test_ct_equal_same(void)
{
	uint8_t a[33], b[33];
	int ok = 1;

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = b[i] = (uint8_t)(i * 29 + 1);
	ok &= check(ct_equal(a, b, sizeof(a)), "equal buffers compare unequal");
	ok &= check(ct_equal(a, a, sizeof(a)), "a buffer is unequal to itself");
	b[0] ^= 1;
	ok &= check(ct_equal(a, b, 0), "n == 0 is not equal");
	ok &= check(ct_equal(a + 1, b + 1, sizeof(a) - 1), "equal tails compare unequal");
	return ok;
}

/* Any one bit flipped, at any position (first and last byte included),
 * makes the buffers unequal. */
static int test_ct_equal_differ(void)
{
	uint8_t a[33], b[33];
	int ok = 1;

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = (uint8_t)(i * 29 + 1);
	for (size_t i = 0; i < sizeof(a); i++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			memcpy(b, a, sizeof(a));
			b[i] ^= (uint8_t)(1u << bit);
			ok &= check(!ct_equal(a, b, sizeof(a)), "byte %zu bit %u flipped: equal", i, bit);
			ok &= check(!ct_equal(b, a, sizeof(a)), "byte %zu bit %u flipped, b first: equal", i,
				    bit);
		}
	}
	return ok;
}

/* The use it is for: a received tag checked against the computed one. */
static int test_ct_equal_tags(void)
{
	uint8_t tag[HMAC_SHA256_LEN], got[HMAC_SHA256_LEN];
	int ok = 1;

	hmac_sha256("key", 3, "message", 7, tag);
	hmac_sha256("key", 3, "message", 7, got);
	ok &= check(ct_equal(tag, got, sizeof(tag)), "the same tag twice: unequal");
	hmac_sha256("key", 3, "messagE", 7, got);
	ok &= check(!ct_equal(tag, got, sizeof(tag)), "another message's tag: equal");
	hmac_sha256("kez", 3, "message", 7, got);
	ok &= check(!ct_equal(tag, got, sizeof(tag)), "another key's tag: equal");
	return ok;
}

int main(void)
{
	static const struct tap_case extra[] = {
		{ "a key over the block is its digest; a 64-byte key is not hashed", check_long_key },
		{ "tag written over the message or the key; empty key and message",
		  check_overlap_and_empty },
		{ "ct_equal: equal buffers, the same buffer, n == 0", test_ct_equal_same },
		{ "ct_equal: any one bit flipped at any position is unequal", test_ct_equal_differ },
		{ "ct_equal: a computed tag against the same, another message's, another key's",
		  test_ct_equal_tags },
	};

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("1..%zu\n", ARRAY_SIZE(vectors) + ARRAY_SIZE(extra));
	for (size_t i = 0; i < ARRAY_SIZE(vectors); i++)
		tap_result(check_vector(&vectors[i]), vectors[i].name);
	for (size_t i = 0; i < ARRAY_SIZE(extra); i++)
		tap_result(extra[i].fn(), extra[i].desc);
	return tap_exit_status();
}
