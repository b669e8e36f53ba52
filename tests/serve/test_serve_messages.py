#!/usr/bin/env python3
"""POST /v1/messages and /v1/messages/count_tokens (tools/serve/messages.c), Anthropic's
Messages API (python3 standard library only).

    test_serve_messages.py RECUR_BIN MODEL

Every expected value comes from the server's other endpoints for the equivalent chat, never from
/v1/messages itself: the rendered prompt is /apply-template's (plus a prefill's text after it),
its tokens /tokenize's and /v1/chat/completions/input_tokens', the greedy answer
/v1/chat/completions' (temperature 0). Checked: the whole answer's and the stream's shapes and
event order, the deltas joined equal to the whole text, usage (input + cache read = the
prompt's tokens, output = the answer's tokens), stop_sequences and max_tokens, system as a
string and as blocks, consecutive turns of one role combined, the prefill, every refused field's
message and Anthropic's error shape, the key as x-api-key, a bad request beside a running good
one, a stream cut by its client. Then the official @anthropic-ai/sdk (tests/serve/anthropic).
The shipped model is tiny: structure and consistency, not content.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

RECUR, MODEL = sys.argv[1:3]
from serve_util import check, counts, wait_for
import serve_util

HERE = os.path.dirname(os.path.abspath(__file__))
srv = serve_util.Server(RECUR, MODEL, "-np", "2")

SYSTEM, USER = "You are terse.", "Tell me a fortune."


def msg(**kw):
    body = {"model": "recur", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": USER}]}
    body.update(kw)
    return body


def chat_greedy(messages, max_tokens=16, **kw):
    st, body, _ = srv.post("/v1/chat/completions", dict(messages=messages, max_tokens=max_tokens,
                                                        temperature=0, **kw))
    assert st == 200, body
    return body


def chat_tokens(messages):
    st, body, _ = srv.post("/v1/chat/completions/input_tokens", {"messages": messages})
    assert st == 200, body
    return body["input_tokens"]


def rendered(messages):
    st, body, _ = srv.post("/apply-template", {"messages": messages})
    assert st == 200, body
    return body["prompt"]


def tokenize(text):
    st, body, _ = srv.post("/tokenize", {"content": text, "add_special": True,
                                         "parse_special": True})
    assert st == 200, body
    return body["tokens"]


def count(body):
    st, got, _ = srv.post("/v1/messages/count_tokens", body)
    return got["input_tokens"] if st == 200 and isinstance(got, dict) else (st, got)


def events(path, body, headers=None, server=None):
    """The stream's (event name, data) pairs, and whether every data line had its event line."""
    conn = http.client.HTTPConnection("127.0.0.1", (server or srv).port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers or {})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    out, paired = [], True
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        name = lines[0][len("event: "):] if lines[0].startswith("event: ") else None
        data = [json.loads(l[6:]) for l in lines if l.startswith("data: ")]
        paired &= name is not None and len(data) == 1 and data[0].get("type") == name
        out.append((name, data[0] if data else None))
    return resp.status, resp.getheader("Content-Type"), out, paired


sys_chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
ref = chat_greedy(sys_chat)
ref_text = ref["choices"][0]["message"]["content"]
n_prompt = chat_tokens(sys_chat)

# ---- the whole answer ---------------------------------------------------------------------
st, m, resp = srv.post("/v1/messages", msg(system=SYSTEM))
check("whole: 200", st == 200, str(m))
check("whole: keys", set(m) == {"id", "type", "role", "model", "content", "stop_reason",
                                "stop_sequence", "usage"}, str(m))
check("whole: id, type, role", m["id"].startswith("msg_") and m["type"] == "message" and
      m["role"] == "assistant", str(m))
check("whole: one text block", m["content"] == [{"type": "text", "text": m["content"][0]["text"]}],
      str(m["content"]))
check("whole: greedy text equals /v1/chat/completions'", m["content"][0]["text"] == ref_text,
      repr((m["content"][0]["text"], ref_text)))
fin = ref["choices"][0]["finish_reason"]
check("whole: stop_reason matches chat's finish_reason",
      m["stop_reason"] == {"length": "max_tokens", "stop": "end_turn"}[fin], m["stop_reason"])
check("whole: stop_sequence null", m["stop_sequence"] is None)
u = m["usage"]
check("usage: keys", set(u) == {"input_tokens", "output_tokens", "cache_read_input_tokens",
                                "cache_creation_input_tokens"}, str(u))
