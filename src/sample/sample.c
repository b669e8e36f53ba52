/*
 * The samplers of sample.h. Each built-in sampler is a static ops table plus a small heap
 * context:
 *  - dist keeps its seed and the four words of a xoshiro256** generator (the seed is kept so
 *    that reset can restart the same stream);
 *  - penalties keep a ring buffer of the last last_n accepted tokens, and a scratch array of
 *    the same size where apply sorts a copy of the window, so that counting a candidate's
 *    occurrences is a binary search and apply never allocates;
 *  - a chain keeps a growable array of the samplers it owns.
 * Filters work in place on the caller's candidates and never allocate; top-k selects with a
 * heap built in the array itself (O(n log k), not a full sort of the vocabulary).
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- order and probabilities ------------------------------------------------------------ */

/* NaN ranks as -INFINITY, so that a corrupt logit is never chosen and qsort sees a total
 * order (a comparator that is inconsistent on NaN is undefined behaviour for qsort). */
static float rank_key(float logit) {
    return isnan(logit) ? -INFINITY : logit;
}

static bool ranks_before(const struct rsample_token_data *a, const struct rsample_token_data *b) {
    float ka = rank_key(a->logit), kb = rank_key(b->logit);
    if (ka != kb) return ka > kb;
    return a->id < b->id;
}

static int cmp_rank(const void *pa, const void *pb) {
    const struct rsample_token_data *a = pa, *b = pb;
    if (ranks_before(a, b)) return -1;
    return ranks_before(b, a) ? 1 : 0;
}

void rsample_sort(struct rsample_candidates *cands) {
    if (!cands->sorted && cands->size > 1)
        qsort(cands->data, cands->size, sizeof *cands->data, cmp_rank);
    cands->sorted = true;
}

static size_t best_index(const struct rsample_candidates *cands) {
    size_t best = 0;
    for (size_t i = 1; i < cands->size; i++)
        if (ranks_before(&cands->data[i], &cands->data[best])) best = i;
    return best;
}

static float max_key(const struct rsample_candidates *cands) {
    float m = -INFINITY;
    for (size_t i = 0; i < cands->size; i++) {
        float k = rank_key(cands->data[i].logit);
        if (k > m) m = k;
    }
    return m;
}

/* exp(logit - max) in double. The maximum itself weighs exactly 1 rather than exp(max - max):
 * with max = +INFINITY that difference would be NaN, and this way the +INFINITY logits share
 * the mass while every finite one gets exp(-inf) = 0. */
static double weight(float logit, float max) {
    float k = rank_key(logit);
    if (k == max) return 1.0;
    return exp((double)k - (double)max);
}

static double weight_sum(const struct rsample_candidates *cands, float max) {
    double sum = 0.0;
    for (size_t i = 0; i < cands->size; i++) sum += weight(cands->data[i].logit, max);
    return sum;
}

void rsample_softmax(struct rsample_candidates *cands) {
    float max = max_key(cands);
    double sum = weight_sum(cands, max); /* >= 1: the maximum weighs 1 */
    for (size_t i = 0; i < cands->size; i++)
        cands->data[i].p = (float)(weight(cands->data[i].logit, max) / sum);
}

/* The selectors' refusal: drawing from nothing, or from tokens that were all masked out,
 * would return a token the caller excluded. */
static bool check_choosable(const struct rsample_candidates *cands, const char *who) {
    if (cands->size == 0) {
        rcore_error_set("sampler %s: no candidates", who);
        return false;
    }
    if (max_key(cands) == -INFINITY) {
        rcore_error_set("sampler %s: every one of %zu candidates is masked (-inf or NaN)", who,
                        cands->size);
        return false;
    }
    return true;
}

/* ---- the sampler object ----------------------------------------------------------------- */

