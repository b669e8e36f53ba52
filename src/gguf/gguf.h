/*
 * gguf: reads and writes GGUF v3 files as llama.cpp writes them.
 *
 * Reader: the file is mapped (mmap) or, when mapping is not wanted or fails, read whole into
 * memory. Every count, string length, array length, dimension product, tensor offset and size
 * is checked against the file before use, so a malformed, truncated or hostile file gets an
 * error naming what is wrong ("tensor blk.3.ssm_in.weight: data runs past end of file") and
 * never a crash or an out-of-bounds read. Nothing returned by the reader needs freeing; every
 * pointer into the file (strings, arrays, tensor data) lives until rgguf_close.
 *
 * Writer: collects key-values and tensors, then writes the file in one go (header, KV,
 * tensor infos, aligned data), as llama.cpp's gguf writer lays it out.
 *
 * Sizes follow GGML: ne[0] is the fastest dimension; a {n_embd, n_vocab} tensor is n_vocab
 * rows of n_embd elements.
 */
#ifndef RECUR_GGUF_H
#define RECUR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF value types (numbering of the format). */
enum rgguf_vtype {
    RGGUF_UINT8 = 0,
    RGGUF_INT8 = 1,
    RGGUF_UINT16 = 2,
    RGGUF_INT16 = 3,
    RGGUF_UINT32 = 4,
    RGGUF_INT32 = 5,
    RGGUF_FLOAT32 = 6,
    RGGUF_BOOL = 7,
    RGGUF_STRING = 8,
    RGGUF_ARRAY = 9,
    RGGUF_UINT64 = 10,
    RGGUF_INT64 = 11,
    RGGUF_FLOAT64 = 12,
    RGGUF_VTYPE_COUNT
};

/* GGML tensor types recur reads (numbering of ggml). Block size and bytes per block are in
 * rgguf_type_block / rgguf_type_block_bytes; any other type is refused by name. */
enum rgguf_ttype {
    RGGUF_F32 = 0,
    RGGUF_F16 = 1,
    RGGUF_Q4_0 = 2,
    RGGUF_Q4_1 = 3,
    RGGUF_Q5_0 = 6,
    RGGUF_Q5_1 = 7,
    RGGUF_Q8_0 = 8,
    RGGUF_Q2_K = 10,
    RGGUF_Q3_K = 11,
    RGGUF_Q4_K = 12,
    RGGUF_Q5_K = 13,
    RGGUF_Q6_K = 14,
    RGGUF_IQ4_NL = 20,
    RGGUF_IQ4_XS = 23,
    RGGUF_BF16 = 30,
};

#define RGGUF_MAX_DIMS          4
#define RGGUF_DEFAULT_ALIGNMENT 32

/* Elements per block (1 for float types), bytes per block; 0 for a type recur does not know. */
uint32_t rgguf_type_block(uint32_t ttype);
uint32_t rgguf_type_block_bytes(uint32_t ttype);
/* The names of the types recur reads, as a list for messages ("f32, f16, ... and iq4_xs").
 * Static text. */
const char *rgguf_types_supported(void);
/* "f32", "f16", "q4_0", "q8_0", "bf16", or "type N". The returned text is static. */
const char *rgguf_type_name(uint32_t ttype);
const char *rgguf_vtype_name(uint32_t vtype);

/* ---- reader ------------------------------------------------------------------------------ */

struct rgguf;

struct rgguf_tensor {
    const char *name;           /* NUL-terminated copy */
    uint32_t n_dims;            /* 1..4 */
    int64_t ne[RGGUF_MAX_DIMS]; /* unused dimensions are 1 */
    uint32_t type;              /* enum rgguf_ttype value */
    uint64_t offset;            /* from the start of the data section */
    size_t nbytes;
    const void *data; /* inside the mapping / buffer, aligned as the file says */
};

/* Opens and checks a GGUF file. use_mmap false reads the file into memory instead. Returns
 * NULL with the last error set ("model.gguf: not a GGUF file (magic ...)", "model.gguf: key
 * 12: string length 9223372036854775807 runs past end of file", ...): the path always leads
 * the message. Tensors of an unknown type are refused. */
struct rgguf *rgguf_open(const char *path, bool use_mmap);
/* Same, from a caller's buffer (not copied; must outlive the handle). name is used in
 * messages. */
struct rgguf *rgguf_open_buffer(const void *data, size_t size, const char *name);
void rgguf_close(struct rgguf *g); /* NULL is fine */
/* Maps the pages of tensor t's data into the process now (MADV_POPULATE_READ), for a tensor read
 * a row here and there: a token's embedding row otherwise took a page fault the first time each
 * page was read, 12 us of a 3 ms token with 130M-parameter models' random tokens. An advice: a
 * file read into memory, or a kernel older than Linux 5.14, leaves it as it was. */
void rgguf_prefault(const struct rgguf *g, const struct rgguf_tensor *t);

uint32_t rgguf_version(const struct rgguf *g);
uint32_t rgguf_alignment(const struct rgguf *g);
bool rgguf_is_mapped(const struct rgguf *g);
/* Where the file's bytes lie in memory: the mapping, or the buffer it was read into. */
void rgguf_bytes(const struct rgguf *g, const void **base, size_t *size);

