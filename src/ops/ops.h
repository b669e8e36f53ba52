/*
 * ops: the numeric kernels models are made of.
 *
 * Activations are f32, row-major: a batch of n vectors of length k is x[n][k]. Weights are
 * matrices in the file's own type (f32, f16, bf16, q8_0, q4_0 in ggml's block layouts), read
 * in place from the model file. Nothing here allocates and nothing fails: shapes are checked
 * when the model is loaded.
 *
 * Every heavy kernel takes a struct rops_exec: the thread pool and how many of its threads to
 * use, and the instruction set. Each instruction set has a table of kernels (ops_impl.h): the
 * portable C ones (ops_scalar.c), on x86-64 CPUs with AVX2, FMA and F16C vectorised ones
 * (ops_avx2.c), with AVX-VNNI too the AVX2 ones with VNNI integer dots (ops_avxvnni.c), with
 * AVX-512 (F, BW, VL, DQ, VNNI) wider ones (ops_avx512.c, which takes
 * the AVX2 kernels where it has none of its own). The x86 kernels other than the matrix
 * products are one body for both widths (x86/kernels.inc, over the vector layer x86/vec.h).
 * All give the same results within float
 * rounding (the tests compare each with float64 references), and the choice is made per call,
 * so tests and benchmarks can force any the CPU runs. ops_probe.c finds what the CPU runs;
 * ops.c, ops_rwkv.c, ops_ssd.c and ops_attn.c share the work out among the threads and call the
 * table.
 */
#ifndef RECUR_OPS_H
#define RECUR_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../pool/pool.h"

enum rops_isa {
    ROPS_ISA_SCALAR = 0,  /* portable C */
    ROPS_ISA_AVX2 = 1,    /* x86-64 AVX2 + FMA + F16C */
    ROPS_ISA_AVXVNNI = 2, /* AVX2 + AVX-VNNI (the integer dots by vpdpbusd), without AVX-512 */
    ROPS_ISA_AVX512 = 3,  /* AVX2 + AVX-512 F, BW, VL, DQ and VNNI, ZMM state saved by the OS */
    ROPS_ISA_COUNT
};

/* The best instruction set this CPU runs (CPU detection at run time, once per call). */
enum rops_isa rops_isa_best(void);
/* True when this build has isa's kernels and this CPU (and its OS) runs them. */
bool rops_isa_runs(enum rops_isa isa);
/* "scalar", "avx2", "avxvnni", "avx512" ("?" for another value). */
const char *rops_isa_name(enum rops_isa isa);
/* Why isa does not run here (a sentence for messages), or NULL when it does. Static text. */
const char *rops_isa_lacks(enum rops_isa isa);
/* The instruction set a context uses: the environment variable RECUR_ISA (scalar, avx2,
 * avxvnni or avx512) when set and not empty, else rops_isa_best(). Returns false and sets the last
 * error (rcore_error_set) when RECUR_ISA names no instruction set or one this CPU does not run. */
bool rops_isa_from_env(enum rops_isa *out);

/* How a kernel runs: on n_threads threads of pool (pool NULL or n_threads 1: on the caller
 * alone) with instruction set isa (one this CPU runs). scratch (scratch_bytes, or NULL
 * and 0) is the caller's memory a kernel may overwrite during the call; a kernel
 * that finds it too small works in smaller pieces, with the same results.
 *
 * one_order: every input of a product with float weights is summed as if it were alone (the
 * one-input kernel, once per input), so that its bits do not depend on the other inputs of the
 * call. Products with block weights always are (integer sums per block, the same float steps
 * for any number of inputs). Set it for a model with block weights: their inputs are quantized,
 * and a last-bit difference upstream may round an input to the next step, which a model can
 * amplify to percents of its logits; a model of float weights only keeps such differences at
 * the last bits, and its prompts keep the faster many-input kernels. */
struct rops_exec {
    struct rpool *pool;
    int n_threads;
    enum rops_isa isa;
    void *scratch;
    size_t scratch_bytes;
    bool one_order;
};

/* The weight types the kernels take, numbered as ggml / GGUF number them, so that a file's
 * tensor type that rops_type_supported() accepts converts as it is. */
