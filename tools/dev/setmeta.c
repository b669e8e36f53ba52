/*
 * recur setmeta: rewrites a GGUF file with string key-values set or added, every other
 * key-value and every tensor copied unchanged (tensor bytes identical, in the same order), so
 * that a model's metadata can be corrected without touching its weights: the shipped model
 * got its tokenizer.ggml.pre this way (models/README.md).
 *
 *   recur setmeta IN.gguf OUT.gguf KEY=VALUE [KEY=VALUE ...]
 *
 * When OUT has a tokenizer, it is loaded afterwards as recur would load it, so a value recur
 * refuses (an unknown pre-tokenizer) is reported and OUT removed: so OUT must not be IN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "dev.h"
#include "tools.h"
#include "vocab/vocab.h"

#define MAX_SETS 16

static void usage(FILE *out) {
    fprintf(out, "usage: recur setmeta IN.gguf OUT.gguf KEY=VALUE [KEY=VALUE ...]\n\n"
                 "Writes OUT with each KEY set to the string VALUE (added when absent); every\n"
                 "other key-value and every tensor is copied unchanged, tensor bytes and order\n"
                 "included. OUT must be another file than IN.\n");
}

int cmd_setmeta(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return TOOL_OK;
    }
    if (argc < 4 || argc - 3 > MAX_SETS) {
        fprintf(stderr, "recur setmeta: %s\n\n",
                argc < 4 ? "IN, OUT and at least one KEY=VALUE are required"
                         : "too many KEY=VALUE arguments (at most 16)");
        usage(stderr);
        return TOOL_USAGE;
    }
    const char *in = argv[1], *out = argv[2];
    struct stat si, so;
    if (strcmp(in, out) == 0 || (stat(in, &si) == 0 && stat(out, &so) == 0 &&
                                 si.st_dev == so.st_dev && si.st_ino == so.st_ino)) {
        fprintf(stderr, "recur setmeta: OUT is IN (%s): write another file\n\n", out);
        usage(stderr);
        return TOOL_USAGE;
    }
    char *keys[MAX_SETS];
    const char *values[MAX_SETS];
    int n_sets = argc - 3;
    for (int i = 0; i < n_sets; i++) {
        const char *eq = strchr(argv[3 + i], '=');
        if (!eq || eq == argv[3 + i]) {
            fprintf(stderr, "recur setmeta: \"%s\" is not KEY=VALUE\n\n", argv[3 + i]);
            usage(stderr);
            for (int k = 0; k < i; k++) free(keys[k]);
            return TOOL_USAGE;
        }
        size_t kl = (size_t)(eq - argv[3 + i]);
        keys[i] = malloc(kl + 1);
        if (!keys[i]) {
            fprintf(stderr, "recur setmeta: out of memory\n");
            for (int k = 0; k < i; k++) free(keys[k]);
            return TOOL_FAIL;
        }
        memcpy(keys[i], argv[3 + i], kl);
        keys[i][kl] = '\0';
        values[i] = eq + 1;
    }
    int ret = TOOL_FAIL;
    struct rgguf_writer *w = NULL;
    struct rgguf *g = rgguf_open(in, true);
    if (!g) goto done;
    if (!(w = rgguf_writer_create())) goto done;
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        bool replaced = false;
        for (int k = 0; k < n_sets; k++) replaced = replaced || strcmp(keys[k], key) == 0;
        if (!replaced && !rgguf_writer_copy_kv(w, g, key)) goto done;
    }
    for (int k = 0; k < n_sets; k++)
        if (!rgguf_writer_set_str(w, keys[k], values[k])) goto done;
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        if (!rgguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes))
            goto done;
    }
    if (!rgguf_writer_write(w, out)) goto done;
    rgguf_close(g);
    g = rgguf_open(out, true);
    if (!g) goto done;
    if (rgguf_find_key(g, "tokenizer.ggml.model") >= 0) {
        struct rvocab *v = rvocab_load(g);
        if (!v) {
            rcore_error_prefix("%s: its tokenizer does not load", out);
            remove(out);
            goto done;
        }
        rvocab_free(v);
    }
    printf("wrote %s: %lld key-values, %lld tensors copied unchanged\n", out,
           (long long)rgguf_n_kv(g), (long long)rgguf_n_tensors(g));
    ret = TOOL_OK;
done:
    if (ret != TOOL_OK) fprintf(stderr, "recur setmeta: %s\n", rcore_error_get());
    rgguf_writer_free(w);
    rgguf_close(g);
    for (int k = 0; k < n_sets; k++) free(keys[k]);
    return ret;
}
