/*
 * recur quantize: rewrites a model's weight matrices in another type, as llama-quantize
 * --pure does, into a GGUF file that llama.cpp reads.
 *
 * Converted: every 2-D tensor whose name ends in "weight", except those llama.cpp's quantizer
 * keeps as they are: norms (also 2-D ones), Mamba's ssm_conv1d (a few values per channel) and
 * RWKV's small LoRA, decay, bonus and lerp tensors; and for q8_0 / q4_0 only matrices whose rows
 * are whole 32-value blocks (others keep their type). 1-D, 3-D and 4-D tensors (norms, biases,
 * RWKV-6's time_mix_w2, lerp_fused) and every key are copied; general.file_type is set to
 * llama.cpp's value for the new type. Values are rounded as ggml's reference quantizers round
 * them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "ops/ops.h"
#include "tools.h"

struct qtype {
    const char *name;
    uint32_t ggml_type;
    uint32_t file_type; /* llama.cpp's LLAMA_FTYPE_MOSTLY_* */
};

static const struct qtype qtypes[] = {
    {"q8_0", RGGUF_Q8_0, 7},
    {"q4_0", RGGUF_Q4_0, 2},
    {"f16", RGGUF_F16, 1},
    {"bf16", RGGUF_BF16, 32},
};

static void usage(FILE *out) {
    fprintf(out, "usage: recur quantize IN.gguf OUT.gguf q8_0|q4_0|f16|bf16\n"
                 "Rewrites the weight matrices of a model in another type (llama-quantize\n"
                 "--pure); norms (also Mamba-2's 2-D ssm_norm), biases, Mamba's conv weights and\n"
                 "RWKV's small LoRA, decay and lerp tensors keep theirs.\n");
}

static bool converts(const struct rgguf_tensor *t, const struct qtype *q) {
    const size_t len = strlen(t->name);
    if (t->n_dims != 2 || len < 6 || strcmp(t->name + len - 6, "weight") != 0) return false;
    /* as llama.cpp's quantizer: no conv weights, and no norm weights even where they are 2-D
       (Mamba-2's grouped ssm_norm) */
    if (strstr(t->name, "ssm_conv1d") || strstr(t->name, "_norm.weight")) return false;
    /* nor RWKV's "small yet 2D weights" (llama-quant.cpp's list, matched as it matches them):
       the decay, bonus, LoRA and lerp tensors, too small for quantizing to save anything. So
       the RWKV-7 a/v/g LoRAs keep the input's type, F16 included, as with llama-quantize. */
    static const char *const rwkv_small[] = {
        "time_mix_first.weight",    "time_mix_w0.weight",       "time_mix_w1.weight",
        "time_mix_w2.weight",       "time_mix_v0.weight",       "time_mix_v1.weight",
        "time_mix_v2.weight",       "time_mix_a0.weight",       "time_mix_a1.weight",
        "time_mix_a2.weight",       "time_mix_g1.weight",       "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
    };
    for (size_t i = 0; i < sizeof rwkv_small / sizeof rwkv_small[0]; i++)
        if (strstr(t->name, rwkv_small[i])) return false;
    return rops_row_bytes(q->ggml_type, t->ne[0]) != 0 && rops_type_supported(t->type, t->ne[0]);
}

/* One converted tensor: rows to f32, then to the new type. */
static void *convert(const struct rgguf_tensor *t, const struct qtype *q, size_t *nbytes) {
    const int64_t k = t->ne[0], rows = t->ne[1];
    const size_t out_row = rops_row_bytes(q->ggml_type, k);
    const struct rops_mat src = {t->data, (enum rops_type)t->type, k, rows,
                                 t->nbytes / (size_t)rows};
    uint8_t *out = malloc(out_row * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!out || !row) {
        free(out);
        free(row);
        rcore_error_set("out of memory converting tensor %s", t->name);
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++) {
        rops_get_row(&src, r, row);
        uint8_t *dst = out + (size_t)r * out_row;
        if (q->ggml_type == RGGUF_F16 || q->ggml_type == RGGUF_BF16)
            rcore_row_from_f32(q->ggml_type == RGGUF_F16 ? RCORE_TYPE_F16 : RCORE_TYPE_BF16, dst,
                               row, (size_t)k);
        else
            rops_quantize_row(q->ggml_type, row, k, dst);
    }
    free(row);
    *nbytes = out_row * (size_t)rows;
    return out;
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
    int ret = TOOL_FAIL;
    struct rgguf_writer *w = NULL;
    struct rgguf *g = rgguf_open(argv[1], true);
    if (!g || !(w = rgguf_writer_create())) goto fail;
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        if (strcmp(key, "general.file_type") == 0 || strcmp(key, "general.alignment") == 0)
            continue;
        if (!rgguf_writer_copy_kv(w, g, key)) goto fail;
    }
    if (!rgguf_writer_set_u32(w, "general.file_type", q->file_type)) goto fail;
    uint64_t bytes_in = 0, bytes_out = 0;
    int n_converted = 0;
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        bool ok;
        bytes_in += t->nbytes;
        if (converts(t, q) && t->type != q->ggml_type) {
            size_t nbytes;
            void *data = convert(t, q, &nbytes);
            ok = data &&
                 rgguf_writer_add_tensor(w, t->name, q->ggml_type, t->n_dims, t->ne, data, nbytes);
            free(data);
            bytes_out += nbytes;
            n_converted++;
        } else {
            ok = rgguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
            bytes_out += t->nbytes;
        }
        if (!ok) goto fail;
    }
    if (!rgguf_writer_write(w, argv[2])) goto fail;
    fprintf(stderr, "recur: %s: %d of %lld tensors in %s, %.1f MiB of tensors -> %.1f MiB\n",
            argv[2], n_converted, (long long)rgguf_n_tensors(g), q->name, bytes_in / 1048576.0,
            bytes_out / 1048576.0);
    ret = TOOL_OK;
fail:
    if (ret != TOOL_OK) fprintf(stderr, "recur: %s\n", rcore_error_get());
    rgguf_writer_free(w);
    rgguf_close(g);
    return ret;
}
