/* The matcher: interned stacks and sets of stacks, advanced by code points and bytes, with
 * each set's transitions cached (a lazily built automaton). See grammar.h. */
#include <stdlib.h>
#include <string.h>

#include "../core/buf.h"
#include "../core/core.h"
#include "grammar_impl.h"

/* Caches beyond these are dropped (rgram_state_collect), keeping only the current set. */
#define MAX_NODES (1u << 20)
#define MAX_SETS  (1u << 15)
#define MAX_POOL  (1u << 22)
#define MAX_CP    (1u << 18)

/* rcore_grow, with the module named in the error. */
static bool grow(void **a, size_t *cap, size_t need, size_t size) {
    if (rcore_grow(a, cap, need, size)) return true;
    rcore_error_prefix("grammar");
    return false;
}

static uint32_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t node_hash(uint32_t el, int32_t parent) {
    return mix((uint64_t)el << 32 | (uint32_t)parent);
}

static bool rehash_nodes(struct rgram_state *s, size_t cap) {
    int32_t *h = malloc(cap * sizeof *h);
    if (!h) {
        rcore_error_set("grammar: out of memory");
        return false;
    }
    memset(h, 0xFF, cap * sizeof *h);
    for (size_t id = 0; id < s->n_nodes; id++) {
        size_t i = node_hash(s->nodes[id].el, s->nodes[id].parent) & (cap - 1);
        while (h[i] >= 0) i = (i + 1) & (cap - 1);
        h[i] = (int32_t)id;
    }
    free(s->node_hash);
    s->node_hash = h;
    s->cap_node_hash = cap;
    return true;
}

