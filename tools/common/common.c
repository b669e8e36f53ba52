/* Shared by the model-running subcommands (see common.h). */
#include "common.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "tools.h"

/* How a flag's value is read and stored. */
enum flag_kind {
    FLAG_ON,      /* a switch: sets the bool at `at` */
    FLAG_OFF,     /* a switch: clears it */
    FLAG_TEXT,    /* any text (const char *) */
    FLAG_NAME,    /* text that is not empty */
    FLAG_LIST,    /* text that is not empty, repeatable: up to max of them, the count at count_at */
    FLAG_I32,     /* a whole number in [min, max]: int32_t */
    FLAG_U32,     /* uint32_t */
    FLAG_I64,     /* int64_t */
    FLAG_SECONDS, /* a whole number of seconds, stored as double */
    FLAG_F32,     /* a decimal number in [min, max]: float */
    FLAG_SEED,    /* an unsigned 64-bit decimal */
};

/* Which options struct a flag's value goes to. */
enum flag_in { IN_GEN, IN_SERVE };

struct flag {
    const char *short_name; /* NULL: none */
    const char *long_name;
    const char *arg; /* NULL: a switch */
    unsigned programs;
    enum flag_kind kind;
    enum flag_in in;
    size_t at; /* offset of the value in its struct */
    double min, max;
    const char *help;
    size_t count_at; /* FLAG_LIST: offset of the count (int) */
    bool marks;      /* sets gen_opts.n_parallel_given */
};

#define RUN        GEN_RUN
#define CHAT       GEN_CHAT
#define PAR        GEN_PARALLEL
#define PPL        GEN_PERPLEXITY
#define SERVE      GEN_SERVE
#define EMBED      GEN_EMBED
#define GEN(field) IN_GEN, offsetof(struct gen_opts, field)
#define SRV(field) IN_SERVE, offsetof(struct serve_opts, field)
#define SAMPLE     (RUN | CHAT | PAR)
/* a row without a count (FLAG_LIST) or a mark */
#define ROW(s, l, arg, progs, kind, where, min, max, help)                                         \
    { s, l, arg, progs, kind, where, min, max, help, 0, false }

