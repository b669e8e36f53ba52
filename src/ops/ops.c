/*
 * Dispatch, threading and the portable C kernels (see ops.h). The portable path is the
 * definition the vectorised one is tested against: written for clarity, 4 weight rows and
 * ROPS_KT columns at a time (the vectorised prompt path tiles differently: the two agree
 * within float rounding, not bit for bit).
 */
#include "ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include <math.h>
#include <string.h>
#include <time.h>

#include "../core/core.h"
#include "ops_impl.h"

/* ---- instruction sets ---------------------------------------------------------------------- */

enum rops_isa rops_isa_best(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* F16C through CPUID (leaf 1, ECX bit 29): clang 14 does not know "f16c" as a name */
    unsigned a, b, c, d;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    if (rops_have_avx2_kernels() && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && f16c)
        return ROPS_ISA_AVX2;
#endif
    return ROPS_ISA_SCALAR;
}

const char *rops_isa_name(enum rops_isa isa) {
    return isa == ROPS_ISA_AVX2 ? "avx2" : "scalar";
}

/* ---- weights ------------------------------------------------------------------------------- */

int rops_type_supported(uint32_t type, int64_t n_cols) {
    switch (type) {
    case TYPE_F32:
    case TYPE_F16:
    case TYPE_BF16:
        return 1;
    case TYPE_Q8_0:
    case TYPE_Q4_0:
        return n_cols % 32 == 0;
    default:
        return 0;
    }
}

/* Columns [c0, c0 + kt) of row r as f32; for the block types c0 and kt are multiples of 32. */
static void row_tile(const struct rops_mat *w, int64_t r, int64_t c0, int64_t kt, float *out) {
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    switch (w->type) {
    case TYPE_F32:
        memcpy(out, row + c0 * 4, sizeof(float) * (size_t)kt);
        break;
    case TYPE_F16:
        rcore_row_to_f32(RCORE_TYPE_F16, out, row + c0 * 2, (size_t)kt);
        break;
    case TYPE_BF16:
        rcore_row_to_f32(RCORE_TYPE_BF16, out, row + c0 * 2, (size_t)kt);
        break;
    case TYPE_Q8_0: {
        const struct rops_block_q8_0 *b = (const struct rops_block_q8_0 *)row + c0 / 32;
        for (int64_t i = 0; i < kt / 32; i++) {
            const float d = rcore_f16_to_f32(b[i].d);
            for (int j = 0; j < 32; j++) out[i * 32 + j] = d * (float)b[i].qs[j];
        }
        break;
    }
    case TYPE_Q4_0: {
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
    default:
        memset(out, 0, sizeof(float) * (size_t)kt);
        break;
    }
}

void rops_get_row(const struct rops_mat *w, int64_t r, float *out) {
    row_tile(w, r, 0, w->n_cols, out);
}

size_t rops_row_bytes(uint32_t type, int64_t n) {
    if (!rops_type_supported(type, n) || n < 0) return 0;
    switch (type) {
    case TYPE_F32:
        return 4 * (size_t)n;
    case TYPE_F16:
    case TYPE_BF16:
        return 2 * (size_t)n;
    case TYPE_Q8_0:
        return (size_t)n / 32 * sizeof(struct rops_block_q8_0);
    default: /* q4_0 */
        return (size_t)n / 32 * sizeof(struct rops_block_q4_0);
    }
}

/* One q8_0 block as ggml's reference quantizer makes it: the quants into qs, the scale (f16)
 * returned. */
static uint16_t q8_block(const float *x, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = (int8_t)roundf(x[j] * id);
    return rcore_f32_to_f16(d);
}

void rops_quantize_x_scalar(const float *x, int64_t n_blocks, struct rops_xq8 *out) {
    for (int64_t b = 0; b < n_blocks; b++)
        out[b].d = rcore_f16_to_f32(q8_block(x + 32 * b, out[b].qs));
}

bool rops_quantize_row(uint32_t type, const float *src, int64_t n, void *dst) {
    if ((type != TYPE_Q8_0 && type != TYPE_Q4_0) || n % 32 != 0) return false;
    for (int64_t b = 0; b < n / 32; b++) {
        const float *x = src + b * 32;
        if (type == TYPE_Q8_0) {
            struct rops_block_q8_0 *q = (struct rops_block_q8_0 *)dst + b;
            q->d = q8_block(x, q->qs);
        } else {
            struct rops_block_q4_0 *q = (struct rops_block_q4_0 *)dst + b;
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < 32; j++)
                if (fabsf(x[j]) > amax) {
                    amax = fabsf(x[j]);
                    max = x[j];
                }
            const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            q->d = rcore_f32_to_f16(d);
            for (int j = 0; j < 16; j++) {
                const int lo = (int)(x[j] * id + 8.5f), hi = (int)(x[j + 16] * id + 8.5f);
                q->qs[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
            }
        }
    }
    return true;
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
            for (int64_t j = 0; j < rb; j++) row_tile(w, r + j, k0, kt, panel[j]);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < rb; j++) {
                    const float d = dot(panel[j], x + i * k + k0, kt);
                    y[i * m + r + j] = k0 == 0 ? d : y[i * m + r + j] + d;
                }
        }
    }
}

