/* libFuzzer target: the grammar module (src/grammar) on any input. The first byte chooses:
 * even: the rest up to the first NUL is GBNF text, odd: a JSON schema, converted to GBNF
 * (which must then parse, unless the schema's $refs loop without consuming text: left
 * recursion). After the NUL come bytes to feed the matcher, a few at a time; at each step the
 * trie mask over a small vocabulary (every byte, a few words, UTF-8 pieces) must equal the
 * token-by-token mask, and an allowed token must be accepted. Errors are fine; crashes, hangs,
 * leaks and disagreements are not. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar.h"

static struct rgram_trie *trie;
static int32_t n_tok;
static char tok_bytes[4096];
static size_t tok_off[400];

static void build_vocab(void) {
    static const char *const words[] = {
        "\"",  "\":",  "{\"",  "\"}",      " the",     "true", "null",
        "12",  "\xC3", "\xA9", "\xC3\xA9", "\xE3\x81", "\x81", "\xF0\x9F\x98\x80",
        "\\n", "[{",   "}]",   ", ",       "ab",       "- "};
    size_t len = 0;
    for (int i = 0; i < 256; i++) {
        tok_off[n_tok++] = len;
        tok_bytes[len++] = (char)i;
    }
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        tok_off[n_tok++] = len;
        memcpy(tok_bytes + len, words[i], strlen(words[i]));
        len += strlen(words[i]);
    }
    tok_off[n_tok++] = len; /* an empty token: never allowed */
    tok_off[n_tok] = len;
    trie = rgram_trie_new(n_tok, tok_bytes, tok_off);
    if (!trie) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!trie) build_vocab();
    if (size < 1 || size > 8192) return 0;
    const uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t tlen = 0;
    while (tlen < size - 1 && text[tlen]) tlen++;
    const uint8_t *feed = data + 1 + tlen + (tlen < size - 1);
    const size_t n_feed = size - (size_t)(feed - data);
    char *owned = NULL;
    if (mode & 1) {
        owned = rgram_json_schema(text, tlen);
        if (!owned) return 0;
        text = owned;
        tlen = strlen(owned);
    }
    struct rgram *g = rgram_parse(text, tlen, "root");
    if (!g) {
        /* a schema may ask for what the matcher refuses: left recursion, or more than its
           limits (a pattern such as ([a-z]?){0,1000}) */
        if (owned && !strstr(rcore_error_get(), "left recursion") &&
            !strstr(rcore_error_get(), "(a limit")) {
            fprintf(stderr, "a converted schema does not parse: %s\n%s\n", rcore_error_get(),
                    owned);
            abort();
        }
        free(owned);
        return 0;
    }
    struct rgram_state *s = rgram_state_new(g);
    uint8_t m1[400], m2[400];
    for (size_t i = 0; s && i < n_feed && i < 64; i++) {
        int64_t k1 = rgram_mask(s, trie, m1), k2 = rgram_mask_naive(s, trie, m2);
        if (k1 < 0 || k2 < 0) break; /* a limit, reported */
        if (k1 != k2 || memcmp(m1, m2, (size_t)n_tok) != 0) {
            fprintf(stderr, "trie and naive masks differ\n");
            abort();
        }
        if (k1 == 0 && rgram_state_can_continue(s) && !rgram_state_complete(s)) {
            /* every byte is a token, so some byte must continue a live parse */
            fprintf(stderr, "no token allowed while the grammar can go on\n");
            abort();
        }
        /* feed[i] picks a token: an allowed one when there is any */
        int32_t pick = feed[i] % n_tok, seen = 0;
        for (int32_t t = 0; t < n_tok && k1 > 0; t++)
            if (m1[t] && seen++ == feed[i] % k1) pick = t;
        bool ok =
            rgram_state_accept(s, tok_bytes + tok_off[pick], tok_off[pick + 1] - tok_off[pick]);
        if (k1 > 0 && !ok && !strstr(rcore_error_get(), "ambiguous") &&
            !strstr(rcore_error_get(), "(a limit")) {
            fprintf(stderr, "an allowed token was rejected: %s\n", rcore_error_get());
            abort();
        }
    }
    rgram_state_free(s);
    rgram_free(g);
    free(owned);
    return 0;
}
