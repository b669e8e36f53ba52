/*
 * recur serve: the answers of /v1/responses (see responses.c): OpenAI's response object, whole
 * or as its typed server-sent events (`event: TYPE`, `data: {"type": TYPE, "sequence_number":
 * n, ...}`): response.created, response.in_progress, response.output_item.added,
 * response.content_part.added, response.output_text.delta (one per token that released text),
 * response.output_text.done, response.content_part.done, response.output_item.done, then
 * response.completed or response.incomplete (the length ended it); response.failed when the
 * task failed. A finished response is kept (responses_store.c) unless store was false.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "responses.h"

/* The message item: its text so far (text NULL: none yet, content []). */
static cJSON *message_item(const struct serve_responses_req *q, const char *status,
                           const struct choice *c, bool with_text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", q->msg_id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "status", status);
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (with_text) {
        cJSON *part = cJSON_CreateObject();
        cJSON_AddStringToObject(part, "type", "output_text");
        serve_add_text(part, "text", c->text, c->len);
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
static cJSON *response_json(const struct serve_request *r, const char *status, const char *error) {
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
            if (ended) cJSON_AddItemToArray(output, message_item(q, status, c, true));
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
    cJSON *conv = cJSON_Duplicate(q->conv, true), *m = cJSON_CreateObject();
    if (m) {
        cJSON_AddStringToObject(m, "role", "assistant");
        serve_add_text(m, "content", c->text, c->len);
    }
    if (conv && m && cJSON_AddItemToArray(conv, m)) m = NULL;
    cJSON_Delete(m);
    char *ct = conv ? cJSON_PrintUnformatted(conv) : NULL;
    cJSON_Delete(conv);
    serve_responses_put(s->responses, r->tasks[0]->tenant, q->id, ct,
                        cJSON_PrintUnformatted(response));
}

cJSON *serve_responses_final(const struct server *s, const struct serve_request *r) {
    const struct choice *c = &r->tasks[0]->choice[0];
    cJSON *j = response_json(r, incomplete(c) ? "incomplete" : "completed", NULL);
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

char *serve_responses_event(struct server *s, struct serve_request *r, bool *end) {
    struct serve_responses_req *q = r->resp;
    struct task *t = r->tasks[0];
    struct choice *c = &t->choice[0];
    *end = q->done;
    if (q->done) return NULL;
    cJSON *j;
    if (t->state == TASK_FAILED) {
        q->done = true;
        const char *why = t->error[0] ? t->error : "the request failed";
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(r, "failed", why));
        return sse(q, "response.failed", j);
    }
    switch (q->phase) {
    case 0:
    case 1:
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", response_json(r, "in_progress", NULL));
        return sse(q, q->phase++ == 0 ? "response.created" : "response.in_progress", j);
    case 2:
        q->phase++;
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "output_index", 0);
        cJSON_AddItemToObject(j, "item", message_item(q, "in_progress", c, false));
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
        serve_add_text(j, "text", c->text, c->len);
        cJSON_AddArrayToObject(j, "logprobs");
        return sse(q, "response.output_text.done", j);
    }
    case 5: {
        q->phase++;
        j = at_part(q);
        cJSON *item = message_item(q, "completed", c, true);
        cJSON *part = cJSON_DetachItemFromArray(cJSON_GetObjectItem(item, "content"), 0);
        cJSON_Delete(item);
        cJSON_AddItemToObject(j, "part", part);
        return sse(q, "response.content_part.done", j);
    }
    case 6:
        q->phase++;
        j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "output_index", 0);
        cJSON_AddItemToObject(j, "item",
                              message_item(q, incomplete(c) ? "incomplete" : "completed", c, true));
        return sse(q, "response.output_item.done", j);
    default: {
        q->done = true;
        cJSON *resp = serve_responses_final(s, r);
        j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "response", resp);
        return sse(q, incomplete(c) ? "response.incomplete" : "response.completed", j);
    }
    }
}
