/*
 * RWKV's WKV6 and WKV7 over a run of tokens of one head (struct rops_wkv_run, ops_impl.h), for
 * the x86 vector instruction sets: x86/kernels.inc includes this once per width (ops_avx2.c, 8
 * lanes; ops_avx512.c, 16), after defining from x86/vec.h
 *   WKV_V, WKV_L                   the vector type and its lanes
 *   WKV_LOAD(p), WKV_STORE(p, x)   aligned or not: the rows are wherever the caller has them
 *   WKV_SET1(x), WKV_ZERO()
 *   WKV_MUL(a, b), WKV_DIV(a, b), WKV_FMA(a, b, c) (a * b + c)
 *   WKV_HSUM(x)                    the sum of the lanes
 *   WKV_OUTSIDE(x)                 a bit per lane (bit l for lane l) where x is not within
 *                                  (WKV_LO, WKV_HI), NaN included
 *   WKV6_IB, WKV7_IB               vectors of a state row held in registers at a time (AVX2 has
 *                                  16 registers, AVX-512 32)
 *   WKV_NAME(x)                    the names of the kernels it defines (x ## _avx2)
 * and defines WKV_NAME(wkv6_run_fast), WKV_NAME(wkv7_run_fast) for head sizes that are a
 * multiple of WKV6_IB (WKV7_IB) vectors, at most WKV_MAX_HS; the table's entries take them for
 * such heads and the per-token kernels for others.
 *
 * The scaled state. Every token multiplies the whole state by the decays of its keys (WKV6:
 * row i by w[i]; WKV7: column j by w[j]): a multiply per element, and WKV6's output is one
 * more multiply-add per element than it needs, sum_i r[i] u[i] k[i] v[j] being a scalar times
 * v[j]. The kernels keep instead
 *   WKV6: S = diag(g) S~        (row i of the state is g[i] times row i of S~)
 *   WKV7: S = S~ diag(g)        (column j is g[j] times column j of S~)
 * with g the product of the decays since the row (column) was last folded, and a token adds
 * k / g' (WKV7: also b / g') times its vectors to S~ and multiplies nothing. Per element and
 * token: WKV6 two multiply-adds instead of three and a multiply (docs/rwkv6.md (14)); WKV7 four
 * instead of four and a multiply (docs/rwkv7.md (14)), in one pass over the state instead of
 * two (the next token's sum_j a[j] S[i][j] is taken in the pass that writes the state it
 * reads). A row (column) whose g would leave (WKV_LO, WKV_HI) is folded first, S~ = g S~ and g = 1,
 * and takes that token's decay directly; so S~ = S / g stays within 2^60 of the state, far inside
 * float's 2^128, and the sums' rounding is as the direct form's (each row or column of S~ has one
 * scale). The outputs agree with the direct form to float rounding: tests/unit/test_ops_rwkv.c
 * checks both against float64.
 *
 * WKV7's sums run over j, the keys, a column of the state: the kernel works on the transpose
 * T~[j][i] = S~[i][j] (a copy on the stack), so that its vectors run over i and no sum needs
 * the lanes added up. The copy costs two passes over the state per run, which a short run
 * does not earn back (WKV7_RUN_MIN).
 */
#ifndef WKV_NAME
#error "define WKV_V, WKV_L, ... and WKV_NAME before including x86/wkv.h"
#endif

#include <stdint.h>
#include <string.h>

#define WKV_MAX_HS 64 /* the largest head the kernels hold (all of RWKV-6's and RWKV-7's) */
#define WKV_LO     0x1p-60f
#define WKV_HI     0x1p60f
/* Tokens in a run from which WKV7 takes the transposed kernel; fewer take the per-token one:
 * the copy in and out costs ~26 us for 12 heads of 64 (bench_isa), a token ~4.2 us here and
 * ~5.6 us by the per-token kernel, the same at 12-16 tokens. */
#define WKV7_RUN_MIN 12

/* Per-key (WKV6: per-row) factors of one token, for the main loops' broadcasts. */
struct WKV_NAME(wkv_tok) {
    float rg[WKV_MAX_HS] __attribute__((aligned(64))); /* r times the scale its sum reads */
    float kg[WKV_MAX_HS] __attribute__((aligned(64))); /* k / g' (k on a folded row) */
    float bg[WKV_MAX_HS] __attribute__((aligned(64))); /* WKV7: b / g' (b) */
    float ag[WKV_MAX_HS] __attribute__((aligned(64))); /* WKV7: the next token's a times g' */
    float m[WKV_MAX_HS] __attribute__((aligned(64)));  /* a folded row's decay g w */
    uint64_t fold;                                     /* bit i: row (column) i folds */
};

/* g' = g w for hs lanes; the folded ones (g' outside the range) get m = g w and g' = 1. kg (and
 * bg) from k (b) over g', rg = r g (which of g and g' is the caller's: rg_new). */
