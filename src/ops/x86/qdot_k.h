/*
 * The K types' integer products (part of x86/qdot.h; see there): q2_K, q3_K, q4_K, q5_K, q6_K
 * and iq4_xs weights against q8_K inputs.
 *
 * A row at a time, its blocks in order (rows are contiguous, so the weights are one sequential
 * stream; a software prefetch 4 rows on helps the hardware's: qk_rows), each block unpacked
 * once for up to four inputs; with AVX-512, two vectors side by side in a 512-bit register
 * (qk_block512), and q4_K's 64 bytes of quants split into four such at once against inputs whose
 * sub-blocks qk_rows reorders once a call (qk_half_q4_K).
 * A block's 256 quants are 8 vectors of 32 bytes, vector v the groups of 16 numbered 2v (low
 * 128-bit lane) and 2v + 1 (high lane), as the input's quants at 32 v are. The weights' quants
 * are made non-negative to be vpmaddubsw's unsigned operand: q6_K's q + 32 (0..63), q3_K's
 * q + 4 (0..7), the others as they are (0..31); offset x scale x the input's bsums (the sums of
 * its groups) takes the offset back out. A pair of products is then at most 2 x 63 x 128 (no
 * int16 saturation, even for a -128 input), and vpmaddwd by the groups' scales (int16) adds the
 * pairs to int32 exactly: at most 256 x 63 x 128 x 128 per block. iq4_xs's levels are signed
 * (-127..113): the input's |x| (at most 128) is the unsigned operand and the level with x's
 * sign the signed one (pairs at most 2 x 128 x 127). ROPS_DPBUSD is not used: the scales need
 * the int16 pairs, and vpmaddubsw + vpmaddwd by them cost what the plain dot costs; the VNNI
 * files fuse vpmaddwd and the add into vpdpwssd (QK_DPWSSD: the same exact sums, 1.3x with four
 * inputs).
 *
 * Then one float step per block and input on the int32 lanes as they are (no horizontal sum a
 * block): lanes += d d_x x isum - dmin d_x x msum, the lanes summed once at the row's end (with
 * one input, 8 rows' lanes at once by vec_hsum8s, the same bits as vec_hsum8 on each: a row's
 * own sum had held up the next short row). An input's float steps are the same whatever n and the
 * rows, so its results are the same bits alone or among others; against the portable path (one sum
 * a block) only the order of the float sums differs.
 */
#include <assert.h>
#include <string.h>

#define QK_INLINE static inline __attribute__((always_inline))

