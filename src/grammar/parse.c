/* GBNF text -> struct rgram (see grammar.h). A recursive-descent parser over the bytes, which
 * builds each rule in its own growing array and flattens them at the end; then the checks
 * that need the whole grammar: undefined rules, the root, left recursion. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/buf.h"
#include "../core/core.h"
#include "../core/utf8.h"
#include "grammar_impl.h"

struct vec { /* a growing array of elements */
    struct rgram_elem *a;
    size_t n, cap;
};

struct prule {
    char *name;         /* malloc'd */
    const char *ref_at; /* first reference, for "undefined rule" */
    const char *def_at; /* definition (NULL: not defined yet) */
    uint32_t owner;     /* the rule written in the text that this one serves (itself if so) */
    struct vec body;
};

struct parser {
    const char *start, *end, *p;
    struct prule *rules;
    size_t n_rules, cap_rules;
    struct rgram_set *sets;
    size_t n_sets, cap_sets;
    struct rgram_range *ranges;
    size_t n_ranges, cap_ranges;
    size_t total; /* elements in all rules */
    int depth;    /* nesting of groups */
    bool failed;
};

#define MAX_DEPTH 256

/* "line L, column C: ..." for position at; the first error wins. */
static bool fail(struct parser *ps, const char *at, const char *fmt, ...) RCORE_PRINTF(3, 4);
static bool fail(struct parser *ps, const char *at, const char *fmt, ...) {
    if (ps->failed) return false;
    ps->failed = true;
    int line = 1, col = 1;
    for (const char *q = ps->start; q < at && q < ps->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)*q & 0xC0) != 0x80) {
            col++;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rcore_error_set("grammar: line %d, column %d: %s", line, col, msg);
    return false;
}

static bool push(struct parser *ps, struct vec *v, uint32_t type, uint32_t value) {
    if (ps->total >= RGRAM_MAX_ELEMS)
        return fail(ps, ps->p, "the grammar is too large (more than %u elements)", RGRAM_MAX_ELEMS);
    if (!rcore_grow((void **)&v->a, &v->cap, v->n + 1, sizeof *v->a))
        return fail(ps, ps->p, "out of memory");
    v->a[v->n++] = (struct rgram_elem){type, value};
    ps->total++;
    return true;
}

static int64_t new_rule(struct parser *ps, const char *name, size_t len) {
    if (!rcore_grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) {
        fail(ps, ps->p, "out of memory");
        return -1;
    }
    char *nm = malloc(len + 1);
    if (!nm) {
        fail(ps, ps->p, "out of memory");
        return -1;
    }
    memcpy(nm, name, len);
    nm[len] = 0;
    ps->rules[ps->n_rules] = (struct prule){.name = nm, .owner = (uint32_t)ps->n_rules};
    return (int64_t)ps->n_rules++;
}

static int64_t find_rule(const struct parser *ps, const char *name, size_t len) {
    for (size_t i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i].name) == len && memcmp(ps->rules[i].name, name, len) == 0)
            return (int64_t)i;
    return -1;
}

