/* Private to the hybrid files of src/model: attn.c (the attention and feed-forward layers) and
 * hybrid.c (granitehybrid, nemotron_h and falcon-h1, whose Mamba-2 mixers are mamba2.c's). */
#ifndef RECUR_HYBRID_IMPL_H
#define RECUR_HYBRID_IMPL_H

#include "mamba_impl.h"

/* A hybrid layer's part of the workspace, for n tokens (hybrid.c carves it before the Mamba-2
 * mixer's rmamba_ws). */
struct rhybrid_ws {
    float *hn;        /* n x E: rmsnorm(x) * norm, the mixers' input */
    float *out;       /* n x E: a mixer's output */
    float *q, *o;     /* n x n_head * head_dim: queries, then the attention's heads */
    float *k, *v;     /* n x max_kv_head * head_dim */
    float *gate, *up; /* n x max_ff */
};

/* Layer il's attention tensors (blk.il.attn_q/k/v/output.weight) for n_head_kv K/V heads of
 * the model's hyb.head_dim, and the RMS norms of q and k when the file has them
 * (attn_q_norm.weight and attn_k_norm.weight, both or neither: {head_dim}, one weight for every
 * head, or the whole vector, {n_head * head_dim} and {n_head_kv * head_dim}). Refuses biases and
 * a fused attn_qkv, which these families' files do not have and this code does not apply.
 * False with the error set. */
bool rattn_load(struct rmodel *m, int32_t il, uint32_t n_head_kv, struct rattn_layer *A);
/* Layer il's feed-forward tensors: norm_name (NULL: none, the layer's own input), ffn_gate
 * (gated: SwiGLU; else the ReLU^2 MLP), ffn_up, ffn_down, n_ff wide. */
bool rffn_load(struct rmodel *m, int32_t il, const char *norm_name, bool gated, uint32_t n_ff,
               struct rffn_layer *F);

/* out (n x E) = the attention of layer il over the ubatch's n tokens, whose inputs are w->hn:
 * q, k, v projected, q and k normed (A->q_norm) and rotated (hyb.rope), K and V stored in io->kv at
 * each token's row, then each stream's queries over its sequence's rows, and the output projection.
 */
void rattn_forward(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                   const struct rattn_layer *A, const struct rmodel_io *io,
                   const struct rhybrid_ws *w, float *out);
/* out (n x E) = the feed-forward part F of the n inputs h (n x E). */
void rffn_forward(const struct rops_exec *ex, const struct rffn_layer *F,
                  const struct rhybrid_ws *w, const float *h, int64_t n, float *out);

#endif
