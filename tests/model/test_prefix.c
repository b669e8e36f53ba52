/*
 * The prefix state cache: the store itself (src/prefix: longest prefix, budget and LRU,
 * collisions, streams) and, through the public API on a random-weight model, the reuse cases
 * of recur.h: an exact repeat, a next turn that extends prompt + completion, a prompt that
 * diverges in the middle, one shorter than any stored prefix; files of the cache.
 *   test_prefix MODEL OTHER_MODEL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prefix/prefix.h"
#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "test.h"
#include "model_util.h"

static const char *other_path;

/* ---- the store ----------------------------------------------------------------------------- */

enum { SF = 5 }; /* floats per state in the store tests */

static void state_for(float *s, float v) {
    for (int i = 0; i < SF; i++) s[i] = v + (float)i;
}

/* c written to buf (w says how much) and read back into a new cache of the same shape. */
static struct rpfx *through_stream(const struct rpfx *c, uint8_t *buf, size_t cap,
                                   struct rio_writer *w) {
    rio_writer_buffer(w, buf, cap);
    CHECK(rpfx_write(c, w));
    struct rpfx *copy = rpfx_create(1 << 20, SF);
    REQUIRE(copy);
    struct rio_reader r;
    rio_reader_buffer(&r, buf, w->n_done);
    CHECK(rpfx_read(copy, &r));
    return copy;
}

static void test_store(void) {
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8}, b[] = {1, 2, 9, 9};
    float st[SF];
    const float *got;
    struct rpfx *c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got, NULL, NULL, NULL) == 0 && got == NULL); /* empty */
    state_for(st, 10);
    CHECK(rpfx_put(c, 0, a, 3, st, NULL, 0) == 1);
    state_for(st, 20);
    CHECK(rpfx_put(c, 0, a, 6, st, NULL, 0) == 1);
    state_for(st, 30);
    CHECK(rpfx_put(c, 0, b, 4, st, NULL, 0) == 1);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got, NULL, NULL, NULL) == 6 && got[0] == 20); /* the longest */
    CHECK(rpfx_find(c, 0, a, 8, 5, &got, NULL, NULL, NULL) == 3 &&
          got[0] == 10);                                          /* within max_len */
    CHECK(rpfx_find(c, 0, a, 6, 6, &got, NULL, NULL, NULL) == 6); /* a prefix of its own length */
    CHECK(rpfx_find(c, 0, b, 3, 3, &got, NULL, NULL, NULL) ==
          0); /* b's entry is longer than that */
    CHECK(rpfx_find(c, 0, b, 4, 4, &got, NULL, NULL, NULL) == 4 && got[0] == 30);
    const int32_t d[] = {1, 2, 3, 7};
    CHECK(rpfx_find(c, 0, d, 4, 4, &got, NULL, NULL, NULL) == 3); /* diverges after 3 */
    state_for(st, 40);
    CHECK(rpfx_put(c, 0, a, 3, st, NULL, 0) == 1); /* the same prefix again: replaced, not added */
    struct rpfx_stats s;
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 3 && s.bytes == rpfx_entry_bytes(c, 3, 0) + rpfx_entry_bytes(c, 6, 0) +
                                             rpfx_entry_bytes(c, 4, 0));
    CHECK(rpfx_find(c, 0, a, 4, 4, &got, NULL, NULL, NULL) == 3 && got[0] == 40);
    rpfx_get_stats(c, &s);
    CHECK(s.hits == 6 && s.misses == 2 && s.tokens_reused == 6 + 3 + 6 + 4 + 3 + 3);

    /* every hash equal: the tokens decide, never a wrong state */
    rpfx_debug_hash_mask(c, 0);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got, NULL, NULL, NULL) == 6 && got[0] == 20);
    CHECK(rpfx_find(c, 0, b, 4, 4, &got, NULL, NULL, NULL) == 4 && got[0] == 30);
    CHECK(rpfx_find(c, 0, d, 4, 4, &got, NULL, NULL, NULL) == 3 && got[0] == 40);
    const int32_t e[] = {5, 5, 5, 5, 5, 5};
    CHECK(rpfx_find(c, 0, e, 6, 6, &got, NULL, NULL, NULL) == 0);
    rpfx_debug_hash_mask(c, ~(uint64_t)0);

    /* streams: round trip; a corrupt or foreign stream changes nothing */
    uint8_t buf[4096];
    struct rio_writer w;
    struct rio_reader r;
    struct rpfx *c2 = through_stream(c, buf, sizeof buf, &w);
    CHECK(rpfx_find(c2, 0, a, 8, 8, &got, NULL, NULL, NULL) == 6 && got[0] == 20 && got[4] == 24);
    CHECK(rpfx_find(c2, 0, b, 4, 4, &got, NULL, NULL, NULL) == 4 && got[0] == 30);
    buf[w.n_done / 2] ^= 0x10;
    struct rpfx *c3 = rpfx_create(1 << 20, SF);
    REQUIRE(c3);
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(!rpfx_read(c3, &r));
    CHECK_ERR("prefix cache");
    rpfx_get_stats(c3, &s);
    CHECK(s.n_entries == 0);
    buf[w.n_done / 2] ^= 0x10;
    struct rpfx *c4 = rpfx_create(1 << 20, SF + 1);
    REQUIRE(c4);
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(!rpfx_read(c4, &r));
    CHECK_ERR("floats");
    rio_reader_buffer(&r, buf, w.n_done - 3); /* truncated */
    CHECK(!rpfx_read(c3, &r));
    rpfx_get_stats(c3, &s);
    CHECK(s.n_entries == 0);

    /* the budget: three entries of 4 tokens fit, a fourth evicts the least recently used */
    struct rpfx *small = rpfx_create(3 * rpfx_entry_bytes(c, 4, 0) + 8, SF);
    REQUIRE(small);
    const int32_t p[4][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}, {4, 4, 4, 4}};
    for (int i = 0; i < 3; i++) CHECK(rpfx_put(small, 0, p[i], 4, st, NULL, 0) == 1);
    CHECK(rpfx_find(small, 0, p[0], 4, 4, &got, NULL, NULL, NULL) ==
          4); /* 0 is now the most recent: 1 goes */
    CHECK(rpfx_put(small, 0, p[3], 4, st, NULL, 0) == 1);
    rpfx_get_stats(small, &s);
    CHECK(s.n_entries == 3 && s.evictions == 1 && s.bytes <= s.max_bytes);
    CHECK(rpfx_find(small, 0, p[1], 4, 4, &got, NULL, NULL, NULL) == 0 &&
          rpfx_find(small, 0, p[0], 4, 4, &got, NULL, NULL, NULL) == 4);
    const int32_t big[64] = {0}; /* one entry larger than the whole budget: refused */
    CHECK(rpfx_entry_bytes(small, 64, 0) > s.max_bytes &&
          rpfx_put(small, 0, big, 64, st, NULL, 0) == 0);
    struct rpfx_stats s2;
    rpfx_get_stats(small, &s2);
    CHECK(s2.n_entries == 3 && s2.bytes == s.bytes);
    CHECK(rpfx_create(0, SF) == NULL);
    rpfx_free(small);
    rpfx_free(c4);
    rpfx_free(c3);
    rpfx_free(c2);
    rpfx_free(c);
    rpfx_free(NULL);
}

