/*
 * Helpers of the tests that decode models through the public API (test_model.c,
 * test_rollback.c): contexts as ctest configures them, decoding a run of tokens on one
 * sequence, logits of a text decoded alone, token histories. Include after test.h.
 */
#ifndef RECUR_TEST_MODEL_UTIL_H
#define RECUR_TEST_MODEL_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "recur.h"

static unsigned long long rng = 42;
/* the model under test and its vocabulary size (set by main) */
static struct recur_model *model;

/* "Equal" logits: a relative error under 1e-5 (the same arithmetic in another grouping of
 * tokens may round differently once kernels are vectorised or threaded). A hybrid model's
 * attention rows rounded to f16 or q8_0 (RECUR_TEST_ATTN_TYPE; f32 by default) turn such a
 * last-bit difference into a step of their rounding now and then: 1e-3 there (the worst
 * measured over the battery, nemotron_h and falcon-h1 at f16: 1.3e-4). */
static double same_tol(void) {
    const char *at = getenv("RECUR_TEST_ATTN_TYPE");
    if (model && at && strcmp(at, "f32") != 0 && recur_model_is_hybrid(model)) return 1e-3;
    return 1e-5;
}
#define SAME same_tol()
static int32_t V;

static double rel_err(const float *a, const float *b, int32_t n) {
    double max = 0, ss = 0;
    for (int32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > max || d != d) max = d != d ? INFINITY : d;
        ss += (double)b[i] * b[i];
    }
    double rms = sqrt(ss / n);
    return rms > 0 ? max / rms : max;
}

/* A context with p's rollback settings (NULL: defaults), n_seq sequences, n_ubatch. */
static struct recur_context *new_ctx_with(struct recur_model *m, uint32_t n_seq, uint32_t n_ubatch,
                                          const struct recur_context_params *base) {
    struct recur_context_params p = base ? *base : recur_context_default_params();
    p.n_seq_max = n_seq;
    p.n_batch = 512;
    p.n_ubatch = n_ubatch;
    /* ctest runs these tests with 1 thread and with several (RECUR_TEST_THREADS), and on
       every kernel path (RECUR_ISA: scalar, avx2, avxvnni, avx512) */
    const char *threads = getenv("RECUR_TEST_THREADS");
    if (threads) p.n_threads = p.n_threads_batch = atoi(threads);
    /* a hybrid model's attention rows: f16 unless RECUR_TEST_ATTN_TYPE says f32 or q8_0 (the
       reference comparisons take f32: the reference keeps exact K and V) */
    const char *at = getenv("RECUR_TEST_ATTN_TYPE");
    if (at) {
        REQUIRE(!strcmp(at, "f32") || !strcmp(at, "f16") || !strcmp(at, "q8_0"));
        p.attn_type_k = p.attn_type_v = !strcmp(at, "f32")   ? RECUR_TYPE_F32
                                        : !strcmp(at, "f16") ? RECUR_TYPE_F16
                                                             : RECUR_TYPE_Q8_0;
    }
    struct recur_context *ctx = recur_init_from_model(m, p);
    if (!ctx) fprintf(stderr, "recur_init_from_model: %s\n", recur_last_error());
    REQUIRE(ctx);
    return ctx;
}

static struct recur_context *new_ctx(struct recur_model *m, uint32_t n_seq, uint32_t n_ubatch) {
    return new_ctx_with(m, n_seq, n_ubatch, NULL);
}

/* Decodes tokens on seq at the positions that follow; logits for all (all) or the last. */
static int32_t decode_seq(struct recur_context *ctx, int32_t seq, const int32_t *tokens, int32_t n,
                          bool all) {
    struct recur_batch b = recur_batch_init(n, 0, 1);
    REQUIRE(b.pos);
    int32_t start = recur_memory_seq_pos_max(recur_get_memory(ctx), seq) + 1;
    for (int32_t i = 0; i < n; i++)
        REQUIRE(recur_batch_add(&b, tokens[i], start + i, &seq, 1, all || i == n - 1) == 0);
    int32_t ret = recur_decode(ctx, b);
    recur_batch_free(b);
    return ret;
}

/* Logits of every token of tokens, decoded alone in a fresh context at positions pos (NULL:
 * 0 .. n-1) (n x n_vocab). */
static float *alone_at(struct recur_model *m, const int32_t *tokens, const int32_t *pos,
                       int32_t n) {
    const int32_t nv = recur_model_n_vocab(m);
    struct recur_context *ctx = new_ctx(m, 1, 512);
    float *out = malloc(sizeof(float) * (size_t)nv * (size_t)n);
    REQUIRE(out);
    /* a batch per run of consecutive positions: a batch's tokens of a sequence follow on */
    struct recur_batch b = recur_batch_init(n, 0, 1);
    REQUIRE(b.pos);
    const int32_t seq = 0;
    for (int32_t i = 0, start = 0; i < n; i++) {
        const int32_t at = pos ? pos[i] : i;
        REQUIRE(recur_batch_add(&b, tokens[i], at, &seq, 1, 1) == 0);
        if (i + 1 < n && (pos ? pos[i + 1] : i + 1) == at + 1) continue;
        CHECK_MSG(recur_decode(ctx, b) == 0, "%s", recur_last_error());
        for (int32_t j = start; j <= i; j++) {
            const float *l = recur_get_logits_ith(ctx, j - start);
            REQUIRE(l);
            memcpy(out + (size_t)j * nv, l, sizeof(float) * (size_t)nv);
        }
        b.n_tokens = 0;
        start = i + 1;
    }
    recur_batch_free(b);
    recur_free(ctx);
    return out;
}

static inline float *alone(struct recur_model *m, const int32_t *tokens, int32_t n) {
    return alone_at(m, tokens, NULL, n);
}

static void random_tokens(int32_t *t, int32_t n, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++) t[i] = test_rand_int(&rng, n_vocab);
}

/* A sequence's history, to decode it alone and compare: its tokens and their positions. */
struct hist {
    int32_t t[256];
    int32_t p[256];
    int32_t n;
};

/* Appends tokens at the positions after the last (0 for the first). */
static void hist_add(struct hist *h, const int32_t *t, int32_t n) {
    REQUIRE(h->n + n <= 256);
    memcpy(h->t + h->n, t, sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) h->p[h->n + i] = h->n + i ? h->p[h->n + i - 1] + 1 : 0;
    h->n += n;
}

/* The positions in [p0, p1) (p1 < 0: to the end) plus delta (d = 0) or divided by d. */
static inline void hist_shift(struct hist *h, int32_t p0, int32_t p1, int32_t delta, int d) {
    for (int32_t i = 0; i < h->n; i++)
        if (h->p[i] >= p0 && (p1 < 0 || h->p[i] < p1)) h->p[i] = d ? h->p[i] / d : h->p[i] + delta;
}

/* The last logits of seq in ctx equal decoding its history alone, within tol. */
static void check_alone_within(struct recur_context *ctx, int32_t row, const struct hist *h,
                               const char *what, double tol) {
    float *ref = alone_at(model, h->t, h->p, h->n);
    double e = rel_err(recur_get_logits_ith(ctx, row), ref + (size_t)(h->n - 1) * V, V);
    CHECK_MSG(e < tol, "%s: %.3g", what, e);
    free(ref);
}

static void check_alone(struct recur_context *ctx, int32_t row, const struct hist *h,
                        const char *what) {
    check_alone_within(ctx, row, h, what, SAME);
}

#endif
