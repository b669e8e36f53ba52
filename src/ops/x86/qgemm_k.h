/*
 * The K types' products for many inputs (prompts; part of x86/qdot.h, in the AVX-512 file
 * only): q4_K, q5_K and q6_K weights against q8_K inputs, a panel of 16 rows unpacked once for
 * all the inputs of the call (a tile of at most four blocks, ops_qmatmul.c).
 *
 * The panel puts the rows in the lanes: for each 4 columns of a block, one 512-bit vector holds
 * each of 16 rows' 4 quants (0 .. 31; q6_K's q + 32, 0 .. 63), so that an input's 4 quants,
 * broadcast, multiply all the rows at once (vpmaddubsw: unsigned weights, signed inputs; pairs
 * at most 2 x 63 x 128), and vpdpwssd adds them times the group's scale to each row's int32
 * sum. 64 multiply-adds take 2 instructions a row vector, and the weights are unpacked once for
 * the call's inputs instead of once per four.
 *
 * The results are x86/qdot_k.h's bit for bit, so that a prompt's tokens get the logits they
 * get one at a time. That kernel sums a row on 8 int32 lanes: lane L holds the columns
 * 32 v + 4 L .. 32 v + 4 L + 3 of every block (v = 0 .. 7) times their scales, takes one fused
 * multiply-add a block per lane for them and one for the minimums of bsums 2L, 2L + 1 (q6_K:
 * its offset taken out of the integers against those bsums, and no second step), then
 * sums the 8 lanes once at the end (vec_hsum8's tree). Here each row keeps the same 8 sums, one
 * vector a lane class L, with the same integers and the same float steps in the same order.
 * Where the panel is not used, and why: qgemm_k_rows.
 */

#define QG_INLINE static inline __attribute__((always_inline))
#define QG_KB     (ROPS_QMM_TILE / ROPS_QK_K) /* blocks a tile holds at most */
/* inputs from which the panel pays for its unpacking (x86/qdot_k.h takes fewer) */
#define QG_MIN_N 32

#define QG_L 16 /* rows a panel: the lanes of a 512-bit vector */

/* One block of a panel (row r at lane r). */
struct qg_block {
    uint32_t q[64][QG_L]; /* [4 columns][row]: the row's 4 quants, non-negative */
    int32_t sc[16][QG_L]; /* [group of 16][row]: the scale as an int16 pair (sc, sc) */
    int32_t mnp[8][QG_L]; /* [lane class][row]: (mn_2L, mn_2L+1), for the minimums; q6_K's
                             (sc_2L, sc_2L+1), for its offset */
    float d[QG_L], dmin[QG_L];
};

static inline int32_t qg_pair16(int a, int b) {
    return (int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16);
}

/* Quant vectors 2c, 2c + 1 of the block at blk (x86/qdot_k.h's qk_quants, q6_K's already
 * q + 32) as the panel's words 16 c .. 16 c + 15 of row j. */
#define QG_QUANTS(c)                                                                               \
    do {                                                                                           \
        __m256i q0, q1;                                                                            \
        qk_quants(type, blk, c, &q0, &q1);                                                         \
        _Alignas(32) uint32_t w[16];                                                               \
        _mm256_store_si256((__m256i *)w, q0);                                                      \
        _mm256_store_si256((__m256i *)(w + 8), q1);                                                \
        for (int t = 0; t < 16; t++) pb->q[16 * (c) + t][j] = w[t];                                \
    } while (0)

/* Rows [r, r + rb) of the call, its nb blocks, into the panel; rows from rb on are zero (their
 * sums are zero, and they are not stored). */
QG_INLINE void qg_pack(enum rops_type type, const struct rops_qdot_args *a, size_t bb, int64_t r,
                       int64_t rb, int64_t nb, struct qg_block *p) {
    const uint8_t *base = (const uint8_t *)a->w->data + rops_row_bytes(type, a->c0);
    for (int64_t j = 0; j < QG_L; j++)
        for (int64_t b = 0; b < nb; b++) {
            struct qg_block *pb = &p[b];
            if (j >= rb) {
                for (int c = 0; c < 64; c++) pb->q[c][j] = 0;
                for (int g = 0; g < 16; g++) pb->sc[g][j] = 0;
                for (int l = 0; l < 8; l++) pb->mnp[l][j] = 0;
                pb->d[j] = pb->dmin[j] = 0.0f;
                continue;
            }
            const uint8_t *blk = base + (size_t)(r + j) * a->w->row_bytes + (size_t)b * bb;
            QG_QUANTS(0);
            QG_QUANTS(1);
            QG_QUANTS(2);
            QG_QUANTS(3);
            struct rops_unpackedK u;
            rops_unpack_K_scales(type, blk, &u);
            /* q6_K's pairs are its scales, for the offset; the others' their minimums */
            const int16_t *pairs = type == ROPS_TYPE_Q6_K ? u.sc : u.mn;
            for (int g = 0; g < 16; g++) pb->sc[g][j] = qg_pair16(u.sc[g], u.sc[g]);
            for (int l = 0; l < 8; l++) pb->mnp[l][j] = qg_pair16(pairs[2 * l], pairs[2 * l + 1]);
            pb->d[j] = u.d;
            pb->dmin[j] = u.dmin;
        }
}
#undef QG_QUANTS