static inline __attribute__((always_inline)) void
WKV_NAME(wkv_factors)(struct WKV_NAME(wkv_tok) * f, float *g, const float *r, const float *k,
                      const float *w, const float *b, int64_t hs, bool rg_new) {
    f->fold = 0;
    for (int64_t i = 0; i < hs; i += WKV_L) {
        const WKV_V g0 = WKV_LOAD(g + i), gw = WKV_MUL(g0, WKV_LOAD(w + i));
        const uint64_t out = (uint64_t)WKV_OUTSIDE(gw);
        WKV_STORE(g + i, gw);
        WKV_STORE(f->m + i, gw);
        if (!rg_new) WKV_STORE(f->rg + i, WKV_MUL(WKV_LOAD(r + i), g0));
        f->fold |= out << i;
    }
    for (uint64_t rest = f->fold; rest; rest &= rest - 1) g[__builtin_ctzll(rest)] = 1.0f;
    for (int64_t i = 0; i < hs; i += WKV_L) {
        const WKV_V g1 = WKV_LOAD(g + i);
        WKV_STORE(f->kg + i, WKV_DIV(WKV_LOAD(k + i), g1));
        if (b) WKV_STORE(f->bg + i, WKV_DIV(WKV_LOAD(b + i), g1));
        if (rg_new) WKV_STORE(f->rg + i, WKV_MUL(WKV_LOAD(r + i), g1));
    }
}

/* ---- WKV6: state rows i (keys), lanes over j (values) ------------------------------------ */

/* dst = diag(g) S~ (dst may be S~): the state in its own layout. */
static void WKV_NAME(wkv6_unscale)(const float *S, const float *g, int64_t hs, float *dst) {
    for (int64_t i = 0; i < hs; i++) {
        const WKV_V gi = WKV_SET1(g[i]);
        for (int64_t j = 0; j < hs; j += WKV_L)
            WKV_STORE(dst + i * hs + j, WKV_MUL(gi, WKV_LOAD(S + i * hs + j)));
    }
}

static void WKV_NAME(wkv6_run_fast)(const struct rops_wkv_run *p) {
    const int64_t hs = p->hs;
    float *S = p->S;
    float g[WKV_MAX_HS] __attribute__((aligned(64)));
    struct WKV_NAME(wkv_tok) f;
    for (int64_t i = 0; i < hs; i++) g[i] = 1.0f;
    for (int64_t t = 0; t < p->n; t++) {
        const float *r = p->r + t * p->ld, *k = p->k + t * p->ld, *v = p->v + t * p->ld,
                    *w = p->w + t * p->ld;
        float *y = p->y + t * p->ld;
        /* c = sum_i r[i] u[i] k[i]: the bonus's share of every y[j] is c v[j] */
        WKV_V cv = WKV_ZERO();
        for (int64_t i = 0; i < hs; i += WKV_L)
            cv = WKV_FMA(WKV_MUL(WKV_LOAD(r + i), WKV_LOAD(p->u + i)), WKV_LOAD(k + i), cv);
        const WKV_V c = WKV_SET1(WKV_HSUM(cv));
        WKV_NAME(wkv_factors)(&f, g, r, k, w, NULL, hs, false);
        for (int64_t j0 = 0; j0 < hs; j0 += WKV6_IB * WKV_L) {
            WKV_V vv[WKV6_IB], acc[WKV6_IB];
            for (int q = 0; q < WKV6_IB; q++) {
                vv[q] = WKV_LOAD(v + j0 + q * WKV_L);
                acc[q] = WKV_MUL(c, vv[q]);
            }
            for (int64_t i = 0; i < hs; i++) {
                float *row = S + i * hs + j0;
                const WKV_V rg = WKV_SET1(f.rg[i]), kg = WKV_SET1(f.kg[i]);
                if (!(f.fold >> i & 1)) {
                    for (int q = 0; q < WKV6_IB; q++) {
                        const WKV_V s = WKV_LOAD(row + q * WKV_L);
                        acc[q] = WKV_FMA(rg, s, acc[q]);
                        WKV_STORE(row + q * WKV_L, WKV_FMA(kg, vv[q], s));
                    }
                } else { /* the row takes its decay: S = g w S~ + k v, g = 1 */
                    const WKV_V m = WKV_SET1(f.m[i]);
                    for (int q = 0; q < WKV6_IB; q++) {
                        const WKV_V s = WKV_LOAD(row + q * WKV_L);
                        acc[q] = WKV_FMA(rg, s, acc[q]);
                        WKV_STORE(row + q * WKV_L, WKV_FMA(kg, vv[q], WKV_MUL(m, s)));
                    }
                }
            }
            for (int q = 0; q < WKV6_IB; q++) WKV_STORE(y + j0 + q * WKV_L, acc[q]);
        }
        float *dst = p->save ? p->save[t] : NULL;
        if (dst) WKV_NAME(wkv6_unscale)(S, g, hs, dst + p->save_off);
    }
    WKV_NAME(wkv6_unscale)(S, g, hs, S);
}