struct rsample *rsample_init(const struct rsample_ops *ops, void *ctx) {
    if (!ops || !ops->apply) {
        rcore_error_set("sampler: %s", ops ? "ops->apply is NULL" : "ops is NULL");
        return NULL;
    }
    struct rsample *s = calloc(1, sizeof *s);
    if (!s) {
        rcore_error_set("sampler: out of memory");
        return NULL;
    }
    s->ops = ops;
    s->ctx = ctx;
    return s;
}

/* For the built-in samplers: on failure the context is freed through the ops, so an init
 * never leaks what it allocated before the object itself. */
static struct rsample *init_owning(const struct rsample_ops *ops, void *ctx) {
    struct rsample *s = rsample_init(ops, ctx);
    if (!s) {
        struct rsample tmp = {.ops = ops, .ctx = ctx};
        ops->free(&tmp);
    }
    return s;
}

/* A context struct, checked; the message names the sampler. */
static void *ctx_alloc(size_t size, const char *who) {
    void *p = calloc(1, size);
    if (!p) rcore_error_set("sampler %s: out of memory", who);
    return p;
}

static void free_ctx(struct rsample *smpl) {
    free(smpl->ctx);
}

const char *rsample_name(const struct rsample *smpl) {
    return smpl && smpl->ops->name ? smpl->ops->name(smpl) : "?";
}

void rsample_accept(struct rsample *smpl, int32_t token) {
    if (smpl && smpl->ops->accept) smpl->ops->accept(smpl, token);
}

bool rsample_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    if (!smpl || !cands) {
        rcore_error_set("sampler apply: %s is NULL", smpl ? "candidates" : "sampler");
        return false;
    }
    return smpl->ops->apply(smpl, cands);
}

void rsample_reset(struct rsample *smpl) {
    if (smpl && smpl->ops->reset) smpl->ops->reset(smpl);
}

void rsample_free(struct rsample *smpl) {
    if (!smpl) return;
    if (smpl->ops->free) smpl->ops->free(smpl);
    free(smpl->buf);
    free(smpl);
}

static bool reserve_buf(struct rsample *smpl, size_t n) {
    if (smpl->buf_cap >= n) return true;
    size_t bytes;
    struct rsample_token_data *b;
    if (!rcore_mul_size(n, sizeof *b, &bytes) || !(b = malloc(bytes))) {
        rcore_error_set("sampler %s: out of memory for %zu candidates", rsample_name(smpl), n);
        return false;
    }
    free(smpl->buf); /* nothing in it survives between calls */
    smpl->buf = b;
    smpl->buf_cap = n;
    return true;
}

