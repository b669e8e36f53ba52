/*
 * RWKV's kernels (src/ops/ops_rwkv.c) against float64 loops written from the equations of
 * docs/rwkv6.md (14) and docs/rwkv7.md (14), on the portable and the vectorised path, one and
 * two threads, head sizes that are and are not multiples of the 8-lane vectors, several
 * sequences with non-zero incoming states, and snapshots after some tokens.
 * Tolerance: max |got - want| / (1 + |want|) < 1e-4 (float32 sums of up to 16 terms per step
 * over a few tokens).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "pool/pool.h"
#include "ops_util.h"
#include "test.h"

static unsigned long long rng = 0x2545f4914f6cdd1dull;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* LayerNorm and RMSNorm on every path, lengths 37 (a tail past the vectors), 64 (a head) and
 * 768 (an embedding), against float64: |out - want| < 1e-5 (x near 3 +- 2, so the mean matters);
 * in place without weight and bias, mean 0 and variance 1 - eps / (var + eps) ~ 1 (1e-5). */
static void test_norms(void) {
    static float x[768], w[768], b[768], out[768], x0[768];
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    const int64_t lens[3] = {37, 64, 768};
    for (int ii = 0; ii < n_isas; ii++)
        for (int li = 0; li < 3; li++) {
            const int64_t k = lens[li];
            for (int64_t i = 0; i < k; i++)
                x[i] = x0[i] = 3.0f + 2.0f * frand(), w[i] = frand(), b[i] = frand();
            double mean = 0, var = 0, ss = 0;
            for (int64_t i = 0; i < k; i++) mean += x[i], ss += (double)x[i] * x[i];
            mean /= (double)k;
            for (int64_t i = 0; i < k; i++) var += (x[i] - mean) * (x[i] - mean);
            var /= (double)k;
            rops_layernorm(isas[ii], x, w, b, k, 1e-5f, out);
            double err = 0;
            for (int64_t i = 0; i < k; i++)
                err = fmax(err, fabs(out[i] - ((x[i] - mean) / sqrt(var + 1e-5) * w[i] + b[i])));
            CHECK_MSG(err < 1e-5, "layernorm %s k %lld: error %g", rops_isa_name(isas[ii]),
                      (long long)k, err);
            rops_rmsnorm(isas[ii], x, w, k, 1e-5f, out);
            err = 0;
            for (int64_t i = 0; i < k; i++)
                err = fmax(err, fabs(out[i] - x[i] / sqrt(ss / (double)k + 1e-5) * w[i]));
            CHECK_MSG(err < 1e-5, "rmsnorm %s k %lld: error %g", rops_isa_name(isas[ii]),
                      (long long)k, err);
            rops_layernorm(isas[ii], x, NULL, NULL, k, 0.0f, x);
            double m2 = 0, v2 = 0;
            for (int64_t i = 0; i < k; i++) m2 += x[i], v2 += (double)x[i] * x[i];
            CHECK_MSG(fabs(m2 / (double)k) < 1e-6 && fabs(v2 / (double)k - 1) < 1e-5,
                      "layernorm %s k %lld in place: mean %g var %g", rops_isa_name(isas[ii]),
                      (long long)k, m2 / (double)k, v2 / (double)k);
            /* the vector paths sum in another order, in double: within float rounding of the
               portable path */
            rops_rmsnorm(ROPS_ISA_SCALAR, x0, NULL, k, 1e-5f, out);
            rops_rmsnorm(isas[ii], x0, NULL, k, 1e-5f, x);
            err = 0;
            for (int64_t i = 0; i < k; i++) err = fmax(err, fabs(out[i] - x[i]));
            CHECK_MSG(err < 1e-6, "rmsnorm %s k %lld vs scalar: %g", rops_isa_name(isas[ii]),
                      (long long)k, err);
        }
}

