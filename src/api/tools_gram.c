/*
 * chat tools: the grammar of a family's calls, and generated text parsed back into calls (see
 * tools.h and include/recur.h, "tool calls").
 *
 * The grammar is composed from one JSON-schema grammar per tool (rgram_json_schema), each
 * with its rules renamed under a prefix of its own ("t0-", "t1-", ...) so that they cannot
 * clash, around the family's call syntax. Both grammars start with the family's trigger text,
 * so that a lazy grammar fed from the trigger on accepts it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

#include "recur.h"

#include "../core/core.h"
#include "../grammar/grammar.h"
#include "../chat/chat.h"

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* GBNF text g with every rule name prefixed: names are the runs of name characters outside
 * string literals, character classes, repetition counts and comments. */
static void prefix_rules(struct rcore_buf *b, const char *g, const char *prefix) {
    for (const char *p = g; *p;) {
        if (*p == '"' || *p == '[') {
            const char close = *p == '"' ? '"' : ']';
            const char *q = p + 1;
            while (*q && *q != close) q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q) q++;
            rcore_buf_add(b, p, (size_t)(q - p));
            p = q;
        } else if (*p == '{' || *p == '#') {
            const char *q = p + strcspn(p, *p == '{' ? "}" : "\n");
            rcore_buf_add(b, p, (size_t)(q - p));
            p = q;
        } else if (name_char(*p)) {
            const char *q = p;
            while (name_char(*q)) q++;
            rcore_buf_puts(b, prefix);
            rcore_buf_add(b, p, (size_t)(q - p));
            p = q;
        } else {
            rcore_buf_add(b, p++, 1);
        }
    }
}

