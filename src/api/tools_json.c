/*
 * chat tools: JSON printed as the real templates print it, and the request's tools checked
 * (see tools.h).
 *
 * The templates print JSON with Jinja's `tojson`, which transformers (and so every rendering
 * a model was trained on) defines as json.dumps(x, ensure_ascii=False, indent=indent): keys
 * in the given order, ", " and ": " between items without indent, "," and a new line with it,
 * only '"', '\\' and control characters escaped. Numbers: an integral value prints as an
 * integer, others in the shortest form that reads back the same (Python prints 1.0 for a
 * float one; cJSON does not keep that difference, so 1.0 prints as 1 here).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

#include "../core/core.h"

static void dump_string(struct rcore_buf *b, const char *s) {
    rcore_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            rcore_buf_puts(b, "\\\"");
            break;
        case '\\':
            rcore_buf_puts(b, "\\\\");
            break;
        case '\n':
            rcore_buf_puts(b, "\\n");
            break;
        case '\r':
            rcore_buf_puts(b, "\\r");
            break;
        case '\t':
            rcore_buf_puts(b, "\\t");
            break;
        case '\b':
            rcore_buf_puts(b, "\\b");
            break;
        case '\f':
            rcore_buf_puts(b, "\\f");
            break;
        default:
            if (*p < 0x20)
                rcore_buf_printf(b, "\\u%04x", *p);
            else
                rcore_buf_add(b, p, 1);
        }
    }
    rcore_buf_puts(b, "\"");
}

static void dump_number(struct rcore_buf *b, double v) {
    if (!isfinite(v)) { /* cJSON never parses these; Python would print NaN / Infinity */
        rcore_buf_puts(b, v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e16) {
        rcore_buf_printf(b, "%.0f", v);
        return;
    }
    char t[40];
    for (int prec = 1; prec <= 17; prec++) { /* the shortest form that reads back the same */
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    rcore_buf_puts(b, t);
}

static void newline(struct rcore_buf *b, int indent, int depth) {
    rcore_buf_puts(b, "\n");
    for (int i = 0; i < indent * depth; i++) rcore_buf_puts(b, " ");
}

static void dump(struct rcore_buf *b, const cJSON *v, int indent, int depth) {
    if (cJSON_IsNull(v))
        rcore_buf_puts(b, "null");
    else if (cJSON_IsTrue(v))
        rcore_buf_puts(b, "true");
    else if (cJSON_IsFalse(v))
        rcore_buf_puts(b, "false");
    else if (cJSON_IsNumber(v))
        dump_number(b, v->valuedouble);
    else if (cJSON_IsString(v))
        dump_string(b, v->valuestring);
    else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        const bool obj = cJSON_IsObject(v);
        rcore_buf_puts(b, obj ? "{" : "[");
        if (!v->child) {
            rcore_buf_puts(b, obj ? "}" : "]");
            return;
        }
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) rcore_buf_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline(b, indent, depth + 1);
            if (obj) {
                dump_string(b, c->string);
                rcore_buf_puts(b, ": ");
            }
            dump(b, c, indent, depth + 1);
        }
        if (indent >= 0) newline(b, indent, depth);
        rcore_buf_puts(b, obj ? "}" : "]");
    }
}

bool rtools_dump(struct rcore_buf *b, const cJSON *v, int indent) {
    dump(b, v, indent, 0);
    return !b->failed;
}

const cJSON *rtools_function(const cJSON *tool) {
    return cJSON_GetObjectItemCaseSensitive(tool, "function");
}

cJSON *rtools_parse(const char *tools) {
    if (!tools) {
        rcore_error_set("tools: NULL");
        return NULL;
    }
    cJSON *doc = cJSON_Parse(tools);
    if (!doc) {
        rcore_error_set("tools: not valid JSON");
        return NULL;
    }
    if (!cJSON_IsArray(doc)) {
        rcore_error_set("tools must be an array of {\"type\": \"function\", \"function\": {...}}");
        goto fail;
    }
    int i = 0;
    for (const cJSON *t = doc->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = rtools_function(t);
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn)) {
            rcore_error_set("tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i);
            goto fail;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name) || !name->valuestring[0]) {
            rcore_error_set("tools[%d].function.name is missing (a non-empty string)", i);
            goto fail;
        }
        for (const char *c = name->valuestring; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.')) {
                rcore_error_set("tools[%d].function.name \"%s\": only letters, digits, '_', "
                                "'-' and '.' are accepted",
                                i, name->valuestring);
                goto fail;
            }
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        if (desc && !cJSON_IsString(desc)) {
            rcore_error_set("tools[%d].function.description must be a string", i);
            goto fail;
        }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (params && !cJSON_IsObject(params)) {
            rcore_error_set("tools[%d].function.parameters must be a JSON schema object", i);
            goto fail;
        }
        int j = 0;
        for (const cJSON *u = doc->child; u != t; u = u->next, j++) {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(rtools_function(u), "name");
            if (strcmp(other->valuestring, name->valuestring) == 0) {
                rcore_error_set("tools[%d] and tools[%d] are both named \"%s\"", j, i,
                                name->valuestring);
                goto fail;
            }
        }
    }
    return doc;
fail:
    cJSON_Delete(doc);
    return NULL;
}
