/*
 * The kernels (src/ops) and the thread pool (src/pool): every matmul weight type (f32, f16,
 * bf16, q8_0, q4_0) on every ISA path this CPU has, 1 and 2 threads, sizes that are not
 * multiples of the vector, tile or block width, against a float64 reference written here from
 * ggml's block layouts; the conv and scan paths against a float64 reference; and the pool's
 * guarantees (each index once, calls back to back, calls after the workers went to sleep, and
 * all of that again pinned to one CPU, where a pool has more threads than CPUs).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_setaffinity: the pool pinned to one CPU */
#endif
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "ops/ops.h"
#include "ops/ops_impl.h"
#include "pool/pool.h"
#include "ops_util.h"
#include "test.h"

static unsigned long long rng = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    return (float)((double)(test_rand(&rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ---- pool ---------------------------------------------------------------------------------- */

struct count_task {
    _Atomic int hits[8];
    _Atomic int calls;
    _Atomic int bad; /* calls with ith out of [0, nth) (CHECK is not thread-safe) */
};

static void count_fn(void *arg, int ith, int nth) {
    struct count_task *t = arg;
    if (ith < 0 || ith >= nth || ith >= 8) {
        atomic_fetch_add(&t->bad, 1);
        return;
    }
    atomic_fetch_add(&t->hits[ith], 1);
    atomic_fetch_add(&t->calls, 1);
}

/* Pools of 1 to 4 threads: every index once a call, back to back and after the workers slept. */
static void check_pool_calls(void) {
    struct count_task t;
    for (int n = 1; n <= 4; n++) {
        struct rpool *p = rpool_create(n);
        REQUIRE(p);
        CHECK(rpool_size(p) == n);
        for (int nth = 1; nth <= 6; nth++) {
            memset(&t, 0, sizeof t);
            const int runs = 2000;
            for (int r = 0; r < runs; r++) rpool_run(p, count_fn, &t, nth);
            const int used = nth < n ? nth : n;
            CHECK_MSG(t.calls == runs * used && t.bad == 0, "pool %d, nth %d: %d calls", n, nth,
                      t.calls);
            for (int i = 0; i < 8; i++) CHECK(t.hits[i] == (i < used ? runs : 0));
        }
        /* after the workers went to sleep (past their spin), a call still wakes them */
        memset(&t, 0, sizeof t);
        for (int r = 0; r < 3; r++) {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            rpool_run(p, count_fn, &t, n);
        }
        CHECK(t.calls == 3 * n);
        rpool_free(p);
    }
}

static void test_pool(void) {
    CHECK(rpool_create(0) == NULL);
    CHECK_ERR("0 threads requested");
    CHECK(rpool_size(NULL) == 1);
    struct count_task t;
    memset(&t, 0, sizeof t);
    rpool_run(NULL, count_fn, &t, 4); /* no pool: the caller alone */
    CHECK(t.calls == 1 && t.hits[0] == 1);
    check_pool_calls();
    rpool_free(NULL);
}

/* The same calls with the process pinned to one CPU (threads inherit it): every pool of two or
 * more threads has more threads than CPUs, the case where the waits yield the CPU at once. */
static void test_pool_one_cpu(void) {
    cpu_set_t given, one;
    REQUIRE(sched_getaffinity(0, sizeof given, &given) == 0);
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &given)) first++;
    REQUIRE(first < CPU_SETSIZE);
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    check_pool_calls();
    REQUIRE(sched_setaffinity(0, sizeof given, &given) == 0);
}

/* A shared call's work: each thread's part of `total` units, and a busy loop of `slow[ith]`
 * spins a unit (thread 1 made slower than thread 0, as a busy core is). */
struct share_task {
    const struct rpool *pool;
    int64_t total;
    int slow[4];
    int64_t lo[4], hi[4];
    _Atomic int bad;
    volatile unsigned sink[4 * 16];
};

static void share_fn(void *arg, int ith, int nth) {
    struct share_task *t = arg;
    const int64_t lo = rpool_share(t->pool, ith, nth, t->total),
                  hi = rpool_share(t->pool, ith + 1, nth, t->total);
    if (lo > hi || lo < 0 || hi > t->total) atomic_fetch_add(&t->bad, 1);
    t->lo[ith] = lo;
    t->hi[ith] = hi;
    unsigned x = (unsigned)ith;
    for (int64_t u = lo; t->slow[ith] > 0 && u < hi; u++) /* slow 0: the split alone */
        for (int k = 0; k < t->slow[ith]; k++) x = x * 1664525u + 1013904223u;
    t->sink[ith * 16] = x;
}

/* rpool_run_keyed's parts: they tile [0, total) whatever the pool has learnt, start even, and
 * move work off a thread that runs its parts at half the speed (towards a third of it) or a
 * tenth (down to the floor, a fifth); rpool_run's calls and no pool split evenly. */
static void test_pool_shared(void) {
    CHECK(rpool_share(NULL, 1, 3, 300) == 100 && rpool_share(NULL, 3, 3, 300) == 300);
    const int slows[3][2] = {{40, 40}, {40, 80}, {40, 400}};
    const double lo_part[3] = {0.3, 0.25, 0.19}, hi_part[3] = {0.7, 0.42, 0.23};
    for (int c = 0; c < 3; c++) {
        struct rpool *p = rpool_create(2);
        REQUIRE(p);
        struct share_task t = {.pool = p, .total = 2000, .slow = {slows[c][0], slows[c][1]}};
        rpool_run_keyed(p, share_fn, &t, 2, NULL);
        CHECK_MSG(t.hi[0] == 1000 && t.lo[1] == 1000, "first shared call: %lld | %lld",
                  (long long)t.hi[0], (long long)t.lo[1]);
        for (int r = 0; r < 400; r++) rpool_run_keyed(p, share_fn, &t, 2, NULL);
        const double part1 = (double)(t.hi[1] - t.lo[1]) / (double)t.total;
        CHECK_MSG(t.bad == 0 && t.lo[0] == 0 && t.hi[0] == t.lo[1] && t.hi[1] == t.total &&
                      part1 > lo_part[c] && part1 < hi_part[c],
                  "thread 1 %d spins a unit against %d: its part %.3f (%.2f..%.2f expected)",
                  slows[c][1], slows[c][0], part1, lo_part[c], hi_part[c]);
        /* a plain call of the same pool splits evenly, and the next shared one resumes */
        rpool_run(p, share_fn, &t, 2);
        CHECK(t.hi[0] == 1000 && t.lo[1] == 1000);
        /* totals past 2^40 split without overflow, the parts still tiling them */
        t.slow[0] = t.slow[1] = 0;
        t.total = (int64_t)1 << 50;
        rpool_run_keyed(p, share_fn, &t, 2, NULL);
        CHECK(t.bad == 0 && t.lo[0] == 0 && t.hi[0] == t.lo[1] && t.hi[1] == t.total &&
              t.hi[0] > t.total / 8);
        rpool_free(p);
    }
}

/* Keys keep their own speeds: two call sites, one slow on thread 1 and one on thread 0, called
 * in turn, learn opposite splits (one set of speeds for both would settle near even); a key new
 * to the pool starts even, and past the pool's table of keys (hundreds of sites) every call still
 * tiles [0, total) and a site called again resumes or restarts from even parts. */
static void test_pool_keys(void) {
    struct rpool *p = rpool_create(2);
    REQUIRE(p);
    struct share_task a = {.pool = p, .total = 2000, .slow = {40, 200}},
                      b = {.pool = p, .total = 2000, .slow = {200, 40}};
    int key_a, key_b;
    for (int r = 0; r < 400; r++) {
        rpool_run_keyed(p, share_fn, &a, 2, &key_a);
        rpool_run_keyed(p, share_fn, &b, 2, &key_b);
    }
    const double part_a = (double)(a.hi[1] - a.lo[1]) / 2000,
                 part_b = (double)(b.hi[1] - b.lo[1]) / 2000;
    CHECK_MSG(a.bad == 0 && b.bad == 0 && part_a < 0.35 && part_b > 0.65,
              "thread 1's parts: %.3f of key a's (slow there), %.3f of key b's (fast there)",
              part_a, part_b);
    /* a new key: even parts at its first call */
    int key_c;
    struct share_task c = {.pool = p, .total = 2000};
    rpool_run_keyed(p, share_fn, &c, 2, &key_c);
    CHECK(c.hi[0] == 1000 && c.lo[1] == 1000);
    /* many more keys than the table holds (addresses one byte apart, never dereferenced) */
    static const char many[4096];
    for (int k = 0; k < 4096; k++) {
        c.total = 1000 + k;
        rpool_run_keyed(p, share_fn, &c, 2, many + k);
        if (c.lo[0] != 0 || c.hi[0] != c.lo[1] || c.hi[1] != c.total) c.bad++;
    }
    CHECK_MSG(c.bad == 0, "%d calls of 4096 keys did not tile their work", (int)c.bad);
    rpool_run_keyed(p, share_fn, &a, 2, &key_a);
    CHECK(a.bad == 0 && a.lo[0] == 0 && a.hi[0] == a.lo[1] && a.hi[1] == a.total);
    rpool_free(p);
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* A random matrix in a ggml type, and its exact values (as float64) for the reference. */
struct test_mat {
    struct rops_mat m;
    uint8_t *bytes;
    double *exact; /* n_rows x n_cols */
};

static size_t row_bytes(uint32_t type, int64_t k) {
    switch (type) {
    case 0:
        return 4 * (size_t)k;
    case 1:
    case 30:
        return 2 * (size_t)k;
    case 8:
        return (size_t)k / 32 * 34;
    case 2:
        return (size_t)k / 32 * 18;
    }
    return 0;
}

static void put_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static struct test_mat make_mat(uint32_t type, int64_t rows, int64_t k) {
    struct test_mat t;
    const size_t rb = row_bytes(type, k);
    t.bytes = malloc(rb * (size_t)rows);
    t.exact = malloc(sizeof(double) * (size_t)(rows * k));
    REQUIRE(t.bytes && t.exact);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = t.bytes + (size_t)r * rb;
        double *ex = t.exact + r * k;
        if (type == 0 || type == 1 || type == 30) {
            for (int64_t c = 0; c < k; c++) {
                float v = frand();
                if (type == 0) {
                    memcpy(row + 4 * c, &v, 4);
                    ex[c] = v;
                } else if (type == 1) {
                    uint16_t h = rcore_f32_to_f16(v);
                    put_u16(row + 2 * c, h);
                    ex[c] = rcore_f16_to_f32(h);
                } else {
                    uint16_t h = rcore_f32_to_bf16(v);
                    put_u16(row + 2 * c, h);
                    ex[c] = rcore_bf16_to_f32(h);
                }
            }
        } else {
            /* blocks as ggml lays them out: f16 scale d, then the quants; value = d * q */
            for (int64_t b = 0; b < k / 32; b++) {
                const float d = 0.01f + 0.05f * (frand() + 1.0f);
                const uint16_t dh = rcore_f32_to_f16(d);
                const double dd = rcore_f16_to_f32(dh);
                if (type == 8) {
                    uint8_t *blk = row + b * 34;
                    put_u16(blk, dh);
                    for (int j = 0; j < 32; j++) {
                        int q = (int)(frand() * 127.0f);
                        blk[2 + j] = (uint8_t)(int8_t)q;
                        ex[b * 32 + j] = dd * q;
                    }
                } else {
                    uint8_t *blk = row + b * 18;
                    put_u16(blk, dh);
                    for (int j = 0; j < 16; j++) {
                        int lo = test_rand_int(&rng, 16), hi = test_rand_int(&rng, 16);
                        blk[2 + j] = (uint8_t)(lo | (hi << 4));
                        ex[b * 32 + j] = dd * (lo - 8);
                        ex[b * 32 + j + 16] = dd * (hi - 8);
                    }
                }
            }
        }
    }
    t.m = (struct rops_mat){t.bytes, type, k, rows, rb, NULL};
    return t;
}

static void free_mat(struct test_mat *t) {
    free(t->bytes);
    free(t->exact);
}

/* The inputs a matmul with block weights multiplies: each 32-block through q8_0 as ggml's
 * reference quantizer does it (f32 arithmetic, d = max|x| / 127 kept as f16, q = roundf(x / d)). */
static void ggml_q8_inputs(const float *x, int64_t n, double *out) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const double dh = rcore_f16_to_f32(rcore_f32_to_f16(d));
        for (int j = 0; j < 32; j++) out[b * 32 + j] = dh * roundf(x[b * 32 + j] * id);
    }
}

