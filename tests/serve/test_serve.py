#!/usr/bin/env python3
"""Tests of `recur serve` over HTTP (python3 standard library only).

    test_serve.py RECUR_BIN MODEL

Starts servers on free loopback ports (--port 0; the port is read from the server's first
line) and checks: greedy completions equal `recur run`, streaming gives the same text, the
llama.cpp shape, tokenize/detokenize, n > 1, prompt reuse (a next turn decodes only the new
tokens and answers what a cold server answers), 32 clients x 4 requests at once, a client
that disconnects, a full queue (503), an API key, the bad-input battery (each a 4xx, the
server still healthy), and SIGTERM draining a request in flight.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

RECUR, MODEL = sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
from serve_util import check, counts, wait_for
import serve_util


def Server(*args):
    return serve_util.Server(RECUR, MODEL, *args)


def run_text(prompt, n):
    """What `recur run` generates after the prompt (greedy)."""
    out = subprocess.run([RECUR, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0",
                          "-t", "2"], capture_output=True, check=True).stdout.decode()
    assert out.startswith(prompt)
    return out[len(prompt):].rstrip("\n")


PROMPT = "Once upon a time"
srv = Server("-np", "8", "--queue", "256", "--max-tokens", "20000")

# ---- completions equal recur run; streaming; the llama.cpp shape --------------------------
want = run_text(PROMPT, 24)
st, body, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 24, "temperature": 0})
check("completion status", st == 200, body)
check("greedy completion equals recur run", st == 200 and body["choices"][0]["text"] == want,
      repr(body))
check("usage counts", st == 200 and body["usage"]["completion_tokens"] == 24 and
      body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 24, body)
st, events, done = srv.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 24,
                                                  "temperature": 0, "stream": True})
text = "".join(c["text"] for e in events for c in e.get("choices", []))
check("streaming gives the same text", st == 200 and text == want and done, repr(text))
check("the stream ends with a finish reason",
      any(c.get("finish_reason") == "length" for e in events for c in e.get("choices", [])))
st, body, _ = srv.post("/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0})
check("llama.cpp /completion", st == 200 and body["content"] == want and
      body["tokens_predicted"] == 24, body)
st, events, _ = srv.stream("/completion", {"prompt": PROMPT, "n_predict": 24, "temperature": 0,
                                           "stream": True})
check("llama.cpp streaming", "".join(e.get("content", "") for e in events) == want and
      events[-1].get("stop") is True)
st, tok, _ = srv.post("/tokenize", {"content": "Hello world"})
check("tokenize", st == 200 and len(tok["tokens"]) > 0, tok)
st, detok, _ = srv.post("/detokenize", {"tokens": tok["tokens"]})
check("detokenize round trip", st == 200 and detok["content"] == "Hello world", detok)
# tokens are bytes: the pieces of multi-byte characters alone are not UTF-8, yet every answer
# must be valid JSON (invalid bytes come back as U+FFFD)
st, mb, _ = srv.post("/tokenize", {"content": "\U0001f999 \U0001d538 \ua66e"})
pieces = [srv.post("/detokenize", {"tokens": [t]}) for t in mb["tokens"]]
check("detokenize of single byte tokens answers valid JSON",
      all(p[0] == 200 and isinstance(p[1], dict) for p in pieces), pieces)
check("... with U+FFFD for the bytes of a cut character",
      any("\ufffd" in p[1]["content"] for p in pieces), pieces)
st, body, _ = srv.post("/v1/completions", {"prompt": tok["tokens"], "max_tokens": 4,
                                           "temperature": 0})
check("a prompt of token ids", st == 200 and body["choices"][0]["text"] == run_text("Hello world", 4),
      body)
st, body, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                                           "n": 3})
check("n = 3 choices, greedy: all equal", st == 200 and len(body["choices"]) == 3 and
      all(c["text"] == run_text(PROMPT, 12) for c in body["choices"]), body)
st, body, _ = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 30, "temperature": 0,
                                           "stop": ["\n"]})
check("a stop string ends the text before it", st == 200 and "\n" not in
      body["choices"][0]["text"] and body["choices"][0]["finish_reason"] == "stop" and
      want.startswith(body["choices"][0]["text"]), body)

# ---- prompt reuse: a next turn decodes only the new tokens --------------------------------
turn1 = "The cat sat on the mat. The dog sat on the log."
st, b1, _ = srv.post("/v1/completions", {"prompt": turn1, "max_tokens": 10, "temperature": 0})
turn2 = turn1 + b1["choices"][0]["text"] + " And then"
before = srv.metrics()
st, b2, _ = srv.post("/v1/completions", {"prompt": turn2, "max_tokens": 10, "temperature": 0})
after = srv.metrics()
cached = b2["usage"]["prompt_tokens_details"]["cached_tokens"]
# the first turn's prompt and (as far as its text tokenizes back the same) its completion
check("next turn: the first turn and its completion are reused",
      cached > b1["usage"]["prompt_tokens"], "%d cached of %d, first prompt %d" % (
          cached, b2["usage"]["prompt_tokens"], b1["usage"]["prompt_tokens"]))
check("next turn: metrics count only the new tokens as processed",
      after["recur_tokens_processed_total"] - before["recur_tokens_processed_total"] ==
      b2["usage"]["prompt_tokens"] - cached)
cold = Server("-np", "1")
st, bc, _ = cold.post("/v1/completions", {"prompt": turn2, "max_tokens": 10, "temperature": 0})
check("next turn answers what a cold server answers",
      bc["choices"][0]["text"] == b2["choices"][0]["text"] and
      bc["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, (bc, b2))
check("cold server stops cleanly", cold.stop() == 0)

# ---- 32 clients x 4 requests at once -----------------------------------------------------
prompts = ["Client %d says" % i for i in range(32)]
expected = {p: run_text(p, 8) for p in prompts[:4]}
results, errors = [], []


def client(i):
    for r in range(4):
        p = prompts[(i + r) % 4]
        try:
            st, body, _ = srv.post("/v1/completions", {"prompt": p, "max_tokens": 8,
                                                       "temperature": 0}, timeout=120)
            results.append((p, st, body["choices"][0]["text"] if st == 200 else body))
        except Exception as e:  # noqa: BLE001 (every failure is reported)
            errors.append(repr(e))


for rnd in range(3):
    results.clear()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    check("round %d: 128 answers in time" % rnd, len(results) == 128 and not errors,
          "%d answers, errors %s" % (len(results), errors[:3]))
    bad = [r for r in results if r[1] != 200 or r[2] != expected[r[0]]]
    check("round %d: every answer correct" % rnd, not bad, bad[:3])
    if rnd == 0:
        rss0 = srv.rss_kib()
    print("round %d: %.1f s, RSS %d KiB" % (rnd, time.time() - t0, srv.rss_kib()), file=sys.stderr)
check("sequences back to 0 after the rounds",
      wait_for(lambda: srv.metrics()["recur_sequences_in_use"] == 0))
check("memory does not grow across rounds", srv.rss_kib() < rss0 + 16 * 1024,
      "%d -> %d KiB" % (rss0, srv.rss_kib()))

# ---- a client that disconnects frees its sequence (streamed or not) ------------------------
for stream in (True, False):
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": PROMPT, "n_predict": 20000, "ignore_eos": True,
                       "temperature": 0.8, "stream": stream})
    s.sendall(("POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body)).encode())
    if stream:
        s.recv(100)
    check("a request holds a sequence (stream %s)" % stream,
          wait_for(lambda: srv.metrics()["recur_sequences_in_use"] >= 1))
    s.close()
    check("a disconnected client's sequence is freed (stream %s)" % stream,
          wait_for(lambda: srv.metrics()["recur_sequences_in_use"] == 0, 5))

# ---- bad input: each a 4xx with an OpenAI-style error, the server still healthy --------------
def bad(name, status, *args, **kw):
    st, body, _ = srv.request(*args, **kw)
    ok = st == status and isinstance(body, dict) and set(body.get("error", {})) >= {
        "message", "type", "code"}
    check("bad input: " + name, ok, "%s %r" % (st, body))
    check("healthy after: " + name, srv.healthy())


bad("malformed JSON", 400, "POST", "/v1/completions", raw=b'{"prompt": "x",')
bad("not an object", 400, "POST", "/v1/completions", raw=b'[1, 2]')
bad("huge body", 413, "POST", "/v1/completions", raw=b"x" * (2 << 20))
bad("negative max_tokens", 400, "POST", "/v1/completions", {"prompt": "x", "max_tokens": -3})
bad("max_tokens over the limit", 400, "POST", "/v1/completions",
    {"prompt": "x", "max_tokens": 10 ** 9})
bad("invalid token ids", 400, "POST", "/v1/completions", {"prompt": [1, 2, 10 ** 8]})
bad("too many prompt tokens", 400, "POST", "/v1/completions", {"prompt": [5] * 9000})
bad("missing prompt", 400, "POST", "/v1/completions", {"max_tokens": 3})
bad("wrong type", 400, "POST", "/v1/completions", {"prompt": "x", "temperature": "hot"})
bad("empty prompt", 400, "POST", "/v1/completions", {"prompt": ""})
bad("wrong method", 405, "GET", "/v1/completions")
bad("unknown endpoint", 404, "POST", "/v2/nothing", {})
bad("too many stop strings", 400, "POST", "/v1/completions", {"prompt": "x", "stop": list("abcde")})
bad("n too large", 400, "POST", "/v1/completions", {"prompt": "x", "n": 1000})
slow = socket.create_connection(("127.0.0.1", srv.port))  # a slow client: half a request
slow.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro")
check("a slow client does not block others", srv.healthy() and srv.post(
    "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0})[0] == 200)
slow.close()

check("SIGTERM exits 0", srv.stop() == 0)

# ---- a request that takes longer than --timeout: 504, its sequence freed -------------------
quick = Server("-np", "1", "--timeout", "1", "--max-tokens", "100000")
st, body, _ = quick.post("/completion", {"prompt": PROMPT, "n_predict": 100000,
                                         "ignore_eos": True, "temperature": 0.8})
check("a request past --timeout: 504", st == 504 and body["error"]["message"] == "timed out",
      (st, body))
check("... its sequence is freed", wait_for(lambda: quick.metrics()["recur_sequences_in_use"] == 0))
check("... and the server answers the next one", quick.post(
    "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "temperature": 0})[0] == 200)
check("timeout server stops cleanly", quick.stop() == 0)

# ---- API key; a full queue; draining on SIGTERM -------------------------------------------
keyed = Server("-np", "1", "--queue", "0", "--api-key", "sekret")
st, body, _ = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
check("no API key: 401", st == 401 and body["error"]["type"] == "authentication_error", body)
st, body, _ = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                         headers={"Authorization": "Bearer wrong"})
check("a wrong API key: 401", st == 401, body)
st, body, _ = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "temperature": 0},
                         headers={"Authorization": "Bearer sekret"})
check("the right API key: 200", st == 200, body)
check("/health needs no key", keyed.healthy())
# the official openai npm package as a client (installed by the set-up under tests/serve/openai)
if os.path.isdir(os.path.join(HERE, "openai", "node_modules", "openai")):
    # a file of its own: several checkouts' suites may run at once on one machine
    fd, exp_path = tempfile.mkstemp(prefix="recur-openai-expected-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write(want + "\n")
    # slots for the chat test's n = 2
    client_srv = Server("-np", "4", "--api-key", "sekret")
    r = subprocess.run(["node", os.path.join(HERE, "openai", "test.mjs"),
                        "http://127.0.0.1:%d/v1" % client_srv.port, "sekret", exp_path],
                       capture_output=True, text=True, timeout=120)
    client_srv.proc.terminate()
    client_srv.proc.wait(timeout=30)
    check("the openai npm client: " + r.stdout.strip(), r.returncode == 0, r.stderr)
    os.unlink(exp_path)
else:
    check("the openai npm package is installed (tests/serve/openai; the set-up runs npm ci)", False)
long_result = {}


def long_request():
    long_result["r"] = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 300,
                                                      "temperature": 0.8},
                                  headers={"Authorization": "Bearer sekret"})


t = threading.Thread(target=long_request)
t.start()
wait_for(lambda: keyed.request("GET", "/metrics", headers={"Authorization": "Bearer sekret"})[1]
         .count("recur_sequences_in_use 1") == 1)
st, body, resp = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                            headers={"Authorization": "Bearer sekret"})
check("slots and queue full: 503 with Retry-After", st == 503 and
      resp.getheader("Retry-After") == "1", (st, body))
keyed.proc.send_signal(signal.SIGTERM)
t.join(timeout=60)
check("SIGTERM lets the request in flight finish", long_result.get("r", (0,))[0] == 200,
      long_result)
check("then the server exits 0", keyed.proc.wait(timeout=30) == 0)

print("test_serve: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
