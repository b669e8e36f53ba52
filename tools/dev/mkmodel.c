/*
 * recur mkmodel: writes a model with random weights in exactly the GGUF layout that llama.cpp's
 * converter produces (keys, tensor names, shapes, types): Mamba-1 and Mamba-2 here, with a real
 * byte-level BPE vocabulary cut from a vocabulary GGUF; RWKV-6 and RWKV-7 in mkmodel_rwkv.c,
 * with a world-style vocabulary built from the same file. Such models let tests run every code
 * path (and llama.cpp itself) without downloading a checkpoint.
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
#include "core/utf8.h"
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
    [F_ARCH] = {"--arch", "ARCH", "architecture: mamba, mamba2, rwkv6 or rwkv7 (required)"},
    [F_EMBD] = {"--embd", "N", "embedding length n_embd (required)"},
    [F_LAYERS] = {"--layers", "N", "number of layers (required)"},
    [F_VOCAB] = {"--vocab", "N", "vocabulary size, 256 (rwkv: 257) up to the file's (required)"},
    [F_STATE] = {"--state", "N", "mamba, mamba2: SSM state size d_state (required)"},
    [F_SEED] = {"--seed", "S", "seed of the random weights, 0 to 2^64-1 (required)"},
    [F_TYPE] = {"--type", "T", "type of the weight matrices: f32, f16, bf16 (default f32)"},
    [F_TIED] = {"--tied", NULL, "mamba, mamba2: no output.weight, the output is token_embd's"},
    [F_INNER] = {"--inner", "N", "mamba, mamba2: d_inner (default 2*embd)"},
    [F_CONV] = {"--conv", "N", "mamba, mamba2: convolution kernel d_conv (default 4)"},
    [F_DT_RANK] = {"--dt-rank", "N", "mamba: time step rank (default ceil(embd/16))"},
    [F_DT_B_C_RMS] = {"--dt-b-c-rms", NULL,
                      "mamba: RMS-normalise dt, B and C (Falcon-Mamba; default off)"},
    [F_EPS] = {"--eps", "F", "RMS norm (mamba) or LayerNorm (rwkv) epsilon (default 1e-5)"},
    [F_HEADS] = {"--heads", "N", "mamba2: SSM heads (default inner/64, at least 1)"},
    [F_GROUPS] = {"--groups", "N", "mamba2: groups of B and C (default 1)"},
    [F_HEAD_SIZE] = {"--head-size", "N", "rwkv: wkv head size, divides embd (default 64)"},
    [F_FF] = {"--ff", "N",
              "rwkv: feed_forward_length (default rwkv6 int(embd*3.5)//32*32, rwkv7 4*embd)"},
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
    [F_HELP] = {"--help", NULL, "show this help"},
};

void mk_usage(FILE *out) {
    fprintf(out, "usage: recur mkmodel OUT.gguf --arch ARCH --embd N --layers N --vocab N "
                 "[--state N] --seed S [options]\n\n"
                 "Writes a Mamba-1, Mamba-2, RWKV-6 or RWKV-7 model with random weights in "
                 "llama.cpp's GGUF\nlayout. --state is required for mamba and mamba2, and "
                 "refused for rwkv6 and rwkv7.\n\n");
    for (int i = 0; i < F_COUNT; i++) {
        char left[40];
        snprintf(left, sizeof(left), "%s%s%s", flags[i].name, flags[i].metavar ? " " : "",
                 flags[i].metavar ? flags[i].metavar : "");
        fprintf(out, "  %-20s %s\n", left, flags[i].help);
    }
    fprintf(out,
            "\nMamba: the first N tokens of the vocabulary file are kept, with the merges among\n"
            "them. When its bos/eos ids do not fit, they become the last kept token, marked as a\n"
            "control token (and the merge that made it is dropped).\n"
            "RWKV: a world-style vocabulary (tokenizer model \"rwkv\"): <s>, the 256 bytes, then\n"
            "the file's longer tokens as raw bytes, in its order, until N tokens.\n");
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

/* ---- the model's shape ---------------------------------------------------------------------- */

