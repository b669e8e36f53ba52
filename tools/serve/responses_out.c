/*
 * recur serve: the answers of /v1/responses (see responses.c): OpenAI's response object, whole
 * or as its typed server-sent events (`event: TYPE`, `data: {"type": TYPE, "sequence_number":
 * n, ...}`): response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta (one per token that released text),
 * response.output_text.done, response.content_part.done, response.output_item.done, then
 * response.completed or response.incomplete (the length ended it); response.failed when the
 * task failed. A finished response is kept (responses_store.c) unless store was false, its
 * answer without its thought.
 *
 * A reasoning model's thought (split by reasoning.c as chat's reasoning_content) is a
 * reasoning item before the message, {type: "reasoning", id: "rs_...", summary: [], content:
 * [{type: "reasoning_text", text}], status}, streamed as its own item at output_index 0 with
 * response.reasoning_text.delta / .done (OpenAI's events for an open-weight model's raw
 * thought); the message follows at output_index 1 (0 when there was no thought).
 *
 * With tools, the calls in the answer (api_tools.c, parsed from the text after the thought, as
 * chat's) are function_call items after the message, which is left out when the model only
 * called. Streamed, the message opens at its first text that cannot begin a call, and each
 * call is response.output_item.added, response.function_call_arguments.delta (the whole
 * arguments), .done and response.output_item.done, once the answer is finished.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "responses.h"

/* The message item: its text (with_text false: none yet, content []). */
static cJSON *message_item(const struct serve_responses_req *q, const char *status,
                           const char *text, size_t len, bool with_text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", q->msg_id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", status);
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (with_text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "output_text");
        serve_add_text(part, "text", text, len);
        cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddArrayToObject(part, "logprobs");
        cJSON_AddItemToArray(content, part);
    }
    cJSON_AddStringToObject(m, "role", "assistant");
    return m;
}

/* The reasoning item (OpenAI's for an open-weight model's raw thought, gpt-oss): its text as
 * one reasoning_text part (with_text false: none yet), no summary (recur writes none). */
static cJSON *reasoning_item(const struct serve_responses_req *q, const char *status,
                             const char *text, size_t len, bool with_text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", q->rs_id);
    cJSON_AddStringToObject(m, "type", "reasoning");
    cJSON_AddArrayToObject(m, "summary");
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (with_text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "reasoning_text");
        serve_add_text(part, "text", text, len);
        cJSON_AddItemToArray(content, part);
    }
    cJSON_AddStringToObject(m, "status", status);
    return m;
}

static bool incomplete(const struct choice *c) {
    return c->finish_reason && strcmp(c->finish_reason, "length") == 0;
}

/* A reasoning cut by the length (no answer after it) is incomplete; one that ended, complete. */
static const char *reasoning_status(const struct choice *c, size_t content_len) {
    return incomplete(c) && content_len == 0 ? "incomplete" : "completed";
}

/* The response object: status "in_progress" (no output, no usage), "completed", "incomplete"
 * or "failed" (error). NULL without memory. */
