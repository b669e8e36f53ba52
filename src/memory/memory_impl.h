/* Private to src/memory: the layout of struct rmem, shared by memory.c and memory_state.c. */
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
};

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

#endif