/* acc plus the int16 pairs of a times b summed to int32 (exact): vpdpwssd where the file's
 * instruction set has it (AVX512-VNNI with VL, AVX-VNNI), else vpmaddwd and an add. */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QK_DPWSSD(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#elif defined(__AVXVNNI__)
#define QK_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#else
#define QK_DPWSSD(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif

/* int16 element a of src's low lane in all of the low lane, element b of its high lane in all
 * of the high lane. */
QK_INLINE __m256i qk_pick16(__m256i src, int a, int b) {
    const __m256i ctrl = _mm256_set_m128i(_mm_set1_epi16((short)((2 * b + 1) << 8 | 2 * b)),
                                          _mm_set1_epi16((short)((2 * a + 1) << 8 | 2 * a)));
    return _mm256_shuffle_epi8(src, ctrl);
}

/* Byte a of src's low lane zero-extended in all int16 of the low lane, byte b of its high lane
 * in all of the high lane. */
QK_INLINE __m256i qk_pick8(__m256i src, int a, int b) {
    const __m256i ctrl =
        _mm256_set_m128i(_mm_set1_epi16((short)(0x8000 | b)), _mm_set1_epi16((short)(0x8000 | a)));
    return _mm256_shuffle_epi8(src, ctrl);
}

/* Each byte's bit k moved to bit t (other bits: garbage to mask off), k and t < 8. */
QK_INLINE __m256i qk_bit_to(__m256i x, int k, int t) {
    if (k < t) return _mm256_slli_epi16(x, t - k);
    if (k > t) return _mm256_srli_epi16(x, k - t);
    return x;
}

/* One block's scales as vpmaddwd's operands, and its float factors. */
struct qk_scales {
    __m256i lo, hi; /* int16 scales: each lane the 8 that vectors 0..3 (lo), 4..7 (hi) pick */
    bool per32;     /* one scale per 32 (sub-block v: element v of lo in both lanes) */
    bool bytes;     /* per32 with lo's scales as unsigned bytes (picked zero-extended) */
    __m256i groups; /* the 16 groups' scales (for the offset), or their minimums */
    __m128 d;       /* d, and dmin in element 1 for the types with minimums */
};

/* q4_K's and q5_K's 12 bytes of 6-bit scales and minimums, unpacked in a vector: bytes 0..7
 * the scales of sub-blocks 0..7, 8..15 their minimums. Sub-blocks 0..3: the low 6 bits of bytes
 * 0..3 (scales) and 4..7 (minimums); 4..7: the nibbles of bytes 8..11 (low: scales, high:
 * minimums) below the top 2 bits of bytes 0..3 (scales) and 4..7 (minimums). Reads 16 bytes
 * from scales (the block's quants follow them). */
QK_INLINE __m128i qk_unpack_k_scales(const uint8_t *scales) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)scales);
    /* the low bits: bytes 0..3, 8..11 (low nibbles), 4..7, 8..11 (high nibbles) */
    const __m128i a =
        _mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i lo =
        _mm_and_si128(_mm_blend_epi32(a, _mm_srli_epi16(a, 4), 0x8),
                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    /* the top 2 bits of bytes 0..3 and 4..7 as bits 4, 5 of sub-blocks 4..7 */
    const __m128i b = _mm_shuffle_epi8(
        raw, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
}

/* The f16 d and dmin at p (adjacent, as every type with minimums stores them) as floats. */
QK_INLINE __m128 qk_d_dmin(const uint16_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

/* The block's scales; its quant vectors come from qk_quants. */
QK_INLINE void qk_scales(enum rops_type type, const uint8_t *blk, struct qk_scales *s) {
    s->per32 = s->bytes = false;
    switch (type) {
    case ROPS_TYPE_Q4_K:
    case ROPS_TYPE_Q5_K: { /* the same header: d, dmin, 12 bytes of 6-bit scales and mins */
        const struct rops_block_q4_K *b = (const struct rops_block_q4_K *)blk;
        s->lo = _mm256_broadcastsi128_si256(qk_unpack_k_scales(b->scales));
        s->hi = s->lo;
        s->per32 = s->bytes = true;
        /* each minimum, zero-extended, for its sub-block's two groups */
        const char z = -128;
        s->groups = _mm256_shuffle_epi8(
            s->lo, _mm256_setr_epi8(8, z, 8, z, 9, z, 9, z, 10, z, 10, z, 11, z, 11, z, 12, z, 12,
                                    z, 13, z, 13, z, 14, z, 14, z, 15, z, 15, z));
        s->d = qk_d_dmin(&b->d);
        return;
    }
    case ROPS_TYPE_Q6_K: {
        const struct rops_block_q6_K *b = (const struct rops_block_q6_K *)blk;
        s->groups = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        s->d = _mm_set_ss(_cvtsh_ss(b->d));
        break;
    }
    case ROPS_TYPE_Q3_K: {
        const struct rops_block_q3_K *b = (const struct rops_block_q3_K *)blk;
        uint32_t u[3];
        memcpy(u, b->scales, sizeof u);
        const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
        /* groups 4k..4k+3: low nibbles of bytes 0..3, 4..7, then their high nibbles; the top
           2 bits at 2k of bytes 8..11 */
        const __m128i sc = _mm_set_epi32((int)(((u[1] >> 4) & m4) | ((u[2] >> 6) & m2) << 4),
                                         (int)(((u[0] >> 4) & m4) | ((u[2] >> 4) & m2) << 4),
                                         (int)((u[1] & m4) | ((u[2] >> 2) & m2) << 4),
                                         (int)((u[0] & m4) | (u[2] & m2) << 4));
        s->groups = _mm256_sub_epi16(_mm256_cvtepu8_epi16(sc), _mm256_set1_epi16(32));
        s->d = _mm_set_ss(_cvtsh_ss(b->d));
        break;
    }
    case ROPS_TYPE_Q2_K: {
        const struct rops_block_q2_K *b = (const struct rops_block_q2_K *)blk;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(15);
        const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4));
        s->lo = _mm256_permute2x128_si256(sc, sc, 0x00);
        s->hi = _mm256_permute2x128_si256(sc, sc, 0x11);
        s->groups = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        s->d = qk_d_dmin(&b->d);
        return;
    }
    default: { /* iq4_xs: 8 6-bit scales, less 32: sub-block ib's low 4 bits are nibble ib of
                  scales_l, its high 2 bits at 2 ib of scales_h (moved to bits 14, 15 of a lane
                  by a multiply, then down) */
        const struct rops_block_iq4_xs *b = (const struct rops_block_iq4_xs *)blk;
        uint32_t l;
        memcpy(&l, b->scales_l, sizeof l);
        const __m128i raw = _mm_cvtsi32_si128((int)l), m4 = _mm_set1_epi8(15);
        const __m128i lo = _mm_cvtepu8_epi16(
            _mm_unpacklo_epi8(_mm_and_si128(raw, m4), _mm_and_si128(_mm_srli_epi16(raw, 4), m4)));
        const __m128i hi =
            _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16((short)b->scales_h),
                                           _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6,
                                                          1 << 4, 1 << 2, 1)),
                           14);
        s->lo = _mm256_broadcastsi128_si256(
            _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32)));
        s->hi = s->lo;
        s->per32 = true;
        s->groups = _mm256_setzero_si256();
        s->d = _mm_set_ss(_cvtsh_ss(b->d));
        return;
    }
    }
    /* q6_K and q3_K: 16 scales, one a group, and an offset */
    s->lo = _mm256_permute2x128_si256(s->groups, s->groups, 0x00);
    s->hi = _mm256_permute2x128_si256(s->groups, s->groups, 0x11);
}

