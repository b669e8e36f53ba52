/*
 * recur serve's Anthropic Messages API (see api.h): POST /v1/messages, whole and streamed, and
 * POST /v1/messages/count_tokens. A request is turned into the chat that /v1/chat/completions
 * renders (chat.c), run by the same decode loop, and answered in Anthropic's shapes.
 *
 * The request: model (one model is served, whatever the name), max_tokens (required, as
 * Anthropic requires it; 0 reads the prompt and answers no text), messages, system,
 * stop_sequences, temperature (0..1, as Anthropic's), top_p, top_k, stream, metadata (a user
 * id: no effect), service_tier ("auto", "standard_only": recur serves one tier), cache_control
 * (recur's prefix cache works without being asked), thinking (thinking_field), tools and
 * tool_choice (api_tools.c). Refused by name: every content block but text, an assistant's
 * thinking and tool_use blocks and a user's tool_result blocks (image, document, ...: named in
 * the message), and any field not listed.
 *
 * messages: user and assistant turns; content a string or a list of text blocks, joined as
 * they are. Consecutive messages of one role are one turn, as Anthropic combines them: their
 * blocks joined as one list. A last assistant message is a prefill: the chat is rendered up to
 * its generation prompt, the prefill follows as text, and the answer continues it (its text is
 * not repeated in the answer). system: a string or a list of text blocks, rendered as the
 * system message. A tool_use block is a call of its assistant turn; a tool_result block is a
 * tool message of its own, before the text of its user turn.
 *
 * The answer: {id: "msg_<n>", type: "message", role: "assistant", model, content: [{type:
 * "text", text}], stop_reason: "end_turn" | "max_tokens" | "stop_sequence" |
 * "model_context_window_exceeded" (the -c budget ran out), stop_sequence, usage: {input_tokens
 * (the prompt's tokens not read from the cache), cache_creation_input_tokens (0: recur's cache
 * keeps states on its own, no request pays to write), cache_read_input_tokens (restored from the
 * prefix cache), output_tokens}}. Streamed (server-sent events with "event:" lines):
 * message_start (the message with empty content, sent once the prompt is read so that its
 * usage is known), content_block_start, ping, content_block_delta (text_delta), content_block_stop,
 * message_delta ({stop_reason, stop_sequence}, usage.output_tokens), message_stop; a failure
 * is an "error" event. A model's thought (split by reasoning.c) is a thinking block before the
 * text block, {type: "thinking", thinking, signature: ""}, streamed at index 0 (thinking_delta,
 * one signature_delta) with the text block at index 1. With tools, the answer's calls (parsed
 * from the text after the thought, as chat's) are tool_use blocks after the text block (which is
 * left out when the model only called; streamed, it starts at its first text that cannot begin
 * a call), each streamed as content_block_start (input {}), one input_json_delta,
 * content_block_stop; stop_reason "tool_use". Errors: {"type": "error", "error": {"type",
 * "message"}} with the status.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"
#include "endpoints.h"

#define MAX_MESSAGES 4096

/* Every field /v1/messages takes; another is refused by name. Each is read below. */
static const char *const known_fields[] = {
    "model", "max_tokens",  "messages", "system",   "stop_sequences", "temperature",
    "top_p", "top_k",       "stream",   "metadata", "service_tier",   "cache_control",
    "tools", "tool_choice", "thinking", NULL};

bool serve_is_messages_url(const char *url) {
    return strcmp(url, "/v1/messages") == 0 || strcmp(url, "/v1/messages/count_tokens") == 0;
}

/* ---- the request ------------------------------------------------------------------------- */

/* A growing text: the turns' joined blocks. */
struct buf {
    char *s;
    size_t len, cap;
};

static bool buf_add(struct buf *b, const char *text) {
    const size_t n = strlen(text);
    if (b->len + n + 1 > b->cap) {
        const size_t cap = 2 * (b->len + n) + 16;
        char *g = realloc(b->s, cap);
        if (!g) return false;
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->len, text, n + 1);
    b->len += n;
    return true;
}

/* A thinking block of an assistant turn sent back ({type: "thinking", thinking, signature} or
 * {type: "redacted_thinking", data}): checked; whether the template may leave it out is
 * decided with the whole chat (past_thinking). */
static void thinking_block(struct parse *p, const cJSON *blk, const char *what, int k) {
    const bool redacted = strcmp(cJSON_GetObjectItemCaseSensitive(blk, "type")->valuestring,
                                 "redacted_thinking") == 0;
    for (const cJSON *f = blk->child; f && !p->bad; f = f->next) {
        const bool known =
            strcmp(f->string, "type") == 0 || strcmp(f->string, "cache_control") == 0 ||
            (redacted ? strcmp(f->string, "data") == 0
                      : strcmp(f->string, "thinking") == 0 || strcmp(f->string, "signature") == 0);
        if (!known)
            serve_fail(p, "%s[%d].%.40s is not supported by recur", what, k, f->string);
        else if (strcmp(f->string, "type") != 0 && strcmp(f->string, "cache_control") != 0 &&
                 !cJSON_IsString(f))
            serve_fail(p, "%s[%d].%s must be a string", what, k, f->string);
    }
}

