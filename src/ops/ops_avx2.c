/*
 * The AVX2 + FMA + F16C kernels (see ops.h). This file alone is compiled with -mavx2 -mfma
 * -mf16c; nothing in it runs unless ops_probe.c found those on the CPU. Its table,
 * rops_kernels_avx2(), is at the end; the AVX-512 table takes the kernels it has no wider
 * version of from here.
 *
 * Matmul, four or more inputs: a block of 16 weight rows, ROPS_GEMM_KT columns at a time, is
 * converted to f32 once (f16 with vcvtph2ps, bf16 by a shift, q8_0 / q4_0 by scale x integer)
 * into a column-major panel, then 6 inputs x 16 rows at a time run on 12 accumulators that
 * are the outputs themselves (no horizontal sums): per column two panel loads and six
 * broadcasts feed 12 FMAs (was 4 rows x 3 inputs of dot products: ~150 -> ~195 GFLOP/s on 2
 * threads). One to three inputs (generation) skip the panel: each
 * weight is converted in registers on its way to its FMAs, or, for q8_0 / q4_0, multiplied as
 * bytes with the quantized inputs (maddubs); one input on float weights reads one row at a
 * time (one sequential stream for the hardware prefetcher), the others blocks of rows side by
 * side with the next block prefetched (2.4x the read bandwidth of one thread without, on the
 * machine of issue 6). The scan: per channel
 * its d_state states as vectors, with a vector exp.
 */
#include "ops_impl.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../core/core.h"

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- weights to f32 ------------------------------------------------------------------------ */

/* ---- matmul -------------------------------------------------------------------------------- */

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

/* One input (generation of one sequence): each weight is used by one FMA, so it is converted
 * in registers on its way to it rather than through a panel in L1. One row at a time, front to
 * back, so that a thread's share of the matrix is one sequential stream, which the hardware
 * prefetcher follows on its own: eight rows side by side with software prefetches of the next
 * block read 26-28 GB/s on 2 threads of a Zen 4 (EPYC) where this reads 33-35 (interleaved rounds,
 * bench/RESULTS.md, issue 21's generation). U independent accumulators hide the FMA latency. */
static inline __attribute__((always_inline)) void gemv_rows(enum rops_type type,
                                                            const struct rops_mat *w,
                                                            const float *x, int U, float *y,
                                                            int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, k8 = k & ~(int64_t)7;
    const int64_t ku = k8 - k8 % (8 * U);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        __m256 acc[4];
        for (int u = 0; u < U; u++) acc[u] = _mm256_setzero_ps();
        int64_t c = 0;
        for (; c < ku; c += 8 * U)
            for (int u = 0; u < U; u++)
                acc[u] = _mm256_fmadd_ps(load8(type, row, c + 8 * u),
                                         _mm256_loadu_ps(x + c + 8 * u), acc[u]);
        for (; c < k8; c += 8)
            acc[0] = _mm256_fmadd_ps(load8(type, row, c), _mm256_loadu_ps(x + c), acc[0]);
        for (int u = 1; u < U; u++) acc[0] = _mm256_add_ps(acc[0], acc[u]);
        float s = hsum(acc[0]);
        /* the last k % 8 columns (float types only: block rows are whole blocks) */
        for (int64_t c2 = k8; c2 < k; c2++) s += rops_weight_at(type, row, c2) * x[c2];
        y[r] = s;
    }
}

/* Two or three inputs: four rows side by side, so that each input's vector, loaded once, feeds
 * four FMAs, with the next block of four rows prefetched while this one computes (short row
 * streams side by side are too short for the hardware prefetcher). Here the loads, not the
 * stream, bound the loop: on a Zen 4 this beat one row at a time by 10-40% for two and three
 * inputs (and lost by a third for one). */
static inline __attribute__((always_inline)) void gemv_block(enum rops_type type,
                                                             const struct rops_mat *w,
                                                             const float *x, int NB, int RB,
                                                             float *y, int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows, k8 = k & ~(int64_t)7;
    for (int64_t r = r0; r < r1; r += RB) {
        const int64_t rb = r1 - r < RB ? r1 - r : RB;
        const uint8_t *rows[8];
        for (int64_t j = 0; j < RB; j++)
            rows[j] = (const uint8_t *)w->data + (size_t)(r + (j < rb ? j : 0)) * w->row_bytes;
        __m256 acc[8][3];
        for (int j = 0; j < RB; j++)
            for (int i = 0; i < NB; i++) acc[j][i] = _mm256_setzero_ps();
        const uint8_t *next = rows[0] + (size_t)RB * w->row_bytes; /* see q8_rows */
        const int64_t next_end = r + 2 * RB <= r1 ? (int64_t)RB * (int64_t)w->row_bytes : 0;
        const int64_t steps = k8 / 8 > 0 ? k8 / 8 : 1;
        const int64_t per_step = ((next_end + steps - 1) / steps + 63) & ~(int64_t)63;
        for (int64_t c = 0; c < k8; c += 8) {
            for (int64_t o = c / 8 * per_step; o < (c / 8 + 1) * per_step && o < next_end; o += 64)
                _mm_prefetch((const char *)next + o, _MM_HINT_T0);
            __m256 xv[3];
            for (int i = 0; i < NB; i++) xv[i] = _mm256_loadu_ps(x + i * k + c);
            for (int j = 0; j < RB; j++) {
                const __m256 wv = load8(type, rows[j], c);
                for (int i = 0; i < NB; i++) acc[j][i] = _mm256_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        for (int64_t j = 0; j < rb; j++)
            for (int i = 0; i < NB; i++) {
                float s = hsum(acc[j][i]);
                /* the last k % 8 columns (float types only: block rows are whole blocks) */
                for (int64_t c = k8; c < k; c++)
                    s += rops_weight_at(type, rows[j], c) * x[i * k + c];
                y[i * m + r + j] = s;
            }
    }
}

/* Four to seven inputs (several sequences, or a token and its drafts): one weight row at a
 * time, each 8 weights converted once in registers and used by NB FMAs, the inputs read from
 * cache as they are needed (eight of them would not fit in registers with the accumulators),
 * and the stream prefetched ROPS_GEMV_PF_AHEAD bytes ahead. The panel path converts the
 * weights through memory instead, which for so few inputs costs as much as the products. */
static inline __attribute__((always_inline)) void gemv_many(enum rops_type type,
                                                            const struct rops_mat *w,
                                                            const float *x, int NB, float *y,
                                                            int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows, k8 = k & ~(int64_t)7;
    const int64_t esz = type == ROPS_TYPE_F32 ? 4 : 2;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        __m256 acc[8];
        for (int i = 0; i < NB; i++) acc[i] = _mm256_setzero_ps();
        for (int64_t c = 0; c < k8; c += 8) {
            if ((c * esz & 63) == 0) /* a line per line consumed (ops_impl.h) */
                _mm_prefetch((const char *)row + c * esz + ROPS_GEMV_PF_AHEAD, _MM_HINT_T0);
            const __m256 wv = load8(type, row, c);
            for (int i = 0; i < NB; i++)
                acc[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * k + c), acc[i]);
        }
        for (int i = 0; i < NB; i++) {
            float s = hsum(acc[i]);
            for (int64_t c = k8; c < k; c++) s += rops_weight_at(type, row, c) * x[i * k + c];
            y[i * m + r] = s;
        }
    }
}

#define GEMV_FOR_TYPE(T)                                                                           \
    static void gemv_##T(const struct rops_mat *w, const float *x, int NB, float *y, int64_t r0,   \
                         int64_t r1) {                                                             \
        if (NB == 1)                                                                               \
            gemv_rows(T, w, x, 4, y, r0, r1);                                                      \
        else if (NB == 2)                                                                          \
            gemv_block(T, w, x, 2, 4, y, r0, r1);                                                  \
        else                                                                                       \
            gemv_block(T, w, x, 3, 4, y, r0, r1);                                                  \
    }
