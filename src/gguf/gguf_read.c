/*
 * GGUF reader.
 *
 * The file is parsed twice. The first pass checks every count, length, dimension, offset and
 * size against the bytes that remain, and only adds up how much memory the parsed form
 * needs; the second pass, over bytes now known to be sound, fills one allocation holding the
 * key-value and tensor tables, the name-sorted lookup tables, the string pointers of string
 * arrays, 8-byte-aligned copies of numeric arrays, and an arena of NUL-terminated copies of
 * every key, string value and tensor name. So a hostile count costs no memory (the first pass
 * fails on it after at most one walk over the file), a 50k-token vocabulary costs one malloc,
 * and every string handed out is NUL-terminated although the file's are not. Tensor data is
 * never copied: it points into the mapping or the buffer. The tables sorted by name (for the
 * lookups in gguf.c) are also how duplicate keys and tensor names are found.
 */
#define _DEFAULT_SOURCE /* MADV_POPULATE_READ */
#include "gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/core.h"
#include "../io/io.h"

/* ---- parsing ----------------------------------------------------------------------------- */

/* The smallest key-value (empty key, type, one-byte value) and tensor info (empty name, one
 * dimension): counts are bounded by the bytes left divided by these before any work. */
#define MIN_KV_BYTES     13
#define MIN_TENSOR_BYTES 32

struct parser {
    const uint8_t *p;
    size_t size, pos;
    const char *fname;
    char where[128]; /* "key 12 (tokenizer.ggml.tokens)", "tensor 4 (output.weight)" */
    uint32_t alignment;
    bool fill; /* second pass: copy into the arena */
    /* first pass: what the arena needs */
    size_t n_chars, n_num, n_strp;
    /* second pass: where the next copy goes */
    char *chars;
    uint8_t *num;
    const char **strp;
};

static void perr(const struct parser *ps, const char *fmt, ...) RCORE_PRINTF(2, 3);
static void perr(const struct parser *ps, const char *fmt, ...) {
    char msg[RCORE_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->where[0])
        rcore_error_set("%s: %s: %s", ps->fname, ps->where, msg);
    else
        rcore_error_set("%s: %s", ps->fname, msg);
}

static uint64_t le_bits(const uint8_t *b, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
    return v;
}

static size_t left(const struct parser *ps) {
    return ps->size - ps->pos;
}

static bool rd_u32(struct parser *ps, uint32_t *v, const char *what) {
    if (left(ps) < 4) {
        perr(ps, "%s runs past end of file", what);
        return false;
    }
    *v = (uint32_t)le_bits(ps->p + ps->pos, 4);
    ps->pos += 4;
    return true;
}

static bool rd_u64(struct parser *ps, uint64_t *v, const char *what) {
    if (left(ps) < 8) {
        perr(ps, "%s runs past end of file", what);
        return false;
    }
    *v = le_bits(ps->p + ps->pos, 8);
    ps->pos += 8;
    return true;
}

/* A GGUF string (u64 length, bytes): where it is in the file, checked to lie within it. */
static bool rd_str(struct parser *ps, const uint8_t **s, size_t *len, const char *what) {
    uint64_t n;
    if (left(ps) < 8) {
        perr(ps, "%s length runs past end of file", what);
        return false;
    }
    n = le_bits(ps->p + ps->pos, 8);
    if (n > left(ps) - 8) {
        perr(ps, "%s length %" PRIu64 " runs past end of file", what, n);
        return false;
    }
    *s = ps->p + ps->pos + 8;
    *len = (size_t)n;
    ps->pos += 8 + (size_t)n;
    return true;
}

/* Copies a string into the arena (second pass) or counts its room (first pass). */
static bool keep_str(struct parser *ps, const uint8_t *s, size_t len, const char **out) {
    if (!ps->fill) {
        size_t room;
        if (!rcore_add_size(len, 1, &room) || !rcore_add_size(ps->n_chars, room, &ps->n_chars)) {
            perr(ps, "strings too large for memory");
            return false;
        }
        return true;
    }
    memcpy(ps->chars, s, len);
    ps->chars[len] = '\0';
    *out = ps->chars;
    ps->chars += len + 1;
    return true;
}

static void set_where(struct parser *ps, const char *what, uint64_t i, const uint8_t *name,
                      size_t len) {
    /* long names are cut: the index already locates the entry */
    int shown = len > 64 ? 64 : (int)len;
    if (name)
        snprintf(ps->where, sizeof ps->where, "%s %" PRIu64 " (%.*s%s)", what, i, shown,
                 (const char *)name, len > 64 ? "..." : "");
    else
        snprintf(ps->where, sizeof ps->where, "%s %" PRIu64, what, i);
}

