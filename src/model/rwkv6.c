/*
 * RWKV-6 "Finch" (general.architecture = "rwkv6"): its tensors and its TimeMix, docs/rwkv6.md
 * (the numbers in the comments are its equations); the layer's frame is in rwkv.c.
 *
 * TimeMix: the data-dependent token shift ("ddlerp": a LoRA corrects each of the five mixes
 * w, k, v, r, g per token), r k v and a silu gate, a per-channel decay w = exp(-exp(.)) from
 * another LoRA, the WKV6 recurrence with its bonus u per head, the group norm, gate, output.
 */
#include "rwkv_impl.h"

#include <stdio.h>
#include <string.h>

#include "../core/core.h"

/* n_mats matrices of n_rows x n_cols stacked in one tensor {n_cols, n_rows, n_mats} (RWKV-6's
 * time_mix_w2), each read in place. */
static bool matrix_stack(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                         int64_t n_mats, struct rops_mat *out) {
    const int64_t ne[3] = {n_cols, n_rows, n_mats};
    const struct rgguf_tensor *t = rgguf_require_tensor(m->gguf, name, 3, ne, RMODEL_MATRIX_TYPES);
    if (!t || !rmodel_matrix_rows(name, t->type, n_cols)) return false;
    const size_t row_bytes = t->nbytes / (size_t)(n_rows * n_mats);
    for (int64_t i = 0; i < n_mats; i++)
        out[i] = (struct rops_mat){(const uint8_t *)t->data + (size_t)(i * n_rows) * row_bytes,
                                   (enum rops_type)t->type,
                                   n_cols,
                                   n_rows,
                                   row_bytes,
                                   NULL};
    return true;
}

static bool load_layer(struct rmodel *m, int32_t il, struct rrwkv_layer *L) {
    const struct rrwkv_hparams *hp = &m->rwkv;
    const int64_t E = m->n_embd, Dm = hp->mix_dim, Dd = hp->decay_dim, F = hp->n_ff;
    char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
    if (rgguf_find_tensor(m->gguf, TNAME("time_mix_lerp_fused.weight"))) {
        if (!rrwkv_lerp_fused(m, name, 5, L->lerp)) return false;
    } else { /* older files: one tensor per mix */
        static const char *const one[5] = {"w", "k", "v", "r", "g"};
        for (int i = 0; i < 5; i++) {
            snprintf(name, sizeof name, "blk.%d.time_mix_lerp_%s.weight", (int)il, one[i]);
            if (!(L->lerp[i] = rrwkv_vec(m, name))) return false;
        }
    }
    const int64_t ne_u[2] = {hp->head_size, hp->n_head};
    return (L->lerp_x = rrwkv_vec(m, TNAME("time_mix_lerp_x.weight"))) &&
           rmodel_matrix(m, TNAME("time_mix_w1.weight"), E, 5 * Dm, &L->mix_w1) &&
           matrix_stack(m, TNAME("time_mix_w2.weight"), Dm, E, 5, L->mix_w2) &&
           (L->decay = rrwkv_vec(m, TNAME("time_mix_decay.weight"))) &&
           rmodel_matrix(m, TNAME("time_mix_decay_w1.weight"), E, Dd, &L->decay_w1) &&
           rmodel_matrix(m, TNAME("time_mix_decay_w2.weight"), Dd, E, &L->decay_w2) &&
           (L->first = rmodel_small_f32(m, TNAME("time_mix_first.weight"), 2, ne_u)) &&
           rmodel_matrix(m, TNAME("time_mix_gate.weight"), E, E, &L->wg) &&
           (L->cm_lerp_r = rrwkv_vec(m, TNAME("channel_mix_lerp_r.weight"))) &&
           rmodel_matrix(m, TNAME("channel_mix_receptance.weight"), E, E, &L->cm_r) &&
           rmodel_matrix(m, TNAME("channel_mix_key.weight"), E, F, &L->cm_k) &&
           rmodel_matrix(m, TNAME("channel_mix_value.weight"), F, E, &L->cm_v);
#undef TNAME
}

