/* What the dispatchers (ops.c, ops_rwkv.c, ops_ssd.c, ops_attn.c: threading, splitting the work)
 * and the kernels of each instruction set (ops_scalar.c, ops_avx2.c, ops_avxvnni.c, ops_avx512.c,
 * and the x86 bodies they include from x86/) share. Each kernel does one thread's share of a call;
 * each instruction set has a table of its kernels (struct rops_kernels), which the dispatchers call
 * through. Adding an instruction set is a new file with its table, and an entry in ops_probe.c. */
#ifndef RECUR_OPS_IMPL_H
#define RECUR_OPS_IMPL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"
#include "ops.h"
#include "ops_quants.h"

/* Weight c of a row of a float type (f32, f16, bf16) as f32: the vector kernels' columns past
 * their last whole vector. */
static inline float rops_weight_at(enum rops_type type, const uint8_t *row, int64_t c) {
    switch (type) {
    case ROPS_TYPE_F32:
        return ((const float *)row)[c];
    case ROPS_TYPE_F16:
        return rcore_f16_to_f32(((const uint16_t *)row)[c]);
    default:
        return rcore_bf16_to_f32(((const uint16_t *)row)[c]);
    }
}

/* How far ahead the four-to-seven-input gemv kernels (AVX2, AVX-512) prefetch their stream of
 * weight rows, a line per line consumed. With four or more FMAs per weight a core does not run
 * far enough ahead of its loads to keep the memory busy on its own (4 inputs from DRAM, one
 * thread of a Zen 4: 13 GB/s, against 22 in L2 and 26 for one input). 1 KiB ahead: 4 to 7
 * sequences +5-20% on 2 threads, AVX2 and AVX-512 alike, where whole rows a few rows ahead had
 * cost for 4 and paid less for 5-7; 2 KiB was as good, 512 B less (bench/RESULTS.md, issue 21). */
#define ROPS_GEMV_PF_AHEAD 1024

/* The token-order conv kernels' (AVX2, AVX-512) scalar parts, for a thread's channels
 * [c0, c0 + nc). rops_conv_lag_begin: lag k's weights at w + k * ld (a->w_lag's, or made
 * lag-major here), and room for a sequence's state inputs lag-major (prev + k * nc, oldest
 * first): in the caller's stack buffer (stack_floats of it) when they fit, else allocated.
 * False when out of memory (the caller takes the plain path); rops_conv_lag_end frees. A
 * token of one sequence (generation) then costs no allocation and no pass over the weights. */
struct rops_conv_lag {
    const float *w;
    int64_t ld;
    float *prev;
    float *block; /* allocated, or NULL */
};

static inline bool rops_conv_lag_begin(const struct rops_conv_args *a, int64_t c0, int64_t nc,
                                       float *stack, size_t stack_floats, struct rops_conv_lag *l) {
    const int64_t K = a->d_conv;
    const size_t need = (size_t)((a->w_lag ? 0 : K) + K - 1) * (size_t)nc;
    l->block = need > stack_floats ? malloc(sizeof(float) * need) : NULL;
    float *buf = need > stack_floats ? l->block : stack;
    if (!buf) return false;
    if (a->w_lag) {
        l->w = a->w_lag + c0;
        l->ld = a->d_inner;
        l->prev = buf;
        return true;
    }
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < nc; j++) buf[k * nc + j] = a->w[(c0 + j) * K + k];
    l->w = buf;
    l->ld = nc;
    l->prev = buf + K * nc;
    return true;
}

static inline void rops_conv_lag_end(struct rops_conv_lag *l) {
    free(l->block);
}

/* Floats of the conv kernels' stack buffer: a token's window of 1536 channels, d_conv 4, with
 * its weights (24 KiB). */
#define ROPS_CONV_STACK 6144

/* Sequence s's state inputs into prev (lag-major), and its inputs at channel c0. Channels
 * [j0, nc) of the thread's: a kernel that turns whole vectors of them itself passes the first
 * one it left. */
static inline const float *rops_conv_seq_begin(const struct rops_conv_args *a, int64_t s,
                                               int64_t c0, int64_t nc, int64_t j0, float *prev) {
    const int64_t n_prev = a->d_conv - 1;
    const float *st = a->state + (s * a->d_inner + c0) * n_prev;
    for (int64_t k = 0; k < n_prev; k++)
        for (int64_t j = j0; j < nc; j++) prev[k * nc + j] = st[j * n_prev + k];
    return a->x + s * a->n_tok * a->x_stride + c0;
}

