/*
 * Mamba-2's chunked ("SSD") scan, rops_ssm_scan2_chunked (ops.h; docs/mamba2.md section 5):
 * the driver, shared by every instruction set, calling its table's block kernels (ssd_mm,
 * ssd_decays, ssd_scale_rows, ssd_transpose; ops_impl.h).
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
    const struct rops_scan2_args *a;
    const struct rops_kernels *k;
    struct ssd_layout l;
    float *scratch;
    size_t thread_floats; /* each thread's share of the scratch */
    int64_t hb;           /* heads whose states a thread holds at a time */
};

/* One chunk [pos, pos + len) of sequence s for the heads [h0, h1) whose transposed states are
 * at st (N x P each). */
static void ssd_chunk(const struct ssd_task *t, float *ws, int64_t s, int64_t pos, int64_t len,
                      int64_t h0, int64_t h1, float *st) {
    const struct rops_scan2_args *a = t->a;
    const struct rops_kernels *k = t->k;
    const struct ssd_layout *l = &t->l;
    const int64_t N = a->d_state, P = a->d_inner / a->n_head, Lp = l->Lp,
                  hpg = a->n_head / a->n_group;
    const int64_t tok0 = s * a->n_tok + pos; /* the chunk's first token in the call */
    const float *xr = a->xbc + tok0 * a->xbc_stride;
    float *bt = ws + l->bt, *gm = ws + l->gm, *mp = ws + l->mp, *xs = ws + l->xs;
    float *cs = ws + l->cs, *cl = ws + l->cl, *dts = ws + l->dts, *ein = ws + l->ein,
          *eout = ws + l->eout;
    float *const save_at = a->save ? a->save[tok0 + len - 1] : NULL;
    for (int64_t g = h0 / hpg; g <= (h1 - 1) / hpg; g++) {
        const float *B = xr + a->d_inner + g * N, *C = xr + a->d_inner + a->n_group * N + g * N;
        k->ssd_transpose(len, N, B, a->xbc_stride, bt, Lp); /* bt[n][s] = B_s[n] */
        const struct rops_ssd_mm cb = {.m = len,
                                       .n = len,
                                       .k = N,
                                       .a = C,
                                       .lda = a->xbc_stride,
                                       .b = bt,
                                       .ldb = Lp,
                                       .c = gm,
                                       .ldc = Lp,
                                       .tril_c = true};
        k->ssd_mm(&cb);
        const int64_t ha = g * hpg > h0 ? g * hpg : h0,
                      hz = (g + 1) * hpg < h1 ? (g + 1) * hpg : h1;
        for (int64_t h = ha; h < hz; h++) {
            float *sth = st + (size_t)(h - h0) * l->per_head;
            /* the segment sums' prefix, summed in double and kept as two floats: one float
               would lose the small segments' sums to cancellation once the prefix is large
               (a chunk of dt 20, A -8 reaches -10^4, an ulp of 10^-3 in every exponent) */
            double sum = 0.0;
            for (int64_t i = 0; i < Lp; i++) {
                dts[i] = i < len ? a->dt[(tok0 + i) * a->n_head + h] : 0.0f;
                sum += i < len ? (double)dts[i] * a->A[h] : 0.0;
                cs[i] = i < len ? (float)sum : 0.0f;
                cl[i] = i < len ? (float)(sum - cs[i]) : 0.0f;
            }
            k->ssd_decays(len, Lp, gm, cs, cl, dts, a->D[h], mp, ein, eout);
            const float *X = xr + h * P;
            float *Y = a->y + tok0 * a->d_inner + h * P;
            /* the state carried in, then the chunk's own tokens (D * x on M's diagonal) */
            const struct rops_ssd_mm inter = {.m = len,
                                              .n = P,
                                              .k = N,
                                              .a = C,
                                              .lda = a->xbc_stride,
                                              .b = sth,
                                              .ldb = P,
                                              .c = Y,
                                              .ldc = a->d_inner,
                                              .rowscale = ein};
            k->ssd_mm(&inter);
            const struct rops_ssd_mm intra = {.m = len,
                                              .n = P,
                                              .k = len,
                                              .a = mp,
                                              .lda = Lp,
                                              .b = X,
                                              .ldb = a->xbc_stride,
                                              .c = Y,
                                              .ldc = a->d_inner,
                                              .beta = 1.0f,
                                              .accumulate = true,
                                              .tril_a = true};
            k->ssd_mm(&intra);
            k->ssd_scale_rows(len, P, X, a->xbc_stride, eout, xs, P);
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
            k->ssd_mm(&upd);
            if (save_at) k->ssd_transpose(N, P, sth, P, save_at + h * P * N, N);
        }
    }
}

