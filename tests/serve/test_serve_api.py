#!/usr/bin/env python3
"""Tests of recur serve's completion endpoints field by field, on the shipped model.

    test_serve_api.py RECUR_BIN MODEL

/v1/completions (logprobs, echo, logit_bias, penalties, suffix/best_of/user, the streamed
chunks with and without stream_options.include_usage), /v1/chat/completions (messages and
content parts rendered as chatml, whole and streamed chunks, n > 1, logprobs/top_logprobs,
refused fields, multi-turn prefix reuse), llama-server's /completion (n_probs, post-sampling
probabilities, return_tokens, stop_type and stopping_word, truncated, timings,
response_fields, logit_bias forms, prompt lists, refused samplers) and the field tables
(unknown fields refused by name).

Log-probabilities are checked against tests/ref/mamba_ref.py, an independent float64 numpy
implementation of the model: logprob = log-softmax of its logits, within 2e-3 (recur runs in
float32; the model's logits are O(10)).
"""

import json
import math
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import numpy as np
except ImportError:
    # Debian's python3-numpy lives with /usr/bin/python3 (see tests/ref/test_ref.py)
    if os.path.exists("/usr/bin/python3") and not os.environ.get("RECUR_REF_REEXEC"):
        os.environ["RECUR_REF_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("test_serve_api: numpy is required (Debian: apt-get install python3-numpy)")

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import serve_util  # noqa: E402
from serve_util import check, counts  # noqa: E402
import mamba_ref  # noqa: E402
from gguf_reader import GGUFFile  # noqa: E402

RECUR, MODEL = sys.argv[1:3]
TOL = 2e-3
PROMPT = "Once upon a time"
EOS = GGUFFile(MODEL).kv["tokenizer.ggml.eos_token_id"]
REF = mamba_ref.load_model(MODEL)


def ref_logprobs(tokens):
    """Row i: log-softmax of the reference's logits after tokens[0 .. i]."""
    rows = mamba_ref.run_sequence(REF, tokens)
    return np.array([mamba_ref.log_softmax(r) for r in rows])


srv = serve_util.Server(RECUR, MODEL, "-np", "4")


def post(path, body):
    return srv.post(path, body)


def tokenize(text):
    st, b, _ = post("/tokenize", {"content": text})
    assert st == 200, b
    return b["tokens"]


def refused(name, path, body, field):
    st, b, _ = post(path, body)
    msg = b.get("error", {}).get("message", "") if isinstance(b, dict) else ""
    check("refused: " + name, st == 400 and ('"%s"' % field) in msg, "%s %r" % (st, b))


def accepted(name, path, body):
    st, b, _ = post(path, body)
    check("accepted: " + name, st == 200, "%s %r" % (st, b))
    return b


# ---- /v1/completions: logprobs against the reference, echo ---------------------------------
ptoks = tokenize(PROMPT)
st, b, _ = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                    "logprobs": 3, "echo": True})
check("logprobs+echo status", st == 200, b)
ch = b["choices"][0]
lp = ch["logprobs"]
check("echo puts the prompt first", ch["text"].startswith(PROMPT), ch["text"])
n_all = len(ptoks) + 6
check("legacy logprobs shape", all(len(lp[k]) == n_all for k in
                                   ("tokens", "token_logprobs", "top_logprobs", "text_offset")),
      lp)
check("the first prompt token has no logprob", lp["token_logprobs"][0] is None and
      lp["top_logprobs"][0] is None)
check("tokens join to the text", "".join(lp["tokens"]) == ch["text"])
check("text_offset", lp["text_offset"] == [sum(len(t.encode()) for t in lp["tokens"][:i])
                                           for i in range(n_all)], lp["text_offset"])
# the completion's token ids: /completion with return_tokens gives them
st, lb, _ = post("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                 "return_tokens": True, "n_probs": 3})
gen = lb["tokens"]
check("the same greedy text on both endpoints", ch["text"] == PROMPT + lb["content"],
      (ch["text"], lb["content"]))
ref = ref_logprobs(ptoks + gen)
want = [None] + [float(ref[i - 1][t]) for i, t in enumerate(ptoks + gen) if i > 0]
got = lp["token_logprobs"]
err = max(abs(g - w) for g, w in zip(got[1:], want[1:]))
check("logprobs equal the reference's log-softmax (tol %g)" % TOL, err < TOL, "max error %g" % err)
top_ok = True
for i in range(1, n_all):
    row = ref[i - 1]
    best = np.argsort(-row)[:3]
    vals = sorted(lp["top_logprobs"][i].values(), reverse=True)
    top_ok &= len(vals) == 3 and all(abs(v - row[j]) < TOL for v, j in zip(vals, best))
check("top_logprobs are the reference's top 3", top_ok)
# /completion's n_probs: the same numbers, with ids
probs = lb["completion_probabilities"]
ok = len(probs) == 6
for k, e in enumerate(probs if ok else []):
    row = ref[len(ptoks) + k - 1]
    ok &= e["id"] == gen[k] and abs(e["logprob"] - row[gen[k]]) < TOL
    ok &= [t["id"] for t in e["top_logprobs"]] == [int(j) for j in np.argsort(-row)[:3]]
    ok &= all(set(t) == {"id", "token", "logprob", "bytes"} for t in e["top_logprobs"])
    ok &= bytes(e["bytes"]).decode(errors="replace") == e["token"]
check("completion_probabilities equal the reference (ids, logprobs, top 3)", ok, probs[:1])
check("greedy takes the reference's argmax", gen == [int(np.argmax(ref[len(ptoks) + k - 1]))
                                                      for k in range(6)], gen)

# logprobs 0: no alternatives; without echo only the completion
st, b, _ = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3, "temperature": 0,
                                    "logprobs": 0})
