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
    const float *conv_w_lag; /* the same lag-major (d_conv x d_inner), for the vector kernels */
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

/* RWKV-6 / RWKV-7 (docs/rwkv6.md, docs/rwkv7.md). Vectors are f32 copies; matrices in place. */
struct rrwkv_layer {
    const float *attn_norm, *attn_norm_b, *ffn_norm, *ffn_norm_b; /* n_embd each */
    /* time mix */
    const float *lerp_x;                /* rwkv6: mu_x */
    const float *lerp[6];               /* rwkv6: w k v r g; rwkv7: r w k v a g */
    struct rops_mat mix_w1;             /* rwkv6: n_embd -> 5 D_mix */
    struct rops_mat mix_w2[5];          /* rwkv6: D_mix -> n_embd each */
    const float *decay;                 /* rwkv6: n_embd */
    struct rops_mat decay_w1, decay_w2; /* rwkv6: n_embd -> D_dec -> n_embd; rwkv7: w1, w2 */
    const float *first;                 /* rwkv6: u, n_embd */
    const float *w0, *a0, *v0, *k_k, *k_a, *r_k; /* rwkv7 */
    struct rops_mat a1, a2, v1, v2, g1, g2;      /* rwkv7 LoRAs (v1, v2 unused in layer 0) */
    struct rops_mat wr, wk, wv, wg, wo;          /* wg: rwkv6 only */
    const float *ln_x, *ln_x_b;                  /* per-head group norm affine */
    /* channel mix */
    const float *cm_lerp_k, *cm_lerp_r; /* cm_lerp_r: rwkv6 only */
    struct rops_mat cm_k, cm_v, cm_r;   /* cm_r: rwkv6 only */
};

struct rrwkv_hparams {
    bool v7;
    uint32_t head_size, n_head, n_ff;
    uint32_t mix_dim, decay_dim;             /* rwkv6: D_mix, D_dec */
    uint32_t lora_w, lora_a, lora_v, lora_g; /* rwkv7 ranks */
    uint32_t rescale_every;                  /* rwkv6; 0 = never */
    float eps;
};

/* The attention and feed-forward layers of hybrid models (attn.c, hybrid.c; docs/hybrid.md). */
struct rattn_layer {
    struct rops_mat wq;     /* n_embd -> n_head * head_dim */
    struct rops_mat wk, wv; /* n_embd -> n_head_kv * head_dim */
    struct rops_mat wo;     /* n_head * head_dim -> n_embd */
    uint32_t n_head_kv;     /* 0: the layer has no attention */
    /* the RMS norms of q and k before RoPE (attn_q_norm, attn_k_norm: both or neither; NULL:
       none), each over spans of q_norm_n / k_norm_n values: head_dim (each head, one weight
       for all) or the whole projected vector */
    const float *q_norm, *k_norm;
    uint32_t q_norm_n, k_norm_n;
};

struct rffn_layer {
    const float *norm;    /* n_embd: the RMSNorm before it; NULL: it reads the mixers' input */
    struct rops_mat gate; /* n_embd -> n_ff; n_rows 0: no gate (the ReLU^2 MLP) */
    struct rops_mat up;   /* n_embd -> n_ff */
    struct rops_mat down; /* n_ff -> n_embd */
    uint32_t n_ff;        /* 0: the layer has no feed-forward part */
};

/* What one layer of a hybrid model runs: the mixers on rmsnorm(x) * attn_norm, added up (both
 * in Falcon-H1's layers, one elsewhere), then the feed-forward part on its own norm, or as the
 * layer's only mixer (Nemotron-H's MLP layers, ffn.norm NULL). */
struct rhybrid_layer {
    const float *attn_norm; /* n_embd */
    bool mamba2;            /* a Mamba-2 mixer (m->layers[il]) */
    struct rattn_layer attn;
    struct rffn_layer ffn;
};

