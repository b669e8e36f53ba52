/*
 * Tests of src/core/utf8.c and the public recur_utf8_valid / recur_utf8_char over it.
 *
 * The oracle shares no code with utf8.c: it encodes by the byte-count table of RFC 3629 (fill
 * the continuation bytes from the end), and calls a byte sequence valid exactly when it is the
 * oracle's encoding of a Unicode scalar value (not a surrogate, at most U+10FFFF). Every scalar
 * value is encoded, decoded and cut short; every sequence of one, two and three bytes, and
 * every four-byte sequence with a lead byte F0..FF, a second byte of any value and boundary
 * third and fourth bytes, is judged by both.
 */
#include "core/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "recur.h"
#include "test.h"

/* The oracle's encoding of cp into out (0 for a value that is not a scalar value). */
static size_t ref_encode(uint32_t cp, unsigned char out[4]) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--) {
        out[i] = (unsigned char)(0x80 + cp % 64);
        cp /= 64;
    }
    out[0] = (unsigned char)(lead[n] + cp);
    return n;
}

/* The length of the valid character at s[0..n) by the oracle: the leading sequence is valid
 * when some length k <= min(n, 4) decodes (ignoring every rule) to a value whose oracle
 * encoding is exactly s[0..k). */
static size_t ref_len(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 4 && k <= n; k++) {
        uint32_t v = 0;
        /* the payload bits by position, whatever the markers say */
        v = k == 1 ? s[0] : (uint32_t)(s[0] & (0xFFu >> (k + 1)));
        for (size_t i = 1; i < k; i++) v = v * 64 + (s[i] & 0x3Fu);
        unsigned char e[4];
        if (ref_encode(v, e) == k && memcmp(e, s, k) == 0) return k;
    }
    return 0;
}

static void test_every_scalar_value(void) {
    size_t bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        unsigned char want[4];
        const size_t n = ref_encode(cp, want);
        char got[4] = {0};
        const size_t k = rcore_utf8_encode(cp, got);
        if (k != n || (n && memcmp(got, want, n) != 0)) {
            if (bad++ < 5) CHECK_MSG(0, "encode U+%04X: %zu bytes, want %zu", (unsigned)cp, k, n);
            continue;
        }
        if (n == 0) continue; /* a surrogate: its decoding is tested with the sequences */
        size_t len = 9;
        const uint32_t d = rcore_utf8_decode(want, n, &len);
        if (d != cp || len != n || rcore_utf8_len(want, n) != n || rcore_utf8_valid(want, n) != n) {
            if (bad++ < 5) CHECK_MSG(0, "decode U+%04X: U+%04X, %zu bytes", (unsigned)cp, d, len);
        }
        for (size_t cut = 0; cut < n; cut++) { /* every truncation is no character at all */
            if (rcore_utf8_decode(want, cut, &len) != RCORE_UTF8_INVALID || len != 0 ||
                rcore_utf8_valid(want, cut) != 0) {
                if (bad++ < 5)
                    CHECK_MSG(0, "U+%04X cut to %zu bytes is accepted", (unsigned)cp, cut);
            }
        }
    }
    CHECK_MSG(bad == 0, "%zu scalar values mishandled", bad);
}