int32_t rsample_sample(struct rsample *smpl, const float *logits, int32_t n_vocab) {
    if (!smpl || !logits) {
        rcore_error_set("sample: %s is NULL", smpl ? "logits" : "sampler");
        return -1;
    }
    if (n_vocab < 1) {
        rcore_error_set("sample: n_vocab is %d, at least 1 is needed", (int)n_vocab);
        return -1;
    }
    if (!reserve_buf(smpl, (size_t)n_vocab)) return -1;
    for (int32_t i = 0; i < n_vocab; i++) {
        smpl->buf[i].id = i;
        smpl->buf[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
        smpl->buf[i].p = 0.0f;
    }
    struct rsample_candidates cands = {
        .data = smpl->buf, .size = (size_t)n_vocab, .selected = -1, .sorted = false};
    smpl->last_size = 0;
    if (!rsample_apply(smpl, &cands)) return -1;
    /* the filters shrink and reorder buf in place: what is left is what the selector saw */
    smpl->last_size = cands.data == smpl->buf ? cands.size : 0;
    if (cands.selected < 0 || (size_t)cands.selected >= cands.size) {
        rcore_error_set("sampler %s selected no token (a chain must end with greedy or dist)",
                        rsample_name(smpl));
        return -1;
    }
    int32_t token = cands.data[cands.selected].id;
    rsample_accept(smpl, token);
    return token;
}

int32_t rsample_get_probs(const struct rsample *smpl, int32_t *ids, float *probs, int32_t n) {
    if (!smpl || !ids || !probs || n < 0) {
        rcore_error_set("sampler get_probs: %s", !smpl   ? "sampler is NULL"
                                                 : n < 0 ? "n is negative"
                                                         : "ids or probs is NULL");
        return -1;
    }
    const struct rsample_candidates c = {
        .data = smpl->buf, .size = smpl->last_size, .selected = -1, .sorted = false};
    if (c.size == 0 || n == 0) return 0;
    const float max = max_key(&c);
    const double sum = weight_sum(&c, max);
    int32_t got = 0;
    /* the n best by rank, by insertion into a sorted list of indices: n is small */
    size_t *best = malloc(sizeof(size_t) * (size_t)n);
    if (!best) {
        rcore_error_set("sampler get_probs: out of memory");
        return -1;
    }
    for (size_t i = 0; i < c.size; i++) {
        int32_t at = got < n ? got : n;
        while (at > 0 && ranks_before(&c.data[i], &c.data[best[at - 1]])) at--;
        if (at >= n) continue;
        const int32_t last = got < n ? got : n - 1;
        memmove(best + at + 1, best + at, sizeof(size_t) * (size_t)(last - at));
        best[at] = i;
        if (got < n) got++;
    }
    for (int32_t k = 0; k < got; k++) {
        ids[k] = c.data[best[k]].id;
        probs[k] = (float)(weight(c.data[best[k]].logit, max) / sum);
    }
    free(best);
    return got;
}

float rsample_get_prob(const struct rsample *smpl, int32_t token) {
    if (!smpl) {
        rcore_error_set("sampler get_prob: sampler is NULL");
        return -1.0f;
    }
    const struct rsample_candidates c = {
        .data = smpl->buf, .size = smpl->last_size, .selected = -1, .sorted = false};
    for (size_t i = 0; i < c.size; i++)
        if (c.data[i].id == token) {
            const float max = max_key(&c);
            return (float)(weight(c.data[i].logit, max) / weight_sum(&c, max));
        }
    return 0.0f;
}

/* ---- logit bias ------------------------------------------------------------------------- */

struct logit_bias_ctx {
    int32_t n_vocab, n;
    struct rsample_logit_bias bias[]; /* n of them */
};

static const char *logit_bias_name(const struct rsample *smpl) {
    (void)smpl;
    return "logit-bias";
}

static bool logit_bias_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    const struct logit_bias_ctx *lb = smpl->ctx;
    for (int32_t i = 0; i < lb->n; i++) {
        const int32_t tok = lb->bias[i].token;
        /* first in a chain the candidates are still id-ordered: data[tok] is tok */
        struct rsample_token_data *d = NULL;
        if ((size_t)tok < cands->size && cands->data[tok].id == tok) {
            d = &cands->data[tok];
        } else {
            for (size_t k = 0; k < cands->size && !d; k++)
                if (cands->data[k].id == tok) d = &cands->data[k];
        }
        if (!d) continue; /* filtered out before */
        d->logit += lb->bias[i].bias;
        cands->sorted = false;
    }
    return true;
}

static const struct rsample_ops logit_bias_ops = {logit_bias_name, NULL, logit_bias_apply, NULL,
                                                  free_ctx};

struct rsample *rsample_init_logit_bias(int32_t n_vocab, int32_t n_bias,
                                        const struct rsample_logit_bias *bias) {
    if (n_vocab < 1 || n_bias < 0 || (n_bias > 0 && !bias)) {
        rcore_error_set("sampler logit-bias: %s", n_vocab < 1  ? "n_vocab must be at least 1"
                                                  : n_bias < 0 ? "n_bias is negative"
                                                               : "bias is NULL");
        return NULL;
    }
    for (int32_t i = 0; i < n_bias; i++) {
        if (bias[i].token < 0 || bias[i].token >= n_vocab) {
            rcore_error_set("sampler logit-bias: bias[%d].token %d is not in 0..%d", (int)i,
                            (int)bias[i].token, (int)n_vocab - 1);
            return NULL;
        }
        if (isnan(bias[i].bias) || bias[i].bias == INFINITY) {
            rcore_error_set("sampler logit-bias: bias[%d].bias is %s", (int)i,
                            isnan(bias[i].bias) ? "NaN" : "+infinity");
            return NULL;
        }
    }
    struct logit_bias_ctx *lb =
        ctx_alloc(sizeof *lb + sizeof(struct rsample_logit_bias) * (size_t)n_bias, "logit-bias");
    if (!lb) return NULL;
    lb->n_vocab = n_vocab;
    lb->n = n_bias;
    if (n_bias > 0) memcpy(lb->bias, bias, sizeof(struct rsample_logit_bias) * (size_t)n_bias);
    return init_owning(&logit_bias_ops, lb);
}