/* The chat being built: its entries, each one's text, an assistant turn's calls (realloc'd),
 * the calls' arguments texts. */
struct turns {
    struct recur_chat_tool_message *chat;
    struct buf *text;
    struct recur_tool_call **calls;
    char **args;
    int n, n_args;
};

/* The turn that takes role's next content: the last one when it is role's, else a new one. */
static struct buf *turn_of(struct turns *tt, const char *role) {
    if (!tt->n || strcmp(tt->chat[tt->n - 1].role, role) != 0) tt->chat[tt->n++].role = role;
    return &tt->text[tt->n - 1];
}

/* A tool_use block (assistant) or tool_result block (user) into the turns (api_tools.c reads
 * them): a call of the assistant turn, or a tool message. */
static void tool_block(struct parse *p, const cJSON *blk, const char *what, const char *role,
                       struct turns *tt) {
    const bool use =
        strcmp(cJSON_GetObjectItemCaseSensitive(blk, "type")->valuestring, "tool_use") == 0;
    if (strcmp(role, use ? "assistant" : "user") != 0) {
        serve_fail(p, "%s: a %s block belongs in %s message", what,
                   use ? "tool_use" : "tool_result", use ? "an assistant" : "a user");
        return;
    }
    if (use) {
        struct recur_tool_call call;
        if (!serve_messages_tool_use(p, blk, what, &call, &tt->args[tt->n_args])) return;
        tt->n_args++;
        turn_of(tt, role);
        struct recur_chat_tool_message *m = &tt->chat[tt->n - 1];
        struct recur_tool_call *v =
            realloc(tt->calls[tt->n - 1], sizeof *v * (m->n_tool_calls + 1));
        if (!v) {
            serve_fail(p, "out of memory");
            return;
        }
        v[m->n_tool_calls++] = call;
        tt->calls[tt->n - 1] = v;
        m->tool_calls = v;
        return;
    }
    const char *id = NULL;
    char *text = serve_messages_tool_result(p, blk, what, &id);
    if (!text) return;
    /* a tool message of its own, named as the call it answers */
    tt->chat[tt->n] = (struct recur_chat_tool_message){.role = "tool", .tool_call_id = id};
    for (int i = tt->n - 1; i >= 0 && !tt->chat[tt->n].name; i--)
        for (size_t k = 0; k < tt->chat[i].n_tool_calls; k++)
            if (strcmp(tt->chat[i].tool_calls[k].id, id) == 0)
                tt->chat[tt->n].name = tt->chat[i].tool_calls[k].name;
    if (!tt->chat[tt->n].name) { /* as Anthropic: a result answers a call before it */
        free(text);
        serve_fail(p, "%s.tool_use_id \"%.64s\": no tool_use block with that id comes before it",
                   what, id);
        return;
    }
    const bool ok = buf_add(&tt->text[tt->n], text);
    free(text);
    if (!ok) {
        serve_fail(p, "out of memory");
        return;
    }
    tt->chat[tt->n].content = tt->text[tt->n].s;
    tt->n++;
}

/* A content (what names it in messages): a string, or a list of blocks, into role's turn (tt
 * NULL: into b, the system's). A block is {type: "text", text, cache_control?, citations:
 * null?}; with tt, tool_use (assistant) and tool_result (user) blocks; with thinking (an
 * assistant turn's), thinking blocks too, left out of the text, *thinking the first one's index
 * (-1: none); other types are refused by name. */
