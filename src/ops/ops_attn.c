/*
 * The attention layers' kernels: the rotary position embedding, and causal attention with
 * grouped kv heads over paged key/value rows (ops.h).
 *
 * rope is portable code here: per token it takes n_rot / 2 cosines and sines, a small part of a
 * layer next to its products. Attention shares its (query, kv head) units out among the threads,
 * each thread taking every nth query: a prompt's later queries see more keys, so contiguous
 * blocks of queries would load the last thread most. The kernels are the instruction set's
 * attn_rows (ops_scalar.c, x86/attn.h).
 */
#include "ops_impl.h"

#include <math.h>

/* ---- rotary position embedding ------------------------------------------------------------- */

struct rope_task {
    const struct rops_rope_args *a;
};

/* Pairs whose frequencies a thread takes at a time (the frequencies do not depend on the
 * position: one pow per pair and call, not per token). */
#define ROPE_FB 128

static void rope_tokens(const struct rops_rope_args *a, int64_t t0, int64_t t1) {
    const int64_t half = a->n_rot / 2;
    /* NORMAL pairs (2i, 2i + 1), NEOX (i, i + n_rot / 2) */
    const bool neox = a->mode == ROPS_ROPE_NEOX;
    const int64_t step = neox ? 1 : 2, other = neox ? half : 1;
    double freq[ROPE_FB];
    for (int64_t i0 = 0; i0 < half; i0 += ROPE_FB) {
        const int64_t ni = half - i0 < ROPE_FB ? half - i0 : ROPE_FB;
        for (int64_t i = 0; i < ni; i++)
            freq[i] = (double)a->freq_scale *
                      pow((double)a->freq_base, -2.0 * (double)(i0 + i) / (double)a->n_rot);
        for (int64_t t = t0; t < t1; t++) {
            const double p = (double)a->pos[t];
            float *row = a->x + t * a->stride;
            for (int64_t i = 0; i < ni; i++) {
                const double theta = p * freq[i];
                const float c = (float)cos(theta), s = (float)sin(theta);
                for (int64_t h = 0; h < a->n_head; h++) {
                    float *x = row + h * a->head_dim + (i0 + i) * step;
                    const float x0 = x[0], x1 = x[other];
                    x[0] = x0 * c - x1 * s;
                    x[other] = x0 * s + x1 * c;
                }
            }
        }
    }
}

static void rope_thread(void *arg, int ith, int nth) {
    const struct rops_rope_args *a = ((const struct rope_task *)arg)->a;
    rope_tokens(a, a->n_tok * ith / nth, a->n_tok * (ith + 1) / nth);
}

void rops_rope(const struct rops_exec *ex, const struct rops_rope_args *a) {
    struct rope_task t = {a};
    int64_t nth = ex->n_threads;
    /* a thread's share must outweigh the hand-off: ~16k rotated pairs */
    const int64_t work = a->n_tok * a->n_head * (a->n_rot / 2);
    if (nth > work / 16384) nth = work / 16384;
    if (nth > a->n_tok) nth = a->n_tok;
    if (nth < 1) nth = 1;
    rpool_run(ex->pool, rope_thread, &t, (int)nth);
}

/* ---- attention ----------------------------------------------------------------------------- */

struct attn_task {
    const struct rops_attn_args *a;
    const struct rops_kernels *k;
};

static void attn_thread(void *arg, int ith, int nth) {
    const struct attn_task *t = arg;
    const struct rops_attn_args *a = t->a;
    if (a->n_q < nth) { /* generation: the kv heads of the few queries, in blocks */
        const int64_t n = a->n_q * a->n_head_kv;
        t->k->attn_rows(a, n * ith / nth, n * (ith + 1) / nth);
        return;
    }
    for (int64_t i = ith; i < a->n_q; i += nth)
        t->k->attn_rows(a, i * a->n_head_kv, (i + 1) * a->n_head_kv);
}

void rops_attention(const struct rops_exec *ex, const struct rops_attn_args *a) {
    struct attn_task t = {a, rops_kernels_of(ex->isa)};
    if (a->n_q <= 0) return;
    int64_t nth = ex->n_threads;
    /* a thread's share must outweigh the hand-off: ~64k multiply-adds (an upper bound: the
       masks may hide most keys) */
    const int64_t work = a->n_q * a->n_head * a->n_kv * a->head_dim * 2;
    if (nth > work / 65536) nth = work / 65536;
    if (nth > a->n_q * a->n_head_kv) nth = a->n_q * a->n_head_kv;
    if (nth < 1) nth = 1;
    rpool_run(ex->pool, attn_thread, &t, (int)nth);
}