/* Every flag of the model-running programs, in the order --help lists them. */
static const struct flag flags[] = {
    ROW("-m", "--model", "FILE", RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_TEXT, GEN(model), 0,
        0, "model file (GGUF); default $RECUR_MODEL, else the model shipped with recur"),
    ROW("-p", "--prompt", "TEXT", RUN | PAR | EMBED, FLAG_TEXT, GEN(prompt), 0, 0, "prompt text"),
    ROW("-f", "--file", "FILE", RUN | PAR | PPL | EMBED, FLAG_TEXT, GEN(prompt_file), 0, 0,
        "read the prompt from FILE"),
    ROW("-n", "--n-predict", "N", SAMPLE, FLAG_I32, GEN(n_predict), 0, INT32_MAX,
        "tokens to generate (default 64)"),
    ROW("-t", "--threads", "N", RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_I32, GEN(n_threads), 1,
        1024, "threads (default: the CPUs online, at most 16)"),
    ROW("-b", "--batch-size", "N", SAMPLE | SERVE | EMBED, FLAG_U32, GEN(n_batch), 1, 1 << 24,
        "most tokens per decode call (default 2048)"),
    ROW("-ub", "--ubatch-size", "N", SAMPLE | PPL | SERVE | EMBED, FLAG_U32, GEN(n_ubatch), 1,
        1 << 24, "most tokens computed at once (default 512)"),
    ROW(NULL, "--temp", "T", SAMPLE, FLAG_F32, GEN(sampling.temp), 0, 100,
        "temperature; 0 = greedy (default 0.8)"),
    ROW(NULL, "--top-k", "K", SAMPLE, FLAG_I32, GEN(sampling.top_k), 0, INT32_MAX,
        "keep the K most likely tokens; 0 = all (default 40)"),
    ROW(NULL, "--top-p", "P", SAMPLE, FLAG_F32, GEN(sampling.top_p), 0, 1,
        "keep the most likely tokens up to mass P (default 0.95)"),
    ROW(NULL, "--min-p", "P", SAMPLE, FLAG_F32, GEN(sampling.min_p), 0, 1,
        "drop tokens below P x the best (default 0.05)"),
    ROW("-s", "--seed", "S", SAMPLE, FLAG_SEED, GEN(sampling.seed), 0, 0,
        "sampling seed (default 0)"),
    ROW(NULL, "--repeat-penalty", "F", SAMPLE, FLAG_F32, GEN(sampling.penalty_repeat), 0, 100,
        "repetition penalty (default 1.0 = off)"),
    ROW(NULL, "--repeat-last-n", "N", SAMPLE, FLAG_I32, GEN(sampling.penalty_last_n), 0, 1 << 20,
        "tokens the penalties look back (default 64)"),
    ROW(NULL, "--frequency-penalty", "F", SAMPLE, FLAG_F32, GEN(sampling.penalty_freq), -100, 100,
        "frequency penalty (default 0)"),
    ROW(NULL, "--presence-penalty", "F", SAMPLE, FLAG_F32, GEN(sampling.penalty_present), -100, 100,
        "presence penalty (default 0)"),
    ROW(NULL, "--state-in", "FILE", RUN, FLAG_TEXT, GEN(state_in), 0, 0,
        "start from a saved state; prompt tokens it holds are not decoded again"),
    ROW(NULL, "--state-out", "FILE", RUN, FLAG_TEXT, GEN(state_out), 0, 0,
        "save the state (and its tokens) at the end"),
    {"-np", "--parallel", "N", PAR | PPL | SERVE, FLAG_I32, GEN(n_parallel), 1, 4096,
     "sequences run at once (default 8; serve: 16)", 0, true},
    ROW("-c", "--ctx-size", "N", PPL, FLAG_I32, GEN(n_ctx), 2, 1 << 20,
        "tokens per evaluation window (default 256)"),
    ROW("-c", "--ctx-size", "N", RUN | CHAT | PAR | EMBED, FLAG_I32, GEN(attn_ctx), 1, 1 << 24,
        "a hybrid model's attention cache: the tokens whose K and V rows the sequences hold in "
        "all (default 4096; a recurrent model has none)"),
    ROW(NULL, "--cache-type-k", "TYPE", RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_NAME,
        GEN(cache_type_k), 0, 0,
        "a hybrid model's attention K rows: f32 (default), f16 or q8_0 (a recurrent model has "
        "none)"),
    ROW(NULL, "--cache-type-v", "TYPE", RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_NAME,
        GEN(cache_type_v), 0, 0, "a hybrid model's attention V rows: f32 (default), f16 or q8_0"),
    ROW(NULL, "--chunks", "N", PPL, FLAG_I32, GEN(n_chunks), 1, INT32_MAX,
        "evaluate only the first N windows (default: all)"),
    ROW(NULL, "--prompt-cache", "FILE", RUN | PAR, FLAG_TEXT, GEN(prompt_cache), 0, 0,
        "keep prompt states in FILE across runs: a prompt that begins as an earlier one (or its "
        "reply) decodes only the rest"),
    ROW(NULL, "--prompt-cache-mb", "N", RUN | PAR, FLAG_I32, GEN(cache_mb), 1, 1 << 20,
        "the prompt cache's budget (default 512)"),
    ROW(NULL, "--lookup", "N", RUN, FLAG_I32, GEN(lookup), 1, 64,
        "draft up to N tokens from the text so far and verify them in one batch (same output, "
        "fewer steps on repetitive text)"),
    {NULL, "--host", "ADDR", SERVE, FLAG_LIST, SRV(hosts), 0, GEN_MAX_HOSTS,
     "address to listen on, IPv4 or IPv6; repeat to listen on several (default 127.0.0.1)",
     offsetof(struct serve_opts, n_hosts), false},
    ROW(NULL, "--port", "N", SERVE, FLAG_I32, SRV(port), 0, 65535,
        "port to listen on (default 8080; 0: any free port)"),
    {NULL, "--api-key", "KEY", SERVE, FLAG_LIST, SRV(api_keys), 0, GEN_MAX_KEYS,
     "require \"Authorization: Bearer KEY\" or \"X-Api-Key: KEY\"; repeat for several keys, "
     "each with its own prompt cache and slot files",
     offsetof(struct serve_opts, n_api_keys), false},
    ROW(NULL, "--queue", "N", SERVE, FLAG_I32, SRV(queue_max), 0, 1 << 20,
        "requests that may wait for a slot (default 64)"),
    ROW(NULL, "--max-tokens", "N", SERVE, FLAG_I32, SRV(max_tokens), 1, 1 << 24,
        "most tokens a request may ask for (default 4096)"),
    ROW(NULL, "--timeout", "S", SERVE, FLAG_SECONDS, SRV(timeout_s), 1, 86400,
        "seconds a request may take (default 600)"),
    ROW(NULL, "--prefix-cache-mb", "N", SERVE, FLAG_I32, GEN(cache_mb), 1, 1 << 20,
        "the prefix state cache's budget in MiB (default 512)"),
    ROW("-n", "--n-predict", "N", SERVE, FLAG_I32, SRV(n_predict), -1, 1 << 24,
        "tokens a request that names no length generates (default: --max-tokens for "
        "/completion, 16 for /v1/completions); not a cap"),
    ROW("-c", "--ctx-size", "N", SERVE, FLAG_I32, SRV(n_ctx), 0, INT32_MAX,
        "most tokens (prompt + generated) one sequence may hold; a longer prompt is refused, "
        "generation stops there (default 0: no limit, a recurrent state has no window; a hybrid "
        "model's slots then take 4096, its attention cache -c x --parallel tokens)"),
    ROW("-a", "--alias", "NAMES", SERVE, FLAG_NAME, SRV(alias), 0, 0,
        "the model's names in the API, comma-separated: the first answers as the model's, all "
        "are listed in /v1/models' aliases (default: its file's name)"),
    ROW(NULL, "--embedding", NULL, SERVE, FLAG_ON, SRV(embedding), 0, 0,
        "serve embeddings (/v1/embeddings, /embeddings, /embedding) and no completions, as "
        "llama-server's --embedding"),
    ROW(NULL, "--embeddings", NULL, SERVE, FLAG_ON, SRV(embedding), 0, 0,
        "the same as --embedding"),
    ROW(NULL, "--pooling", "NAME", SERVE | EMBED, FLAG_NAME, GEN(pooling), 0, 0,
        "pooling of an input's hidden states: none (every token's), mean, cls (the first "
        "token's) or last (default: last, a recurrent model's natural pooling; rank is not "
        "supported)"),
    ROW(NULL, "--embd-normalize", "N", EMBED, FLAG_I32, GEN(embd_normalize), -1, INT32_MAX,
        "normalisation of every printed vector (with pooling none each token's): -1 none, 0 max "
        "absolute (int16 range), 1 taxicab, "
        "2 euclidean (default), >2 p-norm"),
    ROW(NULL, "--embd-separator", "TEXT", EMBED, FLAG_NAME, GEN(embd_separator), 0, 0,
        "splits the prompt into inputs, each embedded (default: a newline)"),
    ROW(NULL, "--embd-output-format", "FORMAT", EMBED, FLAG_TEXT, GEN(embd_output_format), 0, 0,
        "'' (default: a line per embedding), array (a JSON array of arrays), json (OpenAI's "
        "shape), json+ (json and the cosine similarity matrix) or raw (values only, a line "
        "each)"),
    ROW(NULL, "--no-slots", NULL, SERVE, FLAG_ON, SRV(no_slots), 0, 0, "GET /slots answers 501"),
    ROW(NULL, "--spm-infill", NULL, SERVE, FLAG_ON, SRV(spm_infill), 0, 0,
        "POST /infill puts the suffix before the prefix (Suffix/Prefix/Middle), as some models "
        "prefer (default: Prefix/Suffix/Middle)"),
    ROW(NULL, "--reasoning-format", "FORMAT", SERVE, FLAG_NAME, SRV(reasoning_format), 0, 0,
        "how a chat answer's <think> reasoning is returned: none (left in the content), "
        "deepseek or auto (apart, in reasoning_content), deepseek-legacy (apart, but kept "
        "in the content between its tags when streamed) (default auto)"),
    ROW(NULL, "--no-webui", NULL, SERVE, FLAG_ON, SRV(no_webui), 0, 0,
        "no web page at / (chat and playground in the browser): / answers 404"),
    ROW(NULL, "--no-ui", NULL, SERVE, FLAG_ON, SRV(no_webui), 0, 0,
        "the same as --no-webui (llama-server's current name)"),
    ROW(NULL, "--metrics", NULL, SERVE, FLAG_ON, SRV(metrics), 0, 0,
        "accepted for llama-server's command lines: GET /metrics is served without it too"),
    ROW(NULL, "--slot-save-path", "DIR", SERVE, FLAG_NAME, SRV(slot_save_path), 0, 0,
        "directory of POST /slots/{id}?action=save|restore files (default: none, those actions "
        "answer 501)"),
    ROW(NULL, "--chat-template", "NAME", CHAT | SERVE, FLAG_NAME, GEN(chat_template), 0, 0,
        "chat template: a builtin name (chatml, llama3, gemma, ...) or a template's text; default "
        "the model's, else chatml"),
    ROW("-sys", "--system-prompt", "TEXT", CHAT, FLAG_TEXT, GEN(system_prompt), 0, 0,
        "a system message that starts the conversation"),
    ROW(NULL, "--grammar", "GBNF", RUN | CHAT, FLAG_TEXT, GEN(grammar), 0, 0,
        "constrain the output to a GBNF grammar (llama.cpp's syntax; rule root)"),
    ROW(NULL, "--grammar-file", "FILE", RUN | CHAT, FLAG_TEXT, GEN(grammar_file), 0, 0,
        "the GBNF grammar from FILE"),
    ROW(NULL, "--json-schema", "JSON", RUN | CHAT, FLAG_TEXT, GEN(json_schema), 0, 0,
        "constrain the output to JSON that matches the schema"),
    ROW(NULL, "--no-mmap", NULL, RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_ON, GEN(no_mmap), 0,
        0,
        "read the weights into memory instead of mapping the file (then replacing the file under "
        "a running process is harmless)"),
    ROW(NULL, "--mlock", NULL, RUN | CHAT | PAR | PPL | SERVE, FLAG_ON, GEN(mlock), 0, 0,
        "lock the weights in memory (no paging out)"),
    ROW("-nr", "--no-repack", NULL, RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_ON, GEN(no_repack),
        0, 0,
        "no second copy of the matrices in the layout that one sequence's generation reads "
        "fastest (with AVX-512: q4_K and q6_K rows interleaved 16 at a time); the copy costs "
        "as much memory again as those matrices"),
    ROW(NULL, "--repack", NULL, RUN | CHAT | PAR | PPL | SERVE | EMBED, FLAG_OFF, GEN(no_repack), 0,
        0, "make that copy (the default)"),
    ROW(NULL, "--api-key-file", "FILE", SERVE, FLAG_TEXT, SRV(api_key_file), 0, 0,
        "API keys from FILE, one per line (beside any --api-key)"),
    ROW(NULL, "--threads-http", "N", SERVE, FLAG_I32, SRV(threads_http), 1, 64,
        "event-loop threads serving the connections (default 4)"),
    ROW(NULL, "--conn-max", "N", SERVE, FLAG_I32, SRV(conn_max), 1, 1 << 20,
        "connections open at once (default 1024)"),
    ROW(NULL, "--conn-per-ip", "N", SERVE, FLAG_I32, SRV(conn_per_ip), 0, 1 << 20,
        "connections open at once from one address (default 128; 0: no limit)"),
    ROW(NULL, "--read-timeout", "S", SERVE, FLAG_SECONDS, SRV(read_s), 1, 86400,
        "the most seconds a request's headers and body may take to arrive, however slowly they "
        "trickle in (default 30; then 408)"),
    ROW(NULL, "--idle-timeout", "S", SERVE, FLAG_SECONDS, SRV(idle_s), 1, 86400,
        "seconds an idle kept-alive connection stays open (default 10)"),
    /* checked by recur serve, which says what is wrong */
    ROW(NULL, "--cors-origins", "LIST", SERVE, FLAG_TEXT, SRV(cors_origins), 0, 0,
        "origins whose pages may call the API (CORS): a comma list of scheme://host[:port], "
        "localhost (a page of localhost, 127.0.0.1 or [::1], any port) or * (default *; localhost "
        "with --slot-save-path)"),
    ROW(NULL, "--cors-methods", "LIST", SERVE, FLAG_TEXT, SRV(cors_methods), 0, 0,
        "methods a CORS preflight allows (default GET, POST, DELETE, OPTIONS)"),
    ROW(NULL, "--cors-headers", "LIST", SERVE, FLAG_TEXT, SRV(cors_headers), 0, 0,
        "request headers a CORS preflight allows; * = the ones it asks for (default *)"),
    ROW(NULL, "--cors-credentials", NULL, SERVE, FLAG_OFF, SRV(no_cors_credentials), 0, 0,
        "allow credentials in CORS requests (the default; with --cors-origins * the Origin is then "
        "echoed)"),
    ROW(NULL, "--no-cors-credentials", NULL, SERVE, FLAG_ON, SRV(no_cors_credentials), 0, 0,
        "no credentials in CORS requests (with --cors-origins *, Access-Control-Allow-Origin: *)"),
    ROW(NULL, "--prefix-cache-store", "URL", RUN | CHAT | SERVE, FLAG_NAME, GEN(prefix_store), 0, 0,
        "a second tier for the prefix cache, shared or lasting: redis://HOST:PORT[/DB] or a "
        "folder"),
    ROW(NULL, "--prefix-cache-ttl", "S", RUN | CHAT | SERVE, FLAG_I64, GEN(prefix_ttl_s), 1,
        365L * 86400, "seconds an entry of the second tier lives (default 86400)"),
    ROW(NULL, "--prefix-cache-store-mb", "N", RUN | CHAT | SERVE, FLAG_I64, GEN(prefix_store_mb), 1,
        1L << 30, "a folder tier's budget in MiB (default 4096; for Redis, its maxmemory)"),
    ROW(NULL, "--max-answer-mb", "N", SERVE, FLAG_I64, SRV(max_answer_mb), 0, 1L << 30,
        "the most MiB of JSON one answer may reach, estimated up front from its prompts, choices, "
        "tokens and probabilities (default 64; 0: no limit); a request past it is refused (400)"),
};
#define N_FLAGS (sizeof flags / sizeof flags[0])

