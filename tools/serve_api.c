/*
 * recur serve's completion endpoints (see serve.c): the request fields, checked with a message
 * that names the field; a task for the decode loop; the answer, whole or as server-sent events.
 *
 * OpenAI /v1/completions: prompt (string, token list, or a list of one string), max_tokens
 * (default 16), temperature (1), top_p (1), top_k (off), stop (a string or up to 4), seed, n
 * (1), stream (false); the answer has choices and usage with
 * prompt_tokens_details.cached_tokens. llama.cpp /completion: prompt, n_predict (-1: the
 * server's limit), temperature (0.8), top_k (40), top_p (0.95), min_p (0.05), seed, stop,
 * stream, cache_prompt (true), ignore_eos (false); the answer has content, tokens_predicted,
 * tokens_evaluated, tokens_cached. Fields of other names are ignored; a known field of the wrong
 * type is a 400.
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
#include "serve_api.h"

bool serve_parse_tokens(struct server *s, const cJSON *arr, const char *what, recur_token **out,
                        int32_t *n, char *msg, size_t msg_len) {
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr)) {
        snprintf(msg, msg_len, "\"%s\" must be an array of token ids", what);
        return false;
    }
    const int32_t count = cJSON_GetArraySize(arr), V = recur_model_n_vocab(s->model);
    recur_token *t = malloc(sizeof(recur_token) * ((size_t)count + 1));
    if (!t) {
        snprintf(msg, msg_len, "out of memory for %d tokens", count);
        return false;
    }
    int32_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        const double v = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (!cJSON_IsNumber(e) || v != floor(v) || v < 0 || v >= V) {
            snprintf(msg, msg_len, "\"%s\"[%d] is not a token id (0..%d)", what, i, V - 1);
            free(t);
            return false;
        }
        t[i] = (recur_token)v;
    }
    *out = t;
    *n = count;
    return true;
}

void serve_cors_headers(struct MHD_Connection *conn, struct MHD_Response *resp) {
    /* as llama-server: the caller's Origin reflected with credentials allowed, else any */
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin ? origin : "*");
    if (origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
        MHD_add_response_header(resp, "Vary", "Origin");
    }
}

enum MHD_Result serve_send_text(struct MHD_Connection *conn, unsigned status, const char *type,
                                char *text, const char *retry_after) {
    if (!text) return MHD_NO;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    serve_cors_headers(conn, resp);
    if (retry_after) MHD_add_response_header(resp, "Retry-After", retry_after);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result serve_send_error(struct MHD_Connection *conn, unsigned status, const char *type,
                                 const char *msg) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "code", status);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, status, "application/json", text,
                           status == MHD_HTTP_SERVICE_UNAVAILABLE ? "1" : NULL);
}

/* ---- text ------------------------------------------------------------------------------- */

/* The length of the valid UTF-8 character at s[0..n) (overlong forms, surrogates and code
 * points past U+10FFFF are invalid), 0 when there is none. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    const unsigned char b = s[0];
    size_t len;
    uint32_t cp;
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf)
        len = 2, cp = b & 0x1f;
    else if (b >= 0xe0 && b <= 0xef)
        len = 3, cp = b & 0x0f;
    else if (b >= 0xf0 && b <= 0xf4)
        len = 4, cp = b & 0x07;
    else
        return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* A JSON string needs valid UTF-8, and tokens are bytes: a model may emit any of them. Each
 * invalid byte becomes U+FFFD, as decoders do. malloc'd, NUL-terminated; NULL without memory. */
static char *utf8_valid(const char *text, size_t n) {
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t len = utf8_char((const unsigned char *)text + i, n - i);
        if (len == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, text + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = '\0';
    return out;
}

/* cJSON_AddStringToObject with the text made valid UTF-8. */
void serve_add_text(cJSON *obj, const char *name, const char *text, size_t n) {
    char *v = utf8_valid(text ? text : "", text ? n : 0);
    cJSON_AddStringToObject(obj, name, v ? v : "");
    free(v);
}

/* ---- fields ----------------------------------------------------------------------------- */

struct parse {
    const cJSON *body;
    char msg[200];
    bool bad;
};

/* A number field in [lo, hi] (integer when want_int); absent: def. */
static double num_field(struct parse *p, const char *name, double def, double lo, double hi,
                        bool want_int) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->body, name);
    if (p->bad || !f || cJSON_IsNull(f)) return def;
    if (!cJSON_IsNumber(f) || (want_int && f->valuedouble != floor(f->valuedouble)) ||
        !(f->valuedouble >= lo && f->valuedouble <= hi)) {
        snprintf(p->msg, sizeof p->msg, "\"%s\" must be %s from %g to %g", name,
                 want_int ? "an integer" : "a number", lo, hi);
        p->bad = true;
        return def;
    }
    return f->valuedouble;
}

