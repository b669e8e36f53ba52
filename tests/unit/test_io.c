/*
 * Tests of src/io: the buffer, counter and file writers, the buffer and file readers, the
 * little-endian integer encoding, sticky errors, truncation reporting and the running digest.
 */
#include "io/io.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "test.h"

/* ---- writers ---------------------------------------------------------------------------- */

static void test_buffer_writer_exact_capacity(void) {
    unsigned char buf[16 + 8];
    memset(buf, 0xee, sizeof buf);
    struct rio_writer w;
    rio_writer_buffer(&w, buf, 16); /* the 8 bytes past cap are a guard */
    CHECK(w.n_done == 0 && !w.failed);

    const unsigned char raw[3] = {0xa1, 0xa2, 0xa3};
    CHECK(rio_write_u32(&w, 0x11223344u));
    CHECK(w.n_done == 4);
    CHECK(rio_write_u64(&w, 0x5566778899aabbccull));
    CHECK(w.n_done == 12);
    CHECK(rio_write(&w, raw, 3));
    CHECK(rio_write(&w, raw, 0)); /* nothing to write is not a failure */
    CHECK(rio_write(&w, raw, 1));
    CHECK(w.n_done == 16); /* exactly full */
    CHECK(rio_write(&w, raw, 0));
    CHECK(!w.failed);

    const unsigned char want[16] = {0x44, 0x33, 0x22, 0x11, 0xcc, 0xbb, 0xaa, 0x99,
                                    0x88, 0x77, 0x66, 0x55, 0xa1, 0xa2, 0xa3, 0xa1};
    CHECK(memcmp(buf, want, 16) == 0);

    /* one byte over fails, names the sizes, and writes nothing */
    rcore_error_clear();
    CHECK(!rio_write(&w, raw, 1));
    CHECK(w.failed);
    CHECK(w.n_done == 16);
    CHECK_ERR("buffer of 16 bytes is too small");
    CHECK_ERR("write of 1 bytes at byte 16");
    bool guard_ok = true;
    for (size_t i = 16; i < sizeof buf; i++) guard_ok = guard_ok && buf[i] == 0xee;
    CHECK(guard_ok);

    /* sticky: every later call fails at once and leaves the first error standing */
    rcore_error_set("marker");
    CHECK(!rio_write(&w, raw, 0));
    CHECK(!rio_write_u32(&w, 1));
    CHECK(!rio_write_i32(&w, -1));
    CHECK(!rio_write_u64(&w, 1));
    CHECK(strcmp(rcore_error_get(), "marker") == 0);
    CHECK(w.n_done == 16);
    CHECK(memcmp(buf, want, 16) == 0);
}

static void test_buffer_writer_overflow_in_one_write(void) {
    unsigned char buf[8];
    memset(buf, 0, sizeof buf);
    const unsigned char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    struct rio_writer w;

    /* a write that fits only partly is refused whole: no partial copy */
    rio_writer_buffer(&w, buf, 5);
    CHECK(rio_write(&w, src, 2));
    rcore_error_clear();
    CHECK(!rio_write(&w, src, 4));
    CHECK_ERR("write of 4 bytes at byte 2: buffer of 5 bytes is too small");
    CHECK(w.n_done == 2);
    CHECK(buf[2] == 0 && buf[3] == 0 && buf[4] == 0 && buf[5] == 0);
    /* a write that would have fit, after the failure, still fails */
    CHECK(!rio_write(&w, src, 1));

    /* an integer that straddles the end is refused whole */
    rio_writer_buffer(&w, buf, 7);
    CHECK(rio_write_u32(&w, 0xffffffffu));
    CHECK(!rio_write_u32(&w, 0xffffffffu));
    CHECK_ERR("buffer of 7 bytes is too small");
    CHECK(w.n_done == 4);

    /* a u64 is two u32 writes: when only the low half fits, n_done says so and the error
     * names the high half's write */
    memset(buf, 0, sizeof buf);
    rio_writer_buffer(&w, buf, 6);
    CHECK(!rio_write_u64(&w, 0x0807060504030201ull));
    CHECK_ERR("write of 4 bytes at byte 4: buffer of 6 bytes is too small");
    CHECK(w.n_done == 4);

    /* no buffer at all is a zero-capacity buffer */
    rio_writer_buffer(&w, NULL, 100);
    CHECK(rio_write(&w, src, 0));
    CHECK(!rio_write(&w, src, 1));
    CHECK_ERR("buffer of 0 bytes is too small");

    /* zero capacity with a real buffer */
    rio_writer_buffer(&w, buf, 0);
    CHECK(!rio_write(&w, src, 1));
    CHECK_ERR("write of 1 bytes at byte 0: buffer of 0 bytes is too small");
}

