/*
 * GGUF writer.
 *
 * Key-values are encoded as they are added, into one growing byte buffer holding exactly the
 * bytes that follow the header in the file, so writing them out is a single fwrite and an
 * adder that fails part way only has to cut the buffer back. The keys are also kept apart
 * (for duplicates). Tensors keep a copy of their data until the file is written; the layout
 * is llama.cpp's: header, key-values, tensor infos, zero padding to the alignment, then each
 * tensor's data padded to the alignment. The file is written crash-safely (rio_replace), so a
 * failure never leaves a partial file at the path.
 */
#include "gguf_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/buf.h"
#include "../core/core.h"
#include "../io/io.h"

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct wtensor {
    char name[RGGUF_MAX_NAME];
    uint32_t type, n_dims;
    int64_t ne[RGGUF_MAX_DIMS];
    void *data;
    size_t nbytes;
};

struct rgguf_writer {
    struct buf kv; /* the encoded key-values */
    char **keys;
    size_t n_kv, keys_cap;
    struct wtensor *t;
    size_t n_t, t_cap;
    uint32_t alignment;
};

static bool put(struct buf *b, const void *src, size_t n) {
    size_t need;
    if (!rcore_add_size(b->len, n, &need) || !rcore_grow((void **)&b->p, &b->cap, need, 1)) {
        rcore_error_set("gguf writer: out of memory");
        return false;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len = need;
    return true;
}

static bool put_le(struct buf *b, uint64_t v, size_t n) {
    uint8_t bytes[8];
    for (size_t i = 0; i < n; i++) bytes[i] = (uint8_t)(v >> (8 * i));
    return put(b, bytes, n);
}

static bool put_str(struct buf *b, const char *s, size_t len) {
    return put_le(b, len, 8) && put(b, s, len);
}

struct rgguf_writer *rgguf_writer_create(void) {
    struct rgguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        rcore_error_set("gguf writer: out of memory");
        return NULL;
    }
    w->alignment = RGGUF_DEFAULT_ALIGNMENT;
    return w;
}

void rgguf_writer_free(struct rgguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].data);
    free(w->keys);
    free(w->t);
    free(w->kv.p);
    free(w);
}

/* ---- key-values -------------------------------------------------------------------------- */

/* Starts a key-value: checks the key, encodes it and the type. *mark is where to cut back. */
static bool kv_begin(struct rgguf_writer *w, const char *key, enum rgguf_vtype type, size_t *mark) {
    if (!key) {
        rcore_error_set("gguf writer: key is NULL");
        return false;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->keys[i], key) == 0) {
            rcore_error_set("gguf writer: duplicate key %s", key);
            return false;
        }
    }
    if (strcmp(key, RGGUF_ALIGNMENT_KEY) == 0 && type != RGGUF_UINT32) {
        rcore_error_set("gguf writer: key %s must be a uint32, not %s", key,
                        rgguf_vtype_name(type));
        return false;
    }
    *mark = w->kv.len;
    if (put_str(&w->kv, key, strlen(key)) && put_le(&w->kv, type, 4)) return true;
    w->kv.len = *mark;
    return false;
}

/* Ends a key-value: keeps the key when the value was encoded, else cuts the buffer back. */
static bool kv_end(struct rgguf_writer *w, const char *key, size_t mark, bool ok) {
    char *copy = NULL;
    if (ok) {
        size_t len = strlen(key);
        copy = malloc(len + 1);
        ok = copy && rcore_grow((void **)&w->keys, &w->keys_cap, w->n_kv + 1, sizeof *w->keys);
        if (!ok)
            rcore_error_set("gguf writer: out of memory");
        else
            memcpy(copy, key, len + 1);
    }
    if (!ok) {
        free(copy);
        w->kv.len = mark;
        return false;
    }
    w->keys[w->n_kv++] = copy;
    return true;
}

static bool set_scalar(struct rgguf_writer *w, const char *key, enum rgguf_vtype type,
                       uint64_t bits) {
    size_t mark;
    if (!kv_begin(w, key, type, &mark)) return false;
    return kv_end(w, key, mark, put_le(&w->kv, bits, rgguf_vtype_size(type)));
}

static bool check_alignment(uint32_t v) {
    if (rgguf_alignment_valid(v)) return true;
    rcore_error_set("gguf writer: %s %" PRIu32 " is not a power of two", RGGUF_ALIGNMENT_KEY, v);
    return false;
}

