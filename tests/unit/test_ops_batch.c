/*
 * rops_matmul_batch against rops_matmul on each job alone: the same bits (memcmp), for every
 * weight type (f32, f16, bf16, q8_0, q4_0) and mixes of them, jobs of different shapes and
 * input counts (1, 2, 3, 5, 16 in one hand-off; 40 through rops_matmul), 1 to 3 threads, the
 * portable and the best ISA, with a scratch that holds the whole batch, one that holds part of
 * it and none (the stack buffer; inputs too wide for it), and more products than one call
 * takes. Nothing past a job's outputs is written.
 *
 * Mamba's scan with its dt made in its own hand-off (rops_scan_args.dt_proj) against the
 * product, softplus and scan apart: the same bits too, and dt against float64.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/ops.h"
#include "pool/pool.h"
#include "ops_util.h"
#include "test.h"

static unsigned long long rng = 0x51afd7ed558ccd25ull;

static float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(test_rand(&rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

enum { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };

/* A random rows x k matrix of type (k a multiple of 32 for the block types). */
static struct rops_mat make_mat(uint32_t type, int64_t rows, int64_t k) {
    const size_t rb = rops_row_bytes(type, k);
    uint8_t *bytes = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)k);
    REQUIRE(rb > 0 && bytes && row);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *dst = bytes + (size_t)r * rb;
        for (int64_t c = 0; c < k; c++) row[c] = frand();
        if (type != F32 && type != F16 && type != BF16) {
            REQUIRE(rops_quantize_row(type, row, k, dst));
        } else {
            for (int64_t c = 0; c < k; c++) {
                if (type == F32) {
                    memcpy(dst + 4 * c, &row[c], 4);
                } else {
                    const uint16_t h =
                        type == F16 ? rcore_f32_to_f16(row[c]) : rcore_f32_to_bf16(row[c]);
                    memcpy(dst + 2 * c, &h, 2);
                }
            }
        }
    }
    free(row);
    return (struct rops_mat){bytes, type, k, rows, rb, NULL};
}

/* A job's shape. */
struct shape {
    uint32_t type;
    int64_t rows, k, n;
};

#define MAX_JOBS 12
#define GUARD    16 /* floats past each output that must stay as they were */

/* The batch of shapes against rops_matmul per job, on every ISA, thread count and scratch. */
static void check_batch(struct rpool *pool, const char *what, const struct shape *s, int n_jobs) {
    REQUIRE(n_jobs <= MAX_JOBS);
    struct rops_mat w[MAX_JOBS];
    float *x[MAX_JOBS], *want[MAX_JOBS], *got[MAX_JOBS];
    size_t scratch_full = 0; /* what the jobs' quantized inputs and rops_matmul's tiles want */
    for (int j = 0; j < n_jobs; j++) {
        w[j] = make_mat(s[j].type, s[j].rows, s[j].k);
        const size_t nx = (size_t)(s[j].n * s[j].k), ny = (size_t)(s[j].n * s[j].rows) + GUARD;
        x[j] = malloc(sizeof(float) * (nx + 1));
        want[j] = malloc(sizeof(float) * ny);
        got[j] = malloc(sizeof(float) * ny);
        REQUIRE(x[j] && want[j] && got[j]);
        for (size_t i = 0; i < nx; i++) x[j][i] = frand();
        scratch_full += (size_t)(s[j].n * s[j].k) * sizeof(float);
        const size_t mm = rops_matmul_scratch_bytes(&w[j], s[j].n);
        if (mm > scratch_full) scratch_full = mm;
    }
    void *scratch = malloc(scratch_full);
    REQUIRE(scratch);
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    /* all of it; about a fifth (several calls, the prompts' tiles in smaller groups); none */
    const size_t scratches[3] = {scratch_full, scratch_full / 5, 0};
    for (int ii = 0; ii < n_isas; ii++) {
        for (int nth = 1; nth <= 3; nth++)
            for (int si = 0; si < 3; si++) {
                const struct rops_exec ex = {
                    pool, nth, isas[ii], scratches[si] ? scratch : NULL, scratches[si], false};
                struct rops_matjob jobs[MAX_JOBS];
                for (int j = 0; j < n_jobs; j++) {
                    const size_t ny = (size_t)(s[j].n * s[j].rows) + GUARD;
                    memset(want[j], 0xff, sizeof(float) * ny); /* NaNs: every slot is written */
                    memset(got[j], 0xff, sizeof(float) * ny);
                    rops_matmul(&ex, &w[j], x[j], s[j].n, want[j]);
                    jobs[j] = (struct rops_matjob){&w[j], x[j], s[j].n, got[j]};
                }
                rops_matmul_batch(&ex, jobs, n_jobs);
                for (int j = 0; j < n_jobs; j++) {
                    const size_t ny = (size_t)(s[j].n * s[j].rows) + GUARD;
                    CHECK_MSG(memcmp(want[j], got[j], sizeof(float) * ny) == 0,
                              "%s: job %d (type %u, %lld x %lld, n %lld) %s, %d threads, "
                              "scratch %zu: not rops_matmul's bits",
                              what, j, s[j].type, (long long)s[j].rows, (long long)s[j].k,
                              (long long)s[j].n, rops_isa_name(isas[ii]), nth, scratches[si]);
                }
            }
    }
    for (int j = 0; j < n_jobs; j++) {
        free((void *)w[j].data);
        free(x[j]);
        free(want[j]);
        free(got[j]);
    }
    free(scratch);
}

