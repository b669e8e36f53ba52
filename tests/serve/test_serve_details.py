#!/usr/bin/env python3
"""The llama-server details that its own clients and dashboards read (issue 32, item 6).

    test_serve_details.py RECUR_BIN MODEL

Checks: system_fingerprint ("b<version>-<model fingerprint>") in whole answers and every
stream chunk, the same across requests; a streamed chat's role chunk with "content": null; a
streamed chunk never carrying two tokens' probabilities, also when a stop string's start held
one token's text back until the next (/completion, chat, /v1/completions); return_progress's
prompt_progress events (before the text, counting up to the prompt, the cache counted on a
repeat; none without it); --metrics accepted with /metrics served either way; --no-ui and
--no-webui; -a's comma-separated names as /v1/models' aliases; mixed token and string prompts
on /completion and /v1/completions equal to their tokens put together; the
exceed_context_size_error of a prompt past -c; OpenAI's safety_identifier, prompt_cache_key,
service_tier and reasoning_effort accepted, and their values that could not be honoured
refused by name; /lora-adapters' empty list, and a POST that names an adapter refused; the
endpoints recur knows and does not serve (reranking, POST /props, the router's model loading,
completion control) answered 501 with the reason.
"""

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_util  # noqa: E402
from serve_util import check, counts  # noqa: E402

RECUR, MODEL = sys.argv[1:3]
PROMPT = "Once upon a time"
CHAT = [{"role": "user", "content": "Tell me a fortune."}]


def Server(*args):
    return serve_util.Server(RECUR, MODEL, *args)


# -b 32: a long prompt is read in several steps, each a progress event
srv = Server("-np", "2", "-b", "32", "-ub", "32")

# ---- system_fingerprint --------------------------------------------------------------------
st, chat, _ = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4})
fp = chat.get("system_fingerprint", "") if st == 200 else ""
check("chat: system_fingerprint is b<version>-<16 hex digits>",
      re.fullmatch(r"b\d+\.\d+\.\d+-[0-9a-f]{16}", fp) is not None and
      not fp.endswith("0" * 16), chat)
st, cmpl, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
check("/v1/completions: the same system_fingerprint", cmpl.get("system_fingerprint") == fp, cmpl)
st, ev, done = srv.stream("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4,
                                                   "stream": True})
check("every chat stream chunk has the system_fingerprint",
      done and ev and all(e.get("system_fingerprint") == fp for e in ev), ev)

# ---- the role chunk ------------------------------------------------------------------------
first = ev[0]["choices"][0] if ev and ev[0].get("choices") else {}
check("a streamed chat's first chunk: role assistant, content null",
      first.get("delta") == {"role": "assistant", "content": None}, first)
check("... and only that chunk has a null content",
      all(e["choices"][0]["delta"].get("content") is not None for e in ev[1:-1]), ev)

# ---- /lora-adapters -------------------------------------------------------------------------
# recur loads no LoRA adapters: the list is empty, and setting one names the id it lacks
st, a, _ = srv.request("GET", "/lora-adapters")
check("GET /lora-adapters: an empty list", st == 200 and a == [], a)
st, a, _ = srv.request("POST", "/lora-adapters", raw=b"[]")
check("POST /lora-adapters []: success", st == 200 and a == {"success": True}, a)
st, a, _ = srv.request("POST", "/lora-adapters", raw=json.dumps([{"id": 3, "scale": 0.5}]).encode())
check("POST /lora-adapters with an id: 400 naming it",
      st == 400 and "no LoRA adapter has id 3" in a.get("error", {}).get("message", ""), a)
st, a, _ = srv.request("POST", "/lora-adapters", raw=b"[1]")
check("POST /lora-adapters [1]: 400, the entry's shape",
      st == 400 and "\"id\"" in a.get("error", {}).get("message", ""), a)
