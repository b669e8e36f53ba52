/*
 * recur serve's reasoning separation (see reasoning.h): a small state machine over the raw
 * text. Bytes that cannot be placed yet (white space that a reasoning's trim may drop, the
 * start of a tag) wait in `pend`; everything else goes to the reasoning or the content as soon
 * as it arrives, so a stream sends each byte once, in order, and the whole-text path (one feed)
 * gives the same result as any split into pieces.
 */
#include "reasoning.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

static const char open_tag[] = "<think>", close_tag[] = "</think>";
#define OPEN_LEN  (sizeof open_tag - 1)
#define CLOSE_LEN (sizeof close_tag - 1)

/* Where the text is. START: nothing decided (white space so far); REASON: inside a reasoning;
 * AFTER: past a closing tag, in the white space before the content or another reasoning;
 * CONTENT: the rest is content. */
enum { ST_START, ST_REASON, ST_AFTER, ST_CONTENT };

static const char *const names[SERVE_REASONING_COUNT] = {"none", "auto", "deepseek-legacy",
                                                         "deepseek"};

int serve_reasoning_of(const char *name) {
    for (int i = 0; name && i < SERVE_REASONING_COUNT; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

const char *serve_reasoning_name(enum serve_reasoning f) {
    return (unsigned)f < SERVE_REASONING_COUNT ? names[f] : names[0];
}

/* llama.cpp trims with std::isspace in the "C" locale */
static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool serve_think_forced_open(const char *prompt) {
    if (!prompt) return false;
    size_t n = strlen(prompt);
    while (n > 0 && is_space(prompt[n - 1])) n--;
    return n >= OPEN_LEN && memcmp(prompt + n - OPEN_LEN, open_tag, OPEN_LEN) == 0;
}

static bool put(struct serve_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) return false;
        t->s = p;
        t->cap = cap;
    }
    if (n) memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return true;
}

/* Drops the first n bytes of t. */
static void drop(struct serve_text *t, size_t n) {
    memmove(t->s, t->s + n, t->len - n);
    t->len -= n;
    t->s[t->len] = '\0';
}

void serve_think_init(struct serve_think *th, enum serve_reasoning f, bool stream,
                      bool forced_open) {
    memset(th, 0, sizeof *th);
    th->parse = f != SERVE_REASONING_NONE && (unsigned)f < SERVE_REASONING_COUNT;
    th->in_content = stream && f == SERVE_REASONING_DEEPSEEK_LEGACY;
    th->forced_open = forced_open;
    th->state = ST_START;
}

void serve_think_free(struct serve_think *th) {
    free(th->reasoning.s);
    free(th->content.s);
    free(th->pend.s);
    memset(th, 0, sizeof *th);
}

/* Reasoning text s[0 .. n) of the current block, its trailing white space already cut: the
 * block's leading white space is dropped; the first text of a block kept in the content opens
 * it with "<think>". */
static bool reason(struct serve_think *th, const char *s, size_t n) {
    if (!th->block_text)
        while (n > 0 && is_space(*s)) s++, n--;
    if (n == 0) return true;
    if (th->in_content && !th->block_text && !put(&th->content, open_tag, OPEN_LEN)) return false;
    th->block_text = true;
    return put(th->in_content ? &th->content : &th->reasoning, s, n);
}

