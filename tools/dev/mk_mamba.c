/*
 * recur mkmodel --arch mamba | mamba2: random-weight Mamba-1 and Mamba-2 models in the layout
 * llama.cpp's converter writes for MambaForCausalLM and Mamba2ForCausalLM (convert_hf_to_gguf.py;
 * docs/mamba2.md section 2), with the vocabulary file's tokenizer cut to --vocab tokens
 * (mk_vocab.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mkmodel.h"
#include "tools.h"

enum { MAMBA, MAMBA2 };

/* ---- flags ---------------------------------------------------------------------------------- */

static int check(const char *const *given, const struct mk *m) {
    if (m->arch->variant == MAMBA && (given[F_HEADS] || given[F_GROUPS]))
        return mk_usage_error("--heads and --groups are for --arch mamba2");
    return TOOL_OK;
}

static int parse(const char *const *given, struct mk *m) {
    m->tied = given[F_TIED] != NULL;
    m->dt_b_c_rms = given[F_DT_B_C_RMS] != NULL;
    /* The defaults are those of the Mamba reference code (MambaConfig). */
    uint64_t inner = 2 * (uint64_t)m->n_embd;
    if (given[F_INNER]) {
        if (!mk_parse_size("--inner", given[F_INNER], 1, &m->d_inner)) {
            mk_usage(stderr);
            return TOOL_USAGE;
        }
    } else if (inner > INT32_MAX) {
        return mk_usage_error("--embd %s is too large for the default --inner (2*embd)",
                              given[F_EMBD]);
    } else {
        m->d_inner = (uint32_t)inner;
    }
    m->d_conv = 4;
    m->dt_rank = (m->n_embd + 15) / 16;
    if ((given[F_CONV] && !mk_parse_size("--conv", given[F_CONV], 1, &m->d_conv)) ||
        (given[F_DT_RANK] && !mk_parse_size("--dt-rank", given[F_DT_RANK], 1, &m->dt_rank))) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    if (m->arch->variant == MAMBA2) {
        m->n_head = m->d_inner / 64 ? m->d_inner / 64 : 1;
        m->n_group = 1;
        if ((given[F_HEADS] && !mk_parse_size("--heads", given[F_HEADS], 1, &m->n_head)) ||
            (given[F_GROUPS] && !mk_parse_size("--groups", given[F_GROUPS], 1, &m->n_group))) {
            mk_usage(stderr);
            return TOOL_USAGE;
        }
        if (m->d_inner % m->n_head != 0)
            return mk_usage_error("--heads %u does not divide d_inner %u", m->n_head, m->d_inner);
        if (m->n_head % m->n_group != 0)
            return mk_usage_error("--groups %u does not divide the %u heads", m->n_group,
                                  m->n_head);
        if (m->dt_b_c_rms) return mk_usage_error("--dt-b-c-rms is for --arch mamba");
    }
    return TOOL_OK;
}

/* ---- keys ----------------------------------------------------------------------------------- */

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    const bool mamba2 = m->arch->variant == MAMBA2;
    /* Keys and values as llama.cpp's convert_hf_to_gguf.py writes them for MambaForCausalLM
     * and Mamba2ForCausalLM (it too writes zero feed-forward length and head count, and a 1M
     * context since the model has no positional limit; for mamba2, time_step_rank is the
     * number of SSM heads). */
    const char *a = mamba2 ? "mamba2" : "mamba";
    char key[64];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    return rgguf_writer_set_str(w, "general.architecture", a) &&
           rgguf_writer_set_str(w, "general.name",
                                mamba2 ? "recur random mamba2" : "recur random mamba") &&
           rgguf_writer_set_u32(w, "general.file_type", mk_file_type(m)) &&
           rgguf_writer_set_u32(w, KEY("context_length"), 1u << 20) &&
           rgguf_writer_set_u32(w, KEY("embedding_length"), m->n_embd) &&
           rgguf_writer_set_u32(w, KEY("feed_forward_length"), 0) &&
           rgguf_writer_set_u32(w, KEY("attention.head_count"), 0) &&
           rgguf_writer_set_u32(w, KEY("block_count"), m->n_layer) &&
           rgguf_writer_set_u32(w, KEY("ssm.conv_kernel"), m->d_conv) &&
           rgguf_writer_set_u32(w, KEY("ssm.inner_size"), m->d_inner) &&
           rgguf_writer_set_u32(w, KEY("ssm.state_size"), m->d_state) &&
           rgguf_writer_set_u32(w, KEY("ssm.time_step_rank"), mamba2 ? m->n_head : m->dt_rank) &&
           (!mamba2 || rgguf_writer_set_u32(w, KEY("ssm.group_count"), m->n_group)) &&
           (!m->dt_b_c_rms || rgguf_writer_set_bool(w, KEY("ssm.dt_b_c_rms"), true)) &&
           rgguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->eps);