static bool parse_array(struct parser *ps, struct rgguf_kv *kv) {
    uint32_t et;
    uint64_t n;
    if (!rd_u32(ps, &et, "array element type") || !rd_u64(ps, &n, "array count")) return false;
    if (et == RGGUF_ARRAY) {
        perr(ps, "arrays of arrays are not supported");
        return false;
    }
    if (et >= RGGUF_VTYPE_COUNT) {
        perr(ps, "unknown array element type %" PRIu32, et);
        return false;
    }
    if (kv) {
        kv->elem_type = (enum rgguf_vtype)et;
        kv->n = n;
    }
    if (et == RGGUF_STRING) {
        /* each string takes at least its 8-byte length */
        if (n > left(ps) / 8) {
            perr(ps, "array of %" PRIu64 " strings runs past end of file", n);
            return false;
        }
        if (!ps->fill) {
            /* n + 1 <= the file size: no overflow */
            ps->n_strp += (size_t)n + 1;
        } else {
            kv->strs = ps->strp;
            ps->strp += n + 1;
        }
        for (uint64_t j = 0; j < n; j++) {
            if (left(ps) < 8) {
                perr(ps, "string %" PRIu64 " of %" PRIu64 ": length runs past end of file", j, n);
                return false;
            }
            uint64_t len = le_bits(ps->p + ps->pos, 8);
            if (len > left(ps) - 8) {
                perr(ps,
                     "string %" PRIu64 " of %" PRIu64 ": length %" PRIu64 " runs past end of file",
                     j, n, len);
                return false;
            }
            const uint8_t *s = ps->p + ps->pos + 8;
            ps->pos += 8 + (size_t)len;
            if (!keep_str(ps, s, (size_t)len, ps->fill ? &kv->strs[j] : NULL)) return false;
        }
        if (ps->fill) kv->strs[n] = ps->chars;
        return true;
    }
    size_t esize = rgguf_vtype_size(et), bytes;
    if (n > SIZE_MAX || !rcore_mul_size((size_t)n, esize, &bytes) || bytes > left(ps)) {
        perr(ps, "array of %" PRIu64 " %s runs past end of file", n, rgguf_vtype_name(et));
        return false;
    }
    const uint8_t *src = ps->p + ps->pos;
    if (et == RGGUF_BOOL) {
        for (size_t j = 0; j < bytes; j++) {
            if (src[j] > 1) {
                perr(ps, "bool element %zu is %u (must be 0 or 1)", j, src[j]);
                return false;
            }
        }
    }
    /* copied, 8-byte aligned, so that callers can index the elements in place */
    size_t room = (bytes + 7) & ~(size_t)7;
    if (!ps->fill) {
        ps->n_num += room; /* bytes <= the file size: no overflow */
    } else {
        memcpy(ps->num, src, bytes);
        kv->arr = ps->num;
        ps->num += room;
    }
    ps->pos += bytes;
    return true;
}

static bool parse_kv(struct parser *ps, uint64_t i, struct rgguf_kv *kv) {
    const uint8_t *name;
    size_t len;
    uint32_t type;
    set_where(ps, "key", i, NULL, 0);
    if (!rd_str(ps, &name, &len, "name")) return false;
    if (memchr(name, 0, len)) {
        perr(ps, "name contains a NUL byte");
        return false;
    }
    set_where(ps, "key", i, name, len);
    if (!keep_str(ps, name, len, kv ? &kv->key : NULL)) return false;
    if (!rd_u32(ps, &type, "value type")) return false;
    if (type >= RGGUF_VTYPE_COUNT) {
        perr(ps, "unknown value type %" PRIu32, type);
        return false;
    }
    if (kv) kv->type = (enum rgguf_vtype)type;
    bool is_alignment =
        len == strlen(RGGUF_ALIGNMENT_KEY) && memcmp(name, RGGUF_ALIGNMENT_KEY, len) == 0;
    if (is_alignment && type != RGGUF_UINT32) {
        perr(ps, "the alignment must be a uint32, not %s", rgguf_vtype_name(type));
        return false;
    }
    if (type == RGGUF_ARRAY) return parse_array(ps, kv);
    if (type == RGGUF_STRING) {
        const uint8_t *s;
        size_t slen;
        if (!rd_str(ps, &s, &slen, "string")) return false;
        if (kv) kv->str_len = slen;
        return keep_str(ps, s, slen, kv ? &kv->str : NULL);
    }
    size_t vsize = rgguf_vtype_size(type);
    if (left(ps) < vsize) {
        perr(ps, "%s value runs past end of file", rgguf_vtype_name(type));
        return false;
    }
    uint64_t bits = le_bits(ps->p + ps->pos, vsize);
    ps->pos += vsize;
    if (type == RGGUF_BOOL && bits > 1) {
        perr(ps, "bool value %" PRIu64 " (must be 0 or 1)", bits);
        return false;
    }
    if (is_alignment) {
        if (!rgguf_alignment_valid(bits)) {
            perr(ps, "alignment %" PRIu64 " is not a power of two", bits);
            return false;
        }
        ps->alignment = (uint32_t)bits;
    }
    if (kv) kv->bits = bits;
    return true;
}

