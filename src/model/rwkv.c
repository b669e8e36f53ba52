/*
 * RWKV-6 "Finch" and RWKV-7 "Goose" (general.architecture = "rwkv6" / "rwkv7"), as llama.cpp's
 * converter writes them: docs/rwkv6.md and docs/rwkv7.md give the keys, tensors and equations
 * that the numbers in the comments below refer to.
 *
 * One layer (both versions), x the residual stream:
 *   a = LN(x; attn_norm);    x += TimeMix(a, a_prev)        a_prev: the previous token's a
 *   f = LN(x; attn_norm_2);  x += ChannelMix(f, f_prev)
 * and the model: x = LN(token_embd[tok]; token_embd_norm) first, logits = output · LN(x;
 * output_norm) last. TimeMix mixes each token with the previous one (token shift), makes r, k,
 * v, a decay w and a gate g from the mixes, runs the WKV recurrence per head of head_size
 * channels (rops_wkv6 / rops_wkv7), normalises each head and projects back. This file holds
 * what the versions share (hyper-parameters, the frame above, token shift, channel mix);
 * rwkv6.c and rwkv7.c each version's tensors and TimeMix.
 *
 * The state of a sequence, per layer, as llama.cpp keeps it: K row = the token shift, the last
 * token's a then its f (2 n_embd); V row = the WKV state, n_head matrices of head_size^2.
 *
 * A ubatch holds n_seqs sequences of nst tokens, stream-major; the projections run over all
 * its tokens at once, the WKV kernel token after token with the heads shared among threads.
 */
#include "rwkv_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- loading ----------------------------------------------------------------------------- */

/* A vector of n_embd floats stored as {n_embd}, {n_embd, 1, 1} ... (llama.cpp's loader pads). */
const float *rrwkv_vec(struct rmodel *m, const char *name) {
    const int64_t ne[1] = {m->n_embd};
    return rmodel_small_f32(m, name, 1, ne);
}

/* The token-shift mixes stacked {n_embd, 1, 1, n}: n f32 vectors of n_embd. */
bool rrwkv_lerp_fused(struct rmodel *m, const char *name, int n, const float **out) {
    const int64_t ne[4] = {m->n_embd, 1, 1, n};
    const float *all = rmodel_small_f32(m, name, 4, ne);
    if (!all) return false;
    for (int i = 0; i < n; i++) out[i] = all + (size_t)i * (size_t)m->n_embd;
    return true;
}

