/*
 * Snapshots: a sequence's state saved at earlier positions, so that the tail of a sequence can
 * be removed (rollback: speculative decoding rejects drafts) where a recurrent state alone
 * could only be dropped whole.
 *
 * What is kept: for each sequence, the states after its last n_rollback positions, and the
 * state after every position p with (p + 1) % checkpoint_every == 0. The compute fills them:
 * rmem_snap_plan hands it, per ubatch token, the block to write the state after that token
 * into (the scan and conv write it on their way, so a ubatch of drafts costs one pass).
 *
 * Data structures (memory_impl.h): a block of f32 rows per snapshot with a reference count,
 * and per sequence an array of (block, position) sorted by position. A few entries per
 * sequence, each a whole model state (megabytes): linear scans are the right tool, and the
 * byte budget is kept by evicting the oldest blocks (creation order) first.
 */
#include <stdlib.h>
#include <string.h>

#include "memory_impl.h"

static size_t block_bytes(const struct rmem *mem) {
    return mem->snap_floats * sizeof(float);
}

/* A few dropped blocks are kept for the next snapshots: rollback takes and drops blocks at
 * every token, and a fresh block of megabytes comes from mmap and page-faults on first use. */
static uint32_t spare_max(const struct rmem *mem) {
    return mem->n_rollback + 2;
}

static void snap_unref(struct rmem *mem, struct rmem_snap *s) {
    if (--s->refs > 0) return;
    mem->snap_live--;
    if (mem->n_spare < spare_max(mem)) {
        s->next = mem->spare;
        mem->spare = s;
        mem->n_spare++;
        return;
    }
    free(s->data);
    free(s);
}

/* Removes entry i of seq's list. */
static void list_remove(struct rmem *mem, int32_t seq, uint32_t i) {
    struct rmem_snap_list *l = &mem->snaps[seq];
    snap_unref(mem, l->snap[i]);
    memmove(l->snap + i, l->snap + i + 1, (l->n - i - 1) * sizeof *l->snap);
    memmove(l->pos + i, l->pos + i + 1, (l->n - i - 1) * sizeof *l->pos);
    l->n--;
}

/* Appends (s, pos) to seq's list, first dropping entries at pos or later (a future that a new
 * decode of pos replaces). False when the list cannot grow (nothing changed but the drop). */
static bool list_push(struct rmem *mem, int32_t seq, struct rmem_snap *s, int32_t pos) {
    struct rmem_snap_list *l = &mem->snaps[seq];
    while (l->n > 0 && l->pos[l->n - 1] >= pos) list_remove(mem, seq, l->n - 1);
    if (l->n == l->cap) {
        const uint32_t cap = l->cap ? 2 * l->cap : 8;
        struct rmem_snap **snap = realloc(l->snap, cap * sizeof *snap);
        if (!snap) return false;
        l->snap = snap;
        int32_t *p = realloc(l->pos, cap * sizeof *p);
        if (!p) return false;
        l->pos = p;
        l->cap = cap;
    }
    l->snap[l->n] = s;
    l->pos[l->n] = pos;
    l->n++;
    s->refs++;
    return true;
}

void rmem_snap_drop_seq(struct rmem *mem, int32_t seq) {
    if (!mem->snaps || seq < 0 || (uint32_t)seq >= mem->n_seq_max) return;
    while (mem->snaps[seq].n > 0) list_remove(mem, seq, mem->snaps[seq].n - 1);
}

void rmem_snap_drop_all(struct rmem *mem) {
    if (!mem->snaps) return;
    for (uint32_t s = 0; s < mem->n_seq_max; s++) rmem_snap_drop_seq(mem, (int32_t)s);
}

void rmem_snap_free_all(struct rmem *mem) {
    if (!mem->snaps) return;
    rmem_snap_drop_all(mem);
    for (uint32_t s = 0; s < mem->n_seq_max; s++) {
        free(mem->snaps[s].snap);
        free(mem->snaps[s].pos);
    }
    free(mem->snaps);
    free(mem->snap_off);
    mem->snaps = NULL;
    mem->snap_off = NULL;
    while (mem->spare) {
        struct rmem_snap *next = mem->spare->next;
        free(mem->spare->data);
        free(mem->spare);
        mem->spare = next;
    }
    mem->n_spare = 0;
}

