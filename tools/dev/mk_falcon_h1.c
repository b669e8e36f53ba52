/*
 * recur mkmodel --arch falcon-h1: random-weight TII Falcon-H1 models in the layout llama.cpp's
 * converter writes for FalconH1ForCausalLM (conversion/falcon_h1.py, read by
 * src/models/falcon-h1.cpp). Every layer runs GQA attention with NeoX RoPE and a Mamba-2 mixer
 * in parallel on the same RMS-normed input (one attn_norm) and adds both to the residual, then
 * an RMS-normed SwiGLU feed-forward whose norm is blk.N.ffn_norm, without ".weight". Falcon-H1's
 * multipliers are folded into the weights by the converter, so the file carries none;
 * tests/ref/falcon_h1_ref.py is the forward pass these files define.
 *
 * Unlike Granite, d_inner (mamba_d_ssm) is free, and the attention head size is its own key
 * (attention.key_length = value_length = head_dim). The grouped RMS norm of the Mamba-2 output
 * (ssm_norm) is optional in llama.cpp and written only under --ssm-norm (Falcon-H1's
 * mamba_rms_norm).
 *
 * Falcon-H1-0.5B's shape: depth 36, hidden 1024, 8 attention heads with 2 K/V heads of
 * head_dim 64, 24 SSM heads of 64 (mamba_d_ssm 1536), state 128 (the table of transformers'
 * FalconH1 documentation); group 1, conv 4, intermediate 2048, rope_theta 1e11, eps 1e-5,
 * mamba_rms_norm false and a vocabulary of 32784 are recalled from its config.json, not checked
 * against a copy:
 *   recur mkmodel OUT --arch falcon-h1 --embd 1024 --layers 36 --attn-heads 8
 *     --attn-kv-heads 2 --attn-head-dim 64 --inner 1536 --heads 24 --groups 1 --state 128
 *     --ff 2048 --vocab N --seed S
 * (--vocab at most the vocabulary file's size; the default --rope-base is already 1e11.)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "mkmodel.h"
#include "tools.h"

/* ---- flags ---------------------------------------------------------------------------------- */

/* Parses size flag id into *out when it was given; false with the usage printed when bad. */
static bool size_flag(const char *const *given, enum flag_id id, const char *name, uint32_t *out) {
    if (!given[id] || mk_parse_size(name, given[id], 1, out)) return true;
    mk_usage(stderr);
    return false;
}

static int parse(const char *const *given, struct mk *m) {
    m->tied = given[F_TIED] != NULL;
    m->ssm_norm = given[F_SSM_NORM] != NULL;
    if ((uint64_t)m->n_embd * 2 > INT32_MAX)
        return mk_usage_error("--embd %s is too large: the default d_inner = 2*embd must fit an "
                              "int32",
                              given[F_EMBD]);
    m->d_inner = 2 * m->n_embd;
    m->d_conv = 4;
    m->n_group = 1;
    /* Falcon-H1-0.5B's feed-forward is 2*embd (2048 for 1024) */
    m->n_ff = 2 * m->n_embd;
    m->n_attn_head = m->n_embd % 16 == 0 ? m->n_embd / 16 : 1;
    if (!size_flag(given, F_INNER, "--inner", &m->d_inner) ||
        !size_flag(given, F_CONV, "--conv", &m->d_conv) ||
        !size_flag(given, F_GROUPS, "--groups", &m->n_group) ||
        !size_flag(given, F_FF, "--ff", &m->n_ff) ||
        !size_flag(given, F_ATTN_HEADS, "--attn-heads", &m->n_attn_head))
        return TOOL_USAGE;
    m->n_head = m->d_inner / 64 ? m->d_inner / 64 : 1;
    if (!size_flag(given, F_HEADS, "--heads", &m->n_head)) return TOOL_USAGE;
    if (m->d_inner % m->n_head != 0)
        return mk_usage_error("--heads %u does not divide d_inner %u (--inner)", m->n_head,
                              m->d_inner);
    if (m->n_head % m->n_group != 0)
        return mk_usage_error("--groups %u does not divide the %u SSM heads", m->n_group,
                              m->n_head);
    /* the default head size splits embd among the attention heads */
    if (!given[F_ATTN_HEAD_DIM] && m->n_embd % m->n_attn_head != 0)
        return mk_usage_error("--attn-heads %u does not divide embd %u; give --attn-head-dim",
                              m->n_attn_head, m->n_embd);
    m->attn_head_dim = m->n_embd / m->n_attn_head;
    if (!size_flag(given, F_ATTN_HEAD_DIM, "--attn-head-dim", &m->attn_head_dim)) return TOOL_USAGE;
    /* NeoX RoPE rotates pairs (i, i + head_dim/2) */
    if (m->attn_head_dim % 2 != 0)
        return mk_usage_error("--attn-head-dim %u is odd; RoPE rotates pairs of head values",
                              m->attn_head_dim);
    if ((uint64_t)m->attn_head_dim * m->n_attn_head > INT32_MAX)
        return mk_usage_error("--attn-head-dim %u times %u heads does not fit an int32",
                              m->attn_head_dim, m->n_attn_head);
    m->n_attn_kv_head = m->n_attn_head % 2 == 0 ? m->n_attn_head / 2 : m->n_attn_head;
    if (!size_flag(given, F_ATTN_KV_HEADS, "--attn-kv-heads", &m->n_attn_kv_head))
        return TOOL_USAGE;
    if (m->n_attn_head % m->n_attn_kv_head != 0)
        return mk_usage_error("--attn-kv-heads %u does not divide the %u attention heads",
                              m->n_attn_kv_head, m->n_attn_head);
    m->rope_base = 1e11f;
    if (given[F_ROPE_BASE] &&
        !mk_parse_positive_f32("--rope-base", given[F_ROPE_BASE], &m->rope_base)) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    return TOOL_OK;
}

