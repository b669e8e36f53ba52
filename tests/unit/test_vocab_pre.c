/*
 * Tests of src/vocab's pre-tokenizers (vocab_pre.c) and SentencePiece tokenizer (vocab_spm.c).
 *
 *  - llama.cpp's own tokenizer tests for Falcon (tokenizer.ggml.pre = "falcon") and LLaMA's
 *    SentencePiece vocabulary (tests/data/ggml-vocab-{falcon,llama-spm}.gguf.inp / .out):
 *    every text must give exactly llama.cpp's ids (Falcon with the JIT and the interpreter);
 *  - the 'default' pre-tokenizer (a missing key): tests/data/vocab-default.inp / .out, written
 *    by tests/ref/gen_vocab_default.py, an independent implementation of llama.cpp's four
 *    patterns and of byte-level BPE with Python's `regex` module, over the GPT-2 vocabulary
 *    with its tokenizer.ggml.pre removed;
 *  - the pre-tokenizer table: every name llama.cpp maps to the GPT-2 pattern loads and splits
 *    as "gpt-2"; an unknown name is refused with the supported names listed;
 *  - the LLaMA 3 pattern (Falcon-H1 "falcon-h1", Nemotron-H "pixtral", Granite 4.0 "dbrx"):
 *    texts against splits derived by hand from the pattern (see llama3_cases), read off a
 *    vocabulary whose tokens are the expected pieces (ignore_merges makes each piece that is
 *    a token that token); llama.cpp's flags per name (ignore_merges, add_bos by default,
 *    clean_spaces); "dbrx" over GPT-2's merges cuts the same pieces; and the ids of
 *    tests/data/vocab-llama3.inp / .out, written by tests/ref/gen_vocab_llama3.py (an
 *    independent implementation with Python's `regex` module) over GPT-2's vocabulary;
 *  - SentencePiece: BOS / EOS rules (add_bos_token, add_eos_token), add_space_prefix on and
 *    off, the space prefix after a special token, detokenizing "▁" and byte tokens, and round
 *    trips of random text and random bytes (detokenize(tokenize(s)) == s).
 */
#include "vocab/vocab.h"

#include "core/core.h"
#include "core/utf8.h"
#include "gguf/gguf.h"

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

#define FALCON_FILE  RECUR_TEST_DATA "/ggml-vocab-falcon.gguf"
#define SPM_FILE     RECUR_TEST_DATA "/ggml-vocab-llama-spm.gguf"
#define GPT2_FILE    RECUR_TEST_DATA "/ggml-vocab-gpt-2.gguf"
#define DEFAULT_VECS RECUR_TEST_DATA "/vocab-default"
#define LLAMA3_VECS  RECUR_TEST_DATA "/vocab-llama3"

static char tmpdir[64];
static struct rgguf *spm_file, *gpt2_file;
static struct rvocab *falcon, *falcon_interp, *spm;

static struct rvocab *load_path(const char *path, uint32_t flags) {
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    struct rvocab *v = rvocab_load_flags(g, flags);
    if (!v) fprintf(stderr, "load %s: %s\n", path, rcore_error_get());
    REQUIRE(v);
    rgguf_close(g);
    return v;
}

/* ---- llama.cpp's vectors ------------------------------------------------------------------ */

/* llama.cpp's test-tokenizer-0 vectors (vocab_util.h reads them), tokenized with add_special
 * = false and parse_special = false. Returns the number of cases; every vocabulary of vs must
 * give the ids, and (verbatim) detokenize must give the text back. */
