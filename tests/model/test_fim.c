/* The fill-in-the-middle getters of include/recur.h on real model files, through the public
 * library only (as test_public): a model written without FIM keys answers -1 for all six, one
 * written with `recur mkmodel --fim 297,298,299` (tests/model/make_models.sh) answers those
 * ids for prefix, suffix and middle and -1 for the three it does not name; a vocab_only load
 * reads the same keys.
 *   test_fim PLAIN.gguf FIM.gguf */
#include "recur.h"

#include <stdio.h>

static int failed = 0, passed = 0;
#define EXPECT(c) ((c) ? (void)passed++ : (void)(failed++, fprintf(stderr, "failed: %s\n", #c)))

static void expect_fim(const struct recur_model *m, recur_token pre, recur_token suf,
                       recur_token mid) {
    EXPECT(recur_token_fim_pre(m) == pre);
    EXPECT(recur_token_fim_suf(m) == suf);
    EXPECT(recur_token_fim_mid(m) == mid);
    EXPECT(recur_token_fim_pad(m) == -1);
    EXPECT(recur_token_fim_rep(m) == -1);
    EXPECT(recur_token_fim_sep(m) == -1);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_fim PLAIN.gguf FIM.gguf\n");
        return 2;
    }
    struct recur_model_params mp = recur_model_default_params();
    struct recur_model *plain = recur_model_load_from_file(argv[1], mp);
    struct recur_model *fim = recur_model_load_from_file(argv[2], mp);
    mp.vocab_only = true;
    struct recur_model *fim_vocab = recur_model_load_from_file(argv[2], mp);
    EXPECT(plain && fim && fim_vocab);
    if (!plain || !fim || !fim_vocab) {
        fprintf(stderr, "%s\n", recur_last_error());
        return 1;
    }
    expect_fim(plain, -1, -1, -1);
    expect_fim(fim, 297, 298, 299);
    expect_fim(fim_vocab, 297, 298, 299);
    recur_model_free(plain);
    recur_model_free(fim);
    recur_model_free(fim_vocab);
    printf("test_fim: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
