/*
 * recur serve's embeddings (with --embedding): POST /v1/embeddings (OpenAI's shape) and POST
 * /embeddings, /embedding (llama-server's), as llama-server answers them.
 *
 * Each input is a task (serve.h: task.embed) that the decode loop decodes whole in one batch,
 * beside the other inputs of this and other requests (continuous batching: as many inputs per
 * recur_decode as there are free slots and room in --batch-size), and the context pools
 * (--pooling; recur_get_embeddings_seq). The answer is built here, outside the lock, once every
 * input's task has ended:
 *  - /v1/embeddings: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
 *    "model", "usage": {"prompt_tokens", "total_tokens"}}; each embedding normalised by
 *    embd_normalize (default 2, euclidean), as floats or (encoding_format "base64") the base64
 *    of its little-endian float32 bytes. Pooling none is refused, as llama-server does.
 *  - /embeddings, /embedding: [{"index", "embedding": [[...]]}]: one normalised row per input,
 *    or with pooling none every token's row, not normalised (llama-server's rule).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "common.h"

#define EMBED_MAX_INPUTS 256

struct embed_request {
    bool oai;     /* /v1/embeddings */
    bool base64;  /* encoding_format "base64" */
    int32_t norm; /* embd_normalize */
    char model[128];
    struct task **tasks;
    int n_tasks;
    struct serve_park park;
};

static void request_free(struct server *s, struct embed_request *r) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < r->n_tasks; i++) {
        r->tasks[i]->park = NULL;
        serve_task_release(s, r->tasks[i]);
    }
    pthread_mutex_unlock(&s->mu);
    free(r->tasks);
    free(r);
}

/* Marks the unfinished tasks cancelled (s->mu held): the decode loop drops them. */
static void cancel_all(struct server *s, struct embed_request *r, const char *why,
                       unsigned status) {
    for (int i = 0; i < r->n_tasks; i++) {
        struct task *t = r->tasks[i];
        if (t->state != TASK_QUEUED && t->state != TASK_RUNNING) continue;
        if (!t->error[0]) {
            snprintf(t->error, sizeof t->error, "%s", why);
            t->err_status = status;
        }
        t->cancelled = true;
    }
    pthread_cond_signal(&s->work);
}

static void expire(struct server *s, struct serve_park *p, const char *why) {
    cancel_all(s, p->owner, why, strcmp(why, "timed out") == 0 ? 504 : 500);
}

/* ---- the request ------------------------------------------------------------------------- */

