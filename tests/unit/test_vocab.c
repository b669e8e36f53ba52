/*
 * Tests of src/vocab, the byte-level BPE tokenizer.
 *
 *  - llama.cpp's own tokenizer test for GPT-2 (tests/data/ggml-vocab-gpt-2.gguf.inp / .out):
 *    every text must give exactly llama.cpp's ids, with the JIT and with the interpreter;
 *  - invalid UTF-8 in GPT-NeoX's vocabulary, which lacks some bytes' tokens: U+FFFD's tokens,
 *    never its unknown token (the end of text);
 *  - round trips of thousands of random strings, valid UTF-8 (every script and shape the
 *    pattern treats differently) and random bytes, through token_to_piece and detokenize,
 *    against a reference of llama.cpp's space clean-up written here on separate buffers;
 *  - special tokens (control: only with parse_special; user-defined: always), BOS / EOS;
 *  - the negative-size protocol of tokenize, token_to_piece and detokenize, and errors;
 *  - vocabularies rewritten with the gguf writer: unknown model or pre-tokenizer, broken
 *    merges, duplicate tokens, add_bos_token;
 *  - linear work: 2 MB of text costs about twice the queue operations of 1 MB, and one
 *    100 KB word costs O(n) queue operations.
 */
#include "vocab/vocab.h"

#include "core/core.h"
#include "gguf/gguf.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_util.h"
#include "test.h"
#include "vocab_util.h"

#ifndef RECUR_TEST_DATA
#error "RECUR_TEST_DATA must name the tests/data folder"
#endif

#define GPT2_FILE RECUR_TEST_DATA "/ggml-vocab-gpt-2.gguf"
#define NEOX_FILE RECUR_TEST_DATA "/ggml-vocab-gpt-neox.gguf"
#define EOT       50256 /* <|endoftext|> in GPT-2 */

static char tmpdir[64];

static struct rgguf *gpt2_file;
static struct rvocab *gpt2;          /* default: JIT when available, clean-up of spaces */
static struct rvocab *gpt2_interp;   /* PCRE2 interpreter */
static struct rvocab *gpt2_verbatim; /* no clean-up: detokenize(tokenize(s)) == s */

/* Concatenation of the pieces (special = true); *n gets the length. */
static char *pieces(const struct rvocab *v, const int32_t *t, int32_t nt, size_t *n) {
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    REQUIRE(s);
    for (int32_t i = 0; i < nt; i++) {
        int32_t k = rvocab_token_to_piece(v, t[i], s + len, (int32_t)(cap - len), 0, true);
        if (k < 0) {
            while (cap - len < (size_t)-k) cap *= 2;
            s = realloc(s, cap);
            REQUIRE(s);
            k = rvocab_token_to_piece(v, t[i], s + len, (int32_t)(cap - len), 0, true);
        }
        REQUIRE(k >= 0);
        len += (size_t)k;
    }
    *n = len;
    return s;
}

/* llama.cpp's clean-up of spaces, written on separate input and output buffers: a space
 * before ? ! . , goes; " ' " becomes "'" (the space after it cannot serve the next quote);
 * a space before 's 'm 're 've goes. */
static size_t ref_clean(const char *in, size_t n, char *out) {
    char *a = malloc(n + 1), *b = malloc(n + 1);
    REQUIRE(a && b);
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
        char next = i + 1 < n ? in[i + 1] : '\0';
        if (in[i] == ' ' && next != '\0' && strchr("?!.,", next)) continue;
        a[na++] = in[i];
    }
    size_t nb = 0;
    for (size_t i = 0; i < na; i++) {
        if (i > 0 && a[i] == '\'' && i + 1 < na && a[i - 1] == ' ' && a[i + 1] == ' ') {
            b[nb - 1] = '\''; /* replaces the space before */
            a[i + 1] = '\0';  /* the space after goes, and stops being a space */
            i++;
            continue;
        }
        b[nb++] = a[i];
    }
    size_t no = 0;
    for (size_t i = 0; i < nb; i++) {
        if (i > 0 && b[i - 1] == ' ' && b[i] == '\'' && i + 1 < nb) {
            char x1 = b[i + 1], x2 = i + 2 < nb ? b[i + 2] : '\0';
            bool two = i + 2 < nb && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'));
            if (x1 == 's' || x1 == 'm' || two) no--;
        }
        out[no++] = b[i];
    }
    free(a);
    free(b);
    return no;
}

/* ---- llama.cpp's test: ggml-vocab-gpt-2.gguf.inp / .out ---------------------------------- */

/* llama.cpp's test-tokenizer-0 vectors (vocab_util.h reads them): both tokenizers give the ids,
 * and the pieces give the text back. */
static void test_llama_cases(void) {
    struct vocab_cases vc;
    vocab_cases_open(&vc, GPT2_FILE);
    int n_cases = 0;
    const struct rvocab *vs[] = {gpt2, gpt2_interp};
    const char *text;
    size_t len;
    int32_t want[512], n_want;
    while (vocab_case_next(&vc, &text, &len, want, 512, &n_want)) {
        for (size_t k = 0; k < 2; k++) {
            int32_t n;
            int32_t *got = tokenize(vs[k], text, len, false, false, &n);
            bool same = n == n_want && memcmp(got, want, (size_t)n * sizeof *got) == 0;
            CHECK_MSG(same, "case %d (%s) \"%.*s\": %d tokens, %d expected", n_cases,
                      k ? "interpreter" : "default", (int)len, text, (int)n, (int)n_want);
            size_t np;
            char *back = pieces(vs[k], got, n, &np);
            CHECK(np == len && memcmp(back, text, len) == 0);
            free(back);
            free(got);
        }
        n_cases++;
    }
    CHECK(n_cases == 46);
    CHECK(vocab_cases_close(&vc)); /* as many lines as texts */
}

