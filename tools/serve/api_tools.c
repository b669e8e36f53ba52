/*
 * recur serve: tool calls on /v1/responses and /v1/messages, in their own shapes, over chat's
 * (toolcall.c: the same rendering, grammar and parser; docs/serve.md).
 *
 * Responses (OpenAI): tools are flat {type: "function", name, description, parameters,
 * strict} (strict or not, the grammar holds the arguments to the schema), written as chat's
 * {type: "function", function: {name, description, parameters}}; tool_choice "auto", "none",
 * "required" or {type: "function", name}; parallel_tool_calls. Input items function_call
 * {call_id, name, arguments} join the assistant message before them as its tool_calls (or
 * make one), function_call_output {call_id, output} is a tool message. The answer's calls are
 * output items {id: "fc_...", type: "function_call", status, arguments, call_id, name}, after
 * the message item (which is left out when the model wrote no text before its calls).
 *
 * Messages (Anthropic): tools {name, description, input_schema}; tool_choice {type: auto |
 * any (= required) | tool (name) | none, disable_parallel_tool_use}; tool_use blocks of an
 * assistant turn are its calls, tool_result blocks of a user turn are tool messages; the
 * answer's calls are tool_use blocks {id: "toolu_...", name, input: the arguments' object}.
 *
 * Other tool types (OpenAI's web_search, file_search, ...; Anthropic's server tools) are
 * refused by name: recur runs no tools, it only lets the model call the caller's functions.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The fields of o not in ok (NULL-ended): the first one's name, NULL when none. */
static const char *other_field(const cJSON *o, const char *const *ok) {
    for (const cJSON *f = o->child; f; f = f->next) {
        int i = 0;
        while (ok[i] && strcmp(ok[i], f->string) != 0) i++;
        if (!ok[i]) return f->string;
    }
    return NULL;
}

/* Chat's {type: "function", function: {name, description?, parameters?}}; NULL without
 * memory. */
static cJSON *chat_tool(const char *name, const cJSON *desc, const cJSON *params) {
    cJSON *t = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(t, "function");
    if (!f || !cJSON_AddStringToObject(t, "type", "function")) goto fail;
    cJSON_DetachItemViaPointer(t, f); /* "type" first, as OpenAI writes it */
    cJSON_AddItemToObject(t, "function", f);
    if (!cJSON_AddStringToObject(f, "name", name)) goto fail;
    if (desc && !cJSON_IsNull(desc) &&
        !cJSON_AddItemToObject(f, "description", cJSON_Duplicate(desc, true)))
        goto fail;
    if (params && !cJSON_IsNull(params) &&
        !cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(params, true)))
        goto fail;
    return t;
fail:
    cJSON_Delete(t);
    return NULL;
}

/* ---- /v1/responses: the request ---------------------------------------------------------- */

