/*
 * GGUF: type tables, and everything that looks into an opened file (gguf_read.c parses and
 * checks it; gguf_write.c writes files). The lookups by name bsearch the name-sorted tables
 * the reader builds; getters decode the little-endian value bits the reader kept and convert
 * only what fits.
 */
#include "gguf_impl.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core.h"

/* ---- types ------------------------------------------------------------------------------- */

/* The types recur reads: elements and bytes per block (ggml's block layouts). */
static const struct {
    uint32_t block, bytes;
} type_sizes[] = {
    [RGGUF_F32] = {1, 4},      [RGGUF_F16] = {1, 2},      [RGGUF_BF16] = {1, 2},
    [RGGUF_Q4_0] = {32, 18},   [RGGUF_Q4_1] = {32, 20},   [RGGUF_Q5_0] = {32, 22},
    [RGGUF_Q5_1] = {32, 24},   [RGGUF_Q8_0] = {32, 34},   [RGGUF_Q2_K] = {256, 84},
    [RGGUF_Q3_K] = {256, 110}, [RGGUF_Q4_K] = {256, 144}, [RGGUF_Q5_K] = {256, 176},
    [RGGUF_Q6_K] = {256, 210}, [RGGUF_IQ4_NL] = {32, 18}, [RGGUF_IQ4_XS] = {256, 136},
};
#define N_TYPE_SIZES (sizeof type_sizes / sizeof type_sizes[0])

uint32_t rgguf_type_block(uint32_t ttype) {
    return ttype < N_TYPE_SIZES ? type_sizes[ttype].block : 0;
}

uint32_t rgguf_type_block_bytes(uint32_t ttype) {
    return ttype < N_TYPE_SIZES ? type_sizes[ttype].bytes : 0;
}

const char *rgguf_types_supported(void) {
    return "f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl "
           "and iq4_xs";
}

const char *rgguf_type_name(uint32_t ttype) {
    /* ggml's names for every type it has, so that a refused file says what it holds */
    static const char *const names[] = {
        "f32",     "f16",   "q4_0",   "q4_1",  "",      "",       "q5_0", "q5_1",    "q8_0",
        "q8_1",    "q2_K",  "q3_K",   "q4_K",  "q5_K",  "q6_K",   "q8_K", "iq2_xxs", "iq2_xs",
        "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",   "i16",     "i32",
        "i64",     "f64",   "iq1_m",  "bf16",  "",      "",       "",     "tq1_0",   "tq2_0",
        "",        "",      "",       "mxfp4", "nvfp4", "q1_0",
    };
    if (ttype < sizeof names / sizeof names[0] && names[ttype][0]) return names[ttype];
    return "unknown";
}

