/*
 * recur serve's rules of HTTP (see http.h): the request's framing, checked in the
 * request hook (the access handler's first call, before any body byte is read) because
 * libmicrohttpd 0.9.75 takes the first of two Content-Lengths, keeps white space before a
 * colon in the header's name and appends a folded line to it; the CORS policy of the
 * --cors-* flags; the text of a body.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "http.h"

/* What a body's text may not hold, found before it is parsed: JSON is UTF-8 (RFC 8259), and
 * cJSON would take invalid bytes into strings that the tokenizer then reads as U+FFFD; and
 * cJSON's strings are NUL-terminated with no length beside them, so a NUL, a raw byte or the
 * escape \u0000, would silently cut a prompt, a stop string or a text to tokenize. The offset
 * of the first such thing, *what it is and *why it is refused; -1 when there is none. */
long serve_body_text_fault(const char *text, size_t len, const char **what, const char **why) {
    static const char nul[] = "a NUL character (U+0000)", not_utf8[] = "a byte that is not UTF-8";
    bool in = false;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        const size_t k = c ? serve_utf8_char((const unsigned char *)text + i, len - i) : 0;
        if (k == 0) {
            *what = c ? not_utf8 : nul;
            *why = c ? "JSON text is UTF-8 (RFC 8259)" : "recur takes no NUL in text";
            return (long)i;
        }
        if (k > 1) {
            i += k - 1;
            continue;
        }
        if (!in) {
            in = c == '"';
        } else if (c == '"') {
            in = false;
        } else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) {
                *what = nul;
                *why = "recur takes no NUL in text";
                return (long)i;
            }
            i++; /* the escaped character, which may be a quote */
        }
    }
    return -1;
}

/* ---- CORS -------------------------------------------------------------------------------- */

/* RFC 9110's token characters: what a method or a header's name is made of. */
static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether s[0..n) is scheme://host[:port] with nothing else (no path, user or white space). */
static bool is_origin(const char *s, size_t n) {
    size_t i = 0;
    if (n == 0 || !((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z')) return false;
    while (i < n && (isalnum((unsigned char)s[i]) || strchr("+-.", s[i]))) i++;
    if (n - i < 4 || strncmp(s + i, "://", 3) != 0) return false;
    for (i += 3; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f || strchr("/?#@,\\", s[i]))
            return false;
    return true;
}

/* The comma list v, each item's white space trimmed, into a malloc'd string of the items
 * joined with sep; items must pass ok (NULL: any), what says what an item must be. NULL with a
 * message naming the flag and the item when an item is empty or fails ok, or without memory. */
static char *cors_list(const char *flag, const char *v, const char *sep,
                       bool (*ok)(const char *item, size_t n), const char *what) {
    const size_t sl = strlen(sep);
    char *out = malloc(strlen(v) * (1 + sl) + 2);
    if (!out) {
        fprintf(stderr, "recur serve: out of memory\n");
        return NULL;
    }
    size_t o = 0;
    for (const char *p = v;; p++) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        size_t n = (size_t)(end - p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n == 0 || (ok && !ok(p, n))) {
            if (n == 0)
                fprintf(stderr, "recur serve: %s \"%s\": an empty item\n", flag, v);
            else
                fprintf(stderr, "recur serve: %s: \"%.*s\" is not %s\n", flag, (int)n, p, what);
            free(out);
            return NULL;
        }
        if (o) {
            memcpy(out + o, sep, sl);
            o += sl;
        }
        memcpy(out + o, p, n);
        out[o += n] = '\0';
        if (!*end) return out;
        p = end;
    }
}

static bool token_item(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i])) return false;
    return true;
}

void serve_cors_free(struct serve_cors *c) {
    free(c->list);
    free(c->methods);
    free(c->headers);
}

/* The policy of the flags (with --slot-save-path the origins default to localhost, as
 * llama-server's do beside its APIs that write files); false with a message on a bad value. */
