/*
 * Weights to block types: the quantizers `recur quantize` writes files with (q4_0, q4_1, q5_0,
 * q5_1, q8_0, q4_K, q5_K, q6_K). Each writes ggml's block layout (ops_quants.h), so llama.cpp
 * reads the files; the choice of scales is this file's own.
 *
 * The legacy types take ggml's reference rule (the block's extremes set the scale), which is
 * also what llama-quantize does for them without an importance matrix. The K-quants choose,
 * per sub-block, among a few candidate scales the one whose rounded quants fit best, refitting
 * scale and minimum by least squares to those quants; then the sub-blocks' scales are
 * themselves quantized (6 bits, or 8 for q6_K) against one super-block scale, and the quants
 * are rounded again against the scales as stored, so that every stored quant is the nearest
 * for the scale the reader will use.
 */
#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"
#include "ops_quants.h"

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}
/* Round half to even, for |v| < 2^22 (every quant here): adding 1.5 * 2^23 leaves the rounded
 * integer in the low mantissa bits, in the current (nearest-even) rounding mode; no libm call
 * in the fits' inner loops. */
static int nearest(float v) {
    const float big = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &big, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* ---- legacy types ------------------------------------------------------------------------------
 */

static void q8_0_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK; i++) y[i].d = rops_q8_block(x + i * ROPS_QK, y[i].qs);
}

/* The value of largest magnitude among x[0..n), with its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

/* q4_0 / q5_0: d = x_m / -2^(bits-1), so that x_m is the most negative level exactly. */
static void symmetric_block(const float *x, int bits, uint16_t *d16, uint8_t q[32]) {
    const int half = 1 << (bits - 1), top = (1 << bits) - 1;
    const float d = signed_absmax(x, ROPS_QK) / (float)-half, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d16 = rcore_f32_to_f16(d);
    for (int j = 0; j < ROPS_QK; j++) {
        const int v = (int)(x[j] * id + ((float)half + 0.5f));
        q[j] = (uint8_t)(v < top ? v : top);
    }
}

/* q4_1 / q5_1: levels from the block's minimum to its maximum. */
static void affine_block(const float *x, int bits, uint16_t *d16, uint16_t *m16, uint8_t q[32]) {
    const int top = (1 << bits) - 1;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < ROPS_QK; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    const float d = (hi - lo) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
    *d16 = rcore_f32_to_f16(d);
    *m16 = rcore_f32_to_f16(lo);
    for (int j = 0; j < ROPS_QK; j++) {
        const int v = (int)((x[j] - lo) * id + 0.5f);
        q[j] = (uint8_t)(v < top ? v : top);
    }
}

/* Nibbles: weight j < 16 low in byte j, weight j + 16 high. */
static void pack_nibbles(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}
/* The fifth bits, weight j's at bit j. */
static void pack_fifth(const uint8_t q[32], uint8_t qh[4]) {
    memset(qh, 0, 4);
    for (int j = 0; j < 32; j++) qh[j / 8] |= (uint8_t)(((q[j] >> 4) & 1) << (j % 8));
}

static void q4_0_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK; i++) {
        uint8_t q[32];
        symmetric_block(x + i * ROPS_QK, 4, &y[i].d, q);
        pack_nibbles(q, y[i].qs);
    }
}

static void q5_0_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK; i++) {
        uint8_t q[32];
        symmetric_block(x + i * ROPS_QK, 5, &y[i].d, q);
        pack_nibbles(q, y[i].qs);
        pack_fifth(q, y[i].qh);
    }
}

static void q4_1_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK; i++) {
        uint8_t q[32];
        affine_block(x + i * ROPS_QK, 4, &y[i].d, &y[i].m, q);
        pack_nibbles(q, y[i].qs);
    }
}

static void q5_1_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK; i++) {
        uint8_t q[32];
        affine_block(x + i * ROPS_QK, 5, &y[i].d, &y[i].m, q);
        pack_nibbles(q, y[i].qs);
        pack_fifth(q, y[i].qh);
    }
}

/* ---- sub-block fits (K-quants) -----------------------------------------------------------------
 */

