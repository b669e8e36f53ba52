/*
 * The prefix state cache of a context (include/recur.h): the API over src/prefix, with the
 * memory's states and snapshots as its entries.
 *
 * File: u32 "RCPC", u32 version, u64 model fingerprint (state.c's head), then the cache stream
 * (prefix.h, with its own checksum).
 */
#include <stdio.h>
#include <string.h>

#include "../core/core.h"
#include "../io/io.h"
#include "api_impl.h"

#define MAGIC_CACHE 0x43504352u /* "RCPC" */

static bool have_cache(const struct recur_context *ctx) {
    if (ctx && ctx->prefix) return true;
    rcore_error_set("the context has no prefix cache (prefix_cache_bytes is 0)");
    return false;
}

static bool seq_in_range(const struct recur_context *ctx, recur_seq_id seq) {
    if (seq >= 0 && (uint32_t)seq < ctx->params.n_seq_max) return true;
    rcore_error_set("sequence id %d is out of range 0..%u", seq, ctx->params.n_seq_max - 1);
    return false;
}

int32_t recur_prefix_cache_store_tenant(struct recur_context *ctx, uint64_t tenant,
                                        recur_seq_id seq, const recur_token *tokens,
                                        int32_t n_tokens) {
    if (!have_cache(ctx) || !seq_in_range(ctx, seq)) return -1;
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
    /* the snapshots it keeps, under the prefixes they end (positions are token indices) */
    for (uint32_t i = 0; i < rmem_snap_count(ctx->mem, seq); i++) {
        const int32_t p = rmem_snap_pos(ctx->mem, seq, i);
        if (p >= pos) continue; /* the current state, stored above */
        r = rpfx_put(ctx->prefix, tenant, tokens, p + 1, rmem_snap_data(ctx->mem, seq, i));
        if (r < 0) return -1;
        stored += r;
    }
    return stored;
}

int32_t recur_prefix_cache_restore_tenant(struct recur_context *ctx, uint64_t tenant,
                                          recur_seq_id seq, const recur_token *tokens,
                                          int32_t n_tokens) {
    if (!have_cache(ctx) || !seq_in_range(ctx, seq)) return -1;
    if (!tokens || n_tokens < 0) {
        rcore_error_set("prefix cache restore: %d tokens", n_tokens);
        return -1;
    }
    const float *state = NULL;
    const int32_t n = rpfx_find(ctx->prefix, tenant, tokens, n_tokens, n_tokens - 1, &state);
    if (n <= 0) return n;
    return rmem_seq_set_state_f32(ctx->mem, seq, state, n - 1) ? n : -1;
}

int32_t recur_prefix_cache_store(struct recur_context *ctx, recur_seq_id seq,
                                 const recur_token *tokens, int32_t n_tokens) {
    return recur_prefix_cache_store_tenant(ctx, 0, seq, tokens, n_tokens);
}

int32_t recur_prefix_cache_restore(struct recur_context *ctx, recur_seq_id seq,
                                   const recur_token *tokens, int32_t n_tokens) {
    return recur_prefix_cache_restore_tenant(ctx, 0, seq, tokens, n_tokens);
}

bool recur_prefix_cache_get_stats(const struct recur_context *ctx,
                                  struct recur_prefix_cache_stats *out) {
    if (!have_cache(ctx)) return false;
    struct rpfx_stats s;
    rpfx_get_stats(ctx->prefix, &s);
    *out = (struct recur_prefix_cache_stats){
        s.bytes,         s.max_bytes, rmem_snap_block_bytes(ctx->mem),
        s.n_entries,     s.hits,      s.misses,
        s.tokens_reused, s.evictions};
    return true;
}

static bool write_cache_file(void *arg, struct rio_writer *w) {
    const struct recur_context *ctx = arg;
    return api_write_head(ctx, w, MAGIC_CACHE) && rpfx_write(ctx->prefix, w);
}

bool recur_prefix_cache_save_file(const struct recur_context *ctx, const char *path) {
    if (!have_cache(ctx)) return false;
    return rio_replace(path, write_cache_file, (void *)ctx, NULL);
}

bool recur_prefix_cache_load_file(struct recur_context *ctx, const char *path) {
    if (!have_cache(ctx)) return false;
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