st, a, _ = srv.request("POST", "/lora-adapters", raw=b"7")
check("POST /lora-adapters 7: 400, the body's shape", st == 400, a)
st, a, _ = srv.request("POST", "/completion", raw=b"[]")
check("a list body stays refused where an object is asked", st == 400, a)
# llama-server's endpoints recur knows and does not serve: 501 not_supported_error, saying why,
# whatever the body (none, a list, an object)
for method, path, raw, word in (("POST", "/reranking", b"{}", "reranker"),
                                ("POST", "/rerank", b"", "reranker"),
                                ("POST", "/v1/rerank", b"[1]", "reranker"),
                                ("POST", "/v1/reranking", b"{}", "reranker"),
                                ("POST", "/props", b"{}", "properties"),
                                ("POST", "/models/load", b"{}", "one model"),
                                ("POST", "/models/unload", b"", "one model"),
                                ("GET", "/models/sse", None, "one model"),
                                ("POST", "/v1/chat/completions/control",
                                 b'{"id": "x", "action": "reasoning_end"}', "reasoning_control")):
    st, a, _ = srv.request(method, path, raw=raw)
    e = a.get("error", {}) if isinstance(a, dict) else {}
    check("%s %s: 501 not_supported_error saying why" % (method, path),
          st == 501 and e.get("type") == "not_supported_error" and word in e.get("message", ""), a)
st, a, _ = srv.request("GET", "/props")
check("GET /props still served", st == 200 and "default_generation_settings" in a, a)

# ---- one token's probabilities a chunk -----------------------------------------------------
# the greedy continuation's first token; a stop string that begins with its text (and never
# matches whole) holds that text back until the second token arrives
st, whole, _ = srv.post("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                        "n_probs": 1})
probs = whole.get("completion_probabilities", []) if st == 200 else []
check("greedy /completion with n_probs", len(probs) == 6, whole)
stop = [probs[0]["token"] + "\u0001"] if probs else ["\u0001"]
st, ev, _ = srv.stream("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                       "n_probs": 2, "stop": stop, "stream": True})
parts = [e for e in ev if not e.get("stop")]
check("/completion stream: no chunk carries two tokens' probabilities",
      parts and all(len(e.get("completion_probabilities", [])) == len(e["tokens"]) == 1
                    for e in parts), [(e["content"], e.get("tokens")) for e in parts])
check("... the held token's chunk has its probabilities and no text yet",
      parts and parts[0]["content"] == "" and parts[0]["tokens"] == [probs[0]["id"]] and
      parts[1]["content"] == probs[0]["token"] + probs[1]["token"], parts[:2])
check("... the chunks' text and tokens are the whole answer's",
      "".join(e["content"] for e in parts) == whole.get("content") and
      [e["tokens"][0] for e in parts] == [p["id"] for p in probs], parts)

st, cw, _ = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0,
                                              "logprobs": True})
chat_lp = cw["choices"][0]["logprobs"]["content"] if st == 200 else []
cstop = [chat_lp[0]["token"] + "\u0001"] if chat_lp else ["\u0001"]
st, ev, done = srv.stream("/v1/chat/completions", {
    "messages": CHAT, "max_tokens": 8, "temperature": 0, "logprobs": True, "stop": cstop,
    "stream": True, "stream_options": {"include_usage": True}})
entries = [len(((e["choices"][0].get("logprobs") or {}).get("content")) or [])
           for e in ev if e["choices"]]
usage = ev[-1].get("usage") or {} if ev else {}
check("chat stream with logprobs: at most one token's logprobs a chunk, all of them sent",
      done and max(entries) == 1 and sum(entries) == usage.get("completion_tokens"),
      (entries, usage))
streamed = [x for e in ev if e["choices"]
            for x in ((e["choices"][0].get("logprobs") or {}).get("content") or [])]
check("... the same tokens as the whole answer's",
      [x["token"] for x in streamed] == [x["token"] for x in chat_lp], (streamed, chat_lp))
st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                              "logprobs": 1, "stop": stop, "stream": True})
lens = [len((c["logprobs"] or {}).get("tokens", [])) for e in ev for c in e["choices"]]
check("/v1/completions stream: at most one token's logprobs a chunk",
      done and lens and max(lens) == 1 and sum(lens) == 6, lens)