/* Tenants: the same tokens under two tenants are two entries, each found only by its own
 * tenant; a stream keeps them; a version 1 stream (no tenants) reads as tenant 0. */
static void test_tenants(void) {
    const int32_t a[] = {1, 2, 3, 4, 5, 6};
    float st[SF];
    const float *got;
    struct rpfx *c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    state_for(st, 10);
    CHECK(rpfx_put(c, 7, a, 4, st, NULL, 0) == 1);
    CHECK(rpfx_find(c, 8, a, 6, 6, &got, NULL, NULL, NULL) == 0 &&
          got == NULL);                                           /* another tenant: a miss */
    CHECK(rpfx_find(c, 0, a, 6, 6, &got, NULL, NULL, NULL) == 0); /* nor tenant 0 */
    CHECK(rpfx_find(c, 7, a, 6, 6, &got, NULL, NULL, NULL) == 4 && got[0] == 10);
    state_for(st, 20);
    CHECK(rpfx_put(c, 8, a, 4, st, NULL, 0) == 1); /* the same tokens, tenant 8: a second entry */
    struct rpfx_stats s;
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 2);
    CHECK(rpfx_find(c, 7, a, 6, 6, &got, NULL, NULL, NULL) == 4 && got[0] == 10);
    CHECK(rpfx_find(c, 8, a, 6, 6, &got, NULL, NULL, NULL) == 4 && got[0] == 20);

    uint8_t buf[4096];
    struct rio_writer w;
    struct rio_reader r;
    struct rpfx *c2 = through_stream(c, buf, sizeof buf, &w);
    CHECK(rpfx_find(c2, 7, a, 6, 6, &got, NULL, NULL, NULL) == 4 && got[0] == 10);
    CHECK(rpfx_find(c2, 8, a, 6, 6, &got, NULL, NULL, NULL) == 4 && got[0] == 20);
    CHECK(rpfx_find(c2, 9, a, 6, 6, &got, NULL, NULL, NULL) == 0);

    /* a version 1 stream, written by hand: magic, version, floats, one entry, digest */
    rio_writer_buffer(&w, buf, sizeof buf);
    rio_writer_digest_reset(&w);
    bool ok = rio_write_u32(&w, 0x58465052u) && rio_write_u32(&w, 1) && rio_write_u64(&w, SF) &&
              rio_write_u32(&w, 1) && rio_write_u32(&w, 3);
    for (int i = 0; ok && i < 3; i++) ok = rio_write_i32(&w, a[i]);
    for (int i = 0; ok && i < SF; i++) {
        const float v = 30.0f + (float)i;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        ok = rio_write_u32(&w, bits);
    }
    CHECK(ok && rio_write_u64(&w, rio_writer_digest(&w)));
    struct rpfx *c3 = rpfx_create(1 << 20, SF);
    REQUIRE(c3);
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(rpfx_read(c3, &r));
    CHECK(rpfx_find(c3, 0, a, 6, 6, &got, NULL, NULL, NULL) == 3 && got[0] == 30);
    CHECK(rpfx_find(c3, 7, a, 6, 6, &got, NULL, NULL, NULL) == 0);
    rpfx_free(c3);
    rpfx_free(c2);
    rpfx_free(c);
}

