/*
 * recur serve's answers (see api.h): a request's tasks are submitted to the decode loop,
 * then answered whole (waiting, with the client and the clock watched) or as server-sent
 * events. Shapes:
 *
 *  - /v1/completions: OpenAI's text_completion; logprobs in the legacy shape {tokens,
 *    token_logprobs, top_logprobs [{text: logprob}], text_offset (bytes)}; with echo the prompt
 *    comes first, its first token's logprob null. Streamed: one chunk per token (see
 *    choice_event), the finish_reason in the last chunk of each choice; with
 *    stream_options.include_usage every chunk has "usage": null and a last chunk with
 *    "choices": [] has the usage; then "data: [DONE]".
 *  - /v1/chat/completions: chat.completion / chat.completion.chunk (a first chunk per choice
 *    with delta {role, content: null}, content deltas, a chunk with an empty delta and the
 *    finish_reason); logprobs {content: [{token, logprob, bytes, top_logprobs}], refusal}.
 *  - both OpenAI shapes carry system_fingerprint (s->fingerprint) in every object and chunk.
 *  - both OpenAI shapes carry llama-server's "timings" {cache_n, prompt_n, prompt_ms, ...,
 *    predicted_per_second} beside "usage" (several tasks: counts summed, the longest times),
 *    and streamed in each choice's chunk with its finish_reason; with timings_per_token, every
 *    content chunk (and /completion's) has them so far.
 *  - /completion: llama-server's object (an array for several prompts or n_cmpl > 1), with
 *    completion_probabilities {id, token, logprob, bytes, top_logprobs} or, with
 *    post_sampling_probs, {id, token, prob, bytes, top_probs}; streamed: {content, tokens,
 *    stop: false} chunks, then the whole object with content "" and stop true.
 *
 * Log-probabilities are the log-softmax of the model's raw logits (no temperature, bias or
 * penalty), computed in double by the decode loop.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"
#include "api.h"

/* ---- waiting for the decode loop --------------------------------------------------------- */

static bool timed_out(const struct server *s, const struct task *t) {
    return s->lim.timeout_s > 0 && serve_now() - t->t_queued > s->lim.timeout_s;
}

/* Marks r's unfinished tasks cancelled with why (s->mu held): the decode loop drops them, and
 * their end wakes the connection. */
static void cancel_all(struct server *s, struct serve_request *r, const char *why,
                       unsigned status) {
    for (int ti = 0; ti < r->n_tasks; ti++) {
        struct task *t = r->tasks[ti];
        if (t->state != TASK_QUEUED && t->state != TASK_RUNNING) continue;
        if (why && !t->error[0]) {
            snprintf(t->error, sizeof t->error, "%s", why);
            t->err_status = status;
        }
        t->cancelled = true;
    }
    pthread_cond_signal(&s->work);
}

/* park.expire: the client left, or the request's time is up. */
static void expire_request(struct server *s, struct serve_park *p, const char *why) {
    cancel_all(s, p->owner, why, strcmp(why, "timed out") == 0 ? 504 : 500);
}

static void add_usage(cJSON *j, const struct serve_request *r) {
    int32_t prompt = 0, done = 0, cached = 0, reasoning = 0;
    for (int ti = 0; ti < r->n_tasks; ti++) {
        const struct task *t = r->tasks[ti];
        prompt += t->n_prompt;
        cached += t->n_cached;
        for (int i = 0; i < t->n; i++) done += t->choice[i].n_out;
        for (int i = 0; r->api == API_CHAT && i < t->n; i++)
            reasoning += serve_think_tokens(t, &t->choice[i]);
    }
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", done);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + done);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", cached);
    if (r->api == API_CHAT) /* OpenAI's: the tokens of the reasoning (reasoning.h) */
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "completion_tokens_details"),
                                "reasoning_tokens", reasoning);
}

static cJSON *openai_object(const struct server *s, const struct serve_request *r, bool chunk) {
    cJSON *j = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "%s-%llu", r->api == API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->tasks[0]->id);
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "object",
                            r->api == API_CHAT
                                ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                : "text_completion");
    cJSON_AddNumberToObject(j, "created", (double)time(NULL));
    cJSON_AddStringToObject(j, "model", s->model_name ? s->model_name : "");
    cJSON_AddStringToObject(j, "system_fingerprint", s->fingerprint);
    return j;
}

static const char *stop_type(enum stop_kind k) {
    switch (k) {
    case STOP_EOS:
        return "eos";
    case STOP_LIMIT:
        return "limit";
    case STOP_WORD:
        return "word";
    default:
        return "none";
    }
}

static double per(double a, double b) {
    return b > 0 ? a / b : 0.0;
}