/* The inputs of token u (u >= -(d_conv - 1)) of the sequence whose inputs are x. */
static inline const float *rops_conv_row(const struct rops_conv_args *a, const float *x,
                                         const float *prev, int64_t nc, int64_t u) {
    return u >= 0 ? x + u * a->x_stride : prev + (u + a->d_conv - 1) * nc;
}

/* After token t: its window into a->save's entry, if it has one (channel-major, as the state);
 * in[k] holds the inputs at lag d_conv - 1 - k. */
static inline void rops_conv_save(const struct rops_conv_args *a, int64_t s, int64_t t, int64_t c0,
                                  int64_t nc, const float *const *in) {
    const int64_t n_prev = a->d_conv - 1;
    float *dst = a->save ? a->save[s * a->n_tok + t] : NULL;
    if (dst)
        for (int64_t k = 0; k < n_prev; k++)
            for (int64_t j = 0; j < nc; j++) dst[(c0 + j) * n_prev + k] = in[k + 1][j];
}

/* The state after the sequence's last token (prev is a copy: the state may be written over),
 * channels [j0, nc) as rops_conv_seq_begin's. */
static inline void rops_conv_seq_end(const struct rops_conv_args *a, int64_t s, int64_t c0,
                                     int64_t nc, int64_t j0, const float *x, const float *prev) {
    const int64_t n_prev = a->d_conv - 1;
    float *st = a->state + (s * a->d_inner + c0) * n_prev;
    for (int64_t k = 0; k < n_prev; k++) {
        const float *row = rops_conv_row(a, x, prev, nc, a->n_tok - n_prev + k);
        for (int64_t j = j0; j < nc; j++) st[j * n_prev + k] = row[j];
    }
}

/* The portable matmul's tiles: ROPS_RB weight rows, ROPS_KT columns (a multiple of the
 * 32-element quant block) converted to f32 at a time. ROPS_RB is also the grain of the
 * threads' row split for one to three inputs. */
#define ROPS_KT 1024
#define ROPS_RB 4
/* Inputs per pass over a thread's rows (AVX2 and AVX-512, four or more inputs): they stay in L2
 * (96 x 1536 columns f32: 576 KiB of 1 MiB) while every row block passes over them; a multiple
 * of the 6 inputs of the AVX2 kernel and the 8 of the AVX-512 one. 96 rather than 48: the weights
 * are converted half as often (f16 3072 x 768 x 512 inputs: 186 -> 199 GFLOP/s); 144 overflowed L2
 * at 1536 columns. */
#define ROPS_NI 96
/* The AVX2 prompt matmul (four or more inputs): panels of 16 weight rows x ROPS_GEMM_KT
 * columns as f32 (16 KiB, within L1 beside the inputs' columns; 384 was as fast, 128 slower,
 * and the short row streams are prefetched by hand); threads split the rows in blocks of 8,
 * the smaller kernel's height. */
#define ROPS_GEMM_RB 16
#define ROPS_GEMM_KT 256

/* A block of 32 inputs of a matmul with q8_0 / q4_0 weights, quantized as ggml's q8_0:
 * value = d * q, d held as the f32 value of its f16 rounding. */
struct rops_xq8 {
    float d;
    int8_t qs[32];
};
/* Integer dot products for n inputs with q8_0 / q4_0 weights, over the weight blocks
 * [b0, b0 + nb): rows [r0, r1) of y = W xq, or y += W xq when accumulate (a later tile of
 * columns). xq: n x nb blocks. The block chain: an input's sum starts at 0 and adds
 * (d_w d_x) isum a block, in block order (isum the block's exact integer sum; each product
 * rounded, nothing fused), then y = (accumulate ? y + sum : sum); on an instruction set, every
 * way of computing the integers then gives the same bits for any n and rows. */
struct rops_q8_args {
    const struct rops_mat *w;
    const struct rops_xq8 *xq;
    int64_t n, b0, nb;
    bool accumulate;
    float *y;
};

/* The tile of ops_qmatmul.c's block types' products (rops_qdot_args' kt): the vector kernels'
 * float sums restart a tile at a time (x86/qdot_k.h, x86/qgemm_k.h), so the tiles must be the
 * same for any number of inputs, and a prompt's panel of weight rows holds one tile. */