static bool parse_tensor_info(struct parser *ps, uint64_t i, struct rgguf_tensor *t) {
    const uint8_t *name;
    size_t len;
    uint32_t n_dims, type;
    uint64_t offset;
    int64_t ne[RGGUF_MAX_DIMS] = {1, 1, 1, 1};
    char why[RCORE_ERROR_MAX];
    size_t nbytes;

    set_where(ps, "tensor", i, NULL, 0);
    if (!rd_str(ps, &name, &len, "name")) return false;
    if (len >= RGGUF_MAX_NAME) {
        perr(ps, "name of %zu bytes is too long (at most %d)", len, RGGUF_MAX_NAME - 1);
        return false;
    }
    if (memchr(name, 0, len)) {
        perr(ps, "name contains a NUL byte");
        return false;
    }
    set_where(ps, "tensor", i, name, len);
    if (!keep_str(ps, name, len, t ? &t->name : NULL)) return false;
    if (!rd_u32(ps, &n_dims, "dimension count")) return false;
    if (n_dims == 0 || n_dims > RGGUF_MAX_DIMS) {
        perr(ps, "%" PRIu32 " dimensions (at %s %d)", n_dims, n_dims ? "most" : "least",
             n_dims ? RGGUF_MAX_DIMS : 1);
        return false;
    }
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        if (!rd_u64(ps, &v, "dimension")) return false;
        if (v > (uint64_t)INT64_MAX) {
            perr(ps, "dimension %" PRIu32 " is negative (%" PRIu64 " as unsigned)", d, v);
            return false;
        }
        ne[d] = (int64_t)v;
    }
    if (!rd_u32(ps, &type, "type") || !rd_u64(ps, &offset, "data offset")) return false;
    if (!rgguf_check_tensor(type, ne, &nbytes, why, sizeof why)) {
        perr(ps, "%s", why);
        return false;
    }
    if (offset % ps->alignment != 0) {
        perr(ps, "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu32, offset,
             ps->alignment);
        return false;
    }
    if (t) {
        t->n_dims = n_dims;
        memcpy(t->ne, ne, sizeof ne);
        t->type = type;
        t->offset = offset;
        t->nbytes = nbytes;
    }
    return true;
}

/* One pass over the key-values and tensor infos (see the comment at the top). */
static bool parse_meta(struct parser *ps, struct rgguf *g, size_t start) {
    ps->pos = start;
    ps->alignment = RGGUF_DEFAULT_ALIGNMENT;
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!parse_kv(ps, (uint64_t)i, ps->fill ? &g->kv[i] : NULL)) return false;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!parse_tensor_info(ps, (uint64_t)i, ps->fill ? &g->tensors[i] : NULL)) return false;
    ps->where[0] = '\0';
    return true;
}