static void content_into(struct parse *p, const cJSON *c, const char *what, struct buf *b,
                         const char *role, struct turns *tt, int *thinking) {
    if (cJSON_IsString(c)) {
        if (!buf_add(tt ? turn_of(tt, role) : b, c->valuestring)) serve_fail(p, "out of memory");
        return;
    }
    if (!cJSON_IsArray(c)) {
        serve_fail(p, "%s must be a string or an array of content blocks", what);
        return;
    }
    int k = 0;
    for (const cJSON *blk = c->child; blk && !p->bad; blk = blk->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(blk, "type");
        if (!cJSON_IsObject(blk) || !cJSON_IsString(type)) {
            serve_fail(p, "%s[%d] must be a content block {\"type\": ...}", what, k);
            return;
        }
        if (thinking && (strcmp(type->valuestring, "thinking") == 0 ||
                         strcmp(type->valuestring, "redacted_thinking") == 0)) {
            thinking_block(p, blk, what, k);
            if (*thinking < 0) *thinking = k;
            continue;
        }
        if (!thinking && strcmp(type->valuestring, "thinking") == 0) {
            serve_fail(p, "%s[%d]: a thinking block belongs to an assistant message", what, k);
            return;
        }
        char at[80];
        snprintf(at, sizeof at, "%s[%d]", what, k);
        if (tt && (strcmp(type->valuestring, "tool_use") == 0 ||
                   strcmp(type->valuestring, "tool_result") == 0)) {
            tool_block(p, blk, at, role, tt);
            continue;
        }
        if (strcmp(type->valuestring, "text") != 0) {
            serve_fail(p,
                       "%s[%d]: content blocks of type \"%.40s\" are not supported by recur "
                       "(text%s blocks only)",
                       what, k, type->valuestring,
                       tt ? (thinking ? ", thinking, tool_use" : ", tool_result") : "");
            return;
        }
        /* the formats write an assistant's text before its calls: text after one is refused
           rather than moved */
        if (tt && strcmp(role, "assistant") == 0 && tt->n &&
            strcmp(tt->chat[tt->n - 1].role, "assistant") == 0 &&
            tt->chat[tt->n - 1].n_tool_calls) {
            serve_fail(p,
                       "%s: a text block after a tool_use block of the same turn is not "
                       "supported (the chat formats write the text before the calls)",
                       at);
            return;
        }
        for (const cJSON *f = blk->child; f; f = f->next) {
            /* cache_control: recur's prefix cache needs no breakpoints; citations: none */
            const bool ok = strcmp(f->string, "type") == 0 || strcmp(f->string, "text") == 0 ||
                            strcmp(f->string, "cache_control") == 0 ||
                            (strcmp(f->string, "citations") == 0 &&
                             (cJSON_IsNull(f) || (cJSON_IsArray(f) && !f->child)));
            if (!ok) {
                serve_fail(p, "%s[%d].%.40s is not supported by recur", what, k, f->string);
                return;
            }
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(blk, "text");
        if (!cJSON_IsString(text)) {
            serve_fail(p, "%s[%d].text must be a string", what, k);
            return;
        }
        if (!buf_add(tt ? turn_of(tt, role) : b, text->valuestring)) serve_fail(p, "out of memory");
    }
}

/* thinking: Anthropic's extended thinking, as recur can honour it. The reasoning is separated
 * as --reasoning-format says (deepseek-legacy as deepseek: a thinking block is the place for
 * it); absent, a reasoning comes as a thinking block, as llama-server answers. enabled and
 * adaptive ask for the thinking blocks: refused when the server separates none (format none).
 * recur cannot end a thought early (no reasoning budget), so a budget_tokens below max_tokens,
 * which could bind, is refused; one of max_tokens or more cannot. display "omitted" sends the
 * block with an empty thinking; "summarized" is refused (recur writes no summary). disabled:
 * a model that thinks anyway (a template that opens the thought) has its reasoning separated
 * and left out of the answer, which holds the text after it only. */
static void thinking_field(struct parse *p, const struct server *s, struct task *t) {
    t->reasoning =
        s->reasoning == SERVE_REASONING_DEEPSEEK_LEGACY ? SERVE_REASONING_DEEPSEEK : s->reasoning;
    const cJSON *think = serve_field(p, "thinking");
    if (!think) return;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(think, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (!cJSON_IsObject(think) || (strcmp(ty, "disabled") != 0 && strcmp(ty, "enabled") != 0 &&
                                   strcmp(ty, "adaptive") != 0)) {
        serve_fail(p, "\"thinking\" must be {\"type\": \"enabled\", \"budget_tokens\"}, "
                      "{\"type\": \"adaptive\"} or {\"type\": \"disabled\"}");
        return;
    }
    const bool on = strcmp(ty, "disabled") != 0, budget = strcmp(ty, "enabled") == 0;
    for (const cJSON *f = think->child; f; f = f->next)
        if (strcmp(f->string, "type") != 0 && !(on && strcmp(f->string, "display") == 0) &&
            !(budget && strcmp(f->string, "budget_tokens") == 0)) {
            serve_fail(p, "\"thinking\".%.40s is not supported with type \"%s\"", f->string, ty);
            return;
        }
    t->think_drop = !on;
    if (!on) return;
    if (t->reasoning == SERVE_REASONING_NONE) {
        serve_fail(p,
                   "\"thinking\" of type \"%s\" needs the reasoning separated, and this server "
                   "runs with --reasoning-format none (the thought stays in the text)",
                   ty);
        return;
    }
    const cJSON *display = cJSON_GetObjectItemCaseSensitive(think, "display");
    if (display && !cJSON_IsNull(display) &&
        !(cJSON_IsString(display) && strcmp(display->valuestring, "omitted") == 0)) {
        serve_fail(p, "\"thinking\".display: only \"omitted\" (or none: the whole thinking) is "
                      "supported; recur writes no summary of a thought");
        return;
    }
    t->think_omit = display && cJSON_IsString(display);
    if (!budget) return;
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(think, "budget_tokens");
    const cJSON *mt = serve_field(p, "max_tokens");
    if (!cJSON_IsNumber(bt) || bt->valuedouble < 0 || bt->valuedouble != floor(bt->valuedouble)) {
        serve_fail(p, "\"thinking\".budget_tokens is required: an integer");
        return;
    }
    if (cJSON_IsNumber(mt) && bt->valuedouble < mt->valuedouble)
        serve_fail(p,
                   "\"thinking\".budget_tokens %.0f is below max_tokens %.0f: recur has no "
                   "reasoning budget to end a thought early; give budget_tokens >= max_tokens "
                   "or {\"type\": \"adaptive\"}",
                   bt->valuedouble, mt->valuedouble);
}

/* thinking, metadata, service_tier: what recur cannot honour is refused by name (tools and
 * tool_choice: api_tools.c). */
static void feature_fields(struct parse *p, const struct server *s, struct task *t) {
    thinking_field(p, s, t);
    if (p->bad) return;
    const cJSON *meta = serve_field(p, "metadata");
    if (meta && !cJSON_IsObject(meta)) serve_fail(p, "\"metadata\" must be an object");
    const cJSON *tier = serve_field(p, "service_tier");
    if (tier && !(cJSON_IsString(tier) && (strcmp(tier->valuestring, "auto") == 0 ||
                                           strcmp(tier->valuestring, "standard_only") == 0)))
        serve_fail(p, "\"service_tier\" must be \"auto\" or \"standard_only\"");
}

/* max_tokens (required), temperature's range (Anthropic's 0..1; api.c reads the value),
 * stop_sequences into t->stop. */
static void limit_fields(struct parse *p, struct task *t) {
    if (p->bad) return;
    if (!serve_field(p, "max_tokens")) {
        serve_fail(p, "\"max_tokens\" is required");
        return;
    }
    const cJSON *temp = serve_field(p, "temperature");
    if (temp && !(cJSON_IsNumber(temp) && temp->valuedouble >= 0 && temp->valuedouble <= 1)) {
        serve_fail(p, "\"temperature\" must be a number from 0 to 1");
        return;
    }
    const cJSON *stop = serve_field(p, "stop_sequences");
    if (!stop) return;
    if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > SERVE_MAX_STOP) {
        serve_fail(p, "\"stop_sequences\" must be an array of up to %d strings (recur's limit)",
                   SERVE_MAX_STOP);
        return;
    }
    int k = 0;
    for (const cJSON *e = stop->child; e; e = e->next, k++) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            serve_fail(p, "\"stop_sequences\"[%d] must be a non-empty string", k);
            return;
        }
        if (!(t->stop[t->n_stop] = strdup(e->valuestring))) {
            serve_fail(p, "out of memory");
            return;
        }
        t->n_stop++;
    }
}

