/*
 * The grammar module (src/grammar): GBNF parsing and its errors, matching texts (whole, as
 * prefixes, split inside UTF-8 characters), the trie mask against the token-by-token mask on
 * GPT-2's 50,257-token vocabulary along random walks (with the property that some token is
 * always allowed while the grammar can go on), the grammar sampler on the shipped model
 * (end of sequence only at a complete parse, partial UTF-8 tokens). JSON schemas:
 * test_schema.c.
 *
 *   test_grammar DATA_DIR SHIPPED_MODEL
 */
#include <stdint.h>

#include "recur.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "vocab/vocab.h"

#include "file_util.h"
#include "grammar_util.h"
#include "test.h"

static const char *data_dir, *model_path;

static const char *const grammar_files[] = {"arithmetic", "c",    "chess",    "english",
                                            "japanese",   "json", "json_arr", "list"};
#define N_FILES (sizeof grammar_files / sizeof grammar_files[0])

static char *grammar_file(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/grammars/%s.gbnf", data_dir, name);
    char *t = file_read(path, NULL);
    REQUIRE(t);
    return t;
}

static void test_files_parse(void) {
    for (size_t i = 0; i < N_FILES; i++) {
        char *t = grammar_file(grammar_files[i]);
        struct rgram *g = rgram_parse(t, strlen(t), "root");
        CHECK_MSG(g != NULL, "%s: %s", grammar_files[i], rcore_error_get());
        rgram_free(g);
        free(t);
    }
}

