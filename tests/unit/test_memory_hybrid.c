/*
 * A hybrid memory (a recurrent part and an attention part, memory.h): the parts stay in step
 * through random batches (rmem_init_batch / rmem_bctx_apply, sequences decoded alone and
 * coupled on shared tokens), forks, keeps, shifts, and tail removals that roll the recurrent
 * state back to a snapshot, the attention rows following it. After every step rmem_check holds
 * (with its check that a sequence's last attention row is its state's position) and every
 * sequence's attention rows equal a model that keeps its token history; a step that must fail
 * (no pages left, a shift the rows cannot follow, a cut in the middle) leaves the fingerprint
 * of both parts as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "memory/memory.h"
#include "test.h"

#define N_SEQ   5
#define N_LAYER 3
#define MAX_TOK 4096

static const uint32_t k_row[N_LAYER] = {2, 0, 3}; /* layer 1 is attention: no state */
static const uint32_t v_row[N_LAYER] = {4, 0, 2};
static const size_t ak_bytes[N_LAYER] = {0, 16, 0};
static const size_t av_bytes[N_LAYER] = {0, 8, 0};

struct ref_seq {
    uint32_t n;
    int32_t pos[MAX_TOK];
    uint32_t tag[MAX_TOK];
};
static struct ref_seq ref[N_SEQ];
static uint32_t next_tag = 1;
static uint64_t rng = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)((rng >> 11) % n);
}

static uint8_t row_byte(uint32_t tag, int v, size_t b) {
    return (uint8_t)(tag * 29u + (uint32_t)b * 11u + (v ? 77u : 3u));
}

static struct rmem *make(uint32_t n_cells, uint32_t page_rows, uint32_t n_pages) {
    const struct rmem_kv_params a = {N_LAYER, ak_bytes, av_bytes, 1,    1,   page_rows,
                                     n_pages, N_SEQ,    false,    NULL, NULL};
    const struct rmem_params p = {N_LAYER,        k_row,   v_row, RCORE_TYPE_F32,
                                  RCORE_TYPE_F32, n_cells, N_SEQ, &a};
    return rmem_create(&p);
}

/* The attention rows of every sequence are the model's; the positions end where the state's
 * do (rmem_check says so too). */
static bool matches(struct rmem *mem, const char *after) {
    struct rmem_kv *kv = rmem_attn(mem);
    const uint32_t P = rmem_kv_page_rows(kv);
    const uint8_t *k = rmem_kv_k_data(kv, 1), *v = rmem_kv_v_data(kv, 1);
    for (int32_t s = 0; s < N_SEQ; s++) {
        const struct ref_seq *r = &ref[s];
        if (rmem_kv_seq_n(kv, s) != r->n ||
            rmem_seq_pos_max(mem, s) != (r->n ? r->pos[r->n - 1] : -1)) {
            fprintf(stderr, "after %s: sequence %d: %u rows, state at %d; the model %u, %d\n",
                    after, s, rmem_kv_seq_n(kv, s), rmem_seq_pos_max(mem, s), r->n,
                    r->n ? r->pos[r->n - 1] : -1);
            return false;
        }
        const int32_t *pages = rmem_kv_seq_pages(kv, s), *pos = rmem_kv_seq_positions(kv, s);
        for (uint32_t i = 0; i < r->n; i++) {
            const size_t row = (size_t)pages[i / P] * P + i % P;
            bool ok = pos[i] == r->pos[i];
            for (size_t b = 0; b < ak_bytes[1]; b++)
                ok = ok && k[row * 16 + b] == row_byte(r->tag[i], 0, b);
            for (size_t b = 0; b < av_bytes[1]; b++)
                ok = ok && v[row * 8 + b] == row_byte(r->tag[i], 1, b);
            if (!ok) {
                fprintf(stderr, "after %s: sequence %d token %u: position %d or rows wrong\n",
                        after, s, i, pos[i]);
                return false;
            }
        }
    }
    return true;
}

/* A batch over random sequences: each a stream of its own, or coupled with the sequences that
 * share its state (decoded together on the same tokens). */