/* The flags of one family of architectures that the other has no use for: an RWKV model has
 * no SSM state, convolution or tied output (llama.cpp's loaders require output.weight), and a
 * Mamba one has no wkv heads or LoRAs. */
static const enum flag_id mamba_only[] = {F_STATE,   F_TIED,       F_INNER, F_CONV,
                                          F_DT_RANK, F_DT_B_C_RMS, F_HEADS, F_GROUPS};
static const enum flag_id rwkv_only[] = {F_HEAD_SIZE, F_FF,     F_RESCALE, F_MIX_DIM, F_DECAY_DIM,
                                         F_LORA_W,    F_LORA_A, F_LORA_V,  F_LORA_G};

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
    static const struct {
        const char *name;
        enum mk_arch arch;
    } archs[] = {
        {"mamba", MK_MAMBA}, {"mamba2", MK_MAMBA2}, {"rwkv6", MK_RWKV6}, {"rwkv7", MK_RWKV7}};
    size_t a = 0, n_archs = sizeof(archs) / sizeof(archs[0]);
    while (a < n_archs && strcmp(given[F_ARCH], archs[a].name) != 0) a++;
    if (a == n_archs)
        return mk_usage_error("--arch: unknown architecture '%s' (known: mamba, mamba2, rwkv6, "
                              "rwkv7)",
                              given[F_ARCH]);
    m->arch = archs[a].arch;
    const bool rwkv = mk_is_rwkv(m);
    /* --state is the one flag that only one family requires. */
    static const enum flag_id required[] = {F_EMBD, F_LAYERS, F_VOCAB, F_STATE, F_SEED};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        if (!given[required[i]] && !(rwkv && required[i] == F_STATE))
            return mk_usage_error("%s is required", flags[required[i]].name);
    if (rwkv && given[F_TIED])
        return mk_usage_error("--tied is for --arch mamba and mamba2: llama.cpp's %s loader "
                              "requires output.weight",
                              given[F_ARCH]);
    const enum flag_id *other = rwkv ? mamba_only : rwkv_only;
    size_t n_other = rwkv ? sizeof(mamba_only) / sizeof(mamba_only[0])
                          : sizeof(rwkv_only) / sizeof(rwkv_only[0]);
    for (size_t i = 0; i < n_other; i++)
        if (given[other[i]])
            return mk_usage_error("%s is for --arch %s, not %s", flags[other[i]].name,
                                  rwkv ? "mamba and mamba2" : "rwkv6 and rwkv7", given[F_ARCH]);

    m->out = out;
    if (m->arch == MK_MAMBA && (given[F_HEADS] || given[F_GROUPS]))
        return mk_usage_error("--heads and --groups are for --arch mamba2");
    if (!mk_parse_size("--embd", given[F_EMBD], 1, &m->n_embd) ||
        !mk_parse_size("--layers", given[F_LAYERS], 1, &m->n_layer) ||
        !mk_parse_size("--vocab", given[F_VOCAB], 0, &m->n_vocab) ||
        (!rwkv && !mk_parse_size("--state", given[F_STATE], 1, &m->d_state)) ||
        !parse_uint("--seed", given[F_SEED], 0, UINT64_MAX, &m->seed)) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }

    if (rwkv && m->n_vocab < N_BYTES + 1)
        return mk_usage_error("--vocab: %u is too small: a world vocabulary has at least %d "
                              "tokens, <s> and one per byte",
                              m->n_vocab, N_BYTES + 1);
    if (m->n_vocab < N_BYTES)
        return mk_usage_error("--vocab: %u is too small: a byte-level BPE vocabulary has at least "
                              "%d tokens, one per byte",
                              m->n_vocab, N_BYTES);

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
    m->tied = given[F_TIED] != NULL;
    m->dt_b_c_rms = given[F_DT_B_C_RMS] != NULL;

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
    if (m->pre && rwkv) return mk_usage_error("--pre: rwkv vocabularies have no pre-tokenizer");
    if (rwkv) return mk_rwkv_parse(given, m);

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
    if (m->arch == MK_MAMBA2) {
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

/* ---- random numbers ------------------------------------------------------------------------- */

/* rcore_rng (xoshiro256**) gives the same stream on every platform, so that a seed names a
 * model; each tensor gets its own generator from the seed and its name. */
static uint64_t fnv1a64(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

#define FNV_OFFSET 0xcbf29ce484222325u

/* One generator per tensor, from the seed and the tensor's name. */
static void rng_seed(struct rcore_rng *r, uint64_t seed, const char *name) {
    rcore_rng_seed(r, seed ^ fnv1a64(name, strlen(name), FNV_OFFSET));
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
    for (uint32_t l = 0; l < (m->arch == MK_MAMBA2 ? 0 : m->n_layer); l++) {
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
    if (m->arch == MK_MAMBA2 && !add_layers_mamba2(w, m)) return false;
    if (!add_tensor(w, m, "output_norm.weight", RGGUF_F32, embd, 0, INIT_NEAR_ONE, 0)) return false;
    if (!m->tied && !add_tensor(w, m, "output.weight", wt, embd, vocab, INIT_NORMAL, LIN(embd)))
        return false;
#undef LIN
    return true;
}

/* ---- vocabulary ----------------------------------------------------------------------------- */

/* Token text -> id over the kept tokens (open addressing, linear probing). */
struct token_set {
    const char **text;
    const size_t *len;
    int32_t *slot; /* token id, -1 empty */
    size_t mask;
};

static uint64_t hash2(const char *a, size_t la, const char *b, size_t lb) {
    return fnv1a64(b, lb, fnv1a64(a, la, FNV_OFFSET));
}

/* The id of the token whose text is a followed by b; -1 when none. */
static int32_t set_find(const struct token_set *s, const char *a, size_t la, const char *b,
                        size_t lb) {
    for (size_t i = hash2(a, la, b, lb) & s->mask;; i = (i + 1) & s->mask) {
        int32_t id = s->slot[i];
        if (id < 0) return -1;
        if (s->len[id] == la + lb && memcmp(s->text[id], a, la) == 0 &&
            memcmp(s->text[id] + la, b, lb) == 0)
            return id;
    }
}

static bool set_init(struct token_set *s, const char **text, const size_t *len, uint32_t n) {
    size_t cap = 1;
    while (cap < 2 * (size_t)n) cap *= 2;
    s->text = text;
    s->len = len;
    s->mask = cap - 1;
    s->slot = malloc(cap * sizeof(*s->slot));
    if (!s->slot) return false;
    for (size_t i = 0; i < cap; i++) s->slot[i] = -1;
    for (uint32_t id = 0; id < n; id++) {
        /* A duplicate text keeps its first id, as llama.cpp's token_to_id map does. */
        if (set_find(s, text[id], len[id], "", 0) >= 0) continue;
        size_t i = hash2(text[id], len[id], "", 0) & s->mask;
        while (s->slot[i] >= 0) i = (i + 1) & s->mask;
        s->slot[i] = (int32_t)id;
    }
    return true;
}

/* The text GPT-2's byte-level BPE gives byte b (bytes_to_unicode: printable bytes stand for
 * themselves, the others for U+0100 on, in order), as UTF-8. */
size_t mk_byte_text(unsigned b, char out[3]) {
    uint16_t cp[256];
    rvocab_gpt2_byte_cp(cp);
    return rcore_utf8_encode(cp[b & 0xFF], out);
}

/* The byte a token stands for, or -1 when it is not a byte token. */
static int byte_of_token(const char *text, size_t len) {
    if (len > 2) return -1; /* byte texts are one or two UTF-8 bytes */
    for (unsigned b = 0; b < N_BYTES; b++) {
        char t[3];
        size_t n = mk_byte_text(b, t);
        if (n == len && memcmp(t, text, n) == 0) return (int)b;
    }
    return -1;
}

struct vocab_cut {
    bool spm;            /* tokenizer.ggml.model "llama" (else "gpt2") */
    const float *scores; /* spm: the file's scores (the first n are kept), NULL if none */
    const char **text;   /* kept tokens' texts (point into the reader) */
    size_t *len;
    int32_t *type;       /* kept token types */
    const char **merges; /* kept merges, in rank order */
    uint64_t n_merges;
    uint32_t bos, eos;
    struct token_set set;
};

static void vocab_cut_free(struct vocab_cut *v) {
    free(v->text);
    free(v->len);
    free(v->type);
    free(v->merges);
    free(v->set.slot);
}

static bool has_key(const struct rgguf *g, const char *key) {
    return rgguf_find_key(g, key) >= 0;
}

/* A special token id of the file: *id gets it, or n_vocab when absent. */
static bool special_id(const struct rgguf *g, const char *key, uint32_t n_vocab, uint32_t *id) {
    *id = n_vocab;
    return !has_key(g, key) || rgguf_get_u32(g, key, id);
}

/* The file's token strings (their count to *n_tokens) and types, one type per token. */
static bool tokens_and_types(const struct rgguf *g, uint64_t *n_tokens, const void **types) {
    enum rgguf_vtype et;
    uint64_t n_types;
    if (!rgguf_get_arr(g, "tokenizer.ggml.tokens", &et, n_tokens)) return false;
    if (et != RGGUF_STRING) {
        rcore_error_set("tokenizer.ggml.tokens is an array of %s, strings were expected",
                        rgguf_vtype_name(et));
        return false;
    }
    if (!rgguf_get_arr_data(g, "tokenizer.ggml.token_type", RGGUF_INT32, types, &n_types))
        return false;
    if (n_types != *n_tokens) {
        rcore_error_set("tokenizer.ggml.token_type has %llu entries for %llu tokens",
                        (unsigned long long)n_types, (unsigned long long)*n_tokens);
        return false;
    }
    return true;
}

bool mk_gpt2_tokens(const struct rgguf *g, const char *why, uint64_t *n_tokens,
                    const void **types) {
    const char *model;
    size_t model_len;
    if (!rgguf_get_str(g, "tokenizer.ggml.model", &model, &model_len)) return false;
    if (strcmp(model, "gpt2") != 0) {
        rcore_error_set("tokenizer.ggml.model is '%s'; %s", model, why);
        return false;
    }
    return tokens_and_types(g, n_tokens, types);
}

/* SentencePiece: the byte a "<0xXX>" token stands for, or -1. */
static int spm_byte_of_token(const char *text, size_t len) {
    unsigned b;
    char end;
    if (len != 6 || sscanf(text, "<0x%2X%c", &b, &end) != 2 || end != '>') return -1;
    return (int)b;
}

/* "llama" (SentencePiece) files: tokens, types and scores, as mk_gpt2_tokens for "gpt2". */
static bool spm_tokens(const struct rgguf *g, uint64_t *n_tokens, const void **types,
                       const float **scores) {
    uint64_t n_scores;
    if (!tokens_and_types(g, n_tokens, types)) return false;
    *scores = NULL;
    if (has_key(g, "tokenizer.ggml.scores")) {
        const void *d;
        if (!rgguf_get_arr_data(g, "tokenizer.ggml.scores", RGGUF_FLOAT32, &d, &n_scores))
            return false;
        if (n_scores != *n_tokens) {
            rcore_error_set("tokenizer.ggml.scores has %llu entries for %llu tokens",
                            (unsigned long long)n_scores, (unsigned long long)*n_tokens);
            return false;
        }
        *scores = d;
    }
    return true;
}

static int token_byte(const struct vocab_cut *v, const char *text, size_t len) {
    return v->spm ? spm_byte_of_token(text, len) : byte_of_token(text, len);
}

/*
 * Cuts the file's vocabulary to its first n tokens. Kept merges are those whose two halves and
 * result are kept tokens, in the file's order; for GPT-2's file (byte tokens first, then one
 * token per merge in merge order) that is exactly the first n - 256 merges. Returns TOOL_OK,
 * TOOL_FAIL (error set) or TOOL_USAGE (message printed).
 */
static int cut_vocab(const struct rgguf *g, const char *path, uint32_t n, struct vocab_cut *v) {
    uint64_t n_tokens, n_file_merges;
    const void *types;
    const char *model;
    if (!rgguf_get_str(g, "tokenizer.ggml.model", &model, NULL)) return TOOL_FAIL;
    v->spm = strcmp(model, "llama") == 0;
    if (v->spm
            ? !spm_tokens(g, &n_tokens, &types, &v->scores)
            : !mk_gpt2_tokens(g, "only gpt2 (byte-level BPE) and llama (SentencePiece) can be cut",
                              &n_tokens, &types))
        return TOOL_FAIL;
    if (n > n_tokens) {
        fprintf(stderr, "recur mkmodel: --vocab: %u is more than the %llu tokens of %s\n\n", n,
                (unsigned long long)n_tokens, path);
        return TOOL_USAGE;
    }
    enum rgguf_vtype et;
    n_file_merges = 0; /* SentencePiece has none */
    if (!v->spm && !rgguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_file_merges))
        return TOOL_FAIL;

    v->text = calloc(n, sizeof(*v->text));
    v->len = calloc(n, sizeof(*v->len));
    v->type = calloc(n, sizeof(*v->type));
    if (!v->text || !v->len || !v->type) goto oom;
    memcpy(v->type, types, n * sizeof(*v->type));
    for (uint32_t i = 0; i < n; i++) {
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &v->text[i], &v->len[i]))
            return TOOL_FAIL;
        if (strlen(v->text[i]) != v->len[i]) {
            rcore_error_set("token %u holds a NUL byte", i);
            return TOOL_FAIL;
        }
    }
    if (!set_init(&v->set, v->text, v->len, n)) goto oom;

    /* Byte-level BPE falls back to byte tokens for anything it cannot merge: every byte token
     * of the file must be kept, or tokenising some text fails. (GPT-NeoX's vocabulary has none
     * for the 13 bytes that never occur in UTF-8; GPT-2's has all 256, first.) */
    for (uint64_t i = n; i < n_tokens; i++) {
        const char *t;
        size_t tl;
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t, &tl)) return TOOL_FAIL;
        int b = token_byte(v, t, tl);
        if (b >= 0) {
            fprintf(stderr,
                    "recur mkmodel: --vocab: %u tokens leave out the token of byte 0x%02x (id "
                    "%llu in %s)\n\n",
                    n, (unsigned)b, (unsigned long long)i, path);
            return TOOL_USAGE;
        }
    }

    /* bos/eos must be valid ids. When the file's do not fit, the last kept token takes their
     * place as a control token, and the merge that would make it from text is dropped: else
     * ordinary text would tokenise into a control token that detokenises to nothing. A byte
     * token cannot be spared that way (byte fallback needs it) and stays as it is. */
    uint32_t replaced = n; /* none */
    if (!special_id(g, "tokenizer.ggml.bos_token_id", n, &v->bos) ||
        !special_id(g, "tokenizer.ggml.eos_token_id", n, &v->eos))
        return TOOL_FAIL;
    if (v->bos >= n || v->eos >= n) {
        uint32_t last = n - 1;
        if (v->bos >= n) v->bos = last;
        if (v->eos >= n) v->eos = last;
        if (token_byte(v, v->text[last], v->len[last]) < 0) {
            v->type[last] = TOKEN_TYPE_CONTROL;
            replaced = last;
        }
    }

    v->merges = calloc(n_file_merges ? n_file_merges : 1, sizeof(*v->merges));
    if (!v->merges) goto oom;
    for (uint64_t i = 0; i < n_file_merges; i++) {
        const char *mt;
        size_t ml;
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.merges", i, &mt, &ml)) return TOOL_FAIL;
        if (strlen(mt) != ml) {
            rcore_error_set("merge %llu holds a NUL byte", (unsigned long long)i);
            return TOOL_FAIL;
        }
        /* Split as llama.cpp does: at the first space after the first character. */
        const char *sp = ml > 1 ? memchr(mt + 1, ' ', ml - 1) : NULL;
        if (!sp) {
            rcore_error_set("merge %llu '%s' has no space", (unsigned long long)i, mt);
            return TOOL_FAIL;
        }
        size_t la = (size_t)(sp - mt), lb = ml - la - 1;
        int32_t a = set_find(&v->set, mt, la, "", 0);
        int32_t b = set_find(&v->set, sp + 1, lb, "", 0);
        int32_t ab = set_find(&v->set, mt, la, sp + 1, lb);
        if (a >= 0 && b >= 0 && ab >= 0 && (uint32_t)ab != replaced) v->merges[v->n_merges++] = mt;
    }
    return TOOL_OK;