static void test_errors(void) {
    static const struct {
        const char *text, *error;
    } cases[] = {
        {"root ::= \"a", "line 1, column 10: unterminated string"},
        {"root ::= [a-", "line 1, column 10: unterminated character class"},
        {"root ::= b", "line 1, column 10: undefined rule 'b'"},
        {"root ::= root \"a\"", "left recursion: rule 'root'"},
        {"root ::= a\na ::= \"x\"? a", "line 2, column 1: left recursion: rule 'a'"},
        {"root ::= (\"a\"?)*", "left recursion"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
        {"x ::= \"a\"", "no rule named 'root'"},
        {"", "no rule named 'root'"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\q'"},
        {"root ::= \"\\xZZ\"", "line 1, column 11: \\x needs 2 hex digits"},
        {"root ::= \"\\U00110000\"", "beyond U+10FFFF"},
        {"root ::= \"a\"{3,2}", "the maximum is below the minimum"},
        {"root ::= \"a\"{1000000000}", "repetition count too large"},
        {"root ::= \"ab\"{600000}", "too large"},
        {"root ::= ( \"a\"", "line 1, column 10: unclosed '('"},
        {"root ::= \"a\" )", "line 1, column 14: ')' without '('"},
        {"root ::= *", "line 1, column 10: '*' must follow a symbol"},
        {"root ::= \"a\"**", "line 1, column 14: '*' must follow a symbol"},
        {"root ::= <think>", "token references"},
        {"root \"a\"", "line 1, column 6: expected '::='"},
        {"root ::= [z-a]", "range end before its start"},
        {"\n\n  root ::= \"\xC3\xA9\" @", "line 3, column 16: unexpected '@'"},
        {"root ::= \"\xFF\"", "invalid UTF-8"},
        {"root ::= \"a\"{2", "expected '}'"},
        {"::= \"a\"", "line 1, column 1: expected a rule name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rgram *g = rgram_parse(cases[i].text, strlen(cases[i].text), "root");
        CHECK_MSG(g == NULL, "case %zu parsed", i);
        rgram_free(g);
        CHECK_MSG(strstr(rcore_error_get(), cases[i].error) != NULL, "case %zu: \"%s\", not \"%s\"",
                  i, rcore_error_get(), cases[i].error);
    }
    /* deep nesting: an error, not a stack overflow */
    char deep[4000];
    size_t k = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k] = 0;
    CHECK(rgram_parse(deep, k, "root") == NULL);
    CHECK_ERR("nested too deeply");
    /* another root name */
    struct rgram *g = rgram_parse("start ::= \"x\"", 13, "start");
    CHECK(g != NULL && match_g(g, "x", 1) == 1);
    rgram_free(g);
}

/* 1 when the text parses, else 0 with err holding the error. */
static int parses(const char *text, char *err, size_t n) {
    struct rgram *g = rgram_parse(text, strlen(text), "root");
    snprintf(err, n, "%s", g ? "" : rcore_error_get());
    rgram_free(g);
    return g != NULL;
}

/* Grammars whose matching would cost without bound are refused at parse time, naming the rule
 * and the limit; grammars near the limits, and big repetitions of what cannot be empty, are
 * not. */
static void test_parse_limits(void) {
    char err[512];
    /* a repetition of something that can be empty: every count is a parse at every step */
    CHECK(!parses("root ::= ([a-z]?){0,1000}", err, sizeof err));
    CHECK_MSG(strstr(err, "line 1, column 26: rule 'root' (a group or repetition in it) expands "
                          "to more than 1024 parse stacks") != NULL,
              "%s", err);
    CHECK(!parses("root ::= (\"a\"{0,10}){0,1000} \"b\"", err, sizeof err));
    CHECK_MSG(strstr(err, "more than 1024 parse stacks") != NULL, "%s", err);
    CHECK(!parses("x ::= \"-\"\nroot ::= x ([a-z]?){0,1000}", err, sizeof err));
    CHECK_MSG(strstr(err, "line 2, column 28: rule 'root'") != NULL, "%s", err);
    /* the same through a JSON schema's pattern */
    static const char pat[] = "{\"type\":\"string\",\"pattern\":\"^([a-z]?){0,1000}$\"}";
    char *gs = rgram_json_schema(pat, strlen(pat));
    REQUIRE(gs);
    CHECK(!parses(gs, err, sizeof err));
    CHECK_MSG(strstr(err, "more than 1024 parse stacks") != NULL, "%s", err);
    free(gs);
    /* ways that double at each level: 2^40 ways to one stack; the innermost past the limit is
       named */
    char big[65536];
    size_t k = (size_t)snprintf(big, sizeof big, "root ::= r0\n");
    for (int i = 0; i < 40; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "r%d ::= r%d | r%d\n", i, i + 1, i + 1);
    snprintf(big + k, sizeof big - k, "r40 ::= \"x\"\n");
    CHECK(!parses(big, err, sizeof err));
    CHECK_MSG(strstr(err, "rule 'r29' expands to more than 1024") != NULL, "%s", err);
    /* a chain of rules each starting with the next: the expansion's depth */
    k = (size_t)snprintf(big, sizeof big, "root ::= r0\n");
    for (int i = 0; i < 2000; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "r%d ::= r%d \"x\"\n", i, i + 1);
    snprintf(big + k, sizeof big - k, "r2000 ::= \"x\"\n");
    CHECK(!parses(big, err, sizeof err));
    CHECK_MSG(strstr(err, "nests more than 1024 rules deep") != NULL, "%s", err);
    /* within the limits: matched as before */
    CHECK(match("root ::= ([a-z]?){0,100}", "abc") == 1);
    CHECK(match("root ::= \"a\"{0,100000} \"b\"", "aaab") == 1);
    CHECK(match("root ::= ([a-z]{1,10} \",\"){0,1000}", "abc,de,") == 1);
    static const char arr[] = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":3,"
                              "\"maxItems\":1000}";
    gs = rgram_json_schema(arr, strlen(arr));
    REQUIRE(gs);
    CHECK_MSG(parses(gs, err, sizeof err), "maxItems 1000: %s", err);
    CHECK(match(gs, "[1,2,3]") == 1 && match(gs, "[1,2]") == -1);
    free(gs);
    /* 200 optional properties: 200 ways on at the start */
    k = (size_t)snprintf(big, sizeof big, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 200; i++)
        k += (size_t)snprintf(big + k, sizeof big - k, "%s\"p%d\":{\"type\":\"integer\"}",
                              i ? "," : "", i);
    snprintf(big + k, sizeof big - k, "}}");
    gs = rgram_json_schema(big, strlen(big));
    REQUIRE(gs);
    CHECK_MSG(parses(gs, err, sizeof err), "200 optional properties: %s", err);
    CHECK(match(gs, "{\"p7\":1}") == 1);
    free(gs);
}

static void test_match(void) {
    static const struct {
        const char *grammar, *text;
        int want;
    } cases[] = {
        /* an empty string repeated is nothing (the fuzzer found `""*` read from a NULL vector) */
        {"root ::= \"a\" \"\"* \"b\" \"\"{2}", "ab", 1},
        {"root ::= \"a\" \"\"+ \"b\"", "a", 0},
        {"root ::= \"ab\" | \"a\" \"c\"+", "ab", 1},
        {"root ::= \"ab\" | \"a\" \"c\"+", "a", 0},
        {"root ::= \"ab\" | \"a\" \"c\"+", "accc", 1},
        {"root ::= \"ab\" | \"a\" \"c\"+", "b", -1},
        {"root ::= \"ab\" | \"a\" \"c\"+", "abc", -1},
        {"root ::= \"x\"{2,4}", "x", 0},
        {"root ::= \"x\"{2,4}", "xx", 1},
        {"root ::= \"x\"{2,4}", "xxxx", 1},
        {"root ::= \"x\"{2,4}", "xxxxx", -1},
        {"root ::= \"x\"{3}", "xxx", 1},
        {"root ::= \"x\"{3}", "xxxx", -1},
        {"root ::= \"x\"{2,}", "xxxxxxx", 1},
        {"root ::= \"x\"{0,2} \"y\"", "y", 1},
        {"root ::= \"ab\"?  \"c\"", "abc", 1},
        {"root ::= \"ab\"?  \"c\"", "ac", -1},
        {"root ::= [^a-c]{2}", "dd", 1},
        {"root ::= [^a-c]{2}", "da", -1},
        {"root ::= [a-cx]+", "cabx", 1},
        {"root ::= . \"z\"", "\xC3\xA9z", 1},
        /* `.` in a grammar with no other class: no ranges at all (the fuzzer: NULL + 0) */
        {"root ::= .", "\xC3\xA9", 1},
        {"root ::= .", "ab", -1},
        {"root ::= .+", "a\xE3\x81\x81", 1},
        {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\"", "A\xC3\xA9\xF0\x9F\x98\x80\t\"\\", 1},
        {"root ::= [\\]\\[]", "]", 1},
        {"root ::= \"a\" |", "", 1},
        /* a newline ends a rule, except after '|' and inside parentheses */
        {"root ::= a | # comment\n   b\na ::= \"1\"\nb ::= (\n \"2\" # inside\n \"3\")", "23", 1},
        {"root ::= a | # comment\n   b\na ::= \"1\"\nb ::= (\n \"2\" # inside\n \"3\")", "1", 1},
        /* UTF-8 split inside characters */
        {"root ::= \"\xC3\xA9\" \"x\"", "\xC3", 0},
        {"root ::= \"\xC3\xA9\" \"x\"", "\xC3\x28", -1},
        {"root ::= [^\xC3\xA9]", "\xC3", 0},
        {"root ::= [^\xC3\xA9]", "\xC3\xA9", -1},
        {"root ::= [^\xC3\xA9]", "\xC3\xA8", 1},
        {"root ::= [\xC3\xA9]", "\xC3\xA8", -1},
        {"root ::= [\xC3\xA9]", "\xE3", -1}, /* no 3-byte character in the class */
        {"root ::= [\xE3\x81\x81-\xE3\x82\x9F]", "\xE3\x81", 0},
        {"root ::= [\xE3\x81\x81-\xE3\x82\x9F]", "\xE3\x83", -1},
        {"root ::= \"a\"", "\x80", -1},
        /* overlong encodings, surrogates and code points past U+10FFFF are not characters */
        {"root ::= [^x]*", "\xF0\x80\x80\xAC", -1},
        {"root ::= [^x]*", "\xF0\x80", -1},
        {"root ::= [^x]*", "\xC0\xAC", -1},
        {"root ::= [^x]*", "\xC1", -1},
        {"root ::= [^x]*", "\xE0\x80", -1},
        {"root ::= [^x]*", "\xED\xA0", -1},
        {"root ::= [^x]*", "\xED\x9F\xBF", 1},
        {"root ::= [^x]*", "\xF4\x90", -1},
        {"root ::= [^x]*", "\xF4\x8F\xBF\xBF", 1},
        {"root ::= [^x]*", "\xE0\xA0\x80", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = match(cases[i].grammar, cases[i].text);
        CHECK_MSG(r == cases[i].want, "case %zu: %d, want %d", i, r, cases[i].want);
    }
    /* token by token, a character split over two accepts; a rejected step changes nothing */
    const char *split = "root ::= \"\xC3\xA9\" \"x\"";
    struct rgram *g = rgram_parse(split, strlen(split), "root");
    REQUIRE(g);
    struct rgram_state *s = rgram_state_new(g);
    REQUIRE(s);
    CHECK(rgram_state_accept(s, "\xC3", 1) && !rgram_state_complete(s));
    CHECK(!rgram_state_accept(s, "y", 1));
    CHECK(rgram_state_accept(s, "\xA9", 1) && !rgram_state_complete(s));
    CHECK(rgram_state_can_continue(s));
    CHECK(rgram_state_accept(s, "x", 1) && rgram_state_complete(s));
    CHECK(!rgram_state_can_continue(s));
    CHECK(!rgram_state_accept(s, "x", 1) && rgram_state_complete(s));
    rgram_state_free(s);
    rgram_free(g);
    /* an empty class: the parse cannot go on, though a stack is left */
    g = rgram_parse("root ::= \"a\" []", 15, "root");
    REQUIRE(g);
    s = rgram_state_new(g);
    REQUIRE(s);
    CHECK(rgram_state_accept(s, "a", 1) && !rgram_state_can_continue(s) &&
          !rgram_state_complete(s));
    CHECK(rgram_state_reset(s) && !rgram_state_complete(s));
    rgram_state_free(s);
    rgram_free(g);

    char *json = grammar_file("json");
    g = rgram_parse(json, strlen(json), "root");
    REQUIRE(g);
    const char *ok = "{\"a\": [1, 2.5, true, null, \"x\\n\\u00e9\"], \"b\": {}}";
    CHECK(match_g(g, ok, strlen(ok)) == 1);
    CHECK(match_g(g, "{\"a\" 1}", 7) == -1);
    CHECK(match_g(g, "{\"a\": ", 6) == 0);
    CHECK(match_g(g, "[1]", 3) == -1); /* json.gbnf's root is an object */
    rgram_free(g);
    free(json);
    /* an ambiguous grammar whose parses multiply: an error, not a hang */
    const char *amb =
        "root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" | y\ny ::= \"a\"+";
    g = rgram_parse(amb, strlen(amb), "root");
    REQUIRE(g);
    char many[200];
    memset(many, 'a', sizeof many);
    CHECK(match_g(g, many, sizeof many) == 1);
    rgram_free(g);
    /* 2^n parses after n letters: the stack limit, reported, instead of exhausting memory */
    const char *expl = "root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"d\"";
    g = rgram_parse(expl, strlen(expl), "root");
    REQUIRE(g);
    CHECK(match_g(g, "aaaaadbcbbc", 11) == 1);
    CHECK(match_g(g, "aaaaadbcbbb", 11) == 1);
    CHECK(match_g(g, "aaaaadbcbb", 10) == 0);
    CHECK(match_g(g, many, 20) == -1);
    CHECK_ERR("too ambiguous");
    rgram_free(g);
}

/* ---- masks on GPT-2's vocabulary -------------------------------------------------------- */

struct vocab_bytes {
    int32_t n;
    char *bytes;
    size_t *off;
};

static struct vocab_bytes load_gpt2(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", data_dir);
    struct rgguf *gg = rgguf_open(path, true);
    REQUIRE(gg);
    struct rvocab *v = rvocab_load(gg);
    REQUIRE(v);
    struct vocab_bytes vb = {rvocab_n_tokens(v), NULL, NULL};
    size_t cap = 1 << 20, len = 0;
    vb.bytes = malloc(cap);
    vb.off = malloc(sizeof(size_t) * ((size_t)vb.n + 1));
    REQUIRE(vb.bytes && vb.off);
    for (int32_t i = 0; i < vb.n; i++) {
        vb.off[i] = len;
        if (cap - len < 1024) REQUIRE((vb.bytes = realloc(vb.bytes, cap *= 2)));
        int32_t k = rvocab_token_to_piece(v, i, vb.bytes + len, 1024, 0, false);
        len += k > 0 ? (size_t)k : 0;
    }
    vb.off[vb.n] = len;
    rvocab_free(v);
    rgguf_close(gg);
    return vb;
}

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random walks through g over the vocabulary: at each step the trie mask equals the
 * token-by-token one, some token is allowed unless only the end may follow, and each chosen
 * token is accepted. */
static void walk_grammar(const char *name, const char *text, const struct vocab_bytes *vb,
                         const struct rgram_trie *trie, int steps, uint64_t seed) {
    struct rgram *g = rgram_parse(text, strlen(text), "root");
    REQUIRE(g);
    struct rgram_state *s = rgram_state_new(g);
    REQUIRE(s);
    uint8_t *m1 = malloc((size_t)vb->n), *m2 = malloc((size_t)vb->n), *m3 = malloc((size_t)vb->n);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)vb->n);
    REQUIRE(m1 && m2 && allowed);
    int bad_masks = 0, stuck = 0, rejected = 0, restarts = 0;
    for (int step = 0; step < steps; step++) {
        int64_t k1 = rgram_mask(s, trie, m1), k2 = rgram_mask_naive(s, trie, m2);
        int64_t k3 = rgram_mask_walk(s, trie, m3);
        REQUIRE(k1 >= 0 && k2 >= 0 && k3 >= 0);
        if (k1 != k2 || memcmp(m1, m2, (size_t)vb->n) != 0) bad_masks++;
        if (k3 != k2 || memcmp(m3, m2, (size_t)vb->n) != 0) bad_masks++;
        if (k1 == 0 && rgram_state_can_continue(s)) stuck++;
        int32_t n = 0;
        for (int32_t i = 0; i < vb->n; i++)
            if (m1[i]) allowed[n++] = i;
        if (n == 0 || (rgram_state_complete(s) && rng_next(&seed) % 8 == 0)) {
            CHECK_MSG(rgram_state_complete(s), "%s: nothing allowed at an incomplete parse", name);
            rgram_state_reset(s);
            restarts++;
            continue;
        }
        int32_t t = allowed[rng_next(&seed) % (uint64_t)n];
        if (!rgram_state_accept(s, vb->bytes + vb->off[t], vb->off[t + 1] - vb->off[t])) rejected++;
    }
    CHECK_MSG(bad_masks == 0, "%s: %d steps where the trie and naive masks differ", name,
              bad_masks);
    CHECK_MSG(stuck == 0, "%s: %d steps with no token allowed while the grammar can go on", name,
              stuck);
    CHECK_MSG(rejected == 0, "%s: %d allowed tokens rejected by accept", name, rejected);
    (void)restarts;
    free(m1);
    free(m2);
    free(m3);
    free(allowed);
    rgram_state_free(s);
    rgram_free(g);
}

static void test_masks(void) {
    struct vocab_bytes vb = load_gpt2();
    struct rgram_trie *trie = rgram_trie_new(vb.n, vb.bytes, vb.off);
    REQUIRE(trie);
    for (size_t i = 0; i < N_FILES; i++) {
        char *t = grammar_file(grammar_files[i]);
        walk_grammar(grammar_files[i], t, &vb, trie, 24, 1000 + i);
        free(t);
    }
    /* characters that GPT-2 splits over tokens, and a token that spans many symbols */
    walk_grammar("utf8",
                 "root ::= ([\xC3\xA0-\xC3\xBF] | [\xE3\x81\x81-\xE3\x82\x9F] | "
                 "\"\xF0\x9F\x98\x80\" | \" the\")+",
                 &vb, trie, 40, 7);
    walk_grammar("dot", "root ::= .{1,3}", &vb, trie, 8, 9);
    static const char js[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
        "\"n\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300},\"tags\":{\"type\":\"array\","
        "\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},\"required\":[\"name\"]}";
    char *schema = rgram_json_schema(js, strlen(js));
    REQUIRE(schema);
    walk_grammar("schema", schema, &vb, trie, 40, 11);
    free(schema);
    rgram_trie_free(trie);
    free(vb.bytes);
    free(vb.off);
}

/* A grammar within the parse-time limits whose parses pile up with the text: a step (one
 * accept, one mask) that looks at more stacks than its budget fails with an error naming the
 * limit, where each byte on its own is a step within it. */
static void test_step_budget(void) {
    /* at most 8 x 100 parses (a count of groups, a place in the last one) */
    static const char gram[] = "root ::= ([a-z]{1,8}){0,100}";
    struct rgram *g = rgram_parse(gram, strlen(gram), "root");
    REQUIRE(g);
    struct rgram_state *s = rgram_state_new(g);
    REQUIRE(s);
    char text[800];
    memset(text, 'a', sizeof text);
    CHECK(!rgram_state_accept(s, text, sizeof text));
    CHECK_ERR("one step looked at more than 1048576 parse stacks");
    bool ok = true;
    for (int i = 0; i < 100 && ok; i++) ok = rgram_state_accept(s, text, 1);
    CHECK_MSG(ok, "byte by byte: %s", rcore_error_get());
    /* the mask walks every token of letters, each byte a new set of hundreds of stacks */
    struct vocab_bytes vb = load_gpt2();
    struct rgram_trie *trie = rgram_trie_new(vb.n, vb.bytes, vb.off);
    REQUIRE(trie);
    uint8_t *m = malloc((size_t)vb.n);
    REQUIRE(m);
    CHECK(rgram_mask(s, trie, m) == -1);
    CHECK_ERR("one step looked at more than 1048576 parse stacks");
    free(m);
    rgram_trie_free(trie);
    free(vb.bytes);
    free(vb.off);
    rgram_state_free(s);
    rgram_free(g);
}

/* ---- the sampler on the shipped model --------------------------------------------------- */

static int32_t find_piece(const struct recur_model *m, const char *piece, size_t len) {
    char buf[64];
    for (int32_t i = 0; i < recur_model_n_vocab(m); i++) {
        int32_t k = recur_token_to_piece(m, i, buf, sizeof buf, 0, false);
        if (k == (int32_t)len && memcmp(buf, piece, len) == 0) return i;
    }
    return -1;
}

static void test_sampler(void) {
    struct recur_model *m = recur_model_load_from_file(model_path, recur_model_default_params());
    REQUIRE(m);
    const int32_t nv = recur_model_n_vocab(m);
    const recur_token eos = recur_token_eos(m);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    REQUIRE(logits);
    CHECK(recur_sampler_init_grammar(m, "root ::= nope", NULL) == NULL);
    CHECK(strstr(recur_last_error(), "line 1, column 10: undefined rule 'nope'") != NULL);

    /* end of sequence is the model's favourite: chosen exactly where the parse is complete */
    struct recur_sampler *chain = recur_sampler_chain_init();
    REQUIRE(chain &&
            recur_sampler_chain_add(
                chain, recur_sampler_init_grammar(m, "root ::= \"ab\" | \"abc\" \"d\"+", NULL)) &&
            recur_sampler_chain_add(chain, recur_sampler_init_greedy()));
    const int32_t ta = find_piece(m, "a", 1), tb = find_piece(m, "b", 1),
                  tz = find_piece(m, "z", 1);
    REQUIRE(ta >= 0 && tb >= 0 && tz >= 0);
    for (int32_t i = 0; i < nv; i++) logits[i] = 0.0f;
    logits[eos] = 100.0f;
    logits[tz] = 50.0f; /* never allowed */
    logits[ta] = 10.0f;
    logits[tb] = 5.0f;
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == ta); /* EOS not yet */
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == tb);
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == eos); /* "ab" is complete */
    recur_sampler_reset(chain);
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == ta);
    /* a token the grammar rejects, accepted from outside: sampling then fails, clearly */
    recur_sampler_accept(chain, tz);
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == -1);
    CHECK(strstr(recur_last_error(), "grammar") != NULL);
    recur_sampler_free(chain);

    /* a character split over byte tokens */
    const int32_t c3 = find_piece(m, "\xC3", 1), a9 = find_piece(m, "\xA9", 1);
    if (c3 < 0 || a9 < 0) {
        printf("SKIP: the shipped vocabulary has no single-byte tokens for U+00E9\n");
    } else {
        chain = recur_sampler_chain_init();
        REQUIRE(chain &&
                recur_sampler_chain_add(
                    chain, recur_sampler_init_grammar(m, "root ::= \"\xC3\xA9\" \"!\"", NULL)) &&
                recur_sampler_chain_add(chain, recur_sampler_init_greedy()));
        for (int32_t i = 0; i < nv; i++) logits[i] = 0.0f;
        logits[eos] = 100.0f;
        logits[c3] = 20.0f;
        logits[a9] = 10.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == c3);
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == a9);
        recur_token t = recur_sampler_sample_logits(chain, logits, nv);
        char buf[16];
        CHECK(t >= 0 && recur_token_to_piece(m, t, buf, sizeof buf, 0, false) == 1 &&
              buf[0] == '!');
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == eos);
        recur_sampler_free(chain);
    }
    free(logits);
    recur_model_free(m);
}

