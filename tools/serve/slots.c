/*
 * recur serve's slots: a slot is a sequence of the context. Between tasks it keeps the state of
 * its last finished conversation, and s->slots[q] records the tokens that state holds (prompt +
 * generated, as far as decoded). POST /slots/{id}?action=save|restore|erase works on that:
 *
 *   save    writes the sequence's state and its tokens to --slot-save-path/filename
 *           (recur_state_seq_save_file): {id_slot, filename, n_saved, n_written, timings}
 *   restore loads such a file into the slot's sequence and stores it in the prefix cache, so
 *           that a next request whose prompt extends those tokens (on any slot) decodes only
 *           the rest: {id_slot, filename, n_restored, n_read, timings}
 *   erase   forgets the slot's state: {id_slot, n_erased}
 *
 * The scheduler thread owns the context, so an action is queued (s->actions) and run by the
 * scheduler at the top of its loop (serve_slots_run, through s->run_actions); the connection
 * is parked until its result. A slot decoding a task answers 503.
 *
 * API keys: each key (tenant) has its own files, in a folder of the slot directory named for
 * the key's hash, and a slot holding one key's conversation cannot be saved or erased with
 * another key (403): a slot file or a restored state never crosses keys.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "serve.h"
#include "api.h"
#include "endpoints.h"

enum slot_verb { SLOT_SAVE, SLOT_RESTORE, SLOT_ERASE };

struct slot_action {
    enum slot_verb verb;
    int32_t slot;
    char path[PATH_MAX];
    const char *filename; /* in path: what the client named */
    uint64_t tenant;      /* the caller's API key partition */
    bool in_key_dir;      /* path is in that key's folder, made by the first save */
    struct serve_park park;
    /* the result, set by the scheduler */
    bool done;
    unsigned status; /* 200, or an error's */
    char error[300];
    int32_t n_tokens;
    size_t n_bytes;
    double ms;
    struct slot_action *next;
};

bool serve_slot_filename_ok(const char *name, size_t len) {
    if (len == 0 || len > 255 || name[0] == '.') return false;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '/' || c == '\\') return false;
    }
    return true;
}

/* Records in slot q the tokens its sequence holds (under s->mu). False without memory (the
 * slot then records nothing). */
static bool slot_record(struct server *s, int32_t q, const recur_token *a, int32_t na,
                        const recur_token *b, int32_t nb) {
    struct serve_slot *sl = &s->slots[q];
    sl->n_tokens = 0;
    if (na + nb > sl->cap) {
        recur_token *grown = realloc(sl->tokens, sizeof(recur_token) * (size_t)(na + nb));
        if (!grown) return false;
        sl->tokens = grown;
        sl->cap = na + nb;
    }
    if (na) memcpy(sl->tokens, a, sizeof(recur_token) * (size_t)na);
    if (nb) memcpy(sl->tokens + na, b, sizeof(recur_token) * (size_t)nb);
    sl->n_tokens = na + nb;
    return true;
}

/* s->slot_keep: a finished task's choice leaves its state in its sequence; record the tokens
 * it holds (the last sampled token is not decoded yet). A sequence whose tokens cannot be told
 * (or recorded) is cleared, so that a slot never holds a state it cannot describe. */
static void slot_keep(struct server *s, const struct task *t, int i) {
    const struct choice *c = &t->choice[i];
    recur_memory_t mem = recur_get_memory(s->ctx);
    const int32_t held = recur_memory_seq_pos_max(mem, c->seq) + 1;
    if (held < t->n_prompt || held > t->n_prompt + c->n_out ||
        !slot_record(s, c->seq, t->prompt, t->n_prompt, c->out, held - t->n_prompt)) {
        recur_memory_seq_rm(mem, c->seq, -1, -1);
        s->slots[c->seq].n_tokens = 0;
    }
}

static double ms_since(double t0) {
    return (serve_now() - t0) * 1e3;
}

/* Whether text[i] starts the slot folder's path as a word of the message: at the start or after
 * a space, and followed by the end, a space, ':' or ','. */
static bool folder_at(const char *text, size_t i, const char *dir, size_t len) {
    if (len == 0 || strncmp(text + i, dir, len) != 0 || (i > 0 && text[i - 1] != ' ')) return false;
    const char c = text[i + len];
    return c == '\0' || c == ' ' || c == ':' || c == ',';
}

/* The action's error: what, then detail, where no path of the server shows: the slot folder
 * (and an API key's folder in it) is left out of every path in detail, so that a file is named
 * as the client named it, and the folder itself reads "the slot folder". */