static void test_counter_writer(void) {
    struct rio_writer w;
    rio_writer_counter(&w);
    static unsigned char big[100000];
    CHECK(rio_write(&w, big, sizeof big));
    CHECK(rio_write_u32(&w, 1));
    CHECK(rio_write_i32(&w, -1));
    CHECK(rio_write_u64(&w, 1));
    CHECK(rio_write(&w, big, 0));
    CHECK(w.n_done == sizeof big + 16);
    CHECK(!w.failed);

    /* a counter sizes exactly what a buffer writer then accepts */
    unsigned char *buf = malloc(w.n_done);
    REQUIRE(buf != NULL);
    struct rio_writer b;
    rio_writer_buffer(&b, buf, w.n_done);
    CHECK(rio_write(&b, big, sizeof big) && rio_write_u32(&b, 1) && rio_write_i32(&b, -1) &&
          rio_write_u64(&b, 1));
    CHECK(b.n_done == w.n_done);
    CHECK(!rio_write(&b, big, 1));
    free(buf);
}

static void test_file_writer(void) {
    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    struct rio_writer w;
    rio_writer_file(&w, f);
    unsigned char raw[300];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (unsigned char)(i * 7 + 1);
    CHECK(rio_write_u32(&w, 0xdeadbeefu));
    CHECK(rio_write_i32(&w, -2));
    CHECK(rio_write_u64(&w, 0x0123456789abcdefull));
    CHECK(rio_write(&w, raw, sizeof raw));
    CHECK(rio_write(&w, raw, 0));
    CHECK(w.n_done == 16 + sizeof raw);
    CHECK(!w.failed);

    /* the file holds exactly what a buffer writer produces for the same calls */
    unsigned char want[16 + sizeof raw];
    struct rio_writer b;
    rio_writer_buffer(&b, want, sizeof want);
    REQUIRE(rio_write_u32(&b, 0xdeadbeefu) && rio_write_i32(&b, -2) &&
            rio_write_u64(&b, 0x0123456789abcdefull) && rio_write(&b, raw, sizeof raw));
    CHECK(rio_writer_digest(&w) == rio_writer_digest(&b));

    REQUIRE(fflush(f) == 0);
    rewind(f);
    unsigned char got[sizeof want + 1];
    size_t n = fread(got, 1, sizeof got, f);
    CHECK(n == sizeof want);
    CHECK(memcmp(got, want, sizeof want) == 0);
    fclose(f);

    /* a stream that refuses writes: the failure is reported and sticky. /dev/full fails every
     * write with ENOSPC; unbuffered, fwrite sees it at once. */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        setvbuf(full, NULL, _IONBF, 0);
        rio_writer_file(&w, full);
        rcore_error_clear();
        CHECK(!rio_write(&w, raw, 10));
        CHECK(w.failed);
        CHECK(w.n_done == 0);
        CHECK_ERR("write of 10 bytes at byte 0 failed");
        rcore_error_set("marker");
        CHECK(!rio_write(&w, raw, 0));
        CHECK(strcmp(rcore_error_get(), "marker") == 0);
        fclose(full);
    } else {
        printf("test_io: /dev/full not available; file write failure not checked\n");
    }
}