static int check_vectors(const char *base, struct rvocab *const *vs, int n_vs, bool verbatim) {
    struct vocab_cases vc;
    vocab_cases_open(&vc, base);
    int n_cases = 0, n_bad = 0;
    const char *text;
    size_t len;
    static int32_t want[4096];
    int32_t n_want;
    while (vocab_case_next(&vc, &text, &len, want, 4096, &n_want)) {
        for (int k = 0; k < n_vs; k++) {
            int32_t n;
            int32_t *got = tokenize(vs[k], text, len, false, false, &n);
            bool same = n == n_want && memcmp(got, want, (size_t)n * sizeof *got) == 0;
            if (!same && n_bad++ < 8) {
                fprintf(stderr, "  %s case %d \"%.*s\": got", base, n_cases, (int)len, text);
                for (int32_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", (int)got[i]);
                fprintf(stderr, "\n  want");
                for (int32_t i = 0; i < n_want && i < 40; i++) fprintf(stderr, " %d", (int)want[i]);
                fprintf(stderr, "\n");
            }
            CHECK_MSG(same, "%s case %d (vocabulary %d): %d tokens, %d expected", base, n_cases, k,
                      (int)n, (int)n_want);
            if (verbatim) {
                int32_t nb;
                char *back = detokenize(vs[k], got, n, false, true, &nb);
                CHECK_MSG((size_t)nb == len && memcmp(back, text, len) == 0,
                          "%s case %d: detokenize does not give the text back", base, n_cases);
                free(back);
            }
            free(got);
        }
        n_cases++;
    }
    CHECK(vocab_cases_close(&vc)); /* as many lines as texts */
    return n_cases;
}

static void test_falcon_vectors(void) {
    struct rvocab *vs[] = {falcon, falcon_interp};
    CHECK(check_vectors(FALCON_FILE, vs, 2, false) == 46);
    CHECK(strcmp(rvocab_pre_name(falcon), "falcon") == 0);
    CHECK(rvocab_clean_spaces(falcon));
}

static void test_spm_vectors(void) {
    struct rvocab *vs[] = {spm};
    CHECK(check_vectors(SPM_FILE, vs, 1, true) == 46);
}

/* The GPT-2 vocabulary with tokenizer.ggml.pre removed, or set to pre when not NULL. */
static struct rvocab *gpt2_with_pre(const char *pre, uint32_t flags) {
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    for (int64_t i = 0; i < rgguf_n_kv(gpt2_file); i++) {
        const char *key = rgguf_key_name(gpt2_file, i);
        if (strcmp(key, "tokenizer.ggml.pre") != 0)
            REQUIRE(rgguf_writer_copy_kv(w, gpt2_file, key));
    }
    if (pre) REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    char path[128];
    snprintf(path, sizeof path, "%s/pre.gguf", tmpdir);
    REQUIRE(rgguf_writer_write(w, path));
    rgguf_writer_free(w);
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    rcore_error_clear();
    struct rvocab *v = rvocab_load_flags(g, flags);
    rgguf_close(g);
    remove(path);
    return v;
}

static void test_default_vectors(void) {
    struct rvocab *jit = gpt2_with_pre(NULL, 0);
    struct rvocab *interp = gpt2_with_pre(NULL, RVOCAB_LOAD_NO_JIT);
    REQUIRE(jit && interp);
    CHECK(strcmp(rvocab_pre_name(jit), "default") == 0);
    struct rvocab *named = gpt2_with_pre("default", 0);
    REQUIRE(named);
    struct rvocab *vs[] = {jit, interp, named};
    int n = check_vectors(DEFAULT_VECS, vs, 3, false);
    CHECK(n >= 100);
    fprintf(stderr, "'default' pre-tokenizer: %d cases\n", n);

    /* the four patterns make a difference the GPT-2 pattern does not: "x+=1234;" */
    struct rvocab *g2 = gpt2_with_pre("gpt-2", 0);
    REQUIRE(g2);
    int32_t na, nb;
    int32_t *a = tokenize(jit, "x+=1234;", 8, false, false, &na);
    int32_t *b = tokenize(g2, "x+=1234;", 8, false, false, &nb);
    CHECK(na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0);
    free(a);
    free(b);
    rvocab_free(g2);
    rvocab_free(jit);
    rvocab_free(interp);
    rvocab_free(named);
}

/* ---- the table of names ------------------------------------------------------------------- */

static void test_pre_names(void) {
    static const char *const gpt2_names[] = {
        "gpt-2",      "phi-2",           "mpt",      "olmo",    "jais",   "jina-es",     "jina-de",
        "jina-v2-es", "jina-v2-de",      "gigachat", "a.x-4.0", "mellum", "modern-bert", "exaone4",
        "trillion",   "granite-docling",
    };
    const char *text = "Hello,  world!!! 12345 it's   ok\n\n  x+=1";
    struct rvocab *ref = gpt2_with_pre("gpt-2", 0);
    REQUIRE(ref);
    int32_t nr;
    int32_t *r = tokenize(ref, text, strlen(text), false, false, &nr);
    for (size_t i = 0; i < sizeof gpt2_names / sizeof gpt2_names[0]; i++) {
        struct rvocab *v = gpt2_with_pre(gpt2_names[i], 0);
        CHECK_MSG(v != NULL, "pre-tokenizer \"%s\" refused: %s", gpt2_names[i], rcore_error_get());
        if (!v) continue;
        int32_t n;
        int32_t *t = tokenize(v, text, strlen(text), false, false, &n);
        CHECK_MSG(n == nr && memcmp(t, r, (size_t)n * sizeof *t) == 0, "\"%s\" splits differently",
                  gpt2_names[i]);
        CHECK(strcmp(rvocab_pre_name(v), gpt2_names[i]) == 0);
        /* llama.cpp turns the clean-up off for these two */
        bool want_clean =
            strcmp(gpt2_names[i], "trillion") != 0 && strcmp(gpt2_names[i], "granite-docling") != 0;
        CHECK(rvocab_clean_spaces(v) == want_clean);
        free(t);
        rvocab_free(v);
    }
    free(r);
    rvocab_free(ref);

    static const char *const refused[] = {"llama-3", "roberta-bpe", "", "GPT-2", "gpt-2 ", "qwen2"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(gpt2_with_pre(refused[i], 0) == NULL);
        CHECK_ERR("a pre-tokenizer recur does not implement: supported are \"default\", "
                  "\"falcon\", \"gpt-2\"");
        CHECK_ERR("\"falcon-h1\", \"pixtral\"");
        CHECK_ERR("\"dbrx\", \"smaug-bpe\", and a missing key");
    }
}

/* ---- the LLaMA 3 pattern (Falcon-H1 "falcon-h1", Nemotron-H "pixtral", Granite 4.0 "dbrx") -- */

/* Texts and the pieces llama.cpp's LLaMA 3 splitter cuts them into. Derived by hand from the
 * pattern, alternative by alternative at each position (first alternative that matches wins,
 * each quantifier greedy with backtracking), with llama.cpp's \s (Unicode White_Space, so
 * U+0085 NEL is space):
 *   contractions '[sS]|'[tT]|'[rR][eE]|... (any case) | [^\r\n\p{L}\p{N}]?\p{L}+ |
 *   \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * For example "  x": \s+(?!\S) cannot take both spaces (an \S follows), so it takes one, and
 * " x" is a letter run with its space; "\n\n  x": \s*[\r\n]+ backtracks to "\n\n". The splits
 * were also checked with Python's `regex` module (regex.findall with the tokenizer.json
 * pattern; its \s includes U+0085), which gives the same pieces. */
struct split_case {
    const char *text;
    const char *pieces[16]; /* NULL-terminated */
};

static const struct split_case llama3_cases[] = {
    {"Hello world, it's 12345 ABC'LL\n\n  x",
     {"Hello", " world", ",", " it", "'s", " ", "123", "45", " ABC", "'LL", "\n\n", " ", " x",
      NULL}},
    {"a  !!!\n\nb\t \r\n", {"a", " ", " !!!\n\n", "b", "\t \r\n", NULL}},
    {"(hello) 1234567 na\xc3\xafve\xe6\x97\xa5\xe6\x9c\xac",
     {"(hello", ")", " ", "123", "456", "7", " na\xc3\xafve\xe6\x97\xa5\xe6\x9c\xac", NULL}},
    /* NEL is space: two of them before a letter are a space run, then NEL + letter */
    {"x\xc2\x85\xc2\x85y", {"x", "\xc2\x85", "\xc2\x85y", NULL}},
    {"I'M here'S", {"I", "'M", " here", "'S", NULL}},
};
#define N_LLAMA3_CASES (sizeof llama3_cases / sizeof llama3_cases[0])

/* A byte-level vocabulary of the 256 bytes and one token per expected piece, with no merges:
 * with ignore_merges, each piece the splitter cuts out is one token if and only if it is one
 * of the expected pieces (else its bytes), so the ids spell out the split. */
static struct rvocab *pieces_vocab(const char *pre, bool set_add_bos, bool add_bos) {
    uint16_t cp[256];
    rvocab_gpt2_byte_cp(cp);
    static char store[64 * 1024];
    static const char *tokens[512];
    size_t k = 0;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        tokens[n++] = store + k;
        k += put_cp((uint8_t *)store + k, cp[b]);
        store[k++] = '\0';
    }
    for (size_t c = 0; c < N_LLAMA3_CASES; c++)
        for (const char *const *p = llama3_cases[c].pieces; *p; p++) {
            if (strlen(*p) == 1) continue; /* a byte's token already */
            const char *piece_text = store + k;
            for (const uint8_t *q = (const uint8_t *)*p; *q; q++)
                k += put_cp((uint8_t *)store + k, cp[*q]);
            store[k++] = '\0';
            bool dup = false;
            for (int i = 256; i < n; i++) dup = dup || strcmp(tokens[i], piece_text) == 0;
            if (!dup) tokens[n++] = piece_text;
        }
    tokens[n++] = "<bos>";
    REQUIRE(n < 512 && k < sizeof store);
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    REQUIRE(rgguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n));
    REQUIRE(rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, 0));
    uint32_t bos = (uint32_t)n - 1;
    REQUIRE(rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", bos));
    if (set_add_bos) REQUIRE(rgguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos));
    char path[128];
    snprintf(path, sizeof path, "%s/pieces.gguf", tmpdir);
    struct rvocab *v = vocab_load_written(w, path);
    if (!v) fprintf(stderr, "pieces vocabulary (%s): %s\n", pre, rcore_error_get());
    return v;
}

