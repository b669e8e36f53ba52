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

static void test_store(void) {
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8}, b[] = {1, 2, 9, 9};
    float st[SF];
    const float *got;
    struct rpfx *c = rpfx_create(1 << 20, SF);
    REQUIRE(c);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got) == 0 && got == NULL); /* empty */
    state_for(st, 10);
    CHECK(rpfx_put(c, 0, a, 3, st) == 1);
    state_for(st, 20);
    CHECK(rpfx_put(c, 0, a, 6, st) == 1);
    state_for(st, 30);
    CHECK(rpfx_put(c, 0, b, 4, st) == 1);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got) == 6 && got[0] == 20); /* the longest */
    CHECK(rpfx_find(c, 0, a, 8, 5, &got) == 3 && got[0] == 10); /* within max_len */
    CHECK(rpfx_find(c, 0, a, 6, 6, &got) == 6);                 /* a prefix of its own length */
    CHECK(rpfx_find(c, 0, b, 3, 3, &got) == 0);                 /* b's entry is longer than that */
    CHECK(rpfx_find(c, 0, b, 4, 4, &got) == 4 && got[0] == 30);
    const int32_t d[] = {1, 2, 3, 7};
    CHECK(rpfx_find(c, 0, d, 4, 4, &got) == 3); /* diverges after 3 */
    state_for(st, 40);
    CHECK(rpfx_put(c, 0, a, 3, st) == 1); /* the same prefix again: replaced, not added */
    struct rpfx_stats s;
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 3 &&
          s.bytes == rpfx_entry_bytes(c, 3) + rpfx_entry_bytes(c, 6) + rpfx_entry_bytes(c, 4));
    CHECK(rpfx_find(c, 0, a, 4, 4, &got) == 3 && got[0] == 40);
    rpfx_get_stats(c, &s);
    CHECK(s.hits == 6 && s.misses == 2 && s.tokens_reused == 6 + 3 + 6 + 4 + 3 + 3);

    /* every hash equal: the tokens decide, never a wrong state */
    rpfx_debug_hash_mask(c, 0);
    CHECK(rpfx_find(c, 0, a, 8, 8, &got) == 6 && got[0] == 20);
    CHECK(rpfx_find(c, 0, b, 4, 4, &got) == 4 && got[0] == 30);
    CHECK(rpfx_find(c, 0, d, 4, 4, &got) == 3 && got[0] == 40);
    const int32_t e[] = {5, 5, 5, 5, 5, 5};
    CHECK(rpfx_find(c, 0, e, 6, 6, &got) == 0);
    rpfx_debug_hash_mask(c, ~(uint64_t)0);

    /* streams: round trip; a corrupt or foreign stream changes nothing */
    uint8_t buf[4096];
    struct rio_writer w;
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rpfx_write(c, &w));
    struct rpfx *c2 = rpfx_create(1 << 20, SF);
    REQUIRE(c2);
    struct rio_reader r;
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(rpfx_read(c2, &r));
    CHECK(rpfx_find(c2, 0, a, 8, 8, &got) == 6 && got[0] == 20 && got[4] == 24);
    CHECK(rpfx_find(c2, 0, b, 4, 4, &got) == 4 && got[0] == 30);
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
    struct rpfx *small = rpfx_create(3 * rpfx_entry_bytes(c, 4) + 8, SF);
    REQUIRE(small);
    const int32_t p[4][4] = {{1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}, {4, 4, 4, 4}};
    for (int i = 0; i < 3; i++) CHECK(rpfx_put(small, 0, p[i], 4, st) == 1);
    CHECK(rpfx_find(small, 0, p[0], 4, 4, &got) == 4); /* 0 is now the most recent: 1 goes */
    CHECK(rpfx_put(small, 0, p[3], 4, st) == 1);
    rpfx_get_stats(small, &s);
    CHECK(s.n_entries == 3 && s.evictions == 1 && s.bytes <= s.max_bytes);
    CHECK(rpfx_find(small, 0, p[1], 4, 4, &got) == 0 && rpfx_find(small, 0, p[0], 4, 4, &got) == 4);
    const int32_t big[64] = {0}; /* one entry larger than the whole budget: refused */
    CHECK(rpfx_entry_bytes(small, 64) > s.max_bytes && rpfx_put(small, 0, big, 64, st) == 0);
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
    CHECK(rpfx_put(c, 7, a, 4, st) == 1);
    CHECK(rpfx_find(c, 8, a, 6, 6, &got) == 0 && got == NULL); /* another tenant: a miss */
    CHECK(rpfx_find(c, 0, a, 6, 6, &got) == 0);                /* nor tenant 0 */
    CHECK(rpfx_find(c, 7, a, 6, 6, &got) == 4 && got[0] == 10);
    state_for(st, 20);
    CHECK(rpfx_put(c, 8, a, 4, st) == 1); /* the same tokens, tenant 8: a second entry */
    struct rpfx_stats s;
    rpfx_get_stats(c, &s);
    CHECK(s.n_entries == 2);
    CHECK(rpfx_find(c, 7, a, 6, 6, &got) == 4 && got[0] == 10);
    CHECK(rpfx_find(c, 8, a, 6, 6, &got) == 4 && got[0] == 20);

    uint8_t buf[4096];
    struct rio_writer w;
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rpfx_write(c, &w));
    struct rpfx *c2 = rpfx_create(1 << 20, SF);
    REQUIRE(c2);
    struct rio_reader r;
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(rpfx_read(c2, &r));
    CHECK(rpfx_find(c2, 7, a, 6, 6, &got) == 4 && got[0] == 10);
    CHECK(rpfx_find(c2, 8, a, 6, 6, &got) == 4 && got[0] == 20);
    CHECK(rpfx_find(c2, 9, a, 6, 6, &got) == 0);

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
    CHECK(rpfx_find(c3, 0, a, 6, 6, &got) == 3 && got[0] == 30);
    CHECK(rpfx_find(c3, 7, a, 6, 6, &got) == 0);
    rpfx_free(c3);
    rpfx_free(c2);
    rpfx_free(c);
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
    CHECK(s.hits == 3 && s.misses == 2 && s.tokens_reused == (uint64_t)(np - 1 + 16 + np + 5));
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
    RUN(test_reuse);
    RUN(test_budget);
    recur_model_free(model);
    return test_finish("test_prefix");
}
