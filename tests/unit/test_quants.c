/*
 * The block types against ggml's own output (tests/data/quants/, made by llama.cpp v0.5.0):
 *  - every type's dequantization of ggml's blocks equals ggml's floats bit for bit;
 *  - the traits (block size, bytes) agree with the manifest;
 *  - q8_K quantization of the input equals ggml's q8_K blocks byte for byte;
 *  - q8_1 quantization matches ggml's reference rounding (checked against the q8_0 vectors,
 *    whose quants and scale q8_1 shares).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/ops_impl.h"
#include "ops/ops_quants.h"
#include "file_util.h"
#include "ops_util.h"
#include "pool/pool.h"
#include "test.h"

#define ROWS 8
#define COLS 512

/* tests/data/quants/NAME, whole, its size in *len; NULL (and a message) when it cannot be read. */
static void *slurp(const char *name, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/quants/%s", RECUR_TEST_DATA, name);
    void *buf = file_read(path, len);
    if (!buf) fprintf(stderr, "cannot read %s\n", path);
    return buf;
}

struct manifest_row {
    char name[16];
    int id;
    int64_t block;
    size_t block_bytes, row_bytes;
};

/* The manifest's rows (comment lines skipped); returns how many were read. */
static int read_manifest(struct manifest_row *rows, int max) {
    size_t len;
    char *text = slurp("MANIFEST.txt", &len);
    REQUIRE(text != NULL);
    char *buf = realloc(text, len + 1);
    REQUIRE(buf != NULL);
    buf[len] = '\0';
    int n = 0;
    for (char *line = strtok(buf, "\n"); line && n < max; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        struct manifest_row *r = &rows[n];
        long long block;
        if (sscanf(line, "%15s %d %lld %zu %zu", r->name, &r->id, &block, &r->block_bytes,
                   &r->row_bytes) == 5) {
            r->block = block;
            n++;
        }
    }
    free(buf);
    return n;
}

static void test_dequant_bit_exact(void) {
    struct manifest_row rows[32];
    const int n = read_manifest(rows, 32);
    CHECK_MSG(n == 13, "manifest rows: %d", n);
    for (int t = 0; t < n; t++) {
        const struct manifest_row *m = &rows[t];
        const struct rops_qtraits *tr = rops_qtraits_of((enum rops_type)m->id);
        CHECK_MSG(tr != NULL, "%s (%d) has no traits", m->name, m->id);
        if (!tr) continue;
        CHECK_MSG(strcmp(tr->name, m->name) == 0, "%s named %s", m->name, tr->name);
        CHECK_MSG(tr->block == m->block &&
                      tr->block_bytes * (size_t)(COLS / tr->block) == m->row_bytes,
                  "%s: block %lld of %zu bytes, manifest %lld of %zu", m->name,
                  (long long)tr->block, tr->block_bytes, (long long)m->block, m->block_bytes);
        char qname[32], fname[32];
        snprintf(qname, sizeof qname, "%.15s.q", m->name);
        snprintf(fname, sizeof fname, "%.15s.f32", m->name);
        size_t qlen, flen;
        unsigned char *q = slurp(qname, &qlen);
        float *want = slurp(fname, &flen);
        REQUIRE(q && want);
        CHECK_MSG(qlen == m->row_bytes * ROWS && flen == sizeof(float) * ROWS * COLS,
                  "%s: %zu and %zu bytes", m->name, qlen, flen);
        float got[COLS];
        int bad = 0;
        for (int r = 0; r < ROWS && qlen == m->row_bytes * ROWS; r++) {
            tr->to_f32(q + (size_t)r * m->row_bytes, got, COLS);
            for (int c = 0; c < COLS; c++)
                if (memcmp(&got[c], &want[r * COLS + c], sizeof(float)) != 0) {
                    if (bad++ < 3)
                        fprintf(stderr, "%s row %d col %d: %.9g, ggml %.9g\n", m->name, r, c,
                                got[c], want[r * COLS + c]);
                }
        }
        CHECK_MSG(bad == 0, "%s: %d values differ from ggml's", m->name, bad);
        free(q);
        free(want);
    }
}

/* Every table's quantize_q8_K against ggml's blocks of the shared vectors, then against the
 * portable quantizer bit for bit on blocks made to catch a vector path out: the largest
 * magnitude twice with both signs (the first sets the scale's sign), values on and beside half
 * steps, an all-zero block, zeros of both signs, subnormals, a block of one nonzero value. */