static bool bool_field(struct parse *p, const char *name, bool def) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->body, name);
    if (p->bad || !f || cJSON_IsNull(f)) return def;
    if (!cJSON_IsBool(f)) {
        snprintf(p->msg, sizeof p->msg, "\"%s\" must be true or false", name);
        p->bad = true;
        return def;
    }
    return cJSON_IsTrue(f);
}

static void stop_field(struct parse *p, struct task *t) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->body, "stop");
    if (p->bad || !f || cJSON_IsNull(f)) return;
    const cJSON *one = cJSON_IsString(f) ? f : NULL;
    if (!one && (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > SERVE_MAX_STOP)) {
        snprintf(p->msg, sizeof p->msg, "\"stop\" must be a string or up to %d strings",
                 SERVE_MAX_STOP);
        p->bad = true;
        return;
    }
    for (const cJSON *e = one ? one : f->child; e; e = one ? NULL : e->next) {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
            snprintf(p->msg, sizeof p->msg, "\"stop\" strings must be non-empty strings");
            p->bad = true;
            return;
        }
        if (!(t->stop[t->n_stop++] = strdup(e->valuestring))) {
            snprintf(p->msg, sizeof p->msg, "out of memory");
            p->bad = true;
            return;
        }
    }
}

static void prompt_field(struct parse *p, struct server *s, struct task *t) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->body, "prompt");
    if (p->bad) return;
    if (cJSON_IsArray(f) && cJSON_GetArraySize(f) == 1 && cJSON_IsString(f->child))
        f = f->child; /* a list of one prompt */
    if (cJSON_IsString(f)) {
        const int32_t len = (int32_t)strlen(f->valuestring);
        t->prompt = malloc(sizeof(recur_token) * ((size_t)len + 2));
        t->n_prompt = t->prompt ? recur_tokenize(s->model, f->valuestring, len, t->prompt, len + 2,
                                                 true, false)
                                : -1;
        if (t->n_prompt < 0) {
            snprintf(p->msg, sizeof p->msg, "the prompt could not be tokenized");
            p->bad = true;
            return;
        }
    } else if (cJSON_IsArray(f)) {
        if (!serve_parse_tokens(s, f, "prompt", &t->prompt, &t->n_prompt, p->msg, sizeof p->msg)) {
            p->bad = true;
            return;
        }
    } else {
        snprintf(p->msg, sizeof p->msg,
                 f ? "\"prompt\" must be a string or an array of token ids"
                   : "\"prompt\" is required");
        p->bad = true;
        return;
    }
    if (t->n_prompt == 0) {
        snprintf(p->msg, sizeof p->msg, "the prompt is empty");
        p->bad = true;
    } else if (t->n_prompt > s->lim.max_prompt) {
        snprintf(p->msg, sizeof p->msg, "the prompt has %d tokens, at most %d are accepted",
                 t->n_prompt, s->lim.max_prompt);
        p->bad = true;
    }
}

/* ---- waiting for the decode loop --------------------------------------------------------- */

/* True when the client closed its end (a read would return 0 bytes). */
static bool client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd pfd = {ci->connect_fd, POLLIN, 0};
    if (poll(&pfd, 1, 0) <= 0) return false;
    char c;
    return (pfd.revents & (POLLHUP | POLLERR)) || recv(ci->connect_fd, &c, 1, MSG_PEEK) == 0;
}

/* Waits up to 50 ms for progress; s->mu held. */
static void wait_progress(struct server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&s->progress, &s->mu, &ts);
}

static bool timed_out(const struct server *s, const struct task *t) {
    return s->lim.timeout_s > 0 && serve_now() - t->t_queued > s->lim.timeout_s;
}

/* ---- answers ----------------------------------------------------------------------------- */

static int32_t completion_tokens(const struct task *t) {
    int32_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->choice[i].n_out;
    return n;
}