/* A generated rule (group or repetition), named after the rule it serves. */
static int64_t gen_rule(struct parser *ps, uint32_t parent) {
    char nm[96];
    int k = snprintf(nm, sizeof nm, "%.60s-%zu", ps->rules[parent].name, ps->n_rules);
    int64_t r = new_rule(ps, nm, (size_t)k);
    if (r >= 0) {
        ps->rules[r].def_at = ps->p;
        ps->rules[r].owner = ps->rules[parent].owner;
    }
    return r;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Spaces, tabs and comments; newlines too when newline_ok. */
static void skip_space(struct parser *ps, bool newline_ok) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') ps->p++;
        } else {
            break;
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point of the grammar's text. */
static bool decode_utf8(struct parser *ps, uint32_t *cp) {
    size_t n;
    *cp = rcore_utf8_decode(ps->p, (size_t)(ps->end - ps->p), &n);
    if (n == 0) return fail(ps, ps->p, "invalid UTF-8 in the grammar");
    ps->p += n;
    return true;
}

/* One character of a string or class, with its escape. */
static bool parse_char(struct parser *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return fail(ps, ps->p, "unexpected end of the grammar");
    if (*ps->p != '\\') return decode_utf8(ps, cp);
    const char *at = ps->p++;
    if (ps->p >= ps->end) return fail(ps, at, "unfinished escape");
    char e = *ps->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->p < ps->end ? hexval(*ps->p) : -1;
            if (h < 0) return fail(ps, at, "\\%c needs %d hex digits", e, digits);
            v = v << 4 | (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF) return fail(ps, at, "code point U+%X is beyond U+10FFFF", (unsigned)v);
        *cp = v;
        return true;
    }
    static const char from[] = "trn\\\"[]-^", to[] = "\t\r\n\\\"[]-^";
    const char *k = e ? strchr(from, e) : NULL;
    if (!k) return fail(ps, at, "unknown escape '\\%c'", e);
    *cp = (unsigned char)to[k - from];
    return true;
}

static int cmp_range(const void *a, const void *b) {
    const struct rgram_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A set from ranges[first ..] (sorted and merged here), as one SET element. */
static bool add_set(struct parser *ps, struct vec *v, size_t first, bool neg) {
    size_t n = ps->n_ranges - first, m = 0;
    struct rgram_range *r = n ? ps->ranges + first : NULL; /* none yet: ranges may be NULL */
    if (n) qsort(r, n, sizeof *r, cmp_range);
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    ps->n_ranges = first + m;
    if (!rcore_grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets))
        return fail(ps, ps->p, "out of memory");
    ps->sets[ps->n_sets] = (struct rgram_set){(uint32_t)first, (uint32_t)m, neg};
    return push(ps, v, RG_SET, (uint32_t)ps->n_sets++);
}

static bool add_range(struct parser *ps, uint32_t lo, uint32_t hi) {
    if (!rcore_grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges))
        return fail(ps, ps->p, "out of memory");
    ps->ranges[ps->n_ranges++] = (struct rgram_range){lo, hi};
    return true;
}

static bool parse_alternatives(struct parser *ps, uint32_t rule, struct vec *out, bool nested);

static bool parse_count(struct parser *ps, long *v) {
    const char *at = ps->p;
    long n = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, at, "expected a number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        n = n * 10 + (*ps->p++ - '0');
        if (n > (long)RGRAM_MAX_ELEMS) return fail(ps, at, "repetition count too large");
    }
    *v = n;
    return true;
}

static bool append(struct parser *ps, struct vec *v, const struct rgram_elem *e, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!push(ps, v, e[i].type, e[i].value)) return false;
    return true;
}

