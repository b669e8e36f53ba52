/*
 * bench_prefix: time to first token with and without the prefix state cache, in one process
 * (the model already paged in, as in a server).
 *
 *   bench_prefix MODEL A.txt B.txt [THREADS] [REPS]
 *
 * A is a long prompt decoded once and stored (recur_prefix_cache_store, with n_rollback 2 and a
 * checkpoint every 64 positions, as `recur run --prompt-cache` does). B is a prompt that
 * shares A's beginning and differs at the end. "cold" decodes B from an empty sequence; "warm"
 * restores B's longest stored prefix and decodes the rest. Both end with the logits of B's
 * last token, which must agree. Prints medians (and min-max) of REPS runs and their ratio.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recur.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *read_text(const char *path, int32_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (int32_t)n;
    return buf;
}

static recur_token *tokens_of(const struct recur_model *m, const char *path, int32_t *n) {
    int32_t len;
    char *text = read_text(path, &len);
    if (!text) return NULL;
    recur_token *t = malloc(sizeof(recur_token) * (size_t)RECUR_TOKENS_MAX(len));
    *n = t ? recur_tokenize(m, text, len, t, RECUR_TOKENS_MAX(len), true, false) : -1;
    free(text);
    return *n > 0 ? t : NULL;
}

/* Decodes t[0..n) on seq after what it holds, in batches of 512; false on failure. */
static bool decode(struct recur_context *ctx, recur_seq_id seq, const recur_token *t, int32_t n) {
    struct recur_batch b = recur_batch_init(512, 0, 1);
    bool ok = b.pos != NULL;
    for (int32_t i = 0; ok && i < n; i += 512) {
        const int32_t k = n - i < 512 ? n - i : 512;
        const recur_pos p = recur_memory_seq_pos_max(recur_get_memory(ctx), seq) + 1;
        for (int32_t j = 0; j < k; j++) {
            b.token[j] = t[i + j];
            b.pos[j] = p + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = seq;
            b.logits[j] = i + j == n - 1;
        }
        b.n_tokens = k;
        ok = recur_decode(ctx, b) == 0;
    }
    if (b.pos) recur_batch_free(b);
    return ok;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_prefix MODEL A.txt B.txt [THREADS] [REPS]\n");
        return 2;
    }
    const int threads = argc > 4 ? atoi(argv[4]) : 2, reps = argc > 5 ? atoi(argv[5]) : 5;
    struct recur_model *m = recur_model_load_from_file(argv[1], recur_model_default_params());
    if (!m) {
        fprintf(stderr, "%s\n", recur_last_error());
        return 1;
    }
    struct recur_context_params p = recur_context_default_params();
    p.n_seq_max = 2;
    p.n_threads = p.n_threads_batch = threads;
    p.n_rollback = 2;
    p.checkpoint_every = 64;
    p.prefix_cache_bytes = (uint64_t)1 << 30;
    struct recur_context *ctx = recur_init_from_model(m, p);
    int32_t na = 0, nb = 0;
    recur_token *a = ctx ? tokens_of(m, argv[2], &na) : NULL,
                *b = a ? tokens_of(m, argv[3], &nb) : NULL;
    if (!b) {
        fprintf(stderr, "%s\n", ctx ? "cannot read or tokenise A or B" : recur_last_error());
        return 1;
    }
    const int32_t V = recur_model_n_vocab(m);
    float *cold_logits = malloc(sizeof(float) * (size_t)V);
    double *tc = malloc(sizeof(double) * (size_t)reps), *tw = malloc(sizeof(double) * (size_t)reps);
    recur_memory_t mem = recur_get_memory(ctx);
    if (!cold_logits || !tc || !tw || !decode(ctx, 0, a, na) ||
        recur_prefix_cache_store(ctx, 0, a, na) < 1) {
        fprintf(stderr, "setup failed: %s\n", recur_last_error());
        return 1;
    }
    int32_t reused = 0;
    double worst = 0;
    for (int r = 0; r < reps; r++) {
        recur_memory_seq_rm(mem, 1, -1, -1);
        double t0 = now_s();
        if (!decode(ctx, 1, b, nb)) return 1;
        tc[r] = now_s() - t0;
        memcpy(cold_logits, recur_get_logits_ith(ctx, -1), sizeof(float) * (size_t)V);

        recur_memory_seq_rm(mem, 1, -1, -1);
        t0 = now_s();
        reused = recur_prefix_cache_restore(ctx, 1, b, nb);
        if (reused < 0 || !decode(ctx, 1, b + reused, nb - reused)) return 1;
        tw[r] = now_s() - t0;
        const float *w = recur_get_logits_ith(ctx, -1);
        double d = 0, ss = 0;
        for (int32_t i = 0; i < V; i++) {
            d = fmax(d, fabs((double)w[i] - cold_logits[i]));
            ss += (double)cold_logits[i] * cold_logits[i];
        }
        worst = fmax(worst, d / sqrt(ss / V));
    }
    qsort(tc, (size_t)reps, sizeof *tc, cmp_d);
    qsort(tw, (size_t)reps, sizeof *tw, cmp_d);
    struct recur_prefix_cache_stats st;
    recur_prefix_cache_get_stats(ctx, &st);
    printf("prompt A %d tokens, B %d tokens; B restores %d and decodes %d\n", na, nb, reused,
           nb - reused);
    printf("time to first token, %d threads, median of %d (min-max):\n", threads, reps);
    printf("  cold        %8.1f ms (%.1f-%.1f)\n", tc[reps / 2] * 1e3, tc[0] * 1e3,
           tc[reps - 1] * 1e3);
    printf("  prefix hit  %8.1f ms (%.1f-%.1f)\n", tw[reps / 2] * 1e3, tw[0] * 1e3,
           tw[reps - 1] * 1e3);
    printf("  speed-up    %8.1fx\n", tc[reps / 2] / tw[reps / 2]);
    printf("cache: %u entries for A, %.2f MiB per state, %.1f MiB in all\n", st.n_entries,
           st.entry_bytes / 1048576.0, st.bytes / 1048576.0);
    printf("last logits, cold vs restored: max |diff| / rms %.2g\n", worst);
    free(a);
    free(b);
    free(cold_logits);
    free(tc);
    free(tw);
    recur_free(ctx);
    recur_model_free(m);
    return worst < 1e-3 ? 0 : 1;
}
