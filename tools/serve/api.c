/*
 * recur serve's completion requests (see api.h): every field of /v1/completions,
 * /completion and /v1/chat/completions is in its endpoint's table (fields.c); a known
 * field of the wrong type or range is a 400 naming it.
 *
 * Lengths: a request that names none (max_tokens, max_completion_tokens, n_predict) gets the
 * server's -n (s->lim.n_predict); without -n, /v1/completions gets OpenAI's 16 and the others
 * the server's --max-tokens. With -c (s->lim.n_ctx) a
 * prompt must leave room for a token, and generation stops at the budget ("length";
 * /completion's truncated).
 *
 * The field tables, logit_bias and samplers are in fields.c.
 *
 * Prompts (prompt.c): a list of several is answered together (choices indexed prompt * n +
 * choice, as OpenAI; /completion answers an array).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve.h"
#include "api.h"

bool serve_parse_tokens(struct server *s, const cJSON *arr, const char *what, recur_token **out,
                        int32_t *n, char *msg, size_t msg_len) {
    *out = NULL;
    *n = 0;
    if (!cJSON_IsArray(arr)) {
        snprintf(msg, msg_len, "\"%s\" must be an array of token ids", what);
        return false;
    }
    const int32_t count = cJSON_GetArraySize(arr), V = recur_model_n_vocab(s->model);
    recur_token *t = malloc(sizeof(recur_token) * ((size_t)count + 1));
    if (!t) {
        snprintf(msg, msg_len, "out of memory for %d tokens", count);
        return false;
    }
    int32_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        const double v = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (!cJSON_IsNumber(e) || v != floor(v) || v < 0 || v >= V) {
            snprintf(msg, msg_len, "\"%s\"[%d] is not a token id (0..%d)", what, i, V - 1);
            free(t);
            return false;
        }
        t[i] = (recur_token)v;
    }
    *out = t;
    *n = count;
    return true;
}

void serve_cors_headers(struct MHD_Connection *conn, struct MHD_Response *resp) {
    static const char *const names[] = {"Access-Control-Allow-Origin",
                                        "Access-Control-Allow-Credentials", "Vary"};
    static const char *const keys[] = {SERVE_CORS_KEY("Access-Control-Allow-Origin"),
                                       SERVE_CORS_KEY("Access-Control-Allow-Credentials"),
                                       SERVE_CORS_KEY("Vary")};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, keys[i]);
        if (v) MHD_add_response_header(resp, names[i], v);
    }
}

enum MHD_Result serve_send_text(struct MHD_Connection *conn, unsigned status, const char *type,
                                char *text, const char *retry_after) {
    if (!text) return MHD_NO;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    serve_cors_headers(conn, resp);
    if (retry_after) MHD_add_response_header(resp, "Retry-After", retry_after);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result serve_send_error(struct MHD_Connection *conn, unsigned status, const char *type,
                                 const char *msg) {
    if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, SERVE_ANTHROPIC_KEY))
        return serve_messages_error(conn, status, msg);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "code", status);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, status, "application/json", text,
                           status == MHD_HTTP_SERVICE_UNAVAILABLE ? "1" : NULL);
}

/* ---- text ------------------------------------------------------------------------------- */

/* The length of the valid UTF-8 character at s[0..n) (overlong forms, surrogates and code
 * points past U+10FFFF are invalid), 0 when there is none. */
size_t serve_utf8_char(const unsigned char *s, size_t n) {
    return recur_utf8_char((const char *)s, n);
}

/* The bytes at s[0..n) (no valid character there) that one U+FFFD replaces: the longest start
 * of a well-formed sequence, at least one byte (Unicode's "maximal subpart" practice, which
 * WHATWG decoders and Python's follow: F2 89 FF is two replacements, not three). */
static size_t utf8_bad_run(const unsigned char *s, size_t n) {
    const unsigned char b = s[0];
    const size_t len = b >= 0xC2 && b <= 0xDF   ? 2
                       : b >= 0xE0 && b <= 0xEF ? 3
                       : b >= 0xF0 && b <= 0xF4 ? 4
                                                : 1;
    /* the second byte's range, which the lead byte narrows (Unicode's table 3-7) */
    const unsigned char lo = b == 0xE0   ? 0xA0
                             : b == 0xF0 ? 0x90
                                         : 0x80,
                        hi = b == 0xED   ? 0x9F
                             : b == 0xF4 ? 0x8F
                                         : 0xBF;
    size_t k = 1;
    while (k < len && k < n && (k == 1 ? s[k] >= lo && s[k] <= hi : s[k] >= 0x80 && s[k] <= 0xBF))
        k++;
    return k;
}

