/* State streams of the recurrent memory: the whole memory or one sequence, written through a
 * rio_writer and read back through a rio_reader. The layout is in memory.h. */
#include "memory_impl.h"

#include <string.h>

#define STREAM_MAGIC   0x4d454d52u /* "RMEM" as little-endian bytes */
#define STREAM_VERSION 2u          /* 2 added the snapshot section; version 1 streams still read */
#define HYBRID_VERSION 3u          /* a hybrid memory's: version 2's, its attention part after */

/* ---- writing ----------------------------------------------------------------------------- */

/* Calls fn for each maximal run [c0, c1) of cells the stream holds, in cell order. */
static bool for_each_run(const struct rmem *mem, int32_t seq,
                         bool (*fn)(const struct rmem *, struct rio_writer *, uint32_t, uint32_t,
                                    const void *),
                         struct rio_writer *w, const void *arg) {
    const struct rmem_meta *m = &mem->meta;
    if (seq >= 0) {
        int32_t c = m->tail[seq];
        return c < 0 || fn(mem, w, (uint32_t)c, (uint32_t)c + 1, arg);
    }
    for (uint32_t c = 0; c < mem->size;) {
        if (m->n_memb[c] == 0) {
            c++;
            continue;
        }
        uint32_t end = c;
        while (end < mem->size && m->n_memb[end] > 0) end++;
        if (!fn(mem, w, c, end, arg)) return false;
        c = end;
    }
    return true;
}

struct rows_arg {
    const uint8_t *base;
    size_t row_bytes;
};

static bool write_rows(const struct rmem *mem, struct rio_writer *w, uint32_t c0, uint32_t c1,
                       const void *arg) {
    (void)mem;
    const struct rows_arg *a = arg;
    return rio_write(w, a->base + c0 * a->row_bytes, (c1 - c0) * a->row_bytes);
}

struct meta_arg {
    bool with_seqs;
};

static bool write_meta(const struct rmem *mem, struct rio_writer *w, uint32_t c0, uint32_t c1,
                       const void *arg) {
    const struct rmem_meta *m = &mem->meta;
    const struct meta_arg *a = arg;
    for (uint32_t c = c0; c < c1; c++) {
        if (!rio_write_i32(w, m->pos[c]) ||
            !rio_write_u32(w, a->with_seqs ? (uint32_t)m->n_memb[c] : 0))
            return false;
        if (!a->with_seqs) continue;
        for (int32_t s = m->first[c]; s >= 0; s = m->next[s])
            if (!rio_write_i32(w, s)) return false;
    }
    return true;
}

static bool write_layers(const struct rmem *mem, struct rio_writer *w, int32_t seq, bool is_v) {
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        struct rows_arg a = {is_v ? mem->v[il] : mem->k[il],
                             is_v ? mem->v_row_bytes[il] : mem->k_row_bytes[il]};
        if (!rio_write_u32(w, (uint32_t)(is_v ? mem->type_v : mem->type_k)) ||
            !rio_write_u64(w, a.row_bytes))
            return false;
        if (a.row_bytes && !for_each_run(mem, seq, write_rows, w, &a)) return false;
    }
    return true;
}

bool rmem_state_write(const struct rmem *mem, struct rio_writer *w, int32_t seq) {
    const struct rmem_meta *m = &mem->meta;
    if (seq >= 0 && (uint32_t)seq >= mem->n_seq_max) {
        rcore_error_set("state write: sequence id %d is out of range 0..%u", seq,
                        mem->n_seq_max - 1);
        return false;
    }
    if (seq < -1) seq = -1;
    uint32_t cell_count = seq < 0 ? m->used : (m->tail[seq] >= 0 ? 1u : 0u);
    struct meta_arg meta = {seq < 0};

    rio_writer_digest_reset(w);
    bool ok = rio_write_u32(w, STREAM_MAGIC) &&
              rio_write_u32(w, mem->kv ? HYBRID_VERSION : STREAM_VERSION) &&
              rio_write_u32(w, mem->n_layer) && rio_write_u32(w, cell_count) &&
              for_each_run(mem, seq, write_meta, w, &meta) && write_layers(mem, w, seq, false) &&
              write_layers(mem, w, seq, true) && rmem_snap_write(mem, w, seq) &&
              rio_write_u64(w, rio_writer_digest(w)) &&
              (!mem->kv || rmem_kv_state_write(mem->kv, w, seq));
    if (!ok) rcore_error_prefix("state write");
    return ok;
}

size_t rmem_state_size(const struct rmem *mem, int32_t seq) {
    struct rio_writer w;
    rio_writer_counter(&w);
    return rmem_state_write(mem, &w, seq) ? w.n_done : 0;
}

/* ---- reading ----------------------------------------------------------------------------- */