const char *rgguf_vtype_name(uint32_t vtype) {
    static const char *const names[RGGUF_VTYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return vtype < RGGUF_VTYPE_COUNT ? names[vtype] : "unknown";
}

size_t rgguf_vtype_size(uint32_t vtype) {
    static const unsigned char sizes[RGGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return vtype < RGGUF_VTYPE_COUNT ? sizes[vtype] : 0;
}

bool rgguf_check_tensor(uint32_t type, const int64_t *ne, size_t *nbytes, char *why,
                        size_t why_size) {
    uint32_t block = rgguf_type_block(type);
    if (block == 0) {
        snprintf(why, why_size, "type %" PRIu32 " (%s) is not supported (%s are)", type,
                 rgguf_type_name(type), rgguf_types_supported());
        return false;
    }
    for (int d = 0; d < RGGUF_MAX_DIMS; d++) {
        if (ne[d] < 0) {
            snprintf(why, why_size, "dimension %d is negative (%" PRId64 ")", d, ne[d]);
            return false;
        }
    }
    /* ggml counts elements in int64_t */
    uint64_t elems = 1;
    for (int d = 0; d < RGGUF_MAX_DIMS; d++) {
        uint64_t n = (uint64_t)ne[d];
        if (n != 0 && elems > (uint64_t)INT64_MAX / n) {
            snprintf(why, why_size,
                     "shape {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                     "} has more than 2^63 elements",
                     ne[0], ne[1], ne[2], ne[3]);
            return false;
        }
        elems *= n;
    }
    if (ne[0] % block != 0) {
        snprintf(why, why_size,
                 "dimension 0 (%" PRId64 ") is not a multiple of the %s block "
                 "size %" PRIu32,
                 ne[0], rgguf_type_name(type), block);
        return false;
    }
    size_t bytes = rgguf_type_block_bytes(type);
    bool ok = (uint64_t)ne[0] / block <= SIZE_MAX &&
              rcore_mul_size(bytes, (size_t)((uint64_t)ne[0] / block), &bytes);
    for (int d = 1; ok && d < RGGUF_MAX_DIMS; d++)
        ok = (uint64_t)ne[d] <= SIZE_MAX && rcore_mul_size(bytes, (size_t)ne[d], &bytes);
    if (!ok) {
        snprintf(why, why_size, "size in bytes overflows");
        return false;
    }
    *nbytes = bytes;
    return true;
}

uint32_t rgguf_version(const struct rgguf *g) {
    return g->version;
}

uint32_t rgguf_alignment(const struct rgguf *g) {
    return g->alignment;
}

bool rgguf_is_mapped(const struct rgguf *g) {
    return g->map != NULL;
}

void rgguf_bytes(const struct rgguf *g, const void **base, size_t *size) {
    *base = g->base;
    *size = g->size;
}

/* ---- key-values -------------------------------------------------------------------------- */

int64_t rgguf_n_kv(const struct rgguf *g) {
    return g->n_kv;
}

static int cmp_key_kv(const void *key, const void *elem) {
    return strcmp(key, (*(const struct rgguf_kv *const *)elem)->key);
}

int64_t rgguf_find_key(const struct rgguf *g, const char *key) {
    if (!key || g->n_kv == 0) return -1;
    const struct rgguf_kv *const *hit =
        bsearch(key, g->kv_by_name, (size_t)g->n_kv, sizeof *g->kv_by_name, cmp_key_kv);
    return hit ? *hit - g->kv : -1;
}

const char *rgguf_key_name(const struct rgguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

enum rgguf_vtype rgguf_key_type(const struct rgguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].type : RGGUF_VTYPE_COUNT;
}

static const struct rgguf_kv *get_kv(const struct rgguf *g, const char *key) {
    int64_t i = rgguf_find_key(g, key);
    if (i < 0) {
        rcore_error_set("%s: key %s is missing", g->name, key ? key : "(null)");
        return NULL;
    }
    return &g->kv[i];
}

static const char *article(const char *noun) {
    return noun[0] == 'a' || noun[0] == 'i' ? "an" : "a";
}

static bool wrong_type(const struct rgguf *g, const struct rgguf_kv *kv, const char *expected) {
    const char *t = rgguf_vtype_name(kv->type);
    rcore_error_set("%s: key %s is %s %s, %s was expected", g->name, kv->key, article(t), t,
                    expected);
    return false;
}

static bool is_signed(enum rgguf_vtype t) {
    return t == RGGUF_INT8 || t == RGGUF_INT16 || t == RGGUF_INT32 || t == RGGUF_INT64;
}

/* An integer key's value: *neg tells that it is negative, then *s holds it, else *u does. */
static const struct rgguf_kv *get_int(const struct rgguf *g, const char *key, bool *neg, int64_t *s,
                                      uint64_t *u) {
    const struct rgguf_kv *kv = get_kv(g, key);
    if (!kv) return NULL;
    switch (kv->type) {
    case RGGUF_UINT8:
    case RGGUF_UINT16:
    case RGGUF_UINT32:
    case RGGUF_UINT64:
    case RGGUF_INT8:
    case RGGUF_INT16:
    case RGGUF_INT32:
    case RGGUF_INT64:
        break;
    default:
        wrong_type(g, kv, "an integer");
        return NULL;
    }
    unsigned bits = 8 * (unsigned)rgguf_vtype_size(kv->type);
    uint64_t v = kv->bits;
    *neg = is_signed(kv->type) && (v >> (bits - 1) & 1);
    if (*neg) {
        if (bits < 64) v |= UINT64_MAX << bits; /* sign-extend */
        memcpy(s, &v, sizeof v);
    } else {
        *u = v;
    }
    return kv;
}

static bool out_of_range(const struct rgguf *g, const struct rgguf_kv *kv, bool neg, int64_t s,
                         uint64_t u, const char *type) {
    if (neg)
        rcore_error_set("%s: key %s = %" PRId64 " is out of range for %s", g->name, kv->key, s,
                        type);
    else
        rcore_error_set("%s: key %s = %" PRIu64 " is out of range for %s", g->name, kv->key, u,
                        type);
    return false;
}

bool rgguf_get_u32(const struct rgguf *g, const char *key, uint32_t *out) {
    bool neg;
    int64_t s = 0;
    uint64_t u = 0;
    const struct rgguf_kv *kv = get_int(g, key, &neg, &s, &u);
    if (!kv) return false;
    if (neg || u > UINT32_MAX) return out_of_range(g, kv, neg, s, u, "uint32");
    *out = (uint32_t)u;
    return true;
}

bool rgguf_get_i32(const struct rgguf *g, const char *key, int32_t *out) {
    bool neg;
    int64_t s = 0;
    uint64_t u = 0;
    const struct rgguf_kv *kv = get_int(g, key, &neg, &s, &u);
    if (!kv) return false;
    if (neg ? s < INT32_MIN : u > INT32_MAX) return out_of_range(g, kv, neg, s, u, "int32");
    *out = neg ? (int32_t)s : (int32_t)u;
    return true;
}

bool rgguf_get_u64(const struct rgguf *g, const char *key, uint64_t *out) {
    bool neg;
    int64_t s = 0;
    uint64_t u = 0;
    const struct rgguf_kv *kv = get_int(g, key, &neg, &s, &u);
    if (!kv) return false;
    if (neg) return out_of_range(g, kv, neg, s, u, "uint64");
    *out = u;
    return true;
}

bool rgguf_get_f32(const struct rgguf *g, const char *key, float *out) {
    const struct rgguf_kv *kv = get_kv(g, key);
    if (!kv) return false;
    if (kv->type == RGGUF_FLOAT32) {
        uint32_t b = (uint32_t)kv->bits;
        memcpy(out, &b, sizeof *out);
        return true;
    }
    if (kv->type != RGGUF_FLOAT64) return wrong_type(g, kv, "a float");
    double d;
    memcpy(&d, &kv->bits, sizeof d);
    /* infinities and NaN convert; only a finite double can be out of range */
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX)) {
        rcore_error_set("%s: key %s = %g is out of range for float32", g->name, kv->key, d);
        return false;
    }
    *out = (float)d;
    return true;
}