# ---- return_progress -----------------------------------------------------------------------
long_prompt = " ".join(["The old lighthouse keeper counted the ships."] * 12)
body = {"prompt": long_prompt, "n_predict": 2, "stream": True, "return_progress": True}
st, ev, _ = srv.stream("/completion", body)
prog = [e["prompt_progress"] for e in ev if "prompt_progress" in e]
first_text = next((i for i, e in enumerate(ev) if e.get("tokens")), len(ev))
final = ev[-1] if ev else {}
check("return_progress: several prompt_progress events, all before the first token",
      len(prog) >= 3 and all("prompt_progress" not in e for e in ev[first_text:]),
      [list(e) for e in ev])
check("... processed counts up to total, the prompt's tokens; no cache on a fresh prompt",
      prog and [p["processed"] for p in prog] == sorted({p["processed"] for p in prog}) and
      prog[-1]["processed"] == prog[-1]["total"] == final.get("tokens_evaluated") and
      all(p["cache"] == 0 and p["time_ms"] >= 0 for p in prog), prog)
check("... a progress chunk has no text", all(e["content"] == "" and e["tokens"] == []
                                              for e in ev if "prompt_progress" in e), ev)
st, ev, _ = srv.stream("/completion", body)
prog = [e["prompt_progress"] for e in ev if "prompt_progress" in e]
check("return_progress on a repeat: the cache counted, processed from there to total",
      prog and prog[0]["cache"] > 0 and all(p["processed"] >= p["cache"] for p in prog) and
      prog[-1]["processed"] == prog[-1]["total"], prog)
st, ev, done = srv.stream("/v1/chat/completions", {
    "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 2, "stream": True,
    "return_progress": True})
prog = [e for e in ev if "prompt_progress" in e]
check("return_progress on chat: chunks with no choices and prompt_progress",
      done and len(prog) >= 2 and all(e["choices"] == [] for e in prog) and
      prog[-1]["prompt_progress"]["processed"] == prog[-1]["prompt_progress"]["total"], prog)
st, ev, _ = srv.stream("/completion", dict(body, return_progress=False))
check("without return_progress: no progress events",
      ev and not any("prompt_progress" in e for e in ev), ev)

# ---- mixed token and string prompts --------------------------------------------------------
st, tk, _ = srv.post("/tokenize", {"content": " upon a"})
mid = tk.get("tokens", []) if st == 200 else []
st, tk, _ = srv.post("/tokenize", {"content": "Once"})
once = tk.get("tokens", []) if st == 200 else []
mixed = once + [" upon a", 640]
flat = once + mid + [640]
for path, length in (("/completion", "n_predict"), ("/v1/completions", "max_tokens")):
    sa, a, _ = srv.post(path, {"prompt": mixed, length: 6, "temperature": 0})
    sb, b, _ = srv.post(path, {"prompt": flat, length: 6, "temperature": 0})
    if path == "/completion":
        same = sa == sb == 200 and a["tokens_evaluated"] == b["tokens_evaluated"] == len(flat) \
            and a["content"] == b["content"]
    else:
        same = sa == sb == 200 and a["usage"]["prompt_tokens"] == len(flat) == \
            b["usage"]["prompt_tokens"] and a["choices"][0]["text"] == b["choices"][0]["text"]
    check(path + ": a mixed prompt is its tokens put together", mid and same, (a, b))
st, a, _ = srv.post("/v1/completions", {"prompt": [1, {"x": 1}], "max_tokens": 1})
check("/v1/completions: an element neither id nor string is refused by index",
      st == 400 and '"prompt"[1]' in a["error"]["message"], a)

