/* JSON schema -> GBNF. Each schema becomes a rule whose text is the JSON value it accepts,
 * followed by optional space; objects list their properties in the schema's order (required
 * ones always, optional ones as any ordered subset) or are records of keys and values,
 * arrays repeat their items between minItems and maxItems or follow a tuple (schema_obj.c),
 * integer bounds become digit-by-digit ranges, and simple patterns and four formats are
 * translated into grammar symbols over JSON string characters (schema_scalar.c,
 * schema_regex.c). This file walks the schema and holds the shared rules and the combinators.
 * Every keyword is checked against a table of the supported ones: anything else is an error
 * naming it, never dropped. */
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
#include "schema_impl.h"

bool sc_fail(struct conv *c, const char *path, const char *fmt, ...) {
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
const char *sc_prim(struct conv *c, const char *name, const char *body) {
    const char *have = find_name(c, name);
    if (have) return have;
    int64_t r = reserve(c, name);
    if (r < 0 || !(c->rules[r].body = dupstr(body))) {
        c->oom = true;
        return NULL;
    }
    return c->rules[r].name;
}

const char *sc_space(struct conv *c) {
    return sc_prim(c, "space", "| \" \" | \"\\n\" [ \\t]{0,20}");
}
const char *sc_char(struct conv *c) {
    /* \u escapes of single UTF-16 units only, so that one char is one decoded character
       (minLength / maxLength count those) */
    return sc_prim(c, "char",
                   "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CefEF] "
                   "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))");
}
const char *sc_string(struct conv *c) {
    sc_char(c), sc_space(c);
    return sc_prim(c, "string", "\"\\\"\" char* \"\\\"\" space");
}
const char *sc_int_part(struct conv *c) {
    return sc_prim(c, "integral-part", "[0] | [1-9] [0-9]{0,15}");
}
const char *sc_number(struct conv *c) {
    sc_int_part(c), sc_space(c);
    return sc_prim(c, "number",
                   "(\"-\"? integral-part) (\".\" [0-9]{1,16})? ([eE] [-+]? integral-part)? space");
}
const char *sc_integer(struct conv *c) {
    sc_int_part(c), sc_space(c);
    return sc_prim(c, "integer", "(\"-\"? integral-part) space");
}
static const char *sc_boolean(struct conv *c) {
    sc_space(c);
    return sc_prim(c, "boolean", "(\"true\" | \"false\") space");
}
static const char *sc_null(struct conv *c) {
    sc_space(c);
    return sc_prim(c, "null", "\"null\" space");
}
const char *sc_value(struct conv *c) {
    sc_string(c), sc_number(c), sc_boolean(c), sc_null(c);
    sc_prim(
        c, "object",
        "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" "
        "space");
    sc_prim(c, "array", "\"[\" space ( value (\",\" space value)* )? \"]\" space");
    return sc_prim(c, "value", "object | array | string | number | boolean | null");
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

/* The compact JSON text of v into b, its numbers in the fewest digits that read back as the
   same double: cJSON prints 15, which would turn 9007199254740991 into 9.00719925474099e+15,
   another value. */
static bool json_text(struct conv *c, struct rcore_buf *b, const cJSON *v) {
    if (cJSON_IsNumber(v)) {
        char num[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, v->valuedouble);
            if (strtod(num, NULL) == v->valuedouble) break;
        }
        rcore_buf_puts(b, num);
        return true;
    }
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        rcore_buf_puts(b, cJSON_IsArray(v) ? "[" : "{");
        for (const cJSON *x = v->child; x; x = x->next) {
            if (x != v->child) rcore_buf_puts(b, ",");
            if (cJSON_IsObject(v)) {
                cJSON key = {.type = cJSON_String, .valuestring = x->string};
                if (!json_text(c, b, &key)) return false;
                rcore_buf_puts(b, ":");
            }
            if (!json_text(c, b, x)) return false;
        }
        rcore_buf_puts(b, cJSON_IsArray(v) ? "]" : "}");
        return true;
    }
    char *t = cJSON_PrintUnformatted(v); /* strings, booleans, null */
    if (!t) {
        c->oom = true;
        return false;
    }
    rcore_buf_puts(b, t);
    free(t);
    return true;
}

/* the JSON text of a value, as a literal */
bool sc_json_lit(struct conv *c, struct rcore_buf *b, const cJSON *v) {
    struct rcore_buf text = {0};
    bool ok = json_text(c, &text, v);
    if (ok && text.failed) c->oom = true, ok = false;
    if (ok) lit(b, text.p);
    free(text.p);
    return ok;
}