static void print_usage(FILE *out, const char *cmd, unsigned program, const char *summary) {
    fprintf(out, "usage: recur %s [FLAGS]\n%s\n\nflags:\n", cmd, summary);
    for (size_t f = 0; f < N_FLAGS; f++) {
        if (!(flags[f].programs & program)) continue;
        char names[64];
        snprintf(names, sizeof names, "%s%s%s %s", flags[f].short_name ? flags[f].short_name : "",
                 flags[f].short_name ? ", " : "", flags[f].long_name,
                 flags[f].arg ? flags[f].arg : "");
        fprintf(out, "  %-28s %s\n", names, flags[f].help);
    }
    fprintf(out, "  %-28s %s\n", "-h, --help", "show this help");
}

static int usage_error(const char *cmd, unsigned program, const char *summary, const char *fmt, ...)
    TOOL_PRINTF(4, 5);
static int usage_error(const char *cmd, unsigned program, const char *summary, const char *fmt,
                       ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "recur %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    print_usage(stderr, cmd, program, summary);
    return TOOL_USAGE;
}

bool gen_parse_long(const char *s, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float min, float max, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max)) return false;
    *out = v;
    return true;
}

/* The row of program's flag named a (its short or long name), NULL when there is none. */
static const struct flag *find_flag(unsigned program, const char *a) {
    for (size_t f = 0; f < N_FLAGS; f++)
        if ((flags[f].programs & program) &&
            ((flags[f].short_name && strcmp(a, flags[f].short_name) == 0) ||
             strcmp(a, flags[f].long_name) == 0))
            return &flags[f];
    return NULL;
}

