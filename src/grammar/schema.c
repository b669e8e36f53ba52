/* JSON schema -> GBNF. Each schema becomes a rule whose text is the JSON value it accepts,
 * followed by optional space; objects list their properties in the schema's order (required
 * ones always, optional ones as any ordered subset), arrays repeat their items between
 * minItems and maxItems, integer bounds become digit-by-digit ranges, and simple patterns are
 * translated into grammar symbols over JSON string characters (schema_regex.c). Every keyword is
 * checked against a table of the supported ones: anything else is an error naming it, never
 * dropped. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../core/buf.h"
#include "../core/core.h"
#include "../core/utf8.h"
#include "grammar_impl.h"

struct rule {
    char *name, *body;
};

struct conv {
    const cJSON *doc;
    struct rule *rules;
    size_t n_rules, cap_rules;
    struct {
        char *ref, *name;
    } * refs;
    size_t n_refs, cap_refs;
    bool failed, oom;
    int depth;
};

#define MAX_DEPTH 64

static bool cfail(struct conv *c, const char *path, const char *fmt, ...) RCORE_PRINTF(3, 4);
static bool cfail(struct conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rcore_error_set("json schema: at '%s': %s", *path ? path : "/", msg);
    return false;
}

static char *dupstr(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static const char *find_name(const struct conv *c, const char *name) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (strcmp(c->rules[i].name, name) == 0) return c->rules[i].name;
    return NULL;
}

/* Reserves a rule named after hint (made unique), body to come; returns its index. */
static int64_t reserve(struct conv *c, const char *hint) {
    char base[80], name[100];
    size_t k = 0;
    for (const char *p = hint; *p && k < sizeof base - 1; p++)
        base[k++] = (isalnum((unsigned char)*p) || *p == '-') ? *p : '-';
    base[k] = 0;
    if (k == 0) snprintf(base, sizeof base, "r");
    snprintf(name, sizeof name, "%s", base);
    for (int i = 1; find_name(c, name); i++) snprintf(name, sizeof name, "%s-%d", base, i);
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? c->cap_rules * 2 : 32;
        struct rule *r = realloc(c->rules, cap * sizeof *r);
        if (!r) return -1;
        c->rules = r;
        c->cap_rules = cap;
    }
    char *nm = dupstr(name);
    if (!nm) return -1;
    c->rules[c->n_rules] = (struct rule){nm, NULL};
    return (int64_t)c->n_rules++;
}

/* A rule with a fixed name and body, once (the shared primitives). */
static const char *prim(struct conv *c, const char *name, const char *body) {
    const char *have = find_name(c, name);
    if (have) return have;
    int64_t r = reserve(c, name);
    if (r < 0 || !(c->rules[r].body = dupstr(body))) {
        c->oom = true;
        return NULL;
    }
    return c->rules[r].name;
}

static const char *p_space(struct conv *c) {
    return prim(c, "space", "| \" \" | \"\\n\" [ \\t]{0,20}");
}
static const char *p_char(struct conv *c) {
    /* \u escapes of single UTF-16 units only, so that one char is one decoded character
       (minLength / maxLength count those) */
    return prim(c, "char",
                "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CefEF] "
                "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))");
}
static const char *p_string(struct conv *c) {
    p_char(c), p_space(c);
    return prim(c, "string", "\"\\\"\" char* \"\\\"\" space");
}
static const char *p_int_part(struct conv *c) {
    return prim(c, "integral-part", "[0] | [1-9] [0-9]{0,15}");
}
static const char *p_number(struct conv *c) {
    p_int_part(c), p_space(c);
    return prim(c, "number",
                "(\"-\"? integral-part) (\".\" [0-9]{1,16})? ([eE] [-+]? integral-part)? space");
}
static const char *p_integer(struct conv *c) {
    p_int_part(c), p_space(c);
    return prim(c, "integer", "(\"-\"? integral-part) space");
}
static const char *p_boolean(struct conv *c) {
    p_space(c);
    return prim(c, "boolean", "(\"true\" | \"false\") space");
}
static const char *p_null(struct conv *c) {
    p_space(c);
    return prim(c, "null", "\"null\" space");
}
static const char *p_value(struct conv *c) {
    p_string(c), p_number(c), p_boolean(c), p_null(c);
    prim(c, "object",
         "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" "
         "space");
    prim(c, "array", "\"[\" space ( value (\",\" space value)* )? \"]\" space");
    return prim(c, "value", "object | array | string | number | boolean | null");
}

