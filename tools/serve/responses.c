/*
 * recur serve: OpenAI's Responses API (POST /v1/responses, /v1/responses/input_tokens,
 * GET and DELETE /v1/responses/{id}), as llama-server does it: a Responses request is
 * translated into a chat completion (chat.c renders it, api.c checks it, the decode loop runs
 * it), and the answer is written in the Responses shape, whole or as its typed server-sent
 * events (facts: OpenAI's API reference and the openai npm package's type definitions).
 *
 * The request: input (a string: one user message; or message items {type?: "message", role,
 * content: a string or input_text / output_text parts}, and reasoning items, below); instructions
 * (a system message put first, not carried over by previous_response_id, as OpenAI); roles user,
 * assistant, system, developer (= system, as OpenAI maps it). max_output_tokens, temperature,
 * top_p, stream and text.format (text, json_object, json_schema: the grammar of chat's
 * response_format) are honoured, and tools, tool_choice, parallel_tool_calls with the
 * function_call and function_call_output items (api_tools.c); the fields that cannot change the
 * output are accepted and echoed; the others (background, include of logprobs, conversation, ...)
 * are refused by name (table below).
 *
 * previous_response_id: every finished response (unless store is false) keeps its
 * conversation, the input messages and the answer, in a store bounded by bytes (LRU) and
 * partitioned by API key (a tenant finds only its own). The next request's chat is that
 * conversation then its new input, rendered whole with the template: its text starts with
 * the previous prompt and answer, so the prefix cache restores the state and only the new
 * tokens are decoded (usage.input_tokens_details.cached_tokens counts them).
 *
 * This file: the request, its translation, the handlers; responses_out.c writes the answers,
 * responses_store.c keeps the finished responses.
 *
 * reasoning.effort is accepted at every OpenAI level and changes nothing: recur's chat
 * templates are builtin ones without a reasoning switch, and no reasoning phase is budgeted
 * (as chat's reasoning_effort, fields.c). A model's thought is split from its answer by the
 * server's --reasoning-format (no request field: OpenAI's API has none) and answered as a
 * reasoning item (responses_out.c). Reasoning items in input (a client sending back the
 * previous output) are left out of the prompt where the template leaves out a past reasoning
 * (serve_think_history), refused where it would write one.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "responses.h"

void serve_responses_req_free(struct serve_responses_req *q) {
    if (!q) return;
    cJSON_Delete(q->echo);
    cJSON_Delete(q->conv);
    serve_think_stream_free(&q->think);
    free(q);
}

/* "prefix" and 32 random hex digits into out[48]. */
static bool new_id(char *out, const char *prefix) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) return false;
    int o = snprintf(out, 48, "%s", prefix);
    for (size_t i = 0; i < sizeof b; i++) o += snprintf(out + o, 48 - (size_t)o, "%02x", b[i]);
    return true;
}

/* ---- the request's fields ----------------------------------------------------------------- */

enum rkind {
    R_USED,     /* read below */
    R_HARMLESS, /* cannot change the output: accepted (and echoed where OpenAI does) */
    R_OFF,      /* refused unless null, false, "", [] or {} */
};

