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

/* mamba2.c: Mamba-2's keys and tensors (after mamba.c read the shared keys), and one layer on
 * the shapes of Mamba-1's; save_conv / save_ssm as rops_ssm_conv / rops_ssm_scan2 take them */
bool rmamba2_load(struct rmodel *m);
void rmamba2_layer_forward(const struct rmodel *m, const struct rops_exec *ex,
                           const struct rmamba_layer *L, const struct rmamba_ws *w, uint32_t n_seqs,
                           uint32_t nst, float *const *save_conv, float *const *save_ssm);

#endif
