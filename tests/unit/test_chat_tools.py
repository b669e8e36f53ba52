"""test_chat_tools.py: chats with tools (recur_chat_apply_template_tools), the call parser and
the call grammar (tests/unit/tool_render.c).

Rendering, byte for byte:
  llama3   the real Llama 3.1 and 3.2 templates, the same way (the date header given to recur
           in the system text, as test_chat_templates.py does).
  mistral  the real Mistral Small 3.2 and Devstral templates, the same way (and
           mistral-nemo: Mistral Nemo's).
  hermes   the real Qwen 2.5 and Qwen 3 templates (and granite: Granite 4.0 and 4.1's) rendered by Jinja2 (Debian's python3-jinja2,
           sandboxed, trim_blocks and lstrip_blocks, and transformers' `tojson`:
           json.dumps(x, ensure_ascii=False, indent=indent)), with the tools, assistant calls
           (arguments given to Jinja as objects, to recur as JSON text, as OpenAI sends them)
           and tool results.
  generic  recur's documented format (include/recur.h): the expected messages are built here
           from the documentation's words, then rendered by the real templates of formats
           without a tool family here (Phi-3.5, Granite 3.3, DeepSeek R1 Distill).
Parser: hand-written model outputs of each family, with the calls expected written out.
Grammar: each family's grammar (rgram matcher) accepts the calls the parser reads and rejects
malformed ones; a named function allows only that one; parallel allows several.

Run: test_chat_tools.py TOOL_RENDER   (last line: "test_chat_tools: N passed, M failed")
"""
import json
import os
import subprocess
import sys
import tempfile

if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_CHAT_REEXEC"):
    os.environ["RECUR_CHAT_REEXEC"] = "1"
    os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)

import jinja2
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "chat-templates")
TOOL = sys.argv[1]

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + what)


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    # transformers' own filter (chat_template_utils), which the templates are rendered with
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def jinja_render(path, messages, tools, gen, eos, extra=None):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"
    with open(path, encoding="utf-8") as f:
        tmpl = env.from_string(f.read())
    kw = dict(extra or {})
    if tools is not None:
        kw["tools"] = tools
    return tmpl.render(messages=messages, add_generation_prompt=gen, bos_token="",
                       eos_token=eos, **kw)


def for_jinja(messages):
    # OpenAI sends arguments as JSON text; the templates are given objects (as transformers
    # users and llama.cpp do)
    out = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                "function": {"name": c["function"]["name"],
                                             "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def recur(args, stdin):
    r = subprocess.run([TOOL] + args, input=stdin.encode(), capture_output=True)
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode()


def recur_render(path, messages, tools, gen):
    body = {"messages": messages}
    if tools is not None:
        body["tools"] = tools
    rc, out, err = recur(["render", path, "1" if gen else "0"], json.dumps(body))
    if rc != 0:
        return "<error: %s>" % err.strip()
    return out


def show(s):
    return repr(s) if len(s) < 600 else repr(s[:300]) + " ... " + repr(s[-300:])


# ---- the conversations ---------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city (°C).",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
        "days": {"type": "integer"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string",
                                                           "enum": ["UTC", "CET"]}},
                   "required": ["tz"]}}}
NOARGS = {"type": "function", "function": {"name": "ping", "description": "Ping.",
                                           "parameters": {"type": "object", "properties": {}}}}


def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name,
                                                        "arguments": json.dumps(args)}}


SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Weather in Zürich and the time in CET?"}
A_CALLS = {"role": "assistant", "content": "",
           "tool_calls": [call("call_1", "get_weather", {"city": "Zürich", "days": 2}),
                          call("call_2", "get_time", {"tz": "CET"})]}
A_TEXT_CALL = {"role": "assistant", "content": "Let me look.",
               "tool_calls": [call("call_3", "get_weather", {"city": "Bern\n\"x\""})]}
T1 = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
      "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"}
T2 = {"role": "tool", "tool_call_id": "call_2", "name": "get_time", "content": "14:05"}
A_FINAL = {"role": "assistant", "content": "It is 21.5 °C and 14:05."}
U2 = {"role": "user", "content": "And in Bern?"}

