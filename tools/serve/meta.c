/*
 * recur serve's informational endpoints, shaped as llama-server's (see endpoints.h):
 * GET /v1/models (and /models), /props, /slots, /metrics; POST /tokenize, /detokenize,
 * /apply-template, /v1/chat/completions/input_tokens.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "common.h"
#include "conn.h"
#include "endpoints.h"
#include "store.h"

#ifndef RECUR_VERSION_STRING
#define RECUR_VERSION_STRING "unknown"
#endif

enum MHD_Result serve_send_json(struct MHD_Connection *conn, unsigned status, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return serve_send_error(conn, 500, "server_error", "out of memory");
    return serve_send_text(conn, status, "application/json", text, NULL);
}

bool serve_unknown_field(const cJSON *body, const char *const *known, char *msg, size_t len) {
    for (const cJSON *f = body ? body->child : NULL; f; f = f->next) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = strcmp(f->string, *k) == 0;
        if (!ok) {
            snprintf(msg, len, "unknown field \"%.64s\": this endpoint does not support it",
                     f->string);
            return true;
        }
    }
    return false;
}

/* The text of a token as llama-server shows it (control tokens rendered), malloc'd into *out
 * with its length; false without memory or for a bad id. */
static bool piece_of(const struct recur_model *m, recur_token tok, char **out, int32_t *n) {
    int32_t cap = 64;
    for (int tries = 0; tries < 2; tries++) {
        char *buf = malloc((size_t)cap + 1); /* + 1: room for a NUL */
        if (!buf) return false;
        const int32_t got = recur_token_to_piece(m, tok, buf, cap, 0, true);
        if (got >= 0) {
            *out = buf;
            *n = got;
            return true;
        }
        free(buf);
        cap = -got;
    }
    return false;
}

/* The concatenated pieces of tokens (llama-server's tokens_to_str: no clean-up of spaces, so
 * that /detokenize gives back what /tokenize read), malloc'd with *len; NULL without memory. */
static char *tokens_text(const struct recur_model *m, const recur_token *t, int32_t n,
                         size_t *len) {
    size_t cap = 64, used = 0;
    char *text = malloc(cap);
    for (int32_t i = 0; i < n && text; i++) {
        char *p;
        int32_t k;
        if (!piece_of(m, t[i], &p, &k)) {
            free(text);
            return NULL;
        }
        if (used + (size_t)k + 1 > cap) {
            cap = 2 * (used + (size_t)k + 1);
            char *grown = realloc(text, cap);
            if (!grown) {
                free(p);
                free(text);
                return NULL;
            }
            text = grown;
        }
        memcpy(text + used, p, (size_t)k);
        used += (size_t)k;
        free(p);
    }
    if (text) text[used] = '\0';
    *len = used;
    return text;
}

/* ---- /tokenize, /detokenize -------------------------------------------------------------- */