/* ---- encoding --------------------------------------------------------------------------- */

static void test_little_endian(void) {
    unsigned char buf[64];
    struct rio_writer w;
    rio_writer_buffer(&w, buf, sizeof buf);
    REQUIRE(rio_write_u32(&w, 0x01020304u));
    REQUIRE(rio_write_i32(&w, -2));
    REQUIRE(rio_write_i32(&w, INT32_MIN));
    REQUIRE(rio_write_i32(&w, INT32_MAX));
    REQUIRE(rio_write_u64(&w, 0x0102030405060708ull));
    REQUIRE(rio_write_u64(&w, UINT64_MAX));
    REQUIRE(rio_write_u32(&w, 0));
    const unsigned char want[] = {
        0x04, 0x03, 0x02, 0x01,                         /* u32 0x01020304 */
        0xfe, 0xff, 0xff, 0xff,                         /* i32 -2, two's complement */
        0x00, 0x00, 0x00, 0x80,                         /* i32 INT32_MIN */
        0xff, 0xff, 0xff, 0x7f,                         /* i32 INT32_MAX */
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* u64 */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* u64 max */
        0x00, 0x00, 0x00, 0x00,                         /* u32 0 */
    };
    CHECK(w.n_done == sizeof want);
    CHECK(memcmp(buf, want, sizeof want) == 0);

    /* and back, through the reader, from the literal bytes (not from what the writer did) */
    struct rio_reader r;
    rio_reader_buffer(&r, want, sizeof want);
    uint32_t u32 = 0;
    int32_t i32 = 0;
    uint64_t u64 = 0;
    CHECK(rio_read_u32(&r, &u32) && u32 == 0x01020304u);
    CHECK(rio_read_i32(&r, &i32) && i32 == -2);
    CHECK(rio_read_i32(&r, &i32) && i32 == INT32_MIN);
    CHECK(rio_read_i32(&r, &i32) && i32 == INT32_MAX);
    CHECK(rio_read_u64(&r, &u64) && u64 == 0x0102030405060708ull);
    CHECK(rio_read_u64(&r, &u64) && u64 == UINT64_MAX);
    CHECK(rio_read_u32(&r, &u32) && u32 == 0);
    CHECK(r.n_done == sizeof want);

    /* random values, so that every byte position carries high bits both ways */
    unsigned long long rng = 7;
    int bad = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t v = test_rand(&rng);
        rio_writer_buffer(&w, buf, sizeof buf);
        REQUIRE(rio_write_u64(&w, v) && rio_write_u32(&w, (uint32_t)(v >> 17)) &&
                rio_write_i32(&w, (int32_t)(uint32_t)v));
        bool ok = true;
        for (int k = 0; k < 8; k++) ok = ok && buf[k] == (unsigned char)(v >> (8 * k));
        rio_reader_buffer(&r, buf, w.n_done);
        ok = ok && rio_read_u64(&r, &u64) && u64 == v && rio_read_u32(&r, &u32) &&
             u32 == (uint32_t)(v >> 17) && rio_read_i32(&r, &i32) && i32 == (int32_t)(uint32_t)v;
        if (!ok && bad++ < 5) CHECK_MSG(ok, "value 0x%016llx", (unsigned long long)v);
    }
    CHECK(bad == 0);
}

/* ---- readers ---------------------------------------------------------------------------- */

/* The small stream of the truncation tests: u32, i32, u64, 5 raw bytes, u32 = 25 bytes. A u64
 * is read as two u32, so the reads end at these offsets. */
static const size_t stream_ends[] = {4, 8, 12, 16, 21, 25};
#define STREAM_SIZE 25

static size_t make_stream(unsigned char *buf) {
    struct rio_writer w;
    rio_writer_buffer(&w, buf, STREAM_SIZE);
    const unsigned char raw[5] = {'h', 'e', 'l', 'l', 'o'};
    REQUIRE(rio_write_u32(&w, 0x4d454d52u) && rio_write_i32(&w, -7) &&
            rio_write_u64(&w, 0x1122334455667788ull) && rio_write(&w, raw, 5) &&
            rio_write_u32(&w, 99));
    REQUIRE(w.n_done == STREAM_SIZE);
    return w.n_done;
}

