/*
 * The prefix state cache of a context (include/recur.h): the API over src/prefix, with the
 * memory's states and snapshots as its entries.
 *
 * File: u32 "RCPC", u32 version, u64 model fingerprint (state.c's head), then the cache stream
 * (prefix.h, with its own checksum).
 *
 * An entry for the second tier (recur_prefix_store): u32 "RCPE", u32 version 1, u64 model
 * fingerprint, u64 tenant, u32 n, i32 tokens[n], u64 state floats, f32 state[floats], u64
 * XXH64 of all before it. Everything is checked when it comes back: the store is outside the
 * process, shared, and may hold anything.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../io/io.h"
#include "api_impl.h"

#define MAGIC_CACHE 0x43504352u /* "RCPC" */
#define MAGIC_ENTRY 0x45504352u /* "RCPE" */
#define ENTRY_VERSION 1u

/* ctx has a prefix cache; fn names the public function for a NULL ctx (api_arg.h) */
static bool have_cache(const struct recur_context *ctx, const char *fn) {
    if (!api_arg(ctx, fn, "ctx")) return false;
    if (ctx->prefix) return true;
    rcore_error_set("the context has no prefix cache (prefix_cache_bytes is 0)");
    return false;
}

static bool seq_in_range(const struct recur_context *ctx, recur_seq_id seq) {
    if (seq >= 0 && (uint32_t)seq < ctx->params.n_seq_max) return true;
    rcore_error_set("sequence id %d is out of range 0..%u", seq, ctx->params.n_seq_max - 1);
    return false;
}

/* ---- the second tier ---------------------------------------------------------------------- */

bool recur_prefix_cache_set_store(struct recur_context *ctx,
                                  const struct recur_prefix_store *store) {
    if (!have_cache(ctx, __func__)) return false;
    if (store)
        ctx->store = *store;
    else
        memset(&ctx->store, 0, sizeof ctx->store);
    return true;
}

static size_t entry_size(const struct recur_context *ctx, int32_t n) {
    return 4 + 4 + 8 + 8 + 4 + 4 * (size_t)n + 8 + rmem_snap_block_bytes(ctx->mem) + 8;
}

/* Hands the entry (tenant, tokens[0..n)) -> state to the store, serialized. */
static void store_put(struct recur_context *ctx, uint64_t tenant, const recur_token *tokens,
                      int32_t n, const float *state) {
    if (!ctx->store.put) return;
    const size_t size = entry_size(ctx, n), floats = rmem_snap_block_bytes(ctx->mem) / 4;
    uint8_t *buf = malloc(size);
    if (!buf) return; /* the second tier is a cache: a put it does not get is a later miss */
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    rio_writer_digest_reset(&w);
    bool ok = rio_write_u32(&w, MAGIC_ENTRY) && rio_write_u32(&w, ENTRY_VERSION) &&
              rio_write_u64(&w, rmodel_fingerprint(ctx->model->m)) && rio_write_u64(&w, tenant) &&
              rio_write_u32(&w, (uint32_t)n);
    for (int32_t i = 0; ok && i < n; i++) ok = rio_write_i32(&w, tokens[i]);
    ok = ok && rio_write_u64(&w, floats);
    for (size_t f = 0; ok && f < floats; f++) {
        uint32_t bits;
        memcpy(&bits, &state[f], 4);
        ok = rio_write_u32(&w, bits);
    }
    ok = ok && rio_write_u64(&w, rio_writer_digest(&w));
    if (ok && w.n_done == size) {
        ctx->store.put(ctx->store.user, rmodel_fingerprint(ctx->model->m), tenant, tokens, n, buf,
                       size);
        ctx->store_puts++;
    }
    free(buf);
}

/* The state of a blob from the store into dst, when it is whole, of this model, of tenant and
 * of exactly tokens[0..n); false with the error set (naming what is wrong) otherwise. */