/* y from every path against the float64 product; error relative to sum |w||x| of the dot. */
static void check_matmul(struct rpool *pool, uint32_t type, int64_t rows, int64_t k, int64_t n) {
    struct test_mat w = make_mat(type, rows, k);
    float *x = malloc(sizeof(float) * (size_t)(n * k));
    double *xm = malloc(sizeof(double) * (size_t)(n * k)); /* what the product multiplies */
    float *y = malloc(sizeof(float) * (size_t)(n * rows));
    float *y1 = malloc(sizeof(float) * (size_t)rows),
          *y2 = malloc(sizeof(float) * (size_t)(n * rows));
    float *row = malloc(sizeof(float) * (size_t)k);
    const size_t scratch_bytes = rops_matmul_scratch_bytes(&w.m, n);
    void *scratch = malloc(scratch_bytes + 1);
    REQUIRE(x && xm && y && y1 && y2 && row && scratch);
    const bool blocks = type == 8 || type == 2;
    CHECK((scratch_bytes > 0) == (blocks && n > 3)); /* the quantized inputs of a group */
    for (int64_t i = 0; i < n * k; i++) x[i] = frand();
    for (int64_t i = 0; i < n; i++) {
        if (blocks)
            ggml_q8_inputs(x + i * k, k, xm + i * k);
        else
            for (int64_t c = 0; c < k; c++) xm[i * k + c] = x[i * k + c];
    }

    /* rops_get_row gives the exact values */
    for (int64_t r = 0; r<rows; r += rows> 3 ? rows - 1 : 1) {
        rops_get_row(&w.m, r, row);
        bool same = true;
        for (int64_t c = 0; c < k; c++) same &= row[c] == (float)w.exact[r * k + c];
        CHECK_MSG(same, "get_row: type %u row %lld", w.m.type, (long long)r);
    }
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++) {
        /* threads 1 and 2 with the scratch the call wants; 2 threads with a scratch for
           5 inputs (groups of 5, then the rest) and with none (three at a time) */
        for (int run = 0; run < 4; run++) {
            const int nth = run == 0 ? 1 : 2;
            size_t sb = run < 2 ? scratch_bytes : run == 2 ? 5 * (size_t)k * sizeof(float) : 0;
            if (sb > scratch_bytes) sb = scratch_bytes;
            if (run >= 2 && !(blocks && n > 3)) break;
            const struct rops_exec ex = {pool, nth, isas[ii], sb ? scratch : NULL, sb, false};
            memset(y, 0xff, sizeof(float) * (size_t)(n * rows)); /* NaNs: every slot is written */
            rops_matmul(&ex, &w.m, x, n, y);
            double worst = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < rows; r++) {
                    double want = 0, mag = 0;
                    for (int64_t c = 0; c < k; c++) {
                        want += w.exact[r * k + c] * xm[i * k + c];
                        mag += fabs(w.exact[r * k + c] * xm[i * k + c]);
                    }
                    double err = fabs(y[i * rows + r] - want) / (mag + 1e-30);
                    if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
                }
            CHECK_MSG(worst < 1e-6,
                      "matmul %s type %u rows %lld k %lld n %lld threads %d scratch %zu: "
                      "relative error %g",
                      rops_isa_name(isas[ii]), type, (long long)rows, (long long)k, (long long)n,
                      nth, sb, worst);
        }
        /* each input's bits those of the input alone: block weights always, float weights with
           one_order (then also in a batch of jobs) */
        for (int one_order = 0; one_order < 2; one_order++) {
            const struct rops_exec ex = {pool, 2, isas[ii], scratch, scratch_bytes, one_order};
            rops_matmul(&ex, &w.m, x, n, y);
            struct rops_matjob job = {&w.m, x, n, y2};
            rops_matmul_batch(&ex, &job, 1);
            int differ = 0, differ_batch = 0;
            for (int64_t i = 0; i < n; i++) {
                rops_matmul(&ex, &w.m, x + i * k, 1, y1);
                differ += memcmp(y1, y + i * rows, sizeof(float) * (size_t)rows) != 0;
                differ_batch += memcmp(y1, y2 + i * rows, sizeof(float) * (size_t)rows) != 0;
            }
            if (one_order || blocks)
                CHECK_MSG(differ == 0 && differ_batch == 0,
                          "matmul %s type %u rows %lld k %lld n %lld one_order %d: %d inputs "
                          "differ alone, %d in a batch",
                          rops_isa_name(isas[ii]), type, (long long)rows, (long long)k,
                          (long long)n, one_order, differ, differ_batch);
        }
    }
    free(x);
    free(xm);
    free(scratch);
    free(y);
    free(y1);
    free(y2);
    free(row);
    free_mat(&w);
}

