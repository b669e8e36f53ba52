/*
 * RWKV's kernels: LayerNorm with bias, and the two WKV recurrences (docs/rwkv6.md (14),
 * docs/rwkv7.md (14)), each head of each sequence a head_size x head_size state.
 *
 * The scans share the heads out among the threads (heads are independent, and a head's state,
 * 16 KiB at head_size 64, stays in the core's L1/L2 cache across the tokens of a ubatch). Every
 * inner loop runs over a contiguous row of the state, so the AVX2 path (functions compiled for
 * AVX2 + FMA with the target attribute, chosen per call like the rest of ops) is the scalar
 * loop eight lanes at a time, with a scalar tail for head sizes that are not multiples of 8.
 */
#include "ops_impl.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

void rops_layernorm(const float *x, const float *w, const float *b, int64_t k, float eps,
                    float *out) {
    /* two passes in double: the mean first, so the variance does not cancel */
    double mean = 0.0;
    for (int64_t i = 0; i < k; i++) mean += x[i];
    mean /= (double)k;
    double var = 0.0;
    for (int64_t i = 0; i < k; i++) {
        const double d = x[i] - mean;
        var += d * d;
    }
    const float scale = (float)(1.0 / sqrt(var / (double)k + (double)eps));
    const float m = (float)mean;
    for (int64_t i = 0; i < k; i++) {
        const float v = (x[i] - m) * scale;
        out[i] = (w ? v * w[i] : v) + (b ? b[i] : 0.0f);
    }
}

/* ---- WKV6 ---------------------------------------------------------------------------------- */

struct wkv_args {
    float *state;
    const float *r, *k, *v, *w, *u; /* u: WKV6's bonus, per channel */
    const float *a, *b;             /* WKV7's state-update vectors */
    int64_t n_seqs, n_tok, E, hs;
    float *y;
    float *const *save;
};

/* One token of one WKV6 head: S (hs x hs, row i = key i) and the output y (hs). */
static void wkv6_head_scalar(float *S, const float *r, const float *k, const float *v,
                             const float *w, const float *u, int64_t hs, float *y) {
    for (int64_t j = 0; j < hs; j++) y[j] = 0.0f;
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        const float ri = r[i], ki = k[i], wi = w[i], uki = u[i] * k[i];
        for (int64_t j = 0; j < hs; j++) {
            y[j] += ri * (row[j] + uki * v[j]);
            row[j] = wi * row[j] + ki * v[j];
        }
    }
}

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static void wkv6_head_avx2(float *S, const float *r,
                                                               const float *k, const float *v,
                                                               const float *w, const float *u,
                                                               int64_t hs, float *y) {
    const int64_t hv = hs / 8 * 8;
    for (int64_t j = 0; j < hs; j++) y[j] = 0.0f;
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        const float ri = r[i], ki = k[i], wi = w[i], uki = u[i] * k[i];
        const __m256 vr = _mm256_set1_ps(ri), vk = _mm256_set1_ps(ki), vw = _mm256_set1_ps(wi),
                     vu = _mm256_set1_ps(uki);
        for (int64_t j = 0; j < hv; j += 8) {
            const __m256 vv = _mm256_loadu_ps(v + j), s = _mm256_loadu_ps(row + j);
            /* y += r * (s + u k v);  s = w s + k v */
            _mm256_storeu_ps(
                y + j, _mm256_fmadd_ps(vr, _mm256_fmadd_ps(vu, vv, s), _mm256_loadu_ps(y + j)));
            _mm256_storeu_ps(row + j, _mm256_fmadd_ps(vw, s, _mm256_mul_ps(vk, vv)));
        }
        for (int64_t j = hv; j < hs; j++) {
            y[j] += ri * (row[j] + uki * v[j]);
            row[j] = wi * row[j] + ki * v[j];
        }
    }
}
#endif

/* ---- WKV7 ---------------------------------------------------------------------------------- */

