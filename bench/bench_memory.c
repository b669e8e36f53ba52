/*
 * bench_memory: the cost of the recurrent state memory's bookkeeping.
 *
 * Placing ubatches of 1, 64 and 1024 one-token sequences (find_slot plus reading s_copy and
 * s_mask for every slot, then the full init_batch + apply path), and each sequence operation
 * and state write / read with 1024 live sequences. The goal (issue: memory that scales to
 * thousands of sequences) is placing 1024 sequences in under 200 us on one core.
 *
 * Every figure is the median of many repetitions, each timing one operation (or, for the
 * operations that take nanoseconds, a run of 1000 of them, divided) with
 * clock_gettime(CLOCK_MONOTONIC) on a memory freshly reset (and refilled where the operation
 * needs live sequences) outside the timed region. The state rows are kept small on purpose, so
 * that what is measured is bookkeeping rather than memcpy bandwidth.
 *
 * Output: a table for people, then one line of JSON for scripts (also written to --json FILE).
 * --quick takes 9 repetitions instead of 51 (for CI smoke runs; figures are then rough).
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_setaffinity / sched_getcpu, to stay on one core */
#endif

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include "batch/batch.h"
#include "core/core.h"
#include "io/io.h"
#include "memory/memory.h"

/* ---- configuration ------------------------------------------------------------------------ */

#define N_LAYER 2
#define K_ROW   48 /* f32 elements per cell and layer */
#define V_ROW   256

#define REPS_FULL  51
#define REPS_QUICK 9

#define PLACE_BOUND_US 200.0 /* the goal for placing 1024 sequences */

/* placement: a memory sized for the largest ubatch, as llama.cpp sizes it (cells = seqs) */
#define PLACE_CELLS 1024u
/* the transactional dry run only runs when cells are fewer than sequence ids */
#define DRY_SEQS 4096u
/* sequence operations: 4096 cells and ids, 1024 of them live */
#define OPS_CELLS 4096u
#define OPS_LIVE  1024u
#define OPS_SEQ   511  /* the sequence operated on: one in the middle */
#define OPS_DST   3000 /* an id that holds nothing */

static const uint32_t place_sizes[] = {1, 64, 1024};

/* ---- small helpers ------------------------------------------------------------------------ */

