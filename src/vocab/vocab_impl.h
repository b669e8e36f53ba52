/* What vocab.c (loading, the special-token pass, the gpt2 BPE, detokenize) and vocab_rwkv.c
 * (the rwkv tokenizer's unescape and byte trie) share. Not part of the module's interface. */
#ifndef RECUR_VOCAB_IMPL_H
#define RECUR_VOCAB_IMPL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rvocab;

/* One token: offsets into the vocabulary's two byte arenas, the stored text and the piece
 * (the bytes token_to_piece hands out with special = true). */
struct rvocab_token {
    uint32_t text_off, text_len;
    uint32_t piece_off, piece_len;
    uint8_t type;
};

/* A growable byte buffer, for building the arenas at load. */
struct rvocab_bytes {
    char *p;
    size_t n, cap;
};

/* Appends src[0..n); false with the error set when out of memory. */
bool rvocab_bytes_add(struct rvocab_bytes *b, const void *src, size_t n);

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
bool rvocab_rwkv_unescape(const char *text, size_t len, int32_t id, struct rvocab_bytes *out);

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

/* A pre-tokenizer: the patterns applied in turn (see vocab_pre.c), and llama.cpp's
 * clean_spaces flag for the name. Static data. */
struct rvocab_pre {
    const char *name;
    const char *const *patterns;
    int n_patterns;
    bool clean_spaces;
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

#endif /* RECUR_VOCAB_IMPL_H */
