/* Links against the installed-style library target `recur` (not the internal one) and uses
 * only include/recur.h, as an outside program would: the public symbols must all be exported
 * (also from the shared library) and the header must stand on its own. */
#include "recur.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int failed = 0, passed = 0;
#define EXPECT(c) ((c) ? (void)passed++ : (void)(failed++, fprintf(stderr, "failed: %s\n", #c)))
    if (argc != 2) {
        fprintf(stderr, "usage: test_public MODEL\n");
        return 2;
    }
    EXPECT(recur_model_load_from_file("/nonexistent.gguf", recur_model_default_params()) == NULL);
    EXPECT(strstr(recur_last_error(), "/nonexistent.gguf") != NULL);
    struct recur_model *m = recur_model_load_from_file(argv[1], recur_model_default_params());
    EXPECT(m != NULL);
    if (!m) return 1;
    EXPECT(strcmp(recur_model_arch_name(m), "mamba") == 0); /* tests/make_models.sh: Mamba-1 */
    /* f32-tied: every tensor f32, so 4 bytes a parameter; at least the embedding's */
    EXPECT(recur_model_n_params(m) >=
           (uint64_t)recur_model_n_vocab(m) * (uint64_t)recur_model_n_embd(m));
    EXPECT(recur_model_size(m) == 4 * recur_model_n_params(m));
    struct recur_context *ctx = recur_init_from_model(m, recur_context_default_params());
    EXPECT(ctx != NULL);
    recur_token t[3] = {1, 2, 3};
    EXPECT(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    EXPECT(recur_get_logits_ith(ctx, -1) != NULL);
    EXPECT(recur_memory_seq_pos_max(recur_get_memory(ctx), 0) == 2);
    EXPECT(recur_state_get_size(ctx) > 0);
    recur_free(ctx);

    /* threads: 1, then a bigger team made by recur_set_n_threads; same logits either way
       (the rows are shared out differently, each row's sum is the same); bad counts refused */
    struct recur_context_params p = recur_context_default_params();
    p.n_threads = p.n_threads_batch = 0;
    EXPECT(recur_init_from_model(m, p) == NULL);
    EXPECT(strstr(recur_last_error(), "n_threads") != NULL);
    p.n_threads = p.n_threads_batch = 1;
    p.n_seq_max = 2;
    ctx = recur_init_from_model(m, p);
    EXPECT(ctx != NULL);
    if (!ctx) return 1;
    float first[8];
    EXPECT(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    memcpy(first, recur_get_logits_ith(ctx, -1), sizeof first);
    recur_set_n_threads(ctx, 3, 3);
    recur_memory_clear(recur_get_memory(ctx), true);
    EXPECT(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    EXPECT(memcmp(first, recur_get_logits_ith(ctx, -1), sizeof first) == 0);
    recur_set_n_threads(ctx, 0, 1000); /* clamped to 1 and 256 */
    recur_memory_clear(recur_get_memory(ctx), true);
    EXPECT(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    EXPECT(memcmp(first, recur_get_logits_ith(ctx, -1), sizeof first) == 0);
    recur_free(ctx);
    recur_model_free(m);
    printf("test_public: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