static const struct {
    const char *name;
    enum rkind kind;
    const char *why; /* R_OFF: what recur lacks */
} fields[] = {
    {"model", R_HARMLESS, NULL}, /* one model is served, whatever the name */
    {"input", R_USED, NULL},
    {"instructions", R_USED, NULL},
    {"previous_response_id", R_USED, NULL},
    {"max_output_tokens", R_USED, NULL},
    {"temperature", R_USED, NULL},
    {"top_p", R_USED, NULL},
    {"stream", R_USED, NULL},
    {"stream_options", R_USED, NULL},
    {"text", R_USED, NULL},
    {"store", R_USED, NULL},
    {"metadata", R_USED, NULL},
    {"tools", R_USED, NULL},
    {"tool_choice", R_USED, NULL},
    {"reasoning", R_USED, NULL},
    {"include", R_USED, NULL},
    {"truncation", R_USED, NULL},
    {"service_tier", R_USED, NULL},
    {"top_logprobs", R_USED, NULL},
    {"user", R_HARMLESS, NULL},                   /* an end-user id for abuse monitoring */
    {"safety_identifier", R_HARMLESS, NULL},      /* the same */
    {"prompt_cache_key", R_HARMLESS, NULL},       /* routing: recur's cache is keyed by content */
    {"prompt_cache_retention", R_HARMLESS, NULL}, /* recur's cache keeps what room allows */
    {"parallel_tool_calls", R_USED, NULL},
    {"max_tool_calls", R_HARMLESS, NULL}, /* built-in tools' calls: recur has none */
    {"background", R_OFF, "recur answers while the connection is open (no background jobs)"},
    {"conversation", R_OFF, "recur keeps no conversation objects; use previous_response_id"},
    {"prompt", R_OFF, "recur has no stored prompt templates"},
};

static bool is_off(const cJSON *f) {
    return cJSON_IsNull(f) || cJSON_IsFalse(f) || (cJSON_IsString(f) && !f->valuestring[0]) ||
           ((cJSON_IsArray(f) || cJSON_IsObject(f)) && !f->child);
}

static void check_table(struct parse *p) {
    for (const cJSON *f = p->body->child; f && !p->bad; f = f->next) {
        size_t i = 0, n = sizeof fields / sizeof fields[0];
        while (i < n && strcmp(fields[i].name, f->string) != 0) i++;
        if (i == n)
            serve_fail(p, "unknown field \"%s\": /v1/responses does not take it", f->string);
        else if (fields[i].kind == R_OFF && !is_off(f))
            serve_fail(p, "\"%s\" is not supported by recur: %s", f->string, fields[i].why);
    }
}