static void fail(struct slot_action *a, unsigned status, const char *what, const char *detail) {
    a->status = status;
    /* the folder that holds the file, with its '/' */
    const size_t dir = a->filename ? (size_t)(a->filename - a->path) : 0;
    size_t o = (size_t)snprintf(a->error, sizeof a->error, "%s", what);
    for (size_t i = 0; detail[i] && o + 1 < sizeof a->error;) {
        if (dir > 1 && strncmp(detail + i, a->path, dir) == 0) {
            i += dir;
        } else if (dir > 1 && folder_at(detail, i, a->path, dir - 1)) {
            o += (size_t)snprintf(a->error + o, sizeof a->error - o, "the slot folder");
            i += dir - 1;
        } else {
            a->error[o++] = detail[i++];
        }
    }
    if (o >= sizeof a->error) o = sizeof a->error - 1;
    a->error[o] = '\0';
}

/* A slot file is written only as a regular file of the folder: a symbolic link there would
 * send the state elsewhere (and its target would show in errors), a folder or a device cannot
 * hold it. False with the action failed, naming the file as the client did. */
static bool save_target_ok(struct slot_action *a) {
    struct stat st;
    if (lstat(a->path, &st) != 0) {
        if (errno == ENOENT) return true;
        fail(a, 500, "could not save the slot: ", strerror(errno));
        return false;
    }
    const char *kind = S_ISREG(st.st_mode)   ? NULL
                       : S_ISLNK(st.st_mode) ? "a symbolic link"
                       : S_ISDIR(st.st_mode) ? "a folder"
                                             : "not a regular file";
    if (!kind) return true;
    a->status = 400;
    snprintf(a->error, sizeof a->error,
             "could not save the slot: %s is %s; a slot file is only written as a regular file "
             "of the slot folder",
             a->filename, kind);
    return false;
}

/* Runs one action on the scheduler thread (s->mu not held). */
static void run_one(struct server *s, struct slot_action *a) {
    recur_memory_t mem = recur_get_memory(s->ctx);
    const int32_t q = a->slot;
    pthread_mutex_lock(&s->mu);
    const bool busy = s->slot_used[q];
    const int32_t n = s->slots[q].n_tokens;
    const bool foreign = n > 0 && s->slots[q].tenant != a->tenant && a->verb != SLOT_RESTORE;
    recur_token *tokens = NULL;
    if (!busy && a->verb == SLOT_SAVE && n > 0 &&
        (tokens = malloc(sizeof(recur_token) * (size_t)n)))
        memcpy(tokens, s->slots[q].tokens, sizeof(recur_token) * (size_t)n);
    pthread_mutex_unlock(&s->mu);
    a->status = 200;
    if (foreign && !busy) {
        free(tokens);
        a->status = 403;
        snprintf(a->error, sizeof a->error, "slot %d holds the conversation of another API key", q);
        return;
    }
    if (busy) {
        a->status = 503;
        snprintf(a->error, sizeof a->error,
                 "slot %d is busy decoding a request; retry when it is done", q);
        return;
    }
    const double t0 = serve_now();
    switch (a->verb) {
    case SLOT_SAVE:
        if (n > 0 && !tokens) {
            fail(a, 500, "out of memory", "");
            return;
        }
        if (n == 0) {
            fail(a, 400, "the slot holds no conversation to save", "");
            return;
        }
        if (a->in_key_dir) { /* the key's folder: path up to the file's name */
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%.*s", (int)(a->filename - 1 - a->path), a->path);
            if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
                free(tokens);
                fail(a, 500,
                     "could not save the slot: cannot make the key's folder: ", strerror(errno));
                return;
            }
        }
        if (!save_target_ok(a)) {
            free(tokens);
            return;
        }
        a->n_bytes = recur_state_seq_save_file(s->ctx, a->path, q, tokens, (size_t)n);
        free(tokens);
        if (a->n_bytes == 0) {
            fail(a, 500, "could not save the slot: ", recur_last_error());
            return;
        }
        a->n_tokens = n;
        break;
    case SLOT_RESTORE: {
        /* the longest list a slot can come to hold */
        const int64_t cap64 = (int64_t)s->lim.max_prompt + s->lim.max_tokens;
        const size_t cap =
            (size_t)(s->lim.n_ctx > 0 && s->lim.n_ctx < cap64 ? s->lim.n_ctx : cap64);
        recur_token *buf = malloc(sizeof(recur_token) * cap);
        size_t got = 0;
        if (!buf) {
            fail(a, 500, "out of memory", "");
            return;
        }
        a->n_bytes = recur_state_seq_load_file(s->ctx, a->path, q, buf, cap, &got);
        /* a file that could not be opened leaves the slot as it was; one that failed while
           loading leaves the sequence empty: the record follows what the memory holds */
        pthread_mutex_lock(&s->mu);
        if (a->n_bytes > 0 || recur_memory_seq_pos_max(mem, q) + 1 != n) s->slots[q].n_tokens = 0;
        pthread_mutex_unlock(&s->mu);
        if (a->n_bytes == 0) {
            free(buf);
            fail(a, 400, "could not restore the slot: ", recur_last_error());
            return;
        }
        if ((size_t)recur_memory_seq_pos_max(mem, q) + 1 != got ||
            recur_prefix_cache_store_tenant(s->ctx, a->tenant, q, buf, (int32_t)got) < 0) {
            recur_memory_seq_rm(mem, q, -1, -1);
            free(buf);
            fail(a, 400,
                 "could not restore the slot: ", "the file's state does not hold its token list");
            return;
        }
        pthread_mutex_lock(&s->mu);
        const bool ok = slot_record(s, q, buf, (int32_t)got, NULL, 0);
        s->slots[q].tenant = a->tenant;
        recur_prefix_cache_get_stats(s->ctx, &s->m.cache);
        pthread_mutex_unlock(&s->mu);
        free(buf);
        if (!ok) {
            recur_memory_seq_rm(mem, q, -1, -1);
            fail(a, 500, "out of memory", "");
            return;
        }
        a->n_tokens = (int32_t)got;
        break;
    }
    case SLOT_ERASE:
        recur_memory_seq_rm(mem, q, -1, -1);
        pthread_mutex_lock(&s->mu);
        a->n_tokens = s->slots[q].n_tokens;
        s->slots[q].n_tokens = 0;
        pthread_mutex_unlock(&s->mu);
        break;
    }
    a->ms = ms_since(t0);
}