static void test_q8_K_quantize(void) {
    size_t xlen, qlen;
    float *x = slurp("input.f32", &xlen);
    unsigned char *want = slurp("q8_K.q", &qlen);
    REQUIRE(x && want && xlen == sizeof(float) * ROWS * COLS);
    struct rops_block_q8_K got[ROWS * COLS / ROPS_QK_K];
    REQUIRE(qlen == sizeof got);
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++) {
        rops_kernels_of(isas[ii])->quantize_q8_K(x, got, ROWS * COLS);
        int bad = 0;
        for (size_t b = 0; b < sizeof got / sizeof got[0]; b++) {
            const struct rops_block_q8_K *w = (const struct rops_block_q8_K *)want + b;
            /* ggml leaves an all-zero block's sums unwritten: compare them where d != 0 */
            const size_t cmp =
                w->d == 0.0f ? offsetof(struct rops_block_q8_K, bsums) : sizeof got[b];
            if (memcmp(&got[b], w, cmp) != 0 && bad++ < 3)
                fprintf(stderr, "%s: q8_K block %zu differs (d %.9g, ggml %.9g)\n",
                        rops_isa_name(isas[ii]), b, got[b].d, w->d);
        }
        CHECK_MSG(bad == 0, "%s: %d q8_K blocks differ from ggml's", rops_isa_name(isas[ii]), bad);
    }
    enum { NB = 12 };
    static float xs[NB * ROPS_QK_K];
    static struct rops_block_q8_K ref[NB], vec[NB];
    uint32_t seed = 777;
    for (int rep = 0; rep < 30; rep++) {
        for (int i = 0; i < NB * ROPS_QK_K; i++) {
            seed = seed * 1664525u + 1013904223u;
            xs[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (rep % 4 == 0 ? 3e4f : 2.0f);
        }
        for (int b = 0; b < NB; b++) {
            float *xb = xs + ROPS_QK_K * b;
            const int at = (rep * 37 + b * 11) % ROPS_QK_K, at2 = (at + 1 + b * 7) % ROPS_QK_K;
            switch (b % 6) {
            case 1: /* the same magnitude twice, signs opposite: the first one counts */
                xb[at] = 1e5f;
                xb[at2] = -1e5f;
                break;
            case 2: { /* the max at 127 steps, the rest on half steps or one ulp beside */
                xb[0] = -127.0f * (float)(rep + 1);
                const float d = (float)(rep + 1);
                for (int j = 1; j < ROPS_QK_K; j++) {
                    const float half = ((float)(j % 13) - 6.5f) * d;
                    xb[j] = j % 3 ? half : nextafterf(half, j % 2 ? 1e9f : -1e9f);
                }
                break;
            }
            case 3:
                memset(xb, 0, ROPS_QK_K * sizeof(float));
                break;
            case 4: /* zeros of both signs and subnormals around one normal value */
                for (int j = 0; j < ROPS_QK_K; j++)
                    xb[j] = j % 3 == 0 ? -0.0f : (float)(j % 5) * 1e-41f;
                xb[at] = -3e-38f;
                break;
            case 5:
                memset(xb, 0, ROPS_QK_K * sizeof(float));
                xb[at] = 0.25f;
                break;
            }
        }
        rops_quantize_q8_K(xs, ref, NB * ROPS_QK_K);
        const int pos1 = (rep * 37 + 11) % ROPS_QK_K, neg1 = (pos1 + 8) % ROPS_QK_K;
        CHECK((ref[1].d < 0.0f) == (pos1 < neg1)); /* d = -max / 127 */
        for (int ii = 0; ii < n_isas; ii++) {
            memset(vec, 0x5a, sizeof vec);
            rops_kernels_of(isas[ii])->quantize_q8_K(xs, vec, NB * ROPS_QK_K);
            int bad = 0;
            for (int b = 0; b < NB; b++) {
                const bool differ = memcmp(&ref[b], &vec[b], sizeof ref[b]) != 0;
                if (differ && bad++ < 2)
                    fprintf(stderr, "%s: block %d: d %.9g / %.9g, qs[0] %d / %d\n",
                            rops_isa_name(isas[ii]), b, ref[b].d, vec[b].d, ref[b].qs[0],
                            vec[b].qs[0]);
            }
            CHECK_MSG(bad == 0, "%s rep %d: %d q8_K blocks differ from the portable quantizer",
                      rops_isa_name(isas[ii]), rep, bad);
        }
    }
    /* a planted change of the rounding shows: round half away from zero at some exact half */
    struct rops_block_q8_K one;
    float half[ROPS_QK_K] = {0};
    half[0] = -127.0f; /* iscale = -127 / x_m = 1: x itself is rounded, x_m to -127 */
    half[1] = 2.5f;
    half[2] = -3.5f;
    rops_quantize_q8_K(half, &one, ROPS_QK_K);
    CHECK(one.qs[0] == -127 && one.qs[1] == 2 && one.qs[2] == -4 && one.d == 1.0f);
    CHECK(one.bsums[0] == -127 + 2 - 4 && one.bsums[1] == 0);
    free(x);
    free(want);
}

static void test_q8_1_quantize(void) {
    size_t xlen, qlen;
    float *x = slurp("input.f32", &xlen);
    unsigned char *want = slurp("q8_0.q", &qlen);
    REQUIRE(x && want);
    const int nb = ROWS * COLS / ROPS_QK;
    struct rops_block_q8_1 *got = malloc(sizeof *got * (size_t)nb);
    REQUIRE(got);
    rops_quantize_q8_1(x, got, ROWS * COLS);
    int bad = 0;
    for (int b = 0; b < nb; b++) {
        const struct rops_block_q8_0 *w = (const struct rops_block_q8_0 *)want + b;
        int sum = 0;
        for (int j = 0; j < ROPS_QK; j++) sum += w->qs[j];
        const float s = rcore_f16_to_f32(got[b].s), d = rcore_f16_to_f32(w->d);
        /* s = d * sum rounded to f16 (d before its own rounding: within f16 precision) */
        const int ok = got[b].d == w->d && memcmp(got[b].qs, w->qs, ROPS_QK) == 0 &&
                       fabsf(s - d * (float)sum) <= 2e-3f * fabsf(d * (float)sum) + 1e-30f;
        if (!ok && bad++ < 3) fprintf(stderr, "q8_1 block %d differs from q8_0's\n", b);
    }
    CHECK_MSG(bad == 0, "%d q8_1 blocks differ", bad);
    free(got);
    free(x);
    free(want);
}

/* sum of squared differences of a and b over n values */
static double sq_err(const float *a, const float *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return e;
}

/* recur's quantizers: the legacy types write ggml's bytes; the K-quants' error (RMS against the
 * input, over all 8 rows and per row) is no worse than ggml's own blocks' (ggml's floats), whose
 * 8 rows are the README's hard cases: tiny, huge, outliers, all positive, an all-zero super-block
 * and exact ramps. */