/* A string field that must be one of ok (NULL-ended) when present. */
static void one_of(struct parse *p, const cJSON *f, const char *name, const char *const *ok) {
    if (p->bad || !f || cJSON_IsNull(f)) return;
    for (int i = 0; ok[i]; i++)
        if (cJSON_IsString(f) && strcmp(f->valuestring, ok[i]) == 0) return;
    char list[160] = "";
    for (int i = 0; ok[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", ok[i]);
    serve_fail(p, "%s must be one of %s", name, list);
}

/* The fields checked for what recur can honour (see the table; tools, tool_choice and
 * parallel_tool_calls: api_tools.c): reasoning, include, truncation, service_tier, top_logprobs,
 * stream_options, store, metadata. */
static void check_options(struct parse *p) {
    const cJSON *rs = serve_field(p, "reasoning");
    if (!p->bad && rs && !cJSON_IsObject(rs)) serve_fail(p, "\"reasoning\" must be an object");
    for (const cJSON *k = rs ? rs->child : NULL; k && !p->bad; k = k->next) {
        static const char *const efforts[] = {"none", "minimal", "low", "medium",
                                              "high", "xhigh",   NULL};
        static const char *const summaries[] = {"auto", "concise", "detailed", NULL};
        if (strcmp(k->string, "effort") == 0)
            one_of(p, k, "\"reasoning\".effort", efforts);
        else if (strcmp(k->string, "summary") == 0 || strcmp(k->string, "generate_summary") == 0)
            one_of(p, k, "\"reasoning\".summary", summaries); /* nothing to summarise */
        else
            serve_fail(p, "\"reasoning\".%s is not supported (only effort and summary)", k->string);
    }
    const cJSON *inc = serve_field(p, "include");
    if (!p->bad && inc && !cJSON_IsArray(inc))
        serve_fail(p, "\"include\" must be an array of strings");
    for (const cJSON *e = inc ? inc->child : NULL; e && !p->bad; e = e->next)
        /* encrypted reasoning: there is no reasoning item to carry it */
        if (!cJSON_IsString(e) || strcmp(e->valuestring, "reasoning.encrypted_content") != 0)
            serve_fail(p,
                       "\"include\": %s%s%s is not supported by recur (only "
                       "\"reasoning.encrypted_content\", which adds nothing here)",
                       cJSON_IsString(e) ? "\"" : "",
                       cJSON_IsString(e) ? e->valuestring : "an entry",
                       cJSON_IsString(e) ? "\"" : "");
    static const char *const trunc[] = {"disabled", NULL}, *const tiers[] = {"auto", "default",
                                                                             NULL};
    one_of(p, serve_field(p, "truncation"), "\"truncation\"", trunc);
    one_of(p, serve_field(p, "service_tier"), "\"service_tier\"", tiers);
    const cJSON *tl = serve_field(p, "top_logprobs");
    if (!p->bad && tl && !(cJSON_IsNumber(tl) && tl->valuedouble == 0))
        serve_fail(p, "\"top_logprobs\" is not supported by recur /v1/responses (only 0)");
    const cJSON *so = serve_field(p, "stream_options");
    if (!p->bad && so && !cJSON_IsObject(so)) serve_fail(p, "\"stream_options\" must be an object");
    for (const cJSON *k = so ? so->child : NULL; k && !p->bad; k = k->next)
        /* obfuscation pads deltas with random characters against side channels: recur adds
           none, and the text is the same either way */
        if (strcmp(k->string, "include_obfuscation") != 0 || !cJSON_IsBool(k))
            serve_fail(p, "\"stream_options\": only \"include_obfuscation\" (true or false) is "
                          "supported");
    const cJSON *store = serve_field(p, "store"), *md = serve_field(p, "metadata");
    if (!p->bad && store && !cJSON_IsBool(store)) serve_fail(p, "\"store\" must be true or false");
    if (!p->bad && md && !cJSON_IsObject(md))
        serve_fail(p, "\"metadata\" must be an object of strings");
    for (const cJSON *k = md ? md->child : NULL; k && !p->bad; k = k->next)
        if (!cJSON_IsString(k)) serve_fail(p, "\"metadata\".%s must be a string", k->string);
}

/* One input item's content: a string, or input_text / output_text parts joined. NULL with p
 * failed. */
static char *content_text(struct parse *p, const cJSON *c, int i) {
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        serve_fail(p, "\"input\"[%d].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t len = 0;
    int k = 0;
    for (const cJSON *part = c->child; part; part = part->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type)) {
            serve_fail(p, "\"input\"[%d].content[%d] must be an object with a \"type\"", i, k);
            return NULL;
        }
        if (strcmp(type->valuestring, "input_text") != 0 &&
            strcmp(type->valuestring, "output_text") != 0) {
            serve_fail(p,
                       "\"input\"[%d].content[%d]: parts of type \"%.40s\" are not supported "
                       "(input_text and output_text only)",
                       i, k, type->valuestring);
            return NULL;
        }
        for (const cJSON *f = part->child; f; f = f->next)
            if (strcmp(f->string, "type") != 0 && strcmp(f->string, "text") != 0 &&
                !(strcmp(f->string, "annotations") == 0 && is_off(f)) &&
                !(strcmp(f->string, "logprobs") == 0 && is_off(f))) {
                serve_fail(p, "\"input\"[%d].content[%d].%s is not supported", i, k, f->string);
                return NULL;
            }
        if (!cJSON_IsString(text)) {
            serve_fail(p, "\"input\"[%d].content[%d].text must be a string", i, k);
            return NULL;
        }
        len += strlen(text->valuestring);
    }
    char *out = malloc(len + 1);
    if (!out) {
        serve_fail(p, "out of memory");
        return NULL;
    }
    size_t o = 0;
    for (const cJSON *part = c->child; part; part = part->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(out + o, t, strlen(t));
        o += strlen(t);
    }
    out[o] = '\0';
    return out;
}

/* Adds {role, content} to msgs (content taken over). */
static void add_message(struct parse *p, cJSON *msgs, const char *role, char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !content || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        serve_fail(p, "out of memory");
    }
    free(content);
}