GEMV_FOR_TYPE(ROPS_TYPE_F32)
GEMV_FOR_TYPE(ROPS_TYPE_F16)
GEMV_FOR_TYPE(ROPS_TYPE_BF16)

#define GEMV_MANY_FOR_TYPE(T)                                                                      \
    static void gemv_many_##T(const struct rops_mat *w, const float *x, int NB, float *y,          \
                              int64_t r0, int64_t r1) {                                            \
        switch (NB) {                                                                              \
        case 4:                                                                                    \
            gemv_many(T, w, x, 4, y, r0, r1);                                                      \
            break;                                                                                 \
        case 5:                                                                                    \
            gemv_many(T, w, x, 5, y, r0, r1);                                                      \
            break;                                                                                 \
        case 6:                                                                                    \
            gemv_many(T, w, x, 6, y, r0, r1);                                                      \
            break;                                                                                 \
        default:                                                                                   \
            gemv_many(T, w, x, 7, y, r0, r1);                                                      \
            break;                                                                                 \
        }                                                                                          \
    }
GEMV_MANY_FOR_TYPE(ROPS_TYPE_F32)
GEMV_MANY_FOR_TYPE(ROPS_TYPE_F16)
GEMV_MANY_FOR_TYPE(ROPS_TYPE_BF16)

/* ---- prompt matmul: packed panels ---------------------------------------------------------- */

/* 8 weights of a row from column c (c a multiple of 8) as f32, any weight type; q8_0 / q4_0
 * scaled as d * q, one rounding, as the scalar path does. */
static inline __attribute__((always_inline)) __m256 load8_any(enum rops_type type,
                                                              const uint8_t *row, int64_t c) {
    if (type == ROPS_TYPE_Q8_0) {
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)row + c / 32;
        const __m256 q = _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + c % 32))));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), q);
    }
    if (type == ROPS_TYPE_Q4_0) {
        const struct rops_block_q4_0 *b = (const struct rops_block_q4_0 *)row + c / 32;
        const int64_t o = c % 32;
        __m128i raw = _mm_loadl_epi64((const __m128i *)(b->qs + (o & 15)));
        if (o >= 16) raw = _mm_srli_epi16(raw, 4);
        const __m128i q8 = _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(15)), _mm_set1_epi8(8));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), q);
    }
    return load8(type, row, c);
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

/* Rows [r, r + rb) (rb <= ROPS_GEMM_RB), columns [k0, k0 + kt) as f32, column-major:
 * panel[c * ROPS_GEMM_RB + j] = w[r + j][k0 + c], rows past rb up to a multiple of 8 zero.
 * Converting 8 columns of 8 rows and transposing them in registers keeps every row a sequential
 * stream. */
static inline __attribute__((always_inline)) void pack_panel(enum rops_type type,
                                                             const struct rops_mat *w, int64_t r,
                                                             int64_t rb, int64_t k0, int64_t kt,
                                                             float *panel) {
    const int64_t kt8 = kt & ~(int64_t)7;
    for (int64_t g = 0; g < ROPS_GEMM_RB; g += 8) {
        if (g >= rb) break; /* rb <= 8: the 8-row kernel reads no further */
        const uint8_t *rows[8];
        for (int64_t j = 0; j < 8; j++)
            rows[j] =
                (const uint8_t *)w->data + (size_t)(r + g + (g + j < rb ? j : 0)) * w->row_bytes;
        for (int64_t c = 0; c < kt8; c += 8) {
            __m256 v[8];
            for (int j = 0; j < 8; j++)
                v[j] = g + j < rb ? load8_any(type, rows[j], k0 + c) : _mm256_setzero_ps();
            transpose8(v);
            for (int t = 0; t < 8; t++) _mm256_store_ps(panel + (c + t) * ROPS_GEMM_RB + g, v[t]);
        }
        /* the last kt % 8 columns (float types only: block rows are whole blocks) */
        for (int64_t c = kt8; c < kt; c++)
            for (int64_t j = 0; j < 8; j++)
                panel[c * ROPS_GEMM_RB + g + j] =
                    g + j < rb ? rops_weight_at(type, rows[j], k0 + c) : 0.0f;
    }
}

/* y[i][0 .. 8 NV) (+)= the panel's rows times inputs x[i], i < NB, over kt columns (x and y
 * already offset to the tile). The accumulators hold whole outputs, no horizontal sums:
 * per column, NV panel loads and NB broadcasts feed NB x NV FMAs. */
static inline __attribute__((always_inline)) void gemm_kernel(int NV, int NB, const float *panel,
                                                              int64_t kt, const float *x, int64_t k,
                                                              float *y, int64_t m, int64_t rb,
                                                              bool first) {
    /* named accumulators: gcc keeps an indexed array of them in memory across the loop */
    __m256 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = _mm256_setzero_ps();
#define GEMM_STEP(I)                                                                               \
    if (NB > I) {                                                                                  \
        const __m256 xb = _mm256_broadcast_ss(x + I * k + c);                                      \
        a##I##0 = _mm256_fmadd_ps(w0, xb, a##I##0);                                                \
        if (NV == 2) a##I##1 = _mm256_fmadd_ps(w1, xb, a##I##1);                                   \
    }
    for (int64_t c = 0; c < kt; c++) {
        const __m256 w0 = _mm256_load_ps(panel + c * ROPS_GEMM_RB);
        const __m256 w1 = NV == 2 ? _mm256_load_ps(panel + c * ROPS_GEMM_RB + 8) : w0;
        GEMM_STEP(0)
        GEMM_STEP(1)
        GEMM_STEP(2)
        GEMM_STEP(3)
        GEMM_STEP(4)
        GEMM_STEP(5)
    }
#undef GEMM_STEP
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21},
                              {a30, a31}, {a40, a41}, {a50, a51}};
    if (rb == 8 * NV) {
        for (int i = 0; i < NB; i++)
            for (int v = 0; v < NV; v++) {
                float *dst = y + i * m + 8 * v;
                _mm256_storeu_ps(dst, first ? acc[i][v]
                                            : _mm256_add_ps(_mm256_loadu_ps(dst), acc[i][v]));
            }
        return;
    }
    /* a last block of fewer rows */
    float out[6][16];
    for (int i = 0; i < NB; i++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(out[i] + 8 * v, acc[i][v]);
    for (int i = 0; i < NB; i++)
        for (int64_t j = 0; j < rb && j < 8 * NV; j++)
            y[i * m + j] = first ? out[i][j] : y[i * m + j] + out[i][j];
}

#define GEMM_KERNEL(NV, NB)                                                                        \
    static void gemm_##NV##_##NB(const float *panel, int64_t kt, const float *x, int64_t k,        \
                                 float *y, int64_t m, int64_t rb, bool first) {                    \
        gemm_kernel(NV, NB, panel, kt, x, k, y, m, rb, first);                                     \
    }
GEMM_KERNEL(2, 1)
GEMM_KERNEL(2, 2)
GEMM_KERNEL(2, 3)
GEMM_KERNEL(2, 4)
GEMM_KERNEL(2, 5)
GEMM_KERNEL(2, 6)
GEMM_KERNEL(1, 1)
GEMM_KERNEL(1, 2)
GEMM_KERNEL(1, 3)
GEMM_KERNEL(1, 4)
GEMM_KERNEL(1, 5)
GEMM_KERNEL(1, 6)

typedef void (*gemm_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t, int64_t,
                        bool);
