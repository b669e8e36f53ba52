/*
 * The q8_0 / q4_0 integer dot products (one to three inputs) by VNNI's vpdpbusd, for the files
 * of the instruction sets that have it: ops_avx512.c (AVX512-VNNI, EVEX) and ops_avxvnni.c
 * (AVX-VNNI, VEX, on CPUs without AVX-512). Each includes this once, inside its #if of the
 * instruction set, after defining
 *   ROPS_VNNI_DPBUSD(acc, u, s)  acc + the sums of four products u (unsigned) x s (signed) per
 *                                int32 lane, on 256-bit vectors;
 *   ROPS_VNNI_NAME               the name of the kernel it defines (the table's q8_rows).
 * Everything but vpdpbusd is the AVX2 kernel's (ops_avx2.c): the int32 sums are the same (exact)
 * and the float steps after them too, so every path with integer dots gives the same bits.
 */
#ifndef ROPS_VNNI_DPBUSD
#error "define ROPS_VNNI_DPBUSD and ROPS_VNNI_NAME before including ops_vnni.h"
#endif

static inline float vnni_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 32 quants of weight block b of a row as signed bytes, and its scale. */
static inline __attribute__((always_inline)) __m256i
vnni_block_bytes(enum rops_type type, const uint8_t *row, int64_t b, float *d) {
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

/* Eight int32 sums of four products each of signed bytes w and x: vpdpbusd takes an unsigned
 * operand, so |w| times x with w's sign (|w| <= 128 fits a byte unsigned; the quantized inputs
 * are within +-127, so negating them does not overflow). The sums are exact, and the same as
 * the AVX2 kernel's vpmaddubsw + vpmaddwd (at most 4 x 128 x 127 per lane, no saturation). */
static inline __m256i vnni_dot_bytes(__m256i aw, __m256i w, __m256i x) {
    return ROPS_VNNI_DPBUSD(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w));
}

static inline __attribute__((always_inline)) void vnni_q8_rows(enum rops_type type,
                                                               const struct rops_q8_args *a, int NB,
                                                               int RB, int64_t r0, int64_t r1) {
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
                const __m256i wq = vnni_block_bytes(type, rows[j], a->b0 + b, &dw);
                const __m256i aw = _mm256_sign_epi8(wq, wq);
                for (int i = 0; i < NB; i++)
                    acc[j][i] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[i]),
                                                _mm256_cvtepi32_ps(vnni_dot_bytes(aw, wq, xv[i])),
                                                acc[j][i]);
            }
        }
        for (int64_t j = 0; j < rb; j++)
            for (int i = 0; i < NB; i++) {
                float *dst = &a->y[i * m + r + j];
                *dst = a->accumulate ? *dst + vnni_hsum256(acc[j][i]) : vnni_hsum256(acc[j][i]);
            }
    }
}

#define VNNI_Q8_FOR_TYPE(T)                                                                        \
    static void vnni_q8_##T(const struct rops_q8_args *a, int64_t r0, int64_t r1) {                \
        if (a->n == 1)                                                                             \
            vnni_q8_rows(T, a, 1, 8, r0, r1);                                                      \
        else if (a->n == 2)                                                                        \
            vnni_q8_rows(T, a, 2, 4, r0, r1);                                                      \
        else                                                                                       \
            vnni_q8_rows(T, a, 3, 4, r0, r1);                                                      \
    }
VNNI_Q8_FOR_TYPE(ROPS_TYPE_Q8_0)
VNNI_Q8_FOR_TYPE(ROPS_TYPE_Q4_0)
#undef VNNI_Q8_FOR_TYPE

static void ROPS_VNNI_NAME(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    if (a->w->type == ROPS_TYPE_Q8_0)
        vnni_q8_ROPS_TYPE_Q8_0(a, r0, r1);
    else
        vnni_q8_ROPS_TYPE_Q4_0(a, r0, r1);
}
