/*
 * recur run: generate text from a prompt, streaming each token as it is sampled.
 *
 * With --state-in, the saved state's tokens that begin the prompt are not decoded again: a
 * recurrent state summarises all of them, so it is reused only when the saved tokens are a
 * prefix of the new prompt (else the prompt is decoded from scratch, with a note). The saved
 * state holds the logits of its last token, so a prompt equal to the saved tokens decodes
 * nothing at all. --state-out saves the state after generation with prompt + output tokens,
 * ready for the next turn, with a checkpoint every 64 positions: a later prompt that leaves
 * the saved tokens somewhere goes back to the last checkpoint before that point instead of
 * starting over.
 *
 * With --prompt-cache FILE, the prefix state cache (recur.h) is loaded from FILE, the longest
 * stored prefix of the prompt is restored, and the states of this run (the prompt minus its
 * last token, checkpoints every 64 tokens, the prompt, prompt + output) are stored and FILE is
 * rewritten: a later prompt that repeats, extends or shares the start of an earlier one
 * decodes only the rest.
 *
 * With --lookup N (prompt lookup decoding), each step decodes the sampled token together with
 * up to N drafts: the tokens that followed the last earlier occurrence of the text's last
 * 3 (or 2, or 1) tokens. Each draft is kept while the token sampled at its place equals it;
 * the first that differs is replaced by the sampled token and the memory rolls back to before
 * it (n_rollback). Every emitted token is sampled from the same logits, with the same sampler
 * calls, as without --lookup, so the output is the same, whatever the sampler.
 *
 * With --grammar, --grammar-file or --json-schema, a grammar sampler goes in front of the
 * chain (recur_sampler_init_grammar) once the prompt's tokens have gone to the penalties: the
 * output follows the grammar from its first token, and end of sequence, which stops the
 * output, is allowed only where the grammar is complete (the output may also stop at -n, a
 * prefix). A bad grammar or schema exits with status 2, its line and column on stderr.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tools.h"

/* Prompt lookup: the tokens that followed the latest earlier occurrence of the last g tokens
 * of hist[0..n) (g = 3, 2, 1: the longest that occurs), at most max of them into out. */
static int32_t find_draft(const recur_token *hist, int32_t n, int32_t max, recur_token *out) {
    for (int32_t g = 3; g >= 1; g--)
        for (int32_t i = n - g - 1; i >= 0; i--) {
            if (memcmp(hist + i, hist + n - g, sizeof(recur_token) * (size_t)g) != 0) continue;
            int32_t k = 0;
            for (; k < max && i + g + k < n; k++) out[k] = hist[i + g + k];
            return k;
        }
    return 0;
}

/* Makes sequence 0 hold exactly tokens[0..n): rolls back drafts past n, or decodes the last
 * token when the generation stopped before decoding it. */
static bool sync_state(struct recur_context *ctx, recur_token *tokens, int32_t n) {
    recur_memory_t mem = recur_get_memory(ctx);
    const int32_t held = recur_memory_seq_pos_max(mem, 0) + 1;
    if (held > n && !recur_memory_seq_rm(mem, 0, n, -1)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        return false;
    }
    if (held < n && recur_decode(ctx, recur_batch_get_one(&tokens[n - 1], 1)) != 0) {
        fprintf(stderr, "recur: decode failed: %s\n", recur_last_error());
        return false;
    }
    return true;
}

/* Restores --state-in; returns how many prompt tokens it already holds (0 when unusable).
 * When the prompt leaves the saved tokens at some point, the state is rolled back to its
 * newest snapshot before that point (states saved by --state-out keep checkpoints). */
