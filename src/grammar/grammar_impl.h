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
    const struct rgram_range *r = g->ranges + s->first;
    size_t lo = 0, hi = s->n;
    while (lo < hi) { /* the first range whose hi >= cp */
        size_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    const bool in = lo < s->n && r[lo].lo <= cp;
    return in != s->neg;
}

/* Some code point in [lo, hi] is in the set. */
static inline bool rgram_set_meets(const struct rgram *g, const struct rgram_set *s, uint32_t lo,
                                   uint32_t hi) {
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

#endif