oom:
    rcore_error_set("out of memory cutting a vocabulary of %u tokens", n);
    return TOOL_FAIL;
}

static bool ends_with(const char *s, const char *end) {
    size_t ls = strlen(s), le = strlen(end);
    return ls >= le && strcmp(s + ls - le, end) == 0;
}

/* The file's other tokenizer keys (unknown_token_id, add_bos_token, chat_template, ...): the
 * special ids that stay valid and the scalars. Other arrays are per token and would need a cut
 * that recur does not know how to make, so they are left out. */
static bool copy_other_keys(struct rgguf_writer *w, const struct rgguf *g, uint32_t n,
                            bool skip_template) {
    static const char *const done[] = {
        "tokenizer.ggml.model",        "tokenizer.ggml.pre",        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",       "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
    };
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        bool skip = strncmp(key, "tokenizer.", strlen("tokenizer.")) != 0 ||
                    rgguf_key_type(g, i) == RGGUF_ARRAY;
        for (size_t k = 0; k < sizeof(done) / sizeof(done[0]) && !skip; k++)
            skip = strcmp(key, done[k]) == 0;
        if (skip || (skip_template && strcmp(key, "tokenizer.chat_template") == 0)) continue;
        uint32_t id;
        if (ends_with(key, "_token_id") && (!rgguf_get_u32(g, key, &id) || id >= n)) continue;
        if (!rgguf_writer_copy_kv(w, g, key)) return false;
    }
    return true;
}

