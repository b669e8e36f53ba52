/*
 * Machine probes: which instruction sets this CPU runs (cpuid, and xgetbv for the register
 * state the OS saves), the choice of one (RECUR_ISA), the table of kernels of each, and the
 * FMA peak and read bandwidth `recur bench` reports.
 */
#include "ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define HAVE_CPUID 1
#endif

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/core.h"
#include "ops_impl.h"

/* ---- instruction sets ---------------------------------------------------------------------- */

struct cpu_features {
    bool avx2, avxvnni, avx512; /* the CPU has the instructions and the OS saves their registers */
};

static struct cpu_features cpu_features(void) {
    struct cpu_features f = {false, false, false};
#ifdef HAVE_CPUID
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    /* XCR0: which register state the OS saves on a context switch. Bits 1-2: SSE and AVX
       (YMM); 5-7: the AVX-512 mask registers and ZMM0-31. Without them the instructions run
       but the registers' upper parts are lost when the thread is switched out. */
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    (void)xhi;
    const bool ymm = (xlo & 0x6) == 0x6, zmm = (xlo & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_subleaf = a;
    const bool avx2 = b & (1u << 5);
    const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) &&
                        (b & (1u << 31)) && (c & (1u << 11)); /* F, DQ, BW, VL; VNNI */
    f.avx2 = ymm && avx2 && fma && f16c;
    f.avx512 = f.avx2 && zmm && avx512;
    if (max_subleaf >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avxvnni = f.avx2 && (a & (1u << 4)); /* leaf 7 subleaf 1, EAX bit 4: AVX-VNNI */
    }
#endif
    return f;
}

bool rops_isa_runs(enum rops_isa isa) {
    return rops_isa_lacks(isa) == NULL;
}

const char *rops_isa_lacks(enum rops_isa isa) {
    const struct cpu_features f = cpu_features();
    switch (isa) {
    case ROPS_ISA_SCALAR:
        return NULL;
    case ROPS_ISA_AVX2:
        if (!rops_kernels_avx2()) return "this build has no AVX2 kernels (not x86-64)";
        return f.avx2 ? NULL : "the CPU (or its OS) lacks AVX2, FMA or F16C";
    case ROPS_ISA_AVXVNNI:
        if (!rops_kernels_avxvnni()) return "this build has no AVX-VNNI kernels";
        return f.avxvnni ? NULL : "the CPU lacks AVX-VNNI (or AVX2, FMA, F16C)";
    case ROPS_ISA_AVX512:
        if (!rops_kernels_avx512()) return "this build has no AVX-512 kernels";
        return f.avx512 ? NULL
                        : "the CPU lacks AVX-512 F, BW, VL, DQ or VNNI, or its OS does not save "
                          "the ZMM registers";
    default:
        return "no such instruction set";
    }
}

enum rops_isa rops_isa_best(void) {
    for (int isa = ROPS_ISA_COUNT - 1; isa > ROPS_ISA_SCALAR; isa--)
        if (rops_isa_runs((enum rops_isa)isa)) return (enum rops_isa)isa;
    return ROPS_ISA_SCALAR;
}

static const char *const isa_names[ROPS_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512"};

const char *rops_isa_name(enum rops_isa isa) {
    return (unsigned)isa < ROPS_ISA_COUNT ? isa_names[isa] : "?";
}

bool rops_isa_from_env(enum rops_isa *out) {
    const char *env = getenv("RECUR_ISA");
    if (!env || !*env) {
        *out = rops_isa_best();
        return true;
    }
    for (int isa = 0; isa < ROPS_ISA_COUNT; isa++) {
        if (strcmp(env, isa_names[isa]) != 0) continue;
        const char *why = rops_isa_lacks((enum rops_isa)isa);
        if (why) {
            rcore_error_set("RECUR_ISA=%s: %s", env, why);
            return false;
        }
        *out = (enum rops_isa)isa;
        return true;
    }
    rcore_error_set("RECUR_ISA=%.40s: not an instruction set (scalar, avx2, avxvnni or avx512)",
                    env);
    return false;
}

const struct rops_kernels *rops_kernels_of(enum rops_isa isa) {
    const struct rops_kernels *k = NULL;
    if (isa == ROPS_ISA_AVX2) k = rops_kernels_avx2();
    if (isa == ROPS_ISA_AVXVNNI) k = rops_kernels_avxvnni();
    if (isa == ROPS_ISA_AVX512) k = rops_kernels_avx512();
    return k ? k : &rops_kernels_scalar;
}

/* ---- the FMA peak and the read bandwidth --------------------------------------------------- */

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct probe_task {
    const struct rops_kernels *k;
    int64_t iters;
    const float *buf;
    size_t n_floats;
    double flops[256];
    float sums[256];
};

static void probe_fma_thread(void *arg, int ith, int nth) {
    struct probe_task *t = arg;
    (void)nth;
    t->flops[ith] = t->k->probe_fma(t->iters);
}

static void probe_read_thread(void *arg, int ith, int nth) {
    struct probe_task *t = arg;
    const size_t per = t->n_floats / (size_t)nth / 16 * 16;
    const float *p = t->buf + per * (size_t)ith;
    t->sums[ith] = t->k->probe_sum(p, per);
}

/* The probes' thread count: ex's, within the pool. */
static int probe_threads(const struct rops_exec *ex) {
    const int nth = ex->n_threads < 1 ? 1 : ex->n_threads;
    return nth < rpool_size(ex->pool) ? nth : rpool_size(ex->pool);
}

/* One round of the FMA loop on nth threads: flops per second, and the round's seconds. */
static double fma_round(const struct rops_exec *ex, struct probe_task *t, int nth, double *dt) {
    const double t0 = seconds_now();
    rpool_run(ex->pool, probe_fma_thread, t, nth);
    *dt = seconds_now() - t0;
    double flops = 0;
    for (int i = 0; i < nth; i++) flops += t->flops[i];
    return *dt > 0 ? flops / *dt : 0.0;
}

double rops_probe_gflops(const struct rops_exec *ex) {
    struct probe_task t;
    memset(&t, 0, sizeof t);
    t.k = rops_kernels_of(ex->isa);
    const int nth = probe_threads(ex);
    double best = 0, dt = 0, rate;
    /* grow the round until it takes 0.1 s, then take the best of three rounds of that length */
    for (t.iters = 1 << 16; dt <= 0.1; t.iters *= 2)
        if ((rate = fma_round(ex, &t, nth, &dt)) > best) best = rate;
    t.iters /= 2;
    for (int rep = 0; rep < 2; rep++)
        if ((rate = fma_round(ex, &t, nth, &dt)) > best) best = rate;
    return best / 1e9;
}

double rops_probe_read_gbps(const struct rops_exec *ex, const void *buf, size_t n_bytes) {
    struct probe_task t;
    memset(&t, 0, sizeof t);
    t.k = rops_kernels_of(ex->isa);
    t.buf = buf;
    t.n_floats = n_bytes / sizeof(float);
    const int nth = probe_threads(ex);
    const size_t read = t.n_floats / (size_t)nth / 16 * 16 * (size_t)nth * sizeof(float);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = seconds_now();
        rpool_run(ex->pool, probe_read_thread, &t, nth);
        double dt = seconds_now() - t0;
        if ((double)read / dt > best) best = (double)read / dt;
    }
    return best / 1e9;
}
