/*
 * The attention part of the memory (src/memory/kv.c, kv_state.c) against a model of what it
 * must hold: per sequence the list of its tokens (position, and a tag that the test's "compute"
 * writes into every layer's K and V rows). Random sequence operations and ubatches, on page
 * sizes 1, 3 and 16 and budgets small enough to run out, each followed by rmem_kv_check and a
 * comparison of every sequence's positions and rows with the model; operations that must fail
 * (a cut in the middle, a shift out of order, a batch with no room, a corrupt stream) must
 * leave the fingerprint as it was. Then state streams, whole and per sequence, and every
 * allocation failing in turn.
 *
 * The same runs on a RoPE layout, whose shifts rotate the moved K rows: the test's rotation
 * adds the position change to every byte of a K row (mod 256; a rotation by p then d is one by
 * p + d, as RoPE's), and the model counts each token's rotation, so a row rotated twice, or a
 * shared row rotated for the sequence that did not move, shows.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_shim.h"
#include "core/core.h"
#include "memory/memory.h"
#include "test.h"

#define N_SEQ   6
#define MAX_TOK 2048
#define N_LAYER 3

static const size_t k_bytes[N_LAYER] = {8, 0, 20}; /* layer 1: a recurrent layer, no rows */
static const size_t v_bytes[N_LAYER] = {12, 0, 4};

struct ref_seq {
    uint32_t n;
    int32_t pos[MAX_TOK];
    uint32_t tag[MAX_TOK];
    uint8_t rot[MAX_TOK]; /* RoPE layout: the K rows' rotation so far, mod 256 */
};
static struct ref_seq ref[N_SEQ];
static bool rope_layout; /* the property run's layout rotates K rows on shifts */
static int shifts_short; /* RoPE shifts refused for want of free pages to copy shared ones */
static uint32_t next_tag = 1;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

/* The test's rotate function: each K byte plus the position change (mod 256). */
static void fake_rotate(void *user, uint32_t il, uint32_t type, void *rows, uint32_t n,
                        const int32_t *delta) {
    (void)user, (void)type;
    uint8_t *k = rows;
    for (uint32_t r = 0; r < n; r++)
        for (size_t b = 0; b < k_bytes[il]; b++)
            k[r * k_bytes[il] + b] = (uint8_t)(k[r * k_bytes[il] + b] + (uint32_t)delta[r]);
}

static uint8_t row_byte(uint32_t tag, uint32_t il, int v, size_t b) {
    return (uint8_t)(tag * 31u + il * 7u + (uint32_t)b * 13u + (v ? 101u : 1u));
}

static void write_rows(struct rmem_kv *kv, int64_t row, uint32_t tag) {
    for (uint32_t il = 0; il < N_LAYER; il++) {
        uint8_t *k = rmem_kv_k_data(kv, il), *v = rmem_kv_v_data(kv, il);
        for (size_t b = 0; b < k_bytes[il]; b++) k[row * k_bytes[il] + b] = row_byte(tag, il, 0, b);
        for (size_t b = 0; b < v_bytes[il]; b++) v[row * v_bytes[il] + b] = row_byte(tag, il, 1, b);
    }
}