static bool bool_opt(const cJSON *body, const char *name, bool def, bool *out, char *msg,
                     size_t len) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(body, name);
    *out = def;
    if (!f || cJSON_IsNull(f)) return true;
    if (!cJSON_IsBool(f)) {
        snprintf(msg, len, "\"%s\" must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(f);
    return true;
}

enum MHD_Result serve_tokenize(struct server *s, struct MHD_Connection *conn,
                               const struct serve_req *rq) {
    static const char *const known[] = {"content",     "add_special", "parse_special",
                                        "with_pieces", "model",       NULL};
    char msg[160];
    if (serve_unknown_field(rq->body, known, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(rq->body, "content");
    if (!cJSON_IsString(content))
        return serve_send_error(conn, 400, "invalid_request_error", "\"content\" must be a string");
    bool add_special, parse_special, with_pieces;
    if (!bool_opt(rq->body, "add_special", false, &add_special, msg, sizeof msg) ||
        !bool_opt(rq->body, "parse_special", true, &parse_special, msg, sizeof msg) ||
        !bool_opt(rq->body, "with_pieces", false, &with_pieces, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    const size_t len = strlen(content->valuestring);
    if (len > s->lim.max_body)
        return serve_send_error(conn, 400, "invalid_request_error", "\"content\" is too long");
    recur_token *t = malloc(sizeof(recur_token) * (size_t)RECUR_TOKENS_MAX(len));
    const int32_t n = t ? recur_tokenize(s->model, content->valuestring, (int32_t)len, t,
                                         RECUR_TOKENS_MAX((int32_t)len), add_special, parse_special)
                        : -1;
    if (n < 0) {
        free(t);
        return serve_send_error(conn, 500, "server_error", "tokenization failed");
    }
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "tokens");
    for (int32_t i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(t[i]));
            continue;
        }
        char *p;
        int32_t k;
        if (!piece_of(s->model, t[i], &p, &k)) {
            free(t);
            cJSON_Delete(j);
            return serve_send_error(conn, 500, "server_error", "out of memory");
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", t[i]);
        if (recur_utf8_valid(p, (size_t)k) == (size_t)k) { /* a string, else its bytes */
            p[k] = '\0';                                   /* piece_of leaves room for it */
            cJSON_AddStringToObject(o, "piece", p);
        } else {
            cJSON *bytes = cJSON_AddArrayToObject(o, "piece");
            for (int32_t b = 0; b < k; b++)
                cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)p[b]));
        }
        free(p);
        cJSON_AddItemToArray(arr, o);
    }
    free(t);
    return serve_send_json(conn, 200, j);
}

