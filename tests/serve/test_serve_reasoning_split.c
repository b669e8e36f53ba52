/*
 * recur serve's reasoning separation (tools/serve/reasoning.c) on hand-written texts: for each
 * format the expected reasoning and content are written out here (llama-server's rules, see
 * reasoning.h; cases 12 and 4 are llama.cpp's own test-chat-parser expectations), and the text
 * fed whole, byte by byte, and split in two and in three at every point must give exactly them.
 * Streams must not hold back more than the undecidable: checked on a few prefixes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"
#include "test.h"

#define NONE   SERVE_REASONING_NONE
#define AUTO   SERVE_REASONING_AUTO
#define LEGACY SERVE_REASONING_DEEPSEEK_LEGACY
#define DS     SERVE_REASONING_DEEPSEEK

struct tcase {
    int format;
    bool stream, forced;
    const char *text, *reasoning, *content;
    size_t reasoning_end; /* (size_t)-1: the whole text */
};

#define ALL ((size_t)-1)

static const struct tcase cases[] = {
    {DS, false, false, "<think>abc</think>xyz", "abc", "xyz", 18},
    {DS, true, false, "<think>abc</think>xyz", "abc", "xyz", 18},
    {AUTO, true, false, "<think>abc</think>xyz", "abc", "xyz", 18},
    {NONE, true, false, "<think>abc</think>xyz", "", "<think>abc</think>xyz", 0},
    {NONE, false, true, "abc</think>xyz", "", "abc</think>xyz", 0},
    {LEGACY, false, false, "<think>abc</think>xyz", "abc", "xyz", 18},
    {LEGACY, true, false, "<think>abc</think>xyz", "", "<think>abc</think>xyz", 18},
    /* white space: before the tag it is content, inside trimmed, after it skipped */
    {DS, true, false, "  \n<think>\n  a b\n\n</think>\n\n xyz \n", "a b", "  \nxyz \n", 26},
    {LEGACY, true, false, "\n<think> a \n</think>\n b", "", "\n<think>a</think>b", 20},
    /* the prompt opened the thought (DeepSeek-R1's distills) */
    {DS, false, true, "abc</think>xyz", "abc", "xyz", 11},
    {DS, true, true, "\nabc\n</think>\n\nxyz", "abc", "xyz", 13},
    {DS, true, true, "<think>abc</think>xyz", "abc", "xyz", 18},
    {LEGACY, true, true, "Cogito</think>Ergo sum", "", "<think>Cogito</think>Ergo sum", 14},
    /* max_tokens inside the reasoning */
    {DS, true, true, "\nabc\n", "abc", "", ALL},
    {DS, true, false, "<think>abc", "abc", "", ALL},
    {DS, true, false, "<think>abc  </th", "abc", "", ALL},
    {LEGACY, true, false, "<think>abc", "", "<think>abc</think>", ALL},
    {LEGACY, true, false, "<think>abc</th", "", "<think>abc", ALL},
    {DS, true, true, "  ", "", "", ALL},
    /* no reasoning */
    {DS, true, false, "hello <think>abc</think>", "", "hello <think>abc</think>", 0},
    {DS, true, false, "<thi", "", "<thi", 0},
    {DS, true, false, " \n", "", " \n", 0},
    {DS, true, false, "<thinking>x</thinking>", "", "<thinking>x</thinking>", 0},
    {DS, true, false, "", "", "", 0},
    /* empty and repeated reasonings, tags that are not the closing one */
    {DS, true, false, "<think></think>xyz", "", "xyz", 15},
    {LEGACY, true, false, "<think> </think>xyz", "", "xyz", 16},
    {DS, true, false, "<think>a</think> <think>b</think>c", "ab", "c", 33},
    {DS, true, false, "<think>abc</think>  <thi", "abc", "<thi", 18},
    {DS, true, false, "<think>a < b </thinking> c</think>x", "a < b </thinking> c", "x", 34},
    {DS, true, false, "<think>a</think>b</think>c<think>d", "a", "b</think>c<think>d", 16},
    {DS, true, false, "<think>h\xc3\xa9llo</think>w\xc3\xb6rld", "h\xc3\xa9llo", "w\xc3\xb6rld",
     21},
};

struct got {
    char *reasoning, *content;
    size_t reasoning_end;
};

