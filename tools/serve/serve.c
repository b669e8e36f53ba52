/*
 * recur serve: an HTTP server (libmicrohttpd) shaped as llama-server, with an OpenAI-shaped and
 * a llama.cpp-shaped completion API, continuous batching and prompt reuse (serve.h,
 * sched.c).
 *
 * Endpoints are rows of one table (path, methods, handler, whether the API key is asked):
 * completions (api.c), infill (infill.c), models/props/slots/metrics/tokenize/detokenize (meta.c),
 * slot actions (slots.c). Every answer carries the CORS headers the --cors-* flags allow
 * its Origin; OPTIONS (a browser's preflight) is answered before the API key is looked at; a
 * request whose length could be read two ways is refused before its body (http.c); an
 * unknown path is a 404, a known one asked with another method a 405 with Allow. Errors answer
 * {"error": {"message", "type", "code"}} and the server goes on. JSON is parsed and written with
 * cJSON.
 */
#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL /* header-only, as src/io uses it: no library to link */
#include <xxhash.h>

#include "common.h"
#include "serve.h"
#include "api.h"
#include "conn.h"
#include "endpoints.h"
#include "http.h"
#include "store.h"
#include "tools.h"

/* A slot's tokens on a hybrid model when -c is 0 (llama.cpp's default context). */
#define HYBRID_DEFAULT_CTX 4096
/* The bytes of finished /v1/responses kept for previous_response_id and GET (responses.c). */
#define RESPONSES_STORE_BYTES ((size_t)64 << 20)

/* ---- one connection's request ------------------------------------------------------------- */

struct request {
    char *body;
    size_t len, cap;
    bool too_large;
    bool read;              /* the whole request has arrived */
    bool rejected;          /* its framing was refused (framing_check) */
    struct serve_cont cont; /* a parked handler's continuation */
};

/* The request is over (answered, or the connection failed): what a parked handler left is
 * freed, and a kept-alive connection's next request starts its read clock. */
static void request_free(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    (void)code;
    struct server *s = cls;
    struct request *r = *con_cls;
    if (r) {
        if (r->cont.cleanup) r->cont.cleanup(s, r->cont.state);
        free(r->body);
        free(r);
    }
    *con_cls = NULL;
    serve_conn_request_done(s, conn);
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
    return serve_handle_completion(s, conn, rq, API_LLAMA);
}

static enum MHD_Result h_openai(struct server *s, struct MHD_Connection *conn,
                                const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq, API_OPENAI);
}

static enum MHD_Result h_chat(struct server *s, struct MHD_Connection *conn,
                              const struct serve_req *rq) {
    return serve_handle_completion(s, conn, rq, API_CHAT);
}

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };
enum { B_OBJECT = 0, B_OPTIONAL = 1, B_LIST = 2, B_UNREAD = 3 };

struct endpoint {
    const char *path;
    bool prefix;      /* path is a prefix ("/slots/" + id) */
    unsigned methods; /* M_GET | M_POST */
    bool auth;        /* the API key is asked (llama-server leaves health and models open) */
    unsigned body;    /* a POST's body: B_OBJECT (false), B_OPTIONAL (true: none gets {}),
                         B_LIST (an object or a list: POST /lora-adapters takes a list) */
    serve_handler fn;
};

static enum MHD_Result h_apply_template(struct server *s, struct MHD_Connection *conn,
                                        const struct serve_req *rq) {
    return serve_handle_chat_prompt(s, conn, rq, false);
}

static enum MHD_Result h_input_tokens(struct server *s, struct MHD_Connection *conn,
                                      const struct serve_req *rq) {
    return serve_handle_chat_prompt(s, conn, rq, true);
}