lp0 = b["choices"][0]["logprobs"]
check("logprobs 0", st == 200 and len(lp0["tokens"]) == 3 and lp0["top_logprobs"] == [{}] * 3 and
      abs(lp0["token_logprobs"][0] - ref[len(ptoks) - 1][gen[0]]) < TOL, lp0)
refused("logprobs over 5", "/v1/completions", {"prompt": PROMPT, "logprobs": 6}, "logprobs")

# ---- logit_bias and penalties ---------------------------------------------------------------
the = tokenize(" the")[0]
st, b, _ = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "temperature": 0,
                                    "logit_bias": {str(the): 100}})
check("logit_bias +100 makes greedy take the token", b["choices"][0]["text"] == " the" * 4, b)
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                "return_tokens": True, "logit_bias": {str(gen[0]): -100}})
check("logit_bias -100 bans the greedy token", st == 200 and gen[0] not in b["tokens"], b)
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                "return_tokens": True, "logit_bias": [[gen[0], False]]})
check("llama logit_bias [[id, false]] bans", st == 200 and gen[0] not in b["tokens"] and
      b["tokens"][0] == int(np.argsort(-ref[len(ptoks) - 1])[1]), b.get("tokens"))
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                "return_tokens": True, "logit_bias": [[" the", 100]]})
check("llama logit_bias [[text, bias]]", st == 200 and b["tokens"] == [the] * 3, b.get("tokens"))
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                "return_tokens": True, "logit_bias": {str(the): 100}})
check("llama logit_bias object form", st == 200 and b["tokens"] == [the] * 3, b.get("tokens"))
refused("logit_bias out of range", "/v1/completions",
        {"prompt": PROMPT, "logit_bias": {"1": 101}}, "logit_bias")
refused("logit_bias not a token", "/v1/completions",
        {"prompt": PROMPT, "logit_bias": {"99999999": 1}}, "logit_bias")
refused("logit_bias text on OpenAI", "/v1/completions",
        {"prompt": PROMPT, "logit_bias": {"hello": 1}}, "logit_bias")

plain = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 0})[1]
text0 = plain["choices"][0]["text"]
for field in ("presence_penalty", "frequency_penalty"):
    st, b, _ = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "temperature": 0,
                                        field: 2})
    check(field + " changes greedy output", st == 200 and b["choices"][0]["text"] != text0, b)
refused("presence_penalty over 2", "/v1/completions",
        {"prompt": PROMPT, "presence_penalty": 3}, "presence_penalty")
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 40, "temperature": 0,
                                "repeat_penalty": 1.5, "repeat_last_n": 64})
check("repeat_penalty changes greedy output", st == 200 and b["content"] != text0, b)
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 40, "temperature": 0,
                                "repeat_penalty": 1.5, "repeat_last_n": 0})
check("repeat_last_n 0 turns it off", st == 200 and b["content"] == text0, b)

# ---- the other /v1/completions fields -------------------------------------------------------
refused("suffix", "/v1/completions", {"prompt": PROMPT, "suffix": "end"}, "suffix")
accepted("suffix empty", "/v1/completions", {"prompt": PROMPT, "suffix": "", "max_tokens": 1})
refused("best_of != n", "/v1/completions", {"prompt": PROMPT, "best_of": 3, "n": 1}, "best_of")
b = accepted("best_of == n", "/v1/completions",
             {"prompt": PROMPT, "best_of": 2, "n": 2, "max_tokens": 2})
check("best_of == n gives n choices", len(b.get("choices", [])) == 2)
b = accepted("user", "/v1/completions", {"prompt": PROMPT, "user": "u-1", "max_tokens": 24,
                                         "temperature": 0, "model": "anything"})
check("user does not change the output", b["choices"][0]["text"] == text0[:len(b["choices"][0]["text"])]
      and b["choices"][0]["text"] == post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24,
                                                              "temperature": 0})[1]["choices"][0]["text"])
refused("an unknown field", "/v1/completions", {"prompt": PROMPT, "frobnicate": 1}, "frobnicate")
refused("a llama field on OpenAI", "/v1/completions", {"prompt": PROMPT, "n_probs": 2}, "n_probs")
st, b, _ = post("/v1/completions", {"prompt": [PROMPT, "Hello"], "max_tokens": 3, "n": 2,
                                    "temperature": 0})
check("a list of prompts: prompts x n choices", st == 200 and
      [c["index"] for c in b["choices"]] == [0, 1, 2, 3] and
      b["choices"][0]["text"] == b["choices"][1]["text"] == text0[:len(b["choices"][0]["text"])] and
      b["usage"]["prompt_tokens"] == len(ptoks) + len(tokenize("Hello")), b)

# ---- bug 1: the usage chunk only with include_usage -----------------------------------------
st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "temperature": 0,
                                              "stream": True})
check("stream without include_usage: no usage chunk", done and all(e["choices"] for e in ev) and
      all("usage" not in e for e in ev), ev[-1:])
st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "temperature": 0,
                                              "stream": True,
                                              "stream_options": {"include_usage": True}})
check("include_usage: the last chunk has choices [] and usage", done and ev[-1]["choices"] == [] and
      ev[-1]["usage"]["completion_tokens"] == 5, ev[-1:])
