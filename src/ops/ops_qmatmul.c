/*
 * Products with the block types other than q8_0 / q4_0 (q4_1, q5_0, q5_1, the K-quants and the
 * iq4 types; ops_quants.h): every input is quantized to the type's partner (q8_0, q8_1 or q8_K,
 * as ggml quantizes activations for it), then each thread takes a share of the weight rows, in
 * blocks of 8, and the instruction set's qdot_rows (x86/qdot.h; the portable rops_qdot_inputs)
 * sums every row against all the inputs in integers per block. An input's result is the same
 * bit for bit however many inputs share the call, so a prompt, a token and a batch of sequences
 * compute the same numbers.
 *
 * The inputs' quantized rows live in ex->scratch when it holds them (rops_matmul_scratch_bytes),
 * else in groups on the caller's stack.
 */
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"
#include "ops_quants.h"

bool rops_qmatmul_type(enum rops_type type) {
    return type != ROPS_TYPE_Q8_0 && type != ROPS_TYPE_Q4_0 && type != ROPS_TYPE_Q8_1 &&
           type != ROPS_TYPE_Q8_K && rops_qtraits_of(type) != NULL;
}

size_t rops_qmatmul_input_bytes(enum rops_type type, int64_t k) {
    switch (rops_dot_partner(type)) {
    case ROPS_TYPE_Q8_K:
        return (size_t)(k / ROPS_QK_K) * sizeof(struct rops_block_q8_K);
    case ROPS_TYPE_Q8_1:
        return (size_t)(k / ROPS_QK) * sizeof(struct rops_block_q8_1);
    default:
        return (size_t)(k / ROPS_QK) * sizeof(struct rops_xq8);
    }
}

/* One input's k values as the partner type's blocks at dst. */
static void quantize_input(const struct rops_kernels *kt, enum rops_type partner, const float *x,
                           int64_t k, void *dst) {
    switch (partner) {
    case ROPS_TYPE_Q8_K:
        kt->quantize_q8_K(x, dst, k);
        break;
    case ROPS_TYPE_Q8_1:
        rops_quantize_q8_1(x, dst, k);
        break;
    default: /* q8_0 */
        kt->quantize_x(x, k / ROPS_QK, dst);
        break;
    }
}

/* Bytes of quantized inputs a call takes at most: groups that stay in the cache while every
 * row of the thread passes over them (all 512 inputs of a prompt at 768 columns, 870 KiB of
 * q8_K, were streamed from L3 for every row), and at least 16 inputs a call. */
#define QMM_GROUP_BYTES (256 << 10)

int64_t rops_qmatmul_grain(const struct rops_mat *w, int64_t n) {
    return n == 1 && w->rows16 ? 16 : 8;
}

struct qmm_task {
    struct rops_qdot_args a;
    const struct rops_kernels *k;
};

/* A thread's share of the rows, in blocks of rops_qmatmul_grain. */
static void qmm_thread(void *arg, int ith, int nth) {
    const struct qmm_task *t = arg;
    const int64_t grain = rops_qmatmul_grain(t->a.w, t->a.n);
    const int64_t blocks = (t->a.w->n_rows + grain - 1) / grain;
    int64_t r0 = blocks * ith / nth * grain, r1 = blocks * (ith + 1) / nth * grain;
    if (r1 > t->a.w->n_rows) r1 = t->a.w->n_rows;
    if (r0 < r1) t->k->qdot_rows(&t->a, r0, r1);
}

struct quant_task {
    const struct rops_kernels *kernels;
    enum rops_type partner;
    const float *x; /* the tile's first column of the first input */
    int64_t k, kt, n;
    uint8_t *xq;
    size_t stride;
};

static void quant_thread(void *arg, int ith, int nth) {
    const struct quant_task *t = arg;
    for (int64_t i = t->n * ith / nth; i < t->n * (ith + 1) / nth; i++)
        quantize_input(t->kernels, t->partner, t->x + i * t->k, t->kt,
                       t->xq + (size_t)i * t->stride);
}

void rops_qmatmul_quantize(const struct rops_kernels *K, const struct rops_mat *w, const float *x,
                           int64_t n, uint8_t *xq) {
    /* a block's quants depend on its own values only: a whole row is its tiles end to end */
    const enum rops_type partner = rops_dot_partner(w->type);
    const size_t stride = rops_qmatmul_input_bytes(w->type, w->n_cols);
    for (int64_t i = 0; i < n; i++)
        quantize_input(K, partner, x + i * w->n_cols, w->n_cols, xq + (size_t)i * stride);
}

void rops_qdot_by_tiles(rops_qdot_fn fn, const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    for (int64_t c = 0; c < a->kt; c += ROPS_QMM_TILE) {
        struct rops_qdot_args t = *a;
        t.c0 = a->c0 + c;
        t.kt = a->kt - c < ROPS_QMM_TILE ? a->kt - c : ROPS_QMM_TILE;
        t.xq = a->xq + rops_qmatmul_input_bytes(a->w->type, c);
        t.accumulate = a->accumulate || c > 0;
        fn(&t, r0, r1);
    }
}

/* One input: a whole row a call, so that a kernel that can streams its rows' tiles in one pass.
 * More: a tile at a time over all the rows (windows of 32 rows, each row's tiles in turn, were
 * slower: the weights came in three interleaved streams). */
void rops_qmatmul_rows(const struct rops_kernels *K, const struct rops_mat *w, const uint8_t *xq,
                       int64_t n, float *y, int64_t r0, int64_t r1) {
    const struct rops_qdot_args a = {
        w, 0, w->n_cols, xq, rops_qmatmul_input_bytes(w->type, w->n_cols), n, y, w->n_rows, false};
    if (n == 1)
        K->qdot_rows(&a, r0, r1);
    else
        rops_qdot_by_tiles(K->qdot_rows, &a, r0, r1);
}

void rops_qmatmul(const struct rops_exec *ex, const struct rops_mat *w, const float *x, int64_t n,
                  float *y, int n_threads) {
    const int64_t k = w->n_cols, m = w->n_rows;
    const enum rops_type partner = rops_dot_partner(w->type);
    _Alignas(64) uint8_t stack[32768];
    uint8_t *buf = stack;
    size_t cap = sizeof stack;
    if (ex->scratch && ex->scratch_bytes > cap) {
        buf = ex->scratch;
        cap = ex->scratch_bytes;
    }
    /* tiles of ROPS_QMM_TILE columns (a block's quants do not depend on the others, and each sum
       adds the tiles in order) */
    const int64_t kt = k < ROPS_QMM_TILE ? k : ROPS_QMM_TILE;
    const size_t stride = rops_qmatmul_input_bytes(w->type, kt);
    int64_t group = (int64_t)(cap / stride);
    int64_t cached = QMM_GROUP_BYTES / (int64_t)stride;
    if (cached < 16) cached = 16;
    if (group > cached) group = cached;
    for (int64_t i = 0; i < n; i += group) {
        const int64_t g = n - i < group ? n - i : group;
        for (int64_t c0 = 0; c0 < k; c0 += kt) {
            const int64_t w_cols = k - c0 < kt ? k - c0 : kt;
            struct quant_task qt = {
                rops_kernels_of(ex->isa), partner, x + i * k + c0, k, w_cols, g, buf, stride};
            rpool_run(ex->pool, quant_thread, &qt, g > 1 ? n_threads : 1);
            struct qmm_task t = {{w, c0, w_cols, buf, stride, g, y + i * m, m, c0 > 0},
                                 rops_kernels_of(ex->isa)};
            rpool_run(ex->pool, qmm_thread, &t, n_threads);
        }
    }
}
