/*
 * A growable byte buffer that doubles as a string builder, and the growth rule of the
 * library's growable arrays.
 *
 * A struct rcore_buf starts zeroed ({0}) and owns its bytes until rcore_buf_take hands them
 * out or rcore_buf_free releases them. Whenever p is not NULL, p[len] is a NUL, so the text
 * built so far is a C string. A failed append (out of memory, or a size past SIZE_MAX) leaves
 * the bytes as they were, sets `failed` and the last error; every later append then does
 * nothing and fails too, so that a builder can append many pieces and check once at the end.
 * A buffer is not safe to share between threads without a lock.
 */
#ifndef RECUR_CORE_BUF_H
#define RECUR_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include "core.h"

struct rcore_buf {
    char *p;         /* NULL until the first byte (or reserve); then NUL-terminated */
    size_t len, cap; /* bytes used (without the NUL), bytes allocated */
    bool failed;     /* an append failed: the contents are incomplete */
};

/* Makes room for `extra` more bytes and the NUL after them. False, with `failed` and the error
 * set, when len + extra + 1 overflows or the allocation fails. */
bool rcore_buf_reserve(struct rcore_buf *b, size_t extra);

/* Appends src[0..n) (src may be NULL when n is 0). */
bool rcore_buf_add(struct rcore_buf *b, const void *src, size_t n);

/* Appends the C string s. */
bool rcore_buf_puts(struct rcore_buf *b, const char *s);

/* Appends the printf-formatted text (a formatting error counts as a failure). */
bool rcore_buf_printf(struct rcore_buf *b, const char *fmt, ...) RCORE_PRINTF(2, 3);

/* Hands the bytes to the caller (free() them), with their length in *len when len is not
 * NULL, and leaves the buffer empty ({0}). A buffer that never allocated gives a malloc'd ""
 * (NULL without memory, with the error set); a failed buffer gives NULL and is freed. */
char *rcore_buf_take(struct rcore_buf *b, size_t *len);

/* Frees the bytes and leaves the buffer empty ({0}). */
void rcore_buf_free(struct rcore_buf *b);

/* Grows the array *p of *cap elements of `each` bytes so that it holds at least `need`: the
 * capacity doubles from 16 until it does. Keeps *p and *cap as they were and returns false,
 * with the last error set, when the byte count overflows or realloc fails. */
bool rcore_grow(void **p, size_t *cap, size_t need, size_t each);

#endif /* RECUR_CORE_BUF_H */
