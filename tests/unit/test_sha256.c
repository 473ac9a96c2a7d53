/* Unit test for base/sha256.c: FIPS 180 test vectors (one-shot and
 * streamed in odd-sized pieces), block-boundary lengths and the hex helper. TAP. */
#include "base/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vector {
    const char *name;
    const char *unit;      /* message = unit repeated `repeat` times */
    size_t repeat;
    const char *hex;       /* expected digest */
};

/* FIPS 180-2 / NIST CSRC example messages for SHA-256. */
static const struct vector vectors[] = {
    { "empty string", "", 1,
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
    { "\"abc\"", "abc", 1,
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
    { "448-bit message", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    { "896-bit message",
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
      "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", 1,
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
    { "one million 'a'", "a", 1000000,
      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" },
};
#define NVEC (sizeof vectors / sizeof vectors[0])

static int case_no, failures;

static void report(int ok, const char *fmt, const char *what, const char *detail)
{
    case_no++;
    printf("%sok %d - ", ok ? "" : "not ", case_no);
    printf(fmt, what);
    printf("\n");
    if (!ok) {
        failures++;
        if (detail)
            printf("#   %s\n", detail);
    }
}

static char *expand(const struct vector *v, size_t *len)
{
    size_t ul = strlen(v->unit);
    *len = ul * v->repeat;
    char *buf = malloc(*len + 1);
    if (!buf) {
        perror("malloc");
        exit(2);
    }
    for (size_t i = 0; i < v->repeat; i++)
        memcpy(buf + i * ul, v->unit, ul);
    buf[*len] = '\0';
    return buf;
}

static void check_digest(const uint8_t d[SHA256_DIGEST_LEN], const char *want,
                         const char *fmt, const char *name)
{
    char hex[SHA256_HEX_LEN + 1], detail[200];
    sha256_hex(d, hex);
    snprintf(detail, sizeof detail, "got %s want %s", hex, want);
    report(strcmp(hex, want) == 0, fmt, name, detail);
}

int main(void)
{
    /* 2 cases per vector, then the boundary sweep and the hex helper. */
    printf("1..%d\n", (int)(2 * NVEC) + 2);

    for (size_t i = 0; i < NVEC; i++) {
        const struct vector *v = &vectors[i];
        size_t len;
        char *msg = expand(v, &len);
        uint8_t d[SHA256_DIGEST_LEN];
        char label[80];
        snprintf(label, sizeof label, "vector %zu (%s)", i + 1, v->name);

        sha256(msg, len, d);
        check_digest(d, v->hex, "%s, one-shot", label);

        /* Streamed in pieces of 1, 2, 3 ... 130 bytes, cycling, so that
         * every split position relative to the 64-byte block occurs. */
        sha256_ctx c;
        sha256_init(&c);
        size_t off = 0, piece = 1;
        while (off < len) {
            size_t n = len - off < piece ? len - off : piece;
            sha256_update(&c, msg + off, n);
            off += n;
            piece = piece % 130 + 1;
        }
        sha256_update(&c, msg, 0);          /* a zero-length update is a no-op */
        sha256_final(&c, d);
        check_digest(d, v->hex, "%s, streamed in uneven pieces", label);
        free(msg);
    }

    /* Every length from 0 to 200 (covers the 55/56/63/64-byte padding
     * boundaries): byte-at-a-time must equal one-shot, and lengths differ. */
    {
        uint8_t buf[200], prev[SHA256_DIGEST_LEN] = { 0 };
        char detail[120] = "";
        int ok = 1;
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = (uint8_t)(i * 131 + 7);
        for (size_t len = 0; len <= sizeof buf && ok; len++) {
            uint8_t one[SHA256_DIGEST_LEN], many[SHA256_DIGEST_LEN];
            sha256(buf, len, one);
            sha256_ctx c;
            sha256_init(&c);
            for (size_t j = 0; j < len; j++)
                sha256_update(&c, buf + j, 1);
            sha256_final(&c, many);
            if (memcmp(one, many, sizeof one) != 0) {
                ok = 0;
                snprintf(detail, sizeof detail, "length %zu: bytewise != one-shot", len);
            } else if (len && memcmp(one, prev, sizeof one) == 0) {
                ok = 0;
                snprintf(detail, sizeof detail, "length %zu: same digest as length %zu",
                         len, len - 1);
            }
            memcpy(prev, one, sizeof prev);
        }
        report(ok, "%s", "lengths 0..200: bytewise == one-shot, all distinct", detail);
    }

    /* Hex helper: bytes 0x00, 0x11, ... wrap; check exact formatting. */
    {
        uint8_t d[SHA256_DIGEST_LEN];
        char hex[SHA256_HEX_LEN + 2], want[SHA256_HEX_LEN + 1], detail[200];
        for (int i = 0; i < SHA256_DIGEST_LEN; i++) {
            d[i] = (uint8_t)(i * 0x11 + 0x0f);
            snprintf(want + 2 * i, 3, "%02x", d[i]);
        }
        hex[SHA256_HEX_LEN + 1] = 'X';              /* must stay untouched */
        char *r = sha256_hex(d, hex);
        snprintf(detail, sizeof detail, "got %s want %s", hex, want);
        report(r == hex && strcmp(hex, want) == 0 && hex[SHA256_HEX_LEN + 1] == 'X',
               "%s", "sha256_hex formats lowercase, NUL-terminated", detail);
    }

    if (failures)
        printf("# %d of %d cases failed\n", failures, case_no);
    return failures ? 1 : 0;
}