#define ROPS_QMM_TILE 1024

/* The products of ops_qmatmul.c's block types (rops_qmatmul_type): columns [c0, c0 + kt) of the
 * rows of w (c0 and kt whole blocks) against n inputs quantized to the type's partner
 * (rops_dot_partner), input i's blocks at xq + i * xq_stride (the first of them column c0's);
 * y[i * y_stride + r] = (accumulate ? y[i * y_stride + r] : 0) + the sum. kt is at most
 * ROPS_QMM_TILE, or, for one input, a whole row (c0 0): the sums are then taken a tile at a
 * time and added in order, the bits of one call a tile (rops_qdot_by_tiles). */
struct rops_qdot_args {
    const struct rops_mat *w;
    int64_t c0, kt;
    const uint8_t *xq;
    size_t xq_stride;
    int64_t n;
    float *y;
    int64_t y_stride;
    bool accumulate;
};

/* A kernel table's qdot_rows. */
typedef void (*rops_qdot_fn)(const struct rops_qdot_args *a, int64_t r0, int64_t r1);

/* fn over a's columns a tile of ROPS_QMM_TILE at a time (a->c0 a multiple of it, a->kt any
 * number of whole blocks), each tile's sums added to the ones before: how a product wider than
 * a tile is summed, whoever takes it. For a kernel that takes a tile a call (rops_qdot_args). */
void rops_qdot_by_tiles(rops_qdot_fn fn, const struct rops_qdot_args *a, int64_t r0, int64_t r1);

/* The scalar table's qdot_rows: rops_qdot_inputs a row at a time (the vector tables' fallback
 * for a type they have no kernel of their own for). */
void rops_qdot_rows_scalar(const struct rops_qdot_args *a, int64_t r0, int64_t r1);

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

/* A run of n tokens of one head of rops_wkv6 / rops_wkv7 (one sequence's, in order): the head's
 * state S (hs x hs, in the layout of ops.h), updated; token t's vectors r, k, v, w (and a, b) at
 * + t * ld, its output at y + t * ld; u the head's bonus (WKV6). save NULL, or per token NULL or
 * the whole state to write after it, this head's part at save[t] + save_off. */
struct rops_wkv_run {
    float *S;
    const float *r, *k, *v, *w;
    const float *a, *b; /* WKV7 */
    const float *u;     /* WKV6 */
    int64_t ld, n, hs;
    float *y;
    float *const *save;
    int64_t save_off;
    /* rops_exec.one_order: the per-token kernel for every run, so that a token's bits do not
       depend on the tokens that share its run (the run kernels keep a scaled state) */
    bool one_order;
};

/* A WKV kernel of one token (the instruction sets' per-token forms). */
typedef void (*rops_wkv6_tok_fn)(float *S, const float *r, const float *k, const float *v,
                                 const float *w, const float *u, int64_t hs, float *y);
typedef void (*rops_wkv7_tok_fn)(float *S, const float *r, const float *w, const float *k,
                                 const float *v, const float *a, const float *b, int64_t hs,
                                 float *y);

/* A run by one of those a token at a time (f6 for WKV6, else f7), the snapshots copied. */
static inline void rops_wkv_run_tokens(const struct rops_wkv_run *p, rops_wkv6_tok_fn f6,
                                       rops_wkv7_tok_fn f7) {
    for (int64_t t = 0; t < p->n; t++) {
        const int64_t o = t * p->ld;
        if (f6)
            f6(p->S, p->r + o, p->k + o, p->v + o, p->w + o, p->u, p->hs, p->y + o);
        else
            f7(p->S, p->r + o, p->w + o, p->k + o, p->v + o, p->a + o, p->b + o, p->hs, p->y + o);
        float *dst = p->save ? p->save[t] : NULL;
        if (dst) memcpy(dst + p->save_off, p->S, sizeof(float) * (size_t)(p->hs * p->hs));
    }
}

/* ---- attention (ops_attn.c) ---- */

/* Keys per tile of the attention kernels: a tile's scores per query head on the stack, and its
 * keys and values converted once for the heads of a group (the vector kernels' frame is then
 * about 50 KiB: the tile's heads, the group's queries and outputs, at ROPS_ATTN_MAX_HEAD_DIM). */