/* The integer quants of weight block b of a q8_0 / q4_0 row, and its scale. */
static float block_quants(uint32_t type, const uint8_t *row, int64_t b, int q[32]) {
    if (type == TYPE_Q8_0) {
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

void rops_matmul_q8_rows_scalar(const struct rops_q8_args *a, int64_t r0, int64_t r1) {
    const int64_t m = a->w->n_rows;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)a->w->data + (size_t)r * a->w->row_bytes;
        float s[3] = {0, 0, 0};
        for (int64_t b = 0; b < a->nb; b++) {
            int q[32];
            const float dw = block_quants(a->w->type, row, a->b0 + b, q);
            for (int64_t i = 0; i < a->n; i++) {
                const struct rops_xq8 *xb = &a->xq[i * a->nb + b];
                int32_t isum = 0; /* exact: 32 products of at most 128 * 127 */
                for (int j = 0; j < 32; j++) isum += q[j] * xb->qs[j];
                s[i] += dw * xb->d * (float)isum;
            }
        }
        for (int64_t i = 0; i < a->n; i++)
            a->y[i * m + r] = a->accumulate ? a->y[i * m + r] + s[i] : s[i];
    }
}

struct matmul_task {
    const struct rops_mat *w;
    const float *x;
    int64_t n;
    float *y;
    enum rops_isa isa;
};

static void matmul_thread(void *arg, int ith, int nth) {
    const struct matmul_task *t = arg;
    /* whole blocks of rows per thread, as even as the blocks allow; the prompt kernels' (8)
       where they run, else ROPS_RB */
    const int64_t rb = t->n > 3 ? 8 : ROPS_RB;
    const int64_t blocks = (t->w->n_rows + rb - 1) / rb;
    int64_t r0 = blocks * ith / nth * rb, r1 = blocks * (ith + 1) / nth * rb;
    if (r1 > t->w->n_rows) r1 = t->w->n_rows;
    if (r0 >= r1) return;
    if (t->isa == ROPS_ISA_AVX2)
        rops_matmul_rows_avx2(t->w, t->x, t->n, t->y, r0, r1);
    else
        rops_matmul_rows_scalar(t->w, t->x, t->n, t->y, r0, r1);
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
    struct matmul_task t = {w, x, n, y, ex->isa};
    rpool_run(ex->pool, matmul_thread, &t, matmul_threads(ex, w->n_rows * w->n_cols * n));
}

static void quantize_x(enum rops_isa isa, const float *x, int64_t n_blocks, struct rops_xq8 *out) {
    if (isa == ROPS_ISA_AVX2)
        rops_quantize_x_avx2(x, n_blocks, out);
    else
        rops_quantize_x_scalar(x, n_blocks, out);
}

struct q8_task {
    struct rops_q8_args a;
    enum rops_isa isa;
};

static void q8_thread(void *arg, int ith, int nth) {
    const struct q8_task *t = arg;
    const int64_t blocks = (t->a.w->n_rows + ROPS_RB - 1) / ROPS_RB;
    int64_t r0 = blocks * ith / nth * ROPS_RB, r1 = blocks * (ith + 1) / nth * ROPS_RB;
    if (r1 > t->a.w->n_rows) r1 = t->a.w->n_rows;
    if (r0 >= r1) return;
    if (t->isa == ROPS_ISA_AVX2)
        rops_matmul_q8_rows_avx2(&t->a, r0, r1);
    else
        rops_matmul_q8_rows_scalar(&t->a, r0, r1);
}

