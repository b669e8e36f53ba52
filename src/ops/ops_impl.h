/* What ops.c (dispatch, threading, portable kernels) and ops_avx2.c (vectorised kernels)
 * share. Each kernel here does one thread's share of a call. */
#ifndef RECUR_OPS_IMPL_H
#define RECUR_OPS_IMPL_H

#include <stdbool.h>

#include "ops.h"

enum { TYPE_F32 = 0, TYPE_F16 = 1, TYPE_Q4_0 = 2, TYPE_Q8_0 = 8, TYPE_BF16 = 30 };

/* The portable matmul's tiles: ROPS_RB weight rows, ROPS_KT columns (a multiple of the
 * 32-element quant block) converted to f32 at a time. ROPS_RB is also the grain of the
 * threads' row split for one to three inputs. */
#define ROPS_KT 1024
#define ROPS_RB 4
/* Inputs per pass over a thread's rows (AVX2, four or more inputs): they stay in L2 (96 x 1536
 * columns f32: 576 KiB of 1 MiB) while every row block passes over them; a multiple of the 6
 * inputs of the kernel. 96 rather than 48: the weights are converted half as often (f16
 * 3072 x 768 x 512 inputs: 186 -> 199 GFLOP/s); 144 overflowed L2 at 1536 columns. */
#define ROPS_NI 96
/* The AVX2 prompt matmul (four or more inputs): panels of 16 weight rows x ROPS_GEMM_KT
 * columns as f32 (16 KiB, within L1 beside the inputs' columns; 384 was as fast, 128 slower,
 * and the short row streams are prefetched by hand); threads split the rows in blocks of 8,
 * the smaller kernel's height. */
#define ROPS_GEMM_RB 16
#define ROPS_GEMM_KT 256

/* ggml's quantized blocks (32 weights each): value = d * q. */
struct rops_block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[32];
};
struct rops_block_q4_0 {
    uint16_t d;     /* f16 scale */
    uint8_t qs[16]; /* weight j < 16: low nibble of qs[j]; j >= 16: high nibble of qs[j-16]; */
};                  /* q = nibble - 8 */

/* A block of 32 inputs of a matmul with q8_0 / q4_0 weights, quantized as ggml's q8_0:
 * value = d * q, d held as the f32 value of its f16 rounding. */
struct rops_xq8 {
    float d;
    int8_t qs[32];
};
/* Quantizes n_blocks blocks of x (see rops_matmul); both paths give the same bits. */
void rops_quantize_x_scalar(const float *x, int64_t n_blocks, struct rops_xq8 *out);
void rops_quantize_x_avx2(const float *x, int64_t n_blocks, struct rops_xq8 *out);

/* Integer dot products for n <= 3 inputs with q8_0 / q4_0 weights, over the weight blocks
 * [b0, b0 + nb): rows [r0, r1) of y = W xq, or y += W xq when accumulate (a later tile of
 * columns). xq: n x nb blocks. */
struct rops_q8_args {
    const struct rops_mat *w;
    const struct rops_xq8 *xq;
    int64_t n, b0, nb;
    bool accumulate;
    float *y;
};
void rops_matmul_q8_rows_scalar(const struct rops_q8_args *a, int64_t r0, int64_t r1);
void rops_matmul_q8_rows_avx2(const struct rops_q8_args *a, int64_t r0, int64_t r1);

/* Rows [r0, r1) of y = W x (see rops_matmul). */
void rops_matmul_rows_scalar(const struct rops_mat *w, const float *x, int64_t n, float *y,
                             int64_t r0, int64_t r1);
void rops_matmul_rows_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1);

/* The arguments of rops_ssm_conv / rops_ssm_scan, for one thread's channels [c0, c1). */
struct rops_ssm_args {
    float *conv_state, *ssm_state;
    const float *x;
    int64_t x_stride;
    const float *conv_w, *conv_b;
    float *xc;
    const float *u; /* the scan's input: the conv's output */
    const float *dt, *A, *B, *C, *D, *z;
    int64_t bc_stride, z_stride;
    int64_t n_seqs, n_tok, d_inner, d_conv, d_state;
    float *y;
    float *const *save; /* per token (s * n_tok + t), NULL or where its state goes (ops.h) */
};
void rops_conv_channels_scalar(const struct rops_ssm_args *a, int64_t c0, int64_t c1);
void rops_conv_channels_avx2(const struct rops_ssm_args *a, int64_t c0, int64_t c1);
void rops_softplus_bias_avx2(float *x, const float *bias, int64_t n_rows, int64_t n_cols);
void rops_scan_channels_scalar(const struct rops_ssm_args *a, int64_t c0, int64_t c1);
void rops_scan_channels_avx2(const struct rops_ssm_args *a, int64_t c0, int64_t c1);

