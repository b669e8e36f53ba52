/*
 * recur bench: prompt and generation speed of a model, as llama-bench measures it, each figure
 * set against the bound of this machine that limits it.
 *
 *   pp<P>      one sequence, a prompt of P tokens in one batch (logits for the last)
 *   tg<N>      one sequence, N tokens one call at a time (logits for each)
 *   tg<N> xK   K sequences, N steps of one batch holding a token of each (aggregate t/s)
 *
 * Tokens are random ids (seeded), every run starts from empty states; each figure is the
 * median of -r runs after one warm-up, with the slowest and fastest run as its spread.
 *
 * The machine probe measures, on the same threads, the multiply-add peak (GFLOP/s) and the
 * read bandwidth (GB/s). A prompt is bound by compute: 2 flops per weight of the layers per
 * token. One sequence's generation is bound by memory: every weight matrix (layers and output)
 * is read once per token, and so is the sequence's state (written once too, not counted): a
 * Mamba-2 130M state is a fifth of its Q4_K_M weights. K sequences read the weights once per
 * step for K tokens, and their K states: bound by whichever of the two is lower.
 *
 * --no-probe skips the probe: speeds alone, without bounds.
 *
 * --probe-each probes the machine again before every run and sets each run against its own
 * bound: on a machine shared with others the bandwidth moves from minute to minute, and a
 * fraction of one probe taken before all the runs measures the neighbours as much as recur.
 * The fraction reported is then the median of the runs' own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

#define MAX_NP 16

struct bench_opts {
    const char *model;
    char model_buf[GEN_PATH_MAX];
    int32_t n_prompt, n_gen, reps, n_threads;
    int32_t np[MAX_NP];
    int n_np;
    bool json;
    bool probe_each; /* each run against a probe of its own */
    bool no_probe;   /* no probe, so no bounds: tokens/s alone */
    bool no_repack;  /* the file's layout only (recur_model_params.repack false) */
};

struct result {
    char test[32];
    int32_t n_seq, tokens;
    double median, lo, hi; /* tokens/s */
    double bound;          /* tokens/s the limiting resource allows */
    const char *bound_by;
    double paired; /* --probe-each: the median of each run's t/s over its own probe's bound */
};

/* A test's runs: t/s, and with --probe-each the probe before each (GFLOP/s, GB/s) and the
 * run's fraction of the bound that probe gives. */
struct runs {
    double *tps, *gflops, *gbps, *frac;
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: recur bench [-m MODEL] [-p N] [-n N] [-np LIST] [-t N] [-r N] [--json]\n"
            "Measures prompt and generation tokens/s, with the machine's FLOP/s and bandwidth\n"
            "bounds.\n\n"
            "flags:\n"
            "  -m, --model FILE     model (default $RECUR_MODEL, else the shipped model)\n"
            "  -p, --n-prompt N     prompt tokens (default 512; 0 skips the prompt test)\n"
            "  -n, --n-gen N        generated tokens / steps (default 128)\n"
            "  -np, --parallel LIST sequences generating at once (default 1,4,16,64)\n"
            "  -t, --threads N      threads (default 2)\n"
            "  -r, --repetitions N  runs per test (default 3)\n"
            "  --probe-each         probe the machine before every run and set each run\n"
            "                       against its own bound (the median of those fractions)\n"
            "  --no-probe           skip the probe (a second or so) and report tokens/s\n"
            "                       without bounds\n"
            "  -nr, --no-repack     no second copy of the weights in the layout the one-input\n"
            "                       kernels read fastest (recur_model_params.repack)\n"
            "  --json               print JSON (the table goes to stderr)\n"
            "  -h, --help           show this help\n");
}

