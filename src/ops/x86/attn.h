/*
 * rops_attention's units (ops_impl.h: a query and a kv head, that head's group of query heads)
 * for the x86 vector instruction sets: x86/kernels.inc includes this once per width, after
 * x86/vec.h, and it defines VEC_NAME(rops_attn_rows).
 *
 * As the portable kernel (ops_scalar.c) with vectors along a head's values. A tile's key heads
 * are converted to f32 once for the group's query heads (f16 by vcvtph2ps, q8_0 by
 * sign-extending its bytes) into rows padded with zeros to whole vectors, so that nothing has
 * a tail; each query head then takes four keys at a time, one load of q feeding four sums that
 * are reduced together (reducing a sum alone takes about as many instructions as the 8 FMAs of
 * a head of 128 at 16 lanes). The value heads then go into the same rows, and each query head's
 * output is updated a few vectors at a time in registers across the tile's keys rather than loaded
 * and stored per key. The exponentials are vec_exp's (a few ulp). Single-thread CPU time on a
 * loaded Zen 5 (32 heads over 8, head 128, f16), against one key per reduction and a division per
 * key for its page: 512 causal queries 79-92 -> 61-76 ms, one query over 4096 keys 2.6-2.8
 * -> 1.7-2.4 ms (AVX-512; the host was shared, so the ranges are wide).
 */
#ifndef VEC_NAME
#error "include x86/vec.h before x86/attn.h"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

