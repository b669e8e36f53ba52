/*
 * Private to `recur mkmodel`: what mkmodel.c (the flags, the table of architecture families,
 * tensor drawing, the command) shares with the families' files (mk_mamba.c: Mamba-1 and
 * Mamba-2; mk_rwkv.c: RWKV-6 and RWKV-7; mk_granite.c: Granite 4.0-H; mk_falcon_h1.c: Falcon-H1;
 * mk_nemotron.c: Nemotron-H)
 * and with mk_vocab.c (the vocabularies they write), so that every family draws tensors the same
 * way. A new architecture is a struct mk_family in a file of its own, and its line in mkmodel.c's
 * table.
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
    F_FIM,
    F_ATTN_LAYERS,
    F_ATTN_HEADS,
    F_ATTN_KV_HEADS,
    F_EMBD_SCALE,
    F_RESIDUAL_SCALE,
    F_ATTN_SCALE,
    F_LOGIT_SCALE,
    F_ROPE_BASE,
    F_SSM_NORM,
    F_PATTERN,
    F_ATTN_HEAD_DIM,
    F_QK_NORM,
    F_HELP,
    F_COUNT
};

struct mk;
struct mk_family;

/* One architecture: its --arch name, its title in --help ("Mamba-2"), and the family's own
 * number for it (which variant the family's code writes). */
struct mk_arch {
    const char *name;
    const char *title;
    int variant;
};

struct mk {
    const char *out;
    const char *vocab_file;
    const char *chat_template_file; /* --chat-template: its text becomes tokenizer.chat_template */
    char *chat_template;            /* that text (malloc'd), NULL: none given */
    const char *pre;                /* --pre, or NULL */
    int n_fim;                      /* --fim: how many of fim_ids to write (0, 3 or 5) */
    uint32_t fim_ids[5];            /* --fim PRE,SUF,MID[,REP,SEP] */
    const struct mk_family *family;
    const struct mk_arch *arch; /* one of family->archs */
    uint32_t n_embd, n_layer, n_vocab;
    uint64_t seed;
    uint32_t wtype; /* enum rgguf_ttype of the weight matrices */
    float eps;      /* RMS norm (Mamba) or LayerNorm (RWKV) epsilon */
    /* mamba, mamba2 */
    uint32_t d_state, d_inner, d_conv, dt_rank;
    bool tied, dt_b_c_rms;
    uint32_t n_head, n_group; /* mamba2, granitehybrid (its SSM heads) */
    /* rwkv6, rwkv7 */
    uint32_t head_size, n_ff;                /* n_ff: granitehybrid too */
    uint32_t rescale, mix_dim, decay_dim;    /* rwkv6 */
    uint32_t lora_w, lora_a, lora_v, lora_g; /* rwkv7 */
    /* granitehybrid */
    const char *attn_layers; /* --attn-layers (comma-separated indices); NULL: the odd layers */
    uint32_t n_attn_head, n_attn_kv_head;
    float embd_scale, residual_scale, attn_scale, logit_scale;
    uint32_t attn_head_dim; /* falcon-h1 --head-size, nemotron_h --attn-head-dim (0: default) */
    /* falcon-h1 (n_attn_head, n_attn_kv_head too) */
    float rope_base;
    bool ssm_norm;
    /* nemotron_h (with n_attn_head, n_attn_kv_head, n_ff and the Mamba-2 sizes) */
    const char *pattern; /* --pattern (M, *, - per layer); NULL: M*- repeated */
    /* granitehybrid, falcon-h1, nemotron_h: --qk-norm, the RMS norms of q and k that each
       attention layer gets */
    enum { MK_QK_NONE, MK_QK_HEAD, MK_QK_VECTOR } qk_norm;
};

/* What a family of architectures brings. The functions run in this order, each only when the
 * ones before succeeded: check, parse, then add_hparams, add_vocab and add_tensors into the
 * writer, then summary once the file is written. Usage errors print their message and the
 * usage (mk_usage_error) and return TOOL_USAGE; failures set the error and return false or
 * TOOL_FAIL. */