struct rhybrid_hparams {
    uint32_t n_head, head_dim; /* the attention's query heads and head size */
    float attn_scale;          /* q . k scale */
    float embd_scale;          /* x = token_embd[t] * embd_scale; 0: none */
    float residual_scale;      /* x += residual_scale * (each part); 0: none */
    bool rope;                 /* rotary embedding on q and k (NeoX pairs when neox) */
    bool neox;
    uint32_t n_rot;
    float rope_base, rope_scale;
    uint32_t max_ff, max_kv_head; /* the widest feed-forward and K/V head count of any layer */
    bool any_mamba2;
};

struct rmodel_arch_ops;

struct rmodel {
    enum rmodel_arch arch;
    const struct rmodel_arch_ops *ops; /* its entry in model.c's table */
    struct rgguf *gguf;
    int32_t n_vocab, n_embd, n_layer;
    int32_t bos, eos;
    uint64_t fingerprint;
    /* the file has block-type weights: its products sum every input as if alone
       (rops_exec.one_order), so that its logits do not depend on the batch */
    bool one_order;
    /* the instruction set whose kernels' interleaved copies (rops_rows16_bytes) the matrices
       get at load, or ROPS_ISA_SCALAR for none (rmodel_load's repack) */
    enum rops_isa rows16_isa;

    struct rops_mat tok_embd;
    struct rops_mat output; /* the same matrix as tok_embd when tied */
    const float *output_norm;
    const float *output_norm_b; /* LayerNorm bias (RWKV); NULL: the output norm is an RMSNorm */
    float norm_eps;             /* of the output norm */
    float logit_div;            /* logits / logit_div; 0: none (Granite's logit_scale) */

    /* the architecture's own data: one family's at a time */
    union {
        struct { /* mamba, mamba2 (mamba.c, mamba2.c) */
            struct rmamba_hparams mamba;
            struct rmamba_layer *layers;
        };
        struct { /* rwkv6, rwkv7 (rwkv.c, rwkv6.c, rwkv7.c) */
            struct rrwkv_hparams rwkv;
            struct rrwkv_layer *rlayers;
            const float *embd_norm, *embd_norm_b; /* the LayerNorm of the embeddings */
        };
    };
    /* a hybrid model's layers (hybrid.c); its Mamba-2 mixers are the mamba part above */
    struct rhybrid_hparams hyb;
    struct rhybrid_layer *hlayers; /* NULL: not a hybrid model */

    /* f32 copies of the small tensors (a few per layer), freed with the model */
    void **small;
    size_t n_small, cap_small;
    /* the matrices' interleaved copies (rmodel_rows16; rcore_alloc_big's, huge pages) */
    void **copies;
    size_t n_copies, cap_copies;
    uint64_t copy_bytes; /* theirs, all together */
};

/* ---- load.c: what every architecture's loader uses ---------------------------------------- */

/* The shared part of a model: n_embd, n_layer, the embedding, the output norm and matrix
 * (tied to the embedding when output.weight is absent), BOS/EOS. */
bool rmodel_load_common(struct rmodel *m);
/* Reads a small tensor (any float type) into an f32 copy owned by the model. NULL with the
 * error set when missing or mis-shaped. The shape is compared as llama.cpp's loader does:
 * n_dims given, any dimensions past them must be 1 ({n} matches a file's {n, 1, 1}). */
const float *rmodel_small_f32(struct rmodel *m, const char *name, uint32_t n_dims,
                              const int64_t *ne);
/* n floats owned by the model (64-byte aligned), for what the loader derives from a tensor
 * (name: for the error). NULL with the error set when out of memory. */
float *rmodel_small_new(struct rmodel *m, size_t n, const char *name);
/* Gives w (a weight matrix the products read, of the tensor name) its interleaved copy for one
 * input, owned by the model, when m->rows16_isa's kernels read one for it. False (error set)
 * out of memory. */
bool rmodel_rows16(struct rmodel *m, struct rops_mat *w, const char *name);
/* The conv weights w (n_ch x d_conv) lag-major, as rops_conv_args' w_lag, owned by the model.
 * NULL with the error set when out of memory. */
