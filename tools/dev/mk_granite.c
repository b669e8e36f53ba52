/*
 * recur mkmodel --arch granitehybrid: random-weight IBM Granite 4.0-H models in the layout
 * llama.cpp's converter writes for GraniteMoeHybridForCausalLM without experts (its
 * GraniteHybridModel, read by src/models/granite-hybrid.cpp). Each layer is an RMS norm, then
 * either Mamba-2 (the tensors of --arch mamba2) or GQA attention without positional encoding,
 * then an RMS-normed SwiGLU feed-forward; a layer is Mamba-2 exactly when its entry of
 * attention.head_count_kv is 0. The scales of the Granite family (embedding, residual,
 * attention, logit) are keys; tests/ref/granite_ref.py is the forward pass they define.
 *
 * Granite-4.0-H-350M's shape (its config.json and llama.cpp's GGUF of it): embd 768, 32
 * layers, attention at 10,13,17,27 with 12 heads and 4 K/V heads (head_dim 64), SSM state 128,
 * 48 SSM heads (head_dim 32), 1 group, conv 4, ff 2048, vocabulary 100352, eps 1e-5, scales
 * embedding 12, residual 0.246, attention 0.015625, logit 3:
 *   recur mkmodel OUT --arch granitehybrid --embd 768 --layers 32 --attn-layers 10,13,17,27
 *     --attn-heads 12 --attn-kv-heads 4 --state 128 --heads 48 --groups 1 --ff 2048
 *     --vocab N --seed S --attn-scale 0.015625
 * (--vocab at most the vocabulary file's size; the default scales are already the 350M's.)
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "tools.h"

/* ---- flags ---------------------------------------------------------------------------------- */

/* Marks is_attn[l] for each index of --attn-layers (m->n_layer entries, zeroed here). Returns
 * TOOL_OK, or TOOL_USAGE with the message printed. */
static int attn_layers(const struct mk *m, uint8_t *is_attn) {
    memset(is_attn, 0, m->n_layer);
    const char *p = m->attn_layers;
    for (;;) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
        if (!(*p >= '0' && *p <= '9') || (*end != ',' && *end != '\0'))
            return mk_usage_error("--attn-layers: '%s' is not a list of layer indices such as "
                                  "1,3",
                                  m->attn_layers);
        if (errno == ERANGE || v >= m->n_layer)
            return mk_usage_error("--attn-layers: layer %.*s is past the last layer (%u)",
                                  (int)(end - p), p, m->n_layer - 1);
        if (is_attn[v]) return mk_usage_error("--attn-layers: layer %llu is given twice", v);
        is_attn[v] = 1;
        if (*end == '\0') break;
        p = end + 1;
    }
    return TOOL_OK;
}

/* The --attn-layers list, malloc'd (n_layer entries); NULL with the error set when out of
 * memory. The list was checked by parse. */
static uint8_t *layer_kinds(const struct mk *m) {
    uint8_t *is_attn = malloc(m->n_layer);
    if (!is_attn) {
        rcore_error_set("out of memory (%u layers)", m->n_layer);
        return NULL;
    }
    if (attn_layers(m, is_attn) != TOOL_OK) {
        free(is_attn);
        rcore_error_set("--attn-layers: '%s' does not parse", m->attn_layers);
        return NULL;
    }
    return is_attn;
}

