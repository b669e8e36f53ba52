/*
 * recur parallel: one prompt, many continuations at once. The prompt is decoded once on
 * sequence 0 and forked into the other sequences with seq_cp (they share its state until
 * each is decoded: copy on write); then every step samples each live sequence from its own
 * row and decodes all of them in one batch. Each sequence has its own sampler, seeded with
 * seed + its number, so the continuations differ unless sampling is greedy.
 *
 * With --prompt-cache FILE (see recur run), the prompt's longest stored prefix is restored
 * before decoding, and the prompt's states and every continuation are stored back into FILE.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

struct stream {
    struct recur_sampler *smpl;
    recur_token *out; /* generated tokens */
    int32_t n_out;
    int32_t row; /* its output row in the last batch; -1 when finished */
};

/* Stores each sequence's prompt + continuation, as far as its state holds it. */
static void store_streams(struct recur_context *ctx, const recur_token *prompt, int32_t n_prompt,
                          const struct stream *s, int32_t np, int32_t n_predict) {
    recur_token *all = malloc(sizeof(recur_token) * ((size_t)n_prompt + (size_t)n_predict + 1));
    if (!all) return;
    memcpy(all, prompt, sizeof(recur_token) * (size_t)n_prompt);
    for (int32_t i = 0; i < np; i++) {
        const int32_t held = recur_memory_seq_pos_max(recur_get_memory(ctx), i) + 1;
        if (held <= n_prompt || held > n_prompt + s[i].n_out) continue;
        memcpy(all + n_prompt, s[i].out, sizeof(recur_token) * (size_t)(held - n_prompt));
        gen_cache_store(ctx, i, all, held);
    }
    free(all);
}

int cmd_parallel(int argc, char **argv) {
    struct gen_opts o;
    int st =
        gen_parse(argc, argv, GEN_PARALLEL,
                  "Generates several continuations of one prompt in one batch per step.", &o, NULL);
    if (st >= 0) return st;

    size_t len;
    char *text = gen_prompt_text(&o, &len);
    if (!text) return TOOL_FAIL;
    struct recur_model *model;
    struct recur_context *ctx;
    const int32_t np = o.n_parallel;
    if (!gen_load(&o, (uint32_t)np, &model, &ctx)) {
        free(text);
        return TOOL_FAIL;
    }
    int ret = TOOL_FAIL;
    int32_t n_prompt = 0;
    recur_token *prompt = gen_tokenize(model, text, len, &n_prompt);
    struct stream *s = calloc((size_t)np, sizeof *s);
    struct recur_batch b = recur_batch_init(np, 0, 1);
    if (!prompt || !s || !b.pos) {
        if (prompt) fprintf(stderr, "recur: out of memory\n");
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "recur: the prompt is empty (no tokens to start from)\n");
        goto done;
    }
    for (int32_t i = 0; i < np; i++) {
        struct recur_sampler_params sp = o.sampling;
        sp.seed += (uint64_t)i;
        s[i].smpl = recur_sampler_chain_default(model, sp);
        s[i].out = malloc(sizeof(recur_token) * ((size_t)o.n_predict + 1));
        if (!s[i].smpl || !s[i].out) {
            fprintf(stderr, "recur: %s\n", s[i].smpl ? "out of memory" : recur_last_error());
            goto done;
        }
        for (int32_t j = 0; j < n_prompt; j++) recur_sampler_accept(s[i].smpl, prompt[j]);
        s[i].row = -1; /* the first step samples from the prompt's last row */
    }

    const bool cache_file_ok = gen_cache_load(&o, ctx);
    int32_t reused = 0;
    if (o.prompt_cache && (reused = recur_prefix_cache_restore(ctx, 0, prompt, n_prompt)) < 0) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }
    double t0 = gen_now_s();
    if (!gen_decode_prompt(ctx, 0, prompt + reused, n_prompt - reused)) goto done;
    if (o.prompt_cache) gen_cache_store(ctx, 0, prompt, n_prompt);
    recur_memory_t mem = recur_get_memory(ctx);
    for (int32_t i = 1; i < np; i++) recur_memory_seq_cp(mem, 0, i, -1, -1);
    double t1 = gen_now_s();

    const recur_token eos = recur_token_eos(model);
    int32_t n_live = np, n_generated = 0;
    for (int32_t step = 0; step < o.n_predict && n_live > 0; step++) {
        b.n_tokens = 0;
        for (int32_t i = 0; i < np; i++) {
            if (step > 0 && s[i].row < 0) continue; /* finished */
            recur_token t = recur_sampler_sample(s[i].smpl, ctx, step == 0 ? -1 : s[i].row);
            if (t < 0) {
                fprintf(stderr, "recur: sampling failed: %s\n", recur_last_error());
                goto done;
            }
            s[i].row = -1;
            if (t == eos) {
                n_live--;
                continue;
            }
            s[i].out[s[i].n_out++] = t;
            n_generated++;
            if (s[i].n_out == o.n_predict) { /* done: nothing more to decode for it */
                n_live--;
                continue;
            }
            const recur_seq_id seq = i;
            s[i].row = b.n_tokens;
            if (recur_batch_add(&b, t, n_prompt + s[i].n_out - 1, &seq, 1, true) != 0) {
                fprintf(stderr, "recur: %s\n", recur_last_error());
                goto done;
            }
        }
        if (b.n_tokens == 0) break;
        int32_t r = recur_decode(ctx, b);
        if (r != 0) {
            fprintf(stderr, "recur: decode failed (%d): %s\n", r, recur_last_error());
            goto done;
        }
    }
    double t2 = gen_now_s();

    for (int32_t i = 0; i < np; i++) {
        printf("sequence %d: ", i);
        fwrite(text, 1, len, stdout);
        for (int32_t j = 0; j < s[i].n_out; j++) gen_print_piece(stdout, model, s[i].out[j]);
        printf("\n\n");
    }
    fprintf(stderr,
            "recur: prompt %d tokens (%d reused) in %.3f s; %d sequences generated %d tokens in "
            "%.3f s (%.1f tokens/s in all)\n",
            n_prompt, reused, t1 - t0, np, n_generated, t2 - t1,
            n_generated > 0 ? n_generated / (t2 - t1) : 0.0);
    if (o.prompt_cache) {
        store_streams(ctx, prompt, n_prompt, s, np, o.n_predict);
        if (cache_file_ok && !gen_cache_save(&o, ctx)) goto done;
    }
    ret = TOOL_OK;
done:
    if (s)
        for (int32_t i = 0; i < np; i++) {
            recur_sampler_free(s[i].smpl);
            free(s[i].out);
        }
    free(s);
    if (b.pos) recur_batch_free(b);
    free(prompt);
    free(text);
    recur_free(ctx);
    recur_model_free(model);
    return ret;
}
