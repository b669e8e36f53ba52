/*
 * Tests of the RWKV world tokenizer (src/vocab, tokenizer.ggml.model = "rwkv") on small
 * vocabularies written here with the GGUF writer, as llama.cpp's converter writes them
 * (tests/lib/rwkv_vocab.h):
 *
 *  - the stored texts of all 256 bytes and of words with quotes, backslashes, control bytes
 *    and UTF-8, against hand-written expectations, and their pieces; every escape form of
 *    llama.cpp's unescape on hand-written texts;
 *  - greedy longest match against a brute-force tokenizer (rwkv_vocab.h: at each position, try
 *    every token's bytes, take the longest, the latest id among equal bytes) on thousands of
 *    random byte strings, token soups and random UTF-8 text, with and without parse_special,
 *    and the round trip detokenize(tokenize(s)) == s; a 65536-token vocabulary likewise;
 *  - special tokens (control only with parse_special, user-defined always, <s> also through
 *    the trie), unused [PAD] tokens, BOS / EOS keys (reported, never added, as llama.cpp);
 *  - duplicate bytes (the later id wins), a missing single byte (unk, or a tokenize error when
 *    there is no unk), malformed escapes and bad keys (load errors naming the fault);
 *  - every allocation of load and tokenize failing in turn (the binary is linked with
 *    --wrap=malloc,calloc,realloc): an error with a message, never a crash or a leak.
 */
#include "vocab/vocab.h"

#include "core/core.h"
#include "gguf/gguf.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc_shim.h" /* armed only by test_alloc_fail */
#include "rwkv_vocab.h"
#include "test.h"
#include "vocab_util.h"

static char tmpdir[64];

/* Writes w, loads the vocabulary from the file and removes it; frees w. NULL (error set) when
 * the load fails. */
static struct rvocab *load_written(struct rgguf_writer *w) {
    REQUIRE(w);
    char path[128];
    snprintf(path, sizeof path, "%s/rwkv.gguf", tmpdir);
    return vocab_load_written(w, path);
}

static struct rvocab *load_vocab(const struct rwkv_vocab *tv) {
    return load_written(rwkv_vocab_writer(tv));
}

static bool tokens_are(const struct rvocab *v, const char *s, bool parse_special,
                       const int32_t *want, int32_t n_want) {
    int32_t n;
    int32_t *got = tokenize(v, s, strlen(s), false, parse_special, &n);
    bool same = n == n_want && (n == 0 || memcmp(got, want, (size_t)n * sizeof *got) == 0);
    if (!same) {
        fprintf(stderr, "  \"%s\" (parse_special %d) gave", s, parse_special);
        for (int32_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)got[i]);
        fputc('\n', stderr);
    }
    free(got);
    return same;
}

static bool piece_is(const struct rvocab *v, int32_t id, bool special, const void *want, size_t n) {
    char buf[256];
    int32_t k = rvocab_token_to_piece(v, id, buf, (int32_t)sizeof buf, 0, special);
    return k == (int32_t)n && memcmp(buf, want, n) == 0;
}

static int32_t id_of_word(const char *w) {
    for (size_t i = 0; i < sizeof rwkv_words / sizeof *rwkv_words; i++)
        if (strcmp(rwkv_words[i], w) == 0) return 257 + (int32_t)i;
    REQUIRE(!"no such word");
    return -1;
}

#define BYTE(c) ((int32_t)(uint8_t)(c) + 1) /* the id of a single byte's token */

/* Tokenizes s with v and the brute force, compares, and checks the round trips. */
static bool check_text(const struct rvocab *v, const struct rwkv_vocab *tv, const uint8_t *s,
                       size_t n, bool parse_special, int32_t unk) {
    int32_t *want = malloc((n + 1) * sizeof *want);
    REQUIRE(want);
    int32_t n_want = rwkv_brute_tokenize(tv, s, n, parse_special, unk, want);
    REQUIRE(n_want >= 0);
    int32_t n_got;
    int32_t *got = tokenize(v, s, n, true, parse_special, &n_got);
    bool ok = n_got == n_want && memcmp(got, want, (size_t)n_got * sizeof *got) == 0;
    if (!ok) {
        fprintf(stderr, "  %zu bytes:", n);
        for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %02x", s[i]);
        fprintf(stderr, "\n  got %d tokens, want %d; first difference at", (int)n_got, (int)n_want);
        for (int32_t i = 0; i < n_got && i < n_want; i++) {
            if (got[i] != want[i]) {
                fprintf(stderr, " %d: %d vs %d", (int)i, (int)got[i], (int)want[i]);
                break;
            }
        }
        fputc('\n', stderr);
    }
    if (ok && unk < 0) { /* every byte has a token: the text comes back */
        int32_t len;
        char *back = detokenize(v, got, n_got, false, true, &len);
        ok = len == (int32_t)n && memcmp(back, s, n) == 0;
        if (!ok) fprintf(stderr, "  detokenize gave %d bytes for %zu\n", (int)len, n);
        free(back);
    }
    free(want);
    free(got);
    return ok;
}

/* ---- stored texts and unescape ---------------------------------------------------------- */

