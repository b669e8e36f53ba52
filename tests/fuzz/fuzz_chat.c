/* libFuzzer target: chat templates (src/chat, through recur.h) on any template text and any
 * messages. Input: byte 0 picks the template (below the number of builtin formats: that name;
 * else the first NUL-terminated piece of the rest is a template text, recognised or refused),
 * byte 1 bit 0 add_ass; the rest is messages, each a role byte (0 system, 1 user, 2 assistant,
 * 3 an unknown role) and a NUL-terminated content.
 *  - the length with no buffer equals the length written with room for it, the text is
 *    NUL-terminated there, and every smaller buffer receives exactly the text's first bytes
 *    with nothing written past them;
 *  - an unknown role or template fails with a message, never writes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 1 << 16) return 0;
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    const char *names[64];
    const int32_t n_names = recur_chat_builtin_templates(names, 64);
    size_t pos = 2;
    const char *tmpl;
    if (data[0] < n_names) {
        tmpl = names[data[0]];
    } else {
        tmpl = copy + pos;
        pos += strlen(tmpl) + 1;
    }
    const bool add_ass = data[1] & 1;
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    struct recur_chat_message msgs[MAX_MSGS];
    size_t n = 0;
    bool unknown_role = false;
    while (pos < size && n < MAX_MSGS) {
        int r = data[pos] & 3;
        unknown_role |= r == 3;
        msgs[n].role = roles[r];
        msgs[n].content = copy + pos + 1;
        pos += 1 + strlen(copy + pos + 1) + 1;
        n++;
    }
    const int32_t len = recur_chat_apply_template(tmpl, msgs, n, add_ass, NULL, 0);
    if (len < 0) {
        if (!*recur_last_error()) abort();
        free(copy);
        return 0;
    }
    if (unknown_role || !recur_chat_template_name(tmpl)) abort();
    char *full = malloc((size_t)len + 1);
    char *part = malloc((size_t)len + 2);
    if (full && part) {
        if (recur_chat_apply_template(tmpl, msgs, n, add_ass, full, len + 1) != len) abort();
        if (full[len] != '\0') abort();
        const int32_t sizes[] = {0, 1, len / 2, len > 0 ? len - 1 : 0, len};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            memset(part, 0x5a, (size_t)len + 2);
            if (recur_chat_apply_template(tmpl, msgs, n, add_ass, part, sizes[k]) != len) abort();
            if (memcmp(part, full, (size_t)sizes[k]) != 0) abort();
            for (int32_t i = sizes[k]; i < len + 2; i++)
                if ((unsigned char)part[i] != 0x5a) abort();
        }
    }
    free(full);
    free(part);
    free(copy);
    return 0;
}