/* The scales of vector v's two groups, in its two lanes. */
QK_INLINE __m256i qk_scale_of(const struct qk_scales *s, int v) {
    if (s->per32) return s->bytes ? qk_pick8(s->lo, v, v) : qk_pick16(s->lo, v, v);
    return v < 4 ? qk_pick16(s->lo, 2 * v, 2 * v + 1) : qk_pick16(s->hi, 2 * v - 8, 2 * v - 7);
}

/* Quant vectors 2c and 2c + 1 of a block (non-negative, but iq4_xs's signed levels). */
QK_INLINE void qk_quants(enum rops_type type, const uint8_t *blk, int c, __m256i *q0, __m256i *q1) {
    const __m256i m4 = _mm256_set1_epi8(15);
    switch (type) {
    case ROPS_TYPE_Q4_K: { /* 64 weights: the low nibbles of 32 bytes, then the high ones */
        const __m256i raw =
            _mm256_loadu_si256((const __m256i *)((const struct rops_block_q4_K *)blk)->qs + c);
        *q0 = _mm256_and_si256(raw, m4);
        *q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        return;
    }
    case ROPS_TYPE_Q5_K: { /* q4_K's with bits 2c and 2c + 1 of qh as the fifth */
        const struct rops_block_q5_K *b = (const struct rops_block_q5_K *)blk;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)b->qs + c);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh), b4 = _mm256_set1_epi8(16);
        *q0 = _mm256_or_si256(_mm256_and_si256(raw, m4),
                              _mm256_and_si256(qk_bit_to(qh, 2 * c, 4), b4));
        *q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                              _mm256_and_si256(qk_bit_to(qh, 2 * c + 1, 4), b4));
        return;
    }
    case ROPS_TYPE_Q6_K: { /* vector 4h + k: nibbles of ql (64h + 32 (k % 2)), low if k < 2,
                              with bits 2k, 2k + 1 of qh (32 h) above them; q + 32 */
        const struct rops_block_q6_K *b = (const struct rops_block_q6_K *)blk;
        const int h = c / 2, k = 2 * (c % 2);
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i m2 = _mm256_set1_epi8(0x30);
        if (k == 0) {
            *q0 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                  _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            *q1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                  _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        } else {
            *q0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                  _mm256_and_si256(qh, m2));
            *q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                  _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
        }
        return;
    }
    case ROPS_TYPE_Q3_K:
    case ROPS_TYPE_Q2_K: { /* vector 4h + s: bits 2s of qs[32 h ...]; q3_K: bit 4h + s of hmask
                              as 4 (q + 4) */
        const int h = c / 2;
        const uint8_t *qs = type == ROPS_TYPE_Q2_K ? ((const struct rops_block_q2_K *)blk)->qs
                                                   : ((const struct rops_block_q3_K *)blk)->qs;
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * h)),
                      m2 = _mm256_set1_epi8(3);
        const int s0 = 2 * (c % 2);
        *q0 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s0), m2);
        *q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s0 + 2), m2);
        if (type == ROPS_TYPE_Q3_K) {
            const __m256i hm = _mm256_loadu_si256(
                              (const __m256i *)((const struct rops_block_q3_K *)blk)->hmask),
                          b2 = _mm256_set1_epi8(4);
            *q0 = _mm256_or_si256(*q0, _mm256_and_si256(qk_bit_to(hm, 4 * h + s0, 2), b2));
            *q1 = _mm256_or_si256(*q1, _mm256_and_si256(qk_bit_to(hm, 4 * h + s0 + 1, 2), b2));
        }
        return;
    }
    default: { /* iq4_xs: sub-blocks 2c, 2c + 1 from 32 bytes, each its low nibbles then its high
                  ones, as levels */
        const __m256i raw =
            _mm256_loadu_si256((const __m256i *)((const struct rops_block_iq4_xs *)blk)->qs + c);
        const __m256i levels =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rops_iq4nl_values));
        const __m256i lo = _mm256_and_si256(raw, m4),
                      hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        *q0 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(lo, hi, 0x20));
        *q1 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(lo, hi, 0x31));
        return;
    }
    }
}

