/* The public API (include/recur.h): models, contexts, batches, decoding, outputs, and the
 * memory operations. State saving is in state.c. */
#include "api_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../core/core.h"

/* ---- parameters -------------------------------------------------------------------------- */

struct recur_model_params recur_model_default_params(void) {
    struct recur_model_params p = {.use_mmap = true, .repack = true};
    return p;
}

struct recur_context_params recur_context_default_params(void) {
    struct recur_context_params p = {
        .n_batch = 2048,
        .n_ubatch = 512,
        .n_seq_max = 1,
        .n_threads = 4,
        .n_threads_batch = 4,
        .type_k = RECUR_TYPE_F32,
        .type_v = RECUR_TYPE_F32,
        .embeddings = false,
        .pooling_type = RECUR_POOLING_TYPE_NONE,
        .n_rollback = 0,
        .checkpoint_every = 0,
        .snapshot_bytes = (uint64_t)256 << 20,
        .prefix_cache_bytes = 0,
        .n_ctx = 4096,
        .attn_type_k = RECUR_TYPE_F32,
        .attn_type_v = RECUR_TYPE_F32,
    };
    return p;
}

#define API_STR_(x) #x
#define API_STR(x)  API_STR_(x)

const char *recur_version(void) {
    return API_STR(RECUR_VERSION_MAJOR) "." API_STR(RECUR_VERSION_MINOR) "." API_STR(
        RECUR_VERSION_PATCH);
}

const char *recur_last_error(void) {
    return rcore_error_get();
}

/* The public levels are core's, in the same order. */
_Static_assert((int)RECUR_LOG_LEVEL_DEBUG == (int)RCORE_LOG_DEBUG &&
                   (int)RECUR_LOG_LEVEL_WARN == (int)RCORE_LOG_WARN &&
                   (int)RECUR_LOG_LEVEL_ERROR == (int)RCORE_LOG_ERROR,
               "log levels");

/* The public callback stays the user's; core calls this one, which hands each message on. */
static recur_log_callback log_callback;

static void log_forward(enum rcore_log_level level, const char *text, void *user) {
    log_callback((enum recur_log_level)level, text, user);
}

void recur_log_set(recur_log_callback callback, void *user) {
    log_callback = callback;
    rcore_log_set(callback ? log_forward : NULL, user);
}

/* ---- models ------------------------------------------------------------------------------ */

/* The vocabulary and the keys of any GGUF file, its architecture whatever it names: no
 * weights are read or checked. */
static struct recur_model *load_vocab_only(struct recur_model *model, const char *path,
                                           bool use_mmap) {
    const char *arch = "";
    size_t len = 0;
    if (!(model->gguf = rgguf_open(path, use_mmap))) goto fail;
    if (rgguf_find_key(model->gguf, "general.architecture") >= 0 &&
        !rgguf_get_str(model->gguf, "general.architecture", &arch, &len))
        goto fail_named;
    if (!(model->arch = malloc(len + 1))) {
        rcore_error_set("out of memory");
        goto fail_named;
    }
    memcpy(model->arch, arch, len);
    model->arch[len] = '\0';
    if (!(model->vocab = rvocab_load(model->gguf))) goto fail_named;
    return model;
fail_named:
    rcore_error_prefix("%s", path);
fail:
    recur_model_free(model);
    return NULL;
}

