/* The chat template functions of the public API: src/chat formats, and the model's template
 * comes from its GGUF metadata (tokenizer.chat_template[.NAME]). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

#include "../chat/chat.h"
#include "../core/core.h"

/* The formatted chat, and its contents' spans when spans_max >= 0 (see recur.h). */
static int32_t apply(const char *tmpl, const struct recur_chat_message *chat, size_t n_msg,
                     bool add_ass, char *buf, int32_t length, struct recur_text_span *spans,
                     int32_t spans_max, int32_t *n_spans) {
    if (length < 0) {
        rcore_error_set("recur_chat_apply_template: length %d is negative", length);
        return -1;
    }
    if (!chat && n_msg > 0) {
        rcore_error_set("recur_chat_apply_template: chat is NULL with %zu messages", n_msg);
        return -1;
    }
    const int f = rchat_find(tmpl);
    if (f < 0) return -1;
    /* struct recur_chat_message and struct rchat_msg are the same two pointers; the module
     * below does not see the public header, so each message is passed as its own struct */
    _Static_assert(sizeof(struct recur_chat_message) == sizeof(struct rchat_msg),
                   "message layouts differ");
    _Static_assert(offsetof(struct recur_chat_message, content) ==
                       offsetof(struct rchat_msg, content),
                   "message layouts differ");
    const struct rchat_msg *msgs = (const struct rchat_msg *)(const void *)chat;
    if (spans_max < 0) return rchat_apply(f, msgs, n_msg, add_ass, buf, (size_t)length);
    /* the module's spans are size_t pairs: a scratch array, converted (the text is at most
       INT32_MAX bytes, so every offset fits) */
    struct rchat_span *sp = n_msg ? malloc(sizeof *sp * n_msg) : NULL;
    if (n_msg && !sp) {
        rcore_error_set("recur_chat_apply_template_spans: out of memory for %zu spans", n_msg);
        return -1;
    }
    size_t got = 0;
    const int32_t r =
        rchat_apply_spans(f, msgs, n_msg, add_ass, buf, (size_t)length, sp, n_msg, &got);
    if (r >= 0) {
        for (size_t i = 0; i < got && i < (size_t)spans_max; i++)
            spans[i] = (struct recur_text_span){(int32_t)sp[i].off, (int32_t)sp[i].len};
        *n_spans = (int32_t)got;
    }
    free(sp);
    return r;
}

int32_t recur_chat_apply_template(const char *tmpl, const struct recur_chat_message *chat,
                                  size_t n_msg, bool add_ass, char *buf, int32_t length) {
    return apply(tmpl, chat, n_msg, add_ass, buf, length, NULL, -1, NULL);
}

int32_t recur_chat_apply_template_spans(const char *tmpl, const struct recur_chat_message *chat,
                                        size_t n_msg, bool add_ass, char *buf, int32_t length,
                                        struct recur_text_span *spans, int32_t n_spans_max,
                                        int32_t *n_spans) {
    if (!n_spans || n_spans_max < 0 || (!spans && n_spans_max > 0)) {
        rcore_error_set("recur_chat_apply_template_spans: %s", !n_spans ? "n_spans is NULL"
                                                               : n_spans_max < 0
                                                                   ? "n_spans_max is negative"
                                                                   : "spans is NULL");
        return -1;
    }
    *n_spans = 0;
    return apply(tmpl, chat, n_msg, add_ass, buf, length, spans, n_spans_max, n_spans);
}

int32_t recur_chat_builtin_templates(const char **output, size_t len) {
    return rchat_names(output, len);
}

const char *recur_chat_template_name(const char *tmpl) {
    return rchat_name(rchat_find(tmpl));
}

const char *recur_model_chat_template(const struct recur_model *model, const char *name) {
    if (!model) {
        rcore_error_set("recur_model_chat_template: model is NULL");
        return NULL;
    }
    char key[256];
    if (name) {
        int n = snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
        if (n < 0 || (size_t)n >= sizeof key) {
            rcore_error_set("recur_model_chat_template: the name \"%.40s...\" is too long", name);
            return NULL;
        }
    } else {
        strcpy(key, "tokenizer.chat_template");
    }
    const struct rgguf *g = api_model_gguf(model);
    if (rgguf_find_key(g, key) < 0) {
        rcore_error_set("the model has no chat template (no key %s)", key);
        return NULL;
    }
    const char *s;
    size_t len;
    if (!rgguf_get_str(g, key, &s, &len)) return NULL;
    if (strlen(s) != len) {
        rcore_error_set("the model's %s contains a NUL byte", key);
        return NULL;
    }
    return s;
}
