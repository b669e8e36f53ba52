/*
 * recur serve: an HTTP server (libmicrohttpd) with an OpenAI-shaped and a llama.cpp-shaped
 * completion API, continuous batching and prompt reuse (serve.h, serve_sched.c).
 *
 * Endpoints: POST /v1/completions, POST /completion, POST /tokenize, POST /detokenize,
 * GET /health, GET /metrics. Errors answer {"error": {"message", "type", "code"}} with a 4xx
 * or 5xx status and the server goes on. JSON is parsed and written with cJSON.
 */
#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common.h"
#include "serve.h"
#include "serve_api.h"
#include "tools.h"

/* ---- one connection's request ------------------------------------------------------------- */

struct request {
    char *body;
    size_t len, cap;
    bool too_large;
};

static void request_free(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)conn;
    (void)code;
    struct request *r = *con_cls;
    if (r) {
        free(r->body);
        free(r);
    }
    *con_cls = NULL;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, status, "application/json", text, NULL);
}

/* ---- small endpoints --------------------------------------------------------------------- */

static enum MHD_Result handle_tokenize(struct server *s, struct MHD_Connection *conn, cJSON *body) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(body, "content");
    if (!cJSON_IsString(content))
        return serve_send_error(conn, 400, "invalid_request_error", "\"content\" must be a string");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(body, "add_special");
    if (special && !cJSON_IsBool(special))
        return serve_send_error(conn, 400, "invalid_request_error",
                                "\"add_special\" must be a boolean");
    const int32_t len = (int32_t)strlen(content->valuestring);
    recur_token *t = malloc(sizeof(recur_token) * ((size_t)len + 2));
    const int32_t n = t ? recur_tokenize(s->model, content->valuestring, len, t, len + 2,
                                         special && cJSON_IsTrue(special), false)
                        : -1;
    if (n < 0) {
        free(t);
        return serve_send_error(conn, 500, "server_error", "tokenization failed");
    }
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(j, "tokens");
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(t[i]));
    free(t);
    return send_json(conn, 200, j);
}

static enum MHD_Result handle_detokenize(struct server *s, struct MHD_Connection *conn,
                                         cJSON *body) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(body, "tokens");
    char msg[160];
    recur_token *t = NULL;
    int32_t n = 0;
    if (!serve_parse_tokens(s, arr, "tokens", &t, &n, msg, sizeof msg))
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    int32_t cap = 16 * n + 16, got = -1;
    char *text = malloc((size_t)cap);
    if (text) got = recur_detokenize(s->model, t, n, text, cap, false, false);
    if (got < 0 && got != INT32_MIN) { /* the size it needs */
        cap = -got;
        free(text);
        text = malloc((size_t)cap);
        got = text ? recur_detokenize(s->model, t, n, text, cap, false, false) : -1;
    }
    free(t);
    if (got < 0) {
        free(text);
        return serve_send_error(conn, 500, "server_error", "detokenization failed");
    }
    cJSON *j = cJSON_CreateObject();
    serve_add_text(j, "content", text, (size_t)got);
    free(text);
    return send_json(conn, 200, j);
}

static enum MHD_Result handle_metrics(struct server *s, struct MHD_Connection *conn) {
    pthread_mutex_lock(&s->mu);
    const struct serve_metrics m = s->m;
    const int32_t in_use = s->slots_in_use, queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    char *out = malloc(4096);
    if (!out) return MHD_NO;
    struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
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
        {"recur_tokens_processed_total", "counter", "Prompt tokens decoded.",
         (double)(m.prompt_tokens - m.prompt_tokens_cached)},
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
    };
    size_t off = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        off += (size_t)snprintf(out + off, 4096 - off, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n",
                                rows[i].name, rows[i].help, rows[i].name, rows[i].type,
                                rows[i].name, rows[i].v);
    return serve_send_text(conn, 200, "text/plain; version=0.0.4", out, NULL);
}

/* ---- dispatch ---------------------------------------------------------------------------- */

static bool authorized(const struct server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, s->api_key) == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    struct server *s = cls;
    struct request *r = *con_cls;
    if (!r) { /* the first call: headers only */
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size > 0) { /* body bytes: kept up to the limit, the rest read and dropped */
        if (!r->too_large && r->len + *upload_size > s->lim.max_body) r->too_large = true;
        if (!r->too_large) {
            if (r->len + *upload_size + 1 > r->cap) {
                size_t cap = 2 * (r->len + *upload_size) + 1;
                char *grown = realloc(r->body, cap);
                if (!grown) return MHD_NO;
                r->body = grown;
                r->cap = cap;
            }
            memcpy(r->body + r->len, upload, *upload_size);
            r->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }

    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0) {
        if (!get) return serve_send_error(conn, 405, "invalid_request_error", "use GET /health");
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "status", "ok");
        return send_json(conn, 200, j);
    }
    if (!authorized(s, conn))
        return serve_send_error(conn, 401, "authentication_error", "invalid or missing API key");
    if (strcmp(url, "/metrics") == 0) {
        if (!get) return serve_send_error(conn, 405, "invalid_request_error", "use GET /metrics");
        return handle_metrics(s, conn);
    }
    const bool chat =
        strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/chat/completions") == 0;
    const bool known = strcmp(url, "/v1/completions") == 0 || strcmp(url, "/completion") == 0 ||
                       chat || strcmp(url, "/tokenize") == 0 || strcmp(url, "/detokenize") == 0;
    if (!known) return serve_send_error(conn, 404, "not_found_error", "no such endpoint");
    if (!post) return serve_send_error(conn, 405, "invalid_request_error", "use POST");
    if (r->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->lim.max_body);
        return serve_send_error(conn, 413, "invalid_request_error", msg);
    }
    cJSON *body = r->len ? cJSON_ParseWithLength(r->body, r->len) : NULL;
    if (!cJSON_IsObject(body)) {
        cJSON_Delete(body);
        return serve_send_error(conn, 400, "invalid_request_error",
                                "the body must be a JSON object");
    }
    enum MHD_Result ret;
    if (strcmp(url, "/tokenize") == 0)
        ret = handle_tokenize(s, conn, body);
    else if (strcmp(url, "/detokenize") == 0)
        ret = handle_detokenize(s, conn, body);
    else
        ret = serve_handle_completion(s, conn, body,
                                      chat                              ? API_CHAT
                                      : strcmp(url, "/completion") == 0 ? API_LLAMA
                                                                        : API_OPENAI);
    cJSON_Delete(body);
    return ret;
}