check("include_usage: usage null before", all(e["usage"] is None for e in ev[:-1]) and len(ev) > 1)
check("the finish chunk has the timings", ev[-2]["choices"][0]["finish_reason"] == "length" and
      ev[-2]["timings"]["predicted_n"] == 5 and
      ev[-2]["timings"]["prompt_n"] + ev[-2]["timings"]["cache_n"] == len(ptoks), ev[-2:])
st, ev, done = srv.stream("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                          "stream": True, "timings_per_token": True})
pn = [e.get("timings", {}).get("predicted_n", -1) for e in ev if not e.get("stop")]
check("timings_per_token: every /completion chunk has the timings so far, counting up",
      st == 200 and pn and pn == sorted(pn) and 0 < pn[0] and ev[-1].get("stop") is True and
      pn[-1] <= ev[-1]["timings"]["predicted_n"] == ev[-1]["tokens_predicted"], ev)
st, ev, done = srv.stream("/v1/chat/completions", {
    "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
    "stream": True, "timings_per_token": True})
content = [e for e in ev if e["choices"][0]["delta"].get("content")]
check("timings_per_token: every chat content chunk has the timings so far",
      done and content and all("timings" in e and e["timings"]["predicted_n"] >= 1
                               for e in content), ev)
st, ev, done = srv.stream("/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                          "stream": True})
check("without timings_per_token: only /completion's last object has the timings",
      st == 200 and ev and ev[-1].get("stop") is True and "timings" in ev[-1] and
      not any("timings" in e for e in ev[:-1]), [(e.get("stop"), "timings" in e) for e in ev])
st, ev, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 5, "temperature": 0,
                                              "stream": True, "logprobs": 1, "echo": True})
toks = [t for e in ev for c in e["choices"] for t in (c["logprobs"] or {}).get("tokens", [])]
check("streamed logprobs and echo", done and "".join(toks) == PROMPT + text0[:len("".join(toks)) - len(PROMPT)]
      and len(toks) == len(ptoks) + 5 and "".join(c["text"] for e in ev for c in e["choices"]) == "".join(toks),
      toks)

# ---- /completion: stop_type (bug 3), truncated, timings, fields -------------------------------
stop_word = text0[5:9]
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 40, "temperature": 0,
                                "stop": [stop_word]})
check("a stop string: stop_type word", st == 200 and b["stop_type"] == "word" and
      b["stopping_word"] == stop_word and b["content"] == text0[:text0.index(stop_word)], b)
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 3, "temperature": 0})
check("the length: stop_type limit", b["stop_type"] == "limit" and b["stopping_word"] == "" and
      b["truncated"] is False, b)
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 5, "temperature": 0,
                                "logit_bias": [[EOS, 100]]})
check("EOS: stop_type eos", b["stop_type"] == "eos" and b["content"] == "" and
      b["tokens_predicted"] == 0, b)
t = b["timings"]
check("timings", set(t) >= {"prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                            "predicted_n", "predicted_ms", "predicted_per_token_ms",
                            "predicted_per_second", "cache_n"} and
      t["prompt_n"] + t["cache_n"] == b["tokens_evaluated"] == len(ptoks) and
      t["predicted_n"] == b["tokens_predicted"], t)
check("has_new_line", post("/completion", {"prompt": PROMPT, "n_predict": 40, "temperature": 0})[1]
      ["has_new_line"] == ("\n" in text0))
check("generation_settings", b["generation_settings"]["n_predict"] == 5 and
      b["generation_settings"]["temperature"] == 0 and
      b["generation_settings"]["logit_bias"] == [[EOS, 100]], b["generation_settings"])
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                "response_fields": ["content", "generation_settings/n_predict",
                                                    "nope"]})
check("response_fields", st == 200 and set(b) == {"content", "generation_settings/n_predict"} and
      b["generation_settings/n_predict"] == 3 and text0.startswith(b["content"]), b)
st, b, _ = post("/completion", {"prompt": [PROMPT, [int(x) for x in ptoks]], "n_predict": 3,
                                "temperature": 0})
check("a list of prompts answers a list", st == 200 and isinstance(b, list) and len(b) == 2 and
      b[0]["content"] == b[1]["content"] and [e["index"] for e in b] == [0, 1], b)
st, b, _ = post("/completion", {"prompt": [ptoks[0], PROMPT[len("Once"):]], "n_predict": 3,
                                "temperature": 0})
check("a mixed prompt of ids and text", st == 200 and b["tokens_evaluated"] == len(ptoks), b)
# post-sampling probabilities: greedy sees every token, so they are the softmax
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 3, "temperature": 0,
                                "n_probs": 4, "post_sampling_probs": True})
pp = b["completion_probabilities"]
ok = len(pp) == 3
for k, e in enumerate(pp if ok else []):
    row = ref[len(ptoks) + k - 1]
    ok &= abs(e["prob"] - math.exp(row[gen[k]])) < TOL and len(e["top_probs"]) == 4
    ok &= all(abs(x["prob"] - math.exp(row[x["id"]])) < TOL for x in e["top_probs"])
    ok &= "logprob" not in e and "top_logprobs" not in e
check("post_sampling_probs with greedy: the softmax", ok, pp[:1])
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 1, "top_k": 3,
                                "top_p": 1, "min_p": 0, "seed": 5, "n_probs": 10,
                                "post_sampling_probs": True})
pp = b["completion_probabilities"]
check("post_sampling_probs after top_k 3: three candidates summing to 1",
      all(len(e["top_probs"]) == 3 and abs(sum(x["prob"] for x in e["top_probs"]) - 1) < 1e-4 and
          e["id"] in [x["id"] for x in e["top_probs"]] for e in pp), pp[:1])
