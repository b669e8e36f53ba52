/*
 * The AVX-512 kernels (see ops.h). This file alone is compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512dq -mavx512vnni (and AVX2, FMA, F16C); nothing in it runs unless
 * ops_probe.c found those on the CPU and that the OS saves the ZMM registers. Its table,
 * rops_kernels_avx512(), is at the end: the jobs it has no kernel of its own for take the AVX2
 * ones (ops_avx2.c), which every CPU with AVX-512 runs.
 *
 * The products, as the AVX2 ones (ops_avx2.c) with 16 lanes:
 * - one to seven inputs (generation): each weight converted in registers on its way to its
 *   FMAs (f16 by vcvtph2ps, bf16 by a shift); one input takes the AVX2 kernel (one sequential
 *   stream of rows, which read more here), two and three four rows side by side, four to seven
 *   one row at a time with each 16 weights used by every input;
 * - more (prompts): a panel of 32 weight rows x ROPS_GEMM512_KT columns converted to f32 once
 *   (column-major), then 8 inputs x 32 rows at a time on 16 accumulators that are the outputs
 *   themselves: per column two panel loads and eight broadcasts feed 16 FMAs.
 * - q8_0 / q4_0 weights with one to three inputs: integer dots by VNNI (ops_vnni.h: vpdpbusd,
 *   four byte products summed into each int32 lane in one instruction, where AVX2 takes
 *   vpmaddubsw and vpmaddwd); the int32 sums and the float steps after them are the AVX2
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

/* 8 weights of a row from column c (c a multiple of 8) as f32, any weight type; q8_0 / q4_0
 * scaled as d * q, one rounding, as the other paths do. */
static inline __attribute__((always_inline)) __m256 load8_any(enum rops_type type,
                                                              const uint8_t *row, int64_t c) {
    switch (type) {
    case ROPS_TYPE_Q8_0: {
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)row + c / 32;
        const __m256 q = _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + c % 32))));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), q);
    }
    case ROPS_TYPE_Q4_0: {
        const struct rops_block_q4_0 *b = (const struct rops_block_q4_0 *)row + c / 32;
        const int64_t o = c % 32;
        __m128i raw = _mm_loadl_epi64((const __m128i *)(b->qs + (o & 15)));
        if (o >= 16) raw = _mm_srli_epi16(raw, 4);
        const __m128i q8 = _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(15)), _mm_set1_epi8(8));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)), q);
    }
    case ROPS_TYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * c)));
    case ROPS_TYPE_BF16: {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * c)));
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
        const uint8_t *rows[8];
        for (int64_t j = 0; j < 8; j++)
            rows[j] =
                (const uint8_t *)w->data + (size_t)(r + g + (g + j < rb ? j : 0)) * w->row_bytes;
        for (int64_t c = 0; c < kt8; c += 8) {
            __m256 v[8];
            for (int j = 0; j < 8; j++)
                v[j] = g + j < rb ? load8_any(type, rows[j], k0 + c) : _mm256_setzero_ps();
            transpose8(v);
            for (int t = 0; t < 8; t++) _mm256_store_ps(panel + (c + t) * GEMM_RB + g, v[t]);
        }
        /* the last kt % 8 columns (float types only: block rows are whole blocks) */
        for (int64_t c = kt8; c < kt; c++)
            for (int64_t j = 0; j < 8; j++)
                panel[c * GEMM_RB + g + j] =
                    g + j < rb ? rops_weight_at(type, rows[j], k0 + c) : 0.0f;
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
GEMM_FOR_TYPE(ROPS_TYPE_Q8_0)
GEMM_FOR_TYPE(ROPS_TYPE_Q4_0)

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
    case ROPS_TYPE_BF16:
        gemm_ROPS_TYPE_BF16(w, x, n, y, r0, r1);
        break;
    case ROPS_TYPE_Q8_0:
        gemm_ROPS_TYPE_Q8_0(w, x, n, y, r0, r1);
        break;
    default:
        gemm_ROPS_TYPE_Q4_0(w, x, n, y, r0, r1);
        break;
    }
}

/* ---- integer dot products by VNNI (q8_0 / q4_0 weights, quantized inputs) ------------------ */

/* the EVEX form of vpdpbusd on 256-bit registers (AVX512-VNNI + VL) */
#define ROPS_VNNI_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define ROPS_VNNI_NAME              matmul_q8_rows_avx512
#include "ops_vnni.h"

