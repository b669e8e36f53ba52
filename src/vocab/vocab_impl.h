/* What vocab.c (loading, the special-token pass, the gpt2 BPE, detokenize) and vocab_rwkv.c
 * (the rwkv tokenizer's unescape and byte trie) share. Not part of the module's interface. */
#ifndef RECUR_VOCAB_IMPL_H
#define RECUR_VOCAB_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif /* RECUR_VOCAB_IMPL_H */
