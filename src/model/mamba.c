/*
 * Mamba-1 (general.architecture = "mamba"), as llama.cpp's converter writes it (SPEC §4).
 *
 * One layer, for the tokens of one sequence (x is the residual stream):
 *   h = rmsnorm(x) * attn_norm;  [xi, z] = ssm_in · h
 *   xc = silu(causal depthwise conv of xi over [conv_state; xi] + bias)
 *   [dtr, B, C] = ssm_x · xc     (RMS-normalised each, for Falcon-Mamba)
 *   dt = softplus(ssm_dt · dtr + dt_bias)
 *   s = s * exp(dt * A) + B * xc * dt;   y = (s · C + D * xc) * silu(z)
 *   x += ssm_out · y
 * and the output: logits = output · (rmsnorm(x) * output_norm).
 *
 * The state of a sequence, per layer: K row = conv state, d_inner channels of d_conv-1 inputs
 * (channel-major, oldest first); V row = ssm state, d_inner channels of d_state values. This is
 * llama.cpp's layout ({d_conv-1, d_inner} and {d_state, d_inner} per sequence).
 *
 * A ubatch holds n_seqs sequences of n_seq_tokens tokens each, stream-major. The projections
 * run over all its tokens at once (one pass over each weight for all sequences); the conv and
 * the scan run token after token, all sequences in one call, channels shared among threads.
 */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- loading ----------------------------------------------------------------------------- */

/* Mamba-2's hyper-parameters and tensors (docs/mamba2.md sections 1-2). */
static bool mamba2_load(struct rmodel *m) {
    struct rmamba_hparams *hp = &m->mamba;
    hp->n_head = hp->dt_rank;
    if (!rmodel_key_u32(m, "ssm.group_count", &hp->n_group)) return false;
    if (hp->d_conv < 1 || hp->d_conv > 64 || hp->d_inner < 1 || hp->d_inner > (1u << 20) ||
        hp->d_state < 1 || hp->d_state > 4096 || hp->n_head < 1 || hp->d_inner % hp->n_head ||
        hp->n_group < 1 || hp->n_head % hp->n_group || !(hp->eps > 0.0f && hp->eps < 1.0f)) {
        rcore_error_set("mamba2 hyper-parameters out of range: d_conv %u, d_inner %u, d_state %u, "
                        "heads %u, groups %u, eps %g",
                        hp->d_conv, hp->d_inner, hp->d_state, hp->n_head, hp->n_group,
                        (double)hp->eps);
        return false;
    }
    hp->head_dim = hp->d_inner / hp->n_head;
    hp->conv_dim = hp->d_inner + 2 * hp->n_group * hp->d_state;
    hp->d_in_proj = 2 * hp->d_inner + 2 * hp->n_group * hp->d_state + hp->n_head;
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rcore_error_set("out of memory for %d layers", m->n_layer);
        return false;
    }
    const int64_t E = m->n_embd, Di = hp->d_inner, H = hp->n_head, G = hp->n_group;
    for (int32_t il = 0; il < m->n_layer; il++) {
        struct rmamba_layer *L = &m->layers[il];
        char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
        const int64_t ne_e[1] = {E}, ne_c[1] = {hp->conv_dim},
                      ne_conv[2] = {hp->d_conv, hp->conv_dim}, ne_h[1] = {H}, ne_h2[2] = {1, H},
                      ne_norm[2] = {Di / G, G};
        if (!(L->attn_norm = rmodel_small_f32(m, TNAME("attn_norm.weight"), 1, ne_e)) ||
            !rmodel_matrix(m, TNAME("ssm_in.weight"), E, hp->d_in_proj, &L->ssm_in) ||
            !(L->conv_w = rmodel_small_f32(m, TNAME("ssm_conv1d.weight"), 2, ne_conv)) ||
            !(L->conv_b = rmodel_small_f32(m, TNAME("ssm_conv1d.bias"), 1, ne_c)) ||
            !(L->dt_b = rmodel_small_f32(m, TNAME("ssm_dt.bias"), 1, ne_h)) ||
            !(L->A = rmodel_small_f32(m, TNAME("ssm_a"), 2, ne_h2)) ||
            !(L->D = rmodel_small_f32(m, TNAME("ssm_d"), 2, ne_h2)) ||
            !(L->norm = rmodel_small_f32(m, TNAME("ssm_norm.weight"), 2, ne_norm)) ||
            !rmodel_matrix(m, TNAME("ssm_out.weight"), Di, E, &L->ssm_out))
            return false;
#undef TNAME
    }
    return true;
}

