/*
 * The thread pool (see pool.h).
 *
 * A call is published by bumping `gen` (a generation counter) after storing fn/arg/nth;
 * workers watch `gen`, run their share, and count themselves out on `pending`. Every worker
 * counts itself out of every call, also one whose index is >= nth and has nothing to run, so
 * that a call is over only when no worker can still be looking at its fn / arg / nth.
 * Waiting is a spin on the atomics for up to RPOOL_SPIN_NS, then the mutex and condition
 * variable: the spin makes back-to-back kernel calls cheap, the sleep keeps idle pools idle.
 * Past RPOOL_PAUSE_NS the spin also yields the CPU now and then (spin_step says why).
 * A shared call (rpool_run_keyed) also times each thread's fn, and the caller moves the
 * threads' relative speeds towards what it measured before the next shared call's parts. The
 * speeds are kept per key, in an open-addressed table: each call site (a layer's product, its
 * scan) splits unevenly in a way of its own, which one set of speeds for every call averaged
 * away, so that every site waited on its own bias.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity and CPU_COUNT: the CPUs this process may run on */
#endif
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/core.h"

#define RPOOL_MAX      256
#define RPOOL_SPIN_NS  200000 /* 0.2 ms: longer than any gap between two kernels of a step */
#define RPOOL_PAUSE_NS 20000  /* then the spin yields the CPU now and then (spin_step) */
#define RPOOL_LINE     64
/* keys whose speeds a pool keeps (rpool_run_keyed), a power of two, and the slots a key may
   take from where its hash points: a token's calls, ~70-180 sites for the models of
   bench/speed.sh, fit with room */
#define RPOOL_KEYS  512
#define RPOOL_PROBE 8

#ifdef RPOOL_PROFILE
/* A profiled build (cmake -DRECUR_POOL_PROFILE=ON) times every parallel call, per function
 * run: the caller's time from the end of the call before to this one's start (the serial steps
 * between kernels, while the workers spin), worker 1's lag to start, the time each of the two
 * spends in fn, and the caller's wait for the workers after its own share. rpool_free prints
 * them (bench/pool_profile.py names the functions). Gaps over RPOOL_PROF_IDLE_NS are the pool
 * left idle, not counted. */
#include <stdio.h>
#define RPOOL_PROF_ROWS    64
#define RPOOL_PROF_IDLE_NS 1000000
struct rpool_prof_row {
    rpool_fn fn;
    uint64_t calls, gaps, gap, lag, caller, worker, wait; /* ns, summed */
};
#endif

/* Three cache lines, so that the two sides' spins do not share one: the call (what the workers
 * spin on, with what they read next, written by the caller in one go), the count the caller
 * spins on, and the rest. */
struct rpool {
    _Alignas(RPOOL_LINE) _Atomic unsigned gen;
    _Atomic bool stop;
    bool shared; /* the call is rpool_run_keyed's: bounds and times below */
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
    bool oversub;         /* more threads than the CPUs this process may run on */
    bool caller_sleeping;
    /* rpool_run_keyed: bound[i], i in [0, nth], the start of thread i's part in 1 / 2^20ths
       (bound[nth] = 2^20) for this call; speed[k * n + i] the parts a second thread i ran
       lately in the calls of key[k], relative to the others', cur this call's (the key's);
       ns[i] (a line each) its time in fn this call */
    uint32_t *bound;
    const void **key;
    double *speed, *cur;
    struct rpool_time *ns;
#ifdef RPOOL_PROFILE
    _Alignas(RPOOL_LINE) _Atomic uint64_t w_start, w_end; /* worker 1's, this call */
    uint64_t t_end;                                       /* the last call's end */
    struct rpool_prof_row prof[RPOOL_PROF_ROWS];
#endif
};

struct rpool_time {
    _Alignas(RPOOL_LINE) uint64_t ns;
};

/* rpool_share's fixed point; each call moves the speeds 1/RPOOL_SPEED_STEP of the way to what it
 * measured, a thread's part stays within [1/2, 2] of an even one, and calls whose parts took
 * less than RPOOL_SPEED_MIN_NS are not timed (a hand-off's jitter is ~1 us) */
#define RPOOL_ONE          (1u << 20)
#define RPOOL_SPEED_STEP   16.0
#define RPOOL_SPEED_MIN_NS 4000

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

