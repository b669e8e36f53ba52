/*
 * grammar_gen: outputs of the shipped model under a grammar, for tests/cli/test_grammar_gen.py.
 * Uses only the public API.
 *
 *   grammar_gen MODEL (--grammar-file FILE | --schema-file FILE) N_OUT N_TOKENS SEED
 *
 * Generates N_OUT continuations of the prompt "Answer: " at temperature 1.0 (no top-k, top-p
 * or min-p: the model's distribution restricted to the grammar), each at most N_TOKENS
 * tokens, in batches of up to 50 sequences decoded together, each with its own seed. Prints
 * one line per output: "1 HEX" when it ended with end of sequence (the grammar was complete
 * there), "0 HEX" when it was cut at N_TOKENS; HEX is the output's bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

#include "file_util.h"

#define MAX_PAR 50

static int fail(const char *what) {
    fprintf(stderr, "grammar_gen: %s: %s\n", what, recur_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: grammar_gen MODEL (--grammar-file F | --schema-file F) N_OUT "
                        "N_TOKENS SEED\n");
        return 2;
    }
    char *text = file_read(argv[3], NULL);
    if (!text) {
        fprintf(stderr, "grammar_gen: cannot read %s\n", argv[3]);
        return 1;
    }
    char *grammar = text;
    if (strcmp(argv[2], "--schema-file") == 0) {
        grammar = recur_json_schema_to_grammar(text);
        free(text);
        if (!grammar) return fail("schema");
    }
    const int n_out = atoi(argv[4]), n_tok = atoi(argv[5]);
    const unsigned long long seed = strtoull(argv[6], NULL, 10);
    struct recur_model *model = recur_model_load_from_file(argv[1], recur_model_default_params());
    if (!model) return fail("model");
    struct recur_context_params cp = recur_context_default_params();
    cp.n_seq_max = MAX_PAR;
    cp.n_threads = cp.n_threads_batch = 1;
    struct recur_context *ctx = recur_init_from_model(model, cp);
    if (!ctx) return fail("context");
    recur_token prompt[64];
    const int32_t n_prompt = recur_tokenize(model, "Answer: ", 8, prompt, 64, true, false);
    if (n_prompt < 1) return fail("tokenize");
    const recur_token eos = recur_token_eos(model);
    struct recur_batch b = recur_batch_init(MAX_PAR, 0, 1);
    struct recur_sampler *smpl[MAX_PAR];
    unsigned char *out[MAX_PAR];
    size_t len[MAX_PAR];
    int row[MAX_PAR], done[MAX_PAR];
    char piece[256];
    for (int base = 0; base < n_out; base += MAX_PAR) {
        const int np = n_out - base < MAX_PAR ? n_out - base : MAX_PAR;
        recur_memory_clear(recur_get_memory(ctx), true);
        if (recur_decode(ctx, recur_batch_get_one(prompt, n_prompt)) != 0) return fail("decode");
        for (int i = 1; i < np; i++) recur_memory_seq_cp(recur_get_memory(ctx), 0, i, -1, -1);
        for (int i = 0; i < np; i++) {
            struct recur_sampler_params sp = recur_sampler_default_params();
            sp.temp = 1.0f;
            sp.top_k = 0;
            sp.top_p = 1.0f;
            sp.min_p = 0.0f;
            sp.seed = seed + (unsigned long long)(base + i);
            struct recur_sampler *inner = recur_sampler_chain_default(model, sp);
            smpl[i] = recur_sampler_chain_init();
            if (!inner || !smpl[i] ||
                !recur_sampler_chain_add(smpl[i],
                                         recur_sampler_init_grammar(model, grammar, NULL)) ||
                !recur_sampler_chain_add(smpl[i], inner))
                return fail("sampler");
            out[i] = malloc((size_t)n_tok * sizeof piece);
            len[i] = 0;
            row[i] = -1;
            done[i] = 0;
        }
        for (int step = 0; step < n_tok; step++) {
            b.n_tokens = 0;
            for (int i = 0; i < np; i++) {
                if (done[i]) continue;
                recur_token t = recur_sampler_sample(smpl[i], ctx, step == 0 ? -1 : row[i]);
                if (t < 0) return fail("sample");
                if (t == eos) {
                    done[i] = 1; /* complete */
                    continue;
                }
                int32_t k = recur_token_to_piece(model, t, piece, sizeof piece, 0, false);
                if (k < 0) return fail("piece");
                memcpy(out[i] + len[i], piece, (size_t)k);
                len[i] += (size_t)k;
                if (step == n_tok - 1) {
                    done[i] = 2; /* cut */
                    continue;
                }
                const recur_seq_id seq = i;
                row[i] = b.n_tokens;
                if (recur_batch_add(&b, t, n_prompt + step, &seq, 1, true) != 0)
                    return fail("batch");
            }
            if (b.n_tokens == 0) break;
            if (recur_decode(ctx, b) != 0) return fail("decode");
        }
        for (int i = 0; i < np; i++) {
            printf("%d ", done[i] == 1);
            for (size_t j = 0; j < len[i]; j++) printf("%02x", out[i][j]);
            printf("\n");
            free(out[i]);
            recur_sampler_free(smpl[i]);
        }
    }
    recur_batch_free(b);
    recur_free(ctx);
    recur_model_free(model);
    free(grammar);
    return 0;
}
