/* libFuzzer target: the tokenizer (src/vocab) on any text, with and without special tokens,
 * and the detokenizer on what comes out. The first input byte chooses: bit 0 parse_special,
 * bits 1-2 the vocabulary: GPT-2's byte-level BPE (tests/data/ggml-vocab-gpt-2.gguf), a small
 * RWKV world vocabulary built at start-up (bit 1: tests/lib/rwkv_vocab.h: <s>, all 256 bytes,
 * words that are prefixes of each other, UTF-8, [PAD] tokens) or LLaMA's SentencePiece
 * vocabulary (bit 2: tests/data/ggml-vocab-llama-spm.gguf; bit 1 then also adds BOS). The rest
 * is the text.
 *  - spm: every id is a token, there are at most as many tokens as bytes once spaces are
 *    escaped (byte fallback emits one token per byte), and valid UTF-8 without special-token
 *    parsing comes back exactly from detokenize (the space prefix is dropped again; with BOS,
 *    as llama.cpp, it stays).
 *  - gpt2: without special-token parsing, the pieces of the tokens give back the exact bytes
 *    of the text (byte-level BPE is lossless);
 *  - rwkv: always lossless (the pieces of <s> are its text), detokenize gives the text back
 *    (no clean-up of spaces), and on inputs up to 2 KiB the ids are exactly those of the
 *    brute-force greedy longest match of rwkv_vocab.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/utf8.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

#include "../lib/rwkv_vocab.h"

static struct rvocab *vocab;
static struct rvocab *rwkv;
static struct rvocab *spm;
static struct rwkv_vocab rwkv_tokens; /* the reference's view of the same vocabulary */

static struct rvocab *load_rwkv(void) {
    rwkv_tokens = rwkv_vocab_standard(300);
    struct rgguf_writer *w = rwkv_vocab_writer(&rwkv_tokens);
    char path[] = "/tmp/recur-fuzz-rwkv-XXXXXX";
    int fd = mkstemp(path);
    if (!w || fd < 0) return NULL;
    close(fd);
    struct rgguf *g = rgguf_writer_write(w, path) ? rgguf_open(path, false) : NULL;
    struct rvocab *v = g ? rvocab_load(g) : NULL;
    rgguf_close(g);
    rgguf_writer_free(w);
    unlink(path);
    return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("RECUR_FUZZ_VOCAB");
    struct rgguf *g = rgguf_open(path ? path : RECUR_FUZZ_VOCAB, false);
    vocab = g ? rvocab_load(g) : NULL;
    rgguf_close(g);
    path = getenv("RECUR_FUZZ_SPM_VOCAB");
    g = rgguf_open(path ? path : RECUR_FUZZ_SPM_VOCAB, false);
    spm = g ? rvocab_load(g) : NULL;
    rgguf_close(g);
    rwkv = load_rwkv();
    if (!vocab || !rwkv || !spm) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the vocabularies\n");
        abort();
    }
    return 0;
}

static void check_rwkv(const char *text, int32_t len, const int32_t *tok, int32_t n, bool special,
                       char *back, int32_t cap) {
    if (n > len) abort(); /* every token covers at least one byte */
    int32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= rvocab_n_tokens(rwkv)) abort();
        const int32_t k = rvocab_token_to_piece(rwkv, tok[i], back + off, cap - off, 0, true);
        if (k <= 0) abort();
        off += k;
    }
    if (off != len || memcmp(back, text, (size_t)len) != 0) abort(); /* lossless */
    if (rvocab_detokenize(rwkv, tok, n, back, cap, false, true) != len ||
        memcmp(back, text, (size_t)len) != 0)
        abort();
    if (len > 2048) return;
    int32_t *want = malloc(sizeof(int32_t) * ((size_t)len + 1));
    if (!want) abort();
    const int32_t n_want =
        rwkv_brute_tokenize(&rwkv_tokens, (const uint8_t *)text, (size_t)len, special, -1, want);
    if (n_want != n || memcmp(want, tok, sizeof(int32_t) * (size_t)n) != 0) abort();
    free(want);
}

static bool valid_utf8(const uint8_t *s, int32_t n) {
    return rcore_utf8_valid(s, (size_t)n) == (size_t)n;
}

static void check_spm(const char *text, int32_t len, bool special, bool bos) {
    int32_t n_spaces = 1; /* the prefix */
    for (int32_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    const int32_t cap = len + 2 * n_spaces + 8; /* escaped bytes, BOS */
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)cap);
    if (!tok) abort();
    const int32_t n = rvocab_tokenize(spm, text, len, tok, cap, bos, special);
    if (n < 0 || n > cap) abort();
    for (int32_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= rvocab_n_tokens(spm)) abort();
    if (bos && (n == 0 || tok[0] != rvocab_bos(spm))) abort();
    int32_t need = rvocab_detokenize(spm, tok, n, NULL, 0, true, true);
    if (need == INT32_MIN) abort();
    need = need < 0 ? -need : need;
    char *back = malloc((size_t)need + 1);
    if (!back) abort();
    const int32_t got = rvocab_detokenize(spm, tok, n, back, need, true, true);
    if (got != need) abort();
    if (!special && valid_utf8((const uint8_t *)text, len)) {
        const int32_t skip = bos && len > 0; /* llama.cpp keeps the prefix after BOS */
        if (got != len + skip || memcmp(back + skip, text, (size_t)len) != 0) abort();
    }
    free(back);
    free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (1u << 16)) return 0;
    const uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    const int32_t len = (int32_t)size - 1;
    if (flags & 4) {
        check_spm(text, len, flags & 1, flags & 2);
        return 0;
    }
    int32_t *tok = malloc(sizeof(int32_t) * ((size_t)len + 4));
    char *back = malloc((size_t)len * 8 + 64);
    if (!tok || !back) abort();
    const bool special = flags & 1;
    const struct rvocab *v = flags & 2 ? rwkv : vocab;
    const int32_t n = rvocab_tokenize(v, text, len, tok, len + 4, false, special);
    if (n < 0 || n > len + 4) abort(); /* room for every byte was given */
    if (v == rwkv) {
        check_rwkv(text, len, tok, n, special, back, len * 8 + 64);
    } else if (!special) {
        int32_t off = 0;
        for (int32_t i = 0; i < n; i++) {
            const int32_t k =
                rvocab_token_to_piece(vocab, tok[i], back + off, len * 8 + 64 - off, 0, true);
            if (k < 0) abort();
            off += k;
        }
        if (off != len || memcmp(back, text, (size_t)len) != 0) abort(); /* lossless */
    }
    free(tok);
    free(back);
    return 0;
}
