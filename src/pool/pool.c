/*
 * The thread pool (see pool.h).
 *
 * A call is published by bumping `gen` (a generation counter) after storing fn/arg/nth;
 * workers watch `gen`, run their share, and count themselves out on `pending`. Every worker
 * counts itself out of every call, also one whose index is >= nth and has nothing to run, so
 * that a call is over only when no worker can still be looking at its fn / arg / nth.
 * Waiting is a spin on the atomics for up to RPOOL_SPIN_NS, then the mutex and condition
 * variable: the spin makes back-to-back kernel calls cheap, the sleep keeps idle pools idle.
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/core.h"

#define RPOOL_MAX     256
#define RPOOL_SPIN_NS 200000 /* 0.2 ms: longer than any gap between two kernels of a step */
#define RPOOL_LINE    64

/* Three cache lines, so that the two sides' spins do not share one: the call (what the workers
 * spin on, with what they read next, written by the caller in one go), the count the caller
 * spins on, and the rest. */
struct rpool {
    _Alignas(RPOOL_LINE) _Atomic unsigned gen;
    _Atomic bool stop;
    rpool_fn fn;
    void *arg;
    int nth;
    _Alignas(RPOOL_LINE) _Atomic int pending;
    _Alignas(RPOOL_LINE) int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* workers: a new generation or stop */
    pthread_cond_t done;  /* caller: pending reached 0 */
    _Atomic int sleepers; /* workers blocked (or about to block) on `wake` */
    bool caller_sleeping;
};

struct worker_arg {
    struct rpool *pool;
    int ith;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until gen differs from seen (or stop); returns the new generation. */
static unsigned wait_generation(struct rpool *p, unsigned seen) {
    const uint64_t t0 = now_ns();
    for (unsigned spins = 0;; spins++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        if ((spins & 255) == 255 && now_ns() - t0 > RPOOL_SPIN_NS) break;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void finish_one(struct rpool *p) {
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
        /* the last one out wakes the caller if it went to sleep */
        pthread_mutex_lock(&p->mu);
        if (p->caller_sleeping) pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *worker_main(void *varg) {
    struct worker_arg *wa = varg;
    struct rpool *p = wa->pool;
    const int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        seen = wait_generation(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        if (ith < p->nth) p->fn(p->arg, ith, p->nth);
        finish_one(p);
    }
}

struct rpool *rpool_create(int n_threads) {
    if (n_threads < 1 || n_threads > RPOOL_MAX) {
        rcore_error_set("thread pool: %d threads requested (1..%d)", n_threads, RPOOL_MAX);
        return NULL;
    }
    struct rpool *p = aligned_alloc(RPOOL_LINE, sizeof *p); /* a multiple of the line */
    if (p) memset(p, 0, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)n_threads, sizeof *p->threads))) {
        free(p);
        rcore_error_set("thread pool: out of memory");
        return NULL;
    }
    p->n = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        int err = wa ? 0 : 1;
        if (wa) {
            wa->pool = p;
            wa->ith = i;
            err = pthread_create(&p->threads[i], NULL, worker_main, wa);
            if (err) free(wa);
        }
        if (err) {
            rcore_error_set("thread pool: cannot start thread %d of %d", i + 1, n_threads);
            rpool_free(p);
            return NULL;
        }
        p->n = i + 1;
    }
    return p;
}

void rpool_free(struct rpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

int rpool_size(const struct rpool *p) {
    return p ? p->n : 1;
}

void rpool_run(struct rpool *p, rpool_fn fn, void *arg, int nth) {
    if (!p || nth <= 1 || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    if (nth > p->n) nth = p->n;
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    /* seq_cst, as is the load of `sleepers` below and the worker's increment of it before
       it re-reads gen: either the worker sees the new generation or we see it sleeping */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, nth);
    const uint64_t t0 = now_ns();
    for (unsigned spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if ((spins & 255) == 255 && now_ns() - t0 > RPOOL_SPIN_NS) {
            pthread_mutex_lock(&p->mu);
            p->caller_sleeping = true;
            while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
            p->caller_sleeping = false;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        cpu_relax();
    }
}
