/*
 * batch splits: cuts a validated batch into ubatches (batch.h).
 *
 * Data structures, and why:
 *
 *  - The equal and seq splits group tokens into "sets" (tokens with the same sequence-id set).
 *    Single-sequence tokens, the common case, find their set through a per-sequence table;
 *    multi-sequence tokens hash their sorted ids into an open-addressing table. Two CSR
 *    arrays then list, in batch order, the tokens of each set and the tokens touching each
 *    sequence, each with a head cursor for the next pending token. A set is ready when its
 *    head token is the head of every sequence it touches. For each entry of a sequence's
 *    list we precompute how many consecutive entries belong to the same set (runlen), so the
 *    run a ready set can take is the minimum of runlen at its sequences' heads: O(|set|), and
 *    it stays valid while the set is ready, because only the set itself moves those heads.
 *
 *  - Ready sets sit in a priority queue keyed by head token index, so a ubatch takes the
 *    first n_seqs of them in batch order without scanning every ready set (with thousands of
 *    one-token sequences and a small n_ubatch a scan per ubatch would be quadratic). The queue
 *    is a sorted FIFO plus a binary heap for the pushes that arrive out of order: in the common
 *    cases (a generation step of many one-token sequences, prompts of a few sequences) every
 *    push is in order and costs O(1). The smallest run among all ready sets (it sets
 *    n_seq_tokens) comes from counts per run value (capped at n_ubatch) with a two-level
 *    bitmap on top: O(1) updates, and a minimum found in one word per 4,096 values.
 *    Two ready sets never share a sequence (both head tokens would have to be that
 *    sequence's head), so "skip sets that share a sequence with the chosen ones" never skips.
 *
 *  - The result is one allocation (storage) holding every per-token array in ubatch order,
 *    the copied sequence ids and out_ids, plus the array of ubatch headers, allocated once
 *    their number is known (the scratch keeps 8 bytes of shape per ubatch until then). The
 *    scratch of the split is one more allocation, freed before returning.
 */
#include "batch_impl.h"

#include "../core/core.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

bool rbatch_token_wants_output(const struct rbatch_in *batch, int32_t i, bool logits_all) {
    if (logits_all) return true;
    if (!batch->logits) return i == batch->n_tokens - 1;
    return batch->logits[i] != 0;
}

/* ---- split output ---------------------------------------------------------------------- */

/* Appends batch tokens, in ubatch order, to the arrays in the split's storage. */
struct writer {
    const struct rbatch_in *batch;
    const int32_t *pos;
    bool logits_all;
    int32_t *idx;
    int32_t *token; /* NULL for an embedding batch */
    int32_t *pos_out;
    int8_t *output;
    int32_t *n_seq_id;
    const int32_t **seq_id;
    int32_t *ids;
    int32_t *out_ids;
    size_t n_put;
    size_t n_ids_put;
    int32_t n_out;
};

static void put_token(struct writer *w, int32_t i) {
    const size_t t = w->n_put++;
    const int32_t n = tok_n_ids(w->batch, i);
    const bool out = rbatch_token_wants_output(w->batch, i, w->logits_all);
    w->idx[t] = i;
    if (w->token) w->token[t] = w->batch->token[i];
    w->pos_out[t] = w->pos[i];
    w->output[t] = out ? 1 : 0;
    w->n_seq_id[t] = n;
    int32_t *dst = w->ids + w->n_ids_put;
    const int32_t *src = tok_ids(w->batch, i);
    w->seq_id[t] = dst;
    for (int32_t j = 0; j < n; j++) dst[j] = src[j]; /* mostly one id: no memcpy call */
    w->n_ids_put += (size_t)n;
    if (out) w->out_ids[w->n_out++] = i;
}