static cJSON *response_json(const struct server *s, const struct serve_request *r,
                            const char *status, const char *error) {
    const struct serve_responses_req *q = r->resp;
    const struct task *t = r->tasks[0];
    const struct choice *c = &t->choice[0];
    const bool ended = strcmp(status, "in_progress") != 0 && strcmp(status, "failed") != 0;
    /* the output: the reasoning apart (the server's --reasoning-format), then the answer */
    struct serve_think th = {0}; /* split once the text is all there */
    if (ended && !serve_think_whole(&th, t, c)) {
        serve_think_free(&th);
        return NULL;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "id", q->id);
    cJSON_AddStringToObject(j, "object", "response");
    cJSON_AddNumberToObject(j, "created_at", q->created_at);
    cJSON_AddStringToObject(j, "status", status);
    cJSON_AddBoolToObject(j, "background", false);
    if (strcmp(status, "completed") == 0)
        cJSON_AddNumberToObject(j, "completed_at", (double)time(NULL));
    else
        cJSON_AddNullToObject(j, "completed_at");
    if (error) {
        cJSON *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", error);
    } else {
        cJSON_AddNullToObject(j, "error");
    }
    if (ended && incomplete(c))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(j, "incomplete_details"), "reason",
                                "max_output_tokens");
    else
        cJSON_AddNullToObject(j, "incomplete_details");
    for (const cJSON *e = q->echo->child; e; e = e->next) {
        cJSON_AddItemToObject(j, e->string, cJSON_Duplicate(e, true));
        if (strcmp(e->string, "model") == 0) { /* output after model, as OpenAI orders it */
            cJSON *output = cJSON_AddArrayToObject(j, "output");
            if (ended && th.reasoning.len)
                cJSON_AddItemToArray(output,
                                     reasoning_item(q, reasoning_status(c, th.content.len),
                                                    th.reasoning.s, th.reasoning.len, true));
            /* the message (left out when the model only called), then the calls */
            struct recur_tool_calls *tc =
                ended ? serve_api_calls(s, t, th.content.s, th.content.len) : NULL;
            const char *text = tc ? tc->content : th.content.s;
            const size_t len = tc ? strlen(tc->content) : th.content.len;
            if (ended && (!tc || len))
                cJSON_AddItemToArray(output, message_item(q, status, text, len, true));
            for (size_t k = 0; tc && k < tc->n_calls; k++)
                cJSON_AddItemToArray(output, serve_responses_call_item(s, t, tc, k, true));
            recur_tool_calls_free(tc);
        }
    }
    if (ended) {
        cJSON *u = cJSON_AddObjectToObject(j, "usage");
        cJSON_AddNumberToObject(u, "input_tokens", t->n_prompt);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
                                t->n_cached);
        cJSON_AddNumberToObject(u, "output_tokens", c->n_out);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"),
                                "reasoning_tokens", serve_think_tokens(t, c));
        cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + c->n_out);
    }
    if (!ended) cJSON_AddNullToObject(j, "usage");
    serve_think_free(&th);
    return j;
}

/* Keeps a finished response for previous_response_id and GET (unless store is false). */
static void keep(const struct server *s, const struct serve_request *r, const cJSON *response) {
    const struct serve_responses_req *q = r->resp;
    const struct choice *c = &r->tasks[0]->choice[0];
    if (!q->store || !s->responses) return;
    /* the answer without its reasoning, as a chat client sends an assistant turn back: the next
       prompt renders the past reasoning as chat's history does (most templates drop it); with
       its calls (api_tools.c), which the next input's function_call_output items answer */
    struct serve_think th;
    const bool split = serve_think_whole(&th, r->tasks[0], c);
    cJSON *conv = cJSON_Duplicate(q->conv, true),
          *m = split ? serve_api_assistant_message(s, r->tasks[0], th.content.s, th.content.len)
                     : NULL;
    serve_think_free(&th);
    if (!m) { /* no memory: a conversation without its answer is not kept */
        cJSON_Delete(conv);
        return;
    }
    if (conv && cJSON_AddItemToArray(conv, m)) m = NULL;
    cJSON_Delete(m);
    char *ct = conv ? cJSON_PrintUnformatted(conv) : NULL;
    cJSON_Delete(conv);
    serve_responses_put(s->responses, r->tasks[0]->tenant, q->id, ct,
                        cJSON_PrintUnformatted(response));
}

cJSON *serve_responses_final(const struct server *s, const struct serve_request *r) {
    const struct choice *c = &r->tasks[0]->choice[0];
    cJSON *j = response_json(s, r, incomplete(c) ? "incomplete" : "completed", NULL);
    if (j) keep(s, r, j);
    return j;
}

/* A growing text: the events one call sends. */
struct evbuf {
    char *s;
    size_t len, cap;
    bool oom;
};

/* Appends "event: TYPE\ndata: JSON\n\n" of j (taken over), with its type and sequence number. */
static void sse(struct serve_responses_req *q, struct evbuf *b, const char *type, cJSON *j) {
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "type", type);
    cJSON_AddNumberToObject(out, "sequence_number", q->seq++);
    for (cJSON *e = j ? j->child : NULL; e;) { /* moved after type and sequence_number */
        cJSON *next = e->next;
        cJSON_AddItemToObject(out, e->string, cJSON_DetachItemViaPointer(j, e));
        e = next;
    }
    cJSON_Delete(j);
    char *body = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    const size_t n = body ? strlen(body) + strlen(type) + 20 : 0;
    if (body && b->len + n > b->cap) {
        const size_t cap = 2 * (b->len + n);
        char *g = realloc(b->s, cap);
        if (g) {
            b->s = g;
            b->cap = cap;
        }
    }
    if (!body || b->len + n > b->cap)
        b->oom = true;
    else
        b->len += (size_t)snprintf(b->s + b->len, n, "event: %s\ndata: %s\n\n", type, body);
    free(body);
}

