#!/usr/bin/env python3
"""Reasoning separation on /v1/chat/completions (tools/serve/reasoning.c), llama-server's
--reasoning-format and reasoning_format (python3 standard library only).

    test_serve_reasoning.py RECUR_BIN MODEL

The shipped model never writes "<think>" by itself, so its output is forced with a `grammar`
that allows one text only (the sampler then writes exactly it): the separation is checked on
the server's real path, whole and streamed, for each format, with a chat template that opens
the thought in the prompt (--chat-template deepseek-r1: the output starts inside it) and one
that does not (the model's chatml). The expected reasoning and content are written out here
from llama-server's rules (reasoning.h), or, where the model's tokens decide the text (max_tokens
inside the reasoning), derived from the raw text that reasoning_format "none" returns.
"""

import json
import os
import subprocess
import sys

RECUR, MODEL = sys.argv[1:3]
from serve_util import check, counts
import serve_util

MSGS = [{"role": "user", "content": "Say something."}]
LONG = "abcdefghijklmnopqrstuvwxyz0123456789"


def gbnf(text):
    return "root ::= " + json.dumps(text)


def chat(srv, text, **kw):
    body = dict(messages=MSGS, grammar=gbnf(text), max_tokens=kw.pop("max_tokens", 64),
                temperature=0, **kw)
    status, ans, _ = srv.post("/v1/chat/completions", body)
    if status != 200:
        return status, ans, None
    return status, ans, ans["choices"][0]


def stream(srv, text, **kw):
    """The concatenated reasoning and content deltas, whether every reasoning delta came before
    every content delta, the finish_reason, and the usage chunk's."""
    body = dict(messages=MSGS, grammar=gbnf(text), max_tokens=kw.pop("max_tokens", 64),
                temperature=0, stream=True, stream_options={"include_usage": True}, **kw)
    status, events, done = srv.stream("/v1/chat/completions", body)
    reasoning, content, ordered, finish, usage = "", "", True, None, None
    for ev in events:
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            d = ch.get("delta", {})
            if d.get("reasoning_content"):
                ordered &= content == ""
                reasoning += d["reasoning_content"]
            if d.get("content"):
                content += d["content"]
            finish = ch.get("finish_reason") or finish
    return dict(status=status, done=done, reasoning=reasoning, content=content, ordered=ordered,
                finish=finish, usage=usage)


def expect(srv, name, text, fmt, reasoning, content, streamed_reasoning=None,
           streamed_content=None, ordered=True, **kw):
    """Whole and streamed answers of the forced text with reasoning_format fmt (None: the
    server's)."""
    if fmt is not None:
        kw["reasoning_format"] = fmt
    status, _, ch = chat(srv, text, **kw)
    msg = ch["message"] if ch else {}
    check("%s: whole: 200" % name, status == 200, status)
    check("%s: whole: content" % name, msg.get("content") == content, msg)
    if reasoning:
        check("%s: whole: reasoning_content" % name, msg.get("reasoning_content") == reasoning, msg)
    else:
        check("%s: whole: no reasoning_content" % name, "reasoning_content" not in msg, msg)
    st = stream(srv, text, **kw)
    sr = reasoning if streamed_reasoning is None else streamed_reasoning
    sc = content if streamed_content is None else streamed_content
    check("%s: streamed: 200 and [DONE]" % name, st["status"] == 200 and st["done"], st)
    check("%s: streamed: reasoning deltas" % name, st["reasoning"] == sr, st)
    check("%s: streamed: content deltas" % name, st["content"] == sc, st)
    check("%s: streamed: reasoning before content" % name, st["ordered"] == ordered, st)
    return ch, st


THINK = "<think>abc</think>xyz"

# ---- a template without a thought in the prompt (the model's chatml) -------------------------
srv = serve_util.Server(RECUR, MODEL)
expect(srv, "auto (default)", THINK, None, "abc", "xyz")
expect(srv, "auto", THINK, "auto", "abc", "xyz")
expect(srv, "deepseek", THINK, "deepseek", "abc", "xyz")
expect(srv, "none", THINK, "none", "", THINK)
expect(srv, "deepseek-legacy", THINK, "deepseek-legacy", "abc", "xyz", "", THINK)
# white space: before the tag it is content, the reasoning is trimmed, after it skipped
expect(srv, "white space", " <think>\n a b \n</think>\n\nxyz\n", "deepseek", "a b", " xyz\n",
       ordered=False)
