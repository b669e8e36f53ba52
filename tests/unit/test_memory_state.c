/* State streams of the memory: round trips, and every kind of bad stream refused with the
 * memory cleared (whole) or the target sequence absent (one sequence), never half-written. */
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "memory/memory.h"
#include "test.h"
#include "toy.h"

#define N_VOCAB 100

static const uint32_t K_ROW[2] = {3, 2};
static const uint32_t V_ROW[2] = {5, 4};

static struct rmem *make_typed(uint32_t n_seq, uint32_t n_cells, enum rcore_type tk,
                               enum rcore_type tv, const uint32_t *k_row, uint32_t n_layer) {
    struct rmem_params p = {n_layer, k_row, V_ROW, tk, tv, n_cells, n_seq, NULL};
    struct rmem *mem = rmem_create(&p);
    REQUIRE(mem);
    return mem;
}

static struct rmem *make(uint32_t n_seq, uint32_t n_cells) {
    return make_typed(n_seq, n_cells, RCORE_TYPE_F32, RCORE_TYPE_F16, K_ROW, 2);
}

static void decode_seq(struct rmem *mem, int32_t seq, int32_t n, int32_t tok0) {
    int32_t tokens[32], nseq[32], ids[32];
    int32_t *ptr[32];
    for (int32_t i = 0; i < n; i++) {
        tokens[i] = (tok0 + 13 * i) % N_VOCAB;
        nseq[i] = 1;
        ids[i] = seq;
        ptr[i] = &ids[i];
    }
    struct rbatch_in in = {n, tokens, NULL, NULL, nseq, ptr, NULL};
    struct rmem_batch_params bp = {8, N_VOCAB, false, false};
    struct rmem_bctx *ctx;
    REQUIRE(rmem_init_batch(mem, &in, &bp, &ctx) == RMEM_OK);
    do {
        REQUIRE(rmem_bctx_apply(ctx));
        REQUIRE(toy_compute(mem, rmem_bctx_ubatch(ctx)));
    } while (rmem_bctx_next(ctx));
    rmem_bctx_free(ctx);
}

/* A memory with three live sequences, two of them sharing a state. */
static struct rmem *populated(void) {
    struct rmem *mem = make(4, 4);
    decode_seq(mem, 0, 5, 1);
    decode_seq(mem, 2, 3, 7);
    rmem_seq_cp(mem, 2, 3, -1, -1);
    return mem;
}

static uint8_t *write_buf(const struct rmem *mem, int32_t seq, size_t *size) {
    *size = rmem_state_size(mem, seq);
    uint8_t *buf = malloc(*size);
    REQUIRE(buf && *size > 0);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, *size);
    REQUIRE(rmem_state_write(mem, &w, seq));
    REQUIRE(w.n_done == *size);
    return buf;
}

static bool read_buf(struct rmem *mem, const uint8_t *buf, size_t size, int32_t seq) {
    struct rio_reader r;
    rio_reader_buffer(&r, buf, size);
    return rmem_state_read(mem, &r, seq);
}