/* ---- properties ------------------------------------------------------------------------ */

static void test_properties(void) {
    CHECK(rvocab_n_tokens(gpt2) == 50257);
    CHECK(strcmp(rvocab_model(gpt2), "gpt2") == 0 && rvocab_model(NULL) == NULL);
    CHECK(rvocab_n_merges(gpt2) == 50000);
    CHECK(rvocab_bos(gpt2) == EOT && rvocab_eos(gpt2) == EOT);
    CHECK(rvocab_unk(gpt2) == -1 && rvocab_pad(gpt2) == -1);
    CHECK(!rvocab_add_bos(gpt2) && !rvocab_add_eos(gpt2));
    CHECK(rvocab_clean_spaces(gpt2) && !rvocab_clean_spaces(gpt2_verbatim));
    CHECK(!rvocab_uses_jit(gpt2_interp));
    fprintf(stderr, "PCRE2 JIT: %s\n", rvocab_uses_jit(gpt2) ? "yes" : "no (interpreter)");

    CHECK(rvocab_token_type(gpt2, EOT) == RVOCAB_TYPE_CONTROL);
    CHECK(rvocab_token_type(gpt2, 0) == RVOCAB_TYPE_NORMAL);
    CHECK(rvocab_token_type(gpt2, -1) == RVOCAB_TYPE_UNDEFINED);
    CHECK(rvocab_token_type(gpt2, 50257) == RVOCAB_TYPE_UNDEFINED);

    size_t len;
    const char *t = rvocab_token_text(gpt2, 995, &len); /* " world" */
    REQUIRE(t);
    CHECK(len == 7 && strcmp(t, "\xc4\xa0world") == 0);
    CHECK(rvocab_text_to_token(gpt2, "\xc4\xa0world", 7) == 995);
    CHECK(rvocab_text_to_token(gpt2, "<|endoftext|>", 13) == EOT);
    CHECK(rvocab_text_to_token(gpt2, "no such token here", 18) == -1);
    CHECK(rvocab_text_to_token(gpt2, "", 0) == -1);
    CHECK(rvocab_token_text(gpt2, 50257, NULL) == NULL);

    /* every byte's alphabet character is a token: ids 0..255 hold them in GPT-2 */
    for (int b = 0; b < 256; b++) {
        char s[1] = {(char)b};
        int32_t id;
        int32_t n = rvocab_tokenize(gpt2, s, 1, &id, 1, false, false);
        char back[4];
        CHECK(n == 1 && rvocab_token_to_piece(gpt2, id, back, 4, 0, false) == 1 &&
              back[0] == (char)b);
    }
}

/* ---- special tokens -------------------------------------------------------------------- */

static bool tokens_are(const struct rvocab *v, const char *s, bool add_special, bool parse_special,
                       const int32_t *want, int32_t n_want) {
    int32_t n;
    int32_t *got = tokenize(v, s, strlen(s), add_special, parse_special, &n);
    bool same = n == n_want && (n == 0 || memcmp(got, want, (size_t)n * sizeof *got) == 0);
    if (!same) {
        fprintf(stderr, "  \"%s\" gave", s);
        for (int32_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)got[i]);
        fputc('\n', stderr);
    }
    free(got);
    return same;
}

static bool contains(const int32_t *t, int32_t n, int32_t id) {
    for (int32_t i = 0; i < n; i++)
        if (t[i] == id) return true;
    return false;
}

static void test_special_tokens(void) {
    /* "Hello" 15496, " world" 995, "world" 6894 */
    CHECK(tokens_are(gpt2, "<|endoftext|>", false, true, (int32_t[]){EOT}, 1));
    CHECK(
        tokens_are(gpt2, "Hello<|endoftext|> world", false, true, (int32_t[]){15496, EOT, 995}, 3));
    CHECK(tokens_are(gpt2, "<|endoftext|><|endoftext|>Hello", false, true,
                     (int32_t[]){EOT, EOT, 15496}, 3));
    CHECK(
        tokens_are(gpt2, "Hello world<|endoftext|>", false, true, (int32_t[]){15496, 995, EOT}, 3));
    /* without parse_special the text is text; add_special adds nothing for GPT-2 */
    int32_t n;
    int32_t *t = tokenize(gpt2, "Hello<|endoftext|> world", 24, true, false, &n);
    CHECK(!contains(t, n, EOT) && n > 3);
    size_t np;
    char *back = pieces(gpt2, t, n, &np);
    CHECK(np == 24 && memcmp(back, "Hello<|endoftext|> world", 24) == 0);
    free(back);
    free(t);
    CHECK(tokens_are(gpt2, "Hello world", true, true, (int32_t[]){15496, 995}, 2));
    CHECK(tokens_are(gpt2, "", true, true, NULL, 0));

    /* control tokens print only when asked to */
    char buf[32];
    CHECK(rvocab_token_to_piece(gpt2, EOT, buf, 32, 0, false) == 0);
    CHECK(rvocab_token_to_piece(gpt2, EOT, buf, 32, 0, true) == 13 &&
          memcmp(buf, "<|endoftext|>", 13) == 0);
    int32_t ids[] = {15496, EOT, 995};
    int32_t len;
    char *s = detokenize(gpt2, ids, 3, false, false, &len);
    CHECK(len == 11 && memcmp(s, "Hello world", 11) == 0);
    free(s);
    s = detokenize(gpt2, ids, 3, false, true, &len);
    CHECK(len == 24 && memcmp(s, "Hello<|endoftext|> world", 24) == 0);
    free(s);
    /* remove_special drops BOS / EOS only for a vocabulary that adds them (not GPT-2) */
    int32_t ids2[] = {EOT, 15496, EOT};
    s = detokenize(gpt2, ids2, 3, true, true, &len);
    CHECK(len == 31 && memcmp(s, "<|endoftext|>Hello<|endoftext|>", 31) == 0);
    free(s);

    /* GPT-NeoX: runs of spaces are user-defined tokens, matched even without parse_special
     * (as llama.cpp and Hugging Face do); <|padding|> is a control token */
    struct rgguf *g = rgguf_open(NEOX_FILE, true);
    REQUIRE(g);
    struct rvocab *neox = rvocab_load(g);
    rgguf_close(g); /* the vocabulary keeps no pointer into the file */
    REQUIRE(neox);
    CHECK(rvocab_n_tokens(neox) == 50432);
    CHECK(rvocab_bos(neox) == 0 && rvocab_eos(neox) == 0 && rvocab_unk(neox) == 0);
    CHECK(rvocab_token_type(neox, 50273) == RVOCAB_TYPE_USER_DEFINED);
    int32_t a = rvocab_text_to_token(neox, "a", 1), b = rvocab_text_to_token(neox, "b", 1);
    CHECK(a >= 0 && b >= 0);
    CHECK(tokens_are(neox, "a     b", false, false, (int32_t[]){a, 50273, b}, 3));
    CHECK(tokens_are(neox, "<|padding|>", false, true, (int32_t[]){1}, 1));
    t = tokenize(neox, "<|padding|>", 11, false, false, &n);
    CHECK(!contains(t, n, 1));
    free(t);
    /* user-defined tokens print even without special */
    CHECK(rvocab_token_to_piece(neox, 50273, buf, 32, 0, false) == 5 &&
          memcmp(buf, "     ", 5) == 0);
    /* longest special first: 24 + 2 spaces, not 13 + 13 */
    char spaces[27];
    memset(spaces, ' ', 26);
    spaces[26] = '\0';
    CHECK(tokens_are(neox, spaces, false, false, (int32_t[]){50254, 50276}, 2));
    rvocab_free(neox);
}

