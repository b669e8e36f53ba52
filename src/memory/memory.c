/* The recurrent state memory: cells, sequence operations, placement of ubatches. The design is
 * described at the top of memory.h; the batch context that splits a batch and places its
 * ubatches is in memory_batch.c, state streams are in memory_state.c. */
#include "memory_impl.h"

#include <assert.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Cell classes while a ubatch is placed. */
enum { KIND_FREE = 0, KIND_OWN = 1, KIND_BAD = 2 };
/* KIND_OWN: every sequence in the cell belongs to the ubatch, so the cell may be reused.
 * KIND_BAD: the cell holds the state of a sequence outside the ubatch, which must survive. */

/* Upper bounds that keep every index and count in int32_t with room to spare. */
#define RMEM_MAX_CELLS  (1u << 24)
#define RMEM_MAX_SEQS   (1u << 24)
#define RMEM_MAX_LAYERS (1u << 16)

/* ---- creation ---------------------------------------------------------------------------- */

static bool meta_alloc(struct rmem_meta *m, uint32_t size, uint32_t n_seq) {
    m->pos = malloc(sizeof(int32_t) * size);
    m->src = malloc(sizeof(int32_t) * size);
    m->n_memb = malloc(sizeof(int32_t) * size);
    m->first = malloc(sizeof(int32_t) * size);
    m->tail = malloc(sizeof(int32_t) * n_seq);
    m->next = malloc(sizeof(int32_t) * n_seq);
    m->prev = malloc(sizeof(int32_t) * n_seq);
    return m->pos && m->src && m->n_memb && m->first && m->tail && m->next && m->prev;
}

static void meta_free(struct rmem_meta *m) {
    free(m->pos);
    free(m->src);
    free(m->n_memb);
    free(m->first);
    free(m->tail);
    free(m->next);
    free(m->prev);
}

static void meta_reset(struct rmem_meta *m, uint32_t size, uint32_t n_seq) {
    for (uint32_t c = 0; c < size; c++) {
        m->pos[c] = -1;
        m->src[c] = -1;
        m->n_memb[c] = 0;
        m->first[c] = -1;
    }
    for (uint32_t s = 0; s < n_seq; s++) m->tail[s] = m->next[s] = m->prev[s] = -1;
    m->used = m->head = m->n = 0;
}

void rmem_meta_copy(struct rmem_meta *dst, const struct rmem_meta *src, uint32_t size,
                    uint32_t n_seq) {
    memcpy(dst->pos, src->pos, sizeof(int32_t) * size);
    memcpy(dst->src, src->src, sizeof(int32_t) * size);
    memcpy(dst->n_memb, src->n_memb, sizeof(int32_t) * size);
    memcpy(dst->first, src->first, sizeof(int32_t) * size);
    memcpy(dst->tail, src->tail, sizeof(int32_t) * n_seq);
    memcpy(dst->next, src->next, sizeof(int32_t) * n_seq);
    memcpy(dst->prev, src->prev, sizeof(int32_t) * n_seq);
    dst->used = src->used;
    dst->head = src->head;
    dst->n = src->n;
}

static bool check_params(const struct rmem_params *p) {
    if (!p) {
        rcore_error_set("memory parameters are NULL");
        return false;
    }
    if (p->n_layer == 0 || p->n_layer > RMEM_MAX_LAYERS) {
        rcore_error_set("n_layer %u is out of range 1..%u", p->n_layer, RMEM_MAX_LAYERS);
        return false;
    }
    if (p->n_cells == 0 || p->n_cells > RMEM_MAX_CELLS) {
        rcore_error_set("n_cells %u is out of range 1..%u", p->n_cells, RMEM_MAX_CELLS);
        return false;
    }
    if (p->n_seq_max == 0 || p->n_seq_max > RMEM_MAX_SEQS) {
        rcore_error_set("n_seq_max %u is out of range 1..%u", p->n_seq_max, RMEM_MAX_SEQS);
        return false;
    }
    if (!p->k_row || !p->v_row) {
        rcore_error_set("the per-layer K and V row sizes are missing");
        return false;
    }
    if (!rcore_type_valid((int)p->type_k) || !rcore_type_valid((int)p->type_v)) {
        rcore_error_set("state types must be f32, f16 or bf16 (type_k %d, type_v %d)",
                        (int)p->type_k, (int)p->type_v);
        return false;
    }
    return true;
}