void serve_responses_tools(struct parse *p, cJSON *chat) {
    const cJSON *tools = serve_field(p, "tools");
    if (p->bad) return;
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) {
            serve_fail(p, "\"tools\" must be an array of {\"type\": \"function\", \"name\", ...}");
            return;
        }
        cJSON *out = cJSON_AddArrayToObject(chat, "tools");
        int i = 0;
        for (const cJSON *t = tools->child; t; t = t->next, i++) {
            const char *type = str_of(t, "type"), *name = str_of(t, "name");
            static const char *const ok[] = {"type",       "name",   "description",
                                             "parameters", "strict", NULL};
            if (!cJSON_IsObject(t) || !type) {
                serve_fail(p, "\"tools\"[%d] must be an object with a \"type\"", i);
                return;
            }
            if (strcmp(type, "function") != 0) {
                serve_fail(p,
                           "\"tools\"[%d]: tools of type \"%.40s\" are not supported by recur "
                           "(function tools only: recur runs no tools itself)",
                           i, type);
                return;
            }
            const char *other = other_field(t, ok);
            if (other) {
                serve_fail(p, "\"tools\"[%d].%.40s is not supported", i, other);
                return;
            }
            const cJSON *strict = cJSON_GetObjectItemCaseSensitive(t, "strict");
            if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict)) {
                serve_fail(p, "\"tools\"[%d].strict must be true or false", i);
                return;
            }
            if (!name) {
                serve_fail(p, "\"tools\"[%d].name is required (a string)", i);
                return;
            }
            const cJSON *params = cJSON_GetObjectItemCaseSensitive(t, "parameters");
            if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
                serve_fail(p, "\"tools\"[%d].parameters must be a JSON schema object", i);
                return;
            }
            cJSON *ct = chat_tool(name, cJSON_GetObjectItemCaseSensitive(t, "description"), params);
            if (!out || !ct || !cJSON_AddItemToArray(out, ct)) {
                cJSON_Delete(ct);
                serve_fail(p, "out of memory");
                return;
            }
        }
    }
    const cJSON *tc = serve_field(p, "tool_choice");
    if (tc && !cJSON_IsNull(tc)) {
        cJSON *v = NULL;
        const char *type = str_of(tc, "type");
        if (cJSON_IsString(tc)) {
            v = cJSON_Duplicate(tc, false); /* auto, none, required: toolcall.c checks them */
        } else if (cJSON_IsObject(tc) && type && strcmp(type, "function") == 0) {
            const char *name = str_of(tc, "name");
            if (!name || cJSON_GetArraySize(tc) != 2) {
                serve_fail(p, "\"tool_choice\" must be {\"type\": \"function\", \"name\": ...}");
                return;
            }
            v = cJSON_CreateObject();
            cJSON_AddStringToObject(v, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(v, "function"), "name", name);
        } else if (cJSON_IsObject(tc) && type) {
            serve_fail(p,
                       "\"tool_choice\" of type \"%.40s\" is not supported by recur (\"auto\", "
                       "\"none\", \"required\" or {\"type\": \"function\", \"name\"})",
                       type);
            return;
        } else {
            serve_fail(p, "\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
                          "{\"type\": \"function\", \"name\": ...}");
            return;
        }
        if (!v || !cJSON_AddItemToObject(chat, "tool_choice", v)) {
            cJSON_Delete(v);
            serve_fail(p, "out of memory");
            return;
        }
    }
    const cJSON *par = serve_field(p, "parallel_tool_calls");
    if (par && !cJSON_IsNull(par) &&
        !cJSON_AddItemToObject(chat, "parallel_tool_calls", cJSON_Duplicate(par, false)))
        serve_fail(p, "out of memory");
}

/* The name of the call id among msgs' assistant tool_calls (the latest), NULL when none. */
static const char *call_name(const cJSON *msgs, const char *id) {
    const char *name = NULL;
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        for (const cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c; c = c->next) {
            const char *cid = str_of(c, "id");
            if (cid && strcmp(cid, id) == 0)
                name = str_of(cJSON_GetObjectItemCaseSensitive(c, "function"), "name");
        }
    }
    return name;
}

/* A function_call_output's output: a string, or input_text parts joined (malloc'd). */
static char *output_text(struct parse *p, const cJSON *o, int i) {
    if (cJSON_IsString(o)) return strdup(o->valuestring);
    size_t len = 0;
    int k = 0;
    for (const cJSON *part = cJSON_IsArray(o) ? o->child : NULL; part; part = part->next, k++) {
        const char *type = str_of(part, "type"), *text = str_of(part, "text");
        if (!type || strcmp(type, "input_text") != 0 || !text) {
            serve_fail(p,
                       "\"input\"[%d].output[%d]: only {\"type\": \"input_text\", \"text\"} "
                       "parts are supported",
                       i, k);
            return NULL;
        }
        len += strlen(text);
    }
    if (!cJSON_IsArray(o)) {
        serve_fail(p, "\"input\"[%d].output must be a string or an array of input_text parts", i);
        return NULL;
    }
    char *out = malloc(len + 1);
    size_t at = 0;
    for (const cJSON *part = o->child; out && part; part = part->next) {
        const char *text = str_of(part, "text");
        memcpy(out + at, text, strlen(text));
        at += strlen(text);
    }
    if (out) out[at] = '\0';
    return out;
}

