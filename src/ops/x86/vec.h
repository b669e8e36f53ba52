/*
 * The vector layer of the x86 kernels: one vector type and its operations for a width chosen by
 * the including file, so that one kernel body (x86/kernels.inc) serves AVX2 (ROPS_VEC_WIDTH 8,
 * in a file compiled with -mavx2 -mfma -mf16c) and AVX-512 (16, with -mavx512f and the rest).
 * It defines
 *   vf, VL                      the vector of floats and its lanes; vmask, a set of lanes
 *   vd                          VL / 2 doubles (the norms' sums)
 *   vec_load/store/set1/bcast/zero, vec_add/sub/mul/div/fma (a * b + c)/fnma (c - a * b),
 *   vec_max/min/abs/copysign, vec_hsum (the sum of the lanes, in a fixed order; vec_hsum8
 *                               that of 8 lanes at either width)
 *   vec_hsums(v)                lane i: vec_hsum(v[i]) for VL vectors, the same bits (the
 *                               same tree of adds, VL sums at once); vec_hsum8s that of
 *                               vec_hsum8 for 8 vectors of 8 at either width
 *   vec_lanes(n)                the first n lanes (0 <= n, VL and more: all); vec_load_m
 *                               (the others read as zero, not touched), vec_store_m, vec_keep
 *                               (the others zero)
 *   vec_outside(x, lo, hi)      a bit per lane (bit l for lane l) where x is not within
 *                               (lo, hi), NaN included
 *   vec_exp, vec_silu, vec_softplus
 *   struct vec_pick3            a fixed choice of VL lanes out of three vectors (element e of
 *                               their concatenation), for the conv's state turned lag-major
 *   VEC_NAME(x)                 x ## _avx2 or x ## _avx512
 * Only the lines that differ between the widths are in the two sections; the rest is written
 * once below them over the intrinsics' common names (_mm256_add_ps, _mm512_add_ps).
 */
#ifndef RECUR_OPS_X86_VEC_H
#define RECUR_OPS_X86_VEC_H

#include <immintrin.h>
#include <stdint.h>

/* The sum of 8 lanes, in the order every path that must give the same bits takes (the AVX2
 * sums, and the q8_0 dots of every width: x86/q8.h). */
static inline float vec_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* vec_hsum8's tree for 8 vectors at once: each level adds the lanes that vec_hsum8's step adds,
 * of two vectors side by side (lo + hi halves, then elements 0 + 2 and 1 + 3, then 0 + 1) */
static inline __m256 vec_hsum8s(const __m256 *v) {
    __m256 h[4], g[2];
    for (int i = 0; i < 4; i++) /* [v(2i) halves' sum | v(2i + 1)'s] */
        h[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    for (int i = 0; i < 2; i++) {
        const __m256d a = _mm256_castps_pd(h[2 * i]), b = _mm256_castps_pd(h[2 * i + 1]);
        g[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    /* lanes v0 v2 v4 v6 | v1 v3 v5 v7, put in order */
    const __m256 r =
        _mm256_add_ps(_mm256_shuffle_ps(g[0], g[1], 0x88), _mm256_shuffle_ps(g[0], g[1], 0xdd));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#if ROPS_VEC_WIDTH == 8

typedef __m256 vf;
typedef __m256d vd;
typedef __m256i vmask; /* all ones in a lane that is in */
#define VL          8
#define VEC_P(op)   _mm256_##op
#define VEC_NAME(x) x##_avx2

static inline float vec_hsum(vf v) {
    return vec_hsum8(v);
}
static inline vf vec_bcast(const float *p) {
    return _mm256_broadcast_ss(p);
}
static inline vf vec_hsums(const vf *v) {
    return vec_hsum8s(v);
}
static inline vf vec_round(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vec_bits(__m256i i) {
    return _mm256_castsi256_ps(i);
}
/* p * 2^n for integral n in [-126, 127], one rounding: 2^n built from its exponent bits */
static inline vf vec_mul_pow2(vf p, vf n) {
    return _mm256_mul_ps(p,
                         vec_bits(_mm256_slli_epi32(
                             _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
}
static inline vf vec_abs(vf x) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}
/* |t| with the sign of s (t >= 0) */
static inline vf vec_copysign(vf t, vf s) {
    return _mm256_or_ps(t, _mm256_and_ps(_mm256_set1_ps(-0.0f), s));
}
static inline vmask vec_lanes(int64_t n) {
    static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(bits + 8 - (n < 8 ? (n > 0 ? n : 0) : 8)));
}
static inline vf vec_load_m(vmask m, const float *p) {
    return _mm256_maskload_ps(p, m);
}
static inline void vec_store_m(float *p, vmask m, vf v) {
    _mm256_maskstore_ps(p, m, v);
}
static inline vf vec_keep(vmask m, vf v) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(m));
}
/* a bit per lane (bit l for lane l) where x is not within (lo, hi), NaN included */
static inline unsigned vec_outside(vf x, float lo, float hi) {
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(lo), _CMP_GT_OQ),
                                    _mm256_cmp_ps(x, _mm256_set1_ps(hi), _CMP_LT_OQ));
    return ~(unsigned)_mm256_movemask_ps(in) & 0xffu;
}
static inline vd vecd_cvt(const float *p) {
    return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
static inline double vecd_hsum(vd v) {
    double lanes[4];
    _mm256_storeu_pd(lanes, v);
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

/* A lane of each output from one source: the same permute of each source (vpermps reads the
 * low 3 bits of an index: e's lane within its source), two blends by e's source. */
struct vec_pick3 {
    __m256i idx[3];
    __m256 from1[3], from2[3];
};
static inline void vec_pick3_set(struct vec_pick3 *p, int o, const int e[VL]) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)e), src = _mm256_srli_epi32(v, 3);
    p->idx[o] = v;
    p->from1[o] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(src, _mm256_set1_epi32(1)));
    p->from2[o] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(src, _mm256_set1_epi32(2)));
}
static inline vf vec_pick3(const struct vec_pick3 *p, int o, vf s0, vf s1, vf s2) {
    const __m256 a = _mm256_permutevar8x32_ps(s0, p->idx[o]),
                 b = _mm256_permutevar8x32_ps(s1, p->idx[o]),
                 c = _mm256_permutevar8x32_ps(s2, p->idx[o]);
    return _mm256_blendv_ps(_mm256_blendv_ps(a, b, p->from1[o]), c, p->from2[o]);
}