/* Feeds text cut at the given points (sorted, n_cuts of them), then finishes. */
static struct got run(const struct tcase *c, const size_t *cuts, int n_cuts) {
    struct serve_think th;
    serve_think_init(&th, (enum serve_reasoning)c->format, c->stream, c->forced);
    const size_t len = strlen(c->text);
    size_t at = 0;
    for (int k = 0; k <= n_cuts; k++) {
        const size_t to = k < n_cuts ? cuts[k] : len;
        REQUIRE(serve_think_feed(&th, c->text + at, to - at));
        at = to;
    }
    REQUIRE(serve_think_finish(&th));
    struct got g = {strdup(th.reasoning.s), strdup(th.content.s), th.reasoning_end};
    REQUIRE(g.reasoning && g.content);
    serve_think_free(&th);
    return g;
}

static int check(const struct tcase *c, int ci, const size_t *cuts, int n_cuts) {
    struct got g = run(c, cuts, n_cuts);
    const size_t end = c->reasoning_end == ALL ? strlen(c->text) : c->reasoning_end;
    const bool ok = strcmp(g.reasoning, c->reasoning) == 0 && strcmp(g.content, c->content) == 0 &&
                    g.reasoning_end == end;
    CHECK_MSG(ok, "case %d (%d cuts, first at %zu): reasoning \"%s\" content \"%s\" end %zu", ci,
              n_cuts, n_cuts ? cuts[0] : 0, g.reasoning, g.content, g.reasoning_end);
    free(g.reasoning);
    free(g.content);
    return ok ? 0 : 1;
}

/* What a stream has released after the prefix text[0 .. n): nothing is held back that is
 * already known. */
static void released(int format, bool forced, const char *text, const char *reasoning,
                     const char *content) {
    struct serve_think th;
    serve_think_init(&th, (enum serve_reasoning)format, true, forced);
    REQUIRE(serve_think_feed(&th, text, strlen(text)));
    CHECK_MSG(strcmp(th.reasoning.s ? th.reasoning.s : "", reasoning) == 0 &&
                  strcmp(th.content.s ? th.content.s : "", content) == 0,
              "prefix \"%s\": reasoning \"%s\" content \"%s\"", text,
              th.reasoning.s ? th.reasoning.s : "", th.content.s ? th.content.s : "");
    serve_think_free(&th);
}

int main(void) {
    const int n = (int)(sizeof cases / sizeof cases[0]);
    for (int ci = 0; ci < n; ci++) {
        const struct tcase *c = &cases[ci];
        const size_t len = strlen(c->text);
        int bad = check(c, ci, NULL, 0);
        for (size_t i = 0; i <= len && !bad; i++) bad += check(c, ci, &i, 1);
        for (size_t i = 0; i <= len && !bad; i++)
            for (size_t j = i; j <= len && !bad; j++) bad += check(c, ci, (size_t[]){i, j}, 2);
        size_t *every = malloc((len + 1) * sizeof *every);
        REQUIRE(every);
        for (size_t i = 0; i < len; i++) every[i] = i;
        if (!bad) check(c, ci, every, (int)len);
        free(every);
    }
    /* a stream sends what is known at once */
    released(DS, false, "<think>ab", "ab", "");
    released(DS, false, "<think>ab </th", "ab", "");
    released(DS, false, "<think>ab </think>", "ab", "");
    released(DS, false, "<think>ab </think> x", "ab", "x");
    released(DS, false, "  <thi", "", "");
    released(DS, false, "  <b", "", "  <b");
    released(DS, true, "a\n", "a", "");
    released(LEGACY, false, "<think> a", "", "<think>a");
    released(NONE, false, "<thi", "", "<thi");

    CHECK(serve_reasoning_of("none") == (int)NONE && serve_reasoning_of("auto") == (int)AUTO &&
          serve_reasoning_of("deepseek") == (int)DS &&
          serve_reasoning_of("deepseek-legacy") == (int)LEGACY);
    CHECK(serve_reasoning_of("DeepSeek") == -1 && serve_reasoning_of("") == -1 &&
          serve_reasoning_of(NULL) == -1);
    CHECK(strcmp(serve_reasoning_name(LEGACY), "deepseek-legacy") == 0);
    CHECK(serve_think_forced_open("<|Assistant|><think>\n"));
    CHECK(serve_think_forced_open("<|im_start|>assistant\n<think>"));
    CHECK(!serve_think_forced_open("<|Assistant|><think></think>"));
    CHECK(!serve_think_forced_open("<|im_start|>assistant\n"));
    CHECK(!serve_think_forced_open(""));
    return test_finish("test_serve_reasoning_split");
}
