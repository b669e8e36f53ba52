/* libFuzzer target: batch validation and placement. The bytes describe a batch (tokens,
 * positions or none, sequence ids, output flags); rmem_init_batch must accept it and place
 * every ubatch, or refuse it leaving the memory bit for bit as it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"

static struct rmem *mem;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const uint32_t k_row[1] = {3}, v_row[1] = {4};
    struct rmem_params p = {1, k_row, v_row, RCORE_TYPE_F32, RCORE_TYPE_F32, 6, 8, NULL};
    if (!(mem = rmem_create(&p))) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { MAX = 64 };
    if (size < 2) return 0;
    const int32_t n = data[0] % MAX;
    const bool with_pos = data[1] & 1, with_seq = data[1] & 2, with_logits = data[1] & 4;
    int32_t tok[MAX], pos[MAX], nseq[MAX], ids[MAX][3];
    int32_t *ptr[MAX];
    int8_t logits[MAX];
    size_t at = 2;
#define NEXT() (at < size ? data[at++] : 0)
    for (int32_t i = 0; i < n; i++) {
        tok[i] = (int32_t)NEXT() - 8; /* some out of range */
        pos[i] = (int32_t)NEXT() % 40 - 2;
        nseq[i] = NEXT() % 4;
        for (int j = 0; j < 3; j++) ids[i][j] = (int32_t)(NEXT() % 11) - 1;
        ptr[i] = ids[i];
        logits[i] = (int8_t)(NEXT() & 1);
    }
#undef NEXT
    struct rbatch_in in = {n,
                           tok,
                           NULL,
                           with_pos ? pos : NULL,
                           with_seq ? nseq : NULL,
                           with_seq ? ptr : NULL,
                           with_logits ? logits : NULL};
    struct rmem_batch_params bp = {1 + (uint32_t)(data[1] >> 3) % 8, 200, false, false};
    const uint64_t before = rmem_fingerprint(mem);
    struct rmem_bctx *bctx = NULL;
    const enum rmem_status st = rmem_init_batch(mem, &in, &bp, &bctx);
    if (st != RMEM_OK) {
        if (bctx || rmem_fingerprint(mem) != before) abort(); /* refused: nothing changed */
        return 0;
    }
    do {
        if (!rmem_bctx_apply(bctx)) abort(); /* the prepare promised room */
    } while (rmem_bctx_next(bctx));
    rmem_bctx_free(bctx);
    if (!rmem_check(mem)) abort();
    if (data[size - 1] % 4 == 0) rmem_clear(mem, false); /* now and then, start over */
    return 0;
}