const float *rmodel_conv_lag(struct rmodel *m, const float *w, int64_t n_ch, int64_t d_conv,
                             const char *name);
/* The types a weight matrix may have in a file: every type the GGUF reader knows the blocks of
 * (rmodel_matrix_rows checks the kernels take it at that width). */
#define RMODEL_MATRIX_TYPES                                                                        \
    ((uint64_t)1 << RGGUF_F32 | (uint64_t)1 << RGGUF_F16 | (uint64_t)1 << RGGUF_BF16 |             \
     (uint64_t)1 << RGGUF_Q4_0 | (uint64_t)1 << RGGUF_Q4_1 | (uint64_t)1 << RGGUF_Q5_0 |           \
     (uint64_t)1 << RGGUF_Q5_1 | (uint64_t)1 << RGGUF_Q8_0 | (uint64_t)1 << RGGUF_Q2_K |           \
     (uint64_t)1 << RGGUF_Q3_K | (uint64_t)1 << RGGUF_Q4_K | (uint64_t)1 << RGGUF_Q5_K |           \
     (uint64_t)1 << RGGUF_Q6_K | (uint64_t)1 << RGGUF_IQ4_NL | (uint64_t)1 << RGGUF_IQ4_XS)
/* True when the kernels take weights of type with rows of n_cols (whole blocks); else false with
 * the error naming the tensor, its type and the block size. */
bool rmodel_matrix_rows(const char *name, uint32_t type, int64_t n_cols);
/* A weight matrix {n_cols, n_rows} read in place. False with the error set. */
bool rmodel_matrix(struct rmodel *m, const char *name, int64_t n_cols, int64_t n_rows,
                   struct rops_mat *out);
/* Reads a u32 hyper-parameter "ARCH.suffix". */
bool rmodel_key_u32(const struct rmodel *m, const char *suffix, uint32_t *out);
/* The same, def when the key is absent. */
bool rmodel_key_u32_or(const struct rmodel *m, const char *suffix, uint32_t def, uint32_t *out);

/* Runs fn(ctx, t0, t1) over ranges of a ubatch's tokens [0, n) covering each once: on ex's
 * threads when the n tokens of per_token values each repay the hand-off (prompts), else on the
 * caller (generation's few tokens). fn must treat each token on its own (model.c). */
typedef void (*rmodel_tokens_fn)(const void *ctx, int64_t t0, int64_t t1);
void rmodel_for_tokens(const struct rops_exec *ex, int64_t n, int64_t per_token,
                       rmodel_tokens_fn fn, const void *ctx);

/* Lays out n arrays of sizes[i] floats one after the other in a workspace, each rounded up to
 * whole 64-byte lines and followed by a 16-float (64-byte) gap that keeps the rows of different
 * arrays off one cache line: with a base aligned to 64 bytes (rcore_alloc64) every array starts
 * on a line. With base (not NULL), *slots[i] points at array i in it. Returns the floats the
 * layout takes, so that one function both sizes a workspace (base NULL) and carves it. */
size_t rmodel_ws_carve(float *base, float **const *slots, const size_t *sizes, size_t n);

/*
 * What an architecture's layer reads and writes, for the n_seqs x n_seq_tokens tokens of a
 * ubatch (stream-major). x: the residual stream (n x n_embd), updated; k, v: each sequence's
 * K and V state rows of this layer as f32 (n_seqs rows, rmodel_state_rows sizes), updated in
 * place; save_k / save_v: NULL or per token where that token's states go (snapshots); buf:
 * the architecture's own workspace (its ws_floats), kept across the layers of one ubatch.
 * kv: a hybrid model's attention part (NULL for a recurrent model), placed for this ubatch
 * (rmem_kv_place); ub: the ubatch (positions and sequence ids, for attention); pages: room
 * for the page pointers of the ubatch's longest sequence, K's then V's (rmodel_forward sizes it).
 * out_tok: NULL, or in the last layer the n_out tokens (ascending, fewer than n) whose x is
 * read after it (those that output): the layer may skip its last products (those that feed
 * only x, not the states) for the other tokens and leave their x unfinished, as llama.cpp
 * does for the tokens outside inp_out_ids. A prompt's 511 tokens of 512 then skip them.
 */
