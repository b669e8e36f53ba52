/*
 * recur serve's reasoning separation: a reasoning model's output text, "<think>...</think>"
 * then the answer, split into its reasoning and its content, as llama-server's
 * --reasoning-format does (llama.cpp's common_chat_msg_parser::try_parse_reasoning), whole or
 * token piece by token piece: a tag split across pieces is held back until it is known.
 *
 * Formats (llama-server's names; --reasoning-format and the request's reasoning_format):
 *   none             everything in the content, tags and all: the raw generated text
 *   deepseek, auto   the reasoning apart (chat: message.reasoning_content,
 * delta.reasoning_content), the rest in the content deepseek-legacy  as deepseek in a whole answer;
 * in a stream the reasoning stays in the content between "<think>" and "</think>" tags
 * (llama-server's reasoning_in_content = stream && deepseek-legacy)
 *
 * What the parse does (llama-server's, so that both servers answer the same text alike):
 *   - a text that begins (after white space) with "<think>" opens a reasoning; the white space
 *     before the tag is content. A text that does not stays content: tags further on are text.
 *   - when the prompt already opened the thought (a template whose generation prompt ends in
 *     "<think>", e.g. DeepSeek-R1's distills: llama.cpp's thinking_forced_open), the text starts
 *     inside the reasoning ("<think>" written anyway is read as the opening tag).
 *   - a reasoning is trimmed of white space at both ends; an empty one adds nothing.
 *   - after "</think>", white space is skipped; another "<think>" there opens another reasoning
 *     (appended to the first), anything else starts the content, which runs to the end.
 *   - a reasoning that never ends (max_tokens reached inside it) is all reasoning, the content
 *     empty; a partial "</thi" at the very end is dropped, as llama-server's parse does.
 *   - a text that ends in the start of an opening tag ("  <thi") is kept as content (llama-server
 *     drops it; recur does not lose generated text that is no tag).
 *
 * Use (one splitter per choice; the same calls serve /v1/chat/completions, /v1/responses'
 * reasoning items and /v1/messages' thinking blocks):
 *
 *   struct serve_think th;
 *   serve_think_init(&th, format, stream, forced_open);
 *   serve_think_feed(&th, piece, n);   // any number of times, pieces of any size
 *   ... th.reasoning.s[sent_r .. th.reasoning.len) and th.content.s[sent_c .. th.content.len)
 *       are what the piece released: send them as deltas (reasoning first) ...
 *   serve_think_finish(&th);           // the end of generation: releases what was held
 *   serve_think_free(&th);
 *
 * reasoning and content grow only at their ends (a delta is always the bytes after the last
 * ones sent), and are NUL-terminated after every call. The feed and finish calls return false
 * only when out of memory (the splitter is then unusable: free it). Nothing here locks or
 * allocates more than the text's size.
 */
#ifndef RECUR_TOOLS_SERVE_REASONING_H
#define RECUR_TOOLS_SERVE_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* llama-server's common_reasoning_format, in its order */
enum serve_reasoning {
    SERVE_REASONING_NONE,
    SERVE_REASONING_AUTO, /* deepseek, as llama-server's */
    SERVE_REASONING_DEEPSEEK_LEGACY,
    SERVE_REASONING_DEEPSEEK,
    SERVE_REASONING_COUNT
};

/* The format named name ("none", "auto", "deepseek", "deepseek-legacy"); -1 when it is none of
 * them (or NULL). */
int serve_reasoning_of(const char *name);
/* Its name; "none" for an out-of-range value. */
const char *serve_reasoning_name(enum serve_reasoning f);
/* The names, ", "-separated, for error messages. */
#define SERVE_REASONING_NAMES "none, auto, deepseek, deepseek-legacy"

/* True when a rendered prompt ends (after white space) with "<think>": the model's output
 * starts inside the reasoning. */
bool serve_think_forced_open(const char *prompt);