/* Reads the whole stream; the outputs keep their sentinels when a read fails. */
struct stream_values {
    uint32_t magic;
    int32_t i;
    uint64_t big;
    unsigned char raw[5];
    uint32_t last;
};

static bool read_stream(struct rio_reader *r, struct stream_values *v) {
    return rio_read_u32(r, &v->magic) && rio_read_i32(r, &v->i) && rio_read_u64(r, &v->big) &&
           rio_read(r, v->raw, 5) && rio_read_u32(r, &v->last);
}

static void init_sentinels(struct stream_values *v) {
    v->magic = 0xaaaaaaaau;
    v->i = 0x55555555;
    v->big = 0xaaaaaaaaaaaaaaaaull;
    memset(v->raw, 0xaa, sizeof v->raw);
    v->last = 0xaaaaaaaau;
}

static bool stream_values_ok(const struct stream_values *v) {
    return v->magic == 0x4d454d52u && v->i == -7 && v->big == 0x1122334455667788ull &&
           memcmp(v->raw, "hello", 5) == 0 && v->last == 99;
}

/* Cut the stream at byte `cut` and check the failure: where, how many bytes were missing, the
 * values read before it intact and the failing one untouched, then stickiness. */
static void check_truncated(struct rio_reader *r, size_t cut, const char *kind) {
    struct stream_values v;
    init_sentinels(&v);
    rcore_error_clear();
    bool ok = read_stream(r, &v);
    CHECK_MSG(!ok, "%s cut at %zu: read succeeded", kind, cut);
    CHECK(r->failed);

    /* the read that fails is the first one that ends past the cut */
    size_t start = 0, end = 0;
    for (size_t k = 0; k < sizeof stream_ends / sizeof stream_ends[0]; k++) {
        end = stream_ends[k];
        if (end > cut) break;
        start = end;
    }
    char want[128];
    snprintf(want, sizeof want, "stream ends at byte %zu, %zu more bytes were needed", cut,
             end - cut);
    CHECK_MSG(strstr(rcore_error_get(), want) != NULL, "%s cut at %zu: error \"%s\", wanted \"%s\"",
              kind, cut, rcore_error_get(), want);
    CHECK_MSG(r->n_done == start, "%s cut at %zu: n_done %zu, wanted %zu", kind, cut, r->n_done,
              start);

    /* values fully before the cut arrived; integers that did not are untouched, even a u64
     * whose low half was there */
    if (cut >= 4) CHECK(v.magic == 0x4d454d52u);
    if (cut < 4) CHECK(v.magic == 0xaaaaaaaau);
    if (cut >= 8) CHECK(v.i == -7);
    if (cut < 8) CHECK(v.i == 0x55555555);
    if (cut >= 16) CHECK(v.big == 0x1122334455667788ull);
    if (cut < 16) CHECK(v.big == 0xaaaaaaaaaaaaaaaaull);
    CHECK(v.last == 0xaaaaaaaau);

    /* sticky: later reads fail at once, even ones the stream could serve, and keep the error */
    rcore_error_set("marker");
    unsigned char byte;
    uint32_t u = 12345;
    CHECK(!rio_read(r, &byte, 0));
    CHECK(!rio_read_u32(r, &u));
    CHECK(u == 12345);
    CHECK(strcmp(rcore_error_get(), "marker") == 0);
    CHECK(r->n_done == start);
}