/* ---- greedy ----------------------------------------------------------------------------- */

static const char *greedy_name(const struct rsample *smpl) {
    (void)smpl;
    return "greedy";
}

static bool greedy_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    (void)smpl;
    /* one pass, plain compares (this runs over the whole vocabulary for every token): NaN
       ranks below everything as rank_key says, ties go to the lower id as in ranks_before */
    if (cands->size == 0) {
        rcore_error_set("sampler greedy: no candidates");
        return false;
    }
    size_t best = 0;
    float best_key = rank_key(cands->data[0].logit);
    for (size_t i = 1; i < cands->size; i++) {
        const float k = cands->data[i].logit;
        if (k > best_key || (k == best_key && cands->data[i].id < cands->data[best].id)) {
            best = i;
            best_key = k;
        }
    }
    if (best_key == -INFINITY) {
        rcore_error_set("sampler greedy: every one of %zu candidates is masked (-inf or NaN)",
                        cands->size);
        return false;
    }
    cands->selected = (int64_t)best;
    return true;
}

static const struct rsample_ops greedy_ops = {.name = greedy_name, .apply = greedy_apply};

struct rsample *rsample_init_greedy(void) {
    return rsample_init(&greedy_ops, NULL);
}

/* ---- dist ------------------------------------------------------------------------------- */

struct dist_ctx {
    uint64_t seed;
    struct rcore_rng rng;
};

static void dist_seed(struct dist_ctx *d) {
    rcore_rng_seed(&d->rng, d->seed);
}

/* The top 53 bits: every value k / 2^53, so exactly uniform on that grid and never 1. */
static double uniform01(struct dist_ctx *d) {
    return (double)(rcore_rng_next(&d->rng) >> 11) * (1.0 / 9007199254740992.0);
}

static const char *dist_name(const struct rsample *smpl) {
    (void)smpl;
    return "dist";
}

static bool dist_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    struct dist_ctx *d = smpl->ctx;
    if (!check_choosable(cands, "dist")) return false;
    float max = max_key(cands);
    double sum = weight_sum(cands, max);
    for (size_t i = 0; i < cands->size; i++)
        cands->data[i].p = (float)(weight(cands->data[i].logit, max) / sum);
    /* Inverse CDF: the first candidate whose running weight exceeds u * sum. The comparison
     * is strict, so a candidate of weight 0 can never be the one, and u < 1 keeps the target
     * below the total, which the running sum reaches bit for bit (same terms, same order). */
    double target = uniform01(d) * sum;
    double cum = 0.0;
    size_t last_positive = 0;
    int64_t sel = -1;
    for (size_t i = 0; i < cands->size; i++) {
        double w = weight(cands->data[i].logit, max);
        if (w > 0.0) last_positive = i;
        cum += w;
        if (cum > target) {
            sel = (int64_t)i;
            break;
        }
    }
    /* Only reachable if the compiler summed with other precision in the two loops. */
    cands->selected = sel >= 0 ? sel : (int64_t)last_positive;
    return true;
}

static void dist_reset(struct rsample *smpl) {
    dist_seed(smpl->ctx);
}

static const struct rsample_ops dist_ops = {
    .name = dist_name, .apply = dist_apply, .reset = dist_reset, .free = free_ctx};

