/*
 * recur quantize: rewrites a model's weight matrices in another type, as llama-quantize
 * --pure does, into a GGUF file that llama.cpp reads (recur_model_quantize, which says what is
 * converted).
 */
#include <stdio.h>
#include <string.h>

#include "recur.h"
#include "tools.h"

struct qtype {
    const char *name;
    enum recur_ftype ftype;
};

static const struct qtype qtypes[] = {
    {"q8_0", RECUR_FTYPE_MOSTLY_Q8_0},
    {"q4_0", RECUR_FTYPE_MOSTLY_Q4_0},
    {"f16", RECUR_FTYPE_MOSTLY_F16},
    {"bf16", RECUR_FTYPE_MOSTLY_BF16},
};

static void usage(FILE *out) {
    fprintf(out, "usage: recur quantize IN.gguf OUT.gguf q8_0|q4_0|f16|bf16\n"
                 "Rewrites the weight matrices of a model in another type (llama-quantize\n"
                 "--pure); norms (also Mamba-2's 2-D ssm_norm), biases, Mamba's conv weights and\n"
                 "RWKV's small LoRA, decay and lerp tensors keep theirs.\n");
}

int cmd_quantize(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return TOOL_OK;
        }
    if (argc != 4) {
        fprintf(stderr, "recur quantize: expected IN.gguf OUT.gguf TYPE\n\n");
        usage(stderr);
        return TOOL_USAGE;
    }
    const struct qtype *q = NULL;
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++)
        if (strcmp(argv[3], qtypes[i].name) == 0) q = &qtypes[i];
    if (!q) {
        fprintf(stderr, "recur quantize: unknown type '%s' (q8_0, q4_0, f16 or bf16)\n\n", argv[3]);
        usage(stderr);
        return TOOL_USAGE;
    }
    if (strcmp(argv[1], argv[2]) == 0) {
        fprintf(stderr, "recur quantize: IN and OUT are the same file\n");
        return TOOL_USAGE;
    }
    struct recur_model_quantize_params params = recur_model_quantize_default_params();
    params.ftype = q->ftype;
    struct recur_model_quantize_stats st;
    if (!recur_model_quantize(argv[1], argv[2], &params, &st)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        return TOOL_FAIL;
    }
    fprintf(stderr, "recur: %s: %d of %d tensors in %s, %.1f MiB of tensors -> %.1f MiB\n", argv[2],
            st.n_converted, st.n_tensors, q->name, st.bytes_in / 1048576.0,
            st.bytes_out / 1048576.0);
    return TOOL_OK;
}
