/*
 * The AVX-512 kernels (see ops.h). This file alone is compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -mavx512vnni (and AVX2, FMA, F16C); nothing in it runs unless
 * ops_probe.c found those on the CPU and that the OS saves the ZMM registers. It holds the
 * matrix products, written for 16 lanes by hand; the other kernels are x86/kernels.inc's body at
 * 16 lanes, and the probes x86/probe.h's. Its table, rops_kernels_avx512(), is at the end: the
 * jobs it has no kernel of its own for take the AVX2 ones (ops_avx2.c), which every CPU with
 * AVX-512 runs.
 *
 * The products, as the AVX2 ones (ops_avx2.c) with 16 lanes:
 * - one to seven inputs (generation): each weight converted in registers on its way to its
 *   FMAs (f16 by vcvtph2ps, bf16 by a shift); one input takes the AVX2 kernel (one sequential
 *   stream of rows, which read more here), two and three four rows side by side, four to seven
 *   one row at a time with each 16 weights used by every input;
 * - more (prompts): a panel of 32 weight rows x GEMM_KT columns converted to f32 once
 *   (column-major), then 8 inputs x 32 rows at a time on 16 accumulators that are the outputs
 *   themselves: per column two panel loads and eight broadcasts feed 16 FMAs.
 * - block weights, any number of inputs: integer dots by VNNI (x86/q8.h, x86/qdot.h:
 *   vpdpbusd, four byte products summed into each int32 lane in one instruction, where AVX2
 *   takes vpmaddubsw and vpmaddwd); the int32 sums and the float steps after them are the AVX2
 *   kernel's, so the paths give the same bits.
 */
#include "ops_impl.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) &&                        \
    defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__) &&                   \
    defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

#define ROPS_VEC_WIDTH 16
#include "x86/pack.h"
#include "x86/vec.h"

/* Prompt panels: 32 rows (two vectors) x 128 columns of f32, 16 KiB, in L1 beside the inputs'
 * columns. */
#define GEMM_RB 32
#define GEMM_KT 128
/* Inputs per kernel call of the prompt path (accumulators: 8 x 2 vectors). */
#define GEMM_NB 8

/* ---- weights to f32 ------------------------------------------------------------------------ */

/* 16 weights of a float-type row from column c, as f32. */
static inline __attribute__((always_inline)) __m512 load16(enum rops_type type, const uint8_t *row,
                                                           int64_t c) {
    switch (type) {
    case ROPS_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * c)));
    case ROPS_TYPE_BF16: {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * c)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    default:
        return _mm512_loadu_ps((const float *)row + c);
    }
}

/* ---- two to seven inputs ------------------------------------------------------------------ */

/* Four to seven inputs: one weight row at a time, front to back, so that a thread's share of
 * the matrix is one sequential stream. Each 16 weights are converted once in registers and used
 * by the NB inputs' FMAs; U independent accumulators per input hide the FMA latency. With this
 * many FMAs per weight the stream is prefetched ROPS_GEMV_PF_AHEAD bytes ahead (ops_impl.h).
 * Eight inputs and more take the panel path below, which converts the weights once per eight. */
static inline __attribute__((always_inline)) void gemv_rows(enum rops_type type,
                                                            const struct rops_mat *w,
                                                            const float *x, int NB, int U, float *y,
                                                            int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows, k16 = k & ~(int64_t)15;
    const int64_t esz = type == ROPS_TYPE_F32 ? 4 : 2;
    const int64_t ku = k16 - k16 % (16 * U);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        __m512 acc[7][4];
        for (int i = 0; i < NB; i++)
            for (int u = 0; u < U; u++) acc[i][u] = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c < ku; c += 16 * U)
            for (int u = 0; u < U; u++) {
                if (((c + 16 * u) * esz & 63) == 0) /* near a row's end: the next row's lines */
                    _mm_prefetch((const char *)row + (c + 16 * u) * esz + ROPS_GEMV_PF_AHEAD,
                                 _MM_HINT_T0);
                const __m512 wv = load16(type, row, c + 16 * u);
                for (int i = 0; i < NB; i++)
                    acc[i][u] =
                        _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * k + c + 16 * u), acc[i][u]);
            }
        for (; c < k16; c += 16) {
            const __m512 wv = load16(type, row, c);
            for (int i = 0; i < NB; i++)
                acc[i][0] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * k + c), acc[i][0]);
        }
        for (int i = 0; i < NB; i++) {
            __m512 sum = acc[i][0];
            for (int u = 1; u < U; u++) sum = _mm512_add_ps(sum, acc[i][u]);
            float s = _mm512_reduce_add_ps(sum);
            for (int64_t c2 = k16; c2 < k; c2++) s += rops_weight_at(type, row, c2) * x[i * k + c2];
            y[i * m + r] = s;
        }
    }
}

