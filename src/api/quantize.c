/* recur_model_quantize (include/recur.h): a model file's weight matrices rewritten in another
 * type, as llama-quantize --pure does. The GGUF reader and writer do the file, the ops module's
 * row conversions the values. */
#include "api_impl.h"

#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../gguf/gguf.h"
#include "../ops/ops.h"

/* The ggml type of the matrices of each file type. */
static bool ftype_ggml(enum recur_ftype ftype, uint32_t *ggml_type) {
    switch (ftype) {
    case RECUR_FTYPE_MOSTLY_F16:
        *ggml_type = RGGUF_F16;
        return true;
    case RECUR_FTYPE_MOSTLY_Q4_0:
        *ggml_type = RGGUF_Q4_0;
        return true;
    case RECUR_FTYPE_MOSTLY_Q8_0:
        *ggml_type = RGGUF_Q8_0;
        return true;
    case RECUR_FTYPE_MOSTLY_BF16:
        *ggml_type = RGGUF_BF16;
        return true;
    }
    return false;
}

struct recur_model_quantize_params recur_model_quantize_default_params(void) {
    struct recur_model_quantize_params p = {.ftype = RECUR_FTYPE_MOSTLY_Q8_0};
    return p;
}

static bool converts(const struct rgguf_tensor *t, uint32_t ggml_type) {
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
    return rops_row_bytes((enum rops_type)ggml_type, t->ne[0]) != 0 &&
           rops_type_supported(t->type, t->ne[0]);
}

/* One converted tensor: rows to f32, then to the new type. */
static void *convert(const struct rgguf_tensor *t, uint32_t ggml_type, size_t *nbytes) {
    const int64_t k = t->ne[0], rows = t->ne[1];
    const size_t out_row = rops_row_bytes((enum rops_type)ggml_type, k);
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
        if (ggml_type == RGGUF_F16 || ggml_type == RGGUF_BF16)
            rcore_row_from_f32(ggml_type == RGGUF_F16 ? RCORE_TYPE_F16 : RCORE_TYPE_BF16, dst, row,
                               (size_t)k);
        else
            rops_quantize_row((enum rops_type)ggml_type, row, k, dst);
    }
    free(row);
    *nbytes = out_row * (size_t)rows;
    return out;
}

bool recur_model_quantize(const char *in_path, const char *out_path,
                          const struct recur_model_quantize_params *params,
                          struct recur_model_quantize_stats *stats) {
    API_NEED(in_path, false);
    API_NEED(out_path, false);
    API_NEED(params, false);
    uint32_t ggml_type;
    if (!ftype_ggml(params->ftype, &ggml_type)) {
        rcore_error_set("recur_model_quantize: ftype %d is not one of RECUR_FTYPE_MOSTLY_F16, "
                        "_Q4_0, _Q8_0, _BF16",
                        (int)params->ftype);
        return false;
    }
    if (strcmp(in_path, out_path) == 0) {
        rcore_error_set("recur_model_quantize: %s is both the input and the output", in_path);
        return false;
    }
    bool ok = false;
    struct recur_model_quantize_stats st = {0};
    struct rgguf_writer *w = NULL;
    struct rgguf *g = rgguf_open(in_path, true);
    if (!g || !(w = rgguf_writer_create())) goto done;
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        if (strcmp(key, "general.file_type") == 0 || strcmp(key, "general.alignment") == 0)
            continue;
        if (!rgguf_writer_copy_kv(w, g, key)) goto done;
    }
    if (!rgguf_writer_set_u32(w, "general.file_type", (uint32_t)params->ftype)) goto done;
    st.n_tensors = (int32_t)rgguf_n_tensors(g);
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        bool added;
        st.bytes_in += t->nbytes;
        if (converts(t, ggml_type) && t->type != ggml_type) {
            size_t nbytes;
            void *data = convert(t, ggml_type, &nbytes);
            added = data &&
                    rgguf_writer_add_tensor(w, t->name, ggml_type, t->n_dims, t->ne, data, nbytes);
            free(data);
            st.bytes_out += nbytes;
            st.n_converted++;
        } else {
            added =
                rgguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
            st.bytes_out += t->nbytes;
        }
        if (!added) goto done;
    }
    if (!rgguf_writer_write(w, out_path)) goto done;
    if (stats) *stats = st;
    ok = true;
done:
    rgguf_writer_free(w);
    rgguf_close(g);
    return ok;
}
