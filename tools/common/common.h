/*
 * What the model-running subcommands (run, chat, parallel, perplexity, serve) share: one flag
 * table and its parser, loading the model and context, reading and tokenising the prompt,
 * decoding a prompt with a progress bar, and timing. Everything here uses only the public API
 * (recur.h).
 */
#ifndef RECUR_TOOLS_COMMON_H
#define RECUR_TOOLS_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "recur.h"

/* The programs of the flag table (common.c): each flag names the ones that accept it. */
enum gen_program {
    GEN_RUN = 1u << 0,
    GEN_CHAT = 1u << 1,
    GEN_PARALLEL = 1u << 2,
    GEN_PERPLEXITY = 1u << 3,
    GEN_SERVE = 1u << 4,
    GEN_EMBED = 1u << 5,
};

#define GEN_MAX_HOSTS 8
#define GEN_MAX_KEYS  16 /* --api-key on the command line; --api-key-file takes any number */

/* Room for the path gen_default_model makes. */
#define GEN_PATH_MAX 4096

/* What the model-running programs share: the model, its loading, the prompt, sampling. */
struct gen_opts {
    const char *model;
    char model_buf[GEN_PATH_MAX]; /* holds model when gen_default_model made it */
    const char *prompt;
    const char *prompt_file;
    int32_t n_predict;
    int32_t n_threads;
    uint32_t n_batch, n_ubatch;
    struct recur_sampler_params sampling;
    const char *state_in, *state_out;
    int32_t n_parallel;
    bool n_parallel_given; /* -np was on the command line */
    int32_t n_ctx;         /* recur perplexity: tokens per window */
    int32_t attn_ctx;      /* -c of run, chat, parallel: a hybrid's attention budget, 0: default */
    const char *cache_type_k; /* --cache-type-k / -v: a hybrid's attention rows, NULL: default */
    const char *cache_type_v;
    int32_t n_chunks;         /* -1: all */
    const char *prompt_cache; /* the prefix state cache's file, NULL: no cache */
    int32_t cache_mb;         /* its budget (recur serve: --prefix-cache-mb) */
    int32_t lookup;           /* draft tokens per step (prompt lookup decoding), 0: off */
    /* structured output: at most one of them */
    const char *grammar;      /* GBNF text (--grammar) */
    const char *grammar_file; /* GBNF file (--grammar-file) */
    const char *json_schema;  /* JSON schema text (--json-schema) */
    bool no_mmap, mlock;
    bool no_repack; /* recur_model_params.repack false (--no-repack) */
    /* the prefix cache's second tier */
    const char *prefix_store; /* --prefix-cache-store URL, NULL: none */
    int64_t prefix_ttl_s;
    int64_t prefix_store_mb;
    /* recur chat and recur serve */
    const char *chat_template; /* --chat-template NAME, NULL: the model's (or the default) */
    const char *system_prompt; /* -sys TEXT, NULL: none */
    /* recur embed and recur serve --embedding */
    const char *pooling;            /* --pooling NAME, NULL: last (gen_pooling) */
    int32_t embd_normalize;         /* recur embed: --embd-normalize (default 2) */
    const char *embd_separator;     /* recur embed: splits -p into inputs (default "\n") */
    const char *embd_output_format; /* recur embed: NULL (plain), array, json, json+ */
};