/* One turn of a spin that began at t0: false when it is time to sleep instead. A spinning
 * thread may hold the CPU that the thread it waits for needs (a pool larger than the CPUs, or
 * other programs on them), and then every hand-off waits for the scheduler's time slice: with
 * four threads on two CPUs a whole decode ran 10 to 20 times slower than with two. So past
 * RPOOL_PAUSE_NS a spin yields the CPU every 64 turns (about a microsecond of pauses), and in a
 * pool with more threads than CPUs at every turn from the start, to whichever thread is ready;
 * on an otherwise idle CPU sched_yield returns at once. */
static bool spin_step(const struct rpool *p, unsigned spins, uint64_t t0) {
    if ((spins & 63) == 63 || p->oversub) {
        const uint64_t t = now_ns() - t0;
        if (t > RPOOL_SPIN_NS) return false;
        if (p->oversub || t > RPOOL_PAUSE_NS) {
            sched_yield();
            return true;
        }
    }
    cpu_relax();
    return true;
}

/* Waits until gen differs from seen (or stop); returns the new generation. */
static unsigned wait_generation(struct rpool *p, unsigned seen) {
    const uint64_t t0 = now_ns();
    for (unsigned spins = 0;; spins++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        if (!spin_step(p, spins, t0)) break;
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
#ifdef RPOOL_PROFILE
        if (ith == 1) atomic_store_explicit(&p->w_start, now_ns(), memory_order_relaxed);
#endif
        if (ith < p->nth) {
            const uint64_t t0 = p->shared ? now_ns() : 0;
            p->fn(p->arg, ith, p->nth);
            if (p->shared) p->ns[ith].ns = now_ns() - t0;
        }
#ifdef RPOOL_PROFILE
        if (ith == 1) atomic_store_explicit(&p->w_end, now_ns(), memory_order_relaxed);
#endif
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
    if (!p || !(p->threads = calloc((size_t)n_threads, sizeof *p->threads)) ||
        !(p->bound = calloc((size_t)n_threads + 1, sizeof *p->bound)) ||
        !(p->key = calloc(RPOOL_KEYS, sizeof *p->key)) ||
        !(p->speed = calloc((size_t)n_threads * RPOOL_KEYS, sizeof *p->speed)) ||
        !(p->ns = aligned_alloc(RPOOL_LINE, (size_t)n_threads * sizeof *p->ns))) {
        if (p) free(p->threads), free(p->bound), free(p->key), free(p->speed);
        free(p);
        rcore_error_set("thread pool: out of memory");
        return NULL;
    }
    p->n = 1;
    cpu_set_t cpus;
    p->oversub = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && n_threads > CPU_COUNT(&cpus);
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

#ifdef RPOOL_PROFILE
static void prof_add(struct rpool *p, rpool_fn fn, uint64_t t_pub, uint64_t t_fn, uint64_t t_end) {
    struct rpool_prof_row *r = p->prof;
    while (r < p->prof + RPOOL_PROF_ROWS - 1 && r->fn && r->fn != fn) r++;
    r->fn = fn; /* the last row takes every function past the table's room */
    r->calls++;
    if (p->t_end && t_pub - p->t_end < RPOOL_PROF_IDLE_NS) {
        r->gaps++;
        r->gap += t_pub - p->t_end;
    }
    const uint64_t ws = atomic_load_explicit(&p->w_start, memory_order_relaxed),
                   we = atomic_load_explicit(&p->w_end, memory_order_relaxed);
    r->lag += ws > t_pub ? ws - t_pub : 0;
    r->worker += we > ws ? we - ws : 0;
    r->caller += t_fn - t_pub;
    r->wait += t_end - t_fn;
    p->t_end = t_end;
}

static void prof_print(const struct rpool *p) {
    for (const struct rpool_prof_row *r = p->prof; r < p->prof + RPOOL_PROF_ROWS && r->fn; r++) {
        const double n = (double)r->calls;
        fprintf(stderr,
                "rpool profile: fn rpool_run%+lld calls %llu gap %.3f lag %.3f caller %.3f "
                "worker %.3f wait %.3f (us a call)\n",
                (long long)((intptr_t)r->fn - (intptr_t)rpool_run), (unsigned long long)r->calls,
                r->gaps ? (double)r->gap / (double)r->gaps / 1e3 : 0.0, (double)r->lag / n / 1e3,
                (double)r->caller / n / 1e3, (double)r->worker / n / 1e3,
                (double)r->wait / n / 1e3);
    }
}
#endif

void rpool_free(struct rpool *p) {
    if (!p) return;
#ifdef RPOOL_PROFILE
    prof_print(p);
#endif
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->bound);
    free(p->key);
    free(p->speed);
    free(p->ns);
    free(p);
}

int rpool_size(const struct rpool *p) {
    return p ? p->n : 1;
}

/* The speeds of key's calls: its slot within RPOOL_PROBE of where its hash points; for a key new
 * to the table the first empty slot there, or else the hash's own (whose key's speeds go), set
 * to even parts. */
static double *key_speeds(struct rpool *p, const void *key) {
    const size_t home = (size_t)(((uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15u) >> 40);
    size_t at = SIZE_MAX;
    for (size_t i = 0; i < RPOOL_PROBE; i++) {
        const size_t k = (home + i) % RPOOL_KEYS;
        if (p->key[k] == key) return p->speed + k * (size_t)p->n;
        if (!p->key[k] && at == SIZE_MAX) at = k;
    }
    if (at == SIZE_MAX) at = home % RPOOL_KEYS;
    p->key[at] = key;
    double *s = p->speed + at * (size_t)p->n;
    for (int i = 0; i < p->n; i++) s[i] = 1.0;
    return s;
}

/* The parts of a shared call of nth threads, from the speeds of its key. */
static void set_bounds(struct rpool *p, const void *key, int nth) {
    p->cur = key_speeds(p, key);
    double sum = 0;
    for (int i = 0; i < nth; i++) sum += p->cur[i];
    double at = 0;
    for (int i = 0; i < nth; i++) {
        p->bound[i] = (uint32_t)(at / sum * RPOOL_ONE + 0.5);
        at += p->cur[i];
    }
    p->bound[nth] = RPOOL_ONE;
}

/* After a shared call: each thread's parts a nanosecond against the mean of all, and the speeds
 * moved towards those ratios. */
static void update_speeds(struct rpool *p, int nth) {
    double rate[RPOOL_MAX], mean = 0;
    for (int i = 0; i < nth; i++) {
        const uint32_t part = p->bound[i + 1] - p->bound[i];
        if (p->ns[i].ns < RPOOL_SPEED_MIN_NS || part == 0) return;
        rate[i] = (double)part / (double)p->ns[i].ns;
        mean += rate[i] / nth;
    }
    for (int i = 0; i < nth; i++) {
        const double s = p->cur[i] + (rate[i] / mean - p->cur[i]) / RPOOL_SPEED_STEP;
        p->cur[i] = s < 0.5 ? 0.5 : s > 2.0 ? 2.0 : s;
    }
}

int64_t rpool_share(const struct rpool *p, int ith, int nth, int64_t total) {
    if (!p || !p->shared || nth != p->nth) return total * ith / nth;
    /* total * bound / 2^20 without overflow: its high and low 20 bits apart */
    const int64_t b = p->bound[ith];
    return (total >> 20) * b + (((total & (RPOOL_ONE - 1)) * b) >> 20);
}

static void run(struct rpool *p, rpool_fn fn, void *arg, int nth, const void *key);

void rpool_run(struct rpool *p, rpool_fn fn, void *arg, int nth) {
    run(p, fn, arg, nth, NULL);
}

void rpool_run_keyed(struct rpool *p, rpool_fn fn, void *arg, int nth, const void *key) {
    run(p, fn, arg, nth, key ? key : (const void *)p); /* NULL: the pool's one key */
}

static void run(struct rpool *p, rpool_fn fn, void *arg, int nth, const void *key) {
    const bool shared = key != NULL;
    if (!p || nth <= 1 || p->n == 1) {
        if (p) p->shared = false; /* no worker reads it before the next call sets it */
        fn(arg, 0, 1);
        return;
    }
    if (nth > p->n) nth = p->n;
    if (shared) set_bounds(p, key, nth);
    p->shared = shared;
#ifdef RPOOL_PROFILE
    const uint64_t t_pub = now_ns();
    atomic_store_explicit(&p->w_start, 0, memory_order_relaxed);
    atomic_store_explicit(&p->w_end, 0, memory_order_relaxed);
#endif
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
    const uint64_t t_start = shared ? now_ns() : 0;
    fn(arg, 0, nth);
    const uint64_t t0 = now_ns();
    if (shared) p->ns[0].ns = t0 - t_start;
#ifdef RPOOL_PROFILE
    const uint64_t t_fn = t0;
#endif
    for (unsigned spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (!spin_step(p, spins, t0)) {
            pthread_mutex_lock(&p->mu);
            p->caller_sleeping = true;
            while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
            p->caller_sleeping = false;
            pthread_mutex_unlock(&p->mu);
            break;
        }
    }
    if (shared) update_speeds(p, nth);
#ifdef RPOOL_PROFILE
    prof_add(p, fn, t_pub, t_fn, now_ns());
#endif
}
