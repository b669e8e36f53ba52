/* Private to src/batch: what validate.c and split.c share. */
#ifndef RECUR_BATCH_IMPL_H
#define RECUR_BATCH_IMPL_H

#include "batch.h"

#include "../core/core.h"

static inline int32_t tok_n_ids(const struct rbatch_in *batch, int32_t i) {
    return batch->n_seq_id ? batch->n_seq_id[i] : 1;
}

static inline const int32_t *tok_ids(const struct rbatch_in *batch, int32_t i) {
    /* n_seq_id NULL puts every token on sequence 0, whatever seq_id holds */
    static const int32_t seq_zero = 0;
    return batch->n_seq_id ? batch->seq_id[i] : &seq_zero;
}

/* Carves one allocation into typed arrays: lay() reserves count elements and returns their
 * offset, and any overflow poisons the whole layout, so callers check once at the end. */
struct layout {
    size_t size;
    bool ok;
};

static inline size_t lay(struct layout *l, size_t count, size_t elem, size_t align) {
    size_t off = l->size;
    size_t bytes;
    if (!l->ok) return 0;
    if (off % align != 0 && !rcore_add_size(off, align - off % align, &off)) l->ok = false;
    if (!l->ok || !rcore_mul_size(count, elem, &bytes) || !rcore_add_size(off, bytes, &l->size)) {
        l->ok = false;
        return 0;
    }
    return off;
}

#define LAY(l, count, type) lay((l), (count), sizeof(type), _Alignof(type))

#endif
