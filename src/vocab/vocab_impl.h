/* What the files of the vocab module share: vocab.c (loading), vocab_tok.c (the special-token
 * pass, the gpt2 BPE, detokenize), vocab_pre.c (pre-tokenizers), vocab_spm.c (SentencePiece)
 * and vocab_rwkv.c (the rwkv tokenizer's unescape and byte trie). Not part of the module's
 * interface. */
#ifndef RECUR_VOCAB_IMPL_H
#define RECUR_VOCAB_IMPL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/utf8.h"
#include "vocab/vocab.h"

struct rvocab;

/* One token: offsets into the vocabulary's two byte arenas, the stored text and the piece
 * (the bytes token_to_piece hands out with special = true). */
struct rvocab_token {
    uint32_t text_off, text_len;
    uint32_t piece_off, piece_len;
    uint8_t type;
};

/* Where a tokenizer writes ids: all are counted, those that fit are stored, so that a call with
 * too small a buffer still learns the size it needs. */
struct rvocab_out {
    int32_t *ids;
    int64_t n, max;
};

static inline void rvocab_out_push(struct rvocab_out *o, int32_t id) {
    if (o->n < o->max) o->ids[o->n] = id;
    o->n++;
}

/* ---- vocab_rwkv.c ------------------------------------------------------------------------ */

/* Appends the bytes that token `id`'s stored text text[0..len) stands for (llama.cpp's
 * llama_unescape_rwkv_token, see vocab_rwkv.c for the escapes). False with the error set on a
 * malformed escape (naming the token) or when out of memory. */
bool rvocab_rwkv_unescape(const char *text, size_t len, int32_t id, struct rcore_buf *out);

struct rvocab_trie;

/* The byte trie over the pieces of every token, in id order (a later id with the same bytes
 * replaces an earlier one). NULL with the error set when out of memory. */
struct rvocab_trie *rvocab_trie_build(const struct rvocab_token *tokens, int32_t n_tokens,
                                      const char *pieces);
void rvocab_trie_free(struct rvocab_trie *t); /* NULL is fine */

/* How many of the 256 bytes have no single-byte token; *first gets the lowest (or -1). */
int rvocab_trie_missing_bytes(const struct rvocab_trie *t, int *first);

/* Greedy longest match of s[0..n) into out. A position where no token starts is the unknown
 * token unk, or an error (false, naming the byte and its offset off + i in the caller's text)
 * when unk is -1. */
bool rvocab_trie_tokenize(const struct rvocab_trie *t, const uint8_t *s, size_t n, size_t off,
                          int32_t unk, struct rvocab_out *out);

/* ---- vocab_pre.c ------------------------------------------------------------------------- */

/* At most this many patterns in one pre-tokenizer. */
#define RVOCAB_PRE_MAX 4

/* A pre-tokenizer: the patterns applied in turn (see vocab_pre.c), and llama.cpp's flags for
 * the name: clean_spaces; ignore_merges (a piece that is a token as a whole is that token,
 * without merging); add_bos (the default of tokenizer.ggml.add_bos_token, which the key
 * overrides). Static data. */
struct rvocab_pre {
    const char *name;
    const char *const *patterns;
    int n_patterns;
    bool clean_spaces;
    bool ignore_merges;
    bool add_bos;
};

/* The entry of tokenizer.ggml.pre = name[0..len), or NULL with the error set (listing every
 * supported name). */
const struct rvocab_pre *rvocab_pre_find(const char *name, size_t len);
/* "default": what llama.cpp uses when the key is missing. */
const struct rvocab_pre *rvocab_pre_default(void);

/* Compiles pre's patterns into re[0 .. pre->n_patterns); *jit is whether all of them run
 * JIT-compiled. False with the error set (nothing left allocated). */
bool rvocab_pre_compile(const struct rvocab_pre *pre, bool want_jit, pcre2_code **re, bool *jit);

/* ---- vocab_spm.c ------------------------------------------------------------------------- */

/* What the SentencePiece tokenizer reads of a loaded vocabulary. */
struct rvocab_spm {
    const struct rvocab *v;    /* token texts, through rvocab_text_to_token */
    const float *scores;       /* per token */
    const int32_t *byte_token; /* per byte: "<0xXX>", else the one-byte token, else -1 */
    int32_t unk;
};

/* Tokenizes one fragment text[0..len) (see vocab_spm.c), with a leading "▁" when
 * space_prefix. False with the error set when out of memory or when a byte has no token and
 * there is no unknown token. */
bool rvocab_spm_tokenize(const struct rvocab_spm *c, const uint8_t *text, size_t len,
                         bool space_prefix, struct rvocab_out *out);

/* ---- the vocabulary (vocab.c loads it; vocab_tok.c tokenizes and detokenizes) ---------- */

/* Code points of the GPT-2 byte alphabet: bytes map to 0 .. 255 + 68. */
#define N_ALPHABET_CP 324

struct text_slot {
    uint32_t hash; /* low bits of XXH64 of the text */
    int32_t id;    /* -1: empty */
};

struct merge_slot {
    uint64_t key; /* left id << 32 | right id; MERGE_EMPTY when free */
    int32_t rank;
    int32_t result;
};

#define MERGE_EMPTY UINT64_MAX

/* tokenizer.ggml.model (model_names in vocab.c has the texts) */
enum vmodel { VM_GPT2, VM_RWKV, VM_SPM };

/* A loaded vocabulary (see vocab.c for the tables and why). */
struct rvocab {
    enum vmodel model;
    const struct rvocab_pre *pre; /* gpt2 only */
    int32_t n_tokens;
    int32_t n_merges;
    struct rvocab_token *tokens;
    char *text;   /* token texts, each NUL-terminated */
    char *pieces; /* decoded pieces, back to back */

    struct text_slot *text_table;
    size_t text_mask;
    struct merge_slot *merge_table;
    size_t merge_mask;

    int32_t *specials; /* control / unknown / user-defined ids, longest text first */
    int32_t n_specials;

    /* gpt2: token of each byte's alphabet character; llama: "<0xXX>", else the token whose
     * text is that one byte; -1 if missing */
    int32_t byte_token[256];
    float *scores; /* llama only: tokenizer.ggml.scores, 0 where absent */
    uint16_t byte_cp[256];
    int16_t cp_byte[N_ALPHABET_CP]; /* inverse of byte_cp, -1 elsewhere */

    int32_t bos, eos, unk, pad;
    int32_t fim[RVOCAB_FIM_COUNT]; /* fill-in-the-middle ids by enum rvocab_fim, -1: none */
    bool add_bos, add_eos, add_space_prefix, clean_spaces;

    pcre2_code *re[RVOCAB_PRE_MAX]; /* gpt2 only: the pre-tokenizer's patterns */
    bool jit;

    struct rvocab_trie *trie; /* rwkv only */
};

static inline const char *rvocab_tok_text(const struct rvocab *v, int32_t id) {
    return v->text + v->tokens[id].text_off;
}

/* The merge of the pair (left, right), or NULL. */
static inline size_t rvocab_merge_index(uint64_t key, size_t mask) {
    /* Fibonacci hashing: ids are small and dense, the multiply spreads them over the table. */
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

static inline const struct merge_slot *rvocab_merge_find(const struct rvocab *v, int32_t left,
                                                         int32_t right) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = rvocab_merge_index(key, v->merge_mask);; i = (i + 1) & v->merge_mask) {
        const struct merge_slot *e = &v->merge_table[i];
        if (e->key == key) return e;
        if (e->key == MERGE_EMPTY) return NULL;
    }
}

#endif /* RECUR_VOCAB_IMPL_H */
