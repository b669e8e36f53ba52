/*
 * Rollback of a sequence's tail (n_rollback, checkpoint_every; recur_memory_seq_rm with p0 > 0)
 * through the public API, on a random-weight model of tests/model/make_models.sh:
 *   test_rollback MODEL
 * After a rollback, decoding goes on exactly as decoding the kept history alone; a rollback
 * without a snapshot changes nothing; the budget holds; saved states keep their snapshots; and
 * a property test mixes rollbacks with forks, whole removals, state round trips and batches of
 * several sequences, against a model of which snapshots the memory keeps written here from the
 * documented rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "test.h"
#include "model_util.h"

static struct recur_context_params rollback_params(uint32_t n_rollback, uint32_t every) {
    struct recur_context_params p = recur_context_default_params();
    p.n_rollback = n_rollback;
    p.checkpoint_every = every;
    return p;
}

/* Decodes one more token on seq and checks its logits against the history decoded alone. */
static void check_next(struct recur_context *ctx, int32_t seq, struct hist *h, const char *what) {
    int32_t t = test_rand_int(&rng, V);
    CHECK(decode_seq(ctx, seq, &t, 1, false) == 0);
    hist_add(h, &t, 1);
    check_alone(ctx, -1, h, what);
}

static uint8_t *state_of(struct recur_context *ctx, size_t *n) {
    *n = recur_state_get_size(ctx);
    uint8_t *buf = malloc(*n);
    REQUIRE(buf && recur_state_get_data(ctx, buf, *n) == *n);
    return buf;
}

static void test_drafts(void) {
    struct recur_context_params p = rollback_params(8, 0);
    struct recur_context *ctx = new_ctx_with(model, 2, 512, &p);
    recur_memory_t mem = recur_get_memory(ctx);
    struct hist h = {0};
    int32_t t[16];
    random_tokens(t, 15, V);
    CHECK(decode_seq(ctx, 0, t, 10, false) == 0);    /* the prompt, positions 0..9 */
    CHECK(decode_seq(ctx, 0, t + 10, 5, true) == 0); /* five drafts, 10..14, in one batch */
    CHECK(recur_memory_seq_pos_max(mem, 0) == 14);
    CHECK(recur_memory_seq_pos_min(mem, 0) == 7); /* the last 8 positions can be returned to */

    /* keep two drafts: back to the state after position 11 */
    CHECK_MSG(recur_memory_seq_rm(mem, 0, 12, -1), "%s", recur_last_error());
    CHECK(recur_memory_seq_pos_max(mem, 0) == 11);
    hist_add(&h, t, 12);
    check_next(ctx, 0, &h, "after a rollback of three drafts");
    check_next(ctx, 0, &h, "two tokens after it");

    /* no snapshot before position 5 (7..13 are kept): refused, nothing changes */
    size_t n0, n1;
    uint8_t *before = state_of(ctx, &n0);
    CHECK(!recur_memory_seq_rm(mem, 0, 5, -1));
    CHECK_ERR("no snapshot before it");
    uint8_t *after = state_of(ctx, &n1);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* a tail past the state removes nothing and succeeds; a middle cut stays refused */
    CHECK(recur_memory_seq_rm(mem, 0, 14, -1) && recur_memory_seq_pos_max(mem, 0) == 13);
    CHECK(!recur_memory_seq_rm(mem, 0, 9, 11));

    /* rolling back to the same snapshot twice gives the same logits */
    CHECK(recur_memory_seq_rm(mem, 0, 11, -1) && recur_memory_seq_pos_max(mem, 0) == 10);
    h.n = 11;
    check_next(ctx, 0, &h, "second rollback");
    CHECK(recur_memory_seq_rm(mem, 0, 11, -1) && recur_memory_seq_pos_max(mem, 0) == 10);
    h.n = 11;
    check_next(ctx, 0, &h, "third rollback to the same position");

    /* removing the whole sequence drops its snapshots */
    CHECK(recur_memory_seq_rm(mem, 0, -1, -1));
    CHECK(recur_memory_seq_pos_min(mem, 0) == -1 && recur_memory_seq_pos_max(mem, 0) == -1);
    recur_free(ctx);
}

