#!/usr/bin/env python3
"""Tool calls on /v1/chat/completions (tools/serve/toolcall.c), python3 standard library only.

    test_serve_tools.py RECUR_BIN MODEL [NODE]

The shipped model (a tiny Mamba of English fortunes, which knows nothing of tools) runs with
the real Qwen 2.5 template (--chat-template with the file's text: the "hermes" family) and with
its own chatml one (the "generic" family). With tool_choice "required" or a named function
the grammar forces a call: the answer's tool_calls have OpenAI's shape, their arguments parse
as JSON and satisfy the tool's schema (checked by the small validator below, written apart from
recur), finish_reason is "tool_calls", content null; the streamed deltas put together give the
same calls. "none" and "auto" answer (auto: text, or calls when the model writes the opener).
The history with calls and results renders (/apply-template) as Jinja2 renders the real
template (python3-jinja2, when /usr/bin/python3 has it). Bad tools are 400s naming what is
wrong. With a template that opens the thought (DeepSeek-R1's), a call that must be made waits
for the thought's end. With NODE and tests/serve/openai/node_modules, the official openai client runs
tests/serve/openai/tools.mjs against the server.
"""

import json
import os
import subprocess
import sys

RECUR, MODEL = sys.argv[1:3]
NODE = sys.argv[3] if len(sys.argv) > 3 else None
from serve_util import check, counts, skip
import serve_util

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN = os.path.join(HERE, "..", "data", "chat-templates", "Qwen-Qwen2.5-7B-Instruct.jinja")


def valid(value, schema, path="$"):
    """Errors of value against a JSON schema (the subset the tests use), [] when valid."""
    t = schema.get("type")
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool}
    if t == "integer":
        if not (isinstance(value, int) and not isinstance(value, bool)):
            return ["%s: not an integer" % path]
    elif t == "number":
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return ["%s: not a number" % path]
    elif t in kinds and not isinstance(value, kinds[t]):
        return ["%s: not a %s" % (path, t)]
    if "enum" in schema and value not in schema["enum"]:
        return ["%s: %r not in the enum" % (path, value)]
    errs = []
    if t == "object":
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errs.append("%s: %s missing" % (path, k))
        for k, v in value.items():
            if k in props:
                errs += valid(v, props[k], path + "." + k)
            elif schema.get("additionalProperties") is False:
                errs.append("%s: extra %s" % (path, k))
    if t == "array":
        for i, v in enumerate(value):
            errs += valid(v, schema.get("items", {}), "%s[%d]" % (path, i))
    return errs


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["C", "F"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string",
                                                           "enum": ["UTC", "CET"]}},
                   "required": ["tz"]}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_calls(name, msg, finish, only=None, one=False):
    calls = msg.get("tool_calls") or []
    check(name + ": finish_reason tool_calls", finish == "tool_calls", str(finish))
    check(name + ": at least one call", len(calls) >= 1, json.dumps(msg))
    if one:
        check(name + ": one call (parallel_tool_calls false)", len(calls) == 1, json.dumps(msg))
    check(name + ": content null when only calls", msg.get("content") is None or
          isinstance(msg.get("content"), str), json.dumps(msg))
    ids = set()
    for c in calls:
        check(name + ": a call's shape", set(c) >= {"id", "type", "function"} and
              c["type"] == "function" and c["id"].startswith("call_") and
              set(c["function"]) == {"name", "arguments"}, json.dumps(c))
        ids.add(c["id"])
        fn = c["function"]["name"]
        check(name + ": a known function", fn in SCHEMAS and (only is None or fn == only), fn)
        try:
            args = json.loads(c["function"]["arguments"])
        except ValueError:
            check(name + ": arguments are JSON", False, c["function"]["arguments"])
            continue
        errs = valid(args, SCHEMAS.get(fn, {}))
        check(name + ": arguments satisfy the schema", not errs, "%s %s" % (args, errs))
    check(name + ": distinct ids", len(ids) == len(calls), str(ids))
    return calls