bool rgguf_writer_set_u32(struct rgguf_writer *w, const char *key, uint32_t v) {
    bool is_alignment = key && strcmp(key, RGGUF_ALIGNMENT_KEY) == 0;
    if (is_alignment && !check_alignment(v)) return false;
    if (!set_scalar(w, key, RGGUF_UINT32, v)) return false;
    if (is_alignment) w->alignment = v;
    return true;
}

bool rgguf_writer_set_i32(struct rgguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, RGGUF_INT32, (uint32_t)v);
}

bool rgguf_writer_set_u64(struct rgguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, RGGUF_UINT64, v);
}

bool rgguf_writer_set_f32(struct rgguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, RGGUF_FLOAT32, bits);
}

bool rgguf_writer_set_bool(struct rgguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, RGGUF_BOOL, v ? 1 : 0);
}

bool rgguf_writer_set_str(struct rgguf_writer *w, const char *key, const char *v) {
    size_t mark;
    if (!v) {
        rcore_error_set("gguf writer: key %s: string is NULL", key ? key : "(null)");
        return false;
    }
    if (!kv_begin(w, key, RGGUF_STRING, &mark)) return false;
    return kv_end(w, key, mark, put_str(&w->kv, v, strlen(v)));
}

/* Array header and packed elements; the elements are checked as the reader would. */
static bool put_arr(struct rgguf_writer *w, const char *key, enum rgguf_vtype et, const void *data,
                    uint64_t n) {
    size_t esize = rgguf_vtype_size(et), bytes;
    if (esize == 0) {
        rcore_error_set("gguf writer: key %s: arrays of %s are not packed numbers", key,
                        rgguf_vtype_name(et));
        return false;
    }
    if (n > SIZE_MAX || !rcore_mul_size((size_t)n, esize, &bytes) || (bytes && !data)) {
        rcore_error_set("gguf writer: key %s: bad array of %" PRIu64 " elements", key, n);
        return false;
    }
    for (size_t i = 0; et == RGGUF_BOOL && i < bytes; i++) {
        if (((const uint8_t *)data)[i] > 1) {
            rcore_error_set("gguf writer: key %s: bool element %zu is not 0 or 1", key, i);
            return false;
        }
    }
    return put_le(&w->kv, et, 4) && put_le(&w->kv, n, 8) && put(&w->kv, data, bytes);
}

bool rgguf_writer_set_arr(struct rgguf_writer *w, const char *key, enum rgguf_vtype elem_type,
                          const void *data, uint64_t n) {
    size_t mark;
    if (!kv_begin(w, key, RGGUF_ARRAY, &mark)) return false;
    return kv_end(w, key, mark, put_arr(w, key, elem_type, data, n));
}

bool rgguf_writer_set_arr_str(struct rgguf_writer *w, const char *key, const char *const *v,
                              uint64_t n) {
    size_t mark;
    if (n && !v) {
        rcore_error_set("gguf writer: key %s: strings are NULL", key ? key : "(null)");
        return false;
    }
    if (!kv_begin(w, key, RGGUF_ARRAY, &mark)) return false;
    bool ok = put_le(&w->kv, RGGUF_STRING, 4) && put_le(&w->kv, n, 8);
    for (uint64_t i = 0; ok && i < n; i++) {
        ok = v[i] != NULL;
        if (!ok)
            rcore_error_set("gguf writer: key %s: string %" PRIu64 " is NULL", key, i);
        else
            ok = put_str(&w->kv, v[i], strlen(v[i]));
    }
    return kv_end(w, key, mark, ok);
}

bool rgguf_writer_copy_kv(struct rgguf_writer *w, const struct rgguf *g, const char *key) {
    int64_t i = rgguf_find_key(g, key);
    if (i < 0) {
        rcore_error_set("%s: key %s is missing", g->name, key ? key : "(null)");
        return false;
    }
    const struct rgguf_kv *kv = &g->kv[i];
    if (kv->type == RGGUF_UINT32) return rgguf_writer_set_u32(w, key, (uint32_t)kv->bits);
    size_t mark;
    if (!kv_begin(w, key, kv->type, &mark)) return false;
    bool ok;
    if (kv->type == RGGUF_STRING) {
        ok = put_str(&w->kv, kv->str, kv->str_len);
    } else if (kv->type != RGGUF_ARRAY) {
        ok = put_le(&w->kv, kv->bits, rgguf_vtype_size(kv->type));
    } else if (kv->elem_type != RGGUF_STRING) {
        ok = put_arr(w, key, kv->elem_type, kv->arr, kv->n);
    } else {
        ok = put_le(&w->kv, RGGUF_STRING, 4) && put_le(&w->kv, kv->n, 8);
        for (uint64_t j = 0; ok && j < kv->n; j++)
            ok = put_str(&w->kv, kv->strs[j], (size_t)(kv->strs[j + 1] - kv->strs[j]) - 1);
    }
    return kv_end(w, key, mark, ok);
}

