/*
 * Tests of src/core: the thread-local last error, the log callback, the element types, the
 * f16 / bf16 conversions, checked size arithmetic and the 64-byte aligned allocations.
 *
 * The conversions are checked against references that share no code with core.c: the
 * compiler's own _Float16 where it has one (gcc on x86-64 converts through libgcc or F16C, both
 * round to nearest even), and everywhere a definition in double arithmetic (scale by the
 * quantum, rint, scale back) that works on values, not on bit fields as core.c does.
 */
#include "core/core.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#if defined(__FLT16_MANT_DIG__)
#define HAVE_FLOAT16 1
/* ISO C11 has no _Float16; __extension__ keeps -Wpedantic quiet about the compiler's own. */
__extension__ typedef _Float16 ref_f16;
#else
#define HAVE_FLOAT16 0
#endif

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool half_is_nan(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

static bool bf16_is_nan(uint16_t h) {
    return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_error_set_get_clear(void) {
    rcore_error_clear();
    CHECK(strcmp(rcore_error_get(), "") == 0);

    rcore_error_set("cell %d of %u: %s", 3, 8u, "bad");
    CHECK(strcmp(rcore_error_get(), "cell 3 of 8: bad") == 0);
    CHECK_ERR("of 8");

    /* a later failure replaces the text; it does not append */
    rcore_error_set("second");
    CHECK(strcmp(rcore_error_get(), "second") == 0);

    /* the pointer is documented to stay valid: the same buffer, new text */
    const char *p = rcore_error_get();
    rcore_error_set("third");
    CHECK(p == rcore_error_get());
    CHECK(strcmp(p, "third") == 0);

    rcore_error_clear();
    CHECK(strcmp(rcore_error_get(), "") == 0);
    CHECK(p == rcore_error_get());
}

static void test_error_prefix(void) {
    rcore_error_set("checksum mismatch");
    rcore_error_prefix("cell %d", 3);
    CHECK(strcmp(rcore_error_get(), "cell 3: checksum mismatch") == 0);
    rcore_error_prefix("state file %s", "x.bin");
    CHECK(strcmp(rcore_error_get(), "state file x.bin: cell 3: checksum mismatch") == 0);

    /* prefixing no error still reads sensibly and does not crash */
    rcore_error_clear();
    rcore_error_prefix("outer");
    CHECK(strcmp(rcore_error_get(), "outer: ") == 0);

    /* a prefix that contains the old message's own text must not be mangled by aliasing */
    rcore_error_set("inner");
    rcore_error_prefix("%s", rcore_error_get());
    CHECK(strcmp(rcore_error_get(), "inner: inner") == 0);
    rcore_error_clear();
}

static void test_error_truncation(void) {
    static char big[3 * RCORE_ERROR_MAX];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)('a' + i % 26);
    big[sizeof big - 1] = '\0';

    /* exactly the longest message that fits is kept whole */
    char fits[RCORE_ERROR_MAX];
    memcpy(fits, big, RCORE_ERROR_MAX - 1);
    fits[RCORE_ERROR_MAX - 1] = '\0';
    rcore_error_set("%s", fits);
    CHECK(strlen(rcore_error_get()) == RCORE_ERROR_MAX - 1);
    CHECK(strcmp(rcore_error_get(), fits) == 0);

    /* one more character, and a far longer one, are cut to RCORE_ERROR_MAX-1 plus the NUL */
    rcore_error_set("%sZ", fits);
    CHECK(strlen(rcore_error_get()) == RCORE_ERROR_MAX - 1);
    CHECK(strcmp(rcore_error_get(), fits) == 0);
    rcore_error_set("%s", big);
    CHECK(strlen(rcore_error_get()) == RCORE_ERROR_MAX - 1);
    CHECK(memcmp(rcore_error_get(), big, RCORE_ERROR_MAX - 1) == 0);
    CHECK(rcore_error_get()[RCORE_ERROR_MAX - 1] == '\0');

    /* a prefix that overflows keeps the prefix and as much of the old text as fits */
    rcore_error_set("%s", big);
    rcore_error_prefix("outer");
    const char *e = rcore_error_get();
    CHECK(strlen(e) == RCORE_ERROR_MAX - 1);
    CHECK(strncmp(e, "outer: ", 7) == 0);
    CHECK(memcmp(e + 7, big, RCORE_ERROR_MAX - 1 - 7) == 0);

    /* an over-long prefix alone is cut as well */
    rcore_error_set("inner");
    rcore_error_prefix("%s", big);
    CHECK(strlen(rcore_error_get()) == RCORE_ERROR_MAX - 1);
    CHECK(memcmp(rcore_error_get(), big, RCORE_ERROR_MAX - 1) == 0);
    rcore_error_clear();
}

struct thread_result {
    char seen_at_start[RCORE_ERROR_MAX];
    char seen_after_set[RCORE_ERROR_MAX];
    char seen_after_prefix[RCORE_ERROR_MAX];
};

static void *error_thread(void *arg) {
    struct thread_result *res = arg;
    snprintf(res->seen_at_start, sizeof res->seen_at_start, "%s", rcore_error_get());
    rcore_error_set("thread message %d", 2);
    snprintf(res->seen_after_set, sizeof res->seen_after_set, "%s", rcore_error_get());
    rcore_error_prefix("in thread");
    snprintf(res->seen_after_prefix, sizeof res->seen_after_prefix, "%s", rcore_error_get());
    return NULL;
}

static void test_error_thread_local(void) {
    rcore_error_set("main message");
    struct thread_result res;
    memset(&res, 0, sizeof res);
    pthread_t th;
    int rc = pthread_create(&th, NULL, error_thread, &res);
    REQUIRE(rc == 0);
    REQUIRE(pthread_join(th, NULL) == 0);

    CHECK_MSG(strcmp(res.seen_at_start, "") == 0, "new thread saw \"%s\"", res.seen_at_start);
    CHECK(strcmp(res.seen_after_set, "thread message 2") == 0);
    CHECK(strcmp(res.seen_after_prefix, "in thread: thread message 2") == 0);
    /* the other thread's failure did not touch this thread's text */
    CHECK(strcmp(rcore_error_get(), "main message") == 0);
    rcore_error_clear();
}

/* ---- logging ---------------------------------------------------------------------------- */

struct log_record {
    int calls;
    enum rcore_log_level level;
    char text[2048];
    void *user;
};

static void log_capture(enum rcore_log_level level, const char *text, void *user) {
    struct log_record *rec = user;
    rec->calls++;
    rec->level = level;
    rec->user = user;
    snprintf(rec->text, sizeof rec->text, "%s", text);
}

/* Runs rcore_log through the default sink with fd 2 pointed at a temporary file, and returns
 * what reached it (the default is documented to print warnings and errors only). */
static void log_default_output(char *out, size_t cap) {
    out[0] = '\0';
    FILE *tmp = tmpfile();
    REQUIRE(tmp != NULL);
    fflush(stderr);
    int saved = dup(2);
    REQUIRE(saved >= 0);
    REQUIRE(dup2(fileno(tmp), 2) >= 0);
    rcore_log(RCORE_LOG_DEBUG, "debug-line\n");
    rcore_log(RCORE_LOG_INFO, "info-line\n");
    rcore_log(RCORE_LOG_WARN, "warn-line %d\n", 7);
    rcore_log(RCORE_LOG_ERROR, "error-line\n");
    fflush(stderr);
    REQUIRE(dup2(saved, 2) >= 0);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
}

static void test_log(void) {
    struct log_record rec;
    memset(&rec, 0, sizeof rec);
    rcore_log_set(log_capture, &rec);

    rcore_log(RCORE_LOG_INFO, "loaded %d layers from %s", 24, "m.gguf");
    CHECK(rec.calls == 1);
    CHECK(rec.level == RCORE_LOG_INFO);
    CHECK(strcmp(rec.text, "loaded 24 layers from m.gguf") == 0);
    CHECK(rec.user == &rec);

    /* every level reaches a callback, debug included: filtering is the callback's business */
    const enum rcore_log_level levels[] = {RCORE_LOG_DEBUG, RCORE_LOG_INFO, RCORE_LOG_WARN,
                                           RCORE_LOG_ERROR};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        rcore_log(levels[i], "level %zu", i);
        CHECK(rec.level == levels[i]);
        char want[32];
        snprintf(want, sizeof want, "level %zu", i);
        CHECK(strcmp(rec.text, want) == 0);
    }
    CHECK(rec.calls == 5);

    /* a message longer than the log's buffer is cut, never overflowed */
    static char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    rcore_log(RCORE_LOG_WARN, "%s", big);
    CHECK(rec.calls == 6);
    CHECK(strlen(rec.text) > 0 && strlen(rec.text) < sizeof big - 1);
    CHECK(strspn(rec.text, "x") == strlen(rec.text));

    /* NULL restores the default: the callback is no longer called, and warnings and errors
     * (only those) go to stderr */
    rcore_log_set(NULL, &rec);
    char out[512];
    log_default_output(out, sizeof out);
    CHECK(rec.calls == 6);
    CHECK_MSG(strstr(out, "warn-line 7\n") != NULL, "stderr got \"%s\"", out);
    CHECK(strstr(out, "error-line\n") != NULL);
    CHECK(strstr(out, "info-line") == NULL);
    CHECK(strstr(out, "debug-line") == NULL);
}

