/* Loading a model: the GGUF file, the architecture dispatch, helpers shared by the
 * architectures (small tensors as f32, weight matrices in place), the fingerprint. */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../io/io.h"

#define BIT(t) ((uint64_t)1 << (t))
/* Small tensors are read as floats; matrices also in ggml's q8_0 and q4_0 blocks. */
#define FLOAT_TYPES  (BIT(RGGUF_F32) | BIT(RGGUF_F16) | BIT(RGGUF_BF16))
#define MATRIX_TYPES (FLOAT_TYPES | BIT(RGGUF_Q8_0) | BIT(RGGUF_Q4_0))

static const char *const arch_names[] = {"mamba", "mamba2", "rwkv6", "rwkv7"};

const float *rmodel_small_f32(struct rmodel *m, const char *name, uint32_t n_dims,
                              const int64_t *ne) {
    const struct rgguf_tensor *t = rgguf_require_tensor(m->gguf, name, n_dims, ne, FLOAT_TYPES);
    if (!t) return NULL;
    if (m->n_small == m->cap_small) {
        size_t cap = m->cap_small ? 2 * m->cap_small : 16;
        float **grown = realloc(m->small, cap * sizeof *grown);
        if (!grown) goto oom;
        m->small = grown;
        m->cap_small = cap;
    }
    size_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= (size_t)ne[d];
    float *dst = malloc(n * sizeof(float));
    if (!dst) goto oom;
    struct rops_mat as_mat = {t->data, (enum rops_type)t->type, (int64_t)n, 1, t->nbytes};
    rops_get_row(&as_mat, 0, dst);
    m->small[m->n_small++] = dst;
    return dst;
oom:
    rcore_error_set("out of memory reading tensor %s", name);
    return NULL;
}

bool rmodel_matrix(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                   struct rops_mat *out) {
    const int64_t ne[2] = {n_cols, n_rows};
    const struct rgguf_tensor *t = rgguf_require_tensor(m->gguf, name, 2, ne, MATRIX_TYPES);
    if (!t) return false;
    if (!rops_type_supported(t->type, n_cols)) {
        rcore_error_set("tensor %s: %s rows of %lld elements are not whole 32-element blocks", name,
                        rgguf_type_name(t->type), (long long)n_cols);
        return false;
    }
    *out = (struct rops_mat){t->data, (enum rops_type)t->type, n_cols, n_rows,
                             t->nbytes / (size_t)(n_rows ? n_rows : 1)};
    return true;
}

bool rmodel_key_u32(const struct rmodel *m, const char *suffix, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_names[m->arch], suffix);
    return rgguf_get_u32(m->gguf, key, out);
}

bool rmodel_key_u32_or(const struct rmodel *m, const char *suffix, uint32_t def, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_names[m->arch], suffix);
    *out = def;
    return rgguf_find_key(m->gguf, key) < 0 || rgguf_get_u32(m->gguf, key, out);
}

/* Hyper-parameters, tensor names, types, shapes, and the first and last 4 KiB of every
 * tensor's bytes: cheap at load time, and different random or trained weights differ. */
static uint64_t fingerprint(const struct rmodel *m) {
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    const int32_t dims[4] = {(int32_t)m->arch, m->n_vocab, m->n_embd, m->n_layer};
    XXH64_update(&st, dims, sizeof dims);
    for (int64_t i = 0; i < rgguf_n_tensors(m->gguf); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(m->gguf, i);
        XXH64_update(&st, t->name, strlen(t->name));
        XXH64_update(&st, &t->type, sizeof t->type);
        XXH64_update(&st, t->ne, sizeof t->ne);
        size_t head = t->nbytes < 4096 ? t->nbytes : 4096;
        XXH64_update(&st, t->data, head);
        XXH64_update(&st, (const uint8_t *)t->data + t->nbytes - head, head);
    }
    return XXH64_digest(&st);
}

static bool is_rwkv(const struct rmodel *m) {
    return m->arch == RMODEL_ARCH_RWKV6 || m->arch == RMODEL_ARCH_RWKV7;
}

