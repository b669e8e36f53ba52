/*
 * Tests of src/sample and of the public samplers (recur_sampler_*).
 *
 *  - Every sampler on small hand-made candidate arrays whose survivors were worked out by hand
 *    (the values are chosen so that the arithmetic is exact in binary: equal logits give
 *    probabilities of exactly 1/4, halving a logit is exact, ...).
 *  - The dist sampler statistically: with a fixed seed, many draws are compared with the
 *    softmax (computed here, in double, independently of sample.c) by Pearson's chi-square
 *    test at significance 0.001. The seeds are fixed, so each test passes or fails the same
 *    way on every run; a correct sampler fails a given one with probability 0.001.
 *  - Determinism: hashes of 10,000 draws, seeds, reset, and a known-answer check of the
 *    generator (xoshiro256** seeded by splitmix64), whose expected values were computed by a
 *    separate implementation in Python.
 *  - Edge cases: one token, equal logits, -INFINITY / NaN / huge / +INFINITY logits.
 */
#include "sample/sample.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "recur.h"
#include "test.h"

/* Critical values of the chi-square distribution at p = 0.001, by degrees of freedom. */
static double chi2_critical(int df) {
    static const double crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
    REQUIRE(df >= 1 && df < (int)(sizeof crit / sizeof crit[0]));
    return crit[df];
}

#define MAXV 512

/* candidates with ids 0 .. n-1 over the given logits */
static struct rsample_candidates make_cands(struct rsample_token_data *buf, const float *logits,
                                            size_t n) {
    for (size_t i = 0; i < n; i++) {
        buf[i].id = (int32_t)i;
        buf[i].logit = logits[i];
        buf[i].p = 0.0f;
    }
    struct rsample_candidates c = {.data = buf, .size = n, .selected = -1, .sorted = false};
    return c;
}

/* applies a fresh sampler once and frees it */
static bool apply_once(struct rsample *s, struct rsample_candidates *c) {
    REQUIRE(s != NULL);
    bool ok = rsample_apply(s, c);
    rsample_free(s);
    return ok;
}

/* the ids of the candidates, in order, equal those listed */
static bool ids_are(const struct rsample_candidates *c, const int32_t *ids, size_t n) {
    if (c->size != n) return false;
    for (size_t i = 0; i < n; i++)
        if (c->data[i].id != ids[i]) return false;
    return true;
}

static const struct rsample_token_data *find_id(const struct rsample_candidates *c, int32_t id) {
    for (size_t i = 0; i < c->size; i++)
        if (c->data[i].id == id) return &c->data[i];
    return NULL;
}

/* softmax of logits[0 .. n) in double, with the reference's own arithmetic */
static void ref_softmax(const float *logits, int n, double temp, double *p) {
    double max = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        if (logits[i] / temp > max) max = logits[i] / temp;
    for (int i = 0; i < n; i++) sum += (p[i] = exp(logits[i] / temp - max));
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* Draws n times from logits[0 .. n_vocab) with smpl; counts[id]++. Returns false on a
 * failed draw. */
static bool draw(struct rsample *smpl, const float *logits, int n_vocab, long n, long *counts) {
    for (int i = 0; i < n_vocab; i++) counts[i] = 0;
    for (long k = 0; k < n; k++) {
        int32_t t = rsample_sample(smpl, logits, n_vocab);
        if (t < 0 || t >= n_vocab) return false;
        counts[t]++;
    }
    return true;
}

/* Pearson's statistic over the categories with p > 0; *df = their number - 1. A draw of a
 * category with p == 0 makes it infinite. */
static double chi_square(const long *counts, const double *p, int n, long total, int *df) {
    double x2 = 0.0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0.0) {
            if (counts[i] != 0) return INFINITY;
            continue;
        }
        double e = p[i] * (double)total;
        x2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e;
        k++;
    }
    *df = k - 1;
    return x2;
}

/* checks counts against p by chi-square at 0.001 and prints the statistic */
static void check_chi2(const char *what, const long *counts, const double *p, int n, long total) {
    int df = 0;
    double x2 = chi_square(counts, p, n, total, &df);
    fprintf(stderr, "  %-44s chi2 = %7.3f  (df %d, critical %.2f)\n", what, x2, df,
            chi2_critical(df));
    CHECK_MSG(x2 < chi2_critical(df), "%s: chi2 %.3f >= %.2f", what, x2, chi2_critical(df));
}

static double entropy(const long *counts, int n, long total) {
    double h = 0.0;
    for (int i = 0; i < n; i++) {
        if (counts[i] == 0) continue;
        double f = (double)counts[i] / (double)total;
        h -= f * log(f);
    }
    return h;
}

static uint64_t fnv1a(uint64_t h, int32_t token) {
    uint32_t u = (uint32_t)token;
    for (int i = 0; i < 4; i++) {
        h ^= (u >> (8 * i)) & 0xffu;
        h *= 0x100000001b3u;
    }
    return h;
}

static uint64_t hash_draws(struct rsample *smpl, const float *logits, int n_vocab, int n) {
    uint64_t h = 0xcbf29ce484222325u;
    for (int k = 0; k < n; k++) h = fnv1a(h, rsample_sample(smpl, logits, n_vocab));
    return h;
}

/* ---- each sampler on hand-made candidates ----------------------------------------------- */

static void test_greedy(void) {
    struct rsample_token_data buf[8];
    const float l[] = {1.0f, 3.0f, 3.0f, 2.0f};
    struct rsample_candidates c = make_cands(buf, l, 4);
    CHECK(apply_once(rsample_init_greedy(), &c));
    CHECK(c.selected == 1); /* tie between ids 1 and 2: the lower id */
    CHECK(c.size == 4);

    /* the tie rule is on ids, not on positions */
    c = make_cands(buf, l, 4);
    buf[1].id = 7;
    buf[2].id = 5;
    CHECK(apply_once(rsample_init_greedy(), &c));
    CHECK(c.selected == 2);

    const float masked[] = {-INFINITY, -INFINITY};
    c = make_cands(buf, masked, 2);
    CHECK(!apply_once(rsample_init_greedy(), &c));
    CHECK_ERR("masked");
    c = make_cands(buf, masked, 0);
    CHECK(!apply_once(rsample_init_greedy(), &c));
    CHECK_ERR("no candidates");

    struct rsample *g = rsample_init_greedy();
    REQUIRE(g);
    CHECK(strcmp(rsample_name(g), "greedy") == 0);
    const float l5[] = {0.1f, -2.0f, 0.3f, 0.3f, 0.2f};
    CHECK(rsample_sample(g, l5, 5) == 2);
    rsample_free(g);
}

