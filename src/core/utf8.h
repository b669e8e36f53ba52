/*
 * UTF-8, strictly: the well-formed sequences of Unicode's table 3-7 (RFC 3629). A lead byte
 * C0, C1 or F5..FF, an overlong form, a surrogate (U+D800..U+DFFF), a code point past
 * U+10FFFF, a continuation byte where a lead byte belongs and a sequence cut short are all
 * invalid, as PCRE2 and JSON parsers treat them.
 *
 * Nothing here allocates, keeps state or sets the last error: the callers name what is wrong
 * (with the byte offset these functions give them). Safe from any thread.
 */
#ifndef RECUR_CORE_UTF8_H
#define RECUR_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The code point rcore_utf8_decode returns for an invalid sequence (not a Unicode scalar). */
#define RCORE_UTF8_INVALID 0xFFFFFFFFu

/* Length (1 to 4) of the valid character at s[0..n), 0 when there is none there (n == 0, an
 * invalid sequence, or a valid start cut short by n). */
size_t rcore_utf8_len(const void *s, size_t n);

/* Length of the longest valid prefix of s[0..n): n when all of it is valid, else the offset of
 * the first byte that does not start a valid character. */
size_t rcore_utf8_valid(const void *s, size_t n);

/* Decodes the character at s[0..n): its code point, with its length in *len; when there is no
 * valid character there, RCORE_UTF8_INVALID with *len = 0. */
uint32_t rcore_utf8_decode(const void *s, size_t n, size_t *len);

/* Writes the UTF-8 form of cp to out (room for 4 bytes; no NUL) and returns its length, 1 to 4; 0
 * (nothing written) for a surrogate or a code point past U+10FFFF. */
size_t rcore_utf8_encode(uint32_t cp, char *out);

#endif /* RECUR_CORE_UTF8_H */
