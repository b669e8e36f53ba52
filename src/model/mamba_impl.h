/* Private to the Mamba files of src/model: mamba.c (Mamba-1, and what both versions share:
 * the hyper-parameter keys, the workspace, the layer dispatch) and mamba2.c (Mamba-2). */
#ifndef RECUR_MAMBA_IMPL_H
#define RECUR_MAMBA_IMPL_H

#include "model_impl.h"

/* The layer's own part of the workspace (model.c holds x, the gathered states, the scratch). */
struct rmamba_ws {
    float *h;              /* n x E normalised input, then the layer's output */
    float *xz;             /* n x d_in_proj (mamba: x then z; mamba2: z, xBC, dt) */
    float *xc;             /* n x conv_dim conv output */
    float *xdb;            /* n x (R + 2N) */
    float *dtr;            /* n x R, dt input made contiguous */
    float *dt;             /* n x Di */
    float *y;              /* n x Di */
    float *x, *conv, *ssm; /* rmodel_io's residual stream and states */
};

/* mamba.c: what Mamba-1 and Mamba-2 share. The keys both read (the caller set hp->mamba2;
 * each checks its own ranges after), the state rows, the workspace and its carving for one ubatch.
 */
bool rmamba_load_keys(struct rmodel *m);
void rmamba_free(struct rmodel *m);
void rmamba_state_rows(const struct rmodel *m, int32_t il, uint32_t *k_row, uint32_t *v_row);
size_t rmamba_ws_floats(const struct rmodel *m, uint32_t n_ubatch);
int64_t rmamba_max_in(const struct rmodel *m);
void rmamba_ws_carve(const struct rmodel *m, const struct rmodel_io *io, struct rmamba_ws *w);

/* mamba2.c, for mamba2 and the hybrid models' Mamba-2 mixers (hybrid.c). After the keys
 * (rmamba_load_keys or the caller's own eps): the group count, the derived sizes and their
 * checks, and the layers' array (n_layer entries, zeroed). False with the error set. */
bool rmamba2_check_hparams(struct rmodel *m);
/* Layer il's mixer tensors into m->layers[il]; with_norm: also blk.il.attn_norm.weight;
 * ssm_norm.weight is read when present, and must be when norm_required. */
bool rmamba2_load_layer(struct rmodel *m, int32_t il, bool with_norm, bool norm_required);
/* The Mamba-2 mixer of layer L over the ubatch: w->h holds rmsnorm(x) * norm of its n tokens
 * (the caller's), and gets ssm_out . y of its rmodel_io_rows(io) rows (the outputs' rows in a
 * last layer with io->out_tok, gathered to the front). The states io->k, io->v are updated. */
void rmamba2_mix(const struct rmodel *m, const struct rops_exec *ex, const struct rmamba_layer *L,
                 const struct rmamba_ws *w, const struct rmodel_io *io);

#endif