/* Reads v as flag f wants and stores it at dst; false when v is not a valid value. */
static bool store_value(const struct flag *f, const char *v, char *dst) {
    long n = 0;
    float x = 0;
    switch (f->kind) {
    case FLAG_ON:
    case FLAG_OFF:
        *(bool *)dst = f->kind == FLAG_ON;
        return true;
    case FLAG_TEXT:
        *(const char **)dst = v;
        return true;
    case FLAG_NAME:
        if (v[0] == '\0') return false;
        *(const char **)dst = v;
        return true;
    case FLAG_LIST: {
        int *count = (int *)(dst - f->at + f->count_at);
        if (*count >= (int)f->max || v[0] == '\0') return false;
        ((const char **)dst)[(*count)++] = v;
        return true;
    }
    case FLAG_I32:
    case FLAG_U32:
    case FLAG_I64:
    case FLAG_SECONDS:
        if (!gen_parse_long(v, (long)f->min, (long)f->max, &n)) return false;
        if (f->kind == FLAG_I32) *(int32_t *)dst = (int32_t)n;
        if (f->kind == FLAG_U32) *(uint32_t *)dst = (uint32_t)n;
        if (f->kind == FLAG_I64) *(int64_t *)dst = n;
        if (f->kind == FLAG_SECONDS) *(double *)dst = (double)n;
        return true;
    case FLAG_F32:
        if (!parse_float(v, (float)f->min, (float)f->max, &x)) return false;
        *(float *)dst = x;
        return true;
    case FLAG_SEED: {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') return false;
        *(uint64_t *)dst = seed;
        return true;
    }
    }
    return false;
}

