/*
 * The attention and feed-forward layers of hybrid models (docs/hybrid.md), as llama.cpp builds
 * them for granitehybrid, nemotron_h and falcon-h1:
 *
 *   attention of the normed input h (n_embd), for a token at position p of its sequence:
 *     q = wq . h, k = wk . h, v = wv . h          heads of head_dim values
 *     q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm
 *                                                 (when the file has attn_q_norm and attn_k_norm:
 *                                                 each head on its own with one weight of head_dim
 *                                                 (Qwen3's form), or the whole vector (OLMo2's))
 *     q, k = rope(q, p), rope(k, p)               (when the model has RoPE)
 *     the cache appends k and v to the sequence's rows
 *     o_h = sum_j softmax_j(scale q_h . k_j) v_j  over the sequence's rows up to p, query head
 *                                                 h reading K/V head h / (n_head / n_head_kv)
 *     out = wo . o
 *   feed-forward: out = down . (silu(gate . h) * (up . h))    (SwiGLU)
 *             or  out = down . relu(up . h)^2                 (Nemotron-H's MLP)
 *
 * The K and V rows live in the memory's attention part (memory.h), in its encoding (f32, f16
 * or q8_0); the attention kernel (rops_attention) reads them through the sequence's pages.
 */
#include "hybrid_impl.h"

#include <stdio.h>
#include <string.h>

#include "../core/core.h"

/* Layer il's norm of q or k (what: "q" or "k", the other "k" or "q"), over heads of hd values
 * or the whole vector of `whole` values: *norm and *span set (NULL, 0 when the file has
 * neither norm). The two come as a pair, as llama.cpp's loaders take them. */
static bool load_qk_norm(struct rmodel *m, int32_t il, const char *what, const char *other,
                         int64_t hd, int64_t whole, const float **norm, uint32_t *span) {
    char name[96], pair[96];
    snprintf(name, sizeof name, "blk.%d.attn_%s_norm.weight", (int)il, what);
    snprintf(pair, sizeof pair, "blk.%d.attn_%s_norm.weight", (int)il, other);
    const struct rgguf_tensor *t = rgguf_find_tensor(m->gguf, name);
    const bool paired = rgguf_find_tensor(m->gguf, pair) != NULL;
    *norm = NULL;
    *span = 0;
    if (!t && !paired) return true;
    if (!t || !paired) {
        rcore_error_set("tensor %s without %s: the Q and K norms come as a pair", t ? name : pair,
                        t ? pair : name);
        return false;
    }
    /* its first dimension says the form; rmodel_small_f32 checks the rest are 1 */
    const int64_t n = t->ne[0];
    if (n != hd && n != whole) {
        char shape[96];
        size_t k = 0;
        for (uint32_t d = 0; d < t->n_dims && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "",
                                  (long long)t->ne[d]);
        rcore_error_set("tensor %s has shape {%s}: a %s norm is {%lld} (each head) or {%lld} "
                        "(the whole vector)",
                        name, shape, what, (long long)hd, (long long)whole);
        return false;
    }
    const int64_t ne[1] = {n};
    *span = (uint32_t)n;
    return (*norm = rmodel_small_f32(m, name, 1, ne)) != NULL;
}

bool rattn_load(struct rmodel *m, int32_t il, uint32_t n_head_kv, struct rattn_layer *A) {
    const struct rhybrid_hparams *hp = &m->hyb;
    const int64_t E = m->n_embd, hd = hp->head_dim, dq = (int64_t)hp->n_head * hd,
                  dkv = (int64_t)n_head_kv * hd;
    char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
    /* what these families' files do not have, and this code does not apply: refused rather
       than left out of the sums */
    static const char *const unused[] = {"attn_qkv.weight", "attn_q.bias", "attn_k.bias",
                                         "attn_v.bias", "attn_output.bias"};
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", (int)il, unused[i]);
        if (rgguf_find_tensor(m->gguf, name)) {
            rcore_error_set("tensor %s: attention with biases or a fused QKV is not supported",
                            name);
            return false;
        }
    }
    A->n_head_kv = n_head_kv;
    if (!rmodel_matrix(m, TNAME("attn_q.weight"), E, dq, &A->wq) ||
        !rmodel_matrix(m, TNAME("attn_k.weight"), E, dkv, &A->wk) ||
        !rmodel_matrix(m, TNAME("attn_v.weight"), E, dkv, &A->wv) ||
        !rmodel_matrix(m, TNAME("attn_output.weight"), dq, E, &A->wo) ||
        !load_qk_norm(m, il, "q", "k", hd, dq, &A->q_norm, &A->q_norm_n) ||
        !load_qk_norm(m, il, "k", "q", hd, dkv, &A->k_norm, &A->k_norm_n))
        return false;
#undef TNAME
    return true;
}