/* Copies the tokenizer of the vocabulary file, cut to m->n_vocab tokens. */
static int add_vocab(struct rgguf_writer *w, const struct mk *m) {
    struct rgguf *g = rgguf_open(m->vocab_file, true);
    if (!g) return TOOL_FAIL;
    struct vocab_cut v = {0};
    int rc = cut_vocab(g, m->vocab_file, m->n_vocab, &v);
    if (rc == TOOL_OK) {
        /* tokenizer.ggml.pre is always written, so that llama.cpp and recur read the same
         * pre-tokenizer: --pre, else the file's, else "default" (what both read for a missing
         * key). SentencePiece has none; llama.cpp's converter writes "default" there too. */
        const char *pre = m->pre ? m->pre : "default";
        if (!m->pre && has_key(g, "tokenizer.ggml.pre") &&
            !rgguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL))
            rc = TOOL_FAIL;
        if (v.spm && m->pre) {
            fprintf(stderr,
                    "recur mkmodel: --pre: %s is a llama (SentencePiece) vocabulary, "
                    "which has no pre-tokenizer\n\n",
                    m->vocab_file);
            rc = TOOL_USAGE;
        }
        bool ok =
            rc == TOOL_OK && rgguf_writer_copy_kv(w, g, "tokenizer.ggml.model") &&
            rgguf_writer_set_str(w, "tokenizer.ggml.pre", pre) &&
            rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.text, m->n_vocab) &&
            rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, v.type, m->n_vocab) &&
            (v.spm || rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v.merges, v.n_merges)) &&
            (!v.spm || !v.scores ||
             rgguf_writer_set_arr(w, "tokenizer.ggml.scores", RGGUF_FLOAT32, v.scores,
                                  m->n_vocab)) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos) &&
            copy_other_keys(w, g, m->n_vocab, m->chat_template != NULL) &&
            (!m->chat_template ||
             rgguf_writer_set_str(w, "tokenizer.chat_template", m->chat_template));
        if (rc == TOOL_OK) rc = ok ? TOOL_OK : TOOL_FAIL;
    }
    if (rc == TOOL_FAIL) rcore_error_prefix("vocabulary file %s", m->vocab_file);
    if (rc == TOOL_USAGE) mk_usage(stderr);
    vocab_cut_free(&v);
    rgguf_close(g);
    return rc;
}