/* tokenize(text) must be one token per expected piece, each the token of that piece. */
static void check_split(struct rvocab *v, const struct split_case *c) {
    int32_t n;
    int32_t *t = tokenize(v, c->text, strlen(c->text), false, false, &n);
    int32_t k = 0;
    bool same = true;
    for (const char *const *p = c->pieces; *p && same; p++, k++) {
        if (k >= n) {
            same = false;
            break;
        }
        /* the token's bytes (decoded from the byte alphabet) must be the whole piece */
        char piece[64];
        int32_t pl = rvocab_token_to_piece(v, t[k], piece, sizeof piece, 0, true);
        same = pl >= 0 && (size_t)pl == strlen(*p) && memcmp(piece, *p, (size_t)pl) == 0;
    }
    same = same && k == n;
    if (!same) {
        fprintf(stderr, "  \"%s\" (%s) splits as", c->text, rvocab_pre_name(v));
        for (int32_t i = 0; i < n; i++) {
            char piece[64];
            int32_t pl = rvocab_token_to_piece(v, t[i], piece, sizeof piece, 0, true);
            fprintf(stderr, " [%.*s]", pl > 0 ? (int)pl : 0, piece);
        }
        fprintf(stderr, "\n");
    }
    CHECK_MSG(same, "\"%s\": %d tokens for %d expected pieces", c->text, (int)n, (int)k);
    free(t);
}