static bool parse_int(const char *s, long lo, long hi, int32_t *out) {
    long v;
    if (!gen_parse_long(s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

static int parse(int argc, char **argv, struct bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_prompt = 512;
    o->n_gen = 128;
    o->reps = 3;
    o->n_threads = 2;
    const int32_t def_np[] = {1, 4, 16, 64};
    memcpy(o->np, def_np, sizeof def_np);
    o->n_np = 4;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return TOOL_OK;
        }
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (strcmp(a, "--probe-each") == 0) {
            o->probe_each = true;
            continue;
        }
        if (strcmp(a, "--no-probe") == 0) {
            o->no_probe = true;
            continue;
        }
        if (strcmp(a, "-nr") == 0 || strcmp(a, "--no-repack") == 0 || strcmp(a, "--repack") == 0) {
            o->no_repack = strcmp(a, "--repack") != 0;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "recur bench: %s needs a value\n\n", a);
            usage(stderr);
            return TOOL_USAGE;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0)
            o->model = v;
        else if (strcmp(a, "-p") == 0 || strcmp(a, "--n-prompt") == 0)
            ok = parse_int(v, 0, 1 << 20, &o->n_prompt);
        else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-gen") == 0)
            ok = parse_int(v, 1, 1 << 20, &o->n_gen);
        else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0)
            ok = parse_int(v, 1, 256, &o->n_threads);
        else if (strcmp(a, "-r") == 0 || strcmp(a, "--repetitions") == 0)
            ok = parse_int(v, 1, 1000, &o->reps);
        else if (strcmp(a, "-np") == 0 || strcmp(a, "--parallel") == 0) {
            o->n_np = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok && ok; tok = strtok(NULL, ",")) {
                ok = o->n_np < MAX_NP && parse_int(tok, 1, 4096, &o->np[o->n_np]);
                o->n_np++;
            }
            ok = ok && o->n_np > 0;
        } else {
            fprintf(stderr, "recur bench: unknown flag '%s'\n\n", a);
            usage(stderr);
            return TOOL_USAGE;
        }
        if (!ok) {
            fprintf(stderr, "recur bench: %s: '%s' is not a valid value\n\n", a, v);
            usage(stderr);
            return TOOL_USAGE;
        }
    }
    if (o->probe_each && o->no_probe) {
        fprintf(stderr, "recur bench: --probe-each and --no-probe contradict each other\n\n");
        usage(stderr);
        return TOOL_USAGE;
    }
    if (!o->model) o->model = gen_default_model(o->model_buf);
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One run: n_steps decode calls, each of n_seq sequences x per_call tokens. Seconds, or -1. */
static double run_once(struct recur_context *ctx, struct recur_batch *b, int32_t n_seq,
                       int32_t per_call, int32_t n_steps, bool all_logits, uint64_t *rng,
                       int32_t n_vocab) {
    recur_memory_clear(recur_get_memory(ctx), true);
    double t0 = gen_now_s();
    for (int32_t step = 0; step < n_steps; step++) {
        b->n_tokens = 0;
        int32_t added = 0;
        for (recur_seq_id s = 0; s < n_seq && added == 0; s++)
            for (int32_t j = 0; j < per_call && added == 0; j++) {
                *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
                const recur_token t = (recur_token)((*rng >> 33) % (uint64_t)n_vocab);
                added = recur_batch_add(b, t, step * per_call + j, &s, 1,
                                        all_logits || j == per_call - 1);
            }
        if (added != 0 || recur_decode(ctx, *b) != 0) {
            fprintf(stderr, "recur: decode failed: %s\n", recur_last_error());
            return -1;
        }
    }
    return gen_now_s() - t0;
}

