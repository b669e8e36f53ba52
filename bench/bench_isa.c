/*
 * bench_isa: the kernels on each instruction set this CPU runs, side by side, on the shapes of
 * a mamba-130m-shaped model (embd 768, d_inner 1536, d_state 16, dt_rank 48): the products of
 * its layers (in_proj 768 -> 3072, x_proj 1536 -> 80, out_proj 1536 -> 768) in f16, bf16, f32,
 * q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K and q6_K for 1, 3, 16 and 512 inputs, the scan and the
 * conv (d_conv 4) for 1 and 512 tokens; and RWKV's WKV6 and WKV7 on an RWKV 130m-shaped layer (embd
 * 768, 12 heads of 64) for 1, 16 and 512 tokens.
 *
 *   bench_isa [--reps N] [--threads T] [--only TEXT]
 *
 * --only runs the rows whose name contains TEXT ("wkv", "f16 in_proj").
 *
 * Each figure is the minimum (the run other load on the machine disturbed least) and the median
 * over N rounds (default 21) of the time of one call, a round timing enough back-to-back calls to
 * last ~2 ms (short, so that some rounds run undisturbed on a loaded machine); within a round the
 * instruction sets take turns, so that all see the same machine. Output: a table (GFLOP/s from the
 * minimum, and each set's ratio to AVX2), then one line of JSON per row.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops.h"
#include "ops/ops_quants.h"
#include "pool/pool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One benchmarked call: a product, Mamba's scan or a WKV. */
struct job {
    const struct rops_mat *w; /* NULL: the scan or the WKV */
    const float *x;
    int64_t n;
    float *y;
    const struct rops_scan_args *scan; /* NULL: the conv or the WKV */
    const struct rops_conv_args *conv; /* NULL: the WKV */
    struct rops_exec ex;
    const struct rops_wkv_args *wkv;
    bool v7;
};

static void run(const struct job *j) {
    if (j->w)
        rops_matmul(&j->ex, j->w, j->x, j->n, j->y);
    else if (j->scan)
        rops_ssm_scan(&j->ex, j->scan);
    else if (j->conv)
        rops_ssm_conv(&j->ex, j->conv);
    else if (j->v7)
        rops_wkv7(&j->ex, j->wkv);
    else
        rops_wkv6(&j->ex, j->wkv);
}

/* Seconds per call over a round of iters calls. */
static double round_s(const struct job *j, int64_t iters) {
    const double t0 = now_s();
    for (int64_t i = 0; i < iters; i++) run(j);
    return (now_s() - t0) / (double)iters;
}

struct isa_set {
    enum rops_isa isa[ROPS_ISA_COUNT];
    int n;
};

/* Times one job on every instruction set, interleaved; prints a row. */
static const char *only; /* --only: the rows to run, by a part of their name */

static void bench_row(const char *what, double flops, struct job *j, const struct isa_set *is,
                      int reps) {
    if (only && !strstr(what, only)) return;
    double mins[ROPS_ISA_COUNT], meds[ROPS_ISA_COUNT];
    int64_t iters[ROPS_ISA_COUNT];
    double *t = malloc(sizeof(double) * (size_t)(reps * ROPS_ISA_COUNT));
    if (!t) return;
    for (int i = 0; i < is->n; i++) { /* calls per round: ~2 ms */
        j->ex.isa = is->isa[i];
        run(j);
        const double one = round_s(j, 1);
        iters[i] = one > 0 ? (int64_t)(0.002 / one) + 1 : 1;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < is->n; i++) {
            j->ex.isa = is->isa[i];
            t[i * reps + r] = round_s(j, iters[i]);
        }
    printf("| %-34s |", what);
    for (int i = 0; i < is->n; i++) {
        qsort(t + i * reps, (size_t)reps, sizeof(double), cmp_double);
        mins[i] = t[i * reps];
        meds[i] = t[i * reps + reps / 2];
        printf(" %8.1f us %6.1f |", mins[i] * 1e6, flops / mins[i] / 1e9);
    }
    int avx2 = -1;
    for (int i = 0; i < is->n; i++)
        if (is->isa[i] == ROPS_ISA_AVX2) avx2 = i;
    for (int i = 0; i < is->n; i++)
        if (avx2 >= 0 && is->isa[i] == ROPS_ISA_AVX512)
            printf(" %.2fx (median %.2fx) |", mins[avx2] / mins[i], meds[avx2] / meds[i]);
    printf("\n");
    fprintf(stderr, "{\"job\": \"%s\"", what);
    for (int i = 0; i < is->n; i++)
        fprintf(stderr, ", \"%s_min_us\": %.2f, \"%s_median_us\": %.2f", rops_isa_name(is->isa[i]),
                mins[i] * 1e6, rops_isa_name(is->isa[i]), meds[i] * 1e6);
    fprintf(stderr, "}\n");
    free(t);
}

