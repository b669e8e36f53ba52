/* The batch context of the recurrent state memory (memory.h): a batch validated against the
 * memory's sequences, split into ubatches, and placed on the metadata in a dry run first, so
 * that rmem_init_batch refuses a batch that cannot fit (RMEM_NO_ROOM) before the compute
 * changes anything; then the ubatches are placed one by one as the compute applies them. */
#include "memory_impl.h"

#include <stdlib.h>

struct rmem_bctx {
    struct rmem *mem;
    struct rbatch_split split;
    int32_t *positions;
    uint32_t i;
};

/* Places every ubatch on the metadata alone, then puts the metadata back. */
static bool recurrent_prepare(struct rmem *mem, const struct rbatch_split *split) {
    /* With at least as many cells as sequences every batch fits (each sequence holds at most
       one cell), so the dry run can only fail when cells are fewer. */
    if (mem->size >= mem->n_seq_max) return true;

    rmem_meta_copy(&mem->saved, &mem->meta, mem->size, mem->n_seq_max);
    mem->dry = true;
    bool ok = true;
    for (uint32_t u = 0; u < split->n_ubatches && ok; u++) {
        ok = rmem_find_slot(mem, &split->ubatches[u]);
        if (!ok) rcore_error_prefix("ubatch %u of %u", u + 1, split->n_ubatches);
    }
    mem->dry = false;
    rmem_meta_copy(&mem->meta, &mem->saved, mem->size, mem->n_seq_max);
    return ok;
}

/* Both parts' dry runs; a hybrid memory's attention part also grows the arrays its placements
 * will fill, so that applying the ubatches cannot fail. */
static enum rmem_status prepare(struct rmem *mem, const struct rbatch_split *split) {
    if (!recurrent_prepare(mem, split)) return RMEM_NO_ROOM;
    return mem->kv ? rmem_kv_prepare(mem->kv, split->ubatches, split->n_ubatches) : RMEM_OK;
}

enum rmem_status rmem_init_batch(struct rmem *mem, const struct rbatch_in *batch,
                                 const struct rmem_batch_params *params, struct rmem_bctx **out) {
    *out = NULL;
    if (!batch || !params || params->n_ubatch == 0) {
        rcore_error_set("init_batch: %s", !batch    ? "the batch is NULL"
                                          : !params ? "the parameters are NULL"
                                                    : "n_ubatch is 0");
        return RMEM_INVALID;
    }
    for (uint32_t s = 0; s < mem->n_seq_max; s++)
        mem->pos_max[s] = rmem_seq_pos_max(mem, (int32_t)s);
    const struct rbatch_seq_info info = {mem->n_seq_max, mem->pos_max, mem->meta.tail};

    struct rmem_bctx *ctx = calloc(1, sizeof *ctx);
    size_t n_pos = batch->n_tokens > 0 ? (size_t)batch->n_tokens : 1;
    if (!ctx || !(ctx->positions = malloc(n_pos * sizeof(int32_t)))) {
        free(ctx);
        rcore_error_set("init_batch: out of memory for a batch of %d tokens", batch->n_tokens);
        return RMEM_FAILED;
    }
    ctx->mem = mem;

    if (!rbatch_validate(batch, params->n_vocab, &info, ctx->positions)) {
        rmem_bctx_free(ctx);
        return RMEM_INVALID;
    }
    enum rbatch_split_kind kind = params->embd_pooled ? RBATCH_SPLIT_SEQ : RBATCH_SPLIT_EQUAL;
    if (!rbatch_split(batch, ctx->positions, params->n_ubatch, kind, params->logits_all,
                      &ctx->split)) {
        rmem_bctx_free(ctx);
        return RMEM_FAILED;
    }
    const enum rmem_status st = prepare(mem, &ctx->split);
    if (st != RMEM_OK) {
        rmem_bctx_free(ctx);
        return st;
    }
    *out = ctx;
    return RMEM_OK;
}

const struct rbatch_ubatch *rmem_bctx_ubatch(const struct rmem_bctx *ctx) {
    return &ctx->split.ubatches[ctx->i];
}

uint32_t rmem_bctx_n_ubatches(const struct rmem_bctx *ctx) {
    return ctx->split.n_ubatches;
}

bool rmem_bctx_apply(struct rmem_bctx *ctx) {
    const struct rbatch_ubatch *ub = &ctx->split.ubatches[ctx->i];
    /* the attention part's placement cannot fail after the prepare (that grew its arrays) */
    if (ctx->mem->kv && !rmem_kv_place(ctx->mem->kv, ub)) return false;
    return rmem_find_slot(ctx->mem, ub);
}

bool rmem_bctx_next(struct rmem_bctx *ctx) {
    if (ctx->i + 1 >= ctx->split.n_ubatches) return false;
    ctx->i++;
    return true;
}

const int32_t *rmem_bctx_out_ids(const struct rmem_bctx *ctx, int32_t *n_outputs) {
    if (n_outputs) *n_outputs = ctx->split.n_outputs;
    return ctx->split.out_ids;
}

const int32_t *rmem_bctx_positions(const struct rmem_bctx *ctx) {
    return ctx->positions;
}

void rmem_bctx_free(struct rmem_bctx *ctx) {
    if (!ctx) return;
    rbatch_split_free(&ctx->split);
    free(ctx->positions);
    free(ctx);
}
