/*
 * recur serve: answers written as they are sent (see serve_api.h).
 *
 * An answer with per-token probabilities is large: 16 choices of 4,096 tokens with 100
 * alternatives each is half a gigabyte of JSON, and as a cJSON tree ten times that. So the
 * answer is held as a skeleton: its JSON printed whole except for the per-token arrays, each
 * of which stands in the text as a marker, a raw SERVE_LAZY_MARK byte (cJSON escapes every
 * control character inside strings, so the byte can only be a marker) followed by the array's
 * number in 4 hex digits. Reading the answer copies the skeleton up to a marker, then asks the
 * owner for the array's elements one at a time (each a small cJSON tree, printed and freed),
 * then goes on after the marker. What the server holds for an answer is the skeleton, the
 * token records it is made from, and one element.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"

#define MARK_LEN 5 /* the byte, then 4 hex digits */

struct serve_lazy {
    char *skel; /* the skeleton, NUL-terminated (owned) */
    size_t len, at;
    int part;     /* the array being written, -1 none */
    int64_t n, i; /* its length and next element */
    char *pend;   /* bytes made and not yet read (owned) */
    size_t pend_len, pend_at;
    serve_lazy_count count;
    serve_lazy_elem elem;
    void *ctx;
};

cJSON *serve_lazy_mark(int part) {
    char m[MARK_LEN + 1];
    if (part < 0 || part > 0xffff) return NULL;
    snprintf(m, sizeof m, "%c%04x", SERVE_LAZY_MARK, (unsigned)part);
    return cJSON_CreateRaw(m);
}

struct serve_lazy *serve_lazy_new(char *skel, serve_lazy_count count, serve_lazy_elem elem,
                                  void *ctx) {
    struct serve_lazy *z = calloc(1, sizeof *z);
    if (!z) {
        free(skel);
        return NULL;
    }
    z->skel = skel;
    z->len = strlen(skel);
    z->part = -1;
    z->count = count;
    z->elem = elem;
    z->ctx = ctx;
    return z;
}

bool serve_lazy_plain(const char *skel) {
    return strchr(skel, SERVE_LAZY_MARK) == NULL;
}

void serve_lazy_free(struct serve_lazy *z) {
    if (!z) return;
    free(z->skel);
    free(z->pend);
    free(z);
}

/* Makes the next bytes into z->pend: an element (with its comma), a bracket, or the
 * skeleton's run up to the next marker. False at the end, or without memory (*fail). */
static bool make_more(struct serve_lazy *z, bool *fail) {
    free(z->pend);
    z->pend = NULL;
    z->pend_len = z->pend_at = 0;
    if (z->part >= 0) {
        if (z->i == z->n) {
            z->part = -1;
            z->pend = strdup("]");
        } else {
            cJSON *e = z->elem(z->ctx, z->part, z->i);
            char *body = e ? cJSON_PrintUnformatted(e) : NULL;
            cJSON_Delete(e);
            if (body && z->i > 0) {
                const size_t n = strlen(body);
                char *with = malloc(n + 2);
                if (with) {
                    with[0] = ',';
                    memcpy(with + 1, body, n + 1);
                }
                free(body);
                body = with;
            }
            z->pend = body;
            z->i++;
        }
        if (!z->pend)
            *fail = true;
        else
            z->pend_len = strlen(z->pend);
        return z->pend != NULL;
    }
    if (z->at == z->len) return false;
    const char *from = z->skel + z->at;
    const char *mark = strchr(from, SERVE_LAZY_MARK);
    if (mark == from) { /* an array starts */
        char hex[MARK_LEN];
        memcpy(hex, mark + 1, MARK_LEN - 1);
        hex[MARK_LEN - 1] = '\0';
        z->part = (int)strtol(hex, NULL, 16);
        z->n = z->count(z->ctx, z->part);
        z->i = 0;
        z->at += MARK_LEN;
        z->pend = strdup("[");
        if (!z->pend) {
            *fail = true;
            return false;
        }
        z->pend_len = 1;
        return true;
    }
    /* the skeleton's run is read in place: pend stays NULL, pend_len counts it */
    const size_t run = mark ? (size_t)(mark - from) : z->len - z->at;
    z->pend_len = run;
    return true;
}

ssize_t serve_lazy_read(struct serve_lazy *z, char *buf, size_t max) {
    size_t got = 0;
    while (got < max) {
        if (z->pend_at == z->pend_len) {
            bool fail = false;
            if (!make_more(z, &fail)) {
                if (fail) return -1;
                break;
            }
        }
        const char *src = z->pend ? z->pend + z->pend_at : z->skel + z->at;
        size_t n = z->pend_len - z->pend_at;
        if (n > max - got) n = max - got;
        memcpy(buf + got, src, n);
        got += n;
        z->pend_at += n;
        if (!z->pend) z->at += n;
    }
    return (ssize_t)got;
}
