/*
 * rops_attention's units (ops_impl.h: a query and a kv head, that head's group of query heads)
 * for the x86 vector instruction sets: x86/kernels.inc includes this once per width, after
 * x86/vec.h, and it defines VEC_NAME(rops_attn_rows).
 *
 * As the portable kernel (ops_scalar.c) with vectors along a head's values: a key or value head
 * is converted to f32 once (f16 by vcvtph2ps, q8_0 by sign-extending its bytes) into a buffer
 * padded with zeros to whole vectors, so that the dots and the output updates run without
 * tails. A tile's values are converted together, and each query head's output is then updated
 * a few vectors at a time in registers across the tile's keys, rather than loaded and stored
 * per key. The exponentials are vec_exp's (a few ulp).
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
#else
static inline vf VEC_NAME(attn_f16)(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline vf VEC_NAME(attn_i8)(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
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

VEC_FN void VEC_NAME(rops_attn_rows)(const struct rops_attn_args *a, int64_t u0, int64_t u1) {
    const int64_t D = a->head_dim, G = a->n_head / a->n_head_kv;
    const int64_t DP = (D + VL - 1) & ~(int64_t)(VL - 1); /* D in whole vectors */
    const size_t kb = rops_row_bytes(a->type_k, a->n_head_kv * D),
                 vb = rops_row_bytes(a->type_v, a->n_head_kv * D);
    float q[ROPS_ATTN_HB][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float acc[ROPS_ATTN_HB][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float vt[ROPS_ATTN_TILE][ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float krow[ROPS_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float s[ROPS_ATTN_HB][ROPS_ATTN_TILE] __attribute__((aligned(64)));
    float m[ROPS_ATTN_HB], l[ROPS_ATTN_HB];
    int32_t idx[ROPS_ATTN_TILE];
    /* the padding lanes of the heads stay zero: they add nothing to the dots */
    memset(q, 0, sizeof q);
    memset(krow, 0, sizeof krow);
    for (int t = 0; t < ROPS_ATTN_TILE; t++) memset(vt[t] + D, 0, sizeof(float) * (size_t)(DP - D));
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
                const int nt = rops_attn_visible(a, i, j0, j1, idx);
                if (!nt) continue;
                /* scores: each key head converted once for the group's query heads */
                for (int t = 0; t < nt; t++) {
                    VEC_NAME(attn_head)
                    (a->type_k, rops_attn_row(a->k_pages, a->page_rows, kb, koff, idx[t]), D, krow);
                    for (int h = 0; h < nh; h++) {
                        vf d0 = vec_zero(), d1 = vec_zero();
                        int64_t c = 0;
                        for (; c + 2 * VL <= DP; c += 2 * VL) {
                            d0 = vec_fma(vec_load(q[h] + c), vec_load(krow + c), d0);
                            d1 = vec_fma(vec_load(q[h] + c + VL), vec_load(krow + c + VL), d1);
                        }
                        if (c < DP) d0 = vec_fma(vec_load(q[h] + c), vec_load(krow + c), d0);
                        s[h][t] = a->scale * vec_hsum(vec_add(d0, d1));
                    }
                }
                for (int t = 0; t < nt; t++) VEC_NAME(attn_head)
                (a->type_v, rops_attn_row(a->v_pages, a->page_rows, vb, voff, idx[t]), D, vt[t]);
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
                                o[b] = vec_fma(p, vec_load(vt[t] + c0 + b * VL), o[b]);
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