/* The lazy grammar: free before a trigger (even a trigger's first bytes, and a near miss),
 * constrained from the trigger on, the trigger split over three tokens; reset frees it. */
static void test_sampler_lazy(void) {
    struct recur_model *m = recur_model_load_from_file(model_path, recur_model_default_params());
    REQUIRE(m);
    const int32_t nv = recur_model_n_vocab(m);
    const recur_token eos = recur_token_eos(m);
    const int32_t lt = find_piece(m, "<", 1), tt = find_piece(m, "t", 1),
                  gt = find_piece(m, ">", 1), ta = find_piece(m, "a", 1),
                  tz = find_piece(m, "z", 1), bang = find_piece(m, "!", 1);
    REQUIRE(lt >= 0 && tt >= 0 && gt >= 0 && ta >= 0 && tz >= 0 && bang >= 0);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    REQUIRE(logits);
    const char *const trig[] = {"<t>"};
    CHECK(recur_sampler_init_grammar_lazy(m, "root ::= \"<t>\"", NULL, trig, 0) == NULL);
    CHECK(strstr(recur_last_error(), "no trigger") != NULL);
    const char *const empty[] = {""};
    CHECK(recur_sampler_init_grammar_lazy(m, "root ::= \"<t>\"", NULL, empty, 1) == NULL);
    struct recur_sampler *chain = recur_sampler_chain_init();
    REQUIRE(chain &&
            recur_sampler_chain_add(chain, recur_sampler_init_grammar_lazy(
                                               m, "root ::= \"<t>\" \"a\" \"!\"", NULL, trig, 1)) &&
            recur_sampler_chain_add(chain, recur_sampler_init_greedy()));
    for (int round = 0; round < 2; round++) { /* the second after a reset */
        /* free: z, which the grammar never allows, and a near miss "<z" */
        for (int32_t i = 0; i < nv; i++) logits[i] = 0.0f;
        logits[tz] = 50.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == tz);
        logits[lt] = 60.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == lt);
        logits[lt] = 0.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == tz); /* "<z": no trigger */
        /* the trigger over three tokens: still free until its last byte */
        logits[lt] = 60.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == lt);
        logits[tt] = 70.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == tt);
        logits[gt] = 80.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == gt);
        /* constrained: z, < and EOS are refused, a then ! then EOS */
        logits[ta] = 10.0f;
        logits[eos] = 100.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == ta);
        logits[bang] = 1.0f;
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == bang);
        CHECK(recur_sampler_sample_logits(chain, logits, nv) == eos);
        recur_sampler_reset(chain);
    }
    /* free before the trigger: EOS too */
    for (int32_t i = 0; i < nv; i++) logits[i] = 0.0f;
    logits[eos] = 100.0f;
    CHECK(recur_sampler_sample_logits(chain, logits, nv) == eos);
    recur_sampler_free(chain);
    free(logits);
    recur_model_free(m);
}

