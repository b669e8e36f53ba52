/*
 * Mamba-2 (general.architecture = "mamba2"), as llama.cpp's converter writes it:
 * docs/mamba2.md gives the keys, tensors and equations the comments refer to.
 *
 * One layer, for the tokens of one sequence (x is the residual stream):
 *   h = rmsnorm(x) * attn_norm;  [z, xBC, dt] = ssm_in · h
 *   xBC = silu(causal depthwise conv of xBC + bias);  [x, B, C] = xBC
 *   dt = softplus(dt + dt_bias)   (one per head)
 *   per head h (group g of B and C): s = s * exp(dt A_h) + dt x B^T;  y = s C + D_h x
 *   y = rmsnorm_per_group(y * silu(z)) * ssm_norm;  x += ssm_out · y
 * The state per layer: K row = the conv window over xBC (d_conv-1 inputs of d_inner +
 * 2 n_group d_state channels), V row = the SSM state [n_head][head_dim][d_state]. The loading
 * of the keys Mamba-1 shares, the state rows and the workspace are in mamba.c.
 */
#include "mamba_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "../core/core.h"

bool rmamba2_check_hparams(struct rmodel *m) {
    struct rmamba_hparams *hp = &m->mamba;
    hp->mamba2 = true;
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
    if (!m->layers && !(m->layers = calloc((size_t)m->n_layer, sizeof *m->layers))) {
        rcore_error_set("out of memory for %d layers", m->n_layer);
        return false;
    }
    return true;
}

bool rmamba2_load_layer(struct rmodel *m, int32_t il, bool with_norm, bool norm_required) {
    const struct rmamba_hparams *hp = &m->mamba;
    const int64_t E = m->n_embd, Di = hp->d_inner, H = hp->n_head, G = hp->n_group;
    struct rmamba_layer *L = &m->layers[il];
    char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
    const int64_t ne_e[1] = {E}, ne_c[1] = {hp->conv_dim}, ne_conv[2] = {hp->d_conv, hp->conv_dim},
                  ne_h[1] = {H}, ne_h2[2] = {1, H}, ne_norm[2] = {Di / G, G};
    if ((with_norm && !(L->attn_norm = rmodel_small_f32(m, TNAME("attn_norm.weight"), 1, ne_e))) ||
        !rmodel_matrix(m, TNAME("ssm_in.weight"), E, hp->d_in_proj, &L->ssm_in) ||
        !(L->conv_w = rmodel_small_f32(m, TNAME("ssm_conv1d.weight"), 2, ne_conv)) ||
        !(L->conv_w_lag = rmodel_conv_lag(m, L->conv_w, hp->conv_dim, hp->d_conv, name)) ||
        !(L->conv_b = rmodel_small_f32(m, TNAME("ssm_conv1d.bias"), 1, ne_c)) ||
        !(L->dt_b = rmodel_small_f32(m, TNAME("ssm_dt.bias"), 1, ne_h)) ||
        !(L->A = rmodel_small_f32(m, TNAME("ssm_a"), 2, ne_h2)) ||
        !(L->D = rmodel_small_f32(m, TNAME("ssm_d"), 2, ne_h2)) ||
        !rmodel_matrix(m, TNAME("ssm_out.weight"), Di, E, &L->ssm_out))
        return false;
    /* Falcon-H1's files may leave the grouped norm out (llama.cpp loads it as optional) */
    L->norm = NULL;
    if ((norm_required || rgguf_find_tensor(m->gguf, TNAME("ssm_norm.weight"))) &&
        !(L->norm = rmodel_small_f32(m, TNAME("ssm_norm.weight"), 2, ne_norm)))
        return false;
#undef TNAME
    return true;
}

/* Mamba-2's hyper-parameters and tensors (docs/mamba2.md sections 1-2). */
static bool load(struct rmodel *m) {
    if (!rmamba_load_keys(m) || !rmamba2_check_hparams(m)) return false;
    for (int32_t il = 0; il < m->n_layer; il++)
        if (!rmamba2_load_layer(m, il, true, true)) return false;
    return true;
}

/* Tokens per sequence from which a Mamba-2 layer takes the chunked scan. bench_ssd (AVX2, one
 * sequence, us per call plain / chunked, 1 thread; bench/RESULTS.md): 130m shape 8 tokens
 * 177 / 174, 16: 357 / 236, 64: 1422 / 696; a smaller shape (d_inner 512, d_state 64, 8
 * heads) 8: 27 / 29, 16: 54 / 40. The portable chunked path measured 0.6-0.75x the plain
 * one: not taken. */
#define SSD_MIN_TOKENS 16

/* What the per-token steps of a layer read (rmodel_for_tokens). */
struct tokens_ctx {
    const struct rmodel *m;
    enum rops_isa isa;
    const struct rmamba_layer *L;
    const struct rmamba_ws *w;
};

