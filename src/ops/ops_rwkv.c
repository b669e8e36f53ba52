/*
 * RWKV's kernels: LayerNorm with bias, and the two WKV recurrences (docs/rwkv6.md (14),
 * docs/rwkv7.md (14)), each head of each sequence a head_size x head_size state.
 *
 * The scans share the heads out among the threads (heads are independent, and a head's state,
 * 16 KiB at head_size 64, stays in the core's L1 cache across the tokens of a ubatch). A
 * sequence's tokens of a head are one call of the instruction set's wkv6_run / wkv7_run kernel
 * (ops_impl.h; the vector ones in x86/wkv.h).
 */
#include "ops_impl.h"

#include <math.h>

void rops_layernorm(enum rops_isa isa, const float *x, const float *w, const float *b, int64_t k,
                    float eps, float *out) {
    rops_kernels_of(isa)->layernorm(x, w, b, k, eps, out);
}

/* ---- the scans over a ubatch ------------------------------------------------------------- */

struct wkv_task {
    const struct rops_wkv_args *a;
    const struct rops_kernels *k;
    bool v7, one_order;
    const struct rpool *pool; /* the threads' heads (rpool_share) */
};

static void wkv_thread(void *arg, int ith, int nth) {
    const struct wkv_task *t = arg;
    const struct rops_wkv_args *a = t->a;
    const int64_t hs = a->head_size, H = a->n_embd / hs, E = a->n_embd;
    const int64_t h0 = rpool_share(t->pool, ith, nth, H),
                  h1 = rpool_share(t->pool, ith + 1, nth, H);
    /* a head's tokens one after the other: its state stays in L1 over the run */
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t h = h0; h < h1; h++) {
            const int64_t o = s * a->n_tok * E + h * hs;
            const struct rops_wkv_run run = {.S = a->state + s * E * hs + h * hs * hs,
                                             .r = a->r + o,
                                             .k = a->k + o,
                                             .v = a->v + o,
                                             .w = a->w + o,
                                             .a = t->v7 ? a->a + o : NULL,
                                             .b = t->v7 ? a->b + o : NULL,
                                             .u = t->v7 ? NULL : a->u + h * hs,
                                             .ld = E,
                                             .n = a->n_tok,
                                             .hs = hs,
                                             .y = a->y + o,
                                             .save = a->save ? a->save + s * a->n_tok : NULL,
                                             .save_off = h * hs * hs,
                                             .one_order = t->one_order};
            if (t->v7)
                t->k->wkv7_run(&run);
            else
                t->k->wkv6_run(&run);
        }
}

static void wkv_run(const struct rops_exec *ex, const struct rops_wkv_args *a, bool v7) {
    struct wkv_task t = {a, rops_kernels_of(ex->isa), v7, ex->one_order, ex->pool};
    const int64_t H = a->n_embd / a->head_size;
    int64_t nth = ex->n_threads;
    /* a thread's share must outweigh the hand-off: ~4096 state updates at least */
    const int64_t work = a->n_seqs * a->n_tok * a->n_embd * a->head_size;
    if (nth > work / 4096) nth = work / 4096;
    if (nth > H) nth = H;
    if (nth < 1) nth = 1;
    rpool_run_keyed(ex->pool, wkv_thread, &t, (int)nth, a->state); /* a layer's states */
}

void rops_wkv6(const struct rops_exec *ex, const struct rops_wkv_args *a) {
    wkv_run(ex, a, false);
}

void rops_wkv7(const struct rops_exec *ex, const struct rops_wkv_args *a) {
    wkv_run(ex, a, true);
}