static cJSON *openai_object(const struct server *s, const struct task *t, bool chunk) {
    cJSON *j = cJSON_CreateObject();
    char id[48];
    snprintf(id, sizeof id, "cmpl-%llu", (unsigned long long)t->id);
    cJSON_AddStringToObject(j, "id", id);
    cJSON_AddStringToObject(j, "object", "text_completion");
    cJSON_AddNumberToObject(j, "created", (double)time(NULL));
    cJSON_AddStringToObject(j, "model", s->model_name);
    (void)chunk;
    return j;
}

static void add_usage(cJSON *j, const struct task *t) {
    cJSON *u = cJSON_AddObjectToObject(j, "usage");
    const int32_t c = completion_tokens(t);
    cJSON_AddNumberToObject(u, "prompt_tokens", t->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", c);
    cJSON_AddNumberToObject(u, "total_tokens", t->n_prompt + c);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", t->n_cached);
}

/* The whole answer of a finished task (s->mu held). */
static cJSON *final_json(const struct server *s, const struct task *t, bool llama) {
    if (llama) {
        const struct choice *c = &t->choice[0];
        cJSON *j = cJSON_CreateObject();
        serve_add_text(j, "content", c->text, c->len);
        cJSON_AddBoolToObject(j, "stop", true);
        cJSON_AddStringToObject(j, "model", s->model_name);
        cJSON_AddNumberToObject(j, "tokens_predicted", c->n_out);
        cJSON_AddNumberToObject(j, "tokens_evaluated", t->n_prompt);
        cJSON_AddNumberToObject(j, "tokens_cached", t->n_cached);
        cJSON_AddStringToObject(j, "stop_type",
                                strcmp(c->finish_reason, "length") == 0 ? "limit" : "eos");
        cJSON *tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "prompt_n", t->n_prompt - t->n_cached);
        cJSON_AddNumberToObject(tm, "prompt_ms", (t->t_first - t->t_queued) * 1e3);
        cJSON_AddNumberToObject(tm, "predicted_n", c->n_out);
        cJSON_AddNumberToObject(tm, "predicted_ms", (t->t_done - t->t_first) * 1e3);
        return j;
    }
    cJSON *j = openai_object(s, t, false), *arr = cJSON_AddArrayToObject(j, "choices");
    for (int i = 0; i < t->n; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        serve_add_text(c, "text", t->choice[i].text, t->choice[i].len);
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", t->choice[i].finish_reason);
        cJSON_AddItemToArray(arr, c);
    }
    add_usage(j, t);
    return j;
}

static enum MHD_Result failed_answer(struct MHD_Connection *conn, const struct task *t) {
    return serve_send_error(conn, strcmp(t->error, "timed out") == 0 ? 504 : 500, "server_error",
                            t->error[0] ? t->error : "the request failed");
}

/* ---- streaming: server-sent events ------------------------------------------------------- */