struct rsample *rsample_init_dist(uint64_t seed) {
    struct dist_ctx *d = ctx_alloc(sizeof *d, "dist");
    if (!d) return NULL;
    d->seed = seed;
    dist_seed(d);
    return init_owning(&dist_ops, d);
}

/* ---- temperature ------------------------------------------------------------------------ */

struct temp_ctx {
    float temp;
};

static const char *temp_name(const struct rsample *smpl) {
    (void)smpl;
    return "temp";
}

static bool temp_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    float temp = ((struct temp_ctx *)smpl->ctx)->temp;
    if (cands->size == 0) return true;
    if (temp <= 0.0f) {
        /* As llama.cpp: temperature 0 is the limit of a sharper and sharper softmax, i.e.
         * greedy; keeping the best candidate alone lets a dist after it pick it. */
        cands->data[0] = cands->data[best_index(cands)];
        cands->size = 1;
        cands->selected = -1;
        cands->sorted = true;
        return true;
    }
    for (size_t i = 0; i < cands->size; i++) cands->data[i].logit /= temp;
    /* Dividing by a positive number keeps the order, except that rounding may make two
     * logits equal, and then the lower id ranks first: a single pass says if it still holds. */
    for (size_t i = 1; cands->sorted && i < cands->size; i++)
        if (!ranks_before(&cands->data[i - 1], &cands->data[i])) cands->sorted = false;
    return true;
}

static const struct rsample_ops temp_ops = {
    .name = temp_name, .apply = temp_apply, .free = free_ctx};

struct rsample *rsample_init_temp(float temp) {
    if (isnan(temp) || temp == INFINITY) {
        rcore_error_set("sampler temp: temperature %g is not a finite number", (double)temp);
        return NULL;
    }
    struct temp_ctx *t = ctx_alloc(sizeof *t, "temp");
    if (!t) return NULL;
    t->temp = temp;
    return init_owning(&temp_ops, t);
}

/* ---- top-k ------------------------------------------------------------------------------ */

struct top_k_ctx {
    int32_t k;
};

static const char *top_k_name(const struct rsample *smpl) {
    (void)smpl;
    return "top-k";
}

/* A heap over a[0 .. n) whose root is the candidate that ranks last, so that a better one
 * arriving can replace it. */
static void heap_sift_down(struct rsample_token_data *a, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && ranks_before(&a[worst], &a[l])) worst = l;
        if (r < n && ranks_before(&a[worst], &a[r])) worst = r;
        if (worst == i) return;
        struct rsample_token_data t = a[i];
        a[i] = a[worst];
        a[worst] = t;
        i = worst;
    }
}

static bool top_k_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    int32_t k32 = ((struct top_k_ctx *)smpl->ctx)->k;
    if (k32 <= 0 || (size_t)k32 >= cands->size) return true;
    size_t k = (size_t)k32;
    struct rsample_token_data *a = cands->data;
    if (cands->sorted) {
        cands->size = k;
        return true;
    }
    for (size_t i = k / 2; i-- > 0;) heap_sift_down(a, k, i);
    for (size_t i = k; i < cands->size; i++) {
        if (ranks_before(&a[i], &a[0])) {
            a[0] = a[i];
            heap_sift_down(a, k, 0);
        }
    }
    /* heapsort: moving the worst to the end each time leaves the k best in rank order */
    for (size_t n = k; n > 1; n--) {
        struct rsample_token_data t = a[0];
        a[0] = a[n - 1];
        a[n - 1] = t;
        heap_sift_down(a, n - 1, 0);
    }
    cands->size = k;
    cands->sorted = true;
    return true;
}

static const struct rsample_ops top_k_ops = {
    .name = top_k_name, .apply = top_k_apply, .free = free_ctx};

struct rsample *rsample_init_top_k(int32_t k) {
    struct top_k_ctx *t = ctx_alloc(sizeof *t, "top-k");
    if (!t) return NULL;
    t->k = k;
    return init_owning(&top_k_ops, t);
}