CONVS = [
    ("sys+user, one tool", [SYS, U1], [WEATHER]),
    ("sys+user, three tools", [SYS, U1], [WEATHER, TIME, NOARGS]),
    ("parallel calls, results, reply, user", [SYS, U1, A_CALLS, T1, T2, A_FINAL, U2],
     [WEATHER, TIME]),
    ("content and a call, result", [SYS, U1, A_TEXT_CALL, T1], [WEATHER]),
]
NO_SYS = [("user, tools, no system", [U1], [WEATHER, TIME]),
          ("calls without system", [U1, A_CALLS, T1, T2], [WEATHER, TIME])]

# ---- hermes: the real templates ---------------------------------------------------------

# Granite 4.0 writes a default system message when there is none: with one only
HERMES = [("Qwen-Qwen2.5-7B-Instruct.jinja", CONVS + NO_SYS, "hermes", "<|im_end|>"),
          ("Qwen-Qwen3-0.6B.jinja", CONVS + NO_SYS, "hermes", "<|im_end|>"),
          ("ibm-granite-granite-4.1.jinja", CONVS + NO_SYS, "granite", "<|end_of_text|>"),
          ("ibm-granite-granite-4.0.jinja", CONVS, "granite", "<|end_of_text|>")]
for path, convs, family, eos in HERMES:
    full = os.path.join(DATA, path)
    rc, out, _ = recur(["format", full], "")
    check(out.strip() == family, "%s is the %s family, got %r" % (path, family, out))
    for label, messages, tools in convs:
        for gen in (True, False):
            want = jinja_render(full, for_jinja(messages), tools, gen, eos)
            have = recur_render(full, messages, tools, gen)
            check(have == want, "%s [%s, gen=%s]:\n  jinja: %s\n  recur: %s" %
                  (path, label, gen, show(want), show(have)))

# ---- llama3: the real Llama 3.1 / 3.2 templates -------------------------------------------

LLAMA31_HEAD = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
A_ONE = {"role": "assistant", "content": "",
         "tool_calls": [call("call_1", "get_weather", {"city": "Zürich", "days": 2})]}
A_ONE_TEXT = dict(A_ONE, content="I will look.")  # the template drops the text of a call
LLAMA_CONVS = [
    ("sys+user, one tool", [SYS, U1], [WEATHER]),
    ("sys+user, three tools", [SYS, U1], [WEATHER, TIME, NOARGS]),
    ("call, result, reply, user", [SYS, U1, A_ONE, T1, A_FINAL, U2], [WEATHER, TIME]),
    ("call with text, result", [SYS, U1, A_ONE_TEXT, T1], [WEATHER]),
]
for path, extra in [("meta-llama-Llama-3.1-8B-Instruct.jinja", {}),
                    ("meta-llama-Llama-3.2-3B-Instruct.jinja", {"date_string": "26 Jul 2024"})]:
    full = os.path.join(DATA, path)
    rc, out, _ = recur(["format", full], "")
    check(out.strip() == "llama3", "%s is the llama3 family, got %r" % (path, out))
    for label, messages, tools in LLAMA_CONVS:
        for gen in (True, False):
            want = jinja_render(full, for_jinja(messages), tools, gen, "<|eot_id|>", extra)
            # the date header is the caller's (recur cannot know the date), as without tools
            adapted = [dict(m, content=LLAMA31_HEAD + m["content"]) if m["role"] == "system"
                       else m for m in messages]
            have = recur_render(full, adapted, tools, gen)
            check(have == want, "%s [%s, gen=%s]:\n  jinja: %s\n  recur: %s" %
                  (path, label, gen, show(want), show(have)))
rc, out, err = recur(["render", os.path.join(DATA, "meta-llama-Llama-3.1-8B-Instruct.jinja"), "1"],
                     json.dumps({"messages": [SYS, U1, A_CALLS], "tools": [WEATHER, TIME]}))
check(rc == 1 and "takes one a message" in err, "llama3: two calls in a message refused: %r" % err)

# ---- mistral: the real Mistral Small 3.2 and Devstral templates ----------------------------

