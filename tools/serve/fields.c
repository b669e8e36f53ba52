/*
 * recur serve's field tables (see api.h): every field of /v1/completions, /completion
 * and /v1/chat/completions is in its endpoint's table, as honoured, as accepted without
 * effect on the output (with why), or as refused unless it has its default value; a field in
 * no table is refused by name. Also the fields with their own grammar: logit_bias,
 * llama-server's samplers, and structured output (grammar, json_schema, response_format).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

/* ---- the field tables -------------------------------------------------------------------- */

enum field_kind {
    F_USED,     /* honoured: read below */
    F_HARMLESS, /* accepted: it cannot change the output (the table says why) */
    F_OFF_NUM,  /* a feature recur does not have: refused unless null or the number `off` */
    F_OFF_SET,  /* the same, refused unless null, false, "", [] or {} */
};

struct field {
    const char *name;
    enum field_kind kind;
    double off;
};

/* OpenAI's fields that identify or route a request and cannot change its completion:
 * safety_identifier (an end-user id for abuse monitoring), prompt_cache_key (a routing hint
 * for OpenAI's prompt cache; recur's cache is keyed by content) and service_tier (checked
 * below: only the tiers that change nothing) */
#define OPENAI_HARMLESS                                                                            \
    {"safety_identifier", F_HARMLESS, 0}, {"prompt_cache_key", F_HARMLESS, 0}, {                   \
        "service_tier", F_USED, 0                                                                  \
    }

/* OpenAI's legacy completions, and extensions llama-server also takes there */
static const struct field openai_fields[] = {
    {"prompt", F_USED, 0},
    {"max_tokens", F_USED, 0},
    {"temperature", F_USED, 0},
    {"top_p", F_USED, 0},
    {"n", F_USED, 0},
    {"best_of", F_USED, 0}, /* honoured when equal to n: no ranking of extra choices */
    {"stream", F_USED, 0},
    {"stream_options", F_USED, 0},
    {"logprobs", F_USED, 0},
    {"echo", F_USED, 0},
    {"stop", F_USED, 0},
    {"presence_penalty", F_USED, 0},
    {"frequency_penalty", F_USED, 0},
    {"logit_bias", F_USED, 0},
    {"seed", F_USED, 0},
    {"top_k", F_USED, 0},
    {"min_p", F_USED, 0},
    {"repeat_penalty", F_USED, 0}, /* llama-server's extensions, as on /completion */
    {"repeat_last_n", F_USED, 0},
    {"ignore_eos", F_USED, 0},
    {"timings_per_token", F_USED, 0},
    {"cache_prompt", F_USED, 0},
    {"response_format", F_USED, 0},
    {"grammar", F_USED, 0},
    {"json_schema", F_USED, 0},
    {"suffix", F_OFF_SET, 0},      /* insertion: recur has no fill-in-the-middle */
    {"model", F_HARMLESS, 0},      /* one model is served, whatever the name */
    {"user", F_HARMLESS, 0},       /* an end-user id for abuse monitoring */
    {"session_id", F_HARMLESS, 0}, /* routing only: the cache is keyed by content */
    OPENAI_HARMLESS,
    {"return_progress", F_USED, 0},
};

