/*
 * The attention layers' kernels (src/ops/ops_attn.c) against float64 loops written from the
 * equations of ops.h, on every instruction set the CPU runs, one and two threads.
 *
 * rope: both pairings, n_rot below head_dim, freq_scale 1 and 0.25, positions up to 100003,
 * against the rotation in double. Measured max |got - want| 1.5e-7 (values in [-1, 1]: the
 * cosine and sine rounded to float, two products and a sum); tolerance 1e-6.
 *
 * attention: K/V f32, f16 and q8_0 in pages that keys cross, GQA ratios 1, 2, 4, 8 and 16 (a
 * group wider than the kernels' pass of ROPS_ATTN_HB query heads), head_dim 64, 128 and 80 / 36
 * (vector tails at 16 and 8 lanes), several sequences interleaved in the rows with their own
 * positions, queries that see no key (zeros), a decode case (one query, 1000 keys) and a prompt
 * case (64 causal queries). The reference reads the values as stored (f16 and q8_0 converted back
 * in double), so the tolerance measures the kernel, not the storage. Measured max |got - want| / (1
 * + |want|): see TOL.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ops/ops.h"
#include "ops/ops_quants.h"
#include "ops_util.h"
#include "pool/pool.h"
#include "test.h"

/* Max |got - want| / (1 + |want|) allowed for attention: measured at most 2.1e-6 over the
 * shapes below on every path (logits up to ~40 from float dots of up to 128 products carry
 * ~1e-6 absolute error, which exp turns into relative error of the weights); 1e-5 leaves room
 * for other compilers' contractions, while a wrong mask (one key too many or too few) moves
 * outputs by 1e-3 and more. */
#define TOL 1e-5

static unsigned long long rng = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static int irand(int n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int)((rng >> 11) % (unsigned long long)n);
}

/* ---- rope ---------------------------------------------------------------------------------- */

static double rope_worst; /* for the log */

static void check_rope(struct rpool *pool, int64_t n_tok, int64_t n_head, int64_t head_dim,
                       int64_t n_rot, float freq_scale, enum rops_rope_mode mode) {
    const int64_t stride = n_head * head_dim + 3; /* a gap between rows, never written */
    float *x0 = malloc(sizeof(float) * (size_t)(n_tok * stride)),
          *x = malloc(sizeof(float) * (size_t)(n_tok * stride));
    double *want = malloc(sizeof(double) * (size_t)(n_tok * stride));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    REQUIRE(x0 && x && want && pos);
    static const int32_t fixed[] = {0, 1, 17, 4095, 32768, 99999, 100003};
    for (int64_t t = 0; t < n_tok; t++) pos[t] = t < 7 ? fixed[t] : irand(100004);
    for (int64_t e = 0; e < n_tok * stride; e++) x0[e] = frand(), want[e] = x0[e];
    const int64_t half = n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t h = 0; h < n_head; h++)
            for (int64_t i = 0; i < half; i++) {
                const double th = (double)pos[t] * (double)freq_scale *
                                  pow(10000.0, -2.0 * (double)i / (double)n_rot);
                const int64_t a = mode == ROPS_ROPE_NEOX ? i : 2 * i,
                              b = mode == ROPS_ROPE_NEOX ? i + half : 2 * i + 1;
                double *r = want + t * stride + h * head_dim;
                const double u = r[a], v = r[b];
                r[a] = u * cos(th) - v * sin(th);
                r[b] = u * sin(th) + v * cos(th);
            }
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++)
        for (int nth = 1; nth <= 2; nth++) {
            const struct rops_exec ex = {.pool = pool, .n_threads = nth, .isa = isas[ii]};
            memcpy(x, x0, sizeof(float) * (size_t)(n_tok * stride));
            rops_rope(&ex, &(struct rops_rope_args){.x = x,
                                                    .n_tok = n_tok,
                                                    .n_head = n_head,
                                                    .head_dim = head_dim,
                                                    .stride = stride,
                                                    .pos = pos,
                                                    .n_rot = n_rot,
                                                    .freq_base = 10000.0f,
                                                    .freq_scale = freq_scale,
                                                    .mode = mode});
            double err = 0;
            int64_t moved = 0; /* dims past n_rot and the gaps: the same bits */
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t e = 0; e < stride; e++) {
                    const int64_t o = t * stride + e;
                    if (e < n_head * head_dim && e % head_dim < n_rot)
                        err = fmax(err, fabs(x[o] - want[o]));
                    else
                        moved += x[o] != x0[o];
                }
            rope_worst = fmax(rope_worst, err);
            CHECK_MSG(err < 1e-6 && moved == 0,
                      "rope %s threads %d tok %lld heads %lld dim %lld rot %lld scale %g mode %d: "
                      "error %g, %lld untouched values moved",
                      rops_isa_name(isas[ii]), nth, (long long)n_tok, (long long)n_head,
                      (long long)head_dim, (long long)n_rot, freq_scale, (int)mode, err,
                      (long long)moved);
        }
    free(x0), free(x), free(want), free(pos);
}

