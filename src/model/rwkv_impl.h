/* Private to the RWKV files of src/model: rwkv.c (hyper-parameters, the layer's frame, token
 * shift, channel mix), rwkv6.c and rwkv7.c (each version's tensors and TimeMix). */
#ifndef RECUR_RWKV_IMPL_H
#define RECUR_RWKV_IMPL_H

#include <math.h>

#include "model_impl.h"

/* the per-head group norm's epsilon: fixed in llama.cpp's graph, not the file's */
#define RRWKV_GROUP_NORM_EPS 64e-5f

/* The layer's workspace, carved for the ubatch's n tokens (rwkv.c). */
struct rrwkv_ws {
    float *a;      /* n x E: LN(x; attn_norm), then LN(x; attn_norm_2) */
    float *sx;     /* n x E: previous token's a minus a */
    float *mix[6]; /* n x E each: the token-shift mixes */
    float *lora;   /* LoRA down outputs: RWKV-7 the four (n x rank each, one after another),
                      RWKV-6 n x 5 D_mix (the ddlerp's) or n x D_decay */
    float *part;   /* 5 x n x D_mix: RWKV-6's ddlerp chunks, each made contiguous */
    float *tmp;    /* n x E */
    float *r, *k, *v, *g, *w, *y;
    float *kk, *ia, *vfirst; /* RWKV-7: normalised key, iclr, layer 0's v */
    float *ff;               /* n x n_ff */
};

/* What the per-token steps of a TimeMix read (rmodel_for_tokens; rwkv6.c, rwkv7.c). */
struct rrwkv_tm_ctx {
    const struct rmodel *m;
    enum rops_isa isa;
    const struct rrwkv_layer *L;
    const struct rrwkv_ws *w;
};

/* A vector of n_embd floats stored as {n_embd}, {n_embd, 1, 1} ... (llama.cpp's loader pads). */
const float *rrwkv_vec(struct rmodel *m, const char *name);
/* The token-shift mixes stacked {n_embd, 1, 1, n}: n f32 vectors of n_embd. */
bool rrwkv_lerp_fused(struct rmodel *m, const char *name, int n, const float **out);

/* Every RWKV LoRA is up(act(down(x))); the model batches the downs and the ups of a step
 * (rops_matmul_batch) and applies act in between (rops_map). */
/* out = a + sx * (mu + m_i) for n tokens of E (mu: per channel; m_i: n x E or NULL) */
void rrwkv_mix(int64_t n, int64_t E, const float *a, const float *sx, const float *mu,
               const float *m_i, float *out);
/* The mixes out[c] = a + sx * (mu[c] + (m_i ? m_i[c] : 0)) for c < n_mix, all n tokens, on ex's
 * threads (rrwkv_for_tokens). */
void rrwkv_mixes(const struct rops_exec *ex, int64_t n, int64_t E, const float *a, const float *sx,
                 int n_mix, const float *const *mu, float *const *m_i, float *const *out);
/* per head a LayerNorm (eps fixed) and the affine of time_mix_ln, in place on the tokens
 * [t0, t1) of y (n x E) */
void rrwkv_group_norm(const struct rmodel *m, enum rops_isa isa, const struct rrwkv_layer *L,
                      int64_t t0, int64_t t1, float *y);

/* What RWKV-6 and RWKV-7 differ in, handed by rwkv6.c / rwkv7.c to the shared frame: a
 * layer's own tensors, and TimeMix of the ubatch into w->tmp. */
typedef bool (*rrwkv_load_layer_fn)(struct rmodel *m, int32_t il, struct rrwkv_layer *L);
typedef void (*rrwkv_time_mix_fn)(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                                  const struct rrwkv_layer *L, const struct rmodel_io *io,
                                  const struct rrwkv_ws *w);

/* rwkv.c: the frame both versions share (the operations of their rmodel_arch entries). */
bool rrwkv_load(struct rmodel *m, bool v7, rrwkv_load_layer_fn load_layer);
void rrwkv_free(struct rmodel *m);
void rrwkv_state_rows(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row);
size_t rrwkv_ws_floats(const struct rmodel *m, uint32_t n_ubatch);
int64_t rrwkv_max_in(const struct rmodel *m);
/* the LayerNorm of (0) */
void rrwkv_embed(const struct rmodel *m, const struct rops_exec *ex, float *x, int64_t n);
void rrwkv_layer(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                 const struct rmodel_io *io, rrwkv_time_mix_fn time_mix);

#endif