/* ---- random round trips ------------------------------------------------------------------ */

/* A random valid UTF-8 string of up to ~cap bytes, made of segments the pattern treats
 * differently. */
static size_t random_text(unsigned long long *rng, char *out, size_t cap) {
    static const char *const words[] = {"the", "Hello", "world", "'s",    "'t",
                                        "'re", "'ve",   "'m",    "'ll",   "'d",
                                        "'RE", "don't", "I'm",   "y'all", "a'lL"};
    static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    static const char *const spaces[] = {" ",    "  ",   "\t",       "\n",           "\r\n",
                                         " \t ", "\n\n", "\xc2\xa0", "\xe3\x80\x80", "\xc2\x85",
                                         "\x0b"};
    static const char *const emoji[] = {
        "\xf0\x9f\x98\x81",                                                         /* 😁 */
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", /* family */
        "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7",                                         /* flag */
        "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",                                         /* skin tone */
        "\xe2\x9c\x85",
        "\xe2\x9d\xa4\xef\xb8\x8f",
        "\xf0\x9f\xa6\x99"};
    size_t n = 0;
    int segs = test_rand_int(rng, 24);
    for (int s = 0; s < segs && n + 64 < cap; s++) {
        int kind = test_rand_int(rng, 12);
        int reps = 1 + test_rand_int(rng, 6);
        for (int r = 0; r < reps && n + 64 < cap; r++) {
            switch (kind) {
            case 0: { /* ASCII word, mixed case */
                int len = 1 + test_rand_int(rng, 10);
                for (int i = 0; i < len; i++) {
                    int c = test_rand_int(rng, 52);
                    out[n++] = (char)(c < 26 ? 'a' + c : 'A' + c - 26);
                }
                break;
            }
            case 1: { /* digits */
                int len = 1 + test_rand_int(rng, 8);
                for (int i = 0; i < len; i++) out[n++] = (char)('0' + test_rand_int(rng, 10));
                break;
            }
            case 2:
                out[n++] = punct[test_rand_int(rng, (int)sizeof punct - 1)];
                break;
            case 3:
            case 4: {
                const char *w = spaces[test_rand_int(rng, 11)];
                memcpy(out + n, w, strlen(w));
                n += strlen(w);
                break;
            }
            case 5: {
                const char *w = words[test_rand_int(rng, 15)];
                memcpy(out + n, w, strlen(w));
                n += strlen(w);
                break;
            }
            case 6: {
                const char *w = emoji[test_rand_int(rng, 7)];
                memcpy(out + n, w, strlen(w));
                n += strlen(w);
                break;
            }
            case 7:
                n += put_cp((uint8_t *)out + n, 0x4E00 + (uint32_t)test_rand_int(rng, 0x5200));
                break;
            case 8: /* a letter with combining marks */
                out[n++] = (char)('a' + test_rand_int(rng, 26));
                for (int i = test_rand_int(rng, 3); i >= 0; i--)
                    n += put_cp((uint8_t *)out + n, 0x300 + (uint32_t)test_rand_int(rng, 0x70));
                break;
            case 9: { /* Cyrillic, Greek, Arabic, Devanagari, Khmer, Hangul */
                static const uint32_t base[] = {0x430, 0x3B1, 0x627, 0x915, 0x1780, 0xAC00};
                n += put_cp((uint8_t *)out + n,
                            base[test_rand_int(rng, 6)] + (uint32_t)test_rand_int(rng, 24));
                break;
            }
            case 10: { /* any scalar value, surrogates excluded */
                uint32_t cp;
                do cp = (uint32_t)test_rand_int(rng, 0x110000);
                while (cp >= 0xD800 && cp <= 0xDFFF);
                n += put_cp((uint8_t *)out + n, cp);
                break;
            }
            default:
                out[n++] = ' ';
                break;
            }
        }
    }
    return n;
}