static void test_rope(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    for (int mode = 0; mode <= 2; mode += 2) {
        const enum rops_rope_mode m = (enum rops_rope_mode)mode;
        check_rope(pool, 7, 3, 64, 64, 1.0f, m);
        check_rope(pool, 7, 3, 64, 32, 0.25f, m);
        check_rope(pool, 9, 2, 80, 48, 1.0f, m);
        check_rope(pool, 1024, 8, 128, 64, 0.25f, m); /* enough for two threads */
    }
    printf("rope max error %.3g\n", rope_worst);
    rpool_free(pool);
}

/* ---- attention ----------------------------------------------------------------------------- */

struct attn_case {
    int64_t n_q, n_head, n_head_kv, head_dim, n_kv, page_rows;
    enum rops_type type, type_v; /* of K and V */
    int n_seq;   /* sequences in the rows; queries also ask for one more, with no key */
    int prompt;  /* 1: one sequence, key j at position j, query i at position i */
    float q_amp; /* query values in [-q_amp, q_amp): larger makes peaked softmaxes */
};

/* Row of n values into dst as type; back into f64 as stored (the reference's values). */
static void store_row(enum rops_type type, const float *src, int64_t n, uint8_t *dst,
                      double *stored) {
    if (type == ROPS_TYPE_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        for (int64_t c = 0; c < n; c++) stored[c] = src[c];
    } else if (type == ROPS_TYPE_F16) {
        uint16_t *h = (uint16_t *)dst;
        for (int64_t c = 0; c < n; c++)
            h[c] = rcore_f32_to_f16(src[c]), stored[c] = rcore_f16_to_f32(h[c]);
    } else {
        REQUIRE(rops_quantize_row(ROPS_TYPE_Q8_0, src, n, dst));
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)dst;
        for (int64_t c = 0; c < n; c++)
            stored[c] = (double)rcore_f16_to_f32(b[c / 32].d) * (double)b[c / 32].qs[c % 32];
    }
}

/* the largest error seen per instruction set and K type (f32, f16, q8_0), for the log */
static double worst_by[ROPS_ISA_COUNT][3];

