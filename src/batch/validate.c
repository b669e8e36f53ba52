/*
 * batch validation: checks a batch against what the sequences hold (batch.h).
 *
 * Data structure, and why:
 *
 *  - Validation keeps four arrays indexed by sequence id (last position, last batch token, a
 *    state identity and a "seen in token i" stamp for duplicate ids). One pass over the tokens
 *    with O(1) work per sequence id gives O(n_tokens * ids + n_seq_max) time; the identities
 *    are 64-bit so that the fresh ones a token hands out can never collide with the caller's
 *    int32 state ids.
 */
#include "batch_impl.h"

#include "../core/core.h"

#include <stdlib.h>
#include <string.h>

/* ---- validation ------------------------------------------------------------------------ */

/* Identities of states while the batch is simulated: the caller's state ids are >= 0, every
 * sequence without a state shares EMPTY, and the ones tokens hand out start past any int32
 * state id and any sequence id (the stand-in identity when the caller gives no state ids). */
#define IDENT_EMPTY ((int64_t)-1)
#define IDENT_FRESH ((int64_t)UINT32_MAX + 1)

static bool check_ids(const struct rbatch_in *batch, const struct rbatch_seq_info *seqs, int32_t i,
                      int32_t *stamp) {
    int32_t n = tok_n_ids(batch, i);
    if (n < 1) {
        rcore_error_set("batch token %d: n_seq_id is %d (a token needs 1..%u sequence ids)", i, n,
                        seqs->n_seq_max);
        return false;
    }
    if ((uint32_t)n > seqs->n_seq_max) {
        rcore_error_set("batch token %d: n_seq_id is %d, more than the %u sequences", i, n,
                        seqs->n_seq_max);
        return false;
    }
    const int32_t *ids = tok_ids(batch, i);
    if (!ids) {
        rcore_error_set("batch token %d: seq_id row is NULL", i);
        return false;
    }
    for (int32_t j = 0; j < n; j++) {
        int32_t s = ids[j];
        if (s < 0 || (uint32_t)s >= seqs->n_seq_max) {
            rcore_error_set("batch token %d: sequence id %d is out of range 0..%u", i, s,
                            seqs->n_seq_max - 1);
            return false;
        }
        if (stamp[s] == i) {
            rcore_error_set("batch token %d: sequence id %d appears twice", i, s);
            return false;
        }
        stamp[s] = i;
    }
    return true;
}

bool rbatch_validate(const struct rbatch_in *batch, int32_t n_vocab,
                     const struct rbatch_seq_info *seqs, int32_t *pos_out) {
    if (!batch || !seqs || !pos_out) {
        rcore_error_set("rbatch_validate: batch, seqs and pos_out must not be NULL");
        return false;
    }
    const int32_t n_tokens = batch->n_tokens;
    if (n_tokens < 1) {
        rcore_error_set("batch is empty (n_tokens is %d)", n_tokens);
        return false;
    }
    if (!batch->token && !batch->embd) {
        rcore_error_set("batch has neither token ids nor embeddings");
        return false;
    }
    if (seqs->n_seq_max == 0) {
        rcore_error_set("batch: no sequence id is valid (n_seq_max is 0)");
        return false;
    }
    if (batch->n_seq_id && !batch->seq_id) {
        rcore_error_set("batch has n_seq_id but no seq_id");
        return false;
    }

    const size_t n_seq = seqs->n_seq_max;
    struct layout l = {0, true};
    size_t o_ident = LAY(&l, n_seq, int64_t);
    size_t o_last = LAY(&l, n_seq, int32_t);
    size_t o_last_tok = LAY(&l, n_seq, int32_t);
    size_t o_stamp = LAY(&l, n_seq, int32_t);
    char *mem = l.ok ? malloc(l.size) : NULL;
    if (!mem) {
        rcore_error_set("batch: out of memory for validating %u sequences", seqs->n_seq_max);
        return false;
    }
    int64_t *ident = (int64_t *)(void *)(mem + o_ident);
    int32_t *last = (int32_t *)(void *)(mem + o_last);
    int32_t *last_tok = (int32_t *)(void *)(mem + o_last_tok);
    int32_t *stamp = (int32_t *)(void *)(mem + o_stamp);

    for (size_t s = 0; s < n_seq; s++) {
        /* a missing pos_max means nothing is held yet */
        int32_t pm = seqs->pos_max ? seqs->pos_max[s] : -1;
        last[s] = pm < 0 ? -1 : pm;
        last_tok[s] = -1;
        stamp[s] = -1;
        if (seqs->state_id) {
            ident[s] = seqs->state_id[s] < 0 ? IDENT_EMPTY : seqs->state_id[s];
        } else {
            ident[s] = last[s] >= 0 ? (int64_t)s : IDENT_EMPTY;
        }
    }

    bool ok = false;
    int64_t next_ident = IDENT_FRESH;
    for (int32_t i = 0; i < n_tokens; i++) {
        if (batch->token && n_vocab > 0 && (batch->token[i] < 0 || batch->token[i] >= n_vocab)) {
            rcore_error_set("batch token %d: token id %d is out of range 0..%d", i, batch->token[i],
                            n_vocab - 1);
            goto done;
        }
        if (!check_ids(batch, seqs, i, stamp)) goto done;
        const int32_t n = tok_n_ids(batch, i);
        const int32_t *ids = tok_ids(batch, i);

        int32_t p;
        if (batch->pos) {
            p = batch->pos[i];
            if (p < 0) {
                rcore_error_set("batch token %d: position %d is negative", i, p);
                goto done;
            }
        } else {
            /* llama.cpp semantics: the token follows what its first sequence holds */
            if (last[ids[0]] == INT32_MAX) {
                rcore_error_set("batch token %d: sequence %d already holds the largest position", i,
                                ids[0]);
                goto done;
            }
            p = last[ids[0]] + 1;
        }

        /* the state check comes first: for coupled sequences it is the real reason, where a
         * position mismatch would only be its symptom */
        for (int32_t j = 1; j < n; j++) {
            if (ident[ids[j]] != ident[ids[0]]) {
                rcore_error_set("batch token %d: sequences %d and %d do not share one state "
                                "(fork with seq_cp first)",
                                i, ids[0], ids[j]);
                goto done;
            }
        }
        for (int32_t j = 0; j < n; j++) {
            int32_t s = ids[j];
            if (last[s] < 0 || (int64_t)p == (int64_t)last[s] + 1) continue;
            if (last_tok[s] < 0) {
                rcore_error_set("batch token %d: position %d of sequence %d does not follow %d "
                                "(the sequence holds positions up to %d)",
                                i, p, s, last[s], last[s]);
            } else {
                rcore_error_set("batch token %d: position %d of sequence %d does not follow %d "
                                "(the previous token of the batch on that sequence, token %d, "
                                "is at %d)",
                                i, p, s, last[s], last_tok[s], last[s]);
            }
            goto done;
        }

        /* the token leaves all its sequences in one new state, shared by them alone */
        for (int32_t j = 0; j < n; j++) {
            last[ids[j]] = p;
            last_tok[ids[j]] = i;
            ident[ids[j]] = next_ident;
        }
        next_ident++;
        pos_out[i] = p;
    }
    ok = true;
done:
    free(mem);
    return ok;
}
