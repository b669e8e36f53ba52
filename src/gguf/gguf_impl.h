/*
 * Private to src/gguf: the reader's parsed form, which the writer needs to copy key-values
 * (rgguf_writer_copy_kv), and the checks the reader and the writer share.
 */
#ifndef RECUR_GGUF_IMPL_H
#define RECUR_GGUF_IMPL_H

#include "gguf.h"

/* GGML_MAX_NAME: a tensor name and its NUL must fit in ggml's fixed name field. */
#define RGGUF_MAX_NAME 64

#define RGGUF_ALIGNMENT_KEY "general.alignment"

struct rgguf_kv {
    const char *key; /* NUL-terminated copy; keys never contain NUL */
    enum rgguf_vtype type;
    /* scalars: the value's little-endian bits, zero-extended (decoded by the getters, copied
     * as is by the writer) */
    uint64_t bits;
    /* strings */
    const char *str;
    size_t str_len;
    /* arrays */
    enum rgguf_vtype elem_type;
    uint64_t n;
    const void *arr;   /* numeric elements: a copy aligned to 8 bytes */
    const char **strs; /* string elements: n + 1 pointers into the arena, each string
                          NUL-terminated and the next right after it, so that the length of
                          string i is strs[i + 1] - strs[i] - 1 */
};

struct rgguf {
    const uint8_t *base; /* the file's bytes: mapping, read buffer or the caller's buffer */
    size_t size;
    void *map;   /* mmap'ed region (size bytes) to unmap, or NULL */
    void *buf;   /* read buffer to free, or NULL */
    void *block; /* the one allocation behind kv, tensors, the sorted tables and the arena */
    uint32_t version;
    uint32_t alignment;
    int64_t n_kv;
    int64_t n_tensors;
    struct rgguf_kv *kv;
    struct rgguf_tensor *tensors;
    const struct rgguf_kv **kv_by_name;         /* sorted by key, for bsearch */
    const struct rgguf_tensor **tensor_by_name; /* sorted by name */
    char name[];                                /* for messages */
};

/* Bytes of one scalar value of type vtype; 0 for STRING, ARRAY and unknown types. */
size_t rgguf_vtype_size(uint32_t vtype);

/* Checks a tensor's type and shape (ne: 4 entries, unused ones 1) and computes its size in
 * bytes. On failure returns false and writes the reason into why ("type 99 is not
 * supported", ...). */
bool rgguf_check_tensor(uint32_t type, const int64_t *ne, size_t *nbytes, char *why,
                        size_t why_size);

static inline bool rgguf_alignment_valid(uint64_t a) {
    return a != 0 && a <= UINT32_MAX && (a & (a - 1)) == 0;
}

#endif /* RECUR_GGUF_IMPL_H */
