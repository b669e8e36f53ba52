/*
 * The dispatcher (see ops.h): checks of weight types, the matmul's and the Mamba scans' split
 * of the work among the threads, and the calls of the instruction set's kernels through its
 * table (ops_impl.h; the kernels are in ops_scalar.c, ops_avx2.c, ops_avxvnni.c and
 * ops_avx512.c, with the x86 bodies they include from x86/).
 */
#include "ops.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "../core/core.h"
#include "ops_impl.h"

/* ---- weights ------------------------------------------------------------------------------- */

int rops_type_supported(uint32_t ggml_type, int64_t n_cols) {
    switch (ggml_type) {
    case ROPS_TYPE_F32:
    case ROPS_TYPE_F16:
    case ROPS_TYPE_BF16:
        return 1;
    case ROPS_TYPE_Q8_0:
    case ROPS_TYPE_Q4_0:
        return n_cols % 32 == 0;
    default: /* the other block types (ops_qmatmul.c) */
        return rops_qmatmul_type((enum rops_type)ggml_type) &&
               n_cols % rops_qtraits_of((enum rops_type)ggml_type)->block == 0;
    }
}

void rops_get_row(const struct rops_mat *w, int64_t r, float *out) {
    /* the model checked every matrix's type and shape at load: a row outside it is a bug */
    assert(r >= 0 && r < w->n_rows && rops_type_supported(w->type, w->n_cols));
    rops_row_tile(w, r, 0, w->n_cols, out);
}

size_t rops_row_bytes(enum rops_type type, int64_t n) {
    if (n < 0) return 0;
    const struct rops_qtraits *q = rops_qtraits_of(type);
    if (q) return n % q->block == 0 ? (size_t)(n / q->block) * q->block_bytes : 0;
    switch (type) {
    case ROPS_TYPE_F32:
        return 4 * (size_t)n;
    case ROPS_TYPE_F16:
    case ROPS_TYPE_BF16:
        return 2 * (size_t)n;
    default:
        return 0;
    }
}

bool rops_quantize_row(enum rops_type type, const float *src, int64_t n, void *dst) {
    const rops_from_f32_fn fn = rops_quantizer_of(type);
    if (!fn || rops_row_bytes(type, n) == 0) return false;
    fn(src, dst, n);
    return true;
}

/* ---- matmul -------------------------------------------------------------------------------- */

struct matmul_task {
    const struct rops_mat *w;
    const float *x;
    int64_t n;
    float *y;
    const struct rops_kernels *k;
    bool one_order; /* each input by the one-input kernel (rops_exec.one_order) */
    const struct rpool *pool;
};

static void matmul_thread(void *arg, int ith, int nth) {
    const struct matmul_task *t = arg;
    /* whole blocks of rows per thread, the parts by the threads' speeds (rpool_share); the
       prompt kernels' (8) where they run, else ROPS_RB */
    const int64_t rb = t->n > 3 && !t->one_order ? 8 : ROPS_RB;
    const int64_t m = t->w->n_rows, blocks = (m + rb - 1) / rb;
    int64_t r0 = rpool_share(t->pool, ith, nth, blocks) * rb,
            r1 = rpool_share(t->pool, ith + 1, nth, blocks) * rb;
    if (r1 > m) r1 = m;
    if (r0 >= r1) return;
    if (t->one_order)
        t->k->matmul_each(t->w, t->x, t->n, t->y, r0, r1);
    else
        t->k->matmul_rows(t->w, t->x, t->n, t->y, r0, r1);
}

/* Threads worth a hand-off (~1 us each) for work multiply-adds: ~16k each at least (a
 * 80 x 1536 projection on one thread left the other spinning for most of its 6 us). */
static int matmul_threads(const struct rops_exec *ex, int64_t work) {
    int64_t nth = ex->n_threads;
    if (nth > work / 16384) nth = work / 16384;
    return nth < 1 ? 1 : (int)nth;
}

