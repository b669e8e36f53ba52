/*
 * q4_K and q6_K weights against one q8_K input, 16 rows a vector, from the matrix's interleaved
 * copy (ops_rows16.c; part of x86/qdot.h, in the AVX-512 file only).
 *
 * Row r of a group of 16 is lane r of every vector: a 64-byte load holds 4 quants of each row
 * (q6_K: with the two loads that hold their other bits), which meet the input's 4 quants
 * (broadcast) in one vpmaddubsw; vpdpwssd adds each pair times the row's scale (a vector of the
 * 16 rows' scales, made once a block). x86/qdot_k.h, a row at a time, spends a third of its
 * instructions on what the lanes give here for nothing: picking a sub-block's scale into the
 * lanes, the block's d and minimums, and summing a block's lanes. One thread, bench_isa's
 * 768 x 3072 at one input: q4_K 39.4 -> 17.1 us, q6_K 48.0 -> 38.7 us.
 *
 * The results are x86/qdot_k.h's bit for bit, as x86/qgemm_k.h's are: each row keeps the 8
 * lane-class sums of that kernel (class l: the columns 32 v + 4 l .. 32 v + 4 l + 3 of every
 * sub-block v, times its scale), as exact integers, then the same float steps a block (qg_step)
 * and the same tree over the classes at the end (qg_store's). A token's logits are then the
 * same whether its rows come from here, from the file's layout or from a prompt's panels.
 */

#define K16_INLINE static inline __attribute__((always_inline))
/* While a group's blocks are worked on, the group this many on goes into L1 a share per block:
 * one input streams its weights from memory. Without it the copy was slower than the file's
 * layout. With whole rows a call, 1 group on measured 1.04-1.15x faster than 2 in alternated
 * generation runs of seven of the eight speed files, the eighth the same (bench/RESULTS.md). */
#define K16_PF 1

/* Lane r: byte 16 k + r of src as the int16 pair (byte, byte), zero-extended; k a constant. */
#define K16_PAIRS(src, k)                                                                          \
    _mm512_shuffle_epi8(_mm512_shuffle_i32x4(src, src, (k)*0x55), k16_pair_ctrl())

K16_INLINE __m512i k16_pair_ctrl(void) {
    /* in the 128-bit lane j, dword t (row 4 j + t): bytes 4 j + t, zero, 4 j + t, zero */
    const int z = 0x80;
#define K16_W(r) ((int)((unsigned)(r) | (unsigned)z << 8 | (unsigned)(r) << 16 | (unsigned)z << 24))
    return _mm512_setr_epi32(K16_W(0), K16_W(1), K16_W(2), K16_W(3), K16_W(4), K16_W(5), K16_W(6),
                             K16_W(7), K16_W(8), K16_W(9), K16_W(10), K16_W(11), K16_W(12),
                             K16_W(13), K16_W(14), K16_W(15));
#undef K16_W
}

/* Chunk c of the block's quants (sub-blocks 2 c and 2 c + 1) into the 8 lane classes' sums. */
#define K16_CHUNK(c)                                                                               \
    for (int l = 0; l < 8; l++) {                                                                  \
        const __m512i q = _mm512_load_si512((const __m512i *)p->qs[c][l]);                         \
        const __m512i lo = _mm512_and_si512(q, m4),                                                \
                      hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);                          \
        int32_t x0, x1;                                                                            \
        memcpy(&x0, x->qs + 64 * (c) + 4 * l, 4);                                                  \
        memcpy(&x1, x->qs + 64 * (c) + 32 + 4 * l, 4);                                             \
        is[l] = _mm512_dpwssd_epi32(is[l], _mm512_maddubs_epi16(lo, _mm512_set1_epi32(x0)), s0);   \
        is[l] = _mm512_dpwssd_epi32(is[l], _mm512_maddubs_epi16(hi, _mm512_set1_epi32(x1)), s1);   \
    }

