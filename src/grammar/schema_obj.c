/* The JSON-schema converter's container rules (see schema_impl.h): objects (properties in
 * the schema's order, records with propertyNames) and arrays (lists and tuples). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"

/* The object of the keys listed from first on (the members of "properties", or with shared
   the strings of a propertyNames enum, whose values all take the rule shared), in this order:
   the required ones always, the others as any ordered subset, and no other key. */
static const char *fixed_keys(struct conv *c, const cJSON *first, const char *shared,
                              const cJSON *req, const char *path, const char *hint) {
    size_t n = 0;
    for (const cJSON *p = first; p; p = p->next) n++;
    const char **kv = calloc(n, sizeof *kv);
    bool *required = calloc(n, sizeof *required);
    struct rcore_buf b = {0};
    const char *res = NULL;
    if (!kv || !required) {
        c->oom = true;
        goto done;
    }
    size_t i = 0;
    for (const cJSON *p = first; p; p = p->next, i++) {
        const char *name = shared ? p->valuestring : p->string;
        char sp[512], h[160];
        sc_subpath(sp, sizeof sp, path, "properties", name);
        snprintf(h, sizeof h, "%s-%s", hint, name);
        const char *val = shared ? shared : sc_visit(c, p, sp, h);
        if (!val) goto done;
        struct rcore_buf kb = {0};
        cJSON *key = cJSON_CreateString(name);
        if (!key || !sc_json_lit(c, &kb, key)) {
            cJSON_Delete(key);
            free(kb.p);
            c->oom = true;
            goto done;
        }
        cJSON_Delete(key);
        rcore_buf_printf(&kb, " space \":\" space %s", val);
        snprintf(h, sizeof h, "%s-%s-kv", hint, name);
        if (!(kv[i] = sc_make(c, h, &kb))) goto done;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (strcmp(r->valuestring, name) == 0) required[i] = true;
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
        if (!(opt_next = sc_make(c, h, &ob))) goto done;
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
    res = sc_make(c, hint, &b);
    b.p = NULL;
done:
    free(b.p);
    free(kv);
    free(required);
    return res;
}

/* The names in req are strings among the keys listed from first on (see fixed_keys). */
static bool check_required(struct conv *c, const cJSON *req, const cJSON *first, bool from_enum,
                           const char *path) {
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        const cJSON *k = first;
        while (k && !(cJSON_IsString(r) &&
                      strcmp(from_enum ? k->valuestring : k->string, r->valuestring) == 0))
            k = k->next;
        if (!k)
            return sc_fail(c, path, "'required' names a property that '%s' does not define",
                           from_enum ? "propertyNames' enum" : "properties");
    }
    return true;
}

/* Keys are strings: propertyNames must be a schema of strings (its type "string" or none, its
   enum or const strings). *plain: it says no more than that. */
static bool names_schema(struct conv *c, const cJSON *pn, const char *path, bool *plain) {
    static const char *const keys[] = {"type",      "enum",    "const",  "minLength",
                                       "maxLength", "pattern", "format", NULL};
    *plain = true;
    if (!pn || cJSON_IsTrue(pn)) return true;
    if (!cJSON_IsObject(pn))
        return sc_fail(c, path, "'propertyNames' must be true or a schema of strings");
    if (!sc_check_keys(c, pn, path, keys, "propertyNames")) return false;
    for (const cJSON *k = pn->child; k; k = k->next) {
        if (sc_is_annotation(k->string)) continue;
        if (strcmp(k->string, "type") == 0) {
            if (!cJSON_IsString(k) || strcmp(k->valuestring, "string") != 0)
                return sc_fail(c, path,
                               "'propertyNames' must have type \"string\" (keys are "
                               "strings)");
            continue;
        }
        *plain = false;
        bool strings = true;
        if (strcmp(k->string, "const") == 0) strings = cJSON_IsString(k);
        if (strcmp(k->string, "enum") == 0)
            for (const cJSON *e = k->child; e; e = e->next) strings &= cJSON_IsString(e);
        if (!strings)
            return sc_fail(c, path, "'propertyNames' '%s' must hold strings (keys are strings)",
                           k->string);
    }
    return true;
}