static const struct endpoint endpoints[] = {
    /* the web page (webui.c): open, as the page must load before it can send the key */
    {"/", false, M_GET, false, false, serve_webui},
    {"/webui/", true, M_GET, false, false, serve_webui},
    {"/health", false, M_GET, false, false, h_health},
    {"/v1/health", false, M_GET, false, false, h_health},
    {"/models", false, M_GET, false, false, serve_models},
    {"/v1/models", false, M_GET, false, false, serve_models},
    {"/props", false, M_GET | M_POST, true, B_UNREAD, serve_props},
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
    {"/apply-template", false, M_POST, true, false, h_apply_template},
    {"/v1/chat/completions/input_tokens", false, M_POST, true, false, h_input_tokens},
    {"/infill", false, M_POST, true, false, serve_infill},
    /* OpenAI's Responses API (responses.c): the exact path before the prefix of stored ids */
    {"/v1/responses", false, M_POST, true, false, serve_responses_create},
    {"/v1/responses/input_tokens", false, M_POST, true, false, serve_responses_input_tokens},
    {"/v1/responses/", true, M_GET | M_DELETE, true, false, serve_responses_stored},
    {"/v1/embeddings", false, M_POST, true, false, serve_embeddings_oai},
    {"/embeddings", false, M_POST, true, false, serve_embeddings},
    {"/embedding", false, M_POST, true, false, serve_embeddings},
    {"/lora-adapters", false, M_GET | M_POST, true, B_LIST, serve_lora_adapters},
    /* known and not served: a 501 that says why (meta.c) */
    {"/reranking", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/rerank", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/v1/rerank", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/v1/reranking", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/models/load", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/models/unload", false, M_POST, true, B_UNREAD, serve_not_served},
    {"/models/sse", false, M_GET, true, B_UNREAD, serve_not_served},
    {"/v1/chat/completions/control", false, M_POST, true, B_UNREAD, serve_not_served},
    /* Anthropic's Messages API (messages.c); the key also as its SDK sends it, X-Api-Key */
    {"/v1/messages", false, M_POST, true, false, serve_messages},
    {"/v1/messages/count_tokens", false, M_POST, true, false, serve_messages_count},
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

/* A key's tenant: its partition of the prefix cache and the slot files. A hash, so that it is
 * the same across restarts and machines and names no key; never 0 (the partition of no key). */
static uint64_t key_tenant(const char *key) {
    const uint64_t h = XXH3_64bits(key, strlen(key));
    return h ? h : 1;
}

/* The key as "Authorization: Bearer KEY" or "X-Api-Key: KEY" (llama-server takes both): false
 * when keys are asked and none of them was given; *tenant the key's (0 without keys). */
static bool authorized(const struct server *s, struct MHD_Connection *conn, uint64_t *tenant) {
    *tenant = 0;
    if (s->n_api_keys == 0) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    const char *given = h && strncmp(h, "Bearer ", 7) == 0 ? h + 7 : NULL;
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key");
    for (int i = 0; i < s->n_api_keys; i++)
        if ((given && strcmp(given, s->api_keys[i]) == 0) ||
            (x && strcmp(x, s->api_keys[i]) == 0)) {
            *tenant = key_tenant(s->api_keys[i]);
            return true;
        }
    return false;
}

/* The body as one JSON value with nothing after it but white space (cJSON stops at the end of
 * the first value and would accept "{} garbage"); NULL otherwise. */
static cJSON *parse_body(const char *text, size_t len) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j) return NULL;
    for (const char *p = end; p && p < text + len; p++)
        if (!strchr(" \t\r\n", *p) || *p == '\0') {
            cJSON_Delete(j);
            return NULL;
        }
    return j;
}