/* Points a ubatch header at its n_tokens tokens, which start at ubatch-order index start. */
static void fill_ubatch(const struct writer *w, struct rbatch_ubatch *ub, size_t start,
                        uint32_t n_tokens, uint32_t n_seq_tokens, uint32_t n_seqs) {
    ub->n_tokens = n_tokens;
    ub->n_seq_tokens = n_seq_tokens;
    ub->n_seqs = n_seqs;
    ub->idx = w->idx + start;
    ub->token = w->token ? w->token + start : NULL;
    ub->pos = w->pos_out + start;
    ub->output = w->output + start;
    ub->n_seq_id = w->n_seq_id + start;
    ub->seq_id = w->seq_id + start;
}

/* ---- ready queue and run minimum --------------------------------------------------------- */

/* Binary min-heap of packed (key << 32 | set) entries: one compare orders by key, then set. */
struct heap {
    uint64_t *a;
    size_t n;
};

static void heap_push(struct heap *h, uint64_t v) {
    size_t i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2] > v) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = v;
}

static uint64_t heap_pop(struct heap *h) {
    const uint64_t top = h->a[0];
    const uint64_t v = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1] < h->a[c]) c++;
        if (h->a[c] >= v) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0) h->a[i] = v;
    return top;
}

/* Ready sets by head token index. Most pushes arrive in increasing order (the initial ready
 * sets, a set that moves on past every other ready head), and those go to a sorted FIFO at
 * O(1); only the out-of-order ones pay for the heap. Popping takes the smaller of both fronts.
 * Every push is followed by exactly one pop and each pop takes at least one token, so n_tokens
 * entries suffice for each part, without wrapping. */
struct ready_queue {
    uint64_t *fifo;
    size_t head, tail;
    struct heap heap;
};

static size_t rq_size(const struct ready_queue *q) {
    return q->tail - q->head + q->heap.n;
}

static void rq_push(struct ready_queue *q, int32_t key, int32_t set) {
    const uint64_t v = (uint64_t)(uint32_t)key << 32 | (uint32_t)set;
    if (q->tail == q->head || q->fifo[q->tail - 1] < v)
        q->fifo[q->tail++] = v;
    else
        heap_push(&q->heap, v);
}

static bool rq_front_is_fifo(const struct ready_queue *q) {
    return q->tail > q->head && (q->heap.n == 0 || q->fifo[q->head] < q->heap.a[0]);
}

static int32_t rq_peek(const struct ready_queue *q) {
    const uint64_t v = rq_front_is_fifo(q) ? q->fifo[q->head] : q->heap.a[0];
    return (int32_t)(v & 0xffffffffu);
}

static int32_t rq_pop(struct ready_queue *q) {
    const uint64_t v = rq_front_is_fifo(q) ? q->fifo[q->head++] : heap_pop(&q->heap);
    return (int32_t)(v & 0xffffffffu);
}

/* Multiset of small values 0..cap with O(1) add and remove and a minimum found through a
 * two-level bitmap (one word per 4,096 values), for the smallest run among the ready sets. */
struct minset {
    int32_t *cnt; /* [cap+1] */
    uint64_t *lo; /* [n_lo] bit v: cnt[v] > 0 */
    uint64_t *hi; /* [n_hi] bit w: lo[w] != 0 */
    size_t n_hi;
};

