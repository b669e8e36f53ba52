/* A model: the GGUF file, the table of architectures, the fingerprint, and the forward pass
 * that every architecture shares (embedding, layers over the memory's states, outputs). The
 * loaders' helpers are in load.c. */
#include "model_impl.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../io/io.h"

/* The architectures, by enum rmodel_arch; each entry lives in its architecture's file. */
static const struct rmodel_arch_ops *const archs[] = {
    [RMODEL_ARCH_MAMBA] = &rmodel_arch_mamba,
    [RMODEL_ARCH_MAMBA2] = &rmodel_arch_mamba2,
    [RMODEL_ARCH_RWKV6] = &rmodel_arch_rwkv6,
    [RMODEL_ARCH_RWKV7] = &rmodel_arch_rwkv7,
    [RMODEL_ARCH_GRANITEHYBRID] = &rmodel_arch_granitehybrid,
    [RMODEL_ARCH_NEMOTRON_H] = &rmodel_arch_nemotron_h,
    [RMODEL_ARCH_FALCON_H1] = &rmodel_arch_falcon_h1,
};
#define N_ARCHS (sizeof archs / sizeof archs[0])

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

struct rmodel *rmodel_load(const char *path, bool use_mmap, bool repack) {
    struct rgguf *g = rgguf_open(path, use_mmap);
    if (!g) return NULL;
    struct rmodel *m = calloc(1, sizeof *m);
    if (!m) {
        rgguf_close(g);
        rcore_error_set("%s: out of memory", path);
        return NULL;
    }
    m->gguf = g;
    m->rows16_isa = ROPS_ISA_SCALAR;
    if (repack && !rops_isa_from_env(&m->rows16_isa)) {
        /* the contexts refuse such a RECUR_ISA themselves, with this message */
        m->rows16_isa = ROPS_ISA_SCALAR;
        rcore_error_clear();
    }

    const char *arch;
    size_t len;
    if (!rgguf_get_str(g, "general.architecture", &arch, &len)) goto fail;
    size_t a = 0;
    while (a < N_ARCHS && strcmp(arch, archs[a]->name) != 0) a++;
    if (a == N_ARCHS) {
        char names[256] = "";
        for (size_t i = 0; i < N_ARCHS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     archs[i]->name);
        rcore_error_set("architecture %s is not supported (supported: %s)", arch, names);
        goto fail;
    }
    m->arch = (enum rmodel_arch)a;
    m->ops = archs[a];
    if (!rmodel_load_common(m) || !m->ops->load(m)) goto fail;
    m->fingerprint = fingerprint(m);
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const uint32_t type = rgguf_tensor(g, i)->type;
        m->one_order |= type != ROPS_TYPE_F32 && type != ROPS_TYPE_F16 && type != ROPS_TYPE_BF16;
    }
    return m;

fail:
    rcore_error_prefix("%s", path);
    rmodel_free(m);
    return NULL;
}

void rmodel_free(struct rmodel *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_small; i++) rcore_free64(m->small[i]);
    free(m->small);
    for (size_t i = 0; i < m->n_copies; i++) rcore_free_big(m->copies[i]);
    free(m->copies);
    if (m->ops) m->ops->free(m);
    rgguf_close(m->gguf);
    free(m);
}

enum rmodel_arch rmodel_arch(const struct rmodel *m) {
    return m->arch;
}

const char *rmodel_arch_name(const struct rmodel *m) {
    return m->ops->name;
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

uint64_t rmodel_repack_bytes(const struct rmodel *m) {
    return m->copy_bytes;
}

uint64_t rmodel_fingerprint(const struct rmodel *m) {
    return m->fingerprint;
}

void rmodel_state_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row) {
    for (int32_t il = 0; il < m->n_layer; il++) m->ops->state_rows(m, il, &k_row[il], &v_row[il]);
}

bool rmodel_attn_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row) {
    for (int32_t il = 0; il < m->n_layer; il++)
        k_row[il] = v_row[il] = m->hlayers ? m->hlayers[il].attn.n_head_kv * m->hyb.head_dim : 0;
    return rmodel_is_hybrid(m);
}

bool rmodel_is_hybrid(const struct rmodel *m) {
    return m->hlayers && m->hyb.max_kv_head > 0;
}

uint32_t rmodel_attn_head_dim(const struct rmodel *m) {
    return m->hlayers ? m->hyb.head_dim : 0;
}

bool rmodel_attn_rope(const struct rmodel *m) {
    return m->hlayers && m->hyb.rope;
}

/* ---- the forward pass shared by the architectures ---------------------------------------- */

/* Rows of outputs computed at a time: each pass reads the output matrix once, so up to 64
 * sequences share one read; the scratch is 64 x n_vocab floats (13 MB at 50k). */
#define OUT_CHUNK 64