/* ---- tensors ----------------------------------------------------------------------------- */

bool rgguf_writer_add_tensor(struct rgguf_writer *w, const char *name, uint32_t type,
                             uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes) {
    char why[RCORE_ERROR_MAX];
    size_t want;
    if (!name || strlen(name) >= RGGUF_MAX_NAME) {
        rcore_error_set("gguf writer: tensor name %s is %s (at most %d bytes)",
                        name ? name : "(null)", name ? "too long" : "missing", RGGUF_MAX_NAME - 1);
        return false;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) {
            rcore_error_set("gguf writer: duplicate tensor %s", name);
            return false;
        }
    }
    if (n_dims < 1 || n_dims > RGGUF_MAX_DIMS || !ne) {
        rcore_error_set("gguf writer: tensor %s: %" PRIu32 " dimensions (1 to %d)", name, n_dims,
                        RGGUF_MAX_DIMS);
        return false;
    }
    struct wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .nbytes = nbytes};
    memcpy(t.ne, ne, n_dims * sizeof *ne);
    memcpy(t.name, name, strlen(name) + 1);
    if (!rgguf_check_tensor(type, t.ne, &want, why, sizeof why)) {
        rcore_error_set("gguf writer: tensor %s: %s", name, why);
        return false;
    }
    if (want != nbytes || (nbytes && !data)) {
        rcore_error_set("gguf writer: tensor %s: %zu bytes given, its type and shape take %zu",
                        name, data ? nbytes : 0, want);
        return false;
    }
    if (!rcore_grow((void **)&w->t, &w->t_cap, w->n_t + 1, sizeof *w->t) ||
        (nbytes && !(t.data = malloc(nbytes)))) {
        rcore_error_set("gguf writer: tensor %s: out of memory (%zu bytes)", name, nbytes);
        return false;
    }
    if (nbytes) memcpy(t.data, data, nbytes);
    w->t[w->n_t++] = t;
    return true;
}

/* ---- writing ----------------------------------------------------------------------------- */

static size_t pad_to(size_t n, size_t a) {
    return (a - n % a) % a;
}

static bool write_zeros(struct rio_writer *out, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        if (!rio_write(out, zeros, k)) return false;
        n -= k;
    }
    return true;
}

/* Header and tensor infos (the key-values are already encoded); data offsets are assigned
 * here, each tensor starting at the next multiple of the alignment. */
static bool encode_head(const struct rgguf_writer *w, struct buf *head, struct buf *infos) {
    size_t offset = 0;
    bool ok = put(head, "GGUF", 4) && put_le(head, 3, 4) && put_le(head, w->n_t, 8) &&
              put_le(head, w->n_kv, 8);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        ok = put_str(infos, t->name, strlen(t->name)) && put_le(infos, t->n_dims, 4);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) ok = put_le(infos, (uint64_t)t->ne[d], 8);
        ok = ok && put_le(infos, t->type, 4) && put_le(infos, offset, 8);
        if (ok && (!rcore_add_size(offset, t->nbytes, &offset) ||
                   !rcore_add_size(offset, pad_to(offset, w->alignment), &offset))) {
            rcore_error_set("gguf writer: tensor data too large");
            ok = false;
        }
    }
    return ok;
}

struct write_args {
    const struct rgguf_writer *w;
    struct buf head, infos;
};

static bool write_file(void *arg, struct rio_writer *out) {
    const struct write_args *a = arg;
    const struct rgguf_writer *w = a->w;
    const size_t pos = a->head.len + w->kv.len + a->infos.len;
    bool ok = rio_write(out, a->head.p, a->head.len) && rio_write(out, w->kv.p, w->kv.len) &&
              rio_write(out, a->infos.p, a->infos.len) &&
              write_zeros(out, pad_to(pos, w->alignment));
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        ok =
            rio_write(out, t->data, t->nbytes) && write_zeros(out, pad_to(t->nbytes, w->alignment));
    }
    return ok;
}

bool rgguf_writer_write(struct rgguf_writer *w, const char *path) {
    struct write_args a = {w, {0}, {0}};
    bool ok = encode_head(w, &a.head, &a.infos);
    if (!ok)
        rcore_error_prefix("%s", path ? path : "gguf writer");
    else
        ok = rio_replace(path, write_file, &a, NULL);
    free(a.head.p);
    free(a.infos.p);
    return ok;
}