/* No allocation can exceed the 47-bit user address space of x86-64 and arm64 Linux; a size
 * past it is a parameter error, not a request to try. */
#define RMEM_MAX_BYTES ((size_t)1 << 47)

/* Bytes of one layer's rows of one kind, or false when they exceed the address space. */
static bool layer_bytes(uint32_t n_cells, uint32_t n_elem, enum rcore_type type, size_t *row,
                        size_t *all) {
    return rcore_mul_size(n_elem, rcore_type_size(type), row) &&
           rcore_mul_size(*row, n_cells, all) && *all < RMEM_MAX_BYTES;
}

struct rmem *rmem_create(const struct rmem_params *p) {
    if (!check_params(p)) return NULL;

    struct rmem *mem = calloc(1, sizeof *mem);
    if (!mem) goto oom;
    mem->n_layer = p->n_layer;
    mem->size = p->n_cells;
    mem->n_seq_max = p->n_seq_max;
    mem->type_k = p->type_k;
    mem->type_v = p->type_v;
    mem->layer_open = -1;

    mem->k_row_bytes = calloc(p->n_layer, sizeof(size_t));
    mem->v_row_bytes = calloc(p->n_layer, sizeof(size_t));
    mem->k = calloc(p->n_layer, sizeof(uint8_t *));
    mem->v = calloc(p->n_layer, sizeof(uint8_t *));
    if (!mem->k_row_bytes || !mem->v_row_bytes || !mem->k || !mem->v) goto oom;

    size_t total = 0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        size_t k_all, v_all;
        if (!layer_bytes(p->n_cells, p->k_row[il], p->type_k, &mem->k_row_bytes[il], &k_all) ||
            !layer_bytes(p->n_cells, p->v_row[il], p->type_v, &mem->v_row_bytes[il], &v_all) ||
            (total += k_all + v_all) >= RMEM_MAX_BYTES) {
            rcore_error_set("layer %u: %u cells of K rows (%u elements) and V rows (%u elements) "
                            "overflow the address space",
                            il, p->n_cells, p->k_row[il], p->v_row[il]);
            rmem_free(mem);
            return NULL;
        }
        /* calloc: a fresh memory reads as zero states, and free cells hold no garbage */
        if (k_all && !(mem->k[il] = rcore_alloc64(k_all, true))) goto oom;
        if (v_all && !(mem->v[il] = rcore_alloc64(v_all, true))) goto oom;
        if (mem->k_row_bytes[il] > mem->max_row_bytes) mem->max_row_bytes = mem->k_row_bytes[il];
        if (mem->v_row_bytes[il] > mem->max_row_bytes) mem->max_row_bytes = mem->v_row_bytes[il];
    }
    if (mem->max_row_bytes && !(mem->row_tmp = malloc(mem->max_row_bytes))) goto oom;

    if (!meta_alloc(&mem->meta, mem->size, mem->n_seq_max) ||
        !meta_alloc(&mem->saved, mem->size, mem->n_seq_max))
        goto oom;
    meta_reset(&mem->meta, mem->size, mem->n_seq_max);

    mem->seq_stamp = calloc(mem->n_seq_max, sizeof(uint32_t));
    mem->cell_stamp = calloc(mem->size, sizeof(uint32_t));
    mem->cell_in_ub = calloc(mem->size, sizeof(int32_t));
    mem->votes = calloc(mem->size, sizeof(int32_t));
    mem->kind = calloc(mem->size, 1);
    mem->lead_src = calloc(mem->n_seq_max, sizeof(int32_t));
    mem->pos_max = calloc(mem->n_seq_max, sizeof(int32_t));
    if (!mem->seq_stamp || !mem->cell_stamp || !mem->cell_in_ub || !mem->votes || !mem->kind ||
        !mem->lead_src || !mem->pos_max)
        goto oom;
    if (p->attn) {
        if (p->attn->n_layer != p->n_layer || p->attn->n_seq_max != p->n_seq_max) {
            rcore_error_set("the attention part has %u layers and %u sequences, the memory %u "
                            "and %u",
                            p->attn->n_layer, p->attn->n_seq_max, p->n_layer, p->n_seq_max);
            rmem_free(mem);
            return NULL;
        }
        if (!(mem->kv = rmem_kv_create(p->attn))) { /* its error says why */
            rmem_free(mem);
            return NULL;
        }
    }
    return mem;