static void step_batch(struct rmem *mem, long *placed, long *no_room) {
    int32_t tok[64], nid[64], ids[64][N_SEQ];
    int32_t *sid[64];
    int8_t logits[64];
    int32_t n = 0;
    bool taken[N_SEQ] = {false};
    const uint32_t streams = 1 + rnd(3);
    for (uint32_t k = 0; k < streams; k++) {
        const int32_t lead = (int32_t)rnd(N_SEQ);
        if (taken[lead]) continue;
        int32_t group[N_SEQ], ng = 0;
        group[ng++] = lead;
        taken[lead] = true;
        if (rnd(3) == 0)
            for (int32_t s = 0; s < N_SEQ; s++)
                if (!taken[s] && rmem_seq_tail(mem, s) == rmem_seq_tail(mem, lead) &&
                    rmem_seq_tail(mem, s) >= 0) {
                    group[ng++] = s;
                    taken[s] = true;
                }
        const uint32_t count = 1 + rnd(6);
        for (uint32_t i = 0; i < count && n < 64; i++, n++) {
            tok[n] = (int32_t)rnd(100);
            nid[n] = ng;
            memcpy(ids[n], group, sizeof(int32_t) * (size_t)ng);
            sid[n] = ids[n];
            logits[n] = 0;
        }
    }
    const struct rbatch_in in = {n, tok, NULL, NULL, nid, sid, logits};
    const struct rmem_batch_params bp = {1 + rnd(8), 100, false, false};
    const uint64_t fp = rmem_fingerprint(mem);
    struct rmem_bctx *ctx = NULL;
    const enum rmem_status st = rmem_init_batch(mem, &in, &bp, &ctx);
    if (st != RMEM_OK) {
        CHECK_MSG(st == RMEM_NO_ROOM, "init_batch: %d: %s", (int)st, rcore_error_get());
        CHECK(rmem_fingerprint(mem) == fp && ctx == NULL);
        ++*no_room;
        return;
    }
    struct rmem_kv *kv = rmem_attn(mem);
    do {
        CHECK_MSG(rmem_bctx_apply(ctx), "apply: %s", rcore_error_get());
        const struct rbatch_ubatch *ub = rmem_bctx_ubatch(ctx);
        for (uint32_t t = 0; t < ub->n_tokens; t++) {
            const uint32_t tag = next_tag++;
            const int64_t row = rmem_kv_token_row(kv, t);
            uint8_t *k = rmem_kv_k_data(kv, 1), *v = rmem_kv_v_data(kv, 1);
            for (size_t b = 0; b < 16; b++) k[row * 16 + b] = row_byte(tag, 0, b);
            for (size_t b = 0; b < 8; b++) v[row * 8 + b] = row_byte(tag, 1, b);
            for (int32_t j = 0; j < ub->n_seq_id[t]; j++) {
                struct ref_seq *r = &ref[ub->seq_id[t][j]];
                r->pos[r->n] = ub->pos[t];
                r->tag[r->n++] = tag;
            }
        }
        /* the compute's part of the recurrent state: every layer begun and ended */
        for (uint32_t il = 0; il < N_LAYER; il++) {
            struct rmem_layer l;
            CHECK(rmem_layer_begin(mem, il, &l));
            rmem_layer_end(mem, il);
        }
    } while (rmem_bctx_next(ctx));
    rmem_bctx_free(ctx);
    ++*placed;
}

static void step_rm(struct rmem *mem, long *rolled) {
    const int32_t s = (int32_t)rnd(N_SEQ);
    const int32_t top = rmem_seq_pos_max(mem, s);
    const int32_t p0 = top < 1 ? 0 : 1 + (int32_t)rnd((uint32_t)top), p1 = rnd(6) ? -1 : p0 + 2;
    const uint64_t fp = rmem_fingerprint(mem);
    if (!rmem_seq_rm(mem, s, p0, p1)) {
        CHECK(rmem_fingerprint(mem) == fp);
        return;
    }
    /* the state went back (or whole); the rows after its position went with it */
    const int32_t now = rmem_seq_pos_max(mem, s);
    struct ref_seq *r = &ref[s];
    while (r->n && r->pos[r->n - 1] > now) r->n--;
    *rolled += now != top;
}