static void test_quantizers(void) {
    static const struct {
        enum rops_type type;
        const char *name;
        int same_bytes;
    } types[] = {{ROPS_TYPE_Q4_0, "q4_0", 1}, {ROPS_TYPE_Q4_1, "q4_1", 1},
                 {ROPS_TYPE_Q5_0, "q5_0", 1}, {ROPS_TYPE_Q5_1, "q5_1", 1},
                 {ROPS_TYPE_Q8_0, "q8_0", 1}, {ROPS_TYPE_Q4_K, "q4_K", 0},
                 {ROPS_TYPE_Q5_K, "q5_K", 0}, {ROPS_TYPE_Q6_K, "q6_K", 0}};
    size_t xlen;
    float *x = slurp("input.f32", &xlen);
    REQUIRE(x && xlen == sizeof(float) * ROWS * COLS);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct rops_qtraits *tr = rops_qtraits_of(types[t].type);
        const rops_from_f32_fn quantize = rops_quantizer_of(types[t].type);
        REQUIRE(tr && quantize);
        char qname[32], fname[32];
        snprintf(qname, sizeof qname, "%s.q", types[t].name);
        snprintf(fname, sizeof fname, "%s.f32", types[t].name);
        size_t qlen, flen;
        unsigned char *ggml_q = slurp(qname, &qlen);
        float *ggml_f = slurp(fname, &flen);
        REQUIRE(ggml_q && ggml_f);
        const size_t row_bytes = qlen / ROWS;
        unsigned char *mine = malloc(qlen);
        REQUIRE(mine);
        double err = 0, ggml_err = 0, norm = 0, worst = 0;
        for (int r = 0; r < ROWS; r++) {
            const float *xr = x + r * COLS;
            quantize(xr, mine + r * row_bytes, COLS);
            float back[COLS];
            tr->to_f32(mine + r * row_bytes, back, COLS);
            const double e = sq_err(back, xr, COLS), g = sq_err(ggml_f + r * COLS, xr, COLS);
            /* per row too (measured: every row's rms 0.98-0.99 of ggml's) */
            if (!types[t].same_bytes)
                CHECK_MSG(e <= g, "%s row %d: rms %.6g, ggml %.6g", types[t].name, r,
                          sqrt(e / COLS), sqrt(g / COLS));
            if (g > 0 && sqrt(e / g) > worst) worst = sqrt(e / g);
            err += e;
            ggml_err += g;
            float zero[COLS] = {0};
            norm += sq_err(xr, zero, COLS);
        }
        if (types[t].same_bytes)
            CHECK_MSG(memcmp(mine, ggml_q, qlen) == 0, "%s: bytes differ from ggml's",
                      types[t].name);
        CHECK_MSG(err <= ggml_err, "%s: relative rms %.6g, ggml %.6g", types[t].name,
                  sqrt(err / norm), sqrt(ggml_err / norm));
        fprintf(stderr, "  %-5s relative rms %.6f (ggml %.6f), worst row %.4f of ggml's\n",
                types[t].name, sqrt(err / norm), sqrt(ggml_err / norm), worst);
        free(mine);
        free(ggml_q);
        free(ggml_f);
    }
    CHECK(rops_quantizer_of(ROPS_TYPE_Q2_K) == NULL && rops_quantizer_of(ROPS_TYPE_F16) == NULL);
    free(x);
}

/* The integer products of every block type against a float64 reference: the sum over the
 * dequantized weights times the dequantized activations (with q8_1's sum as it stores it, in
 * f16, as ggml uses it too). The integer sums are exact, so the
 * only error is the float sum of one term a block: measured below 3e-7 of sum |w x|; the bound
 * is 1e-5. */
static void test_qdot(void) {
    static const enum rops_type types[] = {ROPS_TYPE_Q4_0, ROPS_TYPE_Q4_1,   ROPS_TYPE_Q5_0,
                                           ROPS_TYPE_Q5_1, ROPS_TYPE_Q8_0,   ROPS_TYPE_Q2_K,
                                           ROPS_TYPE_Q3_K, ROPS_TYPE_Q4_K,   ROPS_TYPE_Q5_K,
                                           ROPS_TYPE_Q6_K, ROPS_TYPE_IQ4_NL, ROPS_TYPE_IQ4_XS};
    size_t xlen;
    float *x = slurp("input.f32", &xlen);
    REQUIRE(x && xlen == sizeof(float) * ROWS * COLS);
    struct rops_block_q8_K xk[COLS / ROPS_QK_K];
    struct rops_block_q8_1 x1[COLS / ROPS_QK];
    struct rops_xq8 x8[COLS / ROPS_QK];
    float xd[COLS], wd[COLS];
    double worst = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct rops_qtraits *tr = rops_qtraits_of(types[t]);
        char qname[32];
        snprintf(qname, sizeof qname, "%s.q", tr->name);
        size_t qlen;
        unsigned char *q = slurp(qname, &qlen);
        REQUIRE(q);
        const size_t row_bytes = qlen / ROWS;
        const enum rops_type partner = rops_dot_partner(types[t]);
        for (int wr = 0; wr < ROWS; wr++)
            for (int xr = 0; xr < ROWS; xr++) {
                /* the activations: row xr of the input (reversed, so that w and x differ) */
                float xin[COLS];
                for (int c = 0; c < COLS; c++) xin[c] = x[xr * COLS + COLS - 1 - c];
                const void *xq;
                if (partner == ROPS_TYPE_Q8_K) {
                    rops_quantize_q8_K(xin, xk, COLS);
                    rops_qtraits_of(ROPS_TYPE_Q8_K)->to_f32(xk, xd, COLS);
                    xq = xk;
                } else if (partner == ROPS_TYPE_Q8_1) {
                    rops_quantize_q8_1(xin, x1, COLS);
                    rops_qtraits_of(ROPS_TYPE_Q8_1)->to_f32(x1, xd, COLS);
                    xq = x1;
                } else {
                    for (int b = 0; b < COLS / ROPS_QK; b++) {
                        x8[b].d = rcore_f16_to_f32(rops_q8_block(xin + 32 * b, x8[b].qs));
                        for (int j = 0; j < 32; j++) xd[32 * b + j] = x8[b].d * (float)x8[b].qs[j];
                    }
                    xq = x8;
                }
                tr->to_f32(q + wr * row_bytes, wd, COLS);
                double ref = 0, mag = 0;
                for (int c = 0; c < COLS; c++) {
                    ref += (double)wd[c] * xd[c];
                    mag += fabs((double)wd[c] * xd[c]);
                }
                if (partner == ROPS_TYPE_Q8_1) /* the minimum times s as q8_1 stores it (f16) */
                    for (int b = 0; b < COLS / ROPS_QK; b++) {
                        const unsigned char *blk = q + wr * row_bytes + b * tr->block_bytes;
                        const double m = rcore_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
                        double exact = 0;
                        for (int j = 0; j < 32; j++) exact += xd[32 * b + j];
                        ref += m * (rcore_f16_to_f32(x1[b].s) - exact);
                    }
                const double got = rops_qdot_scalar(types[t], q + wr * row_bytes, xq, COLS);
                const double rel = mag > 0 ? fabs(got - ref) / mag : fabs(got);
                if (rel > worst) worst = rel;
                CHECK_MSG(rel <= 1e-5, "%s row %d x row %d: %.9g, reference %.9g", tr->name, wr, xr,
                          got, ref);
            }
        free(q);
    }
    fprintf(stderr, "  worst error %.3g of sum |w x|\n", worst);
    CHECK(rops_dot_partner(ROPS_TYPE_F16) == ROPS_TYPE_F32);
    free(x);
}