/* kv holds what the model says: counts, positions, rows. */
static bool matches(struct rmem_kv *kv, const char *after) {
    const uint32_t P = rmem_kv_page_rows(kv);
    for (int32_t s = 0; s < N_SEQ; s++) {
        const struct ref_seq *r = &ref[s];
        if (rmem_kv_seq_n(kv, s) != r->n) {
            fprintf(stderr, "after %s: sequence %d holds %u tokens, %u expected\n", after, s,
                    rmem_kv_seq_n(kv, s), r->n);
            return false;
        }
        if (r->n == 0) {
            if (rmem_kv_seq_pos_min(kv, s) != -1 || rmem_kv_seq_pos_max(kv, s) != -1) return false;
            continue;
        }
        const int32_t *pages = rmem_kv_seq_pages(kv, s), *pos = rmem_kv_seq_positions(kv, s);
        if (rmem_kv_seq_pos_min(kv, s) != r->pos[0] ||
            rmem_kv_seq_pos_max(kv, s) != r->pos[r->n - 1]) {
            fprintf(stderr, "after %s: sequence %d pos_min/max %d/%d, %d/%d expected\n", after, s,
                    rmem_kv_seq_pos_min(kv, s), rmem_kv_seq_pos_max(kv, s), r->pos[0],
                    r->pos[r->n - 1]);
            return false;
        }
        for (uint32_t i = 0; i < r->n; i++) {
            if (pos[i] != r->pos[i]) {
                fprintf(stderr, "after %s: sequence %d token %u at %d, %d expected\n", after, s, i,
                        pos[i], r->pos[i]);
                return false;
            }
            const int64_t row = (int64_t)pages[i / P] * P + i % P;
            for (uint32_t il = 0; il < N_LAYER; il++) {
                const uint8_t *k = rmem_kv_k_data(kv, il), *v = rmem_kv_v_data(kv, il);
                for (size_t b = 0; b < k_bytes[il]; b++)
                    if (k[row * k_bytes[il] + b] !=
                        (uint8_t)(row_byte(r->tag[i], il, 0, b) + r->rot[i])) {
                        fprintf(stderr, "after %s: sequence %d token %u layer %u: K row wrong\n",
                                after, s, i, il);
                        return false;
                    }
                for (size_t b = 0; b < v_bytes[il]; b++)
                    if (v[row * v_bytes[il] + b] != row_byte(r->tag[i], il, 1, b)) {
                        fprintf(stderr, "after %s: sequence %d token %u layer %u: V row wrong\n",
                                after, s, i, il);
                        return false;
                    }
            }
        }
    }
    return true;
}

/* rope: a RoPE layout, with the test's rotation when rotate. */
static struct rmem_kv *make(uint32_t page_rows, uint32_t n_pages, bool rope, bool rotate) {
    const struct rmem_kv_params p = {N_LAYER,   k_bytes, v_bytes, 1,    8,
                                     page_rows, n_pages, N_SEQ,   rope, rotate ? fake_rotate : NULL,
                                     NULL};
    return rmem_kv_create(&p);
}

/* A ubatch of n_streams streams of per tokens: stream i's sequences are ids[i][0..n_ids[i]). */
struct ub_buf {
    struct rbatch_ubatch ub;
    int32_t idx[64], tok[64], pos[64], n_id[64];
    int8_t out[64];
    const int32_t *sid[64];
    int32_t ids[8][N_SEQ];
};

static void build_ub(struct ub_buf *b, uint32_t n_streams, uint32_t per, const uint32_t *n_ids) {
    uint32_t t = 0;
    for (uint32_t s = 0; s < n_streams; s++) {
        const int32_t lead = b->ids[s][0];
        const int32_t base = ref[lead].n ? ref[lead].pos[ref[lead].n - 1] + 1 : (int32_t)rnd(3);
        for (uint32_t i = 0; i < per; i++, t++) {
            b->idx[t] = (int32_t)t;
            b->tok[t] = 0;
            b->pos[t] = base + (int32_t)i;
            b->out[t] = 0;
            b->n_id[t] = (int32_t)n_ids[s];
            b->sid[t] = b->ids[s];
        }
    }
    b->ub =
        (struct rbatch_ubatch){t, per, n_streams, b->idx, b->tok, b->pos, b->out, b->n_id, b->sid};
}

/* One random decode step: streams of distinct sequences, each a lead and those sharing its
 * table. Returns whether it was placed. */