static const gemm_fn gemm_kernels[2][6] = {
    {gemm_1_1, gemm_1_2, gemm_1_3, gemm_1_4, gemm_1_5, gemm_1_6},
    {gemm_2_1, gemm_2_2, gemm_2_3, gemm_2_4, gemm_2_5, gemm_2_6},
};

/* Bytes of the first c columns of a row (c a multiple of 32 for the block types). */
static inline int64_t col_bytes(enum rops_type type, int64_t c) {
    switch (type) {
    case ROPS_TYPE_F32:
        return 4 * c;
    case ROPS_TYPE_F16:
    case ROPS_TYPE_BF16:
        return 2 * c;
    case ROPS_TYPE_Q8_0:
        return c / 32 * (int64_t)sizeof(struct rops_block_q8_0);
    default:
        return c / 32 * (int64_t)sizeof(struct rops_block_q4_0);
    }
}

/* Four or more inputs: per block of ROPS_GEMM_RB rows and ROPS_GEMM_KT columns, the weights
 * converted once into a panel in L1, then 6 inputs x 16 rows at a time. */
static inline __attribute__((always_inline)) void gemm_rows(enum rops_type type,
                                                            const struct rops_mat *w,
                                                            const float *x, int64_t n, float *y,
                                                            int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows;
    float panel[ROPS_GEMM_KT * ROPS_GEMM_RB] __attribute__((aligned(32)));
    /* ROPS_NI inputs at a time, so that their tiles stay in L2 while every row block of the
       thread passes over them (all of a prompt's inputs would be read from L3 per row block) */
    for (int64_t i0 = 0; i0 < n; i0 += ROPS_NI) {
        const int64_t i1 = n - i0 < ROPS_NI ? n : i0 + ROPS_NI;
        for (int64_t r = r0; r < r1; r += ROPS_GEMM_RB) {
            const int64_t rb = r1 - r < ROPS_GEMM_RB ? r1 - r : ROPS_GEMM_RB;
            const int nv = rb > 8 ? 2 : 1;
            for (int64_t k0 = 0; k0 < k; k0 += ROPS_GEMM_KT) {
                const int64_t kt = k - k0 < ROPS_GEMM_KT ? k - k0 : ROPS_GEMM_KT;
                pack_panel(type, w, r, rb, k0, kt, panel);
                /* the next panel's weights (next columns, else next rows), a few rows per
                   group of inputs: 16 rows of short streams get little from the hardware
                   prefetcher */
                int64_t pr = r, pk = k0 + ROPS_GEMM_KT;
                if (pk >= k) {
                    pr = r + ROPS_GEMM_RB;
                    pk = 0;
                }
                const int64_t prb = pr < r1 ? (r1 - pr < ROPS_GEMM_RB ? r1 - pr : ROPS_GEMM_RB) : 0;
                const int64_t pkt = k - pk < ROPS_GEMM_KT ? k - pk : ROPS_GEMM_KT;
                const int64_t pbytes = col_bytes(type, pk + pkt) - col_bytes(type, pk);
                const int64_t groups = (i1 - i0 + 5) / 6;
                int64_t g = 0;
                for (int64_t i = i0; i < i1; i += 6) {
                    const int nb = i1 - i < 6 ? (int)(i1 - i) : 6;
                    for (int64_t j = prb * g / groups; j < prb * (g + 1) / groups; j++) {
                        const char *p = (const char *)w->data + (size_t)(pr + j) * w->row_bytes +
                                        col_bytes(type, pk);
                        for (int64_t o = 0; o < pbytes + 63; o += 64)
                            _mm_prefetch(p + o, _MM_HINT_T1);
                    }
                    g++;
                    gemm_kernels[nv - 1][nb - 1](panel, kt, x + i * k + k0, k, y + i * m + r, m, rb,
                                                 k0 == 0);
                }
            }
        }
    }
}

#define GEMM_FOR_TYPE(T)                                                                           \
    static void gemm_##T(const struct rops_mat *w, const float *x, int64_t n, float *y,            \
                         int64_t r0, int64_t r1) {                                                 \
        gemm_rows(T, w, x, n, y, r0, r1);                                                          \
    }
GEMM_FOR_TYPE(ROPS_TYPE_F32)
GEMM_FOR_TYPE(ROPS_TYPE_F16)
GEMM_FOR_TYPE(ROPS_TYPE_BF16)
GEMM_FOR_TYPE(ROPS_TYPE_Q8_0)
GEMM_FOR_TYPE(ROPS_TYPE_Q4_0)

void rops_matmul_rows_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1) {
    const int64_t m = w->n_rows;
    if (n <= 3) {
        switch (w->type) {
        case ROPS_TYPE_F32:
            gemv_ROPS_TYPE_F32(w, x, (int)n, y, r0, r1);
            return;
        case ROPS_TYPE_F16:
            gemv_ROPS_TYPE_F16(w, x, (int)n, y, r0, r1);
            return;
        case ROPS_TYPE_BF16:
            gemv_ROPS_TYPE_BF16(w, x, (int)n, y, r0, r1);
            return;
        default: /* q8_0 / q4_0 inputs this few take rops_matmul_q8_rows_avx2 */
            break;
        }
    }
    if (n <= 7) { /* gemv_many measured faster than the packed kernel up to 6-7 inputs */
        switch (w->type) {
        case ROPS_TYPE_F32:
            gemv_many_ROPS_TYPE_F32(w, x, (int)n, y, r0, r1);
            return;
        case ROPS_TYPE_F16:
            gemv_many_ROPS_TYPE_F16(w, x, (int)n, y, r0, r1);
            return;
        case ROPS_TYPE_BF16:
            gemv_many_ROPS_TYPE_BF16(w, x, (int)n, y, r0, r1);
            return;
        default: /* block weights: the panel below */
            break;
        }
    }
    switch (w->type) {
    case ROPS_TYPE_F32:
        gemm_ROPS_TYPE_F32(w, x, n, y, r0, r1);
        break;
    case ROPS_TYPE_F16:
        gemm_ROPS_TYPE_F16(w, x, n, y, r0, r1);
        break;
    case ROPS_TYPE_BF16:
        gemm_ROPS_TYPE_BF16(w, x, n, y, r0, r1);
        break;
    case ROPS_TYPE_Q8_0:
        gemm_ROPS_TYPE_Q8_0(w, x, n, y, r0, r1);
        break;
    case ROPS_TYPE_Q4_0:
        gemm_ROPS_TYPE_Q4_0(w, x, n, y, r0, r1);
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            for (int64_t r = r0; r < r1; r++) y[i * m + r] = 0.0f;
        break;
    }
}

/* ---- integer dot products (q8_0 / q4_0 weights, quantized inputs) --------------------------- */

/* round(v) half away from zero, as roundf: trunc, plus one where the dropped part is >= 1/2
 * (adding 0.5 then flooring would round 0.49999997 up). */
static inline __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_andnot_ps(sign, v);
    const __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_and_ps(
        _mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ), _mm256_set1_ps(1.0f));
    return _mm256_or_ps(_mm256_add_ps(t, up), _mm256_and_ps(sign, v));
}

void rops_quantize_x_avx2(const float *x, int64_t n_blocks, struct rops_xq8 *out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n_blocks; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i q[4];
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
        /* packs work within 128-bit lanes: the permute puts the 32 bytes back in order */
        const __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(
            (__m256i *)out[b].qs,
            _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        out[b].d = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    }
}