/* The group scales times the products of vector v with an input, added to isum. */
QK_INLINE void qk_dot1(enum rops_type type, __m256i q, __m256i sc, const struct rops_block_q8_K *x,
                       int v, __m256i *isum) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)x->qs + v);
    const __m256i p = type == ROPS_TYPE_IQ4_XS
                          ? _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(q, xv))
                          : _mm256_maddubs_epi16(q, xv);
    *isum = QK_DPWSSD(*isum, p, sc);
}

/* ... with NI inputs (written out: a loop here is left rolled, its sums in memory). */
QK_INLINE void qk_dot(enum rops_type type, int NI, __m256i q, __m256i sc,
                      const struct rops_block_q8_K *const *x, int v, __m256i *isum) {
    qk_dot1(type, q, sc, x[0], v, &isum[0]);
    if (NI > 1) qk_dot1(type, q, sc, x[1], v, &isum[1]);
    if (NI > 2) qk_dot1(type, q, sc, x[2], v, &isum[2]);
    if (NI > 3) qk_dot1(type, q, sc, x[3], v, &isum[3]);
}

/* The block's float step for an input: isum less the offset, times d d_x, less the minimums'
 * sum times dmin d_x, added to acc's lanes. */
QK_INLINE void qk_term(enum rops_type type, const struct qk_scales *s,
                       const struct rops_block_q8_K *x, __m256i isum, __m256 *acc) {
    const bool has_min = type == ROPS_TYPE_Q2_K || type == ROPS_TYPE_Q4_K || type == ROPS_TYPE_Q5_K;
    const int offset_shift = type == ROPS_TYPE_Q6_K ? 5 : type == ROPS_TYPE_Q3_K ? 2 : -1;
    const __m256i bsums = _mm256_loadu_si256((const __m256i *)x->bsums);
    const __m256i per_group = _mm256_madd_epi16(bsums, s->groups);
    if (offset_shift >= 0)
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(per_group, offset_shift));
    const __m128 f = _mm_mul_ps(s->d, _mm_set1_ps(x->d)); /* d d_x, dmin d_x */
    *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), _mm256_cvtepi32_ps(isum), *acc);
    if (has_min)
        *acc = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(f)),
                                _mm256_cvtepi32_ps(per_group), *acc);
}