/* s->run_actions: the queued actions, in order. */
static void run_actions(struct server *s) {
    pthread_mutex_lock(&s->mu);
    struct slot_action *a = s->actions;
    s->actions = NULL;
    pthread_mutex_unlock(&s->mu);
    /* the queue was pushed at its head: run the oldest first */
    struct slot_action *rev = NULL;
    while (a) {
        struct slot_action *next = a->next;
        a->next = rev;
        rev = a;
        a = next;
    }
    while (rev) {
        struct slot_action *next = rev->next;
        run_one(s, rev);
        pthread_mutex_lock(&s->mu);
        rev->done = true; /* the connection may free it from now on */
        serve_wake(s, &rev->park);
        pthread_cond_broadcast(&s->progress);
        pthread_mutex_unlock(&s->mu);
        rev = next;
    }
}

bool serve_slots_init(struct server *s) {
    s->slots = calloc((size_t)s->lim.n_parallel, sizeof *s->slots);
    if (!s->slots) return false;
    for (int32_t q = 0; q < s->lim.n_parallel; q++) s->slots[q].id_task = -1;
    s->run_actions = run_actions;
    s->slot_keep = slot_keep;
    return true;
}

void serve_slots_free(struct server *s) {
    for (int32_t q = 0; s->slots && q < s->lim.n_parallel; q++) free(s->slots[q].tokens);
    free(s->slots);
    s->slots = NULL;
}

/* ---- the endpoint ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    enum slot_verb verb;
} verbs[] = {{"save", SLOT_SAVE}, {"restore", SLOT_RESTORE}, {"erase", SLOT_ERASE}};

static enum MHD_Result bad(struct MHD_Connection *conn, const char *msg) {
    return serve_send_error(conn, 400, "invalid_request_error", msg);
}

static enum MHD_Result slot_resume(struct server *s, struct MHD_Connection *conn,
                                   struct serve_cont *cont);

/* The connection ended while its action was queued or running: the scheduler still holds it
 * (only a parked connection waits, and a parked one cannot end), so this is never called
 * before the action is done. */
static void slot_cleanup(struct server *s, void *state) {
    (void)s;
    free(state);
}

