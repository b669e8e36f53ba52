/*
 * Tests of src/batch: validation (every kind of invalid batch, with its message), positions
 * filled in, each split kind on hand-made batches whose ubatches are written out below, and a
 * randomized property test that also compares the equal and seq splits with a plain
 * (quadratic) re-statement of their rules.
 *
 * Layout strings: ubatches are separated by ';', the streams of a ubatch by '|', and tokens
 * (batch indices) by spaces, so "0 | 1 ; 2 3" is a ubatch of two one-token streams followed by
 * a ubatch of one two-token stream. Simple splits have no streams: "0 1 ; 2".
 */
#include "batch/batch.h"
#include "core/core.h"
#include "test.h"

#include <stdbool.h>
#include <stdint.h>

#define MAX_T   4096
#define MAX_IDS 64

/* ---- batch builder ------------------------------------------------------------------------ */

struct tbatch {
    int32_t n;
    int32_t token[MAX_T];
    int32_t pos[MAX_T];
    int32_t n_seq_id[MAX_T];
    int32_t *rows[MAX_T];
    int8_t logits[MAX_T];
    int32_t ids[MAX_T][MAX_IDS];
};

static struct tbatch *tb_new(void) {
    struct tbatch *b = calloc(1, sizeof *b);
    REQUIRE(b != NULL);
    for (int i = 0; i < MAX_T; i++) b->rows[i] = b->ids[i];
    return b;
}

/* Appends a token at position pos on the sequences listed in seqs ("0 2"). */
static int32_t tb_add(struct tbatch *b, int32_t pos, const char *seqs) {
    REQUIRE(b->n < MAX_T);
    int32_t i = b->n++;
    char *end;
    b->token[i] = 100 + i;
    b->pos[i] = pos;
    b->n_seq_id[i] = 0;
    for (const char *p = seqs; *p;) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        REQUIRE(b->n_seq_id[i] < MAX_IDS);
        b->ids[i][b->n_seq_id[i]++] = (int32_t)v;
        p = end;
    }
    return i;
}

static struct rbatch_in tb_in(struct tbatch *b, bool with_pos) {
    struct rbatch_in in = {
        .n_tokens = b->n,
        .token = b->token,
        .embd = NULL,
        .pos = with_pos ? b->pos : NULL,
        .n_seq_id = b->n_seq_id,
        .seq_id = b->rows,
        .logits = NULL,
    };
    return in;
}

/* Validates with positions filled in from what the sequences hold (every sequence empty when
 * pos_max is NULL) and returns the result; pos_out receives the positions. */
static bool tb_validate(struct tbatch *b, bool with_pos, uint32_t n_seq_max, const int32_t *pos_max,
                        const int32_t *state_id, int32_t *pos_out) {
    int32_t empty[MAX_IDS];
    for (int i = 0; i < MAX_IDS; i++) empty[i] = -1;
    REQUIRE(n_seq_max <= MAX_IDS || pos_max != NULL);
    struct rbatch_seq_info si = {n_seq_max, pos_max ? pos_max : empty, state_id};
    struct rbatch_in in = tb_in(b, with_pos);
    rcore_error_clear();
    return rbatch_validate(&in, 50000, &si, pos_out);
}

/* ---- layouts -------------------------------------------------------------------------------- */

static void layout_of(const struct rbatch_split *sp, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t u = 0; u < sp->n_ubatches; u++) {
        const struct rbatch_ubatch *ub = &sp->ubatches[u];
        if (u > 0) len += (size_t)snprintf(buf + len, cap - len, " ; ");
        for (uint32_t t = 0; t < ub->n_tokens && len < cap; t++) {
            const char *sep = "";
            if (t > 0) {
                bool stream_start = ub->n_seq_tokens > 0 && t % ub->n_seq_tokens == 0;
                sep = stream_start ? " | " : " ";
            }
            len += (size_t)snprintf(buf + len, cap - len, "%s%d", sep, ub->idx[t]);
        }
        if (len >= cap) break;
    }
}

static bool layout_is(const struct rbatch_split *sp, const char *want) {
    char got[8192];
    layout_of(sp, got, sizeof got);
    if (strcmp(got, want) == 0) return true;
    fprintf(stderr, "  layout: got  \"%s\"\n          want \"%s\"\n", got, want);
    return false;
}

/* ---- split properties ---------------------------------------------------------------------- */

static int32_t in_n_ids(const struct rbatch_in *b, int32_t i) {
    return b->n_seq_id ? b->n_seq_id[i] : 1;
}

static const int32_t *in_ids(const struct rbatch_in *b, int32_t i) {
    static const int32_t zero = 0;
    return b->n_seq_id ? b->seq_id[i] : &zero;
}

static bool same_set(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    if (na != nb) return false;
    for (int32_t i = 0; i < na; i++) {
        bool found = false;
        for (int32_t j = 0; j < nb && !found; j++) found = a[i] == b[j];
        if (!found) return false;
    }
    return true;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(why, why_cap, __VA_ARGS__);                                                       \
        ok = false;                                                                                \
        goto out;                                                                                  \
    } while (0)