/* The stream of one sequence, to compare a sequence's state between memories. */
static bool same_seq(const struct rmem *a, int32_t sa, const struct rmem *b, int32_t sb) {
    size_t na, nb;
    uint8_t *x = write_buf(a, sa, &na), *y = write_buf(b, sb, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void test_roundtrip_whole(void) {
    struct rmem *mem = populated();
    size_t size;
    uint8_t *buf = write_buf(mem, -1, &size);
    /* header 16 + cells (pos, n_seq, ids): 2 cells, 1 + 2 sequences, 12 + 16 bytes;
       per layer per kind 12 bytes of type and row size; rows: 2 cells x (5 f32 + 9 f16);
       snapshot lists 4 (none); checksum 8 */
    CHECK(size == 16 + 12 + 16 + 4 * 12 + 2 * (5 * 4 + 9 * 2) + 4 + 8);

    struct rmem *copy = make(4, 4);
    CHECK(read_buf(copy, buf, size, -1));
    CHECK(rmem_check(copy));
    CHECK(rmem_used(copy) == 2);
    for (int32_t s = 0; s < 4; s++) CHECK(rmem_seq_pos_max(copy, s) == rmem_seq_pos_max(mem, s));
    CHECK(rmem_seq_tail(copy, 2) == rmem_seq_tail(copy, 3)); /* sharing survives */
    CHECK(same_seq(mem, 0, copy, 0) && same_seq(mem, 2, copy, 3));
    /* writing the copy gives the same bytes */
    size_t size2;
    uint8_t *buf2 = write_buf(copy, -1, &size2);
    CHECK(size2 == size && memcmp(buf, buf2, size) == 0);

    /* through a file */
    FILE *f = tmpfile();
    REQUIRE(f);
    struct rio_writer w;
    rio_writer_file(&w, f);
    CHECK(rmem_state_write(mem, &w, -1));
    rewind(f);
    struct rmem *copy2 = make(4, 4);
    struct rio_reader r;
    rio_reader_file(&r, f);
    CHECK(rmem_state_read(copy2, &r, -1));
    CHECK(rmem_fingerprint(copy2) == rmem_fingerprint(copy));
    fclose(f);

    free(buf);
    free(buf2);
    rmem_free(mem);
    rmem_free(copy);
    rmem_free(copy2);
}

static void test_roundtrip_seq(void) {
    struct rmem *mem = populated();
    size_t size;
    uint8_t *buf = write_buf(mem, 0, &size);
    CHECK(size == 16 + 8 + 4 * 12 + (5 * 4 + 9 * 2) + 4 + 8);

    /* into another id of another memory, and of the same memory */
    struct rmem *other = make(4, 4);
    CHECK(read_buf(other, buf, size, 1));
    CHECK(rmem_seq_pos_max(other, 1) == 4 && same_seq(mem, 0, other, 1));
    CHECK(rmem_check(other));
    CHECK(read_buf(mem, buf, size, 3)); /* replaces 3's shared state, 2 keeps its own */
    CHECK(same_seq(mem, 0, mem, 3) && rmem_seq_tail(mem, 3) != rmem_seq_tail(mem, 0));
    CHECK(rmem_seq_pos_max(mem, 2) == 2);
    CHECK(rmem_check(mem));

    /* decoding on from the restored state equals decoding on from the original */
    decode_seq(mem, 0, 2, 40);
    decode_seq(other, 1, 2, 40);
    CHECK(same_seq(mem, 0, other, 1));

    /* an empty sequence's stream empties the target */
    size_t esize;
    uint8_t *empty = write_buf(other, 0, &esize);
    CHECK(read_buf(mem, empty, esize, 2));
    CHECK(rmem_seq_pos_max(mem, 2) == -1);
    CHECK(!read_buf(mem, buf, size, 4));
    CHECK_ERR("out of range");
    free(empty);
    free(buf);
    rmem_free(mem);
    rmem_free(other);
}

/* Every truncation and many bit flips of a stream are refused. */
static void test_corrupt_whole(void) {
    struct rmem *mem = populated();
    struct rmem *fresh = make(4, 4);
    const uint64_t fresh_fp = rmem_fingerprint(fresh);
    size_t size;
    uint8_t *buf = write_buf(mem, -1, &size);
    struct rmem *t = make(4, 4);

    int truncated_ok = 1;
    for (size_t cut = 0; cut < size; cut++) {
        decode_seq(t, 1, 2, (int32_t)cut); /* something to lose */
        if (read_buf(t, buf, cut, -1) || rmem_fingerprint(t) != fresh_fp) truncated_ok = 0;
    }
    CHECK(truncated_ok);
    CHECK_ERR("stream ends");

    int flipped_ok = 1;
    uint8_t *bad = malloc(size);
    REQUIRE(bad);
    for (size_t i = 0; i < size; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, buf, size);
            bad[i] ^= (uint8_t)(1u << bit);
            decode_seq(t, 1, 2, 3);
            if (read_buf(t, bad, size, -1) || rmem_fingerprint(t) != fresh_fp) {
                flipped_ok = 0;
                fprintf(stderr, "  flip of bit %d at byte %zu was accepted\n", bit, i);
            }
        }
    }
    CHECK(flipped_ok);
    /* a flip in the rows is caught by the checksum */
    memcpy(bad, buf, size);
    bad[size - 16] ^= 1;
    CHECK(!read_buf(t, bad, size, -1));
    CHECK_ERR("checksum");
    CHECK(read_buf(t, buf, size, -1)); /* and the good stream still reads */
    CHECK(rmem_fingerprint(t) != fresh_fp && rmem_used(t) == 2);
    free(bad);
    free(buf);
    rmem_free(mem);
    rmem_free(fresh);
    rmem_free(t);
}

static void test_corrupt_seq(void) {
    struct rmem *mem = populated();
    size_t size;
    uint8_t *buf = write_buf(mem, 0, &size);
    struct rmem *t = populated();
    size_t other_size;
    uint8_t *others = write_buf(t, 2, &other_size); /* sequence 2 must never change */

    int ok = 1;
    for (size_t cut = 0; cut < size; cut++) {
        decode_seq(t, 1, 1, 5);
        if (read_buf(t, buf, cut, 1) || rmem_seq_pos_max(t, 1) != -1) ok = 0;
    }
    uint8_t *bad = malloc(size);
    REQUIRE(bad);
    for (size_t i = 0; i < size; i++) {
        memcpy(bad, buf, size);
        bad[i] ^= 0x10;
        decode_seq(t, 1, 1, 5);
        if (read_buf(t, bad, size, 1) || rmem_seq_pos_max(t, 1) != -1) ok = 0;
    }
    CHECK(ok);
    size_t after_size;
    uint8_t *after = write_buf(t, 2, &after_size);
    CHECK(after_size == other_size && memcmp(after, others, other_size) == 0);
    CHECK(rmem_seq_tail(t, 2) == rmem_seq_tail(t, 3) && rmem_seq_pos_max(t, 0) == 4);
    CHECK(rmem_check(t));
    free(after);
    free(bad);
    free(others);
    free(buf);
    rmem_free(mem);
    rmem_free(t);
}