/* The fields that place an event in an item's one part: the reasoning item's or the
 * message's. */
static cJSON *at_part(const struct serve_responses_req *q, bool reasoning) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "item_id", reasoning ? q->rs_id : q->msg_id);
    cJSON_AddNumberToObject(j, "output_index", !reasoning && q->rs_open ? 1 : 0);
    cJSON_AddNumberToObject(j, "content_index", 0);
    return j;
}

/* The part of an item: reasoning_text or output_text, its text so far. */
static cJSON *part_json(bool reasoning, const char *text, size_t len) {
    cJSON *part = cJSON_CreateObject();
    cJSON_AddStringToObject(part, "type", reasoning ? "reasoning_text" : "output_text");
    serve_add_text(part, "text", text, len);
    if (!reasoning) {
        cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddArrayToObject(part, "logprobs");
    }
    return part;
}

/* output_item.added and content_part.added of the reasoning item or the message. */
static void open_item(struct serve_responses_req *q, struct evbuf *b, bool reasoning) {
    if (reasoning)
        q->rs_open = true;
    else
        q->msg_open = true;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "output_index", !reasoning && q->rs_open ? 1 : 0);
    cJSON_AddItemToObject(j, "item",
                          reasoning ? reasoning_item(q, "in_progress", NULL, 0, false)
                                    : message_item(q, "in_progress", NULL, 0, false));
    sse(q, b, "response.output_item.added", j);
    j = at_part(q, reasoning);
    cJSON_AddItemToObject(j, "part", part_json(reasoning, "", 0));
    sse(q, b, "response.content_part.added", j);
}

/* The text's done event, content_part.done and output_item.done of an item (status its). */
static void close_item(struct serve_responses_req *q, struct evbuf *b, bool reasoning,
                       const char *status, size_t len) {
    const struct serve_text *x = reasoning ? &q->think.th.reasoning : &q->think.th.content;
    const char *text = x->s ? x->s : "";
    if (reasoning) q->rs_done = true;
    cJSON *j = at_part(q, reasoning);
    serve_add_text(j, "text", text, len);
    if (!reasoning) cJSON_AddArrayToObject(j, "logprobs");
    sse(q, b, reasoning ? "response.reasoning_text.done" : "response.output_text.done", j);
    j = at_part(q, reasoning);
    cJSON_AddItemToObject(j, "part", part_json(reasoning, text, len));
    sse(q, b, "response.content_part.done", j);
    j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "output_index", !reasoning && q->rs_open ? 1 : 0);
    cJSON_AddItemToObject(j, "item",
                          reasoning ? reasoning_item(q, status, text, len, true)
                                    : message_item(q, status, text, len, true));
    sse(q, b, "response.output_item.done", j);
}

/* Call k of tc's events, after the message (and the reasoning): output_item.added (the item
 * in_progress, arguments ""), function_call_arguments.delta with the whole arguments, .done,
 * output_item.done. */
static void call_events(const struct server *s, struct serve_responses_req *q, struct evbuf *b,
                        const struct task *t, const struct recur_tool_calls *tc, size_t k) {
    const double index = (double)((q->rs_open ? 1 : 0) + (q->msg_open ? 1 : 0) + k);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "output_index", index);
    cJSON_AddItemToObject(j, "item", serve_responses_call_item(s, t, tc, k, false));
    sse(q, b, "response.output_item.added", j);
    cJSON *item = serve_responses_call_item(s, t, tc, k, true);
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(item, "id"));
    for (int done = 0; done < 2; done++) {
        j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "item_id", id ? id : "");
        cJSON_AddNumberToObject(j, "output_index", index);
        cJSON_AddStringToObject(j, done ? "arguments" : "delta", tc->calls[k].arguments);
        sse(q, b,
            done ? "response.function_call_arguments.done"
                 : "response.function_call_arguments.delta",
            j);
    }
    j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "output_index", index);
    cJSON_AddItemToObject(j, "item", item);
    sse(q, b, "response.output_item.done", j);
}

/* The items' events for the text the tokens released since the last call (split into reasoning
 * and answer), and their ends once the task is done; nothing (b empty) while no token released
 * text. */