static bool step_decode(struct rmem_kv *kv, bool *no_room) {
    struct ub_buf b;
    uint32_t n_ids[8], n_streams = 1 + rnd(3), per = 1 + rnd(5), used = 0;
    bool taken[N_SEQ] = {false};
    for (uint32_t s = 0; s < n_streams; s++) {
        int32_t lead = (int32_t)rnd(N_SEQ);
        for (int tries = 0; taken[lead] && tries < N_SEQ; tries++) lead = (lead + 1) % N_SEQ;
        if (taken[lead]) break;
        taken[lead] = true;
        n_ids[used] = 1;
        b.ids[used][0] = lead;
        /* sequences holding the lead's very table may join its stream */
        for (int32_t j = 0; j < N_SEQ; j++) {
            if (taken[j] || rnd(2)) continue;
            const uint32_t n = rmem_kv_seq_n(kv, j);
            if (n != rmem_kv_seq_n(kv, lead)) continue;
            const uint32_t np = (n + rmem_kv_page_rows(kv) - 1) / rmem_kv_page_rows(kv);
            if (n && (memcmp(rmem_kv_seq_pages(kv, j), rmem_kv_seq_pages(kv, lead),
                             sizeof(int32_t) * np) != 0 ||
                      memcmp(rmem_kv_seq_positions(kv, j), rmem_kv_seq_positions(kv, lead),
                             sizeof(int32_t) * n) != 0))
                continue;
            taken[j] = true;
            b.ids[used][n_ids[used]++] = j;
        }
        used++;
    }
    for (uint32_t s = 0; s < used; s++)
        if (ref[b.ids[s][0]].n + per > MAX_TOK) return false;
    build_ub(&b, used, per, n_ids);
    const uint64_t fp = rmem_kv_fingerprint(kv);
    const enum rmem_status st = rmem_kv_prepare(kv, &b.ub, 1);
    *no_room = st == RMEM_NO_ROOM;
    CHECK_MSG(st == RMEM_OK || st == RMEM_NO_ROOM, "prepare: status %d: %s", (int)st,
              rcore_error_get());
    if (st != RMEM_OK) {
        CHECK(!rmem_kv_place(kv, &b.ub));
        CHECK(rmem_kv_fingerprint(kv) == fp);
        return false;
    }
    CHECK_MSG(rmem_kv_place(kv, &b.ub), "place: %s", rcore_error_get());
    for (uint32_t t = 0; t < b.ub.n_tokens; t++) {
        const uint32_t tag = next_tag++;
        write_rows(kv, rmem_kv_token_row(kv, t), tag);
        for (int32_t j = 0; j < b.n_id[t]; j++) {
            struct ref_seq *r = &ref[b.sid[t][j]];
            r->pos[r->n] = b.pos[t];
            r->tag[r->n] = tag;
            r->rot[r->n] = 0;
            r->n++;
        }
    }
    CHECK(rmem_kv_token_row(kv, b.ub.n_tokens) == -1);
    return true;
}

/* The model's answer to seq_rm(s, p0, p1): the count kept, -1 when not a tail. */
static int32_t ref_rm_at(int32_t s, int32_t p0, int32_t p1) {
    const struct ref_seq *r = &ref[s];
    uint32_t i0 = 0, i1 = r->n;
    while (i0 < r->n && r->pos[i0] < (p0 < 0 ? 0 : p0)) i0++;
    if (p1 >= 0) {
        i1 = 0;
        while (i1 < r->n && r->pos[i1] < p1) i1++;
    }
    if (i0 >= i1) return (int32_t)r->n;
    return i1 == r->n ? (int32_t)i0 : -1;
}

static void step_rm(struct rmem_kv *kv) {
    const int32_t s = rnd(8) == 0 ? -1 : (int32_t)rnd(N_SEQ);
    const int32_t p0 = (int32_t)rnd(40) - 2, p1 = rnd(2) ? -1 : (int32_t)rnd(40);
    const uint64_t fp = rmem_kv_fingerprint(kv);
    bool want = true;
    int32_t keep[N_SEQ];
    const bool empty = p1 >= 0 && p1 <= (p0 < 0 ? 0 : p0);
    for (int32_t j = 0; j < N_SEQ; j++) {
        keep[j] = (s < 0 || s == j) && !empty ? ref_rm_at(j, p0, p1) : (int32_t)ref[j].n;
        if (keep[j] < 0) want = false;
    }
    CHECK(rmem_kv_seq_rm_at(kv, s < 0 ? 0 : s, p0, p1) ==
              (s < 0 ? ref_rm_at(0, p0, p1) : keep[s]) ||
          (s < 0 && empty));
    const bool got = rmem_kv_seq_rm(kv, s, p0, p1);
    CHECK_MSG(got == want, "seq_rm(%d, %d, %d): %d, %d expected", s, p0, p1, got, want);
    if (!got) {
        CHECK(rmem_kv_fingerprint(kv) == fp);
        return;
    }
    for (int32_t j = 0; j < N_SEQ; j++) ref[j].n = (uint32_t)keep[j];
}