/* llama-server's "timings" of a task, or the sums (counts) and the longest (times) of a
 * request's tasks. */
struct timings {
    double cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms;
};

/* Task t's, with n_out tokens generated (a choice's, or all of its choices'). A stream's choice
 * that ends before its task does is timed to now. */
static struct timings timings_of(const struct task *t, int32_t n_out) {
    const double end = t->state == TASK_DONE ? t->t_done : serve_now();
    const double first = t->t_first > 0 ? t->t_first : end; /* no token: the prompt only */
    return (struct timings){t->n_cached, t->n_prompt - t->n_cached, (first - t->t_started) * 1e3,
                            n_out, (end - first) * 1e3};
}

static void add_timings(cJSON *j, struct timings m) {
    cJSON *tm = cJSON_AddObjectToObject(j, "timings");
    cJSON_AddNumberToObject(tm, "cache_n", m.cache_n);
    cJSON_AddNumberToObject(tm, "prompt_n", m.prompt_n);
    cJSON_AddNumberToObject(tm, "prompt_ms", m.prompt_ms);
    cJSON_AddNumberToObject(tm, "prompt_per_token_ms", per(m.prompt_ms, m.prompt_n));
    cJSON_AddNumberToObject(tm, "prompt_per_second", per(1e3 * m.prompt_n, m.prompt_ms));
    cJSON_AddNumberToObject(tm, "predicted_n", m.predicted_n);
    cJSON_AddNumberToObject(tm, "predicted_ms", m.predicted_ms);
    cJSON_AddNumberToObject(tm, "predicted_per_token_ms", per(m.predicted_ms, m.predicted_n));
    cJSON_AddNumberToObject(tm, "predicted_per_second", per(1e3 * m.predicted_n, m.predicted_ms));
}

/* A request's: its tasks' counts summed, the longest of their times. */
static struct timings request_timings(const struct serve_request *r) {
    struct timings all = {0};
    for (int ti = 0; ti < r->n_tasks; ti++) {
        const struct task *t = r->tasks[ti];
        int32_t n_out = 0;
        for (int i = 0; i < t->n; i++) n_out += t->choice[i].n_out;
        const struct timings m = timings_of(t, n_out);
        all.cache_n += m.cache_n;
        all.prompt_n += m.prompt_n;
        all.predicted_n += m.predicted_n;
        if (m.prompt_ms > all.prompt_ms) all.prompt_ms = m.prompt_ms;
        if (m.predicted_ms > all.predicted_ms) all.predicted_ms = m.predicted_ms;
    }
    return all;
}

/* /completion's object for choice i of t: whole (the text and, deferred into a when a is not
 * NULL, the probabilities) or the final stream event's (content ""). */
static cJSON *llama_json(const struct server *s, struct serve_parts *a,
                         const struct serve_request *r, const struct task *t, int i, int index,
                         bool whole) {
    const struct choice *c = &t->choice[i];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", index);
    if (whole)
        serve_add_text(j, "content", c->text, c->len);
    else
        cJSON_AddStringToObject(j, "content", "");
    cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
    for (int32_t k = 0; whole && r->return_tokens && k < c->n_out; k++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(c->out[k]));
    cJSON_AddNumberToObject(j, "id_slot", c->seq);
    cJSON_AddBoolToObject(j, "stop", true);
    cJSON_AddStringToObject(j, "model", s->model_name ? s->model_name : "");
    cJSON_AddNumberToObject(j, "tokens_predicted", c->n_out);
    cJSON_AddNumberToObject(j, "tokens_evaluated", t->n_prompt);
    if (r->settings)
        cJSON_AddItemToObject(j, "generation_settings", cJSON_Duplicate(r->settings, true));
    if (t->prompt_text)
        cJSON_AddItemToObject(j, "prompt", serve_text_json(t->prompt_text, strlen(t->prompt_text)));
    cJSON_AddBoolToObject(j, "has_new_line", c->text && memchr(c->text, '\n', c->len) != NULL);
    cJSON_AddBoolToObject(j, "truncated", c->truncated);
    cJSON_AddStringToObject(j, "stop_type", stop_type(c->stop_kind));
    cJSON_AddStringToObject(j, "stopping_word",
                            c->stop_kind == STOP_WORD && c->stop_word >= 0 &&
                                    c->stop_word < t->n_stop
                                ? t->stop[c->stop_word]
                                : "");
    cJSON_AddNumberToObject(j, "tokens_cached", t->n_cached);
    add_timings(j, timings_of(t, c->n_out));
    if (whole && r->n_probs > 0) {
        cJSON_AddItemToObject(
            j, "completion_probabilities",
            serve_entries_json(s, a, SERVE_PART_LLAMA, t, c, 0, serve_tokens_ready(c, c->len)));
    }
    return j;
}

