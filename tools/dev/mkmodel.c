/*
 * recur mkmodel: writes a model with random weights in exactly the GGUF layout that llama.cpp's
 * converter produces (keys, tensor names, shapes, types). Such models let tests run every code
 * path (and llama.cpp itself) without downloading a checkpoint. This file holds the flags, the
 * table of architecture families (each family in its own file: mk_mamba.c for Mamba-1 and
 * Mamba-2, mk_rwkv.c for RWKV-6 and RWKV-7, mk_granite.c for Granite 4.0-H, mk_falcon_h1.c for
 * Falcon-H1, mk_nemotron.c for Nemotron-H; their vocabularies in mk_vocab.c), the drawing of
 * tensors, and the command, which runs the chosen family's steps in order (mkmodel.h).
 *
 * Every tensor is drawn from its own generator, seeded from --seed and the tensor's name, so
 * a value does not depend on the order of the tensors or on the other flags: the f16 and bf16
 * models of a seed are the f32 model rounded, and --tied only drops output.weight.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"
#include "mkmodel.h"
#include "dev.h"
#include "tools.h"

/* ---- flags -------------------------------------------------------------------------------- */

struct flag {
    const char *name;
    const char *metavar; /* NULL: a switch that takes no value */
    const char *help;
};

static const struct flag flags[F_COUNT] = {
    [F_ARCH] = {"--arch", "ARCH", NULL}, /* its help names the architectures of the table */
    [F_EMBD] = {"--embd", "N", "embedding length n_embd (required)"},
    [F_LAYERS] = {"--layers", "N", "number of layers (required)"},
    [F_VOCAB] = {"--vocab", "N", "vocabulary size, 256 (rwkv: 257) up to the file's (required)"},
    [F_STATE] = {"--state", "N",
                 "mamba, mamba2, granitehybrid, falcon-h1, nemotron_h: SSM state size d_state "
                 "(required)"},
    [F_SEED] = {"--seed", "S", "seed of the random weights, 0 to 2^64-1 (required)"},
    [F_TYPE] = {"--type", "T", "type of the weight matrices: f32, f16, bf16 (default f32)"},
    [F_TIED] = {"--tied", NULL,
                "mamba, mamba2, granitehybrid, falcon-h1, nemotron_h: no output.weight, the "
                "output is token_embd's"},
    [F_INNER] = {"--inner", "N", "mamba, mamba2, falcon-h1, nemotron_h: d_inner (default 2*embd)"},
    [F_CONV] = {"--conv", "N",
                "mamba, mamba2, granitehybrid, falcon-h1, nemotron_h: convolution kernel d_conv "
                "(default 4)"},
    [F_DT_RANK] = {"--dt-rank", "N", "mamba: time step rank (default ceil(embd/16))"},
    [F_DT_B_C_RMS] = {"--dt-b-c-rms", NULL,
                      "mamba: RMS-normalise dt, B and C (Falcon-Mamba; default off)"},
    [F_EPS] = {"--eps", "F",
               "RMS norm (mamba, granitehybrid, falcon-h1, nemotron_h) or LayerNorm (rwkv) epsilon "
               "(default 1e-5)"},
    [F_HEADS] = {"--heads", "N",
                 "mamba2, granitehybrid, falcon-h1, nemotron_h: SSM heads (default inner/64, at "
                 "least 1)"},
    [F_GROUPS] = {"--groups", "N",
                  "mamba2, granitehybrid, falcon-h1, nemotron_h: groups of B and C (default 1)"},
    [F_HEAD_SIZE] = {"--head-size", "N", "rwkv: wkv head size, divides embd (default 64)"},
    [F_FF] = {"--ff", "N",
              "rwkv, granitehybrid, falcon-h1, nemotron_h: feed_forward_length (default rwkv6 "
              "int(embd*3.5)//32*32, rwkv7 4*embd, granitehybrid 8/3*embd rounded up to 32, "
              "falcon-h1 2*embd, nemotron_h 4*embd)"},
    [F_RESCALE] = {"--rescale", "N", "rwkv6: halve the residual every N layers (default 0: never)"},
    [F_MIX_DIM] = {"--mix-dim", "N",
                   "rwkv6: time_mix_extra_dim D_mix (default 32, 64 when embd is 4096)"},
    [F_DECAY_DIM] = {"--decay-dim", "N",
                     "rwkv6: time_decay_extra_dim D_dec (default 64, 128 when embd is 4096)"},
    [F_LORA_W] = {"--lora-w", "N",
                  "rwkv7: decay LoRA rank (default max(1, round(embd^0.5*1.8/32))*32)"},
    [F_LORA_A] = {"--lora-a", "N",
                  "rwkv7: iclr LoRA rank (default max(1, round(embd^0.5*1.8/32))*32)"},
    [F_LORA_V] = {"--lora-v", "N",
                  "rwkv7: value residual LoRA rank (default max(1, round(embd^0.5*1.3/32))*32)"},
    [F_LORA_G] = {"--lora-g", "N",
                  "rwkv7: gate LoRA rank (default max(1, round(embd^0.8*0.6/32))*32)"},
    [F_VOCAB_FILE] = {"--vocab-file", "PATH",
                      "GGUF holding a gpt2 (byte-level BPE) or, for mamba and mamba2, a llama "
                      "(SentencePiece) tokenizer (default $RECUR_VOCAB_FILE; one of the two is "
                      "required, e.g. tests/data/ggml-vocab-gpt-2.gguf)"},
    [F_CHAT_TEMPLATE] = {"--chat-template", "FILE",
                         "write FILE's text as tokenizer.chat_template (replacing the vocabulary "
                         "file's)"},
    [F_PRE] = {"--pre", "NAME",
               "gpt2: tokenizer.ggml.pre to write (default: the vocabulary file's; \"default\" "
               "when it has none, as llama.cpp reads a missing key)"},
    [F_FIM] = {"--fim", "PRE,SUF,MID[,REP,SEP]",
               "write tokenizer.ggml.fim_{pre,suf,mid}_token_id (and fim_{rep,sep}_token_id) "
               "naming these token ids (each below --vocab), so that the model can serve "
               "/infill"},
    [F_ATTN_LAYERS] = {"--attn-layers", "LIST",
                       "granitehybrid: the attention layers, e.g. 1,3 (default every odd layer); "
                       "the others are Mamba-2"},
    [F_ATTN_HEADS] =
        {"--attn-heads", "N",
         "granitehybrid, falcon-h1, nemotron_h: attention (query) heads, divide embd for "
         "granitehybrid (default embd/16 when 16 divides embd, else 1)"},
    [F_ATTN_KV_HEADS] =
        {"--attn-kv-heads", "N",
         "granitehybrid, falcon-h1, nemotron_h: K/V heads, divide the heads (default heads/2 "
         "when even, else heads)"},
    [F_EMBD_SCALE] = {"--embd-scale", "F",
                      "granitehybrid: embedding_scale, times the token embeddings (default 12)"},
    [F_RESIDUAL_SCALE] = {"--residual-scale", "F",
                          "granitehybrid: residual_scale, times each branch (default 0.246)"},
    [F_ATTN_SCALE] = {"--attn-scale", "F",
                      "granitehybrid: attention.scale of q.k (default 1/head_dim)"},
    [F_LOGIT_SCALE] = {"--logit-scale", "F",
                       "granitehybrid: logit_scale, divides the logits (default 3)"},
    [F_ROPE_BASE] = {"--rope-base", "F", "falcon-h1: rope.freq_base of NeoX RoPE (default 1e11)"},
    [F_SSM_NORM] = {"--ssm-norm", NULL,
                    "falcon-h1: write ssm_norm, the grouped RMS norm after the gate (default off)"},
    [F_PATTERN] = {"--pattern", "KINDS",
                   "nemotron_h: one character per layer, M Mamba-2, * attention, - MLP, as "
                   "hybrid_override_pattern (default M*- repeated)"},
    [F_ATTN_HEAD_DIM] = {"--attn-head-dim", "N",
                         "falcon-h1, nemotron_h: attention head_dim, key_length = value_length "
                         "(default embd/attn-heads)"},
    [F_QK_NORM] = {"--qk-norm", "FORM",
                   "granitehybrid, falcon-h1, nemotron_h: RMS norms of q and k before RoPE in "
                   "every attention layer (attn_q_norm, attn_k_norm, f32 near 1): head (one "
                   "weight of head_dim for every head, as Qwen3) or vector (the whole projected "
                   "vector, as OLMo2); default none"},
    [F_HELP] = {"--help", NULL, "show this help"},
};

