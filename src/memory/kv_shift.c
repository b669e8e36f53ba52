/*
 * Moving positions in the attention part (memory.h: rmem_kv_seq_add, rmem_kv_seq_div,
 * rmem_kv_seqs_shift), as llama.cpp's seq_add / seq_div move a KV cache's.
 *
 * A layout without RoPE keeps its rows as they are: a key does not depend on its position, so a
 * shift rewrites the sequence's positions and nothing else.
 *
 * With RoPE a key was rotated by its position when it was stored. A rotation by p then by d is
 * one by p + d, so moving a token from p to p' rotates its K rows (every attention layer) by
 * p' - p, through the model's rotate function (llama.cpp's K-shift does the same, at its next
 * decode; here it happens in the operation itself, so that a state saved, cached or forked right
 * after it holds the rotated rows). Rows are shared between sequences by page (seq_cp), and a
 * shift moves one sequence's positions only: each page the shift touches that another page
 * table also holds is first copied for the moving sequence, which then rotates its own copy.
 * The last holder of a page keeps the page; so does a sequence whose page nobody else holds.
 * The copies are counted before anything changes, so a shift with too few free pages fails
 * whole.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "memory_impl.h"

/* The tokens of q in [p0, p1): [*i0, *i1). */
static void range_of(const struct rmem_kv_seq *q, int32_t p0, int32_t p1, uint32_t *i0,
                     uint32_t *i1) {
    *i0 = rmem_kv_first_at(q, p0 < 0 ? 0 : p0);
    *i1 = p1 < 0 ? q->n : rmem_kv_first_at(q, p1);
    if (*i1 < *i0) *i1 = *i0;
}

/* Token i's position after the shift (d = 0: plus delta; d >= 2: divided by d). */
static int64_t moved(int32_t pos, int32_t delta, int d) {
    return d ? pos / d : (int64_t)pos + delta;
}

/* Whether the shift keeps seq's positions >= 0 and in order, and the layout can do it; [*i0,
 * *i1) the tokens it moves. The error says why not. */
static bool shift_ok(const struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1, int32_t delta,
                     int d, uint32_t *i0, uint32_t *i1) {
    const struct rmem_kv_seq *q = &kv->seq[seq];
    range_of(q, p0, p1, i0, i1);
    if (*i0 == *i1 || (d == 0 && delta == 0)) return true;
    if (kv->rope && !kv->rotate) {
        rcore_error_set("kv: the layout has rotary embeddings and no way to rotate its rows: its "
                        "positions cannot be shifted");
        return false;
    }
    const int64_t lo = moved(q->pos[*i0], delta, d), hi = moved(q->pos[*i1 - 1], delta, d);
    if (lo < 0 || hi > INT32_MAX || (*i0 > 0 && lo < q->pos[*i0 - 1]) ||
        (*i1 < q->n && hi > q->pos[*i1])) {
        if (d)
            rcore_error_set("kv: seq_div of sequence %d's positions [%d, %d) by %d would put "
                            "them out of order",
                            seq, p0, p1, d);
        else
            rcore_error_set("kv: seq_add of %d to sequence %d's positions [%d, %d) would put "
                            "them out of order or below 0",
                            delta, seq, p0, p1);
        return false;
    }
    return true;
}

/* Pages g0 .. g1 - 1 of a page table hold tokens [i0, i1). */
static void page_span(const struct rmem_kv *kv, uint32_t i0, uint32_t i1, uint32_t *g0,
                      uint32_t *g1) {
    *g0 = i0 / kv->page_rows;
    *g1 = i1 > i0 ? (i1 - 1) / kv->page_rows + 1 : *g0;
}

/* The pages the shift of seqs[0 .. n) must copy: a page that t of them move and refs page
 * tables hold is copied min(t, refs - 1) times (each mover copies it while another holder is
 * left). -1 with the error set when the count's scratch cannot be had. */