/* model.c's part of the workspace; the architecture's follows (rmodel_io.buf). */
struct ws_view {
    float *x;       /* n x E residual stream */
    float *logit;   /* min(n, OUT_CHUNK) x n_vocab */
    float *norm;    /* min(n, OUT_CHUNK) x E */
    float *scratch; /* n x the widest matmul input: the matmuls' (rops_exec.scratch) */
    float *arch;
};

static int64_t max_in(const struct rmodel *m) {
    const int64_t w = m->ops->max_in(m);
    return w > m->n_embd ? w : m->n_embd;
}

static size_t ws_layout(const struct rmodel *m, uint32_t n, float *base, struct ws_view *v) {
    const size_t E = (size_t)m->n_embd, V = (size_t)m->n_vocab;
    const size_t n_out = n < OUT_CHUNK ? n : OUT_CHUNK;
    const size_t sizes[] = {n * E, n_out * V, n_out * E, n * (size_t)max_in(m),
                            m->ops->ws_floats(m, n)};
    float **const slots[] = {&v->x, &v->logit, &v->norm, &v->scratch, &v->arch};
    _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0], "slots");
    return rmodel_ws_carve(base, slots, sizes, sizeof sizes / sizeof sizes[0]);
}

struct rmodel_ws *rmodel_ws_create(const struct rmodel *m, uint32_t n_ubatch, uint32_t n_seq_max) {
    struct rmodel_ws *ws = calloc(1, sizeof *ws);
    const uint32_t n_seqs = n_seq_max < n_ubatch ? n_seq_max : n_ubatch;
    struct ws_view v;
    size_t n = ws_layout(m, n_ubatch, NULL, &v);
    if (!ws || n == 0 || !(ws->buf = rcore_alloc64(n * sizeof(float), false)) ||
        !(ws->snap = calloc(n_ubatch, sizeof *ws->snap)) ||
        !(ws->save_k = calloc(n_ubatch, sizeof *ws->save_k)) ||
        !(ws->save_v = calloc(n_ubatch, sizeof *ws->save_v)) ||
        !(ws->out_tok = calloc(n_ubatch, sizeof *ws->out_tok))) {
        if (ws) {
            rcore_free64(ws->buf);
            free(ws->snap);
            free(ws->save_k);
            free(ws->save_v);
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
    rcore_free64(ws->buf);
    free(ws->snap);
    free(ws->save_k);
    free(ws->save_v);
    free(ws->out_tok);
    free(ws->pages);
    free(ws);
}

/* Room in ws->pages for the page pointers (K's and V's) of the longest sequence of ub in kv.
 * False with the error set when out of memory. */
static bool pages_room(struct rmodel_ws *ws, const struct rmem_kv *kv,
                       const struct rbatch_ubatch *ub) {
    const uint32_t pr = rmem_kv_page_rows(kv);
    size_t need = 0;
    for (uint32_t s = 0; s < ub->n_seqs; s++) {
        const uint32_t n = rmem_kv_seq_n(kv, ub->seq_id[(size_t)s * ub->n_seq_tokens][0]);
        const size_t p = 2 * (((size_t)n + pr - 1) / pr);
        if (p > need) need = p;
    }
    if (need <= ws->n_pages_cap) return true;
    need += need / 2 + 16;
    const void **p = realloc(ws->pages, need * sizeof *p);
    if (!p) {
        rcore_error_set("out of memory for %zu page pointers", need);
        return false;
    }
    ws->pages = p;
    ws->n_pages_cap = need;
    return true;
}

static void output_norm(const struct rmodel *m, enum rops_isa isa, const float *x, float *out) {
    if (m->output_norm_b)
        rops_layernorm(isa, x, m->output_norm, m->output_norm_b, m->n_embd, m->norm_eps, out);
    else
        rops_rmsnorm(isa, x, m->output_norm, m->n_embd, m->norm_eps, out);
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
            output_norm(m, ex->isa, w->x + (int64_t)t * E, w->norm + (int64_t)n * E);
            rows[n++] = out->out_row[ub->idx[t]];
        }
        if (n == cap || (t == ub->n_tokens && n > 0)) {
            if (out->logits) {
                /* rows that follow each other in out (one token's always) are written there;
                   a copy of a 50k vocabulary's logits took 5 us of each token */
                bool in_place = true;
                for (int i = 1; i < n; i++) in_place &= rows[i] == rows[0] + i;
                float *logit = in_place ? out->logits + (size_t)rows[0] * (size_t)V : w->logit;
                rops_matmul(ex, &m->output, w->norm, n, logit);
                if (m->logit_div != 0.0f && m->logit_div != 1.0f)
                    for (int64_t i = 0; i < (int64_t)n * V; i++) logit[i] /= m->logit_div;
                for (int i = 0; i < n && !in_place; i++)
                    memcpy(out->logits + (size_t)rows[i] * (size_t)V, logit + (int64_t)i * V,
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
    /* the API splits batches by n_ubatch and places each one before this call: a mismatch is
       a bug of the caller, which a debug build stops at (a release build refuses it) */
    assert(ub->n_tokens <= ws->n_ubatch);
    assert(nst > 0 && n_seqs * nst == ub->n_tokens && rmem_n(mem) == n_seqs &&
           n_seqs <= ws->n_seqs);
    if (ub->n_tokens > ws->n_ubatch) {
        rcore_error_set("ubatch of %u tokens, the workspace holds %u", ub->n_tokens, ws->n_ubatch);
        return false;
    }
    if (nst == 0 || n_seqs * nst != ub->n_tokens || rmem_n(mem) != n_seqs || n_seqs > ws->n_seqs) {
        rcore_error_set("%s: the ubatch (%u sequences of %u tokens) does not match the "
                        "placed block of %u",
                        m->ops->name, n_seqs, nst, rmem_n(mem));
        return false;
    }
    struct ws_view w;
    ws_layout(m, ws->n_ubatch, ws->buf, &w);
    struct rops_exec lex = *ex;
    lex.scratch = w.scratch;
    lex.scratch_bytes = (size_t)ws->n_ubatch * (size_t)max_in(m) * sizeof(float);
    lex.one_order = m->one_order;
    ex = &lex;
    struct rmem_kv *kv = rmem_attn(mem);
    if (kv && !pages_room(ws, kv, ub)) return false;

    for (uint32_t t = 0; t < ub->n_tokens; t++) {
        if (ub->token)
            rops_get_row(&m->tok_embd, ub->token[t], w.x + (int64_t)t * E);
        else
            memcpy(w.x + (int64_t)t * E, embd_in + (size_t)ub->idx[t] * (size_t)E,
                   (size_t)E * sizeof(float));
    }
    if (m->ops->embed) m->ops->embed(m, ex, w.x, ub->n_tokens);

    /* the snapshots this ubatch keeps (rollback), filled by the kernels of each layer */
    rmem_snap_plan(mem, ub, ws->snap);
    bool any_snap = false;
    for (uint32_t t = 0; t < ub->n_tokens; t++) any_snap |= ws->snap[t] != NULL;

    struct rmodel_io io = {.x = w.x,
                           .n_seqs = n_seqs,
                           .nst = nst,
                           .save_k = any_snap ? ws->save_k : NULL,
                           .save_v = any_snap ? ws->save_v : NULL,
                           .buf = w.arch,
                           .kv = kv,
                           .ub = ub,
                           .pages = ws->pages};
    int32_t n_out = 0;
    for (uint32_t t = 0; t < ub->n_tokens; t++)
        if (ub->output[t]) ws->out_tok[n_out++] = (int32_t)t;
    for (int32_t il = 0; il < m->n_layer; il++) {
        if (il == m->n_layer - 1 && (uint32_t)n_out < ub->n_tokens) {
            io.out_tok = ws->out_tok;
            io.n_out = n_out;
        }
        for (uint32_t t = 0; any_snap && t < ub->n_tokens; t++) {
            ws->save_k[t] = ws->snap[t] ? rmem_snap_k(mem, ws->snap[t], (uint32_t)il) : NULL;
            ws->save_v[t] = ws->snap[t] ? rmem_snap_v(mem, ws->snap[t], (uint32_t)il) : NULL;
        }
        struct rmem_layer st;
        if (!rmem_layer_begin(mem, (uint32_t)il, &st)) return false;
        io.k = st.k;
        io.v = st.v;
        m->ops->layer(m, ex, il, &io);
        rmem_layer_end(mem, (uint32_t)il);
    }
    outputs(m, ex, &w, ws->n_ubatch, ub, out);
    return true;
}

/* ---- threads over a ubatch's tokens -------------------------------------------------------- */

struct tokens_task {
    rmodel_tokens_fn fn;
    const void *ctx;
    int64_t n;
};

static void tokens_thread(void *arg, int ith, int nth) {
    const struct tokens_task *t = arg;
    t->fn(t->ctx, t->n * ith / nth, t->n * (ith + 1) / nth);
}

void rmodel_for_tokens(const struct rops_exec *ex, int64_t n, int64_t per_token,
                       rmodel_tokens_fn fn, const void *ctx) {
    /* 16k values a thread: microseconds of work against a hand-off's ~1 us */
    int64_t nth = n * per_token / 16384;
    if (nth > ex->n_threads) nth = ex->n_threads;
    if (nth > n) nth = n;
    if (nth <= 1 || !ex->pool) {
        fn(ctx, 0, n);
        return;
    }
    struct tokens_task t = {fn, ctx, n};
    rpool_run(ex->pool, tokens_thread, &t, (int)nth);
}