static void item_events(const struct server *s, struct serve_responses_req *q, struct evbuf *b,
                        const struct task *t, const struct choice *c) {
    for (;;) {
        /* the text a token released, a token at a time (what is held back, the start of a stop
           string or of a character, comes with a later one) */
        const int32_t avail = c->n_out == 0 ? 0
                              : c->finished ? serve_tokens_ready(c, c->len)
                                            : c->n_out;
        int32_t upto = q->tokens;
        size_t stop = q->bytes;
        while (upto < avail) {
            const size_t e = c->released[upto] < c->len ? c->released[upto] : c->len;
            upto++;
            if (e > stop) stop = e;
            if (stop > q->bytes) break;
        }
        if (upto == avail && c->finished && c->text) stop = c->len;
        q->tokens = upto;
        const bool fin = stop <= q->bytes && t->state == TASK_DONE;
        if (stop <= q->bytes && !fin) return;
        const char *rs, *cs;
        size_t nr, nc;
        const bool ok = serve_think_stream_step(&q->think, t, c->text + q->bytes, stop - q->bytes,
                                                fin, &rs, &nr, &cs, &nc);
        q->bytes = stop;
        if (!ok) {
            b->oom = true;
            return;
        }
        (void)cs;
        if (nr) { /* a reasoning comes first, before any answer text */
            if (!q->rs_open) open_item(q, b, true);
            cJSON *j = at_part(q, true);
            serve_add_text(j, "delta", rs, nr);
            sse(q, b, "response.reasoning_text.delta", j);
        }
        /* the answer's text that may be sent: with tools, not from where a call may begin;
           finished, the text before the calls (tc) */
        const struct serve_text *x = &q->think.th.content;
        struct recur_tool_calls *tc = fin ? serve_api_calls(s, t, x->s, x->len) : NULL;
        const size_t limit = tc                 ? strlen(tc->content)
                             : t->tools && !fin ? serve_tools_sendable(s, x->s, x->len)
                                                : x->len;
        if (nc || fin) {
            if (q->rs_open && !q->rs_done)
                close_item(q, b, true, reasoning_status(c, x->len), q->think.th.reasoning.len);
            /* the message, unless the model only called */
            if (!q->msg_open && (limit > q->sent || (fin && !(tc && limit == 0))))
                open_item(q, b, false);
        }
        if (limit > q->sent) {
            cJSON *j = at_part(q, false);
            serve_add_text(j, "delta", x->s + q->sent, limit - q->sent);
            cJSON_AddArrayToObject(j, "logprobs");
            sse(q, b, "response.output_text.delta", j);
            q->sent = limit;
        }
        if (fin) {
            if (q->msg_open)
                close_item(q, b, false, incomplete(c) ? "incomplete" : "completed", limit);
            for (size_t k = 0; tc && k < tc->n_calls; k++) call_events(s, q, b, t, tc, k);
            recur_tool_calls_free(tc);
            q->phase = 3;
        }
        /* a token whose text the splitter holds (the start of a tag) sent nothing: look at the
           next ones now (returning nothing would wait for a token that may never come) */
        if (b->len || b->oom || fin) return;
    }
}

char *serve_responses_event(struct server *s, struct serve_request *r, bool *end) {
    struct serve_responses_req *q = r->resp;
    struct task *t = r->tasks[0];
    struct choice *c = &t->choice[0];
    struct evbuf b = {0};
    *end = q->done;
    if (q->done) return NULL;
    if (t->state == TASK_FAILED) {
        q->done = true;
        const char *why = t->error[0] ? t->error : "the request failed";
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(s, r, "failed", why));
        sse(q, &b, "response.failed", j);
    } else if (q->phase < 2) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(s, r, "in_progress", NULL));
        sse(q, &b, q->phase++ == 0 ? "response.created" : "response.in_progress", j);
    } else if (q->phase == 2) {
        if (t->state == TASK_QUEUED) return NULL;
        item_events(s, q, &b, t, c);
    } else {
        q->done = true;
        cJSON *resp = serve_responses_final(s, r);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", resp);
        sse(q, &b, incomplete(c) ? "response.incomplete" : "response.completed", j);
    }
    if (b.oom) { /* without memory the stream ends there */
        free(b.s);
        q->done = true;
        *end = true;
        return NULL;
    }
    return b.s;
}
