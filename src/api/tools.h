/*
 * chat tools: tool calls in chats (see include/recur.h, "tool calls"). tools.c renders tools,
 * assistant tool calls and tool results into a chat; tools_gram.c writes the GBNF grammar of a
 * family's call syntax and parses generated text back into calls; tools_json.c prints JSON as
 * the templates' Jinja `tojson` does (Python's json.dumps, as transformers calls it).
 *
 * A template's tool family is found from its text by markers, as the chat formats are:
 *   RTOOLS_HERMES   Qwen 2.5 / Qwen 3 (chatml, a "# Tools" system block with <tools>, calls as
 *                   <tool_call>{"name", "arguments"}</tool_call>, results in <tool_response>)
 *   RTOOLS_GRANITE  Granite 4.0 / 4.1: hermes's calls and results in Granite's turns and words
 *   RTOOLS_LLAMA3   Llama 3.1 / 3.2 / 3.3 (the tools in the first user turn, a call as the
 *                   assistant's {"name", "parameters"}, one a turn; results in ipython turns)
 *   RTOOLS_MISTRAL  Mistral Small 3.2 / Devstral ([SYSTEM_PROMPT] templates with [ARGS]):
 *                   [AVAILABLE_TOOLS], calls [TOOL_CALLS]name([CALL_ID]id)[ARGS]{...},
 *                   results in [TOOL_RESULTS]
 *   RTOOLS_NEMO     Mistral Nemo ([INST] blocks): [AVAILABLE_TOOLS][...] before the last user
 *                   block, calls [TOOL_CALLS][{"name", "arguments", "id"}], results
 *                   [TOOL_RESULTS]{"content", "call_id"}[/TOOL_RESULTS]
 *   RTOOLS_GENERIC  every other template: recur's own format (documented in recur.h)
 */
#ifndef RECUR_CHAT_TOOLS_H
#define RECUR_CHAT_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "../core/buf.h"

enum rtools_family {
    RTOOLS_GENERIC,
    RTOOLS_HERMES,
    RTOOLS_LLAMA3,
    RTOOLS_GRANITE,
    RTOOLS_MISTRAL,
    RTOOLS_NEMO,
    RTOOLS_N
};

enum rtools_family rtools_family(const char *tmpl);
const char *rtools_family_name(enum rtools_family f);
/* The text that opens a call (the lazy grammar's trigger) of family f. */
const char *rtools_trigger(enum rtools_family f);

/* v printed as Python's json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none,
 * separators ", " and ": "), keys in their order. False when b failed (out of memory). */
bool rtools_dump(struct rcore_buf *b, const cJSON *v, int indent);

/* The request's tools array checked: a JSON array of {"type": "function", "function":
 * {"name", "description"?, "parameters"?, "strict"?}} with distinct names. NULL with the error
 * set naming the tool and what is wrong. The caller deletes the result. */
cJSON *rtools_parse(const char *tools);
/* The function object of tools[i] (checked by rtools_parse). */
const cJSON *rtools_function(const cJSON *tool);

#endif /* RECUR_CHAT_TOOLS_H */