#elif ROPS_VEC_WIDTH == 16

typedef __m512 vf;
typedef __m512d vd;
typedef __mmask16 vmask;
#define VL          16
#define VEC_P(op)   _mm512_##op
#define VEC_NAME(x) x##_avx512

static inline float vec_hsum(vf v) {
    return _mm512_reduce_add_ps(v);
}
/* _mm512_reduce_add_ps's tree for 16 vectors at once: each level adds the lanes that its step
 * adds (lanes l + 8 and l, then l + 4 and l, then 0 + 2 and 1 + 3, then 0 + 1), of two vectors
 * side by side */
static inline vf vec_hsums(const vf *v) {
    __m512 h[8], g[4], k[2];
    for (int i = 0; i < 8; i++) /* quarters q0 + q2, q1 + q3 of v(2i), then of v(2i + 1) */
        h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    for (int i = 0; i < 4; i++) /* quarter m: v(4i + m)'s 4 partial sums */
        g[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xdd));
    for (int i = 0; i < 2; i++) {
        const __m512d a = _mm512_castps_pd(g[2 * i]), b = _mm512_castps_pd(g[2 * i + 1]);
        k[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    /* lane 4j + m: v(j + 4m); put in order */
    const __m512 r =
        _mm512_add_ps(_mm512_shuffle_ps(k[0], k[1], 0x88), _mm512_shuffle_ps(k[0], k[1], 0xdd));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
static inline vf vec_bcast(const float *p) {
    return _mm512_set1_ps(*p);
}
static inline vf vec_round(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline vf vec_bits(__m512i i) {
    return _mm512_castsi512_ps(i);
}
/* p * 2^n for integral n in [-126, 127], one rounding (vscalefps: the same bits as p times 2^n
 * built from its exponent, in one instruction where that took four) */
static inline vf vec_mul_pow2(vf p, vf n) {
    return _mm512_scalef_ps(p, n);
}
static inline vf vec_abs(vf x) {
    return _mm512_abs_ps(x);
}
static inline vf vec_copysign(vf t, vf s) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(t),
                        _mm512_and_si512(_mm512_castps_si512(s), _mm512_set1_epi32(INT32_MIN))));
}
static inline vmask vec_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
}
static inline vf vec_load_m(vmask m, const float *p) {
    return _mm512_maskz_loadu_ps(m, p);
}
static inline void vec_store_m(float *p, vmask m, vf v) {
    _mm512_mask_storeu_ps(p, m, v);
}
static inline vf vec_keep(vmask m, vf v) {
    return _mm512_maskz_mov_ps(m, v);
}
static inline unsigned vec_outside(vf x, float lo, float hi) {
    const __mmask16 in = _mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_GT_OQ) &
                         _mm512_cmp_ps_mask(x, _mm512_set1_ps(hi), _CMP_LT_OQ);
    return ~(unsigned)in & 0xffffu;
}
static inline vd vecd_cvt(const float *p) {
    return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}