/* Replaces out[start ..] (one symbol) by min..max (max < 0: unbounded) repetitions of it. */
static bool repeat(struct parser *ps, uint32_t rule, struct vec *out, size_t start, long min,
                   long max, const char *at) {
    const size_t len = out->n - start;
    if (len == 0) return true; /* repeating nothing (an empty group) is nothing */
    const uint64_t cost =
        (uint64_t)len * (uint64_t)min + (uint64_t)(len + 4) * (uint64_t)(max < 0 ? 1 : max - min);
    if (ps->total + cost > RGRAM_MAX_ELEMS)
        return fail(ps, at, "the grammar is too large (more than %u elements)", RGRAM_MAX_ELEMS);
    struct rgram_elem *sym = malloc(len * sizeof *sym);
    if (!sym) return fail(ps, at, "out of memory");
    memcpy(sym, out->a + start, len * sizeof *sym);
    out->n = start;
    ps->total -= len;
    bool ok = true;
    for (long i = 0; ok && i < min; i++) ok = append(ps, out, sym, len);
    if (ok && max < 0) { /* R ::= sym R | */
        int64_t r = gen_rule(ps, rule);
        ok = r >= 0;
        struct vec *b = ok ? &ps->rules[r].body : NULL;
        ok = ok && append(ps, b, sym, len) && push(ps, b, RG_REF, (uint32_t)r) &&
             push(ps, b, RG_ALT, 0) && push(ps, b, RG_ALT, 0) && push(ps, b, RG_END, 0) &&
             push(ps, out, RG_REF, (uint32_t)r);
    } else if (ok && max > min) { /* R1 ::= sym R2 | ; ... Rk ::= sym | */
        int64_t first = -1, prev = -1;
        for (long i = min; ok && i < max; i++) {
            int64_t r = gen_rule(ps, rule);
            if (!(ok = r >= 0)) break;
            if (prev >= 0) {
                struct vec *pb = &ps->rules[prev].body;
                ok = push(ps, pb, RG_REF, (uint32_t)r) && push(ps, pb, RG_ALT, 0) &&
                     push(ps, pb, RG_ALT, 0) && push(ps, pb, RG_END, 0);
            }
            ok = ok && append(ps, &ps->rules[r].body, sym, len);
            if (first < 0) first = r;
            prev = r;
        }
        if (ok) {
            struct vec *pb = &ps->rules[prev].body;
            ok = push(ps, pb, RG_ALT, 0) && push(ps, pb, RG_ALT, 0) && push(ps, pb, RG_END, 0) &&
                 push(ps, out, RG_REF, (uint32_t)first);
        }
    }
    free(sym);
    return ok;
}

static bool parse_sequence(struct parser *ps, uint32_t rule, struct vec *out, bool nested) {
    size_t last = (size_t)-1; /* where the last symbol starts */
    while (ps->p < ps->end) {
        const char *at = ps->p;
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            last = out->n;
            while (ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                size_t first = ps->n_ranges;
                if (!parse_char(ps, &cp) || !add_range(ps, cp, cp) ||
                    !add_set(ps, out, first, false))
                    return false;
            }
            if (ps->p >= ps->end) return fail(ps, at, "unterminated string");
            ps->p++;
        } else if (c == '[') {
            ps->p++;
            bool neg = ps->p < ps->end && *ps->p == '^';
            if (neg) ps->p++;
            size_t first = ps->n_ranges;
            while (ps->p < ps->end && *ps->p != ']') {
                uint32_t lo, hi;
                if (!parse_char(ps, &lo)) return false;
                hi = lo;
                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                    const char *rat = ps->p++;
                    if (!parse_char(ps, &hi)) return false;
                    if (hi < lo) return fail(ps, rat, "range end before its start");
                }
                if (!add_range(ps, lo, hi)) return false;
            }
            if (ps->p >= ps->end) return fail(ps, at, "unterminated character class");
            ps->p++;
            last = out->n;
            if (!add_set(ps, out, first, neg)) return false;
        } else if (c == '.') {
            ps->p++;
            last = out->n;
            if (!add_set(ps, out, ps->n_ranges, true)) return false;
        } else if (is_word(c)) {
            const char *name = ps->p;
            while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
            size_t len = (size_t)(ps->p - name);
            int64_t r = find_rule(ps, name, len);
            if (r < 0 && (r = new_rule(ps, name, len)) < 0) return false;
            if (!ps->rules[r].ref_at) ps->rules[r].ref_at = name;
            last = out->n;
            if (!push(ps, out, RG_REF, (uint32_t)r)) return false;
        } else if (c == '(') {
            ps->p++;
            if (++ps->depth > MAX_DEPTH) return fail(ps, at, "groups nested too deeply");
            int64_t r = gen_rule(ps, rule);
            if (r < 0) return false;
            struct vec body = {0};
            skip_space(ps, true);
            bool ok = parse_alternatives(ps, (uint32_t)r, &body, true);
            ps->rules[r].body = body; /* owned by the rule from here, even on failure */
            if (!ok) return false;
            if (ps->p >= ps->end || *ps->p != ')') return fail(ps, at, "unclosed '('");
            ps->p++;
            ps->depth--;
            last = out->n;
            if (!push(ps, out, RG_REF, (uint32_t)r)) return false;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == (size_t)-1) return fail(ps, at, "'%c' must follow a symbol to repeat", c);
            ps->p++;
            long min = 0, max = -1;
            if (c == '+') min = 1;
            if (c == '?') max = 1;
            if (c == '{') {
                skip_space(ps, false);
                if (!parse_count(ps, &min)) return false;
                skip_space(ps, false);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, false);
                    if (ps->p < ps->end && *ps->p != '}' && !parse_count(ps, &max)) return false;
                    skip_space(ps, false);
                } else {
                    max = min;
                }
                if (ps->p >= ps->end || *ps->p != '}') return fail(ps, at, "expected '}'");
                ps->p++;
                if (max >= 0 && max < min)
                    return fail(ps, at, "repetition {%ld,%ld}: the maximum is below the minimum",
                                min, max);
            }
            if (!repeat(ps, rule, out, last, min, max, at)) return false;
            last = (size_t)-1; /* "x**" is an error, as in llama.cpp */
        } else if (c == '<' || c == '!') {
            return fail(ps, at, "token references (<...>, !<...>) are not supported");
        } else {
            break;
        }
        skip_space(ps, nested);
    }
    return true;
}