/* rops_matmul with every block type that ops_qmatmul.c serves, weights from ggml's vectors:
 *  - against a float64 reference over the dequantized weights and quantized inputs (the
 *    integer sums are exact: measured below 3e-7 of sum |w x|, bound 1e-5);
 *  - every input's result bit for bit the same alone, among 40, with 1 or 2 threads, with and
 *    without scratch (then in groups on the stack) and in a batch of jobs, on every ISA. */
static void test_qmatmul(void) {
    static const enum rops_type types[] = {
        ROPS_TYPE_Q4_1, ROPS_TYPE_Q5_0, ROPS_TYPE_Q5_1, ROPS_TYPE_Q2_K,   ROPS_TYPE_Q3_K,
        ROPS_TYPE_Q4_K, ROPS_TYPE_Q5_K, ROPS_TYPE_Q6_K, ROPS_TYPE_IQ4_NL, ROPS_TYPE_IQ4_XS};
    enum { N = 40 }; /* more than x86/qgemm_k.h's QG_MIN_N: the prompt panel too */
    size_t xlen;
    float *input = slurp("input.f32", &xlen);
    REQUIRE(input);
    float x[N * COLS], y[N * ROWS], y1[ROWS], yb[N * ROWS], wd[COLS], xd[COLS];
    for (int i = 0; i < N * COLS; i++) /* inputs: the rows of the input, scaled and shifted */
        x[i] = input[(i * 7) % (ROWS * COLS)] * (float)(1 + i % 3) - 0.01f * (float)(i % 5);
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    static float scratch[N * COLS];
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    double worst = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct rops_qtraits *tr = rops_qtraits_of(types[t]);
        CHECK_MSG(rops_type_supported(types[t], COLS) && !rops_type_supported(types[t], COLS + 16),
                  "%s: supported for whole blocks only", tr->name);
        char qname[32];
        snprintf(qname, sizeof qname, "%s.q", tr->name);
        size_t qlen;
        unsigned char *q = slurp(qname, &qlen);
        REQUIRE(q);
        const struct rops_mat w = {q, types[t], COLS, ROWS, qlen / ROWS, NULL};
        CHECK(rops_matmul_scratch_bytes(&w, N) <= sizeof scratch);
        for (int ii = 0; ii < n_isas; ii++)
            for (int run = 0; run < 3; run++) {
                const struct rops_exec ex = {pool,
                                             run == 0 ? 1 : 2,
                                             isas[ii],
                                             run == 2 ? NULL : scratch,
                                             run == 2 ? 0 : sizeof scratch,
                                             false};
                rops_matmul(&ex, &w, x, N, y);
                int differ = 0;
                for (int i = 0; i < N; i++) {
                    rops_matmul(&ex, &w, x + i * COLS, 1, y1);
                    differ += memcmp(y1, y + i * ROWS, sizeof y1) != 0;
                }
                CHECK_MSG(differ == 0, "%s %s run %d: %d inputs differ alone", tr->name,
                          rops_isa_name(isas[ii]), run, differ);
                /* a batch of jobs of 3 and N - 3 inputs gives the same numbers */
                const struct rops_matjob jobs[2] = {{&w, x, 3, yb},
                                                    {&w, x + 3 * COLS, N - 3, yb + 3 * ROWS}};
                rops_matmul_batch(&ex, jobs, 2);
                CHECK_MSG(memcmp(yb, y, sizeof yb) == 0, "%s %s: batch differs", tr->name,
                          rops_isa_name(isas[ii]));
            }
        /* the reference, for every input and row */
        const enum rops_type partner = rops_dot_partner(types[t]);
        for (int i = 0; i < N; i++) {
            /* the input as the product sees it: quantized to the partner and back */
            static struct rops_block_q8_K xk[COLS / ROPS_QK_K];
            static struct rops_block_q8_1 x1[COLS / ROPS_QK];
            double s_fix[COLS / ROPS_QK] = {0};
            if (partner == ROPS_TYPE_Q8_K) {
                rops_quantize_q8_K(x + i * COLS, xk, COLS);
                rops_qtraits_of(ROPS_TYPE_Q8_K)->to_f32(xk, xd, COLS);
            } else if (partner == ROPS_TYPE_Q8_1) {
                rops_quantize_q8_1(x + i * COLS, x1, COLS);
                rops_qtraits_of(ROPS_TYPE_Q8_1)->to_f32(x1, xd, COLS);
                for (int b = 0; b < COLS / ROPS_QK; b++) {
                    double exact = 0;
                    for (int j = 0; j < 32; j++) exact += xd[32 * b + j];
                    s_fix[b] = rcore_f16_to_f32(x1[b].s) - exact;
                }
            } else {
                for (int b = 0; b < COLS / ROPS_QK; b++) {
                    int8_t qs[32];
                    const float d = rcore_f16_to_f32(rops_q8_block(x + i * COLS + 32 * b, qs));
                    for (int j = 0; j < 32; j++) xd[32 * b + j] = d * (float)qs[j];
                }
            }
            for (int r = 0; r < ROWS; r++) {
                tr->to_f32(q + r * w.row_bytes, wd, COLS);
                double ref = 0, mag = 0;
                for (int c = 0; c < COLS; c++) {
                    ref += (double)wd[c] * xd[c];
                    mag += fabs((double)wd[c] * xd[c]);
                }
                if (partner == ROPS_TYPE_Q8_1)
                    for (int b = 0; b < COLS / ROPS_QK; b++) {
                        const unsigned char *blk = q + r * w.row_bytes + b * tr->block_bytes;
                        ref += rcore_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8)) * s_fix[b];
                    }
                const double rel = fabs(y[i * ROWS + r] - ref) / (mag + 1e-30);
                if (rel > worst) worst = rel;
                CHECK_MSG(rel <= 1e-5, "%s input %d row %d: %.9g, reference %.9g", tr->name, i, r,
                          y[i * ROWS + r], ref);
            }
        }
        free(q);
    }
    fprintf(stderr, "  worst error %.3g of sum |w x|\n", worst);
    rpool_free(pool);
    free(input);
}