/* A rule named after hint with body b (consumed). */
const char *sc_make(struct conv *c, const char *hint, struct rcore_buf *b) {
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

/* Keywords that never change which values are valid (JSON Schema's meta-data and content
   vocabularies, and OpenAPI's discriminator, which Pydantic writes beside a oneOf that already
   says everything); zod and Pydantic send them by default. */
static const char *const annotations[] = {
    "title",       "description",   "$schema",         "$id",
    "default",     "examples",      "$comment",        "$defs",
    "definitions", "readOnly",      "writeOnly",       "deprecated",
    "$anchor",     "discriminator", "contentEncoding", "contentMediaType",
    NULL};

static bool in_list(const char *k, const char *const *list) {
    for (; *list; list++)
        if (strcmp(k, *list) == 0) return true;
    return false;
}

/* Every key of s is an annotation or in allowed. */
bool sc_is_annotation(const char *k) {
    return in_list(k, annotations);
}

bool sc_check_keys(struct conv *c, const cJSON *s, const char *path, const char *const *allowed,
                   const char *what) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(k->string, annotations) && !in_list(k->string, allowed))
            return sc_fail(c, path, "keyword '%s' is not supported%s%s", k->string,
                           what ? " with " : "", what ? what : "");
    return true;
}

bool sc_get_count(struct conv *c, const cJSON *s, const char *key, const char *path, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 ||
        v->valuedouble != floor(v->valuedouble))
        return sc_fail(c, path, "'%s' must be a whole number from 0 to 100000", key);
    *out = (long)v->valuedouble;
    return true;
}