static void test_boundaries(void) {
    static const struct {
        const char *s;
        size_t n, len;
        uint32_t cp;
    } cases[] = {
        {"\x7F", 1, 1, 0x7F},
        {"\xC2\x80", 2, 2, 0x80},
        {"\xDF\xBF", 2, 2, 0x7FF},
        {"\xE0\xA0\x80", 3, 3, 0x800},
        {"\xED\x9F\xBF", 3, 3, 0xD7FF},
        {"\xED\xA0\x80", 3, 0, 0}, /* U+D800: a surrogate */
        {"\xED\xBF\xBF", 3, 0, 0}, /* U+DFFF */
        {"\xEE\x80\x80", 3, 3, 0xE000},
        {"\xEF\xBF\xBF", 3, 3, 0xFFFF},
        {"\xF0\x90\x80\x80", 4, 4, 0x10000},
        {"\xF4\x8F\xBF\xBF", 4, 4, 0x10FFFF},
        {"\xF4\x90\x80\x80", 4, 0, 0}, /* U+110000 */
        {"\xC0\x80", 2, 0, 0},         /* overlong NUL */
        {"\xC1\xBF", 2, 0, 0},         /* overlong U+7F */
        {"\xE0\x9F\xBF", 3, 0, 0},     /* overlong U+7FF */
        {"\xF0\x8F\xBF\xBF", 4, 0, 0}, /* overlong U+FFFF */
        {"\xF5\x80\x80\x80", 4, 0, 0},
        {"\xFF", 1, 0, 0},
        {"\x80", 1, 0, 0},     /* a continuation byte alone */
        {"\xC3\x28", 2, 0, 0}, /* a lead byte, then not a continuation */
        {"\xE2\x82", 2, 0, 0}, /* cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = 9;
        const uint32_t cp = rcore_utf8_decode(cases[i].s, cases[i].n, &len);
        CHECK_MSG(len == cases[i].len, "case %zu: length %zu, want %zu", i, len, cases[i].len);
        CHECK_MSG(cp == (cases[i].len ? cases[i].cp : RCORE_UTF8_INVALID), "case %zu: U+%04X", i,
                  (unsigned)cp);
        CHECK(recur_utf8_char(cases[i].s, cases[i].n) == cases[i].len);
    }
    char out[4];
    CHECK(rcore_utf8_encode(0xD800, out) == 0);
    CHECK(rcore_utf8_encode(0xDFFF, out) == 0);
    CHECK(rcore_utf8_encode(0x110000, out) == 0);
    CHECK(rcore_utf8_encode(0xFFFFFFFFu, out) == 0);
    size_t len = 9;
    CHECK(rcore_utf8_decode(NULL, 0, &len) == RCORE_UTF8_INVALID && len == 0);
    CHECK(rcore_utf8_len(NULL, 0) == 0 && recur_utf8_char(NULL, 0) == 0);
}

/* Every sequence of one to three bytes, and the four-byte ones of every lead byte from F0
 * with every second byte and boundary third and fourth bytes, judged by the oracle. */
static void test_sequences(void) {
    size_t bad = 0, seen = 0;
    unsigned char s[4];
    for (uint32_t x = 0; x < (1u << 24); x++) {
        s[0] = (unsigned char)(x >> 16), s[1] = (unsigned char)(x >> 8), s[2] = (unsigned char)x;
        for (size_t n = 1; n <= 3; n++) {
            if (n < 3 && (x & ((1u << (8 * (3 - n))) - 1)) != 0) continue; /* once per prefix */
            seen++;
            if (rcore_utf8_len(s, n) != ref_len(s, n) && bad++ < 5)
                CHECK_MSG(0, "%zu bytes %02X %02X %02X: %zu, want %zu", n, s[0], s[1], s[2],
                          rcore_utf8_len(s, n), ref_len(s, n));
        }
    }
    static const unsigned char tail[] = {0x00, 0x7F, 0x80, 0x8F, 0x90, 0xBF, 0xC0, 0xFF};
    for (unsigned lead = 0xF0; lead <= 0xFF; lead++)
        for (unsigned b1 = 0; b1 < 256; b1++)
            for (size_t i = 0; i < sizeof tail; i++)
                for (size_t j = 0; j < sizeof tail; j++) {
                    s[0] = (unsigned char)lead, s[1] = (unsigned char)b1, s[2] = tail[i];
                    s[3] = tail[j];
                    seen++;
                    if (rcore_utf8_len(s, 4) != ref_len(s, 4) && bad++ < 5)
                        CHECK_MSG(0, "%02X %02X %02X %02X: %zu, want %zu", s[0], s[1], s[2], s[3],
                                  rcore_utf8_len(s, 4), ref_len(s, 4));
                }
    CHECK_MSG(bad == 0, "%zu of %zu sequences judged unlike the oracle", bad, seen);
}

static void test_valid_prefix(void) {
    static const struct {
        const char *s;
        size_t n, want;
    } cases[] = {
        {"", 0, 0},
        {"plain ascii", 11, 11},
        {"ab\xC3\xA9\xFF"
         "cd",
         7, 4},                         /* é, then a byte no character starts with */
        {"abc\xE2\x82", 5, 3},          /* a character cut short at the end */
        {"\xF0\x9F\x98\x80!", 5, 5},    /* U+1F600 */
        {"x\xED\xA0\x80y", 5, 1},       /* a surrogate */
        {"\xE2\x82\xAC\xC0\xAF", 5, 3}, /* an overlong '/' after the euro sign */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_MSG(rcore_utf8_valid(cases[i].s, cases[i].n) == cases[i].want, "case %zu: %zu", i,
                  rcore_utf8_valid(cases[i].s, cases[i].n));
        CHECK(recur_utf8_valid(cases[i].s, cases[i].n) == cases[i].want);
    }
    CHECK(rcore_utf8_valid(NULL, 0) == 0 && recur_utf8_valid(NULL, 0) == 0);
}

int main(void) {
    RUN(test_every_scalar_value);
    RUN(test_boundaries);
    RUN(test_sequences);
    RUN(test_valid_prefix);
    return test_finish("test_core_utf8");
}
