/*
 * The K types' products for many inputs (prompts; part of x86/qdot.h): q2_K .. q6_K weights
 * against q8_K inputs, a panel of 16 or 32 rows unpacked once for all the inputs of the call.
 *
 * The panel puts the rows in the lanes: for each 4 columns of a block, one vector per 8 rows
 * (16 with AVX-512's 512-bit vectors) holds each row's 4 quants (made non-negative: q6_K's q + 32,
 * q3_K's q + 4), so that an input's 4 quants, broadcast, multiply 8 rows at once (vpmaddubsw:
 * unsigned weights, signed inputs), and the int16 pairs of two such steps (at most 2 x 2 x 63 x 128
 * = 32256: no saturation) times the group's scale add to each row's int32 sum (vpmaddwd, or VNNI's
 * vpdpwssd). 64 multiply-adds an input per 8 rows take 4-5 instructions, where the f32 tiles
 * take 8 FMAs.
 *
 * Each row's sums are then the block's exact integers (isum, less offset x sum_g sc_g bsum_g;
 * msum = sum_g mn_g bsum_g, by vpmaddwd of scale pairs and bsum pairs), and its float steps the
 * block chain (ops_quants.h), lane by lane: the results are those of every other kernel of
 * these types bit for bit, so a prompt's tokens get the logits they would get one at a time.
 *
 * iq4_xs is not here: its signed levels made unsigned (+ 128) would saturate vpmaddubsw.
 */

#define QG_INLINE static inline __attribute__((always_inline))
#define QG_KB     4 /* blocks a panel holds (50 KiB with 512-bit vectors, on the stack) */
#define QG_MIN_N                                                                                   \
    16 /* fewer inputs take x86/qdot_k.h: unpacking the panel costs several inputs' products */

/* The vectors: QG_L rows a vector (512 bits where AVX-512 is there: twice the products an
 * instruction), two vectors a panel; QG_NB inputs at a time (AVX-512's 32 registers hold
 * four inputs' sums, the others' 16 two). */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define QG_L                 16
#define QG_NB                4
#define qg_vi                __m512i
#define qg_vf                __m512
#define QG_LOAD(p)           _mm512_load_si512((const void *)(p))
#define QG_LOADF(p)          _mm512_load_ps(p)
#define QG_STOREF(p, v)      _mm512_store_ps(p, v)
#define QG_BCAST(q)          _mm512_set1_epi32(q)
#define QG_ZERO()            _mm512_setzero_si512()
#define QG_ZEROF()           _mm512_setzero_ps()
#define QG_MADDUBS(a, b)     _mm512_maddubs_epi16(a, b)
#define QG_ADD16(a, b)       _mm512_add_epi16(a, b)
#define QG_SUB32(a, b)       _mm512_sub_epi32(a, b)
#define QG_MULLO(a, b)       _mm512_mullo_epi32(a, b)
#define QG_DPWSSD(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define QG_CVT(v)            _mm512_cvtepi32_ps(v)
#define QG_MUL(a, b)         _mm512_mul_ps(a, b)
#define QG_SUBF(a, b)        _mm512_sub_ps(a, b)
#define QG_ADDF(a, b)        _mm512_add_ps(a, b)
#define QG_SET1F(x)          _mm512_set1_ps(x)
#else
#define QG_L             8
#define QG_NB            2
#define qg_vi            __m256i
#define qg_vf            __m256
#define QG_LOAD(p)       _mm256_load_si256((const __m256i *)(p))
#define QG_LOADF(p)      _mm256_load_ps(p)
#define QG_STOREF(p, v)  _mm256_store_ps(p, v)
#define QG_BCAST(q)      _mm256_set1_epi32(q)
#define QG_ZERO()        _mm256_setzero_si256()
#define QG_ZEROF()       _mm256_setzero_ps()
#define QG_MADDUBS(a, b) _mm256_maddubs_epi16(a, b)
#define QG_ADD16(a, b)   _mm256_add_epi16(a, b)
#define QG_SUB32(a, b)   _mm256_sub_epi32(a, b)
#define QG_MULLO(a, b)   _mm256_mullo_epi32(a, b)
#if defined(__AVXVNNI__)
#define QG_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#else
#define QG_DPWSSD(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif
#define QG_CVT(v)     _mm256_cvtepi32_ps(v)
#define QG_MUL(a, b)  _mm256_mul_ps(a, b)
#define QG_SUBF(a, b) _mm256_sub_ps(a, b)
#define QG_ADDF(a, b) _mm256_add_ps(a, b)
#define QG_SET1F(x)   _mm256_set1_ps(x)
#endif
#define QG_ROWS (2 * QG_L) /* rows a panel */