bool serve_responses_tool_item(struct parse *p, cJSON *msgs, const cJSON *m, int i) {
    const char *type = str_of(m, "type");
    const bool call = type && strcmp(type, "function_call") == 0;
    const bool result = type && strcmp(type, "function_call_output") == 0;
    if (!call && !result) return false;
    static const char *const call_ok[] = {"type", "call_id", "name", "arguments",
                                          "id",   "status",  NULL};
    static const char *const result_ok[] = {"type", "call_id", "output", "id", "status", NULL};
    const char *other = other_field(m, call ? call_ok : result_ok);
    if (other) {
        serve_fail(p, "\"input\"[%d].%.40s is not supported on a %s item", i, other, type);
        return true;
    }
    const char *id = str_of(m, "call_id");
    if (!id) {
        serve_fail(p, "\"input\"[%d].call_id is required (a string)", i);
        return true;
    }
    cJSON *msg = NULL;
    if (call) {
        const char *name = str_of(m, "name"), *args = str_of(m, "arguments");
        if (!name || !args) {
            serve_fail(p, "\"input\"[%d].%s is required (a string)", i,
                       name ? "arguments" : "name");
            return true;
        }
        cJSON *a = cJSON_Parse(args);
        const bool obj = cJSON_IsObject(a);
        cJSON_Delete(a);
        if (!obj) {
            serve_fail(p, "\"input\"[%d].arguments must be the JSON text of an object", i);
            return true;
        }
        /* the assistant message just before takes the call; else one of calls only */
        cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
        const char *role = str_of(last, "role");
        if (!role || strcmp(role, "assistant") != 0) {
            last = msg = cJSON_CreateObject();
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddNullToObject(msg, "content");
        }
        cJSON *calls = last ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL;
        if (last && !calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
        cJSON *c = cJSON_CreateObject();
        if (c) {
            cJSON_AddStringToObject(c, "id", id);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", name);
            cJSON_AddStringToObject(f, "arguments", args);
        }
        if (!calls || !c || !cJSON_AddItemToArray(calls, c)) {
            cJSON_Delete(c);
            cJSON_Delete(msg);
            serve_fail(p, "out of memory");
            return true;
        }
    } else {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(m, "output");
        char *text = output_text(p, o, i);
        if (!text) {
            if (!p->bad) serve_fail(p, "out of memory");
            return true;
        }
        const char *name = call_name(msgs, id);
        if (!name) { /* as OpenAI: a result answers a call of the conversation */
            free(text);
            serve_fail(p,
                       "\"input\"[%d].call_id \"%.64s\": no function_call with that call_id "
                       "comes before it",
                       i, id);
            return true;
        }
        msg = cJSON_CreateObject();
        if (msg) {
            cJSON_AddStringToObject(msg, "role", "tool");
            cJSON_AddStringToObject(msg, "tool_call_id", id);
            cJSON_AddStringToObject(msg, "name", name);
            cJSON_AddStringToObject(msg, "content", text);
        }
        free(text);
    }
    if (msg && !cJSON_AddItemToArray(msgs, msg)) {
        cJSON_Delete(msg);
        msg = NULL;
    }
    if (!msg && !call) serve_fail(p, "out of memory");
    return true;
}

/* ---- /v1/responses: the answer ------------------------------------------------------------ */

struct recur_tool_calls *serve_api_calls(const struct server *s, const struct task *t,
                                         const char *text, size_t len) {
    struct recur_tool_calls *tc = serve_tools_parse(s, t, text, len);
    if (tc && !tc->n_calls) {
        recur_tool_calls_free(tc);
        tc = NULL;
    }
    return tc;
}

cJSON *serve_responses_call_item(const struct server *s, const struct task *t,
                                 const struct recur_tool_calls *tc, size_t k, bool done) {
    cJSON *calls = serve_tool_calls_json(s, t, 0, tc, false);
    cJSON *call = cJSON_GetArrayItem(calls, (int)k);
    const char *cid = str_of(call, "id");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(call, "function");
    cJSON *j = cid ? cJSON_CreateObject() : NULL;
    if (j) {
        char id[80];
        snprintf(id, sizeof id, "fc_%s", strncmp(cid, "call_", 5) == 0 ? cid + 5 : cid);
        cJSON_AddStringToObject(j, "id", id);
        cJSON_AddStringToObject(j, "type", "function_call");
        cJSON_AddStringToObject(j, "status", done ? "completed" : "in_progress");
        cJSON_AddStringToObject(j, "arguments", done ? str_of(f, "arguments") : "");
        cJSON_AddStringToObject(j, "call_id", cid);
        cJSON_AddStringToObject(j, "name", str_of(f, "name"));
    }
    cJSON_Delete(calls);
    return j;
}

cJSON *serve_api_assistant_message(const struct server *s, const struct task *t, const char *text,
                                   size_t len) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "role", "assistant");
    struct recur_tool_calls *tc = serve_api_calls(s, t, text, len);
    if (!tc) {
        serve_add_text(m, "content", text, len);
        return m;
    }
    if (tc->content[0])
        cJSON_AddStringToObject(m, "content", tc->content);
    else
        cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToObject(m, "tool_calls", serve_tool_calls_json(s, t, 0, tc, false));
    recur_tool_calls_free(tc);
    return m;
}

