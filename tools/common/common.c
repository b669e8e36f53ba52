/* Shared by the model-running subcommands (see common.h). */
#include "common.h"

#include <errno.h>
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

struct flag_spec {
    const char *short_name; /* NULL: none */
    const char *long_name;
    const char *arg; /* NULL: takes no value */
    const char *help;
};

static const struct flag_spec specs[G_COUNT] = {
    [G_MODEL] = {"-m", "--model", "FILE",
                 "model file (GGUF); default $RECUR_MODEL, else the model shipped with recur"},
    [G_PROMPT] = {"-p", "--prompt", "TEXT", "prompt text"},
    [G_FILE] = {"-f", "--file", "FILE", "read the prompt from FILE"},
    [G_N_PREDICT] = {"-n", "--n-predict", "N", "tokens to generate (default 64)"},
    [G_THREADS] = {"-t", "--threads", "N", "threads (default: the CPUs online, at most 16)"},
    [G_BATCH] = {"-b", "--batch-size", "N", "most tokens per decode call (default 2048)"},
    [G_UBATCH] = {"-ub", "--ubatch-size", "N", "most tokens computed at once (default 512)"},
    [G_TEMP] = {NULL, "--temp", "T", "temperature; 0 = greedy (default 0.8)"},
    [G_TOP_K] = {NULL, "--top-k", "K", "keep the K most likely tokens; 0 = all (default 40)"},
    [G_TOP_P] = {NULL, "--top-p", "P", "keep the most likely tokens up to mass P (default 0.95)"},
    [G_MIN_P] = {NULL, "--min-p", "P", "drop tokens below P x the best (default 0.05)"},
    [G_SEED] = {"-s", "--seed", "S", "sampling seed (default 0)"},
    [G_REPEAT_PENALTY] = {NULL, "--repeat-penalty", "F", "repetition penalty (default 1.0 = off)"},
    [G_REPEAT_LAST_N] = {NULL, "--repeat-last-n", "N",
                         "tokens the penalties look back (default 64)"},
    [G_FREQ_PENALTY] = {NULL, "--frequency-penalty", "F", "frequency penalty (default 0)"},
    [G_PRESENCE_PENALTY] = {NULL, "--presence-penalty", "F", "presence penalty (default 0)"},
    [G_STATE_IN] = {NULL, "--state-in", "FILE",
                    "start from a saved state; prompt tokens it holds are not decoded again"},
    [G_STATE_OUT] = {NULL, "--state-out", "FILE", "save the state (and its tokens) at the end"},
    [G_PARALLEL] = {"-np", "--parallel", "N", "sequences run at once (default 8; serve: 16)"},
    [G_CTX] = {"-c", "--ctx-size", "N", "tokens per evaluation window (default 256)"},
    [G_CHUNKS] = {NULL, "--chunks", "N", "evaluate only the first N windows (default: all)"},
    [G_PROMPT_CACHE] = {NULL, "--prompt-cache", "FILE",
                        "keep prompt states in FILE across runs: a prompt that begins as an "
                        "earlier one (or its reply) decodes only the rest"},
    [G_CACHE_MB] = {NULL, "--prompt-cache-mb", "N", "the prompt cache's budget (default 512)"},
    [G_LOOKUP] = {NULL, "--lookup", "N",
                  "draft up to N tokens from the text so far and verify them in one batch "
                  "(same output, fewer steps on repetitive text)"},
    [G_HOST] = {NULL, "--host", "ADDR",
                "address to listen on, IPv4 or IPv6; repeat to listen on several (default "
                "127.0.0.1)"},
    [G_PORT] = {NULL, "--port", "N", "port to listen on (default 8080; 0: any free port)"},
    [G_API_KEY] = {NULL, "--api-key", "KEY",
                   "require \"Authorization: Bearer KEY\" or \"X-Api-Key: KEY\"; repeat for "
                   "several keys, each with its own prompt cache and slot files"},
    [G_API_KEY_FILE] = {NULL, "--api-key-file", "FILE",
                        "API keys from FILE, one per line (beside any --api-key)"},
    [G_NO_MMAP] = {NULL, "--no-mmap", NULL,
                   "read the weights into memory instead of mapping the file (then replacing "
                   "the file under a running process is harmless)"},
    [G_MLOCK] = {NULL, "--mlock", NULL, "lock the weights in memory (no paging out)"},
    [G_THREADS_HTTP] = {NULL, "--threads-http", "N",
                        "event-loop threads serving the connections (default 4)"},
    [G_CONN_MAX] = {NULL, "--conn-max", "N", "connections open at once (default 1024)"},
    [G_CONN_PER_IP] = {NULL, "--conn-per-ip", "N",
                       "connections open at once from one address (default 128; 0: no limit)"},
    [G_READ_TIMEOUT] = {NULL, "--read-timeout", "S",
                        "the most seconds a request's headers and body may take to arrive, "
                        "however slowly they trickle in (default 30; then 408)"},
    [G_IDLE_TIMEOUT] = {NULL, "--idle-timeout", "S",
                        "seconds an idle kept-alive connection stays open (default 10)"},
    [G_CORS_ORIGINS] = {NULL, "--cors-origins", "LIST",
                        "origins whose pages may call the API (CORS): a comma list of "
                        "scheme://host[:port], localhost (a page of localhost, 127.0.0.1 or "
                        "[::1], any port) or * (default *; localhost with --slot-save-path)"},
    [G_CORS_METHODS] = {NULL, "--cors-methods", "LIST",
                        "methods a CORS preflight allows (default GET, POST, DELETE, OPTIONS)"},
    [G_CORS_HEADERS] = {NULL, "--cors-headers", "LIST",
                        "request headers a CORS preflight allows; * = the ones it asks for "
                        "(default *)"},
    [G_CORS_CREDENTIALS] = {NULL, "--cors-credentials", NULL,
                            "allow credentials in CORS requests (the default; with "
                            "--cors-origins * the Origin is then echoed)"},
    [G_NO_CORS_CREDENTIALS] = {NULL, "--no-cors-credentials", NULL,
                               "no credentials in CORS requests (with --cors-origins *, "
                               "Access-Control-Allow-Origin: *)"},
    [G_PREFIX_STORE] = {NULL, "--prefix-cache-store", "URL",
                        "a second tier for the prefix cache, shared or lasting: "
                        "redis://HOST:PORT[/DB] or a folder"},
    [G_PREFIX_TTL] = {NULL, "--prefix-cache-ttl", "S",
                      "seconds an entry of the second tier lives (default 86400)"},
    [G_PREFIX_STORE_MB] =
        {NULL, "--prefix-cache-store-mb", "N",
         "a folder tier's budget in MiB (default 4096; for Redis, its maxmemory)"},
    [G_MAX_ANSWER_MB] = {NULL, "--max-answer-mb", "N",
                         "the most MiB of JSON one answer may reach, estimated up front from "
                         "its prompts, choices, tokens and probabilities (default 64; 0: no "
                         "limit); a request past it is refused (400)"},
    [G_QUEUE] = {NULL, "--queue", "N", "requests that may wait for a slot (default 64)"},
    [G_MAX_TOKENS] = {NULL, "--max-tokens", "N",
                      "most tokens a request may ask for (default 4096)"},
    [G_TIMEOUT] = {NULL, "--timeout", "S", "seconds a request may take (default 600)"},
    [G_PREFIX_MB] = {NULL, "--prefix-cache-mb", "N",
                     "the prefix state cache's budget in MiB (default 512)"},
    [G_SRV_N_PREDICT] = {"-n", "--n-predict", "N",
                         "tokens a request that names no length generates (default: "
                         "--max-tokens for /completion, 16 for /v1/completions); not a cap"},
    [G_SRV_CTX] = {"-c", "--ctx-size", "N",
                   "most tokens (prompt + generated) one sequence may hold; a longer prompt "
                   "is refused, generation stops there (default 0: no limit; a recurrent "
                   "state has no window)"},
    [G_ALIAS] = {"-a", "--alias", "NAME", "the model's name in the API (default: its file's name)"},
    [G_NO_SLOTS] = {NULL, "--no-slots", NULL, "GET /slots answers 501"},
    [G_NO_WEBUI] = {NULL, "--no-webui", NULL,
                    "no web page at / (chat and playground in the browser): / answers 404"},
    [G_SLOT_SAVE_PATH] = {NULL, "--slot-save-path", "DIR",
                          "directory of POST /slots/{id}?action=save|restore files (default: "
                          "none, those actions answer 501)"},
    [G_CHAT_TEMPLATE] = {NULL, "--chat-template", "NAME",
                         "chat template: a builtin name (chatml, llama3, gemma, ...) or a "
                         "template's text; default the model's, else chatml"},
    [G_SYSTEM_PROMPT] = {"-sys", "--system-prompt", "TEXT",
                         "a system message that starts the conversation"},
    [G_GRAMMAR] = {NULL, "--grammar", "GBNF",
                   "constrain the output to a GBNF grammar (llama.cpp's syntax; rule root)"},
    [G_GRAMMAR_FILE] = {NULL, "--grammar-file", "FILE", "the GBNF grammar from FILE"},
    [G_JSON_SCHEMA] = {NULL, "--json-schema", "JSON",
                       "constrain the output to JSON that matches the schema"},
};