/* Candidates per fit: inverse scales from (top - 1) / range to (top + 1) / range. */
#define FIT_STEPS 20
/* Alternations of rounding and refitting from the best candidate. */
#define FIT_ROUNDS 4

/* The least-squares (s, b) of x ~ s q + b, q the level nearest x under (s0, b0), with b <= 0
 * (the level 0 at or below zero). False when the quants cannot fix a scale. */
static bool refit_affine(const float *x, int n, int top, double s0, double b0, double *s,
                         double *b) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    const float is0 = (float)(1.0 / s0), fb0 = (float)b0;
    for (int j = 0; j < n; j++) {
        const int q = clampi(nearest((x[j] - fb0) * is0), 0, top);
        sq += q;
        sqq += (double)q * q;
        sx += x[j];
        sqx += (double)q * x[j];
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) return false;
    *s = (n * sqx - sq * sx) / det;
    *b = (sqq * sx - sq * sqx) / det;
    if (*b > 0) { /* refit the scale alone with the level 0 at zero */
        *b = 0;
        *s = sqx / sqq;
    }
    return *s > 0;
}

/* The squared error of x[0..n) stored as s * q - m with each q (0..top) the nearest; the quants
 * into L when L is not NULL. */
static double affine_err(const float *x, int n, int top, float s, float m, uint8_t *L) {
    double err = 0;
    const float is = s > 0.0f ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) {
        const int q = clampi(nearest((x[i] + m) * is), 0, top);
        const double e = (double)s * q - m - x[i];
        err += e * e;
        if (L) L[i] = (uint8_t)q;
    }
    return err;
}

/* x[0..n) ~ scale * q - min with q in 0..top and min >= 0 (the level 0 is at or below the
 * sub-block's smallest value, which is how the K-quants store minimums): the candidate
 * roundings are each refitted by least squares, and the best is improved by alternating
 * rounding and refitting while its error falls. */
static void fit_affine(const float *x, int n, int top, float *scale, float *min) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    if (lo > 0.0f) lo = 0.0f;
    if (hi <= lo) { /* all equal (and <= 0): the minimum alone */
        *scale = 0.0f;
        *min = -lo;
        return;
    }
    double best_s = (hi - lo) / (float)top, best_b = lo;
    double best_err = affine_err(x, n, top, (float)best_s, (float)-best_b, NULL);
    for (int step = 0; step <= FIT_STEPS; step++) {
        const double s0 = (hi - lo) / ((float)top - 1.0f + 2.0f * (float)step / FIT_STEPS);
        double s, b;
        if (!refit_affine(x, n, top, s0, lo, &s, &b)) continue;
        const double err = affine_err(x, n, top, (float)s, (float)-b, NULL);
        if (err < best_err) {
            best_err = err;
            best_s = s;
            best_b = b;
        }
    }
    for (int round = 0; round < FIT_ROUNDS; round++) {
        double s, b;
        if (!refit_affine(x, n, top, best_s, best_b, &s, &b)) break;
        const double err = affine_err(x, n, top, (float)s, (float)-b, NULL);
        if (!(err < best_err)) break;
        best_err = err;
        best_s = s;
        best_b = b;
    }
    *scale = (float)best_s;
    *min = (float)-best_b;
}

/* The squared error of x[0..n) stored as s * q with each q (-half..half-1) the nearest; the
 * quants plus half into L when L is not NULL. */
static double symmetric_err(const float *x, int n, int half, float s, uint8_t *L) {
    double err = 0;
    const float is = s != 0.0f ? 1.0f / s : 0.0f;
    for (int i = 0; i < n; i++) {
        const int q = clampi(nearest(x[i] * is), -half, half - 1);
        const double e = (double)s * q - x[i];
        err += e * e;
        if (L) L[i] = (uint8_t)(q + half);
    }
    return err;
}

