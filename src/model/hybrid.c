/*
 * Hybrid models: Mamba-2 mixers beside attention and feed-forward layers, as llama.cpp's
 * converter writes them (docs/hybrid.md; the float64 references in tests/ref say the same in
 * numpy):
 *
 *   granitehybrid (IBM Granite 4.0-H), per layer i:
 *     h = rmsnorm(x) * attn_norm
 *     x += rs * (Mamba-2 of h       when head_count_kv[i] == 0,
 *                attention of h     otherwise, without RoPE)
 *     x += rs * SwiGLU(rmsnorm(x) * ffn_norm)
 *     with x0 = token_embd[t] * embedding_scale, rs = residual_scale, logits / logit_scale
 *   nemotron_h (NVIDIA Nemotron-H), per layer i, one branch:
 *     x += Mamba-2 of h             when head_count_kv[i] == 0 and feed_forward_length[i] == 0
 *          attention of h           when feed_forward_length[i] == 0
 *          down . relu(up . h)^2    otherwise
 *   falcon-h1 (TII Falcon-H1), per layer:
 *     x += attention(h) + Mamba-2(h)      both on the same h, attention with NeoX RoPE
 *     x += SwiGLU(rmsnorm(x) * ffn_norm)
 *
 * One layer function runs all three from each layer's description (struct rhybrid_layer): the
 * families differ only in which parts a layer has and in their scales, which each loader sets.
 * A layer's recurrent state is its Mamba-2 mixer's (none in attention or MLP layers); its
 * attention rows are in the memory's attention part (rmodel_attn_rows gives their sizes).
 */
#include "hybrid_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- keys ---------------------------------------------------------------------------------- */

/* "ARCH.suffix" per layer: an array of n_layer integers, or one integer for every layer; def
 * for every layer when the key is absent (has_def), else an error. */
static bool key_per_layer(const struct rmodel *m, const char *suffix, bool has_def, uint32_t def,
                          uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->ops->name, suffix);
    const int64_t k = rgguf_find_key(m->gguf, key);
    if (k < 0 && has_def) {
        for (int32_t i = 0; i < m->n_layer; i++) out[i] = def;
        return true;
    }
    if (k >= 0 && rgguf_key_type(m->gguf, k) == RGGUF_ARRAY) {
        enum rgguf_vtype et;
        uint64_t n;
        const void *data;
        if (!rgguf_get_arr(m->gguf, key, &et, &n)) return false;
        if (n != (uint64_t)m->n_layer || (et != RGGUF_UINT32 && et != RGGUF_INT32)) {
            rcore_error_set("key %s: an array of %d 32-bit integers (one per layer) was expected, "
                            "it has %llu of type %s",
                            key, m->n_layer, (unsigned long long)n, rgguf_vtype_name(et));
            return false;
        }
        if (!rgguf_get_arr_data(m->gguf, key, et, &data, &n)) return false;
        for (int32_t i = 0; i < m->n_layer; i++) {
            int32_t v;
            memcpy(&v, (const uint8_t *)data + 4 * (size_t)i, 4);
            if (et == RGGUF_INT32 && v < 0) {
                rcore_error_set("key %s: layer %d has %d", key, (int)i, (int)v);
                return false;
            }
            out[i] = (uint32_t)v;
        }
        return true;
    }
    uint32_t v;
    if (!rgguf_get_u32(m->gguf, key, &v)) return false;
    for (int32_t i = 0; i < m->n_layer; i++) out[i] = v;
    return true;
}

/* "ARCH.suffix" as a float, def when absent. */
static bool key_f32_or(const struct rmodel *m, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->ops->name, suffix);
    if (rgguf_find_key(m->gguf, key) < 0) {
        *out = def;
        return true;
    }
    return rgguf_get_f32(m->gguf, key, out);
}

/* Whether llama.cpp applies RoPE: unless rope.scaling.finetuned is false (Granite 4.0-H and
 * Nemotron-H write false: their attention has no positional encoding). */
static bool key_rope_on(const struct rmodel *m, bool *on) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", m->ops->name);
    bool ft = true;
    if (rgguf_find_key(m->gguf, key) >= 0 && !rgguf_get_bool(m->gguf, key, &ft)) return false;
    *on = ft;
    return true;
}

