/* Private to src/model: the loaded model and workspace, shared by model.c and the
 * architecture files. */
#ifndef RECUR_MODEL_IMPL_H
#define RECUR_MODEL_IMPL_H

#include "model.h"

#include "../ops/ops.h"

struct rmamba_layer {
    const float *attn_norm;  /* n_embd */
    struct rops_mat ssm_in;  /* n_embd -> 2*d_inner (x, then z) */
    const float *conv_w;     /* d_inner x d_conv */
    const float *conv_b;     /* d_inner */
    struct rops_mat ssm_x;   /* d_inner -> dt_rank + 2*d_state (dt, B, C) */
    struct rops_mat ssm_dt;  /* dt_rank -> d_inner */
    const float *dt_b;       /* d_inner */
    const float *A;          /* d_inner x d_state, already -exp(A_log) */
    const float *D;          /* d_inner */
    struct rops_mat ssm_out; /* d_inner -> n_embd */
    const float *norm;       /* mamba2: d_inner, the grouped RMSNorm's weight */
};

struct rmamba_hparams {
    uint32_t d_conv, d_inner, d_state, dt_rank;
    float eps;
    bool dt_b_c_rms;
    /* mamba2 (docs/mamba2.md): dt_rank is the number of heads; A, D, dt_b are per head */
    bool mamba2;
    uint32_t n_head, n_group, head_dim;
    uint32_t conv_dim; /* channels of the conv: d_inner (mamba) or d_inner + 2 n_group d_state */
    uint32_t
        d_in_proj; /* rows of ssm_in: 2 d_inner (mamba) or 2 d_inner + 2 n_group d_state + n_head */
};

struct rmodel {
    enum rmodel_arch arch;
    struct rgguf *gguf;
    int32_t n_vocab, n_embd, n_layer;
    int32_t bos, eos;
    uint64_t fingerprint;

    struct rops_mat tok_embd;
    struct rops_mat output; /* the same matrix as tok_embd when tied */
    const float *output_norm;

    struct rmamba_hparams mamba;
    struct rmamba_layer *layers;

    /* f32 copies of the small tensors (a few per layer), freed with the model */
    float **small;
    size_t n_small, cap_small;
};

/* Reads a small tensor (any float type) into an f32 copy owned by the model. NULL with the
 * error set when missing or mis-shaped. */
const float *rmodel_small_f32(struct rmodel *m, const char *name, uint32_t n_dims,
                              const int64_t *ne);
/* A weight matrix {n_cols, n_rows} read in place. False with the error set. */
bool rmodel_matrix(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                   struct rops_mat *out);
/* Reads a u32 hyper-parameter "ARCH.suffix". */
bool rmodel_key_u32(const struct rmodel *m, const char *suffix, uint32_t *out);

bool rmamba_load(struct rmodel *m);
size_t rmamba_ws_floats(const struct rmodel *m, uint32_t n_ubatch, uint32_t n_seqs);
void rmamba_state_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row);
bool rmamba_forward(const struct rmodel *m, const struct rops_exec *ex, struct rmodel_ws *ws,
                    struct rmem *mem, const struct rbatch_ubatch *ub, const float *embd_in,
                    const struct rmodel_out *out);

struct rmodel_ws {
    uint32_t n_ubatch;
    uint32_t n_seqs; /* most sequences in a ubatch: min(n_ubatch, n_seq_max) */
    float *buf;      /* one allocation, carved by the architecture */
    size_t n_floats;
    /* per ubatch token: the snapshot to fill (rmem_snap_plan), and its rows in one layer */
    struct rmem_snap **snap;
    float **save_k, **save_v;
};

#endif