static void step_shift(struct rmem *mem) {
    const int32_t s = (int32_t)rnd(N_SEQ), top = rmem_seq_pos_max(mem, s);
    const bool div = rnd(3) == 0;
    const int32_t delta = (int32_t)rnd(9) - 4, d = 2 + (int32_t)rnd(2);
    const int32_t p0 = rnd(2) ? 0 : (int32_t)rnd((uint32_t)(top + 2)), p1 = -1;
    const uint64_t fp = rmem_fingerprint(mem);
    /* the model: the sequences holding s's state move with it (only s when it holds none) */
    bool moves[N_SEQ];
    const int32_t tail = rmem_seq_tail(mem, s);
    for (int32_t q = 0; q < N_SEQ; q++)
        moves[q] = q == s || (tail >= 0 && rmem_seq_tail(mem, q) == tail);
    const bool ok = div ? rmem_seq_div(mem, s, p0, p1, d) : rmem_seq_add(mem, s, p0, p1, delta);
    if (!ok) {
        CHECK(rmem_fingerprint(mem) == fp);
        return;
    }
    for (int32_t q = 0; q < N_SEQ; q++) {
        if (!moves[q]) continue;
        struct ref_seq *r = &ref[q];
        if (rmem_seq_tail(mem, q) < 0) { /* shifted below 0: dropped with its rows */
            r->n = 0;
            continue;
        }
        for (uint32_t i = 0; i < r->n; i++)
            if (r->pos[i] >= p0) r->pos[i] = div ? r->pos[i] / d : r->pos[i] + delta;
    }
}

/* State streams: the whole memory into a fresh one of the same shape, a sequence into another
 * sequence, then the same streams cut short or corrupted: refused, and the memory cleared
 * (whole) or the sequence empty in both parts, never half-written. */
static void step_state(struct rmem *mem, uint32_t n_cells, uint32_t page_rows, uint32_t n_pages,
                       long *streams) {
    const size_t size = rmem_state_size(mem, -1);
    uint8_t *buf = malloc(size);
    REQUIRE(buf);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_state_write(mem, &w, -1));
    struct rmem *copy = make(n_cells, page_rows, n_pages);
    REQUIRE(copy && rmem_snap_config(copy, 4, 8, 1 << 20));
    struct rio_reader r;
    rio_reader_buffer(&r, buf, size);
    CHECK_MSG(rmem_state_read(copy, &r, -1), "whole read: %s", rcore_error_get());
    CHECK_MSG(rmem_check(copy), "after a whole read: %s", rcore_error_get());
    CHECK(matches(copy, "a whole-memory round trip"));
    /* corrupt the attention part's last row byte (before its checksum): refused, cleared */
    buf[size - 9] ^= 0x10;
    rio_reader_buffer(&r, buf, size);
    CHECK(!rmem_state_read(copy, &r, -1));
    CHECK(rmem_check(copy) && rmem_used(copy) == 0 && rmem_kv_n_free(rmem_attn(copy)) == n_pages);
    rmem_free(copy);
    free(buf);

    const int32_t src = (int32_t)rnd(N_SEQ), dst = (int32_t)rnd(N_SEQ);
    const size_t one = rmem_state_size(mem, src);
    buf = malloc(one);
    REQUIRE(buf);
    rio_writer_buffer(&w, buf, one);
    CHECK(rmem_state_write(mem, &w, src));
    rio_reader_buffer(&r, buf, one - (rnd(4) == 0 ? 3 : 0));
    if (rmem_state_read(mem, &r, dst)) {
        ref[dst] = ref[src];
        ++*streams;
    } else { /* cut short, or no free cell or pages: dst holds nothing */
        ref[dst].n = 0;
        CHECK(rmem_seq_pos_max(mem, dst) == -1 && rmem_kv_seq_n(rmem_attn(mem), dst) == 0);
    }
    free(buf);
}

/* The prefix cache's path: a sequence's state as a block with its attention rows as a
 * one-sequence stream of its first n tokens (rmem_kv_state_write_prefix), set into another
 * sequence (rmem_seq_set_state_hybrid). Rows that end before the state's position are
 * refused, and so is a stream cut short: nothing changes. */