/* The attention's sizes: heads (one count for every layer), the head size (key_length, which
 * must equal value_length; default n_embd / heads), the scale (attention.scale, or
 * 1/sqrt(head_dim) when absent or 0, as llama.cpp's loaders take it). */
static bool load_attn_hparams(struct rmodel *m, uint32_t *tmp) {
    struct rhybrid_hparams *hp = &m->hyb;
    if (!key_per_layer(m, "attention.head_count", false, 0, tmp)) return false;
    hp->n_head = tmp[0];
    for (int32_t i = 1; i < m->n_layer; i++)
        if (tmp[i] != hp->n_head && tmp[i] != 0) {
            rcore_error_set("%s.attention.head_count differs between layers (%u, %u): not "
                            "supported",
                            m->ops->name, hp->n_head, tmp[i]);
            return false;
        }
    if (hp->n_head < 1 || hp->n_head > 4096) {
        rcore_error_set("%s.attention.head_count %u is out of range", m->ops->name, hp->n_head);
        return false;
    }
    uint32_t hd_k, hd_v;
    if (!rmodel_key_u32_or(m, "attention.key_length", (uint32_t)m->n_embd / hp->n_head, &hd_k) ||
        !rmodel_key_u32_or(m, "attention.value_length", hd_k, &hd_v))
        return false;
    if (hd_k != hd_v || hd_k < 1 || hd_k > ROPS_ATTN_MAX_HEAD_DIM) {
        rcore_error_set("%s: attention key and value heads of %u and %u values: equal sizes of 1 "
                        ".. %d are supported",
                        m->ops->name, hd_k, hd_v, ROPS_ATTN_MAX_HEAD_DIM);
        return false;
    }
    hp->head_dim = hd_k;
    float scale;
    if (!key_f32_or(m, "attention.scale", 0.0f, &scale)) return false;
    hp->attn_scale = scale != 0.0f ? scale : (float)(1.0 / sqrt((double)hd_k));
    return true;
}

/* The Mamba-2 keys of a hybrid file: the ssm keys, eps (already read by the caller). */
static bool load_mamba2_hparams(struct rmodel *m, float eps) {
    struct rmamba_hparams *hp = &m->mamba;
    if (!rmodel_key_u32(m, "ssm.conv_kernel", &hp->d_conv) ||
        !rmodel_key_u32(m, "ssm.inner_size", &hp->d_inner) ||
        !rmodel_key_u32(m, "ssm.state_size", &hp->d_state) ||
        !rmodel_key_u32(m, "ssm.time_step_rank", &hp->dt_rank))
        return false;
    hp->eps = eps;
    m->norm_eps = eps;
    return rmamba2_check_hparams(m);
}

/* The per-layer arrays (head_count_kv, feed_forward_length) and the layers' table. */
static bool alloc_layers(struct rmodel *m, uint32_t **kv, uint32_t **ff) {
    *kv = malloc(sizeof **kv * (size_t)m->n_layer);
    *ff = malloc(sizeof **ff * (size_t)m->n_layer);
    m->hlayers = calloc((size_t)m->n_layer, sizeof *m->hlayers);
    if (!*kv || !*ff || !m->hlayers) {
        rcore_error_set("out of memory for %d layers", m->n_layer);
        return false;
    }
    return true;
}

/* Layer il's attention with n_head_kv heads, its norm read as attn_norm. */
static bool load_attn_layer(struct rmodel *m, int32_t il, uint32_t n_head_kv) {
    struct rhybrid_layer *L = &m->hlayers[il];
    struct rhybrid_hparams *hp = &m->hyb;
    if (n_head_kv > hp->n_head || hp->n_head % n_head_kv) {
        rcore_error_set("layer %d: %u K/V heads do not divide the %u attention heads", (int)il,
                        n_head_kv, hp->n_head);
        return false;
    }
    if (n_head_kv > hp->max_kv_head) hp->max_kv_head = n_head_kv;
    return rattn_load(m, il, n_head_kv, &L->attn);
}

/* Layer il's attn_norm (every hybrid layer starts with it). */
static bool load_attn_norm(struct rmodel *m, int32_t il) {
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_norm.weight", (int)il);
    const int64_t ne[1] = {m->n_embd};
    return (m->hlayers[il].attn_norm = rmodel_small_f32(m, name, 1, ne)) != NULL;
}