/* llama-server's /completion */
static const struct field llama_fields[] = {
    {"prompt", F_USED, 0},
    {"session_id", F_HARMLESS, 0}, /* routing only: the cache is keyed by content */
    {"n_predict", F_USED, 0},
    {"temperature", F_USED, 0},
    {"top_k", F_USED, 0},
    {"top_p", F_USED, 0},
    {"min_p", F_USED, 0},
    {"n_cmpl", F_USED, 0},
    {"stream", F_USED, 0},
    {"stop", F_USED, 0},
    {"repeat_penalty", F_USED, 0},
    {"repeat_last_n", F_USED, 0},
    {"presence_penalty", F_USED, 0},
    {"frequency_penalty", F_USED, 0},
    {"seed", F_USED, 0},
    {"ignore_eos", F_USED, 0},
    {"logit_bias", F_USED, 0},
    {"n_probs", F_USED, 0},
    {"post_sampling_probs", F_USED, 0},
    {"id_slot", F_USED, 0},
    {"cache_prompt", F_USED, 0},
    {"return_tokens", F_USED, 0},
    {"samplers", F_USED, 0},
    {"response_fields", F_USED, 0},
    {"dynatemp_range", F_OFF_NUM, 0},
    {"typical_p", F_OFF_NUM, 1},
    {"dry_multiplier", F_OFF_NUM, 0},
    {"xtc_probability", F_OFF_NUM, 0},
    {"mirostat", F_OFF_NUM, 0},
    {"top_n_sigma", F_OFF_NUM, -1},
    {"n_indent", F_OFF_NUM, 0},
    {"min_keep", F_OFF_NUM, 0},
    {"t_max_predict_ms", F_OFF_NUM, 0},
    {"grammar", F_USED, 0},
    {"json_schema", F_USED, 0},
    {"lora", F_OFF_SET, 0},
    {"timings_per_token", F_USED, 0},
    {"return_progress", F_USED, 0},
    /* parameters of samplers that are off (refused above unless off): no effect */
    {"dynatemp_exponent", F_HARMLESS, 0},
    {"dry_base", F_HARMLESS, 0},
    {"dry_allowed_length", F_HARMLESS, 0},
    {"dry_penalty_last_n", F_HARMLESS, 0},
    {"dry_sequence_breakers", F_HARMLESS, 0},
    {"xtc_threshold", F_HARMLESS, 0},
    {"mirostat_tau", F_HARMLESS, 0},
    {"mirostat_eta", F_HARMLESS, 0},
    /* a recurrent state has no window to shift or reuse chunks of */
    {"n_keep", F_HARMLESS, 0},
    {"n_cache_reuse", F_HARMLESS, 0},
    {"sse_ping_interval", F_HARMLESS, 0}, /* keep-alive comments: not part of the answer */
    {"model", F_HARMLESS, 0},
};

/* OpenAI's chat completions */
static const struct field chat_fields[] = {
    {"messages", F_USED, 0},
    {"parse_special_content", F_USED, 0}, /* recur's: control tokens typed in messages count */
    {"max_tokens", F_USED, 0},
    {"max_completion_tokens", F_USED, 0},
    {"temperature", F_USED, 0},
    {"top_p", F_USED, 0},
    {"n", F_USED, 0},
    {"stream", F_USED, 0},
    {"stream_options", F_USED, 0},
    {"stop", F_USED, 0},
    {"seed", F_USED, 0},
    {"presence_penalty", F_USED, 0},
    {"frequency_penalty", F_USED, 0},
    {"logprobs", F_USED, 0},
    {"top_logprobs", F_USED, 0},
    {"logit_bias", F_USED, 0},
    {"top_k", F_USED, 0},
    {"min_p", F_USED, 0},
    {"repeat_penalty", F_USED, 0}, /* llama-server's extensions, as on /completion */
    {"repeat_last_n", F_USED, 0},
    {"ignore_eos", F_USED, 0},
    {"timings_per_token", F_USED, 0},
    {"cache_prompt", F_USED, 0},
    {"add_generation_prompt", F_USED, 0},
    {"response_format", F_USED, 0},
    {"grammar", F_USED, 0},
    {"json_schema", F_USED, 0},
    {"tools", F_USED, 0}, /* toolcall.c */
    {"tool_choice", F_USED, 0},
    {"functions", F_OFF_SET, 0},
    {"function_call", F_OFF_SET, 0},
    {"store", F_OFF_SET, 0},
    {"model", F_HARMLESS, 0},      /* one model is served, whatever the name */
    {"user", F_HARMLESS, 0},       /* an end-user id for abuse monitoring */
    {"session_id", F_HARMLESS, 0}, /* routing only: the cache is keyed by content */
    {"metadata", F_HARMLESS, 0},   /* tags of stored completions (none are stored) */
    {"parallel_tool_calls", F_USED, 0},
    OPENAI_HARMLESS,
    {"return_progress", F_USED, 0},
    /* no effect: recur's templates have no reasoning switch (read below) */
    {"reasoning_effort", F_USED, 0},
    {"reasoning_format", F_USED, 0}, /* llama-server's: how <think> is returned (chat.c) */
};

static bool is_off_set(const cJSON *f) {
    return cJSON_IsNull(f) || cJSON_IsFalse(f) || (cJSON_IsString(f) && !f->valuestring[0]) ||
           ((cJSON_IsArray(f) || cJSON_IsObject(f)) && !f->child);
}