expect(srv, "white space, legacy", "<think>\n a b \n</think>\n\nxyz", "deepseek-legacy", "a b",
       "xyz", "", "<think>a b</think>xyz")
# no reasoning at the start: tags further on are text
expect(srv, "late tag", "Hi <think>abc</think>", "deepseek", "", "Hi <think>abc</think>")
expect(srv, "two reasonings", "<think>a</think> <think>b</think>c", "deepseek", "ab", "c")
expect(srv, "empty reasoning", "<think></think>xyz", "deepseek", "", "xyz")
expect(srv, "unicode", "<think>h\u00e9</think>w\u00f6rld", "deepseek", "h\u00e9", "w\u00f6rld")

# stop strings act on the whole generated text (as llama-server's), then it is split
expect(srv, "stop inside the reasoning", THINK, "deepseek", "a", "", stop=["b"])
expect(srv, "stop in the content", THINK, "deepseek", "abc", "x", stop=["y"])

# max_tokens inside the reasoning: all of it is reasoning, the content empty (llama-server's);
# the expected reasoning is the raw text ("none") less its opening tag, trimmed, less a partial
# closing tag at its very end. Greedy decoding under the grammar gives one token a character or
# two here, so 10 tokens end inside the reasoning and 12 inside "</think>".
for text, mt in [("<think>" + LONG + "</think>xyz", 10), (THINK, 12)]:
    _, _, raw = chat(srv, text, reasoning_format="none", max_tokens=mt)
    raw_text = raw["message"]["content"] if raw else ""
    check("max_tokens %d: the raw text stops inside the reasoning" % mt,
          raw and raw["finish_reason"] == "length" and raw_text.startswith("<think>a")
          and "</think>" not in raw_text, raw)
    cut = raw_text[len("<think>"):]
    for k in range(len("</think>") - 1, 0, -1):
        if cut.endswith("</think>"[:k]):
            cut = cut[:-k]
            break
    ch, st = expect(srv, "max_tokens %d inside the reasoning" % mt, text, "deepseek",
                    cut.strip(), "", max_tokens=mt)
    check("max_tokens %d: finish_reason length" % mt, ch and ch["finish_reason"] == "length"
          and st["finish"] == "length", (ch, st))
    check("max_tokens %d: every token is reasoning" % mt,
          st["usage"]["completion_tokens_details"]["reasoning_tokens"] == mt, st)
    closed = raw_text == "<think>" + cut  # no partial closing tag: the stream closes it
    expect(srv, "max_tokens %d, legacy" % mt, text, "deepseek-legacy", cut.strip(), "", "",
           "<think>" + cut.strip() + ("</think>" if closed else ""), max_tokens=mt)

# usage.completion_tokens_details.reasoning_tokens: the tokens up to the one that ends
# "</think>", counted from the tokens' own bytes (logprobs)
status, ans, ch = chat(srv, THINK, reasoning_format="deepseek", logprobs=True)
toks = ch["logprobs"]["content"] if ch else []
n, seen = 0, 0
for t in toks:
    if seen >= len("<think>abc</think>"):
        break
    seen += len(bytes(t["bytes"]))
    n += 1
check("reasoning_tokens counts the reasoning's tokens",
      ans.get("usage", {}).get("completion_tokens_details", {}).get("reasoning_tokens") == n
      and 0 < n < ans["usage"]["completion_tokens"], (n, ans.get("usage")))
st = stream(srv, THINK, reasoning_format="deepseek")
check("reasoning_tokens in the streamed usage",
      st["usage"] and st["usage"]["completion_tokens_details"]["reasoning_tokens"] == n, st)