static bool load_ffn(struct rmodel *m, int32_t il, const char *norm, bool gated, uint32_t n_ff) {
    if (n_ff > m->hyb.max_ff) m->hyb.max_ff = n_ff;
    return rffn_load(m, il, norm, gated, n_ff, &m->hlayers[il].ffn);
}

static bool load_mamba2_layer(struct rmodel *m, int32_t il, bool norm_required) {
    m->hlayers[il].mamba2 = true;
    m->hyb.any_mamba2 = true;
    return rmamba2_load_layer(m, il, false, norm_required);
}

/* ---- the three families --------------------------------------------------------------------- */

/* What every hybrid loader reads first: the layers' table and per-layer arrays (*kv, *ff, the
 * caller frees them), the RMS norms' epsilon (layer_norm_rms_epsilon, else, with eps_fallback,
 * layer_norm_epsilon: llama.cpp's nemotron_h requires the latter and falls back to it, and the
 * converter writes only it), the Mamba-2 and attention sizes. dense_plain: a family whose dense
 * files have no RoPE (Granite 4.0-H, Nemotron-H write rope.scaling.finetuned false): experts
 * and RoPE are refused. */
static bool load_head(struct rmodel *m, bool eps_fallback, bool dense_plain, uint32_t **kv,
                      uint32_t **ff) {
    char key[96];
    float eps;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", m->ops->name);
    if (eps_fallback && rgguf_find_key(m->gguf, key) < 0)
        snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", m->ops->name);
    if (!alloc_layers(m, kv, ff) || !rgguf_get_f32(m->gguf, key, &eps) ||
        !load_mamba2_hparams(m, eps) || !load_attn_hparams(m, *kv))
        return false;
    if (!dense_plain) return true;
    uint32_t experts = 0;
    bool rope;
    if (!rmodel_key_u32_or(m, "expert_count", 0, &experts) || !key_rope_on(m, &rope)) return false;
    if (experts) {
        rcore_error_set("%s with %u experts (a mixture of experts) is not supported yet: only the "
                        "dense models (expert_count 0) run",
                        m->ops->name, experts);
        return false;
    }
    if (rope) {
        rcore_error_set("%s.rope.scaling.finetuned is true or missing, so llama.cpp would apply "
                        "RoPE to the attention layers: not supported (this family's files write "
                        "false)",
                        m->ops->name);
        return false;
    }
    return true;
}

/*
 * A family's loader: what its files say beyond load_head's keys, and how a layer's parts follow
 * from its per-layer counts. load_family reads head_count_kv (every layer attention when absent
 * and kv_default says so) and feed_forward_length, then every layer's attn_norm and its parts.
 */
struct family {
    bool eps_fallback, dense_plain, kv_default; /* load_head's, and head_count_kv's default */
    bool (*keys)(struct rmodel *m);             /* NULL: none */
    bool (*layer)(struct rmodel *m, int32_t il, uint32_t kv, uint32_t ff);
};

static bool load_family(struct rmodel *m, const struct family *f) {
    uint32_t *kv = NULL, *ff = NULL;
    bool ok = load_head(m, f->eps_fallback, f->dense_plain, &kv, &ff) &&
              key_per_layer(m, "attention.head_count_kv", f->kv_default, m->hyb.n_head, kv) &&
              key_per_layer(m, "feed_forward_length", false, 0, ff) && (!f->keys || f->keys(m));
    for (int32_t il = 0; ok && il < m->n_layer; il++)
        ok = load_attn_norm(m, il) && f->layer(m, il, kv[il], ff[il]);
    free(kv);
    free(ff);
    return ok;
}

/* granitehybrid (Granite 4.0-H, dense): its scales; Mamba-2 where a layer has no K/V heads,
   attention elsewhere, then SwiGLU. */
static bool granite_keys(struct rmodel *m) {
    return key_f32_or(m, "embedding_scale", 0.0f, &m->hyb.embd_scale) &&
           key_f32_or(m, "residual_scale", 0.0f, &m->hyb.residual_scale) &&
           key_f32_or(m, "logit_scale", 0.0f, &m->logit_div);
}

static bool granite_layer(struct rmodel *m, int32_t il, uint32_t kv, uint32_t ff) {
    return (kv == 0 ? load_mamba2_layer(m, il, true) : load_attn_layer(m, il, kv)) &&
           (ff == 0 || load_ffn(m, il, "ffn_norm.weight", true, ff));
}

