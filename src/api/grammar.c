/* The grammar sampler (include/recur.h) over src/grammar: a sampler of the sample module
 * (rsample_init with its own ops) that removes the candidates the grammar cannot take next.
 * The vocabulary trie is built once per sampler from the tokens' texts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

#include "../core/core.h"
#include "api_arg.h"
#include "../grammar/grammar.h"
#include "../sample/sample.h"

struct gsmpl {
    struct rgram *g;
    struct rgram_state *st;
    struct rgram_trie *trie;
    uint8_t *allowed;
    char *bytes; /* every token's text, token i at bytes + off[i] */
    size_t *off;
    int32_t n_vocab;
    recur_token eos;
    char *error; /* set when an accepted token broke the grammar: later applies fail */
    /* lazy: unconstrained until the generated text holds a trigger (see recur.h) */
    bool lazy, triggered;
    char **triggers;
    size_t n_triggers, max_trigger;
    char *tail; /* the generated text's last bytes not yet triggered (< max_trigger + a token) */
    size_t n_tail, cap_tail;
};

static const char *g_name(const struct rsample *smpl) {
    (void)smpl;
    return "grammar";
}

/* Lazy, not yet triggered: token's text joins the tail; once a trigger is in it, the grammar
 * takes the text from the trigger's start. False when nothing was triggered. */
static bool lazy_accept(struct gsmpl *c, int32_t token, const char **msg) {
    if (token < 0 || token >= c->n_vocab) return false;
    const size_t n = c->off[token + 1] - c->off[token];
    if (c->n_tail + n > c->cap_tail) {
        size_t cap = (c->n_tail + n) * 2 + 64;
        char *t = realloc(c->tail, cap);
        if (!t) {
            *msg = "grammar: out of memory for the lazy grammar's text";
            return true;
        }
        c->tail = t;
        c->cap_tail = cap;
    }
    memcpy(c->tail + c->n_tail, c->bytes + c->off[token], n);
    c->n_tail += n;
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < c->n_triggers; k++) {
        const size_t tl = strlen(c->triggers[k]);
        for (size_t i = 0; i + tl <= c->n_tail && i < best; i++)
            if (memcmp(c->tail + i, c->triggers[k], tl) == 0) best = i;
    }
    if (best == SIZE_MAX) { /* keep only what a trigger could still start in */
        const size_t keep = c->max_trigger > 0 ? c->max_trigger - 1 : 0;
        if (c->n_tail > keep) {
            memmove(c->tail, c->tail + c->n_tail - keep, keep);
            c->n_tail = keep;
        }
        return false;
    }
    c->triggered = true;
    if (!rgram_state_accept(c->st, c->tail + best, c->n_tail - best)) *msg = rcore_error_get();
    c->n_tail = 0;
    return true;
}

static void g_accept(struct rsample *smpl, int32_t token) {
    struct gsmpl *c = smpl->ctx;
    if (c->error || token == c->eos) return;
    if (c->lazy && !c->triggered) {
        const char *msg = NULL;
        if (lazy_accept(c, token, &msg) && msg) {
            size_t n = strlen(msg);
            c->error = malloc(n + 64);
            if (c->error) snprintf(c->error, n + 64, "%s (token %d was accepted)", msg, token);
        }
        return;
    }
    const char *msg = NULL;
    if (token < 0 || token >= c->n_vocab)
        msg = "grammar: an accepted token is out of the vocabulary";
    else if (c->off[token + 1] == c->off[token])
        msg = "grammar: an accepted token has no text the grammar could match";
    else if (!rgram_state_accept(c->st, c->bytes + c->off[token],
                                 c->off[token + 1] - c->off[token]))
        msg = rcore_error_get();
    if (msg) {
        size_t n = strlen(msg);
        c->error = malloc(n + 64);
        if (c->error) snprintf(c->error, n + 64, "%s (token %d was accepted)", msg, token);
    }
}

static bool g_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    struct gsmpl *c = smpl->ctx;
    if (c->error) {
        rcore_error_set("%s", c->error);
        return false;
    }
    if (c->lazy && !c->triggered) return true; /* free until a trigger */
    if (rgram_mask(c->st, c->trie, c->allowed) < 0) return false;
    const bool eos_ok = rgram_state_complete(c->st);
    size_t k = 0;
    /* the end-of-sequence token's own text is empty, so the mask never allows it */
    for (size_t i = 0; i < cands->size; i++) { /* branch-free: most candidates pass or fail */
        const struct rsample_token_data d = cands->data[i];
        const bool in = (uint32_t)d.id < (uint32_t)c->n_vocab;
        const bool ok = in && (d.id == c->eos ? eos_ok : c->allowed[in ? d.id : 0] != 0);
        cands->data[k] = d;
        k += ok;
    }
    if (k == 0) {
        rcore_error_set("grammar: no candidate token can continue the grammar here");
        return false;
    }
    cands->size = k; /* the order is kept, so "sorted" stays true if it was */
    cands->selected = -1;
    return true;
}