int gen_parse(int argc, char **argv, unsigned program, const char *summary, struct gen_opts *o,
              struct serve_opts *srv) {
    const char *cmd = argv[0];
    memset(o, 0, sizeof *o);
    o->n_predict = 64;
    /* more threads than CPUs only spin against each other (the pool's workers spin briefly
       between kernels): 4 threads on 2 CPUs generated at half the speed of 2 */
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = cpus < 1 ? 4 : cpus > 16 ? 16 : (int32_t)cpus;
    o->n_batch = 2048;
    o->n_ubatch = 512;
    o->n_parallel = 8;
    o->n_ctx = 256;
    o->n_chunks = -1;
    o->cache_mb = 512;
    o->prefix_ttl_s = 86400;
    o->prefix_store_mb = 4096;
    o->sampling = recur_sampler_default_params();
    o->embd_normalize = 2;
    if (srv)
        *srv = (struct serve_opts){.n_predict = -1,
                                   .port = 8080,
                                   .queue_max = 64,
                                   .max_tokens = 4096,
                                   .max_answer_mb = 64,
                                   .timeout_s = 600,
                                   .threads_http = 4,
                                   .conn_max = 1024,
                                   .conn_per_ip = 128,
                                   .read_s = 30,
                                   .idle_s = 10};
    else
        program &= ~(unsigned)GEN_SERVE; /* nowhere to store the server's flags */

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_usage(stdout, cmd, program, summary);
            return TOOL_OK;
        }
        const struct flag *f = find_flag(program, a);
        if (!f) return usage_error(cmd, program, summary, "unknown flag '%s'", a);
        char *dst = (f->in == IN_SERVE ? (char *)srv : (char *)o) + f->at;
        if (!f->arg) { /* a switch */
            store_value(f, NULL, dst);
            continue;
        }
        if (i + 1 >= argc)
            return usage_error(cmd, program, summary, "%s needs a value (%s)", a, f->arg);
        const char *v = argv[++i];
        if (f->marks) o->n_parallel_given = true;
        if (!store_value(f, v, dst))
            return usage_error(cmd, program, summary, "%s: '%s' is not a valid value", a, v);
    }
    if (!o->model) o->model = gen_default_model(o->model_buf);
    if (find_flag(program, "--prompt") && !o->prompt == !o->prompt_file)
        return usage_error(cmd, program, summary, "give the prompt with -p or -f (one of them)");
    if ((o->grammar != NULL) + (o->grammar_file != NULL) + (o->json_schema != NULL) > 1)
        return usage_error(cmd, program, summary,
                           "give at most one of --grammar, --grammar-file and --json-schema");
    if (o->n_ubatch > o->n_batch)
        return usage_error(cmd, program, summary, "--ubatch-size must not exceed --batch-size");
    if (gen_pooling(o->pooling) < 0)
        return usage_error(cmd, program, summary,
                           "--pooling: '%s' is not a pooling recur has (none, mean, cls, last)",
                           o->pooling);
    const char *types[2] = {o->cache_type_k, o->cache_type_v};
    for (int i = 0; i < 2; i++)
        if (types[i] && gen_cache_type(types[i]) < 0)
            return usage_error(cmd, program, summary,
                               "--cache-type-%c: '%s' is not a type recur keeps attention rows in "
                               "(f32, f16, q8_0)",
                               i ? 'v' : 'k', types[i]);
    return -1;
}

