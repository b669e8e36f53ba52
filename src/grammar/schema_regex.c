/* A regular expression -> GBNF, for the "pattern" keyword of the JSON-schema converter
 * (schema.c). The subset: literal characters, '.', classes with ranges and \d \w, \s, groups
 * and (?:...) groups, alternation, and the greedy quantifiers * + ? {m} {m,} {m,n} (at most
 * 1000). Each character becomes the JSON string text that encodes it (a quote or a backslash
 * escaped, a control character as \u00XX), so that the rule matches the pattern's strings as
 * they stand inside a JSON string literal. Lookarounds, anchors inside the pattern,
 * backreferences, \D \W \S \b \B, lazy or stacked quantifiers and classes holding control
 * characters, '"' or '\' are refused, with the offset of the construct. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/buf.h"
#include "../core/utf8.h"
#include "grammar_impl.h"

struct rx {
    const char *start, *p, *end;
    struct rcore_buf *b;
    int depth;
    bool uses_dot; /* the rule "pattern-dot" is used */
    bool failed;   /* msg says why (the first failure only) */
    char *msg;
    size_t msg_cap;
};

/* one decoded character cp as the JSON string text that encodes it */
static void rx_char(struct rcore_buf *b, uint32_t cp) {
    if (cp == '"')
        rcore_buf_puts(b, "\"\\\\\\\"\"");
    else if (cp == '\\')
        rcore_buf_puts(b, "\"\\\\\\\\\"");
    else if (cp < 0x20 || cp == 0x7F)
        rcore_buf_printf(b, "\"\\\\u%04X\"", (unsigned)cp);
    else
        rcore_buf_printf(b, "[\\U%08X]", (unsigned)cp);
}

static bool rx_fail(struct rx *r, const char *what) {
    if (r->failed) return false;
    r->failed = true;
    snprintf(r->msg, r->msg_cap, "%s at offset %d", what, (int)(r->p - r->start));
    return false;
}

static bool rx_alt(struct rx *r);

static bool rx_utf8(struct rx *r, uint32_t *cp) {
    size_t n;
    *cp = rcore_utf8_decode(r->p, (size_t)(r->end - r->p), &n);
    if (n == 0) return rx_fail(r, "invalid UTF-8");
    r->p += n;
    return true;
}

/* A class escape (\d \w \s) as ranges text into b (inside [...]); false: not one. */
static bool rx_class_escape(char e, struct rcore_buf *b) {
    if (e == 'd')
        rcore_buf_puts(b, "0-9");
    else if (e == 'w')
        rcore_buf_puts(b, "0-9A-Za-z_");
    else
        return false;
    return true;
}

static bool rx_escape_char(struct rx *r, uint32_t *cp) {
    char e = *r->p++;
    static const char ctl_from[] = "tnrfv", ctl_to[] = "\t\n\r\f\v";
    const char *k = strchr(ctl_from, e);
    if (e && k)
        *cp = (unsigned char)ctl_to[k - ctl_from];
    else if (e && strchr("\\.^$*+?()[]{}|/-\"", e))
        *cp = (unsigned char)e;
    else
        return rx_fail(r, "unsupported escape");
    return true;
}