static void test_buffer_reader(void) {
    unsigned char buf[STREAM_SIZE];
    size_t n = make_stream(buf);
    struct rio_reader r;
    struct stream_values v;

    rio_reader_buffer(&r, buf, n);
    init_sentinels(&v);
    CHECK(read_stream(&r, &v));
    CHECK(stream_values_ok(&v));
    CHECK(r.n_done == STREAM_SIZE);
    CHECK(!r.failed);
    unsigned char none;
    CHECK(rio_read(&r, &none, 0)); /* zero bytes at the very end is fine */
    rcore_error_clear();
    CHECK(!rio_read(&r, &none, 1));
    CHECK_ERR("stream ends at byte 25, 1 more bytes were needed");

    for (size_t cut = 0; cut < STREAM_SIZE; cut++) {
        /* the bytes after the cut stay in buf: the reader must not look at them */
        rio_reader_buffer(&r, buf, cut);
        check_truncated(&r, cut, "buffer");
    }

    /* a failed raw read hands out nothing */
    unsigned char dst[8];
    memset(dst, 0xcc, sizeof dst);
    rio_reader_buffer(&r, buf, 3);
    CHECK(!rio_read(&r, dst, 8));
    bool untouched = true;
    for (size_t i = 0; i < sizeof dst; i++) untouched = untouched && dst[i] == 0xcc;
    CHECK(untouched);

    /* no buffer is an empty stream */
    rio_reader_buffer(&r, NULL, 100);
    CHECK(rio_read(&r, dst, 0));
    CHECK(!rio_read(&r, dst, 1));
    CHECK_ERR("stream ends at byte 0, 1 more bytes were needed");
}

static void test_file_reader(void) {
    unsigned char buf[STREAM_SIZE];
    size_t n = make_stream(buf);
    struct rio_reader r;
    struct stream_values v;

    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    REQUIRE(fwrite(buf, 1, n, f) == n);
    rewind(f);
    rio_reader_file(&r, f);
    init_sentinels(&v);
    CHECK(read_stream(&r, &v));
    CHECK(stream_values_ok(&v));
    CHECK(r.n_done == STREAM_SIZE);
    unsigned char none;
    CHECK(rio_read(&r, &none, 0));
    rcore_error_clear();
    CHECK(!rio_read(&r, &none, 1));
    CHECK_ERR("stream ends at byte 25, 1 more bytes were needed");
    fclose(f);

    for (size_t cut = 0; cut < STREAM_SIZE; cut++) {
        f = tmpfile();
        REQUIRE(f != NULL);
        REQUIRE(fwrite(buf, 1, cut, f) == cut);
        rewind(f);
        rio_reader_file(&r, f);
        check_truncated(&r, cut, "file");
        fclose(f);
    }

    /* a stream opened for writing only cannot be read: a read error, not a truncation */
    FILE *wo = fopen("/dev/null", "w");
    if (wo) {
        rio_reader_file(&r, wo);
        rcore_error_clear();
        unsigned char dst[4];
        CHECK(!rio_read(&r, dst, 4));
        CHECK(r.failed);
        CHECK_ERR("read error at byte 0");
        fclose(wo);
    }
}

/* ---- digests ---------------------------------------------------------------------------- */