bool rmem_snap_config(struct rmem *mem, uint32_t n_rollback, uint32_t checkpoint_every,
                      size_t max_bytes) {
    rmem_snap_free_all(mem);
    mem->n_rollback = mem->checkpoint_every = 0;
    mem->snap_budget = 0;
    if (n_rollback == 0 && checkpoint_every == 0) return true;
    size_t *off = calloc(mem->n_layer, sizeof *off);
    struct rmem_snap_list *lists = calloc(mem->n_seq_max, sizeof *lists);
    if (!off || !lists) {
        free(off);
        free(lists);
        rcore_error_set("out of memory for the snapshot lists of %u sequences", mem->n_seq_max);
        return false;
    }
    size_t floats = 0;
    const size_t ks = rcore_type_size(mem->type_k), vs = rcore_type_size(mem->type_v);
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        off[il] = floats;
        floats += mem->k_row_bytes[il] / ks + mem->v_row_bytes[il] / vs;
    }
    mem->snaps = lists;
    mem->snap_off = off;
    mem->snap_floats = floats;
    mem->n_rollback = n_rollback;
    mem->checkpoint_every = checkpoint_every;
    mem->snap_budget = max_bytes;
    return true;
}

size_t rmem_snap_block_bytes(const struct rmem *mem) {
    size_t floats = 0;
    const size_t ks = rcore_type_size(mem->type_k), vs = rcore_type_size(mem->type_v);
    for (uint32_t il = 0; il < mem->n_layer; il++)
        floats += mem->k_row_bytes[il] / ks + mem->v_row_bytes[il] / vs;
    return floats * sizeof(float);
}

size_t rmem_snap_bytes_live(const struct rmem *mem) {
    return mem->snap_live * block_bytes(mem);
}

uint32_t rmem_snap_count(const struct rmem *mem, int32_t seq) {
    if (!mem->snaps || seq < 0 || (uint32_t)seq >= mem->n_seq_max) return 0;
    return mem->snaps[seq].n;
}

int32_t rmem_snap_pos(const struct rmem *mem, int32_t seq, uint32_t i) {
    return i < rmem_snap_count(mem, seq) ? mem->snaps[seq].pos[i] : -1;
}

float *rmem_snap_k(const struct rmem *mem, struct rmem_snap *s, uint32_t il) {
    return s->data + mem->snap_off[il];
}

float *rmem_snap_v(const struct rmem *mem, struct rmem_snap *s, uint32_t il) {
    return s->data + mem->snap_off[il] + mem->k_row_bytes[il] / rcore_type_size(mem->type_k);
}

/* Evicts the oldest block made before stamp `before` from every list. False when none. */
static bool evict_oldest(struct rmem *mem, uint64_t before) {
    struct rmem_snap *oldest = NULL;
    for (uint32_t s = 0; s < mem->n_seq_max; s++)
        for (uint32_t i = 0; i < mem->snaps[s].n; i++) {
            struct rmem_snap *b = mem->snaps[s].snap[i];
            if (b->stamp < before && (!oldest || b->stamp < oldest->stamp)) oldest = b;
        }
    if (!oldest) return false;
    for (uint32_t s = 0; s < mem->n_seq_max; s++) {
        struct rmem_snap_list *l = &mem->snaps[s];
        for (uint32_t i = l->n; i-- > 0;)
            if (l->snap[i] == oldest) {
                const bool last = oldest->refs == 1;
                list_remove(mem, (int32_t)s, i);
                if (last) return true;
            }
    }
    return true;
}

/* A new block within the budget (evicting blocks made before `keep_from`), NULL when the
 * budget cannot hold it or memory runs out. */
static struct rmem_snap *snap_new(struct rmem *mem, uint64_t keep_from) {
    while ((mem->snap_live + 1) * block_bytes(mem) > mem->snap_budget)
        if (!evict_oldest(mem, keep_from)) return NULL;
    struct rmem_snap *s = mem->spare;
    if (s) {
        mem->spare = s->next;
        mem->n_spare--;
    } else {
        s = calloc(1, sizeof *s);
        float *data = malloc(block_bytes(mem));
        if (!s || !data) {
            free(s);
            free(data);
            return NULL;
        }
        s->data = data;
    }
    s->refs = 0;
    s->next = NULL;
    s->stamp = UINT64_MAX; /* set when it joins its lists */
    mem->snap_live++;
    return s;
}

