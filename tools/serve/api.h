/*
 * recur serve: the HTTP-facing parts shared by serve.c and the completion endpoints.
 *
 *   api.c     the request fields of /v1/completions, /completion (and what chat shares),
 *             each checked with a message naming it
 *   fields.c  the table of known fields per endpoint; logit_bias; samplers
 *   prompt.c  the prompts: strings, token ids, both mixed; their lengths against the limits
 *   chat.c    /v1/chat/completions: messages rendered with the chat template
 *   embed.c   /v1/embeddings, /embeddings, /embedding (--embedding)
 *   messages.c /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, turned
 *             into the chat rendering above and answered in Anthropic's shapes
 *   infill.c  /infill: the prompt made of the model's fill-in-the-middle tokens, run as a
 *             /completion
 *   out.c     waiting for the decode loop; the answers, whole or as server-sent events
 *   responses.c  /v1/responses: OpenAI's Responses API translated into a chat (responses.h;
 *             responses_out.c its answers, responses_store.c previous_response_id's store)
 *   lazy.c    the answers' per-token arrays, written as they are sent
 */
#ifndef RECUR_TOOLS_SERVE_API_H
#define RECUR_TOOLS_SERVE_API_H

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve.h"
#include "endpoints.h"

#define SERVE_MAX_PROMPTS 16 /* prompts in one request (a list answers a list) */

/* The CORS headers of an answer: those serve.c decided for the request from its Origin and
 * the --cors-* flags (Access-Control-Allow-Origin, -Allow-Credentials, Vary), kept with the
 * request's headers under SERVE_CORS_KEY(name), a name no client can send (a colon ends a
 * header's name). None when the origin is not allowed. */
#define SERVE_CORS_KEY(name) "recur:" name
void serve_cors_headers(struct MHD_Connection *conn, struct MHD_Response *resp);
/* Answers status with text (malloc'd, taken over; NULL: MHD_NO) of the given Content-Type,
 * and a Retry-After header when retry_after is not NULL. */
enum MHD_Result serve_send_text(struct MHD_Connection *conn, unsigned status, const char *type,
                                char *text, const char *retry_after);
/* Answers status with {"error": {"message": msg, "type": type, "code": status}} (503 adds
 * Retry-After: 1). */
enum MHD_Result serve_send_error(struct MHD_Connection *conn, unsigned status, const char *type,
                                 const char *msg);
/* A JSON array of token ids of the model's vocabulary into *out (malloc'd) and *n; false with
 * a message naming what is wrong (what: the field's name). */
bool serve_parse_tokens(struct server *s, const cJSON *arr, const char *what, recur_token **out,
                        int32_t *n, char *msg, size_t msg_len);
/* The length of the valid UTF-8 character at s[0..n) (overlong forms, surrogates and code
 * points past U+10FFFF are invalid), 0 when there is none. */
size_t serve_utf8_char(const unsigned char *s, size_t n);
/* Adds text (n bytes, any bytes) to obj as a JSON string, invalid UTF-8 bytes as U+FFFD. */
void serve_add_text(cJSON *obj, const char *name, const char *text, size_t n);
/* Adds the sampling settings of sp to obj under llama-server's names (temperature, top_k,
 * top_p, min_p, repeat_last_n, repeat_penalty, presence_penalty, frequency_penalty): what
 * /completion's generation_settings and /slots' params share. */
void serve_add_sampling(cJSON *obj, const struct recur_sampler_params *sp);
/* The same as a new JSON string (NULL without memory). */
cJSON *serve_text_json(const char *text, size_t n);