/* A random f16 of magnitude in [2^-10, 2^-4), either sign. */
static uint16_t random_f16(uint32_t *seed) {
    *seed = *seed * 1664525u + 1013904223u;
    const float m = (float)(*seed >> 8) / 16777216.0f;
    return rcore_f32_to_f16((*seed & 1 ? -1.0f : 1.0f) *
                            ldexpf(1.0f + m, -10 + (int)(*seed >> 29)));
}

/* Every ISA's qdot_rows for the K types and iq4_xs against the portable one
 * (rops_qdot_rows_scalar), on blocks of random bytes (all valid once d and dmin are finite) and
 * extreme ones (every byte 0xff, 0x00, 0x80 or 0x7f: quants and scales at their ends), inputs of
 * random quants and of all +127, all -128 (more than rops_quantize_q8_K writes) or alternating,
 * with rows and columns [r0, r1) x [c0, c0 + kt) anywhere, n = 1..5, 20 and 24 (past the 16
 * inputs AVX-512's q4_K reorders at a time: two groups), with and without
 * accumulate:
 *  - within 1e-5 of the magnitude the float steps see: sum |w x| over the dequantized values,
 *    plus what the kernels' partial sums may hold beyond it (the quants' offset times the
 *    largest scale, the largest minimum, times |d d_x| sum |x_q|); the integer sums are exact,
 *    so the difference is the float sums' order alone (measured 1.4e-7);
 *  - every input's result the same bits alone as among n;
 *  - rows outside [r0, r1) left as they were. */