/* recur serve's own flags (tools/serve/), here because the flag table stores into them. */
struct serve_opts {
    const char *hosts[GEN_MAX_HOSTS]; /* --host, repeatable */
    int n_hosts;                      /* 0: 127.0.0.1 */
    int32_t n_predict;                /* -n: a request's default length, -1: none given */
    int32_t n_ctx;                    /* -c: tokens one sequence may hold, 0: no limit */
    const char *alias; /* -a: names, comma-separated; the first one answers as the model's */
    bool no_slots;
    bool spm_infill; /* --spm-infill: /infill's order is suffix, prefix, middle */
    bool no_webui;   /* --no-webui, --no-ui: no page at / */
    bool metrics;    /* --metrics: accepted; /metrics is served either way (README.md says why) */
    bool embedding;  /* --embedding(s): the embeddings endpoints, no completions */
    const char *slot_save_path;
    /* --reasoning-format NAME, NULL: auto */
    const char *reasoning_format;
    int32_t port;
    const char *api_keys[GEN_MAX_KEYS]; /* --api-key, repeatable */
    int n_api_keys;
    const char *api_key_file;
    int32_t threads_http; /* event-loop threads of the HTTP side */
    int32_t conn_max;     /* connections at once */
    int32_t conn_per_ip;  /* connections at once from one address, 0: no limit */
    double read_s;        /* the most seconds a request's headers and body may take */
    double idle_s;        /* an idle kept-alive connection is closed after this */
    /* --cors-origins, --cors-methods, --cors-headers as given (NULL: the defaults) */
    const char *cors_origins, *cors_methods, *cors_headers;
    bool no_cors_credentials; /* --no-cors-credentials (the last of the two switches wins) */
    int32_t queue_max;
    int32_t max_tokens;
    int64_t max_answer_mb; /* an answer's estimated JSON, in MiB (0: no limit) */
    double timeout_s;
};

/* Parses argv (argv[0] = the subcommand) with the flag table's rows that program (one of
 * enum gen_program) accepts, into o and, for GEN_SERVE, srv (NULL for the others). Returns -1
 * to go on, or the exit status to return now (0 after --help, 2 after a usage error, with the
 * message and the program's flags on stderr). */
int gen_parse(int argc, char **argv, unsigned program, const char *summary, struct gen_opts *o,
              struct serve_opts *srv);

/* The model used without -m: $RECUR_MODEL when set, else the trained model that ships in the
 * source tree, found as models/recur-mamba-fortunes.gguf beside the recur executable (the build
 * links the tree's models/ folder there, so no path of the tree is compiled in). The path is
 * written into buf (GEN_PATH_MAX bytes) unless it is the environment's; returns it. */
const char *gen_default_model(char *buf);

/* The pooling --pooling names (none, mean, cls, last; NULL: last, a recurrent model's natural
 * pooling), or -1 for another name. */
int gen_pooling(const char *name);

/* out[0..n) = in[0..n) normalised as llama.cpp's common_embd_normalize (llama-server's
 * embd_normalize, llama-embedding's --embd-normalize): norm -1 none, 0 divided by max|x| / 32760
 * (the int16 range), 2 euclidean, any other p the p-norm (1: taxicab); the sum in double, a zero
 * vector stays zero. in and out may be the same. */
void gen_embd_normalize(const float *in, float *out, int32_t n, int32_t norm);

/* A decimal integer in [min, max], the whole string; false otherwise. */
bool gen_parse_long(const char *s, long min, long max, long *out);

/* The prompt text (from -p or -f), malloc'd and NUL-terminated; NULL with a message on stderr.
 * *len gets its length. */
char *gen_prompt_text(const struct gen_opts *o, size_t *len);

/* A whole file, malloc'd and NUL-terminated (what names it in messages); NULL with a message
 * on stderr. *len gets its length. */
char *gen_read_file(const char *path, const char *what, size_t *len);

/* The grammar that --grammar, --grammar-file or --json-schema ask for (malloc'd GBNF text), in
 * *out; *out is NULL when none was given. Returns TOOL_OK, or TOOL_FAIL (file unreadable) /
 * TOOL_USAGE (a schema recur cannot convert) with a message on stderr. */
int gen_grammar_text(const struct gen_opts *o, char **out);

/* Puts a grammar sampler for grammar (GBNF, NULL: none) in front of chain, which must already
 * have accepted the prompt's tokens: *chain becomes a new chain [grammar, old chain], and
 * *grammar_out (when not NULL) the grammar sampler in it (owned by the chain). Returns
 * TOOL_OK, or TOOL_USAGE for a bad grammar (its line and column on stderr) / TOOL_FAIL. */
