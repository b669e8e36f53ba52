/*
 * The legacy 32-weight types' integer products (part of x86/qdot.h; see there): q4_1 and q5_1
 * against q8_1 inputs, q5_0 and iq4_nl against q8_0 (struct rops_xq8).
 *
 * Rows go 8 side by side, each block of the inputs loaded once for them, 8 rows further on
 * prefetched a share per block (as x86/q8.h, but 8 KiB ahead at least); more inputs go in groups of
 * up to four over the same 8 rows while they are in the cache, so that a weight block is unpacked
 * once a group and read from memory once. Two rows share a vector: one holds the first 16 weights
 * of both (bytes 0..15 row a, 16..31 row b), the other the last 16, against the input's halves
 * repeated, so that lanes 0..3 sum row a and 4..7 row b; three rounds of vphaddd then sum the
 * 8 rows' lanes, in lanes ordered as qdot32_row below (q5_0 against one input with AVX-512:
 * four rows a vector, qdot32_q5_0_one). The weights become bytes:
 *   q4_1, q5_1  the quants as they are, unsigned (0..15, 0..31);
 *   q5_0        the same 0..31, the 16 it is offset by taken out in advance: an input block's
 *               sums (in fours, as ROPS_DPBUSD adds them) start at -16 x the sums of its quants;
 *               q5's fifth bits become 16s by a byte shuffle and compare, or in ops_avx512.c
 *               (ROPS_VEC_WIDTH 16: AVX-512 BW) by a masked add;
 *   iq4_nl      the table's levels (rops_iq4nl_values) by a byte shuffle: with vpdpbusd
 *               (QDOT32_DPBUSD_WIDE) 128 up, unsigned, the sums starting at -128 x the input's;
 *               with AVX2's vpmaddubsw signed, |w| times x with w's sign.
 * Through ROPS_DPBUSD the pairs of products stay within int16 (2 x 31 x 127, 2 x 127 x 127: the
 * inputs are within +-127), so the sums are exact with vpmaddubsw too. The float steps, per block
 * and input, are the portable path's (ops_qdot.c), a lane a row: y += d_w * d_x * isum (+ m * s),
 * so the results are its bits, whatever the group and the rows.
 */
#include <string.h>