/* One input's task: its tokens, and room for its embedding. */
static struct task *input_task(struct parse *p, struct server *s, const cJSON *item,
                               const char *what, uint64_t tenant) {
    if (cJSON_IsString(item) && item->valuestring[0] == '\0') {
        serve_fail(p, "%s is empty", what);
        return NULL;
    }
    struct task *t = calloc(1, sizeof *t);
    if (!t) {
        serve_fail(p, "out of memory");
        return NULL;
    }
    t->refs = 1;
    t->n = 1;
    t->embed = true;
    t->tenant = tenant;
    t->sampling = recur_sampler_default_params();
    serve_one_prompt(p, s, item, true, &t->prompt, &t->n_prompt, what);
    serve_check_prompt_len(p, s, t, what);
    const uint32_t n_batch = recur_n_batch(s->ctx);
    if (!p->bad && (uint32_t)t->n_prompt > n_batch)
        serve_fail(p,
                   "%s has %d tokens, more than the batch size (%u, -b): an input is embedded "
                   "whole in one batch",
                   what, t->n_prompt, n_batch);
    const size_t rows = recur_pooling_type(s->ctx) == RECUR_POOLING_TYPE_NONE
                            ? (size_t)(t->n_prompt > 0 ? t->n_prompt : 1)
                            : 1;
    if (!p->bad && !(t->embd = malloc(sizeof(float) * rows * (size_t)recur_model_n_embd(s->model))))
        serve_fail(p, "out of memory");
    if (p->bad) {
        pthread_mutex_lock(&s->mu);
        serve_task_release(s, t);
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    return t;
}

/* The inputs (input or content: a string, token ids, or a list of either) into r->tasks. */
static void parse_inputs(struct parse *p, struct server *s, struct embed_request *r,
                         uint64_t tenant) {
    const char *name = "input";
    const cJSON *f = serve_field(p, "input");
    if (!f && !r->oai && (f = serve_field(p, "content"))) name = "content";
    if (!f) {
        serve_fail(p,
                   r->oai ? "\"input\" is required" : "\"input\" or \"content\" must be provided");
        return;
    }
    /* a string, or an array with a number in it (token ids, or llama-server's mixed ids and
       strings), is one input; an array of strings or arrays is a list of inputs */
    bool one = cJSON_IsString(f);
    for (const cJSON *e = cJSON_IsArray(f) ? f->child : NULL; e && !one; e = e->next)
        one = cJSON_IsNumber(e);
    if (!one && !cJSON_IsArray(f)) {
        serve_fail(p,
                   "\"%s\" must be a string, an array of strings, an array of token ids or an "
                   "array of arrays of token ids",
                   name);
        return;
    }
    const int n = one ? 1 : cJSON_GetArraySize(f);
    if (n == 0) {
        serve_fail(p, "\"%s\" is empty", name);
        return;
    }
    const int most = s->lim.n_parallel + s->lim.queue_max < EMBED_MAX_INPUTS
                         ? s->lim.n_parallel + s->lim.queue_max
                         : EMBED_MAX_INPUTS;
    if (n > most) {
        serve_fail(p,
                   "\"%s\" has %d inputs, at most %d are accepted (%d, or the slots and queue: "
                   "--parallel + --queue)",
                   name, n, most, EMBED_MAX_INPUTS);
        return;
    }
    if (!(r->tasks = calloc((size_t)n, sizeof *r->tasks))) {
        serve_fail(p, "out of memory");
        return;
    }
    int i = 0;
    for (const cJSON *item = one ? f : f->child; item && i < n && !p->bad; item = item->next, i++) {
        char what[48];
        if (one)
            snprintf(what, sizeof what, "\"%s\"", name);
        else
            snprintf(what, sizeof what, "\"%s\"[%d]", name, i);
        if (!one && !cJSON_IsString(item) && !cJSON_IsArray(item)) {
            serve_fail(p, "%s must be a string or an array of token ids", what);
            break;
        }
        struct task *t = input_task(p, s, item, what, tenant);
        if (t) r->tasks[r->n_tasks++] = t;
    }
}

/* The other fields: model, encoding_format, dimensions, embd_normalize (user is accepted: it
 * cannot change the answer). */
static void parse_options(struct parse *p, struct server *s, struct embed_request *r) {
    const cJSON *f;
    snprintf(r->model, sizeof r->model, "%s", s->model_name);
    if ((f = serve_field(p, "model"))) {
        if (!cJSON_IsString(f))
            serve_fail(p, "\"model\" must be a string");
        else
            snprintf(r->model, sizeof r->model, "%s", f->valuestring);
    }
    if ((f = serve_field(p, "user")) && !cJSON_IsString(f))
        serve_fail(p, "\"user\" must be a string");
    if ((f = serve_field(p, "encoding_format"))) {
        if (!cJSON_IsString(f) ||
            (strcmp(f->valuestring, "float") != 0 && strcmp(f->valuestring, "base64") != 0))
            serve_fail(p, "\"encoding_format\" must be \"float\" or \"base64\"");
        else if (strcmp(f->valuestring, "base64") == 0 && !r->oai)
            serve_fail(p, "\"encoding_format\" \"base64\" is /v1/embeddings' (this endpoint "
                          "answers floats)");
        else
            r->base64 = strcmp(f->valuestring, "base64") == 0;
    }
    const int32_t E = recur_model_n_embd(s->model);
    if ((f = serve_field(p, "dimensions"))) {
        if (!cJSON_IsNumber(f) || f->valuedouble != (double)(int64_t)f->valuedouble)
            serve_fail(p, "\"dimensions\" must be an integer");
        else if (f->valuedouble != (double)E)
            serve_fail(p,
                       "\"dimensions\" is %.0f: this model's embeddings have %d dimensions, and "
                       "recur does not shorten them",
                       f->valuedouble, E);
    }
    r->norm = 2;
    if ((f = serve_field(p, "embd_normalize"))) {
        if (!cJSON_IsNumber(f) || f->valuedouble != (double)(int32_t)f->valuedouble ||
            f->valuedouble < -1)
            serve_fail(p, "\"embd_normalize\" must be an integer: -1 (none), 0 (max absolute, "
                          "int16 range), 1 (taxicab), 2 (euclidean) or more (p-norm)");
        else
            r->norm = (int32_t)f->valuedouble;
    }
}

/* ---- the answer -------------------------------------------------------------------------- */

static char *base64(const unsigned char *in, size_t n) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                           (i + 2 < n ? in[i + 2] : 0);
        *o++ = tbl[v >> 18 & 63];
        *o++ = tbl[v >> 12 & 63];
        *o++ = i + 1 < n ? tbl[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tbl[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* A vector as a JSON array of numbers, or as base64 of its little-endian float32 bytes. */
static cJSON *vector_json(const float *v, int32_t E, bool b64) {
    if (!b64) {
        cJSON *a = cJSON_CreateArray();
        for (int32_t e = 0; a && e < E; e++) {
            cJSON *x = cJSON_CreateNumber((double)v[e]);
            if (!x || !cJSON_AddItemToArray(a, x)) {
                cJSON_Delete(x);
                cJSON_Delete(a);
                return NULL;
            }
        }
        return a;
    }
    unsigned char *bytes = malloc(sizeof(float) * (size_t)E);
    if (!bytes) return NULL;
    for (int32_t e = 0; e < E; e++) { /* little-endian whatever the machine's order */
        uint32_t u;
        memcpy(&u, &v[e], sizeof u);
        for (int k = 0; k < 4; k++) bytes[4 * e + k] = (unsigned char)(u >> (8 * k));
    }
    char *text = base64(bytes, sizeof(float) * (size_t)E);
    free(bytes);
    cJSON *j = text ? cJSON_CreateString(text) : NULL;
    free(text);
    return j;
}

static cJSON *answer_json(const struct server *s, const struct embed_request *r) {
    const int32_t E = recur_model_n_embd(s->model);
    const bool none = recur_pooling_type(s->ctx) == RECUR_POOLING_TYPE_NONE;
    float *row = malloc(sizeof(float) * (size_t)E);
    cJSON *list = cJSON_CreateArray();
    bool ok = row && list;
    int64_t n_tokens = 0;
    for (int i = 0; ok && i < r->n_tasks; i++) {
        const struct task *t = r->tasks[i];
        n_tokens += t->n_prompt;
        cJSON *item = cJSON_CreateObject(), *v = NULL;
        ok = item && cJSON_AddItemToArray(list, item);
        if (!ok) {
            cJSON_Delete(item);
            break;
        }
        if (r->oai) cJSON_AddStringToObject(item, "object", "embedding");
        cJSON_AddNumberToObject(item, "index", i);
        if (r->oai) { /* pooled (pooling none was refused), normalised */
            gen_embd_normalize(t->embd, row, E, r->norm);
            v = vector_json(row, E, r->base64);
            ok = v && cJSON_AddItemToObject(item, "embedding", v);
            if (!ok) cJSON_Delete(v); /* not added: still ours */
        } else {                      /* rows: pooled and normalised, or every token's as it is */
            ok = (v = cJSON_AddArrayToObject(item, "embedding")) != NULL;
            for (int32_t k = 0; ok && k < (none ? t->n_prompt : 1); k++) {
                const float *e = t->embd + (size_t)k * (size_t)E;
                if (!none) gen_embd_normalize(e, row, E, r->norm);
                cJSON *x = vector_json(none ? e : row, E, false);
                ok = x && cJSON_AddItemToArray(v, x);
                if (!ok) cJSON_Delete(x);
            }
        }
    }
    free(row);
    if (!ok) {
        cJSON_Delete(list);
        return NULL;
    }
    if (!r->oai) return list;
    cJSON *j = cJSON_CreateObject(), *usage = j ? cJSON_CreateObject() : NULL;
    if (!usage || !cJSON_AddItemToObject(j, "data", list)) {
        cJSON_Delete(usage);
        cJSON_Delete(j);
        cJSON_Delete(list);
        return NULL;
    }
    cJSON_AddStringToObject(j, "object", "list");
    cJSON_AddStringToObject(j, "model", r->model);
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)n_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)n_tokens);
    cJSON_AddItemToObject(j, "usage", usage);
    return j;
}