static void test_converter_texts(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(0);
    /* the escaping of this test's helper, checked against Python's own output */
    static const struct {
        const char *bytes, *text;
    } py[] = {
        {"\\", "\\\\"},
        {"\t", "\\t"},
        {"\n", "\\n"},
        {"\r", "\\r"},
        {"\x0b", "\\x0b"},
        {"\x1f", "\\x1f"},
        {"\x7f", "\\x7f"},
        {"\x80", "\\x80"},
        {"\xff", "\\xff"},
        {"'", "'"},
        {"\"", "\""},
        {"'s", "'s"},
        {" ", " "},
        {"~", "~"},
        {"it's \"x\"", "it\\'s \"x\""},
        {"\xe4\xbd\xa0", "\\xe4\\xbd\\xa0"},
    };
    for (size_t i = 0; i < sizeof py / sizeof *py; i++) {
        char out[64];
        rwkv_py_escape((const uint8_t *)py[i].bytes, strlen(py[i].bytes), out);
        CHECK_MSG(strcmp(out, py[i].text) == 0, "escape of \"%s\": \"%s\"", py[i].bytes, out);
    }
    char out[8];
    rwkv_py_escape((const uint8_t *)"\0", 1, out);
    CHECK(strcmp(out, "\\x00") == 0);

    struct rvocab *v = load_vocab(&tv);
    if (!v) fprintf(stderr, "%s\n", rcore_error_get());
    REQUIRE(v);
    CHECK(strcmp(rvocab_model(v), "rwkv") == 0);
    CHECK(rvocab_n_tokens(v) == tv.n);
    /* every byte: the text the file holds, and back to the byte */
    int n_bad = 0;
    for (int b = 0; b < 256; b++) {
        size_t len;
        const char *t = rvocab_token_text(v, b + 1, &len);
        char want[8];
        uint8_t c = (uint8_t)b;
        rwkv_py_escape(&c, 1, want);
        if (!t || len != strlen(want) || strcmp(t, want) != 0 || !piece_is(v, b + 1, false, &c, 1))
            n_bad++;
        int32_t id;
        if (rvocab_tokenize(v, (const char *)&c, 1, &id, 1, false, false) != 1 || id != b + 1)
            n_bad++;
        if (rvocab_token_type(v, b + 1) != RVOCAB_TYPE_NORMAL) n_bad++;
    }
    CHECK_MSG(n_bad == 0, "%d wrong bytes", n_bad);
    CHECK(strcmp(rvocab_token_text(v, BYTE('\\'), NULL), "\\\\") == 0);
    CHECK(strcmp(rvocab_token_text(v, BYTE('\xe4'), NULL), "\\xe4") == 0);
    CHECK(strcmp(rvocab_token_text(v, id_of_word("it's \"x\""), NULL), "it\\'s \"x\"") == 0);
    CHECK(strcmp(rvocab_token_text(v, id_of_word("\\n"), NULL), "\\\\n") == 0);
    CHECK(rvocab_text_to_token(v, "\\xe4\\xbd\\xa0", 12) == id_of_word("\xe4\xbd\xa0"));
    /* every word: its bytes, also when they are part of a UTF-8 character */
    for (size_t i = 0; i < sizeof rwkv_words / sizeof *rwkv_words; i++) {
        const char *w = rwkv_words[i];
        CHECK_MSG(piece_is(v, 257 + (int32_t)i, false, w, strlen(w)), "word %zu", i);
    }
    CHECK(piece_is(v, id_of_word("\xe4\xbd"), false, "\xe4\xbd", 2));
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

static void test_unescape_forms(void) {
    /* hand-written texts: every form llama.cpp's unescape knows */
    static const struct {
        const char *text;
        const char *bytes;
        size_t n;
    } forms[] = {
        {"A\\tB", "A\tB", 3},
        {"\\n\\r", "\n\r", 2},
        {"\\x00\\x0a\\xff\\x7f", "\x00\x0a\xff\x7f", 4},
        {"\\x41\\x5a", "AZ", 2},     /* digits only */
        {"\\\\\\'\\\"", "\\'\"", 3}, /* \\ \' \" */
        {"\\a\\q\\ \\%", "aq %", 4}, /* any other character stands for itself */
        {"tail\\\\", "tail\\", 5},   /* an escaped backslash at the end */
        {"\\xe4\\xbd\\xa0!", "\xe4\xbd\xa0!", 4},
        {"x\\\\x41", "x\\x41", 5},                 /* \\ then x41: no hex escape */
        {"caf\xc3\xa9 raw", "caf\xc3\xa9 raw", 9}, /* unescaped bytes are copied */
        {"[PAD9]", "[PAD9]", 6},
    };
    const size_t n_forms = sizeof forms / sizeof *forms;
    struct rwkv_vocab tv = {0};
    rwkv_vocab_add_text(&tv, "<s>", RVOCAB_TYPE_CONTROL, (const uint8_t *)"<s>", 3);
    for (size_t i = 0; i < n_forms; i++)
        rwkv_vocab_add_text(&tv, forms[i].text, RVOCAB_TYPE_NORMAL, (const uint8_t *)forms[i].bytes,
                            forms[i].n);
    struct rvocab *v = load_vocab(&tv);
    if (!v) fprintf(stderr, "%s\n", rcore_error_get());
    REQUIRE(v);
    for (size_t i = 0; i < n_forms; i++) {
        int32_t id = 1 + (int32_t)i;
        CHECK_MSG(piece_is(v, id, false, forms[i].bytes, forms[i].n), "form %zu \"%s\"", i,
                  forms[i].text);
        /* and the bytes tokenize back to the token (no other token is as long) */
        int32_t got;
        CHECK_MSG(rvocab_tokenize(v, forms[i].bytes, (int32_t)forms[i].n, &got, 1, false, false) ==
                          1 &&
                      got == id,
                  "form %zu", i);
    }
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

/* ---- greedy longest match -------------------------------------------------------------- */

/* A random text of at most cap bytes, of one of three kinds: uniform bytes; a soup of the
 * vocabulary's words, their prefixes and random bytes (so that walks go deep and back off);
 * random UTF-8 over scripts the words use. */
static size_t random_text(unsigned long long *rng, int kind, uint8_t *out, size_t cap) {
    size_t n = 0, want = (size_t)test_rand_int(rng, (int)cap - 8);
    while (n < want) {
        if (kind == 0) {
            out[n++] = (uint8_t)test_rand_int(rng, 256);
        } else if (kind == 1) {
            int r = test_rand_int(rng, 10);
            if (r < 5) {
                const char *w =
                    rwkv_words[test_rand_int(rng, (int)(sizeof rwkv_words / sizeof *rwkv_words))];
                size_t l = strlen(w);
                if (r == 4) l = 1 + (size_t)test_rand_int(rng, (int)l); /* a prefix */
                if (n + l > cap) break;
                memcpy(out + n, w, l);
                n += l;
            } else if (r < 6) {
                static const char *const bits[] = {"<s>", "<s", "s>", "[PAD30", "[PAD300]"};
                const char *b = bits[test_rand_int(rng, 5)];
                if (n + strlen(b) > cap) break;
                memcpy(out + n, b, strlen(b));
                n += strlen(b);
            } else if (r < 8) {
                out[n++] = (uint8_t) "abcdefth \n\r\t<>s"[test_rand_int(rng, 16)];
            } else {
                out[n++] = (uint8_t)test_rand_int(rng, 256);
            }
        } else {
            static const uint32_t base[] = {0x20, 0xA0, 0x4F60, 0x597D, 0x1F600, 0x430};
            static const int span[] = {95, 96, 3, 3, 4, 32};
            int s = test_rand_int(rng, 6);
            uint32_t cp = base[s] + (uint32_t)test_rand_int(rng, span[s]);
            if (n + 4 > cap) break;
            n += put_cp(out + n, cp);
        }
    }
    return n;
}

static void test_greedy(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(400);
    struct rvocab *v = load_vocab(&tv);
    REQUIRE(v);
    unsigned long long rng = 7;
    uint8_t buf[300];
    int n_bad[3][2] = {{0}};
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < 2000; i++) {
            size_t n = random_text(&rng, kind, buf, sizeof buf);
            for (int ps = 0; ps < 2; ps++)
                if (!check_text(v, &tv, buf, n, ps, -1) && n_bad[kind][ps]++ > 3) goto next;
        }
    next:;
    }
    for (int kind = 0; kind < 3; kind++)
        for (int ps = 0; ps < 2; ps++)
            CHECK_MSG(n_bad[kind][ps] == 0, "kind %d parse_special %d: %d texts differ", kind, ps,
                      n_bad[kind][ps]);

    /* a few by hand: the longest, backing off where the trie runs past any token */
    CHECK(tokens_are(v, "abcdef", false, (int32_t[]){id_of_word("abcdef")}, 1));
    CHECK(tokens_are(v, "abcde", false, (int32_t[]){id_of_word("abcd"), BYTE('e')}, 2));
    CHECK(tokens_are(v, "abcdeg", false, (int32_t[]){id_of_word("abcd"), BYTE('e'), BYTE('g')}, 3));
    CHECK(tokens_are(v, "ab\n\n\n", false, (int32_t[]){id_of_word("ab\n\n"), BYTE('\n')}, 2));
    CHECK(tokens_are(
        v, "\xe4\xbd\xa0\xe5\xa5\xbd\xe5\xa5", false,
        (int32_t[]){id_of_word("\xe4\xbd\xa0\xe5\xa5\xbd"), BYTE('\xe5'), BYTE('\xa5')}, 3));
    CHECK(
        tokens_are(v, "\xe4\xbd\xe5", false, (int32_t[]){id_of_word("\xe4\xbd"), BYTE('\xe5')}, 2));
    CHECK(tokens_are(v, " the the", false, (int32_t[]){id_of_word(" the"), id_of_word(" the")}, 2));
    CHECK(tokens_are(v, "", false, NULL, 0));
    /* a text with NUL bytes */
    int32_t got[4];
    CHECK(rvocab_tokenize(v, "a\0b", 3, got, 4, false, false) == 3 && got[1] == BYTE('\0'));
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

/* 65536 tokens as in the world vocabulary's size: random byte strings over a small alphabet
 * (so that they share long prefixes), a few duplicates of their bytes, [PAD] to the end. */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_big_vocab(void) {
    unsigned long long rng = 99;
    const int n_cand = 90000;
    char **cand = malloc((size_t)n_cand * sizeof *cand);
    REQUIRE(cand);
    static const char alpha[] = "abcdet \xe4\xbd\xa0\n";
    for (int i = 0; i < n_cand; i++) {
        int len = 2 + test_rand_int(&rng, 11);
        cand[i] = malloc((size_t)len + 1);
        REQUIRE(cand[i]);
        for (int k = 0; k < len; k++) cand[i][k] = alpha[test_rand_int(&rng, 11)];
        cand[i][len] = '\0';
    }
    qsort(cand, (size_t)n_cand, sizeof *cand, cmp_str);
    int n_unique = 0;
    for (int i = 0; i < n_cand; i++) {
        if (n_unique && strcmp(cand[n_unique - 1], cand[i]) == 0) {
            free(cand[i]);
            continue;
        }
        cand[n_unique++] = cand[i];
    }
    for (int i = n_unique - 1; i > 0; i--) { /* shuffle: ids unrelated to the order of bytes */
        int j = test_rand_int(&rng, i + 1);
        char *t = cand[i];
        cand[i] = cand[j];
        cand[j] = t;
    }
    struct rwkv_vocab tv = rwkv_vocab_standard(0);
    for (int i = 0; i < n_unique && tv.n < 65400; i++) {
        bool word = false; /* the same bytes would be the same text */
        for (size_t k = 0; k < sizeof rwkv_words / sizeof *rwkv_words; k++)
            word |= strcmp(cand[i], rwkv_words[k]) == 0;
        if (!word) rwkv_vocab_add_str(&tv, cand[i]);
    }
    REQUIRE(tv.n == 65400);
    /* duplicates of 50 tokens' bytes, their first (printable) byte written as \xNN instead:
     * the later id wins */
    int32_t dup[50], n_dup = 0;
    for (int32_t id = 300; n_dup < 50; id += 97) {
        REQUIRE(id < 65400);
        if (tv.bytes[id][0] < 'a' || tv.bytes[id][0] > 'z') continue;
        char text[64];
        size_t k = (size_t)snprintf(text, sizeof text, "\\x%02x", tv.bytes[id][0]);
        rwkv_py_escape(tv.bytes[id] + 1, tv.len[id] - 1, text + k);
        rwkv_vocab_add_text(&tv, text, RVOCAB_TYPE_NORMAL, tv.bytes[id], tv.len[id]);
        dup[n_dup++] = id;
    }
    while (tv.n < 65536) {
        char pad[32];
        int k = snprintf(pad, sizeof pad, "[PAD%d]", (int)tv.n);
        rwkv_vocab_add_text(&tv, pad, RVOCAB_TYPE_UNUSED, (const uint8_t *)pad, (size_t)k);
    }
    for (int i = 0; i < n_unique; i++) free(cand[i]);
    free(cand);

    struct rgguf_writer *w = rwkv_vocab_writer(&tv);
    char path[128];
    snprintf(path, sizeof path, "%s/big.gguf", tmpdir);
    REQUIRE(w && rgguf_writer_write(w, path));
    rgguf_writer_free(w);
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct rvocab *v = rvocab_load(g);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rgguf_close(g);
    remove(path);
    REQUIRE(v);
    fprintf(stderr, "65536-token rwkv vocabulary loaded in %.1f ms\n",
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    CHECK(rvocab_n_tokens(v) == 65536);
    int n_bad = 0;
    uint8_t buf[256];
    for (int i = 0; i < 20; i++) {
        size_t n = 0;
        while (n < 200) {
            if (test_rand_int(&rng, 3) == 0) { /* a whole token, duplicated ones often */
                int32_t id = test_rand_int(&rng, 2) ? dup[test_rand_int(&rng, 50)]
                                                    : 257 + test_rand_int(&rng, 60000);
                memcpy(buf + n, tv.bytes[id], tv.len[id]);
                n += tv.len[id];
            } else {
                buf[n++] = (uint8_t)alpha[test_rand_int(&rng, 11)];
            }
        }
        n_bad += !check_text(v, &tv, buf, n, false, -1);
    }
    CHECK_MSG(n_bad == 0, "%d of 20 texts differ", n_bad);
    /* the duplicates: the later id */
    for (int i = 0; i < 50; i++) {
        int32_t id = dup[i], got;
        CHECK(rvocab_tokenize(v, (const char *)tv.bytes[id], (int32_t)tv.len[id], &got, 1, false,
                              false) == 1 &&
              got == 65400 + i);
    }
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

/* ---- special tokens, BOS / EOS ----------------------------------------------------------- */

static void test_special(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(400);
    struct rgguf_writer *w = rwkv_vocab_writer(&tv);
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0));
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0));
    struct rvocab *v = load_written(w);
    REQUIRE(v);
    const int32_t sx = id_of_word("<s>x"), xs = id_of_word("x<s");
    /* <s> is in the trie too (every id is), so it is found without parse_special */
    CHECK(tokens_are(v, "<s>", false, (int32_t[]){0}, 1));
    CHECK(tokens_are(v, "<s>", true, (int32_t[]){0}, 1));
    /* ... but only parse_special cuts it out before the longest match */
    CHECK(tokens_are(v, "<s>x", false, (int32_t[]){sx}, 1));
    CHECK(tokens_are(v, "<s>x", true, (int32_t[]){0, BYTE('x')}, 2));
    CHECK(tokens_are(v, "x<s>", false, (int32_t[]){xs, BYTE('>')}, 2));
    CHECK(tokens_are(v, "x<s>", true, (int32_t[]){BYTE('x'), 0}, 2));
    CHECK(tokens_are(v, "<s><s>ab", true, (int32_t[]){0, 0, id_of_word("ab")}, 3));
    /* unused [PAD] tokens are tokens of the trie as well, and print as their text */
    CHECK(tokens_are(v, "[PAD300]", false, (int32_t[]){300}, 1));
    CHECK(rvocab_token_type(v, 300) == RVOCAB_TYPE_UNUSED);
    CHECK(piece_is(v, 300, false, "[PAD300]", 8));
    /* control tokens print only when asked to */
    CHECK(piece_is(v, 0, false, "", 0));
    CHECK(piece_is(v, 0, true, "<s>", 3));
    int32_t ids[] = {BYTE('a'), 0, BYTE('b')};
    int32_t len;
    char *s = detokenize(v, ids, 3, false, false, &len);
    CHECK(len == 2 && memcmp(s, "ab", 2) == 0);
    free(s);
    s = detokenize(v, ids, 3, false, true, &len);
    CHECK(len == 5 && memcmp(s, "a<s>b", 5) == 0);
    free(s);
    /* no clean-up of spaces, as llama.cpp for RWKV */
    int32_t n;
    int32_t *t = tokenize(v, "a ? b , 's", 10, false, false, &n);
    s = detokenize(v, t, n, false, false, &len);
    CHECK(len == 10 && memcmp(s, "a ? b , 's", 10) == 0);
    free(s);
    free(t);
    /* a user-defined token is cut out even without parse_special */
    rvocab_free(v);
    int32_t user = id_of_word("<|user|>");
    tv.type[user] = RVOCAB_TYPE_USER_DEFINED;
    rwkv_vocab_add_str(&tv, "a<|"); /* greedy would take this across the token's start */
    v = load_vocab(&tv);
    REQUIRE(v);
    CHECK(tokens_are(v, "a<|user|>", false, (int32_t[]){BYTE('a'), user}, 2));
    CHECK(piece_is(v, user, false, "<|user|>", 8));
    tv.type[user] = RVOCAB_TYPE_NORMAL;
    rvocab_free(v);
    v = load_vocab(&tv);
    REQUIRE(v);
    CHECK(tokens_are(
        v, "a<|user|>", true,
        (int32_t[]){tv.n - 1, BYTE('u'), BYTE('s'), BYTE('e'), BYTE('r'), BYTE('|'), BYTE('>')},
        7));
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

