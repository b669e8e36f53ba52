/*
 * GGUF reader and writer: llama.cpp's vocabulary files, round trips through the writer in
 * both open modes, and hostile files (every truncation, byte changes at every offset of the
 * metadata, hand-made headers with each kind of lie). The buffer opens use heap copies of
 * exactly the file's size, so that under AddressSanitizer any read past the end is caught.
 */
#define _DEFAULT_SOURCE /* MADV_POPULATE_READ */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "file_util.h"
#include "test.h"

#ifndef RECUR_TEST_DATA
#error "RECUR_TEST_DATA must name the tests/data folder"
#endif

static char tmpdir[64];

static void tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

/* the last error starts with "name: " */
static bool error_names(const char *name) {
    const char *e = rcore_error_get();
    size_t n = strlen(name);
    return strncmp(e, name, n) == 0 && e[n] == ':' && e[n + 1] == ' ';
}

/* ---- a byte builder for hand-made files -------------------------------------------------- */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_le(struct bb *b, uint64_t v, size_t n) {
    uint8_t x[8];
    for (size_t i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, x, n);
}

static void bb_u32(struct bb *b, uint32_t v) {
    bb_le(b, v, 4);
}

static void bb_u64(struct bb *b, uint64_t v) {
    bb_le(b, v, 8);
}

static void bb_str(struct bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

/* a key with a u32 value */
static void bb_kv_u32(struct bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_u32(b, RGGUF_UINT32);
    bb_u32(b, v);
}

static void bb_tensor(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

static void bb_pad(struct bb *b, size_t a) {
    while (b->n % a) bb_le(b, 0, 1);
}

/* ---- invariants of an opened file -------------------------------------------------------- */

static volatile unsigned touch_sink;

/* Walks every key, array element and tensor byte of an opened file and checks what the reader
 * promises. lo/size: the bytes it was opened from (NULL when mapped). Returns NULL or what is
 * wrong. */
static const char *walk(const struct rgguf *g, const uint8_t *lo, size_t size) {
    unsigned sum = 0;
    uint32_t align = rgguf_alignment(g);
    if (align == 0 || (align & (align - 1))) return "alignment";
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        if (!key || rgguf_find_key(g, key) != i) return "key lookup";
        enum rgguf_vtype t = rgguf_key_type(g, i);
        const char *s;
        size_t len;
        if (t >= RGGUF_VTYPE_COUNT) return "key type";
        if (t == RGGUF_STRING) {
            if (!rgguf_get_str(g, key, &s, &len) || s[len] != '\0' || strlen(s) > len)
                return "string";
            for (size_t j = 0; j < len; j++) sum += (uint8_t)s[j];
        } else if (t == RGGUF_ARRAY) {
            enum rgguf_vtype et;
            uint64_t n, n2;
            const void *data;
            if (!rgguf_get_arr(g, key, &et, &n) || et >= RGGUF_VTYPE_COUNT || et == RGGUF_ARRAY)
                return "array";
            if (et == RGGUF_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    if (!rgguf_get_arr_str(g, key, j, &s, &len) || s[len] != '\0')
                        return "string element";
                    for (size_t k = 0; k < len; k++) sum += (uint8_t)s[k];
                }
                if (rgguf_get_arr_str(g, key, n, &s, &len)) return "string index past the end";
            } else {
                if (!rgguf_get_arr_data(g, key, et, &data, &n2) || n2 != n) return "array data";
                size_t es = et == RGGUF_UINT8 || et == RGGUF_INT8 || et == RGGUF_BOOL        ? 1
                            : et == RGGUF_UINT16 || et == RGGUF_INT16                        ? 2
                            : et == RGGUF_UINT32 || et == RGGUF_INT32 || et == RGGUF_FLOAT32 ? 4
                                                                                             : 8;
                for (size_t k = 0; k < n * es; k++) sum += ((const uint8_t *)data)[k];
                if (et == RGGUF_BOOL)
                    for (size_t k = 0; k < n; k++)
                        if (((const uint8_t *)data)[k] > 1) return "bool element";
            }
        } else {
            uint64_t u;
            float f;
            bool b;
            if (t == RGGUF_FLOAT32 || t == RGGUF_FLOAT64) {
                if (t == RGGUF_FLOAT32 && !rgguf_get_f32(g, key, &f)) return "float";
            } else if (t == RGGUF_BOOL) {
                if (!rgguf_get_bool(g, key, &b)) return "bool";
            } else {
                (void)rgguf_get_u64(g, key, &u);
            }
        }
    }
    int64_t nt = rgguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        if (!t || !t->name || strlen(t->name) >= 64) return "tensor name";
        if (rgguf_find_tensor(g, t->name) != t) return "tensor lookup";
        if (t->n_dims < 1 || t->n_dims > 4) return "n_dims";
        uint64_t n = 1;
        for (uint32_t d = 0; d < 4; d++) {
            if (t->ne[d] < 0 || (d >= t->n_dims && t->ne[d] != 1)) return "ne";
            n *= (uint64_t)t->ne[d];
        }
        uint32_t block = rgguf_type_block(t->type);
        if (block == 0 || t->ne[0] % block) return "type";
        if (t->nbytes != n / block * rgguf_type_block_bytes(t->type)) return "nbytes";
        if (t->offset % align) return "offset alignment";
        const uint8_t *d = t->data;
        if (lo) {
            if (d < lo || (size_t)(d - lo) > size || t->nbytes > size - (size_t)(d - lo))
                return "data out of bounds";
            if ((size_t)(d - lo - t->offset) % align) return "data section alignment";
        }
        for (size_t k = 0; k < t->nbytes; k++) sum += d[k];
        for (int64_t j = 0; j < i; j++) {
            const struct rgguf_tensor *u = rgguf_tensor(g, j);
            if (t->nbytes && u->nbytes && d < (const uint8_t *)u->data + u->nbytes &&
                (const uint8_t *)u->data < d + t->nbytes)
                return "tensors overlap";
            if (strcmp(t->name, u->name) == 0) return "duplicate tensor";
        }
    }
    if (rgguf_tensor(g, nt) || rgguf_tensor(g, -1) || rgguf_key_name(g, rgguf_n_kv(g)))
        return "index past the end";
    touch_sink += sum;
    return NULL;
}

/* Opens an exact-size heap copy of data[0, size). Returns whether it opened; on success the
 * invariants were checked (*bad set when broken), on failure the message must name the file. */
static bool open_copy(const uint8_t *data, size_t size, const char *name, const char **bad) {
    uint8_t *copy = malloc(size ? size : 1);
    REQUIRE(copy);
    if (size) memcpy(copy, data, size);
    *bad = NULL;
    struct rgguf *g = rgguf_open_buffer(copy, size, name);
    if (g) {
        *bad = walk(g, copy, size);
        rgguf_close(g);
    } else if (!error_names(name)) {
        *bad = "error does not start with the name";
    }
    free(copy);
    return g != NULL;
}

/* Same through a file, mapped or read. */
static bool open_as_file(const uint8_t *data, size_t size, bool use_mmap, const char **bad) {
    char path[128];
    tmp_path(path, sizeof path, "mutant.gguf");
    REQUIRE(file_write(path, data, size));
    *bad = NULL;
    struct rgguf *g = rgguf_open(path, use_mmap);
    if (g) {
        *bad = walk(g, NULL, 0);
        if (rgguf_is_mapped(g) != use_mmap) *bad = "mapping mode";
        rgguf_close(g);
    } else if (!error_names(path)) {
        *bad = "error does not start with the path";
    }
    remove(path);
    return g != NULL;
}

/* ---- llama.cpp's vocabulary files -------------------------------------------------------- */

/* The expected values were read independently of this reader with Python's struct module
 * (a 20-line parser: "<I" / "<Q" lengths, then the bytes) from the same two files. */