static inline double vecd_hsum(vd v) {
    return _mm512_reduce_add_pd(v);
}

/* Each output by two two-source permutes: lanes from the first two sources, then the third. */
struct vec_pick3 {
    __m512i lo[3], hi[3];
};
static inline void vec_pick3_set(struct vec_pick3 *p, int o, const int e[VL]) {
    const __m512i v = _mm512_loadu_si512(e);
    const __mmask16 first2 = _mm512_cmplt_epi32_mask(v, _mm512_set1_epi32(32));
    p->lo[o] = _mm512_maskz_mov_epi32(first2, v);
    p->hi[o] = _mm512_mask_blend_epi32(
        first2, _mm512_sub_epi32(v, _mm512_set1_epi32(16)),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
static inline vf vec_pick3(const struct vec_pick3 *p, int o, vf s0, vf s1, vf s2) {
    return _mm512_permutex2var_ps(_mm512_permutex2var_ps(s0, p->lo[o], s1), p->hi[o], s2);
}

#else
#error "define ROPS_VEC_WIDTH as 8 (AVX2) or 16 (AVX-512) before including x86/vec.h"
#endif

#define vec_load(p)       VEC_P(loadu_ps)(p)
#define vec_store(p, v)   VEC_P(storeu_ps)(p, v)
#define vec_set1(x)       VEC_P(set1_ps)(x)
#define vec_zero()        VEC_P(setzero_ps)()
#define vec_add(a, b)     VEC_P(add_ps)(a, b)
#define vec_sub(a, b)     VEC_P(sub_ps)(a, b)
#define vec_mul(a, b)     VEC_P(mul_ps)(a, b)
#define vec_div(a, b)     VEC_P(div_ps)(a, b)
#define vec_fma(a, b, c)  VEC_P(fmadd_ps)(a, b, c)
#define vec_fnma(a, b, c) VEC_P(fnmadd_ps)(a, b, c)
#define vec_max(a, b)     VEC_P(max_ps)(a, b)
#define vec_min(a, b)     VEC_P(min_ps)(a, b)
#define vecd_set1(x)      VEC_P(set1_pd)(x)
#define vecd_zero()       VEC_P(setzero_pd)()
#define vecd_add(a, b)    VEC_P(add_pd)(a, b)
#define vecd_sub(a, b)    VEC_P(sub_pd)(a, b)
#define vecd_mul(a, b)    VEC_P(mul_pd)(a, b)

/* e^x, within a few ulp over the range where e^x is a normal float; inputs below -87 give
 * 0-ish tiny values and above 88 are clamped (the scan only takes e^(dt * A) <= 1).
 * x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial, 2^n into the exponent. */
static inline vf vec_exp(vf x) {
    x = vec_min(vec_max(x, vec_set1(-87.0f)), vec_set1(88.0f));
    const vf n = vec_round(vec_mul(x, vec_set1(1.44269504088896341f)));
    /* r = x - n ln2, with ln2 split in two for precision */
    vf r = vec_fnma(n, vec_set1(0.693359375f), x);
    r = vec_fnma(n, vec_set1(-2.12194440e-4f), r);
    vf p = vec_set1(1.0f / 720);
    p = vec_fma(p, r, vec_set1(1.0f / 120));
    p = vec_fma(p, r, vec_set1(1.0f / 24));
    p = vec_fma(p, r, vec_set1(1.0f / 6));
    p = vec_fma(p, r, vec_set1(0.5f));
    p = vec_fma(p, r, vec_set1(1.0f));
    p = vec_fma(p, r, vec_set1(1.0f));
    return vec_mul_pow2(p, n);
}

/* x / (1 + e^-x) */
static inline vf vec_silu(vf x) {
    return vec_div(x, vec_add(vec_set1(1.0f), vec_exp(vec_sub(vec_zero(), x))));
}

/* log(1 + e^x): max(x, 0) + log1p(e^-|x|), the log1p as 2 atanh(u / (2 + u)) by its series
 * (u <= 1, so s = u / (2 + u) <= 1/3 and nine terms reach float precision). */
static inline vf vec_softplus(vf x) {
    const vf u = vec_exp(vec_sub(vec_zero(), vec_abs(x)));
    const vf s = vec_div(u, vec_add(vec_set1(2.0f), u));
    const vf s2 = vec_mul(s, s);
    vf p = vec_set1(1.0f / 17);
    for (int k = 15; k >= 1; k -= 2) p = vec_fma(p, s2, vec_set1(1.0f / (float)k));
    const vf l = vec_mul(vec_set1(2.0f), vec_mul(s, p));
    return vec_add(vec_max(x, vec_zero()), l);
}

#endif /* RECUR_OPS_X86_VEC_H */
