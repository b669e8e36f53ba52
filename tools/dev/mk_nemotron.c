/*
 * recur mkmodel --arch nemotron_h: random-weight NVIDIA Nemotron-H models (dense, not the MoE) in
 * the layout llama.cpp's converter writes for NemotronHForCausalLM (its NemotronHModel, read by
 * src/models/nemotron-h.cpp). Every layer is an RMS norm (attn_norm) and then exactly one of:
 * Mamba-2 (the tensors of --arch mamba2), GQA attention without positional encoding, or an MLP
 * ffn_down . relu(ffn_up . h)^2 without a gate; then the residual add. --pattern gives the kinds
 * as the checkpoint's hybrid_override_pattern does: M Mamba-2, * attention, - MLP. The file
 * tells them apart by two per-layer arrays: a layer is Mamba-2 when both its head_count_kv and its
 * feed_forward_length are 0, attention when only feed_forward_length is 0, else MLP.
 * tests/ref/nemotron_ref.py is the forward pass they define.
 *
 * Nemotron-H-8B-Base-8K's shape (NVIDIA's Megatron-Bridge model page): hidden 4096, 52 layers,
 * pattern
 *   M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-
 * (24 Mamba-2, 4 attention, 24 MLP), 32 attention heads with 8 K/V heads of head_dim 128,
 * Mamba-2 with 128 heads of 64 (d_inner 8192), state 128, ff 21504; conv 4, 8 groups, eps 1e-5
 * and a vocabulary of 131072 are from memory of its config.json, not checked here. A small
 * model with the same proportions (the pattern's first 13 layers, all three kinds):
 *   recur mkmodel OUT --arch nemotron_h --embd 64 --layers 13 --pattern 'M-M-M-M*-M-M-'
 *     --attn-heads 4 --attn-kv-heads 1 --attn-head-dim 16 --inner 128 --heads 8 --groups 2
 *     --state 16 --ff 336 --vocab N --seed S
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "tools.h"

/* The layer kinds, as hybrid_override_pattern spells them. */
#define KIND_MAMBA 'M'
#define KIND_ATTN  '*'
#define KIND_MLP   '-'

/* The kind of layer l: --pattern's character, or the default cycle M * - (so that three layers
 * already hold one of each). */
static char kind(const struct mk *m, uint32_t l) {
    static const char cycle[] = {KIND_MAMBA, KIND_ATTN, KIND_MLP};
    return m->pattern ? m->pattern[l] : cycle[l % 3];
}

/* ---- flags ---------------------------------------------------------------------------------- */