static bool is_checkpoint(const struct rmem *mem, int32_t pos) {
    return mem->checkpoint_every > 0 && ((int64_t)pos + 1) % mem->checkpoint_every == 0;
}

/* Drops seq's entries that are neither among the last n_rollback positions before and at
 * `last` nor checkpoints. */
static void trim(struct rmem *mem, int32_t seq, int32_t last) {
    struct rmem_snap_list *l = &mem->snaps[seq];
    for (uint32_t i = l->n; i-- > 0;)
        if (!((int64_t)l->pos[i] > (int64_t)last - mem->n_rollback) &&
            !is_checkpoint(mem, l->pos[i]))
            list_remove(mem, seq, i);
}

void rmem_snap_plan(struct rmem *mem, const struct rbatch_ubatch *ub, struct rmem_snap **dst) {
    for (uint32_t t = 0; t < ub->n_tokens; t++) dst[t] = NULL;
    if (!mem->snaps || ub->n_seq_tokens == 0) return;
    const uint32_t nst = ub->n_seq_tokens;
    const uint64_t first = mem->snap_stamp; /* blocks of this ubatch are never evicted by it */
    for (uint32_t s = 0; s < ub->n_seqs; s++) {
        /* newest positions first, so that a budget too small for all keeps the newest; they
           get their stamps (eviction order) in position order below */
        for (uint32_t j = nst; j-- > 0;) {
            const uint32_t t = s * nst + j;
            if (j + mem->n_rollback < nst && !is_checkpoint(mem, ub->pos[t])) continue;
            dst[t] = snap_new(mem, first);
        }
        for (uint32_t j = 0; j < nst; j++) {
            const uint32_t t = s * nst + j;
            struct rmem_snap *b = dst[t];
            if (!b) continue;
            b->stamp = mem->snap_stamp++;
            for (int32_t q = 0; q < ub->n_seq_id[t]; q++)
                list_push(mem, ub->seq_id[t][q], b, ub->pos[t]);
            if (b->refs == 0) { /* no list could take it */
                b->refs = 1;
                snap_unref(mem, b);
                dst[t] = NULL;
            }
        }
        const uint32_t t_last = s * nst + nst - 1;
        for (int32_t q = 0; q < ub->n_seq_id[t_last]; q++)
            trim(mem, ub->seq_id[t_last][q], ub->pos[t_last]);
        /* a block trim dropped at once is not filled (it no longer exists) */
        for (uint32_t j = 0; j < nst; j++) {
            const uint32_t t = s * nst + j;
            bool held = false;
            for (int32_t q = 0; dst[t] && q < ub->n_seq_id[t] && !held; q++) {
                const struct rmem_snap_list *l = &mem->snaps[ub->seq_id[t][q]];
                for (uint32_t i = 0; i < l->n && !held; i++) held = l->snap[i] == dst[t];
            }
            if (!held) dst[t] = NULL;
        }
    }
}

static void rows_from_block(struct rmem *mem, int32_t c, const float *block);

bool rmem_snap_restore(struct rmem *mem, int32_t seq, int32_t p0) {
    struct rmem_meta *m = &mem->meta;
    const struct rmem_snap_list *l = mem->snaps ? &mem->snaps[seq] : NULL;
    uint32_t i = l ? l->n : 0;
    while (i > 0 && l->pos[i - 1] >= p0) i--;
    if (i == 0) {
        rcore_error_set("seq_rm of sequence %d from position %d: no snapshot before it (%u kept)",
                        seq, p0, l ? l->n : 0);
        return false;
    }
    const uint32_t keep = i - 1;
    int32_t c = m->tail[seq];
    if (m->n_memb[c] > 1) { /* shared: the rolled-back state needs a cell of its own */
        int32_t free_cell = -1;
        for (uint32_t k = 0; k < mem->size && free_cell < 0; k++)
            if (m->n_memb[k] == 0) free_cell = (int32_t)k;
        if (free_cell < 0) {
            rcore_error_set("seq_rm of sequence %d from position %d: its state is shared and no "
                            "cell is free for the rolled-back one",
                            seq, p0);
            return false;
        }
        rmem_cell_del(m, seq);
        rmem_cell_add(m, free_cell, seq);
        m->used++;
        c = free_cell;
    }
    rows_from_block(mem, c, l->snap[keep]->data);
    m->pos[c] = l->pos[keep];
    m->src[c] = c;
    while (mem->snaps[seq].n > keep + 1) list_remove(mem, seq, mem->snaps[seq].n - 1);
    return true;
}