/* Columns of up to three inputs quantized at a time: 3 x 128 blocks on the caller's stack. */
#define Q8_TILE 4096

/* Block weights, n <= 3: the inputs quantized, then integer dot products. */
static void matmul_q8_small(const struct rops_exec *ex, const struct rops_mat *w, const float *x,
                            int64_t n, float *y) {
    struct rops_xq8 xq[3 * Q8_TILE / 32];
    const int64_t k = w->n_cols;
    for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
        const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
        for (int64_t i = 0; i < n; i++) quantize_x(ex->isa, x + i * k + c0, nb, xq + i * nb);
        struct q8_task t = {{w, xq, n, c0 / 32, nb, c0 > 0, y}, ex->isa};
        rpool_run(ex->pool, q8_thread, &t, matmul_threads(ex, w->n_rows * nb * 32 * n));
    }
}

struct round_task {
    const float *x;
    int64_t n, k;
    float *out;
    enum rops_isa isa;
};

/* Inputs [i0, i1) through q8_0 and back: out = d * q. */
static void round_thread(void *arg, int ith, int nth) {
    const struct round_task *t = arg;
    struct rops_xq8 q[64];
    for (int64_t i = t->n * ith / nth; i < t->n * (ith + 1) / nth; i++)
        for (int64_t c0 = 0; c0 < t->k; c0 += 64 * 32) {
            const int64_t nb = (t->k - c0 < 64 * 32 ? t->k - c0 : 64 * 32) / 32;
            quantize_x(t->isa, t->x + i * t->k + c0, nb, q);
            float *o = t->out + i * t->k + c0;
            for (int64_t b = 0; b < nb; b++)
                for (int j = 0; j < 32; j++) o[b * 32 + j] = q[b].d * (float)q[b].qs[j];
        }
}

static bool block_type(uint32_t type) {
    return type == TYPE_Q8_0 || type == TYPE_Q4_0;
}

size_t rops_matmul_scratch_bytes(const struct rops_mat *w, int64_t n) {
    return block_type(w->type) && n > 3 ? (size_t)n * (size_t)w->n_cols * sizeof(float) : 0;
}