/* One request: its tasks (one per prompt) and how to answer. */
struct serve_request {
    enum task_api api;
    struct task *tasks[SERVE_MAX_PROMPTS];
    int n_tasks;
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    bool timings_per_token; /* llama-server's: every streamed chunk has the timings so far */
    bool return_progress;   /* llama-server's: prompt_progress events while the prompt is read */
    bool echo;              /* /v1/completions: the prompt before the text */
    int logprobs;           /* /v1/completions: top alternatives (0..5), -1: no logprobs */
    bool chat_logprobs;     /* chat: logprobs true (top_logprobs in task.n_top) */
    int32_t n_probs;        /* /completion: alternatives per token, 0: none */
    bool post_sampling;     /* /completion: post_sampling_probs */
    bool return_tokens;     /* /completion */
    cJSON *response_fields; /* /completion: the paths to keep (owned), NULL: all */
    cJSON *settings;        /* /completion: generation_settings (owned) */
    int32_t over_ctx;       /* a refused prompt's tokens when it did not fit -c (0: none):
                               llama-server's exceed_context_size_error */
    int msg_phase;          /* /v1/messages' stream: the events sent so far (messages.c) */
    size_t msg_bytes;       /* and the text bytes (fed to msg_think) */
    size_t msg_sent;        /* and the answer's bytes sent (with tools, short of a call) */
    struct serve_think_stream msg_think;                /* the text split into thinking and text */
    bool msg_think_open, msg_think_done, msg_text_open; /* the blocks started and stopped */
    struct serve_park park;           /* the connection, while it waits for the tasks */
    struct serve_responses_req *resp; /* /v1/responses: its settings and stream (owned) */
};

/* The fields of a request into r: its tasks (prompt tokens, limits, sampling, stop strings,
 * n, logprobs) and answer options. api API_OPENAI (/v1/completions), API_LLAMA (/completion)
 * or API_CHAT (/v1/chat/completions). False with msg naming the field that is wrong or that
 * recur does not honour; r's allocations are freed by serve_request_free either way. */
bool serve_parse_request(struct server *s, const cJSON *body, enum task_api api,
                         struct serve_request *r, char *msg, size_t msg_len);
/* The first prompt's task of a /completion (llama) or /v1/completions request into t (which
 * takes over its allocations; freed by serve_task_release) and *stream: what a request gets,
 * e.g. for /props' default settings. False with msg as serve_parse_request. */
bool serve_parse_completion(struct server *s, const cJSON *body, bool llama, struct task *t,
                            bool *stream, char *msg, size_t msg_len);
/* Releases r's tasks (refs of this side; they no longer wake r's connection) and options;
 * s->mu must NOT be held. */
void serve_request_free(struct server *s, struct serve_request *r);

/* ---- shared between api.c and chat.c ---------------------------------------- */

struct parse {
    const cJSON *body;
    char msg[200];
    bool bad;
    int32_t over_ctx; /* the failure is a prompt of this many tokens past -c, 0: another */
};
/* Sets the message (printf) and marks the parse failed; the first message stays. */
void serve_fail(struct parse *p, const char *fmt, ...);
/* The body's field name, NULL when absent or null. */
const cJSON *serve_field(const struct parse *p, const char *name);
/* Appends the tokens of text to *toks (*n of *cap used; grown as needed); false on failure. */
bool serve_tokenize_into(struct server *s, const char *text, bool add_special, bool special,
                         recur_token **toks, int32_t *n, int32_t *cap);
/* False (the parse failed, naming what) when text[0..len) is surely more than max_prompt
 * tokens: from its bytes and the longest token's length, then, for a long text, counted a
 * chunk at a time and refused as soon as the count passes the limit, before the whole text is
 * tokenized. True does not promise it fits: the caller still counts its tokens. */
bool serve_check_length(struct parse *p, struct server *s, const char *text, size_t len,
                        const char *what);
/* prompt.c: one prompt (f: a string, or an array of token ids and strings) into *toks
 * (malloc'd; NULL and *n_toks 0 on entry), a BOS where the model asks for one only with
 * add_special; what names it in messages. */
void serve_one_prompt(struct parse *p, struct server *s, const cJSON *f, bool add_special,
                      recur_token **toks, int32_t *n_toks, const char *what);
/* prompt.c: t's prompt against the limits: empty, past the most tokens accepted, or leaving no
 * room for a token under -c (then p->over_ctx is its length). */
void serve_check_prompt_len(struct parse *p, struct server *s, const struct task *t,
                            const char *what);
/* prompt.c: the body's "prompt": how many prompts, their JSON items into list (a prompt of
 * token ids, mixed or not, is one item); 0 when it failed. */
