/* Unit tests of the recurrent memory's operations, one behaviour at a time, edge cases
 * included. The random, long-running check is test_memory_property.c. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "test.h"
#include "toy.h"

#define N_VOCAB 100

static const uint32_t K_ROW[2] = {3, 2};
static const uint32_t V_ROW[2] = {5, 4};

static struct rmem *make(uint32_t n_seq, uint32_t n_cells) {
    struct rmem_params p = {2, K_ROW, V_ROW, RCORE_TYPE_F32, RCORE_TYPE_F32, n_cells, n_seq, NULL};
    struct rmem *mem = rmem_create(&p);
    REQUIRE(mem);
    return mem;
}

/* Decodes n tokens on sequence seq (positions follow what it holds) with the toy compute.
 * Returns the decode status. */
static enum rmem_status decode_seq(struct rmem *mem, int32_t seq, int32_t n, int32_t tok0) {
    int32_t tokens[64], nseq[64], ids[64];
    int32_t *ptr[64];
    REQUIRE(n <= 64);
    for (int32_t i = 0; i < n; i++) {
        tokens[i] = (tok0 + i) % N_VOCAB;
        nseq[i] = 1;
        ids[i] = seq;
        ptr[i] = &ids[i];
    }
    struct rbatch_in in = {n, tokens, NULL, NULL, nseq, ptr, NULL};
    struct rmem_batch_params bp = {16, N_VOCAB, false, false};
    struct rmem_bctx *ctx;
    enum rmem_status st = rmem_init_batch(mem, &in, &bp, &ctx);
    if (st != RMEM_OK) return st;
    do {
        REQUIRE(rmem_bctx_apply(ctx));
        REQUIRE(toy_compute(mem, rmem_bctx_ubatch(ctx)));
    } while (rmem_bctx_next(ctx));
    rmem_bctx_free(ctx);
    return RMEM_OK;
}

/* One token for each of the sequences seqs[0..n), one ubatch. */
static enum rmem_status decode_each(struct rmem *mem, const int32_t *seqs, int32_t n,
                                    uint32_t n_ubatch) {
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *nseq = malloc(sizeof(int32_t) * (size_t)n);
    int32_t **ptr = malloc(sizeof(int32_t *) * (size_t)n);
    REQUIRE(tokens && nseq && ptr);
    for (int32_t i = 0; i < n; i++) {
        tokens[i] = (seqs[i] * 7 + 3) % N_VOCAB;
        nseq[i] = 1;
        ptr[i] = (int32_t *)&seqs[i];
    }
    struct rbatch_in in = {n, tokens, NULL, NULL, nseq, ptr, NULL};
    struct rmem_batch_params bp = {n_ubatch, N_VOCAB, false, false};
    struct rmem_bctx *ctx;
    enum rmem_status st = rmem_init_batch(mem, &in, &bp, &ctx);
    if (st == RMEM_OK) {
        do {
            REQUIRE(rmem_bctx_apply(ctx));
            REQUIRE(toy_compute(mem, rmem_bctx_ubatch(ctx)));
        } while (rmem_bctx_next(ctx));
        rmem_bctx_free(ctx);
    }
    free(tokens);
    free(nseq);
    free(ptr);
    return st;
}

/* The K row of layer 0 of seq's state, first element (enough to tell states apart). */
static float k0(struct rmem *mem, int32_t seq) {
    int32_t c = rmem_seq_tail(mem, seq);
    REQUIRE(c >= 0);
    return ((float *)rmem_k_data(mem, 0))[(size_t)c * 3];
}

/* The compute's view: order is checked, new sequences read zeros, and a block whose states
 * stay in their cells is computed on the memory's own rows (no copy). */