/* The least-squares scale of x ~ s q, q the level nearest x under s0; 0 when none. */
static double refit_symmetric(const float *x, int n, int half, double s0) {
    double sqq = 0, sqx = 0;
    const float is0 = (float)(1.0 / s0);
    for (int j = 0; j < n; j++) {
        const int q = clampi(nearest(x[j] * is0), -half, half - 1);
        sqq += (double)q * q;
        sqx += (double)q * x[j];
    }
    return sqq > 0 ? sqx / sqq : 0;
}

/* x[0..n) ~ scale * q with q in -half..half-1: candidates with x_m, the value of largest
 * magnitude, near the level -half, each refitted, the best improved by alternation. */
static float fit_symmetric(const float *x, int n, int half) {
    const float xm = signed_absmax(x, n);
    if (xm == 0.0f) return 0.0f;
    double best = xm / (float)-half, best_err = symmetric_err(x, n, half, (float)best, NULL);
    for (int step = 0; step <= FIT_STEPS; step++) {
        const double s0 = xm / -((float)half - 1.0f + 2.0f * (float)step / FIT_STEPS);
        const double s = refit_symmetric(x, n, half, s0);
        const double err = s != 0 ? symmetric_err(x, n, half, (float)s, NULL) : INFINITY;
        if (err < best_err) {
            best_err = err;
            best = s;
        }
    }
    for (int round = 0; round < FIT_ROUNDS; round++) {
        const double s = refit_symmetric(x, n, half, best);
        const double err = s != 0 ? symmetric_err(x, n, half, (float)s, NULL) : INFINITY;
        if (!(err < best_err)) break;
        best_err = err;
        best = s;
    }
    return (float)best;
}

/* ---- K-quants ----------------------------------------------------------------------------------
 */

/* The 8 scales and 8 minimums (6 bits each) of q4_K / q5_K into their 12 bytes (the inverse of
 * ops_quants.c's reading). */