int serve_prompts_field(struct parse *p, const cJSON **list, bool llama);
/* fields.c: every field of the body is in api's table and refused features are off. */
void serve_check_fields(struct parse *p, enum task_api api);
/* fields.c: the same for /completion's table, where (an endpoint) named in the message. */
void serve_check_llama_fields(struct parse *p, const char *where);
/* fields.c: logit_bias into t->bias (llama: /completion's forms too). */
void serve_logit_bias_field(struct parse *p, struct server *s, struct task *t, bool llama);
/* fields.c: structured output into t->grammar (GBNF text, checked): llama-server's
 * `grammar` (GBNF) or `json_schema`, OpenAI's `response_format` ({"type": "text"},
 * {"type": "json_object"}, {"type": "json_schema", "json_schema": {"schema": ...}}); at most
 * one of them. */
void serve_grammar_field(struct parse *p, struct server *s, struct task *t);
/* fields.c: llama-server's samplers list, as changes to sp. */
void serve_samplers_field(struct parse *p, struct recur_sampler_params *sp);
/* Chat: the messages rendered with the template into t->prompt (and t->eot). */
void serve_chat_prompt(struct parse *p, struct server *s, struct task *t);
/* messages.c: /v1/messages' fields checked (every one in its table) and its system and messages
 * rendered into t's prompt, its stop_sequences into t->stop. */
void serve_messages_prompt(struct parse *p, struct server *s, struct task *t);
/* Chat: chat[0 .. n) and the tools (JSON array text, NULL: none) rendered with the template
 * (add_ass: ending with the generation prompt), then prefill (the start of the answer,
 * tokenized as text; NULL or "": none), into t->prompt, t->prompt_text, t->eot, t->eot_token
 * and t->think_open: what /v1/chat/completions (and the endpoints that translate to it:
 * /v1/responses, /v1/messages) render. p fails naming what is wrong. */
void serve_chat_render(struct parse *p, struct server *s, struct task *t,
                       const struct recur_chat_tool_message *chat, size_t n, const char *tools,
                       bool add_ass, const char *prefill);

/* ---- tool calls (toolcall.c) ------------------------------------------------------------ */

/* Message i's tool fields (role: its role after renaming): tool_call_id and name of a "tool"
 * message, an assistant's tool_calls (out->tool_calls malloc'd, pointing into m: free it), and
 * any other field refused by name. False with p failed. */
bool serve_chat_tool_fields(struct parse *p, const cJSON *m, int i, const char *role,
                            struct recur_chat_tool_message *out);
/* p failed with the library's error err, its "tools[i]..." named as the field "tools"[i]. */
void serve_tools_fail(struct parse *p, const char *err);
/* The body's "tools" as JSON text (malloc'd), NULL when absent, null or []; p fails when it
 * is not an array. */
char *serve_tools_text(struct parse *p);
/* tools (JSON text, NULL: none), tool_choice and parallel_tool_calls (JSON values, NULL:
 * absent) into t: the calls' grammar (t->grammar; lazy with t->grammar_trigger for auto) and
 * t->tools (the answer is parsed into calls). Refuses (p failed, naming it) bad tools, an
 * unknown tool_choice or function name, a grammar already set. Call after the grammar fields. */
void serve_tools_setup(struct parse *p, struct server *s, struct task *t, const char *tools,
                       const cJSON *choice, const cJSON *parallel);
/* serve_tools_setup with the body's fields. */
void serve_tools_field(struct parse *p, struct server *s, struct task *t);
/* A choice's answer text (its content, the reasoning apart) parsed into content and calls
 * (recur_tool_calls_free it); NULL when t has no tools to parse, or without memory. */
struct recur_tool_calls *serve_tools_parse(const struct server *s, const struct task *t,
                                           const char *text, size_t len);
/* How many bytes of text (len so far) a stream may send as content: not from where a call may
 * begin, nor the white space before it. */
size_t serve_tools_sendable(const struct server *s, const char *text, size_t len);
/* The calls of tc as OpenAI's tool_calls array (stream: each with its index); ids
 * "call_<task><choice><call>" (the mistral family: 9 letters and digits, as its templates
 * want them back). */
cJSON *serve_tool_calls_json(const struct server *s, const struct task *t, int choice,
                             const struct recur_tool_calls *tc, bool stream);

/* ---- tool calls on /v1/responses and /v1/messages (api_tools.c) ------------------------- */

/* Responses' tools (flat function tools), tool_choice and parallel_tool_calls into chat's
 * fields (added to the chat body, which toolcall.c then checks); other tool types are refused
 * by name. */
