/*
 * chat: chat templates. Formats a conversation (role, content messages) into the prompt text a
 * model was trained on, as llama.cpp's llm_chat_apply_template does, for a fixed set of known
 * formats (chatml, llama2, llama3, mistral, phi3, gemma, ...). A template is given by its name or
 * by its text (a Jinja chat_template from a model file), which is recognised by the marker
 * strings it contains; no Jinja is run.
 *
 * The formats are a table (chat.c): each names its markers, its per-role prefixes and suffixes,
 * and its generation prompt. The text of a BOS token is never written: the tokenizer adds BOS
 * where the model asks for it (as llama.cpp does).
 *
 * Errors: functions that can fail return a negative value or NULL and set the last error
 * (core.h). Everything is reentrant: the table is constant.
 */
#ifndef RECUR_CHAT_H
#define RECUR_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rchat_msg {
    const char *role;
    const char *content;
};

/* A message whose role is this very pointer (not an equal string: callers of the public API
 * cannot make it) is written as its content alone, with no prefix, suffix or block: tool
 * markup a format writes between turns (tools.c). */
extern const char rchat_raw_role[];

/* The format used when a model has no template and none is asked for: "chatml", as llama.cpp. */
#define RCHAT_DEFAULT "chatml"

/* Index into the format table of tmpl: a format's name (exact) or a template text that
 * contains the markers of a format. -1 with the error set (naming the supported formats)
 * when it is neither, or tmpl is NULL. */
int rchat_find(const char *tmpl);
/* The name of format i (rchat_find's result); NULL when i is out of range. */
const char *rchat_name(int i);
/* The number of formats, and their names into out[0 .. min(n, count)). */
int32_t rchat_names(const char **out, size_t n);

/*
 * Formats msgs[0 .. n) with format i (add_ass: end with the start of an assistant turn) into
 * buf (at most cap bytes, NUL-terminated when the text and its NUL fit; else buf holds the
 * first cap bytes, with no NUL). Returns the text's length in bytes (without the NUL), or -1
 * with the error set: a role the format does not know (the message names it and its index),
 * a NULL role or content, a NULL buf with cap > 0, or a text longer than INT32_MAX.
 */
int32_t rchat_apply(int i, const struct rchat_msg *msgs, size_t n, bool add_ass, char *buf,
                    size_t cap);

/* Where a message's content lies in the formatted text: bytes [off, off + len). */
struct rchat_span {
    size_t off, len;
};
/* As rchat_apply, and the spans of the messages' contents in the text, in order (a system
 * message merged into a user turn has its own), into spans[0 .. min(*n_spans, n_max)); *n_spans
 * gets how many there are (at most n: one per message). spans may be NULL
 * when n_max is 0. */
int32_t rchat_apply_spans(int i, const struct rchat_msg *msgs, size_t n, bool add_ass, char *buf,
                          size_t cap, struct rchat_span *spans, size_t n_max, size_t *n_spans);

#endif /* RECUR_CHAT_H */