static int parse(const char *const *given, struct mk *m) {
    m->tied = given[F_TIED] != NULL;
    m->pattern = given[F_PATTERN];
    if (m->pattern) {
        size_t n = strlen(m->pattern);
        size_t bad = strspn(m->pattern, "M*-");
        if (bad < n)
            return mk_usage_error("--pattern: '%c' in '%s' is not a layer kind (M: Mamba-2, *: "
                                  "attention, -: MLP)",
                                  m->pattern[bad], m->pattern);
        if (n != m->n_layer)
            return mk_usage_error("--pattern: '%s' has %zu layers, --layers is %u", m->pattern, n,
                                  m->n_layer);
    }
    /* llama.cpp takes any d_inner here (the converter's is mamba_num_heads * mamba_head_dim) */
    if ((uint64_t)m->n_embd * 2 > INT32_MAX)
        return mk_usage_error("--embd %s is too large: the default d_inner = 2*embd must fit an "
                              "int32",
                              given[F_EMBD]);
    m->d_inner = 2 * m->n_embd;
    m->d_conv = 4;
    m->n_group = 1;
    m->n_ff = (uint64_t)m->n_embd * 4 > INT32_MAX ? INT32_MAX : m->n_embd * 4;
    m->n_attn_head = m->n_embd % 16 == 0 ? m->n_embd / 16 : 1;
    if ((given[F_INNER] && !mk_parse_size("--inner", given[F_INNER], 1, &m->d_inner)) ||
        (given[F_CONV] && !mk_parse_size("--conv", given[F_CONV], 1, &m->d_conv)) ||
        (given[F_GROUPS] && !mk_parse_size("--groups", given[F_GROUPS], 1, &m->n_group)) ||
        (given[F_FF] && !mk_parse_size("--ff", given[F_FF], 1, &m->n_ff)) ||
        (given[F_ATTN_HEADS] &&
         !mk_parse_size("--attn-heads", given[F_ATTN_HEADS], 1, &m->n_attn_head))) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    m->n_head = m->d_inner / 64 ? m->d_inner / 64 : 1;
    m->attn_head_dim = m->n_embd / m->n_attn_head ? m->n_embd / m->n_attn_head : 1;
    m->n_attn_kv_head = m->n_attn_head % 2 == 0 ? m->n_attn_head / 2 : m->n_attn_head;
    if ((given[F_HEADS] && !mk_parse_size("--heads", given[F_HEADS], 1, &m->n_head)) ||
        (given[F_ATTN_HEAD_DIM] &&
         !mk_parse_size("--attn-head-dim", given[F_ATTN_HEAD_DIM], 1, &m->attn_head_dim)) ||
        (given[F_ATTN_KV_HEADS] &&
         !mk_parse_size("--attn-kv-heads", given[F_ATTN_KV_HEADS], 1, &m->n_attn_kv_head))) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    if (m->d_inner % m->n_head != 0)
        return mk_usage_error("--heads %u does not divide d_inner %u", m->n_head, m->d_inner);
    if (m->n_head % m->n_group != 0)
        return mk_usage_error("--groups %u does not divide the %u heads", m->n_group, m->n_head);
    if (m->n_attn_head % m->n_attn_kv_head != 0)
        return mk_usage_error("--attn-kv-heads %u does not divide the %u attention heads",
                              m->n_attn_kv_head, m->n_attn_head);
    if ((uint64_t)m->n_attn_head * m->attn_head_dim > INT32_MAX)
        return mk_usage_error("--attn-heads %u times --attn-head-dim %u does not fit an int32",
                              m->n_attn_head, m->attn_head_dim);
    return TOOL_OK;
}

/* ---- keys ----------------------------------------------------------------------------------- */

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    uint32_t *kv = malloc(sizeof *kv * m->n_layer);
    uint32_t *ff = malloc(sizeof *ff * m->n_layer);
    if (!kv || !ff) {
        rcore_error_set("out of memory (%u layers)", m->n_layer);
        free(kv);
        free(ff);
        return false;
    }
    /* the converter's arrays: K/V heads on attention layers, the MLP length on MLP layers */
    for (uint32_t l = 0; l < m->n_layer; l++) {
        kv[l] = kind(m, l) == KIND_ATTN ? m->n_attn_kv_head : 0;
        ff[l] = kind(m, l) == KIND_MLP ? m->n_ff : 0;
    }
    /* The keys NemotronHModel (through GraniteHybridModel, LlamaModel and TextModel) writes for
     * a dense checkpoint: 2^20 context (no RoPE), key/value length = head_dim,
     * rope.dimension_count = head_dim and rope.scaling.finetuned = false (RoPE off), the
     * config's layer_norm_epsilon as attention.layer_norm_epsilon (llama.cpp's loader requires
     * it and uses it for the RMS norms when layer_norm_rms_epsilon is absent, as it is),
     * time_step_rank = the SSM heads. */
    const char *a = "nemotron_h";
    char key[80];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    bool ok =
        rgguf_writer_set_str(w, "general.architecture", a) &&
        rgguf_writer_set_str(w, "general.name", "recur random nemotron_h") &&
        rgguf_writer_set_u32(w, "general.file_type", mk_file_type(m)) &&
        rgguf_writer_set_u32(w, KEY("block_count"), m->n_layer) &&
        rgguf_writer_set_u32(w, KEY("context_length"), 1u << 20) &&
        rgguf_writer_set_u32(w, KEY("embedding_length"), m->n_embd) &&
        rgguf_writer_set_arr(w, KEY("feed_forward_length"), RGGUF_UINT32, ff, m->n_layer) &&
        rgguf_writer_set_u32(w, KEY("attention.head_count"), m->n_attn_head) &&
        rgguf_writer_set_arr(w, KEY("attention.head_count_kv"), RGGUF_UINT32, kv, m->n_layer) &&
        rgguf_writer_set_f32(w, KEY("rope.freq_base"), 10000.0f) &&
        rgguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), m->eps) &&
        rgguf_writer_set_u32(w, KEY("attention.key_length"), m->attn_head_dim) &&
        rgguf_writer_set_u32(w, KEY("attention.value_length"), m->attn_head_dim) &&
        rgguf_writer_set_u32(w, KEY("vocab_size"), m->n_vocab) &&
        rgguf_writer_set_u32(w, KEY("rope.dimension_count"), m->attn_head_dim) &&
        rgguf_writer_set_u32(w, KEY("ssm.conv_kernel"), m->d_conv) &&
        rgguf_writer_set_u32(w, KEY("ssm.state_size"), m->d_state) &&
        rgguf_writer_set_u32(w, KEY("ssm.group_count"), m->n_group) &&
        rgguf_writer_set_u32(w, KEY("ssm.inner_size"), m->d_inner) &&
        rgguf_writer_set_u32(w, KEY("ssm.time_step_rank"), m->n_head) &&
        rgguf_writer_set_bool(w, KEY("rope.scaling.finetuned"), false);