/* Checks everything a split promises for any batch; why receives the first broken rule. */
static bool split_ok(const struct rbatch_in *b, const int32_t *pos, uint32_t n_ubatch,
                     enum rbatch_split_kind kind, bool logits_all, uint32_t n_seq,
                     const struct rbatch_split *sp, char *why, size_t why_cap) {
    bool ok = true;
    int32_t *seen = calloc((size_t)b->n_tokens, sizeof *seen);
    int32_t *last_idx = malloc(n_seq * sizeof *last_idx);
    int32_t *owner = malloc(n_seq * sizeof *owner); /* ubatch*65536 + stream of the last use */
    int32_t *outs = malloc((size_t)b->n_tokens * sizeof *outs);
    REQUIRE(seen && last_idx && owner && outs);
    for (uint32_t s = 0; s < n_seq; s++) last_idx[s] = owner[s] = -1;
    int32_t n_out = 0, n_placed = 0;
    why[0] = '\0';

    if (sp->kind != kind || sp->n_ubatch != n_ubatch || sp->n_tokens != b->n_tokens) {
        FAIL("header fields");
    }
    if (sp->n_ubatches < 1) FAIL("no ubatch");
    for (uint32_t u = 0; u < sp->n_ubatches; u++) {
        const struct rbatch_ubatch *ub = &sp->ubatches[u];
        if (ub->n_tokens < 1 || ub->n_tokens > n_ubatch)
            FAIL("ubatch %u has %u tokens", u, ub->n_tokens);
        if ((ub->token == NULL) != (b->token == NULL)) FAIL("ubatch %u token pointer", u);
        if (kind == RBATCH_SPLIT_SIMPLE) {
            uint32_t want = (uint32_t)b->n_tokens - (uint32_t)n_placed;
            if (want > n_ubatch) want = n_ubatch;
            if (ub->n_tokens != want || ub->n_seq_tokens != 0 || ub->n_seqs != ub->n_tokens) {
                FAIL("simple ubatch %u sizes %u/%u/%u", u, ub->n_tokens, ub->n_seq_tokens,
                     ub->n_seqs);
            }
        } else {
            if (ub->n_seq_tokens < 1 || ub->n_seqs < 1 ||
                ub->n_tokens != ub->n_seqs * ub->n_seq_tokens) {
                FAIL("ubatch %u sizes %u/%u/%u", u, ub->n_tokens, ub->n_seq_tokens, ub->n_seqs);
            }
            if (kind == RBATCH_SPLIT_SEQ && ub->n_seqs != 1) FAIL("seq ubatch %u has streams", u);
        }
        for (uint32_t t = 0; t < ub->n_tokens; t++) {
            const int32_t i = ub->idx[t];
            if (i < 0 || i >= b->n_tokens) FAIL("ubatch %u token %u: index %d", u, t, i);
            if (seen[i]++) FAIL("batch token %d placed twice", i);
            if (kind == RBATCH_SPLIT_SIMPLE && i != n_placed) FAIL("simple split out of order");
            n_placed++;
            if (b->token && ub->token[t] != b->token[i]) FAIL("token %d: token id", i);
            if (ub->pos[t] != pos[i]) FAIL("token %d: position", i);
            const bool want_out = rbatch_token_wants_output(b, i, logits_all);
            if (ub->output[t] != (want_out ? 1 : 0)) FAIL("token %d: output flag", i);
            if (want_out) outs[n_out++] = i;
            const int32_t n = in_n_ids(b, i);
            if (ub->n_seq_id[t] != n) FAIL("token %d: n_seq_id", i);
            if (memcmp(ub->seq_id[t], in_ids(b, i), (size_t)n * sizeof(int32_t)) != 0) {
                FAIL("token %d: sequence ids (or their order) differ", i);
            }
            const uint32_t stream = kind == RBATCH_SPLIT_SIMPLE ? 0 : t / ub->n_seq_tokens;
            if (kind != RBATCH_SPLIT_SIMPLE) {
                const uint32_t first = stream * ub->n_seq_tokens;
                if (!same_set(ub->seq_id[t], ub->n_seq_id[t], ub->seq_id[first],
                              ub->n_seq_id[first])) {
                    FAIL("ubatch %u stream %u: token %d has another sequence set", u, stream, i);
                }
            }
            for (int32_t j = 0; j < n; j++) {
                const int32_t s = in_ids(b, i)[j];
                if (s < 0 || (uint32_t)s >= n_seq) FAIL("token %d: sequence %d", i, s);
                if (last_idx[s] >= i) {
                    FAIL("sequence %d: token %d comes after token %d", s, i, last_idx[s]);
                }
                last_idx[s] = i;
                const int32_t mine = (int32_t)(u * 65536u + stream);
                if (kind != RBATCH_SPLIT_SIMPLE && owner[s] >= 0 &&
                    owner[s] / 65536 == (int32_t)u && owner[s] != mine) {
                    FAIL("ubatch %u: sequence %d in two streams", u, s);
                }
                owner[s] = mine;
            }
        }
    }
    if (n_placed != b->n_tokens) FAIL("%d of %d tokens placed", n_placed, b->n_tokens);
    if (sp->n_outputs != n_out) FAIL("n_outputs %d, want %d", sp->n_outputs, n_out);
    for (int32_t r = 0; r < n_out; r++) {
        if (sp->out_ids[r] != outs[r])
            FAIL("out_ids[%d] is %d, want %d", r, sp->out_ids[r], outs[r]);
    }
out:
    free(seen);
    free(last_idx);
    free(owner);
    free(outs);
    return ok;
}

/* The equal / seq split rules restated as plainly as possible (quadratic, for tests only);
 * writes the layout string of the expected split. */
static void reference_layout(const struct rbatch_in *b, uint32_t n_ubatch,
                             enum rbatch_split_kind kind, uint32_t n_seq, char *buf, size_t cap) {
    const int32_t n = b->n_tokens;
    int32_t *set = malloc((size_t)n * sizeof *set);
    bool *pending = malloc((size_t)n * sizeof *pending);
    int32_t *first_pending = malloc(n_seq * sizeof *first_pending);
    int32_t *cand_of_seq = malloc(n_seq * sizeof *cand_of_seq);
    int32_t *cand = malloc((size_t)n * sizeof *cand);         /* head token of each ready set */
    int32_t *run = malloc((size_t)n * sizeof *run);           /* indexed by candidate */
    bool *blocked = malloc((size_t)n * sizeof *blocked);      /* indexed by candidate */
    int32_t *set_cand = malloc((size_t)n * sizeof *set_cand); /* set -> candidate or -1 */
    bool *set_seen = malloc((size_t)n * sizeof *set_seen);
    REQUIRE(set && pending && first_pending && cand_of_seq && cand && run && blocked && set_cand &&
            set_seen);

    /* set number = index of the first token with the same id set */
    for (int32_t i = 0; i < n; i++) {
        set[i] = i;
        for (int32_t j = 0; j < i; j++) {
            if (same_set(in_ids(b, i), in_n_ids(b, i), in_ids(b, j), in_n_ids(b, j))) {
                set[i] = set[j];
                break;
            }
        }
        pending[i] = true;
    }

    size_t len = 0;
    int32_t left = n;
    buf[0] = '\0';
    while (left > 0) {
        for (uint32_t s = 0; s < n_seq; s++) first_pending[s] = -1, cand_of_seq[s] = -1;
        for (int32_t i = 0; i < n; i++) set_seen[i] = false, set_cand[i] = -1;
        for (int32_t i = n - 1; i >= 0; i--) {
            if (!pending[i]) continue;
            for (int32_t j = 0; j < in_n_ids(b, i); j++) first_pending[in_ids(b, i)[j]] = i;
        }
        /* ready sets, in the order of their next pending token */
        int32_t n_cand = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!pending[i] || set_seen[set[i]]) continue;
            set_seen[set[i]] = true;
            bool ready = true, shares = false;
            for (int32_t j = 0; j < in_n_ids(b, i); j++) {
                const int32_t s = in_ids(b, i)[j];
                ready = ready && first_pending[s] == i;
                shares = shares || cand_of_seq[s] >= 0;
            }
            if (!ready || shares) continue;
            for (int32_t j = 0; j < in_n_ids(b, i); j++) cand_of_seq[in_ids(b, i)[j]] = n_cand;
            set_cand[set[i]] = n_cand;
            cand[n_cand] = i;
            run[n_cand] = 0;
            blocked[n_cand] = false;
            n_cand++;
        }
        REQUIRE(n_cand > 0);
        /* runs: count a set's tokens until another set's token touches one of its sequences */
        for (int32_t i = 0; i < n; i++) {
            if (!pending[i]) continue;
            const int32_t c = set_cand[set[i]];
            if (c >= 0 && !blocked[c]) {
                run[c]++;
                continue;
            }
            for (int32_t j = 0; j < in_n_ids(b, i); j++) {
                const int32_t c2 = cand_of_seq[in_ids(b, i)[j]];
                if (c2 >= 0 && c2 != c) blocked[c2] = true;
            }
        }
        uint32_t nst, n_seqs;
        if (kind == RBATCH_SPLIT_SEQ) {
            nst = (uint32_t)run[0] < n_ubatch ? (uint32_t)run[0] : n_ubatch;
            n_seqs = 1;
        } else {
            nst = n_ubatch;
            for (int32_t c = 0; c < n_cand; c++) {
                if ((uint32_t)run[c] < nst) nst = (uint32_t)run[c];
            }
            n_seqs = n_ubatch / nst;
            if (n_seqs > (uint32_t)n_cand) n_seqs = (uint32_t)n_cand;
        }
        if (len > 0) len += (size_t)snprintf(buf + len, cap - len, " ; ");
        for (uint32_t c = 0; c < n_seqs; c++) {
            if (c > 0) len += (size_t)snprintf(buf + len, cap - len, " | ");
            uint32_t taken = 0;
            for (int32_t i = cand[c]; i < n && taken < nst; i++) {
                if (!pending[i] || set[i] != set[cand[c]]) continue;
                len += (size_t)snprintf(buf + len, cap - len, taken ? " %d" : "%d", i);
                pending[i] = false;
                taken++;
                left--;
            }
            REQUIRE(taken == nst);
        }
        REQUIRE(len < cap);
    }
    free(set);
    free(pending);
    free(first_pending);
    free(cand_of_seq);
    free(cand);
    free(run);
    free(blocked);
    free(set_cand);
    free(set_seen);
}