static void test_bos_eos(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(0);
    struct rvocab *v = load_vocab(&tv); /* llama.cpp's defaults for RWKV: none of them */
    REQUIRE(v);
    CHECK(rvocab_bos(v) == -1 && rvocab_eos(v) == -1 && rvocab_unk(v) == -1 && rvocab_pad(v) == -1);
    CHECK(!rvocab_add_bos(v) && !rvocab_add_eos(v));
    CHECK(!rvocab_clean_spaces(v) && !rvocab_uses_jit(v) && rvocab_n_merges(v) == 0);
    CHECK(tokens_are(v, "ab", false, (int32_t[]){id_of_word("ab")}, 1));
    rvocab_free(v);

    /* the keys are read and reported, but the RWKV tokenizer never adds BOS / EOS (llama.cpp
     * ignores add_special for RWKV); detokenize's remove_special follows them, as llama.cpp */
    struct rgguf_writer *w = rwkv_vocab_writer(&tv);
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0));
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0));
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 1));
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true));
    v = load_written(w);
    REQUIRE(v);
    CHECK(rvocab_bos(v) == 0 && rvocab_eos(v) == 0 && rvocab_pad(v) == 1);
    CHECK(rvocab_add_bos(v) && rvocab_add_eos(v));
    int32_t n;
    int32_t *t = tokenize(v, "ab", 2, true, true, &n);
    CHECK(n == 1 && t[0] == id_of_word("ab"));
    free(t);
    int32_t ids[] = {0, id_of_word("ab"), 0};
    int32_t len;
    char *s = detokenize(v, ids, 3, true, true, &len);
    CHECK(len == 2 && memcmp(s, "ab", 2) == 0);
    free(s);
    s = detokenize(v, ids, 3, false, true, &len);
    CHECK(len == 8 && memcmp(s, "<s>ab<s>", 8) == 0);
    free(s);
    rvocab_free(v);

    /* add_bos_token without an id: harmless here (nothing is added), so loaded */
    w = rwkv_vocab_writer(&tv);
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    v = load_written(w);
    CHECK(v != NULL && rvocab_add_bos(v) && rvocab_bos(v) == -1);
    rvocab_free(v);

    /* the negative-size protocol */
    v = load_vocab(&tv);
    REQUIRE(v);
    int32_t one;
    CHECK(rvocab_tokenize(v, "a b c", 5, &one, 1, false, false) == -5);
    CHECK(rvocab_tokenize(v, "a b c", 5, NULL, 0, false, false) == -5);
    char buf[4];
    CHECK(rvocab_token_to_piece(v, id_of_word("abcdef"), buf, 4, 0, false) == -6);
    CHECK(rvocab_token_to_piece(v, id_of_word(" the"), buf, 4, 1, false) == 3 &&
          memcmp(buf, "the", 3) == 0); /* lstrip */
    rcore_error_clear();
    CHECK(rvocab_token_to_piece(v, tv.n, buf, 4, 0, true) == 0);
    CHECK_ERR("token_to_piece: token");
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