/* float64 WKV over S sequences of T tokens; rs: the states, updated; ry: outputs. */
static void ref_wkv(int v7, int64_t S, int64_t T, int64_t E, int64_t hs, const float *r,
                    const float *k, const float *v, const float *w, const float *u, const float *a,
                    const float *b, double *rs, double *ry) {
    const int64_t H = E / hs;
    for (int64_t sq = 0; sq < S; sq++)
        for (int64_t t = sq * T; t < (sq + 1) * T; t++)
            for (int64_t h = 0; h < H; h++) {
                double *St = rs + sq * E * hs + h * hs * hs;
                const int64_t o = t * E + h * hs;
                if (!v7) {
                    for (int64_t j = 0; j < hs; j++) {
                        double y = 0;
                        for (int64_t i = 0; i < hs; i++)
                            y += (double)r[o + i] *
                                 (St[i * hs + j] + (double)u[h * hs + i] * k[o + i] * v[o + j]);
                        ry[o + j] = y;
                    }
                    for (int64_t i = 0; i < hs; i++)
                        for (int64_t j = 0; j < hs; j++)
                            St[i * hs + j] =
                                w[o + i] * St[i * hs + j] + (double)k[o + i] * v[o + j];
                } else {
                    for (int64_t i = 0; i < hs; i++) {
                        double sa = 0;
                        for (int64_t j = 0; j < hs; j++) sa += a[o + j] * St[i * hs + j];
                        double y = 0;
                        for (int64_t j = 0; j < hs; j++) {
                            St[i * hs + j] = St[i * hs + j] * w[o + j] +
                                             (double)v[o + i] * k[o + j] + sa * b[o + j];
                            y += St[i * hs + j] * r[o + j];
                        }
                        ry[o + i] = y;
                    }
                }
            }
}

/* decays: 0 in (0.6, 0.99); 1 some channels' decays tiny (1e-3 .. 1e-30, and 0), so that the
 * vector kernels' scaled state folds rows (columns) every few tokens or every token */