static bool read_header(const struct rmem *mem, struct rio_reader *r, uint32_t *cell_count,
                        uint32_t *version) {
    uint32_t magic, n_layer;
    uint32_t *v = version;
    if (!rio_read_u32(r, &magic) || !rio_read_u32(r, v) || !rio_read_u32(r, &n_layer) ||
        !rio_read_u32(r, cell_count))
        return false;
    if (magic != STREAM_MAGIC) {
        rcore_error_set("not a recur state stream (magic 0x%08x)", magic);
        return false;
    }
    if (*v != 1 && *v != STREAM_VERSION && *v != HYBRID_VERSION) {
        rcore_error_set("stream version %u, this build reads versions 1 to %u", *v, HYBRID_VERSION);
        return false;
    }
    if ((*v == HYBRID_VERSION) != (mem->kv != NULL)) {
        rcore_error_set(mem->kv ? "the stream has no attention part, the memory is a hybrid's"
                                : "the stream holds a hybrid model's attention part, the memory "
                                  "has none");
        return false;
    }
    if (n_layer != mem->n_layer) {
        rcore_error_set("the stream was made for %u layers, the memory has %u", n_layer,
                        mem->n_layer);
        return false;
    }
    return true;
}

/* Reads every layer's rows of one kind into cells [c0, c0+count). */
static bool read_layers(struct rmem *mem, struct rio_reader *r, uint32_t c0, uint32_t count,
                        bool is_v) {
    const char *kind = is_v ? "V" : "K";
    const enum rcore_type want_type = is_v ? mem->type_v : mem->type_k;
    for (uint32_t il = 0; il < mem->n_layer; il++) {
        uint32_t type;
        uint64_t row_bytes;
        const size_t want_bytes = is_v ? mem->v_row_bytes[il] : mem->k_row_bytes[il];
        if (!rio_read_u32(r, &type) || !rio_read_u64(r, &row_bytes)) return false;
        if (type != (uint32_t)want_type) {
            rcore_error_set("layer %u: %s rows are of type %s in the stream, %s in the memory", il,
                            kind, rcore_type_name((enum rcore_type)type),
                            rcore_type_name(want_type));
            return false;
        }
        if (row_bytes != want_bytes) {
            rcore_error_set("layer %u: %s rows are %llu bytes in the stream, %zu in the memory", il,
                            kind, (unsigned long long)row_bytes, want_bytes);
            return false;
        }
        uint8_t *base = is_v ? mem->v[il] : mem->k[il];
        if (want_bytes && !rio_read(r, base + c0 * want_bytes, count * want_bytes)) return false;
    }
    return true;
}

/* The snapshot section (version 2 on), into p; then the checksum. */
static bool read_tail(struct rmem *mem, struct rio_reader *r, uint32_t version, int32_t seq,
                      struct rmem_snap_pending *p);

static bool read_checksum(struct rio_reader *r) {
    const uint64_t want = rio_reader_digest(r);
    uint64_t got;
    if (!rio_read_u64(r, &got)) return false;
    if (got != want && !RCORE_FUZZING) {
        rcore_error_set("checksum mismatch (the stream is corrupt)");
        return false;
    }
    return true;
}

static bool read_whole(struct rmem *mem, struct rio_reader *r) {
    struct rmem_meta *m = &mem->meta;
    uint32_t cell_count, version;
    rio_reader_digest_reset(r);
    if (!read_header(mem, r, &cell_count, &version)) return false;
    if (cell_count > mem->size) {
        rcore_error_set("the stream holds %u cells, the memory has %u", cell_count, mem->size);
        return false;
    }
    rmem_clear(mem, false);
    int32_t *ids = mem->lead_src; /* scratch of n_seq_max entries */
    for (uint32_t c = 0; c < cell_count; c++) {
        int32_t pos;
        uint32_t n_seq;
        if (!rio_read_i32(r, &pos) || !rio_read_u32(r, &n_seq)) return false;
        if (pos < 0) {
            rcore_error_set("cell %u: position %d is invalid", c, pos);
            return false;
        }
        if (n_seq == 0 || n_seq > mem->n_seq_max) {
            rcore_error_set("cell %u lists %u sequences (1..%u expected)", c, n_seq,
                            mem->n_seq_max);
            return false;
        }
        for (uint32_t j = 0; j < n_seq; j++) {
            if (!rio_read_i32(r, &ids[j])) return false;
            if (ids[j] < 0 || (uint32_t)ids[j] >= mem->n_seq_max) {
                rcore_error_set("cell %u: sequence id %d is out of range 0..%u", c, ids[j],
                                mem->n_seq_max - 1);
                return false;
            }
            if (m->tail[ids[j]] >= 0) {
                rcore_error_set("cell %u: sequence %d already holds cell %d", c, ids[j],
                                m->tail[ids[j]]);
                return false;
            }
            m->tail[ids[j]] = (int32_t)c; /* claimed, so that a duplicate is caught */
        }
        /* adding prepends, so add backwards to keep the stream's order */
        for (uint32_t j = n_seq; j-- > 0;) {
            m->tail[ids[j]] = -1;
            rmem_cell_add(m, (int32_t)c, ids[j]);
        }
        m->pos[c] = pos;
        m->src[c] = (int32_t)c;
        m->used++;
    }
    struct rmem_snap_pending p;
    if (!read_layers(mem, r, 0, cell_count, false) || !read_layers(mem, r, 0, cell_count, true) ||
        !read_tail(mem, r, version, -1, &p))
        return false;
    rmem_snap_apply(mem, &p);
    return true;
}