/* The thinking blocks of the assistant turns sent back (hist: the messages as chat's history,
 * a thinking as reasoning_content): left out of the prompt where the template leaves out a past
 * reasoning, which is every builtin format (serve_think_history); refused where it would
 * write them, as recur's formats do not render a reasoning. */
static void past_thinking(struct parse *p, const char *tmpl, const cJSON *hist) {
    for (const cJSON *m = hist->child; m && !p->bad; m = m->next) {
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(m, "message");
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(m, "block");
        const char *why = k ? serve_think_history(tmpl, m) : NULL;
        if (why)
            serve_fail(p, "\"messages\"[%d].content[%d] (a thinking block): %s", i->valueint,
                       k->valueint, why);
    }
}

/* The chat's entries as chat's history holds them ({role, content}), an assistant turn's first
 * thinking block (think[k]: its message's index, then the block's; -1: none) as
 * reasoning_content, for past_thinking; NULL without memory. */
static cJSON *history(const struct turns *tt, const int *think) {
    cJSON *hist = cJSON_CreateArray();
    for (int k = 0; hist && k < tt->n; k++) {
        cJSON *h = cJSON_CreateObject();
        if (h && !cJSON_AddItemToArray(hist, h)) {
            cJSON_Delete(h);
            h = NULL;
        }
        if (!h || !cJSON_AddStringToObject(h, "role", tt->chat[k].role) ||
            !cJSON_AddStringToObject(h, "content",
                                     tt->chat[k].content ? tt->chat[k].content : "") ||
            (think[2 * k] >= 0 && (!cJSON_AddStringToObject(h, "reasoning_content", "(thinking)") ||
                                   !cJSON_AddNumberToObject(h, "message", think[2 * k]) ||
                                   !cJSON_AddNumberToObject(h, "block", think[2 * k + 1])))) {
            cJSON_Delete(hist);
            return NULL;
        }
    }
    return hist;
}