bool rffn_load(struct rmodel *m, int32_t il, const char *norm_name, bool gated, uint32_t n_ff,
               struct rffn_layer *F) {
    const int64_t E = m->n_embd, ff = n_ff;
    char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
    static const char *const unused[] = {"ffn_up.bias", "ffn_down.bias", "ffn_gate.bias",
                                         "ffn_gate_inp.weight"};
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        snprintf(name, sizeof name, "blk.%d.%s", (int)il, unused[i]);
        if (rgguf_find_tensor(m->gguf, name)) {
            rcore_error_set("tensor %s: feed-forward biases and experts are not supported", name);
            return false;
        }
    }
    F->n_ff = n_ff;
    F->norm = NULL;
    memset(&F->gate, 0, sizeof F->gate);
    const int64_t ne_e[1] = {E};
    if (norm_name) {
        snprintf(name, sizeof name, "blk.%d.%s", (int)il, norm_name);
        if (!(F->norm = rmodel_small_f32(m, name, 1, ne_e))) return false;
    }
    if ((gated && !rmodel_matrix(m, TNAME("ffn_gate.weight"), E, ff, &F->gate)) ||
        !rmodel_matrix(m, TNAME("ffn_up.weight"), E, ff, &F->up) ||
        !rmodel_matrix(m, TNAME("ffn_down.weight"), ff, E, &F->down))
        return false;
#undef TNAME
    return true;
}

/* Writes n values of src as a row of the cache's type (f32, f16, q8_0) at dst. */
static void store_row(uint32_t type, const float *src, int64_t n, void *dst) {
    if (type == ROPS_TYPE_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
    } else if (type == ROPS_TYPE_F16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = rcore_f32_to_f16(src[i]);
    } else {
        /* q8_0: the loader checked that rows are whole blocks */
        (void)rops_quantize_row(ROPS_TYPE_Q8_0, src, n, dst);
    }
}

/* The model's rotary embedding on n rows (stride floats apart) of n_head heads. */
static void rope(const struct rops_exec *ex, const struct rhybrid_hparams *hp, float *x, int64_t n,
                 int64_t n_head, int64_t stride, const int32_t *pos) {
    rops_rope(ex, &(struct rops_rope_args){.x = x,
                                           .n_tok = n,
                                           .n_head = n_head,
                                           .head_dim = hp->head_dim,
                                           .stride = stride,
                                           .pos = pos,
                                           .n_rot = hp->n_rot,
                                           .freq_base = hp->rope_base,
                                           .freq_scale = hp->rope_scale,
                                           .mode = hp->neox ? ROPS_ROPE_NEOX : ROPS_ROPE_NORMAL});
}

void rmodel_attn_rotate(void *user, uint32_t il, uint32_t type, void *rows, uint32_t n,
                        const int32_t *delta) {
    const struct rmodel *m = user;
    const struct rhybrid_hparams *hp = &m->hyb;
    const int64_t hd = hp->head_dim, H = m->hlayers[il].attn.n_head_kv;
    const size_t head_bytes = rops_row_bytes((enum rops_type)type, hd), row_bytes = H * head_bytes;
    const struct rops_exec serial = {0}; /* a few rows: no threads */
    float x[ROPS_ATTN_MAX_HEAD_DIM];
    for (uint32_t r = 0; r < n; r++) {
        if (delta[r] == 0) continue;
        for (int64_t h = 0; h < H; h++) {
            uint8_t *head = (uint8_t *)rows + r * row_bytes + h * head_bytes;
            const struct rops_mat row = {head, (enum rops_type)type, hd, 1, head_bytes, NULL};
            rops_get_row(&row, 0, x);
            rope(&serial, hp, x, 1, 1, hd, &delta[r]);
            store_row(type, x, hd, head);
        }
    }
}

struct qk_norm_ctx {
    enum rops_isa isa;
    float eps;
    const struct rattn_layer *A;
    float *q, *k;
    int64_t dq, dkv; /* each token's q and k values */
};

/* rmsnorm of each span of q_norm_n values of q (and k_norm_n of k) times its norm weight, in
 * place, for tokens t0..t1. */
static void qk_norm_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct qk_norm_ctx *c = arg;
    const struct rattn_layer *A = c->A;
    for (int64_t t = t0; t < t1; t++) {
        float *q = c->q + t * c->dq, *k = c->k + t * c->dkv;
        for (int64_t i = 0; i < c->dq; i += A->q_norm_n)
            rops_rmsnorm(c->isa, q + i, A->q_norm, A->q_norm_n, c->eps, q + i);
        for (int64_t i = 0; i < c->dkv; i += A->k_norm_n)
            rops_rmsnorm(c->isa, k + i, A->k_norm, A->k_norm_n, c->eps, k + i);
    }
}

