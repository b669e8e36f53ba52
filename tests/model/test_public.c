/* Links against the installed-style library target `recur` (not the internal one) and uses
 * only include/recur.h, as an outside program would: the public symbols must all be exported
 * (also from the shared library) and the header must stand on its own. */
#include "recur.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failed = 0, passed = 0;
#define EXPECT(c) ((c) ? (void)passed++ : (void)(failed++, fprintf(stderr, "failed: %s\n", #c)))

/* recur_log_set's callback: counts the warnings and keeps the last one. */
struct log_seen {
    int n_warn;
    char last[256];
};

static void log_cb(enum recur_log_level level, const char *text, void *user) {
    struct log_seen *seen = user;
    if (level != RECUR_LOG_LEVEL_WARN) return;
    seen->n_warn++;
    snprintf(seen->last, sizeof seen->last, "%s", text);
}

/* Loading a vocabulary without tokenizer.ggml.pre warns (llama.cpp does too): the callback gets
 * the warning, and after recur_log_set(NULL) it goes to stderr again and not to the callback. */
static void test_log(const char *data) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-neox.gguf", data);
    struct recur_model_params mp = recur_model_default_params();
    mp.vocab_only = true;
    struct log_seen seen = {0};
    recur_log_set(log_cb, &seen);
    struct recur_model *v = recur_model_load_from_file(path, mp);
    EXPECT(v != NULL);
    recur_model_free(v);
    EXPECT(seen.n_warn == 1);
    EXPECT(strstr(seen.last, "tokenizer.ggml.pre") != NULL);

    recur_log_set(NULL, &seen);
    char err_path[] = "/tmp/test_public_stderr_XXXXXX";
    int fd = mkstemp(err_path);
    EXPECT(fd >= 0);
    if (fd < 0) return;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    v = recur_model_load_from_file(path, mp);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    EXPECT(v != NULL);
    recur_model_free(v);
    EXPECT(seen.n_warn == 1);
    char text[512] = {0};
    EXPECT(pread(fd, text, sizeof text - 1, 0) > 0);
    EXPECT(strstr(text, "tokenizer.ggml.pre") != NULL);
    close(fd);
    unlink(err_path);
}

/* vocab_only: a model file's vocabulary tokenizes as the whole model's; no weights; no context.
 * A vocabulary-only file (llama.cpp's: architecture "gpt2", no weights recur knows) loads too. */
static void test_vocab_only(const struct recur_model *full, const char *path, const char *data) {
    struct recur_model_params mp = recur_model_default_params();
    mp.vocab_only = true;
    struct recur_model *v = recur_model_load_from_file(path, mp);
    EXPECT(v != NULL);
    if (!v) return;
    const char text[] = "Hello world, again";
    recur_token a[32], b[32];
    const int32_t na = recur_tokenize(full, text, (int32_t)strlen(text), a, 32, true, false);
    const int32_t nb = recur_tokenize(v, text, (int32_t)strlen(text), b, 32, true, false);
    EXPECT(na > 2 && na == nb && memcmp(a, b, sizeof a[0] * (size_t)(na > 0 ? na : 0)) == 0);
    EXPECT(recur_model_n_vocab(v) == recur_model_n_vocab(full));
    EXPECT(strcmp(recur_model_arch_name(v), recur_model_arch_name(full)) == 0);
    EXPECT(recur_token_eos(v) == recur_token_eos(full));
    EXPECT(recur_model_size(v) == 0 && recur_model_n_params(v) == 0 &&
           recur_model_n_tensors(v) == 0 && recur_model_repack_size(v) == 0);
    EXPECT(recur_model_n_embd(v) == 0 && recur_model_n_layer(v) == 0);
    EXPECT(recur_model_fingerprint(v) == 0 && recur_model_fingerprint(full) != 0);
    EXPECT(recur_init_from_model(v, recur_context_default_params()) == NULL);
    EXPECT(strstr(recur_last_error(), "vocab_only") != NULL);
    recur_model_free(v);

    char vpath[4096];
    snprintf(vpath, sizeof vpath, "%s/ggml-vocab-gpt-2.gguf", data);
    EXPECT(recur_model_load_from_file(vpath, recur_model_default_params()) == NULL);
    v = recur_model_load_from_file(vpath, mp);
    EXPECT(v != NULL);
    if (!v) return;
    EXPECT(recur_model_n_vocab(v) == 50257);
    const int32_t n = recur_tokenize(v, "Hello world", 11, b, 32, false, false);
    EXPECT(n == 2 && b[0] == 15496 && b[1] == 995); /* GPT-2's ids, as tiktoken gives them */
    recur_model_free(v);
}

/* recur_model_size / _n_params against the tensors (an f32 model: 4 bytes an element, each
 * tensor's bytes its shape's product), and under the file's size. */
static void test_sizes(const struct recur_model *m, const char *path) {
    uint64_t bytes = 0, elems = 0;
    const int32_t n = recur_model_n_tensors(m);
    EXPECT(n > 0);
    bool shapes_ok = true;
    for (int32_t i = 0; i < n; i++) {
        struct recur_tensor_info t;
        if (!recur_model_tensor(m, i, &t)) {
            shapes_ok = false;
            break;
        }
        uint64_t e = 1;
        for (int d = 0; d < t.n_dims; d++) e *= (uint64_t)t.ne[d];
        shapes_ok &= strcmp(t.type, "f32") == 0 && t.nbytes == 4 * e;
        bytes += t.nbytes;
        elems += e;
    }
    EXPECT(shapes_ok);
    EXPECT(recur_model_size(m) == bytes && recur_model_n_params(m) == elems);
    struct recur_tensor_info t;
    EXPECT(!recur_model_tensor(m, n, &t) && !recur_model_tensor(m, -1, &t));
    FILE *f = fopen(path, "rb");
    long file_bytes = -1;
    if (f && fseek(f, 0, SEEK_END) == 0) file_bytes = ftell(f);
    if (f) fclose(f);
    EXPECT(file_bytes > 0 && recur_model_size(m) < (uint64_t)file_bytes);
}