/* Splits, checks the general properties, and compares the layout with want (NULL: skip). */
static void check_split(const struct rbatch_in *in, const int32_t *pos, uint32_t n_ubatch,
                        enum rbatch_split_kind kind, bool logits_all, uint32_t n_seq,
                        const char *want) {
    struct rbatch_split sp;
    char why[256];
    rcore_error_clear();
    bool made = rbatch_split(in, pos, n_ubatch, kind, logits_all, &sp);
    CHECK_MSG(made, "split failed: %s", rcore_error_get());
    if (!made) return;
    CHECK_MSG(split_ok(in, pos, n_ubatch, kind, logits_all, n_seq, &sp, why, sizeof why), "%s",
              why);
    if (want) CHECK(layout_is(&sp, want));
    rbatch_split_free(&sp);
    CHECK(sp.storage == NULL && sp.ubatches == NULL && sp.n_ubatches == 0);
}

/* ---- validation tests ------------------------------------------------------------------------ */

static void test_validate_empty(void) {
    struct tbatch *b = tb_new();
    int32_t pos[4];
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch is empty");
    struct rbatch_in in = tb_in(b, false);
    in.n_tokens = -3;
    int32_t pm[4] = {-1, -1, -1, -1};
    struct rbatch_seq_info si = {4, pm, NULL};
    CHECK(!rbatch_validate(&in, 0, &si, pos));
    CHECK_ERR("batch is empty");
    free(b);
}