static double check_attn(struct rpool *pool, const struct attn_case *cs) {
    const int64_t nq = cs->n_q, H = cs->n_head, Hk = cs->n_head_kv, D = cs->head_dim;
    const int64_t nkv = cs->n_kv, pr = cs->page_rows, G = H / Hk, E = Hk * D;
    const int64_t q_stride = H * D + 5, out_stride = H * D + 3;
    const int64_t n_pages = (nkv + pr - 1) / pr;
    const size_t rb = rops_row_bytes(cs->type, E), rbv = rops_row_bytes(cs->type_v, E);
    float *q = malloc(sizeof(float) * (size_t)(nq * q_stride)),
          *out = malloc(sizeof(float) * (size_t)(nq * out_stride)),
          *out1 = malloc(sizeof(float) * (size_t)(nq * out_stride)),
          *row = malloc(sizeof(float) * (size_t)E);
    double *ks = malloc(sizeof(double) * (size_t)(nkv * E)),
           *vs = malloc(sizeof(double) * (size_t)(nkv * E)),
           *want = malloc(sizeof(double) * (size_t)(nq * H * D)),
           *lg = malloc(sizeof(double) * (size_t)nkv);
    int32_t *q_pos = malloc(sizeof(int32_t) * (size_t)nq),
            *q_seq = malloc(sizeof(int32_t) * (size_t)nq),
            *kv_pos = malloc(sizeof(int32_t) * (size_t)nkv),
            *kv_seq = malloc(sizeof(int32_t) * (size_t)nkv);
    void **kp = calloc((size_t)n_pages, sizeof(void *)),
         **vp = calloc((size_t)n_pages, sizeof(void *));
    REQUIRE(q && out && out1 && row && ks && vs && want && lg && q_pos && q_seq && kv_pos &&
            kv_seq && kp && vp);
    for (int64_t p = 0; p < n_pages; p++) {
        kp[p] = malloc(rb * (size_t)pr), vp[p] = malloc(rbv * (size_t)pr);
        REQUIRE(kp[p] && vp[p]);
    }
    /* rows: each sequence's positions count up in the order its rows come */
    int32_t next_pos[8] = {0};
    for (int64_t j = 0; j < nkv; j++) {
        kv_seq[j] = cs->prompt ? 0 : irand(cs->n_seq);
        kv_pos[j] = cs->prompt ? (int32_t)j : next_pos[kv_seq[j]]++;
        uint8_t *k = (uint8_t *)kp[j / pr] + (size_t)(j % pr) * rb,
                *v = (uint8_t *)vp[j / pr] + (size_t)(j % pr) * rbv;
        for (int64_t c = 0; c < E; c++) row[c] = frand();
        store_row(cs->type, row, E, k, ks + j * E);
        for (int64_t c = 0; c < E; c++) row[c] = frand();
        store_row(cs->type_v, row, E, v, vs + j * E);
    }
    for (int64_t i = 0; i < nq; i++) {
        if (cs->prompt) {
            q_seq[i] = 0, q_pos[i] = (int32_t)i;
        } else if (nq == 1) { /* decode: the newest token sees all of its sequence */
            q_seq[i] = 0, q_pos[i] = next_pos[0] - 1;
        } else {
            q_seq[i] = irand(cs->n_seq + 1); /* n_seq: a sequence without rows */
            q_pos[i] = irand(next_pos[q_seq[i] < cs->n_seq ? q_seq[i] : 0] + 3) - 1; /* -1: none */
            /* whatever the draws: one query before every key, one of a sequence without rows */
            if (i == 0) q_seq[i] = 0, q_pos[i] = -1;
            if (i == 1) q_seq[i] = cs->n_seq;
        }
        for (int64_t c = 0; c < q_stride; c++) q[i * q_stride + c] = cs->q_amp * frand();
    }
    const float scale = 1.0f / sqrtf((float)D);
    for (int64_t i = 0; i < nq; i++)
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + i * q_stride + h * D;
            const int64_t g = h / G;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < nkv; j++) {
                lg[j] = -INFINITY;
                if (kv_seq[j] != q_seq[i] || kv_pos[j] > q_pos[i]) continue;
                double dot = 0;
                for (int64_t c = 0; c < D; c++) dot += (double)qh[c] * ks[j * E + g * D + c];
                lg[j] = (double)scale * dot;
                mx = fmax(mx, lg[j]);
            }
            double *w = want + (i * H + h) * D;
            for (int64_t c = 0; c < D; c++) w[c] = 0;
            for (int64_t j = 0; j < nkv; j++)
                if (lg[j] > -INFINITY) {
                    const double p = exp(lg[j] - mx);
                    sum += p;
                    for (int64_t c = 0; c < D; c++) w[c] += p * vs[j * E + g * D + c];
                }
            for (int64_t c = 0; c < D; c++) w[c] = sum > 0 ? w[c] / sum : 0;
        }
    double worst = 0;
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++)
        for (int nth = 1; nth <= 2; nth++) {
            const struct rops_exec ex = {.pool = pool, .n_threads = nth, .isa = isas[ii]};
            for (int64_t e = 0; e < nq * out_stride; e++) out[e] = 1234.5f; /* gaps: untouched */
            const struct rops_attn_args args = {.n_q = nq,
                                                .n_head = H,
                                                .n_head_kv = Hk,
                                                .head_dim = D,
                                                .q = q,
                                                .q_stride = q_stride,
                                                .q_pos = q_pos,
                                                .q_seq = q_seq,
                                                .n_kv = nkv,
                                                .k_pages = (const void *const *)kp,
                                                .v_pages = (const void *const *)vp,
                                                .page_rows = pr,
                                                .type_k = cs->type,
                                                .type_v = cs->type_v,
                                                .kv_pos = kv_pos,
                                                .kv_seq = kv_seq,
                                                .scale = scale,
                                                .out = out,
                                                .out_stride = out_stride};
            rops_attention(&ex, &args);
            double err = 0;
            int64_t gaps = 0;
            for (int64_t i = 0; i < nq; i++) {
                for (int64_t c = 0; c < H * D; c++) {
                    const double wv = want[i * H * D + c];
                    err = fmax(err, fabs(out[i * out_stride + c] - wv) / (1 + fabs(wv)));
                    if (isnan(out[i * out_stride + c])) err = INFINITY;
                }
                for (int64_t c = H * D; c < out_stride; c++)
                    gaps += out[i * out_stride + c] != 1234.5f;
            }
            /* a unit's sums do not depend on which thread takes it */
            int same = 1;
            if (nth == 1)
                memcpy(out1, out, sizeof(float) * (size_t)(nq * out_stride));
            else
                same = memcmp(out1, out, sizeof(float) * (size_t)(nq * out_stride)) == 0;
            CHECK_MSG(same, "attention %s: two threads' bits differ from one's",
                      rops_isa_name(isas[ii]));
            /* one sequence's keys (a prompt's): no ids at all gives the same bits */
            if (cs->prompt && nth == 2) {
                struct rops_attn_args one = args;
                one.q_seq = one.kv_seq = NULL;
                rops_attention(&ex, &one);
                CHECK_MSG(memcmp(out1, out, sizeof(float) * (size_t)(nq * out_stride)) == 0,
                          "attention %s: without sequence ids the bits differ",
                          rops_isa_name(isas[ii]));
            }
            worst = fmax(worst, err);
            double *wb = &worst_by[isas[ii]][cs->type == ROPS_TYPE_F32   ? 0
                                             : cs->type == ROPS_TYPE_F16 ? 1
                                                                         : 2];
            *wb = fmax(*wb, err);
            CHECK_MSG(err < TOL && gaps == 0,
                      "attention %s threads %d type %d q %lld heads %lld/%lld dim %lld kv %lld "
                      "pages of %lld: error %g, %lld gap values written",
                      rops_isa_name(isas[ii]), nth, (int)cs->type, (long long)nq, (long long)H,
                      (long long)Hk, (long long)D, (long long)nkv, (long long)pr, err,
                      (long long)gaps);
        }
    for (int64_t p = 0; p < n_pages; p++) free(kp[p]), free(vp[p]);
    free(kp), free(vp), free(q), free(out), free(out1), free(row), free(ks), free(vs), free(want),
        free(lg);
    free(q_pos), free(q_seq), free(kv_pos), free(kv_seq);
    return worst;
}

