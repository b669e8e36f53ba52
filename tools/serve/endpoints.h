/*
 * recur serve: the endpoints beside the completions (meta.c: models, props, slots,
 * metrics, tokenize, detokenize, apply-template, input_tokens; slots.c: slot save/restore/erase;
 * webui.c: the web page) and the handler shape the dispatch table (serve.c) calls.
 */
#ifndef RECUR_TOOLS_SERVE_ENDPOINTS_H
#define RECUR_TOOLS_SERVE_ENDPOINTS_H

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve.h"

/* What a handler that must wait for the decode loop leaves behind: it parks its connection
 * (serve_park) and sets resume, which serve.c then calls instead of the handler each time the
 * connection is woken, until resume answers (and clears resume). cleanup frees state when the
 * connection ends before that. */
struct serve_cont {
    enum MHD_Result (*resume)(struct server *s, struct MHD_Connection *conn,
                              struct serve_cont *cont);
    void (*cleanup)(struct server *s, void *state);
    void *state;
};

/* What a handler gets: the URL path, its parsed JSON body (NULL for a GET) and the raw body;
 * the caller's tenant (its API key's partition of the prefix cache and slot files, 0 without
 * keys) and where to leave a continuation. */
struct serve_req {
    const char *url;
    const cJSON *body;
    const char *raw;
    size_t raw_len;
    uint64_t tenant;
    struct serve_cont *cont;
    const char *method; /* "GET", "POST", "DELETE" (what a handler of several tells apart) */
};

typedef enum MHD_Result (*serve_handler)(struct server *s, struct MHD_Connection *conn,
                                         const struct serve_req *rq);

/* A chat completion's body, checked as /v1/chat/completions checks it, and not run: count
 * false, llama-server's /apply-template ({"prompt": the rendered chat}); true, its
 * /v1/chat/completions/input_tokens ({"object": "response.input_tokens", "input_tokens": the
 * rendered chat's tokens}). */
enum MHD_Result serve_handle_chat_prompt(struct server *s, struct MHD_Connection *conn,
                                         const struct serve_req *rq, bool count);
/* Answers status with j (taken over). */
enum MHD_Result serve_send_json(struct MHD_Connection *conn, unsigned status, cJSON *j);

/* True when body has a field not in known (NULL-terminated), with msg naming it: a field these
 * endpoints do not honour is refused rather than ignored. */
bool serve_unknown_field(const cJSON *body, const char *const *known, char *msg, size_t len);

enum MHD_Result serve_models(struct server *s, struct MHD_Connection *conn,
                             const struct serve_req *rq);
enum MHD_Result serve_props(struct server *s, struct MHD_Connection *conn,
                            const struct serve_req *rq);
enum MHD_Result serve_slots_get(struct server *s, struct MHD_Connection *conn,
                                const struct serve_req *rq);
enum MHD_Result serve_metrics_get(struct server *s, struct MHD_Connection *conn,
                                  const struct serve_req *rq);
enum MHD_Result serve_tokenize(struct server *s, struct MHD_Connection *conn,
                               const struct serve_req *rq);
enum MHD_Result serve_detokenize(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq);

/* GET and POST /lora-adapters (meta.c): the empty list of adapters recur loads. */
enum MHD_Result serve_lora_adapters(struct server *s, struct MHD_Connection *conn,
                                    const struct serve_req *rq);

/* llama-server's endpoints recur serve does not serve (meta.c): reranking, POST /props, the
 * router's /models/load, /models/unload and /models/sse, /v1/chat/completions/control: a 501
 * not_supported_error that says why. */
enum MHD_Result serve_not_served(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq);

/* POST /infill (infill.c): llama-server's code infilling, a /completion of the prompt made of
 * the model's fill-in-the-middle tokens around input_prefix and input_suffix. */
enum MHD_Result serve_infill(struct server *s, struct MHD_Connection *conn,
                             const struct serve_req *rq);

/* POST /v1/embeddings (OpenAI's shape) and POST /embeddings, /embedding (llama-server's),
 * with --embedding; 501 without it (embed.c). */
enum MHD_Result serve_embeddings_oai(struct server *s, struct MHD_Connection *conn,
                                     const struct serve_req *rq);
enum MHD_Result serve_embeddings(struct server *s, struct MHD_Connection *conn,
                                 const struct serve_req *rq);
/* POST /v1/messages and /v1/messages/count_tokens (messages.c): Anthropic's Messages API, a
 * chat rendered and run as /v1/chat/completions', answered in Anthropic's shapes. */
enum MHD_Result serve_messages(struct server *s, struct MHD_Connection *conn,
                               const struct serve_req *rq);
enum MHD_Result serve_messages_count(struct server *s, struct MHD_Connection *conn,
                                     const struct serve_req *rq);

/* GET / and /webui/NAME: the web page's files, built into the binary (webui.c); 404
 * with --no-webui or for a name that is not one of them. */
enum MHD_Result serve_webui(struct server *s, struct MHD_Connection *conn,
                            const struct serve_req *rq);

/* POST /slots/{id}?action=save|restore|erase (slots.c). */
enum MHD_Result serve_slot_action(struct server *s, struct MHD_Connection *conn,
                                  const struct serve_req *rq);
/* Allocates s->slots and sets the scheduler's hooks; false without memory. */
bool serve_slots_init(struct server *s);
void serve_slots_free(struct server *s);
/* Whether name is a file name that stays inside the slot directory: not empty, at most 255
 * bytes, no '/', '\\', control character or NUL, not starting with '.'. */
bool serve_slot_filename_ok(const char *name, size_t len);

#endif