/* ---- top-p and min-p -------------------------------------------------------------------- */

struct mass_ctx {
    float p;
    size_t min_keep; /* >= 1 */
};

static const char *top_p_name(const struct rsample *smpl) {
    (void)smpl;
    return "top-p";
}

static bool top_p_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    const struct mass_ctx *c = smpl->ctx;
    if (c->p >= 1.0f || cands->size == 0) return true;
    rsample_sort(cands);
    float max = rank_key(cands->data[0].logit);
    double sum = weight_sum(cands, max);
    double cum = 0.0, target = (double)c->p;
    size_t keep = cands->size;
    for (size_t i = 0; i < cands->size; i++) {
        double p = weight(cands->data[i].logit, max) / sum;
        cands->data[i].p = (float)p;
        cum += p;
        if (cum >= target && i + 1 >= c->min_keep) {
            keep = i + 1;
            break;
        }
    }
    cands->size = keep;
    return true;
}

static const char *min_p_name(const struct rsample *smpl) {
    (void)smpl;
    return "min-p";
}

static bool min_p_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    const struct mass_ctx *c = smpl->ctx;
    if (c->p <= 0.0f || cands->size == 0) return true;
    float max = max_key(cands);
    if (max == -INFINITY) return true; /* all masked: nothing to compare with; dist refuses */
    /* p_i / p_max = exp(l_i - l_max): the softmax's sum cancels, so no normalising pass */
    double min_ratio = (double)c->p;
    size_t n_keep = 0;
    for (size_t i = 0; i < cands->size; i++)
        if (weight(cands->data[i].logit, max) >= min_ratio) n_keep++;
    if (n_keep >= c->min_keep) {
        /* stable compaction keeps the order, and with it the sorted flag */
        size_t j = 0;
        for (size_t i = 0; i < cands->size; i++)
            if (weight(cands->data[i].logit, max) >= min_ratio) cands->data[j++] = cands->data[i];
        cands->size = j;
    } else {
        /* the test is monotone in the logit, so the min_keep best include every survivor */
        rsample_sort(cands);
        if (cands->size > c->min_keep) cands->size = c->min_keep;
    }
    return true;
}

static const struct rsample_ops top_p_ops = {
    .name = top_p_name, .apply = top_p_apply, .free = free_ctx};
static const struct rsample_ops min_p_ops = {
    .name = min_p_name, .apply = min_p_apply, .free = free_ctx};

static struct rsample *init_mass(const struct rsample_ops *ops, float p, size_t min_keep) {
    const char *who = ops->name(NULL);
    if (isnan(p)) {
        rcore_error_set("sampler %s: p is NaN", who);
        return NULL;
    }
    struct mass_ctx *c = ctx_alloc(sizeof *c, who);
    if (!c) return NULL;
    c->p = p;
    c->min_keep = min_keep > 0 ? min_keep : 1;
    return init_owning(ops, c);
}

struct rsample *rsample_init_top_p(float p, size_t min_keep) {
    return init_mass(&top_p_ops, p, min_keep);
}

struct rsample *rsample_init_min_p(float min_p, size_t min_keep) {
    return init_mass(&min_p_ops, min_p, min_keep);
}

/* ---- penalties -------------------------------------------------------------------------- */

struct penalties_ctx {
    int32_t last_n; /* window size, 0: off */
    float repeat, freq, present;
    int32_t *ring;    /* [last_n] accepted tokens; the oldest is overwritten */
    int32_t *scratch; /* [last_n] sorted copy of the window, rebuilt by apply */
    int32_t n, head;  /* tokens held, next slot to write */
};

static const char *penalties_name(const struct rsample *smpl) {
    (void)smpl;
    return "penalties";
}

static void penalties_accept(struct rsample *smpl, int32_t token) {
    struct penalties_ctx *c = smpl->ctx;
    if (c->last_n <= 0) return;
    c->ring[c->head] = token;
    c->head = (c->head + 1) % c->last_n;
    if (c->n < c->last_n) c->n++;
}