static bool read_seq(struct rmem *mem, struct rio_reader *r, int32_t seq) {
    struct rmem_meta *m = &mem->meta;
    uint32_t cell_count, version;
    struct rmem_snap_pending p;
    rio_reader_digest_reset(r);
    if (!read_header(mem, r, &cell_count, &version)) return false;
    if (cell_count > 1) {
        rcore_error_set("a one-sequence stream holds at most 1 cell, this one holds %u",
                        cell_count);
        return false;
    }
    rmem_seq_drop(m, seq);
    if (cell_count == 0) {
        if (!read_layers(mem, r, 0, 0, false) || !read_layers(mem, r, 0, 0, true) ||
            !read_tail(mem, r, version, seq, &p))
            return false;
        rmem_snap_pending_free(&p); /* snapshots of no state: nothing to roll back */
        return true;
    }

    int32_t pos;
    uint32_t n_seq;
    if (!rio_read_i32(r, &pos) || !rio_read_u32(r, &n_seq)) return false;
    if (pos < 0) {
        rcore_error_set("cell 0: position %d is invalid", pos);
        return false;
    }
    if (n_seq != 0) {
        rcore_error_set("cell 0 lists %u sequences; a one-sequence stream lists none "
                        "(was it written for the whole memory?)",
                        n_seq);
        return false;
    }
    int32_t c = -1;
    for (uint32_t i = 0; i < mem->size && c < 0; i++)
        if (m->n_memb[i] == 0) c = (int32_t)i;
    if (c < 0) {
        rcore_error_set("no free cell for sequence %d (all %u cells are in use)", seq, mem->size);
        return false;
    }
    /* the cell stays free until the whole stream has checked out */
    if (!read_layers(mem, r, (uint32_t)c, 1, false) || !read_layers(mem, r, (uint32_t)c, 1, true) ||
        !read_tail(mem, r, version, seq, &p))
        return false;
    rmem_cell_add(m, c, seq);
    m->pos[c] = pos;
    m->src[c] = c;
    m->used++;
    rmem_snap_apply(mem, &p);
    return true;
}

static bool read_tail(struct rmem *mem, struct rio_reader *r, uint32_t version, int32_t seq,
                      struct rmem_snap_pending *p) {
    memset(p, 0, sizeof *p);
    if (version >= 2 && !rmem_snap_read(mem, r, seq, p)) return false;
    if (!read_checksum(r)) {
        rmem_snap_pending_free(p);
        return false;
    }
    return true;
}

/* A hybrid stream's two parts end at one position for every sequence read (seq, or all). */
static bool parts_agree(const struct rmem *mem, int32_t seq) {
    for (uint32_t s = 0; s < mem->n_seq_max; s++) {
        if (seq >= 0 && (int32_t)s != seq) continue;
        const int32_t state = rmem_seq_pos_max(mem, (int32_t)s),
                      rows = rmem_kv_seq_pos_max(mem->kv, (int32_t)s);
        if (state != rows) {
            rcore_error_set("sequence %u: the attention rows end at position %d, the state at %d",
                            s, rows, state);
            return false;
        }
    }
    return true;
}

bool rmem_state_read(struct rmem *mem, struct rio_reader *r, int32_t seq) {
    if (seq >= 0 && (uint32_t)seq >= mem->n_seq_max) {
        rcore_error_set("state read: sequence id %d is out of range 0..%u", seq,
                        mem->n_seq_max - 1);
        return false;
    }
    if (seq < -1) seq = -1;
    /* a state read replaces the history its snapshots came from: they go too */
    if (seq < 0)
        rmem_snap_drop_all(mem);
    else
        rmem_snap_drop_seq(mem, seq);
    if ((seq < 0 ? read_whole(mem, r) : read_seq(mem, r, seq)) &&
        (!mem->kv || (rmem_kv_state_read(mem->kv, r, seq) && parts_agree(mem, seq))))
        return true;

    if (seq < 0) {
        rmem_clear(mem, true);
    } else {
        rmem_seq_drop(&mem->meta, seq);
        if (mem->kv) rmem_kv_seq_rm(mem->kv, seq, -1, -1);
    }
    rcore_error_prefix("state read");
    return false;
}
