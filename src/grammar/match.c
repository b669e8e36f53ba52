/* The matcher: sets of persistent stacks advanced by code points and bytes (see grammar.h),
 * and the per-step masks over a vocabulary trie. */
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "grammar_impl.h"

struct node {
    uint32_t el;    /* the element to match (a SET) or to resume at (any but END / ALT) */
    int32_t parent; /* the node below, -1: none */
};

struct rgram_state {
    const struct rgram *g;
    struct node *nodes; /* the arena */
    size_t n_nodes, cap_nodes;
    /* sets of stack tops: the state's own at [0, n_cur), scratch sets after it */
    int32_t *sets;
    size_t n_sets, cap_sets;
    size_t n_cur;
    uint32_t part;   /* the bits of a partial UTF-8 character */
    uint32_t remain; /* its continuation bytes still to come (0: none) */
    int32_t *remap;  /* compaction scratch */
    size_t cap_remap;
};

/* The mask walk's data. */
struct rgram_trie {
    int32_t n_tokens;
    size_t n_nodes;
    uint8_t *byte;      /* of the edge into the node */
    uint32_t *end;      /* subtree end */
    uint32_t *tok_lo;   /* tokens ending here: ids[tok_lo .. tok_hi) */
    uint32_t *tok_hi;
    int32_t *ids;       /* token ids sorted by bytes */
    const char *bytes;  /* token bytes (the caller's, for the naive mask) */
    size_t *off;        /* copy of the offsets */
    char *own_bytes;
};

static bool grow(void **a, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *b = realloc(*a, c * size);
    if (!b) {
        rcore_error_set("grammar: out of memory");
        return false;
    }
    *a = b;
    *cap = c;
    return true;
}

static int32_t new_node(struct rgram_state *s, uint32_t el, int32_t parent) {
    if (s->n_nodes >= INT32_MAX - 1) {
        rcore_error_set("grammar: out of memory (stack nodes)");
        return -2;
    }
    if (!grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) return -2;
    s->nodes[s->n_nodes] = (struct node){el, parent};
    return (int32_t)s->n_nodes++;
}

/* Adds stack top to the set that starts at sets[from], unless an equal stack is there. */
static bool add_top(struct rgram_state *s, size_t from, int32_t top) {
    for (size_t i = from; i < s->n_sets; i++) {
        int32_t o = s->sets[i];
        if (o == top) return true;
        if (o >= 0 && top >= 0 && s->nodes[o].el == s->nodes[top].el &&
            s->nodes[o].parent == s->nodes[top].parent)
            return true;
    }
    if (s->n_sets - from >= RGRAM_MAX_STACKS) {
        rcore_error_set("grammar: more than %d parses at once (the grammar is too ambiguous)",
                        RGRAM_MAX_STACKS);
        return false;
    }
    if (!grow((void **)&s->sets, &s->cap_sets, s->n_sets + 1, sizeof *s->sets)) return false;
    s->sets[s->n_sets++] = top;
    return true;
}

/* The node that resumes at element el over parent: none when el ends its alternative. */
static int32_t resume(struct rgram_state *s, uint32_t el, int32_t parent) {
    uint32_t t = s->g->el[el].type;
    if (t == RG_END || t == RG_ALT) return parent;
    return new_node(s, el, parent);
}

/* Adds the expansion of stack top to the set at sets[from]: references are replaced by each
 * alternative of their rule until every top is a SET (or the empty stack). Terminates because
 * the parser refused left recursion. */