st, ev, _ = srv.stream("/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                       "stream": True, "n_probs": 2})
check("streamed /completion: tokens, probabilities, a final object",
      [t for e in ev[:-1] for t in e["tokens"]] == gen[:4] and
      len([p for e in ev[:-1] for p in e["completion_probabilities"]]) == 4 and
      ev[-1]["stop"] is True and ev[-1]["stop_type"] == "limit", ev[-1:])

# refused and accepted llama-server fields
for field, value in (("mirostat", 2), ("typical_p", 0.5), ("dry_multiplier", 0.8),
                     ("xtc_probability", 0.5), ("dynatemp_range", 0.5),
                     ("grammar", "root ::= x"),  # a bad grammar: its undefined rule
                     ("json_schema", {"type": "object", "not": {}}),  # outside the subset
                     ("id_slot", 2), ("n_indent", 4),
                     ("min_keep", 2), ("lora", [{"id": 0, "scale": 1}]), ("top_n_sigma", 1),
                     ("t_max_predict_ms", 100)):
    refused(field, "/completion", {"prompt": PROMPT, field: value}, field)
refused("samplers: one recur lacks", "/completion", {"prompt": PROMPT, "samplers": ["mirostat"]},
        "samplers")
refused("samplers out of order", "/completion",
        {"prompt": PROMPT, "samplers": ["temperature", "top_k"]}, "samplers")
refused("an unknown field", "/completion", {"prompt": PROMPT, "n_predictt": 3}, "n_predictt")
accepted("off samplers' defaults", "/completion",
         {"prompt": PROMPT, "n_predict": 1, "mirostat": 0, "typical_p": 1, "dry_multiplier": 0,
          "dry_base": 1.75, "xtc_probability": 0, "xtc_threshold": 0.1, "id_slot": -1,
          "samplers": ["dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]})
st, b, _ = post("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0.5, "seed": 3,
                                "samplers": ["top_k"], "top_k": 1})
check("samplers [top_k] with top_k 1 is greedy", st == 200 and b["content"] == lb["content"], b)

# ---- -n (default length) and -c (sequence budget) -------------------------------------------
try:
    small = serve_util.Server(RECUR, MODEL, "-np", "2", "-n", "5", "-c", str(len(ptoks) + 7))
except SystemExit as e:  # a start refused is a failure; the rest of the test still runs
    small = None
    check("-n / -c: the server starts", False, e)
if small:
    st, b, _ = small.post("/v1/completions", {"prompt": PROMPT, "temperature": 0})
    check("-n: the default length", st == 200 and b["usage"]["completion_tokens"] == 5, b)
    st, b, _ = small.post("/completion", {"prompt": PROMPT, "n_predict": 50, "temperature": 0})
    check("-c: generation stops at the budget, truncated", st == 200 and b["tokens_predicted"] == 7 and
          b["truncated"] is True and b["stop_type"] == "limit", b)
    st, b, _ = small.post("/completion", {"prompt": PROMPT * 3, "n_predict": 5})
    check("-c: a prompt that does not fit is a 400", st == 400, b)
    small.proc.terminate()
    small.proc.wait(timeout=30)

# ---- /v1/chat/completions ---------------------------------------------------------------------
USER = "Tell me a fortune."
chatml = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % USER
want_chat = post("/v1/completions", {"prompt": chatml, "max_tokens": 12, "temperature": 0})[1]
want_text = want_chat["choices"][0]["text"].split("<|im_end|>")[0]
st, b, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                         "max_tokens": 12, "temperature": 0})
check("chat status and object", st == 200 and b["object"] == "chat.completion" and
      b["id"].startswith("chatcmpl-"), b)
msg = b["choices"][0]["message"]
check("chat renders chatml (the model has no template)", msg == {"role": "assistant",
                                                                 "content": want_text} and
      b["usage"]["prompt_tokens"] == len(tokenize(chatml)), (b, want_text))
check("chat usage", b["usage"]["completion_tokens"] <= 12 and
      "cached_tokens" in b["usage"]["prompt_tokens_details"], b["usage"])
tm, chat_n_out = b.get("timings", {}), b["usage"]["completion_tokens"]
check("chat timings (llama-server's): the counts are usage's, the times positive",
      tm.get("prompt_n", -1) + tm.get("cache_n", -1) == b["usage"]["prompt_tokens"] and
      tm.get("cache_n") == b["usage"]["prompt_tokens_details"]["cached_tokens"] and
      tm.get("predicted_n") == b["usage"]["completion_tokens"] and tm.get("prompt_ms", 0) > 0 and
      tm.get("predicted_ms", 0) > 0 and tm.get("predicted_per_second", 0) > 0, b)
# llama-server's /apply-template and /v1/chat/completions/input_tokens: the chat, not run
st, at, _ = post("/apply-template", {"messages": [{"role": "user", "content": USER}]})
check("/apply-template: the rendered chat (chatml here)", st == 200 and at == {"prompt": chatml},
      (st, at))
st, at2, _ = post("/apply-template", {"messages": [{"role": "user", "content": USER}],
                                      "add_generation_prompt": False, "temperature": 0.5})
check("/apply-template: add_generation_prompt false, and sampling fields checked but unused",
      st == 200 and at2 == {"prompt": "<|im_start|>user\n%s<|im_end|>\n" % USER}, (st, at2))
st, it, _ = post("/v1/chat/completions/input_tokens",
                 {"messages": [{"role": "user", "content": USER}], "max_tokens": 5})
check("input_tokens: the chat's prompt_tokens",
      st == 200 and it == {"object": "response.input_tokens",
                           "input_tokens": len(tokenize(chatml))} and
      it["input_tokens"] == b["usage"]["prompt_tokens"], (st, it, b["usage"]))
for path in ("/apply-template", "/v1/chat/completions/input_tokens"):
    st, e, _ = post(path, {"prompt": "no messages"})
    check("%s: a body that is no chat is a 400 naming the field" % path,
          st == 400 and "prompt" in e["error"]["message"], (st, e))
    st, e, _ = post(path, {"messages": [{"role": "user", "content": USER}], "tools": [{}]})
    check("%s: what the chat refuses, it refuses" % path,
          st == 400 and "tools" in e["error"]["message"], (st, e))

# llama-server's repeat_penalty / repeat_last_n / ignore_eos on the OpenAI endpoints: the chat's
# answer is /completion's (whose penalties test_sample checks) over the same rendered prompt
pen = {"repeat_penalty": 5.0, "repeat_last_n": 16}
st, b3, _ = post("/v1/chat/completions", dict({"messages": [{"role": "user", "content": USER}],
                                               "max_tokens": 24, "temperature": 0}, **pen))
llama_pen = post("/completion", dict({"prompt": chatml, "n_predict": 24, "temperature": 0}, **pen))[1]
plain = post("/completion", {"prompt": chatml, "n_predict": 24, "temperature": 0,
                             "repeat_penalty": 1.0})[1]
check("chat repeat_penalty and repeat_last_n: /completion's answer, not the unpenalized one",
      st == 200 and b3["choices"][0]["message"]["content"] ==
      llama_pen["content"].split("<|im_end|>")[0] and llama_pen["content"] != plain["content"],
      (b3, llama_pen["content"], plain["content"]))
oai_pen = post("/v1/completions", dict({"prompt": chatml, "max_tokens": 24, "temperature": 0},
                                       **pen))[1]
check("/v1/completions repeat_penalty: /completion's answer",
      oai_pen["choices"][0]["text"] == llama_pen["content"], (oai_pen, llama_pen["content"]))
eos_first = {"messages": [{"role": "user", "content": USER}], "max_tokens": 6, "temperature": 0,
             "logit_bias": {str(EOS): 100}}
st, e1, _ = post("/v1/chat/completions", eos_first)
st2, e2, _ = post("/v1/chat/completions", dict(eos_first, ignore_eos=True))
check("chat ignore_eos: an end of text the bias makes certain ends the answer at once, and with "
      "ignore_eos it cannot be sampled: the answer runs to its length",
      st == 200 and e1["usage"]["completion_tokens"] == 0 and
      e1["choices"][0]["finish_reason"] == "stop" and st2 == 200 and
      e2["usage"]["completion_tokens"] == 6 and e2["choices"][0]["finish_reason"] == "length",
      (e1, e2))
e5 = post("/v1/chat/completions", dict(eos_first, logit_bias={str(EOS): -100}))[1]
check("... and its text is the one where the end of text is never likely (not ends of text "
      "kept as tokens)", e2["choices"][0]["message"]["content"] ==
      e5["choices"][0]["message"]["content"] != "", (e2, e5))
st, e3, _ = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                     "logit_bias": {str(EOS): 100}, "ignore_eos": True})
check("/v1/completions ignore_eos", st == 200 and e3["usage"]["completion_tokens"] == 6, e3)
st, e4, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                          "repeat_last_n": -2})
check("chat repeat_last_n below -1: a 400 naming it", st == 400 and
      "repeat_last_n" in e4["error"]["message"], e4)