/* ---- WKV7: T~[j][i] = S~[i][j], rows j (keys), lanes over i (values) ---------------------- */

/* dst[i][j] = T[j][i] g[j]: the state in its own layout. */
static void WKV_NAME(wkv7_untranspose)(const float *T, const float *g, int64_t hs, float *dst) {
    for (int64_t i = 0; i < hs; i++)
        for (int64_t j = 0; j < hs; j++) dst[i * hs + j] = T[j * hs + i] * g[j];
}

static void WKV_NAME(wkv7_run_fast)(const struct rops_wkv_run *p) {
    const int64_t hs = p->hs;
    float T[WKV_MAX_HS * WKV_MAX_HS] __attribute__((aligned(64)));
    float g[WKV_MAX_HS] __attribute__((aligned(64)));
    /* this token's sum_j a[j] S[i][j] (zeroed: gcc cannot see the first pass fill it) */
    float sa[WKV_MAX_HS] __attribute__((aligned(64))) = {0};
    struct WKV_NAME(wkv_tok) f;
    for (int64_t i = 0; i < hs; i++)
        for (int64_t j = 0; j < hs; j++) T[j * hs + i] = p->S[i * hs + j];
    for (int64_t i = 0; i < hs; i++) g[i] = 1.0f;
    /* the first token's sa over the incoming state (g = 1) */
    for (int64_t i0 = 0; i0 < hs; i0 += WKV7_IB * WKV_L) {
        WKV_V acc[WKV7_IB];
        for (int q = 0; q < WKV7_IB; q++) acc[q] = WKV_ZERO();
        for (int64_t j = 0; j < hs; j++) {
            const WKV_V aj = WKV_SET1(p->a[j]);
            for (int q = 0; q < WKV7_IB; q++)
                acc[q] = WKV_FMA(aj, WKV_LOAD(T + j * hs + i0 + q * WKV_L), acc[q]);
        }
        for (int q = 0; q < WKV7_IB; q++) WKV_STORE(sa + i0 + q * WKV_L, acc[q]);
    }
    for (int64_t t = 0; t < p->n; t++) {
        const float *r = p->r + t * p->ld, *k = p->k + t * p->ld, *v = p->v + t * p->ld,
                    *w = p->w + t * p->ld, *b = p->b + t * p->ld;
        const bool next = t + 1 < p->n;
        WKV_NAME(wkv_factors)(&f, g, r, k, w, b, hs, true);
        if (next) /* the next token's a times the scales this token leaves */
            for (int64_t j = 0; j < hs; j += WKV_L)
                WKV_STORE(f.ag + j, WKV_MUL(WKV_LOAD(p->a + (t + 1) * p->ld + j), WKV_LOAD(g + j)));
        float *y = p->y + t * p->ld;
        for (int64_t i0 = 0; i0 < hs; i0 += WKV7_IB * WKV_L) {
            WKV_V vv[WKV7_IB], s_a[WKV7_IB], acc[WKV7_IB], san[WKV7_IB];
            for (int q = 0; q < WKV7_IB; q++) {
                vv[q] = WKV_LOAD(v + i0 + q * WKV_L);
                s_a[q] = WKV_LOAD(sa + i0 + q * WKV_L);
                acc[q] = san[q] = WKV_ZERO();
            }
            for (int64_t j = 0; j < hs; j++) {
                float *row = T + j * hs + i0;
                const WKV_V kg = WKV_SET1(f.kg[j]), bg = WKV_SET1(f.bg[j]), rg = WKV_SET1(f.rg[j]),
                            ag = WKV_SET1(next ? f.ag[j] : 0.0f);
                const WKV_V m = WKV_SET1(f.fold >> j & 1 ? f.m[j] : 1.0f);
                const bool folds = f.fold >> j & 1;
                for (int q = 0; q < WKV7_IB; q++) {
                    WKV_V s = WKV_LOAD(row + q * WKV_L);
                    if (folds) s = WKV_MUL(m, s); /* the column takes its decay, g = 1 */
                    s = WKV_FMA(s_a[q], bg, WKV_FMA(vv[q], kg, s));
                    WKV_STORE(row + q * WKV_L, s);
                    acc[q] = WKV_FMA(rg, s, acc[q]);
                    san[q] = WKV_FMA(ag, s, san[q]);
                }
            }
            for (int q = 0; q < WKV7_IB; q++) {
                WKV_STORE(y + i0 + q * WKV_L, acc[q]);
                WKV_STORE(sa + i0 + q * WKV_L, san[q]);
            }
        }
        float *dst = p->save ? p->save[t] : NULL;
        if (dst) WKV_NAME(wkv7_untranspose)(T, g, hs, dst + p->save_off);
    }
    WKV_NAME(wkv7_untranspose)(T, g, hs, p->S);
}
