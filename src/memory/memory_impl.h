/* Private to src/memory: the layout of struct rmem, shared by memory.c, memory_batch.c,
 * memory_state.c, memory_compute.c and snapshot.c. */
#ifndef RECUR_MEMORY_IMPL_H
#define RECUR_MEMORY_IMPL_H

#include "memory.h"

/* The metadata arrays, grouped so that the transactional prepare can snapshot and restore
 * them with one memcpy each. */
struct rmem_meta {
    /* per cell */
    int32_t *pos;    /* last position folded in; -1 when free */
    int32_t *src;    /* block cells: row to gather from, -1 = zeros; other cells: themselves
                        when in use, -1 when free */
    int32_t *n_memb; /* sequences sharing the cell */
    int32_t *first;  /* first sequence of the cell's member list, -1 when free */
    /* per sequence */
    int32_t *tail; /* cell holding the state, -1 = none */
    int32_t *next; /* member list links (sequence ids), -1 = end */
    int32_t *prev;
    /* scalars */
    uint32_t used;
    uint32_t head;
    uint32_t n;
};

/* Snapshots (snapshot.c): a saved state is one block of f32 rows, every layer's K row then
 * its V row, shared by the lists of the sequences that hold it (seq_cp shares a block as it
 * shares a cell; a filled snapshot never changes, so sharing needs no copy on write). */
struct rmem_snap {
    float *data;
    uint32_t refs;          /* list entries pointing here */
    uint64_t stamp;         /* creation order: the oldest go first when the budget is full */
    struct rmem_snap *next; /* in the spare list */
};
/* One sequence's snapshots, in increasing position. The position lives in the entry, not in
 * the block, so that seq_add on one sequence does not move another's. */
struct rmem_snap_list {
    struct rmem_snap **snap;
    int32_t *pos;
    uint32_t n, cap;
};

struct rmem {
    uint32_t n_layer;
    uint32_t size;
    uint32_t n_seq_max;
    enum rcore_type type_k, type_v;
    size_t *k_row_bytes; /* [n_layer] */
    size_t *v_row_bytes;
    uint8_t **k; /* [n_layer] size rows each; NULL when the row is empty */
    uint8_t **v;
    size_t max_row_bytes;
    uint8_t *row_tmp; /* one row, for swapping cells */

    /* the compute's view of a layer (memory_compute.c) */
    float *gather;       /* gathered K rows then V rows of a block; grown on demand */
    size_t gather_cap;   /* floats */
    int64_t layer_open;  /* the layer between rmem_layer_begin and _end, -1 none */
    bool layer_in_place; /* that layer is computed on the block's own rows */

    struct rmem_meta meta;
    struct rmem_meta saved; /* snapshot for the dry run of rmem_init_batch */
    bool dry;               /* placing without touching rows (inside the prepare) */

    /* find_slot scratch, reused across calls; "stamps" avoid clearing per call */
    uint32_t stamp;
    uint32_t *seq_stamp;  /* [n_seq_max] == stamp: sequence is in the current ubatch */
    uint32_t *cell_stamp; /* [size] == stamp: cell_in_ub is valid for this call */
    int32_t *cell_in_ub;  /* [size] members of the cell that are in the ubatch */
    int32_t *votes;       /* [size] slots that would stay in place for a window start */
    uint8_t *kind;        /* [size] cell class during placement */
    int32_t *lead_src;    /* [n_seq_max] per stream: cell whose state it continues */
    int32_t *pos_max;     /* [n_seq_max] for batch validation */

    /* snapshots (snapshot.c); none unless rmem_snap_config turned them on */
    struct rmem_snap_list *snaps; /* [n_seq_max] */
    uint32_t n_rollback, checkpoint_every;
    size_t snap_budget;      /* most bytes of snapshot blocks alive */
    size_t snap_floats;      /* floats of one block */
    size_t snap_live;        /* blocks alive */
    uint64_t snap_stamp;     /* next creation stamp */
    size_t *snap_off;        /* [n_layer] float offset of layer il's K row; V follows it */
    struct rmem_snap *spare; /* dropped blocks kept for reuse (n_rollback + 2 at most) */
    uint32_t n_spare;

    struct rmem_kv *kv; /* a hybrid model's attention part (kv.c), NULL for a recurrent one */
};

/* Copies the cell and sequence metadata of a memory with `size` cells and n_seq sequences
 * (memory.c; the batch context's dry run saves and restores it). */
void rmem_meta_copy(struct rmem_meta *dst, const struct rmem_meta *src, uint32_t size,
                    uint32_t n_seq);

/* Hooks of the sequence operations into the snapshot lists (snapshot.c). */
void rmem_snap_drop_seq(struct rmem *mem, int32_t seq);
void rmem_snap_drop_all(struct rmem *mem);
void rmem_snap_copy_seq(struct rmem *mem, int32_t src, int32_t dst);
void rmem_snap_shift(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int32_t delta);
void rmem_snap_div(struct rmem *mem, int32_t seq, int32_t p0, int32_t p1, int d);
/* Puts seq back to its newest snapshot before position p0 (see rmem_seq_rm). */
bool rmem_snap_restore(struct rmem *mem, int32_t seq, int32_t p0);
int32_t rmem_snap_pos_min(const struct rmem *mem, int32_t seq);
void rmem_snap_free_all(struct rmem *mem);