#undef KEY
    free(kv);
    free(ff);
    return ok;
}

/* ---- tensors -------------------------------------------------------------------------------- */

static bool add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name, uint32_t type,
                       int64_t ne0, int64_t ne1, enum init init, double scale) {
    const int64_t ne[2] = {ne0, ne1};
    return mk_add_tensor(w, m, name, NULL, type, ne1 ? 2 : 1, ne, init, scale);
}

/* Linear weights ~ N(0, 1/fan_in), fan_in = ne[0], so that activations keep their scale. */
#define LIN(fan_in) (1.0 / sqrt((double)(fan_in)))

static bool add_layer(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t embd = m->n_embd, inner = m->d_inner, state = m->d_state, conv = m->d_conv;
    const int64_t heads = m->n_head, groups = m->n_group, conv_dim = inner + 2 * groups * state;
    const int64_t in_proj = 2 * inner + 2 * groups * state + heads;
    const int64_t hd = m->attn_head_dim, q = hd * m->n_attn_head, kv = hd * m->n_attn_kv_head;
    const int64_t ff = m->n_ff;
    const uint32_t wt = m->wtype;
    /* As for granitehybrid: Q and K larger by head_dim^(1/4) each give q.k/sqrt(head_dim) a unit
     * spread, so that which past token a head attends to matters. */
    const double qk = LIN(embd) * pow((double)hd, 0.25);
    char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
    if (!add_tensor(w, m, NAME("attn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0))
        return false;
    switch (kind(m, l)) {
    case KIND_MAMBA:
        return add_tensor(w, m, NAME("ssm_in.weight"), wt, embd, in_proj, INIT_NORMAL, LIN(embd)) &&
               add_tensor(w, m, NAME("ssm_conv1d.weight"), RGGUF_F32, conv, conv_dim, INIT_NORMAL,
                          LIN(conv)) &&
               add_tensor(w, m, NAME("ssm_conv1d.bias"), RGGUF_F32, conv_dim, 0, INIT_NORMAL,
                          0.1) &&
               add_tensor(w, m, NAME("ssm_dt.bias"), RGGUF_F32, heads, 0, INIT_DT_BIAS, 0) &&
               add_tensor(w, m, NAME("ssm_a"), RGGUF_F32, 1, heads, INIT_A_HEAD, 0) &&
               add_tensor(w, m, NAME("ssm_d"), RGGUF_F32, 1, heads, INIT_NEAR_ONE, 0) &&
               add_tensor(w, m, NAME("ssm_norm.weight"), RGGUF_F32, inner / groups, groups,
                          INIT_NEAR_ONE, 0) &&
               add_tensor(w, m, NAME("ssm_out.weight"), wt, inner, embd, INIT_NORMAL, LIN(inner));
    case KIND_ATTN:
        return add_tensor(w, m, NAME("attn_q.weight"), wt, embd, q, INIT_NORMAL, qk) &&
               add_tensor(w, m, NAME("attn_k.weight"), wt, embd, kv, INIT_NORMAL, qk) &&
               add_tensor(w, m, NAME("attn_v.weight"), wt, embd, kv, INIT_NORMAL, LIN(embd)) &&
               add_tensor(w, m, NAME("attn_output.weight"), wt, q, embd, INIT_NORMAL, LIN(q)) &&
               mk_add_qk_norm(w, m, l, hd);
    default: /* MLP: relu(x)^2 of N(0, 1) has mean square 3/2, hence the down scale */
        return add_tensor(w, m, NAME("ffn_up.weight"), wt, embd, ff, INIT_NORMAL, LIN(embd)) &&
               add_tensor(w, m, NAME("ffn_down.weight"), wt, ff, embd, INIT_NORMAL,
                          LIN(1.5 * (double)ff));
    }
#undef NAME
}

static bool add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd = m->n_embd, vocab = m->n_vocab;
    bool ok = add_tensor(w, m, "token_embd.weight", m->wtype, embd, vocab, INIT_NORMAL, 1.0);
    for (uint32_t l = 0; ok && l < m->n_layer; l++) ok = add_layer(w, m, l);
    return ok && add_tensor(w, m, "output_norm.weight", RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) &&
           (m->tied ||
            add_tensor(w, m, "output.weight", m->wtype, embd, vocab, INIT_NORMAL, LIN(embd)));
}

#undef LIN

static void summary(const struct mk *m) {
    printf("wrote %s: nemotron_h, layers %u (pattern %s), embd %u, ff %u, attention heads %u/%u "
           "of %u%s, inner %u, state %u, conv %u, ssm heads %u, groups %u, vocab %u, %s%s, seed "
           "%llu\n",
           m->out, m->n_layer, m->pattern ? m->pattern : "M*- repeated", m->n_embd, m->n_ff,
           m->n_attn_head, m->n_attn_kv_head, m->attn_head_dim, mk_qk_norm_words(m), m->d_inner,
           m->d_state, m->d_conv, m->n_head, m->n_group, m->n_vocab, rgguf_type_name(m->wtype),
           m->tied ? ", tied" : "", (unsigned long long)m->seed);
}

static const enum flag_id nemotron_only[] = {
    F_STATE, F_TIED,       F_INNER,         F_CONV,          F_HEADS,   F_GROUPS,
    F_FF,    F_ATTN_HEADS, F_ATTN_KV_HEADS, F_ATTN_HEAD_DIM, F_PATTERN, F_QK_NORM};
static const struct mk_arch archs[] = {{"nemotron_h", "Nemotron-H", 0}};

const struct mk_family mk_family_nemotron = {
    .archs = archs,
    .n_archs = sizeof archs / sizeof archs[0],
    .names = "nemotron_h",
    .only = nemotron_only,
    .n_only = sizeof nemotron_only / sizeof nemotron_only[0],
    .needs_state = true,
    .min_vocab = N_BYTES,
    .min_vocab_why = "a byte-level BPE vocabulary has at least 256 tokens, one per byte",
    .help =
        "Nemotron-H (dense): per layer one of Mamba-2, attention or a ReLU^2 MLP, as --pattern\n"
        "spells them (M, *, -; default M*- repeated). The vocabulary is cut as for Mamba.\n",
    .load_back = true,
    .parse = parse,
    .add_hparams = add_hparams,
    .add_vocab = mk_add_bpe_vocab,
    .add_tensors = add_tensors,
    .summary = summary,
};
