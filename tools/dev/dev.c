/*
 * recur-dev: main of the development program. `recur-dev CMD ARGS` runs CMD; `recur CMD` runs
 * the same through this program, so tests, scripts and the README use the one spelling.
 */
#include <stdio.h>
#include <string.h>

#include "dev.h"
#include "tools.h"

static const struct tool_command commands[] = {
    {"mkmodel", cmd_mkmodel, "write a random-weight model (GGUF, llama.cpp's layout)"},
    {"setmeta", cmd_setmeta, "rewrite a GGUF file's string metadata, tensors unchanged"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: recur-dev COMMAND [ARGS...] (also run as `recur COMMAND`)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`recur-dev COMMAND --help` lists the flags of COMMAND.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TOOL_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return TOOL_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, argv[1]) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "recur-dev: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return TOOL_USAGE;
}