/* The node (el, parent), made when new. -2 on allocation failure. */
static int32_t intern_node(struct rgram_state *s, uint32_t el, int32_t parent) {
    if ((s->n_nodes + 1) * 2 > s->cap_node_hash &&
        !rehash_nodes(s, s->cap_node_hash ? s->cap_node_hash * 2 : 1024))
        return -2;
    size_t mask = s->cap_node_hash - 1, i = node_hash(el, parent) & mask;
    for (; s->node_hash[i] >= 0; i = (i + 1) & mask) {
        const struct rgram_node *n = &s->nodes[s->node_hash[i]];
        if (n->el == el && n->parent == parent) return s->node_hash[i];
    }
    if (!grow((void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof *s->nodes)) return -2;
    s->nodes[s->n_nodes] = (struct rgram_node){el, parent};
    s->node_hash[i] = (int32_t)s->n_nodes;
    return (int32_t)s->n_nodes++;
}

/* Starts building a scratch set: nothing in it, nothing expanded yet. */
static void scratch_begin(struct rgram_state *s) {
    s->n_scratch = 0;
    s->end_seen = false;
    if (++s->stamp == 0) { /* wrapped: old stamps could match again */
        if (s->seen) memset(s->seen, 0, s->cap_seen * sizeof *s->seen);
        s->stamp = 1;
    }
}

/* Marks node id as seen in this build; false when it already was (or on allocation failure,
 * with *err set). */
static bool first_sight(struct rgram_state *s, int32_t id, bool *err) {
    if ((size_t)id >= s->cap_seen) {
        const size_t old = s->cap_seen;
        size_t cap = s->cap_nodes > (size_t)id ? s->cap_nodes : (size_t)id + 1;
        uint32_t *b = realloc(s->seen, cap * sizeof *b);
        if (!b) {
            rcore_error_set("grammar: out of memory");
            *err = true;
            return false;
        }
        memset(b + old, 0, (cap - old) * sizeof *b);
        s->seen = b;
        s->cap_seen = cap;
    }
    if (s->seen[id] == s->stamp) return false;
    s->seen[id] = s->stamp;
    return true;
}

/* Counts n stacks looked at against the step's budget; false with the error set past it. */
static bool spend(struct rgram_state *s, uint64_t n) {
    s->work += n;
    if (s->work <= RGRAM_MAX_STEP_WORK) return true;
    rcore_error_set("grammar: one step looked at more than %u parse stacks (a limit on the "
                    "work per token; the grammar is too costly here)",
                    RGRAM_MAX_STEP_WORK);
    return false;
}

/* Adds stack top to the scratch set unless it is there. */
static bool add_top(struct rgram_state *s, int32_t top) {
    if (top < 0) {
        if (s->end_seen) return true;
        s->end_seen = true;
    } else {
        bool err = false;
        if (!first_sight(s, top, &err)) return !err;
    }
    if (s->n_scratch >= RGRAM_MAX_STACKS) {
        rcore_error_set("grammar: more than %d parses at once (the grammar is too ambiguous)",
                        RGRAM_MAX_STACKS);
        return false;
    }
    if (!grow((void **)&s->scratch, &s->cap_scratch, s->n_scratch + 1, sizeof *s->scratch))
        return false;
    s->scratch[s->n_scratch++] = top;
    return true;
}

/* The stack that resumes at element el over parent: parent itself when el ends its
 * alternative. */
static int32_t resume(struct rgram_state *s, uint32_t el, int32_t parent) {
    uint32_t t = s->g->el[el].type;
    if (t == RG_END || t == RG_ALT) return parent;
    return intern_node(s, el, parent);
}

/* Adds the alternatives of rule over stack cont, expanded. */
static bool expand(struct rgram_state *s, int32_t top);
static bool expand_rule(struct rgram_state *s, uint32_t rule, int32_t cont) {
    const struct rgram *g = s->g;
    uint32_t i = g->rule_start[rule];
    for (;;) {
        if (!expand(s, resume(s, i, cont))) return false;
        while (g->el[i].type != RG_ALT && g->el[i].type != RG_END) i++;
        if (g->el[i].type == RG_END || g->el[i + 1].type == RG_END) return true;
        i++;
    }
}

/* Adds stack top to the scratch set with every reference on top replaced by its rule's
 * alternatives, until each top is a SET or the empty stack. Terminates because the parser
 * refused left recursion. */
static bool expand(struct rgram_state *s, int32_t top) {
    if (top == -2) return false;
    if (!spend(s, 1)) return false;
    if (top < 0) return add_top(s, -1);
    const struct rgram_node nd = s->nodes[top];
    const struct rgram_elem *e = &s->g->el[nd.el];
    if (e->type == RG_SET) return add_top(s, top);
    bool err = false;
    if (!first_sight(s, top, &err)) return !err; /* expanded already in this build */
    if (s->depth >= RGRAM_MAX_DEPTH) {
        rcore_error_set("grammar: an expansion nested more than %d rules deep (a limit)",
                        RGRAM_MAX_DEPTH);
        return false;
    }
    int32_t cont = resume(s, nd.el + 1, nd.parent);
    s->depth++;
    const bool ok = cont != -2 && expand_rule(s, e->value, cont);
    s->depth--;
    return ok;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t set_hash(const int32_t *ids, size_t n) {
    uint64_t h = n;
    for (size_t i = 0; i < n; i++) h = mix(h * 31 + (uint32_t)ids[i]);
    return (uint32_t)h;
}

static bool rehash_sets(struct rgram_state *s, size_t cap) {
    int32_t *h = malloc(cap * sizeof *h);
    if (!h) {
        rcore_error_set("grammar: out of memory");
        return false;
    }
    memset(h, 0xFF, cap * sizeof *h);
    for (size_t id = 0; id < s->n_sets; id++) {
        size_t i = set_hash(s->pool + s->sets[id].off, s->sets[id].len) & (cap - 1);
        while (h[i] >= 0) i = (i + 1) & (cap - 1);
        h[i] = (int32_t)id;
    }
    free(s->set_hash);
    s->set_hash = h;
    s->cap_set_hash = cap;
    return true;
}

/* The scratch set as a set id: RGRAM_DEAD when empty. */
static int32_t intern_scratch(struct rgram_state *s) {
    if (s->n_scratch == 0) return RGRAM_DEAD;
    qsort(s->scratch, s->n_scratch, sizeof *s->scratch, cmp_i32);
    if ((s->n_sets + 1) * 2 > s->cap_set_hash &&
        !rehash_sets(s, s->cap_set_hash ? s->cap_set_hash * 2 : 256))
        return RGRAM_ERROR;
    const uint32_t h = set_hash(s->scratch, s->n_scratch);
    size_t mask = s->cap_set_hash - 1, i = h & mask;
    for (; s->set_hash[i] >= 0; i = (i + 1) & mask) {
        const struct rgram_setrec *r = &s->sets[s->set_hash[i]];
        if (r->len == s->n_scratch &&
            memcmp(s->pool + r->off, s->scratch, s->n_scratch * sizeof *s->scratch) == 0)
            return s->set_hash[i];
    }
    if (!grow((void **)&s->pool, &s->cap_pool, s->n_pool + s->n_scratch, sizeof *s->pool) ||
        !grow((void **)&s->sets, &s->cap_sets, s->n_sets + 1, sizeof *s->sets) ||
        !grow((void **)&s->trans, &s->cap_trans, (s->n_sets + 1) * 128, sizeof *s->trans))
        return RGRAM_ERROR;
    memcpy(s->pool + s->n_pool, s->scratch, s->n_scratch * sizeof *s->scratch);
    s->sets[s->n_sets] =
        (struct rgram_setrec){.off = (uint32_t)s->n_pool, .len = (uint32_t)s->n_scratch};
    for (size_t b = 0; b < 128; b++) s->trans[s->n_sets * 128 + b] = RGRAM_UNKNOWN;
    s->n_pool += s->n_scratch;
    s->set_hash[i] = (int32_t)s->n_sets;
    return (int32_t)s->n_sets++;
}

static int32_t compute_advance(struct rgram_state *s, int32_t set, uint32_t cp) {
    const struct rgram *g = s->g;
    scratch_begin(s);
    const struct rgram_setrec r = s->sets[set];
    if (!spend(s, r.len)) return RGRAM_ERROR;
    for (uint32_t k = 0; k < r.len; k++) {
        const int32_t top = s->pool[r.off + k];
        if (top < 0) continue;
        const struct rgram_node nd = s->nodes[top];
        if (!rgram_set_has(g, &g->sets[g->el[nd.el].value], cp)) continue;
        if (!expand(s, resume(s, nd.el + 1, nd.parent))) return RGRAM_ERROR;
    }
    return intern_scratch(s);
}

static bool rehash_cp(struct rgram_state *s, size_t cap) {
    uint64_t *k = calloc(cap, sizeof *k);
    int32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        rcore_error_set("grammar: out of memory");
        return false;
    }
    for (size_t j = 0; j < s->cap_cp; j++) {
        if (!s->cp_key[j]) continue;
        size_t i = mix(s->cp_key[j]) & (cap - 1);
        while (k[i]) i = (i + 1) & (cap - 1);
        k[i] = s->cp_key[j];
        v[i] = s->cp_val[j];
    }
    free(s->cp_key);
    free(s->cp_val);
    s->cp_key = k;
    s->cp_val = v;
    s->cap_cp = cap;
    return true;
}

int32_t rgram_advance(struct rgram_state *s, int32_t set, uint32_t cp, bool cached) {
    if (!cached) return compute_advance(s, set, cp);
    if (cp < 128) {
        int32_t *t = &s->trans[(size_t)set * 128 + cp];
        if (*t == RGRAM_UNKNOWN) {
            int32_t r = compute_advance(s, set, cp);
            if (r == RGRAM_ERROR) return r;
            t = &s->trans[(size_t)set * 128 + cp]; /* compute_advance may move trans */
            *t = r;
        }
        return *t;
    }
    const uint64_t key = ((uint64_t)set << 21 | cp) + 1;
    if ((s->n_cp + 1) * 2 > s->cap_cp && !rehash_cp(s, s->cap_cp ? s->cap_cp * 2 : 256))
        return RGRAM_ERROR;
    size_t mask = s->cap_cp - 1, i = mix(key) & mask;
    for (; s->cp_key[i]; i = (i + 1) & mask)
        if (s->cp_key[i] == key) return s->cp_val[i];
    int32_t r = compute_advance(s, set, cp);
    if (r == RGRAM_ERROR) return r;
    s->cp_key[i] = key;
    s->cp_val[i] = r;
    s->n_cp++;
    return r;
}

const uint64_t *rgram_loop_mask(struct rgram_state *s, int32_t set) {
    if (!s->sets[set].loop_known) {
        uint64_t m[2] = {0, 0};
        for (uint32_t b = 0; b < 128; b++) {
            int32_t r = rgram_advance(s, set, b, true);
            if (r == RGRAM_ERROR) return NULL;
            if (r == set) m[b >> 6] |= 1ull << (b & 63);
        }
        s->sets[set].loop[0] = m[0];
        s->sets[set].loop[1] = m[1];
        s->sets[set].loop_known = true;
    }
    return s->sets[set].loop;
}

/* A partial character: its length in bytes in bits 28-29 of part, the bits so far below. */
#define PART_BITS 0x1FFFFFu

/* The smallest code point of each encoded length: shorter (overlong) encodings, surrogates
 * and code points past U+10FFFF are not characters, so no grammar matches them. */
static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};