void serve_messages_prompt(struct parse *p, struct server *s, struct task *t) {
    if (p->bad) return;
    char msg[160];
    if (serve_unknown_field(p->body, known_fields, msg, sizeof msg)) {
        serve_fail(p, "%s (/v1/messages)", msg);
        return;
    }
    feature_fields(p, s, t);
    limit_fields(p, t);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(p->body, "messages");
    if (p->bad) return;
    if (!cJSON_IsArray(msgs) || !msgs->child) {
        serve_fail(p, msgs ? "\"messages\" must be a non-empty array of messages"
                           : "\"messages\" is required");
        return;
    }
    const int n = cJSON_GetArraySize(msgs);
    if (n > MAX_MESSAGES) {
        serve_fail(p, "\"messages\" has %d messages, at most %d are accepted", n, MAX_MESSAGES);
        return;
    }
    /* at most one entry per block (a tool_result is one), one per message, and the system */
    int cap = 2;
    for (const cJSON *m = msgs->child; m; m = m->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        cap += 1 + (cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0);
    }
    struct turns tt = {calloc((size_t)cap, sizeof *tt.chat),
                       calloc((size_t)cap, sizeof *tt.text),
                       calloc((size_t)cap, sizeof *tt.calls),
                       calloc((size_t)cap, sizeof *tt.args),
                       0,
                       0};
    int *think = malloc(2 * (size_t)cap * sizeof *think); /* history's */
    char *tools = NULL;
    cJSON *hist = NULL;
    if (!tt.chat || !tt.text || !tt.calls || !tt.args || !think) {
        serve_fail(p, "out of memory");
        goto done;
    }
    for (int k = 0; k < 2 * cap; k++) think[k] = -1;
    const cJSON *sys = serve_field(p, "system");
    if (sys) {
        content_into(p, sys, "\"system\"", &tt.text[0], "system", NULL, NULL);
        if (p->bad) goto done;
        tt.chat[tt.n++] = (struct recur_chat_tool_message){
            .role = "system", .content = tt.text[0].s ? tt.text[0].s : ""};
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char what[48];
        snprintf(what, sizeof what, "\"messages\"[%d]", i);
        if (!cJSON_IsObject(m)) {
            serve_fail(p, "%s must be an object {role, content}", what);
            goto done;
        }
        for (const cJSON *f = m->child; f; f = f->next)
            if (strcmp(f->string, "role") != 0 && strcmp(f->string, "content") != 0) {
                serve_fail(p, "%s.%.40s is not supported (only role and content)", what, f->string);
                goto done;
            }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
            serve_fail(p, "%s.role must be \"user\" or \"assistant\"", what);
            goto done;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!content) {
            serve_fail(p, "%s.content is required", what);
            goto done;
        }
        /* into the turn of its role (Anthropic combines consecutive messages of one role),
           tool results into tool messages (tool_block) */
        char where[64];
        snprintf(where, sizeof where, "%s.content", what);
        const int before = tt.n;
        int thinking = -1;
        content_into(p, content, where, NULL, r, &tt,
                     strcmp(r, "assistant") == 0 ? &thinking : NULL);
        if (p->bad) goto done;
        if (tt.n == before) turn_of(&tt, r);              /* an empty content still makes a turn */
        if (thinking >= 0 && think[2 * (tt.n - 1)] < 0) { /* the turn's first thinking block */
            think[2 * (tt.n - 1)] = i;
            think[2 * (tt.n - 1) + 1] = thinking;
        }
    }
    /* a turn's text as its content ("" when it has no text, unless it is an assistant's calls) */
    for (int k = 0; k < tt.n; k++) {
        if (tt.chat[k].content || (tt.chat[k].n_tool_calls && !tt.text[k].s)) continue;
        if (!buf_add(&tt.text[k], "")) {
            serve_fail(p, "out of memory");
            goto done;
        }
        tt.chat[k].content = tt.text[k].s;
    }
    if (!(hist = history(&tt, think))) {
        serve_fail(p, "out of memory");
        goto done;
    }
    past_thinking(p, serve_chat_template(s), hist);
    if (p->bad) goto done;
    /* a last assistant turn is the start of the answer */
    const bool prefill = strcmp(tt.chat[tt.n - 1].role, "assistant") == 0;
    if (prefill && tt.chat[tt.n - 1].n_tool_calls) {
        serve_fail(p, "the last message's tool_use blocks need their tool_result blocks in a "
                      "user message after it (an answer cannot continue from calls)");
        goto done;
    }
    tools = serve_messages_tools(p);
    serve_chat_render(p, s, t, tt.chat, (size_t)(prefill ? tt.n - 1 : tt.n), tools, true,
                      prefill ? tt.chat[tt.n - 1].content : NULL);
    serve_messages_tool_choice(p, s, t, tools);
done:
    cJSON_Delete(hist);
    free(think);
    for (int k = 0; tt.text && k < cap; k++) free(tt.text[k].s);
    for (int k = 0; tt.calls && k < cap; k++) free(tt.calls[k]);
    for (int k = 0; tt.args && k < tt.n_args; k++) free(tt.args[k]);
    free(tt.text);
    free(tt.calls);
    free(tt.args);
    free(tt.chat);
    free(tools);
}

/* ---- the answers ------------------------------------------------------------------------- */

static const char *stop_reason(const struct task *t, const struct choice *c) {
    if (c->truncated) return "model_context_window_exceeded";
    switch (c->stop_kind) {
    case STOP_LIMIT:
        return "max_tokens";
    case STOP_NONE: /* max_tokens 0: ended before any token */
        return c->n_out >= t->max_tokens ? "max_tokens" : "end_turn";
    case STOP_WORD:
        return "stop_sequence";
    default:
        return "end_turn";
    }
}