enum MHD_Result serve_slot_action(struct server *s, struct MHD_Connection *conn,
                                  const struct serve_req *rq) {
    char msg[400];
    /* /slots/{id}: a decimal slot id, nothing else */
    const char *id = rq->url + strlen("/slots/");
    char *end = NULL;
    errno = 0;
    const long q = strtol(id, &end, 10);
    if (!id[0] || *end || errno || id[0] == '-' || id[0] == '+' || q >= s->lim.n_parallel) {
        snprintf(msg, sizeof msg, "invalid slot id \"%.32s\": slots are 0 to %d", id,
                 s->lim.n_parallel - 1);
        return bad(conn, msg);
    }
    const char *action = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "action");
    size_t v = 0;
    while (v < sizeof verbs / sizeof verbs[0] && !(action && strcmp(action, verbs[v].name) == 0))
        v++;
    if (v == sizeof verbs / sizeof verbs[0])
        return bad(conn, "invalid action: ?action= must be save, restore or erase");
    const enum slot_verb verb = verbs[v].verb;
    static const char *const known_file[] = {"filename", NULL}, *const known_none[] = {NULL};
    if (serve_unknown_field(rq->body, verb == SLOT_ERASE ? known_none : known_file, msg,
                            sizeof msg))
        return bad(conn, msg);
    if (verb != SLOT_ERASE && !s->slot_save_path)
        return serve_send_error(conn, 501, "not_supported_error",
                                "This server does not support slot save and restore. Start it "
                                "with --slot-save-path DIR");
    struct slot_action *a = calloc(1, sizeof *a);
    if (!a) return serve_send_error(conn, 500, "server_error", "out of memory");
    a->verb = verb;
    a->slot = (int32_t)q;
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(rq->body, "filename");
    if (verb != SLOT_ERASE) {
        /* a NUL (\u0000) would cut the name short where cJSON stores it: look at the raw body */
        bool nul = false;
        for (size_t i = 0; rq->raw && i + 6 <= rq->raw_len && !nul; i++)
            nul = rq->raw[i] == '\\' && (rq->raw[i + 1] | 0x20) == 'u' &&
                  memcmp(rq->raw + i + 2, "0000", 4) == 0;
        if (!cJSON_IsString(fn) || nul ||
            !serve_slot_filename_ok(fn->valuestring, strlen(fn->valuestring))) {
            free(a);
            return bad(conn, "invalid filename: \"filename\" must be a plain file name in the "
                             "slot directory (not empty, at most 255 bytes, no '/', '\\', "
                             "control character or leading '.')");
        }
        /* each API key's files in a folder of its own, named for the key's hash */
        char dir[PATH_MAX];
        if (rq->tenant)
            snprintf(dir, sizeof dir, "%s/key-%016" PRIx64, s->slot_save_path, rq->tenant);
        else
            snprintf(dir, sizeof dir, "%s", s->slot_save_path);
        if ((size_t)snprintf(a->path, sizeof a->path, "%s/%s", dir, fn->valuestring) >=
            sizeof a->path) {
            free(a);
            return bad(conn, "invalid filename: the path is too long");
        }
        a->filename = a->path + strlen(dir) + 1;
        a->in_key_dir = rq->tenant != 0;
    }
    a->tenant = rq->tenant;
    a->park = (struct serve_park){.conn = conn, .owner = a}; /* no deadline: actions are short */
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        free(a);
        return serve_send_error(conn, 503, "unavailable_error",
                                "the server is shutting down; retry later (elsewhere)");
    }
    a->next = s->actions;
    s->actions = a;
    pthread_cond_signal(&s->work);
    rq->cont->resume = slot_resume;
    rq->cont->cleanup = slot_cleanup;
    rq->cont->state = a;
    serve_park(s, &a->park);
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
}

/* The connection was woken: the action's answer once it is done. */
static enum MHD_Result slot_resume(struct server *s, struct MHD_Connection *conn,
                                   struct serve_cont *cont) {
    struct slot_action *a = cont->state;
    char msg[400];
    pthread_mutex_lock(&s->mu);
    if (!a->done) {
        serve_park(s, &a->park);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->mu);
    cont->resume = NULL;
    cont->cleanup = NULL;
    cont->state = NULL;
    const int32_t q = a->slot;
    const enum slot_verb verb = a->verb;
    if (a->status != 200) {
        const unsigned st = a->status;
        snprintf(msg, sizeof msg, "%s", a->error);
        free(a);
        return serve_send_error(conn, st,
                                st == 503   ? "unavailable_error"
                                : st == 400 ? "invalid_request_error"
                                : st == 403 ? "permission_error"
                                            : "server_error",
                                msg);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "id_slot", (double)q);
    if (verb != SLOT_ERASE) cJSON_AddStringToObject(j, "filename", a->filename);
    cJSON *tm = NULL;
    switch (verb) {
    case SLOT_SAVE:
        cJSON_AddNumberToObject(j, "n_saved", a->n_tokens);
        cJSON_AddNumberToObject(j, "n_written", (double)a->n_bytes);
        tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "save_ms", a->ms);
        break;
    case SLOT_RESTORE:
        cJSON_AddNumberToObject(j, "n_restored", a->n_tokens);
        cJSON_AddNumberToObject(j, "n_read", (double)a->n_bytes);
        tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "restore_ms", a->ms);
        break;
    case SLOT_ERASE:
        cJSON_AddNumberToObject(j, "n_erased", a->n_tokens);
        break;
    }
    free(a);
    return serve_send_json(conn, 200, j);
}