/* llama-server's response_fields: only the listed paths, "a/b" moved to the top under its
 * path. */
static cJSON *project(cJSON *j, const cJSON *fields) {
    cJSON *out = cJSON_CreateObject();
    for (const cJSON *f = fields->child; f; f = f->next) {
        const cJSON *at = j;
        char path[256];
        snprintf(path, sizeof path, "%s", f->valuestring);
        for (char *part = strtok(path, "/"); part && at; part = strtok(NULL, "/"))
            at = cJSON_IsObject(at) ? cJSON_GetObjectItemCaseSensitive(at, part) : NULL;
        if (at && at != j && !cJSON_GetObjectItemCaseSensitive(out, f->valuestring))
            cJSON_AddItemToObject(out, f->valuestring, cJSON_Duplicate(at, true));
    }
    cJSON_Delete(j);
    return out;
}

/* The whole answer of a finished request, its per-token arrays deferred into a. The tasks have
 * ended, so nothing changes them: s->mu is not needed. */
static cJSON *final_json(const struct server *s, struct serve_parts *a,
                         const struct serve_request *r) {
    if (r->api == API_RESPONSES) return serve_responses_final(s, r);
    if (r->api == API_MESSAGES) return serve_messages_json(s, r);
    if (r->api == API_LLAMA) {
        cJSON *list = cJSON_CreateArray();
        for (int ti = 0; ti < r->n_tasks; ti++)
            for (int i = 0; i < r->tasks[ti]->n; i++) {
                cJSON *j = llama_json(s, a, r, r->tasks[ti], i, ti * r->tasks[ti]->n + i, true);
                cJSON_AddItemToArray(list, r->response_fields ? project(j, r->response_fields) : j);
            }
        if (cJSON_GetArraySize(list) == 1) {
            cJSON *one = cJSON_DetachItemFromArray(list, 0);
            cJSON_Delete(list);
            return one;
        }
        return list;
    }
    cJSON *j = openai_object(s, r, false), *arr = cJSON_AddArrayToObject(j, "choices");
    for (int ti = 0; ti < r->n_tasks; ti++) {
        const struct task *t = r->tasks[ti];
        for (int i = 0; i < t->n; i++) {
            const struct choice *c = &t->choice[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", ti * t->n + i);
            const int32_t n_tok = serve_tokens_ready(c, c->len);
            const char *finish = c->finish_reason ? c->finish_reason : "stop";
            if (r->api == API_CHAT) {
                cJSON *m = cJSON_AddObjectToObject(o, "message");
                cJSON_AddStringToObject(m, "role", "assistant");
                /* the reasoning apart (llama-server's message.reasoning_content, when any),
                   then the calls read from the content (toolcall.c) */
                struct serve_think th;
                if (!serve_think_whole(&th, t, c)) {
                    serve_think_free(&th);
                    cJSON_Delete(j);
                    return NULL;
                }
                struct recur_tool_calls *tc = serve_tools_parse(s, t, th.content.s, th.content.len);
                if (tc && tc->n_calls) {
                    if (tc->content[0])
                        serve_add_text(m, "content", tc->content, strlen(tc->content));
                    else
                        cJSON_AddNullToObject(m, "content");
                    cJSON_AddItemToObject(m, "tool_calls",
                                          serve_tool_calls_json(s, t, i, tc, false));
                    finish = "tool_calls";
                } else {
                    serve_add_text(m, "content", th.content.s, th.content.len);
                }
                recur_tool_calls_free(tc);
                if (th.reasoning.len)
                    serve_add_text(m, "reasoning_content", th.reasoning.s, th.reasoning.len);
                serve_think_free(&th);
                if (r->chat_logprobs) {
                    cJSON *lp = cJSON_AddObjectToObject(o, "logprobs");
                    cJSON_AddItemToObject(
                        lp, "content", serve_entries_json(s, a, SERVE_PART_CHAT, t, c, 0, n_tok));
                    cJSON_AddNullToObject(lp, "refusal");
                } else {
                    cJSON_AddNullToObject(o, "logprobs");
                }
            } else {
                const size_t base = r->echo && t->prompt_text ? strlen(t->prompt_text) : 0;
                char *both = malloc(base + c->len + 1);
                if (both) {
                    memcpy(both, t->prompt_text ? t->prompt_text : "", base);
                    memcpy(both + base, c->text ? c->text : "", c->len);
                }
                serve_add_text(o, "text", both ? both : "", both ? base + c->len : 0);
                free(both);
                if (r->logprobs >= 0)
                    cJSON_AddItemToObject(
                        o, "logprobs", serve_legacy_logprobs(s, a, t, c, r->echo, 0, n_tok, base));
                else
                    cJSON_AddNullToObject(o, "logprobs");
            }
            cJSON_AddStringToObject(o, "finish_reason", finish);
            cJSON_AddItemToArray(arr, o);
        }
    }
    add_usage(j, r);
    add_timings(j, request_timings(r));
    return j;
}

static char *error_text(const struct task *t, int *status) {
    *status = t->err_status ? (int)t->err_status : 500;
    return t->error[0] ? (char *)t->error : (char *)"the request failed";
}

/* The error type of an HTTP status, as the answers name it. */
static const char *error_type(int status) {
    return status == 503 ? "unavailable_error" : status == 504 ? "timeout_error" : "server_error";
}

/* ---- streaming: server-sent events ------------------------------------------------------- */

struct sent {
    size_t bytes;   /* text bytes sent */
    int32_t tokens; /* tokens whose logprobs were sent */
    bool started;   /* chat: the role chunk; echo: the prompt */
    bool finished;  /* the finish_reason (OpenAI) or the final object (/completion) */
    struct serve_think_stream think; /* chat: the text split into reasoning and content */
    bool calls;     /* chat with tools: the calls were sent (finish_reason "tool_calls") */
    bool tail_sent; /* chat with tools: the text after the last content sent, and the calls */
};

struct stream {
    struct server *s;
    struct serve_request *r; /* r->park: the connection, parked between events */
    struct sent sent[SERVE_MAX_PROMPTS][SERVE_MAX_N];
    bool done_sent;
    int32_t progress[SERVE_MAX_PROMPTS]; /* return_progress: the steps reported */
    int32_t reported[SERVE_MAX_PROMPTS]; /* and the prompt tokens they counted */
    struct serve_parts ans;              /* an echo's prompt logprobs, written as they are sent */
    struct serve_lazy *pending;          /* an event not yet all handed to MHD */
};

static char *event(cJSON *j) {
    char *body = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!body) return NULL;
    const size_t n = strlen(body);
    char *ev = malloc(n + 9);
    if (ev) snprintf(ev, n + 9, "data: %s\n\n", body);
    free(body);
    return ev;
}