/* The architecture families, each in its own file (mkmodel.h says what a family brings): a new
 * one is a new file and a line here. */
static const struct mk_family *const families[] = {&mk_family_mamba, &mk_family_rwkv,
                                                   &mk_family_granite, &mk_family_falcon_h1,
                                                   &mk_family_nemotron};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* Writes the names of every architecture to out, as "a, b, c" + last + "d" (cap bytes). */
static void arch_names(char *out, size_t cap, const char *last) {
    size_t n = 0, k = 0, total = 0;
    for (size_t f = 0; f < N_FAMILIES; f++) total += families[f]->n_archs;
    out[0] = '\0';
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (size_t a = 0; a < families[f]->n_archs; a++, k++)
            if (n < cap)
                n += (size_t)snprintf(out + n, cap - n, "%s%s",
                                      k == 0           ? ""
                                      : k + 1 == total ? last
                                                       : ", ",
                                      families[f]->archs[a].name);
}

void mk_usage(FILE *out) {
    char titles[256] = "", state[128] = "", no_state[128] = "", names[256];
    size_t nt = 0, ns = 0, nn = 0, k = 0, total = 0;
    for (size_t f = 0; f < N_FAMILIES; f++) total += families[f]->n_archs;
    for (size_t f = 0; f < N_FAMILIES; f++) {
        const struct mk_family *fam = families[f];
        for (size_t a = 0; a < fam->n_archs && nt < sizeof titles; a++, k++)
            nt += (size_t)snprintf(titles + nt, sizeof titles - nt, "%s%s",
                                   k == 0           ? ""
                                   : k + 1 == total ? " or "
                                                    : ", ",
                                   fam->archs[a].title);
        char *s = fam->needs_state ? state : no_state;
        size_t *n = fam->needs_state ? &ns : &nn;
        if (*n < sizeof state)
            *n +=
                (size_t)snprintf(s + *n, sizeof state - *n, "%s%s", *n ? " and " : "", fam->names);
    }
    fprintf(out,
            "usage: recur mkmodel OUT.gguf --arch ARCH --embd N --layers N --vocab N "
            "[--state N] --seed S [options]\n\n"
            "Writes a %s model with random weights in llama.cpp's GGUF\nlayout. --state is "
            "required for %s, and refused for %s.\n\n",
            titles, state, no_state);
    arch_names(names, sizeof names, " or ");
    for (int i = 0; i < F_COUNT; i++) {
        char left[40];
        snprintf(left, sizeof(left), "%s%s%s", flags[i].name, flags[i].metavar ? " " : "",
                 flags[i].metavar ? flags[i].metavar : "");
        if (i == F_ARCH)
            fprintf(out, "  %-20s architecture: %s (required)\n", left, names);
        else
            fprintf(out, "  %-20s %s\n", left, flags[i].help);
    }
    fputc('\n', out);
    for (size_t f = 0; f < N_FAMILIES; f++) fputs(families[f]->help, out);
}