static void step_shift(struct rmem_kv *kv, bool div) {
    const int32_t s = (int32_t)rnd(N_SEQ), p0 = (int32_t)rnd(30),
                  p1 = rnd(2) ? -1 : (int32_t)rnd(40);
    const int32_t delta = (int32_t)rnd(21) - 10, d = 1 + (int32_t)rnd(3);
    struct ref_seq *r = &ref[s];
    /* the model: the run in range, moved; in order and >= 0 with the rest, or refused */
    uint32_t i0 = 0, i1;
    while (i0 < r->n && r->pos[i0] < p0) i0++;
    i1 = i0;
    while (i1 < r->n && (p1 < 0 || r->pos[i1] < p1)) i1++;
    int32_t moved[MAX_TOK];
    bool want = true;
    for (uint32_t i = 0; i < r->n; i++) {
        moved[i] = r->pos[i];
        if (i >= i0 && i < i1) moved[i] = div ? r->pos[i] / d : r->pos[i] + delta;
        if (moved[i] < 0 || (i > 0 && moved[i] < moved[i - 1])) want = false;
    }
    const uint64_t fp = rmem_kv_fingerprint(kv);
    const bool got =
        div ? rmem_kv_seq_div(kv, s, p0, p1, d) : rmem_kv_seq_add(kv, s, p0, p1, delta);
    /* a RoPE layout may also lack the free pages to copy the shared pages it moves */
    const bool short_of_pages =
        rope_layout && want && !got && strstr(rcore_error_get(), "free pages") != NULL;
    shifts_short += short_of_pages;
    CHECK_MSG(got == want || short_of_pages, "seq_%s(%d, %d, %d, %d): %d, %d expected (%s)",
              div ? "div" : "add", s, p0, p1, div ? d : delta, got, want, rcore_error_get());
    if (got && rope_layout)
        for (uint32_t i = i0; i < i1; i++) r->rot[i] = (uint8_t)(r->rot[i] + moved[i] - r->pos[i]);
    if (got)
        memcpy(r->pos, moved, sizeof(int32_t) * r->n);
    else
        CHECK(rmem_kv_fingerprint(kv) == fp);
}

/* A whole-memory stream into a fresh memory of the same shape, and a sequence's stream into
 * another sequence; a corrupt and a truncated stream change nothing. */
static void step_state(struct rmem_kv *kv, uint32_t page_rows, uint32_t n_pages) {
    const size_t size = rmem_kv_state_size(kv, -1);
    uint8_t *buf = malloc(size);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_kv_state_write(kv, &w, -1) && w.n_done == size);
    struct rmem_kv *copy = make(page_rows, n_pages, rope_layout, rope_layout);
    struct rio_reader r;
    rio_reader_buffer(&r, buf, size);
    CHECK_MSG(rmem_kv_state_read(copy, &r, -1), "state read: %s", rcore_error_get());
    CHECK(rmem_kv_check(copy) && matches(copy, "a whole-memory state round trip"));
    /* a flipped byte past the header, then the stream cut short: refused, nothing changed */
    const uint64_t fp = rmem_kv_fingerprint(copy);
    if (size > 20) {
        buf[16 + rnd((uint32_t)(size - 24))] ^= 0x40;
        rio_reader_buffer(&r, buf, size);
        CHECK(!rmem_kv_state_read(copy, &r, -1) && rmem_kv_fingerprint(copy) == fp);
    }
    rio_reader_buffer(&r, buf, size / 2);
    CHECK(!rmem_kv_state_read(copy, &r, -1) && rmem_kv_fingerprint(copy) == fp);
    rmem_kv_free(copy);
    free(buf);

    const int32_t src = (int32_t)rnd(N_SEQ), dst = (int32_t)rnd(N_SEQ);
    const size_t one = rmem_kv_state_size(kv, src);
    buf = malloc(one);
    rio_writer_buffer(&w, buf, one);
    CHECK(rmem_kv_state_write(kv, &w, src));
    rio_reader_buffer(&r, buf, one);
    const uint64_t before = rmem_kv_fingerprint(kv);
    if (rmem_kv_state_read(kv, &r, dst)) {
        ref[dst] = ref[src];
    } else {
        CHECK_MSG(strstr(rcore_error_get(), "pages") != NULL, "sequence state read: %s",
                  rcore_error_get());
        CHECK(rmem_kv_fingerprint(kv) == before);
    }
    free(buf);
}

