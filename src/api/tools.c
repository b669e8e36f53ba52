/*
 * chat tools: chats with tools, tool calls and tool results rendered (see tools.h and
 * include/recur.h, "tool calls").
 *
 * No Jinja is run: a chat with tools is turned into plain system / user / assistant messages
 * whose contents hold the family's tool markup (the way the family's real template writes it),
 * and those are rendered by the template's chat format (chat.c). The texts that came from the
 * caller (contents, names, arguments, the tools' JSON) are recorded as sub-spans of each plain
 * message, so that they are tokenized as plain text while the markup may be special tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

#include "recur.h"

#include "../core/core.h"
#include "../chat/chat.h"

/* ---- families ------------------------------------------------------------------------ */

struct family {
    const char *name;
    const char *markers[4]; /* all in the template's text (NULL-terminated; none: never) */
    const char *trigger;
};

static const struct family families[RTOOLS_N] = {
    [RTOOLS_GENERIC] = {"generic", {NULL}, "{\"tool_calls\""},
    /* Qwen 2.5 and Qwen 3: the "# Tools" block. Hermes 2 Pro / 3 write their tools in another
     * prose (with Python signatures) and are not this family. */
    [RTOOLS_HERMES] = {"hermes",
                       {"<|im_start|>", "<tool_call>",
                        "You may call one or more functions to assist with the user query.", NULL},
                       "<tool_call>"},
    /* Granite 4.0 / 4.1: <tool_call> as hermes, their own words around the tools (Granite
     * 3.x's <|tool_call|> lists are not this family) */
    [RTOOLS_GRANITE] = {"granite",
                        {"<|start_of_role|>", "<tool_call>",
                         "You are a helpful assistant with access to the following tools.", NULL},
                        "<tool_call>"},
    /* Mistral Small 3.2 (with [CALL_ID]) and Devstral (without) */
    [RTOOLS_MISTRAL] = {"mistral",
                        {"[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]", NULL},
                        "[TOOL_CALLS]"},
    /* Mistral Nemo (mistral-v3-tekken's [INST] blocks) */
    [RTOOLS_NEMO] = {"mistral-nemo",
                     {"[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "\"call_id\": ", NULL},
                     "[TOOL_CALLS]"},
    /* Llama 3.1 / 3.2 / 3.3: JSON calls with "parameters", results in "ipython" turns */
    [RTOOLS_LLAMA3] = {"llama3",
                       {"<|start_header_id|>", "ipython", "\"parameters\": ", NULL},
                       "{\"name\""},
};

enum rtools_family rtools_family(const char *tmpl) {
    for (int f = 0; f < RTOOLS_N; f++) {
        if (!families[f].markers[0]) continue;
        bool all = true;
        for (int k = 0; all && families[f].markers[k]; k++)
            all = strstr(tmpl, families[f].markers[k]) != NULL;
        if (all) return (enum rtools_family)f;
    }
    return RTOOLS_GENERIC;
}

const char *rtools_family_name(enum rtools_family f) {
    return families[f].name;
}

const char *rtools_trigger(enum rtools_family f) {
    return families[f].trigger;
}

const char *recur_chat_tool_format(const char *tmpl) {
    if (rchat_find(tmpl) < 0) return NULL;
    return families[rtools_family(tmpl)].name;
}

const char *recur_chat_tool_trigger(const char *tmpl) {
    if (rchat_find(tmpl) < 0) return NULL;
    return families[rtools_family(tmpl)].trigger;
}

/* ---- plain messages ------------------------------------------------------------------ */

#define QWEN_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

struct sub {
    size_t off, len;
};

/* A plain message being written: its text and the caller's texts inside it. */
struct pmsg {
    const char *role;
    struct rcore_buf text;
    struct sub *subs;
    size_t n_subs, cap_subs;
};

struct plain {
    struct pmsg *m;
    size_t n, cap;
    bool oom;
};