/* A reasoning item of input: an earlier answer's thought, sent back by a client that keeps the
 * conversation itself ({type: "reasoning", id, summary: [summary_text parts], content:
 * [reasoning_text parts], encrypted_content, status}). Checked; true when it holds a reasoning
 * (some text). The thought is never rendered: take_reasoning checks that leaving it out is
 * what the chat template does. */
static bool reasoning_input(struct parse *p, const cJSON *m, int i) {
    bool any = false;
    for (const cJSON *f = m->child; f && !p->bad; f = f->next) {
        const char *k = f->string;
        if (strcmp(k, "type") == 0 || strcmp(k, "id") == 0 || strcmp(k, "status") == 0) continue;
        if (strcmp(k, "encrypted_content") == 0) {
            if (!cJSON_IsNull(f) && !cJSON_IsString(f))
                serve_fail(p, "\"input\"[%d].encrypted_content must be a string or null", i);
            any = any || (cJSON_IsString(f) && f->valuestring[0]);
            continue;
        }
        const bool summary = strcmp(k, "summary") == 0;
        if (!summary && strcmp(k, "content") != 0) {
            serve_fail(p,
                       "\"input\"[%d].%.40s is not supported (a reasoning item has summary, "
                       "content and encrypted_content)",
                       i, k);
            return false;
        }
        if (cJSON_IsNull(f) && !summary) continue;
        if (!cJSON_IsArray(f)) {
            serve_fail(p, "\"input\"[%d].%s must be an array of %s parts", i, k,
                       summary ? "summary_text" : "reasoning_text");
            return false;
        }
        int n = 0;
        for (const cJSON *part = f->child; part; part = part->next, n++) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(type) ||
                strcmp(type->valuestring, summary ? "summary_text" : "reasoning_text") != 0 ||
                !cJSON_IsString(text) || cJSON_GetArraySize(part) != 2) {
                serve_fail(p, "\"input\"[%d].%s[%d] must be {\"type\": \"%s\", \"text\": string}",
                           i, k, n, summary ? "summary_text" : "reasoning_text");
                return false;
            }
            any = any || text->valuestring[0];
        }
    }
    return any && !p->bad;
}

/* The reasoning item input[i] left out of the prompt, as chat leaves out a past
 * reasoning_content: marked on its assistant message (own: the one just added, whose thought it
 * is; else a new one with an empty content, as chat holds an answer that was all thought) and
 * checked by check_reasonings once the whole chat is read (text: the item has some; an empty
 * one leaves nothing out). */
static void take_reasoning(struct parse *p, cJSON *msgs, int i, bool own, bool text) {
    if (p->bad) return;
    if (!own) add_message(p, msgs, "assistant", strdup(""));
    if (!text) return; /* no thought to leave out */
    cJSON *m = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    if (p->bad || !m || !cJSON_AddStringToObject(m, "reasoning_content", "(reasoning)") ||
        !cJSON_AddNumberToObject(m, "recur_input_index", i))
        serve_fail(p, "out of memory");
}

/* The reasonings of the assistant messages (take_reasoning) checked against the template with
 * the messages after them (serve_think_history: left out where the template leaves out a past
 * reasoning, refused where it would write one, as recur's formats render none), then left
 * out. */
static void check_reasonings(struct parse *p, const char *tmpl, cJSON *msgs) {
    for (cJSON *m = msgs ? msgs->child : NULL; m && !p->bad; m = m->next) {
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(m, "recur_input_index");
        if (!at) continue;
        const char *why = serve_think_history(tmpl, m);
        if (why) serve_fail(p, "\"input\"[%d] (a reasoning item): %s", at->valueint, why);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "reasoning_content");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "recur_input_index");
    }
}

