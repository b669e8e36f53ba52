/* The prefix state cache (see prefix.h). */
#include "prefix.h"

#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

#define MAGIC 0x58465052u /* "RPFX" */
/* 4: an entry may borrow its extra bytes (none of its own, in a cache that shares them); 3 added
   each entry's extra bytes, 2 its tenant; 1 is read as tenant 0 */
#define VERSION 4u

struct entry {
    uint64_t tenant; /* only lookups of the same tenant find it */
    uint64_t hash;   /* XXH64 of the tokens (masked in tests) */
    int32_t n;
    int32_t *tokens;
    float *state;
    uint8_t *extra; /* extra_bytes of the caller's (NULL when 0: with share, it borrows) */
    size_t extra_bytes;
    uint64_t used; /* clock of the last put or hit: the smallest goes first */
};

struct rpfx {
    size_t max_bytes, state_floats;
    struct entry *e;
    uint32_t n, cap;
    uint64_t clock;
    uint64_t hash_mask;
    bool share; /* rpfx_share_extra: an entry's extra bytes hold its prefixes' */
    struct rpfx_stats stats;
};

struct rpfx *rpfx_create(size_t max_bytes, size_t state_floats) {
    if (max_bytes == 0 || state_floats == 0) {
        rcore_error_set("prefix cache: a budget of %zu bytes for states of %zu floats", max_bytes,
                        state_floats);
        return NULL;
    }
    struct rpfx *c = calloc(1, sizeof *c);
    if (!c) {
        rcore_error_set("prefix cache: out of memory");
        return NULL;
    }
    c->max_bytes = max_bytes;
    c->state_floats = state_floats;
    c->hash_mask = ~(uint64_t)0;
    c->stats.max_bytes = max_bytes;
    return c;
}

static void entry_free(struct entry *e) {
    free(e->tokens);
    rcore_free_big(e->state);
    rcore_free_big(e->extra);
}

void rpfx_free(struct rpfx *c) {
    if (!c) return;
    for (uint32_t i = 0; i < c->n; i++) entry_free(&c->e[i]);
    free(c->e);
    free(c);
}

size_t rpfx_entry_bytes(const struct rpfx *c, int32_t n, size_t extra_bytes) {
    return c->state_floats * sizeof(float) + extra_bytes + (size_t)n * sizeof(int32_t) +
           sizeof(struct entry);
}

static uint64_t hash_tokens(const struct rpfx *c, const int32_t *tokens, int32_t n) {
    return XXH64(tokens, (size_t)n * sizeof(int32_t), 0) & c->hash_mask;
}

static void remove_at(struct rpfx *c, uint32_t i) {
    c->stats.bytes -= rpfx_entry_bytes(c, c->e[i].n, c->e[i].extra_bytes);
    entry_free(&c->e[i]);
    c->e[i] = c->e[--c->n];
    c->stats.n_entries = c->n;
}

/* Whether entry e borrows its extra bytes (rpfx_share_extra). */
static bool borrows(const struct rpfx *c, const struct entry *e) {
    return c->share && !e->extra_bytes;
}

/* The shortest of tenant's entries (other than skip) with extra bytes of its own whose tokens
 * begin with tokens[0..n): the one whose extra bytes hold those of the prefix; -1 when none. */
static int64_t lender_of(const struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n,
                         int64_t skip) {
    int64_t best = -1;
    for (uint32_t i = 0; i < c->n; i++) {
        const struct entry *d = &c->e[i];
        if ((int64_t)i == skip || !d->extra_bytes || d->tenant != tenant || d->n < n ||
            (best >= 0 && d->n >= c->e[best].n) ||
            memcmp(d->tokens, tokens, (size_t)n * sizeof(int32_t)) != 0)
            continue;
        best = i;
    }
    return best;
}

/* Removes entry i as an eviction; when it lent its extra bytes, the entries left with no lender
 * go too (they could not be restored). */
static void evict(struct rpfx *c, uint32_t i) {
    const bool lent = c->share && c->e[i].extra_bytes;
    remove_at(c, i);
    c->stats.evictions++;
    for (uint32_t j = 0; lent && j < c->n;) {
        const struct entry *e = &c->e[j];
        if (borrows(c, e) && lender_of(c, e->tenant, e->tokens, e->n, -1) < 0) {
            remove_at(c, j); /* the last entry moved into j: look at j again */
            c->stats.evictions++;
        } else {
            j++;
        }
    }
}

/* Index of tenant's entry holding exactly tokens[0..n), or -1. */
static int64_t find_exact(const struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n,
                          uint64_t hash) {
    for (uint32_t i = 0; i < c->n; i++)
        if (c->e[i].n == n && c->e[i].hash == hash && c->e[i].tenant == tenant &&
            memcmp(c->e[i].tokens, tokens, (size_t)n * sizeof(int32_t)) == 0)
            return i;
    return -1;
}

