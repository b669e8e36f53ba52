/*
 * RWKV-7 "Goose" (general.architecture = "rwkv7"): its tensors and its TimeMix, docs/rwkv7.md
 * (the numbers in the comments are its equations); the layer's frame is in rwkv.c.
 *
 * TimeMix: six plain token-shift mixes (r, w, k, v, a, g), r k v, a decay in (0.545, 1), the
 * value residual (layer 0's v mixed into later layers'), a LoRA gate, the in-context learning
 * rate a that scales k and, with the normalised key kk, makes the state's update
 * S (diag(w) - kk (kk a)^T) + v k^T (WKV7); then group norm, a bonus, gate and output.
 */
#include "rwkv_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool load_layer(struct rmodel *m, int32_t il, struct rrwkv_layer *L) {
    const struct rrwkv_hparams *hp = &m->rwkv;
    const int64_t E = m->n_embd, F = hp->n_ff;
    char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
    /* layer 0 takes its v as v_first: llama.cpp's files carry v0/v1/v2 there too (copies of
     * a0/a1/a2, "not used"); they are not read, so files without them load as well */
    if (il > 0 && !((L->v0 = rrwkv_vec(m, TNAME("time_mix_v0.weight"))) &&
                    rmodel_matrix(m, TNAME("time_mix_v1.weight"), E, hp->lora_v, &L->v1) &&
                    rmodel_matrix(m, TNAME("time_mix_v2.weight"), hp->lora_v, E, &L->v2)))
        return false;
    return rrwkv_lerp_fused(m, TNAME("time_mix_lerp_fused.weight"), 6, L->lerp) &&
           (L->w0 = rrwkv_vec(m, TNAME("time_mix_w0.weight"))) &&
           rmodel_matrix(m, TNAME("time_mix_w1.weight"), E, hp->lora_w, &L->decay_w1) &&
           rmodel_matrix(m, TNAME("time_mix_w2.weight"), hp->lora_w, E, &L->decay_w2) &&
           (L->a0 = rrwkv_vec(m, TNAME("time_mix_a0.weight"))) &&
           rmodel_matrix(m, TNAME("time_mix_a1.weight"), E, hp->lora_a, &L->a1) &&
           rmodel_matrix(m, TNAME("time_mix_a2.weight"), hp->lora_a, E, &L->a2) &&
           rmodel_matrix(m, TNAME("time_mix_g1.weight"), E, hp->lora_g, &L->g1) &&
           rmodel_matrix(m, TNAME("time_mix_g2.weight"), hp->lora_g, E, &L->g2) &&
           (L->k_k = rrwkv_vec(m, TNAME("time_mix_k_k.weight"))) &&
           (L->k_a = rrwkv_vec(m, TNAME("time_mix_k_a.weight"))) &&
           (L->r_k = rrwkv_vec(m, TNAME("time_mix_r_k.weight"))) &&
           rmodel_matrix(m, TNAME("channel_mix_key.weight"), E, F, &L->cm_k) &&
           rmodel_matrix(m, TNAME("channel_mix_value.weight"), F, E, &L->cm_v);
#undef TNAME
}

/* (12) kk: k * k_k normalised per head; (13) k scaled by the iclr; (14) a = -kk and b = kk *
 * iclr (kept in sx and ia: their old values are spent), for the tokens [t0, t1). */
static void key_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct rrwkv_tm_ctx *c = arg;
    const struct rrwkv_layer *L = c->L;
    const struct rrwkv_ws *w = c->w;
    const int64_t E = c->m->n_embd, hs = c->m->rwkv.head_size;
    for (int64_t t = t0; t < t1; t++) {
        for (int64_t h = 0; h < E; h += hs) {
            float *kk = w->kk + t * E + h;
            const float *k = w->k + t * E + h;
            double ss = 0.0;
            for (int64_t j = 0; j < hs; j++) {
                kk[j] = k[j] * L->k_k[h + j];
                ss += (double)kk[j] * kk[j];
            }
            const double norm = sqrt(ss);
            const float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
            for (int64_t j = 0; j < hs; j++) kk[j] *= inv;
        }
        for (int64_t i = t * E, c2 = 0; c2 < E; i++, c2++) {
            w->k[i] *= 1.0f + (w->ia[i] - 1.0f) * L->k_a[c2];
            w->sx[i] = -w->kk[i];
            w->ia[i] *= w->kk[i];
        }
    }
}

/* (15) the group norm; (16) the bonus v * sum(r k r_k) per head; (17) the gate, for the tokens
 * [t0, t1). */