static const char *error_type(unsigned status) {
    return status == 400   ? "invalid_request_error"
           : status == 503 ? "unavailable_error"
           : status == 501 ? "not_supported_error"
                           : "server_error";
}

/* The answer once every task has ended; until then the connection stays parked. */
static enum MHD_Result resume(struct server *s, struct MHD_Connection *conn,
                              struct serve_cont *cont) {
    struct embed_request *r = cont->state;
    pthread_mutex_lock(&s->mu);
    bool running = false;
    for (int i = 0; i < r->n_tasks; i++)
        running |= r->tasks[i]->state == TASK_QUEUED || r->tasks[i]->state == TASK_RUNNING;
    if (running) {
        serve_park(s, &r->park);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->mu);
    cont->resume = NULL;
    cont->cleanup = NULL;
    cont->state = NULL;
    for (int i = 0; i < r->n_tasks; i++)
        if (r->tasks[i]->state != TASK_DONE) {
            const struct task *t = r->tasks[i];
            const unsigned status = t->err_status ? t->err_status : 500;
            char err[sizeof t->error + 32];
            snprintf(err, sizeof err, "%s", t->error[0] ? t->error : "the input failed");
            request_free(s, r);
            return serve_send_error(conn, status, error_type(status), err);
        }
    cJSON *j = answer_json(s, r);
    request_free(s, r);
    if (!j) return serve_send_error(conn, 500, "server_error", "out of memory");
    return serve_send_json(conn, 200, j);
}

