#!/usr/bin/env python3
"""Tool calls on /v1/responses and /v1/messages (tools/serve/api_tools.c), python3 stdlib only.

    test_serve_api_tools.py RECUR_BIN MODEL [NODE]

The shipped model (a tiny Mamba of English fortunes, which knows nothing of tools) is forced to
call by tool_choice "required" / {"type": "any"} or a named tool, with its own chatml template
(recur's "generic" tool format) and with the real Qwen 2.5 template ("hermes"). Checked on both
endpoints: the answers' shapes (Responses' function_call items, Anthropic's tool_use blocks and
stop_reason "tool_use"), the arguments against the tool's schema (a small validator written
apart from recur), the calls equal to /v1/chat/completions' for the same conversation at
temperature 0, the streamed events put together equal to the whole answer, a second turn with
the results (previous_response_id + function_call_output; tool_use + tool_result) counting the
same tokens as the equivalent chat (input_tokens / count_tokens against chat's input_tokens),
and refusals naming the field. With NODE and the clients' node_modules, the official openai and
Anthropic clients run tests/serve/openai/responses.mjs and tests/serve/anthropic/test.mjs (their
tool parts included).
"""

import json
import os
import sys

RECUR, MODEL = sys.argv[1:3]
from serve_util import check, counts
import serve_util

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN = os.path.join(HERE, "..", "data", "chat-templates", "Qwen-Qwen2.5-7B-Instruct.jinja")


def valid(value, schema, path="$"):
    """Errors of value against a JSON schema (the subset used here), [] when valid."""
    t = schema.get("type")
    kinds = {"object": dict, "string": str}
    if t == "integer":
        if not (isinstance(value, int) and not isinstance(value, bool)):
            return ["%s: not an integer" % path]
        if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
            return ["%s: out of range" % path]
    elif t in kinds and not isinstance(value, kinds[t]):
        return ["%s: not a %s" % (path, t)]
    if "enum" in schema and value not in schema["enum"]:
        return ["%s: %r not in the enum" % (path, value)]
    if t == "string" and len(value) > schema.get("maxLength", len(value)):
        return ["%s: too long" % path]
    errs = []
    if t == "object":
        props = schema.get("properties", {})
        errs += ["%s: %s missing" % (path, k) for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errs += valid(v, props[k], path + "." + k)
            elif schema.get("additionalProperties") is False:
                errs.append("%s: extra %s" % (path, k))
    return errs


WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 12},
               "unit": {"type": "string", "enum": ["C", "F"]},
               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"name": "get_time", "description": "The time in a zone.",
        "parameters": {"type": "object", "properties": {
            "tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"]}}
SCHEMAS = {f["name"]: f["parameters"] for f in (WEATHER, TIME)}
CHAT_TOOLS = [{"type": "function", "function": f} for f in (WEATHER, TIME)]
RESP_TOOLS = [dict({"type": "function"}, **f, strict=True) for f in (WEATHER, TIME)]
ANT_TOOLS = [{"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
             for f in (WEATHER, TIME)]
ASK = "What is the weather in Paris?"
COMPACT = (",", ":")


def chat_calls(srv, messages, choice, parallel=True):
    """/v1/chat/completions' calls [(name, arguments' value)] greedy, for comparison."""
    status, ans, _ = srv.post("/v1/chat/completions", {
        "messages": messages, "tools": CHAT_TOOLS, "tool_choice": choice,
        "parallel_tool_calls": parallel, "max_tokens": 200, "temperature": 0})
    if status != 200:
        return None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in ans["choices"][0]["message"].get("tool_calls") or []]


def stream_events(srv, path, body):
    """The data of every event of a stream."""
    status, events, _ = srv.stream(path, body)
    return status, events