int rpfx_put(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n, const float *state,
             const void *extra, size_t extra_bytes) {
    if (n < 1 || (extra_bytes && !extra)) {
        rcore_error_set("prefix cache: storing %d tokens with %zu extra bytes", n, extra_bytes);
        return -1;
    }
    const size_t need = rpfx_entry_bytes(c, n, extra_bytes);
    if (need > c->max_bytes) return 0;
    const uint64_t hash = hash_tokens(c, tokens, n);
    const int64_t old = find_exact(c, tenant, tokens, n, hash);
    int64_t lender = -1;
    if (c->share && !extra_bytes) {
        lender = lender_of(c, tenant, tokens, n, -1);
        if (lender < 0) return 0; /* nothing holds its extra bytes */
        if (lender == old) {      /* it holds them itself: they stay, the state is the newer one */
            memcpy(c->e[old].state, state, c->state_floats * sizeof(float));
            c->e[old].used = ++c->clock;
            return 1;
        }
    }
    struct entry e = {tenant,
                      hash,
                      n,
                      malloc((size_t)n * sizeof(int32_t)),
                      rcore_alloc_big(c->state_floats * sizeof(float)),
                      extra_bytes ? rcore_alloc_big(extra_bytes) : NULL,
                      extra_bytes,
                      0};
    if (!e.tokens || !e.state || (extra_bytes && !e.extra) ||
        (c->n == c->cap && c->cap > UINT32_MAX / 2)) {
        entry_free(&e);
        rcore_error_set("prefix cache: out of memory for an entry of %d tokens", n);
        return -1;
    }
    if (c->n == c->cap) {
        const uint32_t cap = c->cap ? 2 * c->cap : 16;
        struct entry *grown = realloc(c->e, cap * sizeof *grown);
        if (!grown) {
            entry_free(&e);
            rcore_error_set("prefix cache: out of memory for %u entries", cap);
            return -1;
        }
        c->e = grown;
        c->cap = cap;
    }
    memcpy(e.tokens, tokens, (size_t)n * sizeof(int32_t));
    memcpy(e.state, state, c->state_floats * sizeof(float));
    if (extra_bytes) memcpy(e.extra, extra, extra_bytes);
    /* the same prefix stored again: its newer state replaces the old entry (whose borrowers
       the new one lends to: the same tokens) */
    if (old >= 0) {
        remove_at(c, (uint32_t)old);
        if (lender == (int64_t)c->n) lender = old; /* the last entry moved into old's place */
    }
    e.used = ++c->clock;
    c->e[c->n++] = e;
    c->stats.bytes += need;
    c->stats.n_entries = c->n;
    if (lender >= 0) c->e[lender].used = ++c->clock; /* a lender outlives its borrowers */
    /* with share, the entries this one's extra bytes hold the prefixes of give up their own */
    for (uint32_t i = 0; c->share && extra_bytes && i + 1 < c->n; i++) {
        struct entry *p = &c->e[i];
        if (!p->extra_bytes || p->tenant != tenant || p->n >= n ||
            memcmp(p->tokens, tokens, (size_t)p->n * sizeof(int32_t)) != 0)
            continue;
        c->stats.bytes -= p->extra_bytes;
        rcore_free_big(p->extra);
        p->extra = NULL;
        p->extra_bytes = 0;
    }
    /* the least recently used first, never the one just stored (the newest of all, and it fits
       the budget alone) */
    while (c->stats.bytes > c->max_bytes) {
        uint32_t lru = 0;
        for (uint32_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        evict(c, lru);
    }
    return 1;
}

bool rpfx_touch(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n) {
    if (n < 1) return false;
    const int64_t i = find_exact(c, tenant, tokens, n, hash_tokens(c, tokens, n));
    if (i < 0) return false;
    c->e[i].used = ++c->clock;
    return true;
}

int32_t rpfx_find(struct rpfx *c, uint64_t tenant, const int32_t *tokens, int32_t n,
                  int32_t max_len, const float **state, const void **extra, size_t *extra_bytes,
                  int32_t *extra_n) {
    *state = NULL;
    if (extra) *extra = NULL;
    if (extra_bytes) *extra_bytes = 0;
    if (extra_n) *extra_n = 0;
    if (max_len > n) max_len = n;
    int64_t best = -1, lender = -1;
    if (max_len >= 1 && c->n > 0) {
        /* the hash of every prefix up to max_len, in one streaming pass */
        uint64_t *h = malloc((size_t)max_len * sizeof *h);
        if (!h) {
            rcore_error_set("prefix cache: out of memory for a lookup of %d tokens", n);
            return -1;
        }
        XXH64_state_t st;
        XXH64_reset(&st, 0);
        for (int32_t i = 0; i < max_len; i++) {
            XXH64_update(&st, &tokens[i], sizeof(int32_t));
            h[i] = XXH64_digest(&st) & c->hash_mask;
        }
        /* the longest; one that borrows from no entry (never left so: evict) is passed over */
        for (int32_t bound = max_len;; bound = c->e[best].n - 1, best = -1) {
            for (uint32_t i = 0; i < c->n; i++) {
                const struct entry *e = &c->e[i];
                if (e->n > bound || (best >= 0 && e->n <= c->e[best].n) || e->tenant != tenant ||
                    h[e->n - 1] != e->hash)
                    continue;
                /* equal hashes are not equal tokens: compare them all */
                if (memcmp(e->tokens, tokens, (size_t)e->n * sizeof(int32_t)) == 0) best = i;
            }
            if (best < 0 || !borrows(c, &c->e[best])) break;
            lender = lender_of(c, tenant, tokens, c->e[best].n, best);
            if (lender >= 0) break;
        }
        free(h);
    }
    if (best < 0) {
        c->stats.misses++;
        return 0;
    }
    c->e[best].used = ++c->clock;
    c->stats.hits++;
    c->stats.tokens_reused += (uint64_t)c->e[best].n;
    *state = c->e[best].state;
    const struct entry *x = lender >= 0 ? &c->e[lender] : &c->e[best];
    if (lender >= 0) c->e[lender].used = ++c->clock; /* a lender outlives its borrowers */
    if (extra) *extra = x->extra;
    if (extra_bytes) *extra_bytes = x->extra_bytes;
    if (extra_n) *extra_n = x->extra_bytes ? x->n : 0;
    return c->e[best].n;
}

void rpfx_share_extra(struct rpfx *c) {
    c->share = true;
}

void rpfx_get_stats(const struct rpfx *c, struct rpfx_stats *out) {
    *out = c->stats;
}

bool rpfx_check(const struct rpfx *c) {
    size_t bytes = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const struct entry *e = &c->e[i];
        bytes += rpfx_entry_bytes(c, e->n, e->extra_bytes);
        if (borrows(c, e) && lender_of(c, e->tenant, e->tokens, e->n, i) < 0) {
            rcore_error_set("prefix cache: entry %u (%d tokens) borrows from no entry", i, e->n);
            return false;
        }
    }
    if (bytes != c->stats.bytes || bytes > c->max_bytes || c->stats.n_entries != c->n) {
        rcore_error_set("prefix cache: %zu bytes counted, the entries hold %zu, the budget is %zu",
                        c->stats.bytes, bytes, c->max_bytes);
        return false;
    }
    return true;
}