static int parse(const char *const *given, struct mk *m) {
    m->tied = given[F_TIED] != NULL;
    /* llama.cpp's loader asserts d_inner = 2 * n_embd, so --inner is not offered. */
    if ((uint64_t)m->n_embd * 2 > INT32_MAX)
        return mk_usage_error("--embd %s is too large: d_inner = 2*embd must fit an int32",
                              given[F_EMBD]);
    m->d_inner = 2 * m->n_embd;
    m->d_conv = 4;
    m->n_head = m->d_inner / 64 ? m->d_inner / 64 : 1;
    m->n_group = 1;
    /* Granite-4.0-H's feed-forward is 8/3 of embd (2048 for 768), rounded up to 32 here. */
    uint64_t ff = ((uint64_t)m->n_embd * 8 / 3 + 31) / 32 * 32;
    m->n_ff = ff > INT32_MAX ? INT32_MAX : (uint32_t)ff;
    m->n_attn_head = m->n_embd % 16 == 0 ? m->n_embd / 16 : 1;
    if ((given[F_CONV] && !mk_parse_size("--conv", given[F_CONV], 1, &m->d_conv)) ||
        (given[F_HEADS] && !mk_parse_size("--heads", given[F_HEADS], 1, &m->n_head)) ||
        (given[F_GROUPS] && !mk_parse_size("--groups", given[F_GROUPS], 1, &m->n_group)) ||
        (given[F_FF] && !mk_parse_size("--ff", given[F_FF], 1, &m->n_ff)) ||
        (given[F_ATTN_HEADS] &&
         !mk_parse_size("--attn-heads", given[F_ATTN_HEADS], 1, &m->n_attn_head))) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    if (m->d_inner % m->n_head != 0)
        return mk_usage_error("--heads %u does not divide d_inner %u (2*embd)", m->n_head,
                              m->d_inner);
    if (m->n_head % m->n_group != 0)
        return mk_usage_error("--groups %u does not divide the %u heads", m->n_group, m->n_head);
    if (m->n_embd % m->n_attn_head != 0)
        return mk_usage_error("--attn-heads %u does not divide embd %u", m->n_attn_head, m->n_embd);
    m->n_attn_kv_head = m->n_attn_head % 2 == 0 ? m->n_attn_head / 2 : m->n_attn_head;
    if (given[F_ATTN_KV_HEADS] &&
        !mk_parse_size("--attn-kv-heads", given[F_ATTN_KV_HEADS], 1, &m->n_attn_kv_head)) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    if (m->n_attn_head % m->n_attn_kv_head != 0)
        return mk_usage_error("--attn-kv-heads %u does not divide the %u attention heads",
                              m->n_attn_kv_head, m->n_attn_head);

    /* Granite-4.0-H-350M's multipliers; the attention scale is Granite's 1/head_dim. */
    m->embd_scale = 12.0f;
    m->residual_scale = 0.246f;
    m->attn_scale = (float)(m->n_attn_head / (double)m->n_embd);
    m->logit_scale = 3.0f;
    if ((given[F_EMBD_SCALE] &&
         !mk_parse_positive_f32("--embd-scale", given[F_EMBD_SCALE], &m->embd_scale)) ||
        (given[F_RESIDUAL_SCALE] &&
         !mk_parse_positive_f32("--residual-scale", given[F_RESIDUAL_SCALE], &m->residual_scale)) ||
        (given[F_ATTN_SCALE] &&
         !mk_parse_positive_f32("--attn-scale", given[F_ATTN_SCALE], &m->attn_scale)) ||
        (given[F_LOGIT_SCALE] &&
         !mk_parse_positive_f32("--logit-scale", given[F_LOGIT_SCALE], &m->logit_scale))) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }

    /* every odd layer by default: a two-layer model is one Mamba-2 and one attention layer */
    m->attn_layers = given[F_ATTN_LAYERS];
    if (!m->attn_layers && m->n_layer < 2)
        return mk_usage_error("--layers %u: the default --attn-layers (the odd layers) needs 2 "
                              "layers; give --attn-layers",
                              m->n_layer);
    uint8_t *is_attn = malloc(m->n_layer);
    if (!is_attn) {
        fprintf(stderr, "recur mkmodel: out of memory (%u layers)\n", m->n_layer);
        return TOOL_FAIL;
    }
    int rc = TOOL_OK;
    uint32_t n_attn = 0;
    if (given[F_ATTN_LAYERS]) {
        rc = attn_layers(m, is_attn);
        for (uint32_t l = 0; rc == TOOL_OK && l < m->n_layer; l++) n_attn += is_attn[l];
    } else {
        n_attn = m->n_layer / 2;
    }
    free(is_attn);
    if (rc != TOOL_OK) return rc;
    /* llama.cpp's converter writes a Granite 4.0 model without Mamba-2 layers as --arch
     * granite, not granitehybrid */
    if (n_attn == m->n_layer)
        return mk_usage_error("--attn-layers: every layer is attention; llama.cpp's converter "
                              "writes such a model as granite, not granitehybrid");
    return TOOL_OK;
}