/* A saved context state keeps the snapshots: after loading it, a rollback still works. */
static void test_state_files(void) {
    struct recur_context_params p = rollback_params(4, 0);
    struct recur_context *ctx = new_ctx_with(model, 2, 512, &p);
    int32_t t[12];
    random_tokens(t, 12, V);
    CHECK(decode_seq(ctx, 0, t, 8, false) == 0);
    size_t n;
    uint8_t *buf = state_of(ctx, &n);
    struct recur_context *ctx2 = new_ctx_with(model, 2, 512, &p);
    CHECK(recur_state_set_data(ctx2, buf, n) == n);
    recur_memory_t m2 = recur_get_memory(ctx2);
    CHECK(recur_memory_seq_pos_min(m2, 0) == 4 && recur_memory_seq_pos_max(m2, 0) == 7);
    CHECK(recur_memory_seq_rm(m2, 0, 6, -1) && recur_memory_seq_pos_max(m2, 0) == 5);
    struct hist h = {0};
    hist_add(&h, t, 6);
    check_next(ctx2, 0, &h, "rollback after a state load");
    /* a context without rollback takes the state and leaves the snapshots out */
    struct recur_context *plain = new_ctx(model, 2, 512);
    CHECK_MSG(recur_state_set_data(plain, buf, n) == n, "%s", recur_last_error());
    CHECK(recur_memory_seq_pos_min(recur_get_memory(plain), 0) == 7);
    CHECK(!recur_memory_seq_rm(recur_get_memory(plain), 0, 6, -1));
    free(buf);
    recur_free(plain);
    recur_free(ctx2);
    recur_free(ctx);
}

static void test_checkpoints(void) {
    struct recur_context_params p = rollback_params(0, 4);
    struct recur_context *ctx = new_ctx_with(model, 1, 7, &p); /* prompt in ubatches of 7 */
    recur_memory_t mem = recur_get_memory(ctx);
    int32_t t[24];
    random_tokens(t, 20, V);
    CHECK(decode_seq(ctx, 0, t, 20, false) == 0);
    CHECK(recur_memory_seq_pos_min(mem, 0) == 3); /* checkpoints at 3, 7, 11, 15, 19 */
    CHECK(recur_memory_seq_rm(mem, 0, 10, -1) && recur_memory_seq_pos_max(mem, 0) == 7);
    /* decode the rest of the prompt again: the same logits as the whole prompt at once */
    CHECK(decode_seq(ctx, 0, t + 8, 12, false) == 0);
    float *ref = alone(model, t, 20);
    CHECK_MSG(rel_err(recur_get_logits_ith(ctx, -1), ref + (size_t)19 * V, V) < SAME,
              "checkpoint then re-decode");
    free(ref);
    /* a prompt that diverges before the first checkpoint cannot go back */
    CHECK(!recur_memory_seq_rm(mem, 0, 2, -1));
    recur_free(ctx);
}

static void test_budget_and_sharing(void) {
    /* a budget below one snapshot is refused at creation, with the size it needs */
    struct recur_context_params p = rollback_params(4, 0);
    p.snapshot_bytes = 16;
    CHECK(recur_init_from_model(model, p) == NULL);
    CHECK_ERR("less than one snapshot");

    /* three snapshots' worth: no more are ever kept */
    p = rollback_params(8, 0);
    struct recur_context *probe = new_ctx_with(model, 1, 512, &p);
    const size_t block = rmem_snap_block_bytes((struct rmem *)recur_get_memory(probe));
    recur_free(probe);
    p.snapshot_bytes = 3 * block + block / 2;
    struct recur_context *ctx = new_ctx_with(model, 3, 512, &p);
    struct rmem *rm = (struct rmem *)recur_get_memory(ctx);
    int32_t t[12];
    random_tokens(t, 12, V);
    CHECK(decode_seq(ctx, 0, t, 6, false) == 0);
    CHECK(rmem_snap_count(rm, 0) == 3 && rmem_snap_bytes_live(rm) == 3 * block);
    CHECK(recur_memory_seq_pos_min(recur_get_memory(ctx), 0) == 3);

    /* a fork shares the snapshots (no copy); rolling the fork back while it shares its state
       gives it a cell of its own and leaves the original alone */
    recur_memory_seq_cp(recur_get_memory(ctx), 0, 1, -1, -1);
    CHECK(rmem_snap_bytes_live(rm) == 3 * block && rmem_snap_count(rm, 1) == 3);
    CHECK(recur_memory_seq_rm(recur_get_memory(ctx), 1, 5, -1));
    CHECK(recur_memory_seq_pos_max(recur_get_memory(ctx), 1) == 4);
    CHECK(recur_memory_seq_pos_max(recur_get_memory(ctx), 0) == 5);
    CHECK_MSG(rmem_check(rm), "%s", recur_last_error());
    struct hist h0 = {0}, h1 = {0};
    hist_add(&h0, t, 6);
    hist_add(&h1, t, 5);
    check_next(ctx, 1, &h1, "rolled-back fork");
    check_next(ctx, 0, &h0, "its original");
    CHECK(rmem_snap_bytes_live(rm) <= p.snapshot_bytes);
    recur_free(ctx);
}

