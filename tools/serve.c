/*
 * recur serve: an HTTP server (libmicrohttpd) shaped as llama-server, with an OpenAI-shaped and
 * a llama.cpp-shaped completion API, continuous batching and prompt reuse (serve.h,
 * serve_sched.c).
 *
 * Endpoints are rows of one table (path, methods, handler, whether the API key is asked):
 * completions (serve_api.c), models/props/slots/metrics/tokenize/detokenize (serve_meta.c),
 * slot actions (serve_slots.c). Every answer carries CORS headers; OPTIONS (a browser's
 * preflight) is answered before the API key is looked at; an unknown path is a 404, a known one
 * asked with another method a 405 with Allow. Errors answer {"error": {"message", "type",
 * "code"}} and the server goes on. JSON is parsed and written with cJSON.
 */
#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "common.h"
#include "serve.h"
#include "serve_api.h"
#include "serve_endpoints.h"
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

/* ---- the endpoint table ------------------------------------------------------------------ */

static enum MHD_Result h_health(struct server *s, struct MHD_Connection *conn,
                                const struct serve_req *rq) {
    (void)s;
    (void)rq;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "status", "ok");
    return serve_send_json(conn, 200, j);
}

static enum MHD_Result h_llama(struct server *s, struct MHD_Connection *conn,
                               const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq->body, API_LLAMA);
}

static enum MHD_Result h_openai(struct server *s, struct MHD_Connection *conn,
                                const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq->body, API_OPENAI);
}

static enum MHD_Result h_chat(struct server *s, struct MHD_Connection *conn,
                              const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq->body, API_CHAT);
}

enum { M_GET = 1, M_POST = 2 };

struct endpoint {
    const char *path;
    bool prefix;        /* path is a prefix ("/slots/" + id) */
    unsigned methods;   /* M_GET | M_POST */
    bool auth;          /* the API key is asked (llama-server leaves health and models open) */
    bool body_optional; /* a POST without a body gets {} */
    serve_handler fn;
};

static const struct endpoint endpoints[] = {
    /* the web page (serve_webui.c): open, as the page must load before it can send the key */
    {"/", false, M_GET, false, false, serve_webui},
    {"/webui/", true, M_GET, false, false, serve_webui},
    {"/health", false, M_GET, false, false, h_health},
    {"/v1/health", false, M_GET, false, false, h_health},
    {"/models", false, M_GET, false, false, serve_models},
    {"/v1/models", false, M_GET, false, false, serve_models},
    {"/props", false, M_GET, true, false, serve_props},
    {"/slots", false, M_GET, true, false, serve_slots_get},
    {"/slots/", true, M_POST, true, true, serve_slot_action},
    {"/metrics", false, M_GET, true, false, serve_metrics_get},
    {"/tokenize", false, M_POST, true, false, serve_tokenize},
    {"/detokenize", false, M_POST, true, false, serve_detokenize},
    {"/completion", false, M_POST, true, false, h_llama},
    {"/completions", false, M_POST, true, false, h_llama},
    {"/v1/completions", false, M_POST, true, false, h_openai},
    {"/v1/chat/completions", false, M_POST, true, false, h_chat},
    {"/chat/completions", false, M_POST, true, false, h_chat},
};

static const struct endpoint *find_endpoint(const char *url) {
    for (size_t i = 0; i < sizeof endpoints / sizeof endpoints[0]; i++) {
        const struct endpoint *e = &endpoints[i];
        if (e->prefix ? strncmp(url, e->path, strlen(e->path)) == 0 : strcmp(url, e->path) == 0)
            return e;
    }
    return NULL;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

/* The key as "Authorization: Bearer KEY" or "X-Api-Key: KEY" (llama-server takes both). */
static bool authorized(const struct server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, s->api_key) == 0) return true;
    h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key");
    return h && strcmp(h, s->api_key) == 0;
}

