/*
 * Property test of the recurrent memory: random operations driven through the memory with the
 * toy model of toy.h, checked after every step against a reference that keeps, per sequence,
 * the state folded straight from that sequence's own token history (no cells, no sharing).
 *
 * Operations: decode batches over random sets of sequences (random token counts, interleaved,
 * sequences coupled on one token, explicit or automatic positions, random n_ubatch), forks,
 * whole and partial removals, keep, position shifts, moving a sequence through its serialised
 * state, whole-memory round trips, and invalid or oversized batches that must change nothing.
 *
 * After every step: the memory's invariants hold; every sequence's rows equal the reference
 * state bit for bit; seq_pos_max matches; sequences that share a history share a cell (copy on
 * write really shares) and sequences with different histories do not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "memory/memory.h"
#include "test.h"
#include "toy.h"

#define N_LAYER 2
#define N_VOCAB 1000
#define REF_N   14 /* elements of one sequence's whole state: 3+5 + 2+4 */
#define STEPS   10000

static const uint32_t K_ROW[N_LAYER] = {3, 2};
static const uint32_t V_ROW[N_LAYER] = {5, 4};

struct ref_seq {
    int has;
    int32_t pos;
    int32_t group; /* sequences in one group were forked from one state and not decoded since */
    float st[REF_N];
};

struct sim {
    struct rmem *mem;
    uint32_t n_seq, n_cells;
    struct ref_seq *ref;
    int32_t next_group;
    unsigned long long rng;
    int failed; /* stop checking a run after its first failure: one report is enough */
    /* statistics, to show that every kind of step really happened */
    long n_decoded, n_no_room, n_invalid, n_moved, n_move_failed, n_coupled;
};

static void ref_fold(float *st, int32_t token) {
    size_t off = 0;
    for (uint32_t il = 0; il < N_LAYER; il++) {
        for (uint32_t e = 0; e < K_ROW[il]; e++, off++)
            st[off] = toy_step(st[off], token, e, il, 0);
        for (uint32_t e = 0; e < V_ROW[il]; e++, off++)
            st[off] = toy_step(st[off], token, e, il, 1);
    }
}

static int rnd(struct sim *s, int n) {
    return test_rand_int(&s->rng, n);
}

/* ---- checking ---------------------------------------------------------------------------- */

static void check_all(struct sim *s, const char *after) {
    if (s->failed) return;
    char why[256] = "";
    if (!rmem_check(s->mem)) snprintf(why, sizeof why, "%s", rcore_error_get());
    float row[8];
    for (uint32_t q = 0; q < s->n_seq && !why[0]; q++) {
        const struct ref_seq *r = &s->ref[q];
        int32_t pos = rmem_seq_pos_max(s->mem, (int32_t)q);
        int32_t tail = rmem_seq_tail(s->mem, (int32_t)q);
        if (pos != (r->has ? r->pos : -1) || (tail >= 0) != (r->has != 0)) {
            snprintf(why, sizeof why, "sequence %u: pos_max %d tail %d, expected %s pos %d", q, pos,
                     tail, r->has ? "state at" : "none,", r->has ? r->pos : -1);
            break;
        }
        if (!r->has) continue;
        size_t off = 0;
        for (uint32_t il = 0; il < N_LAYER && !why[0]; il++) {
            for (int is_v = 0; is_v < 2 && !why[0]; is_v++) {
                enum rcore_type type = is_v ? rmem_type_v(s->mem) : rmem_type_k(s->mem);
                size_t rb = is_v ? rmem_v_row_bytes(s->mem, il) : rmem_k_row_bytes(s->mem, il);
                uint32_t n = is_v ? V_ROW[il] : K_ROW[il];
                const uint8_t *base = is_v ? rmem_v_data(s->mem, il) : rmem_k_data(s->mem, il);
                rcore_row_to_f32(type, row, base + (size_t)tail * rb, n);
                for (uint32_t e = 0; e < n; e++, off++)
                    if (row[e] != r->st[off])
                        snprintf(why, sizeof why,
                                 "sequence %u layer %u %s[%u] = %g, its history gives %g", q, il,
                                 is_v ? "V" : "K", e, row[e], r->st[off]);
            }
        }
        /* sharing: same group <=> same cell */
        for (uint32_t p = 0; p < q && !why[0]; p++) {
            if (!s->ref[p].has) continue;
            int same_group = s->ref[p].group == r->group;
            int same_cell = rmem_seq_tail(s->mem, (int32_t)p) == tail;
            if (same_group != same_cell)
                snprintf(why, sizeof why, "sequences %u and %u: %s history but %s cell", p, q,
                         same_group ? "shared" : "different", same_cell ? "one" : "different");
        }
    }
    CHECK_MSG(!why[0], "after %s: %s", after, why);
    if (why[0]) s->failed = 1;
}