/* The 32 quants of weight block b of a row as signed bytes, and its scale. */
static inline __attribute__((always_inline)) __m256i
block_bytes(enum rops_type type, const uint8_t *row, int64_t b, float *d) {
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

/* Eight int32 sums of four products each, of signed bytes w and x: maddubs takes an unsigned
 * operand, so |w| times x with w's sign (at most 2 x 128 x 127 per pair: no saturation). */
static inline __m256i dot_bytes(__m256i aw, __m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

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
        /* the next block of rows (contiguous after this one), a share per step, so that its
           lines are on their way while this block computes: RB short rows side by side are
           streams too short for the hardware prefetcher */
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
                const __m256i wq = block_bytes(type, rows[j], a->b0 + b, &dw);
                const __m256i aw = _mm256_sign_epi8(wq, wq);
                for (int i = 0; i < NB; i++)
                    acc[j][i] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[i]),
                                        _mm256_cvtepi32_ps(dot_bytes(aw, wq, xv[i])), acc[j][i]);
            }
        }
        for (int64_t j = 0; j < rb; j++)
            for (int i = 0; i < NB; i++) {
                float *dst = &a->y[i * m + r + j];
                *dst = a->accumulate ? *dst + hsum(acc[j][i]) : hsum(acc[j][i]);
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
            q8_rows(T, a, 3, 2, r0, r1);                                                           \
    }
Q8_FOR_TYPE(ROPS_TYPE_Q8_0)
Q8_FOR_TYPE(ROPS_TYPE_Q4_0)

void rops_matmul_q8_rows_avx2(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    if (a->w->type == ROPS_TYPE_Q8_0)
        q8_ROPS_TYPE_Q8_0(a, r0, r1);
    else
        q8_ROPS_TYPE_Q4_0(a, r0, r1);
}

/* ---- the scan ------------------------------------------------------------------------------ */

/* e^x for 8 floats, within a few ulp over the range where e^x is a normal float; inputs below
 * -87 give 0-ish tiny values and above 88 are clamped (the scan only takes e^(dt * A) <= 1).
 * x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial, 2^n into the exponent. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n ln2, with ln2 split in two for precision */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* x / (1 + e^-x) */
static inline __m256 silu8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

/* log(1 + e^x): max(x, 0) + log1p(e^-|x|), the log1p as 2 atanh(u / (2 + u)) by its series
 * (u <= 1, so s = u / (2 + u) <= 1/3 and nine terms reach float precision). */
static inline __m256 softplus8(__m256 x) {
    const __m256 absx = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 u = exp8(_mm256_sub_ps(_mm256_setzero_ps(), absx));
    const __m256 s = _mm256_div_ps(u, _mm256_add_ps(_mm256_set1_ps(2.0f), u));
    const __m256 s2 = _mm256_mul_ps(s, s);
    __m256 p = _mm256_set1_ps(1.0f / 17);
    for (int k = 15; k >= 1; k -= 2) p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / (float)k));
    const __m256 l = _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_mul_ps(s, p));
    return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), l);
}

void rops_softplus_bias_avx2(float *x, const float *bias, int64_t n_rows, int64_t n_cols) {
    for (int64_t i = 0; i < n_rows; i++) {
        float *row = x + i * n_cols;
        int64_t c = 0;
        for (; c + 8 <= n_cols; c += 8)
            _mm256_storeu_ps(row + c, softplus8(_mm256_add_ps(_mm256_loadu_ps(row + c),
                                                              _mm256_loadu_ps(bias + c))));
        for (; c < n_cols; c++) row[c] = rops_softplus(row[c] + bias[c]);
    }
}

/* ---- norms: the sums of the portable path in double, in 8 lanes (two vectors of 4) ------- */

/* sum of x[i] (sq false) or x[i]^2 (sq true) minus mean, for i < k, in double */
static inline double sum_pd(const float *x, int64_t k, double mean, bool sq) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    const __m256d m = _mm256_set1_pd(mean);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256d lo = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m);
        __m256d hi = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), m);
        if (sq) {
            lo = _mm256_mul_pd(lo, lo);
            hi = _mm256_mul_pd(hi, hi);
        }
        s0 = _mm256_add_pd(s0, lo);
        s1 = _mm256_add_pd(s1, hi);
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < k; i++) {
        const double d = (double)x[i] - mean;
        s += sq ? d * d : d;
    }
    return s;
}

void rops_rmsnorm_avx2(const float *x, const float *weight, int64_t k, float eps, float *out) {
    const float scale = (float)(1.0 / sqrt(sum_pd(x, k, 0.0, true) / (double)k + eps));
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (weight) v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < k; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

void rops_layernorm_avx2(const float *x, const float *w, const float *b, int64_t k, float eps,
                         float *out) {
    const double mean = sum_pd(x, k, 0.0, false) / (double)k;
    const double var = sum_pd(x, k, mean, true);
    const float scale = (float)(1.0 / sqrt(var / (double)k + (double)eps));
    const float m = (float)mean;
    const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < k; i++) {
        const float v = (x[i] - m) * scale;
        out[i] = (w ? v * w[i] : v) + (b ? b[i] : 0.0f);
    }
}

/* rops_map's f on 8 values (ops.h: the forms, and their error against the portable path). */
static inline __m256 map8(enum rops_map f, __m256 v) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    switch (f) {
    case ROPS_MAP_SIGMOID:
        return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v))));
    case ROPS_MAP_TANH: {
        /* e^-2|v| <= 1: no overflow, and the sign put back */
        const __m256 sign = _mm256_set1_ps(-0.0f);
        const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign, v)));
        const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
        return _mm256_or_ps(t, _mm256_and_ps(sign, v));
    }
    case ROPS_MAP_SILU:
        return silu8(v);
    case ROPS_MAP_RELU_SQ: {
        const __m256 r = _mm256_max_ps(v, zero);
        return _mm256_mul_ps(r, r);
    }
    case ROPS_MAP_EXP_NEG_EXP:
        return exp8(_mm256_sub_ps(zero, exp8(v)));
    case ROPS_MAP_RWKV7_DECAY:
        return exp8(_mm256_div_ps(_mm256_set1_ps(-0.606531f),
                                  _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v)))));
    case ROPS_MAP_COUNT:
        break;
    }
    return v;
}

/* One row for one f: the switch of map8 is resolved by the compiler per loop (always inlined). */
static inline __attribute__((always_inline)) void map_row8(enum rops_map f, float *row,
                                                           const float *bias, int64_t n_cols) {
    int64_t c = 0;
    for (; c + 8 <= n_cols; c += 8) {
        __m256 v = _mm256_loadu_ps(row + c);
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + c));
        _mm256_storeu_ps(row + c, map8(f, v));
    }
    if (c < n_cols)
        rops_map_rows_scalar(f, row + c, n_cols - c, bias ? bias + c : NULL, n_cols - c, 0, 1);
}

void rops_map_rows_avx2(enum rops_map f, float *x, int64_t ld, const float *bias, int64_t n_cols,
                        int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; i++) {
        float *row = x + i * ld;
        switch (f) {
        case ROPS_MAP_SIGMOID:
            map_row8(ROPS_MAP_SIGMOID, row, bias, n_cols);
            break;
        case ROPS_MAP_TANH:
            map_row8(ROPS_MAP_TANH, row, bias, n_cols);
            break;
        case ROPS_MAP_SILU:
            map_row8(ROPS_MAP_SILU, row, bias, n_cols);
            break;
        case ROPS_MAP_RELU_SQ:
            map_row8(ROPS_MAP_RELU_SQ, row, bias, n_cols);
            break;
        case ROPS_MAP_EXP_NEG_EXP:
            map_row8(ROPS_MAP_EXP_NEG_EXP, row, bias, n_cols);
            break;
        case ROPS_MAP_RWKV7_DECAY:
            map_row8(ROPS_MAP_RWKV7_DECAY, row, bias, n_cols);
            break;
        case ROPS_MAP_COUNT:
            break;
        }
    }
}

