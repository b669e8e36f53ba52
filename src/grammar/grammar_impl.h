/* The grammar module's shared internals (see grammar.h for the data structures). */
#ifndef RECUR_GRAMMAR_IMPL_H
#define RECUR_GRAMMAR_IMPL_H

#include "grammar.h"

enum rgram_elem_type { RG_END = 0, RG_ALT = 1, RG_REF = 2, RG_SET = 3 };

struct rgram_elem {
    uint32_t type;  /* enum rgram_elem_type */
    uint32_t value; /* REF: the rule; SET: the set */
};

struct rgram_range {
    uint32_t lo, hi; /* code points, inclusive */
};

/* ranges[first .. first + n) of the grammar, sorted and merged */
struct rgram_set {
    uint32_t first, n;
    bool neg; /* the set is every code point outside the ranges */
};

struct rgram {
    struct rgram_elem *el;
    size_t n_el;
    uint32_t *rule_start; /* index of each rule's first element */
    size_t n_rules;
    struct rgram_set *sets;
    size_t n_sets;
    struct rgram_range *ranges;
    size_t n_ranges;
    uint32_t root;
};

#define RGRAM_MAX_ELEMS (1u << 20)

static inline bool rgram_set_has(const struct rgram *g, const struct rgram_set *s, uint32_t cp) {
    if (s->n == 0) return s->neg; /* `.` alone: a grammar with no ranges has ranges NULL */
    const struct rgram_range *r = g->ranges + s->first;
    size_t lo = 0, hi = s->n;
    while (lo < hi) { /* the first range whose hi >= cp */
        size_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    const bool in = lo < s->n && r[lo].lo <= cp;
    return in != s->neg;
}

/* Some code point in [lo, hi] is in the set. */
static inline bool rgram_set_meets(const struct rgram *g, const struct rgram_set *s, uint32_t lo,
                                   uint32_t hi) {
    if (s->n == 0) return s->neg;
    const struct rgram_range *r = g->ranges + s->first;
    if (!s->neg) {
        for (uint32_t i = 0; i < s->n; i++)
            if (r[i].lo <= hi && r[i].hi >= lo) return true;
        return false;
    }
    /* negated: true unless merged ranges cover [lo, hi] */
    for (uint32_t i = 0; i < s->n; i++)
        if (r[i].lo <= lo && r[i].hi >= hi) return false;
    return true;
}

/* ---- the matcher's state (match.c), used by the masks (trie.c) ---------------------------- */

/* A stack node, interned: equal (el, parent) pairs are one node, so equal stacks are one id
 * and equal sets of stacks are one set id. */
struct rgram_node {
    uint32_t el;    /* the element to match (a SET) or to resume at */
    int32_t parent; /* the node below, -1: none */
};

/* A set of stacks: ids pool[off .. off + len), sorted; -1 is the empty stack (complete). */
struct rgram_setrec {
    uint32_t off, len;
    uint64_t loop[2]; /* ASCII bytes that lead back to this set (valid when loop_known) */
    bool loop_known;
};

#define RGRAM_DEAD    (-1) /* a transition to no stack */
#define RGRAM_ERROR   (-2) /* a limit or allocation failure (error set) */
#define RGRAM_UNKNOWN (-3)

/* Masks already computed, by trie content and state: a state that comes back (the inside of a
 * string, the space between values) is not walked again. */
#define RGRAM_MASK_CACHE 8
struct rgram_mask_entry {
    uint64_t trie; /* the trie's fingerprint; 0: empty entry */
    uint64_t gen;  /* the state's generation (set ids change when caches are collected) */
    int32_t set;
    uint32_t part, remain;
    int64_t count;
    uint8_t *mask;
    size_t cap;
};

struct rgram_state {
    const struct rgram *g;
    struct rgram_mask_entry masks[RGRAM_MASK_CACHE];
    unsigned next_mask; /* the entry to replace next */
    uint64_t gen;
    struct rgram_node *nodes;
    size_t n_nodes, cap_nodes;
    int32_t *node_hash; /* open addressing over node ids, -1 empty */
    size_t cap_node_hash;
    int32_t *pool; /* set members */
    size_t n_pool, cap_pool;
    struct rgram_setrec *sets;
    size_t n_sets, cap_sets;
    int32_t *set_hash;
    size_t cap_set_hash;
    int32_t *trans; /* [set * 128 + byte]: the set after an ASCII byte, or RGRAM_UNKNOWN */
    size_t cap_trans;
    uint64_t *cp_key; /* the other code points' transitions: (set << 21 | cp) + 1, 0 empty */
    int32_t *cp_val;
    size_t n_cp, cap_cp;
    int32_t *scratch; /* a set being built */
    size_t n_scratch, cap_scratch;
    /* per node, the build of the scratch set (stamp) that last added it (a SET node) or
       expanded it (any other node): a stack is expanded once per build, whatever the number
       of ways that lead to it, since its expansion is the same each time */
    uint32_t *seen;
    size_t cap_seen;
    uint32_t stamp;
    bool end_seen;   /* the empty stack is in the scratch set */
    unsigned depth;  /* the expansion's recursion, at most RGRAM_MAX_DEPTH */
    uint64_t work;   /* stacks looked at in this step, at most RGRAM_MAX_STEP_WORK */
    int32_t cur;     /* the state's set */
    uint32_t part;   /* bits of a partial UTF-8 character */
    uint32_t remain; /* its continuation bytes still to come (0: none) */
};

/* A step (a mask, a text accepted, a reset) starts with no work done. */
static inline void rgram_step_begin(struct rgram_state *s) {
    s->work = 0;
}

/* The set after code point cp from set (cached): a set id, RGRAM_DEAD or RGRAM_ERROR. With
 * cached false, computed again (the naive mask's cost model). */
int32_t rgram_advance(struct rgram_state *s, int32_t set, uint32_t cp, bool cached);
/* The ASCII bytes that lead from set back to itself (computed once per set). */
const uint64_t *rgram_loop_mask(struct rgram_state *s, int32_t set);
/* A partial character (part, remain bytes to come) can still match a stack of set. */
bool rgram_partial_ok(const struct rgram_state *s, int32_t set, uint32_t part, uint32_t remain);
/* One byte from (set, part, remain), updated in place: 1 alive, 0 dead, -1 error. */
int rgram_step_byte(struct rgram_state *s, int32_t *set, uint32_t *part, uint32_t *remain,
                    uint8_t c, bool cached);
/* Drops the caches when they have grown too large (keeps the state's set). */
bool rgram_state_collect(struct rgram_state *s);

/* ---- schema_regex.c: the "pattern" keyword of schema.c ---------------------------------- */

struct rcore_buf;

/* Appends to b the GBNF of the regular expression pat[0..n), the whole pattern with its '^'
 * first and '$' last (the caller checks both): the characters of the strings it matches, as
 * they are written inside a JSON string literal. *uses_dot comes back true when the text names
 * the rule "pattern-dot" (any character but a newline, raw or escaped), which the caller then
 * defines. False, with msg[0..msg_cap) saying what is unsupported and at which offset of pat,
 * for a pattern outside the subset (see schema_regex.c). An allocation failure is b->failed,
 * for the caller to check. */
bool rgram_regex_gbnf(const char *pat, size_t n, struct rcore_buf *b, bool *uses_dot, char *msg,
                      size_t msg_cap);

#endif