/* An error answered as serve_send_error does, with one more header (name: NULL for none). */
static enum MHD_Result send_error_with(struct MHD_Connection *conn, unsigned status,
                                       const char *type, const char *msg, const char *name,
                                       const char *value) {
    cJSON *j = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNumberToObject(err, "code", status);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    struct MHD_Response *resp =
        text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (name) MHD_add_response_header(resp, name, value);
    serve_cors_headers(conn, resp);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* 405 with Allow naming the methods e takes. */
static enum MHD_Result answer_405(struct MHD_Connection *conn, const struct endpoint *e,
                                  const char *method) {
    char allow[32] = "", msg[96];
    static const char *const names[] = {"GET", "POST", "DELETE"};
    for (unsigned i = 0; i < 3; i++)
        if (e->methods & (1u << i))
            snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s",
                     allow[0] ? ", " : "", names[i]);
    snprintf(msg, sizeof msg, "%.16s is not allowed here: use %s", method, allow);
    return send_error_with(conn, 405, "invalid_request_error", msg, "Allow", allow);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    struct server *s = cls;
    struct request *r = *con_cls;
    if (!r) { /* the first call: headers only, no byte of the body read yet */
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        *con_cls = r;
        char msg[200];
        const unsigned bad = serve_framing_check(conn, version, msg, sizeof msg);
        if (serve_is_messages_url(url)) /* its errors in Anthropic's shape (serve_send_error) */
            MHD_set_connection_value(conn, MHD_HEADER_KIND, SERVE_ANTHROPIC_KEY, "1");
        if (s->cors) serve_cors_decide(s->cors, conn); /* after the check: it adds to the headers */
        if (!bad) return MHD_YES;
        /* answered before the body, and the connection closed after the answer: nothing sent
           after these headers is read as a request */
        r->rejected = true;
        return send_error_with(conn, bad,
                               bad == 501 ? "not_supported_error" : "invalid_request_error", msg,
                               "Connection", "close");
    }
    if (r->rejected) { /* libmicrohttpd reads no more of it; should it call, nothing is done */
        *upload_size = 0;
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
    if (!r->read) { /* the request is whole: the read deadline is met */
        r->read = true;
        serve_conn_request_read(s, conn);
    }
    if (r->cont.resume) return r->cont.resume(s, conn, &r->cont); /* woken from a park */
    pthread_mutex_lock(&s->mu);
    const bool stopping = s->stopping;
    if (stopping) s->m.rejected_stopping++;
    pthread_mutex_unlock(&s->mu);
    if (stopping) /* a kept-alive connection's next request, during the drain */
        return serve_send_error(conn, 503, "unavailable_error",
                                "the server is shutting down; retry later (elsewhere)");

    if (strcmp(method, "OPTIONS") == 0) return serve_answer_options(s->cors, conn);
    const struct endpoint *e = find_endpoint(url);
    uint64_t tenant = 0;
    if ((!e || e->auth) && !authorized(s, conn, &tenant))
        return serve_send_error(conn, 401, "authentication_error", "Invalid API Key");
    if (!e) return serve_send_error(conn, 404, "not_found_error", "File Not Found");
    const unsigned m = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ? M_GET
                       : strcmp(method, "POST") == 0                             ? M_POST
                       : strcmp(method, "DELETE") == 0                           ? M_DELETE
                                                                                 : 0;
    if (!(e->methods & m)) return answer_405(conn, e, method);
    struct serve_req rq = {url, NULL, r->body, r->len, tenant, &r->cont, method};
    if (m != M_POST || e->body == B_UNREAD) return e->fn(s, conn, &rq); /* no body read */
    if (r->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->lim.max_body);
        return serve_send_error(conn, 413, "invalid_request_error", msg);
    }
    const char *fault = NULL, *why = NULL;
    const long at = r->len ? serve_body_text_fault(r->body, r->len, &fault, &why) : -1;
    if (at >= 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body holds %s at byte %ld: %s", fault, at, why);
        return serve_send_error(conn, 400, "invalid_request_error", msg);
    }
    cJSON *body = r->len                  ? parse_body(r->body, r->len)
                  : e->body == B_OPTIONAL ? cJSON_CreateObject()
                                          : NULL;
    if (!cJSON_IsObject(body) && !(e->body == B_LIST && cJSON_IsArray(body))) {
        cJSON_Delete(body);
        return serve_send_error(conn, 400, "invalid_request_error",
                                "the body must be one JSON object (and nothing after it)");
    }
    rq.body = body;
    enum MHD_Result ret = e->fn(s, conn, &rq);
    cJSON_Delete(body);
    return ret;
}

/* ---- main -------------------------------------------------------------------------------- */

/* One listening address: --host ADDR, IPv4 or IPv6 (bare or in brackets). */
struct listener {
    const char *host;
    char shown[64]; /* as a URL writes it: [::1] */
    struct sockaddr_storage addr;
    bool v6;
    struct MHD_Daemon *d;
    MHD_socket quiesced; /* the listening socket once the drain took it back (drain) */
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

/* One daemon per address: a pool of --threads-http event-loop threads (poll), connections
 * suspended while they wait for the decode loop, the connection limits, and the idle timeout;
 * the read deadline and the rest are conn.c's. poll, not epoll: with epoll, libmicrohttpd
 * 0.9.75's MHD_quiesce_daemon takes the listening socket out of each worker's epoll set while
 * the worker, which has seen the quiesce flag, may be taking it out too, and aborts the process
 * when it loses that race ("Failed to remove listen FD from epoll set"); with poll a worker
 * drops the socket from its next poll set. */
static struct MHD_Daemon *listen_on(struct server *s, struct listener *l, unsigned port,
                                    const struct serve_opts *o) {
    set_port(l, port);
    /* an IPv6 socket takes IPv6 only (MHD sets IPV6_V6ONLY without MHD_USE_DUAL_STACK), so
       that --host :: --host 0.0.0.0 can both be listened on */
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
            MHD_USE_ERROR_LOG | (l->v6 ? MHD_USE_IPv6 : 0),
        (uint16_t)port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, &l->addr,
        MHD_OPTION_NOTIFY_COMPLETED, request_free, s, MHD_OPTION_NOTIFY_CONNECTION,
        serve_conn_notify, s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->threads_http,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)o->conn_max, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->conn_per_ip,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)128, MHD_OPTION_END);
}