static void test_qdot_rows_isas(void) {
    static const enum rops_type types[] = {ROPS_TYPE_Q2_K, ROPS_TYPE_Q3_K, ROPS_TYPE_Q4_K,
                                           ROPS_TYPE_Q5_K, ROPS_TYPE_Q6_K, ROPS_TYPE_IQ4_XS};
    static const struct {
        size_t d, dmin; /* where each type keeps them (0: no dmin) */
    } at[] = {{offsetof(struct rops_block_q2_K, d), offsetof(struct rops_block_q2_K, dmin)},
              {offsetof(struct rops_block_q3_K, d), 0},
              {offsetof(struct rops_block_q4_K, d), offsetof(struct rops_block_q4_K, dmin)},
              {offsetof(struct rops_block_q5_K, d), offsetof(struct rops_block_q5_K, dmin)},
              {offsetof(struct rops_block_q6_K, d), 0},
              {offsetof(struct rops_block_iq4_xs, d), 0}};
    enum { M = 37, NB = 3, K = NB * ROPS_QK_K, NMAX = 24 };
    static const int ns[] = {1, 2, 3, 4, 5, 20, 24};
    /* with q4_K's interleaved copy (AVX-512, one input): whole groups of 16 rows, with rows
       before and after them, and spans with none */
    static const int64_t spans[][4] = {/* r0, r1, c0, kt */
                                       {0, M, 0, K},
                                       {3, 35, 256, 512},
                                       {16, 32, 0, K},
                                       {5, 6, 512, 256},
                                       {9, 21, 0, 256}};
    uint32_t seed = 12345;
    static struct rops_block_q8_K xq[NMAX][NB];
    for (int i = 0; i < NMAX; i++)
        for (int b = 0; b < NB; b++) {
            struct rops_block_q8_K *x = &xq[i][b];
            for (int j = 0; j < ROPS_QK_K; j++) {
                seed = seed * 1664525u + 1013904223u;
                const int kind = (i + b) % 5; /* random, all 127, all -128, alternating */
                x->qs[j] = (int8_t)(kind == 1   ? 127
                                    : kind == 2 ? -128
                                    : kind == 3 ? (j % 2 ? 127 : -128)
                                                : (int)(seed >> 24) - 128);
            }
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += x->qs[16 * g + l];
                x->bsums[g] = (int16_t)sum;
            }
            x->d = rcore_f16_to_f32(random_f16(&seed)) * 0.01f;
        }
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    float y0[NMAX * M], want[NMAX * M], got[NMAX * M], alone[NMAX * M];
    double worst = 0;
    for (int i = 0; i < NMAX * M; i++) y0[i] = (float)((i * 37) % 11) - 5.0f;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct rops_qtraits *tr = rops_qtraits_of(types[t]);
        const size_t row_bytes = rops_row_bytes(types[t], K);
        uint8_t *wq = malloc(M * row_bytes);
        REQUIRE(wq);
        float d_of[M][NB], dmin_of[M][NB];
        for (int r = 0; r < M; r++)
            for (int b = 0; b < NB; b++) {
                uint8_t *blk = wq + r * row_bytes + b * tr->block_bytes;
                static const int fills[] = {-1, -1, 0xff, 0x00, 0x80, 0x7f};
                const int fill = fills[(r + 2 * b) % 6];
                for (size_t j = 0; j < tr->block_bytes; j++) {
                    seed = seed * 1664525u + 1013904223u;
                    blk[j] = (uint8_t)(fill < 0 ? (int)(seed >> 24) : fill);
                }
                /* d (and dmin) finite */
                const size_t d_at = at[t].d, dmin_at = at[t].dmin;
                const uint16_t d = random_f16(&seed), dmin = random_f16(&seed);
                memcpy(blk + d_at, &d, sizeof d);
                if (dmin_at) memcpy(blk + dmin_at, &dmin, sizeof dmin);
                d_of[r][b] = rcore_f16_to_f32(d);
                dmin_of[r][b] = dmin_at ? rcore_f16_to_f32(dmin) : 0.0f;
            }
        /* per input, row and block: the magnitude the float steps see (see above) */
        static double mag[NMAX][M][NB];
        const double off_scale = types[t] == ROPS_TYPE_Q6_K   ? 32.0 * 128
                                 : types[t] == ROPS_TYPE_Q3_K ? 4.0 * 32
                                                              : 0.0;
        const double min_max = types[t] == ROPS_TYPE_Q2_K                                 ? 15.0
                               : types[t] == ROPS_TYPE_Q4_K || types[t] == ROPS_TYPE_Q5_K ? 63.0
                                                                                          : 0.0;
        for (int r = 0; r < M; r++)
            for (int b = 0; b < NB; b++) {
                float wd[ROPS_QK_K];
                const uint8_t *blk = wq + r * row_bytes + b * tr->block_bytes;
                tr->to_f32(blk, wd, ROPS_QK_K);
                for (int i = 0; i < NMAX; i++) {
                    double sum = 0, sumq = 0;
                    for (int j = 0; j < ROPS_QK_K; j++) {
                        sum += fabs((double)wd[j] * xq[i][b].d * xq[i][b].qs[j]);
                        sumq += fabs((double)xq[i][b].qs[j]);
                    }
                    mag[i][r][b] = sum + fabs((double)xq[i][b].d) * sumq *
                                             (fabs((double)d_of[r][b]) * off_scale +
                                              fabs((double)dmin_of[r][b]) * min_max);
                }
            }
        struct rops_mat w = {wq, types[t], K, M, row_bytes, NULL};
        const size_t b16 = rops_rows16_bytes(&w, ROPS_ISA_AVX512);
        void *rows16 = NULL;
        if (b16) {
            rows16 = aligned_alloc(64, (b16 + 63) / 64 * 64);
            REQUIRE(rows16);
            rops_rows16_make(&w, rows16);
            w.rows16 = rows16;
        }
        int differ = 0, moved = 0, unstable = 0;
        for (int ii = 0; ii < n_isas; ii++)
            for (size_t sp = 0; sp < sizeof spans / sizeof spans[0]; sp++)
                for (int acc = 0; acc < 2; acc++) {
                    const int64_t r0 = spans[sp][0], r1 = spans[sp][1], c0 = spans[sp][2],
                                  b0 = c0 / ROPS_QK_K, b1 = b0 + spans[sp][3] / ROPS_QK_K;
                    const struct rops_qdot_args base = {
                        &w,   c0, spans[sp][3], (const uint8_t *)&xq[0][b0], sizeof xq[0], NMAX,
                        NULL, M,  acc != 0};
                    /* each input alone */
                    memcpy(alone, y0, sizeof alone);
                    for (int i = 0; i < NMAX; i++) {
                        struct rops_qdot_args a = base;
                        a.xq = (const uint8_t *)&xq[i][b0];
                        a.n = 1;
                        a.y = alone + i * M;
                        rops_kernels_of(isas[ii])->qdot_rows(&a, r0, r1);
                    }
                    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                        struct rops_qdot_args a = base;
                        a.n = ns[ni];
                        memcpy(want, y0, sizeof want);
                        a.y = want;
                        rops_qdot_rows_scalar(&a, r0, r1);
                        memcpy(got, y0, sizeof got);
                        a.y = got;
                        rops_kernels_of(isas[ii])->qdot_rows(&a, r0, r1);
                        for (int i = 0; i < NMAX; i++)
                            for (int r = 0; r < M; r++) {
                                const int j = i * M + r;
                                if (i >= ns[ni] || r < r0 || r >= r1) {
                                    moved += memcmp(&got[j], &y0[j], sizeof got[j]) != 0;
                                    continue;
                                }
                                unstable += memcmp(&got[j], &alone[j], sizeof got[j]) != 0;
                                double m = acc ? fabs((double)y0[j]) : 0.0;
                                for (int64_t b = b0; b < b1; b++) m += mag[i][r][b];
                                const double rel = fabs((double)got[j] - want[j]) / m;
                                if (rel > worst) worst = rel;
                                if (!(rel <= 1e-5) && differ++ < 3)
                                    fprintf(stderr,
                                            "  %s %s n %d rows [%lld, %lld) c0 %lld acc %d: "
                                            "input %d row %d: %.9g, portable %.9g\n",
                                            tr->name, rops_isa_name(isas[ii]), ns[ni],
                                            (long long)r0, (long long)r1, (long long)c0, acc, i, r,
                                            got[j], want[j]);
                            }
                    }
                }
        CHECK_MSG(differ == 0, "%s: %d results differ from the portable path", tr->name, differ);
        CHECK_MSG(unstable == 0, "%s: %d results differ alone and among others", tr->name,
                  unstable);
        CHECK_MSG(moved == 0, "%s: %d values outside the rows or inputs changed", tr->name, moved);
        if (rows16 && rops_isa_runs(ROPS_ISA_AVX512)) {
            /* the copy is what one input reads there: a zeroed one changes the 16 x 2 rows of
               the two groups and no other */
            struct rops_qdot_args a = {&w,   0, K,    (const uint8_t *)xq[0], sizeof xq[0], 1,
                                       want, M, false};
            rops_kernels_of(ROPS_ISA_AVX512)->qdot_rows(&a, 0, M);
            memset(rows16, 0, b16);
            a.y = got;
            rops_kernels_of(ROPS_ISA_AVX512)->qdot_rows(&a, 0, M);
            int changed = 0, others = 0;
            for (int r = 0; r < M; r++) {
                const bool same = memcmp(&got[r], &want[r], sizeof got[r]) == 0;
                if (r < 32)
                    changed += !same;
                else
                    others += !same;
            }
            CHECK_MSG(changed == 32 && others == 0,
                      "q4_K's copy: %d of its 32 rows and %d others follow it", changed, others);
        } else if (rows16) {
            printf("  SKIP %s's interleaved copy: %s\n", tr->name, rops_isa_lacks(ROPS_ISA_AVX512));
        }
        free(rows16);
        free(wq);
    }
    fprintf(stderr, "  worst difference %.3g of the magnitude\n", worst);
}

/* A random f16 of magnitude within [2^-10, 2^1), either sign. */
static uint16_t random_f16_scale(unsigned long long *rng) {
    const float mag =
        ldexpf(1.0f + (float)test_rand_int(rng, 1024) / 1024.0f, -10 + test_rand_int(rng, 11));
    return rcore_f32_to_f16(test_rand_int(rng, 2) ? -mag : mag);
}

