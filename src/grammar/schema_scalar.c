/* The JSON-schema converter's scalar rules (see schema_impl.h): integers with bounds, as
 * digit-by-digit ranges that accept exactly the integers in range, and strings with lengths,
 * a pattern (schema_regex.c) or a format. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"
#include "schema_impl.h"

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
    /* unbounded: up to the 16 digits of the plain integer rule (which a lo of 16 digits has) */
    if (hi < 0 && la < 16) rcore_buf_printf(b, " | [1-9] [0-9]{%d,15}", la);
    rcore_buf_puts(b, ")");
}

/* JavaScript's safe integers, the ones zod's z.number().int() allows: a double holds them and
   tells each from its neighbours, so the bound read is the bound written (2^53 + 1 would be
   read as 2^53). */
#define INT_BOUND_MAX 9007199254740991.0 /* 2^53 - 1 */

/* A bound of key (dir > 0: a lower one) into *v, made an inclusive integer bound: rounded
   inwards, and an exclusive one on an integer moved by one. */
static bool int_bound(struct conv *c, const cJSON *s, const char *key, const char *path, int dir,
                      bool *has, long long *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return true;
    if (cJSON_IsBool(x))
        return sc_fail(c, path,
                       "'%s' must be a number (the boolean form of draft 4 is not supported)", key);
    if (!cJSON_IsNumber(x) || !(fabs(x->valuedouble) <= INT_BOUND_MAX))
        return sc_fail(c, path, "'%s' must be a number within +-(2^53 - 1) (9007199254740991)",
                       key);
    double d = x->valuedouble;
    long long k = dir > 0 ? (long long)ceil(d) : (long long)floor(d);
    if (key[0] == 'e' && (double)k == d) k += dir; /* exclusive */
    if (!*has || (dir > 0 ? k > *v : k < *v)) *v = k;
    *has = true;
    return true;
}

const char *sc_integer_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {
        "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    if (!sc_check_keys(c, s, path, keys, "type integer")) return NULL;
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    if (!int_bound(c, s, "minimum", path, 1, &has_lo, &lo) ||
        !int_bound(c, s, "exclusiveMinimum", path, 1, &has_lo, &lo) ||
        !int_bound(c, s, "maximum", path, -1, &has_hi, &hi) ||
        !int_bound(c, s, "exclusiveMaximum", path, -1, &has_hi, &hi))
        return NULL;
    if (!has_lo && !has_hi) return sc_integer(c);
    if (has_lo && has_hi && lo > hi) {
        sc_fail(c, path, "no integer lies between the minimum and the maximum");
        return NULL;
    }
    sc_space(c);
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
    return sc_make(c, hint, &b);
}

/* Which side of 0 a bound of 0 on a number keeps (0: no bound, 1: inclusive, 2: exclusive);
   other bounds are refused, not dropped: the decimals between two bounds, with fractions and
   exponents of any length, are no language a grammar of bounded size spells exactly (and
   llama.cpp's converter, which ignores them, lets values out of range through). The sign is:
   a mantissa of zeros is 0 whatever its exponent, any other one is positive. */
static bool zero_bound(struct conv *c, const cJSON *s, const char *key, const char *path, int kind,
                       int *side) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return true;
    if (!cJSON_IsNumber(x) || x->valuedouble != 0)
        return sc_fail(c, path,
                       "keyword '%s' is not supported with type number but as 0: a grammar "
                       "cannot bound decimals exactly, only their sign (other bounds are taken "
                       "with type integer)",
                       key);
    if (kind > *side) *side = kind;
    return true;
}

const char *sc_number_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {
        "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    if (!sc_check_keys(c, s, path, keys, "type number")) return NULL;
    int lo = 0, hi = 0;
    if (!zero_bound(c, s, "minimum", path, 1, &lo) ||
        !zero_bound(c, s, "exclusiveMinimum", path, 2, &lo) ||
        !zero_bound(c, s, "maximum", path, 1, &hi) ||
        !zero_bound(c, s, "exclusiveMaximum", path, 2, &hi))
        return NULL;
    if (!lo && !hi) return sc_number(c);
    if (lo && hi && (lo == 2 || hi == 2)) {
        sc_fail(c, path, "no number lies between the minimum and the maximum");
        return NULL;
    }
    /* the mantissas of value 0, and the positive ones, in the digits the number rule allows */
    struct rcore_buf fb = {0}, b = {0};
    for (int zeros = 0; zeros < 16; zeros++) {
        rcore_buf_puts(&fb, zeros ? " | " : "");
        if (zeros) rcore_buf_printf(&fb, "\"0\"{%d} ", zeros);
        rcore_buf_puts(&fb, "[1-9]");
        if (zeros < 15) rcore_buf_printf(&fb, " [0-9]{0,%d}", 15 - zeros);
    }
    const char *frac = fb.failed ? NULL : sc_prim(c, "number-fraction-nonzero", fb.p);
    free(fb.p);
    if (!frac || !sc_space(c) || !sc_int_part(c) ||
        !sc_prim(c, "number-zero", "\"0\" (\".\" [0]{1,16})?")) {
        c->oom = true;
        return NULL;
    }
    const char *pos = sc_prim(c, "number-positive",
                              "[1-9] [0-9]{0,15} (\".\" [0-9]{1,16})? | \"0\" \".\" "
                              "number-fraction-nonzero");
    if (!pos) return NULL;
    rcore_buf_puts(&b, lo == 2    ? "number-positive"
                       : hi == 2  ? "\"-\" number-positive"
                       : lo && hi ? "\"-\"? number-zero"
                       : lo       ? "(\"-\"? number-zero | number-positive)"
                                  : "(\"-\"? number-zero | \"-\" number-positive)");
    rcore_buf_puts(&b, " ([eE] [-+]? integral-part)? space");
    return sc_make(c, hint, &b);
}