enum rops_type {
    ROPS_TYPE_F32 = 0,
    ROPS_TYPE_F16 = 1,
    ROPS_TYPE_Q4_0 = 2,
    ROPS_TYPE_Q4_1 = 3,
    ROPS_TYPE_Q5_0 = 6,
    ROPS_TYPE_Q5_1 = 7,
    ROPS_TYPE_Q8_0 = 8,
    ROPS_TYPE_Q8_1 = 9, /* activations only */
    ROPS_TYPE_Q2_K = 10,
    ROPS_TYPE_Q3_K = 11,
    ROPS_TYPE_Q4_K = 12,
    ROPS_TYPE_Q5_K = 13,
    ROPS_TYPE_Q6_K = 14,
    ROPS_TYPE_Q8_K = 15, /* activations only */
    ROPS_TYPE_IQ4_NL = 20,
    ROPS_TYPE_IQ4_XS = 23,
    ROPS_TYPE_BF16 = 30,
};

/* A weight matrix of n_rows rows of n_cols elements (GGUF {n_cols, n_rows}).
 * rows16: NULL, or the same weights in the interleaved layout of rops_rows16_make (its first
 * n_rows / 16 * 16 rows), which the AVX-512 q4_K and q6_K kernels read for one input; data stays
 * the matrix every other path reads, and the two give the same bits. */
struct rops_mat {
    const void *data;
    enum rops_type type;
    int64_t n_cols;
    int64_t n_rows;
    size_t row_bytes;
    const void *rows16;
};

/* Bytes of w's rows in the interleaved layout (ops_rows16.c: each 16 rows' blocks side by
 * side), or 0 when no kernel reads that layout for w: its type (q4_K and q6_K only), fewer
 * than 16 rows, or an instruction set other than AVX-512 (isa). */
size_t rops_rows16_bytes(const struct rops_mat *w, enum rops_isa isa);
/* Writes w's first n_rows / 16 * 16 rows in the interleaved layout into dst (64-byte aligned,
 * rops_rows16_bytes(w, ROPS_ISA_AVX512) bytes); w->data is only read. */
void rops_rows16_make(const struct rops_mat *w, void *dst);

/* True when the kernels can use weights of this ggml type (any number, as a file holds it) with
 * rows of n_cols elements (the block types need n_cols to be a multiple of their 32-element
 * block); the type is then an enum rops_type. */
int rops_type_supported(uint32_t ggml_type, int64_t n_cols);

/* Row r of W, converted to f32 (n_cols values). */
void rops_get_row(const struct rops_mat *w, int64_t r, float *out);

/* Writes n values (a multiple of the type's block) of src as blocks of a type recur quantizes
 * to (q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K; ops_quantize.c) into dst
 * (rops_row_bytes(type, n) bytes). Returns false (nothing written) for another type or n. */
bool rops_quantize_row(enum rops_type type, const float *src, int64_t n, void *dst);
/* Bytes of a row of n values in type (any float or block type ops_quants.h lays out); 0 when
 * n is not whole blocks or the type has no layout here. */
size_t rops_row_bytes(enum rops_type type, int64_t n);

/* y[i][r] = sum_c W[r][c] * x[i][c] for i < n (x: n x n_cols, y: n x n_rows). The rows of W
 * are shared out among the threads; each block of weight rows is converted to f32 once and
 * used for all n inputs (so many sequences cost one pass over the weights).
 *
 * With q8_0 or q4_0 weights the inputs are first quantized as ggml does (q8_0 blocks of 32,
 * d = max|x| / 127 rounded to f16, q = round(x / d)), so the products are those llama.cpp
 * computes; one to three inputs then take integer dot products (half the bytes of the f32
 * path read per weight), more inputs the f32 tiles on the dequantized inputs. Either way the
 * result for an input does not depend on how many others share the call (within float
 * rounding). The f32 tiles want ex->scratch of rops_matmul_scratch_bytes(w, n) bytes. */
void rops_matmul(const struct rops_exec *ex, const struct rops_mat *w, const float *x, int64_t n,
                 float *y);
/* The scratch rops_matmul uses best for n inputs with w: 0 for f32, f16 and bf16 weights. */
size_t rops_matmul_scratch_bytes(const struct rops_mat *w, int64_t n);