/* Quant vectors 2c and 2c + 1 against NI inputs, into two sums an input (two dependency
 * chains: with one input a single chain of vpdpwssd bound a block by its latency). */
QK_INLINE void qk_pair(enum rops_type type, int NI, const uint8_t *blk, const struct qk_scales *s,
                       const struct rops_block_q8_K *const *x, int c, __m256i *isum,
                       __m256i *isum2) {
    __m256i q0, q1;
    qk_quants(type, blk, c, &q0, &q1);
    qk_dot(type, NI, q0, qk_scale_of(s, 2 * c), x, 2 * c, isum);
    qk_dot(type, NI, q1, qk_scale_of(s, 2 * c + 1), x, 2 * c + 1, isum2);
}

/* Block blk of a row against block x[i] of NI inputs, each block's terms added to acc[i]'s
 * lanes. */
QK_INLINE void qk_block(enum rops_type type, int NI, const uint8_t *blk,
                        const struct rops_block_q8_K *const *x, __m256 *acc) {
    struct qk_scales s;
    qk_scales(type, blk, &s);
    __m256i isum[4], isum2[4]; /* exact integers: their split changes no bit */
    for (int i = 0; i < NI; i++) isum[i] = isum2[i] = _mm256_setzero_si256();
    /* written out: c must be a constant in qk_quants and qk_scale_of (shift counts, shuffles) */
    qk_pair(type, NI, blk, &s, x, 0, isum, isum2);
    qk_pair(type, NI, blk, &s, x, 1, isum, isum2);
    qk_pair(type, NI, blk, &s, x, 2, isum, isum2);
    qk_pair(type, NI, blk, &s, x, 3, isum, isum2);
    for (int i = 0; i < NI; i++) isum[i] = _mm256_add_epi32(isum[i], isum2[i]);
    qk_term(type, &s, x[0], isum[0], &acc[0]);
    if (NI > 1) qk_term(type, &s, x[1], isum[1], &acc[1]);
    if (NI > 2) qk_term(type, &s, x[2], isum[2], &acc[2]);
    if (NI > 3) qk_term(type, &s, x[3], isum[3], &acc[3]);
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
/* With AVX-512, quant vectors 2c and 2c + 1 side by side in one 512-bit register against the
 * input's 64 bytes at 64 c (contiguous: vectors 2c, 2c + 1), their scales picked in each half:
 * half the products, scale picks and input loads of qk_pair. Lane j of the low half gathers
 * what lane j of vector 2c's sum did, the high half vector 2c + 1's; the halves are added once a
 * block (qk_block512), so each of the 8 lanes holds the same exact integer as qk_block's. */
#define QK_CTRL(e) ((short)((2 * (e) + 1) << 8 | 2 * (e)))
/* One scale a sub-block (per32): sub-block e's in the low 256 bits, f's in the high 256. */
QK_INLINE __m512i qk_pick512(const struct qk_scales *s, int e, int f) {
    const __m512i lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s->lo));
    /* bytes zero-extended, or int16 */
    const short a = s->bytes ? (short)(0x8000 | e) : QK_CTRL(e),
                b = s->bytes ? (short)(0x8000 | f) : QK_CTRL(f);
    return _mm512_shuffle_epi8(lo,
                               _mm512_set_epi16(b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, a,
                                                a, a, a, a, a, a, a, a, a, a, a, a, a, a, a));
}

