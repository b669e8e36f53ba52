/* Loading what every architecture shares: the embedding, output norm and output matrix,
 * special tokens; and the helpers the architectures' loaders use (small tensors as f32 copies,
 * weight matrices in place, hyper-parameter keys under the architecture's prefix). */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

#define BIT(t) ((uint64_t)1 << (t))
/* Small tensors are read as floats; matrices in any type the GGUF reader knows (its table of
 * block sizes), which rmodel_matrix_rows then checks against the kernels. */
#define FLOAT_TYPES (BIT(RGGUF_F32) | BIT(RGGUF_F16) | BIT(RGGUF_BF16))

bool rmodel_matrix_rows(const char *name, uint32_t type, int64_t n_cols) {
    if (rops_type_supported(type, n_cols)) return true;
    rcore_error_set("tensor %s: %s rows of %lld elements are not whole %u-element blocks", name,
                    rgguf_type_name(type), (long long)n_cols, rgguf_type_block(type));
    return false;
}

/* Room for one more pointer in the model's list *items (n of them, *cap allocated). */
static bool list_room(void ***items, size_t n, size_t *cap) {
    if (n < *cap) return true;
    const size_t want = *cap ? 2 * *cap : 16;
    void **grown = realloc(*items, want * sizeof *grown);
    if (!grown) return false;
    *items = grown;
    *cap = want;
    return true;
}

float *rmodel_small_new(struct rmodel *m, size_t n, const char *name) {
    if (!list_room(&m->small, m->n_small, &m->cap_small)) goto oom;
    float *dst = rcore_alloc64(n * sizeof(float), false); /* vectors the kernels load */
    if (!dst) goto oom;
    m->small[m->n_small++] = dst;
    return dst;
oom:
    rcore_error_set("out of memory reading tensor %s", name);
    return NULL;
}

const float *rmodel_small_f32(struct rmodel *m, const char *name, uint32_t n_dims,
                              const int64_t *ne) {
    const struct rgguf_tensor *t = rgguf_require_tensor(m->gguf, name, n_dims, ne, FLOAT_TYPES);
    if (!t) return NULL;
    size_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    float *dst = rmodel_small_new(m, n, name);
    if (!dst) return NULL;
    struct rops_mat as_mat = {t->data, (enum rops_type)t->type, (int64_t)n, 1, t->nbytes, NULL};
    rops_get_row(&as_mat, 0, dst);
    return dst;
}

const float *rmodel_conv_lag(struct rmodel *m, const float *w, int64_t n_ch, int64_t d_conv,
                             const char *name) {
    float *lag = rmodel_small_new(m, (size_t)(n_ch * d_conv), name);
    if (!lag) return NULL;
    for (int64_t c = 0; c < n_ch; c++)
        for (int64_t k = 0; k < d_conv; k++) lag[k * n_ch + c] = w[c * d_conv + k];
    return lag;
}

bool rmodel_rows16(struct rmodel *m, struct rops_mat *w, const char *name) {
    const size_t bytes = rops_rows16_bytes(w, m->rows16_isa);
    if (!bytes) return true;
    if (!list_room(&m->copies, m->n_copies, &m->cap_copies)) goto oom;
    /* huge pages where the system gives them: one input streams the copy from memory, and 4 KiB
       pages took a TLB miss each 4 KiB of it */
    void *copy = rcore_alloc_big(bytes);
    if (!copy) goto oom;
    m->copies[m->n_copies++] = copy;
    m->copy_bytes += bytes;
    rops_rows16_make(w, copy);
    w->rows16 = copy;
    return true;
oom:
    rcore_error_set("out of memory for the interleaved copy of tensor %s (%zu bytes; "
                    "recur_model_params.repack false, or --no-repack, loads without it)",
                    name, bytes);
    return false;
}

/* The matrix name read in place from the file, without a copy. */
static bool matrix_in_place(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                            struct rops_mat *out) {
    const int64_t ne[2] = {n_cols, n_rows};
    const struct rgguf_tensor *t = rgguf_require_tensor(m->gguf, name, 2, ne, RMODEL_MATRIX_TYPES);
    if (!t || !rmodel_matrix_rows(name, t->type, n_cols)) return false;
    *out = (struct rops_mat){
        t->data, (enum rops_type)t->type, n_cols, n_rows, t->nbytes / (size_t)(n_rows ? n_rows : 1),
        NULL};
    return true;
}