static void test_top_k(void) {
    struct rsample_token_data buf[MAXV];
    const float l[] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.5f};
    struct rsample_candidates c = make_cands(buf, l, 6);
    CHECK(apply_once(rsample_init_top_k(3), &c));
    CHECK(ids_are(&c, (const int32_t[]){1, 3, 4}, 3));
    CHECK(c.sorted);

    c = make_cands(buf, l, 6);
    CHECK(apply_once(rsample_init_top_k(4), &c)); /* 0.5 twice: id 0 before id 5 */
    CHECK(ids_are(&c, (const int32_t[]){1, 3, 4, 0}, 4));

    c = make_cands(buf, l, 6);
    CHECK(apply_once(rsample_init_top_k(1), &c));
    CHECK(ids_are(&c, (const int32_t[]){1}, 1));

    /* no-ops: k <= 0 and k >= size leave the candidates as they were */
    const int32_t k_noop[] = {0, -1, 6, 100};
    for (size_t t = 0; t < 4; t++) {
        c = make_cands(buf, l, 6);
        CHECK(apply_once(rsample_init_top_k(k_noop[t]), &c));
        CHECK(ids_are(&c, (const int32_t[]){0, 1, 2, 3, 4, 5}, 6));
        CHECK(!c.sorted);
    }

    /* sorted input: a prefix */
    c = make_cands(buf, l, 6);
    rsample_sort(&c);
    CHECK(ids_are(&c, (const int32_t[]){1, 3, 4, 0, 5, 2}, 6));
    CHECK(apply_once(rsample_init_top_k(2), &c));
    CHECK(ids_are(&c, (const int32_t[]){1, 3}, 2));

    /* many ties, against a full sort: the k best by (logit desc, id asc) */
    unsigned long long rng = 7;
    float big[MAXV];
    struct rsample_token_data ref[MAXV];
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + test_rand_int(&rng, MAXV), k = 1 + test_rand_int(&rng, n);
        for (int i = 0; i < n; i++) big[i] = (float)test_rand_int(&rng, 10) - 5.0f;
        c = make_cands(buf, big, (size_t)n);
        struct rsample_candidates r = make_cands(ref, big, (size_t)n);
        /* reference: selection sort by the same rule, written out here */
        for (int i = 0; i < k; i++) {
            int best = i;
            for (int j = i + 1; j < n; j++)
                if (r.data[j].logit > r.data[best].logit ||
                    (r.data[j].logit == r.data[best].logit && r.data[j].id < r.data[best].id))
                    best = j;
            struct rsample_token_data t = r.data[i];
            r.data[i] = r.data[best];
            r.data[best] = t;
        }
        CHECK(apply_once(rsample_init_top_k(k), &c));
        bool same = c.size == (size_t)k; /* k == n: no change, so only the size to check */
        for (size_t i = 0; same && k < n && i < c.size; i++) same = c.data[i].id == r.data[i].id;
        CHECK_MSG(same, "trial %d: n %d k %d", trial, n, k);
    }
}

static void test_top_p(void) {
    struct rsample_token_data buf[8];
    /* four equal logits: probabilities exactly 1/4, cumulative masses 1/4, 1/2, 3/4, 1 */
    const float l[] = {0.0f, 0.0f, -INFINITY, 0.0f, 0.0f};
    const struct {
        float p;
        size_t min_keep, n_keep;
    } cases[] = {
        {0.5f, 1, 2},       /* exact mass: stops where the sum reaches p */
        {0.50001f, 1, 3},   /* just above: one more */
        {0.49f, 1, 2},      /* just below */
        {0.25f, 1, 1},      /* exactly the first */
        {0.75f, 1, 3},      /* exact again */
        {0.95f, 1, 4},      /* the masked token is never needed */
        {0.0f, 1, 1},       /* always at least one */
        {0.0f, 0, 1},       /* min_keep 0 counts as 1 */
        {0.25f, 3, 3},      /* min_keep wins */
        {0.9999999f, 1, 4}, /* below 1: all the mass is in the first four */
        {-1.0f, 2, 2},
    };
    const int32_t order[] = {0, 1, 3, 4};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        struct rsample_candidates c = make_cands(buf, l, 5);
        CHECK(apply_once(rsample_init_top_p(cases[t].p, cases[t].min_keep), &c));
        CHECK_MSG(ids_are(&c, order, cases[t].n_keep), "p %g min_keep %zu: kept %zu",
                  (double)cases[t].p, cases[t].min_keep, c.size);
        CHECK(c.sorted);
        CHECK(c.data[0].p == 0.25f);
    }
    /* p >= 1: no change at all, not even sorting */
    struct rsample_candidates c = make_cands(buf, l, 5);
    CHECK(apply_once(rsample_init_top_p(1.0f, 1), &c));
    CHECK(ids_are(&c, (const int32_t[]){0, 1, 2, 3, 4}, 5) && !c.sorted);

    /* unequal: probabilities 0.5, 0.3, 0.2 (ids 2, 0, 1) */
    const float u[] = {logf(0.3f), logf(0.2f), logf(0.5f)};
    c = make_cands(buf, u, 3);
    CHECK(apply_once(rsample_init_top_p(0.79f, 1), &c));
    CHECK(ids_are(&c, (const int32_t[]){2, 0}, 2));
    c = make_cands(buf, u, 3);
    CHECK(apply_once(rsample_init_top_p(0.81f, 1), &c));
    CHECK(ids_are(&c, (const int32_t[]){2, 0, 1}, 3));
    c = make_cands(buf, u, 3);
    CHECK(apply_once(rsample_init_top_p(0.45f, 1), &c));
    CHECK(ids_are(&c, (const int32_t[]){2}, 1));

    CHECK(rsample_init_top_p(NAN, 1) == NULL);
    CHECK_ERR("NaN");
}