static int cmp_kv(const void *a, const void *b) {
    return strcmp((*(const struct rgguf_kv *const *)a)->key,
                  (*(const struct rgguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const struct rgguf_tensor *const *)a)->name,
                  (*(const struct rgguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const struct rgguf_tensor *x = *(const struct rgguf_tensor *const *)a;
    const struct rgguf_tensor *y = *(const struct rgguf_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    /* an empty tensor at the offset where another begins does not overlap it */
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

/* Room for n items of size each in the block, each part aligned for any type. */
static bool block_part(size_t *total, size_t n, size_t each, size_t *off) {
    size_t a = _Alignof(max_align_t), bytes;
    if (!rcore_mul_size(n, each, &bytes) || !rcore_add_size(*total, a - 1, off)) return false;
    *off &= ~(a - 1);
    return rcore_add_size(*off, bytes, total);
}

/* Checks where tensor data lies, then builds the lookup tables. */
static bool check_layout(struct rgguf *g, size_t meta_end) {
    int64_t nt = g->n_tensors;
    size_t a = g->alignment, data_start = SIZE_MAX;
    if (rcore_add_size(meta_end, a - 1, &data_start)) data_start &= ~(a - 1);
    size_t data_size = data_start <= g->size ? g->size - data_start : 0;
    for (int64_t i = 0; i < nt; i++) {
        struct rgguf_tensor *t = &g->tensors[i];
        if (data_start > g->size || t->offset > data_size || t->nbytes > data_size - t->offset) {
            rcore_error_set("%s: tensor %s: data runs past end of file (offset %" PRIu64
                            ", %zu bytes; the data section has %zu bytes)",
                            g->name, t->name, t->offset, t->nbytes, data_size);
            return false;
        }
        t->data = g->base + data_start + (size_t)t->offset;
        g->tensor_by_name[i] = t;
    }
    qsort(g->tensor_by_name, (size_t)nt, sizeof *g->tensor_by_name, cmp_tensor_offset);
    for (int64_t i = 1; i < nt; i++) {
        const struct rgguf_tensor *x = g->tensor_by_name[i - 1], *y = g->tensor_by_name[i];
        if (x->offset + x->nbytes > y->offset) {
            rcore_error_set("%s: tensors %s and %s overlap", g->name, x->name, y->name);
            return false;
        }
    }
    qsort(g->tensor_by_name, (size_t)nt, sizeof *g->tensor_by_name, cmp_tensor_name);
    for (int64_t i = 1; i < nt; i++) {
        if (strcmp(g->tensor_by_name[i - 1]->name, g->tensor_by_name[i]->name) == 0) {
            rcore_error_set("%s: duplicate tensor %s", g->name, g->tensor_by_name[i]->name);
            return false;
        }
    }
    for (int64_t i = 0; i < g->n_kv; i++) g->kv_by_name[i] = &g->kv[i];
    qsort(g->kv_by_name, (size_t)g->n_kv, sizeof *g->kv_by_name, cmp_kv);
    for (int64_t i = 1; i < g->n_kv; i++) {
        if (strcmp(g->kv_by_name[i - 1]->key, g->kv_by_name[i]->key) == 0) {
            rcore_error_set("%s: duplicate key %s", g->name, g->kv_by_name[i]->key);
            return false;
        }
    }
    return true;
}

static bool parse(struct rgguf *g) {
    struct parser ps = {.p = g->base, .size = g->size, .fname = g->name};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (g->size == 0) {
        perr(&ps, "empty file");
        return false;
    }
    if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
        uint8_t m[4] = {0};
        memcpy(m, g->base, g->size < 4 ? g->size : 4);
        perr(&ps, "not a GGUF file (magic 0x%02x%02x%02x%02x%s)", m[0], m[1], m[2], m[3],
             g->size < 4 ? ", file too short" : "");
        return false;
    }
    ps.pos = 4;
    if (!rd_u32(&ps, &version, "version")) return false;
    if (version != 2 && version != 3) {
        if (version == 1)
            perr(&ps, "GGUF version 1 (32-bit counts) is not supported (only 2 and 3)");
        else if ((version & 0xffff) == 0)
            perr(&ps, "GGUF version %" PRIu32 " is not supported (a big-endian file?)", version);
        else
            perr(&ps, "GGUF version %" PRIu32 " is not supported (only 2 and 3)", version);
        return false;
    }
    if (!rd_u64(&ps, &n_tensors, "tensor count") || !rd_u64(&ps, &n_kv, "kv count")) return false;
    /* bounded before any work: a hostile count fails here, not in malloc */
    if (n_kv > left(&ps) / MIN_KV_BYTES) {
        perr(&ps, "kv count %" PRIu64 " runs past end of file", n_kv);
        return false;
    }
    if (n_tensors > (left(&ps) - n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES) {
        perr(&ps, "tensor count %" PRIu64 " runs past end of file", n_tensors);
        return false;
    }
    g->version = version;
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    size_t start = ps.pos;
    if (!parse_meta(&ps, g, start)) return false;
    size_t meta_end = ps.pos;
    g->alignment = ps.alignment;

    size_t total = 0, o_kv, o_t, o_kvs, o_ts, o_strp, o_num, o_chars;
    if (!block_part(&total, (size_t)n_kv, sizeof(struct rgguf_kv), &o_kv) ||
        !block_part(&total, (size_t)n_tensors, sizeof(struct rgguf_tensor), &o_t) ||
        !block_part(&total, (size_t)n_kv, sizeof(void *), &o_kvs) ||
        !block_part(&total, (size_t)n_tensors, sizeof(void *), &o_ts) ||
        !block_part(&total, ps.n_strp, sizeof(char *), &o_strp) ||
        !block_part(&total, ps.n_num, 1, &o_num) || !block_part(&total, ps.n_chars, 1, &o_chars) ||
        !(g->block = calloc(1, total ? total : 1))) {
        perr(&ps, "out of memory for the metadata (%zu bytes)", total);
        return false;
    }
    uint8_t *b = g->block;
    g->kv = (struct rgguf_kv *)(b + o_kv);
    g->tensors = (struct rgguf_tensor *)(b + o_t);
    g->kv_by_name = (const struct rgguf_kv **)(b + o_kvs);
    g->tensor_by_name = (const struct rgguf_tensor **)(b + o_ts);
    ps.strp = (const char **)(b + o_strp);
    ps.num = b + o_num;
    ps.chars = (char *)(b + o_chars);
    ps.fill = true;
    if (!parse_meta(&ps, g, start)) return false; /* cannot fail: same bytes as pass one */
    return check_layout(g, meta_end);
}

static struct rgguf *handle_new(const char *name) {
    size_t len = strlen(name);
    struct rgguf *g = calloc(1, sizeof *g + len + 1);
    if (!g) {
        rcore_error_set("%s: out of memory", name);
        return NULL;
    }
    memcpy(g->name, name, len + 1);
    return g;
}

struct rgguf *rgguf_open_buffer(const void *data, size_t size, const char *name) {
    struct rgguf *g = handle_new(name ? name : "(buffer)");
    if (!g) return NULL;
    g->base = data;
    g->size = data ? size : 0;
    if (!parse(g)) {
        rgguf_close(g);
        return NULL;
    }
    return g;
}

/* Reads the whole file into a page-aligned buffer, so that tensor data is as aligned as with
 * a mapping (for any file alignment up to the page). */
static bool read_whole(struct rgguf *g, int fd) {
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        rcore_error_set("%s: %s", g->name, strerror(errno));
        close(fd);
        return false;
    }
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, g->size) != 0) {
        rcore_error_set("%s: out of memory reading %zu bytes", g->name, g->size);
        fclose(f);
        return false;
    }
    size_t got = fread(buf, 1, g->size, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != g->size) {
        rcore_error_set("%s: read %zu of %zu bytes%s%s", g->name, got, g->size,
                        err ? ": " : " (file shrank?)", err ? strerror(err) : "");
        free(buf);
        return false;
    }
    g->buf = buf;
    g->base = buf;
    return true;
}

struct rgguf *rgguf_open(const char *path, bool use_mmap) {
    struct rgguf *g = handle_new(path ? path : "(null)");
    if (!g) return NULL;
    struct stat st;
    int fd = rio_open_regular(path, &st); /* a FIFO is refused, not waited on */
    if (fd < 0) goto fail;
    if (st.st_size <= 0 || (uint64_t)st.st_size > SIZE_MAX) {
        rcore_error_set("%s: %s", g->name, st.st_size <= 0 ? "empty file" : "too large");
        close(fd);
        goto fail;
    }
    g->size = (size_t)st.st_size;
    if (use_mmap) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            g->map = m;
            g->base = m;
            close(fd);
        }
    }
    if (!g->map && !read_whole(g, fd)) goto fail; /* read_whole closes fd */
    if (!parse(g)) goto fail;
    return g;
fail:
    rgguf_close(g);
    return NULL;
}

void rgguf_prefault(const struct rgguf *g, const struct rgguf_tensor *t) {
#ifdef MADV_POPULATE_READ
    if (!g || !g->map || !t || t->nbytes == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t start = (uintptr_t)t->data & ~(page - 1);
    (void)madvise((void *)start, (uintptr_t)t->data + t->nbytes - start, MADV_POPULATE_READ);
#else
    (void)g;
    (void)t;
#endif
}

void rgguf_close(struct rgguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    free(g->buf);
    free(g->block);
    free(g);
}