/* ---- duplicates, missing bytes ---------------------------------------------------------- */

static void test_duplicates(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(0);
    const int32_t ab = id_of_word("ab"), s_ = id_of_word("'s");
    rwkv_vocab_add_text(&tv, "a\\x62", RVOCAB_TYPE_NORMAL, (const uint8_t *)"ab", 2);
    const int32_t ab2 = tv.n - 1;
    rwkv_vocab_add_text(&tv, "\\x41", RVOCAB_TYPE_NORMAL, (const uint8_t *)"A", 1);
    const int32_t a2 = tv.n - 1;
    rwkv_vocab_add_text(&tv, "\\'s", RVOCAB_TYPE_NORMAL, (const uint8_t *)"'s", 2);
    const int32_t s2 = tv.n - 1;
    rwkv_vocab_add_text(&tv, "\\x3cs>", RVOCAB_TYPE_NORMAL, (const uint8_t *)"<s>", 3);
    const int32_t lts = tv.n - 1;
    struct rvocab *v = load_vocab(&tv);
    if (!v) fprintf(stderr, "%s\n", rcore_error_get());
    REQUIRE(v);
    CHECK(tokens_are(v, "ab", false, (int32_t[]){ab2}, 1));
    CHECK(tokens_are(v, "A", false, (int32_t[]){a2}, 1));
    CHECK(tokens_are(v, "'s", false, (int32_t[]){s2}, 1));
    /* the normal "<s>" replaces the control one in the trie; parse_special still finds <s> */
    CHECK(tokens_are(v, "<s>", false, (int32_t[]){lts}, 1));
    CHECK(tokens_are(v, "<s>", true, (int32_t[]){0}, 1));
    /* the earlier ids still are tokens, with the same pieces */
    CHECK(piece_is(v, ab, false, "ab", 2) && piece_is(v, BYTE('A'), false, "A", 1) &&
          piece_is(v, s_, false, "'s", 2));
    CHECK(rvocab_text_to_token(v, "ab", 2) == ab && rvocab_text_to_token(v, "a\\x62", 5) == ab2);
    unsigned long long rng = 3;
    uint8_t buf[300];
    int n_bad = 0;
    for (int i = 0; i < 500; i++) {
        size_t n = random_text(&rng, 1, buf, sizeof buf);
        n_bad += !check_text(v, &tv, buf, n, false, -1);
    }
    CHECK_MSG(n_bad == 0, "%d texts differ", n_bad);
    rvocab_free(v);

    /* the same stored text twice is refused, as llama.cpp asserts */
    rwkv_vocab_add_text(&tv, "a\\x62", RVOCAB_TYPE_NORMAL, (const uint8_t *)"ab", 2);
    v = load_vocab(&tv);
    CHECK(v == NULL);
    char want[128];
    snprintf(want, sizeof want,
             "tokenizer.ggml.tokens: token %d \"a\\x62\" has the same text as "
             "token %d",
             (int)tv.n - 1, (int)ab2);
    CHECK_ERR(want);
    rwkv_vocab_free(&tv);
}

