/*
 * The portable C kernels (the table rops_kernels_scalar, see ops_impl.h). They are the
 * definition the vectorised ones are tested against: written for clarity, 4 weight rows and
 * ROPS_KT columns at a time (the vectorised prompt path tiles differently: the two agree
 * within float rounding, not bit for bit).
 */
#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"
#include "ops_quants.h"

/* ---- weights ------------------------------------------------------------------------------- */

/* Columns [c0, c0 + kt) of row r as f32; for the block types c0 and kt are whole blocks. */
void rops_row_tile(const struct rops_mat *w, int64_t r, int64_t c0, int64_t kt, float *out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    switch (w->type) {
    case ROPS_TYPE_F32:
        memcpy(out, row + c0 * 4, sizeof(float) * (size_t)kt);
        break;
    case ROPS_TYPE_F16:
        rcore_row_to_f32(RCORE_TYPE_F16, out, row + c0 * 2, (size_t)kt);
        break;
    case ROPS_TYPE_BF16:
        rcore_row_to_f32(RCORE_TYPE_BF16, out, row + c0 * 2, (size_t)kt);
        break;
    case ROPS_TYPE_Q8_0: {
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)row + c0 / 32;
        for (int64_t i = 0; i < kt / 32; i++) {
            const float d = rcore_f16_to_f32(b[i].d);
            for (int j = 0; j < 32; j++) out[i * 32 + j] = d * (float)b[i].qs[j];
        }
        break;
    }
    case ROPS_TYPE_Q4_0: {
        const struct rops_block_q4_0 *b = (const struct rops_block_q4_0 *)row + c0 / 32;
        for (int64_t i = 0; i < kt / 32; i++) {
            const float d = rcore_f16_to_f32(b[i].d);
            for (int j = 0; j < 16; j++) {
                out[i * 32 + j] = d * (float)((b[i].qs[j] & 15) - 8);
                out[i * 32 + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        break;
    }
    default: { /* the other block types: c0 and kt whole blocks */
        const struct rops_qtraits *q = rops_qtraits_of(w->type);
        q->to_f32(row + (size_t)(c0 / q->block) * q->block_bytes, out, kt);
        break;
    }
    }
}

/* One q8_0 block as ggml's reference quantizer makes it: the quants into qs, the scale (f16)
 * returned. */
uint16_t rops_q8_block(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = (int8_t)roundf(x[j] * id);
    return rcore_f32_to_f16(d);
}

static void quantize_x_scalar(const float *x, int64_t n_blocks, struct rops_xq8 *out) {
    for (int64_t b = 0; b < n_blocks; b++)
        out[b].d = rcore_f16_to_f32(rops_q8_block(x + 32 * b, out[b].qs));
}

/* ---- matmul -------------------------------------------------------------------------------- */

static float dot(const float *a, const float *b, int64_t n) {
    /* four partial sums: shorter dependency chains, and an order the compiler may vectorise
       without -ffast-math */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void rops_matmul_rows_scalar(const struct rops_mat *w, const float *x, int64_t n, float *y,
                             int64_t r0, int64_t r1) {
    const int64_t k = w->n_cols, m = w->n_rows;
    float panel[ROPS_RB][ROPS_KT];
    for (int64_t r = r0; r < r1; r += ROPS_RB) {
        const int64_t rb = r1 - r < ROPS_RB ? r1 - r : ROPS_RB;
        for (int64_t k0 = 0; k0 < k; k0 += ROPS_KT) {
            const int64_t kt = k - k0 < ROPS_KT ? k - k0 : ROPS_KT;
            for (int64_t j = 0; j < rb; j++) rops_row_tile(w, r + j, k0, kt, panel[j]);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < rb; j++) {
                    const float d = dot(panel[j], x + i * k + k0, kt);
                    y[i * m + r + j] = k0 == 0 ? d : y[i * m + r + j] + d;
                }
        }
    }
}

/* The integer quants of weight block b of a q8_0 / q4_0 row, and its scale. */
static float block_quants(enum rops_type type, const uint8_t *row, int64_t b, int q[32]) {
    if (type == ROPS_TYPE_Q8_0) {
        const struct rops_block_q8_0 *blk = (const struct rops_block_q8_0 *)row + b;
        for (int j = 0; j < 32; j++) q[j] = blk->qs[j];
        return rcore_f16_to_f32(blk->d);
    }
    const struct rops_block_q4_0 *blk = (const struct rops_block_q4_0 *)row + b;
    for (int j = 0; j < 16; j++) {
        q[j] = (blk->qs[j] & 15) - 8;
        q[j + 16] = (blk->qs[j] >> 4) - 8;
    }
    return rcore_f16_to_f32(blk->d);
}

static void matmul_q8_rows_scalar(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    const int64_t m = a->w->n_rows;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)a->w->data + (size_t)r * a->w->row_bytes;
        for (int64_t i0 = 0; i0 < a->n; i0 += 3) { /* three inputs a pass over the row */
            const int64_t ni = a->n - i0 < 3 ? a->n - i0 : 3;
            float s[3] = {0, 0, 0};
            for (int64_t b = 0; b < a->nb; b++) {
                int q[32];
                const float dw = block_quants(a->w->type, row, a->b0 + b, q);
                for (int64_t i = 0; i < ni; i++) {
                    const struct rops_xq8 *xb = &a->xq[(i0 + i) * a->nb + b];
                    int32_t isum = 0; /* exact: 32 products of at most 128 * 127 */
                    for (int j = 0; j < 32; j++) isum += q[j] * xb->qs[j];
                    s[i] += dw * xb->d * (float)isum;
                }
            }
            for (int64_t i = i0; i < i0 + ni; i++)
                a->y[i * m + r] = a->accumulate ? a->y[i * m + r] + s[i - i0] : s[i - i0];
        }
    }
}