/* input into msgs: a string is one user message; a list, message items. */
static void input_messages(struct parse *p, cJSON *msgs) {
    const cJSON *in = serve_field(p, "input");
    if (p->bad) return;
    if (!in) {
        serve_fail(p, "\"input\" is required");
        return;
    }
    if (cJSON_IsString(in)) {
        add_message(p, msgs, "user", strdup(in->valuestring));
        return;
    }
    if (!cJSON_IsArray(in) || !in->child) {
        serve_fail(p, "\"input\" must be a string or a non-empty array of message items");
        return;
    }
    /* pending: a reasoning item's index, its message not read yet; pending_text: it has text */
    int i = 0, pending = -1;
    bool pending_text = false;
    for (const cJSON *m = in->child; m && !p->bad; m = m->next, i++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
        if (!cJSON_IsObject(m)) {
            serve_fail(p, "\"input\"[%d] must be a message item {role, content}", i);
            return;
        }
        if (cJSON_IsString(type) && strcmp(type->valuestring, "reasoning") == 0) {
            /* several in a row are one turn's (its thought in parts) */
            const bool text = reasoning_input(p, m, i);
            if (p->bad) return;
            if (pending < 0) pending = i;
            pending_text = pending_text || text;
            continue;
        }
        if (cJSON_IsString(type) && (strcmp(type->valuestring, "function_call") == 0 ||
                                     strcmp(type->valuestring, "function_call_output") == 0)) {
            /* a thought before calls is the calling turn's (an assistant message of calls only,
               which the function_call joins) */
            if (pending >= 0) take_reasoning(p, msgs, pending, false, pending_text);
            pending = -1;
            pending_text = false;
        }
        if (serve_responses_tool_item(p, msgs, m, i)) continue; /* calls and their results */
        if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "message") == 0)) {
            serve_fail(p,
                       "\"input\"[%d]: items of type %s%.40s%s are not supported (message, "
                       "reasoning, function_call and function_call_output only)",
                       i, cJSON_IsString(type) ? "\"" : "",
                       cJSON_IsString(type) ? type->valuestring : "(not a string)",
                       cJSON_IsString(type) ? "\"" : "");
            return;
        }
        /* id and status: what an output item passed back carries; they change nothing */
        for (const cJSON *f = m->child; f; f = f->next)
            if (strcmp(f->string, "type") != 0 && strcmp(f->string, "role") != 0 &&
                strcmp(f->string, "content") != 0 && strcmp(f->string, "id") != 0 &&
                strcmp(f->string, "status") != 0) {
                serve_fail(p, "\"input\"[%d].%s is not supported (only role and content)", i,
                           f->string);
                return;
            }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "developer") == 0) r = "system";
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
            serve_fail(p,
                       "\"input\"[%d].role must be \"user\", \"assistant\", \"system\" or "
                       "\"developer\"",
                       i);
            return;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!content) {
            serve_fail(p, "\"input\"[%d].content is required", i);
            return;
        }
        const bool assistant = strcmp(r, "assistant") == 0;
        if (pending >= 0 && !assistant) { /* a thought with no answer: a turn of its own */
            take_reasoning(p, msgs, pending, false, pending_text);
            pending = -1;
        }
        char *text = content_text(p, content, i);
        if (text) add_message(p, msgs, r, text);
        if (pending >= 0) /* the reasoning of this answer */
            take_reasoning(p, msgs, pending, true, pending_text);
        pending = -1;
        pending_text = false;
    }
    if (pending >= 0) take_reasoning(p, msgs, pending, false, pending_text);
}

/* text: {format: {type: text | json_object | json_schema, ...}, verbosity} into chat's
 * response_format (added to chat); the format as echoed into *format (a copy). */