static void test_llama3_split(void) {
    static const char *const names[] = {"falcon-h1", "pixtral",  "llama3",
                                        "llama-bpe", "falcon3",  "lfm2",
                                        "midm-2.0",  "llama-v3", "jina-v5-nano"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct rvocab *v = pieces_vocab(names[i], false, false);
        REQUIRE(v);
        CHECK(strcmp(rvocab_pre_name(v), names[i]) == 0);
        for (size_t c = 0; c < N_LLAMA3_CASES; c++) check_split(v, &llama3_cases[c]);
        /* llama.cpp's flags for LLAMA3: clean_spaces, and BOS unless the file says not */
        CHECK(rvocab_clean_spaces(v));
        CHECK(rvocab_add_bos(v));
        int32_t n;
        int32_t *t = tokenize(v, "a", 1, true, false, &n);
        CHECK(n == 2 && t[0] == rvocab_bos(v));
        free(t);
        rvocab_free(v);
    }
    /* the file's add_bos_token wins over the default */
    struct rvocab *v = pieces_vocab("falcon-h1", true, false);
    REQUIRE(v);
    CHECK(!rvocab_add_bos(v));
    rvocab_free(v);

    /* without ignore_merges ("gpt-2") no piece is looked up whole: with no merges, bytes */
    v = pieces_vocab("gpt-2", false, false);
    REQUIRE(v);
    int32_t n;
    int32_t *t = tokenize(v, llama3_cases[0].text, strlen(llama3_cases[0].text), false, false, &n);
    int32_t n3 = 0;
    for (const char *const *p = llama3_cases[0].pieces; *p; p++) n3++;
    CHECK(n3 == 13 && n == (int32_t)strlen(llama3_cases[0].text));
    free(t);
    rvocab_free(v);
}

/* tests/data/vocab-llama3.inp / .out, written by tests/ref/gen_vocab_llama3.py (Python's
 * `regex` module for the pattern, its own byte-level BPE) over GPT-2's vocabulary: the same ids
 * for every LLaMA 3 name, JIT or interpreter, and for "dbrx" (over this vocabulary the merges
 * reach every whole-piece token, so ignore_merges changes nothing: the script checks it). */