/* The median of v[0 .. n) (sorted in place). */
static double median_of(double *v, int32_t n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median of the runs' fractions (left in run order: a copy is sorted). */
static double paired_median(const struct runs *u, int32_t n, double *scratch) {
    memcpy(scratch, u->frac, sizeof *scratch * (size_t)n);
    return median_of(scratch, n);
}

/* The test's runs into r (median and spread) and into u (each run's t/s, in order, and with
 * --probe-each the probe taken just before it). */
static bool measure(struct recur_context *ctx, struct recur_batch *b, const struct bench_opts *o,
                    int32_t n_seq, int32_t per_call, int32_t n_steps, bool all_logits,
                    int32_t n_vocab, struct result *r, struct runs *u) {
    double *tps = malloc(sizeof(double) * (size_t)o->reps);
    if (!tps) return false;
    uint64_t rng = 1;
    bool ok = run_once(ctx, b, n_seq, per_call, n_steps, all_logits, &rng, n_vocab) >= 0;
    for (int32_t i = 0; ok && i < o->reps; i++) {
        if (o->probe_each && !recur_context_probe(ctx, &u->gflops[i], &u->gbps[i])) {
            fprintf(stderr, "recur: %s\n", recur_last_error());
            ok = false;
            break;
        }
        double dt = run_once(ctx, b, n_seq, per_call, n_steps, all_logits, &rng, n_vocab);
        ok = dt > 0;
        u->tps[i] = tps[i] = (double)n_seq * per_call * n_steps / dt;
        if (!o->json && o->probe_each)
            fprintf(stderr, "  %s run %d: %.1f t/s (%.1f GB/s probed before it)\n", r->test, i + 1,
                    ok ? tps[i] : 0.0, u->gbps[i]);
        else if (!o->json)
            fprintf(stderr, "  %s run %d: %.1f t/s\n", r->test, i + 1, ok ? tps[i] : 0.0);
    }
    if (ok) {
        r->median = median_of(tps, o->reps);
        r->lo = tps[0];
        r->hi = tps[o->reps - 1];
        r->n_seq = n_seq;
        r->tokens = n_seq * per_call * n_steps;
    }
    free(tps);
    return ok;
}

/* Weights the layers multiply by (elements) and bytes read per token by one sequence. */
static void weight_sizes(const struct recur_model *model, double *layer_elems, double *out_elems,
                         double *bytes_per_token, double *file_bytes) {
    *layer_elems = *out_elems = *bytes_per_token = *file_bytes = 0;
    struct recur_tensor_info out = {0}, embd = {0}, t;
    for (int32_t i = 0; i < recur_model_n_tensors(model) && recur_model_tensor(model, i, &t); i++) {
        *file_bytes += (double)t.nbytes;
        if (strcmp(t.name, "output.weight") == 0) out = t;
        if (strcmp(t.name, "token_embd.weight") == 0) embd = t;
        if (strncmp(t.name, "blk.", 4) == 0) {
            *bytes_per_token += (double)t.nbytes;
            if (t.n_dims == 2 && !strstr(t.name, "conv1d") && !strstr(t.name, "ssm_a"))
                *layer_elems += (double)t.ne[0] * (double)t.ne[1];
        }
    }
    if (!out.name) out = embd; /* a tied model multiplies by its embedding */
    if (out.name) {
        *out_elems = (double)out.ne[0] * (double)out.ne[1];
        *bytes_per_token += (double)out.nbytes;
    }
}

int cmd_bench(int argc, char **argv) {
    struct bench_opts o;
    int st = parse(argc, argv, &o);
    if (st >= 0) return st;

    int32_t max_np = 1, max_batch = o.n_prompt > 1 ? o.n_prompt : 1;
    for (int i = 0; i < o.n_np; i++) {
        if (o.np[i] > max_np) max_np = o.np[i];
        if (o.np[i] > max_batch) max_batch = o.np[i];
    }
    struct gen_opts go;
    memset(&go, 0, sizeof go);
    go.model = o.model;
    go.n_threads = o.n_threads;
    go.no_repack = o.no_repack;
    go.n_batch = (uint32_t)max_batch;
    go.n_ubatch = (uint32_t)(max_batch < 512 ? max_batch : 512);
    /* a hybrid model's attention cache: room for the prompt and every sequence's tokens */
    const int64_t attn = (int64_t)o.n_prompt + (int64_t)max_np * ((int64_t)o.n_gen + 1);
    go.attn_ctx = (int32_t)(attn < (1 << 24) ? attn : (1 << 24));
    struct recur_model *model;
    struct recur_context *ctx;
    if (!gen_load(&go, (uint32_t)max_np, &model, &ctx)) return TOOL_FAIL;
    const int32_t n_vocab = recur_model_n_vocab(model);
    double layer_elems, out_elems, bytes_tok, file_bytes;
    weight_sizes(model, &layer_elems, &out_elems, &bytes_tok, &file_bytes);
    int ret = TOOL_FAIL;
    struct result res[MAX_NP + 1];
    int n_res = 0;
    struct recur_batch b = recur_batch_init(max_batch, 0, 1);
    /* each test's runs, kept for --probe-each's fractions and the JSON */
    double *runs_mem = calloc((size_t)(MAX_NP + 1) * 4 * (size_t)o.reps, sizeof(double)),
           *scratch = malloc(sizeof(double) * (size_t)o.reps);
    struct runs u[MAX_NP + 1];
    for (int i = 0; runs_mem && i <= MAX_NP; i++)
        u[i] = (struct runs){runs_mem + (size_t)i * 4 * (size_t)o.reps,
                             runs_mem + ((size_t)i * 4 + 1) * (size_t)o.reps,
                             runs_mem + ((size_t)i * 4 + 2) * (size_t)o.reps,
                             runs_mem + ((size_t)i * 4 + 3) * (size_t)o.reps};
    if (!b.pos || !runs_mem || !scratch) {
        fprintf(stderr, "recur: out of memory for the benchmark\n");
        goto done;
    }

    /* the machine, on the same threads and ISA as the model (--no-probe: 0, no bounds) */
    double gflops = 0, gbps = 0;
    if (!o.no_probe && !recur_context_probe(ctx, &gflops, &gbps)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }
    const char *isa = recur_context_isa(ctx);
    if (!o.json && !o.no_probe)
        fprintf(stderr, "machine: %.1f GFLOP/s FMA peak, %.1f GB/s read (%d threads, %s)\n", gflops,
                gbps, o.n_threads, isa);

    const double flops_prompt = 2 * layer_elems, flops_gen = 2 * (layer_elems + out_elems);
    double state_bytes = 0;
    if (o.n_prompt > 0) {
        struct result *r = &res[n_res++];
        snprintf(r->test, sizeof r->test, "pp%d", o.n_prompt);
        struct runs *ru = &u[n_res - 1];
        if (!measure(ctx, &b, &o, 1, o.n_prompt, 1, false, n_vocab, r, ru)) goto done;
        r->bound = gflops * 1e9 / flops_prompt;
        r->bound_by = "compute";
        for (int32_t j = 0; o.probe_each && j < o.reps; j++) /* each run's own bound */
            ru->frac[j] = ru->tps[j] / (ru->gflops[j] * 1e9 / flops_prompt);
        if (o.probe_each) r->paired = paired_median(ru, o.reps, scratch);
    }
    for (int i = 0; i < o.n_np; i++) {
        struct result *r = &res[n_res++];
        const int32_t k = o.np[i];
        if (k == 1)
            snprintf(r->test, sizeof r->test, "tg%d", o.n_gen);
        else
            snprintf(r->test, sizeof r->test, "tg%d x%d", o.n_gen, k);
        struct runs *ru = &u[n_res - 1];
        if (!measure(ctx, &b, &o, k, 1, o.n_gen, true, n_vocab, r, ru)) goto done;
        /* the sequences' states are there after a run: their size as recur_state_seq_get_size
           gives it (the f32 state and a few bytes of header) */
        state_bytes = (double)recur_state_seq_get_size(ctx, 0);
        const double by_mem = gbps * 1e9 / (bytes_tok + k * state_bytes) * k,
                     by_flops = gflops * 1e9 / flops_gen;
        r->bound = by_mem < by_flops ? by_mem : by_flops;
        r->bound_by = by_mem < by_flops ? "memory" : "compute";
        for (int32_t j = 0; o.probe_each && j < o.reps; j++) { /* each run's own bound */
            const double m = ru->gbps[j] * 1e9 / (bytes_tok + k * state_bytes) * k,
                         f = ru->gflops[j] * 1e9 / flops_gen;
            ru->frac[j] = ru->tps[j] / (m < f ? m : f);
        }
        if (o.probe_each) r->paired = paired_median(ru, o.reps, scratch);
    }

    char mix[256], machine[96] = "null";
    gen_type_mix_text(model, mix, sizeof mix);
    if (!o.no_probe)
        snprintf(machine, sizeof machine, "{\"fma_gflops\": %.2f, \"read_gbps\": %.2f}", gflops,
                 gbps);
    if (o.json) {
        printf("{\n  \"model\": \"%s\",\n  \"file_bytes\": %.0f,\n  \"threads\": %d,\n"
               "  \"isa\": \"%s\",\n  \"weight_types\": \"%s\",\n  \"repetitions\": %d,\n"
               "  \"machine\": %s,\n"
               "  \"weights\": {\"layer_params\": %.0f, \"output_params\": %.0f, "
               "\"bytes_per_token\": %.0f, \"state_bytes_per_seq\": %.0f, "
               "\"repacked_bytes\": %llu},\n  \"results\": [\n",
               o.model, file_bytes, o.n_threads, isa, mix, o.reps, machine, layer_elems, out_elems,
               bytes_tok, state_bytes, (unsigned long long)recur_model_repack_size(model));
        for (int i = 0; i < n_res; i++) {
            printf("    {\"test\": \"%s\", \"n_seq\": %d, \"tokens\": %d, \"median_tps\": %.2f, "
                   "\"min_tps\": %.2f, \"max_tps\": %.2f",
                   res[i].test, res[i].n_seq, res[i].tokens, res[i].median, res[i].lo, res[i].hi);
            if (o.no_probe)
                printf(", \"bound_tps\": null, \"bound_by\": null, \"fraction_of_bound\": null");
            else
                printf(", \"bound_tps\": %.2f, \"bound_by\": \"%s\", \"fraction_of_bound\": %.4f",
                       res[i].bound, res[i].bound_by, res[i].median / res[i].bound);
            /* each run in order: its t/s, the bandwidth probed before it, its own fraction */
            if (o.probe_each) {
                printf(", \"paired_fraction_of_bound\": %.6g, \"runs\": [", res[i].paired);
                for (int32_t j = 0; j < o.reps; j++)
                    printf("%s{\"tps\": %.2f, \"fma_gflops\": %.2f, \"read_gbps\": %.2f, "
                           "\"fraction_of_bound\": %.6g}",
                           j ? ", " : "", u[i].tps[j], u[i].gflops[j], u[i].gbps[j], u[i].frac[j]);
                printf("]");
            }
            printf("}%s\n", i + 1 < n_res ? "," : "");
        }
        printf("  ]\n}\n");
    }
    /* the table: on stdout, or on stderr beside the JSON */
    FILE *tf = o.json ? stderr : stdout;
    fprintf(tf, "| model | size | weights | threads | isa | test | t/s (median, min-max) | "
                "bound t/s | of bound |\n|---|---:|---|---:|---|---|---:|---:|---:|\n");
    const char *base = strrchr(o.model, '/');
    for (int i = 0; i < n_res; i++) {
        fprintf(tf, "| %s | %.1f MiB | %s | %d | %s | %s | %.1f (%.1f-%.1f) | ",
                base ? base + 1 : o.model, file_bytes / 1048576.0, mix, o.n_threads, isa,
                res[i].test, res[i].median, res[i].lo, res[i].hi);
        if (o.no_probe)
            fprintf(tf, "- | - |\n");
        else
            fprintf(tf, "%.1f (%s) | %.0f%% |\n", res[i].bound, res[i].bound_by,
                    100.0 * (o.probe_each ? res[i].paired : res[i].median / res[i].bound));
    }
    if (o.probe_each)
        fprintf(tf, "\nof bound: the median of each run against the probe taken just before it "
                    "(--probe-each); bound t/s: the first probe's\n");
    if (o.no_probe)
        fprintf(tf, "\nno bounds: the machine was not probed (--no-probe)\n");
    else
        fprintf(tf, "\nmachine: %.1f GFLOP/s FMA peak, %.1f GB/s read bandwidth\n", gflops, gbps);
    ret = TOOL_OK;
done:
    free(runs_mem);
    free(scratch);
    recur_batch_free(b);
    recur_free(ctx);
    recur_model_free(model);
    return ret;
}