/* Extra bytes (a hybrid's attention rows): of any size beside the state, found with it,
 * counted against the budget (evicting by bytes), replaced with the entry, kept by streams. */
static void test_extra(void) {
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    float st[SF];
    state_for(st, 10);
    uint8_t x[600];
    for (size_t i = 0; i < sizeof x; i++) x[i] = (uint8_t)(i * 7 + 1);
    /* room for 3 entries of 4 tokens and 100 extra bytes */
    struct rpfx *c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    const size_t budget = 3 * rpfx_entry_bytes(c, 4, 100) + 8;
    rpfx_free(c);
    c = rpfx_create(budget, SF);
    REQUIRE(c);
    CHECK(rpfx_put(c, 0, a, 2, st, x, 100) == 1);
    CHECK(rpfx_put(c, 0, a, 4, st, x + 1, 100) == 1);
    CHECK(rpfx_put(c, 0, a, 3, st, NULL, 0) == 1); /* none */
    const float *got;
    const void *xg;
    size_t xn;
    CHECK(rpfx_find(c, 0, a, 8, 8, &got, &xg, &xn, NULL) == 4 && xn == 100 &&
          memcmp(xg, x + 1, 100) == 0);
    CHECK(rpfx_find(c, 0, a, 8, 3, &got, &xg, &xn, NULL) == 3 && xn == 0 && xg == NULL);
    CHECK(rpfx_find(c, 0, a, 8, 2, &got, &xg, &xn, NULL) == 2 && xn == 100 &&
          memcmp(xg, x, 100) == 0);
    struct rpfx_stats s;
    rpfx_get_stats(c, &s);
    CHECK(s.bytes ==
          rpfx_entry_bytes(c, 2, 100) + rpfx_entry_bytes(c, 4, 100) + rpfx_entry_bytes(c, 3, 0));
    /* the same prefix with more extra bytes: replaced, the count follows */
    CHECK(rpfx_put(c, 0, a, 2, st, x + 2, 150) == 1);
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 3 && s.bytes == rpfx_entry_bytes(c, 2, 150) + rpfx_entry_bytes(c, 4, 100) +
                                             rpfx_entry_bytes(c, 3, 0));
    CHECK(rpfx_find(c, 0, a, 2, 2, &got, &xg, &xn, NULL) == 2 && xn == 150 &&
          memcmp(xg, x + 2, 150) == 0);
    /* a stream keeps them */
    uint8_t buf[8192];
    struct rio_writer w;
    struct rpfx *c2 = through_stream(c, buf, sizeof buf, &w);
    CHECK(rpfx_find(c2, 0, a, 8, 8, &got, &xg, &xn, NULL) == 4 && xn == 100 &&
          memcmp(xg, x + 1, 100) == 0);
    CHECK(rpfx_find(c2, 0, a, 3, 3, &got, &xg, &xn, NULL) == 3 && xn == 0);
    /* a large entry evicts by bytes: 400 extra bytes push out more than one small entry */
    CHECK(rpfx_put(c, 0, a, 5, st, x, 400) == 1);
    rpfx_get_stats(c, &s);
    CHECK(s.bytes <= s.max_bytes && s.evictions >= 2 && s.n_entries <= 2);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got, &xg, &xn, NULL) == 5 && xn == 400 &&
          memcmp(xg, x, 400) == 0);
    /* larger than the whole budget: refused, nothing changed */
    CHECK(rpfx_put(c, 0, a, 6, st, x, budget) == 0);
    struct rpfx_stats s2;
    rpfx_get_stats(c, &s2);
    CHECK(s2.n_entries == s.n_entries && s2.bytes == s.bytes);
    CHECK(rpfx_put(c, 0, a, 6, st, NULL, 5) == -1); /* bytes without data */
    /* touch: an exact entry is there (and becomes the most recent), a prefix of it is not */
    CHECK(rpfx_touch(c, 0, a, 5) && !rpfx_touch(c, 0, a, 4) && !rpfx_touch(c, 1, a, 5) &&
          !rpfx_touch(c, 0, a, 0));
    rpfx_free(c2);
    rpfx_free(c);
}

