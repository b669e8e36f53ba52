/*
 * recur serve's rules of HTTP (http.c), applied to a request before a handler sees it:
 * its framing (RFC 9112: a length that only one reading gives), its CORS headers (the --cors-*
 * flags), and the text of its body (UTF-8 without NUL, for cJSON's NUL-terminated strings).
 */
#ifndef RECUR_TOOLS_SERVE_HTTP_H
#define RECUR_TOOLS_SERVE_HTTP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "common.h"
#include "serve.h"

/* --cors-origins, --cors-methods, --cors-headers and --cors-credentials, as llama-server reads
 * them: which pages (origins) a browser lets call the API, and what their preflights may ask. */
struct serve_cors {
    enum { CORS_ANY, CORS_LOCALHOST, CORS_LIST } origins;
    char *list;    /* CORS_LIST: the origins, each followed by ',' */
    char *methods; /* Access-Control-Allow-Methods */
    char *headers; /* Access-Control-Allow-Headers; NULL: the ones the preflight asks for */
    bool credentials;
};

/* The policy of the flags in o (with --slot-save-path the origins default to localhost, as
 * llama-server's do beside its APIs that write files); false with a message on stderr naming
 * the flag and the bad value. Free with serve_cors_free. */
bool serve_cors_init(struct serve_cors *c, const struct serve_opts *o);
void serve_cors_free(struct serve_cors *c);
/* Decides the request's CORS headers from its Origin and keeps them with the request, where
 * serve_cors_headers (api.h) finds them for every answer; without memory for that, none
 * are sent (the browser refuses). */
void serve_cors_decide(const struct serve_cors *c, struct MHD_Connection *conn);
/* A browser's preflight: for an allowed origin, the methods and headers its requests may use. */
enum MHD_Result serve_answer_options(const struct serve_cors *c, struct MHD_Connection *conn);
/* 0 when the request's length can be read only one way (RFC 9112 5.1, 5.2, 6.1, 6.3); else the
 * status to answer (400, or 501 for a coding not implemented) with msg[len] saying why. */
unsigned serve_framing_check(struct MHD_Connection *conn, const char *version, char *msg,
                             size_t len);
/* The offset of the first thing a body's text may not hold (a byte that is not UTF-8, a NUL
 * as a raw byte or the escape \u0000), *what it is and *why it is refused; -1 when none. */
long serve_body_text_fault(const char *text, size_t len, const char **what, const char **why);

#endif /* RECUR_TOOLS_SERVE_HTTP_H */