static void check_vocab(const struct rgguf *g, bool neox) {
    const char *s;
    size_t len;
    uint64_t n;
    enum rgguf_vtype et;
    uint32_t u;
    CHECK(rgguf_version(g) == 3);
    CHECK(rgguf_alignment(g) == 32);
    CHECK(rgguf_n_tensors(g) == 0);
    CHECK(rgguf_n_kv(g) == (neox ? 17 : 16));
    CHECK(rgguf_get_str(g, "tokenizer.ggml.model", &s, &len) && strcmp(s, "gpt2") == 0 && len == 4);
    CHECK(rgguf_get_str(g, "general.architecture", &s, &len) &&
          strcmp(s, neox ? "gptneox" : "gpt2") == 0);
    CHECK(rgguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) && et == RGGUF_STRING &&
          n == (neox ? 50432u : 50257u));
    static const char *const gpt2_tokens[] = {"!", "\"", "#", "$"};
    static const char *const neox_tokens[] = {"<|endoftext|>", "<|padding|>", "!", "\""};
    for (uint64_t i = 0; i < 4; i++) {
        const char *want = neox ? neox_tokens[i] : gpt2_tokens[i];
        CHECK(rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len) && strcmp(s, want) == 0 &&
              len == strlen(want));
    }
    CHECK(rgguf_get_arr_str(g, "tokenizer.ggml.tokens", 1000, &s, &len) &&
          strcmp(s, neox ? "err" : "ale") == 0);
    CHECK(rgguf_get_arr_str(g, "tokenizer.ggml.tokens", n - 1, &s, &len) &&
          strcmp(s, neox ? "[PAD50431]" : "<|endoftext|>") == 0);
    CHECK(!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", n, &s, &len));
    CHECK_ERR("is out of range");
    /* the total bytes of all token texts (Python: sum(len(t) for t in tokens)) */
    size_t total = 0;
    bool all = true;
    for (uint64_t i = 0; i < n; i++) {
        all = all && rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len) && s[len] == 0;
        total += len;
    }
    CHECK(all);
    CHECK(total == (neox ? 358831u : 356735u));
    CHECK(rgguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) && et == RGGUF_STRING &&
          n == (neox ? 50009u : 50000u));
    /* "\xc4\xa0" is U+0120, GPT-2's byte-level stand-in for a space */
    CHECK(rgguf_get_arr_str(g, "tokenizer.ggml.merges", 0, &s, &len) &&
          strcmp(s, neox ? "\xc4\xa0 \xc4\xa0" : "\xc4\xa0 t") == 0);
    CHECK(rgguf_get_arr_str(g, "tokenizer.ggml.merges", n - 1, &s, &len) &&
          strcmp(s, neox ? "\xc4\xa0Out comes" : "\xc4\xa0g azed") == 0);
    const void *data;
    CHECK(rgguf_get_arr_data(g, "tokenizer.ggml.token_type", RGGUF_INT32, &data, &n) &&
          n == (neox ? 50432u : 50257u));
    if (data) {
        const int32_t *tt = data;
        int64_t sum = 0;
        for (uint64_t i = 0; i < n; i++) sum += tt[i];
        CHECK(sum == (neox ? 50970 : 50259));
        CHECK(tt[0] == (neox ? 3 : 1) && tt[2] == 1);
    }
    CHECK(rgguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u) && u == (neox ? 0u : 50256u));
    CHECK(!rgguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u));
    CHECK_ERR("key tokenizer.ggml.padding_token_id is missing");
    CHECK(!rgguf_get_arr_data(g, "tokenizer.ggml.tokens", RGGUF_STRING, &data, &n));
    CHECK_ERR("no packed data");
    CHECK(!rgguf_get_arr_data(g, "tokenizer.ggml.token_type", RGGUF_UINT32, &data, &n));
    CHECK_ERR("is an array of int32, an array of uint32 was expected");
    CHECK(!rgguf_get_str(g, "tokenizer.ggml.tokens", &s, &len));
    CHECK_ERR("is an array, a string was expected");
    if (neox) {
        bool b = false;
        float f;
        CHECK(rgguf_get_bool(g, "gptneox.use_parallel_residual", &b) && b);
        CHECK(rgguf_get_f32(g, "gptneox.attention.layer_norm_epsilon", &f) && f == 1e-5f);
        CHECK(rgguf_get_u32(g, "gptneox.block_count", &u) && u == 44);
    }
    CHECK(walk(g, NULL, 0) == NULL);
}