static void test_validate_token_range(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    for (int i = 0; i < 4; i++) tb_add(b, i, "0");
    b->token[2] = 70000;
    CHECK(!tb_validate(b, true, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 2: token id 70000 is out of range 0..49999");
    b->token[2] = 49999;
    CHECK(tb_validate(b, true, 4, NULL, NULL, pos));
    b->token[3] = -1;
    CHECK(!tb_validate(b, true, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 3: token id -1 is out of range 0..49999");

    /* n_vocab <= 0: token ids are not checked */
    int32_t pm[4] = {-1, -1, -1, -1};
    struct rbatch_seq_info si = {4, pm, NULL};
    struct rbatch_in in = tb_in(b, true);
    b->token[2] = 70000;
    CHECK(rbatch_validate(&in, 0, &si, pos));
    CHECK(rbatch_validate(&in, -1, &si, pos));
    CHECK(!rbatch_validate(&in, 1000, &si, pos));
    CHECK_ERR("batch token 2: token id 70000 is out of range 0..999");
    free(b);
}

static void test_validate_no_input(void) {
    struct tbatch *b = tb_new();
    int32_t pos[4];
    tb_add(b, 0, "0");
    int32_t pm[4] = {-1, -1, -1, -1};
    struct rbatch_seq_info si = {4, pm, NULL};
    struct rbatch_in in = tb_in(b, true);
    in.token = NULL;
    rcore_error_clear();
    CHECK(!rbatch_validate(&in, 50000, &si, pos));
    CHECK_ERR("neither token ids nor embeddings");

    /* embeddings alone are fine */
    float embd[8] = {0};
    in.embd = embd;
    CHECK(rbatch_validate(&in, 50000, &si, pos));
    free(b);
}

static void test_validate_seq_range(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    for (int i = 0; i < 5; i++) tb_add(b, -1, i % 2 ? "1" : "0");
    tb_add(b, -1, "9");
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 5: sequence id 9 is out of range 0..3");
    b->ids[5][0] = 4;
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 5: sequence id 4 is out of range 0..3");
    b->ids[5][0] = -1;
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 5: sequence id -1 is out of range 0..3");
    b->ids[5][0] = 3;
    CHECK(tb_validate(b, false, 4, NULL, NULL, pos));
    /* the second id of a token is checked as well */
    tb_add(b, -1, "2 7");
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 6: sequence id 7 is out of range 0..3");
    free(b);
}

static void test_validate_duplicate_seq(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    for (int i = 0; i < 4; i++) tb_add(b, -1, "3");
    tb_add(b, -1, "0 1 2 1");
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 4: sequence id 1 appears twice");
    free(b);

    /* the same id on different tokens is no duplicate */
    b = tb_new();
    tb_add(b, -1, "1 2");
    tb_add(b, -1, "2 1");
    CHECK(tb_validate(b, false, 4, NULL, NULL, pos));
    free(b);
}

static void test_validate_n_seq_id(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    tb_add(b, -1, "0");
    tb_add(b, -1, "");
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 1: n_seq_id is 0");
    b->n_seq_id[1] = -2;
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 1: n_seq_id is -2");
    b->n = 1;
    tb_add(b, -1, "0 1 2 3 0");
    CHECK(!tb_validate(b, false, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 1: n_seq_id is 5, more than the 4 sequences");

    /* n_seq_id given without seq_id rows */
    struct rbatch_in in = tb_in(b, false);
    int32_t pm[4] = {-1, -1, -1, -1};
    struct rbatch_seq_info si = {4, pm, NULL};
    in.seq_id = NULL;
    CHECK(!rbatch_validate(&in, 0, &si, pos));
    CHECK_ERR("n_seq_id but no seq_id");
    free(b);
}

static void test_validate_negative_pos(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    tb_add(b, 0, "0");
    tb_add(b, 0, "1");
    tb_add(b, -1, "2");
    CHECK(!tb_validate(b, true, 4, NULL, NULL, pos));
    CHECK_ERR("batch token 2: position -1 is negative");
    free(b);
}

static void test_validate_position_follows(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    int32_t pm[4] = {-1, 4, -1, 2};

    /* a sequence that holds a state continues at pos_max+1 */
    tb_add(b, 7, "1");
    CHECK(!tb_validate(b, true, 4, pm, NULL, pos));
    CHECK_ERR("batch token 0: position 7 of sequence 1 does not follow 4 "
              "(the sequence holds positions up to 4)");
    b->pos[0] = 4; /* repeating the last position held is no continuation either */
    CHECK(!tb_validate(b, true, 4, pm, NULL, pos));
    CHECK_ERR("batch token 0: position 4 of sequence 1 does not follow 4");
    b->pos[0] = 5;
    CHECK(tb_validate(b, true, 4, pm, NULL, pos));
    CHECK(pos[0] == 5);

    /* an empty sequence may start anywhere, then each token follows the previous one */
    tb_add(b, 10, "0");
    tb_add(b, 11, "0");
    tb_add(b, 3, "3");
    CHECK(tb_validate(b, true, 4, pm, NULL, pos));
    tb_add(b, 13, "0");
    CHECK(!tb_validate(b, true, 4, pm, NULL, pos));
    CHECK_ERR("batch token 4: position 13 of sequence 0 does not follow 11 (the previous token "
              "of the batch on that sequence, token 2, is at 11)");
    b->pos[4] = 12;
    CHECK(tb_validate(b, true, 4, pm, NULL, pos));
    tb_add(b, 7, "1");
    CHECK(!tb_validate(b, true, 4, pm, NULL, pos));
    CHECK_ERR("batch token 5: position 7 of sequence 1 does not follow 5 (the previous token "
              "of the batch on that sequence, token 0, is at 5)");
    free(b);
}

static void test_validate_coupled(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];
    int32_t pm[4] = {3, -1, 3, -1};

    /* without state ids, two sequences that hold something never share */
    tb_add(b, 4, "0 2");
    CHECK(!tb_validate(b, true, 4, pm, NULL, pos));
    CHECK_ERR("batch token 0: sequences 0 and 2 do not share one state (fork with seq_cp first)");
    CHECK(!tb_validate(b, false, 4, pm, NULL, pos));
    CHECK_ERR("batch token 0: sequences 0 and 2 do not share one state");

    /* with state ids, sequences forked by seq_cp share one */
    int32_t sid[4] = {5, -1, 5, -1};
    CHECK(tb_validate(b, true, 4, pm, sid, pos));
    CHECK(pos[0] == 4);
    CHECK(tb_validate(b, false, 4, pm, sid, pos));
    CHECK(pos[0] == 4);
    int32_t sid2[4] = {5, -1, 6, -1};
    CHECK(!tb_validate(b, true, 4, pm, sid2, pos));
    CHECK_ERR("batch token 0: sequences 0 and 2 do not share one state");

    /* a sequence with a state and an empty one do not share */
    b->n = 0;
    tb_add(b, 4, "0 1");
    CHECK(!tb_validate(b, true, 4, pm, sid, pos));
    CHECK_ERR("batch token 0: sequences 0 and 1 do not share one state");

    /* empty sequences all share the empty state, with or without state ids */
    b->n = 0;
    tb_add(b, 0, "3 1");
    CHECK(tb_validate(b, true, 4, pm, NULL, pos));
    CHECK(tb_validate(b, true, 4, pm, sid, pos));

    /* a token on one of two forked sequences splits them apart */
    b->n = 0;
    tb_add(b, 4, "2");
    tb_add(b, 5, "0 2");
    CHECK(!tb_validate(b, true, 4, pm, sid, pos));
    CHECK_ERR("batch token 1: sequences 0 and 2 do not share one state");
    free(b);
}

static void test_validate_join(void) {
    struct tbatch *b = tb_new();
    int32_t pos[8];

    /* two empty sequences take a shared prompt, then go their own ways */
    tb_add(b, 0, "0 1");
    tb_add(b, 1, "1 0");
    tb_add(b, 2, "0");
    tb_add(b, 2, "1");
    tb_add(b, 3, "1");
    CHECK(tb_validate(b, true, 2, NULL, NULL, pos));
    CHECK(tb_validate(b, false, 2, NULL, NULL, pos));
    CHECK(pos[0] == 0 && pos[1] == 1 && pos[2] == 2 && pos[3] == 2 && pos[4] == 3);

    /* once apart they cannot be decoded together again */
    tb_add(b, 4, "0 1");
    CHECK(!tb_validate(b, false, 2, NULL, NULL, pos));
    CHECK_ERR("batch token 5: sequences 0 and 1 do not share one state");

    /* a token joins sequences that were forked from one state; an uninvolved sequence that
     * still holds that state stays compatible with neither of them afterwards */
    int32_t pm[3] = {7, 7, 7};
    int32_t sid[3] = {2, 2, 2};
    b->n = 0;
    tb_add(b, 8, "0 1");
    tb_add(b, 9, "0");
    tb_add(b, 9, "1");
    CHECK(tb_validate(b, true, 3, pm, sid, pos));
    tb_add(b, 8, "2 1");
    CHECK(!tb_validate(b, true, 3, pm, sid, pos));
    CHECK_ERR("batch token 3: sequences 2 and 1 do not share one state");
    free(b);
}

static void test_validate_positions_filled(void) {
    struct tbatch *b = tb_new();
    int32_t pos[16];

    /* interleaved sequences, each following what it holds */
    int32_t pm[3] = {2, -1, 9};
    const char *order[] = {"0", "1", "0", "2", "1", "2", "0"};
    for (int i = 0; i < 7; i++) tb_add(b, -1, order[i]);
    CHECK(tb_validate(b, false, 3, pm, NULL, pos));
    const int32_t want[7] = {3, 0, 4, 10, 1, 11, 5};
    for (int i = 0; i < 7; i++) CHECK_MSG(pos[i] == want[i], "pos[%d] = %d", i, pos[i]);

    /* multi-sequence tokens: the first sequence sets the position, and all of them advance */
    int32_t pm2[3] = {5, 5, -1};
    int32_t sid2[3] = {1, 1, -1};
    b->n = 0;
    tb_add(b, -1, "1 0");
    tb_add(b, -1, "0 1");
    tb_add(b, -1, "1");
    tb_add(b, -1, "0");
    tb_add(b, -1, "2");
    tb_add(b, -1, "0");
    CHECK(tb_validate(b, false, 3, pm2, sid2, pos));
    const int32_t want2[6] = {6, 7, 8, 8, 0, 9};
    for (int i = 0; i < 6; i++) CHECK_MSG(pos[i] == want2[i], "pos[%d] = %d", i, pos[i]);

    /* n_seq_id NULL: every token on sequence 0, seq_id ignored */
    struct rbatch_in in = tb_in(b, false);
    in.n_seq_id = NULL;
    in.seq_id = NULL;
    int32_t pm3[2] = {1, 40};
    struct rbatch_seq_info si = {2, pm3, NULL};
    CHECK(rbatch_validate(&in, 50000, &si, pos));
    for (int i = 0; i < 6; i++) CHECK(pos[i] == 2 + i);
    int32_t pos_given[6] = {2, 3, 4, 5, 6, 8};
    in.pos = pos_given;
    CHECK(!rbatch_validate(&in, 50000, &si, pos));
    CHECK_ERR("batch token 5: position 8 of sequence 0 does not follow 6");

    /* a sequence at the largest position cannot take another token */
    int32_t pm4[1] = {INT32_MAX};
    b->n = 0;
    tb_add(b, -1, "0");
    CHECK(!tb_validate(b, false, 1, pm4, NULL, pos));
    CHECK_ERR("batch token 0: sequence 0 already holds the largest position");
    free(b);
}

static void test_validate_many_sequences(void) {
    struct tbatch *b = tb_new();
    int32_t *pm = malloc(MAX_T * sizeof *pm);
    int32_t *pos = malloc(MAX_T * sizeof *pos);
    REQUIRE(pm && pos);
    for (int i = 0; i < MAX_T; i++) {
        pm[i] = i % 3 == 0 ? -1 : i;
        char s[16];
        snprintf(s, sizeof s, "%d", MAX_T - 1 - i);
        tb_add(b, -1, s);
    }
    CHECK(tb_validate(b, false, MAX_T, pm, NULL, pos));
    bool all = true;
    for (int i = 0; i < MAX_T; i++) all = all && pos[i] == pm[MAX_T - 1 - i] + 1;
    CHECK(all);
    free(pm);
    free(pos);
    free(b);
}

/* ---- split tests --------------------------------------------------------------------------- */

/* t0{0} t1{1} t2{0} t3{1} t4{0} t5{2}: runs 3, 2, 1 */
static struct tbatch *batch_three_seqs(void) {
    struct tbatch *b = tb_new();
    const char *seqs[] = {"0", "1", "0", "1", "0", "2"};
    for (int i = 0; i < 6; i++) tb_add(b, -1, seqs[i]);
    REQUIRE(tb_validate(b, false, 3, NULL, NULL, b->pos));
    return b;
}

static void test_split_equal_basic(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    /* all three sets ready; the shortest run (seq 2: 1 token) sets n_seq_tokens */
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 3, "0 | 1 | 5 ; 2 | 3 ; 4");
    /* n_ubatch 2 keeps the first two streams in batch order */
    check_split(&in, b->pos, 2, RBATCH_SPLIT_EQUAL, false, 3, "0 | 1 ; 2 | 3 ; 4 | 5");
    check_split(&in, b->pos, 1, RBATCH_SPLIT_EQUAL, false, 3, "0 ; 1 ; 2 ; 3 ; 4 ; 5");
    free(b);

    /* equal runs: t0{0} t1{0} t2{1} t3{1} t4{0} t5{1} */
    b = tb_new();
    const char *seqs[] = {"0", "0", "1", "1", "0", "1"};
    for (int i = 0; i < 6; i++) tb_add(b, -1, seqs[i]);
    REQUIRE(tb_validate(b, false, 2, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 6, RBATCH_SPLIT_EQUAL, false, 2, "0 1 4 | 2 3 5");
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 2, "0 1 4 | 2 3 5");
    /* 3 tokens per stream leave room for one stream only */
    check_split(&in, b->pos, 4, RBATCH_SPLIT_EQUAL, false, 2, "0 1 4 ; 2 3 5");
    check_split(&in, b->pos, 5, RBATCH_SPLIT_EQUAL, false, 2, "0 1 4 ; 2 3 5");
    /* n_ubatch caps n_seq_tokens */
    /* then seq 1 (run 3, earlier head) and seq 0 (run 1) go together, one token each */
    check_split(&in, b->pos, 2, RBATCH_SPLIT_EQUAL, false, 2, "0 1 ; 2 | 4 ; 3 5");
    free(b);

    /* one sequence: n_ubatch tokens at a time */
    b = tb_new();
    for (int i = 0; i < 5; i++) tb_add(b, -1, "0");
    REQUIRE(tb_validate(b, false, 1, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 2, RBATCH_SPLIT_EQUAL, false, 1, "0 1 ; 2 3 ; 4");
    free(b);

    /* five one-token sequences in reverse id order: streams follow batch order */
    b = tb_new();
    const char *rev[] = {"4", "3", "2", "1", "0"};
    for (int i = 0; i < 5; i++) tb_add(b, -1, rev[i]);
    REQUIRE(tb_validate(b, false, 5, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 2, RBATCH_SPLIT_EQUAL, false, 5, "0 | 1 ; 2 | 3 ; 4");
    check_split(&in, b->pos, 8, RBATCH_SPLIT_EQUAL, false, 5, "0 | 1 | 2 | 3 | 4");
    check_split(&in, b->pos, 8, RBATCH_SPLIT_SEQ, false, 5, "0 ; 1 ; 2 ; 3 ; 4");
    free(b);
}

static void test_split_equal_multi_seq(void) {
    /* t0{0,1} t1{1,0} t2{0} t3{1} t4{0} t5{2}: the shared prompt {0,1} must go before
     * sequences 0 and 1 continue on their own; {0,1} and {1,0} are one set */
    struct tbatch *b = tb_new();
    const char *seqs[] = {"0 1", "1 0", "0", "1", "0", "2"};
    for (int i = 0; i < 6; i++) tb_add(b, -1, seqs[i]);
    REQUIRE(tb_validate(b, false, 3, NULL, NULL, b->pos));
    struct rbatch_in in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 3, "0 | 5 ; 1 ; 2 | 3 ; 4");
    /* seq 2 blocks nothing once it is left out: {0,1} then runs two tokens */
    b->n = 5;
    in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 3, "0 1 ; 2 | 3 ; 4");

    /* a token's ids keep their own order in the ubatch, whatever the set's first token had */
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_ubatches == 3);
    CHECK(sp.ubatches[0].n_seq_tokens == 2 && sp.ubatches[0].n_seqs == 1);
    CHECK(sp.ubatches[0].seq_id[0][0] == 0 && sp.ubatches[0].seq_id[0][1] == 1);
    CHECK(sp.ubatches[0].seq_id[1][0] == 1 && sp.ubatches[0].seq_id[1][1] == 0);
    CHECK(sp.ubatches[1].n_seq_tokens == 1 && sp.ubatches[1].n_seqs == 2);
    CHECK(sp.ubatches[1].pos[0] == 2 && sp.ubatches[1].pos[1] == 2);
    rbatch_split_free(&sp);
    free(b);

    /* t0{0,1} t1{2} t2{0} t3{1} t4{2} t5{0}: sequences 0 and 1 wait for the prompt */
    b = tb_new();
    const char *seqs2[] = {"0 1", "2", "0", "1", "2", "0"};
    for (int i = 0; i < 6; i++) tb_add(b, -1, seqs2[i]);
    REQUIRE(tb_validate(b, false, 3, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 3, "0 | 1 ; 2 | 3 | 4 ; 5");
    check_split(&in, b->pos, 2, RBATCH_SPLIT_EQUAL, false, 3, "0 | 1 ; 2 | 3 ; 4 | 5");
    free(b);

    /* a set is not ready while an earlier token of another set touches one of its sequences:
     * t0{0,1,2} t1{2} t2{0,1} t3{1,0} t4{2} t5{0,1}. {2} and {0,1} wait for t0, then both
     * are ready with runs 2 and 3 */
    b = tb_new();
    const char *seqs3[] = {"0 1 2", "2", "0 1", "1 0", "2", "0 1"};
    for (int i = 0; i < 6; i++) tb_add(b, -1, seqs3[i]);
    REQUIRE(tb_validate(b, false, 3, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 3, "0 ; 1 4 | 2 3 ; 5");
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, 3, "0 ; 1 4 ; 2 3 5");
    /* 2 tokens per stream leave room for one stream of 3 */
    check_split(&in, b->pos, 3, RBATCH_SPLIT_EQUAL, false, 3, "0 ; 1 4 ; 2 3 5");
    free(b);

    /* runs stop at another set's token on a shared sequence. The state rules make this batch
     * invalid (sequence 0 leaves the shared state at t0), but the split follows its own rules
     * for any batch: t0{0} t1{0} t2{0,1} t3{0} t4{1} */
    b = tb_new();
    const char *seqs4[] = {"0", "0", "0 1", "0", "1"};
    for (int i = 0; i < 5; i++) tb_add(b, i, seqs4[i]);
    in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 2, "0 1 ; 2 ; 3 | 4");
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, 2, "0 1 ; 2 ; 3 ; 4");
    free(b);
}

static void test_split_long_runs(void) {
    /* sequence 0: tokens 0..299, sequence 1: 300..499, sequence 2: 500..509. All three are
     * ready at once with runs 300, 200 and 10: ubatches of 3 x 10, then 2 x 190, then 1 x 100
     * (runs this long also take the minimum across words of the run bitmap) */
    struct tbatch *b = tb_new();
    for (int i = 0; i < 510; i++) tb_add(b, -1, i < 300 ? "0" : i < 500 ? "1" : "2");
    REQUIRE(tb_validate(b, false, 3, NULL, NULL, b->pos));
    struct rbatch_in in = tb_in(b, true);
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, b->pos, 4096, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_ubatches == 3);
    if (sp.n_ubatches == 3) {
        const struct rbatch_ubatch *u = sp.ubatches;
        CHECK(u[0].n_seq_tokens == 10 && u[0].n_seqs == 3);
        CHECK(u[0].idx[0] == 0 && u[0].idx[9] == 9 && u[0].idx[10] == 300);
        CHECK(u[0].idx[20] == 500 && u[0].idx[29] == 509);
        CHECK(u[1].n_seq_tokens == 190 && u[1].n_seqs == 2);
        CHECK(u[1].idx[0] == 10 && u[1].idx[189] == 199 && u[1].idx[190] == 310);
        CHECK(u[1].idx[379] == 499);
        CHECK(u[2].n_seq_tokens == 100 && u[2].n_seqs == 1);
        CHECK(u[2].idx[0] == 200 && u[2].idx[99] == 299 && u[2].pos[99] == 299);
    }
    rbatch_split_free(&sp);
    check_split(&in, b->pos, 4096, RBATCH_SPLIT_EQUAL, false, 3, NULL);

    /* n_ubatch 100: three streams of 10; then one stream of up to 100 at a time (two never
     * fit), always from the sequence whose next token comes first */
    REQUIRE(rbatch_split(&in, b->pos, 100, RBATCH_SPLIT_EQUAL, false, &sp));
    const uint32_t want[6][3] = {{10, 3, 0},   {100, 1, 10},  {100, 1, 110},
                                 {90, 1, 210}, {100, 1, 310}, {90, 1, 410}};
    CHECK(sp.n_ubatches == 6);
    for (uint32_t u = 0; u < sp.n_ubatches && u < 6; u++) {
        const struct rbatch_ubatch *ub = &sp.ubatches[u];
        CHECK_MSG(ub->n_seq_tokens == want[u][0] && ub->n_seqs == want[u][1] &&
                      ub->idx[0] == (int32_t)want[u][2],
                  "ubatch %u: %u x %u from %d", u, ub->n_seqs, ub->n_seq_tokens, ub->idx[0]);
    }
    rbatch_split_free(&sp);
    check_split(&in, b->pos, 100, RBATCH_SPLIT_SEQ, false, 3, NULL);
    free(b);
}

static void test_split_seq(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    /* one stream per ubatch, the ready set with the earliest pending token first */
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, 3, "0 2 4 ; 1 3 ; 5");
    check_split(&in, b->pos, 2, RBATCH_SPLIT_SEQ, false, 3, "0 2 ; 1 3 ; 4 ; 5");
    check_split(&in, b->pos, 1, RBATCH_SPLIT_SEQ, false, 3, "0 ; 1 ; 2 ; 3 ; 4 ; 5");
    free(b);

    /* t0{0,1} t1{0} t2{1} t3{0} */
    b = tb_new();
    const char *seqs[] = {"0 1", "0", "1", "0"};
    for (int i = 0; i < 4; i++) tb_add(b, -1, seqs[i]);
    REQUIRE(tb_validate(b, false, 2, NULL, NULL, b->pos));
    in = tb_in(b, true);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, 2, "0 ; 1 3 ; 2");
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, 2, "0 ; 1 | 2 ; 3");
    free(b);
}