static void softplus_bias_scalar(float *x, const float *bias, int64_t n_rows, int64_t n_cols) {
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t c = 0; c < n_cols; c++)
            x[i * n_cols + c] = rops_softplus(x[i * n_cols + c] + bias[c]);
}

/* rmsnorm and layernorm: the sums in double, in order */
static void rmsnorm_scalar(const float *x, const float *weight, int64_t k, float eps, float *out) {
    double ss = 0.0;
    for (int64_t i = 0; i < k; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)k + eps));
    for (int64_t i = 0; i < k; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

static void layernorm_scalar(const float *x, const float *w, const float *b, int64_t k, float eps,
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

/* One value of rops_map's f; the forms (and so the bits) the models computed inline before. */
static inline float map_one(enum rops_map f, float v) {
    switch (f) {
    case ROPS_MAP_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    case ROPS_MAP_TANH:
        return tanhf(v);
    case ROPS_MAP_SILU:
        return rops_silu(v);
    case ROPS_MAP_RELU_SQ:
        return v > 0.0f ? v * v : 0.0f;
    case ROPS_MAP_EXP_NEG_EXP:
        return expf(-expf(v));
    case ROPS_MAP_RWKV7_DECAY:
        return expf(-0.606531f * (1.0f / (1.0f + expf(-v))));
    case ROPS_MAP_COUNT:
        break;
    }
    return v;
}

void rops_map_rows_scalar(enum rops_map f, float *x, int64_t ld, const float *bias, int64_t n_cols,
                          int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; i++) {
        float *row = x + i * ld;
        for (int64_t c = 0; c < n_cols; c++) row[c] = map_one(f, row[c] + (bias ? bias[c] : 0.0f));
    }
}

/* ---- Mamba's conv and scan ----------------------------------------------------------------- */

void rops_conv_channels_scalar(const struct rops_conv_args *a, int64_t c0, int64_t c1) {
    const int64_t n_prev = a->d_conv - 1, Di = a->d_inner;
    for (int64_t s = 0; s < a->n_seqs; s++) {
        const float *x = a->x + s * a->n_tok * a->x_stride;
        float *xc = a->xc + s * a->n_tok * Di;
        for (int64_t c = c0; c < c1; c++) {
            float *st = a->state + (s * Di + c) * n_prev; /* oldest first */
            const float *wc = a->w + c * a->d_conv;
            for (int64_t t = 0; t < a->n_tok; t++) {
                const float xt = x[t * a->x_stride + c];
                float sum = a->b[c];
                for (int64_t k = 0; k < n_prev; k++) sum += wc[k] * st[k];
                sum += wc[n_prev] * xt;
                xc[t * Di + c] = rops_silu(sum);
                /* slide the window: drop the oldest input, append this one */
                if (n_prev > 0) {
                    memmove(st, st + 1, sizeof(float) * (size_t)(n_prev - 1));
                    st[n_prev - 1] = xt;
                }
                float *dst = a->save ? a->save[s * a->n_tok + t] : NULL;
                if (dst) memcpy(dst + c * n_prev, st, sizeof(float) * (size_t)n_prev);
            }
        }
    }
}

void rops_scan_channels_scalar(const struct rops_scan_args *a, int64_t c0, int64_t c1) {
    const int64_t Di = a->d_inner, N = a->d_state;
    for (int64_t s = 0; s < a->n_seqs; s++) {
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *xt = a->x + t * Di, *dtt = a->dt + t * Di, *zt = a->z + t * a->z_stride;
            const float *Bt = a->B + t * a->bc_stride, *Ct = a->C + t * a->bc_stride;
            float *yt = a->y + t * Di;
            for (int64_t c = c0; c < c1; c++) {
                float *sc = a->state + (s * Di + c) * N;
                const float *Ac = a->A + c * N;
                const float dx = dtt[c] * xt[c];
                float acc = 0.0f;
                for (int64_t n = 0; n < N; n++) {
                    sc[n] = sc[n] * expf(dtt[c] * Ac[n]) + Bt[n] * dx;
                    acc += sc[n] * Ct[n];
                }
                yt[c] = (acc + a->D[c] * xt[c]) * rops_silu(zt[c]);
            }
            float *dst = a->save ? a->save[t] : NULL; /* t counts the tokens of all sequences */
            if (dst)
                memcpy(dst + c0 * N, a->state + (s * Di + c0) * N,
                       sizeof(float) * (size_t)((c1 - c0) * N));
        }
    }
}