static void step_set_state(struct rmem *mem, long *sets) {
    const int32_t src = (int32_t)rnd(N_SEQ), dst = (int32_t)rnd(N_SEQ);
    const struct ref_seq *r = &ref[src];
    if (r->n == 0) return;
    struct rmem_kv *kv = rmem_attn(mem);
    float block[64];
    REQUIRE(rmem_snap_block_bytes(mem) <= sizeof block);
    CHECK(rmem_seq_state_f32(mem, src, block));
    const int32_t pos = rmem_seq_pos_max(mem, src);
    const uint32_t n = rnd(4) == 0 ? r->n - 1 - rnd(r->n) : r->n; /* a shorter prefix: refused */
    const size_t size = rmem_kv_state_size_prefix(kv, src, n);
    CHECK(size > 0);
    uint8_t *buf = malloc(size);
    REQUIRE(buf);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_kv_state_write_prefix(kv, &w, src, n));
    const bool cut = rnd(5) == 0;
    struct rio_reader rd;
    rio_reader_buffer(&rd, buf, size - (cut ? 5 : 0));
    const uint64_t fp = rmem_fingerprint(mem);
    const bool ends = n > 0 ? r->pos[n - 1] == pos : false;
    const bool ok = rmem_seq_set_state_hybrid(mem, dst, block, pos, &rd);
    if (ok) {
        CHECK(ends && !cut);
        ref[dst] = ref[src];
        ++*sets;
    } else {
        /* refused for its ending, its cut, or no room: nothing changed */
        CHECK(rmem_fingerprint(mem) == fp);
    }
    if (!ok && ends && !cut) CHECK_ERR("free"); /* the only other reason: no cell or pages */
    free(buf);
}

/* The prefix cache's path for an entry that borrows the rows of a longer one: a stream of all
 * of src's rows set into dst up to the position of its m-th token
 * (rmem_seq_set_state_hybrid_upto): dst holds the first m rows. A position before the first
 * token leaves no rows to end there: refused, nothing changed. */
static void step_set_upto(struct rmem *mem, long *sets) {
    const int32_t src = (int32_t)rnd(N_SEQ), dst = (int32_t)rnd(N_SEQ);
    const struct ref_seq *r = &ref[src];
    if (r->n == 0) return;
    struct rmem_kv *kv = rmem_attn(mem);
    float block[64];
    REQUIRE(rmem_snap_block_bytes(mem) <= sizeof block);
    CHECK(rmem_seq_state_f32(mem, src, block));
    const uint32_t m = 1 + rnd(r->n);
    const bool before = rnd(8) == 0 && r->pos[0] > 0;
    const int32_t last = before ? r->pos[0] - 1 : r->pos[m - 1];
    const size_t size = rmem_kv_state_size_prefix(kv, src, r->n);
    CHECK(size > 0);
    uint8_t *buf = malloc(size);
    REQUIRE(buf);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_kv_state_write_prefix(kv, &w, src, r->n));
    struct rio_reader rd;
    rio_reader_buffer(&rd, buf, size);
    const uint64_t fp = rmem_fingerprint(mem);
    const bool ok = rmem_seq_set_state_hybrid_upto(mem, dst, block, last, &rd);
    if (ok) {
        CHECK(!before);
        const struct ref_seq keep = *r;
        ref[dst] = keep;
        /* equal positions (a shift can make them) all end at last */
        uint32_t n = m;
        while (n < keep.n && keep.pos[n] == last) n++;
        ref[dst].n = n;
        ++*sets;
    } else {
        CHECK(rmem_fingerprint(mem) == fp);
        if (!before) CHECK_ERR("free"); /* the only other reason: no cell or pages */
    }
    free(buf);
}

static void run(uint32_t n_cells, uint32_t page_rows, uint32_t n_pages, int steps) {
    memset(ref, 0, sizeof ref);
    struct rmem *mem = make(n_cells, page_rows, n_pages);
    CHECK(mem != NULL && rmem_snap_config(mem, 4, 8, 1 << 20));
    long placed = 0, no_room = 0, rolled = 0, streams = 0, sets = 0;
    for (int i = 0; i < steps; i++) {
        const uint32_t op = rnd(100);
        const char *what = "a batch";
        if (op < 50) {
            step_batch(mem, &placed, &no_room);
        } else if (op < 65) {
            step_rm(mem, &rolled);
            what = "seq_rm";
        } else if (op < 75) {
            const int32_t a = (int32_t)rnd(N_SEQ), b = (int32_t)rnd(N_SEQ);
            CHECK(rmem_seq_cp(mem, a, b, -1, -1));
            if (a != b) ref[b] = ref[a];
            what = "seq_cp";
        } else if (op < 77) {
            const int32_t s = (int32_t)rnd(N_SEQ + 1);
            rmem_seq_keep(mem, s);
            for (int32_t q = 0; q < N_SEQ; q++)
                if (q != s) ref[q].n = 0;
            what = "seq_keep";
        } else if (op < 87) {
            step_shift(mem);
            what = "a shift";
        } else if (op < 90) {
            step_state(mem, n_cells, page_rows, n_pages, &streams);
            what = "state streams";
        } else if (op < 91) {
            step_set_state(mem, &sets);
            what = "set state";
        } else if (op < 92) {
            step_set_upto(mem, &sets);
            what = "set state up to a position";
        } else if (op < 93) {
            rmem_clear(mem, rnd(2));
            memset(ref, 0, sizeof ref);
            what = "clear";
        } else {
            /* a whole-sequence removal */
            const int32_t s = (int32_t)rnd(N_SEQ);
            CHECK(rmem_seq_rm(mem, s, -1, -1));
            ref[s].n = 0;
            what = "a whole removal";
        }
        CHECK_MSG(rmem_check(mem), "step %d, after %s: %s", i, what, rcore_error_get());
        if (!matches(mem, what)) {
            CHECK_MSG(false, "step %d: the parts and the model differ", i);
            break;
        }
    }
    CHECK_MSG(placed > steps / 5 && no_room > 0 && rolled > 0 && streams > 0 && sets > 0,
              "%ld batches placed, %ld without room, %ld roll-backs, %ld streams read, %ld states "
              "set",
              placed, no_room, rolled, streams, sets);
    rmem_free(mem);
}