static void check_round_trip(const char *s, size_t len, int *n_bad) {
    int32_t n, n2;
    int32_t *t = tokenize(gpt2, s, len, false, false, &n);
    int32_t *t2 = tokenize(gpt2_interp, s, len, false, false, &n2);
    bool same = n == n2 && memcmp(t, t2, (size_t)n * sizeof *t) == 0;
    size_t np;
    char *p = pieces(gpt2, t, n, &np);
    bool exact = np == len && memcmp(p, s, len) == 0;
    int32_t nd;
    char *d = detokenize(gpt2_verbatim, t, n, false, false, &nd);
    bool verbatim = (size_t)nd == len && memcmp(d, s, len) == 0;
    char *ref = malloc(len + 1);
    REQUIRE(ref);
    size_t nref = ref_clean(s, len, ref);
    free(d);
    d = detokenize(gpt2, t, n, false, false, &nd);
    bool cleaned = (size_t)nd == nref && memcmp(d, ref, nref) == 0;
    if (!(same && exact && verbatim && cleaned) && (*n_bad)++ < 5) {
        fprintf(stderr,
                "  round trip of \"%.*s\" (%zu bytes): jit==interp %d, pieces %d, "
                "verbatim %d, cleaned %d\n",
                (int)len, s, len, same, exact, verbatim, cleaned);
    }
    CHECK(same && exact && verbatim && cleaned);
    free(ref);
    free(d);
    free(p);
    free(t);
    free(t2);
}

static void test_random_round_trip(void) {
    unsigned long long rng = 0x5eed0001;
    char buf[4096];
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        size_t n = random_text(&rng, buf, sizeof buf);
        check_round_trip(buf, n, &bad);
    }
    /* the clean-up cases themselves */
    const char *cases[] = {"a ? b",   " ?",     "x ' y", " ' ' ", "I 'm here", "it 's",
                           "you 're", "we 've", "do 't", "he 'd", "I 'll",     "a , b . c ! d",
                           "'",       " ' ",    "a 'x",  "end '"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_round_trip(cases[i], strlen(cases[i]), &bad);
    /* hand-checked results of llama.cpp's clean-up */
    const char *in[] = {"Hello , world !", "x ' y", "I 'm you 're it 's we 've he 'd", " ' ' "};
    const char *want[] = {"Hello, world!", "x'y", "I'm you're it's we've he 'd", "'' "};
    for (size_t i = 0; i < 4; i++) {
        int32_t n, nd;
        int32_t *t = tokenize(gpt2, in[i], strlen(in[i]), false, false, &n);
        char *d = detokenize(gpt2, t, n, false, false, &nd);
        CHECK_MSG((size_t)nd == strlen(want[i]) && memcmp(d, want[i], (size_t)nd) == 0,
                  "clean-up of \"%s\" gave \"%.*s\"", in[i], (int)nd, d);
        free(d);
        free(t);
    }
}

static void test_invalid_utf8(void) {
    /* each byte outside valid UTF-8 is a piece of its own: its byte token */
    const char *cases[] = {
        "\xff",         "\xe2\x82", "a\xc0\x80z", "\xed\xa0\x80",  "\xf4\x90\x80\x80",
        "\xf0\x9f\x98", "x\x80y",   "\xc2",       "ok \xfe\xfe ok"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const char *s = cases[c];
        size_t len = strlen(s);
        int32_t n;
        int32_t *t = tokenize(gpt2, s, len, false, false, &n);
        size_t np;
        char *p = pieces(gpt2, t, n, &np);
        CHECK_MSG(np == len && memcmp(p, s, len) == 0, "case %zu", c);
        /* every invalid byte is alone in its token */
        int32_t k = 0;
        for (size_t i = 0; i < len;) {
            unsigned char b = (unsigned char)s[i];
            bool ascii = b < 0x80;
            if (!ascii) {
                /* bytes of these cases outside ASCII are all invalid */
                char one[4];
                CHECK(k < n && rvocab_token_to_piece(gpt2, t[k], one, 4, 0, true) == 1 &&
                      one[0] == (char)b);
                k++;
                i++;
            } else {
                size_t j = i;
                while (j < len && (unsigned char)s[j] < 0x80) j++;
                int32_t m;
                int32_t *u = tokenize(gpt2, s + i, j - i, false, false, &m);
                CHECK(k + m <= n && memcmp(t + k, u, (size_t)m * sizeof *u) == 0);
                k += m;
                free(u);
                i = j;
            }
        }
        CHECK(k == n);
        free(p);
        free(t);
    }
    /* GPT-NeoX's vocabulary has no token for the bytes UTF-8 never uses (0xC0, 0xC1,
       0xF5-0xFF), and its unknown token is <|endoftext|>, the end of text: such a byte is read
       as U+FFFD, as llama.cpp reads it, never as the unknown token; the bytes it has tokens for
       stay byte tokens */
    struct rgguf *g = rgguf_open(NEOX_FILE, true);
    REQUIRE(g);
    struct rvocab *neox = rvocab_load(g);
    rgguf_close(g);
    REQUIRE(neox);
    int32_t nf, nx, nt;
    /* each invalid byte a piece of its own: "a", U+FFFD three times, "b" */
    int32_t *f = tokenize(neox, "\xEF\xBF\xBD", 3, false, false, &nf);
    int32_t *x = tokenize(neox,
                          "a\xff\xfe\xc0"
                          "b",
                          5, false, false, &nx);
    const int32_t a_id = rvocab_text_to_token(neox, "a", 1),
                  b_id = rvocab_text_to_token(neox, "b", 1);
    bool as_fffd = nf > 0 && nx == 2 + 3 * nf && x[0] == a_id && x[nx - 1] == b_id;
    for (int32_t k = 0; as_fffd && k < 3 * nf; k++) as_fffd = x[1 + k] == f[k % nf];
    CHECK(as_fffd && !contains(x, nx, 0));
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int32_t *u = tokenize(neox, cases[c], strlen(cases[c]), false, false, &nt);
        CHECK_MSG(nt > 0 && !contains(u, nt, 0), "GPT-NeoX, case %zu: the unknown token", c);
        free(u);
    }
    int32_t *e = tokenize(neox, "\xe2\x82", 2, false, false, &nt); /* bytes it has: kept */
    char back[8];
    CHECK(nt == 2 && rvocab_token_to_piece(neox, e[0], back, 8, 0, false) == 1 &&
          back[0] == '\xe2' && rvocab_token_to_piece(neox, e[1], back, 8, 0, false) == 1 &&
          back[0] == '\x82');
    free(e);
    free(f);
    free(x);
    rvocab_free(neox);
    /* random bytes: never a crash, always the same bytes back, JIT == interpreter */
    unsigned long long rng = 0xbad0b17e;
    char buf[512];
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        size_t n = (size_t)test_rand_int(&rng, (int)sizeof buf);
        for (size_t j = 0; j < n; j++) {
            int r = test_rand_int(&rng, 4);
            buf[j] = (char)(r == 0   ? ' '
                            : r == 1 ? 'a' + test_rand_int(&rng, 26)
                                     : test_rand_int(&rng, 256));
        }
        check_round_trip(buf, n, &bad);
    }
}