static struct pmsg *add_msg(struct plain *pl, const char *role) {
    if (pl->n == pl->cap) {
        size_t cap = pl->cap ? pl->cap * 2 : 16;
        struct pmsg *m = realloc(pl->m, cap * sizeof *m);
        if (!m) {
            pl->oom = true;
            return NULL;
        }
        pl->m = m;
        pl->cap = cap;
    }
    struct pmsg *m = &pl->m[pl->n++];
    *m = (struct pmsg){.role = role};
    return m;
}

static void markup(struct pmsg *m, const char *s) {
    rcore_buf_puts(&m->text, s);
}

/* the caller's text s[0..n), recorded as a sub-span */
static void put_user(struct plain *pl, struct pmsg *m, const char *s, size_t n) {
    if (m->n_subs == m->cap_subs) {
        size_t cap = m->cap_subs ? m->cap_subs * 2 : 8;
        struct sub *u = realloc(m->subs, cap * sizeof *u);
        if (!u) {
            pl->oom = true;
            return;
        }
        m->subs = u;
        m->cap_subs = cap;
    }
    m->subs[m->n_subs++] = (struct sub){m->text.len, n};
    rcore_buf_add(&m->text, s, n);
}

static void user_text(struct plain *pl, struct pmsg *m, const char *s) {
    if (s) put_user(pl, m, s, strlen(s));
}

static void user_json(struct plain *pl, struct pmsg *m, const cJSON *v, int indent) {
    struct rcore_buf b = {0};
    if (!rtools_dump(&b, v, indent))
        pl->oom = true;
    else
        put_user(pl, m, b.p ? b.p : "", b.len);
    rcore_buf_free(&b);
}

static void plain_free(struct plain *pl) {
    for (size_t i = 0; i < pl->n; i++) {
        rcore_buf_free(&pl->m[i].text);
        free(pl->m[i].subs);
    }
    free(pl->m);
}

/* A call's arguments, parsed (the caller deletes them); NULL with the error set. */
static cJSON *call_args(const struct recur_chat_tool_message *msg, size_t i, size_t k) {
    const struct recur_tool_call *c = &msg->tool_calls[k];
    if (!c->name || !c->arguments) {
        rcore_error_set("chat message %zu: tool call %zu has a NULL %s", i, k,
                        c->name ? "arguments" : "name");
        return NULL;
    }
    cJSON *a = cJSON_Parse(c->arguments);
    if (!cJSON_IsObject(a)) {
        cJSON_Delete(a);
        rcore_error_set("chat message %zu: tool call %zu (\"%s\"): the arguments are not a JSON "
                        "object",
                        i, k, c->name);
        return NULL;
    }
    return a;
}

/* ---- hermes (Qwen 2.5 / Qwen 3) ------------------------------------------------------ */

/* The words around the tools and how results open: Qwen's, and Granite 4's (whose user turn
 * has no new line after its role, so each result opens with one). */
struct hermes_style {
    const char *head, *tail;
    bool result_nl; /* every result opens with "\n" (else all but the first) */
};

static const struct hermes_style qwen_style = {
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>",
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    false};

static const struct hermes_style granite_style = {
    "You are a helpful assistant with access to the following tools. You may call one or more "
    "tools to assist with the user query.\n\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\n<tools>",
    "\n</tools>\n\nFor each tool call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>. If a tool does not exist in the "
    "provided list of tools, notify the user that you do not have the ability to fulfill the "
    "request.",
    true};