/* A JSON string needs valid UTF-8, and tokens are bytes: a model may emit any of them. Each
 * invalid run becomes U+FFFD, as decoders do (utf8_bad_run). malloc'd, NUL-terminated; NULL
 * without memory. */
static char *utf8_valid(const char *text, size_t n) {
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t len = serve_utf8_char((const unsigned char *)text + i, n - i);
        if (len == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += utf8_bad_run((const unsigned char *)text + i, n - i);
        } else {
            memcpy(out + o, text + i, len);
            o += len;
            i += len;
        }
    }
    out[o] = '\0';
    return out;
}

/* cJSON_AddStringToObject with the text made valid UTF-8. */
void serve_add_sampling(cJSON *obj, const struct recur_sampler_params *sp) {
    const struct {
        const char *name;
        double v;
    } rows[] = {
        {"temperature", sp->temp},
        {"top_k", sp->top_k},
        {"top_p", sp->top_p},
        {"min_p", sp->min_p},
        {"repeat_last_n", sp->penalty_last_n},
        {"repeat_penalty", sp->penalty_repeat},
        {"presence_penalty", sp->penalty_present},
        {"frequency_penalty", sp->penalty_freq},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        cJSON_AddNumberToObject(obj, rows[i].name, rows[i].v);
}

void serve_add_text(cJSON *obj, const char *name, const char *text, size_t n) {
    char *v = utf8_valid(text ? text : "", text ? n : 0);
    cJSON_AddStringToObject(obj, name, v ? v : "");
    free(v);
}

cJSON *serve_text_json(const char *text, size_t n) {
    char *v = utf8_valid(text ? text : "", text ? n : 0);
    cJSON *j = cJSON_CreateString(v ? v : "");
    free(v);
    return j;
}

/* ---- field helpers ----------------------------------------------------------------------- */

void serve_fail(struct parse *p, const char *fmt, ...) {
    if (p->bad) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
    p->bad = true;
}

const cJSON *serve_field(const struct parse *p, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(p->body, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

/* A number field in [lo, hi] (integer when want_int); absent or null: def. */
static double num_field(struct parse *p, const char *name, double def, double lo, double hi,
                        bool want_int) {
    const cJSON *f = serve_field(p, name);
    if (p->bad || !f) return def;
    if (!cJSON_IsNumber(f) || (want_int && f->valuedouble != floor(f->valuedouble)) ||
        !(f->valuedouble >= lo && f->valuedouble <= hi)) {
        serve_fail(p, "\"%s\" must be %s from %g to %g", name, want_int ? "an integer" : "a number",
                   lo, hi);
        return def;
    }
    return f->valuedouble;
}

static bool bool_field(struct parse *p, const char *name, bool def) {
    const cJSON *f = serve_field(p, name);
    if (p->bad || !f) return def;
    if (!cJSON_IsBool(f)) {
        serve_fail(p, "\"%s\" must be true or false", name);
        return def;
    }
    return cJSON_IsTrue(f);
}

static void stop_field(struct parse *p, struct task *t) {
    const cJSON *f = serve_field(p, "stop");
    if (p->bad || !f) return;
    const cJSON *one = cJSON_IsString(f) ? f : NULL;
    if (!one && (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > SERVE_MAX_STOP)) {
        serve_fail(p, "\"stop\" must be a string or up to %d strings", SERVE_MAX_STOP);
        return;
    }
    for (const cJSON *e = one ? one : f->child; e; e = one ? NULL : e->next) {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
            serve_fail(p, "\"stop\" strings must be non-empty strings");
            return;
        }
        if (!(t->stop[t->n_stop++] = strdup(e->valuestring))) {
            serve_fail(p, "out of memory");
            return;
        }
    }
}

/* Appends the tokens of text to *toks (grown as needed). */
/* ignore_eos, as llama-server: the end of text (and a chat template's end of turn, when it is
 * one token) can never be sampled, so an answer runs to its length or a stop string. */
static void ignore_eos_bias(struct parse *p, const struct server *s, struct task *t) {
    if (p->bad) return;
    const recur_token eos = recur_token_eos(s->model);
    const recur_token eog[2] = {eos, t->eot_token > 0 && t->eot_token != eos ? t->eot_token : -1};
    struct recur_logit_bias *g = realloc(t->bias, sizeof *g * (size_t)(t->n_bias + 2));
    if (!g) {
        serve_fail(p, "out of memory");
        return;
    }
    t->bias = g;
    for (int i = 0; i < 2; i++)
        if (eog[i] >= 0) t->bias[t->n_bias++] = (struct recur_logit_bias){eog[i], -INFINITY};
}

/* stream_options: {"include_usage": bool} */
static void stream_options_field(struct parse *p, struct serve_request *r) {
    const cJSON *f = serve_field(p, "stream_options");
    if (p->bad || !f) return;
    if (!cJSON_IsObject(f)) {
        serve_fail(p, "\"stream_options\" must be an object");
        return;
    }
    for (const cJSON *e = f->child; e; e = e->next) {
        if (strcmp(e->string, "include_usage") == 0 && cJSON_IsBool(e)) {
            r->include_usage = cJSON_IsTrue(e);
        } else {
            serve_fail(p,
                       "\"stream_options\": only \"include_usage\" (true or false) is supported");
            return;
        }
    }
}

/* response_fields: a list of field paths ("a/b") to keep. */
static void response_fields_field(struct parse *p, struct serve_request *r) {
    const cJSON *f = serve_field(p, "response_fields");
    if (p->bad || !f) return;
    if (!cJSON_IsArray(f)) {
        serve_fail(p, "\"response_fields\" must be an array of field names");
        return;
    }
    for (const cJSON *e = f->child; e; e = e->next)
        if (!cJSON_IsString(e)) {
            serve_fail(p, "\"response_fields\" must be an array of field names");
            return;
        }
    if (!(r->response_fields = cJSON_Duplicate(f, true))) serve_fail(p, "out of memory");
}

/* ---- the request ------------------------------------------------------------------------- */

/* A copy of t's settings for another prompt: the same fields, its own allocations. */
static struct task *clone_task(const struct task *t) {
    struct task *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max_tokens = t->max_tokens;
    c->sampling = t->sampling;
    c->n = t->n;
    c->cache_prompt = t->cache_prompt;
    c->ignore_eos = t->ignore_eos;
    c->api = t->api;
    c->logprobs = t->logprobs;
    c->n_top = t->n_top;
    c->n_post = t->n_post;
    c->prompt_logprobs = t->prompt_logprobs;
    c->refs = 1;
    bool ok = true;
    c->tools = t->tools;
    if (t->grammar) ok = (c->grammar = strdup(t->grammar));
    if (ok && t->grammar_trigger) ok = (c->grammar_trigger = strdup(t->grammar_trigger));
    c->grammar_root = t->grammar_root;
    for (int i = 0; i < t->n_stop; i++) ok = ok && (c->stop[c->n_stop++] = strdup(t->stop[i]));
    if (ok && t->eot) ok = (c->eot = strdup(t->eot));
    if (ok && t->n_bias > 0) {
        ok = (c->bias = malloc(sizeof *c->bias * (size_t)t->n_bias));
        if (ok) memcpy(c->bias, t->bias, sizeof *c->bias * (size_t)t->n_bias);
        c->n_bias = ok ? t->n_bias : 0;
    }
    if (!ok) {
        for (int i = 0; i < c->n_stop; i++) free(c->stop[i]);
        c->n_stop = 0;
        free(c->eot);
        free(c->grammar);
        free(c->grammar_trigger);
        free(c->bias);
        free(c);
        return NULL;
    }
    return c;
}

/* The prompt's tokens as text: what echo puts before the completion. */
static void prompt_text(struct parse *p, struct server *s, struct task *t) {
    size_t cap = 64, len = 0;
    char *text = malloc(cap);
    for (int32_t i = 0; text && i < t->n_prompt; i++) {
        char piece[256];
        int32_t n = recur_token_to_piece(s->model, t->prompt[i], piece, sizeof piece, 0, false);
        if (n < 0) n = 0;
        if (len + (size_t)n + 1 > cap) {
            cap = 2 * cap + (size_t)n;
            char *g = realloc(text, cap);
            if (!g) {
                free(text);
                text = NULL;
                break;
            }
            text = g;
        }
        memcpy(text + len, piece, (size_t)n);
        len += (size_t)n;
    }
    if (!text) {
        serve_fail(p, "out of memory");
        return;
    }
    text[len] = '\0';
    t->prompt_text = text;
}

/* /completion's generation_settings: the settings as parsed (not as sent). */
static cJSON *settings_json(struct server *s, const struct task *t, const struct serve_request *r,
                            const cJSON *samplers) {
    const struct recur_sampler_params *sp = &t->sampling;
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "n_predict", t->max_tokens);
    cJSON_AddNumberToObject(g, "seed", (double)sp->seed);
    serve_add_sampling(g, sp);
    /* the samplers recur does not have, all off */
    cJSON_AddNumberToObject(g, "dynatemp_range", 0);
    cJSON_AddNumberToObject(g, "typical_p", 1);
    cJSON_AddNumberToObject(g, "mirostat", 0);
    cJSON_AddNumberToObject(g, "dry_multiplier", 0);
    cJSON_AddNumberToObject(g, "xtc_probability", 0);
    cJSON *stop = cJSON_AddArrayToObject(g, "stop");
    for (int i = 0; i < t->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(t->stop[i]));
    cJSON_AddBoolToObject(g, "ignore_eos", t->ignore_eos);
    cJSON_AddBoolToObject(g, "stream", r->stream);
    cJSON_AddNumberToObject(g, "n_probs", r->n_probs);
    cJSON_AddBoolToObject(g, "post_sampling_probs", r->post_sampling);
    cJSON_AddBoolToObject(g, "cache_prompt", t->cache_prompt);
    cJSON_AddNumberToObject(g, "n_cmpl", t->n);
    cJSON *lb = cJSON_AddArrayToObject(g, "logit_bias");
    for (int32_t i = 0; i < t->n_bias; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(t->bias[i].token));
        cJSON_AddItemToArray(pair, isinf(t->bias[i].bias) ? cJSON_CreateFalse()
                                                          : cJSON_CreateNumber(t->bias[i].bias));
        cJSON_AddItemToArray(lb, pair);
    }
    if (samplers)
        cJSON_AddItemToObject(g, "samplers", cJSON_Duplicate(samplers, true));
    else {
        cJSON *a = cJSON_AddArrayToObject(g, "samplers");
        const char *chain[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};
        for (int i = 0; i < 5; i++) cJSON_AddItemToArray(a, cJSON_CreateString(chain[i]));
    }
    cJSON_AddNumberToObject(g, "n_ctx", s->lim.n_ctx);
    cJSON_AddStringToObject(g, "model", s->model_name ? s->model_name : "");
    return g;
}