struct stream {
    struct server *s;
    struct task *t;
    struct MHD_Connection *conn;
    bool llama;
    size_t sent[SERVE_MAX_N]; /* text bytes sent per choice */
    bool finished_sent[SERVE_MAX_N];
    bool done_sent;
    char *pending; /* an event not yet handed to MHD */
    size_t pending_len, pending_off;
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

/* The next event to send, or NULL when there is none yet (s->mu held). */
static char *next_event(struct stream *st, bool *end) {
    struct task *t = st->t;
    *end = false;
    for (int i = 0; i < t->n; i++) {
        struct choice *c = &t->choice[i];
        const size_t ready = c->len - (c->finished ? 0 : c->held);
        const bool finish_now = c->finished && !st->finished_sent[i];
        if (ready <= st->sent[i] && !finish_now) continue;
        const char *piece = c->text ? c->text + st->sent[i] : "";
        const size_t piece_len = c->text ? ready - st->sent[i] : 0;
        st->sent[i] = ready;
        cJSON *j;
        if (st->llama) {
            j = cJSON_CreateObject();
            serve_add_text(j, "content", piece, piece_len);
            cJSON_AddBoolToObject(j, "stop", false);
        } else {
            j = openai_object(st->s, t, true);
            cJSON *arr = cJSON_AddArrayToObject(j, "choices"), *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", i);
            serve_add_text(o, "text", piece, piece_len);
            cJSON_AddNullToObject(o, "logprobs");
            if (finish_now)
                cJSON_AddStringToObject(o, "finish_reason", c->finish_reason);
            else
                cJSON_AddNullToObject(o, "finish_reason");
            cJSON_AddItemToArray(arr, o);
        }
        if (finish_now) st->finished_sent[i] = true;
        return event(j);
    }
    if (t->state == TASK_DONE && !st->done_sent) {
        st->done_sent = true;
        if (st->llama) {
            cJSON *j = final_json(st->s, t, true);
            cJSON_ReplaceItemInObject(j, "content", cJSON_CreateString(""));
            return event(j);
        }
        cJSON *j = openai_object(st->s, t, true);
        cJSON_AddArrayToObject(j, "choices");
        add_usage(j, t);
        char *u = event(j);
        const char *done = "data: [DONE]\n\n";
        char *both = u ? malloc(strlen(u) + strlen(done) + 1) : NULL;
        if (both) {
            strcpy(both, u);
            strcat(both, done);
        }
        free(u);
        return both;
    }
    if (t->state == TASK_FAILED && !st->done_sent) {
        st->done_sent = true;
        cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
        cJSON_AddStringToObject(e, "message", t->error[0] ? t->error : "the request failed");
        cJSON_AddStringToObject(e, "type", "server_error");
        cJSON_AddNumberToObject(e, "code", strcmp(t->error, "timed out") == 0 ? 504 : 500);
        return event(j);
    }
    *end = st->done_sent;
    return NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *st = cls;
    struct server *s = st->s;
    if (!st->pending) {
        bool end = false;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            st->pending = next_event(st, &end);
            if (st->pending || end) break;
            if (timed_out(s, st->t) && !st->t->cancelled) {
                st->t->cancelled = true;
                snprintf(st->t->error, sizeof st->t->error, "timed out");
                pthread_cond_signal(&s->work);
            }
            wait_progress(s);
        }
        pthread_mutex_unlock(&s->mu);
        if (end) return MHD_CONTENT_READER_END_OF_STREAM;
        st->pending_len = strlen(st->pending);
        st->pending_off = 0;
    }
    size_t n = st->pending_len - st->pending_off;
    if (n > max) n = max;
    memcpy(buf, st->pending + st->pending_off, n);
    st->pending_off += n;
    if (st->pending_off == st->pending_len) {
        free(st->pending);
        st->pending = NULL;
    }
    return (ssize_t)n;
}

/* The response is gone (sent, or the client left): the task is no longer wanted. */
static void stream_free(void *cls) {
    struct stream *st = cls;
    struct server *s = st->s;
    pthread_mutex_lock(&s->mu);
    if (st->t->state == TASK_QUEUED || st->t->state == TASK_RUNNING) {
        st->t->cancelled = true;
        pthread_cond_signal(&s->work);
    }
    serve_task_release(s, st->t);
    pthread_mutex_unlock(&s->mu);
    free(st->pending);
    free(st);
}

/* ---- the endpoint ------------------------------------------------------------------------ */

/* -c: a sequence holds at most lim.n_ctx tokens. A recurrent state has no window to overflow,
 * so this is a budget: a prompt that fills it is refused, and generation stops at it (finish
 * reason "length"), as llama-server stops at a full context without context shift. */
static void ctx_budget(struct parse *p, const struct server *s, struct task *t) {
    if (p->bad || s->lim.n_ctx <= 0) return;
    if (t->n_prompt >= s->lim.n_ctx) {
        snprintf(p->msg, sizeof p->msg,
                 "the prompt has %d tokens; a sequence holds at most %d (-c), prompt and "
                 "generated tokens together",
                 t->n_prompt, s->lim.n_ctx);
        p->bad = true;
    } else if (t->max_tokens > s->lim.n_ctx - t->n_prompt) {
        t->max_tokens = s->lim.n_ctx - t->n_prompt;
    }
}