/* vpdpbusd where the file is compiled for it: exact for any bytes (no int16 step), so that
 * iq4_nl's levels can go 128 up as unsigned bytes, their sums starting at -128 x the input's
 * (in ops_avx2.c, |w| times x with w's sign instead) */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QDOT32_DPBUSD_WIDE(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#elif defined(__AVXVNNI__)
#define QDOT32_DPBUSD_WIDE(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#endif

/* Lane l of the row sums holds row qdot32_row[l] of the 8. */
static const int qdot32_row[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static inline __attribute__((always_inline)) size_t qdot32_block_bytes(enum rops_type type) {
    switch (type) {
    case ROPS_TYPE_Q4_1:
        return sizeof(struct rops_block_q4_1);
    case ROPS_TYPE_Q5_1:
        return sizeof(struct rops_block_q5_1);
    case ROPS_TYPE_Q5_0:
        return sizeof(struct rops_block_q5_0);
    default:
        return sizeof(struct rops_block_iq4_nl);
    }
}

/* The weights of the blocks at ra and rc (two rows') as bytes: lo the first 16 of each (ra's in
 * bytes 0..15, rc's in 16..31), hi the last 16. */
static inline __attribute__((always_inline)) void qdot32_pair(enum rops_type type,
                                                              const uint8_t *ra, const uint8_t *rc,
                                                              __m256i levels, __m256i *lo,
                                                              __m256i *hi) {
    /* qs: after d (and m), and (q5) the four bytes of fifth bits */
    const size_t qs = type == ROPS_TYPE_Q4_1   ? offsetof(struct rops_block_q4_1, qs)
                      : type == ROPS_TYPE_Q5_1 ? offsetof(struct rops_block_q5_1, qs)
                      : type == ROPS_TYPE_Q5_0 ? offsetof(struct rops_block_q5_0, qs)
                                               : offsetof(struct rops_block_iq4_nl, qs);
    const __m256i raw =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ra + qs))),
                                _mm_loadu_si128((const __m128i *)(rc + qs)), 1);
    const __m256i mask = _mm256_set1_epi8(15);
    *lo = _mm256_and_si256(raw, mask);
    *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
    if (type == ROPS_TYPE_IQ4_NL) {
        *lo = _mm256_shuffle_epi8(levels, *lo);
        *hi = _mm256_shuffle_epi8(levels, *hi);
    } else if (type == ROPS_TYPE_Q5_0 || type == ROPS_TYPE_Q5_1) {
        uint32_t ha, hc; /* bit j: weight j's fifth bit */
        memcpy(&ha, ra + qs - 4, sizeof ha);
        memcpy(&hc, rc + qs - 4, sizeof hc);
#if ROPS_VEC_WIDTH == 16
        /* AVX-512 BW: the bits as masks, 16 added where they are set */
        const __m256i sixteen = _mm256_set1_epi8(16);
        *lo = _mm256_mask_add_epi8(*lo, (__mmask32)((ha & 0xffff) | hc << 16), *lo, sixteen);
        *hi = _mm256_mask_add_epi8(*hi, (__mmask32)((ha >> 16) | (hc & 0xffff0000u)), *hi, sixteen);
#else
        /* byte j takes the byte of h that holds its bit, keeps that bit, 16 where it is set */
        const __m256i h = _mm256_set1_epi64x((int64_t)(ha | (uint64_t)hc << 32));
        const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
        const __m256i sixteen = _mm256_set1_epi8(16);
        const __m256i slo = _mm256_shuffle_epi8(
            h, _mm256_setr_epi64x(0, 0x0101010101010101, 0x0404040404040404, 0x0505050505050505));
        const __m256i shi =
            _mm256_shuffle_epi8(h, _mm256_setr_epi64x(0x0202020202020202, 0x0303030303030303,
                                                      0x0606060606060606, 0x0707070707070707));
        *lo = _mm256_or_si256(
            *lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(slo, bit), bit), sixteen));
        *hi = _mm256_or_si256(
            *hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(shi, bit), bit), sixteen));
#endif
    }
}

/* Where an input block's sums start (see above): 0, or -16 (q5_0) or -128 (iq4_nl as unsigned
 * bytes) times the sums of its quants, in fours. */
static inline __attribute__((always_inline)) __m256i qdot32_base(enum rops_type type, __m256i xlo,
                                                                 __m256i xhi) {
    const __m256i zero = _mm256_setzero_si256();
    if (type == ROPS_TYPE_Q5_0) {
        const __m256i sixteen = _mm256_set1_epi8(16);
        return _mm256_sub_epi32(zero, ROPS_DPBUSD(ROPS_DPBUSD(zero, sixteen, xlo), sixteen, xhi));
    }
#ifdef QDOT32_DPBUSD_WIDE
    if (type == ROPS_TYPE_IQ4_NL) {
        const __m256i u128 = _mm256_set1_epi8(-128);
        return _mm256_sub_epi32(zero,
                                QDOT32_DPBUSD_WIDE(QDOT32_DPBUSD_WIDE(zero, u128, xlo), u128, xhi));
    }
#endif
    return zero;
}

/* base plus the products of the weight bytes lo, hi (qdot32_pair) with the input's halves
 * repeated, xlo and xhi, in fours. */
static inline __attribute__((always_inline)) __m256i
qdot32_dot(enum rops_type type, __m256i base, __m256i lo, __m256i hi, __m256i xlo, __m256i xhi) {
#ifdef QDOT32_DPBUSD_WIDE
    if (type == ROPS_TYPE_IQ4_NL)
        return QDOT32_DPBUSD_WIDE(QDOT32_DPBUSD_WIDE(base, lo, xlo), hi, xhi);
#else
    if (type == ROPS_TYPE_IQ4_NL)
        return ROPS_DPBUSD(ROPS_DPBUSD(base, _mm256_sign_epi8(lo, lo), _mm256_sign_epi8(xlo, lo)),
                           _mm256_sign_epi8(hi, hi), _mm256_sign_epi8(xhi, hi));
#endif
    return ROPS_DPBUSD(ROPS_DPBUSD(base, lo, xlo), hi, xhi);
}

