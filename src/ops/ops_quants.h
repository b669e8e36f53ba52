/*
 * ggml's block quantizations, as the ops module reads and writes them: the layout of every
 * block type a GGUF file may hold weights in (ggml-common.h's block_q4_0 ... block_iq4_xs, which
 * are facts of the file format), a table of their traits, and the portable conversions.
 *
 * A block holds a fixed number of weights (32 for the legacy types and iq4_nl, 256 for the
 * K-quants and iq4_xs: a "super-block" of 8 or 16 sub-blocks with scales of their own) in a
 * fixed number of bytes; a row of a matrix is whole blocks, back to back. Every struct below
 * is packed by its own field order (all fields are bytes or naturally aligned 16/32-bit
 * values), and its size is checked against the format at compile time.
 *
 * Dequantization is bit for bit ggml's: each value is computed with the same float operations
 * in the same order (tests/unit/test_quants.c checks every type against ggml's own output).
 */
#ifndef RECUR_OPS_QUANTS_H
#define RECUR_OPS_QUANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define ROPS_QK           32  /* weights per block of the legacy types and iq4_nl */
#define ROPS_QK_K         256 /* weights per super-block of the K-quants and iq4_xs */
#define ROPS_K_SCALE_SIZE 12  /* bytes of q4_K / q5_K's packed 6-bit scales and mins */

/* ---- legacy blocks (32 weights): value = d * q, or d * q + m for the _1 types ---------------- */

/* q8_0: value = d * q. */
struct rops_block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[32];
};
/* q4_0: q = nibble - 8. Weight j < 16 is the low nibble of qs[j], j >= 16 the high one of
 * qs[j - 16]. */
struct rops_block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
/* q4_1: q = nibble (0..15). Weight j < 16 is the low nibble of qs[j], j >= 16 the high one. */
struct rops_block_q4_1 {
    uint16_t d, m; /* f16 scale and minimum */
    uint8_t qs[16];
};
/* q5_0: q = (nibble | fifth bit << 4) - 16; bit j of qh is weight j's fifth bit. */
struct rops_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
/* q5_1: q = nibble | fifth bit << 4, value = d * q + m. */
struct rops_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};
/* iq4_nl: value = d * rops_iq4nl_values[nibble] (a non-linear table of 16 levels). */
struct rops_block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];
};

/* ---- K-quants (256 weights) ------------------------------------------------------------------ */

/* q2_K: 16 sub-blocks of 16; each has a 4-bit scale (low nibble of scales[i]) and a 4-bit
 * minimum (high nibble); value = d * scale * q - dmin * min, q 2 bits. */
struct rops_block_q2_K {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
};
/* q3_K: 16 sub-blocks of 16 with 6-bit signed scales (packed in 12 bytes, offset 32); q is 2
 * low bits from qs and a high bit from hmask, less 4 when the high bit is clear. */
struct rops_block_q3_K {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
};
/* q4_K: 8 sub-blocks of 32 with 6-bit scales and mins (packed in 12 bytes); value =
 * d * scale * q - dmin * min, q 4 bits. */
struct rops_block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[ROPS_K_SCALE_SIZE];
    uint8_t qs[128];
};
/* The same block of 16 consecutive rows interleaved (ops_rows16.c, not a file format): what a
 * 512-bit vector of the AVX-512 one-input kernel takes at once, each row in a 32-bit lane.
 * d[r], dmin[r], scales[k][r] are row r's d, dmin and scales[k]; qs[c][l][r][t] is row r's
 * qs[32 c + 4 l + t]: its low nibble the weight at 64 c + 4 l + t, its high nibble the one 32
 * on. 2304 bytes, 16 rows' worth, each part at a multiple of 32 bytes. */