static bool entry_read(const struct recur_context *ctx, const void *blob, size_t len,
                       uint64_t tenant, const recur_token *tokens, int32_t n, float *dst) {
    if (len != entry_size(ctx, n)) {
        rcore_error_set("%zu bytes, an entry of %d tokens has %zu", len, n, entry_size(ctx, n));
        return false;
    }
    struct rio_reader r;
    rio_reader_buffer(&r, blob, len);
    rio_reader_digest_reset(&r);
    uint32_t magic = 0, version = 0, count = 0;
    uint64_t fp = 0, who = 0, floats = 0;
    if (!rio_read_u32(&r, &magic) || !rio_read_u32(&r, &version) || !rio_read_u64(&r, &fp) ||
        !rio_read_u64(&r, &who) || !rio_read_u32(&r, &count))
        return false;
    if (magic != MAGIC_ENTRY || version != ENTRY_VERSION) {
        rcore_error_set("not a prefix entry (magic %08x, version %u)", magic, version);
        return false;
    }
    if (fp != rmodel_fingerprint(ctx->model->m)) {
        rcore_error_set("an entry of another model (fingerprint %016llx)", (unsigned long long)fp);
        return false;
    }
    if (who != tenant || count != (uint32_t)n) {
        rcore_error_set("an entry of another tenant or length");
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t t = 0;
        if (!rio_read_i32(&r, &t)) return false;
        if (t != tokens[i]) {
            rcore_error_set("an entry of other tokens (a key collision)");
            return false;
        }
    }
    if (!rio_read_u64(&r, &floats) || floats != rmem_snap_block_bytes(ctx->mem) / 4) return false;
    for (size_t f = 0; f < floats; f++) {
        uint32_t bits = 0;
        if (!rio_read_u32(&r, &bits)) return false;
        memcpy(&dst[f], &bits, 4);
    }
    const uint64_t want = rio_reader_digest(&r);
    uint64_t have = 0;
    if (!rio_read_u64(&r, &have)) return false;
    if (have != want && !RCORE_FUZZING) {
        rcore_error_set("checksum mismatch (the entry is corrupt)");
        return false;
    }
    return true;
}

int32_t recur_prefix_cache_store_tenant(struct recur_context *ctx, uint64_t tenant,
                                        recur_seq_id seq, const recur_token *tokens,
                                        int32_t n_tokens) {
    if (!have_cache(ctx, __func__) || !seq_in_range(ctx, seq)) return -1;
    const int32_t pos = rmem_seq_pos_max(ctx->mem, seq);
    if (!tokens || n_tokens < 1 || n_tokens != pos + 1) {
        rcore_error_set("prefix cache store: sequence %d holds positions 0..%d, %d tokens were "
                        "given",
                        seq, pos, n_tokens);
        return -1;
    }
    if (!rmem_seq_state_f32(ctx->mem, seq, ctx->block)) return -1;
    int32_t stored = 0;
    int r = rpfx_put(ctx->prefix, tenant, tokens, n_tokens, ctx->block);
    if (r < 0) return -1;
    stored += r;
    store_put(ctx, tenant, tokens, n_tokens, ctx->block);
    /* the snapshots it keeps, under the prefixes they end (positions are token indices) */
    for (uint32_t i = 0; i < rmem_snap_count(ctx->mem, seq); i++) {
        const int32_t p = rmem_snap_pos(ctx->mem, seq, i);
        if (p >= pos) continue; /* the current state, stored above */
        r = rpfx_put(ctx->prefix, tenant, tokens, p + 1, rmem_snap_data(ctx->mem, seq, i));
        if (r < 0) return -1;
        stored += r;
        store_put(ctx, tenant, tokens, p + 1, rmem_snap_data(ctx->mem, seq, i));
    }
    return stored;
}

