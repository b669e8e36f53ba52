/*
 * Blocks of megabytes that are written once and kept (the prefix cache's states and attention
 * rows): mapped on their own in 2 MiB-aligned runs advised as transparent huge pages, so that
 * their first write faults once per 2 MiB instead of once per 4 KiB. On a virtual machine a
 * 4 KiB fault costs microseconds: storing a hybrid's 46 MB entry (a 22 MB state and 24 MB of
 * rows) took 100-200 ms in page faults and their zeroing (perf: clear_page_erms, 28% of a
 * long chat's server time; bench/RESULTS.md). Small blocks come from malloc. Either kind
 * carries a header before the block saying how to free it.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include "core.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define HEADER    ((size_t)RCORE_ALIGN) /* keeps the block aligned as rcore_alloc64's */

/* What precedes a block: the start and length of its mapping (length 0: malloc's, start is
 * the pointer to free). */
struct head {
    void *start;
    size_t length;
};

static size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

void *rcore_alloc_big(size_t bytes) {
    size_t total;
    if (!rcore_add_size(bytes, HEADER, &total)) return NULL;
    if (total < HUGE_PAGE) {
        void *raw = malloc(total + RCORE_ALIGN);
        if (!raw) return NULL;
        uint8_t *p = (uint8_t *)(((uintptr_t)raw + HEADER + RCORE_ALIGN - 1) &
                                 ~(uintptr_t)(RCORE_ALIGN - 1));
        const struct head h = {raw, 0};
        memcpy(p - sizeof h, &h, sizeof h);
        return p;
    }
    if (total > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
    const size_t length = round_up(total, HUGE_PAGE), span = length + HUGE_PAGE;
    uint8_t *map = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    /* the 2 MiB-aligned run inside, the rest given back */
    uint8_t *start = (uint8_t *)round_up((uintptr_t)map, HUGE_PAGE);
    if (start > map) munmap(map, (size_t)(start - map));
    if (map + span > start + length) munmap(start + length, (size_t)(map + span - start - length));
#ifdef MADV_HUGEPAGE
    madvise(start, length, MADV_HUGEPAGE); /* advice: without huge pages it works as before */
#endif
    const struct head h = {start, length};
    memcpy(start + HEADER - sizeof h, &h, sizeof h);
    return start + HEADER;
}

void rcore_free_big(void *p) {
    if (!p) return;
    struct head h;
    memcpy(&h, (uint8_t *)p - sizeof h, sizeof h);
    if (h.length)
        munmap(h.start, h.length);
    else
        free(h.start);
}
