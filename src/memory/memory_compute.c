/*
 * memory_compute: the compute's view of a placed block, one layer at a time (memory.h,
 * "the compute's view").
 *
 * The contract of the memory with the compute (every read of a layer's states before any
 * write of them, since a slot's source may be another slot's row) is kept here rather than
 * by each model: rmem_layer_begin does every read, and rmem_layer_end every write.
 *  - In place: f32 states and every slot either new or already in its own cell (s_copy(i) =
 *    head + i). The compute then works on the block's own rows; nothing moves, so no read
 *    can see another slot's write. A generation step of sequences that stay in their cells,
 *    the common case, is one such.
 *  - Gathered: otherwise (a fork, a move, f16/bf16 states) the states are converted into one
 *    f32 buffer (K rows of the block, then V rows), and written back, converted, into rows
 *    head .. head+n-1 at the end. The buffer (aligned for the kernels) grows to the largest
 *    block seen and is kept;
 *    it is sized for the widest layer, so only a first layer can fail for want of memory,
 *    before any state was written.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "memory_impl.h"

/* See "In place" above. */
static bool block_in_place(const struct rmem *mem) {
    if (mem->type_k != RCORE_TYPE_F32 || mem->type_v != RCORE_TYPE_F32) return false;
    for (uint32_t s = 0; s < mem->meta.n; s++)
        if (rmem_s_mask(mem, s) != 0.0f && rmem_s_copy(mem, s) != (int32_t)(mem->meta.head + s))
            return false;
    return true;
}

bool rmem_layer_begin(struct rmem *mem, uint32_t il, struct rmem_layer *out) {
    if (il >= mem->n_layer || mem->layer_open >= 0 || mem->meta.n == 0) {
        rcore_error_set("rmem_layer_begin(%u): %s", il,
                        il >= mem->n_layer     ? "no such layer"
                        : mem->layer_open >= 0 ? "the previous layer was not ended"
                                               : "no block is placed");
        return false;
    }
    const uint32_t n = mem->meta.n, head = mem->meta.head;
    const size_t kb = mem->k_row_bytes[il], vb = mem->v_row_bytes[il];
    const size_t k_elems = kb / rcore_type_size(mem->type_k);
    const size_t v_elems = vb / rcore_type_size(mem->type_v);
    out->k_row = k_elems;
    out->v_row = v_elems;
    mem->layer_in_place = block_in_place(mem);
    if (mem->layer_in_place) {
        out->k = kb ? (float *)(void *)(mem->k[il] + (size_t)head * kb) : NULL;
        out->v = vb ? (float *)(void *)(mem->v[il] + (size_t)head * vb) : NULL;
        for (uint32_t s = 0; s < n; s++)
            if (rmem_s_mask(mem, s) == 0.0f) { /* a new sequence starts from zeros */
                if (kb) memset(out->k + s * k_elems, 0, kb);
                if (vb) memset(out->v + s * v_elems, 0, vb);
            }
        mem->layer_open = il;
        return true;
    }
    /* room for the widest layer, taken at layer 0: a failure then comes before any write */
    size_t need = 0;
    for (uint32_t l = 0; l < mem->n_layer; l++) {
        const size_t per = mem->k_row_bytes[l] / rcore_type_size(mem->type_k) +
                           mem->v_row_bytes[l] / rcore_type_size(mem->type_v);
        if ((size_t)n * per > need) need = (size_t)n * per;
    }
    if (need > mem->gather_cap) {
        /* aligned for the kernels; nothing in the old buffer is kept between blocks */
        size_t bytes;
        float *grown =
            rcore_mul_size(need, sizeof(float), &bytes) ? rcore_alloc64(bytes, false) : NULL;
        if (!grown) {
            rcore_error_set("out of memory gathering %u states of layer %u (%zu bytes)", n, il,
                            need * sizeof(float));
            return false;
        }
        rcore_free64(mem->gather);
        mem->gather = grown;
        mem->gather_cap = need;
    }
    out->k = mem->gather;
    out->v = mem->gather + (size_t)n * k_elems;
    for (uint32_t s = 0; s < n; s++) {
        float *ks = out->k + s * k_elems, *vs = out->v + s * v_elems;
        if (rmem_s_mask(mem, s) == 0.0f) {
            memset(ks, 0, k_elems * sizeof(float));
            memset(vs, 0, v_elems * sizeof(float));
            continue;
        }
        const size_t src = (size_t)rmem_s_copy(mem, s);
        if (kb) rcore_row_to_f32(mem->type_k, ks, mem->k[il] + src * kb, k_elems);
        if (vb) rcore_row_to_f32(mem->type_v, vs, mem->v[il] + src * vb, v_elems);
    }
    mem->layer_open = il;
    return true;
}

void rmem_layer_end(struct rmem *mem, uint32_t il) {
    assert(mem->layer_open == (int64_t)il && "rmem_layer_end without its begin");
    if (mem->layer_open != (int64_t)il) return;
    mem->layer_open = -1;
    if (mem->layer_in_place) return;
    const uint32_t n = mem->meta.n, head = mem->meta.head;
    const size_t kb = mem->k_row_bytes[il], vb = mem->v_row_bytes[il];
    const size_t k_elems = kb / rcore_type_size(mem->type_k);
    const size_t v_elems = vb / rcore_type_size(mem->type_v);
    const float *k = mem->gather, *v = mem->gather + (size_t)n * k_elems;
    for (uint32_t s = 0; s < n; s++) {
        if (kb)
            rcore_row_from_f32(mem->type_k, mem->k[il] + (size_t)(head + s) * kb, k + s * k_elems,
                               k_elems);
        if (vb)
            rcore_row_from_f32(mem->type_v, mem->v[il] + (size_t)(head + s) * vb, v + s * v_elems,
                               v_elems);
    }
}