static void test_batch_types(void) {
    struct rpool *pool = rpool_create(3);
    REQUIRE(pool);
    const uint32_t types[] = {F32, F16, BF16, Q8_0, Q4_0};
    const int64_t ns[] = {1, 2, 3, 5, 16, 40};
    for (size_t ti = 0; ti < 5; ti++) {
        const uint32_t t = types[ti];
        const bool blocks = t == Q8_0 || t == Q4_0;
        /* each n alone, then RWKV-like mixes: wide and narrow products of the same n, and
           different n side by side */
        for (size_t ni = 0; ni < 6; ni++) {
            const struct shape one[1] = {{t, 37, blocks ? 96 : 45, ns[ni]}};
            check_batch(pool, "one job", one, 1);
            const struct shape rwkv[6] = {{t, 96, 64, ns[ni]}, {t, 96, 64, ns[ni]},
                                          {t, 64, 96, ns[ni]}, {t, 8, 64, ns[ni]},
                                          {t, 5, 96, ns[ni]},  {t, 300, 64, ns[ni]}};
            check_batch(pool, "same n", rwkv, 6);
        }
        const struct shape mixed[6] = {{t, 70, 64, 1}, {t, 13, 128, 2}, {t, 64, 32, 3},
                                       {t, 33, 96, 5}, {t, 9, 64, 16},  {t, 21, 64, 40}};
        check_batch(pool, "mixed n", mixed, 6);
        /* more products than one call takes (block weights: three inputs a product) */
        struct shape many[MAX_JOBS];
        for (int j = 0; j < MAX_JOBS; j++) many[j] = (struct shape){t, 11 + j, 64, 16};
        check_batch(pool, "many", many, MAX_JOBS);
        /* rows past a block column tile (4096), and wider than the stack buffer holds */
        const struct shape wide[3] = {{t, 7, 4160, 3}, {t, 5, 64, 2}, {t, 6, 4128, 5}};
        check_batch(pool, "wide", wide, 3);
    }
    /* every type in one batch */
    const struct shape all[6] = {{F32, 40, 64, 2},  {F16, 41, 96, 2},  {BF16, 42, 64, 2},
                                 {Q8_0, 43, 96, 2}, {Q4_0, 44, 64, 2}, {F16, 45, 64, 40}};
    check_batch(pool, "all types", all, 6);
    /* no jobs; jobs of no inputs */
    rops_matmul_batch(&(struct rops_exec){pool, 2, rops_isa_best(), NULL, 0, false}, NULL, 0);
    const struct shape none[2] = {{F16, 9, 32, 0}, {Q8_0, 9, 32, 1}};
    check_batch(pool, "no inputs", none, 2);
    rpool_free(pool);
}

static double softplus64(double v) {
    return v > 20 ? v : log1p(exp(v));
}

/* One sequence of n tokens through rops_ssm_scan with dt_proj, and with dt made apart by
 * rops_matmul and rops_softplus_bias: dt, y and the state bit for bit, on every ISA and thread
 * count, for every kind of weight a file's ssm_dt has (float, q8_0 / q4_0 blocks, the legacy
 * and K types), and a d_inner (536) that two threads split inside an AVX-512 vector when they
 * take channels in runs of 8 (a scalar tail of softplus then gave other bits). dt
 * against float64 over the dequantized weights: within 1e-6 for float weights (measured 2.2e-7),
 * 0.02 x sqrt(columns / 256) where the input is quantized too, its rounding adding up over the
 * columns (measured 0.0103 at 256 columns, q6_K; 0.018 at 512, q4_K; 0.022 at 640, q8_0). */