/* calls: the answer ends in tool calls (stop_reason "tool_use") */
static void add_stop(cJSON *j, const struct task *t, const struct choice *c, bool calls) {
    cJSON_AddStringToObject(j, "stop_reason", calls ? "tool_use" : stop_reason(t, c));
    if (c->stop_kind == STOP_WORD && c->stop_word >= 0 && c->stop_word < t->n_stop)
        cJSON_AddStringToObject(j, "stop_sequence", t->stop[c->stop_word]);
    else
        cJSON_AddNullToObject(j, "stop_sequence");
}

/* The message without its content's text and stop: what message_start and the whole answer
 * share. */
static cJSON *message(const struct server *s, const struct task *t) {
    cJSON *j = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "msg_%llu", (unsigned long long)t->id);
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "type", "message");
    cJSON_AddStringToObject(j, "role", "assistant");
    cJSON_AddStringToObject(j, "model", s->model_name ? s->model_name : "");
    cJSON_AddArrayToObject(j, "content");
    return j;
}

static void add_usage(cJSON *j, const struct task *t, int32_t output_tokens) {
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", t->n_prompt - t->n_cached);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", t->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", output_tokens);
}

/* A thinking block: the thought (empty with display "omitted") and its signature, "" (recur
 * signs nothing; a client sends the block back as it came, and recur leaves it out). */
static cJSON *thinking_json(const struct task *t, const char *text, size_t len) {
    cJSON *block = cJSON_CreateObject();
    cJSON_AddStringToObject(block, "type", "thinking");
    serve_add_text(block, "thinking", text, t->think_omit ? 0 : len);
    cJSON_AddStringToObject(block, "signature", "");
    return block;
}

cJSON *serve_messages_json(const struct server *s, const struct serve_request *r) {
    const struct task *t = r->tasks[0];
    const struct choice *c = &t->choice[0];
    struct serve_think th; /* the reasoning apart (thinking_field) */
    if (!serve_think_whole(&th, t, c)) {
        serve_think_free(&th);
        return NULL;
    }
    cJSON *j = message(s, t), *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    if (th.reasoning.len && !t->think_drop)
        cJSON_AddItemToArray(content, thinking_json(t, th.reasoning.s, th.reasoning.len));
    /* the text (before the calls; left out when the model only called), then tool_use blocks */
    struct recur_tool_calls *tc = serve_api_calls(s, t, th.content.s, th.content.len);
    if (!tc || tc->content[0]) {
        cJSON *block = cJSON_CreateObject();
        cJSON_AddStringToObject(block, "type", "text");
        if (tc)
            cJSON_AddStringToObject(block, "text", tc->content);
        else
            serve_add_text(block, "text", th.content.s, th.content.len);
        cJSON_AddItemToArray(content, block);
    }
    for (size_t k = 0; tc && k < tc->n_calls; k++)
        cJSON_AddItemToArray(content, serve_messages_tool_use_block(s, t, tc, k, false));
    add_stop(j, t, c, tc != NULL);
    recur_tool_calls_free(tc);
    serve_think_free(&th);
    add_usage(j, t, c->n_out);
    return j;
}

/* ---- the stream -------------------------------------------------------------------------- */

enum { PH_START, PH_TEXT, PH_DONE };

/* An event's data, {"type": name}, to fill in. */
static cJSON *ev_new(const char *name) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", name);
    return j;
}

/* Appends "event: NAME\ndata: JSON\n\n" (j freed) to b; false without memory. */
static bool add_event(struct buf *b, const char *name, cJSON *j) {
    if (!j) return false;
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    const bool ok = body && buf_add(b, "event: ") && buf_add(b, name) && buf_add(b, "\ndata: ") &&
                    buf_add(b, body) && buf_add(b, "\n\n");
    free(body);
    return ok;
}

/* The text a stream may send now: what the tokens so far released (the rest may be the start
 * of a stop sequence or of a character; the scheduler's released[] never decreases), all of it
 * once the answer is finished. */
static size_t ready_bytes(const struct choice *c, size_t sent) {
    if (c->finished) return c->len;
    const int32_t n_out = c->n_out; /* first: the arrays are set up before any token */
    if (n_out == 0) return sent;
    const size_t e = c->released[n_out - 1] < c->len ? c->released[n_out - 1] : c->len;
    return e > sent ? e : sent;
}

/* An event made by ev_new(name) with a content block's index. */
static cJSON *ev_block(const char *name, int index) {
    cJSON *j = ev_new(name);
    cJSON_AddNumberToObject(j, "index", index);
    return j;
}