static bool set_meets_any(const struct rgram_state *s, int32_t set, uint32_t lo, uint32_t hi) {
    const struct rgram *g = s->g;
    const struct rgram_setrec r = s->sets[set];
    for (uint32_t k = 0; k < r.len; k++) {
        int32_t top = s->pool[r.off + k];
        if (top >= 0 && rgram_set_meets(g, &g->sets[g->el[s->nodes[top].el].value], lo, hi))
            return true;
    }
    return false;
}

bool rgram_partial_ok(const struct rgram_state *s, int32_t set, uint32_t part, uint32_t remain) {
    const uint32_t n = part >> 28, bits = part & PART_BITS;
    uint32_t lo = bits << (6 * remain), hi = lo | ((1u << (6 * remain)) - 1);
    if (lo < min_cp[n]) lo = min_cp[n];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    /* around the surrogates */
    bool ok = false;
    if (lo < 0xD800) ok = set_meets_any(s, set, lo, hi < 0xD7FF ? hi : 0xD7FF);
    if (!ok && hi > 0xDFFF) ok = set_meets_any(s, set, lo > 0xE000 ? lo : 0xE000, hi);
    return ok;
}

int rgram_step_byte(struct rgram_state *s, int32_t *set, uint32_t *part, uint32_t *remain,
                    uint8_t c, bool cached) {
    uint32_t cp;
    if (*remain == 0) {
        if (c < 0x80) {
            cp = c;
        } else {
            int n = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
            if (n == 0) return 0;
            *part = (uint32_t)(n + 1) << 28 | (c & (0x3Fu >> n));
            *remain = (uint32_t)n;
            return rgram_partial_ok(s, *set, *part, *remain);
        }
    } else {
        if ((c & 0xC0) != 0x80) return 0;
        *part = (*part & ~PART_BITS) | (((*part & PART_BITS) << 6 | (c & 0x3Fu)) & PART_BITS);
        if (--*remain > 0) return rgram_partial_ok(s, *set, *part, *remain);
        cp = *part & PART_BITS;
        const uint32_t n = *part >> 28;
        *part = 0;
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    }
    int32_t r = rgram_advance(s, *set, cp, cached);
    if (r == RGRAM_ERROR) return -1;
    if (r == RGRAM_DEAD) return 0;
    *set = r;
    return 1;
}