int32_t recur_prefix_cache_restore_tenant(struct recur_context *ctx, uint64_t tenant,
                                          recur_seq_id seq, const recur_token *tokens,
                                          int32_t n_tokens) {
    if (!have_cache(ctx, __func__) || !seq_in_range(ctx, seq)) return -1;
    if (!tokens || n_tokens < 0) {
        rcore_error_set("prefix cache restore: %d tokens", n_tokens);
        return -1;
    }
    const float *state = NULL;
    int32_t n = rpfx_find(ctx->prefix, tenant, tokens, n_tokens, n_tokens - 1, &state);
    if (n < 0) return n;
    /* the second tier, for a longer prefix than the first has */
    if (ctx->store.get && n_tokens - 1 > n) {
        void *blob = NULL;
        size_t len = 0;
        const int32_t got = ctx->store.get(ctx->store.user, rmodel_fingerprint(ctx->model->m),
                                           tenant, tokens, n_tokens, n + 1, n_tokens - 1, &blob,
                                           &len);
        if (got > n && got < n_tokens && blob) {
            if (entry_read(ctx, blob, len, tenant, tokens, got, ctx->block)) {
                /* into the first tier too; its put may evict what state points at */
                if (rpfx_put(ctx->prefix, tenant, tokens, got, ctx->block) < 0) rcore_error_clear();
                state = ctx->block;
                n = got;
                ctx->store_hits++;
            } else {
                ctx->store_refused++;
                rcore_log(RCORE_LOG_WARN, "prefix store: an entry of %d tokens refused: %s\n", got,
                          rcore_error_get());
            }
        }
        free(blob);
    }
    if (n == 0) return 0;
    return rmem_seq_set_state_f32(ctx->mem, seq, state, n - 1) ? n : -1;
}

int32_t recur_prefix_cache_store(struct recur_context *ctx, recur_seq_id seq,
                                 const recur_token *tokens, int32_t n_tokens) {
    API_NEED(ctx, -1);
    return recur_prefix_cache_store_tenant(ctx, 0, seq, tokens, n_tokens);
}

int32_t recur_prefix_cache_restore(struct recur_context *ctx, recur_seq_id seq,
                                   const recur_token *tokens, int32_t n_tokens) {
    API_NEED(ctx, -1);
    return recur_prefix_cache_restore_tenant(ctx, 0, seq, tokens, n_tokens);
}

bool recur_prefix_cache_get_stats(const struct recur_context *ctx,
                                  struct recur_prefix_cache_stats *out) {
    if (!have_cache(ctx, __func__)) return false;
    API_NEED(out, false);
    struct rpfx_stats s;
    rpfx_get_stats(ctx->prefix, &s);
    *out = (struct recur_prefix_cache_stats){.bytes = s.bytes,
                                             .max_bytes = s.max_bytes,
                                             .entry_bytes = rmem_snap_block_bytes(ctx->mem),
                                             .n_entries = s.n_entries,
                                             .hits = s.hits,
                                             .misses = s.misses,
                                             .tokens_reused = s.tokens_reused,
                                             .evictions = s.evictions,
                                             .store_hits = ctx->store_hits,
                                             .store_refused = ctx->store_refused,
                                             .store_puts = ctx->store_puts};
    return true;
}

static bool write_cache_file(void *arg, struct rio_writer *w) {
    const struct recur_context *ctx = arg;
    return api_write_head(ctx, w, MAGIC_CACHE) && rpfx_write(ctx->prefix, w);
}

bool recur_prefix_cache_save_file(const struct recur_context *ctx, const char *path) {
    if (!have_cache(ctx, __func__)) return false;
    API_NEED(path, false);
    return rio_replace(path, write_cache_file, (void *)ctx, NULL);
}

bool recur_prefix_cache_load_file(struct recur_context *ctx, const char *path) {
    if (!have_cache(ctx, __func__)) return false;
    API_NEED(path, false);
    FILE *f = rio_fopen_regular(path);
    if (!f) return false;
    struct rio_reader r;
    rio_reader_file(&r, f);
    bool ok =
        api_read_head(ctx, &r, MAGIC_CACHE, "prefix cache file") && rpfx_read(ctx->prefix, &r);
    if (ok && fgetc(f) != EOF) {
        rcore_error_set("trailing bytes after the prefix cache");
        ok = false; /* the entries were added already: they are whole and checked */
    }
    fclose(f);
    if (!ok) rcore_error_prefix("%s", path);
    return ok;
}