# Small 3.2 needs call ids of 9 characters; both refuse a chat without a system message
# (they write a long default one with the date), as test_chat_templates.py does
M_CALLS = {"role": "assistant", "content": "",
           "tool_calls": [call("a1B2c3D4e", "get_weather", {"city": "Zürich", "days": 2}),
                          call("f5G6h7I8j", "get_time", {"tz": "CET"})]}
M_T1 = dict(T1, tool_call_id="a1B2c3D4e")
M_T2 = dict(T2, tool_call_id="f5G6h7I8j")
M_TEXT_CALL = {"role": "assistant", "content": "Let me look.",
               "tool_calls": [call("k9L0m1N2o", "get_weather", {"city": "Bern"})]}
M_T3 = dict(T1, tool_call_id="k9L0m1N2o")
MISTRAL_CONVS = [
    ("sys+user, one tool", [SYS, U1], [WEATHER]),
    ("sys+user, three tools", [SYS, U1], [WEATHER, TIME, NOARGS]),
    ("parallel calls, results, reply, user", [SYS, U1, M_CALLS, M_T1, M_T2, A_FINAL, U2],
     [WEATHER, TIME]),
    ("content and a call, result", [SYS, U1, M_TEXT_CALL, M_T3], [WEATHER]),
]
for path in ("Mistral-Small-3.2-24B-Instruct-2506.jinja",
             "unsloth-mistral-Devstral-Small-2507.jinja"):
    full = os.path.join(DATA, path)
    rc, out, _ = recur(["format", full], "")
    check(out.strip() == "mistral", "%s is the mistral family, got %r" % (path, out))
    for label, messages, tools in MISTRAL_CONVS:
        for gen in (True, False):
            want = jinja_render(full, for_jinja(messages), tools, gen, "</s>")
            have = recur_render(full, messages, tools, gen)
            check(have == want, "%s [%s, gen=%s]:\n  jinja: %s\n  recur: %s" %
                  (path, label, gen, show(want), show(have)))

# Nemo writes the system message into the last user turn only when that is the last message
# (recur, as llama.cpp, into the first): with a system message, one user turn only
NEMO_CONVS = [
    ("sys+user, one tool", [SYS, U1], [WEATHER]),
    ("user, three tools", [U1], [WEATHER, TIME, NOARGS]),
    ("parallel calls, results, reply, user", [U1, M_CALLS, M_T1, M_T2, A_FINAL, U2],
     [WEATHER, TIME]),
    ("content and a call, result", [U1, M_TEXT_CALL, M_T3], [WEATHER]),
    ("a call after a result", [U1, M_TEXT_CALL, M_T3, M_CALLS, M_T1, M_T2], [WEATHER, TIME]),
]
full = os.path.join(DATA, "mistralai-Mistral-Nemo-Instruct-2407.jinja")
rc, out, _ = recur(["format", full], "")
check(out.strip() == "mistral-nemo", "Nemo is the mistral-nemo family, got %r" % out)
for label, messages, tools in NEMO_CONVS:
    for gen in (True, False):
        want = jinja_render(full, for_jinja(messages), tools, gen, "</s>")
        have = recur_render(full, messages, tools, gen)
        check(have == want, "Nemo [%s, gen=%s]:\n  jinja: %s\n  recur: %s" %
              (label, gen, show(want), show(have)))

# without tools, a chat renders as recur_chat_apply_template does (chatml: no default system)
full = os.path.join(DATA, "Qwen-Qwen2.5-7B-Instruct.jinja")
check(recur_render(full, [SYS, U1], None, True) ==
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
      "Weather in Zürich and the time in CET?<|im_end|>\n<|im_start|>assistant\n",
      "a chat without tools renders as before")

# ---- generic: recur's documented format over the real templates' plain turns -----------------

GEN_HEAD = ("You can call tools. The tools (name, description and the JSON schema of the "
            "arguments):\n")
GEN_TAIL = ("\n\nTo call tools, answer with only a JSON object: {\"tool_calls\": [{\"name\": "
            "<tool name>, \"arguments\": <arguments object>}]} (several calls in the list to "
            "call several tools at once). Otherwise, answer in plain text.")