struct rops_block_q4_Kx16 {
    uint16_t d[16], dmin[16];
    uint8_t scales[ROPS_K_SCALE_SIZE][16];
    uint8_t qs[4][8][16][4];
};
/* q5_K: q4_K with a fifth bit per weight in qh. */
struct rops_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[ROPS_K_SCALE_SIZE];
    uint8_t qh[32];
    uint8_t qs[128];
};
/* q6_K: 16 sub-blocks of 16 with 8-bit signed scales; q = 4 low bits (ql) | 2 high bits (qh)
 * << 4, less 32. */
struct rops_block_q6_K {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
};
/* 16 consecutive rows' q6_K blocks interleaved (ops_rows16.c; see rops_block_q4_Kx16):
 * ql[h][j][l][r][t] is row r's ql[64 h + 32 j + 4 l + t], qh[h][l][r][t] its qh[32 h + 4 l + t],
 * scales[g][r] and d[r] its scales[g] and d. 3360 bytes; ql and qh start at multiples of 64
 * bytes of the block, which is 32 bytes past a multiple of 64 every other block. */
struct rops_block_q6_Kx16 {
    uint8_t ql[2][2][8][16][4];
    uint8_t qh[2][8][16][4];
    int8_t scales[16][16];
    uint16_t d[16];
};
/* q8_K: the activations' type of the K-quant dot products (never in files): value = d * q,
 * d f32, with the sums of each 16 quants kept for the products with the minimums. */
struct rops_block_q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
};
/* iq4_xs: 8 sub-blocks of 32 with 6-bit scales (4 low bits in scales_l, 2 high in scales_h),
 * value = d * (scale - 32) * rops_iq4nl_values[nibble]. */
struct rops_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};

/* q8_1: the activations' type of the products with q4_1 / q5_1 weights: q8_0 plus
 * s = d * sum(q), so that the weights' minimum multiplies one number per block. */
struct rops_block_q8_1 {
    uint16_t d, s; /* f16 */
    int8_t qs[32];
};

/* The 16 levels of iq4_nl and iq4_xs (ggml's kvalues_iq4nl). */
extern const int8_t rops_iq4nl_values[16];

/* ---- traits ---------------------------------------------------------------------------------- */

/* dst[0..n) = the n weights (a multiple of the block) of the blocks at src, as f32. */
typedef void (*rops_to_f32_fn)(const void *src, float *dst, int64_t n);

struct rops_qtraits {
    const char *name;      /* ggml's name: "q4_K" */
    int64_t block;         /* weights per block */
    size_t block_bytes;    /* bytes per block */
    rops_to_f32_fn to_f32; /* the dequantization (bit for bit ggml's) */
};

/* The traits of a block type (q4_0 ... iq4_xs, and q8_K, q8_1); NULL for f32, f16, bf16 and any
 * other number. */
const struct rops_qtraits *rops_qtraits_of(enum rops_type type);

/* ---- weights --------------------------------------------------------------------------------- */

/* Writes the n values at x (a multiple of the block) as blocks of a type at dst. */
typedef void (*rops_from_f32_fn)(const float *x, void *dst, int64_t n);

/* The quantizer of a weight type (ops_quantize.c: q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K,
 * q6_K); NULL for the others. The legacy types round as ggml's reference quantizers (the same
 * bytes); the K-quants choose their scales by least squares (their own bytes, ggml's layout). */
rops_from_f32_fn rops_quantizer_of(enum rops_type type);

/* ---- activations ----------------------------------------------------------------------------- */

/* n values (a multiple of 256) as q8_K blocks, as ggml's reference quantizer writes them:
 * per block the value of largest magnitude x_m, iscale = -127 / x_m, q = min(127,
 * round-half-even(iscale * x)), d = 1 / iscale, bsums the sums of each 16 q. */
void rops_quantize_q8_K(const float *x, struct rops_block_q8_K *y, int64_t n);
/* n values (a multiple of 32) as q8_1 blocks: d = max|x| / 127, q = round(x / d), s = d * sum q
 * (ggml's reference rounding). */
void rops_quantize_q8_1(const float *x, struct rops_block_q8_1 *y, int64_t n);