/* d_conv 4: a sequence's state of 8 channels, 3 inputs each (24 floats, channel-major), to and
 * from three lag vectors, each lane picked from the vector that holds it by a permute of each
 * source and two blends (ops_avx512.c: the scalar copies were most of a generation token's
 * conv). Output o of a conversion: lane l from source src(o, l), lane lane(o, l). */
struct conv3_pick {
    __m256i idx[3][3]; /* [output][source] */
    __m256 from1[3], from2[3];
};

static void conv3_pick_init(struct conv3_pick *p, bool deinterleave) {
    for (int o = 0; o < 3; o++) {
        int idx[3][8] = {{0}}, m1[8], m2[8];
        for (int l = 0; l < 8; l++) {
            /* deinterleave: lag o's channel l is element 3l + o of the 24; interleave: element
               8o + l is channel (8o + l) / 3's lag (8o + l) % 3 */
            const int e = deinterleave ? 3 * l + o : 8 * o + l;
            const int src = deinterleave ? e / 8 : e % 3, lane = deinterleave ? e % 8 : e / 3;
            idx[src][l] = lane;
            m1[l] = src == 1 ? -1 : 0;
            m2[l] = src == 2 ? -1 : 0;
        }
        for (int v = 0; v < 3; v++) p->idx[o][v] = _mm256_loadu_si256((const __m256i *)idx[v]);
        p->from1[o] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)m1));
        p->from2[o] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)m2));
    }
}

static inline __m256 conv3_pick(const struct conv3_pick *p, int o, __m256 s0, __m256 s1,
                                __m256 s2) {
    const __m256 a = _mm256_permutevar8x32_ps(s0, p->idx[o][0]),
                 b = _mm256_permutevar8x32_ps(s1, p->idx[o][1]),
                 c = _mm256_permutevar8x32_ps(s2, p->idx[o][2]);
    return _mm256_blendv_ps(_mm256_blendv_ps(a, b, p->from1[o]), c, p->from2[o]);
}

/* rops_conv_seq_begin for d_conv 4 */
static const float *conv3_seq_begin(const struct rops_conv_args *a, const struct conv3_pick *p,
                                    int64_t s, int64_t c0, int64_t nc, float *prev) {
    const float *st = a->state + (s * a->d_inner + c0) * 3;
    int64_t j = 0;
    for (; j + 8 <= nc; j += 8) {
        const __m256 A = _mm256_loadu_ps(st + 3 * j), B = _mm256_loadu_ps(st + 3 * j + 8),
                     C = _mm256_loadu_ps(st + 3 * j + 16);
        for (int k = 0; k < 3; k++) _mm256_storeu_ps(prev + k * nc + j, conv3_pick(p, k, A, B, C));
    }
    return rops_conv_seq_begin(a, s, c0, nc, j, prev); /* the last channels */
}

/* rops_conv_seq_end for d_conv 4 */
static void conv3_seq_end(const struct rops_conv_args *a, const struct conv3_pick *p, int64_t s,
                          int64_t c0, int64_t nc, const float *x, const float *prev) {
    float *st = a->state + (s * a->d_inner + c0) * 3;
    const float *r[3];
    for (int k = 0; k < 3; k++) r[k] = rops_conv_row(a, x, prev, nc, a->n_tok - 3 + k);
    int64_t j = 0;
    for (; j + 8 <= nc; j += 8) {
        const __m256 R0 = _mm256_loadu_ps(r[0] + j), R1 = _mm256_loadu_ps(r[1] + j),
                     R2 = _mm256_loadu_ps(r[2] + j);
        for (int v = 0; v < 3; v++)
            _mm256_storeu_ps(st + 3 * j + 8 * v, conv3_pick(p, v, R0, R1, R2));
    }
    rops_conv_seq_end(a, s, c0, nc, j, x, prev); /* the last channels */
}

/* The conv in token order (ops_avx512.c says why): a thread's channels of one token, then the
 * next, 8 at a time, the last ones by masked lanes; the weights lag-major (w_lag, else made per
 * call), the states turned so per call. Sums: the bias, then the oldest input first. */
void rops_conv_channels_avx2(const struct rops_conv_args *a, int64_t c0, int64_t c1) {
    const int64_t K = a->d_conv, n_prev = K - 1, Di = a->d_inner, nc = c1 - c0;
    float stack[ROPS_CONV_STACK] __attribute__((aligned(64)));
    struct rops_conv_lag lag;
    if (K < 2 || K > 8 || !rops_conv_lag_begin(a, c0, nc, stack, ROPS_CONV_STACK, &lag)) {
        /* windows this long or short are not Mamba's, or no memory: the plain path */
        rops_conv_channels_scalar(a, c0, c1);
        return;
    }
    const float *wt = lag.w;
    const int64_t wld = lag.ld;
    float *prev = lag.prev; /* the state's inputs, lag-major: prev + k * nc, oldest first */
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nc % 8)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    struct conv3_pick pin, pout;
    if (K == 4) conv3_pick_init(&pin, true), conv3_pick_init(&pout, false);
    for (int64_t s = 0; s < a->n_seqs; s++) {
        const float *x = K == 4 ? conv3_seq_begin(a, &pin, s, c0, nc, prev)
                                : rops_conv_seq_begin(a, s, c0, nc, 0, prev);
        for (int64_t t = 0; t < a->n_tok; t++) {
            const float *in[8];
            for (int64_t k = 0; k < K; k++) in[k] = rops_conv_row(a, x, prev, nc, t - n_prev + k);
            float *out = a->xc + (s * a->n_tok + t) * Di + c0;
            int64_t j = 0;
            for (; j + 8 <= nc; j += 8) {
                __m256 sum = _mm256_loadu_ps(a->b + c0 + j);
                for (int64_t k = 0; k < K; k++)
                    sum = _mm256_fmadd_ps(_mm256_loadu_ps(wt + k * wld + j),
                                          _mm256_loadu_ps(in[k] + j), sum);
                _mm256_storeu_ps(out + j, silu8(sum));
            }
            if (j < nc) {
                __m256 sum = _mm256_maskload_ps(a->b + c0 + j, tail);
                for (int64_t k = 0; k < K; k++)
                    sum = _mm256_fmadd_ps(_mm256_maskload_ps(wt + k * wld + j, tail),
                                          _mm256_maskload_ps(in[k] + j, tail), sum);
                _mm256_maskstore_ps(out + j, tail, silu8(sum));
            }
            rops_conv_save(a, s, t, c0, nc, in);
        }
        if (K == 4)
            conv3_seq_end(a, &pout, s, c0, nc, x, prev);
        else
            rops_conv_seq_end(a, s, c0, nc, 0, x, prev);
    }
    rops_conv_lag_end(&lag);
}