/* ---- sizes and errors ------------------------------------------------------------------ */

static void test_size_protocol(void) {
    const char *s = "Hello, world! How are you?";
    int32_t n = rvocab_tokenize(gpt2, s, (int32_t)strlen(s), NULL, 0, false, false);
    CHECK(n < 0);
    int32_t need = -n;
    int32_t t[64];
    CHECK(rvocab_tokenize(gpt2, s, (int32_t)strlen(s), t, need - 1, false, false) == -need);
    CHECK(rvocab_tokenize(gpt2, s, (int32_t)strlen(s), t, need, false, false) == need);
    CHECK(rvocab_tokenize(gpt2, s, (int32_t)strlen(s), t, 64, false, false) == need);
    CHECK(rvocab_tokenize(gpt2, "", 0, NULL, 0, false, false) == 0);
    CHECK(rvocab_tokenize(gpt2, NULL, 0, NULL, 0, false, false) == 0);

    /* token_to_piece: " world" is 6 bytes */
    char buf[16];
    CHECK(rvocab_token_to_piece(gpt2, 995, buf, 5, 0, false) == -6);
    CHECK(rvocab_token_to_piece(gpt2, 995, NULL, 0, 0, false) == -6);
    CHECK(rvocab_token_to_piece(gpt2, 995, buf, 6, 0, false) == 6 && memcmp(buf, " world", 6) == 0);
    CHECK(rvocab_token_to_piece(gpt2, 995, buf, 5, 1, false) == 5 && memcmp(buf, "world", 5) == 0);
    CHECK(rvocab_token_to_piece(gpt2, 220, buf, 0, 3, false) == 0);    /* " " stripped */
    CHECK(rvocab_token_to_piece(gpt2, 15496, buf, 16, 2, false) == 5); /* no space to strip */

    /* detokenize */
    int32_t len = rvocab_detokenize(gpt2, t, need, NULL, 0, false, false);
    CHECK(len == -(int32_t)strlen(s));
    char out[64];
    CHECK(rvocab_detokenize(gpt2, t, need, out, -len - 1, false, false) == len);
    CHECK(rvocab_detokenize(gpt2, t, need, out, -len, false, false) == -len &&
          memcmp(out, s, (size_t)-len) == 0);
    /* the size asked for is before the clean-up, which only shortens */
    int32_t ids[] = {15496, 837, 995}; /* "Hello" " ," " world" */
    CHECK(rvocab_detokenize(gpt2, ids, 3, out, 11, false, false) == -13);
    CHECK(rvocab_detokenize(gpt2, ids, 3, out, 13, false, false) == 12 &&
          memcmp(out, "Hello, world", 12) == 0);
    CHECK(rvocab_detokenize(gpt2, t, 0, out, 0, false, false) == 0);

    /* errors */
    rcore_error_clear();
    CHECK(rvocab_token_to_piece(gpt2, 50257, buf, 16, 0, true) == 0);
    CHECK_ERR("token 50257 is out of range");
    rcore_error_clear();
    CHECK(rvocab_token_to_piece(gpt2, -1, buf, 16, 0, true) == 0);
    CHECK_ERR("token -1 is out of range");
    int32_t badids[] = {15496, 60000};
    CHECK(rvocab_detokenize(gpt2, badids, 2, out, 64, false, false) == INT32_MIN);
    CHECK_ERR("token 60000 (at 1) is out of range");
    CHECK(rvocab_tokenize(gpt2, "x", -1, t, 64, false, false) == INT32_MIN);
    CHECK_ERR("invalid text");
    CHECK(rvocab_tokenize(gpt2, NULL, 3, t, 64, false, false) == INT32_MIN);
    CHECK(rvocab_tokenize(gpt2, "x", 1, NULL, 5, false, false) == INT32_MIN);
    CHECK_ERR("invalid token buffer");
    CHECK(rvocab_tokenize(NULL, "x", 1, t, 5, false, false) == INT32_MIN);
    CHECK(rvocab_detokenize(gpt2, t, -1, out, 64, false, false) == INT32_MIN);
    CHECK(rvocab_load(NULL) == NULL);
    rvocab_free(NULL);
}

/* ---- rewritten vocabularies ------------------------------------------------------------- */