static void test_vocab_files(void) {
    static const char *const files[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-gpt-neox.gguf"};
    for (int f = 0; f < 2; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", RECUR_TEST_DATA, files[f]);
        for (int mode = 0; mode < 3; mode++) {
            struct rgguf *g;
            size_t size = 0;
            uint8_t *bytes = NULL;
            if (mode < 2) {
                g = rgguf_open(path, mode == 0);
                CHECK_MSG(g != NULL, "%s", rcore_error_get());
                if (g) CHECK(rgguf_is_mapped(g) == (mode == 0));
            } else {
                bytes = (uint8_t *)file_read(path, &size);
                REQUIRE(bytes);
                g = rgguf_open_buffer(bytes, size, files[f]);
                CHECK(g != NULL);
            }
            if (g) check_vocab(g, f == 1);
            /* copying every key reproduces the file byte for byte (then the padding that
             * llama.cpp's writer puts after the metadata): copy_kv and the layout */
            if (g && mode == 2) {
                struct rgguf_writer *w = rgguf_writer_create();
                REQUIRE(w);
                bool ok = true;
                for (int64_t i = 0; i < rgguf_n_kv(g); i++)
                    ok = ok && rgguf_writer_copy_kv(w, g, rgguf_key_name(g, i));
                CHECK(ok);
                char out[128];
                tmp_path(out, sizeof out, "vocab-copy.gguf");
                CHECK(rgguf_writer_write(w, out));
                rgguf_writer_free(w);
                size_t n2;
                uint8_t *copy = (uint8_t *)file_read(out, &n2);
                REQUIRE(copy);
                CHECK(n2 == size + (32 - size % 32) % 32 && memcmp(copy, bytes, size) == 0);
                bool zeros = true;
                for (size_t i = size; i < n2; i++) zeros = zeros && copy[i] == 0;
                CHECK(zeros);
                free(copy);
                remove(out);
            }
            rgguf_close(g);
            free(bytes);
        }
    }
    /* a real file cut short anywhere or with a byte changed: refused cleanly or sound */
    char path[512];
    size_t size;
    snprintf(path, sizeof path, "%s/%s", RECUR_TEST_DATA, files[0]);
    uint8_t *bytes = (uint8_t *)file_read(path, &size);
    REQUIRE(bytes);
    unsigned long long rng = 7;
    int bad = 0;
    const char *why = NULL;
    for (int k = 0; k < 60; k++) {
        size_t cut = (size_t)(test_rand(&rng) % size);
        if (open_copy(bytes, cut, files[0], &why) || why) bad++;
    }
    for (int k = 0; k < 60; k++) {
        size_t at = (size_t)(test_rand(&rng) % (k < 30 ? 4096 : size));
        uint8_t old = bytes[at];
        bytes[at] ^= (uint8_t)(1 + test_rand(&rng) % 255);
        open_copy(bytes, size, files[0], &why);
        bad += why != NULL;
        bytes[at] = old;
    }
    CHECK_MSG(bad == 0, "%d bad (%s)", bad, why ? why : "");
    free(bytes);
}

/* ---- writer round trip ------------------------------------------------------------------- */

#define N_SAMPLE_TENSORS 7

struct sample_tensor {
    const char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    size_t nbytes;
    uint8_t data[512];
};

static struct sample_tensor sample_tensors[N_SAMPLE_TENSORS] = {
    {"token_embd.weight", RGGUF_F32, 1, {5}, 20, {0}},
    {"empty", RGGUF_F32, 2, {0, 3}, 0, {0}},
    {"blk.0.f16", RGGUF_F16, 2, {3, 2}, 12, {0}},
    {"blk.0.bf16", RGGUF_BF16, 3, {2, 3, 4}, 48, {0}},
    {"blk.0.q8_0", RGGUF_Q8_0, 2, {64, 2}, 136, {0}},
    {"blk.0.ssm_a", RGGUF_F32, 4, {2, 1, 2, 3}, 48, {0}},
    {"output.weight", RGGUF_Q4_0, 4, {32, 1, 2, 2}, 72, {0}},
};

static const char *const sample_strs[] = {"a", "", "h\xc3\xa9llo", "x y", "<|endoftext|>"};
static const uint8_t arr_u8[] = {0, 1, 255};
static const int8_t arr_i8[] = {-128, 0, 127};
static const uint16_t arr_u16[] = {0, 65535, 7};
static const int16_t arr_i16[] = {-32768, 32767};
static const uint32_t arr_u32[] = {0, 4000000000u, 12};
static const int32_t arr_i32[] = {-5, 2147483647, -2147483647 - 1};
static const float arr_f32[] = {1.5f, -0.25f, 3e38f};
static const uint8_t arr_bool[] = {1, 0, 1, 1};
static const uint64_t arr_u64[] = {UINT64_MAX, 0};
static const int64_t arr_i64[] = {INT64_MIN, INT64_MAX, -1};
static const double arr_f64[] = {1e300, -2.5};

struct sample_arr {
    const char *key;
    enum rgguf_vtype type;
    const void *data;
    uint64_t n;
    size_t bytes;
};

#define ARR(key, type, a)                                                                          \
    { key, type, a, sizeof a / sizeof a[0], sizeof a }
static const struct sample_arr sample_arrs[] = {
    ARR("arr.u8", RGGUF_UINT8, arr_u8),     ARR("arr.i8", RGGUF_INT8, arr_i8),
    ARR("arr.u16", RGGUF_UINT16, arr_u16),  ARR("arr.i16", RGGUF_INT16, arr_i16),
    ARR("arr.u32", RGGUF_UINT32, arr_u32),  ARR("arr.i32", RGGUF_INT32, arr_i32),
    ARR("arr.f32", RGGUF_FLOAT32, arr_f32), ARR("arr.bool", RGGUF_BOOL, arr_bool),
    ARR("arr.u64", RGGUF_UINT64, arr_u64),  ARR("arr.i64", RGGUF_INT64, arr_i64),
    ARR("arr.f64", RGGUF_FLOAT64, arr_f64), {"arr.empty", RGGUF_INT32, NULL, 0, 0},
};
#define N_SAMPLE_ARRS (sizeof sample_arrs / sizeof sample_arrs[0])

/* Writes the sample file (alignment 0: the default) and returns its path in path. */
static void write_sample(const char *path, uint32_t alignment) {
    unsigned long long rng = 42;
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    bool ok = rgguf_writer_set_str(w, "general.architecture", "mamba");
    if (alignment) ok = ok && rgguf_writer_set_u32(w, "general.alignment", alignment);
    ok = ok && rgguf_writer_set_u32(w, "u32", 4000000000u) && rgguf_writer_set_i32(w, "i32", -5) &&
         rgguf_writer_set_u64(w, "u64", UINT64_MAX - 1) && rgguf_writer_set_f32(w, "f32", 0.125f) &&
         rgguf_writer_set_bool(w, "bool.t", true) && rgguf_writer_set_bool(w, "bool.f", false) &&
         rgguf_writer_set_str(w, "str.empty", "") &&
         rgguf_writer_set_arr_str(w, "arr.str", sample_strs, 5) &&
         rgguf_writer_set_arr_str(w, "arr.str.empty", NULL, 0);
    for (size_t i = 0; ok && i < N_SAMPLE_ARRS; i++) {
        const struct sample_arr *a = &sample_arrs[i];
        ok = rgguf_writer_set_arr(w, a->key, a->type, a->data, a->n);
    }
    for (int i = 0; ok && i < N_SAMPLE_TENSORS; i++) {
        struct sample_tensor *t = &sample_tensors[i];
        for (size_t k = 0; k < t->nbytes; k++) t->data[k] = (uint8_t)test_rand(&rng);
        ok = rgguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
    }
    CHECK_MSG(ok, "%s", rcore_error_get());
    CHECK_MSG(rgguf_writer_write(w, path), "%s", rcore_error_get());
    rgguf_writer_free(w);
}

/* lo/size: the bytes opened, to check the layout (NULL when opened from a path) */
static void check_sample(const struct rgguf *g, uint32_t alignment, const uint8_t *lo,
                         size_t size) {
    uint32_t u;
    int32_t i32;
    uint64_t u64, n;
    float f;
    bool b;
    const char *s;
    size_t len;
    enum rgguf_vtype et;
    const void *data;
    CHECK(rgguf_version(g) == 3);
    CHECK(rgguf_alignment(g) == (alignment ? alignment : 32));
    CHECK(rgguf_n_kv(g) == (int64_t)(10 + (alignment ? 1 : 0) + N_SAMPLE_ARRS));
    CHECK(rgguf_get_str(g, "general.architecture", &s, &len) && strcmp(s, "mamba") == 0);
    CHECK(rgguf_get_u32(g, "u32", &u) && u == 4000000000u);
    CHECK(!rgguf_get_i32(g, "u32", &i32));
    CHECK_ERR("key u32 = 4000000000 is out of range for int32");
    CHECK(rgguf_get_u64(g, "u32", &u64) && u64 == 4000000000u);
    CHECK(rgguf_get_i32(g, "i32", &i32) && i32 == -5);
    CHECK(!rgguf_get_u32(g, "i32", &u));
    CHECK_ERR("key i32 = -5 is out of range for uint32");
    CHECK(!rgguf_get_u64(g, "i32", &u64));
    CHECK_ERR("out of range for uint64");
    CHECK(rgguf_get_u64(g, "u64", &u64) && u64 == UINT64_MAX - 1);
    CHECK(!rgguf_get_u32(g, "u64", &u));
    CHECK(rgguf_get_f32(g, "f32", &f) && f == 0.125f);
    CHECK(!rgguf_get_u32(g, "f32", &u));
    CHECK_ERR("key f32 is a float32, an integer was expected");
    CHECK(rgguf_get_bool(g, "bool.t", &b) && b);
    CHECK(rgguf_get_bool(g, "bool.f", &b) && !b);
    CHECK(!rgguf_get_bool(g, "i32", &b));
    CHECK_ERR("key i32 is an int32, a bool was expected");
    CHECK(!rgguf_get_f32(g, "bool.t", &f));
    CHECK_ERR("a float was expected");
    CHECK(rgguf_get_str(g, "str.empty", &s, &len) && len == 0 && s[0] == '\0');
    CHECK(!rgguf_get_str(g, "u32", &s, &len));
    CHECK_ERR("key u32 is a uint32, a string was expected");
    CHECK(!rgguf_get_u32(g, "absent", &u));
    CHECK_ERR("key absent is missing");
    CHECK(rgguf_find_key(g, "absent") == -1);
    CHECK(rgguf_key_type(g, rgguf_find_key(g, "arr.str")) == RGGUF_ARRAY);
    CHECK(rgguf_key_type(g, -1) == RGGUF_VTYPE_COUNT);
    CHECK(rgguf_get_arr(g, "arr.str", &et, &n) && et == RGGUF_STRING && n == 5);
    for (uint64_t i = 0; i < 5; i++)
        CHECK(rgguf_get_arr_str(g, "arr.str", i, &s, &len) && strcmp(s, sample_strs[i]) == 0 &&
              len == strlen(sample_strs[i]));
    CHECK(rgguf_get_arr(g, "arr.str.empty", &et, &n) && et == RGGUF_STRING && n == 0);
    CHECK(!rgguf_get_arr_str(g, "arr.str.empty", 0, &s, &len));
    CHECK(!rgguf_get_arr(g, "u32", &et, &n));
    CHECK_ERR("key u32 is a uint32, an array was expected");
    CHECK(!rgguf_get_arr_str(g, "arr.u8", 0, &s, &len));
    CHECK_ERR("key arr.u8 is an array of uint8, an array of string was expected");
    for (size_t i = 0; i < N_SAMPLE_ARRS; i++) {
        const struct sample_arr *a = &sample_arrs[i];
        CHECK(rgguf_get_arr(g, a->key, &et, &n) && et == a->type && n == a->n);
        CHECK(rgguf_get_arr_data(g, a->key, a->type, &data, &n) && n == a->n &&
              (a->bytes == 0 || memcmp(data, a->data, a->bytes) == 0));
        /* numeric arrays are handed out aligned so that callers can index them in place */
        CHECK((uintptr_t)data % 8 == 0);
    }
    CHECK(rgguf_n_tensors(g) == N_SAMPLE_TENSORS);
    size_t data_start = SIZE_MAX, end = 0;
    uint64_t expect_offset = 0;
    for (int i = 0; i < N_SAMPLE_TENSORS; i++) {
        const struct sample_tensor *st = &sample_tensors[i];
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        REQUIRE(t);
        CHECK(strcmp(t->name, st->name) == 0 && rgguf_find_tensor(g, st->name) == t);
        CHECK(t->type == st->type && t->n_dims == st->n_dims && t->nbytes == st->nbytes);
        for (int d = 0; d < 4; d++) CHECK(t->ne[d] == (d < (int)st->n_dims ? st->ne[d] : 1));
        CHECK(t->nbytes == 0 || memcmp(t->data, st->data, st->nbytes) == 0);
        /* llama.cpp's layout: each tensor at the next multiple of the alignment */
        uint32_t a = rgguf_alignment(g);
        CHECK(t->offset == expect_offset);
        expect_offset += (t->nbytes + a - 1) / a * a;
        CHECK((uintptr_t)t->data % a == 0 || lo != NULL);
        if (lo) {
            size_t at = (size_t)((const uint8_t *)t->data - lo);
            CHECK((at - t->offset) % a == 0);
            if (at - t->offset < data_start) data_start = at - t->offset;
            end = at + (t->nbytes + a - 1) / a * a;
        }
    }
    if (lo) CHECK(end == size && data_start % rgguf_alignment(g) == 0);
    CHECK(rgguf_find_tensor(g, "absent") == NULL);
    CHECK(walk(g, lo, size) == NULL);
}

static void test_round_trip(void) {
    static const uint32_t aligns[] = {64, 0};
    for (int k = 0; k < 2; k++) {
        char path[128];
        tmp_path(path, sizeof path, "sample.gguf");
        write_sample(path, aligns[k]);
        for (int mode = 0; mode < 3; mode++) {
            struct rgguf *g;
            size_t size = 0;
            uint8_t *bytes = NULL;
            if (mode < 2) {
                g = rgguf_open(path, mode == 0);
            } else {
                bytes = (uint8_t *)file_read(path, &size);
                REQUIRE(bytes);
                g = rgguf_open_buffer(bytes, size, "sample.gguf");
            }
            CHECK_MSG(g != NULL, "%s", rcore_error_get());
            if (!g) continue;
            CHECK(rgguf_is_mapped(g) == (mode == 0));
            check_sample(g, aligns[k], bytes, size);
            rgguf_close(g);
            free(bytes);
        }
        remove(path);
    }
}

static void test_require_tensor(void) {
    char path[128];
    tmp_path(path, sizeof path, "sample.gguf");
    write_sample(path, 0);
    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    const int64_t q8[] = {64, 2}, q8_bad[] = {64, 3}, emb[] = {5}, a4[] = {2, 1, 2, 3};
    const uint64_t f32 = 1u << RGGUF_F32, q = 1u << RGGUF_Q8_0 | 1u << RGGUF_Q4_0;
    CHECK(rgguf_require_tensor(g, "blk.0.q8_0", 2, q8, 0) == rgguf_find_tensor(g, "blk.0.q8_0"));
    CHECK(rgguf_require_tensor(g, "blk.0.q8_0", 2, q8, q) != NULL);
    CHECK(rgguf_require_tensor(g, "token_embd.weight", 1, emb, f32) != NULL);
    CHECK(rgguf_require_tensor(g, "blk.0.ssm_a", 4, a4, f32) != NULL);
    /* trailing dimensions of 1 are the same shape */
    const int64_t emb2[] = {5, 1};
    CHECK(rgguf_require_tensor(g, "token_embd.weight", 2, emb2, f32) != NULL);
    const int64_t q4[] = {32, 1, 2, 2};
    CHECK(rgguf_require_tensor(g, "output.weight", 4, q4, q) != NULL);
    CHECK(rgguf_require_tensor(g, "blk.1.q8_0", 2, q8, 0) == NULL);
    CHECK_ERR("tensor blk.1.q8_0 is missing");
    CHECK(error_names(path));
    CHECK(rgguf_require_tensor(g, "blk.0.q8_0", 2, q8_bad, 0) == NULL);
    CHECK_ERR("tensor blk.0.q8_0 has shape {64, 2}, {64, 3} was expected");
    CHECK(rgguf_require_tensor(g, "blk.0.q8_0", 1, q8, 0) == NULL);
    CHECK_ERR("has shape {64, 2}, {64} was expected");
    CHECK(rgguf_require_tensor(g, "output.weight", 4, q4, f32) == NULL);
    CHECK_ERR("tensor output.weight is q4_0, which is not allowed here");
    CHECK(rgguf_require_tensor(g, "blk.0.bf16", 3, (const int64_t[]){2, 3, 4}, f32) == NULL);
    CHECK_ERR("tensor blk.0.bf16 is bf16, which is not allowed here");
    CHECK(rgguf_require_tensor(g, "blk.0.q8_0", 5, q8, 0) == NULL);
    rgguf_close(g);
    remove(path);
    CHECK(strcmp(rgguf_type_name(RGGUF_Q8_0), "q8_0") == 0 &&
          strcmp(rgguf_type_name(12), "q4_K") == 0 && strcmp(rgguf_type_name(999), "unknown") == 0);
    CHECK(strcmp(rgguf_vtype_name(RGGUF_FLOAT64), "float64") == 0);
    CHECK(rgguf_type_block(RGGUF_Q4_0) == 32 && rgguf_type_block_bytes(RGGUF_Q4_0) == 18 &&
          rgguf_type_block_bytes(RGGUF_Q8_0) == 34 && rgguf_type_block(RGGUF_BF16) == 1 &&
          rgguf_type_block_bytes(RGGUF_BF16) == 2 && rgguf_type_block(16) == 0);
    /* the list in messages names exactly the types with sizes */
    for (uint32_t t = 0; t < 64; t++) {
        const char *name = rgguf_type_name(t), *list = rgguf_types_supported();
        const char *at = strstr(list, name);
        const size_t len = strlen(name);
        const bool listed = at && (at == list || at[-1] == ' ') &&
                            (at[len] == ',' || at[len] == ' ' || at[len] == '\0');
        CHECK_MSG(listed == (rgguf_type_block(t) != 0), "type %u (%s): listed %d, block %u", t,
                  name, listed, rgguf_type_block(t));
    }
    CHECK(rgguf_type_block(RGGUF_Q4_K) == 256 && rgguf_type_block_bytes(RGGUF_Q4_K) == 144 &&
          rgguf_type_block(RGGUF_IQ4_NL) == 32 && rgguf_type_block_bytes(RGGUF_Q6_K) == 210);
}

/* Every value type, as scalars, through a hand-made file: the getters' conversions, and
 * copy_kv of each reproducing the file byte for byte. */
static void test_all_value_types(void) {
    struct bb b = {0};
    bb_header(&b, 3, 0, 16);
    const char *k[] = {"u8",  "i8",  "u16", "i16", "u32", "i32",     "f32",       "bool",
                       "str", "arr", "u64", "i64", "f64", "f64.big", "i64.small", "u64.small"};
    for (uint32_t t = 0; t < 13; t++) {
        bb_str(&b, k[t]);
        bb_u32(&b, t);
        switch (t) {
        case RGGUF_UINT8:
            bb_le(&b, 200, 1);
            break;
        case RGGUF_INT8:
            bb_le(&b, (uint8_t)-100, 1);
            break;
        case RGGUF_UINT16:
            bb_le(&b, 65535, 2);
            break;
        case RGGUF_INT16:
            bb_le(&b, 0x8000, 2);
            break; /* -32768 */
        case RGGUF_UINT32:
            bb_u32(&b, 7);
            break;
        case RGGUF_INT32:
            bb_u32(&b, (uint32_t)-7);
            break;
        case RGGUF_FLOAT32:
            bb_u32(&b, 0x3fc00000);
            break; /* 1.5f */
        case RGGUF_BOOL:
            bb_le(&b, 1, 1);
            break;
        case RGGUF_STRING: /* text with a NUL inside: the length counts, not strlen */
            bb_u64(&b, 3);
            bb_put(&b, "a\0b", 3);
            break;
        case RGGUF_ARRAY:
            bb_u32(&b, RGGUF_INT16);
            bb_u64(&b, 2);
            bb_le(&b, 1, 2);
            bb_le(&b, 0xffff, 2);
            break;
        case RGGUF_UINT64:
            bb_u64(&b, 1ull << 63);
            break;
        case RGGUF_INT64:
            bb_u64(&b, 1ull << 63);
            break; /* INT64_MIN */
        case RGGUF_FLOAT64:
            bb_u64(&b, 0x4004000000000000ull);
            break; /* 2.5 */
        }
    }
    bb_str(&b, k[13]);
    bb_u32(&b, RGGUF_FLOAT64);
    bb_u64(&b, 0x7e37e43c8800759cull); /* 1e300 */
    bb_str(&b, k[14]);
    bb_u32(&b, RGGUF_INT64);
    bb_u64(&b, (uint64_t)-3);
    bb_str(&b, k[15]);
    bb_u32(&b, RGGUF_UINT64);
    bb_u64(&b, 3);
    const char *why;
    CHECK(open_copy(b.p, b.n, "types.gguf", &why) && why == NULL);
    struct rgguf *g = rgguf_open_buffer(b.p, b.n, "types.gguf");
    REQUIRE(g);
    uint32_t u;
    int32_t i;
    uint64_t u64;
    float f;
    bool bo;
    const char *s;
    size_t len;
    const void *data;
    uint64_t n;
    CHECK(rgguf_get_u32(g, "u8", &u) && u == 200);
    CHECK(rgguf_get_i32(g, "i8", &i) && i == -100);
    CHECK(!rgguf_get_u32(g, "i8", &u));
    CHECK_ERR("types.gguf: key i8 = -100 is out of range for uint32");
    CHECK(rgguf_get_i32(g, "u16", &i) && i == 65535);
    CHECK(rgguf_get_i32(g, "i16", &i) && i == -32768);
    CHECK(rgguf_get_u32(g, "u32", &u) && u == 7);
    CHECK(rgguf_get_i32(g, "i32", &i) && i == -7);
    CHECK(rgguf_get_f32(g, "f32", &f) && f == 1.5f);
    CHECK(rgguf_get_bool(g, "bool", &bo) && bo);
    CHECK(rgguf_get_str(g, "str", &s, &len) && len == 3 && memcmp(s, "a\0b", 4) == 0);
    CHECK(rgguf_get_arr_data(g, "arr", RGGUF_INT16, &data, &n) && n == 2 &&
          ((const int16_t *)data)[1] == -1);
    CHECK(rgguf_get_u64(g, "u64", &u64) && u64 == 1ull << 63);
    CHECK(!rgguf_get_i32(g, "u64", &i));
    CHECK_ERR("key u64 = 9223372036854775808 is out of range for int32");
    CHECK(!rgguf_get_u64(g, "i64", &u64));
    CHECK_ERR("key i64 = -9223372036854775808 is out of range for uint64");
    CHECK(rgguf_get_i32(g, "i64.small", &i) && i == -3);
    CHECK(rgguf_get_i32(g, "u64.small", &i) && i == 3);
    CHECK(rgguf_get_f32(g, "f64", &f) && f == 2.5f);
    CHECK(!rgguf_get_f32(g, "f64.big", &f));
    CHECK_ERR("key f64.big = 1e+300 is out of range for float32");
    CHECK(!rgguf_get_u32(g, "str", &u));
    CHECK_ERR("key str is a string, an integer was expected");
    CHECK(!rgguf_get_i32(g, "f64", &i));
    CHECK_ERR("key f64 is a float64, an integer was expected");

    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    bool ok = true;
    for (int64_t j = 0; j < rgguf_n_kv(g); j++)
        ok = ok && rgguf_writer_copy_kv(w, g, rgguf_key_name(g, j));
    CHECK(ok);
    CHECK(!rgguf_writer_copy_kv(w, g, "u8"));
    CHECK_ERR("duplicate key u8");
    CHECK(!rgguf_writer_copy_kv(w, g, "nope"));
    CHECK_ERR("types.gguf: key nope is missing");
    char path[128];
    tmp_path(path, sizeof path, "types-copy.gguf");
    CHECK(rgguf_writer_write(w, path));
    rgguf_writer_free(w);
    size_t n2;
    uint8_t *copy = (uint8_t *)file_read(path, &n2);
    REQUIRE(copy);
    CHECK(n2 == (b.n + 31) / 32 * 32 && memcmp(copy, b.p, b.n) == 0);
    free(copy);
    remove(path);
    rgguf_close(g);
    free(b.p);
}

static bool tmp_leftovers(void) {
    DIR *d = opendir(tmpdir);
    REQUIRE(d);
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d))) found = found || strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return found;
}

