/*
 * prefix: the prefix state cache. A store of (token prefix -> recurrent state) with a byte
 * budget and least-recently-used eviction, so that a prompt which begins with text already
 * processed (the next turn of a chat, the same system prompt, a repeated request) decodes only
 * the rest. It knows nothing of models or memories: a state is an opaque block of f32 values
 * of one fixed size (the memory's snapshot layout, memory.h), with opaque extra bytes of any
 * size beside it (a hybrid model's attention rows).
 *
 * Data structures: an array of entries, each a copy of its tokens and of its state. Entries
 * are few (each holds a whole model state, megabytes), so a lookup scans them: it hashes every
 * prefix of the query once (XXH64, streaming: O(n) for all lengths), and compares an entry's
 * tokens in full when the hashes match, so a hash collision can never return a wrong state.
 *
 * Tenants: every entry belongs to one tenant (a 64-bit id chosen by the caller, e.g. a hash of
 * an API key; 0 when there is one user). A lookup finds only its own tenant's entries, so one
 * tenant's prompts never speed up, or show up in, another's.
 *
 * Errors: functions that can fail return false / -1 and set the last error (core.h). Not
 * thread-safe: one thread uses one cache at a time.
 */
#ifndef RECUR_PREFIX_H
#define RECUR_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../io/io.h"

struct rpfx;

/* A cache of at most max_bytes (states plus tokens) for states of state_floats floats. NULL
 * with the error set when memory cannot be had or a size is 0. Free with rpfx_free. */
struct rpfx *rpfx_create(size_t max_bytes, size_t state_floats);
void rpfx_free(struct rpfx *c); /* NULL is fine */

/* Declares that an entry's extra bytes hold those of each of its prefixes, for the caller to
 * cut (a hybrid model's attention rows: the rows of n tokens begin with the rows of their first
 * m), so that entries share them instead of each holding a copy: O(n) bytes for a
 * conversation's checkpoints, where copies take O(n^2). From then on:
 * - an entry stored with extra bytes takes them from the entries of its tenant whose tokens are
 *   a proper prefix of its own: they borrow its bytes;
 * - an entry stored without (extra NULL) borrows the bytes of the shortest entry of its tenant
 *   whose tokens begin with its own; rpfx_put stores nothing and returns 0 when there is none;
 * - rpfx_find of a borrower gives its lender's bytes and their tokens (*extra_n);
 * - a lender is made more recently used than a borrower whenever the borrower is stored or
 *   found, and evicting a lender evicts the borrowers left with no lender.
 * Set once, before the first put. */
void rpfx_share_extra(struct rpfx *c);

/* Stores state, and extra_bytes of extra (NULL when 0: a hybrid model's attention rows, of a
 * size that grows with n; with rpfx_share_extra, NULL borrows them), under (tenant,
 * tokens[0..n)) (n >= 1): copied, the least recently used entries evicted until its bytes fit.
 * The same prefix of the same tenant stored again replaces the old entry (a borrowing put over
 * an entry with extra bytes keeps them and takes the new state). Returns 1 when stored, 0 when
 * one entry of that size is more than the whole budget, or a borrowing put finds no lender
 * (nothing changed), -1 when memory cannot be had (error set; nothing changed). */
int rpfx_put(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n, const float *state,
             const void *extra, size_t extra_bytes);

/* Whether tenant holds an entry of exactly tokens[0..n); when it does, that entry becomes the
 * most recently used (a caller about to store the same state again can skip the copy: one
 * model's state of one prefix is always the same). */
bool rpfx_touch(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n);

/* tenant's longest stored prefix of tokens[0..n) no longer than max_len tokens: its length, with
 * *state pointing at its state and *extra, *extra_bytes, *extra_n (when not NULL) at its extra
 * bytes and the tokens they are of (0 when none; a borrower's: its lender's, more than the
 * entry's own length, to be cut by the caller), all valid until the next put, read or free; or
 * 0 (a miss). A hit makes the entry the most recently used. -1 when memory for the lookup
 * cannot be had. */
int32_t rpfx_find(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n,
                  int32_t max_len, const float **state, const void **extra, size_t *extra_bytes,
                  int32_t *extra_n);

struct rpfx_stats {
    size_t bytes;       /* held now: states + tokens */
    size_t max_bytes;   /* the budget */
    uint32_t n_entries; /* stored prefixes */
    uint64_t hits, misses;
    uint64_t tokens_reused; /* sum of hit lengths */
    uint64_t evictions;
};
void rpfx_get_stats(const struct rpfx *c, struct rpfx_stats *out);

/* Bytes one entry of n tokens and extra_bytes takes against the budget. */
size_t rpfx_entry_bytes(const struct rpfx *c, int32_t n, size_t extra_bytes);

/*
 * Streams, for files (integers little-endian): u32 magic "RPFX", u32 version 4, u64 state
 * floats, u32 entries, then per entry (oldest use first) u64 tenant, u32 n, n x i32 tokens,
 * state floats x f32, u64 extra bytes, the extra bytes (0 for a borrower, version 4);
 * u64 XXH64 of everything before it. Version 3 streams (every entry its own extra bytes), 2 (no
 * extra bytes) and 1 (no tenant: tenant 0) are read too. rpfx_read adds the
 * entries of a stream to c (as the most recent, evicting as rpfx_put does); a stream that is
 * corrupt, truncated or made for another state size is refused with the error saying which, and c
 * is then as it was.
 */
bool rpfx_write(const struct rpfx *c, struct rio_writer *w);
bool rpfx_read(struct rpfx *c, struct rio_reader *r);

/* For tests: whether the cache's invariants hold (the byte count is its entries', within the
 * budget; every borrower has a lender); false with the error set to the first that does not. */
bool rpfx_check(const struct rpfx *c);

/* For tests: keep only the bits of mask of every hash, so that collisions are frequent. */
void rpfx_debug_hash_mask(struct rpfx *c, uint64_t mask);

#endif /* RECUR_PREFIX_H */