static int cmp_i32(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

/* first index in sorted a[0 .. n) whose value is > v (strict) or >= v */
static size_t bound_i32(const int32_t *a, size_t n, int32_t v, bool strict) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strict ? a[mid] <= v : a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool penalties_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    struct penalties_ctx *c = smpl->ctx;
    if (c->n == 0 || (c->repeat == 1.0f && c->freq == 0.0f && c->present == 0.0f)) return true;
    size_t n = (size_t)c->n;
    memcpy(c->scratch, c->ring, n * sizeof *c->scratch);
    qsort(c->scratch, n, sizeof *c->scratch, cmp_i32);
    for (size_t i = 0; i < cands->size; i++) {
        struct rsample_token_data *t = &cands->data[i];
        size_t count =
            bound_i32(c->scratch, n, t->id, true) - bound_i32(c->scratch, n, t->id, false);
        if (count == 0) continue;
        t->logit = t->logit > 0.0f ? t->logit / c->repeat : t->logit * c->repeat;
        t->logit -= (float)count * c->freq + c->present;
    }
    cands->sorted = false; /* penalised tokens move down the ranking */
    return true;
}

static void penalties_reset(struct rsample *smpl) {
    struct penalties_ctx *c = smpl->ctx;
    c->n = 0;
    c->head = 0;
}

static void penalties_free(struct rsample *smpl) {
    struct penalties_ctx *c = smpl->ctx;
    if (!c) return;
    free(c->ring);
    free(c->scratch);
    free(c);
}

static const struct rsample_ops penalties_ops = {.name = penalties_name,
                                                 .accept = penalties_accept,
                                                 .apply = penalties_apply,
                                                 .reset = penalties_reset,
                                                 .free = penalties_free};

struct rsample *rsample_init_penalties(int32_t last_n, float repeat, float freq, float present) {
    if (!isfinite(repeat) || repeat <= 0.0f) {
        rcore_error_set("sampler penalties: penalty_repeat is %g, a finite number > 0 is needed "
                        "(1: off)",
                        (double)repeat);
        return NULL;
    }
    if (!isfinite(freq) || !isfinite(present)) {
        rcore_error_set("sampler penalties: penalty_%s is %g, a finite number is needed",
                        isfinite(freq) ? "present" : "freq",
                        (double)(isfinite(freq) ? present : freq));
        return NULL;
    }
    struct penalties_ctx *c = ctx_alloc(sizeof *c, "penalties");
    if (!c) return NULL;
    c->last_n = last_n > 0 ? last_n : 0;
    c->repeat = repeat;
    c->freq = freq;
    c->present = present;
    if (c->last_n > 0) {
        size_t bytes;
        if (!rcore_mul_size((size_t)c->last_n, sizeof *c->ring, &bytes) ||
            !(c->ring = malloc(bytes)) || !(c->scratch = malloc(bytes))) {
            rcore_error_set("sampler penalties: out of memory for a window of %d tokens",
                            (int)last_n);
            struct rsample tmp = {.ops = &penalties_ops, .ctx = c};
            penalties_free(&tmp);
            return NULL;
        }
    }
    return init_owning(&penalties_ops, c);
}

/* ---- chain ------------------------------------------------------------------------------ */

struct chain_ctx {
    struct rsample **items;
    size_t n, cap;
};

static const char *chain_name(const struct rsample *smpl) {
    (void)smpl;
    return "chain";
}

static void chain_accept(struct rsample *smpl, int32_t token) {
    struct chain_ctx *c = smpl->ctx;
    for (size_t i = 0; i < c->n; i++) rsample_accept(c->items[i], token);
}

static bool chain_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    struct chain_ctx *c = smpl->ctx;
    for (size_t i = 0; i < c->n; i++)
        if (!rsample_apply(c->items[i], cands)) return false;
    return true;
}

static void chain_reset(struct rsample *smpl) {
    struct chain_ctx *c = smpl->ctx;
    for (size_t i = 0; i < c->n; i++) rsample_reset(c->items[i]);
}