/* ---- element types ---------------------------------------------------------------------- */

static void test_types(void) {
    /* the values are written into state streams */
    CHECK(RCORE_TYPE_F32 == 0);
    CHECK(RCORE_TYPE_F16 == 1);
    CHECK(RCORE_TYPE_BF16 == 2);

    CHECK(rcore_type_valid(RCORE_TYPE_F32));
    CHECK(rcore_type_valid(RCORE_TYPE_F16));
    CHECK(rcore_type_valid(RCORE_TYPE_BF16));
    CHECK(!rcore_type_valid(RCORE_TYPE_COUNT));
    CHECK(!rcore_type_valid(-1));
    CHECK(!rcore_type_valid(3));
    CHECK(!rcore_type_valid(INT_MAX));
    CHECK(!rcore_type_valid(INT_MIN));

    CHECK(rcore_type_size(RCORE_TYPE_F32) == 4);
    CHECK(rcore_type_size(RCORE_TYPE_F16) == 2);
    CHECK(rcore_type_size(RCORE_TYPE_BF16) == 2);
    CHECK(rcore_type_size(RCORE_TYPE_COUNT) == 0);
    CHECK(rcore_type_size((enum rcore_type) - 1) == 0);

    CHECK(strcmp(rcore_type_name(RCORE_TYPE_F32), "f32") == 0);
    CHECK(strcmp(rcore_type_name(RCORE_TYPE_F16), "f16") == 0);
    CHECK(strcmp(rcore_type_name(RCORE_TYPE_BF16), "bf16") == 0);
    CHECK(strcmp(rcore_type_name(RCORE_TYPE_COUNT), "?") == 0);
    CHECK(strcmp(rcore_type_name((enum rcore_type) - 1), "?") == 0);
}