struct recur_model *recur_model_load_from_file(const char *path, struct recur_model_params params) {
    API_NEED(path, NULL);
    struct recur_model *model = calloc(1, sizeof *model);
    if (!model) {
        rcore_error_set("%s: out of memory", path);
        return NULL;
    }
    if (params.vocab_only) return load_vocab_only(model, path, params.use_mmap);
    if (!(model->m = rmodel_load(path, params.use_mmap, params.repack))) {
        free(model);
        return NULL;
    }
    /* as llama.cpp, a model whose tokenizer cannot be used (an unknown pre-tokenizer, say) is
       refused at load time rather than at the first tokenize */
    if (!(model->vocab = rvocab_load(rmodel_gguf(model->m)))) {
        rcore_error_prefix("%s", path);
        recur_model_free(model);
        return NULL;
    }
    /* every token the tokenizer can produce needs a row of the embedding and of the output, or
       one prompt holding it would fail a whole shared batch; llama.cpp refuses such a file */
    const int32_t n_tokens = rvocab_n_tokens(model->vocab), n_rows = rmodel_n_vocab(model->m);
    if (n_tokens != n_rows) {
        rcore_error_set("%s: the vocabulary has %d tokens but token_embd.weight (and the output) "
                        "has %d rows: the file is inconsistent",
                        path, n_tokens, n_rows);
        recur_model_free(model);
        return NULL;
    }
    if (params.use_mlock) {
        const void *base;
        size_t size;
        rgguf_bytes(rmodel_gguf(model->m), &base, &size);
        if (mlock(base, size) != 0) /* as llama.cpp: a warning, the model still works */
            rcore_log(RCORE_LOG_WARN,
                      "%s: could not lock the %zu bytes of weights in memory (%s); raise "
                      "RLIMIT_MEMLOCK (ulimit -l) to use mlock\n",
                      path, size, strerror(errno));
    }
    return model;
}

bool recur_model_mapping(const struct recur_model *model, const void **addr, size_t *size) {
    API_NEED(addr, false);
    API_NEED(size, false);
    *addr = NULL;
    *size = 0;
    API_NEED(model, false);
    if (!model->m) return false; /* vocab_only: no weights are read from the file */
    const struct rgguf *g = rmodel_gguf(model->m);
    if (!rgguf_is_mapped(g)) return false;
    rgguf_bytes(g, addr, size);
    return true;
}

void recur_model_free(struct recur_model *model) {
    if (!model) return;
    rvocab_free(model->vocab);
    rmodel_free(model->m);
    rgguf_close(model->gguf);
    free(model->arch);
    free(model);
}

int32_t recur_model_n_vocab(const struct recur_model *model) {
    API_NEED(model, 0);
    return model->m ? rmodel_n_vocab(model->m) : rvocab_n_tokens(model->vocab);
}

int32_t recur_model_n_embd(const struct recur_model *model) {
    API_NEED(model, 0);
    return model->m ? rmodel_n_embd(model->m) : 0;
}

int32_t recur_model_n_layer(const struct recur_model *model) {
    API_NEED(model, 0);
    return model->m ? rmodel_n_layer(model->m) : 0;
}

bool recur_model_is_hybrid(const struct recur_model *model) {
    API_NEED(model, false);
    return model->m && rmodel_is_hybrid(model->m);
}

const char *recur_model_arch_name(const struct recur_model *model) {
    API_NEED(model, NULL);
    return model->m ? rmodel_arch_name(model->m) : model->arch;
}

uint64_t recur_model_size(const struct recur_model *model) {
    API_NEED(model, 0);
    uint64_t bytes = 0;
    for (int32_t i = 0; i < recur_model_n_tensors(model); i++)
        bytes += rgguf_tensor(api_model_gguf(model), i)->nbytes;
    return bytes;
}

uint64_t recur_model_repack_size(const struct recur_model *model) {
    API_NEED(model, 0);
    return model->m ? rmodel_repack_bytes(model->m) : 0;
}

uint64_t recur_model_n_params(const struct recur_model *model) {
    API_NEED(model, 0);
    uint64_t n = 0;
    for (int32_t i = 0; i < recur_model_n_tensors(model); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(api_model_gguf(model), i);
        uint64_t elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) elems *= (uint64_t)t->ne[d];
        n += elems;
    }
    return n;
}

uint64_t recur_model_fingerprint(const struct recur_model *model) {
    API_NEED(model, 0);
    return model->m ? rmodel_fingerprint(model->m) : 0;
}

