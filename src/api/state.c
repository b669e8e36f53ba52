/*
 * Saving and restoring context states (include/recur.h).
 *
 * Layouts (integers little-endian; every part is checked by value or by a checksum):
 *   context state:  u32 "RCST", u32 version, u64 model fingerprint,
 *                   memory stream (memory.h, with its own checksum),
 *                   outputs: u32 n_batch_tokens, i32 output_ids[n], u32 n_outputs,
 *                            u32 has_embd, f32 logits[n_outputs * n_vocab],
 *                            [f32 embd[n_outputs * n_embd]], u64 XXH64 of the outputs part
 *   sequence state: u32 "RCSS", u32 version, u64 model fingerprint, one-sequence memory stream
 *   state file:     u32 "RCSF" (whole) or "RCSQ" (one sequence), u32 version, u64 model
 *                   fingerprint, u32 n_tokens, i32 tokens[n], u64 XXH64 of this header,
 *                   then the context or sequence state
 * The fingerprint makes a state from another model fail with a message instead of loading
 * garbage states.
 */
#include "api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "../core/core.h"
#include "../io/io.h"

#define MAGIC_CTX     0x54534352u /* "RCST" */
#define MAGIC_SEQ     0x53534352u /* "RCSS" */
#define MAGIC_FILE    0x46534352u /* "RCSF" */
#define MAGIC_FILE_SQ 0x51534352u /* "RCSQ" */
#define VERSION       1u

/* ---- header ------------------------------------------------------------------------------ */

bool api_write_head(const struct recur_context *ctx, struct rio_writer *w, uint32_t magic) {
    return rio_write_u32(w, magic) && rio_write_u32(w, VERSION) &&
           rio_write_u64(w, rmodel_fingerprint(ctx->model->m));
}

bool api_read_head(const struct recur_context *ctx, struct rio_reader *r, uint32_t magic,
                   const char *what) {
    uint32_t got_magic, version;
    uint64_t fp;
    if (!rio_read_u32(r, &got_magic) || !rio_read_u32(r, &version) || !rio_read_u64(r, &fp))
        return false;
    if (got_magic != magic) {
        rcore_error_set("not a recur %s (magic 0x%08x)", what, got_magic);
        return false;
    }
    if (version != VERSION) {
        rcore_error_set("%s version %u, this build reads version %u", what, version, VERSION);
        return false;
    }
    if (fp != rmodel_fingerprint(ctx->model->m)) {
        rcore_error_set("the %s was made by another model (fingerprint %016llx, this model's is "
                        "%016llx)",
                        what, (unsigned long long)fp,
                        (unsigned long long)rmodel_fingerprint(ctx->model->m));
        return false;
    }
    return true;
}

/* ---- context state ----------------------------------------------------------------------- */

static bool write_outputs(struct recur_context *ctx, struct rio_writer *w) {
    const size_t V = (size_t)rmodel_n_vocab(ctx->model->m),
                 E = (size_t)rmodel_n_embd(ctx->model->m);
    const bool has_embd = ctx->embd != NULL;
    rio_writer_digest_reset(w);
    bool ok = rio_write_u32(w, (uint32_t)ctx->n_batch_tokens);
    for (int32_t i = 0; ok && i < ctx->n_batch_tokens; i++)
        ok = rio_write_i32(w, ctx->output_ids[i]);
    ok = ok && rio_write_u32(w, (uint32_t)ctx->n_outputs) && rio_write_u32(w, has_embd) &&
         rio_write(w, ctx->logits, sizeof(float) * V * (size_t)ctx->n_outputs) &&
         (!has_embd || rio_write(w, ctx->embd, sizeof(float) * E * (size_t)ctx->n_outputs));
    return ok && rio_write_u64(w, rio_writer_digest(w));
}

static bool write_context(struct recur_context *ctx, struct rio_writer *w) {
    return api_write_head(ctx, w, MAGIC_CTX) && rmem_state_write(ctx->mem, w, -1) &&
           write_outputs(ctx, w);
}