/* ---- batches ----------------------------------------------------------------------------- */

#define MAX_TOK 64

struct tbatch {
    int32_t n;
    int32_t token[MAX_TOK];
    int32_t pos[MAX_TOK];
    int32_t n_seq_id[MAX_TOK];
    int32_t ids[MAX_TOK][8];
    int32_t *seq_ptr[MAX_TOK];
    int8_t logits[MAX_TOK];
    int use_pos;
};

static struct rbatch_in tbatch_in(struct tbatch *b) {
    for (int32_t i = 0; i < b->n; i++) b->seq_ptr[i] = b->ids[i];
    struct rbatch_in in = {b->n,        b->token,   NULL,     b->use_pos ? b->pos : NULL,
                           b->n_seq_id, b->seq_ptr, b->logits};
    return in;
}

struct unit {
    int32_t seqs[8];
    int n_seqs;
    int n_tok;  /* tokens left to emit */
    int parent; /* unit that must be exhausted first, or -1 */
};

/* Builds a valid batch over random disjoint sets of sequences. */
static void gen_batch(struct sim *s, struct tbatch *b) {
    struct unit units[32];
    int n_units = 0;
    char *taken = calloc(s->n_seq, 1);
    int32_t *next_pos = malloc(sizeof(int32_t) * s->n_seq);
    REQUIRE(taken && next_pos);
    memset(b, 0, sizeof *b);
    b->use_pos = rnd(s, 4) != 0;

    /* with fewer cells than sequences, wide batches would nearly always lack room */
    uint32_t widest = s->n_seq < 6 ? s->n_seq : 6;
    if (s->n_cells < s->n_seq && widest > s->n_cells) widest = s->n_cells;
    int n_streams = 1 + rnd(s, (int)widest);
    for (int k = 0; k < n_streams && n_units < 24; k++) {
        int32_t a = rnd(s, (int)s->n_seq);
        if (taken[a]) continue;
        struct unit *u = &units[n_units];
        u->n_seqs = 0;
        u->parent = -1;
        u->seqs[u->n_seqs++] = a;
        taken[a] = 1;
        if (rnd(s, 3) == 0) { /* couple sequences holding the same state (or all empty) */
            for (uint32_t q = 0; q < s->n_seq && u->n_seqs < 4; q++) {
                const struct ref_seq *ra = &s->ref[a], *rq = &s->ref[q];
                int same = ra->has ? (rq->has && rq->group == ra->group) : !rq->has;
                if (!taken[q] && same && rnd(s, 2)) {
                    u->seqs[u->n_seqs++] = (int32_t)q;
                    taken[q] = 1;
                }
            }
        }
        u->n_tok = 1 + rnd(s, 4);
        int32_t start = s->ref[a].has ? s->ref[a].pos + 1 : (b->use_pos ? rnd(s, 4) : 0);
        for (int j = 0; j < u->n_seqs; j++) next_pos[u->seqs[j]] = start;
        int parent = n_units++;
        if (u->n_seqs > 1 && rnd(s, 3) == 0) { /* the members then go on alone */
            int n_members = u->n_seqs;
            int32_t members[8];
            memcpy(members, u->seqs, sizeof members);
            for (int j = 0; j < n_members && n_units < 32; j++) {
                struct unit *v = &units[n_units++];
                v->n_seqs = 1;
                v->seqs[0] = members[j];
                v->n_tok = 1 + rnd(s, 3);
                v->parent = parent;
            }
        }
    }
    /* interleave: emit one token of a random unit whose parent is exhausted */
    for (;;) {
        int ready[32], n_ready = 0;
        for (int u = 0; u < n_units; u++)
            if (units[u].n_tok > 0 && (units[u].parent < 0 || units[units[u].parent].n_tok == 0))
                ready[n_ready++] = u;
        if (n_ready == 0 || b->n == MAX_TOK) break;
        struct unit *u = &units[ready[rnd(s, n_ready)]];
        int32_t i = b->n++;
        b->token[i] = rnd(s, N_VOCAB);
        b->pos[i] = next_pos[u->seqs[0]];
        b->n_seq_id[i] = u->n_seqs;
        for (int j = 0; j < u->n_seqs; j++) {
            b->ids[i][j] = u->seqs[j];
            next_pos[u->seqs[j]]++;
        }
        b->logits[i] = (int8_t)rnd(s, 2);
        u->n_tok--;
    }
    free(taken);
    free(next_pos);
}

