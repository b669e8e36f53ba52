/*
 * The portable integer dot products of the block types (the reference the vector ones are
 * tested against): a row of weights in its type times a row of activations quantized to the
 * type's partner (ops_quants.h): q8_0 for q4_0, q5_0, q8_0 and iq4_nl; q8_1 for q4_1 and q5_1;
 * q8_K for the K-quants and iq4_xs. As in ggml, every product of quants is summed in integers
 * per block (or per sub-block, times its integer scale), and floats enter once per block:
 * recur and llama.cpp then add the same integers, whatever order the float sums take.
 *
 * Each block is first unpacked to plain int8 quants with their scales, one function a type,
 * so that one loop serves all of them:
 *   legacy: value j = d * q[j] + m            (q8_0 partner: d_x * q_x; q8_1 also s = d_x sum q_x)
 *   K:      value j = d * sc[j/16] * q[j] - dmin * mn[j/16]   (q8_K partner: bsums per 16)
 * q4_K and q5_K's sub-blocks of 32 are two groups of 16 with the same scale.
 */
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"
#include "ops_quants.h"

struct unpacked32 {
    float d, m;
    int8_t q[32];
};

/* ---- legacy blocks -----------------------------------------------------------------------------
 */

static void unpack_q4_0(const void *blk, struct unpacked32 *u) {
    const struct rops_block_q4_0 *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = 0.0f;
    for (int j = 0; j < 16; j++) {
        u->q[j] = (int8_t)((b->qs[j] & 15) - 8);
        u->q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

static void unpack_q4_1(const void *blk, struct unpacked32 *u) {
    const struct rops_block_q4_1 *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = rcore_f16_to_f32(b->m);
    for (int j = 0; j < 16; j++) {
        u->q[j] = (int8_t)(b->qs[j] & 15);
        u->q[j + 16] = (int8_t)(b->qs[j] >> 4);
    }
}

/* q5: the nibbles with their fifth bits, less offset. */
static void q5_quants(const uint8_t qs[16], const uint8_t qh[4], int offset, int8_t q[32]) {
    const uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 15) | (int)((h >> j) & 1) << 4) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4) - offset);
    }
}

static void unpack_q5_0(const void *blk, struct unpacked32 *u) {
    const struct rops_block_q5_0 *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = 0.0f;
    q5_quants(b->qs, b->qh, 16, u->q);
}

static void unpack_q5_1(const void *blk, struct unpacked32 *u) {
    const struct rops_block_q5_1 *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = rcore_f16_to_f32(b->m);
    q5_quants(b->qs, b->qh, 0, u->q);
}

static void unpack_q8_0(const void *blk, struct unpacked32 *u) {
    const struct rops_block_q8_0 *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = 0.0f;
    memcpy(u->q, b->qs, 32);
}

static void unpack_iq4_nl(const void *blk, struct unpacked32 *u) {
    const struct rops_block_iq4_nl *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->m = 0.0f;
    for (int j = 0; j < 16; j++) {
        u->q[j] = rops_iq4nl_values[b->qs[j] & 15];
        u->q[j + 16] = rops_iq4nl_values[b->qs[j] >> 4];
    }
}

/* ---- K blocks ----------------------------------------------------------------------------------
 */

/* Each K type's unpacking in two parts: scales_X fills d, dmin, sc and mn; unpack_X all. */

static void scales_q2_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q2_K *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = rcore_f16_to_f32(b->dmin);
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g] & 15;
        u->mn[g] = b->scales[g] >> 4;
    }
}

static void unpack_q2_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q2_K *b = blk;
    scales_q2_K(blk, u);
    /* weight 128 h + 32 s + 16 p + l: bits 2s of qs[32 h + 16 p + l] (ops_quants.c's order) */
    for (int j = 0; j < 256; j++) {
        const int h = j / 128, s = (j / 32) % 4, p = (j / 16) % 2, l = j % 16;
        u->q[j] = (int8_t)((b->qs[32 * h + 16 * p + l] >> (2 * s)) & 3);
    }
}

static void scales_q3_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q3_K *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = 0.0f;
    for (int g = 0; g < 16; g++) {
        const int lo = g < 8 ? b->scales[g] & 15 : b->scales[g - 8] >> 4;
        const int hi = (b->scales[8 + g % 4] >> (2 * (g / 4))) & 3;
        u->sc[g] = (int16_t)((lo | hi << 4) - 32);
        u->mn[g] = 0;
    }
}

static void unpack_q3_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q3_K *b = blk;
    scales_q3_K(blk, u);
    /* as q2_K, less 4 where weight's bit of hmask (bit 4 h + s of hmask[16 p + l]) is clear */
    for (int j = 0; j < 256; j++) {
        const int h = j / 128, s = (j / 32) % 4, p = (j / 16) % 2, l = j % 16;
        const int lowbits = (b->qs[32 * h + 16 * p + l] >> (2 * s)) & 3;
        const int high = (b->hmask[16 * p + l] >> (4 * h + s)) & 1;
        u->q[j] = (int8_t)(lowbits - (high ? 0 : 4));
    }
}

