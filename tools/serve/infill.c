/*
 * recur serve: POST /infill, llama-server's code infilling. The request's text is put around
 * the model's fill-in-the-middle tokens (recur_token_fim_*), and those token ids are run as a
 * /completion: every /completion field works the same, and the answer has its shape.
 *
 * The prompt, in the order llama-server's format_prompt_infill makes it (facts from its
 * source; its README's picture puts `prompt` after MID, its code after the prefix, and clients
 * such as llama.vim send the text before the cursor there):
 *
 *   [extra] [BOS] PRE input_prefix prompt SUF input_suffix MID
 *   [extra] [BOS] SUF input_suffix PRE input_prefix prompt MID      (--spm-infill)
 *
 * extra is input_extra's files: REP "myproject\n" when the model has a FIM_REP token, then per
 * file SEP filename "\n" when it has FIM_SEP (filename default "tmp"), else the separator
 * "\n\n--- snippet ---\n\n", then the file's text; after them SEP "filename\n" when it has
 * FIM_SEP. BOS is there when the model adds one to a prompt. The texts are tokenized as text
 * (a special token's text stays text), except `prompt`, whose special tokens are parsed, as in
 * llama-server.
 *
 * Unlike llama-server, nothing is cut to fit a batch (it keeps 3/4 of --batch-size of the
 * prefix, the rest for the suffix, and the extra context only where -c leaves room): a
 * recurrent model reads a prompt in as many batches as it takes, and a prompt past the limits
 * is refused by name, as /completion refuses it, rather than silently shortened.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

/* The prompt being assembled. */
struct toks {
    recur_token *v;
    int32_t n, cap;
};

static void push(struct parse *p, struct toks *t, recur_token tok) {
    if (p->bad) return;
    if (t->n == t->cap) {
        const int32_t cap = 2 * t->cap + 64;
        recur_token *g = realloc(t->v, sizeof *g * (size_t)cap);
        if (!g) {
            serve_fail(p, "out of memory");
            return;
        }
        t->v = g;
        t->cap = cap;
    }
    t->v[t->n++] = tok;
}

/* text's tokens after t's, special tokens parsed only with `special`; what names the field. */
static void push_text(struct parse *p, struct server *s, struct toks *t, const char *text,
                      bool special, const char *what) {
    if (p->bad || !serve_check_length(p, s, text, strlen(text), what)) return;
    if (!serve_tokenize_into(s, text, false, special, &t->v, &t->n, &t->cap))
        serve_fail(p, "%s could not be tokenized", what);
}

/* A string or token field (input_prefix, input_suffix: a string, or token ids and strings as a
 * /completion prompt, as llama-server takes them) into *out, without BOS. */
static void text_field(struct parse *p, struct server *s, const char *name, struct toks *out) {
    char what[32];
    snprintf(what, sizeof what, "\"%s\"", name);
    const cJSON *f = serve_field(p, name);
    if (p->bad) return;
    if (!f) {
        serve_fail(p, "%s is required", what);
        return;
    }
    serve_one_prompt(p, s, f, false, &out->v, &out->n, what);
    out->cap = out->n; /* what it surely holds (serve_one_prompt keeps its own count) */
}

/* input_extra: [{"filename": string (optional), "text": string}, ...] into *out as the header
 * comment says. */
static void extra_field(struct parse *p, struct server *s, struct toks *out) {
    const recur_token rep = recur_token_fim_rep(s->model), sep = recur_token_fim_sep(s->model);
    const cJSON *f = serve_field(p, "input_extra");
    if (p->bad) return;
    if (f && !cJSON_IsArray(f)) {
        serve_fail(p, "\"input_extra\" must be an array of {\"filename\": string, \"text\": "
                      "string}");
        return;
    }
    if (rep >= 0) {
        push(p, out, rep);
        push_text(p, s, out, "myproject\n", false, "the project's name");
    }
    int i = 0;
    for (const cJSON *e = f ? f->child : NULL; e && !p->bad; e = e->next, i++) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "text");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "filename");
        for (const cJSON *k = cJSON_IsObject(e) ? e->child : NULL; k; k = k->next)
            if (strcmp(k->string, "text") != 0 && strcmp(k->string, "filename") != 0) {
                serve_fail(p,
                           "\"input_extra\"[%d] has the field \"%s\": only \"filename\" and "
                           "\"text\" are known",
                           i, k->string);
                return;
            }
        if (!cJSON_IsObject(e) || !cJSON_IsString(text)) {
            serve_fail(p, "\"input_extra\"[%d].text must be a string", i);
            return;
        }
        if (name && !cJSON_IsString(name)) {
            serve_fail(p, "\"input_extra\"[%d].filename must be a string", i);
            return;
        }
        char what[48];
        snprintf(what, sizeof what, "\"input_extra\"[%d]", i);
        if (sep >= 0) {
            const char *fn = name ? name->valuestring : "tmp";
            char *line = malloc(strlen(fn) + 2);
            if (!line) {
                serve_fail(p, "out of memory");
                return;
            }
            strcpy(line, fn);
            strcat(line, "\n");
            push(p, out, sep);
            push_text(p, s, out, line, false, what);
            free(line);
        } else {
            push_text(p, s, out, "\n\n--- snippet ---\n\n", false, what);
        }
        push_text(p, s, out, text->valuestring, false, what);
    }
    if (sep >= 0) {
        push(p, out, sep);
        push_text(p, s, out, "filename\n", false, "the file's name");
    }
}

