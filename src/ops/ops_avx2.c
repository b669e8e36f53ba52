/*
 * The AVX2 + FMA + F16C kernels (see ops.h). This file alone is compiled with -mavx2 -mfma
 * -mf16c; nothing in it runs unless ops_probe.c found those on the CPU. It holds what is written
 * for 8 lanes by hand: the matrix products, the chunked scan's transpose and the WKV kernels of
 * one token (which the AVX-512 table takes too); the other kernels are x86/kernels.inc's body at
 * 8 lanes, and the probes x86/probe.h's. Its table (ROPS_KERNELS_AVX2, ops_impl.h, which the
 * AVX-VNNI table shares) is at the end.
 *
 * Matmul of float weights, four or more inputs: a block of 16 weight rows, ROPS_GEMM_KT columns
 * at a time, is converted to f32 once (f16 with vcvtph2ps, bf16 by a shift) into a column-major
 * panel, then 6 inputs x 16 rows at a time run on 12 accumulators that
 * are the outputs themselves (no horizontal sums): per column two panel loads and six
 * broadcasts feed 12 FMAs (was 4 rows x 3 inputs of dot products: ~150 -> ~195 GFLOP/s on 2
 * threads). One to three inputs (generation) skip the panel: each
 * weight is converted in registers on its way to its FMAs; one input reads one row
 * at a time (one sequential stream for the hardware prefetcher), the others blocks of rows side
 * by side with the next block prefetched (2.4x the read bandwidth of one thread without, on the
 * machine of issue 6). Block weights: integer dots with the quantized inputs (maddubs;
 * x86/q8.h for q8_0 / q4_0, x86/qdot.h for the other types), for any number of inputs.
 */
#include "ops_impl.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "ops_quants.h"

#define ROPS_VEC_WIDTH 8
#include "x86/pack.h"
#include "x86/vec.h"

/* ---- matmul -------------------------------------------------------------------------------- */

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
        float s = vec_hsum(acc[0]);
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
        const uint8_t *next = rows[0] + (size_t)RB * w->row_bytes; /* see x86/q8.h */
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
                float s = vec_hsum(acc[j][i]);
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
            float s = vec_hsum(acc[i]);
            for (int64_t c = k8; c < k; c++) s += rops_weight_at(type, row, c) * x[i * k + c];
            y[i * m + r] = s;
        }
    }
}

/* vec_hsum8 of each of v[0..7], as one vector: the same adds on the same pairs (lanes i and
 * i + 4, then 0 + 2 and 1 + 3 of those, then the two), 8 rows' sums at a time by shuffles. */