#define ROPS_ATTN_TILE 32
/* Query heads of a kv group done per pass over the keys (a larger group takes more passes):
 * their outputs, ROPS_ATTN_HB x ROPS_ATTN_MAX_HEAD_DIM floats, stay in L1. */
#define ROPS_ATTN_HB 8

/* The attention kernels' unit of work is a (query, kv head) pair, u = i * n_head_kv + g: the
 * n_head / n_head_kv query heads of kv head g for query i. */

/* The keys in [j0, j1) that query i sees (rops_attention's rule): their K and V rows' first
 * bytes into kr, vr (rows of kb, vb bytes), in key order; returns how many. The page and row
 * are stepped along rather than divided out per key. */
static inline int rops_attn_visible(const struct rops_attn_args *a, int64_t i, int64_t j0,
                                    int64_t j1, size_t kb, size_t vb, const uint8_t **kr,
                                    const uint8_t **vr) {
    const int32_t seq = a->q_seq ? a->q_seq[i] : 0, pos = a->q_pos[i];
    int64_t pg = j0 / a->page_rows, r = j0 % a->page_rows;
    int n = 0;
    for (int64_t j = j0; j < j1; j++) {
        if ((!a->kv_seq || a->kv_seq[j] == seq) && a->kv_pos[j] <= pos) {
            kr[n] = (const uint8_t *)a->k_pages[pg] + (size_t)r * kb;
            vr[n++] = (const uint8_t *)a->v_pages[pg] + (size_t)r * vb;
        }
        if (++r == a->page_rows) r = 0, pg++;
    }
    return n;
}

/* One K or V head's D values of type (F32, F16 or Q8_0; Q8_0 whole blocks) as f32. */
static inline void rops_attn_head_f32(enum rops_type type, const uint8_t *p, int64_t D,
                                      float *out) {
    if (type == ROPS_TYPE_F32) {
        memcpy(out, p, sizeof(float) * (size_t)D);
    } else if (type == ROPS_TYPE_F16) {
        for (int64_t c = 0; c < D; c++) out[c] = rcore_f16_to_f32(((const uint16_t *)p)[c]);
    } else {
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)p;
        for (int64_t c = 0; c < D; c += 32, b++) {
            const float d = rcore_f16_to_f32(b->d);
            for (int e = 0; e < 32; e++) out[c + e] = d * (float)b->qs[e];
        }
    }
}

/* One instruction set's kernels. Every entry is set (an instruction set without its own kernel
 * for a job takes a narrower set's); the arguments are those of the public call (ops.h) unless
 * said otherwise. */
struct rops_block_q8_K; /* ops_quants.h */