/* ---- Mamba's and Mamba-2's scans, RWKV's WKV heads ------------------------------------------ */

/* e^x for 16 floats, as exp8 in ops_avx2.c: x = n ln2 + r with |r| <= ln2 / 2, e^r by a
 * degree-6 polynomial, 2^n into the exponent; inputs clamped to [-87, 88]. */
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* x / (1 + e^-x) */
static inline __m512 silu16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* The first n lanes (0..16). */
static inline __mmask16 lanes16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* rops_map's f on 16 values, the forms of map8 in ops_avx2.c. */
static inline __m512 map16(enum rops_map f, __m512 v) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    switch (f) {
    case ROPS_MAP_SIGMOID:
        return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v))));
    case ROPS_MAP_TANH: {
        const __m512 av = _mm512_abs_ps(v);
        const __m512 e = exp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), av));
        const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
        /* the sign of v back onto t (t >= 0) */
        return _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(t),
            _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN))));
    }
    case ROPS_MAP_SILU:
        return silu16(v);
    case ROPS_MAP_RELU_SQ: {
        const __m512 r = _mm512_max_ps(v, zero);
        return _mm512_mul_ps(r, r);
    }
    case ROPS_MAP_EXP_NEG_EXP:
        return exp16(_mm512_sub_ps(zero, exp16(v)));
    case ROPS_MAP_RWKV7_DECAY:
        return exp16(_mm512_div_ps(_mm512_set1_ps(-0.606531f),
                                   _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v)))));
    case ROPS_MAP_COUNT:
        break;
    }
    return v;
}

/* One row for one f (always inlined, so the switch of map16 is resolved per loop); the tail
 * by masked lanes. */
static inline __attribute__((always_inline)) void map_row16(enum rops_map f, float *row,
                                                            const float *bias, int64_t n_cols) {
    for (int64_t c = 0; c < n_cols; c += 16) {
        const __mmask16 m = lanes16(n_cols - c);
        __m512 v = _mm512_maskz_loadu_ps(m, row + c);
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
        _mm512_mask_storeu_ps(row + c, m, map16(f, v));
    }
}

static void map_rows_avx512(enum rops_map f, float *x, int64_t ld, const float *bias,
                            int64_t n_cols, int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; i++) {
        float *row = x + i * ld;
        switch (f) {
        case ROPS_MAP_SIGMOID:
            map_row16(ROPS_MAP_SIGMOID, row, bias, n_cols);
            break;
        case ROPS_MAP_TANH:
            map_row16(ROPS_MAP_TANH, row, bias, n_cols);
            break;
        case ROPS_MAP_SILU:
            map_row16(ROPS_MAP_SILU, row, bias, n_cols);
            break;
        case ROPS_MAP_RELU_SQ:
            map_row16(ROPS_MAP_RELU_SQ, row, bias, n_cols);
            break;
        case ROPS_MAP_EXP_NEG_EXP:
            map_row16(ROPS_MAP_EXP_NEG_EXP, row, bias, n_cols);
            break;
        case ROPS_MAP_RWKV7_DECAY:
            map_row16(ROPS_MAP_RWKV7_DECAY, row, bias, n_cols);
            break;
        case ROPS_MAP_COUNT:
            break;
        }
    }
}

/* Mamba's conv in token order: a thread's channels of one token, then the next, so that the
 * inputs are read front to back in whole rows (a row of x is the in-projection's output, 3 to
 * 13 KiB), the window's earlier rows still in L1. Going over the tokens one group of channels
 * at a time instead read each row's 64 bytes a pass, 6.9 MB apart per pass over a 512-token
 * Mamba-2 prompt: 4-5% of it (bench/RESULTS.md, issue 21). The weights are lag-major (the
 * model's w_lag, else made per call) and the states turned so per call; the sums are in the
 * order of the AVX2 kernel (bias, then the oldest input first), so the bits are its. */
/* d_conv 4 (every Mamba's): a sequence's state of 16 channels, 3 inputs each (channel-major,
 * 48 floats), to and from three lag vectors by two-source permutes, where the scalar copies
 * of rops_conv_seq_begin / _end were 85% of a generation token's conv (bench_isa "conv
 * 1536x4 tokens=1"). deint[k] picks lag k: lanes whose element 3l + k lies in the first two
 * vectors take it there, the others from the third; inter[v] builds output vector v the same
 * way from lags 0 and 1, then 2 (d*, i*: lo the first permute's indices, hi the second's). */