static void test_llama3_vectors(void) {
    struct rvocab *vs[] = {gpt2_with_pre("falcon-h1", 0), gpt2_with_pre("pixtral", 0),
                           gpt2_with_pre("falcon-h1", RVOCAB_LOAD_NO_JIT),
                           gpt2_with_pre("dbrx", 0)};
    for (size_t i = 0; i < 4; i++) REQUIRE(vs[i]);
    int n = check_vectors(LLAMA3_VECS, vs, 4, false);
    CHECK(n >= 170);
    fprintf(stderr, "LLaMA 3 pre-tokenizer: %d cases\n", n);
    for (size_t i = 0; i < 4; i++) rvocab_free(vs[i]);
}

/* "dbrx" (Granite 4.0) and "smaug-bpe": the LLaMA 3 pattern, merges always run, no BOS by
 * default. With the pieces vocabulary (no merges), no piece becomes its token: every byte is
 * its own token, which the llama3 names (ignore_merges) never give for these texts. */
static void test_dbrx(void) {
    static const char *const names[] = {"dbrx", "smaug-bpe"};
    for (size_t i = 0; i < 2; i++) {
        struct rvocab *v = pieces_vocab(names[i], false, false);
        REQUIRE(v);
        CHECK(!rvocab_add_bos(v));
        CHECK(rvocab_clean_spaces(v));
        const char *text = llama3_cases[0].text;
        int32_t n;
        int32_t *t = tokenize(v, text, strlen(text), true, false, &n);
        CHECK(n == (int32_t)strlen(text)); /* bytes, and no BOS */
        free(t);
        rvocab_free(v);
    }
    /* the split itself, with real merges: over GPT-2's vocabulary, "dbrx" cuts as many pieces
     * as the expected split has, and tokenizing the text is tokenizing each piece alone */
    struct rvocab *v = gpt2_with_pre("dbrx", 0);
    REQUIRE(v);
    for (size_t c = 0; c < N_LLAMA3_CASES; c++) {
        const struct split_case *sc = &llama3_cases[c];
        struct rvocab_stats st;
        int32_t buf[256];
        int32_t n = rvocab_tokenize_stats(v, sc->text, (int32_t)strlen(sc->text), buf, 256, false,
                                          false, &st);
        REQUIRE(n >= 0);
        uint64_t n_pieces = 0;
        int32_t k = 0;
        bool same = true;
        for (const char *const *p = sc->pieces; *p; p++, n_pieces++) {
            int32_t np;
            int32_t *tp = tokenize(v, *p, strlen(*p), false, false, &np);
            same = same && k + np <= n && memcmp(buf + k, tp, (size_t)np * sizeof *tp) == 0;
            k += np;
            free(tp);
        }
        CHECK_MSG(same && k == n && st.n_pieces == n_pieces,
                  "dbrx: \"%s\": %llu pieces, %llu expected", sc->text,
                  (unsigned long long)st.n_pieces, (unsigned long long)n_pieces);
    }
    rvocab_free(v);
}

/* ---- SentencePiece ------------------------------------------------------------------------ */