/* Every field of the body is in the table, and refused features are off. */
static void check_fields(struct parse *p, const struct field *tab, size_t n, const char *where) {
    if (p->bad) return;
    for (const cJSON *f = p->body->child; f; f = f->next) {
        const struct field *k = NULL;
        for (size_t i = 0; i < n && !k; i++)
            if (strcmp(tab[i].name, f->string) == 0) k = &tab[i];
        if (!k) {
            serve_fail(p, "unknown field \"%s\": %s does not take it", f->string, where);
            return;
        }
        if ((k->kind == F_OFF_NUM && !cJSON_IsNull(f) &&
             !(cJSON_IsNumber(f) && f->valuedouble == k->off)) ||
            (k->kind == F_OFF_SET && !is_off_set(f))) {
            if (k->kind == F_OFF_NUM)
                serve_fail(p, "\"%s\" is not supported by recur: only %g (off) is accepted",
                           f->string, k->off);
            else
                serve_fail(p, "\"%s\" is not supported by recur", f->string);
            return;
        }
    }
}

/* A field that must be a string of one of the listed values (NULL-ended), refused otherwise
 * with why. */
static void one_of(struct parse *p, const char *name, const char *const *ok, const char *why) {
    const cJSON *f = serve_field(p, name);
    if (p->bad || !f) return;
    for (int i = 0; ok[i]; i++)
        if (cJSON_IsString(f) && strcmp(f->valuestring, ok[i]) == 0) return;
    if (!cJSON_IsString(f))
        serve_fail(p, "\"%s\" must be a string", name);
    else
        serve_fail(p, "\"%s\": \"%.40s\" is not accepted: %s", name, f->valuestring, why);
}

/* service_tier: "auto" and "default" are what every request gets (recur serves one tier);
 * "flex", "scale" and "priority" ask for another latency or price, which recur does not have.
 * reasoning_effort: the levels of OpenAI and llama-server are accepted, as none can change a
 * completion here: llama-server hands the level to a Jinja template, and recur's chat templates
 * are builtin ones with no reasoning switch, nor does recur budget a reasoning phase. A value
 * that is no level (a typo) is refused. */
static void openai_choices(struct parse *p, enum task_api api) {
    static const char *const tiers[] = {"auto", "default", NULL};
    one_of(p, "service_tier", tiers,
           "recur serves one tier; \"auto\" and \"default\" are the ones accepted");
    if (api != API_CHAT) return;
    static const char *const efforts[] = {"none",  "minimal", "low",     "medium", "high",
                                          "xhigh", "max",     "default", NULL};
    one_of(p, "reasoning_effort", efforts,
           "it must be one of none, minimal, low, medium, high, xhigh, max, default");
}

void serve_check_llama_fields(struct parse *p, const char *where) {
    check_fields(p, llama_fields, sizeof llama_fields / sizeof llama_fields[0], where);
}

void serve_check_fields(struct parse *p, enum task_api api) {
    if (api == API_MESSAGES) return; /* its own table, in messages.c (serve_messages_prompt) */
    if (api == API_LLAMA)
        serve_check_llama_fields(p, "/completion");
    else if (api == API_CHAT)
        check_fields(p, chat_fields, sizeof chat_fields / sizeof chat_fields[0],
                     "/v1/chat/completions");
    else
        check_fields(p, openai_fields, sizeof openai_fields / sizeof openai_fields[0],
                     "/v1/completions");
    if (api != API_LLAMA) openai_choices(p, api);
}

/* logit_bias: OpenAI's object {"token id": bias -100..100}; /completion also takes
 * [[id or text, bias or false], ...] and {"id or text": bias or false} (false bans; text is
 * tokenized and every one of its tokens gets the bias). */