struct conv3_perm {
    __m512i dlo[3], dhi[3], ilo[3], ihi[3];
};

static void conv3_perm_init(struct conv3_perm *p) {
    for (int k = 0; k < 3; k++) {
        int lo[16], hi[16];
        for (int l = 0; l < 16; l++) {
            const int e = 3 * l + k;
            lo[l] = e < 32 ? e : 0;
            hi[l] = e < 32 ? l : 16 + e - 32;
        }
        p->dlo[k] = _mm512_loadu_si512(lo);
        p->dhi[k] = _mm512_loadu_si512(hi);
    }
    for (int v = 0; v < 3; v++) {
        int lo[16], hi[16];
        for (int l = 0; l < 16; l++) {
            const int e = 16 * v + l, lag = e % 3, ch = e / 3;
            lo[l] = lag == 0 ? ch : lag == 1 ? 16 + ch : 0;
            hi[l] = lag == 2 ? 16 + ch : l;
        }
        p->ilo[v] = _mm512_loadu_si512(lo);
        p->ihi[v] = _mm512_loadu_si512(hi);
    }
}

/* rops_conv_seq_begin for d_conv 4 */
static const float *conv3_seq_begin(const struct rops_conv_args *a, const struct conv3_perm *p,
                                    int64_t s, int64_t c0, int64_t nc, float *prev) {
    const float *st = a->state + (s * a->d_inner + c0) * 3;
    int64_t j = 0;
    for (; j + 16 <= nc; j += 16) {
        const __m512 A = _mm512_loadu_ps(st + 3 * j), B = _mm512_loadu_ps(st + 3 * j + 16),
                     C = _mm512_loadu_ps(st + 3 * j + 32);
        for (int k = 0; k < 3; k++)
            _mm512_storeu_ps(
                prev + k * nc + j,
                _mm512_permutex2var_ps(_mm512_permutex2var_ps(A, p->dlo[k], B), p->dhi[k], C));
    }
    return rops_conv_seq_begin(a, s, c0, nc, j, prev); /* the last channels */
}

/* rops_conv_seq_end for d_conv 4 */
static void conv3_seq_end(const struct rops_conv_args *a, const struct conv3_perm *p, int64_t s,
                          int64_t c0, int64_t nc, const float *x, const float *prev) {
    float *st = a->state + (s * a->d_inner + c0) * 3;
    const float *r[3];
    for (int k = 0; k < 3; k++) r[k] = rops_conv_row(a, x, prev, nc, a->n_tok - 3 + k);
    int64_t j = 0;
    for (; j + 16 <= nc; j += 16) {
        const __m512 R0 = _mm512_loadu_ps(r[0] + j), R1 = _mm512_loadu_ps(r[1] + j),
                     R2 = _mm512_loadu_ps(r[2] + j);
        for (int v = 0; v < 3; v++)
            _mm512_storeu_ps(
                st + 3 * j + 16 * v,
                _mm512_permutex2var_ps(_mm512_permutex2var_ps(R0, p->ilo[v], R1), p->ihi[v], R2));
    }
    rops_conv_seq_end(a, s, c0, nc, j, x, prev); /* the last channels */
}

static void conv_channels_avx512(const struct rops_conv_args *a, int64_t c0, int64_t c1) {
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
    const __mmask16 tail = lanes16(nc % 16);
    struct conv3_perm perm;
    if (K == 4) conv3_perm_init(&perm);
    for (int64_t s = 0; s < a->n_seqs; s++) {
        const float *x = K == 4 ? conv3_seq_begin(a, &perm, s, c0, nc, prev)
                                : rops_conv_seq_begin(a, s, c0, nc, 0, prev);
        for (int64_t t = 0; t < a->n_tok; t++) {
            const float *in[8];
            for (int64_t k = 0; k < K; k++) in[k] = rops_conv_row(a, x, prev, nc, t - n_prev + k);
            float *out = a->xc + (s * a->n_tok + t) * Di + c0;
            for (int64_t j = 0; j < nc; j += 16) {
                const __mmask16 m = nc - j >= 16 ? (__mmask16)0xffff : tail;
                __m512 sum = _mm512_maskz_loadu_ps(m, a->b + c0 + j);
                for (int64_t k = 0; k < K; k++)
                    sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, wt + k * wld + j),
                                          _mm512_maskz_loadu_ps(m, in[k] + j), sum);
                _mm512_mask_storeu_ps(out + j, m, silu16(sum));
            }
            rops_conv_save(a, s, t, c0, nc, in);
        }
        if (K == 4)
            conv3_seq_end(a, &perm, s, c0, nc, x, prev);
        else
            rops_conv_seq_end(a, s, c0, nc, 0, x, prev);
    }
    rops_conv_lag_end(&lag);
}