static void cleanup(struct server *s, void *state) {
    struct embed_request *r = state;
    pthread_mutex_lock(&s->mu);
    cancel_all(s, r, "the client went away", 500);
    pthread_mutex_unlock(&s->mu);
    request_free(s, r);
}

static enum MHD_Result handle(struct server *s, struct MHD_Connection *conn,
                              const struct serve_req *rq, bool oai) {
    if (!s->embedding) /* llama-server's answer and words */
        return serve_send_error(conn, 501, "not_supported_error",
                                "This server does not support embeddings. Start it with "
                                "`--embeddings`");
    if (oai && recur_pooling_type(s->ctx) == RECUR_POOLING_TYPE_NONE)
        return serve_send_error(conn, 400, "invalid_request_error",
                                "Pooling type 'none' is not OAI compatible. Please use a "
                                "different pooling type");
    static const char *const known_oai[] = {
        "input", "model", "encoding_format", "dimensions", "user", "embd_normalize", NULL};
    static const char *const known_llama[] = {"input",           "content",    "model",
                                              "encoding_format", "dimensions", "user",
                                              "embd_normalize",  NULL};
    char msg[200];
    if (!cJSON_IsObject(rq->body))
        return serve_send_error(conn, 400, "invalid_request_error",
                                "the body must be a JSON object");
    if (serve_unknown_field(rq->body, oai ? known_oai : known_llama, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    struct embed_request *r = calloc(1, sizeof *r);
    if (!r) return serve_send_error(conn, 500, "server_error", "out of memory");
    r->oai = oai;
    struct parse p = {rq->body, "", false, 0};
    parse_options(&p, s, r);
    if (!p.bad) parse_inputs(&p, s, r, rq->tenant);
    /* the answer's size, estimated before any work: ~20 bytes a number, 4/3 of 4 in base64 */
    if (!p.bad && s->lim.max_answer) {
        const bool none = recur_pooling_type(s->ctx) == RECUR_POOLING_TYPE_NONE;
        uint64_t rows = 0;
        for (int i = 0; i < r->n_tasks; i++) rows += none ? (uint64_t)r->tasks[i]->n_prompt : 1;
        const uint64_t est = rows * (uint64_t)recur_model_n_embd(s->model) * (r->base64 ? 6 : 20);
        if (est > s->lim.max_answer)
            serve_fail(&p,
                       "the answer would be about %llu MiB of JSON, more than --max-answer-mb "
                       "(%llu)",
                       (unsigned long long)(est >> 20),
                       (unsigned long long)(s->lim.max_answer >> 20));
    }
    if (p.bad) {
        request_free(s, r);
        return serve_send_error(conn, 400, "invalid_request_error", p.msg);
    }
    r->park =
        (struct serve_park){.conn = conn,
                            .deadline = s->lim.timeout_s > 0 ? serve_now() + s->lim.timeout_s : 0,
                            .expire = expire,
                            .owner = r};
    /* all inputs queued at once: the decode loop takes them in one step, one decode */
    for (int i = 0; i < r->n_tasks; i++) r->tasks[i]->park = &r->park;
    if (!serve_submit_all(s, r->tasks, r->n_tasks)) {
        char why[sizeof r->tasks[0]->error];
        snprintf(why, sizeof why, "%s", r->tasks[0]->error);
        const unsigned status = r->tasks[0]->err_status ? r->tasks[0]->err_status : 500;
        request_free(s, r);
        return serve_send_error(conn, status, error_type(status), why);
    }
    rq->cont->resume = resume;
    rq->cont->cleanup = cleanup;
    rq->cont->state = r;
    return resume(s, conn, rq->cont);
}

enum MHD_Result serve_embeddings_oai(struct server *s, struct MHD_Connection *conn,
                                     const struct serve_req *rq) {
    return handle(s, conn, rq, true);
}

enum MHD_Result serve_embeddings(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq) {
    return handle(s, conn, rq, false);
}