static void test_layer_view(void) {
    struct rmem *mem = make(2, 4);
    struct rmem_layer st;
    rcore_error_clear();
    CHECK(!rmem_layer_begin(mem, 0, &st)); /* nothing placed yet */
    CHECK_ERR("no block is placed");
    const int32_t seqs[2] = {0, 1};
    REQUIRE(decode_each(mem, seqs, 2, 16) == RMEM_OK);
    /* the block of that decode is still placed: view it again */
    CHECK(!rmem_layer_begin(mem, 2, &st));
    CHECK_ERR("no such layer");
    REQUIRE(rmem_layer_begin(mem, 0, &st));
    CHECK(st.k_row == 3 && st.v_row == 5);
    /* in place: the view is the block's rows themselves */
    CHECK((void *)st.k == (void *)((float *)rmem_k_data(mem, 0) + (size_t)rmem_head(mem) * 3));
    /* every layer's states start on a 64-byte line (the kernels' vector loads; rcore_alloc64) */
    CHECK(((uintptr_t)rmem_k_data(mem, 0) & 63) == 0 && ((uintptr_t)rmem_v_data(mem, 0) & 63) == 0);
    CHECK(((uintptr_t)rmem_k_data(mem, 1) & 63) == 0 && ((uintptr_t)rmem_v_data(mem, 1) & 63) == 0);
    CHECK(!rmem_layer_begin(mem, 1, &st));
    CHECK_ERR("the previous layer was not ended");
    rmem_layer_end(mem, 0);
    REQUIRE(rmem_layer_begin(mem, 1, &st));
    CHECK(st.k_row == 2 && st.v_row == 4);
    rmem_layer_end(mem, 1);
    rmem_free(mem);

    /* f16 states are never in place: the view is a converted copy */
    struct rmem_params p = {2, K_ROW, V_ROW, RCORE_TYPE_F16, RCORE_TYPE_F16, 4, 2, NULL};
    mem = rmem_create(&p);
    REQUIRE(mem);
    REQUIRE(decode_each(mem, seqs, 2, 16) == RMEM_OK);
    REQUIRE(rmem_layer_begin(mem, 0, &st));
    CHECK((void *)st.k != rmem_k_data(mem, 0));
    CHECK(((uintptr_t)st.k & 63) == 0); /* the gather buffer: aligned too */
    rmem_layer_end(mem, 0);
    rmem_free(mem);
}

static void test_create(void) {
    uint32_t big[1] = {UINT32_MAX};
    uint32_t one[1] = {1};
    struct rmem_params p = {2, K_ROW, V_ROW, RCORE_TYPE_F16, RCORE_TYPE_BF16, 10, 4, NULL};
    struct rmem *mem = rmem_create(&p);
    REQUIRE(mem);
    CHECK(rmem_size(mem) == 10 && rmem_n_seq_max(mem) == 4 && rmem_n_layer(mem) == 2);
    CHECK(rmem_used(mem) == 0);
    /* (3+2) K elements and (5+4) V elements per cell, 2 bytes each, 10 cells */
    CHECK(rmem_bytes_k(mem) == 5 * 2 * 10);
    CHECK(rmem_bytes_v(mem) == 9 * 2 * 10);
    CHECK(rmem_bytes_total(mem) == 14 * 2 * 10);
    CHECK(rmem_k_row_bytes(mem, 1) == 4 && rmem_v_row_bytes(mem, 0) == 10);
    CHECK(rmem_can_shift(mem));
    rmem_free(mem);
    rmem_free(NULL);

    struct rmem_params bad = p;
    bad.n_layer = 0;
    CHECK(!rmem_create(&bad));
    CHECK_ERR("n_layer");
    bad = p, bad.n_cells = 0;
    CHECK(!rmem_create(&bad));
    CHECK_ERR("n_cells");
    bad = p, bad.n_seq_max = 0;
    CHECK(!rmem_create(&bad));
    CHECK_ERR("n_seq_max");
    bad = p, bad.type_v = (enum rcore_type)7;
    CHECK(!rmem_create(&bad));
    CHECK_ERR("type");
    bad = p, bad.k_row = NULL;
    CHECK(!rmem_create(&bad));
    CHECK_ERR("row");
    bad = (struct rmem_params){1, big, one, RCORE_TYPE_F32, RCORE_TYPE_F32, 1u << 24, 1, NULL};
    CHECK(!rmem_create(&bad));
    CHECK_ERR("layer 0");
    CHECK(!rmem_create(NULL));
}

