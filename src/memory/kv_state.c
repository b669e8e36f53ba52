/*
 * State streams of the attention part (memory.h gives the layout). Pages are the unit, so that
 * a page that several listed sequences share is written once and comes back shared: a whole
 * memory that fits its budget always fits it again. Reading takes the whole stream into
 * buffers of its own and checks it (shape, ids, positions, page references, room, checksum)
 * before the memory changes at all, so a bad stream leaves the memory as it was.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "memory_impl.h"

#define KV_MAGIC   0x43564b52u /* "RKVC" */
#define KV_VERSION 1u

/* What a stream of seq lists: the sequences, and the pages their tables hold in order of first
 * appearance, each with the rows the tables use of it. */
struct listing {
    uint32_t n_seqs, n_pages;
    uint32_t limit; /* a one-sequence stream of its first limit tokens (UINT32_MAX: all) */
    int32_t *ids;   /* [n_seq_max] */
    int32_t *index; /* [memory pages] written index of a page, -1 when not written */
    int32_t *page;  /* [memory pages] memory page of a written index */
    uint32_t *used; /* [memory pages] rows in use, by written index */
};

static void listing_free(struct listing *l) {
    free(l->ids);
    free(l->index);
    free(l->page);
    free(l->used);
}

/* The tokens of q a listing writes. */
static uint32_t listed_n(const struct listing *l, const struct rmem_kv_seq *q) {
    return q->n < l->limit ? q->n : l->limit;
}

static bool list(const struct rmem_kv *kv, int32_t seq, uint32_t limit, struct listing *l) {
    memset(l, 0, sizeof *l);
    l->limit = limit;
    if (!(l->ids = malloc(sizeof(int32_t) * kv->n_seq_max)) ||
        !(l->index = malloc(sizeof(int32_t) * kv->n_pages)) ||
        !(l->page = malloc(sizeof(int32_t) * kv->n_pages)) ||
        !(l->used = calloc(kv->n_pages, sizeof(uint32_t)))) {
        listing_free(l);
        rcore_error_set("kv state: out of memory");
        return false;
    }
    if (seq >= 0)
        l->ids[l->n_seqs++] = seq;
    else
        for (uint32_t s = 0; s < kv->n_seq_max; s++)
            if (kv->seq[s].n) l->ids[l->n_seqs++] = (int32_t)s;
    for (uint32_t p = 0; p < kv->n_pages; p++) l->index[p] = -1;
    for (uint32_t i = 0; i < l->n_seqs; i++) {
        const struct rmem_kv_seq *q = &kv->seq[l->ids[i]];
        const uint32_t n = listed_n(l, q);
        for (uint32_t j = 0; j < rmem_kv_pages_for(kv, n); j++) {
            const int32_t p = q->pages[j];
            if (l->index[p] < 0) {
                l->index[p] = (int32_t)l->n_pages;
                l->page[l->n_pages++] = p;
            }
            const uint32_t rows = n - j * kv->page_rows;
            const uint32_t use = rows < kv->page_rows ? rows : kv->page_rows;
            if (use > l->used[l->index[p]]) l->used[l->index[p]] = use;
        }
    }
    return true;
}

static bool state_write(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq,
                        const struct listing *l) {
    rio_writer_digest_reset(w);
    bool ok = rio_write_u32(w, KV_MAGIC) && rio_write_u32(w, KV_VERSION) &&
              rio_write_u32(w, kv->n_layer) && rio_write_u32(w, kv->page_rows) &&
              rio_write_u32(w, l->n_seqs) && rio_write_u32(w, l->n_pages);
    for (uint32_t i = 0; ok && i < l->n_seqs; i++) {
        const struct rmem_kv_seq *q = &kv->seq[l->ids[i]];
        const uint32_t n = listed_n(l, q);
        ok = rio_write_i32(w, seq >= 0 ? -1 : l->ids[i]) && rio_write_u32(w, n) &&
             (n == 0 || rio_write(w, q->pos, sizeof(int32_t) * n));
        for (uint32_t j = 0; ok && j < rmem_kv_pages_for(kv, n); j++)
            ok = rio_write_u32(w, (uint32_t)l->index[q->pages[j]]);
    }
    for (uint32_t i = 0; ok && i < l->n_pages; i++) ok = rio_write_u32(w, l->used[i]);
    for (uint32_t il = 0; ok && il < kv->n_layer; il++) {
        const size_t kb = kv->k_row_bytes[il], vb = kv->v_row_bytes[il];
        ok = rio_write_u32(w, kv->type_k) && rio_write_u64(w, kb) && rio_write_u32(w, kv->type_v) &&
             rio_write_u64(w, vb);
        for (uint32_t i = 0; ok && kb && i < l->n_pages; i++)
            ok = rio_write(w, kv->k[il] + (size_t)l->page[i] * kv->page_rows * kb, l->used[i] * kb);
        for (uint32_t i = 0; ok && vb && i < l->n_pages; i++)
            ok = rio_write(w, kv->v[il] + (size_t)l->page[i] * kv->page_rows * vb, l->used[i] * vb);
    }
    return ok && rio_write_u64(w, rio_writer_digest(w));
}