struct mk_family {
    const struct mk_arch *archs;
    size_t n_archs;
    const char *names; /* its archs as messages name them: "mamba and mamba2" */
    /* the flags it takes beyond the shared ones; a family refuses those that only others take */
    const enum flag_id *only;
    size_t n_only;
    bool needs_state;   /* --state is required (else refused) */
    uint32_t min_vocab; /* the smallest --vocab, and why that is so (in the message) */
    const char *min_vocab_why;
    const char *help; /* its paragraph at the end of --help */
    bool load_back;   /* the written tokenizer is loaded back before the file is kept */
    /* Family rules checked before other families' flags are refused (NULL: none). */
    int (*check)(const char *const *given, const struct mk *m);
    /* Fills the family's fields of m from given[f] (the value of flag f, or NULL), once the
     * shared ones are in. */
    int (*parse)(const char *const *given, struct mk *m);
    bool (*add_hparams)(struct rgguf_writer *w, const struct mk *m);
    int (*add_vocab)(struct rgguf_writer *w, const struct mk *m);
    bool (*add_tensors)(struct rgguf_writer *w, const struct mk *m);
    void (*summary)(const struct mk *m); /* the "wrote ..." line on stdout */
};

extern const struct mk_family mk_family_mamba;     /* mk_mamba.c */
extern const struct mk_family mk_family_rwkv;      /* mk_rwkv.c */
extern const struct mk_family mk_family_granite;   /* mk_granite.c */
extern const struct mk_family mk_family_falcon_h1; /* mk_falcon_h1.c */
extern const struct mk_family mk_family_nemotron;  /* mk_nemotron.c */

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
/* A float flag's value, positive and finite once rounded to float32 (the GGUF keys are
 * float32); prints why not (naming the flag). */
bool mk_parse_positive_f32(const char *flag, const char *s, float *out);
/* general.file_type for the weight type. */
uint32_t mk_file_type(const struct mk *m);

/* Draws tensor `name` (n_dims of ne, fastest first) from the generator of seed_name (NULL: the
 * name itself; a copy names its original), converts it to type and hands it to the writer. */
bool mk_add_tensor(struct rgguf_writer *w, const struct mk *m, const char *name,
                   const char *seed_name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                   enum init init, double scale);

/* The attention of layer l's attn_q_norm.weight and attn_k_norm.weight (f32, near 1) as
 * m->qk_norm says: {head_dim} (each head) or the whole vectors {n_attn_head * head_dim} and
 * {n_attn_kv_head * head_dim}; nothing for MK_QK_NONE. */
bool mk_add_qk_norm(struct rgguf_writer *w, const struct mk *m, uint32_t l, int64_t head_dim);
/* The summary's words for m->qk_norm: "" or ", q/k norms ...". */
const char *mk_qk_norm_words(const struct mk *m);

/* FNV-1a over p[0..n), from h (MK_FNV_OFFSET to start): names seed the tensors' generators
 * and key the vocabulary's hash sets. */
#define MK_FNV_OFFSET 0xcbf29ce484222325u
uint64_t mk_fnv1a64(const void *p, size_t n, uint64_t h);

/* The whole text of a file, malloc'd and NUL-terminated; NULL with the error set when it cannot
 * be read or holds a NUL byte. */
char *mk_read_text(const char *path);

/* mk_vocab.c. Each returns TOOL_OK, TOOL_FAIL (error set, naming the vocabulary file) or
 * TOOL_USAGE (message and usage printed). mk_add_bpe_vocab: the vocabulary file's tokenizer
 * (gpt2 byte-level BPE, or llama SentencePiece) cut to m->n_vocab tokens, with its merges.
 * mk_add_world_vocab: an RWKV "world" vocabulary built from the gpt2 file (mk_vocab.c says
 * how). */
int mk_add_bpe_vocab(struct rgguf_writer *w, const struct mk *m);
int mk_add_world_vocab(struct rgguf_writer *w, const struct mk *m);

#endif /* RECUR_MKMODEL_H */
