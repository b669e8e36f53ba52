/*
 * sample: turns a row of logits into one token id, in the shape of llama.cpp's llama_sampler.
 *
 * Data structures
 *  - Candidates (struct rsample_candidates, llama_token_data_array): an array of {id, logit,
 *    p} that samplers filter in place, with its size, the index a selecting sampler chose
 *    ("selected", -1 until one does) and a "sorted" flag. Filters shrink `size` and may
 *    reorder the array; a sampler that needs the candidates in order (top-p) sorts them once
 *    and sets the flag so that the next one does not sort again.
 *  - A sampler (struct rsample) is a table of operations plus its own state, so that a chain
 *    can hold any mix of samplers, and a caller can add its own (rsample_init), as with
 *    llama_sampler_i. Operations: name, accept(token) (remember a token that was chosen:
 *    penalties keep a window of them), apply(candidates), reset (forget the history; the
 *    dist sampler reseeds), free.
 *  - A chain is itself a sampler that holds samplers and applies them in order. It owns them.
 *
 * Order. Candidates are ranked by logit, larger first, and equal logits by id, lower first, so
 * that every sort, top-k and argmax is deterministic on every machine. A NaN logit ranks as
 * -INFINITY (such a token is never chosen).
 *
 * Probabilities. Every softmax is computed in double, with the largest logit subtracted
 * first: logits of 1e30 or +INFINITY give no NaN (+INFINITY logits share the whole mass). A
 * logit of -INFINITY has probability 0 and is never drawn.
 *
 * Randomness. The dist sampler draws with its own xoshiro256** generator seeded from a 64-bit
 * seed by splitmix64, and samples by inverse CDF with a uniform double in [0, 1): the same
 * seed gives the same tokens on every machine and compiler. reset reseeds it with the seed
 * given at init (as llama.cpp's dist does), so a reset chain repeats its draws.
 *
 * Errors: functions that fail set the thread's error (rcore_error_set) and return NULL, false
 * or -1. Apply fails only on candidates that allow no choice (none, or all masked). Samplers
 * are not thread-safe: one sampler is used by one thread at a time.
 */
#ifndef RECUR_SAMPLE_H
#define RECUR_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rsample_token_data {
    int32_t id;  /* token id */
    float logit; /* log-odds, changed by temperature and penalties */
    float p;     /* probability, valid after a softmax (rsample_softmax, top-p, dist) */
};

struct rsample_candidates {
    struct rsample_token_data *data; /* not owned */
    size_t size;
    int64_t selected; /* index into data of the chosen token; -1 before a selector ran */
    bool sorted;      /* data[0 .. size) is in rank order (see "Order" above) */
};

struct rsample;

/* A sampler's operations. Only apply is required; a NULL accept / reset does nothing and a
 * NULL free frees nothing (the sampler's ctx is then the caller's business). */
struct rsample_ops {
    const char *(*name)(const struct rsample *smpl);
    void (*accept)(struct rsample *smpl, int32_t token);
    /* Filters or selects in place; false with the error set when no choice is possible. */
    bool (*apply)(struct rsample *smpl, struct rsample_candidates *cands);
    void (*reset)(struct rsample *smpl);
    void (*free)(struct rsample *smpl); /* frees ctx, not smpl itself */
};

struct rsample {
    const struct rsample_ops *ops;
    void *ctx;
    /* candidates built by rsample_sample, kept between calls so sampling does not allocate
       once the buffer has the vocabulary's size */
    struct rsample_token_data *buf;
    size_t buf_cap;
    /* candidates left in buf when the selector of the last rsample_sample ran (0: none yet),
       read by rsample_get_probs */
    size_t last_size;
};

/* A sampler over the caller's ops and ctx (ops must outlive it). NULL on allocation failure
 * or when ops or ops->apply is NULL (ctx is then not freed). */
struct rsample *rsample_init(const struct rsample_ops *ops, void *ctx);

/* ---- the building blocks ---------------------------------------------------------------- */
/* Each returns a new sampler the caller owns (rsample_free, or hand it to a chain), NULL with
 * the error set on allocation failure or an invalid argument. */

/* Selects the largest logit; among equal ones the lowest id. */
struct rsample *rsample_init_greedy(void);
/* Selects a token at random from the softmax of the candidates. */
struct rsample *rsample_init_dist(uint64_t seed);
/* Divides the logits by temp. temp <= 0: keeps only the best candidate (greedy). */
struct rsample *rsample_init_temp(float temp);
/* Keeps the k best candidates, sorted. k <= 0 or k >= size: no change. */
struct rsample *rsample_init_top_k(int32_t k);
/* Sorts, then keeps the shortest prefix whose probability mass is >= p (an exact sum of p
 * stops there), and at least min_keep candidates (0 counts as 1). p >= 1: no change. */