char *recur_chat_tools_grammar(const char *tmpl, const char *tools, enum recur_tool_choice choice,
                               const char *function, bool parallel, bool *lazy) {
    if (!lazy) {
        rcore_error_set("recur_chat_tools_grammar: lazy is NULL");
        return NULL;
    }
    if (choice != RECUR_TOOL_CHOICE_AUTO && choice != RECUR_TOOL_CHOICE_REQUIRED &&
        choice != RECUR_TOOL_CHOICE_FUNCTION) {
        rcore_error_set("recur_chat_tools_grammar: unknown tool choice %d", (int)choice);
        return NULL;
    }
    if (rchat_find(tmpl) < 0) return NULL;
    cJSON *tl = rtools_parse(tools);
    if (!tl) return NULL;
    if (!tl->child) {
        cJSON_Delete(tl);
        rcore_error_set("tools: the list is empty (no call could be written)");
        return NULL;
    }
    const enum rtools_family fam = rtools_family(tmpl);
    struct rcore_buf b = {0}, fns = {0};
    bool found = choice != RECUR_TOOL_CHOICE_FUNCTION;
    int i = 0, n_alt = 0;
    char *out = NULL;
    rcore_buf_puts(&fns, "fns ::= ");
    for (const cJSON *t = tl->child; t; t = t->next, i++) {
        const cJSON *fn = rtools_function(t);
        const char *name = cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring;
        if (choice == RECUR_TOOL_CHOICE_FUNCTION) {
            if (!function || strcmp(function, name) != 0) continue;
            found = true;
        }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char *ps = params ? cJSON_PrintUnformatted(params) : NULL;
        char *g = rgram_json_schema(ps ? ps : "{\"type\": \"object\"}",
                                    strlen(ps ? ps : "{\"type\": \"object\"}"));
        free(ps);
        if (!g) {
            const char *e = rcore_error_get();
            char *copy = malloc(strlen(e) + 1);
            if (copy) strcpy(copy, e);
            rcore_error_set("tools[%d] (\"%s\"): parameters: %s", i, name, copy ? copy : e);
            free(copy);
            goto done;
        }
        char prefix[24];
        snprintf(prefix, sizeof prefix, "t%d-", i);
        /* the schema's white space (up to a new line and 20 blanks between tokens) made one
           blank at most: models write calls compactly, and a small model sampled under the
           grammar otherwise spends its tokens on white space */
        char *sp = strstr(g, "\nspace ::= ");
        if (!sp && strncmp(g, "space ::= ", 10) == 0) sp = g - 1;
        if (sp) {
            char *body = sp + 1 + strlen("space ::= "), *eol = body + strcspn(body, "\n");
            memset(body, ' ', (size_t)(eol - body));
            if (eol - body >= 4) memcpy(body, "\" \"?", 4);
        }
        prefix_rules(&b, g, prefix);
        free(g);
        if (fam == RTOOLS_MISTRAL)
            rcore_buf_printf(&b, "f%d ::= \"%s\" callid? \"[ARGS]\" t%d-root\n", i, name, i);
        else
            rcore_buf_printf(&b,
                             "f%d ::= \"\\\"%s\\\"\" ws \",\" ws \"\\\"%s\\\"\" ws \":\" ws "
                             "t%d-root\n",
                             i, name, fam == RTOOLS_LLAMA3 ? "parameters" : "arguments", i);
        rcore_buf_printf(&fns, "%sf%d", n_alt++ ? " | " : "", i);
    }
    if (!found) {
        rcore_error_set("tool_choice names the function \"%s\", which is not among the tools",
                        function ? function : "(NULL)");
        goto done;
    }
    rcore_buf_puts(&fns, "\n");
    rcore_buf_add(&b, fns.p, fns.len);
    rcore_buf_puts(&b, "ws ::= \" \"?\nnl ::= \"\\n\"?\n");
    if (fam == RTOOLS_HERMES || fam == RTOOLS_GRANITE) {
        rcore_buf_puts(&b, "tc ::= \"<tool_call>\" nl \"{\" ws \"\\\"name\\\"\" ws \":\" ws fns "
                           "ws \"}\" nl \"</tool_call>\"\n");
        rcore_buf_puts(&b, parallel ? "root ::= tc (nl tc)*\n" : "root ::= tc\n");
    } else if (fam == RTOOLS_NEMO) {
        rcore_buf_puts(&b,
                       "call ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws fns ws \",\" ws "
                       "\"\\\"id\\\"\" ws \":\" ws \"\\\"\" [a-zA-Z0-9]{9} \"\\\"\" ws \"}\"\n");
        rcore_buf_puts(&b, parallel ? "root ::= \"[TOOL_CALLS][\" call (ws \",\" ws call)* \"]\"\n"
                                    : "root ::= \"[TOOL_CALLS][\" call \"]\"\n");
    } else if (fam == RTOOLS_MISTRAL) {
        rcore_buf_puts(&b, "callid ::= \"[CALL_ID]\" [a-zA-Z0-9]{9}\n");
        rcore_buf_puts(&b, parallel ? "root ::= (\"[TOOL_CALLS]\" fns)+\n"
                                    : "root ::= \"[TOOL_CALLS]\" fns\n");
    } else if (fam == RTOOLS_LLAMA3) { /* one call a message: parallel is one call */
        rcore_buf_puts(&b, "root ::= \"{\\\"name\\\"\" ws \":\" ws fns ws \"}\"\n");
    } else {
        rcore_buf_puts(&b, "call ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws fns ws \"}\"\n");
        rcore_buf_puts(&b, parallel ? "root ::= \"{\\\"tool_calls\\\"\" ws \":\" ws \"[\" ws call "
                                      "(ws \",\" ws call)* ws \"]\" ws \"}\"\n"
                                    : "root ::= \"{\\\"tool_calls\\\"\" ws \":\" ws \"[\" ws call "
                                      "ws \"]\" ws \"}\"\n");
    }
    if (b.failed || fns.failed) {
        rcore_error_set("recur_chat_tools_grammar: out of memory");
        goto done;
    }
    *lazy = choice == RECUR_TOOL_CHOICE_AUTO;
    out = rcore_buf_take(&b, NULL);
done:
    rcore_buf_free(&b);
    rcore_buf_free(&fns);
    cJSON_Delete(tl);
    return out;
}

/* ---- parsing ----------------------------------------------------------------------------- */

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && is_ws(*p)) p++;
    return p;
}

static bool starts(const char *p, const char *end, const char *s) {
    size_t n = strlen(s);
    return (size_t)(end - p) >= n && memcmp(p, s, n) == 0;
}