/* ---- property test ------------------------------------------------------------------------ */

enum { NSEQ = 3, SCRATCH = 3, NROLL = 6, EVERY = 5, MAXPOS = 240 };

/* Which positions of a sequence have a snapshot, by the rules of recur.h: after a decode, the
 * last NROLL positions and every checkpoint ((p + 1) % EVERY == 0) of what was decoded;
 * dropped with the sequence, shared by seq_cp, cut back by a rollback. */
struct model_snaps {
    bool at[MAXPOS];
};

static bool keeps(int32_t p, int32_t last) {
    return p > last - NROLL || (p + 1) % EVERY == 0;
}

static void snaps_decoded(struct model_snaps *m, int32_t first, int32_t last) {
    for (int32_t p = first; p <= last; p++) m->at[p] = true;
    for (int32_t p = 0; p <= last; p++) m->at[p] = m->at[p] && keeps(p, last);
}

/* Decodes n random tokens on each sequence of seqs[0..k) in one batch. */
static void decode_many(struct recur_context *ctx, const int32_t *seqs, int k, int32_t n,
                        struct hist *h, struct model_snaps *ms) {
    struct recur_batch b = recur_batch_init(k * n, 0, 1);
    REQUIRE(b.pos);
    for (int32_t j = 0; j < n; j++) /* interleaved, as a server's step */
        for (int q = 0; q < k; q++)
            REQUIRE(recur_batch_add(&b, test_rand_int(&rng, V), h[seqs[q]].n + j, &seqs[q], 1,
                                    false) == 0);
    CHECK_MSG(recur_decode(ctx, b) == 0, "%s", recur_last_error());
    for (int q = 0; q < k; q++) {
        const int32_t s = seqs[q], first = h[s].n;
        for (int32_t j = 0; j < n; j++) hist_add(&h[s], &b.token[j * k + q], 1);
        snaps_decoded(&ms[s], first, h[s].n - 1);
    }
    recur_batch_free(b);
}