static void test_writer_errors(void) {
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    const int64_t ne[] = {32, 2};
    uint8_t data[68] = {0};
    CHECK(rgguf_writer_set_u32(w, "a", 1));
    CHECK(!rgguf_writer_set_str(w, "a", "x"));
    CHECK_ERR("duplicate key a");
    CHECK(!rgguf_writer_set_u32(w, "general.alignment", 3));
    CHECK_ERR("general.alignment 3 is not a power of two");
    CHECK(!rgguf_writer_set_u32(w, "general.alignment", 0));
    CHECK(!rgguf_writer_set_i32(w, "general.alignment", 32));
    CHECK_ERR("must be a uint32");
    CHECK(!rgguf_writer_set_arr(w, "s", RGGUF_STRING, data, 1));
    CHECK(!rgguf_writer_set_arr(w, "s", RGGUF_ARRAY, data, 1));
    const uint8_t bools[] = {0, 2};
    CHECK(!rgguf_writer_set_arr(w, "b", RGGUF_BOOL, bools, 2));
    CHECK_ERR("bool element 1");
    const char *strs[] = {"x", NULL};
    CHECK(!rgguf_writer_set_arr_str(w, "s", strs, 2));
    CHECK(rgguf_writer_add_tensor(w, "t", RGGUF_Q8_0, 2, ne, data, 68));
    CHECK(!rgguf_writer_add_tensor(w, "t", RGGUF_Q8_0, 2, ne, data, 68));
    CHECK_ERR("duplicate tensor t");
    CHECK(!rgguf_writer_add_tensor(w, "u", RGGUF_Q8_0, 2, ne, data, 67));
    CHECK_ERR("67 bytes given, its type and shape take 68");
    CHECK(!rgguf_writer_add_tensor(w, "u", 99, 2, ne, data, 68));
    CHECK_ERR("type 99");
    CHECK(!rgguf_writer_add_tensor(w, "u", RGGUF_Q4_0, 1, (const int64_t[]){33}, data, 18));
    CHECK_ERR("dimension 0 (33) is not a multiple of the q4_0 block size 32");
    CHECK(!rgguf_writer_add_tensor(w, "u", RGGUF_F32, 5, ne, data, 68));
    CHECK(!rgguf_writer_add_tensor(w, "u", RGGUF_F32, 0, ne, data, 68));
    CHECK(!rgguf_writer_add_tensor(w, "u", RGGUF_F32, 2, (const int64_t[]){4, -1}, data, 68));
    CHECK_ERR("negative");
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    CHECK(!rgguf_writer_add_tensor(w, longname, RGGUF_F32, 1, (const int64_t[]){1}, data, 4));
    CHECK_ERR("too long");
    longname[63] = '\0';
    CHECK(rgguf_writer_add_tensor(w, longname, RGGUF_F32, 1, (const int64_t[]){1}, data, 4));

    /* failed adders left nothing behind: the file holds exactly what succeeded */
    char path[256];
    tmp_path(path, sizeof path, "after-errors.gguf");
    CHECK(rgguf_writer_write(w, path));
    struct rgguf *g = rgguf_open(path, false);
    CHECK_MSG(g != NULL, "%s", rcore_error_get());
    if (g) {
        CHECK(rgguf_n_kv(g) == 1 && rgguf_n_tensors(g) == 2);
        CHECK(rgguf_find_tensor(g, longname) != NULL);
        CHECK(walk(g, NULL, 0) == NULL);
        rgguf_close(g);
    }
    remove(path);

    /* a missing directory: fails cleanly, nothing created */
    tmp_path(path, sizeof path, "no-such-dir/x.gguf");
    CHECK(!rgguf_writer_write(w, path));
    CHECK(error_names(path));
    CHECK_ERR("No such file or directory");
    /* the path is a directory: refused before anything is written */
    tmp_path(path, sizeof path, "a-dir");
    REQUIRE(mkdir(path, 0755) == 0);
    CHECK(!rgguf_writer_write(w, path));
    CHECK_ERR("is a folder, not a regular file");
    CHECK(!tmp_leftovers());
    rmdir(path);
    rgguf_writer_free(w);
    rgguf_writer_free(NULL);
    rgguf_close(NULL);

    /* opening what is not there, or not a file */
    CHECK(rgguf_open(tmpdir, true) == NULL);
    CHECK_ERR("not a regular file");
    tmp_path(path, sizeof path, "absent.gguf");
    CHECK(rgguf_open(path, true) == NULL);
    CHECK(error_names(path));
    tmp_path(path, sizeof path, "empty.gguf");
    REQUIRE(file_write(path, "", 0));
    CHECK(rgguf_open(path, true) == NULL);
    CHECK_ERR("empty file");
    CHECK(rgguf_open(path, false) == NULL);
    CHECK_ERR("empty file");
    remove(path);
}