st, b2, _ = post("/chat/completions", {"messages": [{"role": "user", "content": [
    {"type": "text", "text": USER[:5]}, {"type": "text", "text": USER[5:]}]}],
    "max_tokens": 12, "temperature": 0})
check("/chat/completions and text parts", st == 200 and b2["choices"][0]["message"] == msg, b2)
sys_b = post("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": USER}],
                                      "max_tokens": 8, "temperature": 0})[1]
dev_b = post("/v1/chat/completions", {"messages": [{"role": "developer", "content": "Be brief."},
                                                   {"role": "user", "content": USER}],
                                      "max_tokens": 8, "temperature": 0})[1]
check("developer is rendered as system", sys_b["choices"][0] == dev_b["choices"][0] and
      sys_b["usage"]["prompt_tokens"] == dev_b["usage"]["prompt_tokens"] and
      dev_b["usage"]["prompt_tokens_details"]["cached_tokens"] == dev_b["usage"]["prompt_tokens"] - 1,
      (sys_b, dev_b))
st, b, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                         "max_tokens": 4, "temperature": 0,
                                         "add_generation_prompt": False})
check("add_generation_prompt false", st == 200 and b["usage"]["prompt_tokens"] ==
      len(tokenize("<|im_start|>user\n%s<|im_end|>\n" % USER)), b)
st, ev, done = srv.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                                   "max_tokens": 12, "temperature": 0,
                                                   "stream": True, "n": 2})
by = {0: [], 1: []}
for e in ev:
    check("chunk object", e["object"] == "chat.completion.chunk" and len(e["choices"]) == 1)
    by[e["choices"][0]["index"]].append(e["choices"][0])