/* ---- patterns ----------------------------------------------------------------------------*/

static const char *pattern_rule(struct conv *c, const char *pat, const char *path,
                                const char *hint) {
    size_t n = strlen(pat);
    if (n < 2 || pat[0] != '^' || pat[n - 1] != '$') {
        sc_fail(c, path, "a pattern must start with '^' and end with '$'");
        return NULL;
    }
    sc_char(c), sc_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "\"\\\"\" (");
    bool uses_dot = false;
    char msg[200];
    if (!rgram_regex_gbnf(pat, n, &b, &uses_dot, msg, sizeof msg)) {
        sc_fail(c, path, "pattern: %s", msg);
        free(b.p);
        return NULL;
    }
    /* any character but a newline (as Python's re), raw or as \" or \\ */
    if (uses_dot)
        sc_prim(c, "pattern-dot", "[^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\\\"\" | \"\\\\\\\\\"");
    rcore_buf_puts(&b, ") \"\\\"\" space");
    return sc_make(c, hint, &b);
}

/* The formats taken, with llama.cpp's rules for them: a date's day is checked against 31 only
   (2024-02-30 passes), a time has seconds, optional milliseconds and a Z or +hh:mm offset. */
static const struct {
    const char *name, *body;
} formats[] = {
    {"date",
     "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
    {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{3})? "
             "(\"Z\" | (\"+\" | \"-\") ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"date-time", "format-date \"T\" format-time"},
    {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} "
             "\"-\" [0-9a-fA-F]{12}"},
};

/* A string of a format: "format-NAME" is its text, "format-NAME-string" the JSON string. */
static const char *format_rule(struct conv *c, const cJSON *f, const char *path) {
    size_t i = 0, n = sizeof formats / sizeof formats[0];
    while (i < n && !(cJSON_IsString(f) && strcmp(f->valuestring, formats[i].name) == 0)) i++;
    if (i == n) {
        sc_fail(c, path,
                "'format' %s%s%s is not supported (taken: date, time, date-time, uuid; or give a "
                "'pattern')",
                cJSON_IsString(f) ? "'" : "", cJSON_IsString(f) ? f->valuestring : "",
                cJSON_IsString(f) ? "'" : "(not a string)");
        return NULL;
    }
    char name[40], str[48], body[64];
    if (strcmp(formats[i].name, "date-time") == 0 && (!sc_prim(c, "format-date", formats[0].body) ||
                                                      !sc_prim(c, "format-time", formats[1].body)))
        return NULL;
    snprintf(name, sizeof name, "format-%s", formats[i].name);
    if (!sc_prim(c, name, formats[i].body)) return NULL;
    sc_space(c);
    snprintf(str, sizeof str, "%s-string", name);
    snprintf(body, sizeof body, "\"\\\"\" %s \"\\\"\" space", name);
    return sc_prim(c, str, body);
}

const char *sc_string_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "minLength", "maxLength", "pattern", "format", NULL};
    if (!sc_check_keys(c, s, path, keys, "type string")) return NULL;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    long min = 0, max = -1;
    if (!sc_get_count(c, s, "minLength", path, &min) ||
        !sc_get_count(c, s, "maxLength", path, &max))
        return NULL;
    if ((pat || fmt) && (min != 0 || max >= 0)) {
        sc_fail(c, path, "'%s' together with minLength / maxLength is not supported",
                pat ? "pattern" : "format");
        return NULL;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) {
            sc_fail(c, path, "'pattern' must be a string");
            return NULL;
        }
        /* a format beside it is left to the pattern, as llama.cpp does: both at once is an
           intersection, which a context-free grammar cannot spell in general, and the patterns
           zod writes beside its formats are the stricter of the two */
        return pattern_rule(c, pat->valuestring, path, hint);
    }
    if (fmt) return format_rule(c, fmt, path);
    if (min == 0 && max < 0) return sc_string(c);
    if (max >= 0 && max < min) {
        sc_fail(c, path, "maxLength is below minLength");
        return NULL;
    }
    sc_char(c), sc_space(c);
    struct rcore_buf b = {0};
    if (max < 0)
        rcore_buf_printf(&b, "\"\\\"\" char{%ld,} \"\\\"\" space", min);
    else
        rcore_buf_printf(&b, "\"\\\"\" char{%ld,%ld} \"\\\"\" space", min, max);
    return sc_make(c, hint, &b);
}