int gen_cache_type(const char *name) {
    static const struct {
        const char *name;
        enum recur_type type;
    } types[] = {{"f32", RECUR_TYPE_F32}, {"f16", RECUR_TYPE_F16}, {"q8_0", RECUR_TYPE_Q8_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(name, types[i].name) == 0) return (int)types[i].type;
    return -1;
}

const char *gen_default_model(char *buf) {
    const char *env = getenv("RECUR_MODEL");
    if (env && *env) return env;
    static const char shipped[] = "models/recur-mamba-fortunes.gguf";
    ssize_t n = readlink("/proc/self/exe", buf, GEN_PATH_MAX - 1);
    if (n > 0) {
        buf[n] = '\0';
        char *slash = strrchr(buf, '/');
        if (slash && (size_t)(slash + 1 - buf) + sizeof shipped <= GEN_PATH_MAX) {
            memcpy(slash + 1, shipped, sizeof shipped);
            return buf;
        }
    }
    /* no /proc: the current folder's */
    memcpy(buf, shipped, sizeof shipped);
    return buf;
}

char *gen_read_file(const char *path, const char *what, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "recur: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f) || n < cap - 1) break;
        char *grown = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "recur: %s: cannot read the %s (or it is over 1 GiB)\n", path, what);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *gen_prompt_text(const struct gen_opts *o, size_t *len) {
    if (o->prompt) {
        *len = strlen(o->prompt);
        char *copy = malloc(*len + 1);
        if (!copy) {
            fprintf(stderr, "recur: out of memory\n");
            return NULL;
        }
        memcpy(copy, o->prompt, *len + 1);
        return copy;
    }
    return gen_read_file(o->prompt_file, "prompt", len);
}

int gen_grammar_text(const struct gen_opts *o, char **out) {
    size_t len;
    *out = NULL;
    if (o->grammar_file) {
        if (!(*out = gen_read_file(o->grammar_file, "grammar", &len))) return TOOL_FAIL;
        if (strlen(*out) != len) {
            fprintf(stderr, "recur: %s: the grammar contains a NUL byte\n", o->grammar_file);
            free(*out);
            *out = NULL;
            return TOOL_USAGE;
        }
    } else if (o->grammar) {
        len = strlen(o->grammar);
        if (!(*out = malloc(len + 1))) {
            fprintf(stderr, "recur: out of memory\n");
            return TOOL_FAIL;
        }
        memcpy(*out, o->grammar, len + 1);
    } else if (o->json_schema) {
        if (!(*out = recur_json_schema_to_grammar(o->json_schema))) {
            fprintf(stderr, "recur: --json-schema: %s\n", recur_last_error());
            return TOOL_USAGE;
        }
    }
    return TOOL_OK;
}

int gen_add_grammar(const struct recur_model *model, const char *grammar,
                    struct recur_sampler **grammar_out, struct recur_sampler **chain) {
    if (!grammar) return TOOL_OK;
    struct recur_sampler *g = recur_sampler_init_grammar(model, grammar, "root");
    if (!g) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        return TOOL_USAGE;
    }
    struct recur_sampler *outer = recur_sampler_chain_init();
    bool ok = outer != NULL;
    if (!ok)
        recur_sampler_free(g);
    else if (!(ok = recur_sampler_chain_add(outer, g)))
        recur_sampler_free(*chain);
    else
        ok = recur_sampler_chain_add(outer, *chain); /* owns *chain from here, even failing */
    if (!ok) {
        if (!outer) recur_sampler_free(*chain);
        recur_sampler_free(outer);
        *chain = NULL;
        fprintf(stderr, "recur: out of memory\n");
        return TOOL_FAIL;
    }
    *chain = outer;
    if (grammar_out) *grammar_out = g;
    return TOOL_OK;
}

recur_token *gen_tokenize(const struct recur_model *model, const char *text, size_t len,
                          int32_t *n_tokens) {
    if (len > INT32_MAX / 4) {
        fprintf(stderr, "recur: the prompt is too long (%zu bytes)\n", len);
        return NULL;
    }
    int32_t cap = RECUR_TOKENS_MAX((int32_t)len);
    recur_token *t = malloc(sizeof(recur_token) * (size_t)cap);
    if (!t) {
        fprintf(stderr, "recur: out of memory\n");
        return NULL;
    }
    int32_t n = recur_tokenize(model, text, (int32_t)len, t, cap, true, true);
    if (n < 0) { /* more than RECUR_TOKENS_MAX cannot happen */
        fprintf(stderr, "recur: tokenising the prompt failed: %s\n", recur_last_error());
        free(t);
        return NULL;
    }
    *n_tokens = n;
    return t;
}

