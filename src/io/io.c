#include "io.h"

#include <string.h>

#include "../core/core.h"

/* ---- writer ----------------------------------------------------------------------------- */

static bool buffer_write(struct rio_writer *w, const void *src, size_t n) {
    if (n > w->cap - w->n_done) {
        rcore_error_set("write of %zu bytes at byte %zu: buffer of %zu bytes is too small", n,
                        w->n_done, w->cap);
        return false;
    }
    if (n) memcpy((uint8_t *)w->impl + w->n_done, src, n);
    return true;
}

static bool counter_write(struct rio_writer *w, const void *src, size_t n) {
    (void)w;
    (void)src;
    (void)n;
    return true;
}

static bool file_write(struct rio_writer *w, const void *src, size_t n) {
    if (n && fwrite(src, 1, n, (FILE *)w->impl) != n) {
        rcore_error_set("write of %zu bytes at byte %zu failed (disk full?)", n, w->n_done);
        return false;
    }
    return true;
}

static void writer_init(struct rio_writer *w, bool (*fn)(struct rio_writer *, const void *, size_t),
                        void *impl, size_t cap) {
    memset(w, 0, sizeof *w);
    w->write = fn;
    w->impl = impl;
    w->cap = cap;
    XXH64_reset(&w->digest, 0);
}

void rio_writer_buffer(struct rio_writer *w, void *dst, size_t cap) {
    writer_init(w, buffer_write, dst, dst ? cap : 0);
}

void rio_writer_counter(struct rio_writer *w) {
    writer_init(w, counter_write, NULL, 0);
    w->count_only = true;
}

void rio_writer_file(struct rio_writer *w, FILE *f) {
    writer_init(w, file_write, f, 0);
}

bool rio_write(struct rio_writer *w, const void *src, size_t n) {
    if (w->failed) return false;
    if (!w->write(w, src, n)) {
        w->failed = true;
        return false;
    }
    /* a counting writer is used for sizing only; hashing would be wasted work */
    if (!w->count_only && n) XXH64_update(&w->digest, src, n);
    w->n_done += n;
    return true;
}

/* Integers are written little-endian whatever the host, so files move between machines. */
bool rio_write_u32(struct rio_writer *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return rio_write(w, b, sizeof b);
}

bool rio_write_i32(struct rio_writer *w, int32_t v) {
    return rio_write_u32(w, (uint32_t)v);
}

bool rio_write_u64(struct rio_writer *w, uint64_t v) {
    return rio_write_u32(w, (uint32_t)v) && rio_write_u32(w, (uint32_t)(v >> 32));
}

uint64_t rio_writer_digest(const struct rio_writer *w) {
    return XXH64_digest(&w->digest);
}

void rio_writer_digest_reset(struct rio_writer *w) {
    XXH64_reset(&w->digest, 0);
}

/* ---- reader ----------------------------------------------------------------------------- */

static bool buffer_read(struct rio_reader *r, void *dst, size_t n) {
    if (n > r->size - r->n_done) {
        rcore_error_set("stream ends at byte %zu, %zu more bytes were needed", r->size,
                        n - (r->size - r->n_done));
        return false;
    }
    if (n) memcpy(dst, (const uint8_t *)r->impl + r->n_done, n);
    return true;
}

static bool file_read(struct rio_reader *r, void *dst, size_t n) {
    size_t got = n ? fread(dst, 1, n, (FILE *)r->impl) : 0;
    if (got != n) {
        if (ferror((FILE *)r->impl))
            rcore_error_set("read error at byte %zu", r->n_done + got);
        else
            rcore_error_set("stream ends at byte %zu, %zu more bytes were needed", r->n_done + got,
                            n - got);
        return false;
    }
    return true;
}

void rio_reader_buffer(struct rio_reader *r, const void *src, size_t size) {
    memset(r, 0, sizeof *r);
    r->read = buffer_read;
    r->impl = src;
    r->size = src ? size : 0;
    XXH64_reset(&r->digest, 0);
}

void rio_reader_file(struct rio_reader *r, FILE *f) {
    memset(r, 0, sizeof *r);
    r->read = file_read;
    r->impl = f;
    XXH64_reset(&r->digest, 0);
}

bool rio_read(struct rio_reader *r, void *dst, size_t n) {
    if (r->failed) return false;
    if (!r->read(r, dst, n)) {
        r->failed = true;
        return false;
    }
    if (n) XXH64_update(&r->digest, dst, n);
    r->n_done += n;
    return true;
}

bool rio_read_u32(struct rio_reader *r, uint32_t *v) {
    uint8_t b[4];
    if (!rio_read(r, b, sizeof b)) return false;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return true;
}

bool rio_read_i32(struct rio_reader *r, int32_t *v) {
    uint32_t u;
    if (!rio_read_u32(r, &u)) return false;
    *v = (int32_t)u;
    return true;
}

bool rio_read_u64(struct rio_reader *r, uint64_t *v) {
    uint32_t lo, hi;
    if (!rio_read_u32(r, &lo) || !rio_read_u32(r, &hi)) return false;
    *v = (uint64_t)hi << 32 | lo;
    return true;
}

uint64_t rio_reader_digest(const struct rio_reader *r) {
    return XXH64_digest(&r->digest);
}

void rio_reader_digest_reset(struct rio_reader *r) {
    XXH64_reset(&r->digest, 0);
}