/* The hyper-parameters (hp->v7 is set by the caller, rrwkv_load). */
static bool hparams(struct rmodel *m) {
    struct rrwkv_hparams *hp = &m->rwkv;
    const char *a = m->ops->name;
    uint32_t shift;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", a);
    hp->eps = 0.0f; /* llama.cpp's default when the key is absent; converters always write it */
    if ((rgguf_find_key(m->gguf, key) >= 0 && !rgguf_get_f32(m->gguf, key, &hp->eps)) ||
        !rmodel_key_u32(m, "wkv.head_size", &hp->head_size) ||
        !rmodel_key_u32(m, "feed_forward_length", &hp->n_ff) ||
        !rmodel_key_u32_or(m, "token_shift_count", 2, &shift))
        return false;
    if (shift != 2) {
        rcore_error_set("%s.token_shift_count is %u; the %s graph needs 2", a, shift, a);
        return false;
    }
    if (hp->head_size < 1 || m->n_embd % (int32_t)hp->head_size || hp->n_ff < 1 ||
        hp->n_ff > (1u << 22) || !(hp->eps >= 0.0f && hp->eps < 1.0f)) {
        rcore_error_set("%s hyper-parameters out of range: embedding_length %d, wkv.head_size %u "
                        "(must divide it), feed_forward_length %u, layer_norm_epsilon %g",
                        a, m->n_embd, hp->head_size, hp->n_ff, (double)hp->eps);
        return false;
    }
    hp->n_head = (uint32_t)m->n_embd / hp->head_size;
    m->norm_eps = hp->eps;
    uint32_t *dims[4];
    const char *names[4];
    int n_dims;
    if (!hp->v7) {
        if (!rmodel_key_u32(m, "time_mix_extra_dim", &hp->mix_dim) ||
            !rmodel_key_u32(m, "time_decay_extra_dim", &hp->decay_dim) ||
            !rmodel_key_u32_or(m, "rescale_every_n_layers", 0, &hp->rescale_every))
            return false;
        dims[0] = &hp->mix_dim, names[0] = "time_mix_extra_dim";
        dims[1] = &hp->decay_dim, names[1] = "time_decay_extra_dim";
        n_dims = 2;
    } else {
        if (!rmodel_key_u32(m, "attention.decay_lora_rank", &hp->lora_w) ||
            !rmodel_key_u32(m, "attention.iclr_lora_rank", &hp->lora_a) ||
            !rmodel_key_u32(m, "attention.value_residual_mix_lora_rank", &hp->lora_v))
            return false;
        /* the gate rank key is optional in llama.cpp; the g1 tensor has it either way */
        const struct rgguf_tensor *g1 = rgguf_find_tensor(m->gguf, "blk.0.time_mix_g1.weight");
        if (!rmodel_key_u32_or(m, "attention.gate_lora_rank", g1 ? (uint32_t)g1->ne[1] : 0,
                               &hp->lora_g))
            return false;
        dims[0] = &hp->lora_w, names[0] = "attention.decay_lora_rank";
        dims[1] = &hp->lora_a, names[1] = "attention.iclr_lora_rank";
        dims[2] = &hp->lora_v, names[2] = "attention.value_residual_mix_lora_rank";
        dims[3] = &hp->lora_g, names[3] = "attention.gate_lora_rank";
        n_dims = 4;
    }
    for (int i = 0; i < n_dims; i++)
        if (*dims[i] < 1 || *dims[i] > (1u << 16)) {
            rcore_error_set("%s.%s is %u (1 to 65536)", a, names[i], *dims[i]);
            return false;
        }
    return true;
}

bool rrwkv_load(struct rmodel *m, bool v7, rrwkv_load_layer_fn load_layer) {
    m->rwkv.v7 = v7;
    if (!hparams(m)) return false;
    const int64_t E = m->n_embd;
    if (m->output.data == m->tok_embd.data) {
        rcore_error_set("tensor output.weight is missing (RWKV output is never tied)");
        return false;
    }
    if (!(m->embd_norm = rrwkv_vec(m, "token_embd_norm.weight")) ||
        !(m->embd_norm_b = rrwkv_vec(m, "token_embd_norm.bias")) ||
        !(m->output_norm_b = rrwkv_vec(m, "output_norm.bias")))
        return false;
    m->rlayers = calloc((size_t)m->n_layer, sizeof *m->rlayers);
    if (!m->rlayers) {
        rcore_error_set("out of memory for %d layers", m->n_layer);
        return false;
    }
    for (int32_t il = 0; il < m->n_layer; il++) {
        struct rrwkv_layer *L = &m->rlayers[il];
        char name[96];
#define TNAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, (int)il), name)
        if (!(L->attn_norm = rrwkv_vec(m, TNAME("attn_norm.weight"))) ||
            !(L->attn_norm_b = rrwkv_vec(m, TNAME("attn_norm.bias"))) ||
            !(L->ffn_norm = rrwkv_vec(m, TNAME("attn_norm_2.weight"))) ||
            !(L->ffn_norm_b = rrwkv_vec(m, TNAME("attn_norm_2.bias"))) ||
            !rmodel_matrix(m, TNAME("time_mix_receptance.weight"), E, E, &L->wr) ||
            !rmodel_matrix(m, TNAME("time_mix_key.weight"), E, E, &L->wk) ||
            !rmodel_matrix(m, TNAME("time_mix_value.weight"), E, E, &L->wv) ||
            !rmodel_matrix(m, TNAME("time_mix_output.weight"), E, E, &L->wo) ||
            !(L->ln_x = rrwkv_vec(m, TNAME("time_mix_ln.weight"))) ||
            !(L->ln_x_b = rrwkv_vec(m, TNAME("time_mix_ln.bias"))) ||
            !(L->cm_lerp_k = rrwkv_vec(m, TNAME("channel_mix_lerp_k.weight"))) ||
            !load_layer(m, il, L))
            return false;
#undef TNAME
    }
    return true;
}