void rmem_snap_copy_seq(struct rmem *mem, int32_t src, int32_t dst) {
    if (!mem->snaps) return;
    rmem_snap_drop_seq(mem, dst);
    const struct rmem_snap_list *l = &mem->snaps[src];
    for (uint32_t i = 0; i < l->n; i++)
        if (!list_push(mem, dst, l->snap[i], l->pos[i])) break; /* out of memory: fewer kept */
}

/* Restores strictly increasing positions after a shift or division moved some entries,
 * keeping the newer entry of each pair out of order. */
static void keep_increasing(struct rmem *mem, int32_t seq) {
    struct rmem_snap_list *l = &mem->snaps[seq];
    for (uint32_t i = l->n; i-- > 1;)
        if (i < l->n && l->pos[i - 1] >= l->pos[i]) list_remove(mem, seq, i - 1);
}

void rmem_snap_shift(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    if (!mem->snaps) return;
    struct rmem_snap_list *l = &mem->snaps[seq];
    for (uint32_t i = l->n; i-- > 0;) {
        if (l->pos[i] < p0 || l->pos[i] >= p1) continue;
        const int64_t moved = (int64_t)l->pos[i] + delta;
        if (moved < 0)
            list_remove(mem, seq, i);
        else
            l->pos[i] = moved > INT32_MAX ? INT32_MAX : (int32_t)moved;
    }
    keep_increasing(mem, seq);
}

void rmem_snap_div(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int d) {
    if (!mem->snaps) return;
    struct rmem_snap_list *l = &mem->snaps[seq];
    for (uint32_t i = 0; i < l->n; i++)
        if (l->pos[i] >= p0 && l->pos[i] < p1) l->pos[i] /= d;
    keep_increasing(mem, seq); /* dividing can make positions equal */
}

int32_t rmem_snap_pos_min(const struct rmem *mem, int32_t seq) {
    return rmem_snap_count(mem, seq) > 0 ? mem->snaps[seq].pos[0] : -1;
}

/* ---- f32 state blocks in and out (the prefix cache) ----------------------------------------- */

const float *rmem_snap_data(const struct rmem *mem, int32_t seq, uint32_t i) {
    return i < rmem_snap_count(mem, seq) ? mem->snaps[seq].snap[i]->data : NULL;
}

/* Writes block (f32 rows) into cell c's rows. */
static void rows_from_block(struct rmem *mem, int32_t c, const float *block) {
    size_t off = 0;
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        const size_t kn = mem->k_row_bytes[il] / rcore_type_size(mem->type_k);
        const size_t vn = mem->v_row_bytes[il] / rcore_type_size(mem->type_v);
        if (kn)
            rcore_row_from_f32(mem->type_k, mem->k[il] + (size_t)c * mem->k_row_bytes[il],
                               block + off, kn);
        if (vn)
            rcore_row_from_f32(mem->type_v, mem->v[il] + (size_t)c * mem->v_row_bytes[il],
                               block + off + kn, vn);
        off += kn + vn;
    }
}

bool rmem_seq_state_f32(const struct rmem *mem, int32_t seq, float *dst) {
    if (seq < 0 || (uint32_t)seq >= mem->n_seq_max || mem->meta.tail[seq] < 0) {
        rcore_error_set("sequence %d holds no state", seq);
        return false;
    }
    const int32_t c = mem->meta.tail[seq];
    size_t off = 0;
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        const size_t kn = mem->k_row_bytes[il] / rcore_type_size(mem->type_k);
        const size_t vn = mem->v_row_bytes[il] / rcore_type_size(mem->type_v);
        if (kn)
            rcore_row_to_f32(mem->type_k, dst + off, mem->k[il] + (size_t)c * mem->k_row_bytes[il],
                             kn);
        if (vn)
            rcore_row_to_f32(mem->type_v, dst + off + kn,
                             mem->v[il] + (size_t)c * mem->v_row_bytes[il], vn);
        off += kn + vn;
    }
    return true;
}