/* An OpenAI chunk with one choice object (returned to fill in). */
static cJSON *chunk(const struct stream *st, int index, cJSON **root) {
    *root = openai_object(st->s, st->r, true);
    cJSON *arr = cJSON_AddArrayToObject(*root, "choices"), *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToArray(arr, o);
    if (st->r->include_usage) cJSON_AddNullToObject(*root, "usage");
    return o;
}

/* Chat with tools, choice i finished: the rest of its text (through the reasoning splitter)
 * and its calls, read from the whole content, in one delta, then the finish chunk
 * ("tool_calls" when there were calls). */
static char *tool_event(struct stream *st, struct task *t, int i, int index, struct sent *sn) {
    const struct choice *c = &t->choice[i];
    cJSON *root = NULL, *o = chunk(st, index, &root);
    if (!sn->tail_sent) {
        sn->tail_sent = true;
        const size_t content_sent = sn->think.sent_content;
        const char *rs, *cs;
        size_t nr, nc;
        const size_t from = sn->bytes < c->len ? sn->bytes : c->len;
        if (!serve_think_stream_step(&sn->think, t, c->text ? c->text + from : "", c->len - from,
                                     true, &rs, &nr, &cs, &nc)) {
            cJSON_Delete(root);
            st->done_sent = true;
            return event(cJSON_Parse("{\"error\": {\"message\": \"out of memory\", \"type\": "
                                     "\"server_error\", \"code\": 500}}"));
        }
        sn->bytes = c->len;
        sn->tokens = c->n_out;
        const struct serve_text *content = &sn->think.th.content;
        struct recur_tool_calls *tc = serve_tools_parse(st->s, t, content->s, content->len);
        if (nr || nc || (tc && tc->n_calls)) {
            cJSON *d = cJSON_AddObjectToObject(o, "delta");
            if (nr) serve_add_text(d, "reasoning_content", rs, nr);
            if (tc && tc->n_calls) {
                const size_t n = strlen(tc->content); /* what was sent is a prefix of it */
                if (n > content_sent)
                    serve_add_text(d, "content", tc->content + content_sent, n - content_sent);
                cJSON_AddItemToObject(d, "tool_calls",
                                      serve_tool_calls_json(st->s, t, i, tc, true));
                sn->calls = true;
            } else if (nc) { /* no calls after all: the rest is content */
                serve_add_text(d, "content", cs, nc);
            }
            recur_tool_calls_free(tc);
            cJSON_AddNullToObject(o, "logprobs");
            cJSON_AddNullToObject(o, "finish_reason");
            return event(root);
        }
        recur_tool_calls_free(tc);
    }
    sn->finished = true;
    cJSON_AddObjectToObject(o, "delta");
    cJSON_AddNullToObject(o, "logprobs");
    cJSON_AddStringToObject(o, "finish_reason",
                            sn->calls          ? "tool_calls"
                            : c->finish_reason ? c->finish_reason
                                               : "stop");
    add_timings(root, timings_of(t, c->n_out));
    return event(root);
}

