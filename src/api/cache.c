/*
 * The prefix state cache of a context (include/recur.h): the API over src/prefix, with the
 * memory's states and snapshots as its entries. A hybrid model's entry also carries its
 * sequence's attention rows up to that point, as a one-sequence stream of the attention part
 * (rmem_kv_state_write_prefix), the entry's extra bytes: its size grows with its tokens.
 *
 * File: u32 "RCPC", u32 version, u64 model fingerprint (state.c's head), then the cache stream
 * (prefix.h, with its own checksum).
 *
 * An entry for the second tier (recur_prefix_store): u32 "RCPE", u32 version 2, u64 model
 * fingerprint, u64 tenant, u32 n, i32 tokens[n], u64 state floats, f32 state[floats], u64
 * attention bytes, the attention stream (0 bytes for a recurrent model), u64 XXH64 of all
 * before it. Everything is checked when it comes back: the store is outside the process,
 * shared, and may hold anything. (Version 1, without the attention bytes, is refused: a miss.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../io/io.h"
#include "api_impl.h"

#define MAGIC_CACHE   0x43504352u /* "RCPC" */
#define MAGIC_ENTRY   0x45504352u /* "RCPE" */
#define ENTRY_VERSION 2u

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

static size_t entry_size(const struct recur_context *ctx, int32_t n, size_t attn_bytes) {
    return 4 + 4 + 8 + 8 + 4 + 4 * (size_t)n + 8 + rmem_snap_block_bytes(ctx->mem) + 8 +
           attn_bytes + 8;
}

/* Room for bytes in ctx->attn_buf; false with the error set when out of memory. */
static bool attn_room(struct recur_context *ctx, size_t bytes) {
    if (bytes <= ctx->attn_cap) return true;
    uint8_t *b = realloc(ctx->attn_buf, bytes);
    if (!b) {
        rcore_error_set("prefix cache: out of memory for %zu bytes of attention rows", bytes);
        return false;
    }
    ctx->attn_buf = b;
    ctx->attn_cap = bytes;
    return true;
}

/* A hybrid sequence's attention rows of its first n tokens, as a stream in ctx->attn_buf:
 * *rows and *bytes (NULL and 0 for a recurrent model). False with the error set. */
static bool attn_rows(struct recur_context *ctx, int32_t seq, int32_t n, const void **rows,
                      size_t *bytes) {
    *rows = NULL;
    *bytes = 0;
    const struct rmem_kv *kv = rmem_attn(ctx->mem);
    if (!kv) return true;
    const size_t size = rmem_kv_state_size_prefix(kv, seq, (uint32_t)n);
    if (size == 0 || !attn_room(ctx, size)) return false;
    struct rio_writer w;
    rio_writer_buffer(&w, ctx->attn_buf, size);
    if (!rmem_kv_state_write_prefix(kv, &w, seq, (uint32_t)n)) return false;
    *rows = ctx->attn_buf;
    *bytes = size;
    return true;
}

/* Hands the entry (tenant, tokens[0..n)) -> state and attention rows to the store, serialized. */
static void store_put(struct recur_context *ctx, uint64_t tenant, const recur_token *tokens,
                      int32_t n, const float *state, const void *attn, size_t attn_bytes) {
    if (!ctx->store.put) return;
    const size_t size = entry_size(ctx, n, attn_bytes),
                 floats = rmem_snap_block_bytes(ctx->mem) / 4;
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
    ok = ok && rio_write_u64(&w, attn_bytes) && (!attn_bytes || rio_write(&w, attn, attn_bytes));
    ok = ok && rio_write_u64(&w, rio_writer_digest(&w));
    if (ok && w.n_done == size) {
        ctx->store.put(ctx->store.user, rmodel_fingerprint(ctx->model->m), tenant, tokens, n, buf,
                       size);
        ctx->store_puts++;
    }
    free(buf);
}

/* The state of a blob from the store into dst, and its attention rows into ctx->attn_buf
 * (*attn_bytes of them), when it is whole, of this model, of tenant and of exactly
 * tokens[0..n); false with the error set (naming what is wrong) otherwise. */