seq_ok = done
for i in (0, 1):
    cs = by[i]
    seq_ok &= cs[0]["delta"] == {"role": "assistant", "content": None}  # null, as OpenAI's
    seq_ok &= all(set(c["delta"]) == {"content"} and c["finish_reason"] is None for c in cs[1:-1])
    seq_ok &= cs[-1]["delta"] == {} and cs[-1]["finish_reason"] in ("stop", "length")
    seq_ok &= "".join(c["delta"].get("content") or "" for c in cs) == want_text
check("chat stream: role chunk, content deltas, finish chunk, [DONE], per choice", seq_ok, ev)
fin = [e for e in ev if e["choices"][0]["finish_reason"]]
check("chat stream: each choice's finish chunk, and only it, has timings",
      len(fin) == 2 and all(e.get("timings", {}).get("predicted_n") == chat_n_out for e in fin) and
      sum("timings" in e for e in ev) == 2, fin)
check("chat stream without include_usage: no usage", all("usage" not in e for e in ev))
st, ev, done = srv.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                                   "max_tokens": 3, "stream": True,
                                                   "stream_options": {"include_usage": True}})
check("chat include_usage", done and ev[-1]["choices"] == [] and
      ev[-1]["usage"]["completion_tokens"] == 3 and all(e["usage"] is None for e in ev[:-1]), ev)
st, b, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                         "max_tokens": 4, "temperature": 0, "n": 3,
                                         "logprobs": True, "top_logprobs": 2})
chat_toks = tokenize(chatml)
cref = ref_logprobs(chat_toks + [])
content = b["choices"][0]["logprobs"]["content"]
first = content[0]
check("chat n choices", [c["index"] for c in b["choices"]] == [0, 1, 2] and
      all(c["message"] == b["choices"][0]["message"] for c in b["choices"]), b)
check("chat logprobs shape", len(content) == 4 and set(first) == {"token", "logprob", "bytes",
                                                                  "top_logprobs"} and
      len(first["top_logprobs"]) == 2 and set(first["top_logprobs"][0]) ==
      {"token", "logprob", "bytes"} and b["choices"][0]["logprobs"]["refusal"] is None, first)
row = cref[-1]
check("chat logprob of the first token equals the reference",
      abs(first["logprob"] - float(np.max(row))) < TOL and
      abs(first["top_logprobs"][1]["logprob"] - float(np.sort(row)[-2])) < TOL, first)
st, ev, done = srv.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                                   "max_tokens": 4, "temperature": 0,
                                                   "stream": True, "logprobs": True})
sl = [x for e in ev for x in ((e["choices"][0].get("logprobs") or {}).get("content") or [])]
check("chat streamed logprobs", [x["token"] for x in sl] == [x["token"] for x in content] and
      all(x["top_logprobs"] == [] for x in sl), sl)
refused("top_logprobs without logprobs", "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs")
refused("top_logprobs over 20", "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
        "top_logprobs")
for field, value in (("response_format", {"type": "xml"}), ("grammar", "root ::= x"),
                     # tools are taken (test_serve_tools.py): bad ones are refused
                     ("tools", [{"type": "function", "function": {}}]),
                     ("tool_choice", "sometimes"), ("functions", [{"name": "f"}]),
                     ("stop", 3), ("frobnicate", 1), ("n_probs", 2)):
    refused(field, "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], field: value}, field)
accepted("response_format text", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
          "response_format": {"type": "text"}, "user": "u", "metadata": {"a": "b"}})
for name, msgs, what in (
        ("an image part", [{"role": "user", "content": [{"type": "image_url",
                                                          "image_url": {"url": "x"}}]}], "image_url"),
        ("an unknown role", [{"role": "robot", "content": "x"}], "role"),
        ("a name", [{"role": "user", "content": "x", "name": "bob"}], "name"),
        ("no messages", [], "messages")):
    st, b, _ = post("/v1/chat/completions", {"messages": msgs})
    check("chat refuses " + name, st == 400 and what in b["error"]["message"], b)
st, b, _ = post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                         "max_completion_tokens": 2, "max_tokens": 9})
check("max_completion_tokens wins over max_tokens", b["usage"]["completion_tokens"] == 2, b)

# multi-turn: the next turn reuses the whole previous history from the prefix cache
msgs, prev = [], None
for k in range(4):
    msgs.append({"role": "user", "content": "Question %d: what do the stars say?" % k})
    st, b, _ = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 20,
                                             "temperature": 0})
    u = b["usage"]
    if prev is not None:
        history = prev["prompt_tokens"] + prev["completion_tokens"]
        check("turn %d reuses the previous history (cached %d of %d)" %
              (k, u["prompt_tokens_details"]["cached_tokens"], history),
              u["prompt_tokens_details"]["cached_tokens"] >= history - 1, u)
    prev = u
    msgs.append({"role": "assistant", "content": b["choices"][0]["message"]["content"]})

# the template's end of turn ends a reply: rwkv-world's "\n\n" is text this model writes
world = serve_util.Server(RECUR, MODEL, "-np", "1", "--chat-template", "rwkv-world")
if world:
    props = world.request("GET", "/props")[1]
    check("/props names the template given", props.get("chat_template") == "rwkv-world" and
          props.get("chat_template_name") == "rwkv-world", props)
    rendered = "User: %s\n\nAssistant:" % USER
    raw = world.post("/v1/completions", {"prompt": rendered, "max_tokens": 60,
                                         "temperature": 0})[1]["choices"][0]["text"]
    check("the model writes the end of turn here (the test needs it)", "\n\n" in raw, raw)
    st, b, _ = world.post("/v1/chat/completions", {"messages": [{"role": "user", "content": USER}],
                                                   "max_tokens": 60, "temperature": 0})
    check("generation stops at the template's end of turn",
          st == 200 and b["choices"][0]["message"]["content"] == raw.split("\n\n")[0] and
          b["choices"][0]["finish_reason"] == "stop" and
          b["usage"]["prompt_tokens"] == len(tokenize(rendered)), (b, raw))
    world.proc.terminate()
    world.proc.wait(timeout=30)