/* Shared extra bytes (rpfx_share_extra): each token has R bytes of "rows", so the extra bytes
 * of n tokens are their rows end to end and any prefix's are their first bytes. */
enum { R = 8 };

static void rows_of(const int32_t *t, int32_t n, uint8_t *out) {
    for (int32_t i = 0; i < n; i++)
        for (int j = 0; j < R; j++) out[i * R + j] = (uint8_t)(t[i] * 31 + j * 7 + i);
}

/* A state that names its prefix: a hash of tokens[0..n). */
static float state_of(const int32_t *t, int32_t n) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)t[i]) * 16777619u;
    return (float)(h % 100000);
}

/* find in a share cache, checked: the state is the prefix's, the bytes hold the prefix's rows
 * (at least n tokens of them); the length found (0: none). */
static int32_t find_checked(struct rpfx *c, uint64_t tenant, const int32_t *t, int32_t n,
                            int32_t max_len) {
    const float *st;
    const void *x;
    size_t xb;
    int32_t xn;
    const int32_t got = rpfx_find(c, tenant, t, n, max_len, &st, &x, &xb, &xn);
    if (got <= 0) return got;
    uint8_t want[64 * R];
    rows_of(t, got, want);
    CHECK(st[0] == state_of(t, got));
    CHECK(xn >= got && xb == (size_t)xn * R && x && memcmp(x, want, (size_t)got * R) == 0);
    return got;
}

static void test_share(void) {
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8}, b[] = {1, 2, 9, 9, 9};
    uint8_t rows[64 * R];
    float st[SF];
    struct rpfx *c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    rpfx_share_extra(c);
    struct rpfx_stats s;
#define PUT(T, N, WITH)                                                                            \
    (state_for(st, state_of(T, N)), rows_of(T, N, rows),                                           \
     rpfx_put(c, 0, T, N, st, (WITH) ? rows : NULL, (WITH) ? (size_t)(N)*R : 0))
    CHECK(PUT(a, 2, true) == 1);
    CHECK(PUT(a, 3, false) == 0); /* a[0..2)'s rows are not a[0..3)'s: no lender */
    CHECK(find_checked(c, 0, a, 8, 8) == 2);
    /* a longer entry takes the shorter one's bytes: they are its own first bytes */
    CHECK(PUT(a, 5, true) == 1);
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 2 && s.bytes == rpfx_entry_bytes(c, 2, 0) + rpfx_entry_bytes(c, 5, 5 * R));
    CHECK(PUT(a, 3, false) == 1); /* now it borrows from a[0..5) */
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 3 && s.bytes == rpfx_entry_bytes(c, 2, 0) + rpfx_entry_bytes(c, 3, 0) +
                                             rpfx_entry_bytes(c, 5, 5 * R));
    CHECK(find_checked(c, 0, a, 8, 8) == 5);
    CHECK(find_checked(c, 0, a, 8, 4) == 3);
    CHECK(find_checked(c, 0, a, 8, 2) == 2);
    CHECK(find_checked(c, 0, b, 5, 5) == 2); /* b shares a's first two tokens */
    CHECK(PUT(b, 4, false) == 0);            /* nothing holds b[0..4)'s rows: not stored */
    CHECK(PUT(b, 4, true) == 1);             /* b[0..2) keeps borrowing (from a[0..5)) */
    CHECK(find_checked(c, 1, a, 8, 8) == 0); /* another tenant sees none of it */
    CHECK(PUT(a, 5, false) == 1);            /* a lender stored again without bytes keeps them */
    CHECK(find_checked(c, 0, a, 8, 8) == 5);
    /* a stream keeps who borrows (version 4), read back lenders first */
    uint8_t buf[8192];
    struct rio_writer w;
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rpfx_write(c, &w));
    struct rpfx *c2 = rpfx_create(1 << 20, SF);
    REQUIRE(c2);
    rpfx_share_extra(c2);
    struct rio_reader r;
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(rpfx_read(c2, &r));
    struct rpfx_stats s2;
    rpfx_get_stats(c, &s);
    rpfx_get_stats(c2, &s2);
    CHECK(s2.n_entries == s.n_entries && s2.bytes == s.bytes);
    for (int32_t m = 1; m <= 8; m++)
        CHECK(find_checked(c2, 0, a, 8, m) == find_checked(c, 0, a, 8, m));
    CHECK(find_checked(c2, 0, b, 5, 5) == 4);
    rpfx_free(c2);
    rpfx_free(c);

    /* a conversation stored a turn at a time (each turn with its rows): one copy of the rows in
       all, where each entry holding its own would take them O(n^2) */
    int32_t conv[64];
    for (int i = 0; i < 64; i++) conv[i] = 100 + i * 3;
    c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    rpfx_share_extra(c);
    size_t want = 0;
    for (int32_t n = 8; n <= 64; n += 8) {
        CHECK(PUT(conv, n, true) == 1);
        want += rpfx_entry_bytes(c, n, n == 64 ? 64 * R : 0);
    }
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 8 && s.bytes == want && rpfx_check(c));
    for (int32_t n = 8; n <= 64; n += 8) CHECK(find_checked(c, 0, conv, 64, n) == n);
    rpfx_free(c);

    /* random operations on tokens of two values (prefixes shared often), two tenants, a budget
       of a few entries: every find is right (find_checked), an entry just stored is found, and
       rpfx_check holds (bytes counted, within the budget, no borrower without a lender) */
    struct rpfx *probe = rpfx_create(1 << 20, SF);
    REQUIRE(probe);
    const size_t unit = rpfx_entry_bytes(probe, 6, 6 * R);
    rpfx_free(probe);
    uint64_t seed = 12345;