struct rsample *rsample_init_top_p(float p, size_t min_keep);
/* Keeps the candidates whose probability is >= min_p times the largest one, and at least
 * min_keep (0 counts as 1), in their order. min_p <= 0: no change. */
struct rsample *rsample_init_min_p(float min_p, size_t min_keep);
/* Penalises the tokens among the last last_n accepted ones (last_n <= 0: none, as llama.cpp
 * clamps it). For a token seen count > 0 times: logit > 0 ? logit / repeat : logit * repeat,
 * then logit -= count * freq + present. repeat must be > 0 (1: off). Reset empties the
 * window. */
struct rsample *rsample_init_penalties(int32_t last_n, float repeat, float freq, float present);

/* A bias added to one token's logit (llama_logit_bias): -INFINITY bans the token. */
struct rsample_logit_bias {
    int32_t token;
    float bias;
};
/* Adds bias[i].bias to the logit of token bias[i].token (a token named twice gets both).
 * The array is copied. NULL with the error set when n_vocab < 1, n_bias < 0, bias is NULL
 * with n_bias > 0, a token is outside 0 .. n_vocab-1 or a bias is NaN or +INFINITY. */
struct rsample *rsample_init_logit_bias(int32_t n_vocab, int32_t n_bias,
                                        const struct rsample_logit_bias *bias);

/* An empty chain. */
struct rsample *rsample_chain_init(void);
/* Appends smpl to chain, which then owns it. smpl is owned by the chain even on failure (then
 * freed). Returns false on allocation failure, or when chain is not a chain, or when smpl is
 * NULL: then the error is left as it was, so `ok = rsample_chain_add(c, rsample_init_x())`
 * reports the failed init's message. */
bool rsample_chain_add(struct rsample *chain, struct rsample *smpl);
/* Samplers in the chain, and the i-th (not owned by the caller); 0 / NULL if not a chain or
 * i is out of range. */
size_t rsample_chain_n(const struct rsample *chain);
struct rsample *rsample_chain_get(const struct rsample *chain, size_t i);

/* The parameters of the default chain (those of struct recur_sampler_params). */
struct rsample_params {
    uint64_t seed;
    float temp;
    int32_t top_k;
    float top_p;
    float min_p;
    int32_t penalty_last_n;
    float penalty_repeat, penalty_freq, penalty_present;
    int32_t n_logit_bias;                        /* 0: no logit-bias sampler */
    const struct rsample_logit_bias *logit_bias; /* copied by rsample_chain_default */
};

/* The chain of llama.cpp's common sampling: [logit bias ->] penalties -> top-k -> top-p -> min-p ->
 * temp -> dist; temp <= 0: penalties -> greedy (the filters cannot remove the best candidate, so
 * they are left out). Its candidate buffer is allocated for n_vocab tokens at once. NULL with
 * the error naming the field when a parameter is NaN or penalty_repeat <= 0. */
struct rsample *rsample_chain_default(const struct rsample_params *params, int32_t n_vocab);

/* ---- using a sampler -------------------------------------------------------------------- */

const char *rsample_name(const struct rsample *smpl);     /* "greedy", "dist", ..., "chain" */
void rsample_accept(struct rsample *smpl, int32_t token); /* NULL smpl: nothing */
bool rsample_apply(struct rsample *smpl, struct rsample_candidates *cands);
void rsample_reset(struct rsample *smpl); /* NULL smpl: nothing */
void rsample_free(struct rsample *smpl);  /* NULL is fine */

/* Builds candidates from logits[0 .. n_vocab) (id i, NaN logits turned into -INFINITY),
 * applies smpl, accepts and returns the selected token. -1 with the error set when n_vocab
 * < 1, on allocation failure, or when the sampler selects nothing (a chain without greedy or
 * dist at its end). */
int32_t rsample_sample(struct rsample *smpl, const float *logits, int32_t n_vocab);

/* After rsample_sample: the candidates the selector drew from (those the filters kept, with
 * the logits temperature and penalties left them), their probabilities the softmax of those
 * logits (computed in double). Writes the n most probable (fewer when fewer were left) to
 * ids / probs in rank order (see "Order") and returns how many; 0 before any sample, -1 with
 * the error set when smpl, ids or probs is NULL or n < 0. */
int32_t rsample_get_probs(const struct rsample *smpl, int32_t *ids, float *probs, int32_t n);
/* The probability of token among those candidates (0 when it was filtered out or before any
 * sample); -1 with the error set when smpl is NULL. */
float rsample_get_prob(const struct rsample *smpl, int32_t token);

/* ---- helpers shared with the tests ------------------------------------------------------- */

/* Sets p of every candidate to its softmax probability (computed in double); no reordering. */
void rsample_softmax(struct rsample_candidates *cands);
/* Sorts the candidates in rank order and sets sorted. */
void rsample_sort(struct rsample_candidates *cands);

#endif /* RECUR_SAMPLE_H */