/* Reads the outputs part into fresh buffers, installed only when all of it checked out. */
static bool read_outputs(struct recur_context *ctx, struct rio_reader *r) {
    const size_t V = (size_t)rmodel_n_vocab(ctx->model->m),
                 E = (size_t)rmodel_n_embd(ctx->model->m);
    uint32_t n_tok, n_out, has_embd;
    rio_reader_digest_reset(r);
    if (!rio_read_u32(r, &n_tok)) return false;
    if (n_tok > ctx->params.n_batch) {
        rcore_error_set("outputs of a batch of %u tokens, n_batch is %u", n_tok,
                        ctx->params.n_batch);
        return false;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (n_tok ? n_tok : 1));
    float *logits = NULL, *embd = NULL;
    bool ok = ids != NULL;
    for (uint32_t i = 0; ok && i < n_tok; i++) ok = rio_read_i32(r, &ids[i]);
    ok = ok && rio_read_u32(r, &n_out) && rio_read_u32(r, &has_embd);
    if (ok && (n_out > n_tok || has_embd > 1 || (has_embd && !ctx->params.embeddings))) {
        rcore_error_set("outputs: %u rows for %u tokens, embeddings %u: inconsistent", n_out, n_tok,
                        has_embd);
        ok = false;
    }
    for (uint32_t i = 0; ok && i < n_tok; i++) {
        if (ids[i] < -1 || ids[i] >= (int32_t)n_out) {
            rcore_error_set("outputs: token %u has row %d of %u", i, ids[i], n_out);
            ok = false;
        }
    }
    if (ok) {
        const size_t rows = n_out ? n_out : 1;
        logits = malloc(sizeof(float) * V * rows);
        embd = ctx->params.embeddings ? malloc(sizeof(float) * E * rows) : NULL;
        ok = logits && (!ctx->params.embeddings || embd);
        if (!ok) rcore_error_set("out of memory for %u output rows", n_out);
    }
    ok = ok && rio_read(r, logits, sizeof(float) * V * n_out) &&
         (!has_embd || rio_read(r, embd, sizeof(float) * E * n_out));
    if (ok) {
        const uint64_t want = rio_reader_digest(r);
        uint64_t got;
        ok = rio_read_u64(r, &got);
        if (ok && got != want && !RCORE_FUZZING) {
            rcore_error_set("outputs: checksum mismatch (the state is corrupt)");
            ok = false;
        }
    }
    if (!ok) {
        free(ids);
        free(logits);
        free(embd);
        return false;
    }
    if (ctx->params.embeddings && !has_embd) memset(embd, 0, sizeof(float) * E * n_out);
    memcpy(ctx->output_ids, ids, sizeof(int32_t) * n_tok);
    free(ids);
    free(ctx->logits);
    free(ctx->embd);
    ctx->logits = logits;
    ctx->embd = embd;
    ctx->out_cap = n_out ? n_out : 1;
    ctx->n_batch_tokens = (int32_t)n_tok;
    ctx->n_outputs = (int32_t)n_out;
    return true;
}

/* On failure the memory is cleared (rmem_state_read does it for its own part). */
static bool read_context(struct recur_context *ctx, struct rio_reader *r) {
    if (!api_read_head(ctx, r, MAGIC_CTX, "context state")) return false;
    if (!rmem_state_read(ctx->mem, r, -1)) return false;
    if (!read_outputs(ctx, r)) {
        rmem_clear(ctx->mem, true);
        return false;
    }
    return true;
}

static bool write_seq(struct recur_context *ctx, struct rio_writer *w, recur_seq_id seq) {
    return api_write_head(ctx, w, MAGIC_SEQ) && rmem_state_write(ctx->mem, w, seq);
}

static bool read_seq(struct recur_context *ctx, struct rio_reader *r, recur_seq_id dest) {
    if (!api_read_head(ctx, r, MAGIC_SEQ, "sequence state")) {
        rmem_seq_rm(ctx->mem, dest, -1, -1);
        return false;
    }
    return rmem_state_read(ctx->mem, r, dest);
}

