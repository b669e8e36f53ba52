/*
 * q5_0's products for many inputs (prompts, and steps of 32 sequences and more; part of
 * x86/qdot.h, in the AVX-512 file only): a panel of 16 rows unpacked once for all the inputs
 * of the call (a tile of at most 32 blocks, ops_qmatmul.c), against q8_0 inputs. q5_0 is what
 * llama-quantize's K mixes fall back to for matrices whose rows are not a multiple of 256
 * (RWKV-6's ffn value matrix, 2688 columns).
 *
 * The panel puts the rows in the lanes: for each 4 columns of a block, one 512-bit vector holds
 * each of 16 rows' 4 quants as they are stored (0 .. 31), so that an input's 4 quants,
 * broadcast, meet all the rows in one vpdpbusd (unsigned weights, signed inputs). The sum
 * starts at -16 x the input block's sum, which takes q5_0's offset of 16 back out.
 *
 * The results are x86/qdot_32.h's bit for bit (and so the portable path's): each row's exact
 * integer sum a block, then y + (d_w d_x) isum block after block, the same float steps in the
 * same order, so that a token's logits do not depend on who else is in the batch.
 */

#define Q32_INLINE static inline __attribute__((always_inline))
#define Q32_KB     (ROPS_QMM_TILE / ROPS_QK) /* blocks a tile holds at most */
#define Q32_L      16                        /* rows a panel: the lanes of a 512-bit vector */
/* inputs from which the panel pays for its unpacking (x86/qdot_32.h takes fewer) */
#define Q32_MIN_N 32

struct q32_panel {
    uint32_t q[Q32_KB][8][Q32_L]; /* [block][4 columns][row]: the row's 4 quants, 0 .. 31 */
    float d[Q32_KB][Q32_L];       /* [block][row] */
};

/* Rows [r, r + rb) of the call, its nb blocks, into the panel (rows from rb on zero). */
static void q32_pack(const struct rops_qdot_args *a, int64_t r, int64_t rb, int64_t nb,
                     struct q32_panel *p) {
    const uint8_t *base =
        (const uint8_t *)a->w->data + (size_t)(a->c0 / ROPS_QK) * sizeof(struct rops_block_q5_0);
    for (int64_t j = 0; j < Q32_L; j++)
        for (int64_t b = 0; b < nb; b++) {
            if (j >= rb) {
                for (int c = 0; c < 8; c++) p->q[b][c][j] = 0;
                p->d[b][j] = 0.0f;
                continue;
            }
            const struct rops_block_q5_0 *blk =
                (const struct rops_block_q5_0 *)(base + (size_t)(r + j) * a->w->row_bytes) + b;
            uint32_t qh;
            memcpy(&qh, blk->qh, sizeof qh);
            uint8_t q[32]; /* weight t: low nibble of qs[t], then the high ones; bit t of qh */
            for (int t = 0; t < 16; t++) {
                q[t] = (uint8_t)((blk->qs[t] & 15) | ((qh >> t) & 1) << 4);
                q[t + 16] = (uint8_t)((blk->qs[t] >> 4) | ((qh >> (t + 16)) & 1) << 4);
            }
            for (int c = 0; c < 8; c++) memcpy(&p->q[b][c][j], q + 4 * c, 4);
            p->d[b][j] = _cvtsh_ss(blk->d);
        }
}

/* 16 x the sum of an input block's 32 quants. */
Q32_INLINE int32_t q32_offset(const int8_t *qs) {
    const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16),
                                          _mm256_loadu_si256((const __m256i *)qs));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
}

/* Inputs i .. i + NI - 1 through the panel's rows [r, r + rb): a panel load serves them all. */
Q32_INLINE void q32_inputs(const struct rops_qdot_args *a, const struct q32_panel *p, int64_t nb,
                           int64_t i, int NI, int64_t r, int64_t rb) {
    const __mmask16 rows = (__mmask16)((1u << rb) - 1);
    __m512 acc[2];
    const struct rops_xq8 *x[2];
    for (int n = 0; n < NI; n++) {
        x[n] = (const struct rops_xq8 *)(a->xq + (size_t)(i + n) * a->xq_stride);
        acc[n] = a->accumulate ? _mm512_maskz_loadu_ps(rows, a->y + (i + n) * a->y_stride + r)
                               : _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m512i is[2];
        for (int n = 0; n < NI; n++) is[n] = _mm512_set1_epi32(-q32_offset(x[n][b].qs));
        for (int c = 0; c < 8; c++) {
            const __m512i q = _mm512_load_si512(p->q[b][c]);
            for (int n = 0; n < NI; n++) {
                int32_t q4;
                memcpy(&q4, x[n][b].qs + 4 * c, 4);
                is[n] = _mm512_dpbusd_epi32(is[n], q, _mm512_set1_epi32(q4));
            }
        }
        const __m512 d = _mm512_load_ps(p->d[b]);
        for (int n = 0; n < NI; n++) /* the portable steps: (d_w d_x) isum, added */
            acc[n] =
                _mm512_add_ps(acc[n], _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[n][b].d)),
                                                    _mm512_cvtepi32_ps(is[n])));
    }
    for (int n = 0; n < NI; n++)
        _mm512_mask_storeu_ps(a->y + (i + n) * a->y_stride + r, rows, acc[n]);
}

/* False when this file does not take the call: another type, too few inputs, or a tile wider
 * than the panel. */
static bool qgemm_32_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    if (a->w->type != ROPS_TYPE_Q5_0 || a->n < Q32_MIN_N || a->kt > Q32_KB * ROPS_QK) return false;
    _Alignas(64) struct q32_panel panel;
    const int64_t nb = a->kt / ROPS_QK;
    for (int64_t r = r0; r < r1; r += Q32_L) {
        const int64_t rb = r1 - r < Q32_L ? r1 - r : Q32_L;
        q32_pack(a, r, rb, nb, &panel);
        int64_t i = 0;
        for (; i + 2 <= a->n; i += 2) q32_inputs(a, &panel, nb, i, 2, r, rb);
        if (i < a->n) q32_inputs(a, &panel, nb, i, 1, r, rb);
    }
    return true;
}