static bool hermes(struct plain *pl, const char *tmpl, const struct recur_chat_tool_message *chat,
                   size_t n, const cJSON *tools, const struct hermes_style *st) {
    size_t from = 0;
    if (tools && tools->child) {
        struct pmsg *m = add_msg(pl, "system");
        if (!m) return false;
        const bool has_sys = n > 0 && strcmp(chat[0].role, "system") == 0;
        if (has_sys) {
            user_text(pl, m, chat[0].content ? chat[0].content : "");
            from = 1;
        } else if (strstr(tmpl, QWEN_DEFAULT_SYSTEM)) {
            markup(m, QWEN_DEFAULT_SYSTEM);
        }
        if (has_sys || strstr(tmpl, QWEN_DEFAULT_SYSTEM)) markup(m, "\n\n");
        markup(m, st->head);
        for (const cJSON *t = tools->child; t; t = t->next) {
            markup(m, "\n");
            user_json(pl, m, t, -1);
        }
        markup(m, st->tail);
    }
    for (size_t i = from; i < n; i++) {
        const struct recur_chat_tool_message *msg = &chat[i];
        if (strcmp(msg->role, "tool") == 0) {
            struct pmsg *m = add_msg(pl, "user");
            if (!m) return false;
            for (; i < n && strcmp(chat[i].role, "tool") == 0; i++) {
                markup(m,
                       m->text.len || st->result_nl ? "\n<tool_response>\n" : "<tool_response>\n");
                user_text(pl, m, chat[i].content ? chat[i].content : "");
                markup(m, "\n</tool_response>");
            }
            i--;
            continue;
        }
        struct pmsg *m = add_msg(pl, msg->role);
        if (!m) return false;
        user_text(pl, m, msg->content ? msg->content : "");
        for (size_t k = 0; k < msg->n_tool_calls; k++) {
            cJSON *a = call_args(msg, i, k);
            if (!a) return false;
            markup(m, m->text.len ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"");
            user_text(pl, m, msg->tool_calls[k].name);
            markup(m, "\", \"arguments\": ");
            user_json(pl, m, a, -1);
            markup(m, "}\n</tool_call>");
            cJSON_Delete(a);
        }
    }
    return true;
}

/* ---- llama3 (Llama 3.1 / 3.2 / 3.3) ----------------------------------------------------- */

/* The real templates' words (tools_in_user_message, their default). The date header they
 * write is not recur's to know (as without tools): the caller's system text carries it. */