/* What an answer's JSON takes per token, for the estimate of --max-answer-mb, rounded up from
 * answers of the shipped model (a token is one to a few bytes of text): */
#define ANS_TOKEN  48 /* a token: its text, and its place in the token and offset arrays */
#define ANS_ENTRY  96 /* a probability entry, {"id", "token", "logprob", "bytes": [...]} */
#define ANS_LEGACY 32 /* an alternative in a legacy top_logprobs object, "text": logprob */

/* Refuses r when its answer could pass the server's limit: every choice of every prompt at its
 * full length, with its probabilities (and echo's prompt). The answer is written as it is sent
 * (lazy.c), but the records it is made from are held until then, and a client that asks
 * for half a gigabyte of JSON is refused before any of it is computed. */
static void answer_size_check(struct parse *p, const struct server *s,
                              const struct serve_request *r) {
    if (p->bad || s->lim.max_answer == 0) return;
    double total = 0;
    int32_t alts = 0, longest = 0, n = 0;
    for (int ti = 0; ti < r->n_tasks; ti++) {
        const struct task *t = r->tasks[ti];
        double per_tok = ANS_TOKEN;
        if (r->api == API_LLAMA && r->n_probs > 0) {
            alts = 1 + r->n_probs;
            per_tok += alts * ANS_ENTRY;
        } else if (r->api == API_CHAT && r->chat_logprobs) {
            alts = 1 + t->n_top;
            per_tok += alts * ANS_ENTRY;
        } else if (r->api == API_OPENAI && r->logprobs >= 0) {
            alts = 1 + t->n_top;
            per_tok += ANS_TOKEN + t->n_top * ANS_LEGACY;
        }
        double choice = (double)t->max_tokens * per_tok;
        if (r->echo) choice += (double)t->n_prompt * per_tok;
        total += t->n * choice;
        if (t->max_tokens > longest) longest = t->max_tokens;
        n = t->n;
    }
    if (total <= (double)s->lim.max_answer) return;
    char probs[48] = "";
    if (alts > 0) snprintf(probs, sizeof probs, " x %d probabilities", (int)alts);
    serve_fail(p,
               "the answer could reach ~%.0f MiB of JSON (%d prompt%s x %d choice%s x %d "
               "tokens%s%s), over the limit of %llu MiB (--max-answer-mb)",
               total / (1 << 20), r->n_tasks, r->n_tasks == 1 ? "" : "s", n, n == 1 ? "" : "s",
               (int)longest, probs, r->echo ? ", with the prompt echoed" : "",
               (unsigned long long)(s->lim.max_answer >> 20));
}

