/*
 * Weight matrices with their rows interleaved 16 at a time, for the one-input products.
 *
 * The AVX-512 kernels for one input and q4_K or q6_K weights (x86/qdot_k16.h) put 16 rows in
 * the 16 32-bit lanes of a vector, as the prompts' panels do (x86/qgemm_k.h): the input's 4
 * quants, broadcast, meet 4 quants of every row in one vpmaddubsw, and each lane's scale, d and
 * minimum are the row's own, where a row at a time (x86/qdot_k.h) spends a third of its
 * instructions picking a sub-block's scale into the lanes and summing a block's lanes. A panel
 * unpacked for each call costs more than one input's products; so the model writes those
 * matrices once more at load, in this layout, and one-input calls read that copy instead of
 * the file's.
 *
 * Layout: for each group g of 16 rows (rows 16 g .. 16 g + 15) and each block b of a row, a
 * struct rops_block_q4_Kx16 or rops_block_q6_Kx16 at index g * nb + b (nb = n_cols / 256): the
 * same bytes as the 16 rows' blocks b, rearranged (ops_quants.h). Rows past the last whole 16
 * are not in it; the kernels read them from data.
 */
#include <string.h>

#include "ops.h"
#include "ops_quants.h"

_Static_assert(sizeof(struct rops_block_q4_Kx16) == 16 * sizeof(struct rops_block_q4_K),
               "q4_Kx16 block");
_Static_assert(sizeof(struct rops_block_q6_Kx16) == 16 * sizeof(struct rops_block_q6_K),
               "q6_Kx16 block");

size_t rops_rows16_bytes(const struct rops_mat *w, enum rops_isa isa) {
    if (isa != ROPS_ISA_AVX512 || (w->type != ROPS_TYPE_Q4_K && w->type != ROPS_TYPE_Q6_K) ||
        w->n_rows < 16 || w->n_cols % ROPS_QK_K != 0)
        return 0;
    return (size_t)(w->n_rows / 16) * (size_t)(w->n_cols / ROPS_QK_K) *
           rops_qtraits_of(w->type)->block_bytes * 16;
}

/* Row r's block blk into the interleaved block o (ops_quants.h's layouts). */
static void q4_K_row(const struct rops_block_q4_K *blk, int r, struct rops_block_q4_Kx16 *o) {
    o->d[r] = blk->d;
    o->dmin[r] = blk->dmin;
    for (int k = 0; k < ROPS_K_SCALE_SIZE; k++) o->scales[k][r] = blk->scales[k];
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 8; l++) memcpy(o->qs[c][l][r], blk->qs + 32 * c + 4 * l, 4);
}

static void q6_K_row(const struct rops_block_q6_K *blk, int r, struct rops_block_q6_Kx16 *o) {
    o->d[r] = blk->d;
    for (int g = 0; g < 16; g++) o->scales[g][r] = blk->scales[g];
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 8; l++) {
            for (int j = 0; j < 2; j++)
                memcpy(o->ql[h][j][l][r], blk->ql + 64 * h + 32 * j + 4 * l, 4);
            memcpy(o->qh[h][l][r], blk->qh + 32 * h + 4 * l, 4);
        }
}

void rops_rows16_make(const struct rops_mat *w, void *dst) {
    const int64_t nb = w->n_cols / ROPS_QK_K, groups = w->n_rows / 16;
    const size_t bb = rops_qtraits_of(w->type)->block_bytes;
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (size_t)(g * nb + b) * 16 * bb;
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk =
                    (const uint8_t *)w->data + (size_t)(16 * g + r) * w->row_bytes + (size_t)b * bb;
                if (w->type == ROPS_TYPE_Q4_K)
                    q4_K_row((const struct rops_block_q4_K *)blk, r,
                             (struct rops_block_q4_Kx16 *)o);
                else
                    q6_K_row((const struct rops_block_q6_K *)blk, r,
                             (struct rops_block_q6_Kx16 *)o);
            }
        }
}