static unsigned ctz64(uint64_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(x);
#else
    unsigned n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

static void minset_add(struct minset *m, uint32_t v) {
    if (m->cnt[v]++ > 0) return;
    m->lo[v >> 6] |= 1ULL << (v & 63);
    m->hi[v >> 12] |= 1ULL << ((v >> 6) & 63);
}

static void minset_remove(struct minset *m, uint32_t v) {
    if (--m->cnt[v] > 0) return;
    m->lo[v >> 6] &= ~(1ULL << (v & 63));
    if (m->lo[v >> 6] == 0) m->hi[v >> 12] &= ~(1ULL << ((v >> 6) & 63));
}

/* The smallest value held; the set must not be empty. */
static uint32_t minset_min(const struct minset *m) {
    size_t i = 0;
    while (m->hi[i] == 0) i++;
    const size_t w = i * 64 + ctz64(m->hi[i]);
    return (uint32_t)(w * 64 + ctz64(m->lo[w]));
}

/* ---- equal and seq splits ----------------------------------------------------------------- */

struct grouping {
    const struct rbatch_in *batch;
    int32_t n_sets;
    int32_t *tok_set;   /* [n_tokens] set of each token */
    int32_t *set_off;   /* [n_sets+1] CSR into set_tok */
    int32_t *set_tok;   /* tokens of each set, batch order */
    int32_t *set_head;  /* [n_sets] pending tokens of the set start at set_tok[off + head] */
    int32_t *set_first; /* [n_sets] first token: its ids are the set's ids, in its own order */
    int32_t *set_run;   /* [n_sets] run while ready */
    int8_t *set_ready;  /* [n_sets] in the ready queue */
    int32_t *seq_off;   /* [n_seq+1] CSR into seq_tok */
    int32_t *seq_tok;   /* tokens touching each sequence, batch order */
    int32_t *seq_head;  /* [n_seq] absolute index into seq_tok of the next pending token */
    int32_t *runlen;    /* [n_ids] consecutive seq_tok entries from here in the same set */
};

static int32_t set_head_token(const struct grouping *g, int32_t k) {
    return g->set_tok[g->set_off[k] + g->set_head[k]];
}

/* True when set k has a pending token that is the next pending token of all its sequences;
 * then set_run[k] receives how many of its tokens can go in a row. */
static bool set_check_ready(struct grouping *g, int32_t k) {
    if (g->set_head[k] >= g->set_off[k + 1] - g->set_off[k]) return false;
    const int32_t t = set_head_token(g, k);
    const int32_t n = tok_n_ids(g->batch, g->set_first[k]);
    const int32_t *ids = tok_ids(g->batch, g->set_first[k]);
    int32_t run = INT32_MAX;
    for (int32_t j = 0; j < n; j++) {
        const int32_t at = g->seq_head[ids[j]];
        if (g->seq_tok[at] != t) return false;
        if (g->runlen[at] < run) run = g->runlen[at];
    }
    g->set_run[k] = run;
    return true;
}

/* The state of building ubatches out of the grouped sets. */
struct placement {
    struct ready_queue ready;
    struct minset runs; /* run of every ready set, as min(run, cap) */
    uint32_t cap;
    int32_t *chosen;    /* [n_tokens] sets of the ubatch being built */
    uint32_t *ub_nst;   /* [n_tokens] shape of each ubatch until the headers exist */
    uint32_t *ub_nseqs; /* [n_tokens] */
    uint32_t n_ub;
};

static uint32_t run_bucket(const struct grouping *g, const struct placement *pl, int32_t k) {
    return (uint32_t)g->set_run[k] < pl->cap ? (uint32_t)g->set_run[k] : pl->cap;
}

/* Set k (whose set_run is current) joins the ready queue and the run minimum. */
static void mark_ready(struct grouping *g, struct placement *pl, int32_t k) {
    g->set_ready[k] = 1;
    rq_push(&pl->ready, set_head_token(g, k), k);
    minset_add(&pl->runs, run_bucket(g, pl, k));
}

static void sort_ids(int32_t *a, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        int32_t v = a[i], j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t hash_ids(const int32_t *a, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)a[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    return (uint32_t)h;
}

/* What one pass over the batch learns before anything is allocated. */
struct batch_shape {
    size_t n_ids;       /* sequence ids of all tokens */
    size_t n_multi_ids; /* ... of the tokens with more than one */
    int32_t n_multi;    /* tokens with more than one sequence id */
    int32_t max_seq;    /* largest sequence id */
    int32_t n_outputs;
};

/* Builds the ubatches of the equal or seq split from grouped sets, putting their tokens through
 * w and their shapes into pl. */
static bool place_sets(struct grouping *g, size_t n_seq, struct placement *pl,
                       enum rbatch_split_kind kind, uint32_t n_ubatch, struct writer *w) {
    const int32_t n_tokens = g->batch->n_tokens;
    const size_t nt = (size_t)n_tokens;

    /* prefix sums, then the CSR lists in batch order (heads serve as fill cursors) */
    g->set_off[0] = 0;
    for (int32_t k = 0; k < g->n_sets; k++) g->set_off[k + 1] += g->set_off[k];
    for (size_t s = 0; s < n_seq; s++) g->seq_off[s + 1] += g->seq_off[s];
    for (int32_t k = 0; k < g->n_sets; k++) g->set_head[k] = 0;
    for (size_t s = 0; s < n_seq; s++) g->seq_head[s] = g->seq_off[s];
    for (int32_t i = 0; i < n_tokens; i++) {
        const int32_t k = g->tok_set[i];
        const int32_t n = tok_n_ids(g->batch, i);
        const int32_t *ids = tok_ids(g->batch, i);
        g->set_tok[g->set_off[k] + g->set_head[k]++] = i;
        for (int32_t j = 0; j < n; j++) g->seq_tok[g->seq_head[ids[j]]++] = i;
    }
    for (size_t s = 0; s < n_seq; s++) {
        const int32_t b = g->seq_off[s], e = g->seq_off[s + 1];
        for (int32_t p = e - 1; p >= b; p--) {
            const bool same =
                p + 1 < e && g->tok_set[g->seq_tok[p + 1]] == g->tok_set[g->seq_tok[p]];
            g->runlen[p] = same ? g->runlen[p + 1] + 1 : 1;
        }
        g->seq_head[s] = b;
    }
    for (int32_t k = 0; k < g->n_sets; k++) {
        g->set_head[k] = 0;
        g->set_ready[k] = 0;
    }

    /* sets were numbered by first token, so the initial pushes come in key order */
    for (int32_t k = 0; k < g->n_sets; k++) {
        if (set_check_ready(g, k)) mark_ready(g, pl, k);
    }

    while (w->n_put < nt) {
        const size_t n_ready = rq_size(&pl->ready);
        /* the earliest pending token always heads all its sequences: a debug build stops here,
           a release build refuses the batch rather than loop */
        assert(n_ready > 0);
        if (n_ready == 0) {
            rcore_error_set("batch: internal error: no ready sequence set with %zu tokens left",
                            nt - w->n_put);
            return false;
        }
        uint32_t n_seq_tokens, n_seqs;
        if (kind == RBATCH_SPLIT_SEQ) {
            const uint32_t run = (uint32_t)g->set_run[rq_peek(&pl->ready)];
            n_seq_tokens = run < n_ubatch ? run : n_ubatch;
            n_seqs = 1;
        } else {
            n_seq_tokens = minset_min(&pl->runs); /* already capped at n_ubatch */
            n_seqs = n_ubatch / n_seq_tokens;
            if ((size_t)n_seqs > n_ready) n_seqs = (uint32_t)n_ready;
        }

        for (uint32_t c = 0; c < n_seqs; c++) {
            const int32_t k = rq_pop(&pl->ready);
            pl->chosen[c] = k;
            g->set_ready[k] = 0;
            minset_remove(&pl->runs, run_bucket(g, pl, k));
            for (uint32_t j = 0; j < n_seq_tokens; j++) {
                put_token(w, g->set_tok[g->set_off[k] + g->set_head[k] + (int32_t)j]);
            }
        }
        pl->ub_nst[pl->n_ub] = n_seq_tokens;
        pl->ub_nseqs[pl->n_ub] = n_seqs;
        pl->n_ub++;

        /* move the heads only after the whole ubatch is taken, so that no set is pushed
         * back and chosen twice in one ubatch */
        for (uint32_t c = 0; c < n_seqs; c++) {
            const int32_t k = pl->chosen[c];
            const int32_t n = tok_n_ids(g->batch, g->set_first[k]);
            const int32_t *ids = tok_ids(g->batch, g->set_first[k]);
            for (int32_t j = 0; j < n; j++) g->seq_head[ids[j]] += (int32_t)n_seq_tokens;
            g->set_head[k] += (int32_t)n_seq_tokens;
            g->set_run[k] -= (int32_t)n_seq_tokens;
        }
        for (uint32_t c = 0; c < n_seqs; c++) {
            const int32_t k = pl->chosen[c];
            if (g->set_run[k] > 0) {
                mark_ready(g, pl, k);
                continue;
            }
            /* the run ended: the sets now at the head of its sequences may have become ready */
            const int32_t n = tok_n_ids(g->batch, g->set_first[k]);
            const int32_t *ids = tok_ids(g->batch, g->set_first[k]);
            for (int32_t j = 0; j < n; j++) {
                const int32_t at = g->seq_head[ids[j]];
                if (at >= g->seq_off[ids[j] + 1]) continue;
                const int32_t k2 = g->tok_set[g->seq_tok[at]];
                if (!g->set_ready[k2] && set_check_ready(g, k2)) {
                    mark_ready(g, pl, k2);
                }
            }
        }
    }

    return true;
}

/* Puts the tokens in ubatch order through w and returns the ubatch headers (allocated here,
 * once their number is known) in *ubatches_out. */
static bool split_grouped(const struct rbatch_in *batch, const struct batch_shape *shape,
                          uint32_t n_ubatch, enum rbatch_split_kind kind, struct writer *w,
                          struct rbatch_ubatch **ubatches_out, uint32_t *n_ubatches) {
    const int32_t n_tokens = batch->n_tokens;
    const int32_t max_seq = shape->max_seq, n_multi = shape->n_multi;
    const size_t n_ids = shape->n_ids, n_multi_ids = shape->n_multi_ids;
    if (n_ids > INT32_MAX) {
        rcore_error_set("batch: too many sequence ids to split (%zu)", n_ids);
        return false;
    }
    if (max_seq == INT32_MAX) {
        rcore_error_set("batch: sequence id %d is too large to split", max_seq);
        return false;
    }
    const size_t n_seq = (size_t)max_seq + 1;
    size_t hcap = 0;
    if (n_multi > 0) {
        hcap = 4;
        while (hcap < 2 * (size_t)n_multi) hcap *= 2;
    }
    const size_t nt = (size_t)n_tokens;
    /* a run never exceeds n_tokens, and n_seq_tokens only needs min(run, n_ubatch) */
    const uint32_t cap = n_ubatch < (uint32_t)n_tokens ? n_ubatch : (uint32_t)n_tokens;
    const size_t n_lo = cap / 64 + 1, n_hi = n_lo / 64 + 1;

    struct layout l = {0, true};
    size_t o_fifo = LAY(&l, nt, uint64_t);
    size_t o_heap = LAY(&l, nt, uint64_t);
    size_t o_lo = LAY(&l, n_lo, uint64_t);
    size_t o_hi = LAY(&l, n_hi, uint64_t);
    size_t o_cnt = LAY(&l, (size_t)cap + 1, int32_t);
    size_t o_tok_set = LAY(&l, nt, int32_t);
    size_t o_set_off = LAY(&l, nt + 1, int32_t);
    size_t o_set_tok = LAY(&l, nt, int32_t);
    size_t o_set_head = LAY(&l, nt, int32_t);
    size_t o_set_first = LAY(&l, nt, int32_t);
    size_t o_set_run = LAY(&l, nt, int32_t);
    size_t o_set_key = LAY(&l, nt, int32_t);
    size_t o_chosen = LAY(&l, nt, int32_t);
    size_t o_ub_nst = LAY(&l, nt, uint32_t);
    size_t o_ub_nseqs = LAY(&l, nt, uint32_t);
    size_t o_seq_off = LAY(&l, n_seq + 1, int32_t);
    size_t o_seq_head = LAY(&l, n_seq, int32_t);
    size_t o_seq_single = LAY(&l, n_seq, int32_t);
    size_t o_seq_stamp = LAY(&l, n_seq, int32_t);
    size_t o_tmp = LAY(&l, n_seq, int32_t);
    size_t o_seq_tok = LAY(&l, n_ids, int32_t);
    size_t o_runlen = LAY(&l, n_ids, int32_t);
    size_t o_keys = LAY(&l, n_multi_ids, int32_t);
    size_t o_table = LAY(&l, hcap, int32_t);
    size_t o_ready = LAY(&l, nt, int8_t);
    char *mem = l.ok ? malloc(l.size) : NULL;
    if (!mem) {
        rcore_error_set("batch: out of memory for splitting %d tokens", n_tokens);
        return false;
    }
#define AT(type, off) ((type *)(void *)(mem + (off)))
    struct grouping g = {
        .batch = batch,
        .n_sets = 0,
        .tok_set = AT(int32_t, o_tok_set),
        .set_off = AT(int32_t, o_set_off),
        .set_tok = AT(int32_t, o_set_tok),
        .set_head = AT(int32_t, o_set_head),
        .set_first = AT(int32_t, o_set_first),
        .set_run = AT(int32_t, o_set_run),
        .set_ready = AT(int8_t, o_ready),
        .seq_off = AT(int32_t, o_seq_off),
        .seq_tok = AT(int32_t, o_seq_tok),
        .seq_head = AT(int32_t, o_seq_head),
        .runlen = AT(int32_t, o_runlen),
    };
    struct placement pl = {
        .ready = {AT(uint64_t, o_fifo), 0, 0, {AT(uint64_t, o_heap), 0}},
        .runs = {AT(int32_t, o_cnt), AT(uint64_t, o_lo), AT(uint64_t, o_hi), n_hi},
        .cap = cap,
        .chosen = AT(int32_t, o_chosen),
        .ub_nst = AT(uint32_t, o_ub_nst),
        .ub_nseqs = AT(uint32_t, o_ub_nseqs),
        .n_ub = 0,
    };
    int32_t *set_key = AT(int32_t, o_set_key); /* offset of the set's sorted ids in keys */
    int32_t *seq_single = AT(int32_t, o_seq_single);
    int32_t *seq_stamp = AT(int32_t, o_seq_stamp);
    int32_t *tmp = AT(int32_t, o_tmp);
    int32_t *keys = AT(int32_t, o_keys);
    int32_t *table = AT(int32_t, o_table);
#undef AT
    struct rbatch_ubatch *ubatches = NULL;
    size_t start = 0;
    bool ok = false;
    int32_t n_keys = 0;

    for (size_t s = 0; s <= n_seq; s++) g.seq_off[s] = 0;
    for (size_t s = 0; s < n_seq; s++) seq_single[s] = seq_stamp[s] = -1;
    for (size_t h = 0; h < hcap; h++) table[h] = -1;
    memset(pl.runs.cnt, 0, ((size_t)cap + 1) * sizeof *pl.runs.cnt);
    memset(pl.runs.lo, 0, n_lo * sizeof *pl.runs.lo);
    memset(pl.runs.hi, 0, n_hi * sizeof *pl.runs.hi);

    /* group tokens into sets; count tokens per sequence (in seq_off[s+1]) and per set */
    for (int32_t i = 0; i < n_tokens; i++) {
        const int32_t n = tok_n_ids(batch, i);
        const int32_t *ids = tok_ids(batch, i);
        for (int32_t j = 0; j < n; j++) {
            if (seq_stamp[ids[j]] == i) {
                rcore_error_set("batch token %d: sequence id %d appears twice (validate the "
                                "batch first)",
                                i, ids[j]);
                goto done;
            }
            seq_stamp[ids[j]] = i;
            g.seq_off[ids[j] + 1]++;
        }
        int32_t k = -1;
        bool is_new = false;
        if (n == 1) {
            k = seq_single[ids[0]];
            if (k < 0) {
                k = seq_single[ids[0]] = g.n_sets++;
                is_new = true;
            }
        } else {
            memcpy(tmp, ids, (size_t)n * sizeof(int32_t));
            if (n <= 16)
                sort_ids(tmp, n);
            else
                qsort(tmp, (size_t)n, sizeof(int32_t), cmp_i32);
            size_t h = hash_ids(tmp, n) & (hcap - 1);
            for (; table[h] >= 0; h = (h + 1) & (hcap - 1)) {
                const int32_t k2 = table[h];
                if (tok_n_ids(batch, g.set_first[k2]) == n &&
                    memcmp(keys + set_key[k2], tmp, (size_t)n * sizeof(int32_t)) == 0) {
                    k = k2;
                    break;
                }
            }
            if (k < 0) {
                k = table[h] = g.n_sets++;
                is_new = true;
                set_key[k] = n_keys;
                memcpy(keys + n_keys, tmp, (size_t)n * sizeof(int32_t));
                n_keys += n;
            }
        }
        if (is_new) {
            g.set_first[k] = i;
            g.set_off[k + 1] = 0;
        }
        g.tok_set[i] = k;
        g.set_off[k + 1]++;
    }

    if (n_multi == 0 && g.n_sets == n_tokens) {
        /* Every token alone on a sequence of its own (a generation step): all sets are ready
         * with runs of 1, so the equal split is batch order n_ubatch streams at a time and the
         * seq split one token per ubatch. Skipping the rest of the machinery makes this
         * common case several times cheaper. */
        const uint32_t per_ub = kind == RBATCH_SPLIT_SEQ ? 1 : n_ubatch;
        for (int32_t i = 0; i < n_tokens; i++) put_token(w, i);
        for (size_t at = 0; at < nt; at += per_ub) {
            pl.ub_nst[pl.n_ub] = 1;
            pl.ub_nseqs[pl.n_ub++] = (uint32_t)(nt - at < per_ub ? nt - at : per_ub);
        }
    } else if (!place_sets(&g, n_seq, &pl, kind, n_ubatch, w)) {
        goto done;
    }

    ubatches = malloc((size_t)pl.n_ub * sizeof *ubatches);
    if (!ubatches) {
        rcore_error_set("batch: out of memory for %u ubatch headers", pl.n_ub);
        goto done;
    }
    for (uint32_t u = 0; u < pl.n_ub; u++) {
        const uint32_t n = pl.ub_nst[u] * pl.ub_nseqs[u];
        fill_ubatch(w, &ubatches[u], start, n, pl.ub_nst[u], pl.ub_nseqs[u]);
        start += n;
    }
    *ubatches_out = ubatches;
    *n_ubatches = pl.n_ub;
    ok = true;
done:
    free(mem);
    return ok;
}

/* ---- split entry points ------------------------------------------------------------------ */

bool rbatch_split(const struct rbatch_in *batch, const int32_t *pos, uint32_t n_ubatch,
                  enum rbatch_split_kind kind, bool logits_all, struct rbatch_split *out) {
    if (!out) {
        rcore_error_set("rbatch_split: out must not be NULL");
        return false;
    }
    memset(out, 0, sizeof *out);
    if (!batch || batch->n_tokens < 1) {
        rcore_error_set("batch is empty");
        return false;
    }
    if (!pos) pos = batch->pos;
    if (!pos) {
        rcore_error_set("rbatch_split: no positions (pass those rbatch_validate filled in)");
        return false;
    }
    if (n_ubatch < 1) {
        rcore_error_set("rbatch_split: n_ubatch must be at least 1");
        return false;
    }
    if (kind != RBATCH_SPLIT_EQUAL && kind != RBATCH_SPLIT_SEQ && kind != RBATCH_SPLIT_SIMPLE) {
        rcore_error_set("rbatch_split: unknown split kind %d", (int)kind);
        return false;
    }
    if (batch->n_seq_id && !batch->seq_id) {
        rcore_error_set("batch has n_seq_id but no seq_id");
        return false;
    }

    const int32_t n_tokens = batch->n_tokens;
    const size_t nt = (size_t)n_tokens;
    struct batch_shape shape = {0, 0, 0, 0, 0};
    for (int32_t i = 0; i < n_tokens; i++) {
        const int32_t n = tok_n_ids(batch, i);
        const int32_t *ids = tok_ids(batch, i);
        if (n < 1 || !ids) {
            rcore_error_set("batch token %d: no sequence id (validate the batch first)", i);
            return false;
        }
        for (int32_t j = 0; j < n; j++) {
            if (ids[j] < 0) {
                rcore_error_set("batch token %d: sequence id %d is negative (validate the batch "
                                "first)",
                                i, ids[j]);
                return false;
            }
            if (ids[j] > shape.max_seq) shape.max_seq = ids[j];
        }
        shape.n_ids += (size_t)n;
        if (n > 1) {
            shape.n_multi++;
            shape.n_multi_ids += (size_t)n;
        }
        if (rbatch_token_wants_output(batch, i, logits_all)) shape.n_outputs++;
    }
    const int32_t n_outputs = shape.n_outputs;
    const size_t n_ids = shape.n_ids;

    struct layout l = {0, true};
    size_t o_seq_id = LAY(&l, nt, const int32_t *);
    size_t o_idx = LAY(&l, nt, int32_t);
    size_t o_token = LAY(&l, batch->token ? nt : 0, int32_t);
    size_t o_pos = LAY(&l, nt, int32_t);
    size_t o_n_seq_id = LAY(&l, nt, int32_t);
    size_t o_out_ids = LAY(&l, (size_t)n_outputs, int32_t);
    size_t o_ids = LAY(&l, n_ids, int32_t);
    size_t o_output = LAY(&l, nt, int8_t);
    char *storage = l.ok ? malloc(l.size) : NULL;
    if (!storage) {
        rcore_error_set("batch: out of memory for splitting %d tokens", n_tokens);
        return false;
    }
    struct writer w = {
        .batch = batch,
        .pos = pos,
        .logits_all = logits_all,
        .idx = (int32_t *)(void *)(storage + o_idx),
        .token = batch->token ? (int32_t *)(void *)(storage + o_token) : NULL,
        .pos_out = (int32_t *)(void *)(storage + o_pos),
        .output = (int8_t *)(void *)(storage + o_output),
        .n_seq_id = (int32_t *)(void *)(storage + o_n_seq_id),
        .seq_id = (const int32_t **)(void *)(storage + o_seq_id),
        .ids = (int32_t *)(void *)(storage + o_ids),
        .out_ids = (int32_t *)(void *)(storage + o_out_ids),
    };

    struct rbatch_ubatch *ubatches = NULL;
    uint32_t n_ub = 0;
    if (kind == RBATCH_SPLIT_SIMPLE) {
        n_ub = (uint32_t)((nt + n_ubatch - 1) / n_ubatch);
        ubatches = malloc((size_t)n_ub * sizeof *ubatches);
        if (!ubatches) {
            free(storage);
            rcore_error_set("batch: out of memory for %u ubatch headers", n_ub);
            return false;
        }
        for (int32_t i = 0; i < n_tokens; i++) put_token(&w, i);
        for (uint32_t u = 0; u < n_ub; u++) {
            const size_t start = (size_t)u * n_ubatch;
            const uint32_t n = (uint32_t)(nt - start < n_ubatch ? nt - start : n_ubatch);
            fill_ubatch(&w, &ubatches[u], start, n, 0, n);
        }
    } else if (!split_grouped(batch, &shape, n_ubatch, kind, &w, &ubatches, &n_ub)) {
        free(storage);
        return false;
    }

    out->kind = kind;
    out->n_ubatch = n_ubatch;
    out->n_tokens = n_tokens;
    out->n_ubatches = n_ub;
    out->ubatches = ubatches;
    out->n_outputs = w.n_out;
    out->out_ids = w.out_ids;
    out->storage = storage;
    return true;
}

void rbatch_split_free(struct rbatch_split *split) {
    if (!split) return;
    free(split->ubatches);
    free(split->storage);
    memset(split, 0, sizeof *split);
}