bool rmamba_load(struct rmodel *m) {
    struct rmamba_hparams *hp = &m->mamba;
    if (!rmodel_key_u32(m, "ssm.conv_kernel", &hp->d_conv) ||
        !rmodel_key_u32(m, "ssm.inner_size", &hp->d_inner) ||
        !rmodel_key_u32(m, "ssm.state_size", &hp->d_state) ||
        !rmodel_key_u32(m, "ssm.time_step_rank", &hp->dt_rank) ||
        !rgguf_get_f32(m->gguf,
                       m->arch == RMODEL_ARCH_MAMBA2 ? "mamba2.attention.layer_norm_rms_epsilon"
                                                     : "mamba.attention.layer_norm_rms_epsilon",
                       &hp->eps))
        return false;
    hp->mamba2 = m->arch == RMODEL_ARCH_MAMBA2;
    if (hp->mamba2) return mamba2_load(m);
    if (hp->d_conv < 1 || hp->d_conv > 64 || hp->d_inner < 1 || hp->d_inner > (1u << 20) ||
        hp->d_state < 1 || hp->d_state > 4096 || hp->dt_rank < 1 || hp->dt_rank > hp->d_inner ||
        !(hp->eps > 0.0f && hp->eps < 1.0f)) {
        rcore_error_set("mamba hyper-parameters out of range: d_conv %u, d_inner %u, d_state %u, "
                        "dt_rank %u, eps %g",
                        hp->d_conv, hp->d_inner, hp->d_state, hp->dt_rank, (double)hp->eps);
        return false;
    }
    bool flag = false;
    if (rgguf_find_key(m->gguf, "mamba.ssm.dt_b_c_rms") >= 0) {
        if (!rgguf_get_bool(m->gguf, "mamba.ssm.dt_b_c_rms", &flag)) return false;
    }
    hp->dt_b_c_rms = flag;
    hp->conv_dim = hp->d_inner;
    hp->d_in_proj = 2 * hp->d_inner;

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rcore_error_set("out of memory for %d layers", m->n_layer);
        return false;
    }
    const int64_t E = m->n_embd, Di = hp->d_inner, N = hp->d_state, R = hp->dt_rank, K = hp->d_conv;
    for (int32_t il = 0; il < m->n_layer; il++) {
        struct rmamba_layer *L = &m->layers[il];
        char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
        const int64_t ne_e[1] = {E}, ne_di[1] = {Di}, ne_conv[2] = {K, Di}, ne_a[2] = {N, Di};
        if (!(L->attn_norm = rmodel_small_f32(m, TNAME("attn_norm.weight"), 1, ne_e)) ||
            !rmodel_matrix(m, TNAME("ssm_in.weight"), E, 2 * Di, &L->ssm_in) ||
            !(L->conv_w = rmodel_small_f32(m, TNAME("ssm_conv1d.weight"), 2, ne_conv)) ||
            !(L->conv_b = rmodel_small_f32(m, TNAME("ssm_conv1d.bias"), 1, ne_di)) ||
            !rmodel_matrix(m, TNAME("ssm_x.weight"), Di, R + 2 * N, &L->ssm_x) ||
            !rmodel_matrix(m, TNAME("ssm_dt.weight"), R, Di, &L->ssm_dt) ||
            !(L->dt_b = rmodel_small_f32(m, TNAME("ssm_dt.bias"), 1, ne_di)) ||
            !(L->A = rmodel_small_f32(m, TNAME("ssm_a"), 2, ne_a)) ||
            !(L->D = rmodel_small_f32(m, TNAME("ssm_d"), 1, ne_di)) ||
            !rmodel_matrix(m, TNAME("ssm_out.weight"), Di, E, &L->ssm_out))
            return false;
#undef TNAME
    }
    return true;
}