static bool write_limited(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq,
                          uint32_t limit) {
    if (seq >= 0 && (uint32_t)seq >= kv->n_seq_max) {
        rcore_error_set("kv state write: sequence id %d is out of range 0..%u", seq,
                        kv->n_seq_max - 1);
        return false;
    }
    struct listing l;
    if (!list(kv, seq, limit, &l)) return false;
    const bool ok = state_write(kv, w, seq, &l);
    listing_free(&l);
    return ok;
}

bool rmem_kv_state_write(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq) {
    return write_limited(kv, w, seq, UINT32_MAX);
}

size_t rmem_kv_state_size(const struct rmem_kv *kv, int32_t seq) {
    struct rio_writer w;
    rio_writer_counter(&w);
    if (!rmem_kv_state_write(kv, &w, seq)) return 0;
    return w.n_done;
}

bool rmem_kv_state_write_prefix(const struct rmem_kv *kv, struct rio_writer *w, int32_t seq,
                                uint32_t n) {
    if (seq < 0 || (uint32_t)seq >= kv->n_seq_max || n > kv->seq[seq].n) {
        rcore_error_set("kv state write: the first %u tokens of sequence %d (it holds %u)", n, seq,
                        seq >= 0 && (uint32_t)seq < kv->n_seq_max ? kv->seq[seq].n : 0);
        return false;
    }
    return write_limited(kv, w, seq, n);
}

size_t rmem_kv_state_size_prefix(const struct rmem_kv *kv, int32_t seq, uint32_t n) {
    struct rio_writer w;
    rio_writer_counter(&w);
    if (!rmem_kv_state_write_prefix(kv, &w, seq, n)) return 0;
    return w.n_done;
}

/* ---- reading ------------------------------------------------------------------------------- */

/* A stream read aside: per listed sequence its id, count, positions and page indices (end to
 * end in pos and tab), per written page its rows in use, and per layer those rows of K and V,
 * pages end to end. */
struct pending {
    uint32_t n_seqs, n_pages;
    int32_t *id;
    uint32_t *n;
    uint32_t total, n_tab; /* tokens, and table entries, of all listed sequences */
    int32_t *pos;
    uint32_t *tab;
    uint32_t *used;   /* [n_pages] */
    uint32_t *refs;   /* [n_pages] table entries naming the page */
    size_t rows;      /* sum of used */
    uint8_t **k, **v; /* [n_layer] rows each */
};

static void pending_free(const struct rmem_kv *kv, struct pending *p) {
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        if (p->k) free(p->k[il]);
        if (p->v) free(p->v[il]);
    }
    free(p->k);
    free(p->v);
    free(p->id);
    free(p->n);
    free(p->pos);
    free(p->tab);
    free(p->used);
    free(p->refs);
}

