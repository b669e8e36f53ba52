/* libFuzzer target: the tokenizer (src/vocab) on any text, with and without special tokens
 * and BOS, and the detokenizer on what comes out. Without special-token parsing, the pieces of
 * the tokens must give back the exact bytes of the text (byte-level BPE is lossless). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "vocab/vocab.h"

static struct rvocab *vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("RECUR_FUZZ_VOCAB");
    struct rgguf *g = rgguf_open(path ? path : RECUR_FUZZ_VOCAB, false);
    vocab = g ? rvocab_load(g) : NULL;
    rgguf_close(g);
    if (!vocab) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the vocabulary\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (1u << 16)) return 0;
    const uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    const int32_t len = (int32_t)size - 1;
    int32_t *tok = malloc(sizeof(int32_t) * ((size_t)len + 4));
    char *back = malloc((size_t)len * 8 + 64);
    if (!tok || !back) abort();
    const bool special = flags & 1;
    const int32_t n = rvocab_tokenize(vocab, text, len, tok, len + 4, false, special);
    if (n < 0 || n > len + 4) abort(); /* room for every byte was given */
    if (!special) {
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
