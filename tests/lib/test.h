/*
 * A tiny test harness: CHECK records a failure with file and line and goes on, so one run
 * reports every broken assertion; test_finish prints "N passed, N failed" (the closing line CI
 * reads) and returns non-zero when anything failed.
 */
#ifndef RECUR_TEST_H
#define RECUR_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_n_pass = 0;
static int test_n_fail = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_n_pass++;                                                                         \
        } else {                                                                                   \
            test_n_fail++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_n_pass++;                                                                         \
        } else {                                                                                   \
            test_n_fail++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* the last error contains the given text (tests of the public API define TEST_LAST_ERROR as
   recur_last_error before including this file) */
#ifndef TEST_LAST_ERROR
#define TEST_LAST_ERROR rcore_error_get
#endif
#define CHECK_ERR(text)                                                                            \
    CHECK_MSG(strstr(TEST_LAST_ERROR(), (text)) != NULL, "error was \"%s\"", TEST_LAST_ERROR())

/* Stops a test that cannot go on (e.g. an allocation in the test itself failed). */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int before_ = test_n_fail;                                                                 \
        fn();                                                                                      \
        fprintf(stderr, "%-40s %s\n", #fn, test_n_fail == before_ ? "ok" : "FAILED");              \
    } while (0)

static inline int test_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, test_n_pass, test_n_fail);
    if (test_n_pass == 0) {
        printf("%s: no check ran\n", name);
        return 1;
    }
    return test_n_fail ? 1 : 0;
}

/* splitmix64: small, fast, seedable; the tests' only source of randomness */
static inline unsigned long long test_rand(unsigned long long *state) {
    unsigned long long z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline int test_rand_int(unsigned long long *state, int n) {
    return (int)(test_rand(state) % (unsigned long long)n);
}

#endif
