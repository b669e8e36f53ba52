/*
 * chat_render: recur_chat_apply_template on the command line, for test_chat_templates.py.
 *   chat_render TEMPLATE ADD_ASS [ROLE CONTENT]...   the formatted chat on stdout, as is
 *   chat_render --name TEMPLATE                      the builtin name TEMPLATE resolves to
 * TEMPLATE is a file holding a template's text when such a file exists, else a builtin name.
 * Exit 1 with recur_last_error() on stderr when recur refuses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"

static char *read_template(const char *arg) {
    FILE *f = fopen(arg, "rb");
    if (!f) {
        char *s = malloc(strlen(arg) + 1);
        if (s) strcpy(s, arg);
        return s;
    }
    char *s = NULL;
    size_t len = 0, cap = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (len + 1 >= cap) {
            char *t = realloc(s, cap = cap * 2 + 4096);
            if (!t) {
                free(s);
                fclose(f);
                return NULL;
            }
            s = t;
        }
        s[len++] = (char)c;
    }
    fclose(f);
    if (!s && !(s = malloc(1))) return NULL;
    s[len] = '\0';
    return s;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--name") == 0) {
        char *t = read_template(argv[2]);
        const char *name = t ? recur_chat_template_name(t) : NULL;
        free(t);
        if (!name) {
            fprintf(stderr, "chat_render: %s\n", recur_last_error());
            return 1;
        }
        printf("%s\n", name);
        return 0;
    }
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: chat_render TEMPLATE ADD_ASS [ROLE CONTENT]...\n");
        return 2;
    }
    char *t = read_template(argv[1]);
    size_t n = (size_t)(argc - 3) / 2;
    struct recur_chat_message *msgs = calloc(n + 1, sizeof *msgs);
    if (!t || !msgs) return 1;
    for (size_t i = 0; i < n; i++) {
        msgs[i].role = argv[3 + 2 * i];
        msgs[i].content = argv[4 + 2 * i];
    }
    const bool add_ass = strcmp(argv[2], "1") == 0;
    int32_t len = recur_chat_apply_template(t, msgs, n, add_ass, NULL, 0);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (len < 0 || !buf || recur_chat_apply_template(t, msgs, n, add_ass, buf, len + 1) != len) {
        fprintf(stderr, "chat_render: %s\n", recur_last_error());
        return 1;
    }
    fwrite(buf, 1, (size_t)len, stdout);
    free(buf);
    free(msgs);
    free(t);
    return 0;
}
