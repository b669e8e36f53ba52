/*
 * recur tokenize: the token ids of a text, with the vocabulary of any GGUF file that has one
 * (a model or a vocabulary-only file such as llama.cpp's ggml-vocab-*.gguf), as llama-tokenize
 * prints them. The training script uses it, so that a model is trained on exactly the ids
 * recur will give it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

static void usage(FILE *out) {
    fprintf(out, "usage: recur tokenize -m FILE (-p TEXT | -f FILE) [--out IDS.bin] [--no-bos]\n"
                 "Prints the token ids of a text (one line, space-separated), or writes them as\n"
                 "little-endian int32 to --out.\n\n"
                 "flags:\n"
                 "  -m, --model FILE   GGUF file with a tokenizer (a model or a vocabulary)\n"
                 "  -p, --prompt TEXT  the text\n"
                 "  -f, --file FILE    read the text from FILE\n"
                 "  --out FILE         write the ids to FILE instead of printing them\n"
                 "  --no-bos           do not add BOS even when the vocabulary asks for it\n"
                 "  -h, --help         show this help\n");
}

int cmd_tokenize(int argc, char **argv) {
    struct gen_opts o;
    memset(&o, 0, sizeof o);
    const char *out_path = NULL;
    bool add_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return TOOL_OK;
        }
        if (strcmp(a, "--no-bos") == 0) {
            add_special = false;
            continue;
        }
        const char **dst = strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0    ? &o.model
                           : strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0 ? &o.prompt
                           : strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0   ? &o.prompt_file
                           : strcmp(a, "--out") == 0                            ? &out_path
                                                                                : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "recur tokenize: %s '%s'\n\n",
                    dst ? "missing value for" : "unknown flag", a);
            usage(stderr);
            return TOOL_USAGE;
        }
        *dst = argv[++i];
    }
    if (!o.model || !o.prompt == !o.prompt_file) {
        fprintf(stderr, "recur tokenize: give -m FILE and one of -p / -f\n\n");
        usage(stderr);
        return TOOL_USAGE;
    }
    size_t len;
    char *text = gen_prompt_text(&o, &len);
    if (!text) return TOOL_FAIL;
    int ret = TOOL_FAIL;
    int32_t *ids = NULL;
    struct recur_model_params mp = recur_model_default_params();
    mp.vocab_only = true;
    struct recur_model *v = recur_model_load_from_file(o.model, mp);
    if (!v) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }
    if (len > INT32_MAX / 4) {
        fprintf(stderr, "recur: %s is too long\n", o.prompt_file ? o.prompt_file : "the text");
        goto done;
    }
    int32_t cap = RECUR_TOKENS_MAX((int32_t)len);
    if (!(ids = malloc(sizeof(int32_t) * (size_t)cap))) {
        fprintf(stderr, "recur: out of memory\n");
        goto done;
    }
    int32_t n = recur_tokenize(v, text, (int32_t)len, ids, cap, add_special, false);
    if (n < 0) {
        fprintf(stderr, "recur: tokenizing failed: %s\n", recur_last_error());
        goto done;
    }
    if (out_path) {
        FILE *f = fopen(out_path, "wb");
        bool ok = f != NULL;
        for (int32_t i = 0; ok && i < n; i++) {
            uint8_t b[4] = {(uint8_t)ids[i], (uint8_t)(ids[i] >> 8), (uint8_t)(ids[i] >> 16),
                            (uint8_t)(ids[i] >> 24)};
            ok = fwrite(b, 1, 4, f) == 4;
        }
        if (f && fclose(f) != 0) ok = false;
        if (!ok) {
            fprintf(stderr, "recur: %s: %s\n", out_path, strerror(errno));
            goto done;
        }
        fprintf(stderr, "recur: %d tokens written to %s\n", n, out_path);
    } else {
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    ret = TOOL_OK;
done:
    free(ids);
    recur_model_free(v);
    free(text);
    return ret;
}