/* nemotron_h (Nemotron-H, dense), by llama.cpp's rule: Mamba-2 without K/V heads and
   feed-forward, attention without feed-forward, else a ReLU^2 MLP layer. */
static bool nemotron_layer(struct rmodel *m, int32_t il, uint32_t kv, uint32_t ff) {
    return kv == 0 && ff == 0 ? load_mamba2_layer(m, il, true)
           : ff == 0          ? load_attn_layer(m, il, kv)
                              : load_ffn(m, il, NULL, false, ff);
}

/* falcon-h1: NeoX RoPE; attention and Mamba-2 side by side in every layer, then SwiGLU. */
static bool falcon_keys(struct rmodel *m) {
    struct rhybrid_hparams *hp = &m->hyb;
    float factor;
    if (!rmodel_key_u32_or(m, "rope.dimension_count", hp->head_dim, &hp->n_rot) ||
        !key_f32_or(m, "rope.freq_base", 10000.0f, &hp->rope_base) ||
        !key_f32_or(m, "rope.scaling.factor", 1.0f, &factor))
        return false;
    if (hp->n_rot < 2 || hp->n_rot % 2 || hp->n_rot > hp->head_dim || !(hp->rope_base > 0.0f)) {
        rcore_error_set("falcon-h1: rope.dimension_count %u (even, 2 .. the head size %u) or "
                        "rope.freq_base %g is out of range",
                        hp->n_rot, hp->head_dim, (double)hp->rope_base);
        return false;
    }
    if (factor != 1.0f && factor != 0.0f) {
        rcore_error_set("falcon-h1.rope.scaling.factor %g: scaled RoPE is not supported",
                        (double)factor);
        return false;
    }
    if (rgguf_find_tensor(m->gguf, "rope_freqs.weight")) {
        rcore_error_set("tensor rope_freqs.weight: RoPE frequency factors are not supported");
        return false;
    }
    hp->rope = true;
    hp->neox = true;
    hp->rope_scale = 1.0f;
    return true;
}

static bool falcon_layer(struct rmodel *m, int32_t il, uint32_t kv, uint32_t ff) {
    if (kv == 0) {
        rcore_error_set("falcon-h1: layer %d has no K/V heads", (int)il);
        return false;
    }
    return load_attn_layer(m, il, kv) && load_mamba2_layer(m, il, false) &&
           (ff == 0 || load_ffn(m, il, "ffn_norm", true, ff));
}

static bool load_granite(struct rmodel *m) {
    static const struct family f = {false, true, true, granite_keys, granite_layer};
    return load_family(m, &f);
}

static bool load_nemotron(struct rmodel *m) {
    static const struct family f = {true, true, false, NULL, nemotron_layer};
    return load_family(m, &f);
}

static bool load_falcon(struct rmodel *m) {
    static const struct family f = {false, false, false, falcon_keys, falcon_layer};
    return load_family(m, &f);
}

static void hybrid_free(struct rmodel *m) {
    free(m->hlayers);
    m->hlayers = NULL;
    rmamba_free(m);
}

/* ---- state, workspace ---------------------------------------------------------------------- */

static void state_rows(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row) {
    if (m->hlayers[il].mamba2) {
        rmamba_state_rows(m, il, k_row, v_row);
    } else {
        *k_row = 0;
        *v_row = 0;
    }
}

static size_t ws_layout(const struct rmodel *m, uint32_t n, float *base, struct rhybrid_ws *v) {
    const struct rhybrid_hparams *hp = &m->hyb;
    const size_t E = (size_t)m->n_embd, dq = (size_t)hp->n_head * hp->head_dim,
                 dkv = (size_t)hp->max_kv_head * hp->head_dim, ff = hp->max_ff;
    const size_t sizes[] = {n * E, n * E, n * dq, n * dq, n * dkv, n * dkv, n * ff, n * ff};
    float **const slots[] = {&v->hn, &v->out, &v->q, &v->o, &v->k, &v->v, &v->gate, &v->up};
    _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0], "slots");
    return rmodel_ws_carve(base, slots, sizes, sizeof sizes / sizeof sizes[0]);
}

