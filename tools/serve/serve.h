/*
 * recur serve: what the HTTP side (serve.c) and the decode loop (sched.c) share.
 *
 * Threads: libmicrohttpd serves every connection on a small pool of event-loop threads
 * (--threads-http), never a thread per connection, so slow or idle clients cost a socket, not
 * a thread (conn.c). Each request becomes a task, put in a bounded queue. One scheduler
 * thread owns the recur context: every step it admits queued tasks into free sequence slots
 * (restoring the longest cached prefix of their prompt), decodes the prompts of new tasks and
 * the last token of every running one in one batch (continuous batching), samples, and
 * appends text to each task. A connection waiting for its task is parked (suspended in the
 * event loop, struct serve_park) and woken by the scheduler when there is text or an end. A
 * watcher thread enforces the deadlines and notices clients that leave. Everything shared is
 * under server.mu.
 */
#ifndef RECUR_TOOLS_SERVE_H
#define RECUR_TOOLS_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"
#include "reasoning.h"

#define SERVE_MAX_STOP  4   /* stop strings per request, as OpenAI's API */
#define SERVE_MAX_N     16  /* choices per request */
#define SERVE_MAX_TOP   20  /* alternatives per token in chat logprobs (OpenAI's limit) */
#define SERVE_MAX_PROBS 100 /* alternatives per token in /completion's n_probs */

enum task_state { TASK_QUEUED, TASK_RUNNING, TASK_DONE, TASK_FAILED };

struct server;
struct serve_cors;
struct MHD_Connection;

/* A connection parked until the decode loop has something for it: the text of a streamed
 * answer, the end of its tasks, a slot action's result (conn.c). While parked the
 * connection is suspended in libmicrohttpd's event loop, costing no thread. Under server.mu. */
struct serve_park {
    struct MHD_Connection *conn;
    bool parked;      /* suspended: serve_wake resumes it */
    bool on_progress; /* woken at every step that adds text (a stream), else only at the end */
    double deadline;  /* serve_now() past which its work times out (0: none) */
    bool gone;        /* its client left: expired once, not again */
    /* called (mu held) when the client left (why "the client went away") or the deadline
       passed ("timed out"): cancels the work, which then ends and wakes the connection */
    void (*expire)(struct server *s, struct serve_park *p, const char *why);
    void *owner;                    /* what expire works on */
    struct serve_park *prev, *next; /* server.parked, while parked */
};

/* Which endpoint made the task: the shape of its answer. */
enum task_api {
    API_OPENAI,
    API_LLAMA,
    API_CHAT,
    API_RESPONSES, /* OpenAI's Responses (responses.c) */
    API_MESSAGES   /* Anthropic's (messages.c) */
};

/* Why a choice ended (llama-server's stop_type). */
enum stop_kind { STOP_NONE, STOP_EOS, STOP_LIMIT, STOP_WORD };

/* A token's log-probability under the raw logits (log-softmax, before any sampler), or a
 * post-sampling probability. */
struct tok_prob {
    recur_token id;
    float v;
};

/* One continuation of a task: its sequence, sampler and text so far. */
struct choice {
    recur_seq_id seq;
    struct recur_sampler *smpl;
    recur_token *out; /* generated tokens */
    int32_t n_out;
    char *text; /* their text, NUL-terminated */
    size_t len, cap;
    size_t held;               /* bytes of text held back: they may be the start of a stop string */
    int32_t row;               /* output row in the current batch, -1 none */
    bool finished;             /* no more tokens */
    const char *finish_reason; /* "length" or "stop" */
    /* what the answer reports beyond the text (the scheduler fills these) */
    enum stop_kind stop_kind;
    int stop_word;         /* index into task.stop of the string that ended it (STOP_WORD) */
    bool truncated;        /* ended by the server's token budget per sequence (-c) */
    size_t *tok_end;       /* [max_tokens] text length after each token (before a stop string cut
                              it): which tokens a piece of streamed text holds */
    size_t *released;      /* [max_tokens] the text a stream could send once each token was in
                              (what was not held back then): a streamed chunk carries one token,
                              with the text its arrival released, as llama-server's do */
    struct tok_prob *lp;   /* [max_tokens + 1][1 + task.n_top]: the token's then the top ones;
                              NULL unless logprobs were asked for */
    struct tok_prob *post; /* [max_tokens + 1][1 + task.n_post] post-sampling probabilities:
                              the token's then post_n[k] top ones; NULL unless asked for */
    int32_t *post_n;
};

