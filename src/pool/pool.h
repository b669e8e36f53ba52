/*
 * pool: a fixed team of worker threads that run one function in parallel, for the kernels.
 *
 * A model step calls a kernel a few hundred times per token (every matrix of every layer), so
 * threads are made once, with the context, and a parallel call costs a hand-off of tens of
 * nanoseconds while the workers are spinning: after a call they spin for a short while
 * (about RPOOL_SPIN_NS) waiting for the next one, then sleep on a condition variable, so an
 * idle context burns no CPU. A spin that goes on past a few microseconds, or any spin in a pool
 * with more threads than the process has CPUs, yields the CPU now and then, so that a thread
 * that still has work is not kept waiting for a time slice. The calling thread always takes
 * part as thread 0.
 *
 * Not reentrant: one rpool_run at a time per pool (a context decodes one batch at a time).
 */
#ifndef RECUR_POOL_H
#define RECUR_POOL_H

#include <stdbool.h>
#include <stdint.h>

struct rpool;

/* The work of one thread: ith in [0, nth), nth the number of threads running fn. */
typedef void (*rpool_fn)(void *arg, int ith, int nth);

/* A pool of n_threads threads in all (the caller plus n_threads - 1 workers), 1..256.
 * NULL with the last error set when a thread or memory cannot be had. */
struct rpool *rpool_create(int n_threads);
/* Stops and joins the workers. NULL is fine. */
void rpool_free(struct rpool *pool);

/* Threads in the pool (the caller included). A NULL pool counts as 1. */
int rpool_size(const struct rpool *pool);

/* Runs fn(arg, i, nth) for every i in [0, nth) and returns when all are done; the caller runs
 * i = 0. nth is clamped to [1, rpool_size]. A NULL pool runs fn(arg, 0, 1) on the caller. */
void rpool_run(struct rpool *pool, rpool_fn fn, void *arg, int nth);

/* As rpool_run, for work that fn shares out with rpool_share: any split of it gives the same
 * results, and a part costs in proportion to its size. The threads' parts follow how fast each
 * ran the calls of the same key before: on a machine shared with others one core can run 5-30%
 * slower than the other for seconds, and an even split then leaves the other waiting; and one
 * call site splits unevenly in a way of its own (a thread's share of a layer's product or scan
 * is the one whose state or rows its caches hold, or not), so the speeds are kept per key.
 * key: the same for calls of the same work, say a layer's first weight matrix; any pointer,
 * never dereferenced; NULL is one key of its own for every such call. The pool keeps the speeds of
 * a few hundred keys (the calls of a token of the largest models of bench/speed.sh fit); a new key
 * may take the place of an older one, which then starts again from even parts. */
void rpool_run_keyed(struct rpool *pool, rpool_fn fn, void *arg, int nth, const void *key);

/* In fn of rpool_run_keyed, where thread ith's part of [0, total) starts; its part ends where
 * thread ith + 1's starts (ith = nth gives total). Even parts (total * ith / nth) in a call of
 * rpool_run, with a NULL pool, or before the pool has timed enough calls. */
int64_t rpool_share(const struct rpool *pool, int ith, int nth, int64_t total);

#endif /* RECUR_POOL_H */