bool serve_parse_request(struct server *s, const cJSON *body, enum task_api api,
                         struct serve_request *r, char *msg, size_t msg_len) {
    memset(r, 0, sizeof *r);
    r->api = api;
    r->logprobs = -1;
    struct parse p = {body, "", false, 0};
    const bool llama = api == API_LLAMA, chat = api == API_CHAT;
    struct task *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(msg, msg_len, "out of memory");
        return false;
    }
    t->refs = 1;
    t->api = api;
    r->tasks[0] = t;
    r->n_tasks = 1;
    if (!cJSON_IsObject(body)) serve_fail(&p, "the body must be a JSON object");
    serve_check_fields(&p, api);

    /* the prompt(s) */
    const cJSON *plist[SERVE_MAX_PROMPTS] = {NULL};
    int n_prompts = 1;
    if (api == API_MESSAGES) {
        serve_messages_prompt(&p, s, t);
        serve_check_prompt_len(&p, s, t, "the rendered messages");
    } else if (chat) {
        serve_chat_prompt(&p, s, t);
        serve_check_prompt_len(&p, s, t, "the rendered chat");
    } else {
        n_prompts = serve_prompts_field(&p, plist, llama);
        if (n_prompts > 0) {
            serve_one_prompt(&p, s, plist[0], true, &t->prompt, &t->n_prompt,
                             n_prompts > 1 ? "\"prompt\"[0]" : "\"prompt\"");
            serve_check_prompt_len(&p, s, t, n_prompts > 1 ? "\"prompt\"[0]" : "the prompt");
        }
    }

    /* lengths and choices */
    const double max_n = s->lim.n_parallel < SERVE_MAX_N ? s->lim.n_parallel : SERVE_MAX_N;
    const int32_t def_len = s->lim.n_predict < 0 || s->lim.n_predict > s->lim.max_tokens
                                ? s->lim.max_tokens
                                : s->lim.n_predict;
    if (llama) {
        const double n_predict = num_field(&p, "n_predict", -2, -1, s->lim.max_tokens, true);
        t->max_tokens = n_predict == -2 ? def_len
                        : n_predict < 0 ? s->lim.max_tokens
                                        : (int32_t)n_predict;
        t->n = (int)num_field(&p, "n_cmpl", 1, 1, max_n, true);
    } else {
        const double mt = num_field(&p, "max_tokens", -1, 0, s->lim.max_tokens, true);
        const double mct =
            chat ? num_field(&p, "max_completion_tokens", -1, 0, s->lim.max_tokens, true) : -1;
        /* no length: -n, else OpenAI's default of 16 for legacy completions; a chat runs to
           the server's limit, as llama-server's */
        const int32_t none = s->lim.n_predict >= 0 ? def_len : chat ? s->lim.max_tokens : 16;
        t->max_tokens = mct >= 0 ? (int32_t)mct : mt >= 0 ? (int32_t)mt : none;
        t->n = (int)num_field(&p, "n", 1, 1, max_n, true);
        if (!chat) {
            const double best_of = num_field(&p, "best_of", t->n, 1, max_n, true);
            if (!p.bad && best_of != t->n)
                serve_fail(&p, "\"best_of\" must equal \"n\": recur does not rank extra choices");
        }
    }

    /* sampling */
    struct recur_sampler_params sp = recur_sampler_default_params();
    if (llama) {
        sp.temp = (float)num_field(&p, "temperature", 0.8, -100, 100, false);
        sp.top_k = (int32_t)num_field(&p, "top_k", 40, 0, 1e9, true);
        sp.top_p = (float)num_field(&p, "top_p", 0.95, 0, 1, false);
        sp.min_p = (float)num_field(&p, "min_p", 0.05, 0, 1, false);
        sp.penalty_present = (float)num_field(&p, "presence_penalty", 0, -100, 100, false);
        sp.penalty_freq = (float)num_field(&p, "frequency_penalty", 0, -100, 100, false);
        serve_samplers_field(&p, &sp);
        const double slot = num_field(&p, "id_slot", -1, -1, 1e9, true);
        if (!p.bad && slot != -1)
            serve_fail(&p, "\"id_slot\": only -1 (any free slot) is supported; the scheduler "
                           "places requests");
    } else {
        sp.temp = (float)num_field(&p, "temperature", 1.0, 0, 2, false);
        sp.top_p = (float)num_field(&p, "top_p", 1.0, 0, 1, false);
        sp.top_k = (int32_t)num_field(&p, "top_k", 0, 0, 1e9, true);
        sp.min_p = (float)num_field(&p, "min_p", 0.0, 0, 1, false);
        sp.penalty_present = (float)num_field(&p, "presence_penalty", 0, -2, 2, false);
        sp.penalty_freq = (float)num_field(&p, "frequency_penalty", 0, -2, 2, false);
    }
    /* llama-server's, which it takes on the OpenAI endpoints too */
    sp.penalty_repeat = (float)num_field(&p, "repeat_penalty", 1.0, 1e-6, 100, false);
    const double last_n = num_field(&p, "repeat_last_n", 64, -1, 1e9, true);
    /* -1: the whole context, i.e. everything this sequence can hold */
    sp.penalty_last_n = last_n < 0 ? s->lim.max_prompt + s->lim.max_tokens : (int32_t)last_n;
    t->ignore_eos = bool_field(&p, "ignore_eos", false);
    const double seed = num_field(&p, "seed", -1, -9007199254740991.0, 9007199254740991.0, true);
    /* no seed (or llama-server's -1): one drawn from the OS, below 2^49 so that the number
       generation_settings reports is exact (cJSON writes up to 15 digits exactly) and, sent
       back as "seed", replays the text */
    uint64_t drawn = 0;
    if (seed == -1 && getrandom(&drawn, sizeof drawn, GRND_NONBLOCK) != (ssize_t)sizeof drawn)
        serve_fail(&p, "could not draw a random seed (%s); give \"seed\"", strerror(errno));
    sp.seed = seed == -1 ? drawn & ((UINT64_C(1) << 49) - 1) : (uint64_t)(int64_t)seed;
    t->sampling = sp;
    t->cache_prompt = bool_field(&p, "cache_prompt", true);
    r->stream = bool_field(&p, "stream", false);
    stream_options_field(&p, r);
    r->timings_per_token = bool_field(&p, "timings_per_token", false);
    r->return_progress = bool_field(&p, "return_progress", false);
    stop_field(&p, t);
    serve_logit_bias_field(&p, s, t, llama);
    if (t->ignore_eos) ignore_eos_bias(&p, s, t);
    serve_grammar_field(&p, s, t);
    if (chat) serve_tools_field(&p, s, t);

    /* what the answer reports */
    if (llama) {
        r->n_probs = (int32_t)num_field(&p, "n_probs", 0, 0, SERVE_MAX_PROBS, true);
        r->post_sampling = bool_field(&p, "post_sampling_probs", false);
        r->return_tokens = bool_field(&p, "return_tokens", false);
        response_fields_field(&p, r);
        if (r->n_probs > 0 && r->post_sampling)
            t->n_post = r->n_probs;
        else if (r->n_probs > 0) {
            t->logprobs = true;
            t->n_top = r->n_probs;
        }
    } else if (chat) {
        r->chat_logprobs = bool_field(&p, "logprobs", false);
        const double top = num_field(&p, "top_logprobs", -1, 0, SERVE_MAX_TOP, true);
        if (!p.bad && top >= 0 && !r->chat_logprobs)
            serve_fail(&p, "\"top_logprobs\" needs \"logprobs\": true");
        t->logprobs = r->chat_logprobs;
        t->n_top = top > 0 ? (int32_t)top : 0;
    } else {
        r->logprobs = (int)num_field(&p, "logprobs", -1, 0, 5, true);
        r->echo = bool_field(&p, "echo", false);
        t->logprobs = r->logprobs >= 0;
        t->n_top = r->logprobs > 0 ? r->logprobs : 0;
        t->prompt_logprobs = r->echo && t->logprobs;
    }

    /* the other prompts: the same settings */
    for (int i = 1; i < n_prompts && !p.bad; i++) {
        struct task *c = clone_task(t);
        if (!c) {
            serve_fail(&p, "out of memory");
            break;
        }
        r->tasks[r->n_tasks++] = c;
        char what[32];
        snprintf(what, sizeof what, "\"prompt\"[%d]", i);
        serve_one_prompt(&p, s, plist[i], true, &c->prompt, &c->n_prompt, what);
        serve_check_prompt_len(&p, s, c, what);
    }
    answer_size_check(&p, s, r);
    /* echo's text, and /completion's "prompt" */
    for (int i = 0; i < r->n_tasks && (r->echo || llama) && !p.bad; i++)
        prompt_text(&p, s, r->tasks[i]);
    if (llama && !p.bad && !(r->settings = settings_json(s, t, r, serve_field(&p, "samplers"))))
        serve_fail(&p, "out of memory");
    if (p.bad) snprintf(msg, msg_len, "%s", p.msg);
    if (p.bad) r->over_ctx = p.over_ctx;
    return !p.bad;
}