void serve_responses_tools(struct parse *p, cJSON *chat);
/* Input item m (index i) when it is a function_call (joined to the assistant message last in
 * msgs as its tool_calls, or one made) or a function_call_output (a tool message): true (p
 * failed when it is wrong); false: another type, not read. */
bool serve_responses_tool_item(struct parse *p, cJSON *msgs, const cJSON *m, int i);
/* The calls in an answer's text[0 .. len) (its content: where the reasoning is split apart, the
 * text after it, as chat's) (recur_tool_calls_free them), NULL when t has no tools or the text
 * has no call (or without memory). */
struct recur_tool_calls *serve_api_calls(const struct server *s, const struct task *t,
                                         const char *text, size_t len);
/* Call k of tc as a Responses function_call output item (done: completed with its arguments;
 * else in_progress with ""); ids fc_ and call_ from chat's call ids. */
cJSON *serve_responses_call_item(const struct server *s, const struct task *t,
                                 const struct recur_tool_calls *tc, size_t k, bool done);
/* An answer's text (its content, as serve_api_calls) as the chat history's assistant message
 * {role, content, tool_calls?} (what a previous_response_id conversation keeps); NULL without
 * memory. */
cJSON *serve_api_assistant_message(const struct server *s, const struct task *t, const char *text,
                                   size_t len);
/* Anthropic's tools as chat's tools JSON text (malloc'd; NULL: none, or p failed). */
char *serve_messages_tools(struct parse *p);
/* Anthropic's tool_choice with tools (chat's JSON text, NULL: none) into t (serve_tools_setup). */
void serve_messages_tool_choice(struct parse *p, struct server *s, struct task *t,
                                const char *tools);
/* A tool_use block (what names it) into *out, its input's JSON text malloc'd into *args (free
 * it); false with p failed. */
bool serve_messages_tool_use(struct parse *p, const cJSON *blk, const char *what,
                             struct recur_tool_call *out, char **args);
/* A tool_result block's content text (malloc'd) and its tool_use_id into *id; NULL with p
 * failed. */
char *serve_messages_tool_result(struct parse *p, const cJSON *blk, const char *what,
                                 const char **id);
/* Call k of tc as a tool_use content block (empty: input {}, as a stream's start has it). */
cJSON *serve_messages_tool_use_block(const struct server *s, const struct task *t,
                                     const struct recur_tool_calls *tc, size_t k, bool empty);

/* The chat template in use: --chat-template, else the model's own, else the default (chatml). */
const char *serve_chat_template(const struct server *s);

/* ---- answers written as they are sent (lazy.c) ------------------------------------ */

#define SERVE_LAZY_MARK '\x01'

/* A per-token array of an answer: chat's logprobs.content, /completion's
 * completion_probabilities, or one of the four parallel arrays of a legacy logprobs object.
 * Legacy arrays run over the prompt's tokens first when `prompt` (echo), then the choice's
 * tokens [from, to). */
enum serve_part_kind {
    SERVE_PART_CHAT,
    SERVE_PART_LLAMA,
    SERVE_PART_LEG_TOKENS,
    SERVE_PART_LEG_LP,
    SERVE_PART_LEG_TOP,
    SERVE_PART_LEG_OFF
};
struct part;
/* The deferred arrays of an answer being written, by number (zero it, set s; free parts). */
struct serve_parts {
    const struct server *s;
    struct part *parts;
    int n_parts, cap;
};

/* A token's text (bytes, not NUL-terminated) into buf[256]; its length. */
int32_t serve_piece(const struct server *s, recur_token tok, char *buf);
/* Where token k of c starts in c's text. */
size_t serve_tok_start(const struct choice *c, int32_t k);
/* The tokens of c whose text is in its first `ready` bytes: when finished, those that start
 * before the end (a stop string may cut the last one); before, those that end by `ready`. */
int32_t serve_tokens_ready(const struct choice *c, size_t ready);
/* The legacy logprobs object of choice c of t, the prompt's tokens first with `prompt` (echo),
 * then tokens [from, to) (their text offsets from base): its arrays deferred into parts, or,
 * parts NULL, built at once. NULL without memory. */
cJSON *serve_legacy_logprobs(const struct server *s, struct serve_parts *parts,
                             const struct task *t, const struct choice *c, bool prompt,
                             int32_t from, int32_t to, size_t base);