static bool load_common(struct rmodel *m) {
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
        rcore_error_set("%s.embedding_length %u / block_count %u are out of range",
                        arch_names[m->arch], n_embd, n_layer);
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
    if (!rmodel_matrix(m, "token_embd.weight", n_embd, m->n_vocab, &m->tok_embd)) return false;
    const int64_t ne[1] = {n_embd};
    if (!(m->output_norm = rmodel_small_f32(m, "output_norm.weight", 1, ne))) return false;
    if (rgguf_find_tensor(m->gguf, "output.weight")) {
        if (!rmodel_matrix(m, "output.weight", n_embd, m->n_vocab, &m->output)) return false;
    } else {
        m->output = m->tok_embd; /* tied */
    }
    uint32_t id;
    m->bos = rgguf_get_u32(m->gguf, "tokenizer.ggml.bos_token_id", &id) ? (int32_t)id : -1;
    m->eos = rgguf_get_u32(m->gguf, "tokenizer.ggml.eos_token_id", &id) ? (int32_t)id : -1;
    if (m->bos >= m->n_vocab) m->bos = -1;
    if (m->eos >= m->n_vocab) m->eos = -1;
    rcore_error_clear(); /* absent special tokens are not an error */
    return true;
}

struct rmodel *rmodel_load(const char *path, bool use_mmap) {
    struct rgguf *g = rgguf_open(path, use_mmap);
    if (!g) return NULL;
    struct rmodel *m = calloc(1, sizeof *m);
    if (!m) {
        rgguf_close(g);
        rcore_error_set("%s: out of memory", path);
        return NULL;
    }
    m->gguf = g;

    const char *arch;
    size_t len;
    if (!rgguf_get_str(g, "general.architecture", &arch, &len)) goto fail;
    size_t a = 0;
    while (a < sizeof arch_names / sizeof arch_names[0] && strcmp(arch, arch_names[a]) != 0) a++;
    if (a == sizeof arch_names / sizeof arch_names[0]) {
        rcore_error_set("architecture %s is not supported (supported: mamba, mamba2, rwkv6, "
                        "rwkv7)",
                        arch);
        goto fail;
    }
    m->arch = (enum rmodel_arch)a;
    if (!load_common(m) || !(is_rwkv(m) ? rrwkv_load(m) : rmamba_load(m))) goto fail;
    m->fingerprint = fingerprint(m);
    return m;

fail:
    rcore_error_prefix("%s", path);
    rmodel_free(m);
    return NULL;
}

void rmodel_free(struct rmodel *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_small; i++) free(m->small[i]);
    free(m->small);
    free(m->layers);
    free(m->rlayers);
    rgguf_close(m->gguf);
    free(m);
}

enum rmodel_arch rmodel_arch(const struct rmodel *m) {
    return m->arch;
}

const char *rmodel_arch_name(const struct rmodel *m) {
    return arch_names[m->arch];
}

int32_t rmodel_n_vocab(const struct rmodel *m) {
    return m->n_vocab;
}

int32_t rmodel_n_embd(const struct rmodel *m) {
    return m->n_embd;
}

int32_t rmodel_n_layer(const struct rmodel *m) {
    return m->n_layer;
}

int32_t rmodel_token_bos(const struct rmodel *m) {
    return m->bos;
}

int32_t rmodel_token_eos(const struct rmodel *m) {
    return m->eos;
}

const struct rgguf *rmodel_gguf(const struct rmodel *m) {
    return m->gguf;
}

uint64_t rmodel_fingerprint(const struct rmodel *m) {
    return m->fingerprint;
}

/* The K and V row sizes of one layer: every layer of these architectures has the same. */
static void layer_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row) {
    (is_rwkv(m) ? rrwkv_state_rows : rmamba_state_rows)(m, k_row, v_row);
}

void rmodel_state_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row) {
    for (int32_t il = 0; il < m->n_layer; il++) layer_rows(m, &k_row[il], &v_row[il]);
}

/* ---- the forward pass shared by the architectures ---------------------------------------- */

