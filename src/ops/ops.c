/* Portable C kernels (see ops.h). Written for clarity first; the speed issue replaces the hot
 * ones with threaded and vectorised versions that must give the same results within the
 * tolerances of the model tests. */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "../core/core.h"

enum { TYPE_F32 = 0, TYPE_F16 = 1, TYPE_BF16 = 30 };

int rops_type_supported(uint32_t type) {
    return type == TYPE_F32 || type == TYPE_F16 || type == TYPE_BF16;
}

void rops_get_row(const struct rops_mat *w, int64_t r, float *out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    switch (w->type) {
    case TYPE_F32:
        rcore_row_to_f32(RCORE_TYPE_F32, out, row, (size_t)w->n_cols);
        break;
    case TYPE_F16:
        rcore_row_to_f32(RCORE_TYPE_F16, out, row, (size_t)w->n_cols);
        break;
    case TYPE_BF16:
        rcore_row_to_f32(RCORE_TYPE_BF16, out, row, (size_t)w->n_cols);
        break;
    default:
        memset(out, 0, sizeof(float) * (size_t)w->n_cols);
        break;
    }
}

static float dot(const float *a, const float *b, int64_t n) {
    /* four partial sums: shorter dependency chains, and a summation order the compiler may
       vectorise without -ffast-math */
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

void rops_matmul(const struct rops_mat *w, const float *x, int64_t n, float *y, float *scratch) {
    const int64_t k = w->n_cols, m = w->n_rows;
    for (int64_t r = 0; r < m; r++) {
        const float *row;
        if (w->type == TYPE_F32) {
            row = (const float *)((const uint8_t *)w->data + (size_t)r * w->row_bytes);
        } else {
            rops_get_row(w, r, scratch);
            row = scratch;
        }
        for (int64_t i = 0; i < n; i++) y[i * m + r] = dot(row, x + i * k, k);
    }
}

void rops_rmsnorm(const float *x, const float *weight, int64_t k, float eps, float *out) {
    double ss = 0.0;
    for (int64_t i = 0; i < k; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)k + eps));
    for (int64_t i = 0; i < k; i++) out[i] = x[i] * scale * (weight ? weight[i] : 1.0f);
}

float rops_silu(float x) {
    return x / (1.0f + expf(-x));
}

float rops_softplus(float x) {
    /* log(1 + e^x) without overflow for large x or loss for very negative x */
    return x > 20.0f ? x : log1pf(expf(x));
}

void rops_ssm_conv(float *state, const float *x, int64_t x_stride, int64_t n_tok, int64_t d_inner,
                   int64_t d_conv, const float *w, const float *b, float *out, int64_t out_stride) {
    const int64_t n_prev = d_conv - 1;
    for (int64_t c = 0; c < d_inner; c++) {
        float *st = state + c * n_prev; /* oldest first */
        const float *wc = w + c * d_conv;
        for (int64_t t = 0; t < n_tok; t++) {
            const float xt = x[t * x_stride + c];
            float sum = b[c];
            for (int64_t k = 0; k < n_prev; k++) sum += wc[k] * st[k];
            sum += wc[n_prev] * xt;
            out[t * out_stride + c] = rops_silu(sum);
            /* slide the window: drop the oldest input, append this one */
            if (n_prev > 0) {
                memmove(st, st + 1, sizeof(float) * (size_t)(n_prev - 1));
                st[n_prev - 1] = xt;
            }
        }
    }
}

void rops_ssm_scan(float *s, const float *x, int64_t x_stride, const float *dt, int64_t dt_stride,
                   const float *A, const float *B, const float *C, int64_t bc_stride,
                   const float *D, const float *z, int64_t z_stride, int64_t n_tok, int64_t d_inner,
                   int64_t d_state, float *y, int64_t y_stride) {
    for (int64_t t = 0; t < n_tok; t++) {
        const float *xt = x + t * x_stride, *dtt = dt + t * dt_stride, *zt = z + t * z_stride;
        const float *Bt = B + t * bc_stride, *Ct = C + t * bc_stride;
        float *yt = y + t * y_stride;
        for (int64_t c = 0; c < d_inner; c++) {
            float *sc = s + c * d_state;
            const float *Ac = A + c * d_state;
            const float dx = dtt[c] * xt[c];
            float acc = 0.0f;
            for (int64_t n = 0; n < d_state; n++) {
                sc[n] = sc[n] * expf(dtt[c] * Ac[n]) + Bt[n] * dx;
                acc += sc[n] * Ct[n];
            }
            yt[c] = (acc + D[c] * xt[c]) * rops_silu(zt[c]);
        }
    }
}
