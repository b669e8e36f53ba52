/*
 * bench_ssd: Mamba-2's scan, the plain recurrence (rops_ssm_scan2) against the chunked SSD form
 * (rops_ssm_scan2_chunked), on the mamba2-130m shape (d_inner 1536, d_state 128, 24 heads of
 * 64, one group) and a smaller one (d_inner 512, d_state 64, 8 heads of 64), for one sequence
 * (or --seqs S) of 1, 8, 16, 32, 64 and 512 tokens, on 1 and 2 threads, with the best ISA of
 * the CPU (or --scalar).
 *
 *   bench_ssd [--reps N] [--scalar] [--seqs S] [--shape 130m|small] [--tok N] [--threads T]
 *
 * (--shape, --tok and --threads keep only those rows, e.g. for a profiler.)
 *
 * Each figure is the median (and the minimum, which other load on the machine disturbs
 * least) over N runs (default 7) of the time of one call, a run timing enough back-to-back
 * calls to last ~20 ms; plain and chunked runs alternate so that both see the same machine. The
 * inputs are random, dt in [0.01, 0.11] (softplus'd values of that order), A in [-8, -1], the
 * scratch what rops_ssm_scan2_chunked_scratch_bytes asks for. Output: a table, then one line of
 * JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "ops/ops.h"
#include "pool/pool.h"

struct shape {
    const char *name;
    int64_t d_inner, d_state, n_head, n_group;
};

static const struct shape shapes[] = {{"130m", 1536, 128, 24, 1}, {"small", 512, 64, 8, 1}};
static const int64_t toks[] = {1, 8, 16, 32, 64, 512};

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

struct call {
    const struct rops_exec *ex;
    const struct shape *sh;
    int64_t n_seqs, n_tok;
    float *state, *xbc, *dt, *A, *D, *y;
    bool chunked;
};

static void run_call(const struct call *c) {
    const int64_t Di = c->sh->d_inner, N = c->sh->d_state, G = c->sh->n_group;
    const int64_t stride = Di + 2 * G * N;
    const struct rops_scan2_args a = {.state = c->state,
                                      .xbc = c->xbc,
                                      .xbc_stride = stride,
                                      .dt = c->dt,
                                      .A = c->A,
                                      .D = c->D,
                                      .n_seqs = c->n_seqs,
                                      .n_tok = c->n_tok,
                                      .d_inner = Di,
                                      .d_state = N,
                                      .n_head = c->sh->n_head,
                                      .n_group = G,
                                      .y = c->y};
    if (c->chunked)
        rops_ssm_scan2_chunked(c->ex, &a);
    else
        rops_ssm_scan2(c->ex, &a);
}

/* Seconds per call of one run: as many calls as take ~20 ms (at least one). */
static double time_run(const struct call *c, int64_t iters) {
    const double t0 = now_s();
    for (int64_t i = 0; i < iters; i++) run_call(c);
    return (now_s() - t0) / (double)iters;
}