/* ---- keys ----------------------------------------------------------------------------------- */

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    /* The keys of the converter's FalconH1Model (its Mamba2Model base, then its own): the
     * context is max_position_embeddings (Falcon-H1-0.5B: 16384), time_step_rank the number
     * of SSM heads (mamba_d_ssm / mamba_d_head), head_count_kv one value for every layer (all
     * layers have both mixers). No rope.dimension_count: llama.cpp rotates the whole head
     * (n_rot defaults to key_length). No attention.scale: 1/sqrt(head_dim). */
    const char *a = "falcon-h1";
    char key[80];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    return rgguf_writer_set_str(w, "general.architecture", a) &&
           rgguf_writer_set_str(w, "general.name", "recur random falcon-h1") &&
           rgguf_writer_set_u32(w, "general.file_type", mk_file_type(m)) &&
           rgguf_writer_set_u32(w, KEY("context_length"), 16384) &&
           rgguf_writer_set_u32(w, KEY("embedding_length"), m->n_embd) &&
           rgguf_writer_set_u32(w, KEY("feed_forward_length"), m->n_ff) &&
           rgguf_writer_set_u32(w, KEY("attention.head_count"), m->n_attn_head) &&
           rgguf_writer_set_u32(w, KEY("block_count"), m->n_layer) &&
           rgguf_writer_set_u32(w, KEY("ssm.conv_kernel"), m->d_conv) &&
           rgguf_writer_set_u32(w, KEY("ssm.inner_size"), m->d_inner) &&
           rgguf_writer_set_u32(w, KEY("ssm.state_size"), m->d_state) &&
           rgguf_writer_set_u32(w, KEY("ssm.time_step_rank"), m->n_head) &&
           rgguf_writer_set_u32(w, KEY("ssm.group_count"), m->n_group) &&
           rgguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->eps) &&
           rgguf_writer_set_u32(w, KEY("vocab_size"), m->n_vocab) &&
           rgguf_writer_set_u32(w, KEY("attention.head_count_kv"), m->n_attn_kv_head) &&
           rgguf_writer_set_u32(w, KEY("attention.key_length"), m->attn_head_dim) &&
           rgguf_writer_set_u32(w, KEY("attention.value_length"), m->attn_head_dim) &&
           rgguf_writer_set_f32(w, KEY("rope.freq_base"), m->rope_base);
#undef KEY
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

/* The Mamba-2 mixer of layer l (the tensors of --arch mamba2 with a free d_inner; ssm_norm
 * only under --ssm-norm). */
static bool add_mamba2(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t embd = m->n_embd, inner = m->d_inner, state = m->d_state, conv = m->d_conv;
    const int64_t heads = m->n_head, groups = m->n_group, conv_dim = inner + 2 * groups * state;
    const int64_t in_proj = inner + conv_dim + heads;
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
           (!m->ssm_norm || add_tensor(w, m, NAME("ssm_norm.weight"), RGGUF_F32, inner / groups,
                                       groups, INIT_NEAR_ONE, 0)) &&
           add_tensor(w, m, NAME("ssm_out.weight"), wt, inner, embd, INIT_NORMAL, LIN(inner));
#undef NAME
}