void rattn_forward(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                   const struct rattn_layer *A, const struct rmodel_io *io,
                   const struct rhybrid_ws *w, float *out) {
    const struct rhybrid_hparams *hp = &m->hyb;
    const struct rbatch_ubatch *ub = io->ub;
    const uint32_t nst = io->nst;
    const int64_t n = (int64_t)io->n_seqs * nst, hd = hp->head_dim, H = hp->n_head,
                  Hkv = A->n_head_kv, dq = H * hd, dkv = Hkv * hd;
    const struct rops_matjob jobs[3] = {
        {&A->wq, w->hn, n, w->q}, {&A->wk, w->hn, n, w->k}, {&A->wv, w->hn, n, w->v}};
    rops_matmul_batch(ex, jobs, 3);
    if (A->q_norm) {
        /* before RoPE, as llama.cpp's graphs apply them; per token, so every batch shape
           (prompts, many sequences, one decoded token) takes this one place */
        const struct qk_norm_ctx c = {ex->isa, m->norm_eps, A, w->q, w->k, dq, dkv};
        rmodel_for_tokens(ex, n, 2 * (dq + dkv), qk_norm_tokens, &c);
    }
    if (hp->rope) {
        rope(ex, hp, w->q, n, H, dq, ub->pos);
        rope(ex, hp, w->k, n, Hkv, dkv, ub->pos);
    }

    /* this ubatch's rows: placed by the memory (rmem_kv_place) before the forward pass */
    struct rmem_kv *kv = io->kv;
    uint8_t *kd = rmem_kv_k_data(kv, (uint32_t)il), *vd = rmem_kv_v_data(kv, (uint32_t)il);
    const size_t kb = rmem_kv_k_row_bytes(kv, (uint32_t)il),
                 vb = rmem_kv_v_row_bytes(kv, (uint32_t)il);
    const uint32_t tk = rmem_kv_type_k(kv), tv = rmem_kv_type_v(kv);
    for (int64_t t = 0; t < n; t++) {
        const int64_t r = rmem_kv_token_row(kv, (uint32_t)t);
        store_row(tk, w->k + t * dkv, dkv, kd + (size_t)r * kb);
        store_row(tv, w->v + t * dkv, dkv, vd + (size_t)r * vb);
    }

    /* each stream's queries over its sequence's rows (a stream's sequences share them) */
    const uint32_t pr = rmem_kv_page_rows(kv);
    for (uint32_t s = 0; s < io->n_seqs; s++) {
        const int32_t seq = ub->seq_id[(size_t)s * nst][0];
        const uint32_t n_kv = rmem_kv_seq_n(kv, seq);
        const int32_t *pages = rmem_kv_seq_pages(kv, seq);
        const uint32_t n_pages = (n_kv + pr - 1) / pr;
        for (uint32_t p = 0; p < n_pages; p++) {
            io->pages[p] = kd + (size_t)pages[p] * pr * kb;
            io->pages[n_pages + p] = vd + (size_t)pages[p] * pr * vb;
        }
        const int64_t q0 = (int64_t)s * nst;
        rops_attention(ex, &(struct rops_attn_args){.n_q = nst,
                                                    .n_head = H,
                                                    .n_head_kv = Hkv,
                                                    .head_dim = hd,
                                                    .q = w->q + q0 * dq,
                                                    .q_stride = dq,
                                                    .q_pos = ub->pos + q0,
                                                    .q_seq = NULL,
                                                    .n_kv = n_kv,
                                                    .k_pages = io->pages,
                                                    .v_pages = io->pages + n_pages,
                                                    .page_rows = pr,
                                                    .type_k = (enum rops_type)tk,
                                                    .type_v = (enum rops_type)tv,
                                                    .kv_pos = rmem_kv_seq_positions(kv, seq),
                                                    .kv_seq = NULL,
                                                    .scale = hp->attn_scale,
                                                    .out = w->o + q0 * dq,
                                                    .out_stride = dq});
    }
    rops_matmul(ex, &A->wo, w->o, n, out);
}

void rffn_forward(const struct rops_exec *ex, const struct rffn_layer *F,
                  const struct rhybrid_ws *w, const float *h, int64_t n, float *out) {
    const int64_t ff = F->n_ff;
    if (F->gate.n_rows) {
        const struct rops_matjob jobs[2] = {{&F->gate, h, n, w->gate}, {&F->up, h, n, w->up}};
        rops_matmul_batch(ex, jobs, 2);
        rops_map(ex, ROPS_MAP_SILU, w->gate, ff, NULL, n, ff);
        for (int64_t i = 0; i < n * ff; i++) w->gate[i] *= w->up[i];
    } else {
        rops_matmul(ex, &F->up, h, n, w->gate);
        rops_map(ex, ROPS_MAP_RELU_SQ, w->gate, ff, NULL, n, ff);
    }
    rops_matmul(ex, &F->down, w->gate, n, out);
}