static void test_attention(void) {
    struct rpool *pool = rpool_create(2);
    REQUIRE(pool);
    const enum rops_type types[3] = {ROPS_TYPE_F32, ROPS_TYPE_F16, ROPS_TYPE_Q8_0};
    /* n_q, heads, kv heads, head_dim, n_kv, page_rows */
    const int64_t shapes[][6] = {
        {9, 8, 8, 64, 300, 16},   {9, 8, 4, 128, 300, 16},
        {9, 8, 2, 64, 257, 16},   {5, 8, 1, 128, 100, 7}, /* a group of 8, one kv head */
        {4, 16, 1, 64, 70, 16}, /* a group of 16: two passes of ROPS_ATTN_HB */
        {6, 4, 2, 80, 300, 16},   {6, 4, 4, 36, 150, 16}, /* tails at 16 and 8 lanes */
        {1, 8, 2, 128, 1000, 16},                         /* decode */
    };
    double worst[3] = {0};
    for (int ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            if (types[ti] == ROPS_TYPE_Q8_0 && shapes[si][3] % 32) continue;
            for (int amp = 0; amp < 2; amp++) {
                const struct attn_case c = {.n_q = shapes[si][0],
                                            .n_head = shapes[si][1],
                                            .n_head_kv = shapes[si][2],
                                            .head_dim = shapes[si][3],
                                            .n_kv = shapes[si][4],
                                            .page_rows = shapes[si][5],
                                            .type = types[ti],
                                            .type_v = types[ti],
                                            .n_seq = shapes[si][0] == 1 ? 1 : 3,
                                            .q_amp = amp ? 12.0f : 2.0f};
                worst[ti] = fmax(worst[ti], check_attn(pool, &c));
            }
        }
    for (int ti = 0; ti < 3; ti++) {
        /* the prompt: 64 queries over their own 64 keys, causal */
        const struct attn_case c = {.n_q = 64,
                                    .n_head = 8,
                                    .n_head_kv = 2,
                                    .head_dim = 64,
                                    .n_kv = 64,
                                    .page_rows = 16,
                                    .type = types[ti],
                                    .type_v = types[ti],
                                    .n_seq = 1,
                                    .prompt = 1,
                                    .q_amp = 4.0f};
        worst[ti] = fmax(worst[ti], check_attn(pool, &c));
    }
    /* K and V of different types */
    for (int ti = 0; ti < 3; ti++) {
        const struct attn_case c = {.n_q = 7,
                                    .n_head = 8,
                                    .n_head_kv = 4,
                                    .head_dim = 64,
                                    .n_kv = 200,
                                    .page_rows = 16,
                                    .type = types[ti],
                                    .type_v = types[(ti + 1) % 3],
                                    .n_seq = 2,
                                    .q_amp = 4.0f};
        check_attn(pool, &c);
    }
    printf("attention max error f32 %.3g f16 %.3g q8_0 %.3g\n", worst[0], worst[1], worst[2]);
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++)
        printf("  %-8s f32 %.3g f16 %.3g q8_0 %.3g\n", rops_isa_name(isas[ii]),
               worst_by[isas[ii]][0], worst_by[isas[ii]][1], worst_by[isas[ii]][2]);
    rpool_free(pool);
}