/* Every table's qdot_rows against the portable one (rops_qdot_rows_scalar) for the legacy
 * 32-weight types: random blocks (random quant bytes, f16 d and m within +-[2^-10, 2)) and
 * extreme ones (every quant at its largest or smallest, inputs at +127 or -127: the largest
 * integer sums, where vpmaddubsw's int16 pairs would saturate first), rows [r0, r1) not in
 * whole 8s, 1..5 and 20 inputs, the whole row or a tile of columns past the first (c0 > 0),
 * with and without accumulate. The vector kernels take the portable path's float steps (one
 * exact integer sum a block, then its float operations in its order), so every result must
 * be its bits (the difference measured is 0), and the rows outside [r0, r1) as they were. */
static void test_qdot_32_kernels(void) {
    static const enum rops_type types[] = {ROPS_TYPE_Q4_1, ROPS_TYPE_Q5_0, ROPS_TYPE_Q5_1,
                                           ROPS_TYPE_IQ4_NL};
    enum { M = 27, NB = 9, K = 32 * NB, NX = 20, YS = M + 3 };
    static const int64_t spans[][2] = {{0, M}, {3, 17}, {5, 6}, {8, 24}, {13, M}, {0, 7}};
    static const int ns[] = {1, 2, 3, 4, 5, 20};
    static uint8_t w[M * NB * 24];
    static struct rops_xq8 x8[NX * NB];
    static struct rops_block_q8_1 x1[NX * NB];
    static float yv[NX * YS], ys[NX * YS];
    unsigned long long rng = 0x51ed270b3c2a7f31ull;
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    /* inputs: random quants within +-127; input 1 all +127, input 2 all -127 */
    for (int i = 0; i < NX; i++)
        for (int b = 0; b < NB; b++) {
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                const int q = i == 1 ? 127 : i == 2 ? -127 : test_rand_int(&rng, 255) - 127;
                x8[i * NB + b].qs[j] = x1[i * NB + b].qs[j] = (int8_t)q;
                sum += q;
            }
            const uint16_t d = random_f16_scale(&rng);
            x8[i * NB + b].d = rcore_f16_to_f32(d);
            x1[i * NB + b].d = d;
            x1[i * NB + b].s = rcore_f32_to_f16(rcore_f16_to_f32(d) * (float)sum);
        }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const enum rops_type type = types[t];
        const struct rops_qtraits *tr = rops_qtraits_of(type);
        const size_t bb = tr->block_bytes, row_bytes = rops_row_bytes(type, K);
        const bool affine = rops_dot_partner(type) == ROPS_TYPE_Q8_1;
        REQUIRE(row_bytes * M <= sizeof w);
        /* weights: random bytes; rows 4 and 13 every bit set (the largest quants; iq4_nl's
           113), rows 5 and 22 none (q5_0's -16, iq4_nl's -127); then sane d (and m) */
        for (size_t o = 0; o < row_bytes * M; o++) {
            const size_t r = o / row_bytes;
            w[o] = r == 4 || r == 13 ? 0xff : r == 5 || r == 22 ? 0 : (uint8_t)test_rand(&rng);
        }
        for (size_t o = 0; o < row_bytes * M; o += bb) {
            const uint16_t d = random_f16_scale(&rng), m = random_f16_scale(&rng);
            memcpy(w + o, &d, 2);
            if (affine) memcpy(w + o + 2, &m, 2);
        }
        const struct rops_mat mat = {w, type, K, M, row_bytes, NULL};
        for (int ii = 0; ii < n_isas; ii++) {
            const struct rops_kernels *k = rops_kernels_of(isas[ii]);
            int runs = 0, differ = 0;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (size_t si = 0; si < sizeof spans / sizeof spans[0]; si++)
                    for (int mode = 0; mode < 4; mode++) {
                        /* mode bit 0: accumulate; bit 1: the tile of columns 64 .. 64 + 6 x 32
                           (its inputs' blocks from the third on) */
                        const bool acc = mode & 1, tile = mode & 2;
                        const int64_t c0 = tile ? 64 : 0, kt = tile ? 6 * 32 : K;
                        const uint8_t *xq = affine ? (const uint8_t *)(x1 + (tile ? 2 : 0))
                                                   : (const uint8_t *)(x8 + (tile ? 2 : 0));
                        const size_t stride = affine ? NB * sizeof *x1 : NB * sizeof *x8;
                        for (int o = 0; o < NX * YS; o++)
                            yv[o] = ys[o] = (float)test_rand_int(&rng, 2001) / 100.0f - 10.0f;
                        const struct rops_qdot_args av = {&mat,   c0, kt, xq, stride,
                                                          ns[ni], yv, YS, acc},
                                                    as = {&mat,   c0, kt, xq, stride,
                                                          ns[ni], ys, YS, acc};
                        k->qdot_rows(&av, spans[si][0], spans[si][1]);
                        rops_qdot_rows_scalar(&as, spans[si][0], spans[si][1]);
                        runs++;
                        if (memcmp(yv, ys, sizeof yv) != 0) {
                            if (differ++ == 0)
                                for (int o = 0; o < NX * YS; o++)
                                    if (memcmp(&yv[o], &ys[o], sizeof *yv) != 0) {
                                        fprintf(stderr,
                                                "  %s %s n %d rows [%lld, %lld) accumulate %d "
                                                "c0 %lld: input %d row %d: %.9g, portable "
                                                "%.9g\n",
                                                tr->name, rops_isa_name(isas[ii]), ns[ni],
                                                (long long)spans[si][0], (long long)spans[si][1],
                                                acc, (long long)c0, o / YS, o % YS, yv[o], ys[o]);
                                        break;
                                    }
                        }
                    }
            CHECK_MSG(differ == 0, "%s %s: %d of %d calls differ from the portable path", tr->name,
                      rops_isa_name(isas[ii]), differ, runs);
        }
    }
}

static void test_other_types_have_no_traits(void) {
    CHECK(rops_qtraits_of(ROPS_TYPE_F32) == NULL);
    CHECK(rops_qtraits_of(ROPS_TYPE_F16) == NULL);
    CHECK(rops_qtraits_of(ROPS_TYPE_BF16) == NULL);
    CHECK(rops_qtraits_of((enum rops_type)16) == NULL); /* iq2_xxs */
    CHECK(rops_qtraits_of((enum rops_type)39) == NULL); /* mxfp4 */
    CHECK(rops_qtraits_of((enum rops_type)1000) == NULL);
}