/* ---- /v1/messages: the request ----------------------------------------------------------- */

char *serve_messages_tools(struct parse *p) {
    const cJSON *tools = serve_field(p, "tools");
    if (p->bad || !tools || cJSON_IsNull(tools)) return NULL;
    if (!cJSON_IsArray(tools)) {
        serve_fail(p,
                   "\"tools\" must be an array of {\"name\", \"description\", \"input_schema\"}");
        return NULL;
    }
    if (!tools->child) return NULL;
    cJSON *out = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *t = tools->child; t && out; t = t->next, i++) {
        static const char *const ok[] = {"type",         "name",          "description",
                                         "input_schema", "cache_control", NULL};
        const char *type = str_of(t, "type"), *name = str_of(t, "name");
        if (!cJSON_IsObject(t)) {
            serve_fail(p, "\"tools\"[%d] must be an object {name, description, input_schema}", i);
            break;
        }
        /* a client tool has no type or "custom"; the others (bash_20250124, web_search_...)
           are Anthropic's server tools, run by Anthropic */
        if (type && strcmp(type, "custom") != 0) {
            serve_fail(p,
                       "\"tools\"[%d]: tools of type \"%.40s\" are not supported by recur "
                       "(client tools {name, description, input_schema} only)",
                       i, type);
            break;
        }
        const char *other = other_field(t, ok);
        if (other) {
            serve_fail(p, "\"tools\"[%d].%.40s is not supported", i, other);
            break;
        }
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        if (!name) {
            serve_fail(p, "\"tools\"[%d].name is required (a string)", i);
            break;
        }
        if (!cJSON_IsObject(schema)) {
            serve_fail(p, "\"tools\"[%d].input_schema is required (a JSON schema object)", i);
            break;
        }
        cJSON *ct = chat_tool(name, cJSON_GetObjectItemCaseSensitive(t, "description"), schema);
        if (!ct || !cJSON_AddItemToArray(out, ct)) {
            cJSON_Delete(ct);
            serve_fail(p, "out of memory");
        }
    }
    char *text = !p->bad && out ? cJSON_PrintUnformatted(out) : NULL;
    cJSON_Delete(out);
    if (!p->bad && !text) serve_fail(p, "out of memory");
    return text;
}

void serve_messages_tool_choice(struct parse *p, struct server *s, struct task *t,
                                const char *tools) {
    const cJSON *tc = serve_field(p, "tool_choice");
    if (p->bad) return;
    cJSON *choice = NULL, *par = NULL;
    if (tc && !cJSON_IsNull(tc)) {
        const char *type = str_of(tc, "type"), *name = str_of(tc, "name");
        const cJSON *dp = cJSON_GetObjectItemCaseSensitive(tc, "disable_parallel_tool_use");
        static const char *const ok[] = {"type", "name", "disable_parallel_tool_use", NULL};
        const char *other = cJSON_IsObject(tc) ? other_field(tc, ok) : NULL;
        if (!cJSON_IsObject(tc) || !type) {
            serve_fail(p, "\"tool_choice\" must be an object {\"type\": \"auto\" | \"any\" | "
                          "\"tool\" | \"none\"}");
            return;
        }
        if (other || (name && strcmp(type, "tool") != 0)) {
            serve_fail(p, "\"tool_choice\".%.40s is not supported with type \"%.20s\"",
                       other ? other : "name", type);
            return;
        }
        if (dp && !cJSON_IsNull(dp) && !cJSON_IsBool(dp)) {
            serve_fail(p, "\"tool_choice\".disable_parallel_tool_use must be true or false");
            return;
        }
        if (strcmp(type, "auto") == 0 || strcmp(type, "none") == 0) {
            choice = cJSON_CreateString(type);
        } else if (strcmp(type, "any") == 0) {
            choice = cJSON_CreateString("required");
        } else if (strcmp(type, "tool") == 0) {
            if (!name) {
                serve_fail(p, "\"tool_choice\".name is required with type \"tool\"");
                return;
            }
            choice = cJSON_CreateObject();
            cJSON_AddStringToObject(choice, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(choice, "function"), "name", name);
        } else {
            serve_fail(p,
                       "\"tool_choice\".type \"%.40s\" is not one of \"auto\", \"any\", "
                       "\"tool\", \"none\"",
                       type);
            return;
        }
        /* Anthropic's: at most one call (any, tool: exactly one) */
        if (cJSON_IsTrue(dp)) par = cJSON_CreateFalse();
        if (!choice) {
            serve_fail(p, "out of memory");
            return;
        }
    }
    serve_tools_setup(p, s, t, tools, choice, par);
    cJSON_Delete(choice);
    cJSON_Delete(par);
}