void rops_scan_channels_avx2(const struct rops_scan_args *a, int64_t c0, int64_t c1) {
    const int64_t Di = a->d_inner, N = a->d_state;
    if (N % 8 != 0) { /* the vector path takes whole vectors of states */
        rops_scan_channels_scalar(a, c0, c1);
        return;
    }
    for (int64_t s = 0; s < a->n_seqs; s++) {
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *xt = a->x + t * Di, *dtt = a->dt + t * Di, *zt = a->z + t * a->z_stride;
            const float *Bt = a->B + t * a->bc_stride, *Ct = a->C + t * a->bc_stride;
            float *yt = a->y + t * Di;
            for (int64_t c = c0; c < c1; c++) {
                float *sc = a->state + (s * Di + c) * N;
                const float *Ac = a->A + c * N;
                const __m256 dt = _mm256_set1_ps(dtt[c]), dx = _mm256_set1_ps(dtt[c] * xt[c]);
                __m256 acc = _mm256_setzero_ps();
                for (int64_t n = 0; n < N; n += 8) {
                    const __m256 dA = exp8(_mm256_mul_ps(dt, _mm256_loadu_ps(Ac + n)));
                    __m256 st = _mm256_mul_ps(_mm256_loadu_ps(sc + n), dA);
                    st = _mm256_fmadd_ps(_mm256_loadu_ps(Bt + n), dx, st);
                    _mm256_storeu_ps(sc + n, st);
                    acc = _mm256_fmadd_ps(st, _mm256_loadu_ps(Ct + n), acc);
                }
                yt[c] = hsum(acc) + a->D[c] * xt[c];
            }
            /* the gate, 8 channels at a time */
            int64_t c = c0;
            for (; c + 8 <= c1; c += 8)
                _mm256_storeu_ps(
                    yt + c, _mm256_mul_ps(_mm256_loadu_ps(yt + c), silu8(_mm256_loadu_ps(zt + c))));
            for (; c < c1; c++) yt[c] *= rops_silu(zt[c]);
            float *dst = a->save ? a->save[t] : NULL;
            if (dst)
                memcpy(dst + c0 * N, a->state + (s * Di + c0) * N,
                       sizeof(float) * (size_t)((c1 - c0) * N));
        }
    }
}

/* ---- machine probes ------------------------------------------------------------------------ */

double rops_probe_fma_avx2(int64_t iters) {
    /* 10 independent vector chains: FMA latency (4-5 cycles) x 2 ports */
    __m256 a[10];
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int j = 0; j < 10; j++) a[j] = _mm256_set1_ps(1.0f + (float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 10; j++) a[j] = _mm256_fmadd_ps(a[j], b, c);
    __m256 s = a[0];
    for (int j = 1; j < 10; j++) s = _mm256_add_ps(s, a[j]);
    volatile float sink = hsum(s);
    (void)sink;
    return (double)iters * 10 * 8 * 2;
}

float rops_probe_sum_avx2(const float *p, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* Mamba-2's scan: per channel its d_state states as vectors, as the Mamba-1 scan, with one
 * decay per head instead of one exp per state. */
void rops_scan2_heads_avx2(const struct rops_scan2_args *a, int64_t h0, int64_t h1) {
    if (a->d_state % 8 != 0) { /* whole vectors of states only */
        rops_scan2_heads_scalar(a, h0, h1);
        return;
    }
    const int64_t P = a->d_inner / a->n_head, N = a->d_state;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *x = a->xbc + t * a->xbc_stride;
            for (int64_t h = h0; h < h1; h++) {
                const int64_t g = h / (a->n_head / a->n_group);
                const float *B = x + a->d_inner + g * N,
                            *C = x + a->d_inner + a->n_group * N + g * N;
                const float dt = a->dt[t * a->n_head + h];
                const __m256 dA = _mm256_set1_ps(expf(dt * a->A[h]));
                for (int64_t p = 0; p < P; p++) {
                    const int64_t c = h * P + p;
                    float *sc = a->state + (s * a->d_inner + c) * N;
                    const __m256 dx = _mm256_set1_ps(dt * x[c]);
                    __m256 acc = _mm256_setzero_ps();
                    for (int64_t n = 0; n < N; n += 8) {
                        __m256 st = _mm256_mul_ps(_mm256_loadu_ps(sc + n), dA);
                        st = _mm256_fmadd_ps(_mm256_loadu_ps(B + n), dx, st);
                        _mm256_storeu_ps(sc + n, st);
                        acc = _mm256_fmadd_ps(st, _mm256_loadu_ps(C + n), acc);
                    }
                    a->y[t * a->d_inner + c] = hsum(acc) + a->D[h] * x[c];
                }
                float *dst = a->save ? a->save[t] : NULL;
                if (dst)
                    memcpy(dst + h * P * N, a->state + (s * a->d_inner + h * P) * N,
                           sizeof(float) * (size_t)(P * N));
            }
        }
}

/* ---- the chunked Mamba-2 scan's block products (ops_ssd.c) --------------------------------- */

/* The first w lanes (1..8) of a vector: the mask of a last partial vector of columns. */
static inline __m256i ssd_lanes(int64_t w) {
    static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(bits + 8 - w));
}

/* Rows [i0, i0 + MR) x columns [j0, j0 + 8 NV) of rops_ssd_mm, the last vector of columns
 * masked when MASKED (b read and c written only in its lanes). The accumulators are the
 * outputs (as gemm_kernel): per kk, NV loads of b and MR broadcasts of a feed MR x NV FMAs. */
static inline __attribute__((always_inline)) void ssd_tile(int MR, int NV, bool MASKED,
                                                           const struct rops_ssd_mm *p, int64_t i0,
                                                           int64_t j0, int64_t kend, __m256i mask) {
    const float *a = p->a + i0 * p->lda, *b = p->b + j0;
    const int64_t lda = p->lda, ldb = p->ldb;
    __m256 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = _mm256_setzero_ps();
#define SSD_STEP(I)                                                                                \
    if (MR > I) {                                                                                  \
        const __m256 av = _mm256_broadcast_ss(a + I * lda + kk);                                   \
        a##I##0 = _mm256_fmadd_ps(av, b0, a##I##0);                                                \
        if (NV == 2) a##I##1 = _mm256_fmadd_ps(av, b1, a##I##1);                                   \
    }
    for (int64_t kk = 0; kk < kend; kk++) {
        const float *bk = b + kk * ldb;
        const __m256 b0 = MASKED && NV == 1 ? _mm256_maskload_ps(bk, mask) : _mm256_loadu_ps(bk);
        const __m256 b1 = NV == 1  ? b0
                          : MASKED ? _mm256_maskload_ps(bk + 8, mask)
                                   : _mm256_loadu_ps(bk + 8);
        SSD_STEP(0)
        SSD_STEP(1)
        SSD_STEP(2)
        SSD_STEP(3)
        SSD_STEP(4)
        SSD_STEP(5)
    }
#undef SSD_STEP
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21},
                              {a30, a31}, {a40, a41}, {a50, a51}};
    const __m256 beta = _mm256_set1_ps(p->beta);
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) {
            float *dst = p->c + (i0 + i) * p->ldc + j0 + 8 * v;
            const bool part = MASKED && v == NV - 1;
            __m256 r = acc[i][v];
            if (p->rowscale) r = _mm256_mul_ps(r, _mm256_broadcast_ss(p->rowscale + i0 + i));
            if (p->accumulate)
                r = _mm256_fmadd_ps(beta,
                                    part ? _mm256_maskload_ps(dst, mask) : _mm256_loadu_ps(dst), r);
            if (part)
                _mm256_maskstore_ps(dst, mask, r);
            else
                _mm256_storeu_ps(dst, r);
        }
}

#define SSD_TILE(MR, NV, MASKED, NAME)                                                             \
    static void NAME(const struct rops_ssd_mm *p, int64_t i0, int64_t j0, int64_t kend,            \
                     __m256i mask) {                                                               \
        ssd_tile(MR, NV, MASKED, p, i0, j0, kend, mask);                                           \
    }
