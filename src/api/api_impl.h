/* Private to src/api: the objects behind the public handles of include/recur.h. */
#ifndef RECUR_API_IMPL_H
#define RECUR_API_IMPL_H

#include "recur.h"

#include "api_arg.h"

#include "../memory/memory.h"
#include "../model/model.h"
#include "../pool/pool.h"
#include "../prefix/prefix.h"
#include "../vocab/vocab.h"

struct recur_model {
    struct rmodel *m;     /* NULL for a vocab_only model */
    struct rvocab *vocab; /* from the model file's tokenizer.ggml.* keys */
    /* vocab_only: the file (its metadata) and its general.architecture; NULL otherwise */
    struct rgguf *gguf;
    char *arch;
};

/* The model's GGUF file (keys, tensors), with or without weights. */
static inline const struct rgguf *api_model_gguf(const struct recur_model *model) {
    return model->m ? rmodel_gguf(model->m) : model->gguf;
}

struct recur_context {
    const struct recur_model *model;
    struct recur_context_params params;
    struct rmem *mem;
    struct rmodel_ws *ws;
    struct rpool *pool; /* NULL when one thread is all the context uses */
    enum rops_isa isa;

    /* outputs of the last successful decode */
    int32_t n_batch_tokens; /* tokens of that batch */
    int32_t *output_ids;    /* [n_batch] row of each batch token, -1 when none */
    int32_t n_outputs;
    float *logits;  /* n_outputs x n_vocab */
    float *embd;    /* n_outputs x n_embd, when params.embeddings */
    size_t out_cap; /* rows the buffers hold */
    /* pooled embeddings (embd.c), when params.pooling_type is not none */
    int8_t *pool_flags; /* [n_batch] the outputs the pooling needs, as batch.logits */
    float *embd_seq;    /* [n_seq_max x n_embd] each sequence's pooled state */
    int32_t *seq_n;     /* [n_seq_max] its tokens in the last decode, 0: none */

    struct rpfx *prefix; /* the prefix state cache, NULL when params.prefix_cache_bytes is 0 */
    float *block;        /* one sequence's state as f32 (rmem_snap_block_bytes), for it */
    uint8_t *attn_buf;   /* a hybrid entry's attention rows (cache.c), attn_cap bytes */
    size_t attn_cap;
    struct recur_prefix_store store; /* its second tier (cache.c); put and get NULL: none */
    uint64_t store_hits, store_refused, store_puts;
};

/* state.c: the head of every state stream (magic, version, model fingerprint). Files are
 * written with rio_replace (io.h). */
bool api_write_head(const struct recur_context *ctx, struct rio_writer *w, uint32_t magic);
bool api_read_head(const struct recur_context *ctx, struct rio_reader *r, uint32_t magic,
                   const char *what);

/* embd.c: pooled embeddings. api_pool_init: the buffers (at context creation; false with
 * the error set). api_pool_prepare: the outputs the pooling needs into ctx->pool_flags, and the
 * refusal of a MEAN / CLS sequence that already holds tokens (false with the error set; the
 * memory unchanged). api_pool_finish: each sequence's pooled state from the decode's rows. */
static inline bool api_pooled(const struct recur_context *ctx) {
    return ctx->params.embeddings && ctx->params.pooling_type != RECUR_POOLING_TYPE_NONE;
}
bool api_pool_init(struct recur_context *ctx);
bool api_pool_prepare(struct recur_context *ctx, const struct recur_batch *batch);
void api_pool_finish(struct recur_context *ctx, const struct recur_batch *batch);

static inline struct rmem *api_mem(recur_memory_t mem) {
    return (struct rmem *)mem;
}

#endif