oom:
    rmem_free(mem);
    rcore_error_set("out of memory creating a state memory of %u cells for %u sequences",
                    p->n_cells, p->n_seq_max);
    return NULL;
}

void rmem_free(struct rmem *mem) {
    if (!mem) return;
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        if (mem->k) rcore_free64(mem->k[il]);
        if (mem->v) rcore_free64(mem->v[il]);
    }
    free(mem->k);
    free(mem->v);
    free(mem->k_row_bytes);
    free(mem->v_row_bytes);
    free(mem->row_tmp);
    rcore_free64(mem->gather);
    meta_free(&mem->meta);
    meta_free(&mem->saved);
    free(mem->seq_stamp);
    free(mem->cell_stamp);
    free(mem->cell_in_ub);
    free(mem->votes);
    free(mem->kind);
    free(mem->lead_src);
    free(mem->pos_max);
    rmem_snap_free_all(mem);
    rmem_kv_free(mem->kv);
    free(mem);
}

/* ---- shape and size ---------------------------------------------------------------------- */

struct rmem_kv *rmem_attn(struct rmem *mem) {
    return mem->kv;
}

const struct rmem_kv *rmem_attn_const(const struct rmem *mem) {
    return mem->kv;
}

uint32_t rmem_size(const struct rmem *mem) {
    return mem->size;
}

uint32_t rmem_used(const struct rmem *mem) {
    return mem->meta.used;
}

uint32_t rmem_n_seq_max(const struct rmem *mem) {
    return mem->n_seq_max;
}

uint32_t rmem_n_layer(const struct rmem *mem) {
    return mem->n_layer;
}

enum rcore_type rmem_type_k(const struct rmem *mem) {
    return mem->type_k;
}

enum rcore_type rmem_type_v(const struct rmem *mem) {
    return mem->type_v;
}

size_t rmem_bytes_k(const struct rmem *mem) {
    size_t total = 0;
    for (uint32_t il = 0; il < mem->n_layer; il++) total += mem->k_row_bytes[il] * mem->size;
    return total;
}

size_t rmem_bytes_v(const struct rmem *mem) {
    size_t total = 0;
    for (uint32_t il = 0; il < mem->n_layer; il++) total += mem->v_row_bytes[il] * mem->size;
    return total;
}

size_t rmem_bytes_total(const struct rmem *mem) {
    return rmem_bytes_k(mem) + rmem_bytes_v(mem);
}

/* ---- sequence operations ----------------------------------------------------------------- */

static bool seq_valid(const struct rmem *mem, int32_t seq) {
    return seq >= 0 && (uint32_t)seq < mem->n_seq_max;
}

void rmem_clear(struct rmem *mem, bool data) {
    meta_reset(&mem->meta, mem->size, mem->n_seq_max);
    rmem_snap_drop_all(mem);
    if (mem->kv) rmem_kv_clear(mem->kv, data);
    if (!data) return;
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        if (mem->k[il]) memset(mem->k[il], 0, mem->k_row_bytes[il] * mem->size);
        if (mem->v[il]) memset(mem->v[il], 0, mem->v_row_bytes[il] * mem->size);
    }
}

/* seq_rm of the recurrent part alone. */
static bool recurrent_seq_rm(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1) {
    struct rmem_meta *m = &mem->meta;
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;

    if (seq < 0) {
        if (p0 == p1) return true;
        if (p0 != 0 || p1 != INT32_MAX) {
            rcore_error_set("seq_rm of every sequence over [%d, %d): a recurrent state can only "
                            "be removed whole",
                            p0, p1);
            return false;
        }
        meta_reset(m, mem->size, mem->n_seq_max);
        rmem_snap_drop_all(mem);
        return true;
    }
    if ((uint32_t)seq >= mem->n_seq_max) {
        rcore_error_set("seq_rm: sequence id %d is out of range 0..%u", seq, mem->n_seq_max - 1);
        return false;
    }
    int32_t c = m->tail[seq];
    if (c < 0) return true;
    int32_t pos = m->pos[c];
    /* the tail from p0 on: back to the newest snapshot before p0, when one is kept */
    if (0 < p0 && p0 <= pos && p1 == INT32_MAX) return rmem_snap_restore(mem, seq, p0);
    if ((0 < p0 && p0 <= pos) || (0 < p1 && p1 <= pos)) {
        rcore_error_set("seq_rm of sequence %d over [%d, %d) would cut its state (at position "
                        "%d) in the middle",
                        seq, p0, p1, pos);
        return false;
    }
    if (p0 <= pos && pos < p1) {
        rmem_seq_drop(m, seq);
        rmem_snap_drop_seq(mem, seq);
    }
    return true;
}