/* ---- references ------------------------------------------------------------------------- */

/* binary16 value of h by its definition: (-1)^s * m * 2^(e-25) with the implicit bit, or
 * m * 2^-24 for subnormals. NaNs come back as a NaN of the same sign. */
static double ref_half_value(uint16_t h) {
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    if (e == 0x1f) return m ? copysign(NAN, sign) : sign * INFINITY;
    if (e == 0) return sign * ldexp(m, -24);
    return sign * ldexp(1024 + m, e - 25);
}

/* Nearest binary16 of f, ties to even, from values: the quantum at |f| is 2^(E-10) for
 * exponent E (2^-24 below the normal range), rint() rounds |f|/quantum to the nearest even
 * integer, and the encoding is read back from the rounded value. NaN gives 0x7e00. */
static uint16_t ref_float_to_half(float f) {
    if (isnan(f)) return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a == 0.0) return sign;
    if (isinf(a)) return sign | 0x7c00;
    int e;
    (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): binary exponent E = e - 1 */
    double q = ldexp(1.0, (e < -13 ? -13 : e) - 11);
    double r = rint(a / q) * q; /* a/q is exact: q is a power of two */
    if (r >= 65536.0) return sign | 0x7c00;
    if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r / ldexp(1.0, -24));
    (void)frexp(r, &e);
    int E = e - 1;
    double frac = r / ldexp(1.0, E) - 1.0; /* in [0, 1), a multiple of 2^-10 */
    return sign | (uint16_t)((E + 15) << 10) | (uint16_t)(frac * 1024.0);
}

