/*
 * The attention part of a hybrid memory (see memory.h, "the attention part"): the K and V rows
 * of every token of every sequence, for the model's attention layers.
 *
 * Layout: a pool of n_pages pages of page_rows token rows. Per layer one K buffer and one V
 * buffer of n_pages * page_rows rows, so a page of layer il is one contiguous run of rows and
 * row r of page p sits at row p * page_rows + r of every layer. Per sequence:
 *  - a page table (page ids; token i of the sequence is row i % page_rows of page
 *    pages[i / page_rows]);
 *  - the positions of its n tokens, its own array, non-decreasing.
 * Per page, refs counts the page tables that hold it.
 *
 * Why pages with counted references: seq_cp forks a conversation by copying the source's page
 * table and counting each page once more, never a row, as the recurrent part shares a cell.
 * A sequence appending to its last page while another table holds that page gets a copy of it
 * first (copy on write of at most one page per fork); whole pages are never written again once
 * full, so sharing them needs nothing more. Positions live with the sequence, not the page, so
 * that seq_add on one sequence does not move another's: without RoPE the rows do not depend on
 * positions; with it, a shift copies the shared pages it moves and rotates the copies'
 * K rows again (kv_shift.c).
 *
 * Why tails only: a sequence of a hybrid model is also a recurrent state, which can go back to
 * a snapshot but cannot drop tokens from its middle; the rows of a prefix are what the next
 * token attends to. So seq_rm cuts a sequence at a position and keeps what comes before.
 */
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "memory_impl.h"

/* ---- creation ------------------------------------------------------------------------------ */

struct rmem_kv *rmem_kv_create(const struct rmem_kv_params *p) {
    if (!p || p->n_layer == 0 || !p->k_row_bytes || !p->v_row_bytes || p->page_rows == 0 ||
        p->n_pages == 0 || p->n_seq_max == 0) {
        rcore_error_set("kv: %s", !p                                   ? "no parameters"
                                  : p->n_layer == 0                    ? "n_layer is 0"
                                  : !p->k_row_bytes || !p->v_row_bytes ? "no row sizes"
                                  : p->page_rows == 0                  ? "page_rows is 0"
                                  : p->n_pages == 0                    ? "n_pages is 0"
                                                                       : "n_seq_max is 0");
        return NULL;
    }
    if ((uint64_t)p->n_pages * p->page_rows > INT32_MAX) {
        rcore_error_set("kv: %u pages of %u rows is more rows than 2^31", p->n_pages, p->page_rows);
        return NULL;
    }
    struct rmem_kv *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->n_layer = p->n_layer;
    kv->page_rows = p->page_rows;
    kv->n_pages = p->n_pages;
    kv->n_seq_max = p->n_seq_max;
    kv->type_k = p->type_k;
    kv->type_v = p->type_v;
    kv->rope = p->rope;
    kv->rotate = p->rotate;
    kv->rotate_user = p->rotate_user;
    const size_t rows = (size_t)p->n_pages * p->page_rows;
    if (!(kv->k_row_bytes = calloc(p->n_layer, sizeof(size_t))) ||
        !(kv->v_row_bytes = calloc(p->n_layer, sizeof(size_t))) ||
        !(kv->k = calloc(p->n_layer, sizeof(uint8_t *))) ||
        !(kv->v = calloc(p->n_layer, sizeof(uint8_t *))) ||
        !(kv->refs = calloc(p->n_pages, sizeof(uint32_t))) ||
        !(kv->free_next = calloc(p->n_pages, sizeof(int32_t))) ||
        !(kv->seq = calloc(p->n_seq_max, sizeof(struct rmem_kv_seq))) ||
        !(kv->sim_n = calloc(p->n_seq_max, sizeof(uint32_t))) ||
        !(kv->sim_private = calloc(p->n_seq_max, 1)) ||
        !(kv->sim_last = calloc(p->n_seq_max, sizeof(int32_t))))
        goto oom;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        const size_t kb = p->k_row_bytes[il], vb = p->v_row_bytes[il];
        if ((kb && rows > SIZE_MAX / kb) || (vb && rows > SIZE_MAX / vb)) {
            rcore_error_set("kv: layer %u: %zu rows of %zu bytes overflow", il, rows,
                            kb > vb ? kb : vb);
            rmem_kv_free(kv);
            return NULL;
        }
        kv->k_row_bytes[il] = kb;
        kv->v_row_bytes[il] = vb;
        if ((kb && !(kv->k[il] = calloc(rows, kb))) || (vb && !(kv->v[il] = calloc(rows, vb))))
            goto oom;
    }
    for (uint32_t i = 0; i < p->n_pages; i++)
        kv->free_next[i] = i + 1 < p->n_pages ? (int32_t)(i + 1) : -1;
    kv->free_head = 0;
    kv->n_free = p->n_pages;
    return kv;