/* The next event of choice i of task t (index: its place in the answer), NULL: none yet. */
static char *choice_event(struct stream *st, struct task *t, int i, int index, struct sent *sn) {
    const struct server *s = st->s;
    const struct serve_request *r = st->r;
    struct choice *c = &t->choice[i];
    cJSON *root = NULL, *o;
    if (r->api == API_CHAT && !sn->started) {
        sn->started = true;
        o = chunk(st, index, &root);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(d, "role", "assistant");
        cJSON_AddNullToObject(d, "content"); /* as OpenAI's and llama-server's first chunk */
        cJSON_AddNullToObject(o, "logprobs");
        cJSON_AddNullToObject(o, "finish_reason");
        return event(root);
    }
    const bool prompt_in = t->t_first > 0 || t->state == TASK_DONE;
    if (r->api == API_OPENAI && r->echo && !sn->started) {
        if (!prompt_in) return NULL; /* the prompt's logprobs are not all there yet */
        sn->started = true;
        o = chunk(st, index, &root);
        const char *pt = t->prompt_text ? t->prompt_text : "";
        serve_add_text(o, "text", pt, strlen(pt));
        if (r->logprobs >= 0)
            cJSON_AddItemToObject(o, "logprobs",
                                  serve_legacy_logprobs(s, &st->ans, t, c, true, 0, 0, 0));
        else
            cJSON_AddNullToObject(o, "logprobs");
        cJSON_AddNullToObject(o, "finish_reason");
        return event(root);
    }
    if (t->state == TASK_QUEUED) return NULL;
    /* One token a chunk, with the text its arrival released (what was then held back, the
       start of a stop string or of a UTF-8 character, comes with a later token), so that a
       chunk never carries two tokens' probabilities however many tokens came since the last
       one; at the end, what was still held comes with the last token. Without per-token data
       (OpenAI's shapes without logprobs) a token that released no text is sent with the next
       one that does. */
again:;
    const int32_t from = sn->tokens;
    /* n_out first: the arrays are set up by the scheduler outside s->mu, before any token */
    const int32_t avail = c->n_out == 0 ? 0
                          : c->finished ? serve_tokens_ready(c, c->len)
                                        : c->n_out;
    const bool per_token = r->api == API_LLAMA || (r->api == API_CHAT && r->chat_logprobs) ||
                           (r->api == API_OPENAI && r->logprobs >= 0);
    int32_t upto = from;
    size_t end = sn->bytes;
    while (upto < avail) {
        const size_t e = c->released[upto] < c->len ? c->released[upto] : c->len;
        upto++;
        if (e > end) end = e;
        if (end > sn->bytes || per_token) break;
    }
    if (upto == avail && c->finished && c->text) end = c->len;
    if (r->api == API_CHAT && t->tools) { /* toolcall.c: no content from where a call begins */
        if (c->finished && !sn->finished) return tool_event(st, t, i, index, sn);
        const size_t ok = serve_tools_sendable(s, c->text, c->len);
        if (end > ok) end = ok > sn->bytes ? ok : sn->bytes;
    }
    if (!per_token && end == sn->bytes) upto = from; /* nothing to say for them yet */
    bool more = end > sn->bytes || upto > from;
    const char *piece_at = c->text ? c->text + sn->bytes : "";
    const size_t piece_len = end - sn->bytes;
    if (r->api == API_LLAMA) {
        if (!more) return NULL; /* the end is the final object, sent once the task is done */
        sn->bytes = end;
        sn->tokens = upto;
        root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "index", index);
        serve_add_text(root, "content", piece_at, piece_len);
        cJSON *toks = cJSON_AddArrayToObject(root, "tokens");
        for (int32_t k = from; k < upto; k++)
            cJSON_AddItemToArray(toks, cJSON_CreateNumber(c->out[k]));
        cJSON_AddBoolToObject(root, "stop", false);
        cJSON_AddNumberToObject(root, "id_slot", c->seq);
        if (r->n_probs > 0)
            cJSON_AddItemToObject(root, "completion_probabilities",
                                  serve_entries_json(s, NULL, SERVE_PART_LLAMA, t, c, from, upto));
        if (r->timings_per_token) add_timings(root, timings_of(t, c->n_out));
        return event(root);
    }
    const bool finish_now = c->finished && !sn->finished;
    if (!more && !finish_now) return NULL;
    sn->bytes = end;
    sn->tokens = upto;
    if (r->api == API_CHAT) {
        /* the text through the reasoning splitter (reasoning.h); the end releases what it held */
        const char *rs, *cs;
        size_t nr, nc;
        if (!serve_think_stream_step(&sn->think, t, piece_at, piece_len, !more, &rs, &nr, &cs,
                                     &nc)) {
            st->done_sent = true;
            return event(cJSON_Parse("{\"error\": {\"message\": \"out of memory\", \"type\": "
                                     "\"server_error\", \"code\": 500}}"));
        }
        if (!more) more = nr || nc; /* a last delta before the finish */
        /* a token that released nothing after the split is sent with the next one, unless its
           logprobs are asked for: look at the next ones now (returning nothing here would park
           the stream with no one to wake it when the task has already ended) */
        else if (!nr && !nc && !r->chat_logprobs)
            goto again;
        o = chunk(st, index, &root);
        cJSON *d = cJSON_AddObjectToObject(o, "delta");
        if (more) { /* content first; the finish comes in a chunk of its own */
            if (nr) serve_add_text(d, "reasoning_content", rs, nr);
            if (nc || !nr) serve_add_text(d, "content", cs, nc);
            if (r->chat_logprobs) {
                cJSON *lp = cJSON_AddObjectToObject(o, "logprobs");
                cJSON_AddItemToObject(
                    lp, "content", serve_entries_json(s, NULL, SERVE_PART_CHAT, t, c, from, upto));
                cJSON_AddNullToObject(lp, "refusal");
            } else {
                cJSON_AddNullToObject(o, "logprobs");
            }
            cJSON_AddNullToObject(o, "finish_reason");
            if (r->timings_per_token) add_timings(root, timings_of(t, c->n_out));
        } else {
            sn->finished = true;
            cJSON_AddNullToObject(o, "logprobs");
            cJSON_AddStringToObject(o, "finish_reason",
                                    c->finish_reason ? c->finish_reason : "stop");
            add_timings(root, timings_of(t, c->n_out)); /* as llama-server's last chunk */
        }
        return event(root);
    }
    o = chunk(st, index, &root);
    serve_add_text(o, "text", piece_at, piece_len);
    const size_t base = r->echo && t->prompt_text ? strlen(t->prompt_text) : 0;
    if (r->logprobs >= 0)
        cJSON_AddItemToObject(o, "logprobs",
                              serve_legacy_logprobs(s, NULL, t, c, false, from, upto, base));
    else
        cJSON_AddNullToObject(o, "logprobs");
    if (finish_now) {
        sn->finished = true;
        cJSON_AddStringToObject(o, "finish_reason", c->finish_reason ? c->finish_reason : "stop");
        add_timings(root, timings_of(t, c->n_out));
    } else {
        cJSON_AddNullToObject(o, "finish_reason");
        if (r->timings_per_token) add_timings(root, timings_of(t, c->n_out));
    }
    return event(root);
}