static bool read_head(const struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                      struct pending *p) {
    uint32_t magic, version, n_layer, page_rows;
    if (!rio_read_u32(r, &magic) || !rio_read_u32(r, &version) || !rio_read_u32(r, &n_layer) ||
        !rio_read_u32(r, &page_rows) || !rio_read_u32(r, &p->n_seqs) ||
        !rio_read_u32(r, &p->n_pages))
        return false;
    if (magic != KV_MAGIC) {
        rcore_error_set("not an attention state stream (magic 0x%08x)", magic);
        return false;
    }
    if (version != KV_VERSION) {
        rcore_error_set("attention state version %u, this build reads version %u", version,
                        KV_VERSION);
        return false;
    }
    if (n_layer != kv->n_layer || page_rows != kv->page_rows) {
        rcore_error_set("the attention state was made for %u layers and pages of %u tokens, the "
                        "memory has %u and %u",
                        n_layer, page_rows, kv->n_layer, kv->page_rows);
        return false;
    }
    if (p->n_seqs > kv->n_seq_max || (seq >= 0 && p->n_seqs > 1)) {
        rcore_error_set("the attention state lists %u sequences, at most %u fit", p->n_seqs,
                        seq >= 0 ? 1u : kv->n_seq_max);
        return false;
    }
    if (p->n_pages > kv->n_pages) {
        rcore_error_set("the attention state holds %u pages, the memory has %u", p->n_pages,
                        kv->n_pages);
        return false;
    }
    /* every count below is checked against the memory's size before anything that size is
       allocated, so a corrupt count cannot ask for more memory than the budget */
    if (!(p->id = calloc(p->n_seqs + 1, sizeof(int32_t))) ||
        !(p->n = calloc(p->n_seqs + 1, sizeof(uint32_t))) ||
        !(p->used = calloc(p->n_pages + 1, sizeof(uint32_t))) ||
        !(p->refs = calloc(p->n_pages + 1, sizeof(uint32_t)))) {
        rcore_error_set("kv state read: out of memory");
        return false;
    }
    return true;
}

static bool grow(void **a, size_t n, size_t size) {
    void *b = realloc(*a, n * size + 1);
    if (!b) {
        rcore_error_set("kv state read: out of memory");
        return false;
    }
    *a = b;
    return true;
}

static bool read_seqs(const struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                      struct pending *p) {
    const uint64_t capacity = (uint64_t)kv->n_pages * kv->page_rows;
    for (uint32_t i = 0; i < p->n_seqs; i++) {
        if (!rio_read_i32(r, &p->id[i]) || !rio_read_u32(r, &p->n[i])) return false;
        if (seq >= 0 ? p->id[i] != -1 : p->id[i] < 0 || (uint32_t)p->id[i] >= kv->n_seq_max) {
            rcore_error_set("attention state sequence %u: id %d (%s expected)", i, p->id[i],
                            seq >= 0 ? "-1 in a one-sequence stream" : "0..n_seq_max-1");
            return false;
        }
        for (uint32_t j = 0; j < i; j++)
            if (p->id[j] == p->id[i]) {
                rcore_error_set("attention state: sequence %d is listed twice", p->id[i]);
                return false;
            }
        const uint32_t n = p->n[i], np = rmem_kv_pages_for(kv, n);
        if (n > capacity) {
            rcore_error_set("attention state sequence %u: %u tokens, the memory holds %llu", i, n,
                            (unsigned long long)capacity);
            return false;
        }
        if (!grow((void **)&p->pos, (size_t)p->total + n, sizeof(int32_t)) ||
            !grow((void **)&p->tab, (size_t)p->n_tab + np, sizeof(uint32_t)))
            return false;
        int32_t *pos = p->pos + p->total;
        uint32_t *tab = p->tab + p->n_tab;
        if (n && !rio_read(r, pos, sizeof(int32_t) * n)) return false;
        for (uint32_t j = 0; j < n; j++)
            if (pos[j] < 0 || (j > 0 && pos[j] < pos[j - 1])) {
                rcore_error_set("attention state sequence %u: token %u at position %d (in order, "
                                ">= 0 expected)",
                                i, j, pos[j]);
                return false;
            }
        for (uint32_t j = 0; j < np; j++) {
            if (!rio_read_u32(r, &tab[j])) return false;
            if (tab[j] >= p->n_pages) {
                rcore_error_set("attention state sequence %u: page %u is %u, the stream has %u", i,
                                j, tab[j], p->n_pages);
                return false;
            }
            p->refs[tab[j]]++;
        }
        p->total += n;
        p->n_tab += np;
    }
    return true;
}

/* The pages' rows in use: each as many as the tables that hold it use at most, and every page
 * held by some table. */