int gen_add_grammar(const struct recur_model *model, const char *grammar,
                    struct recur_sampler **grammar_out, struct recur_sampler **chain);

/* Tokens of text (with BOS when the model asks for it), malloc'd; NULL with a message. */
recur_token *gen_tokenize(const struct recur_model *model, const char *text, size_t len,
                          int32_t *n_tokens);

/* Loads the model and makes a context for n_seq sequences; false with a message on stderr.
 * The output paths (--state-out, --prompt-cache) are checked first, so that one that cannot
 * be written fails before any work (recur_file_check_writable).
 * With --prompt-cache the context has a prefix cache of --prompt-cache-mb, keeps the last two
 * states of each sequence (so a prompt minus its last token can be stored) and a checkpoint
 * every 64 positions (so do --state-in and --state-out, whose files then carry them); with
 * --lookup N it keeps the last N + 1 states (drafts roll back). */
bool gen_load(const struct gen_opts *o, uint32_t n_seq, struct recur_model **model,
              struct recur_context **ctx);
/* gen_load in two steps, for a caller that changes the context parameters in between. */
struct recur_context_params gen_context_params(const struct gen_opts *o, uint32_t n_seq);
/* The recur_type of an attention cache type's name (f32, f16, q8_0, as llama.cpp's
 * --cache-type-k names them), -1 for another name. */
int gen_cache_type(const char *name);
bool gen_load_params(const struct gen_opts *o, struct recur_context_params cp,
                     struct recur_model **model, struct recur_context **ctx);

/* When model's file is mapped, a SIGBUS from reading its pages (the file was cut short under
 * the process) prints one line naming path and what happened, and the process exits with
 * status 1 instead of dying silently. Once per process; gen_load_params calls it. */
void gen_watch_mapping(const struct recur_model *model, const char *path);

/* Decodes tokens on sequence seq at the positions that follow, in chunks of n_batch, with a
 * progress bar on stderr when it is a terminal; logits for the last token. False with a
 * message on stderr. */
bool gen_decode_prompt(struct recur_context *ctx, recur_seq_id seq, const recur_token *tokens,
                       int32_t n_tokens);

/* Writes the text of a token to out (control tokens are not shown). */
void gen_print_piece(FILE *out, const struct recur_model *model, recur_token token);

double gen_now_s(void);

/* --prompt-cache: loads the cache file into ctx when it exists. False (a note on stderr) when
 * the file exists but cannot be used: the caller then must not overwrite it. */
bool gen_cache_load(const struct gen_opts *o, struct recur_context *ctx);
/* Stores what seq holds (tokens[0..n)) in ctx's cache; a note on failure. */
void gen_cache_store(struct recur_context *ctx, recur_seq_id seq, const recur_token *tokens,
                     int32_t n);
/* --prefix-cache-store: opens the store and makes it ctx's second tier (*out NULL without the
 * flag); false with a message. gen_store_detach writes what is queued and closes it. */
struct store;
bool gen_store_attach(const struct gen_opts *o, struct recur_context *ctx, struct store **out);
void gen_store_detach(struct recur_context *ctx, struct store *st);
/* Writes the cache back to its file; false with a message. */
bool gen_cache_save(const struct gen_opts *o, struct recur_context *ctx);

/* The weight types of a model file, as a mix: each type's tensors and bytes. */
struct gen_type_share {
    const char *type; /* "q4_K" (static) */
    int32_t tensors;
    uint64_t bytes;
};
#define GEN_TYPES_MAX 32
/* Fills out (GEN_TYPES_MAX entries) with the model's tensor types, most bytes first; returns
 * how many (0 for a vocabulary-only model). */
int gen_type_mix(const struct recur_model *model, struct gen_type_share out[GEN_TYPES_MAX]);
/* The mix as text, "q4_K 71%, q6_K 20%, f32 9%" (shares of the tensor bytes, those under 1%
 * left out), into buf. */
void gen_type_mix_text(const struct recur_model *model, char *buf, size_t size);

#endif