static void test_min_p(void) {
    struct rsample_token_data buf[8];
    /* ratios to the largest probability: 1 (id 3), 0.5 (id 0), 0.1 (id 4), 0.04 (id 1), 0
       (id 2); the thresholds below stay well away from them */
    const float l[] = {logf(0.5f), logf(0.04f), -INFINITY, 0.0f, logf(0.1f)};
    const struct {
        float min_p;
        size_t min_keep;
        int32_t ids[5];
        size_t n;
    } cases[] = {
        {0.05f, 1, {0, 3, 4}, 3}, /* survivors keep their order */
        {0.2f, 1, {0, 3}, 2},
        {0.03f, 1, {0, 1, 3, 4}, 4},
        {1.0f, 1, {3}, 1},
        {2.0f, 1, {3}, 1},             /* nothing passes: min_keep keeps the best */
        {0.6f, 3, {3, 0, 4}, 3},       /* min_keep: the three best, sorted */
        {0.0f, 1, {0, 1, 2, 3, 4}, 5}, /* off */
        {-1.0f, 1, {0, 1, 2, 3, 4}, 5},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        struct rsample_candidates c = make_cands(buf, l, 5);
        CHECK(apply_once(rsample_init_min_p(cases[t].min_p, cases[t].min_keep), &c));
        CHECK_MSG(ids_are(&c, cases[t].ids, cases[t].n), "min_p %g: kept %zu",
                  (double)cases[t].min_p, c.size);
    }
    /* equal maxima both survive min_p = 1 */
    const float tie[] = {1.0f, 2.0f, 2.0f};
    struct rsample_candidates c = make_cands(buf, tie, 3);
    CHECK(apply_once(rsample_init_min_p(1.0f, 1), &c));
    CHECK(ids_are(&c, (const int32_t[]){1, 2}, 2));
}

static void test_temp(void) {
    struct rsample_token_data buf[8];
    const float l[] = {1.0f, -2.0f, 4.0f, 0.0f, -INFINITY};
    struct rsample_candidates c = make_cands(buf, l, 5);
    CHECK(apply_once(rsample_init_temp(0.5f), &c));
    CHECK(c.size == 5 && c.data[0].logit == 2.0f && c.data[1].logit == -4.0f &&
          c.data[2].logit == 8.0f && c.data[3].logit == 0.0f && c.data[4].logit == -INFINITY);
    c = make_cands(buf, l, 5);
    CHECK(apply_once(rsample_init_temp(2.0f), &c));
    CHECK(c.data[0].logit == 0.5f && c.data[1].logit == -1.0f && c.data[2].logit == 2.0f);

    /* sorted stays sorted */
    c = make_cands(buf, l, 5);
    rsample_sort(&c);
    CHECK(apply_once(rsample_init_temp(3.0f), &c));
    CHECK(c.sorted);

    /* rounding can make two sorted logits equal: then the lower id (now second) ranks first */
    const float close[] = {nextafterf(1.0f, 0.0f), 1.0f};
    c = make_cands(buf, close, 2);
    rsample_sort(&c);
    CHECK(c.data[0].id == 1);
    CHECK(apply_once(rsample_init_temp(FLT_MAX), &c));
    CHECK(c.data[0].logit == c.data[1].logit); /* both round to the same subnormal */
    CHECK(!c.sorted);

    /* temp <= 0: only the best is left (ties: lowest id) */
    const float t0[] = {0.0f, -1.0f, 0.0f};
    const float temps[] = {0.0f, -1.0f, -INFINITY};
    for (int i = 0; i < 3; i++) {
        c = make_cands(buf, l, 5);
        CHECK(apply_once(rsample_init_temp(temps[i]), &c));
        CHECK(c.size == 1 && c.data[0].id == 2 && c.data[0].logit == 4.0f);
        c = make_cands(buf, t0, 3);
        CHECK(apply_once(rsample_init_temp(temps[i]), &c));
        CHECK(c.size == 1 && c.data[0].id == 0);
    }
    CHECK(rsample_init_temp(NAN) == NULL);
    CHECK_ERR("temperature");
    CHECK(rsample_init_temp(INFINITY) == NULL);
}

static void test_penalties(void) {
    struct rsample_token_data buf[8];
    const float l[] = {2.0f, 2.0f, 2.0f, -1.0f, 0.0f};
    /* window of 4 after 1 2 2 3 3 3: {2, 3, 3, 3}; token 1 has left it */
    struct rsample *s = rsample_init_penalties(4, 2.0f, 0.5f, 0.25f);
    REQUIRE(s);
    const int32_t hist[] = {1, 2, 2, 3, 3, 3};
    for (int i = 0; i < 6; i++) rsample_accept(s, hist[i]);
    struct rsample_candidates c = make_cands(buf, l, 5);
    rsample_sort(&c);
    CHECK(rsample_apply(s, &c));
    CHECK(!c.sorted);
    CHECK(find_id(&c, 0)->logit == 2.0f);
    CHECK(find_id(&c, 1)->logit == 2.0f);
    CHECK(find_id(&c, 2)->logit == 0.25f);  /* 2 / 2 - (1 * 0.5 + 0.25) */
    CHECK(find_id(&c, 3)->logit == -3.75f); /* -1 * 2 - (3 * 0.5 + 0.25) */
    CHECK(find_id(&c, 4)->logit == 0.0f);   /* not in the window */

    /* reset empties the window */
    rsample_reset(s);
    c = make_cands(buf, l, 5);
    CHECK(rsample_apply(s, &c));
    CHECK(c.data[2].logit == 2.0f && c.data[3].logit == -1.0f);
    rsample_free(s);

    /* each kind alone; logit 0 is multiplied (stays 0) */
    const float l2[] = {3.0f, -3.0f, 0.0f, 1.0f};
    const struct {
        float repeat, freq, present;
        float want[4];
    } kinds[] = {
        {1.5f, 0.0f, 0.0f, {2.0f, -4.5f, 0.0f, 1.0f}},
        {1.0f, 0.5f, 0.0f, {2.0f, -3.5f, -0.5f, 1.0f}},
        {1.0f, 0.0f, 0.75f, {2.25f, -3.75f, -0.75f, 1.0f}},
    };
    const int32_t seen[] = {0, 0, 1, 2}; /* counts: id 0: 2, id 1: 1, id 2: 1, id 3: 0 */
    for (size_t k = 0; k < 3; k++) {
        s = rsample_init_penalties(64, kinds[k].repeat, kinds[k].freq, kinds[k].present);
        REQUIRE(s);
        for (int i = 0; i < 4; i++) rsample_accept(s, seen[i]);
        c = make_cands(buf, l2, 4);
        CHECK(rsample_apply(s, &c));
        for (int i = 0; i < 4; i++)
            CHECK_MSG(c.data[i].logit == kinds[k].want[i], "kind %zu id %d: %g, %g wanted", k, i,
                      (double)c.data[i].logit, (double)kinds[k].want[i]);
        rsample_free(s);
    }

    /* last_n <= 0: nothing is remembered */
    s = rsample_init_penalties(0, 2.0f, 1.0f, 1.0f);
    REQUIRE(s);
    rsample_accept(s, 0);
    c = make_cands(buf, l2, 4);
    CHECK(rsample_apply(s, &c) && c.data[0].logit == 3.0f);
    rsample_free(s);

    /* in a chain, sampling accepts: a strong presence penalty over the last two tokens makes
       greedy cycle through the three best */
    struct rsample *chain = rsample_chain_init();
    REQUIRE(chain);
    CHECK(rsample_chain_add(chain, rsample_init_penalties(2, 1.0f, 0.0f, 10.0f)));
    CHECK(rsample_chain_add(chain, rsample_init_greedy()));
    const float l3[] = {1.0f, 0.9f, 0.8f, -20.0f};
    const int32_t want[] = {0, 1, 2, 0, 1, 2};
    for (int i = 0; i < 6; i++) CHECK(rsample_sample(chain, l3, 4) == want[i]);
    rsample_reset(chain);
    CHECK(rsample_sample(chain, l3, 4) == 0);
    CHECK(rsample_sample(chain, l3, 4) == 1);
    rsample_free(chain);

    CHECK(rsample_init_penalties(64, 0.0f, 0.0f, 0.0f) == NULL);
    CHECK_ERR("penalty_repeat");
    CHECK(rsample_init_penalties(64, 1.0f, NAN, 0.0f) == NULL);
    CHECK_ERR("penalty_freq");
    CHECK(rsample_init_penalties(64, 1.0f, 0.0f, INFINITY) == NULL);
    CHECK_ERR("penalty_present");
}