static void test_spm_properties(void) {
    CHECK(strcmp(rvocab_model(spm), "llama") == 0);
    CHECK(rvocab_pre_name(spm) == NULL);
    CHECK(rvocab_n_tokens(spm) == 32000);
    CHECK(rvocab_bos(spm) == 1 && rvocab_eos(spm) == 2 && rvocab_unk(spm) == 0);
    CHECK(rvocab_add_bos(spm) && !rvocab_add_eos(spm));
    CHECK(!rvocab_clean_spaces(spm));
    CHECK(rvocab_token_type(spm, 0) == RVOCAB_TYPE_UNKNOWN);
    CHECK(rvocab_token_type(spm, 1) == RVOCAB_TYPE_CONTROL);
    CHECK(rvocab_token_type(spm, 3) == RVOCAB_TYPE_BYTE); /* <0x00> */

    /* add_special: BOS first (add_bos_token), no EOS (add_eos_token false) */
    int32_t n;
    int32_t *t = tokenize(spm, "Hello world", 11, true, false, &n);
    /* "▁Hello" 15043, "▁world" 3186 in LLaMA's vocabulary */
    CHECK(n == 3 && t[0] == 1 && t[1] == 15043 && t[2] == 3186);
    char buf[64];
    int32_t k = rvocab_detokenize(spm, t, n, buf, sizeof buf, true, false);
    /* as llama.cpp: dropping BOS keeps the prefix space (remove_space is turned off) */
    CHECK(k == 12 && memcmp(buf, " Hello world", 12) == 0);
    k = rvocab_detokenize(spm, t, n, buf, sizeof buf, false, true);
    CHECK(k == 15 && memcmp(buf, "<s> Hello world", 15) == 0); /* BOS kept: the space stays */
    t[0] = 15043;
    t[1] = 3186;
    k = rvocab_detokenize(spm, t, 2, buf, sizeof buf, true, false);
    CHECK(k == 11 && memcmp(buf, "Hello world", 11) == 0); /* no BOS: the prefix goes */
    free(t);
    t = tokenize(spm, "", 0, true, false, &n);
    CHECK(n == 1 && t[0] == 1);
    free(t);

    /* piece of a byte token and of a "▁" token */
    k = rvocab_token_to_piece(spm, 3 + 0x41, buf, sizeof buf, 0, false);
    CHECK(k == 1 && buf[0] == 'A');
    k = rvocab_token_to_piece(spm, 15043, buf, sizeof buf, 0, false);
    CHECK(k == 6 && memcmp(buf, " Hello", 6) == 0);
    k = rvocab_token_to_piece(spm, 15043, buf, sizeof buf, 1, false);
    CHECK(k == 5 && memcmp(buf, "Hello", 5) == 0);

    /* byte fallback: a character no token spells becomes its UTF-8 bytes */
    t = tokenize(spm, "\xf0\x9f\xa6\x99", 4, false, false, &n); /* U+1F999 */
    CHECK(n == 5 && t[0] == 29871 && t[1] == 3 + 0xF0 && t[2] == 3 + 0x9F && t[3] == 3 + 0xA6 &&
          t[4] == 3 + 0x99);
    free(t);

    /* a special token in the text (parse_special): the next fragment gets the prefix again */
    t = tokenize(spm, "a</s>b", 6, false, true, &n);
    int32_t n2;
    int32_t *a = tokenize(spm, "a", 1, false, false, &n2);
    int32_t n3;
    int32_t *b = tokenize(spm, "b", 1, false, false, &n3);
    CHECK(n == n2 + 1 + n3 && memcmp(t, a, (size_t)n2 * sizeof *t) == 0 && t[n2] == 2 &&
          memcmp(t + n2 + 1, b, (size_t)n3 * sizeof *t) == 0);
    free(t);
    free(a);
    free(b);
}

/* The LLaMA vocabulary rewritten with some keys changed. */
static struct rvocab *spm_with(const char *key, bool value, const char *key2, bool value2) {
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    for (int64_t i = 0; i < rgguf_n_kv(spm_file); i++) {
        const char *k = rgguf_key_name(spm_file, i);
        if ((key && strcmp(k, key) == 0) || (key2 && strcmp(k, key2) == 0)) continue;
        REQUIRE(rgguf_writer_copy_kv(w, spm_file, k));
    }
    if (key) REQUIRE(rgguf_writer_set_bool(w, key, value));
    if (key2) REQUIRE(rgguf_writer_set_bool(w, key2, value2));
    char path[128];
    snprintf(path, sizeof path, "%s/spm.gguf", tmpdir);
    return vocab_load_written(w, path);
}

static void test_spm_options(void) {
    /* no space prefix: "Hello" is not "▁Hello" */
    struct rvocab *v = spm_with("tokenizer.ggml.add_space_prefix", false, NULL, false);
    REQUIRE(v);
    int32_t n;
    int32_t *t = tokenize(v, "Hello", 5, false, false, &n);
    CHECK(n >= 1 && t[0] != 15043);
    char buf[64];
    int32_t k = rvocab_detokenize(v, t, n, buf, sizeof buf, false, false);
    CHECK(k == 5 && memcmp(buf, "Hello", 5) == 0);
    free(t);
    t = tokenize(v, " Hello", 6, false, false, &n);
    CHECK(n == 1 && t[0] == 15043);
    k = rvocab_detokenize(v, t, n, buf, sizeof buf, false, false);
    CHECK(k == 6 && memcmp(buf, " Hello", 6) == 0); /* nothing stripped without the prefix */
    free(t);
    rvocab_free(v);

    /* add_bos off, add_eos on */
    v = spm_with("tokenizer.ggml.add_bos_token", false, "tokenizer.ggml.add_eos_token", true);
    REQUIRE(v);
    t = tokenize(v, "Hello", 5, true, false, &n);
    CHECK(n == 2 && t[0] == 15043 && t[1] == 2);
    k = rvocab_detokenize(v, t, n, buf, sizeof buf, true, false);
    CHECK(k == 5 && memcmp(buf, "Hello", 5) == 0);
    free(t);
    rvocab_free(v);
}

