/*
 * recur serve: tool calls on /v1/chat/completions (see api.h and docs/serve.md).
 *
 * Request: `tools` (OpenAI's list of {"type": "function", "function": {name, description,
 * parameters}}), rendered into the prompt by the template's tool family (recur.h, "tool
 * calls"); `tool_choice` "auto" (default: text or calls, the calls' grammar applied lazily from
 * the family's call opener on), "none" (the tools are still shown to the model, the answer is
 * text and is not parsed), "required" (a call from the first token) or {"type": "function",
 * "function": {"name"}} (a call of that one); `parallel_tool_calls` (default true: one or more
 * calls, false: one). History: assistant messages with `tool_calls` (content may be null) and
 * `tool` messages (tool_call_id, content); the legacy `function` role (name, content) is a tool
 * result.
 *
 * Answer: the generated text parsed into calls (recur_chat_parse_tool_calls):
 * message.tool_calls [{id "call_...", type "function", function {name, arguments: JSON text}}],
 * content null when there is no other text, finish_reason "tool_calls". Streamed: content
 * deltas stop where a call may begin (the trigger, or the start of it at the end of the text
 * so far); once the choice is finished, one delta holds the rest of the content and the calls
 * (each with its index, id, type and its whole arguments), then the finish chunk.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

/* ---- the history's tool fields ---------------------------------------------------------- */

static const char *str_field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool serve_chat_tool_fields(struct parse *p, const cJSON *m, int i, const char *role,
                            struct recur_chat_tool_message *out) {
    const bool tool = strcmp(role, "tool") == 0, assistant = strcmp(role, "assistant") == 0;
    for (const cJSON *f = m->child; f; f = f->next) {
        const char *k = f->string;
        /* reasoning_content: checked by serve_think_history (reasoning.c) */
        const bool ok = strcmp(k, "role") == 0 || strcmp(k, "content") == 0 ||
                        strcmp(k, "reasoning_content") == 0 ||
                        (strcmp(k, "refusal") == 0 && cJSON_IsNull(f)) ||
                        (tool && (strcmp(k, "tool_call_id") == 0 || strcmp(k, "name") == 0)) ||
                        (assistant && strcmp(k, "tool_calls") == 0);
        if (!ok) {
            serve_fail(p, "\"messages\"[%d].%s is not supported on a %s message", i, k, role);
            return false;
        }
    }
    if (tool) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
        if ((id && !cJSON_IsString(id)) || (name && !cJSON_IsString(name))) {
            serve_fail(p, "\"messages\"[%d].%s must be a string", i,
                       id && !cJSON_IsString(id) ? "tool_call_id" : "name");
            return false;
        }
        out->tool_call_id = str_field(m, "tool_call_id");
        out->name = str_field(m, "name");
        return true;
    }
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!assistant || !calls || cJSON_IsNull(calls)) return true;
    if (!cJSON_IsArray(calls)) {
        serve_fail(p, "\"messages\"[%d].tool_calls must be an array", i);
        return false;
    }
    const int n = cJSON_GetArraySize(calls);
    if (n == 0) return true;
    struct recur_tool_call *v = calloc((size_t)n, sizeof *v);
    if (!v) {
        serve_fail(p, "out of memory");
        return false;
    }
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        const char *name = str_field(fn, "name"), *args = str_field(fn, "arguments");
        if (!cJSON_IsObject(c) ||
            (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "function") == 0))) {
            serve_fail(p, "\"messages\"[%d].tool_calls[%d] must be {\"type\": \"function\", ...}",
                       i, k);
            free(v);
            return false;
        }
        if (!name || !args) {
            serve_fail(p, "\"messages\"[%d].tool_calls[%d].function.%s must be a string", i, k,
                       name ? "arguments" : "name");
            free(v);
            return false;
        }
        cJSON *a = cJSON_Parse(args);
        const bool obj = cJSON_IsObject(a);
        cJSON_Delete(a);
        if (!obj) {
            serve_fail(p,
                       "\"messages\"[%d].tool_calls[%d].function.arguments must be the JSON text "
                       "of an object",
                       i, k);
            free(v);
            return false;
        }
        v[k] = (struct recur_tool_call){str_field(c, "id"), name, args};
    }
    out->tool_calls = v;
    out->n_tool_calls = (size_t)n;
    return true;
}

/* ---- tools, tool_choice, parallel_tool_calls ---------------------------------------------- */

void serve_tools_fail(struct parse *p, const char *err) {
    /* the library names "tools[i]...": the request's field is "tools" */
    if (strncmp(err, "tools", 5) == 0)
        serve_fail(p, "\"tools\"%s", err + 5);
    else
        serve_fail(p, "%s", err);
}

char *serve_tools_text(struct parse *p) {
    const cJSON *tools = serve_field(p, "tools");
    if (!tools) return NULL;
    if (!cJSON_IsArray(tools)) {
        serve_fail(p,
                   "\"tools\" must be an array of {\"type\": \"function\", \"function\": {...}}");
        return NULL;
    }
    if (!tools->child) return NULL;
    char *text = cJSON_PrintUnformatted(tools);
    if (!text) serve_fail(p, "out of memory");
    return text;
}