/* ---- hostile files ----------------------------------------------------------------------- */

/* The sample file's bytes, and where its metadata ends (the data section's start). */
static uint8_t *sample_bytes(size_t *size, size_t *data_start, size_t *data_end) {
    char path[128];
    tmp_path(path, sizeof path, "sample.gguf");
    write_sample(path, 0);
    uint8_t *b = (uint8_t *)file_read(path, size);
    REQUIRE(b);
    remove(path);
    struct rgguf *g = rgguf_open_buffer(b, *size, "sample.gguf");
    REQUIRE(g);
    *data_start = SIZE_MAX;
    *data_end = 0;
    for (int64_t i = 0; i < rgguf_n_tensors(g); i++) {
        const struct rgguf_tensor *t = rgguf_tensor(g, i);
        size_t at = (size_t)((const uint8_t *)t->data - b);
        if (at - t->offset < *data_start) *data_start = at - t->offset;
        if (at + t->nbytes > *data_end) *data_end = at + t->nbytes;
    }
    rgguf_close(g);
    return b;
}

static void test_truncated(void) {
    size_t size, data_start, data_end;
    uint8_t *b = sample_bytes(&size, &data_start, &data_end);
    const char *why = NULL;
    int opened = 0, bad = 0, n = 0;
    /* every cut in the metadata, then every 7th byte of the data (the last tensor's data
     * ends before the final padding: cuts from there on are whole files) */
    for (size_t cut = 0; cut < data_end; cut += cut < data_start ? 1 : 7) {
        const char *w1, *w2, *w3;
        opened += open_copy(b, cut, "cut.gguf", &w1);
        opened += open_as_file(b, cut, true, &w2);
        opened += open_as_file(b, cut, false, &w3);
        if (w1 || w2 || w3) {
            bad++;
            why = w1 ? w1 : w2 ? w2 : w3;
        }
        n++;
    }
    CHECK_MSG(opened == 0, "%d truncated files opened", opened);
    CHECK_MSG(bad == 0, "%d bad (%s)", bad, why ? why : "");
    CHECK(n > 500);
    CHECK(open_copy(b, data_end, "cut.gguf", &why) && why == NULL);
    /* the messages say where: a cut inside the tensor data names the tensor */
    CHECK(!open_copy(b, data_end - 1, "cut.gguf", &why));
    CHECK_ERR("cut.gguf: tensor output.weight: data runs past end of file");
    CHECK(!open_copy(b, 100, "cut.gguf", &why));
    CHECK_ERR("runs past end of file");
    free(b);
}