bool serve_cors_init(struct serve_cors *c, const struct serve_opts *o) {
    memset(c, 0, sizeof *c);
    c->credentials = !o->no_cors_credentials;
    const char *origins = o->cors_origins ? o->cors_origins : o->slot_save_path ? "localhost" : "*";
    char *trimmed = cors_list("--cors-origins", origins, ",", NULL, NULL);
    if (!trimmed) return false;
    if (strcmp(trimmed, "*") == 0 || strcmp(trimmed, "localhost") == 0) {
        c->origins = trimmed[0] == '*' ? CORS_ANY : CORS_LOCALHOST;
        free(trimmed);
    } else {
        free(trimmed);
        c->origins = CORS_LIST;
        if (!(c->list = cors_list("--cors-origins", origins, ",", is_origin,
                                  "an origin (scheme://host[:port]; * and localhost stand "
                                  "alone)")))
            return false;
        strcat(c->list, ","); /* each origin ends with a comma (cors_list left room) */
    }
    if (!(c->methods = cors_list("--cors-methods",
                                 o->cors_methods ? o->cors_methods : "GET, POST, DELETE, OPTIONS",
                                 ", ", token_item, "a method name"))) {
        serve_cors_free(c);
        return false;
    }
    if (o->cors_headers && strcmp(o->cors_headers, "*") != 0 &&
        !(c->headers =
              cors_list("--cors-headers", o->cors_headers, ", ", token_item, "a header name"))) {
        serve_cors_free(c);
        return false;
    }
    return true;
}

/* Whether origin is a page of this machine: http(s)://localhost, 127.0.0.1 or [::1], any
 * port. */
static bool is_localhost(const char *origin) {
    static const char *const schemes[] = {"http://", "https://"};
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < 2; i++) {
        const size_t sl = strlen(schemes[i]);
        if (strncasecmp(origin, schemes[i], sl) != 0) continue;
        for (size_t h = 0; h < 3; h++) {
            const size_t hl = strlen(hosts[h]);
            const char *p = origin + sl + hl;
            if (strncasecmp(origin + sl, hosts[h], hl) != 0) continue;
            if (*p == '\0') return true;
            if (*p++ != ':' || !*p) continue;
            while (isdigit((unsigned char)*p)) p++;
            if (*p == '\0') return true;
        }
    }
    return false;
}

static bool in_list(const char *list, const char *origin) {
    const size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        if ((size_t)(comma - p) == n && strncasecmp(p, origin, n) == 0) return true;
        p = comma + 1;
    }
    return false;
}

/* Decides the request's CORS headers from its Origin and keeps them with the request (see
 * serve_cors_headers); without memory for that, none are sent (the browser refuses). */
void serve_cors_decide(const struct serve_cors *c, struct MHD_Connection *conn) {
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *allow = NULL;
    if (c->origins == CORS_ANY)
        allow = origin && c->credentials ? origin : "*";
    else if (origin &&
             (c->origins == CORS_LOCALHOST ? is_localhost(origin) : in_list(c->list, origin)))
        allow = origin;
    if (allow)
        MHD_set_connection_value(conn, MHD_HEADER_KIND,
                                 SERVE_CORS_KEY("Access-Control-Allow-Origin"), allow);
    if (allow && allow == origin && c->credentials)
        MHD_set_connection_value(conn, MHD_HEADER_KIND,
                                 SERVE_CORS_KEY("Access-Control-Allow-Credentials"), "true");
    if (c->origins != CORS_ANY || c->credentials) /* the answer depends on the Origin */
        MHD_set_connection_value(conn, MHD_HEADER_KIND, SERVE_CORS_KEY("Vary"), "Origin");
}

/* ---- the request's framing --------------------------------------------------------------- */