bool serve_parse_completion(struct server *s, const cJSON *body, bool llama, struct task *t,
                            bool *stream, char *msg, size_t msg_len) {
    struct serve_request r;
    const bool ok = serve_parse_request(s, body, llama ? API_LLAMA : API_OPENAI, &r, msg, msg_len);
    if (ok) { /* the first task's fields and allocations move into t */
        *t = *r.tasks[0];
        free(r.tasks[0]);
        r.tasks[0] = NULL;
        *stream = r.stream;
    }
    serve_request_free(s, &r);
    return ok;
}

void serve_request_free(struct server *s, struct serve_request *r) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < r->n_tasks; i++)
        if (r->tasks[i]) {
            r->tasks[i]->park = NULL;
            serve_task_release(s, r->tasks[i]);
        }
    pthread_mutex_unlock(&s->mu);
    r->n_tasks = 0;
    cJSON_Delete(r->response_fields);
    cJSON_Delete(r->settings);
    serve_responses_req_free(r->resp);
    r->resp = NULL;
    serve_think_stream_free(&r->msg_think);
    r->response_fields = r->settings = NULL;
}

/* llama-server's answer to a prompt that does not fit the context: a 400 whose error has type
 * "exceed_context_size_error" and the numbers a client needs to shorten it, n_prompt_tokens
 * and n_ctx (-c). */
