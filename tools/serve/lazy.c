/*
 * recur serve: answers written as they are sent (see api.h).
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
 *
 * The arrays are a choice's per-token ones: chat's logprobs.content, /completion's
 * completion_probabilities, and the four parallel arrays of a legacy logprobs object. A stream's
 * chunk builds its few tokens' at once; a whole answer registers each as a part (struct part:
 * which array of which choice, over which tokens) and marks its place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define MARK_LEN 5 /* the byte, then 4 hex digits */

struct serve_lazy {
    char *skel; /* the skeleton, NUL-terminated (owned) */
    size_t len, at;
    int part;     /* the array being written, -1 none */
    int64_t n, i; /* its length and next element */
    char *pend;   /* bytes made and not yet read (owned) */
    size_t pend_len, pend_at;
    int64_t (*count)(void *ctx, int part); /* the arrays: answer_count, answer_elem */
    cJSON *(*elem)(void *ctx, int part, int64_t i);
    void *ctx;
};

static cJSON *lazy_mark(int part) {
    char m[MARK_LEN + 1];
    if (part < 0 || part > 0xffff) return NULL;
    snprintf(m, sizeof m, "%c%04x", SERVE_LAZY_MARK, (unsigned)part);
    return cJSON_CreateRaw(m);
}

static int64_t answer_count(void *ctx, int part);
static cJSON *answer_elem(void *ctx, int part, int64_t i);