/* llama-server's return_progress: prompt_progress {total, cache, processed, time_ms} (the
 * prompt's tokens, those restored from the cache, those read so far counting those, and the
 * milliseconds since reading started), in a /completion chunk with no content or an OpenAI
 * chunk with no choices. One each time the scheduler read more of the prompt. */
static char *progress_event(const struct stream *st, const struct task *t, int index,
                            int32_t processed, double ms) {
    cJSON *root;
    if (st->r->api == API_LLAMA) {
        root = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "index", index);
        cJSON_AddStringToObject(root, "content", "");
        cJSON_AddArrayToObject(root, "tokens");
        cJSON_AddBoolToObject(root, "stop", false);
    } else {
        root = openai_object(st->s, st->r, true);
        cJSON_AddArrayToObject(root, "choices");
        if (st->r->include_usage) cJSON_AddNullToObject(root, "usage");
    }
    cJSON *pp = cJSON_AddObjectToObject(root, "prompt_progress");
    cJSON_AddNumberToObject(pp, "total", t->n_prompt);
    cJSON_AddNumberToObject(pp, "cache", t->n_cached);
    cJSON_AddNumberToObject(pp, "processed", processed);
    cJSON_AddNumberToObject(pp, "time_ms", ms);
    return event(root);
}

/* The next event to send, or NULL when there is none yet; *end when the stream is over
 * (s->mu held). */
