/*
 * Embeddings through the public API (recur_get_embeddings_seq / _ith, enum
 * recur_pooling_type), on random-weight models of tests/model/make_models.sh:
 *
 *   test_embed MODEL...
 *
 * For every pooling (none, mean, cls, last), four inputs of different lengths decoded in one
 * batch (their tokens interleaved, on four sequences) must give each input's embedding as
 * decoding it alone, within TOL = 1e-5 of the vectors' rms; the largest difference is printed.
 * The pooled vectors are also checked against pooling done here, in double, over the per-token
 * rows of a pooling-none context (mean, first, last): the library's pooling code is not used to
 * compute what it is compared with. Then the refusals: a MEAN / CLS batch on a sequence that
 * holds tokens, a sequence absent from the last decode, logits of a pooled context, pooling
 * without embeddings; and LAST over a text split in two decodes equals LAST of one decode.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "test.h"

#define N_IN 4
#define TOL  1e-5

static const int32_t lens[N_IN] = {5, 1, 13, 8};
static int32_t toks[N_IN][16];
static double worst_batch = 0, worst_pool = 0;

static struct recur_context *make_ctx(struct recur_model *m, uint32_t n_seq,
                                      enum recur_pooling_type pt) {
    struct recur_context_params p = recur_context_default_params();
    p.n_seq_max = n_seq;
    p.n_batch = 64;
    p.n_ubatch = 7; /* inputs split over several ubatches */
    p.embeddings = true;
    p.pooling_type = pt;
    p.n_threads = p.n_threads_batch = 2;
    struct recur_context *c = recur_init_from_model(m, p);
    if (!c) fprintf(stderr, "%s\n", recur_last_error());
    REQUIRE(c);
    return c;
}

/* Decodes inputs [first, first + n) in one batch, input k on sequence k - first (interleaved
 * round robin), every token asking for output. */
static int32_t decode_inputs(struct recur_context *c, int first, int n, int32_t row[N_IN][16]) {
    struct recur_batch b = recur_batch_init(64, 0, 1);
    REQUIRE(b.pos);
    int32_t next[N_IN] = {0};
    for (bool more = true; more;) {
        more = false;
        for (int k = first; k < first + n; k++) {
            if (next[k] >= lens[k]) continue;
            const recur_seq_id s = k - first;
            if (row) row[k][next[k]] = b.n_tokens;
            REQUIRE(recur_batch_add(&b, toks[k][next[k]], next[k], &s, 1, true) == 0);
            next[k]++;
            more = true;
        }
    }
    const int32_t rc = recur_decode(c, b);
    recur_batch_free(b);
    return rc;
}

static double rms(const float *a, int32_t n) {
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s / n);
}

static double max_diff(const float *a, const double *b, int32_t n) {
    double d = 0;
    for (int32_t i = 0; i < n; i++) {
        const double x = fabs((double)a[i] - b[i]);
        if (x > d) d = x;
    }
    return d;
}