/* The keys of --api-key and --api-key-file (one per line; blank lines and lines starting with
 * '#' skipped) into *keys (malloc'd, the file's text in *text); false with a message. */
static bool load_keys(const struct serve_opts *o, const char ***keys, int *n, char **text) {
    *keys = NULL;
    *n = 0;
    *text = NULL;
    size_t len = 0, lines = 0;
    if (o->api_key_file) {
        if (!(*text = gen_read_file(o->api_key_file, "API key file", &len))) return false;
        for (size_t i = 0; i < len; i++) lines += (*text)[i] == '\n';
        lines++;
    }
    const char **k = malloc(sizeof *k * ((size_t)o->n_api_keys + lines + 1));
    if (!k) {
        fprintf(stderr, "recur serve: out of memory\n");
        return false;
    }
    int got = 0;
    for (int i = 0; i < o->n_api_keys; i++) k[got++] = o->api_keys[i];
    for (char *line = *text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        size_t l = strlen(line);
        while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == ' ' || line[l - 1] == '\t'))
            line[--l] = '\0';
        if (l == 0 || line[0] == '#') continue;
        k[got++] = line;
        if (!next) break;
    }
    if (o->api_key_file && got == o->n_api_keys) {
        fprintf(stderr, "recur serve: --api-key-file %s holds no key\n", o->api_key_file);
        free(k);
        return false;
    }
    *keys = k;
    *n = got;
    return true;
}

/* --alias's comma-separated names into *names (malloc'd, pointing into *text, a copy; both
 * NULL without --alias), each once in the order given, as llama-server takes them; false
 * with a message for an empty name. */
static bool split_aliases(const char *alias, char **text, const char ***names, int *n) {
    *text = NULL;
    *names = NULL;
    *n = 0;
    if (!alias) return true;
    size_t most = 1;
    for (const char *c = alias; *c; c++) most += *c == ',';
    *text = strdup(alias);
    *names = malloc(sizeof **names * most);
    if (!*text || !*names) {
        fprintf(stderr, "recur serve: out of memory\n");
        return false;
    }
    for (char *at = *text, *end; at; at = end) {
        end = strchr(at, ',');
        if (end) *end++ = '\0';
        if (!*at) {
            fprintf(stderr,
                    "recur serve: --alias %s: a name is empty (names are separated by "
                    "commas)\n",
                    alias);
            return false;
        }
        bool seen = false;
        for (int i = 0; i < *n; i++) seen |= strcmp((*names)[i], at) == 0;
        if (!seen) (*names)[(*n)++] = at;
    }
    return true;
}

/* The flags' values checked before anything is loaded; false with a message. */
static bool check_flags(const struct gen_opts *o, const struct serve_opts *srv, struct listener *ls,
                        int n_ls) {
    for (int i = 0; i < n_ls; i++)
        if (!parse_host(ls[i].host, &ls[i])) {
            fprintf(stderr, "recur serve: --host %s is not an IPv4 or IPv6 address\n", ls[i].host);
            return false;
        }
    if (srv->n_predict > srv->max_tokens) {
        fprintf(stderr,
                "recur serve: -n %d is more than --max-tokens %d (the most a request may ask "
                "for)\n",
                srv->n_predict, srv->max_tokens);
        return false;
    }
    if ((int64_t)o->n_batch < o->n_parallel) {
        fprintf(stderr,
                "recur serve: --batch-size %u is less than --parallel %d: each decode step "
                "takes a token of every sequence that generates\n",
                o->n_batch, o->n_parallel);
        return false;
    }
    if (o->pooling && !srv->embedding) { /* it would change nothing: refused, not ignored */
        fprintf(stderr, "recur serve: --pooling %s needs --embedding (the embeddings endpoints)\n",
                o->pooling);
        return false;
    }
    if (srv->n_ctx == 1) {
        fprintf(stderr, "recur serve: -c 1 leaves no room for a token after the prompt; use 0 "
                        "(no limit) or 2 and more\n");
        return false;
    }
    if (srv->slot_save_path) {
        struct stat st;
        if (stat(srv->slot_save_path, &st) != 0) {
            fprintf(stderr, "recur serve: --slot-save-path %s: %s\n", srv->slot_save_path,
                    strerror(errno));
            return false;
        }
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "recur serve: --slot-save-path %s is not a directory\n",
                    srv->slot_save_path);
            return false;
        }
    }
    if (o->chat_template && !recur_chat_template_name(o->chat_template)) {
        fprintf(stderr, "recur serve: --chat-template: %s\n", recur_last_error());
        return false;
    }
    if (srv->reasoning_format && serve_reasoning_of(srv->reasoning_format) < 0) {
        fprintf(stderr, "recur serve: --reasoning-format: \"%s\" is not a format (one of %s)\n",
                srv->reasoning_format, SERVE_REASONING_NAMES);
        return false;
    }
    return true;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
}