static void test_matmul(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const uint32_t float_types[] = {0, 1, 30}, block_types[] = {8, 2};
    const int64_t rows[] = {1, 3, 4, 5, 13, 64};
    const int64_t float_k[] = {1, 7, 8, 33, 300, 600}, block_k[] = {32, 64, 288, 544};
    const int64_t ns[] = {1, 2, 3, 4, 7, 16};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t ri = 0; ri < 6; ri++)
            for (size_t ki = 0; ki < 6; ki++)
                check_matmul(pool, float_types[ti], rows[ri], float_k[ki], ns[(ri + ki) % 6]);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ri = 0; ri < 6; ri++)
            for (size_t ki = 0; ki < 4; ki++)
                check_matmul(pool, block_types[ti], rows[ri], block_k[ki], ns[(ri + ki) % 6]);
    /* the prompt kernels' edges: blocks of 8 and 16 rows with a partial last one, groups of
       6 inputs with a partial last one, more inputs than one pass (ROPS_NI) */
    const int64_t edge_rows[] = {8, 17, 31, 33, 40}, edge_n[] = {5, 6, 7, 13, 50};
    for (size_t ri = 0; ri < 5; ri++)
        for (size_t ni = 0; ni < 5; ni++) {
            check_matmul(pool, float_types[(ri + ni) % 3], edge_rows[ri], ni % 2 ? 300 : 33,
                         edge_n[ni]);
            check_matmul(pool, block_types[(ri + ni) % 2], edge_rows[ri], ni % 2 ? 288 : 64,
                         edge_n[ni]);
        }
    /* a large one, so that the work is split among the threads */
    check_matmul(pool, 1, 200, 768, 5);
    check_matmul(pool, 8, 130, 512, 3);
    /* rows longer than one tile of columns (ROPS_KT), with a partial last tile */
    check_matmul(pool, 1, 37, 2100, 5);
    check_matmul(pool, 0, 9, 1031, 4);
    check_matmul(pool, 8, 21, 1088, 6);
    check_matmul(pool, 2, 13, 2080, 1);
    /* inputs longer than one tile of quantized columns (4096), with a partial last tile */
    check_matmul(pool, 8, 9, 8224, 2);
    /* prompts through the x86 panels: more than a panel's blocks, tiles, inputs and rows */
    check_matmul(pool, 8, 37, 4160, 20);
    check_matmul(pool, 2, 19, 1088, 150);
    check_matmul(pool, 2, 11, 4128, 3);
    CHECK(rops_type_supported(8, 64) && !rops_type_supported(8, 48));
    CHECK(rops_type_supported(2, 32) && !rops_type_supported(2, 33));
    CHECK(rops_type_supported(1, 33) && !rops_type_supported(16, 256) &&
          !rops_type_supported(3, 48));
    rpool_free(pool);
}

/* The integer dots of block weights (one to three inputs) on the vector paths: the AVX-512
 * path's VNNI sums and the float steps after them are the AVX2 path's, so their results are the
 * same bits (the float64 reference above checks each path's accuracy). */
static void test_block_dots_agree(void) {
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    int first_vec = -1;
    for (int ii = 0; ii < n_isas; ii++)
        if (isas[ii] != ROPS_ISA_SCALAR && first_vec < 0) first_vec = ii;
    if (first_vec < 0 || n_isas - first_vec < 2) {
        printf("SKIP: block dots across vector paths (fewer than two on this CPU)\n");
        return;
    }
    const uint32_t types[2] = {8, 2};
    const int64_t rows = 37, k = 4096 + 288; /* two column tiles, a partial last one */
    float *x = malloc(sizeof(float) * (size_t)(3 * k));
    float *y0 = malloc(sizeof(float) * (size_t)(3 * rows)),
          *y1 = malloc(sizeof(float) * (size_t)(3 * rows));
    REQUIRE(x && y0 && y1);
    for (int64_t i = 0; i < 3 * k; i++) x[i] = frand();
    for (int ti = 0; ti < 2; ti++) {
        struct test_mat w = make_mat(types[ti], rows, k);
        for (int64_t n = 1; n <= 3; n++) {
            const struct rops_exec e0 = {NULL, 1, isas[first_vec], NULL, 0, false};
            rops_matmul(&e0, &w.m, x, n, y0);
            for (int ii = first_vec + 1; ii < n_isas; ii++) {
                const struct rops_exec e1 = {NULL, 1, isas[ii], NULL, 0, false};
                rops_matmul(&e1, &w.m, x, n, y1);
                CHECK_MSG(memcmp(y0, y1, sizeof(float) * (size_t)(n * rows)) == 0,
                          "type %u n %lld: %s and %s differ", types[ti], (long long)n,
                          rops_isa_name(isas[first_vec]), rops_isa_name(isas[ii]));
            }
        }
        free_mat(&w);
    }
    free(x);
    free(y0);
    free(y1);
}

