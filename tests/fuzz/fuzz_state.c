/* libFuzzer target: the state readers on any bytes. The memory stream reader (whole memory and
 * one sequence, src/memory), of a recurrent memory and of a hybrid one (its attention part's
 * stream after the recurrent one), must refuse or accept without breaking an invariant of the
 * memory (rmem_check), and the context readers of the public API (buffers and files, whole and
 * per sequence) must do the same on a small model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/io.h"
#include "memory/memory.h"
#include "recur.h"

static struct rmem *mem_whole, *mem_seq, *hybrid_whole, *hybrid_seq;

/* A hybrid memory: layer 0 recurrent, layer 1 attention (pages of 4 tokens, 8 pages). */
static struct rmem *hybrid(void) {
    static const uint32_t k_row[2] = {5, 0}, v_row[2] = {9, 0};
    static const size_t ak[2] = {0, 12}, av[2] = {0, 6};
    static const struct rmem_kv_params a = {2, ak, av, 1, 1, 4, 8, 4, false};
    const struct rmem_params p = {2, k_row, v_row, RCORE_TYPE_F32, RCORE_TYPE_F32, 4, 4, &a};
    struct rmem *mem = rmem_create(&p);
    if (mem) rmem_snap_config(mem, 2, 4, 1 << 20);
    return mem;
}

/* The seeds of the hybrid streams: 6 tokens of sequence 0 (rows filled in), forked to 2, then
 * the whole memory into hybrid.bin and sequence 0 into hybrid-seq.bin. */
static void write_hybrid_seeds(const char *dir) {
    struct rmem *mem = hybrid();
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, nid[6] = {1, 1, 1, 1, 1, 1}, zero = 0;
    int32_t *ids[6] = {&zero, &zero, &zero, &zero, &zero, &zero};
    const struct rbatch_in in = {6, tok, NULL, NULL, nid, ids, NULL};
    const struct rmem_batch_params bp = {6, 0, false, false};
    struct rmem_bctx *bc;
    if (!mem || rmem_init_batch(mem, &in, &bp, &bc) != RMEM_OK || !rmem_bctx_apply(bc)) abort();
    uint8_t *k = rmem_kv_k_data(rmem_attn(mem), 1);
    for (uint32_t t = 0; t < 6; t++)
        for (int b = 0; b < 12; b++)
            k[rmem_kv_token_row(rmem_attn(mem), t) * 12 + b] = (uint8_t)(t + b);
    rmem_bctx_free(bc);
    if (!rmem_seq_cp(mem, 0, 2, -1, -1)) abort();
    const char *names[2] = {"hybrid.bin", "hybrid-seq.bin"};
    for (int i = 0; i < 2; i++) {
        const size_t n = rmem_state_size(mem, i ? 0 : -1);
        uint8_t *buf = malloc(n);
        struct rio_writer w;
        if (!buf) abort();
        rio_writer_buffer(&w, buf, n);
        if (!rmem_state_write(mem, &w, i ? 0 : -1)) abort();
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) abort();
        free(buf);
    }
    rmem_free(mem);
}
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
    hybrid_whole = hybrid();
    hybrid_seq = hybrid();
    const char *path = getenv("RECUR_FUZZ_MODEL");
    model =
        recur_model_load_from_file(path ? path : RECUR_FUZZ_MODEL, recur_model_default_params());
    struct recur_context_params cp = recur_context_default_params();
    cp.n_seq_max = 3;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.n_rollback = 2;
    ctx = model ? recur_init_from_model(model, cp) : NULL;
    if (!mem_whole || !mem_seq || !hybrid_whole || !hybrid_seq || !ctx) {
        fprintf(stderr, "fuzz_state: set-up failed: %s\n", recur_last_error());
        abort();
    }
    /* RECUR_FUZZ_WRITE_SEEDS=DIR: write real streams there (the seed corpus) and stop */
    const char *dir = getenv("RECUR_FUZZ_WRITE_SEEDS");
    if (dir) {
        write_hybrid_seeds(dir);
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
    rio_reader_buffer(&r, data, size);
    rmem_state_read(hybrid_whole, &r, -1);
    if (!rmem_check(hybrid_whole)) abort();
    rio_reader_buffer(&r, data, size);
    rmem_state_read(hybrid_seq, &r, size % 4);
    if (!rmem_check(hybrid_seq)) abort();
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