struct recur_context_params gen_context_params(const struct gen_opts *o, uint32_t n_seq) {
    struct recur_context_params cp = recur_context_default_params();
    cp.n_seq_max = n_seq;
    cp.n_batch = o->n_batch;
    cp.n_ubatch = o->n_ubatch;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    if (o->attn_ctx > 0) cp.n_ctx = (uint32_t)o->attn_ctx;
    if (o->cache_type_k) cp.attn_type_k = (enum recur_type)gen_cache_type(o->cache_type_k);
    if (o->cache_type_v) cp.attn_type_v = (enum recur_type)gen_cache_type(o->cache_type_v);
    if (o->prompt_cache || o->prefix_store) {
        cp.prefix_cache_bytes = (uint64_t)o->cache_mb << 20;
        cp.n_rollback = 2;
    }
    if (o->prompt_cache || o->prefix_store || o->state_in || o->state_out) cp.checkpoint_every = 64;
    if (o->lookup && (uint32_t)o->lookup + 1 > cp.n_rollback)
        cp.n_rollback = (uint32_t)o->lookup + 1;
    return cp;
}

bool gen_load_params(const struct gen_opts *o, struct recur_context_params cp,
                     struct recur_model **model, struct recur_context **ctx) {
    *ctx = NULL;
    *model = NULL;
    /* outputs first: a path that cannot be written is found before the generation, not after */
    const char *outputs[] = {o->state_out, o->prompt_cache};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (outputs[i] && !recur_file_check_writable(outputs[i])) {
            fprintf(stderr, "recur: %s\n", recur_last_error());
            return false;
        }
    struct recur_model_params mp = recur_model_default_params();
    mp.use_mmap = !o->no_mmap;
    mp.use_mlock = o->mlock;
    mp.repack = !o->no_repack;
    *model = recur_model_load_from_file(o->model, mp);
    if (!*model) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        return false;
    }
    gen_watch_mapping(*model, o->model);
    *ctx = recur_init_from_model(*model, cp);
    if (!*ctx) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        recur_model_free(*model);
        *model = NULL;
        return false;
    }
    return true;
}

/* What the SIGBUS handler needs, written once before it is installed and only read after: a
 * signal handler can reach nothing but static storage. */
static struct {
    const char *addr;
    size_t size;
    char line[PATH_MAX + 256];
    size_t line_len;
} mapping;

static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    const char *at = info->si_addr;
    if (mapping.size && at >= mapping.addr && at < mapping.addr + mapping.size) {
        /* async-signal-safe: write and _exit only */
        if (write(STDERR_FILENO, mapping.line, mapping.line_len) < 0) _exit(1);
        _exit(1);
    }
    signal(sig, SIG_DFL); /* not the model's pages: the default, a crash to debug */
    raise(sig);
}

void gen_watch_mapping(const struct recur_model *model, const char *path) {
    const void *addr;
    size_t size;
    if (!recur_model_mapping(model, &addr, &size) || mapping.size) return;
    int n = snprintf(mapping.line, sizeof mapping.line,
                     "recur: %s was cut short or rewritten while mapped (SIGBUS reading its "
                     "weights): every request in flight is lost. Replace a model by renaming a "
                     "new file over it (mv), never by writing into it (cp), or run with "
                     "--no-mmap\n",
                     path);
    mapping.line_len = n < 0                             ? 0
                       : (size_t)n < sizeof mapping.line ? (size_t)n
                                                         : sizeof mapping.line - 1;
    mapping.addr = addr;
    mapping.size = size;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

bool gen_load(const struct gen_opts *o, uint32_t n_seq, struct recur_model **model,
              struct recur_context **ctx) {
    return gen_load_params(o, gen_context_params(o, n_seq), model, ctx);
}

bool gen_decode_prompt(struct recur_context *ctx, recur_seq_id seq, const recur_token *tokens,
                       int32_t n_tokens) {
    const int32_t chunk = (int32_t)recur_n_batch(ctx);
    const bool bar = isatty(STDERR_FILENO) && n_tokens > 64;
    struct recur_batch b = recur_batch_init(chunk < n_tokens ? chunk : n_tokens, 0, 1);
    if (!b.pos) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        return false;
    }
    bool ok = true;
    for (int32_t i = 0; i < n_tokens && ok; i += chunk) {
        int32_t k = n_tokens - i < chunk ? n_tokens - i : chunk;
        recur_pos start = recur_memory_seq_pos_max(recur_get_memory(ctx), seq) + 1;
        b.n_tokens = 0;
        int32_t ret = 0;
        for (int32_t j = 0; j < k && ret == 0; j++)
            ret = recur_batch_add(&b, tokens[i + j], start + j, &seq, 1, i + j == n_tokens - 1);
        if (ret == 0) ret = recur_decode(ctx, b);
        if (ret != 0) {
            fprintf(stderr, "%srecur: decoding the prompt failed (%d): %s\n", bar ? "\n" : "", ret,
                    recur_last_error());
            ok = false;
        } else if (bar) {
            int done = (int)((int64_t)(i + k) * 100 / n_tokens);
            fprintf(stderr, "\rprompt [%-40.*s] %3d%% (%d/%d tokens)", done * 40 / 100,
                    "########################################", done, i + k, n_tokens);
        }
    }
    if (bar && ok) fputc('\n', stderr);
    recur_batch_free(b);
    return ok;
}