/* ---- dist, statistically ---------------------------------------------------------------- */

#define N_DRAWS 200000L

static void test_dist_chi2(void) {
    const float l[] = {1.0f, 0.5f, 0.0f, -0.5f, -1.5f};
    double p[5];
    long counts[5];
    ref_softmax(l, 5, 1.0, p);
    struct rsample *d = rsample_init_dist(42);
    REQUIRE(d);
    CHECK(strcmp(rsample_name(d), "dist") == 0);
    CHECK(draw(d, l, 5, N_DRAWS, counts));
    check_chi2("dist, 5-way softmax", counts, p, 5, N_DRAWS);
    rsample_free(d);
}

/* After a filter, the removed tokens are never drawn and the kept ones follow the softmax
 * renormalised over them. Each filter is set to keep exactly five of eight. */
static void test_dist_after_filters(void) {
    const float l[] = {1.2f, -0.5f, 2.0f, 0.7f, 1.0f, 0.1f, -1.0f, 1.5f};
    const int n = 8;
    double full[8];
    ref_softmax(l, n, 1.0, full);
    /* the five largest: ids 2, 7, 0, 4, 3 */
    const bool kept[8] = {true, false, true, true, true, false, false, true};
    double mass4 = full[2] + full[7] + full[0] + full[4], mass5 = mass4 + full[3];
    /* min-p threshold between the ratios of id 3 (exp(-1.3)) and id 5 (exp(-1.9)) */
    float min_p = (float)((exp(0.7 - 2.0) + exp(0.1 - 2.0)) / 2);
    struct {
        const char *name;
        struct rsample *filter;
    } filters[] = {
        {"dist after top-k 5", rsample_init_top_k(5)},
        {"dist after top-p (5 of 8)", rsample_init_top_p((float)((mass4 + mass5) / 2), 1)},
        {"dist after min-p (5 of 8)", rsample_init_min_p(min_p, 1)},
    };
    double want[8];
    for (int i = 0; i < n; i++) want[i] = kept[i] ? full[i] / mass5 : 0.0;
    for (size_t f = 0; f < 3; f++) {
        struct rsample *chain = rsample_chain_init();
        REQUIRE(chain);
        CHECK(rsample_chain_add(chain, filters[f].filter));
        CHECK(rsample_chain_add(chain, rsample_init_dist(1000 + f)));
        long counts[8];
        CHECK(draw(chain, l, n, N_DRAWS, counts));
        bool none_removed = true;
        for (int i = 0; i < n; i++) none_removed = none_removed && (kept[i] || counts[i] == 0);
        CHECK_MSG(none_removed, "%s: a removed token was drawn", filters[f].name);
        check_chi2(filters[f].name, counts, want, n, N_DRAWS);
        rsample_free(chain);
    }
}

/* A higher temperature flattens the distribution: the empirical entropy grows with it, and
 * each temperature's draws follow softmax(logits / temp). */
static void test_dist_temperature(void) {
    const float l[] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f};
    const float temps[] = {0.5f, 1.0f, 2.0f};
    double h[3];
    for (int t = 0; t < 3; t++) {
        struct rsample *chain = rsample_chain_init();
        REQUIRE(chain);
        CHECK(rsample_chain_add(chain, rsample_init_temp(temps[t])));
        CHECK(rsample_chain_add(chain, rsample_init_dist(77)));
        long counts[5];
        double p[5];
        CHECK(draw(chain, l, 5, N_DRAWS, counts));
        ref_softmax(l, 5, (double)temps[t], p);
        char what[64];
        snprintf(what, sizeof what, "dist after temp %.1f", (double)temps[t]);
        check_chi2(what, counts, p, 5, N_DRAWS);
        h[t] = entropy(counts, 5, N_DRAWS);
        double h_ref = 0.0;
        for (int i = 0; i < 5; i++) h_ref -= p[i] * log(p[i]);
        fprintf(stderr, "  entropy at temp %.1f: %.4f nats (softmax: %.4f)\n", (double)temps[t],
                h[t], h_ref);
        CHECK(fabs(h[t] - h_ref) < 0.01);
        rsample_free(chain);
    }
    CHECK(h[0] < h[1] && h[1] < h[2]);
}

/* ---- determinism ------------------------------------------------------------------------ */