static void log_count(enum rcore_log_level level, const char *text, void *user) {
    if (level == RCORE_LOG_WARN && strstr(text, "have no single-byte token")) ++*(int *)user;
}

static void test_missing_bytes(void) {
    /* no token for the bytes 'Q' and 0x80 alone; 'Q' starts "QR", 0x80 nothing */
    struct rwkv_vocab tv = {0};
    rwkv_vocab_add_text(&tv, "<s>", RVOCAB_TYPE_CONTROL, (const uint8_t *)"<s>", 3);
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if (c != 'Q' && c != 0x80) rwkv_vocab_add(&tv, &c, 1, RVOCAB_TYPE_NORMAL);
    }
    rwkv_vocab_add_str(&tv, "QR");
    const int32_t qr = tv.n - 1;
    rwkv_vocab_add_str(&tv, "\xe2\x82\xac"); /* € holds 0x82, 0xAC, not 0x80 */
    rwkv_vocab_add_str(&tv, "\xc2\x80");     /* U+0080: 0x80 inside a token */
    const int32_t c280 = tv.n - 1;
    int warned = 0;
    rcore_log_set(log_count, &warned);
    struct rvocab *v = load_vocab(&tv);
    rcore_log_set(NULL, NULL);
    REQUIRE(v);
    CHECK(warned == 1); /* loaded, with a warning */
    CHECK(tokens_are(v, "QR", false, (int32_t[]){qr}, 1));
    CHECK(tokens_are(v, "\xc2\x80", false, (int32_t[]){c280}, 1));
    /* a byte no token covers, no unknown token: an error naming it (llama.cpp emits -1) */
    static const struct {
        const char *text;
        const char *err;
        bool parse_special;
    } bad[] = {
        {"Q", "byte 0x51 at offset 0", false},
        {"abQZ", "byte 0x51 at offset 2", false}, /* 'Q' starts "QR", which is not complete */
        {"ab\x80", "byte 0x80 at offset 2", false},
        {"<s>Q", "byte 0x51 at offset 3", true}, /* offsets count in the whole text */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t out[8];
        rcore_error_clear();
        CHECK(rvocab_tokenize(v, bad[i].text, (int32_t)strlen(bad[i].text), out, 8, false,
                              bad[i].parse_special) == INT32_MIN);
        CHECK_ERR(bad[i].err);
        CHECK_ERR("starts no token of this rwkv vocabulary, which has no unknown token");
    }
    rvocab_free(v);

    /* with an unknown token (here one of type UNKNOWN): it stands for each such byte */
    rwkv_vocab_add_text(&tv, "<unk>", RVOCAB_TYPE_UNKNOWN, (const uint8_t *)"<unk>", 5);
    const int32_t unk = tv.n - 1;
    struct rgguf_writer *w = rwkv_vocab_writer(&tv);
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk));
    warned = 0;
    rcore_log_set(log_count, &warned);
    v = load_written(w);
    rcore_log_set(NULL, NULL);
    REQUIRE(v);
    CHECK(warned == 0);
    CHECK(rvocab_unk(v) == unk);
    CHECK(tokens_are(v, "Q", false, (int32_t[]){unk}, 1));
    CHECK(tokens_are(v, "QZQR", false, (int32_t[]){unk, BYTE('Z') - 1, qr}, 3));
    CHECK(tokens_are(v, "\x80\xc2\x80", false, (int32_t[]){unk, c280}, 2));
    /* against the brute force, on texts full of the missing bytes */
    unsigned long long rng = 11;
    uint8_t buf[300];
    int n_bad = 0;
    for (int i = 0; i < 1000; i++) {
        size_t n = random_text(&rng, i % 3, buf, sizeof buf);
        for (size_t k = 0; k < n; k++)
            if (test_rand_int(&rng, 8) == 0) buf[k] = "QRQ\x80\xc2"[test_rand_int(&rng, 5)];
        n_bad += !check_text(v, &tv, buf, n, false, unk);
    }
    CHECK_MSG(n_bad == 0, "%d texts differ", n_bad);
    rvocab_free(v);
    rwkv_vocab_free(&tv);
}