/* Nearest bfloat16 of f, ties to even, by the same value arithmetic: bf16 keeps 8 significant
 * bits and float's exponent range, so the quantum is 2^(E-7) (2^-133 below 2^-126). The bits
 * are then the top half of the rounded value's float bits, whose low half must be zero. */
static uint16_t ref_float_to_bf16(float f) {
    if (isnan(f)) return 0x7fc0;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a == 0.0) return sign;
    if (isinf(a)) return sign | 0x7f80;
    int e;
    (void)frexp(a, &e);
    double q = ldexp(1.0, (e < -125 ? -125 : e) - 8);
    double r = rint(a / q) * q;
    if (r >= ldexp(1.0, 128)) return sign | 0x7f80;
    uint32_t u = bits_of((float)r);
    REQUIRE((u & 0xffffu) == 0);
    return sign | (uint16_t)(u >> 16);
}

/* Every float bit pattern on a stride that is prime and odd, so all exponents, both signs and
 * all low mantissa bits are visited: ~4.3 million samples. */
#define F32_STRIDE 997u

/* The floats where rounding to a 16-bit type can go wrong: each representable value, the tie
 * halfway to its upper neighbour, and the floats one ulp either side of both. */
static size_t rounding_probes(float lo, float hi, float *out) {
    double mid = ((double)lo + (double)hi) / 2.0; /* exact: 12 or 9 significant bits */
    float m = (float)mid;
    size_t n = 0;
    out[n++] = lo;
    out[n++] = nextafterf(lo, -INFINITY);
    out[n++] = nextafterf(lo, INFINITY);
    out[n++] = m;
    out[n++] = nextafterf(m, -INFINITY);
    out[n++] = nextafterf(m, INFINITY);
    return n;
}

/* ---- f16 -------------------------------------------------------------------------------- */

static void test_f16_to_f32_all(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float got = rcore_f16_to_f32(h);
        double want = ref_half_value(h);
        bool ok;
        if (half_is_nan(h))
            ok = isnan(got) && !signbit(got) == !(h & 0x8000u);
        else
            ok = (double)got == want && !signbit(got) == !signbit(want);
#if HAVE_FLOAT16
        ref_f16 hf;
        memcpy(&hf, &h, sizeof hf);
        float cf = (float)hf;
        if (half_is_nan(h))
            ok = ok && isnan(cf);
        else
            ok = ok && bits_of(got) == bits_of(cf);
#endif
        if (!ok && bad++ < 10)
            CHECK_MSG(ok, "half 0x%04x -> float 0x%08x (%g)", (unsigned)h, (unsigned)bits_of(got),
                      (double)got);
    }
    CHECK_MSG(bad == 0, "%d of 65536 half patterns convert wrongly", bad);
}

/* Checks one float against every f16 reference available; counts and reports mismatches. */
static void check_f32_to_f16(float f, int *bad) {
    uint16_t got = rcore_f32_to_f16(f);
    bool ok;
    if (isnan(f)) {
        ok = half_is_nan(got);
    } else {
        ok = got == ref_float_to_half(f);
#if HAVE_FLOAT16
        ref_f16 hf = (ref_f16)f;
        uint16_t want;
        memcpy(&want, &hf, sizeof want);
        ok = ok && got == want;
#endif
    }
    if (!ok && (*bad)++ < 10)
        CHECK_MSG(ok, "float 0x%08x (%.9g) -> half 0x%04x, reference 0x%04x", (unsigned)bits_of(f),
                  (double)f, (unsigned)got, (unsigned)ref_float_to_half(f));
}

