/*
 * A toy "model" for testing the memory on its own: each layer's K and V rows hold small
 * integers that every token updates as a fixed function of (old value, token, element, layer).
 * The values stay in 0..250, which f32, f16 and bf16 all store exactly, so a state computed
 * through the memory (gather with s_copy / s_mask, update, write back) must equal, bit for bit,
 * the state folded straight from the sequence's own token history.
 */
#ifndef RECUR_TEST_TOY_H
#define RECUR_TEST_TOY_H

#include "core/core.h"
#include "memory/memory.h"

#define TOY_MOD 251

static inline float toy_step(float old, int32_t token, uint32_t elem, uint32_t layer, int is_v) {
    long v = (long)old * 31 + (long)token * 7 + (long)elem * 3 + (long)layer * 13 + is_v * 5 + 1;
    return (float)(v % TOY_MOD);
}

/* Runs the toy compute on the block of the ubatch just placed: for every layer, the memory
 * gives every slot's rows (rmem_layer_begin: all reads before any write), each stream's
 * tokens are folded in, and the memory stores them back into the block (rmem_layer_end). */
static inline int toy_compute(struct rmem *mem, const struct rbatch_ubatch *ub) {
    const uint32_t n = rmem_n(mem), nst = ub->n_seq_tokens;
    for (uint32_t il = 0; il < rmem_n_layer(mem); il++) {
        struct rmem_layer st;
        if (!rmem_layer_begin(mem, il, &st)) return 0;
        for (int is_v = 0; is_v < 2; is_v++) {
            float *work = is_v ? st.v : st.k;
            const size_t n_elem = is_v ? st.v_row : st.k_row;
            for (uint32_t i = 0; i < n && n_elem; i++)
                for (uint32_t j = 0; j < nst; j++) {
                    int32_t tok = ub->token[i * nst + j];
                    for (size_t e = 0; e < n_elem; e++)
                        work[i * n_elem + e] =
                            toy_step(work[i * n_elem + e], tok, (uint32_t)e, il, is_v);
                }
        }
        rmem_layer_end(mem, il);
    }
    return 1;
}

#endif