static bool entry_read(struct recur_context *ctx, const void *blob, size_t len, uint64_t tenant,
                       const recur_token *tokens, int32_t n, float *dst, size_t *attn_bytes) {
    if (len < entry_size(ctx, n, 0)) {
        rcore_error_set("%zu bytes, an entry of %d tokens has at least %zu", len, n,
                        entry_size(ctx, n, 0));
        return false;
    }
    struct rio_reader r;
    rio_reader_buffer(&r, blob, len);
    rio_reader_digest_reset(&r);
    uint32_t magic = 0, version = 0, count = 0;
    uint64_t fp = 0, who = 0, floats = 0, extra = 0;
    if (!rio_read_u32(&r, &magic) || !rio_read_u32(&r, &version) || !rio_read_u64(&r, &fp) ||
        !rio_read_u64(&r, &who) || !rio_read_u32(&r, &count))
        return false;
    if (magic != MAGIC_ENTRY || version != ENTRY_VERSION) {
        rcore_error_set("not a prefix entry of version %u (magic %08x, version %u)", ENTRY_VERSION,
                        magic, version);
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
    if (!rio_read_u64(&r, &extra)) return false;
    if (extra != len - entry_size(ctx, n, 0) || (extra != 0) != (rmem_attn(ctx->mem) != NULL)) {
        rcore_error_set("%llu bytes of attention rows in an entry of %zu bytes, for a %s model",
                        (unsigned long long)extra, len,
                        rmem_attn(ctx->mem) ? "hybrid" : "recurrent");
        return false;
    }
    if (extra && (!attn_room(ctx, (size_t)extra) || !rio_read(&r, ctx->attn_buf, (size_t)extra)))
        return false;
    *attn_bytes = (size_t)extra;
    const uint64_t want = rio_reader_digest(&r);
    uint64_t have = 0;
    if (!rio_read_u64(&r, &have)) return false;
    if (have != want && !RCORE_FUZZING) {
        rcore_error_set("checksum mismatch (the entry is corrupt)");
        return false;
    }
    return true;
}

/* Stores (tenant, tokens[0..n)) -> state, with seq's attention rows of its first n tokens. An
 * entry already held (a checkpoint stored by an earlier request of the same conversation) is
 * the same state: it is only marked used, not copied again (a hybrid's grow with the
 * conversation, and a request stores every checkpoint its sequence keeps). A hybrid's
 * checkpoint (not fresh: stored after the sequence's whole prompt, whose rows begin with its
 * own) borrows those rows in the first tier (rpfx_share_extra) instead of holding a copy; the
 * second tier's entries stand alone, each with its rows. */
static int put_entry(struct recur_context *ctx, uint64_t tenant, recur_seq_id seq,
                     const recur_token *tokens, int32_t n, const float *state, bool fresh) {
    if (!fresh && rpfx_touch(ctx->prefix, tenant, tokens, n)) return 0;
    const bool borrow = !fresh && rmem_attn(ctx->mem);
    int r = borrow ? rpfx_put(ctx->prefix, tenant, tokens, n, state, NULL, 0) : 0;
    if (r < 0) return -1;
    if (r == 1 && !ctx->store.put) return 1;
    const void *rows;
    size_t bytes;
    if (!attn_rows(ctx, seq, n, &rows, &bytes)) return -1;
    if (r == 0) r = rpfx_put(ctx->prefix, tenant, tokens, n, state, rows, bytes);
    if (r >= 0) store_put(ctx, tenant, tokens, n, state, rows, bytes);
    return r;
}

/* store_flags and store_tenant, their errors named fn. */
static int32_t store(struct recur_context *ctx, uint64_t tenant, recur_seq_id seq,
                     const recur_token *tokens, int32_t n_tokens, uint32_t flags, const char *fn) {
    if (!have_cache(ctx, fn) || !seq_in_range(ctx, seq)) return -1;
    if (flags & ~(uint32_t)RECUR_PREFIX_STORE_NO_SNAPSHOTS) {
        rcore_error_set("%s: unknown flags 0x%x", fn, flags);
        return -1;
    }
    const int32_t pos = rmem_seq_pos_max(ctx->mem, seq);
    if (!tokens || n_tokens < 1 || n_tokens != pos + 1) {
        rcore_error_set("prefix cache store: sequence %d holds positions 0..%d, %d tokens were "
                        "given",
                        seq, pos, n_tokens);
        return -1;
    }
    if (!rmem_seq_state_f32(ctx->mem, seq, ctx->block)) return -1;
    int32_t stored = 0;
    int r = put_entry(ctx, tenant, seq, tokens, n_tokens, ctx->block, true);
    if (r < 0) return -1;
    stored += r;
    /* the snapshots it keeps, under the prefixes they end (positions are token indices) */
    const uint32_t n_snaps =
        flags & RECUR_PREFIX_STORE_NO_SNAPSHOTS ? 0 : rmem_snap_count(ctx->mem, seq);
    for (uint32_t i = 0; i < n_snaps; i++) {
        const int32_t p = rmem_snap_pos(ctx->mem, seq, i);
        if (p >= pos) continue; /* the current state, stored above */
        r = put_entry(ctx, tenant, seq, tokens, p + 1, rmem_snap_data(ctx->mem, seq, i), false);
        if (r < 0) return -1;
        stored += r;
    }
    return stored;
}

int32_t recur_prefix_cache_store_flags(struct recur_context *ctx, uint64_t tenant, recur_seq_id seq,
                                       const recur_token *tokens, int32_t n_tokens,
                                       uint32_t flags) {
    return store(ctx, tenant, seq, tokens, n_tokens, flags, __func__);
}

int32_t recur_prefix_cache_store_tenant(struct recur_context *ctx, uint64_t tenant,
                                        recur_seq_id seq, const recur_token *tokens,
                                        int32_t n_tokens) {
    return store(ctx, tenant, seq, tokens, n_tokens, 0, __func__);
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
    const void *rows = NULL;
    size_t rows_bytes = 0;
    int32_t rows_n = 0; /* the tokens the rows are of: more than n when they are borrowed */
    int32_t n = rpfx_find(ctx->prefix, tenant, tokens, n_tokens, n_tokens - 1, &state, &rows,
                          &rows_bytes, &rows_n);
    if (n < 0) return n;
    /* the second tier, for a longer prefix than the first has */
    if (ctx->store.get && n_tokens - 1 > n) {
        void *blob = NULL;
        size_t len = 0;
        const int32_t got =
            ctx->store.get(ctx->store.user, rmodel_fingerprint(ctx->model->m), tenant, tokens,
                           n_tokens, n + 1, n_tokens - 1, &blob, &len);
        if (got > n && got < n_tokens && blob) {
            size_t bytes = 0;
            if (entry_read(ctx, blob, len, tenant, tokens, got, ctx->block, &bytes)) {
                /* into the first tier too; its put may evict what state and rows point at */
                if (rpfx_put(ctx->prefix, tenant, tokens, got, ctx->block, ctx->attn_buf, bytes) <
                    0)
                    rcore_error_clear();
                state = ctx->block;
                rows = bytes ? ctx->attn_buf : NULL;
                rows_bytes = bytes;
                rows_n = got;
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
    if (!rmem_attn(ctx->mem)) return rmem_seq_set_state_f32(ctx->mem, seq, state, n - 1) ? n : -1;
    if (!rows_bytes) {
        rcore_error_set("prefix cache: the entry of %d tokens has no attention rows", n);
        return -1;
    }
    struct rio_reader r;
    rio_reader_buffer(&r, rows, rows_bytes);
    /* borrowed rows run past the entry: cut to its n tokens */
    return (rows_n > n ? rmem_seq_set_state_hybrid_upto
                       : rmem_seq_set_state_hybrid)(ctx->mem, seq, state, n - 1, &r)
               ? n
               : -1;
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

/* The bytes a hybrid entry's attention stream takes a token: every layer's K and V row, its
 * position, and its page's share of the page table and row count (pages of one token at
 * worst); 0 for a recurrent model. */
static uint64_t attn_per_token(const struct recur_context *ctx) {
    const struct rmem_kv *kv = rmem_attn_const(ctx->mem);
    if (!kv) return 0;
    uint64_t b = 4 + 8;
    for (uint32_t il = 0; il < rmem_kv_n_layer(kv); il++)
        b += rmem_kv_k_row_bytes(kv, il) + rmem_kv_v_row_bytes(kv, il);
    return b;
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
                                             .attn_bytes_per_token = attn_per_token(ctx),
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