/* WKV6 and WKV7 over one sequence of an RWKV 130m-shaped layer: embd 768, heads of 64, inputs
 * in the ranges the models give them (decays in (0.6, 0.99); RWKV-7's a and b small), so that
 * the state stays bounded over the repeated calls. Flops per state element and token: WKV6 7
 * (two multiply-adds into y, a multiply and a multiply-add into the state), WKV7 9 (one more
 * multiply-add for sum_j a[j] S[i][j]). */
static bool bench_wkv(struct rpool *pool, int nth, const struct isa_set *is, int reps) {
    const int64_t E = 768, hs = 64, T = 512;
    float *in = malloc(sizeof(float) * (size_t)(7 * T * E)), *u = malloc(sizeof(float) * (size_t)E);
    float *state = calloc((size_t)(E * hs), sizeof(float));
    if (!in || !u || !state) {
        free(in), free(u), free(state);
        return false;
    }
    float *r = in, *k = in + T * E, *v = in + 2 * T * E, *w = in + 3 * T * E, *a = in + 4 * T * E,
          *b = in + 5 * T * E, *y = in + 6 * T * E;
    for (int64_t i = 0; i < T * E; i++) {
        r[i] = frand(), k[i] = frand(), v[i] = frand();
        w[i] = 0.6f + 0.39f * (frand() * 0.5f + 0.5f);
        a[i] = 0.3f * frand(), b[i] = 0.3f * frand();
    }
    for (int64_t i = 0; i < E; i++) u[i] = frand();
    for (int v7 = 0; v7 <= 1; v7++)
        for (int ni = 0; ni < 3; ni++) {
            const int64_t n = (const int64_t[]){1, 16, T}[ni];
            const struct rops_wkv_args wa = {.state = state,
                                             .r = r,
                                             .k = k,
                                             .v = v,
                                             .w = w,
                                             .u = v7 ? NULL : u,
                                             .a = v7 ? a : NULL,
                                             .b = v7 ? b : NULL,
                                             .n_seqs = 1,
                                             .n_tok = n,
                                             .n_embd = E,
                                             .head_size = hs,
                                             .y = y};
            char what[64];
            snprintf(what, sizeof what, "wkv%d 12x64 tokens=%lld", v7 ? 7 : 6, (long long)n);
            struct job j = {.ex = {pool, nth, ROPS_ISA_AVX2, NULL, 0}, .wkv = &wa, .v7 = v7 == 1};
            bench_row(what, (v7 ? 9.0 : 7.0) * (double)(E * hs * n), &j, is, reps);
        }
    free(in), free(u), free(state);
    return true;
}