struct rops_kernels {
    enum rops_isa isa;
    /* Rows [r0, r1) of y = W x (see rops_matmul), float weights (block weights take q8_rows
       and qdot_rows). */
    void (*matmul_rows)(const struct rops_mat *w, const float *x, int64_t n, float *y, int64_t r0,
                        int64_t r1);
    /* matmul_rows with each input summed as matmul_rows sums it alone (n = 1): the same bits
       for an input whatever the others (rops_exec.one_order), faster than n calls. */
    void (*matmul_each)(const struct rops_mat *w, const float *x, int64_t n, float *y, int64_t r0,
                        int64_t r1);
    void (*q8_rows)(const struct rops_q8_args *a, int64_t r0, int64_t r1);
    /* Rows [r0, r1) of the other block types (struct rops_qdot_args). An input's sums are the
       same bits whatever n, r0 and r1 are: a token's logits do not depend on the batch. */
    void (*qdot_rows)(const struct rops_qdot_args *a, int64_t r0, int64_t r1);
    /* Quantizes n_blocks blocks of x (see rops_matmul): every table gives the same bits. */
    void (*quantize_x)(const float *x, int64_t n_blocks, struct rops_xq8 *out);
    /* rops_quantize_q8_K (the K types' inputs, n a multiple of 256): the same bits on every
       table. */
    void (*quantize_q8_K)(const float *x, struct rops_block_q8_K *y, int64_t n);
    void (*softplus_bias)(float *x, const float *bias, int64_t n_rows, int64_t n_cols);
    /* rops_layernorm and rops_rmsnorm of one vector */
    void (*layernorm)(const float *x, const float *w, const float *b, int64_t k, float eps,
                      float *out);
    void (*rmsnorm)(const float *x, const float *weight, int64_t k, float eps, float *out);
    /* rops_map on the rows [r0, r1) */
    void (*map_rows)(enum rops_map f, float *x, int64_t ld, const float *bias, int64_t n_cols,
                     int64_t r0, int64_t r1);
    /* Mamba's conv and scan for the channels [c0, c1) */
    void (*conv_channels)(const struct rops_conv_args *a, int64_t c0, int64_t c1);
    void (*scan_channels)(const struct rops_scan_args *a, int64_t c0, int64_t c1);
    /* Mamba-2's scan for the heads [h0, h1) */
    void (*scan2_heads)(const struct rops_scan2_args *a, int64_t h0, int64_t h1);
    /* The chunked scan's pieces (ops_ssd.c). decays: one head's decays over a chunk of len
     * tokens, ld (a multiple of 8, >= len) the row length. The prefix of the segment sums,
     * sum_{tau <= t} dt_tau A, is cs[t] + cl[t] (a float and the float of the rest: a difference
     * of two prefixes is then exact to float precision however large they grow); cs, cl and dts
     * (dt) are readable up to ld, zero past len. With e(t, s) = exp((cs[t] - cs[s]) + (cl[t] -
     * cl[s])):
     *   m[t * ld + s] = g[t * ld + s] * e(t, s) * dts[s] (+ d where s == t) for s <= t,
     *   0 for t < s < ld (whatever g holds there, NaN included);
     *   ein[s] = exp(cs[s] + cl[s]),  eout[s] = e(len - 1, s) * dts[s]  for s < ld.
     * scale_rows: dst[i * ldd + j] = scale[i] * src[i * lds + j] for i < rows, j < cols.
     * transpose: dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols. */
    void (*ssd_mm)(const struct rops_ssd_mm *p);
    void (*ssd_decays)(int64_t len, int64_t ld, const float *g, const float *cs, const float *cl,
                       const float *dts, float d, float *m, float *ein, float *eout);
    void (*ssd_scale_rows)(int64_t rows, int64_t cols, const float *src, int64_t lds,
                           const float *scale, float *dst, int64_t ldd);
    void (*ssd_transpose)(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                          int64_t ldd);
    /* A run of tokens of one WKV head (ops_rwkv.c; see struct rops_wkv_run). */
    void (*wkv6_run)(const struct rops_wkv_run *run);
    void (*wkv7_run)(const struct rops_wkv_run *run);
    /* rops_attention's (query, kv head) units [u0, u1) (see ROPS_ATTN_TILE) */
    void (*attn_rows)(const struct rops_attn_args *a, int64_t u0, int64_t u1);
    /* Probe bodies: flops done by iters rounds of the FMA loop; a sum over n_floats floats
       (the result keeps the compiler from skipping the reads). */
    double (*probe_fma)(int64_t iters);
    float (*probe_sum)(const float *p, size_t n_floats);
};

/* The tables: the portable one always; the others NULL when this build has no such kernels
 * (another architecture, or a compiler without the flags). ops_probe.c checks the CPU. */
extern const struct rops_kernels rops_kernels_scalar;
const struct rops_kernels *rops_kernels_avx2(void);
const struct rops_kernels *rops_kernels_avxvnni(void);
const struct rops_kernels *rops_kernels_avx512(void);
/* The table of isa (one this CPU runs: see rops_isa_runs); the portable one for another. */
const struct rops_kernels *rops_kernels_of(enum rops_isa isa);

/* Portable kernels the vector ones fall back on for shapes they do not take (ops_scalar.c),
 * and the AVX2 kernels the AVX-512 table reuses (ops_avx2.c). */
void rops_matmul_rows_scalar(const struct rops_mat *w, const float *x, int64_t n, float *y,
                             int64_t r0, int64_t r1);
void rops_map_rows_scalar(enum rops_map f, float *x, int64_t ld, const float *bias, int64_t n_cols,
                          int64_t r0, int64_t r1);
void rops_conv_channels_scalar(const struct rops_conv_args *a, int64_t c0, int64_t c1);
void rops_scan_channels_scalar(const struct rops_scan_args *a, int64_t c0, int64_t c1);
void rops_scan2_heads_scalar(const struct rops_scan2_args *a, int64_t h0, int64_t h1);
/* One q8_0 block of x as ggml's reference quantizer makes it: the quants into qs, the scale
 * (f16) returned. */
