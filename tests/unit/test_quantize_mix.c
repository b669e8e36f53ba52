/*
 * recur_model_quantize's choice of type per tensor (llama-quantize's mixes and fallbacks), on
 * a GGUF file of named f32 tensors shaped to hit every rule: a 16-layer "mamba" file with
 * 256-wide matrices, 48-wide ssm_dt rows (not whole K blocks), 40-wide rows (not whole 32-blocks
 * either), ffn_down and attn_v matrices, norms and conv weights that are never converted.
 *
 * The expected types are written out here from llama-quantize's documented rules, layer by
 * layer (for 16 layers "more bits" means layers 0, 1, 4, 7, 10, 13, 14 and 15), not computed by
 * the code under test. (The values each type writes are tested in test_quants.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "ops/ops.h"
#include "recur.h"
#include "test.h"

#define N_LAYER 16

/* The layers llama.cpp's use_more_bits picks among 16. */
static const int more_bits_16[N_LAYER] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};

static float *values(int64_t n, unsigned seed) {
    float *v = malloc(sizeof(float) * (size_t)n);
    REQUIRE(v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = ((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f) * 0.2f;
    }
    return v;
}

static void add(struct rgguf_writer *w, const char *name, int64_t cols, int64_t rows,
                unsigned seed) {
    /* rows 0: a 1-D tensor of cols values */
    const int64_t ne[2] = {cols, rows}, n = cols * (rows > 0 ? rows : 1);
    float *v = values(n, seed);
    REQUIRE(rgguf_writer_add_tensor(w, name, RGGUF_F32, rows > 0 ? 2 : 1, ne, v,
                                    sizeof(float) * (size_t)n));
    free(v);
}

/* The input file; tied: without output.weight. */
static void write_input(const char *path, bool tied) {
    struct rgguf_writer *w = rgguf_writer_create();
    REQUIRE(w);
    REQUIRE(rgguf_writer_set_str(w, "general.architecture", "mamba"));
    REQUIRE(rgguf_writer_set_u32(w, "mamba.block_count", N_LAYER));
    add(w, "token_embd.weight", 256, 8, 1);
    if (!tied) add(w, "output.weight", 256, 8, 2);
    add(w, "output_norm.weight", 256, 0, 3);
    for (int i = 0; i < N_LAYER; i++) {
        char name[64];
        static const struct {
            const char *suffix;
            int64_t cols, rows;
        } t[] = {{"ssm_in.weight", 256, 4},   {"ssm_dt.weight", 48, 4},
                 {"ssm_x.weight", 40, 4},     {"ffn_down.weight", 512, 2},
                 {"attn_v.weight", 256, 2},   {"ssm_conv1d.weight", 4, 8},
                 {"attn_norm.weight", 256, 0}};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
            snprintf(name, sizeof name, "blk.%d.%s", i, t[k].suffix);
            add(w, name, t[k].cols, t[k].rows, (unsigned)(100 * i + k));
        }
    }
    REQUIRE(rgguf_writer_write(w, path));
    rgguf_writer_free(w);
}

static uint32_t type_of(const struct rgguf *g, const char *name) {
    const struct rgguf_tensor *t = rgguf_find_tensor(g, name);
    return t ? t->type : 9999;
}

/* The type each rule expects (K mixes): base, the output's, ffn_down and attn_v of layer i. */
struct expect {
    enum recur_ftype ftype;
    bool pure;
    uint32_t base, output, dt, x;
    uint32_t down_more, down_first_eighth, v_more, v_first4;
};