const char *sc_object_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {
        "type", "properties", "required", "additionalProperties", "propertyNames", NULL};
    if (!sc_check_keys(c, s, path, keys, "type object")) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(s, "propertyNames");
    if (props && !cJSON_IsObject(props)) {
        sc_fail(c, path, "'properties' must be an object");
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        sc_fail(c, path, "'required' must be an array");
        return NULL;
    }
    char pn_path[512], add_path[512], h[160];
    sc_subpath(pn_path, sizeof pn_path, path, "propertyNames", NULL);
    sc_subpath(add_path, sizeof add_path, path, "additionalProperties", NULL);
    bool plain_names;
    if (!names_schema(c, pn, pn_path, &plain_names)) return NULL;
    sc_space(c);
    const bool no_extra = add && cJSON_IsFalse(add);
    if (props && props->child) {
        if (!check_required(c, req, props->child, false, path)) return NULL;
        if (add && !no_extra) {
            sc_fail(c, path,
                    "'additionalProperties' other than false together with 'properties' is "
                    "not supported");
            return NULL;
        }
        /* the properties' names would have to match it: not checked, so refused */
        if (!plain_names) {
            sc_fail(c, path,
                    "'propertyNames' other than {\"type\": \"string\"} together with "
                    "'properties' is not supported");
            return NULL;
        }
        return fixed_keys(c, props->child, NULL, req, path, hint);
    }
    snprintf(h, sizeof h, "%s-value", hint);
    const char *val = no_extra                      ? NULL
                      : (add && !cJSON_IsTrue(add)) ? sc_visit(c, add, add_path, h)
                                                    : sc_value(c);
    if (!no_extra && !val) return NULL;
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(pn, "enum");
    if (names && cJSON_IsArray(names) && val) {
        /* zod's z.record(z.enum([...]), X): the enum's keys, each with X, some required */
        for (const cJSON *k = pn->child; k; k = k->next)
            if (strcmp(k->string, "enum") != 0 && strcmp(k->string, "type") != 0 &&
                !sc_is_annotation(k->string)) {
                sc_fail(c, pn_path,
                        "'enum' is supported alone (with type \"string\"), not with '%s'",
                        k->string);
                return NULL;
            }
        if (!check_required(c, req, names->child, true, path)) return NULL;
        return names->child ? fixed_keys(c, names->child, val, req, path, hint)
                            : sc_prim(c, "empty-object", "\"{\" space \"}\" space");
    }
    if (!check_required(c, req, NULL, false, path)) return NULL;
    if (no_extra) return sc_prim(c, "empty-object", "\"{\" space \"}\" space");
    snprintf(h, sizeof h, "%s-key", hint);
    const char *key = plain_names ? sc_string(c) : sc_visit(c, pn, pn_path, h);
    if (!key) return NULL;
    struct rcore_buf kb = {0}, b = {0};
    rcore_buf_printf(&kb, "%s \":\" space %s", key, val);
    snprintf(h, sizeof h, "%s-kv", hint);
    const char *kv = sc_make(c, h, &kb);
    if (!kv) return NULL;
    rcore_buf_puts(&b, "\"{\" space ");
    sc_repeat_sep(&b, kv, "\",\" space", 0, -1);
    rcore_buf_puts(&b, " \"}\" space");
    return sc_make(c, hint, &b);
}

/* Groups one rule of a tuple nests at most: a long tuple continues in further rules, as the
   grammar parser takes 256 nested groups. */
#define TUPLE_CHUNK 64

/* The items of a tuple (rules item[0..n)) into b, for a length from min to max (< 0:
   unbounded), the items past the tuple with the rule rest (NULL: none). Item i is optional
   from min on and nests the ones after it, so that a shorter array ends the tuple early, as
   JSON Schema allows. Built from the end, TUPLE_CHUNK items a rule. */