def responses(label, srv):
    # one call (parallel_tool_calls false): the tiny model, free to go on, calls until the limit
    base = {"input": ASK, "tools": RESP_TOOLS, "max_output_tokens": 200, "temperature": 0,
            "parallel_tool_calls": False}
    want = chat_calls(srv, [{"role": "user", "content": ASK}], "required", False)
    status, r, _ = srv.post("/v1/responses", dict(base, tool_choice="required"))
    out = r.get("output", []) if status == 200 else []
    calls = [o for o in out if o.get("type") == "function_call"]
    check(label + " responses: required answers function_call items only", status == 200 and
          r["status"] == "completed" and calls and len(calls) == len(out), json.dumps(r)[:800])
    for c in calls:
        args = json.loads(c["arguments"])
        check(label + " responses: item shape", c["id"].startswith("fc_") and
              c["call_id"].startswith("call_") and c["status"] == "completed" and
              c["name"] in SCHEMAS and set(c) == {"id", "type", "status", "arguments", "call_id",
                                                  "name"}, str(c))
        check(label + " responses: arguments follow the schema",
              valid(args, SCHEMAS[c["name"]]) == [], c["arguments"])
    check(label + " responses: the calls are chat's", want is not None and
          [(c["name"], json.loads(c["arguments"])) for c in calls] == want,
          "%s vs %s" % (calls, want))
    check(label + " responses: the tools are echoed", r.get("tools") == RESP_TOOLS and
          r.get("tool_choice") == "required", str(r.get("tools")))

    # a named tool, one call
    status, r1, _ = srv.post("/v1/responses", dict(base, tool_choice={"type": "function",
                                                                      "name": "get_time"},
                                                   parallel_tool_calls=False))
    want1 = chat_calls(srv, [{"role": "user", "content": ASK}],
                       {"type": "function", "function": {"name": "get_time"}}, False)
    got1 = [(o["name"], json.loads(o["arguments"])) for o in r1.get("output", [])
            if o.get("type") == "function_call"] if status == 200 else None
    check(label + " responses: a named tool, one call, as chat's", got1 and len(got1) == 1 and
          got1[0][0] == "get_time" and got1 == want1, "%s vs %s" % (got1, want1))

    # streamed: the events put together are the whole answer
    status, evs = stream_events(srv, "/v1/responses", dict(base, tool_choice="required",
                                                           stream=True))
    types = [e["type"] for e in evs]
    seqs = [e["sequence_number"] for e in evs]
    deltas, dones, added, idone = {}, {}, [], []
    for e in evs:
        if e["type"] == "response.function_call_arguments.delta":
            deltas[e["item_id"]] = deltas.get(e["item_id"], "") + e["delta"]
        elif e["type"] == "response.function_call_arguments.done":
            dones[e["item_id"]] = e["arguments"]
        elif e["type"] == "response.output_item.added":
            added.append(e["item"])
        elif e["type"] == "response.output_item.done":
            idone.append(e["item"])
    final = evs[-1].get("response", {}) if evs else {}
    whole_args = [c["arguments"] for c in calls]
    check(label + " responses stream: events in order", status == 200 and
          types[:2] == ["response.created", "response.in_progress"] and
          types[-1] == "response.completed" and seqs == list(range(len(seqs))) and
          "response.output_text.delta" not in types, str(types))
    check(label + " responses stream: deltas make the arguments, as the whole answer's",
          [deltas.get(i["id"]) for i in added] == whole_args and
          [dones.get(i["id"]) for i in added] == whole_args and
          [i["arguments"] for i in idone] == whole_args and
          all(i["status"] == "in_progress" and i["arguments"] == "" for i in added),
          "%s %s %s" % (deltas, dones, whole_args))
    check(label + " responses stream: the final output is the items done",
          final.get("output") == idone and [i.get("name") for i in idone] ==
          [c["name"] for c in calls], json.dumps(final.get("output"))[:400])

    # the second turn: the results, by previous_response_id and as a whole input
    results = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"}
               for c in calls]
    chat = [{"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": c["call_id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}]
    chat += [{"role": "tool", "tool_call_id": c["call_id"], "name": c["name"],
              "content": "sunny"} for c in calls]
    s1, n_chat, _ = srv.post("/v1/chat/completions/input_tokens",
                             {"messages": chat, "tools": CHAT_TOOLS})
    s2, n_prev, _ = srv.post("/v1/responses/input_tokens", {
        "previous_response_id": r["id"], "input": results, "tools": RESP_TOOLS})
    items = [{"type": "message", "role": "user", "content": ASK}] + [
        {"type": "function_call", "call_id": c["call_id"], "name": c["name"],
         "arguments": c["arguments"], "id": c["id"], "status": "completed"} for c in calls]
    s3, n_items, _ = srv.post("/v1/responses/input_tokens",
                              {"input": items + results, "tools": RESP_TOOLS})
    check(label + " responses: the results' turn counts chat's tokens", s1 == s2 == s3 == 200 and
          n_chat["input_tokens"] == n_prev["input_tokens"] == n_items["input_tokens"],
          "%s %s %s" % (n_chat, n_prev, n_items))
    status, r2, _ = srv.post("/v1/responses", {"previous_response_id": r["id"], "input": results,
                                               "tools": RESP_TOOLS, "max_output_tokens": 8,
                                               "temperature": 0})
    check(label + " responses: the results' turn answers from the cache", status == 200 and
          r2["usage"]["input_tokens"] == n_chat["input_tokens"] and
          r2["usage"]["input_tokens_details"]["cached_tokens"] > 0 and
          r2["output"][0]["type"] == "message", json.dumps(r2)[:600])

    # an assistant message with text, then its call: one chat message with content and calls
    said = [{"type": "message", "role": "user", "content": ASK},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Let me look."}]},
            {"type": "function_call", "call_id": "call_9", "name": "get_time",
             "arguments": "{\"tz\":\"UTC\"}"},
            {"type": "function_call_output", "call_id": "call_9", "output": [
                {"type": "input_text", "text": "12:"}, {"type": "input_text", "text": "00"}]}]
    said_chat = [{"role": "user", "content": ASK},
                 {"role": "assistant", "content": "Let me look.", "tool_calls": [
                     {"id": "call_9", "type": "function", "function": {
                         "name": "get_time", "arguments": "{\"tz\":\"UTC\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_9", "name": "get_time", "content": "12:00"}]
    s1, a1, _ = srv.post("/v1/responses/input_tokens", {"input": said, "tools": RESP_TOOLS})
    s2, a2, _ = srv.post("/v1/chat/completions/input_tokens",
                         {"messages": said_chat, "tools": CHAT_TOOLS})
    check(label + " responses: text and a call in one assistant turn, as chat's", s1 == s2 == 200
          and a1["input_tokens"] == a2["input_tokens"], "%s %s" % (a1, a2))
    # tool_choice none: the tools are in the prompt, the answer is text
    s1, n_none, _ = srv.post("/v1/responses/input_tokens", dict(base, tool_choice="none"))
    s2, n_bare, _ = srv.post("/v1/responses/input_tokens", {"input": ASK})
    status, rn, _ = srv.post("/v1/responses", dict(base, tool_choice="none", max_output_tokens=8))
    check(label + " responses: tool_choice none answers text with the tools in the prompt",
          status == 200 and rn["output"][0]["type"] == "message" and len(rn["output"]) == 1 and
          n_none["input_tokens"] > n_bare["input_tokens"] + 50, json.dumps(rn)[:400])

    for extra, want_msg in [
        ({"tools": [{"type": "web_search"}]}, '"web_search"'),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["x"]}]}, '"file_search"'),
        ({"tools": [{"type": "function", "parameters": {}}]}, '"tools"[0].name'),
        ({"tools": RESP_TOOLS, "tool_choice": {"type": "file_search"}}, '"file_search"'),
        ({"tools": RESP_TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, '"nope"'),
        ({"tool_choice": "required"}, 'no "tools"'),
        ({"tools": RESP_TOOLS, "parallel_tool_calls": "yes"}, '"parallel_tool_calls"'),
        ({"input": [{"type": "function_call", "name": "get_time", "arguments": "{}"}]},
         '"input"[0].call_id'),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "get_time",
                     "arguments": "[1]"}]}, '"input"[0].arguments'),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]},
         '"input"[0].output'),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x",
                     "extra": 1}]}, '"input"[0].extra'),
    ]:
        body = dict({"input": ASK, "max_output_tokens": 4}, **extra)
        status, ans, _ = srv.post("/v1/responses", body)
        msg = ans.get("error", {}).get("message", "") if isinstance(ans, dict) else str(ans)
        check(label + " responses: 400 naming %s" % want_msg, status == 400 and want_msg in msg,
              "%d %s" % (status, msg))