struct rmodel_io {
    float *x;
    float *k, *v;
    uint32_t n_seqs, nst;
    float *const *save_k, *const *save_v;
    float *buf;
    const int32_t *out_tok;
    int32_t n_out;
    struct rmem_kv *kv;
    const struct rbatch_ubatch *ub;
    const void **pages;
};

/* The rows a layer's last products run on: io->n_out in the last layer, else all n. */
static inline int64_t rmodel_io_rows(const struct rmodel_io *io) {
    return io->out_tok ? io->n_out : (int64_t)io->n_seqs * io->nst;
}
/* Row rows[i] of buf (ld floats a row) moved to row i, for n rows: in place, since the rows
 * ascend and so none is written before it is read. rows NULL (every row): nothing to move. */
void rmodel_rows_gather(float *buf, int64_t ld, const int32_t *rows, int64_t n);
/* x's row rows[i] (rows NULL: row i) += d's row i, for n rows of ld floats. */
void rmodel_rows_add(float *x, const float *d, int64_t ld, const int32_t *rows, int64_t n);

/*
 * One architecture: what the shared forward pass (model.c) calls. Each architecture defines
 * its entry in its own file; model.c's table lists them by general.architecture. Adding an
 * architecture is one file with its entry, and one line in that table.
 */
struct rmodel_arch_ops {
    const char *name; /* general.architecture, and the prefix of its keys */
    /* the hyper-parameters and the layers' tensors (after rmodel_load_common) */
    bool (*load)(struct rmodel *m);
    void (*free)(struct rmodel *m); /* what load allocated (also after a failed load) */
    /* the K and V state rows of layer il, in elements (0: the layer has no recurrent state) */
    void (*state_rows)(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row);
    /* floats of the layer's own workspace for n_ubatch tokens (rmodel_io.buf) */
    size_t (*ws_floats)(const struct rmodel *m, uint32_t n_ubatch);
    int64_t (*max_in)(const struct rmodel *m); /* the widest matmul input */
    /* after the lookup; NULL: none */
    void (*embed)(const struct rmodel *m, const struct rops_exec *ex, float *x, int64_t n);
    void (*layer)(const struct rmodel *m, const struct rops_exec *ex, int32_t il,
                  const struct rmodel_io *io);
};

extern const struct rmodel_arch_ops rmodel_arch_mamba;         /* mamba.c */
extern const struct rmodel_arch_ops rmodel_arch_mamba2;        /* mamba2.c */
extern const struct rmodel_arch_ops rmodel_arch_rwkv6;         /* rwkv6.c */
extern const struct rmodel_arch_ops rmodel_arch_rwkv7;         /* rwkv7.c */
extern const struct rmodel_arch_ops rmodel_arch_granitehybrid; /* hybrid.c */
extern const struct rmodel_arch_ops rmodel_arch_nemotron_h;    /* hybrid.c */
extern const struct rmodel_arch_ops rmodel_arch_falcon_h1;     /* hybrid.c */

struct rmodel_ws {
    uint32_t n_ubatch;
    uint32_t n_seqs; /* most sequences in a ubatch: min(n_ubatch, n_seq_max) */
    float *buf;      /* one allocation: model.c's part, then the architecture's */
    size_t n_floats;
    /* per ubatch token: the snapshot to fill (rmem_snap_plan), and its rows in one layer */
    struct rmem_snap **snap;
    float **save_k, **save_v;
    int32_t *out_tok;   /* the tokens that output (rmodel_io.out_tok) */
    const void **pages; /* rmodel_io.pages, n_pages_cap entries */
    size_t n_pages_cap;
};

#endif