/* ---- keys ----------------------------------------------------------------------------------- */

/* Whether layer l is attention: from --attn-layers, or every odd layer when it is not given
 * (attn_layers is then NULL). */
static bool is_attention(const struct mk *m, const uint8_t *is_attn, uint32_t l) {
    return m->attn_layers ? is_attn[l] != 0 : l % 2 == 1;
}

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    uint8_t *is_attn = m->attn_layers ? layer_kinds(m) : NULL;
    uint32_t *kv = malloc(sizeof *kv * m->n_layer);
    if ((m->attn_layers && !is_attn) || !kv) {
        if (!kv) rcore_error_set("out of memory (%u layers)", m->n_layer);
        free(is_attn);
        free(kv);
        return false;
    }
    /* a layer is Mamba-2 exactly when its K/V head count is 0 */
    for (uint32_t l = 0; l < m->n_layer; l++)
        kv[l] = is_attention(m, is_attn, l) ? m->n_attn_kv_head : 0;
    const uint32_t head_dim = m->n_embd / m->n_attn_head;
    /* The keys of the converter's GraniteHybridModel for a dense (expert-free) checkpoint,
     * the set a real Granite-4.0-H GGUF carries: 2^20 context (no positional encoding, as
     * the converter writes when rope is off), zero expert counts, the shared-expert length
     * equal to the feed-forward length (shared_intermediate_size), rope.dimension_count =
     * head_dim and rope.scaling.finetuned = false, which turns RoPE off in llama.cpp (a
     * missing key turns it on). time_step_rank is the number of SSM heads. */
    const char *a = "granitehybrid";
    char key[80];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    bool ok =
        rgguf_writer_set_str(w, "general.architecture", a) &&
        rgguf_writer_set_str(w, "general.name", "recur random granitehybrid") &&
        rgguf_writer_set_u32(w, "general.file_type", mk_file_type(m)) &&
        rgguf_writer_set_u32(w, KEY("block_count"), m->n_layer) &&
        rgguf_writer_set_u32(w, KEY("context_length"), 1u << 20) &&
        rgguf_writer_set_u32(w, KEY("embedding_length"), m->n_embd) &&
        rgguf_writer_set_u32(w, KEY("feed_forward_length"), m->n_ff) &&
        rgguf_writer_set_u32(w, KEY("attention.head_count"), m->n_attn_head) &&
        rgguf_writer_set_arr(w, KEY("attention.head_count_kv"), RGGUF_UINT32, kv, m->n_layer) &&
        rgguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f) &&
        rgguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->eps) &&
        rgguf_writer_set_u32(w, KEY("expert_count"), 0) &&
        rgguf_writer_set_u32(w, KEY("expert_used_count"), 0) &&
        rgguf_writer_set_u32(w, KEY("vocab_size"), m->n_vocab) &&
        rgguf_writer_set_u32(w, KEY("rope.dimension_count"), head_dim) &&
        rgguf_writer_set_f32(w, KEY("attention.scale"), m->attn_scale) &&
        rgguf_writer_set_f32(w, KEY("embedding_scale"), m->embd_scale) &&
        rgguf_writer_set_f32(w, KEY("residual_scale"), m->residual_scale) &&
        rgguf_writer_set_f32(w, KEY("logit_scale"), m->logit_scale) &&
        rgguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), m->n_ff) &&
        rgguf_writer_set_u32(w, KEY("ssm.conv_kernel"), m->d_conv) &&
        rgguf_writer_set_u32(w, KEY("ssm.state_size"), m->d_state) &&
        rgguf_writer_set_u32(w, KEY("ssm.group_count"), m->n_group) &&
        rgguf_writer_set_u32(w, KEY("ssm.inner_size"), m->d_inner) &&
        rgguf_writer_set_u32(w, KEY("ssm.time_step_rank"), m->n_head) &&
        rgguf_writer_set_bool(w, KEY("rope.scaling.finetuned"), false);