static void property(uint32_t page_rows, uint32_t n_pages, int steps, bool rope) {
    memset(ref, 0, sizeof ref);
    rope_layout = rope;
    struct rmem_kv *kv = make(page_rows, n_pages, rope, rope);
    CHECK(kv != NULL);
    int placed = 0, no_room = 0;
    for (int i = 0; i < steps; i++) {
        const uint32_t op = rnd(100);
        const char *what;
        if (op < 45) {
            bool full = false;
            placed += step_decode(kv, &full);
            no_room += full;
            what = "a ubatch";
        } else if (op < 60) {
            step_rm(kv);
            what = "seq_rm";
        } else if (op < 72) {
            const int32_t a = (int32_t)rnd(N_SEQ), b = (int32_t)rnd(N_SEQ);
            CHECK(rmem_kv_seq_cp(kv, a, b));
            if (a != b) ref[b] = ref[a];
            what = "seq_cp";
        } else if (op < 75) {
            const int32_t s = (int32_t)rnd(N_SEQ + 1);
            rmem_kv_seq_keep(kv, s);
            for (int32_t j = 0; j < N_SEQ; j++)
                if (j != s) ref[j].n = 0;
            what = "seq_keep";
        } else if (op < 83) {
            step_shift(kv, false);
            what = "seq_add";
        } else if (op < 88) {
            step_shift(kv, true);
            what = "seq_div";
        } else if (op < 89) {
            rmem_kv_clear(kv, rnd(2));
            memset(ref, 0, sizeof ref);
            what = "clear";
        } else {
            step_state(kv, page_rows, n_pages);
            what = "state streams";
        }
        CHECK_MSG(rmem_kv_check(kv), "after %s: %s", what, rcore_error_get());
        if (!matches(kv, what)) {
            CHECK_MSG(false, "page_rows %u step %d: the memory and the model differ", page_rows, i);
            break;
        }
    }
    /* the runs must have met both outcomes of a full budget */
    CHECK_MSG(placed > steps / 10 && no_room > 0, "page_rows %u: %d placed, %d without room",
              page_rows, placed, no_room);
    rmem_kv_free(kv);
}

