/* The JSON-schema converter's container rules (see schema_impl.h): objects (properties in
 * the schema's order, records with propertyNames) and arrays (lists and tuples). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"

const char *sc_object_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "properties", "required", "additionalProperties",
                                       NULL};
    if (!sc_check_keys(c, s, path, keys, "type object")) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) {
        sc_fail(c, path, "'properties' must be an object");
        return NULL;
    }
    if (req && !cJSON_IsArray(req)) {
        sc_fail(c, path, "'required' must be an array");
        return NULL;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
            sc_fail(c, path, "'required' names a property that 'properties' does not define");
            return NULL;
        }
    sc_space(c);
    const bool no_extra = add && cJSON_IsFalse(add);
    if (!props || !props->child) {
        if (no_extra) return sc_prim(c, "empty-object", "\"{\" space \"}\" space");
        const char *val =
            (add && !cJSON_IsTrue(add)) ? sc_visit(c, add, path, "additional") : sc_value(c);
        if (!val) return NULL;
        sc_string(c);
        struct rcore_buf b = {0};
        char kv[200];
        snprintf(kv, sizeof kv, "string \":\" space %s", val);
        rcore_buf_puts(&b, "\"{\" space ");
        sc_repeat_sep(&b, kv, "\",\" space", 0, -1);
        rcore_buf_puts(&b, " \"}\" space");
        return sc_make(c, hint, &b);
    }
    if (add && !no_extra) {
        sc_fail(c, path,
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
        sc_subpath(sp, sizeof sp, path, "properties", p->string);
        snprintf(h, sizeof h, "%s-%s", hint, p->string);
        const char *val = sc_visit(c, p, sp, h);
        if (!val) goto done;
        struct rcore_buf kb = {0};
        cJSON *key = cJSON_CreateString(p->string);
        if (!key || !sc_json_lit(c, &kb, key)) {
            cJSON_Delete(key);
            free(kb.p);
            c->oom = true;
            goto done;
        }
        cJSON_Delete(key);
        rcore_buf_printf(&kb, " space \":\" space %s", val);
        snprintf(h, sizeof h, "%s-%s-kv", hint, p->string);
        if (!(kv[i] = sc_make(c, h, &kb))) goto done;
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

const char *sc_array_rule(struct conv *c, const cJSON *s, const char *path, const char *hint) {
    static const char *const keys[] = {"type", "items", "minItems", "maxItems", NULL};
    if (!sc_check_keys(c, s, path, keys, "type array")) return NULL;
    long min = 0, max = -1;
    if (!sc_get_count(c, s, "minItems", path, &min) || !sc_get_count(c, s, "maxItems", path, &max))
        return NULL;
    if (max >= 0 && max < min) {
        sc_fail(c, path, "maxItems is below minItems");
        return NULL;
    }
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    char sp[512], h[160];
    sc_subpath(sp, sizeof sp, path, "items", NULL);
    snprintf(h, sizeof h, "%s-item", hint);
    const char *item = items ? sc_visit(c, items, sp, h) : sc_value(c);
    if (!item) return NULL;
    sc_space(c);
    struct rcore_buf b = {0};
    rcore_buf_puts(&b, "\"[\" space ");
    sc_repeat_sep(&b, item, "\",\" space", min, max);
    rcore_buf_puts(&b, " \"]\" space");
    return sc_make(c, hint, &b);
}