static void g_reset(struct rsample *smpl) {
    struct gsmpl *c = smpl->ctx;
    free(c->error);
    c->error = NULL;
    c->triggered = false;
    c->n_tail = 0;
    if (!rgram_state_reset(c->st)) {
        const char *m = rcore_error_get();
        c->error = malloc(strlen(m) + 1);
        if (c->error) strcpy(c->error, m);
    }
}

static void gsmpl_free(struct gsmpl *c) {
    if (!c) return;
    rgram_state_free(c->st);
    rgram_trie_free(c->trie);
    rgram_free(c->g);
    free(c->allowed);
    free(c->bytes);
    free(c->off);
    free(c->error);
    for (size_t i = 0; i < c->n_triggers; i++) free(c->triggers[i]);
    free(c->triggers);
    free(c->tail);
    free(c);
}

static void g_free(struct rsample *smpl) {
    gsmpl_free(smpl->ctx);
}

static const struct rsample_ops grammar_ops = {
    .name = g_name, .accept = g_accept, .apply = g_apply, .reset = g_reset, .free = g_free};

/* Every token's text (control tokens: none), concatenated. */
static bool token_texts(const struct recur_model *model, struct gsmpl *c) {
    const int32_t n = c->n_vocab;
    size_t cap = (size_t)n * 8 + 64, len = 0;
    c->off = malloc(((size_t)n + 1) * sizeof *c->off);
    c->bytes = malloc(cap);
    if (!c->off || !c->bytes) return false;
    for (int32_t i = 0; i < n; i++) {
        c->off[i] = len;
        for (;;) {
            int32_t room = cap - len > INT32_MAX ? INT32_MAX : (int32_t)(cap - len);
            int32_t k = recur_token_to_piece(model, i, c->bytes + len, room, 0, false);
            if (k >= 0) {
                len += (size_t)k;
                break;
            }
            size_t need = len + (size_t)-k;
            while (cap < need) cap *= 2;
            char *b = realloc(c->bytes, cap);
            if (!b) return false;
            c->bytes = b;
        }
    }
    c->off[n] = len;
    return true;
}

struct recur_sampler *recur_sampler_init_grammar(const struct recur_model *model,
                                                 const char *grammar, const char *root) {
    API_NEED(model, NULL);
    API_NEED(grammar, NULL);
    struct gsmpl *c = calloc(1, sizeof *c);
    if (!c) {
        rcore_error_set("sampler init_grammar: out of memory");
        return NULL;
    }
    c->n_vocab = recur_model_n_vocab(model);
    c->eos = recur_token_eos(model);
    if (!(c->g = rgram_parse(grammar, strlen(grammar), root ? root : "root"))) goto fail;
    if (!(c->st = rgram_state_new(c->g))) goto fail;
    if (!token_texts(model, c) || !(c->allowed = malloc((size_t)c->n_vocab))) {
        rcore_error_set("sampler init_grammar: out of memory");
        goto fail;
    }
    if (!(c->trie = rgram_trie_new(c->n_vocab, c->bytes, c->off))) goto fail;
    struct rsample *s = rsample_init(&grammar_ops, c);
    if (!s) goto fail;
    return (struct recur_sampler *)(void *)s;
fail:
    gsmpl_free(c);
    return NULL;
}

struct recur_sampler *recur_sampler_init_grammar_lazy(const struct recur_model *model,
                                                      const char *grammar, const char *root,
                                                      const char *const *triggers,
                                                      size_t n_triggers) {
    API_NEED(model, NULL);
    API_NEED(grammar, NULL);
    if (!triggers || n_triggers == 0) {
        rcore_error_set("sampler init_grammar_lazy: no trigger words");
        return NULL;
    }
    for (size_t i = 0; i < n_triggers; i++)
        if (!triggers[i] || !triggers[i][0]) {
            rcore_error_set("sampler init_grammar_lazy: trigger %zu is %s", i,
                            triggers[i] ? "empty" : "NULL");
            return NULL;
        }
    struct recur_sampler *s = recur_sampler_init_grammar(model, grammar, root);
    if (!s) return NULL;
    struct gsmpl *c = ((struct rsample *)(void *)s)->ctx;
    c->lazy = true;
    if (!(c->triggers = calloc(n_triggers, sizeof *c->triggers))) goto oom;
    for (size_t i = 0; i < n_triggers; i++) {
        const size_t n = strlen(triggers[i]);
        if (!(c->triggers[i] = malloc(n + 1))) goto oom;
        c->n_triggers = i + 1;
        memcpy(c->triggers[i], triggers[i], n + 1);
        if (n > c->max_trigger) c->max_trigger = n;
    }
    return s;
oom:
    recur_sampler_free(s);
    rcore_error_set("sampler init_grammar_lazy: out of memory");
    return NULL;
}

char *recur_json_schema_to_grammar(const char *schema) {
    if (!schema) {
        rcore_error_set("json schema: the schema is NULL");
        return NULL;
    }
    return rgram_json_schema(schema, strlen(schema));
}