void serve_logit_bias_field(struct parse *p, struct server *s, struct task *t, bool llama) {
    const cJSON *f = serve_field(p, "logit_bias");
    if (p->bad || !f) return;
    if (!cJSON_IsObject(f) && !(llama && cJSON_IsArray(f))) {
        serve_fail(p, llama ? "\"logit_bias\" must be an array of [token, bias] pairs or an object"
                            : "\"logit_bias\" must be an object of token ids to biases");
        return;
    }
    const int32_t V = recur_model_n_vocab(s->model);
    int32_t cap = 0;
    int i = 0;
    for (const cJSON *e = f->child; e && !p->bad; e = e->next, i++) {
        const cJSON *key, *val;
        cJSON keyj = {0};
        if (cJSON_IsArray(f)) {
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) {
                serve_fail(p, "\"logit_bias\"[%d] must be a [token, bias] pair", i);
                return;
            }
            key = e->child;
            val = e->child->next;
        } else {
            keyj.type = cJSON_String;
            keyj.valuestring = e->string;
            key = &keyj;
            val = e;
        }
        float bias;
        if (cJSON_IsNumber(val) && isfinite(val->valuedouble) &&
            (llama || (val->valuedouble >= -100 && val->valuedouble <= 100)))
            bias = (float)val->valuedouble;
        else if (llama && cJSON_IsFalse(val))
            bias = -INFINITY;
        else {
            serve_fail(p, "\"logit_bias\": the bias of %s%s%s must be %s",
                       key->valuestring ? "\"" : "", key->valuestring ? key->valuestring : "entry",
                       key->valuestring ? "\"" : "",
                       llama ? "a number or false" : "a number from -100 to 100");
            return;
        }
        /* the tokens it applies to */
        recur_token one, *toks = &one;
        int32_t n_toks = 0, tcap = 0;
        recur_token *owned = NULL;
        if (cJSON_IsNumber(key)) {
            const double v = key->valuedouble;
            if (v != floor(v) || v < 0 || v >= V) {
                serve_fail(p, "\"logit_bias\"[%d]: %g is not a token id (0..%d)", i, v, V - 1);
                return;
            }
            one = (recur_token)v;
            n_toks = 1;
        } else if (cJSON_IsString(key)) {
            char *end = NULL;
            const long v = strtol(key->valuestring, &end, 10);
            if (key->valuestring[0] && end && *end == '\0') {
                if (v < 0 || v >= V) {
                    serve_fail(p, "\"logit_bias\": \"%s\" is not a token id (0..%d)",
                               key->valuestring, V - 1);
                    return;
                }
                one = (recur_token)v;
                n_toks = 1;
            } else if (llama && key->valuestring[0]) {
                if (!serve_tokenize_into(s, key->valuestring, false, false, &owned, &n_toks,
                                         &tcap)) {
                    free(owned);
                    serve_fail(p, "\"logit_bias\": \"%s\" could not be tokenized",
                               key->valuestring);
                    return;
                }
                toks = owned;
            } else {
                serve_fail(p, "\"logit_bias\": \"%s\" is not a token id", key->valuestring);
                return;
            }
        } else {
            serve_fail(p, "\"logit_bias\"[%d]: the token must be an id or a string", i);
            return;
        }
        if (t->n_bias + n_toks > cap) {
            cap = 2 * (t->n_bias + n_toks) + 8;
            struct recur_logit_bias *g = realloc(t->bias, sizeof *g * (size_t)cap);
            if (!g) {
                free(owned);
                serve_fail(p, "out of memory");
                return;
            }
            t->bias = g;
        }
        for (int32_t k = 0; k < n_toks; k++)
            t->bias[t->n_bias++] = (struct recur_logit_bias){toks[k], bias};
        free(owned);
    }
}

/* llama-server's samplers: the order recur's chain applies them in is fixed (penalties,
 * top_k, top_p, min_p, temperature), so a list is honoured when its samplers come in that
 * order; one left out is off. DRY, typical-p and XTC are accepted in the list only because
 * they are off (their parameters are refused otherwise). */
void serve_samplers_field(struct parse *p, struct recur_sampler_params *sp) {
    const cJSON *f = serve_field(p, "samplers");
    if (p->bad || !f) return;
    static const char *const order[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};
    static const char *const off[] = {"dry", "typ_p", "typical_p", "xtc", "top_n_sigma"};
    if (!cJSON_IsArray(f)) {
        serve_fail(p, "\"samplers\" must be an array of sampler names");
        return;
    }
    bool seen[5] = {false};
    int last = -1;
    for (const cJSON *e = f->child; e; e = e->next) {
        const char *name = cJSON_IsString(e) ? e->valuestring : "";
        int at = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(name, order[i]) == 0) at = i;
        bool is_off = false;
        for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) is_off |= strcmp(name, off[i]) == 0;
        if (is_off) continue;
        if (at < 0) {
            serve_fail(p, "\"samplers\": \"%s\" is not a sampler recur has", name);
            return;
        }
        if (at <= last) {
            serve_fail(p,
                       "\"samplers\": recur applies penalties, top_k, top_p, min_p, temperature "
                       "in that order, once each; \"%s\" is out of that order",
                       name);
            return;
        }
        seen[at] = true;
        last = at;
    }
    if (!seen[0]) sp->penalty_last_n = 0;
    if (!seen[1]) sp->top_k = 0;
    if (!seen[2]) sp->top_p = 1.0f;
    if (!seen[3]) sp->min_p = 0.0f;
    if (!seen[4] && sp->temp > 0.0f) sp->temp = 1.0f;
}

/* ---- structured output ------------------------------------------------------------------- */

/* Numbers of v (in place) as raw items that print the shortest text reading back as the same
   double: cJSON prints 15 digits, which turns zod's bound 9007199254740991 into
   9.00719925474099e+15 and moves the integer range. */