#define RND()                                                                                      \
    (seed = seed * 6364136223846793005ull + 1442695040888963407ull, (uint32_t)(seed >> 33))
    for (int round = 0; round < 40; round++) {
        c = rpfx_create(5 * unit, SF);
        REQUIRE(c);
        rpfx_share_extra(c);
        for (int op = 0; op < 300; op++) {
            int32_t t[12];
            const int32_t n = 1 + (int32_t)(RND() % 12);
            for (int32_t i = 0; i < n; i++) t[i] = (int32_t)(RND() % 2);
            const uint64_t tenant = RND() % 4 == 0;
            const uint32_t kind = RND() % 3;
            if (kind < 2) {
                state_for(st, state_of(t, n));
                rows_of(t, n, rows);
                const int put = rpfx_put(c, tenant, t, n, st, kind == 0 ? rows : NULL,
                                         kind == 0 ? (size_t)n * R : 0);
                CHECK(put >= 0 && (kind == 1 || put == 1));
                if (put == 1) CHECK(find_checked(c, tenant, t, n, n) == n);
            } else {
                find_checked(c, tenant, t, n, (int32_t)(RND() % 13));
            }
            CHECK(rpfx_check(c));
        }
        rpfx_free(c);
    }
#undef RND
#undef PUT
}

/* ---- through the API ----------------------------------------------------------------------- */

static struct recur_context *cache_ctx(uint64_t bytes) {
    struct recur_context_params p = recur_context_default_params();
    p.n_rollback = 2; /* the prompt minus its last token is kept */
    p.checkpoint_every = 8;
    p.prefix_cache_bytes = bytes;
    return new_ctx_with(model, 3, 512, &p);
}

/* Restores tokens into seq from the cache, decodes the rest; checks the reused length and that
 * the last logits equal the whole text decoded alone. */
static void reuse(struct recur_context *ctx, int32_t seq, const int32_t *t, int32_t n, int32_t want,
                  const char *what) {
    recur_memory_seq_rm(recur_get_memory(ctx), seq, -1, -1);
    const int32_t got = recur_prefix_cache_restore(ctx, seq, t, n);
    CHECK_MSG(got == want, "%s: restored %d tokens, want %d", what, got, want);
    if (got < 0) return;
    CHECK(recur_memory_seq_pos_max(recur_get_memory(ctx), seq) == got - 1);
    CHECK(decode_seq(ctx, seq, t + got, n - got, false) == 0);
    struct hist h = {0};
    hist_add(&h, t, n);
    check_alone(ctx, -1, &h, what);
}