int mk_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("recur mkmodel: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    mk_usage(stderr);
    return TOOL_USAGE;
}

/* Parses a decimal unsigned integer in [min, max]; prints why not (naming the flag). */
static bool parse_uint(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out) {
    if (s[0] == '-' && isdigit((unsigned char)s[1])) {
        fprintf(stderr, "recur mkmodel: %s: '%s' is negative\n\n", flag, s);
        return false;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = isdigit((unsigned char)s[0]) ? strtoull(s, &end, 10) : 0;
    if (!isdigit((unsigned char)s[0]) || *end != '\0') {
        fprintf(stderr, "recur mkmodel: %s: '%s' is not a number\n\n", flag, s);
        return false;
    }
    if (errno == ERANGE || v > max) {
        fprintf(stderr, "recur mkmodel: %s: %s is too large (at most %llu)\n\n", flag, s,
                (unsigned long long)max);
        return false;
    }
    if (v < min) {
        fprintf(stderr, "recur mkmodel: %s: %s is too small (at least %llu)\n\n", flag, s,
                (unsigned long long)min);
        return false;
    }
    *out = v;
    return true;
}

bool mk_parse_size(const char *flag, const char *s, uint64_t min, uint32_t *out) {
    uint64_t v;
    /* Sizes reach the API as int32_t. */
    if (!parse_uint(flag, s, min, INT32_MAX, &v)) return false;
    *out = (uint32_t)v;
    return true;
}

bool mk_parse_positive_f32(const char *flag, const char *s, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || isspace((unsigned char)s[0])) {
        fprintf(stderr, "recur mkmodel: %s: '%s' is not a number\n\n", flag, s);
        return false;
    }
    if (!(v > 0) || v > FLT_MAX || !((float)v > 0)) {
        fprintf(stderr, "recur mkmodel: %s: %s must be positive and fit a float32\n\n", flag, s);
        return false;
    }
    *out = (float)v;
    return true;
}