static void matmul_f32_inputs(const struct rops_exec *ex, const struct rops_mat *w, const float *x,
                              int64_t n, float *y) {
    struct matmul_task t = {w, x, n, y, rops_kernels_of(ex->isa), ex->one_order && n > 1, ex->pool};
    rpool_run_keyed(ex->pool, matmul_thread, &t, matmul_threads(ex, w->n_rows * w->n_cols * n),
                    w->data);
}

struct q8_task {
    struct rops_q8_args a;
    const struct rops_kernels *k;
};

/* A thread's share of the rows, in blocks of 8 (the vector kernels' rows in lanes). */
static void q8_thread(void *arg, int ith, int nth) {
    const struct q8_task *t = arg;
    const int64_t blocks = (t->a.w->n_rows + 7) / 8;
    int64_t r0 = blocks * ith / nth * 8, r1 = blocks * (ith + 1) / nth * 8;
    if (r1 > t->a.w->n_rows) r1 = t->a.w->n_rows;
    if (r0 >= r1) return;
    t->k->q8_rows(&t->a, r0, r1);
}

/* Columns of the inputs quantized at a time: with three inputs, 3 x 128 blocks on the caller's
 * stack. */
#define Q8_TILE 4096

struct q8_quant_task {
    const float *x;
    int64_t k, nb;
    struct rops_xq8 *xq;
    int64_t n;
    const struct rops_kernels *k_;
};

static void q8_quant_thread(void *arg, int ith, int nth) {
    const struct q8_quant_task *t = arg;
    for (int64_t i = t->n * ith / nth; i < t->n * (ith + 1) / nth; i++)
        t->k_->quantize_x(t->x + i * t->k, t->nb, t->xq + i * t->nb);
}

/* Block weights, n inputs into xq (room for n x a tile's blocks): the inputs quantized a tile
 * of columns at a time, then integer dot products. */
static void matmul_q8_group(const struct rops_exec *ex, const struct rops_mat *w, const float *x,
                            int64_t n, float *y, struct rops_xq8 *xq) {
    const struct rops_kernels *K = rops_kernels_of(ex->isa);
    const int64_t k = w->n_cols;
    for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
        const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
        struct q8_quant_task qt = {x + c0, k, nb, xq, n, K};
        rpool_run(ex->pool, q8_quant_thread, &qt, n > 3 ? matmul_threads(ex, n * nb * 32 * 64) : 1);
        struct q8_task t = {{w, xq, n, c0 / 32, nb, c0 > 0, y}, K};
        rpool_run(ex->pool, q8_thread, &t, matmul_threads(ex, w->n_rows * nb * 32 * n));
    }
}

/* ... three inputs at most, on the stack. */
static void matmul_q8_small(const struct rops_exec *ex, const struct rops_mat *w, const float *x,
                            int64_t n, float *y) {
    struct rops_xq8 xq[3 * Q8_TILE / 32];
    matmul_q8_group(ex, w, x, n, y, xq);
}

static bool block_type(enum rops_type type) {
    return type == ROPS_TYPE_Q8_0 || type == ROPS_TYPE_Q4_0;
}

/* Quantized input blocks of a tile of n inputs of k columns. */
static int64_t q8_tile_blocks(int64_t n, int64_t k) {
    return n * ((k < Q8_TILE ? k : Q8_TILE) / 32);
}

size_t rops_matmul_scratch_bytes(const struct rops_mat *w, int64_t n) {
    if (rops_qmatmul_type(w->type)) return (size_t)n * rops_qmatmul_input_bytes(w->type, w->n_cols);
    if (block_type(w->type) && n > 3)
        return (size_t)q8_tile_blocks(n, w->n_cols) * sizeof(struct rops_xq8);
    return 0;
}