static bool read_used(const struct rmem_kv *kv, struct rio_reader *r, struct pending *p) {
    uint32_t *want = calloc(p->n_pages + 1, sizeof(uint32_t));
    if (!want) {
        rcore_error_set("kv state read: out of memory");
        return false;
    }
    for (uint32_t i = 0, t = 0; i < p->n_seqs; i++)
        for (uint32_t j = 0; j < rmem_kv_pages_for(kv, p->n[i]); j++, t++) {
            const uint32_t rows = p->n[i] - j * kv->page_rows;
            const uint32_t use = rows < kv->page_rows ? rows : kv->page_rows;
            if (use > want[p->tab[t]]) want[p->tab[t]] = use;
        }
    bool ok = true;
    for (uint32_t i = 0; ok && i < p->n_pages; i++) {
        ok = rio_read_u32(r, &p->used[i]);
        if (ok && p->refs[i] == 0) {
            rcore_error_set("attention state page %u: no listed sequence holds it", i);
            ok = false;
        } else if (ok && p->used[i] != want[i]) {
            rcore_error_set("attention state page %u: %u rows in use, its tables use %u", i,
                            p->used[i], want[i]);
            ok = false;
        }
        p->rows += p->used[i];
    }
    free(want);
    return ok;
}

static bool read_rows(const struct rmem_kv *kv, struct rio_reader *r, struct pending *p) {
    if (!(p->k = calloc(kv->n_layer, sizeof(uint8_t *))) ||
        !(p->v = calloc(kv->n_layer, sizeof(uint8_t *)))) {
        rcore_error_set("kv state read: out of memory");
        return false;
    }
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        uint32_t tk, tv;
        uint64_t kb, vb;
        if (!rio_read_u32(r, &tk) || !rio_read_u64(r, &kb) || !rio_read_u32(r, &tv) ||
            !rio_read_u64(r, &vb))
            return false;
        if (tk != kv->type_k || tv != kv->type_v) {
            rcore_error_set("layer %u: attention rows of types %u/%u in the stream, %u/%u in the "
                            "memory",
                            il, tk, tv, kv->type_k, kv->type_v);
            return false;
        }
        if (kb != kv->k_row_bytes[il] || vb != kv->v_row_bytes[il]) {
            rcore_error_set("layer %u: K/V rows of %llu/%llu bytes in the stream, %zu/%zu in the "
                            "memory",
                            il, (unsigned long long)kb, (unsigned long long)vb, kv->k_row_bytes[il],
                            kv->v_row_bytes[il]);
            return false;
        }
        if ((kb && p->rows && !(p->k[il] = malloc(p->rows * kb))) ||
            (vb && p->rows && !(p->v[il] = malloc(p->rows * vb)))) {
            rcore_error_set("kv state read: out of memory for layer %u's %zu rows", il, p->rows);
            return false;
        }
        if ((p->k[il] && !rio_read(r, p->k[il], p->rows * kb)) ||
            (p->v[il] && !rio_read(r, p->v[il], p->rows * vb)))
            return false;
    }
    return true;
}

/* Pages free once the sequences the stream replaces are dropped. */
static uint64_t free_after(const struct rmem_kv *kv, int32_t seq) {
    if (seq < 0) return kv->n_pages;
    const struct rmem_kv_seq *q = &kv->seq[seq];
    uint64_t n = kv->n_free;
    for (uint32_t i = 0; i < rmem_kv_pages_for(kv, q->n); i++) n += kv->refs[q->pages[i]] == 1;
    return n;
}

/* Installs the checked stream; the arrays are grown first, and nothing fails after them. */
static bool apply(struct rmem_kv *kv, int32_t seq, const struct pending *p) {
    int32_t *page = malloc(sizeof(int32_t) * (p->n_pages + 1));
    if (!page) {
        rcore_error_set("kv state read: out of memory");
        return false;
    }
    for (uint32_t i = 0; i < p->n_seqs; i++)
        if (!rmem_kv_seq_reserve(kv, &kv->seq[seq >= 0 ? seq : p->id[i]], p->n[i])) {
            free(page);
            return false;
        }
    if (seq >= 0)
        rmem_kv_seq_truncate(kv, &kv->seq[seq], 0);
    else
        rmem_kv_clear(kv, false);
    size_t at = 0;
    for (uint32_t i = 0; i < p->n_pages; i++) {
        page[i] = rmem_kv_page_take(kv);
        kv->refs[page[i]] = p->refs[i];
        const size_t dst = (size_t)page[i] * kv->page_rows;
        for (uint32_t il = 0; il < kv->n_layer; il++) {
            const size_t kb = kv->k_row_bytes[il], vb = kv->v_row_bytes[il];
            if (p->k[il]) memcpy(kv->k[il] + dst * kb, p->k[il] + at * kb, p->used[i] * kb);
            if (p->v[il]) memcpy(kv->v[il] + dst * vb, p->v[il] + at * vb, p->used[i] * vb);
        }
        at += p->used[i];
    }
    uint32_t tok = 0, t = 0;
    for (uint32_t i = 0; i < p->n_seqs; i++) {
        struct rmem_kv_seq *q = &kv->seq[seq >= 0 ? seq : p->id[i]];
        for (uint32_t j = 0; j < rmem_kv_pages_for(kv, p->n[i]); j++)
            q->pages[j] = page[p->tab[t++]];
        if (p->n[i]) memcpy(q->pos, p->pos + tok, sizeof(int32_t) * p->n[i]);
        q->n = p->n[i];
        tok += p->n[i];
    }
    free(page);
    return true;
}

