/*
 * recur serve: the store of finished /v1/responses (see responses.h): each one's conversation
 * (for previous_response_id) and response object (for GET), by id within an API key's
 * partition, at most max_bytes in all, the least recently used dropped first. Its own mutex,
 * held only to link, unlink and copy.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"
#include "responses.h"

struct stored {
    char id[48];
    uint64_t tenant;
    char *conv;     /* the conversation: a JSON array of {role, content} */
    char *response; /* the response object, as GET answers it */
    size_t bytes;
    struct stored *prev, *next; /* most recently used first */
};

struct serve_responses {
    pthread_mutex_t mu;
    struct stored *head, *tail;
    size_t bytes, max_bytes;
};

struct serve_responses *serve_responses_new(size_t max_bytes) {
    struct serve_responses *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    if (pthread_mutex_init(&st->mu, NULL) != 0) {
        free(st);
        return NULL;
    }
    st->max_bytes = max_bytes;
    return st;
}

static void unlink_entry(struct serve_responses *st, struct stored *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        st->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        st->tail = e->prev;
    e->prev = e->next = NULL;
    st->bytes -= e->bytes;
}

static void free_entry(struct stored *e) {
    free(e->conv);
    free(e->response);
    free(e);
}

void serve_responses_free(struct serve_responses *st) {
    if (!st) return;
    for (struct stored *e = st->head, *n; e; e = n) {
        n = e->next;
        free_entry(e);
    }
    pthread_mutex_destroy(&st->mu);
    free(st);
}

/* The entry of id in tenant's partition (st->mu held), moved to the front; NULL: none. */
static struct stored *find(struct serve_responses *st, uint64_t tenant, const char *id) {
    for (struct stored *e = st->head; e; e = e->next)
        if (e->tenant == tenant && strcmp(e->id, id) == 0) {
            unlink_entry(st, e);
            e->next = st->head;
            if (st->head) st->head->prev = e;
            st->head = e;
            if (!st->tail) st->tail = e;
            st->bytes += e->bytes;
            return e;
        }
    return NULL;
}

void serve_responses_put(struct serve_responses *st, uint64_t tenant, const char *id, char *conv,
                         char *response) {
    struct stored *e = calloc(1, sizeof *e);
    if (!st || !e || !conv || !response) {
        free(e);
        free(conv);
        free(response);
        return;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->tenant = tenant;
    e->conv = conv;
    e->response = response;
    e->bytes = sizeof *e + strlen(conv) + strlen(response);
    if (e->bytes > st->max_bytes) {
        free_entry(e);
        return;
    }
    pthread_mutex_lock(&st->mu);
    while (st->tail && st->bytes + e->bytes > st->max_bytes) {
        struct stored *old = st->tail;
        unlink_entry(st, old);
        free_entry(old);
    }
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
    st->bytes += e->bytes;
    pthread_mutex_unlock(&st->mu);
}

char *serve_responses_lookup(struct serve_responses *st, uint64_t tenant, const char *id,
                             bool conv) {
    if (!st) return NULL;
    pthread_mutex_lock(&st->mu);
    const struct stored *e = find(st, tenant, id);
    char *copy = e ? strdup(conv ? e->conv : e->response) : NULL;
    pthread_mutex_unlock(&st->mu);
    return copy;
}

bool serve_responses_forget(struct serve_responses *st, uint64_t tenant, const char *id) {
    if (!st) return false;
    pthread_mutex_lock(&st->mu);
    struct stored *e = find(st, tenant, id);
    if (e) unlink_entry(st, e);
    pthread_mutex_unlock(&st->mu);
    if (e) free_entry(e);
    return e != NULL;
}
