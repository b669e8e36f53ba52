/*
 * recur perplexity: how well a model predicts a text, with llama-perplexity's method by
 * default, so that the two engines print the same figure for the same model and text.
 *
 * llama-perplexity's method (tools/perplexity/perplexity.cpp in llama.cpp): the text is
 * tokenised once with the vocabulary's specials (BOS first when it adds BOS; special tokens in
 * the text are plain text) and must hold at least two windows of -c tokens. It is cut into
 * windows of -c tokens that do not overlap, from the first token; the tail shorter than a
 * window is left out. Each window is decoded from a zero state, its first token replaced by
 * BOS when the vocabulary adds BOS, and only its second half is scored: the logits at
 * positions c/2 .. c-2 predict the tokens at c/2+1 .. c-1, c - c/2 - 1 tokens per window.
 *
 * --score-all is the training script's method (tools/dev/train): the same windows, but every
 * token after the window's first is scored (c - 1 per window), and a text of one window is
 * enough. It is the figure to compare with the trainer's held-out loss.
 *
 * -np windows are decoded in one batch, one sequence each. Printed as llama-perplexity: the
 * running perplexity after each window ("[1]41.2,[2]39.8,..."), then "Final estimate: PPL = P
 * +/- U" where U is the standard error of the mean negative log-likelihood carried through
 * exp; then the mean loss in nats per scored token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

/* -log softmax(logits)[target], in double so that a 50k-way sum loses nothing. */
static double token_nll(const float *logits, int32_t n_vocab, recur_token target) {
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - max);
    return log(sum) + max - (double)logits[target];
}

/* The model's BOS when its tokenizer adds one (tokenising "" with specials gives it). */
static recur_token model_bos_if_added(const struct recur_model *model) {
    recur_token t[2];
    return recur_tokenize(model, "", 0, t, 2, true, false) == 1 ? t[0] : -1;
}