/* Applies a batch to the reference: fold tokens in batch order, then regroup. */
static void ref_apply(struct sim *s, const struct tbatch *b) {
    int32_t *tokens_alone = calloc(s->n_seq, sizeof(int32_t));
    int32_t *joint_group = malloc(sizeof(int32_t) * s->n_seq);
    REQUIRE(tokens_alone && joint_group);
    for (int32_t i = 0; i < b->n; i++) {
        for (int j = 0; j < b->n_seq_id[i]; j++) {
            struct ref_seq *r = &s->ref[b->ids[i][j]];
            if (!r->has) memset(r->st, 0, sizeof r->st);
            ref_fold(r->st, b->token[i]);
            r->has = 1;
            r->pos = b->pos[i];
            if (b->n_seq_id[i] == 1) tokens_alone[b->ids[i][0]]++;
        }
    }
    /* sequences whose last token was joint share a new state; the others have their own */
    for (uint32_t q = 0; q < s->n_seq; q++) joint_group[q] = -1;
    for (int32_t i = b->n; i-- > 0;) {
        if (b->n_seq_id[i] < 2) continue;
        int32_t g = -1;
        for (int j = 0; j < b->n_seq_id[i]; j++) {
            int32_t q = b->ids[i][j];
            if (tokens_alone[q] || joint_group[q] >= 0) continue;
            if (g < 0) g = s->next_group++;
            joint_group[q] = g;
        }
        if (g >= 0) s->n_coupled++;
    }
    for (int32_t i = 0; i < b->n; i++)
        for (int j = 0; j < b->n_seq_id[i]; j++) {
            int32_t q = b->ids[i][j];
            s->ref[q].group = joint_group[q] >= 0 ? joint_group[q] : -2 - q; /* fixed below */
        }
    for (uint32_t q = 0; q < s->n_seq; q++)
        if (s->ref[q].group <= -2) s->ref[q].group = s->next_group++;
    free(tokens_alone);
    free(joint_group);
}

/* Distinct states the reference will hold after the batch. */
static uint32_t states_after(struct sim *s, const struct tbatch *b) {
    struct ref_seq *saved = malloc(sizeof(struct ref_seq) * s->n_seq);
    REQUIRE(saved);
    memcpy(saved, s->ref, sizeof(struct ref_seq) * s->n_seq);
    int32_t saved_next = s->next_group;
    long saved_coupled = s->n_coupled;
    ref_apply(s, b);
    uint32_t n = 0;
    for (uint32_t q = 0; q < s->n_seq; q++) {
        if (!s->ref[q].has) continue;
        int first = 1;
        for (uint32_t p = 0; p < q; p++)
            if (s->ref[p].has && s->ref[p].group == s->ref[q].group) first = 0;
        n += (uint32_t)first;
    }
    memcpy(s->ref, saved, sizeof(struct ref_seq) * s->n_seq);
    s->next_group = saved_next;
    s->n_coupled = saved_coupled;
    free(saved);
    return n;
}