/* Quantizing rounds to the nearest step of each block's scale (q4_0: within one step, the
 * top value being clamped at 7 steps), and matches ggml's choice of scale. */
static void test_quantize(void) {
    float x[96], back[96];
    uint8_t q[3 * 34];
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < 96; i++) x[i] = frand() * (rep % 2 ? 100.0f : 0.01f);
        if (rep == 3) memset(x + 32, 0, 32 * sizeof(float)); /* an all-zero block */
        const uint32_t types[2] = {8, 2};
        for (int ti = 0; ti < 2; ti++) {
            REQUIRE(rops_quantize_row(types[ti], x, 96, q));
            const struct rops_mat m = {q, types[ti], 96, 1, rops_row_bytes(types[ti], 96), NULL};
            rops_get_row(&m, 0, back);
            for (int b = 0; b < 3; b++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
                const float step = ti == 0 ? amax / 127 : amax / 8;
                float worst = 0;
                for (int j = 0; j < 32; j++)
                    worst = fmaxf(worst, fabsf(back[b * 32 + j] - x[b * 32 + j]));
                /* half a step, plus the f16 rounding of the scale over up to 127 steps */
                CHECK_MSG(worst <= step * (ti == 0 ? 0.57f : 1.01f),
                          "%s block %d: error %g, step %g", ti == 0 ? "q8_0" : "q4_0", b,
                          (double)worst, (double)step);
            }
        }
    }
    CHECK(rops_row_bytes(8, 64) == 68 && rops_row_bytes(2, 64) == 36);
    CHECK(rops_row_bytes(0, 5) == 20 && rops_row_bytes(8, 40) == 0);
    CHECK(!rops_quantize_row(8, x, 40, q) && !rops_quantize_row(1, x, 32, q));
}

/* The activations of a block-weight matmul: both paths quantize to the same bits as the
 * q8_0 weight quantizer (rops_quantize_row), ties and near-ties of x / d included. */
static void test_quantize_inputs(void) {
    enum { NB = 40 };
    static float x[NB * 32];
    static struct rops_xq8 qs[NB], qv[NB];
    static uint8_t ref[NB * 34];
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < NB * 32; i++) x[i] = frand() * (rep % 3 == 0 ? 1e3f : 1.0f);
        /* per block: the max at 127 steps, then values on and beside half steps */
        for (int b = 0; b < NB; b++) {
            float *xb = x + 32 * b;
            xb[0] = 127.0f * (rep + 1);
            const float d = xb[0] / 127.0f;
            for (int j = 1; j < 32; j++) {
                const float half = ((float)(j % 9) - 4.5f) * d;
                if (b % 3 == 1) xb[j] = half;
                if (b % 3 == 2) xb[j] = nextafterf(half, j % 2 ? 1e9f : -1e9f);
            }
            if (b == 5) xb[7] = nextafterf(0.5f * d, 0.0f); /* 0.49999997 steps */
            if (b == 6) memset(xb, 0, 32 * sizeof(float));
        }
        rops_kernels_scalar.quantize_x(x, NB, qs);
        int diff = 0, off_ref = 0;
        /* every vector path against the portable one */
        enum rops_isa isas[ROPS_ISA_COUNT];
        const int n_isas = test_isas(isas);
        for (int ii = 1; ii < n_isas; ii++) {
            rops_kernels_of(isas[ii])->quantize_x(x, NB, qv);
            for (int b = 0; b < NB; b++)
                diff += memcmp(qs[b].qs, qv[b].qs, 32) != 0 || qs[b].d != qv[b].d;
        }
        REQUIRE(rops_quantize_row(8, x, NB * 32, ref));
        for (int b = 0; b < NB; b++) {
            const uint16_t dh = (uint16_t)(ref[34 * b] | ref[34 * b + 1] << 8);
            off_ref +=
                memcmp(qs[b].qs, ref + 34 * b + 2, 32) != 0 || qs[b].d != rcore_f16_to_f32(dh);
        }
        CHECK_MSG(diff == 0, "rep %d: %d blocks differ between the scalar and a vector path", rep,
                  diff);
        CHECK_MSG(off_ref == 0, "rep %d: %d blocks differ from rops_quantize_row", rep, off_ref);
    }
}

/* softplus(x + bias) on every path, against log1p(exp()) in float64, from -40 to 40 */
static void test_softplus(void) {
    enum { ROWS = 3, COLS = 347 };
    static float x[ROWS * COLS], bias[COLS], y[ROWS * COLS];
    for (int c = 0; c < COLS; c++) bias[c] = frand() * 0.5f;
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++) {
        for (int i = 0; i < ROWS * COLS; i++)
            x[i] = y[i] = -40.0f + 80.0f * (float)i / (ROWS * COLS);
        rops_softplus_bias(isas[ii], y, bias, ROWS, COLS);
        double worst = 0;
        for (int i = 0; i < ROWS * COLS; i++) {
            const double v = (double)x[i] + bias[i % COLS];
            const double want = v > 0 ? v + log1p(exp(-v)) : log1p(exp(v));
            worst = fmax(worst, fabs(y[i] - want) / want);
        }
        CHECK_MSG(worst < 4e-6, "softplus %s: relative error %g", rops_isa_name(isas[ii]), worst);
    }
}

/* rops_map on every path and thread count, each function against float64, on rows of a
 * length that is not a multiple of the vectors, with and without a bias, a row stride wider
 * than the row (the values between rows must stay untouched), from -30 to 30. Tolerance: max
 * |got - want| / (1e-6 + |want|) < 1e-5 (the vector e^x is within a few ulp; each function
 * takes one or two of them and a division), except tanh, whose vector form is within ~2e-7 of
 * it absolutely: |got - want| < 1e-6. */
static double map64(enum rops_map f, double v) {
    switch (f) {
    case ROPS_MAP_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    case ROPS_MAP_TANH:
        return tanh(v);
    case ROPS_MAP_SILU:
        return v / (1.0 + exp(-v));
    case ROPS_MAP_RELU_SQ:
        return v > 0 ? v * v : 0.0;
    case ROPS_MAP_EXP_NEG_EXP:
        return exp(-exp(v));
    case ROPS_MAP_RWKV7_DECAY:
        return exp(-exp(-0.5) / (1.0 + exp(-v)));
    case ROPS_MAP_COUNT:
        break;
    }
    return v;
}