static bool tuple_items(struct conv *c, struct rcore_buf *b, const char *const *item, size_t n,
                        long min, long max, const char *rest, const char *hint) {
    const size_t end = max >= 0 && max < (long)n ? (size_t)max : n;
    const char *inner = NULL; /* the rule of the items after the chunk */
    for (size_t s = end ? (end - 1) / TUPLE_CHUNK * TUPLE_CHUNK : 0;; s -= TUPLE_CHUNK) {
        struct rcore_buf cb = {0}, *out = s ? &cb : b;
        const size_t e = s + TUPLE_CHUNK < end ? s + TUPLE_CHUNK : end;
        size_t open = 0;
        for (size_t i = s; i < e; i++) {
            const bool opt = (long)i >= min;
            open += opt;
            rcore_buf_printf(out, "%s%s%s ", opt ? "(" : "", i ? "\",\" space " : "", item[i]);
        }
        if (inner) {
            rcore_buf_puts(out, inner);
        } else if (rest && end == n && max != (long)n) {
            const long lo = min > (long)n ? min - (long)n : 0;
            if (max < 0)
                rcore_buf_printf(out, "(\",\" space %s){%ld,}", rest, lo);
            else
                rcore_buf_printf(out, "(\",\" space %s){%ld,%ld}", rest, lo, max - (long)n);
        }
        while (open--) rcore_buf_puts(out, ")?");
        if (s == 0) return true;
        char h[160];
        snprintf(h, sizeof h, "%s-from-%zu", hint, s);
        if (!(inner = sc_make(c, h, &cb))) return false;
    }
}

/* The rule of the items past a tuple (or of all items): absent or true any value, false none
   (*none set, NULL back without an error), else the schema at path/key. */
static const char *rest_rule(struct conv *c, const cJSON *rest, const char *path, const char *key,
                             const char *hint, bool *none) {
    *none = rest && cJSON_IsFalse(rest);
    if (*none) return NULL;
    if (!rest || cJSON_IsTrue(rest)) return sc_value(c);
    char sp[512], h[160];
    sc_subpath(sp, sizeof sp, path, key, NULL);
    snprintf(h, sizeof h, "%s-item", hint);
    return sc_visit(c, rest, sp, h);
}

const char *sc_array_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type",     "items",    "prefixItems", "additionalItems",
                                       "minItems", "maxItems", NULL};
    if (!sc_check_keys(c, s, path, keys, "type array")) return NULL;
    long min = 0, max = -1;
    if (!sc_get_count(c, s, "minItems", path, &min) || !sc_get_count(c, s, "maxItems", path, &max))
        return NULL;
    if (max >= 0 && max < min) {
        sc_fail(c, path, "maxItems is below minItems");
        return NULL;
    }
    /* the tuple: 2020-12's prefixItems with items for the rest, or draft 7's list in items with
       additionalItems for the rest; not the two mixed */
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    const cJSON *tuple = prefix, *rest = items;
    const char *tuple_key = "prefixItems", *rest_key = "items";
    if (prefix && (!cJSON_IsArray(prefix) || cJSON_IsArray(items) || extra)) {
        sc_fail(c, path,
                "'prefixItems' must be an array, with 'items' a schema and no "
                "'additionalItems'");
        return NULL;
    }
    if (!prefix && cJSON_IsArray(items)) {
        tuple = items, rest = extra;
        tuple_key = "items", rest_key = "additionalItems";
    } else if (extra && !prefix) {
        sc_fail(c, path, "'additionalItems' is supported only after a list in 'items'");
        return NULL;
    }
    bool none;
    const char *more = rest_rule(c, rest, path, rest_key, hint, &none);
    if (!more && !none) return NULL;
    const size_t n = tuple ? (size_t)cJSON_GetArraySize(tuple) : 0;
    if (none && (max < 0 || max > (long)n)) max = (long)n;
    if (max >= 0 && max < min) {
        sc_fail(c, path, "minItems is more than the %zu items allowed", n);
        return NULL;
    }
    const char **item = calloc(n ? n : 1, sizeof *item);
    if (!item) {
        c->oom = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *x = tuple ? tuple->child : NULL; x; x = x->next, i++) {
        char sp[512], idx[24], h[160];
        snprintf(idx, sizeof idx, "%zu", i);
        sc_subpath(sp, sizeof sp, path, tuple_key, idx);
        snprintf(h, sizeof h, "%s-%zu", hint, i);
        if (!(item[i] = sc_visit(c, x, sp, h))) {
            free(item);
            return NULL;
        }
    }
    sc_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "\"[\" space ");
    bool ok = true;
    if (n == 0) {
        if (more) sc_repeat_sep(&b, more, "\",\" space", min, max);
    } else {
        ok = tuple_items(c, &b, item, n, min, max, more, hint);
    }
    rcore_buf_puts(&b, " \"]\" space");
    free(item);
    if (!ok) {
        free(b.p);
        return NULL;
    }
    return sc_make(c, hint, &b);
}