/* q4_K / q5_K's 6-bit scales and minimums, each for two groups of 16. */
static void k4_groups(const uint8_t s[12], struct rops_unpackedK *u) {
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
        u->sc[2 * j] = u->sc[2 * j + 1] = (int16_t)sc;
        u->mn[2 * j] = u->mn[2 * j + 1] = (int16_t)mn;
    }
}

/* q4_K and q5_K share the header. */
static void scales_q4_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q4_K *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = rcore_f16_to_f32(b->dmin);
    k4_groups(b->scales, u);
}

static void scales_q5_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q5_K *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = rcore_f16_to_f32(b->dmin);
    k4_groups(b->scales, u);
}

static void unpack_q4_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q4_K *b = blk;
    scales_q4_K(blk, u);
    for (int c = 0; c < 4; c++) /* 64 weights: the low nibbles of 32 bytes, then the high */
        for (int l = 0; l < 32; l++) {
            u->q[64 * c + l] = (int8_t)(b->qs[32 * c + l] & 15);
            u->q[64 * c + 32 + l] = (int8_t)(b->qs[32 * c + l] >> 4);
        }
}

static void unpack_q5_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q5_K *b = blk;
    scales_q5_K(blk, u);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            u->q[64 * c + l] =
                (int8_t)((b->qs[32 * c + l] & 15) | ((b->qh[l] >> (2 * c)) & 1) << 4);
            u->q[64 * c + 32 + l] =
                (int8_t)((b->qs[32 * c + l] >> 4) | ((b->qh[l] >> (2 * c + 1)) & 1) << 4);
        }
}

static void scales_q6_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q6_K *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = 0.0f;
    for (int g = 0; g < 16; g++) {
        u->sc[g] = b->scales[g];
        u->mn[g] = 0;
    }
}

static void unpack_q6_K(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_q6_K *b = blk;
    scales_q6_K(blk, u);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        for (int l = 0; l < 32; l++)
            for (int k = 0; k < 4; k++) {
                const int nib = k < 2 ? ql[l + 32 * k] & 15 : ql[l + 32 * (k - 2)] >> 4;
                u->q[128 * h + 32 * k + l] = (int8_t)((nib | ((qh[l] >> (2 * k)) & 3) << 4) - 32);
            }
    }
}

static void scales_iq4_xs(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_iq4_xs *b = blk;
    u->d = rcore_f16_to_f32(b->d);
    u->dmin = 0.0f;
    for (int ib = 0; ib < 8; ib++) {
        const int ls =
            ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | ((b->scales_h >> (2 * ib)) & 3) << 4;
        u->sc[2 * ib] = u->sc[2 * ib + 1] = (int16_t)(ls - 32);
        u->mn[2 * ib] = u->mn[2 * ib + 1] = 0;
    }
}

static void unpack_iq4_xs(const void *blk, struct rops_unpackedK *u) {
    const struct rops_block_iq4_xs *b = blk;
    scales_iq4_xs(blk, u);
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++) {
            u->q[32 * ib + j] = rops_iq4nl_values[b->qs[16 * ib + j] & 15];
            u->q[32 * ib + 16 + j] = rops_iq4nl_values[b->qs[16 * ib + j] >> 4];
        }
}

/* ---- the products ------------------------------------------------------------------------------
 */

typedef void (*unpack32_fn)(const void *blk, struct unpacked32 *u);
typedef void (*unpackK_fn)(const void *blk, struct rops_unpackedK *u);

static const struct {
    unpack32_fn u32;
    unpackK_fn uK, uK_scales;
    enum rops_type partner;
} dots[] = {
    [ROPS_TYPE_Q4_0] = {.u32 = unpack_q4_0, .partner = ROPS_TYPE_Q8_0},
    [ROPS_TYPE_Q4_1] = {.u32 = unpack_q4_1, .partner = ROPS_TYPE_Q8_1},
    [ROPS_TYPE_Q5_0] = {.u32 = unpack_q5_0, .partner = ROPS_TYPE_Q8_0},
    [ROPS_TYPE_Q5_1] = {.u32 = unpack_q5_1, .partner = ROPS_TYPE_Q8_1},
    [ROPS_TYPE_Q8_0] = {.u32 = unpack_q8_0, .partner = ROPS_TYPE_Q8_0},
    [ROPS_TYPE_IQ4_NL] = {.u32 = unpack_iq4_nl, .partner = ROPS_TYPE_Q8_0},
    [ROPS_TYPE_Q2_K] = {.uK = unpack_q2_K, .uK_scales = scales_q2_K, .partner = ROPS_TYPE_Q8_K},
    [ROPS_TYPE_Q3_K] = {.uK = unpack_q3_K, .uK_scales = scales_q3_K, .partner = ROPS_TYPE_Q8_K},
    [ROPS_TYPE_Q4_K] = {.uK = unpack_q4_K, .uK_scales = scales_q4_K, .partner = ROPS_TYPE_Q8_K},
    [ROPS_TYPE_Q5_K] = {.uK = unpack_q5_K, .uK_scales = scales_q5_K, .partner = ROPS_TYPE_Q8_K},
    [ROPS_TYPE_Q6_K] = {.uK = unpack_q6_K, .uK_scales = scales_q6_K, .partner = ROPS_TYPE_Q8_K},
    [ROPS_TYPE_IQ4_XS] = {.uK = unpack_iq4_xs,
                          .uK_scales = scales_iq4_xs,
                          .partner = ROPS_TYPE_Q8_K},
};