int32_t recur_model_n_tensors(const struct recur_model *model) {
    API_NEED(model, 0);
    if (!model->m) return 0;
    /* only a file of tens of gigabytes of empty tensors could pass INT32_MAX: such are cut */
    const int64_t n = rgguf_n_tensors(rmodel_gguf(model->m));
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

bool recur_model_tensor(const struct recur_model *model, int32_t i,
                        struct recur_tensor_info *info) {
    API_NEED(model, false);
    API_NEED(info, false);
    const int32_t n = recur_model_n_tensors(model);
    if (i < 0 || i >= n) {
        rcore_error_set("recur_model_tensor: tensor %d is not in 0 .. %d", i, n - 1);
        return false;
    }
    const struct rgguf_tensor *t = rgguf_tensor(rmodel_gguf(model->m), i);
    info->name = t->name;
    info->n_dims = (int32_t)t->n_dims;
    for (int d = 0; d < 4; d++) info->ne[d] = t->ne[d];
    info->type = rgguf_type_name(t->type);
    info->nbytes = t->nbytes;
    return true;
}

recur_token recur_token_bos(const struct recur_model *model) {
    API_NEED(model, -1);
    return model->m ? rmodel_token_bos(model->m) : rvocab_bos(model->vocab);
}

recur_token recur_token_eos(const struct recur_model *model) {
    API_NEED(model, -1);
    return model->m ? rmodel_token_eos(model->m) : rvocab_eos(model->vocab);
}

/* The model's vocabulary holds the FIM ids in both cases: a full model loads one too. */
#define FIM_GETTER(name, which)                                                                    \
    recur_token recur_token_fim_##name(const struct recur_model *model) {                          \
        API_NEED(model, -1);                                                                       \
        return rvocab_fim(model->vocab, which);                                                    \
    }
FIM_GETTER(pre, RVOCAB_FIM_PRE)
FIM_GETTER(suf, RVOCAB_FIM_SUF)
FIM_GETTER(mid, RVOCAB_FIM_MID)
FIM_GETTER(pad, RVOCAB_FIM_PAD)
FIM_GETTER(rep, RVOCAB_FIM_REP)
FIM_GETTER(sep, RVOCAB_FIM_SEP)

/* ---- contexts ---------------------------------------------------------------------------- */

static bool attn_type_ok(enum recur_type t) {
    return t == RECUR_TYPE_F32 || t == RECUR_TYPE_F16 || t == RECUR_TYPE_Q8_0;
}

/* Tokens a page of the attention part holds: the attention kernel's tile of keys. */
#define ATTN_PAGE_ROWS 32

/* The attention part's parameters for a hybrid model (rows[] and bytes[] of 2 x n_layer, the
 * caller's); false with the error set when a type does not suit the model. */
static bool attn_params(const struct rmodel *m, const struct recur_context_params *p,
                        const uint32_t *rows, size_t *bytes, struct rmem_kv_params *out) {
    const uint32_t n_layer = (uint32_t)rmodel_n_layer(m), hd = rmodel_attn_head_dim(m);
    const enum recur_type types[2] = {p->attn_type_k, p->attn_type_v};
    for (int kv = 0; kv < 2; kv++) {
        if (types[kv] == RECUR_TYPE_Q8_0 && hd % 32) {
            rcore_error_set("context parameters: attn_type_%c q8_0 needs an attention head size "
                            "that is a multiple of 32; this model's is %u",
                            kv ? 'v' : 'k', hd);
            return false;
        }
        for (uint32_t il = 0; il < n_layer; il++)
            bytes[kv * n_layer + il] =
                rops_row_bytes((enum rops_type)types[kv], rows[kv * n_layer + il]);
    }
    *out = (struct rmem_kv_params){
        .n_layer = n_layer,
        .k_row_bytes = bytes,
        .v_row_bytes = bytes + n_layer,
        .type_k = (uint32_t)p->attn_type_k,
        .type_v = (uint32_t)p->attn_type_v,
        .page_rows = ATTN_PAGE_ROWS,
        /* n_ctx tokens fit however the sequences share them out: each may leave its last
           page part empty */
        .n_pages = (p->n_ctx + ATTN_PAGE_ROWS - 1) / ATTN_PAGE_ROWS + p->n_seq_max,
        .n_seq_max = p->n_seq_max,
        .rope = rmodel_attn_rope(m),
        .rotate = rmodel_attn_rotate,
        .rotate_user = (void *)m,
    };
    return true;
}