#undef KEY
}

/* ---- tensors -------------------------------------------------------------------------------- */

/* A 1-D (ne1 == 0) or 2-D tensor drawn from its own name's generator. */
static bool add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name, uint32_t type,
                       int64_t ne0, int64_t ne1, enum init init, double scale) {
    const int64_t ne[2] = {ne0, ne1};
    return mk_add_tensor(w, m, name, NULL, type, ne1 ? 2 : 1, ne, init, scale);
}

/* Mamba-2's tensors (docs/mamba2.md section 2). */
static bool add_layers_mamba2(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd = m->n_embd, inner = m->d_inner, state = m->d_state, conv = m->d_conv;
    const int64_t heads = m->n_head, groups = m->n_group, conv_dim = inner + 2 * groups * state;
    const int64_t in_proj = 2 * inner + 2 * groups * state + heads;
    const uint32_t wt = m->wtype;
#define LIN(fan_in) (1.0 / sqrt((double)(fan_in)))
    for (uint32_t l = 0; l < m->n_layer; l++) {
        char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
        if (!add_tensor(w, m, NAME("attn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) ||
            !add_tensor(w, m, NAME("ssm_in.weight"), wt, embd, in_proj, INIT_NORMAL, LIN(embd)) ||
            !add_tensor(w, m, NAME("ssm_conv1d.weight"), RGGUF_F32, conv, conv_dim, INIT_NORMAL,
                        LIN(conv)) ||
            !add_tensor(w, m, NAME("ssm_conv1d.bias"), RGGUF_F32, conv_dim, 0, INIT_NORMAL, 0.1) ||
            !add_tensor(w, m, NAME("ssm_dt.bias"), RGGUF_F32, heads, 0, INIT_DT_BIAS, 0) ||
            !add_tensor(w, m, NAME("ssm_a"), RGGUF_F32, 1, heads, INIT_A_HEAD, 0) ||
            !add_tensor(w, m, NAME("ssm_d"), RGGUF_F32, 1, heads, INIT_NEAR_ONE, 0) ||
            !add_tensor(w, m, NAME("ssm_norm.weight"), RGGUF_F32, inner / groups, groups,
                        INIT_NEAR_ONE, 0) ||
            !add_tensor(w, m, NAME("ssm_out.weight"), wt, inner, embd, INIT_NORMAL, LIN(inner)))
            return false;
#undef NAME
    }
#undef LIN
    return true;
}

static bool add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd = m->n_embd, vocab = m->n_vocab, inner = m->d_inner;
    const int64_t state = m->d_state, conv = m->d_conv, rank = m->dt_rank;
    const uint32_t wt = m->wtype;
    /* Linear weights ~ N(0, 1/fan_in), fan_in = ne[0], so that activations keep their scale. */
#define LIN(fan_in) (1.0 / sqrt((double)(fan_in)))
    if (!add_tensor(w, m, "token_embd.weight", wt, embd, vocab, INIT_NORMAL, 1.0)) return false;
    for (uint32_t l = 0; l < (m->arch->variant == MAMBA2 ? 0 : m->n_layer); l++) {
        char name[64];
#define NAME(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
        if (!add_tensor(w, m, NAME("attn_norm.weight"), RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0) ||
            !add_tensor(w, m, NAME("ssm_in.weight"), wt, embd, 2 * inner, INIT_NORMAL, LIN(embd)) ||
            !add_tensor(w, m, NAME("ssm_conv1d.weight"), RGGUF_F32, conv, inner, INIT_NORMAL,
                        LIN(conv)) ||
            !add_tensor(w, m, NAME("ssm_conv1d.bias"), RGGUF_F32, inner, 0, INIT_NORMAL, 0.1) ||
            !add_tensor(w, m, NAME("ssm_x.weight"), wt, inner, rank + 2 * state, INIT_NORMAL,
                        LIN(inner)) ||
            /* Scaled down so that dt stays near softplus(dt_bias), the range Mamba is
             * initialised to, and the scan neither freezes nor forgets at once. */
            !add_tensor(w, m, NAME("ssm_dt.weight"), wt, rank, inner, INIT_NORMAL,
                        0.1 * LIN(rank)) ||
            !add_tensor(w, m, NAME("ssm_dt.bias"), RGGUF_F32, inner, 0, INIT_DT_BIAS, 0) ||
            !add_tensor(w, m, NAME("ssm_a"), RGGUF_F32, state, inner, INIT_A, 0) ||
            !add_tensor(w, m, NAME("ssm_d"), RGGUF_F32, inner, 0, INIT_NEAR_ONE, 0) ||
            !add_tensor(w, m, NAME("ssm_out.weight"), wt, inner, embd, INIT_NORMAL, LIN(inner)))
            return false;
#undef NAME
    }
    if (m->arch->variant == MAMBA2 && !add_layers_mamba2(w, m)) return false;
    if (!add_tensor(w, m, "output_norm.weight", RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0)) return false;
    if (!m->tied && !add_tensor(w, m, "output.weight", wt, embd, vocab, INIT_NORMAL, LIN(embd)))
        return false;
#undef LIN
    return true;
}

static void summary(const struct mk *m) {
    switch (m->arch->variant) {
    case MAMBA:
        printf("wrote %s: mamba, layers %u, embd %u, inner %u, state %u, conv %u, dt_rank %u, "
               "vocab %u, %s%s%s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->d_inner, m->d_state, m->d_conv, m->dt_rank,
               m->n_vocab, rgguf_type_name(m->wtype), m->tied ? ", tied" : "",
               m->dt_b_c_rms ? ", dt_b_c_rms" : "", (unsigned long long)m->seed);
        break;
    case MAMBA2:
        printf("wrote %s: mamba2, layers %u, embd %u, inner %u, state %u, conv %u, heads %u, "
               "groups %u, vocab %u, %s%s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->d_inner, m->d_state, m->d_conv, m->n_head,
               m->n_group, m->n_vocab, rgguf_type_name(m->wtype), m->tied ? ", tied" : "",
               (unsigned long long)m->seed);
        break;
    }
}

/* The flags that an RWKV model has no use for: no SSM state, convolution or tied output
 * (llama.cpp's RWKV loaders require output.weight). */
static const enum flag_id mamba_only[] = {F_STATE,   F_TIED,       F_INNER, F_CONV,
                                          F_DT_RANK, F_DT_B_C_RMS, F_HEADS, F_GROUPS};
static const struct mk_arch archs[] = {{"mamba", "Mamba-1", MAMBA}, {"mamba2", "Mamba-2", MAMBA2}};

const struct mk_family mk_family_mamba = {
    .archs = archs,
    .n_archs = sizeof archs / sizeof archs[0],
    .names = "mamba and mamba2",
    .only = mamba_only,
    .n_only = sizeof mamba_only / sizeof mamba_only[0],
    .needs_state = true,
    .min_vocab = N_BYTES,
    .min_vocab_why = "a byte-level BPE vocabulary has at least 256 tokens, one per byte",
    .help = "Mamba: the first N tokens of the vocabulary file are kept, with the merges among\n"
            "them. When its bos/eos ids do not fit, they become the last kept token, marked as a\n"
            "control token (and the merge that made it is dropped).\n",
    .load_back = true,
    .check = check,
    .parse = parse,
    .add_hparams = add_hparams,
    .add_vocab = mk_add_bpe_vocab,
    .add_tensors = add_tensors,
    .summary = summary,
};