int main(void) {
    /* the attention part's shape must be the memory's */
    const struct rmem_kv_params a = {2, ak_bytes, av_bytes, 1, 1, 4, 4, N_SEQ, false, NULL, NULL};
    const struct rmem_params p = {N_LAYER,        k_row, v_row, RCORE_TYPE_F32,
                                  RCORE_TYPE_F32, 4,     N_SEQ, &a};
    CHECK(rmem_create(&p) == NULL);
    CHECK_ERR("the attention part has 2 layers");
    /* a recurrent memory and a hybrid one refuse each other's streams */
    struct rmem *hybrid = make(4, 4, 8);
    const struct rmem_params rp = {N_LAYER,        k_row, v_row, RCORE_TYPE_F32,
                                   RCORE_TYPE_F32, 4,     N_SEQ, NULL};
    struct rmem *plain = rmem_create(&rp);
    REQUIRE(hybrid && plain);
    uint8_t buf[4096];
    struct rio_writer w;
    struct rio_reader r;
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rmem_state_write(hybrid, &w, -1));
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(!rmem_state_read(plain, &r, -1));
    CHECK_ERR("attention part, the memory has none");
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rmem_state_write(plain, &w, -1));
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(!rmem_state_read(hybrid, &r, -1));
    CHECK_ERR("no attention part");
    /* a recurrent block alone cannot restore a hybrid sequence */
    float block[64] = {0};
    REQUIRE(rmem_snap_block_bytes(hybrid) <= sizeof block);
    CHECK(!rmem_seq_set_state_f32(hybrid, 0, block, 3) && rmem_seq_pos_max(hybrid, 0) == -1);
    CHECK_ERR("cannot restore its attention rows");
    /* nor rows without their stream; and a recurrent memory takes no rows */
    CHECK(!rmem_seq_set_state_hybrid(hybrid, 0, block, 3, NULL));
    CHECK_ERR("no attention rows given");
    rio_writer_buffer(&w, buf, sizeof buf);
    CHECK(rmem_kv_state_write_prefix(rmem_attn(hybrid), &w, 0, 0));
    CHECK(!rmem_kv_state_write_prefix(rmem_attn(hybrid), &w, 0, 1));
    CHECK_ERR("the first 1 tokens of sequence 0");
    rio_reader_buffer(&r, buf, w.n_done);
    CHECK(!rmem_seq_set_state_hybrid(plain, 0, block, 3, &r));
    CHECK_ERR("attention rows for a recurrent memory");
    rio_reader_buffer(&r, buf, w.n_done); /* rows that hold nothing, for a state at 3 */
    CHECK(!rmem_seq_set_state_hybrid(hybrid, 0, block, 3, &r));
    CHECK_ERR("its rows end at position -1, 3 was expected");
    CHECK(rmem_seq_pos_max(hybrid, 0) == -1);
    rmem_free(hybrid);
    rmem_free(plain);
    run(8, 4, 30, 4000);
    run(3, 1, 60, 4000);
    run(8, 16, 6, 3000);
    return test_finish("test_memory_hybrid");
}
