/*
 * A toy "model" for testing the memory on its own: each layer's K and V rows hold small
 * integers that every token updates as a fixed function of (old value, token, element, layer).
 * The values stay in 0..250, which f32, f16 and bf16 all store exactly, so a state computed
 * through the memory (gather with s_copy / s_mask, update, write back) must equal, bit for bit,
 * the state folded straight from the sequence's own token history.
 */
#ifndef RECUR_TEST_TOY_H
#define RECUR_TEST_TOY_H

#include <stdlib.h>

#include "core/core.h"
#include "memory/memory.h"

#define TOY_MOD 251

static inline float toy_step(float old, int32_t token, uint32_t elem, uint32_t layer, int is_v) {
    long v = (long)old * 31 + (long)token * 7 + (long)elem * 3 + (long)layer * 13 + is_v * 5 + 1;
    return (float)(v % TOY_MOD);
}

/* Runs the toy compute on the block of the ubatch just placed: for every layer, first gathers
 * every slot's rows (all reads before any write, as the memory requires), then folds each
 * stream's tokens in and writes the rows back into the block. */
static inline int toy_compute(struct rmem *mem, const struct rbatch_ubatch *ub) {
    const uint32_t n = rmem_n(mem), head = rmem_head(mem), nst = ub->n_seq_tokens;
    for (uint32_t il = 0; il < rmem_n_layer(mem); il++) {
        for (int is_v = 0; is_v < 2; is_v++) {
            enum rcore_type type = is_v ? rmem_type_v(mem) : rmem_type_k(mem);
            size_t row_bytes = is_v ? rmem_v_row_bytes(mem, il) : rmem_k_row_bytes(mem, il);
            size_t n_elem = row_bytes / rcore_type_size(type);
            if (n_elem == 0) continue;
            uint8_t *base = is_v ? rmem_v_data(mem, il) : rmem_k_data(mem, il);
            float *work = malloc(sizeof(float) * n_elem * n);
            if (!work) return 0;
            for (uint32_t i = 0; i < n; i++) {
                if (rmem_s_mask(mem, i) == 0.0f) {
                    for (size_t e = 0; e < n_elem; e++) work[i * n_elem + e] = 0.0f;
                } else {
                    rcore_row_to_f32(type, work + i * n_elem,
                                     base + (size_t)rmem_s_copy(mem, i) * row_bytes, n_elem);
                }
            }
            for (uint32_t i = 0; i < n; i++) {
                for (uint32_t j = 0; j < nst; j++) {
                    int32_t tok = ub->token[i * nst + j];
                    for (size_t e = 0; e < n_elem; e++)
                        work[i * n_elem + e] =
                            toy_step(work[i * n_elem + e], tok, (uint32_t)e, il, is_v);
                }
                rcore_row_from_f32(type, base + (size_t)(head + i) * row_bytes, work + i * n_elem,
                                   n_elem);
            }
            free(work);
        }
    }
    return 1;
}

#endif