/* ---- key-values ---- */
int64_t rgguf_n_kv(const struct rgguf *g);
/* Index of a key, -1 when absent. */
int64_t rgguf_find_key(const struct rgguf *g, const char *key);
const char *rgguf_key_name(const struct rgguf *g, int64_t i);
enum rgguf_vtype rgguf_key_type(const struct rgguf *g, int64_t i);

/* Typed getters by key name. They return false with the last error set when the key is
 * absent ("key mamba.block_count is missing") or of a type that cannot be converted without
 * loss ("key mamba.block_count is a string, an integer was expected"; an integer that does not
 * fit: "key ... = -1 is out of range for uint32"). Any integer type converts to another when
 * the value fits; float32 and float64 convert to float / double. */
bool rgguf_get_u32(const struct rgguf *g, const char *key, uint32_t *out);
bool rgguf_get_i32(const struct rgguf *g, const char *key, int32_t *out);
bool rgguf_get_u64(const struct rgguf *g, const char *key, uint64_t *out);
bool rgguf_get_f32(const struct rgguf *g, const char *key, float *out);
bool rgguf_get_bool(const struct rgguf *g, const char *key, bool *out);
/* A string value; *len gets its length (the text is also NUL-terminated). */
bool rgguf_get_str(const struct rgguf *g, const char *key, const char **out, size_t *len);

/* Arrays: element type and count; numeric element data (packed, little-endian as in the
 * file), or the i-th string. False with the error set when the key is absent, not an array,
 * or of another element type than asked. */
bool rgguf_get_arr(const struct rgguf *g, const char *key, enum rgguf_vtype *elem_type,
                   uint64_t *n);
bool rgguf_get_arr_data(const struct rgguf *g, const char *key, enum rgguf_vtype elem_type,
                        const void **data, uint64_t *n);
bool rgguf_get_arr_str(const struct rgguf *g, const char *key, uint64_t i, const char **out,
                       size_t *len);

/* ---- tensors ---- */
int64_t rgguf_n_tensors(const struct rgguf *g);
const struct rgguf_tensor *rgguf_tensor(const struct rgguf *g, int64_t i);
/* NULL when absent (no error set: absence is often legitimate, e.g. a tied output). */
const struct rgguf_tensor *rgguf_find_tensor(const struct rgguf *g, const char *name);
/* The tensor, checked to have exactly the given dimensions (n_dims of them, the rest 1) and
 * one of the allowed types (allowed: bit i set for type i; 0 = any type). NULL with the error
 * set: "tensor blk.3.ssm_in.weight is missing", "tensor blk.3.ssm_in.weight has shape
 * {768, 3072}, {768, 3000} was expected", "tensor output_norm.weight is q4_0, which is not
 * allowed here". */
const struct rgguf_tensor *rgguf_require_tensor(const struct rgguf *g, const char *name,
                                                uint32_t n_dims, const int64_t *ne,
                                                uint64_t allowed_types);

/* ---- writer ------------------------------------------------------------------------------ */

struct rgguf_writer;

struct rgguf_writer *rgguf_writer_create(void); /* NULL (error set) when out of memory */
void rgguf_writer_free(struct rgguf_writer *w); /* NULL is fine */

/* Each adder copies what it is given; keys must be unique (a duplicate fails). All return
 * false with the error set on failure (out of memory, duplicate key or tensor, bad shape). */
bool rgguf_writer_set_u32(struct rgguf_writer *w, const char *key, uint32_t v);
bool rgguf_writer_set_i32(struct rgguf_writer *w, const char *key, int32_t v);
bool rgguf_writer_set_u64(struct rgguf_writer *w, const char *key, uint64_t v);
bool rgguf_writer_set_f32(struct rgguf_writer *w, const char *key, float v);
bool rgguf_writer_set_bool(struct rgguf_writer *w, const char *key, bool v);
bool rgguf_writer_set_str(struct rgguf_writer *w, const char *key, const char *v);
/* A numeric array (elem_type not STRING/ARRAY): n packed elements. */
bool rgguf_writer_set_arr(struct rgguf_writer *w, const char *key, enum rgguf_vtype elem_type,
                          const void *data, uint64_t n);
bool rgguf_writer_set_arr_str(struct rgguf_writer *w, const char *key, const char *const *v,
                              uint64_t n);
/* Copies any key-value from a reader (e.g. the tokenizer of a vocabulary file). */
bool rgguf_writer_copy_kv(struct rgguf_writer *w, const struct rgguf *g, const char *key);
/* A tensor; data holds exactly its bytes (checked against type and shape). */
bool rgguf_writer_add_tensor(struct rgguf_writer *w, const char *name, uint32_t type,
                             uint32_t n_dims, const int64_t *ne, const void *data, size_t nbytes);
/* Writes the file (alignment: general.alignment if set, else 32). Writes to a temporary file
 * beside path and renames it, so that a failure never leaves a half-written file at path. */
bool rgguf_writer_write(struct rgguf_writer *w, const char *path);

#endif /* RECUR_GGUF_H */