static inline __m256 hsum8_rows(const __m256 v[8]) {
    __m256 p[4];
    for (int i = 0; i < 4; i++)
        p[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    __m256 q[2];
    for (int i = 0; i < 2; i++)
        q[i] = _mm256_add_ps(_mm256_shuffle_ps(p[2 * i], p[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(p[2 * i], p[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* rows 0 2 4 6 | 1 3 5 7 */
    return _mm256_permutevar8x32_ps(_mm256_hadd_ps(q[0], q[1]),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* NI inputs, each summed exactly as gemv_rows sums one (U = 4: the same FMAs into the same four
 * accumulators, the same adds and tail), so that each gets the bits it gets alone
 * (rops_exec.one_order); each 8 weights are loaded and converted once for the NI of them. Where
 * the rows have no tail (k a multiple of 8), 8 rows' horizontal sums are taken together
 * (hsum8_rows): on LoRA's 64-column matrices they cost as much as the products. */
static inline __attribute__((always_inline)) void gemv_each_rows(enum rops_type type,
                                                                 const struct rops_mat *w,
                                                                 const float *x, int NI, float *y,
                                                                 int64_t r0, int64_t r1) {
    enum { U = 4 };
    const int64_t k = w->n_cols, m = w->n_rows, k8 = k & ~(int64_t)7;
    const int64_t ku = k8 - k8 % (8 * U);
    __m256 rows[3][8]; /* [input][row of 8]: the summed accumulators */
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        __m256 acc[3][U];
        for (int i = 0; i < NI; i++)
            for (int u = 0; u < U; u++) acc[i][u] = _mm256_setzero_ps();
        int64_t c = 0;
        for (; c < ku; c += 8 * U)
            for (int u = 0; u < U; u++) {
                const __m256 wv = load8(type, row, c + 8 * u);
                for (int i = 0; i < NI; i++)
                    acc[i][u] =
                        _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * k + c + 8 * u), acc[i][u]);
            }
        for (; c < k8; c += 8) {
            const __m256 wv = load8(type, row, c);
            for (int i = 0; i < NI; i++)
                acc[i][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * k + c), acc[i][0]);
        }
        for (int i = 0; i < NI; i++)
            for (int u = 1; u < U; u++) acc[i][0] = _mm256_add_ps(acc[i][0], acc[i][u]);
        const int64_t j = (r - r0) % 8;
        if (k8 == k && r - j + 8 <= r1) { /* a row of a whole 8 without tails */
            for (int i = 0; i < NI; i++) rows[i][j] = acc[i][0];
            if (j == 7)
                for (int i = 0; i < NI; i++)
                    _mm256_storeu_ps(y + i * m + r - 7, hsum8_rows(rows[i]));
            continue;
        }
        for (int i = 0; i < NI; i++) {
            float s = vec_hsum(acc[i][0]);
            for (int64_t c2 = k8; c2 < k; c2++) s += rops_weight_at(type, row, c2) * x[i * k + c2];
            y[i * m + r] = s;
        }
    }
}

#define GEMV_EACH_FOR_TYPE(T)                                                                      \
    static void gemv_each_##T(const struct rops_mat *w, const float *x, int64_t n, float *y,       \
                              int64_t r0, int64_t r1) {                                            \
        const int64_t k = w->n_cols, m = w->n_rows;                                                \
        int64_t i = 0;                                                                             \
        for (; i + 3 <= n; i += 3) gemv_each_rows(T, w, x + i * k, 3, y + i * m, r0, r1);          \
        if (n - i == 2) gemv_each_rows(T, w, x + i * k, 2, y + i * m, r0, r1);                     \
        if (n - i == 1) gemv_each_rows(T, w, x + i * k, 1, y + i * m, r0, r1);                     \
    }
GEMV_EACH_FOR_TYPE(ROPS_TYPE_F32)
GEMV_EACH_FOR_TYPE(ROPS_TYPE_F16)
GEMV_EACH_FOR_TYPE(ROPS_TYPE_BF16)

/* The table's matmul_each: float weights here (block weights sum an input alike for any n). */
void rops_matmul_each_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1) {
    typedef void each_fn(const struct rops_mat *, const float *, int64_t, float *, int64_t,
                         int64_t);
    static each_fn *const by_type[ROPS_TYPE_BF16 + 1] = {
        [ROPS_TYPE_F32] = gemv_each_ROPS_TYPE_F32,
        [ROPS_TYPE_F16] = gemv_each_ROPS_TYPE_F16,
        [ROPS_TYPE_BF16] = gemv_each_ROPS_TYPE_BF16,
    };
    if ((unsigned)w->type <= ROPS_TYPE_BF16 && by_type[w->type]) {
        by_type[w->type](w, x, n, y, r0, r1);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        rops_matmul_rows_avx2(w, x + i * w->n_cols, 1, y + i * w->n_rows, r0, r1);
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

/* Rows [r, r + rb) (rb <= ROPS_GEMM_RB), columns [k0, k0 + kt) as f32, column-major:
 * panel[c * ROPS_GEMM_RB + j] = w[r + j][k0 + c], rows past rb up to a multiple of 8 zero. */
static inline __attribute__((always_inline)) void pack_panel(enum rops_type type,
                                                             const struct rops_mat *w, int64_t r,
                                                             int64_t rb, int64_t k0, int64_t kt,
                                                             float *panel) {
    for (int64_t g = 0; g < ROPS_GEMM_RB; g += 8) {
        if (g >= rb) break; /* rb <= 8: the 8-row kernel reads no further */
        pack8_rows(type, w, r + g, rb - g, k0, kt, ROPS_GEMM_RB, panel + g);
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

void rops_matmul_rows_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1) {
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
        default:
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
    default:
        gemm_ROPS_TYPE_BF16(w, x, n, y, r0, r1);
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

/* rops_quantize_q8_K's bits for finite inputs, 8 lanes at a time: the first value of the
 * largest magnitude sets the scale (a block whose scale would overflow is zeros), iscale * x
 * is rounded half to even by cvtps (the default MXCSR mode, as lrintf's) and clamped at 127,
 * the 16s' sums are of the clamped quants. */
void rops_quantize_q8_K_avx2(const float *x, struct rops_block_q8_K *y, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8)
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        if (!isfinite(127.0f / amax)) { /* as the portable quantizer: a block of zeros */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float max = 0.0f;
        const __m256 am = _mm256_set1_ps(amax);
        for (int j = 0; j < 256; j += 8) {
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), am, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int j = 0; j < 256; j += 32) {
            __m256i q[4];
            for (int u = 0; u < 4; u++)
                q[u] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8 * u))), top);
            /* the two 16s' sums: pairs, then quads, then the halves of the 256 bits */
            __m256i t =
                _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            t = _mm256_hadd_epi32(t, t);
            const __m128i s =
                _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            y[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(s);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(s, 1);
            /* packs work within 128-bit lanes: the permute puts the 32 bytes back in order */
            const __m256i p =
                _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256(
                (__m256i *)(y[i].qs + j),
                _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
        y[i].d = 1.0f / iscale;
    }
}

/* Eight int32 sums of four products each, of signed bytes w and x: maddubs takes an unsigned
 * operand, so |w| times x with w's sign (at most 2 x 128 x 127 per pair: no saturation). */
static inline __m256i dot_bytes(__m256i aw, __m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* u x s summed in fours: maddubs's pairs, then pairs of pairs by vpmaddwd */
#define ROPS_DPBUSD(acc, u, s)                                                                     \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))

#define ROPS_Q8_DOT(aw, w, x) dot_bytes(aw, w, x)
#define ROPS_Q8_NAME          q8_rows_avx2
#include "x86/q8.h"

#define ROPS_QDOT_NAME qdot_rows_avx2
#include "x86/qdot.h"

/* ---- the chunked Mamba-2 scan's transpose (ops_ssd.c) -------------------------------------- */
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
    const float skr = vec_hsum(kr), sbr = vec_hsum(br);
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
        float sa = vec_hsum(vsa);
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
        float acc = vec_hsum(vacc);
        for (int64_t j = hv; j < hs; j++) {
            row[j] = row[j] * w[j] + vi * k[j] + sa * b[j];
            acc += row[j] * r[j];
        }
        y[i] = acc;
    }
}

/* ---- the kernels written once for both widths, the probes ---------------------------------- */

#define VEC_FN
#define VEC_NARROW(f)         f##_scalar
#define VEC_WKV6_TOKENS(p)    rops_wkv_run_tokens(p, wkv6_head_avx2, NULL)
#define VEC_WKV7_TOKENS(p)    rops_wkv_run_tokens(p, NULL, wkv7_head_avx2)
#define WKV6_IB               4  /* 32 values of a row: 4 sums + 4 of v in 16 registers */
#define WKV7_IB               2  /* 16 values: v, sa, y and the next sa, 2 each */
#define ROPS_PROBE_FMA_CHAINS 10 /* FMA latency (4-5 cycles) x 2 ports */
#include "x86/kernels.inc"
#include "x86/probe.h"

static const struct rops_kernels table =
    ROPS_KERNELS_AVX2(ROPS_ISA_AVX2, q8_rows_avx2, qdot_rows_avx2);

const struct rops_kernels *rops_kernels_avx2(void) {
    return &table;
}

#else /* no AVX2 kernels in this build */

const struct rops_kernels *rops_kernels_avx2(void) {
    return NULL;
}

#endif