static void test_f32_to_f16_sampled(void) {
    int bad = 0;
    uint64_t n = 0;
    for (uint64_t u = 0; u <= UINT32_MAX; u += F32_STRIDE, n++)
        check_f32_to_f16(float_of((uint32_t)u), &bad);
    /* the ends and the specials the stride may miss */
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0xffc00001u, 0x7fffffffu,
                                0x33000000u, 0x33000001u, 0x32ffffffu, 0x33800000u, 0x477ff000u,
                                0x477fefffu, 0x477fe000u, 0x47800000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_f32_to_f16(float_of(special[i]), &bad);
    CHECK_MSG(bad == 0, "%d of %llu sampled floats convert wrongly", bad, (unsigned long long)n);
    /* NaN payloads that sit only in the bits the conversion drops must not turn into inf */
    CHECK(half_is_nan(rcore_f32_to_f16(float_of(0x7f800001u))));
    CHECK(half_is_nan(rcore_f32_to_f16(float_of(0xff801000u))));
}

static void test_f32_to_f16_ties(void) {
    int bad = 0;
    float probes[6];
    /* every finite non-negative half value and its upper neighbour (65536 past the largest) */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        float lo = (float)ref_half_value((uint16_t)h);
        float hi = h + 1 < 0x7c00u ? (float)ref_half_value((uint16_t)(h + 1)) : 65536.0f;
        size_t n = rounding_probes(lo, hi, probes);
        for (size_t i = 0; i < n; i++) {
            check_f32_to_f16(probes[i], &bad);
            check_f32_to_f16(-probes[i], &bad);
        }
        /* the tie itself, stated without any reference: to the even neighbour */
        uint16_t tie = rcore_f32_to_f16(probes[3]);
        uint16_t even = (uint16_t)((h & 1u) ? h + 1 : h);
        if (tie != even && bad++ < 10)
            CHECK_MSG(tie == even, "tie above half 0x%04x went to 0x%04x", (unsigned)h,
                      (unsigned)tie);
    }
    CHECK_MSG(bad == 0, "%d rounding probes convert wrongly", bad);

    /* the named edges */
    CHECK(rcore_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(rcore_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(rcore_f32_to_f16(65520.0f) == 0x7c00); /* tie to even past the top is inf */
    CHECK(rcore_f32_to_f16(-65520.0f) == 0xfc00);
    CHECK(rcore_f32_to_f16(1e10f) == 0x7c00);
    CHECK(rcore_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);
    CHECK(rcore_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000); /* tie between 0 and 2^-24 */
    CHECK(rcore_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(rcore_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002); /* tie between 1 and 2: even */
    CHECK(rcore_f32_to_f16(-ldexpf(1.0f, -26)) == 0x8000);
    CHECK(rcore_f32_to_f16(ldexpf(1.0f, -14)) == 0x0400);
    CHECK(rcore_f32_to_f16(ldexpf(1023.5f, -24)) == 0x0400); /* rounds up into normals */
    CHECK(rcore_f32_to_f16(1.0f) == 0x3c00);
    CHECK(rcore_f32_to_f16(-2.0f) == 0xc000);
    CHECK(rcore_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00); /* tie, 1.0 is even */
    CHECK(rcore_f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3c02); /* tie, up to even */
    CHECK(rcore_f32_to_f16(2.0f - ldexpf(1.0f, -12)) == 0x4000); /* carry into exponent */
}

static void test_f16_round_trip_all(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint16_t back = rcore_f32_to_f16(rcore_f16_to_f32(h));
        bool ok = half_is_nan(h) ? half_is_nan(back) : back == h;
        if (!ok && bad++ < 10)
            CHECK_MSG(ok, "half 0x%04x came back as 0x%04x", (unsigned)h, (unsigned)back);
    }
    CHECK_MSG(bad == 0, "%d of 65536 half patterns do not round-trip", bad);
}

/* ---- bf16 ------------------------------------------------------------------------------- */

static void test_bf16_all(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = rcore_bf16_to_f32(h);
        bool ok = bits_of(f) == i << 16; /* bf16 is the top half of a float, by definition */
        uint16_t back = rcore_f32_to_bf16(f);
        if (bf16_is_nan(h))
            ok = ok && bf16_is_nan(back) && (back & 0x40u) && (back & 0x8000u) == (h & 0x8000u);
        else
            ok = ok && back == h;
        if (!ok && bad++ < 10)
            CHECK_MSG(ok, "bf16 0x%04x -> float 0x%08x -> 0x%04x", (unsigned)h,
                      (unsigned)bits_of(f), (unsigned)back);
    }
    CHECK_MSG(bad == 0, "%d of 65536 bf16 patterns do not round-trip", bad);
}