static bool check_context_params(const struct recur_context_params *p) {
    const char *bad = NULL;
    if (p->n_batch == 0 || p->n_batch > (1u << 24))
        bad = "n_batch must be 1 .. 16777216";
    else if (p->n_ubatch == 0 || p->n_ubatch > p->n_batch)
        bad = "n_ubatch must be 1 .. n_batch";
    else if (p->n_seq_max == 0 || p->n_seq_max > (1u << 16))
        bad = "n_seq_max must be 1 .. 65536";
    else if (!rcore_type_valid((int)p->type_k) || !rcore_type_valid((int)p->type_v))
        bad = "type_k and type_v must be RECUR_TYPE_F32, _F16 or _BF16";
    else if (p->n_threads < 1 || p->n_threads > 256 || p->n_threads_batch < 1 ||
             p->n_threads_batch > 256)
        bad = "n_threads and n_threads_batch must be 1 .. 256";
    else if (p->n_rollback > (1u << 16))
        bad = "n_rollback must be 0 .. 65536";
    else if ((p->n_rollback || p->checkpoint_every) && p->snapshot_bytes > (uint64_t)SIZE_MAX / 2)
        bad = "snapshot_bytes is larger than this machine can address";
    else if (p->prefix_cache_bytes > (uint64_t)SIZE_MAX / 2)
        bad = "prefix_cache_bytes is larger than this machine can address";
    else if (p->n_ctx == 0 || p->n_ctx > (1u << 24))
        bad = "n_ctx must be 1 .. 16777216";
    else if (!attn_type_ok(p->attn_type_k) || !attn_type_ok(p->attn_type_v))
        bad = "attn_type_k and attn_type_v must be RECUR_TYPE_F32, _F16 or _Q8_0";
    else if ((int)p->pooling_type < (int)RECUR_POOLING_TYPE_NONE ||
             (int)p->pooling_type > (int)RECUR_POOLING_TYPE_LAST)
        bad = "pooling_type must be RECUR_POOLING_TYPE_NONE, _MEAN, _CLS or _LAST";
    else if (p->pooling_type != RECUR_POOLING_TYPE_NONE && !p->embeddings)
        bad = "pooling_type other than none needs embeddings = true";
    if (bad) rcore_error_set("context parameters: %s", bad);
    return bad == NULL;
}

struct recur_context *recur_init_from_model(struct recur_model *model,
                                            struct recur_context_params params) {
    API_NEED(model, NULL);
    if (!model->m) {
        rcore_error_set("the model was loaded with vocab_only: it has no weights to decode with");
        return NULL;
    }
    if (!check_context_params(&params)) return NULL;
    /* the kernels' instruction set: the best the CPU has, unless RECUR_ISA forces one (for
       comparisons and tests; read once per context) */
    enum rops_isa isa;
    if (!rops_isa_from_env(&isa)) return NULL;
    struct recur_context *ctx = calloc(1, sizeof *ctx);
    const uint32_t n_layer = (uint32_t)rmodel_n_layer(model->m);
    uint32_t *rows = calloc(4 * (size_t)n_layer, sizeof(uint32_t));
    size_t *attn_bytes = calloc(2 * (size_t)n_layer, sizeof(size_t));
    if (!ctx || !rows || !attn_bytes) {
        free(ctx);
        free(rows);
        free(attn_bytes);
        rcore_error_set("out of memory for a context");
        return NULL;
    }
    ctx->model = model;
    ctx->params = params;
    rmodel_state_rows(model->m, rows, rows + n_layer);
    struct rmem_kv_params ap;
    const bool hybrid = rmodel_attn_rows(model->m, rows + 2 * n_layer, rows + 3 * n_layer);
    if (hybrid && !attn_params(model->m, &params, rows + 2 * n_layer, attn_bytes, &ap)) {
        free(ctx);
        free(rows);
        free(attn_bytes);
        return NULL;
    }
    /* one cell per sequence, as llama.cpp sizes its recurrent memory: every batch fits */
    const struct rmem_params mp = {n_layer,
                                   rows,
                                   rows + n_layer,
                                   (enum rcore_type)params.type_k,
                                   (enum rcore_type)params.type_v,
                                   params.n_seq_max,
                                   params.n_seq_max,
                                   hybrid ? &ap : NULL};
    ctx->mem = rmem_create(&mp);
    free(rows);
    free(attn_bytes);
    ctx->isa = isa;
    const int32_t n_pool =
        params.n_threads > params.n_threads_batch ? params.n_threads : params.n_threads_batch;
    if (!ctx->mem || !(ctx->ws = rmodel_ws_create(model->m, params.n_ubatch, params.n_seq_max)) ||
        (n_pool > 1 && !(ctx->pool = rpool_create(n_pool))) ||
        !(ctx->output_ids = malloc(sizeof(int32_t) * params.n_batch)) ||
        (api_pooled(ctx) && !api_pool_init(ctx))) {
        if (ctx->mem && ctx->ws) rcore_error_set("out of memory for a context");
        recur_free(ctx);
        return NULL;
    }
    if (params.n_rollback || params.checkpoint_every) {
        const size_t block = rmem_snap_block_bytes(ctx->mem);
        if (params.snapshot_bytes < block) {
            rcore_error_set("context parameters: snapshot_bytes (%llu) is less than one "
                            "snapshot of this model (%zu bytes)",
                            (unsigned long long)params.snapshot_bytes, block);
            recur_free(ctx);
            return NULL;
        }
        if (!rmem_snap_config(ctx->mem, params.n_rollback, params.checkpoint_every,
                              (size_t)params.snapshot_bytes)) {
            recur_free(ctx);
            return NULL;
        }
    }
    if (params.prefix_cache_bytes) {
        const size_t block = rmem_snap_block_bytes(ctx->mem);
        if (!(ctx->block = rcore_alloc64(block, false)) ||
            !(ctx->prefix =
                  rpfx_create((size_t)params.prefix_cache_bytes, block / sizeof(float)))) {
            if (!ctx->block) rcore_error_set("out of memory for a context");
            recur_free(ctx);
            return NULL;
        }
        /* a hybrid's entries of one conversation share its attention rows */
        if (rmem_attn(ctx->mem)) rpfx_share_extra(ctx->prefix);
    }
    return ctx;
}

