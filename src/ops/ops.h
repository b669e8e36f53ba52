/*
 * ops: the numeric kernels models are made of, behind plain C signatures so that faster
 * versions (threads, SIMD, quantized weights) can replace them one at a time.
 *
 * Activations are f32, row-major: a batch of n vectors of length k is x[n][k]. Weights are
 * matrices in the file's own type (f32, f16, bf16), read in place from the model file.
 * Nothing here allocates, except where a scratch row is passed in, and nothing fails: shapes
 * are checked when the model is loaded.
 */
#ifndef RECUR_OPS_H
#define RECUR_OPS_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix of n_rows rows of n_cols elements (GGUF {n_cols, n_rows}). */
struct rops_mat {
    const void *data;
    uint32_t type; /* ggml type: 0 f32, 1 f16, 30 bf16 */
    int64_t n_cols;
    int64_t n_rows;
    size_t row_bytes;
};

/* True when the kernels can use weights of this ggml type. */
int rops_type_supported(uint32_t type);

/* Row r of W, converted to f32 (n_cols values). */
void rops_get_row(const struct rops_mat *w, int64_t r, float *out);

/* y[i][r] = sum_c W[r][c] * x[i][c] for i < n (x: n x n_cols, y: n x n_rows).
 * scratch: n_cols floats (a weight row converted once and used for all n inputs). */
void rops_matmul(const struct rops_mat *w, const float *x, int64_t n, float *y, float *scratch);

/* out = x / sqrt(mean(x^2) + eps) * weight (weight NULL: no scale). out may equal x. */
void rops_rmsnorm(const float *x, const float *weight, int64_t k, float eps, float *out);

float rops_silu(float x);
float rops_softplus(float x);

/*
 * Mamba's causal depthwise convolution over one sequence's run of tokens.
 * state: (d_conv-1) previous inputs per channel, channel-major (state[c*(d_conv-1) + k],
 * oldest first), updated in place to the last d_conv-1 inputs.
 * x: n_tok x d_inner inputs (row stride x_stride); out: n_tok x d_inner (stride out_stride),
 * out[t][c] = silu(sum_k w[c*d_conv + k] * window_t[k][c] + b[c]), where window_t is the d_conv
 * inputs ending at token t.
 */
void rops_ssm_conv(float *state, const float *x, int64_t x_stride, int64_t n_tok, int64_t d_inner,
                   int64_t d_conv, const float *w, const float *b, float *out, int64_t out_stride);

/*
 * Mamba's selective scan over one sequence's run of tokens, with the output gate.
 * s: d_inner x d_state state (s[c*d_state + n]), updated in place. Per token t:
 *   s[c][n] = s[c][n] * exp(dt[c] * A[c][n]) + B[n] * x[c] * dt[c]
 *   y[c] = (sum_n s[c][n] * C[n] + D[c] * x[c]) * silu(z[c])
 * x, dt, z, y: n_tok rows of d_inner (row strides given); B, C: n_tok rows of d_state
 * (stride bc_stride).
 */
void rops_ssm_scan(float *s, const float *x, int64_t x_stride, const float *dt, int64_t dt_stride,
                   const float *A, const float *B, const float *C, int64_t bc_stride,
                   const float *D, const float *z, int64_t z_stride, int64_t n_tok, int64_t d_inner,
                   int64_t d_state, float *y, int64_t y_stride);

#endif /* RECUR_OPS_H */