static void out_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct rrwkv_tm_ctx *c = arg;
    const struct rrwkv_layer *L = c->L;
    const struct rrwkv_ws *w = c->w;
    const int64_t E = c->m->n_embd, hs = c->m->rwkv.head_size;
    rrwkv_group_norm(c->m, c->isa, L, t0, t1, w->y);
    for (int64_t t = t0; t < t1; t++) {
        for (int64_t h = 0; h < E; h += hs) {
            const int64_t o = t * E + h;
            float dot = 0.0f;
            for (int64_t j = 0; j < hs; j++) dot += w->r[o + j] * w->k[o + j] * L->r_k[h + j];
            for (int64_t j = 0; j < hs; j++) w->y[o + j] += w->v[o + j] * dot;
        }
        for (int64_t i = t * E; i < (t + 1) * E; i++) w->y[i] *= w->g[i];
    }
}

/* RWKV-7 TimeMix (docs/rwkv7.md (6)-(17)); the result in w->tmp. */
static void time_mix(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                     const struct rrwkv_layer *L, const struct rmodel_io *io,
                     const struct rrwkv_ws *w) {
    const int64_t E = m->n_embd, hs = m->rwkv.head_size, n = (int64_t)io->n_seqs * io->nst;
    /* (6) the mixes r, w, k, v, a, g */
    rrwkv_mixes(ex, n, E, w->a, w->sx, 6, L->lerp, NULL, w->mix);
    /* (7)-(11) every product of the mixes in one batch (r k v and the LoRA downs of the
       decay, iclr, gate and value residual), then the LoRA ups in another: two hand-offs to
       the threads where one per product made generation wait on them */
    const struct rrwkv_hparams *hp = &m->rwkv;
    float *lw = w->lora, *la = lw + n * hp->lora_w, *lg = la + n * hp->lora_a,
          *lv = lg + n * hp->lora_g;
    const int n_lora = il > 0 ? 4 : 3; /* layer 0 takes its v as v_first: no residual LoRA */
    const struct rops_matjob prod[7] = {
        {&L->wr, w->mix[0], n, w->r}, {&L->wk, w->mix[2], n, w->k},
        {&L->wv, w->mix[3], n, w->v}, {&L->decay_w1, w->mix[1], n, lw},
        {&L->a1, w->mix[4], n, la},   {&L->g1, w->mix[5], n, lg},
        {&L->v1, w->mix[3], n, lv}};
    rops_matmul_batch(ex, prod, 3 + n_lora);
    rops_map(ex, ROPS_MAP_TANH, lw, hp->lora_w, NULL, n, hp->lora_w);
    rops_map(ex, ROPS_MAP_SIGMOID, lg, hp->lora_g, NULL, n, hp->lora_g);
    const struct rops_matjob up[4] = {{&L->decay_w2, lw, n, w->w},
                                      {&L->a2, la, n, w->ia},
                                      {&L->g2, lg, n, w->g},
                                      {&L->v2, lv, n, w->tmp}};
    rops_matmul_batch(ex, up, n_lora);
    /* (8) the decay: exp(-e^-0.5 sigmoid(.)), in (0.545, 1) */
    rops_map(ex, ROPS_MAP_RWKV7_DECAY, w->w, E, L->w0, n, E);
    /* (9) the value residual: layer 0's v, mixed into the later layers' */
    if (il == 0) {
        memcpy(w->vfirst, w->v, (size_t)(n * E) * sizeof(float));
    } else {
        rops_map(ex, ROPS_MAP_SIGMOID, w->tmp, E, L->v0, n, E);
        for (int64_t i = 0; i < n * E; i++) w->v[i] += (w->vfirst[i] - w->v[i]) * w->tmp[i];
    }
    /* (10) the gate (its LoRA's up is all of it); (11) the in-context learning rate */
    rops_map(ex, ROPS_MAP_SIGMOID, w->ia, E, L->a0, n, E);
    const struct rrwkv_tm_ctx c = {m, ex->isa, L, w};
    rmodel_for_tokens(ex, n, 4 * E, key_tokens, &c);
    rops_wkv7(ex, &(struct rops_wkv_args){.state = io->v,
                                          .r = w->r,
                                          .w = w->w,
                                          .k = w->k,
                                          .v = w->v,
                                          .a = w->sx,
                                          .b = w->ia,
                                          .n_seqs = io->n_seqs,
                                          .n_tok = io->nst,
                                          .n_embd = E,
                                          .head_size = hs,
                                          .y = w->y,
                                          .save = io->save_v});
    rmodel_for_tokens(ex, n, 4 * E, out_tokens, &c);
    rops_matmul(ex, &L->wo, w->y, n, w->tmp);
}

static bool load(struct rmodel *m) {
    return rrwkv_load(m, true, load_layer);
}

static void layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io) {
    rrwkv_layer(m, ex, il, io, time_mix);
}

const struct rmodel_arch_ops rmodel_arch_rwkv7 = {
    .name = "rwkv7",
    .load = load,
    .free = rrwkv_free,
    .state_rows = rrwkv_state_rows,
    .ws_floats = rrwkv_ws_floats,
    .max_in = rrwkv_max_in,
    .embed = rrwkv_embed,
    .layer = layer,
};