static void test_map(void) {
    enum { ROWS = 151, COLS = 347, LD = 351 }; /* 52k values: 3 threads take a share each */
    static float x[ROWS * LD], bias[COLS], y[ROWS * LD];
    for (int c = 0; c < COLS; c++) bias[c] = frand() * 0.5f;
    struct rpool *pool = rpool_create(3);
    CHECK(pool != NULL);
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++)
        for (int nth = 1; nth <= 3; nth += 2)
            for (int f = 0; f < ROPS_MAP_COUNT; f++)
                for (int wb = 0; wb < 2; wb++) {
                    for (int i = 0; i < ROWS * LD; i++)
                        x[i] = y[i] =
                            -30.0f + 60.0f * (float)((i * 7919) % (ROWS * LD)) / (ROWS * LD);
                    const struct rops_exec ex = {pool, nth, isas[ii], NULL, 0, false};
                    rops_map(&ex, (enum rops_map)f, y, LD, wb ? bias : NULL, ROWS, COLS);
                    double worst = 0;
                    int64_t touched = 0;
                    for (int i = 0; i < ROWS * LD; i++) {
                        if (i % LD >= COLS) {
                            touched += y[i] != x[i];
                            continue;
                        }
                        const double v = (double)x[i] + (wb ? bias[i % LD] : 0.0f);
                        const double want = map64((enum rops_map)f, v), d = fabs(y[i] - want);
                        worst = fmax(worst, f == ROPS_MAP_TANH ? d : d / (1e-6 + fabs(want)));
                    }
                    CHECK_MSG(worst < (f == ROPS_MAP_TANH ? 1e-6 : 1e-5) && touched == 0,
                              "map %d %s, %d threads, bias %d: error %g, %lld values between "
                              "rows written",
                              f, rops_isa_name(isas[ii]), nth, wb, worst, (long long)touched);
                }
    rpool_free(pool);
}

/* ---- conv and scan ------------------------------------------------------------------------- */

static double silu64(double v) {
    return v / (1.0 + exp(-v));
}

static void test_ssm(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const int64_t shapes[][4] = {/* n_seqs, n_tok, d_inner, d_state */
                                 {1, 1, 8, 16},
                                 {3, 5, 24, 16},
                                 {2, 7, 13, 8},
                                 {4, 3, 40, 5},
                                 {2, 9, 1536 / 8, 16},
                                 {3, 2, 37, 16},
                                 /* a 130m layer's channels: the kernels' window buffer on the
                                    stack with w_lag, allocated without it on one thread */
                                 {1, 2, 1536, 16}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t S = shapes[si][0], T = shapes[si][1], Di = shapes[si][2], N = shapes[si][3];
        const int64_t K = 4, n = S * T;
        float *xz = malloc(sizeof(float) * (size_t)(n * 2 * Di)),
              *w = malloc(sizeof(float) * (size_t)(Di * K));
        float *wl = malloc(sizeof(float) * (size_t)(Di * K)); /* w lag-major (w_lag) */
        float *b = malloc(sizeof(float) * (size_t)Di),
              *conv0 = malloc(sizeof(float) * (size_t)(S * Di * (K - 1)));
        float *dt = malloc(sizeof(float) * (size_t)(n * Di)),
              *A = malloc(sizeof(float) * (size_t)(Di * N));
        float *BC = malloc(sizeof(float) * (size_t)(n * 2 * N)),
              *D = malloc(sizeof(float) * (size_t)Di);
        float *ssm0 = malloc(sizeof(float) * (size_t)(S * Di * N));
        float *conv = malloc(sizeof(float) * (size_t)(S * Di * (K - 1))),
              *ssm = malloc(sizeof(float) * (size_t)(S * Di * N));
        float *xc = malloc(sizeof(float) * (size_t)(n * Di)),
              *y = malloc(sizeof(float) * (size_t)(n * Di));
        double *rconv = malloc(sizeof(double) * (size_t)(S * Di * (K - 1))),
               *rssm = malloc(sizeof(double) * (size_t)(S * Di * N));
        double *rxc = malloc(sizeof(double) * (size_t)(n * Di)),
               *ry = malloc(sizeof(double) * (size_t)(n * Di));
        /* states after every token: the reference's, and the kernels' saves of some tokens */
        const int64_t kc = Di * (K - 1), ks = Di * N;
        double *rsk = malloc(sizeof(double) * (size_t)(n * kc)),
               *rsv = malloc(sizeof(double) * (size_t)(n * ks));
        float *sk = malloc(sizeof(float) * (size_t)(n * kc)),
              *sv = malloc(sizeof(float) * (size_t)(n * ks));
        float **save_k = malloc(sizeof(float *) * (size_t)n),
              **save_v = malloc(sizeof(float *) * (size_t)n);
        REQUIRE(xz && w && wl && b && conv0 && dt && A && BC && D && ssm0 && conv && ssm && xc &&
                y && rconv && rssm && rxc && ry && rsk && rsv && sk && sv && save_k && save_v);
        for (int64_t t = 0; t < n; t++) { /* every third token and each sequence's last */
            const bool want = t % 3 == 1 || t % T == T - 1;
            save_k[t] = want ? sk + t * kc : NULL;
            save_v[t] = want ? sv + t * ks : NULL;
        }
        for (int64_t i = 0; i < n * 2 * Di; i++) xz[i] = frand() * 2;
        for (int64_t i = 0; i < Di * K; i++) w[i] = frand();
        for (int64_t c = 0; c < Di; c++)
            for (int64_t k = 0; k < K; k++) wl[k * Di + c] = w[c * K + k];
        for (int64_t i = 0; i < Di; i++) b[i] = frand() * 0.5f, D[i] = frand();
        for (int64_t i = 0; i < S * Di * (K - 1); i++) conv0[i] = frand();
        for (int64_t i = 0; i < n * Di; i++) dt[i] = 0.001f + 0.2f * (frand() + 1.0f);
        for (int64_t i = 0; i < Di * N; i++) A[i] = -(float)(1 + i % N) * (1.0f + 0.1f * frand());
        for (int64_t i = 0; i < n * 2 * N; i++) BC[i] = frand();
        for (int64_t i = 0; i < S * Di * N; i++) ssm0[i] = frand();

        /* float64 reference, token after token */
        for (int64_t s = 0; s < S; s++)
            for (int64_t c = 0; c < Di; c++) {
                double win[8];
                for (int64_t k = 0; k < K - 1; k++) win[k] = conv0[(s * Di + c) * (K - 1) + k];
                double st[64];
                for (int64_t q = 0; q < N; q++) st[q] = ssm0[(s * Di + c) * N + q];
                for (int64_t t = s * T; t < (s + 1) * T; t++) {
                    win[K - 1] = xz[t * 2 * Di + c];
                    double sum = b[c];
                    for (int64_t k = 0; k < K; k++) sum += (double)w[c * K + k] * win[k];
                    for (int64_t k = 0; k < K - 1; k++) win[k] = win[k + 1];
                    const double u = silu64(sum), d = dt[t * Di + c];
                    rxc[t * Di + c] = u;
                    double acc = 0;
                    for (int64_t q = 0; q < N; q++) {
                        st[q] = st[q] * exp(d * A[c * N + q]) + BC[t * 2 * N + q] * u * d;
                        acc += st[q] * BC[t * 2 * N + N + q];
                    }
                    ry[t * Di + c] = (acc + D[c] * u) * silu64(xz[t * 2 * Di + Di + c]);
                    for (int64_t k = 0; k < K - 1; k++) rsk[t * kc + c * (K - 1) + k] = win[k];
                    for (int64_t q = 0; q < N; q++) rsv[t * ks + c * N + q] = st[q];
                }
                for (int64_t k = 0; k < K - 1; k++) rconv[(s * Di + c) * (K - 1) + k] = win[k];
                for (int64_t q = 0; q < N; q++) rssm[(s * Di + c) * N + q] = st[q];
            }

        enum rops_isa isas[ROPS_ISA_COUNT];
        const int n_isas = test_isas(isas);
        for (int ii = 0; ii < n_isas; ii++) {
            for (int nth = 1; nth <= 2; nth++) {
                const struct rops_exec ex = {.pool = pool, .n_threads = nth, .isa = isas[ii]};
                memcpy(conv, conv0, sizeof(float) * (size_t)(S * Di * (K - 1)));
                memcpy(ssm, ssm0, sizeof(float) * (size_t)(S * Di * N));
                /* with and without saves; the weights lag-major from the caller (w_lag) or
                   made by the kernels */
                const bool save = nth == 2;
                memset(sk, 0xff, sizeof(float) * (size_t)(n * kc));
                memset(sv, 0xff, sizeof(float) * (size_t)(n * ks));
                rops_ssm_conv(&ex, &(struct rops_conv_args){.state = conv,
                                                            .x = xz,
                                                            .x_stride = 2 * Di,
                                                            .n_seqs = S,
                                                            .n_tok = T,
                                                            .d_inner = Di,
                                                            .d_conv = K,
                                                            .w = w,
                                                            .b = b,
                                                            .w_lag = save ? wl : NULL,
                                                            .xc = xc,
                                                            .save = save ? save_k : NULL});
                rops_ssm_scan(&ex, &(struct rops_scan_args){.state = ssm,
                                                            .x = xc,
                                                            .dt = dt,
                                                            .A = A,
                                                            .B = BC,
                                                            .C = BC + N,
                                                            .bc_stride = 2 * N,
                                                            .D = D,
                                                            .z = xz + Di,
                                                            .z_stride = 2 * Di,
                                                            .n_seqs = S,
                                                            .n_tok = T,
                                                            .d_inner = Di,
                                                            .d_state = N,
                                                            .y = y,
                                                            .save = save ? save_v : NULL});
                if (save) {
                    /* each save is the state after its token; the last ones are the final
                       states bit for bit; tokens without a save leave their buffer alone */
                    double e_sk = 0, e_sv = 0;
                    int64_t untouched = 0, last_differs = 0;
                    for (int64_t t = 0; t < n; t++) {
                        if (!save_k[t]) {
                            untouched += isnan(sk[t * kc]) && isnan(sv[t * ks]);
                            continue;
                        }
                        for (int64_t i = 0; i < kc; i++)
                            e_sk = fmax(e_sk, fabs(sk[t * kc + i] - rsk[t * kc + i]));
                        for (int64_t i = 0; i < ks; i++)
                            e_sv = fmax(e_sv, fabs(sv[t * ks + i] - rsv[t * ks + i]) /
                                                  (1 + fabs(rsv[t * ks + i])));
                        if (t % T == T - 1) {
                            const int64_t s_ = t / T;
                            last_differs += memcmp(sk + t * kc, conv + s_ * kc,
                                                   sizeof(float) * (size_t)kc) != 0;
                            last_differs +=
                                memcmp(sv + t * ks, ssm + s_ * ks, sizeof(float) * (size_t)ks) != 0;
                        }
                    }
                    int64_t unsaved = 0;
                    for (int64_t t = 0; t < n; t++) unsaved += !save_k[t];
                    CHECK_MSG(e_sk == 0 && e_sv < 1e-4 && untouched == unsaved && last_differs == 0,
                              "ssm saves %s shape %zu: conv %g ssm %g, %lld of %lld untouched, "
                              "%lld last differ",
                              rops_isa_name(isas[ii]), si, e_sk, e_sv, (long long)untouched,
                              (long long)unsaved, (long long)last_differs);
                }
                double e_xc = 0, e_y = 0, e_conv = 0, e_ssm = 0;
                for (int64_t i = 0; i < n * Di; i++) {
                    e_xc = fmax(e_xc, fabs(xc[i] - rxc[i]) / (1 + fabs(rxc[i])));
                    e_y = fmax(e_y, fabs(y[i] - ry[i]) / (1 + fabs(ry[i])));
                }
                for (int64_t i = 0; i < S * Di * (K - 1); i++)
                    e_conv = fmax(e_conv, fabs(conv[i] - rconv[i]));
                for (int64_t i = 0; i < S * Di * N; i++)
                    e_ssm = fmax(e_ssm, fabs(ssm[i] - rssm[i]) / (1 + fabs(rssm[i])));
                CHECK_MSG(e_xc < 1e-5 && e_y < 1e-4 && e_conv == 0 && e_ssm < 1e-4,
                          "ssm %s threads %d shape %zu: errors xc %g y %g conv %g ssm %g",
                          rops_isa_name(isas[ii]), nth, si, e_xc, e_y, e_conv, e_ssm);
            }
        }
        free(xz), free(w), free(wl), free(b), free(conv0), free(dt), free(A), free(BC), free(D),
            free(ssm0);
        free(conv), free(ssm), free(xc), free(y), free(rconv), free(rssm), free(rxc), free(ry);
        free(rsk), free(rsv), free(sk), free(sv), free(save_k), free(save_v);
    }
    rpool_free(pool);
}

