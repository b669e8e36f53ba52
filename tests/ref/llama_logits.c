/*
 * llama_logits: runs llama.cpp on a model and writes every token's logits, to check a
 * reference (granite_ref.py) against llama.cpp's own graph. Not part of recur's build; built
 * by hand against a llama.cpp build tree (docs in tests/ref/granite_ref.py):
 *
 *   cc -O2 -std=c11 -I$LLAMA/include -I$LLAMA/ggml/include tests/ref/llama_logits.c \
 *      -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o llama_logits
 *   ./llama_logits MODEL.gguf batch|step OUT.f32 1,2,3 [4,5 ...]
 *
 * Each token list is its own sequence from an empty memory. "batch" decodes a sequence in one
 * llama_decode call (the prompt path: a chunked scan, a causal mask over the batch); "step"
 * decodes it one token at a time (the generation path: states and K/V carried over). OUT holds,
 * for every sequence and token in order, n_vocab little-endian float32 logits. The K/V cache is
 * kept in f32, so that the comparison measures the graph and not the cache's f16 rounding.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* Parses "1,2,3" into a malloc'd array; NULL on a bad list. */
static llama_token *parse_tokens(const char *s, int *n) {
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    llama_token *t = malloc(sizeof *t * (size_t)cap);
    if (!t) return NULL;
    *n = 0;
    for (const char *p = s;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0) {
            free(t);
            return NULL;
        }
        t[(*n)++] = (llama_token)v;
        if (*end == '\0') break;
        if (*end != ',') {
            free(t);
            return NULL;
        }
        p = end + 1;
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[2], "batch") != 0 && strcmp(argv[2], "step") != 0)) {
        fprintf(stderr, "usage: %s MODEL.gguf batch|step OUT.f32 TOKENS [TOKENS ...]\n", argv[0]);
        return 2;
    }
    const int step = strcmp(argv[2], "step") == 0;
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "%s: does not load\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = fopen(argv[3], "wb");
    if (!out) {
        perror(argv[3]);
        return 1;
    }
    for (int s = 4; s < argc; s++) {
        int n;
        llama_token *tok = parse_tokens(argv[s], &n);
        if (!tok || n > 512) {
            fprintf(stderr, "bad token list '%s'\n", argv[s]);
            return 2;
        }
        llama_memory_clear(llama_get_memory(ctx), true);
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int done = 0; done < n;) {
            const int len = step ? 1 : n;
            b.n_tokens = len;
            for (int i = 0; i < len; i++) {
                b.token[i] = tok[done + i];
                b.pos[i] = done + i;
                b.n_seq_id[i] = 1;
                b.seq_id[i][0] = 0;
                b.logits[i] = 1;
            }
            if (llama_decode(ctx, b) != 0) {
                fprintf(stderr, "llama_decode failed\n");
                return 1;
            }
            for (int i = 0; i < len; i++)
                if (fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)n_vocab, out) !=
                    (size_t)n_vocab) {
                    perror(argv[3]);
                    return 1;
                }
            done += len;
        }
        llama_batch_free(b);
        free(tok);
    }
    if (fclose(out) != 0) {
        perror(argv[3]);
        return 1;
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