static void check_wkv(struct rpool *pool, int v7, int64_t S, int64_t T, int64_t E, int64_t hs,
                      int decays) {
    const int64_t n = S * T, ns = E * hs;
    float *r = malloc(sizeof(float) * (size_t)(n * E)),
          *k = malloc(sizeof(float) * (size_t)(n * E)),
          *v = malloc(sizeof(float) * (size_t)(n * E)),
          *w = malloc(sizeof(float) * (size_t)(n * E)),
          *a = malloc(sizeof(float) * (size_t)(n * E)),
          *b = malloc(sizeof(float) * (size_t)(n * E)), *u = malloc(sizeof(float) * (size_t)E),
          *s0 = malloc(sizeof(float) * (size_t)(S * ns)),
          *st = malloc(sizeof(float) * (size_t)(S * ns)),
          *y = malloc(sizeof(float) * (size_t)(n * E)),
          *sv = malloc(sizeof(float) * (size_t)(n * ns));
    double *rs = malloc(sizeof(double) * (size_t)(S * ns)),
           *ry = malloc(sizeof(double) * (size_t)(n * E));
    float **save = malloc(sizeof(float *) * (size_t)n);
    REQUIRE(r && k && v && w && a && b && u && s0 && st && y && sv && rs && ry && save);
    for (int64_t i = 0; i < n * E; i++) {
        r[i] = frand(), k[i] = frand(), v[i] = frand();
        w[i] = 0.6f + 0.39f * (frand() + 1.0f) / 2.0f; /* decays in (0.6, 0.99) */
        if (decays == 1 && i % 7 == 3) w[i] = powf(10.0f, -3.0f - 27.0f * (frand() + 1.0f) / 2.0f);
        if (decays == 1 && i % 29 == 5) w[i] = 0.0f;
        /* RWKV-7's a = -kk, b = kk * iclr: small, so the state stays bounded */
        a[i] = 0.3f * frand(), b[i] = 0.3f * frand();
    }
    for (int64_t i = 0; i < E; i++) u[i] = frand();
    for (int64_t i = 0; i < S * ns; i++) s0[i] = frand(), rs[i] = s0[i];
    for (int64_t t = 0; t < n; t++) save[t] = t % 3 == 1 || t % T == T - 1 ? sv + t * ns : NULL;
    ref_wkv(v7, S, T, E, hs, r, k, v, w, u, a, b, rs, ry);

    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++) {
        for (int nth = 1; nth <= 2; nth++) {
            const struct rops_exec ex = {.pool = pool, .n_threads = nth, .isa = isas[ii]};
            memcpy(st, s0, sizeof(float) * (size_t)(S * ns));
            memset(sv, 0, sizeof(float) * (size_t)(n * ns));
            if (v7)
                rops_wkv7(&ex, &(struct rops_wkv_args){.state = st,
                                                       .r = r,
                                                       .w = w,
                                                       .k = k,
                                                       .v = v,
                                                       .a = a,
                                                       .b = b,
                                                       .n_seqs = S,
                                                       .n_tok = T,
                                                       .n_embd = E,
                                                       .head_size = hs,
                                                       .y = y,
                                                       .save = save});
            else
                rops_wkv6(&ex, &(struct rops_wkv_args){.state = st,
                                                       .r = r,
                                                       .k = k,
                                                       .v = v,
                                                       .w = w,
                                                       .u = u,
                                                       .n_seqs = S,
                                                       .n_tok = T,
                                                       .n_embd = E,
                                                       .head_size = hs,
                                                       .y = y,
                                                       .save = save});
            double ey = 0, es = 0;
            for (int64_t i = 0; i < n * E; i++)
                ey = fmax(ey, fabs(y[i] - ry[i]) / (1 + fabs(ry[i])));
            for (int64_t i = 0; i < S * ns; i++)
                es = fmax(es, fabs(st[i] - rs[i]) / (1 + fabs(rs[i])));
            /* the snapshot after a sequence's last token is its final state; an unsaved
             * token's slot stays untouched */
            int bad_saves = 0;
            for (int64_t t = 0; t < n; t++) {
                if (t % T == T - 1)
                    bad_saves +=
                        memcmp(sv + t * ns, st + (t / T) * ns, sizeof(float) * (size_t)ns) != 0;
                if (!save[t])
                    for (int64_t i = 0; i < ns; i++) bad_saves += sv[t * ns + i] != 0.0f;
            }
            CHECK_MSG(
                ey < 1e-4 && es < 1e-4 && bad_saves == 0,
                "wkv%d %s threads %d S %lld T %lld E %lld hs %lld decays %d: y %g state %g, %d "
                "bad saves",
                v7 ? 7 : 6, rops_isa_name(isas[ii]), nth, (long long)S, (long long)T, (long long)E,
                (long long)hs, decays, ey, es, bad_saves);
        }
    }
    free(r), free(k), free(v), free(w), free(a), free(b), free(u), free(s0), free(st), free(y);
    free(sv), free(rs), free(ry), free(save);
}

static void test_wkv(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    /* S, T, E, head_size. Heads of 32 and 64 take the vector sets' run kernels (x86/wkv.h:
       WKV7's from 4 tokens on: 1, 3 and 40 tokens run both forms), the others the per-token
       ones. The (0.6, 0.99) decays fold after 82 tokens or more (0.6^82 < 2^-60, the kernels'
       bound): 100 tokens cross it; the tiny ones fold every token or two. */
    const int64_t shapes[][4] = {{1, 1, 8, 8},    {2, 5, 32, 8},   {3, 4, 15, 5},    {1, 7, 64, 16},
                                 {2, 3, 128, 64}, {2, 3, 48, 24},  {2, 40, 128, 64}, {1, 1, 64, 64},
                                 {3, 9, 64, 32},  {1, 100, 64, 64}};
    for (int v7 = 0; v7 <= 1; v7++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int decays = 0; decays <= 1; decays++)
                check_wkv(pool, v7, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], decays);
    rpool_free(pool);
}

int main(void) {
    RUN(test_norms);
    RUN(test_wkv);
    return test_finish("test_ops_rwkv");
}
