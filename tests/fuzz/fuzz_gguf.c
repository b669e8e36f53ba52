/* libFuzzer target: the GGUF reader (src/gguf) on any bytes, then the vocabulary and model
 * loaders on what it accepts. Nothing may crash, leak or read out of bounds; a file it
 * accepts must answer every query it lists. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "vocab/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct rgguf *g = rgguf_open_buffer(data, size, "fuzz.gguf");
    if (!g) return 0;
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *name = rgguf_key_name(g, i);
        if (rgguf_find_key(g, name) < 0) __builtin_trap(); /* a listed key must be found */
        const char *s;
        size_t len;
        uint32_t u;
        rgguf_get_str(g, name, &s, &len);
        rgguf_get_u32(g, name, &u);
    }
    rvocab_free(rvocab_load(g));
    rgguf_close(g);
    /* the model loader reads files: write the accepted bytes to one */
    char path[] = "/tmp/recur-fuzz-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    if (write(fd, data, size) == (ssize_t)size) rmodel_free(rmodel_load(path, false, true));
    close(fd);
    unlink(path);
    return 0;
}