static void ssd_thread(void *arg, int ith, int nth) {
    const struct ssd_task *t = arg;
    const struct rops_scan2_args *a = t->a;
    const int64_t h0 = a->n_head * ith / nth, h1 = a->n_head * (ith + 1) / nth;
    const int64_t N = a->d_state, P = a->d_inner / a->n_head;
    float *ws = t->scratch + (size_t)ith * t->thread_floats, *st = ws + t->l.st;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t b0 = h0; b0 < h1; b0 += t->hb) {
            const int64_t b1 = h1 - b0 < t->hb ? h1 : b0 + t->hb;
            float *ss = a->state + s * a->d_inner * N; /* sequence s's state */
            for (int64_t h = b0; h < b1; h++)
                t->k->ssd_transpose(P, N, ss + h * P * N, N, st + (size_t)(h - b0) * t->l.per_head,
                                    P);
            for (int64_t pos = 0; pos < a->n_tok;) {
                /* up to L tokens, ending early at a token whose state is saved */
                int64_t end = pos + t->l.L < a->n_tok ? pos + t->l.L : a->n_tok;
                for (int64_t i = pos; a->save && i < end; i++)
                    if (a->save[s * a->n_tok + i]) end = i + 1;
                ssd_chunk(t, ws, s, pos, end - pos, b0, b1, st);
                pos = end;
            }
            for (int64_t h = b0; h < b1; h++)
                t->k->ssd_transpose(N, P, st + (size_t)(h - b0) * t->l.per_head, P, ss + h * P * N,
                                    N);
        }
}

size_t rops_ssm_scan2_chunked_scratch_bytes(int n_threads, int64_t n_tok, int64_t d_inner,
                                            int64_t d_state, int64_t n_head) {
    const int64_t nth = n_threads < 1 ? 1 : n_threads;
    const struct ssd_layout l = ssd_layout(n_tok < 1 ? 1 : n_tok, d_state, d_inner / n_head);
    const size_t heads = (size_t)((n_head + nth - 1) / nth);
    return (size_t)nth * (l.fixed + heads * l.per_head) * sizeof(float);
}

void rops_ssm_scan2_chunked(const struct rops_exec *ex, const struct rops_scan2_args *a) {
    if (a->n_seqs < 1 || a->n_tok < 1) return;
    struct ssd_task t = {.a = a,
                         .k = rops_kernels_of(ex->isa),
                         .l = ssd_layout(a->n_tok, a->d_state, a->d_inner / a->n_head)};
    /* threads as the plain scan takes them: a hand-off is worth ~4k multiply-adds */
    int64_t nth = ex->n_threads;
    const int64_t work = a->n_seqs * a->n_tok * a->d_inner * a->d_state;
    if (nth > work / 4096) nth = work / 4096;
    if (nth > a->n_head) nth = a->n_head;
    if (nth < 1) nth = 1;
    const int pool_nth = rpool_size(ex->pool);
    if (nth > pool_nth) nth = pool_nth;
    /* each thread's share of the scratch, in whole 16-float blocks */
    const size_t have = ex->scratch ? ex->scratch_bytes / sizeof(float) : 0;
    t.thread_floats = have / (size_t)nth & ~(size_t)15;
    const int64_t heads = (a->n_head + nth - 1) / nth;
    t.hb =
        t.thread_floats > t.l.fixed ? (int64_t)((t.thread_floats - t.l.fixed) / t.l.per_head) : 0;
    if (t.hb < 1) { /* not one head's state per thread: the plain scan */
        rops_ssm_scan2(ex, a);
        return;
    }
    if (t.hb > heads) t.hb = heads;
    t.scratch = ex->scratch;
    rpool_run(ex->pool, ssd_thread, &t, (int)nth);
}
