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

/* ---- files (io_file.c) ------------------------------------------------------------------ */

struct stat;

/* Opens path to read without blocking on what is not a regular file: the open is O_NONBLOCK
 * and checked with fstat before any read, so a FIFO or a device is refused at once. Returns
 * the descriptor (blocking again; the caller closes it) and fills st_out when not NULL; -1
 * with the error "PATH: cannot open: REASON" or "PATH: not a regular file (a FIFO)". */
int rio_open_regular(const char *path, struct stat *st_out);
/* The same as a stdio stream ("rb"); NULL with the error set. */
FILE *rio_fopen_regular(const char *path);

/* The file a replacement of path writes: path, or the final target of its chain of symbolic
 * links (relative links resolved from their folder; a dangling link's target is a new file).
 * malloc'd; *exists tells whether it exists, and then st_out (when not NULL) gets its stat.
 * NULL with the error set when the target exists and is not a regular file (refused: a
 * device, FIFO or folder is never replaced), on a link loop, or on allocation failure. */
char *rio_replace_target(const char *path, struct stat *st_out, bool *exists);

/* Whether rio_replace(path) can succeed as far as can be told before writing: the target
 * (rio_replace_target) is a regular file or absent, and its folder lets this process create
 * files. For callers that would otherwise find out only after a long computation. False
 * with the error naming the path, the folder and the reason. */
bool rio_check_replaceable(const char *path);

/* Replaces the contents of path crash-safely: write(arg, w) fills a new file in the target's
 * folder (see rio_replace_target; the target keeps its permission bits, a new file gets 0666
 * less the umask), which is flushed, fsynced and renamed over the target, then the folder is
 * fsynced. A failure of write (its error is kept, prefixed with path), of the disk, or a kill
 * at any moment leaves the old file as it was. The new file is an O_TMPFILE until it is
 * complete, so a killed writer leaves nothing; where O_TMPFILE is missing it is named
 * ".recur.tmp-PID-XXXXXX" in the target's folder from the start (short, so that a target name
 * of NAME_MAX bytes works), and each call first removes such files of writers that are no
 * longer running. *n_written (when not NULL) gets the bytes written, 0 on
 * failure. */
bool rio_replace(const char *path, bool (*write)(void *arg, struct rio_writer *w), void *arg,
                 size_t *n_written);
/* rio_replace, with use_tmpfile false forcing the named temporary file (for tests). */
bool rio_replace_ex(const char *path, bool (*write)(void *arg, struct rio_writer *w), void *arg,
                    size_t *n_written, bool use_tmpfile);

#endif /* RECUR_IO_H */
