#!/usr/bin/env python3
"""The embeddings endpoints of `recur serve --embedding` (tools/serve/embed.c): POST
/v1/embeddings (OpenAI's shape), /embeddings and /embedding (llama-server's), python3 standard
library only.

    test_serve_embed.py RECUR_BIN MODEL HYBRID_MODEL

What is compared with what:
  - the server's vectors against `recur embed` (the CLI: another batching of the same texts,
    --embd-normalize -1, normalised here in python as llama.cpp's common_embd_normalize does),
    within 1e-5;
  - several inputs in one request (one decode: /metrics' decode steps grow by one) against each
    input alone, within 1e-5;
  - base64 decoded here (little-endian float32) against the floats: equal;
  - embd_normalize -1/0/1/2/3 against the raw vector normalised here;
  - pooling none's per-token rows (not normalised, llama-server's rule) against the CLI's;
  - usage.prompt_tokens against /tokenize's counts;
  - 501 without --embedding (llama-server's exact message), 501 for completions with it, 400
    naming the field for bad input, a bad request beside a good one leaving the good one's answer
    as it is alone; a hybrid's -c refusing a long input;
  - the official openai npm client (tests/serve/openai/embed.mjs): float and base64.
"""

import base64
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import threading

RECUR, MODEL, HYBRID = sys.argv[1:4]
from serve_util import check, counts, skip
import serve_util

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-5


def Server(*args, model=MODEL):
    return serve_util.Server(RECUR, model, *args)


def normalize(v, norm):
    """llama.cpp's common_embd_normalize, in double."""
    if norm == -1:
        s = 1.0
    elif norm == 0:
        s = max(abs(x) for x in v) / 32760.0
    elif norm == 2:
        s = math.sqrt(sum(x * x for x in v))
    else:
        s = sum(abs(x) ** norm for x in v) ** (1.0 / norm)
    return [x / s if s > 0 else 0.0 for x in v]


def diff(a, b):
    if len(a) != len(b):
        return float("inf")
    return max(abs(x - y) for x, y in zip(a, b))