/* ---- load errors ------------------------------------------------------------------------ */

static void test_bad_escapes(void) {
    /* llama.cpp decodes these to arbitrary bytes or drops them; recur refuses the file */
    static const struct {
        const char *text;
        size_t at;
        const char *why;
    } bad[] = {
        {"\\x", 0, "\\x must be followed by two lowercase hex digits"},
        {"ab\\x4", 2, "\\x must be followed by two lowercase hex digits"},
        {"\\xg0", 0, "\\x must be followed by two lowercase hex digits"},
        {"\\x4g", 0, "\\x must be followed by two lowercase hex digits"},
        {"z\\xAB", 1, "\\x must be followed by two lowercase hex digits"},
        {"\\x4F", 0, "\\x must be followed by two lowercase hex digits"},
        {"\\x 1", 0, "\\x must be followed by two lowercase hex digits"},
        {"ab\\", 2, "it ends in a lone backslash"},
        {"\\\\\\", 2, "it ends in a lone backslash"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct rwkv_vocab tv = rwkv_vocab_standard(0);
        rwkv_vocab_add_text(&tv, bad[i].text, RVOCAB_TYPE_NORMAL, NULL, 0);
        CHECK(load_vocab(&tv) == NULL);
        char want[160];
        snprintf(want, sizeof want,
                 "tokenizer.ggml.tokens: token %d \"%s\" has a malformed escape at byte %zu: %s",
                 (int)tv.n - 1, bad[i].text, bad[i].at, bad[i].why);
        CHECK_ERR(want);
        rwkv_vocab_free(&tv);
    }
}

static void test_bad_keys(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(300);

    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv7"));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tv.text,
                                     (uint64_t)tv.n));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.model is \"rwkv7\": supported are \"gpt2\" (byte-level BPE), "
              "\"llama\" (SentencePiece) and \"rwkv\"");

    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("key tokenizer.ggml.tokens is missing");

    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    REQUIRE(rgguf_writer_set_arr(w, "tokenizer.ggml.tokens", RGGUF_INT32, tv.type, 4));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.tokens is an array of int32, strings were expected");

    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", NULL, 0));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("tokenizer.ggml.tokens holds 0 tokens");

    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tv.text,
                                     (uint64_t)tv.n));
    REQUIRE(rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, tv.type, 7));
    CHECK(load_written(w) == NULL);
    char want[128];
    snprintf(want, sizeof want, "tokenizer.ggml.token_type holds 7 types for %d tokens", (int)tv.n);
    CHECK_ERR(want);

    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tv.text,
                                     (uint64_t)tv.n));
    REQUIRE(rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_FLOAT32, tv.type,
                                 (uint64_t)tv.n));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("key tokenizer.ggml.token_type is an array of float32, an array of int32 was "
              "expected");

    w = rwkv_vocab_writer(&tv);
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "0"));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("key tokenizer.ggml.bos_token_id is a string");

    w = rwkv_vocab_writer(&tv);
    REQUIRE(w && rgguf_writer_set_u32(w, "tokenizer.ggml.add_eos_token", 1));
    CHECK(load_written(w) == NULL);
    CHECK_ERR("key tokenizer.ggml.add_eos_token is");

    /* an id out of range is ignored with a warning, as llama.cpp does */
    w = rwkv_vocab_writer(&tv);
    REQUIRE(w && rgguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)tv.n));
    struct rvocab *v = load_written(w);
    CHECK(v != NULL && rvocab_unk(v) == -1);
    rvocab_free(v);

    /* llama.cpp reads neither a pre-tokenizer nor merges for RWKV: anything there is ignored,
     * and no types at all means all normal */
    w = rgguf_writer_create();
    REQUIRE(w && rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv"));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tv.text,
                                     (uint64_t)tv.n));
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.pre", "no such pre-tokenizer"));
    const char *merges[] = {"nonsense"};
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1));
    v = load_written(w);
    CHECK(v != NULL);
    if (v) {
        CHECK(rvocab_n_merges(v) == 0 && rvocab_token_type(v, 0) == RVOCAB_TYPE_NORMAL);
        CHECK(tokens_are(v, "<s>x", true, (int32_t[]){id_of_word("<s>x")}, 1));
    }
    rvocab_free(v);

    /* an empty text becomes [EMPTY_<id>], as in llama.cpp */
    struct rwkv_vocab tv2 = rwkv_vocab_standard(0);
    rwkv_vocab_add_text(&tv2, "", RVOCAB_TYPE_NORMAL, NULL, 0);
    v = load_vocab(&tv2);
    REQUIRE(v);
    snprintf(want, sizeof want, "[EMPTY_%d]", (int)tv2.n - 1);
    CHECK(piece_is(v, tv2.n - 1, false, want, strlen(want)));
    rvocab_free(v);
    rwkv_vocab_free(&tv2);
    rwkv_vocab_free(&tv);
}

