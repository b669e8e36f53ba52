/*
 * The integer products of the block types of ops_qmatmul.c (q4_1, q5_0, q5_1, iq4_nl against
 * q8_0 / q8_1 inputs: x86/qdot_32.h; q2_K .. q6_K and iq4_xs against q8_K: x86/qdot_k.h, and
 * for q4_K / q5_K prompts with AVX-512 x86/qgemm_k.h) on
 * 256-bit vectors, for the files of the x86 instruction sets, as x86/q8.h: ops_avx2.c
 * (vpmaddubsw + vpmaddwd), ops_avxvnni.c (AVX-VNNI's vpdpbusd) and ops_avx512.c (AVX512-VNNI's).
 * Each includes this once, inside its #if of the instruction set and after x86/vec.h, after
 * defining
 *   ROPS_DPBUSD(acc, u, s)  acc (eight int32) plus, in each lane, the sum of the four products
 *                           of unsigned bytes u with signed bytes s; exact while every pair of
 *                           products stays within int16 (AVX2's vpmaddubsw saturates there:
 *                           u <= 127 with |s| <= 127 always is)
 *   ROPS_QDOT_NAME          the name of the kernel it defines (the table's qdot_rows)
 * A type without a kernel here takes the portable one (rops_qdot_rows_scalar).
 *
 * Every kernel keeps, for each input, one order of its float steps whatever the number of
 * inputs and the rows it is given (the kernel table's promise): a token's sums do not depend on
 * who else is in the batch. The integer sums are exact, so the vector and portable paths differ
 * only in how the floats of the blocks add up.
 */
#ifndef ROPS_DPBUSD
#error "define ROPS_DPBUSD and ROPS_QDOT_NAME before including x86/qdot.h"
#endif

#include "../ops_quants.h"
#include "qdot_32.h"
#include "qdot_k.h"
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include "qgemm_32.h"
#include "qgemm_k.h"
#include "qdot_k16.h"
#else /* the panels are written for 16 rows a vector (qgemm_k.h) */
static bool qgemm_k_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    (void)a, (void)r0, (void)r1;
    return false;
}
static bool qgemm_32_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    (void)a, (void)r0, (void)r1;
    return false;
}
static bool qdot_k16_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1, int64_t *g0,
                          int64_t *g1) {
    (void)a, (void)r0, (void)r1, (void)g0, (void)g1;
    return false;
}
#endif

/* A whole row's call (one input) goes to the kernels of a tile a call over this many rows at a
 * time, every tile of them before the next rows: x86/qdot_32.h prefetches whole rows, so the
 * second and third tiles find them in the caches. RWKV-6 Q4_K_M's q5_0 ffn value (2688 columns,
 * three tiles), alternated generation runs against every tile over all of a thread's rows:
 * 128 rows 1.07-1.08x, 32 rows 1.02x, 512 rows 0.99x (bench/RESULTS.md). */
#define QDOT_ROW_CHUNK 128

static void ROPS_QDOT_NAME(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    /* one input from an interleaved copy: its whole groups of 16 rows there (a whole row's
       columns at once), the few rows around them here (no whole group: not there again) */
    int64_t g0, g1;
    if (qdot_k16_rows(a, r0, r1, &g0, &g1)) {
        if (r0 < 16 * g0) ROPS_QDOT_NAME(a, r0, 16 * g0);
        if (16 * g1 < r1) ROPS_QDOT_NAME(a, 16 * g1, r1);
        return;
    }
    if (a->kt > ROPS_QMM_TILE) { /* the other kernels take a tile a call */
        for (int64_t r = r0; r < r1; r += QDOT_ROW_CHUNK)
            rops_qdot_by_tiles(ROPS_QDOT_NAME, a, r,
                               r + QDOT_ROW_CHUNK < r1 ? r + QDOT_ROW_CHUNK : r1);
        return;
    }
    if (!qgemm_k_rows(a, r0, r1) && !qgemm_32_rows(a, r0, r1) && !qdot_k_rows(a, r0, r1) &&
        !qdot_32_rows(a, r0, r1))
        rops_qdot_rows_scalar(a, r0, r1);
}