static void test_reuse(void) {
    struct recur_context *ctx = cache_ctx((uint64_t)64 << 20);
    int32_t t[80], turn2[80], mid[80];
    random_tokens(t, 60, V);
    const int32_t np = 30; /* the prompt; then 5 generated tokens; then 6 of a next turn */

    /* a prompt shorter than any stored prefix, and a cold cache: nothing to reuse */
    reuse(ctx, 0, t, np, 0, "cold");
    CHECK(recur_prefix_cache_store(ctx, 0, t, np) == 1 + 3 + 1); /* end, 7/15/23, 28 */

    /* an exact repeat: the prompt minus one token comes back, one token is decoded */
    reuse(ctx, 1, t, np, np - 1, "exact repeat");
    /* a prompt that diverges at token 20: the checkpoint after 16 tokens is reused */
    memcpy(mid, t, sizeof(int32_t) * 20);
    random_tokens(mid + 20, 10, V);
    reuse(ctx, 1, mid, np, 16, "diverges in the middle");
    const int32_t tiny[3] = {t[0], t[1], t[2]};
    reuse(ctx, 1, tiny, 3, 0, "shorter than every stored prefix");

    /* generate 5 tokens on seq 0, store prompt + completion: the next turn extends it */
    for (int32_t i = 0; i < 5; i++) CHECK(decode_seq(ctx, 0, t + np + i, 1, false) == 0);
    CHECK(recur_prefix_cache_store(ctx, 0, t, np + 5) >= 1);
    memcpy(turn2, t, sizeof(int32_t) * (np + 5));
    random_tokens(turn2 + np + 5, 6, V);
    reuse(ctx, 2, turn2, np + 11, np + 5, "next turn");

    /* another tenant finds none of it; its own store is found by it alone */
    recur_memory_seq_rm(recur_get_memory(ctx), 2, -1, -1);
    CHECK(recur_prefix_cache_restore_tenant(ctx, 42, 2, turn2, np + 11) == 0);
    CHECK(recur_prefix_cache_restore_tenant(ctx, 0, 2, turn2, np + 11) == np + 5); /* = tenant 0 */
    CHECK(recur_prefix_cache_store_tenant(ctx, 42, 2, turn2, np + 5) >= 1);
    recur_memory_seq_rm(recur_get_memory(ctx), 2, -1, -1);
    CHECK(recur_prefix_cache_restore_tenant(ctx, 42, 2, turn2, np + 11) == np + 5);
    recur_memory_seq_rm(recur_get_memory(ctx), 2, -1, -1);
    CHECK(recur_prefix_cache_restore_tenant(ctx, 43, 2, turn2, np + 11) == 0);

    /* bad calls */
    CHECK(recur_prefix_cache_store(ctx, 0, t, 7) == -1);
    CHECK_ERR("holds positions");
    CHECK(recur_prefix_cache_store(ctx, 9, t, 7) == -1);
    CHECK(recur_prefix_cache_restore(ctx, -1, t, 7) == -1);
    struct recur_prefix_cache_stats s;
    CHECK(recur_prefix_cache_get_stats(ctx, &s));
    CHECK(s.hits == 5 && s.misses == 4 &&
          s.tokens_reused == (uint64_t)(np - 1 + 16 + 3 * (np + 5)));
    CHECK(s.bytes <= s.max_bytes && s.entry_bytes > 0);

    /* a cache file: another context gets the same reuse; another model's or a corrupt file is
       refused and changes nothing */
    char path[] = "/tmp/recur-prefix-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK(recur_prefix_cache_save_file(ctx, path));
    struct recur_context *ctx2 = cache_ctx((uint64_t)64 << 20);
    CHECK_MSG(recur_prefix_cache_load_file(ctx2, path), "%s", recur_last_error());
    reuse(ctx2, 0, turn2, np + 11, np + 5, "next turn from the file");
    recur_free(ctx2);

    struct recur_model *other =
        recur_model_load_from_file(other_path, recur_model_default_params());
    REQUIRE(other);
    struct recur_context_params po = recur_context_default_params();
    po.prefix_cache_bytes = 1 << 20;
    struct recur_context *octx = recur_init_from_model(other, po);
    REQUIRE(octx);
    CHECK(!recur_prefix_cache_load_file(octx, path));
    CHECK_ERR("another model");
    recur_free(octx);
    recur_model_free(other);

    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, -40, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -40, SEEK_END);
    fputc(ch ^ 1, f);
    fclose(f);
    ctx2 = cache_ctx((uint64_t)64 << 20);
    CHECK(!recur_prefix_cache_load_file(ctx2, path));
    CHECK_ERR("checksum");
    CHECK(recur_prefix_cache_get_stats(ctx2, &s) && s.n_entries == 0);
    recur_free(ctx2);
    unlink(path);

    /* no cache: refused with a message */
    struct recur_context *plain = new_ctx(model, 1, 512);
    CHECK(recur_prefix_cache_restore(plain, 0, t, 5) == -1);
    CHECK_ERR("no prefix cache");
    recur_free(plain);
    recur_free(ctx);
}