static void pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[12]) {
    memset(out, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = (uint8_t)((ls[j] & 15) | (lm[j] & 15) << 4);
            out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            out[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* One q4_K / q5_K super-block: 8 sub-blocks of 32 fitted, their scales and minimums stored in
 * 6 bits against d and dmin, then each weight's quant (0..top) for the stored scales. The 6-bit
 * values are not simply rounded: for each sub-block the four of floor and ceiling of scale and
 * minimum are tried, keeping the pair whose requantized weights err least. */
static void k_affine_block(const float *x, int top, uint16_t *d16, uint16_t *dmin16,
                           uint8_t scales[12], uint8_t L[256]) {
    float sc[8], mn[8], max_sc = 0.0f, max_mn = 0.0f;
    for (int j = 0; j < 8; j++) {
        fit_affine(x + 32 * j, 32, top, &sc[j], &mn[j]);
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    *d16 = rcore_f32_to_f16(max_sc / 63.0f);
    *dmin16 = rcore_f32_to_f16(max_mn / 63.0f);
    const float dq = rcore_f16_to_f32(*d16), dminq = rcore_f16_to_f32(*dmin16);
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        const float fs = dq > 0.0f ? sc[j] / dq : 0.0f, fm = dminq > 0.0f ? mn[j] / dminq : 0.0f;
        const int s0 = clampi((int)floorf(fs), 0, 63), m0 = clampi((int)floorf(fm), 0, 63);
        double best = INFINITY;
        for (int a = s0; a <= s0 + 1 && a <= 63; a++)
            for (int b = m0; b <= m0 + 1 && b <= 63; b++) {
                const double e =
                    affine_err(x + 32 * j, 32, top, dq * (float)a, dminq * (float)b, NULL);
                if (e < best) {
                    best = e;
                    ls[j] = (uint8_t)a;
                    lm[j] = (uint8_t)b;
                }
            }
        affine_err(x + 32 * j, 32, top, dq * (float)ls[j], dminq * (float)lm[j], L + 32 * j);
    }
    pack_k4_scales(ls, lm, scales);
}

static void q4_K_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q4_K *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++, x += ROPS_QK_K) {
        uint8_t L[256];
        k_affine_block(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int j = 0; j < 256; j += 64)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

static void q5_K_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q5_K *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++, x += ROPS_QK_K) {
        uint8_t L[256];
        k_affine_block(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int j = 0, pair = 0; j < 256; j += 64, pair++)
            for (int l = 0; l < 32; l++) {
                const int a = L[j + l], b = L[j + l + 32];
                y[i].qh[l] |= (uint8_t)((a >> 4) << (2 * pair) | (b >> 4) << (2 * pair + 1));
                y[i].qs[j / 2 + l] = (uint8_t)((a & 15) | (b & 15) << 4);
            }
    }
}

/* Values of q6_K's d tried: the largest scale at -128 ... -126 in quarter steps (a scale of
 * the other sign reaches only +127). */
#define Q6_D_STEPS 9

/* q6_K's 16 int8 scales against d, each the floor or ceiling of its fit sc[j] / d, whichever
 * errs less; returns the super-block's squared error. */
static double q6_scales(const float *x, const float sc[16], float d, int8_t ls[16]) {
    double total = 0;
    for (int j = 0; j < 16; j++) {
        const float f = d != 0.0f ? sc[j] / d : 0.0f;
        const int lo = clampi((int)floorf(f), -128, 127), hi = clampi(lo + 1, -128, 127);
        const double e_lo = symmetric_err(x + 16 * j, 16, 32, d * (float)lo, NULL),
                     e_hi = symmetric_err(x + 16 * j, 16, 32, d * (float)hi, NULL);
        ls[j] = (int8_t)(e_hi < e_lo ? hi : lo);
        total += e_hi < e_lo ? e_hi : e_lo;
    }
    return total;
}

static void q6_K_from_f32(const float *x, void *dst, int64_t n) {
    struct rops_block_q6_K *y = dst;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++, x += ROPS_QK_K) {
        float sc[16], amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_symmetric(x + 16 * j, 16, 32);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max = sc[j];
            }
        }
        /* the scales in int8 against d, the largest near -128, d kept in f16: a few d tried */
        double best_err = INFINITY;
        for (int k = 0; k < Q6_D_STEPS; k++) {
            int8_t ls[16];
            const uint16_t d16 = rcore_f32_to_f16(max / -(128.0f - 0.25f * (float)k));
            const double err = q6_scales(x, sc, rcore_f16_to_f32(d16), ls);
            if (err < best_err) {
                best_err = err;
                y[i].d = d16;
                memcpy(y[i].scales, ls, sizeof ls);
            }
        }
        const float dq = rcore_f16_to_f32(y[i].d);
        uint8_t L[256];
        for (int j = 0; j < 16; j++)
            symmetric_err(x + 16 * j, 16, 32, dq * (float)y[i].scales[j], L + 16 * j);
        for (int j = 0; j < 256; j += 128) {
            uint8_t *ql = y[i].ql + j / 2, *qh = y[i].qh + j / 4;
            for (int l = 0; l < 32; l++) {
                const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
                ql[l] = (uint8_t)((a & 15) | (c & 15) << 4);
                ql[l + 32] = (uint8_t)((b & 15) | (e & 15) << 4);
                qh[l] = (uint8_t)((a >> 4) | (b >> 4) << 2 | (c >> 4) << 4 | (e >> 4) << 6);
            }
        }
    }
}

/* ---- the table ---------------------------------------------------------------------------------
 */

static const rops_from_f32_fn from_f32[] = {
    [ROPS_TYPE_Q4_0] = q4_0_from_f32, [ROPS_TYPE_Q4_1] = q4_1_from_f32,
    [ROPS_TYPE_Q5_0] = q5_0_from_f32, [ROPS_TYPE_Q5_1] = q5_1_from_f32,
    [ROPS_TYPE_Q8_0] = q8_0_from_f32, [ROPS_TYPE_Q4_K] = q4_K_from_f32,
    [ROPS_TYPE_Q5_K] = q5_K_from_f32, [ROPS_TYPE_Q6_K] = q6_K_from_f32,
};

rops_from_f32_fn rops_quantizer_of(enum rops_type type) {
    return (unsigned)type < sizeof from_f32 / sizeof from_f32[0] ? from_f32[type] : NULL;
}