#undef KEY
    free(is_attn);
    free(kv);
    return ok;
}

/* ---- tensors -------------------------------------------------------------------------------- */

/* A 1-D (ne1 == 0) or 2-D tensor drawn from its own name's generator. */
static bool add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name, uint32_t type,
                       int64_t ne0, int64_t ne1, enum init init, double scale) {
    const int64_t ne[2] = {ne0, ne1};
    return mk_add_tensor(w, m, name, NULL, type, ne1 ? 2 : 1, ne, init, scale);
}

/* Linear weights ~ N(0, 1/fan_in), fan_in = ne[0], so that activations keep their scale. */
#define LIN(fan_in) (1.0 / sqrt((double)(fan_in)))

/* The Mamba-2 mixer of layer l (the tensors of --arch mamba2, docs/mamba2.md section 2). */
static bool add_mamba2(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t embd = m->n_embd, inner = m->d_inner, state = m->d_state, conv = m->d_conv;
    const int64_t heads = m->n_head, groups = m->n_group, conv_dim = inner + 2 * groups * state;
    const int64_t in_proj = 2 * inner + 2 * groups * state + heads;
    const uint32_t wt = m->wtype;
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
    return add_tensor(w, m, NAME("ssm_in.weight"), wt, embd, in_proj, INIT_NORMAL, LIN(embd)) &&
           add_tensor(w, m, NAME("ssm_conv1d.weight"), RGGUF_F32, conv, conv_dim, INIT_NORMAL,
                      LIN(conv)) &&
           add_tensor(w, m, NAME("ssm_conv1d.bias"), RGGUF_F32, conv_dim, 0, INIT_NORMAL, 0.1) &&
           add_tensor(w, m, NAME("ssm_dt.bias"), RGGUF_F32, heads, 0, INIT_DT_BIAS, 0) &&
           add_tensor(w, m, NAME("ssm_a"), RGGUF_F32, 1, heads, INIT_A_HEAD, 0) &&
           add_tensor(w, m, NAME("ssm_d"), RGGUF_F32, 1, heads, INIT_NEAR_ONE, 0) &&
           add_tensor(w, m, NAME("ssm_norm.weight"), RGGUF_F32, inner / groups, groups,
                      INIT_NEAR_ONE, 0) &&
           add_tensor(w, m, NAME("ssm_out.weight"), wt, inner, embd, INIT_NORMAL, LIN(inner));
#undef NAME
}

/* The attention of layer l: separate Q, K, V (the converter's layout; llama.cpp would also
 * take a fused attn_qkv) and the output projection, without biases. */
static bool add_attention(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t embd = m->n_embd, head_dim = m->n_embd / m->n_attn_head;
    const int64_t q = head_dim * m->n_attn_head, kv = head_dim * m->n_attn_kv_head;
    const uint32_t wt = m->wtype;
    /* q.k of two N(0, 1)-component vectors spreads as sqrt(head_dim); times the default scale
     * 1/head_dim that is 1/sqrt(head_dim), a nearly uniform softmax. Drawing Q and K larger by
     * head_dim^(1/4) each gives scores of unit spread, so that which past token a head
     * attends to matters. */
    const double qk = LIN(embd) * pow((double)head_dim, 0.25);
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
    return add_tensor(w, m, NAME("attn_q.weight"), wt, embd, q, INIT_NORMAL, qk) &&
           add_tensor(w, m, NAME("attn_k.weight"), wt, embd, kv, INIT_NORMAL, qk) &&
           add_tensor(w, m, NAME("attn_v.weight"), wt, embd, kv, INIT_NORMAL, LIN(embd)) &&
           add_tensor(w, m, NAME("attn_output.weight"), wt, q, embd, INIT_NORMAL, LIN(q)) &&
           mk_add_qk_norm(w, m, l, head_dim);
#undef NAME
}