static bool parse_alternatives(struct parser *ps, uint32_t rule, struct vec *out, bool nested) {
    if (!parse_sequence(ps, rule, out, nested)) return false;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        if (!push(ps, out, RG_ALT, 0)) return false;
        skip_space(ps, true);
        if (!parse_sequence(ps, rule, out, nested)) return false;
    }
    return push(ps, out, RG_ALT, 0) && push(ps, out, RG_END, 0);
}

static bool parse_rule(struct parser *ps) {
    const char *at = ps->p;
    if (!is_word(*ps->p)) return fail(ps, at, "expected a rule name");
    while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
    size_t len = (size_t)(ps->p - at);
    int64_t r = find_rule(ps, at, len);
    if (r < 0 && (r = new_rule(ps, at, len)) < 0) return false;
    if (ps->rules[r].def_at) return fail(ps, at, "rule '%s' is defined twice", ps->rules[r].name);
    ps->rules[r].def_at = at;
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
        return fail(ps, ps->p, "expected '::='");
    ps->p += 3;
    skip_space(ps, true);
    struct vec body = {0};
    bool ok = parse_alternatives(ps, (uint32_t)r, &body, false);
    ps->rules[r].body = body;
    if (!ok) return false;
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') {
        if (*ps->p == ')') return fail(ps, ps->p, "')' without '('");
        return fail(ps, ps->p, "unexpected '%c'", *ps->p);
    }
    return true;
}

/* What entering rule r costs the matcher before it matches a character (every rule that r
 * reaches from the start of an alternative through symbols that can match the empty text is
 * done, so cost and depth are known for them): cost[r], the stacks one expansion of r visits
 * (SET tops, plus the alternatives that match the empty text and so resume what follows r),
 * saturating at UINT32_MAX; depth[r], a bound on how deeply that expansion nests. */
static void rule_entry(const struct rgram *g, size_t r, const uint8_t *nullable, uint32_t *cost,
                       uint32_t *depth) {
    uint64_t c = 0, d = 0;
    for (size_t i = g->rule_start[r]; g->el[i].type != RG_END; i++) {
        /* one alternative, as far as its symbols can all match the empty text */
        uint64_t ac = 0, ad = 0;
        bool through = true; /* every symbol so far can match the empty text */
        for (; through && g->el[i].type != RG_ALT; i++) {
            const struct rgram_elem *e = &g->el[i];
            ac += e->type == RG_SET ? 1 : cost[e->value];
            ad += e->type == RG_SET ? 0 : depth[e->value];
            through = e->type == RG_REF && nullable[e->value];
        }
        ac += through; /* the whole alternative may match nothing: what follows r resumes */
        while (g->el[i].type != RG_ALT) i++;
        c += ac;
        if (ad > d) d = ad;
    }
    cost[r] = c < UINT32_MAX ? (uint32_t)c : UINT32_MAX;
    depth[r] = d < UINT32_MAX ? (uint32_t)d + 1 : UINT32_MAX;
}

