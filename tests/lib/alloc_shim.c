/* The counting allocator (alloc_shim.h): the linker's --wrap sends the program's allocations
 * here. One thread arms and disarms it; the library's worker threads allocate nothing while a
 * call runs, so the plain counters are enough. */
#include "alloc_shim.h"

#include <stdbool.h>

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);

static long n_allocs; /* allocations since alloc_shim_arm */
static long fail_at;  /* the one that fails (0: none) */

static bool fails(void) {
    return ++n_allocs == fail_at;
}

void *__wrap_malloc(size_t n) {
    return fails() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n) {
    return fails() ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n) {
    return fails() ? NULL : __real_realloc(p, n);
}

void alloc_shim_arm(long at) {
    n_allocs = 0;
    fail_at = at > 0 ? at : 0;
}

long alloc_shim_disarm(void) {
    fail_at = 0;
    return n_allocs;
}
