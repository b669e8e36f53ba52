#!/usr/bin/env python3
"""`recur serve` on models of every architecture (python3 standard library only).

    test_arch_serve.py RECUR_BIN MODEL...

For each model, a server on a free loopback port (--port 0, the port read from its first
line), and: a greedy /v1/completions equals `recur run --temp 0` (same prompt, max_tokens);
a streamed one gives the same text; n = 2 gives two equal greedy choices; /tokenize then
/detokenize gives the text back (UTF-8, newlines, tabs, quotes, backslashes); a second
identical request reports its prompt reused (usage.prompt_tokens_details.cached_tokens and
recur_tokens_processed_total in /metrics) and answers the same; /props names the
architecture; a slot's conversation saved, erased and restored is reused by a prompt that
extends it, with the text of a request that reuses nothing; SIGTERM exits 0.
test_serve.py checks the rest of the server on the shipped Mamba-1 model.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import shutil
import sys
import tempfile
import threading

RECUR = sys.argv[1]
MODELS = sys.argv[2:]
from serve_util import check, counts
import serve_util


def Server(model, *args):
    return serve_util.Server(RECUR, model, *args, threads=1)


def run_text(model, prompt, n):
    """What `recur run --temp 0` generates after the prompt, as the server's JSON decodes it
    (invalid UTF-8 of a random model's bytes as U+FFFD)."""
    out = subprocess.run([RECUR, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                          "-t", "1"], capture_output=True, check=True).stdout
    assert out.startswith(prompt.encode()) and out.endswith(b"\n")
    return out[len(prompt.encode()):-1].decode(errors="replace")


PROMPT = "Hello world, this is a test of"
ROUND_TRIP = "Caf\u00e9 \u20ac \U0001f999 na\u00efve \u4e2d\u6587\n\tline \"two\" with " \
             "\\backslash\\ and 'quote'\r\n\n  end\t\\n\\t\n"
N = 16

for model in MODELS:
    name = os.path.basename(model)
    slot_dir = tempfile.mkdtemp(prefix="recur-arch-slots-")
    srv = Server(model, "-np", "2", "--slot-save-path", slot_dir)
    want = run_text(model, PROMPT, N)
    # the models are named f32-untied (Mamba-1), f32-mamba2, f32-rwkv6, q8_0-rwkv6, f32-granite,
    # ...: the last word names the architecture, Mamba-1 by default
    arch = {"mamba2": "mamba2", "rwkv6": "rwkv6", "rwkv7": "rwkv7", "granite": "granitehybrid",
            "nemotron": "nemotron_h", "falcon": "falcon-h1"}.get(
                name[:-len(".gguf")].split("-")[-1], "mamba")
    st, props, _ = srv.request("GET", "/props")
    check("%s: /props names the architecture" % name, st == 200 and
          props["recur"]["architecture"] == arch, props)
    # the weight types, most bytes first; the file's name starts with its matrices' type
    types = props["recur"].get("weight_types") or [{}]
    check("%s: /props lists the weight types" % name,
          name.split("-")[0] in [t.get("type") for t in types] and
          all(t["bytes"] > 0 and t["tensors"] > 0 for t in types) and
          [t["bytes"] for t in types] == sorted((t["bytes"] for t in types), reverse=True), types)

    req = {"prompt": PROMPT, "max_tokens": N, "temperature": 0}
    st, body, _ = srv.post("/v1/completions", req)
    ok = st == 200 and isinstance(body, dict)
    check("%s: greedy completion equals recur run" % name,
          ok and body["choices"][0]["text"] == want, (want, body))
    n_prompt = body["usage"]["prompt_tokens"] if ok else -1

    st, events, done = srv.stream("/v1/completions", dict(req, stream=True))
    text = "".join(c.get("text", "") for e in events for c in e.get("choices", []))
    check("%s: streaming gives the same text" % name, st == 200 and done and text == want,
          (want, text))

    st, body, _ = srv.post("/v1/completions", dict(req, n=2))
    check("%s: n = 2, greedy: two choices equal to recur run" % name,
          st == 200 and len(body["choices"]) == 2 and
          all(c["text"] == want for c in body["choices"]), body)

    st, tok, _ = srv.post("/tokenize", {"content": ROUND_TRIP})
    check("%s: tokenize" % name, st == 200 and len(tok.get("tokens", [])) > 0, tok)
    st, detok, _ = srv.post("/detokenize", {"tokens": tok.get("tokens", [])})
    check("%s: tokenize then detokenize gives the text back" % name,
          st == 200 and detok["content"] == ROUND_TRIP, detok)

    # an identical request: every prompt token but the last (whose logits are needed) reused
    # from the prefix cache, only the last one processed, and the same answer
    before = srv.metrics()
    st, body, _ = srv.post("/v1/completions", req)
    after = srv.metrics()
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"] if st == 200 else -1
    check("%s: a repeated prompt is reused (%d of %d tokens cached)" % (name, cached, n_prompt),
          cached == n_prompt - 1 > 0, body)
    processed = after["recur_tokens_processed_total"] - before["recur_tokens_processed_total"]
    check("%s: ... and only the rest is processed" % name, processed == n_prompt - cached,
          (processed, n_prompt, cached))
    check("%s: ... with the same answer" % name, st == 200 and body["choices"][0]["text"] == want,
          body)

    # a slot's state saved to a file, erased, restored: a prompt extending it reuses it
    st, tok, _ = srv.post("/tokenize", {"content": PROMPT + " the slot files"})
    conv = tok["tokens"]
    st, tail, _ = srv.post("/tokenize", {"content": " and then some more"})
    extended = conv + tail["tokens"]
    ext = {"prompt": extended, "n_predict": N, "temperature": 0, "cache_prompt": False}
    st, cold, _ = srv.post("/completion", ext)
    st, body, _ = srv.post("/completion", {"prompt": conv, "n_predict": 1, "temperature": 0})
    slot = [x["id"] for x in srv.request("GET", "/slots")[1] if x["n_tokens_cached"] == len(conv)]
    check("%s: the slot keeps the conversation" % name, len(slot) == 1, slot)
    slot = slot[0] if slot else 0
    st, saved, _ = srv.post("/slots/%d?action=save" % slot, {"filename": "s.bin"})
    check("%s: slot save" % name, st == 200 and saved["n_saved"] == len(conv), saved)
    st, body, _ = srv.post("/slots/%d?action=erase" % slot, {})
    check("%s: slot erase" % name, st == 200 and body["n_erased"] == len(conv), body)
    st, body, _ = srv.post("/slots/1?action=restore", {"filename": "s.bin"})
    check("%s: slot restore" % name, st == 200 and body["n_restored"] == len(conv) and
          body["n_read"] == saved.get("n_written"), body)
    st, warm, _ = srv.post("/completion", dict(ext, cache_prompt=True))
    check("%s: the restored conversation is reused" % name, st == 200 and
          warm["tokens_cached"] >= len(conv), warm)
    check("%s: ... with the text of a request that reuses nothing" % name,
          st == 200 and warm["content"] == cold["content"], (warm, cold))
    shutil.rmtree(slot_dir)
    check("%s: SIGTERM exits 0" % name, srv.stop() == 0)
    print("test_arch_serve: %s done (%d passed, %d failed so far)" % (name, counts["passed"], counts["failed"]))

print("test_arch_serve: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