/* Mamba-2's scan on every path, against float64 token by token: heads sharing groups of B
 * and C, a d_state that is and one that is not a multiple of the vector width, saves. */
/* Mamba-2's scan in float64, written from docs/mamba2.md (7)-(9): S sequences of T tokens,
 * H heads of P channels, N states, G groups; xbc rows of [x | B | C]; rs the states (updated),
 * ry the outputs; rsv (NULL: none) gets every token's state. */
static void ref_scan2(int64_t S, int64_t T, int64_t H, int64_t P, int64_t N, int64_t G,
                      const float *xbc, const float *dt, const float *A, const float *D, double *rs,
                      double *ry, double *rsv) {
    const int64_t Di = H * P, stride = Di + 2 * G * N, ns = Di * N;
    for (int64_t sq = 0; sq < S; sq++)
        for (int64_t t = sq * T; t < (sq + 1) * T; t++) {
            for (int64_t h = 0; h < H; h++) {
                const int64_t g = h / (H / G);
                const double dA = exp((double)dt[t * H + h] * A[h]);
                for (int64_t p = 0; p < P; p++) {
                    const int64_t c = h * P + p;
                    const double x = xbc[t * stride + c];
                    double acc = 0;
                    for (int64_t q = 0; q < N; q++) {
                        double *sc = &rs[(sq * Di + c) * N + q];
                        *sc = *sc * dA + xbc[t * stride + Di + g * N + q] * x * dt[t * H + h];
                        acc += *sc * xbc[t * stride + Di + G * N + g * N + q];
                    }
                    ry[t * Di + c] = acc + D[h] * x;
                }
            }
            if (rsv) memcpy(rsv + t * ns, rs + sq * ns, sizeof(double) * (size_t)ns);
        }
}