int main(int argc, char **argv) {
    int reps = 7;
    int64_t n_seqs = 1;
    enum rops_isa isa;
    if (!rops_isa_from_env(&isa)) { /* RECUR_ISA picks the kernels, as in recur */
        fprintf(stderr, "bench_ssd: %s\n", rcore_error_get());
        return 1;
    }
    const char *only_shape = NULL;
    int64_t only_tok = 0;
    int only_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
            n_seqs = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            only_shape = argv[++i];
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc)
            only_tok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scalar"))
            isa = ROPS_ISA_SCALAR;
        else {
            fprintf(stderr,
                    "usage: bench_ssd [--reps N] [--scalar] [--seqs S] [--shape 130m|small] "
                    "[--tok N] [--threads T]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000 || n_seqs < 1 || n_seqs > 64) {
        fprintf(stderr, "bench_ssd: --reps 1..1000, --seqs 1..64\n");
        return 2;
    }
    struct rpool *pool = rpool_create(2);
    if (!pool) {
        fprintf(stderr, "bench_ssd: no thread pool\n");
        return 1;
    }
    printf("bench_ssd: Mamba-2 scan, plain vs chunked (ROPS_SSD_CHUNK %d), %s, %lld sequence(s); "
           "median of %d runs, us per call\n",
           ROPS_SSD_CHUNK, rops_isa_name(isa), (long long)n_seqs, reps);
    printf("%-6s %6s %3s %12s %12s %8s %10s %10s\n", "shape", "n_tok", "thr", "plain_us",
           "chunked_us", "speedup", "plain_min", "chunk_min");
    char json[8192];
    size_t jl = (size_t)snprintf(json, sizeof json, "{\"bench\":\"ssd\",\"isa\":\"%s\",\"rows\":[",
                                 rops_isa_name(isa));
    bool first = true;
    int status = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *sh = &shapes[si];
        if (only_shape && strcmp(only_shape, sh->name)) continue;
        const int64_t Di = sh->d_inner, N = sh->d_state, H = sh->n_head, G = sh->n_group;
        const int64_t stride = Di + 2 * G * N, max_tok = toks[sizeof toks / sizeof toks[0] - 1];
        const int64_t n = n_seqs * max_tok;
        const size_t ws_bytes = rops_ssm_scan2_chunked_scratch_bytes(2, max_tok, Di, N, H);
        float *xbc = malloc(sizeof(float) * (size_t)(n * stride)),
              *dt = malloc(sizeof(float) * (size_t)(n * H)), *A = malloc(sizeof(float) * (size_t)H),
              *D = malloc(sizeof(float) * (size_t)H),
              *state = malloc(sizeof(float) * (size_t)(n_seqs * Di * N)),
              *y = malloc(sizeof(float) * (size_t)(n * Di)), *ws = malloc(ws_bytes);
        if (!xbc || !dt || !A || !D || !state || !y || !ws) {
            fprintf(stderr, "bench_ssd: out of memory\n");
            return 1;
        }
        for (int64_t i = 0; i < n * stride; i++) xbc[i] = frand();
        for (int64_t i = 0; i < n * H; i++) dt[i] = 0.06f + 0.05f * frand();
        for (int64_t h = 0; h < H; h++) A[h] = -4.5f + 3.5f * frand(), D[h] = frand();
        for (int64_t i = 0; i < n_seqs * Di * N; i++) state[i] = 0.1f * frand();
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++)
            for (int nth = 1; nth <= 2; nth++) {
                if ((only_tok && toks[ti] != only_tok) || (only_threads && nth != only_threads))
                    continue;
                const struct rops_exec ex = {.pool = pool,
                                             .n_threads = nth,
                                             .isa = isa,
                                             .scratch = ws,
                                             .scratch_bytes = ws_bytes};
                struct call c = {&ex, sh, n_seqs, toks[ti], state, xbc, dt, A, D, y, false};
                /* calls per run: ~20 ms of the plain scan, after a warm-up call of each */
                run_call(&c);
                c.chunked = true;
                run_call(&c);
                c.chunked = false;
                const double once = time_run(&c, 1);
                int64_t iters = (int64_t)(0.02 / (once > 1e-7 ? once : 1e-7));
                if (iters < 1) iters = 1;
                double tp[1000], tc[1000];
                for (int r = 0; r < reps; r++) {
                    c.chunked = false;
                    tp[r] = time_run(&c, iters);
                    c.chunked = true;
                    tc[r] = time_run(&c, iters);
                }
                qsort(tp, (size_t)reps, sizeof tp[0], cmp_double);
                qsort(tc, (size_t)reps, sizeof tc[0], cmp_double);
                const double mp = tp[reps / 2] * 1e6, mc = tc[reps / 2] * 1e6;
                printf("%-6s %6lld %3d %12.1f %12.1f %7.2fx %10.1f %10.1f\n", sh->name,
                       (long long)toks[ti], nth, mp, mc, mp / mc, tp[0] * 1e6, tc[0] * 1e6);
                if (jl < sizeof json)
                    jl += (size_t)snprintf(json + jl, sizeof json - jl,
                                           "%s{\"shape\":\"%s\",\"n_tok\":%lld,\"threads\":%d,"
                                           "\"plain_us\":%.2f,\"chunked_us\":%.2f,"
                                           "\"plain_min_us\":%.2f,\"chunked_min_us\":%.2f}",
                                           first ? "" : ",", sh->name, (long long)toks[ti], nth, mp,
                                           mc, tp[0] * 1e6, tc[0] * 1e6);
                first = false;
            }
        free(xbc), free(dt), free(A), free(D), free(state), free(y), free(ws);
    }
    if (jl < sizeof json) {
        printf("%s]}\n", json);
    } else {
        fprintf(stderr, "bench_ssd: JSON line too long\n");
        status = 1;
    }
    rpool_free(pool);
    return status;
}