/* ---- the model's shape ---------------------------------------------------------------------- */

/* Whether flag id is one of the family's own (beyond the shared flags). */
static bool family_takes(const struct mk_family *fam, int id) {
    for (size_t i = 0; i < fam->n_only; i++)
        if ((int)fam->only[i] == id) return true;
    return false;
}

/* --fim PRE,SUF,MID[,REP,SEP]: three or five token ids of the vocabulary (m->n_vocab is set);
 * prints why not. */
static bool parse_fim(const char *s, struct mk *m) {
    const char *at = s;
    int n = 0;
    for (;;) {
        char *end = NULL;
        errno = 0;
        const unsigned long v = strtoul(at, &end, 10);
        if (end == at || !isdigit((unsigned char)at[0]) || errno || n == 5 ||
            (*end != ',' && *end != '\0')) {
            n = 0;
            break;
        }
        if (v >= m->n_vocab) {
            mk_usage_error("--fim: token id %lu is not below --vocab %u", v, m->n_vocab);
            return false;
        }
        m->fim_ids[n++] = (uint32_t)v;
        if (*end == '\0') break;
        at = end + 1;
    }
    if (n != 3 && n != 5) {
        mk_usage_error("--fim: '%s' is not three or five token ids PRE,SUF,MID[,REP,SEP]", s);
        return false;
    }
    m->n_fim = n;
    return true;
}