/* Empties every cache and table, keeping the current set's stacks. */
bool rgram_state_collect(struct rgram_state *s) {
    if (s->n_nodes <= MAX_NODES && s->n_sets <= MAX_SETS && s->n_pool <= MAX_POOL &&
        s->n_cp <= MAX_CP)
        return true;
    /* copy the current set's stacks, bottom first, into a fresh node table */
    const struct rgram_setrec cur = s->sets[s->cur];
    struct rgram_node *old = s->nodes;
    const size_t n_old = s->n_nodes;
    int32_t *remap = malloc((n_old + 1) * sizeof *remap);
    int32_t *tops = malloc((cur.len + 1) * sizeof *tops);
    if (!remap || !tops) {
        free(remap);
        free(tops);
        rcore_error_set("grammar: out of memory");
        return false;
    }
    memcpy(tops, s->pool + cur.off, cur.len * sizeof *tops);
    s->nodes = NULL;
    s->cap_nodes = s->n_nodes = 0;
    free(s->node_hash);
    s->node_hash = NULL;
    s->cap_node_hash = 0;
    s->n_sets = s->n_pool = s->n_cp = 0;
    free(s->set_hash);
    s->set_hash = NULL;
    s->cap_set_hash = 0;
    if (s->cp_key) memset(s->cp_key, 0, s->cap_cp * sizeof *s->cp_key);
    for (size_t i = 0; i < n_old; i++) remap[i] = -1;
    /* mark what the current stacks reach; a parent's id is below its child's (it existed
       first), so one pass in id order maps every parent before its children */
    for (uint32_t k = 0; k < cur.len; k++)
        for (int32_t t = tops[k]; t >= 0 && remap[t] == -1; t = old[t].parent) remap[t] = 0;
    bool ok = true;
    for (size_t i = 0; i < n_old && ok; i++) {
        if (remap[i] < 0) continue;
        int32_t p = old[i].parent;
        remap[i] = intern_node(s, old[i].el, p >= 0 ? remap[p] : -1);
        ok = remap[i] >= 0;
    }
    scratch_begin(s);
    for (uint32_t k = 0; k < cur.len && ok; k++)
        ok = add_top(s, tops[k] >= 0 ? remap[tops[k]] : -1);
    int32_t id = ok ? intern_scratch(s) : RGRAM_ERROR;
    free(old);
    free(remap);
    free(tops);
    if (id < 0) return false;
    s->cur = id;
    s->gen++;
    return true;
}