void serve_tools_setup(struct parse *p, struct server *s, struct task *t, const char *tools,
                       const cJSON *choice, const cJSON *parallel) {
    if (p->bad) return;
    enum recur_tool_choice c = RECUR_TOOL_CHOICE_AUTO;
    const char *fn = NULL;
    bool none = false;
    if (choice && !cJSON_IsNull(choice)) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(choice, "function");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
        if (cJSON_IsString(choice) && strcmp(choice->valuestring, "auto") == 0)
            c = RECUR_TOOL_CHOICE_AUTO;
        else if (cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0)
            none = true;
        else if (cJSON_IsString(choice) && strcmp(choice->valuestring, "required") == 0)
            c = RECUR_TOOL_CHOICE_REQUIRED;
        else if (cJSON_IsObject(choice) && cJSON_IsString(type) &&
                 strcmp(type->valuestring, "function") == 0 && str_field(f, "name")) {
            c = RECUR_TOOL_CHOICE_FUNCTION;
            fn = str_field(f, "name");
        } else {
            serve_fail(p, "\"tool_choice\" must be \"auto\", \"none\", \"required\" or "
                          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
            return;
        }
    }
    if (parallel && !cJSON_IsNull(parallel) && !cJSON_IsBool(parallel)) {
        serve_fail(p, "\"parallel_tool_calls\" must be true or false");
        return;
    }
    const bool par = !parallel || !cJSON_IsFalse(parallel);
    if (!tools) {
        if (c != RECUR_TOOL_CHOICE_AUTO)
            serve_fail(p, "\"tool_choice\" asks for a tool call, but there are no \"tools\"");
        return;
    }
    if (none) return; /* the tools are in the prompt; the answer is text */
    if (t->grammar) {
        serve_fail(p, "\"tools\" cannot be combined with \"grammar\", \"json_schema\" or "
                      "\"response_format\" (unless \"tool_choice\" is \"none\")");
        return;
    }
    const char *tmpl = serve_chat_template(s);
    bool lazy = false;
    char *g = recur_chat_tools_grammar(tmpl, tools, c, fn, par, &lazy);
    if (!g) {
        serve_tools_fail(p, recur_last_error());
        return;
    }
    const char *trig = recur_chat_tool_trigger(tmpl);
    /* a prompt that opened the thought (t->think_open: DeepSeek-R1's distills, Nemotron): a call
       the answer must make comes after the thought, so the grammar waits for its end, as
       llama.cpp's grammars for a thinking_forced_open template do; from the first token it
       would write the call inside the thought, which is reasoning, and no call would be made */
    static const char after_think[] = "\nrecur-after-think ::= \"</think>\" [ \\t\\n]* root\n";
    if (!lazy && t->think_open) {
        const size_t n = strlen(g);
        char *w = realloc(g, n + sizeof after_think);
        if (!w) {
            free(g);
            serve_fail(p, "out of memory");
            return;
        }
        memcpy(w + n, after_think, sizeof after_think);
        g = w;
        t->grammar_root = "recur-after-think";
        trig = "</think>";
        lazy = true;
    }
    /* checked here, so that a schema the grammar cannot take is a 400 */
    struct recur_sampler *check =
        recur_sampler_init_grammar(s->model, g, t->grammar_root ? t->grammar_root : "root");
    if (!check) {
        serve_fail(p, "\"tools\": the calls' grammar: %s", recur_last_error());
        free(g);
        return;
    }
    recur_sampler_free(check);
    t->grammar = g;
    t->tools = true;
    if (lazy && !(t->grammar_trigger = strdup(trig))) serve_fail(p, "out of memory");
}

void serve_tools_field(struct parse *p, struct server *s, struct task *t) {
    char *tools = serve_tools_text(p);
    serve_tools_setup(p, s, t, tools, serve_field(p, "tool_choice"),
                      serve_field(p, "parallel_tool_calls"));
    free(tools);
}

/* ---- the answer ---------------------------------------------------------------------------- */

struct recur_tool_calls *serve_tools_parse(const struct server *s, const struct task *t,
                                           const char *text, size_t len) {
    if (!t->tools) return NULL;
    return recur_chat_parse_tool_calls(serve_chat_template(s), text ? text : "", len);
}

size_t serve_tools_sendable(const struct server *s, const char *text, size_t len) {
    const char *trig = recur_chat_tool_trigger(serve_chat_template(s));
    if (!trig || !text) return len;
    const size_t tl = strlen(trig);
    size_t end = len;
    for (size_t i = 0; i < len; i++) {
        const size_t n = len - i < tl ? len - i : tl;
        if (memcmp(text + i, trig, n) == 0) { /* the trigger, or its start at the end */
            end = i;
            break;
        }
    }
    /* white space before a call is not content (the parser drops it): held until known */
    while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\t' ||
                       text[end - 1] == '\r'))
        end--;
    return end;
}

cJSON *serve_tool_calls_json(const struct server *s, const struct task *t, int choice,
                             const struct recur_tool_calls *tc, bool stream) {
    const char *fam = recur_chat_tool_format(serve_chat_template(s));
    const bool mistral = fam && strncmp(fam, "mistral", 7) == 0; /* and mistral-nemo */
    cJSON *arr = cJSON_CreateArray();
    for (size_t k = 0; arr && k < tc->n_calls; k++) {
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        char id[64];
        /* unique per answer: the task's id, the choice and the call; Mistral's templates want
           9 letters and digits in a history, so those are 9 base-62 digits of the same */
        if (mistral) {
            static const char digits[] =
                "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
            uint64_t v = (t->id * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)choice << 8) ^ k;
            for (int d = 0; d < 9; d++, v /= 62) id[d] = digits[v % 62];
            id[9] = '\0';
        } else {
            snprintf(id, sizeof id, "call_%llx%02x%02x", (unsigned long long)t->id, choice & 0xff,
                     (unsigned)k & 0xff);
        }
        if (stream) cJSON_AddNumberToObject(o, "index", (double)k);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(f, "name", tc->calls[k].name);
        cJSON_AddStringToObject(f, "arguments", tc->calls[k].arguments);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
