/*
 * recur serve's /v1/chat/completions prompt (see api.h): OpenAI's messages rendered with
 * the chat template into the task's prompt tokens.
 *
 * messages: [{role, content}], role "system", "developer" (OpenAI's newer name for system
 * instructions: rendered as system), "user", "assistant", "tool" or "function" (a tool result,
 * toolcall.c); content a string or an array of {"type": "text", "text": ...} parts, joined as
 * they are. Assistant tool_calls and the tool fields are read by toolcall.c, with the request's
 * tools. Other roles, part types and message fields change what the model would see and are
 * refused by name.
 *
 * The template: --chat-template (s->chat_template), else the model's own
 * (tokenizer.chat_template), else RECUR_CHAT_TEMPLATE_DEFAULT ("chatml"). add_generation_prompt
 * (default true) ends the text with the start of an assistant turn. The template's end-of-turn
 * text (what follows an assistant message, e.g. "<|im_end|>") ends generation like EOS; it is
 * found by rendering a probe chat, so it is right for every format recur knows.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

#define MAX_MESSAGES 4096

/* The chat rendered with the template and the tools (JSON text, NULL: none) (malloc'd), and,
 * when spans is not NULL, where the texts from the request lie in it (a malloc'd array into
 * *spans, their count into *n_spans). NULL with p failed. */
static char *render_tools(struct parse *p, const char *tmpl,
                          const struct recur_chat_tool_message *chat, size_t n, const char *tools,
                          bool add_ass, struct recur_text_span **spans, int32_t *n_spans) {
    int32_t ns = 0;
    const int32_t need =
        recur_chat_apply_template_tools(tmpl, chat, n, tools, add_ass, NULL, 0, NULL, 0, &ns);
    if (need < 0) {
        const char *err = recur_last_error();
        if (strncmp(err, "tools", 5) == 0)
            serve_tools_fail(p, err);
        else
            serve_fail(p, "the chat template: %s", err);
        return NULL;
    }
    char *text = malloc((size_t)need + 1);
    struct recur_text_span *sp = spans ? malloc(sizeof *sp * ((size_t)ns + 1)) : NULL;
    if (!text || (spans && !sp)) {
        free(text);
        free(sp);
        serve_fail(p, "out of memory for the rendered chat");
        return NULL;
    }
    if (recur_chat_apply_template_tools(tmpl, chat, n, tools, add_ass, text, need + 1, sp,
                                        sp ? ns : 0, &ns) != need) {
        free(text);
        free(sp);
        serve_fail(p, "the chat template: %s", recur_last_error());
        return NULL;
    }
    if (spans) *spans = sp;
    if (n_spans) *n_spans = ns;
    return text;
}

/* What the template writes after an assistant message, trimmed of white space unless it is
 * all white space: the text that ends a turn. NULL when there is none (or on failure: p is
 * then failed). */
static char *end_of_turn(struct parse *p, const char *tmpl) {
    static const char mark[] = "\x01recur-probe\x01";
    const struct recur_chat_tool_message probe[] = {{.role = "user", .content = "hi"},
                                                    {.role = "assistant", .content = mark}};
    char *text = render_tools(p, tmpl, probe, 2, NULL, false, NULL, NULL);
    if (!text) return NULL;
    char *at = strstr(text, mark), *eot = NULL;
    if (at) {
        char *b = at + strlen(mark), *e = b + strlen(b);
        char *const b0 = b, *const e0 = e;
        while (*b == ' ' || *b == '\n' || *b == '\r' || *b == '\t') b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\t')) e--;
        if (e == b) { /* a turn that ends in white space alone (rwkv-world's "\n\n") */
            b = b0;
            e = e0;
        }
        if (e > b) {
            eot = malloc((size_t)(e - b) + 1);
            if (!eot)
                serve_fail(p, "out of memory");
            else {
                memcpy(eot, b, (size_t)(e - b));
                eot[e - b] = '\0';
            }
        }
    }
    free(text);
    return eot;
}