static void die(const char *what) {
    fprintf(stderr, "bench_memory: %s: %s\n", what, rcore_error_get());
    exit(1);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "bench_memory: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Keeps the compiler from dropping reads whose values nobody uses. */
static volatile int64_t sink;

static struct rmem *make_mem(uint32_t n_cells, uint32_t n_seq_max) {
    uint32_t k_row[N_LAYER], v_row[N_LAYER];
    for (int il = 0; il < N_LAYER; il++) {
        k_row[il] = K_ROW;
        v_row[il] = V_ROW;
    }
    struct rmem_params p = {
        .n_layer = N_LAYER,
        .k_row = k_row,
        .v_row = v_row,
        .type_k = RCORE_TYPE_F32,
        .type_v = RCORE_TYPE_F32,
        .n_cells = n_cells,
        .n_seq_max = n_seq_max,
    };
    struct rmem *mem = rmem_create(&p);
    if (!mem) die("rmem_create");
    return mem;
}

/* ---- ubatches and batches of one-token sequences ------------------------------------------ */

/* An equal-split ubatch built by hand: n streams of one token, stream s on sequence s at
 * position pos. */
struct ubatch_buf {
    int32_t *idx, *token, *pos, *n_seq_id, *ids;
    int8_t *output;
    const int32_t **seq_id;
    struct rbatch_ubatch ub;
};

static void ubatch_make(struct ubatch_buf *b, uint32_t n, int32_t pos) {
    b->idx = xcalloc(n, sizeof(int32_t));
    b->token = xcalloc(n, sizeof(int32_t));
    b->pos = xcalloc(n, sizeof(int32_t));
    b->n_seq_id = xcalloc(n, sizeof(int32_t));
    b->ids = xcalloc(n, sizeof(int32_t));
    b->output = xcalloc(n, sizeof(int8_t));
    b->seq_id = xcalloc(n, sizeof(const int32_t *));
    for (uint32_t s = 0; s < n; s++) {
        b->idx[s] = (int32_t)s;
        b->token[s] = (int32_t)(s % 1000);
        b->pos[s] = pos;
        b->n_seq_id[s] = 1;
        b->ids[s] = (int32_t)s;
        b->output[s] = 1;
        b->seq_id[s] = &b->ids[s];
    }
    b->ub = (struct rbatch_ubatch){
        .n_tokens = n,
        .n_seq_tokens = 1,
        .n_seqs = n,
        .idx = b->idx,
        .token = b->token,
        .pos = b->pos,
        .output = b->output,
        .n_seq_id = b->n_seq_id,
        .seq_id = b->seq_id,
    };
}

static void ubatch_free(struct ubatch_buf *b) {
    free(b->idx);
    free(b->token);
    free(b->pos);
    free(b->n_seq_id);
    free(b->ids);
    free(b->output);
    free(b->seq_id);
}

/* The caller's batch for the same step: token i on sequence i at position pos, every token
 * asking for output (generation samples every sequence). */
struct batch_buf {
    int32_t *token, *pos, *n_seq_id, *ids;
    int32_t **seq_id;
    int8_t *logits;
    struct rbatch_in in;
};

static void batch_make(struct batch_buf *b, uint32_t n, int32_t pos) {
    b->token = xcalloc(n, sizeof(int32_t));
    b->pos = xcalloc(n, sizeof(int32_t));
    b->n_seq_id = xcalloc(n, sizeof(int32_t));
    b->ids = xcalloc(n, sizeof(int32_t));
    b->seq_id = xcalloc(n, sizeof(int32_t *));
    b->logits = xcalloc(n, sizeof(int8_t));
    for (uint32_t i = 0; i < n; i++) {
        b->token[i] = (int32_t)(i % 1000);
        b->pos[i] = pos;
        b->n_seq_id[i] = 1;
        b->ids[i] = (int32_t)i;
        b->seq_id[i] = &b->ids[i];
        b->logits[i] = 1;
    }
    b->in = (struct rbatch_in){
        .n_tokens = (int32_t)n,
        .token = b->token,
        .embd = NULL,
        .pos = b->pos,
        .n_seq_id = b->n_seq_id,
        .seq_id = b->seq_id,
        .logits = b->logits,
    };
}

static void batch_free(struct batch_buf *b) {
    free(b->token);
    free(b->pos);
    free(b->n_seq_id);
    free(b->ids);
    free(b->seq_id);
    free(b->logits);
}

/* ---- results ------------------------------------------------------------------------------ */

struct result {
    char name[64];
    uint32_t n;
    double median_us, min_us, max_us;
    int runs;
    bool placement; /* judged against PLACE_BOUND_US */
};

#define MAX_RESULTS 64

struct bench {
    int reps;
    double *times;
    struct result results[MAX_RESULTS];
    size_t n_results;
};

/* setup runs before every repetition, outside the timed region; op is what is timed; check
 * (optional) verifies the first, untimed run, so that a broken memory is not benchmarked. */
struct bench_case {
    const char *name;
    uint32_t n;
    bool placement;
    void (*setup)(void *arg);
    void (*op)(void *arg);
    void (*check)(void *arg);
    void *arg;
    /* calls of op per timed run: operations that take tens of nanoseconds are below the
       clock's resolution one at a time, so they are timed in a run and divided */
    int repeat;
};

static void measure(struct bench *b, const struct bench_case *c) {
    if (b->n_results == MAX_RESULTS) {
        fprintf(stderr, "bench_memory: too many results\n");
        exit(1);
    }
    /* one untimed run warms caches and page mappings, and is the one that gets checked */
    c->setup(c->arg);
    c->op(c->arg);
    if (c->check) c->check(c->arg);

    const int repeat = c->repeat > 1 ? c->repeat : 1;
    for (int r = 0; r < b->reps; r++) {
        c->setup(c->arg);
        double t0 = now_us();
        for (int k = 0; k < repeat; k++) c->op(c->arg);
        double t1 = now_us();
        b->times[r] = (t1 - t0) / repeat;
    }
    qsort(b->times, (size_t)b->reps, sizeof(double), cmp_double);

    struct result *res = &b->results[b->n_results++];
    snprintf(res->name, sizeof res->name, "%s", c->name);
    res->n = c->n;
    res->median_us = b->times[b->reps / 2];
    res->min_us = b->times[0];
    res->max_us = b->times[b->reps - 1];
    res->runs = b->reps;
    res->placement = c->placement;
}

/* ---- placement cases ---------------------------------------------------------------------- */

struct place_arg {
    struct rmem *mem;
    uint32_t n;
    bool steady;
    struct ubatch_buf first; /* position 0: the fresh step, and the setup of the steady one */
    struct ubatch_buf next;  /* position 1: the steady step */
    struct batch_buf batch_first, batch_next;
    struct rmem_batch_params params;
    int32_t *copy;
    float *mask;
};

static void gather(struct place_arg *a) {
    const uint32_t n = rmem_n(a->mem);
    for (uint32_t i = 0; i < n; i++) {
        a->copy[i] = rmem_s_copy(a->mem, i);
        a->mask[i] = rmem_s_mask(a->mem, i);
    }
    sink += a->copy[n - 1];
}

static void place_ubatch(struct place_arg *a, const struct rbatch_ubatch *ub) {
    if (!rmem_find_slot(a->mem, ub)) die("rmem_find_slot");
    gather(a);
}

static void run_batch(struct place_arg *a, const struct rbatch_in *in) {
    struct rmem_bctx *ctx = NULL;
    enum rmem_status st = rmem_init_batch(a->mem, in, &a->params, &ctx);
    if (st != RMEM_OK) die("rmem_init_batch");
    do {
        if (!rmem_bctx_apply(ctx)) die("rmem_bctx_apply");
        gather(a);
    } while (rmem_bctx_next(ctx));
    rmem_bctx_free(ctx);
}

static void setup_slot(void *arg) {
    struct place_arg *a = arg;
    rmem_clear(a->mem, false);
    if (a->steady) place_ubatch(a, &a->first.ub);
}

static void op_slot(void *arg) {
    struct place_arg *a = arg;
    place_ubatch(a, a->steady ? &a->next.ub : &a->first.ub);
}

static void setup_batch(void *arg) {
    struct place_arg *a = arg;
    rmem_clear(a->mem, false);
    if (a->steady) run_batch(a, &a->batch_first.in);
}

static void op_batch(void *arg) {
    struct place_arg *a = arg;
    run_batch(a, a->steady ? &a->batch_next.in : &a->batch_first.in);
}

/* Fresh sequences start from zeros; steady ones continue their state, in place. */
static void check_place(void *arg) {
    struct place_arg *a = arg;
    bool ok = rmem_n(a->mem) == a->n && rmem_check(a->mem);
    for (uint32_t i = 0; ok && i < a->n; i++) {
        ok = a->mask[i] == (a->steady ? 1.0f : 0.0f) &&
             rmem_seq_pos_max(a->mem, (int32_t)i) == (a->steady ? 1 : 0);
        if (ok && a->steady) ok = a->copy[i] == (int32_t)(rmem_head(a->mem) + i);
    }
    if (!ok) {
        fprintf(stderr, "bench_memory: placing %u %s sequences gave an unexpected block: %s\n",
                a->n, a->steady ? "steady" : "fresh", rcore_error_get());
        exit(1);
    }
}

static void place_arg_init(struct place_arg *a, struct rmem *mem, uint32_t n) {
    memset(a, 0, sizeof *a);
    a->mem = mem;
    a->n = n;
    ubatch_make(&a->first, n, 0);
    ubatch_make(&a->next, n, 1);
    batch_make(&a->batch_first, n, 0);
    batch_make(&a->batch_next, n, 1);
    /* one ubatch holds the whole step, as with n_ubatch >= n_seq_max */
    a->params = (struct rmem_batch_params){
        .n_ubatch = n, .n_vocab = 32000, .embd_pooled = false, .logits_all = false};
    a->copy = xcalloc(n, sizeof(int32_t));
    a->mask = xcalloc(n, sizeof(float));
}

static void place_arg_free(struct place_arg *a) {
    ubatch_free(&a->first);
    ubatch_free(&a->next);
    batch_free(&a->batch_first);
    batch_free(&a->batch_next);
    free(a->copy);
    free(a->mask);
}

static void bench_placement(struct bench *b) {
    struct rmem *mem = make_mem(PLACE_CELLS, PLACE_CELLS);
    struct rmem *dry = make_mem(PLACE_CELLS, DRY_SEQS);
    for (size_t k = 0; k < sizeof place_sizes / sizeof place_sizes[0]; k++) {
        const uint32_t n = place_sizes[k];
        struct place_arg a;
        place_arg_init(&a, mem, n);
        for (int steady = 0; steady < 2; steady++) {
            a.steady = steady;
            a.mem = mem;
            measure(b, &(struct bench_case){steady ? "find_slot+gather, steady"
                                                   : "find_slot+gather, fresh",
                                            n, true, setup_slot, op_slot, check_place, &a, 1});
            measure(b, &(struct bench_case){steady ? "init_batch+apply, steady"
                                                   : "init_batch+apply, fresh",
                                            n, true, setup_batch, op_batch, check_place, &a, 1});
            a.mem = dry;
            measure(b, &(struct bench_case){steady ? "init_batch+apply dry-run, steady"
                                                   : "init_batch+apply dry-run, fresh",
                                            n, true, setup_batch, op_batch, check_place, &a, 1});
        }
        place_arg_free(&a);
    }
    rmem_free(mem);
    rmem_free(dry);
}

/* ---- sequence operations at 1024 live sequences ------------------------------------------- */

struct ops_arg {
    struct rmem *mem;
    struct ubatch_buf live; /* OPS_LIVE sequences at position 9 */
    uint8_t *buf_one, *buf_all;
    size_t size_one, size_all;
    uint8_t *stream_one, *stream_all; /* streams written from the live memory, for reads */
};

static void setup_live(void *arg) {
    struct ops_arg *a = arg;
    rmem_clear(a->mem, false);
    if (!rmem_find_slot(a->mem, &a->live.ub)) die("rmem_find_slot (1024 live sequences)");
}

static void op_seq_cp(void *arg) {
    struct ops_arg *a = arg;
    rmem_seq_cp(a->mem, OPS_SEQ, OPS_DST, -1, -1);
}

static void op_seq_rm(void *arg) {
    struct ops_arg *a = arg;
    if (!rmem_seq_rm(a->mem, OPS_SEQ, -1, -1)) die("rmem_seq_rm");
}

static void op_seq_keep(void *arg) {
    struct ops_arg *a = arg;
    rmem_seq_keep(a->mem, OPS_SEQ);
}

static void op_seq_add(void *arg) {
    struct ops_arg *a = arg;
    rmem_seq_add(a->mem, OPS_SEQ, -1, -1, 3);
}

static void op_seq_div(void *arg) {
    struct ops_arg *a = arg;
    rmem_seq_div(a->mem, OPS_SEQ, -1, -1, 2);
}

static void op_seq_pos_max(void *arg) {
    struct ops_arg *a = arg;
    sink += rmem_seq_pos_max(a->mem, OPS_SEQ);
}

static void op_write_one(void *arg) {
    struct ops_arg *a = arg;
    struct rio_writer w;
    rio_writer_buffer(&w, a->buf_one, a->size_one);
    if (!rmem_state_write(a->mem, &w, OPS_SEQ)) die("rmem_state_write (one sequence)");
}

static void op_write_all(void *arg) {
    struct ops_arg *a = arg;
    struct rio_writer w;
    rio_writer_buffer(&w, a->buf_all, a->size_all);
    if (!rmem_state_write(a->mem, &w, -1)) die("rmem_state_write (whole memory)");
}

static void op_read_one(void *arg) {
    struct ops_arg *a = arg;
    struct rio_reader r;
    rio_reader_buffer(&r, a->stream_one, a->size_one);
    if (!rmem_state_read(a->mem, &r, OPS_DST)) die("rmem_state_read (one sequence)");
}

static void op_read_all(void *arg) {
    struct ops_arg *a = arg;
    struct rio_reader r;
    rio_reader_buffer(&r, a->stream_all, a->size_all);
    if (!rmem_state_read(a->mem, &r, -1)) die("rmem_state_read (whole memory)");
}

/* Each case is checked once for the effect it is meant to have, then timed. */
static void check_seq_cp(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_seq_tail(a->mem, OPS_DST) != rmem_seq_tail(a->mem, OPS_SEQ) ||
        rmem_seq_tail(a->mem, OPS_DST) < 0)
        die("seq_cp did not share the state");
}