void rops_matmul(const struct rops_exec *ex, const struct rops_mat *w, const float *x, int64_t n,
                 float *y) {
    assert(rops_type_supported(w->type, w->n_cols) && "a matrix the loader did not check");
    if (n < 1) return; /* the AVX2 gemv would take n = 0 for its 3-input kernel */
    if (rops_qmatmul_type(w->type)) {
        if (n <= ROPS_BATCH_MAX_N) /* one hand-off for all its column tiles */
            rops_matmul_batch(ex, &(struct rops_matjob){w, x, n, y}, 1);
        else
            rops_qmatmul(ex, w, x, n, y, matmul_threads(ex, w->n_rows * w->n_cols * n));
        return;
    }
    if (!block_type(w->type)) {
        matmul_f32_inputs(ex, w, x, n, y);
        return;
    }
    /* integer dots for any number of inputs, each input's sums in the same steps however many
       share the call (x86/q8.h: straight from the weights, or through a panel for a prompt):
       a token's bits are the same alone, beside other sequences or in a prompt (the prompt's
       inputs rounded through q8_0 into the f32 tiles gave other last bits, and a quantized
       input downstream may then round the other way); as many inputs a call as the scratch
       holds, else three */
    const int64_t k = w->n_cols, m = w->n_rows;
    const int64_t group =
        ex->scratch ? (int64_t)(ex->scratch_bytes / sizeof(struct rops_xq8)) / q8_tile_blocks(1, k)
                    : 0;
    for (int64_t i = 0; i < n;) {
        if (group > 3 && n - i > 3) {
            const int64_t g = n - i < group ? n - i : group;
            matmul_q8_group(ex, w, x + i * k, g, y + i * m, ex->scratch);
            i += g;
            continue;
        }
        const int64_t g = n - i < 3 ? n - i : 3;
        matmul_q8_small(ex, w, x + i * k, g, y + i * m);
        i += g;
    }
}

/* ---- batches of products ------------------------------------------------------------------- */

/* Products one parallel call of a batch takes at most: RWKV's largest batch has 7 jobs, 42
 * products at 16 inputs with block weights (three inputs a product) */
#define BATCH_UNITS 48
/* Quantized input blocks a batch holds on its stack when ex->scratch holds fewer: as many as
 * matmul_q8_small's (three inputs of Q8_TILE columns) */
#define BATCH_STACK_BLOCKS (3 * Q8_TILE / 32)

/* One product of a batch call. Float weights: n f32 inputs x. q8_0 / q4_0 weights: n <= 3
 * inputs quantized into xq by column tiles of Q8_TILE, as matmul_q8_small takes them (the tile
 * from column c0 holds n x its blocks from xq + n * c0 / 32). The other block types: all n
 * inputs quantized whole into qx (rops_qmatmul_quantize). */
struct batch_unit {
    const struct rops_mat *w;
    const float *x;
    const struct rops_xq8 *xq;
    const uint8_t *qx;
    int64_t n;
    float *y;
    int64_t grain;      /* rows per block of the threads' split, as rops_matmul's */
    int64_t block_cost; /* a block of rows' row_cost */
    int64_t blocks;
};

struct batch_task {
    struct batch_unit u[BATCH_UNITS];
    int n_units;
    int64_t cost; /* of all blocks of all units */
    int64_t work; /* multiply-adds of all units, for matmul_threads */
    const struct rops_kernels *k;
    bool one_order;           /* rops_exec's */
    const struct rpool *pool; /* the threads' parts (rpool_share) */
};

/* A row's share of a batch's time, in bytes' worth of streaming from memory. One input streams
 * the weights whatever their type (the q4_K product's integer work hides under its loads), and
 * each row adds a fixed cost, its sum's reduction and store (ROW_FIXED_BYTES: counting bytes
 * alone, RWKV-7's LoRA ups, rows of 64 to 256 bytes, left the worker 2-3 us behind the caller's
 * 12). More inputs are bound by their multiply-adds too. Shares that counted one input's
 * multiply-adds gave RWKV-7's q4_K rows twice their time against its f16 LoRA rows: the worker,
 * whose share ends with the LoRA units, took 39 us of a product batch the caller did in 28
 * (bench/RESULTS.md). */
#define ROW_FIXED_BYTES 128