/* The attention of layer l: separate Q, K, V and the output projection, without biases. */
static bool add_attention(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t embd = m->n_embd, hd = m->attn_head_dim;
    const int64_t q = hd * m->n_attn_head, kv = hd * m->n_attn_kv_head;
    const uint32_t wt = m->wtype;
    /* As in mk_granite.c: Q and K larger by head_dim^(1/4) each give q.k/sqrt(head_dim) unit
     * spread, so that which past token a head attends to (and so RoPE) matters. */
    const double qk = LIN(embd) * pow((double)hd, 0.25);
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
    return add_tensor(w, m, NAME("attn_q.weight"), wt, embd, q, INIT_NORMAL, qk) &&
           add_tensor(w, m, NAME("attn_k.weight"), wt, embd, kv, INIT_NORMAL, qk) &&
           add_tensor(w, m, NAME("attn_v.weight"), wt, embd, kv, INIT_NORMAL, LIN(embd)) &&
           add_tensor(w, m, NAME("attn_output.weight"), wt, q, embd, INIT_NORMAL, LIN(q)) &&
           mk_add_qk_norm(w, m, l, hd);
#undef NAME
}

static bool add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd = m->n_embd, vocab = m->n_vocab, ff = m->n_ff;
    const uint32_t wt = m->wtype;
    bool ok = add_tensor(w, m, "token_embd.weight", wt, embd, vocab, INIT_NORMAL, 1.0);
    for (uint32_t l = 0; ok && l < m->n_layer; l++) {
        char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
        /* ffn_norm has no ".weight": the converter maps pre_ff_layernorm.weight to
         * FFN_PRE_NORM's whole name, and llama.cpp asks for tn(LLM_TENSOR_FFN_NORM, i) */
        ok = add_tensor(w, m, NAME("attn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
             add_attention(w, m, l) && add_mamba2(w, m, l) &&
             add_tensor(w, m, NAME("ffn_norm"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
             add_tensor(w, m, NAME("ffn_gate.weight"), wt, embd, ff, INIT_NORMAL, LIN(embd)) &&
             add_tensor(w, m, NAME("ffn_up.weight"), wt, embd, ff, INIT_NORMAL, LIN(embd)) &&
             add_tensor(w, m, NAME("ffn_down.weight"), wt, ff, embd, INIT_NORMAL, LIN(ff));
#undef NAME
    }
    return ok && add_tensor(w, m, "output_norm.weight", RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
           (m->tied || add_tensor(w, m, "output.weight", wt, embd, vocab, INIT_NORMAL, LIN(embd)));
}

#undef LIN

static void summary(const struct mk *m) {
    printf("wrote %s: falcon-h1, layers %u, embd %u, ff %u, attention heads %u/%u of %u%s, rope "
           "base %g, inner %u, state %u, conv %u, ssm heads %u, groups %u%s, vocab %u, %s%s, "
           "seed %llu\n",
           m->out, m->n_layer, m->n_embd, m->n_ff, m->n_attn_head, m->n_attn_kv_head,
           m->attn_head_dim, mk_qk_norm_words(m), (double)m->rope_base, m->d_inner, m->d_state,
           m->d_conv, m->n_head, m->n_group, m->ssm_norm ? ", ssm_norm" : "", m->n_vocab,
           rgguf_type_name(m->wtype), m->tied ? ", tied" : "", (unsigned long long)m->seed);
}

static const enum flag_id falcon_h1_only[] = {
    F_STATE,      F_TIED,          F_INNER,         F_CONV,      F_HEADS,    F_GROUPS, F_FF,
    F_ATTN_HEADS, F_ATTN_KV_HEADS, F_ATTN_HEAD_DIM, F_ROPE_BASE, F_SSM_NORM, F_QK_NORM};
static const struct mk_arch archs[] = {{"falcon-h1", "Falcon-H1", 0}};

const struct mk_family mk_family_falcon_h1 = {
    .archs = archs,
    .n_archs = sizeof archs / sizeof archs[0],
    .names = "falcon-h1",
    .only = falcon_h1_only,
    .n_only = sizeof falcon_h1_only / sizeof falcon_h1_only[0],
    .needs_state = true,
    .min_vocab = N_BYTES,
    .min_vocab_why = "a byte-level BPE vocabulary has at least 256 tokens, one per byte",
    .help =
        "Falcon-H1: every layer runs attention (NeoX RoPE, --attn-head-dim per head) and Mamba-2\n"
        "(--inner, free of embd) in parallel and adds both, then a SwiGLU feed-forward. The\n"
        "vocabulary is cut as for Mamba.\n",
    .load_back = true,
    .parse = parse,
    .add_hparams = add_hparams,
    .add_vocab = mk_add_bpe_vocab,
    .add_tensors = add_tensors,
    .summary = summary,
};