static void test_determinism(void) {
    float l[50];
    unsigned long long rng = 99;
    for (int i = 0; i < 50; i++) l[i] = (float)test_rand_int(&rng, 1000) / 250.0f;
    struct rsample *a = rsample_init_dist(1234), *b = rsample_init_dist(1234);
    struct rsample *c = rsample_init_dist(1235);
    REQUIRE(a && b && c);
    uint64_t ha = hash_draws(a, l, 50, 10000), hb = hash_draws(b, l, 50, 10000);
    uint64_t hc = hash_draws(c, l, 50, 10000);
    CHECK(ha == hb);
    CHECK(ha != hc);
    /* reset reseeds with the seed given at init: the same 10,000 draws again */
    rsample_reset(a);
    CHECK(hash_draws(a, l, 50, 10000) == ha);
    /* without reset, the stream goes on */
    CHECK(hash_draws(b, l, 50, 10000) != ha);
    rsample_free(a);
    rsample_free(b);
    rsample_free(c);

    /* Known answer: with 256 equal logits every weight is exactly 1, so the token is the top
     * byte of the generator's output. Computed by an independent Python implementation of
     * splitmix64 + xoshiro256**, seed 0xdecaf. */
    static const int32_t want[16] = {154, 168, 111, 215, 221, 83, 207, 16,
                                     155, 59,  192, 185, 165, 1,  106, 212};
    float flat[256];
    for (int i = 0; i < 256; i++) flat[i] = 0.0f;
    struct rsample *d = rsample_init_dist(0xdecaf);
    REQUIRE(d);
    bool same = true;
    for (int i = 0; i < 16; i++) same = same && rsample_sample(d, flat, 256) == want[i];
    CHECK_MSG(same, "the generator's stream differs from the reference");
    rsample_free(d);

    /* a chain with penalties and dist repeats itself after reset */
    struct rsample *chain = rsample_chain_init();
    REQUIRE(chain);
    CHECK(rsample_chain_add(chain, rsample_init_penalties(8, 1.3f, 0.2f, 0.1f)));
    CHECK(rsample_chain_add(chain, rsample_init_top_k(20)));
    CHECK(rsample_chain_add(chain, rsample_init_dist(5)));
    uint64_t h1 = hash_draws(chain, l, 50, 2000);
    rsample_reset(chain);
    CHECK(hash_draws(chain, l, 50, 2000) == h1);
    rsample_free(chain);
}

/* ---- edge cases ------------------------------------------------------------------------- */

static void test_edges(void) {
    long counts[MAXV];
    /* one token */
    const float one[] = {-3.0f};
    struct rsample *d = rsample_init_dist(3);
    struct rsample *g = rsample_init_greedy();
    REQUIRE(d && g);
    CHECK(draw(d, one, 1, 100, counts) && counts[0] == 100);
    CHECK(rsample_sample(g, one, 1) == 0);
    const float one_masked[] = {-INFINITY};
    CHECK(rsample_sample(d, one_masked, 1) == -1);
    CHECK_ERR("masked");
    CHECK(rsample_sample(g, one, 0) == -1);
    CHECK_ERR("n_vocab");
    CHECK(rsample_sample(g, NULL, 1) == -1);
    CHECK_ERR("logits is NULL");

    /* all equal: greedy takes id 0, dist is uniform */
    float eq[7];
    for (int i = 0; i < 7; i++) eq[i] = 3.0f;
    CHECK(rsample_sample(g, eq, 7) == 0);
    double uni[7];
    for (int i = 0; i < 7; i++) uni[i] = 1.0 / 7.0;
    CHECK(draw(d, eq, 7, N_DRAWS, counts));
    check_chi2("dist, 7 equal logits", counts, uni, 7, N_DRAWS);

    /* masked tokens (-INFINITY, NaN) are never drawn */
    const float m[] = {0.0f, -INFINITY, 0.0f, NAN, 1.0f, -INFINITY};
    double pm[6] = {0};
    double e = exp(1.0);
    pm[0] = pm[2] = 1.0 / (2.0 + e);
    pm[4] = e / (2.0 + e);
    CHECK(draw(d, m, 6, N_DRAWS, counts));
    CHECK(counts[1] == 0 && counts[3] == 0 && counts[5] == 0);
    check_chi2("dist with -inf and NaN logits", counts, pm, 6, N_DRAWS);

    /* huge logits: no NaN, the mass on the largest */
    const float huge[] = {1e30f, -1e30f, 1e30f, 1e20f};
    struct rsample_token_data buf[8];
    struct rsample_candidates c = make_cands(buf, huge, 4);
    rsample_softmax(&c);
    CHECK(c.data[0].p == 0.5f && c.data[1].p == 0.0f && c.data[2].p == 0.5f && c.data[3].p == 0.0f);
    CHECK(draw(d, huge, 4, 10000, counts));
    CHECK(counts[1] == 0 && counts[3] == 0 && counts[0] > 4500 && counts[2] > 4500);
    const float top[] = {FLT_MAX, 0.0f, FLT_MAX, INFINITY, INFINITY};
    c = make_cands(buf, top, 5);
    rsample_softmax(&c);
    bool finite = true;
    for (int i = 0; i < 5; i++) finite = finite && !isnan(c.data[i].p);
    CHECK(finite && c.data[3].p == 0.5f && c.data[4].p == 0.5f && c.data[0].p == 0.0f);
    struct rsample *chain = rsample_chain_init();
    REQUIRE(chain);
    CHECK(rsample_chain_add(chain, rsample_init_temp(1e-9f)));
    CHECK(rsample_chain_add(chain, rsample_init_top_p(0.9f, 1)));
    CHECK(rsample_chain_add(chain, rsample_init_min_p(0.05f, 1)));
    CHECK(rsample_chain_add(chain, rsample_init_dist(8)));
    /* 1e30 / 1e-9 overflows to +inf: the two share the mass, 1e29 gets none */
    CHECK(draw(chain, huge, 4, 10000, counts));
    CHECK(counts[1] == 0 && counts[3] == 0 && counts[0] > 4500 && counts[2] > 4500);
    rsample_free(chain);
    rsample_free(d);
    rsample_free(g);

    /* a chain without a selector selects nothing */
    chain = rsample_chain_init();
    REQUIRE(chain);
    CHECK(rsample_chain_add(chain, rsample_init_top_k(2)));
    CHECK(rsample_sample(chain, eq, 7) == -1);
    CHECK_ERR("selected no token");
    /* adding NULL keeps the error of the init that failed; a non-chain refuses */
    CHECK(!rsample_chain_add(chain, rsample_init_temp(NAN)));
    CHECK_ERR("temperature");
    struct rsample *notchain = rsample_init_greedy();
    REQUIRE(notchain);
    CHECK(!rsample_chain_add(notchain, rsample_init_top_k(3))); /* top-k freed by the call */
    CHECK_ERR("not a chain");
    CHECK(rsample_chain_n(chain) == 1 && rsample_chain_n(notchain) == 0);
    rsample_free(notchain);
    rsample_free(chain);
    rsample_free(NULL);
}

