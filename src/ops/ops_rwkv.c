/*
 * RWKV's kernels: LayerNorm with bias, and the two WKV recurrences (docs/rwkv6.md (14),
 * docs/rwkv7.md (14)), each head of each sequence a head_size x head_size state.
 *
 * The scans share the heads out among the threads (heads are independent, and a head's state,
 * 16 KiB at head_size 64, stays in the core's L1/L2 cache across the tokens of a ubatch). A
 * token of a head is one call of the instruction set's wkv6_head / wkv7_head kernel
 * (ops_impl.h).
 */
#include "ops_impl.h"

#include <math.h>
#include <string.h>

void rops_layernorm(enum rops_isa isa, const float *x, const float *w, const float *b, int64_t k,
                    float eps, float *out) {
    rops_kernels_of(isa)->layernorm(x, w, b, k, eps, out);
}

/* ---- the scans over a ubatch ------------------------------------------------------------- */

struct wkv_task {
    const struct rops_wkv_args *a;
    const struct rops_kernels *k;
    bool v7;
};

static void wkv_thread(void *arg, int ith, int nth) {
    const struct wkv_task *t = arg;
    const struct rops_wkv_args *a = t->a;
    const int64_t hs = a->head_size, H = a->n_embd / hs, E = a->n_embd;
    const int64_t h0 = H * ith / nth, h1 = H * (ith + 1) / nth;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t0 = s * a->n_tok, tk = t0; tk < t0 + a->n_tok; tk++) {
            const int64_t row = tk * E;
            float *dst = a->save ? a->save[tk] : NULL;
            for (int64_t h = h0; h < h1; h++) {
                float *S = a->state + s * E * hs + h * hs * hs;
                const int64_t o = row + h * hs;
                if (!t->v7)
                    t->k->wkv6_head(S, a->r + o, a->k + o, a->v + o, a->w + o, a->u + h * hs, hs,
                                    a->y + o);
                else
                    t->k->wkv7_head(S, a->r + o, a->w + o, a->k + o, a->v + o, a->a + o, a->b + o,
                                    hs, a->y + o);
                if (dst) memcpy(dst + h * hs * hs, S, sizeof(float) * (size_t)(hs * hs));
            }
        }
}

static void wkv_run(const struct rops_exec *ex, const struct rops_wkv_args *a, bool v7) {
    struct wkv_task t = {a, rops_kernels_of(ex->isa), v7};
    const int64_t H = a->n_embd / a->head_size;
    int64_t nth = ex->n_threads;
    /* a thread's share must outweigh the hand-off: ~4096 state updates at least */
    const int64_t work = a->n_seqs * a->n_tok * a->n_embd * a->head_size;
    if (nth > work / 4096) nth = work / 4096;
    if (nth > H) nth = H;
    if (nth < 1) nth = 1;
    rpool_run(ex->pool, wkv_thread, &t, (int)nth);
}

void rops_wkv6(const struct rops_exec *ex, const struct rops_wkv_args *a) {
    wkv_run(ex, a, false);
}

void rops_wkv7(const struct rops_exec *ex, const struct rops_wkv_args *a) {
    wkv_run(ex, a, true);
}
