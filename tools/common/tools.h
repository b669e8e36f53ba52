/*
 * tools: the subcommands of the `recur` program. Each takes the arguments that follow its
 * name (argv[0] is the subcommand's name) and returns the process exit status: 0 done,
 * 1 a runtime failure (one line on stderr), 2 a usage error (message and usage on stderr).
 */
#ifndef RECUR_TOOLS_H
#define RECUR_TOOLS_H

/* printf-format checking for the tools' own message helpers. */
#if defined(__GNUC__) || defined(__clang__)
#define TOOL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TOOL_PRINTF(a, b)
#endif

/* Exit statuses shared by every subcommand. */
enum { TOOL_OK = 0, TOOL_FAIL = 1, TOOL_USAGE = 2 };

/* One entry of a program's command table (recur.c, dev/dev.c): the name, the entry point and
 * the line the program's --help gives it. */
struct tool_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

/* recur mkmodel, recur setmeta: development commands of the recur-dev program (tools/dev/),
 * run as `recur-dev CMD ARGS` from the folder of the running recur (tools/cli/recur.c). */
int cmd_dev(int argc, char **argv);
/* recur bench: prompt and generation speed against the machine's bounds (tools/cli/bench.c). */
int cmd_bench(int argc, char **argv);
/* recur quantize: a model's weight matrices in another type (tools/cli/quantize.c). */
int cmd_quantize(int argc, char **argv);
/* recur tokenize: token ids of a text (tools/cli/tokenize.c). */
int cmd_tokenize(int argc, char **argv);
/* recur run: generate text from a prompt (tools/cli/run.c). */
int cmd_run(int argc, char **argv);
/* recur chat: an interactive chat with the model's chat template (tools/cli/chat.c). */
int cmd_chat(int argc, char **argv);
/* recur perplexity: a model's perplexity on a text, as llama-perplexity
 * (tools/cli/perplexity.c). */
int cmd_perplexity(int argc, char **argv);
/* recur parallel: several continuations of one prompt in one batch per step
 * (tools/cli/parallel.c). */
int cmd_parallel(int argc, char **argv);
/* recur embed: the embeddings of texts, as llama-embedding (tools/cli/embed.c). */
int cmd_embed(int argc, char **argv);
/* recur serve: an HTTP server with continuous batching and prompt reuse (tools/serve/serve.c). */
int cmd_serve(int argc, char **argv);

#endif /* RECUR_TOOLS_H */