/* Two or three inputs: four rows side by side, so that each input's vector, loaded once, feeds
 * four FMAs, with the next block of four rows prefetched while this one computes. Here the
 * loads, not the stream, bound the loop: on the same Zen 4 this beat one row at a time by
 * 10-15% for two and three inputs (and lost by as much for one). */
static inline __attribute__((always_inline)) void gemv_block(enum rops_type type,
                                                             const struct rops_mat *w,
                                                             const float *x, int NB, int RB,
                                                             float *y, int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows, k16 = k & ~(int64_t)15;
    for (int64_t r = r0; r < r1; r += RB) {
        const int64_t rb = r1 - r < RB ? r1 - r : RB;
        const uint8_t *rows[8];
        for (int64_t j = 0; j < RB; j++)
            rows[j] = (const uint8_t *)w->data + (size_t)(r + (j < rb ? j : 0)) * w->row_bytes;
        __m512 acc[8][3];
        for (int j = 0; j < RB; j++)
            for (int i = 0; i < NB; i++) acc[j][i] = _mm512_setzero_ps();
        /* the next block of rows, a share per step (short row streams side by side are too
           short for the hardware prefetcher; see ops_avx2.c) */
        const uint8_t *next = rows[0] + (size_t)RB * w->row_bytes;
        const int64_t next_end = r + 2 * RB <= r1 ? (int64_t)RB * (int64_t)w->row_bytes : 0;
        const int64_t steps = k16 / 16 > 0 ? k16 / 16 : 1;
        const int64_t per_step = ((next_end + steps - 1) / steps + 63) & ~(int64_t)63;
        for (int64_t c = 0; c < k16; c += 16) {
            for (int64_t o = c / 16 * per_step; o < (c / 16 + 1) * per_step && o < next_end;
                 o += 64)
                _mm_prefetch((const char *)next + o, _MM_HINT_T0);
            __m512 xv[3];
            for (int i = 0; i < NB; i++) xv[i] = _mm512_loadu_ps(x + i * k + c);
            for (int j = 0; j < RB; j++) {
                const __m512 wv = load16(type, rows[j], c);
                for (int i = 0; i < NB; i++) acc[j][i] = _mm512_fmadd_ps(wv, xv[i], acc[j][i]);
            }
        }
        for (int64_t j = 0; j < rb; j++)
            for (int i = 0; i < NB; i++) {
                float s = _mm512_reduce_add_ps(acc[j][i]);
                for (int64_t c = k16; c < k; c++)
                    s += rops_weight_at(type, rows[j], c) * x[i * k + c];
                y[i * m + r + j] = s;
            }
    }
}

