/*
 * Mamba-1 (general.architecture = "mamba"), as llama.cpp's converter writes it.
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
 * Mamba-2 (mamba2.c) shares this file's key reading, state rows and workspace.
 */
#include "mamba_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- loading ----------------------------------------------------------------------------- */

bool rmamba_load_keys(struct rmodel *m) {
    struct rmamba_hparams *hp = &m->mamba;
    char eps_key[96];
    snprintf(eps_key, sizeof eps_key, "%s.attention.layer_norm_rms_epsilon", m->ops->name);
    if (!rmodel_key_u32(m, "ssm.conv_kernel", &hp->d_conv) ||
        !rmodel_key_u32(m, "ssm.inner_size", &hp->d_inner) ||
        !rmodel_key_u32(m, "ssm.state_size", &hp->d_state) ||
        !rmodel_key_u32(m, "ssm.time_step_rank", &hp->dt_rank) ||
        !rgguf_get_f32(m->gguf, eps_key, &hp->eps))
        return false;
    m->norm_eps = hp->eps;
    return true;
}

/* Mamba-1's hyper-parameters and tensors. */
static bool load(struct rmodel *m) {
    struct rmamba_hparams *hp = &m->mamba;
    hp->mamba2 = false;
    if (!rmamba_load_keys(m)) return false;
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
            !(L->conv_w_lag = rmodel_conv_lag(m, L->conv_w, Di, K, name)) ||
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

void rmamba_free(struct rmodel *m) {
    free(m->layers);
    m->layers = NULL;
}

void rmamba_state_rows(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row) {
    (void)il; /* every layer alike */
    *k_row = (m->mamba.d_conv - 1) * m->mamba.conv_dim;
    *v_row = m->mamba.d_state * m->mamba.d_inner;
}

/* ---- workspace --------------------------------------------------------------------------- */

static size_t ws_layout(const struct rmodel *m, uint32_t n, float *base, struct rmamba_ws *v) {
    const size_t E = (size_t)m->n_embd, Di = m->mamba.d_inner, N = m->mamba.d_state,
                 R = m->mamba.mamba2 ? 0 : m->mamba.dt_rank, P = m->mamba.d_in_proj,
                 Cd = m->mamba.conv_dim;
    const size_t sizes[] = {n * E, n * P,  n * Cd, m->mamba.mamba2 ? 0 : n * (R + 2 * N),
                            n * R, n * Di, n * Di};
    float **const slots[] = {&v->h, &v->xz, &v->xc, &v->xdb, &v->dtr, &v->dt, &v->y};
    _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0], "slots");
    return rmodel_ws_carve(base, slots, sizes, sizeof sizes / sizeof sizes[0]);
}

size_t rmamba_ws_floats(const struct rmodel *m, uint32_t n_ubatch) {
    struct rmamba_ws v;
    return ws_layout(m, n_ubatch, NULL, &v);
}

int64_t rmamba_max_in(const struct rmodel *m) {
    return m->mamba.d_inner;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* One layer over the block; save_conv / save_ssm (NULL: none) per ubatch token: where to
 * copy the state after that token (snapshots for rollback). */
static void layer_forward(const struct rmodel *m, const struct rops_exec *ex,
                          const struct rmamba_layer *L, const struct rmamba_ws *w,
                          const struct rmodel_io *io) {
    const uint32_t n_seqs = io->n_seqs, nst = io->nst;
    float *const *save_conv = io->save_k, *const *save_ssm = io->save_v;
    const struct rmamba_hparams *hp = &m->mamba;
    const int64_t E = m->n_embd, Di = hp->d_inner, N = hp->d_state, R = hp->dt_rank, K = hp->d_conv,
                  W = R + 2 * N, n = (int64_t)n_seqs * nst;

    for (int64_t t = 0; t < n; t++)
        rops_rmsnorm(ex->isa, w->x + t * E, L->attn_norm, E, hp->eps, w->h + t * E);
    rops_matmul(ex, &L->ssm_in, w->h, n, w->xz);
    rops_ssm_conv(ex, &(struct rops_conv_args){.state = w->conv,
                                               .x = w->xz,
                                               .x_stride = 2 * Di,
                                               .n_seqs = n_seqs,
                                               .n_tok = nst,
                                               .d_inner = Di,
                                               .d_conv = K,
                                               .w = L->conv_w,
                                               .w_lag = L->conv_w_lag,
                                               .b = L->conv_b,
                                               .xc = w->xc,
                                               .save = save_conv});
    rops_matmul(ex, &L->ssm_x, w->xc, n, w->xdb);
    for (int64_t t = 0; t < n; t++) {
        float *dbc = w->xdb + t * W;
        if (hp->dt_b_c_rms) {
            rops_rmsnorm(ex->isa, dbc, NULL, R, hp->eps, dbc);
            rops_rmsnorm(ex->isa, dbc + R, NULL, N, hp->eps, dbc + R);
            rops_rmsnorm(ex->isa, dbc + R + N, NULL, N, hp->eps, dbc + R + N);
        }
        memcpy(w->dtr + t * R, dbc, (size_t)R * sizeof(float));
    }
    /* dt = softplus(ssm_dt · dtr + dt_bias), made in the scan's hand-off for one token */
    const struct rops_dt_proj dt = {&L->ssm_dt, w->dtr, L->dt_b, w->dt};
    rops_ssm_scan(ex, &(struct rops_scan_args){.state = w->ssm,
                                               .x = w->xc,
                                               .dt = w->dt,
                                               .A = L->A,
                                               .B = w->xdb + R,
                                               .C = w->xdb + R + N,
                                               .bc_stride = W,
                                               .D = L->D,
                                               .z = w->xz + Di,
                                               .z_stride = 2 * Di,
                                               .n_seqs = n_seqs,
                                               .n_tok = nst,
                                               .d_inner = Di,
                                               .d_state = N,
                                               .y = w->y,
                                               .save = save_ssm,
                                               .dt_proj = &dt});
    /* in the last layer, the outputs' rows only (model_impl.h) */
    const int64_t n_rows = rmodel_io_rows(io);
    rmodel_rows_gather(w->y, Di, io->out_tok, n_rows);
    if (n_rows > 0) rops_matmul(ex, &L->ssm_out, w->y, n_rows, w->h);
    rmodel_rows_add(w->x, w->h, E, io->out_tok, n_rows);
}

void rmamba_ws_carve(const struct rmodel *m, const struct rmodel_io *io, struct rmamba_ws *w) {
    /* carved for this ubatch's tokens: the same at every layer, within the n_ubatch sizing */
    ws_layout(m, io->nst * io->n_seqs, io->buf, w);
    w->x = io->x;
    w->conv = io->k;
    w->ssm = io->v;
}

static void layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io) {
    struct rmamba_ws w;
    rmamba_ws_carve(m, io, &w);
    layer_forward(m, ex, &m->layers[il], &w, io);
}

const struct rmodel_arch_ops rmodel_arch_mamba = {
    .name = "mamba",
    .load = load,
    .free = rmamba_free,
    .state_rows = rmamba_state_rows,
    .ws_floats = rmamba_ws_floats,
    .max_in = rmamba_max_in,
    .embed = NULL,
    .layer = layer,
};
