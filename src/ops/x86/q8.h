/*
 * The q8_0 / q4_0 integer dot products on 256-bit vectors, for the files of the x86 instruction
 * sets: ops_avx2.c (vpmaddubsw + vpmaddwd), ops_avxvnni.c (AVX-VNNI's vpdpbusd, VEX) and
 * ops_avx512.c (AVX512-VNNI's, EVEX). Each includes this once, inside its #if of the
 * instruction set and after x86/vec.h and x86/pack.h, after defining
 *   ROPS_Q8_DOT(aw, w, x)  eight int32 sums of four products each of signed bytes w and x,
 *                          aw = |w| (the instructions take one operand unsigned)
 *   ROPS_Q8_NAME           the name of the kernel it defines (the table's q8_rows)
 *
 * Rows in the lanes: 8 rows' blocks are loaded side by side and transposed as 8 x 8 int32, so
 * that vector t holds each row's 4 quants t (lane j: row j), and input quants t, broadcast,
 * multiply all 8 rows at once; a block's 8 steps leave each row's exact integer sum in its
 * lane, and the block chain (ops_impl.h, struct rops_q8_args) adds d_w d_x isum to each row's
 * sum, lane by lane. Every input is summed the same way whatever the inputs beside it, and a
 * prompt (ROPS_Q8_PANEL_MIN inputs or more) first transposes a tile's weights once into a
 * panel, then runs its inputs over it: the same integers and float steps, the same bits.
 *
 * The int32 sums are exact (at most 32 x 128 x 127 a block, no saturation: |w| <= 128 fits a
 * byte unsigned, the inputs are within +-127, so negating them does not overflow). With VNNI, a
 * panel takes x + 128 (x xor 0x80) as the unsigned operand and w as the signed one, and takes
 * 128 sum w back out: one instruction a step where the other way needs the sign of x by w too.
 */
#ifndef ROPS_Q8_DOT
#error "define ROPS_Q8_DOT and ROPS_Q8_NAME before including x86/q8.h"
#endif

#define Q8_INLINE static inline __attribute__((always_inline))
/* the loops over a block's 8 vectors, unrolled, so that the vectors stay in registers */
#define Q8_UNROLL _Pragma("GCC unroll 8")

/* The 32 quants of weight block b of a row as signed bytes. */
Q8_INLINE __m256i q8_block_bytes(enum rops_type type, const uint8_t *row, int64_t b) {
    if (type == ROPS_TYPE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)((const struct rops_block_q8_0 *)row + b)->qs);
    const struct rops_block_q4_0 *blk = (const struct rops_block_q4_0 *)row + b;
    const __m128i raw = _mm_loadu_si128((const __m128i *)blk->qs), mask = _mm_set1_epi8(15);
    const __m256i nib =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), _mm_and_si128(raw, mask));
    return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
}