struct task {
    /* the request (set by the HTTP side before queuing, then read-only) */
    recur_token *prompt;
    int32_t n_prompt;
    int32_t max_tokens;
    struct recur_sampler_params sampling;
    char *stop[SERVE_MAX_STOP];
    int n_stop;
    int n; /* choices */
    bool cache_prompt;
    bool ignore_eos; /* llama.cpp's: the end-of-text token is text like any other */
    double t_queued;
    /* what the answer needs the scheduler to record (set by the HTTP side, then read-only) */
    enum task_api api;
    bool logprobs;            /* record each generated token's log-probability */
    int32_t n_top;            /* and this many most likely alternatives (0 .. SERVE_MAX_PROBS) */
    int32_t n_post;           /* post-sampling probabilities of this many candidates (0: none; at
                                 most SERVE_MAX_PROBS) */
    bool prompt_logprobs;     /* echo with logprobs: every prompt position's logits are asked for
                                 (the prefix cache is then not restored from) */
    char *grammar;            /* GBNF text every choice's output follows (root: grammar_root),
                                 from grammar, json_schema or response_format; NULL: none */
    char *grammar_trigger;    /* the grammar is lazy from this text on (tool calls, auto);
                                 NULL: from the first token */
    const char *grammar_root; /* its root rule (static text); NULL: "root" */
    bool store_prompt;        /* the whole prompt waits to be stored (sched.c store_prompts) */
    bool ending;              /* every choice ended: end_task stores its text, then retires it */
    bool tools;               /* chat: the answer is parsed into tool calls (toolcall.c) */
    char *eot;                /* a chat template's end-of-turn text: ends a choice like a stop
                                 string, not reported as one; NULL: none */
    recur_token eot_token;    /* the same as one token of the vocabulary, -1: none (0 is read
                                 as none too: tasks are calloc'd; set by the chat parser) */
    /* chat: how the output's reasoning is separated (reasoning.h): reasoning_format, else the
       server's; and whether the prompt ends inside an opened "<think>" (set by the chat parser) */
    enum serve_reasoning reasoning;
    bool think_open;
    /* /v1/messages' thinking (messages.c): disabled drops the separated reasoning from the
       answer; display "omitted" sends its block with an empty text */
    bool think_drop, think_omit;
    struct recur_logit_bias *bias; /* copied into the samplers */
    int32_t n_bias;
    char *prompt_text;       /* the prompt's tokens as text (echo), NULL when not needed */
    uint64_t tenant;         /* the API key's partition of the prefix cache (0: no key) */
    struct serve_park *park; /* the connection waiting for it, NULL once that one is gone */
    /* an embedding task (embed.c): its prompt is decoded whole in one batch (never chunked,
       no prefix cache), its embedding copied into embd (n_embd floats pooled; with pooling
       none n_prompt x n_embd, every token's), and it ends: no choice generates */
    bool embed;
    float *embd;

    /* progress (under server.mu) */
    enum task_state state;
    char error[256];
    unsigned err_status; /* the HTTP status of error (0: 500) */
    struct choice choice[SERVE_MAX_N];
    int32_t n_cached;    /* prompt tokens restored from the prefix cache */
    int32_t prefilled;   /* prompt tokens decoded so far */
    int32_t processed;   /* prefilled as of the last step, for return_progress (under mu: the
                            scheduler writes prefilled without it) */
    double processed_ms; /* when: milliseconds since the prompt started being read */
    /* every step's (processed, processed_ms), so that a stream that wakes late still reports
       each one (return_progress); NULL without memory: the last one only (under mu) */
    struct serve_progress {
        int32_t processed;
        double ms;
    } * progress;
    int32_t n_progress;
    bool cancelled;   /* the client went away: free its sequences at the next step */
    double t_started; /* admitted: its prompt starts being read */
    double t_first;   /* first token sampled */
    double t_done;
    struct tok_prob *prompt_lp;            /* [n_prompt][1 + n_top] when prompt_logprobs: entry p is
                                              prompt[p] given prompt[0 .. p) (entry 0 unused) */
    int32_t chunk_pos, chunk_row, chunk_n; /* this step's prompt rows (prompt_logprobs) */
    int refs;    /* the connection and, once submitted, the scheduler (serve_submit takes it) */
    uint64_t id; /* cmpl-<id> */
    struct task *next; /* queue */
};