void rops_matmul(const struct rops_exec *ex, const struct rops_mat *w, const float *x, int64_t n,
                 float *y) {
    if (n < 1) return; /* the AVX2 gemv would take n = 0 for its 3-input kernel */
    if (!block_type(w->type)) {
        matmul_f32_inputs(ex, w, x, n, y);
        return;
    }
    const int64_t k = w->n_cols, m = w->n_rows;
    /* up to 16 inputs (generation of a few sequences): three at a time by integer dots, which
       read the weights once per three inputs yet measured 1.5-2x the f32 tiles there (x4:
       190 -> 405 t/s on the 130m shape); more: through q8_0 into the scratch, as many as it
       holds, then the f32 tiles (without room for 4, integer dots again; same results) */
    const int64_t group = ex->scratch ? (int64_t)(ex->scratch_bytes / sizeof(float)) / k : 0;
    for (int64_t i = 0; i < n;) {
        if (n <= 16 || n - i <= 3 || group < 4) {
            const int64_t g = n - i < 3 ? n - i : 3;
            matmul_q8_small(ex, w, x + i * k, g, y + i * m);
            i += g;
            continue;
        }
        const int64_t g = n - i < group ? n - i : group;
        struct round_task rt = {x + i * k, g, k, ex->scratch, ex->isa};
        rpool_run(ex->pool, round_thread, &rt, matmul_threads(ex, g * k * 64));
        matmul_f32_inputs(ex, w, ex->scratch, g, y + i * m);
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

/* One product of a batch call. Float weights: n f32 inputs x. Block weights: n <= 3 inputs
 * quantized into xq by column tiles of Q8_TILE, as matmul_q8_small takes them (the tile
 * from column c0 holds n x its blocks from xq + n * c0 / 32). */
struct batch_unit {
    const struct rops_mat *w;
    const float *x;
    const struct rops_xq8 *xq;
    int64_t n;
    float *y;
    int64_t grain;      /* rows per block of the threads' split, as rops_matmul's */
    int64_t block_cost; /* a block of rows' weight bytes plus twice its multiply-adds */
    int64_t blocks;
};

struct batch_task {
    struct batch_unit u[BATCH_UNITS];
    int n_units;
    int64_t cost; /* of all blocks of all units */
    int64_t work; /* multiply-adds of all units, for matmul_threads */
    enum rops_isa isa;
};

/* Rows [r0, r1) of a unit, by the kernels rops_matmul runs for it: each row's sums do not
 * depend on which rows share its call, so the results are rops_matmul's. */
static void batch_rows(enum rops_isa isa, const struct batch_unit *u, int64_t r0, int64_t r1) {
    if (!u->xq) {
        if (isa == ROPS_ISA_AVX2)
            rops_matmul_rows_avx2(u->w, u->x, u->n, u->y, r0, r1);
        else
            rops_matmul_rows_scalar(u->w, u->x, u->n, u->y, r0, r1);
        return;
    }
    const int64_t k = u->w->n_cols;
    for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
        const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
        const struct rops_q8_args a = {u->w, u->xq + u->n * (c0 / 32), u->n, c0 / 32, nb, c0 > 0,
                                       u->y};
        if (isa == ROPS_ISA_AVX2)
            rops_matmul_q8_rows_avx2(&a, r0, r1);
        else
            rops_matmul_q8_rows_scalar(&a, r0, r1);
    }
}

static void batch_thread(void *arg, int ith, int nth) {
    const struct batch_task *t = arg;
    /* all units' blocks laid end to end by cost: this thread takes those whose start falls
       in its share [lo, hi), so every block goes to exactly one thread */
    const int64_t lo = t->cost * ith / nth, hi = t->cost * (ith + 1) / nth;
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
        batch_rows(t->isa, u, b0 * u->grain, r1);
    }
}

static void batch_flush(const struct rops_exec *ex, struct batch_task *t) {
    if (t->n_units > 0) rpool_run(ex->pool, batch_thread, t, matmul_threads(ex, t->work));
    t->n_units = 0;
    t->cost = 0;
    t->work = 0;
}

void rops_matmul_batch(const struct rops_exec *ex, const struct rops_matjob *jobs, int n_jobs) {
    /* the prompts' first: rops_matmul may use the scratch, which the quantized inputs of the
       batch below are about to fill */
    for (int j = 0; j < n_jobs; j++)
        if (jobs[j].n > ROPS_BATCH_MAX_N)
            rops_matmul(ex, jobs[j].w, jobs[j].x, jobs[j].n, jobs[j].y);
    struct rops_xq8 stack[BATCH_STACK_BLOCKS];
    struct rops_xq8 *buf = stack;
    int64_t cap = BATCH_STACK_BLOCKS, used = 0;
    if (ex->scratch && ex->scratch_bytes / sizeof(struct rops_xq8) > (size_t)cap) {
        buf = ex->scratch;
        cap = (int64_t)(ex->scratch_bytes / sizeof(struct rops_xq8));
    }
    struct batch_task t;
    t.n_units = 0;
    t.cost = 0;
    t.work = 0;
    t.isa = ex->isa;
    for (int j = 0; j < n_jobs; j++) {
        const struct rops_matjob *jb = &jobs[j];
        const int64_t k = jb->w->n_cols, m = jb->w->n_rows;
        if (jb->n < 1 || jb->n > ROPS_BATCH_MAX_N || m < 1) continue;
        const bool q = block_type(jb->w->type);
        /* block weights: three inputs a product, as rops_matmul takes them */
        for (int64_t i = 0; i < jb->n;) {
            const int64_t g = !q ? jb->n : jb->n - i < 3 ? jb->n - i : 3;
            const int64_t n_blocks = q ? g * (k / 32) : 0;
            if (n_blocks > cap) { /* wider than any buffer here: alone, in column tiles */
                matmul_q8_small(ex, jb->w, jb->x + i * k, g, jb->y + i * m);
                i += g;
                continue;
            }
            if (t.n_units == BATCH_UNITS || used + n_blocks > cap) {
                batch_flush(ex, &t);
                used = 0;
            }
            struct batch_unit *u = &t.u[t.n_units++];
            *u = (struct batch_unit){
                jb->w, jb->x + i * k, NULL, g, jb->y + i * m, !q && g > 3 ? 8 : ROPS_RB, 0, 0};
            if (q) {
                struct rops_xq8 *xq = buf + used;
                for (int64_t c0 = 0; c0 < k; c0 += Q8_TILE) {
                    const int64_t nb = (k - c0 < Q8_TILE ? k - c0 : Q8_TILE) / 32;
                    for (int64_t ii = 0; ii < g; ii++)
                        quantize_x(ex->isa, jb->x + (i + ii) * k + c0, nb,
                                   xq + g * (c0 / 32) + ii * nb);
                }
                u->xq = xq;
                used += n_blocks;
            }
            /* the shares by time: a few inputs stream the weights (an f32 LoRA costs twice
               an f16 one of its shape), more are bound by their multiply-adds */
            u->block_cost = u->grain * ((int64_t)jb->w->row_bytes + 2 * k * g);
            t.work += m * k * g;
            u->blocks = (m + u->grain - 1) / u->grain;
            t.cost += u->blocks * u->block_cost;
            i += g;
        }
    }
    batch_flush(ex, &t);
}

