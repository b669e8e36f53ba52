/*
 * io: small byte-stream writer and reader interfaces used by every serialiser in recur
 * (memory states, context state files), with two implementations each: a caller-owned memory
 * buffer and a stdio file.
 *
 * Both keep a running XXH64 digest of the bytes that passed through them since the last
 * rio_*_digest_reset, so a format can end with a checksum that catches bit flips anywhere.
 *
 * Errors are sticky: after the first failed write or read every later call fails at once, and
 * the last error (core.h) says what went wrong and at which byte offset. A reader never hands
 * out bytes it does not have: a short read is a failure, not a partial result.
 */
#ifndef RECUR_IO_H
#define RECUR_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* xxhash (Debian's libxxhash-dev) is compiled into recur from its header (src/io/xxhash.c), so
 * the library has no link dependency for it. Its symbols get recur's own prefix, so a program
 * that also links the system libxxhash sees no clash; the digest state is embedded by value. */
#define XXH_NAMESPACE rio_
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* ---- writer ----------------------------------------------------------------------------- */

struct rio_writer {
    /* implementation: write n bytes; false with the last error set on failure */
    bool (*write)(struct rio_writer *w, const void *src, size_t n);
    void *impl;      /* buffer or FILE *, owned by whoever set the writer up */
    size_t cap;      /* buffer capacity (buffer writer only) */
    size_t n_done;   /* bytes written so far */
    bool failed;     /* sticky error */
    bool count_only; /* a sink that only counts (for sizing) */
    XXH64_state_t digest;
};

/* A writer into dst[0..cap). Writing past cap fails ("buffer of N bytes is too small").
 * dst NULL is an empty buffer (capacity 0). */
void rio_writer_buffer(struct rio_writer *w, void *dst, size_t cap);
/* A writer that stores nothing and only counts bytes: how big a stream will be. It does not
 * hash (sizing needs no digest): its digest stays that of no input. */
void rio_writer_counter(struct rio_writer *w);
/* A writer into an open stdio stream (not closed by the writer). */
void rio_writer_file(struct rio_writer *w, FILE *f);

bool rio_write(struct rio_writer *w, const void *src, size_t n);
bool rio_write_u32(struct rio_writer *w, uint32_t v);
bool rio_write_i32(struct rio_writer *w, int32_t v);
bool rio_write_u64(struct rio_writer *w, uint64_t v);

/* The XXH64 (seed 0) of the bytes written since the last reset (or since set-up). */
uint64_t rio_writer_digest(const struct rio_writer *w);
void rio_writer_digest_reset(struct rio_writer *w);

/* ---- reader ----------------------------------------------------------------------------- */

struct rio_reader {
    bool (*read)(struct rio_reader *r, void *dst, size_t n);
    const void *impl; /* buffer or FILE * */
    size_t size;      /* buffer size (buffer reader only) */
    size_t n_done;    /* bytes consumed so far */
    bool failed;
    XXH64_state_t digest;
};

/* A reader of src[0..size); src NULL is an empty stream. */
void rio_reader_buffer(struct rio_reader *r, const void *src, size_t size);
void rio_reader_file(struct rio_reader *r, FILE *f);

/* Reads exactly n bytes or fails ("stream ends at byte X, N more bytes were needed"). */
bool rio_read(struct rio_reader *r, void *dst, size_t n);
bool rio_read_u32(struct rio_reader *r, uint32_t *v);
bool rio_read_i32(struct rio_reader *r, int32_t *v);
bool rio_read_u64(struct rio_reader *r, uint64_t *v);

uint64_t rio_reader_digest(const struct rio_reader *r);
void rio_reader_digest_reset(struct rio_reader *r);

#endif /* RECUR_IO_H */