/* One product of a batch: y = W x for n inputs, as rops_matmul(ex, w, x, n, y). */
struct rops_matjob {
    const struct rops_mat *w;
    const float *x;
    int64_t n;
    float *y;
};

/* Jobs with at most this many inputs share the threads of one parallel call. */
#define ROPS_BATCH_MAX_N 16

/* The n_jobs products of jobs, with results bit for bit those of rops_matmul on each job
 * alone (in any order: the jobs are independent, no job's x may overlap another's y, and the
 * ys do not overlap). The jobs of up to ROPS_BATCH_MAX_N inputs (generation) run in one
 * hand-off to the threads rather than one per product, their rows shared out by an estimate
 * of their time (weight bytes and multiply-adds): a step of a model makes many small
 * products, each too short to repay the threads' start and finish. With q8_0 / q4_0 weights
 * their inputs are quantized first, on the caller, into ex->scratch (or, when it is smaller,
 * a buffer on the stack; when neither holds them all, they go in several calls, the same
 * results). Jobs of more inputs (prompts) run one after another through rops_matmul, with its
 * scratch rules. */
void rops_matmul_batch(const struct rops_exec *ex, const struct rops_matjob *jobs, int n_jobs);

/* out = x / sqrt(mean(x^2) + eps) * weight (weight NULL: no scale). out may equal x. The sum
 * in double: in order on the portable path, in vector lanes on the others (isa's kernel). */
void rops_rmsnorm(enum rops_isa isa, const float *x, const float *weight, int64_t k, float eps,
                  float *out);

float rops_silu(float x);
float rops_softplus(float x);

/* x[i][c] = softplus(x[i][c] + bias[c]) for n_rows rows of n_cols (Mamba's dt). */
void rops_softplus_bias(enum rops_isa isa, float *x, const float *bias, int64_t n_rows,
                        int64_t n_cols);

/* The elementwise functions of rops_map, of v = x[i][c] + bias[c] (or x[i][c] without bias). */
enum rops_map {
    ROPS_MAP_SIGMOID,     /* 1 / (1 + e^-v) */
    ROPS_MAP_TANH,        /* tanh v */
    ROPS_MAP_SILU,        /* v / (1 + e^-v) */
    ROPS_MAP_RELU_SQ,     /* max(v, 0)^2: RWKV's channel mix */
    ROPS_MAP_EXP_NEG_EXP, /* e^(-e^v): RWKV-6's decay */
    ROPS_MAP_RWKV7_DECAY, /* e^(-e^-0.5 sigmoid(v)): RWKV-7's decay, in (0.545, 1) */
    ROPS_MAP_COUNT
};

/* x[i * ld + c] = f(that + (bias ? bias[c] : 0)) for n_rows rows of n_cols (row stride ld >=
 * n_cols), in place, the rows
 * shared out among ex's threads when there are enough of them to repay the hand-off. The
 * portable path computes each with expf / tanhf; the vector ones with a vector e^x (a few ulp),
 * tanh as (1 - e^-2|v|) / (1 + e^-2|v|) (within ~2e-7 of it, absolute). */
void rops_map(const struct rops_exec *ex, enum rops_map f, float *x, int64_t ld, const float *bias,
              int64_t n_rows, int64_t n_cols);

/* Machine probes for `recur bench`, on ex's threads and ISA: the multiply-add peak in GFLOP/s
 * (independent FMA chains, no memory traffic), and the read bandwidth in GB/s of streaming
 * buf (n_bytes, a multiple of 64, larger than the caches) once per thread share. */
double rops_probe_gflops(const struct rops_exec *ex);
double rops_probe_read_gbps(const struct rops_exec *ex, const void *buf, size_t n_bytes);