/* ---- Mamba-2's chunk products (ops_ssd.c; struct rops_ssd_mm in ops_impl.h) ---------------- */

/* An MR x 16 NV tile of c (MR <= 6 rows, NV <= 2 vectors: 12 accumulators), columns beyond
 * the masks m0 / m1 neither read from b nor written; each element sums over kk in order, as
 * the AVX2 tile does. */
static inline __attribute__((always_inline)) void ssd_tile16(int MR, int NV,
                                                             const struct rops_ssd_mm *p,
                                                             int64_t i0, int64_t j0, int64_t kend,
                                                             __mmask16 m0, __mmask16 m1) {
    const float *a = p->a + i0 * p->lda, *b = p->b + j0;
    const int64_t lda = p->lda, ldb = p->ldb;
    __m512 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51;
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = _mm512_setzero_ps();
#define SSD_STEP(I)                                                                                \
    if (MR > I) {                                                                                  \
        const __m512 av = _mm512_set1_ps(a[I * lda + kk]);                                         \
        a##I##0 = _mm512_fmadd_ps(av, b0, a##I##0);                                                \
        if (NV == 2) a##I##1 = _mm512_fmadd_ps(av, b1, a##I##1);                                   \
    }
    for (int64_t kk = 0; kk < kend; kk++) {
        const float *bk = b + kk * ldb;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
        const __m512 b1 = NV == 2 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
        SSD_STEP(0)
        SSD_STEP(1)
        SSD_STEP(2)
        SSD_STEP(3)
        SSD_STEP(4)
        SSD_STEP(5)
    }
#undef SSD_STEP
    const __m512 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21},
                              {a30, a31}, {a40, a41}, {a50, a51}};
    const __m512 beta = _mm512_set1_ps(p->beta);
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) {
            float *dst = p->c + (i0 + i) * p->ldc + j0 + 16 * v;
            const __mmask16 m = v ? m1 : m0;
            __m512 r = acc[i][v];
            if (p->rowscale) r = _mm512_mul_ps(r, _mm512_set1_ps(p->rowscale[i0 + i]));
            if (p->accumulate) r = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, dst), r);
            _mm512_mask_storeu_ps(dst, m, r);
        }
}

#define SSD_TILE(MR, NV)                                                                           \
    static void ssd_tile16_##MR##_##NV(const struct rops_ssd_mm *p, int64_t i0, int64_t j0,        \
                                       int64_t kend, __mmask16 m0, __mmask16 m1) {                 \
        ssd_tile16(MR, NV, p, i0, j0, kend, m0, m1);                                               \
    }
SSD_TILE(1, 1)
SSD_TILE(2, 1)
SSD_TILE(3, 1)
SSD_TILE(4, 1)
SSD_TILE(5, 1)
SSD_TILE(6, 1)
SSD_TILE(1, 2)
SSD_TILE(2, 2)
SSD_TILE(3, 2)
SSD_TILE(4, 2)
SSD_TILE(5, 2)
SSD_TILE(6, 2)
#undef SSD_TILE

typedef void (*ssd_tile16_fn)(const struct rops_ssd_mm *, int64_t, int64_t, int64_t, __mmask16,
                              __mmask16);
/* [vectors - 1][rows - 1] */
static const ssd_tile16_fn ssd_tiles16[2][6] = {
    {ssd_tile16_1_1, ssd_tile16_2_1, ssd_tile16_3_1, ssd_tile16_4_1, ssd_tile16_5_1,
     ssd_tile16_6_1},
    {ssd_tile16_1_2, ssd_tile16_2_2, ssd_tile16_3_2, ssd_tile16_4_2, ssd_tile16_5_2,
     ssd_tile16_6_2},
};