static void check_f32_to_bf16(float f, int *bad) {
    uint16_t got = rcore_f32_to_bf16(f);
    bool ok = isnan(f) ? bf16_is_nan(got) && (got & 0x40u) : got == ref_float_to_bf16(f);
    if (!ok && (*bad)++ < 10)
        CHECK_MSG(ok, "float 0x%08x (%.9g) -> bf16 0x%04x, reference 0x%04x", (unsigned)bits_of(f),
                  (double)f, (unsigned)got, (unsigned)ref_float_to_bf16(f));
}

static void test_f32_to_bf16_sampled(void) {
    int bad = 0;
    for (uint64_t u = 0; u <= UINT32_MAX; u += F32_STRIDE)
        check_f32_to_bf16(float_of((uint32_t)u), &bad);
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00008001u,
                                0x00018000u, 0x007fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu,
                                0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7f80ffffu,
                                0xff810000u, 0x7fc00000u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        check_f32_to_bf16(float_of(special[i]), &bad);
    CHECK_MSG(bad == 0, "%d sampled floats convert to bf16 wrongly", bad);
    /* a NaN whose payload lies only in the dropped half must stay a NaN, not become inf */
    CHECK(bf16_is_nan(rcore_f32_to_bf16(float_of(0x7f800001u))));
    CHECK(bf16_is_nan(rcore_f32_to_bf16(float_of(0xff80ffffu))));
}