#define GEMV_FOR_TYPE(T)                                                                           \
    static void gemv_##T(const struct rops_mat *w, const float *x, int NB, float *y, int64_t r0,   \
                         int64_t r1) {                                                             \
        switch (NB) {                                                                              \
        case 2:                                                                                    \
            gemv_block(T, w, x, 2, 4, y, r0, r1);                                                  \
            break;                                                                                 \
        case 3:                                                                                    \
            gemv_block(T, w, x, 3, 4, y, r0, r1);                                                  \
            break;                                                                                 \
        case 4:                                                                                    \
            gemv_rows(T, w, x, 4, 1, y, r0, r1);                                                   \
            break;                                                                                 \
        case 5:                                                                                    \
            gemv_rows(T, w, x, 5, 2, y, r0, r1);                                                   \
            break;                                                                                 \
        case 6:                                                                                    \
            gemv_rows(T, w, x, 6, 2, y, r0, r1);                                                   \
            break;                                                                                 \
        default:                                                                                   \
            gemv_rows(T, w, x, 7, 2, y, r0, r1);                                                   \
            break;                                                                                 \
        }                                                                                          \
    }
GEMV_FOR_TYPE(ROPS_TYPE_F32)
GEMV_FOR_TYPE(ROPS_TYPE_F16)
GEMV_FOR_TYPE(ROPS_TYPE_BF16)

/* ---- prompt matmul: packed panels ---------------------------------------------------------- */

/* 16 f16 rows x 8 columns from column c, as 8 column vectors of 16 f32 at dst + t GEMM_RB:
 * each pair of rows j, j + 8 shares a register (low and high lane), so one 8 x 8 transpose of
 * 16-bit words within the lanes (three rounds of unpacks) leaves column t's rows 0-7 in the
 * low lane and 8-15 in the high one, which vcvtph2ps widens to 16 f32 in row order. Against
 * converting first and transposing 8 x 8 floats: half the shuffles per weight (16 inputs read
 * each panel twice, and the packing was 28% of a 16-sequence RWKV-7 step). The values are the
 * same: the conversion is exact either way. */
static inline __attribute__((always_inline)) void pack16x8_f16(const uint8_t *const rows[16],
                                                               int64_t c, float *dst) {
    __m256i v[8];
    for (int j = 0; j < 8; j++)
        v[j] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rows[j] + 2 * c))),
            _mm_loadu_si128((const __m128i *)(rows[j + 8] + 2 * c)), 1);
    /* words: rows j, j+1 interleaved (columns 0-3, then 4-7) */
    const __m256i a0 = _mm256_unpacklo_epi16(v[0], v[1]), a1 = _mm256_unpackhi_epi16(v[0], v[1]);
    const __m256i a2 = _mm256_unpacklo_epi16(v[2], v[3]), a3 = _mm256_unpackhi_epi16(v[2], v[3]);
    const __m256i a4 = _mm256_unpacklo_epi16(v[4], v[5]), a5 = _mm256_unpackhi_epi16(v[4], v[5]);
    const __m256i a6 = _mm256_unpacklo_epi16(v[6], v[7]), a7 = _mm256_unpackhi_epi16(v[6], v[7]);
    /* dwords: four rows of two columns */
    const __m256i b0 = _mm256_unpacklo_epi32(a0, a2), b1 = _mm256_unpackhi_epi32(a0, a2);
    const __m256i b2 = _mm256_unpacklo_epi32(a1, a3), b3 = _mm256_unpackhi_epi32(a1, a3);
    const __m256i b4 = _mm256_unpacklo_epi32(a4, a6), b5 = _mm256_unpackhi_epi32(a4, a6);
    const __m256i b6 = _mm256_unpacklo_epi32(a5, a7), b7 = _mm256_unpackhi_epi32(a5, a7);
    /* qwords: eight rows of one column */
    const __m256i col[8] = {_mm256_unpacklo_epi64(b0, b4), _mm256_unpackhi_epi64(b0, b4),
                            _mm256_unpacklo_epi64(b1, b5), _mm256_unpackhi_epi64(b1, b5),
                            _mm256_unpacklo_epi64(b2, b6), _mm256_unpackhi_epi64(b2, b6),
                            _mm256_unpacklo_epi64(b3, b7), _mm256_unpackhi_epi64(b3, b7)};
    for (int t = 0; t < 8; t++) _mm512_store_ps(dst + t * GEMM_RB, _mm512_cvtph_ps(col[t]));
}