void rpfx_debug_hash_mask(struct rpfx *c, uint64_t mask) {
    c->hash_mask = mask;
    for (uint32_t i = 0; i < c->n; i++) c->e[i].hash = hash_tokens(c, c->e[i].tokens, c->e[i].n);
}

/* ---- streams ------------------------------------------------------------------------------- */

static int cmp_used(const void *a, const void *b) {
    const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
    return x->used < y->used ? -1 : x->used > y->used;
}

bool rpfx_write(const struct rpfx *c, struct rio_writer *w) {
    /* oldest use first, so that reading them back in order keeps the LRU order */
    const struct entry **order = malloc((c->n ? c->n : 1) * sizeof *order);
    if (!order) {
        rcore_error_set("prefix cache: out of memory");
        return false;
    }
    for (uint32_t i = 0; i < c->n; i++) order[i] = &c->e[i];
    qsort(order, c->n, sizeof *order, cmp_used);
    rio_writer_digest_reset(w);
    bool ok = rio_write_u32(w, MAGIC) && rio_write_u32(w, VERSION) &&
              rio_write_u64(w, c->state_floats) && rio_write_u32(w, c->n);
    for (uint32_t i = 0; ok && i < c->n; i++) {
        const struct entry *e = order[i];
        ok = rio_write_u64(w, e->tenant) && rio_write_u32(w, (uint32_t)e->n);
        for (int32_t t = 0; ok && t < e->n; t++) ok = rio_write_i32(w, e->tokens[t]);
        /* floats as their little-endian bits, like every other recur stream */
        for (size_t f = 0; ok && f < c->state_floats; f++) {
            uint32_t bits;
            memcpy(&bits, &e->state[f], 4);
            ok = rio_write_u32(w, bits);
        }
        ok = ok && rio_write_u64(w, e->extra_bytes) &&
             (!e->extra_bytes || rio_write(w, e->extra, e->extra_bytes));
    }
    if (ok) ok = rio_write_u64(w, rio_writer_digest(w));
    free(order);
    if (!ok) rcore_error_prefix("prefix cache");
    return ok;
}