static int64_t copies_needed(const struct rmem_kv *kv, const int32_t *seqs, uint32_t n, int32_t p0,
                             int32_t p1) {
    uint32_t *t = calloc(kv->n_pages, sizeof *t);
    if (!t) {
        rcore_error_set("kv: out of memory counting the pages a shift copies");
        return -1;
    }
    int64_t need = 0;
    for (uint32_t j = 0; j < n; j++) {
        const struct rmem_kv_seq *q = &kv->seq[seqs[j]];
        uint32_t i0, i1, g0, g1;
        range_of(q, p0, p1, &i0, &i1);
        page_span(kv, i0, i1, &g0, &g1);
        for (uint32_t g = g0; g < g1; g++) {
            const int32_t pg = q->pages[g];
            if (t[pg] < kv->refs[pg] - 1) need++;
            t[pg]++;
        }
    }
    free(t);
    return need;
}

/* Moves q's tokens [i0, i1): its shared pages among them copied, their K rows rotated, their
 * positions changed. The caller counted the free pages. */
static void shift_seq(struct rmem_kv *kv, struct rmem_kv_seq *q, uint32_t i0, uint32_t i1,
                      int32_t delta, int d) {
    const uint32_t pr = kv->page_rows;
    uint32_t g0, g1;
    page_span(kv, i0, i1, &g0, &g1);
    int32_t by[256]; /* one page's rows' rotations at a time */
    for (uint32_t g = g0; g < g1; g++) {
        const uint32_t first = g * pr, used = q->n - first < pr ? q->n - first : pr;
        if (kv->rope) {
            if (kv->refs[q->pages[g]] > 1) {
                const int32_t copy = rmem_kv_page_take(kv);
                rmem_kv_page_copy(kv, copy, q->pages[g], used);
                rmem_kv_page_unref(kv, q->pages[g]);
                q->pages[g] = copy;
            }
            const uint32_t a = i0 > first ? i0 - first : 0,
                           b = i1 - first < used ? i1 - first : used;
            for (uint32_t r0 = a; r0 < b; r0 += 256) {
                const uint32_t m = b - r0 < 256 ? b - r0 : 256;
                for (uint32_t r = 0; r < m; r++) {
                    const int32_t p = q->pos[first + r0 + r];
                    by[r] = (int32_t)(moved(p, delta, d) - p);
                }
                for (uint32_t il = 0; il < kv->n_layer; il++) {
                    const size_t kb = kv->k_row_bytes[il];
                    if (!kb) continue;
                    uint8_t *rows = kv->k[il] + ((size_t)q->pages[g] * pr + r0) * kb;
                    kv->rotate(kv->rotate_user, il, kv->type_k, rows, m, by);
                }
            }
        }
    }
    for (uint32_t i = i0; i < i1; i++) q->pos[i] = (int32_t)moved(q->pos[i], delta, d);
}

bool rmem_kv_seqs_shift(struct rmem_kv *kv, const int32_t *seqs, uint32_t n, int32_t p0, int32_t p1,
                        int32_t delta, int d) {
    if ((d == 0 && delta == 0) || d == 1 || d < 0) return true;
    uint32_t i0, i1;
    for (uint32_t j = 0; j < n; j++)
        if (!shift_ok(kv, seqs[j], p0, p1, delta, d, &i0, &i1)) return false;
    if (kv->rope) {
        const int64_t need = copies_needed(kv, seqs, n, p0, p1);
        if (need < 0) return false;
        if (need > kv->n_free) {
            rcore_error_set("kv: the shift moves rows that other sequences share: it needs %lld "
                            "free pages for their copies, and %u are free",
                            (long long)need, kv->n_free);
            return false;
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        struct rmem_kv_seq *q = &kv->seq[seqs[j]];
        range_of(q, p0, p1, &i0, &i1);
        if (i0 < i1) shift_seq(kv, q, i0, i1, delta, d);
    }
    return true;
}

static bool seq_in_range(const struct rmem_kv *kv, int32_t seq) {
    return seq >= 0 && (uint32_t)seq < kv->n_seq_max;
}

bool rmem_kv_seq_add(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return !seq_in_range(kv, seq) || rmem_kv_seqs_shift(kv, &seq, 1, p0, p1, delta, 0);
}

bool rmem_kv_seq_div(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1, int d) {
    return !seq_in_range(kv, seq) || d <= 1 || rmem_kv_seqs_shift(kv, &seq, 1, p0, p1, 0, d);
}