oom:
    rmem_kv_free(kv);
    rcore_error_set("kv: out of memory for %u pages of %u rows", p->n_pages, p->page_rows);
    return NULL;
}

void rmem_kv_free(struct rmem_kv *kv) {
    if (!kv) return;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        if (kv->k) free(kv->k[il]);
        if (kv->v) free(kv->v[il]);
    }
    for (uint32_t s = 0; s < kv->n_seq_max && kv->seq; s++) {
        free(kv->seq[s].pages);
        free(kv->seq[s].pos);
    }
    free(kv->k_row_bytes);
    free(kv->v_row_bytes);
    free(kv->k);
    free(kv->v);
    free(kv->refs);
    free(kv->free_next);
    free(kv->seq);
    free(kv->tok_row);
    free(kv->sim_n);
    free(kv->sim_private);
    free(kv->sim_last);
    free(kv);
}

/* ---- pages --------------------------------------------------------------------------------- */

int32_t rmem_kv_page_take(struct rmem_kv *kv) {
    const int32_t p = kv->free_head;
    kv->free_head = kv->free_next[p];
    kv->free_next[p] = -1;
    kv->n_free--;
    kv->refs[p] = 1;
    return p;
}

void rmem_kv_page_unref(struct rmem_kv *kv, int32_t p) {
    if (--kv->refs[p] > 0) return;
    kv->free_next[p] = kv->free_head;
    kv->free_head = p;
    kv->n_free++;
}

void rmem_kv_page_copy(struct rmem_kv *kv, int32_t dst, int32_t src, uint32_t n) {
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        const size_t kb = kv->k_row_bytes[il], vb = kv->v_row_bytes[il];
        const size_t d = (size_t)dst * kv->page_rows, s = (size_t)src * kv->page_rows;
        if (kb) memcpy(kv->k[il] + d * kb, kv->k[il] + s * kb, n * kb);
        if (vb) memcpy(kv->v[il] + d * vb, kv->v[il] + s * vb, n * vb);
    }
}

/* Room in seq's arrays for n tokens: false (error set, nothing else changed) when out of
 * memory. */
bool rmem_kv_seq_reserve(struct rmem_kv *kv, struct rmem_kv_seq *q, uint32_t n) {
    const uint32_t np = rmem_kv_pages_for(kv, n);
    if (np > q->cap_pages) {
        uint32_t cap = q->cap_pages ? q->cap_pages : 4;
        while (cap < np) cap *= 2;
        int32_t *a = realloc(q->pages, sizeof(int32_t) * cap);
        if (!a) goto oom;
        q->pages = a;
        q->cap_pages = cap;
    }
    if (n > q->cap_pos) {
        uint32_t cap = q->cap_pos ? q->cap_pos : 64;
        while (cap < n) cap = cap > UINT32_MAX / 2 ? n : cap * 2;
        int32_t *a = realloc(q->pos, sizeof(int32_t) * cap);
        if (!a) goto oom;
        q->pos = a;
        q->cap_pos = cap;
    }
    return true;
oom:
    rcore_error_set("kv: out of memory for a sequence of %u tokens", n);
    return false;
}

/* Keeps seq's first n tokens (n <= its count), giving back the pages past them. */
void rmem_kv_seq_truncate(struct rmem_kv *kv, struct rmem_kv_seq *q, uint32_t n) {
    const uint32_t keep = rmem_kv_pages_for(kv, n), had = rmem_kv_pages_for(kv, q->n);
    for (uint32_t i = keep; i < had; i++) rmem_kv_page_unref(kv, q->pages[i]);
    q->n = n;
}

/* ---- shape --------------------------------------------------------------------------------- */

uint32_t rmem_kv_n_layer(const struct rmem_kv *kv) {
    return kv->n_layer;
}
uint32_t rmem_kv_page_rows(const struct rmem_kv *kv) {
    return kv->page_rows;
}
uint32_t rmem_kv_n_pages(const struct rmem_kv *kv) {
    return kv->n_pages;
}
uint32_t rmem_kv_type_k(const struct rmem_kv *kv) {
    return kv->type_k;
}