static bool expand(struct rgram_state *s, size_t from, int32_t top) {
    if (top == -2) return false;
    if (top < 0) return add_top(s, from, -1);
    const struct rgram *g = s->g;
    const struct node nd = s->nodes[top];
    const struct rgram_elem *e = &g->el[nd.el];
    if (e->type == RG_SET) return add_top(s, from, top);
    /* RG_REF */
    int32_t cont = resume(s, nd.el + 1, nd.parent);
    if (cont == -2) return false;
    uint32_t i = g->rule_start[e->value];
    for (;;) {
        int32_t t = resume(s, i, cont);
        if (!expand(s, from, t)) return false;
        while (g->el[i].type != RG_ALT && g->el[i].type != RG_END) i++;
        if (g->el[i].type == RG_END || g->el[i + 1].type == RG_END) break;
        i++;
    }
    return true;
}

/* Appends to the sets the stacks of sets[a .. b) advanced by code point cp. */
static bool advance_cp(struct rgram_state *s, size_t a, size_t b, uint32_t cp) {
    const struct rgram *g = s->g;
    const size_t from = s->n_sets;
    for (size_t i = a; i < b; i++) {
        int32_t top = s->sets[i];
        if (top < 0) continue;
        const struct node nd = s->nodes[top];
        if (!rgram_set_has(g, &g->sets[g->el[nd.el].value], cp)) continue;
        if (!expand(s, from, resume(s, nd.el + 1, nd.parent))) return false;
    }
    return true;
}

/* A partial character part (remain bytes to come) can still match some stack of [a, b). */
static bool partial_ok(const struct rgram_state *s, size_t a, size_t b, uint32_t part,
                       uint32_t remain) {
    const struct rgram *g = s->g;
    const uint32_t lo = part << (6 * remain), hi = lo | ((1u << (6 * remain)) - 1);
    for (size_t i = a; i < b; i++) {
        int32_t top = s->sets[i];
        if (top >= 0 && rgram_set_meets(g, &g->sets[g->el[s->nodes[top].el].value], lo, hi))
            return true;
    }
    return false;
}

/* One byte from the set [*a, *b) with partial state *part / *remain: the new set is appended
 * (or the same range while a character is incomplete). Returns 1 alive, 0 dead, -1 error. */
static int step_byte(struct rgram_state *s, size_t *a, size_t *b, uint32_t *part, uint32_t *remain,
                     uint8_t c) {
    uint32_t cp;
    if (*remain == 0) {
        if (c < 0x80) {
            cp = c;
        } else {
            int n = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
            if (n == 0) return 0;
            *part = c & (0x3Fu >> n);
            *remain = (uint32_t)n;
            return partial_ok(s, *a, *b, *part, *remain);
        }
    } else {
        if ((c & 0xC0) != 0x80) return 0;
        *part = *part << 6 | (c & 0x3Fu);
        if (--*remain > 0) return partial_ok(s, *a, *b, *part, *remain);
        cp = *part;
        *part = 0;
    }
    const size_t from = s->n_sets;
    if (!advance_cp(s, *a, *b, cp)) return -1;
    *a = from;
    *b = s->n_sets;
    return *b > *a;
}

/* Keeps only the nodes reachable from sets[a .. b), which become the state's set. */
static bool compact(struct rgram_state *s, size_t a, size_t b) {
    if (!grow((void **)&s->remap, &s->cap_remap, s->n_nodes + 1, sizeof *s->remap)) return false;
    for (size_t i = 0; i < s->n_nodes; i++) s->remap[i] = -1;
    /* nodes are created after their parents, so copying in index order keeps that: mark the
       reachable ones, then renumber them in order */
    for (size_t i = a; i < b; i++)
        for (int32_t n = s->sets[i]; n >= 0 && s->remap[n] == -1; n = s->nodes[n].parent)
            s->remap[n] = 0;
    size_t k = 0;
    for (size_t i = 0; i < s->n_nodes; i++) {
        if (s->remap[i] < 0) continue;
        struct node nd = s->nodes[i];
        if (nd.parent >= 0) nd.parent = s->remap[nd.parent];
        s->remap[i] = (int32_t)k;
        s->nodes[k++] = nd;
    }
    s->n_nodes = k;
    for (size_t i = a; i < b; i++) {
        int32_t t = s->sets[i];
        s->sets[i - a] = t >= 0 ? s->remap[t] : t;
    }
    s->n_cur = s->n_sets = b - a;
    return true;
}