static void check_file(const char *in, const struct expect *e, bool tied) {
    char out[256];
    snprintf(out, sizeof out, "%s.out-%d-%d.gguf", in, (int)e->ftype, (int)e->pure);
    struct recur_model_quantize_params p = recur_model_quantize_default_params();
    p.ftype = e->ftype;
    p.pure = e->pure;
    CHECK_MSG(recur_model_quantize(in, out, &p, NULL), "ftype %d: %s", (int)e->ftype,
              recur_last_error());
    struct rgguf *g = rgguf_open(out, true);
    REQUIRE(g);
    const char *label = tied ? "tied" : "untied";
    /* the output (token_embd when tied) */
    const uint32_t out_t = type_of(g, tied ? "token_embd.weight" : "output.weight");
    CHECK_MSG(out_t == e->output, "ftype %d pure %d %s: output %s", (int)e->ftype, (int)e->pure,
              label, rgguf_type_name(out_t));
    if (!tied)
        CHECK_MSG(type_of(g, "token_embd.weight") == e->base, "ftype %d: token_embd %s",
                  (int)e->ftype, rgguf_type_name(type_of(g, "token_embd.weight")));
    CHECK(type_of(g, "output_norm.weight") == RGGUF_F32);
    int v_seen = 0;
    for (int i = 0; i < N_LAYER; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ssm_in.weight", i);
        CHECK_MSG(type_of(g, name) == e->base, "ftype %d: %s is %s", (int)e->ftype, name,
                  rgguf_type_name(type_of(g, name)));
        snprintf(name, sizeof name, "blk.%d.ssm_dt.weight", i);
        CHECK_MSG(type_of(g, name) == e->dt, "ftype %d: %s is %s", (int)e->ftype, name,
                  rgguf_type_name(type_of(g, name)));
        snprintf(name, sizeof name, "blk.%d.ssm_x.weight", i);
        CHECK_MSG(type_of(g, name) == e->x, "ftype %d: %s is %s", (int)e->ftype, name,
                  rgguf_type_name(type_of(g, name)));
        snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", i);
        CHECK(type_of(g, name) == RGGUF_F32);
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", i);
        CHECK(type_of(g, name) == RGGUF_F32);
        uint32_t want = e->base;
        if (e->down_more && more_bits_16[i]) want = e->down_more;
        if (e->down_first_eighth && i < N_LAYER / 8) want = e->down_first_eighth;
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", i);
        CHECK_MSG(type_of(g, name) == want, "ftype %d pure %d: %s is %s, want %s", (int)e->ftype,
                  (int)e->pure, name, rgguf_type_name(type_of(g, name)), rgguf_type_name(want));
        want = e->base;
        if (e->v_more && more_bits_16[v_seen]) want = e->v_more;
        if (e->v_first4 && v_seen < 4) want = e->v_first4;
        v_seen++;
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", i);
        CHECK_MSG(type_of(g, name) == want, "ftype %d pure %d: %s is %s, want %s", (int)e->ftype,
                  (int)e->pure, name, rgguf_type_name(type_of(g, name)), rgguf_type_name(want));
    }
    uint32_t qv = 0;
    CHECK(rgguf_get_u32(g, "general.quantization_version", &qv) && qv == 2);
    uint32_t ft = 0;
    CHECK(rgguf_get_u32(g, "general.file_type", &ft) && ft == (uint32_t)e->ftype);
    rgguf_close(g);
    unlink(out);
}

static void test_mixes(void) {
    char in[] = "/tmp/recur-mix-XXXXXX";
    const int fd = mkstemp(in);
    REQUIRE(fd >= 0);
    close(fd);
    /* ssm_dt (48 wide): K types fall back (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0), none of
       which fits 48 -> f16; ssm_x (40 wide) the same; the legacy types keep f32 there. */
    const struct expect cases[] = {
        {RECUR_FTYPE_MOSTLY_Q4_K_M, false, RGGUF_Q4_K, RGGUF_Q6_K, RGGUF_F16, RGGUF_F16, RGGUF_Q6_K,
         0, RGGUF_Q6_K, 0},
        {RECUR_FTYPE_MOSTLY_Q5_K_M, false, RGGUF_Q5_K, RGGUF_Q6_K, RGGUF_F16, RGGUF_F16, RGGUF_Q6_K,
         0, RGGUF_Q6_K, 0},
        {RECUR_FTYPE_MOSTLY_Q4_K_S, false, RGGUF_Q4_K, RGGUF_Q6_K, RGGUF_F16, RGGUF_F16, 0,
         RGGUF_Q5_K, 0, RGGUF_Q5_K},
        {RECUR_FTYPE_MOSTLY_Q5_K_S, false, RGGUF_Q5_K, RGGUF_Q6_K, RGGUF_F16, RGGUF_F16, 0, 0, 0,
         0},
        {RECUR_FTYPE_MOSTLY_Q6_K, false, RGGUF_Q6_K, RGGUF_Q6_K, RGGUF_F16, RGGUF_F16, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_Q4_K_M, true, RGGUF_Q4_K, RGGUF_Q4_K, RGGUF_F16, RGGUF_F16, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_Q4_1, false, RGGUF_Q4_1, RGGUF_Q6_K, RGGUF_F32, RGGUF_F32, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_Q5_0, true, RGGUF_Q5_0, RGGUF_Q5_0, RGGUF_F32, RGGUF_F32, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_Q5_1, false, RGGUF_Q5_1, RGGUF_Q6_K, RGGUF_F32, RGGUF_F32, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_Q8_0, false, RGGUF_Q8_0, RGGUF_Q8_0, RGGUF_F32, RGGUF_F32, 0, 0, 0, 0},
        {RECUR_FTYPE_MOSTLY_F16, false, RGGUF_F16, RGGUF_F16, RGGUF_F16, RGGUF_F16, 0, 0, 0, 0},
    };
    for (int tied = 0; tied <= 1; tied++) {
        write_input(in, tied);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_file(in, &cases[c], tied);
    }
    struct recur_model_quantize_params p = recur_model_quantize_default_params();
    CHECK(p.ftype == RECUR_FTYPE_MOSTLY_Q8_0 && !p.pure && p.nthread == 4);
    p.nthread = 0;
    CHECK(!recur_model_quantize(in, "/tmp/recur-mix-none.gguf", &p, NULL));
    CHECK_ERR("nthread 0 is not in 1 .. 256");
    p.nthread = 4;
    p.ftype = (enum recur_ftype)12; /* Q3_K_M: not written by recur */
    CHECK(!recur_model_quantize(in, "/tmp/recur-mix-none.gguf", &p, NULL));
    CHECK_ERR("ftype 12 is not one of");
    unlink(in);
}

int main(void) {
    RUN(test_mixes);
    return test_finish("test_quantize_mix");
}