static void test_split_simple(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    check_split(&in, b->pos, 4, RBATCH_SPLIT_SIMPLE, false, 3, "0 1 2 3 ; 4 5");
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SIMPLE, false, 3, "0 1 2 3 4 5");
    check_split(&in, b->pos, 1, RBATCH_SPLIT_SIMPLE, false, 3, "0 ; 1 ; 2 ; 3 ; 4 ; 5");
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, b->pos, 4, RBATCH_SPLIT_SIMPLE, false, &sp));
    CHECK(sp.n_ubatches == 2);
    CHECK(sp.ubatches[0].n_tokens == 4 && sp.ubatches[0].n_seqs == 4);
    CHECK(sp.ubatches[0].n_seq_tokens == 0);
    CHECK(sp.ubatches[1].n_tokens == 2 && sp.ubatches[1].n_seqs == 2);
    rbatch_split_free(&sp);
    free(b);
}

static void test_split_outputs(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    struct rbatch_split sp;

    /* logits NULL: only the last batch token, wherever it lands */
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_outputs == 1 && sp.out_ids[0] == 5);
    CHECK(sp.ubatches[0].output[2] == 1 && sp.ubatches[0].output[0] == 0);
    rbatch_split_free(&sp);

    /* flags: rows follow ubatch order "0 | 1 | 5 ; 2 | 3 ; 4" */
    const int8_t flags[6] = {1, 0, 1, 0, 0, 1};
    memcpy(b->logits, flags, sizeof flags);
    in.logits = b->logits;
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_outputs == 3);
    CHECK(sp.out_ids[0] == 0 && sp.out_ids[1] == 5 && sp.out_ids[2] == 2);
    rbatch_split_free(&sp);
    CHECK(rbatch_token_wants_output(&in, 0, false) && !rbatch_token_wants_output(&in, 1, false));

    /* logits_all overrides the flags */
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, true, &sp));
    CHECK(sp.n_outputs == 6);
    const int32_t want[6] = {0, 1, 5, 2, 3, 4};
    for (int r = 0; r < 6; r++) CHECK(sp.out_ids[r] == want[r]);
    rbatch_split_free(&sp);

    /* seq split order "0 2 4 ; 1 3 ; 5", no output asked */
    memset(b->logits, 0, 6);
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, &sp));
    CHECK(sp.n_outputs == 0);
    rbatch_split_free(&sp);
    REQUIRE(rbatch_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, true, &sp));
    const int32_t want_seq[6] = {0, 2, 4, 1, 3, 5};
    CHECK(sp.n_outputs == 6);
    for (int r = 0; r < 6; r++) CHECK(sp.out_ids[r] == want_seq[r]);
    rbatch_split_free(&sp);
    free(b);
}