static void test_digest(void) {
    enum { N = 4099 };
    unsigned char *bytes = malloc(N);
    unsigned char *copy = malloc(N);
    unsigned char *out = malloc(N);
    REQUIRE(bytes && copy && out);
    unsigned long long rng = 99;
    for (size_t i = 0; i < N; i++) bytes[i] = (unsigned char)test_rand(&rng);
    const uint64_t want = XXH64(bytes, N, 0);

    /* writer and reader chunk the same bytes differently; the digest does not care */
    struct rio_writer w;
    rio_writer_buffer(&w, copy, N);
    CHECK(rio_writer_digest(&w) == XXH64(bytes, 0, 0));
    size_t off = 0, chunk = 1;
    while (off < N) {
        size_t len = chunk < N - off ? chunk : N - off;
        REQUIRE(rio_write(&w, bytes + off, len));
        off += len;
        chunk = chunk * 3 % 257 + 1;
    }
    CHECK(rio_writer_digest(&w) == want);
    CHECK(rio_writer_digest(&w) == want); /* reading the digest does not consume it */

    FILE *f = tmpfile();
    REQUIRE(f != NULL);
    struct rio_writer fw;
    rio_writer_file(&fw, f);
    REQUIRE(rio_write(&fw, bytes, N));
    CHECK(rio_writer_digest(&fw) == want);

    struct rio_reader r;
    rio_reader_buffer(&r, copy, N);
    CHECK(rio_reader_digest(&r) == XXH64(bytes, 0, 0));
    off = 0;
    chunk = 1000;
    while (off < N) {
        size_t len = chunk < N - off ? chunk : N - off;
        REQUIRE(rio_read(&r, out + off, len));
        off += len;
        chunk = chunk / 2 + 1;
    }
    CHECK(memcmp(out, bytes, N) == 0);
    CHECK(rio_reader_digest(&r) == want);
    CHECK(rio_reader_digest(&r) == rio_writer_digest(&w));

    REQUIRE(fflush(f) == 0);
    rewind(f);
    struct rio_reader fr;
    rio_reader_file(&fr, f);
    REQUIRE(rio_read(&fr, out, N));
    CHECK(rio_reader_digest(&fr) == want);
    fclose(f);

    /* reset: the digest covers only what passed after it; n_done keeps counting */
    const size_t cut = 1234;
    rio_writer_buffer(&w, copy, N);
    REQUIRE(rio_write(&w, bytes, cut));
    rio_writer_digest_reset(&w);
    CHECK(rio_writer_digest(&w) == XXH64(bytes, 0, 0));
    REQUIRE(rio_write(&w, bytes + cut, N - cut));
    CHECK(rio_writer_digest(&w) == XXH64(bytes + cut, N - cut, 0));
    CHECK(w.n_done == N);

    rio_reader_buffer(&r, bytes, N);
    REQUIRE(rio_read(&r, out, cut));
    rio_reader_digest_reset(&r);
    REQUIRE(rio_read(&r, out + cut, N - cut));
    CHECK(rio_reader_digest(&r) == XXH64(bytes + cut, N - cut, 0));
    CHECK(r.n_done == N);

    /* the integer helpers hash the encoded little-endian bytes */
    unsigned char ints[16];
    rio_writer_buffer(&w, ints, sizeof ints);
    REQUIRE(rio_write_u32(&w, 0x01020304u) && rio_write_i32(&w, -1) && rio_write_u64(&w, 5));
    const unsigned char ints_le[16] = {4, 3, 2, 1, 0xff, 0xff, 0xff, 0xff, 5, 0, 0, 0, 0, 0, 0, 0};
    CHECK(rio_writer_digest(&w) == XXH64(ints_le, sizeof ints_le, 0));
    rio_reader_buffer(&r, ints_le, sizeof ints_le);
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    REQUIRE(rio_read_u32(&r, &u32) && rio_read_i32(&r, &i32) && rio_read_u64(&r, &u64));
    CHECK(rio_reader_digest(&r) == XXH64(ints_le, sizeof ints_le, 0));

    /* a refused write or read adds nothing to the digest */
    rio_writer_buffer(&w, copy, 100);
    REQUIRE(rio_write(&w, bytes, 60));
    CHECK(!rio_write(&w, bytes + 60, 41));
    CHECK(rio_writer_digest(&w) == XXH64(bytes, 60, 0));
    rio_reader_buffer(&r, bytes, 100);
    REQUIRE(rio_read(&r, out, 60));
    CHECK(!rio_read(&r, out + 60, 41));
    CHECK(rio_reader_digest(&r) == XXH64(bytes, 60, 0));

    free(bytes);
    free(copy);
    free(out);
}

int main(void) {
    RUN(test_buffer_writer_exact_capacity);
    RUN(test_buffer_writer_overflow_in_one_write);
    RUN(test_counter_writer);
    RUN(test_file_writer);
    RUN(test_little_endian);
    RUN(test_buffer_reader);
    RUN(test_file_reader);
    RUN(test_digest);
    return test_finish("test_io");
}
