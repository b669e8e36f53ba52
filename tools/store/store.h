/*
 * The prefix cache's second tier (store.c): a Redis server shared by several processes and
 * machines, or a folder that outlives one process, behind the library's recur_prefix_store
 * hooks. A conversation's whole past is one fixed-size state, so resuming it anywhere costs
 * one fetch and one restore, never a re-prefill.
 *
 * Keys are (model fingerprint, tenant, token prefix); values are the library's checked entry
 * blobs, so a corrupt, foreign or other-model value is a miss, never a wrong state. Writes go
 * through a bounded queue to a writer thread (the decode loop never waits on the store); a
 * lookup has a short deadline for the whole of it, and what it reads is bounded by the size an
 * entry can have. A store that is down, slow, failing or lying is a miss, counted.
 */
#ifndef RECUR_TOOLS_STORE_H
#define RECUR_TOOLS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

struct store;

struct store_opts {
    double timeout_s;       /* a lookup's deadline (default 0.1), the whole of it: connect,
                               commands and replies; what comes later is a miss */
    double write_timeout_s; /* the writer thread's (default 2): it holds up nothing, and a write
                               it gives up on is lost */
    int64_t ttl_s;          /* entries expire after this (default 86400) */
    uint64_t max_bytes;     /* a folder's budget (default 4 GiB; Redis: its maxmemory) */
    uint64_t queue_bytes;   /* writes waiting for the writer thread (default 256 MiB); more are
                               dropped, counted */
    uint64_t state_bytes;   /* the model's state (recur_prefix_cache_stats.entry_bytes): an
                               entry bigger than it, its tokens and 4 KiB is refused unread; 0
                               (the default): 256 MiB */
    uint64_t token_bytes;   /* a hybrid model's attention rows a token
                               (recur_prefix_cache_stats.attn_bytes_per_token; 0: none) */
};

struct store_opts store_default_opts(void);

/* url: "redis://HOST:PORT[/DB]" or a folder's path (made if missing). A Redis that cannot be
 * reached now is not an error: it is tried again, and misses meanwhile. NULL with a message in
 * err for a malformed URL, a folder that cannot be made, or no memory. */
struct store *store_open(const char *url, const struct store_opts *o, char *err, size_t err_len);
/* Writes what is queued (up to a few seconds), then frees. NULL is fine. */
void store_close(struct store *st);

/* The hooks for recur_prefix_cache_set_store (user = st). */
struct recur_prefix_store store_hooks(struct store *st);

struct store_stats {
    uint64_t gets, hits, misses, errors; /* errors: failed or timed-out store operations */
    uint64_t puts, put_errors, dropped;  /* dropped: the write queue was full */
    uint64_t queued, queued_bytes;       /* writes not yet done: waiting or being written */
};
void store_get_stats(struct store *st, struct store_stats *out);

/* Waits until the write queue is empty (for tests and clean exits): false after timeout_s. */
bool store_flush(struct store *st, double timeout_s);

#endif /* RECUR_TOOLS_STORE_H */