/* A hybrid sequence's attention rows after its state's position go (all of them when it has
 * no state): a tail, which the attention part always lets go. */
static void attn_follow(struct rmem *mem, int32_t seq) {
    const bool ok = rmem_kv_seq_rm(mem->kv, seq, rmem_seq_pos_max(mem, seq) + 1, -1);
    assert(ok && "the attention rows past a state's position are a tail");
    (void)ok;
}

bool rmem_seq_rm(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1) {
    if (!recurrent_seq_rm(mem, seq, p0, p1)) return false;
    if (mem->kv)
        for (uint32_t s = 0; s < mem->n_seq_max; s++)
            if (seq < 0 || (int32_t)s == seq) attn_follow(mem, (int32_t)s);
    return true;
}

bool rmem_seq_cp(struct rmem *mem, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    (void)p0;
    (void)p1;
    struct rmem_meta *m = &mem->meta;
    if (src == dst || !seq_valid(mem, src) || !seq_valid(mem, dst)) return true;
    if (mem->kv && !rmem_kv_seq_cp(mem->kv, src, dst)) return false;
    rmem_seq_drop(m, dst);
    if (m->tail[src] >= 0) rmem_cell_add(m, m->tail[src], dst);
    rmem_snap_copy_seq(mem, src, dst);
    return true;
}

void rmem_seq_keep(struct rmem *mem, int32_t seq) {
    struct rmem_meta *m = &mem->meta;
    if (mem->kv) rmem_kv_seq_keep(mem->kv, seq);
    int32_t keep = seq_valid(mem, seq) ? m->tail[seq] : -1;
    int32_t keep_pos = keep >= 0 ? m->pos[keep] : -1;
    meta_reset(m, mem->size, mem->n_seq_max);
    for (uint32_t s = 0; s < mem->n_seq_max; s++)
        if ((int32_t)s != seq) rmem_snap_drop_seq(mem, (int32_t)s);
    if (keep < 0) return;
    rmem_cell_add(m, keep, seq);
    m->pos[keep] = keep_pos;
    m->src[keep] = keep;
    m->used = 1;
}

/* The cell of seq when its position lies in [p0, p1), else -1. */
static int32_t cell_in_range(const struct rmem *mem, int32_t seq, int32_t p0, int32_t p1) {
    if (!seq_valid(mem, seq)) return -1;
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    int32_t c = mem->meta.tail[seq];
    if (c < 0 || mem->meta.pos[c] < p0 || mem->meta.pos[c] >= p1) return -1;
    return c;
}

/* The attention part of a shift (d = 0: add delta; d >= 2: divide by d): the rows in [p0, p1)
 * of seq, or of every sequence sharing cell c when c >= 0, all of them or none. */
static bool attn_shift(struct rmem *mem, int32_t seq, int32_t c, int32_t p0, int32_t p1,
                       int32_t delta, int d) {
    const struct rmem_meta *m = &mem->meta;
    if (c < 0) return rmem_kv_seqs_shift(mem->kv, &seq, 1, p0, p1, delta, d);
    uint32_t n = 0;
    for (int32_t s = m->first[c]; s >= 0; s = m->next[s]) n++;
    int32_t *seqs = malloc(sizeof *seqs * n);
    if (!seqs) {
        rcore_error_set("memory: out of memory for a shift of %u sequences", n);
        return false;
    }
    n = 0;
    for (int32_t s = m->first[c]; s >= 0; s = m->next[s]) seqs[n++] = s;
    const bool ok = rmem_kv_seqs_shift(mem->kv, seqs, n, p0, p1, delta, d);
    free(seqs);
    return ok;
}