/* Open connections of all daemons. */
static unsigned open_connections(struct listener *ls, int n) {
    unsigned open = 0;
    for (int k = 0; k < n; k++) {
        const union MHD_DaemonInfo *ci =
            MHD_get_daemon_info(ls[k].d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        open += ci ? ci->num_connections : 0;
    }
    return open;
}

/* The drain, after the first SIGTERM, SIGINT or SIGHUP: the listening sockets stop listening
 * at once (a new connection is refused, not left in a backlog), the queued requests are answered
 * 503 with Retry-After, the running ones finish; a second signal ends the process at once. A
 * quiesced socket is shut down, not closed, until its daemon has stopped: a worker may still
 * have it in the poll set it is waiting on, and a closed descriptor's number could be reused. */
static void drain(struct server *s, struct listener *ls, int n_up, const sigset_t *sigs, int sig,
                  pthread_t sched) {
    for (int i = 0; i < n_up; i++) {
        ls[i].quiesced = MHD_quiesce_daemon(ls[i].d);
        if (ls[i].quiesced != MHD_INVALID_SOCKET) shutdown(ls[i].quiesced, SHUT_RDWR);
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    const int32_t running = s->slots_in_use, queued = s->n_queued;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr,
            "recur serve: %s: no longer listening; finishing %d running sequences, answering %d "
            "queued requests 503 (a second signal exits at once)\n",
            signal_name(sig), running, queued);
    fflush(stderr);
    /* the scheduler ends once every admitted task has; then the answers on their way get a
       few seconds (idle kept-alive connections are not waited for) */
    bool sched_done = false;
    double t_end = 0;
    for (;;) {
        const struct timespec tick = {0, 20 * 1000 * 1000};
        const int again = sigtimedwait(sigs, NULL, &tick);
        if (again > 0) {
            pthread_mutex_lock(&s->mu);
            const int32_t left = s->slots_in_use;
            pthread_mutex_unlock(&s->mu);
            fprintf(stderr,
                    "recur serve: second signal (%s) during the drain: exiting now; %d running "
                    "sequences are cut off\n",
                    signal_name(again), left);
            fflush(stderr);
            _exit(1);
        }
        if (!sched_done) {
            pthread_mutex_lock(&s->mu);
            const bool idle = s->slots_in_use == 0 && !s->queue_head && !s->actions;
            pthread_mutex_unlock(&s->mu);
            if (idle) {
                pthread_join(sched, NULL);
                sched_done = true;
                t_end = serve_now();
            }
            continue;
        }
        if (open_connections(ls, n_up) == 0 || serve_now() - t_end > 5.0) break;
    }
    /* libmicrohttpd stops only daemons without suspended connections */
    pthread_mutex_lock(&s->mu);
    serve_wake_all(s);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n_up; i++) {
        MHD_stop_daemon(ls[i].d);
        ls[i].d = NULL;
        if (ls[i].quiesced != MHD_INVALID_SOCKET) close(ls[i].quiesced);
    }
    fprintf(stderr, "recur serve: stopped\n");
}

/* Room for --conn-max sockets per address: the soft limit of open files raised toward want
 * (as far as the hard limit allows). */
