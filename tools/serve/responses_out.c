/*
 * recur serve: the answers of /v1/responses (see responses.c): OpenAI's response object, whole
 * or as its typed server-sent events (`event: TYPE`, `data: {"type": TYPE, "sequence_number":
 * n, ...}`): response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta (one per token that released text),
 * response.output_text.done, response.content_part.done, response.output_item.done, then
 * response.completed or response.incomplete (the length ended it); response.failed when the
 * task failed. A finished response is kept (responses_store.c) unless store was false. With
 * tools, the calls are function_call items after the message (left out when the model only
 * called; streamed, it opens at its first text), each streamed as response.output_item.added,
 * response.function_call_arguments.delta (the whole arguments), .done, output_item.done.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "responses.h"

/* The answer's text: the choice's, or with calls the text before them (tc: serve_api_calls). */
static const char *answer_text(const struct choice *c, const struct recur_tool_calls *tc,
                               size_t *len) {
    *len = tc ? strlen(tc->content) : c->len;
    return tc ? tc->content : c->text;
}

/* The message item: its text so far (with_text false: none yet, content []). */
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

static bool incomplete(const struct choice *c) {
    return c->finish_reason && strcmp(c->finish_reason, "length") == 0;
}

/* The response object: status "in_progress" (no output, no usage), "completed", "incomplete"
 * or "failed" (error). */
static cJSON *response_json(const struct server *s, const struct serve_request *r,
                            const char *status, const char *error) {
    const struct serve_responses_req *q = r->resp;
    const struct task *t = r->tasks[0];
    const struct choice *c = &t->choice[0];
    const bool ended = strcmp(status, "in_progress") != 0 && strcmp(status, "failed") != 0;
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
            /* the message (left out when the model only called), then the calls */
            struct recur_tool_calls *tc = ended ? serve_api_calls(s, t, c->text, c->len) : NULL;
            size_t len;
            const char *text = answer_text(c, tc, &len);
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
                                "reasoning_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + c->n_out);
    }
    if (!ended) cJSON_AddNullToObject(j, "usage");
    return j;
}

/* Keeps a finished response for previous_response_id and GET (unless store is false). */
static void keep(const struct server *s, const struct serve_request *r, const cJSON *response) {
    const struct serve_responses_req *q = r->resp;
    const struct choice *c = &r->tasks[0]->choice[0];
    if (!q->store || !s->responses) return;
    /* the answer as chat's assistant message: with its calls (api_tools.c), which the next
       input's function_call_output items answer */
    cJSON *conv = cJSON_Duplicate(q->conv, true),
          *m = serve_api_assistant_message(s, r->tasks[0], c->text, c->len);
    if (conv && m && cJSON_AddItemToArray(conv, m)) m = NULL;
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

/* "event: TYPE\ndata: JSON\n\n" of j (taken over), with its type and sequence number. */
static char *sse(struct serve_responses_req *q, const char *type, cJSON *j) {
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
    if (!body) return NULL;
    const size_t n = strlen(body) + strlen(type) + 20;
    char *ev = malloc(n);
    if (ev) snprintf(ev, n, "event: %s\ndata: %s\n\n", type, body);
    free(body);
    return ev;
}

/* The fields that place an event in the message's one text part. */
static cJSON *at_part(const struct serve_responses_req *q) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "item_id", q->msg_id);
    cJSON_AddNumberToObject(j, "output_index", 0);
    cJSON_AddNumberToObject(j, "content_index", 0);
    return j;
}

/* With tools, after the message: call q->call's four events (output_item.added,
 * function_call_arguments.delta with the whole arguments, .done, output_item.done); NULL when
 * every call is sent. */
static char *call_event(const struct server *s, struct serve_responses_req *q, const struct task *t,
                        const struct recur_tool_calls *tc) {
    if (!tc || q->call >= tc->n_calls) return NULL;
    const size_t k = q->call;
    const double index = (double)((q->no_msg ? 0 : 1) + k);
    cJSON *item = serve_responses_call_item(s, t, tc, k, q->call_ev != 0);
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(item, "id"));
    cJSON *j = cJSON_CreateObject();
    const char *type;
    if (q->call_ev == 0 || q->call_ev == 3) {
        type = q->call_ev == 0 ? "response.output_item.added" : "response.output_item.done";
        cJSON_AddNumberToObject(j, "output_index", index);
        cJSON_AddItemToObject(j, "item", item);
        item = NULL;
    } else {
        const bool delta = q->call_ev == 1;
        type = delta ? "response.function_call_arguments.delta"
                     : "response.function_call_arguments.done";
        cJSON_AddStringToObject(j, "item_id", id ? id : "");
        cJSON_AddNumberToObject(j, "output_index", index);
        cJSON_AddStringToObject(j, delta ? "delta" : "arguments", tc->calls[k].arguments);
    }
    cJSON_Delete(item);
    if (++q->call_ev == 4) {
        q->call_ev = 0;
        q->call++;
    }
    return sse(q, type, j);
}