void rrwkv_free(struct rmodel *m) {
    free(m->rlayers);
    m->rlayers = NULL;
}

void rrwkv_state_rows(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row) {
    (void)il; /* every layer alike */
    *k_row = 2 * (uint32_t)m->n_embd;
    *v_row = (uint32_t)m->n_embd * m->rwkv.head_size;
}

/* ---- workspace --------------------------------------------------------------------------- */

static int64_t lora_max(const struct rmodel *m) {
    const struct rrwkv_hparams *hp = &m->rwkv;
    int64_t w = hp->v7 ? 0 : 5 * (int64_t)hp->mix_dim;
    const uint32_t d[5] = {hp->decay_dim, hp->lora_w, hp->lora_a, hp->lora_v, hp->lora_g};
    for (int i = 0; i < 5; i++)
        if (d[i] > w) w = d[i];
    return w;
}

/* Floats per token of w->lora: RWKV-7's four LoRA downs side by side (one batch makes them
 * all), RWKV-6's ddlerp down (five chunks) or its decay's. */
static size_t lora_floats(const struct rmodel *m) {
    const struct rrwkv_hparams *hp = &m->rwkv;
    if (hp->v7) return (size_t)hp->lora_w + hp->lora_a + hp->lora_v + hp->lora_g;
    return (size_t)lora_max(m);
}

static size_t ws_layout(const struct rmodel *m, uint32_t n, float *base, struct rrwkv_ws *v) {
    const size_t E = (size_t)m->n_embd, L = lora_floats(m), F = m->rwkv.n_ff,
                 P = 5 * (size_t)m->rwkv.mix_dim; /* RWKV-6's ddlerp chunks */
    float **const slots[] = {&v->a,      &v->sx,     &v->mix[0], &v->mix[1], &v->mix[2], &v->mix[3],
                             &v->mix[4], &v->mix[5], &v->lora,   &v->part,   &v->tmp,    &v->r,
                             &v->k,      &v->v,      &v->g,      &v->w,      &v->y,      &v->kk,
                             &v->ia,     &v->vfirst, &v->ff};
    enum { N_SLOTS = sizeof slots / sizeof slots[0] };
    size_t sizes[N_SLOTS]; /* n tokens of E floats, but for the LoRA, ddlerp and FFN rows */
    for (size_t i = 0; i < N_SLOTS; i++)
        sizes[i] = slots[i] == &v->lora   ? n * L
                   : slots[i] == &v->part ? n * P
                   : slots[i] == &v->ff   ? n * F
                                          : n * E;
    return rmodel_ws_carve(base, slots, sizes, N_SLOTS);
}

size_t rrwkv_ws_floats(const struct rmodel *m, uint32_t n_ubatch) {
    struct rrwkv_ws v;
    return ws_layout(m, n_ubatch, NULL, &v);
}

int64_t rrwkv_max_in(const struct rmodel *m) {
    const int64_t F = m->rwkv.n_ff, L = lora_max(m);
    return F > L ? F : L;
}

/* ---- forward ----------------------------------------------------------------------------- */

void rrwkv_embed(const struct rmodel *m, const struct rops_exec *ex, float *x, int64_t n) {
    const int64_t E = m->n_embd;
    for (int64_t t = 0; t < n; t++)
        rops_layernorm(ex->isa, x + t * E, m->embd_norm, m->embd_norm_b, E, m->rwkv.eps, x + t * E);
}

