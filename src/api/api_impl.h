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

static inline struct rmem *api_mem(recur_memory_t mem) {
    return (struct rmem *)mem;
}

#endif