void gen_print_piece(FILE *out, const struct recur_model *model, recur_token token) {
    char buf[256];
    int32_t n = recur_token_to_piece(model, token, buf, sizeof buf, 0, false);
    if (n > 0) fwrite(buf, 1, (size_t)n, out);
}

double gen_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool gen_store_attach(const struct gen_opts *o, struct recur_context *ctx, struct store **out) {
    *out = NULL;
    if (!o->prefix_store) return true;
    struct store_opts so = store_default_opts();
    so.ttl_s = o->prefix_ttl_s;
    so.max_bytes = (uint64_t)o->prefix_store_mb << 20;
    struct recur_prefix_cache_stats cs = {0};
    if (recur_prefix_cache_get_stats(ctx, &cs)) {
        so.state_bytes = cs.entry_bytes;
        so.token_bytes = cs.attn_bytes_per_token;
    }
    char err[512];
    if (!(*out = store_open(o->prefix_store, &so, err, sizeof err))) {
        fprintf(stderr, "recur: --prefix-cache-store %s\n", err);
        return false;
    }
    const struct recur_prefix_store hooks = store_hooks(*out);
    if (!recur_prefix_cache_set_store(ctx, &hooks)) {
        fprintf(stderr, "recur: %s\n", recur_last_error());
        store_close(*out);
        *out = NULL;
        return false;
    }
    return true;
}

void gen_store_detach(struct recur_context *ctx, struct store *st) {
    if (!st) return;
    if (ctx) recur_prefix_cache_set_store(ctx, NULL);
    store_close(st); /* writes what is queued first */
}

bool gen_cache_load(const struct gen_opts *o, struct recur_context *ctx) {
    if (!o->prompt_cache || access(o->prompt_cache, F_OK) != 0) return true; /* a first run */
    if (recur_prefix_cache_load_file(ctx, o->prompt_cache)) return true;
    fprintf(stderr, "recur: note: %s; going on without it (the file is left as it is)\n",
            recur_last_error());
    return false;
}

void gen_cache_store(struct recur_context *ctx, recur_seq_id seq, const recur_token *tokens,
                     int32_t n) {
    if (recur_prefix_cache_store(ctx, seq, tokens, n) < 0)
        fprintf(stderr, "recur: note: the prompt cache did not store: %s\n", recur_last_error());
}

bool gen_cache_save(const struct gen_opts *o, struct recur_context *ctx) {
    struct recur_prefix_cache_stats st;
    if (recur_prefix_cache_get_stats(ctx, &st))
        fprintf(stderr,
                "recur: prompt cache: %u entries, %.1f of %.0f MiB (%.2f MiB per state), "
                "%llu evicted\n",
                st.n_entries, st.bytes / 1048576.0, st.max_bytes / 1048576.0,
                st.entry_bytes / 1048576.0, (unsigned long long)st.evictions);
    if (recur_prefix_cache_save_file(ctx, o->prompt_cache)) return true;
    fprintf(stderr, "recur: %s\n", recur_last_error());
    return false;
}

/* ---- the weight types ---------------------------------------------------------------------- */

int gen_type_mix(const struct recur_model *model, struct gen_type_share out[GEN_TYPES_MAX]) {
    int n = 0;
    const int32_t n_t = recur_model_n_tensors(model);
    for (int32_t i = 0; i < n_t; i++) {
        struct recur_tensor_info info;
        if (!recur_model_tensor(model, i, &info)) continue;
        int k = 0;
        while (k < n && strcmp(out[k].type, info.type) != 0) k++;
        if (k == n) {
            if (n == GEN_TYPES_MAX) continue; /* ggml has fewer types than that */
            out[n++] = (struct gen_type_share){info.type, 0, 0};
        }
        out[k].tensors++;
        out[k].bytes += info.nbytes;
    }
    for (int i = 1; i < n; i++) /* most bytes first */
        for (int j = i; j > 0 && out[j].bytes > out[j - 1].bytes; j--) {
            const struct gen_type_share t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

void gen_type_mix_text(const struct recur_model *model, char *buf, size_t size) {
    struct gen_type_share mix[GEN_TYPES_MAX];
    const int n = gen_type_mix(model, mix);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += mix[i].bytes;
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < size; i++) {
        const double pct = total ? 100.0 * (double)mix[i].bytes / (double)total : 0;
        if (pct < 1.0 && i > 0) continue;
        const int w =
            snprintf(buf + at, size - at, "%s%s %.0f%%", at ? ", " : "", mix[i].type, pct);
        if (w < 0) break;
        at += (size_t)w;
    }
}