/* Rows [r, r + rb) (rb <= GEMM_RB), columns [k0, k0 + kt) as f32, column-major:
 * panel[c * GEMM_RB + j] = w[r + j][k0 + c]; rows past rb up to a multiple of 16 are zero. */
static inline __attribute__((always_inline)) void pack_panel(enum rops_type type,
                                                             const struct rops_mat *w, int64_t r,
                                                             int64_t rb, int64_t k0, int64_t kt,
                                                             float *panel) {
    const int64_t kt8 = kt & ~(int64_t)7, rows16 = (rb + 15) & ~(int64_t)15;
    int64_t g = 0;
    for (; type == ROPS_TYPE_F16 && g + 16 <= rb; g += 16) { /* whole groups of 16 f16 rows */
        const uint8_t *rows[16];
        for (int64_t j = 0; j < 16; j++)
            rows[j] = (const uint8_t *)w->data + (size_t)(r + g + j) * w->row_bytes;
        for (int64_t c = 0; c < kt8; c += 8) pack16x8_f16(rows, k0 + c, panel + c * GEMM_RB + g);
        for (int64_t c = kt8; c < kt; c++)
            for (int64_t j = 0; j < 16; j++)
                panel[c * GEMM_RB + g + j] = rops_weight_at(type, rows[j], k0 + c);
    }
    for (; g < rows16; g += 8) {
        if (g >= rb) { /* a zero group, so that the 16-row vector it belongs to is defined */
            for (int64_t c = 0; c < kt; c++)
                _mm256_store_ps(panel + c * GEMM_RB + g, _mm256_setzero_ps());
            continue;
        }
        pack8_rows(type, w, r + g, rb - g, k0, kt, GEMM_RB, panel + g);
    }
}

/* y[i][0 .. 16 NV) (+)= the panel's rows times inputs x[i], i < NB, over kt columns (x and y
 * already offset to the tile). */
static inline __attribute__((always_inline)) void gemm_kernel(int NV, int NB, const float *panel,
                                                              int64_t kt, const float *x, int64_t k,
                                                              float *y, int64_t m, int64_t rb,
                                                              bool first) {
    /* named accumulators: gcc keeps an indexed array of them in memory across the loop */
    __m512 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51, a60, a61, a70, a71;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = _mm512_setzero_ps();
    a40 = a41 = a50 = a51 = a60 = a61 = a70 = a71 = _mm512_setzero_ps();
#define GEMM_STEP(I)                                                                               \
    if (NB > I) {                                                                                  \
        const __m512 xb = _mm512_set1_ps(x[I * k + c]);                                            \
        a##I##0 = _mm512_fmadd_ps(w0, xb, a##I##0);                                                \
        if (NV == 2) a##I##1 = _mm512_fmadd_ps(w1, xb, a##I##1);                                   \
    }
    for (int64_t c = 0; c < kt; c++) {
        const __m512 w0 = _mm512_load_ps(panel + c * GEMM_RB);
        const __m512 w1 = NV == 2 ? _mm512_load_ps(panel + c * GEMM_RB + 16) : w0;
        GEMM_STEP(0)
        GEMM_STEP(1)
        GEMM_STEP(2)
        GEMM_STEP(3)
        GEMM_STEP(4)
        GEMM_STEP(5)
        GEMM_STEP(6)
        GEMM_STEP(7)
    }
#undef GEMM_STEP
    const __m512 acc[8][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31},
                              {a40, a41}, {a50, a51}, {a60, a61}, {a70, a71}};
    /* whole vectors of rows in place; a last partial vector by a mask */
    for (int v = 0; v < NV; v++) {
        const int64_t left = rb - 16 * v;
        const __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        for (int i = 0; i < NB; i++) {
            float *dst = y + i * m + 16 * v;
            const __m512 r =
                first ? acc[i][v] : _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), acc[i][v]);
            _mm512_mask_storeu_ps(dst, mask, r);
        }
    }
}