static int32_t restore_state(struct recur_context *ctx, const char *path, const recur_token *prompt,
                             int32_t n_prompt, bool *failed) {
    size_t cap = (size_t)n_prompt + (1u << 20), n_saved = 0;
    recur_token *saved = malloc(sizeof(recur_token) * cap);
    *failed = false;
    if (!saved) {
        fprintf(stderr, "recur: out of memory\n");
        *failed = true;
        return 0;
    }
    int32_t reuse = 0;
    if (!recur_state_load_file(ctx, path, saved, cap, &n_saved)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        *failed = true;
    } else {
        size_t common = 0;
        while (common < n_saved && common < (size_t)n_prompt && saved[common] == prompt[common])
            common++;
        if (common == n_saved) {
            reuse = (int32_t)n_saved;
        } else {
            /* keep at least one prompt token to decode, for its logits */
            const int32_t keep = (int32_t)(common < (size_t)n_prompt ? common : common - 1);
            recur_memory_t mem = recur_get_memory(ctx);
            if (keep > 0 && recur_memory_seq_rm(mem, 0, keep, -1))
                reuse = recur_memory_seq_pos_max(mem, 0) + 1;
            fprintf(stderr, "recur: note: the prompt leaves the %zu tokens of %s after %zu; %s\n",
                    n_saved, path, common,
                    reuse > 0 ? "went back to the state's last checkpoint before that"
                              : "decoding it from scratch");
        }
    }
    if (reuse == 0) recur_memory_clear(recur_get_memory(ctx), true);
    free(saved);
    return reuse;
}