static void test_property(void) {
    struct recur_context_params p = rollback_params(NROLL, EVERY);
    struct recur_context *ctx = new_ctx_with(model, NSEQ + 1, 4, &p); /* ubatches of 4 */
    recur_memory_t mem = recur_get_memory(ctx);
    struct hist h[NSEQ + 1];
    struct model_snaps ms[NSEQ + 1];
    memset(h, 0, sizeof h);
    memset(ms, 0, sizeof ms);
    int rollbacks = 0, refused = 0, checks = 0;
    for (int step = 0; step < 160; step++) {
        const int32_t a = test_rand_int(&rng, NSEQ), b = test_rand_int(&rng, NSEQ);
        const int op = test_rand_int(&rng, 10);
        if (op < 4 || h[a].n == 0) { /* decode on one or two sequences */
            int32_t seqs[2] = {a, b};
            const int k = a != b && op % 2 ? 2 : 1;
            const int32_t n = 1 + test_rand_int(&rng, 5);
            if (h[a].n + n + 1 >= MAXPOS || h[b].n + n + 1 >= MAXPOS) continue;
            decode_many(ctx, seqs, k, n, h, ms);
        } else if (op < 7) { /* roll back to a random position */
            /* mostly within reach of the last NROLL positions, sometimes anywhere */
            int32_t p0 =
                op == 6 ? 1 + test_rand_int(&rng, h[a].n) : h[a].n - test_rand_int(&rng, NROLL + 2);
            if (p0 < 1) p0 = 1;
            int32_t want = -1;
            for (int32_t q = 0; q < p0 && q < h[a].n; q++)
                if (ms[a].at[q]) want = q;
            const bool past = p0 >= h[a].n; /* nothing to remove */
            const bool ok = recur_memory_seq_rm(mem, a, p0, -1);
            CHECK_MSG(ok == (past || want >= 0), "step %d: seq %d rm from %d: %d", step, a, p0, ok);
            if (ok && !past) {
                CHECK_MSG(recur_memory_seq_pos_max(mem, a) == want, "step %d: back to %d, want %d",
                          step, recur_memory_seq_pos_max(mem, a), want);
                h[a].n = want + 1;
                for (int32_t q = want + 1; q < MAXPOS; q++) ms[a].at[q] = false;
                rollbacks++;
            } else if (!ok) {
                refused++;
            }
        } else if (op == 7 && a != b) { /* fork */
            recur_memory_seq_cp(mem, a, b, -1, -1);
            h[b] = h[a];
            ms[b] = ms[a];
        } else if (op == 8) { /* remove whole */
            CHECK(recur_memory_seq_rm(mem, a, -1, -1));
            h[a].n = 0;
            memset(&ms[a], 0, sizeof ms[a]);
        } else { /* a state round trip into another id: the snapshots come with the state */
            const size_t n = recur_state_seq_get_size(ctx, a);
            uint8_t *buf = malloc(n);
            REQUIRE(buf);
            CHECK(recur_state_seq_get_data(ctx, buf, n, a) == n);
            CHECK(recur_state_seq_set_data(ctx, buf, n, b) == n);
            free(buf);
            h[b] = h[a];
            ms[b] = ms[a];
        }
        CHECK_MSG(rmem_check((struct rmem *)mem), "step %d: %s", step, recur_last_error());
        /* pos_min is the oldest snapshot (or the state's position) */
        for (int32_t s = 0; s < NSEQ; s++) {
            int32_t oldest = h[s].n - 1;
            for (int32_t q = h[s].n - 1; q >= 0; q--)
                if (ms[s].at[q]) oldest = q;
            CHECK_MSG(recur_memory_seq_pos_min(mem, s) == (h[s].n ? oldest : -1),
                      "step %d: seq %d pos_min %d, want %d", step, s,
                      recur_memory_seq_pos_min(mem, s), oldest);
        }
        /* every few steps: a fork of a sequence decodes on as its history alone */
        if (step % 6 == 5 && h[a].n > 0 && h[a].n + 1 < MAXPOS) {
            recur_memory_seq_cp(mem, a, SCRATCH, -1, -1);
            struct hist probe = h[a];
            check_next(ctx, SCRATCH, &probe, "property test");
            CHECK(recur_memory_seq_rm(mem, SCRATCH, -1, -1));
            checks++;
        }
    }
    CHECK_MSG(rollbacks > 10 && refused > 3 && checks > 10, "%d rollbacks, %d refused, %d checks",
              rollbacks, refused, checks);
    fprintf(stderr, "property test: %d rollbacks, %d refused, %d logit checks\n", rollbacks,
            refused, checks);
    recur_free(ctx);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_rollback MODEL\n");
        return 2;
    }
    model = recur_model_load_from_file(argv[1], recur_model_default_params());
    if (!model) fprintf(stderr, "%s\n", recur_last_error());
    REQUIRE(model);
    V = recur_model_n_vocab(model);
    RUN(test_drafts);
    RUN(test_checkpoints);
    RUN(test_state_files);
    RUN(test_budget_and_sharing);
    RUN(test_property);
    recur_model_free(model);
    return test_finish("test_rollback");
}