int main(int argc, char **argv) {
    int reps = 21, nth = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            nth = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_isa [--reps N] [--threads T] [--only TEXT]\n");
            return 2;
        }
    }
    if (reps < 1 || nth < 1 || nth > 64) {
        fprintf(stderr, "bench_isa: --reps and --threads must be positive (threads <= 64)\n");
        return 2;
    }
    struct isa_set is = {.n = 0};
    for (int i = 0; i < ROPS_ISA_COUNT; i++) {
        if (i == ROPS_ISA_SCALAR) continue; /* the portable path is not what this compares */
        if (rops_isa_runs((enum rops_isa)i))
            is.isa[is.n++] = (enum rops_isa)i;
        else
            printf("SKIP: %s (%s)\n", rops_isa_name((enum rops_isa)i),
                   rops_isa_lacks((enum rops_isa)i));
    }
    if (is.n == 0) {
        printf("no vector instruction set on this CPU: nothing to compare\n");
        return 0;
    }
    struct rpool *pool = nth > 1 ? rpool_create(nth) : NULL;
    const int64_t max_n = 512, max_k = 1536, max_m = 3072;
    float *x = malloc(sizeof(float) * (size_t)(max_n * max_k));
    float *y = malloc(sizeof(float) * (size_t)(max_n * max_m));
    float *wf = malloc(sizeof(float) * (size_t)(max_m * max_k));
    void *wq = malloc(sizeof(float) * (size_t)(max_m * max_k));
    const size_t scratch_bytes = sizeof(float) * (size_t)(max_n * max_k);
    void *scratch = malloc(scratch_bytes);
    if (!x || !y || !wf || !wq || !scratch || (nth > 1 && !pool)) {
        fprintf(stderr, "bench_isa: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < max_n * max_k; i++) x[i] = frand();
    for (int64_t i = 0; i < max_m * max_k; i++) wf[i] = frand() * 0.05f;

    printf("| job (threads %d) |", nth);
    for (int i = 0; i < is.n; i++) printf(" %s: min time, GFLOP/s |", rops_isa_name(is.isa[i]));
    if (is.n > 1) printf(" avx2 / avx512 time |");
    printf("\n");
    const struct {
        const char *name;
        int64_t k, m;
    } mats[] = {{"in_proj 768x3072", 768, 3072},
                {"x_proj 1536x80", 1536, 80},
                {"out_proj 1536x768", 1536, 768}};
    const enum rops_type types[] = {ROPS_TYPE_F16,  ROPS_TYPE_BF16, ROPS_TYPE_F32,  ROPS_TYPE_Q8_0,
                                    ROPS_TYPE_Q4_0, ROPS_TYPE_Q4_1, ROPS_TYPE_Q5_0, ROPS_TYPE_Q5_1,
                                    ROPS_TYPE_Q4_K, ROPS_TYPE_Q5_K, ROPS_TYPE_Q6_K};
    const char *type_names[] = {"f16",  "bf16", "f32",  "q8_0", "q4_0", "q4_1",
                                "q5_0", "q5_1", "q4_K", "q5_K", "q6_K"};
    const int64_t ns[] = {1, 3, 16, 512};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t mi = 0; mi < sizeof mats / sizeof mats[0]; mi++) {
            const int64_t k = mats[mi].k, m = mats[mi].m;
            const enum rops_type ty = types[ti];
            const size_t rb = rops_row_bytes(ty, k);
            for (int64_t r = 0; r < m; r++) {
                const float *src = wf + r * k;
                uint8_t *dst = (uint8_t *)wq + (size_t)r * rb;
                if (rops_quantizer_of(ty))
                    rops_quantizer_of(ty)(src, dst, k);
                else
                    for (int64_t c = 0; c < k; c++) {
                        const float v = src[c];
                        uint32_t bits;
                        memcpy(&bits, &v, 4);
                        if (ty == ROPS_TYPE_F32)
                            memcpy(dst + 4 * c, &v, 4);
                        else { /* f16 / bf16 from the top bits: any values serve */
                            const uint16_t h = ty == ROPS_TYPE_BF16
                                                   ? (uint16_t)(bits >> 16)
                                                   : (uint16_t)(((bits >> 16) & 0x8000) |
                                                                (((bits >> 13) & 0x3ff) | 0x3800));
                            memcpy(dst + 2 * c, &h, 2);
                        }
                    }
            }
            const struct rops_mat w = {wq, ty, k, m, rb, NULL};
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                char what[64];
                snprintf(what, sizeof what, "%s %s n=%lld", type_names[ti], mats[mi].name,
                         (long long)ns[ni]);
                struct job j = {.w = &w,
                                .x = x,
                                .n = ns[ni],
                                .y = y,
                                .ex = {pool, nth, ROPS_ISA_AVX2, scratch, scratch_bytes}};
                bench_row(what, 2.0 * (double)(k * m * ns[ni]), &j, &is, reps);
            }
            /* one input from the interleaved copy a model makes at load (AVX-512 reads it) */
            const size_t b16 = rops_rows16_bytes(&w, ROPS_ISA_AVX512);
            if (b16) {
                void *rows16 = aligned_alloc(64, (b16 + 63) / 64 * 64);
                if (!rows16) {
                    fprintf(stderr, "bench_isa: out of memory\n");
                    return 1;
                }
                rops_rows16_make(&w, rows16);
                struct rops_mat w16 = w;
                w16.rows16 = rows16;
                char what[64];
                snprintf(what, sizeof what, "%s rows16 %s n=1", type_names[ti], mats[mi].name);
                struct job j = {.w = &w16,
                                .x = x,
                                .n = 1,
                                .y = y,
                                .ex = {pool, nth, ROPS_ISA_AVX2, scratch, scratch_bytes}};
                bench_row(what, 2.0 * (double)(k * m), &j, &is, reps);
                free(rows16);
            }
        }
    /* the scan: d_inner 1536, d_state 16, one sequence */
    const int64_t Di = 1536, N = 16;
    float *state = calloc((size_t)(Di * N), sizeof(float)),
          *A = malloc(sizeof(float) * (size_t)(Di * N));
    float *dt = malloc(sizeof(float) * (size_t)(512 * Di)),
          *BC = malloc(sizeof(float) * (size_t)(512 * 2 * N));
    float *D = malloc(sizeof(float) * (size_t)Di);
    if (!state || !A || !dt || !BC || !D) {
        fprintf(stderr, "bench_isa: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < Di * N; i++) A[i] = -1.0f - 7.0f * (frand() * 0.5f + 0.5f);
    for (int64_t i = 0; i < 512 * Di; i++) dt[i] = 0.06f + 0.05f * frand();
    for (int64_t i = 0; i < 512 * 2 * N; i++) BC[i] = frand();
    for (int64_t i = 0; i < Di; i++) D[i] = frand();
    for (int64_t T = 1; T <= 512; T *= 512) {
        const struct rops_scan_args sa = {.state = state,
                                          .x = x,
                                          .dt = dt,
                                          .A = A,
                                          .B = BC,
                                          .C = BC + N,
                                          .bc_stride = 2 * N,
                                          .D = D,
                                          .z = x,
                                          .z_stride = Di,
                                          .n_seqs = 1,
                                          .n_tok = T,
                                          .d_inner = Di,
                                          .d_state = N,
                                          .y = y};
        char what[64];
        snprintf(what, sizeof what, "scan 1536x16 tokens=%lld", (long long)T);
        struct job j = {.scan = &sa, .ex = {pool, nth, ROPS_ISA_AVX2, NULL, 0}};
        bench_row(what, 4.0 * (double)(Di * N * T), &j, &is, reps);
    }
    /* the conv: d_inner 1536, d_conv 4, one sequence (its inputs the scan's x) */
    const int64_t K = 4;
    float *cst = calloc((size_t)(Di * (K - 1)), sizeof(float)),
          *cw = malloc(sizeof(float) * (size_t)(Di * K)),
          *cwl = malloc(sizeof(float) * (size_t)(Di * K));
    if (!cst || !cw || !cwl) {
        fprintf(stderr, "bench_isa: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < Di * K; i++) cw[i] = 0.5f * frand();
    for (int64_t c = 0; c < Di; c++) /* lag-major, as the model keeps them */
        for (int64_t k = 0; k < K; k++) cwl[k * Di + c] = cw[c * K + k];
    for (int64_t T = 1; T <= 512; T *= 512) {
        const struct rops_conv_args ca = {.state = cst,
                                          .x = x,
                                          .x_stride = Di,
                                          .n_seqs = 1,
                                          .n_tok = T,
                                          .d_inner = Di,
                                          .d_conv = K,
                                          .w = cw,
                                          .b = D,
                                          .w_lag = cwl,
                                          .xc = y};
        char what[64];
        snprintf(what, sizeof what, "conv 1536x4 tokens=%lld", (long long)T);
        struct job j = {.conv = &ca, .ex = {pool, nth, ROPS_ISA_AVX2, NULL, 0}};
        bench_row(what, 2.0 * (double)(Di * K * T), &j, &is, reps);
    }
    free(cst), free(cw), free(cwl);
    free(state), free(A), free(dt), free(BC), free(D);
    if (!bench_wkv(pool, nth, &is, reps)) {
        fprintf(stderr, "bench_isa: out of memory\n");
        return 1;
    }
    free(x), free(y), free(wf), free(wq), free(scratch);
    rpool_free(pool);
    return 0;
}