/* ---- chains of the caller's own samplers ------------------------------------------------- */

struct recorder {
    char log[64];
    size_t n;
};

static const char *rec_name(const struct rsample *smpl) {
    (void)smpl;
    return "recorder";
}

static void rec_note(struct recorder *r, char what, int32_t tag) {
    if (r->n + 2 < sizeof r->log) {
        r->log[r->n++] = what;
        r->log[r->n++] = (char)('0' + tag);
        r->log[r->n] = '\0';
    }
}

/* each recorder's ctx points into an array of tags; the recorder writes "a<tag>" on apply,
   "c<tag>" on accept, "r<tag>" on reset into one shared log (the first element) */
struct rec_ctx {
    struct recorder *log;
    int32_t tag;
};

static bool rec_apply(struct rsample *smpl, struct rsample_candidates *cands) {
    struct rec_ctx *c = smpl->ctx;
    rec_note(c->log, 'a', c->tag);
    if (c->tag == 9) cands->selected = 0;
    return true;
}

static void rec_accept(struct rsample *smpl, int32_t token) {
    struct rec_ctx *c = smpl->ctx;
    (void)token;
    rec_note(c->log, 'c', c->tag);
}

static void rec_reset(struct rsample *smpl) {
    struct rec_ctx *c = smpl->ctx;
    rec_note(c->log, 'r', c->tag);
}

static void test_chain_order(void) {
    static const struct rsample_ops ops = {
        .name = rec_name, .accept = rec_accept, .apply = rec_apply, .reset = rec_reset};
    struct recorder log = {.n = 0};
    struct rec_ctx ctx[3] = {{&log, 1}, {&log, 2}, {&log, 9}};
    struct rsample *chain = rsample_chain_init();
    REQUIRE(chain);
    CHECK(strcmp(rsample_name(chain), "chain") == 0);
    for (int i = 0; i < 3; i++) CHECK(rsample_chain_add(chain, rsample_init(&ops, &ctx[i])));
    CHECK(rsample_chain_n(chain) == 3);
    CHECK(strcmp(rsample_name(rsample_chain_get(chain, 2)), "recorder") == 0);
    const float l[] = {0.0f, 1.0f};
    CHECK(rsample_sample(chain, l, 2) == 0);
    rsample_reset(chain);
    CHECK_MSG(strcmp(log.log, "a1a2a9c1c2c9r1r2r9") == 0, "log %s", log.log);
    rsample_free(chain); /* ops.free is NULL: the contexts are this function's */
    CHECK(rsample_init(NULL, NULL) == NULL);
    CHECK_ERR("ops is NULL");
}

/* ---- the default chain and the public API ----------------------------------------------- */

static void test_default_chain(void) {
    struct rsample_params p = {.seed = 1,
                               .temp = 0.8f,
                               .top_k = 40,
                               .top_p = 0.95f,
                               .min_p = 0.05f,
                               .penalty_last_n = 64,
                               .penalty_repeat = 1.0f, /* no token leaves the top 40 */
                               .penalty_freq = 0.0f,
                               .penalty_present = 0.0f};
    struct rsample *chain = rsample_chain_default(&p, 300);
    REQUIRE(chain);
    const char *names[] = {"penalties", "top-k", "top-p", "min-p", "temp", "dist"};
    CHECK(rsample_chain_n(chain) == 6);
    for (size_t i = 0; i < 6; i++)
        CHECK(strcmp(rsample_name(rsample_chain_get(chain, i)), names[i]) == 0);
    CHECK(rsample_chain_get(chain, 6) == NULL);

    float l[300];
    unsigned long long rng = 5;
    for (int i = 0; i < 300; i++) l[i] = (float)test_rand_int(&rng, 2000) / 200.0f - 5.0f;
    /* every draw is among the 40 best */
    struct rsample_token_data buf[300];
    struct rsample_candidates c = make_cands(buf, l, 300);
    rsample_sort(&c);
    float cutoff = c.data[39].logit;
    bool in_top = true;
    for (int i = 0; i < 2000; i++) {
        int32_t t = rsample_sample(chain, l, 300);
        in_top = in_top && t >= 0 && l[t] >= cutoff;
    }
    CHECK(in_top);
    rsample_free(chain);

    /* temp 0: penalties then greedy */
    p.temp = 0.0f;
    chain = rsample_chain_default(&p, 300);
    REQUIRE(chain);
    CHECK(rsample_chain_n(chain) == 2);
    CHECK(strcmp(rsample_name(rsample_chain_get(chain, 1)), "greedy") == 0);
    CHECK(rsample_sample(chain, l, 300) == c.data[0].id);
    rsample_free(chain);

    p.top_p = NAN;
    CHECK(rsample_chain_default(&p, 300) == NULL);
    CHECK_ERR("top_p is NaN");
    p.top_p = 0.9f;
    p.penalty_repeat = -1.0f;
    CHECK(rsample_chain_default(&p, 300) == NULL);
    CHECK_ERR("penalty_repeat");
    p.penalty_repeat = 1.0f;
    CHECK(rsample_chain_default(&p, 0) == NULL);
    CHECK_ERR("n_vocab");
}

/* Logit bias: exact sums on hand-made logits, bans, validation, and its place in the default
 * chain. */