#define GEMM_KERNEL(NV, NB)                                                                        \
    static void gemm_##NV##_##NB(const float *panel, int64_t kt, const float *x, int64_t k,        \
                                 float *y, int64_t m, int64_t rb, bool first) {                    \
        gemm_kernel(NV, NB, panel, kt, x, k, y, m, rb, first);                                     \
    }
#define GEMM_KERNELS(NV)                                                                           \
    GEMM_KERNEL(NV, 1)                                                                             \
    GEMM_KERNEL(NV, 2)                                                                             \
    GEMM_KERNEL(NV, 3)                                                                             \
    GEMM_KERNEL(NV, 4)                                                                             \
    GEMM_KERNEL(NV, 5)                                                                             \
    GEMM_KERNEL(NV, 6)                                                                             \
    GEMM_KERNEL(NV, 7)                                                                             \
    GEMM_KERNEL(NV, 8)
GEMM_KERNELS(1)
GEMM_KERNELS(2)
#undef GEMM_KERNELS
#undef GEMM_KERNEL

typedef void (*gemm_fn)(const float *, int64_t, const float *, int64_t, float *, int64_t, int64_t,
                        bool);
static const gemm_fn gemm_kernels[2][GEMM_NB] = {
    {gemm_1_1, gemm_1_2, gemm_1_3, gemm_1_4, gemm_1_5, gemm_1_6, gemm_1_7, gemm_1_8},
    {gemm_2_1, gemm_2_2, gemm_2_3, gemm_2_4, gemm_2_5, gemm_2_6, gemm_2_7, gemm_2_8},
};

