/*
 * recur serve's web page (see endpoints.h): GET / answers index.html, GET /webui/NAME
 * the page's other files, all built into the binary (webui_assets.h). The page is plain HTML,
 * CSS and JavaScript from tools/serve/webui/; it talks to the server's own API (chat, /completion,
 * /props, ...), so everything it loads comes from this origin, and the headers say so:
 *
 *  - Content-Type by the file's extension, and X-Content-Type-Options: nosniff, so that a
 *    browser never reads one file as another type;
 *  - a Content-Security-Policy that allows this origin only (no inline script, no other
 *    host, no framing): model output that slipped past the page's escaping could still not
 *    run a script or send anything elsewhere;
 *  - Cache-Control: no-cache: a new binary's page is fetched again (revalidated), never a
 *    stale one mixed with a new API.
 *
 * These files need no API key (the page must load before it can ask for the key); the page's
 * requests then send it.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"
#include "api.h"
#include "endpoints.h"
#include "webui_assets.h"

#define WEBUI_PREFIX "/webui/"

/* By the file's extension: with nosniff the browser takes the type as said, never guesses. */
static const char *content_type(const char *name) {
    static const char *const types[][2] = {
        {".html", "text/html; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".json", "application/json"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i][0]) == 0) return types[i][1];
    return "application/octet-stream";
}

/* What every file of the page is sent with (see the top of this file). */
static const char *const safe_headers[][2] = {
    {"X-Content-Type-Options", "nosniff"},
    {"Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; "
                                "img-src 'self'; connect-src 'self'; object-src 'none'; "
                                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
    {"X-Frame-Options", "DENY"},
    {"Referrer-Policy", "no-referrer"},
    {"Cache-Control", "no-cache"},
};

static const struct webui_asset *find_asset(const char *name) {
    for (const struct webui_asset *a = webui_assets; a->name; a++)
        if (strcmp(a->name, name) == 0) return a;
    return NULL;
}

enum MHD_Result serve_webui(struct server *s, struct MHD_Connection *conn,
                            const struct serve_req *rq) {
    const char *name = NULL;
    if (strcmp(rq->url, "/") == 0)
        name = "index.html";
    else if (strncmp(rq->url, WEBUI_PREFIX, strlen(WEBUI_PREFIX)) == 0)
        name = rq->url + strlen(WEBUI_PREFIX);
    /* index.html only as /: one address for the page */
    const struct webui_asset *a =
        s->webui && name && (strcmp(rq->url, "/") == 0 || strcmp(name, "index.html") != 0)
            ? find_asset(name)
            : NULL;
    if (!a) return serve_send_error(conn, 404, "not_found_error", "File Not Found");
    /* the bytes are static: handed to MHD as they are, not copied */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", content_type(a->name));
    for (size_t i = 0; i < sizeof safe_headers / sizeof safe_headers[0]; i++)
        MHD_add_response_header(resp, safe_headers[i][0], safe_headers[i][1]);
    serve_cors_headers(conn, resp);
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}
