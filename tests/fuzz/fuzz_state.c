/* libFuzzer target: the state readers on any bytes. The memory stream reader (whole memory and
 * one sequence, src/memory) must refuse or accept without breaking an invariant of the memory
 * (rmem_check), and the context readers of the public API (buffers and files, whole and per
 * sequence) must do the same on a small model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/io.h"
#include "memory/memory.h"
#include "recur.h"

static struct rmem *mem_whole, *mem_seq;
static struct recur_model *model;
static struct recur_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const uint32_t k_row[2] = {5, 0}, v_row[2] = {9, 3};
    struct rmem_params p = {2, k_row, v_row, RCORE_TYPE_F32, RCORE_TYPE_F16, 4, 4, NULL};
    mem_whole = rmem_create(&p);
    mem_seq = rmem_create(&p);
    rmem_snap_config(mem_seq, 2, 4, 1 << 20);
    const char *path = getenv("RECUR_FUZZ_MODEL");
    model =
        recur_model_load_from_file(path ? path : RECUR_FUZZ_MODEL, recur_model_default_params());
    struct recur_context_params cp = recur_context_default_params();
    cp.n_seq_max = 3;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.n_rollback = 2;
    ctx = model ? recur_init_from_model(model, cp) : NULL;
    if (!mem_whole || !mem_seq || !ctx) {
        fprintf(stderr, "fuzz_state: set-up failed: %s\n", recur_last_error());
        abort();
    }
    /* RECUR_FUZZ_WRITE_SEEDS=DIR: write real streams there (the seed corpus) and stop */
    const char *dir = getenv("RECUR_FUZZ_WRITE_SEEDS");
    if (dir) {
        recur_token t[6] = {1, 2, 3, 4, 5, 6};
        struct recur_batch b = recur_batch_get_one(t, 6);
        if (recur_decode(ctx, b) != 0) abort();
        recur_memory_seq_cp(recur_get_memory(ctx), 0, 2, -1, -1);
        const size_t n = recur_state_get_size(ctx), m = recur_state_seq_get_size(ctx, 0);
        uint8_t *buf = malloc(n + m);
        char path[4096];
        if (!buf || recur_state_get_data(ctx, buf, n) != n ||
            recur_state_seq_get_data(ctx, buf + n, m, 0) != m)
            abort();
        snprintf(path, sizeof path, "%s/context.bin", dir);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) abort();
        snprintf(path, sizeof path, "%s/sequence.bin", dir);
        f = fopen(path, "wb");
        if (!f || fwrite(buf + n, 1, m, f) != m || fclose(f) != 0) abort();
        free(buf);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct rio_reader r;
    rio_reader_buffer(&r, data, size);
    rmem_state_read(mem_whole, &r, -1);
    if (!rmem_check(mem_whole)) abort();
    rio_reader_buffer(&r, data, size);
    rmem_state_read(mem_seq, &r, size % 4);
    if (!rmem_check(mem_seq)) abort();
    recur_state_set_data(ctx, data, size);
    recur_state_seq_set_data(ctx, data, size, (recur_seq_id)(size % 3));
    /* and as files (whole and one sequence), which carry a header of their own */
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/recur-fuzz-state-%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (f) {
        const bool ok = fwrite(data, 1, size, f) == size;
        fclose(f);
        recur_token tokens[64];
        size_t n = 0;
        if (ok) {
            recur_state_load_file(ctx, path, tokens, 64, &n);
            recur_state_seq_load_file(ctx, path, (recur_seq_id)(size % 3), tokens, 64, &n);
        }
        remove(path);
    }
    return 0;
}