static void op_decode(struct sim *s) {
    struct tbatch b;
    gen_batch(s, &b);
    if (b.n == 0) return;
    struct rbatch_in in = tbatch_in(&b);
    struct rmem_batch_params bp = {(uint32_t)(1 + rnd(s, 12)), N_VOCAB, false, rnd(s, 4) == 0};
    uint64_t before = rmem_fingerprint(s->mem);
    uint32_t need = states_after(s, &b);
    struct rmem_bctx *ctx = NULL;
    enum rmem_status st = rmem_init_batch(s->mem, &in, &bp, &ctx);
    if (st == RMEM_NO_ROOM) {
        s->n_no_room++;
        CHECK_MSG(s->n_cells < s->n_seq, "no room with %u cells for %u sequences", s->n_cells,
                  s->n_seq);
        CHECK_MSG(rmem_fingerprint(s->mem) == before, "a batch without room changed the memory");
        CHECK_ERR("no room");
        return;
    }
    CHECK_MSG(st == RMEM_OK, "decode status %d: %s", (int)st, rcore_error_get());
    if (st != RMEM_OK) {
        s->failed = 1;
        return;
    }
    CHECK_MSG(need <= s->n_cells, "a batch needing %u states fit in %u cells", need, s->n_cells);
    /* out_ids: exactly the tokens that asked, each once */
    int32_t n_out;
    const int32_t *out = rmem_bctx_out_ids(ctx, &n_out);
    int32_t want_out = 0;
    for (int32_t i = 0; i < b.n; i++) want_out += bp.logits_all || b.logits[i];
    int ok_out = n_out == want_out;
    for (int32_t r = 0; r < n_out && ok_out; r++)
        ok_out = out[r] >= 0 && out[r] < b.n && (bp.logits_all || b.logits[out[r]]);
    CHECK_MSG(ok_out, "out_ids: %d rows for %d outputs", n_out, want_out);
    do {
        if (!rmem_bctx_apply(ctx)) {
            CHECK_MSG(0, "apply failed after a successful prepare: %s", rcore_error_get());
            s->failed = 1;
            break;
        }
        REQUIRE(toy_compute(s->mem, rmem_bctx_ubatch(ctx)));
    } while (rmem_bctx_next(ctx));
    rmem_bctx_free(ctx);
    ref_apply(s, &b);
    s->n_decoded++;
}

/* A valid batch with one thing broken: refused, memory untouched. */
static void op_invalid(struct sim *s) {
    struct tbatch b;
    gen_batch(s, &b);
    if (b.n == 0) return;
    b.use_pos = 1;
    int32_t t = rnd(s, b.n);
    const char *expect = "";
    switch (rnd(s, 6)) {
    case 0:
        b.token[t] = N_VOCAB + rnd(s, 5);
        expect = "token id";
        break;
    case 1:
        b.ids[t][0] = rnd(s, 2) ? (int32_t)s->n_seq : -1;
        expect = "sequence id";
        break;
    case 2: { /* a position that does not follow: move the last token of a sequence that holds
                 a state, or any token after the first of its sequence in the batch */
        int32_t q = b.ids[t][0];
        int first = 1;
        for (int32_t i = 0; i < t; i++)
            for (int j = 0; j < b.n_seq_id[i]; j++) first &= b.ids[i][j] != q;
        if (first && !s->ref[q].has) return;
        b.pos[t] += 1 + rnd(s, 3);
        expect = "position";
        break;
    }
    case 3:
        b.n = 0;
        expect = "empty";
        break;
    case 4:
        b.pos[t] = -1 - rnd(s, 3);
        expect = "position";
        break;
    default: { /* couple two sequences that hold different states */
        int32_t a = b.ids[t][0];
        expect = NULL;
        for (uint32_t q = 0; q < s->n_seq && !expect; q++) {
            if (b.n_seq_id[t] >= 8 || (int32_t)q == a || !s->ref[q].has || !s->ref[a].has ||
                s->ref[q].group == s->ref[a].group)
                continue;
            int elsewhere = 0; /* q must be new to the batch, so that only coupling is wrong */
            for (int32_t i = 0; i < b.n; i++)
                for (int j = 0; j < b.n_seq_id[i]; j++) elsewhere |= b.ids[i][j] == (int32_t)q;
            if (elsewhere) continue;
            b.ids[t][b.n_seq_id[t]++] = (int32_t)q;
            /* when their positions disagree too, the validator may name that first */
            expect = b.pos[t] == s->ref[q].pos + 1 ? "share" : "batch token";
        }
        if (!expect) return;
    }
    }
    struct rbatch_in in = tbatch_in(&b);
    struct rmem_batch_params bp = {(uint32_t)(1 + rnd(s, 12)), N_VOCAB, false, false};
    uint64_t before = rmem_fingerprint(s->mem);
    struct rmem_bctx *ctx = NULL;
    enum rmem_status st = rmem_init_batch(s->mem, &in, &bp, &ctx);
    CHECK_MSG(st == RMEM_INVALID && ctx == NULL, "broken batch (%s) got status %d", expect,
              (int)st);
    CHECK_MSG(strstr(rcore_error_get(), expect) != NULL, "error \"%s\" should mention \"%s\"",
              rcore_error_get(), expect);
    CHECK_MSG(rmem_fingerprint(s->mem) == before, "an invalid batch changed the memory");
    if (ctx) rmem_bctx_free(ctx);
    s->n_invalid++;
}

