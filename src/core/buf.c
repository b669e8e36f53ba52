/*
 * The growable byte buffer and array growth of buf.h. Capacities double (amortised O(1)
 * appends); every size is computed with the checked arithmetic of core.h, so a request near
 * SIZE_MAX fails cleanly instead of wrapping to a small allocation.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rcore_grow(void **p, size_t *cap, size_t need, size_t each) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 16, bytes;
    while (n < need) {
        if (!rcore_mul_size(n, 2, &n)) {
            rcore_error_set("out of memory: %zu elements of %zu bytes", need, each);
            return false;
        }
    }
    if (!rcore_mul_size(n, each, &bytes)) {
        rcore_error_set("out of memory: %zu elements of %zu bytes", n, each);
        return false;
    }
    void *q = realloc(*p, bytes);
    if (!q) {
        rcore_error_set("out of memory (%zu bytes)", bytes);
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

bool rcore_buf_reserve(struct rcore_buf *b, size_t extra) {
    if (b->failed) return false;
    size_t need;
    if (!rcore_add_size(b->len, extra, &need) || !rcore_add_size(need, 1, &need)) {
        rcore_error_set("out of memory: a buffer of %zu bytes cannot grow by %zu", b->len, extra);
        b->failed = true;
        return false;
    }
    const bool had = b->p != NULL;
    if (!rcore_grow((void **)&b->p, &b->cap, need, 1)) {
        b->failed = true;
        return false;
    }
    if (!had) b->p[0] = '\0';
    return true;
}

bool rcore_buf_add(struct rcore_buf *b, const void *src, size_t n) {
    if (!rcore_buf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool rcore_buf_puts(struct rcore_buf *b, const char *s) {
    return rcore_buf_add(b, s, strlen(s));
}

bool rcore_buf_printf(struct rcore_buf *b, const char *fmt, ...) {
    if (b->failed) return false;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    bool ok = k >= 0;
    if (!ok) {
        rcore_error_set("a formatting error in \"%.64s\"", fmt);
        b->failed = true;
    } else if ((ok = rcore_buf_reserve(b, (size_t)k))) {
        vsnprintf(b->p + b->len, (size_t)k + 1, fmt, ap2);
        b->len += (size_t)k;
    }
    va_end(ap2);
    return ok;
}

char *rcore_buf_take(struct rcore_buf *b, size_t *len) {
    if (b->failed) {
        rcore_buf_free(b);
        return NULL;
    }
    if (!b->p && !rcore_buf_reserve(b, 0)) {
        rcore_buf_free(b);
        return NULL;
    }
    char *p = b->p;
    if (len) *len = b->len;
    *b = (struct rcore_buf){0};
    return p;
}

void rcore_buf_free(struct rcore_buf *b) {
    free(b->p);
    *b = (struct rcore_buf){0};
}