def generic_messages(messages, tools):
    out = []
    rest = messages
    if tools:
        sys_text = ""
        if messages and messages[0]["role"] == "system":
            rest = messages[1:]
            if messages[0]["content"]:
                sys_text = messages[0]["content"] + "\n\n"
        fns = [t["function"] for t in tools]
        out.append({"role": "system", "content": sys_text + GEN_HEAD +
                    json.dumps(fns, ensure_ascii=False, indent=2) + GEN_TAIL})
    for m in rest:
        if m["role"] == "tool":
            parts = []
            if m.get("tool_call_id") is not None:
                parts.append("\"tool_call_id\": " + json.dumps(m["tool_call_id"],
                                                               ensure_ascii=False))
            if m.get("name") is not None:
                parts.append("\"name\": " + json.dumps(m["name"], ensure_ascii=False))
            parts.append("\"content\": " + json.dumps(m["content"], ensure_ascii=False))
            out.append({"role": "user", "content": "{\"tool_response\": {" + ", ".join(parts)
                        + "}}"})
        elif m.get("tool_calls"):
            text = m["content"] or ""
            if text:
                text += "\n"
            calls = ", ".join("{\"name\": %s, \"arguments\": %s}" % (
                json.dumps(c["function"]["name"]),
                json.dumps(json.loads(c["function"]["arguments"]), ensure_ascii=False))
                for c in m["tool_calls"])
            out.append({"role": "assistant", "content": text + "{\"tool_calls\": [" + calls +
                        "]}"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


# (file, eos, extra variables, with a system message only, suffix without generation prompt,
#  adapt: what recur is given for the template's own system header)
GENERIC = [
    ("microsoft-Phi-3.5-mini-instruct.jinja", "<|endoftext|>", {}, False, "<|endoftext|>"),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
     "<\uff5cend\u2581of\u2581sentence\uff5c>", {}, False, ""),
    # Granite 3.3's own format (an available_tools turn, <|tool_call|> lists) is not done
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|end_of_text|>", {}, True, ""),
]
for path, eos, extra, sys_only, tail in GENERIC:
    full = os.path.join(DATA, path)
    rc, out, _ = recur(["format", full], "")
    check(out.strip() == "generic", "%s is the generic family, got %r" % (path, out))
    for label, messages, tools in CONVS + ([] if sys_only else NO_SYS):
        for gen in (True, False):
            want = jinja_render(full, generic_messages(messages, tools), None, gen, eos, extra)
            if not gen and tail and want.endswith(tail):
                want = want[:-len(tail)]
            have = recur_render(full, messages, tools, gen)
            check(have == want, "%s [%s, gen=%s]:\n  jinja: %s\n  recur: %s" %
                  (path, label, gen, show(want), show(have)))

# ---- refusals -----------------------------------------------------------------------------

BAD_TOOLS = [
    ({"type": "function"}, "must be an array"),
    ([{"type": "function", "function": {"description": "x"}}], "tools[0].function.name"),
    ([WEATHER, WEATHER], "both named \"get_weather\""),
    ([{"type": "retrieval"}], "tools[0] must be"),
    ([{"type": "function", "function": {"name": "a b"}}], "only letters"),
]
for tools, what in BAD_TOOLS:
    rc, out, err = recur(["render", "chatml", "1"], json.dumps({"messages": [U1], "tools": tools}))
    check(rc == 1 and what in err, "tools %r refused naming %r: rc %d, %r" % (tools, what, rc, err))
rc, out, err = recur(["render", "chatml", "1"], json.dumps({"messages": [
    U1, {"role": "assistant", "content": None, "tool_calls": [
        {"function": {"name": "get_weather", "arguments": "[1]"}}]}], "tools": [WEATHER]}))
check(rc == 1 and "not a JSON object" in err and "message 1" in err,
      "arguments that are not an object are refused: %r" % err)

# ---- parser ----------------------------------------------------------------------------

QWEN = os.path.join(DATA, "Qwen-Qwen2.5-7B-Instruct.jinja")
PHI = os.path.join(DATA, "microsoft-Phi-3.5-mini-instruct.jinja")
W = {"name": "get_weather", "arguments": "{\"city\":\"Zürich\",\"days\":2}"}
T = {"name": "get_time", "arguments": "{\"tz\":\"CET\"}"}
PARSE = [
    (QWEN, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", "
           "\"days\": 2}}\n</tool_call>", "", [W]),
    (QWEN, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
           "\"Zürich\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
           "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>", "Let me check.", [W, T]),
    # cut off at the end without its close: still a call
    (QWEN, "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}", "", [T]),
    (QWEN, "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}\n</tool_", "", [T]),
    # arguments as a JSON string (some models write them so)
    (QWEN, "<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\":\\\"CET\\\"}\"}"
           "</tool_call>", "", [T]),
    # broken JSON: all content
    (QWEN, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": </tool_call>",
     "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": </tool_call>", []),
    (QWEN, "No tools needed: 4.", "No tools needed: 4.", []),
    (QWEN, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}"
                                                           "</tool_call>", []),
    (PHI, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", "
          "\"days\": 2}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]}", "",
     [W, T]),
    (PHI, "Sure.\n{\"tool_calls\":[{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}]}",
     "Sure.", [T]),
    (PHI, "{\"tool_calls\": []}", "{\"tool_calls\": []}", []),
    (PHI, "Just text {\"a\": 1}", "Just text {\"a\": 1}", []),
]
LLAMA = os.path.join(DATA, "meta-llama-Llama-3.1-8B-Instruct.jinja")
PARSE += [
    (LLAMA, "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}", "", [T]),
    (LLAMA, "Checking. {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich\", "
            "\"days\": 2}}", "Checking.", [W]),
    (LLAMA, "{\"name\": \"get_time\", \"parameters\": {\"tz\": ", "{\"name\": \"get_time\", "
            "\"parameters\": {\"tz\": ", []),
]
GRANITE = os.path.join(DATA, "ibm-granite-granite-4.1.jinja")
PARSE += [(GRANITE, "Sure.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}"
                    "\n</tool_call>", "Sure.", [T])]
MISTRAL = os.path.join(DATA, "Mistral-Small-3.2-24B-Instruct-2506.jinja")
PARSE += [
    (MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Zürich\", \"days\": 2}", "", [W]),
    (MISTRAL, "On it.[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{\"city\": \"Zürich\", "
              "\"days\": 2}[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}", "On it.", [W, T]),
    (MISTRAL, "[TOOL_CALLS]get_time{\"tz\": \"CET\"}", "[TOOL_CALLS]get_time{\"tz\": \"CET\"}", []),
]
NEMO = os.path.join(DATA, "mistralai-Mistral-Nemo-Instruct-2407.jinja")
PARSE += [
    (NEMO, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", "
           "\"days\": 2}, \"id\": \"a1B2c3D4e\"}, {\"name\": \"get_time\", \"arguments\": "
           "{\"tz\": \"CET\"}, \"id\": \"f5G6h7I8j\"}]", "", [W, T]),
    (NEMO, "[TOOL_CALLS][{\"name\": \"get_time\"", "[TOOL_CALLS][{\"name\": \"get_time\"", []),
]
for tmpl, text, content, calls in PARSE:
    rc, out, err = recur(["parse", tmpl], text)
    got = json.loads(out) if rc == 0 else {"error": err}
    if rc == 0:  # arguments compared as JSON values
        got["tool_calls"] = [{"name": c["name"], "arguments": json.loads(c["arguments"])}
                             for c in got["tool_calls"]]
    want = {"content": content, "tool_calls": [{"name": c["name"],
                                                "arguments": json.loads(c["arguments"])}
                                               for c in calls]}
    check(got == want, "parse %r:\n  want %r\n  got  %r" % (text, want, got))

# ---- grammar ---------------------------------------------------------------------------


def grammar(tmpl, tools, choice="auto", fn="-", parallel=True):
    rc, out, err = recur(["grammar", tmpl, choice, fn, "1" if parallel else "0"],
                         json.dumps(tools))
    return out if rc == 0 else None, err


def matches(g, text):
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False, encoding="utf-8") as f:
        f.write(g)
    try:
        rc, _, _ = recur(["match", f.name], text)
    finally:
        os.unlink(f.name)
    return rc == 0