/* ---- other operations -------------------------------------------------------------------- */

static void ref_clear(struct ref_seq *r) {
    r->has = 0;
    r->pos = -1;
    r->group = -1;
}

static void op_fork(struct sim *s) {
    int32_t a = rnd(s, (int)s->n_seq), d = rnd(s, (int)s->n_seq);
    rmem_seq_cp(s->mem, a, d, -1, -1);
    if (a != d) s->ref[d] = s->ref[a];
}

static void op_remove(struct sim *s) {
    int32_t a = rnd(s, (int)s->n_seq);
    struct ref_seq *r = &s->ref[a];
    if (r->has && r->pos >= 1 && rnd(s, 2)) { /* a cut in the middle is refused */
        uint64_t before = rmem_fingerprint(s->mem);
        int32_t p0 = 1 + rnd(s, r->pos);
        CHECK(!rmem_seq_rm(s->mem, a, p0, -1));
        CHECK(!rmem_seq_rm(s->mem, a, 0, r->pos));
        CHECK(rmem_seq_rm(s->mem, a, r->pos + 1, -1)); /* past the state: nothing to do */
        CHECK(rmem_fingerprint(s->mem) == before);
        return;
    }
    CHECK(rmem_seq_rm(s->mem, a, -1, -1));
    ref_clear(r);
}

static void op_shift(struct sim *s) {
    int32_t a = rnd(s, (int)s->n_seq);
    if (!s->ref[a].has) return;
    int32_t g = s->ref[a].group;
    if (rnd(s, 4) == 0) {
        rmem_seq_div(s->mem, a, -1, -1, 2);
        for (uint32_t q = 0; q < s->n_seq; q++)
            if (s->ref[q].has && s->ref[q].group == g) s->ref[q].pos /= 2;
        return;
    }
    int32_t delta = rnd(s, 9) - 3;
    rmem_seq_add(s->mem, a, -1, -1, delta);
    for (uint32_t q = 0; q < s->n_seq; q++) {
        struct ref_seq *r = &s->ref[q];
        if (!r->has || r->group != g) continue;
        r->pos += delta;
        if (r->pos < 0) ref_clear(r);
    }
}

static void op_keep(struct sim *s) {
    int32_t a = rnd(s, (int)s->n_seq);
    rmem_seq_keep(s->mem, a);
    for (uint32_t q = 0; q < s->n_seq; q++)
        if ((int32_t)q != a) ref_clear(&s->ref[q]);
}

/* Moves sequence a into sequence d through a one-sequence stream (buffer or file). */
static void op_move(struct sim *s) {
    int32_t a = rnd(s, (int)s->n_seq), d = rnd(s, (int)s->n_seq);
    size_t size = rmem_state_size(s->mem, a);
    uint8_t *buf = malloc(size);
    REQUIRE(buf && size > 0);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, size);
    CHECK(rmem_state_write(s->mem, &w, a) && w.n_done == size);
    struct ref_seq moved = s->ref[a];
    CHECK(rmem_seq_rm(s->mem, a, -1, -1));
    ref_clear(&s->ref[a]);

    struct rio_reader r;
    rio_reader_buffer(&r, buf, size);
    if (rmem_state_read(s->mem, &r, d)) {
        s->ref[d] = moved;
        s->ref[d].group = s->next_group++;
        if (!moved.has) ref_clear(&s->ref[d]);
        s->n_moved++;
    } else {
        /* only a full memory may refuse a good stream; the target is then empty */
        CHECK_ERR("no free cell");
        CHECK(s->n_cells < s->n_seq);
        ref_clear(&s->ref[d]);
        s->n_move_failed++;
    }
    free(buf);
}

