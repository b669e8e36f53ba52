/*
 * The counting allocator of the allocation-failure tests. A test built with alloc_shim.c and
 * linked with -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc (recur_alloc_shim in
 * tests/CMakeLists.txt does both) sends every malloc, calloc and realloc of the program, the
 * library's included, through a counter that can make the Nth one return NULL.
 */
#ifndef RECUR_TEST_ALLOC_SHIM_H
#define RECUR_TEST_ALLOC_SHIM_H

#include <stddef.h>

/* Counts allocations from 0 again; the at-th one from now fails (at <= 0: none fails). */
void alloc_shim_arm(long at);
/* No allocation fails any more; returns how many were made since alloc_shim_arm. */
long alloc_shim_disarm(void);

/* The C library's allocator, for the test's own memory (never failed or counted). */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);

#endif /* RECUR_TEST_ALLOC_SHIM_H */