static int64_t row_cost(const struct rops_mat *w, int64_t n) {
    const int64_t bytes = (int64_t)w->row_bytes + ROW_FIXED_BYTES;
    return n == 1 ? bytes : bytes + 2 * w->n_cols * n;
}

/* Rows [r0, r1) of a unit, by the kernels rops_matmul runs for it: each row's sums do not
 * depend on which rows share its call, so the results are rops_matmul's. */
static void batch_rows(const struct rops_kernels *K, const struct batch_unit *u, int64_t r0,
                       int64_t r1, bool one_order) {
    if (u->qx) {
        rops_qmatmul_rows(K, u->w, u->qx, u->n, u->y, r0, r1);
        return;
    }
    if (!u->xq) {
        if (one_order && u->n > 1)
            K->matmul_each(u->w, u->x, u->n, u->y, r0, r1);
        else
            K->matmul_rows(u->w, u->x, u->n, u->y, r0, r1);
        return;
    }
    const int64_t k = u->w->n_cols;
    for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
        const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
        const struct rops_q8_args a = {u->w, u->xq + u->n * (c0 / 32), u->n, c0 / 32, nb, c0 > 0,
                                       u->y};
        K->q8_rows(&a, r0, r1);
    }
}

/* The blocks of all units laid end to end by cost whose start falls in [lo, hi). */
static void batch_part(const struct batch_task *t, int64_t lo, int64_t hi) {
    int64_t at = 0;
    for (int i = 0; i < t->n_units && at < hi; i++) {
        const struct batch_unit *u = &t->u[i];
        const int64_t bc = u->block_cost;
        int64_t b0 = lo > at ? (lo - at + bc - 1) / bc : 0;
        int64_t b1 = (hi - at + bc - 1) / bc;
        if (b0 > u->blocks) b0 = u->blocks;
        if (b1 > u->blocks) b1 = u->blocks;
        at += u->blocks * bc;
        if (b0 >= b1) continue;
        const int64_t r1 = b1 * u->grain < u->w->n_rows ? b1 * u->grain : u->w->n_rows;
        batch_rows(t->k, u, b0 * u->grain, r1, t->one_order);
    }
}

/* Shares of the cost by the threads' recent speeds (rpool_share), a thread's blocks contiguous
 * (parts claimed in turn from a counter, 32 KiB of weights each, so that a slower thread took
 * fewer, made generation 1.3x slower: each thread's weights then came in short streams). */
static void batch_thread(void *arg, int ith, int nth) {
    const struct batch_task *t = arg;
    batch_part(t, rpool_share(t->pool, ith, nth, t->cost),
               rpool_share(t->pool, ith + 1, nth, t->cost));
}

static void batch_flush(const struct rops_exec *ex, struct batch_task *t) {
    t->pool = ex->pool;
    if (t->n_units > 0)
        rpool_run_keyed(ex->pool, batch_thread, t, matmul_threads(ex, t->work), t->u[0].w->data);
    t->n_units = 0;
    t->cost = 0;
    t->work = 0;
}

/* Adds a job with weights of rops_qmatmul's types to t: its inputs quantized whole into buf
 * (cap blocks, used of them taken) on the caller, a unit of all of them (the kernels take the
 * inputs four at a time); a job wider than buf goes alone through rops_qmatmul (false). */