/* text as a GBNF string literal */
static void lit(struct rcore_buf *b, const char *t) {
    rcore_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[3] = {'\\', (char)*p, 0};
            rcore_buf_puts(b, e);
        } else if (*p < 0x20 || *p == 0x7F) {
            rcore_buf_printf(b, "\\x%02X", *p);
        } else {
            rcore_buf_add(b, (const char *)p, 1);
        }
    }
    rcore_buf_puts(b, "\"");
}

/* the JSON text of a value, as a literal */
static bool json_lit(struct conv *c, struct rcore_buf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        c->oom = true;
        return false;
    }
    lit(b, t);
    free(t);
    return true;
}

static const char *visit(struct conv *c, const cJSON *s, const char *path, const char *hint);

/* A rule named after hint with body b (consumed). */
static const char *make(struct conv *c, const char *hint, struct rcore_buf *b) {
    if (b->failed) {
        c->oom = true;
        free(b->p);
        return NULL;
    }
    int64_t r = reserve(c, hint);
    if (r < 0) {
        c->oom = true;
        free(b->p);
        return NULL;
    }
    c->rules[r].body = b->p ? b->p : dupstr("");
    return c->rules[r].name;
}

/* ---- keywords ----------------------------------------------------------------------------*/

static const char *const annotations[] = {"title",       "description", "$schema",  "$id",
                                          "default",     "examples",    "$comment", "$defs",
                                          "definitions", NULL};

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (strcmp(k, *list) == 0) return true;
    return false;
}

/* Every key of s is an annotation or in allowed. */
static bool check_keys(struct conv *c, const cJSON *s, const char *path, const char *const *allowed,
                       const char *what) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(k->string, annotations) && !in_list(k->string, allowed))
            return cfail(c, path, "keyword '%s' is not supported%s%s", k->string,
                         what ? " with " : "", what ? what : "");
    return true;
}

static bool get_count(struct conv *c, const cJSON *s, const char *key, const char *path,
                      long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 ||
        v->valuedouble != floor(v->valuedouble))
        return cfail(c, path, "'%s' must be a whole number from 0 to 100000", key);
    *out = (long)v->valuedouble;
    return true;
}

/* item{min,max} joined by sep, into b (max < 0: unbounded) */
static void repeat_sep(struct rcore_buf *b, const char *item, const char *sep, long min, long max) {
    if (max == 0) return;
    if (min == 0) rcore_buf_puts(b, "(");
    rcore_buf_printf(b, "%s", item);
    long lo = min > 0 ? min - 1 : 0;
    if (max < 0)
        rcore_buf_printf(b, " (%s %s){%ld,}", sep, item, lo);
    else if (max - 1 > 0 || lo > 0)
        rcore_buf_printf(b, " (%s %s){%ld,%ld}", sep, item, lo, max - 1);
    if (min == 0) rcore_buf_puts(b, ")?");
}

/* ---- integers ----------------------------------------------------------------------------*/

