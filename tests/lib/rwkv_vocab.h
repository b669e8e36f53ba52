/*
 * Small RWKV "world"-style vocabularies for tests and the tokenizer fuzz target, written as
 * llama.cpp's converter writes them (_set_vocab_rwkv_world): <s> (control) at 0, then token
 * texts that are Python's repr(bytes)[2:-1], then [PAD<id>] (unused) up to the size.
 * Allocation failures abort: these are test fixtures.
 */
#ifndef RECUR_TESTS_RWKV_VOCAB_H
#define RECUR_TESTS_RWKV_VOCAB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "vocab/vocab.h"

/* Python's repr(bytes)[2:-1]: single quotes unless the bytes hold ' and no ", the quote in use
 * and the backslash escaped, \t \n \r, \xNN (lowercase) for the other bytes outside
 * 0x20..0x7e. out needs 4 * n + 1 bytes; NUL-terminated. */
static inline size_t rwkv_py_escape(const uint8_t *b, size_t n, char *out) {
    const bool single = !(memchr(b, '\'', n) && !memchr(b, '"', n));
    const char quote = single ? '\'' : '"';
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = b[i];
        if (c == quote || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c == '\t' || c == '\n' || c == '\r') {
            out[k++] = '\\';
            out[k++] = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        } else if (c < 0x20 || c >= 0x7f) {
            k += (size_t)snprintf(out + k, 5, "\\x%02x", c);
        } else {
            out[k++] = (char)c;
        }
    }
    out[k] = '\0';
    return k;
}

struct rwkv_vocab {
    char **text;     /* stored texts */
    int32_t *type;   /* RVOCAB_TYPE_* */
    uint8_t **bytes; /* the bytes each text stands for (NULL for raw texts added unchecked) */
    size_t *len;
    int32_t n, cap;
};

static inline void rwkv_vocab_add_text(struct rwkv_vocab *v, const char *text, int32_t type,
                                       const uint8_t *bytes, size_t len) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 512;
        v->text = realloc(v->text, (size_t)v->cap * sizeof *v->text);
        v->type = realloc(v->type, (size_t)v->cap * sizeof *v->type);
        v->bytes = realloc(v->bytes, (size_t)v->cap * sizeof *v->bytes);
        v->len = realloc(v->len, (size_t)v->cap * sizeof *v->len);
        if (!v->text || !v->type || !v->bytes || !v->len) abort();
    }
    v->text[v->n] = strdup(text);
    v->bytes[v->n] = bytes ? malloc(len ? len : 1) : NULL;
    if (!v->text[v->n] || (bytes && !v->bytes[v->n])) abort();
    if (bytes && len) memcpy(v->bytes[v->n], bytes, len);
    v->type[v->n] = type;
    v->len[v->n] = len;
    v->n++;
}

/* A token of the given bytes, stored escaped as the converter does. */
static inline void rwkv_vocab_add(struct rwkv_vocab *v, const void *bytes, size_t n, int32_t type) {
    char *text = malloc(4 * n + 1);
    if (!text) abort();
    rwkv_py_escape(bytes, n, text);
    rwkv_vocab_add_text(v, text, type, bytes, n);
    free(text);
}

static inline void rwkv_vocab_add_str(struct rwkv_vocab *v, const char *s) {
    rwkv_vocab_add(v, s, strlen(s), RVOCAB_TYPE_NORMAL);
}

static inline void rwkv_vocab_free(struct rwkv_vocab *v) {
    for (int32_t i = 0; i < v->n; i++) {
        free(v->text[i]);
        free(v->bytes[i]);
    }
    free(v->text);
    free(v->type);
    free(v->bytes);
    free(v->len);
    memset(v, 0, sizeof *v);
}

/* The multi-byte tokens of the standard vocabulary: words and their prefixes (with a gap:
 * "abcde" is missing between "abcd" and "abcdef"), UTF-8 text, a partial UTF-8 character,
 * both kinds of quote (so that one text holds \'), backslashes, control bytes, "<s>" inside a
 * longer token. */