static bool batch_qdot(const struct rops_exec *ex, struct batch_task *t,
                       const struct rops_matjob *jb, struct rops_xq8 *buf, int64_t cap,
                       int64_t *used) {
    const int64_t k = jb->w->n_cols, m = jb->w->n_rows;
    const size_t bytes = (size_t)jb->n * rops_qmatmul_input_bytes(jb->w->type, k);
    const size_t room = (size_t)cap * sizeof *buf;
    if (bytes > room) {
        rops_qmatmul(ex, jb->w, jb->x, jb->n, jb->y, matmul_threads(ex, m * k * jb->n));
        return false;
    }
    /* q8_K's blocks hold floats: each input's blocks from a 64-byte boundary of buf */
    size_t start = ((size_t)*used * sizeof *buf + 63) & ~(size_t)63;
    if (t->n_units == BATCH_UNITS || start + bytes > room) {
        batch_flush(ex, t);
        start = 0;
    }
    uint8_t *qx = (uint8_t *)buf + start;
    rops_qmatmul_quantize(t->k, jb->w, jb->x, jb->n, qx);
    *used = (int64_t)((start + bytes + sizeof *buf - 1) / sizeof *buf);
    struct batch_unit *u = &t->u[t->n_units++];
    *u = (struct batch_unit){jb->w, jb->x, NULL, qx, jb->n, jb->y, rops_qmatmul_grain(jb->w, jb->n),
                             0,     0};
    u->block_cost = u->grain * row_cost(jb->w, jb->n);
    t->work += m * k * jb->n;
    u->blocks = (m + u->grain - 1) / u->grain;
    t->cost += u->blocks * u->block_cost;
    return true;
}

static void batch_init(const struct rops_exec *ex, struct batch_task *t) {
    t->n_units = 0;
    t->cost = 0;
    t->work = 0;
    t->k = rops_kernels_of(ex->isa);
    t->one_order = ex->one_order;
}

/* Adds job jb (1..ROPS_BATCH_MAX_N inputs) to t, its quantized inputs in buf (cap blocks, used of
 * them taken): t's units run first when it has no room left, and a job wider than buf runs
 * alone at once. True when all of the job is in t's units, false when some of it ran alone. */
static bool batch_add(const struct rops_exec *ex, struct batch_task *t,
                      const struct rops_matjob *jb, struct rops_xq8 *buf, int64_t cap,
                      int64_t *used) {
    const int64_t k = jb->w->n_cols, m = jb->w->n_rows;
    if (rops_qmatmul_type(jb->w->type)) return batch_qdot(ex, t, jb, buf, cap, used);
    const bool q = block_type(jb->w->type);
    bool queued = true;
    /* block weights: three inputs a product, as rops_matmul takes them */
    for (int64_t i = 0; i < jb->n;) {
        const int64_t g = !q ? jb->n : jb->n - i < 3 ? jb->n - i : 3;
        const int64_t n_blocks = q ? g * (k / 32) : 0;
        if (n_blocks > cap) { /* wider than any buffer here: alone, in column tiles */
            matmul_q8_small(ex, jb->w, jb->x + i * k, g, jb->y + i * m);
            queued = false;
            i += g;
            continue;
        }
        if (t->n_units == BATCH_UNITS || *used + n_blocks > cap) { /* full: run what it holds */
            batch_flush(ex, t);
            *used = 0;
        }
        struct batch_unit *u = &t->u[t->n_units++];
        *u = (struct batch_unit){
            jb->w, jb->x + i * k, NULL, NULL, g, jb->y + i * m, !q && g > 3 ? 8 : ROPS_RB, 0, 0};
        if (q) {
            struct rops_xq8 *xq = buf + *used;
            for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
                const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
                for (int64_t ii = 0; ii < g; ii++)
                    t->k->quantize_x(jb->x + (i + ii) * k + c0, nb, xq + g * (c0 / 32) + ii * nb);
            }
            u->xq = xq;
            *used += n_blocks;
        }
        u->block_cost = u->grain * row_cost(jb->w, g);
        t->work += m * k * g;
        u->blocks = (m + u->grain - 1) / u->grain;
        t->cost += u->blocks * u->block_cost;
        i += g;
    }
    return queued;
}

void rops_matmul_batch(const struct rops_exec *ex, const struct rops_matjob *jobs, int n_jobs) {
    /* the prompts' first: rops_matmul may use the scratch, which the quantized inputs of the
       batch below are about to fill */
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].n > ROPS_BATCH_MAX_N)
            rops_matmul(ex, jobs[j].w, jobs[j].x, jobs[j].n, jobs[j].y);
    _Alignas(64) struct rops_xq8 stack[BATCH_STACK_BLOCKS];
    struct rops_xq8 *buf = stack;
    int64_t cap = BATCH_STACK_BLOCKS, used = 0;
    if (ex->scratch && ex->scratch_bytes / sizeof(struct rops_xq8) > (size_t)cap) {
        buf = ex->scratch;
        cap = (int64_t)(ex->scratch_bytes / sizeof(struct rops_xq8));
    }
    struct batch_task t;
    batch_init(ex, &t);
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].n >= 1 && jobs[j].n <= ROPS_BATCH_MAX_N && jobs[j].w->n_rows >= 1)
            (void)batch_add(ex, &t, &jobs[j], buf, cap, &used);
    batch_flush(ex, &t);
}