void recur_free(struct recur_context *ctx) {
    if (!ctx) return;
    rmem_free(ctx->mem);
    rmodel_ws_free(ctx->ws);
    rpool_free(ctx->pool);
    free(ctx->output_ids);
    free(ctx->logits);
    free(ctx->embd);
    free(ctx->pool_flags);
    free(ctx->embd_seq);
    free(ctx->seq_n);
    rpfx_free(ctx->prefix);
    rcore_free64(ctx->block);
    free(ctx->attn_buf);
    free(ctx);
}

uint32_t recur_n_seq_max(const struct recur_context *ctx) {
    API_NEED(ctx, 0);
    return ctx->params.n_seq_max;
}

uint32_t recur_n_batch(const struct recur_context *ctx) {
    API_NEED(ctx, 0);
    return ctx->params.n_batch;
}

uint32_t recur_n_ubatch(const struct recur_context *ctx) {
    API_NEED(ctx, 0);
    return ctx->params.n_ubatch;
}

const struct recur_model *recur_get_model(const struct recur_context *ctx) {
    API_NEED(ctx, NULL);
    return ctx->model;
}

const char *recur_context_isa(const struct recur_context *ctx) {
    API_NEED(ctx, NULL);
    return rops_isa_name(ctx->isa);
}

bool recur_context_probe(struct recur_context *ctx, double *fma_gflops, double *read_gbps) {
    API_NEED(ctx, false);
    API_NEED(fma_gflops, false);
    API_NEED(read_gbps, false);
    /* larger than the caches of the CPUs recur runs on, so the stream comes from memory */
    const size_t n_bytes = (size_t)256 << 20;
    float *buf = malloc(n_bytes);
    if (!buf) {
        rcore_error_set("recur_context_probe: out of memory for a %zu MiB buffer", n_bytes >> 20);
        return false;
    }
    /* written first, so that the pages are real memory and not the shared zero page */
    for (size_t i = 0; i < n_bytes / sizeof(float); i++) buf[i] = (float)(i & 1023);
    const struct rops_exec ex = {
        .pool = ctx->pool, .n_threads = ctx->params.n_threads_batch, .isa = ctx->isa};
    *fma_gflops = rops_probe_gflops(&ex);
    *read_gbps = rops_probe_read_gbps(&ex, buf, n_bytes);
    free(buf);
    return true;
}