static const char *const rwkv_words[] = {
    "\n\n",
    "ab",
    "abc",
    "abcd",
    "abcdef",
    "th",
    "the",
    " the",
    " t",
    "  ",
    "    ",
    "\xe4\xbd\xa0",             /* 你 */
    "\xe4\xbd\xa0\xe5\xa5\xbd", /* 你好 */
    "\xe5\xa5\xbd",             /* 好 */
    "\xe4\xbd",                 /* a partial 你 */
    "caf\xc3\xa9",
    "\xc3\xa9",         /* café, é */
    "\xf0\x9f\x98\x80", /* 😀 */
    "\xf0\x9f\x98\x80\xf0\x9f\x98\x80",
    "'s",
    "it's \"x\"",
    "\\n",
    "\\\\",
    "a\tb",
    "\r\n",
    "\x7f\x80",
    "\xff\xfe",
    "<s>x",
    "x<s",
    "<|user|>",
    "User:",
    "Assistant:",
    "ab\n\n",
    "\n\n\n",
};

/* <s> control at 0, the 256 single bytes at 1..256 (byte b at id b + 1), rwkv_words, then
 * [PAD<id>] unused tokens up to n_total (when larger). */
static inline struct rwkv_vocab rwkv_vocab_standard(int32_t n_total) {
    struct rwkv_vocab v = {0};
    rwkv_vocab_add_text(&v, "<s>", RVOCAB_TYPE_CONTROL, (const uint8_t *)"<s>", 3);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        rwkv_vocab_add(&v, &c, 1, RVOCAB_TYPE_NORMAL);
    }
    for (size_t i = 0; i < sizeof rwkv_words / sizeof *rwkv_words; i++)
        rwkv_vocab_add_str(&v, rwkv_words[i]);
    while (v.n < n_total) {
        char pad[32];
        int k = snprintf(pad, sizeof pad, "[PAD%d]", (int)v.n);
        rwkv_vocab_add_text(&v, pad, RVOCAB_TYPE_UNUSED, (const uint8_t *)pad, (size_t)k);
    }
    return v;
}

/* A writer holding tokenizer.ggml.model = "rwkv", the tokens and their types (add more keys,
 * then rgguf_writer_write). NULL when out of memory. */
static inline struct rgguf_writer *rwkv_vocab_writer(const struct rwkv_vocab *v) {
    struct rgguf_writer *w = rgguf_writer_create();
    if (!w) return NULL;
    if (!rgguf_writer_set_str(w, "general.architecture", "rwkv6") ||
        !rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv") ||
        !rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->text,
                                  (uint64_t)v->n) ||
        !rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, v->type,
                              (uint64_t)v->n)) {
        rgguf_writer_free(w);
        return NULL;
    }
    return w;
}

/* The token at s[0..n): the longest token bytes that match, the highest id among equal
 * bytes; *len gets its length. -1 when none matches. */
static inline int32_t rwkv_brute_match(const struct rwkv_vocab *tv, const uint8_t *s, size_t n,
                                       size_t *len) {
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t id = 0; id < tv->n; id++) {
        size_t l = tv->len[id];
        if (!tv->bytes[id] || l == 0 || l > n || l < best_len) continue;
        if (memcmp(tv->bytes[id], s, l) == 0) {
            best = id; /* ids ascend: on equal length, the later id replaces */
            best_len = l;
        }
    }
    *len = best_len;
    return best;
}

/* The reference tokenizer, independent of src/vocab: greedy longest match of s, unk where no
 * token matches (or, unk being -1, returns -1). With parse_special, every "<s>" is cut out
 * first as the control token 0 (the only special token of these vocabularies). out needs
 * room for n ids. */
static inline int32_t rwkv_brute_tokenize(const struct rwkv_vocab *tv, const uint8_t *s, size_t n,
                                          bool parse_special, int32_t unk, int32_t *out) {
    int32_t k = 0;
    size_t pos = 0;
    while (pos < n) {
        if (parse_special && n - pos >= 3 && memcmp(s + pos, "<s>", 3) == 0) {
            out[k++] = 0;
            pos += 3;
            continue;
        }
        /* the fragment ends at the next "<s>" when they are cut out */
        size_t end = n;
        for (size_t j = pos; parse_special && j + 3 <= n; j++) {
            if (memcmp(s + j, "<s>", 3) == 0) {
                end = j;
                break;
            }
        }
        size_t len;
        int32_t id = rwkv_brute_match(tv, s + pos, end - pos, &len);
        if (id < 0) {
            if (unk < 0) return -1;
            out[k++] = unk;
            pos++;
        } else {
            out[k++] = id;
            pos += len;
        }
    }
    return k;
}

#endif /* RECUR_TESTS_RWKV_VOCAB_H */
