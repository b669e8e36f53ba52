/*
 * recur serve's prompts (see api.h): a string, a list of token ids, or llama-server's mix of
 * ids and strings; a list of those is several prompts. Each is checked against the server's
 * limits: a long text is counted a chunk at a time and refused once it is surely too long, and
 * a prompt past -c is llama-server's exceed_context_size_error (api.c answers it).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

bool serve_tokenize_into(struct server *s, const char *text, bool add_special, bool special,
                         recur_token **toks, int32_t *n, int32_t *cap) {
    const size_t len = strlen(text);
    if (len > (size_t)INT32_MAX / 4) return false;
    const int32_t need = *n + RECUR_TOKENS_MAX((int32_t)len);
    if (need > *cap) {
        recur_token *g = realloc(*toks, sizeof(recur_token) * (size_t)need);
        if (!g) return false;
        *toks = g;
        *cap = need;
    }
    const int32_t got =
        recur_tokenize(s->model, text, (int32_t)len, *toks + *n, *cap - *n, add_special, special);
    if (got < 0) return false;
    *n += got;
    return true;
}

/* Bytes counted at a time by serve_check_length, and the tokens one cut may change: a cut
 * falls before a space that starts a word (where the pre-tokenizers split anyway) when there
 * is one, else anywhere, and tokenizing the two sides apart can differ from the whole by a
 * merge or two. */
#define COUNT_CHUNK     (64 * 1024)
#define COUNT_CUT_SLACK 8

bool serve_check_length(struct parse *p, struct server *s, const char *text, size_t len,
                        const char *what) {
    const int32_t max = s->lim.max_prompt;
    /* no token is longer than max_piece bytes: text of more than max of them cannot fit */
    if (s->max_piece > 0 && len > (size_t)max * (size_t)s->max_piece) {
        serve_fail(p,
                   "%s has %zu bytes: more than %d tokens (the most accepted), as no token of this "
                   "model is longer than %d bytes",
                   what, len, max, s->max_piece);
        return false;
    }
    if (len <= COUNT_CHUNK) return true; /* tokenized whole anyway */
    /* a long text is counted a chunk at a time, and refused as soon as it is surely too long,
       so that a huge prompt costs the tokenizer about max tokens, not all of its bytes */
    recur_token *scratch = malloc(sizeof(recur_token) * (size_t)RECUR_TOKENS_MAX(COUNT_CHUNK));
    if (!scratch) return true; /* the whole tokenization that follows decides */
    int64_t counted = 0, cuts = 0;
    size_t at = 0;
    bool over = false;
    while (at < len && !over) {
        size_t n = len - at < COUNT_CHUNK ? len - at : COUNT_CHUNK;
        if (at + n < len) {
            size_t cut = n;
            while (cut > n / 2 && !(text[at + cut] == ' ' && text[at + cut - 1] != ' ')) cut--;
            if (cut == n / 2) /* no word boundary: any UTF-8 character boundary */
                for (cut = n; cut > 1 && ((unsigned char)text[at + cut] & 0xc0) == 0x80; cut--) {
                }
            n = cut;
            cuts++;
        }
        const int32_t got = recur_tokenize(s->model, text + at, (int32_t)n, scratch,
                                           RECUR_TOKENS_MAX(COUNT_CHUNK), false, false);
        if (got < 0) break; /* the whole tokenization reports it */
        counted += got;
        over = counted - COUNT_CUT_SLACK * cuts > max;
        at += n;
    }
    free(scratch);
    if (over)
        serve_fail(p,
                   "%s has more than %d tokens (counted in its first %zu of %zu bytes), at most %d "
                   "are accepted",
                   what, max, at, len, max);
    return !over;
}

/* One prompt: a string, or an array of token ids and strings (llama-server's mixed prompts,
 * on /completion and /v1/completions: each string's tokens in its place, the BOS only before a
 * first string, and only with add_special) into *toks (NULL) and *n_toks (0). */