H1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>"
H2 = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"
G1 = "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}]}"
G2 = ("{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\", "
      "\"days\": 3}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]}")
GRAMMARS = [
    # (template, tools, choice, function, parallel, accepted, rejected)
    (QWEN, [WEATHER, TIME], "auto", "-", True, [H1, H2, H1 + "\n" + H2],
     ["<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"PST\"}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
      "Hello " + H1, H1 + "trailing"]),
    (QWEN, [WEATHER, TIME], "required", "-", False, [H1, H2], [H1 + "\n" + H2]),
    (QWEN, [WEATHER, TIME], "function", "get_time", True, [H2, H2 + H2], [H1]),
    (QWEN, [NOARGS], "auto", "-", True,
     ["<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>"], []),
    (PHI, [WEATHER, TIME], "auto", "-", True, [G1, G2],
     ["{\"tool_calls\": []}", "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": 5}}]}", "{\"response\": \"hi\"}", "{\"tool_calls\": " + G1]),
    (PHI, [WEATHER, TIME], "required", "-", False, [G1], [G2]),
    (PHI, [WEATHER, TIME], "function", "get_weather", True, [G1], [
        "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]}"]),
]
L1 = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich\"}}"
GRAMMARS += [
    (LLAMA, [WEATHER, TIME], "auto", "-", True, [L1, "{\"name\":\"get_time\",\"parameters\":"
                                                  "{\"tz\":\"UTC\"}}"],
     [L1 + L1, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}",
      "{\"name\": \"get_time\", \"parameters\": {}}"]),
    (LLAMA, [WEATHER, TIME], "function", "get_time", False, [
        "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}"], [L1]),
]
GRAMMARS += [(GRANITE, [WEATHER, TIME], "required", "-", True, [H1, H1 + "\n" + H2], [G1, L1])]
M1 = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Zürich\"}"
M2 = "[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{\"tz\": \"UTC\"}"
GRAMMARS += [(MISTRAL, [WEATHER, TIME], "auto", "-", True, [M1, M2, M1 + M2],
              ["[TOOL_CALLS]get_time[CALL_ID]short[ARGS]{\"tz\": \"UTC\"}",
               "[TOOL_CALLS]get_weather[ARGS]{}", "[TOOL_CALLS]nope[ARGS]{}"]),
             (MISTRAL, [WEATHER, TIME], "required", "-", False, [M1], [M1 + M2])]