static const char llama3_env[] = "Environment: ipython\n";
static const char llama3_user_head[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.Do not use variables.\n\n";

static bool llama3(struct plain *pl, const struct recur_chat_tool_message *chat, size_t n,
                   const cJSON *tools) {
    size_t from = 0;
    const bool with = tools && tools->child;
    if (with) {
        struct pmsg *m = add_msg(pl, "system");
        if (!m) return false;
        markup(m, llama3_env);
        if (n > 0 && strcmp(chat[0].role, "system") == 0) {
            user_text(pl, m, chat[0].content ? chat[0].content : "");
            from = 1;
        }
        if (from >= n) {
            rcore_error_set("chat template llama3: the tools go into the first user message, "
                            "and there is none");
            return false;
        }
        m = add_msg(pl, "user");
        if (!m) return false;
        markup(m, llama3_user_head);
        for (const cJSON *t = tools->child; t; t = t->next) {
            user_json(pl, m, t, 4);
            markup(m, "\n\n");
        }
        /* the template trims this message alone: its white space is cut here */
        const char *c = chat[from].content ? chat[from].content : "";
        size_t len = strlen(c);
        while (len && strchr(" \t\n\r", c[len - 1])) len--;
        while (len && strchr(" \t\n\r", *c)) c++, len--;
        put_user(pl, m, c, len);
        from++;
    }
    for (size_t i = from; i < n; i++) {
        const struct recur_chat_tool_message *msg = &chat[i];
        if (strcmp(msg->role, "tool") == 0) {
            /* an ipython turn: written inside the previous message's text, whose end closes
               it (the format has no such role) */
            struct pmsg *m = pl->n ? &pl->m[pl->n - 1] : NULL;
            if (!m || strcmp(m->role, "assistant") != 0) {
                rcore_error_set("chat template llama3: message %zu: a tool result must follow "
                                "an assistant message",
                                i);
                return false;
            }
            markup(m, "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n");
            /* the template writes a string result with tojson (a string is "iterable" to
               Jinja): quoted */
            cJSON *c = cJSON_CreateString(msg->content ? msg->content : "");
            if (!c) {
                pl->oom = true;
                return false;
            }
            user_json(pl, m, c, -1);
            cJSON_Delete(c);
            continue;
        }
        struct pmsg *m = add_msg(pl, msg->role);
        if (!m) return false;
        if (msg->n_tool_calls == 0) {
            user_text(pl, m, msg->content ? msg->content : "");
            continue;
        }
        if (msg->n_tool_calls > 1) {
            rcore_error_set("chat template llama3: message %zu has %zu tool calls; the format "
                            "takes one a message",
                            i, msg->n_tool_calls);
            return false;
        }
        cJSON *a = call_args(msg, i, 0);
        if (!a) return false;
        markup(m, "{\"name\": \"");
        user_text(pl, m, msg->tool_calls[0].name);
        markup(m, "\", \"parameters\": ");
        user_json(pl, m, a, -1);
        markup(m, "}");
        cJSON_Delete(a);
    }
    return true;
}

/* ---- mistral (Small 3.2, Devstral) -------------------------------------------------------- */

/* Written between turns (the format's raw role): the tools, the results. */
static struct pmsg *add_raw(struct plain *pl) {
    return add_msg(pl, rchat_raw_role);
}

static bool mistral(struct plain *pl, const char *tmpl, const struct recur_chat_tool_message *chat,
                    size_t n, const cJSON *tools) {
    /* Small 3.2 writes call ids and the tools before the last user message; Devstral writes
       no ids and the tools after the system prompt */
    const bool ids = strstr(tmpl, "[CALL_ID]") != NULL;
    const bool with = tools && tools->child;
    size_t last_user = n;
    for (size_t i = 0; i < n; i++)
        if (strcmp(chat[i].role, "user") == 0) last_user = i;
    for (size_t i = 0; i < n; i++) {
        const struct recur_chat_tool_message *msg = &chat[i];
        const bool tools_here =
            with && (ids ? i == last_user : i == (strcmp(chat[0].role, "system") == 0 ? 1 : 0));
        if (tools_here) {
            struct pmsg *m = add_raw(pl);
            if (!m) return false;
            markup(m, "[AVAILABLE_TOOLS]");
            user_json(pl, m, tools, -1);
            markup(m, "[/AVAILABLE_TOOLS]");
        }
        if (strcmp(msg->role, "tool") == 0) {
            struct pmsg *m = add_raw(pl);
            if (!m) return false;
            markup(m, "[TOOL_RESULTS]");
            if (ids) {
                user_text(pl, m, msg->tool_call_id ? msg->tool_call_id : "");
                markup(m, "[TOOL_CONTENT]");
            }
            user_text(pl, m, msg->content ? msg->content : "");
            markup(m, "[/TOOL_RESULTS]");
            continue;
        }
        struct pmsg *m = add_msg(pl, msg->role);
        if (!m) return false;
        /* Small 3.2 drops the text of a message with calls */
        if (!(ids && msg->n_tool_calls)) user_text(pl, m, msg->content ? msg->content : "");
        for (size_t k = 0; k < msg->n_tool_calls; k++) {
            cJSON *a = call_args(msg, i, k);
            if (!a) return false;
            markup(m, "[TOOL_CALLS]");
            user_text(pl, m, msg->tool_calls[k].name);
            if (ids) {
                markup(m, "[CALL_ID]");
                user_text(pl, m, msg->tool_calls[k].id ? msg->tool_calls[k].id : "");
            }
            markup(m, "[ARGS]");
            user_json(pl, m, a, -1);
            cJSON_Delete(a);
        }
    }
    if (with && !ids && n == (n > 0 && strcmp(chat[0].role, "system") == 0 ? 1u : 0u)) {
        struct pmsg *m = add_raw(pl); /* a chat of a system prompt alone */
        if (!m) return false;
        markup(m, "[AVAILABLE_TOOLS]");
        user_json(pl, m, tools, -1);
        markup(m, "[/AVAILABLE_TOOLS]");
    }
    return true;
}

/* ---- mistral nemo -------------------------------------------------------------------------- */

/* The tools as Nemo's template writes them: each function's fields in order ("return" left
 * out), a string value quoted as it is (the template does not escape it), others as JSON. */
static void nemo_tools(struct plain *pl, struct pmsg *m, const cJSON *tools) {
    markup(m, "[AVAILABLE_TOOLS][");
    for (const cJSON *t = tools->child; t; t = t->next) {
        markup(m, "{\"type\": \"function\", \"function\": {");
        bool first = true;
        for (const cJSON *f = rtools_function(t)->child; f; f = f->next) {
            if (strcmp(f->string, "return") == 0) continue;
            markup(m, first ? "\"" : ", \"");
            first = false;
            user_text(pl, m, f->string);
            markup(m, "\": ");
            if (cJSON_IsString(f)) {
                markup(m, "\"");
                user_text(pl, m, f->valuestring);
                markup(m, "\"");
            } else {
                user_json(pl, m, f, -1);
            }
        }
        markup(m, t->next ? "}}, " : "}}");
    }
    markup(m, "][/AVAILABLE_TOOLS]");
}

static bool nemo(struct plain *pl, const struct recur_chat_tool_message *chat, size_t n,
                 const cJSON *tools) {
    /* the tools go before the [INST] block of the last user message: the block opens at the
       first message after an assistant's or a result */
    size_t at = n;
    for (size_t i = 0; i < n; i++)
        if (strcmp(chat[i].role, "user") == 0) at = i;
    while (at < n && at > 0 &&
           (strcmp(chat[at - 1].role, "user") == 0 || strcmp(chat[at - 1].role, "system") == 0))
        at--;
    for (size_t i = 0; i < n; i++) {
        const struct recur_chat_tool_message *msg = &chat[i];
        if (i == at && tools && tools->child) {
            struct pmsg *m = add_raw(pl);
            if (!m) return false;
            nemo_tools(pl, m, tools);
        }
        if (strcmp(msg->role, "tool") == 0) {
            struct pmsg *m = add_raw(pl);
            if (!m) return false;
            markup(m, "[TOOL_RESULTS]{\"content\": ");
            user_text(pl, m, msg->content ? msg->content : "");
            markup(m, ", \"call_id\": \"");
            user_text(pl, m, msg->tool_call_id ? msg->tool_call_id : "");
            markup(m, "\"}[/TOOL_RESULTS]");
            continue;
        }
        /* an assistant message after a result is written as is, with its end: the format
           would open an [INST] block before it (its block ended with the calls) */
        const bool after_result =
            strcmp(msg->role, "assistant") == 0 && i > 0 && strcmp(chat[i - 1].role, "tool") == 0;
        struct pmsg *m = after_result ? add_raw(pl) : add_msg(pl, msg->role);
        if (!m) return false;
        if (msg->n_tool_calls == 0) {
            user_text(pl, m, msg->content ? msg->content : "");
            if (after_result) markup(m, "</s>");
            continue;
        }
        markup(m, "[TOOL_CALLS][");
        for (size_t k = 0; k < msg->n_tool_calls; k++) {
            cJSON *a = call_args(msg, i, k);
            if (!a) return false;
            markup(m, k ? ", {\"name\": " : "{\"name\": ");
            cJSON *nm = cJSON_CreateString(msg->tool_calls[k].name);
            if (nm) user_json(pl, m, nm, -1);
            cJSON_Delete(nm);
            markup(m, ", \"arguments\": ");
            user_json(pl, m, a, -1);
            markup(m, ", \"id\": \"");
            user_text(pl, m, msg->tool_calls[k].id ? msg->tool_calls[k].id : "");
            markup(m, "\"}");
            cJSON_Delete(a);
        }
        markup(m, after_result ? "]</s>" : "]");
    }
    return true;
}

/* ---- generic ----------------------------------------------------------------------------- */

static const char generic_head[] = "You can call tools. The tools (name, description and the JSON "
                                   "schema of the arguments):\n";
static const char generic_tail[] =
    "\n\nTo call tools, answer with only a JSON object: {\"tool_calls\": [{\"name\": <tool "
    "name>, \"arguments\": <arguments object>}]} (several calls in the list to call several "
    "tools at once). Otherwise, answer in plain text.";

static bool generic(struct plain *pl, const struct recur_chat_tool_message *chat, size_t n,
                    const cJSON *tools) {
    size_t from = 0;
    if (tools && tools->child) {
        struct pmsg *m = add_msg(pl, "system");
        if (!m) return false;
        if (n > 0 && strcmp(chat[0].role, "system") == 0) {
            from = 1;
            if (chat[0].content && chat[0].content[0]) {
                user_text(pl, m, chat[0].content);
                markup(m, "\n\n");
            }
        }
        cJSON *list = cJSON_CreateArray();
        for (const cJSON *t = tools->child; list && t; t = t->next) {
            cJSON *f = cJSON_Duplicate(rtools_function(t), true);
            if (!f || !cJSON_AddItemToArray(list, f)) {
                cJSON_Delete(f);
                cJSON_Delete(list);
                list = NULL;
            }
        }
        if (!list) {
            pl->oom = true;
            return false;
        }
        markup(m, generic_head);
        user_json(pl, m, list, 2);
        markup(m, generic_tail);
        cJSON_Delete(list);
    }
    for (size_t i = from; i < n; i++) {
        const struct recur_chat_tool_message *msg = &chat[i];
        const bool tool = strcmp(msg->role, "tool") == 0;
        struct pmsg *m = add_msg(pl, tool ? "user" : msg->role);
        if (!m) return false;
        if (tool) {
            markup(m, "{\"tool_response\": {");
            const char *sep = "";
            if (msg->tool_call_id) {
                markup(m, "\"tool_call_id\": ");
                cJSON *s = cJSON_CreateString(msg->tool_call_id);
                if (s) user_json(pl, m, s, -1);
                cJSON_Delete(s);
                sep = ", ";
            }
            if (msg->name) {
                markup(m, sep);
                markup(m, "\"name\": ");
                cJSON *s = cJSON_CreateString(msg->name);
                if (s) user_json(pl, m, s, -1);
                cJSON_Delete(s);
                sep = ", ";
            }
            markup(m, sep);
            markup(m, "\"content\": ");
            cJSON *s = cJSON_CreateString(msg->content ? msg->content : "");
            if (s) user_json(pl, m, s, -1);
            cJSON_Delete(s);
            markup(m, "}}");
            continue;
        }
        user_text(pl, m, msg->content ? msg->content : "");
        if (msg->n_tool_calls == 0) continue;
        if (m->text.len) markup(m, "\n");
        markup(m, "{\"tool_calls\": [");
        for (size_t k = 0; k < msg->n_tool_calls; k++) {
            cJSON *a = call_args(msg, i, k);
            if (!a) return false;
            markup(m, k ? ", {\"name\": " : "{\"name\": ");
            cJSON *s = cJSON_CreateString(msg->tool_calls[k].name);
            if (s) user_json(pl, m, s, -1);
            cJSON_Delete(s);
            markup(m, ", \"arguments\": ");
            user_json(pl, m, a, -1);
            markup(m, "}");
            cJSON_Delete(a);
        }
        markup(m, "]}");
    }
    return true;
}

/* ---- rendering ------------------------------------------------------------------------- */

static bool uses_tools(const struct recur_chat_tool_message *chat, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (chat[i].n_tool_calls || (chat[i].role && strcmp(chat[i].role, "tool") == 0))
            return true;
    return false;
}

int32_t recur_chat_apply_template_tools(const char *tmpl,
                                        const struct recur_chat_tool_message *chat, size_t n_msg,
                                        const char *tools, bool add_ass, char *buf, int32_t length,
                                        struct recur_text_span *spans, int32_t n_spans_max,
                                        int32_t *n_spans) {
    if (!n_spans || n_spans_max < 0 || (!spans && n_spans_max > 0) || length < 0 ||
        (!buf && length > 0) || (!chat && n_msg > 0)) {
        rcore_error_set("recur_chat_apply_template_tools: %s", !n_spans ? "n_spans is NULL"
                                                               : n_spans_max < 0
                                                                   ? "n_spans_max is negative"
                                                               : length < 0 ? "length is negative"
                                                               : !buf && length ? "buf is NULL"
                                                               : !chat && n_msg ? "chat is NULL"
                                                                                : "spans is NULL");
        return -1;
    }
    *n_spans = 0;
    const int f = rchat_find(tmpl);
    if (f < 0) return -1;
    for (size_t i = 0; i < n_msg; i++) {
        if (!chat[i].role) {
            rcore_error_set("chat template: message %zu has a NULL role", i);
            return -1;
        }
        if (!chat[i].content && strcmp(chat[i].role, "assistant") != 0) {
            rcore_error_set("chat template: message %zu has a NULL content", i);
            return -1;
        }
        if (chat[i].n_tool_calls && !chat[i].tool_calls) {
            rcore_error_set("chat template: message %zu has NULL tool_calls", i);
            return -1;
        }
    }
    cJSON *tl = NULL;
    if (tools && !(tl = rtools_parse(tools))) return -1;
    struct plain pl = {0};
    bool ok;
    if (!tl || !tl->child) {
        if (!uses_tools(chat, n_msg)) { /* a plain chat: rendered as without tools */
            cJSON_Delete(tl);
            tl = NULL;
        }
    }
    switch (rtools_family(tmpl)) {
    case RTOOLS_HERMES:
        ok = hermes(&pl, tmpl, chat, n_msg, tl, &qwen_style);
        break;
    case RTOOLS_GRANITE:
        ok = hermes(&pl, tmpl, chat, n_msg, tl, &granite_style);
        break;
    case RTOOLS_NEMO:
        ok = nemo(&pl, chat, n_msg, tl);
        break;
    case RTOOLS_MISTRAL:
        ok = mistral(&pl, tmpl, chat, n_msg, tl);
        break;
    case RTOOLS_LLAMA3:
        ok = llama3(&pl, chat, n_msg, tl);
        break;
    default:
        ok = generic(&pl, chat, n_msg, tl);
        break;
    }
    cJSON_Delete(tl);
    for (size_t i = 0; i < pl.n; i++) pl.oom |= pl.m[i].text.failed;
    if (pl.oom) {
        ok = false;
        rcore_error_set("chat template: out of memory");
    }
    int32_t r = -1;
    struct rchat_msg *pm = ok && !pl.oom ? calloc(pl.n + 1, sizeof *pm) : NULL;
    struct rchat_span *sp = pm ? calloc(pl.n + 1, sizeof *sp) : NULL;
    if (ok && !pl.oom && (!pm || !sp)) rcore_error_set("chat template: out of memory");
    if (sp) {
        for (size_t i = 0; i < pl.n; i++)
            pm[i] = (struct rchat_msg){pl.m[i].role, pl.m[i].text.p ? pl.m[i].text.p : ""};
        size_t got = 0;
        r = rchat_apply_spans(f, pm, pl.n, add_ass, buf, (size_t)length, sp, pl.n, &got);
        if (r >= 0) {
            /* each plain message's sub-spans where its content is written whole and in order
             * (a format that trims or moves contents: the whole content is one span) */
            bool exact = got == pl.n;
            for (size_t i = 0; exact && i < pl.n; i++) exact = sp[i].len == pl.m[i].text.len;
            int32_t k = 0;
            for (size_t i = 0; i < got; i++) {
                if (!exact) {
                    if (k < n_spans_max)
                        spans[k] = (struct recur_text_span){(int32_t)sp[i].off, (int32_t)sp[i].len};
                    k++;
                    continue;
                }
                for (size_t j = 0; j < pl.m[i].n_subs; j++, k++)
                    if (k < n_spans_max)
                        spans[k] =
                            (struct recur_text_span){(int32_t)(sp[i].off + pl.m[i].subs[j].off),
                                                     (int32_t)pl.m[i].subs[j].len};
            }
            *n_spans = k;
        }
    }
    free(pm);
    free(sp);
    plain_free(&pl);
    return r;
}