/* A browser's preflight: what may be asked, from any origin (llama-server's default). */
static enum MHD_Result answer_options(struct MHD_Connection *conn) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    serve_cors_headers(conn, resp);
    const char *req_headers =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            req_headers ? req_headers : "Authorization, Content-Type, X-Api-Key");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* 405 with Allow naming the methods e takes. */
static enum MHD_Result answer_405(struct MHD_Connection *conn, const struct endpoint *e,
                                  const char *method) {
    char allow[32], msg[96];
    snprintf(allow, sizeof allow, "%s%s%s", e->methods & M_GET ? "GET" : "",
             e->methods == (M_GET | M_POST) ? ", " : "", e->methods & M_POST ? "POST" : "");
    snprintf(msg, sizeof msg, "%.16s is not allowed here: use %s", method, allow);
    cJSON *j = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", "invalid_request_error");
    cJSON_AddNumberToObject(err, "code", 405);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    struct MHD_Response *resp =
        text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Allow", allow);
    serve_cors_headers(conn, resp);
    enum MHD_Result ret = MHD_queue_response(conn, 405, resp);
    MHD_destroy_response(resp);
    return ret;
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

    if (strcmp(method, "OPTIONS") == 0) return answer_options(conn);
    const struct endpoint *e = find_endpoint(url);
    if ((!e || e->auth) && !authorized(s, conn))
        return serve_send_error(conn, 401, "authentication_error", "Invalid API Key");
    if (!e) return serve_send_error(conn, 404, "not_found_error", "File Not Found");
    const unsigned m = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ? M_GET
                       : strcmp(method, "POST") == 0                             ? M_POST
                                                                                 : 0;
    if (!(e->methods & m)) return answer_405(conn, e, method);
    struct serve_req rq = {url, NULL, r->body, r->len};
    if (m == M_GET) return e->fn(s, conn, &rq);
    if (r->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->lim.max_body);
        return serve_send_error(conn, 413, "invalid_request_error", msg);
    }
    cJSON *body = r->len             ? cJSON_ParseWithLength(r->body, r->len)
                  : e->body_optional ? cJSON_CreateObject()
                                     : NULL;
    if (!cJSON_IsObject(body)) {
        cJSON_Delete(body);
        return serve_send_error(conn, 400, "invalid_request_error",
                                "the body must be a JSON object");
    }
    rq.body = body;
    enum MHD_Result ret = e->fn(s, conn, &rq);
    cJSON_Delete(body);
    return ret;
}

/* ---- main -------------------------------------------------------------------------------- */

#define SERVE_FLAGS                                                                                \
    (GBIT(G_MODEL) | GBIT(G_THREADS) | GBIT(G_BATCH) | GBIT(G_UBATCH) | GBIT(G_PARALLEL) |         \
     GBIT(G_HOST) | GBIT(G_PORT) | GBIT(G_PREFIX_MB) | GBIT(G_API_KEY) | GBIT(G_QUEUE) |           \
     GBIT(G_MAX_TOKENS) | GBIT(G_TIMEOUT) | GBIT(G_SRV_N_PREDICT) | GBIT(G_SRV_CTX) |              \
     GBIT(G_ALIAS) | GBIT(G_NO_SLOTS) | GBIT(G_SLOT_SAVE_PATH) | GBIT(G_CHAT_TEMPLATE) |           \
     GBIT(G_NO_WEBUI))

/* One listening address: --host ADDR, IPv4 or IPv6 (bare or in brackets). */
struct listener {
    const char *host;
    char shown[64]; /* as a URL writes it: [::1] */
    struct sockaddr_storage addr;
    bool v6;
    struct MHD_Daemon *d;
};