static void check_seq_rm(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_seq_pos_max(a->mem, OPS_SEQ) != -1 || rmem_used(a->mem) != OPS_LIVE - 1)
        die("seq_rm did not remove the sequence");
}

static void check_seq_keep(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_used(a->mem) != 1 || rmem_seq_pos_max(a->mem, OPS_SEQ) != 9)
        die("seq_keep did not keep exactly the one sequence");
}

static void check_seq_add(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_seq_pos_max(a->mem, OPS_SEQ) != 12) die("seq_add did not move the position");
}

static void check_seq_div(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_seq_pos_max(a->mem, OPS_SEQ) != 4) die("seq_div did not divide the position");
}

static void check_read_one(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_seq_pos_max(a->mem, OPS_DST) != 9 || !rmem_check(a->mem))
        die("state read did not restore the sequence");
}

static void check_read_all(void *arg) {
    struct ops_arg *a = arg;
    if (rmem_used(a->mem) != OPS_LIVE || !rmem_check(a->mem))
        die("state read did not restore the memory");
}

static void bench_seq_ops(struct bench *b) {
    struct ops_arg a;
    memset(&a, 0, sizeof a);
    a.mem = make_mem(OPS_CELLS, OPS_CELLS);
    ubatch_make(&a.live, OPS_LIVE, 9);

    setup_live(&a);
    a.size_one = rmem_state_size(a.mem, OPS_SEQ);
    a.size_all = rmem_state_size(a.mem, -1);
    if (!a.size_one || !a.size_all) die("rmem_state_size");
    a.buf_one = xcalloc(a.size_one, 1);
    a.buf_all = xcalloc(a.size_all, 1);
    a.stream_one = xcalloc(a.size_one, 1);
    a.stream_all = xcalloc(a.size_all, 1);
    op_write_one(&a);
    op_write_all(&a);
    memcpy(a.stream_one, a.buf_one, a.size_one);
    memcpy(a.stream_all, a.buf_all, a.size_all);

    const struct bench_case cases[] = {
        {"seq_cp", OPS_LIVE, false, setup_live, op_seq_cp, check_seq_cp, &a, 1000},
        {"seq_rm (whole sequence)", OPS_LIVE, false, setup_live, op_seq_rm, check_seq_rm, &a, 1},
        {"seq_keep", OPS_LIVE, false, setup_live, op_seq_keep, check_seq_keep, &a, 1},
        {"seq_add", OPS_LIVE, false, setup_live, op_seq_add, check_seq_add, &a, 1000},
        {"seq_div", OPS_LIVE, false, setup_live, op_seq_div, check_seq_div, &a, 1000},
        {"seq_pos_max", OPS_LIVE, false, setup_live, op_seq_pos_max, NULL, &a, 1000},
        {"state_write (one sequence)", OPS_LIVE, false, setup_live, op_write_one, NULL, &a, 1},
        {"state_write (whole memory)", OPS_LIVE, false, setup_live, op_write_all, NULL, &a, 1},
        {"state_read (one sequence)", OPS_LIVE, false, setup_live, op_read_one, check_read_one, &a,
         1},
        {"state_read (whole memory)", OPS_LIVE, false, setup_live, op_read_all, check_read_all, &a,
         1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) measure(b, &cases[i]);

    printf("state streams: one sequence %zu bytes, whole memory %zu bytes\n", a.size_one,
           a.size_all);
    free(a.buf_one);
    free(a.buf_all);
    free(a.stream_one);
    free(a.stream_all);
    ubatch_free(&a.live);
    rmem_free(a.mem);
}

/* ---- output ------------------------------------------------------------------------------- */

static const char *verdict(const struct result *r) {
    if (!r->placement) return "";
    return r->median_us < PLACE_BOUND_US ? "ok" : "over";
}

static void print_table(const struct bench *b) {
    printf("\n%-34s %6s %12s %12s %12s %5s  %s\n", "operation", "n", "median us", "min us",
           "max us", "runs", "bound");
    for (size_t i = 0; i < b->n_results; i++) {
        const struct result *r = &b->results[i];
        printf("%-34s %6u %12.3f %12.3f %12.3f %5d  %s\n", r->name, r->n, r->median_us, r->min_us,
               r->max_us, r->runs, verdict(r));
    }
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_json(FILE *f, const struct bench *b, int pinned_cpu) {
    fprintf(f,
            "{\"benchmark\":\"memory\",\"unit\":\"us\",\"repetitions\":%d,\"cpu\":%d,"
            "\"n_layer\":%d,\"k_row\":%d,\"v_row\":%d,\"type\":\"f32\",\"place_bound_us\":%.1f,"
            "\"results\":[",
            b->reps, pinned_cpu, N_LAYER, K_ROW, V_ROW, PLACE_BOUND_US);
    for (size_t i = 0; i < b->n_results; i++) {
        const struct result *r = &b->results[i];
        fprintf(f, "%s{\"name\":", i ? "," : "");
        json_string(f, r->name);
        fprintf(f, ",\"n\":%u,\"median_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"runs\":%d", r->n,
                r->median_us, r->min_us, r->max_us, r->runs);
        if (r->placement)
            fprintf(f, ",\"within_bound\":%s", r->median_us < PLACE_BOUND_US ? "true" : "false");
        fputc('}', f);
    }
    fputs("]}\n", f);
}

/* Stays on the CPU it started on, so that a migration does not land in a timed region.
 * Returns that CPU, or -1 when it cannot pin. */
static int pin_to_one_cpu(void) {
#if defined(__linux__)
    int cpu = sched_getcpu();
    if (cpu < 0) return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
#else
    return -1;
#endif
}

static double clock_overhead_us(void) {
    double t[101];
    for (int i = 0; i < 101; i++) {
        double t0 = now_us();
        double t1 = now_us();
        t[i] = t1 - t0;
    }
    qsort(t, 101, sizeof(double), cmp_double);
    return t[50];
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: bench_memory [--quick] [--json FILE]\n"
            "  --quick      %d repetitions instead of %d\n"
            "  --json FILE  also write the JSON line to FILE\n",
            REPS_QUICK, REPS_FULL);
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json_path = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "bench_memory: unknown or incomplete argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    struct bench b;
    memset(&b, 0, sizeof b);
    b.reps = quick ? REPS_QUICK : REPS_FULL;
    b.times = xcalloc((size_t)b.reps, sizeof(double));

    int cpu = pin_to_one_cpu();
    printf("bench_memory: recurrent state memory bookkeeping, one thread");
    if (cpu >= 0)
        printf(" pinned to cpu %d\n", cpu);
    else
        printf(" (not pinned)\n");
    printf("state shape: %d layers, K row %d f32, V row %d f32 per cell -- small on purpose: "
           "this measures bookkeeping, not row copies\n",
           N_LAYER, K_ROW, V_ROW);
    printf("placement: one-token sequences 0..n-1 in one ubatch; %u cells and sequence ids "
           "(dry-run rows: %u cells, %u ids, so init_batch runs its transactional dry run)\n",
           PLACE_CELLS, PLACE_CELLS, DRY_SEQS);
    printf("  fresh = empty memory, position 0; steady = the same sequences again at position 1; "
           "each time includes reading s_copy / s_mask of every slot\n");
    printf("sequence operations: %u cells and ids, %u live sequences, operating on sequence %d\n",
           OPS_CELLS, OPS_LIVE, OPS_SEQ);
    printf("timing: median of %d repetitions%s, one operation each (seq_cp, seq_add, seq_div, "
           "seq_pos_max: a run of 1000, divided), memory reset outside the timed region; clock "
           "overhead %.3f us; placement bound %.0f us (1024 sequences)\n",
           b.reps, quick ? " (--quick)" : "", clock_overhead_us(), PLACE_BOUND_US);

    bench_placement(&b);
    bench_seq_ops(&b);

    print_table(&b);
    printf("\n");
    write_json(stdout, &b, cpu);
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) {
            fprintf(stderr, "bench_memory: cannot open %s for writing\n", json_path);
            free(b.times);
            return 1;
        }
        write_json(f, &b, cpu);
        if (fclose(f) != 0) {
            fprintf(stderr, "bench_memory: writing %s failed\n", json_path);
            free(b.times);
            return 1;
        }
    }
    free(b.times);
    return 0;
}
