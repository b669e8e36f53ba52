/* The vocabulary trie and the per-step masks (see grammar.h). */
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "grammar_impl.h"

/* One node, all its fields together: a walk touches one cache line per node. */
struct tnode {
    uint64_t below[2]; /* the ASCII bytes of the strict descendants */
    uint32_t end;      /* subtree end */
    uint32_t tok_lo;   /* tokens ending here: ids[tok_lo .. tok_hi) */
    uint32_t tok_hi;
    uint32_t sub_lo; /* tokens of the whole subtree: ids[sub_lo .. sub_hi) */
    uint32_t sub_hi;
    uint8_t byte;       /* of the edge into the node */
    uint8_t below_high; /* some strict descendant has a byte >= 0x80 */
};

struct rgram_trie {
    uint64_t fingerprint; /* of the tokens' bytes: equal tries, equal masks */
    int32_t n_tokens;
    size_t n_nodes;
    struct tnode *nd;
    int32_t *ids; /* token ids sorted by bytes */
    size_t *off;  /* token i's bytes: bytes[off[i] .. off[i + 1]) */
    char *bytes;
};

struct keyed {
    const unsigned char *p;
    size_t len;
    int32_t id;
};

static int cmp_keyed(const void *x, const void *y) {
    const struct keyed *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p, b->p, n) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void rgram_trie_free(struct rgram_trie *t) {
    if (!t) return;
    free(t->nd);
    free(t->ids);
    free(t->off);
    free(t->bytes);
    free(t);
}

size_t rgram_trie_n_nodes(const struct rgram_trie *t) {
    return t->n_nodes;
}

struct rgram_trie *rgram_trie_new(int32_t n, const char *bytes, const size_t *off) {
    if (n < 1 || !bytes || !off) {
        rcore_error_set("grammar trie: no tokens");
        return NULL;
    }
    struct rgram_trie *t = calloc(1, sizeof *t);
    struct keyed *k = malloc((size_t)n * sizeof *k);
    size_t total = off[n];
    size_t *path = malloc((total + 2) * sizeof *path);
    uint32_t *parent = malloc((total + 1) * sizeof *parent);
    if (!t || !k || !path || !parent) goto oom;
    t->n_tokens = n;
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    t->bytes = malloc(total ? total : 1);
    t->nd = calloc(total + 1, sizeof *t->nd);
    t->ids = malloc((size_t)n * sizeof *t->ids);
    if (!t->off || !t->bytes || !t->nd || !t->ids) goto oom;
    memcpy(t->off, off, ((size_t)n + 1) * sizeof *off);
    memcpy(t->bytes, bytes, total);
    uint64_t fp = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (size_t i = 0; i < total; i++) fp = (fp ^ (uint8_t)bytes[i]) * 0x100000001B3ull;
    for (int32_t i = 0; i <= n; i++) fp = (fp ^ off[i]) * 0x100000001B3ull;
    t->fingerprint = fp | 1; /* never 0, the empty entry */
    size_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (off[i + 1] > off[i])
            k[m++] =
                (struct keyed){(const unsigned char *)t->bytes + off[i], off[i + 1] - off[i], i};
    qsort(k, m, sizeof *k, cmp_keyed);
    /* preorder: the path of open nodes; a new string closes those past the common prefix */
    size_t nn = 1, depth = 0;
    t->nd[0].byte = 0;
    t->nd[0].tok_lo = t->nd[0].tok_hi = 0;
    path[0] = 0;
    for (size_t i = 0; i < m; i++) {
        size_t lcp = 0;
        if (i > 0) {
            size_t lim = k[i - 1].len < k[i].len ? k[i - 1].len : k[i].len;
            while (lcp < lim && k[i - 1].p[lcp] == k[i].p[lcp]) lcp++;
        }
        while (depth > lcp) {
            t->nd[path[depth]].sub_hi = (uint32_t)i;
            t->nd[path[depth--]].end = (uint32_t)nn;
        }
        for (size_t d = lcp; d < k[i].len; d++) {
            t->nd[nn].byte = k[i].p[d];
            t->nd[nn].tok_lo = t->nd[nn].tok_hi = 0;
            t->nd[nn].sub_lo = (uint32_t)i;
            parent[nn] = (uint32_t)path[depth];
            path[++depth] = nn++;
        }
        size_t at = path[depth];
        if (t->nd[at].tok_hi == t->nd[at].tok_lo) t->nd[at].tok_lo = (uint32_t)i;
        t->nd[at].tok_hi = (uint32_t)i + 1;
        t->ids[i] = k[i].id;
    }
    while (depth > 0) {
        t->nd[path[depth]].sub_hi = (uint32_t)m;
        t->nd[path[depth--]].end = (uint32_t)nn;
    }
    t->nd[0].end = (uint32_t)nn;
    t->nd[0].sub_lo = 0;
    t->nd[0].sub_hi = (uint32_t)m;
    t->n_nodes = nn;
    /* children come after their parents: fold the descendants' bytes upwards */
    for (size_t c = nn; c-- > 1;) {
        const uint32_t p = parent[c];
        const uint8_t b = t->nd[c].byte;
        if (b < 0x80) t->nd[p].below[b >> 6] |= 1ull << (b & 63);
        t->nd[p].below[0] |= t->nd[c].below[0];
        t->nd[p].below[1] |= t->nd[c].below[1];
        t->nd[p].below_high |= (uint8_t)(b >= 0x80 || t->nd[c].below_high);
    }
    free(k);
    free(path);
    free(parent);
    return t;
oom:
    rcore_error_set("grammar trie: out of memory");
    free(k);
    free(path);
    free(parent);
    rgram_trie_free(t);
    return NULL;
}