QK_INLINE __m512i qk_scale512(const struct qk_scales *s, int c) {
    if (s->per32) return qk_pick512(s, 2 * c, 2 * c + 1);
    /* element e of the low 128 bits of src in the low 256 bits, f in the high 256 */
    const __m512i lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s->lo)),
                  hi = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s->hi));
    /* groups 4c .. 4c + 3, one a 128-bit lane: 0..7 in lo's low lane, 8..15 in hi's */
    const int g = (4 * c) % 8;
    const short g0 = QK_CTRL(g), g1 = QK_CTRL(g + 1), g2 = QK_CTRL(g + 2), g3 = QK_CTRL(g + 3);
    const __m512i ctrl =
        _mm512_set_epi16(g3, g3, g3, g3, g3, g3, g3, g3, g2, g2, g2, g2, g2, g2, g2, g2, g1, g1, g1,
                         g1, g1, g1, g1, g1, g0, g0, g0, g0, g0, g0, g0, g0);
    return _mm512_shuffle_epi8(c < 2 ? lo : hi, ctrl);
}
#undef QK_CTRL

QK_INLINE void qk_pair512(enum rops_type type, int NI, const uint8_t *blk,
                          const struct qk_scales *s, const struct rops_block_q8_K *const *x, int c,
                          __m512i *isum) {
    __m256i q0, q1;
    qk_quants(type, blk, c, &q0, &q1);
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    const __m512i sc = qk_scale512(s, c);
    for (int i = 0; i < NI; i++) {
        const __m512i xv = _mm512_loadu_si512((const __m512i *)x[i]->qs + c);
        const __m512i p =
            type == ROPS_TYPE_IQ4_XS
                ? _mm512_maddubs_epi16(
                      _mm512_abs_epi8(xv),
                      _mm512_mask_sub_epi8(q, _mm512_movepi8_mask(xv), _mm512_setzero_si512(), q))
                : _mm512_maddubs_epi16(q, xv);
        isum[i] = _mm512_dpwssd_epi32(isum[i], p, sc);
    }
}

/* q4_K's 64 bytes at 64 j: their low nibbles are sub-blocks 4j (bytes 0..31) and 4j + 2 (32..63),
 * their high nibbles 4j + 1 and 4j + 3, against an input whose sub-blocks are in the order
 * 0 2 1 3 4 6 5 7 (qk_permute_q4_K): each 256-bit half's bytes are where its sub-block's are in
 * qk_pair512, so the lanes gather the same integers, from one load and a shift for 128 quants. */
QK_INLINE void qk_half_q4_K(int NI, const uint8_t *blk, const struct qk_scales *s,
                            const struct rops_block_q8_K *const *x, int j, __m512i *isum,
                            __m512i *isum2) {
    const __m512i raw =
        _mm512_loadu_si512((const __m512i *)((const struct rops_block_q4_K *)blk)->qs + j);
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lo = _mm512_and_si512(raw, m4),
                  hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    const __m512i sl = qk_pick512(s, 4 * j, 4 * j + 2), sh = qk_pick512(s, 4 * j + 1, 4 * j + 3);
    for (int i = 0; i < NI; i++) {
        const __m512i *xv = (const __m512i *)x[i]->qs + 2 * j;
        isum[i] =
            _mm512_dpwssd_epi32(isum[i], _mm512_maddubs_epi16(lo, _mm512_loadu_si512(xv)), sl);
        isum2[i] =
            _mm512_dpwssd_epi32(isum2[i], _mm512_maddubs_epi16(hi, _mm512_loadu_si512(xv + 1)), sh);
    }
}

/* n inputs' nb blocks (stride bytes apart) into out, each block's sub-blocks in the order
 * qk_half_q4_K takes them. */
