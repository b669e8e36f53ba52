/*
 * The public header's contracts that need no model (include/recur.h, "Conventions"):
 *  - the NULL policy: every public function that takes a handle (model, context, memory,
 *    sampler, batch pointer) or a path, called with NULL there, returns the failure value its
 *    comment names and sets the last error to "FUNCTION: ARGUMENT is NULL" (the free functions
 *    take NULL and do nothing);
 *  - the version: recur_version() is RECUR_VERSION_MAJOR.MINOR.PATCH, and both are the
 *    project's version as CMake has it (RECUR_PROJECT_VERSION, passed by tests/CMakeLists.txt).
 * Uses only <recur.h>, as a program would.
 */
#include <recur.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define TEST_LAST_ERROR recur_last_error
#include "test.h"

/* An error that is not a NULL error, so that a function that fails without setting its own
 * message is caught (the check would otherwise read an earlier call's message). */
static void plant_other_error(void) {
    REQUIRE(recur_chat_template_name("no-such-template") == NULL);
    REQUIRE(strstr(recur_last_error(), "is NULL") == NULL);
}

/* fn(args...) returns fail and names fn and arg in the last error. */
#define EXPECT_FAIL(fail, fn, arg, ...)                                                            \
    do {                                                                                           \
        plant_other_error();                                                                       \
        CHECK_MSG(fn(__VA_ARGS__) == (fail), "%s did not return %s", #fn, #fail);                  \
        CHECK_ERR(#fn ": " arg " is NULL");                                                        \
    } while (0)

/* the same for a function that returns nothing */
#define EXPECT_VOID(fn, arg, ...)                                                                  \
    do {                                                                                           \
        plant_other_error();                                                                       \
        fn(__VA_ARGS__);                                                                           \
        CHECK_ERR(#fn ": " arg " is NULL");                                                        \
    } while (0)

static void test_null_models(void) {
    const struct recur_model_params mp = recur_model_default_params();
    const struct recur_context_params cp = recur_context_default_params();
    const struct recur_model *m = NULL;
    recur_token tok[4] = {0};
    char buf[16];
    const void *addr = &addr;
    size_t size = 7;

    EXPECT_FAIL(NULL, recur_model_load_from_file, "path", NULL, mp);
    EXPECT_FAIL(false, recur_model_mapping, "model", m, &addr, &size);
    CHECK(addr == NULL && size == 0);
    EXPECT_FAIL(false, recur_model_mapping, "addr", m, NULL, &size);
    EXPECT_FAIL(false, recur_model_mapping, "size", m, &addr, NULL);
    EXPECT_FAIL(NULL, recur_init_from_model, "model", NULL, cp);
    EXPECT_FAIL(0, recur_model_n_vocab, "model", m);
    EXPECT_FAIL(0, recur_model_n_embd, "model", m);
    EXPECT_FAIL(0, recur_model_n_layer, "model", m);
    EXPECT_FAIL(NULL, recur_model_arch_name, "model", m);
    EXPECT_FAIL(0, recur_model_size, "model", m);
    EXPECT_FAIL(0, recur_model_n_params, "model", m);
    EXPECT_FAIL(0, recur_model_repack_size, "model", m);
    EXPECT_FAIL(0, recur_model_fingerprint, "model", m);
    EXPECT_FAIL(0, recur_model_n_tensors, "model", m);
    struct recur_tensor_info info;
    EXPECT_FAIL(false, recur_model_tensor, "model", m, 0, &info);
    EXPECT_FAIL(NULL, recur_model_chat_template, "model", m, NULL);
    EXPECT_FAIL(INT32_MIN, recur_tokenize, "model", m, "a", 1, tok, 4, false, false);
    EXPECT_FAIL(INT32_MIN, recur_tokenize_except, "model", m, "a", 1, tok, 4, false, NULL, 0);
    EXPECT_FAIL(0, recur_token_to_piece, "model", m, 0, buf, (int32_t)sizeof buf, 0, false);
    EXPECT_FAIL(INT32_MIN, recur_detokenize, "model", m, tok, 1, buf, (int32_t)sizeof buf, false,
                false);
    EXPECT_FAIL(-1, recur_token_bos, "model", m);
    EXPECT_FAIL(-1, recur_token_eos, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_pre, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_suf, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_mid, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_pad, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_rep, "model", m);
    EXPECT_FAIL(-1, recur_token_fim_sep, "model", m);
    EXPECT_FAIL(NULL, recur_sampler_chain_default, "model", m, recur_sampler_default_params());
    EXPECT_FAIL(NULL, recur_sampler_init_grammar, "model", m, "root ::= \"a\"", NULL);
    recur_model_free(NULL); /* free functions take NULL */
}

static void test_null_contexts(void) {
    struct recur_context *c = NULL;
    recur_token tok[4] = {1, 2, 3, 4};
    uint8_t bytes[8];
    size_t n = 0;
    double gflops = 0, gbps = 0;

    EXPECT_FAIL(0, recur_n_seq_max, "ctx", c);
    EXPECT_FAIL(0, recur_n_batch, "ctx", c);
    EXPECT_FAIL(0, recur_n_ubatch, "ctx", c);
    EXPECT_FAIL(NULL, recur_get_model, "ctx", c);
    EXPECT_VOID(recur_set_n_threads, "ctx", c, 2, 2);
    EXPECT_FAIL(NULL, recur_context_isa, "ctx", c);
    EXPECT_FAIL(false, recur_context_probe, "ctx", c, &gflops, &gbps);
    EXPECT_FAIL(-1, recur_decode, "ctx", c, recur_batch_get_one(tok, 1));
    EXPECT_FAIL(NULL, recur_get_logits_ith, "ctx", c, -1);
    EXPECT_FAIL(NULL, recur_get_logits, "ctx", c);
    EXPECT_FAIL(NULL, recur_get_embeddings_ith, "ctx", c, 0);
    EXPECT_FAIL(NULL, recur_get_memory, "ctx", c);

    EXPECT_FAIL(0, recur_state_get_size, "ctx", c);
    EXPECT_FAIL(0, recur_state_get_data, "ctx", c, bytes, sizeof bytes);
    EXPECT_FAIL(0, recur_state_set_data, "ctx", c, bytes, sizeof bytes);
    EXPECT_FAIL(0, recur_state_seq_get_size, "ctx", c, 0);
    EXPECT_FAIL(0, recur_state_seq_get_data, "ctx", c, bytes, sizeof bytes, 0);
    EXPECT_FAIL(0, recur_state_seq_set_data, "ctx", c, bytes, sizeof bytes, 0);
    EXPECT_FAIL(false, recur_state_save_file, "ctx", c, "x.state", tok, 1);
    EXPECT_FAIL(false, recur_state_load_file, "ctx", c, "x.state", tok, 4, &n);
    EXPECT_FAIL(0, recur_state_seq_save_file, "ctx", c, "x.state", 0, tok, 1);
    EXPECT_FAIL(0, recur_state_seq_load_file, "ctx", c, "x.state", 0, tok, 4, &n);
    EXPECT_FAIL(false, recur_file_check_writable, "path", NULL);

    struct recur_prefix_cache_stats st;
    EXPECT_FAIL(-1, recur_prefix_cache_store, "ctx", c, 0, tok, 1);
    EXPECT_FAIL(-1, recur_prefix_cache_restore, "ctx", c, 0, tok, 1);
    EXPECT_FAIL(-1, recur_prefix_cache_store_tenant, "ctx", c, 1, 0, tok, 1);
    EXPECT_FAIL(-1, recur_prefix_cache_restore_tenant, "ctx", c, 1, 0, tok, 1);
    EXPECT_FAIL(false, recur_prefix_cache_set_store, "ctx", c, NULL);
    EXPECT_FAIL(false, recur_prefix_cache_get_stats, "ctx", c, &st);
    EXPECT_FAIL(false, recur_prefix_cache_save_file, "ctx", c, "x.cache");
    EXPECT_FAIL(false, recur_prefix_cache_load_file, "ctx", c, "x.cache");
    recur_free(NULL);
}

static void test_null_memory_batches(void) {
    recur_memory_t mem = NULL;
    EXPECT_VOID(recur_memory_clear, "mem", mem, true);
    EXPECT_FAIL(false, recur_memory_seq_rm, "mem", mem, 0, -1, -1);
    EXPECT_VOID(recur_memory_seq_cp, "mem", mem, 0, 1, -1, -1);
    EXPECT_VOID(recur_memory_seq_keep, "mem", mem, 0);
    EXPECT_VOID(recur_memory_seq_add, "mem", mem, 0, -1, -1, 1);
    EXPECT_VOID(recur_memory_seq_div, "mem", mem, 0, -1, -1, 2);
    EXPECT_FAIL(-1, recur_memory_seq_pos_min, "mem", mem, 0);
    EXPECT_FAIL(-1, recur_memory_seq_pos_max, "mem", mem, 0);
    EXPECT_FAIL(false, recur_memory_can_shift, "mem", mem);

    const recur_seq_id seq = 0;
    EXPECT_FAIL(-1, recur_batch_add, "batch", NULL, 1, 0, &seq, 1, true);
    struct recur_batch b = recur_batch_init(2, 0, 1);
    REQUIRE(b.pos);
    EXPECT_FAIL(-1, recur_batch_add, "seq_ids", &b, 1, 0, NULL, 1, true);
    CHECK(b.n_tokens == 0);
    recur_batch_free(b);
}

static void test_null_samplers(void) {
    struct recur_sampler *s = NULL;
    recur_token ids[2];
    float probs[2];
    const float logits[2] = {0.0f, 1.0f};

    EXPECT_FAIL(-1, recur_sampler_sample, "smpl", s, NULL, 0);
    EXPECT_FAIL(-1, recur_sampler_sample_logits, "smpl", s, logits, 2);
    EXPECT_FAIL(-1, recur_sampler_get_probs, "smpl", s, ids, probs, 2);
    EXPECT_FAIL(-1.0f, recur_sampler_get_prob, "smpl", s, 0);
    EXPECT_VOID(recur_sampler_accept, "smpl", s, 0);
    EXPECT_VOID(recur_sampler_reset, "smpl", s);
    EXPECT_FAIL(NULL, recur_sampler_name, "smpl", s);
    recur_sampler_free(NULL);

    struct recur_sampler *g = recur_sampler_init_greedy();
    REQUIRE(g);
    EXPECT_FAIL(-1, recur_sampler_sample, "ctx", g, NULL, 0);
    /* a NULL chain still takes smpl and frees it (the sanitizer build sees a leak otherwise) */
    EXPECT_FAIL(false, recur_sampler_chain_add, "chain", NULL, g);
    /* a NULL smpl is the failed init's: its message stays */
    plant_other_error();
    struct recur_sampler *chain = recur_sampler_chain_init();
    REQUIRE(chain);
    CHECK(!recur_sampler_chain_add(chain, NULL));
    CHECK_ERR("no-such-template");
    recur_sampler_free(chain);

    plant_other_error();
    CHECK(recur_json_schema_to_grammar(NULL) == NULL);
    CHECK_ERR("schema is NULL");
    const struct recur_model_quantize_params qp = recur_model_quantize_default_params();
    EXPECT_FAIL(false, recur_model_quantize, "in_path", NULL, "out.gguf", &qp, NULL);
    EXPECT_FAIL(false, recur_model_quantize, "out_path", "in.gguf", NULL, &qp, NULL);
    EXPECT_FAIL(false, recur_model_quantize, "params", "in.gguf", "out.gguf", NULL, NULL);
}

static void test_version(void) {
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", RECUR_VERSION_MAJOR, RECUR_VERSION_MINOR,
             RECUR_VERSION_PATCH);
    CHECK_MSG(strcmp(recur_version(), want) == 0, "recur_version() is \"%s\", the header says %s",
              recur_version(), want);
    CHECK_MSG(strcmp(RECUR_PROJECT_VERSION, want) == 0, "CMake's version is %s, the header's %s",
              RECUR_PROJECT_VERSION, want);
}

int main(void) {
    RUN(test_null_models);
    RUN(test_null_contexts);
    RUN(test_null_memory_batches);
    RUN(test_null_samplers);
    RUN(test_version);
    return test_finish("test_api");
}