/* Chat's logprobs.content (SERVE_PART_CHAT) or /completion's completion_probabilities
 * (SERVE_PART_LLAMA) for tokens [from, to) of c, deferred or at once as above. */
cJSON *serve_entries_json(const struct server *s, struct serve_parts *parts,
                          enum serve_part_kind kind, const struct task *t, const struct choice *c,
                          int32_t from, int32_t to);

struct serve_lazy;
/* True when the printed skeleton has no marker: it is the answer itself. */
bool serve_lazy_plain(const char *skel);
/* A reader of skel (printed JSON with the markers of parts' arrays; taken over, freed even on
 * failure); parts and the tasks it reads must outlive it, unchanged. NULL without memory. */
struct serve_lazy *serve_lazy_new(char *skel, struct serve_parts *parts);
/* The next bytes of the answer, at most max, into buf: their number, 0 at the end, -1 without
 * memory. */
ssize_t serve_lazy_read(struct serve_lazy *z, char *buf, size_t max);
void serve_lazy_free(struct serve_lazy *z); /* NULL is fine */

/* ---- answers (out.c) -------------------------------------------------------------- */

/* messages.c: /v1/messages' answers. The whole message of a finished request; the next events
 * of a stream (several at once; NULL: none yet; *end: the stream is over; s->mu held). */
cJSON *serve_messages_json(const struct server *s, const struct serve_request *r);
char *serve_messages_events(const struct server *s, struct serve_request *r, bool *end);
/* The connection's request came to /v1/messages...: its errors are answered in Anthropic's shape
 * (serve_send_error looks for this mark, set by serve.c from the URL). */
#define SERVE_ANTHROPIC_KEY SERVE_CORS_KEY("anthropic")
bool serve_is_messages_url(const char *url);
/* serve_send_error's body in Anthropic's shape: {"type": "error", "error": {"type", "message"}}
 * (the type from the status). */
enum MHD_Result serve_messages_error(struct MHD_Connection *conn, unsigned status, const char *msg);

/* Submits r's tasks and answers: streamed, or whole once they end (the connection parked
 * until then, through cont). Takes r over (frees it). A refused submission answers 503. */
enum MHD_Result serve_answer(struct server *s, struct MHD_Connection *conn, struct serve_request *r,
                             struct serve_cont *cont);

/* A request of api parsed from rq's body, its tasks in rq's tenant; NULL when it is bad or
 * there is no memory, with the 400 (naming the field) or 500 answered into *answered. Free
 * with serve_request_free, then free(), unless serve_answer takes it over. */
struct serve_request *serve_request_new(struct server *s, struct MHD_Connection *conn,
                                        const struct serve_req *rq, enum task_api api,
                                        enum MHD_Result *answered);

/* ---- /v1/responses (responses.c) ------------------------------------------------------ */

/* The store of finished responses (previous_response_id, GET), at most max_bytes, least
 * recently used dropped first; NULL without memory. */
struct serve_responses *serve_responses_new(size_t max_bytes);
void serve_responses_free(struct serve_responses *st);        /* NULL is fine */
void serve_responses_req_free(struct serve_responses_req *q); /* NULL is fine */
/* out.c's hooks for API_RESPONSES: the whole answer (the response object; kept in the store),
 * and, s->mu held, the next server-sent event of a stream (NULL: none yet; *end: over). */
cJSON *serve_responses_final(const struct server *s, const struct serve_request *r);
char *serve_responses_event(struct server *s, struct serve_request *r, bool *end);
/* POST /v1/responses; POST /v1/responses/input_tokens; GET and DELETE /v1/responses/{id}. */
enum MHD_Result serve_responses_create(struct server *s, struct MHD_Connection *conn,
                                       const struct serve_req *rq);
enum MHD_Result serve_responses_input_tokens(struct server *s, struct MHD_Connection *conn,
                                             const struct serve_req *rq);
enum MHD_Result serve_responses_stored(struct server *s, struct MHD_Connection *conn,
                                       const struct serve_req *rq);

/* POST /v1/completions (API_OPENAI), /completion (API_LLAMA), /v1/chat/completions
 * (API_CHAT). */
enum MHD_Result serve_handle_completion(struct server *s, struct MHD_Connection *conn,
                                        const struct serve_req *rq, enum task_api api);

#endif