int cmd_perplexity(int argc, char **argv) {
    /* --score-all is this command's own flag: taken out before the common parser runs */
    bool score_all = false;
    char **args = malloc(sizeof(char *) * ((size_t)argc + 1));
    if (!args) {
        fprintf(stderr, "recur: out of memory\n");
        return TOOL_FAIL;
    }
    int n_args = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--score-all") == 0)
            score_all = true;
        else
            args[n_args++] = argv[i];
    }
    args[n_args] = NULL;
    struct gen_opts o;
    int st =
        gen_parse(n_args, args, GEN_PERPLEXITY,
                  "Reports the perplexity of a model on a text file (-f) as llama-perplexity\n"
                  "does: windows of -c tokens, each decoded from a zero state (-np at a time),\n"
                  "BOS first when the vocabulary adds it, the second half of each scored.\n"
                  "  --score-all        score every token after each window's first, as the\n"
                  "                     training script (tools/dev/train) does",
                  &o, NULL);
    free(args);
    if (st >= 0) return st;
    if (!o.prompt_file) {
        fprintf(stderr, "recur perplexity: -f FILE is required\n");
        return TOOL_USAGE;
    }
    const int32_t n_ctx = o.n_ctx, n_par = o.n_parallel;
    if ((int64_t)n_ctx * n_par > (1 << 24)) {
        fprintf(stderr, "recur perplexity: -c x -np is too large (%lld tokens per batch)\n",
                (long long)n_ctx * n_par);
        return TOOL_USAGE;
    }
    o.n_batch = (uint32_t)(n_ctx * n_par);
    if (o.n_ubatch > o.n_batch) o.n_ubatch = o.n_batch;
    o.attn_ctx = n_ctx * n_par; /* a hybrid's attention rows: every window of a batch */

    size_t len;
    char *text = gen_prompt_text(&o, &len);
    if (!text) return TOOL_FAIL;
    struct recur_model *model;
    struct recur_context *ctx;
    if (!gen_load(&o, (uint32_t)n_par, &model, &ctx)) {
        free(text);
        return TOOL_FAIL;
    }
    int ret = TOOL_FAIL;
    struct recur_batch batch = {0};
    recur_token *tokens = NULL;
    double t0 = gen_now_s();
    fprintf(stderr, "perplexity: tokenizing the input ..\n");
    if (len > INT32_MAX / 4) {
        fprintf(stderr, "recur: %s is too long (%zu bytes)\n", o.prompt_file, len);
        goto done;
    }
    int32_t cap = RECUR_TOKENS_MAX((int32_t)len);
    if (!(tokens = malloc(sizeof(recur_token) * (size_t)cap))) {
        fprintf(stderr, "recur: out of memory\n");
        goto done;
    }
    /* llama-perplexity tokenises with the vocabulary's specials (BOS); the training script
     * tokenised without */
    int32_t n_tokens = recur_tokenize(model, text, (int32_t)len, tokens, cap, !score_all, false);
    if (n_tokens < 0) {
        fprintf(stderr, "recur: tokenizing %s failed: %s\n", o.prompt_file, recur_last_error());
        goto done;
    }
    int32_t n_windows = n_tokens / n_ctx;
    if (o.n_chunks > 0 && o.n_chunks < n_windows) n_windows = o.n_chunks;
    fprintf(stderr, "perplexity: tokenization took %.1f ms, %d tokens\n", (gen_now_s() - t0) * 1e3,
            n_tokens);
    if (!score_all && n_tokens < 2 * n_ctx) { /* llama-perplexity's requirement */
        fprintf(stderr,
                "recur: %s has %d tokens: at least %d (two windows of -c %d) are needed to "
                "evaluate perplexity as llama-perplexity does (--score-all needs one window)\n",
                o.prompt_file, n_tokens, 2 * n_ctx, n_ctx);
        goto done;
    }
    if (n_windows == 0) {
        fprintf(stderr, "recur: %s has %d tokens, fewer than one window of -c %d\n", o.prompt_file,
                n_tokens, n_ctx);
        goto done;
    }
    fprintf(stderr,
            "perplexity: calculating perplexity over %d chunks, n_ctx=%d, batch_size=%u, "
            "n_seq=%d\n",
            n_windows, n_ctx, o.n_batch, n_par);

    batch = recur_batch_init((int32_t)o.n_batch, 0, 1);
    if (!batch.pos) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }
    const recur_token bos = model_bos_if_added(model);
    /* positions whose logits are scored: first .. n_ctx - 2 (each predicts the next token) */
    const int32_t first = score_all ? 0 : n_ctx / 2;
    const int32_t n_vocab = recur_model_n_vocab(model);
    recur_memory_t mem = recur_get_memory(ctx);
    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    t0 = gen_now_s();
    for (int32_t w0 = 0; w0 < n_windows; w0 += n_par) {
        const int32_t nw = n_windows - w0 < n_par ? n_windows - w0 : n_par;
        recur_memory_clear(mem, true); /* every window starts from a zero state */
        batch.n_tokens = 0;
        int32_t r = 0;
        for (recur_seq_id s = 0; s < nw && r == 0; s++) {
            const recur_token *win = tokens + (size_t)(w0 + s) * (size_t)n_ctx;
            for (int32_t j = 0; j < n_ctx && r == 0; j++) /* the last token predicts nothing */
                r = recur_batch_add(&batch, j == 0 && bos >= 0 ? bos : win[j], j, &s, 1,
                                    j >= first && j < n_ctx - 1);
        }
        if (r == 0) r = recur_decode(ctx, batch);
        if (r != 0) {
            fprintf(stderr, "\nrecur: decoding window %d failed (%d): %s\n", w0 + 1, r,
                    recur_last_error());
            goto done;
        }
        for (int32_t s = 0; s < nw; s++) {
            const recur_token *win = tokens + (size_t)(w0 + s) * (size_t)n_ctx;
            for (int32_t j = first; j < n_ctx - 1; j++) {
                const float *lg = recur_get_logits_ith(ctx, s * n_ctx + j);
                if (!lg) {
                    fprintf(stderr, "\nrecur: %s\n", recur_last_error());
                    goto done;
                }
                double v = token_nll(lg, n_vocab, win[j + 1]);
                nll += v;
                nll2 += v * v;
                count++;
            }
            printf("[%d]%.4f,", w0 + s + 1, exp(nll / (double)count));
            fflush(stdout);
        }
        if (w0 == 0)
            fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.1f minutes\n",
                    gen_now_s() - t0,
                    (gen_now_s() - t0) * ((n_windows + n_par - 1) / n_par) / 60.0);
    }
    const double mean = nll / (double)count;
    const double var = count > 1 ? (nll2 / (double)count - mean * mean) / (double)(count - 1) : 0;
    const double ppl = exp(mean);
    printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * sqrt(var > 0 ? var : 0));
    printf("mean loss = %.6f nats/token over %lld scored tokens in %d windows of %d (%s)\n", mean,
           (long long)count, n_windows, n_ctx,
           score_all ? "every token after the first: --score-all" : "second halves");
    fprintf(stderr, "perplexity: %.2f s, %.1f tokens/s\n", gen_now_s() - t0,
            (double)n_windows * n_ctx / (gen_now_s() - t0));
    ret = TOOL_OK;
done:
    recur_batch_free(batch);
    free(tokens);
    free(text);
    recur_free(ctx);
    recur_model_free(model);
    return ret;
}