def streamed(srv, body):
    """The streamed answer put together: content, calls by index, finish_reason."""
    status, events, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
    content, calls, finish = None, {}, None
    for e in events:
        for ch in e.get("choices", []):
            d = ch.get("delta", {})
            if d.get("content"):
                content = (content or "") + d["content"]
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"id": None, "type": None,
                                                   "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    c["id"] = tc["id"]
                if tc.get("type"):
                    c["type"] = tc["type"]
                f = tc.get("function", {})
                c["function"]["name"] += f.get("name") or ""
                c["function"]["arguments"] += f.get("arguments") or ""
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return status, done, {"content": content,
                          "tool_calls": [calls[k] for k in sorted(calls)] or None}, finish


def run(label, srv):
    base = {"messages": USER, "tools": TOOLS, "temperature": 0, "max_tokens": 120}
    # required: the model, which never saw a tool, is made to call one (one: left to itself
    # under parallel_tool_calls it writes calls until the length limit, never ending)
    for n_seed, seed in enumerate((1, 2, 3)):
        body = dict(base, tool_choice="required", temperature=0.9, seed=seed,
                    parallel_tool_calls=False)
        status, ans, _ = srv.post("/v1/chat/completions", body)
        check(label + ": required answers 200", status == 200, str(ans))
        if status != 200:
            continue
        ch = ans["choices"][0]
        whole = check_calls(label + ": required seed %d" % seed, ch["message"],
                            ch["finish_reason"], one=True)
        st, done, msg, finish = streamed(srv, body)
        check(label + ": stream 200 with [DONE]", st == 200 and done, str(st))
        check(label + ": streamed calls are the whole answer's (ids aside)",
              [c["function"] for c in msg["tool_calls"] or []] ==
              [c["function"] for c in whole], "%s vs %s" % (msg, whole))
        check(label + ": streamed finish_reason", finish == "tool_calls", str(finish))
        check(label + ": streamed content as the whole answer's",
              (msg["content"] or None) == (ch["message"]["content"] or None),
              "%r vs %r" % (msg["content"], ch["message"]["content"]))
    # parallel calls: several calls, or cut by the length limit (then no call is made up)
    body = dict(base, tool_choice="required", temperature=0.9, seed=5, max_tokens=200)
    status, ans, _ = srv.post("/v1/chat/completions", body)
    check(label + ": parallel answers 200", status == 200, str(ans))
    if status == 200:
        ch = ans["choices"][0]
        if ch["finish_reason"] == "length":
            check(label + ": parallel cut: the text is content, no calls",
                  not ch["message"].get("tool_calls") and ch["message"]["content"],
                  json.dumps(ch))
        else:
            check_calls(label + ": parallel", ch["message"], ch["finish_reason"])
    # a named function, one call only
    body = dict(base, tool_choice={"type": "function", "function": {"name": "get_time"}},
                parallel_tool_calls=False)
    status, ans, _ = srv.post("/v1/chat/completions", body)
    check(label + ": named function answers 200", status == 200, str(ans))
    if status == 200:
        ch = ans["choices"][0]
        check_calls(label + ": named get_time", ch["message"], ch["finish_reason"],
                    only="get_time", one=True)
    # none: text, never parsed
    status, ans, _ = srv.post("/v1/chat/completions", dict(base, tool_choice="none"))
    check(label + ": none answers text", status == 200 and
          isinstance(ans["choices"][0]["message"]["content"], str) and
          "tool_calls" not in ans["choices"][0]["message"] and
          ans["choices"][0]["finish_reason"] in ("stop", "length"), str(ans))
    # auto: the lazy grammar leaves free text free
    status, ans, _ = srv.post("/v1/chat/completions", dict(base, tool_choice="auto"))
    check(label + ": auto answers 200", status == 200, str(ans))
    if status == 200:
        ch = ans["choices"][0]
        if ch["message"].get("tool_calls"):
            check_calls(label + ": auto", ch["message"], ch["finish_reason"])
        else:
            check(label + ": auto text", isinstance(ch["message"]["content"], str) and
                  ch["finish_reason"] in ("stop", "length"), str(ch))
        st, done, msg, finish = streamed(srv, dict(base, tool_choice="auto"))
        check(label + ": auto streamed as whole", st == 200 and
              (msg["content"] or "") == (ch["message"]["content"] or ""), "%r vs %r" %
              (msg["content"], ch["message"]["content"]))