/* ---- allocation failures ---------------------------------------------------------------- */

static void test_alloc_fail(void) {
    struct rwkv_vocab tv = rwkv_vocab_standard(300);
    struct rgguf_writer *w = rwkv_vocab_writer(&tv);
    char path[128];
    snprintf(path, sizeof path, "%s/alloc.gguf", tmpdir);
    REQUIRE(w && rgguf_writer_write(w, path));
    rgguf_writer_free(w);
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    static const char text[] = "<s>User: \xe4\xbd\xa0\xe5\xa5\xbd abcdef the [PAD299]\n\n";
    int32_t want[64];
    const int32_t n_want =
        rwkv_brute_tokenize(&tv, (const uint8_t *)text, sizeof text - 1, true, -1, want);
    long reached = 0;
    int failed = 0, n_bad = 0;
    for (long at = -1; at == -1 || at <= reached; at = at == -1 ? 1 : at + 1) {
        alloc_shim_arm(at);
        rcore_error_clear();
        struct rvocab *v = rvocab_load(g);
        int32_t got[64], n = INT32_MIN;
        if (v) n = rvocab_tokenize(v, text, (int32_t)sizeof text - 1, got, 64, false, true);
        const long counted = alloc_shim_disarm();
        if (at == -1) reached = counted;
        bool ok = v && n == n_want && memcmp(got, want, (size_t)n * sizeof *got) == 0;
        if (!ok) {
            failed++;
            if (at == -1 || !rcore_error_get()[0] || (v && n != INT32_MIN)) n_bad++;
        }
        rvocab_free(v);
    }
    fprintf(stderr, "%ld allocations, each failed once: %d calls failed\n", reached, failed);
    CHECK_MSG(n_bad == 0, "%d calls failed without a message, or gave wrong tokens", n_bad);
    CHECK(reached > 5 && failed > 0);
    rgguf_close(g);
    remove(path);
    rwkv_vocab_free(&tv);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/recur-test-vocab-rwkv-XXXXXX");
    REQUIRE(mkdtemp(tmpdir));

    RUN(test_converter_texts);
    RUN(test_unescape_forms);
    RUN(test_greedy);
    RUN(test_big_vocab);
    RUN(test_special);
    RUN(test_bos_eos);
    RUN(test_duplicates);
    RUN(test_missing_bytes);
    RUN(test_bad_escapes);
    RUN(test_bad_keys);
    RUN(test_alloc_fail);

    CHECK(rmdir(tmpdir) == 0);
    return test_finish("test_vocab_rwkv");
}