/* The cell seq's state goes to: its current one when not shared, else a free one (-1 with
 * the error set when none is). */
static int32_t own_cell(const struct rmem *mem, int32_t seq) {
    const struct rmem_meta *m = &mem->meta;
    const int32_t c = m->tail[seq];
    if (c >= 0 && m->n_memb[c] <= 1) return c;
    for (uint32_t k = 0; k < mem->size; k++)
        if (m->n_memb[k] == 0) return (int32_t)k;
    rcore_error_set("set state of sequence %d: no cell is free", seq);
    return -1;
}

static bool set_state(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                      struct rio_reader *attn, bool upto) {
    struct rmem_meta *m = &mem->meta;
    if (seq < 0 || (uint32_t)seq >= mem->n_seq_max || pos < 0) {
        rcore_error_set("set state: sequence %d or position %d out of range", seq, pos);
        return false;
    }
    if (!mem->kv != !attn) { /* a block alone holds no attention rows: the parts would part */
        rcore_error_set("set state: sequence %d: %s", seq,
                        attn ? "attention rows for a recurrent memory"
                             : "a hybrid memory's recurrent state alone cannot restore its "
                               "attention rows");
        return false;
    }
    /* the cell first, then the attention rows (all or nothing): nothing fails after them */
    const int32_t own = own_cell(mem, seq);
    if (own < 0) return false;
    if (attn &&
        !(upto ? rmem_kv_state_read_upto : rmem_kv_state_read_ending)(mem->kv, attn, seq, pos))
        return false;
    if (m->tail[seq] != own) { /* a free cell: seq leaves the one it shared */
        if (m->tail[seq] >= 0) rmem_cell_del(m, seq);
        rmem_cell_add(m, own, seq);
        m->used++;
    }
    rmem_snap_drop_seq(mem, seq);
    rows_from_block(mem, own, src);
    m->pos[own] = pos;
    m->src[own] = own;
    return true;
}

bool rmem_seq_set_state_f32(struct rmem *mem, int32_t seq, const float *src, int32_t pos) {
    return set_state(mem, seq, src, pos, NULL, false);
}

/* The two hybrid setters: rows must be given (set_state alone would take a recurrent
 * memory's block without them). */
static bool set_hybrid(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                       struct rio_reader *attn, bool upto) {
    if (!attn) {
        rcore_error_set("set state: sequence %d: no attention rows given", seq);
        return false;
    }
    return set_state(mem, seq, src, pos, attn, upto);
}

bool rmem_seq_set_state_hybrid(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                               struct rio_reader *attn) {
    return set_hybrid(mem, seq, src, pos, attn, false);
}

bool rmem_seq_set_state_hybrid_upto(struct rmem *mem, int32_t seq, const float *src, int32_t pos,
                                    struct rio_reader *attn) {
    return set_hybrid(mem, seq, src, pos, attn, true);
}

/* ---- the snapshot section of state streams (memory_state.c) --------------------------------- */

static size_t block_floats(const struct rmem *mem) {
    return rmem_snap_block_bytes(mem) / sizeof(float);
}

bool rmem_snap_write(const struct rmem *mem, struct rio_writer *w, int32_t seq) {
    const uint32_t first = seq < 0 ? 0 : (uint32_t)seq, last = seq < 0 ? mem->n_seq_max : first + 1;
    uint32_t lists = 0;
    for (uint32_t s = first; s < last; s++) lists += rmem_snap_count(mem, (int32_t)s) > 0;
    if (!rio_write_u32(w, lists)) return false;
    for (uint32_t s = first; s < last; s++) {
        const uint32_t n = rmem_snap_count(mem, (int32_t)s);
        if (n == 0) continue;
        /* a one-sequence stream names no id: it is read into whichever sequence it is given */
        if (!rio_write_i32(w, seq < 0 ? (int32_t)s : -1) || !rio_write_u32(w, n) ||
            !rio_write_u64(w, block_floats(mem)))
            return false;
        for (uint32_t i = 0; i < n; i++)
            if (!rio_write_i32(w, mem->snaps[s].pos[i]) ||
                !rio_write(w, mem->snaps[s].snap[i]->data, block_bytes(mem)))
                return false;
    }
    return true;
}