static enum MHD_Result send_over_ctx(const struct server *s, struct MHD_Connection *conn,
                                     int32_t n_prompt, const char *msg) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", "exceed_context_size_error");
    cJSON_AddNumberToObject(e, "code", 400);
    cJSON_AddNumberToObject(e, "n_prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(e, "n_ctx", s->lim.n_ctx);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return serve_send_text(conn, 400, "application/json", text, NULL);
}

struct serve_request *serve_request_new(struct server *s, struct MHD_Connection *conn,
                                        const struct serve_req *rq, enum task_api api,
                                        enum MHD_Result *answered) {
    struct serve_request *r = malloc(sizeof *r);
    if (!r) {
        *answered = serve_send_error(conn, 500, "server_error", "out of memory");
        return NULL;
    }
    char msg[200];
    if (!serve_parse_request(s, rq->body, api, r, msg, sizeof msg)) {
        const int32_t over = r->over_ctx;
        serve_request_free(s, r);
        free(r);
        *answered = over && api != API_MESSAGES
                        ? send_over_ctx(s, conn, over, msg)
                        : serve_send_error(conn, 400, "invalid_request_error", msg);
        return NULL;
    }
    for (int i = 0; i < r->n_tasks; i++) r->tasks[i]->tenant = rq->tenant;
    return r;
}

enum MHD_Result serve_handle_completion(struct server *s, struct MHD_Connection *conn,
                                        const struct serve_req *rq, enum task_api api) {
    enum MHD_Result answered;
    if (s->embedding) /* llama-server's answer and words */
        return serve_send_error(conn, 501, "not_supported_error",
                                "This server does not support completions. Start it without "
                                "`--embeddings`");
    struct serve_request *r = serve_request_new(s, conn, rq, api, &answered);
    return r ? serve_answer(s, conn, r, rq->cont) : answered;
}