bool rmem_seq_add(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    struct rmem_meta *m = &mem->meta;
    if (delta == 0 || !seq_valid(mem, seq)) return true;
    int32_t c = cell_in_range(mem, seq, p0, p1);
    const bool drop = c >= 0 && (int64_t)m->pos[c] + delta < 0;
    if (mem->kv && !drop && !attn_shift(mem, seq, c, p0, p1, delta, 0)) return false;
    if (c < 0) return true;
    /* the snapshots of every sequence sharing the state move with it */
    for (int32_t s = m->first[c]; s >= 0; s = m->next[s])
        rmem_snap_shift(mem, s, p0 < 0 ? 0 : p0, p1 < 0 ? INT32_MAX : p1, delta);
    if (drop) {
        while (m->first[c] >= 0) {
            const int32_t s = m->first[c];
            rmem_snap_drop_seq(mem, s);
            rmem_cell_del(m, s);
            if (mem->kv) attn_follow(mem, s);
        }
        rmem_cell_free(m, c);
        return true;
    }
    const int64_t moved = (int64_t)m->pos[c] + delta;
    m->pos[c] = moved > INT32_MAX ? INT32_MAX : (int32_t)moved;
    return true;
}

bool rmem_seq_div(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int d) {
    if (d <= 1 || !seq_valid(mem, seq)) return true;
    int32_t c = cell_in_range(mem, seq, p0, p1);
    if (mem->kv && !attn_shift(mem, seq, c, p0, p1, 0, d)) return false;
    if (c < 0) return true;
    for (int32_t s = mem->meta.first[c]; s >= 0; s = mem->meta.next[s])
        rmem_snap_div(mem, s, p0 < 0 ? 0 : p0, p1 < 0 ? INT32_MAX : p1, d);
    mem->meta.pos[c] /= d;
    return true;
}

int32_t rmem_seq_pos_min(const struct rmem *mem, int32_t seq) {
    const int32_t oldest = rmem_snap_pos_min(mem, seq), pos = rmem_seq_pos_max(mem, seq);
    return oldest >= 0 && oldest < pos ? oldest : pos;
}

int32_t rmem_seq_pos_max(const struct rmem *mem, int32_t seq) {
    if (!seq_valid(mem, seq) || mem->meta.tail[seq] < 0) return -1;
    return mem->meta.pos[mem->meta.tail[seq]];
}

bool rmem_can_shift(const struct rmem *mem) {
    return !mem->kv || rmem_kv_can_shift(mem->kv);
}

int32_t rmem_seq_tail(const struct rmem *mem, int32_t seq) {
    return seq_valid(mem, seq) ? mem->meta.tail[seq] : -1;
}

/* ---- placing a ubatch -------------------------------------------------------------------- */

static void next_stamp(struct rmem *mem) {
    if (++mem->stamp == 0) { /* wrapped: old marks could look current */
        memset(mem->seq_stamp, 0, sizeof(uint32_t) * mem->n_seq_max);
        memset(mem->cell_stamp, 0, sizeof(uint32_t) * mem->size);
        mem->stamp = 1;
    }
}

static void copy_rows(struct rmem *mem, uint32_t dst, uint32_t src) {
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        size_t kb = mem->k_row_bytes[il], vb = mem->v_row_bytes[il];
        if (kb) memcpy(mem->k[il] + dst * kb, mem->k[il] + src * kb, kb);
        if (vb) memcpy(mem->v[il] + dst * vb, mem->v[il] + src * vb, vb);
    }
}

static void swap_row(uint8_t *a, uint8_t *b, uint8_t *tmp, size_t n) {
    memcpy(tmp, a, n);
    memcpy(a, b, n);
    memcpy(b, tmp, n);
}

static void swap_rows(struct rmem *mem, uint32_t a, uint32_t b) {
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        size_t kb = mem->k_row_bytes[il], vb = mem->v_row_bytes[il];
        if (kb) swap_row(mem->k[il] + a * kb, mem->k[il] + b * kb, mem->row_tmp, kb);
        if (vb) swap_row(mem->v[il] + a * vb, mem->v[il] + b * vb, mem->row_tmp, vb);
    }
}

/* Points the tails of every sequence in cell c's list at c (after the list moved there). */
static void retarget(struct rmem_meta *m, int32_t c) {
    for (int32_t s = m->first[c]; s >= 0; s = m->next[s]) m->tail[s] = c;
}

/* Moves in-use cell a to free cell b, rows and all. */
static void move_cell(struct rmem *mem, int32_t a, int32_t b) {
    struct rmem_meta *m = &mem->meta;
    m->pos[b] = m->pos[a];
    m->first[b] = m->first[a];
    m->n_memb[b] = m->n_memb[a];
    m->src[b] = b;
    m->pos[a] = -1;
    m->first[a] = -1;
    m->n_memb[a] = 0;
    m->src[a] = -1;
    retarget(m, b);
    if (!mem->dry) copy_rows(mem, (uint32_t)b, (uint32_t)a);
}