/* A writer holding every key-value of the GPT-2 file except those named in skip. */
static struct rgguf_writer *copy_except(const char *const *skip, size_t n_skip) {
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    for (int64_t i = 0; i < rgguf_n_kv(gpt2_file); i++) {
        const char *key = rgguf_key_name(gpt2_file, i);
        bool skipped = false;
        for (size_t k = 0; k < n_skip; k++) skipped |= strcmp(key, skip[k]) == 0;
        if (!skipped) REQUIRE(rgguf_writer_copy_kv(w, gpt2_file, key));
    }
    return w;
}

/* Writes w, loads the vocabulary from the file and removes it; frees w. */
static struct rvocab *load_written(struct rgguf_writer *w) {
    char path[128];
    snprintf(path, sizeof path, "%s/variant.gguf", tmpdir);
    return vocab_load_written(w, path);
}

/* The merges of GPT-2 with merge i replaced by text (not copied: the strings live in the
 * GPT-2 file, which stays open). */
static const char **merges_with(uint64_t i, const char *text, uint64_t *n) {
    enum rgguf_vtype et;
    REQUIRE(rgguf_get_arr(gpt2_file, "tokenizer.ggml.merges", &et, n));
    const char **m = malloc(*n * sizeof *m);
    REQUIRE(m);
    for (uint64_t k = 0; k < *n; k++)
        REQUIRE(rgguf_get_arr_str(gpt2_file, "tokenizer.ggml.merges", k, &m[k], NULL));
    m[i] = text;
    return m;
}

/* The GPT-2 vocabulary with the token id keys keys[i] = ids[i] (n of them) added. */
static struct rvocab *with_ids(const char *const *keys, const uint32_t *ids, int n) {
    struct rgguf_writer *w = copy_except(NULL, 0);
    for (int i = 0; i < n; i++) REQUIRE(rgguf_writer_set_u32(w, keys[i], ids[i]));
    struct rvocab *v = load_written(w);
    REQUIRE(v);
    return v;
}

/* The fill-in-the-middle ids: absent, the current keys (all six), the older prefix/suffix/
 * middle keys alone, both (the older wins, as llama.cpp reads it last), one past the
 * vocabulary (ignored) and one of the wrong type (refused, naming the key). */
static void test_fim_ids(void) {
    for (int i = 0; i < RVOCAB_FIM_COUNT; i++) CHECK(rvocab_fim(gpt2, (enum rvocab_fim)i) == -1);
    CHECK(rvocab_fim(gpt2, RVOCAB_FIM_COUNT) == -1 && rvocab_fim(NULL, RVOCAB_FIM_PRE) == -1);

    static const char *const current[RVOCAB_FIM_COUNT] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    struct rvocab *v = with_ids(current, (const uint32_t[]){100, 101, 102, 103, 104, 105}, 6);
    for (int i = 0; i < RVOCAB_FIM_COUNT; i++) CHECK(rvocab_fim(v, (enum rvocab_fim)i) == 100 + i);
    rvocab_free(v);

    static const char *const older[3] = {"tokenizer.ggml.prefix_token_id",
                                         "tokenizer.ggml.suffix_token_id",
                                         "tokenizer.ggml.middle_token_id"};
    v = with_ids(older, (const uint32_t[]){7, 8, 9}, 3);
    CHECK(rvocab_fim(v, RVOCAB_FIM_PRE) == 7 && rvocab_fim(v, RVOCAB_FIM_SUF) == 8 &&
          rvocab_fim(v, RVOCAB_FIM_MID) == 9 && rvocab_fim(v, RVOCAB_FIM_REP) == -1);
    rvocab_free(v);

    static const char *const both[3] = {current[RVOCAB_FIM_PRE], older[0], current[RVOCAB_FIM_SUF]};
    v = with_ids(both, (const uint32_t[]){1, 2, 50257}, 3);
    CHECK(rvocab_fim(v, RVOCAB_FIM_PRE) == 2);  /* the older key, read last */
    CHECK(rvocab_fim(v, RVOCAB_FIM_SUF) == -1); /* past the vocabulary: ignored */
    rvocab_free(v);

    struct rgguf_writer *w = copy_except(NULL, 0);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.fim_mid_token_id", "5"));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.fim_mid_token_id");
}

static void test_load_errors(void) {
    const char *pre[] = {"tokenizer.ggml.pre"};
    const char *model[] = {"tokenizer.ggml.model"};
    const char *merges[] = {"tokenizer.ggml.merges"};

    struct rgguf_writer *w = copy_except(pre, 1);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2"));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.pre is \"qwen2\", a pre-tokenizer recur does not implement");
    CHECK_ERR("\"gpt-2\", \"phi-2\", \"mpt\"");

    w = copy_except(model, 1);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.model", "t5"));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.model is \"t5\": supported are \"gpt2\" (byte-level BPE), \"llama\" "
              "(SentencePiece) and \"rwkv\" (RWKV world)");

    w = copy_except(model, 1);
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.model is missing");

    uint64_t n;
    const char **m = merges_with(17, "a@@ zz##", &n);
    w = copy_except(merges, 1);
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, n));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.merges: merge 17 \"a@@ zz##\" names a token that is not in the "
              "vocabulary");
    free(m);

    m = merges_with(3, "nospace", &n);
    w = copy_except(merges, 1);
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, n));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.merges: merge 3 \"nospace\" has no space");
    free(m);

    m = merges_with(49999, "<|endoftext|> <|endoftext|>", &n);
    w = copy_except(merges, 1);
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, n));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("merge 49999 \"<|endoftext|> <|endoftext|>\" makes a token that is not in the "
              "vocabulary");
    free(m);

    w = copy_except(merges, 1);
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.merges is missing");

    /* a duplicate token */
    const char *tokens[] = {"tokenizer.ggml.tokens"};
    enum rgguf_vtype et;
    uint64_t nt;
    REQUIRE(rgguf_get_arr(gpt2_file, "tokenizer.ggml.tokens", &et, &nt));
    const char **tk = malloc(nt * sizeof *tk);
    REQUIRE(tk);
    for (uint64_t k = 0; k < nt; k++)
        REQUIRE(rgguf_get_arr_str(gpt2_file, "tokenizer.ggml.tokens", k, &tk[k], NULL));
    tk[EOT] = "!";
    w = copy_except(tokens, 1);
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tk, nt));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.tokens: token 50256 \"!\" has the same text as token 0");
    free(tk);

    /* too few token types */
    const char *types[] = {"tokenizer.ggml.token_type"};
    int32_t one = 1;
    w = copy_except(types, 1);
    REQUIRE(rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, &one, 1));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.token_type holds 1 types for 50257 tokens");

    /* add_bos_token without an id */
    const char *bos[] = {"tokenizer.ggml.bos_token_id"};
    w = copy_except(bos, 1);
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
}

