/*
 * The block types' portable conversions (see ops_quants.h): dequantization of every type to
 * f32, and the quantization of activations to q8_K and q8_1 for the integer dot products.
 *
 * Each to_f32 computes a weight with the float operations of ggml's dequantize_row_<type>, in
 * the same order and without fused multiply-adds (this file is compiled without -mfma, and C11
 * without GNU extensions does not contract), so that it equals ggml's output bit for bit.
 */
#include "ops_quants.h"

#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"

_Static_assert(sizeof(struct rops_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(struct rops_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(struct rops_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(struct rops_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(struct rops_block_q2_K) == 84, "q2_K block");
_Static_assert(sizeof(struct rops_block_q3_K) == 110, "q3_K block");
_Static_assert(sizeof(struct rops_block_q4_K) == 144, "q4_K block");
_Static_assert(sizeof(struct rops_block_q5_K) == 176, "q5_K block");
_Static_assert(sizeof(struct rops_block_q6_K) == 210, "q6_K block");
_Static_assert(sizeof(struct rops_block_q8_K) == 292, "q8_K block");
_Static_assert(sizeof(struct rops_block_iq4_xs) == 136, "iq4_xs block");
_Static_assert(sizeof(struct rops_block_q8_1) == 36, "q8_1 block");
_Static_assert(sizeof(struct rops_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(struct rops_block_q4_0) == 18, "q4_0 block");

const int8_t rops_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

static float f16(uint16_t h) {
    return rcore_f16_to_f32(h);
}

/* ---- legacy types (blocks of 32) ---------------------------------------------------------------
 */

static void q4_0_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void q4_1_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d), m = f16(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(b[i].qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The 32 fifth bits of a q5 block, weight j's at bit j. */
static uint32_t q5_high(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void q5_0_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d);
        const uint32_t qh = q5_high(b[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void q5_1_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d), m = f16(b[i].m);
        const uint32_t qh = q5_high(b[i].qh);
        for (int j = 0; j < 16; j++) {
            const int lo = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static void q8_0_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d);
        for (int j = 0; j < ROPS_QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void q8_1_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d);
        for (int j = 0; j < ROPS_QK; j++) y[j] = (float)b[i].qs[j] * d;
    }
}

static void iq4_nl_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / ROPS_QK; i++, y += ROPS_QK) {
        const float d = f16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)rops_iq4nl_values[b[i].qs[j] & 0x0f];
            y[j + 16] = d * (float)rops_iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

/* ---- K-quants (super-blocks of 256) ------------------------------------------------------------
 */

/* q2_K: each of the two halves of 128 weights reads the same 32 bytes of qs four times, two bits
 * at a time; a shift selects the pair, and each 16 weights have their own scale and minimum. */
static void q2_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q2_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d), dmin = f16(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int part = 0; part < 2; part++) {
                    const uint8_t sc = b[i].scales[is++];
                    const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[l + 16 * part] >> shift) & 3) - ml;
                }
    }
}

/* The 16 6-bit scales of a q3_K block, unpacked: scale i's low 4 bits are nibble i of the first
 * 8 bytes (low nibbles first: i < 8 from the low nibbles), its high 2 bits are 2-bit field i%4 of
 * byte 8 + i/4... as ggml packs them; returned less 32. */
static void q3_K_scales(const uint8_t packed[12], int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        const int lo = i < 8 ? packed[i] & 0x0f : packed[i - 8] >> 4;
        const int hi = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | hi << 4) - 32);
    }
}

static void q3_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q3_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d);
        int8_t scales[16];
        q3_K_scales(b[i].scales, scales);
        const uint8_t *q = b[i].qs, *hm = b[i].hmask;
        int is = 0;
        unsigned m = 1;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int part = 0; part < 2; part++) {
                    const float dl = d * (float)scales[is++];
                    for (int l = 0; l < 16; l++) {
                        const int k = l + 16 * part;
                        const int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
    }
}

/* Scale and minimum j (0..7) of the 12 packed bytes of q4_K / q5_K: j < 4 the low 6 bits of
 * bytes j and j + 4; j >= 4 a nibble of byte j + 4 and the top 2 bits of bytes j - 4 and j. */
