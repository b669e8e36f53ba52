/* recur_model_quantize (include/recur.h): a model file's weight matrices rewritten in another
 * type, as llama-quantize --pure does. The GGUF reader and writer do the file, the ops module's
 * row conversions the values. */
#include "api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "../gguf/gguf.h"
#include "../ops/ops.h"
#include "../pool/pool.h"

/* The file types: each one's base type for the matrices (the mixes' rules: mix_type). */
static const struct ftype_info {
    enum recur_ftype ftype;
    uint32_t base;
} ftypes[] = {
    {RECUR_FTYPE_MOSTLY_F16, RGGUF_F16},     {RECUR_FTYPE_MOSTLY_BF16, RGGUF_BF16},
    {RECUR_FTYPE_MOSTLY_Q4_0, RGGUF_Q4_0},   {RECUR_FTYPE_MOSTLY_Q4_1, RGGUF_Q4_1},
    {RECUR_FTYPE_MOSTLY_Q5_0, RGGUF_Q5_0},   {RECUR_FTYPE_MOSTLY_Q5_1, RGGUF_Q5_1},
    {RECUR_FTYPE_MOSTLY_Q8_0, RGGUF_Q8_0},   {RECUR_FTYPE_MOSTLY_Q4_K_S, RGGUF_Q4_K},
    {RECUR_FTYPE_MOSTLY_Q4_K_M, RGGUF_Q4_K}, {RECUR_FTYPE_MOSTLY_Q5_K_S, RGGUF_Q5_K},
    {RECUR_FTYPE_MOSTLY_Q5_K_M, RGGUF_Q5_K}, {RECUR_FTYPE_MOSTLY_Q6_K, RGGUF_Q6_K},
};

static const struct ftype_info *ftype_find(enum recur_ftype ftype) {
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (ftypes[i].ftype == ftype) return &ftypes[i];
    return NULL;
}

/* ---- llama-quantize's mix ----------------------------------------------------------------------
 */

/* The tensors its rules tell apart, by name. */
enum category { CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN, CAT_OTHER };

static enum category category_of(const char *name) {
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0) return CAT_TOKEN_EMBD;
    /* attn_qkv and attn_kv_b count as V: llama-quantize checks them with attn_v */
    if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") ||
        strstr(name, "attn_kv_b.weight"))
        return CAT_ATTN_V;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* What the rules count over the whole file first. */
struct mix_state {
    bool tied; /* no output.weight: token_embd is the output too */
    int n_attn_v, i_attn_v;
    int n_layer, i_ffn_down;
};

/* llama.cpp's use_more_bits: the first and last eighth of n, and every third between. */
static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool fits(uint32_t type, int64_t n_cols) {
    const uint32_t block = rgguf_type_block(type);
    return block && n_cols % block == 0;
}

/* The output matrix: q6_K, or q8_0 when its rows are not whole blocks (q8_0 stays). */
static uint32_t output_type(uint32_t type, int64_t n_cols) {
    if (!fits(type, n_cols)) return RGGUF_Q8_0;
    return type == RGGUF_Q8_0 ? type : RGGUF_Q6_K;
}

/* The type the mix gives a tensor of the category, from the ftype's base. */
static uint32_t mix_type(enum recur_ftype ftype, uint32_t type, enum category cat, int64_t n_cols,
                         struct mix_state *st) {
    const bool km = ftype == RECUR_FTYPE_MOSTLY_Q4_K_M || ftype == RECUR_FTYPE_MOSTLY_Q5_K_M;
    switch (cat) {
    case CAT_TOKEN_EMBD: /* the tied embedding is the output too */
        return st->tied ? output_type(type, n_cols) : type;
    case CAT_OUTPUT:
        return output_type(type, n_cols);
    case CAT_ATTN_V: {
        const int i = st->i_attn_v++;
        if (km && more_bits(i, st->n_attn_v)) return RGGUF_Q6_K;
        if (ftype == RECUR_FTYPE_MOSTLY_Q4_K_S && i < 4) return RGGUF_Q5_K;
        return type;
    }
    case CAT_FFN_DOWN: {
        const int i = st->i_ffn_down++;
        if (km && more_bits(i, st->n_layer)) return RGGUF_Q6_K;
        if (ftype == RECUR_FTYPE_MOSTLY_Q4_K_S && i < st->n_layer / 8) return RGGUF_Q5_K;
        return type;
    }
    default:
        return type;
    }
}

/* llama-quantize's fallbacks for rows that are not whole blocks of a K type (0: none). */
static uint32_t fallback(uint32_t type) {
    switch (type) {
    case RGGUF_Q4_K:
        return RGGUF_Q5_0;
    case RGGUF_Q5_K:
        return RGGUF_Q5_1;
    case RGGUF_Q6_K:
        return RGGUF_Q8_0;
    default:
        return 0;
    }
}

struct recur_model_quantize_params recur_model_quantize_default_params(void) {
    struct recur_model_quantize_params p = {
        .ftype = RECUR_FTYPE_MOSTLY_Q8_0, .pure = false, .nthread = 4};
    return p;
}

/* Whether llama-quantize converts the tensor at all (its name and shape). */
static bool converts(const struct rgguf_tensor *t) {
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
    return rops_type_supported(t->type, t->ne[0]);
}

