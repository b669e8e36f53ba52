/*
 * Mamba-2's chunked ("SSD") scan, rops_ssm_scan2_chunked (ops.h; docs/mamba2.md section 5):
 * the driver, shared by both instruction sets, and the portable block kernels (the AVX2 ones
 * are in ops_avx2.c).
 *
 * One head h of group g, one chunk of len tokens t = 0 .. len-1 of a sequence, with
 * cs[t] = dt_0 A + ... + dt_t A, X (len x P) the head's inputs, B and C (len x N) the group's:
 *   Gm[t][s] = C_t . B_s                                         once per group (s <= t)
 *   M[t][s]  = Gm[t][s] * exp(cs[t] - cs[s]) * dt_s  (s <= t),  M[t][t] += D
 *   Y        = diag(exp(cs)) (C · S^T) + M · X                   written straight into y
 *   S^T      = exp(cs[len-1]) S^T + B^T · (diag(exp(cs[len-1] - cs) dt) X)
 * Each thread holds its heads' states transposed (S^T, N x P, in the scratch) for the whole
 * call, so every product has its output rows in memory order: C · S^T and M · X write y's rows
 * (P values of a head) directly, and the state update is an N x P product. The states are
 * transposed in at the start and back at the end (and into a snapshot at a save), 2 N P moves
 * per head and sequence against ~2 N P multiply-adds per token.
 *
 * Work per token and head: 2 N P multiply-adds for the two products with S, ~len P / 2 for M · X
 * and len N / 2 / (heads per group) for Gm, against the plain scan's 2 N P multiply-adds and
 * N P multiplies, but as register-blocked products (ssd_tile: 12 accumulators, a b row loaded
 * once per 6 rows) instead of a load and a store of every state per token.
 */
#include <math.h>

#include "ops_impl.h"

/* ---- portable block kernels ---------------------------------------------------------------- */

void rops_ssd_mm_scalar(const struct rops_ssd_mm *p) {
    /* rows in tiles of 6, as the AVX2 kernel, so that tril_a / tril_c cover the same sums */
    for (int64_t i0 = 0; i0 < p->m; i0 += 6) {
        const int64_t mr = p->m - i0 < 6 ? p->m - i0 : 6;
        const int64_t kend = p->tril_a && i0 + mr < p->k ? i0 + mr : p->k;
        const int64_t nend = p->tril_c && i0 + mr < p->n ? i0 + mr : p->n;
        for (int64_t i = i0; i < i0 + mr; i++) {
            float *c = p->c + i * p->ldc;
            const float *a = p->a + i * p->lda;
            const float rs = p->rowscale ? p->rowscale[i] : 1.0f;
            for (int64_t j = 0; j < nend; j++) {
                float acc = 0.0f;
                for (int64_t kk = 0; kk < kend; kk++) acc += a[kk] * p->b[kk * p->ldb + j];
                c[j] = acc * rs + (p->accumulate ? p->beta * c[j] : 0.0f);
            }
        }
    }
}

void rops_ssd_decays_scalar(int64_t len, int64_t ld, const float *g, const float *cs,
                            const float *cl, const float *dts, float d, float *m, float *ein,
                            float *eout) {
    for (int64_t t = 0; t < len; t++) {
        for (int64_t s = 0; s < ld; s++)
            m[t * ld + s] =
                s <= t ? g[t * ld + s] * expf((cs[t] - cs[s]) + (cl[t] - cl[s])) * dts[s] : 0.0f;
        m[t * ld + t] += d;
    }
    for (int64_t s = 0; s < ld; s++) {
        ein[s] = expf(cs[s] + cl[s]);
        eout[s] = expf((cs[len - 1] - cs[s]) + (cl[len - 1] - cl[s])) * dts[s];
    }
}

void rops_ssd_scale_rows_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                                const float *scale, float *dst, int64_t ldd) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[i * ldd + j] = scale[i] * src[i * lds + j];
}

void rops_ssd_transpose_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                               float *dst, int64_t ldd) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* ---- the driver ---------------------------------------------------------------------------- */

struct ssd_kernels {
    void (*mm)(const struct rops_ssd_mm *);
    void (*decays)(int64_t, int64_t, const float *, const float *, const float *, const float *,
                   float, float *, float *, float *);
    void (*scale_rows)(int64_t, int64_t, const float *, int64_t, const float *, float *, int64_t);
    void (*transpose)(int64_t, int64_t, const float *, int64_t, float *, int64_t);
};

static const struct ssd_kernels ssd_scalar = {rops_ssd_mm_scalar, rops_ssd_decays_scalar,
                                              rops_ssd_scale_rows_scalar,
                                              rops_ssd_transpose_scalar};
static const struct ssd_kernels ssd_avx2 = {rops_ssd_mm_avx2, rops_ssd_decays_avx2,
                                            rops_ssd_scale_rows_avx2, rops_ssd_transpose_avx2};