enum MHD_Result serve_detokenize(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq) {
    static const char *const known[] = {"tokens", "model", NULL};
    char msg[160];
    if (serve_unknown_field(rq->body, known, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    recur_token *t = NULL;
    int32_t n = 0;
    if (!serve_parse_tokens(s, cJSON_GetObjectItemCaseSensitive(rq->body, "tokens"), "tokens", &t,
                            &n, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    size_t len = 0;
    char *text = tokens_text(s->model, t, n, &len);
    free(t);
    if (!text) return serve_send_error(conn, 500, "server_error", "out of memory");
    cJSON *j = cJSON_CreateObject();
    serve_add_text(j, "content", text, len);
    free(text);
    return serve_send_json(conn, 200, j);
}

/* ---- /v1/models -------------------------------------------------------------------------- */

enum MHD_Result serve_models(struct server *s, struct MHD_Connection *conn,
                             const struct serve_req *rq) {
    (void)rq;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(j, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "recur");
    /* llama-server's: every name the model answers to (-a), the first being its id */
    cJSON *aliases = cJSON_AddArrayToObject(m, "aliases");
    for (int i = 0; i < s->n_aliases; i++)
        cJSON_AddItemToArray(aliases, cJSON_CreateString(s->aliases[i]));
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "architecture", recur_model_arch_name(s->model));
    cJSON_AddNumberToObject(meta, "n_vocab", recur_model_n_vocab(s->model));
    cJSON_AddNumberToObject(meta, "n_embd", recur_model_n_embd(s->model));
    cJSON_AddNumberToObject(meta, "n_layer", recur_model_n_layer(s->model));
    cJSON_AddNumberToObject(meta, "state_bytes", (double)s->state_bytes);
    /* llama-server's meta names: the weights' parameters and bytes */
    cJSON_AddNumberToObject(meta, "n_params", (double)recur_model_n_params(s->model));
    cJSON_AddNumberToObject(meta, "size", (double)recur_model_size(s->model));
    cJSON_AddItemToArray(data, m);
    return serve_send_json(conn, 200, j);
}

/* ---- /props and /slots ------------------------------------------------------------------- */

/* A task's generation settings, as llama-server's "params" (the fields recur honours). */
static cJSON *params_json(const struct server *s, const struct task *t, int32_t n_predict,
                          bool default_seed) {
    cJSON *p = cJSON_CreateObject();
    const struct recur_sampler_params *sp = &t->sampling;
    cJSON_AddNumberToObject(p, "n_predict", n_predict);
    /* llama-server's 4294967295: a new seed per request */
    cJSON_AddNumberToObject(p, "seed", default_seed ? 4294967295.0 : (double)sp->seed);
    serve_add_sampling(p, sp);
    cJSON *stop = cJSON_AddArrayToObject(p, "stop");
    for (int i = 0; i < t->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(t->stop[i]));
    cJSON_AddNumberToObject(p, "max_tokens", default_seed ? s->lim.max_tokens : t->max_tokens);
    cJSON_AddBoolToObject(p, "ignore_eos", t->ignore_eos);
    cJSON_AddBoolToObject(p, "cache_prompt", t->cache_prompt);
    cJSON_AddNumberToObject(p, "n_probs", 0);
    /* llama-server's: how a chat answer's reasoning is returned (a chat task's own, else the
       server's --reasoning-format) */
    cJSON_AddStringToObject(p, "reasoning_format",
                            serve_reasoning_name(t->api == API_CHAT ? t->reasoning : s->reasoning));
    cJSON *smp = cJSON_AddArrayToObject(p, "samplers");
    static const char *const chain[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        cJSON_AddItemToArray(smp, cJSON_CreateString(chain[i]));
    return p;
}

/* The settings a /completion request that names nothing gets: serve_parse_completion's own
 * defaults, so this cannot drift from what requests really get. */
static bool default_task(struct server *s, struct task **out) {
    struct task *t = calloc(1, sizeof *t);
    cJSON *body = cJSON_CreateObject(), *prompt = cJSON_AddArrayToObject(body, "prompt");
    cJSON_AddItemToArray(prompt, cJSON_CreateNumber(0));
    char msg[200];
    bool stream = false;
    const bool ok = t && body && serve_parse_completion(s, body, true, t, &stream, msg, sizeof msg);
    cJSON_Delete(body);
    if (!ok && t) {
        t->refs = 1;
        pthread_mutex_lock(&s->mu);
        serve_task_release(s, t);
        pthread_mutex_unlock(&s->mu);
        t = NULL;
    }
    *out = t;
    return t != NULL;
}

static void free_default_task(struct server *s, struct task *t) {
    t->refs = 1;
    pthread_mutex_lock(&s->mu);
    serve_task_release(s, t);
    pthread_mutex_unlock(&s->mu);
}

static void add_text_of(cJSON *o, const char *name, const struct server *s, const recur_token *t,
                        int32_t n) {
    size_t len = 0;
    char *text = tokens_text(s->model, t, n, &len);
    serve_add_text(o, name, text ? text : "", text ? len : 0);
    free(text);
}

/* One slot as llama-server shows it; t: its running task or NULL; choice: which of t's. Under
 * s->mu. */
static cJSON *slot_json(struct server *s, int32_t q, const struct task *t, int choice,
                        const struct task *defaults, uint64_t tenant) {
    /* another API key's conversation is not shown: its prompt, settings and progress stay its
       own (that the slot is busy is shown) */
    const bool own = t ? t->tenant == tenant : s->slots[q].tenant == tenant;
    const struct task *shown = own ? t : NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", q);
    cJSON_AddNumberToObject(o, "id_task", t ? (double)t->id : (double)s->slots[q].id_task);
    cJSON_AddNumberToObject(o, "n_ctx", s->lim.n_ctx);
    cJSON_AddBoolToObject(o, "speculative", false);
    cJSON_AddBoolToObject(o, "is_processing", t != NULL);
    cJSON_AddItemToObject(o, "params",
                          shown ? params_json(s, shown, shown->max_tokens, false)
                                : params_json(s, defaults, s->lim.n_predict, true));
    if (shown)
        add_text_of(o, "prompt", s, shown->prompt, shown->n_prompt);
    else if (own && !t)
        add_text_of(o, "prompt", s, s->slots[q].tokens, s->slots[q].n_tokens);
    else
        cJSON_AddStringToObject(o, "prompt", "");
    /* recur's: the tokens the slot's state holds (its last finished conversation) */
    cJSON_AddNumberToObject(o, "n_tokens_cached", t || !own ? 0 : s->slots[q].n_tokens);
    cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
    const struct choice *c = shown ? &shown->choice[choice] : NULL;
    cJSON_AddBoolToObject(nt, "has_next_token", c ? !c->finished : true);
    cJSON_AddBoolToObject(nt, "has_new_line", c && c->text && memchr(c->text, '\n', c->len));
    cJSON_AddNumberToObject(nt, "n_remain", c ? shown->max_tokens - c->n_out : -1);
    cJSON_AddNumberToObject(nt, "n_decoded", c ? c->n_out : 0);
    cJSON_AddStringToObject(nt, "stopping_word", "");
    return o;
}

enum MHD_Result serve_props(struct server *s, struct MHD_Connection *conn,
                            const struct serve_req *rq) {
    if (strcmp(rq->method, "POST") == 0) return serve_not_served(s, conn, rq);
    struct task *d;
    if (!default_task(s, &d)) return serve_send_error(conn, 500, "server_error", "out of memory");
    cJSON *j = cJSON_CreateObject();
    pthread_mutex_lock(&s->mu);
    cJSON *dg = slot_json(s, 0, NULL, 0, d, rq->tenant);
    pthread_mutex_unlock(&s->mu);
    cJSON_ReplaceItemInObject(dg, "id_task", cJSON_CreateNumber(-1));
    cJSON_ReplaceItemInObject(dg, "prompt", cJSON_CreateString(""));
    cJSON_DeleteItemFromObject(dg, "n_tokens_cached");
    cJSON_AddItemToObject(j, "default_generation_settings", dg);
    free_default_task(s, d);
    cJSON_AddNumberToObject(j, "total_slots", s->lim.n_parallel);
    cJSON_AddStringToObject(j, "model_path", s->model_path);
    cJSON_AddStringToObject(j, "model_alias", s->model_name);
    /* the template in use (a builtin name, or the model's text), and the format recur reads
       it as; null when the model's own template is of a shape recur does not know */
    const char *tmpl = serve_chat_template(s), *tmpl_name = recur_chat_template_name(tmpl);
    cJSON_AddStringToObject(j, "chat_template", tmpl);
    if (tmpl_name)
        cJSON_AddStringToObject(j, "chat_template_name", tmpl_name);
    else
        cJSON_AddNullToObject(j, "chat_template_name");
    cJSON *mod = cJSON_AddObjectToObject(j, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddStringToObject(j, "build_info", "recur " RECUR_VERSION_STRING);
    cJSON_AddBoolToObject(j, "is_sleeping", false);
    cJSON *r = cJSON_AddObjectToObject(j, "recur"); /* recur's own */
    cJSON_AddStringToObject(r, "version", RECUR_VERSION_STRING);
    cJSON_AddStringToObject(r, "architecture", recur_model_arch_name(s->model));
    cJSON_AddNumberToObject(r, "n_vocab", recur_model_n_vocab(s->model));
    cJSON_AddNumberToObject(r, "n_embd", recur_model_n_embd(s->model));
    cJSON_AddNumberToObject(r, "n_layer", recur_model_n_layer(s->model));
    cJSON_AddNumberToObject(r, "state_bytes_per_sequence", (double)s->state_bytes);
    cJSON_AddNumberToObject(r, "n_params", (double)recur_model_n_params(s->model));
    cJSON_AddNumberToObject(r, "model_size", (double)recur_model_size(s->model));
    /* the weight types, most bytes first: a Q4_K_M file is q4_K, q6_K and fallbacks */
    cJSON *types = cJSON_AddArrayToObject(r, "weight_types");
    struct gen_type_share mix[GEN_TYPES_MAX];
    const int n_mix = gen_type_mix(s->model, mix);
    for (int i = 0; types && i < n_mix; i++) {
        cJSON *t = cJSON_CreateObject();
        if (!t) break;
        cJSON_AddStringToObject(t, "type", mix[i].type);
        cJSON_AddNumberToObject(t, "tensors", mix[i].tensors);
        cJSON_AddNumberToObject(t, "bytes", (double)mix[i].bytes);
        cJSON_AddItemToArray(types, t);
    }
    cJSON_AddNumberToObject(r, "n_ctx", s->lim.n_ctx);
    cJSON_AddNumberToObject(r, "max_tokens", s->lim.max_tokens);
    cJSON_AddNumberToObject(r, "max_prompt", s->lim.max_prompt);
    return serve_send_json(conn, 200, j);
}

enum MHD_Result serve_slots_get(struct server *s, struct MHD_Connection *conn,
                                const struct serve_req *rq) {
    if (!s->slots_endpoint)
        return serve_send_error(conn, 501, "not_supported_error",
                                "This server does not support slots endpoint. Start it without "
                                "--no-slots");
    struct task *d;
    if (!default_task(s, &d)) return serve_send_error(conn, 500, "server_error", "out of memory");
    const char *fail = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    cJSON *arr = cJSON_CreateArray();
    pthread_mutex_lock(&s->mu);
    const bool none_free = s->slots_in_use >= s->lim.n_parallel;
    for (int32_t q = 0; q < s->lim.n_parallel; q++) {
        const struct task *t = NULL;
        int choice = 0;
        for (int32_t a = 0; a < s->lim.n_parallel && !t; a++) {
            const struct task *x = s->active[a];
            for (int i = 0; x && i < x->n && !t; i++)
                if (x->choice[i].seq == q) t = x, choice = i;
        }
        cJSON_AddItemToArray(arr, slot_json(s, q, t, choice, d, rq->tenant));
    }
    pthread_mutex_unlock(&s->mu);
    free_default_task(s, d);
    if (fail && strcmp(fail, "0") != 0 && none_free) {
        cJSON_Delete(arr);
        return serve_send_error(conn, 503, "unavailable_error", "no slot available");
    }
    return serve_send_json(conn, 200, arr);
}

/* ---- /metrics ---------------------------------------------------------------------------- */

enum MHD_Result serve_metrics_get(struct server *s, struct MHD_Connection *conn,
                                  const struct serve_req *rq) {
    (void)rq;
    pthread_mutex_lock(&s->mu);
    const struct serve_metrics m = s->m;
    const int32_t in_use = s->slots_in_use, queued = s->n_queued;
    int32_t processing = 0;
    for (int32_t q = 0; q < s->lim.n_parallel; q++) processing += s->active[q] != NULL;
    pthread_mutex_unlock(&s->mu);
    const double processed = (double)(m.prompt_tokens - m.prompt_tokens_cached);
    const double n_open = (double)serve_conns_open(s);
    struct store_stats ss = {0};
    if (s->store) store_get_stats(s->store, &ss);
    struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        /* llama-server's names */
        {"llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         processed},
        {"llamacpp:prompt_seconds_total", "counter", "Prompt process time in seconds.", m.prompt_s},
        {"llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
         (double)m.generated_tokens},
        {"llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time in seconds.",
         m.predicted_s},
        {"llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
         m.prompt_s > 0 ? processed / m.prompt_s : 0.0},
        {"llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         m.predicted_s > 0 ? (double)m.generated_tokens / m.predicted_s : 0.0},
        {"llamacpp:requests_processing", "gauge", "Number of requests processing.",
         (double)processing},
        {"llamacpp:requests_deferred", "gauge", "Number of requests deferred.", (double)queued},
        {"llamacpp:n_tokens_max", "counter", "High watermark of the context size observed.",
         (double)m.n_tokens_max},
        {"llamacpp:n_decode_total", "counter", "Total number of recur_decode() calls.",
         (double)m.steps},
        {"llamacpp:n_busy_slots_per_decode", "gauge",
         "Average number of busy slots per recur_decode() call.",
         m.steps ? (double)m.busy_slots / (double)m.steps : 0.0},
        /* recur's own */
        {"recur_requests_total", "counter", "Requests accepted.", (double)m.requests},
        {"recur_requests_failed_total", "counter", "Requests that failed or were cancelled.",
         (double)m.requests_failed},
        {"recur_requests_rejected_total", "counter", "Requests refused: queue full (503).",
         (double)m.rejected_busy},
        {"recur_prompt_tokens_total", "counter", "Prompt tokens of finished prompts.",
         (double)m.prompt_tokens},
        {"recur_prompt_tokens_cached_total", "counter",
         "Prompt tokens restored from the prefix cache instead of decoded.",
         (double)m.prompt_tokens_cached},
        {"recur_tokens_processed_total", "counter", "Prompt tokens decoded.", processed},
        {"recur_tokens_generated_total", "counter", "Tokens generated.",
         (double)m.generated_tokens},
        {"recur_tokens_per_second", "gauge", "Generated tokens per second of decoding.",
         m.busy_s > 0 ? (double)m.generated_tokens / m.busy_s : 0.0},
        {"recur_decode_steps_total", "counter", "Batches decoded.", (double)m.steps},
        {"recur_prefix_cache_hits_total", "counter", "Prompts that reused a cached prefix.",
         (double)m.cache.hits},
        {"recur_prefix_cache_misses_total", "counter", "Prompts with no cached prefix.",
         (double)m.cache.misses},
        {"recur_prefix_cache_bytes", "gauge", "Bytes held by the prefix cache.",
         (double)m.cache.bytes},
        {"recur_prefix_cache_entries", "gauge", "Prefixes held by the prefix cache.",
         (double)m.cache.n_entries},
        {"recur_sequences_in_use", "gauge", "Sequence slots decoding a request.", (double)in_use},
        {"recur_queue_length", "gauge", "Requests waiting for a slot.", (double)queued},
        {"recur_requests_rejected_stopping_total", "counter",
         "Requests answered 503 during the drain.", (double)m.rejected_stopping},
        {"recur_read_timeouts_total", "counter",
         "Connections closed (408) for a request not sent within --read-timeout.",
         (double)m.read_timeouts},
        {"recur_clients_gone_total", "counter",
         "Waiting requests whose client went away (their work cancelled).", (double)m.clients_gone},
        {"recur_connections_open", "gauge", "HTTP connections open now.", n_open},
        {"recur_prefix_store_hits_total", "counter",
         "Restores that took a longer prefix from the second tier (--prefix-cache-store).",
         (double)m.cache.store_hits},
        {"recur_prefix_store_lookups_total", "counter", "Lookups in the second tier.",
         (double)ss.gets},
        {"recur_prefix_store_refused_total", "counter",
         "Second-tier entries refused: corrupt, of another model or tenant.",
         (double)m.cache.store_refused},
        {"recur_prefix_store_errors_total", "counter",
         "Second-tier operations that failed or timed out (each a miss).", (double)ss.errors},
        {"recur_prefix_store_writes_total", "counter", "Entries written to the second tier.",
         (double)ss.puts},
        {"recur_prefix_store_write_errors_total", "counter",
         "Entries the second tier failed to write.", (double)ss.put_errors},
        {"recur_prefix_store_dropped_total", "counter",
         "Entries not written: the write queue was full.", (double)ss.dropped},
        {"recur_prefix_store_queued", "gauge",
         "Entries waiting for the second tier's writer (a replica that dies loses them).",
         (double)ss.queued},
        {"recur_prefix_store_queued_bytes", "gauge", "The bytes of those entries.",
         (double)ss.queued_bytes},
        {"recur_decode_retries_total", "counter",
         "Shared decodes that failed and were retried request by request.",
         (double)m.decode_retries},
    };
    const size_t cap = 16384;
    char *out = malloc(cap);
    if (!out) return serve_send_error(conn, 500, "server_error", "out of memory");
    size_t off = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && off < cap; i++)
        off += (size_t)snprintf(out + off, cap - off, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n",
                                rows[i].name, rows[i].help, rows[i].name, rows[i].type,
                                rows[i].name, rows[i].v);
    return serve_send_text(conn, 200, "text/plain; version=0.0.4", out, NULL);
}

enum MHD_Result serve_handle_chat_prompt(struct server *s, struct MHD_Connection *conn,
                                         const struct serve_req *rq, bool count) {
    enum MHD_Result answered;
    struct serve_request *r = serve_request_new(s, conn, rq, API_CHAT, &answered);
    if (!r) return answered;
    const struct task *t = r->tasks[0];
    cJSON *j = cJSON_CreateObject();
    if (j && count) {
        cJSON_AddStringToObject(j, "object", "response.input_tokens");
        cJSON_AddNumberToObject(j, "input_tokens", t->n_prompt);
    } else if (j) {
        const char *text = t->prompt_text ? t->prompt_text : "";
        serve_add_text(j, "prompt", text, strlen(text));
    }
    serve_request_free(s, r);
    free(r);
    if (!j) return serve_send_error(conn, 500, "server_error", "out of memory");
    return serve_send_json(conn, 200, j);
}

/* GET /lora-adapters: llama-server's list of loaded LoRA adapters. recur applies no adapters
 * (there is no --lora), so the list is empty; POST accepts only what that list allows: a list
 * whose entries set no adapter (an empty list), and names the first id that does not exist.
 * Answering the truth keeps clients that read the list (dashboards, the web page) working,
 * where a 404 would tell them the server is not llama-server-compatible. */
enum MHD_Result serve_lora_adapters(struct server *s, struct MHD_Connection *conn,
                                    const struct serve_req *rq) {
    (void)s;
    if (strcmp(rq->method, "POST") != 0) return serve_send_json(conn, 200, cJSON_CreateArray());
    if (!cJSON_IsArray(rq->body))
        return serve_send_error(conn, 400, "invalid_request_error",
                                "the body must be a list of {\"id\": N, \"scale\": X} entries");
    const cJSON *e = rq->body->child;
    if (e) {
        char msg[160];
        const cJSON *id = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "id") : NULL;
        if (cJSON_IsNumber(id))
            snprintf(msg, sizeof msg,
                     "entry 0: no LoRA adapter has id %.0f: recur serve loads no adapters",
                     id->valuedouble);
        else
            snprintf(msg, sizeof msg, "entry 0: must be an object with a number \"id\"");
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    }
    cJSON *ok = cJSON_CreateObject();
    if (ok && !cJSON_AddTrueToObject(ok, "success")) {
        cJSON_Delete(ok);
        ok = NULL;
    }
    return serve_send_json(conn, 200, ok);
}

/* llama-server's endpoints that recur serve knows and does not serve, each with the reason:
 * a client gets a 501 that says why, where a bare 404 would read as a wrong URL. */
static const struct {
    const char *path;
    const char *why;
} not_served[] = {
    {"/reranking", "This server does not support reranking: it needs a reranker model (a "
                   "classification head, llama-server's --embedding --pooling rank), which recur "
                   "does not load"},
    {"/props", "This server does not change its properties at run time (llama-server's --props): "
               "restart it with other flags"},
    {"/models/load", "This server serves one model (llama-server's router mode loads and unloads "
                     "models): restart it with another -m"},
    {"/v1/chat/completions/control",
     "This server does not support reasoning_control, so no running completion can be controlled"},
};

enum MHD_Result serve_not_served(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq) {
    (void)s;
    const char *why = "This server does not support this endpoint";
    const char *path = rq->url;
    /* the aliases answer as the path they stand for */
    if (strcmp(path, "/rerank") == 0 || strcmp(path, "/v1/rerank") == 0 ||
        strcmp(path, "/v1/reranking") == 0)
        path = "/reranking";
    else if (strcmp(path, "/models/unload") == 0 || strcmp(path, "/models/sse") == 0)
        path = "/models/load";
    for (size_t i = 0; i < sizeof not_served / sizeof not_served[0]; i++)
        if (strcmp(path, not_served[i].path) == 0) why = not_served[i].why;
    return serve_send_error(conn, 501, "not_supported_error", why);
}