/* Decimal numbers of equal length from lo to hi (digit strings), as GBNF symbols. */
static void digits_range(struct rcore_buf *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        rcore_buf_printf(b, "[%c]", lo[0]);
        if (n > 1) {
            rcore_buf_puts(b, " ");
            digits_range(b, lo + 1, hi + 1, n - 1);
        }
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', n);
    memset(zeros, '0', n);
    nines[n] = zeros[n] = 0;
    rcore_buf_puts(b, "(");
    bool lo_full = strcmp(lo + 1, zeros + 1) == 0, hi_full = strcmp(hi + 1, nines + 1) == 0;
    char first_lo = lo_full ? lo[0] : (char)(lo[0] + 1);
    char last_hi = hi_full ? hi[0] : (char)(hi[0] - 1);
    bool any = false;
    if (!lo_full) {
        rcore_buf_printf(b, "[%c]", lo[0]);
        if (n > 1) {
            rcore_buf_puts(b, " ");
            digits_range(b, lo + 1, nines + 1, n - 1);
        }
        any = true;
    }
    if (first_lo <= last_hi) {
        if (any) rcore_buf_puts(b, " | ");
        rcore_buf_printf(b, "[%c-%c]", first_lo, last_hi);
        if (n > 1) rcore_buf_printf(b, " [0-9]{%zu}", n - 1);
        any = true;
    }
    if (!hi_full) {
        if (any) rcore_buf_puts(b, " | ");
        rcore_buf_printf(b, "[%c]", hi[0]);
        if (n > 1) {
            rcore_buf_puts(b, " ");
            digits_range(b, zeros + 1, hi + 1, n - 1);
        }
    }
    rcore_buf_puts(b, ")");
}

/* Non-negative integers from lo to hi (hi < 0: unbounded), without leading zeros. */
static void nonneg_range(struct rcore_buf *b, long long lo, long long hi) {
    char a[24], z[24];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lz = hi >= 0 ? snprintf(z, sizeof z, "%lld", hi) : la;
    rcore_buf_puts(b, "(");
    for (int len = la; len <= lz; len++) {
        char l[24], h[24];
        if (len == la)
            memcpy(l, a, (size_t)la + 1);
        else {
            l[0] = '1';
            memset(l + 1, '0', (size_t)len - 1);
            l[len] = 0;
        }
        if (hi >= 0 && len == lz)
            memcpy(h, z, (size_t)lz + 1);
        else {
            memset(h, '9', (size_t)len);
            h[len] = 0;
        }
        if (len > la) rcore_buf_puts(b, " | ");
        digits_range(b, l, h, (size_t)len);
    }
    if (hi < 0) rcore_buf_printf(b, " | [1-9] [0-9]{%d,15}", la);
    rcore_buf_puts(b, ")");
}

static bool int_bound(struct conv *c, const cJSON *s, const char *key, const char *path, int dir,
                      bool *has, long long *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return true;
    if (!cJSON_IsNumber(x) || fabs(x->valuedouble) > 1e15)
        return cfail(c, path, "'%s' must be a number within +-1e15", key);
    double d = x->valuedouble;
    long long k = dir > 0 ? (long long)ceil(d) : (long long)floor(d);
    if (key[0] == 'e' && (double)k == d) k += dir; /* exclusive */
    if (!*has || (dir > 0 ? k > *v : k < *v)) *v = k;
    *has = true;
    return true;
}

static const char *integer_rule(struct conv *c, const cJSON *s, const char *path,
                                const char *hint) {
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    if (!int_bound(c, s, "minimum", path, 1, &has_lo, &lo) ||
        !int_bound(c, s, "exclusiveMinimum", path, 1, &has_lo, &lo) ||
        !int_bound(c, s, "maximum", path, -1, &has_hi, &hi) ||
        !int_bound(c, s, "exclusiveMaximum", path, -1, &has_hi, &hi))
        return NULL;
    if (!has_lo && !has_hi) return p_integer(c);
    if (has_lo && has_hi && lo > hi) {
        cfail(c, path, "no integer lies between the minimum and the maximum");
        return NULL;
    }
    p_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "(");
    if (has_lo && lo >= 0) {
        nonneg_range(&b, lo, has_hi ? hi : -1);
    } else if (has_hi && hi < 0) {
        rcore_buf_puts(&b, "\"-\" ");
        nonneg_range(&b, -hi, has_lo ? -lo : -1);
    } else { /* lo < 0 (or none) <= hi (or none) */
        rcore_buf_puts(&b, "\"-\" ");
        nonneg_range(&b, 1, has_lo ? -lo : -1);
        rcore_buf_puts(&b, " | ");
        nonneg_range(&b, 0, has_hi ? hi : -1);
    }
    rcore_buf_puts(&b, ") space");
    return make(c, hint, &b);
}