status, ans, ch = chat(srv, THINK, reasoning_format="none")
check("reasoning_tokens 0 with none",
      ans["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0, ans.get("usage"))
# per-token chunks (logprobs) split the same way
st = stream(srv, THINK, reasoning_format="deepseek", logprobs=True)
check("logprobs stream: split", st["reasoning"] == "abc" and st["content"] == "xyz", st)

# several choices: each has its own splitter
status, events, done = srv.stream("/v1/chat/completions", dict(
    messages=MSGS, grammar=gbnf(THINK), max_tokens=64, temperature=0, n=2, stream=True))
per = {}
for ev in events:
    for ch in ev.get("choices", []):
        r, c = per.setdefault(ch["index"], ["", ""]), ch.get("delta", {})
        r[0] += c.get("reasoning_content") or ""
        r[1] += c.get("content") or ""
check("n=2 streamed: each choice split", status == 200 and done
      and per == {0: ["abc", "xyz"], 1: ["abc", "xyz"]}, per)
status, ans, _ = srv.post("/v1/chat/completions", dict(
    messages=MSGS, grammar=gbnf(THINK), max_tokens=64, temperature=0, n=2))
check("n=2 whole: each choice split", status == 200 and all(
    c["message"].get("reasoning_content") == "abc" and c["message"]["content"] == "xyz"
    for c in ans["choices"]) and len(ans["choices"]) == 2, ans)
check("n=2: reasoning_tokens summed over the choices",
      ans["usage"]["completion_tokens_details"]["reasoning_tokens"] == 2 * n, ans["usage"])

# bad values: a clear 400 naming the field
for bad in ["DeepSeek", "", 1, ["none"]]:
    status, ans, _ = srv.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 1,
                                                        "reasoning_format": bad})
    check("reasoning_format %r: 400 naming it" % (bad,),
          status == 400 and "reasoning_format" in ans["error"]["message"], (status, ans))
status, props, _ = srv.request("GET", "/props")
check("/props: reasoning_format auto",
      props["default_generation_settings"]["params"]["reasoning_format"] == "auto", props)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- --reasoning-format none: the server's default, which a request overrides ---------------
srv = serve_util.Server(RECUR, MODEL, "--reasoning-format", "none")
expect(srv, "--reasoning-format none", THINK, None, "", THINK)
expect(srv, "--reasoning-format none, request deepseek", THINK, "deepseek", "abc", "xyz")
status, props, _ = srv.request("GET", "/props")
check("/props: reasoning_format none",
      props["default_generation_settings"]["params"]["reasoning_format"] == "none", props)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- a template that opens the thought in the prompt (DeepSeek-R1's) -------------------------
srv = serve_util.Server(RECUR, MODEL, "--chat-template", "deepseek-r1")
status, ans, _ = srv.post("/apply-template", {"messages": MSGS})
check("deepseek-r1's prompt ends inside <think>",
      status == 200 and ans["prompt"].endswith("<think>\n"), ans)
OPEN = "abc\n</think>\n\nxyz"
expect(srv, "forced open: auto", OPEN, None, "abc", "xyz")
expect(srv, "forced open: none", OPEN, "none", "", OPEN)
expect(srv, "forced open: legacy", OPEN, "deepseek-legacy", "abc", "xyz", "",
       "<think>abc</think>xyz")
expect(srv, "forced open: <think> written anyway", THINK, "deepseek", "abc", "xyz")
# structured output holds the text to JSON from its first token: it is the answer, even where
# the prompt opened a thought (JSON's grammar lets white space follow the value: stripped here)
YES = {"type": "string", "enum": ["yes"]}
for name, extra in [("response_format", {"response_format": {
        "type": "json_schema", "json_schema": {"name": "a", "schema": YES}}}),
        ("json_schema", {"json_schema": YES})]:
    status, ans, _ = srv.post("/v1/chat/completions", dict(
        messages=MSGS, max_tokens=16, temperature=0, **extra))
    msg = ans["choices"][0]["message"] if status == 200 else ans
    check("forced open: %s is the content" % name, status == 200
          and (msg.get("content") or "").strip() == '"yes"' and "reasoning_content" not in msg, msg)
    status, events, done = srv.stream("/v1/chat/completions", dict(
        messages=MSGS, max_tokens=16, temperature=0, stream=True, **extra))
    text = "".join(ch["delta"].get("content") or "" for ev in events
                   for ch in ev.get("choices", []))
    check("forced open: %s streamed is the content" % name, done and text.strip() == '"yes"'
          and not any("reasoning_content" in ch["delta"] for ev in events
                      for ch in ev.get("choices", [])), events[-1])
_, _, raw = chat(srv, LONG, reasoning_format="none", max_tokens=5)
raw_text = raw["message"]["content"] if raw else ""
check("forced open: raw text cut by max_tokens", raw and raw["finish_reason"] == "length"
      and 0 < len(raw_text) < len(LONG) and LONG.startswith(raw_text), raw)
expect(srv, "forced open: never closed", LONG, "deepseek", raw_text, "", max_tokens=5)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- reasoning_content of the history's assistant messages ------------------------------------
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                         "chat-templates")
HIST = [{"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
        {"role": "user", "content": "Q2"}]
LAST = HIST[:2]


def without(msgs):
    return [{k: v for k, v in m.items() if k != "reasoning_content"} for m in msgs]


def applied(srv, msgs, **kw):
    status, ans, _ = srv.post("/apply-template", dict(messages=msgs, **kw))
    return status, ans.get("prompt") if status == 200 else ans


def jinja_render(path, msgs, add):
    """The real template rendered by Debian's python3-jinja2 (as tests/unit/
    test_chat_templates.py does), None when it is not there."""
    code = ("import json,sys,jinja2.sandbox\n"
            "env=jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True,lstrip_blocks=True)\n"
            "a=json.load(sys.stdin)\n"
            "t=env.from_string(open(a['path']).read())\n"
            "sys.stdout.write(t.render(messages=a['msgs'],add_generation_prompt=a['add'],"
            "bos_token='',eos_token=''))\n")
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                           input=json.dumps({"path": path, "msgs": msgs, "add": add}), timeout=60)
    except OSError:
        return None
    return p.stdout if p.returncode == 0 else None