check("usage: input + cache read = the chat's tokens",
      u["input_tokens"] + u["cache_read_input_tokens"] == n_prompt, "%s vs %d" % (u, n_prompt))
check("usage: the chat's tokens = /tokenize of /apply-template's prompt",
      n_prompt == len(tokenize(rendered(sys_chat))))
check("usage: output = chat's completion tokens",
      u["output_tokens"] == ref["usage"]["completion_tokens"], str(u))
check("usage: cache creation 0", u["cache_creation_input_tokens"] == 0)
# the same prompt again: its tokens come from the prefix cache
st, m2, _ = srv.post("/v1/messages", msg(system=SYSTEM))
check("again: read from the cache", m2["usage"]["cache_read_input_tokens"] > 0 and
      m2["usage"]["input_tokens"] + m2["usage"]["cache_read_input_tokens"] == n_prompt,
      str(m2["usage"]))
check("again: the same text", m2["content"][0]["text"] == ref_text)

# ---- the rendered prompt ------------------------------------------------------------------
check("count_tokens: {input_tokens} = the chat's", count(msg(system=SYSTEM)) == n_prompt)
st, body, _ = srv.post("/v1/messages/count_tokens",
                       {"model": "x", "system": SYSTEM, "messages": [{"role": "user", "content": USER}]})
check("count_tokens without max_tokens: only input_tokens", st == 200 and body == {"input_tokens": n_prompt},
      str(body))
blocks = [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a fortune.",
                                                  "cache_control": {"type": "ephemeral"}}]
check("system as blocks = as a string",
      count(msg(system=[{"type": "text", "text": SYSTEM}], messages=[{"role": "user", "content": blocks}]))
      == n_prompt)
# consecutive user messages: one turn, their texts joined
two = [{"role": "user", "content": "Tell me "}, {"role": "user", "content": [{"type": "text", "text": "a fortune."}]}]
check("consecutive user messages are one turn", count(msg(system=SYSTEM, messages=two)) == n_prompt)
conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": USER}]
check("a conversation: the chat's tokens", count(msg(messages=conv)) == chat_tokens(conv))
st, mc, _ = srv.post("/v1/messages", msg(messages=conv))
check("a conversation: greedy text equals chat's",
      st == 200 and mc["content"][0]["text"] == chat_greedy(conv)["choices"][0]["message"]["content"],
      str(mc))
# a prefill: the chat up to its generation prompt, then the assistant's start as text
pre = [{"role": "user", "content": USER}, {"role": "assistant", "content": "Your future"}]
prompt = rendered(pre[:1]) + "Your future"
check("prefill: the tokens of the generation prompt + its text", count(msg(messages=pre)) ==
      len(tokenize(prompt)), "%s vs %d" % (count(msg(messages=pre)), len(tokenize(prompt))))
st, mp, _ = srv.post("/v1/messages", msg(messages=pre, max_tokens=8))
st2, cp, _ = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0})
check("prefill: the answer continues it (the completion of that text starts with it)",
      st == 200 and st2 == 200 and cp["choices"][0]["text"].startswith(mp["content"][0]["text"]),
      repr((mp, cp)))
check("prefill: its text is not repeated", not mp["content"][0]["text"].startswith("Your future"))

# ---- stop_sequences, max_tokens -----------------------------------------------------------
words = ref_text.split()
stop_at = words[1][:2] if len(words) > 1 else None
if stop_at:
    st, ms, _ = srv.post("/v1/messages", msg(system=SYSTEM, stop_sequences=["zzqx", stop_at]))
    check("stop_sequences: stop_reason, the matched string",
          ms["stop_reason"] == "stop_sequence" and ms["stop_sequence"] == stop_at, str(ms))
    check("stop_sequences: the text before it",
          ms["content"][0]["text"] == ref_text[:ref_text.index(stop_at)], repr(ms["content"]))
    st, ct, ev, _ = events("/v1/messages", msg(system=SYSTEM, stream=True, stop_sequences=[stop_at]))
    md = [d for n, d in ev if n == "message_delta"]
    check("stop_sequences streamed: message_delta names it", md and md[0]["delta"] ==
          {"stop_reason": "stop_sequence", "stop_sequence": stop_at}, str(md))
    check("stop_sequences streamed: the deltas stop before it",
          "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta") ==
          ref_text[:ref_text.index(stop_at)])
st, mm, _ = srv.post("/v1/messages", msg(max_tokens=3, system=SYSTEM))
check("max_tokens 3: stop_reason max_tokens, 3 tokens", mm["stop_reason"] == "max_tokens" and
      mm["usage"]["output_tokens"] == 3, str(mm))