def messages(label, srv):
    user = [{"role": "user", "content": ASK}]
    base = {"messages": user, "tools": ANT_TOOLS, "max_tokens": 200, "temperature": 0}
    want = chat_calls(srv, user, "required", False)
    anyone = {"type": "any", "disable_parallel_tool_use": True}
    status, m, _ = srv.post("/v1/messages", dict(base, tool_choice=anyone))
    blocks = m.get("content", []) if status == 200 else []
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    check(label + " messages: any answers tool_use blocks only", status == 200 and uses and
          len(uses) == len(blocks) and m["stop_reason"] == "tool_use", json.dumps(m)[:800])
    for b in uses:
        check(label + " messages: block shape", b["id"].startswith("toolu_") and
              b["name"] in SCHEMAS and isinstance(b["input"], dict) and
              set(b) == {"type", "id", "name", "input"}, str(b))
        check(label + " messages: input follows the schema", valid(b["input"], SCHEMAS[b["name"]])
              == [], str(b["input"]))
    check(label + " messages: the calls are chat's", want is not None and
          [(b["name"], b["input"]) for b in uses] == want, "%s vs %s" % (uses, want))

    status, m1, _ = srv.post("/v1/messages", dict(base, tool_choice={
        "type": "tool", "name": "get_time", "disable_parallel_tool_use": True}))
    want1 = chat_calls(srv, user, {"type": "function", "function": {"name": "get_time"}}, False)
    got1 = [(b["name"], b["input"]) for b in m1.get("content", [])] if status == 200 else None
    check(label + " messages: a named tool, one call, as chat's", got1 and len(got1) == 1 and
          got1[0][0] == "get_time" and got1 == want1, "%s vs %s" % (got1, want1))

    status, evs = stream_events(srv, "/v1/messages", dict(base, tool_choice=anyone, stream=True))
    types = [e["type"] for e in evs]
    starts = [e for e in evs if e["type"] == "content_block_start"]
    partial = {}
    for e in evs:
        if e["type"] == "content_block_delta":
            check(label + " messages stream: input_json_delta", e["delta"]["type"] ==
                  "input_json_delta", str(e))
            partial[e["index"]] = partial.get(e["index"], "") + e["delta"].get("partial_json", "")
    md = [e for e in evs if e["type"] == "message_delta"]
    check(label + " messages stream: events in order", status == 200 and
          types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"] and
          types.count("content_block_stop") == len(uses) and md and
          md[0]["delta"]["stop_reason"] == "tool_use", str(types))
    check(label + " messages stream: blocks start empty, deltas make the inputs",
          [s["index"] for s in starts] == list(range(len(uses))) and
          [(s["content_block"]["name"], json.loads(partial.get(s["index"], "null")))
           for s in starts] == [(b["name"], b["input"]) for b in uses] and
          all(s["content_block"]["input"] == {} and s["content_block"]["id"].startswith("toolu_")
              for s in starts),
          "%s %s" % (starts, partial))

    # the second turn: tool_result blocks after the tool_use ones
    turn2 = user + [{"role": "assistant", "content": uses},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
                        for b in uses] + [{"type": "text", "text": "And tomorrow?"}]}]
    chat = user + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b["input"], separators=COMPACT)}}
        for b in uses]}]
    chat += [{"role": "tool", "tool_call_id": b["id"], "name": b["name"], "content": "sunny"}
             for b in uses] + [{"role": "user", "content": "And tomorrow?"}]
    s1, n_chat, _ = srv.post("/v1/chat/completions/input_tokens",
                             {"messages": chat, "tools": CHAT_TOOLS})
    s2, n_msg, _ = srv.post("/v1/messages/count_tokens", {"messages": turn2, "tools": ANT_TOOLS})
    check(label + " messages: the results' turn counts chat's tokens", s1 == s2 == 200 and
          n_chat["input_tokens"] == n_msg["input_tokens"], "%s %s" % (n_chat, n_msg))
    status, m2, _ = srv.post("/v1/messages", {"messages": turn2, "tools": ANT_TOOLS,
                                              "max_tokens": 8, "temperature": 0})
    check(label + " messages: the results' turn answers", status == 200 and
          m2["content"][0]["type"] == "text" and m2["usage"]["input_tokens"] +
          m2["usage"]["cache_read_input_tokens"] == n_chat["input_tokens"], json.dumps(m2)[:600])

    use = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"tz": "UTC"}}
    # text then a call in one assistant turn, the result with text after it
    said = user + [{"role": "assistant", "content": [{"type": "text", "text": "Let me look."}, use]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                 "content": [{"type": "text", "text": "12:00"}]},
                                                {"type": "text", "text": "Thanks."}]}]
    said_chat = user + [{"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_time",
                                                           "arguments": "{\"tz\":\"UTC\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "name": "get_time", "content": "12:00"},
        {"role": "user", "content": "Thanks."}]
    s1, a1, _ = srv.post("/v1/messages/count_tokens", {"messages": said, "tools": ANT_TOOLS})
    s2, a2, _ = srv.post("/v1/chat/completions/input_tokens",
                         {"messages": said_chat, "tools": CHAT_TOOLS})
    check(label + " messages: text and a call in one turn, as chat's", s1 == s2 == 200 and
          a1["input_tokens"] == a2["input_tokens"], "%s %s" % (a1, a2))
    status, mn, _ = srv.post("/v1/messages", dict(base, tool_choice={"type": "none"}, max_tokens=8))
    check(label + " messages: tool_choice none answers text", status == 200 and
          [b["type"] for b in mn["content"]] == ["text"] and mn["stop_reason"] != "tool_use",
          json.dumps(mn)[:400])
    for extra, want_msg in [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
         '"web_search_20250305"'),
        ({"tools": [{"name": "f"}]}, '"tools"[0].input_schema'),
        ({"tools": ANT_TOOLS, "tool_choice": {"type": "sometimes"}}, '"sometimes"'),
        ({"tools": ANT_TOOLS, "tool_choice": {"type": "tool"}}, '"tool_choice".name'),
        ({"tools": ANT_TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, '"nope"'),
        ({"tool_choice": {"type": "any"}}, 'no "tools"'),
        ({"messages": user + [{"role": "assistant", "content": [dict(use, input=[1])]}]},
         '"messages"[1].content[0].input'),
        ({"messages": user + [{"role": "assistant", "content": [use]}]}, "tool_result"),
        ({"messages": [{"role": "user", "content": [use]}]}, "assistant message"),
        ({"messages": user + [{"role": "assistant", "content": [use, {"type": "text", "text": "x"}]},
                              {"role": "user", "content": "y"}]}, '"messages"[1].content[1]'),
        ({"messages": user + [{"role": "assistant", "content": [use]}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x", "is_error": True}]}]},
         '"messages"[2].content[0].is_error'),
    ]:
        body = dict({"messages": user, "max_tokens": 4}, **extra)
        status, ans, _ = srv.post("/v1/messages", body)
        msg = ans.get("error", {}).get("message", "") if isinstance(ans, dict) else str(ans)
        check(label + " messages: 400 naming %s" % want_msg, status == 400 and want_msg in msg,
              "%d %s" % (status, msg))


srv = serve_util.Server(RECUR, MODEL)
responses("generic", srv)
messages("generic", srv)
# 0: no crash, and under AddressSanitizer no leak (LeakSanitizer's exit status is not 0)
check("generic: the server stops cleanly", srv.stop() == 0, "".join(srv.log[-40:]))
with open(QWEN, encoding="utf-8") as f:
    srv = serve_util.Server(RECUR, MODEL, "--chat-template", f.read())
responses("hermes", srv)
messages("hermes", srv)
check("hermes: the server stops cleanly", srv.stop() == 0, "".join(srv.log[-40:]))

print("test_serve_api_tools: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