void recur_set_n_threads(struct recur_context *ctx, int32_t n_threads, int32_t n_threads_batch) {
    API_NEED_VOID(ctx);
    n_threads = n_threads < 1 ? 1 : n_threads > 256 ? 256 : n_threads;
    n_threads_batch = n_threads_batch < 1 ? 1 : n_threads_batch > 256 ? 256 : n_threads_batch;
    const int32_t need = n_threads > n_threads_batch ? n_threads : n_threads_batch;
    if (need > rpool_size(ctx->pool)) {
        /* a bigger team; if threads cannot be had, keep the old one (calls are clamped) */
        struct rpool *bigger = rpool_create(need);
        if (bigger) {
            rpool_free(ctx->pool);
            ctx->pool = bigger;
        }
    }
    ctx->params.n_threads = n_threads;
    ctx->params.n_threads_batch = n_threads_batch;
}

/* ---- batches ----------------------------------------------------------------------------- */

struct recur_batch recur_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max) {
    struct recur_batch b;
    memset(&b, 0, sizeof b);
    if (n_tokens <= 0 || embd < 0 || n_seq_max <= 0) {
        rcore_error_set("recur_batch_init: n_tokens %d, embd %d, n_seq_max %d must be positive",
                        n_tokens, embd, n_seq_max);
        return b;
    }
    const size_t n = (size_t)n_tokens;
    if (embd > 0)
        b.embd = malloc(sizeof(float) * n * (size_t)embd);
    else
        b.token = malloc(sizeof(recur_token) * n);
    b.pos = malloc(sizeof(recur_pos) * n);
    b.n_seq_id = malloc(sizeof(int32_t) * n);
    b.seq_id = calloc(n + 1, sizeof(recur_seq_id *)); /* NULL-terminated, as llama.cpp */
    b.logits = malloc(n);
    bool ok = (b.embd || b.token) && b.pos && b.n_seq_id && b.seq_id && b.logits;
    for (size_t i = 0; ok && i < n; i++)
        ok = (b.seq_id[i] = malloc(sizeof(recur_seq_id) * (size_t)n_seq_max)) != NULL;
    if (!ok) {
        recur_batch_free(b);
        memset(&b, 0, sizeof b);
        rcore_error_set("recur_batch_init: out of memory for %d tokens", n_tokens);
        return b;
    }
    b.n_tokens_max = n_tokens;
    b.n_seq_max = n_seq_max;
    return b;
}

int32_t recur_batch_add(struct recur_batch *batch, recur_token token, recur_pos pos,
                        const recur_seq_id *seq_ids, int32_t n_seq_ids, bool logits) {
    API_NEED(batch, -1);
    API_NEED(seq_ids, -1);
    if (batch->n_tokens_max <= 0 || !batch->token || !batch->pos || !batch->n_seq_id ||
        !batch->seq_id || !batch->logits) {
        rcore_error_set("recur_batch_add: the batch was not made by recur_batch_init for token "
                        "ids");
        return -1;
    }
    if (batch->n_tokens < 0 || batch->n_tokens >= batch->n_tokens_max) {
        rcore_error_set("recur_batch_add: the batch is full (%d of %d tokens)", batch->n_tokens,
                        batch->n_tokens_max);
        return -1;
    }
    if (n_seq_ids < 1 || n_seq_ids > batch->n_seq_max) {
        rcore_error_set("recur_batch_add: %d sequence ids, the batch holds 1 .. %d per token",
                        n_seq_ids, batch->n_seq_max);
        return -1;
    }
    const int32_t i = batch->n_tokens++;
    batch->token[i] = token;
    batch->pos[i] = pos;
    batch->n_seq_id[i] = n_seq_ids;
    memcpy(batch->seq_id[i], seq_ids, sizeof(recur_seq_id) * (size_t)n_seq_ids);
    batch->logits[i] = logits;
    return 0;
}

struct recur_batch recur_batch_get_one(recur_token *tokens, int32_t n_tokens) {
    struct recur_batch b;
    memset(&b, 0, sizeof b);
    b.n_tokens = n_tokens;
    b.token = tokens;
    return b;
}

void recur_batch_free(struct recur_batch batch) {
    if (batch.seq_id)
        for (size_t i = 0; batch.seq_id[i]; i++) free(batch.seq_id[i]);
    free(batch.token);
    free(batch.embd);
    free(batch.pos);
    free(batch.n_seq_id);
    free(batch.seq_id);
    free(batch.logits);
}

/* ---- decoding ---------------------------------------------------------------------------- */