/* The f16 scales d (and, for q4_1 / q5_1, minimums m) of the blocks at rows[qdot32_row[l]] + o,
 * in lane l. */
static inline __attribute__((always_inline)) void
qdot32_scales(enum rops_type type, const uint8_t *const rows[8], size_t o, __m256 *d, __m256 *m) {
    if (type == ROPS_TYPE_Q4_1 || type == ROPS_TYPE_Q5_1) {
        /* d and m are the first four bytes: lane l d | m << 16, then packed apart */
        uint64_t q[4];
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) {
            uint32_t x0, x1;
            memcpy(&x0, rows[qdot32_row[2 * l]] + o, sizeof x0);
            memcpy(&x1, rows[qdot32_row[2 * l + 1]] + o, sizeof x1);
            q[l] = x0 | (uint64_t)x1 << 32;
        }
        const __m256i dm =
            _mm256_setr_epi64x((int64_t)q[0], (int64_t)q[1], (int64_t)q[2], (int64_t)q[3]);
        /* per 128-bit lane d0..3 m0..3 | d4..7 m4..7, then d0..7 | m0..7 */
        const __m256i s = _mm256_permute4x64_epi64(
            _mm256_packus_epi32(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff)),
                                _mm256_srli_epi32(dm, 16)),
            0xd8);
        *d = _mm256_cvtph_ps(_mm256_castsi256_si128(s));
        *m = _mm256_cvtph_ps(_mm256_extracti128_si256(s, 1));
        return;
    }
    uint64_t q[2] = {0, 0};
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) {
        uint16_t x;
        memcpy(&x, rows[qdot32_row[l]] + o, sizeof x);
        q[l / 4] |= (uint64_t)x << (16 * (l % 4));
    }
    *d = _mm256_cvtph_ps(_mm_set_epi64x((int64_t)q[1], (int64_t)q[0]));
}

/* The pf_bytes at pf go into L1 a share per block of a row, whole lines (qdot32_pf_step each,
 * computed once a call): the rows further on come from memory while this block's are worked
 * on. */
static inline __attribute__((always_inline)) int64_t qdot32_pf_step(int64_t pf_bytes, int64_t nb) {
    return nb > 0 ? ((pf_bytes + nb - 1) / nb + 63) & ~(int64_t)63 : 0;
}
static inline __attribute__((always_inline)) void
qdot32_prefetch(const uint8_t *pf, int64_t pf_bytes, int64_t per_step, int64_t b) {
    for (int64_t o = b * per_step; o < (b + 1) * per_step && o < pf_bytes; o += 64)
        _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
}

/* y's first rb of 8 floats (the others 0), and v's first rb lanes stored there. */
static inline __attribute__((always_inline)) __m256 qdot32_load8(const float *y, int64_t rb) {
    if (rb == 8) return _mm256_loadu_ps(y);
    float y0[8] = {0};
    for (int64_t j = 0; j < rb; j++) y0[j] = y[j];
    return _mm256_loadu_ps(y0);
}
static inline __attribute__((always_inline)) void qdot32_store8(float *y, __m256 v, int64_t rb) {
    if (rb == 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float y0[8];
    _mm256_storeu_ps(y0, v);
    for (int64_t j = 0; j < rb; j++) y[j] = y0[j];
}

/* The 8 rows from r (rb of them real; the others repeat row r, their sums not stored) times
 * the NB inputs from i0; while the block loop runs, pf_bytes from pf are prefetched, a share
 * per block. */
static inline __attribute__((always_inline)) void
qdot32_group(enum rops_type type, const struct rops_qdot_args *a, int NB, int64_t i0, int64_t r,
             int64_t rb, const uint8_t *pf, int64_t pf_bytes) {
    const struct rops_mat *w = a->w;
    const bool affine = type == ROPS_TYPE_Q4_1 || type == ROPS_TYPE_Q5_1;
    const size_t bb = qdot32_block_bytes(type);
    const int64_t nb = a->kt / ROPS_QK, per_step = qdot32_pf_step(pf_bytes, nb);
    __m256i levels =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rops_iq4nl_values));