/* Fills *m from the command line. Returns TOOL_OK, or an exit status (help shown: -1). */
static int parse_args(int argc, char **argv, struct mk *m) {
    const char *given[F_COUNT] = {0};
    const char *out = NULL;
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && strcmp(a, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (out) return mk_usage_error("unexpected argument '%s'", a);
            out = a;
            continue;
        }
        if (strcmp(a, "-h") == 0) {
            mk_usage(stdout);
            return -1;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int id = -1;
        for (int f = 0; f < F_COUNT; f++)
            if (strlen(flags[f].name) == len && strncmp(flags[f].name, a, len) == 0) id = f;
        if (id < 0) return mk_usage_error("unknown flag '%s'", a);
        if (id == F_HELP) {
            mk_usage(stdout);
            return -1;
        }
        const char *value = "";
        if (!flags[id].metavar) {
            if (eq) return mk_usage_error("%s takes no value", flags[id].name);
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            return mk_usage_error("%s needs a value (%s)", flags[id].name, flags[id].metavar);
        }
        if (given[id]) return mk_usage_error("%s is given twice", flags[id].name);
        given[id] = value;
    }

    if (!out) return mk_usage_error("no output file given");
    if (!given[F_ARCH]) return mk_usage_error("--arch is required");
    for (size_t f = 0; f < N_FAMILIES && !m->arch; f++)
        for (size_t a = 0; a < families[f]->n_archs; a++)
            if (strcmp(given[F_ARCH], families[f]->archs[a].name) == 0) {
                m->family = families[f];
                m->arch = &families[f]->archs[a];
            }
    if (!m->arch) {
        char known[256];
        arch_names(known, sizeof known, ", ");
        return mk_usage_error("--arch: unknown architecture '%s' (known: %s)", given[F_ARCH],
                              known);
    }
    const struct mk_family *fam = m->family;
    /* --state is the one flag that only one family requires. */
    static const enum flag_id required[] = {F_EMBD, F_LAYERS, F_VOCAB, F_STATE, F_SEED};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (!given[required[i]] && !(!fam->needs_state && required[i] == F_STATE))
            return mk_usage_error("%s is required", flags[required[i]].name);
    int rc = fam->check ? fam->check(given, m) : TOOL_OK;
    if (rc != TOOL_OK) return rc;
    /* the flags that only other families take */
    for (int id = 0; id < F_COUNT; id++) {
        if (!given[id] || family_takes(fam, id)) continue;
        char owners[256] = "";
        size_t n = 0;
        for (size_t f = 0; f < N_FAMILIES; f++)
            if (family_takes(families[f], id) && n < sizeof owners)
                n += (size_t)snprintf(owners + n, sizeof owners - n, "%s%s", n ? " or " : "",
                                      families[f]->names);
        if (n)
            return mk_usage_error("%s is for --arch %s, not %s", flags[id].name, owners,
                                  given[F_ARCH]);
    }

    m->out = out;
    if (!mk_parse_size("--embd", given[F_EMBD], 1, &m->n_embd) ||
        !mk_parse_size("--layers", given[F_LAYERS], 1, &m->n_layer) ||
        !mk_parse_size("--vocab", given[F_VOCAB], 0, &m->n_vocab) ||
        (fam->needs_state && !mk_parse_size("--state", given[F_STATE], 1, &m->d_state)) ||
        !parse_uint("--seed", given[F_SEED], 0, UINT64_MAX, &m->seed)) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }

    if (m->n_vocab < fam->min_vocab)
        return mk_usage_error("--vocab: %u is too small: %s", m->n_vocab, fam->min_vocab_why);

    m->wtype = RGGUF_F32;
    if (given[F_TYPE]) {
        const char *t = given[F_TYPE];
        if (strcmp(t, "f32") == 0)
            m->wtype = RGGUF_F32;
        else if (strcmp(t, "f16") == 0)
            m->wtype = RGGUF_F16;
        else if (strcmp(t, "bf16") == 0)
            m->wtype = RGGUF_BF16;
        else
            return mk_usage_error("--type: unknown type '%s' (known: f32, f16, bf16)", t);
    }
    m->eps = 1e-5f;
    if (given[F_EPS]) {
        const char *s = given[F_EPS];
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || *end != '\0' || isspace((unsigned char)s[0]))
            return mk_usage_error("--eps: '%s' is not a number", s);
        /* The key is a float32: the value must stay positive and finite once rounded. */
        if (!(v > 0) || v > FLT_MAX || !((float)v > 0))
            return mk_usage_error("--eps: %s must be positive and fit a float32", s);
        m->eps = (float)v;
    }
    /* no default compiled in: the program carries no path of the source tree */
    m->vocab_file = given[F_VOCAB_FILE] ? given[F_VOCAB_FILE] : getenv("RECUR_VOCAB_FILE");
    if (!m->vocab_file || !*m->vocab_file)
        return mk_usage_error("give the vocabulary with --vocab-file FILE or $RECUR_VOCAB_FILE "
                              "(e.g. tests/data/ggml-vocab-gpt-2.gguf)");
    m->chat_template_file = given[F_CHAT_TEMPLATE];
    m->pre = given[F_PRE];
    if (given[F_FIM] && !parse_fim(given[F_FIM], m)) return TOOL_USAGE;
    /* only the hybrid families take it (their tables), so it reaches no other */
    m->qk_norm = MK_QK_NONE;
    if (given[F_QK_NORM]) {
        if (strcmp(given[F_QK_NORM], "head") == 0)
            m->qk_norm = MK_QK_HEAD;
        else if (strcmp(given[F_QK_NORM], "vector") == 0)
            m->qk_norm = MK_QK_VECTOR;
        else
            return mk_usage_error("--qk-norm: unknown form '%s' (known: head, vector)",
                                  given[F_QK_NORM]);
    }
    return fam->parse(given, m);
}

/* ---- random numbers ------------------------------------------------------------------------- */

/* rcore_rng (xoshiro256**) gives the same stream on every platform, so that a seed names a
 * model; each tensor gets its own generator from the seed and its name. */
