/*
 * recur: the command-line program. main only dispatches to a subcommand (tools.h); each
 * subcommand parses its own flags, so that `recur CMD --help` documents exactly what CMD takes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools.h"

#ifndef RECUR_VERSION_STRING
#define RECUR_VERSION_STRING "unknown"
#endif

static const struct tool_command commands[] = {
    {"run", cmd_run, "generate text from a prompt, streaming it"},
    {"chat", cmd_chat, "chat with a model in the terminal, with its chat template"},
    {"parallel", cmd_parallel, "generate several continuations of one prompt at once"},
    {"serve", cmd_serve, "serve completions over HTTP (OpenAI and llama.cpp shapes)"},
    {"embed", cmd_embed, "print the embeddings of texts (pooled final hidden states)"},
    {"perplexity", cmd_perplexity, "measure a model's perplexity on a text file"},
    {"bench", cmd_bench, "measure prompt and generation speed against the machine's bounds"},
    {"quantize", cmd_quantize,
     "rewrite a model's weights in one type, or a llama-quantize mix such as Q4_K_M"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"mkmodel", cmd_dev, "write a random-weight model (GGUF, llama.cpp's layout; recur-dev)"},
    {"setmeta", cmd_dev, "rewrite a GGUF file's string metadata, tensors unchanged (recur-dev)"},
};

/* The development commands live in recur-dev (tools/dev/), which may reach under the public
 * API; this program links only the public library. recur-dev is looked for beside this
 * program, as the build puts it, so that `recur mkmodel` works wherever recur is run from. */
int cmd_dev(int argc, char **argv) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    char *slash = NULL;
    if (n > 0) {
        path[n] = '\0';
        slash = strrchr(path, '/');
    }
    static const char dev[] = "recur-dev";
    if (!slash || (size_t)(slash + 1 - path) + sizeof dev > sizeof path) {
        fprintf(stderr, "recur: %s: cannot find this program's folder to run recur-dev\n", argv[0]);
        return TOOL_FAIL;
    }
    memcpy(slash + 1, dev, sizeof dev);
    /* recur-dev gets the same command line under its own name */
    char **dev_argv = calloc((size_t)argc + 2, sizeof *dev_argv);
    if (!dev_argv) {
        fprintf(stderr, "recur: out of memory\n");
        return TOOL_FAIL;
    }
    dev_argv[0] = path;
    memcpy(dev_argv + 1, argv, sizeof *argv * (size_t)argc);
    execv(path, dev_argv);
    free(dev_argv);
    fprintf(stderr,
            "recur: %s is a development command of recur-dev, which cannot be run from %s "
            "(%s): build the recur-dev target\n",
            argv[0], path, strerror(errno));
    return TOOL_FAIL;
}

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: recur COMMAND [ARGS...]\n"
                 "       recur help [COMMAND] | recur --help | recur --version\n\n"
                 "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`recur COMMAND --help` lists the flags of COMMAND.\n");
}

static const struct tool_command *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return TOOL_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        (strcmp(cmd, "help") == 0 && argc == 2)) {
        usage(stdout);
        return TOOL_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("recur %s\n", RECUR_VERSION_STRING);
        return TOOL_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        /* `recur help CMD` is `recur CMD --help`, so the text lives in one place. */
        const struct tool_command *c = find_command(argv[2]);
        if (!c) {
            fprintf(stderr, "recur: help: unknown command '%s'\n\n", argv[2]);
            usage(stderr);
            return TOOL_USAGE;
        }
        if (argc > 3) {
            fprintf(stderr, "recur: help: unexpected argument '%s'\n\n", argv[3]);
            usage(stderr);
            return TOOL_USAGE;
        }
        char help_flag[] = "--help";
        char *sub_argv[] = {argv[2], help_flag, NULL};
        return c->run(2, sub_argv);
    }
    const struct tool_command *c = find_command(cmd);
    if (!c) {
        fprintf(stderr, "recur: unknown command '%s'\n\n", cmd);
        usage(stderr);
        return TOOL_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}