/* The snapshot section of state streams (memory.h gives the layout). Reading collects the
 * snapshots aside; rmem_snap_apply installs them once the whole stream checked out (and frees
 * p), rmem_snap_pending_free drops them. seq: -1 for the whole memory, else the sequence a
 * one-sequence stream goes into. */
struct rmem_snap_pending {
    float **data;
    int32_t *seq, *pos;
    uint32_t n, cap;
};
bool rmem_snap_write(const struct rmem *mem, struct rio_writer *w, int32_t seq);
bool rmem_snap_read(const struct rmem *mem, struct rio_reader *r, int32_t seq,
                    struct rmem_snap_pending *out);
void rmem_snap_apply(struct rmem *mem, struct rmem_snap_pending *p);
void rmem_snap_pending_free(struct rmem_snap_pending *p);

static inline void rmem_cell_add(struct rmem_meta *m, int32_t c, int32_t s) {
    m->tail[s] = c;
    m->prev[s] = -1;
    m->next[s] = m->first[c];
    if (m->first[c] >= 0) m->prev[m->first[c]] = s;
    m->first[c] = s;
    m->n_memb[c]++;
}

static inline void rmem_cell_del(struct rmem_meta *m, int32_t s) {
    int32_t c = m->tail[s];
    if (m->prev[s] >= 0)
        m->next[m->prev[s]] = m->next[s];
    else
        m->first[c] = m->next[s];
    if (m->next[s] >= 0) m->prev[m->next[s]] = m->prev[s];
    m->tail[s] = m->next[s] = m->prev[s] = -1;
    m->n_memb[c]--;
}

/* Marks a cell free (after its last member left). */
static inline void rmem_cell_free(struct rmem_meta *m, int32_t c) {
    m->pos[c] = -1;
    m->src[c] = -1;
    m->used--;
}

/* Drops seq's state; frees the cell when it was the last one in it. */
static inline void rmem_seq_drop(struct rmem_meta *m, int32_t s) {
    int32_t c = m->tail[s];
    if (c < 0) return;
    rmem_cell_del(m, s);
    if (m->n_memb[c] == 0) rmem_cell_free(m, c);
}

/* ---- the attention part (kv.c, kv_state.c) ---- */

struct rmem_kv_seq {
    int32_t *pages; /* [cap_pages] the page table, ceil(n / page_rows) used */
    int32_t *pos;   /* [cap_pos] the tokens' positions, n used */
    uint32_t n, cap_pages, cap_pos;
};

struct rmem_kv {
    uint32_t n_layer, page_rows, n_pages, n_seq_max;
    uint32_t type_k, type_v;
    bool rope;
    rmem_kv_rotate_fn rotate;
    void *rotate_user;
    size_t *k_row_bytes, *v_row_bytes; /* [n_layer] */
    uint8_t **k, **v;                  /* [n_layer] n_pages * page_rows rows; NULL when empty */
    uint32_t *refs;                    /* [n_pages] page tables holding the page */
    int32_t *free_next;                /* [n_pages] the free pages' stack links */
    int32_t free_head;
    uint32_t n_free;
    struct rmem_kv_seq *seq; /* [n_seq_max] */
    /* the last placed ubatch: token t's row (page * page_rows + row) */
    int64_t *tok_row;
    uint32_t tok_cap, n_tok;
    /* prepare's scratch, per sequence */
    uint32_t *sim_n;
    uint8_t *sim_private;
    int32_t *sim_last;
};

static inline uint32_t rmem_kv_pages_for(const struct rmem_kv *kv, uint32_t n) {
    return (uint32_t)(((uint64_t)n + kv->page_rows - 1) / kv->page_rows);
}
/* A free page, its refs 1 (the caller checked n_free). */
int32_t rmem_kv_page_take(struct rmem_kv *kv);
void rmem_kv_page_unref(struct rmem_kv *kv, int32_t p);
/* Room in q's arrays for n tokens; false (error set, nothing else changed) when out of memory. */
bool rmem_kv_seq_reserve(struct rmem_kv *kv, struct rmem_kv_seq *q, uint32_t n);
/* Keeps q's first n tokens (n <= its count), giving back the pages past them. */
void rmem_kv_seq_truncate(struct rmem_kv *kv, struct rmem_kv_seq *q, uint32_t n);
/* Rows [0, n) of page src into page dst, every layer. */
void rmem_kv_page_copy(struct rmem_kv *kv, int32_t dst, int32_t src, uint32_t n);
/* The first of q's tokens at a position >= p (positions are non-decreasing). */
uint32_t rmem_kv_first_at(const struct rmem_kv_seq *q, int32_t p);

#endif
