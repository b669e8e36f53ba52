/* Helpers shared by the tokenizer tests (test_vocab.c, test_vocab_rwkv.c): the size protocol
 * of rvocab_tokenize / rvocab_detokenize into fresh buffers, loading a written vocabulary, and
 * UTF-8 encoding. Include after test.h (REQUIRE). */
#ifndef RECUR_TEST_VOCAB_UTIL_H
#define RECUR_TEST_VOCAB_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "file_util.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

/* Tokenizes into a fresh array (sized by the negative-size protocol); *n gets the count. */
static int32_t *tokenize(const struct rvocab *v, const void *s, size_t len, bool add_special,
                         bool parse_special, int32_t *n) {
    int32_t need = rvocab_tokenize(v, s, (int32_t)len, NULL, 0, add_special, parse_special);
    REQUIRE(need != INT32_MIN);
    int32_t cap = need < 0 ? -need : need;
    int32_t *t = malloc(((size_t)cap + 1) * sizeof *t);
    REQUIRE(t);
    *n = rvocab_tokenize(v, s, (int32_t)len, t, cap, add_special, parse_special);
    REQUIRE(*n == cap);
    return t;
}

/* detokenize into a fresh buffer (sized by the protocol); *n gets the length */
static char *detokenize(const struct rvocab *v, const int32_t *t, int32_t nt, bool remove_special,
                        bool unparse_special, int32_t *n) {
    int32_t need = rvocab_detokenize(v, t, nt, NULL, 0, remove_special, unparse_special);
    REQUIRE(need != INT32_MIN);
    int32_t cap = need < 0 ? -need : need;
    char *s = malloc((size_t)cap + 1);
    REQUIRE(s);
    *n = rvocab_detokenize(v, t, nt, s, cap, remove_special, unparse_special);
    REQUIRE(*n >= 0 && *n <= cap);
    return s;
}

/* Writes w to path, loads the vocabulary from it and removes it; frees w. NULL (error set)
 * when the load fails. */
static struct rvocab *vocab_load_written(struct rgguf_writer *w, const char *path) {
    REQUIRE(rgguf_writer_write(w, path));
    rgguf_writer_free(w);
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    rcore_error_clear();
    struct rvocab *v = rvocab_load(g);
    rgguf_close(g); /* the vocabulary keeps no pointer into the file */
    remove(path);
    return v;
}

/* The UTF-8 bytes of code point cp (no checks: callers pass valid scalar values). */
static size_t put_cp(uint8_t *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* llama.cpp's tokenizer vectors (test-tokenizer-0's files): the .inp holds texts each ended by
 * "\n__ggml_vocab_test__\n" (a text may be empty or newlines only), the .out one line of ids
 * per text, each id after a space. vocab_cases_open reads both (REQUIRE: the test cannot go on
 * without them); vocab_case_next gives the next text and its ids (at most max, REQUIRE'd), false
 * after the last; vocab_cases_close frees them and says whether the .out had exactly one line
 * a text. */
struct vocab_cases {
    char *inp, *out, *line;
    size_t ni, pos;
};

static inline void vocab_cases_open(struct vocab_cases *c, const char *base) {
    char path[512];
    size_t no;
    snprintf(path, sizeof path, "%s.inp", base);
    c->inp = file_read(path, &c->ni);
    REQUIRE(c->inp);
    snprintf(path, sizeof path, "%s.out", base);
    c->out = file_read(path, &no);
    REQUIRE(c->out);
    c->line = c->out;
    c->pos = 0;
}

static inline bool vocab_case_next(struct vocab_cases *c, const char **text, size_t *len,
                                   int32_t *ids, int32_t max, int32_t *n_ids) {
    static const char sep[] = "\n__ggml_vocab_test__\n";
    if (c->pos >= c->ni) return false;
    const char *end = strstr(c->inp + c->pos, sep);
    *text = c->inp + c->pos;
    *len = end ? (size_t)(end - *text) : c->ni - c->pos;
    c->pos += *len + (end ? sizeof sep - 1 : 0);
    char *nl = strchr(c->line, '\n');
    REQUIRE(nl);
    *nl = '\0';
    *n_ids = 0;
    for (char *p = c->line;;) {
        char *q;
        const long id = strtol(p, &q, 10);
        if (q == p) break; /* the end of the line */
        REQUIRE(*n_ids < max);
        ids[(*n_ids)++] = (int32_t)id;
        p = q;
    }
    c->line = nl + 1;
    return true;
}

static inline bool vocab_cases_close(struct vocab_cases *c) {
    const bool whole = *c->line == '\0';
    free(c->inp);
    free(c->out);
    return whole;
}

#endif