/* ---- the second tier -------------------------------------------------------------------- */

/* A store in memory: every entry put; get the longest that matches, or, to see the library
 * refuse them, a corrupt copy, or one of any model or tenant. */
struct fake_store {
    struct {
        uint64_t model, tenant;
        int32_t n;
        recur_token tokens[64];
        void *blob;
        size_t len;
    } e[64];
    int n;
    bool corrupt, any_model, any_tenant;
};

static void fake_put(void *user, uint64_t fp, uint64_t tenant, const recur_token *tokens, int32_t n,
                     const void *blob, size_t len) {
    struct fake_store *f = user;
    if (f->n == 64 || n > 64) return;
    f->e[f->n].model = fp;
    f->e[f->n].tenant = tenant;
    f->e[f->n].n = n;
    memcpy(f->e[f->n].tokens, tokens, sizeof(recur_token) * (size_t)n);
    f->e[f->n].blob = malloc(len);
    REQUIRE(f->e[f->n].blob);
    memcpy(f->e[f->n].blob, blob, len);
    f->e[f->n].len = len;
    f->n++;
}

static int32_t fake_get(void *user, uint64_t fp, uint64_t tenant, const recur_token *tokens,
                        int32_t n, int32_t min_len, int32_t max_len, void **blob, size_t *len) {
    struct fake_store *f = user;
    int best = -1;
    for (int i = 0; i < f->n; i++)
        if ((f->any_model || f->e[i].model == fp) && (f->any_tenant || f->e[i].tenant == tenant) &&
            f->e[i].n >= min_len && f->e[i].n <= max_len && f->e[i].n <= n &&
            memcmp(f->e[i].tokens, tokens, sizeof(recur_token) * (size_t)f->e[i].n) == 0 &&
            (best < 0 || f->e[i].n > f->e[best].n))
            best = i;
    if (best < 0) return 0;
    *blob = malloc(f->e[best].len);
    REQUIRE(*blob);
    memcpy(*blob, f->e[best].blob, f->e[best].len);
    if (f->corrupt) ((uint8_t *)*blob)[f->e[best].len / 2] ^= 0x20;
    *len = f->e[best].len;
    return f->e[best].n;
}

static void test_second_tier(void) {
    static struct fake_store f; /* large: not on the stack */
    memset(&f, 0, sizeof f);
    const struct recur_prefix_store store = {&f, fake_put, fake_get};
    int32_t t[40];
    random_tokens(t, 40, V);
    const int32_t np = 30;
    struct recur_context *a = cache_ctx((uint64_t)64 << 20);
    CHECK(recur_prefix_cache_set_store(a, &store));
    reuse(a, 0, t, np, 0, "cold");
    const int32_t stored = recur_prefix_cache_store(a, 0, t, np);
    CHECK(stored == 5 && f.n == 5); /* every entry went to the store too */
    struct recur_prefix_cache_stats s;
    CHECK(recur_prefix_cache_get_stats(a, &s) && s.store_puts == 5);

    /* another context (another process, as far as it knows): the store gives the prompt
       minus one token, and the logits match a run alone */
    struct recur_context *b = cache_ctx((uint64_t)64 << 20);
    CHECK(recur_prefix_cache_set_store(b, &store));
    reuse(b, 0, t, np, np - 1, "from the second tier");
    CHECK(recur_prefix_cache_get_stats(b, &s) && s.store_hits == 1 && s.store_refused == 0);
    reuse(b, 1, t, np, np - 1, "then from the first"); /* it entered b's first tier */
    CHECK(recur_prefix_cache_get_stats(b, &s) && s.store_hits == 1 && s.hits == 1);

    /* a corrupt entry, one of another model, one of another tenant: refused, a miss */
    struct recur_context *c = cache_ctx((uint64_t)64 << 20);
    CHECK(recur_prefix_cache_set_store(c, &store));
    f.corrupt = true;
    recur_memory_seq_rm(recur_get_memory(c), 0, -1, -1);
    CHECK(recur_prefix_cache_restore(c, 0, t, np) == 0);
    CHECK(recur_memory_seq_pos_max(recur_get_memory(c), 0) == -1);
    CHECK(recur_prefix_cache_get_stats(c, &s) && s.store_refused == 1 && s.store_hits == 0);
    f.corrupt = false;
    f.any_tenant = true;
    CHECK(recur_prefix_cache_restore_tenant(c, 77, 0, t, np) == 0);
    CHECK(recur_prefix_cache_get_stats(c, &s) && s.store_refused == 2);
    f.any_tenant = false;
    struct recur_model *other =
        recur_model_load_from_file(other_path, recur_model_default_params());
    REQUIRE(other);
    struct recur_context_params p = recur_context_default_params();
    p.prefix_cache_bytes = (uint64_t)64 << 20;
    struct recur_context *d = new_ctx_with(other, 1, 512, &p);
    CHECK(recur_prefix_cache_set_store(d, &store));
    /* tokens both vocabularies have, stored by a's model, asked for by the other's */
    const int32_t Vo = recur_model_n_vocab(other), Vmin = Vo < V ? Vo : V;
    int32_t tt[40];
    for (int i = 0; i < 40; i++) tt[i] = t[i] % Vmin;
    reuse(a, 2, tt, np, 0, "cold, tokens of both models");
    CHECK(recur_prefix_cache_store(a, 2, tt, np) >= 1);
    f.any_model = true;
    CHECK(recur_prefix_cache_restore(d, 0, tt, np) == 0);
    CHECK(recur_prefix_cache_get_stats(d, &s) && s.store_refused == 1);
    f.any_model = false;
    CHECK(recur_prefix_cache_set_store(a, NULL)); /* removed: puts stop */
    recur_memory_seq_rm(recur_get_memory(a), 0, -1, -1);
    reuse(a, 0, t, np, np - 1, "first tier after the store is gone");
    const int before = f.n;
    CHECK(recur_prefix_cache_store(a, 0, t, np) >= 1 && f.n == before);
    CHECK(!recur_prefix_cache_set_store(NULL, &store));
    recur_free(d);
    recur_model_free(other);
    recur_free(c);
    recur_free(b);
    recur_free(a);
    for (int i = 0; i < f.n; i++) free(f.e[i].blob);
}