/* Byte changes at every offset of the header, key-values and tensor infos: each open fails
 * with the file's name or gives a file whose invariants hold. */
static void test_byte_changes(void) {
    size_t size, data_start, data_end;
    uint8_t *b = sample_bytes(&size, &data_start, &data_end);
    int refused = 0, opened = 0, bad = 0;
    const char *why = NULL;
    for (size_t at = 0; at < data_start; at++) {
        const uint8_t old = b[at];
        const uint8_t variants[] = {
            (uint8_t)(old ^ 0xff), 0x7f, 0xff, 0x00, (uint8_t)(old ^ 1), (uint8_t)(old ^ 0x80),
            (uint8_t)(old + 1)};
        for (size_t v = 0; v < sizeof variants; v++) {
            const char *w;
            b[at] = variants[v];
            if (open_copy(b, size, "flip.gguf", &w))
                opened++;
            else
                refused++;
            if (w) {
                bad++;
                why = w;
            }
            if (v == 0) {
                open_as_file(b, size, true, &w);
                if (w) {
                    bad++;
                    why = w;
                }
            }
        }
        b[at] = old;
    }
    /* large values written over every offset: counts, lengths, dimensions, offsets */
    static const uint64_t big[] = {UINT64_MAX, 1ull << 63, 1ull << 62,
                                   1ull << 32, 0x7fffffff, 1000000};
    for (size_t at = 0; at + 8 <= data_start; at++) {
        uint8_t old[8];
        memcpy(old, b + at, 8);
        for (size_t v = 0; v < sizeof big / sizeof big[0]; v++) {
            const char *w;
            for (int k = 0; k < 8; k++) b[at + k] = (uint8_t)(big[v] >> (8 * k));
            if (open_copy(b, size, "big.gguf", &w))
                opened++;
            else
                refused++;
            if (w) {
                bad++;
                why = w;
            }
        }
        memcpy(b + at, old, 8);
    }
    CHECK_MSG(bad == 0, "%d bad (%s)", bad, why ? why : "");
    CHECK(refused > 0 && opened > 0);
    fprintf(stderr, "  byte changes over %zu bytes of metadata: %d refused, %d opened\n",
            data_start, refused, opened);
    free(b);
}

