/* libFuzzer target: recur serve's request handling: any bytes as a JSON body of
 * /v1/completions and /completion (serve_parse_completion). A request is refused with a
 * message or accepted with limits the server can honour; nothing may crash or leak. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/serve.h"
#include "../../tools/serve_api.h"

static struct server srv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("RECUR_FUZZ_MODEL");
    srv.model =
        recur_model_load_from_file(path ? path : RECUR_FUZZ_MODEL, recur_model_default_params());
    if (!srv.model) abort();
    srv.lim = (struct serve_limits){4, 4, 64, 128, 1 << 16, 10, -1, 0}; /* -n, -c: not given */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *body = cJSON_ParseWithLength((const char *)data, size);
    if (!cJSON_IsObject(body)) {
        cJSON_Delete(body);
        return 0;
    }
    for (int llama = 0; llama < 2; llama++) {
        struct task *t = calloc(1, sizeof *t);
        if (!t) abort();
        char msg[200];
        bool stream;
        if (serve_parse_completion(&srv, body, llama, t, &stream, msg, sizeof msg)) {
            if (t->n_prompt < 1 || t->n_prompt > srv.lim.max_prompt || t->max_tokens < 0 ||
                t->max_tokens > srv.lim.max_tokens || t->n < 1 || t->n > srv.lim.n_parallel ||
                t->n_stop > SERVE_MAX_STOP)
                abort();
            for (int32_t i = 0; i < t->n_prompt; i++)
                if (t->prompt[i] < 0 || t->prompt[i] >= recur_model_n_vocab(srv.model)) abort();
        } else if (msg[0] == '\0') {
            abort(); /* a refusal says why */
        }
        t->refs = 1;
        serve_task_release(&srv, t);
    }
    cJSON_Delete(body);
    return 0;
}