/* Exchanges two in-use cells, rows and all. */
static void swap_cells(struct rmem *mem, int32_t a, int32_t b) {
    struct rmem_meta *m = &mem->meta;
    int32_t t;
    t = m->pos[a], m->pos[a] = m->pos[b], m->pos[b] = t;
    t = m->first[a], m->first[a] = m->first[b], m->first[b] = t;
    t = m->n_memb[a], m->n_memb[a] = m->n_memb[b], m->n_memb[b] = t;
    m->src[a] = a;
    m->src[b] = b;
    retarget(m, a);
    retarget(m, b);
    if (!mem->dry) swap_rows(mem, (uint32_t)a, (uint32_t)b);
}

/* The first cell at or after *from outside [h, h+n) of the given kind, or -1. */
static int32_t find_outside(const struct rmem *mem, uint32_t *from, uint32_t h, uint32_t n,
                            uint8_t kind) {
    for (; *from < mem->size; (*from)++) {
        uint32_t c = *from;
        if (c >= h && c < h + n) continue;
        if (mem->kind[c] == kind) return (int32_t)(*from)++;
    }
    return -1;
}

/* Chooses the window [h, h+n) for the block: fewest cells to evict first, then most streams
 * whose state is already in its slot (no copy in the gather), then lowest h. */
static uint32_t choose_window(struct rmem *mem, uint32_t n) {
    struct rmem_meta *m = &mem->meta;
    uint32_t size = mem->size;

    /* stream s stays in place exactly when the window starts at lead_src[s] - s */
    for (uint32_t s = 0; s < n; s++) {
        int32_t c = mem->lead_src[s];
        if (c >= (int32_t)s && mem->kind[c] == KIND_OWN && (uint32_t)c - s + n <= size)
            mem->votes[(uint32_t)c - s]++;
    }
    uint32_t bad = 0;
    for (uint32_t c = 0; c < n; c++) bad += mem->kind[c] == KIND_BAD;

    uint32_t best = 0;
    int64_t best_score = INT64_MAX;
    for (uint32_t h = 0; h + n <= size; h++) {
        int64_t score = (int64_t)bad * (int64_t)(n + 1) - mem->votes[h];
        if (score < best_score) {
            best_score = score;
            best = h;
        }
        if (h + n < size) bad += (mem->kind[h + n] == KIND_BAD) - (mem->kind[h] == KIND_BAD);
    }
    for (uint32_t s = 0; s < n; s++) { /* leave votes zeroed for the next call */
        int32_t c = mem->lead_src[s];
        if (c >= (int32_t)s && (uint32_t)c - s + n <= size) mem->votes[(uint32_t)c - s] = 0;
    }
    (void)m;
    return best;
}