bool rmodel_matrix(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                   struct rops_mat *out) {
    return matrix_in_place(m, name, n_cols, n_rows, out) && rmodel_rows16(m, out, name);
}

bool rmodel_key_u32(const struct rmodel *m, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->ops->name, suffix);
    return rgguf_get_u32(m->gguf, key, out);
}

bool rmodel_key_u32_or(const struct rmodel *m, const char *suffix, uint32_t def, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->ops->name, suffix);
    *out = def;
    return rgguf_find_key(m->gguf, key) < 0 || rgguf_get_u32(m->gguf, key, out);
}

bool rmodel_load_common(struct rmodel *m) {
    const struct rgguf_tensor *emb = rgguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) {
        rcore_error_set("tensor token_embd.weight is missing");
        return false;
    }
    uint32_t n_embd, n_layer;
    if (!rmodel_key_u32(m, "embedding_length", &n_embd) ||
        !rmodel_key_u32(m, "block_count", &n_layer))
        return false;
    if (n_embd == 0 || n_embd > (1u << 20) || n_layer == 0 || n_layer > 4096) {
        rcore_error_set("%s.embedding_length %u / block_count %u are out of range", m->ops->name,
                        n_embd, n_layer);
        return false;
    }
    if (emb->n_dims != 2 || emb->ne[0] != (int64_t)n_embd || emb->ne[1] < 1 ||
        emb->ne[1] > INT32_MAX) {
        rcore_error_set("tensor token_embd.weight has %u dimensions {%lld, %lld}, {%u, n_vocab} "
                        "was expected",
                        emb->n_dims, (long long)emb->ne[0], (long long)emb->ne[1], n_embd);
        return false;
    }
    m->n_embd = (int32_t)n_embd;
    m->n_layer = (int32_t)n_layer;
    m->n_vocab = (int32_t)emb->ne[1];
    /* read a row a token: no copy (one is made for the output when tied) */
    if (!matrix_in_place(m, "token_embd.weight", n_embd, m->n_vocab, &m->tok_embd)) return false;
    rgguf_prefault(m->gguf, emb); /* read a row a token: mapped now, not a page fault a token */
    const int64_t ne[1] = {n_embd};
    if (!(m->output_norm = rmodel_small_f32(m, "output_norm.weight", 1, ne))) return false;
    if (rgguf_find_tensor(m->gguf, "output.weight")) {
        if (!rmodel_matrix(m, "output.weight", n_embd, m->n_vocab, &m->output)) return false;
    } else {
        m->output = m->tok_embd; /* tied */
        if (!rmodel_rows16(m, &m->output, "token_embd.weight")) return false;
    }
    uint32_t id;
    m->bos = rgguf_get_u32(m->gguf, "tokenizer.ggml.bos_token_id", &id) ? (int32_t)id : -1;
    m->eos = rgguf_get_u32(m->gguf, "tokenizer.ggml.eos_token_id", &id) ? (int32_t)id : -1;
    if (m->bos >= m->n_vocab) m->bos = -1;
    if (m->eos >= m->n_vocab) m->eos = -1;
    rcore_error_clear(); /* absent special tokens are not an error */
    return true;
}

size_t rmodel_ws_carve(float *base, float **const *slots, const size_t *sizes, size_t n) {
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (base) *slots[i] = base + off;
        /* whole 64-byte lines, so that every array starts where an aligned base does */
        off += (sizes[i] + 15) / 16 * 16 + 16;
    }
    return off;
}

void rmodel_rows_gather(float *buf, int64_t ld, const int32_t *rows, int64_t n) {
    for (int64_t i = 0; rows && i < n; i++)
        if (rows[i] != i)
            memcpy(buf + (int64_t)i * ld, buf + (int64_t)rows[i] * ld, (size_t)ld * sizeof(float));
}

void rmodel_rows_add(float *x, const float *d, int64_t ld, const int32_t *rows, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float *row = x + (rows ? rows[i] : i) * ld;
        const float *di = d + (int64_t)i * ld;
        for (int64_t c = 0; c < ld; c++) row[c] += di[c];
    }
}