uint16_t rops_q8_block(const float *x, int8_t *qs);
/* Columns [c0, c0 + kt) of row r of w as f32; for the block types c0 and kt whole blocks. */
void rops_row_tile(const struct rops_mat *w, int64_t r, int64_t c0, int64_t kt, float *out);

/* The AVX2 kernels (ops_avx2.c, compiled for AVX2 + FMA + F16C; most of them x86/kernels.inc's
 * body at 8 lanes): the entries of its table, which the AVX-VNNI and AVX-512 tables take where
 * they have no kernel of their own. */
void rops_matmul_rows_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1);
void rops_matmul_each_avx2(const struct rops_mat *w, const float *x, int64_t n, float *y,
                           int64_t r0, int64_t r1);
void rops_quantize_x_avx2(const float *x, int64_t n_blocks, struct rops_xq8 *out);
void rops_quantize_q8_K_avx2(const float *x, struct rops_block_q8_K *y, int64_t n);
void rops_softplus_bias_avx2(float *x, const float *bias, int64_t n_rows, int64_t n_cols);
void rops_layernorm_avx2(const float *x, const float *w, const float *b, int64_t k, float eps,
                         float *out);
void rops_rmsnorm_avx2(const float *x, const float *weight, int64_t k, float eps, float *out);
void rops_map_rows_avx2(enum rops_map f, float *x, int64_t ld, const float *bias, int64_t n_cols,
                        int64_t r0, int64_t r1);
void rops_conv_channels_avx2(const struct rops_conv_args *a, int64_t c0, int64_t c1);
void rops_scan_channels_avx2(const struct rops_scan_args *a, int64_t c0, int64_t c1);
void rops_scan2_heads_avx2(const struct rops_scan2_args *a, int64_t h0, int64_t h1);
void rops_ssd_mm_avx2(const struct rops_ssd_mm *p);
void rops_ssd_decays_avx2(int64_t len, int64_t ld, const float *g, const float *cs, const float *cl,
                          const float *dts, float d, float *m, float *ein, float *eout);
void rops_ssd_scale_rows_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds,
                              const float *scale, float *dst, int64_t ldd);
void rops_ssd_transpose_avx2(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                             int64_t ldd);
void rops_wkv6_run_avx2(const struct rops_wkv_run *run);
void rops_wkv7_run_avx2(const struct rops_wkv_run *run);
void rops_attn_rows_avx2(const struct rops_attn_args *a, int64_t u0, int64_t u1);
double rops_probe_fma_avx2(int64_t iters);
float rops_probe_sum_avx2(const float *p, size_t n_floats);

/* The AVX2 table with instruction set isa and q8_rows, qdot_rows as its integer dots:
 * ops_avx2.c's (maddubs) and ops_avxvnni.c's (vpdpbusd), the rest the same kernels. */
#define ROPS_KERNELS_AVX2(isa_, q8_rows_, qdot_rows_)                                              \
    {                                                                                              \
        .isa = isa_, .matmul_rows = rops_matmul_rows_avx2, .matmul_each = rops_matmul_each_avx2,   \
        .q8_rows = q8_rows_, .qdot_rows = qdot_rows_, .quantize_x = rops_quantize_x_avx2,          \
        .quantize_q8_K = rops_quantize_q8_K_avx2, .softplus_bias = rops_softplus_bias_avx2,        \
        .layernorm = rops_layernorm_avx2, .rmsnorm = rops_rmsnorm_avx2,                            \
        .map_rows = rops_map_rows_avx2, .conv_channels = rops_conv_channels_avx2,                  \
        .scan_channels = rops_scan_channels_avx2, .scan2_heads = rops_scan2_heads_avx2,            \
        .ssd_mm = rops_ssd_mm_avx2, .ssd_decays = rops_ssd_decays_avx2,                            \
        .ssd_scale_rows = rops_ssd_scale_rows_avx2, .ssd_transpose = rops_ssd_transpose_avx2,      \
        .wkv6_run = rops_wkv6_run_avx2, .wkv7_run = rops_wkv7_run_avx2,                            \
        .attn_rows = rops_attn_rows_avx2, .probe_fma = rops_probe_fma_avx2,                        \
        .probe_sum = rops_probe_sum_avx2,                                                          \
    }

#endif /* RECUR_OPS_IMPL_H */