/* The type the tensor is written in: its own when it is not converted or nothing fits. */
static uint32_t target_type(const struct recur_model_quantize_params *p, uint32_t base,
                            const struct rgguf_tensor *t, struct mix_state *st) {
    if (!converts(t)) return t->type;
    uint32_t type = base;
    const enum category cat = category_of(t->name);
    if (!p->pure && rgguf_type_block(base) > 1) type = mix_type(p->ftype, base, cat, t->ne[0], st);
    if (!fits(type, t->ne[0]) && fallback(type))
        type = fits(fallback(type), t->ne[0]) ? fallback(type) : RGGUF_F16;
    return fits(type, t->ne[0]) ? type : t->type;
}

/* Rows of one tensor to convert, shared out among the threads; rowbuf holds a row of f32 for
 * each thread. */
struct convert_task {
    const struct rops_mat *src;
    uint32_t type;
    uint8_t *out;
    size_t out_row;
    float *rowbuf;
};

static void convert_thread(void *arg, int ith, int nth) {
    const struct convert_task *t = arg;
    const int64_t k = t->src->n_cols, rows = t->src->n_rows;
    float *row = t->rowbuf + (size_t)ith * (size_t)k;
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; r++) {
        rops_get_row(t->src, r, row);
        uint8_t *dst = t->out + (size_t)r * t->out_row;
        if (t->type == RGGUF_F16 || t->type == RGGUF_BF16)
            rcore_row_from_f32(t->type == RGGUF_F16 ? RCORE_TYPE_F16 : RCORE_TYPE_BF16, dst, row,
                               (size_t)k);
        else
            rops_quantize_row((enum rops_type)t->type, row, k, dst);
    }
}

/* One converted tensor: rows to f32, then to the new type, on nth threads of pool. */
static void *convert(const struct rgguf_tensor *t, uint32_t ggml_type, struct rpool *pool, int nth,
                     size_t *nbytes) {
    const int64_t k = t->ne[0], rows = t->ne[1];
    const size_t out_row = rops_row_bytes((enum rops_type)ggml_type, k);
    const struct rops_mat src = {t->data, (enum rops_type)t->type,  k,
                                 rows,    t->nbytes / (size_t)rows, NULL};
    if (nth > rows) nth = rows > 0 ? (int)rows : 1;
    uint8_t *out = malloc(out_row * (size_t)rows);
    float *rowbuf = malloc(sizeof(float) * (size_t)k * (size_t)nth);
    if (!out || !rowbuf) {
        free(out);
        free(rowbuf);
        rcore_error_set("out of memory converting tensor %s", t->name);
        return NULL;
    }
    struct convert_task task = {&src, ggml_type, out, out_row, rowbuf};
    rpool_run(pool, convert_thread, &task, nth);
    free(rowbuf);
    *nbytes = out_row * (size_t)rows;
    return out;
}

bool recur_model_quantize(const char *in_path, const char *out_path,
                          const struct recur_model_quantize_params *params,
                          struct recur_model_quantize_stats *stats) {
    API_NEED(in_path, false);
    API_NEED(out_path, false);
    API_NEED(params, false);
    const struct ftype_info *fi = ftype_find(params->ftype);
    if (!fi) {
        rcore_error_set("recur_model_quantize: ftype %d is not one of RECUR_FTYPE_MOSTLY_F16, "
                        "_BF16, _Q4_0, _Q4_1, _Q5_0, _Q5_1, _Q8_0, _Q4_K_S, _Q4_K_M, _Q5_K_S, "
                        "_Q5_K_M, _Q6_K",
                        (int)params->ftype);
        return false;
    }
    if (params->nthread < 1 || params->nthread > 256) {
        rcore_error_set("recur_model_quantize: nthread %d is not in 1 .. 256",
                        (int)params->nthread);
        return false;
    }
    if (strcmp(in_path, out_path) == 0) {
        rcore_error_set("recur_model_quantize: %s is both the input and the output", in_path);
        return false;
    }
    bool ok = false;
    struct recur_model_quantize_stats st = {0};
    struct rgguf_writer *w = NULL;
    struct rpool *pool = NULL;
    struct rgguf *g = rgguf_open(in_path, true);
    if (!g || !(w = rgguf_writer_create())) goto done;
    if (params->nthread > 1 && !(pool = rpool_create(params->nthread))) goto done;
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        if (strcmp(key, "general.file_type") == 0 || strcmp(key, "general.alignment") == 0 ||
            strcmp(key, "general.quantization_version") == 0)
            continue;
        if (!rgguf_writer_copy_kv(w, g, key)) goto done;
    }
    if (!rgguf_writer_set_u32(w, "general.file_type", (uint32_t)params->ftype) ||
        !rgguf_writer_set_u32(w, "general.quantization_version", 2))
        goto done;
    /* what the mix counts over the file before it decides (as llama-quantize's first pass) */
    struct mix_state mix = {.tied = rgguf_find_tensor(g, "output.weight") == NULL};
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++)
        if (category_of(rgguf_tensor(g, i)->name) == CAT_ATTN_V) mix.n_attn_v++;
    const char *arch = NULL;
    size_t arch_len = 0;
    char key[96];
    uint32_t n_layer = 0;
    if (rgguf_get_str(g, "general.architecture", &arch, &arch_len) && arch_len < 64) {
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch_len, arch);
        if (rgguf_get_u32(g, key, &n_layer)) mix.n_layer = (int)n_layer;
    }
    st.n_tensors = (int32_t)rgguf_n_tensors(g);
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        bool added;
        st.bytes_in += t->nbytes;
        const uint32_t type = target_type(params, fi->base, t, &mix);
        if (type != t->type) {
            size_t nbytes;
            void *data = convert(t, type, pool, pool ? params->nthread : 1, &nbytes);
            added =
                data && rgguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, data, nbytes);
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
    rpool_free(pool);
    rgguf_writer_free(w);
    rgguf_close(g);
    return ok;
}