/* The prompt panels over several column tiles (x86/qgemm_k.h, x86/qgemm_32.h take a tile of
 * 1024 columns at a time, adding each to the outputs): 2560 columns (tiles of 1024, 1024, 512),
 * 141 rows (a last panel of 13; one input's whole rows go to the kernels of a tile a call 128
 * rows at a time, x86/qdot.h) and 40 inputs, weights quantized from random floats, on every
 * table: each input's result bit for bit the same alone, and within 1e-5 of sum |w x| of a
 * float64 product of the dequantized weights and the quantized inputs (the worst printed).
 * q4_K and q6_K run again with their interleaved copy, which one input reads a whole row at a
 * time, its tiles' sums kept apart (x86/qdot_k16.h): the same bits again, and with AVX-512 a
 * zeroed copy changes the 128 rows of its eight groups alone (the copy is what was read). */
static void test_qmatmul_tiles(void) {
    static const enum rops_type types[] = {ROPS_TYPE_Q5_0, ROPS_TYPE_Q4_K, ROPS_TYPE_Q5_K,
                                           ROPS_TYPE_Q6_K};
    enum { K = 2560, M = 141, N = 40, GROUPED = M / 16 * 16 };
    static float wf[M * K], x[N * K], y[N * M], y1[M], xd[K], wd[K];
    static uint8_t wq[M * K * 2];
    static struct rops_block_q8_K xk[K / ROPS_QK_K];
    uint32_t seed = 99;
    for (int i = 0; i < M * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        wf[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (1.0f + (float)(i / K % 3));
    }
    for (int i = 0; i < N * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (float)(1 + i % 7);
    }
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    static float scratch[N * K];
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    double worst_all = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const size_t row_bytes = rops_row_bytes(types[t], K);
        REQUIRE(row_bytes * M <= sizeof wq);
        for (int r = 0; r < M; r++) rops_quantizer_of(types[t])(wf + r * K, wq + r * row_bytes, K);
        struct rops_mat w = {wq, types[t], K, M, row_bytes, NULL};
        const struct rops_qtraits *tr = rops_qtraits_of(types[t]);
        const size_t b16 = rops_rows16_bytes(&w, ROPS_ISA_AVX512);
        void *copy = NULL;
        if (b16) {
            REQUIRE((copy = aligned_alloc(64, (b16 + 63) / 64 * 64)));
            rops_rows16_make(&w, copy);
        }
        for (int pass = 0; pass < (copy ? 2 : 1); pass++)
            for (int ii = 0; ii < n_isas; ii++) {
                w.rows16 = pass ? copy : NULL;
                const struct rops_exec ex = {pool, 2, isas[ii], scratch, sizeof scratch, false};
                rops_matmul(&ex, &w, x, N, y);
                int differ = 0;
                double worst = 0;
                for (int i = 0; i < N; i++) {
                    rops_matmul(&ex, &w, x + i * K, 1, y1);
                    differ += memcmp(y1, y + i * M, sizeof y1) != 0;
                    if (types[t] == ROPS_TYPE_Q5_0) {
                        for (int b = 0; b < K / ROPS_QK; b++) {
                            int8_t qs[32];
                            const float d = rcore_f16_to_f32(rops_q8_block(x + i * K + 32 * b, qs));
                            for (int j = 0; j < 32; j++) xd[32 * b + j] = d * (float)qs[j];
                        }
                    } else {
                        rops_quantize_q8_K(x + i * K, xk, K);
                        rops_qtraits_of(ROPS_TYPE_Q8_K)->to_f32(xk, xd, K);
                    }
                    for (int r = 0; r < M; r++) {
                        tr->to_f32(wq + r * row_bytes, wd, K);
                        double ref = 0, mag = 0;
                        for (int c = 0; c < K; c++) {
                            ref += (double)wd[c] * xd[c];
                            mag += fabs((double)wd[c] * xd[c]);
                        }
                        const double rel = fabs(y[i * M + r] - ref) / (mag + 1e-30);
                        if (!(rel <= worst)) worst = rel;
                    }
                }
                CHECK_MSG(differ == 0, "%s %s%s: %d of %d inputs differ alone", tr->name,
                          rops_isa_name(isas[ii]), pass ? " (copy)" : "", differ, N);
                CHECK_MSG(worst <= 1e-5, "%s %s%s: relative error %g", tr->name,
                          rops_isa_name(isas[ii]), pass ? " (copy)" : "", worst);
                if (worst > worst_all) worst_all = worst;
                if (pass && isas[ii] == ROPS_ISA_AVX512) {
                    static float zeroed[M];
                    static unsigned char keep[GROUPED * K]; /* b16 bytes at most */
                    REQUIRE(b16 <= sizeof keep);
                    memcpy(keep, copy, b16);
                    memset(copy, 0, b16);
                    rops_matmul(&ex, &w, x, 1, zeroed);
                    memcpy(copy, keep, b16);
                    int changed = 0, others = 0;
                    for (int r = 0; r < M; r++) {
                        const bool same = memcmp(&zeroed[r], &y[r], sizeof y[r]) == 0;
                        changed += r < GROUPED && !same;
                        others += r >= GROUPED && !same;
                    }
                    CHECK_MSG(changed == GROUPED && others == 0,
                              "%s's copy, a whole row at once: %d of its %d rows and %d others "
                              "follow it",
                              tr->name, changed, GROUPED, others);
                }
            }
        if (copy && !rops_isa_runs(ROPS_ISA_AVX512))
            printf("  SKIP %s's interleaved copy: %s\n", tr->name, rops_isa_lacks(ROPS_ISA_AVX512));
        free(copy);
    }
    fprintf(stderr, "  worst error %.3g of sum |w x|\n", worst_all);
    rpool_free(pool);
}

int main(void) {
    RUN(test_dequant_bit_exact);
    RUN(test_q8_K_quantize);
    RUN(test_q8_1_quantize);
    RUN(test_quantizers);
    RUN(test_qdot);
    RUN(test_qmatmul);
    RUN(test_qmatmul_tiles);
    RUN(test_qdot_rows_isas);
    RUN(test_qdot_32_kernels);
    RUN(test_other_types_have_no_traits);
    return test_finish("test_quants");
}