struct serve_limits {
    int32_t n_parallel;  /* sequence slots */
    int32_t queue_max;   /* waiting tasks; more get 503 */
    int32_t max_prompt;  /* prompt tokens */
    int32_t max_tokens;  /* tokens a request may ask for */
    uint64_t max_answer; /* an answer's estimated JSON bytes (api.c), 0: no limit */
    size_t max_body;     /* request bytes */
    double timeout_s;    /* a request that is not done by then fails (504) */
    double read_s;       /* the most seconds a request's headers and body may take to arrive */
    int32_t n_predict;   /* tokens a request that names no length gets (-n; -1: max_tokens) */
    int32_t n_ctx;       /* most tokens (prompt + generated) one sequence may hold (-c; 0: no
                            limit): a recurrent state has no window, so this is a budget */
};

struct serve_metrics {
    uint64_t requests, requests_failed, rejected_busy;
    uint64_t rejected_stopping; /* answered 503 during the drain */
    uint64_t read_timeouts;     /* connections closed for a request not sent in time (408) */
    uint64_t clients_gone;      /* parked requests whose client went away */
    uint64_t decode_retries;    /* shared decodes that failed and were retried task by task */
    uint64_t prompt_tokens, prompt_tokens_cached, generated_tokens;
    uint64_t steps;
    uint64_t busy_slots;  /* slots in use, summed over steps */
    int32_t n_tokens_max; /* the most tokens one finished sequence held */
    double prompt_s;      /* per task: queued to first token, summed over finished tasks */
    double predicted_s;   /* per task: first token to done, summed */
    double busy_s;        /* seconds the scheduler spent in decode + sampling */
    struct recur_prefix_cache_stats cache; /* copied by the scheduler after each step */
};

/* A slot (= a sequence) between tasks keeps the state of its last finished conversation:
 * the tokens it holds are recorded here, for /slots and POST /slots/{id} (slots.c). */
struct serve_slot {
    recur_token *tokens; /* what the sequence's state holds (prompt + generated) */
    int32_t n_tokens, cap;
    int64_t id_task; /* the last task that ran on it, -1 none */
    uint64_t tenant; /* whose conversation it holds (the API key's partition, 0: no keys) */
};

struct slot_action; /* a POST /slots/{id} action waiting for the scheduler (slots.c) */

/* The decode loop's own buffers (serve_sched_init): the batch, and per task of a step its
 * rows [base, base + len), its prompt's last row, its choices' sampled tokens. */
struct serve_sched {
    struct recur_batch batch;
    struct task **tasks;
    int32_t *base, *len, *prompt_row;
    int32_t *store;  /* the tasks whose prompts are stored after a step (sched.c store_prompts) */
    int32_t *ending; /* the tasks that end after a step (sched.c end_task) */
    recur_token (*tok)[SERVE_MAX_N];
};

struct server {
    struct recur_model *model;
    struct recur_context *ctx;
    const char *model_name; /* --alias's first name, else the model file's name */
    const char **aliases;   /* --alias's names, each once, in the order given */
    int n_aliases;
    char fingerprint[48];        /* system_fingerprint: "b<version>-<model fingerprint, hex>" */
    const char *chat_template;   /* --chat-template NAME, or NULL: the model's own (or default) */
    const char *const *api_keys; /* --api-key / --api-key-file; NULL: none asked */
    int n_api_keys;
    /* --reasoning-format (default auto) */
    enum serve_reasoning reasoning;
    const char *model_path; /* -m */
    struct serve_limits lim;
    bool slots_endpoint; /* GET /slots answers (--no-slots: 501) */
    bool spm_infill;     /* --spm-infill: /infill puts the suffix first */
    bool webui;          /* the web page at / and /webui/ (--no-webui: 404) */
    bool embedding;      /* --embedding: the embeddings endpoints answer, the completions 501 */
    const char *slot_save_path; /* --slot-save-path DIR, NULL: slot save/restore answer 501 */
    uint64_t state_bytes;       /* one sequence's state (the prefix cache's entry size) */
    int32_t max_piece;          /* the longest token's text in bytes (0: not known) */