static void ssd_mm_avx512(const struct rops_ssd_mm *p) {
    for (int64_t i0 = 0; i0 < p->m; i0 += 6) {
        const int64_t mr = p->m - i0 < 6 ? p->m - i0 : 6;
        const int64_t kend = p->tril_a && i0 + mr < p->k ? i0 + mr : p->k;
        const int64_t nend = p->tril_c && i0 + mr < p->n ? i0 + mr : p->n;
        for (int64_t j0 = 0; j0 < nend; j0 += 32) {
            const int64_t w = nend - j0 < 32 ? nend - j0 : 32;
            ssd_tiles16[w > 16][mr - 1](p, i0, j0, kend, lanes16(w), lanes16(w > 16 ? w - 16 : 0));
        }
    }
}

/* Mamba's scan: per channel its d_state states as vectors of 16 (Mamba's d_state 16: one). */
static void scan_channels_avx512(const struct rops_scan_args *a, int64_t c0, int64_t c1) {
    const int64_t Di = a->d_inner, N = a->d_state;
    if (N % 16 != 0) { /* whole vectors of states only */
        rops_scan_channels_avx2(a, c0, c1);
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
                const __m512 dt = _mm512_set1_ps(dtt[c]), dx = _mm512_set1_ps(dtt[c] * xt[c]);
                __m512 acc = _mm512_setzero_ps();
                for (int64_t n = 0; n < N; n += 16) {
                    const __m512 dA = exp16(_mm512_mul_ps(dt, _mm512_loadu_ps(Ac + n)));
                    __m512 st = _mm512_mul_ps(_mm512_loadu_ps(sc + n), dA);
                    st = _mm512_fmadd_ps(_mm512_loadu_ps(Bt + n), dx, st);
                    _mm512_storeu_ps(sc + n, st);
                    acc = _mm512_fmadd_ps(st, _mm512_loadu_ps(Ct + n), acc);
                }
                yt[c] = _mm512_reduce_add_ps(acc) + a->D[c] * xt[c];
            }
            /* the gate, 16 channels at a time, the last ones masked */
            for (int64_t c = c0; c < c1; c += 16) {
                const __mmask16 m = lanes16(c1 - c);
                const __m512 g = silu16(_mm512_maskz_loadu_ps(m, zt + c));
                _mm512_mask_storeu_ps(yt + c, m,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(m, yt + c), g));
            }
            float *dst = a->save ? a->save[t] : NULL;
            if (dst)
                memcpy(dst + c0 * N, a->state + (s * Di + c0) * N,
                       sizeof(float) * (size_t)((c1 - c0) * N));
        }
    }
}

/* Mamba-2's scan: as Mamba's, one decay per head instead of one exp per state. */
static void scan2_heads_avx512(const struct rops_scan2_args *a, int64_t h0, int64_t h1) {
    const int64_t N = a->d_state, Di = a->d_inner, H = a->n_head, G = a->n_group, P = Di / H;
    if (N % 16 != 0) {
        rops_scan2_heads_avx2(a, h0, h1);
        return;
    }
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *x = a->xbc + t * a->xbc_stride;
            for (int64_t h = h0; h < h1; h++) {
                const int64_t g = h / (H / G);
                const float *B = x + Di + g * N, *C = x + Di + G * N + g * N;
                const float dt = a->dt[t * H + h];
                const __m512 dA = _mm512_set1_ps(expf(dt * a->A[h]));
                for (int64_t p = 0; p < P; p++) {
                    const int64_t c = h * P + p;
                    float *sc = a->state + (s * Di + c) * N;
                    const __m512 dx = _mm512_set1_ps(dt * x[c]);
                    __m512 acc = _mm512_setzero_ps();
                    for (int64_t n = 0; n < N; n += 16) {
                        __m512 st = _mm512_mul_ps(_mm512_loadu_ps(sc + n), dA);
                        st = _mm512_fmadd_ps(_mm512_loadu_ps(B + n), dx, st);
                        _mm512_storeu_ps(sc + n, st);
                        acc = _mm512_fmadd_ps(st, _mm512_loadu_ps(C + n), acc);
                    }
                    a->y[t * Di + c] = _mm512_reduce_add_ps(acc) + a->D[h] * x[c];
                }
                float *dst = a->save ? a->save[t] : NULL;
                if (dst)
                    memcpy(dst + h * P * N, a->state + (s * Di + h * P) * N,
                           sizeof(float) * (size_t)(P * N));
            }
        }
}

