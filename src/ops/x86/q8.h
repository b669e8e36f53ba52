/*
 * The q8_0 / q4_0 integer dot products (one to three inputs: generation) on 256-bit vectors,
 * for the files of the x86 instruction sets: ops_avx2.c (vpmaddubsw + vpmaddwd), ops_avxvnni.c
 * (AVX-VNNI's vpdpbusd, VEX) and ops_avx512.c (AVX512-VNNI's, EVEX). Each includes this once,
 * inside its #if of the instruction set and after x86/vec.h, after defining
 *   ROPS_Q8_DOT(aw, w, x)  eight int32 sums of four products each of signed bytes w and x,
 *                          aw = |w| (the instructions take one operand unsigned)
 *   ROPS_Q8_RB3            the rows side by side for three inputs
 *   ROPS_Q8_NAME           the name of the kernel it defines (the table's q8_rows)
 * The int32 sums are exact (at most 4 x 128 x 127 per lane, no saturation; |w| <= 128 fits a
 * byte unsigned, and the quantized inputs are within +-127, so negating them does not
 * overflow) and the float steps after them are the same, so every path gives the same bits.
 */
#ifndef ROPS_Q8_DOT
#error "define ROPS_Q8_DOT, ROPS_Q8_RB3 and ROPS_Q8_NAME before including x86/q8.h"
#endif

/* The 32 quants of weight block b of a row as signed bytes, and its scale. */
static inline __attribute__((always_inline)) __m256i
q8_block_bytes(enum rops_type type, const uint8_t *row, int64_t b, float *d) {
    if (type == ROPS_TYPE_Q8_0) {
        const struct rops_block_q8_0 *blk = (const struct rops_block_q8_0 *)row + b;
        *d = _cvtsh_ss(blk->d);
        return _mm256_loadu_si256((const __m256i *)blk->qs);
    }
    const struct rops_block_q4_0 *blk = (const struct rops_block_q4_0 *)row + b;
    *d = _cvtsh_ss(blk->d);
    const __m128i raw = _mm_loadu_si128((const __m128i *)blk->qs), mask = _mm_set1_epi8(15);
    const __m256i nib =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
    return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}

/* RB rows side by side, each block of the inputs loaded once for them, with the next block of
 * rows (contiguous after this one) prefetched a share per step, so that its lines are on their
 * way while this block computes: RB short rows side by side are streams too short for the
 * hardware prefetcher. */
static inline __attribute__((always_inline)) void
q8_rows(enum rops_type type, const struct rops_q8_args *a, int NB, int RB, int64_t r0, int64_t r1) {
    const struct rops_mat *w = a->w;
    const int64_t m = w->n_rows;
    for (int64_t r = r0; r < r1; r += RB) {
        const int64_t rb = r1 - r < RB ? r1 - r : RB;
        const uint8_t *rows[8];
        for (int64_t j = 0; j < RB; j++)
            rows[j] = (const uint8_t *)w->data + (size_t)(r + (j < rb ? j : 0)) * w->row_bytes;
        __m256 acc[8][3];
        for (int j = 0; j < RB; j++)
            for (int i = 0; i < NB; i++) acc[j][i] = _mm256_setzero_ps();
        const uint8_t *next = rows[0] + (size_t)RB * w->row_bytes;
        const int64_t next_end = r + 2 * RB <= r1 ? (int64_t)RB * (int64_t)w->row_bytes : 0;
        const int64_t per_step = ((next_end + a->nb - 1) / a->nb + 63) & ~(int64_t)63;
        for (int64_t b = 0; b < a->nb; b++) {
            for (int64_t o = b * per_step; o < (b + 1) * per_step && o < next_end; o += 64)
                _mm_prefetch((const char *)next + o, _MM_HINT_T0);
            __m256i xv[3];
            float dx[3];
            for (int i = 0; i < NB; i++) {
                const struct rops_xq8 *xb = &a->xq[i * a->nb + b];
                xv[i] = _mm256_loadu_si256((const __m256i *)xb->qs);
                dx[i] = xb->d;
            }
            for (int j = 0; j < RB; j++) {
                float dw;
                const __m256i wq = q8_block_bytes(type, rows[j], a->b0 + b, &dw);
                const __m256i aw = _mm256_sign_epi8(wq, wq);
                for (int i = 0; i < NB; i++)
                    acc[j][i] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[i]),
                                        _mm256_cvtepi32_ps(ROPS_Q8_DOT(aw, wq, xv[i])), acc[j][i]);
            }
        }
        for (int64_t j = 0; j < rb; j++)
            for (int i = 0; i < NB; i++) {
                float *dst = &a->y[i * m + r + j];
                *dst = a->accumulate ? *dst + vec_hsum8(acc[j][i]) : vec_hsum8(acc[j][i]);
            }
    }
}

#define Q8_FOR_TYPE(T)                                                                             \
    static void q8_##T(const struct rops_q8_args *a, int64_t r0, int64_t r1) {                     \
        if (a->n == 1)                                                                             \
            q8_rows(T, a, 1, 8, r0, r1);                                                           \
        else if (a->n == 2)                                                                        \
            q8_rows(T, a, 2, 4, r0, r1);                                                           \
        else                                                                                       \
            q8_rows(T, a, 3, ROPS_Q8_RB3, r0, r1);                                                 \
    }
Q8_FOR_TYPE(ROPS_TYPE_Q8_0)
Q8_FOR_TYPE(ROPS_TYPE_Q4_0)
#undef Q8_FOR_TYPE

static void ROPS_Q8_NAME(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    if (a->w->type == ROPS_TYPE_Q8_0)
        q8_ROPS_TYPE_Q8_0(a, r0, r1);
    else
        q8_ROPS_TYPE_Q4_0(a, r0, r1);
}