/* ---- Mamba-2's scan ------------------------------------------------------------------------ */

void rops_scan2_heads_scalar(const struct rops_scan2_args *a, int64_t h0, int64_t h1) {
    const int64_t P = a->d_inner / a->n_head;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *x = a->xbc + t * a->xbc_stride;
            for (int64_t h = h0; h < h1; h++) {
                const int64_t g = h / (a->n_head / a->n_group);
                const float *B = x + a->d_inner + g * a->d_state,
                            *C = x + a->d_inner + a->n_group * a->d_state + g * a->d_state;
                const float dt = a->dt[t * a->n_head + h], dA = expf(dt * a->A[h]);
                for (int64_t p = 0; p < P; p++) {
                    const int64_t c = h * P + p;
                    float *sc = a->state + (s * a->d_inner + c) * a->d_state;
                    const float dx = dt * x[c];
                    float acc = 0.0f;
                    for (int64_t n = 0; n < a->d_state; n++) {
                        sc[n] = sc[n] * dA + B[n] * dx;
                        acc += sc[n] * C[n];
                    }
                    a->y[t * a->d_inner + c] = acc + a->D[h] * x[c];
                }
                float *dst = a->save ? a->save[t] : NULL;
                if (dst)
                    memcpy(dst + h * P * a->d_state,
                           a->state + (s * a->d_inner + h * P) * a->d_state,
                           sizeof(float) * (size_t)(P * a->d_state));
            }
        }
}

/* ---- the chunked scan's block kernels (ops_ssd.c) ------------------------------------------ */

/* ---- portable block kernels ---------------------------------------------------------------- */