static bool parse_host(const char *host, struct listener *l) {
    char bare[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') host++, n -= 2;
    if (n >= sizeof bare) return false;
    memcpy(bare, host, n);
    bare[n] = '\0';
    memset(&l->addr, 0, sizeof l->addr);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&l->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&l->addr;
    if (inet_pton(AF_INET, bare, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        l->v6 = false;
        snprintf(l->shown, sizeof l->shown, "%s", bare);
    } else if (inet_pton(AF_INET6, bare, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        l->v6 = true;
        snprintf(l->shown, sizeof l->shown, "[%s]", bare);
    } else {
        return false;
    }
    return true;
}

static void set_port(struct listener *l, unsigned port) {
    if (l->v6)
        ((struct sockaddr_in6 *)&l->addr)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)&l->addr)->sin_port = htons((uint16_t)port);
}

static struct MHD_Daemon *listen_on(struct server *s, struct listener *l, unsigned port,
                                    const struct gen_opts *o) {
    set_port(l, port);
    /* an IPv6 socket takes IPv6 only (MHD sets IPV6_V6ONLY without MHD_USE_DUAL_STACK), so
       that --host :: --host 0.0.0.0 can both be listened on */
    return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ERROR_LOG | (l->v6 ? MHD_USE_IPv6 : 0),
                            (uint16_t)port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, &l->addr,
                            MHD_OPTION_NOTIFY_COMPLETED, request_free, NULL,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(o->queue_max + o->n_parallel + 64), MHD_OPTION_END);
}

/* The flags' values checked before anything is loaded; false with a message. */
static bool check_flags(const struct gen_opts *o, struct listener *ls, int n_ls) {
    for (int i = 0; i < n_ls; i++)
        if (!parse_host(ls[i].host, &ls[i])) {
            fprintf(stderr, "recur serve: --host %s is not an IPv4 or IPv6 address\n", ls[i].host);
            return false;
        }
    if (o->srv_n_predict > o->max_tokens) {
        fprintf(stderr,
                "recur serve: -n %d is more than --max-tokens %d (the most a request may ask "
                "for)\n",
                o->srv_n_predict, o->max_tokens);
        return false;
    }
    if (o->srv_n_ctx == 1) {
        fprintf(stderr, "recur serve: -c 1 leaves no room for a token after the prompt; use 0 "
                        "(no limit) or 2 and more\n");
        return false;
    }
    if (o->slot_save_path) {
        struct stat st;
        if (stat(o->slot_save_path, &st) != 0) {
            fprintf(stderr, "recur serve: --slot-save-path %s: %s\n", o->slot_save_path,
                    strerror(errno));
            return false;
        }
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "recur serve: --slot-save-path %s is not a directory\n",
                    o->slot_save_path);
            return false;
        }
    }
    if (o->chat_template && !recur_chat_template_name(o->chat_template)) {
        fprintf(stderr, "recur serve: --chat-template: %s\n", recur_last_error());
        return false;
    }
    return true;
}