/* The normalised inputs of one half of the layer and their token shift: out[t] = LN(x[t]),
 * sx[t] = (previous token's out, or the shift row for a sequence's first token) - out[t].
 * shift: the shift rows of the sequences (stride 2E), at this half's offset. */
struct norm_shift_ctx {
    const struct rmodel *m;
    enum rops_isa isa;
    const struct rmodel_io *io;
    const float *w, *b, *shift;
    float *out, *sx;
};

static void norm_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct norm_shift_ctx *c = arg;
    const int64_t E = c->m->n_embd;
    for (int64_t t = t0; t < t1; t++)
        rops_layernorm(c->isa, c->io->x + t * E, c->w, c->b, E, c->m->rwkv.eps, c->out + t * E);
}

/* after norm_tokens of every token: a token's shift reads its predecessor's out */
static void shift_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct norm_shift_ctx *c = arg;
    const int64_t E = c->m->n_embd, nst = c->io->nst;
    for (int64_t t = t0; t < t1; t++) {
        const float *prev = t % nst == 0 ? c->shift + t / nst * 2 * E : c->out + (t - 1) * E;
        for (int64_t i = 0; i < E; i++) c->sx[t * E + i] = prev[i] - c->out[t * E + i];
    }
}

static void norm_shift(const struct rmodel *m, const struct rops_exec *ex,
                       const struct rmodel_io *io, const float *w, const float *b,
                       const float *shift, float *out, float *sx) {
    const struct norm_shift_ctx c = {m, ex->isa, io, w, b, shift, out, sx};
    const int64_t n = (int64_t)io->n_seqs * io->nst;
    /* LayerNorm's three passes count as three values a channel */
    rmodel_for_tokens(ex, n, 3 * m->n_embd, norm_tokens, &c);
    rmodel_for_tokens(ex, n, m->n_embd, shift_tokens, &c);
}

/* After the half-layer: the shift rows take each sequence's last normalised input, and the
 * snapshots every token's. */
static void shift_store(const struct rmodel *m, const struct rmodel_io *io, const float *in,
                        int64_t half) {
    const int64_t E = m->n_embd;
    for (uint32_t s = 0; s < io->n_seqs; s++) {
        const int64_t last = ((int64_t)s + 1) * io->nst - 1;
        memcpy(io->k + (int64_t)s * 2 * E + half * E, in + last * E, (size_t)E * sizeof(float));
    }
    for (int64_t t = 0; io->save_k && t < (int64_t)io->n_seqs * io->nst; t++)
        if (io->save_k[t]) memcpy(io->save_k[t] + half * E, in + t * E, (size_t)E * sizeof(float));
}

/* x_i = a + sx * mu_i for n tokens (mu: a vector of E, plus m_i (n x E) when not NULL). */
void rrwkv_mix(int64_t n, int64_t E, const float *a, const float *sx, const float *mu,
               const float *m_i, float *out) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < E; c++) {
            const int64_t i = t * E + c;
            out[i] = a[i] + sx[i] * (mu[c] + (m_i ? m_i[i] : 0.0f));
        }
}

struct mixes_ctx {
    int64_t E;
    const float *a, *sx;
    int n_mix;
    const float *const *mu;
    float *const *m_i;
    float *const *out;
};

static void mixes_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct mixes_ctx *c = arg;
    const int64_t o = t0 * c->E;
    for (int i = 0; i < c->n_mix; i++)
        rrwkv_mix(t1 - t0, c->E, c->a + o, c->sx + o, c->mu[i], c->m_i ? c->m_i[i] + o : NULL,
                  c->out[i] + o);
}

void rrwkv_mixes(const struct rops_exec *ex, int64_t n, int64_t E, const float *a, const float *sx,
                 int n_mix, const float *const *mu, float *const *m_i, float *const *out) {
    const struct mixes_ctx c = {E, a, sx, n_mix, mu, m_i, out};
    rmodel_for_tokens(ex, n, n_mix * E, mixes_tokens, &c);
}

