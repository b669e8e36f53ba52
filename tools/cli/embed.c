/*
 * recur embed: the embeddings of texts, as llama.cpp's llama-embedding prints them. The prompt
 * (-p or -f) is split at --embd-separator (default a newline) into inputs; every input is
 * decoded whole in one batch on its own sequence, as many inputs per decode as --batch-size
 * holds, and pooled as --pooling says (enum recur_pooling_type: last by default). Every
 * printed vector is normalised as --embd-normalize says (llama-embedding's rule: with pooling
 * none each token's vector too).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

enum out_format { OUT_TEXT, OUT_ARRAY, OUT_JSON, OUT_JSON_PLUS, OUT_RAW };

static const struct {
    const char *name;
    enum out_format f;
} formats[] = {{"", OUT_TEXT},
               {"array", OUT_ARRAY},
               {"json", OUT_JSON},
               {"json+", OUT_JSON_PLUS},
               {"raw", OUT_RAW}};

/* The inputs: text split at sep, each tokenized. */
struct inputs {
    recur_token **tok;
    int32_t *n;
    int32_t count;
};

static void inputs_free(struct inputs *in) {
    for (int32_t i = 0; i < in->count; i++) free(in->tok[i]);
    free(in->tok);
    free(in->n);
}

static bool split_inputs(const struct recur_model *model, const char *text, const char *sep,
                         uint32_t n_batch, struct inputs *in) {
    const size_t ls = strlen(sep);
    int32_t most = 1;
    for (const char *p = strstr(text, sep); p; p = strstr(p + ls, sep)) most++;
    in->tok = calloc((size_t)most, sizeof *in->tok);
    in->n = calloc((size_t)most, sizeof *in->n);
    if (!in->tok || !in->n) {
        fprintf(stderr, "recur embed: out of memory\n");
        return false;
    }
    for (const char *at = text;;) {
        const char *end = strstr(at, sep);
        const size_t len = end ? (size_t)(end - at) : strlen(at);
        /* a trailing separator (a file's last newline) ends the text, not an empty input */
        if (!(len == 0 && !end && in->count > 0)) {
            if (len == 0) {
                fprintf(stderr, "recur embed: input %d is empty\n", in->count);
                return false;
            }
            int32_t n = 0;
            recur_token *t = gen_tokenize(model, at, len, &n);
            if (!t) return false;
            in->tok[in->count] = t;
            in->n[in->count++] = n;
            if ((uint32_t)n > n_batch) {
                fprintf(stderr,
                        "recur embed: input %d has %d tokens, more than --batch-size %u: an input "
                        "is decoded whole in one batch\n",
                        in->count - 1, n, n_batch);
                return false;
            }
        }
        if (!end) break;
        at = end + ls;
    }
    return true;
}

/* Decodes the inputs, as many per batch as fit, into rows (n_rows x E floats, normalised):
 * one per input pooled, one per token with pooling none. */
static bool embed_all(struct recur_context *ctx, const struct inputs *in, int32_t E, int32_t norm,
                      float *rows) {
    const bool none = recur_pooling_type(ctx) == RECUR_POOLING_TYPE_NONE;
    const uint32_t n_batch = recur_n_batch(ctx), n_seq = recur_n_seq_max(ctx);
    struct recur_batch b = recur_batch_init((int32_t)n_batch, 0, 1);
    if (!b.pos) {
        fprintf(stderr, "recur embed: %s\n", recur_last_error());
        return false;
    }
    int32_t next = 0, out = 0;
    bool ok = true;
    while (ok && next < in->count) {
        recur_memory_clear(recur_get_memory(ctx), false);
        b.n_tokens = 0;
        const int32_t first = next;
        while (next < in->count && (uint32_t)(next - first) < n_seq &&
               (uint32_t)(b.n_tokens + in->n[next]) <= n_batch) {
            const recur_seq_id s = next - first;
            for (int32_t i = 0; i < in->n[next]; i++)
                recur_batch_add(&b, in->tok[next][i], i, &s, 1, none);
            next++;
        }
        const int32_t rc = recur_decode(ctx, b);
        if (rc != 0) {
            fprintf(stderr, "recur embed: decoding inputs %d..%d failed (%d): %s%s\n", first,
                    next - 1, rc, recur_last_error(),
                    rc == 1 ? " (no room in a hybrid model's attention cache: raise -c)" : "");
            ok = false;
            break;
        }
        for (int32_t k = first, row = 0; k < next && ok; k++) {
            for (int32_t i = 0; i < (none ? in->n[k] : 1); i++) {
                const float *e = none ? recur_get_embeddings_ith(ctx, row++)
                                      : recur_get_embeddings_seq(ctx, k - first);
                if (!e) {
                    fprintf(stderr, "recur embed: %s\n", recur_last_error());
                    ok = false;
                    break;
                }
                gen_embd_normalize(e, rows + (size_t)out++ * (size_t)E, E, norm);
            }
        }
    }
    recur_batch_free(b);
    return ok;
}