/* item{min,max} joined by sep, into b (max < 0: unbounded) */
void sc_repeat_sep(struct rcore_buf *b, const char *item, const char *sep, long min, long max) {
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

/* ---- schemas -----------------------------------------------------------------------------*/

void sc_subpath(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

static const char *type_rule(struct conv *c, const cJSON *s, const char *type, const char *path,
                             const char *hint) {
    static const char *const none[] = {"type", NULL};
    if (strcmp(type, "object") == 0) return sc_object_rule(c, s, path, hint);
    if (strcmp(type, "array") == 0) return sc_array_rule(c, s, path, hint);
    if (strcmp(type, "string") == 0) return sc_string_rule(c, s, path, hint);
    if (strcmp(type, "integer") == 0) return sc_integer_rule(c, s, path, hint);
    if (strcmp(type, "number") == 0) return sc_number_rule(c, s, path, hint);
    const char *(*fn)(struct conv *) = strcmp(type, "boolean") == 0 ? sc_boolean
                                       : strcmp(type, "null") == 0  ? sc_null
                                                                    : NULL;
    if (!fn) {
        sc_fail(c, path, "unknown type '%s'", type);
        return NULL;
    }
    char what[40];
    snprintf(what, sizeof what, "type %s", type);
    return sc_check_keys(c, s, path, none, what) ? fn(c) : NULL;
}

/* anyOf / oneOf / enum: alternatives */
static const char *alternatives(struct conv *c, const cJSON *list, const char *key,
                                const char *path, const char *hint) {
    if (!cJSON_IsArray(list) || !list->child) {
        sc_fail(c, path, "'%s' must be a non-empty array", key);
        return NULL;
    }
    struct rcore_buf b = {0};
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        if (i) rcore_buf_puts(&b, " | ");
        if (strcmp(key, "enum") == 0) {
            sc_space(c);
            rcore_buf_puts(&b, "(");
            if (!sc_json_lit(c, &b, x)) {
                free(b.p);
                return NULL;
            }
            rcore_buf_puts(&b, " space)");
            continue;
        }
        char sp[512], idx[16], h[160];
        snprintf(idx, sizeof idx, "%d", i);
        sc_subpath(sp, sizeof sp, path, key, idx);
        snprintf(h, sizeof h, "%s-%d", hint, i);
        const char *r = sc_visit(c, x, sp, h);
        if (!r) {
            free(b.p);
            return NULL;
        }
        rcore_buf_puts(&b, r);
    }
    return sc_make(c, hint, &b);
}

static const char *ref_rule(struct conv *c, const cJSON *s, const char *path) {
    static const char *const keys[] = {"$ref", NULL};
    if (!sc_check_keys(c, s, path, keys, "$ref")) return NULL;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const char *rs = cJSON_IsString(ref) ? ref->valuestring : "";
    for (size_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, rs) == 0) return c->refs[i].name;
    const char *sect = strncmp(rs, "#/$defs/", 8) == 0          ? "$defs"
                       : strncmp(rs, "#/definitions/", 14) == 0 ? "definitions"
                                                                : NULL;
    if (!sect) {
        sc_fail(c, path, "'$ref' must be \"#/$defs/NAME\" or \"#/definitions/NAME\"");
        return NULL;
    }
    const char *name = rs + strlen(sect) + 3;
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->doc, sect);
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(defs, name);
    if (!target) {
        sc_fail(c, path, "'$ref' points at nothing: %s", rs);
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
    const char *body = sc_visit(c, target, sp, h);
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
    if (cJSON_IsTrue(s)) return sc_value(c);
    if (!cJSON_IsObject(s)) {
        sc_fail(c, path, "a schema must be an object or true");
        return NULL;
    }
    const cJSON *x;
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return ref_rule(c, s, path);
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        static const char *const keys[] = {"const", "type", "enum", NULL};
        if (!sc_check_keys(c, s, path, keys, "const")) return NULL;
        /* Pydantic's Literal may send its one value as both */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
        if (e) {
            const cJSON *v = cJSON_IsArray(e) ? e->child : NULL;
            while (v && !cJSON_Compare(v, x, true)) v = v->next;
            if (!v) {
                sc_fail(c, path, "'const' is not among the values of 'enum'");
                return NULL;
            }
        }
        sc_space(c);
        struct rcore_buf b = {0};
        sc_json_lit(c, &b, x);
        rcore_buf_puts(&b, " space");
        return sc_make(c, hint, &b);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        static const char *const keys[] = {"enum", "type", NULL};
        return sc_check_keys(c, s, path, keys, "enum") ? alternatives(c, x, "enum", path, hint)
                                                       : NULL;
    }
    static const char *const comb[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3; i++) {
        if (!(x = cJSON_GetObjectItemCaseSensitive(s, comb[i]))) continue;
        const char *only[] = {comb[i], NULL};
        if (!sc_check_keys(c, s, path, only, comb[i])) return NULL;
        if (i == 2) {
            if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 1) {
                sc_fail(c, path, "'allOf' is supported with exactly one schema");
                return NULL;
            }
            char sp[512];
            sc_subpath(sp, sizeof sp, path, "allOf", "0");
            return sc_visit(c, x->child, sp, hint);
        }
        return alternatives(c, x, comb[i], path, hint);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return type_rule(c, s, type->valuestring, path, hint);
    if (cJSON_IsArray(type)) {
        static const char *const keys[] = {"type", NULL};
        if (!sc_check_keys(c, s, path, keys, "a list of types")) return NULL;
        struct rcore_buf b = {0};
        for (const cJSON *t = type->child; t; t = t->next) {
            const char *r = cJSON_IsString(t) ? type_rule(c, s, t->valuestring, path, hint) : NULL;
            if (!r) {
                if (!c->failed && !c->oom) sc_fail(c, path, "'type' lists a non-string");
                free(b.p);
                return NULL;
            }
            rcore_buf_printf(&b, "%s%s", t == type->child ? "" : " | ", r);
        }
        if (!b.p) {
            sc_fail(c, path, "'type' is an empty list");
            return NULL;
        }
        return sc_make(c, hint, &b);
    }
    if (type) {
        sc_fail(c, path, "'type' must be a string or a list of strings");
        return NULL;
    }
    /* no type: infer it from the keywords, as validators do; only annotations: any value */
    static const struct {
        const char *key, *type;
    } infer[] = {{"properties", "object"},
                 {"additionalProperties", "object"},
                 {"required", "object"},
                 {"items", "array"},
                 {"minItems", "array"},
                 {"maxItems", "array"},
                 {"minLength", "string"},
                 {"maxLength", "string"},
                 {"pattern", "string"},
                 {"minimum", "integer"},
                 {"maximum", "integer"},
                 {"exclusiveMinimum", "integer"},
                 {"exclusiveMaximum", "integer"},
                 {"propertyNames", "object"},
                 {"prefixItems", "array"},
                 {"additionalItems", "array"},
                 {"format", "string"}};
    for (size_t i = 0; i < sizeof infer / sizeof infer[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, infer[i].key)) {
            if (strcmp(infer[i].type, "integer") == 0) {
                sc_fail(c, path, "'%s' without \"type\": \"integer\" is not supported",
                        infer[i].key);
                return NULL;
            }
            return type_rule(c, s, infer[i].type, path, hint);
        }
    static const char *const none[] = {NULL};
    return sc_check_keys(c, s, path, none, NULL) ? sc_value(c) : NULL;
}

const char *sc_visit(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    if (c->failed || c->oom) return NULL;
    if (++c->depth > MAX_DEPTH) {
        sc_fail(c, path, "the schema is nested too deeply");
        return NULL;
    }
    const char *r = visit_inner(c, s, path, hint);
    c->depth--;
    if (!r && c->oom && !c->failed) sc_fail(c, path, "out of memory");
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
    const char *root = reserve(&c, "root") == 0 ? sc_visit(&c, doc, "", "root-value") : NULL;
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