static void test_f32_to_bf16_ties(void) {
    int bad = 0;
    float probes[6];
    for (uint32_t h = 0; h < 0x7f80u; h++) {
        float lo = float_of(h << 16);
        /* the upper neighbour of the largest finite bf16 is 2^128, which float cannot hold;
         * the tie and its neighbours are then built from bits instead */
        if (h + 1 < 0x7f80u) {
            size_t n = rounding_probes(lo, float_of((h + 1) << 16), probes);
            for (size_t i = 0; i < n; i++) {
                check_f32_to_bf16(probes[i], &bad);
                check_f32_to_bf16(-probes[i], &bad);
            }
        }
        uint32_t tie_bits = (h << 16) | 0x8000u;
        check_f32_to_bf16(float_of(tie_bits), &bad);
        check_f32_to_bf16(float_of(tie_bits - 1), &bad);
        check_f32_to_bf16(float_of(tie_bits + 1), &bad);
        /* the rule itself, with no reference: a tie goes to the even neighbour, below the tie
         * down, above it up */
        uint16_t even = (uint16_t)((h & 1u) ? h + 1 : h);
        bool ok = rcore_f32_to_bf16(float_of(tie_bits)) == even &&
                  rcore_f32_to_bf16(float_of(tie_bits - 1)) == h &&
                  rcore_f32_to_bf16(float_of(tie_bits + 1)) == h + 1 &&
                  rcore_f32_to_bf16(float_of(tie_bits | 0x80000000u)) == (even | 0x8000u);
        if (!ok && bad++ < 10) CHECK_MSG(ok, "ties above bf16 0x%04x round wrongly", (unsigned)h);
    }
    CHECK_MSG(bad == 0, "%d bf16 rounding probes convert wrongly", bad);

    CHECK(rcore_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(rcore_f32_to_bf16(float_of(0x3f808000u)) == 0x3f80); /* tie, 0x3f80 even */
    CHECK(rcore_f32_to_bf16(float_of(0x3f818000u)) == 0x3f82); /* tie, up to even */
    CHECK(rcore_f32_to_bf16(FLT_MAX) == 0x7f80);               /* rounds up past the top */
    CHECK(rcore_f32_to_bf16(-FLT_MAX) == 0xff80);
    CHECK(rcore_f32_to_bf16(float_of(0x7f7f7fffu)) == 0x7f7f);
}

/* ---- rows ------------------------------------------------------------------------------- */

static void test_rows(void) {
    float src[40];
    unsigned long long rng = 42;
    for (size_t i = 0; i < 30; i++)
        src[i] = (float)((double)(test_rand(&rng) % 2000001) / 1000.0 - 1000.0);
    src[30] = 0.0f;
    src[31] = -0.0f;
    src[32] = INFINITY;
    src[33] = -INFINITY;
    src[34] = NAN;
    src[35] = 65520.0f;
    src[36] = 1e-8f;
    src[37] = FLT_MAX;
    src[38] = float_of(0x3f808000u);
    src[39] = float_of(0x00000001u);
    const size_t n = sizeof src / sizeof src[0];

    const enum rcore_type types[] = {RCORE_TYPE_F32, RCORE_TYPE_F16, RCORE_TYPE_BF16};
    for (size_t t = 0; t < 3; t++) {
        enum rcore_type type = types[t];
        size_t es = rcore_type_size(type);
        /* one guard element past the row catches a write beyond n */
        unsigned char row[(sizeof src / sizeof src[0] + 1) * 4];
        memset(row, 0xa5, sizeof row);
        rcore_row_from_f32(type, row, src, n);
        bool guard_ok = true;
        for (size_t b = n * es; b < sizeof row; b++) guard_ok = guard_ok && row[b] == 0xa5;
        CHECK_MSG(guard_ok, "%s: row_from_f32 wrote past n", rcore_type_name(type));

        float back[sizeof src / sizeof src[0] + 1];
        back[n] = 12345.0f;
        rcore_row_to_f32(type, back, row, n);
        CHECK_MSG(back[n] == 12345.0f, "%s: row_to_f32 wrote past n", rcore_type_name(type));

        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want_back;
            if (type == RCORE_TYPE_F32) {
                float stored;
                memcpy(&stored, row + i * 4, 4);
                want_back = src[i];
                if (bits_of(stored) != bits_of(src[i])) bad++;
            } else {
                uint16_t h;
                memcpy(&h, row + i * 2, 2);
                uint16_t want =
                    type == RCORE_TYPE_F16 ? rcore_f32_to_f16(src[i]) : rcore_f32_to_bf16(src[i]);
                if (h != want) bad++;
                want_back = type == RCORE_TYPE_F16 ? rcore_f16_to_f32(h) : rcore_bf16_to_f32(h);
            }
            if (bits_of(back[i]) != bits_of(want_back)) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d row elements differ from the scalar conversions",
                  rcore_type_name(type), bad);

        /* n = 0 touches nothing */
        memset(row, 0x5a, sizeof row);
        rcore_row_from_f32(type, row, src, 0);
        CHECK(row[0] == 0x5a && row[1] == 0x5a);
        back[0] = 7.0f;
        rcore_row_to_f32(type, back, row, 0);
        CHECK(back[0] == 7.0f);
    }
}

/* ---- checked arithmetic ------------------------------------------------------------------ */