/* seq_cp shares pages; appending to a shared, partly filled page copies it once. */
static void test_sharing(void) {
    memset(ref, 0, sizeof ref);
    struct rmem_kv *kv = make(4, 8, false, false);
    struct ub_buf b;
    uint32_t one = 1;
    b.ids[0][0] = 0;
    build_ub(&b, 1, 6, &one); /* 6 tokens: pages 0 (full) and 1 (2 rows) */
    CHECK(rmem_kv_place(kv, &b.ub));
    CHECK(rmem_kv_n_free(kv) == 6);
    CHECK(rmem_kv_seq_cp(kv, 0, 1) && rmem_kv_n_free(kv) == 6);
    CHECK(memcmp(rmem_kv_seq_pages(kv, 0), rmem_kv_seq_pages(kv, 1), 2 * sizeof(int32_t)) == 0);
    ref[0].n = 6;
    for (int i = 0; i < 6; i++) ref[0].pos[i] = b.pos[i];
    ref[1] = ref[0];
    b.ids[0][0] = 1;
    build_ub(&b, 1, 1, &one);
    const int32_t shared_last = rmem_kv_seq_pages(kv, 0)[1];
    CHECK(rmem_kv_place(kv, &b.ub));
    /* sequence 1's last page is a copy now; its first page is still shared */
    CHECK(rmem_kv_n_free(kv) == 5);
    CHECK(rmem_kv_seq_pages(kv, 1)[1] != shared_last && rmem_kv_seq_pages(kv, 0)[1] == shared_last);
    CHECK(rmem_kv_seq_pages(kv, 1)[0] == rmem_kv_seq_pages(kv, 0)[0]);
    CHECK(rmem_kv_check(kv));
    /* both in one stream again only with the same table: refused with a clear error */
    uint32_t two = 2;
    b.ids[0][0] = 0;
    b.ids[0][1] = 1;
    build_ub(&b, 1, 1, &two);
    CHECK(rmem_kv_prepare(kv, &b.ub, 1) == RMEM_INVALID);
    CHECK(strstr(rcore_error_get(), "share a stream") != NULL);
    /* cuts: a tail goes, a middle does not; out of range ids */
    CHECK(!rmem_kv_seq_rm(kv, 0, 1, 3) && strstr(rcore_error_get(), "not a tail") != NULL);
    CHECK(!rmem_kv_seq_rm(kv, N_SEQ, 0, -1));
    CHECK(rmem_kv_seq_rm(kv, 1, b.pos[0] - 1, -1) && rmem_kv_seq_n(kv, 1) == 5);
    CHECK(rmem_kv_check(kv));
    rmem_kv_free(kv);
    /* a RoPE layout refuses to move positions */
    kv = make(4, 8, true, false);
    b.ids[0][0] = 0;
    memset(ref, 0, sizeof ref);
    build_ub(&b, 1, 3, &one);
    CHECK(rmem_kv_place(kv, &b.ub) && !rmem_kv_can_shift(kv));
    CHECK(!rmem_kv_seq_add(kv, 0, 0, -1, 5) && strstr(rcore_error_get(), "rotary") != NULL);
    CHECK(!rmem_kv_seq_div(kv, 0, 0, -1, 2));
    rmem_kv_free(kv);
    /* with a rotation (rows all zero: a K byte then reads the rotation it got): six holders of
       a page moved together copy it five times and rotate each copy once */
    kv = make(4, 8, true, true);
    memset(ref, 0, sizeof ref);
    build_ub(&b, 1, 3, &one);
    CHECK(rmem_kv_place(kv, &b.ub) && rmem_kv_can_shift(kv));
    for (int32_t s = 1; s < N_SEQ; s++) CHECK(rmem_kv_seq_cp(kv, 0, s));
    CHECK(rmem_kv_n_free(kv) == 7);
    const int32_t all[N_SEQ] = {0, 1, 2, 3, 4, 5};
    CHECK(rmem_kv_seqs_shift(kv, all, N_SEQ, 0, -1, 2, 0) && rmem_kv_n_free(kv) == 2);
    CHECK(rmem_kv_check(kv));
    for (int32_t s = 0; s < N_SEQ; s++) {
        const uint8_t *k = rmem_kv_k_data(kv, 0);
        const int64_t row = (int64_t)rmem_kv_seq_pages(kv, s)[0] * 4 + 2;
        CHECK_MSG(rmem_kv_seq_pos_min(kv, s) == b.pos[0] + 2 && k[row * k_bytes[0]] == 2,
                  "sequence %d: at %d, K byte %u after one shift by 2", s,
                  rmem_kv_seq_pos_min(kv, s), k[row * k_bytes[0]]);
    }
    rmem_kv_free(kv);
    /* three pages held by three sequences: moving two needs six copies, more than the five
       free pages, and fails whole; moving one's last two pages copies those two */
    kv = make(4, 8, true, true);
    memset(ref, 0, sizeof ref);
    build_ub(&b, 1, 12, &one);
    CHECK(rmem_kv_place(kv, &b.ub));
    CHECK(rmem_kv_seq_cp(kv, 0, 1) && rmem_kv_seq_cp(kv, 0, 2) && rmem_kv_n_free(kv) == 5);
    const uint64_t fp = rmem_kv_fingerprint(kv);
    const int32_t movers[2] = {1, 2};
    CHECK(!rmem_kv_seqs_shift(kv, movers, 2, b.pos[0], -1, 1, 0) &&
          strstr(rcore_error_get(), "needs 6 free pages") != NULL);
    CHECK(rmem_kv_fingerprint(kv) == fp && rmem_kv_n_free(kv) == 5);
    CHECK(rmem_kv_seq_add(kv, 1, b.pos[4], -1, 1) && rmem_kv_n_free(kv) == 3 && rmem_kv_check(kv));
    CHECK(rmem_kv_seq_pages(kv, 1)[0] == rmem_kv_seq_pages(kv, 0)[0]); /* not moved: shared */
    CHECK(rmem_kv_seq_pages(kv, 1)[1] != rmem_kv_seq_pages(kv, 0)[1]);
    rmem_kv_free(kv);
    /* invalid parameters */
    const struct rmem_kv_params bad = {N_LAYER, k_bytes, v_bytes, 1,    8,   0,
                                       8,       N_SEQ,   false,   NULL, NULL};
    CHECK(rmem_kv_create(&bad) == NULL && strstr(rcore_error_get(), "page_rows is 0") != NULL);
}