static void check_model(const char *path) {
    struct recur_model *m = recur_model_load_from_file(path, recur_model_default_params());
    if (!m) fprintf(stderr, "%s\n", recur_last_error());
    REQUIRE(m);
    const int32_t E = recur_model_n_embd(m), V = recur_model_n_vocab(m);
    srand(7);
    for (int k = 0; k < N_IN; k++)
        for (int32_t i = 0; i < lens[k]; i++) toks[k][i] = rand() % V;

    /* the per-token rows of every input, alone and batched (pooling none) */
    static double tok[N_IN][16][1024];
    REQUIRE(E <= 1024);
    struct recur_context *none_all = make_ctx(m, N_IN, RECUR_POOLING_TYPE_NONE),
                         *none_one = make_ctx(m, 1, RECUR_POOLING_TYPE_NONE);
    int32_t row[N_IN][16];
    CHECK_MSG(decode_inputs(none_all, 0, N_IN, row) == 0, "%s", recur_last_error());
    for (int k = 0; k < N_IN; k++) {
        recur_memory_clear(recur_get_memory(none_one), false);
        int32_t row1[N_IN][16];
        CHECK_MSG(decode_inputs(none_one, k, 1, row1) == 0, "%s", recur_last_error());
        for (int32_t i = 0; i < lens[k]; i++) {
            const float *alone = recur_get_embeddings_ith(none_one, row1[k][i]);
            const float *multi = recur_get_embeddings_ith(none_all, row[k][i]);
            REQUIRE(alone && multi);
            for (int32_t e = 0; e < E; e++) tok[k][i][e] = alone[e];
            const double d = max_diff(multi, tok[k][i], E) / fmax(1.0, rms(alone, E));
            if (d > worst_batch) worst_batch = d;
            CHECK_MSG(d < TOL, "%s none: input %d token %d batched differs by %g", path, k, i, d);
        }
    }
    /* no pooled answer in a pooling-none context */
    CHECK(recur_get_embeddings_seq(none_all, 0) == NULL);
    CHECK_ERR("pooling_type is none");

    const enum recur_pooling_type pools[] = {RECUR_POOLING_TYPE_MEAN, RECUR_POOLING_TYPE_CLS,
                                             RECUR_POOLING_TYPE_LAST};
    for (size_t q = 0; q < sizeof pools / sizeof pools[0]; q++) {
        const enum recur_pooling_type pt = pools[q];
        struct recur_context *all = make_ctx(m, N_IN, pt), *one = make_ctx(m, 1, pt);
        CHECK_MSG(decode_inputs(all, 0, N_IN, NULL) == 0, "%s", recur_last_error());
        for (int k = 0; k < N_IN; k++) {
            recur_memory_clear(recur_get_memory(one), false);
            CHECK_MSG(decode_inputs(one, k, 1, NULL) == 0, "%s", recur_last_error());
            const float *alone = recur_get_embeddings_seq(one, 0);
            const float *multi = recur_get_embeddings_seq(all, k);
            REQUIRE(alone && multi);
            double ref[1024], alone_d[1024];
            for (int32_t e = 0; e < E; e++) {
                alone_d[e] = alone[e];
                if (pt == RECUR_POOLING_TYPE_MEAN) {
                    double s = 0;
                    for (int32_t i = 0; i < lens[k]; i++) s += tok[k][i][e];
                    ref[e] = s / lens[k];
                } else {
                    ref[e] = tok[k][pt == RECUR_POOLING_TYPE_CLS ? 0 : lens[k] - 1][e];
                }
            }
            const double scale = fmax(1.0, rms(alone, E));
            const double d = max_diff(multi, alone_d, E) / scale;
            const double dp = max_diff(alone, ref, E) / scale;
            if (d > worst_batch) worst_batch = d;
            if (dp > worst_pool) worst_pool = dp;
            CHECK_MSG(d < TOL, "%s pooling %d: input %d batched differs by %g", path, pt, k, d);
            CHECK_MSG(dp < TOL, "%s pooling %d: input %d differs from the pooled rows by %g", path,
                      pt, k, dp);
        }
        /* a pooled context: no logits, no per-token rows, no sequence that was not there */
        CHECK(recur_get_logits_ith(all, 0) == NULL);
        CHECK_ERR("computes no logits");
        CHECK(recur_get_logits(all) == NULL);
        CHECK(recur_get_embeddings_ith(all, 0) == NULL);
        CHECK_ERR("recur_get_embeddings_seq");
        CHECK(recur_get_embeddings_seq(one, 1) == NULL); /* n_seq_max 1 */
        CHECK_ERR("sequences 0 .. 0");
        CHECK(recur_get_embeddings_seq(all, -1) == NULL);
        /* a second decode of input 0 alone on sequence 0: sequences 1..3 had no token */
        recur_memory_clear(recur_get_memory(all), false);
        CHECK(decode_inputs(all, 0, 1, NULL) == 0);
        CHECK(recur_get_embeddings_seq(all, 0) != NULL);
        CHECK(recur_get_embeddings_seq(all, 2) == NULL);
        CHECK_ERR("sequence 2 had no token in the last decode");
        /* the same sequence again without clearing it: MEAN and CLS refuse (LAST goes on:
           below, over a text split in two decodes) */
        if (pt != RECUR_POOLING_TYPE_LAST) {
            CHECK(decode_inputs(all, 0, 1, NULL) == -1);
            CHECK_ERR("already holds positions up to 4");
            CHECK(recur_get_embeddings_seq(all, 0) == NULL); /* a failed decode: none */
            CHECK(recur_memory_seq_pos_max(recur_get_memory(all), 0) == 4); /* unchanged */
        }
        recur_free(all);
        recur_free(one);
    }

    /* LAST over input 2 split in two decodes is LAST of the whole text */
    {
        struct recur_context *c = make_ctx(m, 1, RECUR_POOLING_TYPE_LAST);
        const recur_seq_id s0 = 0;
        for (int part = 0; part < 2; part++) {
            struct recur_batch b = recur_batch_init(16, 0, 1);
            REQUIRE(b.pos);
            const int32_t from = part ? 6 : 0, to = part ? lens[2] : 6;
            for (int32_t i = from; i < to; i++)
                REQUIRE(recur_batch_add(&b, toks[2][i], i, &s0, 1, false) == 0);
            CHECK(recur_decode(c, b) == 0);
            recur_batch_free(b);
        }
        const float *e = recur_get_embeddings_seq(c, 0);
        REQUIRE(e);
        const double d = max_diff(e, tok[2][lens[2] - 1], E) / fmax(1.0, rms(e, E));
        CHECK_MSG(d < TOL, "%s last over two decodes differs by %g", path, d);
        recur_free(c);
    }

    /* pooling without embeddings, and a pooling that does not exist */
    struct recur_context_params p = recur_context_default_params();
    p.pooling_type = RECUR_POOLING_TYPE_MEAN;
    CHECK(recur_init_from_model(m, p) == NULL);
    CHECK_ERR("needs embeddings = true");
    p.embeddings = true;
    p.pooling_type = (enum recur_pooling_type)4;
    CHECK(recur_init_from_model(m, p) == NULL);
    CHECK_ERR("pooling_type must be");
    p.embeddings = false;
    p.pooling_type = RECUR_POOLING_TYPE_NONE;
    struct recur_context *plain = recur_init_from_model(m, p);
    REQUIRE(plain);
    CHECK(recur_get_embeddings_seq(plain, 0) == NULL);
    CHECK_ERR("without embeddings");
    CHECK(recur_pooling_type(plain) == RECUR_POOLING_TYPE_NONE);
    recur_free(plain);
    CHECK(recur_get_embeddings_seq(NULL, 0) == NULL);

    recur_free(none_all);
    recur_free(none_one);
    recur_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_embed MODEL...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) check_model(argv[i]);
    printf("test_embed: batched vs alone: max difference %.3g of the rms; pooled vs pooling "
           "the per-token rows in double: %.3g\n",
           worst_batch, worst_pool);
    return test_finish("test_embed");
}