uint64_t mk_fnv1a64(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

/* One generator per tensor, from the seed and the tensor's name. */
static void rng_seed(struct rcore_rng *r, uint64_t seed, const char *name) {
    rcore_rng_seed(r, seed ^ mk_fnv1a64(name, strlen(name), MK_FNV_OFFSET));
}

/* Uniform in (0, 1]: never 0, so that log() below is finite. */
static double rng_uniform(struct rcore_rng *r) {
    return (double)((rcore_rng_next(r) >> 11) + 1) * 0x1.0p-53;
}

/* Standard normal (Box-Muller; the second value is not kept, which keeps the generator
 * stateless beyond its four words). */
static double rng_normal(struct rcore_rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* ---- tensors -------------------------------------------------------------------------------- */

/* U[lo, hi): rng_uniform is (0, 1], so 1 - u is [0, 1), which covers lo exactly. */
static double rng_range(struct rcore_rng *r, double lo, double hi) {
    return lo + (1.0 - rng_uniform(r)) * (hi - lo);
}

/* n values; ne0 is the fastest dimension (rows of INIT_A). */
static void fill(float *v, size_t n, size_t ne0, enum init init, double scale,
                 struct rcore_rng *r) {
    switch (init) {
    case INIT_NORMAL:
        for (size_t i = 0; i < n; i++) v[i] = (float)(scale * rng_normal(r));
        break;
    case INIT_NEAR_ONE:
        for (size_t i = 0; i < n; i++) v[i] = (float)(1.0 + 0.1 * rng_normal(r));
        break;
    case INIT_A:
        for (size_t c = 0; c < n / ne0; c++)
            for (size_t k = 0; k < ne0; k++) v[c * ne0 + k] = (float)-(double)(k + 1);
        break;
    case INIT_A_HEAD:
        for (size_t i = 0; i < n; i++) v[i] = (float)-(1.0 + 15.0 * (1.0 - rng_uniform(r)));
        break;
    case INIT_DT_BIAS: {
        const double lo = log(1e-3), hi = log(1e-1);
        for (size_t i = 0; i < n; i++) {
            double dt = exp(rng_range(r, lo, hi));
            /* softplus(x) = dt  <=>  x = log(expm1(dt)) = dt + log(-expm1(-dt)), the form that
             * stays accurate for small dt (as in the Mamba reference code). */
            v[i] = (float)(dt + log(-expm1(-dt)));
        }
        break;
    }
    case INIT_UNIT:
        for (size_t i = 0; i < n; i++) v[i] = (float)rng_range(r, 0.0, 1.0);
        break;
    case INIT_RWKV6_DECAY:
        for (size_t i = 0; i < n; i++) v[i] = (float)rng_range(r, -5.0, 0.2);
        break;
    case INIT_RWKV7_W0:
        for (size_t i = 0; i < n; i++) v[i] = (float)rng_range(r, -3.0, 1.0);
        break;
    }
}

bool mk_add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name,
                   const char *seed_name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                   enum init init, double scale) {
    size_t n = 1, nbytes;
    const size_t elsize = type == RGGUF_F32 ? sizeof(float) : sizeof(uint16_t);
    bool fits = n_dims >= 1 && n_dims <= RGGUF_MAX_DIMS;
    for (uint32_t d = 0; fits && d < n_dims; d++)
        fits = ne[d] >= 1 && rcore_mul_size(n, (size_t)ne[d], &n);
    if (!fits || !rcore_mul_size(n, sizeof(float), &nbytes)) {
        rcore_error_set("tensor %s: %u dimensions of %lld x %lld x ... elements do not fit in "
                        "memory",
                        name, n_dims, (long long)ne[0], n_dims > 1 ? (long long)ne[1] : 1LL);
        return false;
    }
    float *v = malloc(nbytes);
    if (!v) {
        rcore_error_set("tensor %s: out of memory (%zu bytes)", name, nbytes);
        return false;
    }
    struct rcore_rng r;
    rng_seed(&r, m->seed, seed_name ? seed_name : name);
    fill(v, n, (size_t)ne[0], init, scale, &r);

    void *data = v;
    if (type != RGGUF_F32) {
        data = malloc(n * elsize);
        if (!data) {
            free(v);
            rcore_error_set("tensor %s: out of memory (%zu bytes)", name, n * elsize);
            return false;
        }
        rcore_row_from_f32(type == RGGUF_F16 ? RCORE_TYPE_F16 : RCORE_TYPE_BF16, data, v, n);
    }
    bool ok = rgguf_writer_add_tensor(w, name, type, n_dims, ne, data, n * elsize);
    if (data != v) free(data);
    free(v);
    return ok;
}

/* ---- the model ------------------------------------------------------------------------------ */

uint32_t mk_file_type(const struct mk *m) {
    return m->wtype == RGGUF_F16    ? FTYPE_MOSTLY_F16
           : m->wtype == RGGUF_BF16 ? FTYPE_MOSTLY_BF16
                                    : FTYPE_ALL_F32;
}

char *mk_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        rcore_error_set("%s: %s", path, strerror(errno));
        return NULL;
    }
    char *s = NULL;
    size_t len = 0, cap = 0;
    bool ok = true;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            char *t = realloc(s, cap = cap * 2 + 4096 + 1);
            if (!t) {
                rcore_error_set("%s: out of memory", path);
                ok = false;
                break;
            }
            s = t;
        }
        size_t n = fread(s + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
    }
    if (ok && ferror(f)) {
        rcore_error_set("%s: read error", path);
        ok = false;
    }
    fclose(f);
    if (ok && memchr(s, '\0', len)) {
        rcore_error_set("%s: the text holds a NUL byte", path);
        ok = false;
    }
    if (!ok) {
        free(s);
        return NULL;
    }
    s[len] = '\0';
    return s;
}