def cli(texts, pooling, norm=-1):
    r = subprocess.run([RECUR, "embed", "-m", MODEL, "-t", "2", "-p", "\n".join(texts),
                        "--pooling", pooling, "--embd-normalize", str(norm),
                        "--embd-output-format", "array"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


TEXTS = ["The quick brown fox", "jumps over the lazy dog.", "A", "Recurrent models read text "
         "one token at a time, and their state carries all of it."]

# ---- without --embedding: llama-server's 501 ----------------------------------------------
NOT_SUPPORTED = "This server does not support embeddings. Start it with `--embeddings`"
plain = Server("-np", "2")
for path in ("/v1/embeddings", "/embeddings", "/embedding"):
    st, body, _ = plain.post(path, {"input": "hello"})
    check("no --embedding: %s answers 501" % path, st == 501, (st, body))
    check("no --embedding: %s's message is llama-server's" % path,
          isinstance(body, dict) and body.get("error", {}).get("message") == NOT_SUPPORTED and
          body["error"].get("type") == "not_supported_error", body)
plain.stop()

# ---- --embedding (pooling last, the default) ------------------------------------------------
srv = Server("--embedding", "-np", "4")
st, body, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
check("--embedding: completions answer 501 with llama-server's message",
      st == 501 and body["error"]["message"] == "This server does not support completions. Start "
      "it without `--embeddings`", (st, body))
st, body, _ = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
check("--embedding: chat completions answer 501", st == 501, (st, body))

raw = cli(TEXTS, "last")  # the CLI's vectors, not normalised
E = len(raw[0])
st, props, _ = srv.request("GET", "/props")
n_embd = props.get("n_embd") if isinstance(props, dict) else None

st, one, _ = srv.post("/v1/embeddings", {"input": TEXTS[0], "model": "my-model", "user": "u1"})
check("a string: 200", st == 200, one)
check("a string: OpenAI's shape", st == 200 and one["object"] == "list" and
      len(one["data"]) == 1 and one["data"][0]["object"] == "embedding" and
      one["data"][0]["index"] == 0 and one["model"] == "my-model", one)
v = one["data"][0]["embedding"]
check("the embedding has n_embd values", len(v) == E, (len(v), E))
check("its euclidean norm is 1 (embd_normalize 2, the default)",
      abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-6)
d = diff(v, normalize(raw[0], 2))
check("it is the CLI's vector, L2-normalised here (%.2g)" % d, d < TOL)

ntok = [len(srv.post("/tokenize", {"content": t, "add_special": True})[1]["tokens"])
        for t in TEXTS]
check("usage: the prompt's tokens", one["usage"]["prompt_tokens"] == ntok[0] and
      one["usage"]["total_tokens"] == ntok[0], (one["usage"], ntok))

# several inputs in one request: one decode, each as alone
steps0 = srv.metrics().get("recur_decode_steps_total")
st, many, _ = srv.post("/v1/embeddings", {"input": TEXTS})
steps1 = srv.metrics().get("recur_decode_steps_total")
check("4 inputs: 4 embeddings in order", st == 200 and
      [e["index"] for e in many["data"]] == [0, 1, 2, 3], many)
check("4 inputs on 4 slots: one decode (steps %s -> %s)" % (steps0, steps1),
      steps0 is not None and steps1 == steps0 + 1)
worst = 0.0
for i, t in enumerate(TEXTS):
    alone = srv.post("/v1/embeddings", {"input": t})[1]["data"][0]["embedding"]
    worst = max(worst, diff(many["data"][i]["embedding"], alone))
    worst = max(worst, diff(many["data"][i]["embedding"], normalize(raw[i], 2)))
check("batched = alone = the CLI's, within 1e-5 (max %.2g)" % worst, worst < TOL)
print("batched vs alone vs CLI: max difference %.3g" % worst)
check("usage sums the inputs' tokens", many["usage"]["prompt_tokens"] == sum(ntok),
      (many["usage"], ntok))

# token ids: one list is one input, a list of lists several
ids = [srv.post("/tokenize", {"content": t, "add_special": True})[1]["tokens"] for t in TEXTS[:2]]
st, by_ids, _ = srv.post("/v1/embeddings", {"input": ids[0]})
check("token ids: the string's embedding",
      st == 200 and diff(by_ids["data"][0]["embedding"], v) < TOL, by_ids)
st, by_lists, _ = srv.post("/v1/embeddings", {"input": ids})
check("a list of token-id lists: each input's embedding", st == 200 and
      len(by_lists["data"]) == 2 and
      diff(by_lists["data"][1]["embedding"], many["data"][1]["embedding"]) < TOL, by_lists)

# base64: little-endian float32, equal to the floats
st, b64, _ = srv.post("/v1/embeddings", {"input": TEXTS, "encoding_format": "base64"})
ok = st == 200
for i in range(len(TEXTS)):
    if not ok:
        break
    raw_bytes = base64.b64decode(b64["data"][i]["embedding"])
    f = list(struct.unpack("<%df" % (len(raw_bytes) // 4), raw_bytes))
    ok = f == [struct.unpack("<f", struct.pack("<f", x))[0] for x in many["data"][i]["embedding"]]
check("base64 decodes to the float answer, bit for bit", ok, b64 if st != 200 else "")

# embd_normalize
for norm in (-1, 0, 1, 3):
    st, body, _ = srv.post("/v1/embeddings", {"input": TEXTS[0], "embd_normalize": norm})
    d = diff(body["data"][0]["embedding"], normalize(raw[0], norm)) if st == 200 else 1
    scale = 32760.0 if norm == 0 else 1.0
    check("embd_normalize %d: as computed here (%.2g)" % (norm, d), d < TOL * scale, body)

# llama-server's shapes: [{"index", "embedding": [[...]]}]
for path, field in (("/embeddings", "input"), ("/embedding", "content"), ("/embedding", "input")):
    st, body, _ = srv.post(path, {field: TEXTS[:2]})
    ok = (st == 200 and isinstance(body, list) and len(body) == 2 and
          all(body[i]["index"] == i and len(body[i]["embedding"]) == 1 for i in range(2)))
    check("%s with %s: llama-server's shape" % (path, field), ok, body)
    if ok:
        d = max(diff(body[i]["embedding"][0], many["data"][i]["embedding"]) for i in range(2))
        check("%s: the pooled rows, normalised (%.2g)" % (path, d), d < TOL)
st, body, _ = srv.post("/v1/embeddings", {"input": ["hello", 5, "world"]})
check("ids and strings mixed in one list: one input (llama-server's mixed prompt)",
      st == 200 and len(body["data"]) == 1, body)
st, body, _ = srv.post("/v1/embeddings", {"input": ["the same"] * 3, "dimensions": E})
check("dimensions = n_embd is accepted", st == 200, body)

# errors, each naming its field
def refused(name, path, req, needle):
    st, body, _ = srv.post(path, req)
    msg = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
    check("%s: 400 naming it (%s)" % (name, msg), st == 400 and needle in msg, (st, body))


refused("no input", "/v1/embeddings", {"model": "x"}, '"input" is required')
refused("an empty string", "/v1/embeddings", {"input": ""}, '"input" is empty')
refused("an empty list", "/v1/embeddings", {"input": []}, '"input" is empty')
refused("an empty string in a list", "/v1/embeddings", {"input": ["a", ""]}, '"input"[1] is empty')
refused("a number", "/v1/embeddings", {"input": 5}, '"input" must be')
refused("an object in a list", "/v1/embeddings", {"input": ["a", {"x": 1}]}, '"input"[1]')
refused("a token out of the vocabulary", "/v1/embeddings", {"input": [1, 10 ** 7]},
        '"input"[1] is not a token id')
refused("an unknown field", "/v1/embeddings", {"input": "a", "temperature": 1}, "temperature")
refused("content on /v1/embeddings", "/v1/embeddings", {"content": "a"}, "content")
refused("encoding_format bogus", "/v1/embeddings", {"input": "a", "encoding_format": "hex"},
        "encoding_format")
refused("base64 on /embeddings", "/embeddings", {"input": "a", "encoding_format": "base64"},
        "encoding_format")
refused("dimensions not n_embd", "/v1/embeddings", {"input": "a", "dimensions": 3}, "dimensions")
refused("embd_normalize -2", "/v1/embeddings", {"input": "a", "embd_normalize": -2},
        "embd_normalize")
refused("model not a string", "/v1/embeddings", {"input": "a", "model": 3}, '"model"')
refused("too many inputs", "/v1/embeddings", {"input": ["a"] * 300}, '"input" has 300 inputs')
refused("an input longer than the batch", "/v1/embeddings", {"input": "word " * 3000},
        '"input" has')

# a bad request beside good ones changes nothing in theirs
results = {}


def send(key, req):
    results[key] = srv.post("/v1/embeddings", req)


threads = [threading.Thread(target=send, args=("good%d" % i, {"input": TEXTS})) for i in range(3)]
threads += [threading.Thread(target=send, args=("bad%d" % i, {"input": ["ok", [1, -5]]}))
            for i in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
good_ok = all(results["good%d" % i][0] == 200 and
              max(diff(results["good%d" % i][1]["data"][k]["embedding"],
                       many["data"][k]["embedding"]) for k in range(4)) < TOL for i in range(3))
check("good requests beside bad ones: their answers as alone", good_ok)
check("the bad ones: 400", all(results["bad%d" % i][0] == 400 for i in range(3)),
      [results["bad%d" % i] for i in range(3)])
check("the server is healthy after them", srv.healthy())

# the official openai client
if os.path.isdir(os.path.join(HERE, "openai", "node_modules", "openai")):
    fd, exp_path = tempfile.mkstemp(prefix="recur-openai-embed-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"inputs": TEXTS, "embeddings": [e["embedding"] for e in many["data"]],
                   "prompt_tokens": sum(ntok)}, f)
    r = subprocess.run(["node", os.path.join(HERE, "openai", "embed.mjs"),
                        "http://127.0.0.1:%d/v1" % srv.port, "none", exp_path],
                       capture_output=True, text=True, timeout=120)
    check("the openai npm client: " + r.stdout.strip(), r.returncode == 0, r.stderr)
    os.unlink(exp_path)
else:
    check("the openai npm package is installed (tests/serve/openai; the set-up runs npm ci)", False)
srv.stop()

# ---- --pooling none: /v1/embeddings refused, /embeddings every token's row ----------------
none = Server("--embedding", "--pooling", "none", "-np", "2")
st, body, _ = none.post("/v1/embeddings", {"input": "a"})
check("pooling none: /v1/embeddings refused with llama-server's message",
      st == 400 and body["error"]["message"] == "Pooling type 'none' is not OAI compatible. "
      "Please use a different pooling type", (st, body))
tok_rows = cli(TEXTS[:2], "none")  # every token's row, not normalised, both inputs in order
st, body, _ = none.post("/embeddings", {"input": TEXTS[:2], "embd_normalize": 2})
ok = st == 200 and [len(b["embedding"]) for b in body] == ntok[:2]
check("pooling none: a row per token", ok, body if st != 200 else [len(b["embedding"]) for b in body])
if ok:
    rows = body[0]["embedding"] + body[1]["embedding"]
    d = max(diff(a, b) for a, b in zip(rows, tok_rows))
    check("pooling none: the rows are the CLI's, not normalised (%.2g)" % d, d < TOL)
    d = diff(body[0]["embedding"][-1], raw[0])
    check("pooling none: the last row is pooling last's vector (%.2g)" % d, d < TOL)
none.stop()

# ---- a hybrid (attention rows): -c refuses a longer input ------------------------------------
hyb = Server("--embedding", "-np", "2", "-c", "16", model=HYBRID)
st, body, _ = hyb.post("/v1/embeddings", {"input": list(range(1, 30))})
check("hybrid, -c 16: a 29-token input is refused naming -c",
      st == 400 and "-c" in body["error"]["message"], (st, body))
st, body, _ = hyb.post("/v1/embeddings", {"input": [[1, 2, 3], [4, 5, 6, 7]]})
check("hybrid: short inputs embed", st == 200 and len(body["data"]) == 2, body)
if st == 200:
    alone = hyb.post("/v1/embeddings", {"input": [4, 5, 6, 7]})[1]["data"][0]["embedding"]
    d = diff(body["data"][1]["embedding"], alone)
    check("hybrid: batched = alone (%.2g)" % d, d < TOL)
hyb.stop()

print("test_serve_embed: %d passed, %d failed" % (counts["passed"], counts["failed"]))
sys.exit(counts.exit_status())