/* content_block_start of a thinking block (index 0) or of the text block (after it). */
static bool block_start(struct buf *b, struct serve_request *r, bool thinking) {
    const bool first = !r->msg_think_open && !r->msg_text_open; /* a ping after it, as Anthropic */
    cJSON *j = ev_block("content_block_start", thinking            ? 0
                                               : r->msg_think_open ? 1
                                                                   : 0),
          *cb = cJSON_AddObjectToObject(j, "content_block");
    cJSON_AddStringToObject(cb, "type", thinking ? "thinking" : "text");
    cJSON_AddStringToObject(cb, thinking ? "thinking" : "text", "");
    if (thinking) cJSON_AddStringToObject(cb, "signature", "");
    if (thinking)
        r->msg_think_open = true;
    else
        r->msg_text_open = true;
    return add_event(b, "content_block_start", j) &&
           (!first || add_event(b, "ping", ev_new("ping")));
}

/* A delta of the thinking block (thinking_delta, signature_delta) or of the text block. */
static bool block_delta(struct buf *b, struct serve_request *r, const char *type, const char *field,
                        const char *text, size_t len) {
    const bool thinking = strcmp(type, "text_delta") != 0;
    cJSON *j = ev_block("content_block_delta", thinking            ? 0
                                               : r->msg_think_open ? 1
                                                                   : 0),
          *delta = cJSON_AddObjectToObject(j, "delta");
    cJSON_AddStringToObject(delta, "type", type);
    serve_add_text(delta, field, text, len);
    return add_event(b, "content_block_delta", j);
}

/* With tools: call k's block, at index at: content_block_start (tool_use, input {}), one
 * input_json_delta with the whole arguments, content_block_stop; the ping after it when it is
 * the first block. */
static bool call_events(struct buf *b, const struct server *s, const struct task *t,
                        const struct recur_tool_calls *tc, size_t k, int at, bool first) {
    cJSON *start = ev_block("content_block_start", at);
    cJSON_AddItemToObject(start, "content_block", serve_messages_tool_use_block(s, t, tc, k, true));
    cJSON *d = ev_block("content_block_delta", at), *delta = cJSON_AddObjectToObject(d, "delta");
    cJSON_AddStringToObject(delta, "type", "input_json_delta");
    cJSON_AddStringToObject(delta, "partial_json", tc->calls[k].arguments);
    if (!add_event(b, "content_block_start", start)) {
        cJSON_Delete(d);
        return false;
    }
    return (!first || add_event(b, "ping", ev_new("ping"))) &&
           add_event(b, "content_block_delta", d) &&
           add_event(b, "content_block_stop", ev_block("content_block_stop", at));
}

/* The events of the text the tokens released since the last call, split into the thinking and
 * the text blocks (each started by its first text; the text block at the latest by the end,
 * unless the model only called), then the ends once the answer is finished: nothing (b empty)
 * while no token released text. With tools, the text stops where a call may begin, and the
 * calls' blocks follow the text block at the end. */
static bool block_events(struct buf *b, const struct server *s, struct serve_request *r,
                         const struct task *t, const struct choice *c) {
    bool ok = true;
    for (;;) {
        const size_t to = ready_bytes(c, r->msg_bytes);
        const bool fin = to <= r->msg_bytes && c->finished;
        if (to <= r->msg_bytes && !fin) return true;
        const char *rs, *cs;
        size_t nr, nc;
        ok = serve_think_stream_step(&r->msg_think, t, c->text + r->msg_bytes, to - r->msg_bytes,
                                     fin, &rs, &nr, &cs, &nc);
        r->msg_bytes = to;
        if (ok && nr && !t->think_drop) { /* the thought comes first, before any text */
            if (!r->msg_think_open) ok = block_start(b, r, true);
            if (ok && !t->think_omit) ok = block_delta(b, r, "thinking_delta", "thinking", rs, nr);
        }
        (void)cs;
        /* the answer's text that may be sent: with tools, not from where a call may begin;
           finished, the text before the calls (tc) */
        const struct serve_text *x = &r->msg_think.th.content;
        struct recur_tool_calls *tc = ok && fin ? serve_api_calls(s, t, x->s, x->len) : NULL;
        const size_t limit = tc                 ? strlen(tc->content)
                             : t->tools && !fin ? serve_tools_sendable(s, x->s, x->len)
                                                : x->len;
        if (ok && (nc || fin)) {
            if (r->msg_think_open && !r->msg_think_done) { /* the thought ended */
                r->msg_think_done = true;
                ok = block_delta(b, r, "signature_delta", "signature", "", 0) &&
                     add_event(b, "content_block_stop", ev_block("content_block_stop", 0));
            }
            /* the text block, unless the model only called */
            if (ok && !r->msg_text_open && (limit > r->msg_sent || (fin && !(tc && limit == 0))))
                ok = block_start(b, r, false);
        }
        if (ok && limit > r->msg_sent) {
            ok = block_delta(b, r, "text_delta", "text", x->s + r->msg_sent, limit - r->msg_sent);
            r->msg_sent = limit;
        }
        if (ok && fin) {
            r->msg_phase = PH_DONE;
            const int blocks = (r->msg_think_open ? 1 : 0) + (r->msg_text_open ? 1 : 0);
            if (r->msg_text_open)
                ok = add_event(b, "content_block_stop",
                               ev_block("content_block_stop", r->msg_think_open ? 1 : 0));
            for (size_t k = 0; ok && tc && k < tc->n_calls; k++)
                ok = call_events(b, s, t, tc, k, blocks + (int)k, blocks == 0 && k == 0);
            cJSON *md = ev_new("message_delta"), *delta = cJSON_AddObjectToObject(md, "delta");
            add_stop(delta, t, c, tc != NULL);
            cJSON_AddNumberToObject(cJSON_AddObjectToObject(md, "usage"), "output_tokens",
                                    c->n_out);
            if (!ok) cJSON_Delete(md);
            ok = ok && add_event(b, "message_delta", md) &&
                 add_event(b, "message_stop", ev_new("message_stop"));
        }
        recur_tool_calls_free(tc);
        /* a token whose text the splitter holds (the start of a tag) sent nothing: look at the
           next ones now (returning nothing would wait for a token that may never come) */
        if (!ok || b->len || fin) return ok;
    }
}