#ifdef QDOT32_DPBUSD_WIDE
    levels = _mm256_xor_si256(levels, _mm256_set1_epi8(-128)); /* 128 up, unsigned */
#endif
    const uint8_t *rows[8];
    for (int64_t j = 0; j < 8; j++)
        rows[j] = (const uint8_t *)w->data + (size_t)(r + (j < rb ? j : 0)) * w->row_bytes +
                  (size_t)(a->c0 / ROPS_QK) * bb;
    /* lane l is row qdot32_row[l]; row j lane to_lane[j] */
    const __m256i to_row = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7),
                  to_lane = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 acc[4];
    for (int i = 0; i < NB; i++) {
        float *y = a->y + (i0 + i) * a->y_stride + r;
        acc[i] = a->accumulate ? _mm256_permutevar8x32_ps(qdot32_load8(y, rb), to_row)
                               : _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        qdot32_prefetch(pf, pf_bytes, per_step, b);
        __m256i xlo[4], xhi[4], base[4];
        float dx[4], sx[4];
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            const uint8_t *xi = a->xq + (size_t)(i0 + i) * a->xq_stride;
            const int8_t *qx;
            if (affine) {
                const struct rops_block_q8_1 *xb = (const struct rops_block_q8_1 *)xi + b;
                qx = xb->qs;
                dx[i] = _cvtsh_ss(xb->d);
                sx[i] = _cvtsh_ss(xb->s);
            } else {
                const struct rops_xq8 *xb = (const struct rops_xq8 *)xi + b;
                qx = xb->qs;
                dx[i] = xb->d;
            }
            xlo[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qx));
            xhi[i] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(qx + 16)));
            base[i] = qdot32_base(type, xlo[i], xhi[i]);
        }
        const size_t ob = (size_t)b * bb;
        __m256i pair[4][4]; /* [input][rows 2p, 2p + 1] */
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i lo, hi;
            qdot32_pair(type, rows[2 * p] + ob, rows[2 * p + 1] + ob, levels, &lo, &hi);
#pragma GCC unroll 4
            for (int i = 0; i < NB; i++)
                pair[i][p] = qdot32_dot(type, base[i], lo, hi, xlo[i], xhi[i]);
        }
        __m256 dw, mw = _mm256_setzero_ps();
        qdot32_scales(type, rows, ob, &dw, &mw);
#pragma GCC unroll 4
        for (int i = 0; i < NB; i++) {
            /* rows 0 2 4 6 1 3 5 7 (qdot32_row): pairs (0 1) (2 3), (4 5) (6 7), then both */
            const __m256i isum = _mm256_hadd_epi32(_mm256_hadd_epi32(pair[i][0], pair[i][1]),
                                                   _mm256_hadd_epi32(pair[i][2], pair[i][3]));
            /* the portable path's steps: (d_w * d_x) * isum (+ m * s), added to y */
            __m256 t =
                _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx[i])), _mm256_cvtepi32_ps(isum));
            if (affine) t = _mm256_add_ps(t, _mm256_mul_ps(mw, _mm256_set1_ps(sx[i])));
            acc[i] = _mm256_add_ps(acc[i], t);
        }
    }
    for (int i = 0; i < NB; i++) {
        float *y = a->y + (i0 + i) * a->y_stride + r;
        qdot32_store8(y, _mm256_permutevar8x32_ps(acc[i], to_lane), rb);
    }
}