bool rgguf_get_bool(const struct rgguf *g, const char *key, bool *out) {
    const struct rgguf_kv *kv = get_kv(g, key);
    if (!kv) return false;
    if (kv->type != RGGUF_BOOL) return wrong_type(g, kv, "a bool");
    *out = kv->bits != 0;
    return true;
}

bool rgguf_get_str(const struct rgguf *g, const char *key, const char **out, size_t *len) {
    const struct rgguf_kv *kv = get_kv(g, key);
    if (!kv) return false;
    if (kv->type != RGGUF_STRING) return wrong_type(g, kv, "a string");
    *out = kv->str;
    if (len) *len = kv->str_len;
    return true;
}

static const struct rgguf_kv *get_arr(const struct rgguf *g, const char *key) {
    const struct rgguf_kv *kv = get_kv(g, key);
    if (kv && kv->type != RGGUF_ARRAY) {
        wrong_type(g, kv, "an array");
        return NULL;
    }
    return kv;
}

bool rgguf_get_arr(const struct rgguf *g, const char *key, enum rgguf_vtype *elem_type,
                   uint64_t *n) {
    const struct rgguf_kv *kv = get_arr(g, key);
    if (!kv) return false;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    return true;
}

static bool wrong_elem(const struct rgguf *g, const struct rgguf_kv *kv, enum rgguf_vtype want) {
    rcore_error_set("%s: key %s is an array of %s, an array of %s was expected", g->name, kv->key,
                    rgguf_vtype_name(kv->elem_type), rgguf_vtype_name(want));
    return false;
}