/* VL values from a row of the type, as f32 */
#if ROPS_VEC_WIDTH == 8
static inline vf VEC_NAME(attn_f16)(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline vf VEC_NAME(attn_i8)(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
/* the lane sums of a, b, c, d */
static inline __m128 VEC_NAME(attn_hsum4)(vf a, vf b, vf c, vf d) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#else
static inline vf VEC_NAME(attn_f16)(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline vf VEC_NAME(attn_i8)(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline __m256 VEC_NAME(attn_half)(vf a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
}
/* the lane sums of a, b, c, d: halves added, then as at 8 lanes */
static inline __m128 VEC_NAME(attn_hsum4)(vf a, vf b, vf c, vf d) {
    const __m256 abcd =
        _mm256_hadd_ps(_mm256_hadd_ps(VEC_NAME(attn_half)(a), VEC_NAME(attn_half)(b)),
                       _mm256_hadd_ps(VEC_NAME(attn_half)(c), VEC_NAME(attn_half)(d)));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#endif

/* D values of a head as f32 into out (its lanes past D are left as they are: zeros). */
static inline void VEC_NAME(attn_head)(enum rops_type type, const uint8_t *p, int64_t D,
                                       float *out) {
    const int64_t dv = D & ~(int64_t)(VL - 1);
    if (type == ROPS_TYPE_F32) {
        memcpy(out, p, sizeof(float) * (size_t)D);
    } else if (type == ROPS_TYPE_F16) {
        const uint16_t *h = (const uint16_t *)p;
        for (int64_t c = 0; c < dv; c += VL) vec_store(out + c, VEC_NAME(attn_f16)(h + c));
        for (int64_t c = dv; c < D; c++) out[c] = rcore_f16_to_f32(h[c]);
    } else { /* q8_0: whole blocks of 32, a multiple of VL */
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)p;
        for (int64_t c = 0; c < D; c += 32, b++) {
            const vf d = vec_set1(rcore_f16_to_f32(b->d));
            for (int e = 0; e < 32; e += VL)
                vec_store(out + c + e, vec_mul(d, VEC_NAME(attn_i8)(b->qs + e)));
        }
    }
}

/* Output vectors of a query head held in registers across a tile's keys. */
#define ATTN_OB 4

/* The dot of D (padded: DP) values of q with a key head */
static inline float VEC_NAME(attn_dot)(const float *q, const float *k, int64_t DP) {
    vf d0 = vec_zero(), d1 = vec_zero();
    int64_t c = 0;
    for (; c + 2 * VL <= DP; c += 2 * VL) {
        d0 = vec_fma(vec_load(q + c), vec_load(k + c), d0);
        d1 = vec_fma(vec_load(q + c + VL), vec_load(k + c + VL), d1);
    }
    if (c < DP) d0 = vec_fma(vec_load(q + c), vec_load(k + c), d0);
    return vec_hsum(vec_add(d0, d1));
}

VEC_FN void VEC_NAME(rops_attn_rows)(const struct rops_attn_args *a, int64_t u0, int64_t u1) {
    const int64_t D = a->head_dim, G = a->n_head / a->n_head_kv;
    const int64_t DP = (D + VL - 1) & ~(int64_t)(VL - 1); /* D in whole vectors */
    const size_t kb = rops_row_bytes(a->type_k, a->n_head_kv * D),
                 vb = rops_row_bytes(a->type_v, a->n_head_kv * D);
    float q[ROPS_ATTN_HB][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float acc[ROPS_ATTN_HB][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    /* a tile's key heads, then its value heads, as f32 */
    float tile[ROPS_ATTN_TILE][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float s[ROPS_ATTN_HB][ROPS_ATTN_TILE] __attribute__((aligned(64)));
    float m[ROPS_ATTN_HB], l[ROPS_ATTN_HB];
    const uint8_t *kr[ROPS_ATTN_TILE], *vr[ROPS_ATTN_TILE];
    /* the padding lanes of the heads stay zero: they add nothing to the dots and outputs */
    memset(q, 0, sizeof q);
    for (int t = 0; t < ROPS_ATTN_TILE; t++)
        memset(tile[t] + D, 0, sizeof(float) * (size_t)(DP - D));
    memset(s, 0, sizeof s);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t i = u / a->n_head_kv, g = u % a->n_head_kv;
        const size_t koff = rops_row_bytes(a->type_k, g * D),
                     voff = rops_row_bytes(a->type_v, g * D);
        for (int64_t h0 = 0; h0 < G; h0 += ROPS_ATTN_HB) {
            const int nh = (int)(G - h0 < ROPS_ATTN_HB ? G - h0 : ROPS_ATTN_HB);
            const float *qi = a->q + i * a->q_stride + (g * G + h0) * D;
            for (int h = 0; h < nh; h++) {
                memcpy(q[h], qi + h * D, sizeof(float) * (size_t)D);
                memset(acc[h], 0, sizeof(float) * (size_t)DP);
                m[h] = -INFINITY, l[h] = 0.0f;
            }
            for (int64_t j0 = 0; j0 < a->n_kv; j0 += ROPS_ATTN_TILE) {
                const int64_t j1 = j0 + ROPS_ATTN_TILE < a->n_kv ? j0 + ROPS_ATTN_TILE : a->n_kv;
                const int nt = rops_attn_visible(a, i, j0, j1, kb, vb, kr, vr);
                if (!nt) continue;
                /* scores: the tile's key heads converted once for the group's query heads; four
                   keys at a time share each load of q and one reduction of their sums */
                for (int t = 0; t < nt; t++)
                    VEC_NAME(attn_head)(a->type_k, kr[t] + koff, D, tile[t]);
                for (int h = 0; h < nh; h++) {
                    int t = 0;
                    for (; t + 4 <= nt; t += 4) {
                        vf d0 = vec_zero(), d1 = vec_zero(), d2 = vec_zero(), d3 = vec_zero();
                        for (int64_t c = 0; c < DP; c += VL) {
                            const vf qv = vec_load(q[h] + c);
                            d0 = vec_fma(qv, vec_load(tile[t] + c), d0);
                            d1 = vec_fma(qv, vec_load(tile[t + 1] + c), d1);
                            d2 = vec_fma(qv, vec_load(tile[t + 2] + c), d2);
                            d3 = vec_fma(qv, vec_load(tile[t + 3] + c), d3);
                        }
                        _mm_storeu_ps(s[h] + t, _mm_mul_ps(_mm_set1_ps(a->scale),
                                                           VEC_NAME(attn_hsum4)(d0, d1, d2, d3)));
                    }
                    for (; t < nt; t++) s[h][t] = a->scale * VEC_NAME(attn_dot)(q[h], tile[t], DP);
                }
                for (int t = 0; t < nt; t++)
                    VEC_NAME(attn_head)(a->type_v, vr[t] + voff, D, tile[t]);
                for (int h = 0; h < nh; h++) {
                    float mx = m[h];
                    for (int t = 0; t < nt; t++) mx = s[h][t] > mx ? s[h][t] : mx;
                    const float f = expf(m[h] - mx); /* 0 on the first tile seen (m = -inf) */
                    m[h] = mx;
                    /* the weights e^(s - max), lanes past the tile's keys zero */
                    vf sum = vec_zero();
                    for (int t = 0; t < nt; t += VL) {
                        const vf e = vec_keep(vec_lanes(nt - t),
                                              vec_exp(vec_sub(vec_load(s[h] + t), vec_set1(mx))));
                        vec_store(s[h] + t, e);
                        sum = vec_add(sum, e);
                    }
                    l[h] = l[h] * f + vec_hsum(sum);
                    const vf fv = vec_set1(f);
                    for (int64_t c0 = 0; c0 < DP; c0 += ATTN_OB * VL) {
                        const int nv = (int)((DP - c0) / VL < ATTN_OB ? (DP - c0) / VL : ATTN_OB);
                        vf o[ATTN_OB];
                        for (int b = 0; b < nv; b++)
                            o[b] = vec_mul(fv, vec_load(acc[h] + c0 + b * VL));
                        for (int t = 0; t < nt; t++) {
                            const vf p = vec_set1(s[h][t]);
                            for (int b = 0; b < nv; b++)
                                o[b] = vec_fma(p, vec_load(tile[t] + c0 + b * VL), o[b]);
                        }
                        for (int b = 0; b < nv; b++) vec_store(acc[h] + c0 + b * VL, o[b]);
                    }
                }
            }
            for (int h = 0; h < nh; h++) {
                float *o = a->out + i * a->out_stride + (g * G + h0 + h) * D;
                const float r = l[h] > 0.0f ? 1.0f / l[h] : 0.0f; /* no key seen: zeros */
                for (int64_t c = 0; c < D; c++) o[c] = acc[h][c] * r;
            }
        }
    }
}

#undef ATTN_OB