/* ---- patterns ----------------------------------------------------------------------------*/

static const char *pattern_rule(struct conv *c, const char *pat, const char *path,
                                const char *hint) {
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$') {
        cfail(c, path, "a pattern must start with '^' and end with '$'");
        return NULL;
    }
    p_char(c), p_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "\"\\\"\" (");
    bool uses_dot = false;
    char msg[200];
    if (!rgram_regex_gbnf(pat, n, &b, &uses_dot, msg, sizeof msg)) {
        cfail(c, path, "pattern: %s", msg);
        free(b.p);
        return NULL;
    }
    /* any character but a newline (as Python's re), raw or as \" or \\ */
    if (uses_dot) prim(c, "pattern-dot", "[^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\\\"\" | \"\\\\\\\\\"");
    rcore_buf_puts(&b, ") \"\\\"\" space");
    return make(c, hint, &b);
}

/* ---- schemas -----------------------------------------------------------------------------*/

static void subpath(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

static const char *object_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "properties", "required", "additionalProperties",
                                       NULL};
    if (!check_keys(c, s, path, keys, "type object")) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) {
        cfail(c, path, "'properties' must be an object");
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        cfail(c, path, "'required' must be an array");
        return NULL;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
            cfail(c, path, "'required' names a property that 'properties' does not define");
            return NULL;
        }
    p_space(c);
    const bool no_extra = add && cJSON_IsFalse(add);
    if (!props || !props->child) {
        if (no_extra) return prim(c, "empty-object", "\"{\" space \"}\" space");
        const char *val =
            (add && !cJSON_IsTrue(add)) ? visit(c, add, path, "additional") : p_value(c);
        if (!val) return NULL;
        p_string(c);
        struct rcore_buf b = {0};
        char kv[200];
        snprintf(kv, sizeof kv, "string \":\" space %s", val);
        rcore_buf_puts(&b, "\"{\" space ");
        repeat_sep(&b, kv, "\",\" space", 0, -1);
        rcore_buf_puts(&b, " \"}\" space");
        return make(c, hint, &b);
    }
    if (add && !no_extra) {
        cfail(c, path,
              "'additionalProperties' other than false together with 'properties' is "
              "not supported");
        return NULL;
    }
    /* one kv rule per property, in the schema's order */
    size_t n = (size_t)cJSON_GetArraySize(props);
    const char **kv = calloc(n, sizeof *kv);
    bool *required = calloc(n, sizeof *required);
    struct rcore_buf b = {0};
    const char *res = NULL;
    if (!kv || !required) {
        c->oom = true;
        goto done;
    }
    size_t i = 0;
    for (const cJSON *p = props->child; p; p = p->next, i++) {
        char sp[512], h[160];
        subpath(sp, sizeof sp, path, "properties", p->string);
        snprintf(h, sizeof h, "%s-%s", hint, p->string);
        const char *val = visit(c, p, sp, h);
        if (!val) goto done;
        struct rcore_buf kb = {0};
        cJSON *key = cJSON_CreateString(p->string);
        if (!key || !json_lit(c, &kb, key)) {
            cJSON_Delete(key);
            free(kb.p);
            c->oom = true;
            goto done;
        }
        cJSON_Delete(key);
        rcore_buf_printf(&kb, " space \":\" space %s", val);
        snprintf(h, sizeof h, "%s-%s-kv", hint, p->string);
        if (!(kv[i] = make(c, h, &kb))) goto done;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (strcmp(r->valuestring, p->string) == 0) required[i] = true;
    }
    /* optional ones: opt_i ::= kv_i ("," space opt_j)? | opt_j over the later optional j */
    const char *opt_next = NULL;
    for (size_t k = n; k-- > 0;) {
        if (required[k]) continue;
        struct rcore_buf ob = {0};
        if (opt_next)
            rcore_buf_printf(&ob, "%s (\",\" space %s)? | %s", kv[k], opt_next, opt_next);
        else
            rcore_buf_puts(&ob, kv[k]);
        char h[160];
        snprintf(h, sizeof h, "%s-opt", hint);
        if (!(opt_next = make(c, h, &ob))) goto done;
    }
    rcore_buf_puts(&b, "\"{\" space");
    bool any = false;
    for (i = 0; i < n; i++)
        if (required[i]) {
            rcore_buf_printf(&b, any ? " \",\" space %s" : " %s", kv[i]);
            any = true;
        }
    if (opt_next) rcore_buf_printf(&b, any ? " (\",\" space %s)?" : " (%s)?", opt_next);
    rcore_buf_puts(&b, " \"}\" space");
    res = make(c, hint, &b);
    b.p = NULL;