/* The length of the longest end of s[0 .. n) that is the start of tag (shorter than it). */
static size_t partial_end(const char *s, size_t n, const char *tag, size_t tag_len) {
    for (size_t k = tag_len - 1 < n ? tag_len - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

/* The first closing tag in s[0 .. n), NULL: none (memmem is not C11). */
static const char *find_close(const char *s, size_t n) {
    for (size_t i = 0; i + CLOSE_LEN <= n; i++)
        if (s[i] == '<' && memcmp(s + i, close_tag, CLOSE_LEN) == 0) return s + i;
    return NULL;
}

/* Places what of pend can be placed. */
static bool step(struct serve_think *th) {
    struct serve_text *p = &th->pend;
    for (;;) {
        if (th->state == ST_CONTENT) {
            const bool ok = put(&th->content, p->s, p->len);
            if (ok && p->len) drop(p, p->len);
            return ok;
        }
        if (th->state == ST_START || th->state == ST_AFTER) {
            size_t ws = 0;
            while (ws < p->len && is_space(p->s[ws])) ws++;
            const size_t rn = p->len - ws;
            if (rn == 0 || (rn < OPEN_LEN && memcmp(p->s + ws, open_tag, rn) == 0))
                return true; /* white space, maybe the start of a tag: not known yet */
            const bool tag = rn >= OPEN_LEN && memcmp(p->s + ws, open_tag, OPEN_LEN) == 0;
            if (th->state == ST_START && (tag || !th->forced_open)) {
                /* before an opening tag, white space is content; without one, all is */
                if (!put(&th->content, p->s, tag ? ws : p->len)) return false;
                drop(p, tag ? ws + OPEN_LEN : p->len);
                th->state = tag ? ST_REASON : ST_CONTENT;
            } else if (tag) { /* another reasoning after one */
                drop(p, ws + OPEN_LEN);
                th->state = ST_REASON;
            } else { /* forced open: the text is reasoning; after one: the content starts */
                drop(p, ws);
                th->state = th->state == ST_START ? ST_REASON : ST_CONTENT;
            }
            th->block_text = false;
            continue;
        }
        /* ST_REASON */
        const char *end = find_close(p->s, p->len);
        if (end) {
            size_t n = (size_t)(end - p->s);
            th->reasoning_end = th->raw - p->len + n + CLOSE_LEN;
            while (n > 0 && is_space(p->s[n - 1])) n--;
            if (!reason(th, p->s, n)) return false;
            if (th->in_content && th->block_text && !put(&th->content, close_tag, CLOSE_LEN))
                return false;
            drop(p, (size_t)(end - p->s) + CLOSE_LEN);
            th->state = ST_AFTER;
            continue;
        }
        /* hold the start of a closing tag and the white space before it */
        size_t n = p->len - partial_end(p->s, p->len, close_tag, CLOSE_LEN);
        while (n > 0 && is_space(p->s[n - 1])) n--;
        if (!reason(th, p->s, n)) return false;
        if (n) drop(p, n);
        return true;
    }
}

bool serve_think_feed(struct serve_think *th, const char *s, size_t n) {
    th->raw += n;
    if (!th->parse) return put(&th->content, s, n);
    return put(&th->pend, s, n) && step(th);
}

bool serve_think_finish(struct serve_think *th) {
    /* both texts exist ("" at least) once the generation is over */
    if (!put(&th->content, "", 0) || !put(&th->reasoning, "", 0)) return false;
    if (!th->parse) return true;
    struct serve_text *p = &th->pend;
    bool ok = true;
    switch (th->state) {
    case ST_START: /* white space, maybe the start of an opening tag */
        if (th->forced_open) {
            ok = reason(th, p->s ? p->s : "", p->len);
            th->reasoning_end = th->raw;
        } else {
            ok = put(&th->content, p->s, p->len);
        }
        break;
    case ST_REASON: /* never closed: white space and the start of "</think>" are dropped */
        if (th->in_content && th->block_text &&
            partial_end(p->s ? p->s : "", p->len, close_tag, CLOSE_LEN) == 0)
            ok = put(&th->content, close_tag, CLOSE_LEN);
        th->reasoning_end = th->raw;
        break;
    case ST_AFTER: { /* the white space after a reasoning is dropped, the start of a tag kept */
        size_t ws = 0;
        while (ws < p->len && is_space(p->s[ws])) ws++;
        ok = put(&th->content, p->s + ws, p->len - ws);
        break;
    }
    default:
        break;
    }
    if (p->len) drop(p, p->len);
    th->state = ST_CONTENT;
    return ok;
}

/* ---- the server's answers ------------------------------------------------------------------ */

bool serve_think_whole(struct serve_think *th, const struct task *t, const struct choice *c) {
    serve_think_init(th, t->reasoning, false, t->think_open);
    return serve_think_feed(th, c->text ? c->text : "", c->text ? c->len : 0) &&
           serve_think_finish(th);
}

bool serve_think_stream_step(struct serve_think_stream *ts, const struct task *t, const char *piece,
                             size_t n, bool end, const char **r, size_t *nr, const char **c,
                             size_t *nc) {
    if (!ts->on) {
        serve_think_init(&ts->th, t->reasoning, true, t->think_open);
        ts->on = true;
    }
    bool ok = !n || serve_think_feed(&ts->th, piece, n);
    if (ok && end && !ts->done) {
        ok = serve_think_finish(&ts->th);
        ts->done = true;
    }
    *r = ts->th.reasoning.s ? ts->th.reasoning.s + ts->sent_reasoning : "";
    *c = ts->th.content.s ? ts->th.content.s + ts->sent_content : "";
    *nr = ok ? ts->th.reasoning.len - ts->sent_reasoning : 0;
    *nc = ok ? ts->th.content.len - ts->sent_content : 0;
    ts->sent_reasoning += *nr;
    ts->sent_content += *nc;
    return ok;
}

void serve_think_stream_free(struct serve_think_stream *ts) {
    if (ts->on) serve_think_free(&ts->th);
    ts->on = false;
}

int32_t serve_think_tokens(const struct task *t, const struct choice *c) {
    struct serve_think th;
    const bool ok = serve_think_whole(&th, t, c);
    const size_t end = th.reasoning_end;
    serve_think_free(&th);
    if (!ok || end == 0 || !c->tok_end) return 0;
    int32_t k = 0;
    while (k < c->n_out && c->tok_end[k] < end) k++;
    return k < c->n_out ? k + 1 : c->n_out;
}

const char *serve_think_history(const char *tmpl, const cJSON *msg) {
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
    if (!rc || cJSON_IsNull(rc)) return NULL;
    if (!cJSON_IsString(rc)) return "must be a string or null";
    if (!rc->valuestring[0]) return NULL;
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0)
        return "only an assistant message has a reasoning";
    if (!strstr(tmpl, "reasoning_content")) return NULL; /* the template never reads it */
    /* Qwen3 (and 3.5): the reasoning is written only after the last user message that is no
       tool's answer (a text in <tool_response> tags) */
    if (strstr(tmpl, "loop.index0 > ns.last_query_index"))
        for (const cJSON *m = msg->next; m; m = m->next) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsString(r) || strcmp(r->valuestring, "user") != 0) continue;
            static const char open[] = "<tool_response>", close[] = "</tool_response>";
            const char *t = cJSON_IsString(c) ? c->valuestring : "";
            const size_t n = strlen(t);
            if (!(strncmp(t, open, strlen(open)) == 0 && n >= strlen(close) &&
                  strcmp(t + n - strlen(close), close) == 0))
                return NULL;
        }
    return "the chat template writes this reasoning into the prompt, which recur's builtin "
           "formats do not render: leave it out (or send it where the template drops it)";
}