/* One interleaved block against the input's block x, into the 16 rows' lane-class sums acc. */
K16_INLINE void k16_block(const struct rops_block_q4_Kx16 *p, const struct rops_block_q8_K *x,
                          __m512 acc[8]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p->d)),
                 dmin = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p->dmin));
    const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x->d)),
                 dm = _mm512_mul_ps(dmin, _mm512_set1_ps(x->d));
    /* the 6-bit scales and minimums (x86/qdot_k.h's qk_unpack_k_scales, 16 rows at once):
       byte 16 k + r of sc_lo is row r's scale of sub-block k, of sc_hi of sub-block 4 + k */
    const __m512i z0 = _mm512_load_si512((const __m512i *)p->scales[0]),
                  z1 = _mm512_load_si512((const __m512i *)p->scales[4]),
                  z2 = _mm512_load_si512((const __m512i *)p->scales[8]);
    const __m512i m6 = _mm512_set1_epi8(63), m4 = _mm512_set1_epi8(15),
                  top = _mm512_set1_epi8(0x30);
    const __m512i sc_lo = _mm512_and_si512(z0, m6),
                  sc_hi = _mm512_or_si512(_mm512_and_si512(z2, m4),
                                          _mm512_and_si512(_mm512_srli_epi16(z0, 2), top)),
                  mn_lo = _mm512_and_si512(z1, m6),
                  mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z2, 4), m4),
                                          _mm512_and_si512(_mm512_srli_epi16(z1, 2), top));
    __m512i is[8];
    for (int l = 0; l < 8; l++) is[l] = _mm512_setzero_si512();
    {
        const __m512i s0 = K16_PAIRS(sc_lo, 0), s1 = K16_PAIRS(sc_lo, 1);
        K16_CHUNK(0)
    }
    {
        const __m512i s0 = K16_PAIRS(sc_lo, 2), s1 = K16_PAIRS(sc_lo, 3);
        K16_CHUNK(1)
    }
    {
        const __m512i s0 = K16_PAIRS(sc_hi, 0), s1 = K16_PAIRS(sc_hi, 1);
        K16_CHUNK(2)
    }
    {
        const __m512i s0 = K16_PAIRS(sc_hi, 2), s1 = K16_PAIRS(sc_hi, 3);
        K16_CHUNK(3)
    }
    /* lane class l's minimum term is sub-block l's minimum against bsums 2 l, 2 l + 1 */
    acc[0] = qg_step(ROPS_TYPE_Q4_K, acc[0], dd, dm, is[0], K16_PAIRS(mn_lo, 0), x, 0);
    acc[1] = qg_step(ROPS_TYPE_Q4_K, acc[1], dd, dm, is[1], K16_PAIRS(mn_lo, 1), x, 1);
    acc[2] = qg_step(ROPS_TYPE_Q4_K, acc[2], dd, dm, is[2], K16_PAIRS(mn_lo, 2), x, 2);
    acc[3] = qg_step(ROPS_TYPE_Q4_K, acc[3], dd, dm, is[3], K16_PAIRS(mn_lo, 3), x, 3);
    acc[4] = qg_step(ROPS_TYPE_Q4_K, acc[4], dd, dm, is[4], K16_PAIRS(mn_hi, 0), x, 4);
    acc[5] = qg_step(ROPS_TYPE_Q4_K, acc[5], dd, dm, is[5], K16_PAIRS(mn_hi, 1), x, 5);
    acc[6] = qg_step(ROPS_TYPE_Q4_K, acc[6], dd, dm, is[6], K16_PAIRS(mn_hi, 2), x, 6);
    acc[7] = qg_step(ROPS_TYPE_Q4_K, acc[7], dd, dm, is[7], K16_PAIRS(mn_hi, 3), x, 7);
}
#undef K16_CHUNK

/* q6_K's 6-bit quants, as qk_quants makes them (q + 32, 0 .. 63): a nibble of ql (its high bits
 * zero) with the two bits of qh at bits 4, 5 (vpternlogd 0xd8: bits of hi where m2 is set,
 * else of lo). */
#define K16_Q6(lo, hi) _mm512_ternarylogic_epi32(lo, hi, m2, 0xd8)

/* One interleaved q6_K block against the input's block x: for each half h and lane class l, the
 * three loads that hold 4 columns of sub-blocks 4 h .. 4 h + 3 for the 16 rows (x86/qdot_k.h's
 * qk_quants: sub-block 4 h + k from ql (64 h + 32 (k % 2)), low nibbles for k < 2, with bits
 * 2 k, 2 k + 1 of qh (32 h)); their group of 16 is 2 (4 h + k) + l / 4. */
K16_INLINE void k16_block_q6(const struct rops_block_q6_Kx16 *p, const struct rops_block_q8_K *x,
                             __m512 acc[8]) {
    const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p->d)),
                                    _mm512_set1_ps(x->d));
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
    /* int16 elements 2 r and 2 r + 1 from element r of 16 */
    const __m512i dup = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8,
                                         7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512i is[8];
    for (int l = 0; l < 8; l++) is[l] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++)
        for (int half = 0; half < 2; half++) {
            __m512i s[4]; /* (scale, scale) of each row, for sub-block 4 h + k's group */
            for (int k = 0; k < 4; k++)
                s[k] = _mm512_permutexvar_epi16(
                    dup, _mm512_castsi256_si512(_mm256_cvtepi8_epi16(
                             _mm_loadu_si128((const __m128i *)p->scales[2 * (4 * h + k) + half]))));
            for (int l = 4 * half; l < 4 * half + 4; l++) {
                const __m512i l0 = _mm512_loadu_si512((const __m512i *)p->ql[h][0][l]),
                              l1 = _mm512_loadu_si512((const __m512i *)p->ql[h][1][l]),
                              qh = _mm512_loadu_si512((const __m512i *)p->qh[h][l]);
                __m512i q[4];
                q[0] = K16_Q6(_mm512_and_si512(l0, m4), _mm512_slli_epi16(qh, 4));
                q[1] = K16_Q6(_mm512_and_si512(l1, m4), _mm512_slli_epi16(qh, 2));
                q[2] = K16_Q6(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), qh);
                q[3] = K16_Q6(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                              _mm512_srli_epi16(qh, 2));
                for (int k = 0; k < 4; k++) {
                    int32_t xv;
                    memcpy(&xv, x->qs + 32 * (4 * h + k) + 4 * l, 4);
                    is[l] = _mm512_dpwssd_epi32(
                        is[l], _mm512_maddubs_epi16(q[k], _mm512_set1_epi32(xv)), s[k]);
                }
            }
        }
    /* lane class l's offset: groups 2 l and 2 l + 1's scales against their bsums, as pairs
       (element r of the first 16 int16 beside element r of the second) */
    const __m512i pairs =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int l = 0; l < 8; l++) {
        const __m512i mnp = _mm512_permutexvar_epi16(
            pairs, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p->scales[2 * l])));
        acc[l] = qg_step(ROPS_TYPE_Q6_K, acc[l], dd, dd, is[l], mnp, x, l);
    }
}
#undef K16_Q6