static bool exact_numbers(cJSON *v) {
    for (cJSON *x = v->child, *next; x; x = next) {
        next = x->next;
        if (!cJSON_IsNumber(x)) {
            if (!exact_numbers(x)) return false;
            continue;
        }
        char num[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, x->valuedouble);
            if (strtod(num, NULL) == x->valuedouble) break;
        }
        cJSON *raw = cJSON_CreateRaw(num);
        /* by key in an object, as only that sets the new item's key */
        if (!raw || !(cJSON_IsObject(v) ? cJSON_ReplaceItemInObjectCaseSensitive(v, x->string, raw)
                                        : cJSON_ReplaceItemViaPointer(v, x, raw))) {
            cJSON_Delete(raw);
            return false;
        }
    }
    return true;
}

/* The GBNF of a JSON schema (p fails with the converter's message, naming what). */
static char *schema_grammar(struct parse *p, const cJSON *schema, const char *what) {
    cJSON *copy = cJSON_Duplicate(schema, true);
    bool ok = copy && (cJSON_IsNumber(copy) || exact_numbers(copy));
    char *text = ok ? cJSON_PrintUnformatted(copy) : NULL;
    cJSON_Delete(copy);
    char *g = text ? recur_json_schema_to_grammar(text) : NULL;
    if (!g) serve_fail(p, "%s: %s", what, text ? recur_last_error() : "out of memory");
    free(text);
    return g;
}

void serve_grammar_field(struct parse *p, struct server *s, struct task *t) {
    if (p->bad) return;
    const cJSON *gr = serve_field(p, "grammar"), *js = serve_field(p, "json_schema"),
                *rf = serve_field(p, "response_format");
    if (cJSON_IsNull(gr) || (cJSON_IsString(gr) && gr->valuestring[0] == '\0')) gr = NULL;
    if (cJSON_IsNull(js)) js = NULL;
    if (cJSON_IsNull(rf)) rf = NULL;
    char *g = NULL;
    if (rf) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(type)) {
            serve_fail(p, "\"response_format\" must be an object with a \"type\"");
            return;
        }
        const char *ty = type->valuestring;
        const cJSON *inner = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(rf, "schema"); /* llama-server */
        if (strcmp(ty, "text") == 0) {
            rf = NULL;
        } else if (strcmp(ty, "json_object") == 0) {
            /* any JSON object, or llama-server's schema beside the type */
            if (schema) {
                g = schema_grammar(p, schema, "\"response_format\".\"schema\"");
            } else {
                cJSON *any = cJSON_CreateObject();
                if (any) cJSON_AddStringToObject(any, "type", "object");
                g = any ? schema_grammar(p, any, "\"response_format\"") : NULL;
                if (!any) serve_fail(p, "out of memory");
                cJSON_Delete(any);
            }
        } else if (strcmp(ty, "json_schema") == 0) {
            if (cJSON_IsObject(inner)) schema = cJSON_GetObjectItemCaseSensitive(inner, "schema");
            if (!schema) {
                serve_fail(p, "\"response_format\": type \"json_schema\" needs "
                              "\"json_schema\": {\"schema\": ...}");
                return;
            }
            g = schema_grammar(p, schema, "\"response_format\".\"json_schema\".\"schema\"");
        } else {
            serve_fail(p,
                       "\"response_format\": type \"%.40s\" is not one of \"text\", "
                       "\"json_object\", \"json_schema\"",
                       ty);
            return;
        }
    }
    if ((gr != NULL) + (js != NULL) + (rf != NULL) > 1) {
        free(g);
        serve_fail(p, "give one of \"grammar\", \"json_schema\" and \"response_format\"");
        return;
    }
    if (gr) {
        if (!cJSON_IsString(gr)) {
            serve_fail(p, "\"grammar\" must be a string of GBNF");
            return;
        }
        if (!(g = strdup(gr->valuestring))) serve_fail(p, "out of memory");
    } else if (js) {
        g = schema_grammar(p, js, "\"json_schema\"");
    }
    if (!g) return;
    /* checked here, so that a bad grammar is a 400 with its line and column, not a failed
       task */
    struct recur_sampler *check = recur_sampler_init_grammar(s->model, g, "root");
    if (!check) {
        serve_fail(p, "\"%s\": %s",
                   gr   ? "grammar"
                   : js ? "json_schema"
                        : "response_format",
                   recur_last_error());
        free(g);
        return;
    }
    recur_sampler_free(check);
    t->grammar = g;
}