static char *next_event(struct stream *st, bool *end) {
    struct serve_request *r = st->r;
    if (r->api == API_RESPONSES) return serve_responses_event(st->s, r, end);
    if (r->api == API_MESSAGES) return serve_messages_events(st->s, r, end);
    *end = false;
    if (st->done_sent) {
        *end = true;
        return NULL;
    }
    bool all_done = true;
    for (int ti = 0; ti < r->n_tasks; ti++) {
        struct task *t = r->tasks[ti];
        if (t->state == TASK_FAILED) {
            st->done_sent = true;
            int status;
            const char *why = error_text(t, &status);
            cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
            cJSON_AddStringToObject(e, "message", why);
            cJSON_AddStringToObject(e, "type", error_type(status));
            cJSON_AddNumberToObject(e, "code", status);
            return event(j);
        }
        if (r->return_progress && st->progress[ti] < t->n_progress) { /* each step */
            const struct serve_progress g = t->progress[st->progress[ti]++];
            st->reported[ti] = g.processed;
            return progress_event(st, t, ti * t->n, g.processed, g.ms);
        }
        if (r->return_progress && t->processed > st->reported[ti]) { /* steps not recorded */
            st->reported[ti] = t->processed;
            return progress_event(st, t, ti * t->n, t->processed, t->processed_ms);
        }
        for (int i = 0; i < t->n; i++) {
            struct sent *sn = &st->sent[ti][i];
            char *ev = choice_event(st, t, i, ti * t->n + i, sn);
            if (ev) return ev;
            if (r->api == API_LLAMA && t->state == TASK_DONE && !sn->finished) {
                sn->finished = true;
                return event(llama_json(st->s, NULL, r, t, i, ti * t->n + i, false));
            }
            all_done &= t->state == TASK_DONE && sn->finished;
        }
    }
    if (!all_done) return NULL;
    st->done_sent = true;
    if (r->api == API_LLAMA) {
        *end = true;
        return NULL;
    }
    char *u = NULL;
    if (r->include_usage) {
        cJSON *j = openai_object(st->s, r, true);
        cJSON_AddArrayToObject(j, "choices");
        add_usage(j, r);
        u = event(j);
    }
    const char *done = "data: [DONE]\n\n";
    char *both = malloc((u ? strlen(u) : 0) + strlen(done) + 1);
    if (both) snprintf(both, (u ? strlen(u) : 0) + strlen(done) + 1, "%s%s", u ? u : "", done);
    free(u);
    return both;
}

/* libmicrohttpd asks for more of the stream: the next event, or, when there is none yet, the
 * connection is parked and 0 returned (the scheduler's wake makes libmicrohttpd ask again). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *st = cls;
    struct server *s = st->s;
    if (!st->pending) {
        bool end = false;
        pthread_mutex_lock(&s->mu);
        char *ev = next_event(st, &end);
        if (!ev && !end) {
            if (!st->r->tasks[0]->cancelled && timed_out(s, st->r->tasks[0]))
                cancel_all(s, st->r, "timed out", 504);
            serve_park(s, &st->r->park);
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        pthread_mutex_unlock(&s->mu);
        if (end) return MHD_CONTENT_READER_END_OF_STREAM;
        /* an event's deferred arrays are an echo's prompt logprobs: the prompt is in, so they
           no longer change and are written outside s->mu */
        st->pending = ev ? serve_lazy_new(ev, &st->ans) : NULL;
        if (!st->pending) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const ssize_t n = serve_lazy_read(st->pending, buf, max);
    if (n <= 0) {
        serve_lazy_free(st->pending);
        st->pending = NULL;
        if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        return stream_read(cls, pos, buf, max); /* that event is all sent: the next one */
    }
    return n;
}

/* The response is gone (sent, or the client left): the tasks are no longer wanted. */
static void stream_free(void *cls) {
    struct stream *st = cls;
    struct server *s = st->s;
    pthread_mutex_lock(&s->mu);
    cancel_all(s, st->r, "the client went away", 500);
    pthread_mutex_unlock(&s->mu);
    for (int ti = 0; ti < SERVE_MAX_PROMPTS; ti++)
        for (int i = 0; i < SERVE_MAX_N; i++) serve_think_stream_free(&st->sent[ti][i].think);
    serve_request_free(s, st->r);
    free(st->r);
    serve_lazy_free(st->pending);
    free(st->ans.parts);
    free(st);
}

/* ---- the answer -------------------------------------------------------------------------- */

/* A whole answer with per-token arrays, written as libmicrohttpd sends it (the response owns
 * the request, whose ended tasks the arrays are read from). */
struct whole {
    struct server *s;
    struct serve_request *r;
    struct serve_parts ans;
    struct serve_lazy *z;
};

