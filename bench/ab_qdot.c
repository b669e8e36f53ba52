/*
 * ab_qdot: the one- to sixteen-input products of a K type by two builds of the AVX-512 kernel
 * table (rops_kernels_avx512_A and _B, made by bench/ab_qdot.sh from two versions of
 * x86/qdot_k.h), taking turns in one process: each round times both, in alternating order, over
 * the same weights, and the figure is the median of the rounds' B / A ratios with its quartiles.
 *
 *   ab_qdot TYPE THREADS ROUNDS LAYERS [N]
 *
 * TYPE the ggml type number (12 q4_K, 13 q5_K, 14 q6_K, 23 iq4_xs); LAYERS pairs of a
 * mamba-130m-shaped in_proj (768 -> 3072) and out_proj (1536 -> 768) of random blocks (1: 2 MB,
 * in the caches; 48: ~96 MB of q4_K, from memory); N inputs (default 1). The rows are shared out
 * among THREADS threads of a pool as rops_qmatmul shares them. Also checks that both builds give
 * the same bits (the kernels' promise is one order of float steps per input). Exits 1 when they
 * do not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops.h"
#include "ops/ops_impl.h"
#include "ops/ops_quants.h"
#include "pool/pool.h"

const struct rops_kernels *rops_kernels_avx512_A(void);
const struct rops_kernels *rops_kernels_avx512_B(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct job {
    const struct rops_kernels *k;
    struct rops_qdot_args a;
};

/* rops_qmatmul's split (blocks of 8 rows, evenly) and its tiles of columns */
static void job_thread(void *arg, int ith, int nth) {
    const struct job *j = arg;
    const int64_t m = j->a.w->n_rows, blocks = (m + 7) / 8;
    int64_t r0 = blocks * ith / nth * 8, r1 = blocks * (ith + 1) / nth * 8;
    if (r1 > m) r1 = m;
    if (r0 < r1) rops_qmatmul_rows(j->k, j->a.w, j->a.xq, j->a.n, j->a.y, r0, r1);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: ab_qdot TYPE THREADS ROUNDS LAYERS [N]\n");
        return 2;
    }
    const enum rops_type type = (enum rops_type)atoi(argv[1]);
    const int nth = atoi(argv[2]), rounds = atoi(argv[3]), layers = atoi(argv[4]);
    const int n = argc > 5 ? atoi(argv[5]) : 1;
    if (!rops_qmatmul_type(type) || rops_dot_partner(type) != ROPS_TYPE_Q8_K || nth < 1 ||
        rounds < 2 || rounds > 1000 || layers < 1 || layers > 256 || n < 1 || n > 16) {
        fprintf(stderr, "ab_qdot: a K type (q2_K..q6_K, iq4_xs), 1+ threads, 2..1000 rounds, "
                        "1..256 layers, 1..16 inputs\n");
        return 2;
    }
    static const int64_t shapes[2][2] = {{768, 3072}, {1536, 768}}; /* columns, rows */
    struct rops_mat *w = calloc(2 * (size_t)layers, sizeof *w);
    float *x = malloc(sizeof(float) * 1536 * (size_t)n);
    float *y[2] = {malloc(sizeof(float) * 3072 * (size_t)n),
                   malloc(sizeof(float) * 3072 * (size_t)n)};
    if (!w || !x || !y[0] || !y[1]) return 1;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t total = 0;
    const size_t bb = rops_row_bytes(type, ROPS_QK_K);
    /* where the type keeps d (and dmin): set to 2^-7 so that every block is finite */
    const size_t d_at = type == ROPS_TYPE_Q6_K || type == ROPS_TYPE_Q3_K ? bb - 2
                        : type == ROPS_TYPE_Q2_K                         ? bb - 4
                                                                         : 0;
    const bool has_dmin =
        type == ROPS_TYPE_Q2_K || type == ROPS_TYPE_Q4_K || type == ROPS_TYPE_Q5_K;
    for (int i = 0; i < 2 * layers; i++) {
        struct rops_mat *m = &w[i];
        m->type = type;
        m->n_cols = shapes[i % 2][0];
        m->n_rows = shapes[i % 2][1];
        m->row_bytes = rops_row_bytes(type, m->n_cols);
        const size_t bytes = m->row_bytes * (size_t)m->n_rows;
        uint8_t *d = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!d) return 1;
        for (size_t o = 0; o < bytes; o++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            d[o] = (uint8_t)(rng >> 56);
        }
        const uint16_t h = 0x2000;
        for (size_t o = 0; o < bytes; o += bb) {
            memcpy(d + o + d_at, &h, 2);
            if (has_dmin) memcpy(d + o + d_at + 2, &h, 2);
        }
        m->data = d;
        total += bytes;
    }
    for (int i = 0; i < 1536 * n; i++) x[i] = (float)(i * 7919 % 2001) / 1000.0f - 1.0f;
    const struct rops_kernels *k[2] = {rops_kernels_avx512_A(), rops_kernels_avx512_B()};
    uint8_t *xq[2];
    size_t stride[2];
    for (int j = 0; j < 2; j++) {
        stride[j] = rops_qmatmul_input_bytes(type, shapes[j][0]);
        if (!(xq[j] = aligned_alloc(64, (stride[j] * (size_t)n + 63) & ~(size_t)63))) return 1;
        rops_qmatmul_quantize(k[0], &w[j], x, n, xq[j]);
    }
    struct rpool *pool = nth > 1 ? rpool_create(nth) : NULL;
    if (nth > 1 && !pool) return 1;
    /* the same bits from both */
    for (int v = 0; v < 2; v++) {
        struct job j = {k[v], {&w[0], 0, 768, xq[0], stride[0], n, y[v], 3072, false}};
        rpool_run(pool, job_thread, &j, nth);
    }
    const bool same = memcmp(y[0], y[1], sizeof(float) * 3072 * (size_t)n) == 0;
    double *gbps[2] = {malloc(sizeof(double) * (size_t)rounds),
                       malloc(sizeof(double) * (size_t)rounds)};
    double *ratio = malloc(sizeof(double) * (size_t)rounds);
    if (!gbps[0] || !gbps[1] || !ratio) return 1;
    const int passes = layers >= 8 ? 4 : 200; /* ~0.1-0.4 s a build a round */
    for (int r = 0; r < rounds; r++) {
        for (int q = 0; q < 2; q++) {
            const int v = (r + q) % 2;
            const double t0 = now_s();
            for (int p = 0; p < passes; p++)
                for (int i = 0; i < 2 * layers; i++) {
                    struct job j = {k[v],
                                    {&w[i], 0, w[i].n_cols, xq[i % 2], stride[i % 2], n, y[v],
                                     w[i].n_rows, false}};
                    rpool_run(pool, job_thread, &j, nth);
                }
            gbps[v][r] = (double)total * passes / (now_s() - t0) / 1e9;
        }
        ratio[r] = gbps[1][r] / gbps[0][r];
    }
    qsort(gbps[0], (size_t)rounds, sizeof(double), cmp_double);
    qsort(gbps[1], (size_t)rounds, sizeof(double), cmp_double);
    qsort(ratio, (size_t)rounds, sizeof(double), cmp_double);
    printf("type %d, %d input(s), %d thread(s), %.1f MB of weights: A %.1f GB/s, B %.1f GB/s "
           "(medians); B / A %.3f (quartiles %.3f %.3f); same bits: %s\n",
           (int)type, n, nth, (double)total / 1e6, gbps[0][rounds / 2], gbps[1][rounds / 2],
           ratio[rounds / 2], ratio[rounds / 4], ratio[3 * rounds / 4], same ? "yes" : "NO");
    rpool_free(pool);
    return same ? 0 : 1;
}