/* Rows of outputs computed at a time: each pass reads the output matrix once, so up to 64
 * sequences share one read; the scratch is 64 x n_vocab floats (13 MB at 50k). */
#define OUT_CHUNK 64

/* model.c's part of the workspace; the architecture's follows (rmodel_io.buf). */
struct ws_view {
    float *x;       /* n x E residual stream */
    float *k, *v;   /* n_seqs gathered K and V state rows */
    float *logit;   /* min(n, OUT_CHUNK) x n_vocab */
    float *norm;    /* min(n, OUT_CHUNK) x E */
    float *scratch; /* n x the widest matmul input: the matmuls' (rops_exec.scratch) */
    float *arch;
};

static int64_t max_in(const struct rmodel *m) {
    const int64_t w = is_rwkv(m) ? rrwkv_max_in(m) : rmamba_max_in(m);
    return w > m->n_embd ? w : m->n_embd;
}

static size_t ws_layout(const struct rmodel *m, uint32_t n, uint32_t n_seqs, float *base,
                        struct ws_view *v) {
    uint32_t k_row, v_row;
    layer_rows(m, &k_row, &v_row);
    const size_t E = (size_t)m->n_embd, V = (size_t)m->n_vocab;
    const size_t n_out = n < OUT_CHUNK ? n : OUT_CHUNK;
    const size_t sizes[] = {n * E,
                            n_seqs * (size_t)k_row,
                            n_seqs * (size_t)v_row,
                            n_out * V,
                            n_out * E,
                            n * (size_t)max_in(m),
                            is_rwkv(m) ? rrwkv_ws_floats(m, n) : rmamba_ws_floats(m, n)};
    float **slots[] = {&v->x, &v->k, &v->v, &v->logit, &v->norm, &v->scratch, &v->arch};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (base) *slots[i] = base + off;
        off += sizes[i] + 16; /* keeps rows apart: 64-byte gaps */
    }
    return off;
}

struct rmodel_ws *rmodel_ws_create(const struct rmodel *m, uint32_t n_ubatch, uint32_t n_seq_max) {
    struct rmodel_ws *ws = calloc(1, sizeof *ws);
    const uint32_t n_seqs = n_seq_max < n_ubatch ? n_seq_max : n_ubatch;
    struct ws_view v;
    size_t n = ws_layout(m, n_ubatch, n_seqs, NULL, &v);
    if (!ws || n == 0 || !(ws->buf = malloc(n * sizeof(float))) ||
        !(ws->snap = calloc(n_ubatch, sizeof *ws->snap)) ||
        !(ws->save_k = calloc(n_ubatch, sizeof *ws->save_k)) ||
        !(ws->save_v = calloc(n_ubatch, sizeof *ws->save_v))) {
        if (ws) {
            free(ws->buf);
            free(ws->snap);
            free(ws->save_k);
        }
        free(ws);
        rcore_error_set("out of memory for a workspace of %u tokens", n_ubatch);
        return NULL;
    }
    ws->n_ubatch = n_ubatch;
    ws->n_seqs = n_seqs;
    ws->n_floats = n;
    return ws;
}

void rmodel_ws_free(struct rmodel_ws *ws) {
    if (!ws) return;
    free(ws->buf);
    free(ws->snap);
    free(ws->save_k);
    free(ws->save_v);
    free(ws);
}

/* Gathers the states of every slot of the block: all reads before any write (memory.h). */
static void gather_states(struct rmem *mem, uint32_t il, uint32_t n_seqs, size_t k_elems,
                          size_t v_elems, float *k_out, float *v_out) {
    const uint8_t *k = rmem_k_data(mem, il), *v = rmem_v_data(mem, il);
    const size_t kb = rmem_k_row_bytes(mem, il), vb = rmem_v_row_bytes(mem, il);
    for (uint32_t s = 0; s < n_seqs; s++) {
        float *ks = k_out + s * k_elems, *vs = v_out + s * v_elems;
        if (rmem_s_mask(mem, s) == 0.0f) { /* a new sequence starts from zeros */
            memset(ks, 0, k_elems * sizeof(float));
            memset(vs, 0, v_elems * sizeof(float));
            continue;
        }
        const size_t src = (size_t)rmem_s_copy(mem, s);
        rcore_row_to_f32(rmem_type_k(mem), ks, k + src * kb, k_elems);
        rcore_row_to_f32(rmem_type_v(mem), vs, v + src * vb, v_elems);
    }
}