st, m0, _ = srv.post("/v1/messages", msg(max_tokens=0))
check("max_tokens 0: no text", st == 200 and m0["content"][0]["text"] == "" and
      m0["usage"]["output_tokens"] == 0 and m0["stop_reason"] == "max_tokens", str(m0))

# ---- the stream ---------------------------------------------------------------------------
st, ctype, ev, paired = events("/v1/messages", msg(system=SYSTEM, stream=True))
names = [n for n, _ in ev]
check("stream: 200 text/event-stream", st == 200 and ctype.startswith("text/event-stream"), ctype)
check("stream: every data has its event line, type = the event's name", paired)
core = [n for n in names if n != "content_block_delta"]
check("stream: events in order", core == ["message_start", "content_block_start", "ping",
                                          "content_block_stop", "message_delta", "message_stop"],
      str(names))
check("stream: deltas between the block's start and stop",
      all(names.index("content_block_start") < i < names.index("content_block_stop")
          for i, n in enumerate(names) if n == "content_block_delta"))
start = ev[0][1]["message"]
check("message_start: the message, empty content, no stop yet",
      start["content"] == [] and start["stop_reason"] is None and start["role"] == "assistant" and
      start["id"].startswith("msg_"), str(start))
check("message_start: usage input + cache read = the chat's tokens",
      start["usage"]["input_tokens"] + start["usage"]["cache_read_input_tokens"] == n_prompt,
      str(start["usage"]))
check("content_block_start", ev[1][1] == {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}}, str(ev[1]))
deltas = [d for n, d in ev if n == "content_block_delta"]
check("deltas: text_delta at index 0", all(d["index"] == 0 and d["delta"]["type"] == "text_delta"
                                           for d in deltas), str(deltas[:2]))
check("stream: deltas joined = the whole answer's text",
      "".join(d["delta"]["text"] for d in deltas) == ref_text)
md = [d for n, d in ev if n == "message_delta"][0]
check("message_delta: stop and output tokens", md["delta"] == {"stop_reason": m["stop_reason"],
      "stop_sequence": None} and md["usage"]["output_tokens"] == u["output_tokens"], str(md))

