#!/usr/bin/env python3
"""Figures of the prefix cache's second tier (--prefix-cache-store) for bench/RESULTS.md.

    python3 bench/store.py --recur build-test/tools/recur --model M [--turns 20] [--reps 3]

1. First-token time of turn k of a chat on a replica that has never seen the conversation:
   "tier 2" restores the history from Redis (another replica ran turns 1..k-1), "cold"
   decodes the whole history again (cache_prompt false). Each measurement starts a replica of
   its own (first tier empty, weights paged in by a one-token request) and sends the turn
   with a message of its own, so that only the history can come from the store. Turns of about 100 tokens (a user
   message and a greedy reply of --reply tokens). Interleaved: for each turn, the two are
   measured one after the other, --reps times, medians.
2. Redis's cost per state size: GET of a blob of each size over loopback (the transfer a
   restore makes), medians of 50.
3. nginx's added latency: /health and a 16-token completion straight to a replica and
   through nginx (deploy/nginx.conf.in), interleaved, medians.
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "serve"))
from serve_util import Redis, Server, free_port  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--recur", required=True)
ap.add_argument("--model", default=os.path.join(ROOT, "models", "recur-mamba-fortunes.gguf"))
ap.add_argument("--turns", type=int, default=20)
ap.add_argument("--reply", type=int, default=50)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()

WORDS = ("the stars say that a journey of some length will bring you to a door you have "
         "seen before and behind it a friend who remembers what you forgot about the rain").split()


def ttft(S, messages, cache, headers=None):
    body = {"messages": messages, "max_tokens": 1, "temperature": 0, "cache_prompt": cache}
    t0 = time.perf_counter()
    st, b, _ = S.post("/v1/chat/completions", body, headers=headers, timeout=600)
    dt = time.perf_counter() - t0
    u = b["usage"] if st == 200 else {}
    return dt, u.get("prompt_tokens", 0), u.get("prompt_tokens_details", {}).get("cached_tokens", 0)


rport = free_port()
redis = Redis(rport, "2gb")
url = "redis://127.0.0.1:%d" % rport
writer = Server(args.recur, args.model, "-np", "1", "--prefix-cache-store", url,
                threads=args.threads)
st, props, _ = writer.request("GET", "/props")
state = props["recur"]["state_bytes_per_sequence"]
print("model %s: %s, state %d bytes; %d threads" % (os.path.basename(args.model),
                                                   props["recur"]["architecture"], state,
                                                   args.threads))
print()
print("## first-token time of turn k on a replica new to the conversation (ms)")
print("| turn | prompt tokens | tier 2: restored | tier 2 | cold re-prefill | ratio |")
print("|---:|---:|---:|---:|---:|---:|")


def first_token(S, prompt, cache):
    t0 = time.perf_counter()
    st, b, _ = S.post("/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0,
                                      "cache_prompt": cache}, timeout=600)
    return time.perf_counter() - t0, b.get("tokens_cached", 0) if st == 200 else -1


# the conversation as token ids (its turns' text tokenized once, replies as generated), so
# that the history a turn restores is exactly the tokens the last turn left in the state
history = []
for k in range(1, args.turns + 1):
    text = "Turn %d. " % k + " ".join(WORDS[(k * 5 + i) % len(WORDS)] for i in range(70))
    st, tk, _ = writer.post("/tokenize", {"content": text})
    user = tk["tokens"]
    warm, cold, cached = [], [], 0
    for r in range(args.reps):
        # a message of its own per measurement, so that only the history can come from the
        # store (not an earlier repetition's prompt); a replica of its own (first tier empty,
        # weights paged in by a one-token request first, as the cold side does too)
        probe = history + [1000 + r] + user  # a token of its own right after the history
        for store in (True, False):
            extra = ["--prefix-cache-store", url] if store else []
            S = Server(args.recur, args.model, "-np", "1", *extra, threads=args.threads)
            S.post("/completion", {"prompt": [1], "n_predict": 1, "cache_prompt": False})
            t, c = first_token(S, probe, store)
            S.stop()
            (warm if store else cold).append(t)
            if store:
                cached = c
    w, c = statistics.median(warm), statistics.median(cold)
    print("| %d | %d | %d | %.1f | %.1f | %.1fx |" % (k, len(history) + len(user) + 1, cached,
                                                     1e3 * w, 1e3 * c, c / w))
    # the turn itself, on the writer: its end goes to Redis for the next turn
    st, b, _ = writer.post("/completion", {"prompt": history + user, "n_predict": args.reply,
                                           "temperature": 0, "ignore_eos": True,
                                           "return_tokens": True}, timeout=600)
    history = history + user + b["tokens"]
    time.sleep(0.3)  # the write is queued: let it land
writer.stop()

print()
print("## Redis GET over loopback, per state size (ms, median of 50)")
print("| state bytes | GET |")
print("|---:|---:|")
for size in (64 << 10, 1 << 20, state, 2831155, 10 << 20):
    redis.cmd("SET", "bench:blob", os.urandom(size))
    ts = []
    for _ in range(50):
        t0 = time.perf_counter()
        redis.cmd("GET", "bench:blob")
        ts.append(time.perf_counter() - t0)
    print("| %d | %.2f |" % (size, 1e3 * statistics.median(ts)))
redis.stop()

print()
print("## nginx's added latency (ms, medians, interleaved)")
tmp = tempfile.mkdtemp(prefix="recur-bench-nginx-")
env = dict(os.environ, RECUR=args.recur, RECUR_MODEL=args.model)
subprocess.run(["bash", os.path.join(ROOT, "deploy", "local.sh"), "up", tmp, "1"], env=env,
               check=True, stdout=subprocess.DEVNULL)
nport = int(open(os.path.join(tmp, "nginx.port")).read())
dport = int(open(os.path.join(tmp, "replica1.port")).read())


def timed(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.perf_counter()
    conn.request(method, path, body=json.dumps(body).encode() if body else None,
                 headers={"X-Session-Id": "bench"})
    conn.getresponse().read()
    dt = time.perf_counter() - t0
    conn.close()
    return dt


rows = {"direct": ([], []), "nginx": ([], [])}
comp = {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0}
for _ in range(100):
    for name, port in (("direct", dport), ("nginx", nport)):
        rows[name][0].append(timed(port, "GET", "/health"))
for _ in range(20):
    for name, port in (("direct", dport), ("nginx", nport)):
        rows[name][1].append(timed(port, "POST", "/completion", comp))
print("| path | /health | /completion (16 tokens) |")
print("|---|---:|---:|")
for name in ("direct", "nginx"):
    h, c = rows[name]
    print("| %s | %.2f | %.1f |" % (name, 1e3 * statistics.median(h), 1e3 * statistics.median(c)))
subprocess.run(["bash", os.path.join(ROOT, "deploy", "local.sh"), "down", tmp])