static void text_field(struct parse *p, cJSON *chat, cJSON **format) {
    const cJSON *text = serve_field(p, "text");
    *format = NULL;
    if (p->bad || !text) return;
    if (!cJSON_IsObject(text)) {
        serve_fail(p, "\"text\" must be an object {format, verbosity}");
        return;
    }
    for (const cJSON *k = text->child; k; k = k->next)
        if (strcmp(k->string, "format") != 0 && strcmp(k->string, "verbosity") != 0) {
            serve_fail(p, "\"text\".%s is not supported (only format and verbosity)", k->string);
            return;
        }
    /* verbosity steers OpenAI's reasoning models; recur has no such switch: the default only */
    static const char *const verbosity[] = {"medium", NULL};
    one_of(p, cJSON_GetObjectItemCaseSensitive(text, "verbosity"), "\"text\".verbosity", verbosity);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(text, "format");
    if (p->bad || !f || cJSON_IsNull(f)) return;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type)) {
        serve_fail(p, "\"text\".format must be an object with a \"type\"");
        return;
    }
    const char *ty = type->valuestring;
    cJSON *rf = cJSON_CreateObject();
    if (!rf || !cJSON_AddItemToObject(chat, "response_format", rf)) {
        cJSON_Delete(rf);
        serve_fail(p, "out of memory");
        return;
    }
    cJSON_AddStringToObject(rf, "type", ty);
    if (strcmp(ty, "text") == 0 || strcmp(ty, "json_object") == 0) {
        if (cJSON_GetArraySize(f) != 1) {
            serve_fail(p, "\"text\".format of type \"%s\" takes no other field", ty);
            return;
        }
    } else if (strcmp(ty, "json_schema") == 0) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(f, "schema");
        for (const cJSON *k = f->child; k; k = k->next)
            if (strcmp(k->string, "type") != 0 && strcmp(k->string, "name") != 0 &&
                strcmp(k->string, "schema") != 0 && strcmp(k->string, "strict") != 0 &&
                strcmp(k->string, "description") != 0) {
                serve_fail(p, "\"text\".format.%s is not supported", k->string);
                return;
            }
        if (!cJSON_IsString(name)) {
            serve_fail(p, "\"text\".format.name is required (a string) for type json_schema");
            return;
        }
        if (!cJSON_IsObject(schema)) {
            serve_fail(p, "\"text\".format.schema must be a JSON schema object");
            return;
        }
        /* strict or not, the output follows the schema: the grammar allows nothing else */
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        if (!js || !cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true))) {
            serve_fail(p, "out of memory");
            return;
        }
    } else {
        serve_fail(p,
                   "\"text\".format.type \"%.40s\" is not one of \"text\", \"json_object\", "
                   "\"json_schema\"",
                   ty);
        return;
    }
    if (!(*format = cJSON_Duplicate(f, true))) serve_fail(p, "out of memory");
}

/* Copies body's field name into to as to_name (null when absent), or def when absent. */
static void echo_field(cJSON *to, const cJSON *body, const char *name, cJSON *def) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(body, name);
    cJSON *v = f && !cJSON_IsNull(f) ? cJSON_Duplicate(f, true) : def ? def : cJSON_CreateNull();
    if (f && !cJSON_IsNull(f)) cJSON_Delete(def);
    if (!v || !cJSON_AddItemToObject(to, name, v)) cJSON_Delete(v);
}

/* The chat completion body of a Responses body (NULL with p failed), and the request's
 * Responses settings into *qp (NULL when count: input_tokens needs only the chat). */