/* Writes the whole memory, wipes it, reads it back: nothing may change for the reference. */
static void op_roundtrip(struct sim *s) {
    size_t size = rmem_state_size(s->mem, -1);
    struct rio_writer w;
    struct rio_reader r;
    if (rnd(s, 2)) {
        uint8_t *buf = malloc(size);
        REQUIRE(buf);
        rio_writer_buffer(&w, buf, size);
        CHECK(rmem_state_write(s->mem, &w, -1));
        rmem_clear(s->mem, true);
        rio_reader_buffer(&r, buf, size);
        CHECK_MSG(rmem_state_read(s->mem, &r, -1), "%s", rcore_error_get());
        free(buf);
    } else {
        FILE *f = tmpfile();
        REQUIRE(f);
        rio_writer_file(&w, f);
        CHECK(rmem_state_write(s->mem, &w, -1) && w.n_done == size);
        rewind(f);
        rmem_clear(s->mem, rnd(s, 2));
        rio_reader_file(&r, f);
        CHECK_MSG(rmem_state_read(s->mem, &r, -1), "%s", rcore_error_get());
        fclose(f);
    }
}

static void run(uint32_t n_seq, uint32_t n_cells, enum rcore_type tk, enum rcore_type tv,
                unsigned long long seed) {
    struct rmem_params p = {N_LAYER, K_ROW, V_ROW, tk, tv, n_cells, n_seq, NULL};
    struct sim s = {0};
    s.mem = rmem_create(&p);
    REQUIRE(s.mem);
    s.n_seq = n_seq;
    s.n_cells = n_cells;
    s.rng = seed;
    s.ref = calloc(n_seq, sizeof(struct ref_seq));
    REQUIRE(s.ref);
    for (uint32_t q = 0; q < n_seq; q++) ref_clear(&s.ref[q]);

    static const char *names[] = {"decode", "invalid", "fork", "remove",
                                  "shift",  "move",    "keep", "roundtrip"};
    for (int step = 0; step < STEPS && !s.failed; step++) {
        int x = rnd(&s, 100), op;
        op = x < 45   ? 0
             : x < 53 ? 1
             : x < 66 ? 2
             : x < 78 ? 3
             : x < 85 ? 4
             : x < 95 ? 5
             : x < 96 ? 6
                      : 7;
        switch (op) {
        case 0:
            op_decode(&s);
            break;
        case 1:
            op_invalid(&s);
            break;
        case 2:
            op_fork(&s);
            break;
        case 3:
            op_remove(&s);
            break;
        case 4:
            op_shift(&s);
            break;
        case 5:
            op_move(&s);
            break;
        case 6:
            op_keep(&s);
            break;
        default:
            op_roundtrip(&s);
            break;
        }
        check_all(&s, names[op]);
        if (s.failed) fprintf(stderr, "  (seed %llu, step %d)\n", seed, step);
    }
    fprintf(stderr,
            "  n_seq %4u cells %4u %s/%s seed %llu: %ld batches (%ld coupled), %ld without "
            "room, %ld invalid, %ld moves (%ld refused)\n",
            n_seq, n_cells, rcore_type_name(tk), rcore_type_name(tv), seed, s.n_decoded,
            s.n_coupled, s.n_no_room, s.n_invalid, s.n_moved, s.n_move_failed);
    /* every kind of step must really have been exercised */
    CHECK(s.n_decoded > STEPS / 8);
    CHECK(s.n_invalid > STEPS / 50);
    CHECK(s.n_moved > 0);
    if (n_seq > 1) CHECK(s.n_coupled > 0);
    if (n_cells < n_seq) CHECK(s.n_no_room > 0);
    free(s.ref);
    rmem_free(s.mem);
}

static void test_property(void) {
    const unsigned long long seeds[] = {1, 2, 3};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        run(1, 1, RCORE_TYPE_F32, RCORE_TYPE_F32, seeds[i]);
        run(4, 4, RCORE_TYPE_F16, RCORE_TYPE_BF16, seeds[i]);
        run(4, 2, RCORE_TYPE_F32, RCORE_TYPE_F16, seeds[i]);
        run(64, 64, RCORE_TYPE_BF16, RCORE_TYPE_F32, seeds[i]);
        run(64, 24, RCORE_TYPE_F32, RCORE_TYPE_F32, seeds[i]);
    }
}

int main(void) {
    RUN(test_property);
    return test_finish("test_memory_property");
}