static double cosine(const float *a, const float *b, int32_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int32_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* v's values separated by sep: fixed (the text format's %9.6f) or exact (%.9g, a float's
 * every digit, for programs). */
static void print_vec(const float *v, int32_t E, bool fixed, const char *sep) {
    for (int32_t e = 0; e < E; e++) {
        if (e) fputs(sep, stdout);
        if (fixed)
            printf("%9.6f", (double)v[e]);
        else
            printf("%.9g", (double)v[e]);
    }
}

static void print_rows(enum out_format f, const float *rows, int32_t n_rows, int32_t E) {
    if (f == OUT_TEXT || f == OUT_RAW) {
        for (int32_t r = 0; r < n_rows; r++) {
            if (f == OUT_TEXT) printf("embedding %d: ", r);
            print_vec(rows + (size_t)r * (size_t)E, E, f == OUT_TEXT, " ");
            printf("\n");
        }
        return;
    }
    if (f == OUT_ARRAY) {
        printf("[");
        for (int32_t r = 0; r < n_rows; r++) {
            printf(r ? ",[" : "[");
            print_vec(rows + (size_t)r * (size_t)E, E, false, ",");
            printf("]");
        }
        printf("]\n");
        return;
    }
    printf("{\n  \"object\": \"list\",\n  \"data\": [\n");
    for (int32_t r = 0; r < n_rows; r++) {
        printf("    {\"object\": \"embedding\", \"index\": %d, \"embedding\": [", r);
        print_vec(rows + (size_t)r * (size_t)E, E, false, ",");
        printf("]}%s\n", r + 1 < n_rows ? "," : "");
    }
    printf("  ]");
    if (f == OUT_JSON_PLUS) {
        printf(",\n  \"cosineSimilarity\": [\n");
        for (int32_t a = 0; a < n_rows; a++) {
            printf("    [");
            for (int32_t b = 0; b < n_rows; b++)
                printf("%s%.6f", b ? ", " : "",
                       cosine(rows + (size_t)a * (size_t)E, rows + (size_t)b * (size_t)E, E));
            printf("]%s\n", a + 1 < n_rows ? "," : "");
        }
        printf("  ]");
    }
    printf("\n}\n");
}

int cmd_embed(int argc, char **argv) {
    struct gen_opts o;
    int st = gen_parse(argc, argv, GEN_EMBED,
                       "Prints the embeddings of the prompt's inputs (split at --embd-separator), "
                       "as llama-embedding: the final hidden state after the output norm, pooled "
                       "per input (--pooling) and normalised (--embd-normalize).",
                       &o, NULL);
    if (st >= 0) return st;
    enum out_format fmt = OUT_TEXT;
    bool known = false;
    const char *fname = o.embd_output_format ? o.embd_output_format : "";
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (strcmp(fname, formats[i].name) == 0) {
            fmt = formats[i].f;
            known = true;
        }
    if (!known) {
        fprintf(stderr,
                "recur embed: --embd-output-format: '%s' is not '', array, json, json+ or raw\n",
                fname);
        return TOOL_USAGE;
    }
    size_t len = 0;
    char *text = gen_prompt_text(&o, &len);
    if (!text) return TOOL_FAIL;
    struct recur_model_params mp = recur_model_default_params();
    mp.use_mmap = !o.no_mmap;
    mp.repack = !o.no_repack;
    struct recur_model *model = recur_model_load_from_file(o.model, mp);
    if (!model) {
        fprintf(stderr, "recur embed: %s\n", recur_last_error());
        free(text);
        return TOOL_FAIL;
    }
    struct inputs in = {0};
    int ret = TOOL_FAIL;
    struct recur_context *ctx = NULL;
    float *rows = NULL;
    if (!split_inputs(model, text, o.embd_separator ? o.embd_separator : "\n", o.n_batch, &in))
        goto done;
    struct recur_context_params cp = gen_context_params(&o, 1);
    cp.n_seq_max = (uint32_t)(in.count < 64 ? in.count : 64); /* inputs decoded at once */
    cp.embeddings = true;
    cp.pooling_type = (enum recur_pooling_type)gen_pooling(o.pooling);
    if (!(ctx = recur_init_from_model(model, cp))) {
        fprintf(stderr, "recur embed: %s\n", recur_last_error());
        goto done;
    }
    const int32_t E = recur_model_n_embd(model);
    int64_t n_rows = 0;
    for (int32_t k = 0; k < in.count; k++)
        n_rows += cp.pooling_type == RECUR_POOLING_TYPE_NONE ? in.n[k] : 1;
    if (!(rows = malloc(sizeof(float) * (size_t)n_rows * (size_t)E))) {
        fprintf(stderr, "recur embed: out of memory for %lld embeddings\n", (long long)n_rows);
        goto done;
    }
    if (!embed_all(ctx, &in, E, o.embd_normalize, rows)) goto done;
    print_rows(fmt, rows, (int32_t)n_rows, E);
    ret = TOOL_OK;
done:
    free(rows);
    inputs_free(&in);
    recur_free(ctx);
    recur_model_free(model);
    free(text);
    return ret;
}