static cJSON *translate(struct parse *p, struct server *s, uint64_t tenant,
                        struct serve_responses_req **qp, bool count) {
    *qp = NULL;
    if (!cJSON_IsObject(p->body)) serve_fail(p, "the body must be a JSON object");
    if (p->bad) return NULL;
    check_table(p);
    check_options(p);
    cJSON *chat = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(chat, "messages");
    cJSON *format = NULL, *prev_conv = NULL;
    if (!msgs) serve_fail(p, "out of memory");
    /* the settings chat checks the same way, under the same names */
    static const char *const same[] = {"temperature", "top_p", "stream"};
    for (size_t i = 0; i < sizeof same / sizeof same[0] && !p->bad; i++) {
        const cJSON *f = serve_field(p, same[i]);
        if (f && !cJSON_AddItemToObject(chat, same[i], cJSON_Duplicate(f, true)))
            serve_fail(p, "out of memory");
    }
    const cJSON *mot = serve_field(p, "max_output_tokens");
    if (!p->bad && mot &&
        !(cJSON_IsNumber(mot) && mot->valuedouble >= 1 && mot->valuedouble <= s->lim.max_tokens &&
          mot->valuedouble == floor(mot->valuedouble)))
        serve_fail(p, "\"max_output_tokens\" must be an integer from 1 to %d", s->lim.max_tokens);
    if (!p->bad && mot) cJSON_AddNumberToObject(chat, "max_completion_tokens", mot->valuedouble);
    /* instructions first, then the previous conversation, then the new input */
    const cJSON *ins = serve_field(p, "instructions");
    if (!p->bad && ins && !cJSON_IsString(ins)) serve_fail(p, "\"instructions\" must be a string");
    if (!p->bad && ins) add_message(p, msgs, "system", strdup(ins->valuestring));
    const int n_ins = ins ? 1 : 0;
    const cJSON *prev = serve_field(p, "previous_response_id");
    if (!p->bad && prev && !cJSON_IsString(prev))
        serve_fail(p, "\"previous_response_id\" must be a string");
    if (!p->bad && prev) {
        char *text = serve_responses_lookup(s->responses, tenant, prev->valuestring, true);
        if (!text || !(prev_conv = cJSON_Parse(text)))
            serve_fail(p, "Previous response with id '%.64s' not found.", prev->valuestring);
        free(text);
        for (const cJSON *m = prev_conv ? prev_conv->child : NULL; m && !p->bad; m = m->next)
            if (!cJSON_AddItemToArray(msgs, cJSON_Duplicate(m, true)))
                serve_fail(p, "out of memory");
    }
    input_messages(p, msgs);
    check_reasonings(p, serve_chat_template(s), msgs);
    serve_responses_tools(p, chat); /* api_tools.c */
    text_field(p, chat, &format);   /* input_tokens too: the same body is checked the same way */
    struct serve_responses_req *q = NULL;
    if (!p->bad && !count) {
        q = calloc(1, sizeof *q);
        if (!q || !new_id(q->id, "resp_") || !new_id(q->msg_id, "msg_") ||
            !new_id(q->rs_id, "rs_")) {
            serve_fail(p, "out of memory or no random numbers for the response's id");
        } else {
            q->created_at = (double)time(NULL);
            const cJSON *store = serve_field(p, "store");
            q->store = !store || cJSON_IsTrue(store);
            /* the conversation to keep: the messages after the instructions */
            q->conv = cJSON_CreateArray();
            int k = 0;
            for (const cJSON *m = msgs->child; m && q->conv; m = m->next, k++)
                if (k >= n_ins) cJSON_AddItemToArray(q->conv, cJSON_Duplicate(m, true));
            /* the settings echoed, in the order of OpenAI's response object */
            cJSON *e = q->echo = cJSON_CreateObject();
            if (!q->conv || !e) serve_fail(p, "out of memory");
            const cJSON *b = p->body;
            echo_field(e, b, "instructions", NULL);
            echo_field(e, b, "max_output_tokens", NULL);
            echo_field(e, b, "max_tool_calls", NULL);
            cJSON_AddStringToObject(e, "model", s->model_name ? s->model_name : "");
            echo_field(e, b, "parallel_tool_calls", cJSON_CreateTrue());
            echo_field(e, b, "previous_response_id", NULL);
            echo_field(e, b, "prompt_cache_key", NULL);
            cJSON *rs = cJSON_CreateObject();
            const cJSON *rin = serve_field(p, "reasoning");
            echo_field(rs, rin, "effort", NULL);
            echo_field(rs, rin, "summary", NULL);
            cJSON_AddItemToObject(e, "reasoning", rs);
            echo_field(e, b, "safety_identifier", NULL);
            echo_field(e, b, "service_tier", cJSON_CreateString("default"));
            cJSON_AddBoolToObject(e, "store", q->store);
            echo_field(e, b, "temperature", cJSON_CreateNumber(1));
            cJSON *tx = cJSON_AddObjectToObject(e, "text");
            cJSON *fmt = format ? format : cJSON_CreateObject();
            if (!format) cJSON_AddStringToObject(fmt, "type", "text");
            format = NULL;
            cJSON_AddItemToObject(tx, "format", fmt);
            cJSON_AddStringToObject(tx, "verbosity", "medium");
            echo_field(e, b, "tool_choice", cJSON_CreateString("auto"));
            echo_field(e, b, "tools", cJSON_CreateArray());
            cJSON_AddNumberToObject(e, "top_logprobs", 0);
            echo_field(e, b, "top_p", cJSON_CreateNumber(1));
            cJSON_AddStringToObject(e, "truncation", "disabled");
            echo_field(e, b, "user", NULL);
            echo_field(e, b, "metadata", cJSON_CreateObject());
        }
    }
    cJSON_Delete(format);
    cJSON_Delete(prev_conv);
    if (p->bad) {
        serve_responses_req_free(q);
        cJSON_Delete(chat);
        return NULL;
    }
    *qp = q;
    return chat;
}