/* The scales of block b of 8 rows, rows in lanes (both block types begin with d, f16). */
Q8_INLINE __m256 q8_block_scales(enum rops_type type, const uint8_t *const rows[8], int64_t b) {
    const size_t bb =
        type == ROPS_TYPE_Q8_0 ? sizeof(struct rops_block_q8_0) : sizeof(struct rops_block_q4_0);
    uint16_t h[8];
    Q8_UNROLL
    for (int j = 0; j < 8; j++) memcpy(&h[j], rows[j] + (size_t)b * bb, 2);
    return _mm256_cvtph_ps(_mm_set_epi16((short)h[7], (short)h[6], (short)h[5], (short)h[4],
                                         (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

/* Block b of 8 rows, rows in lanes: wt[t] lane j = row j's quants 4t .. 4t + 3; dw lane j its
 * scale. */
Q8_INLINE void q8_block_lanes(enum rops_type type, const uint8_t *const rows[8], int64_t b,
                              __m256i wt[8], __m256 *dw) {
    __m256 v[8];
    Q8_UNROLL
    for (int j = 0; j < 8; j++) v[j] = _mm256_castsi256_ps(q8_block_bytes(type, rows[j], b));
    transpose8(v);
    Q8_UNROLL
    for (int t = 0; t < 8; t++) wt[t] = _mm256_castps_si256(v[t]);
    *dw = q8_block_scales(type, rows, b);
}

struct q8_block {
    __m256i wt[8]; /* as q8_block_lanes */
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
    __m256i w128; /* 128 x each row's sum of quants */
#else
    __m256i aw[8]; /* |wt| */
#endif
    __m256 dw;
};

/* Block b of 8 rows, ready for the inputs. */
Q8_INLINE void q8_prepare(enum rops_type type, const uint8_t *const rows[8], int64_t b,
                          struct q8_block *p) {
    q8_block_lanes(type, rows, b, p->wt, &p->dw);
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
    /* two chains of steps, so that their latencies overlap (integers: any order is exact) */
    __m256i h[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    Q8_UNROLL
    for (int t = 0; t < 8; t++)
        h[t & 1] = ROPS_DPBUSD(h[t & 1], _mm256_set1_epi8((char)0x80), p->wt[t]);
    p->w128 = _mm256_add_epi32(h[0], h[1]);
#else
    Q8_UNROLL
    for (int t = 0; t < 8; t++) p->aw[t] = _mm256_sign_epi8(p->wt[t], p->wt[t]);
#endif
}

/* Input block x against a prepared block: each row's exact sum. */
Q8_INLINE __m256i q8_block_isum(const struct q8_block *p, const struct rops_xq8 *x) {
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
    /* x + 128 unsigned times w signed, less 128 sum w */
    __m256i acc[2] = {_mm256_sub_epi32(_mm256_setzero_si256(), p->w128), _mm256_setzero_si256()};
    Q8_UNROLL
    for (int t = 0; t < 8; t++) {
        int32_t q;
        memcpy(&q, x->qs + 4 * t, 4);
        acc[t & 1] = ROPS_DPBUSD(acc[t & 1], _mm256_set1_epi32(q ^ (int32_t)0x80808080), p->wt[t]);
    }
    return _mm256_add_epi32(acc[0], acc[1]);
#else
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    Q8_UNROLL
    for (int t = 0; t < 8; t++) {
        int32_t q;
        memcpy(&q, x->qs + 4 * t, 4);
        acc[t & 1] =
            _mm256_add_epi32(acc[t & 1], ROPS_Q8_DOT(p->aw[t], p->wt[t], _mm256_set1_epi32(q)));
    }
    return _mm256_add_epi32(acc[0], acc[1]);
#endif
}

/* The block chain's step: s += (d_w d_x) isum, lane by lane. */
Q8_INLINE __m256 q8_step(__m256 s, __m256 dw, float dx, __m256i isum) {
    return _mm256_add_ps(
        s, _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum)));
}

/* y[i * m + r .. r + rb) = (accumulate: y +) the sums' lanes. */
Q8_INLINE void q8_store(const struct rops_q8_args *a, int64_t i, int64_t r, int64_t rb, __m256 s) {
    _Alignas(32) float out[8];
    _mm256_store_ps(out, s);
    float *y = a->y + i * a->w->n_rows + r;
    for (int64_t j = 0; j < rb; j++) y[j] = a->accumulate ? y[j] + out[j] : out[j];
}

/* The 8 rows from r (rows past r1 repeat row r, their sums dropped), and the next 8 prefetched
 * a share per block: 8 short rows side by side are streams too short for the hardware
 * prefetcher. */
Q8_INLINE int64_t q8_rows_at(const struct rops_q8_args *a, int64_t r, int64_t r1,
                             const uint8_t *rows[8]) {
    const int64_t rb = r1 - r < 8 ? r1 - r : 8;
    for (int64_t j = 0; j < 8; j++)
        rows[j] = (const uint8_t *)a->w->data + (size_t)(r + (j < rb ? j : 0)) * a->w->row_bytes;
    return rb;
}

/* Lane j of the result: the sum of v[j]'s lanes (rows' vectors of sums to rows in lanes). */
Q8_INLINE __m256i q8_reduce8(const __m256i v[8]) {
    const __m256i a0 = _mm256_hadd_epi32(v[0], v[1]), a1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i a2 = _mm256_hadd_epi32(v[4], v[5]), a3 = _mm256_hadd_epi32(v[6], v[7]);
    /* b0: the low and high halves' sums of rows 0-3, b1 of rows 4-7 */
    const __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* NB inputs (one to three: generation) of rows [r0, r1), straight from the weights: each row's
 * block against the input's as 32 bytes (8 lanes of 4), the rows' lane sums then reduced to
 * rows in lanes, for the block chain. */
Q8_INLINE void q8_rows(enum rops_type type, const struct rops_q8_args *a, int NB, int64_t r0,
                       int64_t r1) {
    const struct rops_mat *w = a->w;
    for (int64_t r = r0; r < r1; r += 8) {
        const uint8_t *rows[8];
        const int64_t rb = q8_rows_at(a, r, r1, rows);
        __m256 s[3];
        for (int i = 0; i < NB; i++) s[i] = _mm256_setzero_ps();
        const uint8_t *next = rows[0] + (size_t)8 * w->row_bytes;
        const int64_t next_end = r + 16 <= r1 ? 8 * (int64_t)w->row_bytes : 0;
        const int64_t per_step = ((next_end + a->nb - 1) / a->nb + 63) & ~(int64_t)63;
        for (int64_t b = 0; b < a->nb; b++) {
            for (int64_t o = b * per_step; o < (b + 1) * per_step && o < next_end; o += 64)
                _mm_prefetch((const char *)next + o, _MM_HINT_T0);
            const __m256 dw = q8_block_scales(type, rows, a->b0 + b);
            for (int i = 0; i < NB; i++) {
                const struct rops_xq8 *x = &a->xq[i * a->nb + b];
                const __m256i xv = _mm256_loadu_si256((const __m256i *)x->qs);
                __m256i dots[8];
                Q8_UNROLL
                for (int j = 0; j < 8; j++) {
                    const __m256i wq = q8_block_bytes(type, rows[j], a->b0 + b);
                    dots[j] = ROPS_Q8_DOT(_mm256_sign_epi8(wq, wq), wq, xv);
                }
                s[i] = q8_step(s[i], dw, x->d, q8_reduce8(dots));
            }
        }
        for (int i = 0; i < NB; i++) q8_store(a, i, r, rb, s[i]);
    }
}

/* ---- prompts: a panel of the tile's weights, rows in lanes, for all the inputs ------------ */

#define ROPS_Q8_PANEL_MIN 16  /* inputs from which a panel pays for its transposes */
#define Q8_PANEL_BLOCKS   32  /* blocks a panel holds (34 KiB at most, on the stack) */
#define Q8_PANEL_INPUTS   128 /* inputs whose sums a pass over the panels carries (8 KiB) */

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* With AVX-512, the panel's vectors are 512 bits: two blocks of 8 rows side by side, 16 rows
 * a step (the same integers and float steps lane for lane, twice the lanes). */
#define Q8_PL 16
typedef __m512 q8_pvf;
struct q8_pblock {
    __m512i wt[8], w128;
    __m512 dw;
};

Q8_INLINE void q8_pprepare(enum rops_type type, const uint8_t *const rows[16], int64_t b,
                           struct q8_pblock *p) {
    struct q8_block lo, hi;
    q8_prepare(type, rows, b, &lo);
    q8_prepare(type, rows + 8, b, &hi);
    Q8_UNROLL
    for (int t = 0; t < 8; t++)
        p->wt[t] = _mm512_inserti64x4(_mm512_castsi256_si512(lo.wt[t]), hi.wt[t], 1);
    p->w128 = _mm512_inserti64x4(_mm512_castsi256_si512(lo.w128), hi.w128, 1);
    p->dw = _mm512_insertf32x8(_mm512_castps256_ps512(lo.dw), hi.dw, 1);
}

Q8_INLINE q8_pvf q8_pstep(q8_pvf s, const struct q8_pblock *p, const struct rops_xq8 *x) {
    __m512i acc[2] = {_mm512_sub_epi32(_mm512_setzero_si512(), p->w128), _mm512_setzero_si512()};
    Q8_UNROLL
    for (int t = 0; t < 8; t++) {
        int32_t q;
        memcpy(&q, x->qs + 4 * t, 4);
        acc[t & 1] =
            _mm512_dpbusd_epi32(acc[t & 1], _mm512_set1_epi32(q ^ (int32_t)0x80808080), p->wt[t]);
    }
    const __m512i isum = _mm512_add_epi32(acc[0], acc[1]);
    return _mm512_add_ps(
        s, _mm512_mul_ps(_mm512_mul_ps(p->dw, _mm512_set1_ps(x->d)), _mm512_cvtepi32_ps(isum)));
}

#define Q8_PZERO()        _mm512_setzero_ps()
#define Q8_PSTORE(out, s) _mm512_storeu_ps(out, s)
#else
#define Q8_PL     8
typedef __m256 q8_pvf;
#define q8_pblock q8_block

Q8_INLINE void q8_pprepare(enum rops_type type, const uint8_t *const rows[8], int64_t b,
                           struct q8_pblock *p) {
    q8_prepare(type, rows, b, p);
}

Q8_INLINE q8_pvf q8_pstep(q8_pvf s, const struct q8_pblock *p, const struct rops_xq8 *x) {
    return q8_step(s, p->dw, x->d, q8_block_isum(p, x));
}

#define Q8_PZERO()        _mm256_setzero_ps()
#define Q8_PSTORE(out, s) _mm256_storeu_ps(out, s)
#endif

Q8_INLINE void q8_panel_rows(enum rops_type type, const struct rops_q8_args *a, int64_t r0,
                             int64_t r1) {
    _Alignas(64) struct q8_pblock panel[Q8_PANEL_BLOCKS];
    q8_pvf s[Q8_PANEL_INPUTS];
    const int64_t m = a->w->n_rows;
    for (int64_t r = r0; r < r1; r += Q8_PL) {
        const int64_t rb = r1 - r < Q8_PL ? r1 - r : Q8_PL;
        const uint8_t *rows[Q8_PL]; /* rows past r1 repeat row r, their sums dropped */
        for (int64_t j = 0; j < Q8_PL; j++)
            rows[j] =
                (const uint8_t *)a->w->data + (size_t)(r + (j < rb ? j : 0)) * a->w->row_bytes;
        for (int64_t i0 = 0; i0 < a->n; i0 += Q8_PANEL_INPUTS) {
            const int64_t ni = a->n - i0 < Q8_PANEL_INPUTS ? a->n - i0 : Q8_PANEL_INPUTS;
            for (int64_t i = 0; i < ni; i++) s[i] = Q8_PZERO();
            for (int64_t b0 = 0; b0 < a->nb; b0 += Q8_PANEL_BLOCKS) {
                const int64_t nb = a->nb - b0 < Q8_PANEL_BLOCKS ? a->nb - b0 : Q8_PANEL_BLOCKS;
                for (int64_t b = 0; b < nb; b++) q8_pprepare(type, rows, a->b0 + b0 + b, &panel[b]);
                for (int64_t i = 0; i < ni; i++)
                    for (int64_t b = 0; b < nb; b++)
                        s[i] = q8_pstep(s[i], &panel[b], &a->xq[(i0 + i) * a->nb + b0 + b]);
            }
            for (int64_t i = 0; i < ni; i++) {
                float out[Q8_PL], *y = a->y + (i0 + i) * m + r;
                Q8_PSTORE(out, s[i]);
                for (int64_t j = 0; j < rb; j++) y[j] = a->accumulate ? y[j] + out[j] : out[j];
            }
        }
    }
}

#define Q8_FOR_TYPE(T)                                                                             \
    static void q8_##T(const struct rops_q8_args *a, int64_t r0, int64_t r1) {                     \
        if (a->n >= ROPS_Q8_PANEL_MIN)                                                             \
            q8_panel_rows(T, a, r0, r1);                                                           \
        else if (a->n == 1)                                                                        \
            q8_rows(T, a, 1, r0, r1);                                                              \
        else if (a->n == 2)                                                                        \
            q8_rows(T, a, 2, r0, r1);                                                              \
        else                                                                                       \
            for (int64_t i = 0; i < a->n; i += 3) {                                                \
                struct rops_q8_args g = *a;                                                        \
                g.xq += i * a->nb;                                                                 \
                g.y += i * a->w->n_rows;                                                           \
                g.n = a->n - i < 3 ? a->n - i : 3;                                                 \
                if (g.n == 3)                                                                      \
                    q8_rows(T, &g, 3, r0, r1);                                                     \
                else if (g.n == 2)                                                                 \
                    q8_rows(T, &g, 2, r0, r1);                                                     \
                else                                                                               \
                    q8_rows(T, &g, 1, r0, r1);                                                     \
            }                                                                                      \
    }
Q8_FOR_TYPE(ROPS_TYPE_Q8_0)
Q8_FOR_TYPE(ROPS_TYPE_Q4_0)
#undef Q8_FOR_TYPE

static void ROPS_Q8_NAME(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    if (a->w->type == ROPS_TYPE_Q8_0)
        q8_ROPS_TYPE_Q8_0(a, r0, r1);
    else
        q8_ROPS_TYPE_Q4_0(a, r0, r1);
}