/* Makes the output buffers hold n rows; the old outputs survive a failure. */
static bool reserve_outputs(struct recur_context *ctx, int32_t n) {
    if ((size_t)n <= ctx->out_cap) return true;
    const size_t V = (size_t)rmodel_n_vocab(ctx->model->m),
                 E = (size_t)rmodel_n_embd(ctx->model->m);
    /* a pooled context computes no logits (recur.h): its rows are hidden states only */
    float *logits = api_pooled(ctx) ? NULL : malloc(sizeof(float) * V * (size_t)n);
    float *embd = ctx->params.embeddings ? malloc(sizeof(float) * E * (size_t)n) : NULL;
    if ((!logits && !api_pooled(ctx)) || (ctx->params.embeddings && !embd)) {
        free(logits);
        free(embd);
        rcore_error_set("out of memory for %d output rows", n);
        return false;
    }
    free(ctx->logits);
    free(ctx->embd);
    ctx->logits = logits;
    ctx->embd = embd;
    ctx->out_cap = (size_t)n;
    return true;
}

int32_t recur_decode(struct recur_context *ctx, struct recur_batch batch) {
    API_NEED(ctx, -1);
    if (batch.n_tokens > (int32_t)ctx->params.n_batch) {
        rcore_error_set("batch has %d tokens, n_batch is %u", batch.n_tokens, ctx->params.n_batch);
        return -1;
    }
    if (api_pooled(ctx)) {
        /* the pooling's own outputs: every token it reads asks for its row */
        if (!api_pool_prepare(ctx, &batch)) return -1;
        batch.logits = ctx->pool_flags;
    }
    const struct rbatch_in in = {batch.n_tokens, batch.token,  batch.embd,  batch.pos,
                                 batch.n_seq_id, batch.seq_id, batch.logits};
    const struct rmem_batch_params bp = {
        ctx->params.n_ubatch, batch.token ? rmodel_n_vocab(ctx->model->m) : 0, false, false};
    struct rmem_bctx *bctx = NULL;
    switch (rmem_init_batch(ctx->mem, &in, &bp, &bctx)) {
    case RMEM_OK:
        break;
    case RMEM_NO_ROOM:
        return 1;
    case RMEM_INVALID:
        return -1;
    default:
        return -2;
    }

    int32_t n_outputs;
    rmem_bctx_out_ids(bctx, &n_outputs);
    if (!reserve_outputs(ctx, n_outputs)) {
        rmem_bctx_free(bctx);
        return -2;
    }
    /* output rows in batch order, so that recur_get_logits is in the caller's order */
    int32_t row = 0;
    for (int32_t i = 0; i < batch.n_tokens; i++)
        ctx->output_ids[i] = rbatch_token_wants_output(&in, i, false) ? row++ : -1;
    ctx->n_batch_tokens = batch.n_tokens;
    ctx->n_outputs = n_outputs;

    const struct rmodel_out out = {ctx->output_ids, api_pooled(ctx) ? NULL : ctx->logits,
                                   ctx->embd};
    /* as llama.cpp: one token per call is generation (n_threads), more is a prompt */
    int32_t nth = batch.n_tokens == 1 ? ctx->params.n_threads : ctx->params.n_threads_batch;
    if (nth > rpool_size(ctx->pool)) nth = rpool_size(ctx->pool);
    const struct rops_exec ex = {.pool = ctx->pool, .n_threads = nth, .isa = ctx->isa};
    int32_t ret = 0;
    do {
        if (!rmem_bctx_apply(bctx) || !rmodel_forward(ctx->model->m, &ex, ctx->ws, ctx->mem,
                                                      rmem_bctx_ubatch(bctx), batch.embd, &out)) {
            ret = -3;
            break;
        }
    } while (rmem_bctx_next(bctx));
    rmem_bctx_free(bctx);
    if (api_pooled(ctx)) {
        if (ret == 0) api_pool_finish(ctx, &batch);
        ctx->n_outputs = 0; /* no per-token rows are handed out (nor saved: no logits) */
    }
    return ret;
}