/* (15): per head a LayerNorm (eps fixed) and the affine of time_mix_ln. */
void rrwkv_group_norm(const struct rmodel *m, enum rops_isa isa, const struct rrwkv_layer *L,
                      int64_t t0, int64_t t1, float *y) {
    const int64_t E = m->n_embd, hs = m->rwkv.head_size;
    for (int64_t t = t0; t < t1; t++)
        for (int64_t c = 0; c < E; c += hs)
            rops_layernorm(isa, y + t * E + c, L->ln_x + c, L->ln_x_b + c, hs, RRWKV_GROUP_NORM_EPS,
                           y + t * E + c);
}

/* ChannelMix (rwkv6 (17)-(18), rwkv7 (4)): the result in w->tmp. */
static void channel_mix(const struct rmodel *m, const struct rops_exec *ex,
                        const struct rrwkv_layer *L, int64_t n, const struct rrwkv_ws *w) {
    const int64_t E = m->n_embd, F = m->rwkv.n_ff;
    /* RWKV-6's receptance with the key: one hand-off to the threads for both */
    const float *mu[2] = {L->cm_lerp_k, L->cm_lerp_r};
    rrwkv_mixes(ex, n, E, w->a, w->sx, m->rwkv.v7 ? 1 : 2, mu, NULL, w->mix);
    const struct rops_matjob prod[2] = {{&L->cm_k, w->mix[0], n, w->ff},
                                        {&L->cm_r, w->mix[1], n, w->r}};
    rops_matmul_batch(ex, prod, m->rwkv.v7 ? 1 : 2);
    rops_map(ex, ROPS_MAP_RELU_SQ, w->ff, F, NULL, n, F);
    rops_matmul(ex, &L->cm_v, w->ff, n, w->tmp);
    if (m->rwkv.v7) return;
    rops_map(ex, ROPS_MAP_SIGMOID, w->r, E, NULL, n, E);
    for (int64_t i = 0; i < n * E; i++) w->tmp[i] *= w->r[i];
}

void rrwkv_layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                 const struct rmodel_io *io, rrwkv_time_mix_fn time_mix) {
    const struct rrwkv_layer *L = &m->rlayers[il];
    const int64_t E = m->n_embd, n = (int64_t)io->n_seqs * io->nst;
    struct rrwkv_ws w;
    /* carved for this ubatch's tokens: the same at every layer (v_first lives across them) */
    ws_layout(m, (uint32_t)n, io->buf, &w);

    norm_shift(m, ex, io, L->attn_norm, L->attn_norm_b, io->k, w.a, w.sx);
    time_mix(m, ex, il, L, io, &w);
    for (int64_t i = 0; i < n * E; i++) io->x[i] += w.tmp[i];
    shift_store(m, io, w.a, 0);

    norm_shift(m, ex, io, L->ffn_norm, L->ffn_norm_b, io->k + E, w.a, w.sx);
    shift_store(m, io, w.a, 1);
    /* in the last layer, the channel mix of the outputs' rows only (model_impl.h) */
    const int64_t n_rows = rmodel_io_rows(io);
    rmodel_rows_gather(w.a, E, io->out_tok, n_rows);
    rmodel_rows_gather(w.sx, E, io->out_tok, n_rows);
    if (n_rows > 0) channel_mix(m, ex, L, n_rows, &w);
    rmodel_rows_add(io->x, w.tmp, E, io->out_tok, n_rows);

    /* docs/rwkv6.md, step (5): the converter divided these layers' output weights; halving x
       undoes it */
    const uint32_t every = m->rwkv.rescale_every;
    if (!m->rwkv.v7 && every && (uint32_t)(il + 1) % every == 0)
        for (int64_t i = 0; i < n * E; i++) io->x[i] *= 0.5f;
}