static void chain_free(struct rsample *smpl) {
    struct chain_ctx *c = smpl->ctx;
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) rsample_free(c->items[i]);
    free(c->items);
    free(c);
}

static const struct rsample_ops chain_ops = {.name = chain_name,
                                             .accept = chain_accept,
                                             .apply = chain_apply,
                                             .reset = chain_reset,
                                             .free = chain_free};

struct rsample *rsample_chain_init(void) {
    struct chain_ctx *c = ctx_alloc(sizeof *c, "chain");
    if (!c) return NULL;
    return init_owning(&chain_ops, c);
}

bool rsample_chain_add(struct rsample *chain, struct rsample *smpl) {
    if (!smpl) return false; /* keep the message of the init that failed */
    if (!chain || chain->ops != &chain_ops) {
        rcore_error_set("sampler chain_add: %s is not a chain", rsample_name(chain));
        rsample_free(smpl);
        return false;
    }
    struct chain_ctx *c = chain->ctx;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8, bytes;
        struct rsample **items;
        if (!rcore_mul_size(cap, sizeof *items, &bytes) || !(items = realloc(c->items, bytes))) {
            rcore_error_set("sampler chain: out of memory adding %s", rsample_name(smpl));
            rsample_free(smpl);
            return false;
        }
        c->items = items;
        c->cap = cap;
    }
    c->items[c->n++] = smpl;
    return true;
}

size_t rsample_chain_n(const struct rsample *chain) {
    if (!chain || chain->ops != &chain_ops) return 0;
    return ((const struct chain_ctx *)chain->ctx)->n;
}

struct rsample *rsample_chain_get(const struct rsample *chain, size_t i) {
    if (i >= rsample_chain_n(chain)) return NULL;
    return ((const struct chain_ctx *)chain->ctx)->items[i];
}

struct rsample *rsample_chain_default(const struct rsample_params *params, int32_t n_vocab) {
    const struct {
        const char *name;
        float v;
    } floats[] = {{"temp", params->temp},
                  {"top_p", params->top_p},
                  {"min_p", params->min_p},
                  {"penalty_repeat", params->penalty_repeat},
                  {"penalty_freq", params->penalty_freq},
                  {"penalty_present", params->penalty_present}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        if (isnan(floats[i].v)) {
            rcore_error_set("sampler params: %s is NaN", floats[i].name);
            return NULL;
        }
    }
    if (n_vocab < 1) {
        rcore_error_set("sampler params: n_vocab is %d, at least 1 is needed", (int)n_vocab);
        return NULL;
    }
    struct rsample *chain = rsample_chain_init();
    if (!chain) return NULL;
    /* the buffer is sized now so that sampling never allocates */
    bool ok = reserve_buf(chain, (size_t)n_vocab);
    /* first, as llama.cpp: the bias is part of what the model says, penalties act on it */
    if (params->n_logit_bias > 0)
        ok = ok && rsample_chain_add(chain, rsample_init_logit_bias(n_vocab, params->n_logit_bias,
                                                                    params->logit_bias));
    ok = ok && rsample_chain_add(
                   chain, rsample_init_penalties(params->penalty_last_n, params->penalty_repeat,
                                                 params->penalty_freq, params->penalty_present));
    if (params->temp <= 0.0f) {
        ok = ok && rsample_chain_add(chain, rsample_init_greedy());
    } else {
        ok = ok && rsample_chain_add(chain, rsample_init_top_k(params->top_k));
        ok = ok && rsample_chain_add(chain, rsample_init_top_p(params->top_p, 1));
        ok = ok && rsample_chain_add(chain, rsample_init_min_p(params->min_p, 1));
        ok = ok && rsample_chain_add(chain, rsample_init_temp(params->temp));
        ok = ok && rsample_chain_add(chain, rsample_init_dist(params->seed));
    }
    if (!ok) {
        rcore_error_prefix("sampler params");
        rsample_free(chain);
        return NULL;
    }
    return chain;
}