static bool seq_ok(struct recur_context *ctx, recur_seq_id seq) {
    if (seq < 0 || (uint32_t)seq >= ctx->params.n_seq_max) {
        rcore_error_set("sequence id %d is out of range 0..%u", seq, ctx->params.n_seq_max - 1);
        return false;
    }
    return true;
}

/* ---- buffers ----------------------------------------------------------------------------- */

size_t recur_state_get_size(struct recur_context *ctx) {
    API_NEED(ctx, 0);
    struct rio_writer w;
    rio_writer_counter(&w);
    return write_context(ctx, &w) ? w.n_done : 0;
}

size_t recur_state_get_data(struct recur_context *ctx, uint8_t *dst, size_t size) {
    API_NEED(ctx, 0);
    struct rio_writer w;
    rio_writer_buffer(&w, dst, size);
    return write_context(ctx, &w) ? w.n_done : 0;
}

size_t recur_state_set_data(struct recur_context *ctx, const uint8_t *src, size_t size) {
    API_NEED(ctx, 0);
    struct rio_reader r;
    rio_reader_buffer(&r, src, size);
    if (read_context(ctx, &r)) return r.n_done;
    rmem_clear(ctx->mem, true);
    rcore_error_prefix("context state");
    return 0;
}

size_t recur_state_seq_get_size(struct recur_context *ctx, recur_seq_id seq) {
    API_NEED(ctx, 0);
    if (!seq_ok(ctx, seq)) return 0;
    struct rio_writer w;
    rio_writer_counter(&w);
    return write_seq(ctx, &w, seq) ? w.n_done : 0;
}

size_t recur_state_seq_get_data(struct recur_context *ctx, uint8_t *dst, size_t size,
                                recur_seq_id seq) {
    API_NEED(ctx, 0);
    if (!seq_ok(ctx, seq)) return 0;
    struct rio_writer w;
    rio_writer_buffer(&w, dst, size);
    return write_seq(ctx, &w, seq) ? w.n_done : 0;
}

size_t recur_state_seq_set_data(struct recur_context *ctx, const uint8_t *src, size_t size,
                                recur_seq_id dest) {
    API_NEED(ctx, 0);
    if (!seq_ok(ctx, dest)) return 0;
    struct rio_reader r;
    rio_reader_buffer(&r, src, size);
    if (read_seq(ctx, &r, dest)) return r.n_done;
    rcore_error_prefix("sequence state");
    return 0;
}

/* ---- files ------------------------------------------------------------------------------- */

static bool write_file_head(struct recur_context *ctx, struct rio_writer *w, uint32_t magic,
                            const recur_token *tokens, size_t n_tokens) {
    if (n_tokens > UINT32_MAX || (n_tokens && !tokens)) {
        rcore_error_set("%zu tokens cannot be saved", n_tokens);
        return false;
    }
    rio_writer_digest_reset(w);
    bool ok = api_write_head(ctx, w, magic) && rio_write_u32(w, (uint32_t)n_tokens);
    for (size_t i = 0; ok && i < n_tokens; i++) ok = rio_write_i32(w, tokens[i]);
    return ok && rio_write_u64(w, rio_writer_digest(w));
}

static bool read_file_head(struct recur_context *ctx, struct rio_reader *r, uint32_t magic,
                           recur_token *tokens_out, size_t capacity, size_t *n_tokens_out) {
    uint32_t n;
    rio_reader_digest_reset(r);
    if (!api_read_head(ctx, r, magic, magic == MAGIC_FILE ? "state file" : "sequence state file") ||
        !rio_read_u32(r, &n))
        return false;
    if (n > capacity) {
        rcore_error_set("the file holds %u tokens, the buffer has room for %zu", n, capacity);
        return false;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!rio_read_i32(r, &tokens_out[i])) return false;
    const uint64_t want = rio_reader_digest(r);
    uint64_t got;
    if (!rio_read_u64(r, &got)) return false;
    if (got != want && !RCORE_FUZZING) {
        rcore_error_set("header checksum mismatch (the file is corrupt)");
        return false;
    }
    if (n_tokens_out) *n_tokens_out = n;
    return true;
}