void rmamba_state_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row) {
    for (int32_t il = 0; il < m->n_layer; il++) {
        k_row[il] = (m->mamba.d_conv - 1) * m->mamba.conv_dim;
        v_row[il] = m->mamba.d_state * m->mamba.d_inner;
    }
}

/* ---- workspace --------------------------------------------------------------------------- */

/* Rows of outputs computed at a time: each pass reads the output matrix once, so up to 64
 * sequences share one read; the scratch is 64 x n_vocab floats (13 MB at 50k). */
#define OUT_CHUNK 64

struct ws_view {
    float *x;       /* n x E residual stream */
    float *h;       /* n x E normalised input, then the layer's output */
    float *xz;      /* n x d_in_proj (mamba: x then z; mamba2: z, xBC, dt) */
    float *xc;      /* n x conv_dim conv output */
    float *xdb;     /* n x (R + 2N) */
    float *dtr;     /* n x R, dt input made contiguous */
    float *dt;      /* n x Di */
    float *y;       /* n x Di */
    float *conv;    /* n_seqs x (K-1)conv_dim gathered conv states */
    float *ssm;     /* n_seqs x Di N gathered ssm states */
    float *logit;   /* min(n, OUT_CHUNK) x n_vocab */
    float *norm;    /* min(n, OUT_CHUNK) x E */
    float *scratch; /* n x max(E, Di): the matmuls' (rops_exec.scratch) */
};

static size_t ws_layout(const struct rmodel *m, uint32_t n, uint32_t n_seqs, float *base,
                        struct ws_view *v) {
    const size_t E = (size_t)m->n_embd, Di = m->mamba.d_inner, N = m->mamba.d_state,
                 R = m->mamba.mamba2 ? 0 : m->mamba.dt_rank, K = m->mamba.d_conv,
                 V = (size_t)m->n_vocab, P = m->mamba.d_in_proj, Cd = m->mamba.conv_dim;
    const size_t n_out = n < OUT_CHUNK ? n : OUT_CHUNK;
    const size_t sizes[] = {n * E,
                            n * E,
                            n * P,
                            n * Cd,
                            m->mamba.mamba2 ? 0 : n * (R + 2 * N),
                            n * R,
                            n * Di,
                            n * Di,
                            n_seqs * (K - 1) * Cd,
                            n_seqs * Di * N,
                            n_out * V,
                            n_out * E,
                            n * (E > Di ? E : Di)};
    float **slots[] = {&v->x, &v->h,    &v->xz,  &v->xc,    &v->xdb,  &v->dtr,    &v->dt,
                       &v->y, &v->conv, &v->ssm, &v->logit, &v->norm, &v->scratch};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (base) *slots[i] = base + off;
        off += sizes[i] + 16; /* keeps rows apart: 64-byte gaps */
    }
    return off;
}

size_t rmamba_ws_floats(const struct rmodel *m, uint32_t n_ubatch, uint32_t n_seqs) {
    struct ws_view v;
    return ws_layout(m, n_ubatch, n_seqs, NULL, &v);
}

/* ---- forward ----------------------------------------------------------------------------- */