/* The sampler's own filtering along random walks on the shipped model, against a matcher fed
 * the same tokens: some candidate always survives, end of sequence survives exactly where the
 * parse is complete, and every survivor is a token the matcher accepts. */
static void test_sampler_property(void) {
    struct recur_model *m = recur_model_load_from_file(model_path, recur_model_default_params());
    REQUIRE(m);
    const int32_t nv = recur_model_n_vocab(m);
    const recur_token eos = recur_token_eos(m);
    struct rsample_token_data *cand = malloc(sizeof *cand * (size_t)nv);
    REQUIRE(cand);
    static const char *const names[] = {"json_arr", "arithmetic", "list"};
    uint64_t seed = 99;
    for (size_t gi = 0; gi < 3; gi++) {
        char *text = grammar_file(names[gi]);
        struct rsample *smpl = (struct rsample *)(void *)recur_sampler_init_grammar(m, text, NULL);
        struct rgram *g = rgram_parse(text, strlen(text), "root");
        struct rgram_state *mirror = g ? rgram_state_new(g) : NULL;
        REQUIRE(smpl && mirror);
        int empty = 0, eos_wrong = 0, bad = 0, ends = 0;
        char piece[256];
        for (int step = 0; step < 150; step++) {
            for (int32_t i = 0; i < nv; i++)
                cand[i] =
                    (struct rsample_token_data){i, (float)(rng_next(&seed) % 1000) / 100.0f, 0};
            struct rsample_candidates c = {cand, (size_t)nv, -1, false};
            if (!rsample_apply(smpl, &c) || c.size == 0) {
                empty++;
                break;
            }
            bool has_eos = false;
            for (size_t i = 0; i < c.size; i++) has_eos |= c.data[i].id == eos;
            if (has_eos != rgram_state_complete(mirror)) eos_wrong++;
            /* a random survivor; end of sequence starts over */
            const int32_t t = c.data[rng_next(&seed) % c.size].id;
            if (t == eos) {
                ends++;
                rsample_reset(smpl);
                rgram_state_reset(mirror);
                continue;
            }
            int32_t k = recur_token_to_piece(m, t, piece, sizeof piece, 0, false);
            if (k <= 0 || !rgram_state_accept(mirror, piece, (size_t)k)) bad++;
            rsample_accept(smpl, t);
        }
        CHECK_MSG(empty == 0, "%s: every candidate removed", names[gi]);
        CHECK_MSG(eos_wrong == 0, "%s: %d steps where end of sequence was allowed iff not complete",
                  names[gi], eos_wrong);
        CHECK_MSG(bad == 0, "%s: %d survivors the matcher rejects", names[gi], bad);
        printf("%s: 150 steps, %d ends\n", names[gi], ends);
        rgram_state_free(mirror);
        rgram_free(g);
        rsample_free(smpl);
        free(text);
    }
    free(cand);
    recur_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_grammar DATA_DIR SHIPPED_MODEL\n");
        return 2;
    }
    data_dir = argv[1];
    model_path = argv[2];
    RUN(test_files_parse);
    RUN(test_errors);
    RUN(test_match);
    RUN(test_parse_limits);
    RUN(test_step_budget);
    RUN(test_sampler);
    RUN(test_sampler_lazy);
    RUN(test_sampler_property);
    RUN(test_masks);
    return test_finish("test_grammar");
}