static void scatter_states(struct rmem *mem, uint32_t il, uint32_t n_seqs, size_t k_elems,
                           size_t v_elems, const float *k_in, const float *v_in) {
    uint8_t *k = rmem_k_data(mem, il), *v = rmem_v_data(mem, il);
    const size_t kb = rmem_k_row_bytes(mem, il), vb = rmem_v_row_bytes(mem, il);
    const size_t head = rmem_head(mem);
    for (uint32_t s = 0; s < n_seqs; s++) {
        rcore_row_from_f32(rmem_type_k(mem), k + (head + s) * kb, k_in + s * k_elems, k_elems);
        rcore_row_from_f32(rmem_type_v(mem), v + (head + s) * vb, v_in + s * v_elems, v_elems);
    }
}

/* True when the compute can run on the memory's rows themselves: f32 states (rows then hold
 * exactly the compute's floats), and every slot either new or already in its own cell
 * (s_copy(i) = head + i: nothing moves, so no read can see another slot's new write). A
 * generation step of sequences that stay in their cells, the common case, is one such;
 * a fork or a move takes the gather / scatter path. */
static bool states_in_place(struct rmem *mem, uint32_t n_seqs) {
    if (rmem_type_k(mem) != RCORE_TYPE_F32 || rmem_type_v(mem) != RCORE_TYPE_F32) return false;
    const uint32_t head = rmem_head(mem);
    for (uint32_t s = 0; s < n_seqs; s++)
        if (rmem_s_mask(mem, s) != 0.0f && rmem_s_copy(mem, s) != (int32_t)(head + s)) return false;
    return true;
}

static void output_norm(const struct rmodel *m, const float *x, float *out) {
    if (m->output_norm_b)
        rops_layernorm(x, m->output_norm, m->output_norm_b, m->n_embd, m->norm_eps, out);
    else
        rops_rmsnorm(x, m->output_norm, m->n_embd, m->norm_eps, out);
}

/* Final norm and output projection for the tokens that asked, OUT_CHUNK rows at a time. */
static void outputs(const struct rmodel *m, const struct rops_exec *ex, const struct ws_view *w,
                    uint32_t n_ubatch, const struct rbatch_ubatch *ub,
                    const struct rmodel_out *out) {
    const int64_t E = m->n_embd, V = m->n_vocab;
    const int cap = n_ubatch < OUT_CHUNK ? (int)n_ubatch : OUT_CHUNK; /* rows the scratch holds */
    int32_t rows[OUT_CHUNK];
    int n = 0;
    for (uint32_t t = 0; t <= ub->n_tokens; t++) {
        if (t < ub->n_tokens && ub->output[t]) {
            output_norm(m, w->x + (int64_t)t * E, w->norm + (int64_t)n * E);
            rows[n++] = out->out_row[ub->idx[t]];
        }
        if (n == cap || (t == ub->n_tokens && n > 0)) {
            if (out->logits) {
                rops_matmul(ex, &m->output, w->norm, n, w->logit);
                for (int i = 0; i < n; i++)
                    memcpy(out->logits + (size_t)rows[i] * (size_t)V, w->logit + (int64_t)i * V,
                           (size_t)V * sizeof(float));
            }
            if (out->embd)
                for (int i = 0; i < n; i++)
                    memcpy(out->embd + (size_t)rows[i] * (size_t)E, w->norm + (int64_t)i * E,
                           (size_t)E * sizeof(float));
            n = 0;
        }
    }
}