/* One message's content: a string, or text parts joined (malloc'd into *owned). */
static const char *content_of(struct parse *p, const cJSON *c, int i, char **owned) {
    *owned = NULL;
    if (cJSON_IsString(c)) return c->valuestring;
    if (!cJSON_IsArray(c)) {
        serve_fail(p, "\"messages\"[%d].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t len = 0;
    int k = 0;
    for (const cJSON *part = c->child; part; part = part->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            serve_fail(p, "\"messages\"[%d].content[%d] must be a {\"type\", ...} part", i, k);
            return NULL;
        }
        if (strcmp(type->valuestring, "text") != 0) {
            serve_fail(p,
                       "\"messages\"[%d].content[%d]: parts of type \"%s\" are not supported "
                       "(text only)",
                       i, k, type->valuestring);
            return NULL;
        }
        if (!cJSON_IsString(text) || cJSON_GetArraySize(part) != 2) {
            serve_fail(p,
                       "\"messages\"[%d].content[%d] must be {\"type\": \"text\", \"text\": "
                       "string}",
                       i, k);
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
        const char *text = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(out + o, text, strlen(text));
        o += strlen(text);
    }
    out[o] = '\0';
    *owned = out;
    return out;
}

const char *serve_chat_template(const struct server *s) {
    const char *tmpl = s->chat_template;
    if (!tmpl) tmpl = recur_model_chat_template(s->model, NULL);
    return tmpl ? tmpl : RECUR_CHAT_TEMPLATE_DEFAULT;
}

void serve_chat_render(struct parse *p, struct server *s, struct task *t,
                       const struct recur_chat_tool_message *chat, size_t n, const char *tools,
                       bool add_ass, const char *prefill) {
    if (p->bad) return;
    const char *tmpl = serve_chat_template(s);
    struct recur_text_span *spans = NULL; /* room for one more: the prefill's (render_tools) */
    int32_t n_spans = 0;
    char *text = render_tools(p, tmpl, chat, n, tools, add_ass, &spans, &n_spans);
    if (!text) return;
    if (prefill && prefill[0]) { /* the answer's start, after the generation prompt, as text */
        const size_t at = strlen(text), add = strlen(prefill);
        const bool fits = at + add <= (size_t)INT32_MAX / 2;
        char *both = fits ? realloc(text, at + add + 1) : NULL;
        if (!both) {
            serve_fail(p, fits ? "out of memory" : "the rendered chat is too long");
            goto done;
        }
        text = both;
        memcpy(text + at, prefill, add + 1);
        spans[n_spans++] = (struct recur_text_span){(int32_t)at, (int32_t)add};
    }
    t->eot = end_of_turn(p, tmpl);
    /* a generation prompt that opens a thought (DeepSeek-R1, Nemotron): the output starts in it;
       unless structured output (json_schema, a response_format other than text) holds it to
       JSON from its first token: then it is the answer, not a thought (llama-server reads it as
       reasoning, leaving the content empty) */
    const cJSON *js = serve_field(p, "json_schema"), *resp = serve_field(p, "response_format");
    const cJSON *rtype =
        cJSON_IsObject(resp) ? cJSON_GetObjectItemCaseSensitive(resp, "type") : NULL;
    const bool structured =
        js || (cJSON_IsString(rtype) && strcmp(rtype->valuestring, "text") != 0);
    t->think_open = add_ass && !structured && serve_think_forced_open(text);
    if (p->bad) goto done;
    /* the template's special markers are special tokens where the vocabulary has them; the
       texts from the request are text, unless the caller trusts them (parse_special_content) */
    const cJSON *trust = serve_field(p, "parse_special_content");
    if (trust && !cJSON_IsBool(trust)) {
        serve_fail(p, "\"parse_special_content\" must be true or false");
        goto done;
    }
    const bool special_content = cJSON_IsTrue(trust);
    const size_t len = strlen(text);
    if (len > (size_t)INT32_MAX / 2) {
        serve_fail(p, "the rendered chat is too long");
        goto done;
    }
    if (!serve_check_length(p, s, text, len, "the rendered chat")) goto done;
    t->prompt = malloc(sizeof(recur_token) * (size_t)RECUR_TOKENS_MAX(len));
    t->n_prompt = !t->prompt ? -1
                  : special_content
                      ? recur_tokenize(s->model, text, (int32_t)len, t->prompt,
                                       RECUR_TOKENS_MAX((int32_t)len), true, true)
                      : recur_tokenize_except(s->model, text, (int32_t)len, t->prompt,
                                              RECUR_TOKENS_MAX((int32_t)len), true, spans, n_spans);
    if (t->n_prompt < 0) {
        t->n_prompt = 0;
        serve_fail(p, "the rendered chat could not be tokenized");
        goto done;
    }
    /* an end of turn that is one (special) token: its text may render as nothing */
    t->eot_token = -1;
    if (t->eot) {
        recur_token one[4];
        const int32_t k =
            recur_tokenize(s->model, t->eot, (int32_t)strlen(t->eot), one, 4, false, true);
        if (k == 1) t->eot_token = one[0];
    }
    t->prompt_text = text; /* the rendered chat: /apply-template answers it */
    text = NULL;
done:
    free(spans);
    free(text);
}

void serve_chat_prompt(struct parse *p, struct server *s, struct task *t) {
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
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(p->body, "add_generation_prompt");
    if (agp && !cJSON_IsNull(agp) && !cJSON_IsBool(agp)) {
        serve_fail(p, "\"add_generation_prompt\" must be true or false");
        return;
    }
    const bool add_ass = !agp || cJSON_IsNull(agp) || cJSON_IsTrue(agp);
    /* llama-server's reasoning_format: how the answer's reasoning is returned (reasoning.h) */
    const cJSON *rf = serve_field(p, "reasoning_format");
    t->reasoning = s->reasoning;
    if (rf && (!cJSON_IsString(rf) || serve_reasoning_of(rf->valuestring) < 0)) {
        serve_fail(p, "\"reasoning_format\" must be one of %s", SERVE_REASONING_NAMES);
        return;
    }
    if (rf) t->reasoning = (enum serve_reasoning)serve_reasoning_of(rf->valuestring);
    struct recur_chat_tool_message *chat = calloc((size_t)n, sizeof *chat);
    char **owned = calloc((size_t)n, sizeof *owned);
    char *tools = NULL;
    if (!chat || !owned) {
        serve_fail(p, "out of memory");
        goto done;
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) {
            serve_fail(p, "\"messages\"[%d] must be an object {role, content}", i);
            goto done;
        }
        const char *why_not = serve_think_history(serve_chat_template(s), m);
        if (why_not) {
            serve_fail(p, "\"messages\"[%d].reasoning_content: %s", i, why_not);
            goto done;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const char *r = cJSON_IsString(role) ? role->valuestring : "";
        if (strcmp(r, "developer") == 0) r = "system";
        if (strcmp(r, "function") == 0) r = "tool"; /* OpenAI's legacy name of a tool result */
        if (strcmp(r, "system") != 0 && strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0 &&
            strcmp(r, "tool") != 0) {
            serve_fail(p,
                       "\"messages\"[%d].role must be \"system\", \"developer\", \"user\", "
                       "\"assistant\", \"tool\" or \"function\"",
                       i);
            goto done;
        }
        chat[i].role = r;
        if (!serve_chat_tool_fields(p, m, i, r, &chat[i])) goto done;
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (chat[i].n_tool_calls && (!content || cJSON_IsNull(content))) continue;
        chat[i].content = content_of(p, content, i, &owned[i]);
        if (!chat[i].content) goto done;
    }
    tools = serve_tools_text(p);
    serve_chat_render(p, s, t, chat, (size_t)n, tools, add_ass, NULL);
done:
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    for (int k = 0; chat && k < n; k++) free((void *)chat[k].tool_calls);
    free(owned);
    free(chat);
    free(tools);
}