int cmd_serve(int argc, char **argv) {
    struct gen_opts o;
    int st = gen_parse(argc, argv, SERVE_FLAGS,
                       "Serves completions over HTTP as llama-server does (OpenAI /v1/completions, "
                       "llama.cpp /completion, /tokenize, /props, /slots, /metrics, ...), "
                       "batching every request of every client in one decode.",
                       &o);
    if (st >= 0) return st;
    if (!o.n_parallel_given) o.n_parallel = 16; /* the server's default: 16 slots */
    struct listener ls[GEN_MAX_HOSTS];
    const int n_ls = o.n_hosts ? o.n_hosts : 1;
    memset(ls, 0, sizeof ls);
    for (int i = 0; i < n_ls; i++) ls[i].host = o.n_hosts ? o.hosts[i] : "127.0.0.1";
    if (!check_flags(&o, ls, n_ls)) return TOOL_USAGE;
    struct server s;
    memset(&s, 0, sizeof s);
    s.lim = (struct serve_limits){.n_parallel = o.n_parallel,
                                  .queue_max = o.queue_max,
                                  .max_prompt = 8192,
                                  .max_tokens = o.max_tokens,
                                  .max_body = 1u << 20,
                                  .timeout_s = o.timeout_s,
                                  .n_predict = o.srv_n_predict,
                                  .n_ctx = o.srv_n_ctx};
    s.api_key = o.api_key;
    s.model_path = o.model;
    const char *slash = strrchr(o.model, '/');
    s.model_name = o.alias ? o.alias : slash ? slash + 1 : o.model;
    s.chat_template = o.chat_template;
    s.slots_endpoint = !o.no_slots;
    s.webui = !o.no_webui;
    s.slot_save_path = o.slot_save_path;

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
    struct recur_prefix_cache_stats cs;
    if (recur_prefix_cache_get_stats(s.ctx, &cs)) s.state_bytes = cs.entry_bytes;
    int ret = TOOL_FAIL;
    int n_up = 0;
    s.active = calloc((size_t)o.n_parallel, sizeof *s.active);
    s.slot_used = calloc((size_t)o.n_parallel, sizeof *s.slot_used);
    if (!s.active || !s.slot_used || !serve_slots_init(&s) ||
        pthread_mutex_init(&s.mu, NULL) != 0 || pthread_cond_init(&s.work, NULL) != 0 ||
        pthread_cond_init(&s.progress, NULL) != 0) {
        fprintf(stderr, "recur serve: out of memory\n");
        goto done;
    }
    s.t_start = serve_now();
    pthread_t sched;
    if (pthread_create(&sched, NULL, serve_sched_main, &s) != 0) {
        fprintf(stderr, "recur serve: cannot start the decode thread\n");
        goto done;
    }
    /* the first address takes --port (0: any free one); the others the same port */
    unsigned port = (unsigned)o.port;
    for (; n_up < n_ls; n_up++) {
        ls[n_up].d = listen_on(&s, &ls[n_up], port, &o);
        if (!ls[n_up].d) {
            fprintf(stderr, "recur serve: cannot listen on %s:%u (%s)\n", ls[n_up].shown, port,
                    strerror(errno));
            goto stop_sched;
        }
        if (n_up == 0) {
            const union MHD_DaemonInfo *di =
                MHD_get_daemon_info(ls[0].d, MHD_DAEMON_INFO_BIND_PORT);
            if (di) port = di->port;
        }
    }
    /* one line, the first on stderr: tests read the port from it */
    fprintf(stderr, "recur serve: listening on");
    for (int i = 0; i < n_ls; i++)
        fprintf(stderr, "%s http://%s:%u", i ? "," : "", ls[i].shown, port);
    fprintf(stderr, " (%d slots)\n", o.n_parallel);
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "recur serve: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    for (int i = 0; i < n_up; i++) MHD_quiesce_daemon(ls[i].d); /* the open ones finish */
    pthread_mutex_lock(&s.mu);
    s.stopping = true;
    pthread_cond_broadcast(&s.work);
    pthread_mutex_unlock(&s.mu);
    pthread_join(sched, NULL);
    /* answers of the drained requests may still be on their way: give their connections
       (not idle keep-alive ones, which time out) a few seconds to finish */
    for (int i = 0; i < 250; i++) {
        unsigned open = 0;
        for (int k = 0; k < n_up; k++) {
            const union MHD_DaemonInfo *ci =
                MHD_get_daemon_info(ls[k].d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
            open += ci ? ci->num_connections : 0;
        }
        if (open == 0) break;
        const struct timespec ms20 = {0, 20 * 1000 * 1000};
        nanosleep(&ms20, NULL);
    }
    for (int i = 0; i < n_up; i++) MHD_stop_daemon(ls[i].d);
    fprintf(stderr, "recur serve: stopped\n");
    ret = TOOL_OK;
    goto done;
stop_sched:
    for (int i = 0; i < n_up; i++) MHD_stop_daemon(ls[i].d);
    pthread_mutex_lock(&s.mu);
    s.stopping = true;
    pthread_cond_broadcast(&s.work);
    pthread_mutex_unlock(&s.mu);
    pthread_join(sched, NULL);
done:
    free(s.active);
    free(s.slot_used);
    serve_slots_free(&s);
    recur_free(s.ctx);
    recur_model_free(s.model);
    return ret;
}