static void ssd_mm_scalar(const struct rops_ssd_mm *p) {
    /* rows in tiles of 6, as the AVX2 kernel, so that tril_a / tril_c cover the same sums */
    for (int64_t i0 = 0; i0 < p->m; i0 += 6) {
        const int64_t mr = p->m - i0 < 6 ? p->m - i0 : 6;
        const int64_t kend = p->tril_a && i0 + mr < p->k ? i0 + mr : p->k;
        const int64_t nend = p->tril_c && i0 + mr < p->n ? i0 + mr : p->n;
        for (int64_t i = i0; i < i0 + mr; i++) {
            float *c = p->c + i * p->ldc;
            const float *a = p->a + i * p->lda;
            const float rs = p->rowscale ? p->rowscale[i] : 1.0f;
            for (int64_t j = 0; j < nend; j++) {
                float acc = 0.0f;
                for (int64_t kk = 0; kk < kend; kk++) acc += a[kk] * p->b[kk * p->ldb + j];
                c[j] = acc * rs + (p->accumulate ? p->beta * c[j] : 0.0f);
            }
        }
    }
}

static void ssd_decays_scalar(int64_t len, int64_t ld, const float *g, const float *cs,
                              const float *cl, const float *dts, float d, float *m, float *ein,
                              float *eout) {
    for (int64_t t = 0; t < len; t++) {
        for (int64_t s = 0; s < ld; s++)
            m[t * ld + s] =
                s <= t ? g[t * ld + s] * expf((cs[t] - cs[s]) + (cl[t] - cl[s])) * dts[s] : 0.0f;
        m[t * ld + t] += d;
    }
    for (int64_t s = 0; s < ld; s++) {
        ein[s] = expf(cs[s] + cl[s]);
        eout[s] = expf((cs[len - 1] - cs[s]) + (cl[len - 1] - cl[s])) * dts[s];
    }
}

static void ssd_scale_rows_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                                  const float *scale, float *dst, int64_t ldd) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[i * ldd + j] = scale[i] * src[i * lds + j];
}

static void ssd_transpose_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                                 float *dst, int64_t ldd) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * ldd + i] = src[i * lds + j];
}

/* ---- RWKV's WKV heads (ops_rwkv.c) ---------------------------------------------------------- */

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

static void wkv6_run_scalar(const struct rops_wkv_run *p) {
    rops_wkv_run_tokens(p, wkv6_head_scalar, NULL);
}

static void wkv7_run_scalar(const struct rops_wkv_run *p) {
    rops_wkv_run_tokens(p, NULL, wkv7_head_scalar);
}

/* ---- machine probes ------------------------------------------------------------------------ */

static double probe_fma_scalar(int64_t iters) {
    /* 8 independent chains of a*b+c: enough to fill the FMA pipes of a scalar core */
    volatile float seed = 1.0f;
    float a[8], b = 0.999999f, c = 1e-7f;
    for (int j = 0; j < 8; j++) a[j] = seed + (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++) a[j] = fmaf(a[j], b, c);
    float s = 0;
    for (int j = 0; j < 8; j++) s += a[j];
    seed = s;
    return (double)iters * 8 * 2;
}

static float probe_sum_scalar(const float *p, size_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return (s0 + s1) + (s2 + s3);
}

static void matmul_each_scalar(const struct rops_mat *w, const float *x, int64_t n, float *y,
                               int64_t r0, int64_t r1) {
    for (int64_t i = 0; i < n; i++)
        rops_matmul_rows_scalar(w, x + i * w->n_cols, 1, y + i * w->n_rows, r0, r1);
}

/* ---- attention (ops_attn.c) ---------------------------------------------------------------- */

/* Units [u0, u1) of rops_attention: per unit and pass of up to ROPS_ATTN_HB query heads, the
 * keys a tile at a time, each tile's visible keys scored against every head, then the online
 * softmax's step (a larger maximum rescales the sum and the output so far) and the values. */