struct walk {
    struct rgram_state *s;
    const struct rgram_trie *t;
    uint8_t *allowed;
    int64_t count;
};

static void allow_range(struct walk *w, uint32_t lo, uint32_t hi) {
    for (uint32_t j = lo; j < hi; j++) w->allowed[w->t->ids[j]] = 1;
    w->count += hi - lo;
}

/* The children of trie node ti from the state (set, part, remain). A child reached with a
 * live state allows its tokens; its subtree is skipped when the state dies, and allowed
 * whole when every byte below it is ASCII and leads the state back to itself. */
static bool walk(struct walk *w, uint32_t ti, int32_t set, uint32_t part, uint32_t remain) {
    struct rgram_state *s = w->s;
    const struct rgram_trie *t = w->t;
    for (uint32_t c = ti + 1; c < t->nd[ti].end; c = t->nd[c].end) {
        int32_t ns = set;
        uint32_t np = part, nr = remain;
        int r = rgram_step_byte(s, &ns, &np, &nr, t->nd[c].byte, true);
        if (r < 0) return false;
        if (r == 0) continue;
        if (t->nd[c].end == c + 1) { /* a leaf */
            allow_range(w, t->nd[c].tok_lo, t->nd[c].tok_hi);
            continue;
        }
        if (nr == 0 && !t->nd[c].below_high) {
            const uint64_t *loop = rgram_loop_mask(s, ns);
            if (!loop) return false;
            if ((t->nd[c].below[0] & ~loop[0]) == 0 && (t->nd[c].below[1] & ~loop[1]) == 0) {
                allow_range(w, t->nd[c].sub_lo, t->nd[c].sub_hi);
                continue;
            }
        }
        allow_range(w, t->nd[c].tok_lo, t->nd[c].tok_hi);
        if (!walk(w, c, ns, np, nr)) return false;
    }
    return true;
}

int64_t rgram_mask_walk(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed) {
    if (!rgram_state_collect(s)) return -1;
    rgram_step_begin(s);
    memset(allowed, 0, (size_t)t->n_tokens);
    struct walk w = {s, t, allowed, 0};
    return walk(&w, 0, s->cur, s->part, s->remain) ? w.count : -1;
}

int64_t rgram_mask(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed) {
    if (!rgram_state_collect(s)) return -1;
    const size_t n = (size_t)t->n_tokens;
    for (int i = 0; i < RGRAM_MASK_CACHE; i++) {
        const struct rgram_mask_entry *e = &s->masks[i];
        if (e->trie == t->fingerprint && e->gen == s->gen && e->set == s->cur &&
            e->part == s->part && e->remain == s->remain) {
            memcpy(allowed, e->mask, n);
            return e->count;
        }
    }
    const int64_t count = rgram_mask_walk(s, t, allowed);
    if (count < 0) return -1;
    /* remember it (a failed allocation only skips the cache) */
    struct rgram_mask_entry *e = &s->masks[s->next_mask];
    if (e->cap < n) {
        uint8_t *m = realloc(e->mask, n);
        if (!m) return count;
        e->mask = m;
        e->cap = n;
    }
    memcpy(e->mask, allowed, n);
    e->trie = t->fingerprint;
    e->gen = s->gen;
    e->set = s->cur;
    e->part = s->part;
    e->remain = s->remain;
    e->count = count;
    s->next_mask = (s->next_mask + 1) % RGRAM_MASK_CACHE;
    return count;
}

int64_t rgram_mask_naive(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed) {
    if (!rgram_state_collect(s)) return -1;
    int64_t count = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        int32_t set = s->cur;
        uint32_t part = s->part, remain = s->remain;
        rgram_step_begin(s); /* each token is checked on its own */
        int r = t->off[i + 1] > t->off[i];
        for (size_t j = t->off[i]; r > 0 && j < t->off[i + 1]; j++)
            r = rgram_step_byte(s, &set, &part, &remain, (uint8_t)t->bytes[j], false);
        if (r < 0) return -1;
        allowed[i] = r > 0;
        count += r > 0;
        /* uncached steps still intern what they make: drop it now and then */
        if ((i & 255) == 0 && !rgram_state_collect(s)) return -1;
    }
    return count;
}