static size_t ws_floats(const struct rmodel *m, uint32_t n_ubatch) {
    struct rhybrid_ws v;
    return ws_layout(m, n_ubatch, NULL, &v) +
           (m->hyb.any_mamba2 ? rmamba_ws_floats(m, n_ubatch) : 0);
}

static int64_t max_in(const struct rmodel *m) {
    const struct rhybrid_hparams *hp = &m->hyb;
    int64_t w = (int64_t)hp->n_head * hp->head_dim;
    if (hp->max_ff > w) w = hp->max_ff;
    if (hp->any_mamba2 && m->mamba.d_inner > w) w = m->mamba.d_inner;
    return w;
}

/* ---- forward -------------------------------------------------------------------------------- */

static void embed(const struct rmodel *m, const struct rops_exec *ex, float *x, int64_t n) {
    (void)ex;
    const float s = m->hyb.embd_scale;
    if (s == 0.0f || s == 1.0f) return;
    for (int64_t i = 0; i < n * m->n_embd; i++) x[i] *= s;
}

struct norm_ctx {
    const struct rmodel *m;
    enum rops_isa isa;
    const float *x, *weight;
    float *out;
};

static void norm_tokens(const void *arg, int64_t t0, int64_t t1) {
    const struct norm_ctx *c = arg;
    const int64_t E = c->m->n_embd;
    for (int64_t t = t0; t < t1; t++)
        rops_rmsnorm(c->isa, c->x + t * E, c->weight, E, c->m->norm_eps, c->out + t * E);
}

/* out = rmsnorm(x) * weight, for n tokens. */
static void norm(const struct rmodel *m, const struct rops_exec *ex, const float *x,
                 const float *weight, int64_t n, float *out) {
    const struct norm_ctx c = {m, ex->isa, x, weight, out};
    rmodel_for_tokens(ex, n, 2 * m->n_embd, norm_tokens, &c);
}

/* x += scale * d over n values (scale 0: not applied, as llama.cpp tests its scales). */
static void add_scaled(float *x, const float *d, int64_t n, float scale) {
    if (scale == 0.0f || scale == 1.0f) {
        for (int64_t i = 0; i < n; i++) x[i] += d[i];
    } else {
        for (int64_t i = 0; i < n; i++) x[i] += d[i] * scale;
    }
}

static void layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io) {
    const struct rhybrid_layer *L = &m->hlayers[il];
    const float rs = m->hyb.residual_scale;
    const int64_t n = (int64_t)io->n_seqs * io->nst, nE = n * m->n_embd;
    struct rhybrid_ws w;
    /* every row of every layer: the outputs' rows alone (io->out_tok) are not worth a second
       path here */
    struct rmodel_io lio = *io;
    lio.out_tok = NULL;
    lio.buf = io->buf + ws_layout(m, (uint32_t)n, io->buf, &w);

    norm(m, ex, io->x, L->attn_norm, n, w.hn);
    if (L->attn.n_head_kv) {
        rattn_forward(m, ex, il, &L->attn, &lio, &w, w.out);
        add_scaled(io->x, w.out, nE, rs);
    }
    if (L->mamba2) {
        struct rmamba_ws mw;
        rmamba_ws_carve(m, &lio, &mw);
        memcpy(mw.h, w.hn, sizeof(float) * (size_t)nE);
        rmamba2_mix(m, ex, &m->layers[il], &mw, &lio);
        add_scaled(io->x, mw.h, nE, rs);
    }
    if (L->ffn.n_ff) {
        if (L->ffn.norm) norm(m, ex, io->x, L->ffn.norm, n, w.hn);
        rffn_forward(ex, &L->ffn, &w, w.hn, n, w.out);
        add_scaled(io->x, w.out, nE, rs);
    }
}

#define HYBRID_OPS(arch_name, loader)                                                              \
    {                                                                                              \
        .name = arch_name, .load = loader, .free = hybrid_free, .state_rows = state_rows,          \
        .ws_floats = ws_floats, .max_in = max_in, .embed = embed, .layer = layer,                  \
    }

const struct rmodel_arch_ops rmodel_arch_granitehybrid = HYBRID_OPS("granitehybrid", load_granite);
const struct rmodel_arch_ops rmodel_arch_nemotron_h = HYBRID_OPS("nemotron_h", load_nemotron);
const struct rmodel_arch_ops rmodel_arch_falcon_h1 = HYBRID_OPS("falcon-h1", load_falcon);