/* (15) the group norm and (16) the gate, for the tokens [t0, t1) */
static void out_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct rrwkv_tm_ctx *c = arg;
    const int64_t E = c->m->n_embd;
    rrwkv_group_norm(c->m, c->isa, c->L, t0, t1, c->w->y);
    for (int64_t i = t0 * E; i < t1 * E; i++) c->w->y[i] *= c->w->g[i];
}

/* RWKV-6 TimeMix (docs/rwkv6.md (7)-(16)); the result in w->tmp. */
static void time_mix(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                     const struct rrwkv_layer *L, const struct rmodel_io *io,
                     const struct rrwkv_ws *w) {
    (void)il;
    const int64_t E = m->n_embd, Dm = m->rwkv.mix_dim, n = (int64_t)io->n_seqs * io->nst;
    /* (8)-(11) the data-dependent lerp: five LoRA corrections of the mixes w, k, v, r, g */
    rrwkv_mixes(ex, n, E, w->a, w->sx, 1, &L->lerp_x, NULL, &w->tmp);
    rops_matmul(ex, &L->mix_w1, w->tmp, n, w->lora);
    rops_map(ex, ROPS_MAP_TANH, w->lora, 5 * Dm, NULL, n, 5 * Dm);
    /* the five LoRA ups in one hand-off to the threads, each on its chunk of the down (made
       contiguous unless there is one token) and into its mix, which then mixes in place */
    struct rops_matjob up[5];
    for (int c = 0; c < 5; c++) {
        float *part = w->part + c * n * Dm;
        for (int64_t t = 0; n > 1 && t < n; t++)
            memcpy(part + t * Dm, w->lora + t * 5 * Dm + c * Dm, (size_t)Dm * sizeof(float));
        up[c] = (struct rops_matjob){&L->mix_w2[c], n > 1 ? part : w->lora + c * Dm, n, w->mix[c]};
    }
    rops_matmul_batch(ex, up, 5);
    rrwkv_mixes(ex, n, E, w->a, w->sx, 5, L->lerp, w->mix, w->mix);
    /* (12) r k v g and (13) the decay's LoRA down: one hand-off */
    const struct rops_matjob prod[5] = {{&L->wr, w->mix[3], n, w->r},
                                        {&L->wk, w->mix[1], n, w->k},
                                        {&L->wv, w->mix[2], n, w->v},
                                        {&L->wg, w->mix[4], n, w->g},
                                        {&L->decay_w1, w->mix[0], n, w->lora}};
    rops_matmul_batch(ex, prod, 5);
    rops_map(ex, ROPS_MAP_SILU, w->g, E, NULL, n, E);
    /* (13) the decay, 0 < w < 1 */
    rops_map(ex, ROPS_MAP_TANH, w->lora, L->decay_w1.n_rows, NULL, n, L->decay_w1.n_rows);
    rops_matmul(ex, &L->decay_w2, w->lora, n, w->w);
    rops_map(ex, ROPS_MAP_EXP_NEG_EXP, w->w, E, L->decay, n, E);
    /* (14)-(16) */
    rops_wkv6(ex, &(struct rops_wkv_args){.state = io->v,
                                          .r = w->r,
                                          .k = w->k,
                                          .v = w->v,
                                          .w = w->w,
                                          .u = L->first,
                                          .n_seqs = io->n_seqs,
                                          .n_tok = io->nst,
                                          .n_embd = E,
                                          .head_size = m->rwkv.head_size,
                                          .y = w->y,
                                          .save = io->save_v});
    rmodel_for_tokens(ex, n, 4 * E, out_tokens, &(struct rrwkv_tm_ctx){m, ex->isa, L, w});
    rops_matmul(ex, &L->wo, w->y, n, w->tmp);
}

static bool load(struct rmodel *m) {
    return rrwkv_load(m, false, load_layer);
}

static void layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io) {
    rrwkv_layer(m, ex, il, io, time_mix);
}

const struct rmodel_arch_ops rmodel_arch_rwkv6 = {
    .name = "rwkv6",
    .load = load,
    .free = rrwkv_free,
    .state_rows = rrwkv_state_rows,
    .ws_floats = rrwkv_ws_floats,
    .max_in = rrwkv_max_in,
    .embed = rrwkv_embed,
    .layer = layer,
};