char *serve_messages_events(const struct server *s, struct serve_request *r, bool *end) {
    struct task *t = r->tasks[0];
    const struct choice *c = &t->choice[0];
    struct buf b = {0};
    bool ok = true;
    *end = false;
    if (r->msg_phase == PH_DONE) {
        *end = true;
        return NULL;
    }
    if (t->state == TASK_FAILED) {
        r->msg_phase = PH_DONE;
        const unsigned status = t->err_status ? t->err_status : 500;
        cJSON *j = ev_new("error"), *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "type",
                                status == 503   ? "overloaded_error"
                                : status == 504 ? "timeout_error"
                                                : "api_error");
        cJSON_AddStringToObject(e, "message", t->error[0] ? t->error : "the request failed");
        ok = add_event(&b, "error", j);
    } else if (r->msg_phase == PH_START) {
        /* once the prompt is read: its usage (the cached part) is known */
        if (!(t->t_first > 0 || t->state == TASK_DONE)) return NULL;
        r->msg_phase = PH_TEXT;
        cJSON *m = message(s, t);
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        add_usage(m, t, 0);
        cJSON *start = ev_new("message_start");
        cJSON_AddItemToObject(start, "message", m);
        ok = add_event(&b, "message_start", start);
    } else {
        ok = block_events(&b, s, r, t, c);
        if (ok && !b.len) return NULL;
    }
    if (!ok) { /* without memory the stream ends there */
        free(b.s);
        r->msg_phase = PH_DONE;
        *end = true;
        return NULL;
    }
    return b.s;
}

/* ---- errors and the endpoints ------------------------------------------------------------ */

/* Anthropic's error type of an HTTP status. */
static const char *error_type(unsigned status) {
    static const struct {
        unsigned status;
        const char *type;
    } types[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"},  {403, "permission_error"},
        {404, "not_found_error"},       {405, "invalid_request_error"}, {408, "timeout_error"},
        {413, "request_too_large"},     {429, "rate_limit_error"},      {501, "api_error"},
        {503, "overloaded_error"},      {504, "timeout_error"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].status == status) return types[i].type;
    return status >= 500 ? "api_error" : "invalid_request_error";
}

enum MHD_Result serve_messages_error(struct MHD_Connection *conn, unsigned status,
                                     const char *msg) {
    cJSON *j = cJSON_CreateObject(), *e;
    cJSON_AddStringToObject(j, "type", "error");
    e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "type", error_type(status));
    cJSON_AddStringToObject(e, "message", msg);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, status, "application/json", text,
                           status == MHD_HTTP_SERVICE_UNAVAILABLE ? "1" : NULL);
}

enum MHD_Result serve_messages(struct server *s, struct MHD_Connection *conn,
                               const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq, API_MESSAGES);
}

/* The same body, max_tokens not required (Anthropic's count_tokens does not take it; a value
 * given is checked as /v1/messages checks it): the rendered prompt's tokens, nothing run. */
enum MHD_Result serve_messages_count(struct server *s, struct MHD_Connection *conn,
                                     const struct serve_req *rq) {
    cJSON *body = NULL;
    struct serve_req copy = *rq;
    if (!cJSON_GetObjectItemCaseSensitive(rq->body, "max_tokens")) {
        body = cJSON_Duplicate(rq->body, true);
        if (!body || !cJSON_AddNumberToObject(body, "max_tokens", 1)) {
            cJSON_Delete(body);
            return serve_send_error(conn, 500, "server_error", "out of memory");
        }
        copy.body = body;
    }
    enum MHD_Result answered;
    struct serve_request *r = serve_request_new(s, conn, &copy, API_MESSAGES, &answered);
    cJSON_Delete(body);
    if (!r) return answered;
    cJSON *j = cJSON_CreateObject();
    if (j) cJSON_AddNumberToObject(j, "input_tokens", r->tasks[0]->n_prompt);
    serve_request_free(s, r);
    free(r);
    if (!j) return serve_send_error(conn, 500, "server_error", "out of memory");
    return serve_send_json(conn, 200, j);
}