static size_t random_text(unsigned long long *rng, char *out, size_t cap) {
    static const char *const bits[] = {
        " ",   "  ",   "\n", "\t",   "the",  "The", "ing",    "12",    "3",     ",",     ".", "'s",
        "<s>", "</s>", "é",  "日本", "🦙", "ab",  "<0x41>", "Hello", "world", "naïve", "x"};
    size_t n = 0;
    int parts = test_rand_int(rng, 30);
    for (int i = 0; i < parts; i++) {
        const char *b = bits[test_rand_int(rng, (int)(sizeof bits / sizeof bits[0]))];
        size_t l = strlen(b);
        if (n + l + 1 >= cap) break;
        memcpy(out + n, b, l);
        n += l;
        if (test_rand_int(rng, 8) == 0) out[n++] = (char)test_rand_int(rng, 256); /* any byte */
        if (test_rand_int(rng, 6) == 0 && n + 5 < cap) { /* any scalar value */
            uint32_t cp;
            do cp = (uint32_t)test_rand_int(rng, 0x110000);
            while (cp >= 0xD800 && cp < 0xE000);
            n += put_cp((uint8_t *)out + n, cp);
        }
    }
    return n;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    return rcore_utf8_valid(s, n) == n;
}

static void test_spm_round_trip(void) {
    unsigned long long rng = 99;
    char s[512];
    int n_bad = 0, n_invalid = 0;
    for (int it = 0; it < 3000; it++) {
        size_t len = random_text(&rng, s, sizeof s);
        int32_t n;
        int32_t *t = tokenize(spm, s, len, it & 1, false, &n);
        for (int32_t i = 0; i < n; i++) REQUIRE(t[i] >= 0 && t[i] < 32000);
        int32_t nb;
        char *back = detokenize(spm, t, n, true, true, &nb);
        /* with BOS, detokenize keeps the prefix space (llama.cpp's rule, tested above) */
        size_t skip = (it & 1) && nb > 0;
        bool same = (size_t)nb == len + skip && memcmp(back + skip, s, len) == 0 &&
                    (!skip || back[0] == ' ');
        /* Invalid UTF-8 need not come back: as in llama.cpp, the text is cut into characters
         * by lead bytes after spaces became "▁", so a stray lead byte can swallow part of a
         * "▁" and byte fallback then gives its bytes. Such texts must only tokenize. */
        if (!valid_utf8((const uint8_t *)s, len)) {
            n_invalid++;
            same = true;
        }
        if (!same && n_bad++ < 3)
            fprintf(stderr, "  round trip: \"%.*s\" -> \"%.*s\"\n", (int)len, s, (int)nb, back);
        CHECK(same);
        free(back);
        free(t);
    }
    CHECK(n_invalid > 100 && n_invalid < 2900); /* both kinds were tried */
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/recur-vocab-pre-XXXXXX");
    REQUIRE(mkdtemp(tmpdir));
    spm_file = rgguf_open(SPM_FILE, true);
    gpt2_file = rgguf_open(GPT2_FILE, true);
    REQUIRE(spm_file && gpt2_file);
    falcon = load_path(FALCON_FILE, 0);
    falcon_interp = load_path(FALCON_FILE, RVOCAB_LOAD_NO_JIT);
    spm = load_path(SPM_FILE, 0);

    RUN(test_falcon_vectors);
    RUN(test_spm_vectors);
    RUN(test_default_vectors);
    RUN(test_pre_names);
    RUN(test_llama3_split);
    RUN(test_llama3_vectors);
    RUN(test_dbrx);
    RUN(test_spm_properties);
    RUN(test_spm_options);
    RUN(test_spm_round_trip);

    rvocab_free(falcon);
    rvocab_free(falcon_interp);
    rvocab_free(spm);
    rgguf_close(spm_file);
    rgguf_close(gpt2_file);
    rmdir(tmpdir);
    return test_finish("test_vocab_pre");
}