/* Appends b's tokens to a. */
static void append(struct parse *p, struct toks *a, const struct toks *b) {
    for (int32_t i = 0; i < b->n && !p->bad; i++) push(p, a, b->v[i]);
}

/* The infill prompt of the request body (header comment) into *out. */
static void assemble(struct parse *p, struct server *s, struct toks *out) {
    struct toks prefix = {0}, suffix = {0}, prompt = {0}, bos = {0};
    text_field(p, s, "input_prefix", &prefix);
    text_field(p, s, "input_suffix", &suffix);
    const cJSON *pf = serve_field(p, "prompt");
    if (!p->bad && pf && !cJSON_IsString(pf)) serve_fail(p, "\"prompt\" must be a string");
    if (!p->bad && pf) push_text(p, s, &prompt, pf->valuestring, true, "\"prompt\"");
    extra_field(p, s, out);
    /* recur.h has no add_bos getter: nothing, tokenized with add_special, is exactly the BOS
       the model puts before a prompt, or nothing */
    if (!p->bad && !serve_tokenize_into(s, "", true, false, &bos.v, &bos.n, &bos.cap))
        serve_fail(p, "out of memory");
    append(p, out, &bos);
    const recur_token pre = recur_token_fim_pre(s->model), suf = recur_token_fim_suf(s->model);
    if (s->spm_infill) {
        push(p, out, suf);
        append(p, out, &suffix);
    }
    push(p, out, pre);
    append(p, out, &prefix);
    append(p, out, &prompt);
    if (!s->spm_infill) {
        push(p, out, suf);
        append(p, out, &suffix);
    }
    push(p, out, recur_token_fim_mid(s->model));
    free(prefix.v);
    free(suffix.v);
    free(prompt.v);
    free(bos.v);
}

enum MHD_Result serve_infill(struct server *s, struct MHD_Connection *conn,
                             const struct serve_req *rq) {
    /* llama-server's check and words: 501, each missing token named */
    char missing[96] = "";
    if (recur_token_fim_pre(s->model) < 0) strcat(missing, "prefix token is missing. ");
    if (recur_token_fim_suf(s->model) < 0) strcat(missing, "suffix token is missing. ");
    if (recur_token_fim_mid(s->model) < 0) strcat(missing, "middle token is missing. ");
    if (missing[0]) {
        char msg[160];
        snprintf(msg, sizeof msg, "Infill is not supported by this model: %s", missing);
        return serve_send_error(conn, 501, "not_supported_error", msg);
    }
    /* the /completion request: the same body, the infill fields replaced by the prompt's ids
       (a prompt of ids gets no BOS there: it is in t where the model wants one); its other
       fields are /completion's, checked first so that a stray one is named with /infill */
    static const char *const infill_fields[] = {"input_prefix", "input_suffix", "input_extra",
                                                "prompt"};
    struct parse p = {rq->body, "", false, 0};
    cJSON *body = cJSON_IsObject(rq->body) ? cJSON_Duplicate(rq->body, true) : NULL, *ids = NULL;
    if (!cJSON_IsObject(rq->body)) serve_fail(&p, "the body must be a JSON object");
    if (body) {
        for (size_t i = 0; i < sizeof infill_fields / sizeof infill_fields[0]; i++)
            cJSON_DeleteItemFromObjectCaseSensitive(body, infill_fields[i]);
        struct parse rest = {body, "", false, 0};
        serve_check_llama_fields(&rest, "/infill");
        if (rest.bad) serve_fail(&p, "%s", rest.msg);
    }
    struct toks t = {0};
    if (body) assemble(&p, s, &t);
    if (!p.bad && body && (ids = cJSON_CreateIntArray(t.v, t.n)) &&
        !cJSON_AddItemToObject(body, "prompt", ids)) {
        cJSON_Delete(ids);
        ids = NULL;
    }
    free(t.v);
    if (p.bad || !ids) {
        cJSON_Delete(body);
        return p.bad ? serve_send_error(conn, 400, "invalid_request_error", p.msg)
                     : serve_send_error(conn, 500, "server_error", "out of memory");
    }
    struct serve_req completion = *rq;
    completion.body = body;
    const enum MHD_Result ret = serve_handle_completion(s, conn, &completion, API_LLAMA);
    cJSON_Delete(body);
    return ret;
}