static void test_logit_bias(void) {
    const float l[] = {1.0f, 2.0f, 3.0f, 0.5f};
    struct rsample_token_data buf[4];
    struct rsample_candidates c = make_cands(buf, l, 4);
    const struct rsample_logit_bias b[] = {{0, 4.0f}, {2, -INFINITY}, {0, 0.5f}};
    CHECK(apply_once(rsample_init_logit_bias(4, 3, b), &c));
    CHECK(c.size == 4 && buf[0].logit == 5.5f && buf[1].logit == 2.0f &&
          buf[2].logit == -INFINITY && buf[3].logit == 0.5f);
    /* reordered candidates (a bias after a sort) are found by id */
    c = make_cands(buf, l, 4);
    rsample_sort(&c);
    const struct rsample_logit_bias one = {3, 10.0f};
    CHECK(apply_once(rsample_init_logit_bias(4, 1, &one), &c));
    CHECK(find_id(&c, 3)->logit == 10.5f && !c.sorted);
    /* invalid ones */
    const struct rsample_logit_bias bad_tok = {4, 1.0f}, bad_nan = {1, NAN},
                                    bad_inf = {1, INFINITY};
    CHECK(rsample_init_logit_bias(4, 1, &bad_tok) == NULL);
    CHECK_ERR("token 4 is not in 0..3");
    CHECK(rsample_init_logit_bias(4, 1, &bad_nan) == NULL);
    CHECK_ERR("NaN");
    CHECK(rsample_init_logit_bias(4, 1, &bad_inf) == NULL);
    CHECK_ERR("+infinity");
    CHECK(rsample_init_logit_bias(4, -1, NULL) == NULL);
    CHECK_ERR("negative");
    CHECK(rsample_init_logit_bias(4, 2, NULL) == NULL);
    CHECK_ERR("bias is NULL");
    /* first in the default chain; greedy follows the bias (token 3 is the worst unbiased) */
    struct rsample_params p = {.temp = 0.0f, .penalty_repeat = 1.0f, .penalty_last_n = 64};
    p.n_logit_bias = 1;
    p.logit_bias = &one;
    struct rsample *chain = rsample_chain_default(&p, 4);
    REQUIRE(chain);
    CHECK(rsample_chain_n(chain) == 3 &&
          strcmp(rsample_name(rsample_chain_get(chain, 0)), "logit-bias") == 0);
    CHECK(rsample_sample(chain, l, 4) == 3);
    rsample_free(chain);
    /* a ban makes greedy take the next best, and dist never draw it */
    const struct rsample_logit_bias ban = {2, -INFINITY};
    p.logit_bias = &ban;
    chain = rsample_chain_default(&p, 4);
    REQUIRE(chain);
    CHECK(rsample_sample(chain, l, 4) == 1);
    rsample_free(chain);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 3;
    chain = rsample_chain_default(&p, 4);
    REQUIRE(chain);
    bool never = true;
    for (int i = 0; i < 2000; i++) never = never && rsample_sample(chain, l, 4) != 2;
    CHECK(never);
    rsample_free(chain);
}

/* rsample_get_probs against a softmax computed here (ref_softmax) over what the filters
 * leave: tolerance 1e-6 absolute (floats of probabilities computed in double). */