struct save_args {
    struct recur_context *ctx;
    recur_seq_id seq;
    const recur_token *tokens;
    size_t n_tokens;
};

static bool write_state_file(void *arg, struct rio_writer *w) {
    const struct save_args *a = arg;
    return a->seq < 0 ? write_file_head(a->ctx, w, MAGIC_FILE, a->tokens, a->n_tokens) &&
                            write_context(a->ctx, w)
                      : write_file_head(a->ctx, w, MAGIC_FILE_SQ, a->tokens, a->n_tokens) &&
                            write_seq(a->ctx, w, a->seq);
}

/* Written crash-safely (rio_replace): a new file renamed over path once complete. */
static size_t save_file(struct recur_context *ctx, const char *path, recur_seq_id seq,
                        const recur_token *tokens, size_t n_tokens) {
    struct save_args a = {ctx, seq, tokens, n_tokens};
    size_t n = 0;
    return rio_replace(path, write_state_file, &a, &n) ? n : 0;
}

bool recur_state_save_file(struct recur_context *ctx, const char *path, const recur_token *tokens,
                           size_t n_tokens) {
    API_NEED(ctx, false);
    API_NEED(path, false);
    return save_file(ctx, path, -1, tokens, n_tokens) > 0;
}

size_t recur_state_seq_save_file(struct recur_context *ctx, const char *path, recur_seq_id seq,
                                 const recur_token *tokens, size_t n_tokens) {
    API_NEED(ctx, 0);
    API_NEED(path, 0);
    if (!seq_ok(ctx, seq)) return 0;
    return save_file(ctx, path, seq, tokens, n_tokens);
}

static size_t load_file(struct recur_context *ctx, const char *path, recur_seq_id dest,
                        recur_token *tokens_out, size_t capacity, size_t *n_tokens_out) {
    FILE *f = rio_fopen_regular(path);
    if (!f) return 0;
    struct rio_reader r;
    rio_reader_file(&r, f);
    bool ok;
    if (dest < 0) {
        ok = read_file_head(ctx, &r, MAGIC_FILE, tokens_out, capacity, n_tokens_out) &&
             read_context(ctx, &r);
        if (!ok) rmem_clear(ctx->mem, true);
    } else {
        ok = read_file_head(ctx, &r, MAGIC_FILE_SQ, tokens_out, capacity, n_tokens_out) &&
             read_seq(ctx, &r, dest);
        if (!ok) rmem_seq_rm(ctx->mem, dest, -1, -1);
    }
    if (ok && fgetc(f) != EOF) {
        rcore_error_set("trailing bytes after the state");
        ok = false;
        if (dest < 0)
            rmem_clear(ctx->mem, true);
        else
            rmem_seq_rm(ctx->mem, dest, -1, -1);
    }
    fclose(f);
    if (!ok) rcore_error_prefix("%s", path);
    return ok ? r.n_done : 0;
}

bool recur_state_load_file(struct recur_context *ctx, const char *path, recur_token *tokens_out,
                           size_t capacity, size_t *n_tokens_out) {
    API_NEED(ctx, false);
    API_NEED(path, false);
    return load_file(ctx, path, -1, tokens_out, capacity, n_tokens_out) > 0;
}

size_t recur_state_seq_load_file(struct recur_context *ctx, const char *path, recur_seq_id dest,
                                 recur_token *tokens_out, size_t capacity, size_t *n_tokens_out) {
    API_NEED(ctx, 0);
    API_NEED(path, 0);
    if (!seq_ok(ctx, dest)) return 0;
    return load_file(ctx, path, dest, tokens_out, capacity, n_tokens_out);
}

bool recur_file_check_writable(const char *path) {
    API_NEED(path, false);
    return rio_check_replaceable(path);
}