/* No rows at all (a first prompt's attention before anything is stored): zeros, the pages not
 * read. */
static void test_attention_empty(void) {
    float q[2 * 64], out[2 * 64];
    const int32_t q_pos[2] = {0, 5}, q_seq[2] = {0, 1};
    for (int c = 0; c < 2 * 64; c++) q[c] = frand(), out[c] = 1.0f;
    enum rops_isa isas[ROPS_ISA_COUNT];
    const int n_isas = test_isas(isas);
    for (int ii = 0; ii < n_isas; ii++) {
        const struct rops_exec ex = {.n_threads = 1, .isa = isas[ii]};
        rops_attention(&ex, &(struct rops_attn_args){.n_q = 2,
                                                     .n_head = 2,
                                                     .n_head_kv = 1,
                                                     .head_dim = 32,
                                                     .q = q,
                                                     .q_stride = 64,
                                                     .q_pos = q_pos,
                                                     .q_seq = q_seq,
                                                     .page_rows = 16,
                                                     .type_k = ROPS_TYPE_Q8_0,
                                                     .type_v = ROPS_TYPE_F16,
                                                     .scale = 0.125f,
                                                     .out = out,
                                                     .out_stride = 64});
        int nonzero = 0;
        for (int c = 0; c < 2 * 64; c++) nonzero += out[c] != 0.0f;
        CHECK_MSG(nonzero == 0, "attention %s without rows: %d values not zero",
                  rops_isa_name(isas[ii]), nonzero);
    }
}

int main(void) {
    RUN(test_rope);
    RUN(test_attention);
    RUN(test_attention_empty);
    return test_finish("test_ops_attn");
}