done:
    free(b.p);
    free(kv);
    free(required);
    return res;
}

static const char *array_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "items", "minItems", "maxItems", NULL};
    if (!check_keys(c, s, path, keys, "type array")) return NULL;
    long min = 0, max = -1;
    if (!get_count(c, s, "minItems", path, &min) || !get_count(c, s, "maxItems", path, &max))
        return NULL;
    if (max >= 0 && max < min) {
        cfail(c, path, "maxItems is below minItems");
        return NULL;
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    char sp[512], h[160];
    subpath(sp, sizeof sp, path, "items", NULL);
    snprintf(h, sizeof h, "%s-item", hint);
    const char *item = items ? visit(c, items, sp, h) : p_value(c);
    if (!item) return NULL;
    p_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "\"[\" space ");
    repeat_sep(&b, item, "\",\" space", min, max);
    rcore_buf_puts(&b, " \"]\" space");
    return make(c, hint, &b);
}

static const char *string_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "minLength", "maxLength", "pattern", NULL};
    if (!check_keys(c, s, path, keys, "type string")) return NULL;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    long min = 0, max = -1;
    if (!get_count(c, s, "minLength", path, &min) || !get_count(c, s, "maxLength", path, &max))
        return NULL;
    if (pat) {
        if (!cJSON_IsString(pat)) {
            cfail(c, path, "'pattern' must be a string");
            return NULL;
        }
        if (min != 0 || max >= 0) {
            cfail(c, path, "'pattern' together with minLength / maxLength is not supported");
            return NULL;
        }
        return pattern_rule(c, pat->valuestring, path, hint);
    }
    if (min == 0 && max < 0) return p_string(c);
    if (max >= 0 && max < min) {
        cfail(c, path, "maxLength is below minLength");
        return NULL;
    }
    p_char(c), p_space(c);
    struct rcore_buf b = {0};
    if (max < 0)
        rcore_buf_printf(&b, "\"\\\"\" char{%ld,} \"\\\"\" space", min);
    else
        rcore_buf_printf(&b, "\"\\\"\" char{%ld,%ld} \"\\\"\" space", min, max);
    return make(c, hint, &b);
}

static const char *type_rule(struct conv *c, const cJSON *s, const char *type, const char *path,
                             const char *hint) {
    static const char *const none[] = {"type", NULL};
    static const char *const ints[] = {
        "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    if (strcmp(type, "object") == 0) return object_rule(c, s, path, hint);
    if (strcmp(type, "array") == 0) return array_rule(c, s, path, hint);
    if (strcmp(type, "string") == 0) return string_rule(c, s, path, hint);
    if (strcmp(type, "integer") == 0)
        return check_keys(c, s, path, ints, "type integer") ? integer_rule(c, s, path, hint) : NULL;
    const char *(*fn)(struct conv *) = strcmp(type, "number") == 0    ? p_number
                                       : strcmp(type, "boolean") == 0 ? p_boolean
                                       : strcmp(type, "null") == 0    ? p_null
                                                                      : NULL;
    if (!fn) {
        cfail(c, path, "unknown type '%s'", type);
        return NULL;
    }
    char what[40];
    snprintf(what, sizeof what, "type %s", type);
    return check_keys(c, s, path, none, what) ? fn(c) : NULL;
}

/* anyOf / oneOf / enum: alternatives */
static const char *alternatives(struct conv *c, const cJSON *list, const char *key,
                                const char *path, const char *hint) {
    if (!cJSON_IsArray(list) || !list->child) {
        cfail(c, path, "'%s' must be a non-empty array", key);
        return NULL;
    }
    struct rcore_buf b = {0};
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        if (i) rcore_buf_puts(&b, " | ");
        if (strcmp(key, "enum") == 0) {
            p_space(c);
            rcore_buf_puts(&b, "(");
            if (!json_lit(c, &b, x)) {
                free(b.p);
                return NULL;
            }
            rcore_buf_puts(&b, " space)");
            continue;
        }
        char sp[512], idx[16], h[160];
        snprintf(idx, sizeof idx, "%d", i);
        subpath(sp, sizeof sp, path, key, idx);
        snprintf(h, sizeof h, "%s-%d", hint, i);
        const char *r = visit(c, x, sp, h);
        if (!r) {
            free(b.p);
            return NULL;
        }
        rcore_buf_puts(&b, r);
    }
    return make(c, hint, &b);
}