/* A thread's part of the scratch, in floats: the chunk's buffers, then hb heads' states. */
struct ssd_layout {
    int64_t L, Lp; /* chunk length, and its row length rounded up to the vector */
    size_t bt, gm, mp, xs, cs, cl, dts, ein, eout, st, per_head, fixed;
};

static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15; /* keeps every buffer on a 64-byte boundary of its own */
}

static struct ssd_layout ssd_layout(int64_t n_tok, int64_t N, int64_t P) {
    struct ssd_layout l;
    l.L = n_tok < ROPS_SSD_CHUNK ? n_tok : ROPS_SSD_CHUNK;
    l.Lp = (l.L + 7) & ~(int64_t)7;
    const size_t L = (size_t)l.L, Lp = (size_t)l.Lp;
    size_t off = 0;
    l.bt = off, off += round16((size_t)N * Lp);
    l.gm = off, off += round16(L * Lp);
    l.mp = off, off += round16(L * Lp);
    l.xs = off, off += round16(L * (size_t)P);
    l.cs = off, off += round16(Lp);
    l.cl = off, off += round16(Lp);
    l.dts = off, off += round16(Lp);
    l.ein = off, off += round16(Lp);
    l.eout = off, off += round16(Lp);
    l.st = off;
    l.per_head = round16((size_t)N * (size_t)P);
    l.fixed = off;
    return l;
}

struct ssd_task {
    struct rops_scan2_args a;
    const struct ssd_kernels *k;
    struct ssd_layout l;
    float *scratch;
    size_t thread_floats; /* each thread's share of the scratch */
    int64_t hb;           /* heads whose states a thread holds at a time */
};

/* One chunk [pos, pos + len) of sequence s for the heads [h0, h1) whose transposed states are
 * at st (N x P each). */
static void ssd_chunk(const struct ssd_task *t, float *ws, int64_t s, int64_t pos, int64_t len,
                      int64_t h0, int64_t h1, float *st) {
    const struct rops_scan2_args *a = &t->a;
    const struct ssd_kernels *k = t->k;
    const struct ssd_layout *l = &t->l;
    const int64_t N = a->N, P = a->Di / a->H, Lp = l->Lp, hpg = a->H / a->G;
    const int64_t tok0 = s * a->n_tok + pos; /* the chunk's first token in the call */
    const float *xr = a->xbc + tok0 * a->stride;
    float *bt = ws + l->bt, *gm = ws + l->gm, *mp = ws + l->mp, *xs = ws + l->xs;
    float *cs = ws + l->cs, *cl = ws + l->cl, *dts = ws + l->dts, *ein = ws + l->ein,
          *eout = ws + l->eout;
    float *const save_at = a->save ? a->save[tok0 + len - 1] : NULL;
    for (int64_t g = h0 / hpg; g <= (h1 - 1) / hpg; g++) {
        const float *B = xr + a->Di + g * N, *C = xr + a->Di + a->G * N + g * N;
        k->transpose(len, N, B, a->stride, bt, Lp); /* bt[n][s] = B_s[n] */
        const struct rops_ssd_mm cb = {.m = len,
                                       .n = len,
                                       .k = N,
                                       .a = C,
                                       .lda = a->stride,
                                       .b = bt,
                                       .ldb = Lp,
                                       .c = gm,
                                       .ldc = Lp,
                                       .tril_c = true};
        k->mm(&cb);
        const int64_t ha = g * hpg > h0 ? g * hpg : h0,
                      hz = (g + 1) * hpg < h1 ? (g + 1) * hpg : h1;
        for (int64_t h = ha; h < hz; h++) {
            float *sth = st + (size_t)(h - h0) * l->per_head;
            /* the segment sums' prefix, summed in double and kept as two floats: one float
               would lose the small segments' sums to cancellation once the prefix is large
               (a chunk of dt 20, A -8 reaches -10^4, an ulp of 10^-3 in every exponent) */
            double sum = 0.0;
            for (int64_t i = 0; i < Lp; i++) {
                dts[i] = i < len ? a->dt[(tok0 + i) * a->H + h] : 0.0f;
                sum += i < len ? (double)dts[i] * a->A[h] : 0.0;
                cs[i] = i < len ? (float)sum : 0.0f;
                cl[i] = i < len ? (float)(sum - cs[i]) : 0.0f;
            }
            k->decays(len, Lp, gm, cs, cl, dts, a->D[h], mp, ein, eout);
            const float *X = xr + h * P;
            float *Y = a->y + tok0 * a->Di + h * P;
            /* the state carried in, then the chunk's own tokens (D * x on M's diagonal) */
            const struct rops_ssd_mm inter = {.m = len,
                                              .n = P,
                                              .k = N,
                                              .a = C,
                                              .lda = a->stride,
                                              .b = sth,
                                              .ldb = P,
                                              .c = Y,
                                              .ldc = a->Di,
                                              .rowscale = ein};
            k->mm(&inter);
            const struct rops_ssd_mm intra = {.m = len,
                                              .n = P,
                                              .k = len,
                                              .a = mp,
                                              .lda = Lp,
                                              .b = X,
                                              .ldb = a->stride,
                                              .c = Y,
                                              .ldc = a->Di,
                                              .beta = 1.0f,
                                              .accumulate = true,
                                              .tril_a = true};
            k->mm(&intra);
            k->scale_rows(len, P, X, a->stride, eout, xs, P);
            const struct rops_ssd_mm upd = {.m = N,
                                            .n = P,
                                            .k = len,
                                            .a = bt,
                                            .lda = Lp,
                                            .b = xs,
                                            .ldb = P,
                                            .c = sth,
                                            .ldc = P,
                                            .beta = expf(cs[len - 1] + cl[len - 1]),
                                            .accumulate = true};
            k->mm(&upd);
            if (save_at) k->transpose(N, P, sth, P, save_at + h * P * N, N);
        }
    }
}