static void test_variants(void) {
    /* "mpt" uses GPT-2's pattern; a missing key is llama.cpp's 'default', which splits this
     * text differently (digits, punctuation runs: tests/unit/test_vocab_pre.c has its vectors) */
    const char *pre[] = {"tokenizer.ggml.pre"};
    const char *text = "Hello, y'all! How are you \xf0\x9f\x98\x81 ?  3333 apples\n\n";
    int32_t n0, n1, n2;
    int32_t *t0 = tokenize(gpt2, text, strlen(text), false, false, &n0);
    struct rgguf_writer *w = copy_except(pre, 1);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.pre", "mpt"));
    struct rvocab *mpt = load_written(w);
    CHECK(mpt != NULL);
    struct rvocab *nopre = load_written(copy_except(pre, 1));
    CHECK(nopre != NULL);
    if (mpt && nopre) {
        int32_t *t1 = tokenize(mpt, text, strlen(text), false, false, &n1);
        int32_t *t2 = tokenize(nopre, text, strlen(text), false, false, &n2);
        CHECK(n1 == n0 && memcmp(t1, t0, (size_t)n0 * sizeof *t0) == 0);
        CHECK(n2 != n0 || memcmp(t2, t0, (size_t)n0 * sizeof *t0) != 0);
        CHECK(strcmp(rvocab_pre_name(nopre), "default") == 0);
        CHECK(strcmp(rvocab_pre_name(mpt), "mpt") == 0);
        free(t1);
        free(t2);
    }
    rvocab_free(mpt);
    rvocab_free(nopre);
    free(t0);

    /* add_bos_token / add_eos_token: added by add_special, removed by remove_special */
    w = copy_except(NULL, 0);
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true));
    struct rvocab *both = load_written(w);
    REQUIRE(both);
    CHECK(rvocab_add_bos(both) && rvocab_add_eos(both));
    CHECK(tokens_are(both, "Hello world", true, false, (int32_t[]){EOT, 15496, 995, EOT}, 4));
    CHECK(tokens_are(both, "Hello world", false, false, (int32_t[]){15496, 995}, 2));
    CHECK(tokens_are(both, "", true, false, (int32_t[]){EOT, EOT}, 2));
    int32_t ids[] = {EOT, 15496, 995, EOT};
    int32_t len;
    char *s = detokenize(both, ids, 4, true, true, &len);
    CHECK(len == 11 && memcmp(s, "Hello world", 11) == 0);
    free(s);
    s = detokenize(both, ids, 4, false, true, &len);
    CHECK(len == 37);
    free(s);
    rvocab_free(both);

    /* a normal token outside the byte alphabet, and an unused one: appended to the list */
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"};
    enum rgguf_vtype et;
    uint64_t nt;
    REQUIRE(rgguf_get_arr(gpt2_file, "tokenizer.ggml.tokens", &et, &nt));
    const char **tk = malloc((nt + 2) * sizeof *tk);
    int32_t *ty = malloc((nt + 2) * sizeof *ty);
    REQUIRE(tk && ty);
    const void *types;
    REQUIRE(rgguf_get_arr_data(gpt2_file, "tokenizer.ggml.token_type", RGGUF_INT32, &types, NULL));
    memcpy(ty, types, nt * sizeof *ty);
    for (uint64_t k = 0; k < nt; k++)
        REQUIRE(rgguf_get_arr_str(gpt2_file, "tokenizer.ggml.tokens", k, &tk[k], NULL));
    tk[nt] = "\xe2\x98\x83"; /* a snowman, which no byte maps to */
    ty[nt] = RVOCAB_TYPE_NORMAL;
    tk[nt + 1] = "unused!";
    ty[nt + 1] = RVOCAB_TYPE_UNUSED;
    w = copy_except(keys, 2);
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tk, nt + 2));
    REQUIRE(rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, ty, nt + 2));
    struct rvocab *more = load_written(w);
    REQUIRE(more);
    char buf[64];
    const char *want = "[UNK_BYTE_0xe29883\xe2\x98\x83]";
    CHECK(rvocab_token_to_piece(more, (int32_t)nt, buf, 64, 0, false) == (int32_t)strlen(want) &&
          memcmp(buf, want, strlen(want)) == 0);
    CHECK(rvocab_token_to_piece(more, (int32_t)nt + 1, buf, 64, 0, true) == 0);
    rvocab_free(more);
    free(tk);
    free(ty);
}

/* ---- linear work -------------------------------------------------------------------------- */

static uint64_t work(const struct rvocab_stats *st) {
    return st->n_queue_pushes + st->n_queue_pops;
}