static void test_get_probs(void) {
    float l[50];
    unsigned long long rng = 9;
    for (int i = 0; i < 50; i++) l[i] = (float)test_rand_int(&rng, 1000) / 100.0f - 5.0f;
    l[7] = l[8]; /* a tie: the lower id first */
    int32_t ids[60];
    float probs[60];
    struct rsample_params p = {.seed = 1,
                               .temp = 0.5f,
                               .top_k = 10,
                               .top_p = 1.0f,
                               .min_p = 0.0f,
                               .penalty_last_n = 0,
                               .penalty_repeat = 1.0f};
    struct rsample *chain = rsample_chain_default(&p, 50);
    REQUIRE(chain);
    CHECK(rsample_get_probs(chain, ids, probs, 5) == 0); /* nothing sampled yet */
    REQUIRE(rsample_sample(chain, l, 50) >= 0);
    /* the reference: the 10 best by logit, softmax of logit / 0.5 */
    int32_t order[50];
    for (int i = 0; i < 50; i++) order[i] = i;
    for (int i = 0; i < 50; i++) /* selection sort: larger logit first, then lower id */
        for (int j = i + 1; j < 50; j++)
            if (l[order[j]] > l[order[i]] || (l[order[j]] == l[order[i]] && order[j] < order[i])) {
                int32_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    float top[10];
    double ref[10];
    for (int i = 0; i < 10; i++) top[i] = l[order[i]];
    ref_softmax(top, 10, 0.5, ref);
    int32_t got = rsample_get_probs(chain, ids, probs, 60);
    CHECK(got == 10); /* top-k left 10 */
    bool same = got == 10;
    for (int i = 0; same && i < 10; i++)
        same = ids[i] == order[i] && fabs(probs[i] - ref[i]) < 1e-6;
    CHECK(same);
    CHECK(rsample_get_probs(chain, ids, probs, 3) == 3 && ids[2] == order[2]);
    CHECK(fabs(rsample_get_prob(chain, order[4]) - ref[4]) < 1e-6);
    CHECK(rsample_get_prob(chain, order[10]) == 0.0f); /* top-k removed it */
    CHECK(rsample_get_probs(chain, ids, probs, 0) == 0);
    CHECK(rsample_get_probs(chain, ids, probs, -1) == -1);
    CHECK_ERR("negative");
    CHECK(rsample_get_probs(NULL, ids, probs, 1) == -1);
    rsample_free(chain);
    /* greedy: the whole vocabulary, untempered */
    p.temp = 0.0f;
    chain = rsample_chain_default(&p, 50);
    REQUIRE(chain);
    REQUIRE(rsample_sample(chain, l, 50) == order[0]);
    double full[50];
    ref_softmax(l, 50, 1.0, full);
    got = rsample_get_probs(chain, ids, probs, 50);
    same = got == 50;
    double total = 0.0;
    for (int i = 0; same && i < 50; i++) {
        same = ids[i] == order[i] && fabs(probs[i] - full[order[i]]) < 1e-6;
        total += probs[i];
    }
    CHECK(same && fabs(total - 1.0) < 1e-5);
    rsample_free(chain);
}

/* The public functions, through the same paths a program uses. */
static void test_public(void) {
    struct recur_sampler_params dp = recur_sampler_default_params();
    CHECK(dp.temp == 0.8f && dp.top_k == 40 && dp.top_p == 0.95f && dp.min_p == 0.05f &&
          dp.penalty_last_n == 64 && dp.penalty_repeat == 1.0f && dp.penalty_freq == 0.0f &&
          dp.penalty_present == 0.0f);

    struct recur_sampler *chain = recur_sampler_chain_init();
    REQUIRE(chain);
    CHECK(strcmp(recur_sampler_name(chain), "chain") == 0);
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_penalties(4, 1.0f, 0.0f, 100.0f)));
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_top_k(3)));
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_top_p(0.99f, 1)));
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_min_p(0.01f, 1)));
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_temp(0.7f)));
    CHECK(recur_sampler_chain_add(chain, recur_sampler_init_dist(11)));
    const float l[] = {-10.0f, 3.0f, 2.9f, 2.8f, -20.0f};
    /* The presence penalty of 100 rules out the tokens of the window of 4: the first three
       draws are 1, 2, 3 in some order (top-p 0.99 leaves out tokens 0 and 4 while one of them
       is left), then only token 0 survives top-p and min-p. */
    int32_t seen[4];
    for (int i = 0; i < 4; i++) seen[i] = recur_sampler_sample_logits(chain, l, 5);
    CHECK(seen[0] >= 1 && seen[0] <= 3 && seen[1] >= 1 && seen[1] <= 3 && seen[2] >= 1 &&
          seen[2] <= 3 && seen[0] != seen[1] && seen[1] != seen[2] && seen[0] != seen[2]);
    CHECK(seen[3] == 0);
    recur_sampler_reset(chain);
    int32_t again = recur_sampler_sample_logits(chain, l, 5);
    CHECK(again == seen[0]);
    recur_sampler_accept(chain, 1);
    recur_sampler_accept(NULL, 1);
    recur_sampler_reset(NULL);
    recur_sampler_free(chain);

    struct recur_sampler *g = recur_sampler_init_greedy();
    REQUIRE(g);
    CHECK(recur_sampler_sample_logits(g, l, 5) == 1);
    CHECK(recur_sampler_sample(g, NULL, 0) == -1);
    CHECK_ERR("ctx is NULL");
    recur_sampler_free(g);

    CHECK(recur_sampler_chain_default(NULL, dp) == NULL);
    CHECK_ERR("model is NULL");
    CHECK(recur_sampler_init_penalties(64, 0.0f, 0.0f, 0.0f) == NULL);
    CHECK(strstr(recur_last_error(), "penalty_repeat") != NULL);
    struct recur_sampler *c2 = recur_sampler_chain_init();
    REQUIRE(c2);
    CHECK(!recur_sampler_chain_add(c2, recur_sampler_init_top_p(NAN, 1)));
    CHECK(strstr(recur_last_error(), "NaN") != NULL);
    CHECK(recur_sampler_sample_logits(c2, l, 5) == -1);
    recur_sampler_free(c2);
    recur_sampler_free(NULL);

    /* logit bias and probabilities through the public names */
    const struct recur_logit_bias lb[] = {{4, 30.0f}, {1, -INFINITY}};
    struct recur_sampler *c3 = recur_sampler_chain_init();
    REQUIRE(c3);
    CHECK(recur_sampler_chain_add(c3, recur_sampler_init_logit_bias(5, 2, lb)));
    CHECK(recur_sampler_chain_add(c3, recur_sampler_init_greedy()));
    CHECK(strcmp(recur_sampler_name(c3), "chain") == 0);
    CHECK(recur_sampler_sample_logits(c3, l, 5) == 4); /* -20 + 30 = 10 beats 3 */
    recur_token ids[5];
    float pr[5];
    CHECK(recur_sampler_get_probs(c3, ids, pr, 5) == 5);
    CHECK(ids[0] == 4 && ids[1] == 2 && ids[4] == 1 && pr[4] == 0.0f);
    CHECK(recur_sampler_get_prob(c3, 4) == pr[0] && recur_sampler_get_prob(NULL, 4) == -1.0f);
    recur_sampler_free(c3);
    CHECK(recur_sampler_init_logit_bias(5, 1, &(struct recur_logit_bias){5, 1.0f}) == NULL);
    CHECK_ERR("not in 0..4");
    struct recur_sampler_params bp = recur_sampler_default_params();
    CHECK(bp.n_logit_bias == 0 && bp.logit_bias == NULL);
}

/* With a model file (argument 1): recur_sampler_sample on a context's logits. */
static void test_context(const char *model_path) {
    struct recur_model *m = recur_model_load_from_file(model_path, recur_model_default_params());
    REQUIRE(m);
    struct recur_context *ctx = recur_init_from_model(m, recur_context_default_params());
    REQUIRE(ctx);
    struct recur_sampler_params sp = recur_sampler_default_params();
    struct recur_sampler *s = recur_sampler_chain_default(m, sp);
    REQUIRE(s);
    CHECK(recur_sampler_sample(s, ctx, -1) == -1); /* no decode yet */
    CHECK(strstr(recur_last_error(), "sampler sample") != NULL);
    recur_token t[3] = {1, 2, 3};
    CHECK(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    int32_t n_vocab = recur_model_n_vocab(m);
    recur_token tok = recur_sampler_sample(s, ctx, -1);
    CHECK(tok >= 0 && tok < n_vocab);
    sp.temp = 0.0f;
    struct recur_sampler *g = recur_sampler_chain_default(m, sp);
    REQUIRE(g);
    const float *lg = recur_get_logits_ith(ctx, -1);
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (lg[i] > lg[best]) best = i;
    CHECK(recur_sampler_sample(g, ctx, -1) == best);
    CHECK(recur_sampler_sample(g, ctx, 0) == -1); /* token 0 asked for no output */
    recur_sampler_free(g);
    recur_sampler_free(s);
    recur_free(ctx);
    recur_model_free(m);
}

int main(int argc, char **argv) {
    RUN(test_greedy);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_min_p);
    RUN(test_temp);
    RUN(test_penalties);
    RUN(test_dist_chi2);
    RUN(test_dist_after_filters);
    RUN(test_dist_temperature);
    RUN(test_determinism);
    RUN(test_edges);
    RUN(test_chain_order);
    RUN(test_default_chain);
    RUN(test_logit_bias);
    RUN(test_get_probs);
    RUN(test_public);
    if (argc > 1) {
        test_context(argv[1]);
        fprintf(stderr, "%-40s done\n", "test_context");
    }
    return test_finish("test_sample");
}
