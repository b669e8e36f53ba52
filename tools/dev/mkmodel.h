/*
 * Private to `recur mkmodel`: what mkmodel.c (flags, the Mamba models, the gpt2 vocabulary cut)
 * shares with mkmodel_rwkv.c (RWKV-6 and RWKV-7), so that both draw tensors the same way.
 */
#ifndef RECUR_MKMODEL_H
#define RECUR_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"
#include "gguf/gguf.h"

/* Byte-level BPE needs a token for each of the 256 bytes. */
#define N_BYTES 256

/* GGUF's llama_ftype values for general.file_type. */
#define FTYPE_ALL_F32     0
#define FTYPE_MOSTLY_F16  1
#define FTYPE_MOSTLY_BF16 32

/* llama.cpp's token types. */
#define TOKEN_TYPE_NORMAL  1
#define TOKEN_TYPE_CONTROL 3

enum flag_id {
    F_ARCH,
    F_EMBD,
    F_LAYERS,
    F_VOCAB,
    F_STATE,
    F_SEED,
    F_TYPE,
    F_TIED,
    F_INNER,
    F_CONV,
    F_DT_RANK,
    F_DT_B_C_RMS,
    F_EPS,
    F_HEADS,
    F_GROUPS,
    F_HEAD_SIZE,
    F_FF,
    F_RESCALE,
    F_MIX_DIM,
    F_DECAY_DIM,
    F_LORA_W,
    F_LORA_A,
    F_LORA_V,
    F_LORA_G,
    F_VOCAB_FILE,
    F_CHAT_TEMPLATE,
    F_PRE,
    F_HELP,
    F_COUNT
};

enum mk_arch { MK_MAMBA, MK_MAMBA2, MK_RWKV6, MK_RWKV7 };

struct mk {
    const char *out;
    const char *vocab_file;
    const char *chat_template_file; /* --chat-template: its text becomes tokenizer.chat_template */
    char *chat_template;            /* that text (malloc'd), NULL: none given */
    const char *pre; /* --pre, or NULL */
    enum mk_arch arch;
    uint32_t n_embd, n_layer, n_vocab;
    uint64_t seed;
    uint32_t wtype; /* enum rgguf_ttype of the weight matrices */
    float eps;      /* RMS norm (Mamba) or LayerNorm (RWKV) epsilon */
    /* mamba, mamba2 */
    uint32_t d_state, d_inner, d_conv, dt_rank;
    bool tied, dt_b_c_rms;
    uint32_t n_head, n_group; /* mamba2 */
    /* rwkv6, rwkv7 */
    uint32_t head_size, n_ff;
    uint32_t rescale, mix_dim, decay_dim;    /* rwkv6 */
    uint32_t lora_w, lora_a, lora_v, lora_g; /* rwkv7 */
};

static inline bool mk_is_rwkv(const struct mk *m) {
    return m->arch == MK_RWKV6 || m->arch == MK_RWKV7;
}

/* How a tensor's values are drawn. */
enum init {
    INIT_NORMAL,   /* scale * N(0, 1) */
    INIT_NEAR_ONE, /* 1 + 0.1 * N(0, 1): norms and D differ from 1 so that ignoring them shows */
    INIT_A, /* A[c][n] = -(n + 1), as -exp(A_log) with the reference A_log = log(1..d_state) */
    INIT_DT_BIAS,     /* inverse softplus of dt drawn log-uniform in [1e-3, 1e-1] */
    INIT_A_HEAD,      /* mamba2: A = -exp(A_log) per head, A_log = log(U[1, 16]) as its reference */
    INIT_UNIT,        /* U[0, 1): RWKV's token-shift mix coefficients */
    INIT_RWKV6_DECAY, /* U[-5, 0.2): w = exp(-exp(d)) spans 0.29 .. 0.993 */
    INIT_RWKV7_W0,    /* U[-3, 1): w = exp(-e^-0.5 sigmoid(w0)) spans 0.64 .. 0.97 */
};

/* Prints "recur mkmodel: MESSAGE" and the usage to stderr; returns the usage exit status. */
int mk_usage_error(const char *fmt, ...) RCORE_PRINTF(1, 2);
void mk_usage(FILE *out);
/* A size flag's value in [min, INT32_MAX]; prints why not (naming the flag). */
bool mk_parse_size(const char *flag, const char *s, uint64_t min, uint32_t *out);
/* general.file_type for the weight type. */
uint32_t mk_file_type(const struct mk *m);

/* Draws tensor `name` (n_dims of ne, fastest first) from the generator of seed_name (NULL: the
 * name itself; a copy names its original), converts it to type and hands it to the writer. */
bool mk_add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name,
                   const char *seed_name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                   enum init init, double scale);

/* The UTF-8 text that GPT-2's byte-level BPE gives byte b (its bytes_to_unicode). */
size_t mk_byte_text(unsigned b, char out[3]);
/* Checks that g holds a gpt2 vocabulary (tokenizer.ggml.model "gpt2", tokens as strings, one
 * int32 type each): *n_tokens and *types (in g) on success; false with the error set, naming
 * the key, else (a model other than gpt2) "... is 'X'; why". */
bool mk_gpt2_tokens(const struct rgguf *g, const char *why, uint64_t *n_tokens, const void **types);

/* mkmodel_rwkv.c. mk_rwkv_parse checks the RWKV flags (given[f]: the value, or NULL) and fills
 * m; returns TOOL_OK or TOOL_USAGE (message and usage printed). */
int mk_rwkv_parse(const char *const *given, struct mk *m);
bool mk_rwkv_add_hparams(struct rgguf_writer *w, const struct mk *m);
/* Returns TOOL_OK, TOOL_FAIL (error set) or TOOL_USAGE (message printed). */
/* The whole text of a file, malloc'd and NUL-terminated; NULL with the error set when it cannot
 * be read or holds a NUL byte. */
char *mk_read_text(const char *path);
int mk_rwkv_add_vocab(struct rgguf_writer *w, const struct mk *m);
bool mk_rwkv_add_tensors(struct rgguf_writer *w, const struct mk *m);

#endif /* RECUR_MKMODEL_H */