static void test_seq_rm(void) {
    struct rmem *mem = make(4, 4);
    CHECK(decode_seq(mem, 1, 5, 0) == RMEM_OK); /* holds positions 0..4 */
    CHECK(rmem_seq_pos_min(mem, 1) == 4 && rmem_seq_pos_max(mem, 1) == 4);
    uint64_t fp = rmem_fingerprint(mem);

    /* cutting the state anywhere inside is refused, and nothing changes */
    CHECK(!rmem_seq_rm(mem, 1, 2, -1));
    CHECK_ERR("sequence 1");
    CHECK(!rmem_seq_rm(mem, 1, 4, 5));
    CHECK(!rmem_seq_rm(mem, 1, 0, 3));
    CHECK(!rmem_seq_rm(mem, 1, -1, 4));
    CHECK(!rmem_seq_rm(mem, 1, 5, 2)); /* inverted, p1 inside */
    CHECK(rmem_fingerprint(mem) == fp);
    /* ranges that miss the state are fine and change nothing */
    CHECK(rmem_seq_rm(mem, 1, 5, -1));
    CHECK(rmem_seq_rm(mem, 1, 9, 7));   /* inverted, both past */
    CHECK(rmem_seq_rm(mem, 1, 0, 0));   /* empty */
    CHECK(rmem_seq_rm(mem, 2, -1, -1)); /* a sequence with nothing */
    CHECK(rmem_fingerprint(mem) == fp);
    /* out of range ids */
    CHECK(!rmem_seq_rm(mem, 4, -1, -1));
    CHECK_ERR("out of range");
    CHECK(rmem_fingerprint(mem) == fp);
    /* every sequence: only all or nothing */
    CHECK(!rmem_seq_rm(mem, -1, 1, -1));
    CHECK(!rmem_seq_rm(mem, -1, 0, 10));
    CHECK(rmem_seq_rm(mem, -1, 3, 3));
    CHECK(rmem_fingerprint(mem) == fp);
    /* whole removal, with p1 past the end or open */
    CHECK(rmem_seq_rm(mem, 1, 0, 5));
    CHECK(rmem_seq_pos_max(mem, 1) == -1 && rmem_used(mem) == 0);
    CHECK(rmem_check(mem));

    CHECK(decode_seq(mem, 3, 2, 0) == RMEM_OK); /* the id at the limit */
    CHECK(decode_seq(mem, 0, 2, 0) == RMEM_OK);
    CHECK(rmem_used(mem) == 2);
    CHECK(rmem_seq_rm(mem, -1, -1, -1));
    CHECK(rmem_used(mem) == 0 && rmem_seq_pos_max(mem, 3) == -1 && rmem_seq_pos_max(mem, 0) == -1);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_seq_cp(void) {
    struct rmem *mem = make(4, 4);
    CHECK(decode_seq(mem, 0, 3, 10) == RMEM_OK);
    CHECK(decode_seq(mem, 2, 2, 50) == RMEM_OK);
    float s0 = k0(mem, 0), s2 = k0(mem, 2);
    CHECK(s0 != s2);
    uint64_t fp = rmem_fingerprint(mem);

    rmem_seq_cp(mem, 0, 0, -1, -1); /* onto itself: nothing */
    rmem_seq_cp(mem, 0, 4, -1, -1); /* out of range: nothing */
    rmem_seq_cp(mem, -1, 1, -1, -1);
    CHECK(rmem_fingerprint(mem) == fp);

    rmem_seq_cp(mem, 0, 1, -1, -1); /* a fork shares the cell, copies nothing */
    CHECK(rmem_seq_tail(mem, 1) == rmem_seq_tail(mem, 0));
    CHECK(rmem_used(mem) == 2 && rmem_seq_pos_max(mem, 1) == 2);

    rmem_seq_cp(mem, 0, 2, -1, -1); /* onto a live sequence: its own state goes */
    CHECK(rmem_seq_tail(mem, 2) == rmem_seq_tail(mem, 0));
    CHECK(rmem_used(mem) == 1 && k0(mem, 2) == s0 && rmem_seq_pos_max(mem, 2) == 2);

    rmem_seq_cp(mem, 3, 2, -1, -1); /* from an empty sequence: the destination empties */
    CHECK(rmem_seq_pos_max(mem, 2) == -1 && rmem_used(mem) == 1);
    CHECK(rmem_check(mem));

    /* copy on write: decoding the fork gives it a cell of its own; the source is untouched */
    CHECK(decode_seq(mem, 1, 1, 77) == RMEM_OK);
    CHECK(rmem_seq_tail(mem, 1) != rmem_seq_tail(mem, 0));
    CHECK(k0(mem, 0) == s0 && k0(mem, 1) != s0);
    CHECK(rmem_used(mem) == 2 && rmem_seq_pos_max(mem, 1) == 3 && rmem_seq_pos_max(mem, 0) == 2);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_seq_keep(void) {
    struct rmem *mem = make(4, 4);
    for (int32_t s = 0; s < 4; s++) CHECK(decode_seq(mem, s, 1 + s, s) == RMEM_OK);
    rmem_seq_cp(mem, 2, 1, -1, -1);
    float s2 = k0(mem, 2);
    rmem_seq_keep(mem, 2);
    CHECK(rmem_used(mem) == 1 && rmem_seq_pos_max(mem, 2) == 2 && k0(mem, 2) == s2);
    for (int32_t s = 0; s < 4; s++)
        if (s != 2) CHECK(rmem_seq_pos_max(mem, s) == -1);
    CHECK(rmem_check(mem));
    rmem_seq_keep(mem, 9); /* out of range: nothing is kept */
    CHECK(rmem_used(mem) == 0);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_seq_add_div(void) {
    struct rmem *mem = make(2, 2);
    CHECK(decode_seq(mem, 0, 6, 0) == RMEM_OK); /* pos 5 */
    float s0 = k0(mem, 0);
    rmem_seq_cp(mem, 0, 1, -1, -1);
    rmem_seq_add(mem, 0, 0, 5, 10); /* 5 is not in [0, 5): nothing */
    CHECK(rmem_seq_pos_max(mem, 0) == 5);
    rmem_seq_add(mem, 0, 5, 6, 10);
    CHECK(rmem_seq_pos_max(mem, 0) == 15);
    CHECK(rmem_seq_pos_max(mem, 1) == 15); /* the fork shares the state and its position */
    CHECK(k0(mem, 0) == s0);               /* the state itself does not move */
    rmem_seq_div(mem, 0, -1, -1, 4);
    CHECK(rmem_seq_pos_max(mem, 0) == 3);
    rmem_seq_div(mem, 0, -1, -1, 0); /* ignored */
    rmem_seq_div(mem, 0, 4, -1, 2);  /* out of range */
    CHECK(rmem_seq_pos_max(mem, 0) == 3);
    rmem_seq_add(mem, 7, -1, -1, 3); /* out of range id */
    rmem_seq_add(mem, 0, -1, -1, 0);
    CHECK(rmem_seq_pos_max(mem, 0) == 3);
    /* the next token must follow the moved position */
    CHECK(decode_seq(mem, 0, 1, 5) == RMEM_OK);
    CHECK(rmem_seq_pos_max(mem, 0) == 4 && rmem_seq_pos_max(mem, 1) == 3);
    /* shifted below zero: the state is dropped */
    rmem_seq_add(mem, 1, -1, -1, -4);
    CHECK(rmem_seq_pos_max(mem, 1) == -1 && rmem_used(mem) == 1);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_find_slot_block(void) {
    struct rmem *mem = make(8, 8);
    int32_t seqs[4] = {5, 1, 6, 2};
    CHECK(decode_each(mem, seqs, 4, 64) == RMEM_OK);
    uint32_t head = rmem_head(mem);
    CHECK(rmem_n(mem) == 4);
    /* the block holds the streams in order, all starting from zeros */
    for (uint32_t i = 0; i < 4; i++) {
        CHECK(rmem_seq_tail(mem, seqs[i]) == (int32_t)(head + i));
        CHECK(rmem_s_mask(mem, i) == 0.0f);
    }
    /* steady state: the same sequences again are computed in place */
    CHECK(decode_each(mem, seqs, 4, 64) == RMEM_OK);
    CHECK(rmem_head(mem) == head);
    for (uint32_t i = 0; i < 4; i++) {
        CHECK(rmem_s_copy(mem, i) == (int32_t)(head + i));
        CHECK(rmem_s_mask(mem, i) == 1.0f);
    }
    /* a fork decoded next to its source gathers from the shared cell */
    rmem_seq_cp(mem, 6, 0, -1, -1);
    int32_t shared = rmem_seq_tail(mem, 6);
    int32_t two[2] = {0, 3};
    CHECK(decode_each(mem, two, 2, 64) == RMEM_OK);
    CHECK(rmem_s_copy(mem, 0) == shared && rmem_s_mask(mem, 0) == 1.0f);
    CHECK(rmem_s_mask(mem, 1) == 0.0f);
    CHECK(rmem_seq_tail(mem, 6) == shared); /* the source keeps its cell */
    CHECK(rmem_seq_tail(mem, 0) != shared);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

/* Few cells, fragmented: placing a block must evict other states, rows and all. */
static void test_find_slot_evict(void) {
    struct rmem *mem = make(6, 4);
    int32_t order[4] = {0, 1, 2, 3};
    CHECK(decode_each(mem, order, 4, 1) == RMEM_OK); /* one per ubatch: cells fill up */
    float before[4];
    for (int32_t s = 0; s < 4; s++) before[s] = k0(mem, s);
    CHECK(rmem_seq_rm(mem, 1, -1, -1));
    CHECK(rmem_seq_rm(mem, 3, -1, -1));
    /* two free cells, not necessarily adjacent; a block of two must be made contiguous */
    int32_t pair[2] = {4, 5};
    CHECK(decode_each(mem, pair, 2, 64) == RMEM_OK);
    CHECK(rmem_seq_tail(mem, 5) == rmem_seq_tail(mem, 4) + 1);
    CHECK(k0(mem, 0) == before[0] && k0(mem, 2) == before[2]); /* moved states kept their rows */
    /* and a block of existing sequences, in a new order */
    int32_t mix[3] = {5, 0, 2};
    float b5 = k0(mem, 5);
    CHECK(decode_each(mem, mix, 3, 64) == RMEM_OK);
    float t5 = toy_step(b5, (5 * 7 + 3) % N_VOCAB, 0, 0, 0);
    float t0 = toy_step(before[0], (0 * 7 + 3) % N_VOCAB, 0, 0, 0);
    CHECK(k0(mem, 5) == t5 && k0(mem, 0) == t0);
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_no_room(void) {
    struct rmem *mem = make(4, 2);
    int32_t three[3] = {0, 1, 2};
    uint64_t fp = rmem_fingerprint(mem);
    CHECK(decode_each(mem, three, 3, 64) == RMEM_NO_ROOM);
    CHECK_ERR("no room");
    CHECK(rmem_fingerprint(mem) == fp);
    /* split into ubatches of one: the first two would fit, the third not; nothing may stay */
    CHECK(decode_each(mem, three, 3, 1) == RMEM_NO_ROOM);
    CHECK_ERR("ubatch 3 of 3");
    CHECK(rmem_fingerprint(mem) == fp);
    int32_t two[2] = {0, 1};
    CHECK(decode_each(mem, two, 2, 1) == RMEM_OK);
    CHECK(rmem_used(mem) == 2);
    /* forks need no cell until decoded */
    rmem_seq_cp(mem, 0, 2, -1, -1);
    rmem_seq_cp(mem, 0, 3, -1, -1);
    fp = rmem_fingerprint(mem);
    int32_t fork[1] = {2};
    CHECK(decode_each(mem, fork, 1, 64) == RMEM_NO_ROOM);
    CHECK(rmem_fingerprint(mem) == fp);
    /* once sequence 1 is gone there is room for the fork's copy */
    CHECK(rmem_seq_rm(mem, 1, -1, -1));
    CHECK(decode_each(mem, fork, 1, 64) == RMEM_OK);
    CHECK(rmem_used(mem) == 2 && rmem_seq_tail(mem, 3) == rmem_seq_tail(mem, 0));
    CHECK(rmem_check(mem));
    rmem_free(mem);
}

static void test_init_batch_errors(void) {
    struct rmem *mem = make(2, 2);
    int32_t tok[1] = {1}, nseq[1] = {1}, id[1] = {0};
    int32_t *ptr[1] = {id};
    struct rbatch_in in = {1, tok, NULL, NULL, nseq, ptr, NULL};
    struct rmem_batch_params bp = {0, N_VOCAB, false, false};
    struct rmem_bctx *ctx = (struct rmem_bctx *)&bp;
    CHECK(rmem_init_batch(mem, &in, &bp, &ctx) == RMEM_INVALID && ctx == NULL);
    CHECK_ERR("n_ubatch");
    bp.n_ubatch = 4;
    tok[0] = N_VOCAB;
    CHECK(rmem_init_batch(mem, &in, &bp, &ctx) == RMEM_INVALID && ctx == NULL);
    CHECK_ERR("token");
    tok[0] = 1;
    CHECK(rmem_init_batch(mem, &in, &bp, &ctx) == RMEM_OK && ctx);
    CHECK(rmem_bctx_n_ubatches(ctx) == 1);
    int32_t n_out;
    const int32_t *out = rmem_bctx_out_ids(ctx, &n_out);
    CHECK(n_out == 1 && out[0] == 0); /* logits NULL: the last token has output */
    CHECK(rmem_bctx_positions(ctx)[0] == 0);
    rmem_bctx_free(ctx);
    rmem_bctx_free(NULL);

    /* find_slot refuses a ubatch that is not an equal split */
    int32_t idx[1] = {0}, pos[1] = {0};
    int8_t outf[1] = {1};
    const int32_t *rows[1] = {id};
    struct rbatch_ubatch ub = {1, 0, 1, idx, tok, pos, outf, nseq, rows};
    CHECK(!rmem_find_slot(mem, &ub));
    CHECK_ERR("equal split");
    rmem_free(mem);
}

/* Every kind of invalid batch: status -1, a message naming the token, the memory bit-identical. */
static void test_invalid_batches(void) {
    struct rmem *mem = make(4, 4);
    CHECK(decode_seq(mem, 0, 3, 1) == RMEM_OK); /* sequence 0 at position 2 */
    CHECK(decode_seq(mem, 1, 1, 2) == RMEM_OK); /* sequence 1 at position 0 */
    const uint64_t fp = rmem_fingerprint(mem);

    enum { N = 3 };
    struct {
        const char *what;
        const char *message;
    } kinds[] = {
        {"empty", "empty"},
        {"token too big", "batch token 1"},
        {"token negative", "batch token 2"},
        {"no tokens nor embeddings", "neither token ids nor embeddings"},
        {"sequence id too big", "batch token 0"},
        {"sequence id negative", "batch token 1"},
        {"no sequence id", "batch token 2"},
        {"sequence id twice", "batch token 0"},
        {"position does not follow the state", "batch token 0"},
        {"position jumps within the batch", "batch token 2"},
        {"negative position", "batch token 0"},
        {"coupled sequences that hold different states", "share"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int32_t tokens[N] = {5, 6, 7}, pos[N] = {3, 4, 5}, nseq[N] = {1, 1, 1};
        int32_t ids[N][2] = {{0, 0}, {0, 0}, {0, 0}};
        int32_t *ptr[N] = {ids[0], ids[1], ids[2]};
        struct rbatch_in in = {N, tokens, NULL, pos, nseq, ptr, NULL};
        switch (k) {
        case 0:
            in.n_tokens = 0;
            break;
        case 1:
            tokens[1] = N_VOCAB;
            break;
        case 2:
            tokens[2] = -1;
            break;
        case 3:
            in.token = NULL;
            break;
        case 4:
            ids[0][0] = 4;
            break;
        case 5:
            ids[1][0] = -1;
            break;
        case 6:
            nseq[2] = 0;
            break;
        case 7:
            nseq[0] = 2;
            break; /* {0, 0} */
        case 8:
            pos[0] = 4, pos[1] = 5, pos[2] = 6;
            break;
        case 9:
            pos[2] = 6;
            break;
        case 10:
            pos[0] = -1;
            break;
        default:
            nseq[0] = 2, ids[0][1] = 1;
            break; /* 0 and 1 differ */
        }
        struct rmem_batch_params bp = {2, N_VOCAB, false, false};
        struct rmem_bctx *ctx = NULL;
        enum rmem_status st = rmem_init_batch(mem, &in, &bp, &ctx);
        CHECK_MSG(st == RMEM_INVALID && !ctx, "%s: status %d", kinds[k].what, (int)st);
        CHECK_MSG(strstr(rcore_error_get(), kinds[k].message) != NULL,
                  "%s: message \"%s\" should contain \"%s\"", kinds[k].what, rcore_error_get(),
                  kinds[k].message);
        CHECK_MSG(rmem_fingerprint(mem) == fp, "%s changed the memory", kinds[k].what);
        rmem_bctx_free(ctx);
    }
    rmem_free(mem);
}

/* Thousands of sequences and cells: one batch of 4,096 single-token sequences, forks, a
 * second step, and removal of every other one. */
static void test_many(void) {
    enum { N = 4096 };
    struct rmem *mem = make(N, N);
    int32_t *seqs = malloc(sizeof(int32_t) * N);
    REQUIRE(seqs);
    for (int32_t i = 0; i < N; i++) seqs[i] = N - 1 - i;
    CHECK(decode_each(mem, seqs, N, N) == RMEM_OK);
    CHECK(rmem_used(mem) == N && rmem_n(mem) == N);
    CHECK(decode_each(mem, seqs, N, 512) == RMEM_OK);
    CHECK(rmem_seq_pos_max(mem, 0) == 1 && rmem_seq_pos_max(mem, N - 1) == 1);
    for (int32_t i = 0; i < N; i += 2) CHECK(rmem_seq_rm(mem, i, -1, -1));
    CHECK(rmem_used(mem) == N / 2);
    for (int32_t i = 0; i < N; i += 2) rmem_seq_cp(mem, i + 1, i, -1, -1);
    CHECK(rmem_used(mem) == N / 2);
    CHECK(decode_each(mem, seqs, N, 1024) == RMEM_OK); /* every fork copies on write */
    CHECK(rmem_used(mem) == N);
    int ok = 1;
    for (int32_t i = 0; i < N; i += 2) ok &= k0(mem, i) != k0(mem, i + 1);
    CHECK(ok); /* the forks took different tokens, so they differ from their sources */
    CHECK(rmem_check(mem));
    free(seqs);
    rmem_free(mem);
}

static void test_clear(void) {
    struct rmem *mem = make(2, 2);
    struct rmem *fresh = make(2, 2);
    CHECK(decode_seq(mem, 0, 3, 1) == RMEM_OK);
    rmem_clear(mem, false);
    CHECK(rmem_used(mem) == 0 && rmem_seq_pos_max(mem, 0) == -1);
    CHECK(rmem_fingerprint(mem) != rmem_fingerprint(fresh)); /* rows were kept */
    rmem_clear(mem, true);
    CHECK(rmem_fingerprint(mem) == rmem_fingerprint(fresh));
    rmem_free(mem);
    rmem_free(fresh);
}

int main(void) {
    RUN(test_layer_view);
    RUN(test_create);
    RUN(test_seq_rm);
    RUN(test_seq_cp);
    RUN(test_seq_keep);
    RUN(test_seq_add_div);
    RUN(test_find_slot_block);
    RUN(test_find_slot_evict);
    RUN(test_no_room);
    RUN(test_init_batch_errors);
    RUN(test_invalid_batches);
    RUN(test_many);
    RUN(test_clear);
    return test_finish("test_memory");
}