static void attn_rows_scalar(const struct rops_attn_args *a, int64_t u0, int64_t u1) {
    const int64_t D = a->head_dim, G = a->n_head / a->n_head_kv;
    const size_t kb = rops_row_bytes(a->type_k, a->n_head_kv * D),
                 vb = rops_row_bytes(a->type_v, a->n_head_kv * D);
    float acc[ROPS_ATTN_HB][ROPS_ATTN_MAX_HEAD_DIM], s[ROPS_ATTN_HB][ROPS_ATTN_TILE];
    float m[ROPS_ATTN_HB], l[ROPS_ATTN_HB], row[ROPS_ATTN_MAX_HEAD_DIM];
    const uint8_t *kr[ROPS_ATTN_TILE], *vr[ROPS_ATTN_TILE];
    for (int64_t u = u0; u < u1; u++) {
        const int64_t i = u / a->n_head_kv, g = u % a->n_head_kv;
        const size_t koff = rops_row_bytes(a->type_k, g * D),
                     voff = rops_row_bytes(a->type_v, g * D);
        for (int64_t h0 = 0; h0 < G; h0 += ROPS_ATTN_HB) {
            const int nh = (int)(G - h0 < ROPS_ATTN_HB ? G - h0 : ROPS_ATTN_HB);
            const float *q = a->q + i * a->q_stride + (g * G + h0) * D;
            for (int h = 0; h < nh; h++) {
                m[h] = -INFINITY, l[h] = 0.0f;
                for (int64_t c = 0; c < D; c++) acc[h][c] = 0.0f;
            }
            for (int64_t j0 = 0; j0 < a->n_kv; j0 += ROPS_ATTN_TILE) {
                const int64_t j1 = j0 + ROPS_ATTN_TILE < a->n_kv ? j0 + ROPS_ATTN_TILE : a->n_kv;
                const int nt = rops_attn_visible(a, i, j0, j1, kb, vb, kr, vr);
                if (!nt) continue;
                for (int t = 0; t < nt; t++) {
                    rops_attn_head_f32(a->type_k, kr[t] + koff, D, row);
                    for (int h = 0; h < nh; h++) {
                        float dot = 0.0f;
                        for (int64_t c = 0; c < D; c++) dot += q[h * D + c] * row[c];
                        s[h][t] = a->scale * dot;
                    }
                }
                for (int h = 0; h < nh; h++) {
                    float mx = m[h];
                    for (int t = 0; t < nt; t++) mx = s[h][t] > mx ? s[h][t] : mx;
                    const float f = expf(m[h] - mx); /* 0 on the first tile seen (m = -inf) */
                    m[h] = mx;
                    l[h] *= f;
                    if (f != 1.0f)
                        for (int64_t c = 0; c < D; c++) acc[h][c] *= f;
                    for (int t = 0; t < nt; t++) {
                        s[h][t] = expf(s[h][t] - mx);
                        l[h] += s[h][t];
                    }
                }
                for (int t = 0; t < nt; t++) {
                    rops_attn_head_f32(a->type_v, vr[t] + voff, D, row);
                    for (int h = 0; h < nh; h++)
                        for (int64_t c = 0; c < D; c++) acc[h][c] += s[h][t] * row[c];
                }
            }
            for (int h = 0; h < nh; h++) {
                float *o = a->out + i * a->out_stride + (g * G + h0 + h) * D;
                const float r = l[h] > 0.0f ? 1.0f / l[h] : 0.0f; /* no key seen: zeros */
                for (int64_t c = 0; c < D; c++) o[c] = acc[h][c] * r;
            }
        }
    }
}

const struct rops_kernels rops_kernels_scalar = {
    .isa = ROPS_ISA_SCALAR,
    .matmul_rows = rops_matmul_rows_scalar,
    .matmul_each = matmul_each_scalar,
    .q8_rows = matmul_q8_rows_scalar,
    .qdot_rows = rops_qdot_rows_scalar,
    .quantize_x = quantize_x_scalar,
    .quantize_q8_K = rops_quantize_q8_K,
    .softplus_bias = softplus_bias_scalar,
    .layernorm = layernorm_scalar,
    .rmsnorm = rmsnorm_scalar,
    .map_rows = rops_map_rows_scalar,
    .conv_channels = rops_conv_channels_scalar,
    .scan_channels = rops_scan_channels_scalar,
    .scan2_heads = rops_scan2_heads_scalar,
    .ssd_mm = ssd_mm_scalar,
    .ssd_decays = ssd_decays_scalar,
    .ssd_scale_rows = ssd_scale_rows_scalar,
    .ssd_transpose = ssd_transpose_scalar,
    .wkv6_run = wkv6_run_scalar,
    .wkv7_run = wkv7_run_scalar,
    .attn_rows = attn_rows_scalar,
    .probe_fma = probe_fma_scalar,
    .probe_sum = probe_sum_scalar,
};