static const char *ref_rule(struct conv *c, const cJSON *s, const char *path) {
    static const char *const keys[] = {"$ref", NULL};
    if (!check_keys(c, s, path, keys, "$ref")) return NULL;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const char *rs = cJSON_IsString(ref) ? ref->valuestring : "";
    for (size_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, rs) == 0) return c->refs[i].name;
    const char *sect = strncmp(rs, "#/$defs/", 8) == 0          ? "$defs"
                       : strncmp(rs, "#/definitions/", 14) == 0 ? "definitions"
                                                                : NULL;
    if (!sect) {
        cfail(c, path, "'$ref' must be \"#/$defs/NAME\" or \"#/definitions/NAME\"");
        return NULL;
    }
    const char *name = rs + strlen(sect) + 3;
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->doc, sect);
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(defs, name);
    if (!target) {
        cfail(c, path, "'$ref' points at nothing: %s", rs);
        return NULL;
    }
    /* reserve the rule first, so that a recursive reference finds it */
    int64_t r = reserve(c, name);
    if (r < 0 || c->n_refs == SIZE_MAX) {
        c->oom = true;
        return NULL;
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 8;
        void *p = realloc(c->refs, cap * sizeof *c->refs);
        if (!p) {
            c->oom = true;
            return NULL;
        }
        c->refs = p;
        c->cap_refs = cap;
    }
    char *rcopy = dupstr(rs);
    if (!rcopy) {
        c->oom = true;
        return NULL;
    }
    c->refs[c->n_refs].ref = rcopy;
    c->refs[c->n_refs].name = c->rules[r].name;
    c->n_refs++;
    char sp[512], h[160];
    snprintf(sp, sizeof sp, "/%s/%s", sect, name);
    snprintf(h, sizeof h, "%s-body", c->rules[r].name);
    const char *body = visit(c, target, sp, h);
    if (!body) return NULL;
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, body);
    if (b.failed) {
        c->oom = true;
        return NULL;
    }
    c->rules[r].body = b.p;
    return c->rules[r].name;
}