/* OpenAI's error shape, with its code and param (previous_response_not_found). */
static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *msg,
                                  const char *code, const char *param) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", "invalid_request_error");
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNumberToObject(e, "code", status);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, status, "application/json", text, NULL);
}

static enum MHD_Result send_parse_error(struct MHD_Connection *conn, const struct parse *p) {
    if (strncmp(p->msg, "Previous response with id", 25) == 0)
        return send_error(conn, 400, p->msg, "previous_response_not_found", "previous_response_id");
    return serve_send_error(conn, 400, "invalid_request_error", p->msg);
}

enum MHD_Result serve_responses_create(struct server *s, struct MHD_Connection *conn,
                                       const struct serve_req *rq) {
    struct parse p = {rq->body, "", false, 0};
    struct serve_responses_req *q = NULL;
    cJSON *chat = translate(&p, s, rq->tenant, &q, false);
    if (!chat) return send_parse_error(conn, &p);
    struct serve_req crq = *rq;
    crq.body = chat;
    enum MHD_Result answered;
    struct serve_request *r = serve_request_new(s, conn, &crq, API_CHAT, &answered);
    cJSON_Delete(chat);
    if (!r) {
        serve_responses_req_free(q);
        return answered;
    }
    r->api = API_RESPONSES;
    for (int i = 0; i < r->n_tasks; i++) {
        r->tasks[i]->api = API_RESPONSES;
        /* the reasoning has its own output item: deepseek-legacy's tagged stream is chat's */
        if (r->tasks[i]->reasoning == SERVE_REASONING_DEEPSEEK_LEGACY)
            r->tasks[i]->reasoning = SERVE_REASONING_DEEPSEEK;
    }
    r->resp = q;
    return serve_answer(s, conn, r, rq->cont);
}

enum MHD_Result serve_responses_input_tokens(struct server *s, struct MHD_Connection *conn,
                                             const struct serve_req *rq) {
    struct parse p = {rq->body, "", false, 0};
    struct serve_responses_req *q = NULL;
    cJSON *chat = translate(&p, s, rq->tenant, &q, true);
    if (!chat) return send_parse_error(conn, &p);
    struct serve_req crq = *rq;
    crq.body = chat;
    const enum MHD_Result ret = serve_handle_chat_prompt(s, conn, &crq, true);
    cJSON_Delete(chat);
    return ret;
}

enum MHD_Result serve_responses_stored(struct server *s, struct MHD_Connection *conn,
                                       const struct serve_req *rq) {
    const char *id = rq->url + strlen("/v1/responses/");
    char msg[160];
    snprintf(msg, sizeof msg, "Response with id '%.64s' not found.", id);
    if (rq->method && strcmp(rq->method, "DELETE") == 0) {
        if (!serve_responses_forget(s->responses, rq->tenant, id))
            return send_error(conn, 404, msg, NULL, NULL);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "id", id);
        cJSON_AddStringToObject(j, "object", "response");
        cJSON_AddBoolToObject(j, "deleted", true);
        return serve_send_json(conn, 200, j);
    }
    char *text = serve_responses_lookup(s->responses, rq->tenant, id, false);
    if (!text) return send_error(conn, 404, msg, NULL, NULL);
    return serve_send_text(conn, 200, "application/json", text, NULL);
}