/* ---- small elementwise --------------------------------------------------------------------- */

void rops_rmsnorm(enum rops_isa isa, const float *x, const float *weight, int64_t k, float eps,
                  float *out) {
    rops_kernels_of(isa)->rmsnorm(x, weight, k, eps, out);
}

float rops_silu(float x) {
    return x / (1.0f + expf(-x));
}

float rops_softplus(float x) {
    /* log(1 + e^x) without overflow for large x or loss for very negative x */
    return x > 20.0f ? x : log1pf(expf(x));
}

void rops_softplus_bias(enum rops_isa isa, float *x, const float *bias, int64_t n_rows,
                        int64_t n_cols) {
    rops_kernels_of(isa)->softplus_bias(x, bias, n_rows, n_cols);
}

struct map_task {
    enum rops_map f;
    float *x;
    int64_t ld;
    const float *bias;
    int64_t n_rows, n_cols;
    const struct rops_kernels *k;
};

static void map_thread(void *arg, int ith, int nth) {
    const struct map_task *t = arg;
    t->k->map_rows(t->f, t->x, t->ld, t->bias, t->n_cols, t->n_rows * ith / nth,
                   t->n_rows * (ith + 1) / nth);
}

void rops_map(const struct rops_exec *ex, enum rops_map f, float *x, int64_t ld, const float *bias,
              int64_t n_rows, int64_t n_cols) {
    struct map_task t = {f, x, ld, bias, n_rows, n_cols, rops_kernels_of(ex->isa)};
    /* a share of 16k values (a few microseconds of vector exps) outweighs a hand-off; a single
       row (generation) stays on the caller */
    int64_t nth = n_rows * n_cols / 16384;
    if (nth > ex->n_threads) nth = ex->n_threads;
    if (nth > n_rows) nth = n_rows;
    if (nth <= 1 || !ex->pool)
        t.k->map_rows(f, x, ld, bias, n_cols, 0, n_rows);
    else
        rpool_run(ex->pool, map_thread, &t, (int)nth);
}

/* ---- Mamba's conv and scan ----------------------------------------------------------------- */

struct ssm_task {
    const struct rops_conv_args *conv; /* one of the two */
    const struct rops_scan_args *scan;
    int64_t d_inner;
    const struct rops_kernels *k;
    const struct batch_unit *dt; /* NULL, or the scan's dt product (rops_scan_args.dt_proj) */
    bool one_order;
    const struct rpool *pool; /* the threads' channels (rpool_share) */
};

static void ssm_thread(void *arg, int ith, int nth) {
    const struct ssm_task *t = arg;
    /* channels in runs of 16 (an AVX-512 vector) per thread: a thread's dt rows then start
       where a whole row's vectors do, and softplus_bias gives them the same bits */
    const int64_t groups = (t->d_inner + 15) / 16;
    int64_t c0 = rpool_share(t->pool, ith, nth, groups) * 16,
            c1 = rpool_share(t->pool, ith + 1, nth, groups) * 16;
    if (c1 > t->d_inner) c1 = t->d_inner;
    if (c0 >= c1) return;
    if (t->conv) {
        t->k->conv_channels(t->conv, c0, c1);
        return;
    }
    if (t->dt) { /* one token: its dt rows of these channels */
        const struct rops_dt_proj *p = t->scan->dt_proj;
        batch_rows(t->k, t->dt, c0, c1, t->one_order);
        t->k->softplus_bias(p->dt + c0, p->bias + c0, 1, c1 - c0);
    }
    t->k->scan_channels(t->scan, c0, c1);
}