/* Every allocation of creation, placement, seq_cp and state reading failing in turn: a clean
 * error, and the memory as it was. */
static void test_alloc_failures(void) {
    for (long at = 1;; at++) {
        memset(ref, 0, sizeof ref);
        alloc_shim_arm(at);
        struct rmem_kv *kv = make(3, 16, false, false);
        alloc_shim_disarm();
        if (kv) {
            rmem_kv_free(kv);
            break;
        }
        CHECK(strstr(rcore_error_get(), "out of memory") != NULL);
    }
    struct rmem_kv *kv = make(3, 16, false, false);
    bool full;
    for (int i = 0; i < 6; i++) step_decode(kv, &full);
    const size_t size = rmem_kv_state_size(kv, -1);
    uint8_t *buf = __real_malloc(size);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_kv_state_write(kv, &w, -1));
    int failed = 0;
    for (long at = 1; at < 200; at++) {
        const uint64_t fp = rmem_kv_fingerprint(kv);
        struct rio_reader r;
        rio_reader_buffer(&r, buf, size);
        alloc_shim_arm(at);
        const bool ok = rmem_kv_state_read(kv, &r, -1);
        const long made = alloc_shim_disarm();
        if (!ok) {
            failed++;
            CHECK(strstr(rcore_error_get(), "out of memory") != NULL);
            CHECK(rmem_kv_fingerprint(kv) == fp);
        }
        if (made < at) break;
    }
    CHECK(failed > 0);
    CHECK(rmem_kv_check(kv) && matches(kv, "state reads failing allocations"));
    /* placement and seq_cp into a sequence without arrays yet */
    for (long at = 1; at < 50; at++) {
        const uint64_t fp = rmem_kv_fingerprint(kv);
        alloc_shim_arm(at);
        const bool ok = rmem_kv_seq_cp(kv, 0, N_SEQ - 1);
        alloc_shim_disarm();
        if (ok) {
            ref[N_SEQ - 1] = ref[0];
            break;
        }
        CHECK(rmem_kv_fingerprint(kv) == fp);
    }
    CHECK(rmem_kv_check(kv) && matches(kv, "seq_cp failing allocations"));
    free(buf);
    rmem_kv_free(kv);
}

int main(void) {
    test_sharing();
    property(1, 40, 4000, false);
    property(3, 24, 4000, false);
    property(16, 12, 3000, false);
    property(1, 40, 4000, true);
    property(3, 24, 4000, true);
    property(16, 12, 3000, true);
    printf("RoPE shifts refused for want of free pages: %d\n", shifts_short);
    test_alloc_failures();
    return test_finish("test_memory_kv");
}