/* The arguments of rops_ssm_scan2 (ops.h), for one thread's heads [h0, h1). */
struct rops_scan2_args {
    float *ssm;
    const float *xbc, *dt, *A, *D;
    int64_t stride, n_seqs, n_tok, Di, N, H, G;
    float *y;
    float *const *save;
};
void rops_scan2_heads_scalar(const struct rops_scan2_args *a, int64_t h0, int64_t h1);
void rops_scan2_heads_avx2(const struct rops_scan2_args *a, int64_t h0, int64_t h1);

/* The block products of the chunked scan (ops_ssd.c), on one thread:
 *   acc[i][j] = sum_{kk < k} a[i * lda + kk] * b[kk * ldb + j]      i < m, j < n
 *   c[i * ldc + j] = acc[i][j] * (rowscale ? rowscale[i] : 1) + (accumulate ? beta * c : 0)
 * tril_a: a[i][kk] is zero for kk > i, so rows [i0, i0 + r) sum kk < i0 + r only.
 * tril_c: only c[i][j] with j <= i is wanted; rows [i0, i0 + r) compute the columns
 * < i0 + r, the others are left as they were. b rows are read for j < n only. */
struct rops_ssd_mm {
    int64_t m, n, k;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const float *rowscale;
    float beta;
    bool accumulate, tril_a, tril_c;
};
void rops_ssd_mm_scalar(const struct rops_ssd_mm *p);
void rops_ssd_mm_avx2(const struct rops_ssd_mm *p);

/* One head's decays over a chunk of len tokens, ld (a multiple of 8, >= len) the row length.
 * The prefix of the segment sums, sum_{tau <= t} dt_tau A, is cs[t] + cl[t] (a float and the
 * float of the rest: a difference of two prefixes is then exact to float precision however
 * large they grow); cs, cl and dts (dt) are readable up to ld, zero past len. With
 * e(t, s) = exp((cs[t] - cs[s]) + (cl[t] - cl[s])):
 *   m[t * ld + s] = g[t * ld + s] * e(t, s) * dts[s] (+ d where s == t) for s <= t,
 *   0 for t < s < ld (whatever g holds there, NaN included);
 *   ein[s] = exp(cs[s] + cl[s]),  eout[s] = e(len - 1, s) * dts[s]  for s < ld. */
void rops_ssd_decays_scalar(int64_t len, int64_t ld, const float *g, const float *cs,
                            const float *cl, const float *dts, float d, float *m, float *ein,
                            float *eout);
void rops_ssd_decays_avx2(int64_t len, int64_t ld, const float *g, const float *cs, const float *cl,
                          const float *dts, float d, float *m, float *ein, float *eout);

/* dst[i * ldd + j] = scale[i] * src[i * lds + j] for i < rows, j < cols. */
void rops_ssd_scale_rows_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                                const float *scale, float *dst, int64_t ldd);
void rops_ssd_scale_rows_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds,
                              const float *scale, float *dst, int64_t ldd);

/* dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols. */
void rops_ssd_transpose_scalar(int64_t rows, int64_t cols, const float *src, int64_t lds,
                               float *dst, int64_t ldd);
void rops_ssd_transpose_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                             int64_t ldd);

/* Probe bodies: flops done by iters rounds of the FMA loop; a sum over n_floats floats (the
 * result keeps the compiler from skipping the reads). */
double rops_probe_fma_scalar(int64_t iters);
double rops_probe_fma_avx2(int64_t iters);
float rops_probe_sum_scalar(const float *p, size_t n_floats);
float rops_probe_sum_avx2(const float *p, size_t n_floats);

/* True when this build has the AVX2 kernels (x86-64 with a compiler that takes -mavx2). */
bool rops_have_avx2_kernels(void);

#endif /* RECUR_OPS_IMPL_H */
