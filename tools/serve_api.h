/* recur serve: the HTTP-facing helpers shared by serve.c and serve_api.c. */
#ifndef RECUR_TOOLS_SERVE_API_H
#define RECUR_TOOLS_SERVE_API_H

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "serve.h"

/* The CORS headers every answer carries (llama-server's): Access-Control-Allow-Origin. */
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
/* Adds text (n bytes, any bytes) to obj as a JSON string, invalid UTF-8 bytes as U+FFFD. */
void serve_add_text(cJSON *obj, const char *name, const char *text, size_t n);
/* The fields of a completion request into t (prompt tokens, limits, sampling, stop strings, n)
 * and *stream; false with msg naming the field that is wrong. t's allocations are freed by
 * serve_task_release either way. */
bool serve_parse_completion(struct server *s, const cJSON *body, bool llama, struct task *t,
                            bool *stream, char *msg, size_t msg_len);
/* POST /v1/completions (llama false) or /completion (llama true). */
enum MHD_Result serve_handle_completion(struct server *s, struct MHD_Connection *conn,
                                        const cJSON *body, bool llama);

#endif