bool rgram_state_reset(struct rgram_state *s) {
    s->n_nodes = 0;
    s->n_sets = 0;
    s->n_cur = 0;
    s->part = s->remain = 0;
    /* the root rule's alternatives, each over the empty stack */
    const struct rgram *g = s->g;
    uint32_t i = g->rule_start[g->root];
    for (;;) {
        if (!expand(s, 0, resume(s, i, -1))) return false;
        while (g->el[i].type != RG_ALT && g->el[i].type != RG_END) i++;
        if (g->el[i].type == RG_END || g->el[i + 1].type == RG_END) break;
        i++;
    }
    s->n_cur = s->n_sets;
    return true;
}

struct rgram_state *rgram_state_new(const struct rgram *g) {
    if (!g) {
        rcore_error_set("grammar: NULL grammar");
        return NULL;
    }
    struct rgram_state *s = calloc(1, sizeof *s);
    if (!s) {
        rcore_error_set("grammar: out of memory");
        return NULL;
    }
    s->g = g;
    if (!rgram_state_reset(s)) {
        rgram_state_free(s);
        return NULL;
    }
    return s;
}

void rgram_state_free(struct rgram_state *s) {
    if (!s) return;
    free(s->nodes);
    free(s->sets);
    free(s->remap);
    free(s);
}

bool rgram_state_accept(struct rgram_state *s, const char *bytes, size_t len) {
    const size_t keep_nodes = s->n_nodes;
    size_t a = 0, b = s->n_cur;
    uint32_t part = s->part, remain = s->remain;
    for (size_t i = 0; i < len; i++) {
        int r = step_byte(s, &a, &b, &part, &remain, (uint8_t)bytes[i]);
        if (r <= 0) {
            if (r == 0) rcore_error_set("grammar: the text does not match the grammar");
            s->n_nodes = keep_nodes;
            s->n_sets = s->n_cur;
            return false;
        }
    }
    s->part = part;
    s->remain = remain;
    if (a == 0 && b == s->n_cur) return true; /* only a partial character */
    return compact(s, a, b);
}

bool rgram_state_complete(const struct rgram_state *s) {
    if (s->remain) return false;
    for (size_t i = 0; i < s->n_cur; i++)
        if (s->sets[i] < 0) return true;
    return false;
}

bool rgram_state_can_continue(const struct rgram_state *s) {
    for (size_t i = 0; i < s->n_cur; i++)
        if (s->sets[i] >= 0) return true;
    return false;
}

