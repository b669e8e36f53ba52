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
void rmamba_state_rows(const struct rmodel *m, uint32_t *k_row, uint32_t *v_row);
size_t rmamba_ws_floats(const struct rmodel *m, uint32_t n_ubatch);
int64_t rmamba_max_in(const struct rmodel *m);
void rmamba_ws_carve(const struct rmodel *m, const struct rmodel_io *io, struct rmamba_ws *w);

#endif