bool rops_unpack_K(enum rops_type type, const void *blk, struct rops_unpackedK *u) {
    if ((unsigned)type >= sizeof dots / sizeof dots[0] || !dots[type].uK) return false;
    dots[type].uK(blk, u);
    return true;
}

bool rops_unpack_K_scales(enum rops_type type, const void *blk, struct rops_unpackedK *u) {
    if ((unsigned)type >= sizeof dots / sizeof dots[0] || !dots[type].uK_scales) return false;
    dots[type].uK_scales(blk, u);
    return true;
}

enum rops_type rops_dot_partner(enum rops_type type) {
    if ((unsigned)type >= sizeof dots / sizeof dots[0] || !dots[type].partner) return ROPS_TYPE_F32;
    return dots[type].partner;
}

/* The term block b adds to an input's sum: legacy blocks against q8_0 / q8_1. */
static float term32(const struct unpacked32 *u, bool affine, const void *xq, int64_t b) {
    const int8_t *qx;
    float dx;
    if (affine) {
        const struct rops_block_q8_1 *x1 = (const struct rops_block_q8_1 *)xq + b;
        qx = x1->qs;
        dx = rcore_f16_to_f32(x1->d);
    } else {
        const struct rops_xq8 *x8 = (const struct rops_xq8 *)xq + b;
        qx = x8->qs;
        dx = x8->d;
    }
    int32_t isum = 0;
    for (int j = 0; j < ROPS_QK; j++) isum += (int32_t)u->q[j] * qx[j];
    if (!affine) return u->d * dx * (float)isum;
    return u->d * dx * (float)isum +
           u->m * rcore_f16_to_f32(((const struct rops_block_q8_1 *)xq + b)->s);
}

/* ... and K blocks against q8_K. */
static float termK(const struct rops_unpackedK *u, const void *xq, int64_t b) {
    const struct rops_block_q8_K *x = (const struct rops_block_q8_K *)xq + b;
    int32_t isum = 0, msum = 0;
    for (int g = 0; g < 16; g++) {
        int32_t gsum = 0;
        for (int l = 0; l < 16; l++) gsum += (int32_t)u->q[16 * g + l] * x->qs[16 * g + l];
        isum += u->sc[g] * gsum;
        msum += u->mn[g] * x->bsums[g];
    }
    return u->d * x->d * (float)isum - u->dmin * x->d * (float)msum;
}

void rops_qdot_inputs(enum rops_type type, const void *w, int64_t k, const void *xq,
                      size_t xq_stride, int64_t n, float *y, int64_t y_stride, bool accumulate) {
    const struct rops_qtraits *tr = rops_qtraits_of(type);
    const uint8_t *wb = w, *xb = xq;
    if (!accumulate)
        for (int64_t i = 0; i < n; i++) y[i * y_stride] = 0.0f;
    if (dots[type].u32) {
        const bool affine = dots[type].partner == ROPS_TYPE_Q8_1;
        for (int64_t b = 0; b < k / ROPS_QK; b++) {
            struct unpacked32 u;
            dots[type].u32(wb + (size_t)b * tr->block_bytes, &u);
            for (int64_t i = 0; i < n; i++)
                y[i * y_stride] += term32(&u, affine, xb + (size_t)i * xq_stride, b);
        }
        return;
    }
    for (int64_t b = 0; b < k / ROPS_QK_K; b++) {
        struct rops_unpackedK u;
        dots[type].uK(wb + (size_t)b * tr->block_bytes, &u);
        for (int64_t i = 0; i < n; i++) y[i * y_stride] += termK(&u, xb + (size_t)i * xq_stride, b);
    }
}

float rops_qdot_scalar(enum rops_type type, const void *w, const void *xq, int64_t n) {
    float y;
    rops_qdot_inputs(type, w, n, xq, 0, 1, &y, 1, false);
    return y;
}

void rops_qdot_rows_scalar(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    const size_t col_bytes = rops_row_bytes(a->w->type, a->c0);
    for (int64_t r = r0; r < r1; r++)
        rops_qdot_inputs(a->w->type,
                         (const uint8_t *)a->w->data + (size_t)r * a->w->row_bytes + col_bytes,
                         a->kt, a->xq, a->xq_stride, a->n, a->y + r, a->y_stride, a->accumulate);
}