bool rpfx_read(struct rpfx *c, struct rio_reader *r) {
    rio_reader_digest_reset(r);
    uint32_t magic = 0, version = 0, n = 0;
    uint64_t floats = 0;
    if (!rio_read_u32(r, &magic) || !rio_read_u32(r, &version) || !rio_read_u64(r, &floats) ||
        !rio_read_u32(r, &n)) {
        rcore_error_prefix("prefix cache");
        return false;
    }
    if (magic != MAGIC || version < 1 || version > VERSION) {
        rcore_error_set("prefix cache: not a prefix cache stream (magic %08x, version %u)", magic,
                        version);
        return false;
    }
    if (floats != c->state_floats) {
        rcore_error_set("prefix cache: states of %llu floats, this model's have %zu",
                        (unsigned long long)floats, c->state_floats);
        return false;
    }
    /* read everything aside first: a bad stream changes nothing */
    struct entry *tmp = calloc(n ? n : 1, sizeof *tmp);
    bool ok = tmp != NULL;
    if (!ok) rcore_error_set("prefix cache: out of memory for %u entries", n);
    uint32_t got = 0;
    for (; ok && got < n; got++) {
        struct entry *e = &tmp[got];
        uint32_t len = 0;
        e->tenant = 0;
        ok = (version < 2 || rio_read_u64(r, &e->tenant)) && rio_read_u32(r, &len);
        if (ok && (len == 0 || len > (1u << 26))) {
            rcore_error_set("prefix cache: entry %u has %u tokens", got, len);
            ok = false;
        }
        if (!ok) break;
        e->n = (int32_t)len;
        e->tokens = malloc(len * sizeof(int32_t));
        e->state = rcore_alloc_big(c->state_floats * sizeof(float));
        if (!e->tokens || !e->state) {
            rcore_error_set("prefix cache: out of memory for entry %u", got);
            ok = false;
            got++;
            break;
        }
        for (uint32_t t = 0; ok && t < len; t++) ok = rio_read_i32(r, &e->tokens[t]);
        for (size_t f = 0; ok && f < c->state_floats; f++) {
            uint32_t bits;
            ok = rio_read_u32(r, &bits);
            memcpy(&e->state[f], &bits, 4);
        }
        uint64_t extra = 0;
        if (ok && version >= 3) {
            ok = rio_read_u64(r, &extra);
            if (ok && extra > c->max_bytes) { /* could never be stored: not worth reading */
                rcore_error_set("prefix cache: entry %u has %llu extra bytes, the budget is %zu",
                                got, (unsigned long long)extra, c->max_bytes);
                ok = false;
            }
            if (ok && extra) {
                e->extra_bytes = (size_t)extra;
                if (!(e->extra = rcore_alloc_big(e->extra_bytes))) {
                    rcore_error_set("prefix cache: out of memory for entry %u", got);
                    ok = false;
                } else {
                    ok = rio_read(r, e->extra, e->extra_bytes);
                }
            }
        }
    }
    if (ok) {
        const uint64_t want = rio_reader_digest(r);
        uint64_t have = 0;
        ok = rio_read_u64(r, &have);
        if (ok && have != want && !RCORE_FUZZING) {
            rcore_error_set("prefix cache: checksum mismatch (the stream is corrupt)");
            ok = false;
        }
    }
    /* with share, the entries with extra bytes first: the others borrow theirs (one whose
       lender the stream lacks is not stored); then the stream's order of use again */
    for (int pass = 0; ok && pass < 2; pass++)
        for (uint32_t i = 0; ok && i < n; i++)
            if ((pass == 0) == (!c->share || tmp[i].extra_bytes > 0) &&
                rpfx_put(c, tmp[i].tenant, tmp[i].tokens, tmp[i].n, tmp[i].state, tmp[i].extra,
                         tmp[i].extra_bytes) < 0)
                ok = false;
    for (uint32_t i = 0; ok && c->share && i < n; i++) {
        const int64_t at = find_exact(c, tmp[i].tenant, tmp[i].tokens, tmp[i].n,
                                      hash_tokens(c, tmp[i].tokens, tmp[i].n));
        if (at >= 0) c->e[at].used = ++c->clock;
    }
    for (uint32_t i = 0; tmp && i < got && i < n; i++) entry_free(&tmp[i]);
    free(tmp);
    if (!ok) rcore_error_prefix("prefix cache");
    return ok;
}