# ---- structured output: grammar, json_schema, response_format ---------------------------------
# a grammar with two sentences: every choice of every endpoint is one of them, ended by the
# grammar (EOS is allowed only where the grammar is complete)
yes_no = 'root ::= ("yes" | "no") "."'
st, b, _ = srv.post("/v1/completions", {"prompt": "Say:", "max_tokens": 10, "n": 3,
                                        "temperature": 1.5, "seed": 11, "grammar": yes_no})
check("grammar: every choice follows it and ends there",
      st == 200 and len(b["choices"]) == 3 and
      all(c["text"] in ("yes.", "no.") and c["finish_reason"] == "stop" for c in b["choices"]), b)
st, b, _ = srv.post("/completion", {"prompt": "Say:", "n_predict": 10, "grammar": yes_no,
                                    "temperature": 1.5, "seed": 12})
check("grammar on /completion", st == 200 and b["content"] in ("yes.", "no.") and
      b["stop_type"] == "eos", b)
# a stop string inside the grammar's text still stops it
st, b, _ = srv.post("/v1/completions", {"prompt": "Say:", "max_tokens": 10, "stop": ["cd"],
                                        "grammar": 'root ::= "ab" "cd" "ef"'})
check("grammar with a stop string", st == 200 and b["choices"][0]["text"] == "ab" and
      b["choices"][0]["finish_reason"] == "stop", b)
# a JSON schema: what ends is valid JSON of the schema; what the length cut holds only the
# characters the schema allows
schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
          "required": ["answer"], "additionalProperties": False}
allowed = set('{}":answeryno \t\n\r')
outs = []
st, b, _ = srv.post("/v1/chat/completions", {
    "messages": [{"role": "user", "content": "yes or no?"}], "max_tokens": 40, "n": 3,
    "temperature": 1, "seed": 1,
    "response_format": {"type": "json_schema",
                        "json_schema": {"name": "a", "strict": True, "schema": schema}}})
outs += [(c["message"]["content"], c["finish_reason"]) for c in b.get("choices", [])]
st2, b2, _ = srv.post("/completion", {"prompt": "Answer:", "n_predict": 40, "json_schema": schema,
                                      "temperature": 1, "seed": 2})
outs.append((b2.get("content"), "stop" if b2.get("stop_type") == "eos" else "length"))
check("json_schema: answers", st == 200 and st2 == 200 and len(outs) == 4, (b, b2))
for text, why in outs:
    check("json_schema: only the schema's characters", text is not None and
          set(text) <= allowed and text.lstrip().startswith("{"), text)
    if why == "stop":
        try:
            v = json.loads(text)
        except ValueError:
            v = None
        check("json_schema: a finished answer is the schema's JSON",
              v in ({"answer": "yes"}, {"answer": "no"}), text)
# zod's integer bounds reach the grammar exactly (a reprint with 15 digits would read
# 9007199254740991 as 9007199254740990): the only answer is that integer, or a prefix of it
st, b, _ = srv.post("/completion", {"prompt": "n:", "n_predict": 24, "temperature": 1, "seed": 3,
                                    "json_schema": {"type": "integer",
                                                    "minimum": 9007199254740991,
                                                    "maximum": 9007199254740991}})
text = b.get("content") if st == 200 else None
# the grammar lets white space follow the number; a cut inside the number leaves a prefix
check("json_schema: the integer bound 2^53 - 1 is exact", text is not None and
      (text.rstrip() == "9007199254740991" or
       (b.get("stop_type") != "eos" and "9007199254740991".startswith(text))), (st, b))
# what zod 4 sends for z.tuple / z.record converts (an ordinary request, not refused)
st, b, _ = srv.post("/completion", {"prompt": "x", "n_predict": 4, "json_schema": {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}],
                            "items": False, "minItems": 2, "maxItems": 2},
                   "tags": {"type": "object", "propertyNames": {"type": "string"},
                            "additionalProperties": {"type": "number"}}},
    "required": ["pair", "tags"], "additionalProperties": False}})
check("json_schema: zod's tuple and record are taken", st == 200, (st, b))
st, b, _ = srv.post("/v1/completions", {"prompt": "{", "max_tokens": 30, "temperature": 1,
                                        "seed": 4, "response_format": {"type": "json_object"}})
text = b["choices"][0]["text"] if st == 200 else None
check("json_object: the answer starts an object", text is not None and
      text.lstrip().startswith("{"), b)
if text is not None and b["choices"][0]["finish_reason"] == "stop":
    check("json_object: a finished answer is a JSON object", isinstance(json.loads(text), dict), text)