/* recur_prefix_cache_store_flags: NO_SNAPSHOTS stores the state after the tokens alone; 0 with
 * the snapshots (checkpoint_every 8: 40 tokens keep several); an unknown bit is refused. */
static void test_store_flags(void) {
    struct recur_context *ctx = cache_ctx(1 << 28);
    int32_t t[40];
    random_tokens(t, 40, V);
    CHECK(decode_seq(ctx, 0, t, 40, false) == 0);
    struct recur_prefix_cache_stats s;
    CHECK(recur_prefix_cache_store_flags(ctx, 0, 0, t, 40, 1u << 7) == -1 &&
          strstr(recur_last_error(), "flags"));
    CHECK(recur_prefix_cache_get_stats(ctx, &s) && s.n_entries == 0);
    CHECK(recur_prefix_cache_store_flags(ctx, 0, 0, t, 40, RECUR_PREFIX_STORE_NO_SNAPSHOTS) == 1);
    CHECK(recur_prefix_cache_get_stats(ctx, &s) && s.n_entries == 1);
    const int32_t more = recur_prefix_cache_store_flags(ctx, 0, 0, t, 40, 0);
    CHECK_MSG(more >= 3, "%d stored", more); /* the state again, and the snapshots */
    CHECK(recur_prefix_cache_get_stats(ctx, &s) && s.n_entries == (uint32_t)more);
    recur_free(ctx);
}

static void test_budget(void) {
    /* room for about three states: storing many keeps the budget */
    struct recur_context *probe = cache_ctx(1 << 20);
    struct recur_prefix_cache_stats s;
    CHECK(recur_prefix_cache_get_stats(probe, &s));
    recur_free(probe);
    struct recur_context *ctx = cache_ctx(3 * s.entry_bytes + 4096);
    int32_t t[40];
    random_tokens(t, 40, V);
    CHECK(decode_seq(ctx, 0, t, 40, false) == 0);
    CHECK(recur_prefix_cache_store(ctx, 0, t, 40) >= 1);
    CHECK(recur_prefix_cache_get_stats(ctx, &s));
    CHECK_MSG(s.n_entries <= 3 && s.bytes <= s.max_bytes && s.evictions > 0,
              "%u entries, %llu of %llu bytes", s.n_entries, (unsigned long long)s.bytes,
              (unsigned long long)s.max_bytes);
    recur_free(ctx);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_prefix MODEL OTHER_MODEL\n");
        return 2;
    }
    other_path = argv[2];
    model = recur_model_load_from_file(argv[1], recur_model_default_params());
    if (!model) fprintf(stderr, "%s\n", recur_last_error());
    REQUIRE(model);
    V = recur_model_n_vocab(model);
    RUN(test_store);
    RUN(test_tenants);
    RUN(test_extra);
    RUN(test_share);
    RUN(test_reuse);
    RUN(test_budget);
    RUN(test_store_flags);
    RUN(test_second_tier);
    recur_model_free(model);
    return test_finish("test_prefix");
}
