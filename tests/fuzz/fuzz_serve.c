/* libFuzzer target: recur serve's request handling: any bytes as a JSON body of
 * /v1/completions, /completion, /v1/chat/completions and /v1/messages (serve_parse_request). A
 * request is refused with a message or accepted with limits the server can honour; nothing may
 * crash or leak. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "api.h"

static struct server srv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("RECUR_FUZZ_MODEL");
    srv.model =
        recur_model_load_from_file(path ? path : RECUR_FUZZ_MODEL, recur_model_default_params());
    if (!srv.model) abort();
    srv.lim = (struct serve_limits){.n_parallel = 4,
                                    .queue_max = 4,
                                    .max_prompt = 64,
                                    .max_tokens = 128,
                                    .max_body = 1 << 16,
                                    .timeout_s = 10,
                                    .read_s = 10,
                                    .n_predict = -1, /* -n, -c: not given */
                                    .n_ctx = 0};
    pthread_mutex_init(&srv.mu, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *body = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(body)) {
        cJSON_Delete(body);
        return 0;
    }
    for (int api = API_OPENAI; api <= API_MESSAGES; api++) {
        if (api == API_RESPONSES) continue; /* responses.c parses a chat body it made (API_CHAT) */
        struct serve_request r;
        char msg[200];
        if (serve_parse_request(&srv, body, (enum task_api)api, &r, msg, sizeof msg)) {
            if (r.n_tasks < 1 || r.n_tasks > SERVE_MAX_PROMPTS) abort();
            for (int k = 0; k < r.n_tasks; k++) {
                const struct task *t = r.tasks[k];
                if (t->n_prompt < 1 || t->n_prompt > srv.lim.max_prompt || t->max_tokens < 0 ||
                    t->max_tokens > srv.lim.max_tokens || t->n < 1 || t->n > srv.lim.n_parallel ||
                    t->n_stop > SERVE_MAX_STOP || t->n_top < 0 || t->n_top > SERVE_MAX_PROBS ||
                    t->n_post < 0 || t->n_post > SERVE_MAX_PROBS)
                    abort();
                for (int32_t i = 0; i < t->n_prompt; i++)
                    if (t->prompt[i] < 0 || t->prompt[i] >= recur_model_n_vocab(srv.model)) abort();
                for (int32_t i = 0; i < t->n_bias; i++)
                    if (t->bias[i].token < 0 || t->bias[i].token >= recur_model_n_vocab(srv.model))
                        abort();
            }
        } else if (msg[0] == '\0') {
            abort(); /* a refusal says why */
        }
        serve_request_free(&srv, &r);
    }
    cJSON_Delete(body);
    return 0;
}