/* The matcher expands a stack at the start of every rule and after every symbol (where it
 * resumes once the symbol is matched): each such expansion must stay within the limits
 * (grammar.h), or the grammar is refused, naming the rule where it goes past them. */
static bool expansions_ok(struct parser *ps, const struct rgram *g, const uint8_t *nullable,
                          const uint32_t *cost, const uint32_t *depth) {
    /* from the last: a group or repetition is made after the rule around it, so the error
       names the innermost construct past a limit */
    for (size_t r = g->n_rules; r-- > 0;) {
        uint64_t worst = cost[r], deepest = depth[r];
        for (size_t i = g->rule_start[r]; g->el[i].type != RG_END;) {
            size_t end = i;
            while (g->el[end].type != RG_ALT) end++;
            uint64_t suf = 1, sd = 0;
            for (size_t k = end; k-- > i;) {
                const struct rgram_elem *e = &g->el[k];
                if (e->type == RG_SET) {
                    suf = 1;
                    sd = 0;
                } else {
                    suf = cost[e->value] + (nullable[e->value] ? suf : 0);
                    sd = depth[e->value] + (nullable[e->value] ? sd : 0);
                }
                if (suf > worst) worst = suf;
                if (sd > deepest) deepest = sd;
            }
            i = end + 1;
        }
        const struct prule *pr = &ps->rules[r], *own = &ps->rules[pr->owner];
        const char *at = pr->def_at ? pr->def_at : ps->start;
        const char *what = pr->owner == r ? "" : " (a group or repetition in it)";
        if (worst > RGRAM_MAX_EXPANSION)
            return fail(ps, at,
                        "rule '%s'%s expands to more than %u parse stacks before matching a "
                        "character (a limit)",
                        own->name, what, RGRAM_MAX_EXPANSION);
        if (deepest > RGRAM_MAX_EXPANSION_DEPTH)
            return fail(ps, at,
                        "rule '%s'%s nests more than %u rules deep before matching a character "
                        "(a limit)",
                        own->name, what, RGRAM_MAX_EXPANSION_DEPTH);
    }
    return true;
}

/* Left recursion: a rule that reaches itself through references each preceded, in its
 * alternative, only by symbols that can match the empty text. Found with the nullable rules
 * (a fixpoint) and an iterative depth-first search over those references; the search's
 * post-order gives what entering each rule costs (rule_entry), for expansions_ok. */