static bool rx_atom(struct rx *r) {
    struct rcore_buf *b = r->b;
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->end - r->p >= 2 && r->p[0] == '?' && r->p[1] == ':')
            r->p += 2;
        else if (r->p < r->end && *r->p == '?')
            return rx_fail(r, "lookarounds are not supported");
        if (++r->depth > 32) return rx_fail(r, "groups nested too deeply");
        rcore_buf_puts(b, "(");
        if (!rx_alt(r)) return false;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "unclosed '('");
        r->p++;
        r->depth--;
        rcore_buf_puts(b, ")");
    } else if (ch == '.') {
        /* any character but a newline: the rule the caller defines (see grammar_impl.h) */
        r->p++;
        r->uses_dot = true;
        rcore_buf_puts(b, "pattern-dot");
    } else if (ch == '[') {
        r->p++;
        bool neg = r->p < r->end && *r->p == '^';
        if (neg) r->p++;
        struct rcore_buf cls = {0};
        bool has_quote = false, has_bs = false;
        /* a ']' first in the class is a literal (as in Python's re, which validates) */
        for (bool first = true; r->p < r->end && (*r->p != ']' || first); first = false) {
            uint32_t lo, hi;
            if (*r->p == '\\') {
                r->p++;
                if (r->p >= r->end) return rx_fail(r, "unfinished escape");
                if (rx_class_escape(*r->p, &cls)) {
                    r->p++;
                    continue;
                }
                if (!rx_escape_char(r, &lo)) return free(cls.p), false;
            } else if (!rx_utf8(r, &lo)) {
                return free(cls.p), false;
            }
            hi = lo;
            if (r->end - r->p >= 2 && *r->p == '-' && r->p[1] != ']') {
                r->p++;
                if (*r->p == '\\') {
                    r->p++;
                    if (r->p >= r->end || !rx_escape_char(r, &hi)) return free(cls.p), false;
                } else if (!rx_utf8(r, &hi)) {
                    return free(cls.p), false;
                }
                if (hi < lo) return free(cls.p), rx_fail(r, "range end before its start");
            }
            if (!neg && (lo < 0x20 || (lo <= 0x7F && hi >= 0x7F))) {
                free(cls.p);
                return rx_fail(r, "a class with control characters is not supported");
            }
            if (lo <= '"' && hi >= '"') has_quote = true;
            if (lo <= '\\' && hi >= '\\') has_bs = true;
            rcore_buf_printf(&cls, "\\U%08X-\\U%08X", (unsigned)lo, (unsigned)hi);
        }
        if (r->p >= r->end) return free(cls.p), rx_fail(r, "unterminated class");
        r->p++;
        /* raw JSON string characters exclude '"', '\' and controls; those come escaped */
        rcore_buf_puts(b, "(");
        if (neg) {
            rcore_buf_printf(b, "[^%s\"\\\\\\x00-\\x1F\\x7F]", cls.p ? cls.p : "");
            if (!has_quote) rcore_buf_puts(b, " | \"\\\\\\\"\"");
            if (!has_bs) rcore_buf_puts(b, " | \"\\\\\\\\\"");
        } else {
            /* the class minus the specials, as a positive set intersected by a negated one
               is not expressible: list the class and rely on the specials' own arms */
            rcore_buf_printf(b, "[%s]", cls.p ? cls.p : "");
            if (has_quote) rcore_buf_puts(b, " | \"\\\\\\\"\"");
            if (has_bs) rcore_buf_puts(b, " | \"\\\\\\\\\"");
        }
        rcore_buf_puts(b, ")");
        free(cls.p);
        if (!neg && (has_quote || has_bs)) /* a raw '"' or '\' would end or break the string */
            return rx_fail(r, "a class containing '\"' or '\\' is not supported");
    } else if (ch == '\\') {
        r->p++;
        if (r->p >= r->end) return rx_fail(r, "unfinished escape");
        struct rcore_buf cls = {0};
        if (rx_class_escape(*r->p, &cls)) {
            r->p++;
            rcore_buf_printf(b, "[%s]", cls.p);
            free(cls.p);
            return !cls.failed;
        }
        if (*r->p == 's') { /* JSON escapes of the white space */
            r->p++;
            rcore_buf_puts(b, "(\" \" | \"\\\\t\" | \"\\\\n\" | \"\\\\r\")");
            free(cls.p);
            return true;
        }
        if (*r->p == 'D' || *r->p == 'W' || *r->p == 'S' || *r->p == 'b' || *r->p == 'B' ||
            (*r->p >= '1' && *r->p <= '9'))
            return rx_fail(r, "unsupported escape");
        uint32_t cp;
        if (!rx_escape_char(r, &cp)) return false;
        rx_char(b, cp);
    } else if (ch == '^' || ch == '$') {
        return rx_fail(r, "'^' and '$' only at the pattern's ends");
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return rx_fail(r, "a quantifier without a preceding item");
    } else {
        uint32_t cp;
        if (!rx_utf8(r, &cp)) return false;
        rx_char(b, cp);
    }
    return true;
}

static bool rx_seq(struct rx *r) {
    bool first = true;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (!first) rcore_buf_puts(r->b, " ");
        first = false;
        rcore_buf_puts(r->b, "(");
        if (!rx_atom(r)) return false;
        rcore_buf_puts(r->b, ")");
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            rcore_buf_add(r->b, r->p, 1);
            r->p++;
        } else if (r->p < r->end && *r->p == '{') {
            const char *q = r->p + 1;
            long m = 0, n = -1;
            int k = 0;
            while (q < r->end && isdigit((unsigned char)*q) && k < 6)
                m = m * 10 + (*q++ - '0'), k++;
            if (k == 0) return rx_fail(r, "bad repetition");
            if (q < r->end && *q == ',') {
                q++;
                if (q < r->end && isdigit((unsigned char)*q)) {
                    n = 0;
                    for (k = 0; q < r->end && isdigit((unsigned char)*q) && k < 6; k++)
                        n = n * 10 + (*q++ - '0');
                }
            } else {
                n = m;
            }
            if (q >= r->end || *q != '}' || (n >= 0 && n < m) || m > 1000 || n > 1000)
                return rx_fail(r, "bad repetition (at most {1000})");
            r->p = q + 1;
            if (n < 0)
                rcore_buf_printf(r->b, "{%ld,}", m);
            else
                rcore_buf_printf(r->b, "{%ld,%ld}", m, n);
        }
        if (r->p < r->end && (*r->p == '?' || *r->p == '+' || *r->p == '*' || *r->p == '{'))
            return rx_fail(r, "lazy or stacked quantifiers are not supported");
    }
    return true;
}

static bool rx_alt(struct rx *r) {
    if (!rx_seq(r)) return false;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        rcore_buf_puts(r->b, " | ");
        if (!rx_seq(r)) return false;
    }
    return true;
}

bool rgram_regex_gbnf(const char *pat, size_t n, struct rcore_buf *b, bool *uses_dot, char *msg,
                      size_t msg_cap) {
    struct rx r = {pat, pat + 1, pat + n - 1, b, 0, false, false, msg, msg_cap};
    const bool ok = rx_alt(&r) && r.p == r.end;
    if (!ok && !r.failed) snprintf(msg, msg_cap, "unexpected ')'");
    *uses_dot = r.uses_dot;
    return ok;
}