#define SSD_TILES(MR)                                                                              \
    SSD_TILE(MR, 2, false, ssd_tile_##MR##_16)                                                     \
    SSD_TILE(MR, 2, true, ssd_tile_##MR##_16m)                                                     \
    SSD_TILE(MR, 1, false, ssd_tile_##MR##_8)                                                      \
    SSD_TILE(MR, 1, true, ssd_tile_##MR##_8m)
SSD_TILES(1)
SSD_TILES(2)
SSD_TILES(3)
SSD_TILES(4)
SSD_TILES(5)
SSD_TILES(6)
#undef SSD_TILES
#undef SSD_TILE

typedef void (*ssd_tile_fn)(const struct rops_ssd_mm *, int64_t, int64_t, int64_t, __m256i);
/* [16 columns, 9-15, 8, 1-7][rows - 1] */
static const ssd_tile_fn ssd_tiles[4][6] = {
    {ssd_tile_1_16, ssd_tile_2_16, ssd_tile_3_16, ssd_tile_4_16, ssd_tile_5_16, ssd_tile_6_16},
    {ssd_tile_1_16m, ssd_tile_2_16m, ssd_tile_3_16m, ssd_tile_4_16m, ssd_tile_5_16m,
     ssd_tile_6_16m},
    {ssd_tile_1_8, ssd_tile_2_8, ssd_tile_3_8, ssd_tile_4_8, ssd_tile_5_8, ssd_tile_6_8},
    {ssd_tile_1_8m, ssd_tile_2_8m, ssd_tile_3_8m, ssd_tile_4_8m, ssd_tile_5_8m, ssd_tile_6_8m},
};

void rops_ssd_mm_avx2(const struct rops_ssd_mm *p) {
    for (int64_t i0 = 0; i0 < p->m; i0 += 6) {
        const int64_t mr = p->m - i0 < 6 ? p->m - i0 : 6;
        const int64_t kend = p->tril_a && i0 + mr < p->k ? i0 + mr : p->k;
        const int64_t nend = p->tril_c && i0 + mr < p->n ? i0 + mr : p->n;
        for (int64_t j0 = 0; j0 < nend; j0 += 16) {
            const int64_t w = nend - j0 < 16 ? nend - j0 : 16;
            const int kind = w == 16 ? 0 : w > 8 ? 1 : w == 8 ? 2 : 3;
            const __m256i mask = ssd_lanes(kind == 1 ? w - 8 : kind == 3 ? w : 8);
            ssd_tiles[kind][mr - 1](p, i0, j0, kend, mask);
        }
    }
}

void rops_ssd_decays_avx2(int64_t len, int64_t ld, const float *g, const float *cs, const float *cl,
                          const float *dts, float d, float *m, float *ein, float *eout) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t t = 0; t < len; t++) {
        const __m256 ct = _mm256_set1_ps(cs[t]), lt = _mm256_set1_ps(cl[t]);
        const __m256i upto = _mm256_set1_epi32((int32_t)t + 1);
        for (int64_t s = 0; s + 8 <= ld; s += 8) {
            if (s > t) {
                _mm256_storeu_ps(m + t * ld + s, _mm256_setzero_ps());
                continue;
            }
            const __m256 seg = _mm256_add_ps(_mm256_sub_ps(ct, _mm256_loadu_ps(cs + s)),
                                             _mm256_sub_ps(lt, _mm256_loadu_ps(cl + s)));
            const __m256 v =
                _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(g + t * ld + s), exp8(seg)),
                              _mm256_loadu_ps(dts + s));
            /* lanes s <= t; an AND, so that whatever g holds above the diagonal gives 0 */
            const __m256i keep =
                _mm256_cmpgt_epi32(upto, _mm256_add_epi32(iota, _mm256_set1_epi32((int32_t)s)));
            _mm256_storeu_ps(m + t * ld + s, _mm256_and_ps(v, _mm256_castsi256_ps(keep)));
        }
        m[t * ld + t] += d;
    }
    const __m256 ce = _mm256_set1_ps(cs[len - 1]), le = _mm256_set1_ps(cl[len - 1]);
    for (int64_t s = 0; s + 8 <= ld; s += 8) {
        const __m256 c = _mm256_loadu_ps(cs + s), l = _mm256_loadu_ps(cl + s);
        _mm256_storeu_ps(ein + s, exp8(_mm256_add_ps(c, l)));
        const __m256 seg = _mm256_add_ps(_mm256_sub_ps(ce, c), _mm256_sub_ps(le, l));
        _mm256_storeu_ps(eout + s, _mm256_mul_ps(exp8(seg), _mm256_loadu_ps(dts + s)));
    }
}

void rops_ssd_scale_rows_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds,
                              const float *scale, float *dst, int64_t ldd) {
    for (int64_t i = 0; i < rows; i++) {
        const __m256 e = _mm256_set1_ps(scale[i]);
        const float *si = src + i * lds;
        float *di = dst + i * ldd;
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8)
            _mm256_storeu_ps(di + j, _mm256_mul_ps(e, _mm256_loadu_ps(si + j)));
        for (; j < cols; j++) di[j] = scale[i] * si[j];
    }
}

void rops_ssd_transpose_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                             int64_t ldd) {
    const int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
    for (int64_t i = 0; i < r8; i += 8)
        for (int64_t j = 0; j < c8; j += 8) {
            __m256 v[8];
            for (int q = 0; q < 8; q++) v[q] = _mm256_loadu_ps(src + (i + q) * lds + j);
            transpose8(v);
            for (int q = 0; q < 8; q++) _mm256_storeu_ps(dst + (j + q) * ldd + i, v[q]);
        }
    /* the edges */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = i < r8 ? c8 : 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* ---- RWKV's WKV heads (ops_rwkv.c) -------------------------------------------------------- */

/* Every inner loop runs over a contiguous row of the state: the portable loop eight lanes at a
 * time, with a scalar tail for head sizes that are not multiples of 8. */

static void wkv6_head_avx2(float *S, const float *r, const float *k, const float *v, const float *w,
                           const float *u, int64_t hs, float *y) {
    const int64_t hv = hs / 8 * 8;
    for (int64_t j = 0; j < hs; j++) y[j] = 0.0f;
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        const float ri = r[i], ki = k[i], wi = w[i], uki = u[i] * k[i];
        const __m256 vr = _mm256_set1_ps(ri), vk = _mm256_set1_ps(ki), vw = _mm256_set1_ps(wi),
                     vu = _mm256_set1_ps(uki);
        for (int64_t j = 0; j < hv; j += 8) {
            const __m256 vv = _mm256_loadu_ps(v + j), s = _mm256_loadu_ps(row + j);
            /* y += r * (s + u k v);  s = w s + k v */
            _mm256_storeu_ps(
                y + j, _mm256_fmadd_ps(vr, _mm256_fmadd_ps(vu, vv, s), _mm256_loadu_ps(y + j)));
            _mm256_storeu_ps(row + j, _mm256_fmadd_ps(vw, s, _mm256_mul_ps(vk, vv)));
        }
        for (int64_t j = hv; j < hs; j++) {
            y[j] += ri * (row[j] + uki * v[j]);
            row[j] = wi * row[j] + ki * v[j];
        }
    }
}

/* ---- WKV7 ---------------------------------------------------------------------------------- */