/* Gathers the states of every slot of the block: all reads before any write (memory.h). */
static void gather_states(struct rmem *mem, uint32_t il, uint32_t n_seqs, size_t k_elems,
                          size_t v_elems, float *conv, float *ssm) {
    const uint8_t *k = rmem_k_data(mem, il), *v = rmem_v_data(mem, il);
    const size_t kb = rmem_k_row_bytes(mem, il), vb = rmem_v_row_bytes(mem, il);
    for (uint32_t s = 0; s < n_seqs; s++) {
        float *cs = conv + s * k_elems, *ss = ssm + s * v_elems;
        if (rmem_s_mask(mem, s) == 0.0f) { /* a new sequence starts from zeros */
            memset(cs, 0, k_elems * sizeof(float));
            memset(ss, 0, v_elems * sizeof(float));
            continue;
        }
        const size_t src = (size_t)rmem_s_copy(mem, s);
        rcore_row_to_f32(rmem_type_k(mem), cs, k + src * kb, k_elems);
        rcore_row_to_f32(rmem_type_v(mem), ss, v + src * vb, v_elems);
    }
}

static void scatter_states(struct rmem *mem, uint32_t il, uint32_t n_seqs, size_t k_elems,
                           size_t v_elems, const float *conv, const float *ssm) {
    uint8_t *k = rmem_k_data(mem, il), *v = rmem_v_data(mem, il);
    const size_t kb = rmem_k_row_bytes(mem, il), vb = rmem_v_row_bytes(mem, il);
    const size_t head = rmem_head(mem);
    for (uint32_t s = 0; s < n_seqs; s++) {
        rcore_row_from_f32(rmem_type_k(mem), k + (head + s) * kb, conv + s * k_elems, k_elems);
        rcore_row_from_f32(rmem_type_v(mem), v + (head + s) * vb, ssm + s * v_elems, v_elems);
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

/* One layer over the block; save_conv / save_ssm (NULL: none) per ubatch token: where to
 * copy the state after that token (snapshots for rollback). */
static void layer_forward(const struct rmodel *m, const struct rops_exec *ex,
                          const struct rmamba_layer *L, const struct ws_view *w, uint32_t n_seqs,
                          uint32_t nst, float *const *save_conv, float *const *save_ssm) {
    const struct rmamba_hparams *hp = &m->mamba;
    const int64_t E = m->n_embd, Di = hp->d_inner, N = hp->d_state, R = hp->dt_rank, K = hp->d_conv,
                  W = R + 2 * N, n = (int64_t)n_seqs * nst;

    for (int64_t t = 0; t < n; t++)
        rops_rmsnorm(w->x + t * E, L->attn_norm, E, hp->eps, w->h + t * E);
    rops_matmul(ex, &L->ssm_in, w->h, n, w->xz);
    rops_ssm_conv(ex, w->conv, w->xz, 2 * Di, n_seqs, nst, Di, K, L->conv_w, L->conv_b, w->xc,
                  save_conv);
    rops_matmul(ex, &L->ssm_x, w->xc, n, w->xdb);
    for (int64_t t = 0; t < n; t++) {
        float *dbc = w->xdb + t * W;
        if (hp->dt_b_c_rms) {
            rops_rmsnorm(dbc, NULL, R, hp->eps, dbc);
            rops_rmsnorm(dbc + R, NULL, N, hp->eps, dbc + R);
            rops_rmsnorm(dbc + R + N, NULL, N, hp->eps, dbc + R + N);
        }
        memcpy(w->dtr + t * R, dbc, (size_t)R * sizeof(float));
    }
    rops_matmul(ex, &L->ssm_dt, w->dtr, n, w->dt);
    rops_softplus_bias(ex->isa, w->dt, L->dt_b, n, Di);

    rops_ssm_scan(ex, w->ssm, w->xc, w->dt, L->A, w->xdb + R, w->xdb + R + N, W, L->D, w->xz + Di,
                  2 * Di, n_seqs, nst, Di, N, w->y, save_ssm);
    rops_matmul(ex, &L->ssm_out, w->y, n, w->h);
    for (int64_t i = 0; i < n * E; i++) w->x[i] += w->h[i];
}

/* Tokens per sequence from which a Mamba-2 layer takes the chunked scan. bench_ssd (AVX2, one
 * sequence, us per call plain / chunked, 1 thread; bench/RESULTS.md): 130m shape 8 tokens
 * 177 / 174, 16: 357 / 236, 64: 1422 / 696; a smaller shape (d_inner 512, d_state 64, 8
 * heads) 8: 27 / 29, 16: 54 / 40. The portable chunked path measured 0.6-0.75x the plain
 * one: not taken. */
#define SSD_MIN_TOKENS 16

/* One Mamba-2 layer (docs/mamba2.md (1)-(12)), on the shapes of layer_forward. */
static void layer_forward2(const struct rmodel *m, const struct rops_exec *ex,
                           const struct rmamba_layer *L, const struct ws_view *w, uint32_t n_seqs,
                           uint32_t nst, float *const *save_conv, float *const *save_ssm) {
    const struct rmamba_hparams *hp = &m->mamba;
    const int64_t E = m->n_embd, Di = hp->d_inner, N = hp->d_state, H = hp->n_head, G = hp->n_group,
                  P = hp->d_in_proj, Cd = hp->conv_dim, n = (int64_t)n_seqs * nst;
    for (int64_t t = 0; t < n; t++)
        rops_rmsnorm(w->x + t * E, L->attn_norm, E, hp->eps, w->h + t * E);
    rops_matmul(ex, &L->ssm_in, w->h, n, w->xz);
    /* the conv over xBC (columns Di .. Di+Cd of each projected row) */
    rops_ssm_conv(ex, w->conv, w->xz + Di, P, n_seqs, nst, Cd, hp->d_conv, L->conv_w, L->conv_b,
                  w->xc, save_conv);
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) w->dt[t * H + h] = w->xz[t * P + 2 * Di + 2 * G * N + h];
    rops_softplus_bias(ex->isa, w->dt, L->dt_b, n, H);
    /* the chunked (SSD) scan from SSD_MIN_TOKENS tokens per sequence on AVX2, where it
       measured faster; the plain recurrence below that and on the portable path */
    if (nst >= SSD_MIN_TOKENS && ex->isa == ROPS_ISA_AVX2)
        rops_ssm_scan2_chunked(ex, w->ssm, w->xc, Cd, w->dt, L->A, L->D, n_seqs, nst, Di, N, H, G,
                               w->y, save_ssm);
    else
        rops_ssm_scan2(ex, w->ssm, w->xc, Cd, w->dt, L->A, L->D, n_seqs, nst, Di, N, H, G, w->y,
                       save_ssm);
    /* gate, then RMSNorm per group */
    const int64_t gs = Di / G;
    for (int64_t t = 0; t < n; t++) {
        float *y = w->y + t * Di;
        const float *z = w->xz + t * P;
        for (int64_t c = 0; c < Di; c++) y[c] *= rops_silu(z[c]);
        for (int64_t g = 0; g < G; g++)
            rops_rmsnorm(y + g * gs, L->norm + g * gs, gs, hp->eps, y + g * gs);
    }
    rops_matmul(ex, &L->ssm_out, w->y, n, w->h);
    for (int64_t i = 0; i < n * E; i++) w->x[i] += w->h[i];
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
            rops_rmsnorm(w->x + (int64_t)t * E, m->output_norm, E, m->mamba.eps,
                         w->norm + (int64_t)n * E);
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

bool rmamba_forward(const struct rmodel *m, const struct rops_exec *ex, struct rmodel_ws *ws,
                    struct rmem *mem, const struct rbatch_ubatch *ub, const float *embd_in,
                    const struct rmodel_out *out) {
    const struct rmamba_hparams *hp = &m->mamba;
    const uint32_t n_seqs = ub->n_seqs, nst = ub->n_seq_tokens;
    const int64_t E = m->n_embd;
    if (nst == 0 || n_seqs * nst != ub->n_tokens || rmem_n(mem) != n_seqs || n_seqs > ws->n_seqs) {
        rcore_error_set("mamba: the ubatch (%u sequences of %u tokens) does not match the "
                        "placed block of %u",
                        n_seqs, nst, rmem_n(mem));
        return false;
    }
    struct ws_view w;
    ws_layout(m, ws->n_ubatch, ws->n_seqs, ws->buf, &w);
    struct rops_exec lex = *ex;
    lex.scratch = w.scratch;
    lex.scratch_bytes =
        (size_t)ws->n_ubatch * (size_t)(E > hp->d_inner ? E : hp->d_inner) * sizeof(float);
    ex = &lex;

    for (uint32_t t = 0; t < ub->n_tokens; t++) {
        if (ub->token)
            rops_get_row(&m->tok_embd, ub->token[t], w.x + (int64_t)t * E);
        else
            memcpy(w.x + (int64_t)t * E, embd_in + (size_t)ub->idx[t] * (size_t)E,
                   (size_t)E * sizeof(float));
    }

    const size_t k_elems = (size_t)(hp->d_conv - 1) * hp->conv_dim;
    const size_t v_elems = (size_t)hp->d_state * hp->d_inner;
    const bool in_place = states_in_place(mem, n_seqs);
    /* the snapshots this ubatch keeps (rollback), filled by the conv and scan of each layer */
    rmem_snap_plan(mem, ub, ws->snap);
    bool any_snap = false;
    for (uint32_t t = 0; t < ub->n_tokens; t++) any_snap |= ws->snap[t] != NULL;
    float *const *save_k = any_snap ? ws->save_k : NULL, *const *save_v =
                                                             any_snap ? ws->save_v : NULL;
    for (int32_t il = 0; il < m->n_layer; il++) {
        for (uint32_t t = 0; any_snap && t < ub->n_tokens; t++) {
            ws->save_k[t] = ws->snap[t] ? rmem_snap_k(mem, ws->snap[t], (uint32_t)il) : NULL;
            ws->save_v[t] = ws->snap[t] ? rmem_snap_v(mem, ws->snap[t], (uint32_t)il) : NULL;
        }
        if (in_place) {
            /* the block's own rows are the compute's states: no gather, no scatter */
            struct ws_view lw = w;
            lw.conv = (float *)((uint8_t *)rmem_k_data(mem, (uint32_t)il) +
                                rmem_head(mem) * rmem_k_row_bytes(mem, (uint32_t)il));
            lw.ssm = (float *)((uint8_t *)rmem_v_data(mem, (uint32_t)il) +
                               rmem_head(mem) * rmem_v_row_bytes(mem, (uint32_t)il));
            for (uint32_t s = 0; s < n_seqs; s++)
                if (rmem_s_mask(mem, s) == 0.0f) { /* a new sequence starts from zeros */
                    memset(lw.conv + s * k_elems, 0, k_elems * sizeof(float));
                    memset(lw.ssm + s * v_elems, 0, v_elems * sizeof(float));
                }
            (hp->mamba2 ? layer_forward2 : layer_forward)(m, ex, &m->layers[il], &lw, n_seqs, nst,
                                                          save_k, save_v);
            continue;
        }
        gather_states(mem, (uint32_t)il, n_seqs, k_elems, v_elems, w.conv, w.ssm);
        (hp->mamba2 ? layer_forward2 : layer_forward)(m, ex, &m->layers[il], &w, n_seqs, nst,
                                                      save_k, save_v);
        scatter_states(mem, (uint32_t)il, n_seqs, k_elems, v_elems, w.conv, w.ssm);
    }
    outputs(m, ex, &w, ws->n_ubatch, ub, out);
    return true;
}