/* Row of batch token i (i < 0: outputs from the end), or -1 with the error set. */
static int32_t output_row(const struct recur_context *ctx, int32_t i) {
    if (i < 0) {
        if (-i > ctx->n_outputs) {
            rcore_error_set("output %d: the last decode produced %d outputs", i, ctx->n_outputs);
            return -1;
        }
        return ctx->n_outputs + i;
    }
    if (i >= ctx->n_batch_tokens) {
        rcore_error_set("token %d: the last batch had %d tokens", i, ctx->n_batch_tokens);
        return -1;
    }
    if (ctx->output_ids[i] < 0) rcore_error_set("token %d did not ask for output", i);
    return ctx->output_ids[i];
}

float *recur_get_logits_ith(struct recur_context *ctx, int32_t i) {
    API_NEED(ctx, NULL);
    if (api_pooled(ctx)) {
        rcore_error_set("the context pools embeddings (pooling_type %d): it computes no logits",
                        (int)ctx->params.pooling_type);
        return NULL;
    }
    int32_t r = output_row(ctx, i);
    return r < 0 ? NULL : ctx->logits + (size_t)r * (size_t)rmodel_n_vocab(ctx->model->m);
}

float *recur_get_logits(struct recur_context *ctx) {
    API_NEED(ctx, NULL);
    if (api_pooled(ctx)) {
        rcore_error_set("the context pools embeddings (pooling_type %d): it computes no logits",
                        (int)ctx->params.pooling_type);
        return NULL;
    }
    return ctx->n_outputs > 0 ? ctx->logits : NULL;
}

float *recur_get_embeddings_ith(struct recur_context *ctx, int32_t i) {
    API_NEED(ctx, NULL);
    if (!ctx->params.embeddings) {
        rcore_error_set("the context was made without embeddings");
        return NULL;
    }
    if (api_pooled(ctx)) {
        rcore_error_set("the context pools embeddings (pooling_type %d): a sequence's embedding "
                        "is recur_get_embeddings_seq's, there are no per-token ones",
                        (int)ctx->params.pooling_type);
        return NULL;
    }
    int32_t r = output_row(ctx, i);
    return r < 0 ? NULL : ctx->embd + (size_t)r * (size_t)rmodel_n_embd(ctx->model->m);
}

/* ---- memory ------------------------------------------------------------------------------ */

recur_memory_t recur_get_memory(const struct recur_context *ctx) {
    API_NEED(ctx, NULL);
    return (recur_memory_t)ctx->mem;
}

void recur_memory_clear(recur_memory_t mem, bool data) {
    API_NEED_VOID(mem);
    rmem_clear(api_mem(mem), data);
}

bool recur_memory_seq_rm(recur_memory_t mem, recur_seq_id seq, recur_pos p0, recur_pos p1) {
    API_NEED(mem, false);
    return rmem_seq_rm(api_mem(mem), seq, p0, p1);
}

void recur_memory_seq_cp(recur_memory_t mem, recur_seq_id src, recur_seq_id dst, recur_pos p0,
                         recur_pos p1) {
    API_NEED_VOID(mem);
    rmem_seq_cp(api_mem(mem), src, dst, p0, p1);
}

void recur_memory_seq_keep(recur_memory_t mem, recur_seq_id seq) {
    API_NEED_VOID(mem);
    rmem_seq_keep(api_mem(mem), seq);
}

void recur_memory_seq_add(recur_memory_t mem, recur_seq_id seq, recur_pos p0, recur_pos p1,
                          recur_pos delta) {
    API_NEED_VOID(mem);
    rmem_seq_add(api_mem(mem), seq, p0, p1, delta);
}

void recur_memory_seq_div(recur_memory_t mem, recur_seq_id seq, recur_pos p0, recur_pos p1, int d) {
    API_NEED_VOID(mem);
    rmem_seq_div(api_mem(mem), seq, p0, p1, d);
}

recur_pos recur_memory_seq_pos_min(recur_memory_t mem, recur_seq_id seq) {
    API_NEED(mem, -1);
    return rmem_seq_pos_min(api_mem(mem), seq);
}

recur_pos recur_memory_seq_pos_max(recur_memory_t mem, recur_seq_id seq) {
    API_NEED(mem, -1);
    return rmem_seq_pos_max(api_mem(mem), seq);
}

bool recur_memory_can_shift(recur_memory_t mem) {
    API_NEED(mem, false);
    return rmem_can_shift(api_mem(mem));
}