/* One token of one WKV7 head: S (hs x hs, row i = value i, column j = key j). */
static void wkv7_head_scalar(float *S, const float *r, const float *w, const float *k,
                             const float *v, const float *a, const float *b, int64_t hs, float *y) {
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        float sa = 0.0f;
        for (int64_t j = 0; j < hs; j++) sa += a[j] * row[j];
        float acc = 0.0f;
        const float vi = v[i];
        for (int64_t j = 0; j < hs; j++) {
            row[j] = row[j] * w[j] + vi * k[j] + sa * b[j];
            acc += row[j] * r[j];
        }
        y[i] = acc;
    }
}

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static void
wkv7_head_avx2(float *S, const float *r, const float *w, const float *k, const float *v,
               const float *a, const float *b, int64_t hs, float *y) {
    const int64_t hv = hs / 8 * 8;
    for (int64_t i = 0; i < hs; i++) {
        float *row = S + i * hs;
        __m256 vsa = _mm256_setzero_ps();
        for (int64_t j = 0; j < hv; j += 8)
            vsa = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(row + j), vsa);
        float sa = hsum_avx2(vsa);
        for (int64_t j = hv; j < hs; j++) sa += a[j] * row[j];
        const float vi = v[i];
        const __m256 bsa = _mm256_set1_ps(sa), bvi = _mm256_set1_ps(vi);
        __m256 vacc = _mm256_setzero_ps();
        for (int64_t j = 0; j < hv; j += 8) {
            __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + j), _mm256_loadu_ps(w + j));
            s = _mm256_fmadd_ps(bvi, _mm256_loadu_ps(k + j), s);
            s = _mm256_fmadd_ps(bsa, _mm256_loadu_ps(b + j), s);
            _mm256_storeu_ps(row + j, s);
            vacc = _mm256_fmadd_ps(s, _mm256_loadu_ps(r + j), vacc);
        }
        float acc = hsum_avx2(vacc);
        for (int64_t j = hv; j < hs; j++) {
            row[j] = row[j] * w[j] + vi * k[j] + sa * b[j];
            acc += row[j] * r[j];
        }
        y[i] = acc;
    }
}
#endif

/* ---- the scans over a ubatch ------------------------------------------------------------- */

struct wkv_task {
    struct wkv_args a;
    enum rops_isa isa;
    bool v7;
};

static void wkv_thread(void *arg, int ith, int nth) {
    const struct wkv_task *t = arg;
    const struct wkv_args *a = &t->a;
    const int64_t H = a->E / a->hs, hs = a->hs, h0 = H * ith / nth, h1 = H * (ith + 1) / nth;
    const bool avx2 = t->isa == ROPS_ISA_AVX2;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t0 = s * a->n_tok, tk = t0; tk < t0 + a->n_tok; tk++) {
            const int64_t row = tk * a->E;
            float *dst = a->save ? a->save[tk] : NULL;
            for (int64_t h = h0; h < h1; h++) {
                float *S = a->state + s * a->E * hs + h * hs * hs;
                const int64_t o = row + h * hs;
#ifdef HAVE_X86
                if (avx2 && !t->v7)
                    wkv6_head_avx2(S, a->r + o, a->k + o, a->v + o, a->w + o, a->u + h * hs, hs,
                                   a->y + o);
                else if (avx2)
                    wkv7_head_avx2(S, a->r + o, a->w + o, a->k + o, a->v + o, a->a + o, a->b + o,
                                   hs, a->y + o);
                else
#endif
                    if (!t->v7)
                    wkv6_head_scalar(S, a->r + o, a->k + o, a->v + o, a->w + o, a->u + h * hs, hs,
                                     a->y + o);
                else
                    wkv7_head_scalar(S, a->r + o, a->w + o, a->k + o, a->v + o, a->a + o, a->b + o,
                                     hs, a->y + o);
                if (dst) memcpy(dst + h * hs * hs, S, sizeof(float) * (size_t)(hs * hs));
            }
        }
    (void)avx2;
}

static void wkv_run(const struct rops_exec *ex, struct wkv_task *t) {
    const int64_t H = t->a.E / t->a.hs;
    int64_t nth = ex->n_threads;
    /* a thread's share must outweigh the hand-off: ~4096 state updates at least */
    const int64_t work = t->a.n_seqs * t->a.n_tok * t->a.E * t->a.hs;
    if (nth > work / 4096) nth = work / 4096;
    if (nth > H) nth = H;
    if (nth < 1) nth = 1;
    rpool_run(ex->pool, wkv_thread, t, (int)nth);
}

/* Both scans: the arguments one version does not take are NULL. */
static void wkv(const struct rops_exec *ex, bool v7, float *state, const float *r, const float *k,
                const float *v, const float *w, const float *u, const float *a, const float *b,
                int64_t n_seqs, int64_t n_tok, int64_t n_embd, int64_t head_size, float *y,
                float *const *save) {
    struct wkv_task t = {
        .a = {state, r, k, v, w, u, a, b, n_seqs, n_tok, n_embd, head_size, y, save},
        .isa = ex->isa,
        .v7 = v7};
    wkv_run(ex, &t);
}

void rops_wkv6(const struct rops_exec *ex, float *state, const float *r, const float *k,
               const float *v, const float *w, const float *u, int64_t n_seqs, int64_t n_tok,
               int64_t n_embd, int64_t head_size, float *y, float *const *save) {
    wkv(ex, false, state, r, k, v, w, u, NULL, NULL, n_seqs, n_tok, n_embd, head_size, y, save);
}

void rops_wkv7(const struct rops_exec *ex, float *state, const float *r, const float *w,
               const float *k, const float *v, const float *a, const float *b, int64_t n_seqs,
               int64_t n_tok, int64_t n_embd, int64_t head_size, float *y, float *const *save) {
    wkv(ex, true, state, r, k, v, w, NULL, a, b, n_seqs, n_tok, n_embd, head_size, y, save);
}