static void raise_fd_limit(rlim_t want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
    rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

int cmd_serve(int argc, char **argv) {
    struct gen_opts o;
    struct serve_opts srv;
    int st = gen_parse(argc, argv, GEN_SERVE,
                       "Serves completions over HTTP as llama-server does (OpenAI /v1/completions, "
                       "llama.cpp /completion, /tokenize, /props, /slots, /metrics, ...), "
                       "batching every request of every client in one decode.",
                       &o, &srv);
    if (st >= 0) return st;
    if (!o.n_parallel_given) o.n_parallel = 16; /* the server's default: 16 slots */
    struct listener ls[GEN_MAX_HOSTS];
    const int n_ls = srv.n_hosts ? srv.n_hosts : 1;
    memset(ls, 0, sizeof ls);
    for (int i = 0; i < n_ls; i++) {
        ls[i].host = srv.n_hosts ? srv.hosts[i] : "127.0.0.1";
        ls[i].quiesced = MHD_INVALID_SOCKET;
    }
    if (!check_flags(&o, &srv, ls, n_ls)) return TOOL_USAGE;
    struct serve_cors cors;
    if (!serve_cors_init(&cors, &srv)) return TOOL_USAGE;
    struct server s;
    memset(&s, 0, sizeof s);
    s.cors = &cors;
    s.lim = (struct serve_limits){.n_parallel = o.n_parallel,
                                  .queue_max = srv.queue_max,
                                  .max_prompt = 8192,
                                  .max_tokens = srv.max_tokens,
                                  .max_answer = (uint64_t)srv.max_answer_mb << 20,
                                  .max_body = 1u << 20,
                                  .timeout_s = srv.timeout_s,
                                  .n_predict = srv.n_predict,
                                  .n_ctx = srv.n_ctx};
    s.model_path = o.model;
    const char *slash = strrchr(o.model, '/');
    char *alias_text = NULL;
    if (!split_aliases(srv.alias, &alias_text, &s.aliases, &s.n_aliases)) {
        free(s.aliases);
        free(alias_text);
        serve_cors_free(&cors);
        return TOOL_USAGE;
    }
    s.model_name = s.n_aliases ? s.aliases[0] : slash ? slash + 1 : o.model;
    s.chat_template = o.chat_template;
    s.reasoning = srv.reasoning_format
                      ? (enum serve_reasoning)serve_reasoning_of(srv.reasoning_format)
                      : SERVE_REASONING_AUTO;
    s.slots_endpoint = !srv.no_slots;
    s.spm_infill = srv.spm_infill;
    s.webui = !srv.no_webui;
    s.embedding = srv.embedding;
    s.slot_save_path = srv.slot_save_path;
    s.lim.read_s = srv.read_s;
    const char **keys = NULL;
    char *keys_text = NULL;
    if (!load_keys(&srv, &keys, &s.n_api_keys, &keys_text)) {
        free(s.aliases);
        free(alias_text);
        serve_cors_free(&cors);
        return TOOL_USAGE;
    }
    s.api_keys = keys;
    raise_fd_limit((rlim_t)srv.conn_max * (rlim_t)n_ls + 64);

    /* signals go to the thread that waits for them, not to the workers */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* the prefix cache, with a checkpoint every 64 positions; no per-token snapshots (they
       would copy every sequence's state at every step): the prompt minus its last token is
       stored by decoding the prompt in two parts */
    int ret = TOOL_FAIL;
    int n_up = 0;
    bool sched_up = false;
    pthread_t sched;
    struct recur_context_params cp = gen_context_params(&o, (uint32_t)o.n_parallel);
    cp.prefix_cache_bytes = (uint64_t)o.cache_mb << 20;
    cp.checkpoint_every = 64;
    cp.n_rollback = 0;
    if (srv.embedding) { /* a pooled context computes no logits: completions answer 501 */
        cp.embeddings = true;
        cp.pooling_type = (enum recur_pooling_type)gen_pooling(o.pooling);
    }
    /* a hybrid model's attention cache: room for every slot's sequence at its -c (4096 when
       -c is 0: its rows grow with its tokens, unlike a recurrent state), so that a slot stops
       at its limit (finish_reason "length") before the cache fills */
    const int32_t slot_ctx = srv.n_ctx > 0 ? srv.n_ctx : HYBRID_DEFAULT_CTX;
    cp.n_ctx =
        (uint32_t)((int64_t)slot_ctx * o.n_parallel > (1 << 24) ? (1 << 24)
                                                                : (int64_t)slot_ctx * o.n_parallel);
    if (!gen_load_params(&o, cp, &s.model, &s.ctx)) goto done;
    if (recur_model_is_hybrid(s.model)) s.lim.n_ctx = (int32_t)cp.n_ctx / o.n_parallel;
    /* llama-server's system_fingerprint names its build; recur's names the build and the
       weights, so that a client sees when either changed */
    snprintf(s.fingerprint, sizeof s.fingerprint, "b%s-%016llx", recur_version(),
             (unsigned long long)recur_model_fingerprint(s.model));
    struct recur_prefix_cache_stats cs = {0};
    if (recur_prefix_cache_get_stats(s.ctx, &cs)) s.state_bytes = cs.entry_bytes;
    if (o.prefix_store) {
        struct store_opts so = store_default_opts();
        so.ttl_s = o.prefix_ttl_s;
        so.max_bytes = (uint64_t)o.prefix_store_mb << 20;
        so.state_bytes = s.state_bytes;
        so.token_bytes = cs.attn_bytes_per_token;
        char err[512];
        if (!(s.store = store_open(o.prefix_store, &so, err, sizeof err))) {
            fprintf(stderr, "recur serve: --prefix-cache-store %s\n", err);
            ret = TOOL_USAGE;
            goto done;
        }
        const struct recur_prefix_store hooks = store_hooks(s.store);
        recur_prefix_cache_set_store(s.ctx, &hooks);
    }
    for (recur_token t = 0; t < recur_model_n_vocab(s.model); t++) {
        char piece[256];
        const int32_t n = recur_token_to_piece(s.model, t, piece, sizeof piece, 0, true);
        const int32_t len = n < 0 ? -n : n; /* a negative count: the room it needs */
        if (len > s.max_piece) s.max_piece = len;
    }
    const void *map_addr;
    size_t map_size;
    const bool mapped = recur_model_mapping(s.model, &map_addr, &map_size);
    s.active = calloc((size_t)o.n_parallel, sizeof *s.active);
    s.slot_used = calloc((size_t)o.n_parallel, sizeof *s.slot_used);
    s.responses = serve_responses_new(RESPONSES_STORE_BYTES);
    if (!s.active || !s.slot_used || !s.responses || !serve_slots_init(&s) ||
        pthread_mutex_init(&s.mu, NULL) != 0 || pthread_cond_init(&s.work, NULL) != 0 ||
        pthread_cond_init(&s.progress, NULL) != 0 || !serve_sched_init(&s) ||
        !serve_conns_start(&s, o.model, mapped)) {
        fprintf(stderr, "recur serve: out of memory\n");
        goto done;
    }
    s.t_start = serve_now();
    if (pthread_create(&sched, NULL, serve_sched_main, &s) != 0) {
        fprintf(stderr, "recur serve: cannot start the decode thread\n");
        goto done;
    }
    sched_up = true;
    /* the first address takes --port (0: any free one); the others the same port */
    unsigned port = (unsigned)srv.port;
    for (; n_up < n_ls; n_up++) {
        ls[n_up].d = listen_on(&s, &ls[n_up], port, &srv);
        if (!ls[n_up].d) {
            fprintf(stderr, "recur serve: cannot listen on %s:%u (%s)\n", ls[n_up].shown, port,
                    strerror(errno));
            goto done;
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
    drain(&s, ls, n_up, &sigs, sig, sched);
    sched_up = false;
    ret = TOOL_OK;
done:
    if (sched_up) { /* a failed start: nothing was served */
        pthread_mutex_lock(&s.mu);
        s.stopping = true;
        pthread_cond_broadcast(&s.work);
        pthread_mutex_unlock(&s.mu);
        pthread_join(sched, NULL);
    }
    for (int i = 0; i < n_up; i++)
        if (ls[i].d) MHD_stop_daemon(ls[i].d);
    serve_conns_stop(&s);
    serve_sched_free(&s);
    if (s.ctx) recur_prefix_cache_set_store(s.ctx, NULL);
    store_close(s.store);
    free(s.active);
    free(s.slot_used);
    serve_slots_free(&s);
    serve_responses_free(s.responses);
    recur_free(s.ctx);
    recur_model_free(s.model);
    free(keys);
    free(keys_text);
    free(s.aliases);
    free(alias_text);
    serve_cors_free(&cors);
    return ret;
}