/*
 * Mamba's causal depthwise convolution and selective scan, with the output gate, for the
 * tokens of n_seqs sequences of n_tok tokens each (stream-major: sequence s has tokens
 * s*n_tok .. s*n_tok + n_tok - 1), with the channels shared out among the threads.
 *
 * conv: per sequence (d_conv-1) previous inputs per channel, channel-major (state[c*(d_conv-1)
 * + k], oldest first), updated in place to the last d_conv-1 inputs; sequence s's state at
 * conv_state + s * (d_conv-1) * d_inner.
 * x: tokens x d_inner inputs (row stride x_stride); xc: tokens x d_inner (stride d_inner),
 *   xc[t][c] = silu(sum_k w[c*d_conv + k] * window_t[k][c] + b[c]),
 * where window_t is the d_conv inputs ending at token t. xc must not overlap x: the kernels
 * go in token order and read earlier tokens' inputs after writing their outputs.
 *
 * save (conv and scan): NULL, or per token of the call (sequence s, token t: save[s * n_tok +
 * t]) NULL or where to copy that sequence's state as it is after token t, in the layout of one
 * sequence's state (the snapshots of a rollback).
 */
struct rops_conv_args {
    float *state; /* conv_state above */
    const float *x;
    int64_t x_stride;
    int64_t n_seqs, n_tok, d_inner, d_conv;
    const float *w, *b; /* d_inner x d_conv weights, d_inner biases */
    /* NULL, or w lag-major (w_lag[k * d_inner + c] = w[c * d_conv + k]): the order the vector
       kernels read, which they otherwise make on every call (the model keeps one) */
    const float *w_lag;
    float *xc;
    float *const *save;
};
void rops_ssm_conv(const struct rops_exec *ex, const struct rops_conv_args *a);

/* The product that makes the scan's dt (rops_scan_args.dt_proj): dt = softplus(w · x + bias). */
struct rops_dt_proj {
    const struct rops_mat *w;
    const float *x, *bias;
    float *dt;
};

/*
 * The scan. s: per sequence a d_inner x d_state state (s[c*d_state + n]), sequence s's at
 * ssm_state + s * d_inner * d_state, updated in place. Per token t:
 *   s[c][n] = s[c][n] * exp(dt[c] * A[c][n]) + B[n] * x[c] * dt[c]
 *   y[c] = (sum_n s[c][n] * C[n] + D[c] * x[c]) * silu(z[c])
 * x, dt, y: tokens x d_inner (stride d_inner); z: tokens x d_inner (stride z_stride); B, C:
 * tokens x d_state (stride bc_stride).
 */
struct rops_scan_args {
    float *state; /* ssm_state above */
    const float *x, *dt, *A, *B, *C;
    int64_t bc_stride;
    const float *D, *z;
    int64_t z_stride;
    int64_t n_seqs, n_tok, d_inner, d_state;
    float *y;
    float *const *save;
    /* NULL, or dt is made first: dt = softplus(dt_proj->w · x + bias) for every token (w:
       d_inner rows, x: tokens x w->n_cols, dt_proj->dt == dt above). For one token each thread
       makes the rows of its own channels, in the scan's hand-off; the same bits as
       rops_matmul and rops_softplus_bias. */
    const struct rops_dt_proj *dt_proj;
};
void rops_ssm_scan(const struct rops_exec *ex, const struct rops_scan_args *a);

/*
 * Mamba-2's scan (docs/mamba2.md (7)-(9)): n_head heads of head_dim = d_inner / n_head
 * channels, head h reading group h / (n_head / n_group) of B and C, with one A[h], D[h] and
 * dt[t][h] (already softplus'd) per head. xbc: tokens x xbc_stride, the conv's output [x (d_inner)
 * | B (n_group d_state) | C (n_group d_state)]; state per sequence [n_head][head_dim][d_state]
 * (s[c * d_state + n], c = h * head_dim + p), sequence s's at ssm_state + s * d_inner * d_state;
 * y: tokens x d_inner, y = s · C + D * x (no gate). save as for rops_ssm_scan.
 */
struct rops_scan2_args {
    float *state; /* ssm_state above */
    const float *xbc;
    int64_t xbc_stride;
    const float *dt, *A, *D;
    int64_t n_seqs, n_tok, d_inner, d_state, n_head, n_group;
    float *y;
    float *const *save;
};
void rops_ssm_scan2(const struct rops_exec *ex, const struct rops_scan2_args *a);