/* ---- the model ------------------------------------------------------------------------------ */

uint32_t mk_file_type(const struct mk *m) {
    return m->wtype == RGGUF_F16    ? FTYPE_MOSTLY_F16
           : m->wtype == RGGUF_BF16 ? FTYPE_MOSTLY_BF16
                                    : FTYPE_ALL_F32;
}

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    const bool mamba2 = m->arch == MK_MAMBA2;
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

static void print_summary(const struct mk *m) {
    switch (m->arch) {
    case MK_MAMBA:
        printf("wrote %s: mamba, layers %u, embd %u, inner %u, state %u, conv %u, dt_rank %u, "
               "vocab %u, %s%s%s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->d_inner, m->d_state, m->d_conv, m->dt_rank,
               m->n_vocab, rgguf_type_name(m->wtype), m->tied ? ", tied" : "",
               m->dt_b_c_rms ? ", dt_b_c_rms" : "", (unsigned long long)m->seed);
        break;
    case MK_MAMBA2:
        printf("wrote %s: mamba2, layers %u, embd %u, inner %u, state %u, conv %u, heads %u, "
               "groups %u, vocab %u, %s%s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->d_inner, m->d_state, m->d_conv, m->n_head,
               m->n_group, m->n_vocab, rgguf_type_name(m->wtype), m->tied ? ", tied" : "",
               (unsigned long long)m->seed);
        break;
    case MK_RWKV6:
        printf("wrote %s: rwkv6, layers %u, embd %u, head_size %u, ff %u, mix_dim %u, "
               "decay_dim %u, rescale %u, vocab %u, %s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->head_size, m->n_ff, m->mix_dim, m->decay_dim,
               m->rescale, m->n_vocab, rgguf_type_name(m->wtype), (unsigned long long)m->seed);
        break;
    case MK_RWKV7:
        printf("wrote %s: rwkv7, layers %u, embd %u, head_size %u, ff %u, lora w/a/v/g "
               "%u/%u/%u/%u, vocab %u, %s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->head_size, m->n_ff, m->lora_w, m->lora_a,
               m->lora_v, m->lora_g, m->n_vocab, rgguf_type_name(m->wtype),
               (unsigned long long)m->seed);
        break;
    }
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
    const bool rwkv = mk_is_rwkv(&m);
    rc = TOOL_FAIL;
    if (rwkv ? mk_rwkv_add_hparams(w, &m) : add_hparams(w, &m))
        rc = rwkv ? mk_rwkv_add_vocab(w, &m) : add_vocab(w, &m);
    if (rc == TOOL_OK &&
        !((rwkv ? mk_rwkv_add_tensors(w, &m) : add_tensors(w, &m)) && rgguf_writer_write(w, m.out)))
        rc = TOOL_FAIL;
    if (rc == TOOL_OK && !rwkv) {
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
    print_summary(&m);
    return TOOL_OK;
}