/* The next event; tc: the finished answer's calls (NULL: none, or not finished), limit: the
 * text that may be sent (with tools, not from where a call may begin; finished, the text
 * before the calls). */
static char *next_event(struct server *s, struct serve_request *r, bool *end,
                        const struct recur_tool_calls *tc, size_t limit) {
    struct serve_responses_req *q = r->resp;
    struct task *t = r->tasks[0];
    struct choice *c = &t->choice[0];
    size_t len;
    const char *text = answer_text(c, tc, &len);
    *end = q->done;
    if (q->done) return NULL;
    cJSON *j;
    if (t->state == TASK_FAILED) {
        q->done = true;
        const char *why = t->error[0] ? t->error : "the request failed";
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(s, r, "failed", why));
        return sse(q, "response.failed", j);
    }
    switch (q->phase) {
    case 0:
    case 1:
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(s, r, "in_progress", NULL));
        return sse(q, q->phase++ == 0 ? "response.created" : "response.in_progress", j);
    case 2:
        /* with tools the message waits for its first text: a model that only calls has none */
        if (t->tools && limit == 0) {
            if (!c->finished) return NULL;
            if (tc) {
                q->no_msg = true;
                q->phase = 7;
                return next_event(s, r, end, tc, limit);
            }
        }
        q->phase++;
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "output_index", 0);
        cJSON_AddItemToObject(j, "item", message_item(q, "in_progress", NULL, 0, false));
        return sse(q, "response.output_item.added", j);
    case 3: {
        q->phase++;
        j = at_part(q);
        cJSON *part = cJSON_AddObjectToObject(j, "part");
        cJSON_AddStringToObject(part, "type", "output_text");
        cJSON_AddStringToObject(part, "text", "");
        cJSON_AddArrayToObject(part, "annotations");
        cJSON_AddArrayToObject(part, "logprobs");
        return sse(q, "response.content_part.added", j);
    }
    case 4: {
        /* the text a token released, one delta per token that released some (what is held
           back, the start of a stop string or of a character, comes with a later one) */
        if (t->state == TASK_QUEUED) return NULL;
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
        if (stop > limit) stop = limit > q->bytes ? limit : q->bytes;
        q->tokens = upto;
        if (stop > q->bytes) {
            j = at_part(q);
            serve_add_text(j, "delta", c->text + q->bytes, stop - q->bytes);
            cJSON_AddArrayToObject(j, "logprobs");
            q->bytes = stop;
            return sse(q, "response.output_text.delta", j);
        }
        if (t->state != TASK_DONE) return NULL;
        q->phase++;
        j = at_part(q);
        serve_add_text(j, "text", text, len);
        cJSON_AddArrayToObject(j, "logprobs");
        return sse(q, "response.output_text.done", j);
    }
    case 5: {
        q->phase++;
        j = at_part(q);
        cJSON *item = message_item(q, "completed", text, len, true);
        cJSON *part = cJSON_DetachItemFromArray(cJSON_GetObjectItem(item, "content"), 0);
        cJSON_Delete(item);
        cJSON_AddItemToObject(j, "part", part);
        return sse(q, "response.content_part.done", j);
    }
    case 6:
        q->phase++;
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "output_index", 0);
        cJSON_AddItemToObject(
            j, "item",
            message_item(q, incomplete(c) ? "incomplete" : "completed", text, len, true));
        return sse(q, "response.output_item.done", j);
    default: {
        char *ev = call_event(s, q, t, tc);
        if (ev) return ev;
        q->done = true;
        cJSON *resp = serve_responses_final(s, r);
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", resp);
        return sse(q, incomplete(c) ? "response.incomplete" : "response.completed", j);
    }
    }
}

char *serve_responses_event(struct server *s, struct serve_request *r, bool *end) {
    const struct task *t = r->tasks[0];
    const struct choice *c = &t->choice[0];
    struct recur_tool_calls *tc = NULL;
    size_t limit = c->len;
    if (t->tools && c->finished) {
        tc = serve_api_calls(s, t, c->text, c->len);
        if (tc) limit = strlen(tc->content);
    } else if (t->tools) {
        limit = serve_tools_sendable(s, c->text, c->len);
    }
    char *ev = next_event(s, r, end, tc, limit);
    recur_tool_calls_free(tc);
    return ev;
}
