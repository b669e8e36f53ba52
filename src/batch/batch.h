/*
 * batch: checks a batch of tokens and cuts it into micro-batches (ubatches).
 *
 * A batch is what the caller hands to recur_decode: n_tokens tokens (or embedding rows), each
 * with a position, one or more sequence ids and an output flag. This module knows nothing of
 * models or of the memory: what it needs to know about the sequences (the position each one
 * holds, and which of them share one state) comes in as plain arrays.
 *
 * Splits (each ubatch holds at most n_ubatch tokens; every token lands in exactly one ubatch;
 * the tokens of one sequence keep their batch order across ubatches):
 *  - equal:  for recurrent memory. A ubatch holds n_seqs "streams" of n_seq_tokens tokens
 *            each, stored stream-major: token j of stream s is at index s*n_seq_tokens + j.
 *            A stream is a run of tokens that all carry the same set of sequence ids; the
 *            streams of one ubatch share no sequence id.
 *  - seq:    one stream per ubatch (pooled embeddings need whole sequences together).
 *  - simple: batch order, n_ubatch tokens at a time, no grouping (n_seq_tokens = 0).
 *
 * Output rows: out_ids lists, in the order the ubatches produce them, the batch index of every
 * token that asked for output. Row r of the outputs belongs to batch token out_ids[r].
 *
 * Data structure: a split is one allocation of per-token index arrays (tokens regrouped in
 * ubatch order) plus a small array of ubatch headers pointing into it, so a batch of any size
 * costs three allocations and no per-ubatch malloc.
 */
#ifndef RECUR_BATCH_H
#define RECUR_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The caller's batch, in the shape of struct recur_batch / llama_batch. Not owned. */
struct rbatch_in {
    int32_t n_tokens;
    const int32_t *token;    /* [n_tokens] or NULL when embd is given */
    const float *embd;       /* [n_tokens * n_embd] or NULL */
    const int32_t *pos;      /* [n_tokens] or NULL: positions follow what each seq holds */
    const int32_t *n_seq_id; /* [n_tokens] or NULL: every token on sequence 0 */
    int32_t *const *seq_id;  /* [n_tokens][n_seq_id[i]] or NULL (with n_seq_id NULL) */
    const int8_t *logits;    /* [n_tokens] or NULL: only the last token has output */
};

/* What the sequences hold before the batch, as seen by the memory. */
struct rbatch_seq_info {
    uint32_t n_seq_max;      /* valid sequence ids are 0 .. n_seq_max-1 */
    const int32_t *pos_max;  /* [n_seq_max]: last position held, -1 when empty */
    const int32_t *state_id; /* [n_seq_max]: sequences with equal ids share one state;
                                -1 = no state. NULL: no two sequences share. */
};

enum rbatch_split_kind { RBATCH_SPLIT_EQUAL, RBATCH_SPLIT_SEQ, RBATCH_SPLIT_SIMPLE };

struct rbatch_ubatch {
    uint32_t n_tokens;     /* n_seqs * n_seq_tokens for equal and seq splits */
    uint32_t n_seq_tokens; /* tokens per stream; 0 for the simple split */
    uint32_t n_seqs;       /* streams (equal / seq split); tokens (simple split) */
    const int32_t *idx;    /* [n_tokens] batch index of each token, in ubatch order */
    const int32_t *token;  /* [n_tokens] token ids (NULL for an embedding batch) */
    const int32_t *pos;    /* [n_tokens] positions (filled in when the batch had none) */
    const int8_t *output;  /* [n_tokens] 1 where the token produces an output row */
    /* sequence ids of token t: seq_id[t][0 .. n_seq_id[t]-1]; the first is the stream's
       "lead" sequence. For equal / seq splits every token of a stream has the same set. */
    const int32_t *n_seq_id;
    const int32_t *const *seq_id;
};

struct rbatch_split {
    enum rbatch_split_kind kind;
    uint32_t n_ubatch; /* the limit used */
    int32_t n_tokens;  /* of the batch */
    uint32_t n_ubatches;
    struct rbatch_ubatch *ubatches; /* [n_ubatches] */
    int32_t n_outputs;
    int32_t *out_ids; /* [n_outputs] batch index per output row */
    void *storage;    /* owned: everything the ubatches point into */
};

/*
 * Checks a batch against the sequences' current contents and fills in positions.
 *
 * Valid means: n_tokens >= 1; tokens (when given) in 0 .. n_vocab-1 (n_vocab <= 0: not
 * checked); token or embd given; every token has 1 .. n_seq_max distinct sequence ids, each
 * in 0 .. n_seq_max-1; positions >= 0; the first token of a sequence that holds a state is at
 * pos_max+1 (an empty sequence may start anywhere), and each later token of that sequence is
 * at the previous one + 1; the sequences of one token share one state at that point (they
 * were forked with seq_cp, or are all empty, or were joined by an earlier token of the batch).
 *
 * pos_out: [n_tokens], receives the positions (the batch's own, or those that follow what each
 * token's first sequence holds when batch->pos is NULL).
 *
 * Returns true, or false with the last error naming the token and the reason
 * ("batch token 5: sequence id 9 is out of range 0..3"). Nothing is allocated on failure.
 */
bool rbatch_validate(const struct rbatch_in *batch, int32_t n_vocab,
                     const struct rbatch_seq_info *seqs, int32_t *pos_out);

/*
 * Cuts a validated batch into ubatches of at most n_ubatch tokens (n_ubatch >= 1).
 * pos: the positions rbatch_validate filled in (the split keeps a copy).
 * logits_all: every token produces output, whatever batch->logits says.
 * Returns true with *out filled (free with rbatch_split_free), or false (allocation) with the
 * last error set and *out zeroed. The split copies what it needs (positions, sequence ids,
 * tokens, output flags): it keeps no pointer into the batch or into pos.
 */
bool rbatch_split(const struct rbatch_in *batch, const int32_t *pos, uint32_t n_ubatch,
                  enum rbatch_split_kind kind, bool logits_all, struct rbatch_split *out);

void rbatch_split_free(struct rbatch_split *split);

/* Returns true when token i of the batch asks for output (logits NULL: only the last). */
bool rbatch_token_wants_output(const struct rbatch_in *batch, int32_t i, bool logits_all);

#endif /* RECUR_BATCH_H */