int cmd_mkmodel(int argc, char **argv) {
    struct mk m = {0};
    int rc = parse_args(argc, argv, &m);
    if (rc < 0) return TOOL_OK; /* help shown */
    if (rc != TOOL_OK) return rc;

    struct rgguf_writer *w = rgguf_writer_create();
    if (!w) {
        fprintf(stderr, "recur mkmodel: %s\n", rcore_error_get());
        return TOOL_FAIL;
    }
    if (m.chat_template_file && !(m.chat_template = mk_read_text(m.chat_template_file))) {
        fprintf(stderr, "recur mkmodel: --chat-template: %s\n", rcore_error_get());
        rgguf_writer_free(w);
        return TOOL_FAIL;
    }
    const struct mk_family *fam = m.family;
    rc = TOOL_FAIL;
    if (fam->add_hparams(w, &m)) rc = fam->add_vocab(w, &m);
    static const char *const fim_keys[5] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_rep_token_id",
        "tokenizer.ggml.fim_sep_token_id"};
    for (int i = 0; i < m.n_fim && rc == TOOL_OK; i++)
        if (!rgguf_writer_set_u32(w, fim_keys[i], m.fim_ids[i])) rc = TOOL_FAIL;
    if (rc == TOOL_OK && !(fam->add_tensors(w, &m) && rgguf_writer_write(w, m.out))) rc = TOOL_FAIL;
    if (rc == TOOL_OK && fam->load_back) {
        /* the tokenizer must load as written (an unknown --pre is refused here), else no
         * file is left behind */
        struct rgguf *g = rgguf_open(m.out, true);
        struct rvocab *v = g ? rvocab_load(g) : NULL;
        if (!v) {
            rcore_error_prefix("%s: its tokenizer does not load", m.out);
            remove(m.out);
            rc = TOOL_FAIL;
        }
        rvocab_free(v);
        rgguf_close(g);
    }
    if (rc == TOOL_FAIL) fprintf(stderr, "recur mkmodel: %s\n", rcore_error_get());
    rgguf_writer_free(w);
    free(m.chat_template);
    if (rc != TOOL_OK) return rc;
    fam->summary(&m);
    return TOOL_OK;
}

bool mk_add_qk_norm(struct rgguf_writer *w, const struct mk *m, uint32_t l, int64_t head_dim) {
    if (m->qk_norm == MK_QK_NONE) return true;
    const bool head = m->qk_norm == MK_QK_HEAD;
    const int64_t nq[1] = {head ? head_dim : head_dim * m->n_attn_head},
                  nk[1] = {head ? head_dim : head_dim * m->n_attn_kv_head};
    char q[64], k[64];
    snprintf(q, sizeof q, "blk.%u.attn_q_norm.weight", l);
    snprintf(k, sizeof k, "blk.%u.attn_k_norm.weight", l);
    return mk_add_tensor(w, m, q, NULL, RGGUF_F32, 1, nq, INIT_NEAR_ONE, 0) &&
           mk_add_tensor(w, m, k, NULL, RGGUF_F32, 1, nk, INIT_NEAR_ONE, 0);
}

const char *mk_qk_norm_words(const struct mk *m) {
    return m->qk_norm == MK_QK_HEAD     ? ", q/k norms per head"
           : m->qk_norm == MK_QK_VECTOR ? ", q/k norms of the whole vector"
                                        : "";
}