void rmem_snap_pending_free(struct rmem_snap_pending *p) {
    for (uint32_t i = 0; i < p->n; i++) free(p->data[i]);
    free(p->data);
    free(p->seq);
    free(p->pos);
    memset(p, 0, sizeof *p);
}

/* Appends one entry to p; false when memory cannot be had. */
static bool pending_add(struct rmem_snap_pending *p, int32_t seq, int32_t pos, float *data) {
    if (p->n == p->cap) {
        const uint32_t cap = p->cap ? 2 * p->cap : 16;
        float **d = realloc(p->data, cap * sizeof *d);
        if (d) p->data = d;
        int32_t *sq = d ? realloc(p->seq, cap * sizeof *sq) : NULL;
        if (sq) p->seq = sq;
        int32_t *ps = sq ? realloc(p->pos, cap * sizeof *ps) : NULL;
        if (!ps) return false;
        p->pos = ps;
        p->cap = cap;
    }
    p->data[p->n] = data;
    p->seq[p->n] = seq;
    p->pos[p->n] = pos;
    p->n++;
    return true;
}

bool rmem_snap_read(const struct rmem *mem, struct rio_reader *r, int32_t seq,
                    struct rmem_snap_pending *out) {
    memset(out, 0, sizeof *out);
    uint32_t lists;
    if (!rio_read_u32(r, &lists)) return false;
    if (lists > (seq < 0 ? mem->n_seq_max : 1u)) {
        rcore_error_set("the stream has snapshots of %u sequences", lists);
        return false;
    }
    for (uint32_t l = 0; l < lists; l++) {
        int32_t id;
        uint32_t n;
        uint64_t floats;
        if (!rio_read_i32(r, &id) || !rio_read_u32(r, &n) || !rio_read_u64(r, &floats)) goto fail;
        if (seq < 0 ? (id < 0 || (uint32_t)id >= mem->n_seq_max) : id != -1) {
            rcore_error_set("snapshots of sequence %d do not belong in this stream", id);
            goto fail;
        }
        if (floats != block_floats(mem) || n > (1u << 20)) {
            rcore_error_set("sequence %d: %u snapshots of %llu floats (this memory's have %zu)", id,
                            n, (unsigned long long)floats, block_floats(mem));
            goto fail;
        }
        int32_t prev = -1;
        for (uint32_t i = 0; i < n; i++) {
            int32_t pos;
            if (!rio_read_i32(r, &pos)) goto fail;
            if (pos <= prev) {
                rcore_error_set("sequence %d: snapshot positions %d then %d do not increase", id,
                                prev, pos);
                goto fail;
            }
            prev = pos;
            float *data = malloc(rmem_snap_block_bytes(mem));
            if (!data || !pending_add(out, seq < 0 ? id : seq, pos, data)) {
                free(data);
                rcore_error_set("out of memory for the stream's snapshots");
                goto fail;
            }
            if (!rio_read(r, data, rmem_snap_block_bytes(mem))) goto fail;
        }
    }
    return true;
fail:
    rmem_snap_pending_free(out);
    return false;
}

void rmem_snap_apply(struct rmem *mem, struct rmem_snap_pending *p) {
    /* a memory without snapshots, or a smaller budget: those that do not fit are left out */
    for (uint32_t i = 0; mem->snaps && i < p->n; i++) {
        struct rmem_snap *b = snap_new(mem, mem->snap_stamp);
        if (!b) continue;
        free(b->data);
        b->data = p->data[i];
        p->data[i] = NULL;
        b->stamp = mem->snap_stamp++;
        if (!list_push(mem, p->seq[i], b, p->pos[i])) {
            b->refs = 1;
            snap_unref(mem, b);
        }
    }
    rmem_snap_pending_free(p);
}