static void k4_scale_min(int j, const uint8_t q[12], uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void q4_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q4_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d), dmin = f16(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, mn;
            k4_scale_min(j, b[i].scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k4_scale_min(j + 1, b[i].scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void q5_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q5_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d), dmin = f16(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        unsigned u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, mn;
            k4_scale_min(j, b[i].scales, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            k4_scale_min(j + 1, b[i].scales, &sc, &mn);
            const float d2 = d * (float)sc, m2 = dmin * (float)mn;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

/* q6_K: each half of 128 weights takes 64 bytes of ql (two nibbles each) and 32 of qh (four
 * 2-bit fields each); weight l + 32 k of the half (k < 4) uses nibble k/2 of ql[l + 32 (k%2)],
 * field k of qh[l] and scale l/16 + 2 k. */
static void q6_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q6_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 4; k++) {
                    const int nib = (k < 2 ? ql[l + 32 * k] & 0x0f : ql[l + 32 * (k - 2)] >> 4);
                    const int q = (nib | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                    y[l + 32 * k] = d * (float)sc[l / 16 + 2 * k] * (float)q;
                }
    }
}

static void q8_K_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_q8_K *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++, y += ROPS_QK_K)
        for (int j = 0; j < ROPS_QK_K; j++) y[j] = b[i].d * (float)b[i].qs[j];
}

static void iq4_xs_to_f32(const void *src, float *y, int64_t n) {
    const struct rops_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / ROPS_QK_K; i++) {
        const float d = f16(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                           ((b[i].scales_h >> (2 * ib)) & 3) << 4;
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)rops_iq4nl_values[qs[j] & 0x0f];
                y[j + 16] = dl * (float)rops_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* ---- traits ------------------------------------------------------------------------------------
 */

#define QT(type, nm, blk, st, fn)                                                                  \
    [type] = {.name = nm, .block = blk, .block_bytes = sizeof(struct st), .to_f32 = fn}

static const struct rops_qtraits qtraits[] = {
    QT(ROPS_TYPE_Q4_0, "q4_0", ROPS_QK, rops_block_q4_0, q4_0_to_f32),
    QT(ROPS_TYPE_Q4_1, "q4_1", ROPS_QK, rops_block_q4_1, q4_1_to_f32),
    QT(ROPS_TYPE_Q5_0, "q5_0", ROPS_QK, rops_block_q5_0, q5_0_to_f32),
    QT(ROPS_TYPE_Q5_1, "q5_1", ROPS_QK, rops_block_q5_1, q5_1_to_f32),
    QT(ROPS_TYPE_Q8_0, "q8_0", ROPS_QK, rops_block_q8_0, q8_0_to_f32),
    QT(ROPS_TYPE_Q8_1, "q8_1", ROPS_QK, rops_block_q8_1, q8_1_to_f32),
    QT(ROPS_TYPE_Q2_K, "q2_K", ROPS_QK_K, rops_block_q2_K, q2_K_to_f32),
    QT(ROPS_TYPE_Q3_K, "q3_K", ROPS_QK_K, rops_block_q3_K, q3_K_to_f32),
    QT(ROPS_TYPE_Q4_K, "q4_K", ROPS_QK_K, rops_block_q4_K, q4_K_to_f32),
    QT(ROPS_TYPE_Q5_K, "q5_K", ROPS_QK_K, rops_block_q5_K, q5_K_to_f32),
    QT(ROPS_TYPE_Q6_K, "q6_K", ROPS_QK_K, rops_block_q6_K, q6_K_to_f32),
    QT(ROPS_TYPE_Q8_K, "q8_K", ROPS_QK_K, rops_block_q8_K, q8_K_to_f32),
    QT(ROPS_TYPE_IQ4_NL, "iq4_nl", ROPS_QK, rops_block_iq4_nl, iq4_nl_to_f32),
    QT(ROPS_TYPE_IQ4_XS, "iq4_xs", ROPS_QK_K, rops_block_iq4_xs, iq4_xs_to_f32),
};

const struct rops_qtraits *rops_qtraits_of(enum rops_type type) {
    if ((unsigned)type >= sizeof qtraits / sizeof qtraits[0] || !qtraits[type].to_f32) return NULL;
    return &qtraits[type];
}

/* ---- activations -------------------------------------------------------------------------------
 */

void rops_quantize_q8_K(const float *x, struct rops_block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / ROPS_QK_K; i++, x += ROPS_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < ROPS_QK_K; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        memset(y[i].bsums, 0, sizeof y[i].bsums);
        const float iscale = -127.0f / max;
        if (!isfinite(iscale)) { /* all zero, or under 127 / FLT_MAX: a block of zeros */
            y[i].d = 0.0f;
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        for (int j = 0; j < ROPS_QK_K; j++) {
            const long v = lrintf(iscale * x[j]); /* half to even, as ggml's nearest_int */
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
            y[i].bsums[j / 16] = (int16_t)(y[i].bsums[j / 16] + y[i].qs[j]);
        }
        y[i].d = 1.0f / iscale;
    }
}

void rops_quantize_q8_1(const float *x, struct rops_block_q8_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / ROPS_QK; i++, x += ROPS_QK) {
        float amax = 0.0f;
        for (int j = 0; j < ROPS_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < ROPS_QK; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = rcore_f32_to_f16(d);
        y[i].s = rcore_f32_to_f16((float)sum * d);
    }
}
