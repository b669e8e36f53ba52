/*
 * Weight matrices with their rows interleaved 16 at a time, for the one-input products.
 *
 * The AVX-512 kernel for one input and q4_K weights (x86/qdot_k16.h) puts 16 rows in the 16
 * 32-bit lanes of a vector, as the prompts' panels do (x86/qgemm_k.h): the input's 4 quants,
 * broadcast, meet 4 quants of every row in one vpmaddubsw, and each lane's scale, d and minimum
 * are the row's own, where a row at a time (x86/qdot_k.h) spends a third of its instructions
 * picking a sub-block's scale into the lanes and summing a block's lanes. A panel unpacked for
 * each call costs more than one input's products; so the model writes its q4_K matrices once
 * more at load, in this layout, and one-input calls read that copy instead of the file's.
 *
 * Layout: for each group g of 16 rows (rows 16 g .. 16 g + 15) and each block b of a row, a
 * struct rops_block_q4_Kx16 at index g * nb + b (nb = n_cols / 256): the same bytes as the 16
 * rows' blocks b, rearranged (ops_quants.h). Rows past the last whole 16 are not in it; the
 * kernels read them from data.
 */
#include <string.h>

#include "ops.h"
#include "ops_quants.h"

_Static_assert(sizeof(struct rops_block_q4_Kx16) == 16 * sizeof(struct rops_block_q4_K),
               "q4_Kx16 block");

size_t rops_rows16_bytes(const struct rops_mat *w, enum rops_isa isa) {
    if (isa != ROPS_ISA_AVX512 || w->type != ROPS_TYPE_Q4_K || w->n_rows < 16 ||
        w->n_cols % ROPS_QK_K != 0)
        return 0;
    return (size_t)(w->n_rows / 16) * (size_t)(w->n_cols / ROPS_QK_K) *
           sizeof(struct rops_block_q4_Kx16);
}

void rops_rows16_make(const struct rops_mat *w, void *dst) {
    const int64_t nb = w->n_cols / ROPS_QK_K, groups = w->n_rows / 16;
    struct rops_block_q4_Kx16 *out = dst;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < nb; b++) {
            struct rops_block_q4_Kx16 *o = out + g * nb + b;
            for (int r = 0; r < 16; r++) {
                const struct rops_block_q4_K *blk =
                    (const struct rops_block_q4_K *)((const uint8_t *)w->data +
                                                     (size_t)(16 * g + r) * w->row_bytes) +
                    b;
                o->d[r] = blk->d;
                o->dmin[r] = blk->dmin;
                for (int k = 0; k < ROPS_K_SCALE_SIZE; k++) o->scales[k][r] = blk->scales[k];
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 8; l++) memcpy(o->qs[c][l][r], blk->qs + 32 * c + 4 * l, 4);
            }
        }
}