bool rmem_find_slot(struct rmem *mem, const struct rbatch_ubatch *ub) {
    struct rmem_meta *m = &mem->meta;
    const uint32_t n = ub->n_seqs, nst = ub->n_seq_tokens;

    if (n == 0 || nst == 0 || ub->n_tokens != n * nst) {
        rcore_error_set("find_slot: the ubatch is not an equal split (%u tokens, %u streams of %u)",
                        ub->n_tokens, n, nst);
        return false;
    }
    if (n > mem->size) {
        rcore_error_set("no room: the ubatch has %u sequences, the memory has %u cells", n,
                        mem->size);
        return false;
    }

    /* Mark the ubatch's sequences and count, per cell, how many of them it holds. Nothing is
       changed until every check has passed. */
    next_stamp(mem);
    const uint32_t stamp = mem->stamp;
    for (uint32_t s = 0; s < n; s++) {
        const uint32_t t0 = s * nst;
        const int32_t *ids = ub->seq_id[t0];
        const int32_t lead_tail = seq_valid(mem, ids[0]) ? m->tail[ids[0]] : -1;
        for (int32_t j = 0; j < ub->n_seq_id[t0]; j++) {
            int32_t q = ids[j];
            if (!seq_valid(mem, q)) {
                rcore_error_set("find_slot: sequence id %d is out of range 0..%u", q,
                                mem->n_seq_max - 1);
                return false;
            }
            if (mem->seq_stamp[q] == stamp) {
                rcore_error_set("find_slot: sequence %d is in two streams of the ubatch", q);
                return false;
            }
            if (m->tail[q] != lead_tail) {
                rcore_error_set("find_slot: sequences %d and %d of one stream hold different "
                                "states",
                                ids[0], q);
                return false;
            }
            mem->seq_stamp[q] = stamp;
            int32_t c = m->tail[q];
            if (c >= 0) {
                if (mem->cell_stamp[c] != stamp) {
                    mem->cell_stamp[c] = stamp;
                    mem->cell_in_ub[c] = 0;
                }
                mem->cell_in_ub[c]++;
            }
        }
        mem->lead_src[s] = lead_tail;
    }

    uint32_t n_bad = 0;
    for (uint32_t c = 0; c < mem->size; c++) {
        uint8_t k = KIND_FREE;
        if (m->n_memb[c] > 0)
            k = mem->cell_stamp[c] == stamp && mem->cell_in_ub[c] == m->n_memb[c] ? KIND_OWN
                                                                                  : KIND_BAD;
        mem->kind[c] = k;
        n_bad += k == KIND_BAD;
    }
    if (n_bad + n > mem->size) {
        rcore_error_set("no room: the ubatch needs %u cells for its sequences besides the %u "
                        "cells that other sequences hold, the memory has %u cells",
                        n, n_bad, mem->size);
        return false;
    }

    /* From here on the placement cannot fail. The previous block has been computed: its
       cells now hold their own states. */
    for (uint32_t i = 0; i < m->n; i++) {
        uint32_t c = m->head + i;
        m->src[c] = m->n_memb[c] > 0 ? (int32_t)c : -1;
    }

    const uint32_t h = choose_window(mem, n);

    /* Evict other sequences' states from the window: into a free cell outside it when there
       is one, else by swapping with a cell of the ubatch outside it (the room check
       guarantees one of the two). */
    uint32_t free_from = 0, own_from = 0;
    bool evicted = false;
    for (uint32_t c = h; c < h + n; c++) {
        if (mem->kind[c] != KIND_BAD) continue;
        int32_t t = find_outside(mem, &free_from, h, n, KIND_FREE);
        if (t >= 0) {
            move_cell(mem, (int32_t)c, t);
            mem->kind[c] = KIND_FREE;
        } else {
            t = find_outside(mem, &own_from, h, n, KIND_OWN);
            swap_cells(mem, (int32_t)c, t);
            mem->kind[c] = KIND_OWN;
        }
        mem->kind[t] = KIND_BAD;
        evicted = true;
    }
    if (evicted) /* states of the ubatch may have moved */
        for (uint32_t s = 0; s < n; s++) mem->lead_src[s] = m->tail[ub->seq_id[s * nst][0]];

    /* Every stream leaves its old cell (rows stay readable until the compute) ... */
    for (uint32_t s = 0; s < n; s++) {
        const uint32_t t0 = s * nst;
        for (int32_t j = 0; j < ub->n_seq_id[t0]; j++) rmem_seq_drop(m, ub->seq_id[t0][j]);
    }
    /* ... and takes slot h+s, gathering its state from where it was. */
    for (uint32_t s = 0; s < n; s++) {
        const uint32_t t0 = s * nst;
        const int32_t c = (int32_t)(h + s);
        for (int32_t j = 0; j < ub->n_seq_id[t0]; j++) rmem_cell_add(m, c, ub->seq_id[t0][j]);
        m->pos[c] = ub->pos[t0 + nst - 1];
        m->src[c] = mem->lead_src[s];
        m->used++;
    }
    m->head = h;
    m->n = n;
    return true;
}

uint32_t rmem_head(const struct rmem *mem) {
    return mem->meta.head;
}

uint32_t rmem_n(const struct rmem *mem) {
    return mem->meta.n;
}

int32_t rmem_s_copy(const struct rmem *mem, uint32_t i) {
    uint32_t c = mem->meta.head + i;
    int32_t src = mem->meta.src[c];
    return src >= 0 ? src : (int32_t)c;
}

float rmem_s_mask(const struct rmem *mem, uint32_t i) {
    return mem->meta.src[mem->meta.head + i] >= 0 ? 1.0f : 0.0f;
}

void *rmem_k_data(struct rmem *mem, uint32_t il) {
    return mem->k[il];
}

void *rmem_v_data(struct rmem *mem, uint32_t il) {
    return mem->v[il];
}

size_t rmem_k_row_bytes(const struct rmem *mem, uint32_t il) {
    return mem->k_row_bytes[il];
}