bool rmem_kv_state_read(struct rmem_kv *kv, struct rio_reader *r, int32_t seq) {
    return rmem_kv_state_read_ending(kv, r, seq, INT32_MIN);
}

/* A one-sequence stream read aside, cut to its tokens at positions up to last_pos (a prefix of
 * the stream: its first pages, the last one's rows in use shortened; the rows read stay in the
 * buffers, unused). Its pages must be listed in table order, as rmem_kv_state_write writes one
 * sequence. */
static bool cut_pending(const struct rmem_kv *kv, struct pending *p, int32_t last_pos) {
    if (p->n_seqs != 1) return true;
    uint32_t c = 0;
    while (c < p->n[0] && p->pos[c] <= last_pos) c++;
    if (c == p->n[0]) return true;
    const uint32_t np = rmem_kv_pages_for(kv, c);
    for (uint32_t j = 0; j < p->n_tab; j++)
        if (p->tab[j] != j) {
            rcore_error_set("attention state: page %u of the sequence is page %u of the stream; "
                            "a stream cut to its first tokens lists them in order",
                            j, p->tab[j]);
            return false;
        }
    p->n[0] = p->total = c;
    p->n_tab = p->n_pages = np;
    if (np) p->used[np - 1] = c - (np - 1) * kv->page_rows;
    p->rows = 0;
    for (uint32_t i = 0; i < np; i++) p->rows += p->used[i];
    return true;
}

static bool read_stream(struct rmem_kv *kv, struct rio_reader *r, int32_t seq, int32_t last_pos,
                        bool cut) {
    if (seq >= 0 && (uint32_t)seq >= kv->n_seq_max) {
        rcore_error_set("kv state read: sequence id %d is out of range 0..%u", seq,
                        kv->n_seq_max - 1);
        return false;
    }
    struct pending p;
    memset(&p, 0, sizeof p);
    rio_reader_digest_reset(r);
    bool ok = read_head(kv, r, seq, &p) && read_seqs(kv, r, seq, &p) && read_used(kv, r, &p) &&
              read_rows(kv, r, &p);
    if (ok) {
        const uint64_t digest = rio_reader_digest(r);
        uint64_t stored;
        ok = rio_read_u64(r, &stored);
        if (ok && stored != digest) {
            rcore_error_set("attention state: checksum mismatch (the stream is corrupt)");
            ok = false;
        }
    }
    if (ok && cut) ok = cut_pending(kv, &p, last_pos);
    if (ok && last_pos != INT32_MIN) {
        const int32_t have = p.n_seqs == 1 && p.n[0] > 0 ? p.pos[p.n[0] - 1] : -1;
        if (p.n_seqs > 1 || have != last_pos) {
            rcore_error_set("attention state: its rows end at position %d, %d was expected", have,
                            last_pos);
            ok = false;
        }
    }
    if (ok && p.n_pages > free_after(kv, seq)) {
        rcore_error_set("attention state: needs %u pages of %u tokens, %llu would be free",
                        p.n_pages, kv->page_rows, (unsigned long long)free_after(kv, seq));
        ok = false;
    }
    ok = ok && apply(kv, seq, &p);
    pending_free(kv, &p);
    return ok;
}

bool rmem_kv_state_read_ending(struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                               int32_t last_pos) {
    return read_stream(kv, r, seq, last_pos, false);
}

bool rmem_kv_state_read_upto(struct rmem_kv *kv, struct rio_reader *r, int32_t seq,
                             int32_t last_pos) {
    if (seq < 0) {
        rcore_error_set("kv state read: a stream cut to a position is one sequence's");
        return false;
    }
    return read_stream(kv, r, seq, last_pos, true);
}