    const struct serve_cors *cors; /* the --cors-* policy (serve.c) */

    pthread_mutex_t mu;
    pthread_cond_t work;     /* the scheduler: a task arrived, or stop */
    pthread_cond_t progress; /* the connections: text arrived, or a task ended */
    struct task *queue_head, *queue_tail;
    int32_t n_queued;
    struct task **active; /* [n_parallel] tasks by first slot, NULL when free */
    bool *slot_used;      /* [n_parallel] */
    int32_t slots_in_use;
    bool stopping;             /* no new requests; finish the admitted ones */
    struct serve_park *parked; /* parked connections (conn.c), under mu */
    uint64_t next_id;
    struct serve_metrics m;
    double t_start;

    /* slots (slots.c). The scheduler reaches them through these hooks, so that a program
       that runs the scheduler without HTTP (the fuzz target, test_serve_sched) needs none of
       it (NULL there). */
    struct serve_slot *slots;    /* [n_parallel], under mu */
    struct slot_action *actions; /* queued for the scheduler, under mu */
    /* at the top of every scheduler step, mu not held: runs the queued slot actions */
    void (*run_actions)(struct server *s);
    /* at the retire of a finished task, mu held, for each choice: records what its sequence
       holds in its slot; the sequence then keeps its state (without the hook it is cleared) */
    void (*slot_keep)(struct server *s, const struct task *t, int choice);
    /* the decode call: recur_decode (a test puts a failing one here to check that one bad
       task fails alone) */
    int32_t (*decode)(struct recur_context *ctx, struct recur_batch batch);
    struct serve_conns *conns; /* connections and the watcher thread (conn.c) */
    struct serve_sched *sched; /* the decode loop's buffers */
    struct store *store;       /* the prefix cache's second tier (store.h), NULL: none */
    /* the finished /v1/responses kept for previous_response_id and GET (responses.c) */
    struct serve_responses *responses;
};

/* The decode loop's buffers for s (s->ctx, s->lim set), and s->decode = recur_decode unless
 * set; false without memory. Before serve_sched_main starts; serve_sched_free after it ends. */
bool serve_sched_init(struct server *s);
void serve_sched_free(struct server *s);
/* The scheduler thread's body (sched.c): returns once s->stopping is set and every
 * admitted task and slot action has ended (queued tasks are answered 503 then). */
void *serve_sched_main(void *srv);

/* Queues t, taking a reference for the scheduler; false when the server is stopping or the
 * queue is full (t->error and t->err_status say which: the caller answers 503). */
bool serve_submit(struct server *s, struct task *t);
/* Queues tasks[0 .. n) together, under one lock, so that the decode loop sees them in one step
 * (an embeddings request's inputs share a decode); all or none: false as serve_submit, with
 * tasks[0]->error set. */
bool serve_submit_all(struct server *s, struct task **tasks, int n);
/* Drops a reference; the last one frees the task. Call with s->mu held. */
void serve_task_release(struct server *s, struct task *t);

double serve_now(void);

/* conn.c. Parks p's connection (s->mu held; called from a libmicrohttpd callback of
 * that connection, which then returns without an answer): libmicrohttpd calls the handler
 * (or the stream's reader) again once serve_wake resumes it. */
void serve_park(struct server *s, struct serve_park *p);
/* Resumes p's connection if it is parked (s->mu held; any thread). NULL is fine. */
void serve_wake(struct server *s, struct serve_park *p);

#endif /* RECUR_TOOLS_SERVE_H */