/* A hand-made file must be refused with a message naming it and saying what is wrong. */
static void refuse(const struct bb *b, const char *text, int line) {
    const char *why;
    bool opened = open_copy(b->p, b->n, "hostile.gguf", &why);
    CHECK_MSG(!opened && why == NULL, "line %d: %s", line, opened ? "opened" : why);
    CHECK_MSG(strstr(rcore_error_get(), text) != NULL, "line %d: error was \"%s\"", line,
              rcore_error_get());
}
#define REFUSE(b, text) refuse(b, text, __LINE__)

static void accept(const struct bb *b, int line) {
    const char *why;
    bool opened = open_copy(b->p, b->n, "hostile.gguf", &why);
    CHECK_MSG(opened && why == NULL, "line %d: %s", line, opened ? why : rcore_error_get());
}
#define ACCEPT(b) accept(b, __LINE__)

static void test_hostile_headers(void) {
    struct bb b = {0};
    const uint64_t ne1[] = {8}, ne2[] = {8, 2};

    REFUSE(&b, "empty file");
    bb_put(&b, "GGU", 3);
    REFUSE(&b, "hostile.gguf: not a GGUF file");
    bb_header(&b, 3, 0, 0);
    b.p[0] = 'X';
    REFUSE(&b, "hostile.gguf: not a GGUF file (magic 0x58475546)");
    bb_header(&b, 3, 0, 0);
    ACCEPT(&b);
    b.n = 20;
    REFUSE(&b, "kv count runs past end of file");
    bb_header(&b, 2, 0, 0);
    ACCEPT(&b);
    bb_header(&b, 1, 0, 0);
    REFUSE(&b, "GGUF version 1");
    bb_header(&b, 4, 0, 0);
    REFUSE(&b, "GGUF version 4 is not supported");
    bb_header(&b, 3u << 24, 0, 0);
    REFUSE(&b, "big-endian");

    /* counts far beyond the file: refused before any work or allocation */
    bb_header(&b, 3, 0, 1ull << 60);
    REFUSE(&b, "hostile.gguf: kv count 1152921504606846976 runs past end of file");
    bb_header(&b, 3, UINT64_MAX, 0);
    REFUSE(&b, "tensor count 18446744073709551615 runs past end of file");
    bb_header(&b, 3, 1ull << 40, 1);
    bb_kv_u32(&b, "a", 1);
    REFUSE(&b, "tensor count 1099511627776 runs past end of file");

    /* key-values */
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 63);
    bb_u64(&b, 0);
    REFUSE(&b, "hostile.gguf: key 0: name length 9223372036854775808 runs past end of file");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_u32(&b, RGGUF_STRING);
    bb_u64(&b, 1ull << 63);
    REFUSE(&b, "key 0 (general.name): string length 9223372036854775808 runs past end of file");
    bb_header(&b, 3, 0, 2);
    bb_kv_u32(&b, "a", 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, RGGUF_STRING);
    bb_u64(&b, 50257);
    bb_str(&b, "!");
    REFUSE(&b, "key 1 (tokenizer.ggml.tokens): array of 50257 strings runs past end of file");
    /* enough bytes for 50257 lengths, but only 7001 strings */
    for (int k = 0; k < 7000; k++)
        bb_str(&b, "0123456789012345678901234567890123456789012345678901234567890");
    REFUSE(&b, "key 1 (tokenizer.ggml.tokens): string 7001 of 50257: length runs past end");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "t");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, RGGUF_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "a");
    bb_u64(&b, 1ull << 62);
    bb_u64(&b, 0);
    REFUSE(&b, "key 0 (t): string 1 of 2: length 4611686018427387904 runs past end of file");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, RGGUF_UINT32);
    bb_u64(&b, 1ull << 62);
    bb_u64(&b, 0);
    REFUSE(&b, "key 0 (a): array of 4611686018427387904 uint32 runs past end of file");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, RGGUF_ARRAY);
    bb_u64(&b, 0);
    REFUSE(&b, "key 0 (a): arrays of arrays are not supported");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, 13);
    bb_u64(&b, 0);
    REFUSE(&b, "unknown array element type 13");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "a");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    REFUSE(&b, "key 0 (a): unknown value type 13");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "flag");
    bb_u32(&b, RGGUF_BOOL);
    bb_le(&b, 2, 1);
    REFUSE(&b, "key 0 (flag): bool value 2 (must be 0 or 1)");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "flags");
    bb_u32(&b, RGGUF_ARRAY);
    bb_u32(&b, RGGUF_BOOL);
    bb_u64(&b, 3);
    bb_put(&b, "\1\0\2", 3);
    REFUSE(&b, "key 0 (flags): bool element 2 is 2");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "n");
    bb_u32(&b, RGGUF_UINT64);
    bb_u32(&b, 0);
    REFUSE(&b, "key 0 (n): uint64 value runs past end of file");
    bb_header(&b, 3, 0, 3);
    bb_kv_u32(&b, "general.name", 1);
    bb_kv_u32(&b, "b", 1);
    bb_kv_u32(&b, "general.name", 2);
    REFUSE(&b, "hostile.gguf: duplicate key general.name");
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, RGGUF_UINT8);
    bb_le(&b, 0, 1);
    REFUSE(&b, "key 0: name contains a NUL byte");
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 0);
    REFUSE(&b, "key 0 (general.alignment): alignment 0 is not a power of two");
    bb_header(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 3);
    REFUSE(&b, "alignment 3 is not a power of two");
    bb_header(&b, 3, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, RGGUF_INT32);
    bb_u32(&b, 32);
    REFUSE(&b, "the alignment must be a uint32, not int32");

    /* tensor infos */
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 0, ne1, RGGUF_F32, 0);
    bb_u64(&b, 0);
    REFUSE(&b, "tensor 0 (w): 0 dimensions (at least 1)");
    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "v", 1, ne1, RGGUF_F32, 0);
    bb_str(&b, "w");
    bb_u32(&b, 5);
    for (int d = 0; d < 5; d++) bb_u64(&b, 1);
    bb_u32(&b, RGGUF_F32);
    bb_u64(&b, 32);
    REFUSE(&b, "hostile.gguf: tensor 1 (w): 5 dimensions (at most 4)");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 2, (const uint64_t[]){8, UINT64_MAX}, RGGUF_F32, 0);
    REFUSE(&b, "tensor 0 (w): dimension 1 is negative");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 3, (const uint64_t[]){1ull << 32, 1ull << 32, 1ull << 32}, RGGUF_F32, 0);
    REFUSE(&b, "has more than 2^63 elements");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 1, (const uint64_t[]){1ull << 62}, RGGUF_F32, 0);
    REFUSE(&b, "tensor 0 (w): size in bytes overflows");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 1, (const uint64_t[]){1ull << 40}, RGGUF_F32, 0);
    bb_pad(&b, 32);
    REFUSE(&b, "tensor w: data runs past end of file");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.w", 2, ne2, 99, 0);
    REFUSE(&b, "tensor 0 (blk.0.w): type 99 (unknown) is not supported");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.w", 2, ne2, 16, 0);
    REFUSE(&b, "type 16 (iq2_xxs) is not supported (f32, f16, bf16, q4_0");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.w", 2, ne2, 39, 0);
    REFUSE(&b, "type 39 (mxfp4) is not supported");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.w", 2, ne2, RGGUF_Q4_K, 0);
    REFUSE(&b, "dimension 0 (8) is not a multiple of the q4_K block size 256");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 1, (const uint64_t[]){33}, RGGUF_Q8_0, 0);
    REFUSE(&b, "dimension 0 (33) is not a multiple of the q8_0 block size 32");
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "w", 1, ne1, RGGUF_F32, 16);
    REFUSE(&b, "tensor 0 (w): data offset 16 is not a multiple of the alignment 32");
    bb_header(&b, 3, 1, 1);
    bb_kv_u32(&b, "general.alignment", 8);
    bb_tensor(&b, "w", 1, ne1, RGGUF_F32, 16);
    bb_pad(&b, 8);
    for (int k = 0; k < 48; k++) bb_le(&b, 0, 1);
    ACCEPT(&b);
    char name[80];
    memset(name, 'n', 64);
    name[64] = '\0';
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, name, 1, ne1, RGGUF_F32, 0);
    REFUSE(&b, "tensor 0: name of 64 bytes is too long (at most 63)");
    name[63] = '\0';
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, name, 1, ne1, RGGUF_F32, 0);
    bb_pad(&b, 32);
    for (int k = 0; k < 32; k++) bb_le(&b, 0, 1);
    ACCEPT(&b);

    /* tensor data: overlaps, past the end, duplicates, zero-size tensors */
    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "a", 2, ne2, RGGUF_F32, 0); /* 64 bytes */
    bb_tensor(&b, "b", 1, ne1, RGGUF_F32, 32);
    bb_pad(&b, 32);
    for (int k = 0; k < 128; k++) bb_le(&b, 0, 1);
    REFUSE(&b, "hostile.gguf: tensors a and b overlap");
    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "a", 2, ne2, RGGUF_F32, 0);
    bb_tensor(&b, "b", 1, ne1, RGGUF_F32, 64);
    bb_pad(&b, 32);
    for (int k = 0; k < 64 + 31; k++) bb_le(&b, 0, 1);
    REFUSE(&b, "hostile.gguf: tensor b: data runs past end of file");
    bb_le(&b, 0, 1);
    ACCEPT(&b);
    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "a", 1, ne1, RGGUF_F32, 0);
    bb_tensor(&b, "a", 1, ne1, RGGUF_F32, 32);
    bb_pad(&b, 32);
    for (int k = 0; k < 64; k++) bb_le(&b, 0, 1);
    REFUSE(&b, "hostile.gguf: duplicate tensor a");
    bb_header(&b, 3, 3, 0);
    bb_tensor(&b, "z", 2, (const uint64_t[]){8, 0}, RGGUF_F32, 0);
    bb_tensor(&b, "a", 1, ne1, RGGUF_F32, 0);
    bb_tensor(&b, "y", 1, (const uint64_t[]){0}, RGGUF_Q4_0, 32);
    bb_pad(&b, 32);
    for (int k = 0; k < 32; k++) bb_le(&b, 0, 1);
    ACCEPT(&b);
    const char *why;
    if (open_copy(b.p, b.n, "zero.gguf", &why)) {
        struct rgguf *g = rgguf_open_buffer(b.p, b.n, "zero.gguf");
        REQUIRE(g);
        CHECK(rgguf_find_tensor(g, "z")->nbytes == 0 && rgguf_find_tensor(g, "y")->nbytes == 0);
        rgguf_close(g);
    }
    /* tensors but no room for the data section at all */
    bb_header(&b, 3, 1, 0);
    bb_tensor(&b, "a", 1, ne1, RGGUF_F32, 0);
    REFUSE(&b, "tensor a: data runs past end of file");
    free(b.p);
}