/*
 * The same scan as rops_ssm_scan2 (same arguments, state layout and saves) by chunks: the
 * "state space duality" (SSD) form of Dao & Gu 2024, docs/mamba2.md section 5. The tokens of
 * a sequence go in chunks of up to ROPS_SSD_CHUNK; per chunk and head, with the decays taken
 * from segment sums of dt * A (exp of differences of their prefix sums, never of a growing
 * sum, so nothing overflows), the outputs are
 *   y = (C · B^T masked by the decays, times dt) · x  +  decay-to-t * (C · S_in)  +  D * x
 * and the state leaving it S_out = decay(chunk) * S_in + (decay-to-end * dt * x)^T · B: matrix
 * products (the C · B^T of a group shared by its heads) instead of one state update per token.
 * A chunk ends at every token with a save, so each snapshot is the state after its token.
 * Results equal rops_ssm_scan2's within float rounding (sums in another order), whatever the
 * saves. The heads are shared among the threads.
 *
 * It works in ex->scratch: rops_ssm_scan2_chunked_scratch_bytes(ex->n_threads, ...) is what it
 * wants for the whole call; with less it holds fewer heads' states at a time (their C · B^T is
 * then computed more than once), and with less than one head's worth per thread it runs
 * rops_ssm_scan2.
 */
/* 48: 8 row tiles of the 6-row kernel, none left over; on the 130m shape (512 tokens, AVX2)
 * chunks of 36-48 took 5.4-5.7 ms, 64 5.6-6.1, 128 6.7 (bench_ssd, RESULTS.md). */
#define ROPS_SSD_CHUNK 48
void rops_ssm_scan2_chunked(const struct rops_exec *ex, const struct rops_scan2_args *a);
size_t rops_ssm_scan2_chunked_scratch_bytes(int n_threads, int64_t n_tok, int64_t d_inner,
                                            int64_t d_state, int64_t n_head);

/* ---- RWKV (ops_rwkv.c) --------------------------------------------------------------------- */

/* out = (x - mean(x)) / sqrt(var(x) + eps) * w + b over k values (w or b NULL: 1 or 0). out may
 * be x. Mean and variance in double, in two passes (as rops_rmsnorm: isa's kernel). */
void rops_layernorm(enum rops_isa isa, const float *x, const float *w, const float *b, int64_t k,
                    float eps, float *out);

/*
 * RWKV-6's WKV (docs/rwkv6.md (14)) for n_seqs sequences of n_tok tokens (stream-major, as
 * rops_ssm_scan). r, k, v, w (the decay, 0 < w < 1), y: tokens x n_embd, n_embd = n_head *
 * head_size; u: n_embd (the bonus). State per sequence [n_head][key i][value j] (head_size^2 per
 * head), sequence s's at state + s * n_embd * head_size, updated in place. Per token and head:
 *   y[j] = sum_i r[i] (S[i][j] + u[i] k[i] v[j]);   S[i][j] = w[i] S[i][j] + k[i] v[j]
 * save as for rops_ssm_scan (the whole state after that token).
 */
struct rops_wkv_args {
    float *state;
    const float *r, *k, *v, *w;
    const float *u;     /* RWKV-6's bonus (n_embd); NULL for RWKV-7 */
    const float *a, *b; /* RWKV-7's state-update vectors (tokens x n_embd); NULL for RWKV-6 */
    int64_t n_seqs, n_tok, n_embd, head_size;
    float *y;
    float *const *save;
};
void rops_wkv6(const struct rops_exec *ex, const struct rops_wkv_args *a);

/*
 * RWKV-7's WKV (docs/rwkv7.md (14)), shapes as rops_wkv6; state [n_head][value i][key j]. Per
 * token and head:
 *   sa[i] = sum_j a[j] S[i][j];  S[i][j] = S[i][j] w[j] + v[i] k[j] + sa[i] b[j];
 *   y[i] = sum_j S[i][j] r[j]
 * (the model passes a = -kk, b = kk * iclr).
 */
void rops_wkv7(const struct rops_exec *ex, const struct rops_wkv_args *a);

/* ---- attention (ops_attn.c) ---------------------------------------------------------------- */

/* The rotary embedding's pairings, numbered as ggml numbers its rope modes. */
enum rops_rope_mode {
    ROPS_ROPE_NORMAL = 0, /* adjacent pairs (x[2i], x[2i + 1]) */
    ROPS_ROPE_NEOX = 2,   /* halves (x[i], x[i + n_rot / 2]) */
};