# refusals, each a 400 naming what is wrong
for path, body, want in (
        ("/completion", {"prompt": "x", "grammar": "root ::= [a-"},
         "grammar: line 1, column 10: unterminated character class"),
        ("/completion", {"prompt": "x", "grammar": "root ::= undefined-rule"}, "undefined-rule"),
        ("/completion", {"prompt": "x", "json_schema": {"type": "string", "format": "email"}},
         "'format' 'email' is not supported"),
        ("/completion", {"prompt": "x", "json_schema": {"type": "number", "exclusiveMinimum": 1}},
         "keyword 'exclusiveMinimum' is not supported with type number but as 0"),
        ("/v1/completions", {"prompt": "x", "response_format": {"type": "xml"}},
         'type "xml" is not one of'),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema"}},
         'needs "json_schema": {"schema": ...}'),
        ("/v1/completions", {"prompt": "x", "grammar": "root ::= [a-c]+", "json_schema": {}},
         'give one of "grammar", "json_schema" and "response_format"'),
        ("/completion", {"prompt": "x", "grammar": 3}, '"grammar" must be a string')):
    st, b, _ = srv.post(path, body)
    check("structured output refused: %s" % want, st == 400 and
          want in b.get("error", {}).get("message", ""), (st, b))


# ---- grammars past their limits, samples that fail ------------------------------------------
# a grammar whose matching would cost without bound (a repetition of what can be empty) is a 400
# naming the rule and the limit, answered at once, as GBNF or as a JSON schema's pattern
for path, body, want in (
        ("/completion", {"prompt": "x", "grammar": "root ::= ([a-z]?){0,1000}"},
         "rule 'root' (a group or repetition in it) expands to more than 1024 parse stacks"),
        ("/completion", {"prompt": "x", "grammar": 'root ::= ("a"{0,10}){0,1000} "b"'},
         "more than 1024 parse stacks"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema", "json_schema": {
                                      "schema": {"type": "string",
                                                 "pattern": "^([a-z]?){0,1000}$"}}}},
         "more than 1024 parse stacks"),
        ("/v1/completions", {"prompt": "x", "json_schema": {"type": "string",
                                                            "pattern": "^([a-z]?){0,1000}$"}},
         "more than 1024 parse stacks")):
    t0 = time.time()
    try:
        st, b, _ = srv.post(path, body, timeout=10)
    except OSError as e:  # a server busy expanding the grammar does not answer
        st, b = None, {"exception": repr(e)}
    took = time.time() - t0
    check("grammar bomb refused: %s %s" % (path, want), st == 400 and
          want in b.get("error", {}).get("message", ""), (st, b))
    check("grammar bomb refused within 1 s", took < 1.0, took)


def stream_error(path, body):
    """A streamed answer that must end in an error event, never a normal end."""
    st, events, done = srv.stream(path, dict(body, stream=True))
    errs = [e["error"] for e in events if "error" in e]
    ends = [e for e in events if e.get("stop_type") == "eos" or
            any(c.get("finish_reason") for c in e.get("choices", []))]
    return st, errs, ends, done


# a sample that fails ends its request with the reason, whole (500) or streamed (an error
# event), never as an end of text: a grammar nothing can continue, a logit_bias that bans
# every token, a grammar whose parses pile up past the limit
n_vocab = srv.request("GET", "/v1/models")[1]["data"][0]["meta"]["n_vocab"]
ban_all = [[i, False] for i in range(n_vocab)]
for name, body, want in (
        ("no way on", {"prompt": "x", "n_predict": 8, "grammar": 'root ::= "a" []'},
         "sampling failed: grammar: no candidate token can continue the grammar here"),
        ("logit_bias bans every token", {"prompt": "x", "n_predict": 8, "logit_bias": ban_all},
         "sampling failed: sampler"),
        ("parses pile up", {"prompt": "x", "n_predict": 400, "temperature": 0,
                            "grammar": "root ::= ([a-z]{1,100}){0,1000}"},
         "sampling failed: grammar: more than 1024 parses")):
    st, b, _ = srv.post("/completion", body)
    check("failed sample: %s: a 500 with the reason" % name, st == 500 and
          want in b.get("error", {}).get("message", "") and "stop_type" not in b, (st, b))
    # the OpenAI endpoints' logit_bias has no -inf (llama-server's false): grammars only there
    oai = dict({k: v for k, v in body.items() if k != "n_predict"}, max_tokens=body["n_predict"])
    for path, b in (("/completion", body), ("/v1/completions", oai)):
        if path != "/completion" and "logit_bias" in body:
            continue
        st, errs, ends, done = stream_error(path, b)
        check("failed sample: %s: %s streams an error, not an end" % (name, path),
              st == 200 and len(errs) == 1 and want in errs[0]["message"] and not ends and
              not done, (st, errs, ends, done))
    if "logit_bias" in body:
        continue
    chat = dict({k: v for k, v in oai.items() if k != "prompt"},
                messages=[{"role": "user", "content": "x"}])
    st, b, _ = srv.post("/v1/chat/completions", chat)
    check("failed sample: %s: chat answers 500" % name, st == 500 and
          want in b.get("error", {}).get("message", ""), (st, b))

# a request whose grammar fails mid-way fails alone: another client's stream goes on to its end
other = {}


def other_stream():
    other["r"] = srv.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64,
                                                "temperature": 0, "stream": True})


th = threading.Thread(target=other_stream)
th.start()
st, b, _ = srv.post("/completion", {"prompt": "x", "n_predict": 400, "temperature": 0,
                                    "grammar": "root ::= ([a-z]{1,100}){0,1000}"})
th.join(120)
ost, oevents, odone = other.get("r", (None, [], False))
check("a failed grammar fails alone", st == 500 and ost == 200 and odone and
      not any("error" in e for e in oevents) and
      [c["finish_reason"] for e in oevents for c in e.get("choices", [])
       if c.get("finish_reason")] == ["length"], (st, ost, oevents[-2:]))

check("the server is still healthy", srv.healthy())
srv.proc.terminate()
srv.proc.wait(timeout=30)
print("test_serve_api: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