bool rmodel_forward(const struct rmodel *m, const struct rops_exec *ex, struct rmodel_ws *ws,
                    struct rmem *mem, const struct rbatch_ubatch *ub, const float *embd_in,
                    const struct rmodel_out *out) {
    const uint32_t n_seqs = ub->n_seqs, nst = ub->n_seq_tokens;
    const int64_t E = m->n_embd;
    if (ub->n_tokens > ws->n_ubatch) {
        rcore_error_set("ubatch of %u tokens, the workspace holds %u", ub->n_tokens, ws->n_ubatch);
        return false;
    }
    if (nst == 0 || n_seqs * nst != ub->n_tokens || rmem_n(mem) != n_seqs || n_seqs > ws->n_seqs) {
        rcore_error_set("%s: the ubatch (%u sequences of %u tokens) does not match the "
                        "placed block of %u",
                        arch_names[m->arch], n_seqs, nst, rmem_n(mem));
        return false;
    }
    struct ws_view w;
    ws_layout(m, ws->n_ubatch, ws->n_seqs, ws->buf, &w);
    struct rops_exec lex = *ex;
    lex.scratch = w.scratch;
    lex.scratch_bytes = (size_t)ws->n_ubatch * (size_t)max_in(m) * sizeof(float);
    ex = &lex;

    for (uint32_t t = 0; t < ub->n_tokens; t++) {
        if (ub->token)
            rops_get_row(&m->tok_embd, ub->token[t], w.x + (int64_t)t * E);
        else
            memcpy(w.x + (int64_t)t * E, embd_in + (size_t)ub->idx[t] * (size_t)E,
                   (size_t)E * sizeof(float));
    }
    if (is_rwkv(m)) rrwkv_embed(m, w.x, ub->n_tokens);

    uint32_t k_row, v_row;
    layer_rows(m, &k_row, &v_row);
    const size_t k_elems = k_row, v_elems = v_row;
    const bool in_place = states_in_place(mem, n_seqs);
    /* the snapshots this ubatch keeps (rollback), filled by the kernels of each layer */
    rmem_snap_plan(mem, ub, ws->snap);
    bool any_snap = false;
    for (uint32_t t = 0; t < ub->n_tokens; t++) any_snap |= ws->snap[t] != NULL;
    struct rmodel_io io = {.x = w.x,
                           .n_seqs = n_seqs,
                           .nst = nst,
                           .save_k = any_snap ? ws->save_k : NULL,
                           .save_v = any_snap ? ws->save_v : NULL,
                           .buf = w.arch};
    for (int32_t il = 0; il < m->n_layer; il++) {
        for (uint32_t t = 0; any_snap && t < ub->n_tokens; t++) {
            ws->save_k[t] = ws->snap[t] ? rmem_snap_k(mem, ws->snap[t], (uint32_t)il) : NULL;
            ws->save_v[t] = ws->snap[t] ? rmem_snap_v(mem, ws->snap[t], (uint32_t)il) : NULL;
        }
        if (in_place) {
            /* the block's own rows are the compute's states: no gather, no scatter */
            io.k = (float *)((uint8_t *)rmem_k_data(mem, (uint32_t)il) +
                             rmem_head(mem) * rmem_k_row_bytes(mem, (uint32_t)il));
            io.v = (float *)((uint8_t *)rmem_v_data(mem, (uint32_t)il) +
                             rmem_head(mem) * rmem_v_row_bytes(mem, (uint32_t)il));
            for (uint32_t s = 0; s < n_seqs; s++)
                if (rmem_s_mask(mem, s) == 0.0f) { /* a new sequence starts from zeros */
                    memset(io.k + s * k_elems, 0, k_elems * sizeof(float));
                    memset(io.v + s * v_elems, 0, v_elems * sizeof(float));
                }
        } else {
            io.k = w.k;
            io.v = w.v;
            gather_states(mem, (uint32_t)il, n_seqs, k_elems, v_elems, w.k, w.v);
        }
        (is_rwkv(m) ? rrwkv_layer : rmamba_layer)(m, ex, il, &io);
        if (!in_place) scatter_states(mem, (uint32_t)il, n_seqs, k_elems, v_elems, w.k, w.v);
    }
    outputs(m, ex, &w, ws->n_ubatch, ub, out);
    return true;
}