bool serve_parse_completion(struct server *s, const cJSON *body, bool llama, struct task *t,
                            bool *stream, char *msg, size_t msg_len) {
    struct parse p = {body, "", false};
    prompt_field(&p, s, t);
    struct recur_sampler_params sp = recur_sampler_default_params();
    const double max_n = s->lim.n_parallel < SERVE_MAX_N ? s->lim.n_parallel : SERVE_MAX_N;
    if (llama) {
        const double n_predict = num_field(&p, "n_predict", -1, -1, s->lim.max_tokens, true);
        t->max_tokens = n_predict >= 0          ? (int32_t)n_predict
                        : s->lim.n_predict >= 0 ? s->lim.n_predict /* -n */
                                                : s->lim.max_tokens;
        sp.temp = (float)num_field(&p, "temperature", 0.8, 0, 100, false);
        sp.top_k = (int32_t)num_field(&p, "top_k", 40, 0, 1e9, true);
        sp.top_p = (float)num_field(&p, "top_p", 0.95, 0, 1, false);
        sp.min_p = (float)num_field(&p, "min_p", 0.05, 0, 1, false);
        t->cache_prompt = bool_field(&p, "cache_prompt", true);
        t->ignore_eos = bool_field(&p, "ignore_eos", false);
        t->n = 1;
    } else {
        t->max_tokens =
            (int32_t)num_field(&p, "max_tokens", s->lim.n_predict >= 0 ? s->lim.n_predict : 16, 0,
                               s->lim.max_tokens, true);
        sp.temp = (float)num_field(&p, "temperature", 1.0, 0, 2, false);
        sp.top_p = (float)num_field(&p, "top_p", 1.0, 0, 1, false);
        sp.top_k = (int32_t)num_field(&p, "top_k", 0, 0, 1e9, true);
        sp.min_p = 0.0f;
        t->n = (int)num_field(&p, "n", 1, 1, max_n, true);
        t->cache_prompt = true;
    }
    sp.seed =
        (uint64_t)num_field(&p, "seed", (double)(uint64_t)time(NULL), 0, 9007199254740991.0, true);
    *stream = bool_field(&p, "stream", false);
    stop_field(&p, t);
    t->sampling = sp;
    ctx_budget(&p, s, t);
    if (p.bad) snprintf(msg, msg_len, "%s", p.msg);
    return !p.bad;
}

enum MHD_Result serve_handle_completion(struct server *s, struct MHD_Connection *conn,
                                        const cJSON *body, bool llama) {
    struct task *t = calloc(1, sizeof *t);
    if (!t) return serve_send_error(conn, 500, "server_error", "out of memory");
    char msg[200];
    bool stream = false;
    if (!serve_parse_completion(s, body, llama, t, &stream, msg, sizeof msg)) {
        t->refs = 1;
        pthread_mutex_lock(&s->mu);
        serve_task_release(s, t);
        pthread_mutex_unlock(&s->mu);
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    }
    t->refs = 2; /* this connection and the decode loop */
    if (!serve_submit(s, t)) {
        t->refs = 1;
        pthread_mutex_lock(&s->mu);
        serve_task_release(s, t);
        pthread_mutex_unlock(&s->mu);
        return serve_send_error(conn, 503, "server_busy",
                                "every slot is busy and the queue is full; retry later");
    }
    if (stream) {
        struct stream *st = calloc(1, sizeof *st);
        struct MHD_Response *resp = st ? MHD_create_response_from_callback(
                                             MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free)
                                       : NULL;
        if (!resp) {
            free(st);
            pthread_mutex_lock(&s->mu);
            t->cancelled = true;
            serve_task_release(s, t);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO;
        }
        st->s = s;
        st->t = t;
        st->conn = conn;
        st->llama = llama;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        serve_cors_headers(conn, resp);
        enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    /* whole answer: wait, watching the client and the clock */
    pthread_mutex_lock(&s->mu);
    while (t->state == TASK_QUEUED || t->state == TASK_RUNNING) {
        if (!t->cancelled && (timed_out(s, t) || client_gone(conn))) {
            t->cancelled = true;
            snprintf(t->error, sizeof t->error, "%s",
                     timed_out(s, t) ? "timed out" : "the client went away");
            pthread_cond_signal(&s->work);
        }
        wait_progress(s);
    }
    if (t->state == TASK_DONE) {
        cJSON *j = final_json(s, t, llama);
        char *text = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        serve_task_release(s, t);
        pthread_mutex_unlock(&s->mu);
        return serve_send_text(conn, 200, "application/json", text, NULL);
    }
    char err[256];
    memcpy(err, t->error, sizeof err);
    struct task copy = {0};
    memcpy(copy.error, err, sizeof err);
    serve_task_release(s, t);
    pthread_mutex_unlock(&s->mu);
    return failed_answer(conn, &copy);
}