/* ---- WKV over a run of tokens (ops_wkv.h) -------------------------------------------------- */

static inline unsigned wkv_outside_avx512(__m512 x) {
    const __mmask16 in = _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p-60f), _CMP_GT_OQ) &
                         _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p60f), _CMP_LT_OQ);
    return ~(unsigned)in & 0xffffu;
}

#define WKV_V            __m512
#define WKV_L            16
#define WKV_LOAD(p)      _mm512_loadu_ps(p)
#define WKV_STORE(p, x)  _mm512_storeu_ps(p, x)
#define WKV_SET1(x)      _mm512_set1_ps(x)
#define WKV_ZERO()       _mm512_setzero_ps()
#define WKV_MUL(a, b)    _mm512_mul_ps(a, b)
#define WKV_DIV(a, b)    _mm512_div_ps(a, b)
#define WKV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define WKV_HSUM(x)      _mm512_reduce_add_ps(x)
#define WKV_OUTSIDE(x)   wkv_outside_avx512(x)
/* 32 values at a time, as AVX2's WKV6: on a Zen 4 a whole row of 64 took 1.3x (WKV6) and 1.2x
   (WKV7) the time, 16 values 1.3x (bench_isa, 12 heads of 64, 512 tokens) */
#define WKV6_IB     2
#define WKV7_IB     2
#define WKV_NAME(x) x##_avx512
#include "ops_wkv.h"

/* Other heads, and WKV7's short runs, take the AVX2 kernels: per-token kernels of 16 lanes
 * (masked) measured no faster than AVX2's on a Zen 4, WKV6's 0.75x (bench_isa, 12 heads of 64). */
static void wkv6_run_avx512(const struct rops_wkv_run *p) {
    if (p->hs % (WKV6_IB * WKV_L) == 0 && p->hs <= WKV_MAX_HS)
        wkv6_run_fast_avx512(p);
    else
        rops_wkv6_run_avx2(p);
}

static void wkv7_run_avx512(const struct rops_wkv_run *p) {
    if (p->hs % (WKV7_IB * WKV_L) == 0 && p->hs <= WKV_MAX_HS && p->n >= WKV7_RUN_MIN)
        wkv7_run_fast_avx512(p);
    else
        rops_wkv7_run_avx2(p);
}

/* ---- machine probes ------------------------------------------------------------------------ */

static double probe_fma_avx512(int64_t iters) {
    /* 12 independent vector chains: FMA latency (4 cycles) x 2 ports, and some slack */
    __m512 a[12];
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int j = 0; j < 12; j++) a[j] = _mm512_set1_ps(1.0f + (float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++) a[j] = _mm512_fmadd_ps(a[j], b, c);
    __m512 s = a[0];
    for (int j = 1; j < 12; j++) s = _mm512_add_ps(s, a[j]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 12 * 16 * 2;
}

static float probe_sum_avx512(const float *p, size_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static const struct rops_kernels table = {
    .isa = ROPS_ISA_AVX512,
    .matmul_rows = matmul_rows_avx512,
    .q8_rows = matmul_q8_rows_avx512,
    .quantize_x = rops_quantize_x_avx2,
    .softplus_bias = rops_softplus_bias_avx2,
    .layernorm = rops_layernorm_avx2,
    .rmsnorm = rops_rmsnorm_avx2,
    .map_rows = map_rows_avx512,
    .conv_channels = conv_channels_avx512,
    .scan_channels = scan_channels_avx512,
    .scan2_heads = scan2_heads_avx512,
    .ssd_mm = ssd_mm_avx512,
    .ssd_decays = rops_ssd_decays_avx2,
    .ssd_scale_rows = rops_ssd_scale_rows_avx2,
    .ssd_transpose = rops_ssd_transpose_avx2,
    .wkv6_run = wkv6_run_avx512,
    .wkv7_run = wkv7_run_avx512,
    .probe_fma = probe_fma_avx512,
    .probe_sum = probe_sum_avx512,
};

const struct rops_kernels *rops_kernels_avx512(void) {
    return &table;
}

#else /* no AVX-512 kernels in this build */

const struct rops_kernels *rops_kernels_avx512(void) {
    return NULL;
}

#endif
