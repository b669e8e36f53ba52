/*
 * What the x86 matrix products of both widths (ops_avx2.c, ops_avx512.c) take from 8-lane
 * registers alike: float weights to f32 8 at a time, an 8 x 8 transpose (the panels of the
 * prompt products are packed with them, and x86/q8.h's rows in lanes), and the bytes of a
 * row's first columns.
 */
#ifndef RECUR_OPS_X86_PACK_H
#define RECUR_OPS_X86_PACK_H

#include <immintrin.h>

#include "../ops_impl.h"

/* 8 weights of a row from column c (c a multiple of 8), as f32. */
static inline __attribute__((always_inline)) __m256 load8(enum rops_type type, const uint8_t *row,
                                                          int64_t c) {
    switch (type) {
    case ROPS_TYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * c)));
    case ROPS_TYPE_BF16: {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * c)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    default:
        return _mm256_loadu_ps((const float *)row + c);
    }
}

static inline __attribute__((always_inline)) void transpose8(__m256 v[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Rows [r, r + 8) of w, columns [k0, k0 + kt) as f32 into the panel, column-major with ld
 * floats a column: panel[c * ld + j] = w[r + j][k0 + c], rows from rb on zero. Converting 8
 * columns of 8 rows and transposing them in registers keeps every row a sequential stream. */
static inline __attribute__((always_inline)) void pack8_rows(enum rops_type type,
                                                             const struct rops_mat *w, int64_t r,
                                                             int64_t rb, int64_t k0, int64_t kt,
                                                             int64_t ld, float *panel) {
    const int64_t kt8 = kt & ~(int64_t)7;
    const uint8_t *rows[8];
    for (int64_t j = 0; j < 8; j++)
        rows[j] = (const uint8_t *)w->data + (size_t)(r + (j < rb ? j : 0)) * w->row_bytes;
    for (int64_t c = 0; c < kt8; c += 8) {
        __m256 v[8];
        for (int j = 0; j < 8; j++)
            v[j] = j < rb ? load8(type, rows[j], k0 + c) : _mm256_setzero_ps();
        transpose8(v);
        for (int t = 0; t < 8; t++) _mm256_store_ps(panel + (c + t) * ld, v[t]);
    }
    /* the last kt % 8 columns */
    for (int64_t c = kt8; c < kt; c++)
        for (int64_t j = 0; j < 8; j++)
            panel[c * ld + j] = j < rb ? rops_weight_at(type, rows[j], k0 + c) : 0.0f;
}

/* Bytes of the first c columns of a row. */
static inline int64_t col_bytes(enum rops_type type, int64_t c) {
    return type == ROPS_TYPE_F32 ? 4 * c : 2 * c;
}

#endif /* RECUR_OPS_X86_PACK_H */