static bool add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd = m->n_embd, vocab = m->n_vocab, ff = m->n_ff;
    const uint32_t wt = m->wtype;
    uint8_t *is_attn = m->attn_layers ? layer_kinds(m) : NULL;
    if (m->attn_layers && !is_attn) return false;
    bool ok = add_tensor(w, m, "token_embd.weight", wt, embd, vocab, INIT_NORMAL, 1.0);
    for (uint32_t l = 0; ok && l < m->n_layer; l++) {
        char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
        ok = add_tensor(w, m, NAME("attn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
             (is_attention(m, is_attn, l) ? add_attention(w, m, l) : add_mamba2(w, m, l)) &&
             add_tensor(w, m, NAME("ffn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
             add_tensor(w, m, NAME("ffn_gate.weight"), wt, embd, ff, INIT_NORMAL, LIN(embd)) &&
             add_tensor(w, m, NAME("ffn_up.weight"), wt, embd, ff, INIT_NORMAL, LIN(embd)) &&
             add_tensor(w, m, NAME("ffn_down.weight"), wt, ff, embd, INIT_NORMAL, LIN(ff));
#undef NAME
    }
    free(is_attn);
    return ok && add_tensor(w, m, "output_norm.weight", RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
           (m->tied || add_tensor(w, m, "output.weight", wt, embd, vocab, INIT_NORMAL, LIN(embd)));
}

#undef LIN

static void summary(const struct mk *m) {
    printf("wrote %s: granitehybrid, layers %u (attention: %s), embd %u, ff %u, attention heads "
           "%u/%u%s, inner %u, state %u, conv %u, ssm heads %u, groups %u, vocab %u, %s%s, seed "
           "%llu\n",
           m->out, m->n_layer, m->attn_layers ? m->attn_layers : "the odd layers", m->n_embd,
           m->n_ff, m->n_attn_head, m->n_attn_kv_head, mk_qk_norm_words(m), m->d_inner, m->d_state,
           m->d_conv, m->n_head, m->n_group, m->n_vocab, rgguf_type_name(m->wtype),
           m->tied ? ", tied" : "", (unsigned long long)m->seed);
}

static const enum flag_id granite_only[] = {
    F_STATE,       F_TIED,       F_CONV,          F_HEADS,      F_GROUPS,         F_FF,
    F_ATTN_LAYERS, F_ATTN_HEADS, F_ATTN_KV_HEADS, F_EMBD_SCALE, F_RESIDUAL_SCALE, F_ATTN_SCALE,
    F_LOGIT_SCALE, F_QK_NORM};
static const struct mk_arch archs[] = {{"granitehybrid", "Granite 4.0-H", 0}};

const struct mk_family mk_family_granite = {
    .archs = archs,
    .n_archs = sizeof archs / sizeof archs[0],
    .names = "granitehybrid",
    .only = granite_only,
    .n_only = sizeof granite_only / sizeof granite_only[0],
    .needs_state = true,
    .min_vocab = N_BYTES,
    .min_vocab_why = "a byte-level BPE vocabulary has at least 256 tokens, one per byte",
    .help = "Granite 4.0-H: Mamba-2 layers and attention layers (--attn-layers), each with a\n"
            "SwiGLU feed-forward; d_inner is 2*embd, as llama.cpp requires. The vocabulary is cut\n"
            "as for Mamba.\n",
    .load_back = true,
    .parse = parse,
    .add_hparams = add_hparams,
    .add_vocab = mk_add_bpe_vocab,
    .add_tensors = add_tensors,
    .summary = summary,
};
