/*
 * Matching a text against a GBNF grammar, for the grammar and JSON-schema tests. Header-only.
 */
#ifndef RECUR_TEST_GRAMMAR_UTIL_H
#define RECUR_TEST_GRAMMAR_UTIL_H

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "grammar/grammar.h"

#include "test.h"

/* 1: text is a complete parse; 0: a prefix of one (not complete); -1: rejected. */
static inline int match_g(const struct rgram *g, const char *text, size_t len) {
    struct rgram_state *s = rgram_state_new(g);
    REQUIRE(s);
    int r = rgram_state_accept(s, text, len) ? rgram_state_complete(s) : -1;
    rgram_state_free(s);
    return r;
}

/* The same for grammar text; -2 when it does not parse (the error printed). */
static inline int match(const char *grammar, const char *text) {
    struct rgram *g = rgram_parse(grammar, strlen(grammar), "root");
    if (!g) {
        fprintf(stderr, "grammar failed to parse: %s\n", rcore_error_get());
        return -2;
    }
    int r = match_g(g, text, strlen(text));
    rgram_free(g);
    return r;
}

#endif