struct serve_text {
    char *s; /* NUL-terminated once anything was added ("" when s is NULL) */
    size_t len, cap;
};

struct serve_think {
    /* what has been separated so far (read by the caller; never shrinks) */
    struct serve_text reasoning, content;
    /* the raw text's offset just past the reasoning (its closing tag; the whole text when the
       reasoning never ended), 0 when there was none: which generated tokens were thinking */
    size_t reasoning_end;
    /* private */
    bool parse;       /* not "none" */
    bool in_content;  /* deepseek-legacy streamed: the reasoning stays in the content, tagged */
    bool forced_open; /* the prompt opened the thought */
    int state;        /* where the text is: start, reasoning, after one, content */
    bool block_text;  /* the current reasoning has had text (its leading white space is gone) */
    struct serve_text pend; /* raw bytes not decided yet: white space, the start of a tag */
    size_t raw;             /* raw bytes fed so far */
};

void serve_think_init(struct serve_think *th, enum serve_reasoning f, bool stream,
                      bool forced_open);
bool serve_think_feed(struct serve_think *th, const char *s, size_t n);
bool serve_think_finish(struct serve_think *th);
void serve_think_free(struct serve_think *th);

/* ---- the server's answers ------------------------------------------------------------------
 * A chat task (serve.h) carries its format (t->reasoning: the request's reasoning_format, else
 * --reasoning-format) and whether its prompt opened the thought (t->think_open). A stream
 * keeps one splitter per choice, serve_think_init(&th, t->reasoning, true, t->think_open), feeds
 * it the text each event releases and finishes it when the choice ends (out.c's choice_event);
 * a whole answer splits the choice's text at once (serve_think_whole). */

struct task;
struct choice;
/* Splits choice c's whole text with t's format (not streamed) into *th (initialised here; the
 * caller frees it); false without memory. */
bool serve_think_whole(struct serve_think *th, const struct task *t, const struct choice *c);
/* The tokens of choice c that were reasoning (OpenAI's usage.completion_tokens_details.
 * reasoning_tokens): those up to the one that ended the reasoning (its closing tag), all of
 * them when it never ended; 0 without a reasoning or with the format none, and 0 when memory
 * for the split ran out (a count in the usage is not worth failing an answer for). */
int32_t serve_think_tokens(const struct task *t, const struct choice *c);

/* One streamed choice's splitter and what of it was sent. Zeroed (calloc) is ready to use. */
struct serve_think_stream {
    struct serve_think th;
    size_t sent_reasoning, sent_content; /* bytes of th.reasoning and th.content sent */
    bool on, done;                       /* th initialised; finished */
};
/* Feeds the text a stream event of choice c of task t released (piece[0 .. n)); end: the choice
 * has no more text (its held bytes are released; later calls add nothing). The new reasoning
 * and content come in *r[0 .. *nr) and *c[0 .. *nc) (pointers into the splitter, valid until
 * the next call), and count as sent. False without memory. */
bool serve_think_stream_step(struct serve_think_stream *ts, const struct task *t, const char *piece,
                             size_t n, bool end, const char **r, size_t *nr, const char **c,
                             size_t *nc);
void serve_think_stream_free(struct serve_think_stream *ts);

struct cJSON;
/* A chat message's reasoning_content (OpenAI's and llama-server's field on an assistant
 * message of the history) against the template tmpl: NULL when the message has none (absent,
 * null or "") or the template renders the chat the same without it, so that leaving it out is
 * exact: a template that never reads reasoning_content (every builtin format, DeepSeek-R1's,
 * V3.1's), or Qwen3's, which drops the reasoning of the turns before the last user message.
 * Else why it cannot be rendered (a static message): recur's formats do not write a reasoning
 * into the prompt. */
const char *serve_think_history(const char *tmpl, const struct cJSON *msg);

#endif /* RECUR_TOOLS_SERVE_REASONING_H */