static void ssd_thread(void *arg, int ith, int nth) {
    const struct ssd_task *t = arg;
    const struct rops_scan2_args *a = &t->a;
    const int64_t h0 = a->H * ith / nth, h1 = a->H * (ith + 1) / nth;
    const int64_t N = a->N, P = a->Di / a->H;
    float *ws = t->scratch + (size_t)ith * t->thread_floats, *st = ws + t->l.st;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t b0 = h0; b0 < h1; b0 += t->hb) {
            const int64_t b1 = h1 - b0 < t->hb ? h1 : b0 + t->hb;
            float *ss = a->ssm + s * a->Di * N; /* sequence s's state */
            for (int64_t h = b0; h < b1; h++)
                t->k->transpose(P, N, ss + h * P * N, N, st + (size_t)(h - b0) * t->l.per_head, P);
            for (int64_t pos = 0; pos < a->n_tok;) {
                /* up to L tokens, ending early at a token whose state is saved */
                int64_t end = pos + t->l.L < a->n_tok ? pos + t->l.L : a->n_tok;
                for (int64_t i = pos; a->save && i < end; i++)
                    if (a->save[s * a->n_tok + i]) end = i + 1;
                ssd_chunk(t, ws, s, pos, end - pos, b0, b1, st);
                pos = end;
            }
            for (int64_t h = b0; h < b1; h++)
                t->k->transpose(N, P, st + (size_t)(h - b0) * t->l.per_head, P, ss + h * P * N, N);
        }
}

size_t rops_ssm_scan2_chunked_scratch_bytes(int n_threads, int64_t n_tok, int64_t d_inner,
                                            int64_t d_state, int64_t n_head) {
    const int64_t nth = n_threads < 1 ? 1 : n_threads;
    const struct ssd_layout l = ssd_layout(n_tok < 1 ? 1 : n_tok, d_state, d_inner / n_head);
    const size_t heads = (size_t)((n_head + nth - 1) / nth);
    return (size_t)nth * (l.fixed + heads * l.per_head) * sizeof(float);
}

void rops_ssm_scan2_chunked(const struct rops_exec *ex, float *ssm_state, const float *xbc,
                            int64_t xbc_stride, const float *dt, const float *A, const float *D,
                            int64_t n_seqs, int64_t n_tok, int64_t d_inner, int64_t d_state,
                            int64_t n_head, int64_t n_group, float *y, float *const *save) {
    if (n_seqs < 1 || n_tok < 1) return;
    struct ssd_task t = {.a = {ssm_state, xbc, dt, A, D, xbc_stride, n_seqs, n_tok, d_inner,
                               d_state, n_head, n_group, y, save},
                         .k = ex->isa == ROPS_ISA_AVX2 ? &ssd_avx2 : &ssd_scalar,
                         .l = ssd_layout(n_tok, d_state, d_inner / n_head)};
    /* threads as the plain scan takes them: a hand-off is worth ~4k multiply-adds */
    int64_t nth = ex->n_threads;
    const int64_t work = n_seqs * n_tok * d_inner * d_state;
    if (nth > work / 4096) nth = work / 4096;
    if (nth > n_head) nth = n_head;
    if (nth < 1) nth = 1;
    const int pool_nth = rpool_size(ex->pool);
    if (nth > pool_nth) nth = pool_nth;
    /* each thread's share of the scratch, in whole 16-float blocks */
    const size_t have = ex->scratch ? ex->scratch_bytes / sizeof(float) : 0;
    t.thread_floats = have / (size_t)nth & ~(size_t)15;
    const int64_t heads = (n_head + nth - 1) / nth;
    t.hb =
        t.thread_floats > t.l.fixed ? (int64_t)((t.thread_floats - t.l.fixed) / t.l.per_head) : 0;
    if (t.hb < 1) { /* not one head's state per thread: the plain scan */
        rops_ssm_scan2(ex, ssm_state, xbc, xbc_stride, dt, A, D, n_seqs, n_tok, d_inner, d_state,
                       n_head, n_group, y, save);
        return;
    }
    if (t.hb > heads) t.hb = heads;
    t.scratch = ex->scratch;
    rpool_run(ex->pool, ssd_thread, &t, (int)nth);
}