static void qk_permute_q4_K(const uint8_t *xq, size_t stride, int64_t n, int64_t nb,
                            struct rops_block_q8_K *out) {
    static const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) {
            const struct rops_block_q8_K *src =
                (const struct rops_block_q8_K *)(xq + i * stride) + b;
            struct rops_block_q8_K *dst = out + i * nb + b;
            dst->d = src->d;
            memcpy(dst->bsums, src->bsums, sizeof dst->bsums);
            for (int v = 0; v < 8; v++) memcpy(dst->qs + 32 * v, src->qs + 32 * order[v], 32);
        }
}

QK_INLINE void qk_block512(enum rops_type type, int NI, const uint8_t *blk,
                           const struct rops_block_q8_K *const *x, __m256 *acc) {
    struct qk_scales s;
    qk_scales(type, blk, &s);
    __m512i isum[4], isum2[4];
    for (int i = 0; i < NI; i++) isum[i] = isum2[i] = _mm512_setzero_si512();
    if (type == ROPS_TYPE_Q4_K) {
        qk_half_q4_K(NI, blk, &s, x, 0, isum, isum2);
        qk_half_q4_K(NI, blk, &s, x, 1, isum, isum2);
    } else {
        qk_pair512(type, NI, blk, &s, x, 0, isum);
        qk_pair512(type, NI, blk, &s, x, 1, isum2);
        qk_pair512(type, NI, blk, &s, x, 2, isum);
        qk_pair512(type, NI, blk, &s, x, 3, isum2);
    }
    for (int i = 0; i < NI; i++) {
        const __m512i t = _mm512_add_epi32(isum[i], isum2[i]);
        const __m256i sum =
            _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
        qk_term(type, &s, x[i], sum, &acc[i]);
    }
}
#define qk_block qk_block512
/* inputs qk_rows reorders at a time for qk_half_q4_K (on its stack: 18 KiB for a whole tile) */
#define QK_GROUP 16
#endif

/* One row's blocks [0, nb) at w against one input: its 8 lanes, not yet summed. */
QK_INLINE __m256 qk_row_lanes(enum rops_type type, const uint8_t *w, int64_t nb, size_t bb,
                              const uint8_t *xq) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct rops_block_q8_K *x[1] = {(const struct rops_block_q8_K *)xq + b};
        qk_block(type, 1, w + (size_t)b * bb, x, &acc);
    }
    return acc;
}

/* Row r's weights 4 rows on, into L1 (one input from memory: 1.15-1.4x on the Q6_K files'
 * generation, 1.1-1.3x for q4_K; 8 KiB on measured the same) */
QK_INLINE void qk_prefetch_row(const struct rops_qdot_args *a, const uint8_t *w, int64_t r,
                               int64_t r1, size_t bytes) {
    if (r + 4 < r1)
        for (size_t o = 0; o < bytes; o += 64)
            _mm_prefetch((const char *)w + 4 * a->w->row_bytes + o, _MM_HINT_T0);
}

/* One row's blocks [0, nb) at w against NI inputs. */
QK_INLINE void qk_row(enum rops_type type, int NI, const uint8_t *w, int64_t nb, size_t bb,
                      const uint8_t *xq, size_t xq_stride, float *y, int64_t y_stride,
                      bool accumulate) {
    __m256 acc[4];
    for (int i = 0; i < NI; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        const struct rops_block_q8_K *x[4];
        for (int i = 0; i < NI; i++)
            x[i] = (const struct rops_block_q8_K *)(xq + (size_t)i * xq_stride) + b;
        qk_block(type, NI, blk, x, acc);
    }
    for (int i = 0; i < NI; i++)
        y[i * y_stride] = (accumulate ? y[i * y_stride] : 0.0f) + vec_hsum8(acc[i]);
}