N1 = ("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}, "
      "\"id\": \"a1B2c3D4e\"}]")
N2 = ("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}, \"id\": "
      "\"a1B2c3D4e\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": "
      "\"f5G6h7I8j\"}]")
GRAMMARS += [(NEMO, [WEATHER, TIME], "auto", "-", True, [N1, N2],
              ["[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}]",
               "[TOOL_CALLS][]", N1.replace("a1B2c3D4e", "short")]),
             (NEMO, [WEATHER, TIME], "required", "-", False, [N1], [N2])]
for tmpl, tools, choice, fn, par, good, bad in GRAMMARS:
    g, err = grammar(tmpl, tools, choice, fn, par)
    check(g is not None, "grammar %s %s: %s" % (choice, fn, err))
    if g is None:
        continue
    for text in good:
        check(matches(g, text), "grammar %s/%s accepts %r" % (choice, fn, text))
        # and what the grammar accepts, the parser reads as calls
        rc, out, _ = recur(["parse", tmpl], text)
        check(rc == 0 and json.loads(out)["tool_calls"], "parser reads the calls in %r" % text)
    for text in bad:
        check(not matches(g, text), "grammar %s/%s rejects %r" % (choice, fn, text))

for tools, choice, fn, what in [([WEATHER], "function", "nope", "\"nope\", which is not among"),
                                ([], "auto", "-", "empty"),
                                ([{"type": "function", "function": {"name": "x", "parameters": {
                                    "type": "object", "not": {}}}}], "auto", "-", "tools[0]")]:
    g, err = grammar(QWEN, tools, choice, fn)
    check(g is None and what in err, "grammar refused naming %r: %r" % (what, err))

print("test_chat_tools: %d passed, %d failed" % (passed, failed))
if passed == 0:
    print("FAIL: no check ran")
sys.exit(1 if failed or passed == 0 else 0)
