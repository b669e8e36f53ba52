/*
 * Tests of src/core/buf.c: appends and printf-appends against the same text built by hand,
 * the NUL after the contents, taking the bytes, the overflow of every size computation, and
 * allocation failure (the counting allocator of alloc_shim.h makes a chosen realloc fail).
 */
#include "core/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_shim.h"
#include "core/core.h"
#include "test.h"

static void test_append(void) {
    struct rcore_buf b = {0};
    char want[8192];
    size_t n = 0;
    /* enough pieces to grow the buffer several times; each checked against the reference */
    for (int i = 0; i < 600; i++) {
        bool ok = i % 3 == 0   ? rcore_buf_add(&b, "ab\0c", 4)
                  : i % 3 == 1 ? rcore_buf_puts(&b, "xyz")
                               : rcore_buf_printf(&b, "[%d:%s]", i, i % 2 ? "odd" : "even");
        REQUIRE(ok);
        if (i % 3 == 0) {
            memcpy(want + n, "ab\0c", 4);
            n += 4;
        } else if (i % 3 == 1) {
            memcpy(want + n, "xyz", 3);
            n += 3;
        } else {
            n += (size_t)snprintf(want + n, sizeof want - n, "[%d:%s]", i, i % 2 ? "odd" : "even");
        }
        REQUIRE(n < sizeof want);
    }
    CHECK(b.len == n);
    CHECK(b.cap > b.len);
    CHECK(memcmp(b.p, want, n) == 0);
    CHECK(b.p[b.len] == '\0');
    CHECK(!b.failed);
    CHECK(rcore_buf_add(&b, NULL, 0) && b.len == n); /* nothing to add is fine */
    size_t len = 0;
    char *p = rcore_buf_take(&b, &len);
    CHECK(p && len == n && memcmp(p, want, n) == 0 && p[n] == '\0');
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && !b.failed);
    free(p);

    /* a long printf, larger than any capacity so far in one go */
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(rcore_buf_printf(&b, "<%s>", big));
    CHECK(b.len == sizeof big + 1 && b.p[0] == '<' && b.p[b.len - 1] == '>' && b.p[b.len] == 0);
    rcore_buf_free(&b);
    CHECK(b.p == NULL && b.len == 0);

    /* a buffer that never allocated hands out "" */
    p = rcore_buf_take(&b, &len);
    CHECK(p && p[0] == '\0' && len == 0);
    free(p);
    CHECK(rcore_buf_reserve(&b, 0) && b.p && b.p[0] == '\0' && b.len == 0);
    rcore_buf_free(&b);
}

static void test_overflow(void) {
    struct rcore_buf b = {0};
    REQUIRE(rcore_buf_puts(&b, "keep"));
    rcore_error_clear();
    CHECK(!rcore_buf_reserve(&b, SIZE_MAX - 2)); /* 4 + (SIZE_MAX - 2) + 1 wraps */
    CHECK(b.failed);
    CHECK_ERR("cannot grow");
    CHECK(b.len == 4 && strcmp(b.p, "keep") == 0);    /* the contents stay */
    CHECK(!rcore_buf_puts(&b, "more") && b.len == 4); /* failed: later appends do nothing */
    CHECK(!rcore_buf_printf(&b, "%d", 1) && b.len == 4);
    CHECK(rcore_buf_take(&b, NULL) == NULL); /* and it gives nothing, freed */
    CHECK(b.p == NULL && !b.failed);

    /* array growth: the count doubling past SIZE_MAX, the bytes past SIZE_MAX */
    int *a = NULL;
    size_t cap = 0;
    rcore_error_clear();
    CHECK(!rcore_grow((void **)&a, &cap, SIZE_MAX / 2 + 2, 1));
    CHECK(a == NULL && cap == 0);
    CHECK_ERR("out of memory");
    rcore_error_clear();
    CHECK(!rcore_grow((void **)&a, &cap, SIZE_MAX / 8, sizeof *a * 16));
    CHECK(a == NULL && cap == 0);
    CHECK_ERR("out of memory");
    CHECK(rcore_grow((void **)&a, &cap, 100, sizeof *a));
    CHECK(a && cap >= 100 && cap == 128); /* 16, 32, 64, 128 */
    a[99] = 7;
    CHECK(rcore_grow((void **)&a, &cap, 50, sizeof *a) && cap == 128 && a[99] == 7); /* enough */
    free(a);
}

static void test_alloc_failure(void) {
    struct rcore_buf b = {0};
    REQUIRE(rcore_buf_puts(&b, "0123456789")); /* capacity 16 */
    char *before = b.p;
    alloc_shim_arm(1); /* the next allocation fails */
    rcore_error_clear();
    CHECK(!rcore_buf_add(&b, "0123456789", 10)); /* needs 21 bytes: a realloc */
    CHECK(alloc_shim_disarm() == 1);
    CHECK(b.failed && b.len == 10 && b.p == before && strcmp(b.p, "0123456789") == 0);
    CHECK_ERR("out of memory");
    CHECK(rcore_buf_take(&b, NULL) == NULL);

    /* the first allocation of a printf */
    alloc_shim_arm(1);
    CHECK(!rcore_buf_printf(&b, "%s", "x"));
    alloc_shim_disarm();
    CHECK(b.failed && b.p == NULL);
    rcore_buf_free(&b);

    /* take on an empty buffer allocates: NULL when that fails */
    alloc_shim_arm(1);
    rcore_error_clear();
    CHECK(rcore_buf_take(&b, NULL) == NULL);
    alloc_shim_disarm();
    CHECK_ERR("out of memory");

    /* array growth keeps the old array and capacity */
    int *a = NULL;
    size_t cap = 0;
    REQUIRE(rcore_grow((void **)&a, &cap, 16, sizeof *a));
    int *old = a;
    alloc_shim_arm(1);
    CHECK(!rcore_grow((void **)&a, &cap, 17, sizeof *a));
    alloc_shim_disarm();
    CHECK(a == old && cap == 16);
    free(a);
}

int main(void) {
    RUN(test_append);
    RUN(test_overflow);
    RUN(test_alloc_failure);
    return test_finish("test_core_buf");
}