#if ROPS_VEC_WIDTH == 16
/* q5_0 against one input with AVX-512 (RWKV-6's FFN value in its Q4_K_M files, whose 2688-wide
 * rows are not whole 256s): four rows a 512-bit vector (row j's 16 bytes of quants at bytes
 * 16 j), half the products and unpacking of qdot32_group's pairs; the 8 rows' d and fifth bits
 * loaded as two vectors of 32-bit words and narrowed to their halves (vpmovdw) in place of the
 * scalar shifts and ors a pair (a vpgatherdd for the words took twice the whole kernel's time on
 * Zen 5). Lanes 4j..4j + 3 of a quad's sums are row j's, added into one lane a row in row order;
 * the float steps are qdot32_group's, so the bits are the portable path's. bench_isa's q5_0
 * 1536 x 768, one input, one thread: 0.80x qdot32_group's time. */
static inline __attribute__((always_inline)) void qdot32_q5_0_one(const struct rops_qdot_args *a,
                                                                  int64_t r, int64_t rb,
                                                                  const uint8_t *pf,
                                                                  int64_t pf_bytes) {
    const struct rops_mat *w = a->w;
    const size_t bb = sizeof(struct rops_block_q5_0);
    const int64_t nb = a->kt / ROPS_QK, per_step = qdot32_pf_step(pf_bytes, nb);
    const uint8_t *base =
        (const uint8_t *)w->data + (size_t)r * w->row_bytes + (size_t)(a->c0 / ROPS_QK) * bb;
    /* row j at base + off[j] (the rows past rb repeat row r, their sums not stored) */
    size_t off[8];
    for (int j = 0; j < 8; j++) off[j] = j < rb ? (size_t)j * w->row_bytes : 0;
    const __m512i m4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    /* pairs of lanes, then pairs of those: even and odd lanes of two vectors */
    const __m512i even =
                      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                  odd =
                      _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    float *y = a->y + r;
    __m256 acc = a->accumulate ? qdot32_load8(y, rb) : _mm256_setzero_ps();
    const struct rops_xq8 *xb = (const struct rops_xq8 *)a->xq;
    for (int64_t b = 0; b < nb; b++) {
        qdot32_prefetch(pf, pf_bytes, per_step, b);
        const uint8_t *blk = base + (size_t)b * bb;
        const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xb[b].qs)),
                      xhi =
                          _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xb[b].qs + 16)));
        /* the -16 offset: minus 16 times the input's sums in fours */
        const __m512i zero = _mm512_setzero_si512();
        const __m512i start = _mm512_sub_epi32(
            zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, sixteen, xlo), sixteen, xhi));
        /* the words at the block's bytes 0 (d | qh's low half << 16) and 2 (qh), lane j row j's */
        int32_t u0[8], u2[8];
        for (int k = 0; k < 8; k++) {
            memcpy(&u0[k], blk + off[k], 4);
            memcpy(&u2[k], blk + off[k] + 2, 4);
        }
        const __m256i g0 =
                          _mm256_setr_epi32(u0[0], u0[1], u0[2], u0[3], u0[4], u0[5], u0[6], u0[7]),
                      g2 =
                          _mm256_setr_epi32(u2[0], u2[1], u2[2], u2[3], u2[4], u2[5], u2[6], u2[7]);
        const __m128i d16 = _mm256_cvtepi32_epi16(g0),
                      hlo = _mm256_cvtepi32_epi16(_mm256_srli_epi32(g0, 16)),
                      hhi = _mm256_cvtepi32_epi16(_mm256_srli_epi32(g2, 16));
        __m512i sum[2];
        for (int q = 0; q < 2; q++) {
            const uint8_t *r0 = blk + off[4 * q] + 6;
            __m512i raw = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)r0));
            raw = _mm512_inserti32x4(
                raw, _mm_loadu_si128((const __m128i *)(blk + off[4 * q + 1] + 6)), 1);
            raw = _mm512_inserti32x4(
                raw, _mm_loadu_si128((const __m128i *)(blk + off[4 * q + 2] + 6)), 2);
            raw = _mm512_inserti32x4(
                raw, _mm_loadu_si128((const __m128i *)(blk + off[4 * q + 3] + 6)), 3);
            const __mmask64 klo =
                                (__mmask64)(q ? _mm_extract_epi64(hlo, 1) : _mm_cvtsi128_si64(hlo)),
                            khi =
                                (__mmask64)(q ? _mm_extract_epi64(hhi, 1) : _mm_cvtsi128_si64(hhi));
            __m512i lo = _mm512_and_si512(raw, m4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            lo = _mm512_mask_add_epi8(lo, klo, lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, khi, hi, sixteen);
            sum[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo, xlo), hi, xhi);
        }
        /* lanes 4j..4j + 3 of sum[q] are row 4q + j's: pairs, then pairs of pairs */
        const __m512i p2 = _mm512_add_epi32(_mm512_permutex2var_epi32(sum[0], even, sum[1]),
                                            _mm512_permutex2var_epi32(sum[0], odd, sum[1]));
        const __m512i p4 =
            _mm512_add_epi32(_mm512_permutexvar_epi32(even, p2), _mm512_permutexvar_epi32(odd, p2));
        const __m256i isum = _mm512_castsi512_si256(p4);
        const __m256 dw = _mm256_cvtph_ps(d16);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb[b].d)),
                                               _mm256_cvtepi32_ps(isum)));
    }
    qdot32_store8(y, acc, rb);
}
#endif