static void print_usage(FILE *out, const char *cmd, uint64_t accepted, const char *summary) {
    fprintf(out, "usage: recur %s [FLAGS]\n%s\n\nflags:\n", cmd, summary);
    for (int f = 0; f < G_COUNT; f++) {
        if (!(accepted & GBIT(f))) continue;
        char names[64];
        snprintf(names, sizeof names, "%s%s%s %s", specs[f].short_name ? specs[f].short_name : "",
                 specs[f].short_name ? ", " : "", specs[f].long_name,
                 specs[f].arg ? specs[f].arg : "");
        fprintf(out, "  %-28s %s\n", names, specs[f].help);
    }
    fprintf(out, "  %-28s %s\n", "-h, --help", "show this help");
}

static int usage_error(const char *cmd, uint64_t accepted, const char *summary, const char *fmt,
                       ...) TOOL_PRINTF(4, 5);
static int usage_error(const char *cmd, uint64_t accepted, const char *summary, const char *fmt,
                       ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "recur %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n");
    print_usage(stderr, cmd, accepted, summary);
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

int gen_parse(int argc, char **argv, uint64_t accepted, const char *summary, struct gen_opts *o) {
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
    o->srv_n_predict = -1;
    o->port = 8080;
    o->queue_max = 64;
    o->max_tokens = 4096;
    o->max_answer_mb = 64;
    o->timeout_s = 600;
    o->threads_http = 4;
    o->conn_max = 1024;
    o->conn_per_ip = 128;
    o->read_s = 30;
    o->idle_s = 10;
    o->prefix_ttl_s = 86400;
    o->prefix_store_mb = 4096;
    o->sampling = recur_sampler_default_params();

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_usage(stdout, cmd, accepted, summary);
            return TOOL_OK;
        }
        int f = 0;
        while (f < G_COUNT && !((accepted & GBIT(f)) &&
                                ((specs[f].short_name && strcmp(a, specs[f].short_name) == 0) ||
                                 strcmp(a, specs[f].long_name) == 0)))
            f++;
        if (f == G_COUNT) return usage_error(cmd, accepted, summary, "unknown flag '%s'", a);
        if (!specs[f].arg) { /* a switch */
            if (f == G_NO_SLOTS) o->no_slots = true;
            if (f == G_NO_MMAP) o->no_mmap = true;
            if (f == G_MLOCK) o->mlock = true;
            if (f == G_NO_WEBUI) o->no_webui = true;
            if (f == G_CORS_CREDENTIALS || f == G_NO_CORS_CREDENTIALS)
                o->no_cors_credentials = f == G_NO_CORS_CREDENTIALS;
            continue;
        }
        if (i + 1 >= argc)
            return usage_error(cmd, accepted, summary, "%s needs a value (%s)", a, specs[f].arg);
        const char *v = argv[++i];
        long n = 0;
        float x = 0;
        bool ok = true;
        struct recur_sampler_params *sp = &o->sampling;
        switch ((enum gen_flag)f) {
        case G_MODEL:
            o->model = v;
            break;
        case G_PROMPT:
            o->prompt = v;
            break;
        case G_FILE:
            o->prompt_file = v;
            break;
        case G_STATE_IN:
            o->state_in = v;
            break;
        case G_STATE_OUT:
            o->state_out = v;
            break;
        case G_PROMPT_CACHE:
            o->prompt_cache = v;
            break;
        case G_PREFIX_MB:
        case G_CACHE_MB:
            if ((ok = gen_parse_long(v, 1, 1 << 20, &n))) o->cache_mb = (int32_t)n;
            break;
        case G_LOOKUP:
            if ((ok = gen_parse_long(v, 1, 64, &n))) o->lookup = (int32_t)n;
            break;
        case G_HOST:
            if ((ok = o->n_hosts < GEN_MAX_HOSTS && v[0])) o->hosts[o->n_hosts++] = v;
            break;
        case G_SRV_N_PREDICT:
            if ((ok = gen_parse_long(v, -1, 1 << 24, &n))) o->srv_n_predict = (int32_t)n;
            break;
        case G_SRV_CTX:
            if ((ok = gen_parse_long(v, 0, INT32_MAX, &n))) o->srv_n_ctx = (int32_t)n;
            break;
        case G_ALIAS:
            if ((ok = v[0] != '\0')) o->alias = v;
            break;
        case G_SLOT_SAVE_PATH:
            if ((ok = v[0] != '\0')) o->slot_save_path = v;
            break;
        case G_CHAT_TEMPLATE:
            if ((ok = v[0] != '\0')) o->chat_template = v;
            break;
        case G_NO_SLOTS: /* switches, handled above */
        case G_NO_WEBUI:
        case G_CORS_CREDENTIALS:
        case G_NO_CORS_CREDENTIALS:
            break;
        case G_CORS_ORIGINS: /* checked by recur serve, which says what is wrong */
            o->cors_origins = v;
            break;
        case G_CORS_METHODS:
            o->cors_methods = v;
            break;
        case G_CORS_HEADERS:
            o->cors_headers = v;
            break;
        case G_PORT:
            if ((ok = gen_parse_long(v, 0, 65535, &n))) o->port = (int32_t)n;
            break;
        case G_API_KEY:
            if ((ok = o->n_api_keys < GEN_MAX_KEYS && v[0])) o->api_keys[o->n_api_keys++] = v;
            break;
        case G_API_KEY_FILE:
            o->api_key_file = v;
            break;
        case G_THREADS_HTTP:
            if ((ok = gen_parse_long(v, 1, 64, &n))) o->threads_http = (int32_t)n;
            break;
        case G_CONN_MAX:
            if ((ok = gen_parse_long(v, 1, 1 << 20, &n))) o->conn_max = (int32_t)n;
            break;
        case G_CONN_PER_IP:
            if ((ok = gen_parse_long(v, 0, 1 << 20, &n))) o->conn_per_ip = (int32_t)n;
            break;
        case G_READ_TIMEOUT:
            if ((ok = gen_parse_long(v, 1, 86400, &n))) o->read_s = (double)n;
            break;
        case G_IDLE_TIMEOUT:
            if ((ok = gen_parse_long(v, 1, 86400, &n))) o->idle_s = (double)n;
            break;
        case G_PREFIX_STORE:
            if ((ok = v[0] != '\0')) o->prefix_store = v;
            break;
        case G_PREFIX_TTL:
            if ((ok = gen_parse_long(v, 1, 365L * 86400, &n))) o->prefix_ttl_s = n;
            break;
        case G_PREFIX_STORE_MB:
            if ((ok = gen_parse_long(v, 1, 1L << 30, &n))) o->prefix_store_mb = n;
            break;
        case G_NO_MMAP: /* switches, handled above */
        case G_MLOCK:
            break;
        case G_SYSTEM_PROMPT:
            o->system_prompt = v;
            break;
        case G_QUEUE:
            if ((ok = gen_parse_long(v, 0, 1 << 20, &n))) o->queue_max = (int32_t)n;
            break;
        case G_MAX_TOKENS:
            if ((ok = gen_parse_long(v, 1, 1 << 24, &n))) o->max_tokens = (int32_t)n;
            break;
        case G_MAX_ANSWER_MB:
            if ((ok = gen_parse_long(v, 0, 1L << 30, &n))) o->max_answer_mb = n;
            break;
        case G_TIMEOUT:
            if ((ok = gen_parse_long(v, 1, 86400, &n))) o->timeout_s = (double)n;
            break;
        case G_N_PREDICT:
            if ((ok = gen_parse_long(v, 0, INT32_MAX, &n))) o->n_predict = (int32_t)n;
            break;
        case G_THREADS:
            if ((ok = gen_parse_long(v, 1, 1024, &n))) o->n_threads = (int32_t)n;
            break;
        case G_BATCH:
            if ((ok = gen_parse_long(v, 1, 1 << 24, &n))) o->n_batch = (uint32_t)n;
            break;
        case G_UBATCH:
            if ((ok = gen_parse_long(v, 1, 1 << 24, &n))) o->n_ubatch = (uint32_t)n;
            break;
        case G_PARALLEL:
            if ((ok = gen_parse_long(v, 1, 4096, &n))) o->n_parallel = (int32_t)n;
            o->n_parallel_given = true;
            break;
        case G_CHUNKS:
            if ((ok = gen_parse_long(v, 1, INT32_MAX, &n))) o->n_chunks = (int32_t)n;
            break;
        case G_CTX:
            if ((ok = gen_parse_long(v, 2, 1 << 20, &n))) o->n_ctx = (int32_t)n;
            break;
        case G_TOP_K:
            if ((ok = gen_parse_long(v, 0, INT32_MAX, &n))) sp->top_k = (int32_t)n;
            break;
        case G_REPEAT_LAST_N:
            if ((ok = gen_parse_long(v, 0, 1 << 20, &n))) sp->penalty_last_n = (int32_t)n;
            break;
        case G_SEED: {
            char *end;
            errno = 0;
            unsigned long long seed = strtoull(v, &end, 10);
            if ((ok = !errno && end != v && !*end && v[0] != '-')) sp->seed = seed;
            break;
        }
        case G_TEMP:
            if ((ok = parse_float(v, 0, 100, &x))) sp->temp = x;
            break;
        case G_TOP_P:
            if ((ok = parse_float(v, 0, 1, &x))) sp->top_p = x;
            break;
        case G_MIN_P:
            if ((ok = parse_float(v, 0, 1, &x))) sp->min_p = x;
            break;
        case G_REPEAT_PENALTY:
            if ((ok = parse_float(v, 0, 100, &x))) sp->penalty_repeat = x;
            break;
        case G_FREQ_PENALTY:
            if ((ok = parse_float(v, -100, 100, &x))) sp->penalty_freq = x;
            break;
        case G_PRESENCE_PENALTY:
            if ((ok = parse_float(v, -100, 100, &x))) sp->penalty_present = x;
            break;
        case G_GRAMMAR:
            o->grammar = v;
            break;
        case G_GRAMMAR_FILE:
            o->grammar_file = v;
            break;
        case G_JSON_SCHEMA:
            o->json_schema = v;
            break;
        case G_COUNT:
            break;
        }
        if (!ok) return usage_error(cmd, accepted, summary, "%s: '%s' is not a valid value", a, v);
    }
    if (!o->model) o->model = gen_default_model(o->model_buf);
    if ((accepted & GBIT(G_PROMPT)) && !o->prompt == !o->prompt_file)
        return usage_error(cmd, accepted, summary, "give the prompt with -p or -f (one of them)");
    if ((o->grammar != NULL) + (o->grammar_file != NULL) + (o->json_schema != NULL) > 1)
        return usage_error(cmd, accepted, summary,
                           "give at most one of --grammar, --grammar-file and --json-schema");
    if (o->n_ubatch > o->n_batch)
        return usage_error(cmd, accepted, summary, "--ubatch-size must not exceed --batch-size");
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
    struct recur_prefix_cache_stats cs;
    if (recur_prefix_cache_get_stats(ctx, &cs)) so.state_bytes = cs.entry_bytes;
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