# ---- OpenAI's fields that cannot change a completion ---------------------------------------
for path, b in (("/v1/chat/completions", {"messages": CHAT}),
                ("/v1/completions", {"prompt": PROMPT})):
    for extra in ({"safety_identifier": "user-1234"}, {"prompt_cache_key": "conv-7"},
                  {"service_tier": "auto"}, {"service_tier": "default"}):
        st, a, _ = srv.post(path, dict(b, max_tokens=1, **extra))
        check("%s accepts %s" % (path, json.dumps(extra)), st == 200, a)
    st, a, _ = srv.post(path, dict(b, max_tokens=1, service_tier="priority"))
    check(path + ": service_tier priority refused by name and value",
          st == 400 and "service_tier" in a["error"]["message"] and
          "priority" in a["error"]["message"], a)
for effort in ("none", "low", "high", "default"):
    st, a, _ = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1,
                                                 "reasoning_effort": effort})
    check("chat accepts reasoning_effort " + effort, st == 200, a)
st, a, _ = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1,
                                             "reasoning_effort": "extreme"})
check("chat: a reasoning_effort that is no level is refused by name",
      st == 400 and "reasoning_effort" in a["error"]["message"] and
      "extreme" in a["error"]["message"], a)
st, a, _ = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1,
                                             "service_tier": 3})
check("chat: a service_tier that is no string is refused",
      st == 400 and "service_tier" in a["error"]["message"], a)

# ---- /v1/models without -a ------------------------------------------------------------------
st, models, _ = srv.request("GET", "/v1/models")
check("without -a: aliases is an empty list", st == 200 and models["data"][0]["aliases"] == [],
      models)
st, _, _ = srv.request("GET", "/")
check("the web page is served by default", st == 200)
st, text, _ = srv.request("GET", "/metrics")
check("/metrics is served without --metrics (kept on: see README)",
      st == 200 and "llamacpp:prompt_tokens_total" in text)
srv.stop()

# ---- flags: -a names, --no-ui, --metrics, -c ------------------------------------------------
s2 = Server("-a", "gpt-4o-mini,recur-small,gpt-4o-mini", "--no-ui", "--metrics", "-c", "16")
st, models, _ = s2.request("GET", "/v1/models")
m = models["data"][0] if st == 200 else {}
check("-a a,b,a: the first is the id, aliases lists each name once in order",
      m.get("id") == "gpt-4o-mini" and m.get("aliases") == ["gpt-4o-mini", "recur-small"], m)
st, a, _ = s2.post("/v1/completions", {"prompt": "Once", "max_tokens": 1})
check("answers name the first alias", st == 200 and a["model"] == "gpt-4o-mini", a)
st, _, _ = s2.request("GET", "/")
check("--no-ui: no web page", st == 404)
st, text, _ = s2.request("GET", "/metrics")
check("--metrics: /metrics served", st == 200 and "llamacpp:prompt_tokens_total" in text)
for path, b in (("/completion", {"prompt": long_prompt}),
                ("/v1/completions", {"prompt": long_prompt}),
                ("/v1/chat/completions", {"messages": [{"role": "user", "content": long_prompt}]})):
    st, a, _ = s2.post(path, b)
    e = a.get("error", {}) if isinstance(a, dict) else {}
    check(path + ": a prompt past -c is an exceed_context_size_error with its numbers",
          st == 400 and e.get("type") == "exceed_context_size_error" and e.get("code") == 400 and
          e.get("n_ctx") == 16 and e.get("n_prompt_tokens", 0) > 16 and
          str(e.get("n_prompt_tokens")) in e.get("message", ""), a)
st, a, _ = s2.post("/completion", {"prompt": long_prompt, "bogus": 1})
check("a field at fault before the prompt: an ordinary invalid_request_error",
      st == 400 and a["error"]["type"] == "invalid_request_error", a)
s2.stop()
s3 = Server("--no-webui")
st, _, _ = s3.request("GET", "/")
check("--no-webui: no web page either", st == 404)
s3.stop()
p = subprocess.run([RECUR, "serve", "-m", MODEL, "--port", "0", "-a", "a,,b"],
                   capture_output=True, text=True, timeout=60)
check("-a with an empty name is refused at start",
      p.returncode != 0 and "--alias a,,b" in p.stderr and "empty" in p.stderr, p.stderr)

print("test_serve_details: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
