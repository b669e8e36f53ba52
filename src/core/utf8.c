/*
 * UTF-8 validation, decoding and encoding (utf8.h). The decoder checks the second byte's range
 * against the lead byte, as table 3-7 of the Unicode standard lists them, so that overlong
 * forms, surrogates and code points past U+10FFFF are refused without decoding them first.
 */
#include "utf8.h"

uint32_t rcore_utf8_decode(const void *src, size_t n, size_t *len) {
    const unsigned char *s = src;
    *len = 0;
    if (n == 0) return RCORE_UTF8_INVALID;
    const unsigned char c = s[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    uint32_t cp;
    if (c < 0xC2) {
        return RCORE_UTF8_INVALID; /* a continuation byte, or C0/C1 (overlong) */
    } else if (c < 0xE0) {
        k = 2, cp = c & 0x1Fu;
    } else if (c < 0xF0) {
        k = 3, cp = c & 0x0Fu;
        if (c == 0xE0) lo = 0xA0; /* below: overlong */
        if (c == 0xED) hi = 0x9F; /* above: surrogates */
    } else if (c < 0xF5) {
        k = 4, cp = c & 0x07u;
        if (c == 0xF0) lo = 0x90; /* below: overlong */
        if (c == 0xF4) hi = 0x8F; /* above: past U+10FFFF */
    } else {
        return RCORE_UTF8_INVALID;
    }
    if (n < k || s[1] < lo || s[1] > hi) return RCORE_UTF8_INVALID;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return RCORE_UTF8_INVALID;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    *len = k;
    return cp;
}

size_t rcore_utf8_len(const void *s, size_t n) {
    size_t len;
    rcore_utf8_decode(s, n, &len);
    return len;
}

size_t rcore_utf8_valid(const void *src, size_t n) {
    const unsigned char *s = src;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { /* ASCII runs need no decoding */
            i++;
            continue;
        }
        const size_t k = rcore_utf8_len(s + i, n - i);
        if (k == 0) break;
        i += k;
    }
    return i;
}

size_t rcore_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) return 0;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
