/*
 * Whole-file reading and writing for the tests and their helper programs. Header-only, with no
 * dependence on test.h, so that a helper linked with the public library alone can use it. The
 * functions report failure by their return value; callers that cannot go on without the file
 * wrap them in REQUIRE.
 */
#ifndef RECUR_TEST_FILE_UTIL_H
#define RECUR_TEST_FILE_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file at path, malloc'd with a NUL after the contents; *len (when len is not NULL)
 * gets the length without the NUL. Reads to the end of the file whatever its kind (a pipe
 * too). NULL when the file cannot be opened or read, or without memory. */
static inline char *file_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break; /* the end, or an error (told apart below) */
        char *t = cap <= (size_t)-1 / 2 ? realloc(b, cap * 2) : NULL;
        if (!t) {
            free(b);
            b = NULL;
            break;
        }
        b = t;
        cap *= 2;
    }
    if (b && ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = '\0';
    if (len) *len = n;
    return b;
}

/* Writes data[0..size) to path, created or truncated; false on any failure (the file may then
 * hold part of the data). */
static inline bool file_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

#endif /* RECUR_TEST_FILE_UTIL_H */