def bad_requests(srv):
    for extra, want in [
        ({"tools": {"a": 1}}, '"tools" must be an array'),
        ({"tools": [{"type": "function", "function": {"description": "x"}}]},
         '"tools"[0].function.name'),
        ({"tools": [WEATHER, WEATHER]}, 'both named "get_weather"'),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "string", "format": "email"}}}}}]},
         '"tools"[0]'),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, '"tool_choice" must be'),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         '"nope", which is not among'),
        ({"tool_choice": "required"}, "no \"tools\""),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, '"parallel_tool_calls" must be'),
        ({"tools": TOOLS, "json_schema": {"type": "object"}}, "cannot be combined"),
        ({"messages": USER + [{"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_time", "arguments": "[1]"}}]}]},
         "arguments must be the JSON text of an object"),
        ({"messages": [{"role": "user", "content": "x", "tool_call_id": "a"}]},
         "tool_call_id is not supported"),
    ]:
        body = dict({"messages": USER, "max_tokens": 4}, **extra)
        status, ans, _ = srv.post("/v1/chat/completions", body)
        msg = ans.get("error", {}).get("message", "") if isinstance(ans, dict) else str(ans)
        check("400 naming %r" % want, status == 400 and want in msg, "%d %s" % (status, msg))


HISTORY = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Weather in Zürich and the time in CET?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Zürich", "unit": "C"})}},
        {"id": "call_2", "type": "function", "function": {
            "name": "get_time", "arguments": json.dumps({"tz": "CET"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
    {"role": "assistant", "content": "21 °C, 14:05."},
    {"role": "user", "content": "Thanks."},
]


def jinja_history():
    """The Qwen 2.5 template's rendering of HISTORY by Jinja2, None without python3-jinja2."""
    prog = r'''
import json, sys
import jinja2, jinja2.sandbox
d = json.load(sys.stdin)
env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
for m in d["messages"]:
    for c in m.get("tool_calls") or []:
        c["function"]["arguments"] = json.loads(c["function"]["arguments"])
t = env.from_string(open(d["path"], encoding="utf-8").read())
sys.stdout.write(t.render(messages=d["messages"], tools=d["tools"], add_generation_prompt=True,
                          bos_token="", eos_token="<|im_end|>"))
'''
    if not os.path.exists("/usr/bin/python3"):
        return None
    r = subprocess.run(["/usr/bin/python3", "-c", prog], capture_output=True,
                       input=json.dumps({"messages": HISTORY, "tools": TOOLS, "path": QWEN}).encode())
    return r.stdout.decode() if r.returncode == 0 else None


with open(QWEN, encoding="utf-8") as f:
    qwen_text = f.read()
srv = serve_util.Server(RECUR, MODEL, "--chat-template", qwen_text)
want = jinja_history()
status, ans, _ = srv.post("/apply-template", {"messages": HISTORY, "tools": TOOLS})
if want is None:
    skip("history against Jinja2", "/usr/bin/python3 has no jinja2")
else:
    check("hermes: /apply-template of calls and results is Jinja2's rendering",
          status == 200 and ans.get("prompt") == want,
          "%d\n%r\n%r" % (status, ans.get("prompt") if isinstance(ans, dict) else ans, want))
status, n_in, _ = srv.post("/v1/chat/completions/input_tokens",
                           {"messages": HISTORY, "tools": TOOLS})
status2, n_plain, _ = srv.post("/v1/chat/completions/input_tokens", {"messages": HISTORY[:2]})
check("input_tokens counts the tools and history", status == 200 and status2 == 200 and
      n_in["input_tokens"] > n_plain["input_tokens"] + 100, "%s %s" % (n_in, n_plain))
# a history with tool results goes on to an answer
status, ans, _ = srv.post("/v1/chat/completions", {"messages": HISTORY, "tools": TOOLS,
                                                   "max_tokens": 8})
check("hermes: a history with calls and results answers", status == 200, str(ans))
run("hermes", srv)
bad_requests(srv)

if NODE and os.path.isdir(os.path.join(HERE, "openai", "node_modules")):
    r = subprocess.run([NODE, os.path.join(HERE, "openai", "tools.mjs"),
                        "http://127.0.0.1:%d/v1" % srv.port], capture_output=True, text=True,
                       timeout=300)
    print(r.stdout, end="")
    check("the openai client's tool calls (tools.mjs)", r.returncode == 0,
          r.stdout[-2000:] + r.stderr[-2000:])
else:
    skip("the openai client", "no node or tests/serve/openai/node_modules (scripts/setup.sh)")
srv.stop()

# Mistral Small 3.2: a forced call's id is 9 letters and digits, so that the history with it
# renders as the real template (which refuses other ids) renders it
MISTRAL = os.path.join(HERE, "..", "data", "chat-templates",
                       "Mistral-Small-3.2-24B-Instruct-2506.jinja")
with open(MISTRAL, encoding="utf-8") as f:
    srv = serve_util.Server(RECUR, MODEL, "--chat-template", f.read())
sysmsg = {"role": "system", "content": "You are terse."}
status, ans, _ = srv.post("/v1/chat/completions", {
    "messages": [sysmsg] + USER, "tools": TOOLS, "tool_choice": "required",
    "parallel_tool_calls": False, "max_tokens": 120, "temperature": 0})
check("mistral: a forced call", status == 200 and
      ans["choices"][0]["finish_reason"] == "tool_calls", str(ans))
if status == 200 and ans["choices"][0]["message"].get("tool_calls"):
    msg = ans["choices"][0]["message"]
    cid = msg["tool_calls"][0]["id"]
    check("mistral: the call id is 9 letters and digits", len(cid) == 9 and cid.isalnum(), cid)
    history = [sysmsg] + USER + [msg, {"role": "tool", "tool_call_id": cid, "content": "sunny"}]
    status, ans, _ = srv.post("/apply-template", {"messages": history, "tools": TOOLS})
    prog = r'''
import json, sys
import jinja2, jinja2.sandbox
d = json.load(sys.stdin)
env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
env.globals["strftime_now"] = lambda f: "2024-07-26"
for m in d["messages"]:
    for c in m.get("tool_calls") or []:
        c["function"]["arguments"] = json.loads(c["function"]["arguments"])
t = env.from_string(open(d["path"], encoding="utf-8").read())
sys.stdout.write(t.render(messages=d["messages"], tools=d["tools"], add_generation_prompt=True,
                          bos_token="", eos_token="</s>"))
'''
    r = subprocess.run(["/usr/bin/python3", "-c", prog], capture_output=True, input=json.dumps(
        {"messages": history, "tools": TOOLS, "path": MISTRAL}).encode())
    if r.returncode != 0:
        skip("mistral history against Jinja2", r.stderr.decode()[-300:])
    else:
        check("mistral: /apply-template of the answer's call and its result is Jinja2's",
              status == 200 and ans.get("prompt") == r.stdout.decode(),
              "%r\n%r" % (ans.get("prompt") if isinstance(ans, dict) else ans, r.stdout.decode()))
srv.stop()

srv = serve_util.Server(RECUR, MODEL)  # the shipped model's own template: generic
run("generic", srv)
srv.stop()

# A template whose generation prompt opens the thought (DeepSeek-R1's): a call that must be made
# comes after the thought, so the grammar waits for "</think>". The shipped model never writes
# it, so the answer is a free thought, as with tool_choice "none" (greedy: the same text), and no
# call; a grammar from the first token would have written the call inside the thought.
srv = serve_util.Server(RECUR, MODEL, "--chat-template", "deepseek-r1")
ans = {}
for choice in ["none", "required", {"type": "function", "function": {"name": "get_time"}}]:
    status, a, _ = srv.post("/v1/chat/completions", {
        "messages": USER, "tools": TOOLS, "tool_choice": choice, "max_tokens": 40,
        "temperature": 0})
    ans[json.dumps(choice)] = a["choices"][0] if status == 200 else a
free = ans['"none"']
check("opened thought, none: the answer is a thought (the reference)",
      "message" in free and free["message"].get("reasoning_content") and
      not free["message"].get("content"), str(free)[:400])
for k, a in ans.items():
    if k == '"none"':
        continue
    m = a.get("message", {})
    check("opened thought, tool_choice %s: the thought is free (none's text), no call inside it"
          % k, m.get("reasoning_content") == free.get("message", {}).get("reasoning_content") and
          "tool_calls" not in (m.get("reasoning_content") or "") and not m.get("tool_calls"),
          str(a)[:400])
srv.stop()
sys.exit(counts.exit_status())