/* One call object {"name": string, "arguments": object (or a string holding one)} into c
 * (malloc'd strings); false when it is not one. */
static bool take_call(const cJSON *o, struct recur_tool_call *c) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!cJSON_IsString(name)) return false;
    cJSON *parsed = NULL;
    if (cJSON_IsString(args)) args = parsed = cJSON_Parse(args->valuestring);
    bool ok = cJSON_IsObject(args);
    char *a = ok ? cJSON_PrintUnformatted(args) : NULL;
    char *nm = ok ? malloc(strlen(name->valuestring) + 1) : NULL;
    cJSON_Delete(parsed);
    if (!a || !nm) {
        free(a);
        free(nm);
        return false;
    }
    strcpy(nm, name->valuestring);
    c->id = NULL;
    c->name = nm;
    c->arguments = a;
    return true;
}

struct calls {
    struct recur_tool_call *v;
    size_t n, cap;
};

static bool push(struct calls *cs, const cJSON *o) {
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? cs->cap * 2 : 4;
        struct recur_tool_call *v = realloc(cs->v, cap * sizeof *v);
        if (!v) return false;
        cs->v = v;
        cs->cap = cap;
    }
    if (!take_call(o, &cs->v[cs->n])) return false;
    cs->n++;
    return true;
}

static void calls_clear(struct calls *cs) {
    for (size_t i = 0; i < cs->n; i++) {
        free((char *)cs->v[i].name);
        free((char *)cs->v[i].arguments);
    }
    free(cs->v);
    *cs = (struct calls){0};
}

/* A JSON value at p (before end) into *v; the end of it, or NULL when there is none. */
static const char *json_at(const char *p, const char *end, cJSON **v) {
    const char *stop = NULL;
    *v = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, false);
    return *v ? stop : NULL;
}

/* Hermes: <tool_call> JSON </tool_call>, repeated; the last close may be missing (or cut) at
 * the end. */
static const char *parse_hermes(const char *p, const char *end, struct calls *cs) {
    while (starts(p, end, "<tool_call>")) {
        cJSON *o = NULL;
        const char *q = json_at(skip_ws(p + strlen("<tool_call>"), end), end, &o);
        const bool ok = q && push(cs, o);
        cJSON_Delete(o);
        if (!ok) return NULL;
        q = skip_ws(q, end);
        if (starts(q, end, "</tool_call>"))
            q = skip_ws(q + strlen("</tool_call>"), end);
        else if ((size_t)(end - q) < strlen("</tool_call>") &&
                 memcmp(q, "</tool_call>", (size_t)(end - q)) == 0)
            q = end; /* the close cut off by the length limit: the call is whole */
        else
            return NULL;
        p = q;
    }
    return p;
}

/* Mistral: [TOOL_CALLS]name([CALL_ID]id)?[ARGS]{...}, repeated */
static const char *parse_mistral(const char *p, const char *end, struct calls *cs) {
    while (starts(p, end, "[TOOL_CALLS]")) {
        p += strlen("[TOOL_CALLS]");
        const char *n0 = p;
        while (p < end && *p != '[') p++;
        const char *n1 = p;
        if (starts(p, end, "[CALL_ID]")) {
            p += strlen("[CALL_ID]");
            while (p < end && *p != '[') p++;
        }
        if (n1 == n0 || !starts(p, end, "[ARGS]")) return NULL;
        cJSON *args = NULL;
        const char *q = json_at(p + strlen("[ARGS]"), end, &args);
        cJSON *o = cJSON_CreateObject();
        char *name = malloc((size_t)(n1 - n0) + 1);
        bool ok = q && o && name;
        if (ok) {
            memcpy(name, n0, (size_t)(n1 - n0));
            name[n1 - n0] = '\0';
            ok = cJSON_AddStringToObject(o, "name", name) &&
                 cJSON_AddItemToObject(o, "arguments", args);
            if (ok) args = NULL;
        }
        ok = ok && push(cs, o);
        free(name);
        cJSON_Delete(args);
        cJSON_Delete(o);
        if (!ok) return NULL;
        p = skip_ws(q, end);
    }
    return p;
}

