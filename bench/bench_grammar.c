/*
 * bench_grammar: what a grammar adds to each generated token, on a real model.
 *
 *   bench_grammar MODEL (--grammar FILE | --schema FILE) [TOKENS] [NAIVE_STEPS] [THREADS]
 *
 * Generates TOKENS tokens (default 256) on one sequence, decoding each and sampling it twice
 * from the same logits: with the default chain alone (temperature 1, as `recur run`), and
 * with the grammar sampler in front of it, whose token is the one kept, so the text follows
 * the grammar. When the grammar ends (end of sequence sampled), the sequence and the grammar
 * start over. Times per token: decode, plain sampling, grammar sampling (mask + filtering +
 * chain + accept). Then replays the tokens through the matcher alone, timing its trie mask
 * and, for the first NAIVE_STEPS steps (default 32), the naive mask that checks each token on
 * its own; both masks must agree at every replayed step (the run fails otherwise). Prints a
 * table and one line of JSON. Medians over the steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recur.h"

#include "grammar/grammar.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *read_text(const char *path) {
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
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    if (argc < 4 || (strcmp(argv[2], "--grammar") != 0 && strcmp(argv[2], "--schema") != 0)) {
        fprintf(stderr, "usage: bench_grammar MODEL (--grammar FILE | --schema FILE) [TOKENS] "
                        "[NAIVE_STEPS] [THREADS]\n");
        return 2;
    }
    const int n_tok = argc > 4 ? atoi(argv[4]) : 256;
    const int n_naive = argc > 5 ? atoi(argv[5]) : 32;
    const int threads = argc > 6 ? atoi(argv[6]) : 1;
    char *text = read_text(argv[3]);
    if (!text) {
        fprintf(stderr, "bench_grammar: cannot read %s\n", argv[3]);
        return 1;
    }
    char *grammar = text;
    if (strcmp(argv[2], "--schema") == 0) {
        grammar = recur_json_schema_to_grammar(text);
        free(text);
        if (!grammar) {
            fprintf(stderr, "bench_grammar: %s\n", recur_last_error());
            return 1;
        }
    }
    struct recur_model *model = recur_model_load_from_file(argv[1], recur_model_default_params());
    if (!model) {
        fprintf(stderr, "bench_grammar: %s\n", recur_last_error());
        return 1;
    }
    struct recur_context_params cp = recur_context_default_params();
    cp.n_threads = cp.n_threads_batch = threads;
    struct recur_context *ctx = recur_init_from_model(model, cp);
    struct recur_sampler_params sp = recur_sampler_default_params();
    sp.temp = 1.0f;
    struct recur_sampler *plain = recur_sampler_chain_default(model, sp);
    struct recur_sampler *inner = recur_sampler_chain_default(model, sp);
    double t0 = now_s();
    struct recur_sampler *gsmpl = recur_sampler_init_grammar(model, grammar, "root");
    const double t_build = now_s() - t0;
    struct recur_sampler *guided = recur_sampler_chain_init();
    if (!ctx || !plain || !inner || !gsmpl || !guided || !recur_sampler_chain_add(guided, gsmpl) ||
        !recur_sampler_chain_add(guided, inner)) {
        fprintf(stderr, "bench_grammar: %s\n", recur_last_error());
        return 1;
    }
    const int32_t n_vocab = recur_model_n_vocab(model);
    const recur_token eos = recur_token_eos(model), bos = recur_token_bos(model);
    recur_token *out = malloc(sizeof(recur_token) * (size_t)n_tok);
    double *td = malloc(sizeof(double) * (size_t)n_tok),
           *tp = malloc(sizeof(double) * (size_t)n_tok),
           *tg = malloc(sizeof(double) * (size_t)n_tok);
    if (!out || !td || !tp || !tg) return 1;
    recur_token t = bos >= 0 ? bos : 0;
    recur_pos pos = 0;
    int n_restart = 0;
    for (int i = 0; i < n_tok; i++) {
        double a = now_s();
        if (recur_decode(ctx, recur_batch_get_one(&t, 1)) != 0) {
            fprintf(stderr, "bench_grammar: decode: %s\n", recur_last_error());
            return 1;
        }
        double b = now_s();
        recur_sampler_sample(plain, ctx, -1);
        double c = now_s();
        t = recur_sampler_sample(guided, ctx, -1);
        double d = now_s();
        if (t < 0) {
            fprintf(stderr, "bench_grammar: grammar sampling: %s\n", recur_last_error());
            return 1;
        }
        td[i] = b - a;
        tp[i] = c - b;
        tg[i] = d - c;
        out[i] = t;
        pos++;
        if (t == eos) { /* start over */
            recur_memory_clear(recur_get_memory(ctx), true);
            recur_sampler_reset(guided);
            t = bos >= 0 ? bos : 0;
            n_restart++;
        }
    }
    (void)pos;

    /* the matcher alone, replaying the tokens */
    size_t cap = 1 << 20, len = 0;
    char *bytes = malloc(cap);
    size_t *off = malloc(sizeof(size_t) * ((size_t)n_vocab + 1));
    for (int32_t i = 0; i < n_vocab; i++) {
        off[i] = len;
        if (cap - len < 4096) bytes = realloc(bytes, cap *= 2);
        int32_t k = recur_token_to_piece(model, i, bytes + len, 4096, 0, false);
        len += k > 0 ? (size_t)k : 0;
    }
    off[n_vocab] = len;
    struct rgram *g = rgram_parse(grammar, strlen(grammar), "root");
    struct rgram_state *st = rgram_state_new(g);
    t0 = now_s();
    struct rgram_trie *trie = rgram_trie_new(n_vocab, bytes, off);
    const double t_trie = now_s() - t0;
    uint8_t *m1 = malloc((size_t)n_vocab), *m2 = malloc((size_t)n_vocab);
    double *tm = malloc(sizeof(double) * (size_t)n_tok),
           *tn = malloc(sizeof(double) * (size_t)n_tok);
    double *tw = malloc(sizeof(double) * (size_t)n_tok);
    int nn = 0;
    int64_t allowed_sum = 0;
    for (int i = 0; i < n_tok; i++) {
        double a = now_s();
        int64_t k1 = rgram_mask(st, trie, m1);
        double b = now_s();
        tm[i] = b - a;
        allowed_sum += k1;
        a = now_s();
        int64_t k3 = rgram_mask_walk(st, trie, m2);
        tw[i] = now_s() - a;
        if (k3 != k1 || memcmp(m1, m2, (size_t)n_vocab) != 0) {
            fprintf(stderr, "bench_grammar: the cached and walked masks differ at step %d\n", i);
            return 1;
        }
        if (i < n_naive) {
            a = now_s();
            int64_t k2 = rgram_mask_naive(st, trie, m2);
            tn[nn++] = now_s() - a;
            if (k1 != k2 || memcmp(m1, m2, (size_t)n_vocab) != 0) {
                fprintf(stderr, "bench_grammar: the trie and naive masks differ at step %d\n", i);
                return 1;
            }
        }
        if (out[i] == eos) {
            rgram_state_reset(st);
        } else if (!rgram_state_accept(st, bytes + off[out[i]], off[out[i] + 1] - off[out[i]])) {
            fprintf(stderr, "bench_grammar: replay: %s\n", recur_last_error());
            return 1;
        }
    }
    double sum_g = 0, sum_p = 0, sum_d = 0;
    for (int i = 0; i < n_tok; i++) sum_g += tg[i], sum_p += tp[i], sum_d += td[i];
    const double mean_added = (sum_g - sum_p) / n_tok * 1e6,
                 mean_base = (sum_d + sum_p) / n_tok * 1e6;
    const double mw = median(tw, n_tok) * 1e6;
    const double md = median(td, n_tok) * 1e6, mp = median(tp, n_tok) * 1e6,
                 mg = median(tg, n_tok) * 1e6, mm = median(tm, n_tok) * 1e6,
                 mn = median(tn, nn) * 1e6;
    const double added = mg - mp, base = md + mp;
    printf("vocabulary %d tokens, trie %zu nodes built in %.1f ms (sampler init %.1f ms); "
           "%d tokens, %d restarts, %.0f tokens allowed per step on average\n",
           n_vocab, rgram_trie_n_nodes(trie), t_trie * 1e3, t_build * 1e3, n_tok, n_restart,
           (double)allowed_sum / n_tok);
    printf("| per token (median) | µs |\n|---|---:|\n");
    printf("| decode | %.1f |\n| sample, no grammar | %.1f |\n| sample with grammar | %.1f |\n", md,
           mp, mg);
    printf("| grammar's addition | %.1f (%.1f%% of decode + sample) |\n", added,
           100.0 * added / base);
    printf("| grammar's addition, mean | %.1f (%.1f%% of decode + sample) |\n", mean_added,
           100.0 * mean_added / mean_base);
    printf("| trie mask alone (with its cache of recent states) | %.1f |\n", mm);
    printf("| trie walk alone (no cache) | %.1f |\n| naive mask alone (%d steps) | %.1f |\n", mw,
           nn, mn);
    printf("{\"n_vocab\": %d, \"decode_us\": %.2f, \"sample_us\": %.2f, \"sample_grammar_us\": "
           "%.2f, \"added_pct\": %.2f, \"added_mean_pct\": %.2f, \"trie_mask_us\": %.2f, "
           "\"trie_walk_us\": %.2f, \"naive_mask_us\": %.2f}\n",
           n_vocab, md, mp, mg, 100.0 * added / base, 100.0 * mean_added / mean_base, mm, mw, mn);
    rgram_trie_free(trie);
    rgram_state_free(st);
    rgram_free(g);
    free(m1);
    free(m2);
    free(tm);
    free(tn);
    free(tw);
    free(bytes);
    free(off);
    free(out);
    free(td);
    free(tp);
    free(tg);
    recur_sampler_free(plain);
    recur_sampler_free(guided);
    recur_free(ctx);
    recur_model_free(model);
    free(grammar);
    return 0;
}
