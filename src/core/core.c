#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ----------------------------------------------------------------------------- */

static _Thread_local char error_text[RCORE_ERROR_MAX];

void rcore_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    va_end(ap);
}

void rcore_error_prefix(const char *fmt, ...) {
    char prefix[RCORE_ERROR_MAX];
    char old[RCORE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_text, sizeof old);
    /* both parts fit here; the result is then cut to the error buffer's size */
    char both[2 * RCORE_ERROR_MAX + 4];
    snprintf(both, sizeof both, "%s: %s", prefix, old);
    size_t n = strlen(both);
    if (n >= sizeof error_text) n = sizeof error_text - 1;
    memcpy(error_text, both, n);
    error_text[n] = '\0';
}

const char *rcore_error_get(void) {
    return error_text;
}

void rcore_error_clear(void) {
    error_text[0] = '\0';
}

/* ---- logging ---------------------------------------------------------------------------- */

static void log_default(enum rcore_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= RCORE_LOG_WARN) fputs(text, stderr);
}

static rcore_log_fn log_fn = log_default;
static void *log_user = NULL;

void rcore_log_set(rcore_log_fn fn, void *user) {
    log_fn = fn ? fn : log_default;
    log_user = fn ? user : NULL;
}

void rcore_log(enum rcore_log_level level, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    log_fn(level, text, log_user);
}

/* ---- element types ---------------------------------------------------------------------- */

bool rcore_type_valid(int type) {
    return type >= 0 && type < RCORE_TYPE_COUNT;
}

size_t rcore_type_size(enum rcore_type type) {
    switch (type) {
    case RCORE_TYPE_F32:
        return 4;
    case RCORE_TYPE_F16:
        return 2;
    case RCORE_TYPE_BF16:
        return 2;
    default:
        return 0;
    }
}

const char *rcore_type_name(enum rcore_type type) {
    switch (type) {
    case RCORE_TYPE_F32:
        return "f32";
    case RCORE_TYPE_F16:
        return "f16";
    case RCORE_TYPE_BF16:
        return "bf16";
    default:
        return "?";
    }
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t rcore_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;

    if (exp == 0xff) /* inf or NaN; keep NaN a NaN */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));

    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */

    if (e <= 0) { /* subnormal half or zero */
        if (e < -10) return sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }

    uint32_t half = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    /* a carry out of the mantissa correctly bumps the exponent (up to inf) */
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
    return (uint16_t)(sign | half);
}

float rcore_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* subnormal: normalise */
        int32_t e = -1;
        do {
            mant <<= 1;
            e++;
        } while (!(mant & 0x400u));
        mant &= 0x3ffu;
        return bits_f32(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
    }
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t rcore_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float rcore_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

void rcore_row_from_f32(enum rcore_type type, void *dst, const float *src, size_t n) {
    if (n == 0) return; /* rows of zero elements may have NULL data */
    switch (type) {
    case RCORE_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case RCORE_TYPE_F16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = rcore_f32_to_f16(src[i]);
        break;
    case RCORE_TYPE_BF16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = rcore_f32_to_bf16(src[i]);
        break;
    default:
        break;
    }
}

void rcore_row_to_f32(enum rcore_type type, float *dst, const void *src, size_t n) {
    if (n == 0) return;
    switch (type) {
    case RCORE_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case RCORE_TYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = rcore_f16_to_f32(((const uint16_t *)src)[i]);
        break;
    case RCORE_TYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = rcore_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    default:
        break;
    }
}

/* ---- random numbers ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void rcore_rng_seed(struct rcore_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t rcore_rng_next(struct rcore_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* ---- memory the vector kernels stream --------------------------------------------------- */

/* The block from malloc / calloc is kept in the pointer-sized word just before the aligned
 * address, which the padding always has room for. */
void *rcore_alloc64(size_t bytes, bool zero) {
    size_t total;
    if (!rcore_add_size(bytes, RCORE_ALIGN + sizeof(void *), &total)) return NULL;
    void *raw = zero ? calloc(1, total) : malloc(total);
    if (!raw) return NULL;
    const uintptr_t at =
        ((uintptr_t)raw + sizeof(void *) + RCORE_ALIGN - 1) & ~(uintptr_t)(RCORE_ALIGN - 1);
    void *p = (void *)at;
    memcpy((char *)p - sizeof(void *), &raw, sizeof raw);
    return p;
}

void rcore_free64(void *p) {
    if (!p) return;
    void *raw;
    memcpy(&raw, (char *)p - sizeof(void *), sizeof raw);
    free(raw);
}