/* Mistral Nemo: [TOOL_CALLS][{"name", "arguments", "id"}, ...] */
static const char *parse_nemo(const char *p, const char *end, struct calls *cs) {
    cJSON *list = NULL;
    const char *q = json_at(p + strlen("[TOOL_CALLS]"), end, &list);
    bool ok = q && cJSON_IsArray(list) && list->child;
    for (const cJSON *c = ok ? list->child : NULL; ok && c; c = c->next) ok = push(cs, c);
    cJSON_Delete(list);
    return ok ? skip_ws(q, end) : NULL;
}

/* Llama 3: {"name": N, "parameters": A} (or "arguments") */
static const char *parse_llama3(const char *p, const char *end, struct calls *cs) {
    cJSON *o = NULL;
    const char *q = json_at(p, end, &o);
    cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (params && !cJSON_GetObjectItemCaseSensitive(o, "arguments")) {
        cJSON_DetachItemViaPointer(o, params);
        cJSON_AddItemToObject(o, "arguments", params);
    }
    const bool ok = q && push(cs, o);
    cJSON_Delete(o);
    return ok ? skip_ws(q, end) : NULL;
}

/* Generic: {"tool_calls": [call, ...]} */
static const char *parse_generic(const char *p, const char *end, struct calls *cs) {
    cJSON *o = NULL;
    const char *q = json_at(p, end, &o);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "tool_calls");
    bool ok = q && cJSON_IsArray(list) && list->child;
    for (const cJSON *c = ok ? list->child : NULL; ok && c; c = c->next) ok = push(cs, c);
    cJSON_Delete(o);
    return ok ? skip_ws(q, end) : NULL;
}

struct recur_tool_calls *recur_chat_parse_tool_calls(const char *tmpl, const char *text,
                                                     size_t len) {
    if (rchat_find(tmpl) < 0) return NULL;
    if (!text && len) {
        rcore_error_set("recur_chat_parse_tool_calls: text is NULL");
        return NULL;
    }
    const enum rtools_family fam = rtools_family(tmpl);
    const char *trig = rtools_trigger(fam), *end = text + len;
    struct recur_tool_calls *r = calloc(1, sizeof *r);
    if (!r) goto oom;
    /* the first trigger (texts are short: a plain scan) */
    const char *at = NULL;
    for (const char *p = text; p && p < end && !at; p++)
        if (starts(p, end, trig)) at = p;
    struct calls cs = {0};
    const char *rest = NULL;
    if (at)
        rest = fam == RTOOLS_HERMES || fam == RTOOLS_GRANITE ? parse_hermes(at, end, &cs)
               : fam == RTOOLS_LLAMA3                        ? parse_llama3(at, end, &cs)
               : fam == RTOOLS_MISTRAL                       ? parse_mistral(at, end, &cs)
               : fam == RTOOLS_NEMO                          ? parse_nemo(at, end, &cs)
                                                             : parse_generic(at, end, &cs);
    if (!rest || cs.n == 0) { /* no calls: all is content */
        calls_clear(&cs);
        at = end;
        rest = end;
    }
    const char *ce = at;
    if (cs.n)
        while (ce > text && is_ws(ce[-1])) ce--;
    const size_t n_content = (size_t)(ce - text), n_rest = (size_t)(end - rest);
    r->content = malloc(n_content + n_rest + 2);
    if (!r->content) {
        calls_clear(&cs);
        goto oom;
    }
    if (n_content) memcpy(r->content, text, n_content);
    size_t o = n_content;
    if (n_rest) { /* text after the calls: kept, on a line of its own */
        if (o) r->content[o++] = '\n';
        memcpy(r->content + o, rest, n_rest);
        o += n_rest;
    }
    r->content[o] = '\0';
    r->calls = cs.v;
    r->n_calls = cs.n;
    return r;
oom:
    free(r);
    rcore_error_set("recur_chat_parse_tool_calls: out of memory");
    return NULL;
}

void recur_tool_calls_free(struct recur_tool_calls *calls) {
    if (!calls) return;
    for (size_t i = 0; i < calls->n_calls; i++) {
        free((char *)calls->calls[i].name);
        free((char *)calls->calls[i].arguments);
    }
    free(calls->calls);
    free(calls->content);
    free(calls);
}