bool serve_messages_tool_use(struct parse *p, const cJSON *blk, const char *what,
                             struct recur_tool_call *out, char **args) {
    static const char *const ok[] = {"type", "id", "name", "input", "cache_control", NULL};
    const char *other = other_field(blk, ok);
    const char *id = str_of(blk, "id"), *name = str_of(blk, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(blk, "input");
    *args = NULL;
    if (other) {
        serve_fail(p, "%s.%.40s is not supported on a tool_use block", what, other);
        return false;
    }
    if (!id || !name) {
        serve_fail(p, "%s.%s is required (a string)", what, id ? "name" : "id");
        return false;
    }
    if (!cJSON_IsObject(input)) {
        serve_fail(p, "%s.input must be an object", what);
        return false;
    }
    if (!(*args = cJSON_PrintUnformatted(input))) {
        serve_fail(p, "out of memory");
        return false;
    }
    *out = (struct recur_tool_call){id, name, *args};
    return true;
}

char *serve_messages_tool_result(struct parse *p, const cJSON *blk, const char *what,
                                 const char **id) {
    static const char *const ok[] = {"type",     "tool_use_id",   "content",
                                     "is_error", "cache_control", NULL};
    const char *other = other_field(blk, ok);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(blk, "content");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(blk, "is_error");
    *id = str_of(blk, "tool_use_id");
    if (other) {
        serve_fail(p, "%s.%.40s is not supported on a tool_result block", what, other);
        return NULL;
    }
    if (!*id) {
        serve_fail(p, "%s.tool_use_id is required (a string)", what);
        return NULL;
    }
    /* the chat formats have no place for a failed result's flag: the content says it */
    if (err && !cJSON_IsNull(err) && !cJSON_IsFalse(err)) {
        serve_fail(p,
                   "%s.is_error: only false is supported (recur's chat formats cannot mark a "
                   "failed result; say so in its content)",
                   what);
        return NULL;
    }
    if (!c || cJSON_IsNull(c)) return strdup("");
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    size_t len = 0;
    int k = 0;
    for (const cJSON *b = cJSON_IsArray(c) ? c->child : NULL; b; b = b->next, k++) {
        const char *type = str_of(b, "type"), *text = str_of(b, "text");
        static const char *const tok[] = {"type", "text", "cache_control", "citations", NULL};
        if (!type || strcmp(type, "text") != 0 || !text || other_field(b, tok)) {
            serve_fail(p,
                       "%s.content[%d]: only text blocks {\"type\": \"text\", \"text\"} are "
                       "supported",
                       what, k);
            return NULL;
        }
        len += strlen(text);
    }
    if (!cJSON_IsArray(c)) {
        serve_fail(p, "%s.content must be a string or an array of text blocks", what);
        return NULL;
    }
    char *out = malloc(len + 1);
    size_t at = 0;
    for (const cJSON *b = c->child; out && b; b = b->next) {
        const char *text = str_of(b, "text");
        memcpy(out + at, text, strlen(text));
        at += strlen(text);
    }
    if (out) out[at] = '\0';
    if (!out) serve_fail(p, "out of memory");
    return out;
}

/* ---- /v1/messages: the answer ------------------------------------------------------------ */

cJSON *serve_messages_tool_use_block(const struct server *s, const struct task *t,
                                     const struct recur_tool_calls *tc, size_t k, bool empty) {
    cJSON *calls = serve_tool_calls_json(s, t, 0, tc, false);
    const char *cid = str_of(cJSON_GetArrayItem(calls, (int)k), "id");
    cJSON *j = cid ? cJSON_CreateObject() : NULL;
    if (j) {
        char id[80];
        snprintf(id, sizeof id, "toolu_%s", strncmp(cid, "call_", 5) == 0 ? cid + 5 : cid);
        cJSON_AddStringToObject(j, "type", "tool_use");
        cJSON_AddStringToObject(j, "id", id);
        cJSON_AddStringToObject(j, "name", tc->calls[k].name);
        cJSON *input = empty ? cJSON_CreateObject() : cJSON_Parse(tc->calls[k].arguments);
        cJSON_AddItemToObject(j, "input", input ? input : cJSON_CreateObject());
    }
    cJSON_Delete(calls);
    return j;
}