static ssize_t whole_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct whole *w = cls;
    const ssize_t n = serve_lazy_read(w->z, buf, max);
    return n > 0    ? n
           : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM
                    : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void whole_free(void *cls) {
    struct whole *w = cls;
    serve_lazy_free(w->z);
    free(w->ans.parts);
    serve_request_free(w->s, w->r);
    free(w->r);
    free(w);
}

/* The whole answer once every task has ended; until then the connection stays parked. The
 * answer is built and sent outside s->mu: ended tasks no longer change, and a large answer
 * must not stall the other requests (every handler takes s->mu). */
static enum MHD_Result whole_resume(struct server *s, struct MHD_Connection *conn,
                                    struct serve_cont *cont) {
    struct serve_request *r = cont->state;
    pthread_mutex_lock(&s->mu);
    bool running = false;
    for (int ti = 0; ti < r->n_tasks; ti++)
        running |= r->tasks[ti]->state == TASK_QUEUED || r->tasks[ti]->state == TASK_RUNNING;
    if (running) {
        serve_park(s, &r->park);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->mu);
    cont->resume = NULL;
    cont->cleanup = NULL;
    cont->state = NULL;
    const struct task *failed = NULL;
    for (int ti = 0; ti < r->n_tasks && !failed; ti++)
        if (r->tasks[ti]->state != TASK_DONE) failed = r->tasks[ti];
    if (failed) {
        char err[256];
        int status;
        snprintf(err, sizeof err, "%s", error_text(failed, &status));
        serve_request_free(s, r);
        free(r);
        return serve_send_error(conn, (unsigned)status, error_type(status), err);
    }
    struct whole *w = calloc(1, sizeof *w);
    char *text = NULL;
    if (w) {
        w->s = s;
        w->r = r;
        w->ans.s = s;
        cJSON *j = final_json(s, &w->ans, r);
        text = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
    }
    if (!text || serve_lazy_plain(text)) { /* no per-token arrays: the text is the answer */
        if (w) free(w->ans.parts);
        free(w);
        serve_request_free(s, r);
        free(r);
        if (!text) return serve_send_error(conn, 500, "server_error", "out of memory");
        return serve_send_text(conn, 200, "application/json", text, NULL);
    }
    w->z = serve_lazy_new(text, &w->ans);
    struct MHD_Response *resp = w->z ? MHD_create_response_from_callback(
                                           MHD_SIZE_UNKNOWN, 64 * 1024, whole_read, w, whole_free)
                                     : NULL;
    if (!resp) {
        whole_free(w);
        return serve_send_error(conn, 500, "server_error", "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    serve_cors_headers(conn, resp);
    const enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The connection ended before the answer (cont.cleanup): the tasks are not wanted. */
static void whole_cleanup(struct server *s, void *state) {
    struct serve_request *r = state;
    pthread_mutex_lock(&s->mu);
    cancel_all(s, r, "the client went away", 500);
    pthread_mutex_unlock(&s->mu);
    serve_request_free(s, r);
    free(r);
}

enum MHD_Result serve_answer(struct server *s, struct MHD_Connection *conn, struct serve_request *r,
                             struct serve_cont *cont) {
    r->park =
        (struct serve_park){.conn = conn,
                            .on_progress = r->stream,
                            .deadline = s->lim.timeout_s > 0 ? serve_now() + s->lim.timeout_s : 0,
                            .expire = expire_request,
                            .owner = r};
    for (int ti = 0; ti < r->n_tasks; ti++) {
        struct task *t = r->tasks[ti];
        t->park = &r->park;
        if (!serve_submit(s, t)) {
            char why[sizeof t->error];
            snprintf(why, sizeof why, "%s", t->error);
            const unsigned status = t->err_status;
            pthread_mutex_lock(&s->mu);
            for (int k = 0; k < ti; k++) r->tasks[k]->cancelled = true;
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&s->mu);
            serve_request_free(s, r);
            free(r);
            return serve_send_error(conn, status,
                                    status == 503 ? "unavailable_error" : "server_error", why);
        }
    }
    if (r->stream) {
        struct stream *st = calloc(1, sizeof *st);
        struct MHD_Response *resp = st ? MHD_create_response_from_callback(
                                             MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free)
                                       : NULL;
        if (!resp) {
            free(st);
            whole_cleanup(s, r);
            return MHD_NO;
        }
        st->s = s;
        st->r = r;
        st->ans.s = s;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        serve_cors_headers(conn, resp);
        enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    /* the whole answer: parked until the tasks end */
    cont->resume = whole_resume;
    cont->cleanup = whole_cleanup;
    cont->state = r;
    return whole_resume(s, conn, cont);
}