/* ---- rgguf_prefault --------------------------------------------------------------------- */

static long minor_faults(void) {
    struct rusage ru;
    REQUIRE(getrusage(RUSAGE_SELF, &ru) == 0);
    return ru.ru_minflt + ru.ru_majflt;
}

/* Page faults taken reading one byte of every page of t (not through AddressSanitizer's checks,
 * whose shadow pages take faults of their own). */
__attribute__((no_sanitize_address)) static long faults_reading(const struct rgguf_tensor *t) {
    const long page = sysconf(_SC_PAGESIZE), before = minor_faults();
    unsigned sum = 0;
    for (size_t o = 0; o < t->nbytes; o += (size_t)page)
        sum += ((const volatile uint8_t *)t->data)[o];
    touch_sink += sum;
    return minor_faults() - before;
}

/* Two tensors of 4 MiB in a mapped file: the one prefaulted is read without page faults, the
 * other takes them (Linux 6 maps 16 pages of a file a fault: 64 for its 1024 pages). */
static void test_prefault(void) {
    enum { N = 1 << 20 };
    struct bb b = {0};
    const uint64_t ne[1] = {N};
    bb_header(&b, 3, 2, 0);
    bb_tensor(&b, "cold", 1, ne, RGGUF_F32, 0);
    bb_tensor(&b, "warm", 1, ne, RGGUF_F32, (uint64_t)N * 4);
    bb_pad(&b, 32);
    const size_t data = b.n;
    b.cap = data + (size_t)N * 8;
    REQUIRE((b.p = realloc(b.p, b.cap)));
    for (size_t i = 0; i < (size_t)N * 8; i++) b.p[data + i] = (uint8_t)(i * 7 + 1);
    b.n = b.cap;
    char path[128];
    tmp_path(path, sizeof path, "prefault.gguf");
    REQUIRE(file_write(path, b.p, b.n));
    /* out of the page cache: pages written just now sit in large folios, which one fault maps
       whole; a file read back from the disk comes in the pieces its readahead takes */
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    CHECK(fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
    close(fd);

    struct rgguf *g = rgguf_open(path, true);
    REQUIRE(g);
    const struct rgguf_tensor *cold = rgguf_find_tensor(g, "cold"),
                              *warm = rgguf_find_tensor(g, "warm");
    REQUIRE(cold && warm && warm->nbytes == (size_t)N * 4);
    void *probe = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(probe != MAP_FAILED);
#ifdef MADV_POPULATE_READ
    const bool kernel_has = madvise(probe, 4096, MADV_POPULATE_READ) == 0;
#else
    const bool kernel_has = false;
#endif
    munmap(probe, 4096);
    rgguf_prefault(g, warm);
    const long f_warm = faults_reading(warm), f_cold = faults_reading(cold);
    if (!kernel_has) {
        printf("SKIP: this kernel has no MADV_POPULATE_READ (Linux 5.14): rgguf_prefault is advice "
               "it ignores (%ld and %ld faults)\n",
               f_warm, f_cold);
    } else if (f_cold < 16) {
        printf("SKIP: this kernel mapped 4 MiB of the file in %ld page faults: too few to show "
               "what prefaulting saves (%ld faults after it)\n",
               f_cold, f_warm);
    } else {
        CHECK(f_warm <= 2);
    }
    /* the data is the file's, and a handle read into memory or none at all is left alone */
    CHECK(((const uint8_t *)warm->data)[12345] == (uint8_t)(((size_t)N * 4 + 12345) * 7 + 1));
    rgguf_close(g);
    g = rgguf_open(path, false);
    REQUIRE(g);
    rgguf_prefault(g, rgguf_find_tensor(g, "warm"));
    rgguf_prefault(NULL, NULL);
    rgguf_close(g);
    CHECK(unlink(path) == 0);
    free(b.p);
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/test_gguf-XXXXXX",
             base && strlen(base) < 40 ? base : "/tmp");
    REQUIRE(mkdtemp(tmpdir));
    RUN(test_vocab_files);
    RUN(test_round_trip);
    RUN(test_require_tensor);
    RUN(test_all_value_types);
    RUN(test_writer_errors);
    RUN(test_truncated);
    RUN(test_byte_changes);
    RUN(test_hostile_headers);
    RUN(test_prefault);
    CHECK(rmdir(tmpdir) == 0);
    return test_finish("test_gguf");
}