static int ssm_threads(const struct rops_exec *ex, int64_t work) {
    int64_t nth = ex->n_threads;
    if (nth > work / 4096) nth = work / 4096;
    return nth < 1 ? 1 : (int)nth;
}

/* The conv is shared out from a quarter of ssm_threads' work: one token's conv reads its
 * weights and state from memory (the whole model streamed since the last token), 36 bytes a
 * channel, and on the caller alone Mamba's 1536 channels took 3.5 us of each layer, 2.2 us in
 * two threads (bench/RESULTS.md). */
void rops_ssm_conv(const struct rops_exec *ex, const struct rops_conv_args *a) {
    struct ssm_task t = {a, NULL, a->d_inner, rops_kernels_of(ex->isa), NULL, false, ex->pool};
    rpool_run_keyed(ex->pool, ssm_thread, &t,
                    ssm_threads(ex, 4 * a->n_seqs * a->n_tok * a->d_inner * a->d_conv), a->w);
}

/* Input blocks a scan's dt product may take on the stack: Falcon-Mamba-7B's dt_rank of 256 */
#define DT_STACK_BLOCKS 16

/* With dt_proj, one token's dt product goes in the scan's own hand-off: as a product of its own
 * it was Mamba's smallest (48 x 1536), a hand-off and a wait for 147 KB, then softplus on the
 * caller alone (bench/RESULTS.md). */
void rops_ssm_scan(const struct rops_exec *ex, const struct rops_scan_args *a) {
    const struct rops_dt_proj *p = a->dt_proj;
    struct ssm_task t = {NULL,          a,       a->d_inner, rops_kernels_of(ex->isa), NULL,
                         ex->one_order, ex->pool};
    struct batch_task dt;
    _Alignas(64) struct rops_xq8 buf[DT_STACK_BLOCKS];
    if (p) {
        assert(p->dt == a->dt && p->w->n_rows == a->d_inner);
        const int64_t n = a->n_seqs * a->n_tok;
        int64_t used = 0;
        batch_init(ex, &dt);
        /* one token's product a unit for the scan's threads; else (more tokens, or an input
           wider than the stack holds, whose product batch_add then ran alone) made here */
        if (n == 1 && batch_add(ex, &dt, &(struct rops_matjob){p->w, p->x, 1, p->dt}, buf,
                                DT_STACK_BLOCKS, &used)) {
            assert(dt.n_units == 1);
            t.dt = &dt.u[0];
        } else {
            if (n > 1) rops_matmul(ex, p->w, p->x, n, p->dt);
            rops_softplus_bias(ex->isa, p->dt, p->bias, n, a->d_inner);
        }
    }
    rpool_run_keyed(ex->pool, ssm_thread, &t,
                    ssm_threads(ex, a->n_seqs * a->n_tok * a->d_inner * a->d_state), a->A);
}

/* ---- Mamba-2's scan ------------------------------------------------------------------------ */

struct scan2_task {
    const struct rops_scan2_args *a;
    const struct rops_kernels *k;
    const struct rpool *pool; /* the threads' heads (rpool_share) */
};

static void scan2_thread(void *arg, int ith, int nth) {
    const struct scan2_task *t = arg;
    const int64_t h0 = rpool_share(t->pool, ith, nth, t->a->n_head),
                  h1 = rpool_share(t->pool, ith + 1, nth, t->a->n_head);
    t->k->scan2_heads(t->a, h0, h1);
}

void rops_ssm_scan2(const struct rops_exec *ex, const struct rops_scan2_args *a) {
    struct scan2_task t = {a, rops_kernels_of(ex->isa), ex->pool};
    int64_t nth = ssm_threads(ex, a->n_seqs * a->n_tok * a->d_inner * a->d_state);
    if (nth > a->n_head) nth = a->n_head;
    rpool_run_keyed(ex->pool, scan2_thread, &t, (int)nth, a->A);
}