/* ---- small elementwise --------------------------------------------------------------------- */

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

void rops_softplus_bias(enum rops_isa isa, float *x, const float *bias, int64_t n_rows,
                        int64_t n_cols) {
    if (isa == ROPS_ISA_AVX2) {
        rops_softplus_bias_avx2(x, bias, n_rows, n_cols);
        return;
    }
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t c = 0; c < n_cols; c++)
            x[i * n_cols + c] = rops_softplus(x[i * n_cols + c] + bias[c]);
}

/* ---- Mamba's conv and scan ----------------------------------------------------------------- */

void rops_conv_channels_scalar(const struct rops_ssm_args *a, int64_t c0, int64_t c1) {
    const int64_t n_prev = a->d_conv - 1, Di = a->d_inner;
    for (int64_t s = 0; s < a->n_seqs; s++) {
        const float *x = a->x + s * a->n_tok * a->x_stride;
        float *xc = a->xc + s * a->n_tok * Di;
        for (int64_t c = c0; c < c1; c++) {
            float *st = a->conv_state + (s * Di + c) * n_prev; /* oldest first */
            const float *wc = a->conv_w + c * a->d_conv;
            for (int64_t t = 0; t < a->n_tok; t++) {
                const float xt = x[t * a->x_stride + c];
                float sum = a->conv_b[c];
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

void rops_scan_channels_scalar(const struct rops_ssm_args *a, int64_t c0, int64_t c1) {
    const int64_t Di = a->d_inner, N = a->d_state;
    for (int64_t s = 0; s < a->n_seqs; s++) {
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *xt = a->u + t * Di, *dtt = a->dt + t * Di, *zt = a->z + t * a->z_stride;
            const float *Bt = a->B + t * a->bc_stride, *Ct = a->C + t * a->bc_stride;
            float *yt = a->y + t * Di;
            for (int64_t c = c0; c < c1; c++) {
                float *sc = a->ssm_state + (s * Di + c) * N;
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
                memcpy(dst + c0 * N, a->ssm_state + (s * Di + c0) * N,
                       sizeof(float) * (size_t)((c1 - c0) * N));
        }
    }
}

struct ssm_task {
    const struct rops_ssm_args *a;
    enum rops_isa isa;
    bool scan;
};

static void ssm_thread(void *arg, int ith, int nth) {
    const struct ssm_task *t = arg;
    /* channels in runs of 8 (one vector) per thread */
    const int64_t groups = (t->a->d_inner + 7) / 8;
    int64_t c0 = groups * ith / nth * 8, c1 = groups * (ith + 1) / nth * 8;
    if (c1 > t->a->d_inner) c1 = t->a->d_inner;
    if (c0 >= c1) return;
    if (!t->scan && t->isa == ROPS_ISA_AVX2)
        rops_conv_channels_avx2(t->a, c0, c1);
    else if (!t->scan)
        rops_conv_channels_scalar(t->a, c0, c1);
    else if (t->isa == ROPS_ISA_AVX2)
        rops_scan_channels_avx2(t->a, c0, c1);
    else
        rops_scan_channels_scalar(t->a, c0, c1);
}

static int ssm_threads(const struct rops_exec *ex, int64_t work) {
    int64_t nth = ex->n_threads;
    if (nth > work / 4096) nth = work / 4096;
    return nth < 1 ? 1 : (int)nth;
}

void rops_ssm_conv(const struct rops_exec *ex, float *conv_state, const float *x, int64_t x_stride,
                   int64_t n_seqs, int64_t n_tok, int64_t d_inner, int64_t d_conv, const float *w,
                   const float *b, float *xc, float *const *save) {
    struct rops_ssm_args a = {.conv_state = conv_state,
                              .save = save,
                              .x = x,
                              .x_stride = x_stride,
                              .conv_w = w,
                              .conv_b = b,
                              .xc = xc,
                              .n_seqs = n_seqs,
                              .n_tok = n_tok,
                              .d_inner = d_inner,
                              .d_conv = d_conv};
    struct ssm_task t = {&a, ex->isa, false};
    rpool_run(ex->pool, ssm_thread, &t, ssm_threads(ex, n_seqs * n_tok * d_inner * d_conv));
}

void rops_ssm_scan(const struct rops_exec *ex, float *ssm_state, const float *x, const float *dt,
                   const float *A, const float *B, const float *C, int64_t bc_stride,
                   const float *D, const float *z, int64_t z_stride, int64_t n_seqs, int64_t n_tok,
                   int64_t d_inner, int64_t d_state, float *y, float *const *save) {
    struct rops_ssm_args a = {.ssm_state = ssm_state,
                              .save = save,
                              .u = x,
                              .dt = dt,
                              .A = A,
                              .B = B,
                              .C = C,
                              .D = D,
                              .z = z,
                              .bc_stride = bc_stride,
                              .z_stride = z_stride,
                              .n_seqs = n_seqs,
                              .n_tok = n_tok,
                              .d_inner = d_inner,
                              .d_state = d_state,
                              .y = y};
    struct ssm_task t = {&a, ex->isa, true};
    rpool_run(ex->pool, ssm_thread, &t, ssm_threads(ex, n_seqs * n_tok * d_inner * d_state));
}

/* ---- machine probes ------------------------------------------------------------------------ */

double rops_probe_fma_scalar(int64_t iters) {
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

float rops_probe_sum_scalar(const float *p, size_t n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return (s0 + s1) + (s2 + s3);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct probe_task {
    enum rops_isa isa;
    int64_t iters;
    const float *buf;
    size_t n_floats;
    double flops[256];
    float sums[256];
};

static void probe_fma_thread(void *arg, int ith, int nth) {
    struct probe_task *t = arg;
    (void)nth;
    t->flops[ith] =
        t->isa == ROPS_ISA_AVX2 ? rops_probe_fma_avx2(t->iters) : rops_probe_fma_scalar(t->iters);
}

static void probe_read_thread(void *arg, int ith, int nth) {
    struct probe_task *t = arg;
    const size_t per = t->n_floats / (size_t)nth / 16 * 16;
    const float *p = t->buf + per * (size_t)ith;
    t->sums[ith] =
        t->isa == ROPS_ISA_AVX2 ? rops_probe_sum_avx2(p, per) : rops_probe_sum_scalar(p, per);
}

/* The probes' thread count: ex's, within the pool. */
static int probe_threads(const struct rops_exec *ex) {
    const int nth = ex->n_threads < 1 ? 1 : ex->n_threads;
    return nth < rpool_size(ex->pool) ? nth : rpool_size(ex->pool);
}

/* One round of the FMA loop on nth threads: flops per second, and the round's seconds. */
static double fma_round(const struct rops_exec *ex, struct probe_task *t, int nth, double *dt) {
    const double t0 = seconds_now();
    rpool_run(ex->pool, probe_fma_thread, t, nth);
    *dt = seconds_now() - t0;
    double flops = 0;
    for (int i = 0; i < nth; i++) flops += t->flops[i];
    return *dt > 0 ? flops / *dt : 0.0;
}

double rops_probe_gflops(const struct rops_exec *ex) {
    struct probe_task t;
    memset(&t, 0, sizeof t);
    t.isa = ex->isa;
    const int nth = probe_threads(ex);
    double best = 0, dt = 0, rate;
    /* grow the round until it takes 0.1 s, then take the best of three rounds of that length */
    for (t.iters = 1 << 16; dt <= 0.1; t.iters *= 2)
        if ((rate = fma_round(ex, &t, nth, &dt)) > best) best = rate;
    t.iters /= 2;
    for (int rep = 0; rep < 2; rep++)
        if ((rate = fma_round(ex, &t, nth, &dt)) > best) best = rate;
    return best / 1e9;
}

double rops_probe_read_gbps(const struct rops_exec *ex, const void *buf, size_t n_bytes) {
    struct probe_task t;
    memset(&t, 0, sizeof t);
    t.isa = ex->isa;
    t.buf = buf;
    t.n_floats = n_bytes / sizeof(float);
    const int nth = probe_threads(ex);
    const size_t read = t.n_floats / (size_t)nth / 16 * 16 * (size_t)nth * sizeof(float);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = seconds_now();
        rpool_run(ex->pool, probe_read_thread, &t, nth);
        double dt = seconds_now() - t0;
        if ((double)read / dt > best) best = (double)read / dt;
    }
    return best / 1e9;
}

/* ---- Mamba-2's scan ------------------------------------------------------------------------ */

void rops_scan2_heads_scalar(const struct rops_scan2_args *a, int64_t h0, int64_t h1) {
    const int64_t P = a->Di / a->H;
    for (int64_t s = 0; s < a->n_seqs; s++)
        for (int64_t t = s * a->n_tok; t < (s + 1) * a->n_tok; t++) {
            const float *x = a->xbc + t * a->stride;
            for (int64_t h = h0; h < h1; h++) {
                const int64_t g = h / (a->H / a->G);
                const float *B = x + a->Di + g * a->N, *C = x + a->Di + a->G * a->N + g * a->N;
                const float dt = a->dt[t * a->H + h], dA = expf(dt * a->A[h]);
                for (int64_t p = 0; p < P; p++) {
                    const int64_t c = h * P + p;
                    float *sc = a->ssm + (s * a->Di + c) * a->N;
                    const float dx = dt * x[c];
                    float acc = 0.0f;
                    for (int64_t n = 0; n < a->N; n++) {
                        sc[n] = sc[n] * dA + B[n] * dx;
                        acc += sc[n] * C[n];
                    }
                    a->y[t * a->Di + c] = acc + a->D[h] * x[c];
                }
                float *dst = a->save ? a->save[t] : NULL;
                if (dst)
                    memcpy(dst + h * P * a->N, a->ssm + (s * a->Di + h * P) * a->N,
                           sizeof(float) * (size_t)(P * a->N));
            }
        }
}

struct scan2_task {
    struct rops_scan2_args a;
    enum rops_isa isa;
};

static void scan2_thread(void *arg, int ith, int nth) {
    const struct scan2_task *t = arg;
    const int64_t h0 = t->a.H * ith / nth, h1 = t->a.H * (ith + 1) / nth;
    if (t->isa == ROPS_ISA_AVX2)
        rops_scan2_heads_avx2(&t->a, h0, h1);
    else
        rops_scan2_heads_scalar(&t->a, h0, h1);
}

void rops_ssm_scan2(const struct rops_exec *ex, float *ssm_state, const float *xbc,
                    int64_t xbc_stride, const float *dt, const float *A, const float *D,
                    int64_t n_seqs, int64_t n_tok, int64_t d_inner, int64_t d_state, int64_t n_head,
                    int64_t n_group, float *y, float *const *save) {
    struct scan2_task t = {{ssm_state, xbc, dt, A, D, xbc_stride, n_seqs, n_tok, d_inner, d_state,
                            n_head, n_group, y, save},
                           ex->isa};
    int64_t nth = ssm_threads(ex, n_seqs * n_tok * d_inner * d_state);
    if (nth > n_head) nth = n_head;
    rpool_run(ex->pool, scan2_thread, &t, (int)nth);
}