static void test_split_copies(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    int32_t pos[6];
    memcpy(pos, b->pos, sizeof pos);
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, pos, 64, RBATCH_SPLIT_EQUAL, false, &sp));
    /* scribble over everything the split was given */
    for (int i = 0; i < 6; i++) {
        b->token[i] = -7;
        b->ids[i][0] = 99;
        b->n_seq_id[i] = 3;
        pos[i] = -9;
    }
    const struct rbatch_ubatch *ub = &sp.ubatches[0]; /* tokens 0, 1, 5 */
    CHECK(ub->token[0] == 100 && ub->token[1] == 101 && ub->token[2] == 105);
    CHECK(ub->pos[0] == 0 && ub->pos[1] == 0 && ub->pos[2] == 0);
    CHECK(ub->n_seq_id[0] == 1 && ub->seq_id[0][0] == 0 && ub->seq_id[1][0] == 1);
    CHECK(ub->seq_id[2][0] == 2);
    ub = &sp.ubatches[1]; /* tokens 2, 3 */
    CHECK(ub->idx[0] == 2 && ub->pos[0] == 1 && ub->seq_id[0][0] == 0);
    rbatch_split_free(&sp);
    free(b);

    /* an embedding batch has no token ids to copy */
    b = batch_three_seqs();
    in = tb_in(b, true);
    float embd[6] = {0};
    in.token = NULL;
    in.embd = embd;
    REQUIRE(rbatch_split(&in, b->pos, 4, RBATCH_SPLIT_EQUAL, false, &sp));
    for (uint32_t u = 0; u < sp.n_ubatches; u++) CHECK(sp.ubatches[u].token == NULL);
    rbatch_split_free(&sp);
    check_split(&in, b->pos, 4, RBATCH_SPLIT_SIMPLE, false, 3, "0 1 2 3 ; 4 5");
    free(b);
}