QK_INLINE void qk_rows(enum rops_type type, size_t bb, const struct rops_qdot_args *a, int64_t r0,
                       int64_t r1) {
    const uint8_t *base = (const uint8_t *)a->w->data + rops_row_bytes(type, a->c0);
    const int64_t nb = a->kt / ROPS_QK_K;
    /* the inputs in groups: with AVX-512, q4_K's reordered for qk_half_q4_K a group at a time */
    int64_t group = a->n;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    _Alignas(64) struct rops_block_q8_K xp[QK_GROUP * ROPS_QMM_TILE / ROPS_QK_K];
    if (type == ROPS_TYPE_Q4_K) group = QK_GROUP;
    assert(a->kt <= ROPS_QMM_TILE); /* xp holds a tile */
#endif
    for (int64_t i0 = 0; i0 < a->n; i0 += group) {
        const int64_t g = a->n - i0 < group ? a->n - i0 : group;
        const uint8_t *xg = a->xq + (size_t)i0 * a->xq_stride;
        size_t xs = a->xq_stride;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
        if (type == ROPS_TYPE_Q4_K) {
            qk_permute_q4_K(xg, xs, g, nb, xp);
            xg = (const uint8_t *)xp;
            xs = (size_t)nb * sizeof *xp;
        }
#endif
        int64_t r = r0;
        if (g == 1) /* one input: 8 rows' lanes summed at once (vec_hsum8s: vec_hsum8's bits) */
            for (; r + 8 <= r1; r += 8) {
                __m256 lanes[8];
                for (int j = 0; j < 8; j++) {
                    const uint8_t *w = base + (size_t)(r + j) * a->w->row_bytes;
                    qk_prefetch_row(a, w, r + j, r1, (size_t)nb * bb);
                    lanes[j] = qk_row_lanes(type, w, nb, bb, xg);
                }
                float *y = a->y + i0 * a->y_stride + r;
                const __m256 sums = vec_hsum8s(lanes);
                _mm256_storeu_ps(
                    y,
                    _mm256_add_ps(a->accumulate ? _mm256_loadu_ps(y) : _mm256_setzero_ps(), sums));
            }
        for (; r < r1; r++) {
            const uint8_t *w = base + (size_t)r * a->w->row_bytes;
            qk_prefetch_row(a, w, r, r1, (size_t)nb * bb);
            for (int64_t i = 0; i < g; i += 4) {
                const uint8_t *xq = xg + (size_t)i * xs;
                float *y = a->y + (i0 + i) * a->y_stride + r;
                switch (g - i < 4 ? g - i : 4) {
                case 1:
                    qk_row(type, 1, w, nb, bb, xq, xs, y, a->y_stride, a->accumulate);
                    break;
                case 2:
                    qk_row(type, 2, w, nb, bb, xq, xs, y, a->y_stride, a->accumulate);
                    break;
                case 3:
                    qk_row(type, 3, w, nb, bb, xq, xs, y, a->y_stride, a->accumulate);
                    break;
                default:
                    qk_row(type, 4, w, nb, bb, xq, xs, y, a->y_stride, a->accumulate);
                    break;
                }
            }
        }
    }
}

/* False when this file has no kernel for the type. */
static bool qdot_k_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    const enum rops_type type = a->w->type;
    if (type == ROPS_TYPE_Q2_K)
        qk_rows(ROPS_TYPE_Q2_K, sizeof(struct rops_block_q2_K), a, r0, r1);
    else if (type == ROPS_TYPE_Q3_K)
        qk_rows(ROPS_TYPE_Q3_K, sizeof(struct rops_block_q3_K), a, r0, r1);
    else if (type == ROPS_TYPE_Q4_K)
        qk_rows(ROPS_TYPE_Q4_K, sizeof(struct rops_block_q4_K), a, r0, r1);
    else if (type == ROPS_TYPE_Q5_K)
        qk_rows(ROPS_TYPE_Q5_K, sizeof(struct rops_block_q5_K), a, r0, r1);
    else if (type == ROPS_TYPE_Q6_K)
        qk_rows(ROPS_TYPE_Q6_K, sizeof(struct rops_block_q6_K), a, r0, r1);
    else if (type == ROPS_TYPE_IQ4_XS)
        qk_rows(ROPS_TYPE_IQ4_XS, sizeof(struct rops_block_iq4_xs), a, r0, r1);
    else
        return false;
    return true;
}

#undef qk_block
#undef QK_DPWSSD
#undef QK_INLINE
