/*
 * recur quantize: rewrites a model's weight matrices in another type into a GGUF file that
 * llama.cpp reads (recur_model_quantize, which says what is converted and the mixes' rules).
 * Upper-case names are llama-quantize's file types, with its mix of types per tensor; lower-case
 * names put every matrix in that one type, as llama-quantize --pure.
 */
#include <stdio.h>
#include <string.h>

#include "recur.h"
#include "common.h"
#include "tools.h"

struct qtype {
    const char *name;
    enum recur_ftype ftype;
    bool pure;
};

static const struct qtype qtypes[] = {
    {"Q4_K_M", RECUR_FTYPE_MOSTLY_Q4_K_M, false}, {"Q4_K_S", RECUR_FTYPE_MOSTLY_Q4_K_S, false},
    {"Q5_K_M", RECUR_FTYPE_MOSTLY_Q5_K_M, false}, {"Q5_K_S", RECUR_FTYPE_MOSTLY_Q5_K_S, false},
    {"Q6_K", RECUR_FTYPE_MOSTLY_Q6_K, false},     {"Q8_0", RECUR_FTYPE_MOSTLY_Q8_0, false},
    {"Q5_1", RECUR_FTYPE_MOSTLY_Q5_1, false},     {"Q5_0", RECUR_FTYPE_MOSTLY_Q5_0, false},
    {"Q4_1", RECUR_FTYPE_MOSTLY_Q4_1, false},     {"Q4_0", RECUR_FTYPE_MOSTLY_Q4_0, false},
    {"q4_K", RECUR_FTYPE_MOSTLY_Q4_K_M, true},    {"q5_K", RECUR_FTYPE_MOSTLY_Q5_K_M, true},
    {"q6_K", RECUR_FTYPE_MOSTLY_Q6_K, true},      {"q8_0", RECUR_FTYPE_MOSTLY_Q8_0, true},
    {"q5_1", RECUR_FTYPE_MOSTLY_Q5_1, true},      {"q5_0", RECUR_FTYPE_MOSTLY_Q5_0, true},
    {"q4_1", RECUR_FTYPE_MOSTLY_Q4_1, true},      {"q4_0", RECUR_FTYPE_MOSTLY_Q4_0, true},
    {"f16", RECUR_FTYPE_MOSTLY_F16, true},        {"bf16", RECUR_FTYPE_MOSTLY_BF16, true},
};

static void usage(FILE *out) {
    fprintf(out, "usage: recur quantize IN.gguf OUT.gguf TYPE [THREADS]\n"
                 "Rewrites the weight matrices of a model in another type. TYPE is one of\n"
                 "  Q4_K_M Q4_K_S Q5_K_M Q5_K_S Q6_K Q8_0 Q5_1 Q5_0 Q4_1 Q4_0\n"
                 "    llama-quantize's file types: the output in q6_K, some attention V and\n"
                 "    ffn_down matrices with more bits, the rest in the base type\n"
                 "  q4_K q5_K q6_K q8_0 q5_1 q5_0 q4_1 q4_0 f16 bf16\n"
                 "    every matrix in that one type (llama-quantize --pure)\n"
                 "Either way, rows that are not whole blocks of a K type fall back as\n"
                 "llama-quantize's do (q4_K to q5_0, q5_K to q5_1, q6_K to q8_0, then f16).\n"
                 "Norms (also Mamba-2's 2-D ssm_norm), biases, Mamba's conv weights and RWKV's\n"
                 "small LoRA, decay and lerp tensors keep their type. THREADS (default 4)\n"
                 "convert each tensor's rows in parallel; the output is the same.\n");
}

int cmd_quantize(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return TOOL_OK;
        }
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "recur quantize: expected IN.gguf OUT.gguf TYPE [THREADS]\n\n");
        usage(stderr);
        return TOOL_USAGE;
    }
    const struct qtype *q = NULL;
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++)
        if (strcmp(argv[3], qtypes[i].name) == 0) q = &qtypes[i];
    if (!q) {
        fprintf(stderr, "recur quantize: unknown type '%s' (see the list below)\n\n", argv[3]);
        usage(stderr);
        return TOOL_USAGE;
    }
    if (strcmp(argv[1], argv[2]) == 0) {
        fprintf(stderr, "recur quantize: IN and OUT are the same file\n");
        return TOOL_USAGE;
    }
    struct recur_model_quantize_params params = recur_model_quantize_default_params();
    params.ftype = q->ftype;
    params.pure = q->pure;
    if (argc == 5) {
        long n;
        if (!gen_parse_long(argv[4], 1, 256, &n)) {
            fprintf(stderr, "recur quantize: THREADS '%s' is not a number in 1 .. 256\n", argv[4]);
            return TOOL_USAGE;
        }
        params.nthread = (int32_t)n;
    }
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