/* One block of a panel (row r at lane r % QG_L of vector r / QG_L). */
struct qg_block {
    uint32_t q[64][QG_ROWS]; /* [4 columns][row]: the row's 4 quants, non-negative */
    int32_t sc[16][QG_ROWS]; /* [group of 16][row]: the scale as an int16 pair (sc, sc) */
    int32_t scp[8][QG_ROWS]; /* [pair of groups][row]: (sc_2h, sc_2h+1), for the offset */
    int32_t mnp[8][QG_ROWS]; /* ... (mn_2h, mn_2h+1), for the minimums */
    float d[QG_ROWS], dmin[QG_ROWS];
};

static inline int qg_offset(enum rops_type type) {
    return type == ROPS_TYPE_Q6_K ? 32 : type == ROPS_TYPE_Q3_K ? 4 : 0;
}

static inline uint32_t qg_pair16(int a, int b) {
    return (uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16;
}

/* Rows [r, r + rb) of the call, blocks [b0, b0 + nb) of its columns, into the panel; rows
 * from rb on are zero (their sums are zero, and they are not stored). */
static void qg_pack(enum rops_type type, const struct rops_qdot_args *a, size_t bb, int64_t r,
                    int64_t rb, int64_t b0, int64_t nb, struct qg_block *p) {
    const uint8_t *base = (const uint8_t *)a->w->data + rops_row_bytes(type, a->c0);
    const int off = qg_offset(type);
    for (int64_t j = 0; j < QG_ROWS; j++)
        for (int64_t b = 0; b < nb; b++) {
            struct qg_block *pb = &p[b];
            struct rops_unpackedK u;
            if (j < rb)
                rops_unpack_K(type,
                              base + (size_t)(r + j) * a->w->row_bytes + (size_t)(b0 + b) * bb, &u);
            else
                memset(&u, 0, sizeof u);
            for (int c = 0; c < 64; c++) {
                uint32_t word = 0;
                for (int t = 0; t < 4; t++)
                    word |= (uint32_t)(uint8_t)(j < rb ? u.q[4 * c + t] + off : 0) << (8 * t);
                pb->q[c][j] = word;
            }
            for (int g = 0; g < 16; g++) pb->sc[g][j] = (int32_t)qg_pair16(u.sc[g], u.sc[g]);
            for (int h = 0; h < 8; h++) {
                pb->scp[h][j] = (int32_t)qg_pair16(u.sc[2 * h], u.sc[2 * h + 1]);
                pb->mnp[h][j] = (int32_t)qg_pair16(u.mn[2 * h], u.mn[2 * h + 1]);
            }
            pb->d[j] = u.d;
            pb->dmin[j] = u.dmin;
        }
}

/* sum over the 8 pairs h of pairs[h] . (bsums[2h], bsums[2h + 1]), for the rows of vector v. */
QG_INLINE qg_vi qg_bsum_dot(const int32_t pairs[8][QG_ROWS], int v, const int16_t *bsums) {
    qg_vi acc = QG_ZERO();
    for (int h = 0; h < 8; h++) {
        int32_t bp;
        memcpy(&bp, bsums + 2 * h, 4);
        acc = QG_DPWSSD(acc, QG_LOAD(&pairs[h][QG_L * v]), QG_BCAST(bp));
    }
    return acc;
}

/* NB inputs from i (their sums s[v][ii], rows QG_L v .. QG_L v + QG_L - 1) through the panel's
 * nb blocks. */
QG_INLINE void qg_inputs(enum rops_type type, int NB, const struct rops_qdot_args *a,
                         const struct qg_block *p, int64_t b0, int64_t nb, int64_t i,
                         qg_vf s[2][4]) {
    const int off = qg_offset(type);
    const bool has_min = type == ROPS_TYPE_Q2_K || type == ROPS_TYPE_Q4_K || type == ROPS_TYPE_Q5_K;
    for (int64_t b = 0; b < nb; b++) {
        const struct qg_block *pb = &p[b];
        const struct rops_block_q8_K *x[4];
        for (int ii = 0; ii < NB; ii++)
            x[ii] =
                (const struct rops_block_q8_K *)(a->xq + (size_t)(i + ii) * a->xq_stride) + b0 + b;
        qg_vi isum[2][4];
        for (int v = 0; v < 2; v++)
            for (int ii = 0; ii < NB; ii++) isum[v][ii] = QG_ZERO();
        for (int g = 0; g < 16; g++) {
            const qg_vi sc0 = QG_LOAD(&pb->sc[g][0]), sc1 = QG_LOAD(&pb->sc[g][QG_L]);
            for (int h = 0; h < 2; h++) { /* two pairs of 4 columns: the group's 16 */
                const int c = 4 * g + 2 * h;
                const qg_vi w00 = QG_LOAD(&pb->q[c][0]), w01 = QG_LOAD(&pb->q[c][QG_L]);
                const qg_vi w10 = QG_LOAD(&pb->q[c + 1][0]), w11 = QG_LOAD(&pb->q[c + 1][QG_L]);
                for (int ii = 0; ii < NB; ii++) {
                    int32_t q0, q1;
                    memcpy(&q0, x[ii]->qs + 4 * c, 4);
                    memcpy(&q1, x[ii]->qs + 4 * c + 4, 4);
                    const qg_vi x0 = QG_BCAST(q0), x1 = QG_BCAST(q1);
                    const qg_vi p0 = QG_ADD16(QG_MADDUBS(w00, x0), QG_MADDUBS(w10, x1));
                    const qg_vi p1 = QG_ADD16(QG_MADDUBS(w01, x0), QG_MADDUBS(w11, x1));
                    isum[0][ii] = QG_DPWSSD(isum[0][ii], p0, sc0);
                    isum[1][ii] = QG_DPWSSD(isum[1][ii], p1, sc1);
                }
            }
        }
        /* the block chain, a lane a row */
        for (int v = 0; v < 2; v++) {
            const qg_vf d = QG_LOADF(&pb->d[QG_L * v]), dmin = QG_LOADF(&pb->dmin[QG_L * v]);
            for (int ii = 0; ii < NB; ii++) {
                qg_vi is = isum[v][ii];
                if (off)
                    is = QG_SUB32(is,
                                  QG_MULLO(QG_BCAST(off), qg_bsum_dot(pb->scp, v, x[ii]->bsums)));
                const qg_vf dx = QG_SET1F(x[ii]->d);
                /* without minimums, dmin d_x msum is 0 x d_x x 0, as in the portable step */
                const qg_vi ms = has_min ? qg_bsum_dot(pb->mnp, v, x[ii]->bsums) : QG_ZERO();
                const qg_vf t = QG_SUBF(QG_MUL(QG_MUL(d, dx), QG_CVT(is)),
                                        QG_MUL(QG_MUL(dmin, dx), QG_CVT(ms)));
                s[v][ii] = QG_ADDF(s[v][ii], t);
            }
        }
    }
}

/* Rows [r, r + rb) of y for NB inputs from i: load (first: the call's start) or store. */
QG_INLINE void qg_sums(const struct rops_qdot_args *a, int NB, int64_t r, int64_t rb, int64_t i,
                       bool load, bool first, qg_vf s[2][4]) {
    for (int ii = 0; ii < NB; ii++)
        for (int v = 0; v < 2; v++) {
            float *y = a->y + (i + ii) * a->y_stride + r + QG_L * v;
            const int64_t left = rb - QG_L * v < QG_L ? rb - QG_L * v : QG_L;
            _Alignas(64) float tmp[QG_L] = {0};
            if (load && first && !a->accumulate) {
                s[v][ii] = QG_ZEROF();
            } else if (load) {
                for (int64_t l = 0; l < left; l++) tmp[l] = y[l];
                s[v][ii] = QG_LOADF(tmp);
            } else {
                QG_STOREF(tmp, s[v][ii]);
                for (int64_t l = 0; l < left; l++) y[l] = tmp[l];
            }
        }
}

QG_INLINE void qg_tile(enum rops_type type, int NB, const struct rops_qdot_args *a,
                       const struct qg_block *p, int64_t r, int64_t rb, int64_t b0, int64_t nb,
                       int64_t i) {
    qg_vf s[2][4];
    qg_sums(a, NB, r, rb, i, true, b0 == 0, s);
    qg_inputs(type, NB, a, p, b0, nb, i, s);
    qg_sums(a, NB, r, rb, i, false, false, s);
}

QG_INLINE void qg_rows(enum rops_type type, size_t bb, const struct rops_qdot_args *a, int64_t r0,
                       int64_t r1) {
    _Alignas(64) struct qg_block panel[QG_KB];
    const int64_t n_blocks = a->kt / ROPS_QK_K;
    for (int64_t r = r0; r < r1; r += QG_ROWS) {
        const int64_t rb = r1 - r < QG_ROWS ? r1 - r : QG_ROWS;
        for (int64_t b0 = 0; b0 < n_blocks; b0 += QG_KB) {
            const int64_t nb = n_blocks - b0 < QG_KB ? n_blocks - b0 : QG_KB;
            qg_pack(type, a, bb, r, rb, b0, nb, panel);
            int64_t i = 0;
            for (; i + QG_NB <= a->n; i += QG_NB) qg_tile(type, QG_NB, a, panel, r, rb, b0, nb, i);
            for (; i < a->n; i++) qg_tile(type, 1, a, panel, r, rb, b0, nb, i);
        }
    }
}

/* False when this file does not take the call (a type not here, or too few inputs). */
static bool qgemm_k_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    if (a->n < QG_MIN_N) return false;
    switch (a->w->type) {
    case ROPS_TYPE_Q2_K:
        qg_rows(ROPS_TYPE_Q2_K, sizeof(struct rops_block_q2_K), a, r0, r1);
        return true;
    case ROPS_TYPE_Q3_K:
        qg_rows(ROPS_TYPE_Q3_K, sizeof(struct rops_block_q3_K), a, r0, r1);
        return true;
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