static const char *visit_inner(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    if (cJSON_IsTrue(s)) return p_value(c);
    if (!cJSON_IsObject(s)) {
        cfail(c, path, "a schema must be an object or true");
        return NULL;
    }
    const cJSON *x;
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return ref_rule(c, s, path);
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        static const char *const keys[] = {"const", "type", NULL};
        if (!check_keys(c, s, path, keys, "const")) return NULL;
        p_space(c);
        struct rcore_buf b = {0};
        json_lit(c, &b, x);
        rcore_buf_puts(&b, " space");
        return make(c, hint, &b);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        static const char *const keys[] = {"enum", "type", NULL};
        return check_keys(c, s, path, keys, "enum") ? alternatives(c, x, "enum", path, hint) : NULL;
    }
    static const char *const comb[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3; i++) {
        if (!(x = cJSON_GetObjectItemCaseSensitive(s, comb[i]))) continue;
        const char *only[] = {comb[i], NULL};
        if (!check_keys(c, s, path, only, comb[i])) return NULL;
        if (i == 2) {
            if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 1) {
                cfail(c, path, "'allOf' is supported with exactly one schema");
                return NULL;
            }
            char sp[512];
            subpath(sp, sizeof sp, path, "allOf", "0");
            return visit(c, x->child, sp, hint);
        }
        return alternatives(c, x, comb[i], path, hint);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return type_rule(c, s, type->valuestring, path, hint);
    if (cJSON_IsArray(type)) {
        static const char *const keys[] = {"type", NULL};
        if (!check_keys(c, s, path, keys, "a list of types")) return NULL;
        struct rcore_buf b = {0};
        for (const cJSON *t = type->child; t; t = t->next) {
            const char *r = cJSON_IsString(t) ? type_rule(c, s, t->valuestring, path, hint) : NULL;
            if (!r) {
                if (!c->failed && !c->oom) cfail(c, path, "'type' lists a non-string");
                free(b.p);
                return NULL;
            }
            rcore_buf_printf(&b, "%s%s", t == type->child ? "" : " | ", r);
        }
        if (!b.p) {
            cfail(c, path, "'type' is an empty list");
            return NULL;
        }
        return make(c, hint, &b);
    }
    if (type) {
        cfail(c, path, "'type' must be a string or a list of strings");
        return NULL;
    }
    /* no type: infer it from the keywords, as validators do; only annotations: any value */
    static const struct {
        const char *key, *type;
    } infer[] = {{"properties", "object"}, {"additionalProperties", "object"},
                 {"required", "object"},   {"items", "array"},
                 {"minItems", "array"},    {"maxItems", "array"},
                 {"minLength", "string"},  {"maxLength", "string"},
                 {"pattern", "string"},    {"minimum", "integer"},
                 {"maximum", "integer"}};
    for (size_t i = 0; i < sizeof infer / sizeof infer[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, infer[i].key)) {
            if (strcmp(infer[i].type, "integer") == 0) {
                cfail(c, path, "'%s' without \"type\": \"integer\" is not supported", infer[i].key);
                return NULL;
            }
            return type_rule(c, s, infer[i].type, path, hint);
        }
    static const char *const none[] = {NULL};
    return check_keys(c, s, path, none, NULL) ? p_value(c) : NULL;
}

static const char *visit(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    if (c->failed || c->oom) return NULL;
    if (++c->depth > MAX_DEPTH) {
        cfail(c, path, "the schema is nested too deeply");
        return NULL;
    }
    const char *r = visit_inner(c, s, path, hint);
    c->depth--;
    if (!r && c->oom && !c->failed) cfail(c, path, "out of memory");
    return r;
}

char *rgram_json_schema(const char *schema, size_t len) {
    const size_t bad = rcore_utf8_valid(schema, len);
    if (bad < len) {
        rcore_error_set("json schema: invalid UTF-8 at byte %zu", bad);
        return NULL;
    }
    const char *endp = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(schema, len, &endp, false);
    if (!doc) {
        size_t at = endp && endp >= schema ? (size_t)(endp - schema) : 0;
        rcore_error_set("json schema: not valid JSON (near byte %zu)", at);
        return NULL;
    }
    struct conv c = {.doc = doc};
    char *out = NULL;
    /* "root" first, so that no other rule takes the name */
    const char *root = reserve(&c, "root") == 0 ? visit(&c, doc, "", "root-value") : NULL;
    if (root) {
        struct rcore_buf b = {0};
        rcore_buf_printf(&b, "root ::= %s\n", root);
        for (size_t i = 1; i < c.n_rules; i++) {
            rcore_buf_puts(&b, c.rules[i].name);
            rcore_buf_puts(&b, " ::= ");
            rcore_buf_puts(&b, c.rules[i].body ? c.rules[i].body : "");
            rcore_buf_puts(&b, "\n");
        }
        if (b.failed) {
            free(b.p);
            rcore_error_set("json schema: out of memory");
        } else {
            out = b.p;
        }
    } else if (!c.failed) {
        rcore_error_set("json schema: out of memory");
    }
    for (size_t i = 0; i < c.n_rules; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    free(c.rules);
    cJSON_Delete(doc);
    return out;
}