struct serve_lazy *serve_lazy_new(char *skel, struct serve_parts *parts) {
    struct serve_lazy *z = calloc(1, sizeof *z);
    if (!z) {
        free(skel);
        return NULL;
    }
    z->skel = skel;
    z->len = strlen(skel);
    z->part = -1;
    z->count = answer_count;
    z->elem = answer_elem;
    z->ctx = parts;
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

/* A token's text (bytes, not NUL-terminated) into buf[256]; its length. */
int32_t serve_piece(const struct server *s, recur_token tok, char *buf) {
    const int32_t n = recur_token_to_piece(s->model, tok, buf, 256, 0, false);
    return n < 0 ? 0 : n;
}

static cJSON *bytes_json(const char *b, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    return a;
}

/* Where token k of c starts in c's text. */
size_t serve_tok_start(const struct choice *c, int32_t k) {
    return k == 0 ? 0 : c->tok_end[k - 1];
}

/* The tokens of c whose text is in its first `ready` bytes: when finished, those that start
 * before the end (a stop string may cut the last one); before, those that end by `ready`. */
int32_t serve_tokens_ready(const struct choice *c, size_t ready) {
    int32_t k = 0;
    if (c->finished)
        while (k < c->n_out && serve_tok_start(c, k) < c->len) k++;
    else
        while (k < c->n_out && c->tok_end[k] <= ready) k++;
    return k;
}

/* ---- per-token arrays: built at once (stream chunks) or deferred (whole answers) ---------- */

struct part {
    enum serve_part_kind kind;
    const struct task *t;
    const struct choice *c;
    bool prompt;
    int32_t from, to;
    size_t base; /* legacy: the text offset of the choice's text (after an echoed prompt) */
    size_t off;  /* legacy offsets: the prompt's text so far (elements come in order) */
};

static int64_t part_count(const struct part *p) {
    return (p->prompt ? p->t->n_prompt : 0) + (p->to > p->from ? p->to - p->from : 0);
}

/* {token, logprob, bytes} (chat) or {id, token, logprob|prob, bytes} (/completion). */
static cJSON *tok_json(const struct server *s, const struct tok_prob *rec, bool with_id,
                       const char *value_name) {
    char b[256];
    const int32_t n = serve_piece(s, rec->id, b);
    cJSON *o = cJSON_CreateObject();
    if (with_id) cJSON_AddNumberToObject(o, "id", rec->id);
    cJSON_AddItemToObject(o, "token", serve_text_json(b, (size_t)n));
    cJSON_AddNumberToObject(o, value_name, rec->v);
    cJSON_AddItemToObject(o, "bytes", bytes_json(b, n));
    return o;
}

/* A token's entry with its alternatives: chat's (recs in lp), or /completion's (post: the
 * post-sampling probabilities when recorded). */
static cJSON *entry_json(const struct server *s, const struct task *t, const struct choice *c,
                         int32_t k, bool with_id) {
    const bool post = with_id && c->post;
    const int32_t n_alt = post ? c->post_n[k] : t->n_top;
    const struct tok_prob *rec = post ? c->post + (size_t)k * (size_t)(1 + t->n_post)
                                      : c->lp + (size_t)k * (size_t)(1 + t->n_top);
    const char *name = post ? "prob" : "logprob";
    cJSON *o = tok_json(s, rec, with_id, name);
    cJSON *top = cJSON_AddArrayToObject(o, post ? "top_probs" : "top_logprobs");
    for (int32_t i = 0; i < n_alt; i++)
        cJSON_AddItemToArray(top, tok_json(s, rec + 1 + i, with_id, name));
    return o;
}

/* Element e of a legacy array: a prompt token (rec NULL for the first: nothing to condition
 * on, so nulls) or a choice's token. */
static cJSON *legacy_elem(const struct server *s, struct part *p, int64_t e) {
    const struct task *t = p->t;
    char b[256];
    recur_token tok;
    const struct tok_prob *rec;
    size_t offset;
    if (p->prompt && e < t->n_prompt) {
        tok = t->prompt[e];
        rec = e == 0 ? NULL : t->prompt_lp + (size_t)e * (size_t)(1 + t->n_top);
        offset = p->off;
        p->off += (size_t)serve_piece(s, tok, b);
    } else {
        const int32_t k = p->from + (int32_t)(e - (p->prompt ? t->n_prompt : 0));
        tok = p->c->out[k];
        rec = p->c->lp + (size_t)k * (size_t)(1 + t->n_top);
        offset = p->base + serve_tok_start(p->c, k);
    }
    switch (p->kind) {
    case SERVE_PART_LEG_TOKENS:
        return serve_text_json(b, (size_t)serve_piece(s, tok, b));
    case SERVE_PART_LEG_LP:
        return rec ? cJSON_CreateNumber(rec->v) : cJSON_CreateNull();
    case SERVE_PART_LEG_TOP: {
        if (!rec) return cJSON_CreateNull();
        cJSON *d = cJSON_CreateObject();
        for (int32_t k = 0; d && k < t->n_top; k++) {
            cJSON *key = serve_text_json(b, (size_t)serve_piece(s, rec[1 + k].id, b));
            if (key && !cJSON_GetObjectItemCaseSensitive(d, key->valuestring))
                cJSON_AddNumberToObject(d, key->valuestring, rec[1 + k].v);
            cJSON_Delete(key);
        }
        return d;
    }
    default:
        return cJSON_CreateNumber((double)offset);
    }
}

static cJSON *part_elem(const struct server *s, struct part *p, int64_t e) {
    switch (p->kind) {
    case SERVE_PART_CHAT:
        return entry_json(s, p->t, p->c, p->from + (int32_t)e, false);
    case SERVE_PART_LLAMA:
        return entry_json(s, p->t, p->c, p->from + (int32_t)e, true);
    default:
        return legacy_elem(s, p, e);
    }
}

static int64_t answer_count(void *ctx, int part) {
    const struct serve_parts *a = ctx;
    return part < a->n_parts ? part_count(&a->parts[part]) : 0;
}

static cJSON *answer_elem(void *ctx, int part, int64_t i) {
    struct serve_parts *a = ctx;
    return part < a->n_parts ? part_elem(a->s, &a->parts[part], i) : NULL;
}

/* Array p: a marker registered in a (written as it is sent), or, a NULL, the array itself. */
static cJSON *part_json(const struct server *s, struct serve_parts *a, struct part p) {
    if (a) {
        if (a->n_parts == a->cap) {
            const int cap = a->cap ? 2 * a->cap : 16;
            struct part *g = realloc(a->parts, sizeof *g * (size_t)cap);
            if (!g) return NULL;
            a->parts = g;
            a->cap = cap;
        }
        cJSON *m = lazy_mark(a->n_parts);
        if (m) a->parts[a->n_parts++] = p;
        return m;
    }
    cJSON *arr = cJSON_CreateArray();
    const int64_t n = part_count(&p);
    for (int64_t e = 0; arr && e < n; e++) cJSON_AddItemToArray(arr, part_elem(s, &p, e));
    return arr;
}

/* The legacy logprobs of choice c of t: the prompt's tokens first with `prompt` (echo). */
cJSON *serve_legacy_logprobs(const struct server *s, struct serve_parts *a, const struct task *t,
                             const struct choice *c, bool prompt, int32_t from, int32_t to,
                             size_t base) {
    static const struct {
        enum serve_part_kind kind;
        const char *name;
    } arrays[] = {{SERVE_PART_LEG_TOKENS, "tokens"},
                  {SERVE_PART_LEG_LP, "token_logprobs"},
                  {SERVE_PART_LEG_TOP, "top_logprobs"},
                  {SERVE_PART_LEG_OFF, "text_offset"}};
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < sizeof arrays / sizeof arrays[0]; i++)
        cJSON_AddItemToObject(o, arrays[i].name,
                              part_json(s, a,
                                        (struct part){.kind = arrays[i].kind,
                                                      .t = t,
                                                      .c = c,
                                                      .prompt = prompt,
                                                      .from = from,
                                                      .to = to,
                                                      .base = base}));
    return o;
}

/* Chat's logprobs.content, or /completion's completion_probabilities, for tokens [from, to). */
cJSON *serve_entries_json(const struct server *s, struct serve_parts *a, enum serve_part_kind kind,
                          const struct task *t, const struct choice *c, int32_t from, int32_t to) {
    return part_json(s, a, (struct part){.kind = kind, .t = t, .c = c, .from = from, .to = to});
}