# ---- refused and accepted fields ----------------------------------------------------------
REFUSED = [
    ("max_tokens missing", {"max_tokens": None}, "max_tokens"),
    ("temperature above 1", {"temperature": 1.5}, "temperature"),
    ("a server tool", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
     "web_search_20250305"),
    ("tool_choice any", {"tool_choice": {"type": "any"}}, "tool_choice"),
    # recur has no reasoning budget: one that could bind (below max_tokens) is refused
    ("thinking budget below max_tokens", {"thinking": {"type": "enabled", "budget_tokens": 4}},
     "budget_tokens"),
    ("thinking without budget_tokens", {"thinking": {"type": "enabled"}}, "budget_tokens"),
    ("thinking display summarized", {"thinking": {"type": "adaptive", "display": "summarized"}},
     "display"),
    ("thinking of another type", {"thinking": {"type": "sometimes"}}, "thinking"),
    ("a thinking block in a user message", {"messages": [{"role": "user", "content": [
        {"type": "thinking", "thinking": "x", "signature": ""}]}]}, "thinking"),
    ("a thinking block's unknown field", {"messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "x", "signature": "", "extra": 1}]},
        {"role": "user", "content": "b"}]}, "extra"),
    ("an unknown field", {"frobnicate": 1}, "frobnicate"),
    ("a field of OpenAI's", {"seed": 1}, "seed"),
    ("image block", {"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, "image"),
    ("document block", {"messages": [{"role": "user", "content": [{"type": "document"}]}]},
     "document"),
    ("tool_result block", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "x", "content": "1"}]}]}, "tool_use_id \"x\""),
    ("a system role in messages", {"messages": [{"role": "system", "content": "x"}]}, "role"),
    ("a message field", {"messages": [{"role": "user", "content": "x", "name": "n"}]}, "name"),
    ("empty messages", {"messages": []}, "messages"),
    ("five stop sequences", {"stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
    ("an empty stop sequence", {"stop_sequences": [""]}, "stop_sequences"),
    ("metadata not an object", {"metadata": "x"}, "metadata"),
    ("system not text", {"system": 5}, "system"),
    ("a block's citations", {"system": [{"type": "text", "text": "x", "citations": [{"a": 1}]}]},
     "citations"),
    ("service_tier", {"service_tier": "priority"}, "service_tier"),
]
for name, change, word in REFUSED:
    body = msg(**change)
    body = {k: v for k, v in body.items() if v is not None}
    st, e, _ = srv.post("/v1/messages", body)
    check("refused, " + name + ": 400 in Anthropic's shape naming " + word,
          st == 400 and isinstance(e, dict) and e.get("type") == "error" and
          e["error"]["type"] == "invalid_request_error" and word in e["error"]["message"],
          "%d %s" % (st, e))
ACCEPTED = [("an empty tools list", {"tools": []}), ("tool_choice auto", {"tool_choice": {"type": "auto"}}),
            ("thinking disabled", {"thinking": {"type": "disabled"}}),
            ("thinking enabled, a budget that cannot bind",
             {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
            ("thinking adaptive", {"thinking": {"type": "adaptive"}}),
            ("thinking adaptive, display omitted",
             {"thinking": {"type": "adaptive", "display": "omitted"}}),
            ("metadata", {"metadata": {"user_id": "u-1"}}), ("service_tier auto", {"service_tier": "auto"}),
            ("top_p, top_k", {"top_p": 0.9, "top_k": 5})]
for name, change in ACCEPTED:
    st, body, _ = srv.post("/v1/messages", msg(max_tokens=2, **change))
    check("accepted: " + name, st == 200 and body["type"] == "message", str(body))
st, e, _ = srv.post("/v1/messages/count_tokens", {"model": "x", "messages": "hi"})
check("count_tokens refuses what /v1/messages refuses", st == 400 and e["type"] == "error" and
      "messages" in e["error"]["message"], str(e))
st, e, _ = srv.request("POST", "/v1/messages", raw=b"{not json")
check("a body that is not JSON: Anthropic's shape", st == 400 and e["type"] == "error", str(e))
st, e, _ = srv.post("/v1/chat/completions", {"messages": "x"})
check("other endpoints keep OpenAI's error shape", st == 400 and "type" not in e and
      e["error"]["code"] == 400, str(e))

# ---- a bad request beside a running good one ----------------------------------------------
long_ref = chat_greedy(sys_chat, max_tokens=200)["choices"][0]["message"]["content"]
result = {}


def good():
    result["r"] = srv.post("/v1/messages", msg(system=SYSTEM, max_tokens=200))


th = threading.Thread(target=good)
th.start()
bad = [srv.post("/v1/messages", msg(temperature=3))[0] for _ in range(5)]
th.join()
check("concurrent: the bad ones 400", bad == [400] * 5, str(bad))
st, g, _ = result["r"]
check("concurrent: the good one's text unchanged", st == 200 and g["content"][0]["text"] == long_ref)

# ---- a stream cut by its client -----------------------------------------------------------
s = socket.create_connection(("127.0.0.1", srv.port))
body = json.dumps(msg(system=SYSTEM, stream=True, max_tokens=4000, temperature=1)).encode()
s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
got = b""
while b"content_block_delta" not in got:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
check("cut: the stream had started", b"content_block_delta" in got)
s.close()
check("cut: its sequence is freed", wait_for(
    lambda: srv.metrics()["recur_sequences_in_use"] == 0, 30))
st, after, _ = srv.post("/v1/messages", msg(system=SYSTEM))
check("cut: the next request answers the same", st == 200 and after["content"][0]["text"] == ref_text)
check("srv server stops cleanly", srv.stop() == 0, "".join(srv.log[-20:]))

# ---- failures: past --timeout, whole (504) and streamed (an error event) ----------------------
quick = serve_util.Server(RECUR, MODEL, "-np", "1", "--timeout", "1", "--max-tokens", "100000")
for streamed in (False, True):
    # the only slot taken past the deadline; the message waits in the queue until it too is late
    hog = threading.Thread(target=quick.post, args=("/completion", {
        "prompt": "x", "n_predict": 100000, "ignore_eos": True, "temperature": 0.8}))
    hog.start()
    wait_for(lambda: quick.metrics()["recur_sequences_in_use"] == 1)
    if streamed:
        st, _, ev, paired = events("/v1/messages", msg(stream=True, max_tokens=100000),
                                   server=quick)
        names = [n for n, _ in ev]
        check("timed out, streamed: the stream ends with an error event, no message_stop",
              paired and names and names[-1] == "error" and "message_stop" not in names and
              ev[-1][1]["error"]["type"] == "timeout_error" and
              ev[-1][1]["error"]["message"] == "timed out", str(ev[-2:]))
    else:
        st, e, _ = quick.post("/v1/messages", msg(max_tokens=100000))
        check("timed out: 504 timeout_error in Anthropic's shape", st == 504 and
              e["type"] == "error" and e["error"]["type"] == "timeout_error", "%d %s" % (st, e))
    hog.join()
check("quick server stops cleanly", quick.stop() == 0, "".join(quick.log[-20:]))
# the -c budget: model_context_window_exceeded (the greedy answer runs longer than 3 tokens)
tight = serve_util.Server(RECUR, MODEL, "-c", str(n_prompt + 3))
st, mt, _ = tight.post("/v1/messages", msg(system=SYSTEM))
check("the -c budget: stop_reason model_context_window_exceeded",
      ref["usage"]["completion_tokens"] > 3 and st == 200 and
      mt["stop_reason"] == "model_context_window_exceeded" and
      mt["usage"]["output_tokens"] + n_prompt <= n_prompt + 3 and
      ref_text.startswith(mt["content"][0]["text"]), "%d %s" % (st, mt))
check("tight server stops cleanly", tight.stop() == 0, "".join(tight.log[-20:]))
# a full queue: 503 overloaded_error, with Retry-After
full = serve_util.Server(RECUR, MODEL, "-np", "1", "--queue", "0", "--timeout", "1",
                         "--max-tokens", "100000")
hog = threading.Thread(target=full.post, args=("/completion", {
    "prompt": "x", "n_predict": 100000, "ignore_eos": True, "temperature": 0.8}))
hog.start()
wait_for(lambda: full.metrics()["recur_sequences_in_use"] == 1)
st, e, resp = full.post("/v1/messages", msg())
check("a full queue: 503 overloaded_error in Anthropic's shape, Retry-After",
      st == 503 and e["type"] == "error" and e["error"]["type"] == "overloaded_error" and
      resp.getheader("Retry-After") == "1", "%d %s" % (st, e))
hog.join()
check("full server stops cleanly", full.stop() == 0, "".join(full.log[-20:]))

# ---- keys: x-api-key, as Anthropic's SDK sends it -----------------------------------------
keyed = serve_util.Server(RECUR, MODEL, "--api-key", "sekret")
st, _, _ = keyed.post("/v1/messages", msg(max_tokens=1), headers={"x-api-key": "sekret",
                                                                  "anthropic-version": "2023-06-01"})
check("x-api-key: accepted", st == 200)
st, _, _ = keyed.post("/v1/messages", msg(max_tokens=1), headers={"Authorization": "Bearer sekret"})
check("Authorization Bearer: accepted", st == 200)
st, e, _ = keyed.post("/v1/messages", msg(max_tokens=1), headers={"x-api-key": "wrong"})
check("a wrong key: 401 authentication_error", st == 401 and e["type"] == "error" and
      e["error"]["type"] == "authentication_error", str(e))
st, e, _ = keyed.post("/v1/messages/count_tokens", msg(), headers={})
check("count_tokens needs the key too", st == 401, str(e))

# ---- the official SDK ---------------------------------------------------------------------
if os.path.isdir(os.path.join(HERE, "anthropic", "node_modules", "@anthropic-ai", "sdk")):
    fd, exp_path = tempfile.mkstemp(prefix="recur-anthropic-expected-", suffix=".json")
    # 24 tokens, as the node test asks
    kst, kref, _ = keyed.post("/v1/chat/completions", {"messages": sys_chat, "max_tokens": 24,
                                                       "temperature": 0},
                              headers={"x-api-key": "sekret"})
    user_only = [{"role": "user", "content": USER}]
    cst, cnt, _ = keyed.post("/v1/chat/completions/input_tokens", {"messages": user_only},
                             headers={"x-api-key": "sekret"})
    with os.fdopen(fd, "w") as f:
        json.dump({"text": kref["choices"][0]["message"]["content"], "input_tokens": n_prompt,
                   "count": cnt["input_tokens"]}, f)
    r = subprocess.run(["node", os.path.join(HERE, "anthropic", "test.mjs"),
                        "http://127.0.0.1:%d" % keyed.port, "sekret", exp_path],
                       capture_output=True, text=True, timeout=120)
    check("the @anthropic-ai/sdk client: " + r.stdout.strip(), r.returncode == 0,
          r.stderr + r.stdout)
    os.unlink(exp_path)
else:
    check("the @anthropic-ai/sdk package is installed (tests/serve/anthropic; the set-up runs "
          "npm ci)", False)
check("keyed server stops cleanly", keyed.stop() == 0, "".join(keyed.log[-20:]))

print("test_serve_messages: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