/* (1) the RMSNorm of the tokens [t0, t1) */
static void norm_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct tokens_ctx *c = arg;
    const int64_t E = c->m->n_embd;
    for (int64_t t = t0; t < t1; t++)
        rops_rmsnorm(c->isa, c->w->x + t * E, c->L->attn_norm, E, c->m->mamba.eps, c->w->h + t * E);
}

/* The gate by silu(z) (already in z's columns of xz), then the RMSNorm per group, of the tokens
 * [t0, t1) */
static void gate_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct tokens_ctx *c = arg;
    const struct rmamba_hparams *hp = &c->m->mamba;
    const int64_t Di = hp->d_inner, G = hp->n_group, gs = Di / G, P = hp->d_in_proj;
    for (int64_t t = t0; t < t1; t++) {
        float *y = c->w->y + t * Di;
        const float *z = c->w->xz + t * P;
        for (int64_t i = 0; i < Di; i++) y[i] *= z[i];
        for (int64_t g = 0; c->L->norm && g < G; g++)
            rops_rmsnorm(c->isa, y + g * gs, c->L->norm + g * gs, gs, hp->eps, y + g * gs);
    }
}

void rmamba2_mix(const struct rmodel *m, const struct rops_exec *ex, const struct rmamba_layer *L,
                 const struct rmamba_ws *w, const struct rmodel_io *io) {
    const uint32_t n_seqs = io->n_seqs, nst = io->nst;
    float *const *save_conv = io->save_k, *const *save_ssm = io->save_v;
    const struct rmamba_hparams *hp = &m->mamba;
    const int64_t Di = hp->d_inner, N = hp->d_state, H = hp->n_head, G = hp->n_group,
                  P = hp->d_in_proj, Cd = hp->conv_dim, n = (int64_t)n_seqs * nst;
    const struct tokens_ctx c = {m, ex->isa, L, w};
    rops_matmul(ex, &L->ssm_in, w->h, n, w->xz);
    /* the conv over xBC (columns Di .. Di+Cd of each projected row) */
    rops_ssm_conv(ex, &(struct rops_conv_args){.state = w->conv,
                                               .x = w->xz + Di,
                                               .x_stride = P,
                                               .n_seqs = n_seqs,
                                               .n_tok = nst,
                                               .d_inner = Cd,
                                               .d_conv = hp->d_conv,
                                               .w = L->conv_w,
                                               .w_lag = L->conv_w_lag,
                                               .b = L->conv_b,
                                               .xc = w->xc,
                                               .save = save_conv});
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++) w->dt[t * H + h] = w->xz[t * P + 2 * Di + 2 * G * N + h];
    rops_softplus_bias(ex->isa, w->dt, L->dt_b, n, H);
    /* the chunked (SSD) scan from SSD_MIN_TOKENS tokens per sequence on the vector paths
       (AVX2 and up), where it measured faster; the plain recurrence below that and on the
       portable path */
    const struct rops_scan2_args sa = {.state = w->ssm,
                                       .xbc = w->xc,
                                       .xbc_stride = Cd,
                                       .dt = w->dt,
                                       .A = L->A,
                                       .D = L->D,
                                       .n_seqs = n_seqs,
                                       .n_tok = nst,
                                       .d_inner = Di,
                                       .d_state = N,
                                       .n_head = H,
                                       .n_group = G,
                                       .y = w->y,
                                       .save = save_ssm};
    if (nst >= SSD_MIN_TOKENS && ex->isa != ROPS_ISA_SCALAR)
        rops_ssm_scan2_chunked(ex, &sa);
    else
        rops_ssm_scan2(ex, &sa);
    /* gate, RMSNorm per group and the projection; in the last layer for the outputs' rows only
       (model_impl.h) */
    const int64_t n_rows = rmodel_io_rows(io);
    rmodel_rows_gather(w->y, Di, io->out_tok, n_rows);
    rmodel_rows_gather(w->xz, P, io->out_tok, n_rows);
    if (n_rows > 0) {
        rops_map(ex, ROPS_MAP_SILU, w->xz, P, NULL, n_rows, Di); /* z (spent after this) */
        rmodel_for_tokens(ex, n_rows, 3 * Di, gate_tokens, &c);
        rops_matmul(ex, &L->ssm_out, w->y, n_rows, w->h);
    }
}

static void layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io) {
    struct rmamba_ws w;
    rmamba_ws_carve(m, io, &w);
    const struct rmamba_layer *L = &m->layers[il];
    const struct tokens_ctx c = {m, ex->isa, L, &w};
    const int64_t E = m->n_embd;
    rmodel_for_tokens(ex, (int64_t)io->n_seqs * io->nst, 2 * E, norm_tokens, &c);
    rmamba2_mix(m, ex, L, &w, io);
    rmodel_rows_add(w.x, w.h, E, io->out_tok, rmodel_io_rows(io));
}

const struct rmodel_arch_ops rmodel_arch_mamba2 = {
    .name = "mamba2",
    .load = load,
    .free = rmamba_free,
    .state_rows = rmamba_state_rows,
    .ws_floats = rmamba_ws_floats,
    .max_in = rmamba_max_in,
    .embed = NULL,
    .layer = layer,
};