static void test_ssm2(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const int64_t shapes[][6] = {/* S, T, H, P, N, G */
                                 {1, 1, 2, 8, 16, 1},
                                 {2, 5, 4, 4, 8, 2},
                                 {3, 4, 6, 3, 12, 3},
                                 {2, 3, 2, 5, 32, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t S = shapes[si][0], T = shapes[si][1], H = shapes[si][2], P = shapes[si][3],
                      N = shapes[si][4], G = shapes[si][5], Di = H * P, stride = Di + 2 * G * N,
                      n = S * T;
        float *xbc = malloc(sizeof(float) * (size_t)(n * stride)),
              *dt = malloc(sizeof(float) * (size_t)(n * H)), *A = malloc(sizeof(float) * (size_t)H),
              *D = malloc(sizeof(float) * (size_t)H),
              *s0 = malloc(sizeof(float) * (size_t)(S * Di * N)),
              *st = malloc(sizeof(float) * (size_t)(S * Di * N)),
              *y = malloc(sizeof(float) * (size_t)(n * Di)),
              *sv = malloc(sizeof(float) * (size_t)(n * Di * N));
        double *ry = malloc(sizeof(double) * (size_t)(n * Di)),
               *rs = malloc(sizeof(double) * (size_t)(S * Di * N));
        float **save = malloc(sizeof(float *) * (size_t)n);
        REQUIRE(xbc && dt && A && D && s0 && st && y && sv && ry && rs && save);
        for (int64_t i = 0; i < n * stride; i++) xbc[i] = frand();
        for (int64_t i = 0; i < n * H; i++) dt[i] = 0.01f + 0.3f * (frand() + 1.0f);
        for (int64_t h = 0; h < H; h++) A[h] = -(1.0f + 4.0f * (frand() + 1.0f)), D[h] = frand();
        for (int64_t i = 0; i < S * Di * N; i++) s0[i] = frand(), rs[i] = s0[i];
        for (int64_t t = 0; t < n; t++) save[t] = t % 2 ? sv + t * Di * N : NULL;
        ref_scan2(S, T, H, P, N, G, xbc, dt, A, D, rs, ry, NULL);
        enum rops_isa isas[ROPS_ISA_COUNT];
        const int n_isas = test_isas(isas);
        for (int ii = 0; ii < n_isas; ii++) {
            for (int nth = 1; nth <= 2; nth++) {
                const struct rops_exec ex = {.pool = pool, .n_threads = nth, .isa = isas[ii]};
                memcpy(st, s0, sizeof(float) * (size_t)(S * Di * N));
                rops_ssm_scan2(&ex, &(struct rops_scan2_args){.state = st,
                                                              .xbc = xbc,
                                                              .xbc_stride = stride,
                                                              .dt = dt,
                                                              .A = A,
                                                              .D = D,
                                                              .n_seqs = S,
                                                              .n_tok = T,
                                                              .d_inner = Di,
                                                              .d_state = N,
                                                              .n_head = H,
                                                              .n_group = G,
                                                              .y = y,
                                                              .save = save});
                double ey = 0, es = 0;
                for (int64_t i = 0; i < n * Di; i++)
                    ey = fmax(ey, fabs(y[i] - ry[i]) / (1 + fabs(ry[i])));
                for (int64_t i = 0; i < S * Di * N; i++)
                    es = fmax(es, fabs(st[i] - rs[i]) / (1 + fabs(rs[i])));
                /* the save after each sequence's last token is its final state */
                int last_differs = 0;
                for (int64_t t = 0; t < n; t++)
                    if (save[t] && t % T == T - 1)
                        last_differs += memcmp(save[t], st + (t / T) * Di * N,
                                               sizeof(float) * (size_t)(Di * N)) != 0;
                CHECK_MSG(ey < 1e-4 && es < 1e-4 && last_differs == 0,
                          "scan2 %s threads %d shape %zu: y %g state %g, %d saves differ",
                          rops_isa_name(isas[ii]), nth, si, ey, es, last_differs);
            }
        }
        free(xbc), free(dt), free(A), free(D), free(s0), free(st), free(y), free(sv), free(ry);
        free(rs), free(save);
    }
    rpool_free(pool);
}

/* The chunked (SSD) Mamba-2 scan against the float64 recurrence and against rops_ssm_scan2, on
 * every path, 1 and 2 threads: heads sharing groups and a group per head, head_dim and d_state
 * that are not multiples of the vector, n_tok below, at and past ROPS_SSD_CHUNK and not a
 * multiple of it, several sequences, zero and non-zero incoming states, dt from tiny to large
 * enough that exp(dt * A) underflows, saves at random tokens (runs of them, last tokens), and
 * scratch for all heads, for one head per thread, and for none (the plain scan).
 * Tolerance: |out - ref| / (1 + |ref|) < 5e-5 for y, states and saves, against float64 and
 * against the plain f32 scan (measured: at most 1.5e-5 against float64, where the plain f32
 * scan is 1.5e-5 off too, on the dt-up-to-20 shapes; below 3e-6 elsewhere). */
static void test_ssm2_chunked(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const int64_t shapes[][8] = {
        /* S, T, H, P, N, G, zero state, dt kind (0 usual, 1 tiny to huge, 2 tiny) */
        {1, 1, 2, 8, 16, 1, 0, 0},     {2, 70, 4, 4, 8, 2, 1, 0},  {3, 129, 6, 3, 12, 3, 0, 1},
        {2, 64, 4, 16, 20, 4, 0, 0},   {1, 17, 3, 11, 5, 1, 1, 2}, {2, 150, 4, 64, 128, 1, 0, 0},
        {1, 300, 6, 64, 128, 2, 0, 1}, {4, 9, 2, 24, 40, 2, 0, 0}};
    const double tol = 5e-5;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t S = shapes[si][0], T = shapes[si][1], H = shapes[si][2], P = shapes[si][3],
                      N = shapes[si][4], G = shapes[si][5], Di = H * P, stride = Di + 2 * G * N,
                      n = S * T, ns = Di * N;
        const bool zero_state = shapes[si][6];
        const int dt_kind = (int)shapes[si][7];
        const size_t ws_bytes = rops_ssm_scan2_chunked_scratch_bytes(2, T, Di, N, H);
        float *xbc = malloc(sizeof(float) * (size_t)(n * stride)),
              *dt = malloc(sizeof(float) * (size_t)(n * H)), *A = malloc(sizeof(float) * (size_t)H),
              *D = malloc(sizeof(float) * (size_t)H),
              *s0 = malloc(sizeof(float) * (size_t)(S * ns)),
              *st = malloc(sizeof(float) * (size_t)(S * ns)),
              *sp = malloc(sizeof(float) * (size_t)(S * ns)),
              *y = malloc(sizeof(float) * (size_t)(n * Di)),
              *yp = malloc(sizeof(float) * (size_t)(n * Di)),
              *sv = malloc(sizeof(float) * (size_t)(n * ns)), *ws = malloc(ws_bytes + 256);
        double *ry = malloc(sizeof(double) * (size_t)(n * Di)),
               *rs = malloc(sizeof(double) * (size_t)(S * ns)),
               *rsv = malloc(sizeof(double) * (size_t)(n * ns));
        float **save = malloc(sizeof(float *) * (size_t)n);
        REQUIRE(xbc && dt && A && D && s0 && st && sp && y && yp && sv && ws && ry && rs && rsv &&
                save);
        for (int64_t i = 0; i < n * stride; i++) xbc[i] = frand();
        for (int64_t i = 0; i < n * H; i++) {
            const float u = (frand() + 1.0f) / 2; /* [0, 1) */
            dt[i] = dt_kind == 0   ? 0.01f + 0.6f * u
                    : dt_kind == 1 ? expf(-7.0f + 10.0f * u) /* 1e-3 .. 20: decays to e^-180 */
                                   : 1e-4f * u;
        }
        for (int64_t h = 0; h < H; h++) A[h] = -(0.5f + 4.0f * (frand() + 1.0f)), D[h] = frand();
        for (int64_t i = 0; i < S * ns; i++) s0[i] = zero_state ? 0.0f : frand(), rs[i] = s0[i];
        for (int64_t t = 0; t < n; t++) { /* ~1 in 8 at random, and each sequence's last 3 */
            const bool want = test_rand(&rng) % 8 == 0 || t % T >= T - 3;
            save[t] = want ? sv + t * ns : NULL;
        }
        ref_scan2(S, T, H, P, N, G, xbc, dt, A, D, rs, ry, rsv);
        enum rops_isa isas[ROPS_ISA_COUNT];
        const int n_isas = test_isas(isas);
        for (int ii = 0; ii < n_isas; ii++) {
            /* the plain scan in float, for the comparison between the two */
            const struct rops_exec ex1 = {.pool = pool, .n_threads = 1, .isa = isas[ii]};
            memcpy(sp, s0, sizeof(float) * (size_t)(S * ns));
            rops_ssm_scan2(&ex1, &(struct rops_scan2_args){.state = sp,
                                                           .xbc = xbc,
                                                           .xbc_stride = stride,
                                                           .dt = dt,
                                                           .A = A,
                                                           .D = D,
                                                           .n_seqs = S,
                                                           .n_tok = T,
                                                           .d_inner = Di,
                                                           .d_state = N,
                                                           .n_head = H,
                                                           .n_group = G,
                                                           .y = yp,
                                                           .save = NULL});
            if (getenv("RECUR_TEST_VERBOSE")) {
                double e1 = 0, e2 = 0;
                for (int64_t i = 0; i < n * Di; i++)
                    e1 = fmax(e1, fabs(yp[i] - ry[i]) / (1 + fabs(ry[i])));
                for (int64_t i = 0; i < S * ns; i++)
                    e2 = fmax(e2, fabs(sp[i] - rs[i]) / (1 + fabs(rs[i])));
                printf("plain %s shape %zu: y %.2g state %.2g\n", rops_isa_name(isas[ii]), si, e1,
                       e2);
            }
            for (int nth = 1; nth <= 2; nth++)
                for (int room = 0; room < 3; room++) { /* all heads, one per thread, none */
                    const size_t one_head =
                        rops_ssm_scan2_chunked_scratch_bytes(nth, T, nth * P, N, nth) + 64 * nth;
                    const struct rops_exec ex = {.pool = pool,
                                                 .n_threads = nth,
                                                 .isa = isas[ii],
                                                 .scratch = room == 2 ? NULL : ws,
                                                 .scratch_bytes = room == 0   ? ws_bytes
                                                                  : room == 1 ? one_head
                                                                              : 0};
                    for (int with_saves = 0; with_saves < 2; with_saves++) {
                        memcpy(st, s0, sizeof(float) * (size_t)(S * ns));
                        memset(sv, 0xff, sizeof(float) * (size_t)(n * ns)); /* NaN */
                        rops_ssm_scan2_chunked(
                            &ex, &(struct rops_scan2_args){.state = st,
                                                           .xbc = xbc,
                                                           .xbc_stride = stride,
                                                           .dt = dt,
                                                           .A = A,
                                                           .D = D,
                                                           .n_seqs = S,
                                                           .n_tok = T,
                                                           .d_inner = Di,
                                                           .d_state = N,
                                                           .n_head = H,
                                                           .n_group = G,
                                                           .y = y,
                                                           .save = with_saves ? save : NULL});
                        double ey = 0, es = 0, eyp = 0, esp = 0, esv = 0;
                        for (int64_t i = 0; i < n * Di; i++) {
                            ey = fmax(ey, fabs(y[i] - ry[i]) / (1 + fabs(ry[i])));
                            eyp = fmax(eyp, fabs(y[i] - yp[i]) / (1 + fabs(yp[i])));
                        }
                        for (int64_t i = 0; i < S * ns; i++) {
                            es = fmax(es, fabs(st[i] - rs[i]) / (1 + fabs(rs[i])));
                            esp = fmax(esp, fabs(st[i] - sp[i]) / (1 + fabs(sp[i])));
                        }
                        int64_t bad_unsaved = 0, last_differs = 0;
                        for (int64_t t = 0; t < n; t++) {
                            if (!with_saves || !save[t]) { /* left alone */
                                bad_unsaved += !isnan(sv[t * ns]);
                                continue;
                            }
                            for (int64_t i = 0; i < ns; i++)
                                esv = fmax(esv, fabs(sv[t * ns + i] - rsv[t * ns + i]) /
                                                    (1 + fabs(rsv[t * ns + i])));
                            if (t % T == T - 1) /* the last save is the final state */
                                last_differs += memcmp(sv + t * ns, st + (t / T) * ns,
                                                       sizeof(float) * (size_t)ns) != 0;
                        }
                        CHECK_MSG(ey < tol && es < tol && eyp < tol && esp < tol && esv < tol &&
                                      bad_unsaved == 0 && last_differs == 0,
                                  "ssd %s threads %d room %d saves %d shape %zu: vs float64 y %g "
                                  "state %g saves %g; vs plain y %g state %g; %lld unsaved "
                                  "written, %lld last differ",
                                  rops_isa_name(isas[ii]), nth, room, with_saves, si, ey, es, esv,
                                  eyp, esp, (long long)bad_unsaved, (long long)last_differs);
                        if (getenv("RECUR_TEST_VERBOSE"))
                            printf("ssd %s nth %d room %d saves %d shape %zu: y %.2g state %.2g "
                                   "saves %.2g, vs plain y %.2g state %.2g\n",
                                   rops_isa_name(isas[ii]), nth, room, with_saves, si, ey, es, esv,
                                   eyp, esp);
                    }
                }
        }
        free(xbc), free(dt), free(A), free(D), free(s0), free(st), free(sp), free(y), free(yp);
        free(sv), free(ws), free(ry), free(rs), free(rsv), free(save);
    }
    rpool_free(pool);
}

int main(void) {
    printf("kernels: best ISA on this CPU is %s\n", rops_isa_name(rops_isa_best()));
    RUN(test_pool);
    RUN(test_pool_one_cpu);
    RUN(test_pool_shared);
    RUN(test_pool_keys);
    RUN(test_matmul);
    RUN(test_quantize);
    RUN(test_quantize_inputs);
    RUN(test_block_dots_agree);
    RUN(test_softplus);
    RUN(test_map);
    RUN(test_ssm);
    RUN(test_ssm2);
    RUN(test_ssm2_chunked);
    return test_finish("test_ops");
}