struct framing {
    int n_length, n_coding; /* Content-Length and Transfer-Encoding headers */
    const char *coding;     /* the first Transfer-Encoding's value */
    char bad_name[40];      /* the first header name that is not a token, as shown */
};

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value) {
    (void)kind;
    struct framing *f = cls;
    size_t n = 0;
    while (key[n] && is_tchar((unsigned char)key[n])) n++;
    /* libmicrohttpd 0.9.75 appends a folded line (obs-fold) to the header's name: a
       "Content-Length: 15\r\n 0" arrives as "Content-Length0", which no reader takes for the
       length the other readers see */
    const bool folded = (strncasecmp(key, "Content-Length", 14) == 0 && key[14]) ||
                        (strncasecmp(key, "Transfer-Encoding", 17) == 0 && key[17]);
    if ((key[n] || n == 0 || folded) && !f->bad_name[0]) {
        size_t o = 0;
        for (size_t i = 0; key[i] && o + 1 < sizeof f->bad_name; i++)
            f->bad_name[o++] = isprint((unsigned char)key[i]) ? key[i] : '?';
        f->bad_name[o] = '\0';
        if (!o) snprintf(f->bad_name, sizeof f->bad_name, "(empty)");
    }
    if (strcasecmp(key, "Content-Length") == 0) f->n_length++;
    if (strcasecmp(key, "Transfer-Encoding") == 0 && f->n_coding++ == 0) f->coding = value;
    return MHD_YES;
}

/* Whether v is "chunked" (any case), white space around it aside. */
static bool is_chunked(const char *v) {
    while (*v == ' ' || *v == '\t') v++;
    if (strncasecmp(v, "chunked", 7) != 0) return false;
    v += 7;
    while (*v == ' ' || *v == '\t') v++;
    return *v == '\0';
}

/* Whether the request's length can be read only one way (RFC 9112 5.1, 5.2, 6.1, 6.3): every
 * header name a token (white space before the colon, or a line folded onto the header, would
 * hide a Content-Length from one reader and not from another), at most one Content-Length, and a
 * Transfer-Encoding only as the one coding implemented (chunked), in HTTP/1.1, without a
 * Content-Length beside it. 0 when it can; else the status to answer (400, or 501 for a coding not
 * implemented) with msg saying why. */
unsigned serve_framing_check(struct MHD_Connection *conn, const char *version, char *msg,
                             size_t len) {
    struct framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_header, &f);
    if (f.bad_name[0]) {
        snprintf(msg, len,
                 "the header name \"%s\" is not allowed: a name is a token, with no white space "
                 "before its colon and no line folded onto it",
                 f.bad_name);
        return 400;
    }
    if (f.n_length > 1) {
        snprintf(msg, len, "Content-Length is given %d times: a request has one length",
                 f.n_length);
        return 400;
    }
    if (f.n_coding == 0) return 0;
    if (strcmp(version, MHD_HTTP_VERSION_1_1) != 0) {
        snprintf(msg, len, "Transfer-Encoding in an %.16s request, which has none", version);
        return 400;
    }
    if (f.n_length) {
        snprintf(msg, len,
                 "Content-Length and Transfer-Encoding together: the body's length "
                 "would be read two ways");
        return 400;
    }
    if (f.n_coding > 1 || !is_chunked(f.coding)) {
        snprintf(msg, len,
                 "Transfer-Encoding \"%.64s\"%s is not implemented: only one coding, chunked",
                 f.coding, f.n_coding > 1 ? " (and more)" : "");
        return 501;
    }
    return 0;
}

/* A browser's preflight: for an allowed origin, the methods and headers its requests may use. */
enum MHD_Result serve_answer_options(const struct serve_cors *c, struct MHD_Connection *conn) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    serve_cors_headers(conn, resp);
    if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                    SERVE_CORS_KEY("Access-Control-Allow-Origin"))) {
        const char *req_headers =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", c->methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                c->headers    ? c->headers
                                : req_headers ? req_headers
                                              : "Authorization, Content-Type, X-Api-Key");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    }
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}