uint32_t rmem_kv_type_v(const struct rmem_kv *kv) {
    return kv->type_v;
}

uint32_t rmem_kv_n_free(const struct rmem_kv *kv) {
    return kv->n_free;
}
bool rmem_kv_can_shift(const struct rmem_kv *kv) {
    return !kv->rope || kv->rotate;
}
void *rmem_kv_k_data(struct rmem_kv *kv, uint32_t il) {
    return il < kv->n_layer ? kv->k[il] : NULL;
}
void *rmem_kv_v_data(struct rmem_kv *kv, uint32_t il) {
    return il < kv->n_layer ? kv->v[il] : NULL;
}
size_t rmem_kv_k_row_bytes(const struct rmem_kv *kv, uint32_t il) {
    return il < kv->n_layer ? kv->k_row_bytes[il] : 0;
}
size_t rmem_kv_v_row_bytes(const struct rmem_kv *kv, uint32_t il) {
    return il < kv->n_layer ? kv->v_row_bytes[il] : 0;
}
size_t rmem_kv_seq_bytes(const struct rmem_kv *kv, int32_t seq) {
    if (seq < 0 || (uint32_t)seq >= kv->n_seq_max) return 0;
    size_t row = 0;
    for (uint32_t il = 0; il < kv->n_layer; il++) row += kv->k_row_bytes[il] + kv->v_row_bytes[il];
    return row * kv->seq[seq].n;
}

/* ---- sequences ----------------------------------------------------------------------------- */

static bool seq_ok(const struct rmem_kv *kv, int32_t seq) {
    return seq >= 0 && (uint32_t)seq < kv->n_seq_max;
}

uint32_t rmem_kv_seq_n(const struct rmem_kv *kv, int32_t seq) {
    return seq_ok(kv, seq) ? kv->seq[seq].n : 0;
}
const int32_t *rmem_kv_seq_pages(const struct rmem_kv *kv, int32_t seq) {
    return seq_ok(kv, seq) && kv->seq[seq].n ? kv->seq[seq].pages : NULL;
}
const int32_t *rmem_kv_seq_positions(const struct rmem_kv *kv, int32_t seq) {
    return seq_ok(kv, seq) && kv->seq[seq].n ? kv->seq[seq].pos : NULL;
}
int32_t rmem_kv_seq_pos_min(const struct rmem_kv *kv, int32_t seq) {
    return seq_ok(kv, seq) && kv->seq[seq].n ? kv->seq[seq].pos[0] : -1;
}
int32_t rmem_kv_seq_pos_max(const struct rmem_kv *kv, int32_t seq) {
    return seq_ok(kv, seq) && kv->seq[seq].n ? kv->seq[seq].pos[kv->seq[seq].n - 1] : -1;
}

void rmem_kv_clear(struct rmem_kv *kv, bool data) {
    for (uint32_t s = 0; s < kv->n_seq_max; s++) rmem_kv_seq_truncate(kv, &kv->seq[s], 0);
    kv->n_tok = 0;
    if (!data) return;
    const size_t rows = (size_t)kv->n_pages * kv->page_rows;
    for (uint32_t il = 0; il < kv->n_layer; il++) {
        if (kv->k[il]) memset(kv->k[il], 0, rows * kv->k_row_bytes[il]);
        if (kv->v[il]) memset(kv->v[il], 0, rows * kv->v_row_bytes[il]);
    }
}