/* Lane class l's float steps for a block, qdot_k.h's: q4_K and q5_K + d d_x times the scaled
 * integer sum is, then - dmin d_x times the minimums against bsums 2l, 2l + 1; q6_K takes its
 * offset (32 x the scales against those bsums) out of is in integers, then the one step. */
QG_INLINE __m512 qg_step(enum rops_type type, __m512 acc, __m512 dd, __m512 dm, __m512i is,
                         __m512i mnp, const struct rops_block_q8_K *x, int l) {
    int32_t bp; /* bsums 2l, 2l + 1 */
    memcpy(&bp, x->bsums + 2 * l, 4);
    if (type == ROPS_TYPE_Q6_K) {
        const __m512i offset =
            _mm512_dpwssd_epi32(_mm512_setzero_si512(), mnp, _mm512_set1_epi32(bp));
        return _mm512_fmadd_ps(
            dd, _mm512_cvtepi32_ps(_mm512_sub_epi32(is, _mm512_slli_epi32(offset, 5))), acc);
    }
    acc = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(is), acc);
    return _mm512_fnmadd_ps(
        dm,
        _mm512_cvtepi32_ps(_mm512_dpwssd_epi32(_mm512_setzero_si512(), mnp, _mm512_set1_epi32(bp))),
        acc);
}

/* Input i through the panel's nb blocks: acc[L], lane class L of every row. */
QG_INLINE void qg_input(enum rops_type type, const struct rops_qdot_args *a,
                        const struct qg_block *p, int64_t nb, int64_t i, __m512 acc[8]) {
    for (int64_t b = 0; b < nb; b++) {
        const struct qg_block *pb = &p[b];
        const struct rops_block_q8_K *x =
            (const struct rops_block_q8_K *)(a->xq + (size_t)i * a->xq_stride) + b;
        /* d d_x and dmin d_x, each the float product qdot_k.h broadcasts */
        const __m512 dd = _mm512_mul_ps(_mm512_load_ps(pb->d), _mm512_set1_ps(x->d));
        const __m512 dm = _mm512_mul_ps(_mm512_load_ps(pb->dmin), _mm512_set1_ps(x->d));
        for (int l = 0; l < 8; l++) {
            __m512i is = _mm512_setzero_si512();
            for (int v = 0; v < 8; v++) {
                const int c = 8 * v + l; /* columns 32 v + 4 l .. + 3, group 2 v + l / 4 */
                int32_t q;
                memcpy(&q, x->qs + 4 * c, 4);
                is = _mm512_dpwssd_epi32(
                    is, _mm512_maddubs_epi16(_mm512_load_si512(pb->q[c]), _mm512_set1_epi32(q)),
                    _mm512_load_si512(pb->sc[2 * v + l / 4]));
            }
            acc[l] = qg_step(type, acc[l], dd, dm, is, _mm512_load_si512(pb->mnp[l]), x, l);
        }
    }
}

/* Inputs i and i + 1 through the panel: qg_input's integers and float steps for each (integer
 * sums are exact in any order), with the loops turned so that a panel load and a group's
 * scales serve both inputs and four lane classes, and sixteen integer sums run side by side
 * instead of one chain of eight at a time: lane classes 4 h .. 4 h + 3 share group 2 v + h. */