/* The sums of four vectors each: [sum a, sum b, sum c, sum d]. */
static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* One token of a head of up to 64 keys, a multiple of 8: four rows at a time, both of a row's
 * sums taken in one pass over the old state, the output by
 *   y[i] = sum_j S[i][j] (w[j] r[j]) + v[i] (k . r) + sa[i] (b . r)
 * (the new state's row times r, expanded), so that no row's update waits on its own sums
 * being added across the lanes, and the update loads w, k and b once for the four rows:
 * bench_isa "wkv7 12x64 tokens=1" 11.5 -> 5.6 us (a row at a time, two passes each). */
static void wkv7_head_rows4_avx2(float *S, const float *r, const float *w, const float *k,
                                 const float *v, const float *a, const float *b, int64_t hs,
                                 float *y) {
    float wr[64] __attribute__((aligned(32)));
    __m256 kr = _mm256_setzero_ps(), br = _mm256_setzero_ps();
    for (int64_t j = 0; j < hs; j += 8) {
        const __m256 rj = _mm256_loadu_ps(r + j);
        _mm256_store_ps(wr + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), rj));
        kr = _mm256_fmadd_ps(_mm256_loadu_ps(k + j), rj, kr);
        br = _mm256_fmadd_ps(_mm256_loadu_ps(b + j), rj, br);
    }
    const float skr = hsum(kr), sbr = hsum(br);
    for (int64_t i0 = 0; i0 < hs; i0 += 4) {
        float *row = S + i0 * hs;
        __m256 sa0 = _mm256_setzero_ps(), sa1 = sa0, sa2 = sa0, sa3 = sa0;
        __m256 y0 = sa0, y1 = sa0, y2 = sa0, y3 = sa0;
        for (int64_t j = 0; j < hs; j += 8) {
            const __m256 aj = _mm256_loadu_ps(a + j), wrj = _mm256_load_ps(wr + j);
            const __m256 s0 = _mm256_loadu_ps(row + j), s1 = _mm256_loadu_ps(row + hs + j),
                         s2 = _mm256_loadu_ps(row + 2 * hs + j),
                         s3 = _mm256_loadu_ps(row + 3 * hs + j);
            sa0 = _mm256_fmadd_ps(aj, s0, sa0), y0 = _mm256_fmadd_ps(wrj, s0, y0);
            sa1 = _mm256_fmadd_ps(aj, s1, sa1), y1 = _mm256_fmadd_ps(wrj, s1, y1);
            sa2 = _mm256_fmadd_ps(aj, s2, sa2), y2 = _mm256_fmadd_ps(wrj, s2, y2);
            sa3 = _mm256_fmadd_ps(aj, s3, sa3), y3 = _mm256_fmadd_ps(wrj, s3, y3);
        }
        float sa[4], ys[4];
        _mm_storeu_ps(sa, hsum4(sa0, sa1, sa2, sa3));
        _mm_storeu_ps(ys, hsum4(y0, y1, y2, y3));
        __m256 bsa[4], bvi[4];
        for (int q = 0; q < 4; q++) {
            y[i0 + q] = ys[q] + v[i0 + q] * skr + sa[q] * sbr;
            bsa[q] = _mm256_set1_ps(sa[q]);
            bvi[q] = _mm256_set1_ps(v[i0 + q]);
        }
        for (int64_t j = 0; j < hs; j += 8) { /* S = S w + v k + sa b, the four rows */
            const __m256 wj = _mm256_loadu_ps(w + j), kj = _mm256_loadu_ps(k + j),
                         bj = _mm256_loadu_ps(b + j);
            for (int q = 0; q < 4; q++) {
                float *p = row + q * hs + j;
                __m256 st = _mm256_mul_ps(_mm256_loadu_ps(p), wj);
                st = _mm256_fmadd_ps(bvi[q], kj, st);
                _mm256_storeu_ps(p, _mm256_fmadd_ps(bsa[q], bj, st));
            }
        }
    }
}

static void wkv7_head_avx2(float *S, const float *r, const float *w, const float *k, const float *v,
                           const float *a, const float *b, int64_t hs, float *y) {
    if (hs % 8 == 0 && hs <= 64) {
        wkv7_head_rows4_avx2(S, r, w, k, v, a, b, hs, y);
        return;
    }
    const int64_t hv = hs / 8 * 8;
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        __m256 vsa = _mm256_setzero_ps();
        for (int64_t j = 0; j < hv; j += 8)
            vsa = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(row + j), vsa);
        float sa = hsum(vsa);
        for (int64_t j = hv; j < hs; j++) sa += a[j] * row[j];
        const float vi = v[i];
        const __m256 bsa = _mm256_set1_ps(sa), bvi = _mm256_set1_ps(vi);
        __m256 vacc = _mm256_setzero_ps();
        for (int64_t j = 0; j < hv; j += 8) {
            __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + j), _mm256_loadu_ps(w + j));
            s = _mm256_fmadd_ps(bvi, _mm256_loadu_ps(k + j), s);
            s = _mm256_fmadd_ps(bsa, _mm256_loadu_ps(b + j), s);
            _mm256_storeu_ps(row + j, s);
            vacc = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + j), vacc);
        }
        float acc = hsum(vacc);
        for (int64_t j = hv; j < hs; j++) {
            row[j] = row[j] * w[j] + vi * k[j] + sa * b[j];
            acc += row[j] * r[j];
        }
        y[i] = acc;
    }
}

/* ---- WKV over a run of tokens (ops_wkv.h) -------------------------------------------------- */

static inline unsigned wkv_outside_avx2(__m256 x) {
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(0x1p-60f), _CMP_GT_OQ),
                                    _mm256_cmp_ps(x, _mm256_set1_ps(0x1p60f), _CMP_LT_OQ));
    return ~(unsigned)_mm256_movemask_ps(in) & 0xffu;
}

#define WKV_V            __m256
#define WKV_L            8
#define WKV_LOAD(p)      _mm256_loadu_ps(p)
#define WKV_STORE(p, x)  _mm256_storeu_ps(p, x)
#define WKV_SET1(x)      _mm256_set1_ps(x)
#define WKV_ZERO()       _mm256_setzero_ps()
#define WKV_MUL(a, b)    _mm256_mul_ps(a, b)
#define WKV_DIV(a, b)    _mm256_div_ps(a, b)
#define WKV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define WKV_HSUM(x)      hsum(x)
#define WKV_OUTSIDE(x)   wkv_outside_avx2(x)
#define WKV6_IB          4 /* 32 values of a row: 4 sums + 4 of v in 16 registers */
#define WKV7_IB          2 /* 16 values: v, sa, y and the next sa, 2 each */
#define WKV_NAME(x)      x##_avx2
#include "ops_wkv.h"

void rops_wkv6_run_avx2(const struct rops_wkv_run *p) {
    if (p->hs % (WKV6_IB * WKV_L) == 0 && p->hs <= WKV_MAX_HS)
        wkv6_run_fast_avx2(p);
    else
        rops_wkv_run_tokens(p, wkv6_head_avx2, NULL);
}

void rops_wkv7_run_avx2(const struct rops_wkv_run *p) {
    if (p->hs % (WKV7_IB * WKV_L) == 0 && p->hs <= WKV_MAX_HS && p->n >= WKV7_RUN_MIN)
        wkv7_run_fast_avx2(p);
    else
        rops_wkv_run_tokens(p, NULL, wkv7_head_avx2);
}

static const struct rops_kernels table = {
    .isa = ROPS_ISA_AVX2,
    .matmul_rows = rops_matmul_rows_avx2,
    .q8_rows = rops_matmul_q8_rows_avx2,
    .quantize_x = rops_quantize_x_avx2,
    .softplus_bias = rops_softplus_bias_avx2,
    .layernorm = rops_layernorm_avx2,
    .rmsnorm = rops_rmsnorm_avx2,
    .map_rows = rops_map_rows_avx2,
    .conv_channels = rops_conv_channels_avx2,
    .scan_channels = rops_scan_channels_avx2,
    .scan2_heads = rops_scan2_heads_avx2,
    .ssd_mm = rops_ssd_mm_avx2,
    .ssd_decays = rops_ssd_decays_avx2,
    .ssd_scale_rows = rops_ssd_scale_rows_avx2,
    .ssd_transpose = rops_ssd_transpose_avx2,
    .wkv6_run = rops_wkv6_run_avx2,
    .wkv7_run = rops_wkv7_run_avx2,
    .probe_fma = rops_probe_fma_avx2,
    .probe_sum = rops_probe_sum_avx2,
};

const struct rops_kernels *rops_kernels_avx2(void) {
    return &table;
}

#else /* no AVX2 kernels in this build */

const struct rops_kernels *rops_kernels_avx2(void) {
    return NULL;
}

#endif
