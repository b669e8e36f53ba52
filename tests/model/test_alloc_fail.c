/*
 * Allocation failures: this test is linked with --wrap=malloc,calloc,realloc, so every
 * allocation the library makes goes through a counter that can make the Nth one fail. For
 * model load, context creation, decode, state load and the prefix cache, each N an untouched
 * run reaches is tried in turn: the call must fail with a message (or succeed, where the
 * allocation was optional), never crash, and leave things as recur.h says: a failed decode
 * changes no state, a failed state load leaves the memory cleared. Leaks are LeakSanitizer's
 * to find (the sanitizer build runs this test too).
 *   test_alloc_fail MODEL
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "alloc_shim.h"
#include "test.h"

/* ---- the counting allocator (alloc_shim.c) ---------------------------------------------- */

static long reached; /* allocations between the last arm() and disarm() */

static void arm(long at) {
    alloc_shim_arm(at);
}

static void disarm(void) {
    reached = alloc_shim_disarm();
}

/* ---- phases ------------------------------------------------------------------------------ */

static const char *model_path;
static struct recur_model *model;

static struct recur_context_params params(void) {
    struct recur_context_params p = recur_context_default_params();
    p.n_seq_max = 3;
    p.n_threads = p.n_threads_batch = 2;
    p.n_rollback = 2;
    p.checkpoint_every = 4;
    p.prefix_cache_bytes = 1 << 22;
    return p;
}

static uint8_t *state_of(struct recur_context *ctx, size_t *n) {
    *n = recur_state_get_size(ctx);
    uint8_t *buf = __real_malloc(*n);
    REQUIRE(buf && recur_state_get_data(ctx, buf, *n) == *n);
    return buf;
}

static int32_t decode_two(struct recur_context *ctx, int32_t start) {
    struct recur_batch b = recur_batch_init(6, 0, 1);
    if (!b.pos) return -2;
    for (int32_t i = 0; i < 6; i++) {
        b.token[i] = 3 + 7 * i;
        b.pos[i] = start + i / 2;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = i % 2;
        b.logits[i] = i >= 4;
    }
    b.n_tokens = 6;
    int32_t ret = recur_decode(ctx, b);
    recur_batch_free(b);
    return ret;
}

/* One phase with the Nth allocation failing; returns true when it succeeded. */
static bool phase(int which, long at) {
    bool ok = false;
    if (which == 0) { /* model load, read into memory (more allocations than mmap) */
        struct recur_model_params mp = recur_model_default_params();
        mp.use_mmap = false;
        arm(at);
        struct recur_model *m = recur_model_load_from_file(model_path, mp);
        disarm();
        ok = m != NULL;
        if (!ok) CHECK_MSG(recur_last_error()[0], "model load, allocation %ld: no message", at);
        recur_model_free(m);
        return ok;
    }
    if (which == 1) { /* context creation */
        arm(at);
        struct recur_context *ctx = recur_init_from_model(model, params());
        disarm();
        ok = ctx != NULL;
        if (!ok) CHECK_MSG(recur_last_error()[0], "context, allocation %ld: no message", at);
        recur_free(ctx);
        return ok;
    }
    struct recur_context *ctx = recur_init_from_model(model, params());
    REQUIRE(ctx);
    REQUIRE(decode_two(ctx, 0) == 0 && decode_two(ctx, 3) == 0);
    size_t n0;
    uint8_t *before = state_of(ctx, &n0);
    if (which == 2) { /* decode: failing leaves every state as it was */
        arm(at);
        const int32_t ret = decode_two(ctx, 6);
        disarm();
        ok = ret == 0;
        if (!ok) {
            size_t n1;
            uint8_t *after = state_of(ctx, &n1);
            CHECK_MSG(n0 == n1 && memcmp(before, after, n0) == 0,
                      "decode failing at allocation %ld changed the memory", at);
            free(after);
        }
    } else if (which == 3) { /* state load into another context: failing leaves it cleared */
        struct recur_context *other = recur_init_from_model(model, params());
        REQUIRE(other && decode_two(other, 0) == 0);
        arm(at);
        const size_t got = recur_state_set_data(other, before, n0);
        disarm();
        ok = got == n0;
        if (!ok) {
            CHECK_MSG(recur_last_error()[0], "state load, allocation %ld: no message", at);
            recur_memory_t mem = recur_get_memory(other);
            CHECK_MSG(recur_memory_seq_pos_max(mem, 0) == -1 &&
                          recur_memory_seq_pos_max(mem, 1) == -1,
                      "state load failing at allocation %ld left states behind", at);
        }
        recur_free(other);
    } else { /* the prefix cache: store, then restore into a free sequence */
        /* sequence 0 holds tokens 3, 17, 31 at positions 0-2 and again at 3-5 (decode_two) */
        const recur_token seq0[6] = {3, 17, 31, 3, 17, 31};
        arm(at);
        const int32_t stored = recur_prefix_cache_store(ctx, 0, seq0, 6);
        const int32_t restored = stored >= 0 ? recur_prefix_cache_restore(ctx, 2, seq0, 6) : -1;
        disarm();
        ok = stored > 0 && restored == 5;
        if (stored < 0 || restored < 0)
            CHECK_MSG(recur_last_error()[0], "prefix cache, allocation %ld: no message", at);
    }
    free(before);
    recur_free(ctx);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_alloc_fail MODEL\n");
        return 2;
    }
    model_path = argv[1];
    model = recur_model_load_from_file(model_path, recur_model_default_params());
    REQUIRE(model);
    static const char *names[5] = {"model load", "context creation", "decode", "state load",
                                   "prefix cache"};
    long total = 0;
    for (int which = 0; which < 5; which++) {
        /* how many allocations an untouched run makes */
        CHECK_MSG(phase(which, -1), "%s fails without an injected failure", names[which]);
        const long count = reached;
        int failed_calls = 0;
        for (long at = 1; at <= count; at++) failed_calls += !phase(which, at);
        CHECK_MSG(count > 0 && failed_calls > 0, "%s: %ld allocations, %d calls failed",
                  names[which], count, failed_calls);
        fprintf(stderr, "%-16s %4ld allocations, each failed once: %d calls failed cleanly\n",
                names[which], count, failed_calls);
        total += count;
    }
    fprintf(stderr, "test_alloc_fail: %ld allocation failures injected\n", total);
    recur_model_free(model);
    return test_finish("test_alloc_fail");
}