# a template that never reads reasoning_content: accepted and left out, byte for byte
for args in [(), ("--chat-template", "deepseek-r1")]:
    srv = serve_util.Server(RECUR, MODEL, *args)
    for name, msgs, add in [("history", HIST, True), ("last turn", LAST, False)]:
        got, want = applied(srv, msgs, add_generation_prompt=add), \
            applied(srv, without(msgs), add_generation_prompt=add)
        check("%s: %s reasoning_content left out" % (args or "chatml", name),
              got[0] == 200 and got == want, (got, want))
    status, ans, _ = srv.post("/v1/chat/completions", {"messages": HIST, "max_tokens": 2})
    check("%s: a chat with a past reasoning answers" % (args or "chatml",), status == 200, ans)
    for bad, why in [([{"role": "user", "content": "Q", "reasoning_content": "R"}], "assistant"),
                     ([HIST[0], dict(HIST[1], reasoning_content=3), HIST[2]], "string")]:
        status, ans, _ = srv.post("/v1/chat/completions", {"messages": bad, "max_tokens": 1})
        check("%s: bad reasoning_content refused (%s)" % (args or "chatml", why),
              status == 400 and "reasoning_content" in ans["error"]["message"]
              and why in ans["error"]["message"], (status, ans))
    check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# Qwen3's template drops the reasoning of the turns before the last user message (its render by
# Jinja with and without it is the same, and recur's is that text); in the last turn it writes
# it, which recur does not: refused. Nemotron 3's keeps a trace of it in the history: refused.
qwen3 = os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")
srv = serve_util.Server(RECUR, MODEL, "--chat-template", open(qwen3).read())
got = applied(srv, HIST, add_generation_prompt=True)
ref = jinja_render(qwen3, HIST, True)
if ref is None:
    serve_util.skip("Qwen3 rendered by Jinja", "/usr/bin/python3 with jinja2 is not there")
else:
    check("Qwen3: Jinja drops the past reasoning", ref == jinja_render(qwen3, without(HIST), True),
          ref)
    check("Qwen3: recur renders the history as Jinja does", got == (200, ref), (got, ref))
got = applied(srv, LAST, add_generation_prompt=False)
check("Qwen3: a reasoning in the last turn is refused", got[0] == 400
      and "messages\"[1].reasoning_content" in got[1]["error"]["message"], got)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])
nemotron = os.path.join(TEMPLATES, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja")
srv = serve_util.Server(RECUR, MODEL, "--chat-template", open(nemotron).read())
ref = jinja_render(nemotron, HIST, True)
if ref is not None:
    check("Nemotron 3: Jinja keeps a trace of the past reasoning",
          ref != jinja_render(nemotron, without(HIST), True), ref)
got = applied(srv, HIST, add_generation_prompt=True)
check("Nemotron 3: a past reasoning is refused", got[0] == 400
      and "reasoning_content" in got[1]["error"]["message"], got)
check("the server exits cleanly", srv.stop() == 0, srv.log[-5:])

# ---- a bad --reasoning-format stops the server with a message naming the flag ---------------
p = subprocess.run([RECUR, "serve", "-m", MODEL, "--port", "0", "--reasoning-format", "think"],
                   capture_output=True, text=True, timeout=60)
check("--reasoning-format think: refused", p.returncode != 0
      and "--reasoning-format" in p.stderr and "deepseek-legacy" in p.stderr, p.stderr)

print("test_serve_reasoning: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