int cmd_run(int argc, char **argv) {
    struct gen_opts o;
    int st =
        gen_parse(argc, argv, GEN_RUN, "Generates text from a prompt, streaming it.", &o, NULL);
    if (st >= 0) return st;

    struct recur_model *model;
    struct recur_context *ctx;
    struct store *store = NULL; /* --prefix-cache-store */
    size_t len;
    char *grammar;
    if ((st = gen_grammar_text(&o, &grammar)) != TOOL_OK) return st;
    char *text = gen_prompt_text(&o, &len);
    if (!text) {
        free(grammar);
        return TOOL_FAIL;
    }
    if (!gen_load(&o, 1, &model, &ctx)) {
        free(text);
        free(grammar);
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
    /* the prompt's tokens go to the penalties, not to the grammar, which starts at the output */
    for (int32_t i = 0; i < n_prompt; i++) recur_sampler_accept(smpl, tokens[i]);
    if ((st = gen_add_grammar(model, grammar, NULL, &smpl)) != TOOL_OK) {
        ret = st;
        goto done;
    }

    int32_t reused = 0;
    if (o.state_in) {
        bool failed;
        reused = restore_state(ctx, o.state_in, tokens, n_prompt, &failed);
        if (failed) goto done;
    }
    const bool cache_file_ok = gen_cache_load(&o, ctx);
    /* the prefix cache: a file (--prompt-cache) and/or a second tier (--prefix-cache-store) */
    const bool caching = o.prompt_cache || o.prefix_store;
    if (!gen_store_attach(&o, ctx, &store)) goto done;
    double t0 = gen_now_s(); /* the prompt's time includes finding and restoring a prefix */
    if (caching && reused == 0) {
        reused = recur_prefix_cache_restore(ctx, 0, tokens, n_prompt);
        if (reused < 0) {
            fprintf(stderr, "recur: %s\n", recur_last_error());
            goto done;
        }
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (reused < n_prompt && !gen_decode_prompt(ctx, 0, tokens + reused, n_prompt - reused))
        goto done;
    double t1 = gen_now_s();
    if (caching) gen_cache_store(ctx, 0, tokens, n_prompt);

    /* one step: decode the last sampled token and its drafts, then sample at each place */
    const int32_t n_draft_max = o.lookup;
    recur_token *draft = malloc(sizeof(recur_token) * ((size_t)n_draft_max + 1));
    struct recur_batch vb = recur_batch_init(n_draft_max + 1, 0, 1);
    if (!draft || !vb.pos) {
        fprintf(stderr, "recur: out of memory\n");
        free(draft);
        recur_batch_free(vb);
        goto done;
    }
    int32_t n_gen = 0, n_steps = 0, n_drafted = 0, n_accepted = 0;
    const recur_token eos = recur_token_eos(model);
    recur_token t = o.n_predict > 0 ? recur_sampler_sample(smpl, ctx, -1) : -1;
    bool ok = true;
    while (ok && o.n_predict > 0) {
        if (t < 0) {
            fprintf(stderr, "\nrecur: sampling failed: %s\n", recur_last_error());
            ok = false;
            break;
        }
        if (t == eos) break;
        tokens[n_prompt + n_gen++] = t;
        gen_print_piece(stdout, model, t);
        fflush(stdout);
        if (n_gen == o.n_predict) break; /* the last token needs no decode: nothing follows */
        int32_t k = 0;
        if (n_draft_max > 0) {
            const int32_t room = o.n_predict - n_gen - 1; /* drafts become output */
            k = find_draft(tokens, n_prompt + n_gen, room < n_draft_max ? room : n_draft_max,
                           draft);
        }
        const recur_pos p = recur_memory_seq_pos_max(recur_get_memory(ctx), 0) + 1;
        const recur_seq_id seq0 = 0;
        vb.n_tokens = 0;
        int32_t added = 0;
        for (int32_t i = 0; i <= k && added == 0; i++)
            added = recur_batch_add(&vb, i == 0 ? t : draft[i - 1], p + i, &seq0, 1, true);
        const int32_t r = added != 0 ? -1 : recur_decode(ctx, vb);
        if (r == 1) { /* no room: a hybrid's attention cache is full (-c) */
            fprintf(stderr, "\nrecur: stopped after %d tokens: %s (raise -c)\n", n_gen,
                    recur_last_error());
            break;
        }
        if (r != 0) {
            fprintf(stderr, "\nrecur: decode failed: %s\n", recur_last_error());
            ok = false;
            break;
        }
        n_steps++;
        n_drafted += k;
        for (int32_t i = 0; i <= k; i++) {
            t = recur_sampler_sample(smpl, ctx, i);
            if (i == k || t != draft[i]) {
                /* drafts from i on are wrong: back to the state after the token before them */
                if (i < k && !recur_memory_seq_rm(recur_get_memory(ctx), 0, p + 1 + i, -1)) {
                    fprintf(stderr, "\nrecur: rollback failed: %s\n", recur_last_error());
                    ok = false;
                }
                break;
            }
            if (t == eos) break;
            n_accepted++;
            tokens[n_prompt + n_gen++] = t;
            gen_print_piece(stdout, model, t);
            fflush(stdout);
        }
        if (t == eos) break;
    }
    free(draft);
    recur_batch_free(vb);
    if (!ok) goto done;
    double t2 = gen_now_s();
    putchar('\n');
    fflush(stdout);
    const int32_t decoded = n_prompt - reused;
    fprintf(stderr,
            "recur: prompt %d tokens (%d reused) in %.3f s (%.1f tokens/s); "
            "generated %d tokens in %.3f s (%.1f tokens/s)\n",
            n_prompt, reused, t1 - t0, decoded > 0 ? decoded / (t1 - t0) : 0.0, n_gen, t2 - t1,
            n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
    if (n_draft_max > 0)
        fprintf(stderr,
                "recur: lookup: %d of %d drafts accepted (%.0f%%), %.2f tokens per decode "
                "step (%d steps)\n",
                n_accepted, n_drafted, n_drafted ? 100.0 * n_accepted / n_drafted : 0.0,
                n_steps ? (double)(n_gen - 1) / n_steps : 0.0, n_steps);

    const int32_t n_all = n_prompt + n_gen;
    if ((o.state_out || caching) && !sync_state(ctx, tokens, n_all)) goto done;
    if (o.state_out && !recur_state_save_file(ctx, o.state_out, tokens, (size_t)n_all)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        goto done;
    }
    if (caching) gen_cache_store(ctx, 0, tokens, n_all);
    if (o.prompt_cache && cache_file_ok && !gen_cache_save(&o, ctx)) goto done;
    ret = TOOL_OK;
done:
    gen_store_detach(ctx, store);
    recur_sampler_free(smpl);
    free(tokens);
    free(text);
    free(grammar);
    recur_free(ctx);
    recur_model_free(model);
    return ret;
}