/* ---- the vocabulary trie ---------------------------------------------------------------- */

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
    free(t->byte);
    free(t->end);
    free(t->tok_lo);
    free(t->tok_hi);
    free(t->ids);
    free(t->off);
    free(t->own_bytes);
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
    if (!t || !k || !path) goto oom;
    t->n_tokens = n;
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    t->own_bytes = malloc(total ? total : 1);
    t->byte = malloc(total + 1);
    t->end = malloc((total + 1) * sizeof *t->end);
    t->tok_lo = malloc((total + 1) * sizeof *t->tok_lo);
    t->tok_hi = malloc((total + 1) * sizeof *t->tok_hi);
    t->ids = malloc((size_t)n * sizeof *t->ids);
    if (!t->off || !t->own_bytes || !t->byte || !t->end || !t->tok_lo || !t->tok_hi || !t->ids)
        goto oom;
    memcpy(t->off, off, ((size_t)n + 1) * sizeof *off);
    memcpy(t->own_bytes, bytes, total);
    t->bytes = t->own_bytes;
    size_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (off[i + 1] > off[i])
            k[m++] = (struct keyed){(const unsigned char *)t->bytes + off[i], off[i + 1] - off[i], i};
    qsort(k, m, sizeof *k, cmp_keyed);
    /* preorder: the path of open nodes; a new string closes those past the common prefix */
    size_t nn = 1, depth = 0;
    t->byte[0] = 0;
    t->tok_lo[0] = t->tok_hi[0] = 0;
    path[0] = 0;
    for (size_t i = 0; i < m; i++) {
        size_t lcp = 0;
        if (i > 0) {
            size_t lim = k[i - 1].len < k[i].len ? k[i - 1].len : k[i].len;
            while (lcp < lim && k[i - 1].p[lcp] == k[i].p[lcp]) lcp++;
        }
        while (depth > lcp) t->end[path[depth--]] = (uint32_t)nn;
        for (size_t d = lcp; d < k[i].len; d++) {
            t->byte[nn] = k[i].p[d];
            t->tok_lo[nn] = t->tok_hi[nn] = 0;
            path[++depth] = nn++;
        }
        size_t at = path[depth];
        if (t->tok_hi[at] == t->tok_lo[at]) t->tok_lo[at] = (uint32_t)i;
        t->tok_hi[at] = (uint32_t)i + 1;
        t->ids[i] = k[i].id;
    }
    while (depth > 0) t->end[path[depth--]] = (uint32_t)nn;
    t->end[0] = (uint32_t)nn;
    t->n_nodes = nn;
    free(k);
    free(path);
    return t;
oom:
    rcore_error_set("grammar trie: out of memory");
    free(k);
    free(path);
    rgram_trie_free(t);
    return NULL;
}

/* ---- masks ------------------------------------------------------------------------------ */

struct walk {
    struct rgram_state *s;
    const struct rgram_trie *t;
    uint8_t *allowed;
    int64_t count;
};

static bool walk(struct walk *w, uint32_t ti, size_t a, size_t b, uint32_t part, uint32_t remain) {
    struct rgram_state *s = w->s;
    const struct rgram_trie *t = w->t;
    for (uint32_t c = ti + 1; c < t->end[ti]; c = t->end[c]) {
        const size_t mark_nodes = s->n_nodes, mark_sets = s->n_sets;
        size_t na = a, nb = b;
        uint32_t np = part, nr = remain;
        int r = step_byte(s, &na, &nb, &np, &nr, t->byte[c]);
        if (r < 0) return false;
        if (r > 0) {
            for (uint32_t j = t->tok_lo[c]; j < t->tok_hi[c]; j++) w->allowed[t->ids[j]] = 1;
            w->count += t->tok_hi[c] - t->tok_lo[c];
            if (t->end[c] > c + 1 && !walk(w, c, na, nb, np, nr)) return false;
        }
        s->n_nodes = mark_nodes;
        s->n_sets = mark_sets;
    }
    return true;
}

int64_t rgram_mask(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed) {
    memset(allowed, 0, (size_t)t->n_tokens);
    struct walk w = {s, t, allowed, 0};
    const size_t keep_nodes = s->n_nodes;
    bool ok = walk(&w, 0, 0, s->n_cur, s->part, s->remain);
    s->n_nodes = keep_nodes;
    s->n_sets = s->n_cur;
    return ok ? w.count : -1;
}

int64_t rgram_mask_naive(struct rgram_state *s, const struct rgram_trie *t, uint8_t *allowed) {
    int64_t count = 0;
    const size_t keep_nodes = s->n_nodes;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        size_t a = 0, b = s->n_cur;
        uint32_t part = s->part, remain = s->remain;
        int r = t->off[i + 1] > t->off[i];
        for (size_t j = t->off[i]; r > 0 && j < t->off[i + 1]; j++)
            r = step_byte(s, &a, &b, &part, &remain, (uint8_t)t->bytes[j]);
        s->n_nodes = keep_nodes;
        s->n_sets = s->n_cur;
        if (r < 0) return -1;
        allowed[i] = r > 0;
        count += r > 0;
    }
    return count;
}