void serve_one_prompt(struct parse *p, struct server *s, const cJSON *f, bool add_special,
                      recur_token **toks, int32_t *n_toks, const char *what) {
    int32_t cap = 0;
    if (cJSON_IsString(f)) {
        if (!serve_check_length(p, s, f->valuestring, strlen(f->valuestring), what)) return;
        if (!serve_tokenize_into(s, f->valuestring, add_special, false, toks, n_toks, &cap))
            serve_fail(p, "%s could not be tokenized", what);
        return;
    }
    if (!cJSON_IsArray(f)) {
        serve_fail(p, "%s must be a string or an array of token ids", what);
        return;
    }
    const int32_t V = recur_model_n_vocab(s->model);
    int i = 0;
    for (const cJSON *e = f->child; e && !p->bad; e = e->next, i++) {
        if (cJSON_IsString(e)) {
            if (!serve_check_length(p, s, e->valuestring, strlen(e->valuestring), what)) return;
            if (!serve_tokenize_into(s, e->valuestring, add_special && i == 0, false, toks, n_toks,
                                     &cap))
                serve_fail(p, "%s[%d] could not be tokenized", what, i);
            continue;
        }
        const double v = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (!cJSON_IsNumber(e) || v != floor(v) || v < 0 || v >= V) {
            serve_fail(p, "%s[%d] is not a token id (0..%d) or a string", what, i, V - 1);
            return;
        }
        if (*n_toks + 1 > cap) {
            cap = 2 * cap + 16;
            recur_token *g = realloc(*toks, sizeof(recur_token) * (size_t)cap);
            if (!g) {
                serve_fail(p, "out of memory");
                return;
            }
            *toks = g;
        }
        (*toks)[(*n_toks)++] = (recur_token)v;
    }
}

/* The prompt's length against the server's limits. */
void serve_check_prompt_len(struct parse *p, struct server *s, const struct task *t,
                            const char *what) {
    if (p->bad) return;
    if (t->n_prompt == 0)
        serve_fail(p, "%s is empty", what);
    else if (t->n_prompt > s->lim.max_prompt)
        serve_fail(p, "%s has %d tokens, at most %d are accepted", what, t->n_prompt,
                   s->lim.max_prompt);
    else if (s->lim.n_ctx > 0 && t->n_prompt >= s->lim.n_ctx) {
        serve_fail(p,
                   "%s has %d tokens: a sequence holds at most %d (-c), with room for one "
                   "generated token",
                   what, t->n_prompt, s->lim.n_ctx);
        p->over_ctx = t->n_prompt; /* this message is the first: p was not bad above */
    }
}

/* The prompt field: one prompt or a list of them, each in a task of r (the first is r's
 * template task, the others are made by the caller). Returns how many prompts; *list the
 * prompts' JSON items (NULL entries: the whole field). */
int serve_prompts_field(struct parse *p, const cJSON **list, bool llama) {
    const cJSON *f = serve_field(p, "prompt");
    if (p->bad) return 0;
    if (!f) {
        serve_fail(p, "\"prompt\" is required");
        return 0;
    }
    if (cJSON_IsString(f)) {
        list[0] = f;
        return 1;
    }
    if (!cJSON_IsArray(f)) {
        serve_fail(p, "\"prompt\" must be a string, an array of token ids, or a list of those");
        return 0;
    }
    /* an array with a number in it is one prompt of tokens (with strings: llama-server's
       mixed form); else each element is a prompt */
    bool has_number = false;
    for (const cJSON *e = f->child; e; e = e->next) has_number |= cJSON_IsNumber(e);
    if (has_number || !f->child) {
        list[0] = f;
        return 1;
    }
    int n = 0;
    for (const cJSON *e = f->child; e; e = e->next) {
        if (n == SERVE_MAX_PROMPTS) {
            serve_fail(p, "\"prompt\" lists more than %d prompts", SERVE_MAX_PROMPTS);
            return 0;
        }
        if (!cJSON_IsString(e) && !cJSON_IsArray(e)) {
            serve_fail(p, "\"prompt\"[%d] must be a string or an array of token ids%s", n,
                       llama && cJSON_IsObject(e) ? " (multimodal prompts are not supported)" : "");
            return 0;
        }
        list[n++] = e;
    }
    return n;
}
