/* Pooled embeddings (include/recur.h, enum recur_pooling_type): which tokens of a batch the
 * pooling reads, and each sequence's pooled state from their rows after the decode. */
#include "api_impl.h"

#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

static const char *pooling_name(enum recur_pooling_type t) {
    static const char *const names[] = {"none", "mean", "cls", "last"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

bool api_pool_init(struct recur_context *ctx) {
    const size_t S = ctx->params.n_seq_max, E = (size_t)rmodel_n_embd(ctx->model->m);
    ctx->pool_flags = malloc(ctx->params.n_batch);
    ctx->embd_seq = malloc(sizeof(float) * S * E);
    ctx->seq_n = calloc(S, sizeof(int32_t));
    if (!ctx->pool_flags || !ctx->embd_seq || !ctx->seq_n) {
        rcore_error_set("out of memory for a context's pooled embeddings");
        return false;
    }
    return true;
}

/* Token i's sequence ids (n_seq_id / seq_id NULL: sequence 0, as recur_decode reads them);
 * 0 ids when the token's count is out of range (recur_decode then refuses the batch). */
static int32_t token_seqs(const struct recur_batch *b, int32_t i, uint32_t n_seq_max,
                          const recur_seq_id **ids) {
    static const recur_seq_id zero = 0;
    if (!b->n_seq_id || !b->seq_id) {
        *ids = &zero;
        return 1;
    }
    const int32_t n = b->n_seq_id[i];
    if (n < 1 || (uint32_t)n > n_seq_max || !b->seq_id[i]) return 0;
    *ids = b->seq_id[i];
    return n;
}

bool api_pool_prepare(struct recur_context *ctx, const struct recur_batch *batch) {
    const enum recur_pooling_type pt = ctx->params.pooling_type;
    const uint32_t S = ctx->params.n_seq_max;
    memset(ctx->seq_n, 0, sizeof(int32_t) * S); /* a failed decode leaves no embeddings */
    const int32_t n = batch->n_tokens;
    if (n <= 0) return true; /* recur_decode refuses it with its own message */
    /* MEAN reads every token; CLS the first of each sequence, LAST the last (seq_n counts the
       tokens seen so far while marking, and is cleared again) */
    for (int32_t i = 0; i < n; i++) ctx->pool_flags[i] = pt == RECUR_POOLING_TYPE_MEAN;
    recur_memory_t mem = recur_get_memory(ctx);
    for (int32_t i = 0; i < n; i++) {
        const recur_seq_id *ids;
        const int32_t k = token_seqs(batch, i, S, &ids);
        for (int32_t j = 0; j < k; j++) {
            const recur_seq_id s = ids[j];
            if (s < 0 || (uint32_t)s >= S) continue; /* refused by recur_decode */
            if (ctx->seq_n[s]++ == 0 && pt != RECUR_POOLING_TYPE_LAST &&
                recur_memory_seq_pos_max(mem, s) >= 0) {
                rcore_error_set("pooling_type %s: sequence %d already holds positions up to %d: "
                                "a %s-pooled text must be whole in one batch (clear the "
                                "sequence first)",
                                pooling_name(pt), s, recur_memory_seq_pos_max(mem, s),
                                pooling_name(pt));
                memset(ctx->seq_n, 0, sizeof(int32_t) * S);
                return false;
            }
            if (pt == RECUR_POOLING_TYPE_CLS && ctx->seq_n[s] == 1) ctx->pool_flags[i] = 1;
        }
    }
    if (pt == RECUR_POOLING_TYPE_LAST) /* the last token of each sequence, from the end */
        for (int32_t i = n - 1; i >= 0; i--) {
            const recur_seq_id *ids;
            const int32_t k = token_seqs(batch, i, S, &ids);
            for (int32_t j = 0; j < k; j++) {
                const recur_seq_id s = ids[j];
                if (s < 0 || (uint32_t)s >= S || ctx->seq_n[s] <= 0) continue;
                ctx->pool_flags[i] = 1;
                ctx->seq_n[s] = -1; /* its last token is marked */
            }
        }
    memset(ctx->seq_n, 0, sizeof(int32_t) * S);
    return true;
}

void api_pool_finish(struct recur_context *ctx, const struct recur_batch *batch) {
    const enum recur_pooling_type pt = ctx->params.pooling_type;
    const uint32_t S = ctx->params.n_seq_max;
    const size_t E = (size_t)rmodel_n_embd(ctx->model->m);
    /* batch order is each sequence's position order (recur_decode checked that they follow):
       the first row of a sequence is its first token, the last its last */
    for (int32_t i = 0; i < batch->n_tokens; i++) {
        const int32_t row = ctx->output_ids[i];
        if (row < 0) continue;
        const float *h = ctx->embd + (size_t)row * E;
        const recur_seq_id *ids;
        const int32_t k = token_seqs(batch, i, S, &ids);
        for (int32_t j = 0; j < k; j++) {
            float *dst = ctx->embd_seq + (size_t)ids[j] * E;
            const int32_t seen = ctx->seq_n[ids[j]]++;
            if (pt == RECUR_POOLING_TYPE_MEAN && seen > 0)
                for (size_t e = 0; e < E; e++) dst[e] += h[e];
            else if (seen == 0 || pt == RECUR_POOLING_TYPE_LAST)
                memcpy(dst, h, sizeof(float) * E); /* the first row; LAST: the latest */
        }
    }
    if (pt == RECUR_POOLING_TYPE_MEAN)
        for (uint32_t s = 0; s < S; s++)
            if (ctx->seq_n[s] > 1) {
                float *dst = ctx->embd_seq + (size_t)s * E;
                const float inv = 1.0f / (float)ctx->seq_n[s];
                for (size_t e = 0; e < E; e++) dst[e] *= inv;
            }
}

float *recur_get_embeddings_seq(struct recur_context *ctx, recur_seq_id seq_id) {
    API_NEED(ctx, NULL);
    if (!ctx->params.embeddings) {
        rcore_error_set("the context was made without embeddings");
        return NULL;
    }
    if (!api_pooled(ctx)) {
        rcore_error_set("the context's pooling_type is none: its embeddings are per token "
                        "(recur_get_embeddings_ith)");
        return NULL;
    }
    if (seq_id < 0 || (uint32_t)seq_id >= ctx->params.n_seq_max) {
        rcore_error_set("sequence %d: the context has sequences 0 .. %u", seq_id,
                        ctx->params.n_seq_max - 1);
        return NULL;
    }
    if (ctx->seq_n[seq_id] == 0) {
        rcore_error_set("sequence %d had no token in the last decode", seq_id);
        return NULL;
    }
    return ctx->embd_seq + (size_t)seq_id * (size_t)rmodel_n_embd(ctx->model->m);
}

enum recur_pooling_type recur_pooling_type(const struct recur_context *ctx) {
    API_NEED(ctx, RECUR_POOLING_TYPE_NONE);
    return ctx->params.pooling_type;
}