static void test_split_no_seq_ids(void) {
    /* n_seq_id NULL: all tokens on sequence 0, one set */
    struct tbatch *b = tb_new();
    for (int i = 0; i < 7; i++) tb_add(b, i, "3");
    struct rbatch_in in = tb_in(b, true);
    in.n_seq_id = NULL;
    in.seq_id = NULL;
    check_split(&in, b->pos, 3, RBATCH_SPLIT_EQUAL, false, 1, "0 1 2 ; 3 4 5 ; 6");
    check_split(&in, b->pos, 3, RBATCH_SPLIT_SEQ, false, 1, "0 1 2 ; 3 4 5 ; 6");
    check_split(&in, b->pos, 3, RBATCH_SPLIT_SIMPLE, false, 1, "0 1 2 ; 3 4 5 ; 6");
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, b->pos, 3, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.ubatches[2].n_seq_id[0] == 1 && sp.ubatches[2].seq_id[0][0] == 0);
    rbatch_split_free(&sp);
    free(b);
}

static void test_split_errors(void) {
    struct tbatch *b = batch_three_seqs();
    struct rbatch_in in = tb_in(b, true);
    struct rbatch_split sp;
    memset(&sp, 0x5a, sizeof sp);
    rcore_error_clear();
    CHECK(!rbatch_split(&in, b->pos, 0, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK_ERR("n_ubatch");
    CHECK(sp.storage == NULL && sp.ubatches == NULL && sp.n_ubatches == 0 && sp.out_ids == NULL);
    in.n_tokens = 0;
    CHECK(!rbatch_split(&in, b->pos, 4, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK_ERR("batch is empty");
    rbatch_split_free(&sp); /* freeing a zeroed split is harmless */
    rbatch_split_free(NULL);
    free(b);
}

static void test_split_many_sequences(void) {
    /* 4,096 one-token sequences: one ubatch of 4,096 streams, or 4,096 ubatches of one */
    struct tbatch *b = tb_new();
    for (int i = 0; i < MAX_T; i++) {
        b->n_seq_id[b->n] = 1;
        b->ids[b->n][0] = (int32_t)((i * 2654435761u) % MAX_T); /* a permutation */
        b->pos[b->n] = 0;
        b->token[b->n] = i;
        b->n++;
    }
    struct rbatch_in in = tb_in(b, true);
    struct rbatch_split sp;
    REQUIRE(rbatch_split(&in, b->pos, MAX_T, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_ubatches == 1 && sp.ubatches[0].n_seqs == MAX_T);
    CHECK(sp.ubatches[0].n_seq_tokens == 1);
    bool in_order = true;
    for (int i = 0; i < MAX_T; i++) in_order = in_order && sp.ubatches[0].idx[i] == i;
    CHECK(in_order);
    rbatch_split_free(&sp);
    check_split(&in, b->pos, 1, RBATCH_SPLIT_EQUAL, false, MAX_T, NULL);
    check_split(&in, b->pos, 1000, RBATCH_SPLIT_EQUAL, false, MAX_T, NULL);
    check_split(&in, b->pos, 7, RBATCH_SPLIT_SEQ, false, MAX_T, NULL);
    REQUIRE(rbatch_split(&in, b->pos, 1000, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_ubatches == 5 && sp.ubatches[4].n_seqs == 96);
    rbatch_split_free(&sp);

    /* the last token continues the first token's sequence: that set has a run of 2, the
     * others of 1, so the first ubatch takes the 4,095 sets one token each */
    b->ids[MAX_T - 1][0] = b->ids[0][0];
    b->pos[MAX_T - 1] = 1;
    REQUIRE(rbatch_split(&in, b->pos, MAX_T, RBATCH_SPLIT_EQUAL, false, &sp));
    CHECK(sp.n_ubatches == 2 && sp.ubatches[0].n_seqs == MAX_T - 1);
    CHECK(sp.ubatches[0].n_seq_tokens == 1 && sp.ubatches[0].idx[MAX_T - 2] == MAX_T - 2);
    CHECK(sp.ubatches[1].n_tokens == 1 && sp.ubatches[1].idx[0] == MAX_T - 1);
    rbatch_split_free(&sp);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_EQUAL, false, MAX_T, NULL);
    check_split(&in, b->pos, 64, RBATCH_SPLIT_SEQ, false, MAX_T, NULL);
    free(b);
}

/* ---- randomized ------------------------------------------------------------------------------ */

/* Builds a random valid batch over n_seq sequences: some hold states (some of them forked from
 * one another), tokens interleave the sequences, repeat the previous token's set now and then
 * (runs), and couple sequences that share a state. want_pos receives the positions.
 * any_sets: couple any sequences, ignoring states (valid for the split, not for validation),
 * so that runs get cut by tokens of other sets on shared sequences.
 * distinct: one token on each of some sequences, as in a generation step. */
static void random_batch(unsigned long long *rng, struct tbatch *b, uint32_t n_seq, bool any_sets,
                         bool distinct, int32_t *pos_max, int32_t *state_id, bool *use_state_id,
                         int32_t *want_pos) {
    int64_t ident[MAX_IDS];
    int32_t last[MAX_IDS];
    int64_t fresh = 1000;
    const int n_groups = test_rand_int(rng, 4);
    int32_t base[4];
    for (int g = 0; g < 4; g++) base[g] = test_rand_int(rng, 100);
    *use_state_id = test_rand_int(rng, 4) != 0;
    for (uint32_t s = 0; s < n_seq; s++) {
        const int r = test_rand_int(rng, 3);
        if (r == 0 || n_groups == 0) {
            pos_max[s] = -1;
            state_id[s] = -1;
        } else {
            const int g = test_rand_int(rng, n_groups);
            pos_max[s] = base[g];
            state_id[s] = 10 + g;
        }
        if (!*use_state_id && pos_max[s] >= 0) {
            /* without state ids nothing is shared: give each its own state */
            pos_max[s] = test_rand_int(rng, 100);
            state_id[s] = 100 + (int32_t)s;
        }
        ident[s] = state_id[s];
        last[s] = pos_max[s];
    }

    int n_tokens =
        1 + (test_rand_int(rng, 4) == 0 ? test_rand_int(rng, 128) : test_rand_int(rng, 24));
    int32_t perm[MAX_IDS];
    if (distinct) {
        n_tokens = 1 + test_rand_int(rng, (int)n_seq);
        for (uint32_t s = 0; s < n_seq; s++) perm[s] = (int32_t)s;
        for (uint32_t s = n_seq - 1; s > 0; s--) {
            const int k = test_rand_int(rng, (int)s + 1);
            const int32_t t = perm[s];
            perm[s] = perm[k];
            perm[k] = t;
        }
    }
    b->n = 0;
    for (int i = 0; i < n_tokens; i++) {
        int32_t *ids = b->ids[i];
        int32_t n = 0;
        if (distinct) {
            ids[n++] = perm[i];
        } else if (i > 0 && test_rand_int(rng, 3) == 0) {
            /* the same set again, in a shuffled order (valid: they share the new state) */
            n = b->n_seq_id[i - 1];
            memcpy(ids, b->ids[i - 1], (size_t)n * sizeof(int32_t));
        } else {
            ids[n++] = (int32_t)test_rand_int(rng, (int)n_seq);
            if (test_rand_int(rng, 4) == 0) {
                const int want = 1 + test_rand_int(rng, 3);
                for (uint32_t s = 0; s < n_seq && n <= want; s++) {
                    const uint32_t c = (s + (uint32_t)ids[0]) % n_seq;
                    if ((int32_t)c != ids[0] && (any_sets || ident[c] == ident[ids[0]]) &&
                        test_rand_int(rng, 2) == 0) {
                        ids[n++] = (int32_t)c;
                    }
                }
            }
        }
        for (int32_t j = n - 1; j > 0; j--) {
            const int32_t k = (int32_t)test_rand_int(rng, j + 1);
            const int32_t t = ids[j];
            ids[j] = ids[k];
            ids[k] = t;
        }
        b->n_seq_id[i] = n;
        b->token[i] = test_rand_int(rng, 50000);
        b->logits[i] = (int8_t)(test_rand_int(rng, 3) == 0);
        const int32_t p = last[ids[0]] + 1;
        for (int32_t j = 0; j < n; j++) {
            last[ids[j]] = p;
            ident[ids[j]] = fresh;
        }
        fresh++;
        want_pos[i] = p;
        b->pos[i] = p;
        b->n++;
    }
}

static void test_random(void) {
    static const unsigned long long seeds[] = {1, 42, 20240601, 0xdeadbeef};
    struct tbatch *b = tb_new();
    int32_t want_pos[MAX_T], pos[MAX_T];
    char got[8192], want[8192], why[256];
    int n_bad = 0;
    for (size_t si = 0; si < sizeof seeds / sizeof seeds[0]; si++) {
        unsigned long long rng = seeds[si];
        for (int iter = 0; iter < 2000; iter++) {
            const uint32_t n_seq = 1 + (uint32_t)test_rand_int(&rng, 64);
            int32_t pos_max[MAX_IDS], state_id[MAX_IDS];
            bool use_sid;
            const int mode = test_rand_int(&rng, 6);
            const bool any_sets = mode == 0 || mode == 1;
            random_batch(&rng, b, n_seq, any_sets, mode == 2, pos_max, state_id, &use_sid,
                         want_pos);
            const bool with_pos = any_sets || test_rand_int(&rng, 2) == 0;
            bool ok = true;
            if (any_sets) {
                memcpy(pos, want_pos, (size_t)b->n * sizeof(int32_t));
            } else {
                ok = tb_validate(b, with_pos, n_seq, pos_max, use_sid ? state_id : NULL, pos);
            }
            for (int i = 0; ok && i < b->n; i++) ok = pos[i] == want_pos[i];
            if (!ok) {
                if (n_bad++ < 5) {
                    fprintf(stderr, "seed %llu iter %d: validate: %s\n", seeds[si], iter,
                            rcore_error_get());
                }
                continue;
            }

            struct rbatch_in in = tb_in(b, with_pos);
            const int logits_mode = test_rand_int(&rng, 3);
            in.logits = logits_mode == 1 ? b->logits : NULL;
            const bool logits_all = logits_mode == 2;
            const enum rbatch_split_kind kinds[3] = {RBATCH_SPLIT_EQUAL, RBATCH_SPLIT_SEQ,
                                                     RBATCH_SPLIT_SIMPLE};
            for (int ki = 0; ki < 3; ki++) {
                const uint32_t n_ubatch = 1 + (uint32_t)test_rand_int(&rng, 64);
                struct rbatch_split sp;
                if (!rbatch_split(&in, pos, n_ubatch, kinds[ki], logits_all, &sp)) {
                    if (n_bad++ < 5) fprintf(stderr, "split: %s\n", rcore_error_get());
                    continue;
                }
                bool good = split_ok(&in, pos, n_ubatch, kinds[ki], logits_all, n_seq, &sp, why,
                                     sizeof why);
                if (good && kinds[ki] != RBATCH_SPLIT_SIMPLE) {
                    layout_of(&sp, got, sizeof got);
                    reference_layout(&in, n_ubatch, kinds[ki], n_seq, want, sizeof want);
                    if (strcmp(got, want) != 0) {
                        snprintf(why, sizeof why, "layout differs from the reference");
                        good = false;
                    }
                }
                if (!good && n_bad++ < 5) {
                    fprintf(stderr, "seed %llu iter %d kind %d n_ubatch %u: %s\n", seeds[si], iter,
                            ki, n_ubatch, why);
                }
                rbatch_split_free(&sp);
            }
        }
    }
    CHECK_MSG(n_bad == 0, "%d random batches failed", n_bad);
    free(b);
}

/* Random invalid edits of valid batches must be reported, naming the edited token or an
 * earlier one, and never crash. */
static void test_random_invalid(void) {
    struct tbatch *b = tb_new();
    int32_t want_pos[MAX_T], pos[MAX_T];
    unsigned long long rng = 7;
    int n_bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        const uint32_t n_seq = 1 + (uint32_t)test_rand_int(&rng, 64);
        int32_t pos_max[MAX_IDS], state_id[MAX_IDS];
        bool use_sid;
        random_batch(&rng, b, n_seq, false, iter % 5 == 0, pos_max, state_id, &use_sid, want_pos);
        const int32_t t = (int32_t)test_rand_int(&rng, b->n);
        const int kind = test_rand_int(&rng, 4);
        const char *expect = NULL;
        switch (kind) {
        case 0:
            b->ids[t][0] = (int32_t)n_seq;
            expect = "is out of range";
            break;
        case 1:
            b->pos[t] = want_pos[t] + 1 + test_rand_int(&rng, 3);
            expect = "does not follow";
            break;
        case 2:
            b->pos[t] = -1 - test_rand_int(&rng, 3);
            expect = "is negative";
            break;
        default:
            b->token[t] = 50000 + test_rand_int(&rng, 10);
            expect = "is out of range 0..49999";
            break;
        }
        /* a shifted position of an empty sequence's first token is still valid */
        bool may_pass = kind == 1;
        bool ok = tb_validate(b, true, n_seq, pos_max, use_sid ? state_id : NULL, pos);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "batch token %d: ", t);
        if (ok && !may_pass) n_bad++;
        if (!ok && (strstr(rcore_error_get(), expect) == NULL ||
                    strncmp(rcore_error_get(), prefix, strlen(prefix)) != 0)) {
            /* a moved position breaks the next token of that sequence instead */
            if (!(kind == 1 && strstr(rcore_error_get(), expect))) {
                if (n_bad++ < 5) fprintf(stderr, "iter %d: %s\n", iter, rcore_error_get());
            }
        }
    }
    CHECK_MSG(n_bad == 0, "%d invalid batches misreported", n_bad);
    free(b);
}

int main(void) {
    RUN(test_validate_empty);
    RUN(test_validate_token_range);
    RUN(test_validate_no_input);
    RUN(test_validate_seq_range);
    RUN(test_validate_duplicate_seq);
    RUN(test_validate_n_seq_id);
    RUN(test_validate_negative_pos);
    RUN(test_validate_position_follows);
    RUN(test_validate_coupled);
    RUN(test_validate_join);
    RUN(test_validate_positions_filled);
    RUN(test_validate_many_sequences);
    RUN(test_split_equal_basic);
    RUN(test_split_equal_multi_seq);
    RUN(test_split_long_runs);
    RUN(test_split_seq);
    RUN(test_split_simple);
    RUN(test_split_outputs);
    RUN(test_split_copies);
    RUN(test_split_no_seq_ids);
    RUN(test_split_errors);
    RUN(test_split_many_sequences);
    RUN(test_random);
    RUN(test_random_invalid);
    return test_finish("test_batch");
}