static inline __attribute__((always_inline)) void gemm_rows(enum rops_type type,
                                                            const struct rops_mat *w,
                                                            const float *x, int64_t n, float *y,
                                                            int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows;
    float panel[GEMM_KT * GEMM_RB] __attribute__((aligned(64)));
    /* ROPS_NI inputs at a time, so that their tiles stay in L2 while every row block of the
       thread passes over them */
    for (int64_t i0 = 0; i0 < n; i0 += ROPS_NI) {
        const int64_t i1 = n - i0 < ROPS_NI ? n : i0 + ROPS_NI;
        for (int64_t r = r0; r < r1; r += GEMM_RB) {
            const int64_t rb = r1 - r < GEMM_RB ? r1 - r : GEMM_RB;
            const int nv = rb > 16 ? 2 : 1;
            for (int64_t k0 = 0; k0 < k; k0 += GEMM_KT) {
                const int64_t kt = k - k0 < GEMM_KT ? k - k0 : GEMM_KT;
                pack_panel(type, w, r, rb, k0, kt, panel);
                /* the next panel's weights (next columns, else next rows), a few rows per
                   group of inputs */
                int64_t pr = r, pk = k0 + GEMM_KT;
                if (pk >= k) {
                    pr = r + GEMM_RB;
                    pk = 0;
                }
                const int64_t prb = pr < r1 ? (r1 - pr < GEMM_RB ? r1 - pr : GEMM_RB) : 0;
                const int64_t pkt = k - pk < GEMM_KT ? k - pk : GEMM_KT;
                const int64_t pbytes = col_bytes(type, pk + pkt) - col_bytes(type, pk);
                const int64_t groups = (i1 - i0 + GEMM_NB - 1) / GEMM_NB;
                int64_t g = 0;
                for (int64_t i = i0; i < i1; i += GEMM_NB) {
                    const int nb = i1 - i < GEMM_NB ? (int)(i1 - i) : GEMM_NB;
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

static void matmul_rows_avx512(const struct rops_mat *w, const float *x, int64_t n, float *y,
                               int64_t r0, int64_t r1) {
    const bool floats =
        w->type == ROPS_TYPE_F32 || w->type == ROPS_TYPE_F16 || w->type == ROPS_TYPE_BF16;
    if (n == 1 && floats) {
        /* one input streams the weights: the AVX2 kernel's steps of 32 weights read 6-8% more
           than 16-lane steps on a Zen 4 (double-pumped AVX-512: no wider FMAs to win), and
           even at 8 lanes the FMAs outrun the memory several times over on any of these CPUs */
        rops_matmul_rows_avx2(w, x, n, y, r0, r1);
        return;
    }
    if (n <= 7 && floats) { /* in registers: faster than the panel for so few inputs */
        if (w->type == ROPS_TYPE_F32)
            gemv_ROPS_TYPE_F32(w, x, (int)n, y, r0, r1);
        else if (w->type == ROPS_TYPE_F16)
            gemv_ROPS_TYPE_F16(w, x, (int)n, y, r0, r1);
        else
            gemv_ROPS_TYPE_BF16(w, x, (int)n, y, r0, r1);
        return;
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

/* ---- integer dot products by VNNI (q8_0 / q4_0 weights, quantized inputs) ------------------ */

/* the EVEX form of vpdpbusd on 256-bit registers (AVX512-VNNI + VL) */
#define ROPS_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define ROPS_Q8_DOT(aw, w, x)                                                                      \
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w))
#define ROPS_Q8_NAME matmul_q8_rows_avx512
#include "x86/q8.h"

#define ROPS_QDOT_NAME qdot_rows_avx512
#include "x86/qdot.h"

/* ---- the kernels written once for both widths, the probes ---------------------------------- */

#define VEC_FN        static
#define VEC_NARROW(f) f##_avx2
/* Other heads, and WKV7's short runs, take the AVX2 kernels: per-token kernels of 16 lanes
 * (masked) measured no faster than AVX2's on a Zen 4, WKV6's 0.75x (bench_isa, 12 heads of 64). */
#define VEC_WKV6_TOKENS(p) rops_wkv6_run_avx2(p)
#define VEC_WKV7_TOKENS(p) rops_wkv7_run_avx2(p)
/* 32 values at a time, as AVX2's WKV6: on a Zen 4 a whole row of 64 took 1.3x (WKV6) and 1.2x
   (WKV7) the time, 16 values 1.3x (bench_isa, 12 heads of 64, 512 tokens) */
#define WKV6_IB               2
#define WKV7_IB               2
#define ROPS_PROBE_FMA_CHAINS 12 /* FMA latency (4 cycles) x 2 ports, and some slack */
#include "x86/kernels.inc"
#include "x86/probe.h"

static const struct rops_kernels table = {
    .isa = ROPS_ISA_AVX512,
    .matmul_rows = matmul_rows_avx512,
    .matmul_each = rops_matmul_each_avx2, /* its one input is the AVX2 kernel's */
    .q8_rows = matmul_q8_rows_avx512,
    .qdot_rows = qdot_rows_avx512,
    .quantize_x = rops_quantize_x_avx2,
    .quantize_q8_K = rops_quantize_q8_K_avx2,
    .softplus_bias = rops_softplus_bias_avx512,
    .layernorm = rops_layernorm_avx512,
    .rmsnorm = rops_rmsnorm_avx512,
    .map_rows = rops_map_rows_avx512,
    .conv_channels = rops_conv_channels_avx512,
    .scan_channels = rops_scan_channels_avx512,
    .scan2_heads = rops_scan2_heads_avx512,
    .ssd_mm = rops_ssd_mm_avx512,
    .ssd_decays = rops_ssd_decays_avx512,
    .ssd_scale_rows = rops_ssd_scale_rows_avx512,
    .ssd_transpose = rops_ssd_transpose_avx2,
    .wkv6_run = rops_wkv6_run_avx512,
    .wkv7_run = rops_wkv7_run_avx512,
    .attn_rows = rops_attn_rows_avx512,
    .probe_fma = rops_probe_fma_avx512,
    .probe_sum = rops_probe_sum_avx512,
};

const struct rops_kernels *rops_kernels_avx512(void) {
    return &table;
}

#else /* no AVX-512 kernels in this build */

const struct rops_kernels *rops_kernels_avx512(void) {
    return NULL;
}

#endif
