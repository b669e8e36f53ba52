/*
 * recur run: generate text from a prompt, streaming each token as it is sampled.
 *
 * With --state-in, the saved state's tokens that begin the prompt are not decoded again: a
 * recurrent state summarises all of them, so it is reused only when the saved tokens are a
 * prefix of the new prompt (else the prompt is decoded from scratch, with a note). The saved
 * state holds the logits of its last token, so a prompt equal to the saved tokens decodes
 * nothing at all. --state-out saves the state after generation with prompt + output tokens,
 * ready for the next turn.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

#define RUN_FLAGS                                                                                  \
    (GBIT(G_MODEL) | GBIT(G_PROMPT) | GBIT(G_FILE) | GBIT(G_N_PREDICT) | GBIT(G_THREADS) |         \
     GBIT(G_BATCH) | GBIT(G_UBATCH) | GBIT(G_TEMP) | GBIT(G_TOP_K) | GBIT(G_TOP_P) |               \
     GBIT(G_MIN_P) | GBIT(G_SEED) | GBIT(G_REPEAT_PENALTY) | GBIT(G_REPEAT_LAST_N) |               \
     GBIT(G_FREQ_PENALTY) | GBIT(G_PRESENCE_PENALTY) | GBIT(G_STATE_IN) | GBIT(G_STATE_OUT))

/* Restores --state-in; returns how many prompt tokens it already holds (0 when unusable). */
static int32_t restore_state(struct recur_context *ctx, const char *path, const recur_token *prompt,
                             int32_t n_prompt, bool *failed) {
    size_t cap = (size_t)n_prompt + 1, n_saved = 0;
    recur_token *saved = malloc(sizeof(recur_token) * cap);
    *failed = false;
    if (!saved) {
        fprintf(stderr, "recur: out of memory\n");
        *failed = true;
        return 0;
    }
    int32_t reuse = 0;
    if (!recur_state_load_file(ctx, path, saved, cap, &n_saved)) {
        if (strstr(recur_last_error(), "room for")) {
            fprintf(stderr,
                    "recur: note: %s holds more tokens than the prompt; decoding the "
                    "prompt from scratch\n",
                    path);
        } else {
            fprintf(stderr, "recur: %s\n", recur_last_error());
            *failed = true;
        }
    } else if (n_saved > 0 && memcmp(saved, prompt, sizeof(recur_token) * n_saved) == 0) {
        reuse = (int32_t)n_saved;
    } else {
        fprintf(stderr,
                "recur: note: the prompt does not begin with the %zu tokens of %s; "
                "decoding it from scratch\n",
                n_saved, path);
    }
    if (reuse == 0) recur_memory_clear(recur_get_memory(ctx), true);
    free(saved);
    return reuse;
}

int cmd_run(int argc, char **argv) {
    struct gen_opts o;
    int st = gen_parse(argc, argv, RUN_FLAGS, "Generates text from a prompt, streaming it.", &o);
    if (st >= 0) return st;

    struct recur_model *model;
    struct recur_context *ctx;
    size_t len;
    char *text = gen_prompt_text(&o, &len);
    if (!text) return TOOL_FAIL;
    if (!gen_load(&o, 1, &model, &ctx)) {
        free(text);
        return TOOL_FAIL;
    }
    int ret = TOOL_FAIL;
    struct recur_sampler *smpl = NULL;
    int32_t n_prompt = 0;
    recur_token *tokens = gen_tokenize(model, text, len, &n_prompt);
    recur_token *all =
        tokens ? realloc(tokens, sizeof(recur_token) * ((size_t)n_prompt + (size_t)o.n_predict + 1))
               : NULL;
    if (!all) goto done;
    tokens = all;
    if (n_prompt == 0) {
        fprintf(stderr, "recur: the prompt is empty (no tokens to start from)\n");
        goto done;
    }
    if (!(smpl = recur_sampler_chain_default(model, o.sampling))) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }

    int32_t reused = 0;
    if (o.state_in) {
        bool failed;
        reused = restore_state(ctx, o.state_in, tokens, n_prompt, &failed);
        if (failed) goto done;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);

    double t0 = gen_now_s();
    if (reused < n_prompt && !gen_decode_prompt(ctx, 0, tokens + reused, n_prompt - reused))
        goto done;
    double t1 = gen_now_s();
    for (int32_t i = 0; i < n_prompt; i++) recur_sampler_accept(smpl, tokens[i]);

    int32_t n_gen = 0;
    const recur_token eos = recur_token_eos(model);
    while (n_gen < o.n_predict) {
        recur_token t = recur_sampler_sample(smpl, ctx, -1);
        if (t < 0) {
            fprintf(stderr, "\nrecur: sampling failed: %s\n", recur_last_error());
            goto done;
        }
        if (t == eos) break;
        tokens[n_prompt + n_gen++] = t;
        gen_print_piece(stdout, model, t);
        fflush(stdout);
        if (n_gen == o.n_predict) break; /* the last token needs no decode: nothing follows */
        if (recur_decode(ctx, recur_batch_get_one(&tokens[n_prompt + n_gen - 1], 1)) != 0) {
            fprintf(stderr, "\nrecur: decode failed: %s\n", recur_last_error());
            goto done;
        }
    }
    double t2 = gen_now_s();
    putchar('\n');
    fflush(stdout);
    const int32_t decoded = n_prompt - reused;
    fprintf(stderr,
            "recur: prompt %d tokens (%d reused from the state) in %.3f s (%.1f tokens/s); "
            "generated %d tokens in %.3f s (%.1f tokens/s)\n",
            n_prompt, reused, t1 - t0, decoded > 0 ? decoded / (t1 - t0) : 0.0, n_gen, t2 - t1,
            n_gen > 0 ? n_gen / (t2 - t1) : 0.0);

    if (o.state_out) {
        /* the state must hold every saved token: decode the last sampled one too */
        if (n_gen > 0 && n_gen == o.n_predict &&
            recur_decode(ctx, recur_batch_get_one(&tokens[n_prompt + n_gen - 1], 1)) != 0) {
            fprintf(stderr, "recur: decode failed: %s\n", recur_last_error());
            goto done;
        }
        if (!recur_state_save_file(ctx, o.state_out, tokens, (size_t)n_prompt + (size_t)n_gen)) {
            fprintf(stderr, "recur: %s\n", recur_last_error());
            goto done;
        }
    }
    ret = TOOL_OK;
done:
    recur_sampler_free(smpl);
    free(tokens);
    free(text);
    recur_free(ctx);
    recur_model_free(model);
    return ret;
}