/* ---- products -------------------------------------------------------------------------------- */

/* The activations' type a weight type's integer products take: q8_0 (as struct rops_xq8
 * blocks) for q4_0, q5_0, q8_0 and iq4_nl; q8_1 for q4_1 and q5_1; q8_K for the K-quants and
 * iq4_xs; ROPS_TYPE_F32 for the float types. */
enum rops_type rops_dot_partner(enum rops_type type);

/* The dot product of n weights (a multiple of the block) of a block type at w with n
 * activations quantized to its partner at xq, in integers per block as ggml sums them
 * (ops_qdot.c, the portable reference of the vector kernels). */
float rops_qdot_scalar(enum rops_type type, const void *w, const void *xq, int64_t n);

/* A K block (q2_K .. q6_K, iq4_xs) unpacked: value j = d * sc[j / 16] * q[j] - dmin * mn[j / 16]
 * (q4_K and q5_K's scales and minimums per 32 repeated in both groups of 16; dmin and mn 0
 * where the type has no minimums). */
struct rops_unpackedK {
    float d, dmin;
    int8_t q[256];
    int16_t sc[16], mn[16];
};

/* Unpacks the K block of type at blk into u; false when type is not a K type. */
bool rops_unpack_K(enum rops_type type, const void *blk, struct rops_unpackedK *u);
/* ... its d, dmin, sc and mn only (u->q left as it was): for kernels that take the quants by
 * vector instructions. */
bool rops_unpack_K_scales(enum rops_type type, const void *blk, struct rops_unpackedK *u);

/* y[i * y_stride] = (or +=, when accumulate) the dot product of the row of k weights at w with
 * input i's activations (at xq + i * xq_stride, quantized to the partner type), for i < n: each
 * weight block is unpacked once for all inputs, and each input's sum adds the blocks in order,
 * so that the result for an input is rops_qdot_scalar's bit for bit, whatever n.
 */
void rops_qdot_inputs(enum rops_type type, const void *w, int64_t k, const void *xq,
                      size_t xq_stride, int64_t n, float *y, int64_t y_stride, bool accumulate);

/* ---- products of whole matrices (ops_qmatmul.c) ---------------------------------------------- */

/* True for the block types rops_qmatmul serves (all but q8_0 and q4_0, which ops.c takes). */
bool rops_qmatmul_type(enum rops_type type);
/* Bytes of one input of k values quantized to type's partner. */
size_t rops_qmatmul_input_bytes(enum rops_type type, int64_t k);
/* y = W x for n inputs (as rops_matmul) with a rops_qmatmul_type weight, on n_threads threads of
 * ex->pool; ex->scratch, when it holds n x rops_qmatmul_input_bytes, holds the quantized
 * inputs (else they go in groups through 32 KiB of stack). */
void rops_qmatmul(const struct rops_exec *ex, const struct rops_mat *w, const float *x, int64_t n,
                  float *y, int n_threads);
struct rops_kernels;
/* The generation path (ops.c's batches take it): n inputs of w's k columns quantized whole,
 * input i at xq + i * rops_qmatmul_input_bytes(w->type, k) (xq aligned to 4); then rows
 * [r0, r1) of y = W x (y[i * w->n_rows + r]) for every column tile in one call. A row's sums
 * are rops_qmatmul's bit for bit: its tiles in the same order, from the same blocks. */
void rops_qmatmul_quantize(const struct rops_kernels *K, const struct rops_mat *w, const float *x,
                           int64_t n, uint8_t *xq);
void rops_qmatmul_rows(const struct rops_kernels *K, const struct rops_mat *w, const uint8_t *xq,
                       int64_t n, float *y, int64_t r0, int64_t r1);
/* The rows a block of the threads' split holds for n inputs with w: the vector kernels' row
 * groups, 16 where one input reads w's interleaved copy (a group split between two threads
 * goes a row at a time), else 8. */
int64_t rops_qmatmul_grain(const struct rops_mat *w, int64_t n);

#endif