static void test_scan_dt(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const struct {
        uint32_t type;
        int64_t k;
    } types[] = {{F32, 48}, {F16, 48}, {BF16, 64}, {Q8_0, 160}, {Q4_0, 64},
                 {6, 160},  {12, 256}, {14, 256},  {Q8_0, 640}, {12, 512}};
    /* 6 q5_0, 12 q4_K, 14 q6_K; the last two wider than the scan's stack buffer of inputs, whose
       one-token product then runs before the scan's hand-off */
    const int64_t dis[] = {56, 536}, N = 16;
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t di = 0; di < 2; di++)
            for (int64_t n = 1; n <= 2; n++) {
                const int64_t Di = dis[di], k = types[ti].k;
                const struct rops_mat W = make_mat(types[ti].type, Di, k);
                float *x = malloc(sizeof(float) * (size_t)(n * k)),
                      *bias = malloc(sizeof(float) * (size_t)Di),
                      *A = malloc(sizeof(float) * (size_t)(Di * N)),
                      *BC = malloc(sizeof(float) * (size_t)(n * 2 * N)),
                      *D = malloc(sizeof(float) * (size_t)Di),
                      *xc = malloc(sizeof(float) * (size_t)(n * Di)),
                      *z = malloc(sizeof(float) * (size_t)(n * Di)),
                      *s0 = malloc(sizeof(float) * (size_t)(Di * N)),
                      *row = malloc(sizeof(float) * (size_t)k);
                float *dt[2], *y[2], *st[2];
                for (int p = 0; p < 2; p++) {
                    dt[p] = malloc(sizeof(float) * (size_t)(n * Di));
                    y[p] = malloc(sizeof(float) * (size_t)(n * Di));
                    st[p] = malloc(sizeof(float) * (size_t)(Di * N));
                    REQUIRE(dt[p] && y[p] && st[p]);
                }
                REQUIRE(x && bias && A && BC && D && xc && z && s0 && row);
                for (int64_t i = 0; i < n * k; i++) x[i] = 0.2f * frand();
                for (int64_t i = 0; i < Di; i++) bias[i] = frand(), D[i] = frand();
                for (int64_t i = 0; i < Di * N; i++) A[i] = -1.0f - frand(), s0[i] = frand();
                for (int64_t i = 0; i < n * 2 * N; i++) BC[i] = frand();
                for (int64_t i = 0; i < n * Di; i++) xc[i] = frand(), z[i] = frand();
                double err = 0;
                for (int ii = 0; ii < n_isas; ii++)
                    for (int nth = 1; nth <= 2; nth++) {
                        const struct rops_exec ex = {pool, nth, isas[ii], NULL, 0, false};
                        const struct rops_dt_proj proj = {&W, x, bias, dt[1]};
                        for (int p = 0; p < 2; p++) {
                            memcpy(st[p], s0, sizeof(float) * (size_t)(Di * N));
                            memset(dt[p], 0xff, sizeof(float) * (size_t)(n * Di));
                            if (p == 0) {
                                rops_matmul(&ex, &W, x, n, dt[0]);
                                rops_softplus_bias(isas[ii], dt[0], bias, n, Di);
                            }
                            rops_ssm_scan(&ex,
                                          &(struct rops_scan_args){.state = st[p],
                                                                   .x = xc,
                                                                   .dt = dt[p],
                                                                   .A = A,
                                                                   .B = BC,
                                                                   .C = BC + N,
                                                                   .bc_stride = 2 * N,
                                                                   .D = D,
                                                                   .z = z,
                                                                   .z_stride = Di,
                                                                   .n_seqs = 1,
                                                                   .n_tok = n,
                                                                   .d_inner = Di,
                                                                   .d_state = N,
                                                                   .y = y[p],
                                                                   .dt_proj = p ? &proj : NULL});
                        }
                        const size_t nd = sizeof(float) * (size_t)(n * Di);
                        CHECK_MSG(!memcmp(dt[0], dt[1], nd) && !memcmp(y[0], y[1], nd) &&
                                      !memcmp(st[0], st[1], sizeof(float) * (size_t)(Di * N)),
                                  "scan dt %s type %u d_inner %lld n %lld threads %d: not the "
                                  "bits of the product apart",
                                  rops_isa_name(isas[ii]), types[ti].type, (long long)Di,
                                  (long long)n, nth);
                        for (int64_t c = 0; c < Di; c++) {
                            rops_get_row(&W, c, row);
                            for (int64_t t = 0; t < n; t++) {
                                double sum = bias[c];
                                for (int64_t j = 0; j < k; j++)
                                    sum += (double)row[j] * x[t * k + j];
                                err = fmax(err, fabs(dt[1][t * Di + c] - softplus64(sum)));
                            }
                        }
                    }
                const bool fl =
                    types[ti].type == F32 || types[ti].type == F16 || types[ti].type == BF16;
                CHECK_MSG(err < (fl ? 1e-6 : 0.02 * sqrt((double)k / 256)),
                          "scan dt type %u d_inner %lld n %lld: dt %g "
                          "from float64",
                          types[ti].type, (long long)Di, (long long)n, err);
                free((void *)W.data);
                free(x), free(bias), free(A), free(BC), free(D), free(xc), free(z), free(s0),
                    free(row);
                for (int p = 0; p < 2; p++) free(dt[p]), free(y[p]), free(st[p]);
            }
    rpool_free(pool);
}

int main(void) {
    RUN(test_batch_types);
    RUN(test_scan_dt);
    return test_finish("test_ops_batch");
}