/* A group's blocks [t0, t1) (one tile's) at p against x, the sums stored at y (added to y's
 * values with accumulate), while pf_bytes from pf (NULL: none) are prefetched a share a block. */
K16_INLINE void k16_tile(enum rops_type type, size_t bb, const uint8_t *p,
                         const struct rops_block_q8_K *x, int64_t t0, int64_t t1, const uint8_t *pf,
                         int64_t pf_bytes, int64_t per_step, float *y, bool accumulate) {
    __m512 acc[8];
    for (int l = 0; l < 8; l++) acc[l] = _mm512_setzero_ps();
    for (int64_t b = t0; b < t1; b++) {
        if (pf) qdot32_prefetch(pf, pf_bytes, per_step, b);
        if (type == ROPS_TYPE_Q4_K)
            k16_block((const struct rops_block_q4_Kx16 *)(p + (size_t)b * bb), x + b, acc);
        else
            k16_block_q6((const struct rops_block_q6_Kx16 *)(p + (size_t)b * bb), x + b, acc);
    }
    qg_store_at(y, accumulate, 16, acc);
}

/* Groups [g0, g1) of 16 rows over the call's columns [c0, c0 + kt); bb the type's interleaved
 * block bytes. A group's blocks lie side by side, so one group after another streams the copy
 * front to back. Columns past a tile (a whole row's call) are taken tile by tile within each
 * group: each tile's sums start from zero and are added to the ones before, as the calls a tile
 * at a time add them, the same bits. Why a whole row at once: a pass over the groups a tile,
 * reading 4 of each group's 6 blocks of Mamba's out_proj and then the other 2, took that matrix
 * 51-54 us from memory against 19 us in L2, one thread (bench/RESULTS.md). */
K16_INLINE void k16_groups(enum rops_type type, size_t bb, const struct rops_qdot_args *a,
                           int64_t g0, int64_t g1) {
    const int64_t nb_row = a->w->n_cols / ROPS_QK_K, b0 = a->c0 / ROPS_QK_K, nb = a->kt / ROPS_QK_K,
                  tile = ROPS_QMM_TILE / ROPS_QK_K;
    const uint8_t *base = a->w->rows16;
    const struct rops_block_q8_K *x = (const struct rops_block_q8_K *)a->xq;
    const int64_t pf_bytes = nb * (int64_t)bb, per_step = qdot32_pf_step(pf_bytes, nb);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *p = base + (size_t)(g * nb_row + b0) * bb;
        for (int64_t t0 = 0; t0 < nb; t0 += tile)
            k16_tile(type, bb, p, x, t0, t0 + tile < nb ? t0 + tile : nb,
                     g + K16_PF < g1 ? p + (size_t)(K16_PF * nb_row) * bb : NULL, pf_bytes,
                     per_step, a->y + 16 * g, a->accumulate || t0 > 0);
    }
}

/* False when the call is not one input against q4_K or q6_K weights with an interleaved copy,
 * or [r0, r1) holds no whole group of 16 rows. Else its whole groups' rows are done,
 * [16 g0, 16 g1): the rows around them are the caller's. */
static bool qdot_k16_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1, int64_t *g0,
                          int64_t *g1) {
    const enum rops_type type = a->w->type;
    if (a->n != 1 || (type != ROPS_TYPE_Q4_K && type != ROPS_TYPE_Q6_K) || !a->w->rows16)
        return false;
    *g0 = (r0 + 15) / 16, *g1 = r1 / 16;
    if (*g1 > a->w->n_rows / 16) *g1 = a->w->n_rows / 16;
    if (*g0 >= *g1) return false;
    if (type == ROPS_TYPE_Q4_K)
        k16_groups(ROPS_TYPE_Q4_K, sizeof(struct rops_block_q4_Kx16), a, *g0, *g1);
    else
        k16_groups(ROPS_TYPE_Q6_K, sizeof(struct rops_block_q6_Kx16), a, *g0, *g1);
    return true;
}

#undef K16_PAIRS
#undef K16_PF
#undef K16_INLINE