/* Streams made for another shape are refused with a message naming the difference. */
static void test_wrong_shape(void) {
    struct rmem *mem = populated();
    size_t size;
    uint8_t *whole = write_buf(mem, -1, &size);
    size_t ssize;
    uint8_t *one = write_buf(mem, 0, &ssize);

    struct rmem *t = make_typed(4, 4, RCORE_TYPE_BF16, RCORE_TYPE_F16, K_ROW, 2);
    CHECK(!read_buf(t, whole, size, -1));
    CHECK_ERR("layer 0: K rows are of type f32 in the stream, bf16 in the memory");
    CHECK(rmem_used(t) == 0);
    rmem_free(t);

    static const uint32_t k_other[2] = {3, 7};
    t = make_typed(4, 4, RCORE_TYPE_F32, RCORE_TYPE_F16, k_other, 2);
    CHECK(!read_buf(t, one, ssize, 0));
    CHECK_ERR("layer 1: K rows are 8 bytes in the stream, 28 in the memory");
    rmem_free(t);

    t = make_typed(4, 4, RCORE_TYPE_F32, RCORE_TYPE_F16, K_ROW, 1);
    CHECK(!read_buf(t, whole, size, -1));
    CHECK_ERR("2 layers, the memory has 1");
    rmem_free(t);

    t = make(4, 1); /* too few cells for two */
    CHECK(!read_buf(t, whole, size, -1));
    CHECK_ERR("holds 2 cells, the memory has 1");
    rmem_free(t);

    t = make(3, 4); /* sequence 3 does not exist there */
    CHECK(!read_buf(t, whole, size, -1));
    CHECK_ERR("sequence id 3 is out of range 0..2");
    CHECK(rmem_used(t) == 0);
    rmem_free(t);

    t = make(4, 4); /* a whole stream is not a sequence's, and the other way round */
    CHECK(!read_buf(t, whole, size, 1));
    CHECK_ERR("at most 1 cell");
    CHECK(!read_buf(t, one, ssize, -1));
    CHECK_ERR("lists 0 sequences");

    uint8_t junk[64] = "GGUF and more";
    CHECK(!read_buf(t, junk, sizeof junk, -1));
    CHECK_ERR("not a recur state stream");
    uint8_t *v2 = malloc(ssize);
    REQUIRE(v2);
    memcpy(v2, one, ssize);
    v2[4] = 4; /* 3 is a hybrid memory's (test_memory_hybrid) */
    CHECK(!read_buf(t, v2, ssize, 0));
    CHECK_ERR("stream version 4");
    /* a version 1 stream (before snapshots: no section before the checksum) still reads */
    memcpy(v2, one, ssize);
    v2[4] = 1;
    const size_t v1_size = ssize - 4;
    const uint64_t digest = XXH64(v2, v1_size - 8, 0);
    for (int b = 0; b < 8; b++) v2[v1_size - 8 + b] = (uint8_t)(digest >> (8 * b));
    CHECK_MSG(read_buf(t, v2, v1_size, 0), "%s", TEST_LAST_ERROR());
    free(v2);

    /* a full memory has no cell for an incoming sequence: the target is left empty */
    struct rmem *full = make(4, 2);
    decode_seq(full, 0, 1, 1);
    decode_seq(full, 1, 1, 2);
    rmem_seq_cp(full, 0, 2, -1, -1);
    CHECK(!read_buf(full, one, ssize, 2));
    CHECK_ERR("no free cell");
    CHECK(rmem_seq_pos_max(full, 2) == -1 && rmem_seq_pos_max(full, 0) == 0);
    CHECK(rmem_check(full));
    rmem_free(full);

    /* a writer that runs out of room fails cleanly */
    uint8_t small[20];
    struct rio_writer w;
    rio_writer_buffer(&w, small, sizeof small);
    CHECK(!rmem_state_write(mem, &w, -1));
    CHECK_ERR("too small");
    CHECK(!rmem_state_write(mem, &w, 9));
    CHECK(rmem_state_size(mem, 9) == 0);

    free(whole);
    free(one);
    rmem_free(t);
    rmem_free(mem);
}

int main(void) {
    RUN(test_roundtrip_whole);
    RUN(test_roundtrip_seq);
    RUN(test_corrupt_whole);
    RUN(test_corrupt_seq);
    RUN(test_wrong_shape);
    return test_finish("test_memory_state");
}