bool rgram_state_reset(struct rgram_state *s) {
    s->part = s->remain = 0;
    rgram_step_begin(s);
    scratch_begin(s);
    if (!expand_rule(s, s->g->root, -1)) return false;
    int32_t id = intern_scratch(s);
    if (id < 0) {
        if (id == RGRAM_DEAD) rcore_error_set("grammar: the root rule matches nothing");
        return false;
    }
    s->cur = id;
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
    free(s->node_hash);
    free(s->pool);
    free(s->sets);
    free(s->set_hash);
    free(s->trans);
    free(s->cp_key);
    free(s->cp_val);
    free(s->scratch);
    free(s->seen);
    for (int i = 0; i < RGRAM_MASK_CACHE; i++) free(s->masks[i].mask);
    free(s);
}

bool rgram_state_accept(struct rgram_state *s, const char *bytes, size_t len) {
    if (!rgram_state_collect(s)) return false;
    rgram_step_begin(s);
    int32_t set = s->cur;
    uint32_t part = s->part, remain = s->remain;
    for (size_t i = 0; i < len; i++) {
        int r = rgram_step_byte(s, &set, &part, &remain, (uint8_t)bytes[i], true);
        if (r <= 0) {
            if (r == 0) rcore_error_set("grammar: the text does not match the grammar");
            return false;
        }
    }
    s->cur = set;
    s->part = part;
    s->remain = remain;
    return true;
}

bool rgram_state_complete(const struct rgram_state *s) {
    if (s->remain) return false;
    const struct rgram_setrec r = s->sets[s->cur];
    return r.len > 0 && s->pool[r.off] == -1; /* sorted: -1 comes first */
}

bool rgram_state_can_continue(const struct rgram_state *s) {
    if (s->remain) return true; /* inside a character that some stack can take */
    /* a stack whose next set holds some character (not "[]", nor only surrogates) */
    return set_meets_any(s, s->cur, 0, 0xD7FF) || set_meets_any(s, s->cur, 0xE000, 0x10FFFF);
}
