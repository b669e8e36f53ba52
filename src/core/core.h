/*
 * core: what every module of recur shares and nothing more.
 *
 *  - the thread-local last error: every failing internal function sets it with a message
 *    that names the exact thing that is wrong, and the public API hands it out through
 *    recur_last_error();
 *  - the log callback (the only other mutable global);
 *  - element types for states and weights, with their sizes and conversions.
 *
 * Nothing here allocates except rcore_error_set (a fixed thread-local buffer, never heap).
 */
#ifndef RECUR_CORE_H
#define RECUR_CORE_H

/* 1 in libFuzzer builds (the fuzzing engines' standard macro): checksums are computed but a
 * mismatch is not refused, so that the fuzzer reaches the parsers behind them. Never set in
 * a build for use. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define RCORE_FUZZING 1
#else
#define RCORE_FUZZING 0
#endif

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define RCORE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RCORE_PRINTF(a, b)
#endif

/* ---- errors ----------------------------------------------------------------------------- */

/* Longest message kept; longer ones are cut (never overflow). */
#define RCORE_ERROR_MAX 512

/* Sets this thread's last error (printf format). Returns nothing; callers return their own
 * failure value right after. */
void rcore_error_set(const char *fmt, ...) RCORE_PRINTF(1, 2);

/* Prepends "prefix: " to the current message, so that an outer layer can say where an inner
 * failure happened ("state file x.bin: cell 3: ...") without losing the inner reason. */
void rcore_error_prefix(const char *fmt, ...) RCORE_PRINTF(1, 2);

/* This thread's last error; "" when none was set. The pointer stays valid for the thread's
 * life; the text changes with the next failure. */
const char *rcore_error_get(void);

void rcore_error_clear(void);

/* ---- logging ---------------------------------------------------------------------------- */

enum rcore_log_level { RCORE_LOG_DEBUG = 0, RCORE_LOG_INFO, RCORE_LOG_WARN, RCORE_LOG_ERROR };

typedef void (*rcore_log_fn)(enum rcore_log_level level, const char *text, void *user);

/* Installs the log callback for the whole process; NULL restores the default (warnings and
 * errors to stderr). Not thread-safe against concurrent rcore_log calls: set it once at
 * start-up, as with llama_log_set. */
void rcore_log_set(rcore_log_fn fn, void *user);
void rcore_log(enum rcore_log_level level, const char *fmt, ...) RCORE_PRINTF(2, 3);

/* ---- element types ---------------------------------------------------------------------- */

/* The values are those of the public enum recur_type and are written into state streams:
 * never renumber them. */
enum rcore_type { RCORE_TYPE_F32 = 0, RCORE_TYPE_F16 = 1, RCORE_TYPE_BF16 = 2, RCORE_TYPE_COUNT };

bool rcore_type_valid(int type);
/* Bytes per element (the types here are all scalar); 0 for an invalid type. */
size_t rcore_type_size(enum rcore_type type);
/* "f32", "f16", "bf16"; "?" for an invalid type. */
const char *rcore_type_name(enum rcore_type type);

/* IEEE binary16 <-> binary32, round to nearest even, infinities and NaN kept. */
uint16_t rcore_f32_to_f16(float f);
float rcore_f16_to_f32(uint16_t h);
/* bfloat16 <-> binary32, round to nearest even, NaN kept quiet. */
uint16_t rcore_f32_to_bf16(float f);
float rcore_bf16_to_f32(uint16_t h);

/* Converts n elements between f32 and a storage type (dst and src must not overlap). */
void rcore_row_from_f32(enum rcore_type type, void *dst, const float *src, size_t n);
void rcore_row_to_f32(enum rcore_type type, float *dst, const void *src, size_t n);

/* ---- random numbers ------------------------------------------------------------------------ */

/* xoshiro256** seeded through splitmix64: small, fast, and the same stream on every machine,
 * so seeded sampling and generated models are reproducible anywhere. Four successive
 * splitmix64 outputs are distinct, so the state is never the all-zero one xoshiro cannot leave. */
struct rcore_rng {
    uint64_t s[4];
};

void rcore_rng_seed(struct rcore_rng *r, uint64_t seed);
uint64_t rcore_rng_next(struct rcore_rng *r);

/* ---- checked arithmetic ------------------------------------------------------------------ */

/* a*b into *out; false on overflow (then *out is unchanged). */
static inline bool rcore_mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

static inline bool rcore_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return false;
    *out = a + b;
    return true;
}

/* ---- memory the vector kernels stream --------------------------------------------------- */

/* Alignment of rcore_alloc64's memory: a cache line, and one AVX-512 vector, so that no vector
 * load of an array that starts there and steps by whole vectors straddles two lines (an
 * AVX-512 gemv of 4 inputs measured 87 GFLOP/s with its inputs aligned and 59 with them 16
 * bytes off, where glibc's large mallocs put them: bench/RESULTS.md, issue 21). */
#define RCORE_ALIGN 64

/* bytes of memory aligned to RCORE_ALIGN, zero-filled when zero is true (calloc's, so pages
 * never written cost nothing); NULL when it cannot be had or bytes overflows (the caller sets
 * the error). Free it with rcore_free64 only; bytes may be 0. */
void *rcore_alloc64(size_t bytes, bool zero);
/* Frees what rcore_alloc64 returned. NULL is fine. */
void rcore_free64(void *p);

/* bytes of memory aligned to RCORE_ALIGN for a block of megabytes written once and kept
 * (bigmem.c): from 2 MiB on, a mapping of its own advised as transparent huge pages, so that
 * writing it faults once per 2 MiB; smaller, malloc's. Not zero-filled. NULL when it cannot be
 * had or bytes overflows (the caller sets the error). Free it with rcore_free_big only. */
void *rcore_alloc_big(size_t bytes);
/* Frees what rcore_alloc_big returned. NULL is fine. */
void rcore_free_big(void *p);

#endif /* RECUR_CORE_H */