uint32_t rmem_kv_first_at(const struct rmem_kv_seq *q, int32_t p) {
    uint32_t lo = 0, hi = q->n;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (q->pos[mid] < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t rmem_kv_seq_rm_at(const struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1) {
    if (!seq_ok(kv, seq)) return -2;
    const struct rmem_kv_seq *q = &kv->seq[seq];
    if (p0 < 0) p0 = 0;
    const uint32_t i0 = rmem_kv_first_at(q, p0), i1 = p1 < 0 ? q->n : rmem_kv_first_at(q, p1);
    if (i0 >= i1) return (int32_t)q->n; /* nothing in the range */
    return i1 == q->n ? (int32_t)i0 : -1;
}

bool rmem_kv_seq_rm(struct rmem_kv *kv, int32_t seq, int32_t p0, int32_t p1) {
    if (seq < 0) { /* every sequence is cut at a tail, or none is */
        if (p1 >= 0 && p1 <= (p0 < 0 ? 0 : p0)) return true;
        for (uint32_t s = 0; s < kv->n_seq_max; s++)
            if (rmem_kv_seq_rm_at(kv, (int32_t)s, p0, p1) == -1) {
                rcore_error_set("kv: seq_rm [%d, %d) of every sequence would cut sequence %u's "
                                "middle",
                                p0, p1, s);
                return false;
            }
        for (uint32_t s = 0; s < kv->n_seq_max; s++)
            rmem_kv_seq_truncate(kv, &kv->seq[s],
                                 (uint32_t)rmem_kv_seq_rm_at(kv, (int32_t)s, p0, p1));
        return true;
    }
    const int32_t at = rmem_kv_seq_rm_at(kv, seq, p0, p1);
    if (at == -2) {
        rcore_error_set("kv: seq_rm: sequence id %d is out of range 0..%u", seq, kv->n_seq_max - 1);
        return false;
    }
    if (at == -1) {
        rcore_error_set("kv: seq_rm [%d, %d) of sequence %d is not a tail (its positions run "
                        "%d..%d)",
                        p0, p1, seq, rmem_kv_seq_pos_min(kv, seq), rmem_kv_seq_pos_max(kv, seq));
        return false;
    }
    rmem_kv_seq_truncate(kv, &kv->seq[seq], (uint32_t)at);
    return true;
}

bool rmem_kv_seq_cp(struct rmem_kv *kv, int32_t src, int32_t dst) {
    if (!seq_ok(kv, src) || !seq_ok(kv, dst) || src == dst) return true;
    struct rmem_kv_seq *s = &kv->seq[src], *d = &kv->seq[dst];
    if (!rmem_kv_seq_reserve(kv, d, s->n)) return false;
    const uint32_t np = rmem_kv_pages_for(kv, s->n);
    for (uint32_t i = 0; i < np; i++) kv->refs[s->pages[i]]++;
    rmem_kv_seq_truncate(kv, d, 0);
    if (s->n) { /* an empty sequence may have no arrays at all */
        memcpy(d->pages, s->pages, sizeof(int32_t) * np);
        memcpy(d->pos, s->pos, sizeof(int32_t) * s->n);
    }
    d->n = s->n;
    return true;
}

void rmem_kv_seq_keep(struct rmem_kv *kv, int32_t seq) {
    for (uint32_t s = 0; s < kv->n_seq_max; s++)
        if ((int32_t)s != seq) rmem_kv_seq_truncate(kv, &kv->seq[s], 0);
}

/* ---- placing a ubatch ---------------------------------------------------------------------- */

/* The streams of a ubatch: stream s is tokens [s * per, (s + 1) * per) (the simple split:
 * each token its own stream). */
static uint32_t n_streams(const struct rbatch_ubatch *ub, uint32_t *per) {
    *per = ub->n_seq_tokens ? ub->n_seq_tokens : 1;
    return ub->n_seq_tokens ? ub->n_seqs : ub->n_tokens;
}

/* Whether the sequences of stream token t hold the same tokens: one page table (equal counts
 * and pages) and equal positions. */
static bool stream_shared(const struct rmem_kv *kv, const struct rbatch_ubatch *ub, uint32_t t,
                          const uint32_t *n_of) {
    const int32_t *ids = ub->seq_id[t];
    const struct rmem_kv_seq *a = &kv->seq[ids[0]];
    for (int32_t j = 1; j < ub->n_seq_id[t]; j++) {
        const struct rmem_kv_seq *b = &kv->seq[ids[j]];
        if (n_of[ids[j]] != n_of[ids[0]]) return false;
        const uint32_t np = rmem_kv_pages_for(kv, a->n < b->n ? a->n : b->n);
        if (a->n != b->n) return false;
        if (a->n && (memcmp(a->pages, b->pages, sizeof(int32_t) * np) != 0 ||
                     memcmp(a->pos, b->pos, sizeof(int32_t) * a->n) != 0))
            return false;
    }
    return true;
}

enum rmem_status rmem_kv_prepare(struct rmem_kv *kv, const struct rbatch_ubatch *ubs,
                                 uint32_t n_ubs) {
    /* a dry run on counts: sim_n the tokens each sequence will hold, sim_private whether its
       last page is its stream's own by then (copied, or taken fresh) */
    for (uint32_t s = 0; s < kv->n_seq_max; s++) {
        kv->sim_n[s] = kv->seq[s].n;
        kv->sim_private[s] = 0;
        kv->sim_last[s] = kv->seq[s].n ? kv->seq[s].pos[kv->seq[s].n - 1] : -1;
    }
    uint64_t need = 0;
    for (uint32_t u = 0; u < n_ubs; u++) {
        const struct rbatch_ubatch *ub = &ubs[u];
        uint32_t per;
        const uint32_t ns = n_streams(ub, &per);
        for (uint32_t st = 0; st < ns; st++) {
            const uint32_t t = st * per;
            const int32_t *ids = ub->seq_id[t];
            const int32_t lead = ids[0];
            if (!stream_shared(kv, ub, t, kv->sim_n)) {
                rcore_error_set("kv: sequences %d and %d share a stream of the batch but not "
                                "their attention rows",
                                lead, ids[1]);
                return RMEM_INVALID;
            }
            const uint32_t n = kv->sim_n[lead];
            /* positions go on in order: a sequence's rows are sorted by them */
            for (uint32_t i = 0; i < per; i++) {
                const int32_t prev = i ? ub->pos[t + i - 1] : kv->sim_last[lead];
                if (ub->pos[t + i] < prev || ub->pos[t + i] < 0) {
                    rcore_error_set("kv: sequence %d: a token at position %d after position %d",
                                    lead, ub->pos[t + i], prev);
                    return RMEM_INVALID;
                }
            }
            if ((uint64_t)n + per > INT32_MAX) {
                rcore_error_set("kv: sequence %d would hold more than 2^31 tokens", lead);
                return RMEM_INVALID;
            }
            /* a partly filled last page held by tables outside the stream is copied first */
            if (n % kv->page_rows && !kv->sim_private[lead] &&
                kv->refs[kv->seq[lead].pages[n / kv->page_rows]] > (uint32_t)ub->n_seq_id[t])
                need++;
            need += rmem_kv_pages_for(kv, n + per) - rmem_kv_pages_for(kv, n);
            for (int32_t j = 0; j < ub->n_seq_id[t]; j++) {
                kv->sim_n[ids[j]] = n + per;
                kv->sim_private[ids[j]] = 1;
                kv->sim_last[ids[j]] = ub->pos[t + per - 1];
            }
        }
    }
    if (need > kv->n_free) {
        rcore_error_set("the attention cache is full: the batch needs %llu page%s of %u tokens, "
                        "%u of %u are free",
                        (unsigned long long)need, need == 1 ? "" : "s", kv->page_rows, kv->n_free,
                        kv->n_pages);
        return RMEM_NO_ROOM;
    }
    /* the arrays the placements will fill, grown now: placing these ubatches cannot fail */
    uint32_t most = 0;
    for (uint32_t u = 0; u < n_ubs; u++)
        if (ubs[u].n_tokens > most) most = ubs[u].n_tokens;
    if (most > kv->tok_cap) {
        int64_t *a = realloc(kv->tok_row, sizeof(int64_t) * most);
        if (!a) {
            rcore_error_set("kv: out of memory for a ubatch of %u tokens", most);
            return RMEM_FAILED;
        }
        kv->tok_row = a;
        kv->tok_cap = most;
    }
    for (uint32_t s = 0; s < kv->n_seq_max; s++)
        if (kv->sim_n[s] > kv->seq[s].n && !rmem_kv_seq_reserve(kv, &kv->seq[s], kv->sim_n[s]))
            return RMEM_FAILED;
    return RMEM_OK;
}

bool rmem_kv_place(struct rmem_kv *kv, const struct rbatch_ubatch *ub) {
    /* the checks, and every array grown, before anything changes */
    if (rmem_kv_prepare(kv, ub, 1) != RMEM_OK) return false;
    uint32_t per;
    const uint32_t ns = n_streams(ub, &per);
    for (uint32_t st = 0; st < ns; st++) {
        const uint32_t t0 = st * per;
        const int32_t *ids = ub->seq_id[t0];
        const int32_t nid = ub->n_seq_id[t0];
        struct rmem_kv_seq *lead = &kv->seq[ids[0]];
        uint32_t n = lead->n;
        if (n % kv->page_rows && kv->refs[lead->pages[n / kv->page_rows]] > (uint32_t)nid) {
            const int32_t old = lead->pages[n / kv->page_rows], fresh = rmem_kv_page_take(kv);
            rmem_kv_page_copy(kv, fresh, old, n % kv->page_rows);
            kv->refs[fresh] = (uint32_t)nid;
            kv->refs[old] -= (uint32_t)nid;
            for (int32_t j = 0; j < nid; j++) kv->seq[ids[j]].pages[n / kv->page_rows] = fresh;
        }
        for (uint32_t i = 0; i < per; i++, n++) {
            if (n % kv->page_rows == 0) {
                const int32_t fresh = rmem_kv_page_take(kv);
                kv->refs[fresh] = (uint32_t)nid;
                for (int32_t j = 0; j < nid; j++) kv->seq[ids[j]].pages[n / kv->page_rows] = fresh;
            }
            const int32_t page = lead->pages[n / kv->page_rows];
            kv->tok_row[t0 + i] = (int64_t)page * kv->page_rows + n % kv->page_rows;
            for (int32_t j = 0; j < nid; j++) kv->seq[ids[j]].pos[n] = ub->pos[t0 + i];
        }
        for (int32_t j = 0; j < nid; j++) kv->seq[ids[j]].n = n;
    }
    kv->n_tok = ub->n_tokens;
    return true;
}

int64_t rmem_kv_token_row(const struct rmem_kv *kv, uint32_t t) {
    return t < kv->n_tok ? kv->tok_row[t] : -1;
}

/* ---- checks -------------------------------------------------------------------------------- */

bool rmem_kv_check(const struct rmem_kv *kv) {
    uint32_t *count = calloc(kv->n_pages, sizeof(uint32_t));
    if (!count) {
        rcore_error_set("kv check: out of memory");
        return false;
    }
    bool ok = true;
    for (uint32_t s = 0; s < kv->n_seq_max && ok; s++) {
        const struct rmem_kv_seq *q = &kv->seq[s];
        for (uint32_t i = 0; i < rmem_kv_pages_for(kv, q->n) && ok; i++) {
            const int32_t p = q->pages[i];
            if (p < 0 || (uint32_t)p >= kv->n_pages) {
                rcore_error_set("kv check: sequence %u's page %u is %d", s, i, p);
                ok = false;
            } else {
                count[p]++;
            }
        }
        for (uint32_t i = 0; i < q->n && ok; i++)
            if (q->pos[i] < 0 || (i > 0 && q->pos[i] < q->pos[i - 1])) {
                rcore_error_set("kv check: sequence %u's token %u at position %d", s, i, q->pos[i]);
                ok = false;
            }
    }
    uint32_t n_free = 0;
    for (int32_t p = kv->free_head; p >= 0 && ok && n_free <= kv->n_pages; p = kv->free_next[p]) {
        if (kv->refs[p] != 0 || count[p] != 0) {
            rcore_error_set("kv check: free page %d is held %u times (refs %u)", p, count[p],
                            kv->refs[p]);
            ok = false;
        }
        n_free++;
    }
    if (ok && n_free != kv->n_free) {
        rcore_error_set("kv check: %u pages on the free list, %u counted", n_free, kv->n_free);
        ok = false;
    }
    uint32_t held = 0;
    for (uint32_t p = 0; p < kv->n_pages && ok; p++) {
        if (count[p] != kv->refs[p]) {
            rcore_error_set("kv check: page %u is in %u tables, refs says %u", p, count[p],
                            kv->refs[p]);
            ok = false;
        }
        held += count[p] > 0;
    }
    if (ok && held + kv->n_free != kv->n_pages) {
        rcore_error_set("kv check: %u pages held and %u free of %u", held, kv->n_free, kv->n_pages);
        ok = false;
    }
    free(count);
    return ok;
}

uint64_t rmem_kv_fingerprint(const struct rmem_kv *kv) {
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, &kv->n_free, sizeof kv->n_free);
    XXH64_update(&st, kv->refs, sizeof(uint32_t) * kv->n_pages);
    for (uint32_t s = 0; s < kv->n_seq_max; s++) {
        const struct rmem_kv_seq *q = &kv->seq[s];
        XXH64_update(&st, &q->n, sizeof q->n);
        if (!q->n) continue;
        XXH64_update(&st, q->pages, sizeof(int32_t) * rmem_kv_pages_for(kv, q->n));
        XXH64_update(&st, q->pos, sizeof(int32_t) * q->n);
        for (uint32_t il = 0; il < kv->n_layer; il++)
            for (uint32_t i = 0; i < q->n; i++) {
                const size_t row =
                    (size_t)q->pages[i / kv->page_rows] * kv->page_rows + i % kv->page_rows;
                if (kv->k[il])
                    XXH64_update(&st, kv->k[il] + row * kv->k_row_bytes[il], kv->k_row_bytes[il]);
                if (kv->v[il])
                    XXH64_update(&st, kv->v[il] + row * kv->v_row_bytes[il], kv->v_row_bytes[il]);
            }
    }
    return XXH64_digest(&st);
}