size_t rmem_v_row_bytes(const struct rmem *mem, uint32_t il) {
    return mem->v_row_bytes[il];
}

/* ---- checks ------------------------------------------------------------------------------ */

uint64_t rmem_fingerprint(const struct rmem *mem) {
    const struct rmem_meta *m = &mem->meta;
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, m->pos, sizeof(int32_t) * mem->size);
    XXH64_update(&st, m->src, sizeof(int32_t) * mem->size);
    XXH64_update(&st, m->n_memb, sizeof(int32_t) * mem->size);
    XXH64_update(&st, m->first, sizeof(int32_t) * mem->size);
    XXH64_update(&st, m->tail, sizeof(int32_t) * mem->n_seq_max);
    XXH64_update(&st, m->next, sizeof(int32_t) * mem->n_seq_max);
    XXH64_update(&st, m->prev, sizeof(int32_t) * mem->n_seq_max);
    uint32_t scalars[3] = {m->used, m->head, m->n};
    XXH64_update(&st, scalars, sizeof scalars);
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        if (mem->k[il]) XXH64_update(&st, mem->k[il], mem->k_row_bytes[il] * mem->size);
        if (mem->v[il]) XXH64_update(&st, mem->v[il], mem->v_row_bytes[il] * mem->size);
    }
    if (mem->kv) {
        const uint64_t attn = rmem_kv_fingerprint(mem->kv);
        XXH64_update(&st, &attn, sizeof attn);
    }
    return XXH64_digest(&st);
}

bool rmem_check(const struct rmem *mem) {
    const struct rmem_meta *m = &mem->meta;
    uint32_t used = 0;
    int64_t members = 0;
    if ((uint64_t)m->head + m->n > mem->size) {
        rcore_error_set("check: block [%u, %u) runs past %u cells", m->head, m->head + m->n,
                        mem->size);
        return false;
    }
    for (uint32_t c = 0; c < mem->size; c++) {
        int32_t count = 0, prev = -1;
        for (int32_t s = m->first[c]; s >= 0; s = m->next[s]) {
            if ((uint32_t)s >= mem->n_seq_max || m->tail[s] != (int32_t)c || m->prev[s] != prev ||
                ++count > m->n_memb[c]) {
                rcore_error_set("check: cell %u: member list broken at sequence %d", c, s);
                return false;
            }
            prev = s;
        }
        if (count != m->n_memb[c]) {
            rcore_error_set("check: cell %u lists %d sequences, counts %d", c, count, m->n_memb[c]);
            return false;
        }
        bool in_block = c >= m->head && c < m->head + m->n;
        if (count > 0) {
            used++;
            members += count;
            if (m->pos[c] < 0) {
                rcore_error_set("check: cell %u is in use with position %d", c, m->pos[c]);
                return false;
            }
            if (in_block ? (m->src[c] < -1 || m->src[c] >= (int32_t)mem->size)
                         : m->src[c] != (int32_t)c) {
                rcore_error_set("check: cell %u has source %d", c, m->src[c]);
                return false;
            }
        } else if (m->pos[c] != -1 || m->src[c] != -1) {
            rcore_error_set("check: free cell %u has position %d, source %d", c, m->pos[c],
                            m->src[c]);
            return false;
        }
    }
    if (used != m->used) {
        rcore_error_set("check: %u cells are in use, the count says %u", used, m->used);
        return false;
    }
    for (uint32_t s = 0; s < mem->n_seq_max; s++) {
        if (m->tail[s] < -1 || m->tail[s] >= (int32_t)mem->size) {
            rcore_error_set("check: sequence %u has tail %d", s, m->tail[s]);
            return false;
        }
        members -= m->tail[s] >= 0;
    }
    if (members != 0) {
        rcore_error_set("check: sequences with a tail and cell members differ by %lld",
                        (long long)members);
        return false;
    }
    if (!mem->kv) return true;
    if (!rmem_kv_check(mem->kv)) return false;
    /* a hybrid sequence's last attention row is its state's last token */
    for (uint32_t s = 0; s < mem->n_seq_max; s++) {
        const int32_t state = rmem_seq_pos_max(mem, (int32_t)s),
                      rows = rmem_kv_seq_pos_max(mem->kv, (int32_t)s);
        if (rows != state) {
            rcore_error_set("check: sequence %u: its attention rows end at position %d, its state "
                            "at %d",
                            s, rows, state);
            return false;
        }
    }
    return true;
}