static bool check_left_recursion(struct parser *ps, const struct rgram *g) {
    bool ok = false;
    const size_t n = g->n_rules;
    uint8_t *nullable = calloc(n, 1), *color = calloc(n, 1);
    uint8_t *pn = malloc(n); /* per frame: the symbols before pos all match the empty text */
    size_t *stack = malloc(n * sizeof *stack), *pos = malloc(n * sizeof *pos);
    uint32_t *cost = calloc(n, sizeof *cost), *depth = calloc(n, sizeof *depth);
    if (!nullable || !color || !stack || !pos || !pn || !cost || !depth) {
        fail(ps, ps->start, "out of memory");
        goto done;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            bool all = true, found = false; /* found: an alternative that matches "" */
            for (size_t i = g->rule_start[r]; g->el[i].type != RG_END; i++) {
                const struct rgram_elem *e = &g->el[i];
                if (e->type == RG_ALT) {
                    if ((found = all)) break;
                    all = true;
                } else if (e->type == RG_SET || (e->type == RG_REF && !nullable[e->value])) {
                    all = false;
                }
            }
            if (found) {
                nullable[r] = 1;
                changed = true;
            }
        }
    }
    /* color: 0 unseen, 1 on the path, 2 done; pos: the element to look at next */
    for (size_t s = 0; s < n; s++) {
        if (color[s]) continue;
        size_t top = 0;
        stack[top] = s;
        pos[top] = g->rule_start[s];
        pn[top] = 1;
        color[s] = 1;
        top++;
        while (top > 0) {
            size_t r = stack[top - 1], i = pos[top - 1];
            int64_t next = -1;
            bool prefix_nullable = pn[top - 1];
            for (; g->el[i].type != RG_END; i++) {
                const struct rgram_elem *e = &g->el[i];
                if (e->type == RG_ALT) {
                    prefix_nullable = true;
                    continue;
                }
                if (e->type == RG_REF && prefix_nullable) {
                    next = e->value;
                    i++;
                    break;
                }
                if (e->type == RG_SET || (e->type == RG_REF && !nullable[e->value]))
                    prefix_nullable = false;
            }
            pos[top - 1] = i;
            /* the reference just taken may match the empty text or not */
            pn[top - 1] = next >= 0 && nullable[next];
            if (next < 0) {
                color[r] = 2;
                top--;
                rule_entry(g, r, nullable, cost, depth);
            } else if (color[next] == 1) {
                const struct prule *pr = &ps->rules[next];
                fail(ps, pr->def_at ? pr->def_at : ps->start,
                     "left recursion: rule '%s' can reach itself before matching a character",
                     pr->name);
                goto done;
            } else if (color[next] == 0) {
                color[next] = 1;
                stack[top] = (size_t)next;
                pos[top] = g->rule_start[next];
                pn[top] = 1;
                top++;
            }
        }
    }
    ok = expansions_ok(ps, g, nullable, cost, depth);
done:
    free(nullable);
    free(color);
    free(stack);
    free(pos);
    free(pn);
    free(cost);
    free(depth);
    return ok;
}

static void parser_free(struct parser *ps) {
    for (size_t i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].name);
        free(ps->rules[i].body.a);
    }
    free(ps->rules);
    free(ps->sets);
    free(ps->ranges);
}

void rgram_free(struct rgram *g) {
    if (!g) return;
    free(g->el);
    free(g->rule_start);
    free(g->sets);
    free(g->ranges);
    free(g);
}

size_t rgram_n_rules(const struct rgram *g) {
    return g ? g->n_rules : 0;
}

struct rgram *rgram_parse(const char *text, size_t len, const char *root) {
    if (!text) {
        rcore_error_set("grammar: the text is NULL");
        return NULL;
    }
    if (!root) root = "root";
    struct parser ps = {.start = text, .end = text + len, .p = text};
    struct rgram *g = NULL;
    skip_space(&ps, true);
    while (ps.p < ps.end) {
        if (!parse_rule(&ps)) goto fail;
        skip_space(&ps, true);
    }
    for (size_t i = 0; i < ps.n_rules; i++)
        if (!ps.rules[i].def_at) {
            fail(&ps, ps.rules[i].ref_at, "undefined rule '%s'", ps.rules[i].name);
            goto fail;
        }
    int64_t r = find_rule(&ps, root, strlen(root));
    if (r < 0) {
        rcore_error_set("grammar: no rule named '%s' (the root)", root);
        goto fail;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->el = malloc((ps.total ? ps.total : 1) * sizeof *g->el)) ||
        !(g->rule_start = malloc(ps.n_rules * sizeof *g->rule_start))) {
        rcore_error_set("grammar: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < ps.n_rules; i++) {
        g->rule_start[i] = (uint32_t)g->n_el;
        memcpy(g->el + g->n_el, ps.rules[i].body.a, ps.rules[i].body.n * sizeof *g->el);
        g->n_el += ps.rules[i].body.n;
    }
    g->n_rules = ps.n_rules;
    g->root = (uint32_t)r;
    g->sets = ps.sets;
    g->n_sets = ps.n_sets;
    g->ranges = ps.ranges;
    g->n_ranges = ps.n_ranges;
    ps.sets = NULL;
    ps.ranges = NULL;
    if (!check_left_recursion(&ps, g)) goto fail;
    parser_free(&ps);
    return g;
fail:
    rgram_free(g);
    parser_free(&ps);
    return NULL;
}
