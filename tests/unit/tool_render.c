/*
 * tool_render: recur's tool-call functions on the command line, for test_chat_tools.py.
 *   tool_render render TEMPLATE ADD_ASS   stdin {"messages": [...], "tools": [...]} (OpenAI's
 *                                         shapes; arguments JSON text): the text on stdout
 *   tool_render parse TEMPLATE            stdin: generated text; stdout: {"content",
 *                                         "tool_calls": [{"name", "arguments"}]}
 *   tool_render grammar TEMPLATE CHOICE FUNCTION PARALLEL   stdin: tools; stdout: the GBNF
 *                                         (CHOICE auto|required|function; FUNCTION "-": none)
 *   tool_render match GRAMMAR_FILE        stdin: a text; exit 0 when the grammar accepts it
 *                                         whole, 3 when it does not
 *   tool_render format TEMPLATE           the tool family's name
 * TEMPLATE is a file holding a template's text when such a file exists, else a builtin name.
 * Exit 1 with recur_last_error() on stderr when recur refuses.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

#include "grammar/grammar.h"

static char *slurp(FILE *f) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (len + 1 >= cap) {
            char *t = realloc(s, cap = cap * 2 + 4096);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
        }
        s[len++] = (char)c;
    }
    if (!s && !(s = malloc(1))) return NULL;
    s[len] = '\0';
    return s;
}

static char *read_template(const char *arg) {
    FILE *f = fopen(arg, "rb");
    if (!f) {
        char *s = malloc(strlen(arg) + 1);
        if (s) strcpy(s, arg);
        return s;
    }
    char *s = slurp(f);
    fclose(f);
    return s;
}

static int fail(void) {
    fprintf(stderr, "tool_render: %s\n", recur_last_error());
    return 1;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int render(const char *tmpl, bool add_ass, const char *in) {
    cJSON *doc = cJSON_Parse(in);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(doc, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(doc, "tools");
    if (!cJSON_IsArray(msgs)) return 2;
    const size_t n = (size_t)cJSON_GetArraySize(msgs);
    struct recur_chat_tool_message *m = calloc(n + 1, sizeof *m);
    struct recur_tool_call *calls = calloc(256, sizeof *calls);
    if (!m || !calls) return 1;
    size_t i = 0, k = 0;
    for (const cJSON *x = msgs->child; x; x = x->next, i++) {
        m[i].role = str(x, "role");
        m[i].content = str(x, "content");
        m[i].tool_call_id = str(x, "tool_call_id");
        m[i].name = str(x, "name");
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(x, "tool_calls");
        m[i].tool_calls = &calls[k];
        for (const cJSON *c = tc ? tc->child : NULL; c && k < 256; c = c->next, k++) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            calls[k] =
                (struct recur_tool_call){str(c, "id"), str(fn, "name"), str(fn, "arguments")};
            m[i].n_tool_calls++;
        }
    }
    char *ts = tools ? cJSON_PrintUnformatted(tools) : NULL;
    int32_t ns = 0;
    const int32_t len =
        recur_chat_apply_template_tools(tmpl, m, n, ts, add_ass, NULL, 0, NULL, 0, &ns);
    if (len < 0) return fail();
    char *buf = malloc((size_t)len + 1);
    struct recur_text_span *sp = calloc((size_t)ns + 1, sizeof *sp);
    if (!buf || !sp ||
        recur_chat_apply_template_tools(tmpl, m, n, ts, add_ass, buf, len + 1, sp, ns, &ns) != len)
        return fail();
    for (int32_t j = 0; j < ns; j++) /* spans in order, inside the text */
        if (sp[j].off < 0 || sp[j].off + sp[j].len > len ||
            (j && sp[j].off < sp[j - 1].off + sp[j - 1].len)) {
            fprintf(stderr, "tool_render: span %d is out of order or place\n", j);
            return 1;
        }
    fwrite(buf, 1, (size_t)len, stdout);
    free(buf);
    free(sp);
    free(ts);
    free(m);
    free(calls);
    cJSON_Delete(doc);
    return 0;
}

static int parse(const char *tmpl, const char *in) {
    struct recur_tool_calls *r = recur_chat_parse_tool_calls(tmpl, in, strlen(in));
    if (!r) return fail();
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tool_calls");
    cJSON_AddStringToObject(o, "content", r->content);
    for (size_t i = 0; i < r->n_calls; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", r->calls[i].name);
        cJSON_AddStringToObject(c, "arguments", r->calls[i].arguments);
        cJSON_AddItemToArray(a, c);
    }
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    recur_tool_calls_free(r);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    char *in = slurp(stdin);
    if (!in) return 1;
    if (strcmp(argv[1], "match") == 0) {
        char *g = read_template(argv[2]);
        struct rgram *gr = g ? rgram_parse(g, strlen(g), "root") : NULL;
        struct rgram_state *st = gr ? rgram_state_new(gr) : NULL;
        if (!st) return fail();
        const bool ok = rgram_state_accept(st, in, strlen(in)) && rgram_state_complete(st);
        rgram_state_free(st);
        rgram_free(gr);
        free(g);
        free(in);
        return ok ? 0 : 3;
    }
    char *tmpl = read_template(argv[2]);
    int rc = 2;
    if (strcmp(argv[1], "render") == 0 && argc == 4)
        rc = render(tmpl, strcmp(argv[3], "1") == 0, in);
    else if (strcmp(argv[1], "parse") == 0)
        rc = parse(tmpl, in);
    else if (strcmp(argv[1], "format") == 0) {
        const char *f = recur_chat_tool_format(tmpl);
        rc = f ? (puts(f), 0) : fail();
    } else if (strcmp(argv[1], "grammar") == 0 && argc == 6) {
        const enum recur_tool_choice c =
            strcmp(argv[3], "required") == 0   ? RECUR_TOOL_CHOICE_REQUIRED
            : strcmp(argv[3], "function") == 0 ? RECUR_TOOL_CHOICE_FUNCTION
                                               : RECUR_TOOL_CHOICE_AUTO;
        bool lazy = false;
        char *g = recur_chat_tools_grammar(tmpl, in, c, strcmp(argv[4], "-") ? argv[4] : NULL,
                                           strcmp(argv[5], "1") == 0, &lazy);
        if (!g)
            rc = fail();
        else {
            fputs(g, stdout);
            free(g);
            rc = 0;
        }
    }
    free(tmpl);
    free(in);
    return rc;
}