/* Text of about `size` bytes cut from varied paragraphs, with numbers that change. */
static char *make_text(size_t size, size_t *len) {
    static const char *const paras[] = {
        "The quick brown fox jumps over the lazy dog. It's not the first time, and they'll "
        "say it won't be the last; we've seen it times.\n\n",
        "int main(void) {\n    for (int i = 0; i < n; i++) printf(\"%d\\n\", i);\n"
        "    return 0;\n}\n",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80! "
        "\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8 apple \xf0\x9f\x98\x81\xf0\x9f\x98\x81 "
        "C\xe1\xbb\xad"
        "a Vi\xe1\xbb\x87t\t\t  tabs and   spaces\n",
        "   Numbers: 3.14159, 2,718,281,828 and; ids like w048-7tuijk_dsdfhu!!! ??? ...\n",
    };
    char *s = malloc(size + 512);
    REQUIRE(s);
    size_t n = 0;
    for (int i = 0; n < size; i++) {
        int k = snprintf(s + n, 512, "%s%d\n", paras[i % 4], i * 7919 % 100003);
        REQUIRE(k > 0 && k < 512);
        n += (size_t)k;
    }
    *len = n;
    return s;
}

static void test_linear(void) {
    struct rvocab_stats st1, st2;
    size_t n1, n2;
    char *s1 = make_text(1 << 20, &n1);
    char *s2 = make_text(2 << 20, &n2);
    int32_t k1 = rvocab_tokenize_stats(gpt2, s1, (int32_t)n1, NULL, 0, false, false, &st1);
    int32_t k2 = rvocab_tokenize_stats(gpt2, s2, (int32_t)n2, NULL, 0, false, false, &st2);
    CHECK(k1 < 0 && k2 < 0);
    double ratio = (double)work(&st2) / (double)work(&st1);
    fprintf(stderr, "1 MB: %d tokens, %llu pieces, %llu merges, %llu queue ops; 2 MB: x%.3f\n",
            (int)-k1, (unsigned long long)st1.n_pieces, (unsigned long long)st1.n_merges,
            (unsigned long long)work(&st1), ratio);
    CHECK(ratio > 1.8 && ratio < 2.2);
    CHECK(work(&st1) < 6 * (uint64_t)n1);
    /* the interpreter splits the same way (and would take minutes if it were quadratic) */
    struct rvocab_stats st3;
    int32_t k3 = rvocab_tokenize_stats(gpt2_interp, s2, (int32_t)n2, NULL, 0, false, false, &st3);
    CHECK(k3 == k2 && st3.n_pieces == st2.n_pieces && st3.n_merges == st2.n_merges);
    free(s1);
    free(s2);

    /* one word of 50 KB and of 100 KB: a single piece, O(n) queue operations */
    unsigned long long rng = 42;
    for (int shape = 0; shape < 3; shape++) {
        uint64_t w[2];
        for (int h = 0; h < 2; h++) {
            size_t n = (size_t)(h + 1) * 50000;
            char *s = malloc(n);
            REQUIRE(s);
            for (size_t i = 0; i < n; i++)
                s[i] = shape == 0   ? (char)('a' + test_rand_int(&rng, 26))
                       : shape == 1 ? 'a'
                                    : "abcdefghij"[i % 10];
            struct rvocab_stats st;
            int32_t k = rvocab_tokenize_stats(gpt2, s, (int32_t)n, NULL, 0, false, false, &st);
            CHECK(k < 0 && st.n_pieces == 1);
            CHECK(work(&st) <= 6 * (uint64_t)n);
            w[h] = work(&st);
            int32_t nt;
            int32_t *t = tokenize(gpt2, s, n, false, false, &nt);
            size_t np;
            char *p = pieces(gpt2, t, nt, &np);
            CHECK(np == n && memcmp(p, s, n) == 0);
            free(p);
            free(t);
            free(s);
        }
        CHECK_MSG((double)w[1] / (double)w[0] < 2.2, "shape %d: %llu then %llu queue ops", shape,
                  (unsigned long long)w[0], (unsigned long long)w[1]);
    }

    /* long runs of one class, through the JIT and the interpreter: no PCRE2 limit is hit */
    const char fill[] = {' ', '7', '!', '\n'};
    for (int f = 0; f < 4; f++) {
        size_t n = 300000;
        char *s = malloc(n + 1);
        REQUIRE(s);
        memset(s, fill[f], n);
        s[n] = 'x';
        for (int k = 0; k < 2; k++) {
            const struct rvocab *v = k ? gpt2_interp : gpt2;
            rcore_error_clear();
            int32_t r = rvocab_tokenize(v, s, (int32_t)n + 1, NULL, 0, false, false);
            CHECK_MSG(r < 0 && r != INT32_MIN, "fill '%c' %s: %s", fill[f],
                      k ? "interpreter" : "default", rcore_error_get());
        }
        free(s);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/recur-test-vocab-XXXXXX");
    REQUIRE(mkdtemp(tmpdir));
    gpt2_file = rgguf_open(GPT2_FILE, true);
    REQUIRE(gpt2_file);
    gpt2 = rvocab_load(gpt2_file);
    gpt2_interp = rvocab_load_flags(gpt2_file, RVOCAB_LOAD_NO_JIT);
    gpt2_verbatim = rvocab_load_flags(gpt2_file, RVOCAB_LOAD_NO_CLEAN_SPACES);
    if (!gpt2 || !gpt2_interp || !gpt2_verbatim) fprintf(stderr, "%s\n", rcore_error_get());
    REQUIRE(gpt2 && gpt2_interp && gpt2_verbatim);

    RUN(test_llama_cases);
    RUN(test_properties);
    RUN(test_special_tokens);
    RUN(test_random_round_trip);
    RUN(test_invalid_utf8);
    RUN(test_size_protocol);
    RUN(test_load_errors);
    RUN(test_fim_ids);
    RUN(test_variants);
    RUN(test_linear);

    rvocab_free(gpt2);
    rvocab_free(gpt2_interp);
    rvocab_free(gpt2_verbatim);
    rgguf_close(gpt2_file);
    CHECK(rmdir(tmpdir) == 0);
    return test_finish("test_vocab");
}