/* ---- main -------------------------------------------------------------------------------- */

#define SERVE_FLAGS                                                                                \
    (GBIT(G_MODEL) | GBIT(G_THREADS) | GBIT(G_BATCH) | GBIT(G_UBATCH) | GBIT(G_PARALLEL) |         \
     GBIT(G_HOST) | GBIT(G_PORT) | GBIT(G_PREFIX_MB) | GBIT(G_API_KEY) | GBIT(G_QUEUE) |           \
     GBIT(G_MAX_TOKENS) | GBIT(G_TIMEOUT))

int cmd_serve(int argc, char **argv) {
    struct gen_opts o;
    int st = gen_parse(argc, argv, SERVE_FLAGS,
                       "Serves completions over HTTP (OpenAI /v1/completions and llama.cpp "
                       "/completion), batching every request of every client in one decode.",
                       &o);
    if (st >= 0) return st;
    if (!o.n_parallel_given) o.n_parallel = 16; /* the server's default: 16 slots */
    struct server s;
    memset(&s, 0, sizeof s);
    s.lim = (struct serve_limits){.n_parallel = o.n_parallel,
                                  .queue_max = o.queue_max,
                                  .max_prompt = 8192,
                                  .max_tokens = o.max_tokens,
                                  .max_body = 1u << 20,
                                  .timeout_s = o.timeout_s,
                                  .n_predict = -1,
                                  .n_ctx = 0};
    s.api_key = o.api_key;
    const char *slash = strrchr(o.model, '/');
    s.model_name = slash ? slash + 1 : o.model;

    /* signals go to the thread that waits for them, not to the workers */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* the prefix cache, with a checkpoint every 64 positions; no per-token snapshots (they
       would copy every sequence's state at every step): the prompt minus its last token is
       stored by decoding the prompt in two parts */
    struct recur_context_params cp = gen_context_params(&o, (uint32_t)o.n_parallel);
    cp.prefix_cache_bytes = (uint64_t)o.cache_mb << 20;
    cp.checkpoint_every = 64;
    cp.n_rollback = 0;
    if (!gen_load_params(&o, cp, &s.model, &s.ctx)) return TOOL_FAIL;
    int ret = TOOL_FAIL;
    s.active = calloc((size_t)o.n_parallel, sizeof *s.active);
    s.slot_used = calloc((size_t)o.n_parallel, sizeof *s.slot_used);
    if (!s.active || !s.slot_used || pthread_mutex_init(&s.mu, NULL) != 0 ||
        pthread_cond_init(&s.work, NULL) != 0 || pthread_cond_init(&s.progress, NULL) != 0) {
        fprintf(stderr, "recur serve: out of memory\n");
        goto done;
    }
    s.t_start = serve_now();
    pthread_t sched;
    if (pthread_create(&sched, NULL, serve_sched_main, &s) != 0) {
        fprintf(stderr, "recur serve: cannot start the decode thread\n");
        goto done;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)o.port);
    if (inet_pton(AF_INET, o.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "recur serve: --host %s is not an IPv4 address\n", o.host);
        goto stop_sched;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
        (uint16_t)o.port, NULL, NULL, handle, &s, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_NOTIFY_COMPLETED, request_free, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)10, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o.queue_max + o.n_parallel + 64),
        MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "recur serve: cannot listen on %s:%d (%s)\n", o.host, o.port,
                strerror(errno));
        goto stop_sched;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "recur serve: listening on http://%s:%u (%d slots)\n", o.host,
            di ? (unsigned)di->port : (unsigned)o.port, o.n_parallel);
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "recur serve: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    MHD_quiesce_daemon(d); /* no new connections; the open ones finish */
    pthread_mutex_lock(&s.mu);
    s.stopping = true;
    pthread_cond_broadcast(&s.work);
    pthread_mutex_unlock(&s.mu);
    pthread_join(sched, NULL);
    /* answers of the drained requests may still be on their way: give their connections
       (not idle keep-alive ones, which time out) a few seconds to finish */
    for (int i = 0; i < 250; i++) {
        const union MHD_DaemonInfo *ci =
            MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!ci || ci->num_connections == 0) break;
        const struct timespec ms20 = {0, 20 * 1000 * 1000};
        nanosleep(&ms20, NULL);
    }
    MHD_stop_daemon(d);
    fprintf(stderr, "recur serve: stopped\n");
    ret = TOOL_OK;
    goto done;
stop_sched:
    pthread_mutex_lock(&s.mu);
    s.stopping = true;
    pthread_cond_broadcast(&s.work);
    pthread_mutex_unlock(&s.mu);
    pthread_join(sched, NULL);
done:
    free(s.active);
    free(s.slot_used);
    recur_free(s.ctx);
    recur_model_free(s.model);
    return ret;
}