/* All of a type's rows [r0, r1) and inputs: blocks of 8 rows, each for every group of inputs
 * (the first group prefetching 8 rows further on). */
static inline __attribute__((always_inline)) void
qdot32_type(enum rops_type type, const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    const size_t row_bytes = a->w->row_bytes;
    for (int64_t r = r0; r < r1; r += 8) {
        const int64_t rb = r1 - r < 8 ? r1 - r : 8;
        /* the 8 rows at least 8 KiB on: short rows come from memory in time too (measured:
           rows of 256 q4_1 weights out of DRAM 14 GB/s prefetching the next 8, 25 with these) */
        const int64_t ahead = 8 * (1 + 8192 / (8 * (int64_t)row_bytes + 1));
        const int64_t next_bytes = r + ahead + 8 <= r1 ? 8 * (int64_t)row_bytes : 0;
        const uint8_t *next =
            next_bytes ? (const uint8_t *)a->w->data + (size_t)(r + ahead) * row_bytes : NULL;
#if ROPS_VEC_WIDTH == 16
        if (type == ROPS_TYPE_Q5_0 && a->n == 1) {
            qdot32_q5_0_one(a, r, rb, next, next_bytes);
            continue;
        }
#endif
        for (int64_t i = 0; i < a->n; i += 4) {
            const uint8_t *pf = i == 0 ? next : NULL;
            const int64_t pf_bytes = i == 0 ? next_bytes : 0;
            switch (a->n - i) {
            case 1:
                qdot32_group(type, a, 1, i, r, rb, pf, pf_bytes);
                break;
            case 2:
                qdot32_group(type, a, 2, i, r, rb, pf, pf_bytes);
                break;
            case 3:
                qdot32_group(type, a, 3, i, r, rb, pf, pf_bytes);
                break;
            default:
                qdot32_group(type, a, 4, i, r, rb, pf, pf_bytes);
                break;
            }
        }
    }
}

/* False when this file has no kernel for the type. */
static bool qdot_32_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    /* each type its own body, the type a constant in it */
#define QDOT32_TYPE(T)                                                                             \
    case T:                                                                                        \
        qdot32_type(T, a, r0, r1);                                                                 \
        return true;
    switch (a->w->type) {
        QDOT32_TYPE(ROPS_TYPE_Q4_1)
        QDOT32_TYPE(ROPS_TYPE_Q5_0)
        QDOT32_TYPE(ROPS_TYPE_Q5_1)
        QDOT32_TYPE(ROPS_TYPE_IQ4_NL)
    default:
        return false;
    }
#undef QDOT32_TYPE
}