/* recur_batch_add fills a batch as get_one does (same logits), and refuses what does not fit. */
static void test_batch_add(struct recur_model *m) {
    struct recur_context_params cp = recur_context_default_params();
    cp.n_threads = cp.n_threads_batch = 1;
    struct recur_context *ctx = recur_init_from_model(m, cp);
    EXPECT(ctx != NULL);
    if (!ctx) return;
    EXPECT(strcmp(recur_context_isa(ctx), "avx512") == 0 ||
           strcmp(recur_context_isa(ctx), "avxvnni") == 0 ||
           strcmp(recur_context_isa(ctx), "avx2") == 0 ||
           strcmp(recur_context_isa(ctx), "scalar") == 0);
    recur_token t[3] = {1, 2, 3};
    EXPECT(recur_decode(ctx, recur_batch_get_one(t, 3)) == 0);
    float want[8];
    memcpy(want, recur_get_logits_ith(ctx, -1), sizeof want);
    recur_memory_clear(recur_get_memory(ctx), true);

    struct recur_batch b = recur_batch_init(3, 0, 2);
    EXPECT(b.pos != NULL && b.n_tokens_max == 3 && b.n_seq_max == 2);
    const recur_seq_id seq0 = 0, three[3] = {0, 1, 0};
    for (int i = 0; i < 3; i++) EXPECT(recur_batch_add(&b, t[i], i, &seq0, 1, i == 2) == 0);
    EXPECT(b.n_tokens == 3 && b.logits[0] == 0 && b.logits[2] == 1 && b.seq_id[1][0] == 0);
    EXPECT(recur_batch_add(&b, 4, 3, &seq0, 1, true) == -1 && b.n_tokens == 3);
    EXPECT(strstr(recur_last_error(), "full") != NULL);
    EXPECT(recur_decode(ctx, b) == 0);
    EXPECT(memcmp(want, recur_get_logits_ith(ctx, -1), sizeof want) == 0);
    b.n_tokens = 0;
    EXPECT(recur_batch_add(&b, 1, 0, three, 3, true) == -1 && b.n_tokens == 0);
    EXPECT(recur_batch_add(&b, 1, 0, three, 0, true) == -1 && b.n_tokens == 0);
    EXPECT(recur_batch_add(&b, 1, 0, NULL, 1, true) == -1 && b.n_tokens == 0);
    EXPECT(recur_batch_add(&b, 1, 0, three, 2, true) == 0 && b.n_seq_id[0] == 2);
    recur_batch_free(b);
    struct recur_batch one = recur_batch_get_one(t, 0);
    EXPECT(recur_batch_add(&one, 1, 0, &seq0, 1, true) == -1);
    EXPECT(strstr(recur_last_error(), "recur_batch_init") != NULL);
    struct recur_batch embd = recur_batch_init(2, 8, 1);
    EXPECT(recur_batch_add(&embd, 1, 0, &seq0, 1, true) == -1);
    recur_batch_free(embd);
    recur_free(ctx);
}

/* recur_model_quantize: f16 of an f32 model is smaller and loads (its rows of 48 are no whole
 * q8_0 blocks); bad calls are refused. */
static void test_quantize(const struct recur_model *m, const char *path) {
    char out[] = "/tmp/test_public_f16_XXXXXX";
    int fd = mkstemp(out);
    EXPECT(fd >= 0);
    if (fd < 0) return;
    close(fd);
    struct recur_model_quantize_params qp = recur_model_quantize_default_params();
    EXPECT(qp.ftype == RECUR_FTYPE_MOSTLY_Q8_0);
    qp.ftype = RECUR_FTYPE_MOSTLY_F16;
    struct recur_model_quantize_stats st;
    EXPECT(recur_model_quantize(path, out, &qp, &st));
    EXPECT(st.n_tensors == recur_model_n_tensors(m) && st.n_converted > 0);
    EXPECT(st.bytes_in == recur_model_size(m) && st.bytes_out < st.bytes_in);
    struct recur_model *q = recur_model_load_from_file(out, recur_model_default_params());
    EXPECT(q != NULL && recur_model_size(q) == st.bytes_out);
    recur_model_free(q);
    unlink(out);
    EXPECT(!recur_model_quantize(path, path, &qp, NULL));
    qp.ftype = (enum recur_ftype)5;
    EXPECT(!recur_model_quantize(path, out, &qp, NULL));
    EXPECT(strstr(recur_last_error(), "ftype") != NULL);
    EXPECT(access(out, F_OK) != 0);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_public MODEL [TEST_DATA_DIR]\n");
        return 2;
    }
    EXPECT(recur_model_load_from_file("/nonexistent.gguf", recur_model_default_params()) == NULL);
    EXPECT(strstr(recur_last_error(), "/nonexistent.gguf") != NULL);
    struct recur_model *m = recur_model_load_from_file(argv[1], recur_model_default_params());
    EXPECT(m != NULL);
    if (!m) return 1;
    EXPECT(strcmp(recur_model_arch_name(m), "mamba") ==
           0); /* tests/model/make_models.sh: Mamba-1 */
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

    test_sizes(m, argv[1]);
    test_batch_add(m);
    test_quantize(m, argv[1]);
    if (argc == 3) {
        test_vocab_only(m, argv[1], argv[2]);
        test_log(argv[2]);
    }
    recur_model_free(m);
    printf("test_public: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