bool rgguf_get_arr_data(const struct rgguf *g, const char *key, enum rgguf_vtype elem_type,
                        const void **data, uint64_t *n) {
    const struct rgguf_kv *kv = get_arr(g, key);
    if (!kv) return false;
    if (kv->elem_type != elem_type) return wrong_elem(g, kv, elem_type);
    if (elem_type == RGGUF_STRING) {
        rcore_error_set("%s: key %s: an array of strings has no packed data (read it with "
                        "rgguf_get_arr_str)",
                        g->name, kv->key);
        return false;
    }
    *data = kv->arr;
    if (n) *n = kv->n;
    return true;
}

bool rgguf_get_arr_str(const struct rgguf *g, const char *key, uint64_t i, const char **out,
                       size_t *len) {
    const struct rgguf_kv *kv = get_arr(g, key);
    if (!kv) return false;
    if (kv->elem_type != RGGUF_STRING) return wrong_elem(g, kv, RGGUF_STRING);
    if (i >= kv->n) {
        rcore_error_set("%s: key %s: index %" PRIu64 " is out of range (%" PRIu64 " strings)",
                        g->name, kv->key, i, kv->n);
        return false;
    }
    *out = kv->strs[i];
    if (len) *len = (size_t)(kv->strs[i + 1] - kv->strs[i]) - 1;
    return true;
}

/* ---- tensors ----------------------------------------------------------------------------- */

int64_t rgguf_n_tensors(const struct rgguf *g) {
    return g->n_tensors;
}

const struct rgguf_tensor *rgguf_tensor(const struct rgguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

static int cmp_name_tensor(const void *name, const void *elem) {
    return strcmp(name, (*(const struct rgguf_tensor *const *)elem)->name);
}

const struct rgguf_tensor *rgguf_find_tensor(const struct rgguf *g, const char *name) {
    if (!name || g->n_tensors == 0) return NULL;
    const struct rgguf_tensor *const *hit = bsearch(name, g->tensor_by_name, (size_t)g->n_tensors,
                                                    sizeof *g->tensor_by_name, cmp_name_tensor);
    return hit ? *hit : NULL;
}

static void shape_text(char *buf, size_t size, uint32_t n_dims, const int64_t *ne) {
    size_t n = 0;
    buf[0] = '\0';
    for (uint32_t d = 0; d < n_dims && n < size; d++) {
        int w = snprintf(buf + n, size - n, "%s%" PRId64, d ? ", " : "{", ne[d]);
        if (w < 0) return;
        n += (size_t)w;
    }
    if (n < size) snprintf(buf + n, size - n, "}");
}

const struct rgguf_tensor *rgguf_require_tensor(const struct rgguf *g, const char *name,
                                                uint32_t n_dims, const int64_t *ne,
                                                uint64_t allowed_types) {
    const struct rgguf_tensor *t = rgguf_find_tensor(g, name);
    if (!t) {
        rcore_error_set("%s: tensor %s is missing", g->name, name ? name : "(null)");
        return NULL;
    }
    if (n_dims < 1 || n_dims > RGGUF_MAX_DIMS || !ne) {
        rcore_error_set("%s: tensor %s: %" PRIu32 " dimensions asked for (1 to %d)", g->name, name,
                        n_dims, RGGUF_MAX_DIMS);
        return NULL;
    }
    /* the dimensions beyond those asked for must be 1, as ggml pads them */
    int64_t want[RGGUF_MAX_DIMS] = {1, 1, 1, 1};
    memcpy(want, ne, n_dims * sizeof *ne);
    if (memcmp(want, t->ne, sizeof want) != 0) {
        char have_s[128], want_s[128];
        shape_text(have_s, sizeof have_s, t->n_dims, t->ne);
        shape_text(want_s, sizeof want_s, n_dims, want);
        rcore_error_set("%s: tensor %s has shape %s, %s was expected", g->name, name, have_s,
                        want_s);
        return NULL;
    }
    if (allowed_types && (t->type >= 64 || !(allowed_types >> t->type & 1))) {
        rcore_error_set("%s: tensor %s is %s, which is not allowed here", g->name, name,
                        rgguf_type_name(t->type));
        return NULL;
    }
    return t;
}