/*
 * Rotary position embedding, in place, on n_tok rows of n_head heads of head_dim floats: head h
 * of token t at x + t * stride + h * head_dim. Pair i < n_rot / 2 of each head of token t is
 * rotated by
 *   theta_i = pos[t] * freq_scale * freq_base^(-2i / n_rot)
 * (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos), the pairs as mode says; dims n_rot and up are
 * left as they are. This is ggml_rope_ext without YaRN (ext_factor 0, attn_factor 1). The angle
 * and its cosine and sine are computed in double and rounded once, so positions in the hundreds
 * of thousands keep float precision (ggml builds the angle by float products, which drift
 * there). n_rot even, 0 < n_rot <= head_dim; the tokens are shared out among ex's threads when
 * there are enough of them; the portable code on every instruction set (ex->isa is not read).
 */
struct rops_rope_args {
    float *x;
    int64_t n_tok, n_head, head_dim, stride;
    const int32_t *pos; /* [n_tok] */
    int64_t n_rot;
    float freq_base, freq_scale;
    enum rops_rope_mode mode;
};
void rops_rope(const struct rops_exec *ex, const struct rops_rope_args *a);

/* The largest head rops_attention takes (the loader refuses others). */
#define ROPS_ATTN_MAX_HEAD_DIM 256

/*
 * Causal attention with grouped key/value heads over a set of n_kv key/value rows held in pages,
 * for n_q query tokens. Query i, head h (h < n_head) reads kv head h / (n_head / n_head_kv) and
 * sees key j iff kv_seq[j] == q_seq[i] and kv_pos[j] <= q_pos[i] (exactly: the sequence ids
 * compared as integers, so several sequences may share the rows, interleaved in any order;
 * kv_seq and q_seq both NULL: every key belongs to the queries' one sequence). Its
 * output is
 *   out = sum_j softmax_j(scale * q . k_j) v_j        over the keys it sees,
 * zeros when it sees none. Shapes:
 *   q    [n_q][n_head * head_dim], row i at q + i * q_stride (head h at + h * head_dim);
 *   out  the same layout with out_stride; it must not overlap q or the keys and values;
 *   K, V row j (n_head_kv * head_dim values of type_k / type_v, head g's at value g * head_dim):
 *        row j % page_rows of page j / page_rows, k_pages[p] (v_pages[p]) pointing at a page's
 *        first row, rows packed (rops_row_bytes(type, n_head_kv * head_dim) bytes each).
 * Types F32, F16 and Q8_0 (ggml's block_q8_0, head_dim a multiple of 32). head_dim <=
 * ROPS_ATTN_MAX_HEAD_DIM, n_head a multiple of n_head_kv. Nothing is allocated and nothing
 * fails: the caller checks shapes (as for every kernel here).
 *
 * The softmax is the online one: keys go in tiles, each query head keeping a running maximum,
 * sum and output that a tile with a larger maximum rescales; memory does not grow with n_q or
 * n_kv. The query heads that share a kv head go together, so each key and value row is read
 * (and converted) once for all of them. The (query, kv head) pairs are shared out among ex's
 * threads when the call is large enough to repay the hand-off; a query's outputs are the same
 * bits whatever the thread count and the other queries of the call. Results agree with a float64
 * softmax over the same stored values to float rounding (tests/unit/test_ops_attn.c).
 */
struct rops_attn_args {
    int64_t n_q;
    int64_t n_head, n_head_kv, head_dim;
    const float *q;
    int64_t q_stride;
    const int32_t *q_pos; /* [n_q] */
    const int32_t *q_seq; /* [n_q] */
    int64_t n_kv;
    const void *const *k_pages, *const *v_pages; /* [ceil(n_kv / page_rows)] */
    int64_t page_rows;
    enum rops_type type_k, type_v;
    const int32_t *kv_pos; /* [n_kv] */
    const int32_t *kv_seq; /* [n_kv] */
    float scale;
    float *out;
    int64_t out_stride;
};
void rops_attention(const struct rops_exec *ex, const struct rops_attn_args *a);

#endif /* RECUR_OPS_H */