static void test_checked_arithmetic(void) {
    size_t out = 77;
    CHECK(rcore_mul_size(0, SIZE_MAX, &out) && out == 0);
    CHECK(rcore_mul_size(SIZE_MAX, 0, &out) && out == 0);
    CHECK(rcore_mul_size(SIZE_MAX, 1, &out) && out == SIZE_MAX);
    CHECK(rcore_mul_size(1, SIZE_MAX, &out) && out == SIZE_MAX);
    CHECK(rcore_mul_size(SIZE_MAX / 2, 2, &out) && out == SIZE_MAX - 1);
    CHECK(rcore_mul_size(SIZE_MAX / 3, 3, &out) && out == SIZE_MAX); /* 2^n - 1 divides by 3 */

    out = 77;
    CHECK(!rcore_mul_size(SIZE_MAX / 2 + 1, 2, &out) && out == 77);
    CHECK(!rcore_mul_size(2, SIZE_MAX / 2 + 1, &out) && out == 77);
    CHECK(!rcore_mul_size(SIZE_MAX, SIZE_MAX, &out) && out == 77);
    CHECK(!rcore_mul_size(SIZE_MAX / 3 + 1, 3, &out) && out == 77);
    /* the shape a row size calculation meets: 2^(w/2) squared just overflows */
    size_t half_width = (size_t)1 << (sizeof(size_t) * CHAR_BIT / 2);
    CHECK(!rcore_mul_size(half_width, half_width, &out) && out == 77);
    CHECK(rcore_mul_size(half_width, half_width - 1, &out) && out == half_width * (half_width - 1));

    out = 77;
    CHECK(rcore_add_size(SIZE_MAX, 0, &out) && out == SIZE_MAX);
    CHECK(rcore_add_size(0, SIZE_MAX, &out) && out == SIZE_MAX);
    CHECK(rcore_add_size(SIZE_MAX - 5, 5, &out) && out == SIZE_MAX);
    CHECK(rcore_add_size(0, 0, &out) && out == 0);
    out = 77;
    CHECK(!rcore_add_size(SIZE_MAX, 1, &out) && out == 77);
    CHECK(!rcore_add_size(1, SIZE_MAX, &out) && out == 77);
    CHECK(!rcore_add_size(SIZE_MAX - 5, 6, &out) && out == 77);
    CHECK(!rcore_add_size(SIZE_MAX, SIZE_MAX, &out) && out == 77);
}

/* ---- aligned memory --------------------------------------------------------------------- */

static void test_alloc64(void) {
    /* many sizes, so that malloc's own offsets (16 bytes past a page for the large blocks it
       maps, anything for the small) are all met: every block on a 64-byte line, usable to its
       last byte, zeroed when asked for, and each freed without a complaint (ASan/valgrind) */
    const size_t sizes[] = {0, 1, 15, 16, 63, 64, 65, 100, 4095, 4096, 131071, 1u << 20, 5u << 20};
    void *kept[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = rcore_alloc64(sizes[i], i % 2 == 0);
        kept[i] = p;
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(((uintptr_t)p & 63) == 0);
        bool zero = true;
        for (size_t b = 0; i % 2 == 0 && b < sizes[i]; b++) zero &= p[b] == 0;
        CHECK(zero);
        if (sizes[i]) memset(p, 0xa5, sizes[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) rcore_free64(kept[i]);
    /* sizes the padding would overflow: NULL, not a short block */
    CHECK(rcore_alloc64(SIZE_MAX, false) == NULL);
    CHECK(rcore_alloc64(SIZE_MAX - 32, true) == NULL);
    rcore_free64(NULL);
}

int main(void) {
    RUN(test_error_set_get_clear);
    RUN(test_error_prefix);
    RUN(test_error_truncation);
    RUN(test_error_thread_local);
    RUN(test_log);
    RUN(test_types);
    RUN(test_f16_to_f32_all);
    RUN(test_f32_to_f16_sampled);
    RUN(test_f32_to_f16_ties);
    RUN(test_f16_round_trip_all);
    RUN(test_bf16_all);
    RUN(test_f32_to_bf16_sampled);
    RUN(test_f32_to_bf16_ties);
    RUN(test_rows);
    RUN(test_checked_arithmetic);
    RUN(test_alloc64);
    if (!HAVE_FLOAT16)
        printf("test_core: this compiler has no _Float16; f16 checked against the arithmetic "
               "reference only\n");
    return test_finish("test_core");
}