QG_INLINE void qg_inputs2(enum rops_type type, const struct rops_qdot_args *a,
                          const struct qg_block *p, int64_t nb, int64_t i, __m512 acc0[8],
                          __m512 acc1[8]) {
    for (int64_t b = 0; b < nb; b++) {
        const struct qg_block *pb = &p[b];
        const struct rops_block_q8_K *x0 =
            (const struct rops_block_q8_K *)(a->xq + (size_t)i * a->xq_stride) + b;
        const struct rops_block_q8_K *x1 =
            (const struct rops_block_q8_K *)(a->xq + (size_t)(i + 1) * a->xq_stride) + b;
        const __m512 d = _mm512_load_ps(pb->d), dmin = _mm512_load_ps(pb->dmin);
        const __m512 dd0 = _mm512_mul_ps(d, _mm512_set1_ps(x0->d));
        const __m512 dm0 = _mm512_mul_ps(dmin, _mm512_set1_ps(x0->d));
        const __m512 dd1 = _mm512_mul_ps(d, _mm512_set1_ps(x1->d));
        const __m512 dm1 = _mm512_mul_ps(dmin, _mm512_set1_ps(x1->d));
        for (int h = 0; h < 2; h++) {
            __m512i is0[4], is1[4];
            for (int t = 0; t < 4; t++) is0[t] = is1[t] = _mm512_setzero_si512();
            for (int v = 0; v < 8; v++) {
                const __m512i sc = _mm512_load_si512(pb->sc[2 * v + h]);
                for (int t = 0; t < 4; t++) {
                    const int c = 8 * v + 4 * h + t;
                    const __m512i q = _mm512_load_si512(pb->q[c]);
                    int32_t q0, q1;
                    memcpy(&q0, x0->qs + 4 * c, 4);
                    memcpy(&q1, x1->qs + 4 * c, 4);
                    is0[t] = _mm512_dpwssd_epi32(
                        is0[t], _mm512_maddubs_epi16(q, _mm512_set1_epi32(q0)), sc);
                    is1[t] = _mm512_dpwssd_epi32(
                        is1[t], _mm512_maddubs_epi16(q, _mm512_set1_epi32(q1)), sc);
                }
            }
            for (int t = 0; t < 4; t++) {
                const int l = 4 * h + t;
                const __m512i mnp = _mm512_load_si512(pb->mnp[l]);
                acc0[l] = qg_step(type, acc0[l], dd0, dm0, is0[t], mnp, x0, l);
                acc1[l] = qg_step(type, acc1[l], dd1, dm1, is1[t], mnp, x1, l);
            }
        }
    }
}

/* rb outputs at y from their 8 lane-class sums. */
QG_INLINE void qg_store_at(float *y, bool accumulate, int64_t rb, const __m512 acc[8]) {
    /* vec_hsum8's order, lane class by lane class: ((0+4) + (2+6)) + ((1+5) + (3+7)) */
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                      _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
    _Alignas(64) float out[QG_L];
    _mm512_store_ps(out, sum);
    for (int64_t j = 0; j < rb; j++) y[j] = (accumulate ? y[j] : 0.0f) + out[j];
}

/* Row r's outputs of input i (rb of them) from their 8 lane-class sums. */
QG_INLINE void qg_store(const struct rops_qdot_args *a, int64_t i, int64_t r, int64_t rb,
                        const __m512 acc[8]) {
    qg_store_at(a->y + i * a->y_stride + r, a->accumulate, rb, acc);
}

QG_INLINE void qg_rows(enum rops_type type, size_t bb, const struct rops_qdot_args *a, int64_t r0,
                       int64_t r1) {
    _Alignas(64) struct qg_block panel[QG_KB];
    const int64_t nb = a->kt / ROPS_QK_K;
    for (int64_t r = r0; r < r1; r += QG_L) {
        const int64_t rb = r1 - r < QG_L ? r1 - r : QG_L;
        qg_pack(type, a, bb, r, rb, nb, panel);
        int64_t i = 0;
        for (; i + 2 <= a->n; i += 2) {
            __m512 acc0[8], acc1[8];
            for (int l = 0; l < 8; l++) acc0[l] = acc1[l] = _mm512_setzero_ps();
            qg_inputs2(type, a, panel, nb, i, acc0, acc1);
            qg_store(a, i, r, rb, acc0);
            qg_store(a, i + 1, r, rb, acc1);
        }
        if (i < a->n) {
            __m512 acc[8];
            for (int l = 0; l < 8; l++) acc[l] = _mm512_setzero_ps();
            qg_input(type, a, panel, nb, i, acc);
            qg_store(a, i, r, rb, acc);
        }
    }
}

/* False when this file does not take the call: too few inputs, a tile wider than the panel, or
 * a type it does not serve. Measured first with one input a pass (one thread, 1536 x 768, 256
 * inputs, GMAC/s against x86/qdot_k.h's): AVX-512 q4_K 60 / 44, q5_K 59 / 52, q6_K 46 / 53;
 * at AVX2's 8 rows a vector 0.7-0.9x for every type, so AVX2 stays with qdot_k.h. Two inputs a
 * pass (qg_inputs2) then took q4_K from 1.9x to 2.4x of AVX2's figure in bench_isa at 512
 * inputs, and q6_K from 1.2x to 2.2-2.7x; four a pass measured no faster than two. */
static bool qgemm_k_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    if (a->n < QG_MIN_N || a->kt > QG_KB * ROPS_QK_K) return false;
    switch (a->w->type) {
    case ROPS_TYPE_Q4_K:
        qg_rows(ROPS_TYPE_Q4_K, sizeof(struct rops_block_q4_K), a, r0, r1);
        return true;
    case ROPS_TYPE_Q5_K:
        qg_rows(ROPS_TYPE_Q5_K, sizeof(struct rops_block_q5_K), a, r0, r1);
        return true;
    case ROPS_TYPE_Q6_K:
        qg_rows(ROPS_TYPE_Q6_K, sizeof(struct rops_block_q6_K), a, r0, r1);
        return true;
    default:
        return false;
    }
}
